#!/usr/bin/env bash
# test_plugin_upgrade.sh PERCOLATOR V1 V2 BAD — upgrading an observer plugin
# under running workers (docs/OBSERVERS.md, "Upgrading a plugin"), with the
# versioned test plugin (tests/plugins/versioned.c) built twice, v1 and v2,
# which write their build's tag to ver:tag of each document they observe:
#   1. a worker runs v1 from app.so; v2 is copied over app.so in place (cp
#      rewrites the file under the pages the worker mapped): the worker does
#      not crash, logs that the file changed, and goes on running v1;
#   2. SIGHUP while a writer keeps adding documents and observer runs are in
#      flight (the plugin sleeps in each run): the worker drains and swaps,
#      logs the new build, and after `wait` every document written has been
#      observed (a run of each notification committed), those written after
#      the reload by v2;
#   3. a broken build (BAD) copied over app.so, then SIGHUP: the reload is
#      refused with the file named, and v2 goes on;
#   4. the rolling restart against a cluster that `percolator playground`
#      started: a second worker on v2 started, the v1 worker stopped with
#      SIGTERM, the documents written meanwhile all observed.
set -u
CLI=${1:?usage: test_plugin_upgrade.sh PERCOLATOR V1 V2 BAD}
V1=${2:?usage}
V2=${3:?usage}
BAD=${4:?usage}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-upgrade-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

D="$WORK/data"
pc() { run_cli 30 --data "$D" "$@"; }
# tag ROW: the ver:tag of docs ROW ("" when none)
tag() { pc get docs "$1" ver:tag; [ "$RC" = 0 ] && printf '%s' "$OUT"; }
# wait_log FILE TEXT PID: until FILE holds TEXT (at most 30 s) while PID lives
wait_log() {
  local i
  for i in $(seq 1 600); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || fail "process $3 exited before logging '$2': $(tail -5 "$1")"
    sleep 0.05
  done
  fail "'$2' not logged in $1 within 30 s: $(tail -5 "$1")"
}

# ---- 1. a new build written over the file -------------------------------------------

cp "$V1" app.so
"$CLI" --data "$D" init >/dev/null || fail "init"
cat >app.json <<JSON
{"data_dir": "$D", "log": {"level": "info"},
 "workers": {"threads": 2, "scan": {"idle_ms": 20},
             "plugins": [{"path": "$WORK/app.so", "config": {"sleep_ms": 30}}]}}
JSON
"$CLI" --config app.json worker --ready-file ready.json 2>worker.log &
W=$!
PIDS+=("$W")
wait_file ready.json "$W"
for i in 1 2 3; do pc set docs "a$i" raw:text "before $i"; [ "$RC" = 0 ] || fail "set a$i: $(cat last.err)"; done
pc wait --timeout-s 60
[ "$RC" = 0 ] || fail "wait (v1): $(cat last.err)"
[ "$(tag a1)" = v1 ] || fail "a1 should be observed by v1, ver:tag is '$(tag a1)'"

cp "$V2" app.so # in place: the same inode, rewritten
for i in 1 2 3 4 5 6; do pc set docs "b$i" raw:text "after the copy $i"; [ "$RC" = 0 ] || fail "set b$i: $(cat last.err)"; done
pc wait --timeout-s 60
[ "$RC" = 0 ] || fail "wait after the copy: $(cat last.err)"
kill -0 "$W" 2>/dev/null || fail "the worker died when its plugin's file was rewritten: $(tail -5 worker.log)"
for i in 1 2 3 4 5 6; do
  [ "$(tag "b$i")" = v1 ] || fail "b$i should be observed by the loaded build v1, ver:tag is '$(tag "b$i")'"
done
wait_log worker.log "plugin versioned: its file $WORK/app.so changed on disk" "$W"
[ "$(grep -c 'changed on disk' worker.log)" = 1 ] || fail "the change should be logged once: $(grep 'changed on disk' worker.log)"
pass "v2 written over the loaded file: the worker runs v1 on, and logged the change once"

# ---- 2. SIGHUP under writes -------------------------------------------------------------------

(
  for i in $(seq 1 40); do
    timeout -k 5 30 "$CLI" --data "$D" set docs "c$i" raw:text "stream $i" >/dev/null 2>>writer.err || echo "c$i" >>writer.failed
  done
) &
WR=$!
PIDS+=("$WR")
for _ in $(seq 1 400); do # the reload comes once the writer is well under way
  pc get docs c10 raw:text
  [ "$RC" = 0 ] && break
  sleep 0.05
done
kill -HUP "$W"
wait_log worker.log "workers: reloaded 1 plugin" "$W"
wait "$WR"
[ -s writer.failed ] && fail "writes failed during the reload: $(cat writer.failed) $(cat writer.err)"
pc set docs d1 raw:text "after the reload"
pc wait --timeout-s 60
[ "$RC" = 0 ] || fail "wait after the reload: $(cat last.err)"
kill -0 "$W" 2>/dev/null || fail "the worker died in the reload: $(tail -5 worker.log)"
grep -q "workers: reload: running plugin versioned v2 from $WORK/app.so" worker.log ||
  fail "the reload should name the build it runs: $(grep reload worker.log)"
missing=""
for i in $(seq 1 40); do t=$(tag "c$i"); case "$t" in v1 | v2) ;; *) missing="$missing c$i($t)" ;; esac; done
[ -z "$missing" ] || fail "documents written during the reload were not observed:$missing"
[ "$(tag d1)" = v2 ] || fail "d1, written after the reload, should be observed by v2: '$(tag d1)'"
pc scan docs --start runs --end runt
runs=$(grep -c $'^runs\tc' <<<"$OUT")
[ "$runs" = 40 ] || fail "every notification of c1..c40 should have a committed run: $runs"
grep -q "changed on disk" <(sed -n '/reloaded/,$p' worker.log) && fail "the change was logged again after the reload"
pass "SIGHUP during writes: drained, v2 runs, all 40 documents written meanwhile observed"

# ---- 3. a broken build ----------------------------------------------------------------------

cp "$BAD" app.so
kill -HUP "$W"
wait_log worker.log "SIGHUP: reload: the running plugins go on" "$W"
grep "SIGHUP: reload" worker.log | grep -q "$WORK/app.so" || fail "the refusal should name the file: $(grep SIGHUP worker.log)"
pc set docs e1 raw:text "after a failed reload"
pc wait --timeout-s 60
[ "$RC" = 0 ] || fail "wait after the failed reload: $(cat last.err)"
[ "$(tag e1)" = v2 ] || fail "e1 should be observed by v2, which goes on: '$(tag e1)'"
kill -TERM "$W"
wait_exit "$W" 40
[ "$RC" = 0 ] || fail "the worker should exit 0 on SIGTERM, not $RC"
pass "a broken build on SIGHUP: refused naming the file, v2 goes on"

# ---- 4. a rolling restart against a cluster ------------------------------------------------------

cp "$V1" roll.so
pg_start "$WORK/pg" --plugin "$WORK/roll.so"
pcc() { run_cli 30 --config "$C" "$@"; }
ctag() { pcc get docs "$1" ver:tag; [ "$RC" = 0 ] && printf '%s' "$OUT"; }
for i in 1 2 3; do pcc set docs "r$i" raw:text "old $i"; [ "$RC" = 0 ] || fail "set r$i: $(cat last.err)"; done
pcc wait --timeout-s 60
[ "$RC" = 0 ] || fail "wait (v1 in the cluster): $(cat last.err)"
[ "$(ctag r1)" = v1 ] || fail "r1 should be observed by v1: '$(ctag r1)'"
old_worker=$(pg_role worker-1 pid)
[ -n "$old_worker" ] || fail "no worker-1 pid: $(cat "$PG_STATE")"
# the procedure: the new build over the file, a worker on it started, the old one stopped
cp "$V2" roll.so
"$CLI" --config "$C" worker --ready-file w2.ready 2>w2.log &
W2=$!
PIDS+=("$W2")
wait_file w2.ready "$W2"
(
  for i in $(seq 1 20); do
    timeout -k 5 30 "$CLI" --config "$C" set docs "s$i" raw:text "during the roll $i" >/dev/null 2>>roll.err || echo "s$i" >>roll.failed
  done
) &
WR=$!
PIDS+=("$WR")
kill -TERM "$old_worker"
wait "$WR"
[ -s roll.failed ] && fail "writes failed during the rolling restart: $(cat roll.failed) $(cat roll.err)"
pg_wait_exited worker-1 30
[ "$(pg_role worker-1 exit_code)" = 0 ] || fail "the old worker did not stop cleanly: $(cat "$PG_STATE")"
pcc set docs t1 raw:text "after the roll"
pcc wait --timeout-s 60
[ "$RC" = 0 ] || fail "wait after the rolling restart: $(cat last.err)"
missing=""
for i in $(seq 1 20); do t=$(ctag "s$i"); case "$t" in v1 | v2) ;; *) missing="$missing s$i($t)" ;; esac; done
[ -z "$missing" ] || fail "documents written during the rolling restart were not observed:$missing"
[ "$(ctag t1)" = v2 ] || fail "t1, written after the roll, should be observed by v2: '$(ctag t1)'"
kill -TERM "$W2"
wait_exit "$W2" 40
[ "$RC" = 0 ] || fail "the new worker should exit 0, not $RC"
pg_stop
pass "a rolling restart: a v2 worker started, the v1 worker stopped, every document observed"
