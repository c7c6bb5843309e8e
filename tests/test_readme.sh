#!/usr/bin/env bash
# test_readme.sh SOURCE_DIR BUILD_DIR CC [EXTRA_CFLAGS] [WALKTHROUGHS] — the README's examples
# run as written, in order, taken from README.md itself, so that this test
# fails when the README drifts from the program:
#   - every ```sh block runs, in one shell with `set -e` (so every command
#     must succeed), in the order of the README: background daemons included
#     (each block stops what it starts; whatever is left is killed at the end);
#   - a ```json block marked <!-- readme-test: file NAME --> is written to NAME;
#   - the ```c block is compiled against the installed library (pkg-config)
#     as the body of main() and run, and must say nothing on stderr;
#   - the table marked <!-- readme-test: exit-codes --> must be what
#     `percolator help exit-codes` prints;
#   - every ```json example of docs/CONFIG.md is a valid configuration (as
#     `percolator doctor` reads it);
#   - the get of the command-line example prints 10, and that of the
#     replicated cluster (after a server is killed and replaced) 20;
#   - blocks marked <!-- readme-test: skip (why) --> are not run (they install
#     packages or run this suite); other ``` blocks show output, not commands;
#   - then the observers walkthrough (the block that builds normalize_count.so,
#     starts a worker, writes, waits and reads) runs WALKTHROUGHS more times in
#     a row (default 0), each on a fresh data directory, and must print
#     "hello world" every time: a scripted start of a worker followed by its
#     use must never race. (The first run builds the plugin; the others use
#     that build.)
# The build is installed into a temporary prefix first (`percolator`,
# libpercolator and its pkg-config file on PATH and PKG_CONFIG_PATH). To keep
# runs apart from each other and from other users of the machine, the
# commands run in a temporary directory where build/ and observers/ are links
# to the build and the sources, /tmp/pc becomes a directory of this run, and
# the fixed ports 74NN and 75NN become ports of a free range, and the
# README's ZooKeeper (127.0.0.1:2181) a private server of this run started by
# tests/zk_lib.sh (through the installed `percolator playground`); nothing else is changed.
set -u
SRC=${1:?usage: test_readme.sh SOURCE_DIR BUILD_DIR CC [EXTRA_CFLAGS]}
BUILD=${2:?usage: test_readme.sh SOURCE_DIR BUILD_DIR CC [EXTRA_CFLAGS]}
CC=${3:-cc}
EXTRA=${4:-}
WALKS=${5:-0}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pc-readme-XXXXXX") || exit 1
CLI=unused
PIDS=()
. "$SRC/tests/cli_lib.sh"
. "$SRC/tests/zk_lib.sh"
cli_start_cleanup
cd "$WORK" || exit 1

cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null || fail "cmake --install"
pcfile=$(find "$WORK/prefix" -name percolator.pc | head -n 1)
[ -n "$pcfile" ] || fail "no percolator.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pcfile")
export PATH="$WORK/prefix/bin:$PATH"
LIBDIR=$(pkg-config --variable=libdir percolator)
ln -s "$BUILD" build
ln -s "$SRC/observers" observers

# a free range for the README's ports: 200 ports at BASE, none of them in
# use, below the kernel's ephemeral ports (where any connection's local port,
# ZooKeeper's or another test's, could take one between this check and the
# daemons' start)
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
eph_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
ranges=$(((eph_low - 10200) / 200))
[ "$ranges" -ge 1 ] || ranges=1
BASE=
for _ in $(seq 50); do
  b=$((10000 + (RANDOM % ranges) * 200))
  busy=0
  for k in 0 1 10 11 12 20 21 22 23 24 100 101 110 111 112; do in_use $((b + k)) && busy=1; done
  [ $busy = 0 ] && { BASE=$b; break; }
done
[ -n "$BASE" ] || fail "no free range of ports"
ZK_CLI="$WORK/prefix/bin/percolator" zk_start
adapt() { # the README's text, with this run's directory, ports and ZooKeeper
  local line off
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line//\/tmp\/pc/$WORK\/pc}
    line=${line//127.0.0.1:2181/$ZK_CONNECT}
    while [[ "$line" =~ 127\.0\.0\.1:7([45])([0-9][0-9]) ]]; do
      off=$(((BASH_REMATCH[1] - 4) * 100 + 10#${BASH_REMATCH[2]}))
      line=${line/"${BASH_REMATCH[0]}"/127.0.0.1:$((BASE + off))}
    done
    printf '%s\n' "$line"
  done
}

# ---- the blocks of README.md ----------------------------------------------------

# split: blocks/N.LANG and an index of "N LANG LINE MARKER"
mkdir blocks
awk -v dir=blocks '
  /^<!-- readme-test: .* -->$/ { marker = $0; sub(/^<!-- readme-test: /, "", marker); sub(/ -->$/, "", marker); mline = NR; next }
  /^```/ && !inblock {
    inblock = 1; n++; lang = substr($0, 4); if (lang == "") lang = "text";
    m = (mline == NR - 1) ? marker : "-";
    printf "%d %s %d %s\n", n, lang, NR, m > (dir "/index");
    file = dir "/" n "." lang; printf "" > file; next
  }
  /^```$/ && inblock { inblock = 0; close(file); next }
  inblock { print > file }
' "$SRC/README.md"
[ -s blocks/index ] || fail "no code block found in README.md"

# the exit-code table: README rows against `percolator help exit-codes`
want=$(percolator help exit-codes | sed -n 's/^ *\([0-9][0-9]*\)  \(.\{16\}\) \(.*\)$/\1|\2|\3/p' |
  sed 's/ *|/|/g')
have=$(awk '/^<!-- readme-test: exit-codes/ {on = 1; next} on && /^\|/ {print; next} on && !/^\|/ {exit}' \
  "$SRC/README.md" | tail -n +3 | sed 's/^| *//; s/ *|$//; s/ *| */|/g')
[ -n "$have" ] || fail "README.md has no exit-code table marked for this test"
[ "$have" = "$want" ] || fail "README's exit codes differ from 'percolator help exit-codes':
$(diff <(echo "$have") <(echo "$want"))"
pass "the README's exit-code table is the program's"

# one script of the runnable blocks, in order
{
  echo 'set -e'
  echo 'trap '\''for p in $(jobs -p); do kill "$p" 2>/dev/null; done; wait'\'' EXIT'
} >readme.sh
NSH=0
while read -r n lang line marker; do
  case "$marker" in skip*) continue ;; esac
  case "$lang" in
    sh)
      NSH=$((NSH + 1))
      printf 'echo "### README.md line %s" >&2\n' "$line" >>readme.sh
      adapt <"blocks/$n.sh" >>readme.sh
      ;;
    json)
      case "$marker" in
        file\ *)
          adapt <"blocks/$n.json" >"${marker#file }"
          ;;
      esac
      ;;
    c)
      {
        grep '^#include' "blocks/$n.c"
        echo 'int main(void) {'
        grep -v '^#include' "blocks/$n.c" | adapt
        echo 'return 0;'
        echo '}'
      } >"readme_$n.c"
      printf 'echo "### README.md line %s (the C example)" >&2\n' "$line" >>readme.sh
      printf '%s -std=c11 %s readme_%s.c $(pkg-config --cflags --libs percolator) -Wl,-rpath,%s -o readme_%s\n' \
        "$CC" "$EXTRA" "$n" "$LIBDIR" "$n" >>readme.sh
      printf './readme_%s 2>readme_%s.err; [ ! -s readme_%s.err ] || { cat readme_%s.err >&2; exit 1; }\n' \
        "$n" "$n" "$n" "$n" >>readme.sh
      ;;
  esac
done <blocks/index
[ "$NSH" -ge 4 ] || fail "only $NSH shell blocks found in README.md"

OUT=$(timeout -k 5 400 bash readme.sh </dev/null 2>"$WORK/readme.err")
RC=$?
if [ "$RC" != 0 ]; then
  FAILED=1
  echo "---- the README's commands (as run)" >&2
  cat -n readme.sh >&2
  echo "---- their output" >&2
  printf '%s\n' "$OUT" | tail -40 >&2
  echo "---- their stderr" >&2
  tail -40 "$WORK/readme.err" >&2
  fail "the README's commands exited $RC (the last '### README.md line' above is the block)"
fi
grep -qE 'Sanitizer|runtime error:' readme.err && fail "a sanitizer report: $(cat readme.err)"
# what the README says the commands print
grep -qx 'hello world' <<<"$OUT" || fail "the observers example did not print \"hello world\": $OUT"
grep -qx '10' <<<"$OUT" || fail "the command-line example's get did not print 10"
grep -qx '20' <<<"$OUT" || fail "the replicated cluster's get, after replace-server, did not print 20"
pass "the README's $NSH shell blocks, its C example and its configuration ran as written"

# ---- docs/CONFIG.md: every example configuration is valid ----------------------------

awk -v dir=blocks '
  /^```json$/ { inblock = 1; n++; file = dir "/config-" n ".json"; printf "" > file; next }
  /^```$/ && inblock { inblock = 0; close(file); next }
  inblock { print > file }
' "$SRC/docs/CONFIG.md"
NCONF=0
for f in blocks/config-*.json; do
  [ -e "$f" ] || continue
  NCONF=$((NCONF + 1))
  if grep -q /etc/percolator/ "$f"; then # the TLS example: its files, made for this run
    mkdir -p certs
    [ -e certs/node.pem ] || bash "$SRC/tests/certs.sh" "$WORK/certs" node:server >/dev/null ||
      fail "tests/certs.sh"
    sed -i "s|/etc/percolator/|$WORK/certs/|g" "$f"
  fi
  timeout -k 5 60 percolator --config "$f" --timeout 1s doctor >"$f.out" 2>&1 </dev/null
  grep -q "^ok       configuration: $f is valid" "$f.out" ||
    fail "docs/CONFIG.md's example $f is not a valid configuration: $(cat "$f.out")"
done
[ "$NCONF" -ge 3 ] || fail "only $NCONF configuration examples found in docs/CONFIG.md"
pass "the $NCONF example configurations of docs/CONFIG.md are valid"

# ---- the observers walkthrough, again and again --------------------------------------

walk=$(awk '$2 == "sh" {print $1}' blocks/index | while read -r n; do
  grep -q 'normalize_count.so' "blocks/$n.sh" && echo "$n"; done | head -1)
[ -n "$walk" ] || fail "no observers walkthrough (a block building normalize_count.so) in README.md"
for i in $(seq 1 "$WALKS"); do
  mkdir "walk$i"
  {
    echo 'set -e'
    echo 'trap '\''for p in $(jobs -p); do kill "$p" 2>/dev/null; done; wait'\'' EXIT'
    echo 'percolator --data /tmp/pc init >/dev/null'
    # the plugin is built by the first run; the others use it (the same every time)
    if [ "$i" = 1 ]; then cat "blocks/$walk.sh"; else grep -v '^cc ' "blocks/$walk.sh"; fi
  } | adapt | sed "s#$WORK/pc#$WORK/walk$i/pc#g" >"walk$i/walk.sh"
  [ "$i" = 1 ] || cp walk1.so "walk$i/normalize_count.so"
  OUT=$(cd "walk$i" && ln -s "$SRC/observers" observers &&
    timeout -k 5 120 bash walk.sh </dev/null 2>walk.err)
  RC=$?
  if [ "$RC" != 0 ] || ! grep -qx 'hello world' <<<"$OUT"; then
    FAILED=1
    tail -30 "walk$i/walk.err" >&2
    fail "the observers walkthrough failed on run $i of $WALKS (exit $RC): $OUT"
  fi
  grep -qE 'Sanitizer|runtime error:' "walk$i/walk.err" && fail "run $i: a sanitizer report"
  [ "$i" = 1 ] && cp walk1/normalize_count.so walk1.so
  rm -rf "walk$i"
done
[ "$WALKS" = 0 ] || pass "the observers walkthrough ran $WALKS times in a row, each printing hello world"
echo PASS
