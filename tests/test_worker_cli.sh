#!/usr/bin/env bash
# test_worker_cli.sh PERCOLATOR HOTLOG_PLUGIN — worker processes through the
# command line:
#   1. a cluster from `percolator playground` (cli_lib.sh's pg_start: an
#      oracle and two tablets in one `percolator run`, its private ZooKeeper
#      server) and three `percolator worker` processes running the hotlog test plugin
#      (tests/plugins/hotlog.c, whose observer sleeps inside each run); two
#      writers hammer three hot cells; one worker is killed with SIGKILL in
#      the middle and another started. After `percolator wait`, every hot
#      cell's latest value has been observed (seen:v = v:v) and no
#      notification had two observer transactions committed (one log cell per
#      (row, notification ts) at most).
#   2. an observer that fails is parked after workers.max_failures, listed by
#      `percolator failures` with its error, while the other observer goes on;
#      once the cause is fixed, `failures --retry` runs it again.
#   3. SIGTERM: workers exit 0.
#   4. the embedded default: `percolator worker --data DIR` holds the store
#      and serves it; other verbs given --data DIR reach it meanwhile; a txn
#      session connected through DIR/serving.json goes on after the worker is
#      restarted (on the same ports); after SIGTERM the directory opens
#      directly again.
#   5. an observer that kills its worker process (SIGSEGV) on one cell, the
#      worker restarted after each death as a supervisor would: the cell is
#      parked after workers.max_failures deaths, with the reason, and the
#      other cells are processed; the observers' counters in `status` survive
#      a SIGKILL of the worker; an observer that never returns is given up
#      after workers.hang_ms, and SIGTERM still ends its worker (exit 0)
#      within the bound.
# Every wait is bounded, every CLI call runs under `timeout`, and a trap kills
# and reaps every process started here.
set -u
CLI=${1:?usage: test_worker_cli.sh /path/to/percolator /path/to/hotlog.so}
PLUGIN=${2:?usage: test_worker_cli.sh /path/to/percolator /path/to/hotlog.so}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-worker-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup


# ---- 1. three workers, two writers, a SIGKILL -------------------------------

cat >"$WORK/extra.json" <<JSON
{"store": {"lock_ttl_ms": 1000, "timeout_ms": 20000},
 "zookeeper": {"session_timeout_ms": 3000},
 "workers": {"threads": 3, "max_failures": 2, "backoff_ms": 50,
             "scan": {"buckets_per_claim": 64, "idle_ms": 20},
             "plugins": [{"path": "$PLUGIN", "config": {"sleep_ms": 20}}]}}
JSON
# no worker of the playground's: the test starts and kills its own
pg_start "$WORK/pg" --one-process --oracles 1 --servers 0 --split m \
  --plugin "$PLUGIN" --workers 0 --extra-config "$WORK/extra.json"

start_worker() { # start_worker TAG: pid in $W
  "$CLI" --config "$C" worker 2>"$WORK/worker-$1.log" &
  W=$!
  PIDS+=("$W")
}
start_worker 1
W1=$W
start_worker 2
W2=$W
start_worker 3
W3=$W
# the observers are registered in the store once a worker has started
for _ in $(seq 300); do
  run_cli 10 --config "$C" observers
  [[ "$OUT" == *hotlog* ]] && break
  sleep 0.1
done
[[ "$OUT" == *$'hotlog\thot\tv:v\tstrong'* ]] || fail "observers does not list hotlog: $OUT"
pass "three workers started; their observers are recorded in the store"

writer() { # writer TAG: 40 increasing values of rows a, b, m (two tablets)
  local ok
  for i in $(seq 1 40); do
    for r in a b m; do
      ok=0
      for _ in $(seq 20); do # the other writer's commit of the same cell conflicts: retry
        timeout -k 5 30 "$CLI" --config "$C" set hot "$r" v:v "$1-$i" >/dev/null 2>"$WORK/writer-$1.last" &&
          { ok=1; break; }
        grep -q conflict "$WORK/writer-$1.last" || break
      done
      [ "$ok" = 1 ] || { echo "set $r $1-$i failed: $(cat "$WORK/writer-$1.last")" >>"$WORK/writer-$1.err"; }
    done
  done
}
writer x &
WX=$!
writer y &
WY=$!
PIDS+=("$WX" "$WY")
sleep 1
kill -9 "$W2"
wait "$W2" 2>/dev/null
start_worker 4
wait "$WX"
wait "$WY"
grep -q "failed" "$WORK"/writer-*.err 2>/dev/null && fail "a writer's set failed: $(cat "$WORK"/writer-*.err)"
pass "two writers, 240 commits of three hot cells, one worker killed with SIGKILL and replaced"

run_cli 180 --config "$C" wait --timeout-s 120
[ "$RC" = 0 ] || fail "wait exited $RC: $(cat "$WORK/last.err")"
for r in a b m; do
  run_cli 10 --config "$C" get hot "$r" v:v
  V=$OUT
  run_cli 10 --config "$C" get hot "$r" seen:v
  [ "$OUT" = "$V" ] || fail "row $r: latest value '$V' was not observed (seen '$OUT')"
done
run_cli 30 --config "$C" scan hot --start log --end loh
LOG=$OUT
[ -n "$LOG" ] || fail "no observer run logged"
DUP=$(cut -f2 <<<"$LOG" | sed 's/@[0-9]*$//' | sort | uniq -d)
[ -z "$DUP" ] || fail "notifications observed by two committed transactions: $DUP"
RUNS=$(wc -l <<<"$LOG")
pass "after wait: every hot cell's latest value observed; $RUNS runs, none twice for one notification"
for _ in $(seq 50); do # the counters reach the store within a second
  run_cli 30 --config "$C" status --json
  [[ "$OUT" =~ \"hotlog\":\{\"runs\":[1-9] ]] && break
  sleep 0.1
done
[ "$RC" = 0 ] || fail "status exited $RC: $OUT"
[[ "$OUT" == *'"notifications":{"pending":0,'* ]] || fail "status: notifications pending after wait: $OUT"
LIVE=$(grep -o '"workers":\[[^]]*\]' <<<"$OUT" | grep -o '"[^"]*:[0-9]*"' | wc -l)
[ "$LIVE" -ge 3 ] || fail "status shows $LIVE live workers, want at least 3: $OUT"
[[ "$OUT" =~ \"hotlog\":\{\"runs\":[1-9] ]] || fail "status: no hotlog runs counted: $OUT"
pass "status: no notification pending, $LIVE live workers, hotlog's runs summed"

# ---- 2. a failing observer is parked, the other goes on, --retry -------------

run_cli 10 --config "$C" set hot r1 f:v go
[ "$RC" = 0 ] || fail "set f:v"
for _ in $(seq 300); do
  run_cli 10 --config "$C" failures
  [[ "$OUT" == *fails* ]] && break
  sleep 0.1
done
[[ "$OUT" == *$'fails\thot\tr1\tf:v\t2\t'*"not ok yet"* ]] || fail "failures: $OUT"
run_cli 10 --config "$C" failures --json
[[ "$OUT" == *'"observer":"fails"'*'"error":'*'not ok yet'* ]] || fail "failures --json: $OUT"
run_cli 10 --config "$C" set hot a v:v after-park
run_cli 180 --config "$C" wait --timeout-s 120
[ "$RC" = 0 ] || fail "wait with a parked notification exited $RC"
run_cli 10 --config "$C" get hot a seen:v
[ "$OUT" = after-park ] || fail "hotlog stopped with fails parked: seen '$OUT'"
run_cli 10 --config "$C" set hot r1 ok:v yes
run_cli 10 --config "$C" failures --retry
[ "$RC" = 0 ] && [[ "$OUT" == "1 notification queued again" ]] || fail "failures --retry: $OUT"
run_cli 180 --config "$C" wait --timeout-s 120
run_cli 10 --config "$C" get hot r1 done:v
[ "$OUT" = 1 ] || fail "the retried observer did not run: '$OUT'"
run_cli 10 --config "$C" failures
[ -z "$OUT" ] || fail "failures after the retry: $OUT"
pass "a failing observer is parked and listed with its error, the other runs on, --retry runs it"

# ---- 3. SIGTERM --------------------------------------------------------------

for p in "$W1" "$W3" "$W"; do
  kill -TERM "$p"
  wait_exit "$p" 30
  [ "$RC" = 0 ] || fail "worker $p exited $RC on SIGTERM"
done
pg_stop
pass "workers exit 0 on SIGTERM"

# ---- 4. the embedded default ---------------------------------------------------

D="$WORK/emb"
run_cli 10 --data "$D" init
[ "$RC" = 0 ] || fail "init"
printf '{"data_dir": "%s", "workers": {"threads": 2, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
  "$D" "$PLUGIN" >"$WORK/emb.json"
"$CLI" --config "$WORK/emb.json" worker 2>"$WORK/emb-worker.log" &
WE=$!
PIDS+=("$WE")
wait_file "$D/serving.json" "$WE"
run_cli 10 --data "$D" set hot e v:v one
[ "$RC" = 0 ] || fail "set through the serving worker: $(cat "$WORK/last.err")"
run_cli 60 --data "$D" wait --timeout-s 50
[ "$RC" = 0 ] || fail "wait through the serving worker: $(cat "$WORK/last.err")"
run_cli 10 --data "$D" get hot e seen:v
[ "$OUT" = one ] || fail "embedded: not observed: '$OUT'"
# a client connected through serving.json outlives a restart of the worker,
# which takes the same ports again
mkfifo "$WORK/s.in"
"$CLI" --data "$D" txn <"$WORK/s.in" >"$WORK/s.out" 2>"$WORK/s.err" &
S=$!
PIDS+=("$S")
exec 5>"$WORK/s.in"
printf 'begin\nget hot e seen:v\ncommit\n' >&5
for _ in $(seq 200); do grep -q 'ok commit_ts' "$WORK/s.out" && break; sleep 0.05; done
grep -qx 'value "one"' "$WORK/s.out" || fail "the session through serving.json: $(cat "$WORK/s.out")"
PORTS=$(grep -o '"listen": *"[^"]*"' "$D/serving.json" | sort)
kill -TERM "$WE"
wait_exit "$WE" 30
[ "$RC" = 0 ] || fail "the embedded worker exited $RC"
"$CLI" --config "$WORK/emb.json" worker --ready-file "$WORK/emb2.ready" 2>"$WORK/emb-worker2.log" 5>&- &
WE=$!
PIDS+=("$WE")
wait_file "$WORK/emb2.ready" "$WE"
[ "$(grep -o '"listen": *"[^"]*"' "$D/serving.json" | sort)" = "$PORTS" ] ||
  fail "the worker started again took other ports: $(cat "$D/serving.json")"
printf 'begin\nset hot e v:v two\ncommit\n' >&5
for _ in $(seq 400); do [ "$(grep -c 'ok commit_ts=[1-9]' "$WORK/s.out")" = 1 ] && break; sleep 0.05; done
grep -q 'ok commit_ts=[1-9]' "$WORK/s.out" ||
  fail "the session did not reconnect to the worker started again: $(cat "$WORK/s.out" "$WORK/s.err")"
exec 5>&-
wait_exit "$S" 30
[ "$RC" = 0 ] || fail "the session exited $RC"
run_cli 60 --data "$D" wait --timeout-s 50
[ "$RC" = 0 ] || fail "wait after the restart: $(cat "$WORK/last.err")"
run_cli 10 --data "$D" get hot e seen:v
[ "$OUT" = two ] || fail "the write through the reconnected session was not observed: '$OUT'"
pass "a session connected through serving.json reconnects to the worker started again"
kill -TERM "$WE"
wait_exit "$WE" 30
[ "$RC" = 0 ] || fail "the embedded worker exited $RC"
[ -s "$D/serving.json" ] || fail "serving.json (the ports a worker started again takes) is gone"
run_cli 10 --data "$D" get hot e seen:v
[ "$OUT" = two ] || fail "embedded after the worker: '$OUT'"
pass "an embedded worker serves its store to the other verbs and leaves it as it was"

# ---- 5. a poison cell, counters after SIGKILL, an observer that never returns --

P="$WORK/poison"
run_cli 10 --data "$P" init
[ "$RC" = 0 ] || fail "init $P"
printf '{"data_dir": "%s", "workers": {"threads": 2, "max_failures": 2, "hang_ms": 1500, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
  "$P" "$PLUGIN" >"$WORK/poison.json"
start_poison() { # the worker serving $P: pid in $WP (its segfaults are meant: no sanitizer report)
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:handle_segv=0" \
    "$CLI" --config "$WORK/poison.json" worker 2>>"$WORK/poison-worker.log" &
  WP=$!
  PIDS+=("$WP")
  wait_file "$P/serving.json" "$WP"
}
restart_poison() { # the same, but the worker may die on the poison before it serves
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:handle_segv=0" \
    "$CLI" --config "$WORK/poison.json" worker 2>>"$WORK/poison-worker.log" &
  WP=$!
  PIDS+=("$WP")
  for _ in $(seq 600); do
    [ -s "$P/serving.json" ] && return 0
    kill -0 "$WP" 2>/dev/null || return 0 # counted as a death by the loop below
    sleep 0.05
  done
  fail "$P/serving.json did not appear within 30 s"
}
start_poison
for r in p1 p2 p3; do
  run_cli 10 --data "$P" set hot "$r" c:v "fine-$r"
  [ "$RC" = 0 ] || fail "set $r: $(cat "$WORK/last.err")"
done
run_cli 60 --data "$P" wait --timeout-s 50
[ "$RC" = 0 ] || fail "wait before the poison: $(cat "$WORK/last.err")"
# the worker may die of the poison before its reply to a set leaves: such a set
# ends at its own timeout, its outcome unknown (the poison's was applied: its
# observer ran); p4's is set again until it is known
run_cli 30 --data "$P" --timeout 5s set hot bad c:v segv
for _ in 1 2 3; do
  run_cli 30 --data "$P" --timeout 5s set hot p4 c:v fine-p4
  [ "$RC" = 0 ] && break
done
[ "$RC" = 0 ] || fail "set p4: $(cat "$WORK/last.err")"
DEATHS=0
for _ in $(seq 6); do # restart the worker each time it dies, until wait says it is all done
  for _ in $(seq 400); do
    kill -0 "$WP" 2>/dev/null || break
    run_cli 10 --data "$P" wait --timeout-s 1
    [ "$RC" = 0 ] && break
  done
  kill -0 "$WP" 2>/dev/null && break
  wait "$WP"
  RC=$?
  [ "$RC" -gt 128 ] || fail "the worker exited $RC, not by a signal"
  DEATHS=$((DEATHS + 1))
  rm -f "$P/serving.json"
  restart_poison
done
kill -0 "$WP" 2>/dev/null || fail "the worker kept dying ($DEATHS deaths)"
run_cli 60 --data "$P" wait --timeout-s 50
[ "$RC" = 0 ] || fail "wait after the poison was parked: $(cat "$WORK/last.err")"
[ "$DEATHS" = 2 ] || fail "the worker died $DEATHS times, want workers.max_failures = 2"
run_cli 10 --data "$P" failures
[[ "$OUT" == *$'crashes\thot\tbad\tc:v\t2\t'*died* ]] || fail "failures: $OUT"
for r in p1 p2 p3 p4; do
  run_cli 10 --data "$P" get hot "$r" done:c
  [ "$OUT" = "fine-$r" ] || fail "$r was not processed: '$OUT'"
done
pass "a segfaulting observer: the worker died $DEATHS times, then the cell was parked; the others were processed"

runs_shown() { # the runs of observer crashes that status shows, in $RUNS
  run_cli 10 --data "$P" status --json
  RUNS=$(grep -o '"crashes":{"runs":[0-9]*' <<<"$OUT" | grep -o '[0-9]*$')
  RUNS=${RUNS:-0}
}
PREV=-1 # a run counts when its commit returns, a moment after wait sees it: let them settle
for _ in $(seq 60); do
  runs_shown
  [ "$RUNS" = "$PREV" ] && break
  PREV=$RUNS
  sleep 1.2
done
BEFORE=$RUNS
# p1..p3 at least; p4's run may have committed as the worker died, uncounted
[ "$BEFORE" -ge 3 ] || fail "status shows $BEFORE runs of crashes, want at least 3: $OUT"
for r in p6 p7 p8; do run_cli 10 --data "$P" set hot "$r" c:v "fine-$r"; done
run_cli 60 --data "$P" wait --timeout-s 50
kill -9 "$WP"
wait "$WP" 2>/dev/null
rm -f "$P/serving.json"
runs_shown # what the killed worker had written (each second) is still there
[ "$RUNS" -ge "$BEFORE" ] || fail "status after SIGKILL shows $RUNS runs, before it $BEFORE: $OUT"
start_poison # the rest is in its journal, which the next worker takes over
for _ in $(seq 100); do
  runs_shown
  [ "$RUNS" = $((BEFORE + 3)) ] && break
  sleep 0.1
done
[ "$RUNS" = $((BEFORE + 3)) ] || fail "status shows $RUNS runs after the restart, want $((BEFORE + 3))"
pass "the observers' counters in status survive a SIGKILL of the worker ($RUNS runs)"

run_cli 10 --data "$P" set hot stuck c:v hang
run_cli 10 --data "$P" set hot p5 c:v fine-p5
for _ in $(seq 300); do # hang_ms 1500, and max_failures 2: parked after two give-ups
  run_cli 10 --data "$P" failures
  [[ "$OUT" == *stuck* ]] && break
  sleep 0.1
done
[[ "$OUT" == *$'crashes\thot\tstuck\tc:v\t2\t'*"did not return"* ]] || fail "failures: $OUT"
run_cli 60 --data "$P" wait --timeout-s 50
[ "$RC" = 0 ] || fail "wait with an observer that never returns: $(cat "$WORK/last.err")"
run_cli 10 --data "$P" get hot p5 done:c
[ "$OUT" = fine-p5 ] || fail "p5 was not processed next to the hung observer: '$OUT'"
kill -TERM "$WP"
wait_exit "$WP" 30 # the bound: 10 s for the observers in flight, then the roles' own
[ "$RC" = 0 ] || fail "the worker exited $RC on SIGTERM with an observer that never returns"
grep -q "still going after" "$WORK/poison-worker.log" || fail "the worker did not say what it left running"
pass "an observer that never returns: given up and parked, the others go on, SIGTERM ends its worker"

if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' \
  "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1; then
  fail "a sanitizer report in $(grep -l -E 'Sanitizer|runtime error:' "$WORK"/*.log "$WORK"/*.err)"
fi
echo "PASS"
