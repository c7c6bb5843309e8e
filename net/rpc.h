/* rpc.h — the one request/response protocol of every daemon (tablet, tso,
 * lockd), on libevent bufferevents.
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
 * through core/deadline.h, so that long work stops between steps. Many
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
 * Reserved ops: PC_RPC_OP_HELLO (payload: the shared secret; must be the
 * first frame when the server has a secret) and PC_RPC_OP_PING (empty). A
 * service's own ops are 0x10..0x7f.
 *
 * A peer that closes its side of the connection (EOF, a half-close included)
 * is taken to have gone: the requests it sent before are still answered,
 * but those in service are abandoned, so long ones stop early with
 * PC_TIMEOUT.
 *
 * Hostile input: a frame with a bad version, a length below the header or
 * above max_frame, or a wrong secret gets an error reply naming the fault and
 * the connection is closed; an unknown op gets an error reply and the
 * connection stays. A connection that starts a frame and does not finish it
 * within frame_timeout_ms is closed (slow senders cannot pin memory), and so
 * is one idle for idle_timeout_ms. Each connection has at most max_inflight
 * requests being served; beyond that the server stops reading from it.
 */
#ifndef PC_NET_RPC_H
#define PC_NET_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "core/keys.h"

#define PC_RPC_VERSION 2    /* what clients send */
#define PC_RPC_VERSION_1 1  /* the oldest a server serves: no budget field */
#define PC_RPC_HEADER 15    /* version, op, status, id, budget (after the length) */
#define PC_RPC_HEADER_V1 11 /* version, op, status, id */
#define PC_RPC_DEFAULT_MAX_FRAME (80u << 20)
#define PC_RPC_OP_HELLO 0x01
#define PC_RPC_OP_PING 0x02
#define PC_RPC_OP_REPLY 0x80

/* Serves one request on a worker thread: body[0..len) is the payload. Appends
 * the reply body to reply and returns PC_OK, or returns an error status with
 * err's text, which is sent back as the error message. */
typedef pc_status_t (*pc_rpc_handler_fn)(void *ctx, uint8_t op, const char *body, size_t len,
                                         pc_buf_t *reply, pc_error_t *err);

typedef struct pc_rpc_server_options {
  const char *name;          /* for log lines and metrics, e.g. "tablet" */
  const char *host;          /* default "127.0.0.1" */
  uint16_t port;             /* 0: an ephemeral port (see pc_rpc_server_port) */
  const char *secret;        /* NULL or "": no authentication */
  uint32_t workers;          /* handler threads (default 4) */
  uint32_t max_frame;        /* default PC_RPC_DEFAULT_MAX_FRAME */
  uint32_t max_inflight;     /* per connection (default 64) */
  uint32_t frame_timeout_ms; /* default 10000 */
  uint32_t idle_timeout_ms;  /* default 300000 */
  uint32_t max_connections;  /* default 1024; more are accepted and closed at once */
  /* Called on the server's I/O thread when a connection closes, for whatever
   * reason (the peer closed or died, a protocol error, a timeout, the server
   * stopping), with the id pc_rpc_current_connection() gave its requests. */
  void (*on_close)(void *ctx, uint64_t connection);
  /* Ops whose handler never blocks (no disk wait, no lock wait) may run on the
   * I/O thread itself, saving the hand-off to a worker and back: return 1 for
   * them. NULL: every request goes to a worker. */
  int (*runs_inline)(uint8_t op);
  /* Clients that this process creates for host:port afterwards (with the
   * same secret) call the handler on their own thread, without a socket;
   * clients of other processes are served over the network as ever. For the
   * daemons, whose own workers and collector are clients of the roles they
   * serve. A handler then also runs on callers' threads. */
  int in_process;
} pc_rpc_server_options_t;

/* Inside a handler: the id of the connection the request came on (ids are
 * unique per server, from 1). 0 outside a handler. Lets a service tie state
 * to a client's connection, as lockd ties sessions. */
uint64_t pc_rpc_current_connection(void);

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
 * closed, or the server stopped. */
typedef struct pc_rpc_server_stats {
  uint64_t connections_accepted, connections_open, requests, protocol_errors, bytes_in,
      bytes_out;
  uint64_t in_service, abandoned;
} pc_rpc_server_stats_t;
void pc_rpc_server_stats(const pc_rpc_server_t *s, pc_rpc_server_stats_t *out);

/* Stops accepting and reading, waits for the requests being served to be
 * answered (so nothing acknowledged is lost) for at most
 * PC_RPC_STOP_GRACE_MS, then marks those still running abandoned (long
 * handlers stop at their next step, core/deadline.h), sends the replies that
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

/* A client of one server at host:port. It connects lazily, keeps one
 * connection (multiplexing concurrent calls by id) and reconnects with
 * backoff after failures. Returns NULL on error; release with
 * pc_rpc_client_destroy. Thread-safe. */
pc_rpc_client_t *pc_rpc_client_create(const char *host, uint16_t port, const char *secret,
                                      pc_error_t *err);

/* Sends a request and waits for its reply for at most timeout_ms, which the
 * request carries as its budget (the server stops working on it then). PC_OK: the
 * reply body is appended to reply. A server-side error returns that status
 * with its message; PC_TIMEOUT when no reply came in time; PC_UNAVAILABLE
 * when the server cannot be reached (the message names host:port). */
pc_status_t pc_rpc_call(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                        uint32_t timeout_ms, pc_buf_t *reply, pc_error_t *err);

/* pc_rpc_call that also says whether the request may have reached the
 * server: *sent = 0 when it was never handed to a connection (nobody
 * listens, the link is down, the client is closing), so it had no effect;
 * 1 otherwise, even when it failed (a connection lost while the request was
 * in flight, a timeout: it may have been applied). */
pc_status_t pc_rpc_call_sent(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                             uint32_t timeout_ms, pc_buf_t *reply, int *sent, pc_error_t *err);

/* Fails the calls in flight with PC_UNAVAILABLE, closes, frees. */
void pc_rpc_client_destroy(pc_rpc_client_t *c);

/* Parses "host:port" (port required, 1..65535 or 0 when allow_zero). */
pc_status_t pc_parse_endpoint(const char *text, int allow_zero, char *host, size_t hostcap,
                              uint16_t *port, pc_error_t *err);

#endif
