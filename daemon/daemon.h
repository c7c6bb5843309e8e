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
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

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

/* The file, in an embedded data directory, holding the client configuration
 * of the `worker` that serves it (mode 0600): other processes that find the
 * directory held (PC_BUSY) connect through it. */
#define PC_DAEMON_SERVING_FILE "serving.json"

/* The configuration a `worker` serves an embedded data directory with: the
 * file at path (NULL: the defaults), with an oracle and one tablet of every
 * row on 127.0.0.1, whose directories are data_dir itself (its LevelDB is
 * data_dir/store and its oracle data_dir/oracle, as the embedded store
 * keeps them), marked "served": data_dir (one process on one machine serves
 * it, without a coordination service), and, when the file names no
 * credentials, a random secret (so that only the processes that can read
 * its serving.json reach it). Its ports are those the file pins
 * (workers.serve_ports; PC_BUSY naming the key when one is taken), else
 * those of data_dir/serving.json (the worker that served data_dir before,
 * whether it stopped or died) when they are free, else ephemeral ports; its
 * secret is that file's, else a new one. Release with
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
  /* when not 0, the bound of every call of the workers' client of that
   * cluster, in place of its store.timeout_ms (`percolator --timeout`) */
  uint32_t workers_timeout_ms;
  /* when set, the client configuration of this process's roles is written
   * there (mode 0600, atomically) once they listen and the workers have
   * registered their observers (fsynced, then renamed into place): how other
   * processes reach an embedded store a worker serves. It is never removed,
   * neither when the process starts nor when it stops, so that a worker
   * started again, after a stop or a crash at any point, takes the same
   * ports and secret and the clients of the one before reconnect
   * (pc_daemon_config_serving); clients take it for the serving worker's
   * only once it is newer than the directory's lock, which each worker
   * rewrites when it takes it. */
  const char *serving_file;
  /* when set, the data directory whose one lock (DIR/LOCK, core/db.h) this
   * process takes as "worker" before anything else and holds until it
   * stops; a short-lived client holding it is waited for, up to
   * lock_wait_ms; another worker holding it is an error at once */
  const char *lock_dir;
  uint32_t lock_wait_ms;
} pc_daemon_spec_t;

/* What a daemon verb runs, from its options: the configuration file at
 * config_path (NULL: none) and spec as the verb asks it.
 *   - A worker (spec.workers == PC_DAEMON_REQUIRED) without a cluster (no
 *     file, or a file without "tablets") holds an embedded data directory
 *     and serves it: the file's data_dir (without a file, data_dir), which
 *     must exist or be creatable, with pc_daemon_config_serving's oracle and
 *     one tablet, the directory's lock (waiting for a short-lived client up
 *     to timeout_ms, 10 s when 0) and its serving.json.
 *   - Any other worker is a client of the cluster the file names.
 *   - The other roles run from the file.
 * The calls of a cluster's client are bounded by timeout_ms when not 0
 * (spec.workers_timeout_ms).
 * The spec in *out points into *out: do not copy it. Release with
 * pc_daemon_plan_free (also after an error). */
typedef struct pc_daemon_plan {
  pc_daemon_config_t config;
  pc_daemon_spec_t spec;
  char data_dir[4096];      /* the embedded directory served ("" none) */
  char serving_file[4200];  /* its serving.json */
} pc_daemon_plan_t;
pc_status_t pc_daemon_plan(const char *config_path, const char *data_dir,
                           const pc_daemon_spec_t *spec, uint32_t timeout_ms,
                           pc_daemon_plan_t *out, pc_error_t *err);
void pc_daemon_plan_free(pc_daemon_plan_t *p);

typedef struct pc_daemon pc_daemon_t;

/* Starts what spec asks of c. c must outlive the daemon. Returns NULL on
 * error, with err naming the role and the cause, after stopping whatever it
 * had started. Stop and release with pc_daemon_stop. */
pc_daemon_t *pc_daemon_start(const pc_daemon_config_t *c, const pc_daemon_spec_t *spec,
                             pc_error_t *err);

/* Writes the bound endpoints as JSON to path ({"tso": {"listen", "http"},
 * "tablets": {NAME: ...}, "workers": {"http"} when workers run, "pid"}),
 * atomically. Written once everything started: the servers listen and the
 * workers have registered their observers. */
pc_status_t pc_daemon_write_ready_file(const pc_daemon_t *d, const char *path, pc_error_t *err);

/* The number of server roles running, and whether workers run. */
size_t pc_daemon_role_count(const pc_daemon_t *d);
int pc_daemon_has_workers(const pc_daemon_t *d);

/* Reloads the workers' plugins (SIGHUP): loads the current build of each
 * plugin the configuration names (the same paths and plugin configurations
 * as at start), then drains the observer runs in flight and runs the
 * observers of the new builds; pending notifications stay in the store
 * meanwhile and are all run. A build that fails to load changes nothing (the
 * running plugins go on; err names it). PC_STATE when d runs no workers. */
pc_status_t pc_daemon_reload(pc_daemon_t *d, pc_error_t *err);

/* Stops everything and releases d: first every server stops taking
 * requests from other processes (its grace for those in flight starts,
 * net/rpc.h), then the garbage collector (its pass stops at a step) and the
 * workers (their observer transactions finish), then the servers in reverse
 * order: each answers its requests in flight within the grace
 * (PC_RPC_STOP_GRACE_MS, counted from the start) and cancels the rest,
 * whose long loops stop at their next step; then the stores and the oracle
 * close, so nothing acknowledged is lost. NULL is a no-op. */
void pc_daemon_stop(pc_daemon_t *d);

/* How long a daemon may take to stop on a signal: the servers' grace
 * (PC_RPC_STOP_GRACE_MS), then an observer transaction in flight, which
 * takes up to two store.timeout_ms (its calls, then the settling of a
 * commit whose reply was lost; the worker's record is deleted meanwhile),
 * and PC_DAEMON_STOP_SLACK_MS for the rest (closing the stores): 30 s with
 * the default timeout of 10 s. */
#define PC_DAEMON_STOP_SLACK_MS 5000
uint32_t pc_daemon_stop_bound_ms(const pc_daemon_t *d);

/* pc_daemon_stop for a process that exits next, on one of the signals in
 * sigs (blocked in every thread; this waits for them on a thread of its
 * own): if stopping outlasts pc_daemon_stop_bound_ms (an observer callback
 * that never returns) or a second signal arrives meanwhile, it logs what it
 * was still doing and ends the process at once with _exit(forced_status).
 * The stores and the oracle's bound are crash-safe, so even then nothing
 * acknowledged is lost. */
void pc_daemon_shutdown(pc_daemon_t *d, const sigset_t *sigs, int forced_status);

#endif
