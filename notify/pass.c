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

int pc_pass(pc_worker_t *w, const group_t *g) {
  const pc_cell_t *c = &g->cell.n.cell;
  const pc_observer_t *found[16], **obs = found;
  size_t n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, found, 16);
  if (n > 16) {
    obs = malloc(n * sizeof *obs);
    if (!obs) return 0;
    n = pc_registry_lookup(w->reg, c->table, c->col, c->clen, obs, n);
  }
  pass_t pass = {pc_max_u64(g->strong_ts, g->weak_ts), UINT64_MAX};
  /* the observers that have nothing to do cover what the scan saw */
  size_t acting = 0;
  for (size_t i = 0; i < n; i++) {
    if (!pc_worker_slot(w, obs[i])) continue; /* registered after the start: not this worker's */
    if (pc_run_acts_on(obs[i], g)) acting++;
    else pass.cover = pc_min_u64(pass.cover, pass.newest + 1);
  }
  /* with one acting observer, the failpoint is met before the run, whose
   * commit would delete the notifications */
  pc_error_t err;
  int fp_met = acting == 1, fp_fired = fp_met && PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  int all_done = 1, did = 0, cleared = 0;
  for (size_t i = 0; i < n && !pc_worker_stopping(w); i++) {
    obs_slot_t *slot = pc_worker_slot(w, obs[i]);
    if (!slot) continue;
    uint64_t cv = 0;
    int fold = acting == 1 && !fp_fired && pc_run_acts_on(obs[i], g);
    switch (pc_run(w, slot, g, fold ? &pass : NULL, &cv, &cleared)) {
      case RUN_DONE: /* cv 0: it covers what the scan saw */
        did = 1;
        pass.cover = pc_min_u64(pass.cover, cv ? cv : pass.newest + 1);
        break;
      case RUN_IDLE:
        pass.cover = pc_min_u64(pass.cover, pass.newest + 1);
        break;
      case RUN_DEFERRED:
        all_done = 0;
        break;
    }
  }
  if (obs != found) free(obs);
  if (!all_done || pc_worker_stopping(w)) return did;
  if (cleared) return 1; /* deleted with the observer's commit */
  if (!fp_met) fp_fired = PC_FAILPOINT("worker.before_clear", &err) != PC_OK;
  if (fp_fired) return 1; /* as if crashed here */
  uint64_t below = pc_pass_clear_below(&pass, UINT64_MAX);
  if (w->db->store->ops->clear_notify(w->db->store, c, below, &err) != PC_OK) {
    char name[200];
    pc_log(PC_LOG_DEBUG, "worker: clearing the notifications of %s: %s",
           pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name), err.text);
  }
  return 1;
}
