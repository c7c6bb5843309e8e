/* config.h — the one JSON configuration of every role, parsed
 * with jansson and validated against the schema below. An unknown key, a
 * wrong type or an out-of-range value is PC_INVALID with a message naming the
 * file, line:column and key path, e.g.
 *   cluster.json:12:17: tablets[1].listen: expected "host:port", got 42
 *
 * Schema (every key optional unless marked; defaults in brackets):
 * {
 *   "data_dir":  string                    embedded store directory ["./percolator-data"]
 *   "secret":    string                    shared secret every connection presents [none]
 *   "system_secret": string                a second secret, of the system identity [none]
 *   "tls":       { "ca_file": path, "cert_file": path, "key_file": path (all three required),
 *                  "allowed_cn": [string ...] [any name the CA signed],
 *                  "system_cn": [string ...] [cert_file's own common name],
 *                  "server_cn": [string ...] (the names a server's certificate may
 *                               have, whatever its address) [system_cn] }
 *   "limits":    { "max_connections": int 1..1000000 [1024],
 *                  "max_connections_per_peer": int 1..1000000 [512],
 *                  "max_unauthenticated": int 1..1000000 [64],
 *                  "auth_timeout_ms": int 10..600000 [5000],
 *                  "idle_timeout_ms": int 1000..86400000 [300000],
 *                  "frame_timeout_ms": int 10..600000 [10000],
 *                  "max_frame_mb": int 1..1024 [80],
 *                  "request_memory_mb": int 1..1048576 [256],
 *                  "reply_memory_mb": int 1..1048576 [256],
 *                  "reply_timeout_ms": int 10..3600000 [30000],
 *                  "http_max_connections": int 1..100000 [64],
 *                  "http_timeout_ms": int 10..600000 [5000] }
 *   "log":       { "level": "debug"|"info"|"warn"|"error" ["info"] }
 *   "store":     { "sync": bool [true], "cache_mb": int 0..65536 [32],
 *                  "lock_ttl_ms": int 1..3600000 [3000], "timeout_ms": int 1..3600000 [10000],
 *                  "one_phase_commit": bool [true], "lazy_start": bool [false],
 *                  "meta_cache_mb": int 0..65536 [32], "write_buffer_mb": int 1..4096 [64],
 *                  "compression": "snappy"|"none" ["none"],
 *                  "gc_interval_ms": int 0..86400000 [60000] (embedded; 0: only `percolator gc`),
 *                  "gc_rate": int 0..100000000 [100000] (keys deleted per second; 0: no bound),
 *                  "gc_lifetime_ms": int 1000..86400000 [60000] (cluster and served
 *                  directory: the safe point stays this far behind the oracle,
 *                  besides the oldest snapshot clients report; keep it above
 *                  zookeeper.session_timeout_ms),
 *                  "snapshot_max_age_ms": int 1000..2592000000 [86400000] (a live
 *                  client's snapshot holds the safe point back at most this
 *                  long, and never less than gc_lifetime_ms) }
 *   "tso":       { "listen": "host:port", "http": "host:port",
 *                  "data_dir": string, "window_ms": int 100..600000 [3000] }
 *   "zookeeper": { "connect": "host:port[,host:port]..." (required),
 *                  "root": "/percolator/NAME" (required),
 *                  "session_timeout_ms": int 1000..60000 [10000],
 *                  "secret": string (ZooKeeper digest authentication; the
 *                            cluster's nodes admit only its holders) [none],
 *                  "system_secret": string (with secret, another value: the
 *                            system's identity; the data clients' then is
 *                            secret, and they may only read the topology and
 *                            make their own nodes) [none] }
 *   "tablets":   [ { "name": string (required, unique), "listen": "host:port" (required
 *                    without "servers", refused with), "http": "host:port", "data_dir": string,
 *                    "start": string [""], "end": string [""],
 *                    "replicas": [server name ...] (required with "servers", refused
 *                    without: the servers holding the tablet's replicas) } ... ]
 *   "servers":   [ { "name": string (required, unique), "listen": "host:port" (required),
 *                    "http": "host:port", "data_dir": string } ... ]
 *                  (a replicated cluster: each tablet a Raft group over its replicas)
 *   "replication": { "election_timeout_ms": int 100..60000 [1000],
 *                    "heartbeat_ms": int 10..10000 [100],
 *                    "snapshot_entries": int 16..10000000 [8192],
 *                    "down_after_ms": int 0..604800000 [1800000] }
 *   "workers":   { "threads": int 0..256 [0: a core each, pc_worker_default_threads],
 *                  "scan": { "buckets_per_claim": int 1..1024 [0 here: the worker's
 *                                    own choice, pc_worker_options_t],
 *                            "idle_ms": int 1..60000 [100],
 *                            "batch_wait_ms": int 0..60000 [absent: the worker's
 *                                    own choice, pc_worker_options_t],
 *                            "stable_ms": int 0..600000 [3000] },
 *                  "max_failures": int 1..1000 [5], "backoff_ms": int 1..600000 [100],
 *                  "plugins": [ { "path": string (required),
 *                                 "config": object [{}] } ... ] (at most 256),
 *                  "http": "host:port" (a worker's /health and /metrics),
 *                  "hang_ms": int 0..86400000 [60000] (a run given up after it; 0: never),
 *                  "journal_dir": string (the in-flight journal; [<data_dir>/worker-journal]
 *                                 for the workers of a process serving its store),
 *                  "serve_ports": { "tso": int 1..65535, "tablet": int 1..65535 } (a
 *                                 worker serving its embedded directory: the ports
 *                                 it serves on; [those of the worker before, when
 *                                 free]) }
 *   "served":    string (written by a worker into DIR/serving.json: the
 *                  embedded directory it serves; see below)
 * }
 * store.sync (fsync every row operation before acknowledging it) applies to
 * the embedded store and to every tablet server. Turn it off only for data
 * you can rebuild: a machine or tablet that loses power with sync off loses
 * commits it acknowledged, and can lose a transaction's primary commit
 * record while its secondaries' commits survive (elsewhere, or later in its
 * own log), leaving a committed transaction half visible.
 * A tablet serves rows [start, end) of every table ("" end = no upper
 * bound); the tablets' ranges must not overlap and must cover every row
 * (sorted by start, the first starts at "", each starts where the previous
 * ends, the last ends at ""). "listen" is where a daemon binds and where
 * clients connect; port 0 lets a daemon pick a free port (it logs it and
 * writes it to its --ready-file), for tests and scripts. When "tablets" is
 * absent, clients use the embedded store in data_dir. A configuration with
 * "tablets" is a cluster's and needs "zookeeper" (the one coordination
 * engine of clusters: the oracle's election, clients' liveness, workers'
 * membership, the safe point); "lockservice" (the retired lock service
 * daemon) is refused, saying what to write instead. The one exception is
 * the configuration with "served" that a `percolator worker` writes for the
 * embedded directory it serves: one process on one machine, its oracle at
 * tso.listen, no coordination service (clients' locks are resolved by
 * their leases).
 * "workers" configures the processes that run observers: each plugin is a
 * shared object (docs/OBSERVERS.md) loaded in the order listed, its "config"
 * object handed to its init as compact JSON text.
 * "secret", "system_secret" and "tls" say who may connect to the daemons and
 * with which identity, and what a client presents (docs/SECURITY.md); the
 * files "tls" names must be readable when the configuration is read. "limits"
 * bounds what every daemon's ports hold for their connections
 * (docs/ARCHITECTURE.md, "Memory stays bounded").
 */
#ifndef PC_CONFIG_CONFIG_H
#define PC_CONFIG_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#define PC_HOST_MAX 256

typedef struct pc_endpoint {
  int set; /* 0 when absent from the file */
  char host[PC_HOST_MAX];
  uint16_t port;
} pc_endpoint_t;

typedef struct pc_config_tablet {
  char *name;
  pc_endpoint_t listen, http; /* a cluster without "servers": the tablet's own server */
  char *data_dir; /* NULL: <data_dir>/tablet-<name> */
  char *start;    /* "" = from the first row */
  size_t start_len;
  char *end;      /* "" = to the last row */
  size_t end_len;
  /* a cluster with "servers": the servers holding its replicas (a Raft
   * group), each named once; NULL otherwise */
  char **replicas;
  size_t nreplicas;
  size_t file_index; /* its place in the file's array, for messages */
} pc_config_tablet_t;

/* A tablet server of a replicated cluster: it holds replicas of the tablets
 * whose "replicas" name it. */
typedef struct pc_config_server {
  char *name;
  pc_endpoint_t listen, http;
  char *data_dir; /* NULL: <data_dir>/server-<name> */
} pc_config_server_t;

typedef struct pc_config_plugin {
  char *path;   /* the shared object, as written in the file */
  char *config; /* its "config" object as compact JSON text ("{}" when absent) */
} pc_config_plugin_t;

/* The TLS settings: where each file key sits in the file ("cluster.json:7:18"),
 * so that a certificate that fails to load later is reported there. */
typedef struct pc_config_tls {
  int set; /* 0 when "tls" is absent: plain TCP */
  char *ca_file, *cert_file, *key_file;
  char *ca_at, *cert_at, *key_at;
  char **allowed_cn; /* NULL (nallowed_cn 0): any certificate the CA signed */
  size_t nallowed_cn;
  char **system_cn; /* NULL (nsystem_cn 0): the common name of cert_file */
  size_t nsystem_cn;
  char **server_cn; /* NULL (nserver_cn 0): the system's names, above */
  size_t nserver_cn;
} pc_config_tls_t;

/* What every daemon port may hold (see docs/ARCHITECTURE.md for the bound
 * they give). */
typedef struct pc_config_limits {
  uint32_t max_connections;
  uint32_t max_connections_per_peer;
  uint32_t max_unauthenticated;
  uint32_t auth_timeout_ms;
  uint32_t idle_timeout_ms;
  uint32_t frame_timeout_ms;
  uint32_t max_frame_mb;
  uint32_t request_memory_mb;
  uint32_t reply_memory_mb;
  uint32_t reply_timeout_ms;
  uint32_t http_max_connections;
  uint32_t http_timeout_ms;
} pc_config_limits_t;

typedef struct pc_config {
  char *source; /* file name (or the name given to pc_config_parse) */
  char *data_dir;
  char *secret;        /* NULL: none */
  char *system_secret; /* NULL: none */
  pc_config_tls_t tls;
  pc_config_limits_t limits;
  int log_level; /* pc_log_level_t */
  struct {
    int sync;
    uint32_t cache_mb;
    uint32_t meta_cache_mb;
    uint32_t write_buffer_mb;
    int compress; /* store.compression: 1 "snappy", 0 "none" */
    uint32_t gc_interval_ms;
    uint32_t gc_rate;
    uint32_t gc_lifetime_ms;
    uint32_t snapshot_max_age_ms;
    uint32_t lock_ttl_ms;
    uint32_t timeout_ms;
    int one_phase_commit;
    int lazy_start;
  } store;
  struct {
    int set;
    pc_endpoint_t listen, http;
    char *data_dir; /* NULL: <data_dir>/tso */
    uint32_t window_ms;
  } tso;
  /* the embedded data directory whose serving worker this configuration
   * reaches (DIR/serving.json, written by that worker), or NULL */
  char *served;
  struct {
    int set;       /* 0 when "zookeeper" is absent: no cluster coordination */
    char *connect; /* the ensemble, "host:port,host:port,..." */
    char *root;    /* the cluster's root node, e.g. "/percolator/prod" */
    char *secret;  /* the digest password of the cluster's nodes, or NULL */
    char *system_secret; /* the system identity's digest password, or NULL */
    uint32_t session_timeout_ms;
  } zookeeper;
  pc_config_tablet_t *tablets; /* sorted by start */
  size_t ntablets;
  pc_config_server_t *servers; /* a replicated cluster's servers, in file order; NULL: none */
  size_t nservers;
  struct {
    uint32_t election_timeout_ms; /* a lost leader is replaced within about this */
    uint32_t heartbeat_ms;
    uint32_t snapshot_entries;    /* log entries between two snapshots of a replica */
    uint32_t down_after_ms;       /* a server down this long has its replicas made again
                                     elsewhere; 0: never */
  } replication;
  struct {
    int set; /* 0 when "workers" is absent from the file */
    uint32_t threads;
    struct {
      uint32_t buckets_per_claim;
      uint32_t idle_ms;
      uint32_t batch_wait_ms;
      uint32_t stable_ms; /* a membership change is used once stable this long */
    } scan;
    uint32_t max_failures;
    uint32_t backoff_ms;
    pc_config_plugin_t *plugins; /* in file order */
    size_t nplugins;
    pc_endpoint_t http; /* a worker's /health and /metrics (unset: none) */
    uint32_t hang_ms;
    char *journal_dir; /* NULL: the default (daemon/workers.c) */
    /* a worker serving its embedded directory: the ports of its oracle and
     * its tablet on 127.0.0.1 (0: not pinned) */
    uint32_t serve_tso_port, serve_tablet_port;
  } workers;
} pc_config_t;

/* Reads and validates the file at path. Returns NULL on error; release with pc_config_free. */
pc_config_t *pc_config_load(const char *path, pc_error_t *err);
/* Validates text; name is used in messages. Returns NULL on error; release with pc_config_free. */
pc_config_t *pc_config_parse(const char *text, size_t len, const char *name, pc_error_t *err);
/* The defaults (an embedded store in ./percolator-data). Release with pc_config_free. */
pc_config_t *pc_config_default(void);
void pc_config_free(pc_config_t *cfg);

#endif
