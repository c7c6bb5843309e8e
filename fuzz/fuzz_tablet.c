/* fuzz_tablet.c — the tablet server's request handler (tablet/tablet.c)
 * against any sequence of requests (chunks of fuzz_util.h: tag = op, bytes
 * = body), over a store that checks what it is asked and makes up answers.
 * fuzz_tablet_store.c runs the same handler over a real LevelDB store;
 * this one is many times faster, and it checks the handler's side of
 * store.h: whatever the bytes, the store is called only with well-formed
 * cells of the tablet's rows, limits and bucket ranges within store.h's
 * bounds, and never for a malformed body.
 *
 * The answers (a status, a lock, cells, locks, notifications) follow the
 * first byte of the input, so that every encoding of the handler's replies
 * is reached. Every request gets a reply that starts with a known status
 * and ends with a message, which a failure fills; the handler fails only
 * for an unknown op.
 *
 * Each body also goes through tablet_wire.h's request codecs on its own: a
 * body the decoder refuses gets a message naming the field; one it accepts
 * encodes to a body that decodes and encodes again to the same bytes, and,
 * for the ops whose decoding keeps every byte's meaning, to the very body
 * it came from. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "core/keys.h"
#include "fuzz/fuzz.h"
#include "fuzz/fuzz_util.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"

#define MAX_REQUESTS 16
#define R_START "b"
#define R_END "y"

static uint8_t seed;   /* picks the answers: the input's first byte */
static unsigned calls; /* store calls in this input */

/* The next answer: OK, or one of the store's failures. */
static pc_status_t verdict(pc_error_t *err) {
  static const pc_status_t pick[] = {PC_OK,      PC_OK,       PC_NOT_FOUND, PC_LOCKED,
                                     PC_CONFLICT, PC_ABORTED, PC_IO_ERROR,  PC_OK};
  pc_status_t st = pick[(seed + calls++) % 8];
  return st == PC_OK || st == PC_NOT_FOUND ? st : pc_error_set(err, st, "made-up %s", pc_status_name(st));
}

static void check_cell(const pc_cell_t *c) {
  FUZZ_CHECK(c->table && strlen(c->table) >= 1 && strlen(c->table) <= PC_MAX_TABLE);
  FUZZ_CHECK(c->row && c->rlen >= 1 && c->rlen <= PC_MAX_ROW);
  FUZZ_CHECK(c->col && c->clen >= 1 && c->clen <= PC_MAX_STORED_COLUMN);
}

static int in_range(const char *row, size_t rlen) {
  return pc_bytes_cmp(row, rlen, R_START, 1) >= 0 && pc_bytes_cmp(row, rlen, R_END, 1) < 0;
}

/* A well-formed cell of the tablet's rows: what every row operation gets. */
static void check_own(const pc_cell_t *c) {
  check_cell(c);
  FUZZ_CHECK(in_range(c->row, c->rlen));
}

static void fill_lock(pc_lock_info_t *lock, const pc_cell_t *c) {
  pc_lock_info_t l = {0};
  l.start_ts = 90 + seed;
  l.kind = (pc_write_kind_t)(seed % 2);
  l.ttl_ms = 3000;
  l.has_inline = seed & 1;
  FUZZ_CHECK(pc_buf_append(&l.ptable, c->table, strlen(c->table)) == 0);
  FUZZ_CHECK(pc_buf_append(&l.prow, c->row, c->rlen) == 0);
  FUZZ_CHECK(pc_buf_append(&l.pcol, c->col, c->clen) == 0);
  FUZZ_CHECK(pc_buf_append(&l.value, "v", l.has_inline) == 0);
  FUZZ_CHECK(pc_lock_info_copy(lock, &l, c) == 0);
  pc_lock_info_free(&l);
}

static pc_status_t answer(const pc_cell_t *c, pc_lock_info_t *lock, pc_error_t *err) {
  pc_status_t st = verdict(err);
  if (st == PC_LOCKED) fill_lock(lock, c);
  return st;
}

static pc_status_t f_get(pc_store_t *s, const pc_cell_t *c, uint64_t read_ts, char **value,
                         size_t *vlen, pc_lock_info_t *lock, pc_error_t *err) {
  (void)s;
  (void)read_ts;
  check_own(c);
  pc_status_t st = answer(c, lock, err);
  if (st == PC_OK) {
    *value = malloc(2);
    FUZZ_CHECK(*value != NULL);
    memcpy(*value, "v", 2);
    *vlen = seed & 1;
  }
  return st;
}

static pc_status_t f_get_fresh(pc_store_t *s, const pc_cell_t *c, pc_ts_source_fn ts_source,
                               void *ts_ctx, uint64_t *read_ts, char **value, size_t *vlen,
                               pc_lock_info_t *lock, pc_error_t *err) {
  FUZZ_CHECK(ts_source != NULL);
  FUZZ_CHECK(ts_source(ts_ctx, read_ts, err) == PC_OK);
  return f_get(s, c, *read_ts, value, vlen, lock, err);
}

static void check_muts(const pc_mutation_t *muts, size_t n) {
  FUZZ_CHECK(n >= 1);
  for (size_t i = 0; i < n; i++) {
    check_own(&muts[i].cell);
    FUZZ_CHECK(muts[i].kind == PC_WRITE_PUT || muts[i].kind == PC_WRITE_DELETE ||
               muts[i].kind == PC_WRITE_NOTIFY);
    FUZZ_CHECK(muts[i].vlen <= PC_MAX_VALUE && (muts[i].vlen == 0 || muts[i].value));
  }
}

static pc_status_t f_prewrite(pc_store_t *s, const pc_mutation_t *muts, size_t n,
                              const pc_lock_spec_t *spec, pc_lock_info_t *lock, pc_error_t *err) {
  (void)s;
  check_muts(muts, n);
  check_cell(&spec->primary); /* the primary may be another tablet's */
  FUZZ_CHECK(spec->start_ts != 0);
  return answer(&muts[0].cell, lock, err);
}

static pc_status_t f_cells(const pc_cell_t *cells, size_t n, pc_error_t *err) {
  FUZZ_CHECK(n >= 1);
  for (size_t i = 0; i < n; i++) check_own(&cells[i]);
  pc_status_t st = verdict(err);
  return st == PC_LOCKED || st == PC_NOT_FOUND ? PC_OK : st; /* what these ops answer */
}

static pc_status_t f_commit(pc_store_t *s, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                            uint64_t commit_ts, pc_error_t *err) {
  (void)s;
  (void)start_ts;
  (void)commit_ts;
  return f_cells(cells, n, err);
}

static pc_status_t f_rollback(pc_store_t *s, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                              pc_error_t *err) {
  (void)s;
  (void)start_ts;
  return f_cells(cells, n, err);
}

static pc_status_t f_check_txn(pc_store_t *s, const pc_cell_t *primary, uint64_t start_ts,
                               uint64_t now_ts, int owner_dead, pc_txn_state_t *state,
                               uint64_t *commit_ts, pc_error_t *err) {
  (void)s;
  (void)start_ts;
  (void)now_ts;
  FUZZ_CHECK(owner_dead == 0 || owner_dead == 1);
  check_own(primary);
  *state = (pc_txn_state_t)(seed % 3);
  *commit_ts = *state == PC_TXN_COMMITTED ? 200 : 0;
  return f_cells(primary, 1, err);
}

static pc_status_t f_heartbeat(pc_store_t *s, const pc_cell_t *primary, uint64_t start_ts,
                               uint32_t ttl_ms, pc_error_t *err) {
  (void)s;
  (void)start_ts;
  (void)ttl_ms;
  return f_cells(primary, 1, err);
}

static pc_status_t f_one_phase(pc_store_t *s, const pc_mutation_t *muts, size_t n,
                               uint64_t start_ts, pc_ts_source_fn ts_source, void *ts_ctx,
                               pc_notify_clear_t *clear, uint64_t *commit_ts,
                               pc_lock_info_t *lock, pc_error_t *err) {
  (void)s;
  check_muts(muts, n);
  FUZZ_CHECK(start_ts != 0);
  if (clear) {
    /* store.h: a clear cell of a row the commit does not write is refused */
    check_cell(&clear->cell);
    int written = 0;
    for (size_t i = 0; i < n && !written; i++)
      written = muts[i].cell.rlen == clear->cell.rlen &&
                strcmp(muts[i].cell.table, clear->cell.table) == 0 &&
                memcmp(muts[i].cell.row, clear->cell.row, clear->cell.rlen) == 0;
    if (!written) return pc_error_set(err, PC_INVALID, "clear cell of a row not written");
  }
  pc_status_t st = answer(&muts[0].cell, lock, err);
  if (st == PC_OK) FUZZ_CHECK(ts_source(ts_ctx, commit_ts, err) == PC_OK);
  return st;
}

static void check_table(const char *table) {
  FUZZ_CHECK(table && strlen(table) >= 1 && strlen(table) <= PC_MAX_TABLE);
}

static pc_status_t f_scan(pc_store_t *s, const char *table, const char *start, size_t slen,
                          const char *start_col, size_t sclen, const char *end, size_t elen,
                          uint64_t read_ts, size_t limit, pc_store_cell_fn fn, void *ctx,
                          pc_lock_info_t *lock, pc_error_t *err) {
  (void)s;
  (void)read_ts;
  (void)start_col;
  (void)sclen;
  check_table(table);
  FUZZ_CHECK(start && pc_bytes_cmp(start, slen, R_START, 1) >= 0);
  FUZZ_CHECK(end && pc_bytes_cmp(end, elen, R_END, 1) <= 0); /* the tablet has an end */
  FUZZ_CHECK(limit >= 1 && limit <= PC_STORE_SCAN_LIMIT_MAX);
  size_t n = seed % 4 < limit ? seed % 4 : limit;
  for (size_t i = 0; i < n; i++) {
    pc_cell_t c = {table, "c", 1, "q", 1};
    if (fn(ctx, &c, "v", 1)) return PC_OK;
  }
  pc_cell_t at = {table, "d", 1, "q", 1};
  return answer(&at, lock, err);
}

static pc_status_t f_raw_scan(pc_store_t *s, const char *table, const char *start, size_t slen,
                              const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                              pc_error_t *err) {
  (void)s;
  (void)start;
  (void)slen;
  (void)end;
  (void)elen;
  if (table) check_table(table);
  for (unsigned i = 0; i < seed % 4; i++) {
    pc_raw_cell_t c = {0};
    c.kind = (pc_cell_kind_t)(i % 5);
    c.table = table ? table : "t";
    c.row = "r";
    c.row_len = 1;
    c.column = "c";
    c.column_len = 1;
    c.value = i & 1 ? "v" : NULL;
    c.value_len = i & 1;
    c.primary_table = i & 2 ? "t" : NULL;
    if (fn(ctx, &c)) break;
  }
  pc_status_t st = verdict(err);
  return st == PC_LOCKED || st == PC_NOT_FOUND ? PC_OK : st;
}

static pc_status_t f_scan_locks(pc_store_t *s, uint64_t below, pc_store_lock_fn fn, void *ctx,
                                pc_error_t *err) {
  (void)s;
  (void)below;
  pc_cell_t c = {"t", "r", 1, "c", 1};
  for (unsigned i = 0; i < seed % 4; i++) {
    pc_lock_info_t l;
    fill_lock(&l, &c);
    int stop = fn(ctx, &l);
    pc_lock_info_free(&l);
    if (stop) break;
  }
  pc_status_t st = verdict(err);
  return st == PC_LOCKED || st == PC_NOT_FOUND ? PC_OK : st;
}

static uint64_t safe_point;

static pc_status_t f_gc(pc_store_t *s, uint64_t safe, uint32_t rate, pc_store_gc_stats_t *stats,
                        pc_error_t *err) {
  (void)s;
  (void)rate;
  memset(stats, 0, sizeof *stats);
  stats->cells = seed;
  pc_status_t st = verdict(err);
  if (st == PC_LOCKED || st == PC_NOT_FOUND) st = PC_OK;
  if (st == PC_OK && safe > safe_point) safe_point = safe;
  return st;
}

static pc_status_t f_scan_notify(pc_store_t *s, uint32_t lo, uint32_t hi,
                                 const pc_notification_t *after, size_t limit,
                                 pc_store_notify_fn fn, void *ctx, pc_error_t *err) {
  (void)s;
  FUZZ_CHECK(lo < hi && hi <= PC_NOTIFY_BUCKETS);
  FUZZ_CHECK(limit >= 1 && limit <= PC_STORE_SCAN_LIMIT_MAX);
  if (after) check_cell(&after->cell);
  for (unsigned i = 0; i < seed % 4 && i < limit; i++) {
    pc_notification_t n = {{"t", "r", 1, "c", 1}, 100 + i, (int)(i & 1), 0};
    if (fn(ctx, &n)) break;
  }
  pc_status_t st = verdict(err);
  return st == PC_LOCKED || st == PC_NOT_FOUND ? PC_OK : st;
}

static pc_status_t f_clear_notify(pc_store_t *s, pc_notify_clear_t *clear, size_t n,
                                  pc_error_t *err) {
  (void)s;
  FUZZ_CHECK(n >= 1);
  pc_status_t st = PC_OK;
  for (size_t k = 0; k < n && st == PC_OK; k++, clear++) {
    FUZZ_CHECK(clear->olen == 0 || (clear->observers && clear->observers[clear->olen - 1] == '\0'));
    st = f_cells(&clear->cell, 1, err);
    clear->done = st == PC_OK && (seed & 2) == 0;
    if (st == PC_OK && !clear->done)
      snprintf(clear->missing, sizeof clear->missing, "o%u", (unsigned)seed);
  }
  return st;
}

/* An observer given to the store is one the handler checked: a valid name
 * and, when added, a table and a column. */
static pc_status_t f_observer_update(pc_store_t *s, const pc_store_observer_t *o, int add,
                                     pc_error_t *err) {
  (void)s;
  FUZZ_CHECK(o->name && pc_obs_name_ok(o->name, strlen(o->name)));
  if (add) {
    FUZZ_CHECK(o->table && strlen(o->table) >= 1 && strlen(o->table) <= PC_MAX_TABLE);
    FUZZ_CHECK(o->col && o->clen >= 1 && o->clen <= PC_MAX_COLUMN);
    FUZZ_CHECK(o->kind == 0 || o->kind == 1);
  }
  pc_status_t st = verdict(err);
  return st == PC_NOT_FOUND ? PC_OK : st;
}

static pc_status_t f_observer_list(pc_store_t *s, pc_store_observer_fn fn, void *ctx,
                                   pc_error_t *err) {
  (void)s;
  for (unsigned i = 0; i < (unsigned)seed % 3; i++) {
    pc_store_observer_t o = {"obs", "t", "c", 1, (int)(i & 1)};
    if (fn(ctx, &o)) break;
  }
  pc_status_t st = verdict(err);
  return st == PC_NOT_FOUND || st == PC_LOCKED ? PC_OK : st;
}

static uint64_t f_safe_point(pc_store_t *s) {
  (void)s;
  return safe_point;
}

static void f_close(pc_store_t *s) { (void)s; }

static const pc_store_ops_t checking_ops = {
    .get = f_get,
    .get_fresh = f_get_fresh,
    .prewrite = f_prewrite,
    .commit = f_commit,
    .rollback = f_rollback,
    .check_txn = f_check_txn,
    .heartbeat = f_heartbeat,
    .commit_one_phase = f_one_phase,
    .scan = f_scan,
    .raw_scan = f_raw_scan,
    .scan_locks = f_scan_locks,
    .gc = f_gc,
    .scan_notify = f_scan_notify,
    .clear_notify = f_clear_notify,
    .observer_update = f_observer_update,
    .observer_list = f_observer_list,
    .gc_safe_point = f_safe_point,
    .close = f_close,
};

static pc_store_t checking_store = {&checking_ops};
static pc_tablet_t *tablet;
static uint64_t clock_ts = 1000;

static pc_status_t ts_source(void *ctx, uint64_t *ts, pc_error_t *err) {
  (void)ctx;
  (void)err;
  *ts = ++clock_ts;
  return PC_OK;
}

static void destroy_tablet(void) { pc_tablet_destroy(tablet); }

/* Decodes body as op's request and encodes it again into out: 1 when it
 * decoded, 0 when refused (with a message naming the field) or when op has
 * no request codec with fields. */
static int reencode(uint8_t op, const char *body, size_t len, pc_arena_t *a, pc_buf_t *out) {
  pc_error_t err;
  pc_error_clear(&err);
  pc_status_t st = PC_OK;
  int enc = 0;
  switch (op) {
    case PC_TABLET_OP_GET:
    case PC_TABLET_OP_GET_FRESH: {
      pc_tablet_get_req_t q;
      if ((st = pc_tablet_decode_get(body, len, op, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_get(out, op, &q);
      break;
    }
    case PC_TABLET_OP_GET_MANY: {
      pc_tablet_get_many_req_t q;
      if ((st = pc_tablet_decode_get_many(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_get_many(out, &q);
      break;
    }
    case PC_TABLET_OP_PREWRITE:
    case PC_TABLET_OP_ONE_PHASE: {
      pc_tablet_write_req_t q;
      if ((st = pc_tablet_decode_write(body, len, op, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_write(out, op, &q);
      break;
    }
    case PC_TABLET_OP_COMMIT:
    case PC_TABLET_OP_ROLLBACK: {
      pc_tablet_cells_req_t q;
      if ((st = pc_tablet_decode_cells(body, len, op, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_cells(out, op, &q);
      break;
    }
    case PC_TABLET_OP_CHECK_TXN: {
      pc_tablet_check_txn_req_t q;
      if ((st = pc_tablet_decode_check_txn(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_check_txn(out, &q);
      break;
    }
    case PC_TABLET_OP_SCAN: {
      pc_tablet_scan_req_t q;
      if ((st = pc_tablet_decode_scan(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_scan(out, &q);
      break;
    }
    case PC_TABLET_OP_RAW_SCAN: {
      pc_tablet_raw_scan_req_t q;
      if ((st = pc_tablet_decode_raw_scan(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_raw_scan(out, &q);
      break;
    }
    case PC_TABLET_OP_HEARTBEAT: {
      pc_tablet_heartbeat_req_t q;
      if ((st = pc_tablet_decode_heartbeat(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_heartbeat(out, &q);
      break;
    }
    case PC_TABLET_OP_SCAN_LOCKS: {
      uint64_t below;
      if ((st = pc_tablet_decode_scan_locks(body, len, &below, &err)) == PC_OK)
        enc = pc_tablet_encode_scan_locks(out, below);
      break;
    }
    case PC_TABLET_OP_GC: {
      pc_tablet_gc_req_t q;
      if ((st = pc_tablet_decode_gc(body, len, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_gc(out, &q);
      break;
    }
    case PC_TABLET_OP_SCAN_NOTIFY: {
      pc_tablet_scan_notify_req_t q;
      if ((st = pc_tablet_decode_scan_notify(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_scan_notify(out, &q);
      break;
    }
    case PC_TABLET_OP_CLEAR_NOTIFY: {
      pc_notify_clear_t q;
      if ((st = pc_tablet_decode_clear_notify(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_clear_notify(out, &q);
      break;
    }
    case PC_TABLET_OP_CLEAR_NOTIFY_MANY: {
      pc_notify_clear_t *q;
      size_t n;
      if ((st = pc_tablet_decode_clear_notify_many(body, len, a, &q, &n, &err)) == PC_OK)
        enc = pc_tablet_encode_clear_notify_many(out, q, n);
      break;
    }
    case PC_TABLET_OP_OBSERVER: {
      pc_tablet_observer_req_t q;
      if ((st = pc_tablet_decode_observer(body, len, a, &q, &err)) == PC_OK)
        enc = pc_tablet_encode_observer(out, &q);
      break;
    }
    default:
      return 0;
  }
  if (st != PC_OK) {
    FUZZ_CHECK(st == PC_INVALID || st == PC_NOMEM);
    FUZZ_CHECK(st != PC_INVALID || strstr(err.text, " request body: ") != NULL);
    return 0;
  }
  FUZZ_CHECK(enc == 0);
  return 1;
}

/* Whether op's decoder keeps every byte's meaning, so that encoding what
 * it decoded gives back the body. Not so for mutations (a delete's value
 * and the old observed flag are dropped), CHECK_TXN's owner_dead (any
 * nonzero byte), the optional strings of SCAN and RAW_SCAN (any nonzero
 * byte is present; an absent one's bytes are skipped) and OBSERVER's record. */
static int decodes_exactly(uint8_t op) {
  return op != PC_TABLET_OP_PREWRITE && op != PC_TABLET_OP_ONE_PHASE &&
         op != PC_TABLET_OP_CHECK_TXN && op != PC_TABLET_OP_SCAN &&
         op != PC_TABLET_OP_RAW_SCAN && op != PC_TABLET_OP_OBSERVER;
}

static int same_bytes(const char *p, size_t n, const char *q, size_t m) {
  return n == m && (n == 0 || memcmp(p, q, n) == 0);
}

static void check_codecs(uint8_t op, const char *body, size_t len) {
  pc_arena_t a = {0}, b = {0};
  pc_buf_t once = {0}, twice = {0};
  if (reencode(op, body, len, &a, &once)) {
    FUZZ_CHECK(reencode(op, once.p, once.len, &b, &twice) == 1);
    FUZZ_CHECK(same_bytes(once.p, once.len, twice.p, twice.len));
    if (decodes_exactly(op)) FUZZ_CHECK(same_bytes(once.p, once.len, body, len));
  }
  pc_arena_free(&a);
  pc_arena_free(&b);
  pc_buf_free(&once);
  pc_buf_free(&twice);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (!tablet) {
    pc_row_range_t range = {R_START, 1, R_END, 1};
    tablet = pc_tablet_create("fuzz", &checking_store, &range, ts_source, NULL);
    FUZZ_CHECK(tablet != NULL);
    atexit(destroy_tablet);
  }
  seed = data[0];
  calls = 0;
  safe_point = seed & 0x80 ? 500 : 0; /* reads below it are refused */
  fuzz_chunks_t in = {data + 1, size - 1, 0};
  uint8_t op;
  const char *body;
  size_t len;
  for (int k = 0; k < MAX_REQUESTS && fuzz_next_chunk(&in, &op, &body, &len); k++) {
    check_codecs(op, body, len);
    pc_buf_t reply = {0};
    pc_error_t err;
    pc_error_clear(&err);
    pc_status_t st = pc_tablet_rpc_handler(tablet, op, body, len, &reply, &err);
    if (op < PC_TABLET_OP_GET || op > PC_TABLET_OP_CLEAR_NOTIFY_MANY) {
      FUZZ_CHECK(st == PC_INVALID && err.text[0]);
    } else {
      FUZZ_CHECK(st == PC_OK && reply.len >= 5);
      uint8_t status = (uint8_t)reply.p[0];
      FUZZ_CHECK(status <= PC_STATUS_MAX);
      /* the message is last: u32 length and its bytes */
      size_t m = 0;
      int found = 0;
      for (; m + 5 <= reply.len && m <= 4096 && !found; m++) {
        pc_rd_t r = {reply.p + reply.len - 4 - m, 4, 0, 1};
        found = pc_rd_u32(&r) == m;
      }
      FUZZ_CHECK(found);
      size_t mlen = m - 1;
      if (status != PC_OK && status != PC_NOT_FOUND && mlen == 0)
        fprintf(stderr, "op 0x%02x: status %u without a message\n", op, status);
      FUZZ_CHECK(status == PC_OK || status == PC_NOT_FOUND || mlen > 0);
    }
    pc_buf_free(&reply);
  }
  return 0;
}
