/* test_tablet_wire.c — the tablet server's request handler (core/tablet.h)
 * on a local store, without any network: every op with a valid body
 * round-trips through the pc_wire_* encoders/decoders, and every malformed
 * body — each truncation of each valid body, trailing garbage, lying counts
 * and lengths, empty table/row/column, NUL in table names, rows outside the
 * tablet's range, unknown ops, and thousands of random or mutated bodies —
 * gets an error answer with a message and never a crash (run it under ASan).
 *
 * A handler answer is either a reply body "u8 store status, payload, str
 * message" (the handler returns PC_OK) or, for an op the tablet does not
 * know, an error status with err's text (the rpc layer sends it as the
 * frame's status). check_error() accepts both.
 *
 * The whole-request codecs of tablet_wire.h on their own: each valid body,
 * built here field by field, decodes and encodes back to the same bytes, and
 * a refusal names the op and the field at fault. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <percolator/observer.h>

#include "base/error.h"
#include "core/store.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"
#include "tests/testutil.h"

#define TABLE "tbl"
#define T_NAME "tw1"
#define R_START "m"
#define R_END "t"

typedef struct fixture {
  char *dir;
  pc_tablet_t *tablet;
} fixture_t;

/* far above the timestamps the tests write with, so every GC safe point they use is one
 * the "oracle" has issued */
static uint64_t next_commit_ts = (uint64_t)10000000 << PC_TS_LOGICAL_BITS;

static pc_status_t ts_source(void *ctx, uint64_t *ts, pc_error_t *err) {
  (void)ctx;
  (void)err;
  *ts = ++next_commit_ts;
  return PC_OK;
}

/* A tablet named T_NAME serving [R_START, R_END) on a new store in dir/sub. */
static pc_tablet_t *new_tablet(const char *dir, const char *sub) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, sub);
  pc_local_options_t lo = {1, 0, 1u << 20, 1u << 20, 4u << 20, 0};
  pc_error_t err;
  pc_store_t *s = pc_local_store_open(path, &lo, &err);
  if (!s) fail_msg("pc_local_store_open: %s", err.text);
  pc_row_range_t range = {R_START, 1, R_END, 1};
  pc_tablet_t *t = pc_tablet_create(T_NAME, s, &range, ts_source, NULL);
  assert_non_null(t);
  return t;
}

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->dir = tu_mkdtemp("tablet-wire");
  f->tablet = new_tablet(f->dir, "store");
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pc_tablet_destroy(f->tablet);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

/* ---- calling the handler and reading its answer ------------------------- */

typedef struct answer {
  pc_status_t rc;     /* what the handler returned */
  pc_error_t err;     /* its err when rc != PC_OK */
  pc_buf_t reply;     /* the reply body when rc == PC_OK */
  pc_status_t status; /* the store status byte (rc == PC_OK) */
  const char *payload;
  size_t plen;        /* payload between the status byte and the message */
  char msg[512];      /* the message */
  int well_formed;    /* 1 when the reply has the documented shape */
} answer_t;

static void answer_free(answer_t *a) { pc_buf_free(&a->reply); }

/* Parses the reply of op: u8 status, payload, u32 mlen, message of mlen bytes at the end. */
static void parse_reply(answer_t *a, uint8_t op) {
  a->well_formed = 0;
  const char *p = a->reply.p;
  size_t n = a->reply.len;
  if (n < 5) return;
  a->status = (pc_status_t)(unsigned char)p[0];
  /* the message is last: find a length prefix that ends exactly at the end */
  for (size_t mlen = 0; mlen + 5 <= n && mlen < sizeof a->msg; mlen++) {
    size_t at = n - mlen - 4;
    uint32_t v = (uint32_t)(unsigned char)p[at] << 24 | (uint32_t)(unsigned char)p[at + 1] << 16 |
                 (uint32_t)(unsigned char)p[at + 2] << 8 | (uint32_t)(unsigned char)p[at + 3];
    if (v != mlen) continue;
    /* for an error other than LOCKED (or GET_FRESH's NOT_FOUND, which
     * carries its timestamp) there is no payload: be exact */
    int payload_ok = a->status == PC_OK || a->status == PC_LOCKED ||
                     (a->status == PC_NOT_FOUND && op == PC_TABLET_OP_GET_FRESH);
    if (!payload_ok && at != 1) continue;
    memcpy(a->msg, p + at + 4, mlen);
    a->msg[mlen] = '\0';
    a->payload = p + 1;
    a->plen = at - 1;
    a->well_formed = a->status <= PC_INTERNAL;
    /* a success carries an empty message; prefer the shortest match */
    return;
  }
}

static answer_t call_on(pc_tablet_t *t, uint8_t op, const void *body, size_t len) {
  answer_t a;
  memset(&a, 0, sizeof a);
  pc_error_clear(&a.err);
  /* copy the body into an exact-size heap block so ASan sees any overread */
  char *copy = malloc(len ? len : 1);
  assert_non_null(copy);
  if (len) memcpy(copy, body, len);
  a.rc = pc_tablet_rpc_handler(t, op, len ? copy : NULL, len, &a.reply, &a.err);
  free(copy);
  if (a.rc == PC_OK) parse_reply(&a, op);
  return a;
}

static answer_t call(fixture_t *f, uint8_t op, const void *body, size_t len) {
  return call_on(f->tablet, op, body, len);
}

/* The answer is an error with a message (in either form). */
static void check_error(const answer_t *a, const char *what) {
  if (a->rc != PC_OK) {
    if (a->err.text[0] == '\0') fail_msg("%s: error %d without a message", what, a->rc);
    return;
  }
  if (!a->well_formed) fail_msg("%s: malformed reply of %zu bytes", what, a->reply.len);
  if (a->status == PC_OK) fail_msg("%s: accepted", what);
  if (a->msg[0] == '\0') fail_msg("%s: error %d without a message", what, a->status);
}

static const char *answer_text(const answer_t *a) { return a->rc != PC_OK ? a->err.text : a->msg; }

/* ---- encoding valid bodies ---------------------------------------------- */

static pc_cell_t cell(const char *row, const char *col) {
  return (pc_cell_t){TABLE, row, strlen(row), col, strlen(col)};
}

static pc_mutation_t put(const char *row, const char *col, const char *v) {
  return (pc_mutation_t){cell(row, col), PC_WRITE_PUT, v, strlen(v), 0};
}

static void enc_get(pc_buf_t *b, const pc_cell_t *c, uint64_t ts) {
  assert_int_equal(pc_wire_put_cell(b, c), 0);
  assert_int_equal(pc_buf_u64(b, ts), 0);
}

static void enc_prewrite(pc_buf_t *b, const pc_cell_t *primary, uint64_t start, uint32_t ttl,
                         uint64_t session, const pc_mutation_t *m, uint32_t n) {
  assert_int_equal(pc_wire_put_cell(b, primary), 0);
  assert_int_equal(pc_buf_u64(b, start) || pc_buf_u32(b, ttl) || pc_buf_u64(b, session) ||
                       pc_buf_u32(b, n),
                   0);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(pc_wire_put_mutation(b, &m[i]), 0);
}

static void enc_commit(pc_buf_t *b, uint64_t start, uint64_t commit, const pc_cell_t *c,
                       uint32_t n) {
  assert_int_equal(pc_buf_u64(b, start) || pc_buf_u64(b, commit) || pc_buf_u32(b, n), 0);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(pc_wire_put_cell(b, &c[i]), 0);
}

static void enc_rollback(pc_buf_t *b, uint64_t start, const pc_cell_t *c, uint32_t n) {
  assert_int_equal(pc_buf_u64(b, start) || pc_buf_u32(b, n), 0);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(pc_wire_put_cell(b, &c[i]), 0);
}

static void enc_check_txn(pc_buf_t *b, const pc_cell_t *c, uint64_t start, uint64_t now,
                          int dead) {
  assert_int_equal(pc_wire_put_cell(b, c), 0);
  assert_int_equal(pc_buf_u64(b, start) || pc_buf_u64(b, now) || pc_buf_u8(b, (uint8_t)dead), 0);
}

static void enc_one_phase(pc_buf_t *b, uint64_t start, const pc_mutation_t *m, uint32_t n) {
  assert_int_equal(pc_buf_u64(b, start) || pc_buf_u32(b, n), 0);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(pc_wire_put_mutation(b, &m[i]), 0);
}

static void enc_scan(pc_buf_t *b, const char *table, const char *start, const char *col,
                     const char *end, uint64_t ts, uint32_t limit) {
  assert_int_equal(pc_wire_put_opt(b, table, table ? strlen(table) : 0), 0);
  assert_int_equal(pc_wire_put_opt(b, start, start ? strlen(start) : 0), 0);
  assert_int_equal(pc_wire_put_opt(b, col, col ? strlen(col) : 0), 0);
  assert_int_equal(pc_wire_put_opt(b, end, end ? strlen(end) : 0), 0);
  assert_int_equal(pc_buf_u64(b, ts) || pc_buf_u32(b, limit), 0);
}

static void enc_raw_scan(pc_buf_t *b, const char *table, const char *start, const char *end) {
  assert_int_equal(pc_wire_put_opt(b, table, table ? strlen(table) : 0), 0);
  assert_int_equal(pc_wire_put_opt(b, start, start ? strlen(start) : 0), 0);
  assert_int_equal(pc_wire_put_opt(b, end, end ? strlen(end) : 0), 0);
}

static void enc_heartbeat(pc_buf_t *b, const pc_cell_t *c, uint64_t start, uint32_t ttl) {
  assert_int_equal(pc_wire_put_cell(b, c), 0);
  assert_int_equal(pc_buf_u64(b, start) || pc_buf_u32(b, ttl), 0);
}

static void enc_gc(pc_buf_t *b, uint64_t safe_point, uint32_t rate) {
  assert_int_equal(pc_buf_u64(b, safe_point) || pc_buf_u32(b, rate), 0);
}

static void enc_scan_notify(pc_buf_t *b, uint32_t lo, uint32_t hi, const pc_notification_t *after,
                            uint32_t limit) {
  assert_int_equal(pc_buf_u32(b, lo) || pc_buf_u32(b, hi) || pc_buf_u8(b, after != NULL), 0);
  if (after) assert_int_equal(pc_wire_put_notification(b, after), 0);
  assert_int_equal(pc_buf_u32(b, limit), 0);
}

/* CLEAR_NOTIFY on behalf of the test's observers (test_notify_ops registers them). */
#define CLEAR_FOR "obs.a\0obs.b\0obs.x\0"
static void enc_clear_notify(pc_buf_t *b, const pc_cell_t *c, uint64_t below) {
  assert_int_equal(pc_wire_put_cell(b, c) || pc_buf_u64(b, below) ||
                       pc_buf_str(b, CLEAR_FOR, sizeof CLEAR_FOR - 1),
                   0);
}

/* A CLEAR_NOTIFY body of an encoded cell (a bad one, say) below 900, for no
 * observers. */
static void enc_clear_raw(pc_buf_t *b, const pc_buf_t *cell) {
  assert_int_equal(pc_buf_append(b, cell->p, cell->len) || pc_buf_u64(b, 900) ||
                       pc_buf_str(b, "", 0),
                   0);
}

/* A mutation that only notifies weakly. */
/* OBSERVER: add (with its record) or remove observer name. */
static void enc_observer(pc_buf_t *b, int add, const char *name, const char *table,
                         const char *col, int kind) {
  assert_int_equal(pc_buf_u8(b, (uint8_t)add) || pc_buf_str(b, name, strlen(name)), 0);
  if (!add) return;
  pc_buf_t rec = {0};
  assert_int_equal(pc_obs_record_encode(&rec, kind, table, col, strlen(col)), 0);
  assert_int_equal(pc_buf_str(b, rec.p, rec.len), 0);
  pc_buf_free(&rec);
}

static pc_mutation_t notify_weak(const char *row, const char *col) {
  return (pc_mutation_t){cell(row, col), PC_WRITE_NOTIFY, NULL, 0, 1};
}

/* One valid body of every op (on a store where the test's data exists). */
typedef struct sample {
  uint8_t op;
  const char *name;
  pc_buf_t body;
} sample_t;

#define NSAMPLES 23

static void make_samples(sample_t s[NSAMPLES]) {
  memset(s, 0, sizeof(sample_t) * NSAMPLES);
  pc_cell_t p = cell("mp", "c:a"), c2[2] = {cell("mp", "c:a"), cell("nq", "c:b")};
  pc_mutation_t m[3] = {put("mp", "c:a", "v1"), put("nq", "c:b", "v2"), notify_weak("nq", "c:w")};
  m[1].weak = 1;
  pc_mutation_t del = {cell("o1", "c:x"), PC_WRITE_DELETE, NULL, 0, 0};
  pc_notification_t after = {cell("nq", "c:b"), 901, 0, 0};
  int k = 0;
  s[k].op = PC_TABLET_OP_GET, s[k].name = "get", enc_get(&s[k].body, &p, 500), k++;
  s[k].op = PC_TABLET_OP_PREWRITE, s[k].name = "prewrite";
  enc_prewrite(&s[k].body, &p, 900, 3000, 77, m, 3), k++;
  s[k].op = PC_TABLET_OP_COMMIT, s[k].name = "commit", enc_commit(&s[k].body, 900, 901, c2, 2), k++;
  s[k].op = PC_TABLET_OP_ROLLBACK, s[k].name = "rollback", enc_rollback(&s[k].body, 950, c2, 2), k++;
  s[k].op = PC_TABLET_OP_CHECK_TXN, s[k].name = "check_txn";
  enc_check_txn(&s[k].body, &p, 900, 5000, 0), k++;
  s[k].op = PC_TABLET_OP_ONE_PHASE, s[k].name = "one_phase";
  enc_one_phase(&s[k].body, 960, &del, 1), k++;
  s[k].op = PC_TABLET_OP_SCAN, s[k].name = "scan";
  enc_scan(&s[k].body, TABLE, R_START, NULL, R_END, 2000000, 100), k++;
  s[k].op = PC_TABLET_OP_SCAN, s[k].name = "scan from a column";
  enc_scan(&s[k].body, TABLE, "mp", "c:a", "s", 2000000, 5), k++;
  s[k].op = PC_TABLET_OP_RAW_SCAN, s[k].name = "raw_scan";
  enc_raw_scan(&s[k].body, TABLE, R_START, R_END), k++;
  s[k].op = PC_TABLET_OP_RAW_SCAN, s[k].name = "raw_scan all";
  enc_raw_scan(&s[k].body, NULL, NULL, NULL), k++;
  s[k].op = PC_TABLET_OP_INFO, s[k].name = "info", k++;
  s[k].op = PC_TABLET_OP_GET_FRESH, s[k].name = "get_fresh";
  assert_int_equal(pc_wire_put_cell(&s[k].body, &p), 0), k++;
  s[k].op = PC_TABLET_OP_HEARTBEAT, s[k].name = "heartbeat";
  enc_heartbeat(&s[k].body, &p, 900, 6000), k++;
  s[k].op = PC_TABLET_OP_SCAN_LOCKS, s[k].name = "scan_locks";
  assert_int_equal(pc_buf_u64(&s[k].body, 2000000), 0), k++;
  /* below every timestamp the other samples read at: they stay servable */
  s[k].op = PC_TABLET_OP_GC, s[k].name = "gc";
  enc_gc(&s[k].body, 400, 0), k++;
  s[k].op = PC_TABLET_OP_SCAN_NOTIFY, s[k].name = "scan_notify";
  enc_scan_notify(&s[k].body, 0, PC_NOTIFY_BUCKETS, NULL, 100), k++;
  s[k].op = PC_TABLET_OP_SCAN_NOTIFY, s[k].name = "scan_notify after";
  enc_scan_notify(&s[k].body, 3, 900, &after, 2), k++;
  s[k].op = PC_TABLET_OP_CLEAR_NOTIFY, s[k].name = "clear_notify";
  enc_clear_notify(&s[k].body, &c2[1], 2000000), k++;
  s[k].op = PC_TABLET_OP_CLEAR_NOTIFY_MANY, s[k].name = "clear_notify_many";
  assert_int_equal(pc_buf_u32(&s[k].body, 2), 0);
  enc_clear_notify(&s[k].body, &c2[0], 2000000);
  enc_clear_notify(&s[k].body, &c2[1], 2000000), k++;
  s[k].op = PC_TABLET_OP_OBSERVER, s[k].name = "observer";
  enc_observer(&s[k].body, 1, "obs.a", TABLE, "c:a", PC_OBSERVER_STRONG), k++;
  s[k].op = PC_TABLET_OP_OBSERVER, s[k].name = "observer removed";
  enc_observer(&s[k].body, 0, "obs.gone", NULL, NULL, 0), k++;
  s[k].op = PC_TABLET_OP_OBSERVERS, s[k].name = "observers", k++;
  s[k].op = PC_TABLET_OP_GET_MANY, s[k].name = "get_many";
  assert_int_equal(pc_buf_u64(&s[k].body, 500) || pc_buf_u32(&s[k].body, 2) ||
                       pc_wire_put_cell(&s[k].body, &c2[0]) || pc_wire_put_cell(&s[k].body, &c2[1]),
                   0), k++;
  assert_int_equal(k, NSAMPLES);
}

static void free_samples(sample_t s[NSAMPLES]) {
  for (int i = 0; i < NSAMPLES; i++) pc_buf_free(&s[i].body);
}

/* ---- the whole-request codecs (tablet_wire.h) ---------------------------- */

/* Decodes body as op's request with its decoder and encodes the result into
 * out with its encoder; the decoder's status (PC_OK: out holds the bytes). */
static pc_status_t reencode(uint8_t op, const char *body, size_t len, pc_buf_t *out,
                            pc_error_t *err) {
  pc_arena_t a = {0};
  pc_status_t st = PC_OK;
  int enc = 0;
  switch (op) {
    case PC_TABLET_OP_GET:
    case PC_TABLET_OP_GET_FRESH: {
      pc_tablet_get_req_t q;
      if ((st = pc_tablet_decode_get(body, len, op, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_get(out, op, &q);
      break;
    }
    case PC_TABLET_OP_GET_MANY: {
      pc_tablet_get_many_req_t q;
      if ((st = pc_tablet_decode_get_many(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_get_many(out, &q);
      break;
    }
    case PC_TABLET_OP_PREWRITE:
    case PC_TABLET_OP_ONE_PHASE: {
      pc_tablet_write_req_t q;
      if ((st = pc_tablet_decode_write(body, len, op, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_write(out, op, &q);
      break;
    }
    case PC_TABLET_OP_COMMIT:
    case PC_TABLET_OP_ROLLBACK: {
      pc_tablet_cells_req_t q;
      if ((st = pc_tablet_decode_cells(body, len, op, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_cells(out, op, &q);
      break;
    }
    case PC_TABLET_OP_CHECK_TXN: {
      pc_tablet_check_txn_req_t q;
      if ((st = pc_tablet_decode_check_txn(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_check_txn(out, &q);
      break;
    }
    case PC_TABLET_OP_SCAN: {
      pc_tablet_scan_req_t q;
      if ((st = pc_tablet_decode_scan(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_scan(out, &q);
      break;
    }
    case PC_TABLET_OP_RAW_SCAN: {
      pc_tablet_raw_scan_req_t q;
      if ((st = pc_tablet_decode_raw_scan(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_raw_scan(out, &q);
      break;
    }
    case PC_TABLET_OP_HEARTBEAT: {
      pc_tablet_heartbeat_req_t q;
      if ((st = pc_tablet_decode_heartbeat(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_heartbeat(out, &q);
      break;
    }
    case PC_TABLET_OP_SCAN_LOCKS: {
      uint64_t below;
      if ((st = pc_tablet_decode_scan_locks(body, len, &below, err)) == PC_OK)
        enc = pc_tablet_encode_scan_locks(out, below);
      break;
    }
    case PC_TABLET_OP_GC: {
      pc_tablet_gc_req_t q;
      if ((st = pc_tablet_decode_gc(body, len, &q, err)) == PC_OK)
        enc = pc_tablet_encode_gc(out, &q);
      break;
    }
    case PC_TABLET_OP_SCAN_NOTIFY: {
      pc_tablet_scan_notify_req_t q;
      if ((st = pc_tablet_decode_scan_notify(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_scan_notify(out, &q);
      break;
    }
    case PC_TABLET_OP_CLEAR_NOTIFY: {
      pc_notify_clear_t q;
      if ((st = pc_tablet_decode_clear_notify(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_clear_notify(out, &q);
      break;
    }
    case PC_TABLET_OP_CLEAR_NOTIFY_MANY: {
      pc_notify_clear_t *q;
      size_t n;
      if ((st = pc_tablet_decode_clear_notify_many(body, len, &a, &q, &n, err)) == PC_OK)
        enc = pc_tablet_encode_clear_notify_many(out, q, n);
      break;
    }
    case PC_TABLET_OP_OBSERVER: {
      pc_tablet_observer_req_t q;
      if ((st = pc_tablet_decode_observer(body, len, &a, &q, err)) == PC_OK)
        enc = pc_tablet_encode_observer(out, &q);
      break;
    }
    case PC_TABLET_OP_INFO:
    case PC_TABLET_OP_OBSERVERS:
      st = pc_tablet_decode_empty(body, len, "info", err);
      break;
    default:
      fail_msg("op 0x%02x has no request codec", op);
  }
  assert_int_equal(enc, 0);
  pc_arena_free(&a);
  return st;
}

/* Every sample body, built field by field above as tablet.h lays it out,
 * decodes and encodes back to the same bytes; with a byte more, or with its
 * last byte cut, the decoder refuses it naming the op and a field. */
static void test_request_codecs(void **state) {
  (void)state;
  sample_t s[NSAMPLES];
  make_samples(s);
  for (int i = 0; i < NSAMPLES; i++) {
    pc_buf_t out = {0}, longer = {0};
    pc_error_t err;
    pc_error_clear(&err);
    if (reencode(s[i].op, s[i].body.p, s[i].body.len, &out, &err) != PC_OK)
      fail_msg("%s: refused: %s", s[i].name, err.text);
    if (out.len != s[i].body.len || (out.len && memcmp(out.p, s[i].body.p, out.len) != 0))
      fail_msg("%s: encodes to other bytes (%zu, was %zu)", s[i].name, out.len, s[i].body.len);
    assert_int_equal(pc_buf_append(&longer, s[i].body.p, s[i].body.len) ||
                         pc_buf_u8(&longer, 0),
                     0);
    out.len = 0;
    assert_int_equal(reencode(s[i].op, longer.p, longer.len, &out, &err), PC_INVALID);
    /* ONE_PHASE reads what follows its mutations as its optional clear */
    const char *want = s[i].op == PC_TABLET_OP_ONE_PHASE
                           ? "request body: clear cell"
                           : "request body: bytes after the last field";
    if (!strstr(err.text, want)) fail_msg("%s with a byte more: %s", s[i].name, err.text);
    if (s[i].body.len) {
      out.len = 0;
      assert_int_equal(reencode(s[i].op, s[i].body.p, s[i].body.len - 1, &out, &err), PC_INVALID);
      if (!strstr(err.text, "malformed ") || !strstr(err.text, " request body: "))
        fail_msg("%s cut short: %s", s[i].name, err.text);
    }
    pc_buf_free(&out);
    pc_buf_free(&longer);
  }
  free_samples(s);
}

/* The handler's refusal of a malformed body names the field at fault: the
 * mutation that is cut short, the count the body cannot hold. */
static void test_malformed_names_the_field(void **state) {
  fixture_t *f = *state;
  pc_cell_t p = cell("mp", "c:a");
  pc_mutation_t m[3] = {put("mp", "c:a", "v1"), put("nq", "c:b", "v2"), put("nr", "c:c", "v3")};
  pc_buf_t b = {0};
  enc_prewrite(&b, &p, 900, 3000, 77, m, 3);
  answer_t a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len - 1);
  check_error(&a, "prewrite cut short");
  assert_non_null(strstr(answer_text(&a), "malformed prewrite request body: mutation 2"));
  answer_free(&a);
  b.len = 0;
  assert_int_equal(pc_buf_u64(&b, 900) || pc_buf_u64(&b, 901) || pc_buf_u32(&b, 1000), 0);
  a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
  check_error(&a, "commit with a lying count");
  assert_non_null(strstr(answer_text(&a), "malformed commit request body: cell count"));
  answer_free(&a);
  b.len = 0;
  enc_scan(&b, TABLE, R_START, NULL, R_END, 2000000, 0);
  a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
  check_error(&a, "scan of no cells");
  assert_non_null(strstr(answer_text(&a), "malformed scan request body: limit"));
  answer_free(&a);
  pc_buf_free(&b);
}

/* ---- valid round trips -------------------------------------------------- */

static uint64_t rd_u64_at(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | (unsigned char)p[i];
  return v;
}

static uint32_t rd_u32_at(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = v << 8 | (unsigned char)p[i];
  return v;
}

static void expect_status(const answer_t *a, pc_status_t want, const char *what) {
  if (a->rc != PC_OK) fail_msg("%s: handler failed: %s", what, a->err.text);
  if (!a->well_formed) fail_msg("%s: malformed reply", what);
  if (a->status != want)
    fail_msg("%s: status %s, want %s (%s)", what, pc_status_name(a->status), pc_status_name(want),
             a->msg);
  if (want == PC_OK) assert_string_equal(a->msg, "");
}

static void test_valid_round_trips(void **state) {
  fixture_t *f = *state;
  pc_cell_t p = cell("mp", "c:a"), c2[2] = {cell("mp", "c:a"), cell("nq", "c:b")};
  pc_mutation_t m[2] = {put("mp", "c:a", "v1"), put("nq", "c:b", "v2")};
  pc_buf_t b = {0};
  answer_t a;

  /* GET of a cell never written */
  enc_get(&b, &p, 500);
  a = call(f, PC_TABLET_OP_GET, b.p, b.len);
  expect_status(&a, PC_NOT_FOUND, "get (empty)");
  answer_free(&a);

  /* PREWRITE two rows, primary mp */
  b.len = 0;
  enc_prewrite(&b, &p, 900, 3000, 77, m, 2);
  a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
  expect_status(&a, PC_OK, "prewrite");
  assert_int_equal(a.plen, 0);
  answer_free(&a);
  /* re-sent: its own lock is accepted */
  a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
  expect_status(&a, PC_OK, "prewrite again");
  answer_free(&a);

  /* GET above start_ts meets the lock: the payload is a lock that decodes */
  b.len = 0;
  enc_get(&b, &c2[1], 1000);
  a = call(f, PC_TABLET_OP_GET, b.p, b.len);
  expect_status(&a, PC_LOCKED, "get (locked)");
  {
    pc_rd_t r = {a.payload, a.plen, 0, 1};
    pc_lock_info_t l = {0};
    assert_int_equal(pc_wire_get_lock(&r, &l), 0);
    assert_int_equal(r.pos, a.plen);
    assert_int_equal(l.start_ts, 900);
    assert_int_equal(l.ttl_ms, 3000);
    assert_int_equal(l.session, 77);
    assert_int_equal(l.prow.len, 2);
    assert_memory_equal(l.prow.p, "mp", 2);
    assert_int_equal(l.crow.len, 2);
    assert_memory_equal(l.crow.p, "nq", 2);
    pc_lock_info_free(&l);
  }
  answer_free(&a);
  /* GET_FRESH reads at a timestamp from ts_source, above the lock: the
   * payload is that timestamp, then the lock */
  b.len = 0;
  assert_int_equal(pc_wire_put_cell(&b, &c2[1]), 0);
  uint64_t fresh0 = next_commit_ts;
  a = call(f, PC_TABLET_OP_GET_FRESH, b.p, b.len);
  expect_status(&a, PC_LOCKED, "get_fresh (locked)");
  {
    assert_true(a.plen > 8);
    assert_int_equal(rd_u64_at(a.payload), fresh0 + 1);
    pc_rd_t r = {a.payload + 8, a.plen - 8, 0, 1};
    pc_lock_info_t l = {0};
    assert_int_equal(pc_wire_get_lock(&r, &l), 0);
    assert_int_equal(r.pos, a.plen - 8);
    assert_int_equal(l.start_ts, 900);
    pc_lock_info_free(&l);
  }
  answer_free(&a);
  /* ... and of a cell never written: not found, with the timestamp */
  b.len = 0;
  pc_cell_t unwritten = cell("nz", "c:z");
  assert_int_equal(pc_wire_put_cell(&b, &unwritten), 0);
  a = call(f, PC_TABLET_OP_GET_FRESH, b.p, b.len);
  expect_status(&a, PC_NOT_FOUND, "get_fresh (empty)");
  assert_int_equal(a.plen, 8);
  assert_int_equal(rd_u64_at(a.payload), fresh0 + 2);
  answer_free(&a);
  /* a body with a read_ts after the cell is malformed */
  b.len = 0;
  assert_int_equal(pc_wire_put_cell(&b, &unwritten), 0);
  assert_int_equal(pc_buf_u64(&b, 5), 0);
  a = call(f, PC_TABLET_OP_GET_FRESH, b.p, b.len);
  expect_status(&a, PC_INVALID, "get_fresh with trailing bytes");
  answer_free(&a);

  /* a GET below the lock's start_ts is not blocked */
  b.len = 0;
  enc_get(&b, &c2[1], 899);
  a = call(f, PC_TABLET_OP_GET, b.p, b.len);
  expect_status(&a, PC_NOT_FOUND, "get below the lock");
  answer_free(&a);

  /* CHECK_TXN: alive (owner alive, TTL not passed at now) */
  b.len = 0;
  enc_check_txn(&b, &p, 900, 900, 0);
  a = call(f, PC_TABLET_OP_CHECK_TXN, b.p, b.len);
  expect_status(&a, PC_OK, "check_txn alive");
  assert_int_equal(a.plen, 9);
  assert_int_equal((unsigned char)a.payload[0], PC_TXN_ALIVE);
  answer_free(&a);

  /* COMMIT both cells at 901, then GET sees v1 / v2 */
  b.len = 0;
  enc_commit(&b, 900, 901, c2, 2);
  a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
  expect_status(&a, PC_OK, "commit");
  answer_free(&a);
  a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
  expect_status(&a, PC_OK, "commit re-sent");
  answer_free(&a);
  b.len = 0;
  enc_get(&b, &c2[1], 1000);
  a = call(f, PC_TABLET_OP_GET, b.p, b.len);
  expect_status(&a, PC_OK, "get committed");
  {
    pc_rd_t r = {a.payload, a.plen, 0, 1};
    size_t n;
    const char *v = pc_rd_str(&r, &n);
    assert_true(r.ok && r.pos == a.plen);
    assert_int_equal(n, 2);
    assert_memory_equal(v, "v2", 2);
  }
  answer_free(&a);

  /* CHECK_TXN now says committed at 901 */
  b.len = 0;
  enc_check_txn(&b, &p, 900, 5000, 1);
  a = call(f, PC_TABLET_OP_CHECK_TXN, b.p, b.len);
  expect_status(&a, PC_OK, "check_txn committed");
  assert_int_equal(a.plen, 9);
  assert_int_equal((unsigned char)a.payload[0], PC_TXN_COMMITTED);
  assert_int_equal(rd_u64_at(a.payload + 1), 901);
  answer_free(&a);

  /* a prewrite older than the commit conflicts */
  b.len = 0;
  pc_mutation_t m3 = put("mp", "c:a", "old");
  enc_prewrite(&b, &p, 850, 3000, 78, &m3, 1);
  a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
  expect_status(&a, PC_CONFLICT, "stale prewrite");
  assert_true(a.msg[0] != '\0');
  answer_free(&a);

  /* ROLLBACK of a prewritten txn, then its delayed prewrite fails */
  pc_cell_t rc = cell("r1", "c:z");
  pc_mutation_t rm = put("r1", "c:z", "doomed");
  b.len = 0;
  enc_prewrite(&b, &rc, 950, 3000, 79, &rm, 1);
  a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
  expect_status(&a, PC_OK, "prewrite to roll back");
  answer_free(&a);
  pc_buf_t rb = {0};
  enc_rollback(&rb, 950, &rc, 1);
  a = call(f, PC_TABLET_OP_ROLLBACK, rb.p, rb.len);
  expect_status(&a, PC_OK, "rollback");
  answer_free(&a);
  a = call(f, PC_TABLET_OP_ROLLBACK, rb.p, rb.len);
  expect_status(&a, PC_OK, "rollback again (idempotent)");
  answer_free(&a);
  pc_buf_free(&rb);
  a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
  expect_status(&a, PC_CONFLICT, "prewrite after rollback");
  answer_free(&a);
  /* committing a rolled-back cell is aborted */
  b.len = 0;
  enc_commit(&b, 950, 951, &rc, 1);
  a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
  expect_status(&a, PC_ABORTED, "commit after rollback");
  answer_free(&a);

  /* ONE_PHASE on one row: the reply carries the commit_ts from ts_source */
  pc_mutation_t om[2] = {put("o1", "c:x", "one"), put("o1", "c:y", "phase")};
  b.len = 0;
  enc_one_phase(&b, 960, om, 2);
  uint64_t before = next_commit_ts;
  a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
  expect_status(&a, PC_OK, "one-phase commit");
  assert_int_equal(a.plen, 8);
  assert_true(rd_u64_at(a.payload) > before);
  uint64_t ots = rd_u64_at(a.payload);
  answer_free(&a);

  /* SCAN the tablet's range: mp, nq, o1 x2 */
  b.len = 0;
  enc_scan(&b, TABLE, R_START, NULL, R_END, ots + 1, 100);
  a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
  expect_status(&a, PC_OK, "scan");
  {
    pc_rd_t r = {a.payload, a.plen, 0, 1};
    uint32_t n = pc_rd_u32(&r);
    assert_int_equal(n, 4);
    const char *want[4][3] = {{"mp", "c:a", "v1"}, {"nq", "c:b", "v2"}, {"o1", "c:x", "one"},
                              {"o1", "c:y", "phase"}};
    for (uint32_t i = 0; i < n; i++)
      for (int k = 0; k < 3; k++) {
        size_t l;
        const char *s = pc_rd_str(&r, &l);
        assert_true(r.ok);
        assert_int_equal(l, strlen(want[i][k]));
        assert_memory_equal(s, want[i][k], l);
      }
    assert_int_equal(r.pos, a.plen);
  }
  answer_free(&a);
  /* with a limit and a start column */
  b.len = 0;
  enc_scan(&b, TABLE, "o1", "c:y", R_END, ots + 1, 1);
  a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
  expect_status(&a, PC_OK, "scan from a column");
  {
    pc_rd_t r = {a.payload, a.plen, 0, 1};
    assert_int_equal(pc_rd_u32(&r), 1);
  }
  answer_free(&a);

  /* ONE_PHASE with a clear trailer (cell, below, observers): a cell of a
   * row the commit writes is cleared with it (the answer says so); one of
   * another row is refused, and so is a truncated trailer, committing
   * nothing */
  const struct {
    const char *row, *clear;
    int truncated, refused;
  } trailers[] = {{"o2", "o2", 1, 1}, {"o3", "o3", 0, 0}, {"o4", "zz", 0, 1}};
  for (size_t k = 0; k < sizeof trailers / sizeof trailers[0]; k++) {
    pc_mutation_t cm = put(trailers[k].row, "c:x", "cleared");
    pc_cell_t cc = cell(trailers[k].clear, "c:x");
    b.len = 0;
    enc_one_phase(&b, 970 + k, &cm, 1);
    assert_int_equal(pc_wire_put_cell(&b, &cc), 0);
    if (!trailers[k].truncated)
      assert_int_equal(pc_buf_u64(&b, 1000) || pc_buf_str(&b, "", 0), 0);
    a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    if (trailers[k].refused) {
      check_error(&a, trailers[k].truncated ? "one-phase with a truncated clear"
                                            : "one-phase clearing a row it does not write");
    } else {
      expect_status(&a, PC_OK, "one-phase with a clear");
      assert_int_equal(a.plen, 8 + 1 + 4); /* commit_ts, done, missing "" */
      assert_int_equal((unsigned char)a.payload[8], 1);
    }
    answer_free(&a);
  }

  /* RAW_SCAN: every raw cell decodes, and the rollback record is there */
  b.len = 0;
  enc_raw_scan(&b, TABLE, NULL, NULL);
  a = call(f, PC_TABLET_OP_RAW_SCAN, b.p, b.len);
  expect_status(&a, PC_OK, "raw scan");
  {
    pc_rd_t r = {a.payload, a.plen, 0, 1};
    uint32_t n = pc_rd_u32(&r);
    assert_true(n >= 5);
    int rollbacks = 0, locks = 0;
    pc_arena_t ar = {0};
    for (uint32_t i = 0; i < n; i++) {
      pc_raw_cell_t rcell;
      assert_int_equal(pc_wire_get_raw(&r, &ar, &rcell), 0);
      assert_string_equal(rcell.table, TABLE);
      if (rcell.kind == PC_CELL_WRITE && rcell.write_kind == PC_WRITE_ROLLBACK) rollbacks++;
      if (rcell.kind == PC_CELL_LOCK) locks++;
    }
    pc_arena_free(&ar);
    assert_int_equal(r.pos, a.plen);
    assert_true(rollbacks >= 1);
    assert_int_equal(locks, 0);
  }
  answer_free(&a);

  /* INFO: name, one range, ops */
  a = call(f, PC_TABLET_OP_INFO, NULL, 0);
  expect_status(&a, PC_OK, "info");
  {
    pc_rd_t r = {a.payload, a.plen, 0, 1};
    size_t l;
    const char *s = pc_rd_str(&r, &l);
    assert_true(r.ok && l == strlen(T_NAME) && memcmp(s, T_NAME, l) == 0);
    assert_int_equal(pc_rd_u32(&r), 1);
    s = pc_rd_str(&r, &l);
    assert_true(r.ok && l == 1 && s[0] == 'm');
    s = pc_rd_str(&r, &l);
    assert_true(r.ok && l == 1 && s[0] == 't');
    uint64_t ops = pc_rd_u64(&r);
    assert_true(r.ok);
    assert_true(ops >= 20 && ops == pc_tablet_ops(f->tablet));
    /* garbage collection so far: none */
    for (int i = 0; i < 5; i++) assert_int_equal(pc_rd_u64(&r), 0);
    assert_true(r.ok && r.pos == a.plen);
  }
  answer_free(&a);
  pc_buf_free(&b);
}

/* ---- malformed bodies --------------------------------------------------- */

static void test_truncations_and_trailing_garbage(void **state) {
  fixture_t *f = *state;
  sample_t s[NSAMPLES];
  make_samples(s);
  char what[128];
  size_t checked = 0;
  for (int i = 0; i < NSAMPLES; i++) {
    /* every proper prefix */
    for (size_t len = 0; len < s[i].body.len; len++) {
      answer_t a = call(f, s[i].op, s[i].body.p, len);
      snprintf(what, sizeof what, "%s truncated to %zu of %zu bytes", s[i].name, len,
               s[i].body.len);
      check_error(&a, what);
      answer_free(&a);
      checked++;
    }
    /* the whole body plus 1, 7 or 100 bytes of garbage */
    static const size_t extra[] = {1, 7, 100};
    for (size_t k = 0; k < 3; k++) {
      pc_buf_t b = {0};
      assert_int_equal(pc_buf_append(&b, s[i].body.p, s[i].body.len), 0);
      for (size_t j = 0; j < extra[k]; j++) assert_int_equal(pc_buf_u8(&b, (uint8_t)(0xA5 ^ j)), 0);
      answer_t a = call(f, s[i].op, b.p, b.len);
      snprintf(what, sizeof what, "%s with %zu trailing bytes", s[i].name, extra[k]);
      check_error(&a, what);
      answer_free(&a);
      pc_buf_free(&b);
      checked++;
    }
  }
  if (checked < 300) fail_msg("only %zu bodies checked", checked);
  free_samples(s);
}

/* Overwrites the u32 at offset off of b with v. */
static void poke_u32(pc_buf_t *b, size_t off, uint32_t v) {
  assert_true(off + 4 <= b->len);
  b->p[off] = (char)(v >> 24);
  b->p[off + 1] = (char)(v >> 16);
  b->p[off + 2] = (char)(v >> 8);
  b->p[off + 3] = (char)v;
}

static void test_lying_counts_and_lengths(void **state) {
  fixture_t *f = *state;
  static const uint32_t lies[] = {0, 3, 1000, 1000001, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu};
  pc_cell_t p = cell("mp", "c:a");
  pc_mutation_t m = put("mp", "c:a", "v");
  char what[128];
  for (size_t k = 0; k < sizeof lies / sizeof lies[0]; k++) {
    uint32_t v = lies[k];
    /* PREWRITE count: after the primary cell (3 strs) and u64 u32 u64 */
    pc_buf_t b = {0};
    enc_prewrite(&b, &p, 900, 3000, 1, &m, 1);
    size_t count_off = (4 + 3) + (4 + 2) + (4 + 3) + 8 + 4 + 8;
    poke_u32(&b, count_off, v);
    answer_t a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
    snprintf(what, sizeof what, "prewrite with count %u", v);
    if (v != 1) check_error(&a, what);
    answer_free(&a);
    /* ONE_PHASE count after u64 */
    b.len = 0;
    enc_one_phase(&b, 960, &m, 1);
    poke_u32(&b, 8, v);
    a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    snprintf(what, sizeof what, "one-phase with count %u", v);
    if (v != 1) check_error(&a, what);
    answer_free(&a);
    /* COMMIT / ROLLBACK counts */
    b.len = 0;
    enc_commit(&b, 900, 901, &p, 1);
    poke_u32(&b, 16, v);
    a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
    snprintf(what, sizeof what, "commit with count %u", v);
    if (v != 1) check_error(&a, what);
    answer_free(&a);
    b.len = 0;
    enc_rollback(&b, 900, &p, 1);
    poke_u32(&b, 8, v);
    a = call(f, PC_TABLET_OP_ROLLBACK, b.p, b.len);
    snprintf(what, sizeof what, "rollback with count %u", v);
    if (v != 1) check_error(&a, what);
    answer_free(&a);
    /* string lengths: table, row, column of a GET cell */
    static const size_t str_offs[3] = {0, 4 + 3, 4 + 3 + 4 + 2};
    static const uint32_t real[3] = {3, 2, 3};
    for (int j = 0; j < 3; j++) {
      if (v == real[j]) continue;
      b.len = 0;
      enc_get(&b, &p, 500);
      poke_u32(&b, str_offs[j], v);
      a = call(f, PC_TABLET_OP_GET, b.p, b.len);
      snprintf(what, sizeof what, "get with string %d of length %u", j, v);
      check_error(&a, what);
      answer_free(&a);
    }
    /* the value length of a mutation */
    b.len = 0;
    enc_one_phase(&b, 960, &m, 1);
    size_t vlen_off = 8 + 4 + (4 + 3) + (4 + 2) + (4 + 3) + 1 + 1;
    poke_u32(&b, vlen_off, v);
    a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    snprintf(what, sizeof what, "one-phase with a value of length %u", v);
    if (v != 1) check_error(&a, what);
    answer_free(&a);
    /* SCAN limit and RAW_SCAN option lengths */
    b.len = 0;
    enc_scan(&b, TABLE, R_START, NULL, R_END, 100, 10);
    poke_u32(&b, b.len - 4, v);
    a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
    snprintf(what, sizeof what, "scan with limit %u", v);
    if (v == 0 || v > PC_STORE_SCAN_LIMIT_MAX) check_error(&a, what);
    else expect_status(&a, PC_OK, what);
    answer_free(&a);
    b.len = 0;
    enc_raw_scan(&b, TABLE, R_START, R_END);
    poke_u32(&b, 1, v);
    a = call(f, PC_TABLET_OP_RAW_SCAN, b.p, b.len);
    snprintf(what, sizeof what, "raw scan with a table of length %u", v);
    if (v != 3) check_error(&a, what);
    answer_free(&a);
    /* SCAN_NOTIFY: the limit, and each bound of the bucket range */
    b.len = 0;
    enc_scan_notify(&b, 0, PC_NOTIFY_BUCKETS, NULL, 10);
    poke_u32(&b, b.len - 4, v);
    a = call(f, PC_TABLET_OP_SCAN_NOTIFY, b.p, b.len);
    snprintf(what, sizeof what, "scan_notify with limit %u", v);
    if (v == 0 || v > PC_STORE_SCAN_LIMIT_MAX) check_error(&a, what);
    else expect_status(&a, PC_OK, what);
    answer_free(&a);
    for (int bound = 0; bound < 2; bound++) {
      b.len = 0;
      enc_scan_notify(&b, 1, 2, NULL, 10);
      poke_u32(&b, (size_t)bound * 4, v);
      a = call(f, PC_TABLET_OP_SCAN_NOTIFY, b.p, b.len);
      snprintf(what, sizeof what, "scan_notify with %s bucket %u", bound ? "last" : "first", v);
      uint32_t lo = bound ? 1 : v, hi = bound ? v : 2;
      if (lo >= hi || hi > PC_NOTIFY_BUCKETS) check_error(&a, what);
      else expect_status(&a, PC_OK, what);
      answer_free(&a);
    }
    pc_buf_free(&b);
  }
  /* a huge count backed by a body that really holds that many cells' worth of
   * bytes but not valid cells */
  pc_buf_t b = {0};
  assert_int_equal(pc_buf_u64(&b, 900) || pc_buf_u64(&b, 901) || pc_buf_u32(&b, 100000), 0);
  for (size_t i = 0; i < 100000u * 12; i++) assert_int_equal(pc_buf_u8(&b, 0), 0);
  answer_t a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
  check_error(&a, "commit of 100000 empty cells");
  answer_free(&a);
  pc_buf_free(&b);
}

static void test_empty_and_nul_names(void **state) {
  fixture_t *f = *state;
  struct {
    const char *t;
    size_t tl;
    const char *r;
    size_t rl;
    const char *c;
    size_t cl;
    const char *what;
  } bad[] = {
      {"", 0, "mp", 2, "c:a", 3, "empty table"},
      {TABLE, 3, "", 0, "c:a", 3, "empty row"},
      {TABLE, 3, "mp", 2, "", 0, "empty column"},
      {"tb\0l", 4, "mp", 2, "c:a", 3, "NUL in the table name"},
      {"\0", 1, "mp", 2, "c:a", 3, "table name NUL"},
      {"tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt", 66, "mp", 2, "c:a", 3,
       "table name of 66 bytes"},
  };
  char what[160];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    /* pc_wire_put_cell takes a C string table: encode by hand */
    pc_buf_t cellb = {0};
    assert_int_equal(pc_buf_str(&cellb, bad[i].t, bad[i].tl) ||
                         pc_buf_str(&cellb, bad[i].r, bad[i].rl) ||
                         pc_buf_str(&cellb, bad[i].c, bad[i].cl),
                     0);
    pc_buf_t b = {0};
    /* GET */
    assert_int_equal(pc_buf_append(&b, cellb.p, cellb.len) || pc_buf_u64(&b, 500), 0);
    answer_t a = call(f, PC_TABLET_OP_GET, b.p, b.len);
    snprintf(what, sizeof what, "get: %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    /* CHECK_TXN */
    b.len = 0;
    assert_int_equal(pc_buf_append(&b, cellb.p, cellb.len) || pc_buf_u64(&b, 900) ||
                         pc_buf_u64(&b, 901) || pc_buf_u8(&b, 1),
                     0);
    a = call(f, PC_TABLET_OP_CHECK_TXN, b.p, b.len);
    snprintf(what, sizeof what, "check_txn: %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    /* HEARTBEAT */
    b.len = 0;
    assert_int_equal(pc_buf_append(&b, cellb.p, cellb.len) || pc_buf_u64(&b, 900) ||
                         pc_buf_u32(&b, 3000),
                     0);
    a = call(f, PC_TABLET_OP_HEARTBEAT, b.p, b.len);
    snprintf(what, sizeof what, "heartbeat: %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    /* PREWRITE with the bad cell as the primary, and as the mutation */
    pc_cell_t good = cell("mp", "c:a");
    pc_mutation_t gm = put("mp", "c:a", "v");
    for (int as_mut = 0; as_mut < 2; as_mut++) {
      b.len = 0;
      if (as_mut) assert_int_equal(pc_wire_put_cell(&b, &good), 0);
      else assert_int_equal(pc_buf_append(&b, cellb.p, cellb.len), 0);
      assert_int_equal(pc_buf_u64(&b, 900) || pc_buf_u32(&b, 3000) || pc_buf_u64(&b, 1) ||
                           pc_buf_u32(&b, 1),
                       0);
      if (as_mut)
        assert_int_equal(pc_buf_append(&b, cellb.p, cellb.len) || pc_buf_u8(&b, 0) ||
                             pc_buf_u8(&b, 0) || pc_buf_str(&b, "v", 1),
                         0);
      else assert_int_equal(pc_wire_put_mutation(&b, &gm), 0);
      a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
      snprintf(what, sizeof what, "prewrite: %s %s", bad[i].what, as_mut ? "(mutation)" : "(primary)");
      check_error(&a, what);
      answer_free(&a);
    }
    /* COMMIT / ROLLBACK of the bad cell */
    b.len = 0;
    assert_int_equal(pc_buf_u64(&b, 900) || pc_buf_u64(&b, 901) || pc_buf_u32(&b, 1) ||
                         pc_buf_append(&b, cellb.p, cellb.len),
                     0);
    a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
    snprintf(what, sizeof what, "commit: %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    a = call(f, PC_TABLET_OP_ROLLBACK, b.p + 8, b.len - 8);
    snprintf(what, sizeof what, "rollback: %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    /* CLEAR_NOTIFY of the bad cell, and SCAN_NOTIFY after it */
    b.len = 0;
    enc_clear_raw(&b, &cellb);
    a = call(f, PC_TABLET_OP_CLEAR_NOTIFY, b.p, b.len);
    snprintf(what, sizeof what, "clear_notify: %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    b.len = 0; /* and after a good one in CLEAR_NOTIFY_MANY */
    assert_int_equal(pc_buf_u32(&b, 2), 0);
    enc_clear_notify(&b, &good, 900);
    enc_clear_raw(&b, &cellb);
    a = call(f, PC_TABLET_OP_CLEAR_NOTIFY_MANY, b.p, b.len);
    snprintf(what, sizeof what, "clear_notify_many: %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    b.len = 0;
    assert_int_equal(pc_buf_u32(&b, 0) || pc_buf_u32(&b, 1) || pc_buf_u8(&b, 1) ||
                         pc_buf_append(&b, cellb.p, cellb.len) || pc_buf_u64(&b, 900) ||
                         pc_buf_u8(&b, 0) || pc_buf_u32(&b, 10),
                     0);
    a = call(f, PC_TABLET_OP_SCAN_NOTIFY, b.p, b.len);
    snprintf(what, sizeof what, "scan_notify after a cell with %s", bad[i].what);
    check_error(&a, what);
    answer_free(&a);
    /* SCAN / RAW_SCAN with the bad table name */
    if (bad[i].tl != 3) {
      b.len = 0;
      assert_int_equal(pc_buf_u8(&b, 1) || pc_buf_str(&b, bad[i].t, bad[i].tl), 0);
      assert_int_equal(pc_wire_put_opt(&b, "m", 1) || pc_wire_put_opt(&b, NULL, 0) ||
                           pc_wire_put_opt(&b, "s", 1) || pc_buf_u64(&b, 100) || pc_buf_u32(&b, 10),
                       0);
      a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
      snprintf(what, sizeof what, "scan: %s", bad[i].what);
      check_error(&a, what);
      answer_free(&a);
      b.len = 0;
      assert_int_equal(pc_buf_u8(&b, 1) || pc_buf_str(&b, bad[i].t, bad[i].tl) ||
                           pc_wire_put_opt(&b, NULL, 0) || pc_wire_put_opt(&b, NULL, 0),
                       0);
      a = call(f, PC_TABLET_OP_RAW_SCAN, b.p, b.len);
      snprintf(what, sizeof what, "raw scan: %s", bad[i].what);
      check_error(&a, what);
      answer_free(&a);
    }
    pc_buf_free(&b);
    pc_buf_free(&cellb);
  }
  /* bad flags: a weak bit of 2 or 0xff in scan_notify's after; flags 4 and
   * 0xff in a mutation; a notify mutation with a value */
  static const uint8_t bad_weak[] = {2, 0xff};
  for (size_t i = 0; i < sizeof bad_weak; i++) {
    pc_buf_t b = {0};
    pc_cell_t c = cell("mp", "c:a");
    assert_int_equal(pc_buf_u32(&b, 0) || pc_buf_u32(&b, 1) || pc_buf_u8(&b, 1) ||
                         pc_wire_put_cell(&b, &c) || pc_buf_u64(&b, 900) ||
                         pc_buf_u8(&b, bad_weak[i]) || pc_buf_u32(&b, 10),
                     0);
    answer_t a = call(f, PC_TABLET_OP_SCAN_NOTIFY, b.p, b.len);
    snprintf(what, sizeof what, "scan_notify after a notification with weak = %u", bad_weak[i]);
    check_error(&a, what);
    answer_free(&a);
    b.len = 0;
    assert_int_equal(pc_buf_u32(&b, 0) || pc_buf_u32(&b, 1) || pc_buf_u8(&b, bad_weak[i]) ||
                         pc_buf_u32(&b, 10),
                     0);
    a = call(f, PC_TABLET_OP_SCAN_NOTIFY, b.p, b.len);
    snprintf(what, sizeof what, "scan_notify with has_after = %u", bad_weak[i]);
    check_error(&a, what);
    answer_free(&a);
    pc_buf_free(&b);
  }
  static const uint8_t bad_flags[] = {4, 0xff};
  for (size_t i = 0; i < sizeof bad_flags; i++) {
    pc_buf_t b = {0};
    pc_cell_t c = cell("mp", "c:a");
    assert_int_equal(pc_buf_u64(&b, 960) || pc_buf_u32(&b, 1) || pc_wire_put_cell(&b, &c) ||
                         pc_buf_u8(&b, PC_WRITE_PUT) || pc_buf_u8(&b, bad_flags[i]) ||
                         pc_buf_str(&b, "v", 1),
                     0);
    answer_t a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    snprintf(what, sizeof what, "one-phase with mutation flags %u", bad_flags[i]);
    check_error(&a, what);
    answer_free(&a);
    pc_buf_free(&b);
  }
  {
    pc_buf_t b = {0};
    pc_cell_t c = cell("mp", "c:a");
    assert_int_equal(pc_buf_u64(&b, 960) || pc_buf_u32(&b, 1) || pc_wire_put_cell(&b, &c) ||
                         pc_buf_u8(&b, PC_WRITE_NOTIFY) || pc_buf_u8(&b, 2) ||
                         pc_buf_str(&b, "v", 1),
                     0);
    answer_t a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    check_error(&a, "one-phase of a weak notification with a value");
    answer_free(&a);
    pc_buf_free(&b);
  }
  /* bad enum values inside a mutation: kind 2 (rollback), 4 and 0xff */
  for (int kind = 2; kind <= 255; kind = kind == 2 ? 4 : kind == 4 ? 255 : 256) {
    pc_buf_t b = {0};
    pc_cell_t c = cell("mp", "c:a");
    assert_int_equal(pc_buf_u64(&b, 960) || pc_buf_u32(&b, 1) || pc_wire_put_cell(&b, &c) ||
                         pc_buf_u8(&b, (uint8_t)kind) || pc_buf_u8(&b, 0) || pc_buf_str(&b, "v", 1),
                     0);
    answer_t a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    snprintf(what, sizeof what, "one-phase with mutation kind %d", kind);
    check_error(&a, what);
    answer_free(&a);
    pc_buf_free(&b);
  }
  /* start_ts 0 */
  {
    pc_buf_t b = {0};
    pc_mutation_t m = put("mp", "c:a", "v");
    enc_one_phase(&b, 0, &m, 1);
    answer_t a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    check_error(&a, "one-phase with start_ts 0");
    answer_free(&a);
    b.len = 0;
    enc_prewrite(&b, &m.cell, 0, 3000, 1, &m, 1);
    a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
    check_error(&a, "prewrite with start_ts 0");
    answer_free(&a);
    pc_buf_free(&b);
  }
}

/* A misrouted answer: PC_INVALID naming the tablet. */
static void check_misrouted(const answer_t *a, const char *what) {
  check_error(a, what);
  pc_status_t st = a->rc != PC_OK ? a->rc : a->status;
  if (st != PC_INVALID) fail_msg("%s: status %s, want invalid_argument", what, pc_status_name(st));
  if (!strstr(answer_text(a), T_NAME))
    fail_msg("%s: message '%s' does not name tablet %s", what, answer_text(a), T_NAME);
}

static void test_misrouted_rows(void **state) {
  fixture_t *f = *state;
  /* the tablet serves ["m", "t"): "l", "lzzz", "t", "t0", "z" and "\xff" are outside */
  static const char *const outside[] = {"l", "lzzz", "t", "t0", "z", "\xff", "M", "\x01"};
  char what[128];
  pc_buf_t b = {0};
  for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
    const char *row = outside[i];
    pc_cell_t c = cell(row, "c:a"), in = cell("mm", "c:a");
    pc_mutation_t m = put(row, "c:a", "v"), min = put("mm", "c:a", "v");
    b.len = 0;
    enc_get(&b, &c, 500);
    answer_t a = call(f, PC_TABLET_OP_GET, b.p, b.len);
    snprintf(what, sizeof what, "get of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    /* prewrite: the outside row as the only and as the second mutation (the
     * primary may live on another tablet: that alone is fine) */
    pc_mutation_t two[2] = {min, m};
    b.len = 0;
    enc_prewrite(&b, &in, 900, 3000, 1, two, 2);
    a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
    snprintf(what, sizeof what, "prewrite of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    b.len = 0;
    enc_one_phase(&b, 960, &m, 1);
    a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
    snprintf(what, sizeof what, "one-phase of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    pc_cell_t cells[2] = {in, c};
    b.len = 0;
    enc_commit(&b, 900, 901, cells, 2);
    a = call(f, PC_TABLET_OP_COMMIT, b.p, b.len);
    snprintf(what, sizeof what, "commit of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    b.len = 0;
    enc_rollback(&b, 900, cells, 2);
    a = call(f, PC_TABLET_OP_ROLLBACK, b.p, b.len);
    snprintf(what, sizeof what, "rollback of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    b.len = 0;
    enc_check_txn(&b, &c, 900, 901, 1);
    a = call(f, PC_TABLET_OP_CHECK_TXN, b.p, b.len);
    snprintf(what, sizeof what, "check_txn of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    b.len = 0;
    enc_heartbeat(&b, &c, 900, 3000);
    a = call(f, PC_TABLET_OP_HEARTBEAT, b.p, b.len);
    snprintf(what, sizeof what, "heartbeat of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    b.len = 0;
    enc_clear_notify(&b, &c, 900);
    a = call(f, PC_TABLET_OP_CLEAR_NOTIFY, b.p, b.len);
    snprintf(what, sizeof what, "clear_notify of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);

    b.len = 0; /* one of the tablet's rows, then this one */
    assert_int_equal(pc_buf_u32(&b, 2), 0);
    enc_clear_notify(&b, &in, 900);
    enc_clear_notify(&b, &c, 900);
    a = call(f, PC_TABLET_OP_CLEAR_NOTIFY_MANY, b.p, b.len);
    snprintf(what, sizeof what, "clear_notify_many of row '%s'", row);
    check_misrouted(&a, what);
    answer_free(&a);
  }
  /* nothing of the above reached the store */
  b.len = 0;
  enc_raw_scan(&b, NULL, NULL, NULL);
  answer_t a = call(f, PC_TABLET_OP_RAW_SCAN, b.p, b.len);
  expect_status(&a, PC_OK, "raw scan after misrouted requests");
  assert_int_equal(a.plen, 4);
  answer_free(&a);

  /* scans reaching outside the range */
  struct {
    const char *start, *end;
  } scans[] = {{"a", "n"}, {"l", "t"}, {"m", NULL}, {"m", "u"}, {"", "s"}, {"n", "zz"}};
  for (size_t i = 0; i < sizeof scans / sizeof scans[0]; i++) {
    b.len = 0;
    enc_scan(&b, TABLE, scans[i].start, NULL, scans[i].end, 100, 10);
    a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
    snprintf(what, sizeof what, "scan ['%s', '%s')", scans[i].start,
             scans[i].end ? scans[i].end : "(end)");
    check_misrouted(&a, what);
    answer_free(&a);
  }
  /* a scan without a start is malformed */
  b.len = 0;
  enc_scan(&b, TABLE, NULL, NULL, "s", 100, 10);
  a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
  check_error(&a, "scan without a start");
  answer_free(&a);
  /* the edges are inside: "m" and a range ending at "t" */
  b.len = 0;
  pc_cell_t edge = cell("m", "c:a");
  enc_get(&b, &edge, 500);
  a = call(f, PC_TABLET_OP_GET, b.p, b.len);
  expect_status(&a, PC_NOT_FOUND, "get of row 'm' (first row of the range)");
  answer_free(&a);
  b.len = 0;
  enc_scan(&b, TABLE, "m", NULL, "t", 100, 10);
  a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
  expect_status(&a, PC_OK, "scan of exactly the range");
  answer_free(&a);
  pc_buf_free(&b);
}

static void test_unknown_ops(void **state) {
  fixture_t *f = *state;
  static const uint8_t ops[] = {0x00, 0x01, 0x02, 0x0f, 0x23, 0x24, 0x7f, 0x80, 0x90, 0xff};
  char what[64];
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    for (int withbody = 0; withbody < 2; withbody++) {
      answer_t a = call(f, ops[i], "\x00\x00\x00\x01x", withbody ? 5 : 0);
      snprintf(what, sizeof what, "op 0x%02x", ops[i]);
      check_error(&a, what);
      if (!strstr(answer_text(&a), "opcode") && !strstr(answer_text(&a), "op "))
        fail_msg("%s: message '%s' does not name the opcode", what, answer_text(&a));
      answer_free(&a);
    }
  }
}

/* ---- random bodies ------------------------------------------------------ */

static uint64_t rng_state;

static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

/* The answer has the documented shape (whatever it says). */
static void check_shape(const answer_t *a, const char *what) {
  if (a->rc != PC_OK) {
    if (a->err.text[0] == '\0') fail_msg("%s: error %d without a message", what, a->rc);
    return;
  }
  if (!a->well_formed) fail_msg("%s: malformed reply of %zu bytes", what, a->reply.len);
  if (a->status != PC_OK && a->status != PC_NOT_FOUND && a->msg[0] == '\0')
    fail_msg("%s: error %s without a message", what, pc_status_name(a->status));
}

static void test_random_bodies(void **state) {
  fixture_t *f = *state;
  const char *seed_env = getenv("PC_FUZZ_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 0x9E3779B97F4A7C15ull;
  rng_state = seed ? seed : 1;
  const char *iter_env = getenv("PC_FUZZ_ITERATIONS");
  long iters = iter_env ? atol(iter_env) : 20000;
  sample_t s[NSAMPLES];
  make_samples(s);
  /* GC requests go to a second tablet with the same data: a mutated safe
   * point would otherwise make the first refuse every later GET and SCAN
   * (PC_ABORTED) before they reach its store */
  pc_tablet_t *gc_side = new_tablet(f->dir, "gc-side");
  /* give the stores some state so that mutated bodies meet data, locks, rollbacks */
  for (int i = 0; i < NSAMPLES; i++) {
    answer_t a = call(f, s[i].op, s[i].body.p, s[i].body.len);
    check_shape(&a, s[i].name);
    answer_free(&a);
    a = call_on(gc_side, s[i].op, s[i].body.p, s[i].body.len);
    check_shape(&a, s[i].name);
    answer_free(&a);
  }
  pc_buf_t b = {0};
  char what[128];
  size_t errors = 0, random_bodies = 0;
  for (long it = 0; it < iters; it++) {
    uint32_t mode = rnd() % 4;
    uint8_t op;
    b.len = 0;
    if (mode == 0) {
      /* pure random bytes, 1..256 of them, for a known or unknown op */
      op = (uint8_t)(rnd() % 10 == 0 ? rnd() : PC_TABLET_OP_GET + rnd() % 15);
      size_t n = 1 + rnd() % 256;
      for (size_t i = 0; i < n; i++) assert_int_equal(pc_buf_u8(&b, (uint8_t)rnd()), 0);
      random_bodies++;
    } else {
      /* a valid body with a few mutations: flipped bits, replaced bytes,
       * lengths poked to extreme values, cut or extended */
      const sample_t *smp = &s[rnd() % NSAMPLES];
      op = smp->op;
      assert_int_equal(pc_buf_append(&b, smp->body.p, smp->body.len), 0);
      int nmut = 1 + (int)(rnd() % 4);
      for (int k = 0; k < nmut; k++) {
        uint32_t kind = rnd() % 6;
        if (kind == 0 && b.len) {
          b.p[rnd() % b.len] ^= (char)(1u << (rnd() % 8));
        } else if (kind == 1 && b.len) {
          b.p[rnd() % b.len] = (char)rnd();
        } else if (kind == 2 && b.len >= 4) {
          static const uint32_t vals[] = {0, 1, 2, 63, 64, 65, 4096, 4097, 1000000, 1000001,
                                          0x7FFFFFFF, 0xFFFFFFFF, 100000, 8388608};
          poke_u32(&b, rnd() % (b.len - 3), vals[rnd() % (sizeof vals / sizeof vals[0])]);
        } else if (kind == 3 && b.len) {
          b.len = rnd() % b.len;
        } else if (kind == 4) {
          size_t n = 1 + rnd() % 16;
          for (size_t i = 0; i < n; i++) assert_int_equal(pc_buf_u8(&b, (uint8_t)rnd()), 0);
        } else if (b.len) {
          b.p[rnd() % b.len] = 0; /* NULs into names */
        }
      }
    }
    answer_t a = call_on(op == PC_TABLET_OP_GC ? gc_side : f->tablet, op, b.p, b.len);
    snprintf(what, sizeof what, "iteration %ld (seed 0x%llx) op 0x%02x, %zu bytes", it,
             (unsigned long long)seed, op, b.len);
    check_shape(&a, what);
    /* random bytes are never a valid request, except where any bytes of the
     * right length are: SCAN_LOCKS (u64) and GC (u64 u32) */
    int any_bytes_valid = (op == PC_TABLET_OP_SCAN_LOCKS && b.len == 8) ||
                          (op == PC_TABLET_OP_GC && b.len == 12);
    if (mode == 0 && !any_bytes_valid) check_error(&a, what);
    if (a.rc != PC_OK || a.status != PC_OK) errors++;
    answer_free(&a);
  }
  pc_buf_free(&b);
  free_samples(s);
  pc_tablet_destroy(gc_side);
  /* most mutated bodies are refused */
  assert_true(errors > (size_t)iters / 2);
  assert_true(random_bodies > 0);
  /* and the tablet still serves */
  answer_t a = call(f, PC_TABLET_OP_INFO, NULL, 0);
  expect_status(&a, PC_OK, "info after the fuzzing");
  answer_free(&a);
}

/* ---- heartbeat, lock scans and garbage collection ------------------------ */

/* The hybrid timestamp of physical millisecond ms (logical part 0). */
static uint64_t ts_ms(uint64_t ms) { return ms << PC_TS_LOGICAL_BITS; }

/* Sends body b as op and asserts the store status. */
static void expect_op(fixture_t *f, uint8_t op, const pc_buf_t *b, pc_status_t want,
                      const char *what) {
  answer_t a = call(f, op, b->p, b->len);
  expect_status(&a, want, what);
  answer_free(&a);
}

/* SCAN_LOCKS below: decodes the reply's locks into l[0..cap) and returns how
 * many there were (the reply must not be truncated). */
static uint32_t scan_locks(fixture_t *f, uint64_t below, pc_lock_info_t *l, uint32_t cap) {
  pc_buf_t b = {0};
  assert_int_equal(pc_buf_u64(&b, below), 0);
  answer_t a = call(f, PC_TABLET_OP_SCAN_LOCKS, b.p, b.len);
  expect_status(&a, PC_OK, "scan_locks");
  pc_rd_t r = {a.payload, a.plen, 0, 1};
  uint8_t truncated = pc_rd_u8(&r);
  uint32_t n = pc_rd_u32(&r);
  assert_true(r.ok);
  assert_int_equal(truncated, 0);
  assert_true(n <= cap);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(pc_wire_get_lock(&r, &l[i]), 0);
  assert_int_equal(r.pos, a.plen);
  answer_free(&a);
  pc_buf_free(&b);
  return n;
}

static void free_locks(pc_lock_info_t *l, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) pc_lock_info_free(&l[i]);
}

/* A one-cell transaction prewritten at start and committed at start + 1;
 * value NULL writes a delete. */
static void commit_cell(fixture_t *f, const pc_cell_t *c, uint64_t start, const char *value,
                        size_t vlen) {
  pc_mutation_t m = {*c, value ? PC_WRITE_PUT : PC_WRITE_DELETE, value, value ? vlen : 0, 0};
  pc_buf_t b = {0};
  enc_prewrite(&b, c, start, 3000, 77, &m, 1);
  expect_op(f, PC_TABLET_OP_PREWRITE, &b, PC_OK, "prewrite of a version");
  b.len = 0;
  enc_commit(&b, start, start + 1, c, 1);
  expect_op(f, PC_TABLET_OP_COMMIT, &b, PC_OK, "commit of a version");
  pc_buf_free(&b);
}

/* A one-cell transaction prewritten at start and rolled back: a rollback record at start. */
static void rolled_back_cell(fixture_t *f, const pc_cell_t *c, uint64_t start) {
  pc_mutation_t m = put(c->row, c->col, "doomed");
  m.cell = *c;
  pc_buf_t b = {0};
  enc_prewrite(&b, c, start, 3000, 77, &m, 1);
  expect_op(f, PC_TABLET_OP_PREWRITE, &b, PC_OK, "prewrite to roll back");
  b.len = 0;
  enc_rollback(&b, start, c, 1);
  expect_op(f, PC_TABLET_OP_ROLLBACK, &b, PC_OK, "rollback");
  pc_buf_free(&b);
}

/* GET of c at ts answers want, and on PC_OK the value is (value, vlen). */
static void expect_get(fixture_t *f, const pc_cell_t *c, uint64_t ts, pc_status_t want,
                       const char *value, size_t vlen, const char *what) {
  pc_buf_t b = {0};
  enc_get(&b, c, ts);
  answer_t a = call(f, PC_TABLET_OP_GET, b.p, b.len);
  expect_status(&a, want, what);
  if (want == PC_OK) {
    pc_rd_t r = {a.payload, a.plen, 0, 1};
    size_t n;
    const char *v = pc_rd_str(&r, &n);
    assert_true(r.ok && r.pos == a.plen);
    if (n != vlen || memcmp(v, value, vlen) != 0)
      fail_msg("%s: read %zu bytes '%.16s', want %zu bytes '%.16s'", what, n, v, vlen, value);
  }
  answer_free(&a);
  pc_buf_free(&b);
}

typedef struct raw_tally {
  size_t puts, deletes, rollbacks, data, locks;
} raw_tally_t;

/* What RAW_SCAN shows of row (every column). */
static raw_tally_t raw_tally(fixture_t *f, const char *row) {
  char end[16];
  snprintf(end, sizeof end, "%s", row);
  size_t rl = strlen(row);
  pc_buf_t b = {0};
  assert_int_equal(pc_wire_put_opt(&b, TABLE, strlen(TABLE)) || pc_wire_put_opt(&b, row, rl) ||
                       pc_wire_put_opt(&b, end, rl + 1), /* [row, row "\0") */
                   0);
  answer_t a = call(f, PC_TABLET_OP_RAW_SCAN, b.p, b.len);
  expect_status(&a, PC_OK, "raw scan of a row");
  raw_tally_t t = {0};
  pc_rd_t r = {a.payload, a.plen, 0, 1};
  uint32_t n = pc_rd_u32(&r);
  pc_arena_t ar = {0};
  for (uint32_t i = 0; i < n; i++) {
    pc_raw_cell_t c;
    assert_int_equal(pc_wire_get_raw(&r, &ar, &c), 0);
    assert_int_equal(c.row_len, rl);
    assert_memory_equal(c.row, row, rl);
    if (c.kind == PC_CELL_DATA) t.data++;
    if (c.kind == PC_CELL_LOCK) t.locks++;
    if (c.kind == PC_CELL_WRITE && c.write_kind == PC_WRITE_PUT) t.puts++;
    if (c.kind == PC_CELL_WRITE && c.write_kind == PC_WRITE_DELETE) t.deletes++;
    if (c.kind == PC_CELL_WRITE && c.write_kind == PC_WRITE_ROLLBACK) t.rollbacks++;
  }
  assert_true(r.ok && r.pos == a.plen);
  pc_arena_free(&ar);
  answer_free(&a);
  pc_buf_free(&b);
  return t;
}

typedef struct gc_reply {
  uint64_t cells, versions, rollbacks, data;
} gc_reply_t;

static gc_reply_t tablet_gc(fixture_t *f, uint64_t safe_point, const char *what) {
  pc_buf_t b = {0};
  enc_gc(&b, safe_point, 0);
  answer_t a = call(f, PC_TABLET_OP_GC, b.p, b.len);
  expect_status(&a, PC_OK, what);
  assert_int_equal(a.plen, 32);
  gc_reply_t g = {rd_u64_at(a.payload), rd_u64_at(a.payload + 8), rd_u64_at(a.payload + 16),
                  rd_u64_at(a.payload + 24)};
  answer_free(&a);
  pc_buf_free(&b);
  return g;
}

/* HEARTBEAT raises the TTL of a transaction's lock (never lowers it), and
 * only while that lock is there; SCAN_LOCKS finds the locks below a
 * timestamp, with their cells; GC deletes the versions no read at or above
 * its safe point needs, reports them, and from then on refuses reads below
 * the safe point. */
static void test_heartbeat_scan_locks_gc(void **state) {
  fixture_t *f = *state;
  pc_buf_t b = {0};
  answer_t a;
  pc_lock_info_t l[4];

  /* a transaction of two rows at physical time 1000 ms, lease 3000 ms: its
   * primary's lock expires at 4000 ms */
  uint64_t s1 = ts_ms(1000);
  pc_cell_t p = cell("mh", "c:a"), sec = cell("nh", "c:b");
  pc_mutation_t m[2] = {put("mh", "c:a", "h1"), put("nh", "c:b", "h2")};
  enc_prewrite(&b, &p, s1, 3000, 77, m, 2);
  expect_op(f, PC_TABLET_OP_PREWRITE, &b, PC_OK, "prewrite");

  /* SCAN_LOCKS: nothing below the locks' start_ts, both locks just above it */
  assert_int_equal(scan_locks(f, s1, l, 4), 0);
  uint32_t n = scan_locks(f, s1 + 1, l, 4);
  assert_int_equal(n, 2);
  for (uint32_t i = 0; i < n; i++) {
    assert_int_equal(l[i].start_ts, s1);
    assert_int_equal(l[i].ttl_ms, 3000);
    assert_int_equal(l[i].session, 77);
    assert_int_equal(l[i].prow.len, 2);
    assert_memory_equal(l[i].prow.p, "mh", 2);
    assert_string_equal(l[i].ctable.p, TABLE);
  }
  /* the cells they sit on, in key order */
  assert_int_equal(l[0].crow.len, 2);
  assert_memory_equal(l[0].crow.p, "mh", 2);
  assert_memory_equal(l[0].ccol.p, "c:a", 3);
  assert_int_equal(l[1].crow.len, 2);
  assert_memory_equal(l[1].crow.p, "nh", 2);
  assert_memory_equal(l[1].ccol.p, "c:b", 3);
  free_locks(l, n);

  /* HEARTBEAT to 9000 ms: the lease now runs to 10000 ms; a lower TTL
   * later does not shorten it */
  b.len = 0;
  enc_heartbeat(&b, &p, s1, 9000);
  expect_op(f, PC_TABLET_OP_HEARTBEAT, &b, PC_OK, "heartbeat");
  b.len = 0;
  enc_heartbeat(&b, &p, s1, 1000);
  expect_op(f, PC_TABLET_OP_HEARTBEAT, &b, PC_OK, "heartbeat with a lower ttl");
  n = scan_locks(f, s1 + 1, l, 4);
  assert_int_equal(n, 2);
  assert_memory_equal(l[0].crow.p, "mh", 2);
  assert_int_equal(l[0].ttl_ms, 9000);
  assert_int_equal(l[1].ttl_ms, 3000); /* only the primary's lease is renewed */
  free_locks(l, n);
  /* at 5000 ms, past the first lease but within the renewed one, the
   * transaction is alive */
  b.len = 0;
  enc_check_txn(&b, &p, s1, ts_ms(5000), 0);
  a = call(f, PC_TABLET_OP_CHECK_TXN, b.p, b.len);
  expect_status(&a, PC_OK, "check_txn within the renewed lease");
  assert_int_equal(a.plen, 9);
  assert_int_equal((unsigned char)a.payload[0], PC_TXN_ALIVE);
  answer_free(&a);

  /* HEARTBEAT of a lock that is not there: another transaction's start_ts
   * on a locked cell, a cell never locked */
  b.len = 0;
  enc_heartbeat(&b, &p, s1 + 1, 9000);
  expect_op(f, PC_TABLET_OP_HEARTBEAT, &b, PC_ABORTED, "heartbeat of another start_ts");
  pc_cell_t never = cell("nn", "c:n");
  b.len = 0;
  enc_heartbeat(&b, &never, s1, 9000);
  expect_op(f, PC_TABLET_OP_HEARTBEAT, &b, PC_ABORTED, "heartbeat of a cell never locked");

  /* at 10500 ms the renewed lease has run out: rolled back; a heartbeat
   * then finds no lock to renew */
  b.len = 0;
  enc_check_txn(&b, &p, s1, ts_ms(10500), 0);
  a = call(f, PC_TABLET_OP_CHECK_TXN, b.p, b.len);
  expect_status(&a, PC_OK, "check_txn past the renewed lease");
  assert_int_equal((unsigned char)a.payload[0], PC_TXN_ROLLED_BACK);
  answer_free(&a);
  b.len = 0;
  enc_heartbeat(&b, &p, s1, 20000);
  expect_op(f, PC_TABLET_OP_HEARTBEAT, &b, PC_ABORTED, "heartbeat after the rollback");
  n = scan_locks(f, UINT64_MAX, l, 4); /* the secondary's lock is left */
  assert_int_equal(n, 1);
  assert_memory_equal(l[0].crow.p, "nh", 2);
  free_locks(l, n);
  b.len = 0;
  enc_rollback(&b, s1, &sec, 1);
  expect_op(f, PC_TABLET_OP_ROLLBACK, &b, PC_OK, "rollback of the secondary");
  assert_int_equal(scan_locks(f, UINT64_MAX, l, 4), 0);

  /* versions of cell mg (newest first), around a safe point S at 2300 ms:
   *   2450 rollback      above S: kept
   *   2400 "g4"          above S, the head: kept
   *   2200 "g3"          the newest at or below S: kept (reads at S see it)
   *   2150 rollback      deleted
   *   2100 big value     deleted, with its data cell
   *   2000 "g1"          deleted
   * and of cell md: 2200 delete (its head), 2000 "d1" (deleted). */
  pc_cell_t g = cell("mg", "c:g"), d = cell("md", "c:d");
  static char big[5000];
  memset(big, 'B', sizeof big);
  commit_cell(f, &g, ts_ms(2000), "g1", 2);
  commit_cell(f, &g, ts_ms(2100), big, sizeof big);
  rolled_back_cell(f, &g, ts_ms(2150));
  commit_cell(f, &g, ts_ms(2200), "g3", 2);
  commit_cell(f, &g, ts_ms(2400), "g4", 2);
  rolled_back_cell(f, &g, ts_ms(2450));
  commit_cell(f, &d, ts_ms(2000), "d1", 2);
  commit_cell(f, &d, ts_ms(2200), NULL, 0);
  raw_tally_t tg = raw_tally(f, "mg"), td = raw_tally(f, "md");
  assert_int_equal(tg.puts, 4);
  assert_int_equal(tg.rollbacks, 2);
  assert_int_equal(tg.data, 1);
  assert_int_equal(td.puts, 1);
  assert_int_equal(td.deletes, 1);
  expect_get(f, &g, ts_ms(2100) + 1, PC_OK, big, sizeof big, "get of the big version before gc");
  expect_get(f, &g, ts_ms(2000) + 1, PC_OK, "g1", 2, "get of the oldest version before gc");

  uint64_t safe = ts_ms(2300);
  gc_reply_t r = tablet_gc(f, safe, "gc");
  /* cells with commit records: mg, md, and mh and nh (their rollbacks) */
  assert_int_equal(r.cells, 4);
  assert_int_equal(r.versions, 3); /* mg: 2100, 2000; md: 2000 */
  assert_int_equal(r.rollbacks, 3); /* mg at 2150; mh and nh at 1000 */
  assert_int_equal(r.data, 1);
  tg = raw_tally(f, "mg");
  assert_int_equal(tg.puts, 2);
  assert_int_equal(tg.rollbacks, 1);
  assert_int_equal(tg.data, 0);
  td = raw_tally(f, "md");
  assert_int_equal(td.puts, 0);
  assert_int_equal(td.deletes, 1); /* the head's record stays */
  assert_int_equal(raw_tally(f, "mh").rollbacks, 0);

  /* reads at or above the safe point read as before; below it, refused */
  expect_get(f, &g, safe, PC_OK, "g3", 2, "get at the safe point");
  expect_get(f, &g, ts_ms(2400) + 1, PC_OK, "g4", 2, "get of the head");
  expect_get(f, &d, safe, PC_NOT_FOUND, NULL, 0, "get of the deleted cell");
  expect_get(f, &g, safe - 1, PC_ABORTED, NULL, 0, "get below the safe point");
  expect_get(f, &g, ts_ms(2000) + 1, PC_ABORTED, NULL, 0, "get of a collected version");
  b.len = 0;
  enc_scan(&b, TABLE, R_START, NULL, R_END, safe - 1, 100);
  expect_op(f, PC_TABLET_OP_SCAN, &b, PC_ABORTED, "scan below the safe point");
  b.len = 0;
  enc_scan(&b, TABLE, R_START, NULL, R_END, safe, 100);
  a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
  expect_status(&a, PC_OK, "scan at the safe point");
  {
    pc_rd_t rd = {a.payload, a.plen, 0, 1};
    assert_int_equal(pc_rd_u32(&rd), 1);
    size_t len;
    const char *s = pc_rd_str(&rd, &len);
    assert_true(rd.ok && len == 2 && memcmp(s, "mg", 2) == 0);
    s = pc_rd_str(&rd, &len);
    s = pc_rd_str(&rd, &len);
    assert_true(rd.ok && len == 2 && memcmp(s, "g3", 2) == 0);
    assert_int_equal(rd.pos, a.plen);
  }
  answer_free(&a);

  /* a pass again finds nothing more; one at a lower safe point neither
   * deletes anything nor lowers the bound on reads */
  r = tablet_gc(f, safe, "gc again");
  assert_int_equal(r.versions + r.rollbacks + r.data, 0);
  /* INFO reports the passes: the safe point, and what they deleted in all */
  a = call(f, PC_TABLET_OP_INFO, NULL, 0);
  expect_status(&a, PC_OK, "info after gc");
  {
    pc_rd_t rd = {a.payload, a.plen, 0, 1};
    size_t len;
    (void)pc_rd_str(&rd, &len);
    assert_int_equal(pc_rd_u32(&rd), 1);
    (void)pc_rd_str(&rd, &len);
    (void)pc_rd_str(&rd, &len);
    (void)pc_rd_u64(&rd); /* ops */
    assert_int_equal(pc_rd_u64(&rd), safe);
    assert_int_equal(pc_rd_u64(&rd), 2); /* passes */
    assert_int_equal(pc_rd_u64(&rd), 3); /* versions */
    assert_int_equal(pc_rd_u64(&rd), 3); /* rollbacks */
    assert_int_equal(pc_rd_u64(&rd), 1); /* data */
    assert_true(rd.ok && rd.pos == a.plen);
  }
  answer_free(&a);
  r = tablet_gc(f, ts_ms(2250), "gc at a lower safe point");
  assert_int_equal(r.versions + r.rollbacks + r.data, 0);
  expect_get(f, &g, ts_ms(2260), PC_ABORTED, NULL, 0, "get below the first safe point");
  expect_get(f, &g, safe, PC_OK, "g3", 2, "get at the safe point after more passes");
  pc_buf_free(&b);
}

/* ---- notifications -------------------------------------------------------- */

typedef struct note {
  char row[16], col[16];
  uint64_t ts;
  int weak;
  uint32_t bucket;
} note_t;

/* SCAN_NOTIFY: decodes the reply's notifications into out[0..cap) and
 * returns how many there were; *more receives its flag. */
static uint32_t scan_notes(fixture_t *f, uint32_t lo, uint32_t hi, const pc_notification_t *after,
                           uint32_t limit, note_t *out, uint32_t cap, int *more) {
  pc_buf_t b = {0};
  enc_scan_notify(&b, lo, hi, after, limit);
  answer_t a = call(f, PC_TABLET_OP_SCAN_NOTIFY, b.p, b.len);
  expect_status(&a, PC_OK, "scan_notify");
  pc_rd_t r = {a.payload, a.plen, 0, 1};
  *more = pc_rd_u8(&r);
  uint32_t n = pc_rd_u32(&r);
  assert_true(r.ok);
  assert_true(n <= cap && n <= limit);
  pc_arena_t ar = {0};
  for (uint32_t i = 0; i < n; i++) {
    pc_notification_t x;
    assert_int_equal(pc_wire_get_notification(&r, &ar, &x), 0);
    assert_string_equal(x.cell.table, TABLE);
    assert_true(x.cell.rlen < sizeof out[i].row && x.cell.clen < sizeof out[i].col);
    memset(&out[i], 0, sizeof out[i]);
    memcpy(out[i].row, x.cell.row, x.cell.rlen);
    memcpy(out[i].col, x.cell.col, x.cell.clen);
    out[i].ts = x.ts;
    out[i].weak = x.weak;
    out[i].bucket = x.bucket;
    assert_int_equal(x.bucket, pc_notify_bucket(TABLE, x.cell.row, x.cell.rlen));
  }
  assert_int_equal(r.pos, a.plen);
  pc_arena_free(&ar);
  answer_free(&a);
  pc_buf_free(&b);
  return n;
}

/* The notification after which a scan goes on. */
static pc_notification_t after_of(const note_t *n) {
  pc_notification_t x = {{TABLE, n->row, strlen(n->row), n->col, strlen(n->col)}, n->ts, n->weak,
                         n->bucket};
  return x;
}

static int note_is(const note_t *n, const char *row, const char *col, uint64_t ts, int weak) {
  return strcmp(n->row, row) == 0 && strcmp(n->col, col) == 0 && n->ts == ts && n->weak == weak;
}

static int has_note(const note_t *v, uint32_t n, const char *row, const char *col, uint64_t ts,
                    int weak) {
  for (uint32_t i = 0; i < n; i++)
    if (note_is(&v[i], row, col, ts, weak)) return 1;
  return 0;
}


/* What a tablet does not take from a client (pc_tablet_set_limits): a lock's
 * lease past lock_ttl_ms from now, a timestamp the oracle has not issued (a
 * start_ts, a commit_ts, a rollback's, a settling's, a read's), a GC safe
 * point above the oracle's timestamps, a scan reply past the reply bound. */
static void test_limits_not_taken_from_clients(void **state) {
  fixture_t *f = *state;
  pc_tablet_set_limits(f->tablet, 3000, 4096);
  pc_buf_t b = {0};
  pc_lock_info_t l[2];
  uint64_t now = pc_now_wall_ms();
  /* a lease of 49 days asked for a transaction begun a second ago: about 4 s */
  uint64_t s1 = ts_ms(now - 1000);
  pc_cell_t p = cell("ml", "c:a");
  pc_mutation_t m = put("ml", "c:a", "v");
  enc_prewrite(&b, &p, s1, UINT32_MAX, 5, &m, 1);
  expect_op(f, PC_TABLET_OP_PREWRITE, &b, PC_OK, "prewrite asking for a lease of 49 days");
  assert_int_equal(scan_locks(f, s1 + 1, l, 2), 1);
  assert_true(l[0].ttl_ms >= 4000 && l[0].ttl_ms < 4000 + 60000);
  free_locks(l, 1);
  /* a heartbeat cannot stretch it either */
  b.len = 0;
  enc_heartbeat(&b, &p, s1, UINT32_MAX);
  expect_op(f, PC_TABLET_OP_HEARTBEAT, &b, PC_OK, "heartbeat asking for 49 days");
  assert_int_equal(scan_locks(f, s1 + 1, l, 2), 1);
  assert_true(l[0].ttl_ms < 4000 + 60000);
  free_locks(l, 1);
  /* a start_ts a day ahead of the clock and of the oracle: refused, nothing locked */
  pc_cell_t q = cell("mq", "c:a");
  pc_mutation_t mq = put("mq", "c:a", "v");
  b.len = 0;
  enc_prewrite(&b, &q, ts_ms(now + 86400000), 1000, 5, &mq, 1);
  answer_t a = call(f, PC_TABLET_OP_PREWRITE, b.p, b.len);
  expect_status(&a, PC_INVALID, "prewrite at a start_ts the oracle has not issued");
  if (!strstr(a.msg, "beyond the oracle")) fail_msg("unexpected: %s", a.msg);
  answer_free(&a);
  assert_int_equal(scan_locks(f, UINT64_MAX, l, 2), 1);
  free_locks(l, 1);
  /* the lock's commit at 2^64-2, a rollback, a settling and a read there:
   * refused, and the lock is still there to commit */
  uint64_t far = UINT64_MAX - 1;
  const char *const what[] = {"commit at 2^64-2", "rollback at 2^64-2", "check_txn at 2^64-2",
                              "get at 2^64-2"};
  for (int k = 0; k < 4; k++) {
    b.len = 0;
    if (k == 0) enc_commit(&b, s1, far, &p, 1);
    else if (k == 1) enc_rollback(&b, far, &q, 1);
    else if (k == 2) enc_check_txn(&b, &q, far, s1, 1);
    else enc_get(&b, &p, far);
    uint8_t op = k == 0   ? PC_TABLET_OP_COMMIT
                 : k == 1 ? PC_TABLET_OP_ROLLBACK
                 : k == 2 ? PC_TABLET_OP_CHECK_TXN
                          : PC_TABLET_OP_GET;
    a = call(f, op, b.p, b.len);
    expect_status(&a, PC_INVALID, what[k]);
    if (!strstr(a.msg, "beyond the oracle")) fail_msg("%s: unexpected: %s", what[k], a.msg);
    answer_free(&a);
  }
  assert_int_equal(scan_locks(f, UINT64_MAX, l, 2), 1);
  free_locks(l, 1);
  /* a safe point above every timestamp the oracle issued: refused */
  b.len = 0;
  enc_gc(&b, UINT64_MAX, 0);
  a = call(f, PC_TABLET_OP_GC, b.p, b.len);
  expect_status(&a, PC_INVALID, "gc at 2^64-1");
  if (!strstr(a.msg, "beyond the oracle")) fail_msg("unexpected: %s", a.msg);
  answer_free(&a);
  pc_tablet_gc_t g;
  pc_tablet_gc_stats(f->tablet, &g);
  assert_int_equal(g.safe_point, 0);
  /* a scan whose reply would pass 4096 bytes */
  char big[1500];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  pc_mutation_t bm[4] = {put("mb", "c:a", big), put("mb", "c:b", big), put("mb", "c:c", big),
                         put("mb", "c:d", big)};
  b.len = 0;
  enc_one_phase(&b, ts_ms(now - 500), bm, 4);
  expect_op(f, PC_TABLET_OP_ONE_PHASE, &b, PC_OK, "one-phase commit of 6 KB");
  b.len = 0;
  enc_scan(&b, TABLE, "mb", NULL, "mc", ts_ms(pc_now_wall_ms()), 100);
  a = call(f, PC_TABLET_OP_SCAN, b.p, b.len);
  expect_status(&a, PC_INVALID, "a scan reply past 4096 bytes");
  if (!strstr(a.msg, "exceeds 4096 bytes")) fail_msg("unexpected: %s", a.msg);
  answer_free(&a);
  b.len = 0;
  enc_raw_scan(&b, TABLE, "mb", "mc");
  a = call(f, PC_TABLET_OP_RAW_SCAN, b.p, b.len);
  expect_status(&a, PC_INVALID, "a raw scan reply past 4096 bytes");
  answer_free(&a);
  b.len = 0;
  enc_scan(&b, TABLE, "mb", NULL, "mc", ts_ms(pc_now_wall_ms()), 2);
  expect_op(f, PC_TABLET_OP_SCAN, &b, PC_OK, "a scan of two cells");
  pc_buf_free(&b);
}

/* What the publish hook of test_gc_publishes_before_deleting saw. */
typedef struct publish_log {
  fixture_t *f;
  int calls;
  uint64_t safe;
  pc_status_t answer;     /* what the hook returns */
  int old_version_seen;   /* the version below the safe point, read while publishing */
} publish_log_t;

static const pc_cell_t *publish_cell;
static uint64_t publish_read_ts;

static pc_status_t publish_hook(void *ctx, uint64_t safe, pc_error_t *err) {
  publish_log_t *p = ctx;
  p->calls++;
  p->safe = safe;
  /* nothing is deleted, nor are reads below it refused, before it is published */
  pc_buf_t b = {0};
  enc_get(&b, publish_cell, publish_read_ts);
  answer_t a = call(p->f, PC_TABLET_OP_GET, b.p, b.len);
  p->old_version_seen = a.rc == PC_OK && a.well_formed && a.status == PC_OK;
  answer_free(&a);
  pc_buf_free(&b);
  if (p->answer != PC_OK) return pc_error_set(err, p->answer, "zookeeper cannot be reached");
  return PC_OK;
}

/* A tablet given a publish hook (the daemon's: ZooKeeper) publishes the
 * safe point of an accepted GC frame before it deletes or refuses anything
 * below it; a failure to publish deletes nothing; a refused frame publishes
 * nothing. */
static void test_gc_publishes_before_deleting(void **state) {
  fixture_t *f = *state;
  publish_log_t log = {f, 0, 0, PC_UNAVAILABLE, 0};
  pc_tablet_set_gc_publish(f->tablet, publish_hook, &log);
  pc_cell_t c = cell("mp", "c:a");
  commit_cell(f, &c, ts_ms(1000), "old", 3);
  commit_cell(f, &c, ts_ms(2000), "new", 3);
  publish_cell = &c;
  publish_read_ts = ts_ms(1500);
  uint64_t safe = ts_ms(3000);
  pc_buf_t b = {0};
  /* refused before publishing: above the oracle's timestamps */
  enc_gc(&b, UINT64_MAX, 0);
  answer_t a = call(f, PC_TABLET_OP_GC, b.p, b.len);
  expect_status(&a, PC_INVALID, "gc at 2^64-1");
  answer_free(&a);
  assert_int_equal(log.calls, 0);
  /* publishing fails: nothing deleted, nothing refused */
  b.len = 0;
  enc_gc(&b, safe, 0);
  a = call(f, PC_TABLET_OP_GC, b.p, b.len);
  expect_status(&a, PC_UNAVAILABLE, "gc whose safe point cannot be published");
  if (!strstr(a.msg, "zookeeper cannot be reached")) fail_msg("unexpected: %s", a.msg);
  answer_free(&a);
  assert_int_equal(log.calls, 1);
  assert_int_equal(log.safe, safe);
  expect_get(f, &c, ts_ms(1500), PC_OK, "old", 3, "the old version after a failed publication");
  pc_tablet_gc_t g;
  pc_tablet_gc_stats(f->tablet, &g);
  assert_int_equal(g.safe_point, 0);
  assert_int_equal(g.passes, 0);
  /* published, then collected */
  log.answer = PC_OK;
  expect_op(f, PC_TABLET_OP_GC, &b, PC_OK, "gc");
  assert_int_equal(log.calls, 2);
  assert_int_equal(log.safe, safe);
  assert_true(log.old_version_seen);
  expect_get(f, &c, ts_ms(1500), PC_ABORTED, NULL, 0, "a read below the safe point");
  pc_tablet_gc_stats(f->tablet, &g);
  assert_int_equal(g.safe_point, safe);
  assert_int_equal(g.passes, 1);
  pc_buf_free(&b);
}

/* INFO's safe point and passes. */
static void info_gc(fixture_t *f, uint64_t *safe, uint64_t *passes) {
  answer_t a = call(f, PC_TABLET_OP_INFO, NULL, 0);
  expect_status(&a, PC_OK, "info");
  pc_rd_t rd = {a.payload, a.plen, 0, 1};
  size_t len;
  (void)pc_rd_str(&rd, &len);
  assert_int_equal(pc_rd_u32(&rd), 1);
  (void)pc_rd_str(&rd, &len);
  (void)pc_rd_str(&rd, &len);
  (void)pc_rd_u64(&rd); /* ops */
  *safe = pc_rd_u64(&rd);
  *passes = pc_rd_u64(&rd);
  assert_true(rd.ok);
  answer_free(&a);
}

/* A tablet opened again on its store reports (pc_tablet_gc_stats, INFO) the
 * safe point below which it refuses reads, before any pass of its own: the
 * one its last pass persisted, or one the store adopted at start
 * (pc_local_store_raise_gc_safe_point, from the published safe point). */
static void test_gc_safe_point_after_restart(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = cell("mr", "c:a");
  commit_cell(f, &c, ts_ms(1000), "old", 3);
  uint64_t safe = ts_ms(3000), got, passes;
  pc_buf_t b = {0};
  enc_gc(&b, safe, 0);
  expect_op(f, PC_TABLET_OP_GC, &b, PC_OK, "gc");
  pc_buf_free(&b);
  pc_tablet_destroy(f->tablet);
  f->tablet = new_tablet(f->dir, "store");
  pc_tablet_gc_t g;
  pc_tablet_gc_stats(f->tablet, &g);
  assert_int_equal(g.passes, 0);
  assert_int_equal(g.safe_point, safe);
  info_gc(f, &got, &passes);
  assert_int_equal(got, safe);
  assert_int_equal(passes, 0);
  expect_get(f, &c, ts_ms(2000), PC_ABORTED, NULL, 0, "a read below the kept safe point");
  /* a store that adopted a higher safe point before its tablet served */
  char path[4200];
  snprintf(path, sizeof path, "%s/adopted", f->dir);
  pc_local_options_t lo = {1, 0, 1u << 20, 1u << 20, 4u << 20, 0};
  pc_error_t err;
  pc_store_t *s = pc_local_store_open(path, &lo, &err);
  if (!s) fail_msg("pc_local_store_open: %s", err.text);
  assert_int_equal(pc_local_store_raise_gc_safe_point(s, ts_ms(4000), &err), PC_OK);
  pc_row_range_t range = {R_START, 1, R_END, 1};
  pc_tablet_t *t = pc_tablet_create("adopted", s, &range, ts_source, NULL);
  assert_non_null(t);
  pc_tablet_gc_stats(t, &g);
  assert_int_equal(g.safe_point, ts_ms(4000));
  assert_int_equal(g.passes, 0);
  pc_tablet_destroy(t);
}

/* Weak notifications and observed puts through PREWRITE / COMMIT and
 * ONE_PHASE write their notifications; SCAN_NOTIFY finds them by bucket, in
 * key order, resumable after any of them (the strong and the weak half of
 * one key included); CLEAR_NOTIFY deletes a cell's older ones only; a
 * notify-only primary leaves a record that CHECK_TXN finds. */
static void test_notify_ops(void **state) {
  fixture_t *f = *state;
  pc_buf_t b = {0};
  answer_t a;
  note_t v[16], one[1];
  int more;

  /* the tablet's observers decide which puts and deletes notify strongly:
   * c:a and c:x have a strong one, c:b a weak one only */
  enc_observer(&b, 1, "obs.a", TABLE, "c:a", PC_OBSERVER_STRONG);
  expect_op(f, PC_TABLET_OP_OBSERVER, &b, PC_OK, "observer of c:a");
  b.len = 0;
  enc_observer(&b, 1, "obs.x", TABLE, "c:x", PC_OBSERVER_STRONG);
  expect_op(f, PC_TABLET_OP_OBSERVER, &b, PC_OK, "observer of c:x");
  b.len = 0;
  enc_observer(&b, 1, "obs.b", TABLE, "c:b", PC_OBSERVER_WEAK);
  expect_op(f, PC_TABLET_OP_OBSERVER, &b, PC_OK, "weak observer of c:b");
  b.len = 0;
  /* two rows: an observed put (the primary), a weak notification alone, a
   * put that is notified weakly too */
  pc_cell_t p = cell("mp", "c:a"), w = cell("nq", "c:w"), pb = cell("nq", "c:b");
  pc_mutation_t m[3] = {put("mp", "c:a", "v1"), notify_weak("nq", "c:w"), put("nq", "c:b", "v2")};
  m[2].weak = 1;
  enc_prewrite(&b, &p, 1000, 3000, 77, m, 3);
  expect_op(f, PC_TABLET_OP_PREWRITE, &b, PC_OK, "prewrite");
  expect_get(f, &w, 2000, PC_LOCKED, NULL, 0, "a weak notification's lock is a lock to readers");
  assert_int_equal(scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more), 0);
  b.len = 0;
  enc_commit(&b, 1000, 1001, &p, 1);
  expect_op(f, PC_TABLET_OP_COMMIT, &b, PC_OK, "commit of the primary");
  pc_cell_t secs[2] = {w, pb};
  b.len = 0;
  enc_commit(&b, 1000, 1001, secs, 2);
  expect_op(f, PC_TABLET_OP_COMMIT, &b, PC_OK, "commit of the secondaries");
  expect_get(f, &w, 2000, PC_NOT_FOUND, NULL, 0, "a weak notification writes no value");
  expect_get(f, &pb, 2000, PC_OK, "v2", 2, "a notified put keeps its write");
  /* a re-sent commit of a weak notification alone finds neither lock nor record */
  b.len = 0;
  enc_commit(&b, 1000, 1001, &w, 1);
  expect_op(f, PC_TABLET_OP_COMMIT, &b, PC_ABORTED, "commit of a committed weak notification");

  /* one row in one phase: a put both observed and notified weakly (one key,
   * both notifications), and a weak notification alone */
  pc_mutation_t om[2] = {put("o1", "c:x", "x"), notify_weak("o1", "c:y")};
  om[0].weak = 1;
  b.len = 0;
  enc_one_phase(&b, 1100, om, 2);
  a = call(f, PC_TABLET_OP_ONE_PHASE, b.p, b.len);
  expect_status(&a, PC_OK, "one-phase commit");
  assert_int_equal(a.plen, 8);
  uint64_t cts = rd_u64_at(a.payload);
  answer_free(&a);

  uint32_t n = scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more);
  assert_int_equal(more, 0);
  assert_int_equal(n, 6);
  assert_true(has_note(v, n, "mp", "c:a", 1001, 0));
  assert_true(has_note(v, n, "nq", "c:w", 1001, 1));
  assert_true(has_note(v, n, "nq", "c:b", 1001, 1));
  assert_true(has_note(v, n, "o1", "c:x", cts, 0));
  assert_true(has_note(v, n, "o1", "c:x", cts, 1));
  assert_true(has_note(v, n, "o1", "c:y", cts, 1));
  for (uint32_t i = 1; i < n; i++) assert_true(v[i - 1].bucket <= v[i].bucket);
  for (uint32_t i = 1; i < n; i++) /* one key's strong half first */
    if (note_is(&v[i], "o1", "c:x", cts, 1)) assert_true(note_is(&v[i - 1], "o1", "c:x", cts, 0));

  /* one at a time, each after the last: the same sequence, then the end */
  for (uint32_t i = 0; i <= n; i++) {
    pc_notification_t after = i ? after_of(&v[i - 1]) : (pc_notification_t){{0}, 0, 0, 0};
    uint32_t got = scan_notes(f, 0, PC_NOTIFY_BUCKETS, i ? &after : NULL, 1, one, 1, &more);
    assert_int_equal(more, 0);
    if (i == n) {
      assert_int_equal(got, 0);
      break;
    }
    assert_int_equal(got, 1);
    assert_true(note_is(&one[0], v[i].row, v[i].col, v[i].ts, v[i].weak));
  }
  /* one bucket: only its rows */
  uint32_t bk = pc_notify_bucket(TABLE, "o1", 2);
  uint32_t nb = scan_notes(f, bk, bk + 1, NULL, 100, v, 16, &more);
  assert_true(nb >= 3);
  for (uint32_t i = 0; i < nb; i++) assert_int_equal(v[i].bucket, bk);
  assert_true(has_note(v, nb, "o1", "c:y", cts, 1));
  /* after a notification of a bucket below the range: from the range's
   * start; above it: nothing */
  char rowbuf[16];
  for (int i = 0; i < 100000; i++) { /* a row of the lowest buckets, one of the highest */
    snprintf(rowbuf, sizeof rowbuf, "m%d", i);
    if (pc_notify_bucket(TABLE, rowbuf, strlen(rowbuf)) < bk) break;
  }
  if (bk > 0) {
    pc_notification_t low = {cell(rowbuf, "c"), 5, 0, 0};
    note_t w2[16];
    uint32_t from_start = scan_notes(f, bk, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more);
    assert_int_equal(scan_notes(f, bk, PC_NOTIFY_BUCKETS, &low, 100, w2, 16, &more), from_start);
    for (uint32_t i = 0; i < from_start; i++)
      assert_true(note_is(&w2[i], v[i].row, v[i].col, v[i].ts, v[i].weak));
  }
  {
    pc_notification_t high;
    for (int i = 0; i < 100000; i++) {
      snprintf(rowbuf, sizeof rowbuf, "m%d", i);
      if (pc_notify_bucket(TABLE, rowbuf, strlen(rowbuf)) > bk) break;
    }
    high = (pc_notification_t){cell(rowbuf, "c"), 5, 0, 0};
    if (pc_notify_bucket(TABLE, rowbuf, strlen(rowbuf)) > bk)
      assert_int_equal(scan_notes(f, 0, bk + 1, &high, 100, v, 16, &more), 0);
  }

  /* CLEAR_NOTIFY on behalf of observers that do not include the column's:
   * nothing goes, and the answer names the one it lacks */
  pc_cell_t ox = cell("o1", "c:x");
  b.len = 0;
  assert_int_equal(pc_wire_put_cell(&b, &ox) || pc_buf_u64(&b, cts + 1) ||
                       pc_buf_str(&b, "obs.a\0", 6),
                   0);
  a = call(f, PC_TABLET_OP_CLEAR_NOTIFY, b.p, b.len);
  expect_status(&a, PC_OK, "clear without the column's observer");
  assert_int_equal(a.plen, 1 + 4 + 5);
  assert_int_equal((unsigned char)a.payload[0], 0);
  assert_memory_equal(a.payload + 5, "obs.x", 5);
  answer_free(&a);
  assert_int_equal(scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more), 6);
  /* a list of observers whose last name has no NUL after it breaks
   * store.h's contract: refused as malformed before the store sees it, and
   * nothing goes (fuzz_tablet found it passed through) */
  b.len = 0;
  assert_int_equal(pc_wire_put_cell(&b, &ox) || pc_buf_u64(&b, cts + 1) ||
                       pc_buf_str(&b, CLEAR_FOR, sizeof CLEAR_FOR - 2),
                   0);
  expect_op(f, PC_TABLET_OP_CLEAR_NOTIFY, &b, PC_INVALID, "clear with an unterminated list");
  assert_int_equal(scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more), 6);
  /* CLEAR_NOTIFY below the commit keeps it; above it, both halves go */
  b.len = 0;
  enc_clear_notify(&b, &ox, cts);
  expect_op(f, PC_TABLET_OP_CLEAR_NOTIFY, &b, PC_OK, "clear below the notification");
  assert_int_equal(scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more), 6);
  b.len = 0;
  enc_clear_notify(&b, &ox, cts + 1);
  expect_op(f, PC_TABLET_OP_CLEAR_NOTIFY, &b, PC_OK, "clear above the notification");
  n = scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more);
  assert_int_equal(n, 4);
  assert_false(has_note(v, n, "o1", "c:x", cts, 0));
  assert_true(has_note(v, n, "o1", "c:y", cts, 1));

  /* newer changes of mp/c:a, a delete too: clearing below the newest keeps
   * it, the older go */
  commit_cell(f, &p, 1200, NULL, 0);
  n = scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more);
  assert_true(has_note(v, n, "mp", "c:a", 1201, 0)); /* a delete is a change */
  pc_mutation_t mo = put("mp", "c:a", "v4");
  b.len = 0;
  enc_prewrite(&b, &p, 1300, 3000, 77, &mo, 1);
  expect_op(f, PC_TABLET_OP_PREWRITE, &b, PC_OK, "prewrite of an observed put");
  b.len = 0;
  enc_commit(&b, 1300, 1301, &p, 1);
  expect_op(f, PC_TABLET_OP_COMMIT, &b, PC_OK, "commit of an observed put");
  n = scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more);
  assert_true(has_note(v, n, "mp", "c:a", 1001, 0) && has_note(v, n, "mp", "c:a", 1301, 0));
  b.len = 0;
  enc_clear_notify(&b, &p, 1301);
  expect_op(f, PC_TABLET_OP_CLEAR_NOTIFY, &b, PC_OK, "clear below the newer change");
  n = scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more);
  assert_false(has_note(v, n, "mp", "c:a", 1001, 0));
  assert_false(has_note(v, n, "mp", "c:a", 1201, 0));
  assert_true(has_note(v, n, "mp", "c:a", 1301, 0));

  /* a removed observer writes no more; OBSERVERS lists what is left */
  b.len = 0;
  enc_observer(&b, 0, "obs.a", NULL, NULL, 0);
  expect_op(f, PC_TABLET_OP_OBSERVER, &b, PC_OK, "removal of obs.a");
  commit_cell(f, &p, 1500, "v5", 2);
  n = scan_notes(f, 0, PC_NOTIFY_BUCKETS, NULL, 100, v, 16, &more);
  assert_false(has_note(v, n, "mp", "c:a", 1501, 0));
  a = call(f, PC_TABLET_OP_OBSERVERS, "", 0);
  expect_status(&a, PC_OK, "observers");
  assert_true(a.plen >= 4);
  assert_int_equal(rd_u32_at(a.payload), 2); /* obs.b, obs.x */
  answer_free(&a);

  /* a weak notification alone as its transaction's primary leaves a
   * record: CHECK_TXN finds the commit */
  pc_cell_t z = cell("mz", "c:n");
  pc_mutation_t zm = notify_weak("mz", "c:n");
  b.len = 0;
  enc_prewrite(&b, &z, 1400, 3000, 77, &zm, 1);
  expect_op(f, PC_TABLET_OP_PREWRITE, &b, PC_OK, "prewrite of a notify-only primary");
  b.len = 0;
  enc_commit(&b, 1400, 1401, &z, 1);
  expect_op(f, PC_TABLET_OP_COMMIT, &b, PC_OK, "commit of a notify-only primary");
  b.len = 0;
  enc_check_txn(&b, &z, 1400, ts_ms(100000), 1);
  a = call(f, PC_TABLET_OP_CHECK_TXN, b.p, b.len);
  expect_status(&a, PC_OK, "check_txn of a notify-only primary");
  assert_int_equal(a.plen, 9);
  assert_int_equal((unsigned char)a.payload[0], PC_TXN_COMMITTED);
  assert_int_equal(rd_u64_at(a.payload + 1), 1401);
  answer_free(&a);
  expect_get(f, &z, 2000, PC_NOT_FOUND, NULL, 0, "a notify-only primary has no value");
  b.len = 0;
  enc_commit(&b, 1400, 1401, &z, 1);
  expect_op(f, PC_TABLET_OP_COMMIT, &b, PC_OK, "a re-sent commit of it finds its record");
  pc_buf_free(&b);
}

/* The arena: every copy keeps its bytes and its NUL while thousands of
 * small ones, big ones that get blocks of their own and zeroed arrays are
 * carved side by side; arrays are aligned for any type; a freed arena is
 * empty and serves again. ASan checks that no piece overlaps its block's end. */
static void test_arena(void **state) {
  (void)state;
  enum { N = 5000 };
  static char src[70000];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (char)('a' + i % 26);
  pc_arena_t a = {0};
  for (int round = 0; round < 2; round++) {
    char **got = calloc(N, sizeof *got);
    size_t *len = calloc(N, sizeof *len);
    assert_non_null(got);
    assert_non_null(len);
    for (size_t i = 0; i < N; i++) {
      /* mostly short strings; now and then one of 1 KiB .. 68 KiB, and an
       * empty one */
      len[i] = i % 97 == 0 ? 1024 + (i * 331) % 68000 : i % 13 == 0 ? 0 : 1 + i % 40;
      got[i] = pc_arena_dup(&a, src + i % 26, len[i]);
      assert_non_null(got[i]);
      if (i % 50 == 0) {
        uint64_t *arr = pc_arena_calloc(&a, 1 + i % 300, sizeof *arr);
        assert_non_null(arr);
        assert_int_equal((uintptr_t)arr % _Alignof(max_align_t), 0);
        for (size_t k = 0; k < 1 + i % 300; k++) assert_true(arr[k] == 0);
        memset(arr, 0xff, (1 + i % 300) * sizeof *arr);
      }
    }
    for (size_t i = 0; i < N; i++) {
      assert_memory_equal(got[i], src + i % 26, len[i]);
      assert_int_equal(got[i][len[i]], '\0');
    }
    assert_null(pc_arena_calloc(&a, SIZE_MAX / 2, 4)); /* overflow: refused */
    assert_non_null(pc_arena_calloc(&a, 0, 8));
    pc_arena_free(&a);
    assert_null(a.head);
    free(got);
    free(len);
  }
  pc_arena_free(&a); /* twice: harmless */
  /* a first piece bigger than a block is a block of its own; small ones follow */
  char *big = pc_arena_dup(&a, src, sizeof src - 1);
  char *small = pc_arena_dup(&a, "xy", 2);
  assert_non_null(big);
  assert_non_null(small);
  assert_memory_equal(big, src, sizeof src - 1);
  assert_string_equal(small, "xy");
  pc_arena_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_heartbeat_scan_locks_gc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_valid_round_trips, setup, teardown),
      cmocka_unit_test(test_request_codecs),
      cmocka_unit_test(test_arena),
      cmocka_unit_test_setup_teardown(test_malformed_names_the_field, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncations_and_trailing_garbage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lying_counts_and_lengths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_empty_and_nul_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_misrouted_rows, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_random_bodies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_notify_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_limits_not_taken_from_clients, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_publishes_before_deleting, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_safe_point_after_restart, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
