/* parked.c — parked notifications. At max_failures failures of its
 * callback, a notification is parked: a record in PC_SYSTEM_TABLE (row
 * "failure/<observer>/<table>/<XXH3-128 of row and column>", columns table,
 * row, column, observer, kind, error, failures and ts, the numbers in
 * decimal, and retry), written with pc_txn_set_system since the table is
 * read-only to users; the observer then counts as done on that cell, and
 * the cell's other observers go on. pc_worker_failures lists the records.
 *
 * Retrying (pc_worker_retry_failures, `percolator failures --retry`) sets a
 * record's retry column to "1" and nothing else: no notification is
 * written, so no other observer of the column runs. Each worker looks for
 * such records every RETRY_SCAN_MS (pc_parked_retry) and runs the parked
 * observer, if it has it, on the parked change alone, in a transaction
 * that also deletes the record, so that of two workers at most one
 * commits: the observer's ack is read first (a change it observed since is
 * not run again) and written, as in any run (run.c). A retry that
 * fails is deferred with backoff like any run, and parked again (retry "0")
 * after max_failures more failures. pc_notify_wait waits for requested
 * retries (wait.c).
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"
#include "core/keys.h"
#include "base/log.h"

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

/* The row of the failure record of (cell, observer) ("failure/", or with
 * another prefix, the crash record's). The cell itself is in the record's
 * columns; the row needs only to be unique and bounded, so the row and
 * column are hashed (XXH3, 128 bits, over their escaped forms). */
int pc_record_row(pc_buf_t *out, const char *prefix, const pc_cell_t *c, const char *observer) {
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
  return pc_buf_append(out, prefix, strlen(prefix)) ||
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
#define FC_RETRY "retry" /* "1": a retry is asked for; absent or "0": parked */
static const char *const failure_columns[] = {FC_TABLE, FC_ROW,      FC_COLUMN, FC_OBSERVER, FC_KIND,
                                              FC_ERROR, FC_FAILURES, FC_TS,     FC_RETRY};
#define NFAILURE_COLUMNS (sizeof failure_columns / sizeof *failure_columns)
#define NREQUIRED_COLUMNS 8 /* all but FC_RETRY */
#define RETRY_SCAN_MS 1000u /* how often a worker looks for retries asked for */

/* PC_SYSTEM_TABLE is read-only to the user calls: the records go through
 * the system's. */
static pc_status_t set_str(pc_txn_t *t, const pc_buf_t *row, const char *col, const char *v,
                           size_t n, pc_error_t *err) {
  return pc_txn_set_system(t, PC_SYSTEM_TABLE, row->p, row->len, col, strlen(col), v, n, err);
}

pc_status_t pc_park_record(pc_txn_t *t, const pc_cell_t *c, const char *observer, int weak,
                           uint64_t ts, uint32_t failures, const char *error, pc_error_t *err) {
  pc_buf_t row = {0};
  if (pc_record_row(&row, FAILURE_PREFIX, c, observer) != 0)
    return pc_error_set(err, PC_NOMEM, "out of memory");
  char num[24], tsb[24];
  snprintf(num, sizeof num, "%" PRIu32, failures);
  snprintf(tsb, sizeof tsb, "%" PRIu64, ts);
  const char *kind = weak ? "weak" : "strong";
  const char *e = error && *error ? error : "failed";
  pc_status_t st = set_str(t, &row, FC_TABLE, c->table, strlen(c->table), err);
  if (st == PC_OK) st = set_str(t, &row, FC_ROW, c->row, c->rlen, err);
  if (st == PC_OK) st = set_str(t, &row, FC_COLUMN, c->col, c->clen, err);
  if (st == PC_OK) st = set_str(t, &row, FC_OBSERVER, observer, strlen(observer), err);
  if (st == PC_OK) st = set_str(t, &row, FC_KIND, kind, strlen(kind), err);
  if (st == PC_OK) st = set_str(t, &row, FC_ERROR, e, strlen(e), err);
  if (st == PC_OK) st = set_str(t, &row, FC_FAILURES, num, strlen(num), err);
  if (st == PC_OK) st = set_str(t, &row, FC_TS, tsb, strlen(tsb), err);
  if (st == PC_OK) st = set_str(t, &row, FC_RETRY, "0", 1, err);
  pc_buf_free(&row);
  return st;
}

pc_status_t pc_park(pc_worker_t *w, const pc_cell_t *c, const pc_observer_t *obs, uint64_t ts,
                    uint32_t failures, const char *error, pc_error_t *err) {
  pc_status_t st = PC_OK;
  for (int attempt = 0; attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(w->db, err);
    if (!t) {
      st = err ? err->code : PC_INTERNAL;
      break;
    }
    st = pc_park_record(t, c, obs->name, obs->kind == PC_OBSERVER_WEAK, ts, failures, error, err);
    if (st == PC_OK) st = pc_txn_commit(t, err);
    pc_txn_destroy(t);
    if (st != PC_CONFLICT && st != PC_LOCKED) break;
  }
  if (st != PC_OK) {
    pc_error_prefix(err, "parking");
    return st;
  }
  pc_buf_t key = {0};
  if (pc_backoff_key(&key, c, obs->name) == 0) pc_parked_hold(w, &key);
  pc_buf_free(&key);
  return PC_OK;
}

/* ---- (cell, observer) pairs held back while parked --------------------------- */

int pc_parked_holds(pc_worker_t *w, const pc_buf_t *key) {
  pthread_mutex_lock(&w->sets_mu);
  int held = pc_keyset_has(w->held, key->p, key->len);
  pthread_mutex_unlock(&w->sets_mu);
  return held;
}

void pc_parked_hold(pc_worker_t *w, const pc_buf_t *key) {
  pthread_mutex_lock(&w->sets_mu);
  (void)pc_keyset_add(w->held, key->p, key->len); /* out of memory: the next look adds it */
  pthread_mutex_unlock(&w->sets_mu);
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
    if ((i < NREQUIRED_COLUMNS && !r->have[i]) || pc_buf_u8(&r->v[i], 0) != 0) return -1;
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
  p->retrying = r->have[8] && strcmp(r->v[8].p, "1") == 0;
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
  (void)weak;
  (void)row;
  list_ctx_t *l = ctx;
  return p->retrying ? 0 : l->fn(l->ctx, p); /* queued again: no longer parked */
}

pc_status_t pc_worker_failures(pc_db_t *db, int (*fn)(void *ctx, const pc_parked_t *p),
                               void *ctx, pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !fn) return pc_error_set(err, PC_INVALID, "failures: NULL argument");
  list_ctx_t l = {fn, ctx};
  return scan_records(db, list_one, &l, err);
}

/* A record, copied for acting on it after the scan. */
typedef struct requeue {
  pc_buf_t row, table, crow, col, observer;
  uint64_t ts;
  int weak;
} requeue_t;

typedef struct requeue_list {
  requeue_t *v;
  size_t n, cap;
  int oom;
  int retrying; /* which records to take: those parked (0), or those to retry (1) */
} requeue_list_t;

static int requeue_add(void *ctx, const pc_parked_t *p, int weak, const pc_buf_t *row) {
  requeue_list_t *l = ctx;
  if (p->retrying != l->retrying) return 0;
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

static void requeue_free(requeue_list_t *l) {
  for (size_t i = 0; i < l->n; i++) {
    requeue_t *q = &l->v[i];
    pc_buf_free(&q->row);
    pc_buf_free(&q->table);
    pc_buf_free(&q->crow);
    pc_buf_free(&q->col);
    pc_buf_free(&q->observer);
  }
  free(l->v);
}

/* Asks for a retry of q: its retry column set to "1". */
static pc_status_t ask_retry(pc_db_t *db, const requeue_t *q, pc_error_t *err) {
  pc_status_t st = PC_OK;
  for (int attempt = 0; attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(db, err);
    if (!t) return err ? err->code : PC_INTERNAL;
    st = set_str(t, &q->row, FC_RETRY, "1", 1, err);
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
    st = ask_retry(db, &l.v[i], err);
    if (st == PC_OK && n) (*n)++;
    else if (st != PC_OK)
      pc_error_prefix(err, "re-queueing observer '%s' on %s", (const char *)l.v[i].observer.p,
                      (const char *)l.v[i].table.p);
  }
  requeue_free(&l);
  return st;
}

/* ---- running the retries asked for ------------------------------------------ */

static obs_slot_t *slot_named(pc_worker_t *w, const char *name) {
  for (size_t i = 0; i < w->nslots; i++)
    if (strcmp(w->slots[i].obs->name, name) == 0) return &w->slots[i];
  return NULL;
}

/* Deletes q's record in t. */
static pc_status_t delete_record(pc_txn_t *t, const requeue_t *q, pc_error_t *err) {
  pc_status_t st = PC_OK;
  for (size_t i = 0; i < NFAILURE_COLUMNS && st == PC_OK; i++)
    st = pc_txn_delete_system(t, PC_SYSTEM_TABLE, q->row.p, q->row.len, failure_columns[i],
                              strlen(failure_columns[i]), err);
  return st;
}

/* Runs slot's observer on q's change alone, in one transaction with the
 * deletion of the record (see the top of this file). */
static void retry_one(pc_worker_t *w, obs_slot_t *slot, const requeue_t *q) {
  const pc_observer_t *o = slot->obs;
  pc_cell_t c = {q->table.p, q->crow.p, q->crow.len, q->col.p, q->col.len};
  pc_buf_t key = {0}, ack_col = {0};
  pc_txn_t *t = NULL;
  pc_error_t err;
  pc_error_clear(&err);
  char name[200];
  pc_cell_name(c.table, c.row, c.rlen, c.col, c.clen, name, sizeof name);
  if (pc_backoff_key(&key, &c, o->name) != 0 || pc_backoff_waiting(w, &key, NULL)) goto out;
  if (pc_ack_column(&ack_col, o->name, c.col, c.clen) != 0) goto out;
  if (!(t = pc_txn_begin_for(w->db, &c, &err))) goto setback;
  uint64_t ack = 0;
  pc_status_t st = pc_run_read_ts(t, &c, &ack_col, &ack, &err);
  if (st != PC_OK) goto setback;
  uint64_t start = pc_txn_start_ts(t);
  if (ack >= q->ts) { /* observed since it was parked */
    if ((st = delete_record(t, q, &err)) == PC_OK) st = pc_txn_commit(t, &err);
    if (st != PC_OK) goto setback;
    pc_count(slot, PC_C_SKIPPED);
    pc_backoff_forget(w, &key);
    goto out;
  }
  pc_notified_cell_t nc = {c.table, c.row, c.rlen, c.col, c.clen, q->ts};
  st = pc_run_callback(w, o, t, &nc, &err);
  if (pc_worker_self() && pc_worker_self()->given_up) goto out; /* counted by the watchdog */
  if (st != PC_OK) {
    pc_count(slot, PC_C_FAILURES);
    uint32_t n = pc_backoff_defer(w, &key, 1, NULL);
    if (n >= w->o.max_failures) {
      pc_error_t perr;
      if (pc_park(w, &c, o, q->ts, n, err.text, &perr) == PC_OK) {
        pc_count(slot, PC_C_PARKED);
        pc_backoff_forget(w, &key);
        pc_log(PC_LOG_WARN, "worker: observer '%s' on %s parked again after %u failures: %s",
               o->name, name, n, err.text);
      }
    }
    goto out;
  }
  st = pc_run_write_ack(t, &c, &ack_col, start, &err);
  if (st == PC_OK) st = delete_record(t, q, &err);
  if (st == PC_OK) st = pc_txn_commit(t, &err);
  if (st != PC_OK) goto setback;
  pc_count(slot, PC_C_RUNS);
  pc_backoff_forget(w, &key);
  pc_crash_forget(w, &c, o->name, &key);
  pc_log(PC_LOG_INFO, "worker: observer '%s' on %s ran again, as asked", o->name, name);
  goto out;
setback:
  (void)pc_backoff_defer(w, &key, 0, NULL);
  pc_log(PC_LOG_DEBUG, "worker: retrying observer '%s' on %s: %s", o->name, name, err.text);
out:
  pc_txn_destroy(t);
  pc_buf_free(&key);
  pc_buf_free(&ack_col);
}

/* Collects, for pc_parked_retry, the records to retry and the keys of the
 * parked ones. */
typedef struct look {
  pc_worker_t *w;
  requeue_list_t retry;
  keyset_t *held;
  int oom;
} look_t;

static int look_add(void *ctx, const pc_parked_t *p, int weak, const pc_buf_t *row) {
  look_t *l = ctx;
  if (p->retrying) return requeue_add(&l->retry, p, weak, row);
  if (!slot_named(l->w, p->observer)) return 0;
  pc_buf_t key = {0};
  pc_cell_t c = {p->table, p->row, p->rlen, p->col, p->clen};
  if (pc_backoff_key(&key, &c, p->observer) != 0 || pc_keyset_add(l->held, key.p, key.len) != 0)
    l->oom = 1;
  pc_buf_free(&key);
  return l->oom;
}

void pc_parked_retry(pc_worker_t *w) {
  uint64_t now = pc_now_mono_ms(), due = atomic_load(&w->next_retry_scan_ms);
  if (now < due ||
      !atomic_compare_exchange_strong(&w->next_retry_scan_ms, &due, now + RETRY_SCAN_MS))
    return; /* not yet, or another thread of this worker looks */
  look_t l = {w, {.retrying = 1}, pc_keyset_create(), 0};
  keyset_t *suspects = pc_keyset_create();
  pc_error_t err;
  pc_status_t st = l.held && suspects ? scan_records(w->db, look_add, &l, &err)
                                      : pc_error_set(&err, PC_NOMEM, "out of memory");
  if (st == PC_OK && l.oom) st = pc_error_set(&err, PC_NOMEM, "out of memory");
  if (st == PC_OK) st = pc_crash_suspects(w, suspects, &err);
  if (st == PC_OK) { /* what the store says now */
    pthread_mutex_lock(&w->sets_mu);
    keyset_t *old_held = w->held, *old_suspects = w->suspects;
    w->held = l.held;
    w->suspects = suspects;
    pthread_mutex_unlock(&w->sets_mu);
    pc_keyset_destroy(old_held);
    pc_keyset_destroy(old_suspects);
    l.held = suspects = NULL;
  } else {
    pc_log(PC_LOG_DEBUG, "worker: looking at the parked notifications: %s", err.text);
  }
  pc_keyset_destroy(l.held);
  pc_keyset_destroy(suspects);
  wthread_t *self = pc_worker_self();
  for (size_t i = 0; i < l.retry.n && !pc_worker_stopping(w) && !(self && self->given_up); i++) {
    obs_slot_t *slot = slot_named(w, l.retry.v[i].observer.p);
    if (slot) retry_one(w, slot, &l.retry.v[i]);
  }
  requeue_free(&l.retry);
}
