#!/usr/bin/env bash
# test_playground.sh PERCOLATOR PLUGIN — `percolator playground` as a user
# runs it: started in the background on a terminal's process group (setsid),
# with a plugin (observers/examples/normalize_count.c); its output names the
# client configuration and a line per role; `set` through that configuration,
# `wait`, the observer's output read back; an oracle killed shows as a line
# of state and the standby takes the lead; Ctrl-C (SIGINT to the process
# group, as a terminal sends it) stops everything: exit 0, and no process of
# the playground is left (ZooKeeper's included), its directory removed. Then
# the mistakes: bad options exit 2 naming them.
set -u
CLI=${1:?usage: test_playground.sh PERCOLATOR PLUGIN}
PLUGIN=${2:?usage: test_playground.sh PERCOLATOR PLUGIN}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-playground-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1
export TMPDIR="$WORK" # the playground's own directory goes here

setsid "$CLI" playground --plugin "$PLUGIN" --ready-file pg.json >pg.out 2>pg.err &
PG=$!
PIDS+=("$PG")
for _ in $(seq 1 1800); do # a JVM and six daemons on a loaded machine
  [ -s pg.json ] && break
  kill -0 "$PG" 2>/dev/null || fail "the playground exited while starting: $(cat pg.err)"
  sleep 0.05
done
[ -s pg.json ] || fail "the playground did not start within 90 s"
for _ in $(seq 1 100); do grep -q "Ctrl-C stops everything" pg.out && break; sleep 0.05; done
C=$(sed -n 's/^Client configuration: //p' pg.out)
[ -f "$C" ] || fail "no client configuration printed: $(cat pg.out)"
for role in zookeeper-1 tso-1 tso-2 s1 s2 s3 worker-1; do
  grep -q "^  $role " pg.out || fail "no line for $role: $(cat pg.out)"
done
grep -q 'rows \["", "n")' pg.out || fail "the tablets' rows are not shown: $(cat pg.out)"
# every pid the playground started, ZooKeeper's included
mapfile -t ROLE_PIDS < <(grep -o '"pid": [0-9]*' pg.json | tail -n +2 | grep -o '[0-9]*')
[ "${#ROLE_PIDS[@]}" = 7 ] || fail "pg.json should name 7 roles' pids: $(cat pg.json)"
PIDS+=("${ROLE_PIDS[@]}")
pass "the playground started: the client configuration and a line per role"

run_cli 30 --config "$C" set docs d1 raw:text "  Hello Playground "
[ "$RC" = 0 ] || fail "set: $(cat last.err)"
run_cli 60 --config "$C" wait --timeout-s 50
[ "$RC" = 0 ] || fail "wait: $(cat last.err)"
run_cli 30 --config "$C" get docs d1 norm:text
[ "$OUT" = "hello playground" ] || fail "the observer's output: '$OUT' $(cat last.err)"
pass "set, wait and get through the printed configuration: the plugin ran"

leader=$(grep -o '"leading": true[^}]*"name": "[^"]*"' pg.json | sed 's/.*"name": "//; s/"$//')
[ -n "$leader" ] || leader=$(sed -n 's/^  \(tso-[0-9]\) .* leads$/\1/p' pg.out)
[ -n "$leader" ] || fail "no oracle is shown leading: $(cat pg.out)"
lpid=$(sed -n "s/^  $leader .* pid \([0-9]*\) .*/\1/p" pg.out)
kill -9 "$lpid"
for _ in $(seq 1 600); do # the standby leads once the dead one's session expires
  grep -q "leads the oracles" pg.out && grep -q "$leader killed by signal 9" pg.out && break
  sleep 0.05
done
grep -q "$leader killed by signal 9" pg.out || fail "the killed oracle is not shown: $(cat pg.out)"
grep -q "leads the oracles" pg.out || fail "the standby's lead is not shown: $(tail -5 pg.out)"
run_cli 30 --config "$C" set docs d2 raw:text "After Failover"
[ "$RC" = 0 ] || fail "set after the failover: $(cat last.err)"
pass "a killed oracle and the standby's lead are shown as they happen"

dir=$(grep -o '"dir": "[^"]*"' pg.json | sed 's/.*: "//; s/"$//')
kill -INT -- "-$PG" # Ctrl-C on a terminal: the foreground process group
wait_exit "$PG" 120
[ "$RC" = 0 ] || fail "the playground should exit 0 on Ctrl-C, not $RC: $(tail -5 pg.err)"
grep -q "^stopped" pg.out || fail "no 'stopped' line: $(tail -3 pg.out)"
for p in "${ROLE_PIDS[@]}"; do
  kill -0 "$p" 2>/dev/null && fail "process $p of the playground still runs after Ctrl-C"
done
[ -e "$dir" ] && fail "the playground's directory $dir is left"
pass "Ctrl-C: exit 0, nothing left running, its directory removed"

t() { # NAME WANT_EXIT WANT_TEXT ARGS...
  local name=$1 want=$2 text=$3
  shift 3
  run_cli 30 playground "$@"
  [ "$RC" = "$want" ] || fail "$name: exit $RC, not $want: $(cat last.err)"
  grep -q -- "$text" last.err || fail "$name: the message should say '$text': $(cat last.err)"
}
t "workers without a plugin" 2 "needs a --plugin" --workers 2
t "two ZooKeeper servers" 2 "1 or 3" --zookeeper-servers 2
t "tablets and splits" 2 "give one of them" --tablets 3 --split m
t "splits out of order" 3 "must increase" --split m --split c --dir "$WORK/bad"
t "a mistyped option" 2 "did you mean '--plugin'" --plugins x.so
t "a missing plugin" 3 "plugin nosuch.so" --plugin nosuch.so --dir "$WORK/bad2"
pass "the playground's mistakes exit 2 or 3, naming them"
