/* lockservice.h — the lock service: client sessions with a TTL
 * kept alive by the client, and leased named locks that die with their
 * session. Chubby's job in the paper, for two uses:
 *   liveness  every transaction lock records its owner's session; a resolver
 *             asks whether that session is alive and rolls back at once when
 *             it is gone;
 *   scanning  a worker holds the lock of a notification bucket while it scans.
 * It is never needed for safety: when it is down, resolution falls back to
 * TTLs and scanning to random buckets.
 *
 * Session ids are (epoch << 32 | counter), where epoch is chosen at random
 * when the service starts. A session of another epoch (from before a restart
 * of the service) is PC_LS_UNKNOWN, not dead: the service lost its memory, so
 * resolvers must fall back to the lock's TTL.
 *
 * Three layers: the in-process object (pc_ls_*), the RPC handler that serves
 * it (pc_ls_rpc_handler, used by `percolator lockd`), and the network client
 * (pc_ls_client_*) that keeps its own session alive in the background.
 */
#ifndef PC_LOCKSERVICE_LOCKSERVICE_H
#define PC_LOCKSERVICE_LOCKSERVICE_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "core/keys.h"
#include "net/rpc.h"

#define PC_LS_MAX_NAME 1024

typedef enum pc_ls_liveness {
  PC_LS_DEAD = 0,    /* this service issued the session and it is gone (closed or expired) */
  PC_LS_ALIVE = 1,
  PC_LS_UNKNOWN = 2  /* issued by another incarnation of the service: fall back to TTLs */
} pc_ls_liveness_t;

/* ---- in-process service ------------------------------------------------- */

typedef struct pc_ls pc_ls_t;

/* A new service with a fresh random epoch. Returns NULL on allocation failure.
 * Thread-safe. Expiry uses the monotonic clock. Release with pc_ls_destroy. */
pc_ls_t *pc_ls_create(void);
void pc_ls_destroy(pc_ls_t *ls);
uint32_t pc_ls_epoch(const pc_ls_t *ls);

/* Opens a session living ttl_ms (1..600000) past its last keep-alive. */
pc_status_t pc_ls_session_open(pc_ls_t *ls, uint32_t ttl_ms, uint64_t *session, pc_error_t *err);
/* Extends a session; PC_NOT_FOUND if it has expired or was closed. */
pc_status_t pc_ls_session_keepalive(pc_ls_t *ls, uint64_t session, pc_error_t *err);
/* Closes a session and releases its locks; PC_NOT_FOUND if unknown. */
pc_status_t pc_ls_session_close(pc_ls_t *ls, uint64_t session, pc_error_t *err);
pc_ls_liveness_t pc_ls_session_liveness(pc_ls_t *ls, uint64_t session);
/* Ties a session to a client connection (an rpc.h connection id): when that
 * connection closes — the client exited or was killed — pc_ls_connection_closed
 * ends the session at once, so its transactions' locks can be rolled back
 * without waiting for any TTL. PC_NOT_FOUND if the session is not alive. */
pc_status_t pc_ls_session_bind(pc_ls_t *ls, uint64_t session, uint64_t connection,
                               pc_error_t *err);
/* 1 when session may be used over connection: it is unbound, bound to that
 * connection, or not alive (the operation then fails as for any dead session). */
int pc_ls_session_usable_by(pc_ls_t *ls, uint64_t session, uint64_t connection);
/* Ends every session bound to connection; returns how many. */
size_t pc_ls_connection_closed(pc_ls_t *ls, uint64_t connection);
/* Number of live sessions (expired ones are reaped first). */
size_t pc_ls_session_count(pc_ls_t *ls);

/* Garbage collection's safe point in a cluster: each client
 * reports, with every keep-alive of its session, the oldest start_ts it holds
 * open, and GC asks for the minimum over live sessions.
 *
 * pc_ls_session_report records the latest report of session: oldest_ts is the
 * oldest start_ts of a transaction it holds open, UINT64_MAX when it holds
 * none. PC_NOT_FOUND if the session is not alive. A report dies with its
 * session (closed, expired, or its connection gone).
 *
 * pc_ls_oldest_reported reaps expired sessions, then returns the minimum of
 * the latest reports of the live sessions (UINT64_MAX when none has reported)
 * and, in *unreported (may be NULL), how many live sessions have not reported
 * yet. O(sessions). A report is only as fresh as the keep-alive that carried
 * it (one that was delayed in the network may even land after a later one):
 * a transaction begun since is not in it, so a safe point must also stay
 * behind the oracle by well more than a keep-alive period (the session TTL),
 * and a caller that needs every client counted treats unreported != 0 as
 * "not known yet". */
pc_status_t pc_ls_session_report(pc_ls_t *ls, uint64_t session, uint64_t oldest_ts,
                                 pc_error_t *err);
uint64_t pc_ls_oldest_reported(pc_ls_t *ls, size_t *unreported);

/* Tries to take lock `name` for session: *acquired = 1 when taken now or
 * already held by the same session; otherwise *holder is the holding session.
 * PC_NOT_FOUND if session is not alive. */
pc_status_t pc_ls_lock_try(pc_ls_t *ls, uint64_t session, const char *name, size_t nlen,
                           int *acquired, uint64_t *holder, pc_error_t *err);
/* Releases lock `name` if session holds it; PC_NOT_FOUND otherwise. */
pc_status_t pc_ls_lock_release(pc_ls_t *ls, uint64_t session, const char *name, size_t nlen,
                               pc_error_t *err);
/* The live session holding `name`, or 0. */
uint64_t pc_ls_lock_holder(pc_ls_t *ls, const char *name, size_t nlen);

/* ---- serving it over rpc.h ---------------------------------------------- */

/* ctx is the pc_ls_t *. A session opened over a connection is bound to it. */
pc_status_t pc_ls_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                              pc_buf_t *reply, pc_error_t *err);
/* The rpc.h on_close hook to pair with it (ctx is the pc_ls_t *). */
void pc_ls_rpc_on_close(void *ctx, uint64_t connection);

/* ---- network client ----------------------------------------------------- */

typedef struct pc_ls_client pc_ls_client_t;

/* Connects to lockd at host:port, opens a session with ttl_ms and keeps it
 * alive from a background thread (every ttl/3); each keep-alive carries the
 * report of pc_ls_client_set_reporter (UINT64_MAX until one is set), and a
 * newly opened session reports at once. If lockd is unreachable the
 * client is still created (its session is 0 until lockd answers) so callers
 * keep working on TTLs. Returns NULL only on bad arguments or allocation
 * failure; release with pc_ls_client_destroy (closes the session). */
pc_ls_client_t *pc_ls_client_create(const char *host, uint16_t port, const pc_rpc_auth_t *auth,
                                    uint32_t ttl_ms, pc_error_t *err);
void pc_ls_client_destroy(pc_ls_client_t *c);
/* This client's session (0 while none is open). */
uint64_t pc_ls_client_session(pc_ls_client_t *c);
/* From now on every keep-alive reports oldest(ctx) (see pc_ls_session_report:
 * the oldest start_ts this process holds open, UINT64_MAX for none), and one
 * is sent promptly with the new value. oldest is called from the keep-alive
 * thread, once per keep-alive: it must be thread-safe and fast (the
 * keep-alive waits for it, and so do a replacement of the reporter and
 * pc_ls_client_destroy, though no other call of this client does), and it
 * must not call this client. oldest NULL reverts to reporting UINT64_MAX.
 * When this returns, the previous reporter is not being called and never will
 * be again; so do not call it while holding a lock the reporter takes. The
 * caller's contract: ctx stays valid until the reporter is replaced or
 * pc_ls_client_destroy has returned (the client never frees it). Set it
 * before the process begins transactions, or they go unreported meanwhile. */
void pc_ls_client_set_reporter(pc_ls_client_t *c, uint64_t (*oldest)(void *ctx), void *ctx);
/* Asks lockd for pc_ls_oldest_reported: the minimum of the live sessions'
 * reports (UINT64_MAX: none) and how many live sessions have not reported.
 * Needs no session. oldest and unreported may be NULL. */
pc_status_t pc_ls_client_oldest(pc_ls_client_t *c, uint32_t timeout_ms, uint64_t *oldest,
                                size_t *unreported, pc_error_t *err);
/* Liveness of any session; PC_LS_UNKNOWN when lockd cannot be asked in timeout_ms. */
pc_ls_liveness_t pc_ls_client_liveness(pc_ls_client_t *c, uint64_t session, uint32_t timeout_ms);
pc_status_t pc_ls_client_lock_try(pc_ls_client_t *c, const char *name, size_t nlen,
                                  uint32_t timeout_ms, int *acquired, uint64_t *holder,
                                  pc_error_t *err);
pc_status_t pc_ls_client_lock_release(pc_ls_client_t *c, const char *name, size_t nlen,
                                      uint32_t timeout_ms, pc_error_t *err);
/* For `percolator status`: epoch, live session count, asked over an rpc.h
 * client of lockd without opening a session. */
struct pc_rpc_client;
pc_status_t pc_ls_remote_info(struct pc_rpc_client *rpc, uint32_t timeout_ms, uint32_t *epoch,
                              uint64_t *sessions, pc_error_t *err);
/* The same through a client (its endpoint named in errors). */
pc_status_t pc_ls_client_info(pc_ls_client_t *c, uint32_t timeout_ms, uint32_t *epoch,
                              uint64_t *sessions, pc_error_t *err);

#endif
