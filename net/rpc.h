/* rpc.h — the one request/response protocol of every daemon (tablet, tso,
 * lockd), on libevent bufferevents.
 *
 * Wire format; every integer big-endian:
 *
 *   frame   := length:u32  version:u8  op:u8  status:u8  id:u64  payload
 *
 * length counts the bytes after itself (>= PC_RPC_HEADER, <= max_frame).
 * A request carries status 0 and a caller-chosen id; many requests may be in
 * flight on one connection and replies may come back in any order. The reply
 * echoes the id, sets op to (request op | 0x80) and status to a pc_status_t;
 * on PC_OK the payload is the reply body, otherwise it is an error message.
 *
 * Reserved ops: PC_RPC_OP_HELLO (payload: the shared secret; must be the
 * first frame when the server has a secret) and PC_RPC_OP_PING (empty). A
 * service's own ops are 0x10..0x7f.
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

#define PC_RPC_VERSION 1
#define PC_RPC_HEADER 11 /* version, op, status, id (after the length) */
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
 * protocol errors, bytes in and out. */
typedef struct pc_rpc_server_stats {
  uint64_t connections_accepted, connections_open, requests, protocol_errors, bytes_in,
      bytes_out;
} pc_rpc_server_stats_t;
void pc_rpc_server_stats(const pc_rpc_server_t *s, pc_rpc_server_stats_t *out);

/* Stops accepting, waits for the requests being served to be answered (so
 * nothing acknowledged is lost), closes every connection, joins its threads
 * and frees the server. */
void pc_rpc_server_stop(pc_rpc_server_t *s);

typedef struct pc_rpc_client pc_rpc_client_t;

/* A client of one server at host:port. It connects lazily, keeps one
 * connection (multiplexing concurrent calls by id) and reconnects with
 * backoff after failures. Returns NULL on error; release with
 * pc_rpc_client_destroy. Thread-safe. */
pc_rpc_client_t *pc_rpc_client_create(const char *host, uint16_t port, const char *secret,
                                      pc_error_t *err);

/* Sends a request and waits for its reply for at most timeout_ms. PC_OK: the
 * reply body is appended to reply. A server-side error returns that status
 * with its message; PC_TIMEOUT when no reply came in time; PC_UNAVAILABLE
 * when the server cannot be reached (the message names host:port). */
pc_status_t pc_rpc_call(pc_rpc_client_t *c, uint8_t op, const void *body, size_t len,
                        uint32_t timeout_ms, pc_buf_t *reply, pc_error_t *err);

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
 * pc_rpc_call would have: the reply body appended to reply on PC_OK. */
pc_status_t pc_rpc_finish(pc_rpc_pending_t *p, pc_buf_t *reply, pc_error_t *err);

/* Fails the calls in flight with PC_UNAVAILABLE, closes, frees. */
void pc_rpc_client_destroy(pc_rpc_client_t *c);

/* Parses "host:port" (port required, 1..65535 or 0 when allow_zero). */
pc_status_t pc_parse_endpoint(const char *text, int allow_zero, char *host, size_t hostcap,
                              uint16_t *port, pc_error_t *err);

#endif
