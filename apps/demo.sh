#!/usr/bin/env bash
# apps/demo.sh — the document-ingest demo on the embedded store: the paper's
# dedup-by-hash indexer (apps/dedup/) over a real corpus every Debian machine
# has, the copyright files under /usr/share/doc and the licenses under
# /usr/share/common-licenses (real text, many real duplicates).
#   1. a worker holds a fresh data directory, serves it, and runs the dedup
#      plugin's observers;
#   2. `percolator load` writes every document, one transaction each;
#   3. the observers cluster them by SHA-256 and index the canonical ones,
#      while the demo shows the notifications still pending;
#   4. a summary: documents, clusters, the largest ones, a search, the check's
#      verdict, and the clusters compared with grouping the files by sha256sum;
#   5. a few documents change and one is deleted: clusters and index follow.
# Usage: apps/demo.sh PATH/TO/percolator [DATA_DIR]
# (apps/bank_demo.sh is the paper's Bob-and-Joe transfer.)
set -euo pipefail
cli=${1:?usage: demo.sh PATH/TO/percolator [DATA_DIR]}
case "$cli" in /*) ;; *) cli="$PWD/$cli" ;; esac
plugin="$(dirname "$cli")/../dedup/dedup.so"
[ -f "$plugin" ] || { echo "demo: no dedup plugin at $plugin" >&2; exit 1; }
work=$(mktemp -d /tmp/percolator-demo.XXXXXX)
dir=${2:-$work/data}
worker=""
cleanup() {
  [ -n "$worker" ] && kill -TERM "$worker" 2>/dev/null && wait "$worker" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
pc() { "$cli" --data "$dir" "$@"; }
step() { printf '\n== %s\n' "$*"; }

step "the corpus: copyright files and common licenses, linked under $work/corpus"
mkdir -p "$work/corpus"
find /usr/share/doc -name copyright -type f 2>/dev/null | while read -r f; do
  mkdir -p "$work/corpus$(dirname "$f")"
  ln -s "$f" "$work/corpus$f"
done
if [ -d /usr/share/common-licenses ]; then
  mkdir -p "$work/corpus/usr/share/common-licenses"
  for f in /usr/share/common-licenses/*; do [ -f "$f" ] && ln -s "$(readlink -f "$f")" "$work/corpus$f"; done
fi
echo "$(find "$work/corpus" -type l | wc -l) documents"

step "a data directory, and a worker that serves it and runs the dedup observers"
pc init
printf '{"data_dir": "%s", "log": {"level": "warn"},\n "workers": {"threads": 4, "scan": {"idle_ms": 20}, "plugins": [{"path": "%s"}]}}\n' \
  "$dir" "$plugin" >"$work/demo.json"
"$cli" --config "$work/demo.json" worker 2>"$work/worker.log" &
worker=$!
for _ in $(seq 300); do [ -s "$dir/serving.json" ] && break; sleep 0.1; done
[ -s "$dir/serving.json" ] || { cat "$work/worker.log" >&2; exit 1; }
pc observers

step "load every document, one transaction each"
(cd "$work/corpus" && "$cli" --data "$dir" load --max-bytes 8388608 usr)

step "the observers catch up (pending notifications, every second)"
while :; do
  pending=$(pc status --json | grep -o '"pending":[0-9]*' | sed -n 1p | cut -d: -f2)
  printf '  %s pending\n' "${pending:-?}"
  [ "${pending:-1}" = 0 ] && break
  sleep 1
done
pc wait --timeout-s 300

step "summary"
docs=$(pc clusters | awk -F'\t' '{n += $2} END {print n + 0}')
clusters=$(pc clusters | wc -l)
echo "documents: $docs; clusters: $clusters; documents that are exact duplicates of another: $((docs - clusters))"
echo "the five largest clusters (size, canonical):"
pc clusters | awk -F'\t' 'NR <= 5 {printf "  %4d  %s\n", $2, $3}'
echo "search 'gnu general public license version 3' (canonical documents holding every term):"
found=$(pc search gnu general public license version 3)
sed -n '1,5s/^/  /p' <<<"$found"
echo "  ... $(grep -c . <<<"$found") in all"
printf 'check: '
if pc check >/dev/null; then echo "the derived tables agree with the documents"; else echo "DIFFERENCES"; fi

step "the clusters compared with grouping the files by sha256sum"
(cd "$work/corpus" && find usr -type l -print0 | xargs -0 sha256sum) |
  awk '{print $1}' | sort | uniq -c | awk '{print $1}' | sort -n | uniq -c >"$work/sha.sizes"
pc clusters | awk -F'\t' '{print $2}' | sort -n | uniq -c >"$work/pc.sizes"
if cmp -s "$work/sha.sizes" "$work/pc.sizes"; then
  echo "same cluster sizes as sha256sum's grouping ($(wc -l <"$work/pc.sizes") distinct sizes)"
else
  echo "DIFFERENT from sha256sum's grouping:"; diff "$work/sha.sizes" "$work/pc.sizes" || true
fi

step "changes: a member of the largest cluster gets new text, another is deleted"
big=$(pc clusters | sed -n 1p)
a=$(cut -f4 <<<"$big")
b=$(cut -f5 <<<"$big")
before=$(cut -f2 <<<"$big")
printf '{"url": "%s", "contents": "This package is in the public domain (rewritten by the demo)."}\n' "$a" \
  >"$work/edit.jsonl"
pc load "$work/edit.jsonl"
pc load --delete "$b"
pc wait --timeout-s 120
echo "the largest cluster had $before members; now:"
pc clusters | awk -F'\t' 'NR == 1 {printf "  %4d  %s\n", $2, $3}'
echo "the edited document's cluster:"
pc doc "$a" | sed 's/^/  /'
printf 'the deleted document: '
pc doc "$b" >/dev/null 2>&1 && echo "still clustered (unexpected)" || echo "no longer in any cluster"
echo "search 'rewritten demo' finds the edited text:"
pc search rewritten demo | sed 's/^/  /'
printf 'check: '
if pc check >/dev/null; then echo "the derived tables agree with the documents"; else echo "DIFFERENCES"; fi

step "stopping the worker (SIGTERM)"
kill -TERM "$worker"
wait "$worker"
worker=""
echo "done"
