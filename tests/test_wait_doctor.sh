#!/usr/bin/env bash
# test_wait_doctor.sh PERCOLATOR PLUGIN — `wait` and `doctor` on an embedded
# data directory whose observers (PLUGIN: observers/examples/normalize_count.c,
# registered by a worker that has since stopped) have pending work:
#   1. wait warns which observer no live worker runs, and exits 6 (stalled)
#      instead of waiting for ever; --timeout-s shorter than that exits 5,
#      and --json says so with the pending columns;
#   2. doctor names the observers no live worker runs (exit 3);
#   3. a worker started while wait waits: wait sees it (it does not hold the
#      directory between its checks), returns 0 once the change is observed,
#      and doctor finds nothing wrong (exit 0) and names the worker serving it.
set -u
CLI=${1:?usage: test_wait_doctor.sh PERCOLATOR PLUGIN}
PLUGIN=${2:?usage: test_wait_doctor.sh PERCOLATOR PLUGIN}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-wait-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

run_cli 10 --data d init
printf '{"data_dir": "d", "workers": {"scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
  "$PLUGIN" >app.json
"$CLI" --config app.json worker --ready-file r1.json 2>w1.log &
W=$!
PIDS+=("$W")
wait_file r1.json "$W"
kill -TERM "$W"
wait_exit "$W" 30
[ "$RC" = 0 ] || fail "the worker exited $RC"
run_cli 10 --data d set docs d1 raw:text "  Hello World "
[ "$RC" = 0 ] || fail "set: $(cat last.err)"

# ---- 1. stalled, timed out -------------------------------------------------------

run_cli 60 --data d wait --timeout-s 40
ERR=$(cat last.err)
[ "$RC" = 6 ] || fail "wait with no worker exited $RC, want 6 (stalled): $ERR"
grep -q "1 notification of docs raw:text wait for observer normalize, which no live worker runs" <<<"$ERR" ||
  fail "wait did not name the observer no worker runs: $ERR"
grep -q "nothing can make progress" <<<"$ERR" || fail "wait's last word: $ERR"
pass "wait with pending work and no worker: names the observer, exits 6"
run_cli 30 --data d wait --timeout-s 2 --json
[ "$RC" = 5 ] || fail "wait --timeout-s 2 exited $RC, want 5: $(cat last.err)"
[[ "$OUT" == *'"columns":[{"table":"docs","column":"raw:text","pending":1,"stalled":true,"observers":[{"name":"normalize","live_workers":0}]}]'*'"status":"timed_out"'* ]] ||
  fail "wait --json: $OUT"
# the seconds it waited: 2, or more on a busy machine
grep -Eq "still busy after [0-9]+ s: 1 pending \(docs raw:text 1\); 0 live workers" last.err ||
  fail "wait's timeout message: $(cat last.err)"
pass "wait --timeout-s: exits 5 and --json gives the pending columns and their observers"

# ---- 2. doctor ---------------------------------------------------------------------------

run_cli 30 --data d doctor
[ "$RC" = 3 ] || fail "doctor exited $RC, want 3: $OUT"
grep -q '^PROBLEM  observer normalize (docs raw:text): no live worker runs it, so its column.s 1 pending notification wait' <<<"$OUT" ||
  fail "doctor did not name the observer no worker runs: $OUT"
grep -q '^ok       holder: no process holds' <<<"$OUT" || fail "doctor's holder line: $OUT"
pass "doctor names the observers no live worker runs"

# ---- 3. a worker started while wait waits ----------------------------------------------

timeout -k 5 60 "$CLI" --data d wait --timeout-s 50 >wait.out 2>wait.err &
WAITER=$!
PIDS+=("$WAITER")
sleep 1
"$CLI" --config app.json worker --ready-file r2.json 2>w2.log &
W=$!
PIDS+=("$W")
wait_file r2.json "$W"
wait_exit "$WAITER" 60
[ "$RC" = 0 ] || fail "wait did not see the worker that started meanwhile: exit $RC, $(cat wait.err)"
run_cli 10 --data d get docs d1 norm:text
[ "$OUT" = "hello world" ] || fail "the change was not observed: '$OUT'"
run_cli 30 --data d doctor
[ "$RC" = 0 ] || fail "doctor with a worker running exited $RC: $OUT"
grep -q "^ok       holder: worker $W serves 'd'" <<<"$OUT" || fail "doctor's holder line: $OUT"
grep -q '^ok       observer normalize (docs raw:text): run by 1 live worker' <<<"$OUT" ||
  fail "doctor's observer line: $OUT"
pass "a worker started while wait waits: wait returns 0, doctor finds nothing wrong"
kill -TERM "$W"
wait_exit "$W" 30
grep -lE 'Sanitizer|runtime error:' "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1 && fail "a sanitizer report"
echo PASS
