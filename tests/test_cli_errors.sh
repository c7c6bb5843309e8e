#!/usr/bin/env bash
# test_cli_errors.sh PERCOLATOR FAIL_PLUGIN GOOD_PLUGIN — the command line's error paths,
# as a table: for every verb, and for each daemon role's start-up, the ways
# its inputs can be wrong that the help and the docs mention (a data
# directory missing, not a directory, held by another process, of another
# program or version; a configuration missing, malformed, with a bad value,
# naming a missing plugin or one whose init fails; ports in use; a data
# directory that cannot be created; unknown verbs and options; bad
# arguments), each with the exit status and the words its message must hold
# (the thing at fault named) and no byte of garbage. Then the daemons'
# shutdown while clients are connected: SIGTERM with a txn session and a
# wait attached, for `run` and for a worker serving an embedded store.
# Run by ctest in the plain and the sanitizer builds: a sanitizer's report or
# abort fails the case it happens in. Every process is bounded in time and
# killed by the trap.
set -u
CLI=${1:?usage: test_cli_errors.sh PERCOLATOR FAIL_PLUGIN GOOD_PLUGIN}
FAIL_PLUGIN=${2:?usage: test_cli_errors.sh PERCOLATOR FAIL_PLUGIN GOOD_PLUGIN}
GOOD_PLUGIN=${3:?usage: test_cli_errors.sh PERCOLATOR FAIL_PLUGIN GOOD_PLUGIN}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$FAIL_PLUGIN" in /*) ;; *) FAIL_PLUGIN="$PWD/$FAIL_PLUGIN" ;; esac
case "$GOOD_PLUGIN" in /*) ;; *) GOOD_PLUGIN="$PWD/$GOOD_PLUGIN" ;; esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-clierr-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/zk_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
CASES=0
BAD=0
VERBS_SEEN=" "

# t NAME RC REGEX ARGS...: runs percolator ARGS (at most 30 s); its exit status
# must be RC, its stderr must match REGEX (extended, one line of it), hold only
# printable ASCII and no sanitizer report. The verb named in NAME ("verb: ...")
# is counted as covered.
t() {
  local name=$1 rc=$2 re=$3
  shift 3
  CASES=$((CASES + 1))
  VERBS_SEEN+="${name%%:*} "
  local t0=${EPOCHREALTIME/./}
  timeout -k 5 30 "$CLI" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null 7>&-
  local got=$?
  [ -n "${PC_TEST_TIMES:-}" ] && echo "time: $name: $(((${EPOCHREALTIME/./} - t0) / 1000)) ms"
  local why=""
  [ "$got" = "$rc" ] || why="exit $got, want $rc"
  grep -qE -- "$re" "$WORK/err" || why="${why:+$why; }stderr does not match /$re/"
  LC_ALL=C grep -q $'[^\t -~]' "$WORK/err" && why="${why:+$why; }stderr holds bytes that are not printable text"
  grep -qE 'Sanitizer|runtime error:' "$WORK/err" && why="${why:+$why; }a sanitizer report"
  if [ -n "$why" ]; then
    BAD=$((BAD + 1))
    echo "FAIL: $name: $why" >&2
    sed 's/^/    /' "$WORK/err" | head -20 >&2
  else
    echo "ok: $name"
  fi
}

# ---- fixtures -------------------------------------------------------------------

"$CLI" --data "$WORK/good" init >/dev/null || fail "init of the fixture"
printf 'x\n' >"$WORK/afile"
mkdir -p "$WORK/foreign" && printf 'mine\n' >"$WORK/foreign/notes.txt"
mkdir -p "$WORK/other" && printf 'percolator-data 99\n' >"$WORK/other/FORMAT"
mkdir -p "$WORK/empty"
"$CLI" --data "$WORK/held" init >/dev/null || fail "init of the held fixture"
mkfifo "$WORK/held.in"
"$CLI" --data "$WORK/held" txn <"$WORK/held.in" >/dev/null 2>"$WORK/holder.err" &
HOLDER=$!
PIDS+=("$HOLDER")
exec 7>"$WORK/held.in" # the session holds the directory while this stays open
printf 'begin\n' >&7
for _ in $(seq 100); do grep -q client "$WORK/held/LOCK" 2>/dev/null && break; sleep 0.05; done
mkfifo "$WORK/fifo"
printf '{"data_dir": "%s/good",\n "store": {"sync": 3}}\n' "$WORK" >badvalue.json
printf '{"data_dir": "%s/good",\n "tso": {"listen": }\n' "$WORK" >malformed.json
printf '{"data_dir": "%s/good", "stroe": {}}\n' "$WORK" >typo.json
printf '{"data_dir": "%s/nowhere", "workers": {"plugins": []}}\n' "$WORK" >nodir.json
printf '{"data_dir": "%s/good", "workers": {"plugins": [{"path": "%s/none.so"}]}}\n' \
  "$WORK" "$WORK" >noplugin.json
printf '{"data_dir": "%s/good", "workers": {"plugins": [{"path": "%s"}]}}\n' \
  "$WORK" "$FAIL_PLUGIN" >failplugin.json
printf '{"data_dir": "%s/good", "workers": {"plugins": [{"path": "%s"}]}}\n' \
  "$WORK" "$GOOD_PLUGIN" >embedded.json
# a cluster nobody serves (port 1 refuses, ZooKeeper's too), and daemons' configurations
printf '{"zookeeper": {"connect": "127.0.0.1:1", "root": "/percolator/down"},
 "tso": {"listen": "127.0.0.1:1"}, "tablets": [{"name": "t1", "listen": "127.0.0.1:1"}],
 "workers": {"plugins": [{"path": "%s"}]}}\n' "$GOOD_PLUGIN" >down.json
# a port in use: held by a tso of this test
# the clusters' coordination: a private ZooKeeper server
zk_start 7>&- # (the holder below waits for every copy of fd 7 to close)
ZK='"zookeeper": {"connect": "'$ZK_CONNECT'", "root": "/percolator/errors", "session_timeout_ms": 3000}'
printf '{"data_dir": "%s/busy", %s, "tso": {"listen": "127.0.0.1:0"}}\n' "$WORK" "$ZK" >busy.json
"$CLI" tso --config busy.json --ready-file busy.ready 2>busy.log 7>&- &
BUSY=$!
PIDS+=("$BUSY")
wait_file busy.ready "$BUSY"
PORT=$(endpoint busy.ready tso)
cat >inuse.json <<JSON
{"data_dir": "$WORK/inuse", $ZK,
 "tso": {"listen": "$PORT"},
 "tablets": [{"name": "t1", "listen": "$PORT"}]}
JSON
cat >inuse_http.json <<JSON
{"data_dir": "$WORK/inuse2", $ZK, "tso": {"listen": "127.0.0.1:0", "http": "$PORT"}}
JSON
# a data directory that cannot be created (its parent is a file; root or not)
cat >unwritable.json <<JSON
{"data_dir": "$WORK/afile/sub", $ZK,
 "tso": {"listen": "127.0.0.1:0"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0"}]}
JSON
cat >unwritable_t.json <<JSON
{"data_dir": "$WORK/afile/sub", $ZK, "tso": {"listen": "$PORT"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0"}]}
JSON
printf '{"data_dir": "%s/x", %s, "store": {"sync": false}}\n' "$WORK" "$ZK" >no_tso.json
# the retired lock service daemon's section, and a cluster without coordination
printf '{"data_dir": "%s/x", "lockservice": {"listen": "127.0.0.1:0"}}\n' "$WORK" >lockd_only.json
cat >no_zk.json <<JSON
{"data_dir": "$WORK/nozk", "tso": {"listen": "127.0.0.1:0"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0"}]}
JSON

D=(--data "$WORK/good")
MISSING="data directory '$WORK/nowhere' does not exist"

# ---- the table --------------------------------------------------------------------

# global options and verbs
t "global: unknown verb, suggested" 2 "unknown verb 'stauts'.*did you mean 'status'" stauts
t "global: unknown option, suggested" 2 "unknown option '--dta'.*did you mean '--data'" --dta x get
t "global: --timeout without a unit" 2 "--timeout '5': give a unit \(5ms or 5s\)" --timeout 5 get t r c
t "global: empty --data" 2 "--data: empty directory name" --data '' get t r c
t "global: no verb" 2 "no verb given"
t "help: unknown verb" 2 "unknown verb 'sacn'.*did you mean 'scan'" help sacn

# init
t "init: not a directory" 3 "data directory '$WORK/afile' is not a directory" --data "$WORK/afile" init
t "init: foreign directory" 3 "'$WORK/foreign' is not a percolator data directory" --data "$WORK/foreign" init
t "init: extra argument" 2 "unexpected argument 'now'" "${D[@]}" init now
t "init: configuration missing" 3 "$WORK/none.json: cannot open" --config "$WORK/none.json" init

# get / set / delete
t "get: data directory missing" 3 "$MISSING" --data "$WORK/nowhere" get t r c
t "get: directory of another version" 3 "FORMAT file says 'percolator-data 99'" --data "$WORK/other" get t r c
t "get: empty directory" 3 "data directory '$WORK/empty' is empty" --data "$WORK/empty" get t r c
t "get: held by another process past --timeout" 3 \
  "'$WORK/held' is in use by another process \(client [0-9]+\), which did not release it within 1 s" \
  --data "$WORK/held" --timeout 1s get t r c
t "get: missing arguments" 2 "expected TABLE ROW COLUMN, got 2 arguments" "${D[@]}" get t r
t "get: malformed configuration" 3 "malformed.json:2:[0-9]+: syntax error" --config malformed.json get t r c
t "set: empty value" 2 "empty VALUE" "${D[@]}" set t r c ''
t "set: bad table name" 2 "table name 'bad table'" "${D[@]}" set 'bad table' r c v
t "set: configuration with a bad value" 3 "badvalue.json:2:[0-9]+: store.sync: expected a boolean" \
  --config badvalue.json set t r c v
t "set: configuration with an unknown key" 3 "typo.json:1:[0-9]+: stroe: unknown key 'stroe' \(did you mean 'store'\?\)" \
  --config typo.json set t r c v
t "delete: configuration missing" 3 "$WORK/none.json: cannot open: No such file" --config "$WORK/none.json" delete t r c
t "delete: too many arguments" 2 "expected TABLE ROW COLUMN, got 4" "${D[@]}" delete t r c d

# scan, txn, gc, status
t "scan: --since without --raw" 2 "--since needs --raw" "${D[@]}" scan --since 1 t
t "scan: unknown option, suggested" 2 "unknown option '--jsn'.*did you mean '--json'" "${D[@]}" scan --jsn t
t "scan: cluster down" 3 "zookeeper 127.0.0.1:1: no server answered" --config down.json --timeout 1s scan t
t "txn: data directory missing" 3 "$MISSING" --data "$WORK/nowhere" txn
t "txn: extra argument" 2 "unexpected argument" "${D[@]}" txn now
t "playground: workers without a plugin" 2 "--workers needs a --plugin" playground --workers 2
t "playground: a missing plugin" 3 "playground: plugin nosuch.so: No such file" playground --plugin nosuch.so --dir "$WORK/pg-none"
t "playground: with --config" 2 "writes its own configuration" --config "$WORK/none.json" playground
t "gc: held by another process" 3 "in use by another process" --data "$WORK/held" --timeout 1s gc
t "gc: extra argument" 2 "unexpected argument 'now'" "${D[@]}" gc now
t "status: cluster down" 3 "status: 3 daemons down" --config down.json --timeout 1s status
t "status: not a directory" 3 "is not a directory" --data "$WORK/afile" status

# observers, wait, failures
t "observers: data directory missing" 3 "$MISSING" --data "$WORK/nowhere" observers
t "wait: bad --timeout-s" 2 "--timeout-s: expected seconds" "${D[@]}" wait --timeout-s soon
t "wait: held by another process" 3 "in use by another process" --data "$WORK/held" --timeout 1s \
  wait --timeout-s 1
t "failures: unknown option, suggested" 2 "unknown option '--retyr'.*did you mean '--retry'" "${D[@]}" failures --retyr

t "doctor: data directory missing" 3 "doctor: 1 problem found" --data "$WORK/nowhere" doctor
t "doctor: extra argument" 2 "unexpected argument 'now'" "${D[@]}" doctor now
t "doctor: cluster down" 3 "doctor: 2 problems found" --config down.json --timeout 1s doctor
grep -q "^PROBLEM  zookeeper 127.0.0.1:1: not reachable within 1000 ms (.*): start the ensemble, or correct zookeeper.connect in down.json" out ||
  { BAD=$((BAD + 1)); echo "FAIL: doctor: cluster down: no line for ZooKeeper: $(cat out)" >&2; }

# the dedup verbs
t "load: file missing" 3 "nosuch.jsonl: cannot read it \(No such file or directory\)" "${D[@]}" load nosuch.jsonl
t "load: a FIFO" 3 "$WORK/fifo: a FIFO, not a document or a directory, skipped" "${D[@]}" load "$WORK/fifo"
t "load: a character device" 3 "/dev/zero: a character device" "${D[@]}" load /dev/zero
t "load: bad --threads" 2 "--threads: expected 1..64, got '0'" "${D[@]}" load --threads 0 x
t "load: no input" 2 "expected FILE, FILE.jsonl or DIR" "${D[@]}" load
t "clusters: bad --min-size" 2 "--min-size: expected a count >= 1, got '0'" "${D[@]}" clusters --min-size 0
t "search: no term" 2 "no term in the arguments" "${D[@]}" search '...'
t "doc: no URL" 2 "expected one URL" "${D[@]}" doc
t "doc: data directory missing" 3 "$MISSING" --data "$WORK/nowhere" doc u
t "check: configuration with a bad value" 3 "store.sync: expected a boolean" --config badvalue.json check

# the daemons' start-up
t "run: no --config" 2 "--config FILE is required" run
t "run: ports in use" 3 "cannot listen on $PORT.*[Aa]ddress already in use" run --config inuse.json
t "run: data directory cannot be created" 3 "cannot create $WORK/afile/sub" run --config unwritable.json
t "run: malformed configuration" 3 "malformed.json:2:[0-9]+" run --config malformed.json
t "tso: no tso section" 3 "no \"tso\" section with \"listen\"" tso --config no_tso.json
t "run: the retired lockservice section" 3 "lockservice.*\"lockd\"\\) is retired" run --config lockd_only.json
t "run: a cluster without zookeeper" 3 "tablets.*needs a \"zookeeper\" section" run --config no_zk.json
t "lockd: retired" 2 "'lockd' is retired: a cluster coordinates through ZooKeeper" lockd --config no_zk.json
t "tso: port in use" 3 "tso: .*cannot listen on $PORT" tso --config inuse.json
t "tso: http port in use" 3 "tso: http: cannot listen on $PORT for HTTP" tso --config inuse_http.json
t "tablet: no --name" 2 "--name NAME is required" tablet --config inuse.json
t "tablet: no such tablet" 3 "no tablet named 'tx'" tablet --config inuse.json --name tx
t "tablet: port in use" 3 "tablet t1: .*cannot listen on $PORT" tablet --config inuse.json --name t1
t "tablet: data directory cannot be created" 3 "cannot create $WORK/afile/sub" tablet --config unwritable_t.json --name t1
t "worker: data_dir missing (named exactly)" 3 "^percolator: worker: $MISSING \(create it with 'percolator init'\)$" \
  --config nodir.json worker
t "worker: --data missing" 3 "$MISSING" --data "$WORK/nowhere" worker
t "worker: plugin missing" 3 "workers.plugins\[0\]: $WORK/none.so: cannot load plugin" --config noplugin.json worker
t "worker: plugin init fails" 3 "workers.plugins\[0\]: .*fail_init.so: init failed: config says no" \
  --config failplugin.json worker
t "worker: configuration with a bad value" 3 "store.sync: expected a boolean" --config badvalue.json worker
t "worker: held by a client past --timeout" 3 "'$WORK/held' is in use by another process \(client" \
  --data "$WORK/held" --timeout 500ms worker
t "worker: cluster down" 3 "zookeeper 127.0.0.1:1: no server answered" --config down.json --timeout 1s worker

# a second worker leaves the first one's files alone
"$CLI" --config embedded.json worker --ready-file w1.ready 2>w1.log 7>&- &
W1=$!
PIDS+=("$W1")
wait_file w1.ready "$W1"
SERVING=$(cat good/serving.json)
t "worker: held by another worker" 3 "'$WORK/good' is in use by another process \(worker $W1\)" \
  --config embedded.json worker
[ "$(cat good/serving.json 2>/dev/null)" = "$SERVING" ] || fail "the second worker changed the first one's serving.json"
kill -0 "$W1" || fail "the first worker died when the second failed"
run_cli 20 --data good set t r c through-the-worker 7>&-
[ "$RC" = 0 ] || fail "set through the first worker after the second failed: $(cat last.err)"

# every verb has a case
for v in $("$CLI" --help | sed -n '/^Verbs:/,/^$/p' | awk 'NF && !/^Verbs:/ {print $1}'); do
  [[ "$VERBS_SEEN" == *" $v "* ]] || { BAD=$((BAD + 1)); echo "FAIL: verb $v has no case" >&2; }
done

# ---- shutdown with clients connected ---------------------------------------------------

# shutdown_with_clients WHAT PID CLIENT-ARGS...: a txn session and a wait
# attached to the daemon PID; SIGTERM: the daemon exits 0 within 30 s, and its
# clients end (bounded) with an answer or an error, not a hang.
shutdown_with_clients() {
  local what=$1 pid=$2
  shift 2
  mkfifo "$WORK/s.in"
  timeout -k 5 60 "$CLI" "$@" txn <"$WORK/s.in" >"$WORK/s.out" 2>"$WORK/s.err" 7>&- &
  local session=$!
  exec 8>"$WORK/s.in"
  printf 'begin\nset t r c during-shutdown\n' >&8
  timeout -k 5 60 "$CLI" "$@" --timeout 2s wait --timeout-s 5 >/dev/null 2>"$WORK/w.err" 7>&- 8>&- &
  local waiter=$!
  for _ in $(seq 100); do grep -q '^ok$' "$WORK/s.out" && break; sleep 0.05; done
  grep -q '^ok$' "$WORK/s.out" || fail "$what: the session got no answer before the shutdown"
  kill -TERM "$pid"
  wait_exit "$pid" 30
  [ "$RC" = 0 ] || fail "$what: exited $RC on SIGTERM with clients connected"
  printf 'commit\n' >&8
  exec 8>&-
  wait_exit "$session" 40
  [ "$RC" = 0 ] || fail "$what: the txn session exited $RC: $(cat "$WORK/s.err")"
  grep -qE '^(ok commit_ts=[0-9]+|error [a-z_]+: .+)$' "$WORK/s.out" ||
    fail "$what: the session's commit got no answer: $(cat "$WORK/s.out")"
  wait_exit "$waiter" 40
  [ "$RC" = 0 ] || [ "$RC" = 3 ] || [ "$RC" = 5 ] || fail "$what: wait exited $RC: $(cat "$WORK/w.err")"
  for f in "$WORK/s.err" "$WORK/w.err"; do
    grep -qE 'Sanitizer|runtime error:' "$f" && fail "$what: a sanitizer report: $(cat "$f")"
  done
  rm -f "$WORK/s.in"
  CASES=$((CASES + 1))
  echo "ok: $what: exit 0 on SIGTERM with a session and a wait connected; they ended"
}
shutdown_with_clients "worker: shutdown with clients" "$W1" --data good
grep -qE 'Sanitizer|runtime error:' w1.log && fail "worker: a sanitizer report: $(cat w1.log)"

cat >cluster.json <<JSON
{"data_dir": "$WORK/cluster", "log": {"level": "warn"}, $ZK,
 "tso": {"listen": "127.0.0.1:0"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0"}]}
JSON
"$CLI" run --config cluster.json --ready-file run.ready 2>run.log 7>&- &
RUN=$!
PIDS+=("$RUN")
wait_file run.ready "$RUN"
cat >client.json <<JSON
{"tso": {"listen": "$(endpoint run.ready tso)"}, $ZK,
 "tablets": [{"name": "t1", "listen": "$(endpoint run.ready t1)"}]}
JSON
shutdown_with_clients "run: shutdown with clients" "$RUN" --config client.json
grep -qE 'Sanitizer|runtime error:' run.log && fail "run: a sanitizer report: $(cat run.log)"

exec 7>&-
wait_exit "$HOLDER" 20
echo "test_cli_errors: $CASES cases, $BAD failed"
[ "$BAD" = 0 ] || { FAILED=1; exit 1; }
echo PASS
