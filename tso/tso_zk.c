/* tso_zk.c — the oracle's election, its bound kept in ZooKeeper behind a
 * fenced write, the lease it serves under, and the client that follows the
 * leader (the contract and the node layout are in tso_zk.h). */
#include "tso/tso_zk.h"

#include "core/error.h"
#include "core/log.h"
#include "lockservice/coord.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "net/tls.h"
#include "tso/tso_client.h"
#include "tso/tso_server.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ELECTION "tso/election"
#define CANDIDATE ELECTION "/n-"
#define BOUND "tso/bound"
#define ADDR_CAP 300

/* The bound of one term of leadership: ZooKeeper's tso/bound at a version. */
typedef struct zk_bound {
  pc_tso_node_t *node;
  int32_t version;                /* of tso/bound as last read or written */
  uint64_t confirmed_at;          /* send time of the last fenced write that succeeded */
  _Atomic(pc_oracle_t *) oracle;  /* set once the oracle is open */
  atomic_int fenced;              /* a write was refused: another leader exists */
} zk_bound_t;

struct pc_tso_node {
  char *connect, *root, *secret, *advertise;
  uint32_t asked_timeout_ms, window_ms;
  pthread_t thread;
  int running;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: a watch fired, or stop */
  int stop, changed;
  pc_zk_t *zk;        /* the election thread's session (read under mu by info) */
  pc_zk_watch_t watch; /* every watch and session event of the node */
  char my[256];       /* its election node, relative to the root ("" none) */
  char leader[ADDR_CAP];
  pthread_rwlock_t lk; /* guards oracle for the handler */
  pc_oracle_t *oracle; /* while leading */
  _Atomic uint64_t elections;
};

static uint32_t session_ms(pc_tso_node_t *n) {
  return n->zk ? pc_zk_session_timeout(n->zk) : n->asked_timeout_ms;
}

/* How long one ZooKeeper call of the node may take. */
static uint32_t call_ms(pc_tso_node_t *n) {
  uint32_t t = session_ms(n) / 3;
  return t < 200 ? 200 : t;
}

static void node_event(void *ctx, int event, const char *path) {
  (void)event;
  (void)path;
  pc_tso_node_t *n = ctx;
  pthread_mutex_lock(&n->mu);
  n->changed = 1;
  pthread_cond_broadcast(&n->cv);
  pthread_mutex_unlock(&n->mu);
}

/* Waits up to ms for an event or stop; returns 1 on stop. */
static int node_wait(pc_tso_node_t *n, uint32_t ms) {
  struct timespec until = pc_mono_after_ms(ms);
  pthread_mutex_lock(&n->mu);
  while (!n->stop && !n->changed)
    if (pthread_cond_timedwait(&n->cv, &n->mu, &until) != 0) break;
  n->changed = 0;
  int stop = n->stop;
  pthread_mutex_unlock(&n->mu);
  return stop;
}

static int parse_u64(const char *s, size_t len, uint64_t *out) {
  uint64_t v = 0;
  size_t i = 0;
  for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  if (i == 0 || (i < len && s[i] != '\n')) return -1;
  *out = v;
  return 0;
}

/* ---- the bound in ZooKeeper --------------------------------------------- */

static pc_status_t zk_bound_load(void *ctx, uint64_t *bound, pc_error_t *err) {
  zk_bound_t *b = ctx;
  pc_tso_node_t *n = b->node;
  /* a follower may lag: sync first, and the version check of every write
   * refuses what a stale read would have let through anyway */
  pc_status_t st = pc_zk_sync(n->zk, BOUND, call_ms(n), err);
  char *data = NULL;
  size_t len = 0;
  if (st == PC_OK) st = pc_zk_get(n->zk, BOUND, NULL, &data, &len, &b->version, call_ms(n), err);
  if (st == PC_NOT_FOUND) {
    st = pc_zk_create(n->zk, BOUND, "0", 1, 0, NULL, 0, call_ms(n), err);
    if (st == PC_OK || st == PC_BUSY)
      st = pc_zk_get(n->zk, BOUND, NULL, &data, &len, &b->version, call_ms(n), err);
  }
  if (st != PC_OK) return st;
  int bad = parse_u64(data, len, bound) != 0;
  free(data);
  if (bad)
    return pc_error_set(err, PC_CORRUPTION, "zookeeper %s/" BOUND ": not a timestamp bound",
                        n->root);
  return PC_OK;
}

static pc_status_t zk_bound_persist(void *ctx, uint64_t bound, pc_error_t *err) {
  zk_bound_t *b = ctx;
  pc_tso_node_t *n = b->node;
  char text[32];
  int len = snprintf(text, sizeof text, "%" PRIu64, bound);
  uint64_t sent = pc_now_mono_ms();
  int32_t version = b->version;
  pc_status_t st =
      pc_zk_check_set(n->zk, n->my, BOUND, text, (size_t)len, version, &version, call_ms(n), err);
  if (st == PC_OK) {
    b->version = version;
    b->confirmed_at = sent;
    pc_oracle_t *o = atomic_load(&b->oracle);
    if (o) pc_oracle_extend_lease(o, sent + session_ms(n) / 2);
  } else if (st == PC_CONFLICT) {
    atomic_store(&b->fenced, 1);
    pc_log(PC_LOG_WARN, "tso: %s", err ? err->text : "fenced write refused");
  }
  return st;
}

static void zk_bound_close(void *ctx) { free(ctx); }

static const pc_oracle_bound_ops_t zk_bound_ops = {zk_bound_load, zk_bound_persist,
                                                   zk_bound_close};

/* ---- the election --------------------------------------------------------- */

/* Leads until the session or the election node is lost, a write is fenced,
 * or stop. Returns 1 when it held leadership (its node must go), 0 when it
 * could not start (it may try again). */
static int lead(pc_tso_node_t *n) {
  pc_error_t err;
  zk_bound_t *b = calloc(1, sizeof *b);
  if (!b) return 0;
  b->node = n;
  char name[600];
  snprintf(name, sizeof name, "zookeeper %s/" BOUND, n->root);
  pc_oracle_t *o = pc_oracle_open_with(&zk_bound_ops, b, name, n->window_ms, 1, &err);
  if (!o) {
    pc_log(PC_LOG_WARN, "tso: cannot take over: %s", err.text);
    return 0;
  }
  pc_oracle_extend_lease(o, b->confirmed_at + session_ms(n) / 2);
  atomic_store(&b->oracle, o);
  pthread_rwlock_wrlock(&n->lk);
  n->oracle = o;
  pthread_rwlock_unlock(&n->lk);
  atomic_fetch_add(&n->elections, 1);
  pc_log(PC_LOG_INFO, "tso: leading (%s)", n->my);
  /* the heartbeat: each request that finds the election node renews the
   * lease. At a fixed rate (a sixth of the session timeout from one sending
   * to the next, not from an answer to the next sending), so that the lease
   * stays unbroken while a round trip takes up to a quarter of the timeout */
  uint64_t next = pc_now_mono_ms() + session_ms(n) / 6;
  for (;;) {
    uint64_t now = pc_now_mono_ms();
    if (node_wait(n, next > now ? (uint32_t)(next - now) : 0)) break;
    if (pc_now_mono_ms() < next) continue; /* woken early by a watch */
    if (atomic_load(&b->fenced) || pc_zk_state(n->zk) == PC_ZK_EXPIRED) break;
    uint64_t sent = pc_now_mono_ms();
    next = sent + session_ms(n) / 6;
    int exists = 0;
    pc_status_t st = pc_zk_exists(n->zk, n->my, NULL, &exists, call_ms(n), &err);
    if (st == PC_OK && !exists) break;
    if (st == PC_OK) pc_oracle_extend_lease(o, sent + session_ms(n) / 2);
  }
  pc_oracle_fence(o);
  pthread_rwlock_wrlock(&n->lk);
  n->oracle = NULL;
  pthread_rwlock_unlock(&n->lk);
  pc_log(PC_LOG_WARN, "tso: no longer leading (%s)",
         atomic_load(&b->fenced)                     ? "another oracle took over"
         : pc_zk_state(n->zk) == PC_ZK_EXPIRED       ? "session expired"
                                                     : "stopping or election node gone");
  pc_oracle_close(o); /* frees b */
  return 1;
}

/* Reads the address of the candidate named first in names into n->leader. */
static void note_leader(pc_tso_node_t *n, char **names, size_t count) {
  char rel[300], *data = NULL;
  size_t len = 0;
  pc_error_t err;
  if (count == 0) return;
  snprintf(rel, sizeof rel, ELECTION "/%s", names[0]);
  if (pc_zk_get(n->zk, rel, NULL, &data, &len, NULL, call_ms(n), &err) != PC_OK) return;
  pthread_mutex_lock(&n->mu);
  snprintf(n->leader, sizeof n->leader, "%s", data);
  pthread_mutex_unlock(&n->mu);
  free(data);
}

/* One step of the election: joins it if needed, then leads or waits for the
 * predecessor. */
static void election_step(pc_tso_node_t *n) {
  pc_error_t err;
  if (!n->my[0]) {
    if (pc_zk_ensure(n->zk, ELECTION, call_ms(n), &err) != PC_OK ||
        pc_zk_create(n->zk, CANDIDATE, n->advertise, strlen(n->advertise),
                     PC_ZK_EPHEMERAL | PC_ZK_SEQUENCE, n->my, sizeof n->my, call_ms(n),
                     &err) != PC_OK) {
      n->my[0] = '\0'; /* a create whose answer was lost leaves a node that dies with us */
      node_wait(n, 500);
      return;
    }
    pc_log(PC_LOG_INFO, "tso: candidate %s", n->my);
  }
  char **names = NULL;
  size_t count = 0;
  if (pc_zk_children(n->zk, ELECTION, NULL, &names, &count, call_ms(n), &err) != PC_OK) {
    node_wait(n, 500);
    return;
  }
  const char *mine = n->my + strlen(ELECTION) + 1;
  size_t k = 0;
  while (k < count && strcmp(names[k], mine) != 0) k++;
  note_leader(n, names, count);
  if (k == count) {
    pc_log(PC_LOG_WARN, "tso: election node %s is gone; joining again", n->my);
    n->my[0] = '\0';
  } else if (k == 0) {
    if (lead(n)) {
      if (pc_zk_state(n->zk) != PC_ZK_EXPIRED)
        pc_zk_delete(n->zk, n->my, -1, call_ms(n), &err); /* the next one takes over now */
      n->my[0] = '\0';
    } else {
      node_wait(n, 500);
    }
  } else {
    char pred[300];
    int exists = 0;
    snprintf(pred, sizeof pred, ELECTION "/%s", names[k - 1]);
    /* only the predecessor is watched: a leader's loss wakes one standby */
    if (pc_zk_exists(n->zk, pred, &n->watch, &exists, call_ms(n), &err) == PC_OK && exists)
      node_wait(n, session_ms(n));
  }
  pc_zk_free_names(names, count);
}

static void *node_main(void *arg) {
  pc_tso_node_t *n = arg;
  pc_error_t err;
  for (;;) {
    pthread_mutex_lock(&n->mu);
    int stop = n->stop;
    pthread_mutex_unlock(&n->mu);
    if (stop) break;
    if (n->zk && pc_zk_state(n->zk) == PC_ZK_EXPIRED) {
      pthread_mutex_lock(&n->mu);
      pc_zk_t *old = n->zk;
      n->zk = NULL;
      pthread_mutex_unlock(&n->mu);
      pc_zk_close(old);
      n->my[0] = '\0';
    }
    if (!n->zk) {
      pc_zk_options_t zo = {n->connect, n->root, n->secret, n->asked_timeout_ms};
      pc_zk_t *zk = pc_zk_open(&zo, n->asked_timeout_ms, &n->watch, &err);
      if (!zk) {
        pc_log(PC_LOG_WARN, "tso: %s", err.text);
        node_wait(n, 500);
        continue;
      }
      pthread_mutex_lock(&n->mu);
      n->zk = zk;
      pthread_mutex_unlock(&n->mu);
    }
    election_step(n);
  }
  if (n->zk && n->my[0]) pc_zk_delete(n->zk, n->my, -1, call_ms(n), &err);
  return NULL;
}

pc_tso_node_t *pc_tso_node_create(const pc_tso_node_options_t *o, pc_error_t *err) {
  if (!o || !o->zk.connect || !o->zk.root) {
    pc_error_set(err, PC_INVALID, "tso: want a ZooKeeper ensemble and a root");
    return NULL;
  }
  pc_tso_node_t *n = calloc(1, sizeof *n);
  if (!n || !(n->connect = strdup(o->zk.connect)) || !(n->root = strdup(o->zk.root)) ||
      (o->zk.secret && !(n->secret = strdup(o->zk.secret)))) {
    if (n) {
      free(n->connect);
      free(n->root);
    }
    free(n);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  n->asked_timeout_ms = o->zk.session_timeout_ms ? o->zk.session_timeout_ms : 10000;
  n->window_ms = o->window_ms;
  n->watch = (pc_zk_watch_t){node_event, n};
  pthread_mutex_init(&n->mu, NULL);
  pc_cond_init_mono(&n->cv);
  /* writers first: a step-down must not wait behind a stream of requests */
  pthread_rwlockattr_t ra;
  pthread_rwlockattr_init(&ra);
  pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&n->lk, &ra);
  pthread_rwlockattr_destroy(&ra);
  return n;
}

pc_status_t pc_tso_node_join(pc_tso_node_t *n, const char *advertise, pc_error_t *err) {
  if (n->running) return pc_error_set(err, PC_STATE, "tso: already in the election");
  if (!advertise || !*advertise)
    return pc_error_set(err, PC_INVALID, "tso: an address to advertise is required");
  char *copy = strdup(advertise);
  if (!copy) return pc_error_set(err, PC_NOMEM, "out of memory");
  pthread_mutex_lock(&n->mu); /* the handler reads it */
  n->advertise = copy;
  pthread_mutex_unlock(&n->mu);
  if (pthread_create(&n->thread, NULL, node_main, n) != 0)
    return pc_error_set(err, PC_NOMEM, "tso: cannot start the election thread");
  n->running = 1;
  return PC_OK;
}

void pc_tso_node_stop(pc_tso_node_t *n) {
  if (!n) return;
  if (n->running) {
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thread, NULL);
  }
  pc_zk_close(n->zk); /* its ephemeral node goes at once */
  pthread_rwlock_destroy(&n->lk);
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
  free(n->connect);
  free(n->root);
  if (n->secret) explicit_bzero(n->secret, strlen(n->secret));
  free(n->secret);
  free(n->advertise);
  free(n);
}

pc_status_t pc_tso_node_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                pc_buf_t *reply, pc_error_t *err) {
  pc_tso_node_t *n = ctx;
  pthread_rwlock_rdlock(&n->lk);
  pc_oracle_t *o = n->oracle;
  pc_status_t st;
  if (o) {
    st = pc_tso_rpc_handler(o, op, body, len, reply, err);
    /* checked again before the reply leaves, as PD does: a leader paused
     * after it took the timestamps answers nothing once its lease ran out */
    if (st == PC_OK && !pc_oracle_serving(o)) {
      reply->len = 0;
      st = pc_error_set(err, PC_UNAVAILABLE, "timestamp oracle: lease ran out");
    }
  }
  pthread_rwlock_unlock(&n->lk);
  if (o) return st;
  pthread_mutex_lock(&n->mu);
  st = pc_error_set(err, PC_UNAVAILABLE, "timestamp oracle %s is a standby (leader: %s)",
                    n->advertise ? n->advertise : "(not joined)",
                    n->leader[0] ? n->leader : "unknown");
  pthread_mutex_unlock(&n->mu);
  return st;
}

void pc_tso_node_info(pc_tso_node_t *n, pc_tso_node_info_t *out) {
  memset(out, 0, sizeof *out);
  pthread_rwlock_rdlock(&n->lk);
  if (n->oracle) {
    out->leading = pc_oracle_serving(n->oracle);
    out->last_ts = pc_oracle_last(n->oracle);
  }
  pthread_rwlock_unlock(&n->lk);
  out->elections = atomic_load(&n->elections);
  pthread_mutex_lock(&n->mu);
  out->zk_state = n->zk ? (int)pc_zk_state(n->zk) : -1;
  snprintf(out->leader, sizeof out->leader, "%s", n->leader);
  pthread_mutex_unlock(&n->mu);
}

/* ---- the client side ------------------------------------------------------ */

/* A client of one leader, shared by the callers using it. */
typedef struct holder {
  atomic_int refs;
  pc_rpc_client_t *rpc;
  char addr[ADDR_CAP];
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
  if (pc_zk_children(zk, ELECTION, watch, &names, &count, t, &err) != PC_OK) {
    if (err.code == PC_NOT_FOUND) /* no oracle yet: watch for the folder */
      pc_zk_exists(zk, ELECTION, watch, &(int){0}, t, &err);
    return;
  }
  char leader[ADDR_CAP] = "", members[1024] = "";
  for (size_t i = 0; i < count && i < 16; i++) {
    char rel[300], *data = NULL;
    size_t len;
    snprintf(rel, sizeof rel, ELECTION "/%s", names[i]);
    if (pc_zk_get(zk, rel, NULL, &data, &len, NULL, t, &err) != PC_OK) continue;
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
  char host[ADDR_CAP];
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
