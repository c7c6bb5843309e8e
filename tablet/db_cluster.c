/* db_cluster.c — opening a database from a JSON configuration file: the
 * embedded store in its data_dir, or, when it lists tablets, a client of the
 * cluster: the remote store routing rows to tablet servers, timestamps from
 * the oracle that leads in ZooKeeper through this process's batcher, the
 * tablet map (which server holds each tablet) followed there, and
 * liveness, reports and locks through the client's one ZooKeeper session
 * (lockservice/coord.h). A configuration a worker wrote for the embedded
 * directory it serves ("served") reaches that worker's oracle at
 * tso.listen and has no coordination service: locks are resolved by their
 * leases alone, and the client reports the floor of its snapshots to that
 * oracle (tso/snapshots.h) instead of ZooKeeper. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "config/config.h"
#include "core/db.h"
#include "base/deadline.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "core/recent.h"
#include "base/log.h"
#include "net/rpc.h"
#include "net/tls.h"
#include "tablet/tablet.h"
#include "lockservice/coord.h"
#include "tso/snapshots.h"
#include "tso/tso_client.h"
#include "tso/tso_locator.h"

/* The bound of a served client's report of its snapshots, and of its
 * collector's question about the others'. */
#define REPORT_TIMEOUT_MS 2000u

/* What a client of a cluster coordinated through ZooKeeper holds. */
typedef struct coord {
  pc_coord_t *session;   /* this client's session and node; the others' liveness */
  pc_tso_locator_t *tso; /* follows the elected oracle on that session */
  pc_store_t *store;     /* the remote store, routed by the tablet map */
  char **tablets;        /* the tablets' names, in the store's order */
  size_t ntablets;
  uint32_t timeout_ms;   /* of a refresh of the map */
  /* replicated tablets: the servers of each one's replicas (NULL: not
   * replicated), and which of them a refresh tries next */
  char ***replicas;
  size_t *nreplicas;
  _Atomic unsigned *next_replica;
} coord_t;

static void cluster_close(pc_db_t *db) {
  coord_t *c = db->coord;
  if (c) {
    pc_tso_locator_destroy(c->tso); /* it follows the election on the session */
    pc_coord_close(c->session);     /* closing the session ends this client's liveness */
    for (size_t i = 0; i < c->ntablets; i++) {
      free(c->tablets[i]);
      for (size_t k = 0; c->replicas && k < c->nreplicas[i]; k++) free(c->replicas[i][k]);
      if (c->replicas) free(c->replicas[i]);
    }
    free(c->tablets);
    free(c->replicas);
    free(c->nreplicas);
    free(c->next_replica);
    free(c);
    db->coord = NULL;
    db->coordination = NULL;
  }
  if (db->tso && db->report) { /* the oracle forgets this client's floor now */
    pc_error_t ignored;
    (void)pc_tso_remote_report(db->tso, db->report_id, 0, REPORT_TIMEOUT_MS, NULL, &ignored);
  }
  if (db->tso) pc_rpc_client_destroy(db->tso);
  db->tso = NULL;
}

static uint64_t cluster_session(const pc_db_t *db) {
  const coord_t *c = db->coord;
  return c ? pc_coord_session(c->session) : 0;
}

/* Cluster liveness: only a session ZooKeeper no longer has is dead; when it
 * cannot be asked, or without coordination (a served directory), the lock's
 * lease decides. */
static int cluster_alive(void *ctx, uint64_t session) {
  pc_db_t *db = ctx;
  coord_t *c = db->coord;
  if (!c || session == 0) return 1;
  return pc_coord_liveness(c->session, session, 1000) != PC_LS_DEAD;
}

/* The oldest start_ts this process's open transactions hold (UINT64_MAX:
 * none), which its ZooKeeper node reports. */
static uint64_t oldest_open(void *ctx) {
  pc_db_t *db = ctx;
  uint64_t oldest = UINT64_MAX;
  pthread_mutex_lock(&db->open_mu);
  for (pc_open_txn_t *e = db->open.next; e != &db->open; e = e->next) {
    uint64_t t = atomic_load(&e->ts);
    if (t < oldest) oldest = t;
  }
  pthread_mutex_unlock(&db->open_mu);
  return oldest;
}

/* A served directory's client reports the floor of its snapshots to the
 * oracle (tso/snapshots.h): the last timestamp the oracle had issued before
 * this look at the open transactions (the reply to the report before, or
 * INFO's at open), lowered to the start_ts (or, while it is being taken, the
 * lower bound) of each transaction open. A transaction linked after the
 * look takes its start_ts after that timestamp was issued, so the floor
 * bounds every snapshot of this client from now on. No timestamp is taken
 * for it: `wait` takes one issued during its check for activity. A report
 * that fails leaves the previous floor, which is lower. */
static void served_report(pc_db_t *db) {
  uint32_t ms = db->opts.timeout_ms < REPORT_TIMEOUT_MS ? db->opts.timeout_ms : REPORT_TIMEOUT_MS;
  pc_error_t err;
  uint64_t floor = oldest_open(db), last;
  if (db->report_last < floor) floor = db->report_last;
  if (floor == 0) floor = 1; /* 0 says the client leaves; no timestamp is 0 */
  if (pc_tso_remote_report(db->tso, db->report_id, floor, ms, &last, &err) == PC_OK)
    db->report_last = last;
  else
    pc_log(PC_LOG_DEBUG, "reporting this client's snapshots to the oracle: %s", err.text);
}

/* The oldest floor the served oracle's live clients report; 0 when it
 * cannot say (it started too recently to have heard from every client, or
 * it does not answer): keep everything. An oracle of a version without the
 * question leaves gc_lifetime_ms alone. */
static uint64_t served_oldest(pc_db_t *db) {
  pc_tso_oldest_t o;
  pc_error_t err;
  uint32_t ms = db->opts.timeout_ms < REPORT_TIMEOUT_MS ? db->opts.timeout_ms : REPORT_TIMEOUT_MS;
  pc_status_t st = pc_tso_remote_oldest(db->tso, ms, &o, &err);
  if (st == PC_INVALID) return UINT64_MAX;
  if (st != PC_OK) {
    pc_log(PC_LOG_WARN, "gc: the oracle does not say which snapshots its clients read (%s): "
           "collecting only what is older than store.snapshot_max_age_ms", err.text);
    return 0;
  }
  if (!o.complete) {
    pc_log(PC_LOG_DEBUG, "gc: the oracle started too recently to know every client's snapshots: "
           "collecting only what is older than store.snapshot_max_age_ms");
    return 0;
  }
  return o.oldest;
}

/* Other clients' transactions bound the safe point: by the oldest start_ts
 * that live clients report (a cluster's in their ZooKeeper nodes, a served
 * directory's to its oracle), and by gc_lifetime_ms behind the oracle, which
 * covers what reports have not carried (a transaction begun since its
 * client's last report to ZooKeeper, a client whose session is being
 * renewed, ZooKeeper that cannot be asked, a client of an older version).
 * No snapshot is kept past snapshot_max_age_ms (at least gc_lifetime_ms): a
 * forgotten reader does not hold the collector back for ever. Tablets refuse
 * reads below the safe point of their last pass, so a transaction that
 * outlives the bounds fails rather than reads a wrong value. */
static uint64_t cluster_gc_bound(pc_db_t *db, uint64_t now) {
  uint64_t behind = (uint64_t)db->opts.gc_lifetime_ms << PC_TS_LOGICAL_BITS;
  uint64_t bound = now > behind ? now - behind : 0;
  uint64_t reported;
  size_t unreported;
  pc_error_t err;
  coord_t *c = db->coord;
  if (c && pc_coord_oldest(c->session, db->opts.timeout_ms, &reported, &unreported, &err) ==
               PC_OK &&
      reported < bound)
    bound = reported;
  if (!c && db->report && (reported = served_oldest(db)) < bound) bound = reported;
  uint32_t age = db->opts.snapshot_max_age_ms > db->opts.gc_lifetime_ms
                     ? db->opts.snapshot_max_age_ms
                     : db->opts.gc_lifetime_ms;
  uint64_t oldest = (uint64_t)age << PC_TS_LOGICAL_BITS;
  if (now > oldest && bound < now - oldest) bound = now - oldest;
  return bound;
}

static void options_from_config(const pc_config_t *cfg, int create, pc_options_t *o) {
  pc_options_t *d = pc_options_create();
  if (d) {
    *o = *d;
    pc_options_destroy(d);
  }
  o->create_if_missing = create;
  o->sync = cfg->store.sync;
  o->cache_bytes = (size_t)cfg->store.cache_mb << 20;
  o->meta_cache_bytes = (size_t)cfg->store.meta_cache_mb << 20;
  o->write_buffer_bytes = (size_t)cfg->store.write_buffer_mb << 20;
  o->no_compression = !cfg->store.compress;
  o->lock_ttl_ms = cfg->store.lock_ttl_ms;
  o->timeout_ms = cfg->store.timeout_ms;
  o->one_phase_commit = cfg->store.one_phase_commit;
  o->lazy_start = cfg->store.lazy_start;
  o->gc_interval_ms = cfg->store.gc_interval_ms;
  o->gc_rate = cfg->store.gc_rate;
  o->gc_lifetime_ms = cfg->store.gc_lifetime_ms;
  o->snapshot_max_age_ms = cfg->store.snapshot_max_age_ms;
}

static pc_status_t coord_oracle_info(pc_db_t *db, uint32_t timeout_ms, uint64_t *last,
                                     pc_error_t *err) {
  coord_t *c = db->coord;
  return pc_tso_locator_info(c->tso, timeout_ms, last, err);
}

/* ---- the tablet map ------------------------------------------------------
 * Each tablet's rows come from the configuration and are checked against
 * ZooKeeper's record (written by whoever first finds it absent); the server
 * holding each one is its owner node, followed by the session's thread with
 * watches and cached in the remote store, so that transactions never wait
 * on ZooKeeper. A server that cannot be reached, or that refuses a row as
 * misrouted, makes the caller read that tablet's owner again, after a sync. */

static void follow_owner(void *ctx, size_t i, const char *addr) {
  coord_t *c = ctx;
  pc_error_t err;
  if (pc_remote_store_route(c->store, i, addr, &err) != PC_OK)
    pc_log(PC_LOG_WARN, "tablet map: %s", err.text);
}

/* A replicated tablet whose leader the map does not name (an election
 * under way, or a leader that died with its node still there): its
 * replicas' servers in turn, each refresh the next; one that does not lead
 * names the leader in its refusal (store_remote.c follows it). */
static void try_replica(coord_t *c, size_t i, const char *owner, uint32_t ms) {
  size_t n = c->nreplicas[i];
  for (size_t k = 0; k < n; k++) {
    unsigned next = atomic_fetch_add(&c->next_replica[i], 1);
    char addr[300];
    pc_error_t err;
    if (pc_coord_server_addr(c->session, c->replicas[i][next % n], ms, addr, sizeof addr, &err) !=
            PC_OK ||
        (owner && strcmp(addr, owner) == 0))
      continue;
    follow_owner(c, i, addr);
    return;
  }
}

static void refresh_owner(void *ctx, size_t i) {
  coord_t *c = ctx;
  char addr[300];
  pc_error_t err;
  /* within what is left of the caller's deadline */
  uint32_t ms = pc_deadline_bound(c->timeout_ms);
  if (!ms) return;
  pc_status_t st = pc_coord_tablet_owner(c->session, c->tablets[i], 1, ms, addr, sizeof addr,
                                         NULL, &err);
  if (c->replicas && c->replicas[i]) {
    /* the owner node when it names another server than the one that failed;
     * else the replicas in turn */
    char cur[300] = "";
    pc_remote_store_link_addr(c->store, i, cur, sizeof cur);
    if (st == PC_OK && addr[0] && strcmp(addr, cur) != 0) follow_owner(c, i, addr);
    else try_replica(c, i, st == PC_OK && addr[0] ? addr : NULL, ms);
    return;
  }
  if (st == PC_OK) follow_owner(c, i, addr[0] ? addr : NULL);
}

static pc_status_t open_tablet_map(coord_t *c, pc_db_t *db, const pc_config_t *cfg,
                                   const pc_options_t *o, pc_error_t *err) {
  c->store = db->store;
  c->timeout_ms = o->timeout_ms < 2000 ? o->timeout_ms : 2000;
  if (!(c->tablets = calloc(cfg->ntablets, sizeof *c->tablets)))
    return pc_error_set(err, PC_NOMEM, "out of memory");
  if (cfg->nservers &&
      (!(c->replicas = calloc(cfg->ntablets, sizeof *c->replicas)) ||
       !(c->nreplicas = calloc(cfg->ntablets, sizeof *c->nreplicas)) ||
       !(c->next_replica = calloc(cfg->ntablets, sizeof *c->next_replica))))
    return pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; i < cfg->ntablets; i++) {
    const pc_config_tablet_t *t = &cfg->tablets[i];
    if (!(c->tablets[c->ntablets++] = strdup(t->name)))
      return pc_error_set(err, PC_NOMEM, "out of memory");
    if (c->replicas && t->nreplicas) {
      if (!(c->replicas[i] = calloc(t->nreplicas, sizeof *c->replicas[i])))
        return pc_error_set(err, PC_NOMEM, "out of memory");
      for (size_t k = 0; k < t->nreplicas; k++)
        if (!(c->replicas[i][c->nreplicas[i]++] = strdup(t->replicas[k])))
          return pc_error_set(err, PC_NOMEM, "out of memory");
    }
    pc_status_t st = pc_coord_tablet_range(c->session, t->name, t->start, t->start_len, t->end,
                                           t->end_len, o->timeout_ms, err);
    if (st == PC_INVALID) pc_error_prefix(err, "%s", cfg->source);
    if (st != PC_OK) return st;
    char addr[300];
    st = pc_coord_tablet_owner(c->session, t->name, i == 0, o->timeout_ms, addr, sizeof addr,
                               NULL, err); /* the first after a sync: the map as of now */
    if (st != PC_OK) return st;
    follow_owner(c, i, addr[0] ? addr : NULL);
  }
  pc_remote_store_set_refresh(db->store, refresh_owner, c);
  /* a leader that stopped answering is replaced within an election timeout */
  if (cfg->nservers) pc_remote_store_set_attempt_ms(db->store, cfg->replication.election_timeout_ms);
  return pc_coord_follow_tablets(c->session, (const char *const *)c->tablets, c->ntablets,
                                 follow_owner, c, err);
}

/* Timestamps from the oracle that leads in ZooKeeper, and everything else
 * coordinated there, on one session. */
static pc_status_t open_coordinated(pc_db_t *db, const pc_config_t *cfg, const pc_options_t *o,
                                    const pc_rpc_auth_t *auth, pc_error_t *err) {
  coord_t *c = calloc(1, sizeof *c);
  if (!c) return pc_error_set(err, PC_NOMEM, "out of memory");
  db->coord = c;
  pc_zk_options_t zo = pc_config_zk(cfg);
  c->session = pc_coord_open(&zo, PC_COORD_CLIENT, o->timeout_ms, err);
  if (!c->session) return err->code;
  db->coordination = c->session;
  if (open_tablet_map(c, db, cfg, o, err) != PC_OK) return err->code;
  c->tso = pc_tso_locator_on(c->session, auth, err);
  if (!c->tso) return err->code;
  pc_coord_set_reporter(c->session, oldest_open, db);
  db->oracle_info = coord_oracle_info;
  db->batcher = pc_ts_batcher_create(pc_tso_locator_fetch, c->tso);
  return db->batcher ? PC_OK : pc_error_set(err, PC_NOMEM, "out of memory");
}

/* A served directory's client: its worker's oracle at tso.listen. */
static pc_status_t open_served(pc_db_t *db, const pc_config_t *cfg, const pc_rpc_auth_t *auth,
                               pc_error_t *err) {
  if (!cfg->tso.set || !cfg->tso.listen.set)
    return pc_error_set(err, PC_INVALID, "%s: \"served\" needs \"tso\" with \"listen\"",
                        cfg->source);
  db->tso = pc_rpc_client_create(cfg->tso.listen.host, cfg->tso.listen.port, auth, err);
  if (!db->tso) return err->code;
  db->batcher = pc_ts_batcher_create(pc_tso_remote_fetch, db->tso);
  return db->batcher ? PC_OK : pc_error_set(err, PC_NOMEM, "out of memory");
}

static pc_db_t *open_cluster(const pc_config_t *cfg, const pc_options_t *o, pc_error_t *err) {
  if (!cfg->zookeeper.set && !cfg->served) { /* pc_config_parse refuses these */
    pc_error_set(err, PC_INVALID, "%s: \"tablets\" need a \"zookeeper\" section", cfg->source);
    return NULL;
  }
  pc_db_t *db = pc_db_alloc(o);
  pc_tablet_addr_t *addrs = calloc(cfg->ntablets, sizeof *addrs);
  if (db) db->recent = pc_recent_create();
  if (!db || !addrs || !db->recent) {
    pc_db_close(db);
    free(addrs);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  db->cluster_close = cluster_close;
  db->cluster_session = cluster_session;
  for (size_t i = 0; i < cfg->ntablets; i++) {
    const pc_config_tablet_t *t = &cfg->tablets[i];
    /* coordinated: where each tablet is served comes from ZooKeeper */
    addrs[i] = (pc_tablet_addr_t){t->name, cfg->zookeeper.set ? NULL : t->listen.host,
                                  t->listen.port, {t->start, t->start_len, t->end, t->end_len},
                                  t->nreplicas > 0};
  }
  pc_rpc_auth_t auth; /* each client takes what it needs of it */
  if (pc_config_auth(cfg, &auth, err) != PC_OK) {
    free(addrs);
    goto fail;
  }
  db->store = pc_remote_store_open(addrs, cfg->ntablets, &auth, o->timeout_ms, err);
  free(addrs);
  if (!db->store) {
    pc_config_auth_release(&auth);
    goto fail;
  }
  pc_status_t st = cfg->zookeeper.set ? open_coordinated(db, cfg, o, &auth, err)
                                      : open_served(db, cfg, &auth, err);
  pc_config_auth_release(&auth);
  if (st != PC_OK) goto fail;
  db->liveness.is_alive = cluster_alive;
  db->liveness.ctx = db;
  db->gc_bound = cluster_gc_bound;
  if (!cfg->zookeeper.set) {
    /* a served directory: the oracle knows this client's snapshots from
     * before its first transaction, then from a report every second */
    uint64_t id = 0;
    while (id == 0 && getrandom(&id, sizeof id, 0) == (ssize_t)sizeof id) {
    }
    if (id == 0) {
      pc_error_set(err, PC_IO_ERROR, "getrandom: %s", strerror(errno));
      goto fail;
    }
    db->report_id = id;
    db->report = served_report;
    db->report_ms = PC_SNAPSHOT_REPORT_MS;
    /* no transaction yet: the oracle's last timestamp bounds them all (an
     * oracle that does not answer leaves 1, which only holds GC back) */
    uint32_t ms = o->timeout_ms < REPORT_TIMEOUT_MS ? o->timeout_ms : REPORT_TIMEOUT_MS;
    pc_error_t ignored;
    if (pc_tso_remote_info(db->tso, ms, &db->report_last, &ignored) != PC_OK)
      db->report_last = 1;
    served_report(db);
    db->next_report_ms = pc_now_mono_ms() + db->report_ms;
  }
  if (pc_db_start_background(db, err) != PC_OK) goto fail;
  return db;
fail:
  pc_db_close(db);
  return NULL;
}

pc_status_t pc_config_auth(const pc_config_t *cfg, pc_rpc_auth_t *out, pc_error_t *err) {
  memset(out, 0, sizeof *out);
  out->secret = cfg->secret;
  out->system_secret = cfg->system_secret;
  if (!cfg->tls.set) return PC_OK;
  pc_tls_options_t o = {cfg->tls.ca_file,
                        cfg->tls.cert_file,
                        cfg->tls.key_file,
                        cfg->tls.ca_at,
                        cfg->tls.cert_at,
                        cfg->tls.key_at,
                        (const char *const *)cfg->tls.allowed_cn,
                        cfg->tls.nallowed_cn,
                        (const char *const *)cfg->tls.system_cn,
                        cfg->tls.nsystem_cn,
                        (const char *const *)cfg->tls.server_cn,
                        cfg->tls.nserver_cn};
  out->tls = pc_tls_create(&o, err);
  return out->tls ? PC_OK : err->code;
}

void pc_config_auth_release(pc_rpc_auth_t *a) {
  pc_tls_unref(a->tls);
  memset(a, 0, sizeof *a);
}

pc_rpc_client_t *pc_config_rpc_client(const pc_config_t *cfg, const char *host, uint16_t port,
                                      pc_error_t *err) {
  pc_rpc_auth_t auth;
  if (pc_config_auth(cfg, &auth, err) != PC_OK) return NULL;
  pc_rpc_client_t *c = pc_rpc_client_create(host, port, &auth, err);
  pc_config_auth_release(&auth);
  return c;
}

/* Without create, the embedded store's data_dir must exist and hold a store,
 * as pc_db_open requires of its directory: a configuration naming a missing
 * (or empty) directory is refused, naming the file, the directory and how to
 * create it, rather than opening an empty store that answers "not found".
 * Other problems (not a directory, not a store) are left to pc_db_open. */
static pc_status_t check_data_dir(const pc_config_t *cfg, pc_error_t *err) {
  struct stat st;
  if (stat(cfg->data_dir, &st) != 0) {
    if (errno != ENOENT) return PC_OK;
    return pc_error_set(err, PC_INVALID,
                        "%s: data_dir '%s' does not exist (create it with 'percolator --config "
                        "%s init')",
                        cfg->source, cfg->data_dir, cfg->source);
  }
  if (!S_ISDIR(st.st_mode)) return PC_OK;
  DIR *d = opendir(cfg->data_dir);
  if (!d) return PC_OK;
  int empty = 1;
  for (struct dirent *e; empty && (e = readdir(d));)
    empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  closedir(d);
  if (!empty) return PC_OK;
  return pc_error_set(err, PC_INVALID,
                      "%s: data_dir '%s' is empty (initialise it with 'percolator --config %s "
                      "init')",
                      cfg->source, cfg->data_dir, cfg->source);
}

pc_status_t pc_db_cluster_lock(pc_db_t *db, const char *name, uint32_t timeout_ms, int *mine,
                               pc_error_t *err) {
  coord_t *c = db->coord;
  *mine = 1;
  if (c) return pc_coord_lock(c->session, name, timeout_ms, mine, err);
  return PC_OK;
}

pc_db_t *pc_db_open_parsed_config(const pc_config_t *cfg, int create, pc_error_t *err) {
  pc_error_clear(err);
  if (pc_failpoints_init_from_env(err) != PC_OK ||
      (!cfg->ntablets && !create && check_data_dir(cfg, err) != PC_OK))
    return NULL;
  pc_options_t o;
  options_from_config(cfg, create, &o);
  return cfg->ntablets ? open_cluster(cfg, &o, err) : pc_db_open(&o, cfg->data_dir, err);
}

pc_db_t *pc_db_open_config_create(const char *config_path, int create, pc_error_t *err) {
  return pc_db_open_config_timeout(config_path, create, 0, err);
}

pc_db_t *pc_db_open_config_timeout(const char *config_path, int create, uint32_t timeout_ms,
                                   pc_error_t *err) {
  pc_error_clear(err);
  pc_config_t *cfg = pc_config_load(config_path, err);
  if (!cfg) return NULL;
  if (timeout_ms) cfg->store.timeout_ms = timeout_ms;
  pc_db_t *db = pc_db_open_parsed_config(cfg, create, err);
  pc_config_free(cfg);
  return db;
}

pc_db_t *pc_db_open_config(const char *config_path, pc_error_t *err) {
  return pc_db_open_config_create(config_path, 0, err);
}

