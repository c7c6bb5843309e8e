/* daemon_internal.h — what the files of daemon/ share: the state of a
 * daemon process and the functions each file gives the others.
 *
 *   daemon.c         starting and stopping in order, the ready file
 *   roles.c          the server roles (oracle, tablets) and their metrics
 *   client_config.c  configurations: loading, serving an embedded store, clients of own roles
 *   gc_loop.c        the cluster's background garbage collector
 *   workers.c        the observer workers, their metrics and their record for `status` */
#ifndef PC_DAEMON_INTERNAL_H
#define PC_DAEMON_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "daemon/daemon.h"
#include "net/http.h"
#include "net/rpc.h"
#include "notify/worker.h"
#include "observers/plugin.h"
#include "lockservice/coord.h"
#include "replica/replica.h"
#include "tablet/tablet.h"
#include "tso/oracle.h"
#include "tso/tso_client.h"
#include "tso/tso_server.h"
#include "tso/tso_election.h"
#include "tso/tso_locator.h"

typedef enum role_kind { ROLE_TSO, ROLE_TABLET, ROLE_SERVER } role_kind_t;

/* A tablet a replicated server holds a replica of (servers.c). */
typedef struct stab {
  char name[80];
  pc_tablet_t *tablet;
  pc_replica_t *rep;
  int rejoin; /* this replica lost its state: its leader must add it again */
} stab_t;

typedef struct role {
  role_kind_t kind;
  char name[96];
  pc_rpc_server_t *rpc;
  pc_http_t *http;
  pc_oracle_t *oracle;   /* ROLE_TSO with its bound in a file */
  pc_tso_served_t served; /* ROLE_TSO with its bound in a file: its clients' snapshots too */
  pc_tso_node_t *node;   /* ROLE_TSO elected in ZooKeeper ("zookeeper" configured) */
  pc_tablet_t *tablet;   /* ROLE_TABLET */
  int dir_lock;          /* ROLE_TABLET: its data directory's lock (core/db.h), or -1 */
  pc_coord_t *coord;     /* ROLE_TABLET in a cluster: the process's ZooKeeper session */
  _Atomic int serving;   /* ROLE_TABLET: it answers (it holds its tablet in ZooKeeper) */
  /* ROLE_SERVER: a replicated cluster's tablet server (servers.c) */
  const pc_config_server_t *server;
  struct pc_daemon *d;
  _Atomic(pc_repl_host_t *) host;
  pthread_rwlock_t tabs_lk;
  int tabs_lk_init;
  /* under tabs_lk; a tablet, once listed, stays (at the same address) until
   * the role stops: a stab_t * may be kept after the lock is let go, its
   * name, tablet and rep read without it */
  stab_t **tabs;
  size_t ntabs, captabs;
  char advertise[320]; /* "host:port" where clients and peers reach it */
  pthread_t rejoin;
  int rejoin_running;
  _Atomic int stopping;
  pthread_t repair; /* replicas of servers down too long made again elsewhere */
  int repair_running;
  /* the handler's time of each tablet op it served (0x10..0x2f), in the
   * buckets of pc_rpc_latency_bounds (the last: above them) */
  _Atomic uint64_t op_in[32][PC_RPC_LATENCY_BUCKETS + 1];
  _Atomic uint64_t op_us[32];
} role_t;

/* Where tablets get commit timestamps for one-phase commits. */
typedef struct ts_provider {
  pc_oracle_t *local;      /* this process's own oracle: asked directly */
  pc_rpc_client_t *remote; /* or a separate tso daemon, through the batcher */
  pc_tso_locator_t *locator; /* or the leader elected in ZooKeeper, through the batcher */
  pc_ts_batcher_t *batcher;
  uint32_t wait_ms; /* the bound of a request without a deadline of its own */
} ts_provider_t;

/* The cluster's garbage collector (gc_loop.c). */
typedef struct gc_loop {
  pthread_t thread;
  int running, stop;
  _Atomic int stopping; /* stop was asked: the pass in progress stops at a step */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pc_config_t *client; /* a client configuration of this process's roles */
} gc_loop_t;

/* Observers run by this process (workers.c). */
typedef struct workers {
  pc_db_t *db; /* a client of the cluster (or of the store this process serves) */
  pc_observer_registry_t *registry;
  pc_plugin_t **plugins;
  size_t nplugins;
  int *change_logged; /* per plugin: its file's change on disk was logged */
  pc_worker_t *worker;  /* NULL while a reload swaps it (under swap) */
  pthread_mutex_t swap; /* held by a reload while it replaces worker and plugins */
  pc_worker_options_t opts; /* as started, for starting it again on a reload */
  char journal[4096];        /* opts.journal_dir's text when it is ours */
  /* what the reporter watches of a cluster, to log outages as they start
   * and end: the leading oracle, and each tablet's server */
  const pc_config_t *cluster; /* NULL: not a cluster's client */
  pc_tso_locator_t *tso;
  char tso_leader[300];
  uint64_t tso_down_ms;       /* when the oracle stopped answering (0: it answers) */
  char (*tablet_addr)[300];   /* per tablet of cluster: its server ("" none) */
  uint64_t *tablet_down_ms;   /* per tablet: since when none serves it (0: served) */
  pc_http_t *http;
  /* the worker's record in the system table (for `status`) */
  char row[300];
  pthread_t reporter;
  int reporting, stop;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} workers_t;

struct pc_daemon {
  const pc_daemon_config_t *c;
  /* what pc_daemon_stop is doing, for pc_daemon_shutdown's log when it is
   * slow (a string literal) */
  _Atomic(const char *) stage;
  const pc_config_t *cfg; /* c->cfg */
  pc_rpc_auth_t auth;     /* cfg's credentials, for its servers and its own clients */
  pc_oracle_t *oracle;    /* the tso role's, when this process runs one */
  role_t roles[64];
  size_t nroles;
  ts_provider_t ts;
  pc_coord_t *coord; /* with "zookeeper": this process's session (no client node) */
  gc_loop_t gc;
  workers_t w;
  int has_workers;
  char *serving_file; /* written once started */
  const char *lock_dir; /* spec.lock_dir: locked by the process, not by its tablet */
  int dir_lock;       /* the descriptor holding spec.lock_dir's lock, or -1 */
};

/* roles.c */
role_t *pc_daemon_new_role(pc_daemon_t *d, role_kind_t kind, const char *name, pc_error_t *err);
/* Starts r's rpc server on listen (handler(hctx), runs_inline) and its
 * /health and /metrics on http when set. */
pc_status_t pc_daemon_serve(pc_daemon_t *d, role_t *r, const pc_endpoint_t *listen,
                            const pc_endpoint_t *http, pc_rpc_handler_fn handler, void *hctx,
                            int (*runs_inline)(uint8_t op), pc_error_t *err);
/* Handler threads of a replicated server's port: its writes wait on their
 * handler thread until their log entries commit, so that many can be
 * replicated at once (one fsync of the log for all of them). */
#define PC_DAEMON_SERVER_WORKERS 32
/* mkdir -p, private to this user */
pc_status_t pc_daemon_make_dir(const char *path, pc_error_t *err);
/* "host:port" where clients reach a server listening at host:port */
void pc_daemon_advertised(const char *host, uint16_t port, char *out, size_t cap);
/* A timestamp for a tablet (one-phase commits, GET_FRESH): ctx is d->ts. */
pc_status_t pc_daemon_ts(void *ctx, uint64_t *ts, pc_error_t *err);
/* A GC frame's safe point to ZooKeeper before a tablet deletes below it:
 * ctx is the daemon. */
pc_status_t pc_daemon_publish_safe_point(void *ctx, uint64_t safe, pc_error_t *err);
pc_status_t pc_daemon_start_tso(pc_daemon_t *d, pc_error_t *err);
pc_status_t pc_daemon_start_tablet(pc_daemon_t *d, const pc_config_tablet_t *t, pc_error_t *err);
/* The timestamp source of this process's tablets: its own oracle or the tso daemon's. */
pc_status_t pc_daemon_ts_setup(pc_daemon_t *d, pc_error_t *err);
void pc_daemon_stop_roles(pc_daemon_t *d);
/* The "listen" endpoint a role bound, as "127.0.0.1:PORT" in out (cap bytes). */
void pc_daemon_role_endpoint(const role_t *r, char *out, size_t cap);
/* The tablet's name of a ROLE_TABLET. */
const char *pc_daemon_tablet_name(const role_t *r);

/* servers.c: a replicated cluster's tablet server holding replicas of the
 * tablets whose "replicas" name it; its metrics; its stop (after its rpc
 * server stopped: its tablets, then its replication host). */
pc_status_t pc_daemon_start_server(pc_daemon_t *d, const pc_config_server_t *sv, pc_error_t *err);
void pc_daemon_server_metrics(role_t *r, pc_buf_t *out);
/* percolator_rpc_request_duration_seconds of a server: by the tablet op a
 * request carries (in its ROUTED envelope) */
void pc_daemon_server_durations(role_t *r, pc_buf_t *out);
void pc_daemon_server_stop(role_t *r);

/* client_config.c: the daemon's configuration with the endpoints of the
 * roles this process runs replaced by the ports they bound, as JSON text
 * (malloc'd) or validated (pc_config_free); NULL with err set on error. */
char *pc_daemon_client_text(const pc_daemon_t *d, pc_error_t *err);
pc_config_t *pc_daemon_client_config(const pc_daemon_t *d, pc_error_t *err);
/* Writes text to path with mode 0600 through a temporary file beside it. */
pc_status_t pc_daemon_write_file(const char *path, const char *text, pc_error_t *err);

/* gc_loop.c */
void pc_daemon_gc_start(pc_daemon_t *d);
void pc_daemon_gc_stop(pc_daemon_t *d);

/* workers.c: loads the configured plugins (before any server starts, so
 * that a plugin at fault is the first thing said), then starts the
 * observers against cluster_path's database, or this process's roles when
 * it is NULL. */
pc_status_t pc_daemon_workers_load(pc_daemon_t *d, pc_error_t *err);
pc_status_t pc_daemon_workers_start(pc_daemon_t *d, const char *cluster_path,
                                    uint32_t timeout_ms, pc_error_t *err);
void pc_daemon_workers_stop(pc_daemon_t *d);
/* Loads the configured plugins again (their files' current builds), drains
 * the observer runs in flight and swaps the worker onto them; on an error
 * before the drain the old plugins go on running. */
pc_status_t pc_daemon_workers_reload(pc_daemon_t *d, pc_error_t *err);

#endif
