/* batch.c — runs of many cells in one transaction, for strong observers
 * that register a batch callback (observe_batch, ABI 1.1). The scan of a
 * claim hands each group of notifications here (pc_batch_take): a cell whose
 * only acting observer of this worker is such an observer waits in the
 * claim's batch; any other cell passes at once (pass.c). A batch runs when
 * it is full (the observer's batch_max), when a cell of another batch
 * observer comes, and at the end of the claim.
 *
 * A batched run applies run.c's rules to each cell inside one transaction,
 * begun for the first cell it runs on: a cell whose ack is past its newest
 * notification is skipped; the callback runs on the others; each gets its
 * ack at the run's start_ts; the commit carries them all. Afterwards each
 * cell's notifications are deleted below the bound of the deletion rule
 * (pass.c), exactly as a pass with that one acting observer would: the
 * first cell's in the commit itself when it can (the transaction's
 * trigger), the others' with one clear_notify, on behalf of the column's
 * registered observers. Only a column whose registered observers are all
 * this worker's is batched: one that another worker's observers share
 * takes the single path, which accounts for what those covered (pass.c). The cells are distinct and all of
 * one claim, which no other thread of this worker scans meanwhile; another
 * worker that runs one of them at the same time writes the same ack, so at
 * most one of the two commits (as for single runs).
 *
 * A batch whose commit lost to another transaction (a write conflict, a
 * lock, a rollback by another) runs again as two halves, each a batch in a
 * transaction of its own: the cells that share a row with the winner go
 * on in ever smaller batches while the rest commit, instead of every cell
 * of the batch paying a synced commit of its own; a cell alone that still
 * loses takes the single path. Any other setback of the batch — the
 * callback failing (a read that met a live lock past its timeout
 * included: the single path backs off), an ack that is not 8 bytes,
 * memory — runs every cell
 * of it again through the single path (pc_pass), which retries, backs off
 * and parks each cell on its own.
 * A cell that is parked, waits out a backoff, or had a death of the process
 * counted against it takes the single path from the start.
 */
#include "notify/engine.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/failpoint.h"
#include "base/log.h"

/* Whether every observer registered for c's column is one of this worker's
 * (the registered observers as this worker last read them). */
static int column_all_mine(pc_worker_t *w, const pc_cell_t *c) {
  pc_view_t *view = pc_view_get(w);
  const view_col_t *col = pc_view_column(view, c->table, c->col, c->clen);
  int all = col && col->nobs == col->nmine;
  pc_view_put(w, view);
  return all;
}

/* The slot of the batch observer that alone acts on g (with the number of
 * the column's observers in this worker in *mine), or NULL: g passes on
 * its own. A group with a weak notification takes the single path. */
static obs_slot_t *batch_slot(pc_worker_t *w, const group_t *g, size_t *mine) {
  if (g->strong_ts == 0 || g->weak_ts != 0) return NULL;
  const pc_cell_t *c = &g->cell.n.cell;
  if (!column_all_mine(w, c)) return NULL;
  const pc_observer_t *found[16];
  size_t n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, found, 16);
  if (n > 16) return NULL;
  obs_slot_t *pick = NULL;
  *mine = 0;
  for (size_t i = 0; i < n; i++) {
    obs_slot_t *slot = pc_worker_slot(w, found[i]);
    if (!slot) continue;
    (*mine)++;
    if (found[i]->kind != PC_OBSERVER_STRONG) continue; /* weak: idle without weak_ts */
    if (pick || !found[i]->observe_batch || found[i]->batch_max < 2) return NULL;
    pick = slot;
  }
  return pick;
}

static void batch_release(batch_t *b) {
  for (size_t i = 0; i < b->n; i++) pc_note_free(&b->v[i].cell);
  b->n = 0;
  b->slot = NULL;
}

/* Each cell of b through the single path. */
static int batch_singly(pc_worker_t *w, batch_t *b) {
  int did = 0;
  wthread_t *self = pc_worker_self();
  for (size_t i = 0; i < b->n && !pc_worker_stopping(w) && !(self && self->given_up); i++)
    did |= pc_pass(w, &b->v[i]);
  return did;
}

static int run_batch(pc_worker_t *w, batch_t *b);

/* The cells of b in two batches, each run on its own (a batch that lost a
 * conflict); b is left empty, its cells released by the halves. */
static int batch_halves(pc_worker_t *w, batch_t *b) {
  size_t h = b->n / 2;
  batch_t lo = {b->slot, b->mine, b->v, h, h};
  batch_t hi = {b->slot, b->mine, b->v + h, b->n - h, b->n - h};
  b->n = 0;
  int did = run_batch(w, &lo);
  wthread_t *self = pc_worker_self();
  if (pc_worker_stopping(w) || (self && self->given_up)) {
    batch_release(&hi);
    return did;
  }
  return did | run_batch(w, &hi);
}

/* The bound below which cell k's notifications go after the batch: a pass
 * in which this observer acts and the column's other observers of this
 * worker (weak ones, all idle here) cover what the scan saw. */
static uint64_t cell_below(const batch_t *b, const group_t *g, uint64_t covered) {
  pass_t p = {g->strong_ts, b->mine > 1 ? g->strong_ts + 1 : UINT64_MAX, NULL, 0};
  return pc_pass_clear_below(&p, covered);
}

/* Moves the cells that do not wait out a backoff to the front of b, their
 * keys with them; returns how many. */
static size_t batch_live(pc_worker_t *w, batch_t *b, pc_buf_t *keys) {
  size_t live = 0;
  for (size_t i = 0; i < b->n; i++) {
    uint64_t until;
    if (pc_backoff_waiting(w, &keys[i], &until)) continue; /* left for a later round */
    if (live != i) {
      group_t g = b->v[live];
      pc_buf_t k = keys[live];
      b->v[live] = b->v[i];
      keys[live] = keys[i];
      b->v[i] = g;
      keys[i] = k;
    }
    live++;
  }
  return live;
}

/* The batch callback of o on cells[0..n), journaled as a run on the first
 * cell (the journal has one run per thread): a death of the process or a
 * hang during the batch is counted against that cell, which then runs only
 * through the single path (pc_batch_take), so that the next death, if the
 * culprit was another cell, is counted against another, and the culprit is
 * parked once it dies alone max_failures times. */
static pc_status_t batch_callback(pc_worker_t *w, const pc_observer_t *o, pc_txn_t *t,
                                  const pc_notified_cell_t *cells, size_t n, pc_error_t *err) {
  wthread_t *self = pc_worker_self();
  pc_cell_t c = {cells[0].table, cells[0].row, cells[0].row_len, cells[0].column,
                 cells[0].column_len};
  if (self) pc_journal_begin(w->journal, self->idx, &c, o->name, cells[0].notify_ts);
  pc_status_t st = pc_observer_run_batch(o, t, cells, n, err);
  if (self && pc_journal_end(w->journal, self->idx)) {
    self->given_up = 1;
    return pc_error_set(err, PC_TIMEOUT, "observer '%s' returned after it was given up", o->name);
  }
  if (st == PC_OK && atomic_load(&w->abandoned))
    return pc_error_set(err, PC_TIMEOUT, "observer '%s' returned after the worker stopped",
                        o->name);
  return st;
}

/* One run of b's observer over the cells of b (see the top of this file).
 * Returns 1 when it did something. */
static int run_batch(pc_worker_t *w, batch_t *b) {
  const pc_observer_t *o = b->slot->obs;
  size_t n = b->n, m = 0, live = 0;
  pc_buf_t ack_col = {0}, *keys = calloc(n, sizeof *keys);
  pc_cell_ref_t *refs = calloc(n, sizeof *refs);
  pc_value_t *acks = calloc(n, sizeof *acks);
  pc_notified_cell_t *cells = calloc(n, sizeof *cells);
  size_t *run = calloc(n, sizeof *run); /* the cells the callback runs on, as indices into b */
  uint64_t *below = calloc(n, sizeof *below);
  pc_notify_clear_t *clears = NULL;
  pc_txn_t *t = NULL;
  pc_error_t err;
  pc_error_clear(&err);
  atomic_fetch_add(&b->slot->running, 1);
  int did = 0, failed = 1; /* until the batch is through */
  int lost = 0;             /* its commit lost to another transaction */
  const pc_cell_t *c0 = &b->v[0].cell.n.cell;
  /* the deletions are on behalf of the column's registered observers, all
   * of them this worker's (batch_slot); a registration since then sends the
   * cells to the single path */
  pc_view_t *view = pc_view_get(w);
  const view_col_t *col = pc_view_column(view, c0->table, c0->col, c0->clen);
  if (!col || col->nobs != col->nmine) goto out;
  if (!keys || !refs || !acks || !cells || !run || !below ||
      pc_ack_column(&ack_col, o->name, c0->col, c0->clen) != 0)
    goto out; /* out of memory: the single path tries */
  for (size_t i = 0; i < n; i++)
    if (pc_backoff_key(&keys[i], &b->v[i].cell.n.cell, o->name) != 0) goto out;
  if ((live = batch_live(w, b, keys)) == 0) {
    failed = 0;
    goto out;
  }
  if (!(t = pc_txn_begin_for(w->db, &b->v[0].cell.n.cell, &err))) goto out;
  for (size_t k = 0; k < live; k++) {
    const pc_cell_t *c = &b->v[k].cell.n.cell;
    refs[k] = (pc_cell_ref_t){c->table, c->row, c->rlen, ack_col.p, ack_col.len};
  }
  if (pc_txn_get_many_system(t, refs, live, acks, &err) != PC_OK) goto out;
  uint64_t start = pc_txn_start_ts(t);
  for (size_t k = 0; k < live; k++) {
    const group_t *g = &b->v[k];
    if (acks[k].value && acks[k].vlen != 8) goto out; /* the single path reports it */
    uint64_t ack = 0;
    if (acks[k].value) {
      pc_rd_t r = {acks[k].value, 8, 0, 1};
      ack = pc_rd_u64(&r);
    }
    if (ack >= g->strong_ts) { /* observed already: covers everything below ack */
      below[k] = cell_below(b, g, ack);
      continue;
    }
    const pc_cell_t *c = &g->cell.n.cell;
    cells[m] = (pc_notified_cell_t){c->table, c->row, c->rlen, c->col, c->clen, g->strong_ts};
    run[m++] = k;
    below[k] = cell_below(b, g, start);
  }
  pc_log(PC_LOG_DEBUG, "worker: batch of observer '%s': %zu cells, %zu live, %zu to run", o->name,
         n, live, m);
  int fp_fired = PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  if (m > 0) {
    pc_status_t st = batch_callback(w, o, t, cells, m, &err);
    if (pc_worker_self() && pc_worker_self()->given_up) {
      failed = 0; /* the watchdog counted it: this thread leaves, committing nothing */
      goto out;
    }
    if (st != PC_OK) {
      pc_log(PC_LOG_DEBUG, "worker: observer '%s' on a batch of %zu cells: %s; running them "
             "one by one", o->name, m, err.text);
      goto out;
    }
    for (size_t j = 0; j < m && st == PC_OK; j++)
      st = pc_run_write_ack(t, &b->v[run[j]].cell.n.cell, &ack_col, start, &err);
    /* the transaction was begun for b's first cell: its notifications may
     * go in the commit when the callback ran on it */
    if (!fp_fired && run[0] == 0) pc_txn_trigger_bound(t, below[0], col->names, col->nlen);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    if (st != PC_OK) {
      lost = st == PC_CONFLICT || st == PC_LOCKED || st == PC_ABORTED;
      if (lost) pc_count(b->slot, PC_C_CONFLICTS);
      goto out;
    }
    atomic_fetch_add(&b->slot->n[PC_C_RUNS], m);
    for (size_t j = 0; j < m; j++) pc_worker_latency(w, cells[j].notify_ts, pc_txn_commit_ts(t));
  }
  atomic_fetch_add(&b->slot->n[PC_C_SKIPPED], live - m);
  for (size_t k = 0; k < live; k++) {
    pc_backoff_forget(w, &keys[k]);
    pc_crash_forget(w, &b->v[k].cell.n.cell, o->name, &keys[k]);
  }
  failed = 0;
  did = 1;
  if (fp_fired || pc_worker_stopping(w)) goto out; /* as if crashed before the deletions */
  /* every cell's notifications in one call: one write in an embedded store */
  if (!(clears = malloc(live * sizeof *clears))) goto out; /* they stay: a later pass skips them */
  size_t nc = 0;
  for (size_t k = 0; k < live; k++) {
    if (k == 0 && m > 0 && run[0] == 0 && pc_txn_trigger_cleared(t)) continue; /* went with it */
    clears[nc++] = (pc_notify_clear_t){b->v[k].cell.n.cell, below[k], col->names, col->nlen, 0, ""};
  }
  char name[200];
  if (nc && w->db->store->ops->clear_notify(w->db->store, clears, nc, &err) != PC_OK)
    pc_log(PC_LOG_DEBUG, "worker: clearing the notifications of %zu cells of observer '%s': %s",
           nc, o->name, err.text);
  for (size_t k = 0; k < nc; k++) { /* a registration the view has not caught up with */
    const pc_cell_t *c = &clears[k].cell;
    if (!clears[k].done && clears[k].missing[0])
      pc_log(PC_LOG_DEBUG, "worker: the notifications of %s wait for observer '%s'",
             pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name),
             clears[k].missing);
  }
out:
  pc_txn_destroy(t);
  pc_view_put(w, view);
  if (failed && !pc_worker_stopping(w))
    did |= lost && n > 1 ? batch_halves(w, b) : batch_singly(w, b);
  for (size_t i = 0; keys && i < n; i++) pc_buf_free(&keys[i]);
  for (size_t i = 0; acks && i < n; i++) pc_free(acks[i].value);
  pc_buf_free(&ack_col);
  free(keys);
  free(refs);
  free(acks);
  free(cells);
  free(run);
  free(below);
  free(clears);
  atomic_fetch_sub(&b->slot->running, 1);
  batch_release(b);
  return did;
}

/* Whether (cell, observer) of g must take the single path: it is parked,
 * waits out a backoff, or a death of the process was counted against it
 * (crashes.c), so that its runs are journaled one by one. */
static int batch_singly_only(pc_worker_t *w, const group_t *g, const pc_observer_t *o) {
  pc_buf_t key = {0};
  if (pc_backoff_key(&key, &g->cell.n.cell, o->name) != 0) return 1;
  uint64_t until;
  int single = pc_parked_holds(w, &key) || pc_backoff_waiting(w, &key, &until);
  if (!single) {
    pthread_mutex_lock(&w->sets_mu);
    single = pc_keyset_has(w->suspects, key.p, key.len);
    pthread_mutex_unlock(&w->sets_mu);
  }
  pc_buf_free(&key);
  return single;
}

int pc_batch_take(pc_worker_t *w, batches_t *bs, group_t *g) {
  size_t mine = 0;
  obs_slot_t *slot = batch_slot(w, g, &mine);
  if (slot && batch_singly_only(w, g, slot->obs)) slot = NULL;
  batch_t *b = NULL;
  for (size_t i = 0; slot && i < PC_BATCHES_MAX && !b; i++)
    if (bs->b[i].slot == slot || !bs->b[i].slot) b = &bs->b[i];
  if (b && b->slot && b->mine != mine) { /* the column's observers changed: start over */
    (void)run_batch(w, b);
  }
  if (b && b->n == b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 16;
    group_t *nv = realloc(b->v, nc * sizeof *nv);
    if (nv) {
      b->v = nv;
      b->cap = nc;
    } else {
      b = NULL; /* no room: it passes on its own */
    }
  }
  if (!b) { /* not for a batch, or more batch observers than batches */
    int did = pc_pass(w, g);
    pc_note_free(&g->cell);
    return did;
  }
  b->slot = slot;
  b->mine = mine;
  b->v[b->n++] = *g;
  g->cell.mem = NULL; /* moved into the batch */
  return b->n >= slot->obs->batch_max ? run_batch(w, b) : 0;
}

/* Whether b may wait for more cells: it is not full, another batched run of
 * its observer is in flight in this worker, and its oldest notification is
 * younger than batch_wait_ms (in the oracle's milliseconds, against this
 * machine's clock). An observer that nothing else runs runs at once (a
 * lone change waits for nothing); a busy one gathers its cells into fewer,
 * larger runs, which a run's fixed cost (a commit, the index's chunk per
 * term) makes cheaper. The calling thread learns when b may run: its nap
 * ends then, not an idle_ms later. */
static int batch_may_wait(const pc_worker_t *w, const batch_t *b, wthread_t *self) {
  if (!w->o.batch_wait_ms || b->n >= b->slot->obs->batch_max) return 0;
  if (!atomic_load(&b->slot->running)) return 0;
  uint64_t oldest = UINT64_MAX;
  for (size_t i = 0; i < b->n; i++) oldest = pc_min_u64(oldest, b->v[i].strong_ts);
  uint64_t due = PC_TS_PHYSICAL_MS(oldest) + w->o.batch_wait_ms, now = pc_now_wall_ms();
  if (now >= due) return 0;
  if (self && (!self->wake_ms || due < self->wake_ms)) self->wake_ms = due;
  return 1;
}

int pc_batch_end(pc_worker_t *w, batches_t *bs) {
  int did = 0;
  wthread_t *self = pc_worker_self();
  for (size_t i = 0; i < PC_BATCHES_MAX; i++) {
    batch_t *b = &bs->b[i];
    /* a young batch that is not full is left to a later scan of the claim
     * (the notifications stay), which finds it bigger */
    if (b->n && !pc_worker_stopping(w) && !(self && self->given_up) && !batch_may_wait(w, b, self))
      did |= run_batch(w, b);
    batch_release(b);
    free(b->v);
    b->v = NULL;
    b->cap = 0;
  }
  return did;
}
