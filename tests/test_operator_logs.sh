#!/usr/bin/env bash
# test_operator_logs.sh PERCOLATOR PLUGIN DEDUP — what the processes say
# happens (issue 41, point 5), on a cluster started by `percolator
# playground` with 3 s ZooKeeper sessions and a worker running PLUGIN:
#   1. a tablet killed: the worker logs that it has no live server (once
#      ZooKeeper ends its server's session), and that it is served again
#      when a server of it starts;
#   2. the leading oracle killed: the worker logs that it does not answer,
#      and that an oracle answers as the leader again after the failover;
#   3. an oracle stopped cleanly (SIGTERM) logs that it no longer leads as
#      INFO, not WARN;
#   4. the dedup plugin (DEDUP) refuses an unknown key of its configuration
#      with the closest known one, and the worker exits 3 naming it.
set -u
CLI=${1:?usage: test_operator_logs.sh PERCOLATOR PLUGIN DEDUP}
PLUGIN=${2:?usage}
DEDUP=${3:?usage}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-oplogs-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

printf '{"log": {"level": "info"}, "zookeeper": {"session_timeout_ms": 3000}}\n' >extra.json
# --servers 0: a tablet per process, one copy each, so that killing t2's process is an outage
# of its rows (a replicated tablet rides out one server's loss: test_replication.c)
setsid "$CLI" playground --dir "$WORK/pg" --servers 0 --plugin "$PLUGIN" --extra-config extra.json \
  --ready-file pg.json >pg.out 2>pg.err &
PG=$!
PIDS+=("$PG")
for _ in $(seq 1 1800); do
  [ -s pg.json ] && break
  kill -0 "$PG" 2>/dev/null || fail "the playground did not start: $(cat pg.err)"
  sleep 0.05
done
[ -s pg.json ] || fail "the playground did not start within 90 s"
for _ in $(seq 1 100); do grep -q "Ctrl-C stops" pg.out && break; sleep 0.05; done
C="$WORK/pg/cluster.json"
WLOG="$WORK/pg/logs/worker-1.log"
role_pid() { sed -n "s/^  $1 .* pid \([0-9]*\) .*/\1/p" pg.out; }
# wait_log FILE TEXT: until FILE holds TEXT (at most 60 s)
wait_log() {
  for _ in $(seq 1 1200); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  fail "'$2' not logged in $1 within 60 s: $(tail -5 "$1")"
}

# ---- 1. a tablet's outage --------------------------------------------------------------

kill -9 "$(role_pid t2)"
wait_log "$WLOG" "WARN  workers: tablet t2 has no live server"
sed '1s|^{|{"data_dir": "'"$WORK"'/pg/data",|' "$C" >t2.json
"$CLI" --config t2.json tablet --name t2 --ready-file t2.ready 2>t2.log &
T2=$!
PIDS+=("$T2")
wait_file t2.ready "$T2"
wait_log "$WLOG" "WARN  workers: tablet t2 is served again, by 127.0.0.1:[0-9]*, after [0-9.]* s without a server"
pass "the worker logs a tablet's outage as it starts and as it ends"

# ---- 2. an oracle failover ----------------------------------------------------------------

leader=$(sed -n 's/^  \(tso-[0-9]\) .* leads$/\1/p' pg.out)
[ -n "$leader" ] || fail "no oracle shown leading: $(cat pg.out)"
kill -9 "$(role_pid "$leader")"
wait_log "$WLOG" "WARN  workers: the leading oracle 127.0.0.1:[0-9]* does not answer"
wait_log "$WLOG" "WARN  workers: oracle 127.0.0.1:[0-9]* answers as the leader again, after [0-9.]* s (a failover)"
pass "the worker logs an oracle failover as it starts and as it ends"

# ---- 3. a clean stop of the leading oracle --------------------------------------------------

other=tso-1
[ "$leader" = tso-1 ] && other=tso-2
kill -TERM "$(role_pid "$other")"
wait_log "$WORK/pg/logs/$other.log" "stopped in"
grep -q "INFO  tso: no longer leading (stopping" "$WORK/pg/logs/$other.log" ||
  fail "a clean stop of the leader should log INFO: $(grep 'no longer leading' "$WORK/pg/logs/$other.log")"
grep -q "WARN .*no longer leading" "$WORK/pg/logs/$other.log" &&
  fail "a clean stop logged a warning: $(grep WARN "$WORK/pg/logs/$other.log")"
pass "a clean stop of the leading oracle is INFO, not WARN"

kill -TERM "$T2"
wait_exit "$T2" 40
kill -INT -- "-$PG"
wait_exit "$PG" 120

# ---- 4. the dedup plugin's configuration ------------------------------------------------------

"$CLI" --data "$WORK/dd" init >/dev/null || fail "init"
printf '{"data_dir": "%s", "workers": {"plugins": [{"path": "%s", "config": {"batchmax": 64}}]}}\n' \
  "$WORK/dd" "$DEDUP" >dd.json
run_cli 60 --config dd.json worker
[ "$RC" = 3 ] || fail "a worker with dedup's unknown key: exit $RC, want 3"
grep -q 'init failed: config: unknown key "batchmax"; did you mean "batch_max"?' last.err ||
  fail "the refusal should name the key and suggest batch_max: $(cat last.err)"
printf '{"data_dir": "%s", "workers": {"plugins": [{"path": "%s", "config": {"batch_max": 64}}]}}\n' \
  "$WORK/dd" "$DEDUP" >dd2.json
"$CLI" --config dd2.json worker --ready-file dd.ready 2>dd.log &
W=$!
PIDS+=("$W")
wait_file dd.ready "$W"
kill -TERM "$W"
wait_exit "$W" 40
[ "$RC" = 0 ] || fail "a worker with batch_max: exit $RC $(cat dd.log)"
pass "dedup refuses an unknown key with the closest known one, and takes batch_max"
echo PASS
