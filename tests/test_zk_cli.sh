#!/usr/bin/env bash
# test_zk_cli.sh PERCOLATOR — a cluster coordinated through ZooKeeper, from
# the command line: `percolator playground` (cli_lib.sh's pg_start) starts
# its private ZooKeeper server, two `percolator tso` processes (one leads,
# one stands by) and one `percolator tablet`, and the data verbs are its
# clients. It checks that a configuration naming the retired lock
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
cli_start_cleanup

# metric HOST:PORT NAME: the value of NAME in the endpoint's /metrics ("" if none).
metric() {
  local fd host=${1%:*} port=${1##*:}
  exec {fd}<>"/dev/tcp/$host/$port" 2>/dev/null || { echo ""; return; }
  printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&$fd
  sed -n "s/^$2 //p" <&$fd | head -n 1
  exec {fd}<&-
}

# the playground: its ZooKeeper, two oracles and one tablet server (3 s sessions)
printf '{"zookeeper": {"session_timeout_ms": 3000}}\n' >"$WORK/extra.json"
pg_start "$WORK/pg" --oracles 2 --servers 0 --tablets 1 --extra-config "$WORK/extra.json"
ZK_CONNECT=$(pg_zookeeper)
ZK_ROOT=/percolator/playground
[ -n "$ZK_CONNECT" ] || fail "no ZooKeeper in the playground's state: $(cat "$PG_STATE")"
pass "a private ZooKeeper server serves at $ZK_CONNECT"

cat >"$WORK/both.json" <<EOF2
{
  "zookeeper": { "connect": "$ZK_CONNECT", "root": "$ZK_ROOT" },
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

TSO_PID=()
TSO_HTTP=()
TSO_LISTEN=()
for i in 0 1; do
  TSO_PID+=("$(pg_role "tso-$((i + 1))" pid)")
  TSO_HTTP+=("$(pg_role "tso-$((i + 1))" http)")
  TSO_LISTEN+=("$(pg_role "tso-$((i + 1))" listen)")
  [ -n "${TSO_PID[$i]}" ] && [ -n "${TSO_HTTP[$i]}" ] || fail "no tso-$((i + 1)) in $(cat "$PG_STATE")"
done

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

run_cli 30 --config "$C" status
[ "$RC" = 0 ] || fail "status: rc $RC: $OUT $(cat "$WORK/last.err")"
LEADER_EP=${TSO_LISTEN[$LEADER]}
echo "$OUT" | grep -q "^tso (elected) *$LEADER_EP *up .*candidates=2" ||
  fail "status does not name the leader $LEADER_EP and two candidates: $OUT"
pass "status names the elected oracle and its candidates"

run_cli 30 --config "$C" set acct a v 100
[ "$RC" = 0 ] || fail "set: $(cat "$WORK/last.err")"
kill -9 "${TSO_PID[$LEADER]}"
run_cli 60 --config "$C" set acct b v 200
[ "$RC" = 0 ] || fail "set after the leader died: $(cat "$WORK/last.err")"
run_cli 30 --config "$C" get acct a v
[ "$RC" = 0 ] && [ "$OUT" = 100 ] || fail "get a after the failover: rc $RC, '$OUT'"
run_cli 30 --config "$C" get acct b v
[ "$RC" = 0 ] && [ "$OUT" = 200 ] || fail "get b after the failover: rc $RC, '$OUT'"
[ "$(metric "${TSO_HTTP[$STANDBY]}" percolator_tso_leading)" = 1 ] ||
  fail "the standby does not lead after the leader was killed"
[ "$(metric "${TSO_HTTP[$STANDBY]}" percolator_tso_elections_total)" = 1 ] ||
  fail "the standby was not elected once"
pass "after the leader's SIGKILL the standby leads and commits go on"

# doctor asks ZooKeeper: it answers, the root exists, an oracle is elected
run_cli 30 --config "$C" doctor
[ "$RC" = 0 ] || fail "doctor on a healthy cluster exited $RC: $OUT $(cat "$WORK/last.err")"
grep -q "^ok       zookeeper $ZK_CONNECT: answers" <<<"$OUT" || fail "doctor's zookeeper line: $OUT"
grep -q "^ok       zookeeper root $ZK_ROOT: exists" <<<"$OUT" || fail "doctor's root line: $OUT"
STANDBY_EP=${TSO_LISTEN[$STANDBY]}
grep -q "^ok       tso (elected): leader $STANDBY_EP answers" <<<"$OUT" || fail "doctor's tso line: $OUT"
sed "s#\"$ZK_ROOT\"#\"/percolator/elsewhere\"#" "$C" >"$WORK/elsewhere.json"
run_cli 30 --config "$WORK/elsewhere.json" doctor
[ "$RC" = 3 ] || fail "doctor with a root no cluster made exited $RC, want 3: $OUT"
grep -q "^PROBLEM  zookeeper root /percolator/elsewhere: does not exist" <<<"$OUT" ||
  fail "doctor does not say the root is missing: $OUT"
kill -TERM "${TSO_PID[$STANDBY]}"
pg_wait_exited "tso-$((STANDBY + 1))" 30
run_cli 30 --config "$C" doctor
[ "$RC" = 3 ] || fail "doctor with no oracle exited $RC, want 3: $OUT"
grep -q "^PROBLEM  tso (elected): no oracle is elected under $ZK_ROOT" <<<"$OUT" ||
  fail "doctor does not say that no oracle is elected: $OUT"
kill -9 "$(pg_role zookeeper-1 pid)"
pg_wait_exited zookeeper-1 30
run_cli 30 --config "$C" --timeout 2s doctor
[ "$RC" = 3 ] || fail "doctor with ZooKeeper stopped exited $RC, want 3: $OUT"
grep -q "^PROBLEM  zookeeper $ZK_CONNECT: not reachable within 2000 ms" <<<"$OUT" ||
  fail "doctor does not say that ZooKeeper is unreachable: $OUT"
pass "doctor: ZooKeeper reachable, its root present, an oracle elected; each missing one is a problem (exit 3)"
pg_stop
echo "all passed"
