#!/usr/bin/env bash
# test_served_cli.sh PERCOLATOR TEMPLATE_PLUGIN — a data directory served by
# `percolator worker`, and one no process serves, through the command line:
#   1. a reader's snapshot: a `txn` session connected through serving.json
#      reads a cell, the cell is written again, and a garbage collection runs
#      well past store.gc_lifetime_ms: the session reads the same value again
#      (the worker's oracle knows the snapshot the session holds). A session
#      older than store.snapshot_max_age_ms is refused, naming that key.
#   2. a worker that dies while it starts (between its observers' start and
#      the rewrite of serving.json: the failpoint daemon.before_serving), again
#      and again: the worker started after it serves on the same ports with
#      the same secret, and a session connected before goes on; ports pinned
#      in the configuration (workers.serve) are the ones served, and a pinned
#      port that is taken is an error naming it.
#   3. one-shot verbs against a directory that another short-lived process
#      holds: a `set` waits for it (up to its --timeout), saying on a terminal
#      whom it waits for, and succeeds once it is free; one whose --timeout
#      runs out fails, naming the holder.
# Every CLI call runs under `timeout`; a trap kills what was started here.
set -u
[ -n "${PC_TRACE:-}" ] && set -x
CLI=${1:?usage: test_served_cli.sh PERCOLATOR TEMPLATE_PLUGIN}
PLUGIN=${2:?usage: test_served_cli.sh PERCOLATOR TEMPLATE_PLUGIN}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN" >&2; exit 1; }
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-served-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

start_worker() { # start_worker TAG CONFIG: pid in W, once it serves
  rm -f "$WORK/ready-$1.json"
  "$CLI" --config "$2" worker --ready-file "$WORK/ready-$1.json" 2>>"$WORK/worker-$1.log" 5>&- &
  W=$!
  PIDS+=("$W")
  wait_file "$WORK/ready-$1.json" "$W"
}
stop_worker() { # stop_worker PID
  kill -TERM "$1"
  wait_exit "$1" 60
  [ "$RC" = 0 ] || fail "worker $1 exited $RC on SIGTERM"
}
session() { # session TAG DIR: a txn session reading from fifo $WORK/TAG.in (fd 5), in S
  rm -f "$WORK/$1.in"
  mkfifo "$WORK/$1.in"
  "$CLI" --data "$2" txn <"$WORK/$1.in" >"$WORK/$1.out" 2>"$WORK/$1.err" &
  S=$!
  PIDS+=("$S")
  exec 5>"$WORK/$1.in"
}
answers() { # answers TAG N: until the session has answered N lines (at most 60 s)
  local i
  for i in $(seq 1200); do
    [ "$(wc -l <"$WORK/$1.out")" -ge "$2" ] && return 0
    sleep 0.05
  done
  fail "session $1 answered $(wc -l <"$WORK/$1.out") lines, want $2: $(cat "$WORK/$1.err")"
}
oracle_after() { # oracle_after DIR TS MS: until the oracle's timestamps are MS past TS
  local i now
  for i in $(seq 600); do
    run_cli 10 --data "$1" txn <<<'begin'
    now=$(grep -o 'start_ts=[0-9]*' <<<"$OUT" | grep -o '[0-9]*$')
    [ -n "$now" ] && [ "$now" -gt $(($2 + ($3 << 18))) ] && return 0
    sleep 0.1
  done
  fail "the oracle's timestamps did not pass $2 by $3 ms"
}
gc_safe_point() { # one `gc`; its safe point in SAFE
  run_cli 60 --data "$1" gc --json
  [ "$RC" = 0 ] || fail "gc exited $RC: $(cat "$WORK/last.err")"
  SAFE=$(grep -o '"safe_point":[0-9]*' <<<"$OUT" | grep -o '[0-9]*$')
}
config() { # config FILE DIR STORE [EXTRA]: a worker's configuration serving DIR
  printf '{"data_dir": "%s", "log": {"level": "warn"}, "store": {%s}, "workers": {"threads": 1, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]%s}}\n' \
    "$2" "$3" "$PLUGIN" "${4:-}" >"$1"
}

# ---- 1. a reader's snapshot outlives store.gc_lifetime_ms ---------------------------

D="$WORK/snap"
run_cli 10 --data "$D" init
[ "$RC" = 0 ] || fail "init: $(cat "$WORK/last.err")"
config "$WORK/snap.json" "$D" '"gc_lifetime_ms": 1000, "gc_interval_ms": 0'
start_worker snap "$WORK/snap.json"
run_cli 10 --data "$D" set t r c:v one
[ "$RC" = 0 ] || fail "set one: $(cat "$WORK/last.err")"
session reader "$D"
printf 'begin\nget t r c:v\n' >&5
answers reader 2
START=$(grep -o 'start_ts=[0-9]*' "$WORK/reader.out" | grep -o '[0-9]*$')
grep -qx 'value "one"' "$WORK/reader.out" || fail "the reader's first read: $(cat "$WORK/reader.out")"
run_cli 10 --data "$D" set t r c:v two
[ "$RC" = 0 ] || fail "set two: $(cat "$WORK/last.err")"
oracle_after "$D" "$START" 2000 # past store.gc_lifetime_ms (in the oracle's time)
# until the oracle has heard from every client it may have (it just started):
# a pass then collects up to what the clients' snapshots allow, the reader's
# included, and never less than 2 s of the reader's age behind its start
NEAR=$((START - (2000 << 18)))
for _ in $(seq 60); do
  gc_safe_point "$D"
  [ "$SAFE" -ge "$NEAR" ] && break
  sleep 0.5
done
[ "$SAFE" -ge "$NEAR" ] || fail "gc's safe point $SAFE stays far behind the reader's $START"
[ "$SAFE" -le "$START" ] || fail "gc's safe point $SAFE passed the reader's snapshot $START"
printf 'get t r c:v\ncommit\n' >&5
answers reader 4
sed -n 3p "$WORK/reader.out" | grep -qx 'value "one"' ||
  fail "the reader's second read, after a gc past store.gc_lifetime_ms: $(sed -n 3p "$WORK/reader.out")"
exec 5>&-
wait_exit "$S" 30
run_cli 10 --data "$D" get t r c:v
[ "$OUT" = two ] || fail "after the reader: '$OUT'"
pass "a reader's snapshot is kept through a gc past store.gc_lifetime_ms"
stop_worker "$W"

config "$WORK/snap.json" "$D" '"gc_lifetime_ms": 1000, "gc_interval_ms": 0, "snapshot_max_age_ms": 2000'
start_worker snap2 "$WORK/snap.json"
session old "$D"
printf 'begin\nget t r c:v\n' >&5
answers old 2
START=$(grep -o 'start_ts=[0-9]*' "$WORK/old.out" | grep -o '[0-9]*$')
run_cli 10 --data "$D" set t r c:v three
oracle_after "$D" "$START" 3000 # past store.snapshot_max_age_ms
gc_safe_point "$D"
[ "$SAFE" -gt "$START" ] || fail "gc keeps a snapshot older than store.snapshot_max_age_ms: $SAFE"
printf 'get t r c:v\n' >&5
answers old 3
sed -n 3p "$WORK/old.out" | grep -q '^error aborted:.*store.snapshot_max_age_ms' ||
  fail "a read older than store.snapshot_max_age_ms: $(sed -n 3p "$WORK/old.out")"
exec 5>&-
wait_exit "$S" 30
pass "a snapshot older than store.snapshot_max_age_ms is refused, naming the key"
stop_worker "$W"

# ---- 2. a worker that dies while it starts keeps its endpoints; pinned ports ---------

E="$WORK/crash"
run_cli 10 --data "$E" init
[ "$RC" = 0 ] || fail "init: $(cat "$WORK/last.err")"
config "$WORK/crash.json" "$E" '"gc_interval_ms": 0'
start_worker crash "$WORK/crash.json"
identity() { # the ports and the secret $1/serving.json names
  grep -o -E '"(listen|secret)": *"[^"]*"' "$1/serving.json" | sort
}
SERVED=$(identity "$E")
[[ "$SERVED" == *secret* ]] || fail "serving.json holds no secret: $(cat "$E/serving.json")"
session stay "$E"
printf 'begin\nset t r c:v 1\ncommit\n' >&5
answers stay 3
grep -q '^ok commit_ts=[1-9]' "$WORK/stay.out" || fail "the session's first commit: $(cat "$WORK/stay.out")"
kill -9 "$W"
wait "$W" 2>/dev/null
for i in 1 2 3; do # restarted by a supervisor, it dies again before it serves
  PERCOLATOR_FAILPOINTS=daemon.before_serving=exit \
    "$CLI" --config "$WORK/crash.json" worker 2>>"$WORK/worker-crashing.log" 5>&- &
  WC=$!
  PIDS+=("$WC")
  wait_exit "$WC" 60
  [ "$RC" = 137 ] || fail "the worker started with the failpoint exited $RC, not at the failpoint"
done
start_worker crash2 "$WORK/crash.json"
[ "$(identity "$E")" = "$SERVED" ] ||
  fail "after workers that died while starting, other ports or secret: $(identity "$E") (was $SERVED)"
printf 'begin\nset t r c:v 2\ncommit\n' >&5
for _ in $(seq 1200); do [ "$(grep -c '^ok commit_ts=[1-9]' "$WORK/stay.out")" = 2 ] && break; sleep 0.05; done
[ "$(grep -c '^ok commit_ts=[1-9]' "$WORK/stay.out")" = 2 ] ||
  fail "the session connected before the crashes did not go on: $(cat "$WORK/stay.out" "$WORK/stay.err")"
exec 5>&-
wait_exit "$S" 30
[ "$RC" = 0 ] || fail "the session exited $RC"
pass "workers that died while starting: the next one serves the same ports and secret, a session goes on"
stop_worker "$W"

# ports outside the kernel's ephemeral range (from 32768 on), so that nothing of
# this machine takes them meanwhile; a pair that happens to be taken is tried again
F="$WORK/pinned"
run_cli 10 --data "$F" init
for _ in $(seq 20); do
  TSO_PORT=$((20000 + RANDOM % 12000))
  TABLET_PORT=$((TSO_PORT + 1))
  config "$WORK/pinned.json" "$F" '"gc_interval_ms": 0' ", \"serve_ports\": {\"tso\": $TSO_PORT, \"tablet\": $TABLET_PORT}"
  rm -f "$WORK/ready-pinned.json"
  "$CLI" --config "$WORK/pinned.json" worker --ready-file "$WORK/ready-pinned.json" \
    2>"$WORK/worker-pinned.log" 5>&- &
  W=$!
  PIDS+=("$W")
  for _ in $(seq 600); do
    [ -s "$WORK/ready-pinned.json" ] && break
    kill -0 "$W" 2>/dev/null || break
    sleep 0.05
  done
  [ -s "$WORK/ready-pinned.json" ] && break
  wait "$W" 2>/dev/null
  grep -q "is taken" "$WORK/worker-pinned.log" || fail "the pinned worker: $(cat "$WORK/worker-pinned.log")"
done
[ -s "$WORK/ready-pinned.json" ] || fail "no free pair of pinned ports in 20 tries"
grep -q "\"listen\": *\"127.0.0.1:$TSO_PORT\"" "$F/serving.json" &&
  grep -q "\"listen\": *\"127.0.0.1:$TABLET_PORT\"" "$F/serving.json" ||
  fail "pinned ports $TSO_PORT and $TABLET_PORT are not served: $(cat "$F/serving.json")"
G="$WORK/pinned2"
run_cli 10 --data "$G" init
config "$WORK/pinned2.json" "$G" '"gc_interval_ms": 0' ", \"serve_ports\": {\"tso\": $TSO_PORT, \"tablet\": $TABLET_PORT}"
run_cli 30 --config "$WORK/pinned2.json" worker
[ "$RC" != 0 ] || fail "a worker whose pinned port is taken started"
grep -q "workers.serve_ports.tso: port $TSO_PORT of 127.0.0.1 is taken" "$WORK/last.err" ||
  fail "a pinned port that is taken: $(cat "$WORK/last.err")"
pass "pinned ports are served; a pinned port that is taken is an error naming it"
stop_worker "$W"

# ---- 3. one-shot verbs wait for a directory another short-lived process holds ------

H="$WORK/held"
run_cli 10 --data "$H" init
[ "$RC" = 0 ] || fail "init: $(cat "$WORK/last.err")"
session holder "$H" # a txn session holds the directory while its input stays open
printf 'begin\n' >&5
answers holder 1
HOLDER=$S
# on a terminal (script(1) gives it one), the verb says whom it waits for
script -qefc "'$CLI' --data '$H' --timeout 60s set t r c:v waited" "$WORK/waiting.tty" \
  >/dev/null 2>&1 5>&- </dev/null &
SETTER=$!
PIDS+=("$SETTER")
for _ in $(seq 600); do
  grep -q "waiting for process $HOLDER (percolator --data $H txn) to release data directory" \
    "$WORK/waiting.tty" 2>/dev/null && break
  kill -0 "$SETTER" 2>/dev/null || break
  sleep 0.05
done
grep -q "waiting for process $HOLDER (percolator --data $H txn)" "$WORK/waiting.tty" ||
  fail "a set on a held directory did not say that it waits: $(cat "$WORK/waiting.tty")"
exec 5>&- # the session ends and lets the directory go
wait_exit "$HOLDER" 30
wait_exit "$SETTER" 60
[ "$RC" = 0 ] || fail "the set that waited exited $RC: $(cat "$WORK/waiting.tty")"
run_cli 10 --data "$H" get t r c:v
[ "$OUT" = waited ] || fail "the set that waited wrote nothing: '$OUT'"
pass "a set on a directory held by a txn session waits for it, saying so on a terminal"

session holder "$H"
printf 'begin\n' >&5
answers holder 1
run_cli 30 --data "$H" --timeout 1s set t r c:v late
[ "$RC" = 3 ] || fail "a set past its --timeout exited $RC"
grep -q "in use by another process (client $S), which did not release it within 1 s" "$WORK/last.err" ||
  fail "a set past its --timeout: $(cat "$WORK/last.err")"
exec 5>&-
wait_exit "$S" 30
pass "a set whose --timeout runs out while it waits fails, naming the holder"

if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' \
  "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1; then
  fail "a sanitizer report in $(grep -l -E 'Sanitizer|runtime error:' "$WORK"/*.log "$WORK"/*.err)"
fi
echo "PASS"
