#!/usr/bin/env bash
# test_demo.sh SOURCE_DIR PERCOLATOR — runs the two demos as a user would and
# checks what they say: the dedup demo's checks agree with the documents
# before and after the changes, its clusters match sha256sum's grouping, and
# the deleted document leaves its cluster; the bank demo runs through.
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
grep -q 'Joe' <<<"$out" || fail "the bank demo printed no Joe"
echo "demo: both demos ran; the dedup indexer agrees with sha256sum and with its check"
