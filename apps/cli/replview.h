/* replview.h — a replicated cluster ("servers" in the configuration) as
 * the operator verbs (status, doctor, tablet ...) see it: each server and
 * whether it answers, and each tablet's Raft group — its leader, its
 * members with their roles, how far each lags the leader, which are up —
 * put together from every server's REPLICAS answer (replica/repl_client.h)
 * and ZooKeeper's tablet map. The leader's view of its group is
 * authoritative: its configuration, and its members' match indexes against
 * its last index. Without a leader, the configuration shown is that of the
 * replica furthest along (highest term, then last index). */
#ifndef PC_CLI_REPLVIEW_H
#define PC_CLI_REPLVIEW_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "lockservice/coord.h"
#include "replica/repl_wire.h"

/* A replica lags when the leader's log is this many entries ahead of it:
 * the entries a leader keeps behind its snapshots for slow followers
 * (replica/host.c), past which a follower catches up from a snapshot. */
#define CLI_LAG_ENTRIES 1024u

#define CLI_SERVER_NAME_MAX PC_RAFT_GROUP_MAX

typedef struct cli_rserver {
  char name[CLI_SERVER_NAME_MAX + 1];
  int configured;  /* named in "servers" (else only a member of some group) */
  char addr[300];  /* where it was asked ("host:port"), "" when unknown */
  int live;        /* ZooKeeper's servers/<name>/live exists */
  int up;          /* it answered REPLICAS */
  char error[300]; /* why not, when it did not */
  pc_replica_info_t *reps; /* the replicas it holds */
  size_t nreps;
} cli_rserver_t;

enum { CLI_ROLE_LEADER, CLI_ROLE_FOLLOWER, CLI_ROLE_STANDBY, CLI_ROLE_SPARE, CLI_ROLE_OUTSIDE };

/* One replica of a tablet: a member of its configuration, or a replica a
 * server holds outside it (removed, or created and not yet added). */
typedef struct cli_rreplica {
  char server[CLI_SERVER_NAME_MAX + 1];
  char address[256]; /* "server#incarnation" */
  uint64_t id;
  int role;          /* CLI_ROLE_* */
  int up;            /* its server answered and holds this replica */
  const pc_replica_info_t *info; /* its own state, when up */
  int have_lag;      /* the leader's view: match, lag and silent_ms are set */
  uint64_t match, lag, silent_ms; /* silent_ms UINT64_MAX: never heard from */
  int lagging;       /* CLI_LAG_ENTRIES behind, or not heard from for an election timeout */
  int counted;       /* a voter counted in its tablet's voters_up */
} cli_rreplica_t;

typedef struct cli_rtablet {
  const pc_config_tablet_t *cfg;
  char owner[300];                          /* tablets/<name>/owner's address, "" none */
  char owner_server[CLI_SERVER_NAME_MAX + 1]; /* and the server its identity names */
  uint64_t owner_term;
  const pc_replica_info_t *leader; /* the leader's own state; NULL: no replica leads */
  const cli_rserver_t *leader_server;
  const pc_replica_info_t *view;   /* whose configuration is shown; NULL: no replica answered */
  cli_rreplica_t *reps;            /* the members in configuration order, then the others */
  size_t nreps;
  size_t voters, voters_up; /* voting members; those up (and heard from by the leader) */
  size_t configured;        /* the configuration file's tablets[].replicas */
  int under;                /* voters_up < configured */
} cli_rtablet_t;

typedef struct cli_rview {
  cli_rserver_t *servers; /* the configured ones in file order, then other members' */
  size_t nservers;
  cli_rtablet_t *tablets; /* the configuration's, sorted by rows */
  size_t ntablets;
  uint32_t election_timeout_ms;
} cli_rview_t;

/* Asks every server of cfg (and any other server that a group names as a
 * member) for its replicas, each within timeout_ms, and reads the tablet
 * map through coord (NULL: the configured addresses only, no map). Fails
 * only when out of memory; release with cli_rview_free (also after an
 * error). */
pc_status_t cli_rview_load(const pc_config_t *cfg, pc_coord_t *coord, uint32_t timeout_ms,
                           cli_rview_t *v, pc_error_t *err);
void cli_rview_free(cli_rview_t *v);

const cli_rtablet_t *cli_rview_tablet(const cli_rview_t *v, const char *name);
const cli_rserver_t *cli_rview_server(const cli_rview_t *v, const char *name);
/* The replica of t on server, NULL when it holds none. */
const cli_rreplica_t *cli_rtablet_replica(const cli_rtablet_t *t, const char *server);
/* "leader", "follower", "standby", "spare", "not a member". */
const char *cli_role_name(int role);
/* The servers of t's voting members, comma-separated, into out. */
void cli_rtablet_voters(const cli_rtablet_t *t, char *out, size_t cap);

/* A majority of n voters. */
static inline size_t cli_majority(size_t n) { return n / 2 + 1; }

/* Tablet name's owner node (tablets/<name>/owner), read after a sync: the
 * address its leader serves at into addr ("" when none), the server and
 * term its identity "raft:<server>:<term>" names (server "" and term 0 for
 * another identity). */
pc_status_t cli_owner_read(pc_coord_t *coord, const char *tablet, uint32_t timeout_ms, char *addr,
                           size_t acap, char *server, size_t scap, uint64_t *term,
                           pc_error_t *err);

/* {"name", "listen", "configured", "live", "up", "error", "replicas"} of s. */
json_t *cli_rserver_json(const cli_rserver_t *s);
/* {"leader": {"server", "address", "term"} or null, "replicas": [{"server",
 * "replica", "id", "role", "up", "state", "term", "applied", "commit",
 * "last_index", "match", "lag", "silent_ms", "lagging"}], "voters",
 * "voters_up", "configured_replicas", "under_replicated"} of t, merged into o. */
void cli_rtablet_json(const cli_rtablet_t *t, json_t *o);

#endif
