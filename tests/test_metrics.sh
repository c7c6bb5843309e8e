#!/usr/bin/env bash
# test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN — /metrics of every role is
# valid Prometheus text format, as a scraper parses it (tests/prom_check.c:
# HELP/TYPE, names, label escaping, cumulative histogram buckets ending in
# +Inf equal to _count):
#   1. the checker itself refuses what it must (each bad fixture below names
#      its fault), so that a pass below means something;
#   2. a cluster started by `percolator playground` (two oracles, two tablets,
#      each with its http endpoint, a private ZooKeeper server, and a worker
#      running PLUGIN, an observer of docs raw:text,
#      observers/examples/normalize_count.c, with workers.http); after writes
#      that the observer processes, every endpoint's /metrics passes (the
#      standby oracle's too), by Prometheus' conventions: durations in
#      seconds, no 64-bit timestamp whole in a float; the tablets and the
#      leading oracle have a request-duration histogram per op; the worker's
#      holds its latency histogram with observations; every role reports its
#      ZooKeeper session as connected; and `status` counts the runs.
set -u
CLI=${1:?usage: test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN}
CHECK=${2:?usage: test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN}
PLUGIN=${3:?usage: test_metrics.sh PERCOLATOR PROM_CHECK PLUGIN}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-metrics-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
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
# HELP h_seconds Latency
# TYPE h_seconds histogram
h_seconds_bucket{op="get",le="0.001"} 0
h_seconds_bucket{op="get",le="0.5"} 2
h_seconds_bucket{op="get",le="+Inf"} 2
h_seconds_sum{op="get"} 0.0045
h_seconds_count{op="get"} 2
g3 9007199254740992'
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
bad_case "milliseconds" 'base unit' '# TYPE lat_ms histogram
lat_ms_bucket{le="+Inf"} 1
lat_ms_count 1'
bad_case "a timestamp past 2^53" 'low bits' '# TYPE ts gauge
ts 470636550124208129'
pass "the checker accepts a valid text and names each fault of 14 invalid ones"

# ---- 2. every role's endpoint ---------------------------------------------------------

setsid "$CLI" playground --dir "$WORK/pg" --plugin "$PLUGIN" --ready-file pg.json \
  >pg.out 2>pg.err &
PG=$!
PIDS+=("$PG")
for _ in $(seq 1 1800); do
  [ -s pg.json ] && break
  kill -0 "$PG" 2>/dev/null || fail "the playground did not start: $(cat pg.err)"
  sleep 0.05
done
[ -s pg.json ] || fail "the playground did not start within 90 s"
C="$WORK/pg/cluster.json"
for r in a b n z; do
  run_cli 20 --config "$C" set docs "$r" raw:text "  Some Text $r "
  [ "$RC" = 0 ] || fail "set docs $r: $(cat last.err)"
done
run_cli 60 --config "$C" wait --timeout-s 50
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
# every role's http endpoint, from the playground's state: "name http" lines
# ("http" comes before "name" in each role: sorted keys, one a line)
awk -F'"' '/"http":/ {h = $4} /"name":/ {if (h != "") print $4, h; h = ""}' pg.json >endpoints
[ "$(wc -l <endpoints)" = 6 ] || fail "6 roles should serve /metrics: $(cat endpoints) $(cat pg.json)"
while read -r role ep; do
  metrics "$ep" >"$role.prom"
  "$CHECK" "$role" <"$role.prom" 2>"$role.err" || fail "$role /metrics: $(cat "$role.err")"
  grep -qx 'percolator_zookeeper_session_state 1' "$role.prom" ||
    fail "$role /metrics has no connected ZooKeeper session: $(grep zookeeper "$role.prom")"
done <endpoints
leader=$(sed -n 's/^  \(tso-[0-9]\) .* leads$/\1/p' pg.out)
[ -n "$leader" ] || fail "no oracle shown leading: $(cat pg.out)"
grep -qE '^percolator_rpc_request_duration_seconds_count\{op="timestamps"\} [1-9]' "$leader.prom" ||
  fail "the leading oracle has no request durations: $(grep duration "$leader.prom" | head -3)"
grep -qE '^percolator_tso_last_timestamp_seconds [1-9][0-9]{9}' "$leader.prom" ||
  fail "the oracle's last timestamp in Unix seconds: $(grep last_timestamp "$leader.prom")"
# the tablets' replicas on s1..s3: their leaders served the requests
for op in get one_phase; do
  cat s1.prom s2.prom s3.prom |
    grep -qE "^percolator_rpc_request_duration_seconds_count\{op=\"$op\"\} [1-9]" ||
    fail "no server has request durations of $op: $(grep -h 'duration.*_count' s?.prom)"
done
for s in s1 s2 s3; do
  for t in t1 t2; do
    grep -q "^percolator_gc_safe_point_timestamp_seconds{tablet=\"$t\"} " "$s.prom" ||
      fail "$s has no safe point of $t in seconds: $(grep safe_point "$s.prom")"
  done
  grep -qE '^percolator_raft_applied_index\{tablet="t1"\} [1-9]' "$s.prom" ||
    fail "$s has no applied index of t1: $(grep raft_applied "$s.prom")"
done
grep -qE '^percolator_notification_latency_seconds_count [1-9]' worker-1.prom ||
  fail "the worker's histogram counts no observation: $(grep latency worker-1.prom)"
grep -qE '^percolator_observer_runs_total\{observer="[^"]+"\} [1-9]' worker-1.prom ||
  fail "the worker counts no observer run: $(grep runs worker-1.prom)"
pass "/metrics of two oracles, three tablet servers and a worker are valid and by the conventions"

runs=0
for _ in $(seq 1 100); do # the counters reach the store within a second (bounded here by 10 s)
  run_cli 20 --config "$C" status --json
  runs=$(grep -o '"runs": *[0-9]*' <<<"$OUT" | head -1 | grep -o '[0-9]*$')
  [ "${runs:-0}" -ge 4 ] && break
  sleep 0.1
done
[ "${runs:-0}" -ge 4 ] || fail "status counts $runs runs of the 4 changes: $OUT"
pass "status counts the observer's runs"

kill -INT -- "-$PG"
wait_exit "$PG" 120
[ "$RC" = 0 ] || fail "the playground should stop with exit 0, not $RC"
echo PASS
