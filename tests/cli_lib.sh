# cli_lib.sh — helpers the CLI test scripts share (sourced, not run). The
# script sets WORK (its temporary directory) and CLI (the percolator binary),
# and either calls cli_start_cleanup or defines its own cleanup.

# cli_start_cleanup: on exit, stops a playground pg_start started (SIGINT:
# it stops its roles in order; at most 60 s), kills and reaps every pid in
# PIDS, shows the logs (*.log, *.err in WORK) when the test failed, and
# removes WORK (kept with PC_KEEP_TEST_DIRS set).
cli_start_cleanup() {
  PIDS=()
  FAILED=0
  trap cli_cleanup EXIT
  trap 'exit 1' INT TERM
}
cli_cleanup() {
  local p f
  pg_cleanup
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

# ---- clusters: `percolator playground` ----------------------------------------
# A test's cluster is started by the playground (playground/playground.h), as
# the C tests' and the benchmarks' are: never by a configuration written here.

# pg_start DIR [PLAYGROUND ARGS...]: starts `percolator playground --dir DIR
# --ready-file DIR.state ARGS` in a session of its own (its roles are its
# children: SIGTERM reaches them if it dies) and waits (at most 90 s) until
# every role is ready. Sets PG (its pid, also in PIDS), PG_STATE (the state
# file, rewritten at each change: see `percolator playground --help`) and C
# (the client configuration, DIR/cluster.json). Its output is in DIR.out and
# DIR.err.
pg_start() {
  local dir=$1
  shift
  PG_STATE="$dir.state"
  rm -f "$PG_STATE" "$dir.out"
  setsid "$CLI" playground --dir "$dir" --ready-file "$PG_STATE" "$@" >"$dir.out" 2>"$dir.err" &
  PG=$!
  PIDS+=("$PG")
  for _ in $(seq 1 1800); do
    [ -s "$PG_STATE" ] && break
    kill -0 "$PG" 2>/dev/null || fail "the playground did not start: $(cat "$dir.err")"
    sleep 0.05
  done
  [ -s "$PG_STATE" ] || fail "the playground did not start within 90 s: $(cat "$dir.err")"
  C="$dir/cluster.json"
}

# pg_role NAME KEY: role NAME's KEY in the playground's state ("pid", "listen",
# "http", "log", "state", "leading"), as the state file says now.
pg_role() {
  tr -d '\n' <"$PG_STATE" | grep -o "{[^{}]*\"name\": *\"$1\"[^{}]*}" |
    grep -o "\"$2\": *[^,}]*" | sed 's/^"[^"]*": *//; s/ *$//; s/^"//; s/"$//'
}

# pg_zookeeper: the playground's ZooKeeper connect string.
pg_zookeeper() { sed -n 's/^ *"zookeeper": "\([^"]*\)".*/\1/p' "$PG_STATE"; }

# pg_cleanup: for a cleanup: SIGINT to a playground pg_start started that
# still runs, and a wait (at most 60 s) until it has stopped its roles. A
# playground already reaped is no child of this shell: its pid, which may
# be reused, is not signalled.
pg_cleanup() {
  if [ -n "${PG:-}" ] && [ "$(sed 's/.*) //' "/proc/$PG/stat" 2>/dev/null | cut -d' ' -f2)" = "$$" ]; then
    kill -INT "$PG"
    for _ in $(seq 1 1200); do # until it is a zombie (or gone)
      grep -q '^[0-9]* ([^)]*) [^Z]' "/proc/$PG/stat" 2>/dev/null || break
      sleep 0.05
    done
  fi
}

# pg_stop: SIGINT to the playground (it stops the workers, the tablets, the
# oracles and ZooKeeper in order) and reaps it; fails unless it exits 0
# within 120 s.
pg_stop() {
  kill -INT "$PG" 2>/dev/null
  wait_exit "$PG" 120
  PG=
  [ "$RC" = 0 ] || fail "the playground exited $RC on SIGINT: $(tail -n 5 "${PG_STATE%.state}.err")"
}

# pg_wait_exited NAME SECONDS: until the playground has seen role NAME exit
# (it looks every second); fails after SECONDS.
pg_wait_exited() {
  local i
  for i in $(seq 1 $(($2 * 20))); do
    [ "$(pg_role "$1" state)" = exited ] && return 0
    sleep 0.05
  done
  fail "$1 (pid $(pg_role "$1" pid)) did not exit within $2 s"
}
