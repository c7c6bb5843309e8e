/* gc.c — the database's background work and garbage collection.
 *
 * Two threads per database handle:
 *   - the lease thread, the heartbeat alone: every third of lock_ttl_ms it
 *     renews the lease of the primary lock of each transaction of this
 *     process that is committing (store.h's heartbeat), so that a live
 *     owner's transaction is never rolled back for being slow; a dead
 *     process renews nothing, and its locks expire lock_ttl_ms after their
 *     last renewal. It has a thread of its own because a renewal that waits
 *     behind a garbage-collection pass or a slow refresh comes too late;
 *   - the background thread: embedded, a garbage-collection pass every
 *     gc_interval_ms (pc_db_gc); a served directory's client, the report of
 *     its snapshots' floor to the oracle every report_ms (db->report).
 *
 * A pass first finds the safe point: a fresh timestamp, lowered to the
 * start_ts of every open transaction of this process (db.c's list). In a
 * cluster it is also bounded by what other clients may read (gc_bound:
 * cluster_gc_bound in tablet/db_cluster.c). It then settles every lock older
 * than the safe point (their transactions are over: roll forward or back,
 * by the primary), since a lock's resolution asks for its primary's commit
 * record, which the pass may delete; a lock still owned by a live
 * transaction lowers the safe point to below it instead. Last, the store
 * deletes what no snapshot at or above the safe point can read (store_gc.c).
 * In a cluster each tablet first checks that the pass may set the safe
 * point (the system identity, at or below the oracle's timestamps) and
 * publishes it in ZooKeeper before it deletes below it (tablet.c): the
 * client never publishes, so a client the tablets refuse moves nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "core/db.h"
#include "base/error.h"
#include "core/failpoint.h"

/* ---- the heartbeat ------------------------------------------------------ */

typedef struct beat {
  pc_buf_t table, row, col;
  uint64_t start_ts;
  uint32_t ttl_ms;
} beat_t;

/* Renews the leases of committing transactions that began over a third of
 * a TTL ago. The cells are copied under open_mu, the requests made outside. */
static void heartbeat(pc_db_t *db) {
  uint64_t now = pc_now_mono_ms(), period = db->opts.lock_ttl_ms / 3 + 1;
  beat_t *beats = NULL;
  size_t n = 0, cap = 0;
  pthread_mutex_lock(&db->open_mu);
  for (pc_open_txn_t *e = db->open.next; e != &db->open; e = e->next) {
    if (!e->primary || now - e->start_mono_ms < period) continue;
    if (n == cap) {
      size_t c2 = cap ? cap * 2 : 8;
      beat_t *p = realloc(beats, c2 * sizeof *p);
      if (!p) break;
      beats = p;
      cap = c2;
    }
    beat_t *b = &beats[n];
    memset(b, 0, sizeof *b);
    const pc_cell_t *c = e->primary;
    if (pc_buf_append(&b->table, c->table, strlen(c->table) + 1) ||
        pc_buf_append(&b->row, c->row, c->rlen) || pc_buf_append(&b->col, c->col, c->clen)) {
      pc_buf_free(&b->table);
      pc_buf_free(&b->row);
      pc_buf_free(&b->col);
      break;
    }
    b->start_ts = atomic_load(&e->ts);
    b->ttl_ms = pc_db_lock_ttl(db, e);
    n++;
  }
  pthread_mutex_unlock(&db->open_mu);
  for (size_t i = 0; i < n; i++) {
    beat_t *b = &beats[i];
    pc_cell_t c = {b->table.p, b->row.p, b->row.len, b->col.p, b->col.len};
    pc_error_t ignored; /* a lock already gone: the transaction has moved on */
    (void)db->store->ops->heartbeat(db->store, &c, b->start_ts, b->ttl_ms, &ignored);
    pc_buf_free(&b->table);
    pc_buf_free(&b->row);
    pc_buf_free(&b->col);
  }
  free(beats);
}

/* ---- garbage collection ------------------------------------------------- */

typedef struct settle {
  pc_db_t *db;
  uint64_t oldest_live; /* the oldest lock still owned by a live transaction */
  uint64_t resolved, left;
  pc_status_t st;
  pc_error_t err;
} settle_t;

static int settle_lock(void *ctx, const pc_lock_info_t *lock) {
  settle_t *s = ctx;
  pc_error_t e;
  pc_status_t st = pc_txn_resolve_lock(s->db, lock, pc_now_mono_ms() + s->db->opts.timeout_ms, &e);
  if (st == PC_OK) {
    s->resolved++;
    return 0;
  }
  if (st == PC_LOCKED) { /* a live owner: collect below its lock only */
    s->left++;
    if (lock->start_ts < s->oldest_live) s->oldest_live = lock->start_ts;
    return 0;
  }
  s->st = st;
  s->err = e;
  return 1;
}

pc_status_t pc_db_gc(pc_db_t *db, pc_gc_stats_t *stats, pc_error_t *err) {
  pc_error_clear(err);
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  uint64_t now, safe;
  pc_status_t st = pc_db_ts(db, db->opts.timeout_ms, &now, err);
  if (st != PC_OK) return st;
  if ((st = PC_FAILPOINT("gc.timestamp_taken", err)) != PC_OK) return st;
  atomic_store(&db->ts_floor, now);
  safe = db->gc_bound ? db->gc_bound(db, now) : now;
  pthread_mutex_lock(&db->open_mu);
  for (pc_open_txn_t *e = db->open.next; e != &db->open; e = e->next) {
    uint64_t t = atomic_load(&e->ts);
    if (t < safe) safe = t;
  }
  pthread_mutex_unlock(&db->open_mu);

  pthread_mutex_lock(&db->gc_mu);
  pc_gc_stats_t out = {0};
  settle_t s = {db, safe, 0, 0, PC_OK, {PC_OK, ""}};
  st = db->store->ops->scan_locks(db->store, safe, settle_lock, &s, err);
  if (st == PC_BUSY) { /* more old locks than one look shows: settle the rest next pass */
    pc_error_clear(err);
    st = PC_OK;
    s.left++;
    s.oldest_live = 1;
  }
  if (st == PC_OK && s.st != PC_OK) {
    st = s.st;
    if (err) *err = s.err;
    pc_error_prefix(err, "gc: settling an old lock");
  }
  /* a lock at ts asks about its primary's commit after ts: keep those */
  if (s.oldest_live < safe) safe = s.oldest_live - 1;
  out.safe_point = safe;
  out.locks_resolved = s.resolved;
  out.locks_left = s.left;
  if (st == PC_OK && safe > 0) {
    pc_store_gc_stats_t g;
    st = db->store->ops->gc(db->store, safe, db->opts.gc_rate, &g, err);
    out.cells = g.cells;
    out.versions = g.versions;
    out.rollbacks = g.rollbacks;
    out.data = g.data;
  }
  if (st == PC_OK) {
    db->gc_last = out;
    db->gc_passes++;
  }
  pthread_mutex_unlock(&db->gc_mu);
  if (stats) *stats = out;
  return st;
}

/* ---- the thread --------------------------------------------------------- */

/* Sleeps ms or until the handle closes; 0 once it closes. */
static int bg_wait(pc_db_t *db, uint32_t ms) {
  pthread_mutex_lock(&db->bg_mu);
  if (!db->bg_stop) {
    struct timespec until = pc_mono_after_ms(ms);
    pthread_cond_timedwait(&db->bg_cv, &db->bg_mu, &until);
  }
  int go = !db->bg_stop;
  pthread_mutex_unlock(&db->bg_mu);
  return go;
}

static void *lease_main(void *arg) {
  pc_db_t *db = arg;
  uint32_t beat_ms = db->opts.lock_ttl_ms / 3 + 1;
  do heartbeat(db);
  while (bg_wait(db, beat_ms));
  return NULL;
}

static void *background_main(void *arg) {
  pc_db_t *db = arg;
  pthread_mutex_lock(&db->bg_mu);
  while (!db->bg_stop) {
    pthread_mutex_unlock(&db->bg_mu);
    uint64_t now = pc_now_mono_ms();
    if (db->report && now >= db->next_report_ms) {
      db->report(db);
      db->next_report_ms = pc_now_mono_ms() + db->report_ms;
    }
    if (db->opts.gc_interval_ms && db->oracle && now >= db->next_gc_ms) {
      pc_error_t ignored; /* the next pass tries again; pc_db_gc reports errors */
      (void)pc_db_gc(db, NULL, &ignored);
      db->next_gc_ms = pc_now_mono_ms() + db->opts.gc_interval_ms;
    }
    uint64_t wait_ms = db->opts.gc_interval_ms ? db->opts.gc_interval_ms : 1000;
    now = pc_now_mono_ms();
    if (db->opts.gc_interval_ms && db->oracle && db->next_gc_ms > now &&
        db->next_gc_ms - now < wait_ms)
      wait_ms = db->next_gc_ms - now;
    if (db->report) {
      uint64_t until = db->next_report_ms > now ? db->next_report_ms - now : 0;
      if (until < wait_ms) wait_ms = until;
    }
    pthread_mutex_lock(&db->bg_mu);
    if (!db->bg_stop) {
      struct timespec until = pc_mono_after_ms((uint32_t)wait_ms + 1);
      pthread_cond_timedwait(&db->bg_cv, &db->bg_mu, &until);
    }
  }
  pthread_mutex_unlock(&db->bg_mu);
  return NULL;
}

pc_status_t pc_db_start_background(pc_db_t *db, pc_error_t *err) {
  /* the first lower bound an open transaction holds while it takes its
   * start_ts: a timestamp taken now, before any transaction of this handle
   * (an oracle that does not answer leaves 0, which only holds GC back) */
  uint64_t floor;
  pc_error_t ignored;
  if (pc_db_ts(db, db->opts.timeout_ms < 1000 ? db->opts.timeout_ms : 1000, &floor, &ignored) ==
      PC_OK)
    atomic_store(&db->ts_floor, floor);
  db->next_gc_ms = pc_now_mono_ms() + db->opts.gc_interval_ms;
  if (pthread_create(&db->lease_thread, NULL, lease_main, db) != 0)
    return pc_error_set(err, PC_INTERNAL, "cannot start the database's lease thread");
  db->lease_running = 1;
  if (pthread_create(&db->bg_thread, NULL, background_main, db) != 0) {
    pc_db_stop_background(db);
    return pc_error_set(err, PC_INTERNAL, "cannot start the database's background thread");
  }
  db->bg_running = 1;
  return PC_OK;
}

void pc_db_stop_background(pc_db_t *db) {
  if (!db->bg_running && !db->lease_running) return;
  pthread_mutex_lock(&db->bg_mu);
  db->bg_stop = 1;
  pthread_cond_broadcast(&db->bg_cv);
  pthread_mutex_unlock(&db->bg_mu);
  if (db->bg_running) pthread_join(db->bg_thread, NULL);
  if (db->lease_running) pthread_join(db->lease_thread, NULL);
  db->bg_running = db->lease_running = 0;
}
