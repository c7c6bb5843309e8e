/* rpc_client.c — the client side of the request/response protocol every
 * daemon speaks (net/rpc.h): a multiplexing client (one background loop
 * thread, one connection, calls matched to replies by id, lazy reconnection
 * with backoff; opted in, a refused connection attempt fails the calls
 * waiting for it at once), its calls (pc_rpc_call, and pc_rpc_start,
 * pc_rpc_finish, pc_rpc_wait and pc_rpc_expire for a call in flight), the
 * test client whose loop runs in its caller's thread, and the "host:port"
 * parser. A client of an endpoint that a server of its own process serves
 * in-process calls its handler directly (net/rpc_server.c). Beneath the
 * framing a connection is a bufferevent over TCP or over TLS (net/tls.c);
 * above it, the secret's challenge-response comes from net/rpc_auth.c.
 *
 * Threading and ownership: callers own their call records (on their stacks)
 * and only touch them under the client's mutex; the loop thread takes a
 * call's request frame (it then belongs to the output evbuffer, which frees
 * it once written) and fills in its result under that mutex too. A reply
 * body is malloc'd by the loop thread and handed to the caller. The
 * bufferevent belongs to the loop thread.
 *
 * Every thread this file starts blocks all signals: daemons get SIGTERM and
 * SIGINT on their main thread, and a write to a closed peer returns EPIPE
 * instead of killing the process with SIGPIPE.
 */
#include "net/rpc.h"
#include "net/rpc_frame.h"
#include "net/rpc_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/crypto.h>

#include "base/error.h"
#include "base/log.h"
#include "net/rpc_auth.h"
#include "net/tls.h"

#define CLIENT_MAX_FRAME (1u << 30)     /* largest reply frame a client accepts */
#define CONNECT_TIMEOUT_MS 3000
#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 1000
#define NBUCKETS 1024                   /* client's calls by id */

enum { CALL_QUEUED, CALL_SENT, CALL_DONE };
/* LINK_AUTH: connected, proving the secret (HELLO, AUTH); calls wait queued */
enum { LINK_DOWN, LINK_CONNECTING, LINK_AUTH, LINK_UP };

/* One call, on its caller's stack; linked into the client only under mu. */
typedef struct call {
  struct call *hprev, *hnext; /* bucket chain (every call not yet done) */
  struct call *qprev, *qnext; /* send queue (CALL_QUEUED) */
  uint64_t id;
  uint8_t op;
  int state;
  unsigned char *frame; /* the request frame: the caller's until sent, then the evbuffer's */
  size_t frame_len;
  pthread_cond_t cv;
  pc_status_t status; /* when CALL_DONE */
  char *body;         /* malloc'd reply payload (handed over to the caller) */
  size_t blen;
  char msg[PC_ERROR_TEXT]; /* local failure message (when body is NULL) */
} call_t;

struct pc_rpc_client {
  char host[256];
  uint16_t port;
  char endpoint[300];
  int fail_on_refusal; /* pc_rpc_client_options_t's (set at creation, like the fields above) */
  rpc_creds_t creds;  /* what it presents */
  unsigned char cnonce[PC_RPC_NONCE], snonce[PC_RPC_NONCE]; /* the exchange under way */
  local_ep_t *local;  /* a server of this process answers it in-process (no thread, no socket) */
  uint64_t local_cid; /* its connection id there */
  pc_rpc_role_t local_role;

  struct event_base *base;
  struct event *kick_ev, *retry_ev, *connect_ev, *stop_ev;
  pthread_t thread;
  int thread_started;
  pthread_condattr_t cattr;

  pthread_mutex_t mu;
  pthread_cond_t idle_cv;
  /* under mu */
  call_t *buckets[NBUCKETS];
  call_t *sq_head, *sq_tail;
  uint64_t next_id;
  int link;
  int retry_pending;
  uint64_t next_attempt_ms;
  uint32_t backoff_ms;
  char reason[160]; /* why the last attempt or connection failed */
  char refused[160]; /* the server's refusal of our credentials, until they are accepted */
  int answered;      /* the connection has carried a reply (so a TLS failure is not a refusal) */
  int refused_errno; /* the last attempt's definite refusal (definite_refusal), until one connects */
  int destroying;
  uint32_t callers;

  /* loop thread only */
  struct bufferevent *bev;
  unsigned addr_index;
  /* pc_rpc_client_test_create's connector (tests and fuzzing only) */
  pc_rpc_test_connect_fn test_connect;
  void *test_ctx;
};

static void sq_remove(struct pc_rpc_client *c, call_t *k) {
  if (k->qprev) k->qprev->qnext = k->qnext; else if (c->sq_head == k) c->sq_head = k->qnext; else return;
  if (k->qnext) k->qnext->qprev = k->qprev; else c->sq_tail = k->qprev;
  k->qprev = k->qnext = NULL;
}

static void map_remove(struct pc_rpc_client *c, call_t *k) {
  call_t **head = &c->buckets[k->id % NBUCKETS];
  if (k->hprev) k->hprev->hnext = k->hnext; else if (*head == k) *head = k->hnext; else return;
  if (k->hnext) k->hnext->hprev = k->hprev;
  k->hprev = k->hnext = NULL;
}

static call_t *map_find(struct pc_rpc_client *c, uint64_t id) {
  for (call_t *k = c->buckets[id % NBUCKETS]; k; k = k->hnext)
    if (k->id == id) return k;
  return NULL;
}

/* mu held: finishes a call with a local failure. */
static void call_fail(struct pc_rpc_client *c, call_t *k, pc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void call_fail(struct pc_rpc_client *c, call_t *k, pc_status_t st, const char *fmt, ...) {
  if (k->state == CALL_QUEUED) sq_remove(c, k);
  map_remove(c, k);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->msg, sizeof k->msg, fmt, ap);
  va_end(ap);
  k->status = st;
  k->state = CALL_DONE;
  pthread_cond_signal(&k->cv);
}

/* mu held: fails every call not done (sent ones only, unless all); returns
 * how many. */
static size_t fail_calls(struct pc_rpc_client *c, int all, pc_status_t st, const char *msg) {
  size_t n = 0;
  for (size_t b = 0; b < NBUCKETS; b++) {
    call_t *k = c->buckets[b];
    while (k) {
      call_t *next = k->hnext;
      if (all || k->state == CALL_SENT) {
        call_fail(c, k, st, "%s", msg);
        n++;
      }
      k = next;
    }
  }
  return n;
}

/* mu held, loop thread, link up: writes the queued requests. */
static void flush_queue(struct pc_rpc_client *c) {
  struct evbuffer *out = bufferevent_get_output(c->bev);
  while (c->sq_head) {
    call_t *k = c->sq_head;
    if (rpc_out_add_owned(out, k->frame, k->frame_len) != 0) {
      call_fail(c, k, PC_NOMEM, "out of memory sending to %s", c->endpoint);
      continue;
    }
    k->frame = NULL; /* the evbuffer frees it once written */
    sq_remove(c, k);
    k->state = CALL_SENT;
  }
}

/* mu held, loop thread: schedules the next attempt after a failure. */
static void schedule_retry(struct pc_rpc_client *c) {
  if (!c->sq_head || c->retry_pending || c->destroying) return;
  uint64_t now = pc_now_mono_ms();
  uint64_t wait = c->next_attempt_ms > now ? c->next_attempt_ms - now : 0;
  struct timeval tv = rpc_ms_tv((uint32_t)wait);
  evtimer_add(c->retry_ev, &tv);
  c->retry_pending = 1;
}

/* mu held, loop thread: the link went down (or an attempt failed). */
static void link_failed(struct pc_rpc_client *c, const char *reason) {
  if (c->bev) {
    bufferevent_free(c->bev);
    c->bev = NULL;
  }
  evtimer_del(c->connect_ev);
  c->link = LINK_DOWN;
  snprintf(c->reason, sizeof c->reason, "%s", reason);
  c->next_attempt_ms = pc_now_mono_ms() + (c->test_connect ? 0 : c->backoff_ms);
  c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
  c->addr_index++;
  schedule_retry(c);
}

/* Whether errno e, which ended a connection attempt, is the network's
 * definite answer that nobody serves the endpoint now: nothing listens at
 * the port (the host answered with a reset), or no route leads to the host
 * or its network. A timeout is no such answer: a busy server accepts late. */
static int definite_refusal(int e) {
  return e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH;
}

/* mu held, loop thread: a connection attempt failed, with errno e (0 when
 * the failure has none, or it is unknown). Under fail_on_refusal a definite
 * refusal fails the calls queued for this attempt now, none of them sent;
 * otherwise they wait for the next attempt, as after any failure. */
static void attempt_failed(struct pc_rpc_client *c, int e, const char *reason) {
  c->refused_errno = definite_refusal(e) ? e : 0;
  if (c->refused_errno && c->fail_on_refusal && c->sq_head) {
    char msg[512];
    if (e == ECONNREFUSED)
      snprintf(msg, sizeof msg, "connection to %s refused", c->endpoint);
    else
      snprintf(msg, sizeof msg, "connection to %s failed: %s", c->endpoint, strerror(e));
    size_t n = 0;
    for (; c->sq_head; n++) call_fail(c, c->sq_head, PC_UNAVAILABLE, "%s", msg);
    pc_log(PC_LOG_DEBUG, "rpc client: %s (%zu calls failed)", msg, n);
  }
  link_failed(c, reason);
}

/* mu held, loop thread: the connection was up and is lost. */
static void link_lost(struct pc_rpc_client *c, const char *reason) {
  char msg[512];
  snprintf(msg, sizeof msg, "connection to %s lost: %s", c->endpoint, reason);
  size_t n = fail_calls(c, 0, PC_UNAVAILABLE, msg);
  /* an idle connection closed by the server (idle timeout) is routine */
  pc_log(n ? PC_LOG_WARN : PC_LOG_DEBUG, "rpc client: %s (%zu calls in flight failed)", msg, n);
  link_failed(c, reason);
}

static void client_read_cb(struct bufferevent *bev, void *arg);
static void client_event_cb(struct bufferevent *bev, short what, void *arg);
static void link_connected(struct pc_rpc_client *c);

/* mu held, loop thread: starts a connection attempt (drops mu while
 * resolving the host). */
static void start_connect(struct pc_rpc_client *c) {
  char portstr[8];
  snprintf(portstr, sizeof portstr, "%u", (unsigned)c->port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  c->link = LINK_CONNECTING;
  /* Name lookups may block: callers must not wait for the mutex meanwhile. */
  pthread_mutex_unlock(&c->mu);
  int gai = getaddrinfo(c->host, portstr, &hints, &res);
  pthread_mutex_lock(&c->mu);
  if (c->destroying) {
    if (gai == 0) freeaddrinfo(res);
    return;
  }
  if (gai != 0) {
    link_failed(c, gai_strerror(gai));
    return;
  }
  unsigned n = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) n++;
  struct addrinfo *ai = res;
  for (unsigned i = 0; i < c->addr_index % n; i++) ai = ai->ai_next;
  char reason[160] = "";
  int e = 0; /* the errno of a failure, when it has one */
  int given = c->test_connect != NULL; /* a connected fd from the test hook */
  evutil_socket_t fd = given ? c->test_connect(c->test_ctx)
                             : socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    e = given ? ECONNREFUSED : errno; /* the hook's failure is a refused connect */
    snprintf(reason, sizeof reason, "socket: %s",
             given ? "refused by the test hook" : strerror(errno));
  } else {
    if (given) evutil_make_socket_nonblocking(fd);
    rpc_set_nodelay(fd);
    c->bev = c->creds.tls ? pc_tls_client_bev(c->creds.tls, c->base, fd, c->host)
                          : bufferevent_socket_new(c->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->answered = 0;
    if (!c->bev) {
      evutil_closesocket(fd);
      snprintf(reason, sizeof reason, "out of memory");
    } else {
      bufferevent_setcb(c->bev, client_read_cb, NULL, client_event_cb, c);
      bufferevent_enable(c->bev, EV_READ);
      if (!given && bufferevent_socket_connect(c->bev, ai->ai_addr, (int)ai->ai_addrlen) != 0) {
        e = errno; /* connect's own (no route, ...), which libevent leaves */
        snprintf(reason, sizeof reason, "%s", strerror(e));
      }
    }
  }
  freeaddrinfo(res);
  if (reason[0]) {
    attempt_failed(c, e, reason);
    return;
  }
  struct timeval tv = rpc_ms_tv(CONNECT_TIMEOUT_MS);
  evtimer_add(c->connect_ev, &tv);
  /* connected already: what BEV_EVENT_CONNECTED does (TLS says so after
   * its handshake, over the given socket as over any) */
  if (given && !c->creds.tls) link_connected(c);
}

/* mu held, loop thread: sends what is queued, connecting first if needed. */
static void pump(struct pc_rpc_client *c) {
  if (c->destroying) return;
  if (c->link == LINK_UP) {
    flush_queue(c);
  } else if (c->link == LINK_DOWN && c->sq_head && !c->retry_pending) {
    if (pc_now_mono_ms() >= c->next_attempt_ms)
      start_connect(c);
    else
      schedule_retry(c);
  }
}

static void kick_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_client *c = arg;
  (void)fd;
  (void)what;
  pthread_mutex_lock(&c->mu);
  pump(c);
  pthread_mutex_unlock(&c->mu);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_client *c = arg;
  (void)fd;
  (void)what;
  pthread_mutex_lock(&c->mu);
  c->retry_pending = 0;
  pump(c);
  pthread_mutex_unlock(&c->mu);
}

static void connect_timeout_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_client *c = arg;
  (void)fd;
  (void)what;
  pthread_mutex_lock(&c->mu);
  if (c->link == LINK_CONNECTING || c->link == LINK_AUTH) {
    char reason[96];
    snprintf(reason, sizeof reason, "%s timed out after %d ms",
             c->link == LINK_AUTH ? "authentication" : c->creds.tls ? "TLS connect" : "connect",
             CONNECT_TIMEOUT_MS);
    link_failed(c, reason);
  }
  pthread_mutex_unlock(&c->mu);
}

/* mu held, loop thread: appends one frame of the exchange (id 0). */
static int send_auth_frame(struct pc_rpc_client *c, uint8_t op, const void *body, size_t len) {
  unsigned char h[HDR];
  size_t hl = rpc_put_header(h, PC_RPC_VERSION, len, op, 0, 0, 0);
  struct evbuffer *out = bufferevent_get_output(c->bev);
  return evbuffer_add(out, h, hl) == 0 && evbuffer_add(out, body, len) == 0 ? 0 : -1;
}

/* mu held, loop thread: the server refused this client's credentials (or
 * they cannot be proven to it): every call waiting fails now with
 * PC_DENIED, since retrying will not help them; the link then goes down. */
static void refused_by(struct pc_rpc_client *c, const char *why) {
  pc_log(PC_LOG_WARN, "rpc client: %s refused this client: %s", c->endpoint, why);
  char msg[400];
  snprintf(msg, sizeof msg, "%.100s refused this client's credentials: %.140s", c->endpoint, why);
  fail_calls(c, 1, PC_DENIED, msg);
  snprintf(c->reason, sizeof c->reason, "credentials refused: %.130s", why);
  snprintf(c->refused, sizeof c->refused, "credentials refused: %.130s", why);
}

/* mu held, loop thread: the server answered something this client asked
 * (a call it sent, the secret's exchange): attempts after the next failure
 * start again from the shortest wait. A frame that answers nothing asked
 * (a reply to an id never sent) is no such sign: a server that sends one
 * and closes is retried with a growing wait, not every BACKOFF_MIN_MS. */
static void link_works(struct pc_rpc_client *c) {
  c->backoff_ms = BACKOFF_MIN_MS;
  c->next_attempt_ms = 0;
  c->refused[0] = '\0';
}

/* mu held, loop thread: the link is ready for calls. */
static void link_up(struct pc_rpc_client *c) {
  evtimer_del(c->connect_ev);
  c->link = LINK_UP;
  c->reason[0] = '\0';
  flush_queue(c);
}

/* mu held, loop thread: a reply of the exchange (id 0). */
static void auth_reply(struct pc_rpc_client *c, uint8_t op, const unsigned char *body,
                       size_t blen) {
  size_t klen;
  uint8_t which;
  const char *key = rpc_creds_presented(&c->creds, &klen, &which);
  if (c->link != LINK_AUTH || !key) return; /* not asked for: ignored */
  if (op == (PC_RPC_OP_HELLO | PC_RPC_OP_REPLY)) {
    if (blen != PC_RPC_NONCE) {
      refused_by(c, blen ? "a malformed HELLO reply"
                         : "the server has no secret, and this client will not talk to a "
                           "server that cannot prove it knows the one it was given");
      link_lost(c, "the server did not prove the secret");
      return;
    }
    memcpy(c->snonce, body, PC_RPC_NONCE);
    unsigned char auth[1 + PC_RPC_MAC];
    auth[0] = which;
    rpc_mac(key, klen, RPC_LABEL_CLIENT, c->snonce, c->cnonce, auth + 1);
    if (send_auth_frame(c, PC_RPC_OP_AUTH, auth, sizeof auth) != 0)
      link_lost(c, "out of memory");
  } else if (op == (PC_RPC_OP_AUTH | PC_RPC_OP_REPLY)) {
    unsigned char want[PC_RPC_MAC];
    rpc_mac(key, klen, RPC_LABEL_SERVER, c->cnonce, c->snonce, want);
    if (blen != PC_RPC_MAC || CRYPTO_memcmp(want, body, PC_RPC_MAC) != 0) {
      refused_by(c, "the server's proof of the secret is wrong (another secret, or not the "
                    "server)");
      link_lost(c, "the server did not prove the secret");
      return;
    }
    pc_log(PC_LOG_DEBUG, "rpc client: authenticated to %s", c->endpoint);
    link_up(c);
  }
}

/* mu held, loop thread: this client will not talk to the server it
 * reached, whose certificate does not name a server of the cluster: the
 * calls waiting fail now with PC_DENIED (the next attempt would find the
 * same server), and the link goes down before anything is sent. */
static void server_not_trusted(struct pc_rpc_client *c, const char *why) {
  pc_log(PC_LOG_WARN, "rpc client: not talking to %s: %s", c->endpoint, why);
  char msg[400];
  snprintf(msg, sizeof msg, "%.100s is not a server of this cluster: %.250s", c->endpoint, why);
  fail_calls(c, 1, PC_DENIED, msg);
  snprintf(c->reason, sizeof c->reason, "not a server: %.130s", why);
  snprintf(c->refused, sizeof c->refused, "not a server: %.130s", why);
}

static void server_refused(struct pc_rpc_client *c, const char *why) {
  server_not_trusted(c, why);
  link_failed(c, "not a server of this cluster");
}

/* mu held, loop thread: the connection is established (over TLS, its
 * handshake done). */
static void link_connected(struct pc_rpc_client *c) {
  pc_log(PC_LOG_DEBUG, "rpc client: connected to %s", c->endpoint);
  c->refused_errno = 0;
  if (c->creds.tls) { /* a server proves what it is by its certificate's name */
    char cn[256], why[400];
    if (pc_tls_peer_name(c->bev, cn, sizeof cn) != 0) {
      server_refused(c, "its certificate has no usable common name");
      return;
    }
    if (!pc_tls_server_name(c->creds.tls, cn)) {
      snprintf(why, sizeof why,
               "its certificate's name '%.100s' is not a server's (tls.server_cn, else "
               "tls.system_cn)",
               cn);
      server_refused(c, why);
      return;
    }
  }
  if (rpc_creds_has_secret(&c->creds)) { /* prove the secret before any call */
    c->link = LINK_AUTH;
    if (rpc_random(c->cnonce, sizeof c->cnonce) != 0 ||
        send_auth_frame(c, PC_RPC_OP_HELLO, c->cnonce, sizeof c->cnonce) != 0)
      link_lost(c, "cannot start authentication");
  } else {
    link_up(c);
  }
}

/* Whether bev's socket has never been connected to its peer. */
static int never_connected(struct bufferevent *bev) {
  evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
  struct sockaddr_storage peer;
  socklen_t len = sizeof peer;
  return fd >= 0 && getpeername(fd, (struct sockaddr *)&peer, &len) != 0 && errno == ENOTCONN;
}

static void client_event_cb(struct bufferevent *bev, short what, void *arg) {
  struct pc_rpc_client *c = arg;
  (void)bev;
  int e = EVUTIL_SOCKET_ERROR();
  pthread_mutex_lock(&c->mu);
  if (what & BEV_EVENT_CONNECTED) {
    link_connected(c);
  } else if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
    char tls_why[300];
    const char *reason = (what & BEV_EVENT_ERROR) && e ? evutil_socket_error_to_string(e)
                         : c->link == LINK_CONNECTING ? "connect failed"
                                                      : "closed by the server";
    /* a TLS failure before any reply: the server refused this client's
     * certificate (TLS 1.3 says so after the client's side of the
     * handshake), or this client refused the server's */
    if (c->creds.tls && !c->answered && pc_tls_failure(c->bev, tls_why, sizeof tls_why)) {
      if (strncmp(tls_why, PC_TLS_PEER_CERT, strlen(PC_TLS_PEER_CERT)) == 0)
        server_not_trusted(c, tls_why); /* this client refused the server's certificate */
      else
        refused_by(c, tls_why);
      reason = c->reason;
    }
    /* a server that refused our HELLO closes the connection next (and
     * again after each reconnect): the calls failed by the close are told
     * why */
    char why[sizeof c->refused + 32];
    if (c->refused[0] && !((what & BEV_EVENT_ERROR) && e)) {
      snprintf(why, sizeof why, "closed by the server (%s)", c->refused);
      reason = why;
    }
    /* a failed connect's errno is the socket's SO_ERROR, which libevent
     * sets before an error event; over TLS the failure shows as an end of
     * file, and the errno is the connect's when the socket never connected.
     * Without one, no refusal is assumed. */
    if (c->link == LINK_CONNECTING)
      attempt_failed(c, (what & BEV_EVENT_ERROR) || never_connected(c->bev) ? e : 0, reason);
    else if (c->link == LINK_UP || c->link == LINK_AUTH)
      link_lost(c, reason);
  }
  pthread_mutex_unlock(&c->mu);
}

static void client_read_cb(struct bufferevent *bev, void *arg) {
  struct pc_rpc_client *c = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  for (;;) {
    /* replies come in the version of the request, or in version 1 from a
     * server that refuses our version (its header is every version's start) */
    size_t avail = evbuffer_get_length(in);
    if (avail < PREFIX) return;
    unsigned char h[HDR];
    evbuffer_copyout(in, h, avail < HDR ? avail : HDR);
    pc_rpc_frame_t f;
    pc_rpc_frame_state_t fs = pc_rpc_frame_read(h, avail, CLIENT_MAX_FRAME, 1, &f);
    if (fs == PC_RPC_FRAME_BAD) {
      char fault[128];
      snprintf(fault, sizeof fault, "protocol error: %s", f.fault);
      pc_log(PC_LOG_WARN, "rpc client: %s from %s", fault, c->endpoint);
      pthread_mutex_lock(&c->mu);
      link_lost(c, fault);
      pthread_mutex_unlock(&c->mu);
      return;
    }
    if (fs == PC_RPC_FRAME_MORE) return;
    evbuffer_drain(in, f.hlen);
    size_t blen = f.len - (f.hlen - PREFIX);
    char *body = malloc(blen + 1);
    if (!body) {
      pthread_mutex_lock(&c->mu);
      link_lost(c, "out of memory reading a reply");
      pthread_mutex_unlock(&c->mu);
      return;
    }
    evbuffer_remove(in, body, blen);
    body[blen] = '\0';
    uint8_t status = f.status;
    uint64_t id = f.id;
    pthread_mutex_lock(&c->mu);
    c->answered = 1;
    if (status == PC_OK && c->link == LINK_UP && id == 0) link_works(c);
    char unauthenticated[160] = ""; /* the server's refusal of a call sent unauthenticated */
    if (id != 0 && status != PC_OK && strncmp(body, AUTH_REQUIRED, strlen(AUTH_REQUIRED)) == 0)
      snprintf(unauthenticated, sizeof unauthenticated, "%.150s", body);
    if (id == 0) {
      if (status != PC_OK) {
        refused_by(c, body); /* the server closes next: so does this client, at once */
        link_lost(c, c->reason);
      } else {
        auth_reply(c, h[5], (const unsigned char *)body, blen);
      }
    } else {
      call_t *k = map_find(c, id);
      if (k && k->state == CALL_SENT) {
        link_works(c);
        map_remove(c, k);
        k->status = status <= PC_STATUS_MAX ? (pc_status_t)status : PC_INTERNAL;
        k->body = body;
        k->blen = blen;
        body = NULL;
        k->state = CALL_DONE;
        pthread_cond_signal(&k->cv);
      }
      /* else: a late reply to a call that timed out; dropped */
      /* a server that wants credentials served nothing of this connection
       * and closes it next: the calls pipelined behind this one are refused
       * as well, and told why */
      if (unauthenticated[0]) {
        refused_by(c, unauthenticated);
        link_lost(c, c->reason);
      }
    }
    int gone = c->bev != bev; /* the link went down on this frame: bev is freed */
    pthread_mutex_unlock(&c->mu);
    free(body);
    if (gone) return;
  }
}

static void client_stop_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_rpc_client *c = arg;
  (void)fd;
  (void)what;
  pthread_mutex_lock(&c->mu);
  if (c->bev) {
    bufferevent_free(c->bev);
    c->bev = NULL;
  }
  c->link = LINK_DOWN;
  pthread_mutex_unlock(&c->mu);
  event_base_loopbreak(c->base);
}

static void *client_main(void *arg) {
  struct pc_rpc_client *c = arg;
  event_base_loop(c->base, EVLOOP_NO_EXIT_ON_EMPTY);
  return NULL;
}

static void client_free(struct pc_rpc_client *c) {
  if (c->bev) bufferevent_free(c->bev);
  if (c->kick_ev) event_free(c->kick_ev);
  if (c->retry_ev) event_free(c->retry_ev);
  if (c->connect_ev) event_free(c->connect_ev);
  if (c->stop_ev) event_free(c->stop_ev);
  if (c->base) { /* the TLS bufferevent's deferred release (see server_free) */
    event_base_loop(c->base, EVLOOP_NONBLOCK);
    event_base_free(c->base);
  }
  pthread_condattr_destroy(&c->cattr);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->idle_cv);
  rpc_creds_free(&c->creds);
  free(c);
}

/* A client; own_thread 0 (pc_rpc_client_test_create only): its loop runs
 * inside pc_rpc_test_finish. */
static struct pc_rpc_client *client_new(const char *host, uint16_t port, const pc_rpc_auth_t *auth,
                                        const pc_rpc_client_options_t *opts, int own_thread,
                                        pc_error_t *err) {
  if (!host || !host[0] || strlen(host) >= sizeof ((struct pc_rpc_client *)0)->host) {
    pc_error_set(err, PC_INVALID, "rpc client: host must be 1..255 characters");
    return NULL;
  }
  if (port == 0) {
    pc_error_set(err, PC_INVALID, "rpc client: port 0 for host %s", host);
    return NULL;
  }
  if (rpc_lib_ready(err) != 0) return NULL;
  struct pc_rpc_client *c = calloc(1, sizeof *c);
  if (!c) {
    pc_error_set(err, PC_NOMEM, "rpc client: out of memory");
    return NULL;
  }
  snprintf(c->host, sizeof c->host, "%s", host);
  c->port = port;
  rpc_format_endpoint(c->endpoint, sizeof c->endpoint, host, port);
  pthread_condattr_init(&c->cattr);
  pthread_condattr_setclock(&c->cattr, CLOCK_MONOTONIC);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->idle_cv, NULL);
  c->backoff_ms = BACKOFF_MIN_MS;
  c->link = LINK_DOWN;
  c->fail_on_refusal = opts && opts->fail_on_refusal;
  if (rpc_creds_init(&c->creds, auth) != 0) {
    pc_error_set(err, PC_NOMEM, "rpc client for %s: out of memory", c->endpoint);
    client_free(c);
    return NULL;
  }
  c->local = rpc_local_find(c->host, c->port, &c->creds, &c->local_cid, &c->local_role);
  if (c->local) return c;
  c->base = event_base_new();
  if (c->base) {
    c->kick_ev = event_new(c->base, -1, EV_PERSIST, kick_cb, c);
    c->retry_ev = evtimer_new(c->base, retry_cb, c);
    c->connect_ev = evtimer_new(c->base, connect_timeout_cb, c);
    c->stop_ev = event_new(c->base, -1, 0, client_stop_cb, c);
  }
  if (!c->base || !c->kick_ev || !c->retry_ev || !c->connect_ev || !c->stop_ev) {
    pc_error_set(err, PC_NOMEM, "rpc client for %s: cannot create its event loop", c->endpoint);
    client_free(c);
    return NULL;
  }
  if (!own_thread) return c;
  if (rpc_start_thread(&c->thread, client_main, c) != 0) {
    pc_error_set(err, PC_INTERNAL, "rpc client for %s: cannot start its thread", c->endpoint);
    client_free(c);
    return NULL;
  }
  c->thread_started = 1;
  return c;
}

pc_rpc_client_t *pc_rpc_client_create(const char *host, uint16_t port, const pc_rpc_auth_t *auth,
                                      pc_error_t *err) {
  return client_new(host, port, auth, NULL, 1, err);
}

pc_rpc_client_t *pc_rpc_client_create_opts(const char *host, uint16_t port,
                                           const pc_rpc_auth_t *auth,
                                           const pc_rpc_client_options_t *opts, pc_error_t *err) {
  return client_new(host, port, auth, opts, 1, err);
}

int pc_rpc_client_refused(pc_rpc_client_t *c) {
  if (!c || c->local) return 0;
  pthread_mutex_lock(&c->mu);
  int e = c->refused_errno;
  pthread_mutex_unlock(&c->mu);
  return e;
}

pc_rpc_client_t *pc_rpc_client_test_create(const char *host, uint16_t port,
                                           const pc_rpc_auth_t *auth, pc_rpc_test_connect_fn fn,
                                           void *ctx, pc_error_t *err) {
  struct pc_rpc_client *c = client_new(host, port, auth, NULL, 0, err);
  if (c && !c->local) {
    c->test_connect = fn;
    c->test_ctx = ctx;
  }
  return c;
}

/* A call in flight between pc_rpc_start and pc_rpc_finish. Its call_t is
 * linked into the client's lists, so it lives on the heap. */
struct pc_rpc_pending {
  struct pc_rpc_client *c;
  call_t k;
  uint8_t op;
  uint32_t timeout_ms;
  struct timespec deadline;
  int local;         /* answered in-process at the start: the result is here */
  int lreached;      /* rpc_local_call's *reached */
  pc_status_t lst;
  pc_buf_t lreply;
  pc_error_t lerr;
};

static pc_status_t check_call(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                              pc_error_t *err) {
  if (!c) return pc_error_set(err, PC_INVALID, "pc_rpc_call: no client");
  if (len && !body) return pc_error_set(err, PC_INVALID, "pc_rpc_call: body is NULL");
  if (op == 0 || op >= PC_RPC_OP_REPLY || op == PC_RPC_OP_HELLO || op == PC_RPC_OP_AUTH)
    return pc_error_set(err, PC_INVALID, "pc_rpc_call: op 0x%02x cannot be sent", op);
  if (len > PC_RPC_DEFAULT_MAX_FRAME - PC_RPC_HEADER)
    return pc_error_set(err, PC_INVALID, "request of %zu bytes to %s exceeds the frame limit of "
                        "%u bytes", len, c->endpoint, PC_RPC_DEFAULT_MAX_FRAME);
  return PC_OK;
}

/* The in-process path of a call: the handler on this thread. */
static pc_status_t call_local(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                              uint32_t timeout_ms, pc_buf_t *reply, int *reached,
                              pc_error_t *err) {
  *reached = 0;
  pthread_mutex_lock(&c->mu);
  int gone = c->destroying;
  if (!gone) c->callers++;
  pthread_mutex_unlock(&c->mu);
  if (gone)
    return pc_error_set(err, PC_UNAVAILABLE, "client of %s is being destroyed", c->endpoint);
  pc_status_t st = rpc_local_call(c->local, c->local_cid, c->local_role, c->endpoint, op, body, len,
                              timeout_ms, reply, reached, err);
  pthread_mutex_lock(&c->mu);
  if (--c->callers == 0 && c->destroying) pthread_cond_broadcast(&c->idle_cv);
  pthread_mutex_unlock(&c->mu);
  return st;
}

pc_rpc_pending_t *pc_rpc_start(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                               uint32_t timeout_ms, pc_error_t *err) {
  if (check_call(c, op, body, len, err) != PC_OK) return NULL;
  pc_rpc_pending_t *p = calloc(1, sizeof *p);
  if (!p) {
    pc_error_set(err, PC_NOMEM, "out of memory calling %s", c->endpoint);
    return NULL;
  }
  p->c = c;
  p->op = op;
  p->timeout_ms = timeout_ms;
  if (c->local) {
    p->local = 1;
    pc_error_clear(&p->lerr);
    p->lst = call_local(c, op, body, len, timeout_ms, &p->lreply, &p->lreached, &p->lerr);
    return p;
  }
  unsigned char *frame = malloc(HDR + len);
  if (!frame) {
    free(p);
    pc_error_set(err, PC_NOMEM, "out of memory calling %s", c->endpoint);
    return NULL;
  }
  if (len) memcpy(frame + HDR, body, len);
  call_t *k = &p->k;
  k->op = op;
  k->frame = frame;
  k->frame_len = HDR + len;
  pthread_cond_init(&k->cv, &c->cattr);
  p->deadline = pc_mono_after_ms(timeout_ms);

  pthread_mutex_lock(&c->mu);
  if (c->destroying) {
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&k->cv);
    free(frame);
    free(p);
    pc_error_set(err, PC_UNAVAILABLE, "client of %s is being destroyed", c->endpoint);
    return NULL;
  }
  c->callers++;
  if (++c->next_id == 0) ++c->next_id; /* id 0 is HELLO's */
  k->id = c->next_id;
  rpc_put_header(frame, PC_RPC_VERSION, len, op, 0, k->id, timeout_ms);
  call_t **head = &c->buckets[k->id % NBUCKETS];
  k->hnext = *head;
  if (*head) (*head)->hprev = k;
  *head = k;
  int kick = c->sq_head == NULL;
  k->qprev = c->sq_tail;
  if (c->sq_tail) c->sq_tail->qnext = k; else c->sq_head = k;
  c->sq_tail = k;
  k->state = CALL_QUEUED;
  pthread_mutex_unlock(&c->mu);
  if (kick) event_active(c->kick_ev, EV_READ, 0);
  return p;
}

pc_status_t pc_rpc_finish(pc_rpc_pending_t *p, pc_buf_t *reply, int *sent, pc_error_t *err) {
  int sent_scratch;
  if (!sent) sent = &sent_scratch;
  *sent = 0;
  if (!p) return pc_error_set(err, PC_INVALID, "pc_rpc_finish: no call");
  struct pc_rpc_client *c = p->c;
  pc_status_t st;
  if (p->local) {
    st = p->lst;
    *sent = p->lreached;
    if (st != PC_OK) {
      if (err) *err = p->lerr;
    } else {
      pc_error_clear(err);
      if (reply && p->lreply.len && pc_buf_append(reply, p->lreply.p, p->lreply.len) != 0)
        st = pc_error_set(err, PC_NOMEM, "out of memory receiving %zu bytes from %s",
                          p->lreply.len, c->endpoint);
    }
    pc_buf_free(&p->lreply);
    free(p);
    return st;
  }
  call_t *k = &p->k;
  pthread_mutex_lock(&c->mu);
  while (k->state != CALL_DONE) {
    if (pthread_cond_timedwait(&k->cv, &c->mu, &p->deadline) == ETIMEDOUT) break;
  }
  char *rbody = NULL;
  size_t rlen = 0;
  if (k->state == CALL_DONE) {
    st = k->status;
    if (k->body) {
      rbody = k->body;
      rlen = k->blen;
      /* an error reply without a message still says what failed, as rpc_local_call's */
      if (st != PC_OK) pc_error_set(err, st, "%s", rbody[0] ? rbody : pc_status_name(st));
    } else {
      pc_error_set(err, st, "%s", k->msg);
    }
  } else if (k->state == CALL_QUEUED && c->link != LINK_UP) {
    sq_remove(c, k);
    map_remove(c, k);
    if (c->link == LINK_CONNECTING || c->link == LINK_AUTH)
      st = pc_error_set(err, PC_UNAVAILABLE, "cannot reach %s: still connecting after %u ms%s%s",
                        c->endpoint, p->timeout_ms, c->reason[0] ? "; last failure: " : "",
                        c->reason);
    else
      st = pc_error_set(err, PC_UNAVAILABLE, "cannot reach %s: %s", c->endpoint,
                        c->reason[0] ? c->reason : "not connected");
  } else {
    if (k->state == CALL_QUEUED) sq_remove(c, k);
    map_remove(c, k);
    st = pc_error_set(err, PC_TIMEOUT, "no reply from %s to op 0x%02x within %u ms", c->endpoint,
                      p->op, p->timeout_ms);
  }
  unsigned char *unsent = k->frame; /* NULL when the evbuffer took it */
  *sent = unsent == NULL;
  c->callers--;
  if (c->destroying && c->callers == 0) pthread_cond_broadcast(&c->idle_cv);
  pthread_mutex_unlock(&c->mu);
  pthread_cond_destroy(&k->cv);
  free(unsent);
  free(p);

  if (st == PC_OK) {
    pc_error_clear(err);
    if (reply && rlen && pc_buf_append(reply, rbody, rlen) != 0)
      st = pc_error_set(err, PC_NOMEM, "out of memory receiving %zu bytes from %s", rlen,
                        c->endpoint);
  }
  free(rbody);
  return st;
}

int pc_rpc_wait(pc_rpc_pending_t *p, uint32_t ms) {
  if (!p || p->local) return 1;
  struct pc_rpc_client *c = p->c;
  struct timespec until = pc_mono_after_ms(ms);
  if (until.tv_sec > p->deadline.tv_sec ||
      (until.tv_sec == p->deadline.tv_sec && until.tv_nsec > p->deadline.tv_nsec))
    until = p->deadline;
  int timed_out = 0;
  pthread_mutex_lock(&c->mu);
  while (p->k.state != CALL_DONE && !timed_out)
    timed_out = pthread_cond_timedwait(&p->k.cv, &c->mu, &until) == ETIMEDOUT;
  int done = p->k.state == CALL_DONE;
  pthread_mutex_unlock(&c->mu);
  if (done) return 1;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > p->deadline.tv_sec ||
         (now.tv_sec == p->deadline.tv_sec && now.tv_nsec >= p->deadline.tv_nsec);
}

void pc_rpc_expire(pc_rpc_pending_t *p) {
  if (p && !p->local) clock_gettime(CLOCK_MONOTONIC, &p->deadline);
}

pc_status_t pc_rpc_test_finish(pc_rpc_pending_t *p, pc_buf_t *reply, int *sent,
                               pc_error_t *err) {
  struct pc_rpc_client *c = p ? p->c : NULL;
  if (c && !p->local && !c->thread_started) { /* run its loop here until p is done */
    pthread_mutex_lock(&c->mu);
    for (;;) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      int64_t left_ms = (int64_t)(p->deadline.tv_sec - now.tv_sec) * 1000 +
                        (p->deadline.tv_nsec - now.tv_nsec) / 1000000;
      if (p->k.state == CALL_DONE || left_ms <= 0) break;
      pthread_mutex_unlock(&c->mu);
      struct timeval tv = rpc_ms_tv((uint32_t)left_ms);
      event_base_loopexit(c->base, &tv); /* no later than the deadline */
      event_base_loop(c->base, EVLOOP_ONCE);
      pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
  }
  return pc_rpc_finish(p, reply, sent, err);
}

pc_status_t pc_rpc_call(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                        uint32_t timeout_ms, pc_buf_t *reply, pc_error_t *err) {
  return pc_rpc_call_sent(c, op, body, len, timeout_ms, reply, NULL, err);
}

pc_status_t pc_rpc_call_sent(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                             uint32_t timeout_ms, pc_buf_t *reply, int *sent, pc_error_t *err) {
  int sent_scratch;
  if (!sent) sent = &sent_scratch;
  *sent = 0;
  pc_error_t mine;
  pc_error_t *e = err ? err : &mine;
  if (check_call(c, op, body, len, e) != PC_OK) return e->code;
  /* in-process: straight to the handler, nothing to wait for */
  if (c->local) return call_local(c, op, body, len, timeout_ms, reply, sent, err);
  pc_rpc_pending_t *p = pc_rpc_start(c, op, body, len, timeout_ms, e);
  if (!p) return e->code;
  return pc_rpc_finish(p, reply, sent, err);
}

void pc_rpc_client_destroy(pc_rpc_client_t *c) {
  if (!c) return;
  if (c->local) { /* calls running in-process finish first */
    pthread_mutex_lock(&c->mu);
    c->destroying = 1;
    while (c->callers > 0) pthread_cond_wait(&c->idle_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    rpc_local_release(c->local, c->local_cid);
    client_free(c);
    return;
  }
  pthread_mutex_lock(&c->mu);
  c->destroying = 1;
  char msg[512];
  snprintf(msg, sizeof msg, "client of %s destroyed", c->endpoint);
  fail_calls(c, 1, PC_UNAVAILABLE, msg);
  while (c->callers > 0) pthread_cond_wait(&c->idle_cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  if (c->thread_started) {
    event_active(c->stop_ev, EV_READ, 0);
    pthread_join(c->thread, NULL);
  }
  client_free(c);
}

/* ==== endpoints =========================================================== */

pc_status_t pc_parse_endpoint(const char *text, int allow_zero, char *host, size_t hostcap,
                              uint16_t *port, pc_error_t *err) {
  if (!text || !text[0])
    return pc_error_set(err, PC_INVALID, "empty endpoint (expected host:port)");
  const char *hs, *he, *ps;
  if (text[0] == '[') {
    const char *rb = strchr(text, ']');
    if (!rb || rb[1] != ':')
      return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": expected [ipv6]:port", text);
    hs = text + 1;
    he = rb;
    ps = rb + 2;
    char tmp[INET6_ADDRSTRLEN + 1];
    struct in6_addr a6;
    size_t n = (size_t)(he - hs);
    if (n == 0 || n >= sizeof tmp)
      return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": bad IPv6 address", text);
    memcpy(tmp, hs, n);
    tmp[n] = '\0';
    if (inet_pton(AF_INET6, tmp, &a6) != 1)
      return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": bad IPv6 address", text);
  } else {
    const char *colon = strrchr(text, ':');
    if (!colon)
      return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": expected host:port", text);
    if (memchr(text, ':', (size_t)(colon - text)))
      return pc_error_set(err, PC_INVALID,
                          "bad endpoint \"%.100s\": IPv6 addresses need brackets ([::1]:port)",
                          text);
    hs = text;
    he = colon;
    ps = colon + 1;
    if (he == hs)
      return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": empty host", text);
    for (const char *p = hs; p < he; p++)
      if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
        return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": bad character in host",
                            text);
  }
  size_t plen = strlen(ps);
  if (plen == 0 || plen > 5)
    return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": port must be 1..65535", text);
  unsigned long v = 0;
  for (const char *p = ps; *p; p++) {
    if (*p < '0' || *p > '9')
      return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": port must be a number",
                          text);
    v = v * 10 + (unsigned long)(*p - '0');
  }
  if (v > 65535 || (v == 0 && !allow_zero))
    return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": port must be %s..65535", text,
                        allow_zero ? "0" : "1");
  size_t hlen = (size_t)(he - hs);
  if (!host || hlen >= hostcap)
    return pc_error_set(err, PC_INVALID, "bad endpoint \"%.100s\": host longer than %zu bytes",
                        text, hostcap ? hostcap - 1 : 0);
  memcpy(host, hs, hlen);
  host[hlen] = '\0';
  if (port) *port = (uint16_t)v;
  pc_error_clear(err);
  return PC_OK;
}
