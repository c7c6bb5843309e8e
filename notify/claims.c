/* claims.c — which buckets of notifications a thread scans.
 *
 * The worker's share. In a cluster coordinated through ZooKeeper each worker
 * is a member (lockservice/coord.h: an ephemeral sequential node under
 * workers/), and the buckets are divided over the members sorted by name,
 * a contiguous range each (Apache Fluo's scheme). A change of membership is
 * used once it has been stable for stable_ms, and meanwhile every worker
 * keeps the share it has, so a worker joining or leaving shifts the shares
 * without stopping the others; it costs no ZooKeeper write per claim or per
 * round (the membership is a watched view). Without coordination (the
 * embedded store, a served directory) the share is every bucket.
 *
 * Claims. Within the share, buckets [k * buckets_per_claim, (k + 1) *
 * buckets_per_claim) form claim k, locked as "percolator/notify/<first
 * bucket>" in the pc_db_t's in-process lock service (one session per
 * thread), so that two threads of this process never scan a claim at once.
 * A claim another thread holds is skipped.
 *
 * Shares and claims only spread the work: during a change two workers may
 * scan the same buckets, and for stable_ms a departed member's buckets wait.
 * Safety comes from the acks (run.c): at most one run per change commits.
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>

#include "core/error.h"
#include "core/log.h"
#include "lockservice/coord.h"
#include "lockservice/lockservice.h"

#define CLAIM_PREFIX "percolator/notify/"
#define LOCAL_SESSION_TTL_MS 600000u
#define JOIN_TIMEOUT_MS 10000u

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

pc_status_t pc_claims_start(pc_worker_t *w, pc_error_t *err) {
  if (!w->db->coordination) return PC_OK;
  uint32_t t = w->db->opts.timeout_ms < JOIN_TIMEOUT_MS ? JOIN_TIMEOUT_MS : w->db->opts.timeout_ms;
  w->member = pc_member_join(w->db->coordination, w->o.stable_ms, t, err);
  return w->member ? PC_OK : err->code;
}

void pc_claims_stop(pc_worker_t *w) {
  pc_member_leave(w->member); /* the others take its share once stable */
  w->member = NULL;
}

void pc_worker_share(pc_worker_t *w, uint32_t *lo, uint32_t *hi, uint32_t *index,
                     uint32_t *count) {
  uint32_t i = 0, n = 1;
  if (w->member && pc_member_partition(w->member, &i, &n)) {
    uint32_t l = 0, h = 0;
    if (n) pc_member_buckets(i, n, PC_NOTIFY_BUCKETS, &l, &h);
    if (n)
      pc_log(PC_LOG_INFO, "worker: share %u of %u workers: buckets [%u, %u)", i + 1, n, l, h);
    else
      pc_log(PC_LOG_INFO, "worker: no share (not in the stable membership)");
  }
  if (n) pc_member_buckets(i, n, PC_NOTIFY_BUCKETS, lo, hi);
  else *lo = *hi = 0;
  if (index) *index = i;
  if (count) *count = n;
}

int pc_claim_buckets(pc_worker_t *w, uint32_t k, uint32_t *lo, uint32_t *hi) {
  uint32_t slo, shi;
  pc_worker_share(w, &slo, &shi, NULL, NULL);
  uint32_t a = k * w->o.buckets_per_claim, b = a + w->o.buckets_per_claim;
  if (b > PC_NOTIFY_BUCKETS) b = PC_NOTIFY_BUCKETS;
  *lo = a > slo ? a : slo;
  *hi = b < shi ? b : shi;
  return *lo < *hi;
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
  uint32_t lo, hi;
  if (!pc_claim_buckets(w, k, &lo, &hi)) return PC_CLAIM_NOT_MINE;
  char name[64];
  int nl = claim_name(name, sizeof name, k * w->o.buckets_per_claim);
  if (!local_session(t)) return -1;
  int got = 0;
  uint64_t holder;
  pc_error_t err;
  if (pc_ls_lock_try(w->local, t->session, name, (size_t)nl, &got, &holder, &err) != PC_OK)
    return -1;
  return got;
}

void pc_claim_release(wthread_t *t, uint32_t k) {
  pc_worker_t *w = t->w;
  char name[64];
  int nl = claim_name(name, sizeof name, k * w->o.buckets_per_claim);
  pc_error_t err; /* a lock already gone went with its session */
  (void)pc_ls_lock_release(w->local, t->session, name, (size_t)nl, &err);
}

void pc_claims_end(wthread_t *t) {
  if (!t->session) return;
  pc_error_t err;
  (void)pc_ls_session_close(t->w->local, t->session, &err);
  t->session = 0;
}
