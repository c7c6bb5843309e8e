#!/usr/bin/env bash
# test_sigterm.sh PERCOLATOR DEDUP_SO — every role stops on SIGTERM within
# its documented bound (pc_daemon_stop_bound_ms: 30 s with the default
# store.timeout_ms), with exit 0, whatever its clients are doing:
#   1. `percolator run` (oracle, lock service, two tablets and the dedup
#      observers): a raw scan slowed to minutes (failpoint store.step, in the
#      daemon's environment only) whose client still waits, a stream of
#      clients writing documents the observers index and reading them back;
#      SIGTERM; run exits 0 within the bound, its log shows the scan
#      cancelled after the grace; a new run on the same data has the
#      documents;
#   2. the same roles as separate daemons (`tso`, `tablet`) and a
#      `percolator worker` against them, the same scan on a tablet and the
#      same stream of clients; SIGTERM to all at once; each exits 0 within
#      the bound.
# The test waits for the bound with a generous margin and asserts nothing
# tighter: the times it prints are for the reader. Without cancellation the
# slowed scan keeps its tablet's server thread, and the process, for minutes.
set -u
CLI=${1:?usage: test_sigterm.sh /path/to/percolator /path/to/dedup.so}
PLUGIN=${2:?usage: test_sigterm.sh /path/to/percolator /path/to/dedup.so}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-sigterm-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/zk_lib.sh"
cli_start_cleanup
zk_start # the clusters' coordination, one private server for both
zk_json() { # zk_json ROOT: the configurations' "zookeeper" member
  printf '"zookeeper": {"connect": "%s", "root": "%s", "session_timeout_ms": 3000}' "$ZK_CONNECT" "$1"
}
ZK=$(zk_json /percolator/sigterm-run)

BOUND=30         # pc_daemon_stop_bound_ms with the default store.timeout_ms
MARGIN=30        # for a loaded machine: the test waits BOUND + MARGIN
SLOW="store.step=sleep(40)" # 3000 cells: a raw scan of 2 minutes
CELLS=3000

# rows "a00000"... of table "big" (on tablet t1: rows below "m"), in one transaction
big_rows() {
  local from=$1 to=$2 i
  echo begin
  for ((i = from; i < to; i++)); do printf 'set big a%05d c v%d\n' "$i" "$i"; done
  echo commit
}

# client_config READY OUT [TIMEOUT_MS]: a client of the daemons in READY (by
# default a long timeout, so that the scan's client is still waiting when the
# daemons stop).
client_config() {
  local tso t1 t2
  tso=$(endpoint "$1" tso) && t1=$(endpoint "$1" t1) && t2=$(endpoint "$1" t2) ||
    fail "cannot parse $1"
  [ -n "$tso" ] && [ -n "$t1" ] && [ -n "$t2" ] || fail "incomplete $1"
  cat >"$2" <<EOF
{"store": {"timeout_ms": ${3:-120000}}, $ZK,
 "tso": {"listen": "$tso"},
 "tablets": [{"name": "t1", "listen": "$t1", "end": "m"},
             {"name": "t2", "listen": "$t2", "start": "m"}]}
EOF
}

# load_big CLIENT: CELLS rows of table big, all on tablet t1.
load_big() {
  big_rows 0 "$CELLS" | timeout 120 "$CLI" --config "$1" txn >"$WORK/load.out" 2>&1
  grep -q '^ok commit_ts=[1-9]' "$WORK/load.out" || fail "loading big: $(tail -3 "$WORK/load.out")"
}

# start_clients CLIENT TAG: three loops writing documents (the observers index
# them) and reading rows, until killed; their pids in CLIENTS.
start_clients() {
  local k
  CLIENTS=()
  for k in 1 2 3; do
    (
      i=0
      while :; do
        i=$((i + 1))
        timeout 20 "$CLI" --config "$1" --timeout 3000ms set docs "http://example.org/$2/$k/$i" \
          doc:contents "the quick brown fox $k $i jumps over the lazy dog" >/dev/null 2>&1
        timeout 20 "$CLI" --config "$1" --timeout 3000ms get big "a0000$k" c >/dev/null 2>&1
      done
    ) &
    CLIENTS+=($!)
    PIDS+=($!)
  done
}

stop_clients() {
  local p
  for p in "${CLIENTS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${CLIENTS[@]}"; do wait "$p" 2>/dev/null; done
}

# start_scan CLIENT TAG HOST:PORT: the raw scan of big, in the background (pid
# in SCAN), once the tablet at the http endpoint HOST:PORT serves it: a
# request in service at five looks over a second (the scan lasts minutes).
start_scan() {
  local i n seen=0
  timeout 150 "$CLI" --config "$1" scan --raw big >"$WORK/scan-$2.out" 2>"$WORK/scan-$2.err" &
  SCAN=$!
  PIDS+=("$SCAN")
  for i in $(seq 1 300); do
    n=$(in_service "$3")
    if [ -n "$n" ] && [ "$n" -ge 1 ]; then seen=$((seen + 1)); else seen=0; fi
    [ "$seen" -ge 5 ] && return 0
    kill -0 "$SCAN" 2>/dev/null || fail "the scan ended early: $(cat "$WORK/scan-$2.err")"
    sleep 0.2
  done
  fail "the tablet never had the scan in service"
}

# scan_cancelled TAG: the scan's client was told that its scan stopped (it
# then exits, once its own lock-service session is given up on).
scan_cancelled() {
  local i
  for i in $(seq 1 100); do
    grep -q "raw scan stopped" "$WORK/scan-$1.err" && { kill "$SCAN" 2>/dev/null; return 0; }
    sleep 0.1
  done
  fail "the scan's client was not told that its scan stopped: $(tail -2 "$WORK/scan-$1.err")"
}

# in_service HOST:PORT: the rpc requests a role has in service, from /metrics.
in_service() {
  local host=${1%:*} port=${1##*:} fd out
  exec {fd}<>"/dev/tcp/$host/$port" || return 1
  printf 'GET /metrics HTTP/1.0\r\n\r\n' >&"$fd"
  out=$(timeout 10 cat <&"$fd")
  exec {fd}>&-
  sed -n 's/^percolator_rpc_requests_in_service \([0-9]*\).*/\1/p' <<<"$out"
}


# ---- 1. percolator run ------------------------------------------------------

cat >"$WORK/run.json" <<EOF
{"data_dir": "$WORK/data", "log": {"level": "info"}, $ZK,
 "tso": {"listen": "127.0.0.1:0"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0", "http": "127.0.0.1:0", "end": "m"},
             {"name": "t2", "listen": "127.0.0.1:0", "http": "127.0.0.1:0", "start": "m"}],
 "workers": {"threads": 2, "plugins": [{"path": "$PLUGIN"}]}}
EOF
PERCOLATOR_FAILPOINTS="$SLOW" "$CLI" run --config "$WORK/run.json" \
  --ready-file "$WORK/ready-1.json" 2>"$WORK/run-1.log" &
RUN=$!
PIDS+=("$RUN")
wait_file "$WORK/ready-1.json" "$RUN"
client_config "$WORK/ready-1.json" "$WORK/client-1.json"
C="$WORK/client-1.json"
load_big "$C"
start_clients "$C" run
# the clients and the workers are busy too, and the first document (read back
# after the restart below) is acknowledged: wait for it, however busy the
# machine, before the scan (which must still run at the signal) starts
for _ in $(seq 600); do
  timeout 20 "$CLI" --config "$C" get docs http://example.org/run/1/1 doc:contents \
    >/dev/null 2>&1 && break
  sleep 0.1
done
start_scan "$C" run "$(endpoint "$WORK/ready-1.json" t1 http)"
t0=$(date +%s%N)
kill -TERM "$RUN"
wait_exit "$RUN" $((BOUND + MARGIN))
took=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$RC" = 0 ] || fail "run exited $RC on SIGTERM; see $WORK/run-1.log"
grep -q "shutting down" "$WORK/run-1.log" || fail "run did not log its shutdown"
grep -q "cancelling them" "$WORK/run-1.log" || fail "run did not cancel the scan after its grace"
echo "  run stopped ${took} ms after SIGTERM (bound ${BOUND} s)"
stop_clients
scan_cancelled run
pass "SIGTERM stops run (tablets, oracle, lock service, workers) within the bound, exit 0, during a long scan and a stream of clients"

# the documents acknowledged before the signal are there after a restart
"$CLI" run --config "$WORK/run.json" --ready-file "$WORK/ready-2.json" 2>"$WORK/run-2.log" &
RUN=$!
PIDS+=("$RUN")
wait_file "$WORK/ready-2.json" "$RUN"
client_config "$WORK/ready-2.json" "$WORK/client-2.json"
run_cli 60 --config "$WORK/client-2.json" get big a02999 c
[ "$RC" = 0 ] && [ "$OUT" = v2999 ] || fail "after the restart big/a02999 is '$OUT' (exit $RC)"
run_cli 60 --config "$WORK/client-2.json" get docs http://example.org/run/1/1 doc:contents
[ "$RC" = 0 ] || fail "after the restart the first document is missing (exit $RC)"
kill -TERM "$RUN"
wait_exit "$RUN" $((BOUND + MARGIN))
[ "$RC" = 0 ] || fail "the second run exited $RC on SIGTERM"
pass "a new run on the same data has what was committed before the signal"

# ---- 2. separate daemons and a worker -----------------------------------------

ZK=$(zk_json /percolator/sigterm-daemons)
cat >"$WORK/d0.json" <<EOF
{"data_dir": "$WORK/data2", "log": {"level": "info"}, $ZK,
 "tso": {"listen": "127.0.0.1:0"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0", "http": "127.0.0.1:0", "end": "m"},
             {"name": "t2", "listen": "127.0.0.1:0", "start": "m"}]}
EOF
"$CLI" tso --config "$WORK/d0.json" --ready-file "$WORK/r-tso.json" 2>"$WORK/tso.log" &
TSO=$!
PIDS+=("$TSO")
wait_file "$WORK/r-tso.json" "$TSO"
TSO_EP=$(endpoint "$WORK/r-tso.json" tso)
sed "s/\"tso\": {\"listen\": \"127.0.0.1:0\"}/\"tso\": {\"listen\": \"$TSO_EP\"}/" \
  "$WORK/d0.json" >"$WORK/d1.json"
for t in t1 t2; do
  PERCOLATOR_FAILPOINTS="$SLOW" "$CLI" tablet --config "$WORK/d1.json" --name $t \
    --ready-file "$WORK/r-$t.json" 2>"$WORK/$t.log" &
  PIDS+=($!)
  eval "T_$t=$!"
done
wait_file "$WORK/r-t1.json" "$T_t1"
wait_file "$WORK/r-t2.json" "$T_t2"
printf '{"tablets": {"t1": {"listen": "%s"}, "t2": {"listen": "%s"}}, "tso": {"listen": "%s"}}\n' \
  "$(endpoint "$WORK/r-t1.json" t1)" "$(endpoint "$WORK/r-t2.json" t2)" "$TSO_EP" \
  >"$WORK/r-all.json"
client_config "$WORK/r-all.json" "$WORK/client-3.json"
C="$WORK/client-3.json"
# the worker with the default timeout, which its bound counts on
client_config "$WORK/r-all.json" "$WORK/worker.json" 10000
sed -i 's/^{"store": {"timeout_ms": 10000},/{"store": {"timeout_ms": 10000}, "workers": {"threads": 2, "plugins": [{"path": "'"${PLUGIN//\//\\/}"'"}]},/' \
  "$WORK/worker.json"
grep -q dedup "$WORK/worker.json" || fail "could not write the worker's configuration"
"$CLI" worker --config "$WORK/worker.json" 2>"$WORK/worker.log" &
WORKER=$!
PIDS+=("$WORKER")
load_big "$C"
start_scan "$C" daemons "$(endpoint "$WORK/r-t1.json" t1 http)"
start_clients "$C" daemons
sleep 1
grep -q "workers:" "$WORK/worker.log" || fail "the worker did not start: $(tail -3 "$WORK/worker.log")"
t0=$(date +%s%N)
kill -TERM "$WORKER" "$T_t1" "$T_t2" "$TSO"
for p in "$WORKER" "$T_t1" "$T_t2" "$TSO"; do
  wait_exit "$p" $((BOUND + MARGIN))
  [ "$RC" = 0 ] || fail "daemon $p exited $RC on SIGTERM"
done
took=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "  every daemon stopped within ${took} ms after SIGTERM (bound ${BOUND} s)"
grep -q "cancelling them" "$WORK/t1.log" || fail "tablet t1 did not cancel the scan after its grace"
stop_clients
scan_cancelled daemons
pass "SIGTERM stops tso, each tablet and a worker within the bound, exit 0, during a long scan and a stream of clients"
