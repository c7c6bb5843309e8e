/* tso_zk.h — the timestamp oracle with standbys, coordinated through
 * ZooKeeper (lockservice/zk.h), and the client that follows its leader.
 *
 * Nodes under the cluster's root:
 *   tso/election/n-<seq>  ephemeral sequential, one per oracle process; data
 *                         "host:port" where it serves. The lowest leads; every
 *                         other one watches only its predecessor.
 *   tso/bound             the persisted upper bound (decimal text): every
 *                         timestamp ever served is below it. Written only as
 *                         {check(own election node), set(bound, expected
 *                         version)}, so a deposed leader's write fails.
 *
 * A leader serves only under a lease: half the session timeout from the
 * sending of its last request that confirmed its election node (a heartbeat
 * every sixth of the session timeout, and every fenced write). The session
 * outlives that instant by at least the session timeout, and a successor is
 * elected only once the session is gone, so a paused or partitioned leader
 * stops serving before another one starts. A new leader reads the bound
 * (after a sync), starts above it and persists a new window before serving.
 * Timestamps thus strictly increase across failovers, pauses and restarts.
 *
 * Clients (pc_tso_locator_*) read the leader's address from the election
 * nodes, keep a watch on them and move to the new leader on their own; a
 * timestamp request never waits on ZooKeeper (a background thread follows
 * the election, on the session of the client handle), only on the oracle. */
#ifndef PC_TSO_TSO_ZK_H
#define PC_TSO_TSO_ZK_H

#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "tso/oracle.h"

typedef struct pc_tso_node pc_tso_node_t;

typedef struct pc_tso_node_options {
  pc_zk_options_t zk; /* the ensemble, the cluster's root, its secret (copied) */
  uint32_t window_ms; /* how far ahead the bound is persisted (0: 3000) */
} pc_tso_node_options_t;

/* An oracle process's place in the election, not yet joined: its handler
 * (below) answers as a standby. Returns NULL on a bad option or allocation
 * failure; release with pc_tso_node_stop. */
pc_tso_node_t *pc_tso_node_create(const pc_tso_node_options_t *o, pc_error_t *err);
/* Starts the election thread, advertising "host:port" where the process
 * serves the node's handler: it joins the election, waits as a standby,
 * leads when its turn comes, and joins again as a standby when it loses its
 * session or its election node. Nothing here waits on ZooKeeper: a cluster
 * without quorum only delays its turn. */
pc_status_t pc_tso_node_join(pc_tso_node_t *node, const char *advertise, pc_error_t *err);
/* Leaves the election (a standby takes over at once) and frees the node. */
void pc_tso_node_stop(pc_tso_node_t *node);

/* The rpc.h handler of a node (ctx is the pc_tso_node_t *): the ops of
 * tso_wire.h, answered by the leader only; a standby or a leader without a
 * lease answers PC_UNAVAILABLE naming the leader it knows of. */
pc_status_t pc_tso_node_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                pc_buf_t *reply, pc_error_t *err);

/* For status and /metrics: whether it leads now (and serves under a lease),
 * how many times it was elected, the session's state (pc_zk_state_t, or -1
 * without a session), the highest timestamp it handed out since it last
 * became leader, and the leader's address as it last read it ("" unknown). */
typedef struct pc_tso_node_info {
  int leading;
  uint64_t elections;
  int zk_state;
  uint64_t last_ts;
  char leader[300];
} pc_tso_node_info_t;
void pc_tso_node_info(pc_tso_node_t *node, pc_tso_node_info_t *out);

/* ---- the client side ---------------------------------------------------- */

typedef struct pc_tso_locator pc_tso_locator_t;
struct pc_coord;

/* A client of whichever oracle leads the cluster, following the election on
 * coord's session (lockservice/coord.h: the client handle's one session;
 * coord must outlive the locator) from a background thread; auth's
 * credentials (copied; NULL: none) reach each leader. Returns NULL on error;
 * release with pc_tso_locator_destroy. */
pc_tso_locator_t *pc_tso_locator_on(struct pc_coord *coord, const pc_rpc_auth_t *auth,
                                    pc_error_t *err);
/* The same on a session of its own (a coordinator without a client node),
 * opened on the ensemble zo names, waiting at most timeout_ms for it
 * (PC_UNAVAILABLE otherwise), and closed with the locator. */
pc_tso_locator_t *pc_tso_locator_create(const pc_zk_options_t *zo, const pc_rpc_auth_t *auth,
                                        uint32_t timeout_ms, pc_error_t *err);
void pc_tso_locator_destroy(pc_tso_locator_t *l);

/* A pc_ts_fetch_fn (ctx is the locator): asks the leader it knows of, and
 * on failure waits (within timeout_ms) for the election to name another
 * one and asks it. */
pc_status_t pc_tso_locator_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                 pc_error_t *err);
/* The last timestamp the leader issued (tso_wire.h INFO). */
pc_status_t pc_tso_locator_info(pc_tso_locator_t *l, uint32_t timeout_ms, uint64_t *last,
                                pc_error_t *err);
/* The leader's address as last read ("" while none is known), and every
 * candidate's in election order, one per line, into buf (cap bytes). */
void pc_tso_locator_members(pc_tso_locator_t *l, char *leader, size_t lcap, char *all,
                            size_t acap);

#endif
