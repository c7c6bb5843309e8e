/* coord.c — a cluster client's session, its node under clients/, the
 * watched view of the other clients, and its report for garbage collection
 * (coord.h). A background thread keeps the session (a new one, with a new
 * node, after an expiry), the view (a child watch wakes it) and the report;
 * callers of pc_coord_liveness and pc_coord_oldest use the session under a
 * read lock, so that the thread can replace it. */
#include "lockservice/coord.h"

#include "core/error.h"
#include "core/log.h"
#include "lockservice/zk.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLIENTS "clients"
#define DEAD_CACHE 64 /* sessions confirmed dead: session ids are never reused */

struct pc_coord {
  char *connect, *root;
  uint32_t asked_timeout_ms;
  pthread_t thread;
  int running;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: a watch fired, or stop */
  int stop, changed;
  pthread_rwlock_t zk_lk; /* zk may be replaced by the thread (write lock) */
  pc_zk_t *zk;
  pc_zk_watch_t watch;
  _Atomic uint64_t session; /* whose node exists, or 0 */
  uint64_t *view;           /* sorted live sessions (under mu) */
  size_t nview;
  uint64_t dead[DEAD_CACHE]; /* under mu: the last ones confirmed */
  size_t ndead, dead_next;
  uint64_t (*oldest)(void *ctx); /* under mu */
  void *oldest_ctx;
  uint64_t reported; /* the value the node holds */
  uint64_t reported_at_ms;
};

static uint32_t call_ms(pc_coord_t *c) {
  uint32_t t = (c->zk ? pc_zk_session_timeout(c->zk) : c->asked_timeout_ms) / 3;
  return t < 200 ? 200 : t;
}

static void coord_event(void *ctx, int event, const char *path) {
  (void)event;
  (void)path;
  pc_coord_t *c = ctx;
  pthread_mutex_lock(&c->mu);
  c->changed = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void node_name(uint64_t session, char *out, size_t cap) {
  snprintf(out, cap, CLIENTS "/%016" PRIx64, session);
}

/* The node's data: the report and who this is. */
static int node_data(uint64_t oldest, char *out, size_t cap) {
  char host[128] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  return snprintf(out, cap, "%" PRIu64 " %s:%d", oldest, host, (int)getpid());
}

static uint64_t current_report(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t v = c->oldest ? c->oldest(c->oldest_ctx) : UINT64_MAX;
  pthread_mutex_unlock(&c->mu);
  return v;
}

/* A session and this client's node, when there are none. */
static pc_status_t ensure_session(pc_coord_t *c, uint32_t timeout_ms, pc_error_t *err) {
  if (c->zk && pc_zk_state(c->zk) == PC_ZK_EXPIRED) {
    pthread_rwlock_wrlock(&c->zk_lk);
    pc_zk_t *old = c->zk;
    c->zk = NULL;
    atomic_store(&c->session, 0);
    pthread_rwlock_unlock(&c->zk_lk);
    pc_zk_close(old);
    pc_log(PC_LOG_WARN, "coordination: session expired; opening a new one");
  }
  if (!c->zk) {
    pc_zk_t *zk = pc_zk_open(c->connect, c->root, c->asked_timeout_ms, timeout_ms, &c->watch, err);
    if (!zk) return err->code;
    pthread_rwlock_wrlock(&c->zk_lk);
    c->zk = zk;
    pthread_rwlock_unlock(&c->zk_lk);
  }
  if (atomic_load(&c->session)) return PC_OK;
  uint64_t id = pc_zk_session_id(c->zk), oldest = current_report(c);
  char name[64], data[256];
  node_name(id, name, sizeof name);
  int len = node_data(oldest, data, sizeof data);
  pc_status_t st = pc_zk_ensure(c->zk, CLIENTS, timeout_ms, err);
  if (st == PC_OK)
    st = pc_zk_create(c->zk, name, data, (size_t)len, PC_ZK_EPHEMERAL, NULL, 0, timeout_ms, err);
  if (st == PC_BUSY) st = PC_OK; /* created by an attempt whose answer was lost */
  if (st != PC_OK) return st;
  c->reported = oldest;
  c->reported_at_ms = pc_now_mono_ms();
  atomic_store(&c->session, id);
  return PC_OK;
}

/* Reads clients/ with a watch into the view. */
static void refresh_view(pc_coord_t *c) {
  pc_error_t err;
  char **names = NULL;
  size_t n = 0;
  if (pc_zk_children(c->zk, CLIENTS, &c->watch, &names, &n, call_ms(c), &err) != PC_OK) return;
  uint64_t *view = n ? calloc(n, sizeof *view) : NULL;
  size_t k = 0;
  for (size_t i = 0; view && i < n; i++) {
    char *end;
    uint64_t s = strtoull(names[i], &end, 16);
    if (*end == '\0' && s) view[k++] = s;
  }
  pc_zk_free_names(names, n);
  if (n && !view) return;
  qsort(view, k, sizeof *view, u64_cmp);
  pthread_mutex_lock(&c->mu);
  free(c->view);
  c->view = view;
  c->nview = k;
  pthread_mutex_unlock(&c->mu);
}

/* Rewrites the node's report when it changed, at most every third of the
 * session timeout. */
static void report(pc_coord_t *c) {
  uint64_t v = current_report(c), now = pc_now_mono_ms();
  if (v == c->reported || now - c->reported_at_ms < pc_zk_session_timeout(c->zk) / 3) return;
  char name[64], data[256];
  node_name(atomic_load(&c->session), name, sizeof name);
  int len = node_data(v, data, sizeof data);
  pc_error_t err;
  if (pc_zk_set(c->zk, name, data, (size_t)len, -1, NULL, call_ms(c), &err) == PC_OK) {
    c->reported = v;
    c->reported_at_ms = now;
  }
}

static void *coord_main(void *arg) {
  pc_coord_t *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    pthread_mutex_unlock(&c->mu);
    pc_error_t err;
    uint32_t wait = 500;
    if (ensure_session(c, c->asked_timeout_ms, &err) == PC_OK) {
      refresh_view(c);
      report(c);
      wait = pc_zk_session_timeout(c->zk) / 3;
    } else {
      pc_log(PC_LOG_WARN, "coordination: %s", err.text);
    }
    pthread_mutex_lock(&c->mu);
    struct timespec until = pc_mono_after_ms(wait);
    while (!c->stop && !c->changed)
      if (pthread_cond_timedwait(&c->cv, &c->mu, &until) != 0) break;
    c->changed = 0;
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

void pc_coord_close(pc_coord_t *c) {
  if (!c) return;
  if (c->running) {
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
  }
  pc_zk_close(c->zk); /* the node goes with the session */
  pthread_rwlock_destroy(&c->zk_lk);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c->view);
  free(c->connect);
  free(c->root);
  free(c);
}

pc_coord_t *pc_coord_open(const char *connect, const char *root, uint32_t session_timeout_ms,
                          uint32_t timeout_ms, pc_error_t *err) {
  pc_coord_t *c = calloc(1, sizeof *c);
  if (!c || !(c->connect = strdup(connect)) || !(c->root = strdup(root))) {
    if (c) free(c->connect);
    free(c);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  c->asked_timeout_ms = session_timeout_ms;
  c->watch = (pc_zk_watch_t){coord_event, c};
  pthread_mutex_init(&c->mu, NULL);
  pc_cond_init_mono(&c->cv);
  pthread_rwlock_init(&c->zk_lk, NULL);
  if (ensure_session(c, timeout_ms, err) != PC_OK) {
    pc_error_prefix(err, "coordination");
    pc_coord_close(c);
    return NULL;
  }
  refresh_view(c);
  if (pthread_create(&c->thread, NULL, coord_main, c) != 0) {
    pc_coord_close(c);
    pc_error_set(err, PC_NOMEM, "coordination: cannot start its thread");
    return NULL;
  }
  c->running = 1;
  return c;
}

uint64_t pc_coord_session(pc_coord_t *c) { return atomic_load(&c->session); }

/* 1 when sorted[0..n) holds s. */
static int holds(const uint64_t *sorted, size_t n, uint64_t s) {
  return n && bsearch(&s, sorted, n, sizeof s, u64_cmp) != NULL;
}

pc_ls_liveness_t pc_coord_liveness(pc_coord_t *c, uint64_t session, uint32_t timeout_ms) {
  if (session == 0 || session == atomic_load(&c->session)) return PC_LS_ALIVE;
  pthread_mutex_lock(&c->mu);
  int live = holds(c->view, c->nview, session), dead = 0;
  for (size_t i = 0; i < c->ndead && !dead; i++) dead = c->dead[i] == session;
  pthread_mutex_unlock(&c->mu);
  if (live) return PC_LS_ALIVE;
  if (dead) return PC_LS_DEAD;
  /* not in the view: it may be newer than the view, or the view may lag;
   * only ZooKeeper's own answer, after a sync, says the node is gone */
  pc_ls_liveness_t out = PC_LS_UNKNOWN;
  char name[64];
  node_name(session, name, sizeof name);
  pc_error_t err;
  int exists = 1;
  pthread_rwlock_rdlock(&c->zk_lk);
  if (c->zk && pc_zk_sync(c->zk, CLIENTS, timeout_ms, &err) == PC_OK &&
      pc_zk_exists(c->zk, name, NULL, &exists, timeout_ms, &err) == PC_OK)
    out = exists ? PC_LS_ALIVE : PC_LS_DEAD;
  pthread_rwlock_unlock(&c->zk_lk);
  if (out == PC_LS_DEAD) {
    pthread_mutex_lock(&c->mu);
    c->dead[c->dead_next] = session;
    c->dead_next = (c->dead_next + 1) % DEAD_CACHE;
    if (c->ndead < DEAD_CACHE) c->ndead++;
    pthread_mutex_unlock(&c->mu);
  }
  return out;
}

void pc_coord_set_reporter(pc_coord_t *c, uint64_t (*oldest)(void *ctx), void *ctx) {
  pthread_mutex_lock(&c->mu);
  c->oldest = oldest;
  c->oldest_ctx = ctx;
  c->changed = 1; /* report promptly */
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

pc_status_t pc_coord_oldest(pc_coord_t *c, uint32_t timeout_ms, uint64_t *oldest,
                            size_t *unreported, pc_error_t *err) {
  uint64_t min = UINT64_MAX;
  size_t missing = 0;
  char **names = NULL;
  size_t n = 0;
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? pc_zk_children(c->zk, CLIENTS, NULL, &names, &n, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  for (size_t i = 0; st == PC_OK && i < n; i++) {
    char rel[128], *data = NULL;
    size_t len;
    snprintf(rel, sizeof rel, CLIENTS "/%s", names[i]);
    pc_status_t g = pc_zk_get(c->zk, rel, NULL, &data, &len, NULL, timeout_ms, err);
    if (g == PC_NOT_FOUND) continue; /* gone meanwhile: it holds nothing */
    if (g != PC_OK) {
      st = g;
      break;
    }
    char *end;
    uint64_t v = strtoull(data, &end, 10);
    if (end == data) missing++;
    else if (v < min) min = v;
    free(data);
  }
  pthread_rwlock_unlock(&c->zk_lk);
  pc_zk_free_names(names, n);
  if (st != PC_OK) return st;
  if (oldest) *oldest = min;
  if (unreported) *unreported = missing;
  return PC_OK;
}

pc_status_t pc_coord_lock(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *mine,
                          pc_error_t *err) {
  *mine = 0;
  uint64_t me = atomic_load(&c->session);
  if (!me) return pc_error_set(err, PC_UNAVAILABLE, "coordination: no session yet");
  char rel[160], data[32];
  if (snprintf(rel, sizeof rel, "locks/%s", name) >= (int)sizeof rel)
    return pc_error_set(err, PC_INVALID, "coordination: lock name too long");
  int len = snprintf(data, sizeof data, "%016" PRIx64, me);
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? pc_zk_ensure(c->zk, "locks", timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_OK)
    st = pc_zk_create(c->zk, rel, data, (size_t)len, PC_ZK_EPHEMERAL, NULL, 0, timeout_ms, err);
  if (st == PC_OK) {
    *mine = 1;
  } else if (st == PC_BUSY) { /* held: by this session (taken before) or another */
    char *holder = NULL;
    size_t hl = 0;
    st = pc_zk_get(c->zk, rel, NULL, &holder, &hl, NULL, timeout_ms, err);
    if (st == PC_OK) *mine = hl == (size_t)len && memcmp(holder, data, hl) == 0;
    else if (st == PC_NOT_FOUND) st = PC_OK; /* released meanwhile: try again next time */
    free(holder);
  }
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

size_t pc_coord_client_count(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->nview;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int pc_coord_zk_state(pc_coord_t *c) {
  pthread_rwlock_rdlock(&c->zk_lk);
  int st = c->zk ? (int)pc_zk_state(c->zk) : -1;
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}
