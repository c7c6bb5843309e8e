#!/usr/bin/env bash
# test_operator.sh PERCOLATOR PLUGIN — the smaller things an operator hit
# (issue 41, point 6), each with what it must do now; each check failed on
# the code before its fix:
#   1. a one-phase commit whose timestamp the tablet asks while the leading
#      oracle is dead waits out the failover (bounded by the request's own
#      deadline), where a fixed cap of 5 s failed it with "timeout";
#   2. a tablet restarted while its previous server's ZooKeeper session
#      lasts answers nothing before its --ready-file appears, and serves
#      after;
#   3. `run` with a tablet's port in use exits 3 naming the port, before
#      the oracle listens or joins the election;
#   4. doctor on a store whose CURRENT is deleted, and on one with a corrupt
#      table file, names the damage and the repair (exit 3); doctor --repair
#      repairs the first, and the data reads back;
#   5. doctor on a configuration whose rows for a stopped tablet differ from
#      ZooKeeper's map says so and how to reconcile, not "start it";
#   6. init on a directory a worker serves says it is ready, not '(null)';
#   7. wait (exit 6) and doctor name 'observers remove' for an observer that
#      no worker runs; observers remove of a mistyped name exits 1 with the
#      closest registered one; removing one that a live worker runs warns;
#   8. load of a tree with many binary files shows the first of each reason
#      and a count, not a line each (--verbose: a line each);
#   9. --data and --config together are a usage error (exit 2).
# (The pkg-config file's Libs.private is tests/test_install.sh's.)
# Clusters come from `percolator playground`.
set -u
CLI=${1:?usage: test_operator.sh PERCOLATOR PLUGIN}
PLUGIN=${2:?usage: test_operator.sh PERCOLATOR PLUGIN}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-operator-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

# ---- a cluster whose oracles' sessions last 8 s: a failover takes longer than 5 s -----

printf '{"log": {"level": "info"}, "zookeeper": {"session_timeout_ms": 8000}}\n' >extra.json
# start_pg DIR [ARGS]: a playground in DIR with extra.json (pg_start; its role
# lines in $PGOUT), waited for until it has printed them
start_pg() {
  pg_start "$1" --extra-config extra.json "${@:2}"
  PGOUT="$1.out"
  for _ in $(seq 1 100); do grep -q "Ctrl-C stops" "$PGOUT" && break; sleep 0.05; done
}
start_pg "$WORK/pg" # replicated tablets, 3 servers
role_pid() { pg_role "$1" pid; }
role_listen() { pg_role "$1" listen; }

# ---- 1. a one-phase commit through a failover -----------------------------------------------

leader=$(sed -n 's/^  \(tso-[0-9]\) .* leads$/\1/p' "$PGOUT")
[ -n "$leader" ] || fail "no oracle shown leading: $(cat "$PGOUT")"
coproc TX { "$CLI" --config "$C" --timeout 60s txn 2>&1; }
say() { echo "$1" >&"${TX[1]}"; IFS= read -r -t 90 REPLY <&"${TX[0]}" || fail "no answer to '$1'"; }
say begin
[[ "$REPLY" == "ok start_ts="* ]] || fail "begin: $REPLY"
say "set docs b1 v: before-failover"
[ "$REPLY" = ok ] || fail "set: $REPLY"
kill -9 "$(role_pid "$leader")"
say commit # one row, one tablet: a one-phase commit, its timestamp asked by the tablet
[[ "$REPLY" == "ok commit_ts="* ]] || fail "a one-phase commit during the failover: $REPLY"
exec {TX[1]}>&-
wait "$TX_PID" 2>/dev/null
run_cli 30 --config "$C" get docs b1 v:
[ "$OUT" = before-failover ] || fail "the commit's value: '$OUT' $(cat last.err)"
pass "a one-phase commit to a replicated tablet waited out the oracle's failover (8 s sessions) and committed"
kill -INT -- "-$PG"
wait_exit "$PG" 120

# 2, 3 and 5 are of a tablet per process, one copy each (replicated servers: test_replica_ops.sh)
start_pg "$WORK/pg1" --servers 0

# ---- 2. a restarted tablet serves once its ready file is there ----------------------------

run_cli 30 --config "$C" set docs a1 v: one
[ "$RC" = 0 ] || fail "set a1: $(cat last.err)"
t1pid=$(role_pid t1)
sed '1s|^{|{"data_dir": "'"$WORK"'/pg1/data",|' "$C" >t1.json
kill -9 "$t1pid"
"$CLI" --config t1.json tablet --name t1 --ready-file t1.ready 2>t1.log &
T1=$!
PIDS+=("$T1")
probes=0
while [ ! -s t1.ready ]; do # the previous session lasts up to 8 s: the claim waits for it
  kill -0 "$T1" 2>/dev/null || fail "the restarted tablet exited: $(cat t1.log)"
  OUT=$(timeout -k 5 20 "$CLI" --config "$C" --timeout 1s get docs a1 v: 2>last.err)
  rc=$?
  [ -s t1.ready ] && break
  [ "$rc" = 0 ] && fail "the restarted tablet served a read before its ready file appeared"
  probes=$((probes + 1))
  sleep 0.2
done
[ "$probes" -ge 1 ] || fail "no read was tried before the ready file appeared"
run_cli 30 --config "$C" get docs a1 v:
[ "$OUT" = one ] || fail "after its ready file, the tablet should serve: '$OUT' $(cat last.err)"
pass "a restarted tablet answered none of $probes reads before its ready file, then served"

# ---- 3. run with a tablet's port in use ------------------------------------------------------

busy=$(role_listen t2)
[ -n "$busy" ] || fail "no t2 endpoint: $(cat "$PG_STATE")"
zk=$(pg_zookeeper)
cat >busy.json <<JSON
{"data_dir": "$WORK/busy", "zookeeper": {"connect": "$zk", "root": "/percolator/busy"},
 "tso": {"listen": "127.0.0.1:0"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0", "end": "m"},
             {"name": "t2", "listen": "$busy", "start": "m"}]}
JSON
run_cli 60 run --config busy.json
[ "$RC" = 3 ] || fail "run with a busy tablet port: exit $RC, want 3"
grep -q "tablet t2: cannot listen on $busy" last.err || fail "the port is not named: $(cat last.err)"
grep -q "joining the election\|listening on" last.err &&
  fail "the oracle started before the busy port was found: $(cat last.err)"
pass "run with a tablet's port in use: exit 3 before anything listens"

# ---- 5. doctor when the configured rows differ from ZooKeeper's map ------------------------

t2pid=$(role_pid t2)
kill -9 "$t2pid"
sed 's/"n"/"k"/g' "$C" >moved.json # t1 ends and t2 starts at k, not n
grep -q '"k"' moved.json || fail "moved.json: $(cat moved.json)"
run_cli 30 --config moved.json --timeout 5s doctor
[ "$RC" = 3 ] || fail "doctor with t2 down and its rows moved: exit $RC: $OUT"
grep -q "tablet t2 .*would be refused.*ZooKeeper.*holds.*Reconcile" <<<"$OUT" ||
  fail "doctor should say the rows differ and how to reconcile: $OUT"
grep -q "start it: 'percolator --config moved.json tablet --name t2'" <<<"$OUT" &&
  fail "doctor advises a start that would fail: $OUT"
pass "doctor names the rows that differ from ZooKeeper's map, and the reconciliation"

kill -INT -- "-$PG"
wait_exit "$PG" 120
kill -TERM "$T1" 2>/dev/null
wait_exit "$T1" 40

# ---- 4. doctor on a damaged store ------------------------------------------------------------

D="$WORK/dmg"
"$CLI" --data "$D" init >/dev/null || fail "init"
for i in $(seq 1 40); do
  "$CLI" --data "$D" set t "r$i" c "value-$i-of-forty-rows-to-fill-a-block" || fail "set r$i"
done
run_cli 30 --data "$D" get t r1 c # opening again writes the log into a table file
cp -a "$D" "$WORK/dmg2"
rm "$D/store/CURRENT"
run_cli 30 --data "$D" doctor
[ "$RC" = 3 ] || fail "doctor without CURRENT: exit $RC: $OUT"
grep -q "^PROBLEM  store: .*CURRENT file .* is missing.*doctor --repair" <<<"$OUT" ||
  fail "doctor should name the missing CURRENT and the repair: $OUT"
run_cli 60 --data "$D" doctor --repair
[ "$RC" = 0 ] || fail "doctor --repair: exit $RC: $OUT $(cat last.err)"
grep -q "^ok       store: .*is repaired" <<<"$OUT" || fail "the repair is not said: $OUT"
run_cli 30 --data "$D" get t r7 c
[ "$OUT" = "value-7-of-forty-rows-to-fill-a-block" ] || fail "after the repair: '$OUT' $(cat last.err)"
ldb=$(ls "$WORK"/dmg2/store/*.ldb | head -1)
[ -n "$ldb" ] || fail "no table file in $WORK/dmg2/store: $(ls "$WORK/dmg2/store")"
size=$(stat -c %s "$ldb")
printf 'not-a-block-not-a-block-not-a-block' | dd of="$ldb" bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
run_cli 30 --data "$WORK/dmg2" doctor
[ "$RC" = 3 ] || fail "doctor with a corrupt table file: exit $RC: $OUT"
grep -q "^PROBLEM  store: .*corrupt.*doctor --repair" <<<"$OUT" ||
  fail "doctor should name the corruption and the repair: $OUT"
pass "doctor names a missing CURRENT and a corrupt table file, and --repair repairs"

# ---- 6, 7. a served directory: init, wait, doctor, observers remove -------------------------

E="$WORK/served"
"$CLI" --data "$E" init >/dev/null || fail "init"
printf '{"data_dir": "%s", "workers": {"threads": 1, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
  "$E" "$PLUGIN" >app.json
"$CLI" --config app.json worker --ready-file w.ready 2>w.log &
W=$!
PIDS+=("$W")
wait_file w.ready "$W"
run_cli 30 --data "$E" init
[ "$RC" = 0 ] || fail "init on a served directory: exit $RC $(cat last.err)"
[[ "$OUT" == *"(null)"* ]] && fail "init on a served directory: $OUT"
[ "$OUT" = "data directory '$E' is ready (a worker serves it)" ] || fail "init: $OUT"
pass "init on a served directory says it is ready"

run_cli 30 --data "$E" observers
obs=$(awk -F'\t' '$2 == "docs" && $3 == "raw:text" {print $1}' <<<"$OUT")
[ -n "$obs" ] || fail "no observer registered: $OUT"
run_cli 30 --data "$E" observers remove "$obs"
[ "$RC" = 0 ] || fail "observers remove $obs: exit $RC $(cat last.err)"
grep -q "warning: observer '$obs' is run by 1 live worker" last.err ||
  fail "removing an observer a live worker runs should warn: $(cat last.err)"
kill -TERM "$W"
wait_exit "$W" 40
# the worker registers it again when it starts; stopped, nothing runs it
"$CLI" --config app.json worker --ready-file w2.ready 2>w2.log &
W=$!
PIDS+=("$W")
wait_file w2.ready "$W"
kill -TERM "$W"
wait_exit "$W" 40
run_cli 30 --data "$E" set docs x raw:text "pending for nobody"
run_cli 60 --data "$E" wait --timeout-s 30
[ "$RC" = 6 ] || fail "wait with no worker: exit $RC, want 6 $(cat last.err)"
grep -q "percolator observers remove $obs" last.err || fail "wait should name observers remove: $(cat last.err)"
run_cli 30 --data "$E" doctor
grep -q "observer $obs .*'percolator observers remove $obs'" <<<"$OUT" ||
  fail "doctor should name observers remove: $OUT"
typo="${obs%?}x"
run_cli 30 --data "$E" observers remove "$typo"
[ "$RC" = 1 ] || fail "observers remove of a mistyped name: exit $RC, want 1"
grep -q "no observer '$typo' is registered; did you mean '$obs'?" last.err ||
  fail "observers remove should suggest '$obs': $(cat last.err)"
pass "wait and doctor name observers remove; a mistyped name exits 1 with a suggestion; a live one warns"

# ---- 8. load: skipped inputs summed by reason -------------------------------------------------

mkdir -p tree
for i in $(seq 1 20); do printf 'bin\000ary %d' "$i" >"tree/b$i.bin"; done
printf 'a real document\n' >tree/doc.txt
run_cli 60 --data "$WORK/dmg" load tree
[ "$RC" = 0 ] || fail "load tree: exit $RC $(cat last.err)"
[ "$(grep -c 'binary (a NUL byte' last.err)" = 3 ] || fail "load should show 3 binary files: $(cat last.err)"
grep -q "17 more skipped inputs not shown.*--verbose" last.err || fail "no count of the rest: $(cat last.err)"
grep -q "skipped 20: unreadable 0, binary 20" <<<"$OUT" || fail "the summary: $OUT"
run_cli 60 --data "$WORK/dmg" load --verbose tree
[ "$(grep -c 'binary (a NUL byte' last.err)" = 20 ] || fail "load --verbose should list 20: $(cat last.err)"
pass "load shows the first binary files and a count; --verbose lists each"

# ---- 9. --data and --config ---------------------------------------------------------------------

run_cli 10 --data "$E" --config app.json get docs x raw:text
[ "$RC" = 2 ] || fail "--data with --config: exit $RC, want 2"
grep -q "give one of them" last.err || fail "--data with --config: $(cat last.err)"
run_cli 10 get --config app.json docs x raw:text --data "$E"
[ "$RC" = 2 ] || fail "--data with --config after the verb: exit $RC, want 2"
pass "--data and --config together are a usage error"
echo PASS
