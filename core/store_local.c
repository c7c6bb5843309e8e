/* store_local.c — the embedded store: the operations of store.h on one
 * LevelDB in this process.
 *
 * Single-row atomicity (DESIGN §3): a row operation takes the latches of its
 * rows (striped mutexes, acquired in stripe order), reads the meta records it
 * must check, and applies every change in one LevelDB WriteBatch. Reads take
 * no latch: LevelDB applies a WriteBatch atomically for readers. With sync on,
 * concurrent writers share fsyncs through LevelDB's own group commit (its
 * writer queue folds waiting batches into one log write).
 *
 * One-phase commit holds its row latch while it asks for commit_ts and
 * publishes start_ts in the stripe's marker meanwhile; a reader whose snapshot
 * could include that commit waits on the latch, so it never misses a commit
 * with commit_ts <= its start_ts.
 */
#include <leveldb/c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/failpoint.h"
#include "core/metacache.h"
#include "core/store.h"

#define LATCHES 1024u

typedef struct local {
  pc_store_t base;
  char *path;
  leveldb_t *db;
  leveldb_options_t *opts;
  leveldb_cache_t *cache;
  leveldb_filterpolicy_t *filter;
  leveldb_readoptions_t *ropts;
  leveldb_writeoptions_t *wopts;
  pthread_mutex_t latch[LATCHES];
  _Atomic uint64_t onepc[LATCHES]; /* start_ts of a one-phase commit in flight, or 0 */
  _Atomic uint32_t onepc_active;   /* how many onepc[] are set: 0 lets reads skip the hash */
  pc_mcache_t *mcache;             /* meta records for the write path, or NULL */
  pc_snapshots_in_use_fn in_use;   /* NULL: keep every version */
  void *in_use_ctx;
  /* deferred collection (collector_main): one-row versions kept because a
   * snapshot could read them when they were replaced */
  pthread_mutex_t gc_mu;
  pthread_cond_t gc_cv;
  pthread_t gc_thread;
  int gc_running, gc_stop;
  struct kept_version *gc_queue, **gc_tail; /* first in, first asked */
  size_t gc_count;
  _Atomic uint64_t gc_collected; /* versions the collector removed */
  struct vshard *vmem;           /* kept versions held in memory (NULL: none) */
  size_t vmem_budget;
  _Atomic size_t vmem_bytes;
} local_t;

/* A one-row version written to the history because a snapshot could read it:
 * its commit record's key, its commit_ts, its successor's commit_ts and its
 * own start_ts, the three questions of pc_snapshots_in_use_fn. */
typedef struct kept_version {
  struct kept_version *next;
  uint64_t lo, hi, owner;
  int in_memory; /* held in vmem, not written to the history */
  size_t klen;
  char key[]; /* its commit record's key 'w' T R C ~ts (vmem's key: all but ~ts) */
} kept_version_t;

/* Versions held in memory (vmem): per cell (by its write-record prefix), a
 * list of versions newest first, in 64 shards of 256 buckets, each shard
 * under its own mutex. */
#define VMEM_SHARDS 64u
#define VMEM_BUCKETS 256u

typedef struct mver {
  struct mver *next; /* older */
  uint64_t commit_ts, start_ts;
  pc_write_kind_t kind;
  size_t vlen;
  char value[];
} mver_t;

typedef struct mcell {
  struct mcell *next; /* hash chain */
  mver_t *vers;
  size_t klen;
  char key[];
} mcell_t;

typedef struct vshard {
  pthread_mutex_t mu;
  mcell_t *bucket[VMEM_BUCKETS];
} vshard_t;

#define GC_QUEUE_MAX (1u << 20) /* beyond this many, a kept version simply stays */
#define GC_RETRY_MS 50
#define GC_PASS_MAX 20000u /* versions asked about per pass: bounds the collector's CPU
                              while a long transaction keeps many versions readable */

/* ---- helpers ---------------------------------------------------------- */

__attribute__((cold)) static pc_status_t ldb_error(local_t *s, char *msg, const char *what,
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

static pc_status_t nomem(pc_error_t *err) {
  return pc_error_set(err, PC_NOMEM, "store: out of memory");
}

/* A row's latch stripe. Only the row key is hashed: equal row keys of two
 * tables share a stripe, which costs nothing but an occasional wait, and
 * every read pays for this hash (XXH3 is a few dozen instructions on a short
 * key; the notify bucket's XXH64 of table and row is kept for the layout). */
static uint32_t stripe_of(const pc_cell_t *c) {
  return (uint32_t)(XXH3_64bits(c->row, c->rlen) & (LATCHES - 1));
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The stripes a request latches, sorted and unique (lock order = stripe order). */
typedef struct latchset {
  uint32_t one;
  uint32_t *idx;
  size_t n;
} latchset_t;

static pc_status_t latch_acquire(local_t *s, const pc_cell_t *cells, size_t stride, size_t n,
                                 latchset_t *ls, pc_error_t *err) {
  ls->n = 0;
  ls->idx = &ls->one;
  if (n > 1) {
    ls->idx = malloc(n * sizeof *ls->idx);
    if (!ls->idx) return nomem(err);
  }
  for (size_t i = 0; i < n; i++) {
    const pc_cell_t *c = (const pc_cell_t *)((const char *)cells + i * stride);
    ls->idx[i] = stripe_of(c);
  }
  qsort(ls->idx, n, sizeof *ls->idx, cmp_u32);
  for (size_t i = 0; i < n; i++)
    if (ls->n == 0 || ls->idx[ls->n - 1] != ls->idx[i]) ls->idx[ls->n++] = ls->idx[i];
  for (size_t i = 0; i < ls->n; i++) pthread_mutex_lock(&s->latch[ls->idx[i]]);
  return PC_OK;
}

static void latch_release(local_t *s, latchset_t *ls) {
  for (size_t i = ls->n; i-- > 0;) pthread_mutex_unlock(&s->latch[ls->idx[i]]);
  if (ls->idx != &ls->one) free(ls->idx);
  ls->idx = NULL;
}

/* Waits out a one-phase commit in flight on stripe i that read_ts could see. */
static void wait_onepc(local_t *s, uint32_t i, uint64_t read_ts) {
  uint64_t m = atomic_load_explicit(&s->onepc[i], memory_order_acquire);
  if (m != 0 && m <= read_ts) {
    pthread_mutex_lock(&s->latch[i]);
    pthread_mutex_unlock(&s->latch[i]);
  }
}

static int cells_distinct(const pc_cell_t *cells, size_t stride, size_t n);

static const char *cell_name(const pc_cell_t *c, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%.*s/%.*s", c->table, (int)(c->rlen > 64 ? 64 : c->rlen), c->row,
           (int)(c->clen > 64 ? 64 : c->clen), c->col);
  return buf;
}

/* Reads and decodes the meta record of cell; *found = 0 leaves m zeroed. */
static pc_status_t read_meta(local_t *s, const leveldb_readoptions_t *ro, const pc_cell_t *c,
                             pc_buf_t *key, pc_meta_t *m, int *found, pc_error_t *err) {
  key->len = 0;
  if (pc_key_cell(key, PC_KS_META, c) != 0) return nomem(err);
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
    char *v = leveldb_get(s->db, ro, key->p, key->len, &vlen, &e);
    if (e) return ldb_error(s, e, "read meta", err);
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
                        cell_name(c, name, sizeof name));
  }
  return PC_OK;
}

static pc_status_t put_meta(leveldb_writebatch_t *b, const pc_buf_t *key, const pc_meta_t *m,
                            pc_buf_t *scratch, pc_error_t *err) {
  scratch->len = 0;
  if (pc_meta_encode(m, scratch) != 0) return nomem(err);
  leveldb_writebatch_put(b, key->p, key->len, scratch->p, scratch->len);
  return PC_OK;
}

static pc_status_t put_write(leveldb_writebatch_t *b, const pc_cell_t *c, uint64_t ts,
                             const pc_write_rec_t *w, pc_buf_t *kb, pc_buf_t *vb,
                             pc_error_t *err) {
  kb->len = vb->len = 0;
  if (pc_key_cell_ts(kb, PC_KS_WRITE, c, ts) != 0 || pc_write_encode(w, vb) != 0)
    return nomem(err);
  leveldb_writebatch_put(b, kb->p, kb->len, vb->p, vb->len);
  return PC_OK;
}

static pc_status_t put_notify(leveldb_writebatch_t *b, const pc_cell_t *c, uint64_t ts,
                              pc_buf_t *kb, pc_error_t *err) {
  kb->len = 0;
  if (pc_key_notify(kb, c, ts) != 0) return nomem(err);
  const char strong = 0;
  leveldb_writebatch_put(b, kb->p, kb->len, &strong, 1);
  return PC_OK;
}

/* The meta cache follows each batch: what was written, or, when the write
 * failed and its effect is unknown, nothing. */
typedef struct cache_sync {
  pc_mcache_t *c;
  int written;
} cache_sync_t;

static void cache_sync_put(void *ctx, const char *k, size_t klen, const char *v, size_t vlen) {
  cache_sync_t *cs = ctx;
  if (klen == 0 || k[0] != PC_KS_META) return;
  if (cs->written) pc_mcache_put(cs->c, k, klen, v, vlen, 1);
  else pc_mcache_erase(cs->c, k, klen);
}

static void cache_sync_del(void *ctx, const char *k, size_t klen) {
  cache_sync_t *cs = ctx;
  if (klen == 0 || k[0] != PC_KS_META) return;
  if (cs->written) pc_mcache_put(cs->c, k, klen, NULL, 0, 0);
  else pc_mcache_erase(cs->c, k, klen);
}

/* Writes b. Every write of the store goes through here, with the latches of
 * the batch's cells held; the collector's deletes of kept commit records
 * take none, since no row operation writes those keys again. */
static pc_status_t apply(local_t *s, leveldb_writebatch_t *b, pc_error_t *err) {
  pc_status_t st = PC_FAILPOINT("store.before_apply", err);
  if (st != PC_OK) return st;
  char *e = NULL;
  leveldb_write(s->db, s->wopts, b, &e);
  if (s->mcache) {
    cache_sync_t cs = {s->mcache, e == NULL};
    leveldb_writebatch_iterate(b, &cs, cache_sync_put, cache_sync_del);
  }
  if (e) return ldb_error(s, e, "write", err);
  return PC_FAILPOINT("store.after_apply", err);
}

/* The frame of every row operation: the request's cells checked distinct,
 * their latches taken, one WriteBatch, scratch buffers; rowop_end applies
 * the batch if the operation succeeded and wrote, then releases it all. */
typedef struct rowop {
  local_t *s;
  latchset_t ls;
  leveldb_writebatch_t *b;
  pc_buf_t key, kb, vb, hold;
  pc_meta_t m;
  int writes;
} rowop_t;

static pc_status_t rowop_begin(rowop_t *op, local_t *s, const pc_cell_t *cells, size_t stride,
                               size_t n, const char *what, pc_error_t *err) {
  memset(op, 0, sizeof *op);
  op->s = s;
  int distinct = cells_distinct(cells, stride, n);
  if (distinct < 0) return nomem(err);
  if (!distinct)
    return pc_error_set(err, PC_INVALID, "%s: a cell appears twice in one request", what);
  pc_status_t st = latch_acquire(s, cells, stride, n, &op->ls, err);
  if (st != PC_OK) return st;
  op->b = leveldb_writebatch_create();
  return PC_OK;
}

static pc_status_t rowop_end(rowop_t *op, pc_status_t st, pc_error_t *err) {
  if (st == PC_OK && op->writes) st = apply(op->s, op->b, err);
  latch_release(op->s, &op->ls);
  leveldb_writebatch_destroy(op->b);
  pc_meta_free(&op->m);
  pc_buf_free(&op->key);
  pc_buf_free(&op->kb);
  pc_buf_free(&op->vb);
  pc_buf_free(&op->hold);
  return st;
}

/* ---- versions kept in memory ---------------------------------------------
 *
 * A replaced one-row version that a snapshot can still read is needed only
 * by this process's open transactions: the registry knows every snapshot,
 * and none survives the process. So while the budget (vmem_budget) allows,
 * such a version is held here instead of being written to the history, and
 * the collector frees it once no snapshot can read it; neither the write nor
 * the later delete reaches LevelDB. It is inserted before the WriteBatch
 * that replaces it is applied, so a reader that sees the new head finds the
 * old version here (read_history, find_write_by_start). The raw view shows
 * only what is in LevelDB. */

static vshard_t *vmem_create(void) {
  vshard_t *v = calloc(VMEM_SHARDS, sizeof *v);
  if (!v) return NULL;
  for (uint32_t i = 0; i < VMEM_SHARDS; i++) pthread_mutex_init(&v[i].mu, NULL);
  return v;
}

static void vmem_destroy(vshard_t *v) {
  if (!v) return;
  for (uint32_t i = 0; i < VMEM_SHARDS; i++) {
    for (uint32_t b = 0; b < VMEM_BUCKETS; b++) {
      mcell_t *c = v[i].bucket[b];
      while (c) {
        mcell_t *next = c->next;
        for (mver_t *m = c->vers, *mn; m; m = mn) {
          mn = m->next;
          free(m);
        }
        free(c);
        c = next;
      }
    }
    pthread_mutex_destroy(&v[i].mu);
  }
  free(v);
}

/* The shard and bucket slot of a cell's prefix. */
static mcell_t **vmem_slot(local_t *s, const char *key, size_t klen, vshard_t **shard) {
  uint64_t h = XXH3_64bits(key, klen);
  *shard = &s->vmem[h % VMEM_SHARDS];
  return &(*shard)->bucket[(h / VMEM_SHARDS) % VMEM_BUCKETS];
}

static mcell_t *vmem_cell(mcell_t *c, const char *key, size_t klen) {
  for (; c; c = c->next)
    if (c->klen == klen && memcmp(c->key, key, klen) == 0) return c;
  return NULL;
}

/* What a held version counts against the budget: its own size and, so that
 * the count needs no bookkeeping per cell, a cell entry of its own. */
static size_t vmem_cost(size_t vlen, size_t klen) {
  return sizeof(mver_t) + vlen + sizeof(mcell_t) + klen;
}

/* Holds version w of the cell with write-record prefix key; 0 done, -1 over
 * the budget or out of memory (the caller writes it to the history). */
static int vmem_put(local_t *s, const char *key, size_t klen, const pc_write_rec_t *w) {
  size_t cost = vmem_cost(w->vlen, klen);
  if (atomic_fetch_add(&s->vmem_bytes, cost) + cost > s->vmem_budget) {
    atomic_fetch_sub(&s->vmem_bytes, cost);
    return -1;
  }
  mver_t *m = malloc(sizeof *m + w->vlen);
  if (!m) {
    atomic_fetch_sub(&s->vmem_bytes, cost);
    return -1;
  }
  m->commit_ts = w->commit_ts;
  m->start_ts = w->start_ts;
  m->kind = w->kind;
  m->vlen = w->vlen;
  if (w->vlen) memcpy(m->value, w->value, w->vlen);
  vshard_t *sh;
  mcell_t **slot = vmem_slot(s, key, klen, &sh);
  pthread_mutex_lock(&sh->mu);
  mcell_t *c = vmem_cell(*slot, key, klen);
  if (!c && (c = malloc(sizeof *c + klen))) {
    c->vers = NULL;
    c->klen = klen;
    memcpy(c->key, key, klen);
    c->next = *slot;
    *slot = c;
  }
  if (c) { /* newest first; the cell's latch orders its versions */
    mver_t **at = &c->vers;
    while (*at && (*at)->commit_ts > m->commit_ts) at = &(*at)->next;
    m->next = *at;
    *at = m;
  }
  pthread_mutex_unlock(&sh->mu);
  if (!c) {
    free(m);
    atomic_fetch_sub(&s->vmem_bytes, cost);
    return -1;
  }
  return 0;
}

static void vmem_del(local_t *s, const char *key, size_t klen, uint64_t commit_ts) {
  vshard_t *sh;
  mcell_t **slot = vmem_slot(s, key, klen, &sh);
  pthread_mutex_lock(&sh->mu);
  mcell_t **cp = slot;
  while (*cp && !((*cp)->klen == klen && memcmp((*cp)->key, key, klen) == 0)) cp = &(*cp)->next;
  mcell_t *c = *cp;
  if (c) {
    for (mver_t **at = &c->vers; *at; at = &(*at)->next) {
      if ((*at)->commit_ts != commit_ts) continue;
      mver_t *m = *at;
      *at = m->next;
      atomic_fetch_sub(&s->vmem_bytes, vmem_cost(m->vlen, klen));
      free(m);
      break;
    }
    if (!c->vers) {
      *cp = c->next;
      free(c);
    }
  }
  pthread_mutex_unlock(&sh->mu);
}

/* Finds the newest held version with commit_ts <= read_ts (by_start 0) or
 * the one with start_ts == read_ts (by_start 1). Found: *rec with its value
 * copied into hold, and 1; else 0; -1 out of memory. */
static int vmem_find(local_t *s, const char *key, size_t klen, uint64_t read_ts, int by_start,
                     pc_write_rec_t *rec, pc_buf_t *hold) {
  if (!s->vmem || atomic_load_explicit(&s->vmem_bytes, memory_order_relaxed) == 0) return 0;
  vshard_t *sh;
  mcell_t **slot = vmem_slot(s, key, klen, &sh);
  int found = 0;
  pthread_mutex_lock(&sh->mu);
  mcell_t *c = vmem_cell(*slot, key, klen);
  for (mver_t *m = c ? c->vers : NULL; m && !found; m = m->next) {
    if (by_start ? m->start_ts != read_ts : m->commit_ts > read_ts) continue;
    hold->len = 0;
    if (pc_buf_append(hold, m->value, m->vlen) != 0) {
      found = -1;
      break;
    }
    *rec = (pc_write_rec_t){m->kind, m->start_ts, m->commit_ts, PC_VALUE_INLINE, hold->p, m->vlen};
    found = 1;
  }
  pthread_mutex_unlock(&sh->mu);
  return found;
}

/* Finds the write record of transaction start_ts on cell (commit or rollback).
 * *found = 0 when there is none. rec->value points into hold. */
static pc_status_t find_write_by_start(local_t *s, const leveldb_readoptions_t *ro,
                                       const pc_cell_t *c, const pc_meta_t *m, uint64_t start_ts,
                                       pc_write_rec_t *rec, pc_buf_t *hold, int *found,
                                       pc_error_t *err) {
  *found = 0;
  if (m->has_head && m->head.start_ts == start_ts) {
    *rec = m->head;
    *found = 1;
    return PC_OK;
  }
  if (m->latest_any < start_ts) return PC_OK; /* no write at or after start_ts */
  pc_buf_t prefix = {0};
  if (pc_key_cell(&prefix, PC_KS_WRITE, c) != 0) return nomem(err);
  int inmem = vmem_find(s, prefix.p, prefix.len, start_ts, 1, rec, hold);
  if (inmem != 0) {
    pc_buf_free(&prefix);
    if (inmem < 0) return nomem(err);
    *found = 1;
    return PC_OK;
  }
  pc_status_t st = PC_OK;
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  for (leveldb_iter_seek(it, prefix.p, prefix.len); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl != prefix.len + 8 || memcmp(k, prefix.p, prefix.len) != 0) break;
    pc_rd_t r = {k + prefix.len, 8, 0, 1};
    uint64_t ts = ~pc_rd_u64(&r);
    if (ts < start_ts) break;
    const char *v = leveldb_iter_value(it, &vl);
    hold->len = 0;
    if (pc_buf_append(hold, v, vl) != 0) {
      st = nomem(err);
      break;
    }
    if (pc_write_decode(hold->p, hold->len, rec) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", s->path);
      break;
    }
    if (rec->start_ts == start_ts) {
      *found = 1;
      break;
    }
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = ldb_error(s, e, "scan write records", err);
  else if (e) leveldb_free(e);
  leveldb_iter_destroy(it);
  pc_buf_free(&prefix);
  return st;
}

/* Reads the value a commit record points at. PC_OK: *value malloc'd. */
static pc_status_t value_of(local_t *s, const leveldb_readoptions_t *ro, const pc_cell_t *c,
                            const pc_write_rec_t *w, char **value, size_t *vlen,
                            pc_error_t *err) {
  if (w->kind != PC_WRITE_PUT) return PC_NOT_FOUND;
  if (w->has_inline == PC_VALUE_IN_HEAD) { /* readers take the newest value from the head */
    char name[160];
    return pc_error_set(err, PC_CORRUPTION,
                        "store %s: commit record of %s at %llu lost its value to the head",
                        s->path, cell_name(c, name, sizeof name), (unsigned long long)w->commit_ts);
  }
  if (w->has_inline) {
    char *v = malloc(w->vlen ? w->vlen : 1);
    if (!v) return nomem(err);
    memcpy(v, w->value, w->vlen);
    *value = v;
    *vlen = w->vlen;
    return PC_OK;
  }
  pc_buf_t key = {0};
  if (pc_key_cell_ts(&key, PC_KS_DATA, c, w->start_ts) != 0) return nomem(err);
  char *e = NULL;
  *value = leveldb_get(s->db, ro, key.p, key.len, vlen, &e);
  pc_buf_free(&key);
  if (e) return ldb_error(s, e, "read data", err);
  if (!*value) {
    char name[160];
    return pc_error_set(err, PC_CORRUPTION,
                        "store %s: commit record of %s at %llu points at missing data", s->path,
                        cell_name(c, name, sizeof name), (unsigned long long)w->commit_ts);
  }
  return PC_OK;
}

/* Latest put/delete commit of cell with commit_ts <= read_ts, from the history. */
static pc_status_t read_history(local_t *s, const leveldb_readoptions_t *ro,
                                leveldb_iterator_t *it, const pc_cell_t *c, uint64_t read_ts,
                                char **value, size_t *vlen, pc_error_t *err) {
  pc_buf_t key = {0};
  if (pc_key_cell_ts(&key, PC_KS_WRITE, c, read_ts) != 0) return nomem(err);
  size_t plen = key.len - 8;
  pc_status_t st = PC_NOT_FOUND;
  pc_write_rec_t w; /* the newest put or delete <= read_ts in the history */
  int found = 0;
  for (leveldb_iter_seek(it, key.p, key.len); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl != plen + 8 || memcmp(k, key.p, plen) != 0) break;
    const char *v = leveldb_iter_value(it, &vl);
    if (pc_write_decode(v, vl, &w) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", s->path);
      break;
    }
    if (w.kind != PC_WRITE_ROLLBACK) {
      found = 1; /* w.value points into the iterator, which stays here */
      break;
    }
  }
  if (st == PC_NOT_FOUND) { /* a newer version held in memory (vmem) wins */
    pc_write_rec_t mw;
    pc_buf_t hold = {0};
    int inmem = vmem_find(s, key.p, plen, read_ts, 0, &mw, &hold);
    if (inmem < 0) st = nomem(err);
    else if (inmem && (!found || mw.commit_ts > w.commit_ts)) st = value_of(s, ro, c, &mw, value, vlen, err);
    else if (found) st = value_of(s, ro, c, &w, value, vlen, err);
    pc_buf_free(&hold);
  }
  pc_buf_free(&key);
  return st;
}

/* ---- operations --------------------------------------------------------- */

static pc_status_t local_get(pc_store_t *base, const pc_cell_t *c, uint64_t read_ts,
                             char **value, size_t *vlen, pc_lock_info_t *lock, pc_error_t *err) {
  local_t *s = (local_t *)base;
  *value = NULL;
  *vlen = 0;
  /* A one-phase commit counts itself in onepc_active before it takes its
   * commit_ts, so a reader whose read_ts is above that commit_ts finds the
   * count raised (the oracle orders the two); with none in flight anywhere,
   * the read skips hashing its row. */
  if (atomic_load(&s->onepc_active)) wait_onepc(s, stripe_of(c), read_ts);
  char kstore[256];
  pc_buf_t key = PC_BUF_ON(kstore); /* no allocation for the usual key */
  if (pc_key_cell(&key, PC_KS_META, c) != 0) return nomem(err);
  char *e = NULL;
  size_t ml = 0;
  char *mv = leveldb_get(s->db, s->ropts, key.p, key.len, &ml, &e);
  pc_buf_free(&key);
  if (e) return ldb_error(s, e, "read meta", err);
  if (!mv) return PC_NOT_FOUND;

  int has_lock, has_head;
  uint64_t lock_start;
  pc_write_rec_t head;
  pc_status_t st;
  if (pc_meta_peek(mv, ml, &has_lock, &lock_start, &has_head, &head) != 0) {
    leveldb_free(mv);
    char name[160];
    return pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record of %s", s->path,
                        cell_name(c, name, sizeof name));
  }
  if (has_lock && lock_start <= read_ts) {
    pc_meta_t m = {0};
    if (pc_meta_decode(mv, ml, &m) != 0 || pc_lock_info_copy(lock, &m.lock, c) != 0)
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed lock", s->path);
    else
      st = PC_LOCKED;
    pc_meta_free(&m);
    leveldb_free(mv);
    return st;
  }
  if (has_head && head.commit_ts <= read_ts) {
    if (head.kind != PC_WRITE_PUT) {
      st = PC_NOT_FOUND;
    } else if (head.has_inline) {
      /* hand out LevelDB's own buffer: move the value to its front */
      memmove(mv, head.value, head.vlen);
      *value = mv;
      *vlen = head.vlen;
      return PC_OK;
    } else {
      st = value_of(s, s->ropts, c, &head, value, vlen, err);
    }
    leveldb_free(mv);
    return st;
  }
  leveldb_free(mv);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropts);
  st = read_history(s, s->ropts, it, c, read_ts, value, vlen, err);
  leveldb_iter_destroy(it);
  return st;
}

static pc_status_t local_get_fresh(pc_store_t *base, const pc_cell_t *c, pc_ts_source_fn ts_source,
                                   void *ts_ctx, uint64_t *read_ts, char **value, size_t *vlen,
                                   pc_lock_info_t *lock, pc_error_t *err) {
  *value = NULL;
  *vlen = 0;
  *read_ts = 0;
  uint64_t ts;
  pc_status_t st = ts_source(ts_ctx, &ts, err);
  if (st != PC_OK) return st;
  st = local_get(base, c, ts, value, vlen, lock, err);
  if (st == PC_OK || st == PC_NOT_FOUND || st == PC_LOCKED) *read_ts = ts;
  return st;
}

static pc_status_t local_prewrite(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                                  const pc_lock_spec_t *spec, pc_lock_info_t *lock_out,
                                  pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (n == 0) return PC_OK;
  rowop_t op;
  pc_status_t st = rowop_begin(&op, s, &muts[0].cell, sizeof *muts, n, "prewrite", err);
  if (st != PC_OK) return st;
  pc_meta_t *m = &op.m;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    const pc_mutation_t *mu = &muts[i];
    int found;
    st = read_meta(s, s->ropts, &mu->cell, &op.key, m, &found, err);
    if (st != PC_OK) break;
    char name[160];
    if (m->has_lock) {
      if (m->lock.start_ts == spec->start_ts) continue; /* re-sent prewrite */
      if (pc_lock_info_copy(lock_out, &m->lock, &mu->cell) != 0) {
        st = nomem(err);
        break;
      }
      st = pc_error_set(err, PC_LOCKED, "%s is locked by transaction %llu",
                        cell_name(&mu->cell, name, sizeof name),
                        (unsigned long long)m->lock.start_ts);
      break;
    }
    if (m->latest_any >= spec->start_ts) {
      if (m->latest_any == spec->start_ts)
        st = pc_error_set(err, PC_CONFLICT, "%s: transaction %llu was already rolled back",
                          cell_name(&mu->cell, name, sizeof name),
                          (unsigned long long)spec->start_ts);
      else
        st = pc_error_set(err, PC_CONFLICT,
                          "write conflict on %s: written at %llu, after start %llu",
                          cell_name(&mu->cell, name, sizeof name),
                          (unsigned long long)m->latest_any, (unsigned long long)spec->start_ts);
      break;
    }
    pc_lock_info_t *l = &m->lock;
    m->has_lock = 1;
    l->start_ts = spec->start_ts;
    l->kind = mu->kind;
    l->ttl_ms = spec->ttl_ms;
    l->session = spec->session;
    l->observed = mu->observed;
    l->ptable.len = l->prow.len = l->pcol.len = l->value.len = 0;
    if (pc_buf_append(&l->ptable, spec->primary.table, strlen(spec->primary.table)) ||
        pc_buf_append(&l->prow, spec->primary.row, spec->primary.rlen) ||
        pc_buf_append(&l->pcol, spec->primary.col, spec->primary.clen)) {
      st = nomem(err);
      break;
    }
    l->has_inline = mu->kind == PC_WRITE_PUT && mu->vlen <= PC_INLINE_MAX;
    if (l->has_inline && pc_buf_append(&l->value, mu->value, mu->vlen) != 0) {
      st = nomem(err);
      break;
    }
    if (mu->kind == PC_WRITE_PUT && !l->has_inline) {
      op.kb.len = 0;
      if (pc_key_cell_ts(&op.kb, PC_KS_DATA, &mu->cell, spec->start_ts) != 0) {
        st = nomem(err);
        break;
      }
      leveldb_writebatch_put(op.b, op.kb.p, op.kb.len, mu->value, mu->vlen);
    }
    st = put_meta(op.b, &op.key, m, &op.vb, err);
    op.writes++;
  }
  return rowop_end(&op, st, err);
}

/* Makes commit w the head of cell c (meta m), in batch b. The head keeps a
 * small value, so the newest version is read from the meta record alone and
 * w's own commit record is written without it (PC_VALUE_IN_HEAD); the record
 * of the head being replaced gets that head's value back, since snapshots
 * older than w now read it there. Each version's value is stored once.
 *
 * A one-row commit (one_row) writes no commit record while it is the head:
 * the meta record's head is its commit record (find_write_by_start and the
 * raw view read it there). When such a head is replaced, its record is
 * written then, value included, unless collect_old says no snapshot and no
 * open transaction can ask for it, in which case the version vanishes.
 * w->value must stay valid until m is encoded. */
static pc_status_t set_head(leveldb_writebatch_t *b, const pc_cell_t *c, pc_meta_t *m,
                            const pc_write_rec_t *w, int one_row, int collect_old, pc_buf_t *kb,
                            pc_buf_t *vb, pc_error_t *err) {
  /* the replaced head's record: absent if it was a one-row commit, valueless
   * (PC_VALUE_IN_HEAD) if it was not */
  if (m->has_head && !collect_old &&
      (m->head_one_row || m->head.has_inline == PC_VALUE_INLINE)) {
    pc_status_t st = put_write(b, c, m->head.commit_ts, &m->head, kb, vb, err);
    if (st != PC_OK) return st;
  }
  if (!one_row) {
    pc_write_rec_t bare = *w;
    if (bare.has_inline == PC_VALUE_INLINE) {
      bare.has_inline = PC_VALUE_IN_HEAD;
      bare.value = NULL;
      bare.vlen = 0;
    }
    pc_status_t st = put_write(b, c, w->commit_ts, &bare, kb, vb, err);
    if (st != PC_OK) return st;
  }
  m->head = *w;
  m->has_head = 1;
  m->head_one_row = one_row;
  if (w->commit_ts > m->latest_any) m->latest_any = w->commit_ts;
  return PC_OK;
}

/* Commits the lock held in m (of start_ts) on cell c into batch b. */
static pc_status_t commit_locked(leveldb_writebatch_t *b, const pc_cell_t *c, pc_meta_t *m,
                                 const pc_buf_t *key, uint64_t commit_ts, pc_buf_t *kb,
                                 pc_buf_t *vb, pc_error_t *err) {
  const pc_lock_info_t *l = &m->lock;
  pc_write_rec_t w = {l->kind, l->start_ts, commit_ts,
                      l->has_inline ? PC_VALUE_INLINE : PC_VALUE_IN_DATA, l->value.p, l->value.len};
  pc_status_t st = PC_OK;
  if (l->observed && l->kind == PC_WRITE_PUT) st = put_notify(b, c, commit_ts, kb, err);
  if (st == PC_OK) st = set_head(b, c, m, &w, 0, 0, kb, vb, err); /* value stays in m->lock.value */
  if (st != PC_OK) return st;
  m->has_lock = 0;
  return put_meta(b, key, m, vb, err);
}

/* Rolls back transaction start_ts on cell c (m = its meta) into batch b. */
static pc_status_t rollback_cell(leveldb_writebatch_t *b, const pc_cell_t *c, pc_meta_t *m,
                                 const pc_buf_t *key, uint64_t start_ts, pc_buf_t *kb,
                                 pc_buf_t *vb, pc_error_t *err) {
  if (m->has_lock && m->lock.start_ts == start_ts) {
    if (m->lock.kind == PC_WRITE_PUT && !m->lock.has_inline) {
      kb->len = 0;
      if (pc_key_cell_ts(kb, PC_KS_DATA, c, start_ts) != 0) return nomem(err);
      leveldb_writebatch_delete(b, kb->p, kb->len);
    }
    m->has_lock = 0;
  }
  pc_write_rec_t w = {PC_WRITE_ROLLBACK, start_ts, start_ts, 0, NULL, 0};
  pc_status_t st = put_write(b, c, start_ts, &w, kb, vb, err);
  if (st != PC_OK) return st;
  if (start_ts > m->latest_any) m->latest_any = start_ts;
  return put_meta(b, key, m, vb, err);
}

static pc_status_t local_commit(pc_store_t *base, const pc_cell_t *cells, size_t n,
                                uint64_t start_ts, uint64_t commit_ts, pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (n == 0) return PC_OK;
  if (commit_ts <= start_ts)
    return pc_error_set(err, PC_INVALID, "commit: commit_ts %llu is not after start_ts %llu",
                        (unsigned long long)commit_ts, (unsigned long long)start_ts);
  rowop_t op;
  pc_status_t st = rowop_begin(&op, s, cells, sizeof *cells, n, "commit", err);
  if (st != PC_OK) return st;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    int found;
    st = read_meta(s, s->ropts, &cells[i], &op.key, &op.m, &found, err);
    if (st != PC_OK) break;
    if (op.m.has_lock && op.m.lock.start_ts == start_ts) {
      st = commit_locked(op.b, &cells[i], &op.m, &op.key, commit_ts, &op.kb, &op.vb, err);
      op.writes++;
      continue;
    }
    pc_write_rec_t w;
    st = find_write_by_start(s, s->ropts, &cells[i], &op.m, start_ts, &w, &op.hold, &found, err);
    if (st != PC_OK) break;
    if (found && w.kind != PC_WRITE_ROLLBACK) continue; /* already committed */
    char name[160];
    st = pc_error_set(err, PC_ABORTED,
                      found ? "%s: transaction %llu was rolled back"
                            : "%s: transaction %llu holds no lock here (rolled back)",
                      cell_name(&cells[i], name, sizeof name), (unsigned long long)start_ts);
  }
  return rowop_end(&op, st, err);
}

static pc_status_t local_rollback(pc_store_t *base, const pc_cell_t *cells, size_t n,
                                  uint64_t start_ts, pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (n == 0) return PC_OK;
  rowop_t op;
  pc_status_t st = rowop_begin(&op, s, cells, sizeof *cells, n, "rollback", err);
  if (st != PC_OK) return st;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    int found;
    st = read_meta(s, s->ropts, &cells[i], &op.key, &op.m, &found, err);
    if (st != PC_OK) break;
    if (!(op.m.has_lock && op.m.lock.start_ts == start_ts)) {
      pc_write_rec_t w;
      st = find_write_by_start(s, s->ropts, &cells[i], &op.m, start_ts, &w, &op.hold, &found, err);
      if (st != PC_OK) break;
      if (found && w.kind == PC_WRITE_ROLLBACK) continue; /* already rolled back */
      if (found) {
        char name[160];
        st = pc_error_set(err, PC_INTERNAL,
                          "rollback: %s of transaction %llu is committed at %llu",
                          cell_name(&cells[i], name, sizeof name), (unsigned long long)start_ts,
                          (unsigned long long)w.commit_ts);
        break;
      }
    }
    st = rollback_cell(op.b, &cells[i], &op.m, &op.key, start_ts, &op.kb, &op.vb, err);
    op.writes++;
  }
  return rowop_end(&op, st, err);
}

static pc_status_t local_check_txn(pc_store_t *base, const pc_cell_t *primary, uint64_t start_ts,
                                   uint64_t now_ts, int owner_dead, pc_txn_state_t *state,
                                   uint64_t *commit_ts, pc_error_t *err) {
  local_t *s = (local_t *)base;
  rowop_t op;
  pc_status_t st = rowop_begin(&op, s, primary, sizeof *primary, 1, "check_txn", err);
  if (st != PC_OK) return st;
  int found;
  *commit_ts = 0;
  *state = PC_TXN_ROLLED_BACK;
  st = read_meta(s, s->ropts, primary, &op.key, &op.m, &found, err);
  if (st != PC_OK) return rowop_end(&op, st, err);
  if (op.m.has_lock && op.m.lock.start_ts == start_ts) {
    uint64_t expires = PC_TS_PHYSICAL_MS(start_ts) + op.m.lock.ttl_ms;
    if (!owner_dead && PC_TS_PHYSICAL_MS(now_ts) < expires) {
      *state = PC_TXN_ALIVE;
      return rowop_end(&op, PC_OK, err);
    }
  } else {
    pc_write_rec_t w;
    st = find_write_by_start(s, s->ropts, primary, &op.m, start_ts, &w, &op.hold, &found, err);
    if (st != PC_OK || found) {
      if (found && w.kind != PC_WRITE_ROLLBACK) {
        *state = PC_TXN_COMMITTED;
        *commit_ts = w.commit_ts;
      }
      return rowop_end(&op, st, err);
    }
  }
  /* dead, expired, or never prewritten: roll back the primary, leaving a
   * rollback record so a delayed prewrite of it fails */
  st = rollback_cell(op.b, primary, &op.m, &op.key, start_ts, &op.kb, &op.vb, err);
  op.writes++;
  return rowop_end(&op, st, err);
}

/* ---- deferred collection ------------------------------------------------
 *
 * A one-row commit that replaces a one-row head drops the old version at
 * once when no snapshot can read it (set_head). When one can, the version
 * is kept: in memory while the budget allows (vmem, above), else in the
 * history. Either way it is handed to the collector thread, which asks the
 * registry the same question again every GC_RETRY_MS, and frees the versions
 * whose answer is now no: from memory, or by deleting their commit records,
 * in one WriteBatch per pass. Without it, with two writing threads, the other
 * thread's open transaction almost always lies between two overwrites of a
 * key, and almost every version stayed in the history for good. The facts
 * it asks about never change (the version's commit_ts, its successor's, its
 * own start_ts), and a snapshot taken later lies above the successor,
 * because the oracle is monotonic. Only one-row versions with inline values
 * qualify: no lock resolution asks about them, and they have no data cell.
 * After a restart, versions in the history that it had not deleted stay. */

static void free_kept(kept_version_t *k) {
  while (k) {
    kept_version_t *next = k->next;
    free(k);
    k = next;
  }
}

/* Keeps the head of m, about to be replaced by a commit at hi, for the
 * collector: in memory when the budget allows (*in_memory = 1: the caller
 * writes no history record), else in the history. Adds it to *list. */
static pc_status_t keep_for_collector(local_t *s, kept_version_t **list, const pc_cell_t *c,
                                      const pc_meta_t *m, uint64_t hi, int *in_memory,
                                      pc_error_t *err) {
  char kstore[256];
  pc_buf_t key = PC_BUF_ON(kstore);
  if (pc_key_cell_ts(&key, PC_KS_WRITE, c, m->head.commit_ts) != 0) return nomem(err);
  kept_version_t *k = malloc(sizeof *k + key.len);
  if (!k) {
    pc_buf_free(&key);
    return nomem(err);
  }
  k->lo = m->head.commit_ts;
  k->hi = hi;
  k->owner = m->head.start_ts;
  k->in_memory = s->vmem && vmem_put(s, key.p, key.len - 8, &m->head) == 0;
  k->klen = key.len;
  memcpy(k->key, key.p, key.len);
  pc_buf_free(&key);
  k->next = *list;
  *list = k;
  *in_memory = k->in_memory;
  return PC_OK;
}

/* Appends k to the collector's queue (gc_mu held). */
static void gc_enqueue(local_t *s, kept_version_t *k) {
  k->next = NULL;
  *s->gc_tail = k;
  s->gc_tail = &k->next;
  s->gc_count++;
}

static void collector_add(local_t *s, kept_version_t *list) {
  if (!list) return;
  kept_version_t *dropped = NULL;
  pthread_mutex_lock(&s->gc_mu);
  if (!s->gc_queue) pthread_cond_signal(&s->gc_cv); /* wakes an idle collector only */
  while (list) {
    kept_version_t *next = list->next;
    /* versions held in memory are always queued (the budget bounds them);
     * those in the history stay there beyond the queue's bound */
    if (list->in_memory || s->gc_count < GC_QUEUE_MAX) {
      gc_enqueue(s, list);
    } else {
      list->next = dropped;
      dropped = list;
    }
    list = next;
  }
  pthread_mutex_unlock(&s->gc_mu);
  free_kept(dropped);
}

static void *collector_main(void *arg) {
  local_t *s = arg;
  pthread_mutex_lock(&s->gc_mu);
  while (!s->gc_stop) {
    if (!s->gc_queue) {
      pthread_cond_wait(&s->gc_cv, &s->gc_mu);
      continue;
    }
    /* one pass per GC_RETRY_MS: the versions of that time go in one batch,
     * and the writers' own transactions, which count as readers until they
     * are destroyed, have ended by then */
    struct timespec until = pc_mono_after_ms(GC_RETRY_MS);
    while (!s->gc_stop && pthread_cond_timedwait(&s->gc_cv, &s->gc_mu, &until) == 0) {
    }
    if (s->gc_stop) break;
    /* the oldest GC_PASS_MAX versions; those still readable go to the back */
    kept_version_t *work = s->gc_queue, *still = NULL, **cut = &s->gc_queue;
    size_t taken = 0;
    for (; *cut && taken < GC_PASS_MAX; taken++) cut = &(*cut)->next;
    s->gc_queue = *cut;
    *cut = NULL;
    if (!s->gc_queue) s->gc_tail = &s->gc_queue;
    pthread_mutex_unlock(&s->gc_mu);
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    uint64_t n = 0;
    while (work) {
      kept_version_t *k = work;
      work = k->next;
      if (s->in_use(s->in_use_ctx, k->lo, k->hi, 0, k->owner)) {
        k->next = still;
        still = k;
      } else {
        if (k->in_memory) {
          vmem_del(s, k->key, k->klen - 8, k->lo);
          atomic_fetch_add(&s->gc_collected, 1);
        } else {
          leveldb_writebatch_delete(b, k->key, k->klen);
          n++;
        }
        free(k);
      }
    }
    pc_error_t err;
    /* a failed write leaves those versions in the history, as before */
    if (n && apply(s, b, &err) == PC_OK) atomic_fetch_add(&s->gc_collected, n);
    leveldb_writebatch_destroy(b);
    pthread_mutex_lock(&s->gc_mu);
    s->gc_count -= taken;
    while (still) {
      kept_version_t *k = still;
      still = k->next;
      gc_enqueue(s, k);
    }
  }
  free_kept(s->gc_queue);
  s->gc_queue = NULL;
  s->gc_tail = &s->gc_queue;
  s->gc_count = 0;
  pthread_mutex_unlock(&s->gc_mu);
  return NULL;
}

uint64_t pc_local_store_collected(pc_store_t *base) {
  return atomic_load(&((local_t *)base)->gc_collected);
}

/* commit_one_phase, and with blind set commit_blind (start_ts is then the
 * transaction's id, and *spare receives a fresh timestamp). */
static pc_status_t one_phase(local_t *s, const pc_mutation_t *muts, size_t n, uint64_t start_ts,
                             int blind, pc_ts_source_fn ts_source, void *ts_ctx,
                             uint64_t *commit_ts, uint64_t *spare, pc_lock_info_t *lock_out,
                             pc_error_t *err) {
  if (spare) *spare = 0;
  if (n == 0) return PC_OK;
  for (size_t i = 1; i < n; i++)
    if (strcmp(muts[i].cell.table, muts[0].cell.table) != 0 ||
        muts[i].cell.rlen != muts[0].cell.rlen ||
        memcmp(muts[i].cell.row, muts[0].cell.row, muts[0].cell.rlen) != 0)
      return pc_error_set(err, PC_INVALID, "one-phase commit: cells of more than one row");
  int distinct = cells_distinct(&muts[0].cell, sizeof *muts, n);
  if (distinct < 0) return nomem(err);
  if (!distinct) return pc_error_set(err, PC_INVALID, "one-phase commit: a cell appears twice");
  pc_meta_t *metas = calloc(n, sizeof *metas);
  pc_buf_t *keys = calloc(n, sizeof *keys);
  if (!metas || !keys) {
    free(metas);
    free(keys);
    return nomem(err);
  }
  uint32_t stripe = stripe_of(&muts[0].cell);
  pthread_mutex_lock(&s->latch[stripe]);
  pc_status_t st = PC_OK;
  int resent = 0; /* blind: this id's commit is already there */
  pc_buf_t hold = {0};
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    int found;
    char name[160];
    st = read_meta(s, s->ropts, &muts[i].cell, &keys[i], &metas[i], &found, err);
    if (st != PC_OK) break;
    if (metas[i].has_lock) {
      if (pc_lock_info_copy(lock_out, &metas[i].lock, &muts[i].cell) != 0) st = nomem(err);
      else
        st = pc_error_set(err, PC_LOCKED, "%s is locked by transaction %llu",
                          cell_name(&muts[i].cell, name, sizeof name),
                          (unsigned long long)metas[i].lock.start_ts);
    } else if (blind) {
      /* the snapshot is now: only this id's own records can stand in the way */
      pc_write_rec_t w;
      st = find_write_by_start(s, s->ropts, &muts[i].cell, &metas[i], start_ts, &w, &hold, &found,
                               err);
      if (st != PC_OK || !found) continue;
      if (w.kind == PC_WRITE_ROLLBACK) {
        st = pc_error_set(err, PC_ABORTED, "%s: transaction %llu was rolled back",
                          cell_name(&muts[i].cell, name, sizeof name),
                          (unsigned long long)start_ts);
      } else { /* a re-sent request: every cell was committed together */
        *commit_ts = w.commit_ts;
        resent = 1;
        break;
      }
    } else if (metas[i].latest_any >= start_ts) {
      st = pc_error_set(err, PC_CONFLICT, "write conflict on %s: written at %llu, after start %llu",
                        cell_name(&muts[i].cell, name, sizeof name),
                        (unsigned long long)metas[i].latest_any, (unsigned long long)start_ts);
    }
  }
  pc_buf_free(&hold);
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  pc_buf_t kb = {0}, vb = {0};
  kept_version_t *kept = NULL; /* for the collector once the batch is written */
  if (st == PC_OK && !resent) {
    atomic_fetch_add(&s->onepc_active, 1);
    atomic_store_explicit(&s->onepc[stripe], start_ts, memory_order_seq_cst);
    st = ts_source(ts_ctx, commit_ts, err);
    if (st == PC_OK && spare && ts_source(ts_ctx, spare, err) != PC_OK) {
      *spare = 0; /* only a hint for the next commit */
      pc_error_clear(err);
    }
    for (size_t i = 0; i < n && st == PC_OK; i++) {
      const pc_mutation_t *mu = &muts[i];
      int inl = mu->kind == PC_WRITE_PUT && mu->vlen <= PC_INLINE_MAX;
      if (mu->kind == PC_WRITE_PUT && !inl) {
        kb.len = 0;
        if (pc_key_cell_ts(&kb, PC_KS_DATA, &mu->cell, start_ts) != 0) {
          st = nomem(err);
          break;
        }
        leveldb_writebatch_put(b, kb.p, kb.len, mu->value, mu->vlen);
      }
      pc_write_rec_t w = {mu->kind, start_ts, *commit_ts,
                          inl ? PC_VALUE_INLINE : PC_VALUE_IN_DATA, inl ? mu->value : NULL,
                          inl ? mu->vlen : 0};
      if (mu->observed && mu->kind == PC_WRITE_PUT)
        st = put_notify(b, &mu->cell, *commit_ts, &kb, err);
      /* the head being replaced was also a one-row commit (no lock
       * resolution will ask about it): it vanishes if no snapshot between it
       * and this commit can read it and its own transaction is over */
      pc_meta_t *m = &metas[i];
      int collect = s->in_use && m->has_head && m->head_one_row &&
                    m->head.has_inline == PC_VALUE_INLINE &&
                    !s->in_use(s->in_use_ctx, m->head.commit_ts, *commit_ts, start_ts,
                               m->head.start_ts);
      int in_memory = 0;
      if (st == PC_OK && s->gc_running && !collect && m->has_head && m->head_one_row &&
          m->head.has_inline == PC_VALUE_INLINE)
        st = keep_for_collector(s, &kept, &mu->cell, m, *commit_ts, &in_memory, err);
      if (st == PC_OK)
        st = set_head(b, &mu->cell, m, &w, 1, collect || in_memory, &kb, &vb, err);
      if (st != PC_OK) break;
      st = put_meta(b, &keys[i], m, &vb, err);
    }
    if (st == PC_OK) st = apply(s, b, err);
    atomic_store_explicit(&s->onepc[stripe], 0, memory_order_release);
    atomic_fetch_sub_explicit(&s->onepc_active, 1, memory_order_release);
  }
  pthread_mutex_unlock(&s->latch[stripe]);
  /* also after a failed write: what it put in memory must be freed in time */
  collector_add(s, kept);
  leveldb_writebatch_destroy(b);
  for (size_t i = 0; i < n; i++) {
    pc_meta_free(&metas[i]);
    pc_buf_free(&keys[i]);
  }
  free(metas);
  free(keys);
  pc_buf_free(&kb);
  pc_buf_free(&vb);
  if (st != PC_OK && spare) *spare = 0;
  return st;
}

static pc_status_t local_commit_one_phase(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                                          uint64_t start_ts, pc_ts_source_fn ts_source,
                                          void *ts_ctx, uint64_t *commit_ts,
                                          pc_lock_info_t *lock_out, pc_error_t *err) {
  return one_phase((local_t *)base, muts, n, start_ts, 0, ts_source, ts_ctx, commit_ts, NULL,
                   lock_out, err);
}

static pc_status_t local_commit_blind(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                                      uint64_t id, pc_ts_source_fn ts_source, void *ts_ctx,
                                      uint64_t *commit_ts, uint64_t *spare,
                                      pc_lock_info_t *lock_out, pc_error_t *err) {
  return one_phase((local_t *)base, muts, n, id, 1, ts_source, ts_ctx, commit_ts, spare, lock_out,
                   err);
}

/* The smallest key after every key that starts with prefix. */
static int prefix_end(pc_buf_t *out, const pc_buf_t *prefix) {
  out->len = 0;
  if (pc_buf_append(out, prefix->p, prefix->len) != 0) return -1;
  while (out->len > 0 && (unsigned char)out->p[out->len - 1] == 0xFF) out->len--;
  if (out->len == 0) return 0; /* no upper bound */
  out->p[out->len - 1] = (char)((unsigned char)out->p[out->len - 1] + 1);
  return 0;
}

/* Key range [lo, hi) of space for table rows [start, end); hi->len == 0: unbounded. */
static int range_keys(char space, const char *table, const char *start, size_t slen,
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

static int in_range(const char *k, size_t kl, const pc_buf_t *hi) {
  if (hi->len == 0) return 1;
  size_t n = kl < hi->len ? kl : hi->len;
  int c = memcmp(k, hi->p, n);
  return c < 0 || (c == 0 && kl < hi->len);
}

static pc_status_t local_scan(pc_store_t *base, const char *table, const char *start, size_t slen,
                              const char *start_col, size_t sclen, const char *end, size_t elen,
                              uint64_t read_ts, size_t limit, pc_store_cell_fn fn, void *ctx,
                              pc_lock_info_t *lock, pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (atomic_load(&s->onepc_active))
    for (uint32_t i = 0; i < LATCHES; i++) wait_onepc(s, i, read_ts);
  pc_buf_t lo = {0}, hi = {0};
  if (range_keys(PC_KS_META, table, start, slen, start_col, sclen, end, elen, &lo, &hi) != 0)
    return nomem(err);
  const leveldb_snapshot_t *snap = leveldb_create_snapshot(s->db);
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_snapshot(ro, snap);
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  leveldb_iterator_t *hist = NULL;
  pc_key_decoded_t d = {0};
  pc_status_t st = PC_OK;
  size_t count = 0;
  for (leveldb_iter_seek(it, lo.p, lo.len); leveldb_iter_valid(it) && count < limit;
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (!in_range(k, kl, &hi)) break;
    const char *v = leveldb_iter_value(it, &vl);
    if (pc_key_decode(k, kl, &d) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed key in scan", s->path);
      break;
    }
    pc_cell_t c = {d.table.p, d.row.p, d.row.len, d.col.p, d.col.len};
    int has_lock, has_head;
    uint64_t lock_start;
    pc_write_rec_t head;
    if (pc_meta_peek(v, vl, &has_lock, &lock_start, &has_head, &head) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
      break;
    }
    if (has_lock && lock_start <= read_ts) {
      pc_meta_t m = {0};
      if (pc_meta_decode(v, vl, &m) != 0 || pc_lock_info_copy(lock, &m.lock, &c) != 0)
        st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed lock", s->path);
      else
        st = pc_error_set(err, PC_LOCKED, "scan met a lock of transaction %llu",
                          (unsigned long long)lock_start);
      pc_meta_free(&m);
      break;
    }
    char *val = NULL;
    size_t len = 0;
    pc_status_t r;
    if (has_head && head.commit_ts <= read_ts) {
      r = value_of(s, ro, &c, &head, &val, &len, err);
    } else {
      if (!hist) hist = leveldb_create_iterator(s->db, ro);
      r = read_history(s, ro, hist, &c, read_ts, &val, &len, err);
    }
    if (r == PC_NOT_FOUND) continue;
    if (r != PC_OK) {
      st = r;
      break;
    }
    count++;
    int stop = fn(ctx, &c, val, len);
    free(val);
    if (stop) break;
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = ldb_error(s, e, "scan", err);
  else if (e) leveldb_free(e);
  if (hist) leveldb_iter_destroy(hist);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  leveldb_release_snapshot(s->db, snap);
  pc_key_decoded_free(&d);
  pc_buf_free(&lo);
  pc_buf_free(&hi);
  return st;
}

static int row_in(const pc_buf_t *row, const char *start, size_t slen, const char *end,
                  size_t elen) {
  if (start) {
    size_t n = row->len < slen ? row->len : slen;
    int c = memcmp(row->p, start, n);
    if (c < 0 || (c == 0 && row->len < slen)) return 0;
  }
  if (end) {
    size_t n = row->len < elen ? row->len : elen;
    int c = memcmp(row->p, end, n);
    if (c > 0 || (c == 0 && row->len >= elen)) return 0;
  }
  return 1;
}

/* The raw view of cell c's head as its commit record. */
static int raw_head(const pc_cell_t *c, const pc_meta_t *m, pc_raw_cell_fn fn, void *ctx) {
  pc_raw_cell_t rc = {0};
  rc.kind = PC_CELL_WRITE;
  rc.table = c->table;
  rc.row = c->row;
  rc.row_len = c->rlen;
  rc.column = c->col;
  rc.column_len = c->clen;
  rc.ts = m->head.commit_ts;
  rc.write_kind = m->head.kind;
  rc.start_ts = m->head.start_ts;
  if (m->head.has_inline == PC_VALUE_INLINE) {
    rc.value = m->head.value;
    rc.value_len = m->head.vlen;
  }
  return fn(ctx, &rc);
}

/* Emits every cell of one kind stored under the cell's prefix in space. */
static pc_status_t raw_cell_space(local_t *s, leveldb_iterator_t *it, char space,
                                  const pc_cell_t *c, const pc_meta_t *m, pc_raw_cell_fn fn,
                                  void *ctx, int *stop, pc_error_t *err) {
  pc_buf_t prefix = {0};
  if (pc_key_cell(&prefix, space, c) != 0) return nomem(err);
  pc_key_decoded_t d = {0};
  pc_status_t st = PC_OK;
  /* a one-row commit's record lives only in the head until it is replaced:
   * shown in its place among the write records, newest first */
  int head_due = space == PC_KS_WRITE && m->has_head && m->head_one_row;
  for (leveldb_iter_seek(it, prefix.p, prefix.len); leveldb_iter_valid(it) && !*stop;
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl < prefix.len || memcmp(k, prefix.p, prefix.len) != 0) break;
    const char *v = leveldb_iter_value(it, &vl);
    if (pc_key_decode(k, kl, &d) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed key", s->path);
      break;
    }
    if (head_due && d.ts <= m->head.commit_ts) {
      head_due = 0;
      if (d.ts < m->head.commit_ts && (*stop = raw_head(c, m, fn, ctx))) break;
    }
    pc_raw_cell_t rc = {0};
    rc.table = c->table;
    rc.row = c->row;
    rc.row_len = c->rlen;
    rc.column = c->col;
    rc.column_len = c->clen;
    rc.ts = d.ts;
    if (space == PC_KS_WRITE) {
      pc_write_rec_t w;
      if (pc_write_decode(v, vl, &w) != 0) {
        st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", s->path);
        break;
      }
      rc.kind = PC_CELL_WRITE;
      rc.write_kind = w.kind;
      rc.start_ts = w.start_ts;
      rc.value = w.value;
      rc.value_len = w.vlen;
      if (w.has_inline == PC_VALUE_IN_HEAD && m->has_head && m->head.commit_ts == w.commit_ts) {
        rc.value = m->head.value; /* the newest value lives in the meta record */
        rc.value_len = m->head.vlen;
      }
    } else if (space == PC_KS_DATA) {
      rc.kind = PC_CELL_DATA;
      rc.value = v;
      rc.value_len = vl;
    } else {
      pc_rd_t r = {v, vl, 0, 1};
      rc.kind = PC_CELL_ACK;
      rc.ts = pc_rd_u64(&r);
      rc.observer = d.observer.p;
    }
    *stop = fn(ctx, &rc);
  }
  if (head_due && st == PC_OK && !*stop) *stop = raw_head(c, m, fn, ctx);
  pc_key_decoded_free(&d);
  pc_buf_free(&prefix);
  return st;
}

static pc_status_t local_raw_scan(pc_store_t *base, const char *table, const char *start,
                                  size_t slen, const char *end, size_t elen, pc_raw_cell_fn fn,
                                  void *ctx, pc_error_t *err) {
  local_t *s = (local_t *)base;
  pc_buf_t lo = {0}, hi = {0};
  if (range_keys(PC_KS_META, table, start, slen, NULL, 0, end, elen, &lo, &hi) != 0)
    return nomem(err);
  const leveldb_snapshot_t *snap = leveldb_create_snapshot(s->db);
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_snapshot(ro, snap);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  leveldb_iterator_t *sub = leveldb_create_iterator(s->db, ro);
  pc_key_decoded_t d = {0};
  pc_meta_t m = {0};
  pc_status_t st = PC_OK;
  int stop = 0;
  for (leveldb_iter_seek(it, lo.p, lo.len); leveldb_iter_valid(it) && !stop && st == PC_OK;
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (!in_range(k, kl, &hi)) break;
    const char *v = leveldb_iter_value(it, &vl);
    pc_meta_free(&m);
    memset(&m, 0, sizeof m);
    if (pc_key_decode(k, kl, &d) != 0 || pc_meta_decode(v, vl, &m) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
      break;
    }
    pc_cell_t c = {d.table.p, d.row.p, d.row.len, d.col.p, d.col.len};
    if (m.has_lock) {
      const pc_lock_info_t *l = &m.lock;
      pc_raw_cell_t rc = {0};
      rc.kind = PC_CELL_LOCK;
      rc.table = c.table;
      rc.row = c.row;
      rc.row_len = c.rlen;
      rc.column = c.col;
      rc.column_len = c.clen;
      rc.ts = l->start_ts;
      rc.write_kind = l->kind;
      rc.value = l->has_inline ? l->value.p : NULL;
      rc.value_len = l->has_inline ? l->value.len : 0;
      rc.primary_table = l->ptable.p;
      rc.primary_row = l->prow.p;
      rc.primary_row_len = l->prow.len;
      rc.primary_column = l->pcol.p;
      rc.primary_column_len = l->pcol.len;
      rc.ttl_ms = l->ttl_ms;
      rc.session = l->session;
      rc.observed = l->observed;
      stop = fn(ctx, &rc);
    }
    const char spaces[] = {PC_KS_WRITE, PC_KS_DATA, PC_KS_ACK};
    for (size_t i = 0; i < sizeof spaces && !stop && st == PC_OK; i++)
      st = raw_cell_space(s, sub, spaces[i], &c, &m, fn, ctx, &stop, err);
  }
  /* notifications: their own key space, ordered by bucket */
  pc_buf_t np = {0};
  if (st == PC_OK && pc_buf_u8(&np, PC_KS_NOTIFY) != 0) st = nomem(err);
  for (leveldb_iter_seek(it, np.p, np.len); st == PC_OK && !stop && leveldb_iter_valid(it);
       leveldb_iter_next(it)) {
    size_t kl;
    const char *k = leveldb_iter_key(it, &kl);
    if (k[0] != PC_KS_NOTIFY) break;
    if (pc_key_decode(k, kl, &d) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed notify key", s->path);
      break;
    }
    if (table && strcmp(table, d.table.p) != 0) continue;
    if (table && !row_in(&d.row, start, slen, end, elen)) continue;
    pc_raw_cell_t rc = {0};
    rc.kind = PC_CELL_NOTIFY;
    rc.table = d.table.p;
    rc.row = d.row.p;
    rc.row_len = d.row.len;
    rc.column = d.col.p;
    rc.column_len = d.col.len;
    rc.ts = d.ts;
    stop = fn(ctx, &rc);
  }
  pc_buf_free(&np);
  leveldb_iter_destroy(sub);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  leveldb_release_snapshot(s->db, snap);
  pc_key_decoded_free(&d);
  pc_meta_free(&m);
  pc_buf_free(&lo);
  pc_buf_free(&hi);
  return st;
}

void pc_local_store_track_snapshots(pc_store_t *base, pc_snapshots_in_use_fn in_use, void *ctx) {
  local_t *s = (local_t *)base;
  s->in_use = in_use;
  s->in_use_ctx = ctx;
  pthread_mutex_lock(&s->gc_mu);
  /* without the thread, kept versions simply stay, as they did before it */
  if (in_use && !s->gc_running) {
    if (s->vmem_budget && !s->vmem) s->vmem = vmem_create(); /* NULL: the history only */
    s->gc_running = pthread_create(&s->gc_thread, NULL, collector_main, s) == 0;
  }
  pthread_mutex_unlock(&s->gc_mu);
}

static void local_close(pc_store_t *base) {
  local_t *s = (local_t *)base;
  if (!s) return;
  if (s->gc_running) {
    pthread_mutex_lock(&s->gc_mu);
    s->gc_stop = 1;
    pthread_cond_signal(&s->gc_cv);
    pthread_mutex_unlock(&s->gc_mu);
    pthread_join(s->gc_thread, NULL);
  }
  pthread_cond_destroy(&s->gc_cv);
  pthread_mutex_destroy(&s->gc_mu);
  vmem_destroy(s->vmem);
  if (s->db) leveldb_close(s->db);
  if (s->opts) leveldb_options_destroy(s->opts);
  pc_mcache_destroy(s->mcache);
  if (s->cache) leveldb_cache_destroy(s->cache);
  if (s->filter) leveldb_filterpolicy_destroy(s->filter);
  if (s->ropts) leveldb_readoptions_destroy(s->ropts);
  if (s->wopts) leveldb_writeoptions_destroy(s->wopts);
  for (uint32_t i = 0; i < LATCHES; i++) pthread_mutex_destroy(&s->latch[i]);
  free(s->path);
  free(s);
}

static const pc_store_ops_t local_ops = {
    .get = local_get,
    .get_fresh = local_get_fresh,
    .prewrite = local_prewrite,
    .commit = local_commit,
    .rollback = local_rollback,
    .check_txn = local_check_txn,
    .commit_one_phase = local_commit_one_phase,
    .commit_blind = local_commit_blind,
    .scan = local_scan,
    .raw_scan = local_raw_scan,
    .close = local_close,
};

static int cell_ptr_cmp(const void *x, const void *y) {
  const pc_cell_t *a = *(const pc_cell_t *const *)x, *b = *(const pc_cell_t *const *)y;
  int c = strcmp(a->table, b->table);
  if (!c) c = pc_bytes_cmp(a->row, a->rlen, b->row, b->rlen);
  if (!c) c = pc_bytes_cmp(a->col, a->clen, b->col, b->clen);
  return c;
}

/* 1 when no two cells of the request are the same cell, 0 when two are, -1
 * when out of memory. A tablet gets requests from the network, so this holds
 * for any size: small requests are compared pairwise, large ones sorted. */
static int cells_distinct(const pc_cell_t *cells, size_t stride, size_t n) {
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

pc_store_t *pc_local_store_open(const char *path, const pc_local_options_t *o, pc_error_t *err) {
  local_t *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    nomem(err);
    return NULL;
  }
  s->base.ops = &local_ops;
  for (uint32_t i = 0; i < LATCHES; i++) pthread_mutex_init(&s->latch[i], NULL);
  pthread_mutex_init(&s->gc_mu, NULL);
  pc_cond_init_mono(&s->gc_cv);
  s->gc_tail = &s->gc_queue;
  s->opts = leveldb_options_create();
  leveldb_options_set_create_if_missing(s->opts, o->create_if_missing);
  s->filter = leveldb_filterpolicy_create_bloom(10);
  leveldb_options_set_filter_policy(s->opts, s->filter);
  s->mcache = pc_mcache_create(o->meta_cache_bytes); /* NULL: none (or no memory for one) */
  s->vmem_budget = o->kept_versions_bytes;
  if (o->cache_bytes) {
    s->cache = leveldb_cache_create_lru(o->cache_bytes);
    leveldb_options_set_cache(s->opts, s->cache);
  }
  leveldb_options_set_write_buffer_size(s->opts, 16u << 20);
  s->ropts = leveldb_readoptions_create();
  s->wopts = leveldb_writeoptions_create();
  leveldb_writeoptions_set_sync(s->wopts, o->sync);
  char *e = NULL;
  s->db = leveldb_open(s->opts, path, &e);
  if (e) {
    ldb_error(s, e, "open", err);
    s->db = NULL;
    local_close(&s->base);
    return NULL;
  }
  return &s->base;
}
