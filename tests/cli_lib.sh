# cli_lib.sh — helpers the CLI test scripts share (sourced, not run). The
# script sets WORK (its temporary directory) and CLI (the percolator binary),
# and either calls cli_start_cleanup or defines its own cleanup.

# cli_start_cleanup: on exit, kills and reaps every pid in PIDS, shows the
# logs (*.log, *.err in WORK) when the test failed, and removes WORK (kept
# with PC_KEEP_TEST_DIRS set).
cli_start_cleanup() {
  PIDS=()
  FAILED=0
  trap cli_cleanup EXIT
  trap 'exit 1' INT TERM
}
cli_cleanup() {
  local p f
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$FAILED" = 1 ]; then
    for f in "$WORK"/*.log "$WORK"/*.err; do
      [ -s "$f" ] && { echo "---- $f"; tail -n 30 "$f"; }
    done >&2
  fi
  chmod -R u+rwX "$WORK" 2>/dev/null
  if [ -n "${PC_KEEP_TEST_DIRS:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}

# fail MESSAGE: reports and ends the test (the EXIT trap cleans up).
fail() {
  FAILED=1
  echo "FAIL: $*" >&2
  exit 1
}
pass() { echo "ok: $*"; }

# run_cli SECONDS ARGS...: the CLI bounded in time; output in $OUT, status in $RC.
run_cli() {
  local secs=$1
  shift
  OUT=$(timeout -k 5 "$secs" "$CLI" "$@" 2>"$WORK/last.err")
  RC=$?
  [ "$RC" = 124 ] && fail "percolator $* did not finish within ${secs}s"
}

# wait_file PATH PID: until PATH is non-empty (at most 30 s) while PID lives.
wait_file() {
  local i
  for i in $(seq 1 600); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || fail "process $2 exited before writing $1"
    sleep 0.05
  done
  fail "$1 did not appear within 30 s"
}

# wait_exit PID SECONDS: reaps PID, failing if it runs longer; status in $RC.
wait_exit() {
  local i n=$(($2 * 20))
  for i in $(seq 1 "$n"); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$1" 2>/dev/null && fail "process $1 still runs after $2 s"
  wait "$1"
  RC=$?
}

# endpoint FILE ROLE [KEY]: "host:port" of ROLE's KEY (listen/http) in a ready
# file, which looks like {"tso": {"listen": "127.0.0.1:1234"}, ...,
# "tablets": {"t1": {"http": "...", "listen": "..."}}}.
endpoint() {
  local key=${3:-listen}
  grep -o "\"$2\": *{[^}]*}" "$1" | grep -o "\"$key\": *\"[^\"]*\"" | sed 's/.*"\([^"]*\)"$/\1/'
}
