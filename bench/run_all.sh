#!/bin/sh
# run_all.sh — runs the benchmark matrix of docs/BENCHMARKS.md and leaves one
# JSON file per configuration in OUT (default ./bench-results).
#   usage: bench/run_all.sh BUILD_DIR [OUT]
# BUILD_DIR is a Release build, e.g. build-bench from
#   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench -j2
set -eu
build=${1:?usage: bench/run_all.sh BUILD_DIR [OUT]}
out=${2:-bench-results}
mkdir -p "$out"
fig8="$build/bench/pc_bench_fig8"
tso="$build/bench/pc_bench_tso"
layout="$build/bench/pc_bench_layout"

"$tso" --threads 1,8,64 --seconds 2 > "$out/tso.json"
# what the store's key and record shapes cost LevelDB alone, at both value sizes
"$layout" --rounds 5 > "$out/layout-v100.json"
"$layout" --rounds 5 --value-size 4096 --keys 20000 --reads 100000 > "$out/layout-v4096.json"
for t in 1 2; do
  # sync 0: 100-byte values, then 4 KiB values (fewer ops: 4 KiB writes fill the disk fast)
  "$fig8" --sync 0 --value-size 100 --threads $t --ops 200000 --keys 100000 --rounds 5 \
    > "$out/fig8-sync0-v100-t$t.json"
  "$fig8" --sync 0 --value-size 4096 --threads $t --ops 20000 --read-ops 100000 --keys 20000 \
    --rounds 5 > "$out/fig8-sync0-v4096-t$t.json"
  # sync 1: every write waits for an fsync; reads never sync, so they keep their count
  "$fig8" --sync 1 --value-size 100 --threads $t --ops 3000 --read-ops 200000 --keys 100000 \
    --rounds 5 > "$out/fig8-sync1-v100-t$t.json"
  "$fig8" --sync 1 --value-size 4096 --threads $t --ops 2000 --read-ops 100000 --keys 20000 \
    --rounds 5 > "$out/fig8-sync1-v4096-t$t.json"
done
