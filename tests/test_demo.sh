#!/usr/bin/env bash
# test_demo.sh SOURCE_DIR PERCOLATOR — runs the two demos as a user would and
# checks what they say: the dedup demo's checks agree with the documents
# before and after the changes, its clusters match sha256sum's grouping, and
# the deleted document leaves its cluster; the bank demo shows the lock a
# crash after the primary's commit leaves on the secondary, and the reader
# that rolls it forward.
set -u
src=${1:?usage: test_demo.sh SOURCE_DIR PERCOLATOR}
cli=${2:?usage: test_demo.sh SOURCE_DIR PERCOLATOR}
out=$(timeout -k 5 500 bash "$src/apps/demo.sh" "$cli" 2>&1)
rc=$?
fail() {
  echo "FAIL: $*" >&2
  echo "$out" | tail -40 >&2
  exit 1
}
[ "$rc" = 0 ] || fail "apps/demo.sh exited $rc"
[ "$(grep -c '^check: the derived tables agree with the documents$' <<<"$out")" = 2 ] ||
  fail "the dedup check did not agree twice"
grep -q '^same cluster sizes as sha256sum' <<<"$out" || fail "clusters differ from sha256sum's grouping"
grep -q '^the deleted document: no longer in any cluster$' <<<"$out" || fail "the deleted document stayed"
grep -Eq '^documents: [1-9][0-9]*; clusters: [1-9]' <<<"$out" || fail "no documents were clustered"
out=$(timeout -k 5 120 bash "$src/apps/bank_demo.sh" "$cli" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "apps/bank_demo.sh exited $rc"
# section TITLE-WORDS: the lines of the step whose title holds them
section() { awk -v t="$1" '/^== / {on = index($0, t) > 0; next} on' <<<"$out"; }
crash=$(section "the process dies right after the primary")
start=$(grep -oE '^ok start_ts=[0-9]+' <<<"$crash" | cut -d= -f2)
[ -n "$start" ] || fail "the bank demo's transfer did not begin"
grep -qE "^Bob +bal: +[0-9]+ +data @ $start\$" <<<"$crash" ||
  fail "after the crash, Bob (the primary) has no commit record of the transfer"
grep -qE "^Joe +bal: +$start +9 \(inline\) +primary @ Bob/bal:\$" <<<"$crash" ||
  fail "after the crash, Joe does not hold the transfer's lock naming the primary"
grep -q '^ok commit_ts' <<<"$crash" && fail "the transfer's commit answered: the crash did not happen"
after=$(section "a later reader finds Joe's lock")
grep -qx 'Bob: 3' <<<"$after" && grep -qx 'Joe: 9' <<<"$after" ||
  fail "the reader did not see the transfer (Bob 3, Joe 9)"
grep -q 'primary' <<<"$after" && fail "a lock is left after the reader rolled Joe forward"
grep -qE "^Joe +bal: +[0-9]+ +data @ $start\$" <<<"$after" ||
  fail "Joe was not rolled forward to the transfer's data"
echo "demo: both demos ran; the dedup indexer agrees with sha256sum and with its check; the bank"
echo "demo crashed after the primary's commit and a reader rolled the secondary forward"
