#!/usr/bin/env bash
# test_load_faults.sh PERCOLATOR — `percolator load` under injected faults: a
# table of cases, each with the exit status and the per-document statuses of
# `load --json` that it must give:
#   ok            documents written                          exit 0, "ok"
#   absent        --delete of a document that is not there    exit 1, "not_found"
#   lost reply    the commit applied, its reply lost and the  exit 4, "unknown"
#                 primary unreachable (failpoints, embedded)
#   conflict      a live transaction holds the document's     exit 3, "conflict"
#                 lock for longer than the load retries
#   refused       the tablet's port refuses connections       exit 3, "unavailable"
#   refused at    the daemons die between the prewrite and    exit 3, "unavailable"
#   the commit    the commit (two-phase): the commit request  (never "unknown": nothing
#                 never leaves the client                     was sent)
# and the loader's inputs and limits (embedded):
#   a tree with a FIFO and a socket   reported, counted "special", not opened; exit 0
#   a JSON line above the bound      reported "line too long", skipped; exit 0
#   an allocation that fails          an error (exit 3), nothing shortened written
#   Ctrl-C (SIGINT) during a load    stops cleanly, summary printed; exit 130
# and --timeout against a daemon that stops answering (SIGSTOP): every verb's
# request gives up at its bound (exit 3), a cluster scan included.
# The cluster is one `percolator run` (oracle, one tablet) on ephemeral ports
# of 127.0.0.1 and its private ZooKeeper server, from `percolator playground`
# (cli_lib.sh's pg_start, once the embedded cases are done); every process is bounded in time and killed
# by the trap.
set -u
CLI=${1:?usage: test_load_faults.sh /path/to/percolator [FAILMALLOC_SO]}
FAILMALLOC=${2:-} # tests/failmalloc.c, in builds without sanitizers
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$FAILMALLOC" in /* | "") ;; *) FAILMALLOC="$PWD/$FAILMALLOC" ;; esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-loadfaults-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

printf '{"url": "d/1", "contents": "one"}\n{"url": "d/2", "contents": "two"}\n' >two.jsonl
printf '{"url": "d/3", "contents": "three"}\n' >three.jsonl
printf '{"url": "d/1", "contents": "loaded"}\n' >d1.jsonl

# expect_load WHAT WANT_RC WANT_STATUS [ENV=VALUE...] -- ARGS...: runs
# percolator ARGS (a load --json) and checks its exit status and that every
# per-document line has status WANT_STATUS.
expect_load() {
  local what=$1 want_rc=$2 want_status=$3
  shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  OUT=$(env "${envs[@]}" timeout -k 5 60 "$CLI" "$@" 2>"$WORK/last.err")
  RC=$?
  [ "$RC" = "$want_rc" ] || fail "$what: exit $RC, want $want_rc: $OUT $(cat "$WORK/last.err")"
  local docs
  docs=$(grep '"url"' <<<"$OUT")
  [ -n "$docs" ] || fail "$what: no per-document line: $OUT"
  grep -v "\"status\":\"$want_status\"" <<<"$docs" &&
    fail "$what: a document's status is not $want_status: $OUT"
  [[ "$(tail -1 <<<"$OUT")" == '{"'*'"failed":'* ]] || fail "$what: no summary line last: $OUT"
  grep -qE 'Sanitizer|runtime error:' "$WORK/last.err" && fail "$what: a sanitizer report: $(cat "$WORK/last.err")"
  pass "$what: exit $want_rc, every document $want_status"
}

# ---- embedded -----------------------------------------------------------------------

run_cli 10 --data emb init
expect_load "ok (embedded)" 0 ok -- --data emb load --json two.jsonl
expect_load "absent (--delete)" 1 not_found -- --data emb load --json --delete d/none
expect_load "lost reply" 4 unknown \
  PERCOLATOR_FAILPOINTS="store.after_apply=1*return;txn.settle.before_check=return" -- \
  --data emb load --json --threads 1 three.jsonl
run_cli 10 --data emb get docs d/3 doc:contents
[ "$OUT" = three ] || fail "the commit of unknown outcome had been applied: got '$OUT'"

# special files inside a tree: reported and counted, never opened (a FIFO would block)
mkdir -p tree/sub
printf 'a document\n' >tree/sub/doc.txt
mkfifo tree/fifo
OUT=$(timeout -k 5 60 "$CLI" --data emb load --json tree 2>"$WORK/last.err")
RC=$?
[ "$RC" = 0 ] || fail "load of a tree with a FIFO exited $RC: $(cat last.err)"
grep -q '"input":"tree/fifo","status":"skipped","reason":"special","error":"a FIFO, not a document"' <<<"$OUT" ||
  fail "the FIFO in the tree was not reported: $OUT"
[[ "$(tail -1 <<<"$OUT")" == '{"loaded":1,'*'"special":1}'* ]] || fail "summary of the tree: $OUT"
pass "a FIFO inside a tree: reported, counted as special, skipped without being opened"

# a JSON line longer than --max-bytes allows is skipped, the next line loads
{
  printf '{"url": "big/1", "contents": "'
  head -c 100000 /dev/zero | tr '\0' x
  printf '"}\n{"url": "big/2", "contents": "small"}\n'
} >long.jsonl
expect_load "a line too long" 0 ok -- --data emb load --json --max-bytes 100 long.jsonl
grep -q 'long.jsonl:1: line too long' last.err || fail "the long line was not reported: $(cat last.err)"
grep -q '"reason":"too_large"' <<<"$OUT" || fail "the long line is not counted too_large: $OUT"

# memory that runs out while an input is read: an error, never a shorter document
if [ -n "$FAILMALLOC" ]; then
  head -c 500000 /dev/zero | tr '\0' y >big.txt
  { printf '{"url": "big/3", "contents": "'; head -c 300000 /dev/zero | tr '\0' z; printf '"}\n'; } >big.jsonl
  for input in big.txt:400000-600000 big.jsonl:200000-600000; do
    OUT=$(FAILMALLOC_BETWEEN=${input#*:} LD_PRELOAD=$FAILMALLOC timeout -k 5 60 "$CLI" --data emb \
      load --max-bytes 8388608 "${input%%:*}" 2>"$WORK/last.err")
    RC=$?
    [ "$RC" = 3 ] && grep -q 'out of memory reading' last.err ||
      fail "load of ${input%%:*} with its buffer's allocation failing: exit $RC, $(cat last.err)"
  done
  run_cli 10 --data emb get docs big.txt doc:contents
  [ "$RC" = 1 ] || fail "a document whose buffer could not be allocated was written (exit $RC)"
  run_cli 10 --data emb get docs big/3 doc:contents
  [ "$RC" = 1 ] || fail "a JSON line whose buffer could not be allocated was written (exit $RC)"
  pass "an allocation that fails while an input is read: exit 3, nothing of it written"
fi

# SIGINT: the load stops, the transactions in flight finish, the summary is printed
for i in $(seq 1 400); do printf '{"url": "slow/%d", "contents": "document %d"}\n' "$i" "$i"; done >slow.jsonl
"$CLI" --data emb load --rate 40 --threads 2 slow.jsonl >int.out 2>int.err &
LOADER=$!
PIDS+=("$LOADER")
for _ in $(seq 200); do grep -q 'documents done' int.err 2>/dev/null && break; sleep 0.1; done
kill -INT "$LOADER"
wait_exit "$LOADER" 30
[ "$RC" = 130 ] || fail "load after SIGINT exited $RC, want 130: $(cat int.out int.err)"
grep -qE '^interrupted: [0-9]+ queued documents not started$' int.out || fail "no interruption line: $(cat int.out)"
N=$(sed -n 's/^loaded \([0-9]*\) documents.*/\1/p' int.out)
[ -n "$N" ] && [ "$N" -gt 0 ] && [ "$N" -lt 400 ] || fail "the summary after SIGINT: $(cat int.out)"
run_cli 30 --data emb scan docs --start slow/ --end slow0
[ "$(grep -c . <<<"$OUT")" = "$N" ] || fail "the summary says $N loaded, the store holds $(grep -c . <<<"$OUT")"
pass "SIGINT during a load: exit 130, and the summary's count is what the store holds"

# ---- a cluster ----------------------------------------------------------------------

# (a session timeout that outlasts the daemons' SIGSTOP below: their
# sessions, and the oracle's leadership, survive it)
printf '{"zookeeper": {"session_timeout_ms": 30000}}\n' >extra.json
pg_start "$WORK/pg" --one-process --oracles 1 --servers 0 --tablets 1 --extra-config extra.json
RUN=$(pg_role server pid)
[ -n "$RUN" ] && [ "$RUN" != 0 ] || fail "no server in the playground's state: $(cat "$PG_STATE")"
# client configurations: one-phase commit (the default) and two-phase
for mode in 1 2; do
  one=true
  [ $mode = 2 ] && one=false
  sed "1s|^{|{\"store\": {\"one_phase_commit\": $one, \"lock_ttl_ms\": 30000, \"timeout_ms\": 60000},|" \
    "$C" >client$mode.json
done
expect_load "ok (cluster)" 0 ok -- --config client1.json load --json two.jsonl

# conflict: a live transaction prewrote d/1 and sleeps before its commit (far
# longer than a busy machine needs to reach the load below; it is killed after)
printf 'begin\nset docs d/1 doc:contents held\ncommit\n' |
  PERCOLATOR_FAILPOINTS="txn.prewrite.after_primary=sleep(150000)" \
    timeout -k 5 180 "$CLI" --config client2.json txn >locker.out 2>locker.err &
LOCKER=$!
PIDS+=("$LOCKER")
for _ in $(seq 200); do
  run_cli 10 --config client1.json scan --raw docs
  [[ "$OUT" == *held*primary* ]] && break
  sleep 0.05
done
[[ "$OUT" == *held*primary* ]] || fail "the locker's lock did not appear: $OUT"
expect_load "conflict" 3 conflict -- --config client1.json --timeout 2s load --json --threads 1 d1.jsonl
kill "$LOCKER" 2>/dev/null
wait "$LOCKER" 2>/dev/null

# --timeout: every request of a verb gives up at its bound, against daemons that
# stopped answering (SIGSTOP: the kernel still accepts their connections); the
# configuration says 60 s, so a request that ignored --timeout would outlast
# the 30 s this gives each verb
kill -STOP "$RUN"
for args in "scan docs" "scan --raw docs" "get docs d/1 doc:contents" "set docs d/9 doc:contents x" \
  "status" "observers" "gc"; do
  # shellcheck disable=SC2086
  OUT=$(timeout -k 5 30 "$CLI" --config client1.json --timeout 1s $args 2>"$WORK/last.err")
  RC=$?
  [ "$RC" = 3 ] || { kill -CONT "$RUN"; fail "--timeout 1s $args against a stopped cluster: exit $RC, want 3: $(cat last.err)"; }
done
kill -CONT "$RUN"
pass "--timeout bounds every request of scan, scan --raw, get, set, status, observers, gc"

# refused at the commit: prewrite done, then every daemon dies before the commit
PERCOLATOR_FAILPOINTS="txn.commit.before_primary=sleep(4000)" \
  timeout -k 5 60 "$CLI" --config client2.json --timeout 3s load --json --threads 1 three.jsonl \
  >late.out 2>late.err &
LATE=$!
PIDS+=("$LATE")
for _ in $(seq 200); do
  run_cli 10 --config client1.json scan --raw docs
  [[ "$OUT" == *three*primary* ]] && break
  sleep 0.05
done
[[ "$OUT" == *three*primary* ]] || fail "the late loader's prewrite did not appear: $OUT"
kill -9 "$RUN"
wait_exit "$LATE" 60
OUT=$(cat late.out)
[ "$RC" = 3 ] || fail "refused at the commit: exit $RC, want 3 (nothing was sent): $OUT $(cat late.err)"
grep -q '"url":"d/3","status":"unavailable"' <<<"$OUT" ||
  fail "refused at the commit: want status unavailable: $OUT $(cat late.err)"
pass "refused at the commit: exit 3, status unavailable, not unknown"

# refused: the cluster's servers are gone (killed above; ZooKeeper may still
# name them until their session expires, and nobody listens at their ports)
expect_load "refused" 3 unavailable -- --config client1.json --timeout 2s load --json three.jsonl
echo PASS
