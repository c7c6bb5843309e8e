#!/usr/bin/env bash
# test_dedup_membership.sh PERCOLATOR DEDUP_PLUGIN CORPUS [BATCH] — workers
# join and leave a cluster while the dedup application (apps/dedup/) loads
# documents. BATCH (700; a multiple of 10) sizes the load; a sanitizer build
# passes a smaller one.
#
# A cluster from `percolator playground` (an oracle and two tablets in one
# `percolator run`, its private ZooKeeper server; dedup_lib.sh) with workers.scan.stable_ms 500, so the buckets of
# notifications are divided again over the live workers several times during
# the load (docs/ARCHITECTURE.md, "Workers' membership"). With BATCH 700,
# 2,400 documents of generated English-like text (bench/corpus.c's
# generator, each cut to its first line: 30 % exact copies, so clusters
# form) are loaded in five batches, one after the other: 700 new, 700 new,
# 300 rewrites of the first 300 URLs with other documents' text, 700 new,
# and 140 deletes.
# As each batch starts the membership changes (and the next batch waits
# for that step, so the changes come while documents are loaded or their
# notifications processed, however fast or slow the machine): worker 1 runs
# before the load (it registers the observers); then worker 2 starts;
# worker 3 starts and worker 1 gets SIGTERM; worker 4 starts and worker 2
# gets SIGKILL (its share waits for its session to end, and its runs in
# flight are left uncommitted); worker 5 starts and worker 3 gets SIGTERM;
# worker 6 starts and worker 4 gets SIGTERM. At most three run at once.
#
# Before the load, a client whose configuration lacks the cluster's
# zookeeper.secret is refused, naming what ZooKeeper refused.
# Checked, after `wait`:
#   - the workers stopped by SIGTERM exit 0; while three ran, ZooKeeper
#     listed the three, and at the end it lists exactly workers 5 and 6;
#   - `check` exits 0 and `clusters` equals the grouping of the final
#     contents (`scan docs --json`) by sha256sum (1,960 documents);
#   - every change observed, at most one committed run per change, read
#     from the raw view of the docs table (`scan --raw --json docs`). A
#     change of a document is a commit record (put or delete) of its
#     doc:contents; a committed run of the dedup observer on it is a commit
#     record of its ack, whose start_ts S is the run's snapshot. Each run
#     writes the ack, so committed runs of one cell never overlap, and a run
#     goes ahead only when a change is newer than the ack it read, the
#     previous run's S. So for each document, with its committed runs
#     S1 < S2 < ... < Sk, there must be a change with commit_ts in
#     (S(i-1), Si) for every i (S0 = 0): distinct runs are paid for by
#     distinct changes, a map from runs to changes that is one-to-one. And
#     the newest change is below Sk: the last run saw it. A run of the
#     killed worker that did not commit leaves no commit record (a lock at
#     most, which the raw view shows as a lock, not an ack) and does not
#     count; one whose commit record was written counts like any other. The
#     cluster's garbage collector is off (store.gc_interval_ms 0), so no
#     version is removed.
# Every CLI call runs under `timeout`; a trap kills what was started here.
set -u
USAGE="usage: test_dedup_membership.sh PERCOLATOR DEDUP_PLUGIN CORPUS"
CLI=${1:?$USAGE}
PLUGIN=${2:?$USAGE}
CORPUS=${3:?$USAGE}
B=${4:-700}
[ "$B" -ge 10 ] && [ $((B % 10)) = 0 ] || { echo "BATCH must be a multiple of 10: $B" >&2; exit 1; }
R=$((B * 3 / 7)) NEW=$((3 * B)) GONE_N=$((B / 5))
TOTAL=$((NEW + R)) FINAL=$((NEW - GONE_N))
printf -v SPLIT 'doc/%07d' $((NEW / 2)) # the tablets' boundary
. "$(dirname "$0")/dedup_lib.sh"
dedup_programs
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-dedup-members-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
# the loader runs in a subshell: its current `timeout` gets SIGTERM too, which
# it passes on to its `load` process (a SIGKILL would leave that one running)
trap 'kill -TERM "$(cat "$WORK/loader.pid" 2>/dev/null)" 2>/dev/null; cli_cleanup' EXIT
cd "$WORK" || exit 1

dedup_cluster_start "$SPLIT" '{"lock_ttl_ms": 1000, "gc_interval_ms": 0, "timeout_ms": 20000}' \
  '{"idle_ms": 20, "stable_ms": 500}'
# the cluster's ZooKeeper nodes admit only the holders of its zookeeper.secret
# (the playground writes a member per line, the zookeeper object's keys
# sorted: "secret" is not its last)
grep -q '^ *"secret": "dedup-zk-secret",$' "$C" || fail "no zookeeper.secret line in $C"
grep -v '"secret"' "$C" >"$WORK/outsider.json"
run_cli 60 --config "$WORK/outsider.json" scan docs
[ "$RC" != 0 ] && grep -q "not authorised" "$WORK/last.err" ||
  fail "a client without zookeeper.secret was not refused (exit $RC): $(cat "$WORK/last.err")"
pass "a client without the cluster's zookeeper.secret is refused: $(head -n 1 "$WORK/last.err")"

W=() # W[i]: the pid of worker i
start_worker() {
  "$CLI" "${AT[@]}" worker 2>"$WORK/worker-$1.log" &
  W[$1]=$!
  PIDS+=($!)
}
# stop_worker I SIGNAL: signals worker I; after SIGTERM it must exit 0 (it
# leaves the membership and stops within its bound for observers in flight)
stop_worker() {
  kill "-$2" "${W[$1]}" || fail "worker $1 is not running"
  wait_exit "${W[$1]}" 30
  if [ "$2" = TERM ]; then
    [ "$RC" = 0 ] || fail "worker $1 exited $RC on SIGTERM: $(tail -n 5 "$WORK/worker-$1.log")"
  else
    [ "$RC" = 137 ] || fail "worker $1 exited $RC on SIGKILL"
  fi
}
# members: the processes ZooKeeper lists under workers/, sorted, into OUT
members() {
  run_cli 30 "${AT[@]}" status
  OUT=$(awk '$1 == "member" { sub(/.*:/, "", $3); print $3 }' <<<"$OUT" | sort -n | tr '\n' ' ')
}

start_worker 1
# (a sanitizer build on a loaded machine takes seconds for one call)
END=$((SECONDS + 120))
while [ "$SECONDS" -lt "$END" ]; do
  run_cli 60 "${AT[@]}" observers
  [[ "$OUT" == *dedup* ]] && break
  sleep 0.1
done
[[ "$OUT" == *dedup* ]] || fail "observers does not list dedup: $OUT"

# the documents: TOTAL generated, each cut to its first line
timeout -k 5 60 "$CORPUS" generate --docs "$TOTAL" --seed 17 --jsonl "$WORK/corpus.jsonl" ||
  fail "the corpus generator failed"
sed 's/\\n.*"}$/"}/' "$WORK/corpus.jsonl" >"$WORK/docs.jsonl"
[ "$(grep -c '^{"url": "doc/[0-9]*", "contents": "[^"\\]*"}$' "$WORK/docs.jsonl")" = "$TOTAL" ] ||
  fail "unexpected corpus lines: $(grep -v -m 3 '^{"url": "doc/[0-9]*", "contents": "[^"\\]*"}$' "$WORK/docs.jsonl")"
sed -n "1,${B}p" "$WORK/docs.jsonl" >"$WORK/batch-1.jsonl"
sed -n "$((B + 1)),$((2 * B))p" "$WORK/docs.jsonl" >"$WORK/batch-2.jsonl"
# the first R URLs get the text of the last R documents
sed -n "$((NEW + 1)),${TOTAL}p" "$WORK/docs.jsonl" |
  awk '{ sub(/"doc\/[0-9]*"/, sprintf("\"doc/%07d\"", NR - 1)); print }' >"$WORK/batch-3.jsonl"
sed -n "$((2 * B + 1)),${NEW}p" "$WORK/docs.jsonl" >"$WORK/batch-4.jsonl"
# B / 5 deletes: every fifth URL of the first B (so among the rewritten too)
mapfile -t GONE < <(seq 0 5 $((B - 1)) | awk '{ printf "doc/%07d\n", $1 }')

# the loader: the batches one after the other; batch-N.started marks each,
# and batch N + 1 waits for step N of the membership's changes (step-N.done),
# so that each step is taken while batch N runs or its documents' runs do
loader() {
  local n rc
  for n in 1 2 3 4 5; do
    if [ "$n" -gt 1 ]; then
      for _ in $(seq 2400); do
        [ -e "$WORK/step-$((n - 1)).done" ] && break
        sleep 0.05
      done
      [ -e "$WORK/step-$((n - 1)).done" ] || return 1
    fi
    if [ "$n" = 5 ]; then
      timeout -k 5 120 "$CLI" "${AT[@]}" load --delete "${GONE[@]}" >"$WORK/batch-5.out" 2>"$WORK/batch-5.err" &
    else
      timeout -k 5 120 "$CLI" "${AT[@]}" load --threads 2 "$WORK/batch-$n.jsonl" >"$WORK/batch-$n.out" 2>"$WORK/batch-$n.err" &
    fi
    echo $! >"$WORK/loader.pid"
    : >"$WORK/batch-$n.started"
    wait $!
    rc=$?
    echo "$rc" >"$WORK/batch-$n.rc"
    [ "$rc" = 0 ] || return 1
  done
}
loader &
LOADER=$!
PIDS+=("$LOADER")
# until batch N has started (at most 120 s)
await_batch() {
  for _ in $(seq 2400); do
    [ -e "$WORK/batch-$1.started" ] && return 0
    kill -0 "$LOADER" 2>/dev/null || fail "the loader stopped before batch $1: $(cat "$WORK"/batch-*.err)"
    sleep 0.05
  done
  fail "batch $1 did not start within 120 s"
}

step_done() { : >"$WORK/step-$1.done"; }

await_batch 1
start_worker 2
step_done 1
await_batch 2
start_worker 3
# the three are listed (a member's node is made before it scans)
END=$((SECONDS + 60))
while [ "$SECONDS" -lt "$END" ]; do
  members
  [ "$OUT" = "$(printf '%s\n' "${W[1]}" "${W[2]}" "${W[3]}" | sort -n | tr '\n' ' ')" ] && break
  sleep 0.1
done
[ "$OUT" = "$(printf '%s\n' "${W[1]}" "${W[2]}" "${W[3]}" | sort -n | tr '\n' ' ')" ] ||
  fail "ZooKeeper does not list workers 1, 2 and 3 (${W[1]} ${W[2]} ${W[3]}): $OUT"
pass "three workers are members at once"
sleep 1 # they scan with three shares
stop_worker 1 TERM
step_done 2
await_batch 3
start_worker 4
sleep 1
stop_worker 2 KILL
step_done 3
await_batch 4
start_worker 5
sleep 1
stop_worker 3 TERM
step_done 4
await_batch 5
start_worker 6
sleep 0.5
stop_worker 4 TERM

wait "$LOADER"
RC=$?
for n in 1 2 3 4 5; do
  [ "$(cat "$WORK/batch-$n.rc" 2>/dev/null)" = 0 ] || fail "batch $n: $(cat "$WORK/batch-$n.out" "$WORK/batch-$n.err")"
done
[ "$RC" = 0 ] || fail "the loader exited $RC"
for n in 1 2 4; do
  grep -q "^loaded $B documents in .*failed 0$" "$WORK/batch-$n.out" || fail "batch $n: $(cat "$WORK/batch-$n.out")"
done
grep -q "^loaded $R documents in .*failed 0$" "$WORK/batch-3.out" || fail "batch 3: $(cat "$WORK/batch-3.out")"
grep -q "failed 0" "$WORK/batch-5.out" || fail "batch 5: $(cat "$WORK/batch-5.out")"
pass "$TOTAL documents loaded and $GONE_N deleted in five batches while six workers came and went"

run_cli 200 "${AT[@]}" wait --timeout-s 180
[ "$RC" = 0 ] || fail "wait exited $RC: $(cat "$WORK/last.err")"
END=$((SECONDS + 60))
while [ "$SECONDS" -lt "$END" ]; do # worker 2's node goes with its session
  members
  [ "$OUT" = "$(printf '%s\n' "${W[5]}" "${W[6]}" | sort -n | tr '\n' ' ')" ] && break
  sleep 0.1
done
[ "$OUT" = "$(printf '%s\n' "${W[5]}" "${W[6]}" | sort -n | tr '\n' ' ')" ] ||
  fail "ZooKeeper does not list exactly workers 5 and 6 (${W[5]} ${W[6]}): $OUT"
run_cli 120 "${AT[@]}" check
[ "$RC" = 0 ] || fail "check exited $RC: $OUT $(cat "$WORK/last.err")"

# the expected clusters from the final contents: HASH SIZE CANONICAL MEMBER...
run_cli 60 "${AT[@]}" scan docs --json
[ "$RC" = 0 ] || fail "scan docs: $(cat "$WORK/last.err")"
dedup_want_clusters
[ "$DOCS" = "$FINAL" ] || fail "the docs table holds $DOCS documents, not $FINAL"
[ "$(awk -F'\t' '$2 > 1' "$WORK/clusters.want" | wc -l)" -ge 10 ] || fail "fewer than ten clusters with copies formed"
dedup_check_clusters "${AT[@]}"
pass "$FINAL documents: check finds no difference; clusters equal sha256sum's grouping"

# the raw view: per document, its changes ("c TS") and committed dedup runs
# ("r START_TS"), then the rule of the header
timeout -k 5 120 "$CLI" "${AT[@]}" scan --raw --json docs >"$WORK/raw.jsonl" 2>"$WORK/raw.err" ||
  fail "scan --raw docs: $(cat "$WORK/raw.err")"
sed -n -e 's/^{"table":"docs","row":"\([^"]*\)","column":"doc:contents","kind":"write","ts":\([0-9]*\),"write_kind":"\(put\|delete\)".*$/\1 c \2/p' \
  -e 's/^{"table":"docs","row":"\([^"]*\)","column":"doc:contents","kind":"ack","ts":[0-9]*,"write_kind":"put","start_ts":\([0-9]*\),.*"observer":"dedup"}$/\1 r \2/p' \
  "$WORK/raw.jsonl" | sort -k1,1 -k3,3n >"$WORK/events"
# timestamps are below 2^63 but beyond a double's precision: compared as
# strings of equal length (zero-padded)
awk '
  function pad(t) { return sprintf("%020s", t) }
  function finish() {
    if (row == "") return
    docs++
    if (changes == 0) { printf "%s: no change recorded\n", row; bad++ }
    else if (runs == 0 || pad(lastc) >= pad(lastr)) { printf "%s: its last change at %s is not observed (last committed run at %s)\n", row, lastc, lastr; bad++ }
  }
  $1 != row { finish(); row = $1; changes = 0; runs = 0; paid = 0; lastc = ""; lastr = "0" }
  $2 == "c" { changes++; lastc = $3; paid = 1 }
  $2 == "r" {
    runs++; total_runs++
    if (!paid) { printf "%s: committed run at %s has no change since the run at %s\n", row, $3, lastr; bad++ }
    paid = 0; lastr = $3
  }
  $2 == "c" { total_changes++ }
  END { finish(); printf "%d documents, %d changes, %d committed dedup runs, %d faults\n", docs, total_changes, total_runs, bad + 0; exit bad > 0 }
' "$WORK/events" >"$WORK/runs.out"
RC=$?
[ "$RC" = 0 ] || fail "observer runs: $(head -n 20 "$WORK/runs.out")"
# each of the NEW URLs changed at least once
grep -q "^$NEW documents, " "$WORK/runs.out" || fail "observer runs: $(tail -n 1 "$WORK/runs.out")"
pass "every change observed, at most one committed run per change: $(tail -n 1 "$WORK/runs.out")"

for i in 5 6; do stop_worker "$i" TERM; done
if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1; then
  fail "a sanitizer report"
fi
echo PASS
