#!/usr/bin/env bash
# pg_dedup.sh — PostgreSQL 15 running the dedup indexer (bench/pg_dedup.sql:
# one PL/pgSQL transaction per document) over a corpus, as the baseline of
# bench/dedup.sh. Prints one JSON line.
#
#   bench/pg_dedup.sh install
#       installs Debian's postgresql-15 when it is missing (apt-get, as root)
#   bench/pg_dedup.sh run CORPUS.pgcopy CLIENTS OUT
#       CORPUS.pgcopy: COPY text lines "URL TAB \\x<hex contents>"
#       (pc_bench_corpus --pg). Starts a private server (initdb in a fresh
#       temporary folder, owned by the postgres system user; encoding
#       SQL_ASCII, C collation; listening only on a Unix socket in that
#       folder; fsync and synchronous_commit on, as PostgreSQL ships),
#       stages the corpus (not timed), then times pgbench running
#       update_document once per document, in corpus order, from CLIENTS
#       connections; then times the questions `percolator check` and
#       `search --all` answer: pg_dedup_check.sql (one query recomputing the
#       clusters and postings from the documents, counting the rows that
#       differ) and a copy of every posting to a file. Writes what it
#       computed, sorted bytewise, for
#       bench/dedup.sh to compare: OUT.clusters (HASH TAB CANONICAL),
#       OUT.members (HASH TAB URL), OUT.postings (TERM TAB URL). Stops the
#       server by its pid and removes the folder, also on failure.
# Runs as root (the server itself runs as the postgres system user).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
bin=/usr/lib/postgresql/15/bin

install() {
  [ -x "$bin/postgres" ] && [ -x "$bin/pgbench" ] && return 0
  [ "$(id -u)" -eq 0 ] || { echo "pg_dedup.sh: installing postgresql-15 needs root" >&2; exit 1; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
}

run() {
  local corpus=$1 clients=$2 out=$3
  [ -r "$corpus" ] || { echo "pg_dedup.sh: cannot read $corpus" >&2; exit 1; }
  case "$clients" in '' | *[!0-9]* | 0) echo "pg_dedup.sh: CLIENTS must be a count >= 1" >&2; exit 2 ;; esac
  install
  [ "$(id -u)" -eq 0 ] || { echo "pg_dedup.sh: run as root (the server runs as user postgres)" >&2; exit 1; }
  id postgres >/dev/null 2>&1 || { echo "pg_dedup.sh: no postgres system user" >&2; exit 1; }
  dir=$(mktemp -d /tmp/pc-bench-pg.XXXXXX) # (global: the EXIT trap reads dir and pid)
  pid=""
  chown postgres "$dir"
  stop() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -INT "$pid" 2>/dev/null || true # fast shutdown
      for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
  }
  trap stop EXIT
  su postgres -s /bin/sh -c "$bin/initdb -D '$dir/data' -A trust -E SQL_ASCII --locale=C >'$dir/initdb.log' 2>&1" ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  su postgres -s /bin/sh -c "$bin/pg_ctl -D '$dir/data' -l '$dir/log' -w -t 120 start \
    -o \"-c listen_addresses='' -k '$dir' -p 5432 -c shared_buffers=1GB -c max_wal_size=4GB \
        -c max_connections=$((clients + 10))\"" >/dev/null ||
    { cat "$dir/log" >&2; exit 1; }
  pid=$(head -n 1 "$dir/data/postmaster.pid")
  local psql=(psql -h "$dir" -p 5432 -U postgres -d postgres -v ON_ERROR_STOP=1 -q -X)
  "${psql[@]}" -f "$here/pg_dedup.sql" >/dev/null
  "${psql[@]}" -c "\\copy staging(url, contents) FROM '$corpus'" >/dev/null
  "${psql[@]}" -c "VACUUM ANALYZE" >/dev/null
  local n per t0 t1
  n=$("${psql[@]}" -tA -c "SELECT count(*) FROM staging")
  per=$(((n + clients - 1) / clients))
  printf '%s\n' 'SELECT update_document(s.url, s.contents) FROM staging s WHERE s.id = (SELECT nextval($$q$$));' >"$dir/tx.sql"
  local c0 c1
  c0=$(server_cpu)
  t0=$(date +%s.%N)
  "$bin/pgbench" -h "$dir" -p 5432 -U postgres -n -c "$clients" -j "$clients" -t "$per" \
    -f "$dir/tx.sql" postgres >"$dir/pgbench.out" 2>&1 || { cat "$dir/pgbench.out" >&2; exit 1; }
  t1=$(date +%s.%N)
  c1=$(server_cpu)
  # the questions `percolator check` and `search --all` answer, timed: the
  # check as one query (pg_dedup_check.sql), every posting out to a file
  local k0 k1 k2 kd p0 p1
  k0=$(date +%s.%N)
  kd=$("${psql[@]}" -tA -f "$here/pg_dedup_check.sql")
  k1=$(date +%s.%N)
  k2=$(server_cpu)
  p0=$(date +%s.%N)
  "${psql[@]}" -c "\\copy (SELECT term, url FROM postings) TO '$out.postings.unsorted'" >/dev/null
  p1=$(date +%s.%N)
  "${psql[@]}" -tA -F $'\t' -c "SELECT encode(hash, 'hex'), canonical FROM dups" | sort >"$out.clusters"
  "${psql[@]}" -tA -F $'\t' -c "SELECT encode(hash, 'hex'), url FROM members" | sort >"$out.members"
  sort "$out.postings.unsorted" >"$out.postings"
  rm -f "$out.postings.unsorted"
  local clusters postings
  clusters=$(wc -l <"$out.clusters")
  postings=$(wc -l <"$out.postings")
  awk -v n="$n" -v a="$t0" -v b="$t1" -v k="$clients" -v c="$clusters" -v p="$postings" \
      -v u="$c0" -v v="$c1" -v ka="$k0" -v kb="$k1" -v kc="$k2" -v kd="$kd" -v pa="$p0" \
      -v pb="$p1" 'BEGIN {
    s = b - a
    printf "{\"system\": \"postgresql-15\", \"clients\": %d, \"documents\": %d, \"seconds\": %.3f, \"documents_s\": %.1f, \"server_cpu_s\": %.2f, \"cpu_ms_per_document\": %.3f, \"clusters\": %d, \"postings\": %d, ", k, n, s, n / s, v - u, (v - u) * 1000 / n, c, p
    printf "\"check\": {\"seconds\": %.2f, \"server_cpu_s\": %.2f, \"differences\": %d}, \"all_postings\": {\"seconds\": %.2f}}\n", kb - ka, kc - v, kd, pb - pa }'
}

# The CPU seconds the server has used: every process of the postgres user
# now (the postmaster and its background processes) plus what the
# postmaster's exited children (the backends of finished connections) used
# (fields utime, stime, cutime, cstime of /proc/PID/stat, after "pid (comm)").
server_cpu() {
  local tick
  tick=$(getconf CLK_TCK)
  { for p in $(pgrep -P "$pid"; echo "$pid"); do
      if [ "$p" = "$pid" ]; then echo "PM $(sed 's/^[0-9]* (.*) //' "/proc/$p/stat" 2>/dev/null)"
      else echo "P $(sed 's/^[0-9]* (.*) //' "/proc/$p/stat" 2>/dev/null)"; fi
    done; } | awk -v t="$tick" '
      $1 == "PM" { cpu += $13 + $14 + $15 + $16 }
      $1 == "P" { cpu += $13 + $14 }
      END { printf "%.2f", cpu / t }'
}

case "${1:-}" in
  install) install ;;
  run) [ $# -eq 4 ] || { echo "usage: pg_dedup.sh run CORPUS.pgcopy CLIENTS OUT" >&2; exit 2; }
       run "$2" "$3" "$4" ;;
  *) echo "usage: pg_dedup.sh install | run CORPUS.pgcopy CLIENTS OUT" >&2; exit 2 ;;
esac
