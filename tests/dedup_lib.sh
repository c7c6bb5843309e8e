# dedup_lib.sh — what the dedup application's test scripts share (sourced,
# not run): a two-tablet cluster from the playground, and the clusters a
# correct index must hold, computed from the final contents by sha256sum.
# Needs cli_lib.sh, and the script's WORK, CLI, PLUGIN and PIDS; but
# dedup_programs, which a script calls first, needs nothing.

# dedup_programs: makes CLI, PLUGIN and CORPUS absolute paths and exits 1,
# naming it, when one is not there.
dedup_programs() {
  case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
  case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
  case "$CORPUS" in /*) ;; *) CORPUS="$PWD/$CORPUS" ;; esac
  [ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
  [ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN" >&2; exit 1; }
  [ -x "$CORPUS" ] || { echo "not executable: $CORPUS" >&2; exit 1; }
}

# dedup_cluster_start SPLIT STORE SCAN: starts a cluster through `percolator
# playground` (pg_start: its private ZooKeeper, an oracle and tablets t1 ["",
# SPLIT) and t2 [SPLIT, "") in one `percolator run`) with 6 s sessions (a busy
# machine can hold a process for longer than 3 s) and a zookeeper.secret (so
# every node of the cluster admits only its processes), but no worker: the
# tests start theirs. STORE is the cluster's "store" object (the servers' and
# the clients'), SCAN the workers' "scan" object; the client configuration
# ($C) has two observer threads and the plugin. Sets AT (the CLI options
# that reach the cluster).
dedup_cluster_start() {
  local split=$1 store=$2 scan=$3
  cat >"$WORK/pg-extra.json" <<JSON
{"store": $store,
 "zookeeper": {"session_timeout_ms": 6000, "secret": "dedup-zk-secret"},
 "workers": {"threads": 2, "backoff_ms": 50, "scan": $scan}}
JSON
  pg_start "$WORK/pg" --one-process --oracles 1 --servers 0 --split "$split" \
    --plugin "$PLUGIN" --workers 0 --extra-config "$WORK/pg-extra.json"
  AT=(--config "$C")
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
