/* store_read.c — snapshot reads of the embedded store: a cell's value at a
 * timestamp (get), a range of committed cells (scan), and the history lookups
 * the row operations share (a transaction's write record by its start_ts).
 *
 * A read Gets the cell's meta record first: it holds the lock, if any, and
 * the newest commit (the head) with its value when small, so a read of a
 * cell at rest is one LevelDB Get. Older snapshots read the commit records
 * ('w' keys, newest first; the head has none): one seek to "latest <=
 * read_ts", and none when the head is the cell's first put or delete.
 *
 * Reads take no latch, but a one-phase commit takes its commit_ts while it
 * holds its row's latch; a reader whose read_ts could cover that commit
 * waits for the latch first (local_wait_onepc), so it never misses a commit
 * with commit_ts <= read_ts.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/store_local.h"

/* A rollback record sits at its own start_ts (commit_ts = start_ts): one Get
 * finds it, however many records of the cell are newer. A commit record
 * sits at a commit_ts after start_ts, which only a walk of the cell's newer
 * records finds; it stops at the first record older than start_ts. */
pc_status_t local_find_write_by_start(local_t *s, const pc_cell_t *c, const pc_meta_t *m,
                                      uint64_t start_ts, pc_write_rec_t *rec, pc_buf_t *hold,
                                      int *found, pc_error_t *err) {
  *found = 0;
  if (m->has_head && m->head.start_ts == start_ts) {
    *rec = m->head;
    *found = 1;
    return PC_OK;
  }
  if (m->latest_any < start_ts) return PC_OK; /* no write at or after start_ts */
  pc_buf_t prefix = {0};
  if (pc_key_cell_ts(&prefix, PC_KS_WRITE, c, start_ts) != 0) return local_nomem(err);
  char *e = NULL;
  size_t gl = 0;
  char *g = leveldb_get(s->db, s->ropts, prefix.p, prefix.len, &gl, &e);
  pc_status_t st = PC_OK;
  if (e) {
    st = local_ldb_error(s, e, "read a write record", err);
  } else if (g) {
    hold->len = 0;
    if (pc_buf_append(hold, g, gl) != 0)
      st = local_nomem(err);
    else if (pc_write_decode(hold->p, hold->len, rec) != 0)
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", s->path);
    else
      *found = rec->start_ts == start_ts;
    leveldb_free(g);
  }
  if (st != PC_OK || *found || m->latest_any == start_ts) { /* nothing newer to walk */
    pc_buf_free(&prefix);
    return st;
  }
  prefix.len -= 8;
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropts);
  for (leveldb_iter_seek(it, prefix.p, prefix.len); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl != prefix.len + 8 || memcmp(k, prefix.p, prefix.len) != 0) break;
    pc_rd_t r = {k + prefix.len, 8, 0, 1};
    uint64_t ts = ~pc_rd_u64(&r);
    if (ts <= start_ts) break; /* the record at start_ts was the Get's */
    const char *v = leveldb_iter_value(it, &vl);
    hold->len = 0;
    if (pc_buf_append(hold, v, vl) != 0) {
      st = local_nomem(err);
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
  e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "scan write records", err);
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
                        s->path, pc_cell_str(c, name, sizeof name),
                        (unsigned long long)w->commit_ts);
  }
  if (w->has_inline) {
    char *v = malloc(w->vlen ? w->vlen : 1);
    if (!v) return local_nomem(err);
    memcpy(v, w->value, w->vlen);
    *value = v;
    *vlen = w->vlen;
    return PC_OK;
  }
  pc_buf_t key = {0};
  if (pc_key_cell_ts(&key, PC_KS_DATA, c, w->start_ts) != 0) return local_nomem(err);
  char *e = NULL;
  *value = leveldb_get(s->db, ro, key.p, key.len, vlen, &e);
  pc_buf_free(&key);
  if (e) return local_ldb_error(s, e, "read data", err);
  if (!*value) {
    char name[160];
    return pc_error_set(err, PC_CORRUPTION,
                        "store %s: commit record of %s at %llu points at missing data", s->path,
                        pc_cell_str(c, name, sizeof name), (unsigned long long)w->commit_ts);
  }
  return PC_OK;
}

/* Latest put/delete commit of cell with commit_ts <= read_ts, from the
 * commit records; it moves the caller's cursor (of its snapshot) forward.
 * The seek lands on the cell's newest record at or below read_ts; only a
 * cell with none (written after read_ts) walks on to the next cell's. */
static pc_status_t read_history(local_t *s, const leveldb_readoptions_t *ro,
                                local_cursor_t *it, const pc_cell_t *c, uint64_t read_ts,
                                char **value, size_t *vlen, pc_error_t *err) {
  pc_buf_t key = {0};
  if (pc_key_cell_ts(&key, PC_KS_WRITE, c, read_ts) != 0) return local_nomem(err);
  size_t plen = key.len - 8;
  pc_status_t st = PC_NOT_FOUND;
  for (int valid = local_cursor_seek(it, key.p, key.len); valid; valid = local_cursor_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it->it, &kl);
    if (kl != plen + 8 || memcmp(k, key.p, plen) != 0) break;
    const char *v = leveldb_iter_value(it->it, &vl);
    pc_write_rec_t w; /* w.value points into the iterator, which stays here */
    if (pc_write_decode(v, vl, &w) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", s->path);
      break;
    }
    if (w.kind == PC_WRITE_PUT || w.kind == PC_WRITE_DELETE) { /* not a rollback or notify */
      st = value_of(s, ro, c, &w, value, vlen, err);
      break;
    }
  }
  if (st == PC_NOT_FOUND) {
    pc_status_t e = local_cursor_error(s, it, "read commit records", err);
    if (e != PC_OK) st = e;
  }
  pc_buf_free(&key);
  return st;
}

/* Copies the lock of meta record mv into *lock (the cell it sits on: c). */
static pc_status_t lock_from_meta(local_t *s, const char *mv, size_t ml, const pc_cell_t *c,
                                  pc_lock_info_t *lock, pc_error_t *err) {
  pc_meta_t m = {0};
  pc_status_t st = PC_LOCKED;
  if (pc_meta_decode(mv, ml, &m) != 0 || pc_lock_info_copy(lock, &m.lock, c) != 0)
    st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed lock", s->path);
  pc_meta_free(&m);
  return st;
}

pc_status_t local_get(pc_store_t *base, const pc_cell_t *c, uint64_t read_ts, char **value,
                      size_t *vlen, pc_lock_info_t *lock, pc_error_t *err) {
  local_t *s = (local_t *)base;
  *value = NULL;
  *vlen = 0;
  local_wait_onepc(s, local_stripe(c), read_ts);
  char kstore[256];
  pc_buf_t key = PC_BUF_ON(kstore); /* no allocation for the usual key */
  if (pc_key_cell(&key, PC_KS_META, c) != 0) return local_nomem(err);
  char *e = NULL;
  size_t ml = 0;
  char *mv = leveldb_get(s->db, s->ropts, key.p, key.len, &ml, &e);
  pc_buf_free(&key);
  if (e) return local_ldb_error(s, e, "read meta", err);
  if (!mv) return PC_NOT_FOUND;

  int has_lock, has_head;
  uint64_t lock_start;
  pc_write_rec_t head;
  pc_status_t st;
  if (pc_meta_peek(mv, ml, &has_lock, &lock_start, &has_head, &head) != 0) {
    leveldb_free(mv);
    char name[160];
    return pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record of %s", s->path,
                        pc_cell_str(c, name, sizeof name));
  }
  if (has_lock && lock_start <= read_ts) {
    st = lock_from_meta(s, mv, ml, c, lock, err);
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
  /* no put or delete, ever (I3), or none before the head: nothing to seek */
  if (!has_head || head.first) return PC_NOT_FOUND;
  local_cursor_t it = {leveldb_create_iterator(s->db, s->ropts), 0};
  st = read_history(s, s->ropts, &it, c, read_ts, value, vlen, err);
  leveldb_iter_destroy(it.it);
  return st;
}

pc_status_t local_get_fresh(pc_store_t *base, const pc_cell_t *c, pc_ts_source_fn ts_source,
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

pc_status_t local_scan(pc_store_t *base, const char *table, const char *start, size_t slen,
                       const char *start_col, size_t sclen, const char *end, size_t elen,
                       uint64_t read_ts, size_t limit, pc_store_cell_fn fn, void *ctx,
                       pc_lock_info_t *lock, pc_error_t *err) {
  local_t *s = (local_t *)base;
  /* a one-phase commit anywhere in the range could be one read_ts covers:
   * a scan of one row (end is the row and a NUL byte) waits for that row's
   * stripe, any other scan for every stripe */
  if (start && end && elen == slen + 1 && end[slen] == '\0' && memcmp(start, end, slen) == 0) {
    pc_cell_t row = {table, start, slen, NULL, 0};
    local_wait_onepc(s, local_stripe(&row), read_ts);
  } else if (atomic_load_explicit(&s->onepc_active, memory_order_seq_cst) != 0) {
    /* none in flight: one that starts now takes its commit_ts after this
     * load, so after read_ts, and this snapshot cannot include it */
    for (uint32_t i = 0; i < PC_LATCHES && !local_wait_onepc(s, i, read_ts); i++) {
    }
  }
  pc_buf_t lo = {0}, hi = {0};
  if (local_range_keys(PC_KS_META, table, start, slen, start_col, sclen, end, elen, &lo, &hi) != 0)
    return local_nomem(err);
  const leveldb_snapshot_t *snap = leveldb_create_snapshot(s->db);
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_snapshot(ro, snap);
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  local_cursor_t hist = {NULL, 0};
  pc_key_decoded_t d = {0};
  pc_status_t st = PC_OK;
  size_t count = 0;
  unsigned steps = 0;
  for (leveldb_iter_seek(it, lo.p, lo.len); leveldb_iter_valid(it) && count < limit;
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (!local_below(k, kl, &hi)) break;
    if ((st = local_step(s, ++steps, "scan", err)) != PC_OK) break;
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
      st = lock_from_meta(s, v, vl, &c, lock, err);
      if (st == PC_LOCKED)
        pc_error_set(err, PC_LOCKED, "scan met a lock of transaction %llu",
                     (unsigned long long)lock_start);
      break;
    }
    char *val = NULL;
    size_t len = 0;
    pc_status_t r;
    if (!has_head) {
      r = PC_NOT_FOUND; /* no put or delete, ever (I3) */
    } else if (head.commit_ts <= read_ts) {
      r = value_of(s, ro, &c, &head, &val, &len, err);
    } else if (head.first) {
      r = PC_NOT_FOUND; /* no put or delete before the head */
    } else {
      if (!hist.it) hist.it = leveldb_create_iterator(s->db, ro);
      r = read_history(s, ro, &hist, &c, read_ts, &val, &len, err);
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
  if (e && st == PC_OK) st = local_ldb_error(s, e, "scan", err);
  else if (e) leveldb_free(e);
  if (hist.it) leveldb_iter_destroy(hist.it);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  leveldb_release_snapshot(s->db, snap);
  pc_key_decoded_free(&d);
  pc_buf_free(&lo);
  pc_buf_free(&hi);
  return st;
}
