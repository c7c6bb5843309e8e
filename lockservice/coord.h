/* coord.h — the ZooKeeper side of a cluster client: its session, the
 * ephemeral node that says it is alive, the liveness of other clients, and
 * the oldest snapshot it holds open, for garbage collection. The lock
 * service's job in a cluster (lockservice.h is the in-process one of the
 * embedded store and the workers' claims).
 *
 * Nodes under the cluster's root:
 *   clients/<session, 16 hex digits>   ephemeral, one per client handle; data
 *       "<oldest start_ts> <host>:<pid>", the oldest start_ts the client holds
 *       open (18446744073709551615 when none), rewritten when it changes, at
 *       most every third of the session timeout: ZooKeeper's writes follow
 *       time, not transactions.
 *
 * A lock names its owner's session. A resolver asks pc_coord_liveness: a
 * session in the watched view of clients/ is alive; one missing from it is
 * confirmed (a sync, then a read of its node) before it is declared dead, so
 * a client is judged dead only once ZooKeeper has removed its node, which it
 * does when the session ends: closed, or expired one session timeout after
 * the client was last heard from. ZooKeeper unreachable: PC_LS_UNKNOWN, and
 * resolution falls back to lock leases, as it never needs liveness for
 * safety. */
#ifndef PC_LOCKSERVICE_COORD_H
#define PC_LOCKSERVICE_COORD_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "lockservice/lockservice.h"

typedef struct pc_coord pc_coord_t;

/* Opens a session on the ensemble under root and creates this client's node
 * (waiting at most timeout_ms: PC_UNAVAILABLE otherwise), then keeps both
 * from a background thread: a session that expires is replaced by a new one
 * with a new node (locks written under the old one are then dead owners').
 * Returns NULL on error; release with pc_coord_close (its node goes at once). */
pc_coord_t *pc_coord_open(const char *connect, const char *root, uint32_t session_timeout_ms,
                          uint32_t timeout_ms, pc_error_t *err);
void pc_coord_close(pc_coord_t *c);

/* The session that this client's node names, 0 while it has none (between
 * an expiry and the new node). */
uint64_t pc_coord_session(pc_coord_t *c);

/* Whether session's client is alive; ZooKeeper is asked (within
 * timeout_ms) only when the watched view does not list it. */
pc_ls_liveness_t pc_coord_liveness(pc_coord_t *c, uint64_t session, uint32_t timeout_ms);

/* From now on this client's node reports oldest(ctx) (the oldest start_ts it
 * holds open, UINT64_MAX for none). oldest is called from the background
 * thread; it must be thread-safe and fast. ctx must stay valid until the
 * reporter is replaced or the coordinator closed. */
void pc_coord_set_reporter(pc_coord_t *c, uint64_t (*oldest)(void *ctx), void *ctx);

/* The minimum of the live clients' reports (UINT64_MAX: none) and how many
 * live clients have not reported yet, read from ZooKeeper. */
pc_status_t pc_coord_oldest(pc_coord_t *c, uint32_t timeout_ms, uint64_t *oldest,
                            size_t *unreported, pc_error_t *err);

/* Takes lock `name` (letters, digits, '.', '_', '-') for this client's
 * session: the ephemeral node locks/<name> holding the session. *mine = 1
 * when this session holds it, 0 when another does. It goes with the
 * session. */
pc_status_t pc_coord_lock(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *mine,
                          pc_error_t *err);

/* The live clients as the view last saw them: their count, and the session
 * state (pc_zk_state_t, -1 without a session), for status and /metrics. */
size_t pc_coord_client_count(pc_coord_t *c);
int pc_coord_zk_state(pc_coord_t *c);

#endif
