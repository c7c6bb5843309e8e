/* tso_election.c — the oracle with standbys, server side: an oracle
 * process's election in ZooKeeper, its bound kept there behind a fenced
 * write, the lease it serves under, and the handler that serves only while
 * it leads (the contract is in tso_election.h, the nodes in tso_wire.h). */
#include "tso/tso_election.h"

#include "base/error.h"
#include "base/log.h"
#include "lockservice/coord.h"
#include "lockservice/zk.h"
#include "tso/tso_server.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bound of one term of leadership: ZooKeeper's tso/bound at a version. */
typedef struct zk_bound {
  pc_tso_node_t *node;
  int32_t version;                /* of tso/bound as last read or written */
  uint64_t confirmed_at;          /* send time of the last fenced write that succeeded */
  _Atomic uint64_t last;          /* the bound last read or written (the extender writes) */
  _Atomic(pc_oracle_t *) oracle;  /* set once the oracle is open */
  atomic_int fenced;              /* a write was refused: another leader exists */
} zk_bound_t;

struct pc_tso_node {
  char *connect, *root, *secret, *system_secret, *advertise;
  uint32_t asked_timeout_ms, window_ms;
  pthread_t thread;
  int running;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: a watch fired, or stop */
  int stop, changed;
  pc_zk_t *zk;        /* the election thread's session (read under mu by info) */
  pc_zk_watch_t watch; /* every watch and session event of the node */
  char my[256];       /* its election node, relative to the root ("" none) */
  char leader[PC_TSO_ADDR_CAP];
  char cannot_lead[PC_ERROR_TEXT]; /* why its turn came and it could not lead ("" none; mu) */
  uint64_t far_logged; /* the bound far beyond the clock last explained (the thread's) */
  char passed_over[PC_ERROR_TEXT]; /* the candidate last passed over (the thread's) */
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
  pc_status_t st = pc_zk_sync(n->zk, PC_TSO_ZK_BOUND, call_ms(n), err);
  char *data = NULL;
  size_t len = 0;
  if (st == PC_OK)
    st = pc_zk_get(n->zk, PC_TSO_ZK_BOUND, NULL, &data, &len, &b->version, call_ms(n), err);
  if (st == PC_NOT_FOUND) {
    st = pc_zk_create(n->zk, PC_TSO_ZK_BOUND, "0", 1, 0, NULL, 0, call_ms(n), err);
    if (st == PC_OK || st == PC_BUSY)
      st = pc_zk_get(n->zk, PC_TSO_ZK_BOUND, NULL, &data, &len, &b->version, call_ms(n), err);
  }
  if (st != PC_OK) return st;
  int bad = parse_u64(data, len, bound) != 0;
  free(data);
  if (bad)
    return pc_error_set(err, PC_CORRUPTION,
                        "zookeeper %s/" PC_TSO_ZK_BOUND ": not a timestamp bound", n->root);
  /* no oracle writes a bound that far ahead of a clock: someone else did
   * (a process that could write there), or this clock is far behind */
  uint64_t now_ms = pc_now_wall_ms(), bound_ms = PC_TS_PHYSICAL_MS(*bound);
  if (bound_ms > now_ms + PC_TSO_BOUND_AHEAD_MAX_MS) {
    if (n->far_logged != *bound) { /* once per value: the election tries again and again */
      n->far_logged = *bound;
      pc_log(PC_LOG_ERROR,
             "tso: zookeeper %s/" PC_TSO_ZK_BOUND " holds %" PRIu64 ", %" PRIu64
             " days beyond this machine's clock: no oracle writes a bound more than %llu days "
             "ahead of its clock, so another process wrote it (or this clock is wrong). Not "
             "leading from it. Set it back to the last bound an oracle of this cluster wrote "
             "(each logs \"last bound written\" when it stops leading) with ZooKeeper's CLI: "
             "zkCli.sh -server %s, then (with zookeeper.system_secret) addauth digest "
             "percolator-system:<secret>, then set %s/" PC_TSO_ZK_BOUND " <bound>",
             n->root, *bound, (uint64_t)((bound_ms - now_ms) / 86400000ull),
             PC_TSO_BOUND_AHEAD_MAX_MS / 86400000ull, n->connect, n->root);
    }
    return pc_error_set(err, PC_CORRUPTION,
                        "zookeeper %s/" PC_TSO_ZK_BOUND " holds %" PRIu64
                        ", far beyond this clock: not an oracle's bound (see the oracle's log)",
                        n->root, *bound);
  }
  atomic_store(&b->last, *bound);
  return PC_OK;
}

static pc_status_t zk_bound_persist(void *ctx, uint64_t bound, pc_error_t *err) {
  zk_bound_t *b = ctx;
  pc_tso_node_t *n = b->node;
  char text[32];
  int len = snprintf(text, sizeof text, "%" PRIu64, bound);
  uint64_t sent = pc_now_mono_ms();
  int32_t version = b->version;
  pc_status_t st = pc_zk_check_set(n->zk, n->my, PC_TSO_ZK_BOUND, text, (size_t)len, version,
                                   &version, call_ms(n), err);
  if (st == PC_OK) {
    b->version = version;
    b->confirmed_at = sent;
    atomic_store(&b->last, bound);
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
  snprintf(name, sizeof name, "zookeeper %s/" PC_TSO_ZK_BOUND, n->root);
  pc_oracle_t *o = pc_oracle_open_with(&zk_bound_ops, b, name, n->window_ms, 1, &err);
  if (!o) {
    pthread_mutex_lock(&n->mu);
    int same = strcmp(n->cannot_lead, err.text) == 0;
    snprintf(n->cannot_lead, sizeof n->cannot_lead, "%s", err.text);
    pthread_mutex_unlock(&n->mu);
    if (!same) pc_log(PC_LOG_WARN, "tso: cannot take over: %s", err.text);
    return 0;
  }
  pthread_mutex_lock(&n->mu);
  n->cannot_lead[0] = '\0';
  pthread_mutex_unlock(&n->mu);
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
  int stopping = 0;
  for (;;) {
    uint64_t now = pc_now_mono_ms();
    if ((stopping = node_wait(n, next > now ? (uint32_t)(next - now) : 0))) break;
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
  /* a clean stop hands the lead over on purpose: not a warning */
  pc_log(stopping ? PC_LOG_INFO : PC_LOG_WARN,
         "tso: no longer leading (%s); last bound written: %" PRIu64,
         stopping                ? "stopping: a standby takes over"
         : atomic_load(&b->fenced) ? "tso/bound was written by another process: another oracle "
                                     "took over, or a process that may write there"
         : pc_zk_state(n->zk) == PC_ZK_EXPIRED ? "session expired"
                                               : "its election node is gone",
         atomic_load(&b->last));
  pc_oracle_close(o); /* frees b */
  return 1;
}

/* Whether candidate names[i] is an oracle: an ephemeral node of a system
 * session. 1 yes (its address into addr when addr is not NULL), 0 no (it
 * is passed over), -1 gone; ZooKeeper that cannot say counts as yes, so
 * that no live oracle is ever passed over. */
static int candidate(pc_tso_node_t *n, const char *name, char *addr, size_t cap) {
  char rel[300], *data = NULL;
  pc_error_t err;
  snprintf(rel, sizeof rel, PC_TSO_ZK_ELECTION "/%s", name);
  pc_status_t st = pc_coord_system_node(n->zk, rel, NULL, &data, NULL, NULL, call_ms(n), &err);
  if (st == PC_OK && addr) snprintf(addr, cap, "%s", data);
  free(data);
  if (st == PC_DENIED) {
    if (strcmp(n->passed_over, err.text) != 0) { /* once, not at every step */
      snprintf(n->passed_over, sizeof n->passed_over, "%s", err.text);
      pc_log(PC_LOG_WARN, "tso: %s", err.text);
    }
    return 0;
  }
  return st == PC_NOT_FOUND ? -1 : 1;
}

/* One step of the election: joins it if needed, then leads or waits for the
 * predecessor. */
static void election_step(pc_tso_node_t *n) {
  pc_error_t err;
  if (!n->my[0]) {
    if (pc_zk_ensure(n->zk, PC_TSO_ZK_ELECTION, call_ms(n), &err) != PC_OK ||
        pc_zk_create(n->zk, PC_TSO_ZK_CANDIDATE, n->advertise, strlen(n->advertise),
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
  if (pc_zk_children(n->zk, PC_TSO_ZK_ELECTION, NULL, &names, &count, call_ms(n), &err) != PC_OK) {
    node_wait(n, 500);
    return;
  }
  const char *mine = n->my + strlen(PC_TSO_ZK_ELECTION) + 1;
  size_t k = 0;
  while (k < count && strcmp(names[k], mine) != 0) k++;
  /* the oracles before it, the first of them the leader */
  long pred = -1;
  char leader[PC_TSO_ADDR_CAP] = "";
  for (size_t i = 0; i < k; i++) {
    int is = candidate(n, names[i], leader[0] ? NULL : leader, sizeof leader);
    if (is == 1) pred = (long)i;
  }
  if (!leader[0] && k < count) snprintf(leader, sizeof leader, "%s", n->advertise);
  pthread_mutex_lock(&n->mu);
  snprintf(n->leader, sizeof n->leader, "%s", leader);
  if (pred >= 0) n->cannot_lead[0] = '\0'; /* not its turn: another oracle leads */
  pthread_mutex_unlock(&n->mu);
  if (k == count) {
    pc_log(PC_LOG_WARN, "tso: election node %s is gone; joining again", n->my);
    n->my[0] = '\0';
  } else if (pred < 0) {
    if (lead(n)) {
      if (pc_zk_state(n->zk) != PC_ZK_EXPIRED)
        pc_zk_delete(n->zk, n->my, -1, call_ms(n), &err); /* the next one takes over now */
      n->my[0] = '\0';
    } else {
      node_wait(n, 500);
    }
  } else {
    char rel[300];
    int exists = 0;
    snprintf(rel, sizeof rel, PC_TSO_ZK_ELECTION "/%s", names[pred]);
    /* only the predecessor is watched: a leader's loss wakes one standby */
    if (pc_zk_exists(n->zk, rel, &n->watch, &exists, call_ms(n), &err) == PC_OK && exists)
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
      pc_zk_options_t zo = {n->connect, n->root, n->secret, n->asked_timeout_ms,
                            n->system_secret};
      pc_zk_t *zk = pc_zk_open(&zo, n->asked_timeout_ms, &n->watch, &err);
      /* a system session says so before it joins (system/<session>) */
      if (zk && pc_coord_prepare(zk, 0, n->asked_timeout_ms, &err) != PC_OK) {
        pc_zk_close(zk);
        zk = NULL;
      }
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
      (o->zk.secret && !(n->secret = strdup(o->zk.secret))) ||
      (o->zk.system_secret && !(n->system_secret = strdup(o->zk.system_secret)))) {
    if (n) {
      free(n->connect);
      free(n->root);
      free(n->secret);
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
  if (n->system_secret) explicit_bzero(n->system_secret, strlen(n->system_secret));
  free(n->system_secret);
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
  if (n->cannot_lead[0])
    st = pc_error_set(err, PC_UNAVAILABLE, "timestamp oracle %s cannot lead: %s",
                      n->advertise ? n->advertise : "(not joined)", n->cannot_lead);
  else
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
