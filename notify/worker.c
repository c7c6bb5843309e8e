/* worker.c — the notification engine (docs/ARCHITECTURE.md; the contract is worker.h):
 * threads that claim buckets of notifications, run the observers of each
 * notified cell in transactions, and delete what they have observed; a
 * sweeper that settles old locks; and, for any client, the pending count,
 * wait, and the parked failures.
 *
 * One pass over a cell. A scan may find several notifications of a cell
 * (strong and weak, several timestamps); they are coalesced into one pass.
 * Each observer of the cell's column whose kind was notified runs in its own
 * transaction T (start_ts S):
 *   strong  T reads ack(c, O) = A; when A is past the newest strong
 *           notification found, the change was observed already (skip: O
 *           covers every change below A); otherwise O's callback runs, T
 *           writes ack = S and commits (O covers every change below S);
 *   weak    O's callback runs and T commits (O covers what committed below S).
 * When every observer is done (ran, skipped, parked, or had nothing to do),
 * the cell's notifications below max(M + 1, min over observers of what they
 * cover) are deleted, M being the newest notification found. Below M + 1 is
 * always safe: every notification of a cell is written by a transaction that
 * locked the cell (a write conflicts with a write, and a weak notification
 * with both), so notifications of one cell appear in timestamp order, and a
 * scan that saw the one at M saw every older one of the cell and its kind.
 * Above M only what every observer of the column covers is deleted, since
 * the kind of a notification that arrived after the scan is unknown. An
 * observer that is waiting out a backoff leaves the cell's notifications in
 * place. When a single observer acts on the pass, the deletion goes in its
 * commit's own batch (one-phase commits: pc_txn_commit_clearing), so that
 * the run and the end of its notifications are one durable write; otherwise,
 * or when that commit could not take it, it is a write of its own.
 *
 * Failures. A callback that fails, or an ack that is not 8 bytes, counts a
 * failure of (cell, observer), kept in memory with an exponential backoff
 * from backoff_ms; at max_failures the notification is
 * parked: a record is written in PC_SYSTEM_TABLE (row "failure/<observer>/
 * <table>/<hash of row and column>", see park()) and the observer counts as
 * done. A commit that conflicts (another run, or a writer of what the
 * observer writes, committed first) counts a conflict: retried after the
 * same backoff, never parked, because somebody else made progress. Errors of
 * the engine's own steps (begin, a read timing out) are retried the same way
 * and are not the observer's failures.
 *
 * Re-queueing a parked notification. A weak one: a transaction calls
 * pc_txn_notify_weak on the cell. A strong one cannot be re-created without
 * writing the cell again (which would make every other strong observer of the
 * column see a new change), so the transaction writes a retry mark, the system
 * column 0xFF "try" 0x00 O 0x00 col = ts of the parked change, together
 * with a weak notification of the cell. A pass that finds a weak notification
 * reads the retry marks of the column's strong observers in their
 * transactions, treats a mark as a strong notification at its ts (skipped if
 * the ack is already past it), and overwrites it with 0 in the same commit.
 *
 * Claims. Buckets [k * buckets_per_claim, (k + 1) * buckets_per_claim) form
 * claim k, locked as "percolator/notify/<first bucket>": first in the
 * pc_db_t's in-process lock service (one session per thread, so two threads
 * of this process never scan a claim at once), then, in a cluster, in lockd
 * (so two processes do not). Claims only spread the work: safety comes from
 * the acks. A thread takes claims only when a scan of every bucket for one
 * notification finds one; otherwise it sleeps idle_ms.
 */
#include "notify/worker.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/db.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "core/log.h"
#include "lockservice/lockservice.h"
#include "tso/tso_rpc.h"

#define PAGE 256                 /* notifications per scan_notify call */
#define CLAIM_PREFIX "percolator/notify/"
#define LOCAL_SESSION_TTL_MS 600000u
#define LOCKD_TIMEOUT_MS 2000u
#define BACKOFF_CAP_MS 300000u   /* the longest wait between retries (unless backoff_ms is longer) */
#define FAIL_FORGET_MS 600000u   /* an entry untouched this long past its retry time is dropped */
#define FAILURE_PREFIX "failure/"
#define RETRY_ATTEMPTS 5         /* of the small bookkeeping transactions (park, retry) */

static const uint64_t latency_bounds_ms[12] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};

/* ---- the worker --------------------------------------------------------- */

typedef struct obs_slot {
  const pc_observer_t *obs;
  _Atomic uint64_t runs, skipped, conflicts, failures, parked;
} obs_slot_t;

/* What one (cell, observer) has gone through since its last success. */
typedef struct fail_entry {
  struct fail_entry *next;
  uint64_t hash;
  char *key; /* escaped table, row, column, observer */
  size_t klen;
  uint32_t failures, retries; /* callback failures; every deferral (failures too) */
  uint64_t next_try_ms;       /* monotonic */
} fail_entry_t;

#define FAIL_BUCKETS 1024u

struct pc_worker {
  pc_db_t *db;
  pc_observer_registry_t *reg;
  pc_worker_options_t o;
  pc_ls_t *local; /* the db's in-process lock service */
  obs_slot_t *slots; /* sorted by observer pointer */
  size_t nslots;
  uint32_t nclaims;

  atomic_int stop;
  pthread_mutex_t mu; /* sleeps */
  pthread_cond_t cv;
  pthread_t *threads;
  struct wthread *threads_ctx;
  size_t nthreads;
  pthread_t sweeper;
  int sweeper_started;

  pthread_mutex_t fail_mu;
  fail_entry_t *fail[FAIL_BUCKETS];

  _Atomic uint64_t seen, claims_taken, claims_busy;
  _Atomic uint64_t lat_le[13], lat_sum_ms, lat_count;
};

typedef struct wthread {
  pc_worker_t *w;
  uint32_t idx;
  uint64_t session; /* in w->local */
  uint64_t rng;
} wthread_t;

void pc_worker_options_default(pc_worker_options_t *o) {
  o->threads = 4;
  o->buckets_per_claim = 16;
  o->idle_ms = 100;
  o->max_failures = 5;
  o->backoff_ms = 100;
  o->sweep_ms = 1000;
}

static int stopping(pc_worker_t *w) { return atomic_load(&w->stop); }

/* Sleeps ms or until the worker stops. */
static void nap(pc_worker_t *w, uint32_t ms) {
  pthread_mutex_lock(&w->mu);
  if (!stopping(w)) {
    struct timespec until = pc_mono_after_ms(ms);
    pthread_cond_timedwait(&w->cv, &w->mu, &until);
  }
  pthread_mutex_unlock(&w->mu);
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The observer's slot (observers registered after the start have none). */
static obs_slot_t *slot_of(pc_worker_t *w, const pc_observer_t *obs) {
  size_t lo = 0, hi = w->nslots;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    uintptr_t m = (uintptr_t)w->slots[mid].obs;
    if (m == (uintptr_t)obs) return &w->slots[mid];
    if (m < (uintptr_t)obs) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

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

/* "table/row/col" for messages, each cut to 64 bytes (bytes outside
 * printable ASCII shown as '?'). */
static const char *cell_name(const char *table, const char *row, size_t rlen, const char *col,
                             size_t clen, char *buf, size_t cap) {
  char r[65], c[65];
  size_t i;
  for (i = 0; i < rlen && i < 64; i++) r[i] = row[i] >= 0x20 && row[i] < 0x7f ? row[i] : '?';
  r[i] = '\0';
  for (i = 0; i < clen && i < 64; i++) c[i] = col[i] >= 0x20 && col[i] < 0x7f ? col[i] : '?';
  c[i] = '\0';
  snprintf(buf, cap, "%s/%s%s/%s%s", table, r, rlen > 64 ? "..." : "", c, clen > 64 ? "..." : "");
  return buf;
}

/* ---- notifications as found ---------------------------------------------- */

/* A copy of a notification (one allocation holds the strings). */
typedef struct note {
  char *mem;
  pc_notification_t n;
} note_t;

static int note_copy(note_t *dst, const pc_notification_t *n) {
  size_t tl = strlen(n->cell.table);
  char *m = malloc(tl + 1 + n->cell.rlen + n->cell.clen + 1);
  if (!m) return -1;
  memcpy(m, n->cell.table, tl + 1);
  memcpy(m + tl + 1, n->cell.row, n->cell.rlen);
  memcpy(m + tl + 1 + n->cell.rlen, n->cell.col, n->cell.clen);
  dst->mem = m;
  dst->n = *n;
  dst->n.cell.table = m;
  dst->n.cell.row = m + tl + 1;
  dst->n.cell.col = m + tl + 1 + n->cell.rlen;
  return 0;
}

static void note_free(note_t *t) {
  free(t->mem);
  t->mem = NULL;
}

static int same_cell(const pc_cell_t *a, const pc_cell_t *b) {
  return a->rlen == b->rlen && a->clen == b->clen && strcmp(a->table, b->table) == 0 &&
         memcmp(a->row, b->row, a->rlen) == 0 && memcmp(a->col, b->col, a->clen) == 0;
}

typedef struct page {
  note_t *v;
  size_t n, cap;
  int oom;
} page_t;

static int page_add(void *ctx, const pc_notification_t *n) {
  page_t *p = ctx;
  if (p->n == p->cap) {
    size_t c = p->cap ? p->cap * 2 : 64;
    note_t *v = realloc(p->v, c * sizeof *v);
    if (!v) {
      p->oom = 1;
      return 1;
    }
    p->v = v;
    p->cap = c;
  }
  if (note_copy(&p->v[p->n], n) != 0) {
    p->oom = 1;
    return 1;
  }
  p->n++;
  return 0;
}

static void page_clear(page_t *p) {
  for (size_t i = 0; i < p->n; i++) note_free(&p->v[i]);
  p->n = 0;
  p->oom = 0;
}

/* One page of notifications of buckets [lo, hi) after `after` (NULL: from
 * the start) into p. *more: the range may hold more. */
static pc_status_t scan_page(pc_db_t *db, uint32_t lo, uint32_t hi, const note_t *after,
                             page_t *p, int *more, pc_error_t *err) {
  page_clear(p);
  pc_status_t st = db->store->ops->scan_notify(db->store, lo, hi, after ? &after->n : NULL, PAGE,
                                               page_add, p, err);
  if (st == PC_OK && p->oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  *more = st == PC_OK && p->n >= PAGE;
  return st;
}

/* The notifications of one cell found by a scan. */
typedef struct group {
  note_t cell;
  uint64_t strong_ts, weak_ts; /* the newest of each kind, 0: none */
} group_t;

static void group_add(group_t *g, const pc_notification_t *n) {
  if (n->weak) g->weak_ts = max_u64(g->weak_ts, n->ts);
  else g->strong_ts = max_u64(g->strong_ts, n->ts);
}

/* ---- failures in memory ---------------------------------------------------- */

static int fail_key(pc_buf_t *b, const pc_cell_t *c, const char *observer) {
  return pc_key_escape(b, c->table, strlen(c->table)) || pc_key_escape(b, c->row, c->rlen) ||
         pc_key_escape(b, c->col, c->clen) || pc_key_escape(b, observer, strlen(observer));
}

/* The entry of key (created when create is set); under fail_mu. */
static fail_entry_t *fail_find(pc_worker_t *w, const pc_buf_t *key, int create) {
  uint64_t h = XXH3_64bits(key->p, key->len);
  fail_entry_t **head = &w->fail[h % FAIL_BUCKETS];
  for (fail_entry_t *e = *head; e; e = e->next)
    if (e->hash == h && e->klen == key->len && memcmp(e->key, key->p, key->len) == 0) return e;
  if (!create) return NULL;
  fail_entry_t *e = calloc(1, sizeof *e);
  if (!e || !(e->key = malloc(key->len ? key->len : 1))) {
    free(e);
    return NULL;
  }
  memcpy(e->key, key->p, key->len);
  e->klen = key->len;
  e->hash = h;
  e->next = *head;
  *head = e;
  return e;
}

static void fail_remove(pc_worker_t *w, const pc_buf_t *key) {
  uint64_t h = XXH3_64bits(key->p, key->len);
  for (fail_entry_t **p = &w->fail[h % FAIL_BUCKETS]; *p; p = &(*p)->next) {
    fail_entry_t *e = *p;
    if (e->hash == h && e->klen == key->len && memcmp(e->key, key->p, key->len) == 0) {
      *p = e->next;
      free(e->key);
      free(e);
      return;
    }
  }
}

static uint64_t backoff_ms(const pc_worker_t *w, uint32_t n) {
  uint64_t cap = max_u64(w->o.backoff_ms, BACKOFF_CAP_MS), d = w->o.backoff_ms;
  for (uint32_t i = 1; i < n && d < cap; i++) d *= 2;
  return min_u64(d, cap);
}

/* Drops entries whose retry time passed long ago: their notification was
 * handled elsewhere (another worker) or is gone. */
static void fail_prune(pc_worker_t *w) {
  uint64_t now = pc_now_mono_ms();
  pthread_mutex_lock(&w->fail_mu);
  for (size_t b = 0; b < FAIL_BUCKETS; b++) {
    for (fail_entry_t **p = &w->fail[b]; *p;) {
      fail_entry_t *e = *p;
      if (e->next_try_ms + FAIL_FORGET_MS < now) {
        *p = e->next;
        free(e->key);
        free(e);
      } else {
        p = &e->next;
      }
    }
  }
  pthread_mutex_unlock(&w->fail_mu);
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

/* Writes the failure record of (cell, obs) in a transaction of its own. */
static pc_status_t park(pc_worker_t *w, const pc_cell_t *c, const pc_observer_t *obs, uint64_t ts,
                        uint32_t failures, const char *error, pc_error_t *err) {
  pc_buf_t row = {0};
  if (failure_row(&row, c, obs->name) != 0) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = PC_OK;
  for (int attempt = 0; attempt < RETRY_ATTEMPTS; attempt++) {
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

/* ---- one observer on one cell -------------------------------------------- */

typedef enum run_result {
  RUN_DONE,    /* ran, skipped or parked: *cover is what it observed below (UINT64_MAX: no bound) */
  RUN_IDLE,    /* nothing of its kind was notified */
  RUN_DEFERRED /* failed, conflicted or waits out a backoff: keep the notifications */
} run_result_t;

/* Reads the timestamp in system column col of the cell's row (an ack or a
 * retry mark: 8 bytes big-endian, as db.h says of acks) into *ts, 0 when
 * the column is absent. */
static pc_status_t read_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t *ts,
                           pc_error_t *err) {
  char *v = NULL;
  size_t n = 0;
  *ts = 0;
  pc_status_t st = pc_txn_get_system(t, c->table, c->row, c->rlen, col->p, col->len, &v, &n, err);
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    return PC_OK;
  }
  if (st != PC_OK) return st;
  if (n == 8) {
    pc_rd_t r = {v, n, 0, 1};
    *ts = pc_rd_u64(&r);
  } else {
    st = pc_error_set(err, PC_CORRUPTION, "system column holds %zu bytes, not an 8-byte timestamp",
                      n);
  }
  pc_free(v);
  return st;
}

static pc_status_t write_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t ts,
                            pc_error_t *err) {
  char b[8];
  for (int i = 0; i < 8; i++) b[i] = (char)(ts >> (56 - 8 * i));
  return pc_txn_set_system(t, c->table, c->row, c->rlen, col->p, col->len, b, sizeof b, err);
}

/* The retry mark of observer for column col: RETRY_PREFIX observer 0x00 col,
 * as long as an ack column, so that it fits wherever one does (see the top
 * of this file). */
#define RETRY_PREFIX "\xff" "try" /* and its 0x00 */
_Static_assert(sizeof RETRY_PREFIX == PC_ACK_PREFIX_LEN, "a retry mark is as long as an ack");
static int retry_column(pc_buf_t *out, const char *observer, const char *col, size_t clen) {
  out->len = 0;
  return pc_buf_append(out, RETRY_PREFIX, sizeof RETRY_PREFIX) ||
         pc_buf_append(out, observer, strlen(observer)) || pc_buf_u8(out, 0) ||
         pc_buf_append(out, col, clen);
}

static void record_latency(pc_worker_t *w, uint64_t notify_ts, uint64_t commit_ts) {
  if (!commit_ts || !notify_ts) return;
  uint64_t a = PC_TS_PHYSICAL_MS(notify_ts), b = PC_TS_PHYSICAL_MS(commit_ts);
  uint64_t ms = b > a ? b - a : 0;
  for (size_t i = 0; i < 12; i++)
    if (ms <= latency_bounds_ms[i]) atomic_fetch_add(&w->lat_le[i], 1);
  atomic_fetch_add(&w->lat_le[12], 1);
  atomic_fetch_add(&w->lat_sum_ms, ms);
  atomic_fetch_add(&w->lat_count, 1);
}

/* Defers (cell, observer) after a failure (callback: counts toward parking)
 * or another setback, remembering when to try again. Returns the number of
 * callback failures so far (0 when the entry could not be kept). */
static uint32_t defer(pc_worker_t *w, const pc_buf_t *key, int callback_failed) {
  pthread_mutex_lock(&w->fail_mu);
  fail_entry_t *e = fail_find(w, key, 1);
  uint32_t n = 0;
  if (e) {
    if (callback_failed) e->failures++;
    e->retries++;
    e->next_try_ms = pc_now_mono_ms() + backoff_ms(w, e->retries);
    n = e->failures;
  }
  pthread_mutex_unlock(&w->fail_mu);
  return n;
}

static int in_backoff(pc_worker_t *w, const pc_buf_t *key) {
  pthread_mutex_lock(&w->fail_mu);
  fail_entry_t *e = fail_find(w, key, 0);
  int wait = e && pc_now_mono_ms() < e->next_try_ms;
  pthread_mutex_unlock(&w->fail_mu);
  return wait;
}

static void forget(pc_worker_t *w, const pc_buf_t *key) {
  pthread_mutex_lock(&w->fail_mu);
  fail_remove(w, key);
  pthread_mutex_unlock(&w->fail_mu);
}

static int is_conflict(pc_status_t st) {
  return st == PC_CONFLICT || st == PC_LOCKED || st == PC_ABORTED;
}

/* Whether observer o has something to do for group g (else RUN_IDLE): a strong one
 * is notified by a strong notification or, through a retry mark, by a weak one. */
static int acts_on(const pc_observer_t *o, const group_t *g) {
  return o->kind == PC_OBSERVER_STRONG ? g->strong_ts != 0 || g->weak_ts != 0 : g->weak_ts != 0;
}

/* Runs slot's observer for group g (see the top of this file). fold (NULL:
 * none): the cell's notifications that its commit deletes in the same batch
 * when it can (fold->done then), below fold->below or, when to_start, below
 * the run's start_ts if that is larger. */
static run_result_t run_observer(pc_worker_t *w, obs_slot_t *slot, const group_t *g,
                                 uint64_t *cover, pc_notify_clear_t *fold, int to_start) {
  const pc_observer_t *o = slot->obs;
  const pc_cell_t *c = &g->cell.n.cell;
  int strong = o->kind == PC_OBSERVER_STRONG;
  uint64_t target = strong ? g->strong_ts : g->weak_ts;
  int check_mark = strong && g->weak_ts != 0; /* a weak notification may carry a retry */
  if (!acts_on(o, g)) return RUN_IDLE;

  pc_buf_t key = {0}, ack_col = {0}, mark_col = {0};
  run_result_t res = RUN_DEFERRED;
  pc_txn_t *t = NULL;
  pc_error_t err;
  pc_error_clear(&err);
  char name[200];
  if (fail_key(&key, c, o->name) != 0) goto out; /* out of memory: try again later */
  if (in_backoff(w, &key)) goto out;
  if (strong && (pc_ack_column(&ack_col, o->name, c->col, c->clen) != 0 ||
                 (check_mark && retry_column(&mark_col, o->name, c->col, c->clen) != 0)))
    goto setback;

  t = pc_txn_begin(w->db, &err);
  if (!t) goto setback;
  uint64_t start = 0, ack = 0, mark = 0;
  pc_status_t st = PC_OK;
  if (strong) {
    st = read_ts(t, c, &ack_col, &ack, &err);
    if (st == PC_OK && check_mark) st = read_ts(t, c, &mark_col, &mark, &err);
    if (st == PC_CORRUPTION) goto failed;
    if (st != PC_OK) goto setback;
    start = pc_txn_start_ts(t); /* taken by now, lazy_start or not */
    target = max_u64(target, mark);
    if (target == 0) { /* the weak notification carried nothing for this observer */
      res = RUN_IDLE;
      goto out;
    }
    if (ack >= target) { /* observed already: this observer covers everything below ack */
      if (mark) {
        st = write_ts(t, c, &mark_col, 0, &err);
        if (st == PC_OK) st = pc_txn_commit(t, &err);
        if (st != PC_OK) goto setback_st;
      }
      atomic_fetch_add(&slot->skipped, 1);
      forget(w, &key);
      *cover = ack;
      res = RUN_DONE;
      goto out;
    }
  }

  pc_notified_cell_t nc = {c->table, c->row, c->rlen, c->col, c->clen, target};
  st = pc_observer_run(o, t, &nc, &err);
  if (st != PC_OK) goto failed;
  if (strong) {
    st = write_ts(t, c, &ack_col, start, &err);
    if (st == PC_OK && mark) st = write_ts(t, c, &mark_col, 0, &err);
    if (st != PC_OK) goto setback_st;
  }
  if (fold) {
    if (to_start) fold->below = max_u64(fold->below, strong ? start : pc_txn_start_ts(t));
    st = pc_txn_commit_clearing(t, fold, &err);
  } else {
    st = pc_txn_commit(t, &err);
  }
  if (st != PC_OK) goto setback_st;
  atomic_fetch_add(&slot->runs, 1);
  record_latency(w, target, pc_txn_commit_ts(t));
  forget(w, &key);
  /* weak: the snapshot's timestamp (0 when, with lazy_start, the run read
   * and wrote nothing: then it covers only what the scan saw) */
  *cover = strong ? start : pc_txn_start_ts(t);
  res = RUN_DONE;
  goto out;

failed: {
  atomic_fetch_add(&slot->failures, 1);
  uint32_t n = defer(w, &key, 1);
  cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name);
  if (n >= w->o.max_failures) {
    pc_error_t perr;
    if (park(w, c, o, target, n, err.text, &perr) == PC_OK) {
      atomic_fetch_add(&slot->parked, 1);
      forget(w, &key);
      pc_log(PC_LOG_WARN, "worker: observer '%s' on %s parked after %u failures: %s", o->name,
             name, n, err.text);
      *cover = UINT64_MAX; /* its notifications go: the record re-queues them */
      res = RUN_DONE;
    } else {
      pc_log(PC_LOG_WARN, "worker: observer '%s' on %s: %s", o->name, name, perr.text);
    }
  } else {
    pc_log(PC_LOG_DEBUG, "worker: observer '%s' on %s failed (%u of %u): %s", o->name, name, n,
           w->o.max_failures, err.text);
  }
  goto out;
}

setback_st:
  if (is_conflict(st)) atomic_fetch_add(&slot->conflicts, 1);
setback:
  (void)defer(w, &key, 0);
  if (!is_conflict(err.code))
    pc_log(PC_LOG_DEBUG, "worker: observer '%s' on %s: %s, retrying later", o->name,
           cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
out:
  pc_txn_destroy(t);
  pc_buf_free(&key);
  pc_buf_free(&ack_col);
  pc_buf_free(&mark_col);
  return res;
}

/* One pass over a cell. Returns 1 when it did something (ran, skipped or
 * cleared), 0 when every observer waits out a backoff. */
static int process_cell(pc_worker_t *w, const group_t *g) {
  const pc_cell_t *c = &g->cell.n.cell;
  const pc_observer_t *found[16], **obs = found;
  size_t n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, found, 16);
  if (n > 16) {
    obs = malloc(n * sizeof *obs);
    if (!obs) return 0;
    n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, obs, n);
  }
  uint64_t newest = max_u64(g->strong_ts, g->weak_ts);
  uint64_t cover = UINT64_MAX;
  int all_done = 1, did = 0;
  /* When one observer acts and the others are idle, the notifications to
   * delete are known before it commits: below newest + 1, or below its
   * start_ts when it is the only one (what the loop below would compute),
   * and its commit deletes them in its own batch (pc_txn_commit_clearing),
   * saving a write. The failpoint is then met before the run. */
  size_t acting = 0, mine = 0;
  for (size_t i = 0; i < n; i++) {
    if (!slot_of(w, obs[i])) continue;
    mine++;
    acting += (size_t)acts_on(obs[i], g);
  }
  pc_error_t err;
  int fp_met = acting == 1, fp_fired = fp_met && PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  pc_notify_clear_t fold = {*c, newest + 1, 0};
  for (size_t i = 0; i < n && !stopping(w); i++) {
    obs_slot_t *slot = slot_of(w, obs[i]);
    if (!slot) continue; /* registered after the start: not this worker's */
    uint64_t cv = 0;
    pc_notify_clear_t *f = acting == 1 && !fp_fired && acts_on(obs[i], g) ? &fold : NULL;
    switch (run_observer(w, slot, g, &cv, f, mine == 1)) {
      case RUN_DONE: /* cv 0: it covers what the scan saw */
        did = 1;
        cover = min_u64(cover, cv ? cv : newest + 1);
        break;
      case RUN_IDLE:
        cover = min_u64(cover, newest + 1);
        break;
      case RUN_DEFERRED:
        all_done = 0;
        break;
    }
  }
  if (obs != found) free(obs);
  if (!all_done || stopping(w)) return did;
  if (fold.done) return 1; /* deleted with the observer's commit */
  uint64_t below = max_u64(newest + 1, cover == UINT64_MAX ? 0 : cover);
  if (!fp_met) fp_fired = PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  if (fp_fired) return 1; /* as if crashed here */
  if (w->db->store->ops->clear_notify(w->db->store, c, below, &err) != PC_OK) {
    char name[200];
    pc_log(PC_LOG_DEBUG, "worker: clearing the notifications of %s: %s",
           cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
  }
  return 1;
}

/* ---- batches -------------------------------------------------------------- */

/* Cells of one claim whose only acting observer of this worker is the same
 * strong observer with a batch callback, waiting to run together. */
typedef struct batch {
  obs_slot_t *slot; /* NULL while empty */
  size_t mine;      /* the column's observers in this worker */
  group_t *v;
  size_t n, cap;
} batch_t;

/* The slot of the batch observer that alone acts on g (with the column's
 * observer count of this worker in *mine), or NULL: g runs on its own. A
 * group with a weak notification may carry retry marks, which only the
 * single path reads. */
static obs_slot_t *batch_slot(pc_worker_t *w, const group_t *g, size_t *mine) {
  if (g->strong_ts == 0 || g->weak_ts != 0) return NULL;
  const pc_cell_t *c = &g->cell.n.cell;
  const pc_observer_t *found[16];
  size_t n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, found, 16);
  if (n > 16) return NULL;
  obs_slot_t *pick = NULL;
  *mine = 0;
  for (size_t i = 0; i < n; i++) {
    obs_slot_t *slot = slot_of(w, found[i]);
    if (!slot) continue;
    (*mine)++;
    if (found[i]->kind != PC_OBSERVER_STRONG) continue; /* weak: idle without weak_ts */
    if (pick || !found[i]->observe_batch || found[i]->batch_max < 2) return NULL;
    pick = slot;
  }
  return pick;
}

static void batch_release(batch_t *b) {
  for (size_t i = 0; i < b->n; i++) note_free(&b->v[i].cell);
  b->n = 0;
  b->slot = NULL;
}

/* Runs each cell of b on its own (process_cell): after a batch failed, so
 * that a failing cell is retried, backed off and parked by itself. */
static int batch_singly(pc_worker_t *w, batch_t *b) {
  int did = 0;
  for (size_t i = 0; i < b->n && !stopping(w); i++) did |= process_cell(w, &b->v[i]);
  return did;
}

/* One run of b's observer over every cell of b, in one transaction (the
 * single path's rules, per cell: a cell whose ack is past its notification
 * is skipped; the others get their ack at the run's start_ts; afterwards
 * each cell's notifications below newest + 1 are deleted, or below the
 * start_ts when the observer is the column's only one). The first run cell's
 * deletion goes in the commit's batch. Any failure: every cell again, alone. */
static int run_batch(pc_worker_t *w, batch_t *b) {
  const pc_observer_t *o = b->slot->obs;
  size_t n = b->n;
  pc_buf_t ack_col = {0}, *keys = calloc(n, sizeof *keys);
  pc_cell_ref_t *refs = calloc(n, sizeof *refs);
  pc_value_t *acks = calloc(n, sizeof *acks);
  pc_notified_cell_t *cells = calloc(n, sizeof *cells);
  size_t *run = calloc(n, sizeof *run); /* indices into b->v of the cells the observer runs on */
  uint64_t *below = calloc(n, sizeof *below);
  pc_txn_t *t = NULL;
  pc_error_t err;
  pc_error_clear(&err);
  int did = 0, failed = 0;
  size_t m = 0, k;
  const pc_cell_t *c0 = &b->v[0].cell.n.cell;
  if (!keys || !refs || !acks || !cells || !run || !below ||
      pc_ack_column(&ack_col, o->name, c0->col, c0->clen) != 0) {
    failed = 1; /* out of memory: the single path tries */
    goto out;
  }
  size_t live = 0; /* cells not waiting out a backoff, moved to the front */
  for (size_t i = 0; i < n; i++) {
    const pc_cell_t *c = &b->v[i].cell.n.cell;
    if (fail_key(&keys[i], c, o->name) != 0) {
      failed = 1;
      goto out;
    }
    if (in_backoff(w, &keys[i])) continue; /* left for a later round */
    if (live != i) { /* swap i into place */
      group_t g = b->v[live];
      pc_buf_t kb = keys[live];
      b->v[live] = b->v[i];
      keys[live] = keys[i];
      b->v[i] = g;
      keys[i] = kb;
    }
    live++;
  }
  if (live == 0) goto out;
  if (!(t = pc_txn_begin(w->db, &err))) {
    failed = 1;
    goto out;
  }
  for (k = 0; k < live; k++) {
    const pc_cell_t *c = &b->v[k].cell.n.cell;
    refs[k] = (pc_cell_ref_t){c->table, c->row, c->rlen, ack_col.p, ack_col.len};
  }
  if (pc_txn_get_many_system(t, refs, live, acks, &err) != PC_OK) {
    failed = 1;
    goto out;
  }
  uint64_t start = pc_txn_start_ts(t);
  for (k = 0; k < live; k++) {
    const group_t *g = &b->v[k];
    uint64_t ack = 0;
    if (acks[k].value && acks[k].vlen != 8) { /* the single path reports it */
      failed = 1;
      goto out;
    }
    if (acks[k].value) {
      pc_rd_t r = {acks[k].value, 8, 0, 1};
      ack = pc_rd_u64(&r);
    }
    uint64_t newest = g->strong_ts;
    if (ack >= g->strong_ts) { /* observed already */
      atomic_fetch_add(&b->slot->skipped, 1);
      forget(w, &keys[k]);
      below[k] = b->mine == 1 ? max_u64(newest + 1, ack) : newest + 1;
      continue;
    }
    const pc_cell_t *c = &g->cell.n.cell;
    cells[m] = (pc_notified_cell_t){c->table, c->row, c->rlen, c->col, c->clen, g->strong_ts};
    run[m++] = k;
    below[k] = b->mine == 1 ? max_u64(newest + 1, start) : newest + 1;
  }
  pc_status_t st = PC_OK;
  int fp_fired = 0;
  pc_notify_clear_t fold = {{0}, 0, 0};
  if (m > 0) {
    if ((st = pc_observer_run_batch(o, t, cells, m, &err)) != PC_OK) {
      /* (counted as the failure of a cell, if it is one, by the single path) */
      pc_log(PC_LOG_DEBUG, "worker: observer '%s' on a batch of %zu cells failed: %s; running "
             "them one by one", o->name, m, err.text);
      failed = 1;
      goto out;
    }
    for (size_t j = 0; j < m && st == PC_OK; j++)
      st = write_ts(t, &b->v[run[j]].cell.n.cell, &ack_col, start, &err);
    fp_fired = PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
    if (st == PC_OK && !fp_fired) {
      fold = (pc_notify_clear_t){b->v[run[0]].cell.n.cell, below[run[0]], 0};
      st = pc_txn_commit_clearing(t, &fold, &err);
    } else if (st == PC_OK) {
      pc_error_clear(&err);
      st = pc_txn_commit(t, &err);
    }
    if (st != PC_OK) {
      if (is_conflict(st)) atomic_fetch_add(&b->slot->conflicts, 1);
      failed = 1;
      goto out;
    }
    atomic_fetch_add(&b->slot->runs, m);
    for (size_t j = 0; j < m; j++) {
      record_latency(w, cells[j].notify_ts, pc_txn_commit_ts(t));
      forget(w, &keys[run[j]]);
    }
  } else {
    fp_fired = PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  }
  did = 1;
  if (fp_fired) goto out; /* as if crashed before deleting the notifications */
  for (k = 0; k < live && !stopping(w); k++) {
    const pc_cell_t *c = &b->v[k].cell.n.cell;
    if (fold.done && m > 0 && k == run[0]) continue; /* deleted with the commit */
    if (w->db->store->ops->clear_notify(w->db->store, c, below[k], &err) != PC_OK) {
      char name[200];
      pc_log(PC_LOG_DEBUG, "worker: clearing the notifications of %s: %s",
             cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
    }
  }
out:
  pc_txn_destroy(t);
  if (failed && !stopping(w)) did |= batch_singly(w, b);
  for (size_t i = 0; keys && i < n; i++) pc_buf_free(&keys[i]);
  for (size_t i = 0; acks && i < n; i++) pc_free(acks[i].value);
  pc_buf_free(&ack_col);
  free(keys);
  free(refs);
  free(acks);
  free(cells);
  free(run);
  free(below);
  batch_release(b);
  return did;
}

/* Takes g (moving its memory) into b, running b first when g belongs to
 * another observer's batch and afterwards when b is full; a group that
 * cannot join a batch runs at once. Returns 1 when something was done. */
static int batch_take(pc_worker_t *w, batch_t *b, group_t *g) {
  size_t mine = 0;
  obs_slot_t *slot = batch_slot(w, g, &mine);
  int did = 0;
  if (!slot) {
    did = process_cell(w, g);
    note_free(&g->cell);
    return did;
  }
  if (b->slot && (b->slot != slot || b->mine != mine)) did |= run_batch(w, b);
  if (b->n == b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 16;
    group_t *nv = realloc(b->v, nc * sizeof *nv);
    if (!nv) { /* no room: it runs on its own */
      did |= process_cell(w, g);
      note_free(&g->cell);
      return did;
    }
    b->v = nv;
    b->cap = nc;
  }
  b->slot = slot;
  b->mine = mine;
  b->v[b->n++] = *g;
  g->cell.mem = NULL; /* moved */
  if (b->n >= slot->obs->batch_max) did |= run_batch(w, b);
  return did;
}

/* ---- claims -------------------------------------------------------------- */

static int claim_name(char *buf, size_t cap, uint32_t first_bucket) {
  return snprintf(buf, cap, CLAIM_PREFIX "%" PRIu32, first_bucket);
}

/* The thread's session in the in-process lock service, (re)opened as needed. */
static int local_session(wthread_t *t) {
  pc_error_t err;
  if (t->session && pc_ls_session_keepalive(t->w->local, t->session, &err) == PC_OK) return 1;
  t->session = 0;
  return pc_ls_session_open(t->w->local, LOCAL_SESSION_TTL_MS, &t->session, &err) == PC_OK;
}

/* 1 when claim k is now this thread's, 0 when another holds it, -1 when it
 * cannot be asked (no session). */
static int claim_take(wthread_t *t, uint32_t k) {
  pc_worker_t *w = t->w;
  char name[64];
  int nl = claim_name(name, sizeof name, k * w->o.buckets_per_claim);
  if (!local_session(t)) return -1;
  int got = 0;
  uint64_t holder;
  pc_error_t err;
  if (pc_ls_lock_try(w->local, t->session, name, (size_t)nl, &got, &holder, &err) != PC_OK)
    return -1;
  if (!got) return 0;
  if (w->db->ls) {
    pc_status_t st = pc_ls_client_lock_try(w->db->ls, name, (size_t)nl,
                                           min_u64(w->db->opts.timeout_ms, LOCKD_TIMEOUT_MS), &got,
                                           &holder, &err);
    if (st != PC_OK || !got) {
      (void)pc_ls_lock_release(w->local, t->session, name, (size_t)nl, &err);
      return st == PC_OK ? 0 : -1;
    }
  }
  return 1;
}

static void claim_release(wthread_t *t, uint32_t k) {
  pc_worker_t *w = t->w;
  char name[64];
  int nl = claim_name(name, sizeof name, k * w->o.buckets_per_claim);
  pc_error_t err; /* a lock already gone went with its session */
  if (w->db->ls)
    (void)pc_ls_client_lock_release(w->db->ls, name, (size_t)nl,
                                    min_u64(w->db->opts.timeout_ms, LOCKD_TIMEOUT_MS), &err);
  (void)pc_ls_lock_release(w->local, t->session, name, (size_t)nl, &err);
}

/* Scans claim k page by page and passes over each cell found. Returns 1
 * when it did something. */
static int process_claim(pc_worker_t *w, uint32_t k) {
  uint32_t lo = k * w->o.buckets_per_claim;
  uint32_t hi = lo + w->o.buckets_per_claim;
  if (hi > PC_NOTIFY_BUCKETS) hi = PC_NOTIFY_BUCKETS;
  page_t p = {0};
  note_t after = {0};
  group_t g = {0};
  batch_t b = {0};
  int have_g = 0, have_after = 0, did = 0, more = 1, broken = 0;
  while (more && !stopping(w)) {
    pc_error_t err;
    if (scan_page(w->db, lo, hi, have_after ? &after : NULL, &p, &more, &err) != PC_OK) {
      pc_log(PC_LOG_DEBUG, "worker: scanning buckets %u..%u: %s", lo, hi - 1, err.text);
      broken = 1; /* the next round sees the rest again */
      break;
    }
    atomic_fetch_add(&w->seen, p.n);
    for (size_t i = 0; i < p.n && !stopping(w); i++) {
      const pc_notification_t *n = &p.v[i].n;
      if (have_g && same_cell(&g.cell.n.cell, &n->cell)) {
        group_add(&g, n);
        continue;
      }
      if (have_g) {
        did |= batch_take(w, &b, &g); /* (frees or keeps g's memory) */
        have_g = 0;
      }
      memset(&g, 0, sizeof g);
      g.cell = p.v[i]; /* moved out of the page */
      p.v[i].mem = NULL;
      group_add(&g, n);
      have_g = 1;
    }
    if (more && p.n && !stopping(w)) {
      /* the next page starts after the last notification of this one, whose
       * strings live in the page or, when it began the group, in the group */
      note_free(&after);
      have_after = note_copy(&after, &p.v[p.n - 1].n) == 0;
      if (!have_after) {
        broken = 1; /* out of memory: the next round sees the rest again */
        break;
      }
    }
  }
  /* the last group is complete once the range is exhausted */
  if (have_g && !more && !broken && !stopping(w)) {
    did |= batch_take(w, &b, &g);
    have_g = 0;
  }
  if (have_g) note_free(&g.cell);
  if (b.n && !stopping(w)) did |= run_batch(w, &b);
  batch_release(&b);
  free(b.v);
  page_clear(&p);
  free(p.v);
  note_free(&after);
  return did;
}

/* ---- threads -------------------------------------------------------------- */

static int probe_one(void *ctx, const pc_notification_t *n) {
  (void)n;
  *(int *)ctx = 1;
  return 1;
}

/* Whether any notification is there to work on: one scan of every bucket for
 * the first notification (a request per tablet), so that a worker with
 * nothing to do takes no claim. 1 when the store cannot say (a round then
 * finds out). */
static int anything_pending(pc_worker_t *w) {
  int found = 0;
  pc_error_t err;
  pc_status_t st = w->db->store->ops->scan_notify(w->db->store, 0, PC_NOTIFY_BUCKETS, NULL, 1,
                                                  probe_one, &found, &err);
  return st != PC_OK || found;
}

static void *worker_main(void *arg) {
  wthread_t *t = arg;
  pc_worker_t *w = t->w;
  uint32_t *order = malloc(w->nclaims * sizeof *order);
  if (!order) {
    pc_log(PC_LOG_ERROR, "worker: thread %u: out of memory", t->idx);
    return NULL;
  }
  while (!stopping(w)) {
    /* without a lockd session, claims cannot be taken: wait for one */
    if (w->db->ls && pc_ls_client_session(w->db->ls) == 0) {
      nap(w, w->o.idle_ms);
      continue;
    }
    /* look before taking claims: an idle worker costs a scan, not a lock per claim */
    if (!anything_pending(w)) {
      nap(w, w->o.idle_ms);
      continue;
    }
    /* a round: every claim once, in a random order */
    for (uint32_t i = 0; i < w->nclaims; i++) order[i] = i;
    for (uint32_t i = w->nclaims; i > 1; i--) {
      uint32_t j = (uint32_t)(rng_next(&t->rng) % i), x = order[i - 1];
      order[i - 1] = order[j];
      order[j] = x;
    }
    int did = 0;
    for (uint32_t i = 0; i < w->nclaims && !stopping(w); i++) {
      int got = claim_take(t, order[i]);
      if (got < 0) break; /* no session: the round ends here */
      if (got == 0) {
        atomic_fetch_add(&w->claims_busy, 1);
        continue;
      }
      atomic_fetch_add(&w->claims_taken, 1);
      did |= process_claim(w, order[i]);
      claim_release(t, order[i]);
    }
    if (!did) nap(w, w->o.idle_ms);
  }
  free(order);
  if (t->session) {
    pc_error_t err;
    (void)pc_ls_session_close(w->local, t->session, &err);
  }
  return NULL;
}

typedef struct sweep {
  pc_worker_t *w;
  uint64_t resolved, alive;
} sweep_t;

static int sweep_lock(void *ctx, const pc_lock_info_t *lock) {
  sweep_t *s = ctx;
  pc_db_t *db = s->w->db;
  pc_error_t err;
  pc_status_t st = pc_txn_resolve_lock(db, lock, pc_now_mono_ms() + db->opts.timeout_ms, &err);
  if (st == PC_OK) s->resolved++;
  else if (st == PC_LOCKED) s->alive++; /* a live owner: its lease is running */
  else pc_log(PC_LOG_DEBUG, "worker: sweeper: %s", err.text);
  return stopping(s->w);
}

/* Settles every lock older than the lock TTL: a crashed writer's secondaries
 * are rolled forward (their notifications appear) or back. */
static void sweep_once(pc_worker_t *w) {
  pc_db_t *db = w->db;
  uint64_t now;
  pc_error_t err;
  if (pc_db_ts(db, db->opts.timeout_ms, &now, &err) != PC_OK) {
    pc_log(PC_LOG_DEBUG, "worker: sweeper: %s", err.text);
    return;
  }
  uint64_t age = (uint64_t)db->opts.lock_ttl_ms << PC_TS_LOGICAL_BITS;
  if (now <= age) return;
  sweep_t s = {w, 0, 0};
  pc_status_t st = db->store->ops->scan_locks(db->store, now - age, sweep_lock, &s, &err);
  if (st != PC_OK && st != PC_BUSY) /* PC_BUSY: more than one look shows, the rest next time */
    pc_log(PC_LOG_DEBUG, "worker: sweeper: %s", err.text);
  if (s.resolved)
    pc_log(PC_LOG_INFO, "worker: sweeper settled %" PRIu64 " abandoned lock%s", s.resolved,
           s.resolved == 1 ? "" : "s");
}

static void *sweeper_main(void *arg) {
  pc_worker_t *w = arg;
  while (!stopping(w)) {
    nap(w, w->o.sweep_ms);
    if (stopping(w)) break;
    sweep_once(w);
    fail_prune(w);
  }
  return NULL;
}

/* ---- start and stop ------------------------------------------------------- */

typedef struct collect {
  pc_worker_t *w;
  size_t cap;
  int oom;
} collect_t;

static int collect_observer(void *ctx, const pc_observer_t *obs) {
  collect_t *c = ctx;
  pc_worker_t *w = c->w;
  if (w->nslots == c->cap) {
    size_t n = c->cap ? c->cap * 2 : 8;
    obs_slot_t *s = realloc(w->slots, n * sizeof *s);
    if (!s) {
      c->oom = 1;
      return 1;
    }
    w->slots = s;
    c->cap = n;
  }
  obs_slot_t *s = &w->slots[w->nslots++];
  memset(s, 0, sizeof *s);
  s->obs = obs;
  return 0;
}

static int slot_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const obs_slot_t *)a)->obs, y = (uintptr_t)((const obs_slot_t *)b)->obs;
  return x < y ? -1 : x > y;
}

static pc_status_t check_options(const pc_worker_options_t *o, pc_error_t *err) {
  if (o->threads < 1 || o->threads > 256)
    return pc_error_set(err, PC_INVALID, "worker: threads is %u, want 1..256", o->threads);
  if (o->buckets_per_claim < 1 || o->buckets_per_claim > PC_NOTIFY_BUCKETS)
    return pc_error_set(err, PC_INVALID, "worker: buckets_per_claim is %u, want 1..%u",
                        o->buckets_per_claim, PC_NOTIFY_BUCKETS);
  if (o->idle_ms < 1 || o->idle_ms > 600000)
    return pc_error_set(err, PC_INVALID, "worker: idle_ms is %u, want 1..600000", o->idle_ms);
  if (o->max_failures < 1)
    return pc_error_set(err, PC_INVALID, "worker: max_failures is 0, want at least 1");
  if (o->backoff_ms < 1 || o->backoff_ms > 600000)
    return pc_error_set(err, PC_INVALID, "worker: backoff_ms is %u, want 1..600000",
                        o->backoff_ms);
  if (o->sweep_ms > 3600000)
    return pc_error_set(err, PC_INVALID, "worker: sweep_ms is %u, want 0..3600000", o->sweep_ms);
  return PC_OK;
}

/* The db's in-process lock service, created by the first worker. */
static pc_ls_t *shared_local(pc_db_t *db) {
  pthread_mutex_lock(&db->notify_mu);
  if (!db->notify_ls) {
    db->notify_ls = pc_ls_create();
    db->notify_ls_destroy = pc_ls_destroy;
  }
  pc_ls_t *ls = db->notify_ls;
  pthread_mutex_unlock(&db->notify_mu);
  return ls;
}

pc_worker_t *pc_worker_start(pc_db_t *db, pc_observer_registry_t *registry,
                             const pc_worker_options_t *o, pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !registry) {
    pc_error_set(err, PC_INVALID, "worker: %s is NULL", !db ? "database" : "registry");
    return NULL;
  }
  pc_worker_options_t opts;
  pc_worker_options_default(&opts);
  if (o) opts = *o;
  if (check_options(&opts, err) != PC_OK) return NULL;
  pc_worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  w->db = db;
  w->reg = registry;
  w->o = opts;
  w->nclaims = (PC_NOTIFY_BUCKETS + opts.buckets_per_claim - 1) / opts.buckets_per_claim;
  atomic_init(&w->stop, 0);
  pthread_mutex_init(&w->mu, NULL);
  pc_cond_init_mono(&w->cv);
  pthread_mutex_init(&w->fail_mu, NULL);

  collect_t c = {w, 0, 0};
  pc_registry_foreach(registry, collect_observer, &c);
  if (c.oom) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  if (w->nslots == 0) {
    /* a worker without observers would delete every notification it finds */
    pc_error_set(err, PC_INVALID, "worker: no observer is registered");
    goto fail;
  }
  qsort(w->slots, w->nslots, sizeof *w->slots, slot_cmp);
  for (size_t i = 0; i < w->nslots; i++) {
    const pc_observer_t *ob = w->slots[i].obs;
    if (pc_db_register_observed(db, ob->name, ob->table, ob->column, ob->column_len,
                                (int)ob->kind, err) != PC_OK) {
      pc_error_prefix(err, "worker: recording observer '%s'", ob->name);
      goto fail;
    }
  }
  if (!db->store->ops->scan_notify || !db->store->ops->clear_notify) {
    pc_error_set(err, PC_INVALID, "worker: this store keeps no notifications");
    goto fail;
  }
  if (!(w->local = shared_local(db))) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }

  wthread_t *ts = calloc(opts.threads, sizeof *ts);
  w->threads = calloc(opts.threads, sizeof *w->threads);
  if (!ts || !w->threads) {
    free(ts);
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  uint64_t seed = pc_now_mono_ms() ^ (uint64_t)(uintptr_t)w;
  for (uint32_t i = 0; i < opts.threads; i++) {
    ts[i].w = w;
    ts[i].idx = i;
    ts[i].rng = XXH3_64bits_withSeed(&i, sizeof i, seed) | 1;
    if (pthread_create(&w->threads[i], NULL, worker_main, &ts[i]) != 0) {
      pc_error_set(err, PC_INTERNAL, "worker: cannot start thread %u", i);
      atomic_store(&w->stop, 1);
      for (uint32_t j = 0; j < i; j++) pthread_join(w->threads[j], NULL);
      free(ts);
      goto fail;
    }
    w->nthreads++;
  }
  w->threads_ctx = ts;
  if (opts.sweep_ms) {
    if (pthread_create(&w->sweeper, NULL, sweeper_main, w) != 0) {
      pc_error_set(err, PC_INTERNAL, "worker: cannot start the sweeper");
      pc_worker_stop(w);
      return NULL;
    }
    w->sweeper_started = 1;
  }
  return w;

fail:
  w->nthreads = 0;
  pc_worker_stop(w);
  return NULL;
}

void pc_worker_stop(pc_worker_t *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  atomic_store(&w->stop, 1);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  for (size_t i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
  if (w->sweeper_started) pthread_join(w->sweeper, NULL);
  for (size_t b = 0; b < FAIL_BUCKETS; b++) {
    for (fail_entry_t *e = w->fail[b], *next; e; e = next) {
      next = e->next;
      free(e->key);
      free(e);
    }
  }
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->fail_mu);
  free(w->threads_ctx);
  free(w->threads);
  free(w->slots);
  free(w);
}

pc_status_t pc_worker_stats(pc_worker_t *w, pc_worker_stats_t *out, pc_error_t *err) {
  pc_error_clear(err);
  if (!w || !out) return pc_error_set(err, PC_INVALID, "worker stats: NULL argument");
  memset(out, 0, sizeof *out);
  out->observers = calloc(w->nslots ? w->nslots : 1, sizeof *out->observers);
  if (!out->observers) return pc_error_set(err, PC_NOMEM, "out of memory");
  out->nobservers = w->nslots;
  out->notifications_seen = atomic_load(&w->seen);
  out->claims_taken = atomic_load(&w->claims_taken);
  out->claims_busy = atomic_load(&w->claims_busy);
  for (size_t i = 0; i < 13; i++) out->latency_le[i] = atomic_load(&w->lat_le[i]);
  out->latency_sum_ms = (double)atomic_load(&w->lat_sum_ms);
  out->latency_count = atomic_load(&w->lat_count);
  for (size_t i = 0; i < w->nslots; i++) {
    obs_slot_t *s = &w->slots[i];
    pc_observer_stats_t *d = &out->observers[i];
    snprintf(d->name, sizeof d->name, "%s", s->obs->name);
    d->runs = atomic_load(&s->runs);
    d->skipped = atomic_load(&s->skipped);
    d->conflicts = atomic_load(&s->conflicts);
    d->failures = atomic_load(&s->failures);
    d->parked = atomic_load(&s->parked);
  }
  return PC_OK;
}

/* ---- for any client --------------------------------------------------------- */

typedef struct pend {
  char *table, *col; /* col: clen bytes */
  size_t clen;
  uint64_t count;
} pend_t;

typedef struct pending {
  pend_t *v;
  size_t n, cap;
  uint64_t total;
  int oom;
  note_t last; /* where the next page starts */
  size_t in_page;
} pending_t;

static int pend_cmp(const char *t1, const char *c1, size_t l1, const pend_t *b) {
  int r = strcmp(t1, b->table);
  return r ? r : pc_bytes_cmp(c1, l1, b->col, b->clen);
}

static int pending_add(void *ctx, const pc_notification_t *n) {
  pending_t *p = ctx;
  p->total++;
  p->in_page++;
  note_free(&p->last);
  if (note_copy(&p->last, n) != 0) {
    p->oom = 1;
    return 1;
  }
  const pc_cell_t *c = &n->cell;
  size_t lo = 0, hi = p->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int r = pend_cmp(c->table, c->col, c->clen, &p->v[mid]);
    if (r == 0) {
      p->v[mid].count++;
      return 0;
    }
    if (r < 0) hi = mid;
    else lo = mid + 1;
  }
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 16;
    pend_t *v = realloc(p->v, cap * sizeof *v);
    if (!v) {
      p->oom = 1;
      return 1;
    }
    p->v = v;
    p->cap = cap;
  }
  pend_t e = {strdup(c->table), malloc(c->clen ? c->clen : 1), c->clen, 1};
  if (!e.table || !e.col) {
    free(e.table);
    free(e.col);
    p->oom = 1;
    return 1;
  }
  memcpy(e.col, c->col, c->clen);
  memmove(&p->v[lo + 1], &p->v[lo], (p->n - lo) * sizeof *p->v);
  p->v[lo] = e;
  p->n++;
  return 0;
}

pc_status_t pc_notify_pending(pc_db_t *db, uint64_t *total,
                              int (*fn)(void *ctx, const char *table, const char *col, size_t clen,
                                        uint64_t count),
                              void *ctx, pc_error_t *err) {
  pc_error_clear(err);
  if (total) *total = 0;
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  if (!db->store->ops->scan_notify)
    return pc_error_set(err, PC_INVALID, "this store keeps no notifications");
  pending_t p = {0};
  pc_status_t st = PC_OK;
  int first = 1;
  for (;;) {
    p.in_page = 0;
    note_t after = p.last;
    p.last.mem = NULL; /* pending_add replaces it; after keeps the old copy */
    st = db->store->ops->scan_notify(db->store, 0, PC_NOTIFY_BUCKETS, first ? NULL : &after.n,
                                     PAGE, pending_add, &p, err);
    if (p.last.mem == NULL) p.last = after; /* nothing new: keep where we were */
    else note_free(&after);
    first = 0;
    if (st == PC_OK && p.oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
    if (st != PC_OK || p.in_page < PAGE) break;
  }
  if (st == PC_OK && total) *total = p.total;
  for (size_t i = 0; i < p.n; i++) {
    if (st == PC_OK && fn && fn(ctx, p.v[i].table, p.v[i].col, p.v[i].clen, p.v[i].count))
      fn = NULL;
    free(p.v[i].table);
    free(p.v[i].col);
  }
  free(p.v);
  note_free(&p.last);
  return st;
}

/* The first lock or notification met, for the message (the copy may fail:
 * found says it was there). */
typedef struct first_lock {
  int found;
  uint64_t start_ts;
  char name[200];
} first_lock_t;

static int any_lock(void *ctx, const pc_lock_info_t *lock) {
  first_lock_t *f = ctx;
  f->found = 1;
  f->start_ts = lock->start_ts;
  cell_name(lock->ctable.len ? lock->ctable.p : "?", lock->crow.p, lock->crow.len, lock->ccol.p,
            lock->ccol.len, f->name, sizeof f->name);
  return 1;
}

typedef struct first_note {
  int found, weak;
  uint64_t ts;
  char name[200];
} first_note_t;

static int any_note(void *ctx, const pc_notification_t *n) {
  first_note_t *f = ctx;
  const pc_cell_t *c = &n->cell;
  f->found = 1;
  f->weak = n->weak;
  f->ts = n->ts;
  cell_name(c->table, c->row, c->rlen, c->col, c->clen, f->name, sizeof f->name);
  return 1;
}

/* The last timestamp the oracle issued, to anyone. */
static pc_status_t oracle_last(pc_db_t *db, uint32_t timeout_ms, uint64_t *last,
                               pc_error_t *err) {
  if (db->oracle) {
    *last = pc_oracle_last(db->oracle);
    return PC_OK;
  }
  if (db->tso) return pc_tso_remote_info(db->tso, timeout_ms, last, err);
  return pc_error_set(err, PC_INVALID, "wait: the database has no timestamp oracle to ask");
}

/* One look (see pc_notify_wait). PC_OK when idle, PC_BUSY with why's text
 * saying what is still going on, or an error. */
static pc_status_t idle_once(pc_db_t *db, uint32_t timeout_ms, pc_error_t *why, pc_error_t *err) {
  uint64_t before, last;
  pc_status_t st = pc_db_ts(db, timeout_ms, &before, err);
  if (st != PC_OK) return st;
  first_lock_t lock = {0};
  st = db->store->ops->scan_locks(db->store, UINT64_MAX, any_lock, &lock, err);
  if (st == PC_BUSY) { /* more locks than one reply carries */
    pc_error_clear(err);
    return pc_error_set(why, PC_BUSY, "locks are held");
  }
  if (st != PC_OK) return st;
  if (lock.found)
    return pc_error_set(why, PC_BUSY, "%s is locked by transaction %" PRIu64, lock.name,
                        lock.start_ts);
  first_note_t note = {0};
  st = db->store->ops->scan_notify(db->store, 0, PC_NOTIFY_BUCKETS, NULL, 1, any_note, &note, err);
  if (st != PC_OK) return st;
  if (note.found)
    return pc_error_set(why, PC_BUSY, "%s has a notification (%s, %" PRIu64 ")", note.name,
                        note.weak ? "weak" : "strong", note.ts);
  if ((st = PC_FAILPOINT("worker.wait_scanned", err)) != PC_OK) return st;
  if ((st = oracle_last(db, timeout_ms, &last, err)) != PC_OK) return st;
  if (last != before)
    return pc_error_set(why, PC_BUSY, "timestamps were issued during the check (%" PRIu64
                        " after %" PRIu64 ")", last, before);
  return PC_OK;
}

/* What a successful wait guarantees (the order of the steps matters):
 *   1. before = a fresh timestamp;
 *   2. no lock anywhere (scan_locks);
 *   3. no notification anywhere (a full scan_notify);
 *   4. the oracle's last issued timestamp is still `before`: nobody, this
 *      client included, took a timestamp during steps 2 and 3. This asks the
 *      oracle what it issued (pc_oracle_last, or the daemon's INFO) rather
 *      than taking a second timestamp and comparing, because a hybrid oracle
 *      jumps to the clock when the millisecond changes: "the next timestamp
 *      is before + 1" would fail whenever the check spans a millisecond. A
 *      batcher's fetch that handed `before` to this thread and others their
 *      timestamps fails it too (conservative).
 * Then every transaction whose locks were all written before step 2 has had
 * its notifications processed: a lock present at step 2 fails the check; a
 * transaction committed before it left its notifications, which step 3
 * finds unless an observer transaction has consumed them; such an observer
 * commits before deleting the notification (found at 3 if it had not yet),
 * and its commit takes a commit_ts, which step 4 sees unless it came before
 * step 1, in which case its own notifications and locks were there for steps
 * 2 and 3 to find, and so on down the chain. Not covered: a transaction that
 * took its start_ts before step 1 and writes its first lock after step 2 —
 * it is still running, and commits after the wait returns. */
pc_status_t pc_notify_wait(pc_db_t *db, uint32_t timeout_ms, pc_error_t *err) {
  pc_error_clear(err);
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  if (!db->store->ops->scan_notify)
    return pc_error_set(err, PC_INVALID, "this store keeps no notifications");
  uint64_t deadline = pc_now_mono_ms() + timeout_ms;
  uint32_t pause = 2;
  pc_error_t why, failed; /* the last "still busy", the last check that could not finish */
  pc_error_clear(&why);
  pc_error_clear(&failed);
  for (;;) {
    uint64_t now = pc_now_mono_ms();
    uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
    pc_error_t e;
    pc_status_t st = idle_once(db, (uint32_t)min_u64(left, db->opts.timeout_ms), &why, &e);
    if (st == PC_OK) return PC_OK;
    if (st != PC_BUSY && st != PC_TIMEOUT && st != PC_UNAVAILABLE) {
      if (err) *err = e;
      return st;
    }
    if (st == PC_BUSY) pc_error_clear(&failed);
    else failed = e; /* a daemon did not answer: try again while time is left */
    now = pc_now_mono_ms();
    if (now >= deadline)
      return pc_error_set(err, PC_TIMEOUT, "wait: not idle after %u ms: %s%s%s", timeout_ms,
                          why.text[0] ? why.text : failed.text,
                          why.text[0] && failed.text[0] ? "; the last check failed: " : "",
                          why.text[0] ? failed.text : "");
    pc_sleep_ms((uint32_t)min_u64(pause, deadline - now));
    pause = pause * 2 > 100 ? 100 : pause * 2;
  }
}

/* ---- parked notifications ---------------------------------------------------- */

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
  for (int attempt = 0; attempt < RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(db, err);
    if (!t) return err ? err->code : PC_INTERNAL;
    st = PC_OK;
    if (!q->weak) {
      pc_buf_t mark = {0};
      if (retry_column(&mark, q->observer.p, c.col, c.clen) != 0)
        st = pc_error_set(err, PC_NOMEM, "out of memory");
      else
        st = write_ts(t, &c, &mark, q->ts, err);
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
