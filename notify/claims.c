/* claims.c — which buckets of notifications a thread scans. Buckets
 * [k * buckets_per_claim, (k + 1) * buckets_per_claim) form claim k, locked
 * as "percolator/notify/<first bucket>": first in the pc_db_t's in-process
 * lock service (one session per thread, so two threads of this process
 * never scan a claim at once), then, in a cluster, in lockd (so two
 * processes do not). A claim someone else holds is skipped. Claims only
 * spread the work and keep workers from clumping: safety comes from the
 * acks (run.c).
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>

#include "core/error.h"
#include "lockservice/lockservice.h"

#define CLAIM_PREFIX "percolator/notify/"
#define LOCAL_SESSION_TTL_MS 600000u
#define LOCKD_TIMEOUT_MS 2000u

pc_ls_t *pc_claims_local(pc_db_t *db) {
  pthread_mutex_lock(&db->notify_mu);
  if (!db->notify_ls) {
    db->notify_ls = pc_ls_create();
    db->notify_ls_destroy = pc_ls_destroy;
  }
  pc_ls_t *ls = db->notify_ls;
  pthread_mutex_unlock(&db->notify_mu);
  return ls;
}

static int claim_name(char *buf, size_t cap, uint32_t first_bucket) {
  return snprintf(buf, cap, CLAIM_PREFIX "%" PRIu32, first_bucket);
}

/* The thread's session in the in-process lock service, (re)opened as needed. */
static int local_session(wthread_t *t) {
  pc_error_t err;
  if (t->session && pc_ls_session_keepalive(t->w->local, t->session, &err) == PC_OK) return 1;
  t->session = 0;
  return pc_ls_session_open(t->w->local, LOCAL_SESSION_TTL_MS, &t->session, &err) == PC_OK;
}

int pc_claim_take(wthread_t *t, uint32_t k) {
  pc_worker_t *w = t->w;
  char name[64];
  int nl = claim_name(name, sizeof name, k * w->o.buckets_per_claim);
  if (!local_session(t)) return -1;
  int got = 0;
  uint64_t holder;
  pc_error_t err;
  if (pc_ls_lock_try(w->local, t->session, name, (size_t)nl, &got, &holder, &err) != PC_OK)
    return -1;
  if (!got) return 0;
  if (w->db->ls) {
    pc_status_t st = pc_ls_client_lock_try(w->db->ls, name, (size_t)nl,
                                           pc_min_u64(w->db->opts.timeout_ms, LOCKD_TIMEOUT_MS),
                                           &got, &holder, &err);
    if (st != PC_OK || !got) {
      (void)pc_ls_lock_release(w->local, t->session, name, (size_t)nl, &err);
      return st == PC_OK ? 0 : -1;
    }
  }
  return 1;
}

void pc_claim_release(wthread_t *t, uint32_t k) {
  pc_worker_t *w = t->w;
  char name[64];
  int nl = claim_name(name, sizeof name, k * w->o.buckets_per_claim);
  pc_error_t err; /* a lock already gone went with its session */
  if (w->db->ls)
    (void)pc_ls_client_lock_release(w->db->ls, name, (size_t)nl,
                                    pc_min_u64(w->db->opts.timeout_ms, LOCKD_TIMEOUT_MS), &err);
  (void)pc_ls_lock_release(w->local, t->session, name, (size_t)nl, &err);
}

void pc_claims_end(wthread_t *t) {
  if (!t->session) return;
  pc_error_t err;
  (void)pc_ls_session_close(t->w->local, t->session, &err);
  t->session = 0;
}
