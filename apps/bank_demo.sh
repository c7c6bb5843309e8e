#!/usr/bin/env bash
# apps/bank_demo.sh — the second demo, on the embedded store: the paper's Bob-and-Joe bank transfer run
# through the `percolator` CLI on a fresh data directory, showing the internal
# cells (data, lock, write) after each step, a crash between the primary and
# secondary commits, and the roll-forward a later reader performs.
# Usage: apps/bank_demo.sh PATH/TO/percolator [DATA_DIR]
set -euo pipefail
cli=${1:?usage: bank_demo.sh PATH/TO/percolator [DATA_DIR]}
dir=${2:-$(mktemp -d /tmp/percolator-demo.XXXXXX)}
keep=${2:+1}
cleanup() { [ -n "${keep:-}" ] || rm -rf "$dir"; }
trap cleanup EXIT
pc() { "$cli" --data "$dir" "$@"; }

step() { printf '\n== %s\n' "$*"; }

step "initialise the data directory $dir"
pc init

step "Bob has \$10 and Joe \$2 (one transaction over two rows)"
printf 'begin\nset bank Bob bal: 10\nset bank Joe bal: 2\ncommit\n' | pc txn
pc scan --raw bank

step "transfer \$7 from Bob to Joe; the process dies right after the primary (Bob) commits"
printf 'begin\nset bank Bob bal: 3\nset bank Joe bal: 9\ncommit\n' |
  PERCOLATOR_FAILPOINTS="txn.commit.after_primary=exit(0)" pc txn || true
echo "Joe's cell still holds a lock pointing at the primary:"
pc scan --raw bank

step "a later reader finds the lock, sees the primary committed, and rolls Joe forward"
printf 'Bob: '; pc get bank Bob bal:
printf 'Joe: '; pc get bank Joe bal:
pc scan --raw bank

step "committed view"
pc scan bank
