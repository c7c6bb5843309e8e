/* coord.c — a process's ZooKeeper session and what it coordinates (coord.h):
 * the client's node under clients/ and the watched view of the other
 * clients, the report for garbage collection, the workers' members under
 * workers/ and the share of each, the published safe point, locks, and the
 * tablet map: each tablet's rows and the server that holds it. And who may
 * own what: the nodes a system session makes for the layout and for itself
 * (system/<session>), the check of every node's ACL when a process opens,
 * and the check that what a reader follows (a tablet's owner, an oracle
 * candidate) is an ephemeral node of a system session and a client's report
 * an ephemeral node of the session it names.
 *
 * A background thread keeps the session (a new one after an expiry, then the
 * client's, the members' and the held tablets' nodes again), the two views
 * and the followed tablet owners (watches wake it) and the report. Other users of the session (the oracle's follower, the
 * callers of pc_coord_liveness and pc_coord_oldest) use the handle under a
 * read lock, so that the thread can replace it; the listeners hear of every
 * watch event and of each new session. */
#include "lockservice/coord.h"

#include "config/config.h"
#include "base/error.h"
#include "base/log.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLIENTS "clients"
#define WORKERS "workers"
#define MEMBER WORKERS "/m-" /* then "<group>-", and ZooKeeper's sequence number */
#define SAFE_POINT "gc/safe_point"
#define DEAD_CACHE 64 /* sessions confirmed dead: session ids are never reused */
#define TABLETS "tablets"
#define SYSTEM "system" /* system/<session, 16 hex digits>: the system's sessions */
#define WALK_MAX 4096   /* nodes an ACL check looks at, at most */
#define BAD_MAX 32      /* nodes whose ACL it names, at most */

/* A tablet this session holds (a server's), made again after an expiry. */
typedef struct owned {
  struct owned *next;
  char name[64];
  char addr[300], identity[400];
  uint64_t node_session; /* the session its node belongs to */
  int warned;            /* another server took it while this one had no session */
} owned_t;

/* An ephemeral node of a replicated tablet's server: its address
 * (servers/<name>/live) or the leadership of a tablet (tablets/<name>/owner),
 * made again after an expiry until it is let go. */
typedef struct held {
  struct held *next;
  char rel[200];
  /* one making of the node at a time (the coordination thread after an
   * expiry, or the role that changes it); the fields below are read and
   * written under it */
  pthread_mutex_t op;
  char data[600];        /* made from the fields below for a leadership (create_held) */
  char owner_addr[300];  /* a leadership: the leader's address and server */
  char owner_server[200];
  uint64_t term;         /* a tablet's leadership: its term (0: another node) */
  uint64_t node_session; /* the session its node belongs to, 0: to be made */
  _Atomic int dropped;   /* let go: the thread skips it (set at once, without op) */
} held_t;

struct pc_member {
  pc_coord_t *c;
  pc_member_t *next; /* in c->members (under c->mu) */
  uint32_t stable_ms;
  char token[40];       /* in the node's data: finds a node whose create answer was lost */
  char prefix[48];      /* "m-<group>-": its group's nodes' names begin so */
  /* under c->mu */
  char name[64];        /* "m-<seq>" of its node, "" while it has none */
  uint64_t node_session; /* the session its node belongs to */
  int lost_create;      /* a create may have made a node without saying so */
  uint64_t used_gen;    /* the membership generation of the share in use */
  uint32_t index, count;
  int had;              /* it has used a share */
};

typedef struct listener {
  void (*fn)(void *ctx);
  void *ctx;
} listener_t;

struct pc_coord {
  char *connect, *root, *secret, *system_secret;
  uint32_t asked_timeout_ms;
  int flags;
  pthread_t thread;
  int running;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: a watch fired, or stop */
  int stop, changed;
  pthread_rwlock_t zk_lk; /* zk may be replaced by the thread (write lock) */
  pc_zk_t *zk;
  pc_zk_watch_t watch;
  _Atomic uint64_t session;  /* whose client node exists, or 0 */
  _Atomic uint64_t expiries; /* sessions replaced after they expired */
  pthread_mutex_t lmu;       /* the listeners; held while one runs */
  listener_t listeners[PC_COORD_MAX_LISTENERS];
  /* under mu: */
  uint64_t *view; /* sorted live client sessions */
  size_t nview;
  uint64_t dead[DEAD_CACHE]; /* the last ones confirmed */
  size_t ndead, dead_next;
  uint64_t (*oldest)(void *ctx);
  void *oldest_ctx;
  pc_member_t *members;
  char **mview; /* sorted member names */
  size_t nmview;
  uint64_t mview_gen, mview_changed_ms;
  owned_t *owned;            /* tablets this session holds */
  held_t *held;              /* a replicated tablet server's ephemeral nodes */
  char **follow;             /* tablets whose owners are followed (a client's map) */
  size_t nfollow;
  void (*follow_fn)(void *ctx, size_t i, const char *addr);
  void *follow_ctx;
  char warned[300]; /* the last node a read refused to follow (logged once; under mu) */
  int checked;      /* the ACLs were checked (by the first session: pc_coord_open) */
  /* the thread's own */
  uint64_t reported; /* the value the client node holds */
  uint64_t reported_at_ms;
};

static uint32_t session_ms(pc_coord_t *c) {
  return c->zk ? pc_zk_session_timeout(c->zk) : c->asked_timeout_ms;
}

/* How long one ZooKeeper call of the background thread may take. */
static uint32_t call_ms(pc_coord_t *c) {
  uint32_t t = session_ms(c) / 3;
  return t < 200 ? 200 : t;
}

static void tell_listeners(pc_coord_t *c) {
  pthread_mutex_lock(&c->lmu);
  for (size_t i = 0; i < PC_COORD_MAX_LISTENERS; i++)
    if (c->listeners[i].fn) c->listeners[i].fn(c->listeners[i].ctx);
  pthread_mutex_unlock(&c->lmu);
}

static void coord_event(void *ctx, int event, const char *path) {
  (void)event;
  (void)path;
  pc_coord_t *c = ctx;
  pthread_mutex_lock(&c->mu);
  c->changed = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  tell_listeners(c);
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void client_node(uint64_t session, char *out, size_t cap) {
  snprintf(out, cap, CLIENTS "/%016" PRIx64, session);
}

static void whoami(char *out, size_t cap) {
  char host[128] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  snprintf(out, cap, "%s:%d", host, (int)getpid());
}

/* The client node's data: the report and who this is. */
static int client_data(uint64_t oldest, char *out, size_t cap) {
  char me[160];
  whoami(me, sizeof me);
  return snprintf(out, cap, "%" PRIu64 " %s", oldest, me);
}

static uint64_t current_report(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t v = c->oldest ? c->oldest(c->oldest_ctx) : UINT64_MAX;
  pthread_mutex_unlock(&c->mu);
  return v;
}

/* Logs a refusal to follow a node (what), once until another one comes. */
static void warn_once(pc_coord_t *c, const char *what) {
  pthread_mutex_lock(&c->mu);
  int same = strcmp(c->warned, what) == 0;
  if (!same) snprintf(c->warned, sizeof c->warned, "%s", what);
  pthread_mutex_unlock(&c->mu);
  if (!same) pc_log(PC_LOG_WARN, "coordination: %s", what);
}

/* ---- who owns what ---------------------------------------------------------------- */

static const char *const layout[] = {"tso", "tso/election", "gc", "locks", "workers", TABLETS,
                                     SYSTEM};

pc_status_t pc_coord_system_session(pc_zk_t *zk, uint64_t session, uint32_t timeout_ms,
                                    int *system, pc_error_t *err) {
  *system = 0;
  if (!session) return PC_OK;
  if (!pc_zk_two_identities(zk)) { /* one identity: every session is the system */
    *system = 1;
    return PC_OK;
  }
  char rel[64], *data = NULL;
  pc_zk_stat_t stat;
  snprintf(rel, sizeof rel, SYSTEM "/%016" PRIx64, session);
  pc_status_t st = pc_zk_read(zk, rel, NULL, &data, NULL, &stat, timeout_ms, err);
  free(data);
  if (st == PC_NOT_FOUND) return PC_OK;
  if (st == PC_OK) *system = stat.ephemeral_owner == session;
  return st;
}

pc_status_t pc_coord_system_node(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch,
                                 char **data, size_t *len, pc_zk_stat_t *stat,
                                 uint32_t timeout_ms, pc_error_t *err) {
  pc_zk_stat_t s;
  *data = NULL;
  pc_status_t st = pc_zk_read(zk, rel, watch, data, len, &s, timeout_ms, err);
  if (st != PC_OK) return st;
  if (stat) *stat = s;
  int system = 0;
  if (s.ephemeral_owner &&
      (st = pc_coord_system_session(zk, s.ephemeral_owner, timeout_ms, &system, err)) != PC_OK) {
    free(*data);
    *data = NULL;
    return st;
  }
  if (system) return PC_OK;
  free(*data);
  *data = NULL;
  if (!s.ephemeral_owner)
    return pc_error_set(err, PC_DENIED,
                        "zookeeper %s/%s is a persistent node: only an ephemeral node of a "
                        "system session is followed there",
                        pc_zk_root(zk), rel);
  return pc_error_set(err, PC_DENIED,
                      "zookeeper %s/%s belongs to session %016" PRIx64
                      ", which is not the system's: not followed",
                      pc_zk_root(zk), rel, s.ephemeral_owner);
}

/* The ACL check of pc_coord_prepare: every node under the root but the
 * children of the folders of ephemeral nodes (clients, workers, locks,
 * system, the election), which readers check one by one. */
typedef struct acl_walk {
  pc_zk_t *zk;
  uint32_t timeout_ms;
  size_t seen, bad;
  char bad_rel[BAD_MAX][200];
  int bad_flags[BAD_MAX];
  pc_status_t st; /* an error that stops the walk */
  pc_error_t *err;
} acl_walk_t;

static int folder_of_ephemerals(const char *rel) {
  return strcmp(rel, CLIENTS) == 0 || strcmp(rel, WORKERS) == 0 || strcmp(rel, "locks") == 0 ||
         strcmp(rel, SYSTEM) == 0 || strcmp(rel, "tso/election") == 0;
}

static void walk_node(acl_walk_t *w, const char *rel, int depth) {
  if (w->st != PC_OK || w->seen >= WALK_MAX) return;
  w->seen++;
  int flags = strcmp(rel, CLIENTS) == 0 ? PC_ZK_OPEN_TO_CLIENTS : 0;
  char have[1024], want[1024];
  pc_error_t e;
  pc_status_t st = *rel ? pc_zk_get_acl(w->zk, rel, have, sizeof have, w->timeout_ms, &e) : PC_OK;
  if (st == PC_NOT_FOUND) return; /* gone meanwhile */
  if (st == PC_DENIED) snprintf(have, sizeof have, "(an ACL this session may not read)");
  else if (st != PC_OK) {
    w->st = st;
    *w->err = e;
    return;
  }
  pc_zk_acl_expected(w->zk, flags, want, sizeof want);
  if (*rel && strcmp(have, want) != 0) {
    pc_log(PC_LOG_ERROR, "zookeeper %s: %s/%s has the ACL %s, not this cluster's (%s)",
           pc_zk_connect(w->zk), pc_zk_root(w->zk), rel, have, want);
    if (w->bad < BAD_MAX) {
      snprintf(w->bad_rel[w->bad], sizeof w->bad_rel[w->bad], "%s", rel);
      w->bad_flags[w->bad] = flags;
    }
    w->bad++;
  }
  if (folder_of_ephemerals(rel) || depth >= 4 || st == PC_DENIED) return;
  char **names = NULL;
  size_t n = 0;
  st = pc_zk_children(w->zk, rel, NULL, &names, &n, w->timeout_ms, &e);
  if (st != PC_OK && st != PC_NOT_FOUND) {
    w->st = st;
    *w->err = e;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    char child[400];
    if (snprintf(child, sizeof child, "%s%s%s", rel, *rel ? "/" : "", names[i]) <
        (int)sizeof child)
      walk_node(w, child, depth + 1);
  }
  pc_zk_free_names(names, n);
}

static pc_status_t check_acls(pc_zk_t *zk, uint32_t timeout_ms, pc_error_t *err) {
  acl_walk_t *w = calloc(1, sizeof *w);
  if (!w) return pc_error_set(err, PC_NOMEM, "out of memory");
  *w = (acl_walk_t){.zk = zk, .timeout_ms = timeout_ms, .st = PC_OK, .err = err};
  walk_node(w, "", 0);
  pc_status_t st = w->st;
  if (st == PC_OK && w->bad && !pc_zk_acl_fixable(zk)) {
    pc_log(PC_LOG_ERROR,
           "zookeeper %s: %zu node%s under %s %s ACLs that are not this cluster's: another "
           "process made them and can still change them; a daemon of the cluster (with "
           "zookeeper.system_secret) names the commands that fix them",
           pc_zk_connect(zk), w->bad, w->bad == 1 ? "" : "s", pc_zk_root(zk),
           w->bad == 1 ? "has an" : "have");
  } else if (st == PC_OK && w->bad) {
    const char *conn = pc_zk_connect(zk), *root = pc_zk_root(zk);
    pc_log(PC_LOG_ERROR,
           "zookeeper %s: %zu node%s under %s %s ACLs that are not this cluster's: another "
           "process made them (before the cluster had its secrets, or to squat the root) and "
           "can still change them. If you trust what they hold, make them this cluster's with "
           "ZooKeeper's CLI (zkCli.sh -server %s), authenticated as a user that may change "
           "them (addauth digest %s:<zookeeper.%s>, or ZooKeeper's super user), with the "
           "commands below%s; else use another zookeeper.root (docs/SECURITY.md)",
           conn, w->bad, w->bad == 1 ? "" : "s", root, w->bad == 1 ? "has an" : "have", conn,
           pc_zk_identity(zk) == PC_ZK_SYSTEM ? "percolator-system" : "percolator",
           pc_zk_identity(zk) == PC_ZK_SYSTEM ? "system_secret" : "secret",
           w->bad > BAD_MAX ? " (the first of them; start again to see the rest)" : "");
    for (size_t i = 0; i < w->bad && i < BAD_MAX; i++) {
      char want[1024];
      pc_zk_acl_expected(zk, w->bad_flags[i], want, sizeof want);
      pc_log(PC_LOG_ERROR, "  setAcl %s/%s %s", root, w->bad_rel[i], want);
    }
  }
  if (st == PC_OK && w->bad) {
    st = pc_error_set(err, PC_DENIED,
                      "zookeeper %s: %zu node%s under the cluster's root %s ACLs that are not "
                      "this cluster's: not using it (the log names them, and what fixes them)",
                      pc_zk_root(zk), w->bad, w->bad == 1 ? "" : "s",
                      w->bad == 1 ? "has an" : "have");
  }
  free(w);
  return st;
}

pc_status_t pc_coord_prepare(pc_zk_t *zk, int check, uint32_t timeout_ms, pc_error_t *err) {
  pc_status_t st = PC_OK;
  int system = pc_zk_identity(zk) == PC_ZK_SYSTEM;
  /* the system makes the layout: data clients may only make their own nodes */
  for (size_t i = 0; system && st == PC_OK && i < sizeof layout / sizeof layout[0]; i++)
    st = pc_zk_ensure(zk, layout[i], timeout_ms, err);
  if (system && st == PC_OK)
    st = pc_zk_ensure_as(zk, CLIENTS, PC_ZK_OPEN_TO_CLIENTS, timeout_ms, err);
  if (st == PC_OK && check && pc_zk_identity(zk) != PC_ZK_ANONYMOUS)
    st = check_acls(zk, timeout_ms, err);
  if (system && st == PC_OK) { /* then this session is the system's */
    char rel[64], me[160];
    snprintf(rel, sizeof rel, SYSTEM "/%016" PRIx64, pc_zk_session_id(zk));
    whoami(me, sizeof me);
    st = pc_zk_create(zk, rel, me, strlen(me), PC_ZK_EPHEMERAL, NULL, 0, timeout_ms, err);
    if (st == PC_BUSY) st = PC_OK; /* made by an attempt whose answer was lost */
  }
  return st;
}

/* ---- the session -------------------------------------------------------------- */

/* A session, replacing an expired one. */
static pc_status_t ensure_session(pc_coord_t *c, uint32_t timeout_ms, pc_error_t *err) {
  if (c->zk && pc_zk_state(c->zk) == PC_ZK_EXPIRED) {
    pthread_rwlock_wrlock(&c->zk_lk);
    pc_zk_t *old = c->zk;
    c->zk = NULL;
    atomic_store(&c->session, 0);
    pthread_rwlock_unlock(&c->zk_lk);
    pc_zk_close(old);
    atomic_fetch_add(&c->expiries, 1);
    pc_log(PC_LOG_WARN, "coordination: session expired; opening a new one");
  }
  if (c->zk) return PC_OK;
  pc_zk_options_t zo = {c->connect, c->root, c->secret, c->asked_timeout_ms, c->system_secret};
  pc_zk_t *zk = pc_zk_open(&zo, timeout_ms, &c->watch, err);
  if (!zk) return err->code;
  /* the nodes' ACLs are checked when the process opens; later sessions only
   * make the system's nodes again */
  if (pc_coord_prepare(zk, !c->checked, timeout_ms, err) != PC_OK) {
    pc_zk_close(zk);
    return err->code;
  }
  c->checked = 1;
  pthread_rwlock_wrlock(&c->zk_lk);
  c->zk = zk;
  pthread_rwlock_unlock(&c->zk_lk);
  tell_listeners(c); /* their watches went with the old session */
  return PC_OK;
}

/* This client's node, when it has none in the current session. */
static pc_status_t ensure_client_node(pc_coord_t *c, uint32_t timeout_ms, pc_error_t *err) {
  if (!(c->flags & PC_COORD_CLIENT) || atomic_load(&c->session)) return PC_OK;
  uint64_t id = pc_zk_session_id(c->zk), oldest = current_report(c);
  char name[64], data[256];
  client_node(id, name, sizeof name);
  int len = client_data(oldest, data, sizeof data);
  pc_status_t st = pc_zk_ensure_as(c->zk, CLIENTS, PC_ZK_OPEN_TO_CLIENTS, timeout_ms, err);
  if (st == PC_OK)
    st = pc_zk_create(c->zk, name, data, (size_t)len, PC_ZK_EPHEMERAL | PC_ZK_OWN, NULL, 0,
                      timeout_ms, err);
  if (st == PC_BUSY) st = PC_OK; /* created by an attempt whose answer was lost */
  if (st != PC_OK) return st;
  c->reported = oldest;
  c->reported_at_ms = pc_now_mono_ms();
  atomic_store(&c->session, id);
  return PC_OK;
}

/* Reads clients/ with a watch into the view. */
static void refresh_clients(pc_coord_t *c) {
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

/* Rewrites the client node's report when it changed, at most every third of
 * the session timeout. */
static void report(pc_coord_t *c) {
  uint64_t session = atomic_load(&c->session);
  if (!session) return;
  uint64_t v = current_report(c), now = pc_now_mono_ms();
  if (v == c->reported || now - c->reported_at_ms < session_ms(c) / 3) return;
  char name[64], data[256];
  client_node(session, name, sizeof name);
  int len = client_data(v, data, sizeof data);
  pc_error_t err;
  if (pc_zk_set(c->zk, name, data, (size_t)len, -1, NULL, call_ms(c), &err) == PC_OK) {
    c->reported = v;
    c->reported_at_ms = now;
  }
}

/* ---- members -------------------------------------------------------------------- */

static int any_member(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  int any = c->members != NULL;
  pthread_mutex_unlock(&c->mu);
  return any;
}

static int member_data(const pc_member_t *m, char *out, size_t cap) {
  char me[160];
  whoami(me, sizeof me);
  return snprintf(out, cap, "%s %s", me, m->token);
}

/* The name of a node of workers/ whose data carries token, or "". */
static void find_token(pc_coord_t *c, const char *token, char *out, size_t cap) {
  pc_error_t err;
  char **names = NULL;
  size_t n = 0;
  out[0] = '\0';
  if (pc_zk_children(c->zk, WORKERS, NULL, &names, &n, call_ms(c), &err) != PC_OK) return;
  for (size_t i = 0; i < n && !out[0]; i++) {
    char rel[128], *data = NULL;
    size_t len;
    snprintf(rel, sizeof rel, WORKERS "/%s", names[i]);
    if (pc_zk_get(c->zk, rel, NULL, &data, &len, NULL, call_ms(c), &err) != PC_OK) continue;
    const char *sp = strrchr(data, ' ');
    if (sp && strcmp(sp + 1, token) == 0) snprintf(out, cap, "%s", names[i]);
    free(data);
  }
  pc_zk_free_names(names, n);
}

/* A node for member m in the current session, when it has none. */
static pc_status_t ensure_member_node(pc_coord_t *c, pc_member_t *m, uint32_t timeout_ms,
                                      pc_error_t *err) {
  uint64_t id = pc_zk_session_id(c->zk);
  pthread_mutex_lock(&c->mu);
  int have = m->name[0] && m->node_session == id, lost = m->lost_create;
  pthread_mutex_unlock(&c->mu);
  if (have) return PC_OK;
  char name[64] = "", data[256];
  if (lost) find_token(c, m->token, name, sizeof name); /* made by the create that timed out */
  pc_status_t st = PC_OK;
  if (!name[0]) {
    int len = member_data(m, data, sizeof data);
    char created[64] = "";
    char path[80];
    snprintf(path, sizeof path, WORKERS "/%s", m->prefix);
    st = pc_zk_ensure(c->zk, WORKERS, timeout_ms, err);
    if (st == PC_OK)
      st = pc_zk_create(c->zk, path, data, (size_t)len, PC_ZK_EPHEMERAL | PC_ZK_SEQUENCE,
                        created, sizeof created, timeout_ms, err);
    if (st == PC_OK) memcpy(name, created + strlen(WORKERS) + 1, sizeof name - strlen(WORKERS) - 1);
  }
  pthread_mutex_lock(&c->mu);
  if (st == PC_OK) {
    snprintf(m->name, sizeof m->name, "%s", name);
    m->node_session = id;
    m->lost_create = 0;
  } else if (st == PC_TIMEOUT || st == PC_UNAVAILABLE) {
    m->lost_create = 1;
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

static void ensure_member_nodes(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = 0;
  for (pc_member_t *m = c->members; m; m = m->next) n++;
  pc_member_t **all = n ? calloc(n, sizeof *all) : NULL;
  size_t k = 0;
  for (pc_member_t *m = c->members; m && all; m = m->next) all[k++] = m;
  pthread_mutex_unlock(&c->mu);
  /* members leave only under the thread's feet through pc_member_leave,
   * which waits for this pass (it holds members_lk) */
  for (size_t i = 0; i < k; i++) {
    pc_error_t err;
    if (ensure_member_node(c, all[i], call_ms(c), &err) != PC_OK)
      pc_log(PC_LOG_WARN, "coordination: worker membership: %s", err.text);
  }
  free(all);
}

static void free_strings(char **v, size_t n) {
  for (size_t i = 0; v && i < n; i++) free(v[i]);
  free(v);
}

/* Reads workers/ with a watch into the membership view. */
static void refresh_members(pc_coord_t *c) {
  pc_error_t err;
  char **names = NULL;
  size_t n = 0;
  pc_status_t st = pc_zk_children(c->zk, WORKERS, &c->watch, &names, &n, call_ms(c), &err);
  if (st == PC_NOT_FOUND) st = PC_OK; /* no member yet */
  if (st != PC_OK) return;
  pthread_mutex_lock(&c->mu);
  int same = n == c->nmview;
  for (size_t i = 0; same && i < n; i++) same = strcmp(names[i], c->mview[i]) == 0;
  if (same) {
    pthread_mutex_unlock(&c->mu);
    pc_zk_free_names(names, n);
    return;
  }
  char **old = c->mview;
  size_t nold = c->nmview;
  c->mview = names; /* sorted by pc_zk_children */
  c->nmview = n;
  c->mview_gen++;
  c->mview_changed_ms = pc_now_mono_ms();
  pthread_mutex_unlock(&c->mu);
  free_strings(old, nold);
  pc_log(PC_LOG_INFO, "coordination: %zu worker%s in the membership", n, n == 1 ? "" : "s");
}

static void ensure_owned(pc_coord_t *c);
static void ensure_held(pc_coord_t *c);
static void follow_pass(pc_coord_t *c);

/* ---- the thread ------------------------------------------------------------------ */

static void *coord_main(void *arg) {
  pc_coord_t *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    pthread_mutex_unlock(&c->mu);
    pc_error_t err;
    uint32_t wait = 500;
    if (ensure_session(c, c->asked_timeout_ms, &err) == PC_OK) {
      pthread_rwlock_rdlock(&c->zk_lk);
      if (c->flags & PC_COORD_CLIENT) {
        if (ensure_client_node(c, call_ms(c), &err) != PC_OK)
          pc_log(PC_LOG_WARN, "coordination: %s", err.text);
        refresh_clients(c);
        report(c);
      }
      if (any_member(c)) {
        ensure_member_nodes(c);
        refresh_members(c);
      }
      ensure_owned(c);
      ensure_held(c);
      follow_pass(c);
      wait = session_ms(c) / 3;
      pthread_rwlock_unlock(&c->zk_lk);
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

static void wake(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  c->changed = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
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
  pc_zk_close(c->zk); /* the session's nodes go with it */
  pthread_rwlock_destroy(&c->zk_lk);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->lmu);
  free(c->view);
  free_strings(c->mview, c->nmview);
  free_strings(c->follow, c->nfollow);
  for (owned_t *o = c->owned, *next; o; o = next) {
    next = o->next;
    free(o);
  }
  for (held_t *h = c->held, *next; h; h = next) {
    next = h->next;
    pthread_mutex_destroy(&h->op);
    free(h);
  }
  free(c->connect);
  free(c->root);
  if (c->secret) explicit_bzero(c->secret, strlen(c->secret));
  free(c->secret);
  if (c->system_secret) explicit_bzero(c->system_secret, strlen(c->system_secret));
  free(c->system_secret);
  free(c);
}

pc_zk_options_t pc_config_zk(const pc_config_t *cfg) {
  return (pc_zk_options_t){cfg->zookeeper.connect, cfg->zookeeper.root, cfg->zookeeper.secret,
                           cfg->zookeeper.session_timeout_ms, cfg->zookeeper.system_secret};
}

pc_coord_t *pc_coord_open(const pc_zk_options_t *o, int flags, uint32_t timeout_ms,
                          pc_error_t *err) {
  pc_coord_t *c = calloc(1, sizeof *c);
  if (!c || !(c->connect = strdup(o->connect)) || !(c->root = strdup(o->root)) ||
      (o->secret && !(c->secret = strdup(o->secret))) ||
      (o->system_secret && !(c->system_secret = strdup(o->system_secret)))) {
    if (c) {
      free(c->connect);
      free(c->root);
      free(c->secret);
    }
    free(c);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  c->asked_timeout_ms = o->session_timeout_ms;
  c->flags = flags;
  c->watch = (pc_zk_watch_t){coord_event, c};
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->lmu, NULL);
  pc_cond_init_mono(&c->cv);
  pthread_rwlock_init(&c->zk_lk, NULL);
  if (ensure_session(c, timeout_ms, err) != PC_OK ||
      ensure_client_node(c, timeout_ms, err) != PC_OK) {
    pc_error_prefix(err, "coordination");
    pc_coord_close(c);
    return NULL;
  }
  if (flags & PC_COORD_CLIENT) refresh_clients(c);
  if (pthread_create(&c->thread, NULL, coord_main, c) != 0) {
    pc_coord_close(c);
    pc_error_set(err, PC_NOMEM, "coordination: cannot start its thread");
    return NULL;
  }
  c->running = 1;
  return c;
}

pc_zk_t *pc_coord_acquire(pc_coord_t *c) {
  pthread_rwlock_rdlock(&c->zk_lk);
  return c->zk;
}

void pc_coord_release(pc_coord_t *c) { pthread_rwlock_unlock(&c->zk_lk); }

pc_zk_watch_t *pc_coord_watch(pc_coord_t *c) { return &c->watch; }

int pc_coord_listen(pc_coord_t *c, void (*fn)(void *ctx), void *ctx) {
  pthread_mutex_lock(&c->lmu);
  int id = -1;
  for (int i = 0; i < PC_COORD_MAX_LISTENERS && id < 0; i++)
    if (!c->listeners[i].fn) {
      c->listeners[i] = (listener_t){fn, ctx};
      id = i;
    }
  pthread_mutex_unlock(&c->lmu);
  return id;
}

void pc_coord_unlisten(pc_coord_t *c, int id) {
  if (id < 0 || id >= PC_COORD_MAX_LISTENERS) return;
  pthread_mutex_lock(&c->lmu);
  c->listeners[id] = (listener_t){NULL, NULL};
  pthread_mutex_unlock(&c->lmu);
}

uint32_t pc_coord_session_timeout(pc_coord_t *c) {
  pthread_rwlock_rdlock(&c->zk_lk);
  uint32_t t = session_ms(c);
  pthread_rwlock_unlock(&c->zk_lk);
  return t;
}

int pc_coord_zk_state(pc_coord_t *c) {
  pthread_rwlock_rdlock(&c->zk_lk);
  int st = c->zk ? (int)pc_zk_state(c->zk) : -1;
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

uint64_t pc_coord_expiries(pc_coord_t *c) { return atomic_load(&c->expiries); }

/* ---- clients -------------------------------------------------------------------- */

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
  client_node(session, name, sizeof name);
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

pc_status_t pc_coord_list(pc_coord_t *c, const char *group, uint32_t timeout_ms,
                          pc_coord_node_t **out, size_t *n, pc_error_t *err) {
  *out = NULL;
  *n = 0;
  char **names = NULL;
  size_t count = 0;
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? pc_zk_children(c->zk, group, NULL, &names, &count, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_NOT_FOUND) st = PC_OK; /* nobody has made the group yet */
  pc_coord_node_t *v = st == PC_OK && count ? calloc(count, sizeof *v) : NULL;
  if (st == PC_OK && count && !v) st = pc_error_set(err, PC_NOMEM, "out of memory");
  size_t k = 0;
  for (size_t i = 0; st == PC_OK && i < count; i++) {
    char rel[128], *data = NULL;
    size_t len;
    snprintf(rel, sizeof rel, "%s/%s", group, names[i]);
    pc_status_t g = pc_zk_get(c->zk, rel, NULL, &data, &len, NULL, timeout_ms, err);
    if (g == PC_NOT_FOUND) continue; /* gone meanwhile */
    if (g != PC_OK) {
      st = g;
      break;
    }
    snprintf(v[k].name, sizeof v[k].name, "%s", names[i]);
    snprintf(v[k].data, sizeof v[k].data, "%s", data);
    free(data);
    k++;
  }
  pthread_rwlock_unlock(&c->zk_lk);
  pc_zk_free_names(names, count);
  if (st != PC_OK) {
    free(v);
    return st;
  }
  *out = v;
  *n = k;
  return PC_OK;
}

pc_status_t pc_coord_oldest(pc_coord_t *c, uint32_t timeout_ms, uint64_t *oldest,
                            size_t *unreported, pc_error_t *err) {
  char **names = NULL;
  size_t count = 0, missing = 0;
  uint64_t min = UINT64_MAX;
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? pc_zk_children(c->zk, CLIENTS, NULL, &names, &count, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_NOT_FOUND) st = PC_OK; /* no client yet */
  for (size_t i = 0; st == PC_OK && i < count; i++) {
    char rel[128], *data = NULL, *end;
    pc_zk_stat_t stat;
    snprintf(rel, sizeof rel, CLIENTS "/%s", names[i]);
    pc_status_t g = pc_zk_read(c->zk, rel, NULL, &data, NULL, &stat, timeout_ms, err);
    if (g == PC_NOT_FOUND) continue; /* gone meanwhile */
    if (g != PC_OK) {
      st = g;
      break;
    }
    /* a report counts only from the live session it is named after: a
     * persistent node, or another session's, would hold the safe point for
     * good (or for as long as that other session lives) */
    uint64_t session = strtoull(names[i], &end, 16);
    if (*end || !session || stat.ephemeral_owner != session) {
      char what[300];
      snprintf(what, sizeof what,
               "zookeeper %s/%s is not a client's report (%s %016" PRIx64 "): left out of the "
               "garbage collector's safe point",
               c->root, rel, stat.ephemeral_owner ? "an ephemeral node of session" : "persistent",
               stat.ephemeral_owner);
      warn_once(c, what);
    } else {
      uint64_t t = strtoull(data, &end, 10);
      if (end == data) missing++;
      else if (t < min) min = t;
    }
    free(data);
  }
  pthread_rwlock_unlock(&c->zk_lk);
  pc_zk_free_names(names, count);
  if (st != PC_OK) return st;
  if (oldest) *oldest = min;
  if (unreported) *unreported = missing;
  return PC_OK;
}

size_t pc_coord_client_count(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->nview;
  pthread_mutex_unlock(&c->mu);
  return n;
}

/* ---- the workers' membership ------------------------------------------------------ */

pc_member_t *pc_member_join(pc_coord_t *c, const char *group, uint32_t stable_ms,
                            uint32_t timeout_ms, pc_error_t *err) {
  size_t gl = group ? strlen(group) : 0;
  if (gl == 0 || gl > 32 || strspn(group, "0123456789abcdefghijklmnopqrstuvwxyz"
                                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != gl) {
    pc_error_set(err, PC_INVALID, "joining the workers: bad group '%s'", group ? group : "");
    return NULL;
  }
  pc_member_t *m = calloc(1, sizeof *m);
  if (!m) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  m->c = c;
  snprintf(m->prefix, sizeof m->prefix, "m-%s-", group);
  m->stable_ms = stable_ms;
  snprintf(m->token, sizeof m->token, "%016" PRIx64 "%016" PRIx64, pc_now_mono_ms(),
           (uint64_t)(uintptr_t)m ^ ((uint64_t)getpid() << 32));
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? ensure_member_node(c, m, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  pthread_rwlock_unlock(&c->zk_lk);
  if (st != PC_OK) {
    pc_error_prefix(err, "joining the workers");
    free(m);
    return NULL;
  }
  pthread_mutex_lock(&c->mu);
  m->next = c->members;
  c->members = m;
  c->changed = 1; /* the thread reads the membership with a watch */
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return m;
}

void pc_member_leave(pc_member_t *m) {
  if (!m) return;
  pc_coord_t *c = m->c;
  /* the thread makes nodes for members under the read lock: with the write
   * lock held, it is not making one for m */
  pthread_rwlock_wrlock(&c->zk_lk);
  pthread_mutex_lock(&c->mu);
  for (pc_member_t **p = &c->members; *p; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  char rel[128] = "";
  if (m->name[0] && c->zk && m->node_session == pc_zk_session_id(c->zk))
    snprintf(rel, sizeof rel, WORKERS "/%s", m->name);
  pthread_mutex_unlock(&c->mu);
  pc_error_t err;
  if (rel[0] && pc_zk_delete(c->zk, rel, -1, call_ms(c), &err) != PC_OK)
    pc_log(PC_LOG_DEBUG, "coordination: leaving the workers: %s", err.text);
  pthread_rwlock_unlock(&c->zk_lk);
  wake(c);
  free(m);
}

void pc_member_buckets(uint32_t index, uint32_t count, uint32_t nbuckets, uint32_t *lo,
                       uint32_t *hi) {
  *lo = (uint32_t)((uint64_t)nbuckets * index / count);
  *hi = (uint32_t)((uint64_t)nbuckets * (index + 1) / count);
}

int pc_member_partition(pc_member_t *m, uint32_t *index, uint32_t *count) {
  pc_coord_t *c = m->c;
  pthread_mutex_lock(&c->mu);
  uint32_t oi = m->index, oc = m->count;
  if (m->used_gen != c->mview_gen &&
      (!m->had || pc_now_mono_ms() - c->mview_changed_ms >= m->stable_ms)) {
    /* its place among its group's members (sorted: a group's are contiguous) */
    size_t pl = strlen(m->prefix), at = 0, in_group = 0;
    int found = 0;
    for (size_t k = 0; k < c->nmview; k++) {
      if (strncmp(c->mview[k], m->prefix, pl) != 0) continue;
      if (m->name[0] && strcmp(c->mview[k], m->name) == 0) found = 1, at = in_group;
      in_group++;
    }
    if (found) {
      m->index = (uint32_t)at;
      m->count = (uint32_t)in_group;
      m->had = 1;
      m->used_gen = c->mview_gen;
    } else if (m->had) {
      /* a stable membership without this member (its node went with a
       * session): the others take its share; it takes none until its new
       * node is in a stable membership */
      m->index = m->count = 0;
      m->used_gen = c->mview_gen;
    }
  }
  *index = m->index;
  *count = m->count;
  int changed = m->index != oi || m->count != oc;
  pthread_mutex_unlock(&c->mu);
  return changed;
}

int pc_member_group(const char *name, char *out, size_t cap) {
  const char *dash = strrchr(name, '-');
  if (strncmp(name, "m-", 2) != 0 || !dash || dash < name + 3 || !cap) return 0;
  snprintf(out, cap, "%.*s", (int)(dash - name - 2), name + 2);
  return 1;
}

/* ---- the safe point ------------------------------------------------------------------ */

static pc_status_t parse_safe(const char *data, uint64_t *out, pc_error_t *err) {
  char *end;
  *out = strtoull(data, &end, 10);
  if (end == data || (*end && *end != '\n'))
    return pc_error_set(err, PC_CORRUPTION, "zookeeper " SAFE_POINT ": not a timestamp: '%.32s'",
                        data);
  return PC_OK;
}

pc_status_t pc_coord_safe_point(pc_coord_t *c, uint32_t timeout_ms, uint64_t *safe,
                                pc_error_t *err) {
  *safe = 0;
  char *data = NULL;
  size_t len;
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? pc_zk_get(c->zk, SAFE_POINT, NULL, &data, &len, NULL, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  pthread_rwlock_unlock(&c->zk_lk);
  if (st == PC_NOT_FOUND) return PC_OK; /* never published */
  if (st == PC_OK) st = parse_safe(data, safe, err);
  free(data);
  return st;
}

pc_status_t pc_coord_publish_safe_point(pc_coord_t *c, uint64_t safe, uint32_t timeout_ms,
                                        uint64_t *published, pc_error_t *err) {
  char text[32];
  int tl = snprintf(text, sizeof text, "%" PRIu64, safe);
  uint64_t deadline = pc_now_mono_ms() + timeout_ms;
  pc_status_t st;
  pthread_rwlock_rdlock(&c->zk_lk);
  if (!c->zk) {
    pthread_rwlock_unlock(&c->zk_lk);
    return pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  }
  for (;;) {
    uint64_t now = pc_now_mono_ms();
    if (now >= deadline) {
      st = pc_error_set(err, PC_TIMEOUT, "zookeeper " SAFE_POINT ": not raised in %u ms",
                        timeout_ms);
      break;
    }
    uint32_t left = (uint32_t)(deadline - now);
    char *data = NULL;
    size_t len;
    int32_t version = -1;
    uint64_t cur = 0;
    st = pc_zk_get(c->zk, SAFE_POINT, NULL, &data, &len, &version, left, err);
    if (st == PC_NOT_FOUND) {
      st = pc_zk_ensure(c->zk, "gc", left, err);
      if (st == PC_OK)
        st = pc_zk_create(c->zk, SAFE_POINT, text, (size_t)tl, 0, NULL, 0, left, err);
      if (st == PC_OK) {
        cur = safe;
        if (published) *published = cur;
        break;
      }
      if (st == PC_BUSY) continue; /* another publisher made it first: read it */
      break;
    }
    if (st == PC_OK) st = parse_safe(data, &cur, err);
    free(data);
    if (st != PC_OK) break;
    if (cur >= safe) { /* it only rises */
      if (published) *published = cur;
      break;
    }
    /* a stale read only makes the version check fail: read again */
    st = pc_zk_set(c->zk, SAFE_POINT, text, (size_t)tl, version, NULL, left, err);
    if (st == PC_OK) {
      if (published) *published = safe;
      break;
    }
    if (st != PC_CONFLICT) break;
  }
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

/* ---- locks --------------------------------------------------------------------------- */

pc_status_t pc_coord_lock(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *mine,
                          pc_error_t *err) {
  *mine = 0;
  char rel[160], data[32];
  if (snprintf(rel, sizeof rel, "locks/%s", name) >= (int)sizeof rel)
    return pc_error_set(err, PC_INVALID, "coordination: lock name too long");
  pthread_rwlock_rdlock(&c->zk_lk);
  if (!c->zk || pc_zk_state(c->zk) == PC_ZK_EXPIRED) {
    pthread_rwlock_unlock(&c->zk_lk);
    return pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  }
  int len = snprintf(data, sizeof data, "%016" PRIx64, pc_zk_session_id(c->zk));
  pc_status_t st = pc_zk_ensure(c->zk, "locks", timeout_ms, err);
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

pc_status_t pc_coord_unlock(pc_coord_t *c, const char *name, uint32_t timeout_ms,
                            pc_error_t *err) {
  char rel[160], data[32];
  if (snprintf(rel, sizeof rel, "locks/%s", name) >= (int)sizeof rel)
    return pc_error_set(err, PC_INVALID, "coordination: lock name too long");
  pthread_rwlock_rdlock(&c->zk_lk);
  if (!c->zk || pc_zk_state(c->zk) == PC_ZK_EXPIRED) { /* it went with the session */
    pthread_rwlock_unlock(&c->zk_lk);
    return PC_OK;
  }
  int len = snprintf(data, sizeof data, "%016" PRIx64, pc_zk_session_id(c->zk));
  char *holder = NULL;
  size_t hl = 0;
  int32_t version = 0;
  pc_status_t st = pc_zk_get(c->zk, rel, NULL, &holder, &hl, &version, timeout_ms, err);
  if (st == PC_OK && hl == (size_t)len && memcmp(holder, data, hl) == 0)
    st = pc_zk_delete(c->zk, rel, version, timeout_ms, err); /* only the node it read */
  if (st == PC_NOT_FOUND) st = PC_OK;
  free(holder);
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

/* ---- the tablet map -------------------------------------------------------------------- */

static void hex_put(char *out, const char *p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t k = 0; k < n; k++) {
    out[2 * k] = digits[(unsigned char)p[k] >> 4];
    out[2 * k + 1] = digits[(unsigned char)p[k] & 15];
  }
  out[2 * n] = '\0';
}

/* "[start, end)" for messages, bytes outside printable ASCII escaped; into
 * out (cap bytes, truncated). */
static void range_show(char *out, size_t cap, const char *start, size_t sl, const char *end,
                       size_t el) {
  size_t k = 0;
  for (int half = 0; half < 3; half++) {
    const char *p = half == 0 ? "[" : half == 1 ? start : end;
    size_t n = half == 0 ? 1 : half == 1 ? sl : el;
    if (half == 2) k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, ", ");
    if (half && n == 0) k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, half == 1 ? "\"\"" : "end");
    for (size_t i = 0; i < n && k < cap; i++) {
      unsigned char ch = (unsigned char)p[i];
      if (half && (ch < 0x20 || ch >= 0x7f || ch == '\\'))
        k += (size_t)snprintf(out + k, cap - k, "\\x%02x", ch);
      else
        k += (size_t)snprintf(out + k, cap - k, "%c", ch);
    }
  }
  if (k < cap) snprintf(out + k, cap - k, ")");
  else if (cap) out[cap - 1] = '\0';
}

/* Decodes n hex digits into out (n / 2 bytes); -1 when they are not hex. */
static int hex_get(const char *p, size_t n, char *out) {
  if (n % 2) return -1;
  for (size_t k = 0; k < n; k += 2) {
    int v = 0;
    for (int j = 0; j < 2; j++) {
      char ch = p[k + (size_t)j];
      int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    out[k / 2] = (char)v;
  }
  return 0;
}

static int tablet_path(char *out, size_t cap, const char *name, const char *leaf) {
  size_t nl = strlen(name);
  if (nl == 0 || nl > 63 || strchr(name, '/') || strcmp(name, ".") == 0 ||
      strcmp(name, "..") == 0)
    return -1;
  int w = leaf ? snprintf(out, cap, TABLETS "/%s/%s", name, leaf)
               : snprintf(out, cap, TABLETS "/%s", name);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

static pc_status_t tablet_range(pc_coord_t *c, const char *name, const char *start,
                                size_t start_len, const char *end, size_t end_len,
                                uint32_t timeout_ms, int record, pc_error_t *err);

pc_status_t pc_coord_tablet_range(pc_coord_t *c, const char *name, const char *start,
                                  size_t start_len, const char *end, size_t end_len,
                                  uint32_t timeout_ms, pc_error_t *err) {
  return tablet_range(c, name, start, start_len, end, end_len, timeout_ms, 1, err);
}

pc_status_t pc_coord_tablet_range_check(pc_coord_t *c, const char *name, const char *start,
                                        size_t start_len, const char *end, size_t end_len,
                                        uint32_t timeout_ms, pc_error_t *err) {
  return tablet_range(c, name, start, start_len, end, end_len, timeout_ms, 0, err);
}

/* pc_coord_tablet_range; without record, PC_OK when none is recorded. */
static pc_status_t tablet_range(pc_coord_t *c, const char *name, const char *start,
                                size_t start_len, const char *end, size_t end_len,
                                uint32_t timeout_ms, int record, pc_error_t *err) {
  char dir[128], rel[160];
  if (tablet_path(dir, sizeof dir, name, NULL) || tablet_path(rel, sizeof rel, name, "range"))
    return pc_error_set(err, PC_INVALID, "coordination: bad tablet name '%s'", name);
  size_t dl = 2 * start_len + 1 + 2 * end_len;
  char *data = malloc(dl + 1);
  if (!data) return pc_error_set(err, PC_NOMEM, "out of memory");
  hex_put(data, start, start_len);
  data[2 * start_len] = ' ';
  hex_put(data + 2 * start_len + 1, end, end_len);
  pthread_rwlock_rdlock(&c->zk_lk);
  char *held = NULL;
  size_t hl = 0;
  pc_status_t st = c->zk ? pc_zk_get(c->zk, rel, NULL, &held, &hl, NULL, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_NOT_FOUND && !record) { /* read only: none recorded is no disagreement */
    st = PC_OK;
  } else if (st == PC_NOT_FOUND) { /* the first to find none records it */
    st = pc_zk_ensure(c->zk, dir, timeout_ms, err);
    if (st == PC_OK) st = pc_zk_create(c->zk, rel, data, dl, 0, NULL, 0, timeout_ms, err);
    if (st == PC_BUSY) /* recorded meanwhile: it must be the same */
      st = pc_zk_get(c->zk, rel, NULL, &held, &hl, NULL, timeout_ms, err);
    else if (st == PC_DENIED) /* a data client: the tablet's server records it */
      st = PC_OK;
  }
  if (held) {
    if (st == PC_OK && !(hl == dl && memcmp(held, data, dl) == 0)) {
      const char *sp = memchr(held, ' ', hl);
      size_t hs = sp ? (size_t)(sp - held) : 0, he = sp ? hl - hs - 1 : 0;
      char *bytes = malloc(hl / 2 + 2);
      char want[400], have[400] = "(not a range)";
      range_show(want, sizeof want, start, start_len, end, end_len);
      if (bytes && sp && hex_get(held, hs, bytes) == 0 &&
          hex_get(sp + 1, he, bytes + hs / 2) == 0)
        range_show(have, sizeof have, bytes, hs / 2, bytes + hs / 2, he / 2);
      free(bytes);
      st = pc_error_set(err, PC_INVALID,
                        "tablet %s: the configuration gives it rows %s, but ZooKeeper (%s/%s) "
                        "holds %s: a tablet's rows cannot change under its data",
                        name, want, c->root, rel, have);
    }
  }
  pthread_rwlock_unlock(&c->zk_lk);
  free(held);
  free(data);
  return st;
}

/* Parses an owner node's data "<addr> <session hex> <identity>". */
static int parse_owner(const char *data, char *addr, size_t acap, uint64_t *session,
                       char *identity, size_t icap) {
  const char *sp1 = strchr(data, ' ');
  if (!sp1) return -1;
  char *end;
  uint64_t s = strtoull(sp1 + 1, &end, 16);
  if (end == sp1 + 1 || (*end != ' ' && *end != '\0')) return -1;
  if (addr) snprintf(addr, acap, "%.*s", (int)(sp1 - data), data);
  if (session) *session = s;
  if (identity) snprintf(identity, icap, "%s", *end ? end + 1 : "");
  return 0;
}

/* Creates owned tablet o's node for the current session (c->zk, read lock
 * held); *holder gets the owner node's data when another session holds it. */
static pc_status_t create_owner(pc_coord_t *c, owned_t *o, uint32_t timeout_ms, char *holder,
                                size_t hcap, pc_error_t *err) {
  char dir[128], rel[160], data[800];
  holder[0] = '\0';
  tablet_path(dir, sizeof dir, o->name, NULL);
  tablet_path(rel, sizeof rel, o->name, "owner");
  uint64_t id = pc_zk_session_id(c->zk);
  int len = snprintf(data, sizeof data, "%s %016" PRIx64 " %s", o->addr, id, o->identity);
  pc_status_t st = pc_zk_ensure(c->zk, dir, timeout_ms, err);
  if (st == PC_OK)
    st = pc_zk_create(c->zk, rel, data, (size_t)len, PC_ZK_EPHEMERAL, NULL, 0, timeout_ms, err);
  if (st != PC_BUSY) return st;
  char *held = NULL;
  size_t hl;
  st = pc_zk_get(c->zk, rel, NULL, &held, &hl, NULL, timeout_ms, err);
  if (st == PC_NOT_FOUND) return pc_error_set(err, PC_CONFLICT, "gone meanwhile"); /* try again */
  if (st != PC_OK) return st;
  uint64_t s = 0;
  if (parse_owner(held, NULL, 0, &s, NULL, 0) == 0 && s == id) st = PC_OK; /* made before */
  else st = PC_BUSY;
  snprintf(holder, hcap, "%s", held);
  free(held);
  return st;
}

pc_status_t pc_coord_tablet_claim(pc_coord_t *c, const char *name, const char *addr,
                                  const char *identity, uint32_t timeout_ms, pc_error_t *err) {
  char rel[160];
  if (tablet_path(rel, sizeof rel, name, "owner"))
    return pc_error_set(err, PC_INVALID, "coordination: bad tablet name '%s'", name);
  owned_t *o = calloc(1, sizeof *o);
  if (!o) return pc_error_set(err, PC_NOMEM, "out of memory");
  snprintf(o->name, sizeof o->name, "%s", name);
  snprintf(o->addr, sizeof o->addr, "%s", addr);
  snprintf(o->identity, sizeof o->identity, "%s", identity);
  uint64_t deadline = pc_now_mono_ms() + timeout_ms, waited_for = 0;
  pc_status_t st;
  for (;;) {
    uint64_t now = pc_now_mono_ms();
    uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
    char holder[800];
    pthread_rwlock_rdlock(&c->zk_lk);
    if (c->zk && pc_zk_state(c->zk) != PC_ZK_EXPIRED) {
      st = create_owner(c, o, left < 5000 ? left : 5000, holder, sizeof holder, err);
      if (st == PC_OK) o->node_session = pc_zk_session_id(c->zk);
    } else {
      st = pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
    }
    pthread_rwlock_unlock(&c->zk_lk);
    if (st == PC_OK) break;
    if (st == PC_BUSY) {
      char haddr[300] = "?", hident[400] = "?";
      uint64_t hs = 0;
      parse_owner(holder, haddr, sizeof haddr, &hs, hident, sizeof hident);
      if (strcmp(hident, identity) != 0) {
        st = pc_error_set(err, PC_BUSY,
                          "tablet %s is held by the live server at %s (%s, ZooKeeper session "
                          "%016" PRIx64 "): a second server for it is refused",
                          name, haddr, hident, hs);
        break;
      }
      if (waited_for != hs) { /* a previous run of this server: its session will expire */
        waited_for = hs;
        pc_log(PC_LOG_WARN,
               "tablet %s: waiting for the session %016" PRIx64
               " of this server's previous run to expire in ZooKeeper",
               name, hs);
      }
    } else if (st != PC_CONFLICT) {
      break;
    }
    if (pc_now_mono_ms() >= deadline) {
      st = st == PC_BUSY ? pc_error_set(err, PC_BUSY,
                                        "tablet %s: the session %016" PRIx64
                                        " of this server's previous run still holds it after %u ms",
                                        name, waited_for, timeout_ms)
                         : st;
      break;
    }
    usleep(100 * 1000);
  }
  if (st != PC_OK) {
    free(o);
    return st;
  }
  pthread_mutex_lock(&c->mu);
  o->next = c->owned;
  c->owned = o;
  pthread_mutex_unlock(&c->mu);
  return PC_OK;
}

/* The thread: owned tablets' nodes under a new session, and again when one
 * was deleted (by hand, or by anyone allowed to): a data watch on each
 * wakes the thread when it goes. */
static void ensure_owned(pc_coord_t *c) {
  uint64_t id = pc_zk_session_id(c->zk);
  pthread_mutex_lock(&c->mu);
  owned_t *list = c->owned; /* owned tablets are only ever added at the head */
  pthread_mutex_unlock(&c->mu);
  for (owned_t *o = list; o; o = o->next) {
    pc_error_t err;
    int deleted = 0;
    if (o->node_session == id) {
      char rel[160], *data = NULL;
      pc_zk_stat_t stat;
      tablet_path(rel, sizeof rel, o->name, "owner");
      pc_status_t st = pc_zk_read(c->zk, rel, &c->watch, &data, NULL, &stat, call_ms(c), &err);
      free(data);
      if (st != PC_NOT_FOUND) {
        if (st == PC_OK && stat.ephemeral_owner != id && !o->warned) {
          o->warned = 1;
          pc_log(PC_LOG_ERROR, "tablet %s: its owner node %s/%s belongs to session %016" PRIx64
                 " now, not this server's", o->name, c->root, rel, stat.ephemeral_owner);
        }
        continue;
      }
      deleted = 1;
    }
    char holder[800];
    pc_status_t st = create_owner(c, o, call_ms(c), holder, sizeof holder, &err);
    if (st == PC_OK) {
      o->node_session = id;
      o->warned = 0;
      pc_log(deleted ? PC_LOG_WARN : PC_LOG_INFO, "tablet %s: %s", o->name,
             deleted ? "its owner node was deleted: made again"
                     : "held again under a new ZooKeeper session");
      if (deleted) wake(c); /* read it again, with a watch */
    } else if (!o->warned) {
      o->warned = 1;
      pc_log(PC_LOG_ERROR, "tablet %s: cannot hold it under %s: %s", o->name,
             deleted ? "this ZooKeeper session again" : "the new ZooKeeper session",
             st == PC_BUSY ? holder : err.text);
    }
  }
}

/* Reads tablet name's owner (with watch, which then also hears its creation
 * when there is none) into addr ("" when none, or when the node is not an
 * ephemeral node of the system session it names: logged). */
static pc_status_t read_owner(pc_coord_t *c, const char *name, pc_zk_watch_t *watch,
                              uint32_t timeout_ms, char *addr, size_t cap, uint64_t *session,
                              pc_error_t *err) {
  char rel[160];
  if (tablet_path(rel, sizeof rel, name, "owner"))
    return pc_error_set(err, PC_INVALID, "coordination: bad tablet name '%s'", name);
  addr[0] = '\0';
  if (session) *session = 0;
  char *data = NULL;
  pc_zk_stat_t stat;
  pc_status_t st = pc_coord_system_node(c->zk, rel, watch, &data, NULL, &stat, timeout_ms, err);
  if (st == PC_NOT_FOUND) {
    int exists = 0;
    st = pc_zk_exists(c->zk, rel, watch, &exists, timeout_ms, err);
    if (st == PC_OK && exists) /* made meanwhile */
      return read_owner(c, name, watch, timeout_ms, addr, cap, session, err);
    return st;
  }
  if (st == PC_DENIED) { /* not a server's: no live server holds the tablet */
    warn_once(c, err->text);
    pc_error_clear(err);
    return PC_OK;
  }
  if (st != PC_OK) return st;
  uint64_t named = 0;
  if (parse_owner(data, addr, cap, &named, NULL, 0) != 0) {
    st = pc_error_set(err, PC_CORRUPTION, "zookeeper %s: not an owner: '%.40s'", rel, data);
  } else if (named != stat.ephemeral_owner) {
    char what[300];
    snprintf(what, sizeof what,
             "zookeeper %s/%s names session %016" PRIx64 " but belongs to %016" PRIx64
             ": not followed",
             c->root, rel, named, stat.ephemeral_owner);
    warn_once(c, what);
    addr[0] = '\0';
  } else if (session) {
    *session = named;
  }
  free(data);
  return st;
}

pc_status_t pc_coord_tablet_owner(pc_coord_t *c, const char *name, int fresh,
                                  uint32_t timeout_ms, char *addr, size_t cap, uint64_t *session,
                                  pc_error_t *err) {
  addr[0] = '\0';
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? PC_OK : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_OK && fresh) st = pc_zk_sync(c->zk, TABLETS, timeout_ms, err);
  if (st == PC_NOT_FOUND) st = PC_OK; /* no tablet recorded yet: none has an owner */
  if (st == PC_OK) st = read_owner(c, name, NULL, timeout_ms, addr, cap, session, err);
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

pc_status_t pc_coord_follow_tablets(pc_coord_t *c, const char *const *names, size_t n,
                                    void (*fn)(void *ctx, size_t i, const char *addr), void *ctx,
                                    pc_error_t *err) {
  char **v = calloc(n ? n : 1, sizeof *v);
  for (size_t i = 0; v && i < n; i++)
    if (!(v[i] = strdup(names[i]))) {
      free_strings(v, i);
      v = NULL;
    }
  if (!v) return pc_error_set(err, PC_NOMEM, "out of memory");
  pthread_mutex_lock(&c->mu);
  free_strings(c->follow, c->nfollow);
  c->follow = v;
  c->nfollow = n;
  c->follow_fn = fn;
  c->follow_ctx = ctx;
  c->changed = 1; /* the thread reads them with watches */
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return PC_OK;
}

/* The thread: the followed owners, read with watches, told to the follower. */
static void follow_pass(pc_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  char **names = c->follow; /* replaced only by pc_coord_follow_tablets, called once */
  size_t n = c->nfollow;
  void (*fn)(void *, size_t, const char *) = c->follow_fn;
  void *ctx = c->follow_ctx;
  pthread_mutex_unlock(&c->mu);
  for (size_t i = 0; fn && i < n; i++) {
    char addr[300];
    pc_error_t err;
    if (read_owner(c, names[i], &c->watch, call_ms(c), addr, sizeof addr, NULL, &err) != PC_OK)
      continue; /* ZooKeeper cannot say: keep what the follower has */
    fn(ctx, i, addr[0] ? addr : NULL);
  }
}

/* ---- replicated tablets ------------------------------------------------------------- */

#define SERVERS "servers"

static int server_path(char *out, size_t cap, const char *name, const char *leaf) {
  size_t nl = strlen(name);
  if (nl == 0 || nl > 64 || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    return -1;
  int w = leaf ? snprintf(out, cap, SERVERS "/%s/%s", name, leaf)
               : snprintf(out, cap, SERVERS "/%s", name);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

pc_status_t pc_coord_server_mark(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *first,
                                 pc_error_t *err) {
  char rel[160];
  *first = 0;
  if (server_path(rel, sizeof rel, name, NULL))
    return pc_error_set(err, PC_INVALID, "coordination: bad server name '%s'", name);
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? pc_zk_ensure(c->zk, SERVERS, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_OK) {
    char data[64];
    int n = snprintf(data, sizeof data, "first started %" PRIu64, pc_now_wall_ms());
    st = pc_zk_create(c->zk, rel, data, (size_t)n, 0, NULL, 0, timeout_ms, err);
    if (st == PC_OK) *first = 1;
    else if (st == PC_BUSY) st = PC_OK;
  }
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

pc_status_t pc_coord_server_seen(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *seen,
                                 pc_error_t *err) {
  char rel[160];
  *seen = 0;
  if (server_path(rel, sizeof rel, name, NULL))
    return pc_error_set(err, PC_INVALID, "coordination: bad server name '%s'", name);
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = c->zk ? pc_zk_sync(c->zk, SERVERS, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_NOT_FOUND) st = PC_OK;
  if (st == PC_OK) st = pc_zk_exists(c->zk, rel, NULL, seen, timeout_ms, err);
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

static uint64_t owner_term(const char *identity);

/* Creates h's node for the current session (c->zk's read lock and h->op held),
 * replacing a node of another session (a previous holder's: a server that
 * died, or this process before an expiry). A tablet's leadership replaces
 * only an owner of an earlier term: a node of a later term means this
 * leader was deposed meanwhile, and h is let go (PC_STATE). */
static pc_status_t create_held(pc_coord_t *c, held_t *h, uint32_t timeout_ms, pc_error_t *err) {
  if (h->term) /* an owner names the session its node belongs to: this one, after an expiry too */
    snprintf(h->data, sizeof h->data, "%s %016" PRIx64 " raft:%s:%" PRIu64, h->owner_addr,
             pc_zk_session_id(c->zk), h->owner_server, h->term);
  char parent[200];
  snprintf(parent, sizeof parent, "%s", h->rel);
  char *slash = strrchr(parent, '/');
  if (slash) *slash = '\0';
  pc_status_t st = pc_zk_ensure(c->zk, parent, timeout_ms, err);
  for (int tries = 0; st == PC_OK && tries < 5; tries++) {
    st = pc_zk_create(c->zk, h->rel, h->data, strlen(h->data), PC_ZK_EPHEMERAL, NULL, 0,
                      timeout_ms, err);
    if (st != PC_BUSY) break;
    char *held = NULL;
    size_t hl = 0;
    int32_t version = -1;
    if (h->term) {
      st = pc_zk_get(c->zk, h->rel, NULL, &held, &hl, &version, timeout_ms, err);
      if (st == PC_NOT_FOUND) {
        st = PC_OK;
        continue;
      }
      if (st != PC_OK) break;
      char ident[400] = "";
      if (parse_owner(held, NULL, 0, NULL, ident, sizeof ident) == 0 && owner_term(ident) > h->term) {
        free(held);
        h->dropped = 1;
        h->node_session = 0;
        return pc_error_set(err, PC_STATE, "%s names a later term", h->rel);
      }
      free(held);
    }
    st = pc_zk_delete(c->zk, h->rel, version, timeout_ms, err);
    if (st == PC_NOT_FOUND || st == PC_CONFLICT) st = PC_OK; /* changed meanwhile: look again */
  }
  if (st == PC_OK) h->node_session = pc_zk_session_id(c->zk);
  return st;
}

static void ensure_held(pc_coord_t *c) {
  uint64_t id = pc_zk_session_id(c->zk);
  pthread_mutex_lock(&c->mu);
  held_t *list = c->held; /* only ever added at the head; freed at close */
  pthread_mutex_unlock(&c->mu);
  for (held_t *h = list; h; h = h->next) {
    pthread_mutex_lock(&h->op);
    if (!h->dropped && h->node_session != id) {
      pc_error_t err;
      if (create_held(c, h, call_ms(c), &err) == PC_OK)
        pc_log(PC_LOG_INFO, "coordination: %s made again under a new ZooKeeper session", h->rel);
      else
        pc_log(PC_LOG_WARN, "coordination: %s: %s", h->rel, err.text);
    }
    pthread_mutex_unlock(&h->op);
  }
}

/* The held entry for rel, made when absent (NULL out of memory). */
static held_t *held_get(pc_coord_t *c, const char *rel) {
  pthread_mutex_lock(&c->mu);
  held_t *h = c->held;
  while (h && strcmp(h->rel, rel) != 0) h = h->next;
  if (!h && (h = calloc(1, sizeof *h))) {
    snprintf(h->rel, sizeof h->rel, "%s", rel);
    pthread_mutex_init(&h->op, NULL);
    h->dropped = 1;
    h->next = c->held;
    c->held = h;
  }
  pthread_mutex_unlock(&c->mu);
  return h;
}

pc_status_t pc_coord_server_live(pc_coord_t *c, const char *name, const char *addr,
                                 uint32_t timeout_ms, pc_error_t *err) {
  char rel[200];
  if (server_path(rel, sizeof rel, name, "live"))
    return pc_error_set(err, PC_INVALID, "coordination: bad server name '%s'", name);
  held_t *h = held_get(c, rel);
  if (!h) return pc_error_set(err, PC_NOMEM, "out of memory");
  pthread_rwlock_rdlock(&c->zk_lk);
  pc_status_t st = PC_OK;
  if (!c->zk) st = pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  pthread_mutex_lock(&h->op);
  snprintf(h->data, sizeof h->data, "%s", addr);
  h->node_session = 0;
  h->dropped = 0;
  if (st == PC_OK) st = create_held(c, h, timeout_ms, err);
  pthread_mutex_unlock(&h->op);
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

pc_status_t pc_coord_server_addr(pc_coord_t *c, const char *name, uint32_t timeout_ms, char *addr,
                                 size_t cap, pc_error_t *err) {
  char rel[200];
  addr[0] = '\0';
  if (server_path(rel, sizeof rel, name, "live"))
    return pc_error_set(err, PC_INVALID, "coordination: bad server name '%s'", name);
  pthread_rwlock_rdlock(&c->zk_lk);
  char *data = NULL;
  size_t len = 0;
  /* where a server is, only a system session says */
  pc_status_t st = c->zk ? pc_coord_system_node(c->zk, rel, NULL, &data, &len, NULL, timeout_ms,
                                                err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  pthread_rwlock_unlock(&c->zk_lk);
  if (st == PC_DENIED) warn_once(c, err->text);
  if (st == PC_NOT_FOUND || st == PC_DENIED)
    return pc_error_set(err, PC_UNAVAILABLE, "server %s is not running (no %s/%s)", name, c->root, rel);
  if (st == PC_OK) snprintf(addr, cap, "%.*s", (int)len, data);
  free(data);
  return st;
}

/* The term in an owner node's identity "raft:<server>:<term>", 0 otherwise. */
static uint64_t owner_term(const char *identity) {
  const char *colon = strncmp(identity, "raft:", 5) == 0 ? strrchr(identity, ':') : NULL;
  return colon && colon > identity + 4 ? strtoull(colon + 1, NULL, 10) : 0;
}

pc_status_t pc_coord_tablet_lead(pc_coord_t *c, const char *name, const char *addr,
                                 const char *server, uint64_t term, uint32_t timeout_ms,
                                 pc_error_t *err) {
  char rel[160];
  if (tablet_path(rel, sizeof rel, name, "owner"))
    return pc_error_set(err, PC_INVALID, "coordination: bad tablet name '%s'", name);
  held_t *h = held_get(c, rel);
  if (!h) return pc_error_set(err, PC_NOMEM, "out of memory");
  if (!term) h->dropped = 1; /* let go now, whether or not ZooKeeper can be told: never made again */
  pthread_rwlock_rdlock(&c->zk_lk);
  pthread_mutex_lock(&h->op);
  pc_status_t st = c->zk ? PC_OK : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  char *held = NULL;
  size_t hl = 0;
  if (st == PC_OK && term) {
    /* a node of a later term stays: this leader has been deposed already */
    st = pc_zk_get(c->zk, rel, NULL, &held, &hl, NULL, timeout_ms, err);
    char ident[400] = "";
    if (st == PC_OK && parse_owner(held, NULL, 0, NULL, ident, sizeof ident) == 0 &&
        owner_term(ident) > term)
      st = PC_STATE;
    if (st == PC_NOT_FOUND) st = PC_OK;
    free(held);
  }
  if (st == PC_OK) {
    uint64_t id = pc_zk_session_id(c->zk);
    if (term) {
      snprintf(h->owner_addr, sizeof h->owner_addr, "%s", addr);
      snprintf(h->owner_server, sizeof h->owner_server, "%s", server);
      h->term = term;
      h->node_session = 0;
      h->dropped = 0;
    }
    if (term) {
      st = create_held(c, h, timeout_ms, err);
    } else { /* let go: our node goes, another's stays */
      held = NULL;
      st = pc_zk_get(c->zk, rel, NULL, &held, &hl, NULL, timeout_ms, err);
      uint64_t s = 0;
      if (st == PC_OK && parse_owner(held, NULL, 0, &s, NULL, 0) == 0 && s == id)
        st = pc_zk_delete(c->zk, rel, -1, timeout_ms, err);
      if (st == PC_NOT_FOUND) st = PC_OK;
      free(held);
    }
  } else if (st == PC_STATE) {
    st = PC_OK; /* nothing to do */
  }
  pthread_mutex_unlock(&h->op);
  pthread_rwlock_unlock(&c->zk_lk);
  return st;
}

pc_status_t pc_coord_tablet_range_get(pc_coord_t *c, const char *name, uint32_t timeout_ms,
                                      char **start, size_t *start_len, char **end,
                                      size_t *end_len, pc_error_t *err) {
  char rel[160];
  *start = *end = NULL;
  *start_len = *end_len = 0;
  if (tablet_path(rel, sizeof rel, name, "range"))
    return pc_error_set(err, PC_INVALID, "coordination: bad tablet name '%s'", name);
  pthread_rwlock_rdlock(&c->zk_lk);
  char *data = NULL;
  size_t len = 0;
  pc_status_t st = c->zk ? pc_zk_get(c->zk, rel, NULL, &data, &len, NULL, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  pthread_rwlock_unlock(&c->zk_lk);
  if (st == PC_NOT_FOUND)
    return pc_error_set(err, PC_NOT_FOUND, "tablet %s: no rows recorded in %s/%s", name, c->root, rel);
  if (st != PC_OK) return st;
  const char *sp = memchr(data, ' ', len);
  size_t hs = sp ? (size_t)(sp - data) : 0, he = sp ? len - hs - 1 : 0;
  *start = malloc(hs / 2 + 1);
  *end = malloc(he / 2 + 1);
  if (!*start || !*end || !sp || hex_get(data, hs, *start) != 0 || hex_get(sp + 1, he, *end) != 0) {
    st = !*start || !*end ? pc_error_set(err, PC_NOMEM, "out of memory")
                          : pc_error_set(err, PC_CORRUPTION, "zookeeper %s/%s: not a range", c->root, rel);
    free(*start);
    free(*end);
    *start = *end = NULL;
  } else {
    *start_len = hs / 2;
    *end_len = he / 2;
    (*start)[*start_len] = '\0';
    (*end)[*end_len] = '\0';
  }
  free(data);
  return st;
}

pc_status_t pc_coord_servers_live(pc_coord_t *c, uint32_t timeout_ms, char ***names, size_t *n,
                                  pc_error_t *err) {
  *names = NULL;
  *n = 0;
  pthread_rwlock_rdlock(&c->zk_lk);
  char **all = NULL;
  size_t count = 0;
  pc_status_t st = c->zk ? pc_zk_children(c->zk, SERVERS, NULL, &all, &count, timeout_ms, err)
                         : pc_error_set(err, PC_UNAVAILABLE, "coordination: no session");
  if (st == PC_NOT_FOUND) st = PC_OK;
  char **live = st == PC_OK ? calloc(count ? count : 1, sizeof *live) : NULL;
  if (st == PC_OK && !live) st = pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; st == PC_OK && i < count; i++) {
    char rel[200];
    int exists = 0;
    if (server_path(rel, sizeof rel, all[i], "live")) continue;
    st = pc_zk_exists(c->zk, rel, NULL, &exists, timeout_ms, err);
    if (st == PC_OK && exists && !(live[(*n)++] = strdup(all[i])))
      st = pc_error_set(err, PC_NOMEM, "out of memory");
  }
  pthread_rwlock_unlock(&c->zk_lk);
  pc_zk_free_names(all, count);
  if (st != PC_OK) {
    for (size_t i = 0; live && i < *n; i++) free(live[i]);
    free(live);
    *n = 0;
    return st;
  }
  *names = live;
  return PC_OK;
}
