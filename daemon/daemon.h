/* daemon.h — a process that serves roles of the cluster: the timestamp
 * oracle and tablet servers (each on its rpc.h endpoint,
 * with /health and /metrics on its http endpoint), the cluster's background
 * garbage collector when it serves tablets, and observer workers. The CLI's
 * daemon verbs (`run`, `tso`, `tablet`, `worker`) parse their
 * options and call this; tests and embedding programs can too.
 *
 * Starting is all or nothing: pc_daemon_start starts the roles in order
 * (oracle, tablets, then the workers, which are clients of
 * them) and on any error stops what it started. pc_daemon_stop stops in
 * reverse: the workers first (their transactions finish or abort), then the
 * collector, then every server drains its requests in flight before the
 * stores and the oracle close, so nothing acknowledged is lost.
 *
 * Clients of this process's own roles (the collector, the workers) are
 * opened from a configuration built in memory with the ports the roles
 * bound; they call the servers in-process (net/rpc.h, in_process). */
#ifndef PC_DAEMON_DAEMON_H
#define PC_DAEMON_DAEMON_H

#include <jansson.h>
#include <stddef.h>

#include <percolator/percolator.h>

#include "config/config.h"

/* A daemon's configuration: validated, and its JSON, from which the
 * configuration of clients of its roles is derived. */
typedef struct pc_daemon_config {
  pc_config_t *cfg;
  json_t *json;
} pc_daemon_config_t;

/* Reads and validates the file at path into *out. Release with
 * pc_daemon_config_free. */
pc_status_t pc_daemon_config_load(const char *path, pc_daemon_config_t *out, pc_error_t *err);

/* The configuration a `worker` serves an embedded data directory with: the
 * file at path (NULL: the defaults), with an oracle and one tablet of every
 * row on ephemeral ports of 127.0.0.1, whose directories are data_dir itself
 * (its LevelDB is data_dir/store and its oracle data_dir/oracle, as the
 * embedded store keeps them), marked "served": data_dir (one process on one
 * machine serves it, without a coordination service). Release with
 * pc_daemon_config_free. */
pc_status_t pc_daemon_config_serving(const char *path, const char *data_dir,
                                     pc_daemon_config_t *out, pc_error_t *err);

void pc_daemon_config_free(pc_daemon_config_t *c);

typedef enum pc_daemon_need {
  PC_DAEMON_NONE = 0,
  PC_DAEMON_REQUIRED,     /* an error when the configuration lacks it */
  PC_DAEMON_IF_CONFIGURED /* when the configuration has its section */
} pc_daemon_need_t;

typedef struct pc_daemon_spec {
  int tso;                 /* run the oracle ("tso" section with "listen" required) */
  int tablets;             /* 0 none, 1 the one named tablet_name, 2 every tablet */
  const char *tablet_name; /* with tablets == 1 */
  pc_daemon_need_t workers; /* the observers of the "workers" section */
  /* the configuration file of the cluster the workers are clients of; NULL:
   * the roles of this process */
  const char *workers_cluster;
  /* when set, the client configuration of this process's roles is written
   * there (mode 0600, atomically) once they listen, and removed by
   * pc_daemon_stop: how other processes reach an embedded store a worker
   * serves */
  const char *serving_file;
} pc_daemon_spec_t;

typedef struct pc_daemon pc_daemon_t;

/* Starts what spec asks of c. c must outlive the daemon. Returns NULL on
 * error, with err naming the role and the cause, after stopping whatever it
 * had started. Stop and release with pc_daemon_stop. */
pc_daemon_t *pc_daemon_start(const pc_daemon_config_t *c, const pc_daemon_spec_t *spec,
                             pc_error_t *err);

/* Writes the bound endpoints as JSON to path ({"tso": {"listen", "http"},
 * "tablets": {NAME: ...}, "pid"}), atomically. */
pc_status_t pc_daemon_write_ready_file(const pc_daemon_t *d, const char *path, pc_error_t *err);

/* The number of server roles running, and whether workers run. */
size_t pc_daemon_role_count(const pc_daemon_t *d);
int pc_daemon_has_workers(const pc_daemon_t *d);

/* Stops everything in reverse order and releases d. NULL is a no-op. */
void pc_daemon_stop(pc_daemon_t *d);

#endif
