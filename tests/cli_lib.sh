# cli_lib.sh — helpers the CLI test scripts share (sourced, not run). The
# script sets WORK (its temporary directory) and CLI (the percolator binary),
# and defines cleanup, which reads FAILED.

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
# file, which looks like {"lockservice": {"listen": "127.0.0.1:1234"}, ...,
# "tablets": {"t1": {"http": "...", "listen": "..."}}, "tso": {...}}.
endpoint() {
  local key=${3:-listen}
  grep -o "\"$2\": *{[^}]*}" "$1" | grep -o "\"$key\": *\"[^\"]*\"" | sed 's/.*"\([^"]*\)"$/\1/'
}
