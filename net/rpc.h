/* rpc.h — the one request/response protocol of every daemon (tablet, tso),
 * on libevent bufferevents, over TCP or TLS (net/tls.h).
 *
 * Wire format; every integer big-endian:
 *
 *   frame   := length:u32  version:u8  op:u8  status:u8  id:u64  budget:u32  payload
 *
 * (version 2; a version-1 frame has no budget field). length counts the
 * bytes after itself (>= the header, <= max_frame). A request carries
 * status 0, a caller-chosen id and its budget: the milliseconds the caller
 * waits for the reply (0: no bound). The server's deadline for it is its
 * arrival plus the budget, so no clocks need agree (gRPC's grpc-timeout
 * does the same); a request still queued at its deadline is answered
 * PC_TIMEOUT without running, and a handler sees the deadline, and whether
 * the request was abandoned (its connection closed, or the server stops),
 * through base/deadline.h, so that long work stops between steps. Many
 * requests may be in flight on one connection and replies may come back in
 * any order. The reply echoes the id, sets op to (request op | 0x80),
 * status to a pc_status_t and budget to 0, in the version of the request;
 * on PC_OK the payload is the reply body, otherwise it is an error message.
 *
 * Versions: clients send version 2. A server serves versions 1 and 2
 * (a version-1 request has no deadline) and refuses any other with an error
 * reply in version 1, whose header every version begins with; so a client
 * of version 2 talking to a server of version 1 gets "unsupported protocol
 * version 2 (this server speaks 1)" for its calls.
 *
 * Reserved ops: PC_RPC_OP_HELLO and PC_RPC_OP_AUTH (the secret's
 * challenge-response, below) and PC_RPC_OP_PING (empty). A service's own
 * ops are 0x10..0x7f.
 *
 * Authentication. With TLS, the handshake authenticates both ends by
 * certificate before any frame. With a secret (or a system secret), the
 * secret never travels: the client sends HELLO (id 0, payload: a random
 * 32-byte client nonce); the server answers with a random 32-byte server
 * nonce; the client sends AUTH (id 0, payload: u8 which secret, 0 the data
 * secret or 1 the system secret, then HMAC-SHA256(secret, "percolator
 * client" server_nonce client_nonce)); the server compares it in constant
 * time and answers with HMAC-SHA256(secret, "percolator server" client_nonce
 * server_nonce), which the client checks before it sends anything else. A
 * server without a secret answers HELLO with an empty payload. Until a
 * connection has authenticated, its frames are at most
 * PC_RPC_PREAUTH_MAX_FRAME bytes and only HELLO and AUTH are served.
 *
 * Identity. A connection's role is PC_RPC_ROLE_SYSTEM or PC_RPC_ROLE_DATA:
 * system when every configured mechanism says so (a certificate name in the
 * system list; the system secret, or the secret when there is no system
 * secret), data otherwise; a server with neither TLS nor a secret treats
 * every peer as the system. Handlers read it (pc_rpc_current_role) to refuse
 * data clients the operations only the system performs.
 *
 * A peer that closes its side of the connection (EOF, a half-close included)
 * is taken to have gone: the requests it sent before are still answered,
 * but those in service are abandoned, so long ones stop early with
 * PC_TIMEOUT.
 *
 * Hostile input: a frame with a bad version, a length below the header or
 * above max_frame, or a failed authentication gets an error reply naming the
 * fault and the connection is closed; an unknown op gets an error reply and
 * the connection stays. A connection that starts a frame and does not finish
 * it within frame_timeout_ms is closed (slow senders cannot pin memory), so
 * is one idle for idle_timeout_ms, and one that has not authenticated within
 * auth_timeout_ms. Memory is bounded per server (docs/ARCHITECTURE.md,
 * "Memory stays bounded"): each connection has at most max_inflight requests
 * in service; request bytes being received or served share request_memory
 * (a connection waits for room; frames up to 64 KiB have a request_memory of
 * their own, so large frames cannot starve them); replies nobody has read
 * share reply_memory
 * (past it, the connection with the most unread bytes is closed), a
 * connection with more than 8 MiB unread is no longer read, and one whose
 * replies make no progress for reply_timeout_ms is closed; connections are
 * capped in total, per peer address and while unauthenticated (the oldest
 * unauthenticated connection makes room for a new one). Protocol errors are
 * logged at most a few times a second.
 */
#ifndef PC_NET_RPC_H
#define PC_NET_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "base/buf.h"

#define PC_RPC_VERSION 2    /* what clients send */
#define PC_RPC_VERSION_1 1  /* the oldest a server serves: no budget field */
#define PC_RPC_HEADER 15    /* version, op, status, id, budget (after the length) */
#define PC_RPC_HEADER_V1 11 /* version, op, status, id */
#define PC_RPC_DEFAULT_MAX_FRAME (80u << 20)
#define PC_RPC_PREAUTH_MAX_FRAME 256u /* before a connection has authenticated */
#define PC_RPC_NONCE 32
#define PC_RPC_MAC 32
#define PC_RPC_OP_HELLO 0x01
#define PC_RPC_OP_PING 0x02
#define PC_RPC_OP_AUTH 0x03
#define PC_RPC_OP_REPLY 0x80

/* Who a connection's peer is (see "Identity" above). */
typedef enum pc_rpc_role {
  PC_RPC_ROLE_NONE = 0,   /* not allowed */
  PC_RPC_ROLE_DATA = 1,   /* a data client: reads and writes of user tables */
  PC_RPC_ROLE_SYSTEM = 2, /* the system: the daemons, their workers, operators */
} pc_rpc_role_t;

struct pc_tls;
typedef struct pc_tls pc_tls_t;

/* The credentials of a server (what it admits, and with which role) or of a
 * client (what it presents: its certificate, and the system secret when it
 * has one, else the secret). Borrowed by the calls that take it: strings are
 * copied, tls gets a reference. NULL, or all fields NULL: no authentication. */
typedef struct pc_rpc_auth {
  const char *secret;        /* the data clients' secret (the system's when system_secret is NULL) */
  const char *system_secret; /* the system's own secret */
  pc_tls_t *tls;             /* certificates (net/tls.h); NULL: plain TCP */
} pc_rpc_auth_t;

/* Serves one request on a worker thread: body[0..len) is the payload. Appends
 * the reply body to reply and returns PC_OK, or returns an error status with
 * err's text, which is sent back as the error message. */
typedef pc_status_t (*pc_rpc_handler_fn)(void *ctx, uint8_t op, const char *body, size_t len,
                                         pc_buf_t *reply, pc_error_t *err);

typedef struct pc_rpc_server_options {
  const char *name;          /* for log lines and metrics, e.g. "tablet" */
  const char *host;          /* default "127.0.0.1" */
  uint16_t port;             /* 0: an ephemeral port (see pc_rpc_server_port) */
  const pc_rpc_auth_t *auth; /* NULL: no authentication, every peer is the system */
  uint32_t workers;          /* handler threads (default 4) */
  uint32_t max_frame;        /* default PC_RPC_DEFAULT_MAX_FRAME */
  uint32_t max_inflight;     /* per connection (default 64) */
  uint32_t frame_timeout_ms; /* default 10000 */
  uint32_t idle_timeout_ms;  /* default 300000 */
  uint32_t max_connections;  /* default 1024; more are accepted and closed at once, unless an
                                unauthenticated one can be closed to make room */
  uint32_t max_connections_per_peer; /* per peer IP address (default 512) */
  uint32_t max_unauthenticated;      /* default 64; the oldest is closed to admit another */
  uint32_t auth_timeout_ms;          /* default 5000 */
  size_t request_memory;             /* bytes (default 256 MiB) */
  size_t reply_memory;               /* bytes (default 256 MiB) */
  uint32_t reply_timeout_ms;         /* default 30000 */
  /* Called on the server's I/O thread when a connection closes, for whatever
   * reason (the peer closed or died, a protocol error, a timeout, the server
   * stopping), with the id pc_rpc_current_connection() gave its requests. */
  void (*on_close)(void *ctx, uint64_t connection);
  /* Ops whose handler is short and has no side effects (reads) may run on
   * the I/O thread itself, saving the hand-off to a worker and back (two
   * thread switches): return 1 for them. There the handler may not wait for
   * another thread's work (base/deadline.h's pc_nowait_*): one that would
   * is dropped at that point and run again from the start by a worker. What
   * it may still block on is short: a mutex held for a memory update, a read
   * from disk of data not in the page cache. NULL: every request goes to a
   * worker. */
  int (*runs_inline)(uint8_t op);
  /* Clients that this process creates for host:port afterwards (with
   * credentials this server admits) call the handler on their own thread,
   * without a socket, with the role those credentials give;
   * clients of other processes are served over the network as ever. For the
   * daemons, whose own workers and collector are clients of the roles they
   * serve. A handler then also runs on callers' threads. */
  int in_process;
} pc_rpc_server_options_t;

/* Inside a handler: the id of the connection the request came on (ids are
 * unique per server, from 1). 0 outside a handler. Lets a service tie state
 * to a client's connection. */
uint64_t pc_rpc_current_connection(void);

/* Inside a handler: the role of the connection the request came on.
 * PC_RPC_ROLE_SYSTEM outside a handler (a direct call is the process's own). */
pc_rpc_role_t pc_rpc_current_role(void);

typedef struct pc_rpc_server pc_rpc_server_t;

/* Binds and starts serving on its own threads. Returns NULL on error (the
 * message names host:port). Release with pc_rpc_server_stop. */
pc_rpc_server_t *pc_rpc_server_start(const pc_rpc_server_options_t *opts,
                                     pc_rpc_handler_fn handler, void *ctx, pc_error_t *err);

/* The port actually bound. */
uint16_t pc_rpc_server_port(const pc_rpc_server_t *s);

/* Counters for /metrics: connections accepted and open, requests served,
 * protocol errors, bytes in and out; requests in service now (queued or
 * running, including calls of in-process clients), and requests that ended
 * (or were not run) past their deadline or abandoned: their connection
 * closed, or the server stopped; connections refused or closed by a limit,
 * failed authentications, requests refused to data clients; request and
 * reply bytes held now. */
typedef struct pc_rpc_server_stats {
  uint64_t connections_accepted, connections_open, requests, protocol_errors, bytes_in,
      bytes_out;
  uint64_t in_service, abandoned;
  uint64_t inline_served, inline_deferred; /* ops that run inline: served on the I/O thread,
                                              or sent on to a worker because they would wait */
  uint64_t connections_refused, auth_failures, request_memory, reply_memory;
} pc_rpc_server_stats_t;
void pc_rpc_server_stats(const pc_rpc_server_t *s, pc_rpc_server_stats_t *out);

/* How long a server's requests took, per op: from a request's arrival to
 * its reply being ready to send (an in-process call: its handler's run),
 * every request answered counted, failures too, as a Prometheus histogram
 * in seconds. pc_rpc_latency_bounds are the buckets' upper bounds. */
#define PC_RPC_LATENCY_BUCKETS 14
extern const double pc_rpc_latency_bounds[PC_RPC_LATENCY_BUCKETS];
typedef struct pc_rpc_op_latency {
  uint64_t le[PC_RPC_LATENCY_BUCKETS]; /* requests at most bounds[i] long: cumulative */
  uint64_t count;                      /* every request (the +Inf bucket) */
  double sum_seconds;
} pc_rpc_op_latency_t;
/* Fills *out for op; returns 0 when no request of op was answered yet. */
int pc_rpc_server_latency(const pc_rpc_server_t *s, uint8_t op, pc_rpc_op_latency_t *out);

/* Stops accepting and reading, waits for the requests being served to be
 * answered (so nothing acknowledged is lost) for at most
 * PC_RPC_STOP_GRACE_MS, then marks those still running abandoned (long
 * handlers stop at their next step, base/deadline.h), sends the replies that
 * brings for up to a second more, and closes every connection; joins its
 * threads once the handlers have returned, and frees the server. A handler that checks between steps returns within a step;
 * one blocked elsewhere (a disk write) when that returns. */
#define PC_RPC_STOP_GRACE_MS 5000
void pc_rpc_server_stop(pc_rpc_server_t *s);

/* The first half of pc_rpc_server_stop, without waiting: stops accepting
 * and reading from sockets now and starts the grace (in-process clients are
 * still served until pc_rpc_server_stop). A process with many servers calls
 * it on each first, so that their graces run at once, then stops them in
 * the order their dependencies need. */
void pc_rpc_server_stop_begin(pc_rpc_server_t *s);

typedef struct pc_rpc_client pc_rpc_client_t;

/* A client of one server at host:port presenting auth (NULL: nothing). It
 * connects lazily, keeps one connection (multiplexing concurrent calls by
 * id) and reconnects with backoff after failures. Returns NULL on error;
 * release with pc_rpc_client_destroy. Thread-safe. */
pc_rpc_client_t *pc_rpc_client_create(const char *host, uint16_t port, const pc_rpc_auth_t *auth,
                                      pc_error_t *err);

/* How a client treats a server that cannot be reached. All zero (or a NULL
 * pointer): as pc_rpc_client_create's clients do. */
typedef struct pc_rpc_client_options {
  /* By default a call waits through failed connection attempts, retried
   * with backoff, until its deadline: the server may be restarting. With
   * fail_on_refusal, an attempt that the network refuses definitely
   * (ECONNREFUSED: nothing listens at the port; EHOSTUNREACH or
   * ENETUNREACH: no way to the host) fails at once, with PC_UNAVAILABLE and
   * "connection to host:port refused" (or the reason), the calls that were
   * waiting for it; none of them was sent (pc_rpc_call_sent's *sent is 0).
   * An attempt that times out is no refusal: its calls keep waiting. Calls
   * made later start new attempts after the usual backoff, so a server that
   * comes back is found. For callers that can do better than wait: look
   * the server up again, or tell their own caller at once. */
  int fail_on_refusal;
} pc_rpc_client_options_t;

/* pc_rpc_client_create with options (opts is borrowed; NULL: the defaults). */
pc_rpc_client_t *pc_rpc_client_create_opts(const char *host, uint16_t port,
                                           const pc_rpc_auth_t *auth,
                                           const pc_rpc_client_options_t *opts, pc_error_t *err);

/* The errno of the definite refusal (as fail_on_refusal defines it) that
 * ended c's last connection attempt, or 0: that attempt was not refused,
 * or a connection has been made since. A view of now, for messages: the
 * server may come back at any time. Thread-safe. */
int pc_rpc_client_refused(pc_rpc_client_t *c);

/* Sends a request and waits for its reply for at most timeout_ms, which the
 * request carries as its budget (the server stops working on it then). PC_OK: the
 * reply body is appended to reply. A server-side error returns that status
 * with its message; PC_TIMEOUT when no reply came in time; PC_UNAVAILABLE
 * when the server cannot be reached (the message names host:port); PC_DENIED
 * when it refused this client's credentials (nothing was sent). */
pc_status_t pc_rpc_call(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                        uint32_t timeout_ms, pc_buf_t *reply, pc_error_t *err);

/* pc_rpc_call that also says whether the request may have reached the
 * server: *sent = 0 when it was never handed to a connection (nobody
 * listens, the link is down, the client is closing), so it had no effect;
 * 1 otherwise, even when it failed (a connection lost while the request was
 * in flight, a timeout: it may have been applied). */
pc_status_t pc_rpc_call_sent(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                             uint32_t timeout_ms, pc_buf_t *reply, int *sent, pc_error_t *err);

/* A call started with pc_rpc_start and not yet finished. */
typedef struct pc_rpc_pending pc_rpc_pending_t;

/* Sends a request without waiting for its reply, so that one thread can
 * have calls to several servers (or several to one) in flight at once; the
 * timeout counts from now. Every call it returns must be passed to
 * pc_rpc_finish exactly once, which waits for the reply and releases it.
 * NULL (err set) when the call cannot start: a bad argument, no memory, the
 * client being destroyed. A client that reaches a server of its own process
 * (in_process) runs the handler here, before returning. */
pc_rpc_pending_t *pc_rpc_start(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                               uint32_t timeout_ms, pc_error_t *err);

/* Waits for the reply of p (until its deadline), releases p, and returns what
 * pc_rpc_call_sent would have: the reply body appended to reply on PC_OK,
 * and *sent (sent may be NULL) saying whether the request may have reached
 * the server. */
pc_status_t pc_rpc_finish(pc_rpc_pending_t *p, pc_buf_t *reply, int *sent, pc_error_t *err);

/* Waits at most ms (and never past p's deadline) for p's reply without
 * finishing p: 1 when p is done (or its deadline passed), 0 while it still
 * waits. An in-process call is done at once. */
int pc_rpc_wait(pc_rpc_pending_t *p, uint32_t ms);

/* Gives p up: its deadline becomes now, so pc_rpc_finish returns at once
 * (PC_TIMEOUT unless the reply is already there). */
void pc_rpc_expire(pc_rpc_pending_t *p);

/* Fails the calls in flight with PC_UNAVAILABLE, closes, frees. */
void pc_rpc_client_destroy(pc_rpc_client_t *c);

/* ---- test hooks: for tests and fuzz targets only ----
 * Not part of libpercolator's interface (not exported) and never used by the
 * daemons or the library itself: they let a harness in the process hand the
 * rpc code a connected socket (one end of a socketpair) instead of a TCP
 * connection, so that thousands of connections a second cost no port, no
 * accept and no handshake. Without them nothing changes. */

/* Returns a connected stream socket that the client then owns, or -1 (the
 * attempt fails as a refused connect would). */
typedef int (*pc_rpc_test_connect_fn)(void *ctx);

/* A client as pc_rpc_client_create's, for a harness: every connection
 * attempt calls fn(ctx) for its socket instead of resolving host:port and
 * connecting (TLS, when auth has it, still runs over that socket), and the
 * socket counts as connected at once; attempts after a failure follow each
 * other without the backoff wait (the wait itself is not tested through the
 * hook). It has no thread of its own: its event loop runs on the caller's
 * thread inside pc_rpc_test_finish, so its calls are made with pc_rpc_start
 * and pc_rpc_test_finish, one at a time. Release with pc_rpc_client_destroy.
 * A server of this process registered for host:port (in_process) answers it
 * as it answers any client. */
pc_rpc_client_t *pc_rpc_client_test_create(const char *host, uint16_t port,
                                           const pc_rpc_auth_t *auth, pc_rpc_test_connect_fn fn,
                                           void *ctx, pc_error_t *err);

/* pc_rpc_finish for a call of such a client: runs the client's event loop
 * here until the call is done or its deadline passes, then finishes it. For
 * any other call it is pc_rpc_finish. */
pc_status_t pc_rpc_test_finish(pc_rpc_pending_t *p, pc_buf_t *reply, int *sent,
                               pc_error_t *err);

/* Hands fd, a connected stream socket, to s as if it had been accepted from
 * 127.0.0.1 (limits, authentication and timeouts as for any connection); s
 * owns it from now on, even when this fails. Safe from any thread. 0, or -1
 * (out of memory; fd closed). */
int pc_rpc_server_test_adopt(pc_rpc_server_t *s, int fd);

/* Parses "host:port" (port required, 1..65535 or 0 when allow_zero). */
pc_status_t pc_parse_endpoint(const char *text, int allow_zero, char *host, size_t hostcap,
                              uint16_t *port, pc_error_t *err);

#endif
