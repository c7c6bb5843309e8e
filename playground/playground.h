/* playground.h — a whole cluster on this machine in a directory of its own:
 * a private ZooKeeper (playground/zkserver.h, or an ensemble given), the
 * oracles (one leads, the others stand by), the tablet servers and the
 * workers with the given plugins, each a `percolator` process on 127.0.0.1
 * with ports the kernel picks, their logs and ready files in the directory,
 * and the client configuration that reaches them. `percolator playground`,
 * the tests' clusters (tests/testutil.c, test_cluster_zk.c; the shell
 * tests through `percolator playground`, tests/cli_lib.sh's pg_start) and
 * the benchmarks' (net_scale.c, dedup.sh) all start their clusters through
 * this: docs/TESTING.md lists what still starts a role directly, and why.
 *
 * The description comes first (pc_pg_create: the roles, in the order they
 * start, and the tablets, placed on tablet servers in one place,
 * place_tablets in playground.c: a server of its own for each, or the
 * replicas of each on the servers of a replicated cluster), then the
 * processes (pc_pg_start), which start all at once per kind and are waited
 * for through their ready files. Every process is a child of the calling
 * thread, in a process group of its own (a terminal's Ctrl-C reaches only
 * the caller, which stops them in order), that gets SIGTERM (ZooKeeper
 * SIGKILL) if that thread dies. */
#ifndef PC_PLAYGROUND_H
#define PC_PLAYGROUND_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include <percolator/percolator.h>

#define PC_PG_MAX_TABLETS 32
#define PC_PG_MAX_ROLES 96
#define PC_PG_MAX_PLUGINS 16

typedef enum pc_pg_kind {
  PC_PG_ZOOKEEPER, /* a ZooKeeper server */
  PC_PG_TSO,       /* `percolator tso` */
  PC_PG_SERVER,    /* `percolator run`: an oracle and every tablet in one process */
  PC_PG_TABLET,    /* `percolator tablet --name T`: a tablet's server, or one of the servers
                      of a replicated cluster (--name sN) */
  PC_PG_WORKER     /* `percolator worker` */
} pc_pg_kind_t;

/* A tablet: rows [start, end) ("" is the open end), and how many copies of
 * them tablet servers hold. */
typedef struct pc_pg_tablet {
  char name[32];
  char *start, *end;
  int replicas;   /* copies: 1 without servers (a server of its own) */
  int on[15];     /* with servers: the servers (indexes) holding its replicas */
} pc_pg_tablet_t;

typedef struct pc_pg_role {
  pc_pg_kind_t kind;
  char name[64];         /* "zookeeper-1", "tso-1", "t1", "worker-1", "server" */
  char tablet[32];       /* PC_PG_TABLET: the tablet it serves, or its server's name */
  int index;             /* PC_PG_ZOOKEEPER: the server's index */
  pid_t pid;             /* 0 before it starts and once reaped */
  int exit_status;       /* -1 while it runs or before it started; else as waitpid's */
  char listen[64];       /* its rpc endpoint once ready ("" for workers) */
  char http[64];         /* its /metrics endpoint, if any */
  int leading;           /* oracles: it leads now */
  int is_ready;          /* its ready file was read since it last started */
  char log[4200], ready[4200];
} pc_pg_role_t;

typedef struct pc_pg_options {
  const char *cli;           /* the percolator program the roles run */
  const char *dir;           /* the directory (created when missing) */
  int zk_servers;            /* 1 or 3 servers of its own (with zk_connect NULL) */
  const char *zk_connect;    /* or an ensemble that runs already */
  const char *zk_root;       /* the cluster's root node (NULL: /percolator/playground) */
  int oracles;               /* oracle processes (one leads) [2] */
  int one_process;           /* an oracle and the tablets in one `percolator run` */
  int zookeeper_only;        /* only the ZooKeeper servers (for scripts that run their own roles) */
  const char *const *splits; /* the rows where tablets begin, in order: nsplits + 1 tablets */
  size_t nsplits;
  /* a replicated cluster: this many tablet servers (s1, s2, ...), each
   * tablet a Raft group of `replicas` of them (0: min(3, servers)); 0
   * servers: a server of its own for each tablet, not replicated */
  int servers;
  int replicas;
  int workers;               /* worker processes (with plugins) */
  const char *const *plugins;
  size_t nplugins;
  /* a JSON object whose members go into every configuration written (store,
   * limits, log, secret, tls, ...): an object the playground writes too
   * ("zookeeper", "tso", "workers") is merged into the playground's, member
   * by member (so {"tso": {"window_ms": 8000}} keeps its listen), anything
   * else replaces it; "workers" goes only into the client configuration of
   * a playground with plugins; borrowed; NULL: none */
  const json_t *extra;
} pc_pg_options_t;

typedef struct pc_pg pc_pg_t;

/* Describes the cluster of o (no process starts). NULL with err naming what
 * is wrong in o. Release with pc_pg_free. */
pc_pg_t *pc_pg_create(const pc_pg_options_t *o, pc_error_t *err);

/* Starts every role: ZooKeeper, then the oracles and tablet servers at once
 * (clients and tablets find the leading oracle in ZooKeeper), then, with the
 * client configuration written (DIR/cluster.json), the workers. Waits for
 * each role's ready file, at most wait_ms for each kind. On failure stops
 * what it started and names the role and its log. */
pc_status_t pc_pg_start(pc_pg_t *p, uint32_t wait_ms, pc_error_t *err);

/* Stops every role, in order: the workers (they finish their observer runs),
 * the tablet servers, the oracles, ZooKeeper; each kind with SIGTERM at
 * once, waited for up to its shutdown bound and then killed. */
void pc_pg_stop(pc_pg_t *p);

/* pc_pg_stop if needed, and releases p. NULL is a no-op. */
void pc_pg_free(pc_pg_t *p);

size_t pc_pg_role_count(const pc_pg_t *p);
const pc_pg_role_t *pc_pg_role(const pc_pg_t *p, size_t i);
/* The index of the role named name, or -1. */
int pc_pg_find(const pc_pg_t *p, const char *name);
/* The tablets, in row order. */
size_t pc_pg_tablet_count(const pc_pg_t *p);
const pc_pg_tablet_t *pc_pg_tablet(const pc_pg_t *p, size_t i);

/* The client configuration (DIR/cluster.json), written by pc_pg_start. */
const char *pc_pg_client_config(const pc_pg_t *p);
/* The ZooKeeper ensemble ("host:port,...") and the cluster's root. */
const char *pc_pg_zk_connect(const pc_pg_t *p);
const char *pc_pg_zk_root(const pc_pg_t *p);
const char *pc_pg_dir(const pc_pg_t *p);

/* Forgets role i's process: the caller reaped it (or will), so its pid,
 * which may be reused, is never signalled. */
void pc_pg_forget(pc_pg_t *p, size_t i);

/* Sends sig to role i; with SIGKILL also reaps it. */
void pc_pg_signal(pc_pg_t *p, size_t i, int sig);
/* Starts role i again (it must have exited or been killed): on the port it
 * had, or, moved, on a new one (a tablet; clients find it in ZooKeeper).
 * Waits for it as pc_pg_start does. The process before is forgotten, not
 * reaped: a caller that killed it reaps it (pc_pg_poll would have). */
pc_status_t pc_pg_restart(pc_pg_t *p, size_t i, int moved, uint32_t wait_ms, pc_error_t *err);

/* Looks at every role once: reaps those that exited and reads which oracle
 * leads. Writes one line per change since the last call into out (cap
 * bytes; "" when nothing changed) and returns how many changed. */
size_t pc_pg_poll(pc_pg_t *p, char *out, size_t cap);

/* Writes the state as JSON to path, atomically: {"dir", "client_config",
 * "zookeeper", "root", "pid", "roles": [{"name", "kind", "pid", "listen",
 * "http", "log", "state": "running"|"exited", "leading", and once it
 * exited "exit_code" or "exit_signal" (a role forgotten, or ZooKeeper's
 * server, counts as exit code 0)}]}. */
pc_status_t pc_pg_write_state(const pc_pg_t *p, const char *path, pc_error_t *err);

#endif
