# dedup_lib.sh — what the dedup application's test scripts share (sourced,
# not run): a two-tablet cluster on a private ZooKeeper, and the clusters a
# correct index must hold, computed from the final contents by sha256sum.
# Needs cli_lib.sh and zk_lib.sh, and the script's WORK, CLI, PLUGIN and PIDS.

# dedup_cluster_start ROOT SPLIT STORE SCAN: starts a private ZooKeeper and
# `percolator run` (an oracle and tablets t1 ["", SPLIT) and t2 [SPLIT, ""))
# under the ZooKeeper root ROOT with 6 s sessions (a busy machine
# can hold a process for longer than 3 s) and a zookeeper.secret (so every
# node of the cluster admits only its processes); STORE is run.json's
# "store" object, SCAN the workers' "scan" object in client.json. Writes
# $WORK/run.json and $WORK/client.json (two observer threads, the plugin),
# sets RUN (the pid of `run`) and AT (the CLI options that reach the cluster).
dedup_cluster_start() {
  local root=$1 split=$2 store=$3 scan=$4
  zk_start
  cat >"$WORK/run.json" <<JSON
{"data_dir": "$WORK/data", "log": {"level": "warn"},
 "store": $store,
 "tso": {"listen": "127.0.0.1:0"},
 "zookeeper": {"connect": "$ZK_CONNECT", "root": "$root", "session_timeout_ms": 6000,
               "secret": "dedup-zk-secret"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0", "end": "$split"},
             {"name": "t2", "listen": "127.0.0.1:0", "start": "$split"}]}
JSON
  "$CLI" run --config "$WORK/run.json" --ready-file "$WORK/ready.json" 2>"$WORK/run.log" &
  RUN=$!
  PIDS+=("$RUN")
  wait_file "$WORK/ready.json" "$RUN"
  cat >"$WORK/client.json" <<JSON
{"store": {"lock_ttl_ms": 1000, "timeout_ms": 20000},
 "tso": {"listen": "$(endpoint "$WORK/ready.json" tso)"},
 "zookeeper": {"connect": "$ZK_CONNECT", "root": "$root", "session_timeout_ms": 6000,
               "secret": "dedup-zk-secret"},
 "tablets": [{"name": "t1", "listen": "$(endpoint "$WORK/ready.json" t1)", "end": "$split"},
             {"name": "t2", "listen": "$(endpoint "$WORK/ready.json" t2)", "start": "$split"}],
 "workers": {"threads": 2, "backoff_ms": 50, "scan": $scan,
             "plugins": [{"path": "$PLUGIN"}]}}
JSON
  AT=(--config "$WORK/client.json")
}

# dedup_want_clusters: from $OUT, the output of `scan docs --json`, writes
# $WORK/clusters.want: a line per cluster of the final contents, "HASH SIZE
# CANONICAL MEMBER..." (tab-separated; the canonical URL is the smallest),
# as `clusters` prints them. Sets DOCS, the number of documents.
dedup_want_clusters() {
  local u contents urls=()
  DOCS=0
  rm -rf "$WORK/final"
  mkdir -p "$WORK/final"
  # each document's contents into a file named by its number, then one sha256sum
  while IFS=$'\t' read -r u contents; do
    printf '%s' "$contents" >"$WORK/final/$DOCS"
    urls+=("$u")
    DOCS=$((DOCS + 1))
  done < <(sed -n 's/^{"row":"\([^"]*\)","column":"doc:contents","value":"\([^"]*\)"}$/\1\t\2/p' <<<"$OUT")
  [ "$DOCS" -gt 0 ] || fail "scan docs --json listed no document"
  (cd "$WORK/final" && sha256sum -- $(seq 0 $((DOCS - 1)))) |
    while read -r h f; do printf '%s\t%s\n' "$h" "${urls[$f]}"; done |
    sort -t $'\t' -k1,1 -k2,2 |
    awk -F'\t' '{ if ($1 != h) { if (h != "") print h "\t" n "\t" c m; h = $1; n = 0; c = $2; m = "" }
                  n++; m = m "\t" $2 }
                END { if (h != "") print h "\t" n "\t" c m }' | sort >"$WORK/clusters.want"
}

# dedup_check_clusters ARGS...: `clusters` (reached with ARGS) prints exactly
# $WORK/clusters.want, or the test fails with the difference.
dedup_check_clusters() {
  run_cli 60 "$@" clusters
  [ "$RC" = 0 ] || fail "clusters exited $RC: $(cat "$WORK/last.err")"
  sort <<<"$OUT" >"$WORK/clusters.have"
  diff "$WORK/clusters.want" "$WORK/clusters.have" >"$WORK/clusters.diff" ||
    fail "clusters differ from sha256sum's grouping of the final contents: $(head -n 20 "$WORK/clusters.diff")"
}
