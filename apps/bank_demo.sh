#!/usr/bin/env bash
# apps/bank_demo.sh — the second demo, on the embedded store: the paper's
# Bob-and-Joe bank transfer run through the `percolator` CLI on a fresh data
# directory, showing the internal cells (data, lock, write) after each step,
# a crash between the primary's and the secondary's commits, and the
# roll-forward a later reader performs.
#
# A transaction whose rows all live in one store commits in one phase (no
# locks to see), so the demo's configuration turns that off
# ("one_phase_commit": false): every commit goes through the paper's two
# phases, prewrite then commit, primary first.
# Usage: apps/bank_demo.sh PATH/TO/percolator [DATA_DIR]
set -euo pipefail
cli=${1:?usage: bank_demo.sh PATH/TO/percolator [DATA_DIR]}
dir=${2:-$(mktemp -d /tmp/percolator-demo.XXXXXX)}
keep=${2:+1}
conf=$(mktemp /tmp/percolator-demo-conf.XXXXXX)
cleanup() {
  rm -f "$conf"
  [ -n "${keep:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
printf '{"data_dir": "%s", "store": {"one_phase_commit": false}}\n' "$dir" >"$conf"
pc() { "$cli" --config "$conf" "$@"; }

step() { printf '\n== %s\n' "$*"; }

step "initialise the data directory $dir (two-phase commits)"
pc init

step "Bob has \$10 and Joe \$2 (one transaction over two rows)"
printf 'begin\nset bank Bob bal: 10\nset bank Joe bal: 2\ncommit\n' | pc txn
pc scan --raw bank

step "transfer \$7 from Bob to Joe; the process dies right after the primary (Bob) commits"
printf 'begin\nset bank Bob bal: 3\nset bank Joe bal: 9\ncommit\n' |
  PERCOLATOR_FAILPOINTS="txn.commit.after_primary=exit(0)" pc txn || true
echo "Bob's commit record points at the new data; Joe's cell still holds a lock naming the primary:"
pc scan --raw bank

step "a later reader finds Joe's lock, sees the primary committed, and rolls Joe forward"
printf 'Bob: '
pc get bank Bob bal:
printf 'Joe: '
pc get bank Joe bal:
pc scan --raw bank

step "committed view"
pc scan bank
