#!/usr/bin/env bash
# test_dedup_rows.sh PERCOLATOR DEDUP_PLUGIN SMALL BIG — updating one document
# of the dedup application (apps/dedup/) writes O(1) cells whatever the size
# of the corpus. For N = SMALL and N = BIG, on an embedded store served by
# `percolator worker` running the plugin: a generated corpus of N documents
# (u/0000000 ..., in blocks of ten of which the last three duplicate the
# first: 30 % exact duplicates) is loaded with one `load` and indexed (`wait`);
# then u/0000001, a singleton, is given the contents of u/0000000, the
# canonical of a four-member cluster: its own cluster disappears (its terms
# leave the index: one chunk cell in idxbucket for each of their buckets)
# and it joins the other, whose canonical stays. The cells written by that
# update and its observers are the commit records (put or delete) of tables
# docs, dups, idx (written before buckets: nothing now), idxbucket and idxdir whose ts
# is above a timestamp taken just before it (`scan --raw --since TS --json`).
# The test asserts the counts (cells and rows) are the same at both sizes and
# below a small bound, and that `check` finds no difference.
# Every CLI call runs under `timeout`; a trap kills what was started here.
set -u
CLI=${1:?usage: test_dedup_rows.sh PERCOLATOR DEDUP_PLUGIN SMALL BIG}
PLUGIN=${2:?usage: test_dedup_rows.sh PERCOLATOR DEDUP_PLUGIN SMALL BIG}
SMALL=${3:?usage: test_dedup_rows.sh PERCOLATOR DEDUP_PLUGIN SMALL BIG}
BIG=${PC_DEDUP_ROWS_BIG:-${4:?usage: test_dedup_rows.sh PERCOLATOR DEDUP_PLUGIN SMALL BIG}}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN" >&2; exit 1; }
export LC_ALL=C
# the bound: a cluster's 5 terms removed from the index, a member added to another,
# the document's two cells, four dups cells per cluster, an index run's
# directory, with room to spare
BOUND=64

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-dedup-rows-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

# measure N: prints "CELLS ROWS" of the update on a corpus of N documents
measure() {
  local n=$1 D="$WORK/data-$1" wp t0
  run_cli 10 --data "$D" init
  [ "$RC" = 0 ] || fail "init: $(cat "$WORK/last.err")"
  # without fsync: what the update writes does not depend on it, and the
  # load of the big corpus (a transaction a document) is most of the test
  printf '{"data_dir": "%s", "store": {"sync": false}, "workers": {"threads": 2, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
    "$D" "$PLUGIN" >"$WORK/worker-$n.json"
  "$CLI" --config "$WORK/worker-$n.json" worker 2>"$WORK/worker-$n.log" &
  wp=$!
  PIDS+=("$wp")
  wait_file "$D/serving.json" "$wp"
  awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) { j = i % 10; k = j >= 7 ? i - j : i
      printf "{\"url\": \"u/%07d\", \"contents\": \"document %d alpha beta gamma\"}\n", i, k } }' \
    >"$WORK/corpus-$n.jsonl"
  run_cli 3000 --data "$D" load --threads 4 "$WORK/corpus-$n.jsonl"
  [[ "$RC" = 0 && "$OUT" == "loaded $n documents in "*"failed 0" ]] || fail "load of $n: $OUT $(cat "$WORK/last.err")"
  run_cli 3000 --data "$D" wait --timeout-s 2900
  [ "$RC" = 0 ] || fail "wait after loading $n exited $RC: $(cat "$WORK/last.err")"
  run_cli 20 --data "$D" doc u/0000000
  [[ "$OUT" == *"canonical	u/0000000"* ]] || fail "$n: u/0000000 is not its cluster's canonical: $OUT"

  # a timestamp before the update: a transaction's start
  run_cli 20 --data "$D" txn <<<"begin"
  t0=$(sed -n 's/^ok start_ts=\([0-9][0-9]*\)$/\1/p' <<<"$OUT")
  [ -n "$t0" ] || fail "no start_ts from txn: $OUT"
  printf '{"url": "u/0000001", "contents": "document 0 alpha beta gamma"}\n' >"$WORK/update.jsonl"
  run_cli 60 --data "$D" load "$WORK/update.jsonl"
  [[ "$RC" = 0 && "$OUT" == "loaded 1 documents in "* ]] || fail "update at $n: $OUT"
  run_cli 300 --data "$D" wait --timeout-s 280
  [ "$RC" = 0 ] || fail "wait after the update at $n exited $RC: $(cat "$WORK/last.err")"
  run_cli 20 --data "$D" doc u/0000001
  [[ "$OUT" == *"canonical	u/0000000"* && "$(grep -c '^mate' <<<"$OUT")" = 4 ]] ||
    fail "$n: u/0000001 did not join u/0000000's cluster: $OUT"
  run_cli 20 --data "$D" search 1
  [ -z "$OUT" ] || fail "$n: search 1: '$OUT', want nothing"
  run_cli 20 --data "$D" search 0
  [ "$OUT" = u/0000000 ] || fail "$n: search 0: '$OUT', want u/0000000"
  : >"$WORK/since-$n.jsonl"
  # a raw scan answers at most 64 MiB per tablet, and a busy machine may
  # take long over a big range: above 10,000 documents the tables in slices,
  # by the rows' first character (dups: hex, idx: [0-9a-z]), docs
  # (u/00NNNNN) by ten thousands; a small corpus in one scan per table (each
  # scan is a process of its own: 175 of them took most of the small run)
  local t b prev bounds
  for t in docs dups idx idxbucket idxdir; do
    prev=""
    if [ "$n" -le 10000 ] || [ "$t" = idxdir ]; then
      bounds=""
    elif [ "$t" = docs ]; then
      bounds="$(printf 'u/00%d ' $(seq 0 9)) u/01"
    elif [ "$t" = idxbucket ]; then
      bounds=$'\x01 \x02 \x03' # rows: the bucket, 2 bytes big-endian, below 1024
    else
      bounds="0 1 2 3 4 5 6 7 8 9 a b c d e f g h i j k l m n o p q r s t u v w x y z"
    fi
    for b in $bounds ""; do
      if [ -n "$b" ]; then
        run_cli 600 --data "$D" scan --raw --json --since "$t0" "$t" --start "$prev" --end "$b"
      else
        run_cli 600 --data "$D" scan --raw --json --since "$t0" "$t" --start "$prev"
      fi
      [ "$RC" = 0 ] || fail "scan --raw --since of $t [$prev, $b) exited $RC: $(cat "$WORK/last.err")"
      [ -n "$OUT" ] && printf '%s\n' "$OUT" >>"$WORK/since-$n.jsonl"
      prev=$b
    done
  done
  # an idx or idxbucket cell is a chunk, named by the index run's start_ts:
  # "chunk" here; an idxdir row is that start_ts: "run" here
  grep -E '"kind":"write".*"write_kind":"(put|delete)"' "$WORK/since-$n.jsonl" |
    sed -e 's/^{"table":"\([^"]*\)","row":"\([^"]*\)","column":"\([^"]*\)".*/\1\t\2\t\3/' \
        -e 's/^{"table":"idxdir","row_base64":"[^"]*","column":"\([^"]*\)".*/idxdir\trun\t\1/' \
        -e 's/^{"table":"\([^"]*\)","row":"\([^"]*\)","column_base64":"\([^"]*\)".*/\1\t\2\t\3/' \
        -e 's/^{"table":"\([^"]*\)","row_base64":"\([^"]*\)","column_base64":"\([^"]*\)".*/\1\t\2\t\3/' |
    awk -F'\t' -v OFS='\t' '$1 == "idx" || $1 == "idxbucket" { $3 = "chunk" } { print }' >"$WORK/written-$n.tsv"
  grep -q '^idxdir	run	' "$WORK/written-$n.tsv" ||
    fail "$n: the update's index run wrote no directory in idxdir"
  grep -q '^idxbucket	' "$WORK/written-$n.tsv" ||
    fail "$n: the update's index run wrote no chunk in idxbucket"
  ! grep -q '^idx	' "$WORK/written-$n.tsv" ||
    fail "$n: the update's index run wrote a chunk of the older form in idx"
  CELLS=$(wc -l <"$WORK/written-$n.tsv")
  ROWS=$(cut -f1,2 "$WORK/written-$n.tsv" | sort -u | wc -l)
  ALL=$(wc -l <"$WORK/since-$n.jsonl")
  run_cli 3000 --data "$D" check
  [ "$RC" = 0 ] || fail "check at $n exited $RC: $OUT $(cat "$WORK/last.err")"
  kill -TERM "$wp"
  wait_exit "$wp" 60
  [ "$RC" = 0 ] || fail "the worker at $n exited $RC on SIGTERM"
  echo "ok: $n documents: the update wrote $CELLS cells in $ROWS rows ($ALL raw cells above its timestamp)"
  cut -f1,2 "$WORK/written-$n.tsv" | sort | uniq -c | sed 's/^/    /'
}

measure "$SMALL"
C1=$CELLS R1=$ROWS
measure "$BIG"
C2=$CELLS R2=$ROWS
[ "$C1" -gt 0 ] || fail "the update wrote nothing"
[ "$C1" -le "$BOUND" ] && [ "$C2" -le "$BOUND" ] || fail "above the bound $BOUND: $C1 cells at $SMALL, $C2 at $BIG"
[ "$C1" = "$C2" ] && [ "$R1" = "$R2" ] ||
  fail "cells written depend on the corpus size: $C1 cells in $R1 rows at $SMALL, $C2 in $R2 at $BIG"
diff "$WORK/written-$SMALL.tsv" "$WORK/written-$BIG.tsv" >"$WORK/written.diff" ||
  fail "different cells written at $SMALL and $BIG: $(cat "$WORK/written.diff")"
if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' "$WORK"/*.log >/dev/null 2>&1; then
  fail "a sanitizer report"
fi
pass "updating one document wrote $C1 cells in $R1 rows at $SMALL and at $BIG documents"
echo PASS
