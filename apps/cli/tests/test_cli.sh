#!/usr/bin/env bash
# test_cli.sh — integration test of the `percolator` command-line tool.
# Usage: test_cli.sh PATH/TO/percolator [jemalloc|libc]
# Drives the real binary on a temporary data directory: init, set/get/delete,
# exit codes, --help of every verb, scan (committed, --json, --raw), --config
# with a missing data_dir (refused; init creates it), a crashed
# two-row commit (failpoints) whose locks a later get resolves, interleaved
# transactions of a txn session driven through named pipes (snapshot
# isolation, write conflict), malformed txn lines, and commits whose outcome is
# unknown (failpoints: exit code 4, status "unknown"), and failpoint names
# that do not exist (refused by a verb and by a daemon). Every process runs
# under `timeout`, so the test cannot hang. Prints each failed check and
# exits 1 if there was any.
set -u

P=${1:?usage: test_cli.sh PATH/TO/percolator [jemalloc|libc]}
MALLOC=${2:-libc} # the malloc the build links the program with (CMakeLists.txt's PC_JEMALLOC)
if [ ! -x "$P" ]; then
  echo "test_cli: $P is not an executable" >&2
  exit 1
fi
trap '' PIPE # a session that died makes writes fail, not kill the test
T=$(mktemp -d "${TMPDIR:-/tmp}/pc-cli-test.XXXXXX")
SESSION_PIDS=()
cleanup() {
  exec 3>&- 4<&- 2>/dev/null
  for pid in "${SESSION_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
D="$T/data"
FAILS=0
CHECKS=0

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
check() { CHECKS=$((CHECKS + 1)); }

# no_sanitizer_report FILE: a sanitizer build (PC_SANITIZE) reports leaks and
# errors on stderr; any such report fails the test.
no_sanitizer_report() {
  check
  if grep -qE 'Sanitizer|runtime error:' "$1"; then
    fail "sanitizer report:"
    cat "$1" >&2
  fi
}
# run ARGS...: runs percolator --data $D ARGS; sets OUT, ERR, RC.
run() {
  OUT=$(timeout 20 "$P" --data "$D" "$@" 2>"$T/stderr")
  RC=$?
  ERR=$(cat "$T/stderr")
  no_sanitizer_report "$T/stderr"
}
# run_in INPUT ARGS...: the same with INPUT on stdin.
run_in() {
  local input=$1
  shift
  OUT=$(printf '%s' "$input" | timeout 20 "$P" --data "$D" "$@" 2>"$T/stderr")
  RC=$?
  ERR=$(cat "$T/stderr")
  no_sanitizer_report "$T/stderr"
}
expect_rc() { # WANT WHAT
  check
  [ "$RC" -eq "$1" ] || fail "$2: exit $RC, expected $1 (stderr: $ERR)"
}
expect_out() { # WANT WHAT
  check
  [ "$OUT" == "$1" ] || fail "$2: output was
---
$OUT
---
expected
---
$1
---"
}
expect_match() { # TEXT REGEX WHAT
  check
  [[ $1 =~ $2 ]] || fail "$3: '$1' does not match /$2/"
}
expect_no_match() { # TEXT REGEX WHAT
  check
  [[ $1 =~ $2 ]] && fail "$3: '$1' matches /$2/"
}

# ---- usage, help, version ----------------------------------------------------------

run --version
expect_rc 0 "--version"
expect_match "$OUT" '^percolator [0-9]+\.[0-9]+\.[0-9]+' "--version output"
# the allocator the build chose (PC_JEMALLOC), as the running program reports it
expect_match "$OUT" "; malloc: $MALLOC( [0-9.]+)?\)\$" "--version names the malloc in use ($MALLOC)"

run --help
expect_rc 0 "--help"
VERBS=$(printf '%s\n' "$OUT" | sed -n '/^Verbs:/,/^$/p' | awk 'NF && !/^Verbs:/ {print $1}')
for v in init get set delete scan txn; do
  check
  grep -qx "$v" <<<"$VERBS" || fail "--help does not list verb $v"
done
for v in $VERBS; do
  run "$v" --help
  expect_rc 0 "$v --help"
  expect_match "$OUT" "Usage: percolator .*$v" "$v --help synopsis"
  expect_match "$OUT" "Example" "$v --help example"
done

run frobnicate
expect_rc 2 "unknown verb"
expect_match "$ERR" "unknown verb 'frobnicate'" "unknown verb message"
run --frob get t r c
expect_rc 2 "unknown global option"
expect_match "$ERR" "'--frob'" "unknown global option message"
run scan --frob t
expect_rc 2 "unknown verb option"
expect_match "$ERR" "scan: unknown option '--frob'" "unknown verb option message"
run get t r
expect_rc 2 "get with missing arguments"
run scan --start
expect_rc 2 "option without its value"
OUT=$(timeout 20 "$P" 2>&1)
RC=$?
expect_rc 2 "no verb"
expect_match "$OUT" "no verb given" "no verb message"

# ---- a missing data directory is not created -----------------------------------------

run get t r c
expect_rc 3 "get on a missing data directory"
expect_match "$ERR" "^percolator: get: .*'$D'" "missing directory message names it"
check
[ -e "$D" ] && fail "get created the data directory"

run init
expect_rc 0 "init"
check
[ -f "$D/FORMAT" ] || fail "init made no FORMAT file"
run init
expect_rc 0 "init again"

# ---- set / get / delete ------------------------------------------------------------------

run set accounts Bob bal: '$10'
expect_rc 0 "set"
run get accounts Bob bal:
expect_rc 0 "get"
expect_out '$10' "get after set"
run set accounts Bob bal: '$6'
run get accounts Bob bal:
expect_out '$6' "get after a second set"
run set accounts Joe bal: '$2'
run set accounts Zed bal: '$1'
run delete accounts Zed bal:
expect_rc 0 "delete"
run get accounts Zed bal:
expect_rc 1 "get after delete"
expect_match "$ERR" "not found" "get after delete says not found"
run get accounts Nobody bal:
expect_rc 1 "get of a never-written cell"
run set accounts Bob bal: ''
expect_rc 2 "set of an empty value (a usage error: nothing is sent)"
expect_match "$ERR" "^percolator: set: .*empty" "empty value message"
run set 'bad table' Bob bal: x
expect_rc 2 "set with a bad table name"
run set -- accounts Dash bal: -5
expect_rc 0 "set after --"
run get accounts Dash bal:
expect_out '-5' "value starting with '-'"

# bytes that must be escaped in scan output; a value too large to be kept inline
run set accounts $'Tab\tRow' $'c\\1' $'two\nlines'
BIG=$(head -c 5000 /dev/zero | tr '\0' 'x')
run set big key col: "$BIG"
run get big key col:
check
[ "$OUT" == "$BIG" ] || fail "get of a 5000-byte value"

# ---- scan (committed view) ------------------------------------------------------------------

run scan accounts
expect_rc 0 "scan"
expect_out $'Bob\tbal:\t$6\nDash\tbal:\t-5\nJoe\tbal:\t$2\nTab\\tRow\tc\\\\1\ttwo\\nlines' "scan output"
run scan accounts --start C --end Tab
expect_out $'Dash\tbal:\t-5\nJoe\tbal:\t$2' "scan --start --end"
run scan accounts --json --end C
expect_out '{"row":"Bob","column":"bal:","value":"$6"}' "scan --json"
run scan nosuchtable
expect_rc 0 "scan of an empty table"
expect_out '' "scan of an empty table prints nothing"
run scan
expect_rc 2 "scan without TABLE"

# ---- scan --raw ---------------------------------------------------------------------------------

run scan --raw accounts
expect_rc 0 "scan --raw"
RAW=$OUT
expect_match "$(head -1 <<<"$RAW")" '^row +column +ts +data +lock +write$' "raw header"
# Bob's block: newest write first, pointing at the data of its start_ts
BOB=$(awk '$1=="Bob"{on=1} on && $1!="Bob" && $1 !~ /^[0-9]+$/ {exit} on' <<<"$RAW")
W1=$(awk 'NR==1 {print $3}' <<<"$BOB")
S1=$(awk 'NR==1 {print $NF}' <<<"$BOB")
expect_match "$(sed -n 1p <<<"$BOB")" '^Bob +bal: +[0-9]+ +data @ [0-9]+$' "raw write line"
expect_match "$(sed -n 2p <<<"$BOB")" "^ +$S1 +\\\$6 \\(inline\\)$" "raw data line at the write's start_ts"
# the older version ($10) stays until garbage collection: its commit record, value included
expect_match "$(sed -n 3p <<<"$BOB")" '^ +[0-9]+ +data @ [0-9]+$' "raw older write line"
expect_match "$(sed -n 4p <<<"$BOB")" '^ +[0-9]+ +\$10 \(inline\)$' "raw older data line"
check
[ "$W1" -gt "$S1" ] 2>/dev/null || fail "commit_ts $W1 is not after start_ts $S1"
check
[ $(( W1 >> 18 )) -gt 1500000000000 ] 2>/dev/null || fail "timestamp $W1 is not hybrid ms<<18"
run scan --raw big
expect_match "$OUT" $'\n +[0-9]+ +x{40}\\.\\.\\. \\(5000 bytes\\)$' "raw data cell of a large value"
expect_no_match "$OUT" 'inline' "a large value is a data cell, not inline"
run scan --raw nosuchtable
expect_rc 0 "scan --raw of an empty table"
expect_match "$OUT" '^row +column +ts +data +lock +write$' "scan --raw of an empty table: the header only"
run scan --raw
expect_match "$OUT" $'^table accounts\n' "raw scan of all tables"
expect_match "$OUT" $'\n\ntable big\n' "raw scan of all tables: second table"
run scan --raw --json accounts --end C
expect_match "$(head -1 <<<"$OUT")" '^\{"table":"accounts","row":"Bob","column":"bal:","kind":"write","ts":[0-9]+,"write_kind":"put","start_ts":[0-9]+,"value":"\$6"\}$' "raw --json"
check
[ "$(wc -l <<<"$OUT")" -eq 2 ] || fail "raw --json: one line per cell (two versions, no data cells)"
# --since TS: only the cells written after TS (here Bob's newest commit record)
run scan --raw --json accounts --end C --since $((W1 - 1))
expect_rc 0 "scan --raw --since"
expect_match "$OUT" "^\\{\"table\":\"accounts\",\"row\":\"Bob\",\"column\":\"bal:\",\"kind\":\"write\",\"ts\":$W1,.*\\}\$" "raw --since: the newest commit record"
check
[ "$(wc -l <<<"$OUT")" -eq 1 ] || fail "raw --since: one cell above the timestamp, got: $OUT"
run scan --raw --json accounts --end C --since "$W1"
expect_out '' "raw --since the newest commit: nothing"
run scan --raw --since 12x accounts
expect_rc 2 "scan --raw --since of a non-number"
run scan --since 1 accounts
expect_rc 2 "scan --since without --raw"

# A configuration whose data_dir is missing is refused like --data DIR; init creates it.
printf '{"data_dir": "%s/hist"}\n' "$T" >"$T/hist.json"
OUT=$(timeout 20 "$P" --config "$T/hist.json" set accounts Bob bal: '$10' 2>"$T/stderr")
RC=$?
ERR=$(cat "$T/stderr")
no_sanitizer_report "$T/stderr"
expect_rc 3 "set with a configuration whose data_dir is missing"
expect_match "$ERR" "^percolator: set: $T/hist.json: data_dir '$T/hist' does not exist \\(create it with 'percolator --config $T/hist.json init'\\)\$" "missing data_dir message names it and init"
check
[ -e "$T/hist" ] && fail "set with --config created the missing data_dir"
OUT=$(timeout 20 "$P" --config "$T/hist.json" get accounts Bob bal: 2>"$T/stderr")
RC=$?
no_sanitizer_report "$T/stderr"
expect_rc 3 "get with a configuration whose data_dir is missing"
mkdir "$T/hist"
OUT=$(timeout 20 "$P" --config "$T/hist.json" scan accounts 2>"$T/stderr")
RC=$?
ERR=$(cat "$T/stderr")
no_sanitizer_report "$T/stderr"
expect_rc 3 "scan with a configuration whose data_dir is empty"
expect_match "$ERR" "^percolator: scan: $T/hist.json: data_dir '$T/hist' is empty \\(initialise it with 'percolator --config $T/hist.json init'\\)\$" "empty data_dir message"
rmdir "$T/hist"
OUT=$(timeout 20 "$P" --config "$T/hist.json" init 2>"$T/stderr")
RC=$?
ERR=$(cat "$T/stderr")
no_sanitizer_report "$T/stderr"
expect_rc 0 "init --config"
expect_out "data directory '$T/hist' is ready" "init --config names the data_dir"
check
[ -f "$T/hist/FORMAT" ] || fail "init --config made no FORMAT file in the data_dir"
timeout 20 "$P" --config "$T/hist.json" set accounts Bob bal: '$10' >/dev/null 2>"$T/stderr" ||
  fail "set after init --config"
no_sanitizer_report "$T/stderr"

# ---- gc: the replaced version goes, the newest stays ---------------------------------------------

run gc --json
expect_rc 0 "gc"
expect_match "$OUT" '^\{"safe_point":[0-9]+,"locks_resolved":0,"locks_left":0,"cells":[0-9]+,"versions_deleted":[1-9][0-9]*,"rollbacks_deleted":[0-9]+,"data_deleted":[0-9]+\}$' "gc --json"
run scan --raw accounts
BOB=$(awk '$1=="Bob"{on=1} on && $1!="Bob" && $1 !~ /^[0-9]+$/ {exit} on' <<<"$OUT")
check
[ "$(wc -l <<<"$BOB")" -eq 2 ] || fail "after gc, Bob keeps one version (got: $BOB)"
run get accounts Bob bal:
expect_out '$6' "the newest value survives gc"
run gc extra
expect_rc 2 "gc takes no operand"

# ---- a commit that crashed before its commit point leaves locks; a get resolves them -------------
# (one store commits its rows in one phase unless told otherwise: these commits take two)

printf '{"data_dir": "%s", "store": {"one_phase_commit": false}}\n' "$D" >"$T/2pc.json"
run set bank Bob bal: '$10'
run set bank Joe bal: '$2'
OUT=$(printf 'begin\nset bank Bob bal: $3\nset bank Joe bal: $9\ncommit\n' |
  PERCOLATOR_FAILPOINTS="txn.commit.before_primary=exit" timeout 20 "$P" --config "$T/2pc.json" txn 2>"$T/stderr")
RC=$?
no_sanitizer_report "$T/stderr"
expect_rc 137 "crashed commit (before the primary)"
run scan --raw bank
expect_match "$OUT" $'\nBob +bal: +([0-9]+) +\\$3 \\(inline\\) +primary\n' "raw: primary lock of the crashed txn"
expect_match "$OUT" $'\nJoe +bal: +([0-9]+) +\\$9 \\(inline\\) +primary @ Bob/bal:\n' "raw: secondary lock names the primary"
run get bank Joe bal:
expect_rc 0 "get resolves the crashed txn's lock"
expect_out '$2' "the crashed txn is rolled back"
run scan --raw bank
expect_no_match "$OUT" 'primary' "no lock left after the get"
expect_match "$OUT" 'rollback @ [0-9]+' "rollback record"
run get bank Bob bal:
expect_out '$10' "primary rolled back too"

# crashed after the commit point: a reader rolls the secondary forward
OUT=$(printf 'begin\nset bank Bob bal: $4\nset bank Joe bal: $8\ncommit\n' |
  PERCOLATOR_FAILPOINTS="txn.commit.after_primary=exit" timeout 20 "$P" --config "$T/2pc.json" txn 2>"$T/stderr")
RC=$?
no_sanitizer_report "$T/stderr"
expect_rc 137 "crashed commit (after the primary)"
run scan --raw bank
expect_no_match "$OUT" $'\nBob[^\n]*primary' "primary committed"
expect_match "$OUT" $'\nJoe +bal: +[0-9]+ +\\$8 \\(inline\\) +primary @ Bob/bal:\n' "secondary still locked"
run get bank Joe bal:
expect_out '$8' "secondary rolled forward"
run scan --raw bank
expect_no_match "$OUT" 'primary' "no lock left after roll-forward"

# ---- txn: one-shot sessions -------------------------------------------------------------------------

run_in $'begin\nget accounts Bob bal:\nset accounts Ann bal: "\\x00\\xff \\"q\\"\\n"\nget accounts Ann bal:\ncommit\n' txn
expect_rc 0 "txn session"
expect_match "$OUT" $'^ok start_ts=[0-9]+\nvalue "\\$6"\nok\nvalue "\\\\x00\\\\xff \\\\"q\\\\"\\\\n"\nok commit_ts=[0-9]+$' "txn answers"
run_in $'begin\nget accounts Ann bal:\nscan accounts A C\ncommit\n' txn --json
expect_match "$OUT" $'^\\{"op":"begin","status":"ok","start_ts":[0-9]+\\}\n\\{"op":"get","status":"ok","value_base64":"AP8gInEiCg=="\\}\n' "txn --json get of non-UTF-8 bytes"
expect_match "$OUT" $'\n\\{"op":"scan","status":"ok","count":2,"cells":\\[\\{"row":"Ann","column":"bal:","value_base64":"AP8gInEiCg=="\\},\\{"row":"Bob","column":"bal:","value":"\\$6"\\}\\]\\}\n' "txn --json scan"
expect_match "$OUT" $'\n\\{"op":"commit","status":"ok","commit_ts":0\\}$' "read-only commit"

# EOF aborts the open transaction
run_in $'begin\nset accounts Bob bal: never\n' txn
expect_rc 0 "txn ended by EOF"
run get accounts Bob bal:
expect_out '$6' "EOF aborted the open transaction"

# ---- txn: interleaved transactions through named pipes -----------------------------------------------

run set si x v: old
mkfifo "$T/in" "$T/out"
timeout 20 "$P" --data "$D" txn <"$T/in" >"$T/out" 2>"$T/session.err" &
SESSION_PIDS+=($!)
SESSION=$!
exec 3>"$T/in" 4<"$T/out"
# ask LINE: sends one line, reads one answer line into REPLY
ask() {
  printf '%s\n' "$1" >&3 2>/dev/null
  IFS= read -r -t 10 REPLY <&4 || REPLY="<no answer to: $1>"
}
expect_reply() { # LINE REGEX
  ask "$1"
  expect_match "$REPLY" "$2" "session: $1"
}
# the session holds the data directory: a second process is refused
expect_reply '@A begin' '^@A ok start_ts=[0-9]+$'
run --timeout 1s get si x v:
expect_rc 3 "a second process on a held data directory, past its --timeout"
expect_match "$ERR" 'in use by another process' "busy message"
expect_reply '@B begin' '^@B ok start_ts=[0-9]+$'
expect_reply '@B set si x v: new' '^@B ok$'
expect_reply '@B commit' '^@B ok commit_ts=[0-9]+$'
expect_reply '@A get si x v:' '^@A value "old"$'
expect_reply '@A set si x v: mine' '^@A ok$'
expect_reply '@A commit' '^@A error conflict: .+'
expect_reply '@A get si x v:' '^@A error wrong_state: no open transaction'
# the default transaction sees B's commit
expect_reply 'begin' '^ok start_ts=[0-9]+$'
expect_reply 'get si x v:' '^value "new"$'
expect_reply 'abort' '^ok$'
# malformed lines get error answers and the session goes on
expect_reply 'set si x "unbalanced' '^error invalid_argument: unbalanced quote'
expect_reply 'frobnicate a b' "^error invalid_argument: unknown command 'frobnicate'"
expect_reply 'get si x' '^error invalid_argument: missing arguments; usage: get TABLE ROW COLUMN'
expect_reply 'commit now' '^error invalid_argument: too many arguments; usage: commit'
expect_reply 'get "si" x v: "bad\q"' '^error invalid_argument: bad escape'
expect_reply 'get si "x"y v:' '^error invalid_argument: text right after a closing quote'
expect_reply '@bad! begin' '^error invalid_argument: bad transaction name'
expect_reply 'get si x v:' '^error wrong_state: no open transaction'
expect_reply 'begin' '^ok start_ts=[0-9]+$'
expect_reply 'get si "\x78" "v:"' '^value "new"$'
expect_reply 'commit' '^ok commit_ts=0$'
expect_reply 'quit' '^ok$'
exec 3>&- 4<&-
wait "$SESSION"
RC=$?
expect_rc 0 "session exit after quit"
no_sanitizer_report "$T/session.err"

# the same interleaving with --json answers
run set si y v: old
OUT=$(printf '%s\n' '@A begin' '@B begin' '@B set si y v: new' '@B commit' '@A get si y v:' \
  '@A set si y v: mine' '@A commit' 'nonsense' | timeout 20 "$P" --data "$D" txn --json 2>"$T/stderr")
RC=$?
no_sanitizer_report "$T/stderr"
expect_rc 0 "json session"
expect_match "$(sed -n 5p <<<"$OUT")" '^\{"txn":"A","op":"get","status":"ok","value":"old"\}$' "json: A still sees the old value"
expect_match "$(sed -n 7p <<<"$OUT")" '^\{"txn":"A","op":"commit","status":"conflict","error":".+"\}$' "json: A's commit conflicts"
expect_match "$(sed -n 8p <<<"$OUT")" '^\{"op":"nonsense","status":"invalid_argument","error":"unknown command' "json: unknown command"

# ---- a commit whose outcome is unknown: its own status, exit code and JSON field ------------------
# failpoints: the store fails right after applying the commit (its reply is lost) and the
# client cannot ask the primary afterwards (settling fails too)

UNKNOWN_FP="store.after_apply=1*return;txn.settle.before_check=return"
OUT=$(PERCOLATOR_FAILPOINTS="$UNKNOWN_FP" timeout 20 "$P" --data "$D" set unk a c: v1 2>"$T/stderr")
RC=$?
ERR=$(cat "$T/stderr")
no_sanitizer_report "$T/stderr"
expect_rc 4 "set whose commit outcome is unknown"
expect_match "$ERR" '^percolator: set: commit outcome unknown \(readers will settle it\): failpoint store\.after_apply$' "unknown outcome message names the cause"
run get unk a c:
expect_out 'v1' "the commit of unknown outcome had been applied"
# two rows (the commit of the primary, the 3rd write, is the one whose reply is lost)
OUT=$(printf 'begin\nset unk a c: v2\nset unk b c: v2\ncommit\n' |
  PERCOLATOR_FAILPOINTS="store.after_apply=3*return;txn.settle.before_check=return" \
    timeout 20 "$P" --config "$T/2pc.json" txn --json 2>"$T/stderr")
RC=$?
no_sanitizer_report "$T/stderr"
expect_rc 0 "json session with a commit of unknown outcome"
expect_match "$(sed -n 4p <<<"$OUT")" '^\{"op":"commit","status":"unknown","error":"commit outcome unknown \(readers will settle it\): failpoint store\.after_apply"\}$' "json: the unknown outcome is a status"
OUT=$(printf 'begin\nset unk a c: v3\ncommit\n' |
  PERCOLATOR_FAILPOINTS="$UNKNOWN_FP" timeout 20 "$P" --data "$D" txn 2>"$T/stderr")
no_sanitizer_report "$T/stderr"
expect_match "$(sed -n 3p <<<"$OUT")" '^error unknown: commit outcome unknown' "text: the unknown outcome is a status"
# readers settle it: the primary had committed, so the secondary rolls forward
run scan unk
expect_out $'a\tc:\tv3\nb\tc:\tv2' "the commits of unknown outcome are settled by readers"

# ---- PERCOLATOR_FAILPOINTS naming a point that does not exist is refused -------------------------

TYPO_FP="txn.comit.before_primary=exit"
TYPO_MSG="PERCOLATOR_FAILPOINTS: no failpoint named 'txn.comit.before_primary' \\(did you mean 'txn.commit.before_primary'\\?\\)"
OUT=$(PERCOLATOR_FAILPOINTS="$TYPO_FP" timeout 20 "$P" --data "$D" set unk a c: typo 2>"$T/stderr")
RC=$?
ERR=$(cat "$T/stderr")
no_sanitizer_report "$T/stderr"
expect_rc 3 "set with an unknown failpoint"
expect_match "$ERR" "^percolator: set: $TYPO_MSG\$" "unknown failpoint message"
run get unk a c:
expect_out 'v3' "nothing was written with an unknown failpoint"
# a daemon refuses to start, before it listens
printf '{"data_dir": "%s/daemon", "tso": {"listen": "127.0.0.1:0"}}\n' "$T" >"$T/daemon.json"
OUT=$(PERCOLATOR_FAILPOINTS="$TYPO_FP" timeout 20 "$P" tso --config "$T/daemon.json" \
  --ready-file "$T/daemon.ready" 2>"$T/stderr")
RC=$?
ERR=$(cat "$T/stderr")
no_sanitizer_report "$T/stderr"
expect_rc 3 "daemon with an unknown failpoint"
expect_match "$ERR" "^percolator: tso: $TYPO_MSG\$" "daemon: unknown failpoint message"
check
[ -e "$T/daemon.ready" ] && fail "the daemon with an unknown failpoint got ready"

echo "test_cli: $CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ]
