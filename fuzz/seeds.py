#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/TARGET/.

Each seed is a small well-formed input in the target's format (see the
comment at the top of fuzz_TARGET.c), built here from the wire formats of
tablet/tablet.h, tso/tso_wire.h, lockservice/ls_internal.h, net/rpc.h and
core/keys.h, so that the fuzzer starts from inputs that reach deep. Run it
after a format changes; the seeds are committed.
"""
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def u8(v): return struct.pack(">B", v)
def u16(v): return struct.pack(">H", v)
def u32(v): return struct.pack(">I", v)
def u64(v): return struct.pack(">Q", v)
def s(b): return u32(len(b)) + b
def opt(b): return u8(0) + s(b"") if b is None else u8(1) + s(b)
def cell(t, r, c): return s(t) + s(r) + s(c)
def chunk(tag, body): return u8(tag) + u16(len(body)) + body


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- core/keys.c -----------------------------------------------------------

def varint(v):
    out = b""
    while v >= 0x80:
        out += u8((v & 0x7F) | 0x80)
        v >>= 7
    return out + u8(v)


def esc(b): return b.replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def lock(start=90, kind=0, ttl=3000, session=7, flags=1, p=(b"t", b"r", b"c"), value=b"v"):
    out = u64(start) + u8(kind) + u32(ttl) + u64(session) + u8(flags)
    out += s(p[0]) + s(p[1]) + s(p[2])
    return out + (u8(1) + s(value) if value is not None else u8(0))


def keys():
    at_rest = u8(0x42) + u8(0 | 1 << 2) + u64(100) + varint(10) + varint(5) + b"hello"
    write("keys", "meta-at-rest", u8(0) + at_rest)
    write("keys", "meta-lock", u8(0) + u8(0x41) + lock())
    write("keys", "meta-lock-head-latest", u8(0) + u8(0x40 | 1 | 2 | 8) + u64(120) +
          lock(kind=3, flags=2, value=None) + u8(1 | 0 << 2) + u64(100) + varint(3))
    write("keys", "meta-start-whole", u8(0) + u8(0x40 | 2 | 16) + u8(0 | 2 << 2) + u64(100) + u64(150))
    write("keys", "write-inline", u8(1) + u8(1) + u8(0) + u64(90) + u64(100) + u8(1) + s(b"value"))
    write("keys", "write-rollback", u8(1) + u8(1) + u8(2) + u64(90) + u64(90) + u8(0))
    write("keys", "key-meta", u8(2) + b"m" + esc(b"tbl") + esc(b"r\x00w") + esc(b"col"))
    write("keys", "key-write", u8(2) + b"w" + esc(b"tbl") + esc(b"row") + esc(b"c") + u64(~100 & (2**64 - 1)))
    write("keys", "key-notify", u8(2) + b"n" + u16(513) + esc(b"t") + esc(b"row") + esc(b"c") + u64(5))
    write("keys", "escape-pair", u8(3) + u8(4) + b"ab\x00" + b"ab\x00\x00")
    write("keys", "ack-column", u8(4) + b"\xffack\x00" + b"counter\x00" + b"col")


# ---- config/ ----------------------------------------------------------------

def config():
    write("config", "empty-object", b"{}")
    write("config", "embedded", b'{"data_dir": "/tmp/d", "store": {"sync": false, "cache_mb": 8}}')
    write("config", "cluster", b"""{
  "secret": "s3cr3t",
  "log": {"level": "debug"},
  "store": {"sync": true, "lock_ttl_ms": 5000, "timeout_ms": 20000, "one_phase_commit": false,
            "gc_rate": 8, "gc_interval_ms": 0, "gc_lifetime_ms": 60000, "meta_cache_mb": 4,
            "write_buffer_mb": 16, "lazy_start": true},
  "tso": {"listen": "127.0.0.1:7000", "http": "127.0.0.1:7001", "data_dir": "/var/tso",
          "window_ms": 1000},
  "zookeeper": {"connect": "[::1]:2181,zk2:2181", "root": "/percolator/fuzz",
                "session_timeout_ms": 5000},
  "tablets": [
    {"name": "t1", "listen": "10.0.0.1:7100", "http": "10.0.0.1:7101", "end": "m\\u0000x"},
    {"name": "t2", "listen": "10.0.0.2:7100", "start": "m\\u0000x", "end": "q"},
    {"name": "t3", "listen": "10.0.0.3:7100", "start": "q", "data_dir": "/data/t3"}
  ],
  "workers": {"threads": 8, "scan": {"buckets_per_claim": 32, "idle_ms": 250, "stable_ms": 500},
              "max_failures": 3, "backoff_ms": 500, "http": "127.0.0.1:0",
              "plugins": [{"path": "/opt/p/a.so"},
                          {"path": "b.so", "config": {"table": "docs", "n": [1, 2.5, null]}}]}
}
""")
    write("config", "typo", b'{"store": {"snyc": true}}')
    write("config", "duplicate", b'{"log": {}, "log": {}}')
    write("config", "empty-keys", b'{"": {"": ""}}')
    write("config", "empty-key-twice", b'{"": 1, "": 2}')


# ---- apps/cli/txn_line.c, apps/dedup/dedup_text.c ---------------------------

def txn_line():
    for i, line in enumerate([
            b"begin", b"@t1 begin", b'set accounts Bob bal: "$10"',
            b'get "t\\x00" "r\\n" "c\\"d"', b"scan docs a z", b"@a-b.c_9 commit",
            b"delete t r c", b"abort", b"help", b"quit", b'set t "" c "\\0\\xff\\\\"']):
        write("txn_line", "line-%02d" % i, line)


def dedup_terms():
    write("dedup_terms", "prose", b"The quick brown fox jumps over the lazy dog. THE DOG sleeps; "
          b"foxes run 42 times, 4x4=16!")
    write("dedup_terms", "long-run", b"a" * 70 + b" " + b"b1" * 40 + b"\xc3\xa9t\xc3\xa9 caf\xc3\xa9")
    write("dedup_terms", "license", b"Permission is hereby granted, free of charge, to any person "
          b"obtaining a copy of this software (the \"Software\"), to deal in the Software\n")


# ---- the request handlers ---------------------------------------------------

def tablet():
    """fuzz_tablet_store: requests; fuzz_tablet: the same after a byte that
    picks the made-up store's answers."""
    for name, data in tablet_requests():
        write("tablet_store", name, data)
        for seed in (0, 3, 0x85):
            write("tablet", "%s-%02x" % (name, seed), u8(seed) + data)


def tablet_requests():
    out = []
    def write(target, name, data):
        out.append((name, data))
    t = b"tbl"
    mut = cell(t, b"row", b"col") + u8(0) + u8(1) + s(b"value")
    mut2 = cell(t, b"row2", b"col") + u8(1) + u8(0) + s(b"")
    prim = cell(t, b"row", b"col")
    prewrite = prim + u64(100) + u32(3000) + u64(7) + u32(2) + mut + mut2
    commit = u64(100) + u64(110) + u32(2) + prim + cell(t, b"row2", b"col")
    get = cell(t, b"row", b"col") + u64(200)
    scan = opt(t) + opt(b"") + opt(None) + opt(None) + u64(200) + u32(10)
    write("tablet", "prewrite-commit-get-scan",
          chunk(0x11, prewrite) + chunk(0x12, commit) + chunk(0x10, get) + chunk(0x16, scan))
    write("tablet", "one-phase-clear",
          chunk(0x15, u64(300) + u32(1) + mut + cell(t, b"row", b"col") + u64(250)) +
          chunk(0x19, cell(t, b"row", b"col")))
    write("tablet", "prewrite-check-heartbeat-rollback",
          chunk(0x11, prewrite) + chunk(0x14, prim + u64(100) + u64(5 << 18) + u8(0)) +
          chunk(0x1A, prim + u64(100) + u32(9000)) + chunk(0x1B, u64(1000)) +
          chunk(0x13, u64(100) + u32(1) + prim))
    write("tablet", "notify-scan-clear",
          chunk(0x15, u64(400) + u32(1) + cell(t, b"n", b"c") + u8(0) + u8(1) + s(b"x")) +
          chunk(0x1D, u32(0) + u32(1024) + u8(0) + u32(100)) +
          chunk(0x1D, u32(0) + u32(1024) + u8(1) + cell(t, b"n", b"c") + u64(1) + u8(0) + u32(5)) +
          chunk(0x1E, cell(t, b"n", b"c") + u64(1 << 40)))
    record = u8(1) + u8(0) + s(t) + s(b"col")      # keys.h's observer record: strong
    weak = u8(1) + u8(1) + s(t) + s(b"other")
    write("tablet", "observer-add-commit-list-remove",
          chunk(0x1F, u8(1) + s(b"obs.strong-1") + s(record)) +
          chunk(0x1F, u8(1) + s(b"obs_weak") + s(weak)) + chunk(0x20, b"") +
          chunk(0x15, u64(600) + u32(1) + mut + cell(t, b"row", b"col") + u64(550)) +
          chunk(0x1D, u32(0) + u32(1024) + u8(0) + u32(100)) +
          chunk(0x1F, u8(0) + s(b"obs.strong-1")) + chunk(0x1F, u8(0) + s(b"never-added")) +
          chunk(0x20, b""))
    write("tablet", "get-many",
          chunk(0x11, prewrite) + chunk(0x12, commit) +
          chunk(0x11, cell(t, b"row3", b"col") + u64(150) + u32(3000) + u64(8) + u32(1) +
                cell(t, b"row3", b"col") + u8(0) + u8(1) + s(b"held")) +
          chunk(0x21, u64(200) + u32(4) + cell(t, b"row", b"col") + cell(t, b"row2", b"col") +
                cell(t, b"row3", b"col") + cell(t, b"absent", b"col")) +
          chunk(0x21, u64(200) + u32(0)))
    # a deletion whose list of observers lacks its last NUL: malformed (fuzz_tablet's crash)
    write("tablet", "clear-unterminated-list",
          chunk(0x1E, cell(t, b"n", b"c") + u64(1 << 40) + s(b"obs.a\x00obs.b")) +
          chunk(0x15, u64(700) + u32(1) + mut + cell(t, b"row", b"col") + u64(650) + s(b"obs.a")))
    write("tablet", "raw-gc-info",
          chunk(0x15, u64(500) + u32(1) + mut) + chunk(0x17, opt(None) + opt(None) + opt(None)) +
          chunk(0x17, opt(t) + opt(b"a") + opt(b"z")) + chunk(0x1C, u64(450) + u32(0)) +
          chunk(0x18, b""))
    return out


def tso():
    write("tso", "timestamps-info", chunk(0x10, u32(1)) + chunk(0x10, u32(1000)) + chunk(0x11, b""))
    write("tso", "large-batch", chunk(0x10, u32(1000000)) + chunk(0x11, b""))


# ---- the client's decoders --------------------------------------------------

def lock_wire(value=b"v"):
    return (u64(90) + u8(0) + u32(3000) + u64(7) + u8(1) + u8(1) + s(value) + s(b"t") + s(b"a") +
            s(b"c") + s(b"t") + s(b"z") + s(b"c"))


def replies():
    ok, msg = u8(0), s(b"")
    def reply(body): return chunk(0, body)
    write("replies", "get-value", u8(0) + u8(0) + reply(ok + s(b"value") + msg))
    write("replies", "get-locked", u8(0) + u8(0) + reply(u8(3) + lock_wire() + s(b"locked")))
    write("replies", "get-fresh", u8(1) + u8(0) + reply(ok + u64(1 << 20) + s(b"v") + msg))
    write("replies", "prewrite-locked", u8(2) + u8(0) + reply(u8(3) + lock_wire() + s(b"locked")))
    write("replies", "one-phase", u8(3) + u8(8) + reply(ok + u64(300) + u8(1) + msg))
    write("replies", "commit-aborted", u8(4) + u8(0) + reply(u8(7) + s(b"aborted")))
    write("replies", "rollback", u8(5) + u8(0) + reply(ok + msg))
    write("replies", "check-txn", u8(6) + u8(0) + reply(ok + u8(1) + u64(200) + msg))
    write("replies", "heartbeat", u8(7) + u8(0) + reply(ok + msg))
    cells = u32(2) + s(b"a") + s(b"c") + s(b"1") + s(b"b") + s(b"c") + s(b"2")
    write("replies", "scan-two-tablets", u8(8) + u8(0) + reply(ok + cells + msg) +
          reply(ok + u32(1) + s(b"m") + s(b"c") + s(b"3") + msg))
    write("replies", "scan-locked", u8(8) + u8(0) + reply(u8(3) + u32(0) + lock_wire() + s(b"l")))
    raw = (u8(1) + s(b"t") + s(b"a") + s(b"c") + u64(5) + opt(b"v") + u8(0) + u64(4) + opt(b"t") +
           s(b"a") + s(b"c") + u32(3000) + u64(7) + u8(0) + opt(None) + u8(0))
    write("replies", "raw-scan", u8(9) + u8(0) + reply(ok + u32(1) + raw + msg) +
          reply(ok + u32(0) + msg))
    write("replies", "scan-locks", u8(10) + u8(0) + reply(ok + u8(0) + u32(1) + lock_wire() + msg) +
          reply(ok + u8(1) + u32(0) + msg))
    write("replies", "gc", u8(11) + u8(0) + reply(ok + u64(1) + u64(2) + u64(3) + u64(4) + msg) +
          reply(ok + u64(0) * 4 + msg))
    note = cell(b"t", b"a", b"c") + u64(9) + u8(0)
    write("replies", "scan-notify-more", u8(12) + u8(0) + reply(ok + u8(1) + u32(1) + note + msg) +
          reply(ok + u8(0) + u32(1) + note + msg) + reply(ok + u8(0) + u32(0) + msg))
    write("replies", "clear-notify", u8(13) + u8(0) + reply(ok + msg))
    write("replies", "tso-fetch", u8(14) + u8(0) + reply(u64(1 << 30)))
    write("replies", "tso-info", u8(15) + u8(0) + reply(u64(1 << 30)))
    info = ok + s(b"t1") + u32(1) + s(b"") + s(b"m") + u64(42) + u64(5) + u64(1) + u64(2) + u64(3) + u64(4)
    write("replies", "tablet-info", u8(16) + u8(0) + reply(info + msg))
    write("replies", "rpc-error", u8(0) + u8(0) + chunk(9, b"unknown opcode"))
    # GET_MANY: cell "a" of the left tablet; or (flag 8) "a" and "b" there and "z" on the right
    write("replies", "get-many-one", u8(17) + u8(0) + reply(ok + ok + s(b"v") + msg))
    write("replies", "get-many-both", u8(17) + u8(8) +
          reply(ok + ok + s(b"1") + u8(3) + lock_wire() + msg) + reply(ok + u8(1) + msg))
    write("replies", "get-many-failed", u8(17) + u8(8) + reply(ok + ok + s(b"1") + u8(1) + msg) +
          reply(u8(5) + s(b"snapshot older than the garbage-collection safe point")))
    # OBSERVERS from each tablet in turn, OBSERVER to each (add with flag 8, else remove)
    rec = u8(1) + u8(0) + s(b"t") + s(b"c")
    write("replies", "observers", u8(18) + u8(0) +
          reply(ok + u32(2) + s(b"o1") + s(rec) + s(b"o2") + s(u8(1) + u8(1) + s(b"u") + s(b"d")) +
                msg) + reply(ok + u32(0) + msg))
    write("replies", "observer-add", u8(19) + u8(8) + reply(ok + msg) + reply(ok + msg))
    write("replies", "observer-remove-denied", u8(19) + u8(0) + reply(ok + msg) +
          reply(u8(15) + s(b"needs the system identity")))


# ---- net/rpc.h frames -------------------------------------------------------

def frame(op, body, id_, status=0, version=1):
    return u32(11 + len(body)) + u8(version) + u8(op) + u8(status) + u64(id_) + body


def frame2(op, body, id_, budget=0, status=0):
    """A version-2 frame: the 15-byte header ends with the caller's budget in ms."""
    return u32(15 + len(body)) + u8(2) + u8(op) + u8(status) + u64(id_) + u32(budget) + body


def rpc():
    write("rpc_server", "v2-pipelined", u8(0) + frame2(0x10, b"a", 1, 5000) +
          frame2(0x11, b"bb", 2, 0) + frame2(0x12, b"c", 3, 1) + frame2(0x41, b"x", 4, 100) +
          frame2(0x05, b"", 5, 2**32 - 1))
    write("rpc_server", "mixed-versions", u8(0) + frame(0x10, b"v1", 1) + frame2(0x10, b"v2", 2, 250) +
          frame(0x11, b"", 3) + frame2(0x11, b"", 4))
    write("rpc_server", "v2-hello-echo", u8(1) + frame2(0x01, b"\x00" * 32, 0, 1000) +
          frame2(0x03, b"\x11" * 32, 0, 1000) + frame2(0x10, b"abc", 1, 1000))
    write("rpc_server", "v2-half-frame", u8(0) + frame2(0x10, b"abcdef", 1, 50)[:17])
    write("rpc_server", "v2-short-length", u8(0) + u32(11) + u8(2) + u8(0x10) + u8(0) + u64(1))
    write("rpc_frames", "requests-v2", u8(0) + frame2(0x01, b"nonce", 0, 0) +
          frame2(0x10, b"abc", 1, 5000) + frame(0x10, b"old", 2) + frame2(0x7f, b"", 2**64 - 1, 2**32 - 1))
    write("rpc_frames", "replies-v2", u8(1) + frame2(0x81, b"", 0) + frame2(0x90, b"reply", 1, status=3) +
          frame(0x90, b"v1", 2))
    write("rpc_frames", "cut-v2", u8(1) + frame2(0x90, b"abcdef", 9, 0)[:17])
    write("rpc_frames", "v2-short-length", u8(0) + u32(12) + u8(2) + u8(0x10) + u8(0) + u64(1) + b"x")
    write("rpc_frames", "small-limit-v2", u8(2) + frame2(0x10, b"x" * 49, 1, 7) + frame2(0x10, b"y", 2))
    write("rpc_client", "ok-v2", u8(0) + frame2(0x90, b"reply", 1))
    write("rpc_client", "hello-then-ok-v2", u8(1) + frame2(0x81, b"\x22" * 32, 0) + frame2(0x83, b"\x33" * 32, 0) +
          frame2(0x90, b"r", 1))
    write("rpc_client", "error-v2", u8(0) + frame2(0x90, b"bad request", 1, status=3))
    write("rpc_client", "mixed-versions", u8(0) + frame2(0x90, b"x", 7) + frame(0x90, b"y", 1))

    write("rpc_server", "hello-echo", u8(1) + frame(0x01, b"fuzz", 0) + frame(0x10, b"abc", 1))
    write("rpc_server", "pipelined", u8(0) + frame(0x10, b"a", 1) + frame(0x11, b"bb", 2) +
          frame(0x02, b"", 3) + frame(0x41, b"x", 4) + frame(0x05, b"", 5))
    write("rpc_server", "wrong-secret", u8(1) + frame(0x01, b"nope", 0) + frame(0x10, b"", 1))
    write("rpc_server", "no-hello", u8(1) + frame(0x10, b"", 1))
    write("rpc_server", "half-frame", u8(0) + frame(0x10, b"abcdef", 1)[:9])
    write("rpc_frames", "requests", u8(0) + frame(0x01, b"secret", 0) + frame(0x10, b"abc", 1) +
          frame(0x7f, b"", 2**64 - 1))
    write("rpc_frames", "replies", u8(1) + frame(0x81, b"", 0) + frame(0x90, b"reply", 1, status=3))
    write("rpc_frames", "small-limit", u8(2) + frame(0x10, b"x" * 60, 1) + frame(0x10, b"y", 2))
    write("rpc_frames", "cut", u8(1) + frame(0x90, b"abcdef", 9)[:12])
    write("rpc_client", "ok", u8(0) + frame(0x90, b"reply", 1))
    write("rpc_client", "hello-then-ok", u8(1) + frame(0x81, b"", 0) + frame(0x90, b"r", 1))
    write("rpc_client", "error", u8(0) + frame(0x90, b"bad request", 1, status=3))
    write("rpc_client", "hello-refused", u8(1) + frame(0x81, b"wrong secret", 0, status=3))
    write("rpc_client", "late-other-id", u8(0) + frame(0x90, b"x", 7) + frame(0x90, b"y", 1))


def main():
    keys()
    config()
    txn_line()
    dedup_terms()
    tablet()
    tso()
    replies()
    rpc()
    return 0


if __name__ == "__main__":
    sys.exit(main())
