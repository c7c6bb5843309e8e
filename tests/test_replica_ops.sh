#!/usr/bin/env bash
# test_replica_ops.sh PERCOLATOR — the operator's side of replicated tablets,
# from the command line: a private ZooKeeper (zk_lib.sh), an oracle and four
# `percolator tablet --name sN` servers; three tablets, each a Raft group of
# s1, s2 and s3 (s4 holds nothing at first). In order:
#   - status and doctor on the healthy cluster: each tablet's leader and its
#     three replicas up, nothing under-replicated, exit 0;
#   - a writer (one `percolator txn` session, a transaction after another,
#     each acknowledged row noted) runs from here to the end;
#   - s3 killed: status names it down and every tablet UNDER-REPLICATED
#     (exit 3, and in --json), doctor names the server and each tablet with
#     what to do (start s3, replace-server s3 NEW, add-replica TABLET SERVER);
#   - add-replica t1 s4, move-leader t1 s4, remove-replica t1 s3 and
#     replace-server s3 s4, each printing what it did, while the writer
#     commits (and keeps committing after each); then two of three voters
#     paused: doctor says t1 has no leader, and why;
#   - a tablet's leader killed just before move-leader: the verb follows the
#     leader elected next;
#   - the mistakes: an unknown tablet or server and a malformed call exit 2,
#     a server that holds no replica of the tablet exits 3;
#   - at the end every acknowledged row reads back, no failed one does, and
#     the rows written before it all began scan to the same checksum.
# Every wait is bounded; the cleanup kills every process it started by pid.
set -u
CLI=${1:?usage: test_replica_ops.sh /path/to/percolator}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-replica-ops-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/zk_lib.sh"
cli_start_cleanup
C="$WORK/cluster.json"

zk_start
cat >"$C" <<EOF
{
  "data_dir": "$WORK/data",
  "store": { "timeout_ms": 20000, "lock_ttl_ms": 5000 },
  "zookeeper": { "connect": "$ZK_CONNECT", "root": "/percolator/ops", "session_timeout_ms": 4000 },
  "tso": { "listen": "127.0.0.1:0" },
  "replication": { "election_timeout_ms": 1000, "snapshot_entries": 64 },
  "servers": [ { "name": "s1", "listen": "127.0.0.1:0" }, { "name": "s2", "listen": "127.0.0.1:0" },
               { "name": "s3", "listen": "127.0.0.1:0" }, { "name": "s4", "listen": "127.0.0.1:0" } ],
  "tablets": [ { "name": "t1", "end": "h", "replicas": ["s1", "s2", "s3"] },
               { "name": "t2", "start": "h", "end": "p", "replicas": ["s1", "s2", "s3"] },
               { "name": "t3", "start": "p", "replicas": ["s1", "s2", "s3"] } ]
}
EOF

"$CLI" --config "$C" tso --ready-file "$WORK/tso.ready" >"$WORK/tso.log" 2>&1 &
PIDS+=($!)
wait_file "$WORK/tso.ready" $!
declare -A SPID
start_server() { # NAME
  rm -f "$WORK/$1.ready"
  "$CLI" --config "$C" tablet --name "$1" --ready-file "$WORK/$1.ready" >>"$WORK/$1.log" 2>&1 &
  SPID[$1]=$!
  PIDS+=($!)
  wait_file "$WORK/$1.ready" $!
}
for s in s1 s2 s3 s4; do start_server $s; done

# until ARGS...: polls `status` (or the verb given) until it exits 0, within 60 s.
status_ok() {
  for _ in $(seq 1 120); do
    run_cli 30 --config "$C" --timeout 2s status
    [ "$RC" = 0 ] && return 0
    sleep 0.5
  done
  fail "status did not exit 0 within 60 s: $OUT $(cat "$WORK/last.err")"
}
# doctor_until PATTERN...: polls doctor until its output matches every
# pattern, within 60 s (a tablet whose leader died elects another first).
doctor_until() {
  local p missing
  for _ in $(seq 1 120); do
    run_cli 30 --config "$C" --timeout 2s doctor
    missing=
    for p in "$@"; do grep -q -- "$p" <<<"$OUT" || missing=$p; done
    [ -z "$missing" ] && return 0
    sleep 0.5
  done
  fail "doctor never said '$missing' within 60 s: $OUT"
}

status_ok
for t in t1 t2 t3; do
  grep -q "^tablet $t .* up .* leader s[123] term [0-9]* ops=" <<<"$OUT" || fail "status: $t's leader: $OUT"
done
for s in s1 s2 s3; do
  [ "$(grep -c "^  replica $s  *\(leader\|follower\)  *up  *term=" <<<"$OUT")" = 3 ] ||
    fail "status: $s should hold an up replica of each tablet: $OUT"
  grep -q "^server $s  *127.0.0.1:[0-9]*  *up  *3 replicas" <<<"$OUT" || fail "status: server $s: $OUT"
done
grep -q "^server s4  *127.0.0.1:[0-9]*  *up  *0 replicas" <<<"$OUT" || fail "status: server s4: $OUT"
grep -q UNDER-REPLICATED <<<"$OUT" && fail "a healthy cluster shown under-replicated: $OUT"
run_cli 30 --config "$C" status --json
[ "$RC" = 0 ] || fail "status --json: $RC $(cat "$WORK/last.err")"
[ "$(grep -o '"under_replicated":false' <<<"$OUT" | wc -l)" = 3 ] || fail "status --json: $OUT"
[ "$(grep -o '"leader":{"server":"s[123]"' <<<"$OUT" | wc -l)" = 3 ] || fail "status --json leaders: $OUT"
[ "$(grep -o '"role":"follower"' <<<"$OUT" | wc -l)" = 6 ] || fail "status --json followers: $OUT"
run_cli 30 --config "$C" doctor
[ "$RC" = 0 ] || fail "doctor on a healthy cluster: $RC $OUT"
for t in t1 t2 t3; do
  grep -q "^ok       tablet $t: led by s[123] (term [0-9]*); 3 of 3 configured voting replicas up" <<<"$OUT" ||
    fail "doctor's line for $t: $OUT"
done
pass "status and doctor: each tablet's leader and three replicas up"

# rows written before anything happens, across the three tablets, in one transaction
{
  echo begin
  for l in a b c d e f g h i j k l m n o p q r s t u v w x y z; do
    for i in 0 1 2 3 4 5; do echo "set base $l$i c v$l$i"; done
  done
  echo commit
} | "$CLI" --config "$C" --timeout 30s txn >"$WORK/base.out" 2>"$WORK/base.err"
tail -n 1 "$WORK/base.out" | grep -q "^ok commit_ts=" || fail "the base rows: $(tail -3 "$WORK/base.out")"
run_cli 60 --config "$C" scan base
[ "$RC" = 0 ] && [ "$(wc -l <<<"$OUT")" = 156 ] || fail "scan base: rc $RC, $(wc -l <<<"$OUT") cells"
SUM_BEFORE=$(md5sum <<<"$OUT")

# the writer: a transaction after another, one new row each, spread over the tablets
writer() {
  coproc TXN { exec "$CLI" --config "$C" --timeout 20s txn 2>>"$WORK/writer.err"; }
  local i=0 a row letters=abcdefghijklmnopqrstuvwxyz
  while [ ! -e "$WORK/stop" ]; do
    i=$((i + 1))
    row=$(printf '%sw%05d' "${letters:$((i % 26)):1}" "$i")
    echo begin >&"${TXN[1]}" && read -r -t 60 a <&"${TXN[0]}" || break
    echo "set w $row c $i" >&"${TXN[1]}" && read -r -t 60 a <&"${TXN[0]}" || break
    echo commit >&"${TXN[1]}" && read -r -t 60 a <&"${TXN[0]}" || break
    case $a in
      "ok commit_ts="*) echo "$row $i" >>"$WORK/acked" ;;
      "error unknown"*) echo "$row $i" >>"$WORK/unknown" ;;
      *) echo "$row $i $a" >>"$WORK/failed" ;;
    esac
  done
  echo quit >&"${TXN[1]}"
  wait "$TXN_PID"
}
touch "$WORK/acked" "$WORK/unknown" "$WORK/failed"
writer &
WRITER=$!
PIDS+=($WRITER)
# commits_go_on: waits (at most 60 s) for the writer to acknowledge 5 more commits.
commits_go_on() {
  local before
  before=$(wc -l <"$WORK/acked")
  for _ in $(seq 1 600); do
    [ "$(wc -l <"$WORK/acked")" -ge $((before + 5)) ] && return 0
    kill -0 $WRITER 2>/dev/null || fail "the writer stopped: $(tail -3 "$WORK/writer.err")"
    sleep 0.1
  done
  fail "the writer acknowledged no commit for 60 s ($1): $(tail -3 "$WORK/failed")"
}
commits_go_on "at the start"

kill -9 "${SPID[s3]}"
wait "${SPID[s3]}" 2>/dev/null
run_cli 30 --config "$C" --timeout 2s status
[ "$RC" = 3 ] || fail "status with s3 killed exited $RC, want 3: $OUT"
grep -q "^server s3  .*  down  " <<<"$OUT" || fail "status does not show s3 down: $OUT"
[ "$(grep -c "^  replica s3  *follower  *down" <<<"$OUT")" = 3 ] || fail "status: s3's replicas: $OUT"
[ "$(grep -c "^  UNDER-REPLICATED: 2 of 3 configured voting replicas up" <<<"$OUT")" = 3 ] ||
  fail "status does not flag the three tablets under-replicated: $OUT"
run_cli 30 --config "$C" --timeout 2s status --json
[ "$RC" = 3 ] && [ "$(grep -o '"under_replicated":true' <<<"$OUT" | wc -l)" = 3 ] ||
  fail "status --json with s3 killed: rc $RC $OUT"
grep -q '"name":"s3",[^}]*"up":false' <<<"$OUT" || fail "status --json: s3 up: $OUT"
doctor_until "^PROBLEM  tablet t1: under-replicated: 2 of 3 configured voting replicas are up (down: s3)" \
  "^PROBLEM  tablet t2: under-replicated" "^PROBLEM  tablet t3: under-replicated"
[ "$RC" = 3 ] || fail "doctor with s3 killed exited $RC, want 3"
grep -q "^PROBLEM  server s3[ :].*does not answer.* it holds replicas of t1, t2, t3. Start it: 'percolator --config $C tablet --name s3'.*'percolator --config $C tablet replace-server s3 NEW'" <<<"$OUT" ||
  fail "doctor's advice on s3: $OUT"
for t in t1 t2 t3; do
  grep -q "^PROBLEM  tablet $t: under-replicated: 2 of 3 .*(down: s3). Start s3 .*tablet replace-server s3 NEW.*tablet add-replica $t SERVER'" <<<"$OUT" ||
    fail "doctor's advice on $t: $OUT"
done
commits_go_on "with s3 killed"
pass "s3 killed: status shows it down and every tablet under-replicated; doctor says what to do"

run_cli 300 --config "$C" tablet add-replica t1 s4
[ "$RC" = 0 ] || fail "add-replica t1 s4: rc $RC $(cat "$WORK/last.err")"
grep -q "^tablet t1: added a voting replica on server s4" <<<"$OUT" || fail "add-replica said: $OUT"
grep -q "^note: .* does not list s4 among tablet t1's replicas" <<<"$OUT" || fail "add-replica's note: $OUT"
commits_go_on "after add-replica"
run_cli 30 --config "$C" --timeout 2s status
grep -q "^  replica s4  *follower  *up  *term=" <<<"$OUT" || fail "status: t1's replica on s4: $OUT"
run_cli 300 --config "$C" tablet move-leader t1 s4
[ "$RC" = 0 ] || fail "move-leader t1 s4: rc $RC $(cat "$WORK/last.err")"
grep -q "^tablet t1: server s4 leads it now" <<<"$OUT" || fail "move-leader said: $OUT"
run_cli 30 --config "$C" --timeout 2s status --json
grep -q '"name":"t1",[^]]*"leader":{"server":"s4"' <<<"$OUT" || fail "status: t1's leader is not s4: $OUT"
commits_go_on "after move-leader"
run_cli 300 --config "$C" tablet remove-replica t1 s3
[ "$RC" = 0 ] || fail "remove-replica t1 s3: rc $RC $(cat "$WORK/last.err")"
grep -q "^tablet t1: removed the replica on server s3" <<<"$OUT" || fail "remove-replica said: $OUT"
grep -q "^note: .* still lists s3 among tablet t1's replicas" <<<"$OUT" || fail "remove-replica's note: $OUT"
commits_go_on "after remove-replica"
run_cli 600 --config "$C" tablet replace-server s3 s4
[ "$RC" = 0 ] || fail "replace-server s3 s4: rc $RC $(cat "$WORK/last.err")"
for t in t2 t3; do
  grep -q "^tablet $t: added a voting replica on server s4" <<<"$OUT" || fail "replace-server on $t: $OUT"
  grep -q "^tablet $t: removed the replica on server s3" <<<"$OUT" || fail "replace-server on $t: $OUT"
done
grep -q "^server s3 replaced by s4 in 2 tablets" <<<"$OUT" || fail "replace-server said: $OUT"
commits_go_on "after replace-server"
run_cli 30 --config "$C" --timeout 2s status --json
[ "$(grep -o '"under_replicated":false' <<<"$OUT" | wc -l)" = 3 ] || fail "status after the moves: $OUT"
grep -q '"server":"s3"' <<<"$OUT" && fail "a tablet still counts a replica on s3: $OUT"
run_cli 30 --config "$C" --timeout 2s doctor
grep -q "^PROBLEM  server s3[ :].*no tablet's group counts a replica on it: if it is retired, take it out of \"servers\"" <<<"$OUT" ||
  fail "doctor on the retired s3: $OUT"
for t in t1 t2 t3; do
  grep -q "^ok       tablet $t: led by s[124] .* 3 of 3 configured voting replicas up" <<<"$OUT" ||
    fail "doctor on $t after the moves: $OUT"
done
pass "add-replica, move-leader, remove-replica and replace-server while the writer commits"

# s3 comes back with its state: its replicas are outside their groups now
start_server s3
status_ok
[ "$(grep -c "^  replica s3  *not a member  *up" <<<"$OUT")" = 3 ] || fail "status: s3's removed replicas: $OUT"
run_cli 30 --config "$C" --timeout 2s doctor
[ "$RC" = 0 ] || fail "doctor with the removed replicas back: rc $RC $OUT"
grep -q "^ok       server s3 .*outside their groups" <<<"$OUT" || fail "doctor on s3's removed replicas: $OUT"

# a tablet's leader killed just before a verb: the verb finds the new leader
# (the dead one's owner node may name it for a while: its connection is refused)
run_cli 30 --config "$C" --timeout 2s status --json
L=$(grep -o '"name":"t2",[^]]*"leader":{"server":"s[0-9]"' <<<"$OUT" | sed 's/.*"server":"//; s/"$//')
[ -n "$L" ] || fail "status --json names no leader of t2: $OUT"
OTHER=s1
[ "$L" = s1 ] && OTHER=s2
kill -9 "${SPID[$L]}"
wait "${SPID[$L]}" 2>/dev/null
run_cli 300 --config "$C" tablet move-leader t2 $OTHER
[ "$RC" = 0 ] || fail "move-leader t2 $OTHER with its leader $L just killed: rc $RC $(cat "$WORK/last.err")"
grep -q "^tablet t2: server $OTHER leads it \(now\|already\)" <<<"$OUT" || fail "move-leader said: $OUT"
commits_go_on "after the leader of t2 was killed"
start_server "$L"
status_ok
pass "a verb follows a tablet's new leader when the one it would ask has just died"

# the mistakes
t() { # NAME WANT_EXIT WANT_TEXT ARGS...
  local name=$1 want=$2 text=$3
  shift 3
  run_cli 60 --config "$C" --timeout 10s tablet "$@"
  [ "$RC" = "$want" ] || fail "$name: exit $RC, not $want: $(cat "$WORK/last.err")"
  grep -q -- "$text" "$WORK/last.err" || fail "$name: the message should say '$text': $(cat "$WORK/last.err")"
}
t "an unknown tablet" 2 "unknown tablet 't9': .* lists t1, t2, t3" add-replica t9 s4
t "an unknown server" 2 "unknown server 's9'" add-replica t1 s9
t "an unknown server to replace" 2 "unknown server 's9'" replace-server s9 s4
t "a server not holding the tablet" 3 "server s3 holds no replica of tablet t1 (its voting replicas: " remove-replica t1 s3
t "a leader on a server not holding the tablet" 3 "server s3 holds no voting replica of tablet t2" move-leader t2 s3
t "replacing a server that holds nothing" 3 "server s3 holds no replica of any tablet" replace-server s3 s1
t "an unknown subcommand" 2 "unknown subcommand 'add-replicas'; did you mean 'add-replica'" add-replicas t1 s4
t "a missing argument" 2 "add-replica takes two arguments" add-replica t1
t "a subcommand with --name" 2 "\-\-name runs a server: it does not go with 'move-leader'" --name s1 move-leader t1 s1
t "the same server twice" 2 "OLD and NEW are both 's1'" replace-server s1 s1
cat >"$WORK/legacy.json" <<EOF
{
  "zookeeper": { "connect": "$ZK_CONNECT", "root": "/percolator/legacy" },
  "tablets": [ { "name": "t1", "listen": "127.0.0.1:0" } ]
}
EOF
run_cli 30 --config "$WORK/legacy.json" tablet add-replica t1 s4
[ "$RC" = 2 ] && grep -q 'has no "servers"' "$WORK/last.err" ||
  fail "a configuration without servers: rc $RC $(cat "$WORK/last.err")"
pass "the mistakes exit 2 (unknown tablet or server, malformed call) or 3 (no such replica)"

# two of t1's three voters paused: no majority, no leader
kill -STOP "${SPID[s2]}" "${SPID[s4]}"
doctor_until "^PROBLEM  tablet t1: no replica leads it: 1 of its 3 voting replicas are up, and a majority (2) is needed"
grep -q "Start the servers that are down (s2, s4)" <<<"$OUT" || fail "doctor's advice on t1: $OUT"
kill -CONT "${SPID[s2]}" "${SPID[s4]}"
status_ok
commits_go_on "after the pause"
pass "two voters paused: doctor says no replica leads t1 and which servers to start"

touch "$WORK/stop"
wait_exit $WRITER 120
acked=$(wc -l <"$WORK/acked")
[ "$acked" -ge 30 ] || fail "only $acked commits acknowledged"
run_cli 60 --config "$C" scan w
[ "$RC" = 0 ] || fail "scan w: $(cat "$WORK/last.err")"
printf '%s\n' "$OUT" >"$WORK/w.scan"
while read -r row v; do
  grep -q "^$row	c	$v\$" "$WORK/w.scan" || fail "acknowledged row $row ($v) is missing"
done <"$WORK/acked"
while read -r row v _; do
  grep -q "^$row	" "$WORK/w.scan" && fail "row $row, whose commit failed, is there"
done <"$WORK/failed"
run_cli 60 --config "$C" scan base
[ "$(md5sum <<<"$OUT")" = "$SUM_BEFORE" ] || fail "the base rows changed: $OUT"
pass "$acked acknowledged commits all read back, no failed one does, the base rows unchanged"
echo "all passed"
