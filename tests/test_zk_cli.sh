#!/usr/bin/env bash
# test_zk_cli.sh PERCOLATOR — a cluster coordinated through ZooKeeper, from
# the command line: a private ZooKeeper server (zk_lib.sh), two `percolator
# tso` processes (one leads, one stands by), one `percolator tablet`, and the
# data verbs as clients. It checks that a configuration naming the retired lock
# service is refused with its file:line:column, and the lockd verb too, that each
# oracle's /metrics says which one leads, and that after the leader is
# SIGKILLed the standby leads and the verbs commit and read again; and that
# `doctor` says when ZooKeeper does not answer, the configured root is
# missing or no oracle is elected (exit 3). Every wait is bounded; the
# cleanup kills every process it started by its pid.
set -u
CLI=${1:?usage: test_zk_cli.sh /path/to/percolator}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-zkcli-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/zk_lib.sh"
cli_start_cleanup

# metric HOST:PORT NAME: the value of NAME in the endpoint's /metrics ("" if none).
metric() {
  local fd host=${1%:*} port=${1##*:}
  exec {fd}<>"/dev/tcp/$host/$port" 2>/dev/null || { echo ""; return; }
  printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&$fd
  sed -n "s/^$2 //p" <&$fd | head -n 1
  exec {fd}<&-
}

# ready_ep FILE ROLE KEY: the "KEY" endpoint of ROLE in a ready file.
ready_ep() {
  tr -d ' \n' <"$1" | sed -n "s/.*\"$2\":{[^}]*\"$3\":\"\([^\"]*\)\".*/\1/p"
}

zk_start
pass "a private ZooKeeper server serves at $ZK_CONNECT"

cat >"$WORK/both.json" <<EOF2
{
  "zookeeper": { "connect": "$ZK_CONNECT", "root": "/percolator/cli" },
  "lockservice": { "listen": "127.0.0.1:0" }
}
EOF2
run_cli 20 --config "$WORK/both.json" status
[ "$RC" != 0 ] || fail "a lock service beside ZooKeeper was accepted"
grep -q 'both.json:3:18: lockservice: the lock service daemon ("lockd") is retired' "$WORK/last.err" ||
  fail "unexpected refusal: $(cat "$WORK/last.err")"
pass "a lock service section is refused with file:line:column"
run_cli 20 lockd
[ "$RC" = 2 ] || fail "the retired lockd verb exited $RC (want 2)"
grep -q "'lockd' is retired" "$WORK/last.err" || fail "lockd: $(cat "$WORK/last.err")"
pass "the retired lockd verb says so"

TPORT=$(zk_free_port)
cat >"$WORK/zk.json" <<EOF2
{
  "data_dir": "$WORK/data",
  "zookeeper": { "connect": "$ZK_CONNECT", "root": "/percolator/cli", "session_timeout_ms": 3000 },
  "tso": { "listen": "127.0.0.1:0", "http": "127.0.0.1:0" },
  "tablets": [ { "name": "t1", "listen": "127.0.0.1:$TPORT" } ]
}
EOF2
TSO_PID=()
TSO_HTTP=()
for i in 0 1; do
  "$CLI" --config "$WORK/zk.json" tso --ready-file "$WORK/tso$i.ready" >"$WORK/tso$i.log" 2>&1 &
  TSO_PID+=($!)
  PIDS+=($!)
  wait_file "$WORK/tso$i.ready" $!
  TSO_HTTP+=("$(ready_ep "$WORK/tso$i.ready" tso http)")
done
"$CLI" --config "$WORK/zk.json" tablet --name t1 --ready-file "$WORK/t1.ready" >"$WORK/t1.log" 2>&1 &
PIDS+=($!)
wait_file "$WORK/t1.ready" $!

# which oracle leads, by its /metrics (bounded)
LEADER=
for _ in $(seq 1 300); do
  for i in 0 1; do
    [ "$(metric "${TSO_HTTP[$i]}" percolator_tso_leading)" = 1 ] && LEADER=$i
  done
  [ -n "$LEADER" ] && break
  sleep 0.1
done
[ -n "$LEADER" ] || fail "no oracle reports that it leads"
STANDBY=$((1 - LEADER))
[ "$(metric "${TSO_HTTP[$STANDBY]}" percolator_tso_leading)" = 0 ] || fail "both oracles lead"
[ "$(metric "${TSO_HTTP[$STANDBY]}" percolator_zookeeper_session_state)" = 1 ] ||
  fail "the standby's ZooKeeper session is not connected"
pass "oracle $LEADER leads, oracle $STANDBY stands by"

run_cli 30 --config "$WORK/zk.json" status
[ "$RC" = 0 ] || fail "status: rc $RC: $OUT $(cat "$WORK/last.err")"
LEADER_EP=$(ready_ep "$WORK/tso$LEADER.ready" tso listen)
echo "$OUT" | grep -q "^tso (elected) *$LEADER_EP *up .*candidates=2" ||
  fail "status does not name the leader $LEADER_EP and two candidates: $OUT"
pass "status names the elected oracle and its candidates"

run_cli 30 --config "$WORK/zk.json" set acct a v 100
[ "$RC" = 0 ] || fail "set: $(cat "$WORK/last.err")"
kill -9 "${TSO_PID[$LEADER]}"
wait "${TSO_PID[$LEADER]}" 2>/dev/null
run_cli 60 --config "$WORK/zk.json" set acct b v 200
[ "$RC" = 0 ] || fail "set after the leader died: $(cat "$WORK/last.err")"
run_cli 30 --config "$WORK/zk.json" get acct a v
[ "$RC" = 0 ] && [ "$OUT" = 100 ] || fail "get a after the failover: rc $RC, '$OUT'"
run_cli 30 --config "$WORK/zk.json" get acct b v
[ "$RC" = 0 ] && [ "$OUT" = 200 ] || fail "get b after the failover: rc $RC, '$OUT'"
[ "$(metric "${TSO_HTTP[$STANDBY]}" percolator_tso_leading)" = 1 ] ||
  fail "the standby does not lead after the leader was killed"
[ "$(metric "${TSO_HTTP[$STANDBY]}" percolator_tso_elections_total)" = 1 ] ||
  fail "the standby was not elected once"
pass "after the leader's SIGKILL the standby leads and commits go on"

# doctor asks ZooKeeper: it answers, the root exists, an oracle is elected
run_cli 30 --config "$WORK/zk.json" doctor
[ "$RC" = 0 ] || fail "doctor on a healthy cluster exited $RC: $OUT $(cat "$WORK/last.err")"
grep -q "^ok       zookeeper $ZK_CONNECT: answers" <<<"$OUT" || fail "doctor's zookeeper line: $OUT"
grep -q "^ok       zookeeper root /percolator/cli: exists" <<<"$OUT" || fail "doctor's root line: $OUT"
STANDBY_EP=$(ready_ep "$WORK/tso$STANDBY.ready" tso listen)
grep -q "^ok       tso (elected): leader $STANDBY_EP answers" <<<"$OUT" || fail "doctor's tso line: $OUT"
sed 's#"/percolator/cli"#"/percolator/elsewhere"#' "$WORK/zk.json" >"$WORK/elsewhere.json"
run_cli 30 --config "$WORK/elsewhere.json" doctor
[ "$RC" = 3 ] || fail "doctor with a root no cluster made exited $RC, want 3: $OUT"
grep -q "^PROBLEM  zookeeper root /percolator/elsewhere: does not exist" <<<"$OUT" ||
  fail "doctor does not say the root is missing: $OUT"
kill -TERM "${TSO_PID[$STANDBY]}"
wait_exit "${TSO_PID[$STANDBY]}" 30
run_cli 30 --config "$WORK/zk.json" doctor
[ "$RC" = 3 ] || fail "doctor with no oracle exited $RC, want 3: $OUT"
grep -q "^PROBLEM  tso (elected): no oracle is elected under /percolator/cli" <<<"$OUT" ||
  fail "doctor does not say that no oracle is elected: $OUT"
zk_stop
run_cli 30 --config "$WORK/zk.json" --timeout 2s doctor
[ "$RC" = 3 ] || fail "doctor with ZooKeeper stopped exited $RC, want 3: $OUT"
grep -q "^PROBLEM  zookeeper $ZK_CONNECT: not reachable within 2000 ms" <<<"$OUT" ||
  fail "doctor does not say that ZooKeeper is unreachable: $OUT"
pass "doctor: ZooKeeper reachable, its root present, an oracle elected; each missing one is a problem (exit 3)"
echo "all passed"
