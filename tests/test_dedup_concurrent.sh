#!/usr/bin/env bash
# test_dedup_concurrent.sh PERCOLATOR DEDUP_PLUGIN (embedded|cluster) — the
# dedup application (apps/dedup/) under concurrent loaders, while workers run:
#   embedded: one `percolator worker --config` holds the data directory and
#             serves it; the loaders reach it through DIR/serving.json.
#   cluster:  a cluster from `percolator playground` (an oracle and two
#             tablets in one `percolator run`, its private ZooKeeper server;
#             dedup_lib.sh) and two `percolator worker` processes running the
#             plugin.
# Three `load` processes at once write the same 200 URLs, each from its own
# JSON-lines file, with contents drawn from five texts (so clusters form,
# grow, lose members and change canonical while observers run). Then deletes
# and re-adds of the same 40 URLs race: a `load --delete` process, a run of
# plain `percolator delete` processes, and two `load` processes re-adding
# them with other texts, all at once; then 20 other URLs are deleted while
# 20 more are rewritten. After `wait`, `check` exits 0 and `clusters`
# equals the grouping of the final contents (read back with `scan docs
# --json`) by sha256sum.
# Every CLI call runs under `timeout`; a trap kills what was started here.
set -u
CLI=${1:?usage: test_dedup_concurrent.sh PERCOLATOR DEDUP_PLUGIN embedded|cluster}
PLUGIN=${2:?usage: test_dedup_concurrent.sh PERCOLATOR DEDUP_PLUGIN embedded|cluster}
MODE=${3:?usage: test_dedup_concurrent.sh PERCOLATOR DEDUP_PLUGIN embedded|cluster}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN" >&2; exit 1; }
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-dedup-conc-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/dedup_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

WORKERS=()
case "$MODE" in
  embedded)
    D="$WORK/data"
    run_cli 10 --data "$D" init
    [ "$RC" = 0 ] || fail "init: $(cat "$WORK/last.err")"
    printf '{"data_dir": "%s", "workers": {"threads": 3, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
      "$D" "$PLUGIN" >"$WORK/worker.json"
    "$CLI" --config "$WORK/worker.json" worker 2>"$WORK/worker-1.log" &
    WORKERS+=($!)
    PIDS+=($!)
    wait_file "$D/serving.json" "${WORKERS[0]}"
    AT=(--data "$D")
    ;;
  cluster)
    dedup_cluster_start m '{"lock_ttl_ms": 1000, "timeout_ms": 20000}' '{"idle_ms": 20}'
    for i in 1 2; do
      "$CLI" "${AT[@]}" worker 2>"$WORK/worker-$i.log" &
      WORKERS+=($!)
      PIDS+=($!)
    done
    for _ in $(seq 300); do
      run_cli 10 "${AT[@]}" observers
      [[ "$OUT" == *dedup* ]] && break
      sleep 0.1
    done
    [[ "$OUT" == *dedup* ]] || fail "observers does not list dedup: $OUT"
    ;;
  *) fail "unknown mode $MODE (embedded or cluster)" ;;
esac

# 200 URLs (both tablets: rows a/... and x/...), five texts; loader L gives
# URL i the text (i * (L + 1) + L) % 5, so the loaders disagree on most URLs
for l in 1 2 3; do
  awk -v l="$l" 'BEGIN { split("Alpha beta gamma.|alpha BETA gamma|Delta epsilon, zeta|eta theta iota kappa|lambda mu", t, "|")
      for (i = 0; i < 200; i++) printf "{\"url\": \"%s/%03d\", \"contents\": \"%s\"}\n",
        (i % 2 ? "x" : "a"), i, t[1 + (i * (l + 1) + l) % 5] }' >"$WORK/load-$l.jsonl"
done
LOADERS=()
for l in 1 2 3; do
  timeout -k 5 300 "$CLI" "${AT[@]}" load --threads 3 "$WORK/load-$l.jsonl" >"$WORK/load-$l.out" 2>"$WORK/load-$l.err" &
  LOADERS+=($!)
  PIDS+=($!)
done
for l in 1 2 3; do
  wait "${LOADERS[$((l - 1))]}"
  RC=$?
  [ "$RC" = 0 ] || fail "loader $l exited $RC: $(cat "$WORK/load-$l.err")"
  grep -q "^loaded 200 documents in .*failed 0$" "$WORK/load-$l.out" || fail "loader $l: $(cat "$WORK/load-$l.out")"
done
pass "three loaders wrote the same 200 URLs at once ($MODE)"

url() { # url I: the URL of number I, into U (no subshell: forks are slow on a loaded machine)
  if [ $(($1 % 2)) = 1 ]; then printf -v U 'x/%03d' "$1"; else printf -v U 'a/%03d' "$1"; fi
}

# the race: URLs 0, 3, ..., 117 deleted (load --delete for the first 27, plain
# deletes for the last 27: they overlap) and re-added by two loaders at once
RACE=() LDEL=() PDEL=()
for i in $(seq 0 3 117); do
  url "$i"
  RACE+=("$U")
  [ "$i" -lt 80 ] && LDEL+=("$U")
  [ "$i" -ge 40 ] && PDEL+=("$U")
done
for r in 1 2; do
  for i in $(seq 0 3 117); do
    url "$i"
    printf '{"url": "%s", "contents": "re-added %s: %s"}\n' "$U" "$r" "$(( (i + r) % 3 ))"
  done >"$WORK/readd-$r.jsonl"
done
# plain deletes: a `txn` session (a transaction per URL; one that loses a
# conflict to a re-adder leaves the URL to it) and a few `delete` processes
plain_deletes() {
  local u i=0
  for u in "${PDEL[@]}"; do printf 'begin\ndelete docs %s doc:contents\ncommit\n' "$u"; done |
    timeout -k 5 120 "$CLI" "${AT[@]}" txn >"$WORK/txn-deletes.out" || return 1
  grep -c '^ok commit_ts=[1-9]' "$WORK/txn-deletes.out" >"$WORK/txn-deletes.count"
  for u in "${PDEL[@]}"; do
    [ $((i++ % 5)) = 0 ] || continue
    timeout -k 5 60 "$CLI" "${AT[@]}" delete docs "$u" doc:contents || return 1
  done
}
timeout -k 5 120 "$CLI" "${AT[@]}" load --delete "${LDEL[@]}" >"$WORK/del-1.out" 2>"$WORK/del-1.err" &
D1=$!
plain_deletes >"$WORK/del-2.out" 2>"$WORK/del-2.err" &
D2=$!
RA=()
for r in 1 2; do
  timeout -k 5 120 "$CLI" "${AT[@]}" load --threads 2 "$WORK/readd-$r.jsonl" >"$WORK/readd-$r.out" 2>"$WORK/readd-$r.err" &
  RA+=($!)
done
PIDS+=("$D1" "$D2" "${RA[@]}")
wait "$D1" # a URL a plain delete took first is not found (exit 1)
[ $? -le 1 ] || fail "load --delete: $(cat "$WORK/del-1.err")"
wait "$D2" || fail "plain deletes: $(cat "$WORK/del-2.err")"
[ "$(cat "$WORK/txn-deletes.count")" -ge 1 ] || fail "no plain delete committed: $(cat "$WORK/txn-deletes.out")"
for r in 1 2; do
  wait "${RA[$((r - 1))]}" || fail "re-adder $r: $(cat "$WORK/readd-$r.err")"
done
grep -q "failed 0" "$WORK/del-1.out" || fail "deletes failed: $(cat "$WORK/del-1.out")"
for r in 1 2; do
  grep -q "^loaded 40 documents in .*failed 0$" "$WORK/readd-$r.out" || fail "re-adder $r: $(cat "$WORK/readd-$r.out")"
done

# then 20 URLs deleted (120, 123, ..., 177) while 20 others are rewritten
GONE=()
for i in $(seq 120 3 177); do
  url "$i"
  GONE+=("$U")
done
for i in $(seq 180 199); do
  url "$i"
  printf '{"url": "%s", "contents": "Delta epsilon, zeta"}\n' "$U"
done >"$WORK/late.jsonl"
timeout -k 5 120 "$CLI" "${AT[@]}" load --delete "${GONE[@]}" >"$WORK/del-3.out" 2>"$WORK/del-3.err" &
D3=$!
timeout -k 5 120 "$CLI" "${AT[@]}" load "$WORK/late.jsonl" >"$WORK/late.out" 2>"$WORK/late.err" &
L3=$!
PIDS+=("$D3" "$L3")
wait "$D3" || fail "deleter 3: $(cat "$WORK/del-3.err")"
wait "$L3" || fail "late loader: $(cat "$WORK/late.err")"
pass "deletes and re-adds of the same URLs raced from four processes ($MODE)"

run_cli 200 "${AT[@]}" wait --timeout-s 180
[ "$RC" = 0 ] || fail "wait exited $RC: $(cat "$WORK/last.err")"
run_cli 120 "${AT[@]}" check
[ "$RC" = 0 ] || fail "check exited $RC: $OUT $(cat "$WORK/last.err")"

# the expected clusters from the final contents: HASH SIZE CANONICAL MEMBER...
run_cli 60 "${AT[@]}" scan docs --json
[ "$RC" = 0 ] || fail "scan docs: $(cat "$WORK/last.err")"
dedup_want_clusters
# every URL outside the race is there but the 20 deleted last; a raced URL
# may be there or not, whichever process came last
HAVE=$(sed -n 's/^{"row":"\([^"]*\)","column":"doc:contents".*$/\1/p' <<<"$OUT" | sort)
for u in "${GONE[@]}"; do grep -qx "$u" <<<"$HAVE" && fail "$u is still in docs"; done
RACED=$(printf '%s\n' "${RACE[@]}" | sort)
WANT_DOCS=$((200 - 20 - 40 + $(comm -12 <(echo "$RACED") <(echo "$HAVE") | wc -l)))
[ "$(awk -F'\t' '{ s += $2 } END { print s + 0 }' "$WORK/clusters.want")" = "$WANT_DOCS" ] ||
  fail "the docs table does not hold $WANT_DOCS documents: $(cat "$WORK/clusters.want")"
[ "$(wc -l <"$WORK/clusters.want")" -ge 2 ] || fail "fewer than two clusters formed"
dedup_check_clusters "${AT[@]}"
pass "$WANT_DOCS documents after concurrent loads and deletes ($MODE): check finds no difference; clusters equal sha256sum's grouping"

for w in "${WORKERS[@]}"; do kill -TERM "$w"; done
for w in "${WORKERS[@]}"; do
  wait_exit "$w" 30
  [ "$RC" = 0 ] || fail "a worker exited $RC on SIGTERM"
done
if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1; then
  fail "a sanitizer report"
fi
echo PASS
