/* store_raw.c — the raw view of the embedded store: every internal cell
 * (lock, commit records, data, notifications) as it is on disk, for
 * `percolator scan --raw` and tests; the scan of old locks that garbage
 * collection settles before it collects; and the lock index that scan reads
 * (in memory; saved at a clean close, rebuilt after a crash). The raw view shows
 * what LevelDB holds, not what a transaction reads. The cells of an ack
 * column (a system column of the row, core/keys.h) are shown under the
 * observed column, named by their observer, and their commit records as
 * acks.
 *
 * Neither walks over deleted entries it does not show: LevelDB's seeks and
 * steps pass every deleted key up to the next live one, so the raw view
 * reads each cell's data cells with a Get, its commit records through one
 * forward cursor, and the notifications and locks through the store's
 * in-memory copies of those key spaces' live keys. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
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

/* What the raw scan shows of a cell: the cell as reported (c itself, or for
 * an ack column the observed column, with observer set). */
typedef struct raw_cell_ctx {
  local_t *s;
  const leveldb_readoptions_t *ro;
  pc_raw_cell_fn fn;
  void *ctx;
  int stop;
  pc_cell_t shown;
  const char *observer;
  uint64_t *data; /* start_ts of the cell's data cells, as found */
  size_t ndata, datacap;
} raw_cell_ctx_t;

static void raw_fill(pc_raw_cell_t *rc, const raw_cell_ctx_t *x, pc_cell_kind_t kind) {
  memset(rc, 0, sizeof *rc);
  rc->kind = kind;
  rc->table = x->shown.table;
  rc->row = x->shown.row;
  rc->row_len = x->shown.rlen;
  rc->column = x->shown.col;
  rc->column_len = x->shown.clen;
  rc->observer = x->observer;
}

static int data_note(raw_cell_ctx_t *x, uint64_t start_ts) {
  if (x->ndata == x->datacap) {
    size_t nc = x->datacap ? x->datacap * 2 : 8;
    uint64_t *v = realloc(x->data, nc * sizeof *v);
    if (!v) return -1;
    x->data = v;
    x->datacap = nc;
  }
  x->data[x->ndata++] = start_ts;
  return 0;
}

/* Shows commit record rec of the cell at ts; a put whose value is in a data
 * cell notes it for raw_data. */
static pc_status_t raw_write(raw_cell_ctx_t *x, uint64_t ts, const pc_write_rec_t *rec,
                             pc_error_t *err) {
  pc_raw_cell_t rc;
  raw_fill(&rc, x, x->observer ? PC_CELL_ACK : PC_CELL_WRITE);
  rc.ts = ts;
  rc.write_kind = rec->kind;
  rc.start_ts = rec->start_ts;
  rc.value = rec->value;
  rc.value_len = rec->vlen;
  if (rec->kind == PC_WRITE_PUT && rec->has_inline == PC_VALUE_IN_DATA &&
      data_note(x, rec->start_ts) != 0)
    return local_nomem(err);
  x->stop = x->fn(x->ctx, &rc);
  return PC_OK;
}

/* The cell's commit records, newest first, from the scan's one forward
 * cursor over the 'w' space (local_cursor_seek): whatever the number of
 * cells, each deleted record of the scanned range is walked over once. The
 * head's record, which lives in the meta record m, is shown in its place
 * among them (a store of format 3 also has it in the 'w' space, without its
 * value: shown once, with the value). */
static pc_status_t raw_writes(raw_cell_ctx_t *x, local_cursor_t *w, const pc_cell_t *c,
                              const pc_meta_t *m, pc_buf_t *prefix, pc_key_decoded_t *d,
                              pc_error_t *err) {
  prefix->len = 0;
  if (pc_key_cell(prefix, PC_KS_WRITE, c) != 0) return local_nomem(err);
  int head_due = m->has_head;
  pc_status_t st = PC_OK;
  for (int valid = local_cursor_seek(w, prefix->p, prefix->len);
       valid && !x->stop && st == PC_OK; valid = local_cursor_next(w)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(w->it, &kl);
    if (kl != prefix->len + 8 || memcmp(k, prefix->p, prefix->len) != 0) break;
    const char *v = leveldb_iter_value(w->it, &vl);
    pc_write_rec_t rec;
    if (pc_key_decode(k, kl, d) != 0 || pc_write_decode(v, vl, &rec) != 0)
      return pc_error_set(err, PC_CORRUPTION, "store %s: malformed write record", x->s->path);
    if (head_due && d->ts <= m->head.commit_ts) {
      head_due = 0;
      st = raw_write(x, m->head.commit_ts, &m->head, err);
      if (st != PC_OK || x->stop || d->ts == m->head.commit_ts) continue;
    }
    st = raw_write(x, d->ts, &rec, err);
  }
  if (st == PC_OK && head_due && !x->stop) st = raw_write(x, m->head.commit_ts, &m->head, err);
  if (st != PC_OK) return st;
  return local_cursor_error(x->s, w, "raw scan", err);
}

static int cmp_ts_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The cell's data cells (values too large to inline), newest first: one Get
 * each, of the keys its lock and commit records point at. A seek into the
 * data space would instead walk to the next data key there is, which for a
 * cell whose values are all inline lies past the space's end: over every
 * deleted lock index entry that follows it. */
static pc_status_t raw_data(raw_cell_ctx_t *x, const pc_cell_t *c, pc_buf_t *key,
                            pc_error_t *err) {
  /* x->data is NULL while no cell of the scan had data cells */
  if (x->ndata > 1) qsort(x->data, x->ndata, sizeof *x->data, cmp_ts_desc);
  for (size_t i = 0; i < x->ndata && !x->stop; i++) {
    if (i && x->data[i] == x->data[i - 1]) continue;
    key->len = 0;
    if (pc_key_cell_ts(key, PC_KS_DATA, c, x->data[i]) != 0) return local_nomem(err);
    char *e = NULL;
    size_t vl = 0;
    char *v = leveldb_get(x->s->db, x->ro, key->p, key->len, &vl, &e);
    if (e) return local_ldb_error(x->s, e, "raw scan: read data", err);
    if (!v) continue; /* the raw view shows what is there */
    pc_raw_cell_t rc;
    raw_fill(&rc, x, PC_CELL_DATA);
    rc.ts = x->data[i];
    rc.value = v;
    rc.value_len = vl;
    x->stop = x->fn(x->ctx, &rc);
    leveldb_free(v);
  }
  return PC_OK;
}

static void raw_lock(raw_cell_ctx_t *x, const pc_lock_info_t *l) {
  pc_raw_cell_t rc;
  raw_fill(&rc, x, PC_CELL_LOCK);
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
  x->stop = x->fn(x->ctx, &rc);
}

/* The notifications of the scanned rows: from the store's index of the live
 * ones (notifyindex.h), each read back from the scan's snapshot, since a
 * walk of the notification key space would pass every one deleted since the
 * last compaction. They are ordered by bucket, as stored. */
static pc_status_t raw_notifications(raw_cell_ctx_t *x, const char *table, const char *start,
                                     size_t slen, const char *end, size_t elen,
                                     pc_key_decoded_t *d, pc_error_t *err) {
  pc_buf_t page = {0};
  pc_status_t st = PC_OK;
  if (pc_nindex_copy(x->s->nindex, NULL, 0, 0, NULL, 0, SIZE_MAX, &page) < 0) {
    pc_buf_free(&page);
    return local_nomem(err);
  }
  size_t pos = 0, kl;
  const char *k;
  char kind;
  while (!x->stop && st == PC_OK && pc_nindex_next(&page, &pos, &k, &kl, &kind)) {
    if (pc_key_decode(k, kl, d) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed notification", x->s->path);
      break;
    }
    if (table && strcmp(table, d->table.p) != 0) continue;
    if (table && !row_in(&d->row, start, slen, end, elen)) continue;
    char *e = NULL;
    size_t vl = 0;
    char *v = leveldb_get(x->s->db, x->ro, k, kl, &vl, &e);
    if (e) {
      st = local_ldb_error(x->s, e, "raw scan: read a notification", err);
      break;
    }
    if (!v) continue; /* written after the snapshot, or never (notifyindex.h) */
    unsigned char nk = vl == 1 ? (unsigned char)v[0] : 0xFF;
    leveldb_free(v);
    if (nk > PC_NOTIFY_BOTH) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed notification", x->s->path);
      break;
    }
    pc_raw_cell_t rc = {0};
    rc.kind = PC_CELL_NOTIFY;
    rc.table = d->table.p;
    rc.row = d->row.p;
    rc.row_len = d->row.len;
    rc.column = d->col.p;
    rc.column_len = d->col.len;
    rc.ts = d->ts;
    rc.weak = nk == PC_NOTIFY_WEAK;
    x->stop = x->fn(x->ctx, &rc);
    if (nk == PC_NOTIFY_BOTH && !x->stop) { /* one key, two notifications: the weak one next */
      rc.weak = 1;
      x->stop = x->fn(x->ctx, &rc);
    }
  }
  pc_buf_free(&page);
  return st;
}

/* Every internal cell of the range, cell by cell in key order (its lock, its
 * commit records, its data cells), then the notifications. The meta records
 * drive it: the meta key space has no deletes, and the key after its last
 * record is a fence (PC_KEY_META_END), so its walk reads only cells. */
pc_status_t local_raw_scan(pc_store_t *base, const char *table, const char *start, size_t slen,
                           const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                           pc_error_t *err) {
  local_t *s = (local_t *)base;
  pc_buf_t lo = {0}, hi = {0}, key = {0};
  if (local_range_keys(PC_KS_META, table, start, slen, NULL, 0, end, elen, &lo, &hi) != 0)
    return local_nomem(err);
  const leveldb_snapshot_t *snap = leveldb_create_snapshot(s->db);
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_snapshot(ro, snap);
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  local_cursor_t w = {leveldb_create_iterator(s->db, ro), 0};
  raw_cell_ctx_t x = {s, ro, fn, ctx, 0, {0}, NULL, NULL, 0, 0};
  pc_key_decoded_t d = {0}, wd = {0};
  pc_meta_t m = {0};
  pc_status_t st = PC_OK;
  unsigned steps = 0;
  for (leveldb_iter_seek(it, lo.p, lo.len); leveldb_iter_valid(it) && !x.stop && st == PC_OK;
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (!local_below(k, kl, &hi)) break;
    if ((st = local_step(s, ++steps, "raw scan", err)) != PC_OK) break;
    const char *v = leveldb_iter_value(it, &vl);
    pc_meta_free(&m);
    memset(&m, 0, sizeof m);
    if (pc_key_decode(k, kl, &d) != 0 || pc_meta_decode(v, vl, &m) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
      break;
    }
    pc_cell_t c = {d.table.p, d.row.p, d.row.len, d.col.p, d.col.len};
    x.shown = c;
    const char *ucol;
    size_t olen, uclen;
    /* an ack column: the observer's name is followed by its 0x00 in the column */
    if (pc_ack_column_split(c.col, c.clen, &x.observer, &olen, &ucol, &uclen) == 0) {
      x.shown.col = ucol;
      x.shown.clen = uclen;
    } else {
      x.observer = NULL;
    }
    x.ndata = 0;
    if (m.has_lock) {
      raw_lock(&x, &m.lock);
      if (m.lock.kind == PC_WRITE_PUT && !m.lock.has_inline && data_note(&x, m.lock.start_ts))
        st = local_nomem(err);
    }
    if (st == PC_OK && !x.stop) st = raw_writes(&x, &w, &c, &m, &key, &wd, err);
    if (st == PC_OK && !x.stop) st = raw_data(&x, &c, &key, err);
  }
  if (st == PC_OK) {
    char *e = NULL;
    leveldb_iter_get_error(it, &e);
    if (e) st = local_ldb_error(s, e, "raw scan", err);
  }
  if (st == PC_OK && !x.stop) st = raw_notifications(&x, table, start, slen, end, elen, &d, err);
  leveldb_iter_destroy(w.it);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  leveldb_release_snapshot(s->db, snap);
  pc_key_decoded_free(&d);
  pc_key_decoded_free(&wd);
  pc_meta_free(&m);
  free(x.data);
  pc_buf_free(&key);
  pc_buf_free(&lo);
  pc_buf_free(&hi);
  return st;
}

/* Reads the meta record of lock index entry k into *v (leveldb_free it;
 * NULL when there is none); mk is scratch. */
static pc_status_t lock_entry_meta(local_t *s, const char *k, size_t kl, pc_buf_t *mk, char **v,
                                   size_t *vl, const char *what, pc_error_t *err) {
  *v = NULL;
  *vl = 0;
  mk->len = 0;
  if (pc_buf_append(mk, k, kl) != 0) return local_nomem(err);
  mk->p[0] = PC_KS_META;
  char *e = NULL;
  *v = leveldb_get(s->db, s->ropts, mk->p, mk->len, vl, &e);
  return e ? local_ldb_error(s, e, what, err) : PC_OK;
}

/* Reads the lock index's live keys from its copy in memory (s->lindex),
 * then the meta record behind each: the cost follows the number of locks,
 * neither the number of cells nor that of the locks that came and went
 * (LevelDB would walk over each of those, deleted, until compaction). The
 * copy holds every key of a lock written before the call (a key enters it
 * before its batch is written and leaves after its delete was), so every
 * lock present when the call starts and still there when its meta record is
 * read is found; the meta record, read afresh, says what the lock is now. */
pc_status_t local_scan_locks(pc_store_t *base, uint64_t below, pc_store_lock_fn fn, void *ctx,
                             pc_error_t *err) {
  local_t *s = (local_t *)base;
  pc_buf_t page = {0}, mk = {0};
  if (pc_nindex_copy(s->lindex, NULL, 0, 0, NULL, 0, SIZE_MAX, &page) < 0) {
    pc_buf_free(&page);
    return local_nomem(err);
  }
  pc_key_decoded_t d = {0};
  pc_meta_t m = {0};
  pc_lock_info_t copy = {0};
  pc_status_t st = PC_OK;
  size_t pos = 0, kl;
  const char *k;
  char unused;
  unsigned steps = 0;
  while (pc_nindex_next(&page, &pos, &k, &kl, &unused)) {
    if ((st = local_step(s, ++steps, "lock scan", err)) != PC_OK) break;
    char *v = NULL;
    size_t vl = 0;
    if ((st = lock_entry_meta(s, k, kl, &mk, &v, &vl, "scan locks", err)) != PC_OK) break;
    if (!v) continue; /* the entry of a prewrite whose batch failed: nothing to settle */
    pc_meta_free(&m);
    memset(&m, 0, sizeof m);
    int bad = pc_key_decode(mk.p, mk.len, &d) != 0 || pc_meta_decode(v, vl, &m) != 0;
    leveldb_free(v);
    if (bad) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
      break;
    }
    if (!m.has_lock || m.lock.start_ts >= below) continue; /* settled meanwhile, or young */
    pc_cell_t c = {d.table.p, d.row.p, d.row.len, d.col.p, d.col.len};
    if (pc_lock_info_copy(&copy, &m.lock, &c) != 0) {
      st = local_nomem(err);
      break;
    }
    int stop = fn(ctx, &copy);
    pc_lock_info_free(&copy);
    if (stop) break;
  }
  pc_key_decoded_free(&d);
  pc_meta_free(&m);
  pc_buf_free(&mk);
  pc_buf_free(&page);
  return st;
}

/* ---- the lock index ------------------------------------------------------
 *
 * The locked cells, kept in memory (s->lindex) and not in the batches that
 * take and release the locks: a cell committed in two phases would
 * otherwise put an 'l' key at prewrite and delete it at commit, two of its
 * five LevelDB keys. The meta records are the truth; the index is theirs to
 * rebuild. A clean close saves it ('l' keys and the 'L' mark, one synced
 * write), the next open reads it back and removes it (one synced write)
 * before any operation, so 'L' is on disk only while the saved keys are the
 * locked cells exactly. Without it (the process died, or the store is from
 * before the index) the open walks the meta records once. */

/* Adds the removal of the saved index to b, and when fill, reads it into
 * s->lindex. */
static pc_status_t lock_index_load(local_t *s, leveldb_writebatch_t *b, int fill,
                                   pc_error_t *err) {
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  pc_status_t st = PC_OK;
  const char space = PC_KS_LOCK;
  for (leveldb_iter_seek(it, &space, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl < 1 || k[0] != PC_KS_LOCK) break;
    if (fill && pc_nindex_put(s->lindex, k, kl, 0) != 0) {
      st = local_nomem(err);
      break;
    }
    leveldb_writebatch_delete(b, k, kl);
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "read the lock index", err);
  else if (e) leveldb_free(e);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  return st;
}

/* Fills s->lindex from the meta records: one pass over them, as long as
 * reading the store once (logged, with the count and the time). */
static pc_status_t lock_index_rebuild(local_t *s, pc_error_t *err) {
  uint64_t t0 = pc_now_mono_ms(), metas = 0;
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  pc_buf_t lk = {0};
  pc_status_t st = PC_OK;
  const char space = PC_KS_META;
  for (leveldb_iter_seek(it, &space, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, ml;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl < 1 || k[0] != PC_KS_META) break;
    metas++;
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
    if (pc_nindex_put(s->lindex, lk.p, lk.len, 0) != 0) {
      st = local_nomem(err);
      break;
    }
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "rebuild the lock index", err);
  else if (e) leveldb_free(e);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  pc_buf_free(&lk);
  if (st == PC_OK && metas > 0) /* else a new store: nothing to say */
    pc_log(PC_LOG_INFO,
           "store %s: no lock index saved (the last close was not clean, or the store was "
           "streamed from a replica): rebuilt it from "
           "%llu meta records in %llu ms, %zu locks",
           s->path, (unsigned long long)metas, (unsigned long long)(pc_now_mono_ms() - t0),
           pc_nindex_count(s->lindex));
  return st;
}

pc_status_t local_lock_index_open(local_t *s, pc_error_t *err) {
  char *e = NULL;
  size_t vl = 0;
  const char *mark = PC_KEY_LOCK_INDEX_SAVED;
  char *v = leveldb_get(s->db, s->ropts, mark, strlen(mark), &vl, &e);
  if (e) return local_ldb_error(s, e, "read the lock index mark", err);
  int saved = v != NULL;
  leveldb_free(v);
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  /* with the mark: the saved index, removed with it. Without: the meta
   * records, and the removal of whatever 'l' keys lie about (an older
   * version kept them in every batch, so a store of it has them). */
  pc_status_t st = lock_index_load(s, b, saved, err);
  if (st == PC_OK && !saved) st = lock_index_rebuild(s, err);
  if (st == PC_OK) {
    leveldb_writebatch_delete(b, mark, strlen(mark));
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(wo, 1); /* before any batch that could make it stale */
    leveldb_write(s->db, wo, b, &e);
    leveldb_writeoptions_destroy(wo);
    if (e) st = local_ldb_error(s, e, "remove the saved lock index", err);
  }
  leveldb_writebatch_destroy(b);
  return st;
}

pc_status_t local_lock_index_save(local_t *s, pc_error_t *err) {
  pc_buf_t page = {0}, mk = {0};
  if (pc_nindex_copy(s->lindex, NULL, 0, 0, NULL, 0, SIZE_MAX, &page) < 0) {
    pc_buf_free(&page);
    return local_nomem(err);
  }
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  pc_status_t st = PC_OK;
  size_t pos = 0, kl;
  const char *k;
  char unused;
  while (st == PC_OK && pc_nindex_next(&page, &pos, &k, &kl, &unused)) {
    /* the copy may hold a cell whose lock's batch failed: only locks go */
    char *mv = NULL;
    size_t ml = 0;
    if ((st = lock_entry_meta(s, k, kl, &mk, &mv, &ml, "save the lock index", err)) != PC_OK)
      break;
    int has_lock = 0, has_head;
    uint64_t lock_start;
    pc_write_rec_t head;
    int bad = mv && pc_meta_peek(mv, ml, &has_lock, &lock_start, &has_head, &head) != 0;
    leveldb_free(mv);
    if (bad) st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed meta record", s->path);
    else if (has_lock) leveldb_writebatch_put(b, k, kl, "", 0);
  }
  if (st == PC_OK) {
    const char *mark = PC_KEY_LOCK_INDEX_SAVED;
    leveldb_writebatch_put(b, mark, strlen(mark), "", 0);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(wo, 1);
    char *e = NULL;
    leveldb_write(s->db, wo, b, &e);
    leveldb_writeoptions_destroy(wo);
    if (e) st = local_ldb_error(s, e, "save the lock index", err);
  }
  leveldb_writebatch_destroy(b);
  pc_buf_free(&mk);
  pc_buf_free(&page);
  return st;
}
