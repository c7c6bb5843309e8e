/* rpc_server.c — the server side of the request/response protocol every
 * daemon speaks (net/rpc.h): one libevent loop thread for accept and socket
 * I/O, a pool of handler threads fed from a bounded queue, replies handed
 * back to the loop thread through a completion queue; its statistics and its
 * stop; and the in-process endpoints a server registers, through which a
 * client of the same process (net/rpc_client.c) calls its handler. Beneath
 * the framing a connection is a bufferevent over TCP or over TLS
 * (net/tls.c); above it, the secret's challenge-response and the roles come
 * from net/rpc_auth.c.
 *
 * Threading and ownership:
 *   - The loop thread alone touches the event base, the listener, every
 *     bufferevent and every field of a connection. Handler threads see only
 *     jobs: a job owns its request body and its reply buffer, and holds a
 *     reference on its connection that only the loop thread drops (so
 *     connection reference counts need no atomics). A connection closed
 *     while its requests are being served stays allocated until the last of
 *     their jobs comes back, and their replies are then discarded.
 *   - Jobs travel loop -> workers through queue (qmu/qcv) and back through
 *     the completion list (cmu), whose first entry activates done_ev.
 *   - The number of requests in service is bounded per connection
 *     (max_inflight) and in total (qcap); beyond either the loop stops
 *     reading from the connection. Replies a peer does not read are bounded
 *     by OUT_HIGH the same way.
 *
 * Every thread this file starts blocks all signals: daemons get SIGTERM and
 * SIGINT on their main thread, and a write to a closed peer returns EPIPE
 * instead of killing the process with SIGPIPE.
 */
#include "net/rpc.h"
#include "net/rpc_frame.h"
#include "net/rpc_int.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "base/deadline.h"
#include "base/error.h"
#include "base/log.h"
#include "net/rpc_auth.h"
#include "net/rpc_peers.h"
#include "net/tls.h"

#define OUT_HIGH (8u << 20)             /* unread reply bytes before a connection stops reading */
#define LINGER_MS 2000                  /* flushing an error reply before closing */
#define STOP_GRACE_MS PC_RPC_STOP_GRACE_MS /* pc_rpc_server_stop waits this long for replies */
#define CANCEL_FLUSH_MS 1000 /* then for the replies of the requests it cancelled */
#define ACCEPT_RETRY_MS 100             /* pause after a failing accept() (e.g. EMFILE) */
#define DEFAULT_REQUEST_MEMORY ((size_t)256 << 20)
#define SMALL_FRAME (64u << 10) /* frames up to this size have request memory of their own */
#define DEFAULT_REPLY_MEMORY ((size_t)256 << 20)

static int deadline_passed(uint64_t deadline_ms) {
  return deadline_ms && pc_now_mono_ms() >= deadline_ms;
}

static void format_sockaddr(char *out, size_t cap, const struct sockaddr *sa, socklen_t len) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(sa, len, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    snprintf(out, cap, "unknown peer");
    return;
  }
  unsigned port = (unsigned)strtoul(p, NULL, 10);
  if (strchr(h, ':'))
    snprintf(out, cap, "[%.64s]:%u", h, port);
  else
    snprintf(out, cap, "%.64s:%u", h, port);
}

enum { PEER_DONE = 1, CLOSED = 2 }; /* conn_t.gone */

typedef struct conn {
  struct pc_rpc_server *s;
  struct bufferevent *bev;           /* NULL once closed */
  struct event *frame_ev;            /* partial-frame timer, then the flush-before-close timer */
  struct event *idle_ev;             /* idle timer; the authentication deadline before that */
  struct conn *prev, *next;          /* the server's open connections */
  struct conn *sprev, *snext;        /* the server's starved connections */
  struct conn *uprev, *unext;        /* the server's unauthenticated connections, oldest first */
  int starved, unauthed_listed;
  int refs;                          /* 1 while open + 1 per job; loop thread only */
  uint32_t inflight;                 /* jobs in service */
  int reading, closing, shut, eof, closed;
  uint8_t version;                   /* of the frame being answered (replies use it) */
  /* PEER_DONE: the peer closed its side; CLOSED: the connection closed. Either
   * way the requests in service are abandoned (job_abandoned); after
   * PEER_DONE their replies are still sent, and a queued one still runs */
  _Atomic int gone;
  /* authentication: a TLS handshake (handshaking until it is done) and, with
   * a secret, HELLO and AUTH; authed once both are through */
  int authed, handshaking, hello_seen;
  pc_rpc_role_t role, tls_role, secret_role;
  unsigned char snonce[PC_RPC_NONCE], cnonce[PC_RPC_NONCE];
  uint64_t accepted_ms;
  size_t frame_charge;               /* request memory held for the frame being received */
  size_t out_len;                    /* unread reply bytes in the output buffer */
  size_t in_seen;                    /* input bytes already counted in bytes_in */
  uint64_t cid;                      /* this server's id of the connection (from 1) */
  rpc_peer_key_t peer_key;
  char peer[80];
} conn_t;

/* One request in service. Owned by whichever queue holds it; body and reply
 * are freed (or handed to an evbuffer) by the loop thread. */
/* Request durations per op (pc_rpc_server_latency): observations per
 * bucket (the last is +Inf), not cumulative, and their sum. */
typedef struct op_latency {
  _Atomic uint64_t bucket[256][PC_RPC_LATENCY_BUCKETS + 1];
  _Atomic uint64_t sum_ns[256];
} op_latency_t;

const double pc_rpc_latency_bounds[PC_RPC_LATENCY_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void latency_record(op_latency_t *l, uint8_t op, uint64_t since_ns) {
  uint64_t ns = mono_ns() - since_ns;
  double sec = (double)ns / 1e9;
  size_t i = 0;
  while (i < PC_RPC_LATENCY_BUCKETS && sec > pc_rpc_latency_bounds[i]) i++;
  atomic_fetch_add_explicit(&l->bucket[op][i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&l->sum_ns[op], ns, memory_order_relaxed);
}

typedef struct job {
  struct job *next;
  conn_t *conn; /* a reference */
  uint64_t cid; /* conn->cid, readable by the worker */
  pc_rpc_role_t role; /* conn->role, readable by the worker */
  size_t charge;      /* request memory it holds until it comes back */
  uint8_t op, version;
  uint64_t id;
  uint64_t deadline_ms; /* monotonic: arrival + the request's budget; 0 none */
  uint64_t arrived_ns;  /* monotonic, for its duration */
  char *body;
  size_t blen;
  pc_status_t status;
  pc_buf_t reply; /* the body on PC_OK, else the error message */
} job_t;

struct pc_rpc_server {
  char *name, *host; /* owned copies */
  rpc_creds_t creds; /* who is admitted, and as what */
  int need_auth;     /* TLS or a secret: connections start unauthenticated */
  uint32_t max_frame, max_inflight, frame_timeout_ms, idle_timeout_ms, max_connections;
  uint32_t max_per_peer, max_unauth, auth_timeout_ms, reply_timeout_ms;
  size_t request_memory, reply_memory;
  pc_rpc_handler_fn handler;
  void *ctx;
  void (*on_close)(void *ctx, uint64_t connection);
  int (*runs_inline)(uint8_t op);
  uint64_t next_cid; /* loop thread only */
  uint16_t port;
  char endpoint[300];

  struct event_base *base;
  struct evconnlistener *listener;
  struct event *done_ev, *stop_ev, *grace_ev, *accept_retry_ev;
  pthread_t loop_thread;
  int loop_started;
  pthread_t *workers;
  uint32_t workers_started;

  pthread_mutex_t qmu; /* request queue */
  pthread_cond_t qcv;
  job_t *qhead, *qtail;
  int qstop;

  pthread_mutex_t cmu; /* completion list */
  job_t *chead, *ctail;
  /* reply bytes of finished jobs the loop has not taken yet: past
   * reply_memory, workers take no new job until it drains */
  _Atomic size_t pending_replies;

  /* loop thread only */
  conn_t *conns;
  conn_t *starved_head, *starved_tail;
  uint32_t nstarved;
  conn_t *unauth_head, *unauth_tail;
  uint32_t nunauth;
  rpc_peers_t *peers;
  size_t request_used, small_used, reply_used; /* request_used: frames above SMALL_FRAME */
  uint32_t in_service, qcap;
  int stopping;
  _Atomic int stop_begun; /* stop_ev was activated (pc_rpc_server_stop_begin) */
  _Atomic int cancel_all; /* the stop's grace is over: every request in service is abandoned */

  _Atomic uint64_t n_accepted, n_open, n_requests, n_proto_errors, n_bytes_in, n_bytes_out;
  _Atomic uint64_t n_in_service, n_abandoned;
  _Atomic uint64_t n_inline, n_deferred; /* ops that run inline: served so, sent to a worker */
  _Atomic uint64_t n_refused, n_auth_failures, g_request_used, g_reply_used;
  op_latency_t latency; /* per op */
  pc_log_limit_t loglim; /* lines a peer can provoke */
  struct local_ep *local; /* opts->in_process: this server's in-process endpoint */
};


/* The connection of the request a worker thread is serving (0 outside a
 * handler), and its role (0 outside a handler: the process's own call). */
static _Thread_local uint64_t current_connection;
static _Thread_local pc_rpc_role_t current_role;

uint64_t pc_rpc_current_connection(void) { return current_connection; }

pc_rpc_role_t pc_rpc_current_role(void) {
  return current_role == PC_RPC_ROLE_NONE ? PC_RPC_ROLE_SYSTEM : current_role;
}

/* ---- in-process endpoints -------------------------------------------------
 *
 * A server started with in_process registers its host:port here; a client
 * created later in the same process for that host:port, with credentials
 * the server admits (rpc_local_role), calls the handler on its own thread,
 * with the role those credentials give, instead of through a socket. The
 * handler sees what it would over the network: the request body, and a
 * connection id of its own per client (from LOCAL_CID_BASE up, so it never
 * meets a socket's), which the client's destruction closes (on_close) as a
 * socket's closing would. An entry outlives its server while clients hold it:
 * after pc_rpc_server_stop their calls fail with PC_UNAVAILABLE. */

#define LOCAL_CID_BASE (1ull << 62)

struct local_ep {
  struct local_ep *next; /* in local_eps, under local_mu, while serving */
  char host[256];
  uint16_t port;
  rpc_creds_t creds; /* the server's (owned copy) */
  pc_rpc_handler_fn handler;
  void *ctx;
  void (*on_close)(void *ctx, uint64_t connection);
  uint32_t max_frame;
  _Atomic uint64_t *n_requests, *n_in_service, *n_abandoned; /* the server's, while serving */
  op_latency_t *latency;                                      /* the server's, while serving */
  _Atomic int stopping; /* the server stops: calls running are abandoned */
  pthread_mutex_t mu;
  pthread_cond_t idle; /* calls reached 0 after stopped was set */
  uint64_t next_cid;   /* under mu */
  uint32_t calls;      /* under mu: handlers running for in-process clients */
  uint32_t refs;       /* under local_mu: the server while serving, and each client */
  int stopped;         /* under mu */
};

static pthread_mutex_t local_mu = PTHREAD_MUTEX_INITIALIZER;
static local_ep_t *local_eps;

static void local_unref(local_ep_t *e) { /* under local_mu */
  if (--e->refs) return;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->idle);
  rpc_creds_free(&e->creds);
  free(e);
}

static int local_register(struct pc_rpc_server *s) {
  local_ep_t *e = calloc(1, sizeof *e);
  pc_rpc_auth_t a = {s->creds.secret, s->creds.system_secret, s->creds.tls};
  if (!e || rpc_creds_init(&e->creds, &a) != 0) {
    free(e);
    return -1;
  }
  snprintf(e->host, sizeof e->host, "%s", s->host);
  e->port = s->port;
  e->handler = s->handler;
  e->ctx = s->ctx;
  e->on_close = s->on_close;
  e->max_frame = s->max_frame;
  e->n_requests = &s->n_requests;
  e->n_in_service = &s->n_in_service;
  e->n_abandoned = &s->n_abandoned;
  e->latency = &s->latency;
  e->next_cid = LOCAL_CID_BASE;
  e->refs = 1;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->idle, NULL);
  pthread_mutex_lock(&local_mu);
  e->next = local_eps;
  local_eps = e;
  pthread_mutex_unlock(&local_mu);
  s->local = e;
  return 0;
}

/* The server stops: no new client finds the entry, and the calls running
 * finish before the server's state goes. */
static void local_unregister(struct pc_rpc_server *s) {
  local_ep_t *e = s->local;
  if (!e) return;
  pthread_mutex_lock(&local_mu);
  for (local_ep_t **p = &local_eps; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  pthread_mutex_unlock(&local_mu);
  pthread_mutex_lock(&e->mu);
  e->stopped = 1;
  atomic_store(&e->stopping, 1); /* handlers running for in-process clients stop at a step */
  while (e->calls) pthread_cond_wait(&e->idle, &e->mu);
  e->n_requests = e->n_in_service = e->n_abandoned = NULL;
  pthread_mutex_unlock(&e->mu);
  pthread_mutex_lock(&local_mu);
  local_unref(e);
  pthread_mutex_unlock(&local_mu);
  s->local = NULL;
}

/* The endpoint serving host:port in this process that admits creds (a
 * reference, a connection id in *cid and the role in *role), or NULL. */
local_ep_t *rpc_local_find(const char *host, uint16_t port, const rpc_creds_t *creds,
                           uint64_t *cid, pc_rpc_role_t *role) {
  local_ep_t *found = NULL;
  pthread_mutex_lock(&local_mu);
  for (local_ep_t *e = local_eps; e && !found; e = e->next)
    if (e->port == port && strcmp(e->host, host) == 0 &&
        (*role = rpc_local_role(&e->creds, creds)) != PC_RPC_ROLE_NONE)
      found = e;
  if (found) found->refs++;
  pthread_mutex_unlock(&local_mu);
  if (found) {
    pthread_mutex_lock(&found->mu);
    *cid = found->next_cid++;
    pthread_mutex_unlock(&found->mu);
  }
  return found;
}

/* A client of e goes: its connection closes, then its reference. */
void rpc_local_release(local_ep_t *e, uint64_t cid) {
  pthread_mutex_lock(&e->mu);
  int serving = !e->stopped;
  if (serving) e->calls++; /* the server's state stays until on_close returns */
  pthread_mutex_unlock(&e->mu);
  if (serving && e->on_close) e->on_close(e->ctx, cid);
  if (serving) {
    pthread_mutex_lock(&e->mu);
    if (--e->calls == 0 && e->stopped) pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->mu);
  }
  pthread_mutex_lock(&local_mu);
  local_unref(e);
  pthread_mutex_unlock(&local_mu);
}

/* An in-process call is abandoned when the caller's own call is, or when the
 * server stops. */
typedef struct local_cancel {
  local_ep_t *e;
  pc_cancel_t outer;
} local_cancel_t;

static int local_abandoned(void *arg) {
  local_cancel_t *lc = arg;
  if (atomic_load_explicit(&lc->e->stopping, memory_order_relaxed)) return PC_CANCEL_STOPPING;
  return lc->outer.fn ? lc->outer.fn(lc->outer.ctx) : 0;
}

/* pc_rpc_call's in-process path: the handler on this thread, within the
 * caller's deadline and timeout_ms. *reached = 0 when the server had
 * stopped, so that nothing ran. */
pc_status_t rpc_local_call(local_ep_t *e, uint64_t cid, pc_rpc_role_t role,
                           const char *endpoint, uint8_t op, const void *body, size_t len,
                           uint32_t timeout_ms, pc_buf_t *reply, int *reached,
                           pc_error_t *err) {
  int library_op = op < 0x10; /* answered here, as handle_frame answers them */
  pthread_mutex_lock(&e->mu);
  int serving = !e->stopped;
  if (serving) {
    if (!library_op) {
      e->calls++;
      atomic_fetch_add(e->n_in_service, 1);
    }
    atomic_fetch_add(e->n_requests, 1);
  }
  pthread_mutex_unlock(&e->mu);
  *reached = serving;
  if (!serving) return pc_error_set(err, PC_UNAVAILABLE, "cannot reach %s: it stopped", endpoint);
  if (library_op) {
    if (op != PC_RPC_OP_PING) return pc_error_set(err, PC_INVALID, "unknown opcode 0x%02x", op);
    pc_error_clear(err);
    return PC_OK;
  }
  pc_buf_t scratch = {0};
  pc_buf_t *out = reply ? reply : &scratch;
  size_t before = out->len;
  pc_error_t herr;
  pc_error_clear(&herr);
  uint64_t outer = current_connection;
  pc_rpc_role_t outer_role = current_role;
  current_connection = cid;
  uint64_t deadline = timeout_ms ? pc_now_mono_ms() + timeout_ms : 0;
  uint64_t outer_deadline = pc_deadline_get();
  if (outer_deadline && (!deadline || outer_deadline < deadline)) deadline = outer_deadline;
  pc_deadline_set(deadline);
  local_cancel_t lc = {e, pc_cancel_set((pc_cancel_t){NULL, NULL})};
  pc_cancel_set((pc_cancel_t){local_abandoned, &lc});
  current_role = role;
  uint64_t started_ns = mono_ns();
  pc_status_t st = e->handler(e->ctx, op, len ? body : "", len, out, &herr);
  latency_record(e->latency, op, started_ns);
  pc_cancel_set(lc.outer);
  pc_deadline_set(outer_deadline);
  current_connection = outer;
  current_role = outer_role;
  if ((unsigned)st > PC_STATUS_MAX) {
    pc_error_set(&herr, PC_INTERNAL, "handler of op 0x%02x returned unknown status %d", op,
                 (int)st);
    st = PC_INTERNAL;
  } else if (st == PC_OK && out->len - before > e->max_frame - PC_RPC_HEADER) {
    pc_error_set(&herr, PC_INTERNAL, "reply of %zu bytes to op 0x%02x exceeds the frame limit "
                 "of %u bytes", out->len - before, op, e->max_frame);
    st = PC_INTERNAL;
  }
  pthread_mutex_lock(&e->mu);
  atomic_fetch_sub(e->n_in_service, 1);
  if (deadline_passed(deadline) || local_abandoned(&lc)) atomic_fetch_add(e->n_abandoned, 1);
  if (--e->calls == 0 && e->stopped) pthread_cond_broadcast(&e->idle);
  pthread_mutex_unlock(&e->mu);
  pc_buf_free(&scratch);
  if (st == PC_OK) {
    pc_error_clear(err);
    return PC_OK;
  }
  out->len = before; /* a failed call adds nothing to reply */
  return pc_error_set(err, st, "%s", herr.text[0] ? herr.text : pc_status_name(st));
}

static void conn_hold(conn_t *c) { c->refs++; }

static void conn_release(conn_t *c) {
  if (--c->refs == 0) free(c);
}

static size_t conn_outlen(conn_t *c) {
  return c->bev ? evbuffer_get_length(bufferevent_get_output(c->bev)) : 0;
}

static void starved_remove(struct pc_rpc_server *s, conn_t *c) {
  if (!c->starved) return;
  if (c->sprev) c->sprev->snext = c->snext; else s->starved_head = c->snext;
  if (c->snext) c->snext->sprev = c->sprev; else s->starved_tail = c->sprev;
  c->sprev = c->snext = NULL;
  c->starved = 0;
  s->nstarved--;
}

static void starved_add(struct pc_rpc_server *s, conn_t *c) {
  if (c->starved) return;
  c->starved = 1;
  c->snext = NULL;
  c->sprev = s->starved_tail;
  if (s->starved_tail) s->starved_tail->snext = c; else s->starved_head = c;
  s->starved_tail = c;
  s->nstarved++;
}

static void unauth_remove(struct pc_rpc_server *s, conn_t *c) {
  if (!c->unauthed_listed) return;
  if (c->uprev) c->uprev->unext = c->unext; else s->unauth_head = c->unext;
  if (c->unext) c->unext->uprev = c->uprev; else s->unauth_tail = c->uprev;
  c->uprev = c->unext = NULL;
  c->unauthed_listed = 0;
  s->nunauth--;
}

static void unauth_add(struct pc_rpc_server *s, conn_t *c) {
  c->unauthed_listed = 1;
  c->uprev = s->unauth_tail;
  if (s->unauth_tail) s->unauth_tail->unext = c; else s->unauth_head = c;
  s->unauth_tail = c;
  s->nunauth++;
}

static void check_drained(struct pc_rpc_server *s) {
  if (s->stopping && !s->conns && s->in_service == 0) event_base_loopbreak(s->base);
}

/* ---- request and reply memory -------------------------------------------
 * Request bytes (frames being received and the bodies of requests in
 * service) of authenticated connections share request_memory: a frame is
 * admitted when its header arrives, if it fits or nothing else holds any
 * (so one frame of max_frame always can be), and held until its request
 * comes back; a connection whose frame does not fit waits, unread, on the
 * starved list. Frames up to SMALL_FRAME have a request_memory of their
 * own, so that large frames held by slow or hostile senders cannot starve
 * the small requests of everyone else; frames before authentication are at
 * most PC_RPC_PREAUTH_MAX_FRAME bytes and answered at once. Unread replies
 * share reply_memory, counted by a callback on every output buffer. */

static int request_charge(struct pc_rpc_server *s, size_t n) {
  size_t *used = n <= SMALL_FRAME ? &s->small_used : &s->request_used;
  if (*used && *used + n > s->request_memory) return 0;
  *used += n;
  atomic_store(&s->g_request_used, s->request_used + s->small_used);
  return 1;
}

static void request_release(struct pc_rpc_server *s, size_t n) {
  if (!n) return;
  *(n <= SMALL_FRAME ? &s->small_used : &s->request_used) -= n;
  atomic_store(&s->g_request_used, s->request_used + s->small_used);
  if (s->starved_head) event_active(s->done_ev, EV_READ, 0); /* done_cb resumes them */
}

static void out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
  conn_t *c = arg;
  (void)buf;
  c->out_len = c->out_len + info->n_added - info->n_deleted;
  c->s->reply_used = c->s->reply_used + info->n_added - info->n_deleted;
  atomic_store(&c->s->g_reply_used, c->s->reply_used);
}

/* Closes the socket at once and drops the connection's own reference; the
 * struct lives on while jobs still refer to it. */
static void conn_close(conn_t *c) {
  if (c->closed) return;
  struct pc_rpc_server *s = c->s;
  c->closed = 1;
  atomic_store(&c->gone, CLOSED); /* its requests in service are abandoned */
  if (s->on_close) s->on_close(s->ctx, c->cid);
  evbuffer_remove_cb(bufferevent_get_output(c->bev), out_cb, c);
  s->reply_used -= c->out_len;
  atomic_store(&s->g_reply_used, s->reply_used);
  c->out_len = 0;
  bufferevent_free(c->bev);
  c->bev = NULL;
  event_free(c->frame_ev);
  event_free(c->idle_ev);
  c->frame_ev = c->idle_ev = NULL;
  starved_remove(s, c);
  unauth_remove(s, c);
  rpc_peers_remove(s->peers, &c->peer_key);
  request_release(s, c->frame_charge);
  c->frame_charge = 0;
  if (c->prev) c->prev->next = c->next; else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  atomic_fetch_sub(&s->n_open, 1);
  conn_release(c);
  check_drained(s);
}

/* Makes room for need more reply bytes: past reply_memory, the connections
 * holding the most unread bytes are closed until it fits. Returns 0 when c
 * itself had to go (the reply is then dropped). */
static int reply_room(conn_t *c, size_t need) {
  struct pc_rpc_server *s = c->s;
  while (s->reply_used + need > s->reply_memory) {
    conn_t *victim = c;
    for (conn_t *x = s->conns; x; x = x->next)
      if (x->out_len > victim->out_len) victim = x;
    atomic_fetch_add(&s->n_refused, 1);
    pc_log_limited(&s->loglim, PC_LOG_WARN,
                   "%s: closing %s: %zu bytes of replies unread while the server holds %zu "
                   "(limits.reply_memory_mb)",
                   s->name, victim->peer, victim->out_len, s->reply_used);
    conn_close(victim);
    if (victim == c) return 0;
  }
  return 1;
}

static void conn_pause(conn_t *c) {
  if (c->reading) {
    bufferevent_disable(c->bev, EV_READ);
    c->reading = 0;
  }
  if (!c->closing) evtimer_del(c->frame_ev);
}

/* The last reply is out: send FIN and discard input until the peer closes
 * too (or the linger timer fires), so the kernel does not answer unread
 * input with a reset that could destroy that reply before the peer reads it. */
static void conn_linger(conn_t *c) {
  if (c->eof) {
    conn_close(c);
    return;
  }
  c->shut = 1;
  shutdown(bufferevent_getfd(c->bev), SHUT_WR);
  bufferevent_enable(c->bev, EV_READ);
}

/* Stops serving, forgets unread input, flushes what is queued and then
 * closes (all within LINGER_MS). */
static void conn_close_after_flush(conn_t *c) {
  if (c->closed || c->closing) return;
  conn_pause(c);
  c->closing = 1;
  struct evbuffer *in = bufferevent_get_input(c->bev);
  evbuffer_drain(in, evbuffer_get_length(in));
  c->in_seen = 0;
  request_release(c->s, c->frame_charge);
  c->frame_charge = 0;
  evtimer_del(c->idle_ev);
  struct timeval tv = rpc_ms_tv(LINGER_MS);
  evtimer_add(c->frame_ev, &tv);
  if (conn_outlen(c) == 0) conn_linger(c);
}

/* Queues one reply frame; closes the connection if memory runs out. */
static void conn_send(conn_t *c, uint8_t op, pc_status_t st, uint64_t id, const void *body,
                      size_t len) {
  if (c->closed || !reply_room(c, HDR + len)) return;
  unsigned char h[HDR];
  size_t hl = rpc_put_header(h, c->version, len, op, (uint8_t)st, id, 0);
  struct evbuffer *out = bufferevent_get_output(c->bev);
  if (evbuffer_add(out, h, hl) != 0 || (len && evbuffer_add(out, body, len) != 0)) {
    pc_log(PC_LOG_ERROR, "%s: out of memory replying to %s; closing", c->s->name, c->peer);
    conn_close(c);
    return;
  }
  atomic_fetch_add(&c->s->n_bytes_out, hl + len);
}

static void conn_send_error(conn_t *c, uint8_t op, pc_status_t st, uint64_t id, const char *fmt,
                            ...) __attribute__((format(printf, 5, 6)));
static void conn_send_error(conn_t *c, uint8_t op, pc_status_t st, uint64_t id, const char *fmt,
                            ...) {
  char msg[PC_ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
  conn_send(c, (uint8_t)(op | PC_RPC_OP_REPLY), st, id, msg, (size_t)n);
}

/* A protocol fault: log it, count it, answer with the fault (status st) and close. */
static void conn_fault_status(conn_t *c, uint8_t op, uint64_t id, pc_status_t st,
                              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void conn_fault_status(conn_t *c, uint8_t op, uint64_t id, pc_status_t st,
                              const char *fmt, ...) {
  char msg[PC_ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  atomic_fetch_add(st == PC_DENIED ? &c->s->n_auth_failures : &c->s->n_proto_errors, 1);
  pc_log_limited(&c->s->loglim, PC_LOG_WARN,
                 "%s: %s from %s: %s; closing the connection", c->s->name,
                 st == PC_DENIED ? "authentication failed" : "protocol error", c->peer, msg);
  conn_send_error(c, op, st, id, "%s", msg);
  conn_close_after_flush(c);
}

#define conn_fault(c, op, id, ...) conn_fault_status(c, op, id, PC_INVALID, __VA_ARGS__)

static int run_job(struct pc_rpc_server *s, job_t *j, int on_io_thread);

/* Takes body and the connection's charge for it. */
static void dispatch(conn_t *c, const pc_rpc_frame_t *f, char *body, size_t blen) {
  struct pc_rpc_server *s = c->s;
  job_t *j = calloc(1, sizeof *j);
  if (!j) {
    free(body);
    request_release(s, c->frame_charge);
    c->frame_charge = 0;
    conn_send_error(c, f->op, PC_NOMEM, f->id, "out of memory");
    return;
  }
  j->conn = c;
  j->cid = c->cid;
  j->role = c->role;
  j->charge = c->frame_charge;
  c->frame_charge = 0;
  j->op = f->op;
  j->version = f->version;
  j->id = f->id;
  j->deadline_ms = f->budget_ms ? pc_now_mono_ms() + f->budget_ms : 0;
  j->arrived_ns = mono_ns();
  j->body = body;
  j->blen = blen;
  conn_hold(c);
  c->inflight++;
  s->in_service++;
  atomic_fetch_add(&s->n_in_service, 1);
  /* an op that runs inline is served here, with no hand-off to a worker and
   * back, unless its handler would have to wait (pc_nowait_refuse): then it
   * goes to a worker like any other */
  if (s->runs_inline && s->runs_inline(f->op)) {
    if (run_job(s, j, 1)) {
      atomic_fetch_add(&s->n_inline, 1);
      return;
    }
    atomic_fetch_add(&s->n_deferred, 1);
  }
  pthread_mutex_lock(&s->qmu);
  if (s->qtail) s->qtail->next = j; else s->qhead = j;
  s->qtail = j;
  pthread_cond_signal(&s->qcv);
  pthread_mutex_unlock(&s->qmu);
}

static void idle_arm(conn_t *c);

/* Every configured gate is through: the connection is served from now on. */
static void conn_authenticated(conn_t *c) {
  c->authed = 1;
  c->role = rpc_role_min(c->tls_role, c->secret_role);
  unauth_remove(c->s, c);
  idle_arm(c);
}

/* HELLO: without a secret, an empty answer; with one, the server's nonce. */
static void serve_hello(conn_t *c, uint64_t id, const char *body, size_t blen) {
  struct pc_rpc_server *s = c->s;
  if (!rpc_creds_has_secret(&s->creds)) {
    conn_send(c, PC_RPC_OP_HELLO | PC_RPC_OP_REPLY, PC_OK, id, NULL, 0);
    return;
  }
  if (c->authed) {
    conn_send_error(c, PC_RPC_OP_HELLO, PC_INVALID, id, "already authenticated");
    return;
  }
  if (blen != PC_RPC_NONCE || c->hello_seen) {
    conn_fault_status(c, PC_RPC_OP_HELLO, id, PC_DENIED,
                      blen != PC_RPC_NONCE ? "HELLO must carry a %d-byte nonce"
                                           : "HELLO sent twice (%d-byte nonce)",
                      PC_RPC_NONCE);
    return;
  }
  if (rpc_random(c->snonce, sizeof c->snonce) != 0) {
    conn_fault_status(c, PC_RPC_OP_HELLO, id, PC_INTERNAL, "no random bytes for a nonce");
    return;
  }
  memcpy(c->cnonce, body, PC_RPC_NONCE);
  c->hello_seen = 1;
  conn_send(c, PC_RPC_OP_HELLO | PC_RPC_OP_REPLY, PC_OK, id, c->snonce, PC_RPC_NONCE);
}

/* AUTH: the client's proof of the secret; one attempt per connection. */
static void serve_auth(conn_t *c, uint64_t id, const char *body, size_t blen) {
  struct pc_rpc_server *s = c->s;
  if (!rpc_creds_has_secret(&s->creds) || c->authed) {
    conn_send_error(c, PC_RPC_OP_AUTH, PC_INVALID, id,
                    c->authed ? "already authenticated" : "this server has no secret");
    return;
  }
  if (!c->hello_seen) {
    conn_fault_status(c, PC_RPC_OP_AUTH, id, PC_DENIED, "AUTH before HELLO");
    return;
  }
  unsigned char proof[PC_RPC_MAC];
  pc_rpc_role_t role =
      rpc_auth_check(&s->creds, (const unsigned char *)body, blen, c->snonce, c->cnonce, proof);
  c->hello_seen = 0;
  if (role == PC_RPC_ROLE_NONE) {
    conn_fault_status(c, PC_RPC_OP_AUTH, id, PC_DENIED, "wrong secret");
    return;
  }
  c->secret_role = role;
  conn_send(c, PC_RPC_OP_AUTH | PC_RPC_OP_REPLY, PC_OK, id, proof, sizeof proof);
  if (!c->handshaking) conn_authenticated(c);
}

/* One complete request frame; takes body and the connection's charge for it. */
static void handle_frame(conn_t *c, const pc_rpc_frame_t *f, char *body, size_t blen) {
  struct pc_rpc_server *s = c->s;
  uint8_t op = f->op;
  uint64_t id = f->id;
  atomic_fetch_add(&s->n_requests, 1);
  if (op == PC_RPC_OP_HELLO || op == PC_RPC_OP_AUTH || op == PC_RPC_OP_PING ||
      !c->authed || op < 0x10 || op >= 0x80) {
    /* answered here, on the loop thread: the frame's memory goes at once */
    request_release(s, c->frame_charge);
    c->frame_charge = 0;
  }
  if (op == PC_RPC_OP_HELLO) {
    serve_hello(c, id, body, blen);
  } else if (op == PC_RPC_OP_AUTH) {
    serve_auth(c, id, body, blen);
  } else if (!c->authed) {
    conn_fault_status(c, op, id, PC_DENIED,
                      AUTH_REQUIRED ": the first frames must be HELLO and AUTH");
  } else if (op == PC_RPC_OP_PING) {
    conn_send(c, op | PC_RPC_OP_REPLY, PC_OK, id, NULL, 0);
  } else if (op < 0x10 || op >= 0x80) {
    atomic_fetch_add(&s->n_proto_errors, 1);
    pc_log_limited(&s->loglim, PC_LOG_WARN, "%s: protocol error from %s: unknown opcode 0x%02x",
                   s->name, c->peer, op);
    conn_send_error(c, op, PC_INVALID, id, "unknown opcode 0x%02x", op);
  } else {
    dispatch(c, f, body, blen);
    return;
  }
  free(body);
}

/* Parses and serves the complete frames in the input, as far as the limits
 * allow; then (re)arms reading and the frame timer. The caller holds a
 * reference: the connection may be closed inside. */
static void conn_process_held(conn_t *c) {
  struct pc_rpc_server *s = c->s;
  if (c->closed || c->closing || c->handshaking) return;
  struct evbuffer *in = bufferevent_get_input(c->bev);
  for (;;) {
    if (s->stopping || c->inflight >= s->max_inflight || conn_outlen(c) > OUT_HIGH) {
      conn_pause(c);
      return;
    }
    if (s->in_service >= s->qcap) {
      conn_pause(c);
      starved_add(s, c);
      return;
    }
    size_t avail = evbuffer_get_length(in);
    if (avail < PREFIX) break;
    unsigned char h[HDR];
    size_t got = avail < HDR ? avail : HDR;
    evbuffer_copyout(in, h, got);
    uint32_t limit = c->authed ? s->max_frame : PC_RPC_PREAUTH_MAX_FRAME;
    pc_rpc_frame_t f;
    pc_rpc_frame_state_t fs = pc_rpc_frame_read(h, avail, limit, 0, &f);
    if (got > 4) c->version = f.known ? f.version : PC_RPC_VERSION_1; /* every version's start */
    if (fs == PC_RPC_FRAME_BAD) {
      conn_fault(c, f.op, f.id, "%s%s", f.fault, c->authed ? "" : " before authentication");
      return;
    }
    if (!c->frame_charge && c->authed) {
      if (!request_charge(s, f.len)) { /* wait, unread, until requests come back */
        conn_pause(c);
        starved_add(s, c);
        return;
      }
      c->frame_charge = f.len;
    }
    if (fs == PC_RPC_FRAME_MORE) break;
    /* a complete frame */
    evbuffer_drain(in, f.hlen);
    size_t blen = f.len - (f.hlen - PREFIX);
    char *body = NULL;
    if (blen) {
      body = malloc(blen);
      if (!body) {
        pc_log(PC_LOG_ERROR, "%s: out of memory reading %zu bytes from %s; closing", s->name,
               blen, c->peer);
        conn_close(c);
        return;
      }
      evbuffer_remove(in, body, blen);
    }
    c->in_seen = evbuffer_get_length(in);
    evtimer_del(c->frame_ev);
    handle_frame(c, &f, body, blen);
    if (c->closed || c->closing) return;
  }
  size_t avail = evbuffer_get_length(in);
  c->in_seen = avail;
  if (c->eof) {
    if (c->inflight == 0) {
      if (avail) {
        atomic_fetch_add(&s->n_proto_errors, 1);
        pc_log_limited(&s->loglim, PC_LOG_WARN,
                       "%s: protocol error from %s: connection closed inside a frame (%zu bytes "
                       "of it received)",
                       s->name, c->peer, avail);
      }
      conn_close_after_flush(c);
    }
    return;
  }
  if (!c->reading) {
    bufferevent_enable(c->bev, EV_READ);
    c->reading = 1;
  }
  if (avail == 0) {
    evtimer_del(c->frame_ev);
  } else if (!evtimer_pending(c->frame_ev, NULL)) {
    struct timeval tv = rpc_ms_tv(s->frame_timeout_ms);
    evtimer_add(c->frame_ev, &tv);
  }
}

/* After output drained: a closing connection lingers; a stopping server
 * closes connections with nothing left to send. */
static void conn_after_io(conn_t *c) {
  if (c->closed || conn_outlen(c) != 0) return;
  if (c->s->stopping && (c->closing || c->inflight == 0))
    conn_close(c);
  else if (c->closing && !c->shut)
    conn_linger(c);
}

/* (Re)arms the idle timer; before authentication the deadline set at accept stands. */
static void idle_arm(conn_t *c) {
  if (c->closed || c->closing || !c->authed) return;
  struct timeval tv = rpc_ms_tv(c->s->idle_timeout_ms);
  evtimer_add(c->idle_ev, &tv);
}

static void conn_read_cb(struct bufferevent *bev, void *arg) {
  conn_t *c = arg;
  (void)bev;
  conn_hold(c);
  struct evbuffer *in = bufferevent_get_input(c->bev);
  size_t avail = evbuffer_get_length(in);
  if (avail > c->in_seen) atomic_fetch_add(&c->s->n_bytes_in, avail - c->in_seen);
  c->in_seen = avail;
  if (c->closing) { /* lingering: discard */
    evbuffer_drain(in, avail);
    c->in_seen = 0;
  } else {
    idle_arm(c);
    conn_process_held(c);
  }
  conn_release(c);
}

static void conn_write_cb(struct bufferevent *bev, void *arg) {
  conn_t *c = arg;
  (void)bev;
  conn_hold(c);
  idle_arm(c);
  conn_after_io(c);
  if (!c->closed && !c->reading) conn_process_held(c); /* resumes after OUT_HIGH */
  conn_release(c);
}

/* The TLS handshake is done: the peer's certificate name decides its role. */
static void conn_handshake_done(conn_t *c) {
  struct pc_rpc_server *s = c->s;
  c->handshaking = 0;
  char cn[256];
  if (pc_tls_peer_name(c->bev, cn, sizeof cn) != 0) {
    conn_fault_status(c, PC_RPC_OP_HELLO, 0, PC_DENIED, "a client certificate without a usable "
                      "common name");
    return;
  }
  c->tls_role = pc_tls_role_of(s->creds.tls, cn);
  if (c->tls_role == PC_RPC_ROLE_NONE) {
    conn_fault_status(c, PC_RPC_OP_HELLO, 0, PC_DENIED, "certificate name '%.64s' is not allowed "
                      "(tls.allowed_cn)", cn);
    return;
  }
  pc_log(PC_LOG_DEBUG, "%s: %s is '%s' (%s)", s->name, c->peer, cn,
         c->tls_role == PC_RPC_ROLE_SYSTEM ? "system" : "data");
  if (!rpc_creds_has_secret(&s->creds) || c->secret_role != PC_RPC_ROLE_NONE)
    conn_authenticated(c);
  conn_process_held(c);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg) {
  conn_t *c = arg;
  struct pc_rpc_server *s = c->s;
  (void)bev;
  conn_hold(c);
  if ((what & BEV_EVENT_CONNECTED) && c->handshaking) {
    conn_handshake_done(c);
  } else if (c->handshaking && (what & (BEV_EVENT_ERROR | BEV_EVENT_EOF)) && !c->closing) {
    char why[400];
    pc_tls_failure(c->bev, why, sizeof why);
    atomic_fetch_add(&s->n_auth_failures, 1);
    pc_log_limited(&s->loglim, PC_LOG_WARN, "%s: %s: %s", s->name, c->peer, why);
    /* OpenSSL wrote its alert to the socket: close only after the peer had
     * time to read it, since closing with its unread bytes would reset the
     * connection and could destroy the alert that tells it why */
    c->closing = c->shut = 1;
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    struct timeval tv = rpc_ms_tv(LINGER_MS);
    evtimer_add(c->frame_ev, &tv);
    evtimer_del(c->idle_ev);
  } else if (what & BEV_EVENT_TIMEOUT) {
    atomic_fetch_add(&s->n_refused, 1);
    pc_log_limited(&s->loglim, PC_LOG_WARN,
                   "%s: %s read none of its replies for %u ms (%zu bytes unread); closing "
                   "(limits.reply_timeout_ms)",
                   s->name, c->peer, s->reply_timeout_ms, c->out_len);
    conn_close(c);
  } else if (c->handshaking) {
    /* lingering after a failed handshake: the timer closes it */
  } else if (what & BEV_EVENT_ERROR) {
    int e = EVUTIL_SOCKET_ERROR();
    char why[400];
    if (s->creds.tls && pc_tls_failure(c->bev, why, sizeof why))
      pc_log_limited(&s->loglim, PC_LOG_WARN, "%s: connection from %s failed: %s", s->name,
                     c->peer, why);
    else if (!c->closing && e != ECONNRESET && e != EPIPE)
      pc_log_limited(&s->loglim, PC_LOG_WARN, "%s: connection from %s failed: %s", s->name,
                     c->peer, evutil_socket_error_to_string(e));
    conn_close(c);
  } else if (what & BEV_EVENT_EOF) {
    /* The peer will send nothing more: serve what is complete, then close.
     * A peer that closed may not read what it asked for either (a client
     * that gave up, a process that died; a half-close looks the same), so
     * the requests in service are abandoned: long ones stop at a step,
     * quick ones answer as ever. */
    atomic_store(&c->gone, PEER_DONE);
    size_t avail = evbuffer_get_length(bufferevent_get_input(c->bev));
    if (avail > c->in_seen) atomic_fetch_add(&s->n_bytes_in, avail - c->in_seen);
    c->in_seen = avail;
    c->eof = 1;
    c->reading = 0;
    if (!c->closing)
      conn_process_held(c);
    else if (c->shut)
      conn_close(c);
    else
      conn_after_io(c); /* a half-closed peer may still read its error reply */
  }
  conn_release(c);
}

static void conn_frame_timeout_cb(evutil_socket_t fd, short what, void *arg) {
  conn_t *c = arg;
  (void)fd;
  (void)what;
  conn_hold(c);
  if (c->closing) {
    pc_log(PC_LOG_DEBUG, "%s: %s did not read its last reply; closing", c->s->name, c->peer);
  } else {
    atomic_fetch_add(&c->s->n_proto_errors, 1);
    pc_log_limited(&c->s->loglim, PC_LOG_WARN,
                   "%s: protocol error from %s: frame not completed within %u ms; closing the "
                   "connection",
                   c->s->name, c->peer, c->s->frame_timeout_ms);
  }
  conn_close(c);
  conn_release(c);
}

static void conn_idle_cb(evutil_socket_t fd, short what, void *arg) {
  conn_t *c = arg;
  struct pc_rpc_server *s = c->s;
  (void)fd;
  (void)what;
  conn_hold(c);
  if (!c->authed && !c->closing) {
    atomic_fetch_add(&s->n_auth_failures, 1);
    pc_log_limited(&s->loglim, PC_LOG_WARN,
                   "%s: %s did not authenticate within %u ms; closing (limits.auth_timeout_ms)",
                   s->name, c->peer, s->auth_timeout_ms);
    conn_close(c);
  } else if (c->inflight > 0 || conn_outlen(c) > 0) {
    idle_arm(c);
  } else {
    pc_log(PC_LOG_DEBUG, "%s: closing %s after %u ms idle", s->name, c->peer,
           s->idle_timeout_ms);
    conn_close(c);
  }
  conn_release(c);
}

/* Closes the oldest connection that has not authenticated, to make room;
 * 0 when there is none. */
static int evict_unauthenticated(struct pc_rpc_server *s, const char *why) {
  conn_t *c = s->unauth_head;
  if (!c) return 0;
  atomic_fetch_add(&s->n_refused, 1);
  pc_log_limited(&s->loglim, PC_LOG_WARN,
                 "%s: closing %s, not authenticated after %llu ms, to make room (%s)", s->name,
                 c->peer, (unsigned long long)(pc_now_mono_ms() - c->accepted_ms), why);
  conn_close(c);
  return 1;
}

static void refuse(struct pc_rpc_server *s, evutil_socket_t fd, const char *peer,
                   const char *why, uint32_t n) {
  atomic_fetch_add(&s->n_refused, 1);
  pc_log_limited(&s->loglim, PC_LOG_WARN, "%s: refusing %s: %u connections open (%s)", s->name,
                 peer, n, why);
  evutil_closesocket(fd);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg) {
  struct pc_rpc_server *s = arg;
  (void)l;
  char peer[80];
  format_sockaddr(peer, sizeof peer, sa, (socklen_t)salen);
  atomic_fetch_add(&s->n_accepted, 1);
  if (s->stopping) {
    evutil_closesocket(fd);
    return;
  }
  rpc_peer_key_t key = rpc_peer_key(sa);
  uint32_t same = rpc_peers_count(s->peers, &key);
  if (same >= s->max_per_peer) {
    refuse(s, fd, peer, "from this address: limits.max_connections_per_peer", same);
    return;
  }
  if (atomic_load(&s->n_open) >= s->max_connections &&
      !evict_unauthenticated(s, "limits.max_connections")) {
    refuse(s, fd, peer, "limits.max_connections", s->max_connections);
    return;
  }
  if (s->need_auth && s->nunauth >= s->max_unauth)
    evict_unauthenticated(s, "limits.max_unauthenticated");
  rpc_set_nodelay(fd);
  conn_t *c = calloc(1, sizeof *c);
  struct bufferevent *bev = NULL;
  if (c && s->creds.tls)
    bev = pc_tls_server_bev(s->creds.tls, s->base, fd);
  else if (c)
    bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
  struct event *fe = bev ? evtimer_new(s->base, conn_frame_timeout_cb, c) : NULL;
  struct event *ie = fe ? evtimer_new(s->base, conn_idle_cb, c) : NULL;
  if (!ie || rpc_peers_add(s->peers, &key) != 0) {
    pc_log(PC_LOG_ERROR, "%s: out of memory accepting %s", s->name, peer);
    if (ie) event_free(ie);
    if (fe) event_free(fe);
    if (bev) bufferevent_free(bev); else evutil_closesocket(fd);
    free(c);
    return;
  }
  c->s = s;
  c->cid = ++s->next_cid;
  c->bev = bev;
  c->frame_ev = fe;
  c->idle_ev = ie;
  c->refs = 1;
  c->version = PC_RPC_VERSION_1;
  c->peer_key = key;
  c->accepted_ms = pc_now_mono_ms();
  c->handshaking = s->creds.tls != NULL;
  c->tls_role = PC_RPC_ROLE_SYSTEM; /* until a certificate says otherwise */
  c->secret_role = rpc_creds_has_secret(&s->creds) ? PC_RPC_ROLE_NONE : PC_RPC_ROLE_SYSTEM;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  atomic_fetch_add(&s->n_open, 1);
  evbuffer_add_cb(bufferevent_get_output(bev), out_cb, c);
  struct timeval wtv = rpc_ms_tv(s->reply_timeout_ms);
  bufferevent_set_timeouts(bev, NULL, &wtv); /* replies that make no progress */
  bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
  bufferevent_enable(bev, EV_READ);
  c->reading = 1;
  if (s->need_auth) {
    unauth_add(s, c);
    struct timeval tv = rpc_ms_tv(s->auth_timeout_ms);
    evtimer_add(c->idle_ev, &tv);
  } else {
    conn_authenticated(c);
  }
  pc_log(PC_LOG_DEBUG, "%s: connection from %s", s->name, peer);
}

/* pc_rpc_server_test_adopt's hand-over to the loop thread. */
typedef struct adopt {
  struct pc_rpc_server *s;
  evutil_socket_t fd;
} adopt_t;

static void adopt_cb(evutil_socket_t fd, short what, void *arg) {
  adopt_t *a = arg;
  (void)fd;
  (void)what;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  accept_cb(NULL, a->fd, (struct sockaddr *)&sa, (int)sizeof sa, a->s);
  free(a);
}

int pc_rpc_server_test_adopt(pc_rpc_server_t *s, int fd) {
  adopt_t *a = malloc(sizeof *a);
  struct timeval now = {0, 0};
  if (!a || evutil_make_socket_nonblocking(fd) != 0) {
    free(a);
    evutil_closesocket(fd);
    return -1;
  }
  a->s = s;
  a->fd = fd;
  if (event_base_once(s->base, -1, EV_TIMEOUT, adopt_cb, a, &now) != 0) {
    free(a);
    evutil_closesocket(fd);
    return -1;
  }
  return 0;
}

static void accept_error_cb(struct evconnlistener *l, void *arg) {
  struct pc_rpc_server *s = arg;
  int e = EVUTIL_SOCKET_ERROR();
  pc_log_limited(&s->loglim, PC_LOG_WARN, "%s: accept on %s failed: %s; pausing accepts for %d ms",
                 s->name, s->endpoint, evutil_socket_error_to_string(e), ACCEPT_RETRY_MS);
  evconnlistener_disable(l);
  struct timeval tv = rpc_ms_tv(ACCEPT_RETRY_MS);
  evtimer_add(s->accept_retry_ev, &tv);
}

static void accept_retry_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_server *s = arg;
  (void)fd;
  (void)what;
  if (s->listener) evconnlistener_enable(s->listener);
}

/* Replies came back from the workers. */
static void done_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_server *s = arg;
  (void)fd;
  (void)what;
  pthread_mutex_lock(&s->cmu);
  job_t *list = s->chead;
  s->chead = s->ctail = NULL;
  pthread_mutex_unlock(&s->cmu);
  if (list) {
    size_t taken = 0;
    for (job_t *j = list; j; j = j->next) taken += j->reply.len;
    if (atomic_fetch_sub(&s->pending_replies, taken) >= s->reply_memory) {
      pthread_mutex_lock(&s->qmu); /* workers that waited for it to drain go on */
      pthread_cond_broadcast(&s->qcv);
      pthread_mutex_unlock(&s->qmu);
    }
  }
  while (list) {
    job_t *j = list;
    list = j->next;
    conn_t *c = j->conn;
    c->inflight--;
    s->in_service--;
    atomic_fetch_sub(&s->n_in_service, 1);
    request_release(s, j->charge);
    if (!c->closed && reply_room(c, HDR + j->reply.len)) {
      unsigned char h[HDR];
      size_t hl =
          rpc_put_header(h, j->version, j->reply.len, j->op | PC_RPC_OP_REPLY, (uint8_t)j->status,
                     j->id, 0);
      struct evbuffer *out = bufferevent_get_output(c->bev);
      int rc = evbuffer_add(out, h, hl);
      if (rc == 0 && j->reply.len && j->reply.len <= COPY_MAX) {
        rc = evbuffer_add(out, j->reply.p, j->reply.len);
      } else if (rc == 0 && j->reply.len) {
        rc = evbuffer_add_reference(out, j->reply.p, j->reply.len, rpc_free_reference, NULL);
        if (rc == 0) j->reply.p = NULL; /* the evbuffer owns it now */
      }
      if (rc != 0) {
        pc_log(PC_LOG_ERROR, "%s: out of memory replying to %s; closing", s->name, c->peer);
        conn_close(c);
      } else {
        atomic_fetch_add(&s->n_bytes_out, hl + j->reply.len);
        conn_process_held(c);
      }
    }
    pc_buf_free(&j->reply);
    free(j);
    conn_release(c);
  }
  /* each starved connection gets one try; one that still cannot go on
   * queues itself again at the tail */
  for (uint32_t n = s->nstarved; n > 0 && s->starved_head && s->in_service < s->qcap; n--) {
    conn_t *c = s->starved_head;
    starved_remove(s, c);
    conn_hold(c);
    conn_process_held(c);
    conn_release(c);
  }
  check_drained(s);
}

/* The stop's grace is over: the requests still in service are cancelled
 * (their handlers stop at their next step), and their replies, which say so,
 * get CANCEL_FLUSH_MS to go out before every connection closes. */
static void grace_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_server *s = arg;
  (void)fd;
  (void)what;
  if (!atomic_load(&s->cancel_all)) {
    pc_log(PC_LOG_WARN, "%s: stopping: %u requests still in service after %d ms; cancelling them",
           s->name, s->in_service, STOP_GRACE_MS);
    atomic_store(&s->cancel_all, 1);
    struct timeval tv = rpc_ms_tv(CANCEL_FLUSH_MS);
    evtimer_add(s->grace_ev, &tv);
    return;
  }
  if (s->in_service)
    pc_log(PC_LOG_WARN, "%s: stopping: %u requests still in service %d ms after they were "
           "cancelled; closing every connection", s->name, s->in_service, CANCEL_FLUSH_MS);
  while (s->conns) conn_close(s->conns);
  event_base_loopbreak(s->base);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_server *s = arg;
  (void)fd;
  (void)what;
  s->stopping = 1;
  if (s->listener) {
    evconnlistener_free(s->listener);
    s->listener = NULL;
  }
  evtimer_del(s->accept_retry_ev);
  while (s->starved_head) starved_remove(s, s->starved_head);
  conn_t *c = s->conns;
  while (c) {
    conn_t *next = c->next;
    conn_hold(c);
    if (!c->closing) conn_pause(c);
    conn_after_io(c);
    conn_release(c);
    c = next;
  }
  struct timeval tv = rpc_ms_tv(STOP_GRACE_MS);
  evtimer_add(s->grace_ev, &tv);
  check_drained(s);
}

static void *loop_main(void *arg) {
  struct pc_rpc_server *s = arg;
  event_base_loop(s->base, EVLOOP_NO_EXIT_ON_EMPTY);
  return NULL;
}

/* Whether nobody waits for job j any more: its connection closed, or the
 * server's stop gave up waiting. Read by the job's handler thread (through
 * base/deadline.h's pc_call_check) while the I/O thread may set either. */
static int job_abandoned(void *arg) {
  const job_t *j = arg;
  if (atomic_load_explicit(&j->conn->s->cancel_all, memory_order_relaxed))
    return PC_CANCEL_STOPPING;
  return atomic_load_explicit(&j->conn->gone, memory_order_relaxed) ? PC_CANCEL_GONE : 0;
}

/* Runs job j's handler on the calling thread (a worker, or the I/O thread for
 * ops that run inline), within the request's deadline and with its
 * abandonment visible (base/deadline.h), then hands the reply to the I/O
 * thread through the completion list and returns 1. A request that is past
 * its deadline before it starts, or whose connection closed, is not run. On
 * the I/O thread the handler may not wait (pc_nowait_begin): if it would
 * have, its reply is dropped, j is left as it came (its body kept) and 0
 * returned, for a worker to run it again. */
static int run_job(struct pc_rpc_server *s, job_t *j, int on_io_thread) {
  pc_error_t err;
  pc_error_clear(&err);
  pc_status_t st;
  if (atomic_load(&j->conn->gone) == CLOSED || atomic_load(&s->cancel_all)) {
    st = pc_error_set(&err, PC_TIMEOUT, "request abandoned before it ran (its connection "
                      "closed, or the server is stopping)");
  } else if (deadline_passed(j->deadline_ms)) {
    st = pc_error_set(&err, PC_TIMEOUT, "request waited in the queue past its deadline");
  } else {
    current_connection = j->cid;
    current_role = j->role;
    uint64_t outer_deadline = pc_deadline_set(j->deadline_ms);
    pc_cancel_t outer_cancel = pc_cancel_set((pc_cancel_t){job_abandoned, j});
    if (on_io_thread) pc_nowait_begin();
    st = s->handler(s->ctx, j->op, j->body ? j->body : "", j->blen, &j->reply, &err);
    int refused = on_io_thread && pc_nowait_end();
    pc_cancel_set(outer_cancel);
    pc_deadline_set(outer_deadline);
    current_connection = 0;
    current_role = PC_RPC_ROLE_NONE;
    if (refused) {
      pc_buf_free(&j->reply);
      return 0;
    }
  }
  if (job_abandoned(j) || deadline_passed(j->deadline_ms)) atomic_fetch_add(&s->n_abandoned, 1);
  free(j->body);
  j->body = NULL;
  if ((unsigned)st > PC_STATUS_MAX) {
    pc_error_set(&err, PC_INTERNAL, "handler of op 0x%02x returned unknown status %d", j->op,
                 (int)st);
    st = PC_INTERNAL;
  } else if (st == PC_OK && j->reply.len > s->max_frame - PC_RPC_HEADER) {
    pc_error_set(&err, PC_INTERNAL, "reply of %zu bytes to op 0x%02x exceeds the frame limit "
                 "of %u bytes", j->reply.len, j->op, s->max_frame);
    st = PC_INTERNAL;
  }
  if (st != PC_OK) {
    const char *msg = err.text[0] ? err.text : pc_status_name(st);
    pc_buf_free(&j->reply);
    if (pc_buf_append(&j->reply, msg, strlen(msg)) != 0) pc_buf_free(&j->reply);
  }
  j->status = st;
  latency_record(&s->latency, j->op, j->arrived_ns);

  atomic_fetch_add(&s->pending_replies, j->reply.len);
  pthread_mutex_lock(&s->cmu);
  int first = s->chead == NULL;
  if (s->ctail) s->ctail->next = j; else s->chead = j;
  s->ctail = j;
  pthread_mutex_unlock(&s->cmu);
  if (first) event_active(s->done_ev, EV_READ, 0);
  return 1;
}

static void *worker_main(void *arg) {
  struct pc_rpc_server *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->qmu);
    while ((!s->qhead || atomic_load(&s->pending_replies) >= s->reply_memory) && !s->qstop)
      pthread_cond_wait(&s->qcv, &s->qmu);
    if (s->qstop) {
      pthread_mutex_unlock(&s->qmu);
      return NULL;
    }
    job_t *j = s->qhead;
    s->qhead = j->next;
    if (!s->qhead) s->qtail = NULL;
    j->next = NULL;
    pthread_mutex_unlock(&s->qmu);

    run_job(s, j, 0);
  }
}

static void free_jobs(job_t *j) {
  while (j) {
    job_t *next = j->next;
    conn_t *c = j->conn;
    free(j->body);
    pc_buf_free(&j->reply);
    free(j);
    conn_release(c);
    j = next;
  }
}

/* Frees a server whose threads are all joined (or were never started). */
static void server_free(struct pc_rpc_server *s) {
  free_jobs(s->qhead);
  free_jobs(s->chead);
  s->qhead = s->chead = NULL;
  while (s->conns) conn_close(s->conns);
  if (s->listener) evconnlistener_free(s->listener);
  if (s->done_ev) event_free(s->done_ev);
  if (s->stop_ev) event_free(s->stop_ev);
  if (s->grace_ev) event_free(s->grace_ev);
  if (s->accept_retry_ev) event_free(s->accept_retry_ev);
  /* a TLS bufferevent's last reference goes in a deferred callback or a
   * finalizer of the loop: run them (no thread runs the loop any more),
   * or its SSL object and buffers outlive the base */
  if (s->base) {
    event_base_loop(s->base, EVLOOP_NONBLOCK);
    event_base_free(s->base);
  }
  pthread_mutex_destroy(&s->qmu);
  pthread_cond_destroy(&s->qcv);
  pthread_mutex_destroy(&s->cmu);
  rpc_peers_free(s->peers);
  rpc_creds_free(&s->creds);
  free(s->workers);
  free(s->name);
  free(s->host);
  free(s);
}

static void server_join(struct pc_rpc_server *s) {
  if (s->loop_started) {
    pc_rpc_server_stop_begin(s);
    pthread_join(s->loop_thread, NULL);
    s->loop_started = 0;
  }
  pthread_mutex_lock(&s->qmu);
  s->qstop = 1;
  pthread_cond_broadcast(&s->qcv);
  pthread_mutex_unlock(&s->qmu);
  for (uint32_t i = 0; i < s->workers_started; i++) pthread_join(s->workers[i], NULL);
  s->workers_started = 0;
}

static evutil_socket_t listener_fd_bind(struct pc_rpc_server *s, pc_error_t *err) {
  char portstr[8];
  snprintf(portstr, sizeof portstr, "%u", (unsigned)s->port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(s->host, portstr, &hints, &res);
  if (gai != 0) {
    pc_error_set(err, PC_INVALID, "cannot listen on %s: %s", s->endpoint, gai_strerror(gai));
    return -1;
  }
  int e = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    s->listener = evconnlistener_new_bind(
        s->base, accept_cb, s, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
        1024, ai->ai_addr, (int)ai->ai_addrlen);
    if (s->listener) break;
    e = EVUTIL_SOCKET_ERROR();
  }
  freeaddrinfo(res);
  if (!s->listener) {
    pc_error_set(err, PC_IO_ERROR, "cannot listen on %s: %s", s->endpoint,
                 evutil_socket_error_to_string(e));
    return -1;
  }
  evconnlistener_set_error_cb(s->listener, accept_error_cb);
  return evconnlistener_get_fd(s->listener);
}

pc_rpc_server_t *pc_rpc_server_start(const pc_rpc_server_options_t *opts,
                                     pc_rpc_handler_fn handler, void *ctx, pc_error_t *err) {
  if (!opts || !handler) {
    pc_error_set(err, PC_INVALID, "pc_rpc_server_start: options and handler are required");
    return NULL;
  }
  if (rpc_lib_ready(err) != 0) return NULL;
  const char *host = opts->host && opts->host[0] ? opts->host : "127.0.0.1";
  char ep[300];
  rpc_format_endpoint(ep, sizeof ep, host, opts->port);
  uint32_t max_frame = opts->max_frame ? opts->max_frame : PC_RPC_DEFAULT_MAX_FRAME;
  if (max_frame < 64) {
    pc_error_set(err, PC_INVALID, "rpc server %s: max_frame %u is below 64", ep, max_frame);
    return NULL;
  }
  uint32_t workers = opts->workers ? opts->workers : 4;
  if (workers > 1024) {
    pc_error_set(err, PC_INVALID, "rpc server %s: workers %u is above 1024", ep, workers);
    return NULL;
  }

  struct pc_rpc_server *s = calloc(1, sizeof *s);
  if (!s) {
    pc_error_set(err, PC_NOMEM, "rpc server %s: out of memory", ep);
    return NULL;
  }
  pthread_mutex_init(&s->qmu, NULL);
  pthread_cond_init(&s->qcv, NULL);
  pthread_mutex_init(&s->cmu, NULL);
  s->name = strdup(opts->name && opts->name[0] ? opts->name : "rpc");
  s->host = strdup(host);
  int creds_rc = rpc_creds_init(&s->creds, opts->auth);
  s->need_auth = s->creds.tls || rpc_creds_has_secret(&s->creds);
  s->peers = rpc_peers_create();
  s->max_frame = max_frame;
  s->max_inflight = opts->max_inflight ? opts->max_inflight : 64;
  s->frame_timeout_ms = opts->frame_timeout_ms ? opts->frame_timeout_ms : 10000;
  s->idle_timeout_ms = opts->idle_timeout_ms ? opts->idle_timeout_ms : 300000;
  s->max_connections = opts->max_connections ? opts->max_connections : 1024;
  s->max_per_peer = opts->max_connections_per_peer ? opts->max_connections_per_peer : 512;
  s->max_unauth = opts->max_unauthenticated ? opts->max_unauthenticated : 64;
  s->auth_timeout_ms = opts->auth_timeout_ms ? opts->auth_timeout_ms : 5000;
  s->request_memory = opts->request_memory ? opts->request_memory : DEFAULT_REQUEST_MEMORY;
  s->reply_memory = opts->reply_memory ? opts->reply_memory : DEFAULT_REPLY_MEMORY;
  s->reply_timeout_ms = opts->reply_timeout_ms ? opts->reply_timeout_ms : 30000;
  s->qcap = workers * 64 > 1024 ? workers * 64 : 1024;
  s->handler = handler;
  s->ctx = ctx;
  s->on_close = opts->on_close;
  s->runs_inline = opts->runs_inline;
  s->port = opts->port;
  snprintf(s->endpoint, sizeof s->endpoint, "%s", ep);
  s->workers = calloc(workers, sizeof *s->workers);
  if (!s->name || !s->host || creds_rc != 0 || !s->peers || !s->workers) {
    pc_error_set(err, PC_NOMEM, "rpc server %s: out of memory", ep);
    server_free(s);
    return NULL;
  }

  s->base = event_base_new();
  if (!s->base) {
    pc_error_set(err, PC_INTERNAL, "rpc server %s: cannot create an event base", ep);
    server_free(s);
    return NULL;
  }
  evutil_socket_t lfd = listener_fd_bind(s, err);
  if (lfd < 0) {
    server_free(s);
    return NULL;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET)
      s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
      s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  rpc_format_endpoint(s->endpoint, sizeof s->endpoint, s->host, s->port);

  s->done_ev = event_new(s->base, -1, EV_PERSIST, done_cb, s);
  s->stop_ev = event_new(s->base, -1, 0, stop_cb, s);
  s->grace_ev = evtimer_new(s->base, grace_cb, s);
  s->accept_retry_ev = evtimer_new(s->base, accept_retry_cb, s);
  if (!s->done_ev || !s->stop_ev || !s->grace_ev || !s->accept_retry_ev) {
    pc_error_set(err, PC_NOMEM, "rpc server %s: out of memory", s->endpoint);
    server_free(s);
    return NULL;
  }
  for (uint32_t i = 0; i < workers; i++) {
    if (rpc_start_thread(&s->workers[i], worker_main, s) != 0) {
      pc_error_set(err, PC_INTERNAL, "rpc server %s: cannot start handler thread", s->endpoint);
      server_join(s);
      server_free(s);
      return NULL;
    }
    s->workers_started++;
  }
  if (rpc_start_thread(&s->loop_thread, loop_main, s) != 0) {
    pc_error_set(err, PC_INTERNAL, "rpc server %s: cannot start the event loop thread",
                 s->endpoint);
    server_join(s);
    server_free(s);
    return NULL;
  }
  s->loop_started = 1;
  if (opts->in_process && local_register(s) != 0) {
    pc_error_set(err, PC_NOMEM, "rpc server %s: out of memory", s->endpoint);
    server_join(s);
    server_free(s);
    return NULL;
  }
  pc_log(PC_LOG_INFO, "%s: listening on %s", s->name, s->endpoint);
  return s;
}

uint16_t pc_rpc_server_port(const pc_rpc_server_t *s) { return s ? s->port : 0; }

int pc_rpc_server_latency(const pc_rpc_server_t *s, uint8_t op, pc_rpc_op_latency_t *out) {
  memset(out, 0, sizeof *out);
  if (!s) return 0;
  pc_rpc_server_t *m = (pc_rpc_server_t *)s; /* atomics are read through a non-const pointer */
  uint64_t n = 0;
  for (size_t i = 0; i < PC_RPC_LATENCY_BUCKETS; i++) {
    n += atomic_load_explicit(&m->latency.bucket[op][i], memory_order_relaxed);
    out->le[i] = n;
  }
  out->count = n + atomic_load_explicit(&m->latency.bucket[op][PC_RPC_LATENCY_BUCKETS],
                                        memory_order_relaxed);
  out->sum_seconds =
      (double)atomic_load_explicit(&m->latency.sum_ns[op], memory_order_relaxed) / 1e9;
  return out->count > 0;
}

void pc_rpc_server_stats(const pc_rpc_server_t *s, pc_rpc_server_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!s) return;
  struct pc_rpc_server *m = (struct pc_rpc_server *)s; /* atomics load through non-const */
  out->connections_accepted = atomic_load(&m->n_accepted);
  out->connections_open = atomic_load(&m->n_open);
  out->requests = atomic_load(&m->n_requests);
  out->protocol_errors = atomic_load(&m->n_proto_errors);
  out->bytes_in = atomic_load(&m->n_bytes_in);
  out->bytes_out = atomic_load(&m->n_bytes_out);
  out->in_service = atomic_load(&m->n_in_service);
  out->abandoned = atomic_load(&m->n_abandoned);
  out->inline_served = atomic_load(&m->n_inline);
  out->inline_deferred = atomic_load(&m->n_deferred);
  out->connections_refused = atomic_load(&m->n_refused);
  out->auth_failures = atomic_load(&m->n_auth_failures);
  out->request_memory = atomic_load(&m->g_request_used);
  out->reply_memory = atomic_load(&m->g_reply_used);
}

void pc_rpc_server_stop_begin(pc_rpc_server_t *s) {
  if (!s || !s->loop_started || atomic_exchange(&s->stop_begun, 1)) return;
  event_active(s->stop_ev, EV_READ, 0);
}

void pc_rpc_server_stop(pc_rpc_server_t *s) {
  if (!s) return;
  local_unregister(s);
  server_join(s);
  pc_log(PC_LOG_INFO, "%s: stopped serving %s", s->name, s->endpoint);
  server_free(s);
}
