/* replica_int.h — what the files of the replication room share (private):
 * the host, with its Raft thread and what it runs, and a replica.
 *
 *   host.c          the host: its Raft thread and task queue, its identity,
 *                   the replicas it holds, the senders to other servers, the
 *                   jobs thread
 *   group.c         one replica: libraft's raft_io (over the host's log
 *                   store, senders and clock) and raft_fsm (the tablet's
 *                   store), proposals, leadership, the lease
 *   replica_store.c the store the tablet handler sees
 *   repl_server.c   the replication ops a server serves, snapshot streams
 *   membership.c    adding, removing, moving and rebuilding replicas
 *
 * Threads. Everything that touches a struct raft runs on the host's Raft
 * thread (libraft is single-threaded): other threads post tasks to it
 * (host_post) and, when they need an answer, wait for it (host_call). */
#ifndef PC_REPLICA_REPLICA_INT_H
#define PC_REPLICA_REPLICA_INT_H

#include <pthread.h>
#include <raft.h>
#include <stdatomic.h>

#include "core/store_repl.h"
#include "replica/raft_log.h"
#include "replica/replica.h"

typedef struct task {
  void (*fn)(pc_repl_host_t *h, void *arg);
  void *arg;
  struct task *next;
} task_t;

/* A store of a replica: replaced whole when the replica installs a snapshot
 * (a new directory), and closed once no thread uses the old one. */
typedef struct gen {
  pc_store_t *store;
  char *dir;
  int refs;
  int retired;
} gen_t;

typedef struct peer peer_t; /* host.c: a sender to one server */

#define PC_REPLICA_MAX_MEMBERS 16
#define PC_REPL_ENDPOINT_MAX 300 /* "host:port" */

struct pc_replica {
  pc_repl_host_t *h;
  char group[PC_RAFT_GROUP_MAX + 1];
  uint64_t id;
  char address[256];
  struct raft raft;
  struct raft_io io;
  struct raft_fsm fsm;
  int raft_inited, started;
  _Atomic int closed; /* set on the Raft thread; pc_repl_host_close waits for it */
  raft_io_tick_cb tick_cb;
  raft_io_recv_cb recv_cb;
  int pending_io;               /* io requests whose callbacks have not run */
  raft_io_close_cb io_close_cb; /* set by io close: called once pending_io is 0 */
  int io_closing;
  /* the log as stored: entries [first_index, next_index) */
  uint64_t first_index, next_index;
  uint64_t hard_term; /* set_term's term, which set_vote writes beside its vote */

  /* the store */
  pthread_mutex_t gen_mu;
  gen_t *gen;         /* written on the Raft thread under gen_mu */
  unsigned gen_seq;   /* the number of gen's directory, store.<gen_seq> */
  pc_store_t *proxy;  /* replica_store.c */

  /* leadership (Raft thread), and what other threads read of it */
  _Atomic uint64_t ready_term;  /* the term in which it leads and serves, 0 otherwise */
  _Atomic uint64_t lease_until; /* monotonic ms; reads are served before it */
  uint64_t lead_term;           /* the term whose barrier was issued */
  int barrier_pending;
  struct raft_barrier barrier;
  struct { uint64_t id, stamp; } acks[PC_REPLICA_MAX_MEMBERS];
  size_t nacks;
  /* acknowledgements of AppendEntries sent before it do not count towards
   * the lease: a leadership transfer lets its target stand with voters
   * that acknowledged this leader (Raft's disrupt_leader), so a transfer
   * voids what was acknowledged until its target's election is over */
  uint64_t lease_floor;
  /* follower side: the last AppendEntries stamp received, per leader */
  uint64_t stamp_from, stamp_term, stamp;
  /* the sender of the InstallSnapshot being installed */
  char install_from[PC_RAFT_GROUP_MAX + 1];
  struct raft_io_snapshot_put *install_req;
  raft_io_snapshot_put_cb install_cb;
  uint64_t install_index;

  /* leader side (Raft thread): since when its commit index has stood still
   * below its last entry, when that was last reported, and the last tick
   * that looked (group_tick) */
  uint64_t still_commit, still_since_ms, still_told_ms, still_tick_ms;

  /* where the leader is, as this replica knows it */
  pthread_mutex_t hint_mu;
  uint64_t leader_id;
  char leader_address[256];
  uint64_t published_term; /* the last term on_leader was told of */

  /* one membership change at a time */
  pthread_mutex_t member_mu;

  _Atomic uint64_t elections, snapshots_sent, snapshots_received, snap_bytes_sent,
      snap_bytes_received;
  _Atomic uint64_t leader_changes; /* the leader this replica knows of changed */
  _Atomic uint64_t proposals, proposal_us; /* committed ones, and their time in all */
  _Atomic uint64_t proposal_in[PC_RPC_LATENCY_BUCKETS + 1]; /* per bucket (the last: above) */
  pthread_mutex_t wait_mu;
  pthread_cond_t wait_cv;
  pc_replica_t *next;
};

struct pc_repl_host {
  pc_repl_options_t o;
  char server[PC_RAFT_GROUP_MAX + 1];
  char *dir;
  uint64_t incarnation;
  pc_raft_log_t *log;
  pc_rpc_auth_t auth;
  uint64_t started_ms;
  uint32_t election_base_ms; /* libraft's election timeout: half of o.election_timeout_ms */
  uint32_t lease_ms;
  uint32_t tick_ms;

  pthread_t thread;
  pthread_mutex_t mu; /* the task queue */
  pthread_cond_t cv;
  task_t *head, *tail;
  _Atomic int stopping; /* read by every thread without mu */
  int stopped;

  pthread_mutex_t reps_mu;
  pc_replica_t *reps;

  pthread_mutex_t peers_mu;
  peer_t *peers;

  /* the jobs thread: libraft's async work, notifications of leadership */
  pthread_t jobs_thread;
  pthread_mutex_t jobs_mu;
  pthread_cond_t jobs_cv;
  task_t *jobs_head, *jobs_tail;
  int jobs_stopping;

  /* snapshot streams served (repl_server.c) */
  pthread_mutex_t streams_mu;
  struct stream {
    uint64_t id;
    pc_replica_t *rep;
    gen_t *gen;
    pc_local_stream_t *st;
    uint64_t last_ms;
    uint64_t bytes;
  } streams[4];
  uint64_t next_stream;

  /* fetches of snapshots in progress (their threads) */
  pthread_mutex_t fetch_mu;
  pthread_cond_t fetch_cv;
  int fetches;
};

/* host.c */
void host_post(pc_repl_host_t *h, void (*fn)(pc_repl_host_t *h, void *arg), void *arg);
/* Runs fn(h, arg) on the Raft thread and waits for it. */
void host_call(pc_repl_host_t *h, void (*fn)(pc_repl_host_t *h, void *arg), void *arg);
/* Runs fn(h, arg) on the jobs thread. */
void host_job(pc_repl_host_t *h, void (*fn)(pc_repl_host_t *h, void *arg), void *arg);
/* Queues an encoded message (taken) for server; dropped when too much waits. */
void host_send(pc_repl_host_t *h, const char *server, pc_buf_t *msg);
pc_replica_t *host_find(pc_repl_host_t *h, const char *group);
/* An rpc client of server, with the host's credentials; NULL with err. */
pc_rpc_client_t *host_client(pc_repl_host_t *h, const char *server, pc_error_t *err);

/* group.c */
pc_replica_t *group_create(pc_repl_host_t *h, const char *group);
/* Opens its store and starts Raft (on the Raft thread). */
pc_status_t group_start(pc_replica_t *r, pc_replica_start_t start, const char *const *voters,
                        size_t nvoters, pc_error_t *err);
void group_tick(pc_replica_t *r);
/* A decoded message for r (on the Raft thread); taken. */
void group_deliver(pc_replica_t *r, pc_repl_msg_t *msg);
/* Stops r's Raft (on the Raft thread); its pending proposals fail. */
void group_stop(pc_replica_t *r);
void group_free(pc_replica_t *r);
/* Proposes cmd and waits for it (core/store_repl.h's pc_local_replicate_fn). */
pc_status_t group_propose(void *ctx, const char *cmd, size_t len, pc_error_t *err);
/* The store generation in use, with a reference; release with gen_release. */
gen_t *gen_acquire(pc_replica_t *r);
void gen_release(pc_replica_t *r, gen_t *g);
/* PC_OK when r may serve a write (it leads, its term's first entry
 * applied), or a read (also under its lease); else PC_UNAVAILABLE naming
 * the leader it knows of. */
pc_status_t group_may_write(pc_replica_t *r, pc_error_t *err);
pc_status_t group_may_read(pc_replica_t *r, pc_error_t *err);
/* PC_OK when r still leads in term under its lease (a read's check once done). */
pc_status_t group_read_held(pc_replica_t *r, uint64_t term);
/* "tablet T: server S does not lead it (leader: ...)" */
pc_status_t group_not_leader(pc_replica_t *r, const char *why, pc_error_t *err);

/* replica_store.c */
pc_store_t *replica_store_create(pc_replica_t *r);
void replica_store_free(pc_store_t *s);

#endif
