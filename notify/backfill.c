/* backfill.c — the backfill thread of a worker: it reads the registered
 * observers again when the view is due (view.c), and runs the backfill of
 * each registration of this worker's observers that is not finished:
 * core/observed.c's pc_db_backfill_step reads the observer's table a page
 * at a time, at snapshots taken once every store knew the observer, and
 * this file presents each cell of its column to it — a run of the observer
 * on the cell, as for a notification (run.c), unless its ack shows it ran on
 * the cell since the registration took effect. A run that fails is deferred
 * and parked as any run; the page stops before a deferred cell and is taken
 * up again later. No notification is written, so the column's other
 * observers do not run again. A backfill is kept to one worker at a time by
 * the named lock "percolator/backfill/<observer>" (claims.c's, in-process
 * and in ZooKeeper), which a worker that dies gives up with its session; the
 * next worker of that observer goes on from the last page committed. Only a
 * worker that runs the observer backfills it.
 */
#include "notify/engine.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

#define LOCK_PREFIX "percolator/backfill/"
#define PAGES_PER_TURN 64    /* then the view is looked at again */
#define BACKFILL_NAP_MS 500u

/* Presents one cell to the observer (pc_backfill_fn): a run, as for a
 * notification at since (run.c skips it when its ack is at or past since). */
static int present(void *ctx, const pc_observer_info_t *o, const char *row, size_t rlen,
                   uint64_t since) {
  pc_worker_t *w = ctx;
  obs_slot_t *slot = NULL;
  for (size_t i = 0; i < w->nslots && !slot; i++)
    if (strcmp(w->slots[i].obs->name, o->name) == 0) slot = &w->slots[i];
  if (!slot || pc_worker_stopping(w)) return 1;
  int weak = o->kind == PC_OBSERVER_WEAK;
  pc_notification_t n = {{o->table, row, rlen, o->col, o->clen}, since, weak,
                         pc_notify_bucket(o->table, row, rlen)};
  group_t g = {{0}, weak ? 0 : since, weak ? since : 0, 1};
  if (pc_note_copy(&g.cell, &n) != 0) return 1;
  uint64_t cover = 0, retry_at = 0;
  int cleared = 0;
  run_result_t r = pc_run(w, slot, &g, NULL, &cover, &cleared, &retry_at);
  pc_note_free(&g.cell);
  return r == RUN_DEFERRED;
}

/* Runs up to PAGES_PER_TURN pages of observer name's backfill under its
 * lock. Returns 2 when it is finished (the view is then behind), 1 when it
 * went on, 0 when it did nothing (another worker holds it, a cell waits to
 * be presented again, or an error). */
static int backfill_turn(pc_worker_t *w, uint64_t *session, const char *name) {
  char lock[128];
  int nl = snprintf(lock, sizeof lock, LOCK_PREFIX "%s", name);
  if (pc_lock_take(w, session, lock, (size_t)nl) != 1) return 0; /* another worker's, or later */
  int done = 0, pages = 0;
  pc_error_t err;
  pc_status_t st = PC_OK;
  while (!done && pages < PAGES_PER_TURN && !pc_worker_stopping(w)) {
    st = pc_db_backfill_step(w->db, name, present, w, &done, &err);
    if (st != PC_OK) break;
    pages++;
  }
  pc_lock_release(w, *session, lock, (size_t)nl);
  if (st != PC_OK && st != PC_BUSY)
    pc_log(PC_LOG_DEBUG, "worker: backfill of observer '%s': %s (going on later)", name, err.text);
  return done ? 2 : st == PC_OK && pages > 0;
}

/* One turn over the unfinished registrations of this worker's observers:
 * 2 when one finished, 1 when one went on, 0 when none did. */
static int backfill_some(pc_worker_t *w, uint64_t *session) {
  pc_view_t *v = pc_view_get(w);
  int worked = 0;
  for (size_t i = 0; v && i < v->n && !pc_worker_stopping(w); i++)
    for (size_t k = 0; k < v->cols[i].nobs && !pc_worker_stopping(w); k++) {
      const view_obs_t *o = &v->cols[i].obs[k];
      if (!o->mine || o->state != PC_BACKFILL_RUNNING) continue;
      int r = backfill_turn(w, session, o->name);
      if (r > worked) worked = r;
    }
  pc_view_put(w, v);
  return worked;
}

void pc_backfill_main(pc_worker_t *w) {
  uint64_t session = 0;
  while (!pc_worker_stopping(w)) {
    if (pc_view_due(w)) {
      pc_error_t err;
      if (pc_view_refresh(w, &err) != PC_OK) {
        pc_log(PC_LOG_DEBUG, "worker: reading the registered observers: %s", err.text);
        pc_view_stale(w);
      }
      pc_waiting_prune(w);
    }
    int worked = backfill_some(w, &session);
    if (worked == 2) { /* a state is DONE now: read it before another turn */
      pc_error_t err;
      if (pc_view_refresh(w, &err) != PC_OK) pc_worker_nap(w, BACKFILL_NAP_MS);
    } else if (!worked) {
      pc_worker_nap(w, pc_view_due_in(w, BACKFILL_NAP_MS));
    }
  }
  pc_lock_session_end(w, &session);
}
