/* backfill.c — the keeper thread of a worker: it reads the registered
 * observers again when the view is due (view.c), and runs the backfill of
 * each registration of this worker's observers that is not finished
 * (core/observed.c's pc_db_backfill_step, a page per transaction, its
 * progress committed with each page). A backfill is kept to one worker at a
 * time by the named lock "percolator/backfill/<observer>" (claims.c's,
 * in-process and in lockd), which a worker that dies gives up with its
 * session; the next worker of that observer goes on from the last page
 * committed. Only a worker that runs the observer backfills it: the cells it
 * presents wait for that observer anyway.
 */
#include "notify/engine.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

#define LOCK_PREFIX "percolator/backfill/"
#define PAGES_PER_TURN 64    /* then the view is looked at again */
#define KEEPER_NAP_MS 500u

/* Runs up to PAGES_PER_TURN pages of observer name's backfill under its
 * lock. Returns 2 when it is finished (the view is then behind), 1 when it
 * went on, 0 when it did nothing (another worker holds it, or an error). */
static int backfill_turn(pc_worker_t *w, uint64_t *session, const char *name) {
  char lock[128];
  int nl = snprintf(lock, sizeof lock, LOCK_PREFIX "%s", name);
  if (pc_lock_take(w, session, lock, (size_t)nl) != 1) return 0; /* another worker's, or later */
  int done = 0, pages = 0;
  pc_error_t err;
  pc_status_t st = PC_OK;
  while (!done && pages < PAGES_PER_TURN && !pc_worker_stopping(w)) {
    st = pc_db_backfill_step(w->db, name, &done, &err);
    if (st != PC_OK) break;
    pages++;
  }
  pc_lock_release(w, *session, lock, (size_t)nl);
  if (st != PC_OK)
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

void *pc_keeper_main(void *arg) {
  pc_worker_t *w = arg;
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
      if (pc_view_refresh(w, &err) != PC_OK) pc_worker_nap(w, KEEPER_NAP_MS);
    } else if (!worked) {
      pc_worker_nap(w, KEEPER_NAP_MS);
    }
  }
  pc_lock_session_end(w, &session);
  return NULL;
}
