#!/usr/bin/env bash
# test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN — /metrics of every role is
# valid Prometheus text format, as a scraper parses it (tests/prom_check.c:
# HELP/TYPE, names, label escaping, cumulative histogram buckets ending in
# +Inf equal to _count):
#   1. the checker itself refuses what it must (each bad fixture below names
#      its fault), so that a pass below means something;
#   2. a cluster (`percolator run`: oracle and two tablets, each with its http
#      endpoint, coordinated through a private ZooKeeper server, zk_lib.sh) and
#      a worker running PLUGIN (an observer of docs
#      raw:text, observers/examples/normalize_count.c) with workers.http; after
#      writes that the observer processes, every endpoint's /metrics passes,
#      the worker's holds its latency histogram with observations, and every
#      role reports its ZooKeeper session as connected.
set -u
CLI=${1:?usage: test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN}
CHECK=${2:?usage: test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN}
PLUGIN=${3:?usage: test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-metrics-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/zk_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

# ---- 1. the checker -------------------------------------------------------------

good='# HELP a_total Things, with a \\ and a \n in the help
# TYPE a_total counter
a_total{observer="q\"uote\\back\nline"} 3
a_total{observer="plain"} 0
# TYPE g gauge
g -1.5e-3
g2 NaN
# HELP h_ms Latency
# TYPE h_ms histogram
h_ms_bucket{le="1"} 0
h_ms_bucket{le="5"} 2
h_ms_bucket{le="+Inf"} 2
h_ms_sum 4.5
h_ms_count 2'
printf '%s\n' "$good" | "$CHECK" good >/dev/null 2>err || fail "the checker refused a valid text: $(cat err)"
bad_case() { # WHAT EXPECTED-FAULT TEXT
  printf '%s\n' "$3" | "$CHECK" "$1" >/dev/null 2>err && fail "the checker accepted $1"
  grep -q -- "$2" err || fail "the checker's fault for $1 should say '$2': $(cat err)"
}
H='# TYPE h histogram'
bad_case "summed buckets" 'differs from _count' "$H
h_bucket{le=\"1\"} 2
h_bucket{le=\"+Inf\"} 18
h_sum 3
h_count 2"
bad_case "falling buckets" 'counts fewer' "$H
h_bucket{le=\"1\"} 2
h_bucket{le=\"2\"} 1
h_bucket{le=\"+Inf\"} 2
h_count 2"
bad_case "no +Inf" 'no le="+Inf"' "$H
h_bucket{le=\"1\"} 2
h_count 2"
bad_case "unescaped quote" 'unterminated\|expected' 'a{o="x"y"} 1'
bad_case "bad escape" 'bad escape' 'a{o="x\ty"} 1'
bad_case "bad name" 'valid metric name' '9a 1'
bad_case "bad value" 'bad value' 'a one'
bad_case "type twice" 'given twice' '# TYPE a counter
# TYPE a counter
a 1'
bad_case "type after samples" 'after its samples' 'a 1
# TYPE a counter'
bad_case "split family" 'not together' 'a 1
b 1
a{x="y"} 2'
bad_case "negative counter" 'negative' '# TYPE a counter
a -1'
bad_case "same series twice" 'twice' 'a{x="1"} 1
a{x="1"} 2'
pass "the checker accepts a valid text and names each fault of 12 invalid ones"

# ---- 2. every role's endpoint ---------------------------------------------------------

zk_start
ZK='"zookeeper": {"connect": "'$ZK_CONNECT'", "root": "/percolator/metrics", "session_timeout_ms": 3000}'
cat >run.json <<JSON
{"data_dir": "$WORK/cluster", "log": {"level": "warn"}, $ZK,
 "tso": {"listen": "127.0.0.1:0", "http": "127.0.0.1:0"},
 "tablets": [{"name": "t1", "listen": "127.0.0.1:0", "http": "127.0.0.1:0", "end": "m"},
             {"name": "t2", "listen": "127.0.0.1:0", "http": "127.0.0.1:0", "start": "m"}]}
JSON
"$CLI" run --config run.json --ready-file ready.json 2>run.log &
RUN=$!
PIDS+=("$RUN")
wait_file ready.json "$RUN"
cat >client.json <<JSON
{"log": {"level": "warn"}, $ZK,
 "tso": {"listen": "$(endpoint ready.json tso)"},
 "tablets": [{"name": "t1", "listen": "$(endpoint ready.json t1)", "end": "m"},
             {"name": "t2", "listen": "$(endpoint ready.json t2)", "start": "m"}],
 "workers": {"threads": 2, "http": "127.0.0.1:0", "scan": {"idle_ms": 20},
             "plugins": [{"path": "$PLUGIN"}]}}
JSON
"$CLI" --config client.json worker --ready-file wready.json 2>worker.log &
W=$!
PIDS+=("$W")
wait_file wready.json "$W"
for r in a b n z; do
  run_cli 20 --config client.json set docs "$r" raw:text "  Some Text $r "
  [ "$RC" = 0 ] || fail "set docs $r: $(cat last.err)"
done
run_cli 60 --config client.json wait --timeout-s 50
[ "$RC" = 0 ] || fail "wait: $(cat last.err)"

# metrics HOST:PORT: the body of GET /metrics
metrics() {
  local host=${1%:*} port=${1##*:} resp
  exec 3<>"/dev/tcp/$host/$port" || fail "cannot connect to $1"
  printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" >&3
  resp=$(timeout 10 cat <&3)
  exec 3<&-
  [[ "$resp" == "HTTP/1."?" 200 "* ]] || fail "GET $1/metrics: $(head -1 <<<"$resp")"
  sed '1,/^\r$/d' <<<"$resp" | tr -d '\r'
}
for role in tso t1 t2; do
  ep=$(endpoint ready.json "$role" http)
  [ -n "$ep" ] || fail "no http endpoint for $role in the ready file: $(cat ready.json)"
  metrics "$ep" >"$role.prom"
  "$CHECK" "$role" <"$role.prom" 2>"$role.err" || fail "$role /metrics: $(cat "$role.err")"
done
ep=$(grep -o '"http": *"[^"]*"' wready.json | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
[ -n "$ep" ] || fail "no workers.http endpoint in the worker's ready file: $(cat wready.json)"
metrics "$ep" >worker.prom
"$CHECK" worker <worker.prom 2>worker.err || fail "worker /metrics: $(cat worker.err)"
# every role of the cluster reports its ZooKeeper session, connected
for role in tso t1 t2 worker; do
  grep -qx 'percolator_zookeeper_session_state 1' "$role.prom" ||
    fail "$role /metrics has no connected ZooKeeper session: $(grep zookeeper "$role.prom")"
done
grep -qE '^percolator_notification_latency_ms_count [1-9]' worker.prom ||
  fail "the worker's histogram counts no observation: $(grep latency worker.prom)"
grep -qE '^percolator_observer_runs_total\{observer="[^"]+"\} [1-9]' worker.prom ||
  fail "the worker counts no observer run: $(grep runs worker.prom)"
pass "/metrics of the oracle, the lock service, two tablets and a worker are valid"

kill -TERM "$W" # the worker first: a client of the cluster
wait_exit "$W" 30
kill -TERM "$RUN"
wait_exit "$RUN" 30
echo PASS
