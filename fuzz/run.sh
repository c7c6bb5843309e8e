#!/usr/bin/env bash
# fuzz/run.sh — builds the libFuzzer targets of fuzz/ with clang
# (-fsanitize=fuzzer,address,undefined) and runs them for a bounded time.
#
#   fuzz/run.sh TARGET|all [SECONDS]     run for SECONDS each (default 60)
#   fuzz/run.sh TARGET|all --runs N      run N executions each
#   fuzz/run.sh TARGET --repro FILE...   run the target once on each FILE
#   fuzz/run.sh --list                   the targets
#
# TARGET is a fuzz_NAME.c without its prefix (keys, config, tablet, ...).
# Each run starts from the committed seeds (fuzz/corpus/TARGET) and keeps
# what it finds in $BUILD/corpus/TARGET, so later runs resume from there; a
# crash leaves its input in $BUILD/artifacts/TARGET/ and the run fails. Reproduce
# it with --repro, then add it as a regression test (docs/TESTING.md).
# Environment: PC_FUZZ_BUILD (default build-fuzz), FUZZ_ARGS (more libFuzzer
# options), CC/CXX (default clang/clang++).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${PC_FUZZ_BUILD:-build-fuzz}

targets() { ls fuzz/fuzz_*.c | sed 's|fuzz/fuzz_||; s|\.c$||' | grep -v '^util$'; }

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 1 ] || usage
if [ "$1" = "--list" ]; then targets; exit 0; fi
what=$1; shift
if [ "$what" = all ]; then
  names=$(targets)
else
  targets | grep -qx "$what" || { echo "fuzz/run.sh: no target '$what' (see --list)" >&2; exit 2; }
  names=$what
fi

mode=time; seconds=60; runs=0; files=()
case "${1:-}" in
  --runs) [ $# -ge 2 ] || usage; mode=runs; runs=$2 ;;
  --repro) shift; mode=repro; files=("$@"); [ ${#files[@]} -gt 0 ] || usage ;;
  "") ;;
  *) [[ "$1" =~ ^[0-9]+$ ]] || usage; seconds=$1 ;;
esac

export CC=${CC:-clang} CXX=${CXX:-clang++}
cmake -S . -B "$build" -DPC_FUZZ=ON -DPC_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DBUILD_TESTING=OFF >/dev/null
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -le 2 ] || jobs=2
build_targets=()
for n in $names; do build_targets+=("--target" "fuzz_$n"); done
cmake --build "$build" -j "$jobs" "${build_targets[@]}" >/dev/null

# stores, oracle files and the like go to a scratch directory, in memory when we can
base=/tmp
[ -w /dev/shm ] && base=/dev/shm
scratch=$(mktemp -d "$base/pc-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# what a target needs besides the common options
target_args() {
  case $1 in
    # its store keeps memory from one input to the next: libFuzzer would run
    # LeakSanitizer after every input; the target runs it after each store
    tablet_store) echo "-detect_leaks=0" ;;
  esac
}

failed=()
for n in $names; do
  bin=$root/$build/fuzz/fuzz_$n
  if [ "$mode" = repro ]; then
    "$bin" -runs=1 "${files[@]}" || failed+=("$n")
    continue
  fi
  corpus=$root/$build/corpus/$n
  artifacts=$root/$build/artifacts/$n
  mkdir -p "$corpus" "$artifacts" "$root/$build/logs"
  limit=(-max_total_time="$seconds")
  [ "$mode" = runs ] && limit=(-runs="$runs")
  log=$root/$build/logs/$n.log
  echo "fuzz $n: ${limit[*]} (log: $log)"
  # shellcheck disable=SC2086
  if "$bin" "${limit[@]}" -print_final_stats=1 -timeout=30 -rss_limit_mb=2560 \
       -artifact_prefix="$artifacts/" $(target_args "$n") ${FUZZ_ARGS:-} \
       "$corpus" "$root/fuzz/corpus/$n" >"$log" 2>&1; then
    { grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1
      grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log"
    } | sed 's/^/  /' || true
  else
    failed+=("$n")
    echo "fuzz $n: FAILED; the end of its log:" >&2
    grep -vE '^#[0-9]+[[:space:]]' "$log" | tail -40 >&2 || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
