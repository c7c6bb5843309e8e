/* lockservice.c — the in-process lock service: sessions with a
 * TTL extended by keep-alives, and named locks leased to a session that are
 * released when it closes or expires.
 *
 * One mutex guards everything. Sessions live in a chained hash table keyed by
 * their id and locks in another keyed by their name, both hashed with XXH64
 * under a random per-service seed (names come from the network) and doubled
 * when their load passes 1. Each session also links its locks in a list, so
 * closing or expiring it releases them in O(its locks).
 *
 * Expiry uses the monotonic clock and is lazy: a session found past its
 * deadline on any access is reaped on the spot (with its locks); every call
 * also sweeps a few buckets of the session table, so sessions nobody asks
 * about are reclaimed too; pc_ls_session_count and an open at the session
 * limit reap every expired session. Memory is bounded by the limits of
 * ls_internal.h.
 *
 * Session ids are epoch << 32 | counter, with a random non-zero epoch and a
 * counter from 1 that is never reused, so an id this service issued and no
 * longer knows is certainly dead, and any other id is unknown.
 */
#include "lockservice/lockservice.h"
#include "lockservice/ls_internal.h"

#include "base/error.h"
#include "base/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define INITIAL_BUCKETS 64u
#define SWEEP_BUCKETS 4u /* session buckets swept per call */

typedef struct ls_lock ls_lock_t;

typedef struct ls_session {
  uint64_t id;
  uint64_t deadline_ms; /* monotonic; expired when now >= deadline */
  uint32_t ttl_ms;
  struct ls_session *hnext; /* hash chain */
  ls_lock_t *locks;         /* this session's locks (doubly linked) */
  size_t nlocks;
} ls_session_t;

struct ls_lock {
  uint64_t hash;
  ls_lock_t *hnext; /* hash chain */
  ls_session_t *owner;
  ls_lock_t *sprev, *snext; /* owner's list */
  size_t nlen;
  char name[];
};

struct pc_ls {
  pthread_mutex_t mu;
  uint32_t epoch;        /* immutable */
  uint64_t seed;         /* immutable: XXH64 seed */
  uint32_t last_counter; /* counter of the newest session issued (0: none) */

  ls_session_t **sbuckets;
  size_t smask, nsessions, sweep;
  ls_lock_t **lbuckets;
  size_t lmask, nlocks, name_bytes;

  size_t max_sessions, max_locks_per_session, max_locks, max_name_bytes;
};

/* ---- helpers ------------------------------------------------------------- */

static uint64_t random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v) return v;
  /* No entropy yet (early boot): mix what differs between incarnations. */
  struct timespec a, b;
  clock_gettime(CLOCK_REALTIME, &a);
  clock_gettime(CLOCK_MONOTONIC, &b);
  uint64_t mix[4] = {(uint64_t)a.tv_sec * 1000000000ull + (uint64_t)a.tv_nsec,
                     (uint64_t)b.tv_sec * 1000000000ull + (uint64_t)b.tv_nsec,
                     (uint64_t)getpid(), (uint64_t)(uintptr_t)&v};
  return XXH64(mix, sizeof mix, 0);
}

static uint64_t session_hash(const pc_ls_t *ls, uint64_t id) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(id >> (56 - 8 * i));
  return XXH64(b, sizeof b, ls->seed);
}

static int name_ok(const char *name, size_t nlen) {
  return name != NULL && nlen >= 1 && nlen <= PC_LS_MAX_NAME;
}

static pc_status_t bad_name(pc_error_t *err, const char *name, size_t nlen) {
  if (!name) return pc_error_set(err, PC_INVALID, "lockservice: lock name is NULL");
  return pc_error_set(err, PC_INVALID, "lockservice: lock name of %zu bytes (must be 1..%d)",
                      nlen, PC_LS_MAX_NAME);
}

/* Doubles a bucket array (rehashing with rehash); keeps the old one on
 * allocation failure (chains just get longer). */
static void grow_sessions(pc_ls_t *ls) {
  size_t n = (ls->smask + 1) * 2;
  ls_session_t **nb = calloc(n, sizeof *nb);
  if (!nb) return;
  for (size_t i = 0; i <= ls->smask; i++) {
    ls_session_t *s = ls->sbuckets[i];
    while (s) {
      ls_session_t *next = s->hnext;
      size_t j = (size_t)session_hash(ls, s->id) & (n - 1);
      s->hnext = nb[j];
      nb[j] = s;
      s = next;
    }
  }
  free(ls->sbuckets);
  ls->sbuckets = nb;
  ls->smask = n - 1;
  ls->sweep = 0;
}

static void grow_locks(pc_ls_t *ls) {
  size_t n = (ls->lmask + 1) * 2;
  ls_lock_t **nb = calloc(n, sizeof *nb);
  if (!nb) return;
  for (size_t i = 0; i <= ls->lmask; i++) {
    ls_lock_t *l = ls->lbuckets[i];
    while (l) {
      ls_lock_t *next = l->hnext;
      size_t j = (size_t)l->hash & (n - 1);
      l->hnext = nb[j];
      nb[j] = l;
      l = next;
    }
  }
  free(ls->lbuckets);
  ls->lbuckets = nb;
  ls->lmask = n - 1;
}

/* ---- locks (mu held) ------------------------------------------------------ */

static ls_lock_t *lock_find(pc_ls_t *ls, uint64_t h, const char *name, size_t nlen) {
  for (ls_lock_t *l = ls->lbuckets[h & ls->lmask]; l; l = l->hnext)
    if (l->hash == h && l->nlen == nlen && memcmp(l->name, name, nlen) == 0) return l;
  return NULL;
}

/* Unlinks l from the lock table and its owner's list and frees it. */
static void lock_free(pc_ls_t *ls, ls_lock_t *l) {
  ls_lock_t **pp = &ls->lbuckets[l->hash & ls->lmask];
  while (*pp != l) pp = &(*pp)->hnext;
  *pp = l->hnext;
  ls_session_t *s = l->owner;
  if (l->sprev)
    l->sprev->snext = l->snext;
  else
    s->locks = l->snext;
  if (l->snext) l->snext->sprev = l->sprev;
  s->nlocks--;
  ls->nlocks--;
  ls->name_bytes -= l->nlen;
  free(l);
}

/* ---- sessions (mu held) --------------------------------------------------- */

/* Removes s from the session table, releases its locks and frees it. */
static void session_free(pc_ls_t *ls, ls_session_t *s) {
  ls_session_t **pp = &ls->sbuckets[session_hash(ls, s->id) & ls->smask];
  while (*pp != s) pp = &(*pp)->hnext;
  *pp = s->hnext;
  while (s->locks) lock_free(ls, s->locks);
  ls->nsessions--;
  free(s);
}

static int expired(const ls_session_t *s, uint64_t now) { return now >= s->deadline_ms; }

static void reap_expired(pc_ls_t *ls, ls_session_t *s) {
  pc_log(PC_LOG_DEBUG, "lockservice: session %016" PRIx64 " expired (ttl %" PRIu32
                       " ms, %zu locks released)",
         s->id, s->ttl_ms, s->nlocks);
  session_free(ls, s);
}

/* Reaps the expired sessions of bucket i. */
static void sweep_bucket(pc_ls_t *ls, size_t i, uint64_t now) {
  ls_session_t *s = ls->sbuckets[i];
  while (s) {
    ls_session_t *next = s->hnext;
    if (expired(s, now)) reap_expired(ls, s);
    s = next;
  }
}

/* A few buckets per call, so abandoned sessions are reclaimed over time. */
static void sweep_some(pc_ls_t *ls, uint64_t now) {
  for (unsigned k = 0; k < SWEEP_BUCKETS && k <= ls->smask; k++) {
    sweep_bucket(ls, ls->sweep, now);
    ls->sweep = (ls->sweep + 1) & ls->smask;
  }
}

static void sweep_all(pc_ls_t *ls, uint64_t now) {
  for (size_t i = 0; i <= ls->smask; i++) sweep_bucket(ls, i, now);
}

/* The live session id, or NULL (an expired one is reaped). */
static ls_session_t *session_live(pc_ls_t *ls, uint64_t id, uint64_t now) {
  for (ls_session_t *s = ls->sbuckets[session_hash(ls, id) & ls->smask]; s; s = s->hnext) {
    if (s->id != id) continue;
    if (expired(s, now)) {
      reap_expired(ls, s);
      return NULL;
    }
    return s;
  }
  return NULL;
}

/* The live owner of lock l, or NULL when it had expired (l is then freed). */
static ls_session_t *lock_owner_live(pc_ls_t *ls, ls_lock_t *l, uint64_t now) {
  ls_session_t *s = l->owner;
  if (expired(s, now)) {
    reap_expired(ls, s);
    return NULL;
  }
  return s;
}

/* Enters the mutex and does the per-call sweep; returns the current time. */
static uint64_t enter(pc_ls_t *ls) {
  pthread_mutex_lock(&ls->mu);
  uint64_t now = pc_now_mono_ms();
  sweep_some(ls, now);
  return now;
}

static void leave(pc_ls_t *ls) { pthread_mutex_unlock(&ls->mu); }

static pc_status_t not_alive(pc_error_t *err, uint64_t id) {
  return pc_error_set(err, PC_NOT_FOUND, "lockservice: session %016" PRIx64
                                         " is not alive (expired, closed or unknown)",
                      id);
}

/* ---- public --------------------------------------------------------------- */

pc_ls_t *pc_ls_create(void) {
  pc_ls_t *ls = calloc(1, sizeof *ls);
  if (!ls) return NULL;
  ls->sbuckets = calloc(INITIAL_BUCKETS, sizeof *ls->sbuckets);
  ls->lbuckets = calloc(INITIAL_BUCKETS, sizeof *ls->lbuckets);
  if (!ls->sbuckets || !ls->lbuckets || pthread_mutex_init(&ls->mu, NULL) != 0) {
    free(ls->sbuckets);
    free(ls->lbuckets);
    free(ls);
    return NULL;
  }
  ls->smask = ls->lmask = INITIAL_BUCKETS - 1;
  do {
    ls->epoch = (uint32_t)(random_u64() >> 16);
  } while (ls->epoch == 0);
  ls->seed = random_u64();
  ls->max_sessions = PC_LS_DEFAULT_MAX_SESSIONS;
  ls->max_locks_per_session = PC_LS_DEFAULT_MAX_LOCKS_PER_SESSION;
  ls->max_locks = PC_LS_DEFAULT_MAX_LOCKS;
  ls->max_name_bytes = PC_LS_DEFAULT_MAX_NAME_BYTES;
  return ls;
}

void pc_ls_destroy(pc_ls_t *ls) {
  if (!ls) return;
  for (size_t i = 0; i <= ls->smask; i++) {
    while (ls->sbuckets[i]) session_free(ls, ls->sbuckets[i]);
  }
  free(ls->sbuckets);
  free(ls->lbuckets);
  pthread_mutex_destroy(&ls->mu);
  free(ls);
}

uint32_t pc_ls_epoch(const pc_ls_t *ls) { return ls->epoch; }

void pc_ls_set_limits(pc_ls_t *ls, size_t max_sessions, size_t max_locks_per_session,
                      size_t max_locks, size_t max_name_bytes) {
  pthread_mutex_lock(&ls->mu);
  if (max_sessions) ls->max_sessions = max_sessions;
  if (max_locks_per_session) ls->max_locks_per_session = max_locks_per_session;
  if (max_locks) ls->max_locks = max_locks;
  if (max_name_bytes) ls->max_name_bytes = max_name_bytes;
  pthread_mutex_unlock(&ls->mu);
}

pc_status_t pc_ls_session_open(pc_ls_t *ls, uint32_t ttl_ms, uint64_t *session,
                               pc_error_t *err) {
  if (!ls || !session) return pc_error_set(err, PC_INVALID, "lockservice: NULL argument");
  *session = 0;
  if (ttl_ms < PC_LS_TTL_MIN || ttl_ms > PC_LS_TTL_MAX)
    return pc_error_set(err, PC_INVALID,
                        "lockservice: session ttl_ms %" PRIu32 " out of range %u..%u", ttl_ms,
                        PC_LS_TTL_MIN, PC_LS_TTL_MAX);
  uint64_t now = enter(ls);
  if (ls->nsessions >= ls->max_sessions) sweep_all(ls, now);
  if (ls->nsessions >= ls->max_sessions) {
    size_t max = ls->max_sessions;
    leave(ls);
    return pc_error_set(err, PC_BUSY, "lockservice: too many live sessions (limit %zu)", max);
  }
  if (ls->last_counter == UINT32_MAX) {
    leave(ls);
    return pc_error_set(err, PC_BUSY,
                        "lockservice: session ids of epoch %08" PRIx32
                        " exhausted; restart the lock service",
                        ls->epoch);
  }
  ls_session_t *s = calloc(1, sizeof *s);
  if (!s) {
    leave(ls);
    return pc_error_set(err, PC_NOMEM, "lockservice: out of memory opening a session");
  }
  s->id = (uint64_t)ls->epoch << 32 | ++ls->last_counter;
  s->ttl_ms = ttl_ms;
  s->deadline_ms = now + ttl_ms;
  size_t i = (size_t)session_hash(ls, s->id) & ls->smask;
  s->hnext = ls->sbuckets[i];
  ls->sbuckets[i] = s;
  if (++ls->nsessions > ls->smask + 1) grow_sessions(ls);
  *session = s->id;
  leave(ls);
  pc_error_clear(err);
  return PC_OK;
}

pc_status_t pc_ls_session_keepalive(pc_ls_t *ls, uint64_t session, pc_error_t *err) {
  if (!ls) return pc_error_set(err, PC_INVALID, "lockservice: NULL argument");
  uint64_t now = enter(ls);
  ls_session_t *s = session_live(ls, session, now);
  if (s) s->deadline_ms = now + s->ttl_ms;
  leave(ls);
  if (!s) return not_alive(err, session);
  pc_error_clear(err);
  return PC_OK;
}

pc_status_t pc_ls_session_close(pc_ls_t *ls, uint64_t session, pc_error_t *err) {
  if (!ls) return pc_error_set(err, PC_INVALID, "lockservice: NULL argument");
  uint64_t now = enter(ls);
  ls_session_t *s = session_live(ls, session, now);
  if (s) session_free(ls, s);
  leave(ls);
  if (!s) return not_alive(err, session);
  pc_error_clear(err);
  return PC_OK;
}

pc_ls_liveness_t pc_ls_session_liveness(pc_ls_t *ls, uint64_t session) {
  if (!ls || session == 0 || (uint32_t)(session >> 32) != ls->epoch) return PC_LS_UNKNOWN;
  uint32_t counter = (uint32_t)session;
  uint64_t now = enter(ls);
  pc_ls_liveness_t r;
  if (counter == 0 || counter > ls->last_counter)
    r = PC_LS_UNKNOWN; /* never issued here: another incarnation with the same epoch */
  else
    r = session_live(ls, session, now) ? PC_LS_ALIVE : PC_LS_DEAD;
  leave(ls);
  return r;
}

size_t pc_ls_session_count(pc_ls_t *ls) {
  if (!ls) return 0;
  uint64_t now = enter(ls);
  sweep_all(ls, now);
  size_t n = ls->nsessions;
  leave(ls);
  return n;
}

pc_status_t pc_ls_lock_try(pc_ls_t *ls, uint64_t session, const char *name, size_t nlen,
                           int *acquired, uint64_t *holder, pc_error_t *err) {
  if (!ls || !acquired) return pc_error_set(err, PC_INVALID, "lockservice: NULL argument");
  *acquired = 0;
  if (holder) *holder = 0;
  if (!name_ok(name, nlen)) return bad_name(err, name, nlen);
  uint64_t h = XXH64(name, nlen, ls->seed);
  uint64_t now = enter(ls);
  ls_session_t *s = session_live(ls, session, now);
  if (!s) {
    leave(ls);
    return not_alive(err, session);
  }
  ls_lock_t *l = lock_find(ls, h, name, nlen);
  ls_session_t *owner = l ? lock_owner_live(ls, l, now) : NULL;
  if (owner) {
    *acquired = owner == s;
    if (holder) *holder = owner->id;
    leave(ls);
    pc_error_clear(err);
    return PC_OK;
  }
  const char *limit = NULL;
  size_t max = 0;
  if (s->nlocks >= ls->max_locks_per_session)
    limit = "locks held by this session", max = ls->max_locks_per_session;
  else if (ls->nlocks >= ls->max_locks)
    limit = "locks held in all", max = ls->max_locks;
  else if (ls->max_name_bytes - ls->name_bytes < nlen || ls->name_bytes > ls->max_name_bytes)
    limit = "bytes of lock names held", max = ls->max_name_bytes;
  if (limit) {
    leave(ls);
    return pc_error_set(err, PC_BUSY, "lockservice: too many %s (limit %zu)", limit, max);
  }
  l = malloc(sizeof *l + nlen);
  if (!l) {
    leave(ls);
    return pc_error_set(err, PC_NOMEM, "lockservice: out of memory taking a lock");
  }
  l->hash = h;
  l->owner = s;
  l->nlen = nlen;
  memcpy(l->name, name, nlen);
  size_t i = (size_t)h & ls->lmask;
  l->hnext = ls->lbuckets[i];
  ls->lbuckets[i] = l;
  l->sprev = NULL;
  l->snext = s->locks;
  if (s->locks) s->locks->sprev = l;
  s->locks = l;
  s->nlocks++;
  ls->name_bytes += nlen;
  if (++ls->nlocks > ls->lmask + 1) grow_locks(ls);
  *acquired = 1;
  if (holder) *holder = s->id;
  leave(ls);
  pc_error_clear(err);
  return PC_OK;
}

pc_status_t pc_ls_lock_release(pc_ls_t *ls, uint64_t session, const char *name, size_t nlen,
                               pc_error_t *err) {
  if (!ls) return pc_error_set(err, PC_INVALID, "lockservice: NULL argument");
  if (!name_ok(name, nlen)) return bad_name(err, name, nlen);
  uint64_t h = XXH64(name, nlen, ls->seed);
  uint64_t now = enter(ls);
  ls_session_t *s = session_live(ls, session, now);
  ls_lock_t *l = s ? lock_find(ls, h, name, nlen) : NULL;
  int held = l && l->owner == s;
  if (held) lock_free(ls, l);
  leave(ls);
  if (!s) return not_alive(err, session);
  if (!held)
    return pc_error_set(err, PC_NOT_FOUND,
                        "lockservice: lock '%.*s' is not held by session %016" PRIx64,
                        (int)(nlen > 64 ? 64 : nlen), name, session);
  pc_error_clear(err);
  return PC_OK;
}

uint64_t pc_ls_lock_holder(pc_ls_t *ls, const char *name, size_t nlen) {
  if (!ls || !name_ok(name, nlen)) return 0;
  uint64_t h = XXH64(name, nlen, ls->seed);
  uint64_t now = enter(ls);
  ls_lock_t *l = lock_find(ls, h, name, nlen);
  ls_session_t *owner = l ? lock_owner_live(ls, l, now) : NULL;
  uint64_t id = owner ? owner->id : 0;
  leave(ls);
  return id;
}
