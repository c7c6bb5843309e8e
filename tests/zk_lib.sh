# zk_lib.sh — a private ZooKeeper server for the CLI test scripts (sourced,
# not run): the playground's (`percolator playground --zookeeper-only`:
# Debian's zookeeper package on 127.0.0.1 with free ports, in $WORK/zk),
# never a service assumed to be running, stopped by process id. Needs
# cli_lib.sh's fail and the script's WORK and PIDS (its cleanup kills every
# pid in PIDS, the server's included).

# zk_free_port: prints a port of 127.0.0.1 that nothing listens on, below the
# kernel's ephemeral ports (there a connection's local port could take it
# before the server binds it).
zk_free_port() {
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 10100 ] || low=32768
  for _ in $(seq 1 100); do
    p=$((10000 + RANDOM % (low - 10000)))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  fail "no free port found"
}

# zk_start: starts a standalone server through `percolator playground
# --zookeeper-only` (the playground's server: Debian's zookeeper package,
# playground/zkserver.c) and waits (at most 90 s) until it serves; sets
# ZK_CONNECT ("127.0.0.1:PORT") and ZK_PID (the playground's pid: the server
# dies with it). The program is $ZK_CLI, else $CLI.
zk_start() {
  local cli=${ZK_CLI:-$CLI}
  [ -x "$cli" ] || fail "zk_start: no percolator program (ZK_CLI or CLI): '$cli'"
  rm -f "$WORK/zk.state"
  "$cli" playground --zookeeper-only --dir "$WORK/zk" --ready-file "$WORK/zk.state" \
    >"$WORK/zk.log" 2>&1 &
  ZK_PID=$!
  PIDS+=("$ZK_PID")
  for _ in $(seq 1 1800); do
    [ -s "$WORK/zk.state" ] && break
    kill -0 "$ZK_PID" 2>/dev/null || fail "the ZooKeeper server did not start: $(cat "$WORK/zk.log")"
    sleep 0.05
  done
  ZK_CONNECT=$(sed -n 's/^ *"zookeeper": "\([^"]*\)".*/\1/p' "$WORK/zk.state")
  [ -n "$ZK_CONNECT" ] || fail "the ZooKeeper server did not serve within 90 s: $(cat "$WORK/zk.log")"
}

# zk_stop: stops the server (SIGINT to its playground, which kills and reaps it).
zk_stop() {
  [ -n "${ZK_PID:-}" ] || return 0
  kill -INT "$ZK_PID" 2>/dev/null
  wait "$ZK_PID" 2>/dev/null
  ZK_PID=
}
