/* tso_election.h — the server side of the timestamp oracle with standbys:
 * an oracle process's place in an election held in ZooKeeper
 * (lockservice/zk.h; the nodes are laid out in tso_wire.h), the bound it
 * keeps there behind a fenced write, the lease it serves under, and the
 * rpc.h handler that serves tso_wire.h's ops while it leads. Its clients
 * follow the leader with tso_locator.h.
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
 * What an oracle reads there it checks before it trusts it: a candidate
 * that is not an ephemeral node of a system session is no oracle (it is
 * passed over, by the oracles as by their clients: lockservice/coord.h's
 * pc_coord_system_node), and a bound more than PC_TSO_BOUND_AHEAD_MAX_MS
 * beyond this machine's clock is no bound an oracle wrote: the oracle does
 * not lead from it, and says why (its log, and its answer to callers) and
 * how to set it right. */
#ifndef PC_TSO_TSO_ELECTION_H
#define PC_TSO_TSO_ELECTION_H

#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "tso/oracle.h"
#include "tso/tso_wire.h"

typedef struct pc_tso_node pc_tso_node_t;

/* How far beyond the clock of the oracle that reads it a bound may be: an
 * oracle writes its clock plus its window (at most 10 minutes), more only
 * when clients asked for timestamps faster than the clock gives them
 * (2^18 a millisecond: days of the most a server answers), or when its
 * clock ran far ahead of the reader's. 30 days. */
#define PC_TSO_BOUND_AHEAD_MAX_MS (30ull * 24 * 3600 * 1000)

typedef struct pc_tso_node_options {
  pc_zk_options_t zk; /* the ensemble, the cluster's root, its secrets (copied) */
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
 * lease answers PC_UNAVAILABLE naming the leader it knows of (and, when its
 * turn came and it could not lead, why). */
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
  char leader[PC_TSO_ADDR_CAP];
} pc_tso_node_info_t;
void pc_tso_node_info(pc_tso_node_t *node, pc_tso_node_info_t *out);

#endif
