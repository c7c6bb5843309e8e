/* claims.c — which buckets of notifications a thread scans.
 *
 * The worker's share. In a cluster coordinated through ZooKeeper each worker
 * is a member (lockservice/coord.h: an ephemeral sequential node under
 * workers/), and the buckets are divided over the members that run the same
 * observers (its group), sorted by name, a contiguous range each (Apache
 * Fluo's scheme, for each set of observers: a worker leaves the notifications
 * of observers it does not run to their workers, so each group scans every
 * bucket). A change of membership is
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
 *
 * Named locks. The backfill of a registration is kept to one worker at a
 * time (backfill.c) by a named lock taken first in the in-process lock
 * service and then, in a cluster, in ZooKeeper (coord.h's locks/, which go
 * with the session of a worker that dies). It is taken once per turn of
 * backfill pages, never per claim or per round.
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "lockservice/coord.h"
#include "lockservice/lockservice.h"

#define CLAIM_PREFIX "percolator/notify/"
#define LOCAL_SESSION_TTL_MS 600000u
#define JOIN_TIMEOUT_MS 10000u
#define CLUSTER_TIMEOUT_MS 2000u

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

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The worker's group in the membership: 16 hex digits of a hash (FNV-1a) of
 * its observers' names, sorted. Workers that run the same observers share
 * the buckets; workers that run other observers scan every bucket for them. */
static void member_group(const pc_worker_t *w, char out[17]) {
  const char **names = calloc(w->nslots ? w->nslots : 1, sizeof *names);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; names && i < w->nslots; i++) names[i] = w->slots[i].obs->name;
  if (names) qsort(names, w->nslots, sizeof *names, name_cmp);
  for (size_t i = 0; names && i < w->nslots; i++)
    for (const unsigned char *p = (const unsigned char *)names[i];; p++) {
      h = (h ^ *p) * 1099511628211ull; /* the NUL too: it separates the names */
      if (!*p) break;
    }
  free(names);
  snprintf(out, 17, "%016" PRIx64, h);
}

pc_status_t pc_claims_start(pc_worker_t *w, pc_error_t *err) {
  if (!w->db->coordination) return PC_OK;
  uint32_t t = w->db->opts.timeout_ms < JOIN_TIMEOUT_MS ? JOIN_TIMEOUT_MS : w->db->opts.timeout_ms;
  char group[17];
  member_group(w, group);
  w->member = pc_member_join(w->db->coordination, group, w->o.stable_ms, t, err);
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

/* A session in the in-process lock service, (re)opened as needed. */
static int local_session(pc_worker_t *w, uint64_t *session) {
  pc_error_t err;
  if (*session && pc_ls_session_keepalive(w->local, *session, &err) == PC_OK) return 1;
  *session = 0;
  return pc_ls_session_open(w->local, LOCAL_SESSION_TTL_MS, session, &err) == PC_OK;
}

/* The cluster-wide lock for name: the ZooKeeper lock (coord.h) named by a
 * hash (FNV-1a, 64 bits) of name, as a lock's name may hold only letters,
 * digits and a few signs, and is short. Two names of one hash would only
 * take turns. */
static int cluster_lock_name(const char *name, size_t nl, char *out, size_t cap) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < nl; i++) h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
  return snprintf(out, cap, "named-%016" PRIx64, h) < (int)cap;
}

int pc_lock_take(pc_worker_t *w, uint64_t *session, const char *name, size_t nl) {
  if (!local_session(w, session)) return -1;
  int got = 0;
  uint64_t holder;
  pc_error_t err;
  if (pc_ls_lock_try(w->local, *session, name, nl, &got, &holder, &err) != PC_OK) return -1;
  if (!got) return 0;
  if (w->db->coordination) {
    char zname[128];
    pc_status_t st = cluster_lock_name(name, nl, zname, sizeof zname)
                         ? pc_coord_lock(w->db->coordination, zname,
                                         pc_min_u64(w->db->opts.timeout_ms, CLUSTER_TIMEOUT_MS),
                                         &got, &err)
                         : PC_INVALID;
    if (st != PC_OK || !got) {
      (void)pc_ls_lock_release(w->local, *session, name, nl, &err);
      return st == PC_OK ? 0 : -1;
    }
  }
  return 1;
}

int pc_claim_take(wthread_t *t, uint32_t k) {
  pc_worker_t *w = t->w;
  uint32_t lo, hi;
  if (!pc_claim_buckets(w, k, &lo, &hi)) return PC_CLAIM_NOT_MINE;
  char name[64];
  int nl = claim_name(name, sizeof name, k * w->o.buckets_per_claim);
  if (!local_session(w, &t->session)) return -1;
  int got = 0;
  uint64_t holder;
  pc_error_t err; /* in this process only: the shares keep processes apart */
  if (pc_ls_lock_try(w->local, t->session, name, (size_t)nl, &got, &holder, &err) != PC_OK)
    return -1;
  return got;
}

void pc_lock_release(pc_worker_t *w, uint64_t session, const char *name, size_t nl) {
  pc_error_t err; /* a lock already gone went with its session */
  char zname[128];
  if (w->db->coordination && cluster_lock_name(name, nl, zname, sizeof zname))
    (void)pc_coord_unlock(w->db->coordination, zname,
                          pc_min_u64(w->db->opts.timeout_ms, CLUSTER_TIMEOUT_MS), &err);
  (void)pc_ls_lock_release(w->local, session, name, nl, &err);
}

void pc_claim_release(wthread_t *t, uint32_t k) {
  char name[64];
  int nl = claim_name(name, sizeof name, k * t->w->o.buckets_per_claim);
  pc_error_t err; /* a lock already gone went with its session */
  (void)pc_ls_lock_release(t->w->local, t->session, name, (size_t)nl, &err);
}

void pc_lock_session_end(pc_worker_t *w, uint64_t *session) {
  if (!*session) return;
  pc_error_t err;
  (void)pc_ls_session_close(w->local, *session, &err);
  *session = 0;
}

void pc_claims_end(wthread_t *t) { pc_lock_session_end(t->w, &t->session); }
