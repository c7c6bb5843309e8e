/* store_gc.c — garbage collection of the embedded store (and of each
 * tablet, which runs the same pass on its own LevelDB).
 *
 * Below a safe point S that no reader's snapshot lies under, a cell needs
 * only its versions newer than S and the newest one at or below S: a read at
 * any ts >= S finds what it found before. The pass walks the commit records
 * ('w' keys, newest first within a cell) of a LevelDB snapshot and deletes,
 * for each cell:
 *   - every put or delete record older than the newest one at or below S,
 *     with its data cell when the value was too large to inline;
 *   - that newest one too when it is a delete (nothing older survives it);
 *   - rollback records at or below S, and the value-less records that a
 *     weak notification leaves on its transaction's primary (counted with
 *     the rollbacks; they too only decide a transaction that is over).
 * A cell's head (its newest commit) lives in its meta record, which the
 * pass never touches (a store of format 3 also has a record of it, which is
 * kept), so the head survives, and latest_any, which makes delayed
 * prewrites fail, never moves back.
 *
 * Rollback records exist so that a delayed prewrite or commit of a
 * rolled-back transaction fails; below S that transaction is over (the
 * caller settled every lock below S) and latest_any already makes its
 * prewrite conflict, and a commit finds neither lock nor record: aborted. A
 * multi-row transaction's commit record on its primary is what its
 * secondaries' locks ask about; the caller resolves every lock with
 * start_ts < S before the pass, and a commit at or below S belongs to such a
 * transaction.
 *
 * Before it deletes anything, the pass records S under the key 'g' (synced)
 * and in memory: a tablet refuses reads below it from then on, across
 * restarts (gc_safe_point).
 *
 * The pass takes no latch: it deletes only keys it saw in its snapshot. The
 * only commit record a writer writes for an older commit is the replaced
 * head's, written with the new head in one batch; a snapshot that holds the
 * old head has no record of it to delete (or, in a format 3 store, one the
 * pass keeps), and one that holds the new head finds it newest at or below
 * the safe point or older than the version that is. Its deletes are not
 * synced (a lost delete is redone by the next pass). It never blocks
 * readers or writers; rate bounds the keys it deletes per second. A pass
 * whose caller gave up (its deadline, or an abandoned request:
 * base/deadline.h) stops between two records with PC_TIMEOUT, keeping what
 * it deleted: every delete stands on its own, and the next pass starts over.
 */
#include <stdlib.h>
#include <string.h>

#include "base/deadline.h"
#include "base/error.h"
#include "core/store_local.h"

#define GC_BATCH 512u

typedef struct gc_pass {
  local_t *s;
  const leveldb_readoptions_t *ro;
  leveldb_writebatch_t *b;
  size_t pending; /* deletes in b */
  uint32_t rate;
  uint64_t started_ms, deleted;
  pc_store_gc_stats_t *stats;
} gc_pass_t;

static pc_status_t flush(gc_pass_t *g, pc_error_t *err) {
  if (g->pending == 0) return PC_OK;
  /* through the log on a replicated tablet, so that its replicas delete the same */
  pc_status_t st = local_commit_batch(g->s, g->b, NULL, g->s->gc_wopts, err);
  leveldb_writebatch_clear(g->b);
  g->deleted += g->pending;
  g->pending = 0;
  if (st != PC_OK) return st;
  if (g->rate) { /* sleep until the deletes so far fit the rate (at most 1 s) */
    uint64_t now = pc_now_mono_ms();
    uint64_t due = g->started_ms + g->deleted * 1000u / g->rate;
    if (due > now + 1000) due = now + 1000;
    for (; due > now; now = pc_now_mono_ms()) { /* in slices: a stop is seen within one */
      if ((st = pc_call_check("garbage collection", err)) != PC_OK) return st;
      pc_sleep_ms((uint32_t)(due - now > 100 ? 100 : due - now));
    }
  }
  return PC_OK;
}

static pc_status_t del(gc_pass_t *g, const char *k, size_t kl, pc_error_t *err) {
  leveldb_writebatch_delete(g->b, k, kl);
  return ++g->pending >= GC_BATCH ? flush(g, err) : PC_OK;
}

/* The commit_ts of cell's head in the pass's snapshot; 0 when it has none. */
static pc_status_t head_of(gc_pass_t *g, const pc_key_decoded_t *d, uint64_t *head,
                           pc_error_t *err) {
  pc_cell_t c = {d->table.p, d->row.p, d->row.len, d->col.p, d->col.len};
  pc_buf_t key = {0};
  *head = 0;
  if (pc_key_cell(&key, PC_KS_META, &c) != 0) return local_nomem(err);
  char *e = NULL;
  size_t ml = 0;
  char *mv = leveldb_get(g->s->db, g->ro, key.p, key.len, &ml, &e);
  pc_buf_free(&key);
  if (e) return local_ldb_error(g->s, e, "gc read meta", err);
  if (!mv) return PC_OK;
  int has_lock, has_head;
  uint64_t lock_start;
  pc_write_rec_t h;
  int bad = pc_meta_peek(mv, ml, &has_lock, &lock_start, &has_head, &h);
  leveldb_free(mv);
  if (bad) return pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", g->s->path);
  if (has_head) *head = h.commit_ts;
  return PC_OK;
}

uint64_t local_gc_safe_point(pc_store_t *base) {
  return atomic_load(&((local_t *)base)->gc_safe);
}

pc_status_t local_gc_load(local_t *s, pc_error_t *err) {
  const char key = PC_KS_GC;
  char *e = NULL;
  size_t n = 0;
  char *v = leveldb_get(s->db, s->ropts, &key, 1, &n, &e);
  if (e) return local_ldb_error(s, e, "read the gc safe point", err);
  if (!v) return PC_OK;
  pc_rd_t r = {v, n, 0, 1};
  uint64_t safe = pc_rd_u64(&r);
  int ok = r.ok && r.pos == n;
  leveldb_free(v);
  if (!ok) return pc_error_set(err, PC_CORRUPTION, "store %s: malformed gc safe point", s->path);
  atomic_store(&s->gc_safe, safe);
  return PC_OK;
}

/* Records safe_point before the pass deletes below it: persisted (synced),
 * then published. It never moves back. */
static pc_status_t publish_safe_point(local_t *s, uint64_t safe_point, pc_error_t *err) {
  if (safe_point <= atomic_load(&s->gc_safe)) return PC_OK;
  pc_buf_t v = {0};
  if (pc_buf_u64(&v, safe_point) != 0) return local_nomem(err);
  const char key = PC_KS_GC;
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  leveldb_writebatch_put(b, &key, 1, v.p, v.len);
  pc_status_t st = local_commit_batch(s, b, NULL, s->sync_wopts, err);
  leveldb_writebatch_destroy(b);
  pc_buf_free(&v);
  if (st != PC_OK) {
    pc_error_prefix(err, "write the gc safe point");
    return st;
  }
  uint64_t prev = atomic_load(&s->gc_safe);
  while (prev < safe_point && !atomic_compare_exchange_weak(&s->gc_safe, &prev, safe_point)) {
  }
  return PC_OK;
}

pc_status_t pc_local_store_raise_gc_safe_point(pc_store_t *base, uint64_t safe, pc_error_t *err) {
  return publish_safe_point((local_t *)base, safe, err);
}

pc_status_t local_gc(pc_store_t *base, uint64_t safe_point, uint32_t rate,
                     pc_store_gc_stats_t *stats, pc_error_t *err) {
  local_t *s = (local_t *)base;
  memset(stats, 0, sizeof *stats);
  pc_status_t pst = publish_safe_point(s, safe_point, err);
  if (pst != PC_OK) return pst;
  const leveldb_snapshot_t *snap = leveldb_create_snapshot(s->db);
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_snapshot(ro, snap);
  leveldb_readoptions_set_fill_cache(ro, 0);
  gc_pass_t g = {s, ro, leveldb_writebatch_create(), 0, rate, pc_now_mono_ms(), 0, stats};
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  pc_buf_t cell = {0}, dk = {0}; /* the current cell's 'w' prefix; a data key */
  pc_key_decoded_t d = {0};
  uint64_t head = 0;
  int kept = 0;      /* the current cell's newest version at or below the safe point is behind us */
  int head_read = 0; /* head holds the current cell's head */
  pc_status_t st = PC_OK;
  unsigned steps = 0;
  const char space = PC_KS_WRITE;
  for (leveldb_iter_seek(it, &space, 1); leveldb_iter_valid(it) && st == PC_OK;
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (k[0] != PC_KS_WRITE) break;
    if ((st = local_step(s, ++steps, "garbage collection", err)) != PC_OK) break;
    if (kl < 9) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write key", s->path);
      break;
    }
    pc_rd_t r = {k + kl - 8, 8, 0, 1};
    uint64_t ts = ~pc_rd_u64(&r);
    if (cell.len != kl - 8 || memcmp(cell.p, k, kl - 8) != 0) { /* a new cell */
      cell.len = 0;
      if (pc_buf_append(&cell, k, kl - 8) != 0) {
        st = local_nomem(err);
        break;
      }
      stats->cells++;
      kept = 0;
      head = 0;
      head_read = 0;
    }
    if (ts > safe_point) continue;
    if (!head_read) { /* the cell's first record at or below the safe point: learn its head */
      if (pc_key_decode(k, kl, &d) != 0) {
        st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write key", s->path);
        break;
      }
      if ((st = head_of(&g, &d, &head, err)) != PC_OK) break;
      head_read = 1;
      /* a head at or below the safe point is the version snapshots there
       * read, and it has no record: every older version goes */
      if (head && head <= safe_point) kept = 1;
    }
    if (ts == head) continue; /* a format 3 store's record of the head: kept */
    pc_write_rec_t w;
    const char *v = leveldb_iter_value(it, &vl);
    if (pc_write_decode(v, vl, &w) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", s->path);
      break;
    }
    if (w.kind == PC_WRITE_ROLLBACK || w.kind == PC_WRITE_NOTIFY) { /* records without a value */
      stats->rollbacks++;
      st = del(&g, k, kl, err);
      continue;
    }
    if (!kept) {
      kept = 1;
      /* the version snapshots at the safe point read: kept, unless it is a
       * delete, which reads the same as no version at all */
      if (w.kind == PC_WRITE_PUT) continue;
    }
    if (w.kind == PC_WRITE_PUT && w.has_inline == PC_VALUE_IN_DATA) {
      if (pc_key_decode(k, kl, &d) != 0) {
        st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write key", s->path);
        break;
      }
      pc_cell_t c = {d.table.p, d.row.p, d.row.len, d.col.p, d.col.len};
      dk.len = 0;
      if (pc_key_cell_ts(&dk, PC_KS_DATA, &c, w.start_ts) != 0) {
        st = local_nomem(err);
        break;
      }
      stats->data++;
      if ((st = del(&g, dk.p, dk.len, err)) != PC_OK) break;
    }
    stats->versions++;
    st = del(&g, k, kl, err);
  }
  if (st == PC_OK) {
    char *e = NULL;
    leveldb_iter_get_error(it, &e);
    if (e) st = local_ldb_error(s, e, "gc scan", err);
  }
  if (st == PC_OK) st = flush(&g, err);
  leveldb_iter_destroy(it);
  leveldb_writebatch_destroy(g.b);
  leveldb_readoptions_destroy(ro);
  leveldb_release_snapshot(s->db, snap);
  pc_key_decoded_free(&d);
  pc_buf_free(&cell);
  pc_buf_free(&dk);
  return st;
}
