/* store_raw.c — the raw view of the embedded store: every internal cell
 * (lock, commit records, data, notifications) as it is on disk, for
 * `percolator scan --raw` and tests; and the scan of old locks that garbage
 * collection settles before it collects (through the lock index, built here
 * for a store that has none). Neither takes a snapshot's view:
 * they show what LevelDB holds. The cells of an ack column (a system column
 * of the row, core/keys.h) are shown under the observed column, named by
 * their observer, and their commit records as acks. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/store_local.h"

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

/* Emits every cell of one kind stored under the cell's prefix in space;
 * shown is the cell as reported (c itself, or for an ack column the
 * observed column, with observer set). */
static pc_status_t raw_cell_space(local_t *s, leveldb_iterator_t *it, char space,
                                  const pc_cell_t *c, const pc_cell_t *shown,
                                  const char *observer, const pc_meta_t *m, pc_raw_cell_fn fn,
                                  void *ctx, int *stop, pc_error_t *err) {
  pc_buf_t prefix = {0};
  if (pc_key_cell(&prefix, space, c) != 0) return local_nomem(err);
  pc_key_decoded_t d = {0};
  pc_status_t st = PC_OK;
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
    pc_raw_cell_t rc = {0};
    rc.table = shown->table;
    rc.row = shown->row;
    rc.row_len = shown->rlen;
    rc.column = shown->col;
    rc.column_len = shown->clen;
    rc.ts = d.ts;
    rc.observer = observer;
    if (space == PC_KS_WRITE) {
      pc_write_rec_t w;
      if (pc_write_decode(v, vl, &w) != 0) {
        st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", s->path);
        break;
      }
      rc.kind = observer ? PC_CELL_ACK : PC_CELL_WRITE;
      rc.write_kind = w.kind;
      rc.start_ts = w.start_ts;
      rc.value = w.value;
      rc.value_len = w.vlen;
      if (w.has_inline == PC_VALUE_IN_HEAD && m->has_head && m->head.commit_ts == w.commit_ts) {
        rc.value = m->head.value; /* the newest value lives in the meta record */
        rc.value_len = m->head.vlen;
      }
    } else {
      rc.kind = PC_CELL_DATA;
      rc.value = v;
      rc.value_len = vl;
    }
    *stop = fn(ctx, &rc);
  }
  pc_key_decoded_free(&d);
  pc_buf_free(&prefix);
  return st;
}

pc_status_t local_raw_scan(pc_store_t *base, const char *table, const char *start,
                                  size_t slen, const char *end, size_t elen, pc_raw_cell_fn fn,
                                  void *ctx, pc_error_t *err) {
  local_t *s = (local_t *)base;
  pc_buf_t lo = {0}, hi = {0};
  if (local_range_keys(PC_KS_META, table, start, slen, NULL, 0, end, elen, &lo, &hi) != 0)
    return local_nomem(err);
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
    if (!local_below(k, kl, &hi)) break;
    const char *v = leveldb_iter_value(it, &vl);
    pc_meta_free(&m);
    memset(&m, 0, sizeof m);
    if (pc_key_decode(k, kl, &d) != 0 || pc_meta_decode(v, vl, &m) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
      break;
    }
    pc_cell_t c = {d.table.p, d.row.p, d.row.len, d.col.p, d.col.len}, shown = c;
    const char *observer, *ucol;
    size_t olen, uclen;
    /* an ack column: the observer's name is followed by its 0x00 in the column */
    if (pc_ack_column_split(c.col, c.clen, &observer, &olen, &ucol, &uclen) == 0) {
      shown.col = ucol;
      shown.clen = uclen;
    } else {
      observer = NULL;
    }
    if (m.has_lock) {
      const pc_lock_info_t *l = &m.lock;
      pc_raw_cell_t rc = {0};
      rc.kind = PC_CELL_LOCK;
      rc.table = shown.table;
      rc.row = shown.row;
      rc.row_len = shown.rlen;
      rc.column = shown.col;
      rc.column_len = shown.clen;
      rc.observer = observer;
      rc.weak = l->weak;
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
    const char spaces[] = {PC_KS_WRITE, PC_KS_DATA};
    for (size_t i = 0; i < sizeof spaces && !stop && st == PC_OK; i++)
      st = raw_cell_space(s, sub, spaces[i], &c, &shown, observer, &m, fn, ctx, &stop, err);
  }
  /* notifications: their own key space, ordered by bucket */
  pc_buf_t np = {0};
  if (st == PC_OK && pc_buf_u8(&np, PC_KS_NOTIFY) != 0) st = local_nomem(err);
  for (leveldb_iter_seek(it, np.p, np.len); st == PC_OK && !stop && leveldb_iter_valid(it);
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (k[0] != PC_KS_NOTIFY) break;
    const char *v = leveldb_iter_value(it, &vl);
    unsigned char nk = vl == 1 ? (unsigned char)v[0] : 0xFF;
    if (pc_key_decode(k, kl, &d) != 0 || nk > PC_NOTIFY_BOTH) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed notification", s->path);
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
    rc.weak = nk == PC_NOTIFY_WEAK;
    stop = fn(ctx, &rc);
    if (nk == PC_NOTIFY_BOTH && !stop) { /* one key, two notifications: the weak one next */
      rc.weak = 1;
      stop = fn(ctx, &rc);
    }
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

/* Walks the lock index (keys.h) in one snapshot and reads the meta record
 * behind each entry: the cost follows the number of locks, not of cells. */
pc_status_t local_scan_locks(pc_store_t *base, uint64_t below, pc_store_lock_fn fn, void *ctx,
                             pc_error_t *err) {
  local_t *s = (local_t *)base;
  const leveldb_snapshot_t *snap = leveldb_create_snapshot(s->db);
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_readoptions_set_snapshot(ro, snap);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  pc_key_decoded_t d = {0};
  pc_meta_t m = {0};
  pc_lock_info_t copy = {0};
  pc_buf_t mk = {0};
  pc_status_t st = PC_OK;
  const char space = PC_KS_LOCK;
  for (leveldb_iter_seek(it, &space, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl < 1 || k[0] != PC_KS_LOCK) break;
    mk.len = 0;
    if (pc_buf_append(&mk, k, kl) != 0) {
      st = local_nomem(err);
      break;
    }
    mk.p[0] = PC_KS_META;
    char *e = NULL;
    size_t vl = 0;
    char *v = leveldb_get(s->db, ro, mk.p, mk.len, &vl, &e);
    if (e) {
      st = local_ldb_error(s, e, "scan locks", err);
      break;
    }
    if (!v) continue; /* cannot be (one batch writes both); nothing to settle */
    pc_meta_free(&m);
    memset(&m, 0, sizeof m);
    int bad = pc_key_decode(mk.p, mk.len, &d) != 0 || pc_meta_decode(v, vl, &m) != 0;
    leveldb_free(v);
    if (bad) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
      break;
    }
    if (!m.has_lock || m.lock.start_ts >= below) continue;
    pc_cell_t c = {d.table.p, d.row.p, d.row.len, d.col.p, d.col.len};
    if (pc_lock_info_copy(&copy, &m.lock, &c) != 0) {
      st = local_nomem(err);
      break;
    }
    int stop = fn(ctx, &copy);
    pc_lock_info_free(&copy);
    if (stop) break;
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "scan locks", err);
  else if (e) leveldb_free(e);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  leveldb_release_snapshot(s->db, snap);
  pc_key_decoded_free(&d);
  pc_meta_free(&m);
  pc_buf_free(&mk);
  return st;
}

pc_status_t local_lock_index_build(local_t *s, pc_error_t *err) {
  char *e = NULL;
  size_t vl = 0;
  const char *marker = PC_KEY_LOCK_INDEX_BUILT;
  char *v = leveldb_get(s->db, s->ropts, marker, strlen(marker), &vl, &e);
  if (e) return local_ldb_error(s, e, "read the lock index marker", err);
  if (v) {
    leveldb_free(v);
    return PC_OK;
  }
  /* a store from before the index: one pass over the meta records */
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  pc_buf_t lk = {0};
  pc_status_t st = PC_OK;
  const char space = PC_KS_META;
  for (leveldb_iter_seek(it, &space, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, ml;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl < 1 || k[0] != PC_KS_META) break;
    const char *mv = leveldb_iter_value(it, &ml);
    int has_lock, has_head;
    uint64_t lock_start;
    pc_write_rec_t head;
    if (pc_meta_peek(mv, ml, &has_lock, &lock_start, &has_head, &head) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
      break;
    }
    if (!has_lock) continue;
    lk.len = 0;
    if (pc_buf_append(&lk, k, kl) != 0) {
      st = local_nomem(err);
      break;
    }
    lk.p[0] = PC_KS_LOCK;
    leveldb_writebatch_put(b, lk.p, lk.len, "", 0);
  }
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "build the lock index", err);
  else if (e) leveldb_free(e);
  if (st == PC_OK) {
    leveldb_writebatch_put(b, marker, strlen(marker), "", 0);
    st = local_apply(s, b, s->wopts, err);
  }
  leveldb_writebatch_destroy(b);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  pc_buf_free(&lk);
  return st;
}
