/* store_local.c — the embedded store: the operations of store.h on one
 * LevelDB in this process. This file opens and closes it and holds what
 * every row operation shares: row latches, the frame of an operation, and
 * writing its batch. The operations live in store_read.c, store_txn.c,
 * store_raw.c, store_notify.c and store_gc.c (see store_local.h).
 *
 * Single-row atomicity: a row operation takes the latches of its
 * rows (striped mutexes, acquired in stripe order), reads the meta records it
 * must check, and applies every change in one LevelDB WriteBatch. Reads take
 * no latch: LevelDB applies a WriteBatch atomically for readers. With sync on,
 * concurrent writers share fsyncs through LevelDB's own group commit (its
 * writer queue folds waiting batches into one log write).
 */
#include "core/store_local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/deadline.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "base/log.h"

/* ---- helpers ---------------------------------------------------------- */

__attribute__((cold)) pc_status_t local_ldb_error(local_t *s, char *msg, const char *what,
                                                  pc_error_t *err) {
  pc_status_t code = PC_IO_ERROR;
  if (strncmp(msg, "Corruption", 10) == 0)
    code = PC_CORRUPTION;
  else if (strstr(msg, "IO error: lock ") || strstr(msg, "already held by process"))
    code = PC_BUSY;
  else if (strncmp(msg, "Invalid argument", 16) == 0)
    code = PC_INVALID;
  pc_error_set(err, code, "store %s: %s: %s", s->path, what, msg);
  leveldb_free(msg);
  return code;
}

pc_status_t local_nomem(pc_error_t *err) {
  return pc_error_set(err, PC_NOMEM, "store: out of memory");
}

/* Only the row key is hashed: equal row keys of two tables share a stripe,
 * which costs nothing but an occasional wait. */
uint32_t local_stripe(const pc_cell_t *c) {
  return (uint32_t)(XXH3_64bits(c->row, c->rlen) & (PC_LATCHES - 1));
}

int local_wait_onepc(local_t *s, uint32_t i, uint64_t read_ts) {
  uint64_t m = atomic_load_explicit(&s->onepc[i], memory_order_acquire);
  if (m != 0 && m <= read_ts) {
    if (pc_nowait_refuse()) return 1; /* the commit holds the latch across a sync */
    pthread_mutex_lock(&s->latch[i]);
    pthread_mutex_unlock(&s->latch[i]);
  }
  return 0;
}

static int cell_ptr_cmp(const void *x, const void *y) {
  const pc_cell_t *a = *(const pc_cell_t *const *)x, *b = *(const pc_cell_t *const *)y;
  int c = strcmp(a->table, b->table);
  if (!c) c = pc_bytes_cmp(a->row, a->rlen, b->row, b->rlen);
  if (!c) c = pc_bytes_cmp(a->col, a->clen, b->col, b->clen);
  return c;
}

/* A tablet gets requests from the network, so this holds for any size:
 * small requests are compared pairwise, large ones sorted. */
int local_cells_distinct(const pc_cell_t *cells, size_t stride, size_t n) {
#define CELL_AT(i) ((const pc_cell_t *)((const char *)cells + (i) * stride))
  if (n <= 16) {
    for (size_t i = 0; i < n; i++)
      for (size_t j = i + 1; j < n; j++) {
        const pc_cell_t *a = CELL_AT(i), *b = CELL_AT(j);
        if (cell_ptr_cmp(&a, &b) == 0) return 0;
      }
    return 1;
  }
  const pc_cell_t **v = malloc(n * sizeof *v);
  if (!v) return -1;
  for (size_t i = 0; i < n; i++) v[i] = CELL_AT(i);
#undef CELL_AT
  qsort(v, n, sizeof *v, cell_ptr_cmp);
  int distinct = 1;
  for (size_t i = 1; i < n && distinct; i++) distinct = cell_ptr_cmp(&v[i - 1], &v[i]) != 0;
  free(v);
  return distinct;
}

pc_status_t local_read_meta(local_t *s, const pc_cell_t *c, pc_buf_t *key, pc_meta_t *m,
                            int *found, pc_error_t *err) {
  key->len = 0;
  if (pc_key_cell(key, PC_KS_META, c) != 0) return local_nomem(err);
  pc_meta_free(m);
  memset(m, 0, sizeof *m);
  int bad;
  char cstore[512];
  pc_buf_t cached = PC_BUF_ON(cstore);
  if (s->mcache && pc_mcache_get(s->mcache, key->p, key->len, &cached, found)) {
    bad = *found ? pc_meta_decode(cached.p, cached.len, m) : 0;
    pc_buf_free(&cached);
  } else {
    pc_buf_free(&cached);
    char *e = NULL;
    size_t vlen = 0;
    char *v = leveldb_get(s->db, s->ropts, key->p, key->len, &vlen, &e);
    if (e) return local_ldb_error(s, e, "read meta", err);
    /* the caller holds the cell's latch: no write can slip in between */
    if (s->mcache) pc_mcache_put(s->mcache, key->p, key->len, v, vlen, v != NULL);
    *found = v != NULL;
    if (!v) return PC_OK;
    bad = pc_meta_decode(v, vlen, m);
    leveldb_free(v);
  }
  if (bad) {
    char name[160];
    return pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record of %s", s->path,
                        pc_cell_str(c, name, sizeof name));
  }
  return PC_OK;
}

pc_status_t local_put_meta(leveldb_writebatch_t *b, const pc_buf_t *key, pc_meta_t *m,
                           pc_buf_t *scratch, pc_buf_t *locks, pc_error_t *err) {
  scratch->len = 0;
  if (pc_meta_encode(m, scratch) != 0) return local_nomem(err);
  leveldb_writebatch_put(b, key->p, key->len, scratch->p, scratch->len);
  if (m->has_lock != m->had_lock) { /* the lock index follows, with the batch */
    size_t at = locks->len;
    if (pc_buf_u8(locks, m->has_lock ? '+' : '-') != 0 ||
        pc_buf_str(locks, key->p, key->len) != 0) {
      locks->len = at;
      return local_nomem(err);
    }
    locks->p[at + 1 + 4] = PC_KS_LOCK; /* the key's space: 'l' for 'm' */
    m->had_lock = m->has_lock;
  }
  return PC_OK;
}

pc_status_t local_put_write(leveldb_writebatch_t *b, const pc_cell_t *c, uint64_t ts,
                            const pc_write_rec_t *w, pc_buf_t *kb, pc_buf_t *vb,
                            pc_error_t *err) {
  kb->len = vb->len = 0;
  if (pc_key_cell_ts(kb, PC_KS_WRITE, c, ts) != 0 || pc_write_encode(w, vb) != 0)
    return local_nomem(err);
  leveldb_writebatch_put(b, kb->p, kb->len, vb->p, vb->len);
  return PC_OK;
}

/* The meta cache follows each batch: what was written, or, when the write
 * failed and its effect is unknown, nothing. The notification index gets a
 * batch's notifications before it is written and loses its deleted ones
 * after it was (notifyindex.h: a superset of the live ones); the lock
 * index the same with the batch's list of locks taken and released. */
typedef struct cache_sync {
  local_t *s;
  int written, oom;
  int from_log;  /* applied from a replicated tablet's log */
  int observers; /* the batch changed an 'o' key */
} cache_sync_t;

static void index_put(void *ctx, const char *k, size_t klen, const char *v, size_t vlen) {
  cache_sync_t *cs = ctx;
  if (klen && k[0] == PC_KS_NOTIFY && !cs->oom &&
      pc_nindex_put(cs->s->nindex, k, klen, vlen == 1 ? v[0] : (char)0xFF) != 0)
    cs->oom = 1;
}

/* A batch's deletes leave the index only once it is written (cache_sync_del);
 * leveldb_writebatch_iterate wants both callbacks. */
static void index_del(void *ctx, const char *k, size_t klen) {
  (void)ctx;
  (void)k;
  (void)klen;
}

/* Applies the entries of locks that are of kind op ('+' or '-') to
 * s->lindex; -1 when an insertion ran out of memory. A row operation's cells
 * are distinct (local_rowop_begin), so a key appears in its list once and
 * the order of the two passes cannot drop a lock its batch takes. */
static int lock_index_follow(local_t *s, const pc_buf_t *locks, char op) {
  pc_rd_t r = {locks->p, locks->len, 0, 1};
  while (r.ok && r.pos < r.len) {
    char kind = (char)pc_rd_u8(&r);
    size_t kl;
    const char *k = pc_rd_str(&r, &kl);
    if (!r.ok || kind != op) continue;
    if (op == '-') pc_nindex_del(s->lindex, k, kl);
    else if (pc_nindex_put(s->lindex, k, kl, 0) != 0) return -1;
  }
  return 0;
}

/* The one-byte key 'g' (the safe point) and the 'o' keys (the observers)
 * have state in memory that follows them on every replica of a tablet. */
static void special_put(cache_sync_t *cs, const char *k, size_t klen, const char *v, size_t vlen) {
  if (klen == 1 && k[0] == PC_KS_GC && vlen == 8) {
    pc_rd_t r = {v, vlen, 0, 1};
    uint64_t safe = pc_rd_u64(&r), prev = atomic_load(&cs->s->gc_safe);
    while (prev < safe && !atomic_compare_exchange_weak(&cs->s->gc_safe, &prev, safe)) {
    }
  } else if (klen >= 1 && k[0] == PC_KS_OBSERVER && cs->from_log) {
    cs->observers = 1;
  }
}

static void cache_sync_put(void *ctx, const char *k, size_t klen, const char *v, size_t vlen) {
  cache_sync_t *cs = ctx;
  if (cs->written && klen && k[0] != PC_KS_META) special_put(cs, k, klen, v, vlen);
  if (klen == 0 || k[0] != PC_KS_META || !cs->s->mcache) return;
  if (cs->written) pc_mcache_put(cs->s->mcache, k, klen, v, vlen, 1);
  else pc_mcache_erase(cs->s->mcache, k, klen);
}

static void cache_sync_del(void *ctx, const char *k, size_t klen) {
  cache_sync_t *cs = ctx;
  if (cs->written && klen && k[0] == PC_KS_OBSERVER && cs->from_log) cs->observers = 1;
  if (klen && k[0] == PC_KS_NOTIFY) {
    if (cs->written) pc_nindex_del(cs->s->nindex, k, klen);
    return;
  }
  if (klen == 0 || k[0] != PC_KS_META || !cs->s->mcache) return;
  if (cs->written) pc_mcache_put(cs->s->mcache, k, klen, NULL, 0, 0);
  else pc_mcache_erase(cs->s->mcache, k, klen);
}

pc_status_t local_write(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                        const leveldb_writeoptions_t *wopts, int from_log, pc_error_t *err) {
  cache_sync_t cs = {s, 0, 0, from_log, 0};
  leveldb_writebatch_iterate(b, &cs, index_put, index_del);
  if (!cs.oom && locks && lock_index_follow(s, locks, '+') != 0) cs.oom = 1;
  if (cs.oom) return local_nomem(err); /* nothing written; what was added stays (harmless) */
  char *e = NULL;
  leveldb_write(s->db, wopts, b, &e);
  cs.written = e == NULL;
  leveldb_writebatch_iterate(b, &cs, cache_sync_put, cache_sync_del);
  if (cs.written && locks) lock_index_follow(s, locks, '-');
  if (e) return local_ldb_error(s, e, "write", err);
  /* a logged update of the observers, applied on a replica: the set in
   * memory follows (the leader's own update installs it too, store_observers.c) */
  if (cs.observers) return local_observers_reload(s, err);
  return PC_OK;
}

pc_status_t local_commit_batch(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                               const leveldb_writeoptions_t *wopts, pc_error_t *err) {
  if (atomic_load_explicit(&s->replicate, memory_order_acquire))
    return local_replicate(s, b, locks, err);
  return local_write(s, b, locks, wopts, 0, err);
}

pc_status_t local_apply(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                        const leveldb_writeoptions_t *wopts, pc_error_t *err) {
  pc_status_t st = PC_FAILPOINT("store.before_apply", err);
  if (st != PC_OK) return st;
  st = local_commit_batch(s, b, locks, wopts, err);
  if (st != PC_OK) return st;
  return PC_FAILPOINT("store.after_apply", err);
}

/* ---- the frame of a row operation ------------------------------------- */

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

pc_status_t local_rowop_begin(rowop_t *op, local_t *s, const pc_cell_t *cells, size_t stride,
                              size_t n, const char *what, pc_error_t *err) {
  memset(op, 0, sizeof *op);
  op->s = s;
  int distinct = local_cells_distinct(cells, stride, n);
  if (distinct < 0) return local_nomem(err);
  if (!distinct)
    return pc_error_set(err, PC_INVALID, "%s: a cell appears twice in one request", what);
  op->idx = &op->one;
  if (n > 1 && !(op->idx = malloc(n * sizeof *op->idx))) return local_nomem(err);
  for (size_t i = 0; i < n; i++)
    op->idx[i] = local_stripe((const pc_cell_t *)((const char *)cells + i * stride));
  qsort(op->idx, n, sizeof *op->idx, cmp_u32);
  for (size_t i = 0; i < n; i++)
    if (op->nidx == 0 || op->idx[op->nidx - 1] != op->idx[i]) op->idx[op->nidx++] = op->idx[i];
  for (size_t i = 0; i < op->nidx; i++) pthread_mutex_lock(&s->latch[op->idx[i]]);
  op->b = leveldb_writebatch_create();
  return PC_OK;
}

pc_status_t local_rowop_end(rowop_t *op, pc_status_t st, pc_error_t *err) {
  if (st == PC_OK && op->writes) st = local_apply(op->s, op->b, &op->locks, op->s->wopts, err);
  for (size_t i = op->nidx; i-- > 0;) pthread_mutex_unlock(&op->s->latch[op->idx[i]]);
  if (op->idx != &op->one) free(op->idx);
  leveldb_writebatch_destroy(op->b);
  pc_meta_free(&op->m);
  pc_buf_free(&op->key);
  pc_buf_free(&op->kb);
  pc_buf_free(&op->vb);
  pc_buf_free(&op->hold);
  pc_buf_free(&op->locks);
  return st;
}

/* ---- key ranges --------------------------------------------------------- */

/* The smallest key after every key that starts with prefix. */
static int prefix_end(pc_buf_t *out, const pc_buf_t *prefix) {
  out->len = 0;
  if (pc_buf_append(out, prefix->p, prefix->len) != 0) return -1;
  while (out->len > 0 && (unsigned char)out->p[out->len - 1] == 0xFF) out->len--;
  if (out->len == 0) return 0; /* no upper bound */
  out->p[out->len - 1] = (char)((unsigned char)out->p[out->len - 1] + 1);
  return 0;
}

int local_range_keys(char space, const char *table, const char *start, size_t slen,
                     const char *start_col, size_t sclen, const char *end, size_t elen,
                     pc_buf_t *lo, pc_buf_t *hi) {
  pc_buf_t tmp = {0};
  lo->len = hi->len = 0;
  int rc = 0;
  if (!table) {
    rc |= pc_buf_u8(lo, (uint8_t)space);
    rc |= pc_buf_u8(&tmp, (uint8_t)space);
    rc |= prefix_end(hi, &tmp);
  } else {
    rc |= pc_key_row(lo, space, table, start ? start : "", start ? slen : 0);
    if (!start) lo->len -= 2; /* the table prefix alone: every row */
    if (start && start_col) rc |= pc_key_escape(lo, start_col, sclen);
    if (end) {
      rc |= pc_key_row(hi, space, table, end, elen);
    } else {
      rc |= pc_key_row(&tmp, space, table, NULL, 0);
      rc |= prefix_end(hi, &tmp);
    }
  }
  pc_buf_free(&tmp);
  return rc ? -1 : 0;
}

int local_below(const char *k, size_t kl, const pc_buf_t *hi) {
  return hi->len == 0 || pc_bytes_cmp(k, kl, hi->p, hi->len) < 0;
}

/* ---- forward cursors and the steps of long loops ------------------------ */

static int cursor_valid(local_cursor_t *c) {
  if (leveldb_iter_valid(c->it)) return 1;
  char *e = NULL;
  leveldb_iter_get_error(c->it, &e);
  if (e) leveldb_free(e); /* local_cursor_error reports it */
  else c->end = 1;
  return 0;
}

/* An iterator at a live key K >= target got there from a position below
 * target (targets do not decrease), passing only deleted entries: K is the
 * first live key >= target, and a seek would walk those entries again. */
int local_cursor_seek(local_cursor_t *c, const char *target, size_t tlen) {
  if (c->end) return 0;
  if (leveldb_iter_valid(c->it)) {
    size_t kl;
    const char *k = leveldb_iter_key(c->it, &kl);
    if (pc_bytes_cmp(k, kl, target, tlen) >= 0) return 1;
  }
  leveldb_iter_seek(c->it, target, tlen);
  return cursor_valid(c);
}

int local_cursor_next(local_cursor_t *c) {
  leveldb_iter_next(c->it);
  return cursor_valid(c);
}

pc_status_t local_cursor_error(local_t *s, local_cursor_t *c, const char *what, pc_error_t *err) {
  char *e = NULL;
  leveldb_iter_get_error(c->it, &e);
  return e ? local_ldb_error(s, e, what, err) : PC_OK;
}

#define STEP_CHECK_EVERY 16u /* steps between two pc_call_check (each reads the clock) */

pc_status_t local_step(local_t *s, unsigned steps, const char *what, pc_error_t *err) {
  (void)s;
  pc_status_t st = PC_FAILPOINT("store.step", err);
  if (st != PC_OK) return st;
  return steps % STEP_CHECK_EVERY == 0 ? pc_call_check(what, err) : PC_OK;
}

/* ---- the counting comparator (pc_local_store_count_compares) ------------ */

static atomic_int count_compares; /* stores opened from now on count */
static _Thread_local uint64_t compares;

void pc_local_store_count_compares(int on) { atomic_store(&count_compares, on != 0); }

uint64_t pc_local_compares(void) { return compares; }

/* LevelDB's own order (bytewise, a shorter prefix first) */
static int counting_compare(void *state, const char *a, size_t al, const char *b, size_t bl) {
  (void)state;
  compares++;
  return pc_bytes_cmp(a, al, b, bl);
}

/* LevelDB's name for that order, so that the store opens with either */
static const char *counting_name(void *state) {
  (void)state;
  return "leveldb.BytewiseComparator";
}

static void counting_destroy(void *state) { (void)state; }

/* ---- open and close ----------------------------------------------------- */

static void local_close(pc_store_t *base) {
  local_t *s = (local_t *)base;
  if (!s) return;
  pc_error_t err;
  if (s->opened && local_lock_index_save(s, &err) != PC_OK) /* the next open walks the metas */
    pc_log(PC_LOG_WARN, "%s (the next open rebuilds the lock index)", err.text);
  if (s->db) leveldb_close(s->db);
  if (s->opts) leveldb_options_destroy(s->opts);
  pc_mcache_destroy(s->mcache);
  pc_nindex_destroy(s->nindex);
  pc_nindex_destroy(s->lindex);
  local_observers_free(s);
  pthread_mutex_destroy(&s->obs_mu);
  pthread_rwlock_destroy(&s->obs_rw);
  pthread_mutex_destroy(&s->obs_swap);
  if (s->cache) leveldb_cache_destroy(s->cache);
  if (s->filter) leveldb_filterpolicy_destroy(s->filter);
  if (s->cmp) leveldb_comparator_destroy(s->cmp);
  if (s->ropts) leveldb_readoptions_destroy(s->ropts);
  if (s->wopts) leveldb_writeoptions_destroy(s->wopts);
  if (s->gc_wopts) leveldb_writeoptions_destroy(s->gc_wopts);
  if (s->sync_wopts) leveldb_writeoptions_destroy(s->sync_wopts);
  for (uint32_t i = 0; i < PC_LATCHES; i++) pthread_mutex_destroy(&s->latch[i]);
  free(s->path);
  free(s);
}

/* Writes the fence keys a store lacks (keys.h), before anything reads. */
static pc_status_t write_fences(local_t *s, pc_error_t *err) {
  static const char *const fences[] = {PC_KEY_META_END};
  for (size_t i = 0; i < sizeof fences / sizeof *fences; i++) {
    char *e = NULL;
    size_t vl = 0;
    char *v = leveldb_get(s->db, s->ropts, fences[i], strlen(fences[i]), &vl, &e);
    if (e) return local_ldb_error(s, e, "read a fence key", err);
    if (v) {
      leveldb_free(v);
      continue;
    }
    leveldb_put(s->db, s->wopts, fences[i], strlen(fences[i]), "", 0, &e);
    if (e) return local_ldb_error(s, e, "write a fence key", err);
  }
  return PC_OK;
}

static const pc_store_ops_t local_ops = {
    .get = local_get,
    .get_fresh = local_get_fresh,
    .prewrite = local_prewrite,
    .commit = local_commit,
    .rollback = local_rollback,
    .check_txn = local_check_txn,
    .heartbeat = local_heartbeat,
    .commit_one_phase = local_commit_one_phase,
    .scan = local_scan,
    .raw_scan = local_raw_scan,
    .scan_locks = local_scan_locks,
    .gc = local_gc,
    .scan_notify = local_scan_notify,
    .clear_notify = local_clear_notify,
    .observer_update = local_observer_update,
    .observer_list = local_observer_list,
    .gc_safe_point = local_gc_safe_point,
    .close = local_close,
};

pc_store_t *pc_local_store_open(const char *path, const pc_local_options_t *o, pc_error_t *err) {
  local_t *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    local_nomem(err);
    return NULL;
  }
  s->base.ops = &local_ops;
  for (uint32_t i = 0; i < PC_LATCHES; i++) pthread_mutex_init(&s->latch[i], NULL);
  pthread_mutex_init(&s->obs_mu, NULL);
  pthread_rwlock_init(&s->obs_rw, NULL);
  pthread_mutex_init(&s->obs_swap, NULL);
  s->opts = leveldb_options_create();
  leveldb_options_set_create_if_missing(s->opts, o->create_if_missing);
  s->filter = leveldb_filterpolicy_create_bloom(10);
  leveldb_options_set_filter_policy(s->opts, s->filter);
  if (atomic_load(&count_compares)) {
    s->cmp = leveldb_comparator_create(NULL, counting_destroy, counting_compare, counting_name);
    leveldb_options_set_comparator(s->opts, s->cmp);
  }
  s->mcache = pc_mcache_create(o->meta_cache_bytes); /* NULL: none (or no memory for one) */
  if (!(s->nindex = pc_nindex_create()) || !(s->lindex = pc_nindex_create_flat())) {
    local_close(&s->base);
    local_nomem(err);
    return NULL;
  }
  if (o->cache_bytes) {
    s->cache = leveldb_cache_create_lru(o->cache_bytes);
    leveldb_options_set_cache(s->opts, s->cache);
  }
  /* a large memtable and 8 MiB tables: fewer level-0 files and less
   * rewriting per byte written, which compaction otherwise spends CPU on */
  leveldb_options_set_write_buffer_size(s->opts,
                                        o->write_buffer_bytes ? o->write_buffer_bytes : 64u << 20);
  leveldb_options_set_max_file_size(s->opts, 8u << 20);
  if (o->no_compression) leveldb_options_set_compression(s->opts, leveldb_no_compression);
  s->ropts = leveldb_readoptions_create();
  s->wopts = leveldb_writeoptions_create();
  leveldb_writeoptions_set_sync(s->wopts, o->sync);
  s->gc_wopts = leveldb_writeoptions_create();
  s->sync_wopts = leveldb_writeoptions_create();
  leveldb_writeoptions_set_sync(s->sync_wopts, 1);
  char *e = NULL;
  s->db = leveldb_open(s->opts, path, &e);
  if (e) {
    local_ldb_error(s, e, "open", err);
    s->db = NULL;
    local_close(&s->base);
    return NULL;
  }
  if (local_gc_load(s, err) != PC_OK || local_applied_load(s, err) != PC_OK ||
      write_fences(s, err) != PC_OK ||
      local_lock_index_open(s, err) != PC_OK || local_notify_index_build(s, err) != PC_OK ||
      local_observers_load(s, err) != PC_OK) {
    local_close(&s->base);
    return NULL;
  }
  s->opened = 1;
  return &s->base;
}
