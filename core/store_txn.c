/* store_txn.c — the transaction protocol's row operations on the embedded
 * store: prewrite, commit, rollback, check_txn (the fate of a
 * transaction, decided on its primary), heartbeat (a live owner keeping its
 * primary lock), and one-phase commit of a transaction of this store. Each is
 * one row operation (store_local.h's rowop): latches, checks on the meta
 * records, one WriteBatch.
 *
 * The meta record of a cell holds its lock and its newest commit, the head
 * (value included when small), and latest_any, the newest write record of any
 * kind; prewrite's conflict check reads only the meta record. A commit's
 * record ('w' key) is written when a newer commit replaces it as the head,
 * with its value: until then the meta record is its only copy (format 4;
 * docs/ARCHITECTURE.md, "The head's commit record"). Each version's value is
 * stored once.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/store_local.h"

/* Writes the notifications of a commit of cell c at ts into batch b: strong
 * (an observed put or delete), weak (a weak notification), both, or none. */
static pc_status_t put_notify(leveldb_writebatch_t *b, const pc_cell_t *c, uint64_t ts,
                              int strong, int weak, pc_buf_t *kb, pc_error_t *err) {
  if (!strong && !weak) return PC_OK;
  kb->len = 0;
  if (pc_key_notify(kb, c, ts) != 0) return local_nomem(err);
  const char v = (char)(strong && weak ? PC_NOTIFY_BOTH : weak ? PC_NOTIFY_WEAK : PC_NOTIFY_STRONG);
  leveldb_writebatch_put(b, kb->p, kb->len, &v, 1);
  return PC_OK;
}

/* The commit record that a NOTIFY lock leaves when it is its transaction's
 * primary: no value, no change of the head, but it is the transaction's
 * fate (check_txn finds it) and it raises latest_any like any record. */
static pc_status_t put_notify_record(leveldb_writebatch_t *b, const pc_cell_t *c, pc_meta_t *m,
                                     uint64_t start_ts, uint64_t commit_ts, pc_buf_t *kb,
                                     pc_buf_t *vb, pc_error_t *err) {
  pc_write_rec_t w = {PC_WRITE_NOTIFY, start_ts, commit_ts, PC_VALUE_IN_DATA, NULL, 0, 0};
  pc_status_t st = local_put_write(b, c, commit_ts, &w, kb, vb, err);
  if (st == PC_OK && commit_ts > m->latest_any) m->latest_any = commit_ts;
  return st;
}

/* Whether lock l (on cell c) names c as its primary. */
static int is_own_primary(const pc_lock_info_t *l, const pc_cell_t *c) {
  return strcmp(l->ptable.p ? l->ptable.p : "", c->table) == 0 &&
         pc_bytes_cmp(l->prow.p, l->prow.len, c->row, c->rlen) == 0 &&
         pc_bytes_cmp(l->pcol.p, l->pcol.len, c->col, c->clen) == 0;
}

/* The checks of prewrite on one cell (meta m): another transaction's lock is
 * PC_LOCKED (*lock_out set), a write at or after start_ts PC_CONFLICT. */
static pc_status_t check_free(const pc_cell_t *c, const pc_meta_t *m, uint64_t start_ts,
                              pc_lock_info_t *lock_out, pc_error_t *err) {
  char name[160];
  if (m->has_lock) {
    if (pc_lock_info_copy(lock_out, &m->lock, c) != 0) return local_nomem(err);
    return pc_error_set(err, PC_LOCKED, "%s is locked by transaction %llu",
                        pc_cell_str(c, name, sizeof name),
                        (unsigned long long)m->lock.start_ts);
  }
  if (m->latest_any == start_ts)
    return pc_error_set(err, PC_CONFLICT, "%s: transaction %llu was already rolled back",
                        pc_cell_str(c, name, sizeof name), (unsigned long long)start_ts);
  if (m->latest_any > start_ts)
    return pc_error_set(err, PC_CONFLICT, "write conflict on %s: written at %llu, after start %llu",
                        pc_cell_str(c, name, sizeof name),
                        (unsigned long long)m->latest_any, (unsigned long long)start_ts);
  return PC_OK;
}

/* A value over PC_INLINE_MAX goes to data(c, start_ts). */
static pc_status_t put_data(leveldb_writebatch_t *b, const pc_mutation_t *mu, uint64_t start_ts,
                            pc_buf_t *kb, pc_error_t *err) {
  if (mu->kind != PC_WRITE_PUT || mu->vlen <= PC_INLINE_MAX) return PC_OK;
  kb->len = 0;
  if (pc_key_cell_ts(kb, PC_KS_DATA, &mu->cell, start_ts) != 0) return local_nomem(err);
  leveldb_writebatch_put(b, kb->p, kb->len, mu->value, mu->vlen);
  return PC_OK;
}

pc_status_t local_prewrite(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                           const pc_lock_spec_t *spec, pc_lock_info_t *lock_out,
                           pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (n == 0) return PC_OK;
  rowop_t op;
  pc_status_t st = local_rowop_begin(&op, s, &muts[0].cell, sizeof *muts, n, "prewrite", err);
  if (st != PC_OK) return st;
  pc_meta_t *m = &op.m;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    const pc_mutation_t *mu = &muts[i];
    int found;
    st = local_read_meta(s, &mu->cell, &op.key, m, &found, err);
    if (st != PC_OK) break;
    if (m->has_lock && m->lock.start_ts == spec->start_ts) continue; /* re-sent prewrite */
    if ((st = check_free(&mu->cell, m, spec->start_ts, lock_out, err)) != PC_OK) break;
    pc_lock_info_t *l = &m->lock;
    m->has_lock = 1;
    l->start_ts = spec->start_ts;
    l->kind = mu->kind;
    l->ttl_ms = spec->ttl_ms;
    l->session = spec->session;
    /* shown in the raw view; the commit asks the store's set again */
    l->observed = mu->kind != PC_WRITE_NOTIFY && local_strongly_observed(s, &mu->cell);
    l->weak = mu->weak || mu->kind == PC_WRITE_NOTIFY;
    l->ptable.len = l->prow.len = l->pcol.len = l->value.len = 0;
    if (pc_buf_append(&l->ptable, spec->primary.table, strlen(spec->primary.table)) ||
        pc_buf_append(&l->prow, spec->primary.row, spec->primary.rlen) ||
        pc_buf_append(&l->pcol, spec->primary.col, spec->primary.clen)) {
      st = local_nomem(err);
      break;
    }
    l->has_inline = mu->kind == PC_WRITE_PUT && mu->vlen <= PC_INLINE_MAX;
    if (l->has_inline && pc_buf_append(&l->value, mu->value, mu->vlen) != 0) {
      st = local_nomem(err);
      break;
    }
    if ((st = put_data(op.b, mu, spec->start_ts, &op.kb, err)) != PC_OK) break;
    st = local_put_meta(op.b, &op.key, m, &op.vb, &op.locks, err);
    op.writes++;
  }
  return local_rowop_end(&op, st, err);
}

/* Makes commit w the head of cell c (meta m), in batch b. The head lives in
 * the meta record only: its commit record is written when a newer commit
 * replaces it, complete with its value, since snapshots older than the new
 * head read it there (a store of format 3 also holds a value-less record of
 * its head, which this rewrites). w->value must stay valid until m is
 * encoded. */
static pc_status_t set_head(leveldb_writebatch_t *b, const pc_cell_t *c, pc_meta_t *m,
                            const pc_write_rec_t *w, pc_buf_t *kb, pc_buf_t *vb,
                            pc_error_t *err) {
  pc_status_t st;
  if (m->has_head &&
      (st = local_put_write(b, c, m->head.commit_ts, &m->head, kb, vb, err)) != PC_OK)
    return st;
  m->head = *w;
  m->head.first = !m->has_head; /* no put or delete before it: old snapshots need no seek */
  m->has_head = 1;
  if (w->commit_ts > m->latest_any) m->latest_any = w->commit_ts;
  return PC_OK;
}

/* Whether a commit of kind on cell c writes a strong notification: a put or
 * a delete of a column that a strong observer in the store's set observes,
 * asked when the commit is applied (store_observers.c says why), or whose
 * lock an earlier version marked observed. */
static int notifies_strongly(local_t *s, const pc_cell_t *c, pc_write_kind_t kind, int marked) {
  return kind != PC_WRITE_NOTIFY && (marked || local_strongly_observed(s, c));
}

/* Commits the lock held in m (of start_ts) on cell c into batch b. A put or
 * delete of an observed column writes its strong notification in the same
 * batch, and a lock that carries a weak notification its weak one. A NOTIFY
 * lock writes only its notification (and, as a primary, its record). */
static pc_status_t commit_locked(local_t *s, leveldb_writebatch_t *b, const pc_cell_t *c,
                                 pc_meta_t *m, const pc_buf_t *key, uint64_t commit_ts,
                                 pc_buf_t *kb, pc_buf_t *vb, pc_buf_t *locks, pc_error_t *err) {
  const pc_lock_info_t *l = &m->lock;
  pc_status_t st = put_notify(b, c, commit_ts, notifies_strongly(s, c, l->kind, l->observed),
                              l->weak || l->kind == PC_WRITE_NOTIFY, kb, err);
  if (st != PC_OK) return st;
  if (l->kind == PC_WRITE_NOTIFY) {
    if (is_own_primary(l, c))
      st = put_notify_record(b, c, m, l->start_ts, commit_ts, kb, vb, err);
  } else {
    pc_write_rec_t w = {l->kind, l->start_ts, commit_ts,
                        l->has_inline ? PC_VALUE_INLINE : PC_VALUE_IN_DATA, l->value.p,
                        l->value.len, 0};
    st = set_head(b, c, m, &w, kb, vb, err); /* value stays in m->lock.value */
  }
  if (st != PC_OK) return st;
  m->has_lock = 0;
  return local_put_meta(b, key, m, vb, locks, err);
}

/* Rolls back transaction start_ts on cell c (m = its meta) into batch b. */
static pc_status_t rollback_cell(leveldb_writebatch_t *b, const pc_cell_t *c, pc_meta_t *m,
                                 const pc_buf_t *key, uint64_t start_ts, pc_buf_t *kb,
                                 pc_buf_t *vb, pc_buf_t *locks, pc_error_t *err) {
  if (m->has_lock && m->lock.start_ts == start_ts) {
    if (m->lock.kind == PC_WRITE_PUT && !m->lock.has_inline) {
      kb->len = 0;
      if (pc_key_cell_ts(kb, PC_KS_DATA, c, start_ts) != 0) return local_nomem(err);
      leveldb_writebatch_delete(b, kb->p, kb->len);
    }
    m->has_lock = 0;
  }
  pc_write_rec_t w = {PC_WRITE_ROLLBACK, start_ts, start_ts, 0, NULL, 0, 0};
  pc_status_t st = local_put_write(b, c, start_ts, &w, kb, vb, err);
  if (st != PC_OK) return st;
  if (start_ts > m->latest_any) m->latest_any = start_ts;
  return local_put_meta(b, key, m, vb, locks, err);
}

pc_status_t local_commit(pc_store_t *base, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                         uint64_t commit_ts, pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (n == 0) return PC_OK;
  if (commit_ts <= start_ts)
    return pc_error_set(err, PC_INVALID, "commit: commit_ts %llu is not after start_ts %llu",
                        (unsigned long long)commit_ts, (unsigned long long)start_ts);
  rowop_t op;
  pc_status_t st = local_rowop_begin(&op, s, cells, sizeof *cells, n, "commit", err);
  if (st != PC_OK) return st;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    int found;
    st = local_read_meta(s, &cells[i], &op.key, &op.m, &found, err);
    if (st != PC_OK) break;
    if (op.m.has_lock && op.m.lock.start_ts == start_ts) {
      st = commit_locked(s, op.b, &cells[i], &op.m, &op.key, commit_ts, &op.kb, &op.vb,
                         &op.locks, err);
      op.writes++;
      continue;
    }
    pc_write_rec_t w;
    st = local_find_write_by_start(s, &cells[i], &op.m, start_ts, &w, &op.hold, &found, err);
    if (st != PC_OK) break;
    if (found && w.kind != PC_WRITE_ROLLBACK) continue; /* already committed */
    char name[160];
    st = pc_error_set(err, PC_ABORTED,
                      found ? "%s: transaction %llu was rolled back"
                            : "%s: transaction %llu holds no lock here (rolled back)",
                      pc_cell_str(&cells[i], name, sizeof name), (unsigned long long)start_ts);
  }
  return local_rowop_end(&op, st, err);
}

pc_status_t local_rollback(pc_store_t *base, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                           pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (n == 0) return PC_OK;
  rowop_t op;
  pc_status_t st = local_rowop_begin(&op, s, cells, sizeof *cells, n, "rollback", err);
  if (st != PC_OK) return st;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    int found;
    st = local_read_meta(s, &cells[i], &op.key, &op.m, &found, err);
    if (st != PC_OK) break;
    if (!(op.m.has_lock && op.m.lock.start_ts == start_ts)) {
      pc_write_rec_t w;
      st = local_find_write_by_start(s, &cells[i], &op.m, start_ts, &w, &op.hold, &found, err);
      if (st != PC_OK) break;
      if (found && w.kind == PC_WRITE_ROLLBACK) continue; /* already rolled back */
      if (found) {
        char name[160];
        st = pc_error_set(err, PC_INTERNAL,
                          "rollback: %s of transaction %llu is committed at %llu",
                          pc_cell_str(&cells[i], name, sizeof name),
                          (unsigned long long)start_ts, (unsigned long long)w.commit_ts);
        break;
      }
    }
    st = rollback_cell(op.b, &cells[i], &op.m, &op.key, start_ts, &op.kb, &op.vb, &op.locks,
                       err);
    op.writes++;
  }
  return local_rowop_end(&op, st, err);
}

pc_status_t local_check_txn(pc_store_t *base, const pc_cell_t *primary, uint64_t start_ts,
                            uint64_t now_ts, int owner_dead, pc_txn_state_t *state,
                            uint64_t *commit_ts, pc_error_t *err) {
  local_t *s = (local_t *)base;
  rowop_t op;
  pc_status_t st = local_rowop_begin(&op, s, primary, sizeof *primary, 1, "check_txn", err);
  if (st != PC_OK) return st;
  int found;
  *commit_ts = 0;
  *state = PC_TXN_ROLLED_BACK;
  st = local_read_meta(s, primary, &op.key, &op.m, &found, err);
  if (st != PC_OK) return local_rowop_end(&op, st, err);
  if (op.m.has_lock && op.m.lock.start_ts == start_ts) {
    /* the lease: ttl_ms from start_ts's physical time, which the owner's
     * prewrite and heartbeats set to reach ttl past their own moment */
    uint64_t expires = PC_TS_PHYSICAL_MS(start_ts) + op.m.lock.ttl_ms;
    if (!owner_dead && PC_TS_PHYSICAL_MS(now_ts) < expires) {
      *state = PC_TXN_ALIVE;
      return local_rowop_end(&op, PC_OK, err);
    }
  } else {
    pc_write_rec_t w;
    st = local_find_write_by_start(s, primary, &op.m, start_ts, &w, &op.hold, &found, err);
    if (st != PC_OK || found) {
      if (found && w.kind != PC_WRITE_ROLLBACK) {
        *state = PC_TXN_COMMITTED;
        *commit_ts = w.commit_ts;
      }
      return local_rowop_end(&op, st, err);
    }
  }
  /* dead, expired, or never prewritten: roll back the primary, leaving a
   * rollback record so a delayed prewrite of it fails */
  st = rollback_cell(op.b, primary, &op.m, &op.key, start_ts, &op.kb, &op.vb, &op.locks, err);
  op.writes++;
  return local_rowop_end(&op, st, err);
}

pc_status_t local_heartbeat(pc_store_t *base, const pc_cell_t *primary, uint64_t start_ts,
                            uint32_t ttl_ms, pc_error_t *err) {
  local_t *s = (local_t *)base;
  rowop_t op;
  pc_status_t st = local_rowop_begin(&op, s, primary, sizeof *primary, 1, "heartbeat", err);
  if (st != PC_OK) return st;
  int found;
  st = local_read_meta(s, primary, &op.key, &op.m, &found, err);
  if (st == PC_OK && !(op.m.has_lock && op.m.lock.start_ts == start_ts)) {
    char name[160];
    st = pc_error_set(err, PC_ABORTED, "heartbeat: %s holds no lock of transaction %llu",
                      pc_cell_str(primary, name, sizeof name), (unsigned long long)start_ts);
  }
  if (st == PC_OK && ttl_ms > op.m.lock.ttl_ms) {
    op.m.lock.ttl_ms = ttl_ms;
    st = local_put_meta(op.b, &op.key, &op.m, &op.vb, &op.locks, err);
    /* not synced, so that a renewal never waits for the disk: one lost
     * with the machine only shortens the lease, and a reader may then roll
     * back a transaction whose commit fails (aborted), never a wrong result */
    if (st == PC_OK) st = local_apply(s, op.b, &op.locks, s->gc_wopts, err);
  }
  return local_rowop_end(&op, st, err);
}

/* Whether one of muts[0..n) is in c's row. */
static int writes_row_of(const pc_mutation_t *muts, size_t n, const pc_cell_t *c) {
  for (size_t i = 0; i < n; i++)
    if (muts[i].cell.rlen == c->rlen && strcmp(muts[i].cell.table, c->table) == 0 &&
        memcmp(muts[i].cell.row, c->row, c->rlen) == 0)
      return 1;
  return 0;
}

pc_status_t local_commit_one_phase(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                                   uint64_t start_ts, pc_ts_source_fn ts_source, void *ts_ctx,
                                   pc_notify_clear_t *clear, uint64_t *commit_ts,
                                   pc_lock_info_t *lock_out, pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (clear) {
    clear->done = 0;
    clear->missing[0] = '\0';
  }
  if (n == 0) return PC_OK;
  if (clear && !writes_row_of(muts, n, &clear->cell))
    return pc_error_set(err, PC_INVALID,
                        "one-phase commit: the notifications to delete with it are of a row "
                        "it does not write");
  /* each element is written before anything reads it (not calloc'd): a
   * large calloc comes as untouched pages, where a read maps the zero page
   * and the first write then costs a second fault and a TLB shootdown to
   * every core running this process */
  pc_meta_t *metas = n <= SIZE_MAX / sizeof *metas ? malloc(n * sizeof *metas) : NULL;
  pc_buf_t *keys = n <= SIZE_MAX / sizeof *keys ? malloc(n * sizeof *keys) : NULL;
  size_t ready = 0; /* metas[0..ready) and keys[0..ready) are initialised */
  if (!metas || !keys) {
    free(metas);
    free(keys);
    return local_nomem(err);
  }
  rowop_t op; /* every row's latch, in stripe order */
  pc_status_t st =
      local_rowop_begin(&op, s, &muts[0].cell, sizeof *muts, n, "one-phase commit", err);
  if (st != PC_OK) {
    free(metas);
    free(keys);
    return st;
  }
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    int found;
    metas[i] = (pc_meta_t){0};
    keys[i] = (pc_buf_t){0};
    ready = i + 1;
    st = local_read_meta(s, &muts[i].cell, &keys[i], &metas[i], &found, err);
    if (st == PC_OK) st = check_free(&muts[i].cell, &metas[i], start_ts, lock_out, err);
  }
  if (st == PC_OK) {
    /* readers whose snapshot may cover commit_ts wait for the latch from
     * before commit_ts is taken until the batch is written */
    atomic_fetch_add_explicit(&s->onepc_active, 1, memory_order_seq_cst);
    for (size_t k = 0; k < op.nidx; k++)
      atomic_store_explicit(&s->onepc[op.idx[k]], start_ts, memory_order_seq_cst);
    st = ts_source(ts_ctx, commit_ts, err);
    for (size_t i = 0; i < n && st == PC_OK; i++) {
      const pc_mutation_t *mu = &muts[i];
      st = put_notify(op.b, &mu->cell, *commit_ts, notifies_strongly(s, &mu->cell, mu->kind, 0),
                      mu->weak || mu->kind == PC_WRITE_NOTIFY, &op.kb, err);
      if (st != PC_OK) break;
      if (mu->kind == PC_WRITE_NOTIFY) { /* no write; the primary keeps the fate */
        if (i == 0) {
          st = put_notify_record(op.b, &mu->cell, &metas[i], start_ts, *commit_ts, &op.kb,
                                 &op.vb, err);
          if (st == PC_OK)
            st = local_put_meta(op.b, &keys[i], &metas[i], &op.vb, &op.locks, err);
        }
        continue;
      }
      int inl = mu->kind == PC_WRITE_PUT && mu->vlen <= PC_INLINE_MAX;
      pc_write_rec_t w = {mu->kind, start_ts, *commit_ts,
                          inl ? PC_VALUE_INLINE : PC_VALUE_IN_DATA, inl ? mu->value : NULL,
                          inl ? mu->vlen : 0, 0};
      st = put_data(op.b, mu, start_ts, &op.kb, err);
      if (st == PC_OK) st = set_head(op.b, &mu->cell, &metas[i], &w, &op.kb, &op.vb, err);
      if (st == PC_OK) st = local_put_meta(op.b, &keys[i], &metas[i], &op.vb, &op.locks, err);
    }
    /* the observed cell's notifications go with its observer's commit: its
     * row's latch keeps any commit that notifies it out meanwhile, and the
     * hold on the store's observers any registration */
    size_t cleared = 0;
    int held = st == PC_OK && clear, clearing = 0;
    if (held) {
      local_observers_hold(s);
      clearing = local_observers_cover(s, clear);
      if (clearing)
        st = local_notify_deletes(s, op.b, &clear->cell, clear->below, &op.key, &cleared, err);
    }
    if (st == PC_OK) st = local_apply(s, op.b, &op.locks, s->wopts, err);
    if (st == PC_OK && clearing) clear->done = 1;
    if (held) local_observers_release(s);
    for (size_t k = 0; k < op.nidx; k++)
      atomic_store_explicit(&s->onepc[op.idx[k]], 0, memory_order_release);
    atomic_fetch_sub_explicit(&s->onepc_active, 1, memory_order_release);
  }
  st = local_rowop_end(&op, st, err); /* op.writes is 0: applied above, or not at all */
  for (size_t i = 0; i < ready; i++) {
    pc_meta_free(&metas[i]);
    pc_buf_free(&keys[i]);
  }
  free(metas);
  free(keys);
  return st;
}
