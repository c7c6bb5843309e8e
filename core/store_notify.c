/* store_notify.c — the notifications of the embedded store:
 * finding them bucket by bucket (scan_notify) and deleting a cell's older
 * ones once its registered observers have covered them (clear_notify;
 * store_observers.c checks the observers the caller accounts for).
 *
 * A notification is the key 'n' B T R C ~ts (keys.h), B the hash bucket of
 * the row, with a one-byte value: PC_NOTIFY_STRONG, PC_NOTIFY_WEAK, or
 * PC_NOTIFY_BOTH when one commit wrote both. The commits that write them are
 * in store_txn.c, in the same batch as the commit record. Scanning reads
 * the store's index of the live keys (notifyindex.h), filled from this key
 * space at open and kept by every write: LevelDB keeps a deleted key as a
 * tombstone until compaction, and a scan of the key space would walk over
 * every notification deleted since.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/store_local.h"

pc_status_t local_notify_index_build(local_t *s, pc_error_t *err) {
  pc_buf_t lo = {0}, hi = {0};
  if (pc_key_notify_bucket(&lo, 0) || pc_key_notify_bucket(&hi, PC_NOTIFY_BUCKETS)) {
    pc_buf_free(&lo);
    pc_buf_free(&hi);
    return local_nomem(err);
  }
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, ro);
  pc_status_t st = PC_OK;
  for (leveldb_iter_seek(it, lo.p, lo.len); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (!local_below(k, kl, &hi)) break;
    const char *v = leveldb_iter_value(it, &vl);
    if (pc_nindex_put(s->nindex, k, kl, vl == 1 ? v[0] : (char)0xFF) != 0) {
      st = local_nomem(err);
      break;
    }
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "read the notifications", err);
  else if (e) leveldb_free(e);
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  pc_buf_free(&lo);
  pc_buf_free(&hi);
  return st;
}

pc_status_t local_scan_notify(pc_store_t *base, uint32_t lo, uint32_t hi,
                              const pc_notification_t *after, size_t limit,
                              pc_store_notify_fn fn, void *ctx, pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (lo >= hi || hi > PC_NOTIFY_BUCKETS)
    return pc_error_set(err, PC_INVALID, "scan_notify: bucket range [%u, %u) is not within [0, %u)",
                        lo, hi, PC_NOTIFY_BUCKETS);
  if (limit == 0 || limit > PC_STORE_SCAN_LIMIT_MAX)
    return pc_error_set(err, PC_INVALID, "scan_notify: limit %zu is not within 1..%u", limit,
                        PC_STORE_SCAN_LIMIT_MAX);
  pc_buf_t start = {0}, end = {0}, last = {0}, page = {0};
  if (pc_key_notify_bucket(&start, lo) || pc_key_notify_bucket(&end, hi) ||
      (after && pc_key_notify(&last, &after->cell, after->ts))) {
    pc_buf_free(&start);
    pc_buf_free(&end);
    pc_buf_free(&last);
    return local_nomem(err);
  }
  /* resume at after's key when it lies in the range: that key itself is
   * passed over, unless after was the strong half of a key holding both */
  int at_after = after && pc_bytes_cmp(last.p, last.len, start.p, start.len) >= 0;
  const pc_buf_t *seek = at_after ? &last : &start;
  /* the live keys, from the index (each key yields at most two
   * notifications, and only the first can yield none) */
  long got = pc_nindex_copy(s->nindex, seek->p, seek->len, 0, end.p, end.len, limit + 1, &page);
  pc_status_t st = got < 0 ? local_nomem(err) : PC_OK;
  pc_key_decoded_t d = {0};
  size_t count = 0, pos = 0;
  int stop = 0;
  const char *k;
  size_t kl;
  char v;
  while (st == PC_OK && !stop && count < limit && pc_nindex_next(&page, &pos, &k, &kl, &v)) {
    int is_after = at_after && kl == last.len && memcmp(k, last.p, kl) == 0;
    at_after = 0;
    unsigned char kind = (unsigned char)v;
    if (pc_key_decode(k, kl, &d) != 0 || kind > PC_NOTIFY_BOTH) {
      st = pc_error_set(err, PC_CORRUPTION, "store %s: malformed notification", s->path);
      break;
    }
    int strong = kind != PC_NOTIFY_WEAK, weak = kind != PC_NOTIFY_STRONG;
    if (is_after) { /* delivered already, but for the weak half of a key holding both */
      weak = kind == PC_NOTIFY_BOTH && !after->weak;
      strong = 0;
    }
    pc_notification_t n = {{d.table.p, d.row.p, d.row.len, d.col.p, d.col.len}, d.ts, 0,
                           d.bucket};
    if (strong) {
      count++;
      stop = fn(ctx, &n);
    }
    if (weak && !stop && count < limit) {
      n.weak = 1;
      count++;
      stop = fn(ctx, &n);
    }
  }
  pc_key_decoded_free(&d);
  pc_buf_free(&start);
  pc_buf_free(&end);
  pc_buf_free(&last);
  pc_buf_free(&page);
  return st;
}

pc_status_t local_notify_deletes(local_t *s, leveldb_writebatch_t *b, const pc_cell_t *c,
                                 uint64_t below, pc_buf_t *key, size_t *n, pc_error_t *err) {
  *n = 0;
  if (below <= 1) return PC_OK; /* 0 is never a timestamp: nothing lies below 1 */
  /* the cell's keys sort newest first: from below - 1 down to the oldest;
   * the index holds every live one (and deleting a key LevelDB lacks is
   * harmless) */
  key->len = 0;
  if (pc_key_notify(key, c, below - 1) != 0) return local_nomem(err);
  pc_buf_t page = {0};
  long got = pc_nindex_copy(s->nindex, key->p, key->len, key->len - 8, NULL, 0, SIZE_MAX, &page);
  if (got < 0) {
    pc_buf_free(&page);
    return local_nomem(err);
  }
  size_t pos = 0, kl;
  const char *k;
  char kind;
  while (pc_nindex_next(&page, &pos, &k, &kl, &kind)) {
    leveldb_writebatch_delete(b, k, kl);
    (*n)++;
  }
  pc_buf_free(&page);
  return PC_OK;
}

pc_status_t local_clear_notify(pc_store_t *base, pc_notify_clear_t *clears, size_t n,
                               pc_error_t *err) {
  local_t *s = (local_t *)base;
  for (size_t i = 0; i < n; i++) {
    clears[i].done = 0;
    clears[i].missing[0] = '\0';
  }
  if (n == 0) return PC_OK;
  rowop_t op; /* every cell's row latched, for one batch */
  pc_status_t st = local_rowop_begin(&op, s, &clears[0].cell, sizeof *clears, n, "clear_notify",
                                     err);
  if (st != PC_OK) return st;
  size_t deletes = 0;
  local_observers_hold(s); /* no registration between the checks and the write */
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    if (!local_observers_cover(s, &clears[i])) continue;
    size_t k = 0;
    st = local_notify_deletes(s, op.b, &clears[i].cell, clears[i].below, &op.key, &k, err);
    deletes += k;
    clears[i].done = 1; /* unless the write below fails */
  }
  /* not synced (store.h): a lost delete only makes observers run again */
  if (st == PC_OK && deletes) st = local_apply(s, op.b, NULL, s->gc_wopts, err);
  for (size_t i = 0; st != PC_OK && i < n; i++) clears[i].done = 0;
  local_observers_release(s);
  return local_rowop_end(&op, st, err); /* op.writes == 0: applied above */
}
