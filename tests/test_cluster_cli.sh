#!/usr/bin/env bash
# test_cluster_cli.sh PERCOLATOR — the cluster through the command line, the
# way a user checks it by hand:
#   1. `percolator run --config R --ready-file F` (port 0 everywhere, two
#      tablets, /health and /metrics endpoints), coordinated through a
#      private ZooKeeper server (zk_lib.sh); the client configuration is
#      built from the ready file;
#   2. two interactive `percolator txn` sessions, driven line by line through
#      fifos, show snapshot isolation: A begins, B begins, B sets x and
#      commits, A still reads the old x, A's own write of x conflicts;
#   3. `percolator status` (text and --json) shows every role up; GET /health
#      and /metrics answer (bash /dev/tcp, no curl needed);
#   4. SIGTERM stops `run` with exit 0 and a new `run` on the same data still
#      has the committed data;
#   5. the same roles as separate daemons (`tso`, `tablet --name`), started
#      by `percolator playground` (cli_lib.sh's pg_start): status exits 0,
#      and 3 after one tablet is killed, naming it down (no live server
#      holds it in ZooKeeper's tablet map), while the other tablet still
#      serves; each daemon exits 0 on SIGTERM.
# Every wait is bounded, every CLI call runs under `timeout`, and a trap kills
# and reaps every process started here. Needs bash, coreutils and grep/sed
# only (no jq, curl or python).
set -u
CLI=${1:?usage: test_cluster_cli.sh /path/to/percolator}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-cli-XXXXXX") || exit 1
PIDS=()
FAILED=0

cleanup() {
  exec 3>&- 4>&-
  pg_cleanup
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$FAILED" = 1 ]; then # the logs tell why
    for f in "$WORK"/*.log "$WORK"/*.out "$WORK"/*.err; do
      [ -s "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }
    done >&2
  fi
  if [ -n "${PC_KEEP_TEST_DIRS:-}" ]; then
    echo "kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/zk_lib.sh"

# client_config READY OUT: the client configuration of the daemons in READY.
client_config() {
  local tso t1 t2
  tso=$(endpoint "$1" tso) && t1=$(endpoint "$1" t1) && t2=$(endpoint "$1" t2) ||
    fail "cannot parse $1"
  [ -n "$tso" ] && [ -n "$t1" ] && [ -n "$t2" ] || fail "incomplete $1"
  cat >"$2" <<EOF
{"store": {"timeout_ms": 5000},
 "tso": {"listen": "$tso"},
 "zookeeper": {"connect": "$ZK_CONNECT", "root": "$ZK_ROOT", "session_timeout_ms": 10000},
 "tablets": [{"name": "t1", "listen": "$t1", "end": "m"},
             {"name": "t2", "listen": "$t2", "start": "m"}]}
EOF
}

# http_get HOST:PORT PATH: the response (status line, headers, body) in $HTTP.
http_get() {
  local host=${1%:*} port=${1##*:} fd
  exec {fd}<>"/dev/tcp/$host/$port" || fail "cannot connect to $1"
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$2" "$1" >&"$fd"
  HTTP=$(timeout 10 cat <&"$fd")
  exec {fd}>&-
}

# ---- 1. percolator run ------------------------------------------------------

zk_start
ZK_ROOT=/percolator/cli-run
# (no collection in the background: 3b counts the passes of `percolator gc`)
cat >"$WORK/run.json" <<EOF
{"data_dir": "$WORK/data", "log": {"level": "info"}, "store": {"gc_interval_ms": 0},
 "tso": {"listen": "127.0.0.1:0", "http": "127.0.0.1:0"},
 "zookeeper": {"connect": "$ZK_CONNECT", "root": "$ZK_ROOT", "session_timeout_ms": 10000},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0", "http": "127.0.0.1:0", "end": "m"},
             {"name": "t2", "listen": "127.0.0.1:0", "http": "127.0.0.1:0", "start": "m"}]}
EOF

start_run() { # start_run TAG: starts `run`, waits for its ready file; pid in $RUN
  "$CLI" run --config "$WORK/run.json" --ready-file "$WORK/ready-$1.json" 2>"$WORK/run-$1.log" &
  RUN=$!
  PIDS+=("$RUN")
  wait_file "$WORK/ready-$1.json" "$RUN"
  client_config "$WORK/ready-$1.json" "$WORK/client-$1.json"
}

start_run 1
C="$WORK/client-1.json"
pass "percolator run --config (port 0 everywhere) is ready"

run_cli 30 --config "$C" set acct x bal v0
[ "$RC" = 0 ] || fail "set x: exit $RC: $(cat "$WORK/last.err")"
run_cli 30 --config "$C" set acct zed bal z0 # a row on tablet t2
[ "$RC" = 0 ] || fail "set zed: exit $RC: $(cat "$WORK/last.err")"

# ---- 2. two interactive sessions ----------------------------------------------

mkfifo "$WORK/A.in" "$WORK/B.in" || fail mkfifo
timeout -k 5 120 "$CLI" --config "$C" txn <"$WORK/A.in" >"$WORK/A.out" 2>"$WORK/A.err" &
TXA=$!
PIDS+=("$TXA")
timeout -k 5 120 "$CLI" --config "$C" txn --json <"$WORK/B.in" >"$WORK/B.out" 2>"$WORK/B.err" &
TXB=$!
PIDS+=("$TXB")
exec 3>"$WORK/A.in" 4>"$WORK/B.in"
NA=0
NB=0

# say A|B LINE: sends LINE to a session and waits (10 s at most) for its one
# answer line, left in $ANSWER.
say() {
  local who=$1 line=$2 fd n out i
  if [ "$who" = A ]; then fd=3 NA=$((NA + 1)) n=$NA out="$WORK/A.out"
  else fd=4 NB=$((NB + 1)) n=$NB out="$WORK/B.out"; fi
  printf '%s\n' "$line" >&"$fd" || fail "session $who is gone (sending '$line')"
  for i in $(seq 1 200); do
    [ "$(wc -l <"$out")" -ge "$n" ] && break
    sleep 0.05
  done
  [ "$(wc -l <"$out")" -ge "$n" ] || fail "session $who did not answer '$line' within 10 s"
  ANSWER=$(sed -n "${n}p" "$out")
  echo "  $who> $line"
  echo "  $who< $ANSWER"
}

say A "begin"
[[ "$ANSWER" =~ ^ok\ start_ts=[0-9]+$ ]] || fail "A begin: $ANSWER"
say B "begin"
[[ "$ANSWER" == *'"op":"begin"'* && "$ANSWER" == *'"status":"ok"'* ]] || fail "B begin: $ANSWER"
say B "set acct x bal v1"
[[ "$ANSWER" == *'"status":"ok"'* ]] || fail "B set: $ANSWER"
say B "commit"
[[ "$ANSWER" == *'"op":"commit"'* && "$ANSWER" == *'"status":"ok"'* ]] || fail "B commit: $ANSWER"
[[ "$ANSWER" =~ \"commit_ts\":[1-9][0-9]* ]] || fail "B commit wrote nothing: $ANSWER"
say A "get acct x bal"
[ "$ANSWER" = 'value "v0"' ] || fail "A must still see the old x (snapshot isolation), got: $ANSWER"
say A "get acct zed bal"
[ "$ANSWER" = 'value "z0"' ] || fail "A get zed: $ANSWER"
say A "set acct x bal vA"
[ "$ANSWER" = ok ] || fail "A set: $ANSWER"
say A "get acct x bal"
[ "$ANSWER" = 'value "vA"' ] || fail "A must read its own write, got: $ANSWER"
say A "commit"
[[ "$ANSWER" == "error conflict:"* ]] || fail "A's commit must conflict with B's, got: $ANSWER"
# a new transaction sees B's commit, not A's write
say A "begin"
say A "get acct x bal"
[ "$ANSWER" = 'value "v1"' ] || fail "after the conflict x must be v1, got: $ANSWER"
say A "abort"
say B "quit"
say A "quit"
exec 3>&- 4>&-
wait_exit "$TXA" 20
[ "$RC" = 0 ] || fail "session A exited $RC"
wait_exit "$TXB" 20
[ "$RC" = 0 ] || fail "session B exited $RC"
run_cli 30 --config "$C" get acct x bal
[ "$RC" = 0 ] && [ "$OUT" = v1 ] || fail "percolator get x: exit $RC, '$OUT'"
pass "two txn sessions: A keeps its snapshot, B's commit wins, A's commit conflicts"

# ---- 3. status, /health, /metrics -------------------------------------------

run_cli 30 --config "$C" status
[ "$RC" = 0 ] || fail "status exited $RC: $OUT"
echo "$OUT" | sed 's/^/  /'
for role in "tso (elected)" zookeeper "tablet t1" "tablet t2"; do
  echo "$OUT" | grep -q "^$role .* up" || fail "status does not show $role up"
done
run_cli 30 --config "$C" status --json
[ "$RC" = 0 ] || fail "status --json exited $RC"
[[ "$OUT" == *'"mode":"cluster"'* ]] || fail "status --json: $OUT"
[ "$(grep -o '"up":true' <<<"$OUT" | wc -l)" = 4 ] || fail "status --json: not 4 roles up: $OUT"
! grep -q '"up":false' <<<"$OUT" || fail "status --json shows a role down: $OUT"

for role in tso t1 t2; do
  ep=$(endpoint "$WORK/ready-1.json" "$role" http)
  [ -n "$ep" ] || fail "no http endpoint for $role in the ready file"
  http_get "$ep" /health
  [[ "$HTTP" == "HTTP/1."?" 200"* ]] || fail "GET /health of $role: $HTTP"
  http_get "$ep" /metrics
  [[ "$HTTP" == "HTTP/1."?" 200"* ]] || fail "GET /metrics of $role: ${HTTP:0:200}"
  grep -q '^percolator_rpc_requests_total [0-9]' <<<"$HTTP" || fail "metrics of $role lack requests"
  http_get "$ep" /nope
  [[ "$HTTP" == "HTTP/1."?" 404"* ]] || fail "GET /nope of $role: ${HTTP:0:100}"
done
http_get "$(endpoint "$WORK/ready-1.json" t1 http)" /metrics
grep -q '^percolator_tablet_operations_total [1-9]' <<<"$HTTP" || fail "tablet metrics: $HTTP"
grep -q '^percolator_rpc_requests_inline_total [0-9]' <<<"$HTTP" || fail "tablet metrics lack inline reads: $HTTP"
grep -q '^percolator_rpc_requests_deferred_total [0-9]' <<<"$HTTP" || fail "tablet metrics lack deferred reads: $HTTP"
http_get "$(endpoint "$WORK/ready-1.json" tso http)" /metrics
grep -q '^percolator_tso_last_timestamp_seconds [1-9]' <<<"$HTTP" || fail "tso metrics: $HTTP"
pass "status (text and --json) shows every role up; /health and /metrics answer"

# ---- 3b. gc on every tablet -------------------------------------------------
# a client whose GC may pass snapshots older than one second: x was written
# twice above, so once a second has passed its older version can go
G="$WORK/client-gc.json"
sed 's/"store": *{/"store": {"gc_lifetime_ms": 1000, /' "$C" >"$G"
grep -q gc_lifetime_ms "$G" || fail "no store section to extend in $C"
sleep 1.2
run_cli 30 --config "$G" gc --json
[ "$RC" = 0 ] || fail "gc exited $RC: $OUT"
[[ "$OUT" =~ \"versions_deleted\":[1-9] ]] || fail "gc deleted no version of x: $OUT"
run_cli 30 --config "$C" get acct x bal
[ "$RC" = 0 ] && [ "$OUT" = v1 ] || fail "after gc x is '$OUT' (exit $RC), want v1"
run_cli 30 --config "$C" status --json
[ "$(grep -o '"passes":1' <<<"$OUT" | wc -l)" = 2 ] || fail "status: not both tablets show one gc pass: $OUT"
http_get "$(endpoint "$WORK/ready-1.json" t1 http)" /metrics
grep -q '^percolator_gc_passes_total 1$' <<<"$HTTP" || fail "tablet metrics lack the gc pass: $HTTP"
pass "gc runs on every tablet, keeps the newest version, shows in status and /metrics"

# ---- 4. SIGTERM, then a new run on the same data -----------------------------

kill -TERM "$RUN"
wait_exit "$RUN" 30
[ "$RC" = 0 ] || fail "run exited $RC on SIGTERM; see $WORK/run-1.log"
grep -q "shutting down" "$WORK/run-1.log" || fail "run did not log its shutdown"
run_cli 15 --config "$C" --timeout 2s get acct x bal
[ "$RC" = 3 ] || fail "get with the daemons stopped: exit $RC (want 3)"
pass "SIGTERM stops run with exit 0; clients then fail with exit 3"

# every tablet directory is marked with the data format
for t in t1 t2; do
  [ "$(cat "$WORK/data/tablet-$t/FORMAT" 2>/dev/null)" = "percolator-data 4" ] ||
    fail "tablet $t's directory has no FORMAT 'percolator-data 4'"
done
# the second run collects garbage in the background, often
sed -i 's/"store": {"gc_interval_ms": 0},/"store": {"gc_interval_ms": 200, "gc_lifetime_ms": 1000},/' \
  "$WORK/run.json"
grep -q "\"gc_interval_ms\": 200" "$WORK/run.json" || fail "could not add the gc settings to run.json"
start_run 2
C="$WORK/client-2.json"
run_cli 30 --config "$C" get acct x bal
[ "$RC" = 0 ] && [ "$OUT" = v1 ] || fail "after the restart x is '$OUT' (exit $RC), want v1"
run_cli 30 --config "$C" get acct zed bal
[ "$RC" = 0 ] && [ "$OUT" = z0 ] || fail "after the restart zed is '$OUT' (exit $RC), want z0"
printf 'begin\nset acct x bal v2\ncommit\n' | timeout 30 "$CLI" --config "$C" txn >"$WORK/C.out" 2>&1
grep -q '^ok commit_ts=[1-9]' "$WORK/C.out" || fail "a commit after the restart: $(cat "$WORK/C.out")"
run_cli 30 --config "$C" get acct x bal
[ "$OUT" = v2 ] || fail "after the restart a new commit reads '$OUT'"
# x has older versions (v0, v1): the background collector deletes them
deleted=0
for _ in $(seq 300); do
  run_cli 30 --config "$C" status --json
  [[ "$OUT" =~ \"versions_deleted\":[1-9] ]] && { deleted=1; break; }
  sleep 0.1
done
[ "$deleted" = 1 ] || fail "the background collector deleted nothing: $OUT"
run_cli 30 --config "$C" get acct x bal
[ "$OUT" = v2 ] || fail "after background gc x reads '$OUT'"
kill -TERM "$RUN"
wait_exit "$RUN" 30
[ "$RC" = 0 ] || fail "the second run exited $RC on SIGTERM"
pass "a restarted run on the same data has the committed data and takes new commits; tablet directories carry the data format"

# ---- 5. separate daemons; status after a tablet is killed --------------------

# the roles as the playground starts them (cli_lib.sh's pg_start): its own
# ZooKeeper, `percolator tso` and `percolator tablet --name t1`, `--name t2`
printf '{"zookeeper": {"session_timeout_ms": 10000}}\n' >"$WORK/pg-extra.json"
pg_start "$WORK/pg" --servers 0 --oracles 1 --split m --extra-config "$WORK/pg-extra.json"
T2=$(pg_role t2 pid)
[ -n "$T2" ] && [ "$T2" != 0 ] || fail "no t2 in the playground's state: $(cat "$PG_STATE")"

run_cli 30 --config "$C" set acct a bal 1
[ "$RC" = 0 ] || fail "set a (t1) on separate daemons: exit $RC: $(cat "$WORK/last.err")"
run_cli 30 --config "$C" set acct z bal 2
[ "$RC" = 0 ] || fail "set z (t2) on separate daemons: exit $RC: $(cat "$WORK/last.err")"
run_cli 30 --config "$C" status
[ "$RC" = 0 ] || fail "status with every daemon up exited $RC: $OUT"

kill "$T2"
pg_wait_exited t2 30
[ "$(pg_role t2 exit_code)" = 0 ] || fail "tablet t2 exited on SIGTERM: $(pg_role t2 exit_code) $(pg_role t2 exit_signal)"
run_cli 30 --config "$C" --timeout 3s status
echo "$OUT" | sed 's/^/  /'
[ "$RC" = 3 ] || fail "status with tablet t2 killed exited $RC (want 3)"
echo "$OUT" | grep -q "^tablet t2 .* down" || fail "status does not show t2 down"
for role in "tso (elected)" zookeeper "tablet t1"; do
  echo "$OUT" | grep -q "^$role .* up" || fail "status does not show $role up with t2 down"
done
run_cli 30 --config "$C" --timeout 3s status --json
[ "$RC" = 3 ] || fail "status --json with t2 killed exited $RC (want 3)"
[ "$(grep -o '"up":false' <<<"$OUT" | wc -l)" = 1 ] || fail "status --json: $OUT"
[ "$(grep -o '"up":true' <<<"$OUT" | wc -l)" = 3 ] || fail "status --json: $OUT"
echo "$OUT" | grep -q '"owner":null' || fail "status --json does not show t2 without an owner: $OUT"
# the rows of t1 still serve; those of t2 fail at once with exit 3, naming the
# tablet and its rows (t2 stopped: its owner node went with its session)
run_cli 30 --config "$C" get acct a bal
[ "$RC" = 0 ] && [ "$OUT" = 1 ] || fail "get a (t1) with t2 down: exit $RC '$OUT'"
run_cli 30 --config "$C" --timeout 1h get acct z bal
[ "$RC" = 3 ] || fail "get z (t2) with t2 down: exit $RC (want 3)"
grep -q "tablet t2 \[m, end) has no live server" "$WORK/last.err" ||
  fail "the error does not name t2 and its rows: $(cat "$WORK/last.err")"
pass "status exits 3 with one tablet killed, naming it down; the other tablet serves"

pg_stop # SIGTERM to t1, then the oracle
for role in t1 tso-1; do
  [ "$(pg_role $role exit_code)" = 0 ] ||
    fail "$role exited on SIGTERM: $(pg_role $role exit_code) $(pg_role $role exit_signal)"
done
pass "every daemon stopped cleanly"
# no sanitizer report in any log (when the binary is built with -DPC_SANITIZE=...)
if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' \
  "$WORK"/*.log "$WORK"/*.err "$WORK"/pg/logs/*.log >/dev/null 2>&1; then
  fail "a sanitizer report: $(grep -l -E 'Sanitizer|runtime error:' "$WORK"/*.log "$WORK"/*.err "$WORK"/pg/logs/*.log)"
fi
echo "PASS"
