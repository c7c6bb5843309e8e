#!/usr/bin/env bash
# test_observers_cli.sh PERCOLATOR PAIR_PLUGIN (embedded|cluster) — two
# worker processes with different observers on one store, through the
# command line (the test plugin tests/plugins/pair.c: set a observes s:v and
# a:v of table "two", set b s:v, b:v, and s:v weakly; each copies what it
# sees to seen:<observer>):
#   embedded: worker A holds the data directory and serves it; worker B is a
#             client of it (its configuration made from DIR/serving.json).
#   cluster:  a cluster from `percolator playground` (cli_lib.sh's pg_start:
#             an oracle and two tablets in one `percolator run`, its private
#             ZooKeeper server) and the two workers as its clients.
#   1. cells written before any worker ran are observed by every observer
#      (the registrations' backfills), the weak one included;
#   2. two writers change the cells while both workers run: after `wait`,
#      every observer has seen the latest of every cell of its column;
#   3. worker B stops: A goes on with its columns, B's observers' changes stay
#      pending, `status` flags each of B's observers as run by no live
#      worker, `wait` does not return; a new worker B processes them;
#   4. `observers` lists each registration as ready; `observers remove`
#      retires one.
# Every CLI call runs under `timeout`; a trap kills what was started here.
set -u
CLI=${1:?usage: test_observers_cli.sh PERCOLATOR PAIR_PLUGIN embedded|cluster}
PLUGIN=${2:?usage: test_observers_cli.sh PERCOLATOR PAIR_PLUGIN embedded|cluster}
MODE=${3:?usage: test_observers_cli.sh PERCOLATOR PAIR_PLUGIN embedded|cluster}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN" >&2; exit 1; }
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-observers-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

ROWS=8
workers_of() { # workers_of SET: the workers section running set SET of the plugin
  printf '"workers": {"threads": 2, "backoff_ms": 50, "scan": {"idle_ms": 20, "stable_ms": 300}, "plugins": [{"path": "%s", "config": {"set": "%s"}}]}' \
    "$PLUGIN" "$1"
}
start_worker() { # start_worker TAG CONFIG: pid in W, once its observers are registered
  rm -f "$WORK/ready-$1.json"
  "$CLI" --config "$2" worker --ready-file "$WORK/ready-$1.json" 2>>"$WORK/worker-$1.log" &
  W=$!
  PIDS+=("$W")
  wait_file "$WORK/ready-$1.json" "$W"
}
txn() { # txn TAG < commands: one `txn` session
  timeout -k 5 120 "$CLI" "${AT[@]}" txn >"$WORK/txn-$1.out" 2>"$WORK/txn-$1.err" ||
    fail "txn $1 exited $?: $(cat "$WORK/txn-$1.err")"
  # a commit that loses a conflict leaves the cell to the other writer
  ! grep '^error' "$WORK/txn-$1.out" | grep -qv '^error conflict' ||
    fail "txn $1: $(grep '^error' "$WORK/txn-$1.out" | head -3)"
}

# ---- the store, and cells written before any worker ran -------------------------

case "$MODE" in
  embedded)
    D="$WORK/data"
    run_cli 10 --data "$D" init
    [ "$RC" = 0 ] || fail "init: $(cat "$WORK/last.err")"
    AT=(--data "$D")
    ;;
  cluster)
    printf '{"store": {"lock_ttl_ms": 1000}, "zookeeper": {"session_timeout_ms": 2000}}\n' \
      >"$WORK/extra.json"
    pg_start "$WORK/pg" --one-process --oracles 1 --servers 0 --split r4 \
      --extra-config "$WORK/extra.json"
    AT=(--config "$C")
    ;;
  *) fail "unknown mode $MODE (embedded or cluster)" ;;
esac
for r in $(seq 0 $((ROWS - 1))); do
  printf 'begin\nset two r%s s:v early-s%s\nset two r%s a:v early-a%s\nset two r%s b:v early-b%s\nset two r%s p:v poke%s\ncommit\n' \
    "$r" "$r" "$r" "$r" "$r" "$r" "$r" "$r"
done | txn early

case "$MODE" in
  embedded)
    printf '{"data_dir": "%s", %s}\n' "$D" "$(workers_of a)" >"$WORK/a.json"
    start_worker a "$WORK/a.json"
    WA=$W
    wait_file "$D/serving.json" "$WA"
    S=$(cat "$D/serving.json")
    pick() { sed -n "s/.*\"$1\": *\[*{[^}]*\"listen\": \"\([^\"]*\)\".*/\1/p" <<<"$S"; }
    SECRET=$(sed -n 's/.*"secret": *"\([0-9a-f]*\)".*/\1/p' <<<"$S")
    [ -n "$SECRET" ] || fail "no secret in $D/serving.json"
    CLIENT="\"secret\": \"$SECRET\", \"served\": \"$D\", \"tso\": {\"listen\": \"$(pick tso)\"},
 \"tablets\": [{\"name\": \"local\", \"listen\": \"$(pick tablets)\"}]"
    printf '{%s, %s}\n' "$CLIENT" "$(workers_of b)" >"$WORK/b.json"
    ;;
  cluster) # the client configuration with a workers section
    sed "1s|^{|{$(workers_of a),|" "$C" >"$WORK/a.json"
    sed "1s|^{|{$(workers_of b),|" "$C" >"$WORK/b.json"
    start_worker a "$WORK/a.json"
    WA=$W
    ;;
esac
start_worker b "$WORK/b.json"
WB=$W

# seen:<observer> of every row against the column it copies (p:v for b.poke)
check_seen() { # check_seen WHAT OBSERVER... : fails naming the first stale one
  local what=$1 o r want have col
  shift
  run_cli 60 "${AT[@]}" scan two --json
  [ "$RC" = 0 ] || fail "$what: scan: $(cat "$WORK/last.err")"
  local -A cell=()
  while IFS=$'\t' read -r r col v; do cell["$r/$col"]=$v; done < <(
    sed -n 's/^{"row":"\([^"]*\)","column":"\([^"]*\)","value":"\([^"]*\)"}$/\1\t\2\t\3/p' <<<"$OUT")
  for o in "$@"; do
    case "$o" in a.shared | b.shared) col=s:v ;; a.own) col=a:v ;; b.own) col=b:v ;; b.poke) col=p:v ;; esac
    for r in $(seq 0 $((ROWS - 1))); do
      want=${cell["r$r/$col"]:--}
      have=${cell["r$r/seen:$o"]:-(nothing)}
      [ "$want" = "$have" ] || { STALE="$o of r$r saw '$have', the latest is '$want'"; return 1; }
    done
  done
  return 0
}
wait_all() { # wait_all WHAT
  run_cli 150 "${AT[@]}" wait --timeout-s 120
  [ "$RC" = 0 ] || fail "$1: wait exited $RC: $(cat "$WORK/last.err")"
}

wait_all "the cells written before the workers"
check_seen "before" a.shared a.own b.shared b.own b.poke || fail "cells written before the workers: $STALE"
pass "cells written before any worker ran are observed by every observer, the weak one too ($MODE)"

# ---- two writers while both workers run ---------------------------------------------

writer() { # writer SEED: 100 transactions of random sets and deletes
  awk -v seed="$1" -v rows="$ROWS" 'BEGIN { srand(seed)
    for (i = 0; i < 100; i++) {
      r = int(rand() * rows); op = int(rand() * 10); v = "w" seed "." i
      print "begin"
      if (op < 4) print "set two r" r " s:v " v
      else if (op == 4) print "delete two r" r " s:v"
      else if (op < 7) print "set two r" r " a:v " v
      else print "set two r" r " b:v " v
      print "commit" } }'
}
writer 11 | txn w1 &
T1=$!
writer 22 | txn w2 &
T2=$!
PIDS+=("$T1" "$T2")
wait "$T1" || fail "writer 1 failed"
wait "$T2" || fail "writer 2 failed"
wait_all "two writers"
check_seen "writers" a.shared a.own b.shared b.own || fail "after two writers: $STALE"
run_cli 30 "${AT[@]}" status --json
[[ "$OUT" == *'"observers_run_by_no_live_worker":0'* ]] || fail "status with both workers: $OUT"
pass "two workers with different observers, two writers: every observer saw the latest of its column ($MODE)"

# ---- worker B stops ---------------------------------------------------------------------

kill -TERM "$WB"
wait_exit "$WB" 30
[ "$RC" = 0 ] || fail "worker b exited $RC on SIGTERM"
for r in $(seq 0 $((ROWS - 1))); do
  printf 'begin\nset two r%s s:v late-s%s\nset two r%s a:v late-a%s\nset two r%s b:v late-b%s\ncommit\n' \
    "$r" "$r" "$r" "$r" "$r" "$r"
done | txn late
for _ in $(seq 300); do
  check_seen "a alone" a.shared a.own && break
  sleep 0.1
done
check_seen "a alone" a.shared a.own || fail "worker a alone: $STALE"
check_seen "b stopped" b.shared && fail "b.shared saw the late changes with no worker running it"
run_cli 30 "${AT[@]}" status
for o in b.shared b.own b.poke; do
  grep -q "^observer *$o two .* NO LIVE WORKER RUNS IT" <<<"$OUT" || fail "status does not flag $o: $OUT"
done
for o in a.shared a.own; do
  grep "^observer *$o two " <<<"$OUT" | grep -q "workers=1" || fail "status does not show $o run by a live worker: $OUT"
done
grep -q "^observer *b.shared two s:v strong ready pending=[1-9]" <<<"$OUT" || fail "status: no pending count for b.shared: $OUT"
run_cli 30 "${AT[@]}" status --json
[[ "$OUT" == *'"observers_run_by_no_live_worker":3'* ]] || fail "status --json: $OUT"
run_cli 10 "${AT[@]}" wait --timeout-s 2
# 6: nothing can progress (no live worker runs b's observers), or 5: its timeout came first
[ "$RC" = 6 ] || [ "$RC" = 5 ] || fail "wait with b's changes pending exited $RC: $(cat "$WORK/last.err")"
pass "worker b stopped: a goes on, b's changes stay pending, status flags b's observers, wait does not return ($MODE)"

start_worker b2 "$WORK/b.json"
WB=$W
wait_all "a new worker b"
check_seen "b again" a.shared a.own b.shared b.own || fail "after a new worker b: $STALE"
pass "a new worker with b's observers processed what waited for them ($MODE)"

# ---- the registrations --------------------------------------------------------------------

run_cli 10 "${AT[@]}" observers
[ "$(grep -c $'\tready$' <<<"$OUT")" = 5 ] || fail "observers does not list five ready: $OUT"
[[ "$OUT" == *$'b.poke\ttwo\ts:v\tweak\tready'* ]] || fail "observers: $OUT"
run_cli 10 "${AT[@]}" observers remove b.poke
[ "$RC" = 0 ] && [[ "$OUT" == *removed* ]] || fail "observers remove: $OUT $(cat "$WORK/last.err")"
run_cli 10 "${AT[@]}" observers
[ "$(wc -l <<<"$OUT")" = 4 ] && [[ "$OUT" != *b.poke* ]] || fail "after remove: $OUT"
run_cli 10 "${AT[@]}" observers remove nobody
[ "$RC" = 1 ] && grep -q "no observer 'nobody' is registered" "$WORK/last.err" ||
  fail "remove of nobody: exit $RC: $OUT $(cat "$WORK/last.err")"
pass "observers lists each registration ready; remove retires one ($MODE)"

for w in "$WA" "$WB"; do kill -TERM "$w"; done
for w in "$WA" "$WB"; do
  wait_exit "$w" 30
  [ "$RC" = 0 ] || fail "a worker exited $RC on SIGTERM"
done
if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1; then
  fail "a sanitizer report"
fi
echo PASS
