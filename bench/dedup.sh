#!/usr/bin/env bash
# dedup.sh — the dedup indexer end to end, through the `percolator` CLI as a
# user runs it, side by side with PostgreSQL doing the same work in the same
# run. Prints one JSON document; its headline is the ratio of our documents/s
# to PostgreSQL's.
#
# Corpora (bench/corpus.c writes each once, as JSON lines for `percolator
# load` and as COPY input for PostgreSQL, so both read the same bytes):
#   generated  --docs documents (100,000; a list such as 20000,100000 makes a
#              corpus of each size, the i-th with seed --seed + i) that look
#              like real text: 150..400 words from a Zipf vocabulary of
#              20,000 words, 30 % exact duplicates, 10 % near-duplicates (one
#              line differs), seed --seed (42);
#   real       this machine's text files: every regular file under
#              /usr/share/doc (copyright files, changelogs, READMEs, ...; .gz
#              files decompressed) and /usr/share/common-licenses of at most
#              --real-max-bytes (65,536) that is UTF-8 text, URL = its path;
#   source     this machine's source code, unlike the text above: the C and
#              C++ headers under /usr/include (Debian's -dev packages), the
#              same rules;
#   legacy     the corpus of the earlier figures (40 words from a 34-word
#              list, 30 % exact duplicates), ours only, labelled as such.
#
# What runs, one after the other:
#   postgresql  bench/pg_dedup.sh: PostgreSQL 15 (installed when missing),
#               PL/pgSQL, one transaction per document, from 2 and from 8
#               clients, on each corpus;
#   embedded    `percolator worker` holding a fresh data directory, with
#               the product's defaults (sync on, an observer thread a core, garbage
#               collection every minute; --threads sets the observer
#               threads), and `percolator load` (its default of 8 threads, or
#               --loaders); documents/s from the start of the load until
#               `percolator wait` returns (every notification acknowledged);
#   cluster     two tablets (--replicas copies each, 1: a tablet server of
#               its own for each, not replicated; more: that many servers,
#               each tablet a Raft group) and the oracle on this
#               machine, in one `percolator run` (with --cluster-shape
#               processes, each its own daemon: `percolator tso`,
#               `percolator tablet`), and 1, 2, 4 worker processes (--procs)
#               on every corpus, each
#               started by `percolator playground` with its private ZooKeeper
#               server (Debian's zookeeper package on 127.0.0.1) and stopped
#               with SIGINT, as a user does; its CPU a document (every
#               process, ZooKeeper's included) as a fraction of embedded's;
#   questions   right after each embedded ingest, the worker still serving
#               the store (as a user asks it): `percolator search --all` and
#               `percolator check`, each timed with its CPU, the worker's CPU
#               meanwhile and its peak resident set (pc_bench_rusage); and
#               PostgreSQL's answers to the same questions after its runs
#               (pg_dedup.sh: one SQL query for check, a copy of every
#               posting); the peak resident sets of the worker and of the
#               load too;
#   same        each of our runs' clusters, canonical URLs, members and
#               postings (`clusters`, `search --all`) against PostgreSQL's,
#               line for line;
#   freshness   per canonical document, from the commit of its contents to the
#               commit of its index run (dups HASH indexed naming it), p50/p99,
#               from the raw view: during the unthrottled load of the last
#               generated corpus, and during a steady feed of its first 20,000
#               at --rate documents/s (by default half our embedded rate on it:
#               a feed the observers keep up with, so the figure is the
#               pipeline's delay and not a backlog's);
#   update      one document updated at the end of the last generated embedded run:
#               seconds from its load to its index (load, then wait), and from
#               its contents' commit to its index run's, from the raw view;
#   ceiling     pc_bench_dedup_ceiling on each corpus file: raw LevelDB taking
#               the indexer's cells, synced, with no transaction, no lock and
#               no notification, in one write per document and in one write
#               per stage (load, dedup, index): what this store and disk allow
#               with the cells PostgreSQL writes too (a postings cell per term
#               and document); and the cells ours writes (a postings cell
#               per term for a batch of 512 documents) in the keys ours
#               writes (meta and write record, notifications, acks), in one
#               phase as embedded, in two as across tablets, and as the
#               cluster below commits them (two LevelDBs split at its row),
#               and with --replicas above 1 in that many copies (each write
#               an entry in each server's log, synced, and applied to its
#               copy), each stage in transactions as large as ours can make
#               them (loads of 32 documents, dedup and index runs of 512):
#               the floor of this store's format; ours is reported as a
#               fraction of per stage and of those floors;
#   cpu         each of our runs' CPU milliseconds a document (user + system
#               time from /proc over the ingest) by process: servers (the
#               cluster's tablets and oracle), workers, load and wait; and
#               cpu_bound_documents_s, the rate that cost allows with every
#               core of this machine busy; host_steal_s, the CPU seconds the
#               hypervisor took from this machine's cores during the run (a
#               run with much of it measured a slower machine); "program" is
#               `percolator --version` (the malloc it runs on);
#   leveldb     what LevelDB's background thread did by the end of each of
#               our runs' ingest, from its own log: megabytes flushed from
#               memtables, megabytes written by compactions, seconds busy.
# Usage: bench/dedup.sh BUILD_DIR [--docs N[,N...]] [--seed S] [--threads N]
#          [--loaders N] [--rate R] [--procs 1,2,4] [--replicas R]
#          [--cluster-shape processes|run] [--real-max-bytes B]
#          [--skip-pg] [--skip-cluster] [--skip-real] [--skip-source]
#          [--skip-legacy] [--skip-ceiling]
# Runs as root (PostgreSQL's server runs as the postgres system user).
set -euo pipefail
export LC_ALL=C # sort, join and comm agree on the order
usage="usage: bench/dedup.sh BUILD_DIR [--docs N[,N...]] [--seed S] [--threads N] [--loaders N] [--rate R] [--procs LIST] [--replicas R] [--cluster-shape processes|run] [--real-max-bytes B] [--skip-pg] [--skip-cluster] [--skip-real] [--skip-source] [--skip-legacy] [--skip-ceiling]"
build=${1:?$usage}
shift
docs=100000 seed=42 threads="" loaders="" feed=auto procs=1,2,4 real_max=65536 replicas=1
cluster_shape=run
skip_pg=0 skip_cluster=0 skip_real=0 skip_source=0 skip_legacy=0 skip_ceiling=0
while [ $# -gt 0 ]; do
  case "$1" in
    --docs) docs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --loaders) loaders=$2; shift 2 ;;
    --rate) feed=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --cluster-shape) cluster_shape=$2; shift 2 ;;
    --real-max-bytes) real_max=$2; shift 2 ;;
    --skip-pg) skip_pg=1; shift ;;
    --skip-cluster) skip_cluster=1; shift ;;
    --skip-real) skip_real=1; shift ;;
    --skip-source) skip_source=1; shift ;;
    --skip-legacy) skip_legacy=1; shift ;;
    --skip-ceiling) skip_ceiling=1; shift ;;
    *) echo "dedup.sh: unexpected argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
case "$cluster_shape" in processes | run) ;; *) echo "dedup.sh: --cluster-shape is processes or run, not '$cluster_shape'" >&2; exit 2 ;; esac
case "$replicas" in [1-9]) ;; *) echo "dedup.sh: --replicas is 1..9, not '$replicas'" >&2; exit 2 ;; esac
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
# the workers' settings: the product's defaults unless --threads says otherwise
worker_threads=""
[ -n "$threads" ] && worker_threads="\"threads\": $threads, "
here=$(cd "$(dirname "$0")" && pwd)
cli="$build/apps/cli/percolator"
plugin="$build/apps/dedup/dedup.so"
corpus="$build/bench/pc_bench_corpus"
ceiling="$build/bench/pc_bench_dedup_ceiling"
rusage="$build/bench/pc_bench_rusage"
[ -x "$cli" ] && [ -f "$plugin" ] && [ -x "$corpus" ] && [ -x "$ceiling" ] && [ -x "$rusage" ] ||
  { echo "dedup.sh: build $build first" >&2; exit 1; }
IFS=, read -r -a doclist <<<"$docs"
for n in "${doclist[@]}"; do
  case "$n" in '' | *[!0-9]* | 0) echo "dedup.sh: --docs takes counts >= 1, not '$docs'" >&2; exit 2 ;; esac
done
work=$(mktemp -d /tmp/pc-bench-dedup.XXXXXX)
chmod 755 "$work" # PostgreSQL's server (user postgres) reads nothing here, psql does
pids=()
cleanup() { # (a pid already gone must not stop it: errexit applies here too)
  if [ -n "${PG:-}" ]; then kill -INT "$PG" 2>/dev/null || true; wait "$PG" 2>/dev/null || true; fi
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a - b}'; }
rate() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else printf "null"}'; }
log() { printf 'dedup.sh: %s\n' "$*" >&2; }
# CPU accounting, from /proc (fields after "pid (comm) ": 12 utime, 13 stime,
# 14 cutime, 15 cstime, in clock ticks): ticks PID... is what those processes
# have used so far; kids is what this shell's waited-for children used, which
# takes in a $(...) subshell and everything it waited for
hz=$(getconf CLK_TCK)
cores=$(nproc)
ticks() {
  local p t=0 x
  for p in "$@"; do
    x=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}' || true)
    t=$((t + ${x:-0}))
  done
  echo "$t"
}
kids() { sed 's/^.*) //' "/proc/$$/stat" | awk '{print $14 + $15}'; }
# steal: the ticks the hypervisor has so far run something else on this
# machine's cores while they had work (/proc/stat); a run during which it grew
# by much measured a slower machine than the others
steal() { awk '/^cpu / {print $9}' /proc/stat; }
# busy: the ticks this machine's cores have so far spent running anything
# (user, nice, system, irq, softirq; /proc/stat)
busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
# ms_doc TICKS DOCS: CPU milliseconds a document
ms_doc() { awk -v t="$1" -v n="$2" -v hz="$hz" 'BEGIN {printf "%.2f", t * 1000 / hz / n}'; }
# cpu_json DOCS SERVER_TICKS WORKER_TICKS LOAD_TICKS STEAL_TICKS ZK_TICKS
# BUSY_TICKS SECONDS: the CPU a document, by process, what that cost allows on
# this machine's cores, the seconds of CPU the hypervisor took from them
# meanwhile, and the cores that other programs of this machine kept busy on
# average over the SECONDS of the run (its busy ticks less ours): a run
# beside another program's load measured less than these cores
cpu_json() {
  local all=$(($2 + $3 + $4 + $6))
  printf '"cpu_ms_per_document": {"servers": %s, "workers": %s, "load_and_wait": %s, "zookeeper": %s, "total": %s}, "cpu_bound_documents_s": %s, "host_steal_s": %s, "others_cores": %s' \
    "$(ms_doc "$2" "$1")" "$(ms_doc "$3" "$1")" "$(ms_doc "$4" "$1")" "$(ms_doc "$6" "$1")" "$(ms_doc "$all" "$1")" \
    "$(awk -v t="$all" -v n="$1" -v hz="$hz" -v c="$cores" 'BEGIN {if (t > 0) printf "%.0f", c * n * hz / t; else printf "null"}')" \
    "$(awk -v t="$5" -v hz="$hz" 'BEGIN {printf "%.1f", t / hz}')" \
    "$(awk -v b="$7" -v t="$all" -v s="$8" -v hz="$hz" 'BEGIN {o = s > 0 ? (b - t) / hz / s : 0; printf "%.2f", (o > 0 ? o : 0)}')"
}
# total_ms CPU_JSON: the total CPU milliseconds a document of cpu_json's answer
total_ms() { sed 's/.*"total": \([0-9.]*\).*/\1/' <<<"$1"; }
# peak_mb PID...: the largest peak resident set (VmHWM) of those processes, MB
peak_mb() {
  local p m=0 x
  for p in "$@"; do
    x=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
    [ -n "$x" ] && [ "$x" -gt "$m" ] && m=$x
  done
  awk -v k="$m" 'BEGIN {printf "%.0f", k / 1024}'
}

# ---- corpora ------------------------------------------------------------------
# corpora: keys g<N> (generated, N documents), real, src; name: the JSON's
declare -A name split_row gseed
corpora=()
i=0
for n in "${doclist[@]}"; do
  gseed[g$n]=$((seed + i))
  log "generating $n documents (seed ${gseed[g$n]})"
  "$corpus" generate --docs "$n" --seed "${gseed[g$n]}" --jsonl "$work/g$n.jsonl" --pg "$work/g$n.pg"
  corpora+=("g$n")
  name[g$n]=generated
  split_row[g$n]=$(printf 'doc/%07d' $((n / 2))) # where the cluster below splits its two tablets
  gen=g$n # the last: freshness and the update
  i=$((i + 1))
done
if [ "$skip_real" = 0 ]; then
  log "collecting this machine's text files"
  "$corpus" files --max-bytes "$real_max" --jsonl "$work/real.jsonl" --pg "$work/real.pg" \
    /usr/share/doc /usr/share/common-licenses 2>"$work/real.stats"
  corpora+=(real)
  name[real]=real split_row[real]=usr/share/doc/m
fi
if [ "$skip_source" = 0 ]; then
  log "collecting this machine's source files"
  "$corpus" files --max-bytes "$real_max" --jsonl "$work/src.jsonl" --pg "$work/src.pg" \
    /usr/include 2>"$work/src.stats"
  corpora+=(src)
  name[src]=source split_row[src]=usr/include/m
fi
count() { wc -l <"$work/$1.jsonl" | tr -d ' '; }

# ---- PostgreSQL -------------------------------------------------------------------
declare -A pg_rate pg_json
if [ "$skip_pg" = 0 ]; then
  bash "$here/pg_dedup.sh" install
  for c in "${corpora[@]}"; do
    for k in 2 8; do
      log "postgresql: $c, $k clients"
      pg_json[$c.$k]=$(bash "$here/pg_dedup.sh" run "$work/$c.pg" "$k" "$work/pg-$c-$k")
      pg_rate[$c.$k]=$(sed 's/.*"documents_s": \([0-9.]*\).*/\1/' <<<"${pg_json[$c.$k]}")
    done
  done
fi

# ---- the ceiling: raw LevelDB, the same cells ------------------------------------------
declare -A ceil_one ceil_stage ceil_store ceil_store2 ceil_cluster ceil_cpu
if [ "$skip_ceiling" = 0 ]; then
  for c in "${corpora[@]}"; do
    log "ceiling: $c, raw LevelDB"
    j=$("$ceiling" --jsonl "$work/$c.jsonl" --threads "${loaders:-8}" --dir "$work" \
      --split "${split_row[$c]}" --replicas "$replicas")
    ceil_one[$c]=$(tr -d '\n ' <<<"$j" | sed 's/.*"one_write":{"documents_s":\([0-9.e+]*\).*/\1/')
    ceil_stage[$c]=$(tr -d '\n ' <<<"$j" | sed 's/.*"per_stage":{"documents_s":\([0-9.e+]*\).*/\1/')
    ceil_store[$c]=$(tr -d '\n ' <<<"$j" | sed 's/.*"store_keys":{"documents_s":\([0-9.e+]*\).*/\1/')
    ceil_store2[$c]=$(tr -d '\n ' <<<"$j" | sed 's/.*"store_keys_two_phase":{"documents_s":\([0-9.e+]*\).*/\1/')
    ceil_cluster[$c]=$(tr -d '\n ' <<<"$j" | sed 's/.*"store_keys_cluster":{"documents_s":\([0-9.e+]*\).*/\1/')
    # CPU milliseconds a document of the two floors, from their cpu_s
    ceil_cpu[$c.store_keys_replicated]=null
    for mode in store_keys store_keys_cluster $([ "$replicas" -gt 1 ] && echo store_keys_replicated); do
      fcpu=$(tr -d '\n ' <<<"$j" | sed "s/.*\"$mode\":{[^}]*\"cpu_s\":\([0-9.e+-]*\).*/\1/")
      ceil_cpu[$c.$mode]=$(awk -v c="$fcpu" -v n="$(count "$c")" 'BEGIN {printf "%.2f", 1000 * c / n}')
    done
  done
fi

# ---- ours ---------------------------------------------------------------------------
# embedded DIR: a worker holding DIR (data directory made here); pid in $W
embedded() {
  "$cli" --data "$1" init >/dev/null
  printf '{"data_dir": "%s", "log": {"level": "warn"},\n "workers": {%s"plugins": [{"path": "%s"}]}}\n' \
    "$1" "$worker_threads" "$plugin" >"$1.json"
  "$cli" --config "$1.json" worker 2>"$1.log" &
  W=$!
  pids+=("$W")
  for _ in $(seq 300); do [ -s "$1/serving.json" ] && return 0; sleep 0.1; done
  echo "dedup.sh: the worker did not start: $(cat "$1.log")" >&2
  exit 1
}
stop() { kill -TERM "$1"; wait "$1" || true; }
# A freshly opened oracle starts above the bound it saved, a window (tso.window_ms,
# 3 s) ahead of the clock, and counts logically until the clock passes it: only
# then do the timestamps' milliseconds tell the time, as freshness needs.
clock_caught_up() { sleep 3.5; }

# cluster TAG NPROCS SPLIT: two tablets split at row SPLIT, the oracle and NPROCS
# worker processes, started by `percolator playground` (with its private
# ZooKeeper server: Debian's zookeeper package on 127.0.0.1), as a user starts
# one; client config in $C, the servers' pids the first $nserv of those pushed
# from here on, then the workers'. Shape "run" (the default) runs the oracle
# and both tablets in one `percolator run` (--one-process); shape "processes"
# runs each as its own daemon, as a deployment on several machines does
# (LevelDB gives a process one background thread for all its stores, so
# tablets in one process share it; docs/BENCHMARKS.md has the two shapes side
# by side).
cluster() {
  local d="$work/$1" shape=()
  [ "$cluster_shape" = run ] && shape=(--one-process)
  local extra=""
  [ -n "$threads" ] && extra=", \"workers\": {\"threads\": $threads}"
  printf '{"log": {"level": "warn"}%s}\n' "$extra" >"$d.extra.json"
  # one replica: a tablet server of its own for each tablet; more: that many
  # servers, each tablet a Raft group with a replica on each
  local repl=(--servers 0)
  [ "$replicas" -gt 1 ] && repl=(--servers "$replicas" --replicas "$replicas")
  "$cli" playground --dir "$d" --split "$3" --oracles 1 "${shape[@]}" "${repl[@]}" --workers "$2" \
    --plugin "$plugin" --extra-config "$d.extra.json" --ready-file "$d.pg.json" \
    >"$d.pg.out" 2>"$d.pg.err" &
  PG=$!
  for _ in $(seq 1200); do [ -s "$d.pg.json" ] && break; kill -0 "$PG" 2>/dev/null || break; sleep 0.1; done
  [ -s "$d.pg.json" ] || { echo "dedup.sh: the playground did not start: $(cat "$d.pg.err")" >&2; exit 1; }
  C="$d/cluster.json"
  # "kind" comes before "pid" in each role of the state (sorted keys, one a line)
  local roles
  roles=$(awk -F'"' '/"kind":/ {k = $4} /"pid":/ {gsub(/[^0-9]/, "", $3); print k, $3}' "$d.pg.json")
  nserv=0
  for p in $(awk '$1 == "tso" || $1 == "server" || $1 == "tablet" {print $2}' <<<"$roles"); do
    pids+=("$p")
    nserv=$((nserv + 1))
  done
  for p in $(awk '$1 == "worker" {print $2}' <<<"$roles"); do pids+=("$p"); done
  ZK_PID=$(awk '$1 == "zookeeper" {print $2}' <<<"$roles")
}
cluster_stop() { # Ctrl-C to the playground: it stops its roles in order
  kill -INT "$PG" 2>/dev/null || true
  wait "$PG" 2>/dev/null || true
  PG=
  pids=("${pids[@]:0:$1}") # its roles' pids are gone, and may be reused
}

# ingest WHERE INPUT: seconds from load to wait done (WHERE: --data DIR or
# --config C); the load's own figures (pc_bench_rusage) in $work/load.json
ingest() {
  local where=("$1" "$2") t0 t1
  t0=$(now)
  "$rusage" "$work/load.json" "$cli" "${where[@]}" load ${loaders:+--threads "$loaders"} --max-bytes 8388608 \
    "$3" >/dev/null 2>>"$work/load.err"
  "$cli" "${where[@]}" wait --timeout-s 7200 >/dev/null
  t1=$(now)
  sub "$t1" "$t0"
}
# rss_mb JSON_FILE: the max_rss_kb of a pc_bench_rusage line, in MB
rss_mb() { sed 's/.*"max_rss_kb": \([0-9]*\).*/\1/' "$1" | awk '{printf "%.0f", $1 / 1024}'; }

# question WHAT OUT CMD...: runs one of our verbs against the store the
# embedded worker ($W) serves, timed (pc_bench_rusage), its output to OUT;
# sets Q to its JSON: seconds, its CPU, the worker's CPU meanwhile (the worker
# reads the store for it), its peak resident set, its exit status
question() {
  local what=$1 out=$2 w0 w1
  shift 2
  log "embedded: $what"
  w0=$(ticks "$W")
  "$rusage" "$work/q.json" "$@" >"$out" 2>>"$work/question.err" || true
  w1=$(ticks "$W")
  Q=$(sed "s/}\$/, \"worker_cpu_s\": $(awk -v t=$((w1 - w0)) -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}')}/" "$work/q.json")
}

# dump WHERE PREFIX [ALL]: what we computed, as pg_dedup.sh writes PostgreSQL's
# (ALL: a file with the output of `search --all` already)
dump() {
  local where=("$1" "$2")
  "$cli" "${where[@]}" clusters >"$3.raw"
  awk -F'\t' '{print $1 "\t" $3}' "$3.raw" | sort >"$3.clusters"
  awk -F'\t' '{for (i = 4; i <= NF; i++) print $1 "\t" $i}' "$3.raw" | sort >"$3.members"
  if [ -n "${4:-}" ]; then cut -f1,2 "$4" | sort >"$3.postings"
  else "$cli" "${where[@]}" search --all | cut -f1,2 | sort >"$3.postings"; fi
  rm -f "$3.raw"
}
# same A B: "true" when A.{clusters,members,postings} equal B's, else the
# count of lines that differ; "null" without B
same() {
  [ -f "$2.postings" ] || { printf 'null'; return; }
  local n=0 x
  for x in clusters members postings; do
    n=$((n + $(comm -3 "$1.$x" "$2.$x" | wc -l)))
  done
  [ "$n" = 0 ] && printf 'true' || printf '%d' "$n"
}

# lsm_json STORE_DIR...: what LevelDB's own log (STORE_DIR/LOG) says its
# background thread did: megabytes flushed from memtables, megabytes written
# by compactions, and the seconds it was busy with either (one thread a
# process serves every LevelDB the process opens)
lsm_json() {
  local d
  for d in "$@"; do cat "$d/LOG" 2>/dev/null || true; echo "-- end"; done | awk '
    function sec(s) { return substr(s, 12, 2) * 3600 + substr(s, 15, 2) * 60 + substr(s, 18) }
    function up(s) { if (depth++ == 0) from = sec(s) }
    function down(s) { if (depth > 0 && --depth == 0) { d = sec(s) - from; busy += d < 0 ? d + 86400 : d } }
    $1 == "--" { depth = 0; next }
    $3 == "Level-0" && $6 == "started" { up($1); next }
    $3 == "Level-0" && $7 == "bytes" && $8 == "OK" { flushed += $6; down($1); next }
    $3 == "Compacting" { up($1); next }
    $3 == "Compacted" && $NF == "bytes" { compacted += $(NF - 1); down($1); next }
    END { printf "\"leveldb\": {\"flushed_mb\": %.0f, \"compaction_written_mb\": %.0f, \"background_busy_s\": %.1f}", flushed / 1048576, compacted / 1048576, busy }'
}

# pct FILE: "count p50 p99" of the sorted numbers in FILE
pct() {
  local n
  n=$(wc -l <"$1")
  printf '%s %s %s\n' "$n" \
    "$(awk -v n="$n" 'NR == int(n * 0.50) + 1 {print; exit}' "$1")" \
    "$(awk -v n="$n" 'NR == int(n * 0.99) + 1 {print; exit}' "$1")"
}
# freshness DIR: "indexed p50 p99" (ms): per canonical document, its contents'
# commit -> the first commit of dups HASH indexed naming it, from the raw view
# of DIR, read in row ranges (a raw reply is bounded)
freshness() {
  local d=$1 i h n
  for i in 0 1 2 3 4 5 6 7 8 9; do
    "$cli" --data "$d" scan --raw docs --start "doc/00$i" --end "doc/00$i~" --json 2>/dev/null || true
  done | { grep '"kind":"write"' || true; } | { grep '"column":"doc:contents"' || true; } |
    sed 's/.*"row":"\([^"]*\)".*"ts":\([0-9]*\).*/\1 \2/' | sort -k1,1 -k2,2n |
    awk '!seen[$1]++' >"$work/docs.ts"
  for h in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do # dups rows are hex hashes: 16 ranges
    n=$(printf '%s' "0123456789abcdefg" | sed "s/.*$h\(.\).*/\1/")
    "$cli" --data "$d" scan --raw dups --start "$h" --end "$n" --json 2>/dev/null || true
  done | { grep '"column":"indexed","kind":"write".*"write_kind":"put"' || true; } |
    sed 's/.*"ts":\([0-9]*\).*"value":"\([^"]*\)".*/\2 \1/' | sort -k1,1 -k2,2n |
    awk '!seen[$1]++' >"$work/index.ts"
  { join "$work/docs.ts" "$work/index.ts" || true; } |
    awk '{d = int($3 / 262144) - int($2 / 262144); print (d < 0 ? 0 : d)}' | sort -n >"$work/ifresh"
  pct "$work/ifresh"
}

# update_commit_ms DIR URL: ms from the commit of URL's newest contents to
# the commit of the index run of its cluster (dups HASH indexed naming URL),
# from the raw view; "null" when either is missing
update_commit_ms() {
  local d=$1 u=$2 c h i
  c=$("$cli" --data "$d" scan --raw docs --start "$u" --end "$u~" --json 2>/dev/null |
    grep '"column":"doc:contents","kind":"write"' | sed 's/.*"ts":\([0-9]*\).*/\1/' | sort -n | tail -1)
  h=$("$cli" --data "$d" get docs "$u" doc:hash 2>/dev/null || true)
  [ -n "$c" ] && [ -n "$h" ] || { printf 'null'; return; }
  i=$("$cli" --data "$d" scan --raw dups --start "$h" --end "$h~" --json 2>/dev/null |
    grep '"column":"indexed","kind":"write".*"write_kind":"put"' | grep -F "\"value\":\"$u\"" |
    sed 's/.*"ts":\([0-9]*\).*/\1/' | sort -n | tail -1)
  [ -n "$i" ] || { printf 'null'; return; }
  awk -v a="$i" -v b="$c" 'BEGIN {printf "%d", int(a / 262144) - int(b / 262144)}'
}

declare -A ours_s ours_same ours_cpu ours_ms ours_mem ours_q
# embedded runs
for c in "${corpora[@]}"; do
  n=$(count "$c")
  log "embedded: $c ($n documents)"
  embedded "$work/e-$c"
  clock_caught_up
  w0=$(ticks "$W") k0=$(kids) h0=$(steal) b0=$(busy)
  ours_s[$c]=$(ingest --data "$work/e-$c" "$work/$c.jsonl")
  ours_cpu[$c]=$(cpu_json "$n" 0 $(($(ticks "$W") - w0)) $(($(kids) - k0)) $(($(steal) - h0)) 0 \
    $(($(busy) - b0)) "${ours_s[$c]}")
  ours_ms[$c]=$(total_ms "${ours_cpu[$c]}")
  ours_cpu[$c]+=", $(lsm_json "$work/e-$c/store")"
  ours_mem[$c]="\"memory_mb\": {\"worker_peak\": $(peak_mb "$W"), \"load_peak\": $(rss_mb "$work/load.json")}"
  # the questions a user asks of what the observers keep, the worker serving
  question "search --all ($c)" "$work/all-$c" "$cli" --data "$work/e-$c" search --all
  ours_q[$c]="\"search_all\": $Q"
  question "check ($c)" "$work/check-$c" "$cli" --data "$work/e-$c" check
  ours_q[$c]+=", \"check\": ${Q%\}}, \"differences\": $(wc -l <"$work/check-$c" | tr -d ' ')}"
  dump --data "$work/e-$c" "$work/ours-$c" "$work/all-$c"
  rm -f "$work/all-$c"
  ours_same[$c]=$(same "$work/ours-$c" "$work/pg-$c-2")
  if [ "$c" = "$gen" ]; then
    read -r ifn ip50 ip99 < <(freshness "$work/e-$c")
    t0=$(now)
    printf '{"url": "doc/0000007", "contents": "an updated document %s"}\n' "$RANDOM" >"$work/upd.jsonl"
    "$cli" --data "$work/e-$c" load "$work/upd.jsonl" >/dev/null
    "$cli" --data "$work/e-$c" wait --timeout-s 600 >/dev/null
    upd=$(sub "$(now)" "$t0")
    upd_ms=$(update_commit_ms "$work/e-$c" doc/0000007)
  fi
  stop "$W"
  rm -rf "$work/e-$c"
done
pg_same_8=()
for c in "${corpora[@]}"; do pg_same_8+=("$(same "$work/pg-$c-8" "$work/pg-$c-2")"); done

# a steady feed below the observers' throughput
[ "$feed" = auto ] && feed=$(awk -v a="$(count "$gen")" -v b="${ours_s[$gen]}" 'BEGIN {r = int(a / b / 2); print (r < 1 ? 1 : r)}')
head -n 20000 "$work/$gen.jsonl" >"$work/feed.jsonl"
log "embedded: steady feed of $feed documents/s"
embedded "$work/e-feed"
clock_caught_up
fw0=$(ticks "$W") ft0=$(now)
"$cli" --data "$work/e-feed" load --rate "$feed" "$work/feed.jsonl" >/dev/null 2>>"$work/load.err"
ft1=$(now)
"$cli" --data "$work/e-feed" wait --timeout-s 3000 >/dev/null
fw1=$(ticks "$W")
# the rate the loader reached (a busy machine may not give it the one asked
# for), and the worker's CPU a document meanwhile (small runs cost more each)
feed_reached=$(rate "$(count feed)" "$(sub "$ft1" "$ft0")")
feed_cpu_ms=$(awk -v t="$((fw1 - fw0))" -v hz="$(getconf CLK_TCK)" -v n="$(count feed)" 'BEGIN {printf "%.2f", t * 1000 / hz / n}')
read -r ffn fp50 fp99 < <(freshness "$work/e-feed")
stop "$W"
rm -rf "$work/e-feed"

legacy_line=""
if [ "$skip_legacy" = 0 ]; then
  ldocs=${doclist[${#doclist[@]} - 1]}
  awk -v n="$ldocs" 'BEGIN {
    srand(42); split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega license copyright permission granted software free", w, " ")
    for (i = 0; i < n; i++) {
      if (i > 10 && rand() < 0.3) { c = body[int(rand() * i)] }
      else { c = ""; for (k = 0; k < 40; k++) c = c w[int(rand() * 34) + 1] " "; c = c i }
      body[i] = c
      printf "{\"url\": \"doc/%07d\", \"contents\": \"%s\"}\n", i, c
    }
  }' >"$work/legacy.jsonl"
  log "embedded: legacy corpus"
  embedded "$work/e-legacy"
  s=$(ingest --data "$work/e-legacy" "$work/legacy.jsonl")
  stop "$W"
  rm -rf "$work/e-legacy"
  legacy_line=$(printf '{"corpus": "legacy (40 words from a 34-word list; the figure of record before)", "documents": %d, "mode": "embedded", "seconds": %s, "documents_s": %s}' \
    "$ldocs" "$s" "$(rate "$ldocs" "$s")")
fi

# cluster_run KEY NPROCS: the cluster on corpus KEY with NPROCS worker processes
cluster_run() {
  local c=$1 k=$2 n first s cpu tag
  n=$(count "$c")
  tag="c-$c-$k"
  log "cluster: $c, $k worker processes"
  first=${#pids[@]}
  cluster "$tag" "$k" "${split_row[$c]}"
  local srv=("${pids[@]:$first:$nserv}") wrk=("${pids[@]:$((first + nserv))}")
  r0=$(ticks "${srv[@]}") w0=$(ticks "${wrk[@]}") k0=$(kids) h0=$(steal) z0=$(ticks "$ZK_PID")
  b0=$(busy)
  s=$(ingest --config "$C" "$work/$c.jsonl")
  cpu=$(cpu_json "$n" $(($(ticks "${srv[@]}") - r0)) $(($(ticks "${wrk[@]}") - w0)) \
    $(($(kids) - k0)) $(($(steal) - h0)) $(($(ticks "$ZK_PID") - z0)) $(($(busy) - b0)) "$s")
  cpu+=", \"cpu_of_embedded\": $(ratio "$(total_ms "$cpu")" "${ours_ms[$c]:-0}")"
  cpu+=", \"memory_mb\": {\"servers_peak\": $(peak_mb "${srv[@]}"), \"worker_peak\": $(peak_mb "${wrk[@]}"), \"load_peak\": $(rss_mb "$work/load.json")}"
  cpu+=", $(lsm_json "$work/$tag"/data/tablet-t{1,2}/store)"
  dump --config "$C" "$work/cl-$c-$k"
  cluster_lines+=("$(printf '{"corpus": "%s", "documents": %d, "worker_processes": %d, "tablets": 2, "replicas": %d, "shape": "%s", "seconds": %s, "documents_s": %s, "of_embedded": %s, "same_as_postgresql": %s, %s}' \
    "${name[$c]}" "$n" "$k" "$replicas" "$cluster_shape" "$s" "$(rate "$n" "$s")" \
    "$(ratio "$(rate "$n" "$s")" "$(rate "$n" "${ours_s[$c]}")")" \
    "$(same "$work/cl-$c-$k" "$work/pg-$c-2")" "$cpu")")
  cluster_stop "$first"
  rm -rf "${work:?}/$tag"
}
cluster_lines=()
if [ "$skip_cluster" = 0 ]; then
  IFS=, read -r -a plist <<<"$procs"
  for c in "${corpora[@]}"; do
    for k in "${plist[@]}"; do cluster_run "$c" "$k"; done
  done
fi

# ---- the answer ------------------------------------------------------------------------
join_lines() { local IFS=$'\n'; local s="$*"; printf '%s' "${s//$'\n'/,$'\n'    }"; }
headline=() ingest_lines=() pg_lines=() ceiling_lines=()
i=0
for c in "${corpora[@]}"; do
  n=$(count "$c")
  r=$(rate "$n" "${ours_s[$c]}")
  nm=${name[$c]}
  ingest_lines+=("$(printf '{"corpus": "%s", "documents": %d, "mode": "embedded", "worker_processes": 1, "seconds": %s, "documents_s": %s, "same_as_postgresql": %s, %s, %s, %s}' \
    "$nm" "$n" "${ours_s[$c]}" "$r" "${ours_same[$c]}" "${ours_cpu[$c]}" "${ours_mem[$c]}" "${ours_q[$c]}")")
  if [ "$skip_pg" = 0 ]; then
    headline+=("$(printf '{"corpus": "%s", "documents": %d, "embedded_documents_s": %s, "postgresql_2_clients_documents_s": %s, "ratio_vs_2_clients": %s, "postgresql_8_clients_documents_s": %s, "ratio_vs_8_clients": %s}' \
      "$nm" "$n" "$r" "${pg_rate[$c.2]}" "$(ratio "$r" "${pg_rate[$c.2]}")" "${pg_rate[$c.8]}" "$(ratio "$r" "${pg_rate[$c.8]}")")")
    pg_lines+=("$(sed "s/^{/{\"corpus\": \"$nm\", \"same_as_2_clients\": ${pg_same_8[$i]}, /" <<<"${pg_json[$c.8]}")")
    pg_lines+=("$(sed "s/^{/{\"corpus\": \"$nm\", /" <<<"${pg_json[$c.2]}")")
  fi
  if [ "$skip_ceiling" = 0 ]; then
    ceiling_lines+=("$(printf '{"corpus": "%s", "documents": %d, "raw_one_write_documents_s": %s, "raw_per_stage_documents_s": %s, "ours_of_per_stage": %s, "store_keys_documents_s": %s, "store_keys_cpu_ms_per_document": %s, "ours_of_store_keys": %s, "store_keys_two_phase_documents_s": %s, "store_keys_cluster_documents_s": %s, "store_keys_cluster_cpu_ms_per_document": %s, "cluster_floor_of_embedded_floor": %s, "store_keys_replicated_cpu_ms_per_document": %s}' \
      "$nm" "$n" "${ceil_one[$c]}" "${ceil_stage[$c]}" "$(ratio "$r" "${ceil_stage[$c]}")" \
      "${ceil_store[$c]}" "${ceil_cpu[$c.store_keys]}" "$(ratio "$r" "${ceil_store[$c]}")" \
      "${ceil_store2[$c]}" "${ceil_cluster[$c]}" "${ceil_cpu[$c.store_keys_cluster]}" \
      "$(ratio "${ceil_cluster[$c]}" "${ceil_store[$c]}")" "${ceil_cpu[$c.store_keys_replicated]}")")
  fi
  i=$((i + 1))
done
[ -n "$legacy_line" ] && ingest_lines+=("$legacy_line")
real_stats=$([ -f "$work/real.stats" ] && sed 's/"/\\"/g' "$work/real.stats" | tr '\n' ' ' || true)
src_stats=$([ -f "$work/src.stats" ] && sed 's/"/\\"/g' "$work/src.stats" | tr '\n' ' ' || true)
gen_json=()
for c in "${corpora[@]}"; do
  [ "${name[$c]}" = generated ] || continue
  gen_json+=("$(printf '{"documents": %d, "seed": %d, "words": "150..400, Zipf over 20000", "exact_duplicates": 0.3, "near_duplicates": 0.1}' "$(count "$c")" "${gseed[$c]}")")
done
cat <<JSON
{
  "benchmark": "dedup",
  "headline": [
    $(join_lines "${headline[@]}")
  ],
  "program": "$("$cli" --version)",
  "threads_per_worker": ${threads:-null},
  "loader_threads": ${loaders:-null},
  "settings": "${threads:+--threads $threads }${loaders:+--loaders $loaders}(null: the product's default: an observer thread a core, 8 loaders; no other setting is changed)",
  "corpora": {"generated": [$(join_lines "${gen_json[@]}")],
              "real": "$real_stats", "source": "$src_stats"},
  "ours": [
    $(join_lines "${ingest_lines[@]}")
  ],
  "ceiling": [
    $(join_lines "${ceiling_lines[@]}")
  ],
  "cluster": [
    $(join_lines "${cluster_lines[@]}")
  ],
  "postgresql": [
    $(join_lines "${pg_lines[@]}")
  ],
  "freshness_ms": [
    {"load": "unthrottled", "indexed_documents": $ifn, "p50": ${ip50:-null}, "p99": ${ip99:-null}},
    {"load": "steady, $feed documents/s asked", "documents_s_reached": $feed_reached, "worker_cpu_ms_per_document": $feed_cpu_ms, "indexed_documents": $ffn, "p50": ${fp50:-null}, "p99": ${fp99:-null}}
  ],
  "freshness_what": "per canonical document of the last generated corpus ($(count "$gen") documents), embedded: its contents' commit to the commit of its index run",
  "update_s": {"documents": $(count "$gen"), "seconds_from_load_to_indexed": $upd, "what": "wall time of the load and wait commands (two processes)"},
  "update_commit_to_index_ms": $upd_ms,
  "loadavg_at_end": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "uptime_at_end": "$(uptime)",
  "goal": "embedded at least 5x PostgreSQL on every corpus, at 20,000 and 100,000 generated documents; check and search --all at 100,000 under 10 s and 300 MB each; cluster CPU a document (every process) at most 1.3x embedded's; freshness p99 under 250 ms at half the embedded rate; one update under 0.1 s"
}
JSON
