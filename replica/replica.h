/* replica.h — replicated tablets: each tablet a Raft group (Debian's
 * libraft, the C Raft of dqlite), whose state machine is the tablet's
 * LevelDB store; a tablet server hosts replicas of many tablets (multi-Raft)
 * on one host object: one thread runs every group's Raft (libraft is
 * single-threaded), one writer syncs their logs together (raft_log.h),
 * and their messages travel on the server's own rpc port (repl_wire.h).
 *
 * What the tablet handler sees is a pc_store_t per replica
 * (pc_replica_store): the row operations of store.h, run only where this
 * replica leads. A write's checks read what this leader has applied, its
 * batch becomes a log entry, and it returns once a majority has made the
 * entry durable and this replica has applied it (core/store_repl.h). A
 * read is served only under the leader's lease (docs/ARCHITECTURE.md,
 * "Replicated tablets", gives the argument). Elsewhere a call is refused
 * with PC_UNAVAILABLE, "tablet T: server S does not lead it (leader: L at
 * host:port)", which tells a client where to go; it had no effect. */
#ifndef PC_REPLICA_REPLICA_H
#define PC_REPLICA_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "core/store.h"
#include "net/rpc.h"
#include "replica/repl_wire.h"

typedef struct pc_repl_host pc_repl_host_t;
typedef struct pc_replica pc_replica_t;

/* Where server (a name of the configuration) listens now: "host:port" into
 * endpoint. Called from the host's threads, never its Raft thread's
 * critical path (senders and snapshot fetches). */
typedef pc_status_t (*pc_repl_resolve_fn)(void *ctx, const char *server, char *endpoint,
                                          size_t cap, pc_error_t *err);

/* Called on a thread of the host's (not the Raft thread) when a replica of
 * this host has begun to lead group in term and serves, and when it stops
 * (term 0): the daemon publishes it in ZooKeeper's tablet map. */
typedef void (*pc_repl_leader_fn)(void *ctx, const char *group, uint64_t term);

typedef struct pc_repl_options {
  const char *server; /* this server's name */
  const char *dir;    /* its directory: raft/ and replicas/ */
  /* how long followers go without hearing from their leader before one
   * stands for election: libraft waits a random time between half of it
   * and all of it; a leader's lease lasts less than the half */
  uint32_t election_timeout_ms;
  uint32_t heartbeat_ms;      /* a leader's heartbeats when idle */
  uint32_t snapshot_entries;  /* entries applied between two snapshots of a replica */
  uint32_t snapshot_trailing; /* entries a snapshot keeps in the log for slow followers */
  const pc_rpc_auth_t *auth;  /* what the host's links to other servers present */
  pc_repl_resolve_fn resolve;
  void *resolve_ctx;
  pc_repl_leader_fn on_leader;
  void *on_leader_ctx;
  pc_local_options_t store; /* the replicas' LevelDB options (sync is ignored: the log syncs) */
  /* Creates this server's replica of group when its leader asks (CREATE):
   * an empty one (pc_repl_host_replica with PC_REPLICA_JOIN) served like
   * the others. NULL: this server takes no new replicas. */
  pc_status_t (*on_create)(void *ctx, const char *group, pc_replica_t **out, pc_error_t *err);
  void *on_create_ctx;
  /* the incarnation a directory found empty takes: 0 only for a server's
   * first start ever (the daemon knows from ZooKeeper), so that a server
   * whose disk was lost comes back under a new one */
  uint64_t fresh_incarnation;
} pc_repl_options_t;

/* 1 when dir holds no server state (a first start, or a lost disk). */
int pc_repl_dir_fresh(const char *dir);

/* Opens the host of the server in o->dir (creating it): its Raft log
 * store, its identity (name and incarnation: a directory found empty takes
 * o->fresh_incarnation, so that a replica that lost its state never takes
 * part under the identity it voted and acknowledged with), and its Raft
 * thread.
 * *fresh = 1 when the directory held no state. NULL on error; release with
 * pc_repl_host_close. */
pc_repl_host_t *pc_repl_host_open(const pc_repl_options_t *o, int *fresh, pc_error_t *err);

/* Stops every replica (pending proposals fail), the thread and the senders,
 * and closes the stores. The proxies of pc_replica_store are invalid after,
 * and so is h: stop the rpc server that calls pc_repl_rpc_handler first. */
void pc_repl_host_close(pc_repl_host_t *h);

/* The incarnation of this server's directory. */
uint64_t pc_repl_host_incarnation(const pc_repl_host_t *h);

/* How this server takes part in a group it has no state of yet. */
typedef enum pc_replica_start {
  PC_REPLICA_EXISTING = 0,  /* it must have state here (refused otherwise) */
  PC_REPLICA_BOOTSTRAP = 1, /* it is one of the group's first voters: the initial
                               configuration at index 1 is voters' incarnation 0 */
  PC_REPLICA_JOIN = 2,      /* an empty replica under this incarnation, added by the
                               group's leader (pc_replica_member), given a snapshot */
} pc_replica_start_t;

/* Opens this server's replica of group (a tablet's name): from its state
 * in the log store when there is some (start is then ignored), else as
 * start says. voters: the servers of the initial configuration
 * (PC_REPLICA_BOOTSTRAP). The replica serves from now on. *out is owned by
 * the host. */
pc_status_t pc_repl_host_replica(pc_repl_host_t *h, const char *group, pc_replica_start_t start,
                                 const char *const *voters, size_t nvoters, pc_replica_t **out,
                                 pc_error_t *err);

/* Calls fn for each group this server holds state of. */
void pc_repl_host_groups(pc_repl_host_t *h, void (*fn)(void *ctx, const char *group), void *ctx);

/* Whether this server holds state of group. */
int pc_repl_host_has(pc_repl_host_t *h, const char *group);

/* The store the tablet handler serves group with (owned by the replica). */
pc_store_t *pc_replica_store(pc_replica_t *r);

/* This replica's Raft id and address ("server#incarnation"). */
uint64_t pc_replica_id(const pc_replica_t *r);

/* The state of r now (for REPLICAS, status and metrics). */
void pc_replica_info(pc_replica_t *r, pc_replica_info_t *out);

/* What a replica counted, for /metrics: how often the leader it knows of
 * changed, and how long its row operations' entries took from proposal to
 * applied (the buckets of net/rpc.h's pc_rpc_latency_bounds, cumulative). */
typedef struct pc_replica_stats {
  uint64_t leader_changes;
  uint64_t proposals;
  double proposal_seconds;
  uint64_t proposal_le[PC_RPC_LATENCY_BUCKETS];
} pc_replica_stats_t;
void pc_replica_stats(pc_replica_t *r, pc_replica_stats_t *out);

/* Waits until r leads and serves, or a leader is known elsewhere, for at
 * most timeout_ms: 1 when r leads, 0 otherwise. For tests and verbs. */
int pc_replica_wait_leader(pc_replica_t *r, uint32_t timeout_ms);

/* The replication ops (repl_wire.h) of the host's server: ctx is the host.
 * Only the system identity may call them. */
pc_status_t pc_repl_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                pc_buf_t *reply, pc_error_t *err);

/* Membership, on the group's leader (PC_UNAVAILABLE naming the leader
 * elsewhere): add a replica on server (it creates an empty one, which
 * catches up from a snapshot as a non-voter and is then made a voter),
 * remove server's replica, move the leadership to server's replica, or
 * rejoin server whose replica lost its state (it is added again under its
 * new id and address, then the old one is removed). One change at a time;
 * each waits for its configuration entry to commit, within the caller's
 * deadline (base/deadline.h) or timeout_ms. text receives what was done. */
pc_status_t pc_replica_member(pc_repl_host_t *h, const char *group, int action,
                              const char *server, uint64_t id, const char *address,
                              uint32_t timeout_ms, pc_buf_t *text, pc_error_t *err);

#endif
