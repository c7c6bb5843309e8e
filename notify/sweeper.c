/* sweeper.c — the sweeper: every sweep_ms it settles each lock older than
 * the lock TTL (scan_locks, then pc_txn_resolve_lock; a lock whose owner is
 * alive is left alone), so that a writer that died after its commit point
 * has its secondaries rolled forward, and their notifications appear, even
 * when nobody reads those cells. The keeper thread (worker.c) runs it.
 */
#include "notify/engine.h"

#include <inttypes.h>

#include "base/error.h"
#include "base/log.h"

typedef struct sweep {
  pc_worker_t *w;
  uint64_t resolved, alive;
} sweep_t;

static int sweep_lock(void *ctx, const pc_lock_info_t *lock) {
  sweep_t *s = ctx;
  pc_db_t *db = s->w->db;
  pc_error_t err;
  pc_status_t st = pc_txn_resolve_lock(db, lock, pc_now_mono_ms() + db->opts.timeout_ms, &err);
  if (st == PC_OK) s->resolved++;
  else if (st == PC_LOCKED) s->alive++; /* a live owner: its lease is running */
  else pc_log(PC_LOG_DEBUG, "worker: sweeper: %s", err.text);
  return pc_worker_stopping(s->w);
}

/* Settles every lock older than the lock TTL: a crashed writer's secondaries
 * are rolled forward (their notifications appear) or back. */
void pc_sweep_once(pc_worker_t *w) {
  pc_db_t *db = w->db;
  uint64_t now;
  pc_error_t err;
  if (pc_db_ts(db, db->opts.timeout_ms, &now, &err) != PC_OK) {
    pc_log(PC_LOG_DEBUG, "worker: sweeper: %s", err.text);
    return;
  }
  uint64_t age = (uint64_t)db->opts.lock_ttl_ms << PC_TS_LOGICAL_BITS;
  if (now <= age) return;
  sweep_t s = {w, 0, 0};
  pc_status_t st = db->store->ops->scan_locks(db->store, now - age, sweep_lock, &s, &err);
  if (st != PC_OK && st != PC_BUSY) /* PC_BUSY: more than one look shows, the rest next time */
    pc_log(PC_LOG_DEBUG, "worker: sweeper: %s", err.text);
  if (s.resolved)
    pc_log(PC_LOG_INFO, "worker: sweeper settled %" PRIu64 " abandoned lock%s", s.resolved,
           s.resolved == 1 ? "" : "s");
}
