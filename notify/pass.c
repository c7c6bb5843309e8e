/* pass.c — one pass over a cell (Fluo's processor, for one cell). A scan
 * may find several notifications of a cell (strong and weak, several
 * timestamps); they are coalesced into one pass. Each of this worker's
 * observers of the cell's column whose kind was notified runs in its own
 * transaction (run.c) and covers what it observed:
 *   run     a run at start_ts S covers below S;
 *   skip    (its ack A is past the newest notification of its kind found)
 *           covers below A;
 *   parked  covers everything (its record keeps the change for a retry);
 *   idle    (nothing of its kind was notified) covers what the scan saw.
 * The observers registered for the column that this worker does not run
 * (view.c) cover what their acks say, read after this worker's runs. When
 * every observer is done, the cell's notifications below the bound of the
 * deletion rule (pc_pass_clear_below) are deleted, on behalf of every
 * observer the view knows for the column; the store deletes nothing unless
 * that accounts for every observer it holds (store_observers.c). An
 * observer of this worker that failed, conflicted or waits out a backoff
 * leaves them all in place.
 *
 * A column whose registered observers this worker runs none of is left to
 * the workers that do: the pass does nothing, without a transaction. One
 * that it runs some of is passed over once per change: when the others are
 * behind, the notifications stay and the cell waits (waiting.c) until they
 * are newer or a while has passed. So does a cell whose deletion the store
 * refused for an observer registered since the view was read, until the
 * view is read again (soon: view.c): without that, the scans would pass
 * over it again and again meanwhile, each pass a transaction refused.
 *
 * A pass that ends with an observer of this worker waiting out a backoff
 * is not repeated until the first of them may retry or a newer change
 * arrives (backoff.c's cell entries): the healthy observers of the cell run
 * once per change. A weak observer's run in such a pass is remembered, so
 * that the pass that completes the cell counts it as done.
 *
 * When exactly one observer acts on the pass and the column has no
 * observer of other workers, the bound is known before it commits (the
 * others are idle), so its transaction, begun for the cell, deletes them in
 * its own commit when it can (txn.c decides: a one-phase commit in the
 * cell's row): the run and the end of its notifications are then one
 * durable write instead of a synced one and an unsynced one queued behind
 * it. Otherwise the pass deletes them with clear_notify.
 */
#include "notify/engine.h"

#include <stdlib.h>

#include "base/error.h"
#include "core/failpoint.h"
#include "base/log.h"

/* The deletion rule, written once. M = p->newest, the newest notification
 * of the cell the scan found. Each registered observer of the column covers
 * a bound, and the notifications below the least of them go:
 *   - an observer of this worker covers max(M + 1, what it covered): M + 1
 *     because every notification of a cell is written by a transaction
 *     that locked the cell (a write conflicts with a write, and a weak
 *     notification with both), so a cell's notifications appear in
 *     timestamp order, and a scan that saw the one at M saw every older one
 *     of the cell, with its kind, and this worker's observer handled them;
 *     above M only what it covered, because the kind of a notification that
 *     arrived after the scan is unknown. A change committed during the runs
 *     therefore keeps its notification, and a weak notification set while
 *     its observer runs makes it run again;
 *   - an observer of another worker covers what its ack says (below the
 *     ack: its last committed run saw all of it), and M + 1 as well when the
 *     scan found nothing of its kind (cover_others).
 * Without any observer (a column nobody observes, or one whose observers
 * are all parked on the cell) what the scan saw goes: below M + 1. */
uint64_t pc_pass_clear_below(const pass_t *p, uint64_t extra) {
  uint64_t mine = extra == UINT64_MAX ? UINT64_MAX : pc_max_u64(p->newest + 1, extra);
  uint64_t cover = pc_min_u64(p->cover, mine);
  return cover == UINT64_MAX ? p->newest + 1 : cover;
}

/* Adds what one of this worker's observers covers (cv 0: what the scan saw). */
static void covers_mine(pass_t *p, uint64_t cv) {
  p->cover = pc_min_u64(p->cover, cv == UINT64_MAX ? cv : pc_max_u64(p->newest + 1, cv));
}

/* Adds what the column's observers of other workers cover, from their acks,
 * read now, after this worker's runs: of two workers that finish a cell at
 * about the same time, the later one reads the other's ack. (A parked
 * observer's ack stays behind: its notifications wait for a worker that
 * runs it, whose pass counts it as covering everything.) */
static pc_status_t cover_others(pc_worker_t *w, const group_t *g, const view_col_t *col,
                                pass_t *p, pc_error_t *err) {
  const pc_cell_t *c = &g->cell.n.cell;
  pc_txn_t *t = pc_txn_begin(w->db, err);
  if (!t) return err ? err->code : PC_INTERNAL;
  pc_status_t st = PC_OK;
  pc_buf_t ack_col = {0};
  for (size_t i = 0; i < col->nobs && st == PC_OK; i++) {
    const view_obs_t *o = &col->obs[i];
    if (o->mine) continue;
    uint64_t ack = 0;
    ack_col.len = 0;
    if (pc_ack_column(&ack_col, o->name, c->col, c->clen) != 0) {
      st = pc_error_set(err, PC_NOMEM, "out of memory");
      break;
    }
    st = pc_run_read_ts(t, c, &ack_col, &ack, err);
    if (st != PC_OK) break;
    int seen = o->kind == PC_OBSERVER_STRONG ? g->strong_ts != 0 : g->weak_ts != 0;
    p->cover = pc_min_u64(p->cover, seen ? ack : pc_max_u64(p->newest + 1, ack));
  }
  pc_buf_free(&ack_col);
  pc_txn_destroy(t);
  return st;
}

/* Deletes the cell's notifications below below, on behalf of p's names.
 * Returns whether they went; *refused when the store kept them for an
 * observer that p's names (the view) lack. */
static int clear(pc_worker_t *w, const pc_cell_t *c, const pass_t *p, uint64_t below,
                 int *refused) {
  pc_notify_clear_t cl = {*c, below, p->names, p->nlen, 0, ""};
  pc_error_t err;
  char name[200];
  if (w->db->store->ops->clear_notify(w->db->store, &cl, 1, &err) != PC_OK) {
    pc_log(PC_LOG_DEBUG, "worker: clearing the notifications of %s: %s",
           pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
    return 0;
  }
  if (!cl.done && cl.missing[0]) { /* registered since the view was read */
    *refused = 1;
    pc_log(PC_LOG_DEBUG, "worker: the notifications of %s stay for observer '%s'",
           pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name),
           cl.missing);
    pc_view_stale(w);
  }
  return cl.done;
}

/* What the pass knows of each observer of the column before running any:
 * not this worker's, nothing to do, covered by a weak run remembered from a
 * pass that waited, or acting. */
enum { OBS_NONE, OBS_IDLE, OBS_REMEMBERED, OBS_ACTS };

int pc_pass(pc_worker_t *w, const group_t *g) {
  const pc_cell_t *c = &g->cell.n.cell;
  const pc_observer_t *found[16], **obs = found;
  int kinds[16], *kind = kinds;
  size_t n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, found, 16);
  if (n > 16) {
    obs = malloc(n * sizeof *obs);
    kind = malloc(n * sizeof *kind);
    if (!obs || !kind) {
      free(obs == found ? NULL : obs);
      free(kind == kinds ? NULL : kind);
      return 0;
    }
    n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, obs, n);
  }
  pc_view_t *view = pc_view_get(w);
  const view_col_t *col = pc_view_column(view, c->table, c->col, c->clen);
  pass_t pass = {pc_max_u64(g->strong_ts, g->weak_ts), UINT64_MAX, col ? col->names : "",
                 col ? col->nlen : 0};
  size_t others = col ? col->nobs - col->nmine : 0;
  /* the view lacks a registration (a deletion was refused): the cell may
   * wait for another worker's observer that the view does not name */
  int unsure = pc_view_is_stale(w);
  pc_buf_t ckey = {0};
  uint64_t *covers = NULL, *ran = calloc(w->nslots, sizeof *ran);
  int did = 0;
  if (!ran || pc_backoff_key(&ckey, c, NULL) != 0) goto out; /* out of memory: next round */
  size_t mine = 0;
  for (size_t i = 0; i < n; i++)
    if (pc_worker_slot(w, obs[i])) mine++; /* else registered after the start: not this worker's */
  if (mine == 0 && others > 0) goto out; /* the other workers' cell */
  /* observers of the cell wait out a backoff, and nothing new arrived */
  if (pc_backoff_cell_check(w, &ckey, pass.newest, &covers)) goto out;
  if ((others > 0 || unsure) && pc_waiting_skip(w, c, pass.newest)) goto out;
  /* the observers that have nothing to do cover what the scan saw */
  size_t acting = 0;
  for (size_t i = 0; i < n; i++) {
    obs_slot_t *slot = pc_worker_slot(w, obs[i]);
    size_t k = slot ? (size_t)(slot - w->slots) : 0;
    if (!slot) kind[i] = OBS_NONE;
    else if (!pc_run_acts_on(obs[i], g)) kind[i] = OBS_IDLE;
    else if (obs[i]->kind == PC_OBSERVER_WEAK && covers && covers[k] > g->weak_ts)
      kind[i] = OBS_REMEMBERED; /* its run covered these already: once per change */
    else kind[i] = OBS_ACTS, acting++;
    if (kind[i] == OBS_IDLE) covers_mine(&pass, 0);
    if (kind[i] == OBS_REMEMBERED) {
      covers_mine(&pass, covers[k]);
      ran[k] = covers[k];
    }
  }
  /* with one acting observer and none of other workers, the failpoint is
   * met before the run, whose commit would delete the notifications */
  pc_error_t err;
  int fold_ok = acting == 1 && others == 0;
  int fp_met = fold_ok, fp_fired = fp_met && PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  int all_done = 1, cleared = 0;
  uint64_t until = UINT64_MAX; /* the first retry of the observers that wait */
  for (size_t i = 0; i < n && !pc_worker_stopping(w); i++) {
    if (kind[i] != OBS_ACTS) continue;
    obs_slot_t *slot = pc_worker_slot(w, obs[i]);
    uint64_t cv = 0, retry_at = 0;
    int fold = fold_ok && !fp_fired;
    run_result_t r = pc_run(w, slot, g, fold ? &pass : NULL, &cv, &cleared, &retry_at);
    wthread_t *self = pc_worker_self();
    if (self && self->given_up) goto out; /* the watchdog took over: this thread leaves */
    switch (r) {
      case RUN_DONE: /* cv 0: it covers what the scan saw */
        did = 1;
        covers_mine(&pass, cv);
        if (obs[i]->kind == PC_OBSERVER_WEAK) ran[slot - w->slots] = cv ? cv : pass.newest + 1;
        break;
      case RUN_IDLE:
        covers_mine(&pass, 0);
        break;
      case RUN_DEFERRED:
        all_done = 0;
        until = pc_min_u64(until, retry_at);
        break;
    }
  }
  if (pc_worker_stopping(w)) goto out;
  if (!all_done) { /* no pass over the cell until one of them may retry, or a new change */
    pc_backoff_cell_defer(w, &ckey, pass.newest, until, ran);
    goto out;
  }
  pc_backoff_forget(w, &ckey); /* if the cell had waited, it waits no more */
  if (cleared) { /* deleted with the observer's commit */
    did = 1;
    goto out;
  }
  if (others > 0 && cover_others(w, g, col, &pass, &err) != PC_OK) {
    pass.cover = 0; /* unknown: keep them, and look again later */
    char name[200];
    pc_log(PC_LOG_DEBUG, "worker: reading the acks of %s: %s",
           pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
  }
  if (!fp_met) fp_fired = PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  if (fp_fired) { /* as if crashed here */
    did = 1;
    goto out;
  }
  uint64_t below = pc_pass_clear_below(&pass, UINT64_MAX);
  int refused = 0, gone = below > 1 && clear(w, c, &pass, below, &refused);
  did |= gone;
  if (others > 0 || unsure || refused)
    pc_waiting_note(w, c, pass.newest, !gone || below <= pass.newest);
out:
  pc_view_put(w, view);
  if (obs != found) free(obs);
  if (kind != kinds) free(kind);
  free(covers);
  free(ran);
  pc_buf_free(&ckey);
  return did;
}
