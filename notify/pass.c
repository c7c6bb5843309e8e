/* pass.c — one pass over a cell (Fluo's processor, for one cell). A scan
 * may find several notifications of a cell (strong and weak, several
 * timestamps); they are coalesced into one pass. Each observer of the
 * cell's column whose kind was notified runs in its own transaction (run.c)
 * and covers what it observed:
 *   strong  a run at start_ts S covers every change below S; a skip (its
 *           ack A is past the newest strong notification found) covers
 *           every change below A;
 *   weak    a run covers what committed below its start_ts;
 *   parked  covers everything (its record re-queues it);
 *   idle    (nothing of its kind was notified) covers what the scan saw.
 * When every observer is done, the cell's notifications below the bound of
 * the deletion rule (pc_pass_clear_below) are deleted; an observer that
 * failed, conflicted or waits out a backoff leaves them all in place.
 *
 * When exactly one observer acts on the pass, the bound is known before it
 * commits (the others are idle), so its transaction, begun for the cell,
 * deletes them in its own commit when it can (txn.c decides: a one-phase
 * commit in the cell's row): the run and the end of its notifications are
 * then one durable write instead of a synced one and an unsynced one queued
 * behind it. Otherwise the pass deletes them with clear_notify.
 */
#include "notify/engine.h"

#include <stdlib.h>

#include "core/error.h"
#include "core/failpoint.h"
#include "core/log.h"

/* The deletion rule, written once. M = p->newest, the newest notification
 * of the cell the scan found; C = the least of what the observers cover.
 * Notifications below max(M + 1, C) go:
 *   - below M + 1 is always safe: every notification of a cell is written
 *     by a transaction that locked the cell (a write conflicts with a write,
 *     and a weak notification with both), so a cell's notifications appear
 *     in timestamp order, and a scan that saw the one at M saw every older
 *     one of the cell, with its kind;
 *   - above M only what every observer of the column covers, because the
 *     kind of a notification that arrived after the scan is unknown. A
 *     change committed during the runs therefore keeps its notification,
 *     and a weak notification set while its observer runs makes it run
 *     again. */
uint64_t pc_pass_clear_below(const pass_t *p, uint64_t extra) {
  uint64_t cover = pc_min_u64(p->cover, extra);
  return pc_max_u64(p->newest + 1, cover == UINT64_MAX ? 0 : cover);
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
  pass_t pass = {pc_max_u64(g->strong_ts, g->weak_ts), UINT64_MAX};
  pc_buf_t ckey = {0};
  uint64_t *covers = NULL, *ran = calloc(w->nslots, sizeof *ran);
  int did = 0;
  if (!ran || pc_backoff_key(&ckey, c, NULL) != 0) goto out; /* out of memory: next round */
  /* observers of the cell wait out a backoff, and nothing new arrived */
  if (pc_backoff_cell_check(w, &ckey, pass.newest, &covers)) goto out;
  size_t acting = 0;
  for (size_t i = 0; i < n; i++) {
    obs_slot_t *slot = pc_worker_slot(w, obs[i]);
    size_t k = slot ? (size_t)(slot - w->slots) : 0;
    if (!slot) kind[i] = OBS_NONE; /* registered after the start: not this worker's */
    else if (!pc_run_acts_on(obs[i], g)) kind[i] = OBS_IDLE;
    else if (obs[i]->kind == PC_OBSERVER_WEAK && covers && covers[k] > g->weak_ts)
      kind[i] = OBS_REMEMBERED; /* its run covered these already: once per change */
    else kind[i] = OBS_ACTS, acting++;
    if (kind[i] == OBS_IDLE) pass.cover = pc_min_u64(pass.cover, pass.newest + 1);
    if (kind[i] == OBS_REMEMBERED) {
      pass.cover = pc_min_u64(pass.cover, covers[k]);
      ran[k] = covers[k];
    }
  }
  /* with one acting observer, the failpoint is met before the run, whose
   * commit would delete the notifications */
  pc_error_t err;
  int fp_met = acting == 1, fp_fired = fp_met && PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  int all_done = 1, cleared = 0;
  uint64_t until = UINT64_MAX; /* the first retry of the observers that wait */
  for (size_t i = 0; i < n && !pc_worker_stopping(w); i++) {
    if (kind[i] != OBS_ACTS) continue;
    obs_slot_t *slot = pc_worker_slot(w, obs[i]);
    uint64_t cv = 0, retry_at = 0;
    int fold = acting == 1 && !fp_fired;
    run_result_t r = pc_run(w, slot, g, fold ? &pass : NULL, &cv, &cleared, &retry_at);
    wthread_t *self = pc_worker_self();
    if (self && self->given_up) goto out; /* the watchdog took over: this thread leaves */
    switch (r) {
      case RUN_DONE: /* cv 0: it covers what the scan saw */
        did = 1;
        cv = cv ? cv : pass.newest + 1;
        pass.cover = pc_min_u64(pass.cover, cv);
        if (obs[i]->kind == PC_OBSERVER_WEAK) ran[slot - w->slots] = cv;
        break;
      case RUN_IDLE:
        pass.cover = pc_min_u64(pass.cover, pass.newest + 1);
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
  did = 1;
  if (cleared) goto out; /* deleted with the observer's commit */
  if (!fp_met) fp_fired = PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  if (fp_fired) goto out; /* as if crashed here */
  uint64_t below = pc_pass_clear_below(&pass, UINT64_MAX);
  if (w->db->store->ops->clear_notify(w->db->store, c, below, &err) != PC_OK) {
    char name[200];
    pc_log(PC_LOG_DEBUG, "worker: clearing the notifications of %s: %s",
           pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
  }
out:
  if (obs != found) free(obs);
  if (kind != kinds) free(kind);
  free(covers);
  free(ran);
  pc_buf_free(&ckey);
  return did;
}
