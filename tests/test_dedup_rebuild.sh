#!/usr/bin/env bash
# test_dedup_rebuild.sh PERCOLATOR DEDUP_PLUGIN CORPUS [BATCH] — the dedup
# application (apps/dedup/) loading documents into a replicated cluster
# while one of its servers is killed and rebuilt from an empty directory.
# BATCH (400; a multiple of 10) sizes the load; a sanitizer build passes a
# smaller one.
#
# `percolator playground --servers 3 --replicas 3`: a private ZooKeeper
# server, an oracle, servers s1..s3, and three tablets (rows ["", "8"): the
# index's binary rows and the hashes below 8; ["8", "doc/<half>"); the rest),
# each a Raft group with a replica on every server, and two worker processes
# running the dedup plugin. Documents of generated English-like text
# (bench/corpus.c's generator, each cut to its first line: 30 % exact copies,
# so clusters form) are loaded by `percolator load --json` (every document's
# outcome), in batches one after the other (1 to 3 at 250 documents a
# second, so that each step below comes while documents are loaded):
#   1. BATCH new documents, every server up;
#   2. BATCH new ones: as it starts, the server leading the most tablets
#      (its /metrics) is killed with SIGKILL and its data directory deleted;
#   3. BATCH new ones and BATCH * 3 / 10 rewrites of batch 1's URLs with other
#      documents' text: as it starts, the server is started again on its
#      empty directory (`percolator tablet --name sN`, the playground's
#      configuration), so it rejoins its groups under a new incarnation and
#      catches up from snapshots while documents are loaded;
# then `percolator wait`, and the rebuilt server holds a voting replica of
# every tablet: each tablet's leader lists its new incarnation and no longer
# its old one, and it received a snapshot of each. Then another server is
# killed with SIGKILL, so that no commit can be made without the rebuilt
# replica's vote, and
#   4. BATCH / 5 new documents are loaded, and `percolator wait` returns.
# Checked: no document's load failed (each is ok, or unknown when its
# commit's reply was lost); `check` exits 0; `clusters` equals the grouping
# of the final contents (`scan docs --json`) by sha256sum; every document
# whose last load was acknowledged holds what that load wrote, and every
# URL acknowledged is there. Every CLI call runs under `timeout`; a trap
# stops what was started here.
set -u
USAGE="usage: test_dedup_rebuild.sh PERCOLATOR DEDUP_PLUGIN CORPUS [BATCH]"
CLI=${1:?$USAGE}
PLUGIN=${2:?$USAGE}
CORPUS=${3:?$USAGE}
B=${4:-400}
[ "$B" -ge 10 ] && [ $((B % 10)) = 0 ] || { echo "BATCH must be a multiple of 10: $B" >&2; exit 1; }
R=$((B * 3 / 10)) LAST=$((B / 5))
NEW=$((3 * B)) TOTAL=$((3 * B + R + B / 5)) FINAL=$((3 * B + B / 5))
printf -v SPLIT 'doc/%07d' $((FINAL / 2))
. "$(dirname "$0")/dedup_lib.sh"
dedup_programs
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-dedup-rebuild-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
PG= REBUILT=
# the playground stops its roles in order on SIGINT; the server started
# again here is this script's own; the loader's current `timeout` passes
# SIGTERM on to its `load`
stop_all() {
  kill -TERM "$(cat "$WORK/loader.pid" 2>/dev/null)" 2>/dev/null
  if [ -n "$REBUILT" ]; then kill -TERM "$REBUILT" 2>/dev/null; wait "$REBUILT" 2>/dev/null; fi
  if [ -n "$PG" ]; then
    kill -INT "$PG" 2>/dev/null
    for _ in $(seq 1200); do kill -0 "$PG" 2>/dev/null || break; sleep 0.05; done
  fi
}
trap 'stop_all; cli_cleanup' EXIT
cd "$WORK" || exit 1

# the documents: each cut to its first line
timeout -k 5 60 "$CORPUS" generate --docs "$((NEW + R + LAST))" --seed 23 --jsonl corpus.jsonl ||
  fail "the corpus generator failed"
sed 's/\\n.*"}$/"}/' corpus.jsonl >docs.jsonl
[ "$(grep -c '^{"url": "doc/[0-9]*", "contents": "[^"\\]*"}$' docs.jsonl)" = "$((NEW + R + LAST))" ] ||
  fail "unexpected corpus lines: $(grep -v -m 3 '^{"url": "doc/[0-9]*", "contents": "[^"\\]*"}$' docs.jsonl)"
sed -n "1,${B}p" docs.jsonl >batch-1.jsonl
sed -n "$((B + 1)),$((2 * B))p" docs.jsonl >batch-2.jsonl
{ # batch 3: new documents, then the first R URLs with the text of R others
  sed -n "$((2 * B + 1)),${NEW}p" docs.jsonl
  sed -n "$((NEW + 1)),$((NEW + R))p" docs.jsonl |
    awk '{ sub(/"doc\/[0-9]*"/, sprintf("\"doc/%07d\"", NR - 1)); print }'
} >batch-3.jsonl
# batch 4's URLs follow batch 3's new ones
sed -n "$((NEW + R + 1)),$((NEW + R + LAST))p" docs.jsonl |
  awk -v n="$NEW" '{ sub(/"doc\/[0-9]*"/, sprintf("\"doc/%07d\"", n + NR - 1)); print }' >batch-4.jsonl

# ---- the cluster ------------------------------------------------------------------
cat >extra.json <<'JSON'
{"log": {"level": "info"},
 "store": {"timeout_ms": 30000, "gc_interval_ms": 0},
 "zookeeper": {"session_timeout_ms": 6000},
 "workers": {"threads": 2, "backoff_ms": 50, "scan": {"idle_ms": 20}}}
JSON
"$CLI" playground --dir "$WORK/pg" --servers 3 --replicas 3 --oracles 1 --workers 2 \
  --plugin "$PLUGIN" --split 8 --split "$SPLIT" --extra-config extra.json \
  --ready-file pg.json >pg.out 2>pg.err &
PG=$!
PIDS+=("$PG")
for _ in $(seq 2400); do # a JVM and six daemons on a loaded machine
  [ -s pg.json ] && break
  kill -0 "$PG" 2>/dev/null || fail "the playground exited while starting: $(cat pg.err)"
  sleep 0.05
done
[ -s pg.json ] || fail "the playground did not start within 120 s: $(cat pg.err)"
AT=(--config "$WORK/pg/cluster.json")
# "name http pid" of each role (the state's keys are sorted: http, ..., name, pid)
awk -F'"' '/"http":/ {h = $4} /"name":/ {n = $4} /"pid":/ {gsub(/[^0-9]/, "", $3); print n, (h == "" ? "-" : h), $3}' \
  pg.json >roles
for p in $(awk '{print $3}' roles); do PIDS+=("$p"); done
http_of() { awk -v n="$1" '$1 == n {print $2}' roles; }
pid_of() { awk -v n="$1" '$1 == n {print $3}' roles; }

# metrics HOST:PORT: the body of GET /metrics into $M ("" when it does not answer)
metrics() {
  local fd
  M=
  { exec {fd}<>"/dev/tcp/${1%:*}/${1##*:}"; } 2>/dev/null || return 0
  printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" >&"$fd"
  M=$(timeout 10 cat <&"$fd")
  exec {fd}>&-
}
# leads ENDPOINT: how many tablets the server there leads
leads() {
  metrics "$1"
  grep -c '^percolator_raft_leading{tablet="t[0-9]*"} 1$' <<<"$M"
}

# the observers are registered before the load (worker 1 has started)
END=$((SECONDS + 120))
while [ "$SECONDS" -lt "$END" ]; do
  run_cli 60 "${AT[@]}" observers
  [[ "$OUT" == *dedup* ]] && break
  sleep 0.2
done
[[ "$OUT" == *dedup* ]] || fail "observers does not list dedup: $OUT $(cat last.err)"

# ---- the load, batch after batch --------------------------------------------------
# batch N + 1 waits for step N (step-N.done), so that each step is taken
# while batch N runs or its documents' observers do
loader() {
  local n rc
  for n in 1 2 3; do
    if [ "$n" -gt 1 ]; then
      for _ in $(seq 6000); do
        [ -e "step-$((n - 1)).done" ] && break
        sleep 0.05
      done
      [ -e "step-$((n - 1)).done" ] || return 1
    fi
    timeout -k 5 300 "$CLI" "${AT[@]}" load --json --threads 4 --rate 250 "batch-$n.jsonl" \
      >"batch-$n.out" 2>"batch-$n.err" &
    echo $! >loader.pid
    : >"batch-$n.started"
    wait $!
    rc=$?
    echo "$rc" >"batch-$n.rc"
    case "$rc" in 0 | 4) ;; *) return 1 ;; esac # 4: an outcome unknown
  done
}
loader &
LOADER=$!
PIDS+=("$LOADER")
await_batch() {
  for _ in $(seq 6000); do
    [ -e "batch-$1.started" ] && return 0
    kill -0 "$LOADER" 2>/dev/null || fail "the loader stopped before batch $1: $(cat batch-*.err)"
    sleep 0.05
  done
  fail "batch $1 did not start within 300 s"
}
step_done() { : >"step-$1.done"; }

await_batch 1
step_done 1
await_batch 2
# the server leading the most tablets: killed, its directory lost
VICTIM= most=-1
for s in s1 s2 s3; do
  n=$(leads "$(http_of "$s")")
  [ "$n" -gt "$most" ] && { most=$n; VICTIM=$s; }
done
kill -9 "$(pid_of "$VICTIM")" || fail "$VICTIM is not running"
for _ in $(seq 200); do kill -0 "$(pid_of "$VICTIM")" 2>/dev/null || break; sleep 0.05; done
rm -rf "$WORK/pg/data/server-$VICTIM"
[ -e "$WORK/pg/data/server-$VICTIM" ] && fail "the directory of $VICTIM is still there"
pass "$VICTIM (leading $most tablets) killed with SIGKILL during batch 2, its data directory deleted"
step_done 2
await_batch 3
"$CLI" --config "$WORK/pg/daemons.json" tablet --name "$VICTIM" --ready-file rebuilt.ready \
  2>rebuilt.log &
REBUILT=$!
PIDS+=("$REBUILT")
for _ in $(seq 2400); do
  [ -s rebuilt.ready ] && break
  kill -0 "$REBUILT" 2>/dev/null || fail "$VICTIM exited while starting again: $(tail -5 rebuilt.log)"
  sleep 0.05
done
[ -s rebuilt.ready ] || fail "$VICTIM did not start again within 120 s"
grep -q "empty but the server ran before" rebuilt.log ||
  fail "$VICTIM did not take its directory for a lost one: $(head -5 rebuilt.log)"
pass "$VICTIM started again on an empty directory during batch 3"
REBUILT_HTTP=$(endpoint rebuilt.ready "$VICTIM" http)

# the rebuilt server holds a voting replica of every tablet: each tablet's
# leader lists one replica of it, not its first incarnation's, and it
# received a snapshot of each (polled: at most 300 s)
rejoined() {
  local t s lines others=() n=0
  for s in s1 s2 s3; do [ "$s" != "$VICTIM" ] && others+=("$s"); done
  metrics "$REBUILT_HTTP"
  for t in t1 t2 t3; do
    grep -qE "^percolator_raft_snapshots_received_total\{tablet=\"$t\"\} [1-9]" <<<"$M" || return 1
  done
  for s in "${others[@]}"; do
    metrics "$(http_of "$s")"
    for t in t1 t2 t3; do
      grep -q "^percolator_raft_leading{tablet=\"$t\"} 1$" <<<"$M" || continue
      lines=$(grep "^percolator_raft_follower_lag_entries{tablet=\"$t\",replica=\"$VICTIM#" <<<"$M")
      [ "$(grep -c . <<<"$lines")" = 1 ] || return 1
      grep -q "#0000000000000000\"" <<<"$lines" && return 1
      n=$((n + 1))
    done
  done
  [ "$n" = 3 ]
}
wait "$LOADER"
for n in 1 2 3; do
  case "$(cat "batch-$n.rc" 2>/dev/null)" in 0 | 4) ;; *) fail "batch $n: $(tail -3 "batch-$n.out") $(cat "batch-$n.err")" ;; esac
done
END=$((SECONDS + 300))
until rejoined; do
  [ "$SECONDS" -lt "$END" ] || fail "$VICTIM did not rejoin every tablet as a voter within 300 s: $(grep -E 'raft_(leading|snapshots_received|follower_lag)' <<<"$M")"
  sleep 0.5
done
pass "$VICTIM rejoined every tablet under a new incarnation, from snapshots"

# another server killed: every commit now needs the rebuilt replica
OTHER=
for s in s1 s2 s3; do [ "$s" != "$VICTIM" ] && OTHER=$s; done
kill -9 "$(pid_of "$OTHER")" || fail "$OTHER is not running"
timeout -k 5 300 "$CLI" "${AT[@]}" load --json --threads 4 batch-4.jsonl >batch-4.out 2>batch-4.err
RC=$?
case "$RC" in 0 | 4) ;; *) fail "batch 4 with $OTHER down: exit $RC: $(tail -3 batch-4.out) $(cat batch-4.err)" ;; esac
pass "$OTHER killed: batch 4 loaded through the rebuilt replica's votes"
run_cli 300 "${AT[@]}" wait --timeout-s 280
[ "$RC" = 0 ] || fail "wait exited $RC: $(cat last.err)"

# ---- what the cluster holds -------------------------------------------------------------
# every document's outcome: ok or unknown, never a failure
cat batch-1.out batch-2.out batch-3.out batch-4.out | grep '^{"url"' >outcomes
[ "$(wc -l <outcomes)" = "$TOTAL" ] || fail "$(wc -l <outcomes) outcomes for $TOTAL loads"
grep -v -E '"status":"(ok|unknown)"' outcomes >failed
[ -s failed ] && fail "loads failed: $(head -n 5 failed)"
pass "$TOTAL loads: $(grep -c '"status":"ok"' outcomes) acknowledged, $(grep -c '"status":"unknown"' outcomes) unknown, none failed"

run_cli 300 "${AT[@]}" check
[ "$RC" = 0 ] || fail "check exited $RC: $OUT $(cat last.err)"
run_cli 120 "${AT[@]}" scan docs --json
[ "$RC" = 0 ] || fail "scan docs: $(cat last.err)"
SCAN=$OUT
dedup_want_clusters
[ "$(awk -F'\t' '$2 > 1' "$WORK/clusters.want" | wc -l)" -ge 10 ] || fail "fewer than ten clusters with copies formed"
dedup_check_clusters "${AT[@]}"
pass "$DOCS documents: check finds no difference; clusters equal sha256sum's grouping"

# each URL's last load: "URL BATCH STATUS CONTENTS", from the batches'
# documents and their outcomes
for n in 1 2 3 4; do
  sed 's/^{"url": "\([^"]*\)", "contents": "\(.*\)"}$/\1\t\2/' "batch-$n.jsonl" |
    sort -t $'\t' -k1,1 >"docs-$n.tsv"
  sed -n 's/^{"url":"\([^"]*\)","status":"\([a-z_]*\)".*$/\1\t\2/p' "batch-$n.out" |
    sort -t $'\t' -k1,1 >"status-$n.tsv"
  join -t $'\t' "docs-$n.tsv" "status-$n.tsv" | awk -F'\t' -v b="$n" '{print $1 "\t" b "\t" $3 "\t" $2}'
done | sort -t $'\t' -k1,1 -k2,2n | awk -F'\t' '{last[$1] = $0} END {for (u in last) print last[u]}' |
  sort >last.tsv
sed -n 's/^{"row":"\([^"]*\)","column":"doc:contents","value":"\(.*\)"}$/\1\t\2/p' <<<"$SCAN" | sort >have.tsv
awk -F'\t' 'NR == FNR {have[$1] = $2; next}
  $3 == "ok" && !($1 in have) {printf "%s: acknowledged in batch %s, missing\n", $1, $2; bad++; next}
  $3 == "ok" && have[$1] != $4 {printf "%s: holds other contents than its acknowledged load in batch %s\n", $1, $2; bad++}
  END {exit bad > 0}' have.tsv last.tsv >lost || fail "acknowledged loads lost: $(head -n 5 lost)"
[ "$(wc -l <last.tsv)" = "$FINAL" ] || fail "$(wc -l <last.tsv) URLs loaded, not $FINAL"
[ "$DOCS" -le "$FINAL" ] || fail "the docs table holds $DOCS documents, more than the $FINAL URLs loaded"
pass "every acknowledged document holds what its last load wrote"

if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' \
  "$WORK"/pg/logs/*.log "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1; then
  fail "a sanitizer report"
fi
echo PASS
