/* batcher.c — the client side of the timestamp oracle. Many
 * threads ask for one timestamp each; a batcher keeps at most one fetch in
 * flight and makes each fetch ask for exactly as many timestamps as there are
 * threads waiting, then hands base+i to each of them.
 *
 * Callers join the open "round". A caller that finds no fetch in flight takes
 * the open round (closing it, so later callers join a new one) and becomes its
 * leader: it fetches count = members timestamps without holding the lock,
 * publishes the result in the round and wakes everyone; the members of the
 * next round then elect their own leader the same way. An uncontended caller
 * thus fetches on its own thread with no hand-off. Waiting is a condition
 * variable on CLOCK_MONOTONIC with the caller's deadline, and a leader passes
 * its remaining time to the fetch, so every call is bounded by its timeout
 * (a leader whose fetch answers after its deadline reports PC_TIMEOUT too).
 * A member that times out before its round is taken leaves it (the fetch asks
 * for one fewer); one that times out during the fetch forfeits its timestamp
 * (a gap, which is harmless). A fetch error goes to every member of the round.
 * Rounds are fetched strictly one after another, so each thread's successive
 * timestamps increase. */
#include "tso/oracle.h"

#include "base/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* The callers served by one fetch. The open round belongs to the batcher; a
 * taken round is freed by the last member to leave it once it is done. */
struct round {
  uint32_t members; /* callers in this round, its leader included */
  uint32_t count;   /* timestamps fetched: members when the round was taken */
  uint32_t claimed; /* timestamps handed out so far (<= count) */
  int done;         /* the fetch returned: status, first and err are set */
  pc_status_t status;
  uint64_t first;
  pc_error_t err;
};

struct pc_ts_batcher {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* rounds done and fetches finished (CLOCK_MONOTONIC) */
  pc_ts_fetch_fn fetch;
  void *ctx;
  struct round *open; /* the round arriving callers join (NULL: none yet) */
  int in_flight;      /* a leader is fetching */
};

pc_ts_batcher_t *pc_ts_batcher_create(pc_ts_fetch_fn fetch, void *ctx) {
  if (!fetch) return NULL;
  pc_ts_batcher_t *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->fetch = fetch;
  b->ctx = ctx;
  if (pthread_mutex_init(&b->mu, NULL) != 0) goto fail;
  if (pc_cond_init_mono(&b->cv) != 0) goto fail_mu;
  return b;

fail_mu:
  pthread_mutex_destroy(&b->mu);
fail:
  free(b);
  return NULL;
}

void pc_ts_batcher_destroy(pc_ts_batcher_t *b) {
  if (!b) return;
  free(b->open); /* no callers are left in it */
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

/* The monotonic instant timeout_ms from now, as a timespec and in ms. */
static struct timespec deadline_after(uint32_t timeout_ms, uint64_t *ms) {
  struct timespec t = pc_mono_after_ms(timeout_ms);
  *ms = (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
  return t;
}

/* Runs the fetch of round r, which the caller has just taken. Called and
 * returns with b->mu held; drops it during the fetch. */
static void lead(pc_ts_batcher_t *b, struct round *r, uint64_t deadline_ms) {
  b->open = NULL;
  b->in_flight = 1;
  r->count = r->members;
  uint32_t count = r->count;
  uint64_t now = pc_now_mono_ms();
  uint64_t left = deadline_ms > now ? deadline_ms - now : 1;
  uint32_t timeout_ms = left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
  pthread_mutex_unlock(&b->mu);

  pc_error_t e;
  pc_error_clear(&e);
  uint64_t first = 0;
  pc_status_t st = b->fetch(b->ctx, count, timeout_ms, &first, &e);
  if (st != PC_OK) {
    e.code = st;
    if (!e.text[0]) pc_error_set(&e, st, "timestamp fetch failed (%s)", pc_status_name(st));
  }

  pthread_mutex_lock(&b->mu);
  r->status = st;
  r->first = first;
  r->err = e;
  r->done = 1;
  b->in_flight = 0;
  /* Wakes this round's members and the next round's, one of which leads. */
  pthread_cond_broadcast(&b->cv);
}

pc_status_t pc_ts_batcher_get(pc_ts_batcher_t *b, uint32_t timeout_ms, uint64_t *ts,
                              pc_error_t *err) {
  if (!b || !ts) return pc_error_set(err, PC_INVALID, "pc_ts_batcher_get: NULL argument");
  uint64_t deadline_ms;
  struct timespec deadline = deadline_after(timeout_ms, &deadline_ms);

  pthread_mutex_lock(&b->mu);
  if (!b->open) {
    b->open = calloc(1, sizeof *b->open);
    if (!b->open) {
      pthread_mutex_unlock(&b->mu);
      return pc_error_set(err, PC_NOMEM, "timestamp batcher: out of memory");
    }
  }
  struct round *r = b->open;
  r->members++;

  int led = 0, timed_out = 0;
  while (!r->done && !timed_out) {
    if (!b->in_flight && b->open == r) {
      lead(b, r, deadline_ms);
      led = 1;
    } else if (pthread_cond_timedwait(&b->cv, &b->mu, &deadline) != 0) {
      timed_out = 1; /* ETIMEDOUT; a round done just now is still taken below */
    }
  }
  if (led && r->status == PC_OK && pc_now_mono_ms() > deadline_ms) timed_out = 1;

  pc_status_t st;
  if (!r->done || (led && timed_out)) {
    st = pc_error_set(err, PC_TIMEOUT, "timestamp oracle did not answer within %u ms",
                      (unsigned)timeout_ms);
  } else if (r->status != PC_OK) {
    st = r->status;
    if (err) *err = r->err;
  } else if (r->claimed >= r->count) {
    st = pc_error_set(err, PC_INTERNAL, "timestamp batcher: round of %u over-claimed",
                      (unsigned)r->count);
  } else {
    *ts = r->first + r->claimed++;
    st = PC_OK;
    pc_error_clear(err);
  }
  r->members--;
  if (r->members == 0 && r->done) free(r);
  pthread_mutex_unlock(&b->mu);
  return st;
}
