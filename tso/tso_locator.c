/* tso_locator.c — the oracle with standbys, client side: a background
 * thread follows the election on a coordination session and keeps a client
 * of the leader (the first candidate that is an ephemeral node of a system
 * session), which callers share; a call that fails on one leader waits for
 * the next and asks it (the contract is in tso_locator.h, the nodes in
 * tso_wire.h). */
#include "tso/tso_locator.h"

#include "base/error.h"
#include "base/log.h"
#include "lockservice/coord.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "net/tls.h"
#include "tso/tso_client.h"
#include "tso/tso_wire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A client of one leader, shared by the callers using it. */
typedef struct holder {
  atomic_int refs;
  pc_rpc_client_t *rpc;
  char addr[PC_TSO_ADDR_CAP];
} holder_t;

struct pc_tso_locator {
  pc_coord_t *coord; /* the session it follows the election on */
  int own_coord;     /* opened by pc_tso_locator_create, closed with it */
  int listener;      /* its id among the coordinator's listeners */
  char *secret, *system_secret;
  pc_rpc_auth_t auth; /* over secret, system_secret and a reference of the TLS context */
  pthread_t thread;
  int running;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: a watch fired, a new leader, or stop */
  int stop, changed;
  uint64_t gen; /* bumped with every new leader */
  holder_t *cur;
  char members[1024];
  char warned[PC_ERROR_TEXT]; /* the last candidate passed over (the follower's thread) */
};

static void holder_unref(holder_t *h) {
  if (!h || atomic_fetch_sub(&h->refs, 1) != 1) return;
  pc_rpc_client_destroy(h->rpc);
  free(h);
}

static void locator_event(void *ctx) {
  pc_tso_locator_t *l = ctx;
  pthread_mutex_lock(&l->mu);
  l->changed = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* Reads the election (setting a watch) on zk and installs a client of its
 * leader. */
static void locator_refresh(pc_tso_locator_t *l, pc_zk_t *zk) {
  pc_error_t err;
  uint32_t t = pc_zk_session_timeout(zk) / 3;
  pc_zk_watch_t *watch = pc_coord_watch(l->coord);
  char **names = NULL;
  size_t count = 0;
  if (pc_zk_children(zk, PC_TSO_ZK_ELECTION, watch, &names, &count, t, &err) != PC_OK) {
    if (err.code == PC_NOT_FOUND) /* no oracle yet: watch for the folder */
      pc_zk_exists(zk, PC_TSO_ZK_ELECTION, watch, &(int){0}, t, &err);
    return;
  }
  char leader[PC_TSO_ADDR_CAP] = "", members[1024] = "";
  for (size_t i = 0, seen = 0; i < count && seen < 16; i++) {
    char rel[300], *data = NULL;
    snprintf(rel, sizeof rel, PC_TSO_ZK_ELECTION "/%s", names[i]);
    /* an oracle's candidate is an ephemeral node of a system session: any
     * other node there is no oracle, however it sorts */
    pc_status_t st = pc_coord_system_node(zk, rel, NULL, &data, NULL, NULL, t, &err);
    if (st == PC_DENIED && strcmp(l->warned, err.text) != 0) { /* once, not every look */
      snprintf(l->warned, sizeof l->warned, "%s", err.text);
      pc_log(PC_LOG_WARN, "tso: %s", err.text);
    }
    if (st != PC_OK) continue;
    seen++;
    if (!leader[0]) snprintf(leader, sizeof leader, "%s", data);
    size_t used = strlen(members);
    snprintf(members + used, sizeof members - used, "%s\n", data);
    free(data);
  }
  pc_zk_free_names(names, count);
  pthread_mutex_lock(&l->mu);
  snprintf(l->members, sizeof l->members, "%s", members);
  int same = l->cur ? strcmp(l->cur->addr, leader) == 0 : !leader[0];
  pthread_mutex_unlock(&l->mu);
  if (same) return;
  holder_t *h = NULL;
  char host[PC_TSO_ADDR_CAP];
  uint16_t port;
  if (leader[0] && pc_parse_endpoint(leader, 0, host, sizeof host, &port, &err) == PC_OK &&
      (h = calloc(1, sizeof *h))) {
    atomic_init(&h->refs, 1);
    snprintf(h->addr, sizeof h->addr, "%s", leader);
    if (!(h->rpc = pc_rpc_client_create(host, port, &l->auth, &err))) {
      free(h);
      h = NULL;
    }
  }
  pthread_mutex_lock(&l->mu);
  holder_t *old = l->cur;
  l->cur = h;
  l->gen++;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  holder_unref(old);
  pc_log(PC_LOG_DEBUG, "tso: leader %s", leader[0] ? leader : "(none)");
}

/* One look at the election, on the coordinator's session if it has one. */
static int locator_look(pc_tso_locator_t *l) {
  pc_zk_t *zk = pc_coord_acquire(l->coord);
  if (zk) locator_refresh(l, zk);
  pc_coord_release(l->coord);
  return zk != NULL;
}

static void *locator_main(void *arg) {
  pc_tso_locator_t *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    pthread_mutex_unlock(&l->mu);
    int had = locator_look(l);
    pthread_mutex_lock(&l->mu);
    /* the watch wakes it; the period only covers a watch lost with a session */
    struct timespec until = pc_mono_after_ms(had ? 2000 : 500);
    while (!l->stop && !l->changed)
      if (pthread_cond_timedwait(&l->cv, &l->mu, &until) != 0) break;
    l->changed = 0;
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

void pc_tso_locator_destroy(pc_tso_locator_t *l) {
  if (!l) return;
  if (l->listener >= 0) pc_coord_unlisten(l->coord, l->listener);
  if (l->running) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
  }
  if (l->own_coord) pc_coord_close(l->coord);
  holder_unref(l->cur);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l->secret);
  free(l->system_secret);
  pc_tls_unref(l->auth.tls);
  free(l);
}

pc_tso_locator_t *pc_tso_locator_on(pc_coord_t *coord, const pc_rpc_auth_t *auth,
                                    pc_error_t *err) {
  pc_tso_locator_t *l = calloc(1, sizeof *l);
  if (!l || (auth && auth->secret && !(l->secret = strdup(auth->secret))) ||
      (auth && auth->system_secret && !(l->system_secret = strdup(auth->system_secret)))) {
    if (l) free(l->secret);
    free(l);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  l->auth = (pc_rpc_auth_t){l->secret, l->system_secret, auth ? pc_tls_ref(auth->tls) : NULL};
  l->coord = coord;
  pthread_mutex_init(&l->mu, NULL);
  pc_cond_init_mono(&l->cv);
  l->listener = pc_coord_listen(coord, locator_event, l);
  if (l->listener < 0) {
    pc_tso_locator_destroy(l);
    pc_error_set(err, PC_INVALID, "tso: too many users of one coordination session");
    return NULL;
  }
  locator_look(l);
  if (pthread_create(&l->thread, NULL, locator_main, l) != 0) {
    pc_tso_locator_destroy(l);
    pc_error_set(err, PC_NOMEM, "tso: cannot start the leader follower");
    return NULL;
  }
  l->running = 1;
  return l;
}

pc_tso_locator_t *pc_tso_locator_create(const pc_zk_options_t *zo, const pc_rpc_auth_t *auth,
                                        uint32_t timeout_ms, pc_error_t *err) {
  pc_coord_t *c = pc_coord_open(zo, 0, timeout_ms, err);
  if (!c) return NULL;
  pc_tso_locator_t *l = pc_tso_locator_on(c, auth, err);
  if (!l) {
    pc_coord_close(c);
    return NULL;
  }
  l->own_coord = 1;
  return l;
}

/* The current leader's client (a reference) and the generation, or NULL. */
static holder_t *current(pc_tso_locator_t *l, uint64_t *gen) {
  pthread_mutex_lock(&l->mu);
  holder_t *h = l->cur;
  if (h) atomic_fetch_add(&h->refs, 1);
  *gen = l->gen;
  pthread_mutex_unlock(&l->mu);
  return h;
}

/* Waits until the leader changes from gen, at most ms. */
static void wait_new_leader(pc_tso_locator_t *l, uint64_t gen, uint32_t ms) {
  struct timespec until = pc_mono_after_ms(ms);
  pthread_mutex_lock(&l->mu);
  while (!l->stop && l->gen == gen)
    if (pthread_cond_timedwait(&l->cv, &l->mu, &until) != 0) break;
  pthread_mutex_unlock(&l->mu);
}

/* Calls fn on the leader, following it to a new one until timeout_ms. */
static pc_status_t on_leader(pc_tso_locator_t *l, uint32_t timeout_ms,
                             pc_status_t (*fn)(pc_rpc_client_t *, void *, uint32_t, pc_error_t *),
                             void *arg, pc_error_t *err) {
  uint64_t deadline = pc_now_mono_ms() + timeout_ms;
  pc_status_t st = pc_error_set(err, PC_UNAVAILABLE, "timestamp oracle: no leader elected");
  for (;;) {
    uint64_t gen, now = pc_now_mono_ms();
    if (now >= deadline) break;
    uint32_t left = (uint32_t)(deadline - now);
    holder_t *h = current(l, &gen);
    if (h) {
      /* one attempt gets at most a second, so that a paused leader does not
       * hold a caller past the moment a new one is elected */
      st = fn(h->rpc, arg, left < 1000 ? left : 1000, err);
      holder_unref(h);
      if (st == PC_OK || (st != PC_UNAVAILABLE && st != PC_TIMEOUT)) return st;
    }
    now = pc_now_mono_ms();
    if (now >= deadline) break;
    left = (uint32_t)(deadline - now);
    wait_new_leader(l, gen, left < 50 ? left : 50);
  }
  if (st == PC_TIMEOUT || st == PC_UNAVAILABLE)
    pc_error_prefix(err, "no timestamp oracle answered within %u ms", timeout_ms);
  return st;
}

typedef struct fetch_arg {
  uint32_t count;
  uint64_t *first;
} fetch_arg_t;

static pc_status_t do_fetch(pc_rpc_client_t *c, void *arg, uint32_t ms, pc_error_t *err) {
  fetch_arg_t *a = arg;
  return pc_tso_remote_fetch(c, a->count, ms, a->first, err);
}

static pc_status_t do_info(pc_rpc_client_t *c, void *arg, uint32_t ms, pc_error_t *err) {
  return pc_tso_remote_info(c, ms, arg, err);
}

pc_status_t pc_tso_locator_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                 pc_error_t *err) {
  fetch_arg_t a = {count, first};
  return on_leader(ctx, timeout_ms, do_fetch, &a, err);
}

pc_status_t pc_tso_locator_info(pc_tso_locator_t *l, uint32_t timeout_ms, uint64_t *last,
                                pc_error_t *err) {
  return on_leader(l, timeout_ms, do_info, last, err);
}

void pc_tso_locator_members(pc_tso_locator_t *l, char *leader, size_t lcap, char *all,
                            size_t acap) {
  pthread_mutex_lock(&l->mu);
  if (leader && lcap) snprintf(leader, lcap, "%s", l->cur ? l->cur->addr : "");
  if (all && acap) snprintf(all, acap, "%s", l->members);
  pthread_mutex_unlock(&l->mu);
}
