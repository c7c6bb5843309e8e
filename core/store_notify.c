/* store_notify.c — the notifications of the embedded store:
 * finding them bucket by bucket (scan_notify) and deleting a cell's older
 * ones once its observers have run (clear_notify).
 *
 * A notification is the key 'n' B T R C ~ts (keys.h), B the hash bucket of
 * the row, with a one-byte value: PC_NOTIFY_STRONG, PC_NOTIFY_WEAK, or
 * PC_NOTIFY_BOTH when one commit wrote both. The commits that write them are
 * in store_txn.c, in the same batch as the commit record. Scanning reads
 * only this key space, never the data.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/store_local.h"

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
  pc_buf_t start = {0}, end = {0}, last = {0};
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
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropts);
  pc_key_decoded_t d = {0};
  pc_status_t st = PC_OK;
  size_t count = 0;
  int stop = 0;
  for (leveldb_iter_seek(it, seek->p, seek->len); leveldb_iter_valid(it) && !stop && count < limit;
       leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    if (!local_below(k, kl, &end)) break;
    const char *v = leveldb_iter_value(it, &vl);
    int is_after = at_after && kl == last.len && memcmp(k, last.p, kl) == 0;
    at_after = 0;
    unsigned char kind = vl == 1 ? (unsigned char)v[0] : 0xFF;
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
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "scan notifications", err);
  else if (e) leveldb_free(e);
  leveldb_iter_destroy(it);
  pc_key_decoded_free(&d);
  pc_buf_free(&start);
  pc_buf_free(&end);
  pc_buf_free(&last);
  return st;
}

pc_status_t local_clear_notify(pc_store_t *base, const pc_cell_t *c, uint64_t below,
                               pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (below <= 1) return PC_OK; /* 0 is never a timestamp: nothing lies below 1 */
  rowop_t op;
  pc_status_t st = local_rowop_begin(&op, s, c, sizeof *c, 1, "clear_notify", err);
  if (st != PC_OK) return st;
  /* the cell's keys sort newest first: from below - 1 down to the oldest */
  if (pc_key_notify(&op.key, c, below - 1) != 0) return local_rowop_end(&op, local_nomem(err), err);
  size_t plen = op.key.len - 8;
  size_t n = 0;
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropts);
  for (leveldb_iter_seek(it, op.key.p, op.key.len); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl != plen + 8 || memcmp(k, op.key.p, plen) != 0) break;
    leveldb_writebatch_delete(op.b, k, kl);
    n++;
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e) st = local_ldb_error(s, e, "clear notifications", err);
  leveldb_iter_destroy(it);
  /* not synced (store.h): a lost delete only makes observers run again */
  if (st == PC_OK && n) st = local_apply(s, op.b, s->gc_wopts, err);
  return local_rowop_end(&op, st, err); /* op.writes == 0: applied above */
}
