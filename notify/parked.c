/* parked.c — parked notifications. At max_failures failures of its
 * callback, a notification is parked: a record in PC_SYSTEM_TABLE (row
 * "failure/<observer>/<table>/<XXH3-128 of row and column>", columns table,
 * row, column, observer, kind, error, failures and ts, the numbers in
 * decimal), written with pc_txn_set_system since the table is read-only to
 * users; the observer then counts as done on that cell. pc_worker_failures
 * lists the records.
 *
 * Re-queueing (pc_worker_retry_failures) deletes a record and notifies its
 * cell again in one transaction. A weak one: pc_txn_notify_weak on the cell.
 * A strong one cannot be re-created without writing the cell again (which
 * would make every other strong observer of the column see a new change),
 * so the transaction writes a retry mark, the system column 0xFF "try" 0x00
 * O 0x00 col = ts of the parked change, together with a weak notification
 * of the cell; run.c reads the mark.
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/keys.h"
#include "core/log.h"

#define FAILURE_PREFIX "failure/"

/* ---- numbers in failure records ------------------------------------------ */

static int parse_u64(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 20) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* ---- parking ---------------------------------------------------------------- */

/* The row of the failure record of (cell, observer). The cell itself is in
 * the record's columns; the row needs only to be unique and bounded, so the
 * row and column are hashed (XXH3, 128 bits, over their escaped forms). */
static int failure_row(pc_buf_t *out, const pc_cell_t *c, const char *observer) {
  pc_buf_t e = {0};
  if (pc_key_escape(&e, c->row, c->rlen) || pc_key_escape(&e, c->col, c->clen)) {
    pc_buf_free(&e);
    return -1;
  }
  XXH128_hash_t h = XXH3_128bits(e.p, e.len);
  pc_buf_free(&e);
  char hex[40];
  snprintf(hex, sizeof hex, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
  out->len = 0;
  return pc_buf_append(out, FAILURE_PREFIX, strlen(FAILURE_PREFIX)) ||
         pc_buf_append(out, observer, strlen(observer)) || pc_buf_append(out, "/", 1) ||
         pc_buf_append(out, c->table, strlen(c->table)) || pc_buf_append(out, "/", 1) ||
         pc_buf_append(out, hex, 32);
}

/* The columns of a failure record. */
#define FC_TABLE "table"
#define FC_ROW "row"
#define FC_COLUMN "column"
#define FC_OBSERVER "observer"
#define FC_KIND "kind"
#define FC_ERROR "error"
#define FC_FAILURES "failures"
#define FC_TS "ts"
static const char *const failure_columns[] = {FC_TABLE, FC_ROW,      FC_COLUMN, FC_OBSERVER,
                                              FC_KIND,  FC_ERROR,    FC_FAILURES, FC_TS};
#define NFAILURE_COLUMNS (sizeof failure_columns / sizeof *failure_columns)

/* PC_SYSTEM_TABLE is read-only to the user calls: the records go through
 * the system's. */
static pc_status_t set_str(pc_txn_t *t, const pc_buf_t *row, const char *col, const char *v,
                           size_t n, pc_error_t *err) {
  return pc_txn_set_system(t, PC_SYSTEM_TABLE, row->p, row->len, col, strlen(col), v, n, err);
}

pc_status_t pc_park(pc_worker_t *w, const pc_cell_t *c, const pc_observer_t *obs, uint64_t ts,
                    uint32_t failures, const char *error, pc_error_t *err) {
  pc_buf_t row = {0};
  if (failure_row(&row, c, obs->name) != 0) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = PC_OK;
  for (int attempt = 0; attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(w->db, err);
    if (!t) {
      st = err ? err->code : PC_INTERNAL;
      break;
    }
    char num[24], tsb[24];
    snprintf(num, sizeof num, "%" PRIu32, failures);
    snprintf(tsb, sizeof tsb, "%" PRIu64, ts);
    const char *kind = obs->kind == PC_OBSERVER_WEAK ? "weak" : "strong";
    const char *e = error && *error ? error : "failed";
    st = set_str(t, &row, FC_TABLE, c->table, strlen(c->table), err);
    if (st == PC_OK) st = set_str(t, &row, FC_ROW, c->row, c->rlen, err);
    if (st == PC_OK) st = set_str(t, &row, FC_COLUMN, c->col, c->clen, err);
    if (st == PC_OK) st = set_str(t, &row, FC_OBSERVER, obs->name, strlen(obs->name), err);
    if (st == PC_OK) st = set_str(t, &row, FC_KIND, kind, strlen(kind), err);
    if (st == PC_OK) st = set_str(t, &row, FC_ERROR, e, strlen(e), err);
    if (st == PC_OK) st = set_str(t, &row, FC_FAILURES, num, strlen(num), err);
    if (st == PC_OK) st = set_str(t, &row, FC_TS, tsb, strlen(tsb), err);
    if (st == PC_OK) st = pc_txn_commit(t, err);
    pc_txn_destroy(t);
    if (st != PC_CONFLICT && st != PC_LOCKED) break;
  }
  pc_buf_free(&row);
  if (st != PC_OK) pc_error_prefix(err, "parking");
  return st;
}

/* ---- retry marks ------------------------------------------------------------ */

/* The retry mark of observer for column col: RETRY_PREFIX observer 0x00 col,
 * as long as an ack column, so that it fits wherever one does. */
#define RETRY_PREFIX "\xff" "try" /* and its 0x00 */
_Static_assert(sizeof RETRY_PREFIX == PC_ACK_PREFIX_LEN, "a retry mark is as long as an ack");
int pc_retry_column(pc_buf_t *out, const char *observer, const char *col, size_t clen) {
  out->len = 0;
  return pc_buf_append(out, RETRY_PREFIX, sizeof RETRY_PREFIX) ||
         pc_buf_append(out, observer, strlen(observer)) || pc_buf_u8(out, 0) ||
         pc_buf_append(out, col, clen);
}

/* ---- the records, listed and re-queued ------------------------------------------ */

typedef struct record {
  pc_buf_t row;
  pc_buf_t v[NFAILURE_COLUMNS];
  int have[NFAILURE_COLUMNS];
} record_t;

static void record_reset(record_t *r) {
  r->row.len = 0;
  for (size_t i = 0; i < NFAILURE_COLUMNS; i++) {
    r->v[i].len = 0;
    r->have[i] = 0;
  }
}

static void record_free(record_t *r) {
  pc_buf_free(&r->row);
  for (size_t i = 0; i < NFAILURE_COLUMNS; i++) pc_buf_free(&r->v[i]);
}

/* The record as a pc_parked_t (its strings NUL-terminated in r); -1 when it
 * lacks a column or holds a bad number. */
static int record_parked(record_t *r, pc_parked_t *p) {
  for (size_t i = 0; i < NFAILURE_COLUMNS; i++)
    if (!r->have[i] || pc_buf_u8(&r->v[i], 0) != 0) return -1;
  uint64_t failures, ts;
  if (parse_u64(r->v[6].p, r->v[6].len - 1, &failures) != 0 || failures > UINT32_MAX ||
      parse_u64(r->v[7].p, r->v[7].len - 1, &ts) != 0)
    return -1;
  memset(p, 0, sizeof *p);
  p->table = r->v[0].p;
  p->row = r->v[1].p;
  p->rlen = r->v[1].len - 1;
  p->col = r->v[2].p;
  p->clen = r->v[2].len - 1;
  p->observer = r->v[3].p;
  p->error = r->v[5].p;
  p->failures = (uint32_t)failures;
  p->ts = ts;
  return 0;
}

/* Calls fn(ctx, parked, kind_is_weak, record row) for every complete record. */
typedef int (*record_fn)(void *ctx, const pc_parked_t *p, int weak, const pc_buf_t *row);

static int emit_record(record_t *r, record_fn fn, void *ctx) {
  if (!r->row.len) return 0;
  pc_parked_t p;
  if (record_parked(r, &p) != 0) {
    pc_log(PC_LOG_WARN, "failures: record '%.*s' of %s is incomplete; ignored",
           (int)(r->row.len > 200 ? 200 : r->row.len), r->row.p, PC_SYSTEM_TABLE);
    return 0;
  }
  return fn(ctx, &p, strcmp(r->v[4].p, "weak") == 0, &r->row);
}

static pc_status_t scan_records(pc_db_t *db, record_fn fn, void *ctx, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err ? err->code : PC_INTERNAL;
  static const char lo[] = FAILURE_PREFIX, hi[] = "failure0"; /* '/' + 1 */
  pc_scan_t *sc = pc_txn_scan(t, PC_SYSTEM_TABLE, lo, sizeof lo - 1, hi, sizeof hi - 1, err);
  if (!sc) {
    pc_txn_destroy(t);
    return err ? err->code : PC_INTERNAL;
  }
  record_t r = {0};
  pc_status_t st;
  int stop = 0;
  while (!stop && (st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *row = pc_scan_row(sc, &rl), *col = pc_scan_column(sc, &cl),
               *val = pc_scan_value(sc, &vl);
    if (r.row.len && (r.row.len != rl || memcmp(r.row.p, row, rl) != 0)) {
      stop = emit_record(&r, fn, ctx);
      record_reset(&r);
    }
    if (!r.row.len && pc_buf_append(&r.row, row, rl) != 0) {
      st = pc_error_set(err, PC_NOMEM, "out of memory");
      break;
    }
    for (size_t i = 0; i < NFAILURE_COLUMNS; i++) {
      if (strlen(failure_columns[i]) != cl || memcmp(failure_columns[i], col, cl) != 0) continue;
      r.v[i].len = 0;
      if (pc_buf_append(&r.v[i], val, vl) != 0) st = pc_error_set(err, PC_NOMEM, "out of memory");
      r.have[i] = 1;
    }
    if (st != PC_OK) break;
  }
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    st = PC_OK;
    if (!stop) (void)emit_record(&r, fn, ctx);
  } else if (st == PC_OK && stop) {
    st = PC_OK;
  }
  record_free(&r);
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  return st;
}

typedef struct list_ctx {
  int (*fn)(void *ctx, const pc_parked_t *p);
  void *ctx;
} list_ctx_t;

static int list_one(void *ctx, const pc_parked_t *p, int weak, const pc_buf_t *row) {
  list_ctx_t *l = ctx;
  return l->fn(l->ctx, p);
}

pc_status_t pc_worker_failures(pc_db_t *db, int (*fn)(void *ctx, const pc_parked_t *p),
                               void *ctx, pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !fn) return pc_error_set(err, PC_INVALID, "failures: NULL argument");
  list_ctx_t l = {fn, ctx};
  return scan_records(db, list_one, &l, err);
}

/* A parked notification, copied for re-queueing after the scan. */
typedef struct requeue {
  pc_buf_t row, table, crow, col, observer;
  uint64_t ts;
  int weak;
} requeue_t;

typedef struct requeue_list {
  requeue_t *v;
  size_t n, cap;
  int oom;
} requeue_list_t;

static int requeue_add(void *ctx, const pc_parked_t *p, int weak, const pc_buf_t *row) {
  requeue_list_t *l = ctx;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    requeue_t *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      l->oom = 1;
      return 1;
    }
    l->v = v;
    l->cap = cap;
  }
  requeue_t *q = &l->v[l->n];
  memset(q, 0, sizeof *q);
  l->n++; /* freed with the list, even when half filled */
  if (pc_buf_append(&q->row, row->p, row->len) ||
      pc_buf_append(&q->table, p->table, strlen(p->table) + 1) ||
      pc_buf_append(&q->crow, p->row, p->rlen) || pc_buf_append(&q->col, p->col, p->clen) ||
      pc_buf_append(&q->observer, p->observer, strlen(p->observer) + 1)) {
    l->oom = 1;
    return 1;
  }
  q->ts = p->ts;
  q->weak = weak;
  return 0;
}

/* One transaction: the notification again (see the top of this file) and
 * the record deleted. */
static pc_status_t requeue_one(pc_db_t *db, const requeue_t *q, pc_error_t *err) {
  pc_status_t st = PC_OK;
  pc_cell_t c = {q->table.p, q->crow.p, q->crow.len, q->col.p, q->col.len};
  for (int attempt = 0; attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(db, err);
    if (!t) return err ? err->code : PC_INTERNAL;
    st = PC_OK;
    if (!q->weak) {
      pc_buf_t mark = {0};
      if (pc_retry_column(&mark, q->observer.p, c.col, c.clen) != 0)
        st = pc_error_set(err, PC_NOMEM, "out of memory");
      else
        st = pc_run_write_ts(t, &c, &mark, q->ts, err);
      pc_buf_free(&mark);
    }
    if (st == PC_OK) st = pc_txn_notify_weak(t, c.table, c.row, c.rlen, c.col, c.clen, err);
    for (size_t i = 0; i < NFAILURE_COLUMNS && st == PC_OK; i++)
      st = pc_txn_delete_system(t, PC_SYSTEM_TABLE, q->row.p, q->row.len, failure_columns[i],
                                strlen(failure_columns[i]), err);
    if (st == PC_OK) st = pc_txn_commit(t, err);
    pc_txn_destroy(t);
    if (st != PC_CONFLICT && st != PC_LOCKED) break;
  }
  return st;
}

pc_status_t pc_worker_retry_failures(pc_db_t *db, uint64_t *n, pc_error_t *err) {
  pc_error_clear(err);
  if (n) *n = 0;
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  requeue_list_t l = {0};
  pc_status_t st = scan_records(db, requeue_add, &l, err);
  if (st == PC_OK && l.oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; i < l.n && st == PC_OK; i++) {
    st = requeue_one(db, &l.v[i], err);
    if (st == PC_OK && n) (*n)++;
    else if (st != PC_OK)
      pc_error_prefix(err, "re-queueing observer '%s' on %s", (const char *)l.v[i].observer.p,
                      (const char *)l.v[i].table.p);
  }
  for (size_t i = 0; i < l.n; i++) {
    requeue_t *q = &l.v[i];
    pc_buf_free(&q->row);
    pc_buf_free(&q->table);
    pc_buf_free(&q->crow);
    pc_buf_free(&q->col);
    pc_buf_free(&q->observer);
  }
  free(l.v);
  return st;
}
