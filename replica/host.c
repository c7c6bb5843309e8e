/* host.c — the replication host of a tablet server (replica.h): its Raft
 * thread, which runs every replica's libraft instance, ticks them and runs
 * the tasks other threads post; its identity; the replicas it holds; one
 * sender thread per other server, which carries the messages queued for it
 * in one request at a time (whatever queued meanwhile goes in the next);
 * and a jobs thread for work that must not hold up the Raft thread. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "replica/replica_int.h"

#define PEER_QUEUE_MAX (64u << 20) /* bytes of messages waiting for one server */
#define RESOLVE_EVERY_MS 2000u

struct peer {
  char server[PC_RAFT_GROUP_MAX + 1];
  pc_repl_host_t *h;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pc_buf_t *q;
  size_t nq, capq, bytes;
  int stopping;
  pc_rpc_client_t *client;
  char endpoint[PC_REPL_ENDPOINT_MAX];
  uint64_t resolved_ms;
  pc_log_limit_t lim;
  peer_t *next;
};

/* ---- the Raft thread and its tasks ----------------------------------------- */

static void queue_push(task_t **head, task_t **tail, task_t *t) {
  t->next = NULL;
  if (*tail) (*tail)->next = t;
  else *head = t;
  *tail = t;
}

void host_post(pc_repl_host_t *h, void (*fn)(pc_repl_host_t *h, void *arg), void *arg) {
  task_t *t = malloc(sizeof *t);
  if (!t) { /* out of memory: the task cannot be dropped (it may complete a wait) */
    pc_log(PC_LOG_ERROR, "replication: out of memory posting a task");
    abort();
  }
  t->fn = fn;
  t->arg = arg;
  pthread_mutex_lock(&h->mu);
  queue_push(&h->head, &h->tail, t);
  pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

typedef struct call {
  void (*fn)(pc_repl_host_t *h, void *arg);
  void *arg;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
} call_t;

static void run_call(pc_repl_host_t *h, void *arg) {
  call_t *c = arg;
  c->fn(h, c->arg);
  pthread_mutex_lock(&c->mu);
  c->done = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

void host_call(pc_repl_host_t *h, void (*fn)(pc_repl_host_t *h, void *arg), void *arg) {
  if (pthread_equal(pthread_self(), h->thread)) {
    fn(h, arg);
    return;
  }
  call_t c = {fn, arg, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  host_post(h, run_call, &c);
  pthread_mutex_lock(&c.mu);
  while (!c.done) pthread_cond_wait(&c.cv, &c.mu);
  pthread_mutex_unlock(&c.mu);
  pthread_mutex_destroy(&c.mu);
  pthread_cond_destroy(&c.cv);
}

static void tick_all(pc_repl_host_t *h) {
  pthread_mutex_lock(&h->reps_mu);
  pc_replica_t *list = h->reps;
  pthread_mutex_unlock(&h->reps_mu);
  /* replicas are only added at the head and freed after the thread stops */
  for (pc_replica_t *r = list; r; r = r->next) group_tick(r);
}

static void *raft_thread(void *arg) {
  pc_repl_host_t *h = arg;
  uint64_t next_tick = pc_now_mono_ms() + h->tick_ms;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    if (h->stopped && !h->head) break;
    uint64_t now = pc_now_mono_ms();
    if (now >= next_tick) {
      next_tick = now + h->tick_ms;
      int stopping = h->stopping;
      pthread_mutex_unlock(&h->mu);
      if (!stopping) tick_all(h);
      pthread_mutex_lock(&h->mu);
      continue;
    }
    if (!h->head) {
      struct timespec at = pc_mono_after_ms((uint32_t)(next_tick - now));
      pthread_cond_timedwait(&h->cv, &h->mu, &at);
      continue;
    }
    task_t *t = h->head;
    h->head = h->tail = NULL;
    pthread_mutex_unlock(&h->mu);
    while (t) {
      task_t *next = t->next;
      t->fn(h, t->arg);
      free(t);
      t = next;
    }
    pthread_mutex_lock(&h->mu);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* ---- the jobs thread ----------------------------------------------------------- */

void host_job(pc_repl_host_t *h, void (*fn)(pc_repl_host_t *h, void *arg), void *arg) {
  task_t *t = malloc(sizeof *t);
  if (!t) {
    pc_log(PC_LOG_ERROR, "replication: out of memory posting a job");
    abort();
  }
  t->fn = fn;
  t->arg = arg;
  pthread_mutex_lock(&h->jobs_mu);
  queue_push(&h->jobs_head, &h->jobs_tail, t);
  pthread_cond_signal(&h->jobs_cv);
  pthread_mutex_unlock(&h->jobs_mu);
}

static void *jobs_thread(void *arg) {
  pc_repl_host_t *h = arg;
  pthread_mutex_lock(&h->jobs_mu);
  for (;;) {
    while (!h->jobs_head && !h->jobs_stopping) pthread_cond_wait(&h->jobs_cv, &h->jobs_mu);
    task_t *t = h->jobs_head;
    h->jobs_head = h->jobs_tail = NULL;
    if (!t) break;
    pthread_mutex_unlock(&h->jobs_mu);
    while (t) {
      task_t *next = t->next;
      t->fn(h, t->arg);
      free(t);
      t = next;
    }
    pthread_mutex_lock(&h->jobs_mu);
  }
  pthread_mutex_unlock(&h->jobs_mu);
  return NULL;
}

/* ---- senders ----------------------------------------------------------------- */

pc_rpc_client_t *host_client(pc_repl_host_t *h, const char *server, pc_error_t *err) {
  char ep[PC_REPL_ENDPOINT_MAX], host[PC_REPL_ENDPOINT_MAX];
  uint16_t port;
  pc_status_t st = h->o.resolve(h->o.resolve_ctx, server, ep, sizeof ep, err);
  if (st == PC_OK) st = pc_parse_endpoint(ep, 0, host, sizeof host, &port, err);
  if (st != PC_OK) return NULL;
  pc_rpc_client_options_t co = {1};
  return pc_rpc_client_create_opts(host, port, &h->auth, &co, err);
}

/* The client of p's server, resolved again after a failure or now and then
 * (a server restarted on another port). */
static pc_rpc_client_t *peer_client(peer_t *p) {
  uint64_t now = pc_now_mono_ms();
  if (p->client && now - p->resolved_ms < RESOLVE_EVERY_MS) return p->client;
  char ep[PC_REPL_ENDPOINT_MAX];
  pc_error_t err;
  if (p->h->o.resolve(p->h->o.resolve_ctx, p->server, ep, sizeof ep, &err) != PC_OK) {
    pc_log_limited(&p->lim, PC_LOG_WARN, "replication: server %s: %s", p->server, err.text);
    return p->client; /* keep what we had */
  }
  p->resolved_ms = now;
  if (p->client && strcmp(ep, p->endpoint) == 0) return p->client;
  char host[PC_REPL_ENDPOINT_MAX];
  uint16_t port;
  if (pc_parse_endpoint(ep, 0, host, sizeof host, &port, &err) != PC_OK) return p->client;
  pc_rpc_client_options_t co = {1};
  pc_rpc_client_t *c = pc_rpc_client_create_opts(host, port, &p->h->auth, &co, &err);
  if (!c) return p->client;
  if (p->client) pc_rpc_client_destroy(p->client);
  p->client = c;
  snprintf(p->endpoint, sizeof p->endpoint, "%s", ep);
  return c;
}

static void *peer_thread(void *arg) {
  peer_t *p = arg;
  pc_buf_t frame = {0}, reply = {0};
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->nq && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
    if (p->stopping) {
      pthread_mutex_unlock(&p->mu);
      break;
    }
    pc_buf_t *q = p->q;
    size_t n = p->nq;
    p->q = NULL;
    p->nq = p->capq = p->bytes = 0;
    pthread_mutex_unlock(&p->mu);
    frame.len = 0;
    int oom = pc_buf_u32(&frame, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
      if (!oom) oom = pc_buf_append(&frame, q[i].p, q[i].len);
      pc_buf_free(&q[i]);
    }
    free(q);
    pc_rpc_client_t *c = oom ? NULL : peer_client(p);
    if (c) {
      pc_error_t err;
      reply.len = 0;
      pc_status_t st = pc_rpc_call(c, PC_REPL_OP_RAFT, frame.p, frame.len,
                                   p->h->election_base_ms, &reply, &err);
      if (st != PC_OK) {
        p->resolved_ms = 0; /* look it up again next time */
        pc_log_limited(&p->lim, PC_LOG_DEBUG, "replication: to %s: %s", p->server, err.text);
      }
    }
  }
  pc_buf_free(&frame);
  pc_buf_free(&reply);
  return NULL;
}

static peer_t *peer_get(pc_repl_host_t *h, const char *server) {
  pthread_mutex_lock(&h->peers_mu);
  peer_t *p = h->peers;
  while (p && strcmp(p->server, server) != 0) p = p->next;
  if (!p && !h->stopping && (p = calloc(1, sizeof *p))) {
    snprintf(p->server, sizeof p->server, "%s", server);
    p->h = h;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, peer_thread, p) != 0) {
      pthread_mutex_destroy(&p->mu);
      pthread_cond_destroy(&p->cv);
      free(p);
      p = NULL;
    } else {
      p->next = h->peers;
      h->peers = p;
    }
  }
  pthread_mutex_unlock(&h->peers_mu);
  return p;
}

void host_send(pc_repl_host_t *h, const char *server, pc_buf_t *msg) {
  peer_t *p = peer_get(h, server);
  if (!p) {
    pc_buf_free(msg);
    return;
  }
  pthread_mutex_lock(&p->mu);
  int keep = p->bytes + msg->len <= PEER_QUEUE_MAX; /* else dropped: Raft sends again */
  if (keep && p->nq == p->capq) {
    size_t cap = p->capq ? p->capq * 2 : 16;
    pc_buf_t *nq = realloc(p->q, cap * sizeof *nq);
    if (nq) {
      p->q = nq;
      p->capq = cap;
    } else {
      keep = 0;
    }
  }
  if (keep) {
    p->q[p->nq++] = *msg;
    p->bytes += msg->len;
    memset(msg, 0, sizeof *msg);
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  pc_buf_free(msg);
}

static void peers_stop(pc_repl_host_t *h) {
  pthread_mutex_lock(&h->peers_mu);
  peer_t *p = h->peers;
  h->peers = NULL;
  pthread_mutex_unlock(&h->peers_mu);
  while (p) {
    peer_t *next = p->next;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    for (size_t i = 0; i < p->nq; i++) pc_buf_free(&p->q[i]);
    free(p->q);
    if (p->client) pc_rpc_client_destroy(p->client);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    p = next;
  }
}

/* ---- the host ----------------------------------------------------------------- */

pc_replica_t *host_find(pc_repl_host_t *h, const char *group) {
  pthread_mutex_lock(&h->reps_mu);
  pc_replica_t *r = h->reps;
  while (r && strcmp(r->group, group) != 0) r = r->next;
  pthread_mutex_unlock(&h->reps_mu);
  return r;
}

static int mkdir_private(const char *path) {
  return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

int pc_repl_dir_fresh(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/raft/CURRENT", dir);
  return access(path, F_OK) != 0;
}

uint64_t pc_repl_host_incarnation(const pc_repl_host_t *h) { return h->incarnation; }

static void host_free(pc_repl_host_t *h) {
  if (h->log) pc_raft_log_close(h->log);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->reps_mu);
  pthread_mutex_destroy(&h->peers_mu);
  pthread_mutex_destroy(&h->jobs_mu);
  pthread_cond_destroy(&h->jobs_cv);
  pthread_mutex_destroy(&h->streams_mu);
  pthread_mutex_destroy(&h->fetch_mu);
  pthread_cond_destroy(&h->fetch_cv);
  free(h->dir);
  free(h);
}

pc_repl_host_t *pc_repl_host_open(const pc_repl_options_t *o, int *fresh, pc_error_t *err) {
  if (!o->server || !o->server[0] || strlen(o->server) > PC_RAFT_GROUP_MAX || strchr(o->server, '#')) {
    pc_error_set(err, PC_INVALID, "replication: a server's name is 1..%d characters without '#'",
                 PC_RAFT_GROUP_MAX);
    return NULL;
  }
  pc_repl_host_t *h = calloc(1, sizeof *h);
  if (!h || !(h->dir = strdup(o->dir))) {
    free(h);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  h->o = *o;
  snprintf(h->server, sizeof h->server, "%s", o->server);
  if (o->auth) h->auth = *o->auth;
  uint32_t e = o->election_timeout_ms ? o->election_timeout_ms : 1000;
  h->election_base_ms = e / 2 < 20 ? 20 : e / 2;
  /* a follower waits at least election_base_ms after it last heard from its
   * leader before it stands; the lease ends well before that */
  h->lease_ms = h->election_base_ms - h->election_base_ms / 5;
  uint32_t hb = o->heartbeat_ms ? o->heartbeat_ms : 100;
  if (hb >= h->election_base_ms) hb = h->election_base_ms / 2;
  h->o.heartbeat_ms = hb;
  h->tick_ms = hb / 4 ? hb / 4 : 1;
  if (!h->o.snapshot_entries) h->o.snapshot_entries = 8192;
  if (!h->o.snapshot_trailing) h->o.snapshot_trailing = 1024;
  pthread_mutex_init(&h->mu, NULL);
  pc_cond_init_mono(&h->cv);
  pthread_mutex_init(&h->reps_mu, NULL);
  pthread_mutex_init(&h->peers_mu, NULL);
  pthread_mutex_init(&h->jobs_mu, NULL);
  pthread_cond_init(&h->jobs_cv, NULL);
  pthread_mutex_init(&h->streams_mu, NULL);
  pthread_mutex_init(&h->fetch_mu, NULL);
  pthread_cond_init(&h->fetch_cv, NULL);
  char path[4200];
  *fresh = pc_repl_dir_fresh(o->dir);
  snprintf(path, sizeof path, "%s/raft", o->dir);
  if (mkdir_private(o->dir) || mkdir_private(path)) {
    pc_error_set(err, PC_IO_ERROR, "replication: cannot create %s: %s", path, strerror(errno));
    host_free(h);
    return NULL;
  }
  snprintf(path, sizeof path, "%s/replicas", o->dir);
  if (mkdir_private(path)) {
    pc_error_set(err, PC_IO_ERROR, "replication: cannot create %s: %s", path, strerror(errno));
    host_free(h);
    return NULL;
  }
  snprintf(path, sizeof path, "%s/raft", o->dir);
  if (!(h->log = pc_raft_log_open(path, err))) {
    host_free(h);
    return NULL;
  }
  char name[PC_RAFT_GROUP_MAX + 1];
  int found = 0;
  pc_status_t st = pc_raft_log_identity(h->log, name, sizeof name, &h->incarnation, &found, err);
  if (st == PC_OK && found && strcmp(name, o->server) != 0)
    st = pc_error_set(err, PC_INVALID,
                      "replication: %s holds the state of server %s, not of %s", o->dir, name,
                      o->server);
  if (st == PC_OK && !found) {
    h->incarnation = o->fresh_incarnation;
    st = pc_raft_log_set_identity(h->log, o->server, h->incarnation, err);
  }
  if (st != PC_OK) {
    host_free(h);
    return NULL;
  }
  h->started_ms = pc_now_mono_ms();
  if (pthread_create(&h->jobs_thread, NULL, jobs_thread, h) != 0) {
    pc_error_set(err, PC_NOMEM, "replication: cannot start a thread");
    host_free(h);
    return NULL;
  }
  if (pthread_create(&h->thread, NULL, raft_thread, h) != 0) {
    pthread_mutex_lock(&h->jobs_mu);
    h->jobs_stopping = 1;
    pthread_cond_signal(&h->jobs_cv);
    pthread_mutex_unlock(&h->jobs_mu);
    pthread_join(h->jobs_thread, NULL);
    pc_error_set(err, PC_NOMEM, "replication: cannot start a thread");
    host_free(h);
    return NULL;
  }
  pc_log(PC_LOG_INFO, "replication: server %s, incarnation %016" PRIx64 "%s", h->server,
         h->incarnation, *fresh ? " (a new directory)" : "");
  return h;
}

void pc_repl_host_groups(pc_repl_host_t *h, void (*fn)(void *ctx, const char *group), void *ctx) {
  pc_error_t err;
  if (pc_raft_log_groups(h->log, fn, ctx, &err) != PC_OK)
    pc_log(PC_LOG_WARN, "replication: %s", err.text);
}

int pc_repl_host_has(pc_repl_host_t *h, const char *group) {
  pc_raft_stored_t s;
  int found = 0;
  pc_error_t err;
  if (pc_raft_log_state(h->log, group, &s, &found, &err) != PC_OK) return 0;
  pc_raft_stored_free(&s);
  return found;
}

typedef struct start_args {
  pc_replica_t *r;
  pc_replica_start_t start;
  const char *const *voters;
  size_t nvoters;
  pc_error_t *err;
  pc_status_t st;
} start_args_t;

static void start_on_thread(pc_repl_host_t *h, void *arg) {
  (void)h;
  start_args_t *a = arg;
  a->st = group_start(a->r, a->start, a->voters, a->nvoters, a->err);
}

pc_status_t pc_repl_host_replica(pc_repl_host_t *h, const char *group, pc_replica_start_t start,
                                 const char *const *voters, size_t nvoters, pc_replica_t **out,
                                 pc_error_t *err) {
  *out = NULL;
  if (!group[0] || strlen(group) > PC_RAFT_GROUP_MAX)
    return pc_error_set(err, PC_INVALID, "replication: a group's name is 1..%d characters",
                        PC_RAFT_GROUP_MAX);
  if (host_find(h, group))
    return pc_error_set(err, PC_INVALID, "replication: server %s already holds tablet %s",
                        h->server, group);
  pc_replica_t *r = group_create(h, group);
  if (!r) return pc_error_set(err, PC_NOMEM, "out of memory");
  start_args_t a = {r, start, voters, nvoters, err, PC_OK};
  /* listed before it starts, so that messages find it as soon as it sends */
  pthread_mutex_lock(&h->reps_mu);
  r->next = h->reps;
  h->reps = r;
  pthread_mutex_unlock(&h->reps_mu);
  host_call(h, start_on_thread, &a);
  if (a.st != PC_OK) {
    /* it stays listed, stopped: it was never started, so nothing refers to it */
    pc_error_prefix(err, "tablet %s", group);
    return a.st;
  }
  *out = r;
  return PC_OK;
}

static void stop_all(pc_repl_host_t *h, void *arg) {
  (void)arg;
  for (pc_replica_t *r = h->reps; r; r = r->next) group_stop(r);
}

static void mark_stopped(pc_repl_host_t *h, void *arg) {
  (void)arg;
  pthread_mutex_lock(&h->mu);
  h->stopped = 1;
  pthread_mutex_unlock(&h->mu);
}

void pc_repl_host_close(pc_repl_host_t *h) {
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->stopping = 1;
  pthread_mutex_unlock(&h->mu);
  host_call(h, stop_all, NULL);
  /* the closes complete through tasks (libraft's close callbacks); wait for them */
  for (int i = 0; i < 500; i++) {
    int open = 0;
    pthread_mutex_lock(&h->reps_mu);
    for (pc_replica_t *r = h->reps; r; r = r->next) open |= r->raft_inited && !r->closed;
    pthread_mutex_unlock(&h->reps_mu);
    if (!open) break;
    pc_sleep_ms(10);
  }
  pthread_mutex_lock(&h->fetch_mu);
  while (h->fetches) pthread_cond_wait(&h->fetch_cv, &h->fetch_mu);
  pthread_mutex_unlock(&h->fetch_mu);
  host_post(h, mark_stopped, NULL);
  pthread_join(h->thread, NULL);
  /* what was posted after the thread ended (a message that arrived late):
   * every task handles its replica being closed */
  pthread_mutex_lock(&h->mu);
  task_t *late = h->head;
  h->head = h->tail = NULL;
  pthread_mutex_unlock(&h->mu);
  while (late) {
    task_t *next = late->next;
    late->fn(h, late->arg);
    free(late);
    late = next;
  }
  pthread_mutex_lock(&h->jobs_mu);
  h->jobs_stopping = 1;
  pthread_cond_signal(&h->jobs_cv);
  pthread_mutex_unlock(&h->jobs_mu);
  pthread_join(h->jobs_thread, NULL);
  peers_stop(h);
  pthread_mutex_lock(&h->streams_mu);
  for (size_t i = 0; i < sizeof h->streams / sizeof h->streams[0]; i++)
    if (h->streams[i].id) {
      pc_local_stream_close(h->streams[i].st);
      gen_release(h->streams[i].rep, h->streams[i].gen);
      h->streams[i].id = 0;
    }
  pthread_mutex_unlock(&h->streams_mu);
  pc_replica_t *r = h->reps;
  h->reps = NULL;
  while (r) {
    pc_replica_t *next = r->next;
    group_free(r);
    r = next;
  }
  host_free(h);
}
