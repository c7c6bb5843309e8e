#!/usr/bin/env bash
# test_dedup_cli.sh PERCOLATOR DEDUP_PLUGIN — the dedup application through
# the command line, on an embedded store served by `percolator worker`
# running the dedup plugin (apps/dedup/):
#   1. a corpus of files with known duplicates is loaded (`load DIR`); after
#      `wait`, `clusters` equals the files grouped by `sha256sum` (coreutils),
#      canonical = the smallest path; `check` finds no difference; `search`
#      and `doc` answer from the index and the clusters.
#   2. a canonical document's contents change, another document is deleted
#      with `load --delete` and a third with a plain `percolator delete`;
#      after `wait`, clusters follow the files again and `check` exits 0;
#      `check` reports a difference made behind its back; chunks of the
#      index's older form (table idx) read with the buckets', in run order.
#   3. bad inputs — an unreadable file, a binary file, an oversize file, an
#      invalid JSON line — are reported with file (and line), counted, skipped;
#      --rate paces; documents queued together share a transaction.
# Every CLI call runs under `timeout`; a trap kills what was started here.
set -u
CLI=${1:?usage: test_dedup_cli.sh /path/to/percolator /path/to/dedup.so}
PLUGIN=${2:?usage: test_dedup_cli.sh /path/to/percolator /path/to/dedup.so}
case "$CLI" in /*) ;; *) CLI="$PWD/$CLI" ;; esac
case "$PLUGIN" in /*) ;; *) PLUGIN="$PWD/$PLUGIN" ;; esac
[ -x "$CLI" ] || { echo "not executable: $CLI" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "no plugin at $PLUGIN" >&2; exit 1; }
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-dedup-XXXXXX") || exit 1
. "$(dirname "$0")/cli_lib.sh"
cli_start_cleanup

cd "$WORK" || exit 1
D="$WORK/data"
run_cli 10 --data "$D" init
[ "$RC" = 0 ] || fail "init: $(cat "$WORK/last.err")"
printf '{"data_dir": "%s", "workers": {"threads": 3, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
  "$D" "$PLUGIN" >"$WORK/worker.json"
"$CLI" --config "$WORK/worker.json" worker 2>"$WORK/worker.log" &
WP=$!
PIDS+=("$WP")
for _ in $(seq 300); do
  [ -s "$D/serving.json" ] && break
  kill -0 "$WP" 2>/dev/null || fail "the worker exited"
  sleep 0.1
done
[ -s "$D/serving.json" ] || fail "the worker does not serve the store"

# the clusters the files on disk make: HASH SIZE CANONICAL MEMBER..., sorted
expected_clusters() {
  find corpus -type f -print0 | xargs -0 sha256sum | sed 's/  /\t/' | sort -t $'\t' -k1,1 -k2,2 |
    awk -F'\t' '{ if ($1 != h) { if (h != "") print h "\t" n "\t" c m; h = $1; n = 0; c = $2; m = "" }
                  n++; m = m "\t" $2 }
                END { if (h != "") print h "\t" n "\t" c m }' | sort
}
same_clusters() { # same_clusters WHAT
  run_cli 30 --data "$D" clusters
  [ "$RC" = 0 ] || fail "clusters exited $RC: $(cat "$WORK/last.err")"
  sort <<<"$OUT" >"$WORK/clusters.have"
  expected_clusters >"$WORK/clusters.want"
  diff "$WORK/clusters.want" "$WORK/clusters.have" >"$WORK/clusters.diff" ||
    fail "$1: clusters differ from sha256sum's grouping: $(cat "$WORK/clusters.diff")"
}
wait_all() {
  run_cli 120 --data "$D" wait --timeout-s 100
  [ "$RC" = 0 ] || fail "wait exited $RC: $(cat "$WORK/last.err")"
}
check_clean() { # check_clean WHAT
  run_cli 60 --data "$D" check
  [ "$RC" = 0 ] || fail "$1: check exited $RC: $OUT $(cat "$WORK/last.err")"
}

# ---- 1. a corpus with known duplicates --------------------------------------------

mkdir -p corpus/sub/deeper
for i in $(seq 1 60); do
  g=$((i % 9))
  dir=corpus
  [ $((i % 3)) = 0 ] && dir=corpus/sub
  [ $((i % 7)) = 0 ] && dir=corpus/sub/deeper
  printf 'Group %s: Alpha beta, the GRP%s words; shared-text.\n' "$g" "$g" >"$dir/doc$i.txt"
done
printf 'one of a kind: Unique words here\n' >corpus/unique.txt
# a document of 3,000 terms of its own: an index run's map of terms grows
# (and rehashes) several times while it takes them
seq -f 'vocab%g' 1 3000 | tr '\n' ' ' >corpus/vocabulary.txt
run_cli 60 --data "$D" load --threads 4 corpus
[ "$RC" = 0 ] || fail "load exited $RC: $(cat "$WORK/last.err")"
[[ "$OUT" == "loaded 62 documents in "*"skipped 0:"*"failed 0" ]] || fail "load summary: $OUT"
wait_all
same_clusters "after loading"
check_clean "after loading"
pass "62 documents loaded; clusters equal sha256sum's grouping; check finds no difference"
run_cli 30 --data "$D" search --all
[ "$RC" = 0 ] || fail "search --all exited $RC: $(cat "$WORK/last.err")"
n=$(awk -F'\t' '$2 == "corpus/vocabulary.txt" && $1 ~ /^vocab[0-9]+$/' <<<"$OUT" | sort -u | wc -l)
[ "$n" = 3000 ] || fail "search --all: want the 3000 terms of corpus/vocabulary.txt, found $n"
for t in vocab1 vocab1500 vocab3000; do
  run_cli 10 --data "$D" search "$t"
  [ "$OUT" = corpus/vocabulary.txt ] || fail "search $t: '$OUT'"
done
pass "every one of a document's 3,000 terms is indexed"

canonical_of() { # canonical_of FILE: the smallest path with the same contents
  local h
  h=$(sha256sum "$1" | cut -d' ' -f1)
  grep "^$h" "$WORK/clusters.want" | cut -f3
}
run_cli 10 --data "$D" search grp4
[ "$OUT" = "$(canonical_of corpus/doc4.txt)" ] || fail "search grp4: '$OUT'"
run_cli 10 --data "$D" search ALPHA Shared
[ "$(wc -l <<<"$OUT")" = 9 ] || fail "search alpha shared: want the 9 group canonicals: $OUT"
run_cli 10 --data "$D" search alpha unique
[ -z "$OUT" ] && [ "$RC" = 1 ] || fail "search alpha unique: want nothing and exit 1: $RC '$OUT'"
run_cli 10 --data "$D" search kind
[ "$OUT" = corpus/unique.txt ] || fail "search kind: '$OUT'"
run_cli 10 --data "$D" doc corpus/doc13.txt
[[ "$OUT" == *"canonical	$(canonical_of corpus/doc13.txt)"* ]] || fail "doc: $OUT"
[ "$(grep -c '^mate' <<<"$OUT")" = 6 ] || fail "doc: want 6 mates: $OUT"
run_cli 10 --data "$D" doc --json corpus/unique.txt
[[ "$OUT" == *'"canonical":"corpus/unique.txt","mates":[]'* ]] || fail "doc --json: $OUT"
run_cli 10 --data "$D" doc corpus/nothing
[ "$RC" = 1 ] || fail "doc of an unknown URL exited $RC"
pass "search finds the expected canonicals; doc shows cluster mates"

# ---- 2. a change and a delete -------------------------------------------------------

C4=$(canonical_of corpus/doc4.txt)
printf 'Fresh contents now\n' >"$C4"
DEL=$(canonical_of corpus/doc5.txt)
DEL2=$(canonical_of corpus/doc8.txt)
rm "$DEL" "$DEL2"
run_cli 60 --data "$D" load corpus
[ "$RC" = 0 ] || fail "reload exited $RC: $(cat "$WORK/last.err")"
run_cli 60 --data "$D" load --delete "$DEL"
[ "$RC" = 0 ] && [[ "$OUT" == "deleted 1 documents"* ]] || fail "load --delete: $OUT"
run_cli 10 --data "$D" delete docs "$DEL2" doc:contents # a plain delete is a change too
[ "$RC" = 0 ] || fail "delete exited $RC: $(cat "$WORK/last.err")"
wait_all
same_clusters "after a change and a delete"
check_clean "after a change and a delete"
run_cli 10 --data "$D" search fresh
[ "$OUT" = "$C4" ] || fail "search fresh: '$OUT', want $C4"
run_cli 10 --data "$D" search grp4
[ "$OUT" = "$(canonical_of corpus/doc4.txt)" ] && [ "$OUT" != "$C4" ] || fail "search grp4 after the change: '$OUT'"
run_cli 10 --data "$D" search grp5
[ "$OUT" = "$(canonical_of corpus/doc5.txt)" ] && [ "$OUT" != "$DEL" ] || fail "search grp5 after the delete: '$OUT'"
pass "a changed canonical and a deleted one: clusters, index and check follow"

# a difference made behind the observers' back is reported
run_cli 10 --data "$D" set idx grp5 corpus/bogus 3
run_cli 60 --data "$D" check
[ "$RC" = 1 ] && [[ "$OUT" == *$'idx\tgrp5\tcorpus/bogus\tfound "3", expected nothing'* ]] ||
  fail "check did not report a bogus index cell (exit $RC): $OUT"
run_cli 10 --data "$D" delete idx grp5 corpus/bogus
check_clean "after removing the bogus cell"
pass "check reports a difference and exits non-zero"

# an index of the older form (table idx, a row per term, written before
# buckets) reads with the buckets': a term's chunks of both forms apply in the
# order of their runs (the column: p and the run's start_ts, 8 bytes)
run_cli 30 --data "$D" clusters
U=corpus/unique.txt
H=$(awk -F'\t' -v u="$U" '$3 == u { print $1 }' <<<"$OUT")
[ ${#H} = 64 ] || fail "no cluster with canonical $U: $OUT"
# old_chunk OP [COUNT]: a chunk of the form before directories naming (H, U)
old_chunk() {
  printf '%s%s\\x%02x%s' "$1" "$(sed 's/../\\x&/g' <<<"$H")" ${#U} "$U"
  [ -z "${2:-}" ] || printf '\\x%02x' "$2"
}
FIRST='"p\x00\x00\x00\x00\x00\x00\x00\x01"' LAST='"p\xff\xff\xff\xff\xff\xff\xff\xfe"'
txn_run() { # txn_run WHAT SCRIPT: one transaction of `percolator txn`
  OUT=$(printf 'begin\n%scommit\n' "$2" | timeout -k 5 30 "$CLI" --data "$D" txn 2>"$WORK/last.err")
  [ $? = 0 ] && [[ "$OUT" == *"ok commit_ts="* ]] || fail "$1: txn: $OUT $(cat "$WORK/last.err")"
}
# a run older than every bucket's removes U from kind: the buckets' '+' wins;
# a newer one removes it for good; zzold is a term only the older form has
txn_run "older-form chunks" "set idx kind $FIRST \"$(old_chunk -)\"
set idx kind $LAST \"$(old_chunk -)\"
set idx zzold $FIRST \"$(old_chunk + 3)\"
"
run_cli 10 --data "$D" search kind
[ "$RC" = 1 ] && [ -z "$OUT" ] || fail "search kind after a newer older-form '-': $RC '$OUT'"
run_cli 10 --data "$D" search zzold
[ "$OUT" = "$U" ] || fail "search zzold (older form only): '$OUT'"
run_cli 30 --data "$D" search --all
grep -qx "zzold	$U	3" <<<"$OUT" || fail "search --all lacks the older form's zzold: $OUT"
! grep -q "^kind	$U	" <<<"$OUT" || fail "search --all kept kind's posting the newer '-' removed"
run_cli 60 --data "$D" check
[ "$RC" = 1 ] && [ "$(grep -c '^idx	' <<<"$OUT")" = 2 ] &&
  grep -q "^idx	kind	$U" <<<"$OUT" && grep -q "^idx	zzold	$U" <<<"$OUT" ||
  fail "check over both forms: want kind's posting missing and zzold's extra (exit $RC): $OUT"
txn_run "dropping the newer chunk" "delete idx kind $LAST
"
run_cli 10 --data "$D" search kind
[ "$OUT" = "$U" ] || fail "search kind with an older-form '-' before the buckets' '+': '$OUT'"
txn_run "dropping the older form" "delete idx kind $FIRST
delete idx zzold $FIRST
"
check_clean "after removing the older-form chunks"
pass "chunks of the older form (idx) read with the buckets', in the order of their runs"

# a posting no run wrote, in a cell of the bucket form (a section of term
# zzextra, bucket 921 = 0x399, its chunk of the form before directories):
# search finds it, check names it; the same cell in another term's bucket
# is malformed (search, which reads the term's bucket, cannot find it)
sect="\\x02\\x07zzextra$(printf '\\x%02x' $((35 + ${#U})))$(old_chunk + 3)"
txn_run "an extra bucket cell" "set idxbucket \"\\x03\\x99\" $FIRST \"$sect\"
"
run_cli 10 --data "$D" search zzextra
[ "$OUT" = "$U" ] || fail "search zzextra (a bucket cell of its own): '$OUT'"
run_cli 60 --data "$D" check
[ "$RC" = 1 ] && [ "$OUT" = "idx	zzextra	$U\x00$H	found \"3\", expected nothing" ] ||
  fail "check of an extra posting in a bucket cell: want it alone (exit $RC): $OUT"
txn_run "the extra cell, in another term's bucket" "delete idxbucket \"\\x03\\x99\" $FIRST
set idxbucket \"\\x00\\x00\" $FIRST \"$sect\"
"
run_cli 10 --data "$D" search zzextra
[ "$RC" = 1 ] && [ -z "$OUT" ] || fail "search zzextra outside its bucket: $RC '$OUT'"
run_cli 60 --data "$D" check
[ "$RC" = 1 ] && [ "$(wc -l <<<"$OUT")" = 1 ] && [[ "$OUT" == 'idxbucket	\x00\x00	p\x00'* ]] ||
  fail "check of a term outside its bucket: want the cell reported alone (exit $RC): $OUT"
txn_run "dropping the misplaced cell" "delete idxbucket \"\\x00\\x00\" $FIRST
"
check_clean "after removing the extra bucket cells"
pass "a posting no run wrote is found and named by check; a term outside its bucket is malformed"

# ---- 3. bad inputs -----------------------------------------------------------------------

mkdir -p bad
printf 'fine\n' >bad/good.txt
ln -s "$WORK/nowhere" bad/dangling
printf 'text\0more' >bad/binary.bin
head -c 500 /dev/zero | tr '\0' x >bad/large.txt
NUNREAD=1
if [ "$(id -u)" != 0 ]; then
  printf 'secret\n' >bad/locked.txt
  chmod 000 bad/locked.txt
  NUNREAD=2
fi
printf '{"url": "json/1", "contents": "from json"}\n{"url": "json/2", "contents": \n{"url": "json/3"}\n' >bad.jsonl
run_cli 60 --data "$D" load --max-bytes 100 bad bad.jsonl
ERR=$(cat "$WORK/last.err")
[ "$RC" = 0 ] || fail "load of bad inputs exited $RC: $ERR"
[[ "$OUT" == "loaded 2 documents"*"skipped $((NUNREAD + 4)): unreadable $NUNREAD, binary 1, too_large 1, invalid_json 2,"* ]] ||
  fail "bad inputs summary: $OUT"
grep -q "^percolator: load: bad/dangling: unreadable" <<<"$ERR" || fail "no report of bad/dangling: $ERR"
grep -q "^percolator: load: bad/binary.bin:1: binary" <<<"$ERR" || fail "no report of bad/binary.bin: $ERR"
grep -q "^percolator: load: bad/large.txt: too large (500 bytes" <<<"$ERR" || fail "no report of bad/large.txt: $ERR"
grep -q "^percolator: load: bad.jsonl:2: invalid JSON" <<<"$ERR" || fail "no report of bad.jsonl:2: $ERR"
grep -q "^percolator: load: bad.jsonl:3: invalid JSON" <<<"$ERR" || fail "no report of bad.jsonl:3: $ERR"
run_cli 60 --data "$D" load --json --max-bytes 100 bad.jsonl
[[ "$(tail -1 <<<"$OUT")" == '{"loaded":1,"failed":0,"unknown":0,"skipped":{'*'"invalid_json":2'* ]] ||
  fail "load --json summary: $OUT"
grep -qx '{"url":"json/1","status":"ok"}' <<<"$OUT" || fail "load --json: no result for json/1: $OUT"
[ "$(grep -c '"status":"skipped","reason":"invalid_json"' <<<"$OUT")" = 2 ] ||
  fail "load --json: want two skipped lines: $OUT"
wait_all
check_clean "after the bad inputs"
run_cli 10 --data "$D" search json
[ "$OUT" = json/1 ] || fail "the good JSON line was not indexed: '$OUT'"
pass "bad inputs reported with file:line, counted, skipped; the good ones loaded"

# --rate: a steady feed loads every document; a rate out of range is a usage error
printf '{"url": "paced/%d", "contents": "paced document %d"}\n' 1 1 2 2 3 3 4 4 5 5 >paced.jsonl
run_cli 60 --data "$D" load --rate 50 --threads 2 paced.jsonl
[ "$RC" = 0 ] && [[ "$OUT" == "loaded 5 documents"* ]] || fail "load --rate 50: $RC $OUT"
for bad in 0 -1 x 1000001; do
  run_cli 10 --data "$D" load --rate "$bad" paced.jsonl
  [ "$RC" = 2 ] && grep -q -- "--rate: expected 1..1000000 documents/s, got '$bad'" "$WORK/last.err" ||
    fail "load --rate $bad: exit $RC, $(cat "$WORK/last.err")"
done
wait_all
check_clean "after the paced load"
pass "load --rate paces the load and refuses rates out of range"

# documents a writing thread finds queued together share a transaction; a
# document repeated right after itself goes in a later one (its last
# version stands); every document has its own outcome
for i in $(seq 200); do printf '{"url": "batch/%03d", "contents": "batch document %d"}\n' "$i" "$i"; done >batch.jsonl
printf '{"url": "batch/007", "contents": "batch document 7, again"}\n' >>batch.jsonl
printf '{"url": "batch/007", "contents": "batch document 7, last"}\n' >>batch.jsonl
run_cli 60 --data "$D" load --json --threads 1 batch.jsonl
[ "$RC" = 0 ] && [ "$(grep -c '"status":"ok"' <<<"$OUT")" = 202 ] &&
  [[ "$(tail -1 <<<"$OUT")" == '{"loaded":202,"failed":0,'* ]] || fail "load of 202 documents: $RC $OUT"
run_cli 10 --data "$D" get docs batch/007 doc:contents
[ "$OUT" = "batch document 7, last" ] || fail "batch/007 after its three versions: '$OUT'"
run_cli 30 --data "$D" scan --raw docs --start batch/ --end batch/~ --json
TS=$(grep '"column":"doc:contents","kind":"write"' <<<"$OUT" | sed 's/.*"ts":\([0-9]*\).*/\1/' | sort -u | wc -l)
[ "$TS" -ge 3 ] && [ "$TS" -lt 200 ] ||
  fail "202 versions of 200 documents in $TS commits: want fewer than 200 (and the repeats apart)"
wait_all
check_clean "after the batched load"
run_cli 10 --data "$D" search again
[ "$RC" = 1 ] || fail "search again: the second version of batch/007 is still indexed: '$OUT'"
pass "documents queued together load in one transaction; each has its outcome; repeats apart"

kill -TERM "$WP"
for _ in $(seq 300); do kill -0 "$WP" 2>/dev/null || break; sleep 0.1; done
wait "$WP"
[ $? = 0 ] || fail "the worker did not exit 0 on SIGTERM"
if grep -l -E 'AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error:' \
  "$WORK"/*.log "$WORK"/*.err >/dev/null 2>&1; then
  fail "a sanitizer report"
fi
echo "PASS"
