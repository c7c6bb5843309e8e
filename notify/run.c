/* run.c — one observer on one cell (Fluo's work task). The run is a
 * transaction begun for the notified cell (pc_txn_begin_for), start_ts S.
 * It reads ack(c, O) = A; when A is past the newest notification of O's
 * kind found, O observed it already and the run is skipped; otherwise O's
 * callback runs, the transaction writes ack = S and commits. Two runs for
 * one change both write the ack, so at most one of them commits. Every run
 * also writes the cell's turn (the ack of PC_TURN_OBSERVER, core/db.h), which
 * the runs of every observer of the cell write: two runs on one cell that
 * overlap in time conflict whichever observers they are, so the committed
 * runs on a cell are serial and each one sees what those before it wrote
 * (docs/ARCHITECTURE.md, "Runs on one cell are serial"). A strong
 * observer covers every change below its ack; a weak one every weak
 * notification below it. Weak observers keep acks too (since registered
 * observers that different workers run share a column's notifications):
 * another worker reads them to know what a weak observer it does not run
 * has covered (pass.c). An observer parked on the cell (parked.c) does not
 * run, and counts as done, until a retry is asked for.
 *
 * Setbacks. A callback that fails, or an ack that is not 8 bytes, is a
 * failure of (cell, observer): deferred with backoff (backoff.c), and at
 * max_failures parked (parked.c), after which the observer counts as done.
 * A commit that conflicts (another run, or a writer of what the observer
 * writes, committed first) is deferred the same way but never parked:
 * somebody else made progress. Errors of the engine's own steps (begin, a
 * read timing out) are deferred too, and are not the observer's failures.
 */
#include "notify/engine.h"

#include "base/error.h"
#include "base/log.h"

pc_status_t pc_run_read_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t *ts,
                           pc_error_t *err) {
  char *v = NULL;
  size_t n = 0;
  *ts = 0;
  pc_status_t st = pc_txn_get_system(t, c->table, c->row, c->rlen, col->p, col->len, &v, &n, err);
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    return PC_OK;
  }
  if (st != PC_OK) return st;
  if (n == 8) {
    pc_rd_t r = {v, n, 0, 1};
    *ts = pc_rd_u64(&r);
  } else {
    st = pc_error_set(err, PC_CORRUPTION, "system column holds %zu bytes, not an 8-byte timestamp",
                      n);
  }
  pc_free(v);
  return st;
}

pc_status_t pc_run_write_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t ts,
                            pc_error_t *err) {
  char b[8];
  for (int i = 0; i < 8; i++) b[i] = (char)(ts >> (56 - 8 * i));
  return pc_txn_set_system(t, c->table, c->row, c->rlen, col->p, col->len, b, sizeof b, err);
}

pc_status_t pc_run_write_ack(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *ack_col,
                             uint64_t ts, pc_error_t *err) {
  pc_buf_t turn = {0};
  pc_status_t st = pc_run_write_ts(t, c, ack_col, ts, err);
  if (st == PC_OK && pc_ack_column(&turn, PC_TURN_OBSERVER, c->col, c->clen) != 0)
    st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK) st = pc_run_write_ts(t, c, &turn, ts, err);
  pc_buf_free(&turn);
  return st;
}

static int is_conflict(pc_status_t st) {
  return st == PC_CONFLICT || st == PC_LOCKED || st == PC_ABORTED;
}

pc_status_t pc_run_callback(pc_worker_t *w, const pc_observer_t *o, pc_txn_t *t,
                            const pc_notified_cell_t *nc, pc_error_t *err) {
  wthread_t *self = pc_worker_self();
  pc_cell_t c = {nc->table, nc->row, nc->row_len, nc->column, nc->column_len};
  if (self) pc_journal_begin(w->journal, self->idx, &c, o->name, nc->notify_ts);
  pc_status_t st = pc_observer_run(o, t, nc, err);
  if (self && pc_journal_end(w->journal, self->idx)) {
    /* the watchdog gave this run up (worker.c): it counted it, released the
     * claim and started another thread; this one commits nothing and leaves */
    self->given_up = 1;
    return pc_error_set(err, PC_TIMEOUT, "observer '%s' returned after it was given up", o->name);
  }
  if (st == PC_OK && atomic_load(&w->abandoned))
    return pc_error_set(err, PC_TIMEOUT, "observer '%s' returned after the worker stopped",
                        o->name);
  return st;
}

int pc_run_acts_on(const pc_observer_t *o, const group_t *g) {
  return o->kind == PC_OBSERVER_STRONG ? g->strong_ts != 0 : g->weak_ts != 0;
}

run_result_t pc_run(pc_worker_t *w, obs_slot_t *slot, const group_t *g, const pass_t *pass,
                    uint64_t *cover, int *cleared, uint64_t *retry_at) {
  const pc_observer_t *o = slot->obs;
  const pc_cell_t *c = &g->cell.n.cell;
  int strong = o->kind == PC_OBSERVER_STRONG;
  uint64_t target = strong ? g->strong_ts : g->weak_ts;
  if (!pc_run_acts_on(o, g)) return RUN_IDLE;

  pc_buf_t key = {0}, ack_col = {0};
  run_result_t res = RUN_DEFERRED;
  pc_txn_t *t = NULL;
  pc_error_t err;
  pc_error_clear(&err);
  char name[200];
  *retry_at = pc_now_mono_ms() + w->o.backoff_ms;
  if (pc_backoff_key(&key, c, o->name) != 0) goto out; /* out of memory: try again later */
  if (pc_parked_holds(w, &key)) { /* parked: nothing runs it until a retry is asked for */
    *cover = UINT64_MAX;
    res = RUN_DONE;
    goto out;
  }
  if (pc_backoff_waiting(w, &key, retry_at)) goto out;
  if (pc_ack_column(&ack_col, o->name, c->col, c->clen) != 0) goto setback;

  t = pc_txn_begin_for(w->db, c, &err);
  if (!t) goto setback;
  uint64_t ack = 0;
  pc_status_t st = pc_run_read_ts(t, c, &ack_col, &ack, &err);
  if (st == PC_CORRUPTION) goto failed;
  if (st != PC_OK) goto setback;
  uint64_t start = pc_txn_start_ts(t); /* taken by now, lazy_start or not */
  if (ack >= target) { /* observed already: this observer covers everything below ack */
    pc_count(slot, PC_C_SKIPPED);
    pc_backoff_forget(w, &key);
    pc_crash_forget(w, c, o->name, &key);
    *cover = ack;
    res = RUN_DONE;
    goto out;
  }

  pc_notified_cell_t nc = {c->table, c->row, c->rlen, c->col, c->clen, target};
  st = pc_run_callback(w, o, t, &nc, &err);
  if (pc_worker_self() && pc_worker_self()->given_up) goto out; /* counted by the watchdog */
  if (st != PC_OK) goto failed;
  if ((st = pc_run_write_ack(t, c, &ack_col, start, &err)) != PC_OK) goto setback_st;
  /* the run covers below its start_ts: with the others' covers, what the
   * commit may delete, on behalf of the column's observers */
  if (pass) pc_txn_trigger_bound(t, pc_pass_clear_below(pass, start), pass->names, pass->nlen);
  st = pc_txn_commit(t, &err);
  if (st != PC_OK) goto setback_st;
  if (pc_txn_trigger_cleared(t)) *cleared = 1;
  pc_count(slot, PC_C_RUNS);
  if (!g->backfill) pc_worker_latency(w, target, pc_txn_commit_ts(t));
  pc_backoff_forget(w, &key);
  pc_crash_forget(w, c, o->name, &key);
  *cover = start;
  res = RUN_DONE;
  goto out;

failed: {
  pc_count(slot, PC_C_FAILURES);
  uint32_t n = pc_backoff_defer(w, &key, 1, retry_at);
  pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name);
  if (n >= w->o.max_failures) {
    pc_error_t perr;
    if (pc_park(w, c, o, target, n, err.text, &perr) == PC_OK) {
      pc_count(slot, PC_C_PARKED);
      pc_backoff_forget(w, &key);
      pc_log(PC_LOG_WARN, "worker: observer '%s' on %s parked after %u failures: %s", o->name,
             name, n, err.text);
      *cover = UINT64_MAX; /* its notifications go: the record keeps the change for a retry */
      res = RUN_DONE;
    } else {
      pc_log(PC_LOG_WARN, "worker: observer '%s' on %s: %s", o->name, name, perr.text);
    }
  } else {
    pc_log(PC_LOG_DEBUG, "worker: observer '%s' on %s failed (%u of %u): %s", o->name, name, n,
           w->o.max_failures, err.text);
  }
  goto out;
}

setback_st:
  if (is_conflict(st)) pc_count(slot, PC_C_CONFLICTS);
setback:
  (void)pc_backoff_defer(w, &key, 0, retry_at);
  if (!is_conflict(err.code))
    pc_log(PC_LOG_DEBUG, "worker: observer '%s' on %s: %s, retrying later", o->name,
           pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
out:
  pc_txn_destroy(t);
  pc_buf_free(&key);
  pc_buf_free(&ack_col);
  return res;
}
