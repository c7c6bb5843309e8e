# zk_lib.sh — a private ZooKeeper server for the CLI test scripts (sourced,
# not run): Debian's zookeeper package started on 127.0.0.1 with ephemeral
# ports in $WORK/zk, never a service assumed to be running, stopped by
# process id. Needs cli_lib.sh's fail and the script's WORK and PIDS (its
# cleanup kills every pid in PIDS, the server's included).

ZK_JAR=/usr/share/java/zookeeper.jar

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

# zk_start: starts a standalone server and waits (at most 90 s) until it
# serves; sets ZK_CONNECT ("127.0.0.1:PORT") and ZK_PID.
zk_start() {
  [ -r "$ZK_JAR" ] || fail "$ZK_JAR is missing: install Debian's zookeeper package (.ci/setup deps)"
  local dir="$WORK/zk" port
  port=$(zk_free_port)
  mkdir -p "$dir/data"
  cat >"$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=40
syncLimit=10
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
minSessionTimeout=1000
maxSessionTimeout=30000
CFG
  printf 'log4j.rootLogger=WARN, C\nlog4j.appender.C=org.apache.log4j.ConsoleAppender\nlog4j.appender.C.layout=org.apache.log4j.PatternLayout\n' \
    >"$dir/log4j.properties"
  java -Xmx96m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData \
    -Djava.net.preferIPv4Stack=true -cp "$dir:$ZK_JAR" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" >"$WORK/zk.log" 2>&1 &
  ZK_PID=$!
  PIDS+=("$ZK_PID")
  ZK_CONNECT="127.0.0.1:$port"
  local reply
  for _ in $(seq 1 900); do
    # bounded: a server still starting may accept and not answer yet
    reply=$(timeout -k 1 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' \
      _ "$port" 2>/dev/null)
    case "$reply" in *"Mode: "*) return 0 ;; esac
    kill -0 "$ZK_PID" 2>/dev/null || fail "the ZooKeeper server exited while starting"
    sleep 0.1
  done
  fail "the ZooKeeper server did not serve within 90 s"
}

# zk_stop: stops the server by its process id.
zk_stop() {
  [ -n "${ZK_PID:-}" ] || return 0
  kill -9 "$ZK_PID" 2>/dev/null
  wait "$ZK_PID" 2>/dev/null
  ZK_PID=
}
