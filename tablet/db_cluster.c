/* db_cluster.c — opening a database from a JSON configuration file: the
 * embedded store in its data_dir, or, when it lists tablets, a client of the
 * cluster: the remote store routing rows to tablet servers, timestamps from
 * the oracle daemon through this process's batcher, and liveness from the
 * lock service. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "core/db.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "lockservice/coord.h"
#include "lockservice/lockservice.h"
#include "tso/tso_rpc.h"
#include "tso/tso_zk.h"

/* What a client of a cluster coordinated through ZooKeeper holds. */
typedef struct coord {
  pc_tso_locator_t *tso; /* follows the elected oracle */
  pc_coord_t *clients;   /* this client's session and node; the others' liveness */
} coord_t;

static void cluster_close(pc_db_t *db) {
  coord_t *c = db->coord;
  if (c) {
    pc_tso_locator_destroy(c->tso); /* it follows the election on the session */
    pc_coord_close(c->clients);     /* closing the session ends this client's liveness */
    free(c);
    db->coord = NULL;
  }
  if (db->tso) pc_rpc_client_destroy(db->tso);
  if (db->ls) pc_ls_client_destroy(db->ls);
  db->tso = NULL;
  db->ls = NULL;
}

static uint64_t cluster_session(const pc_db_t *db) {
  const coord_t *c = db->coord;
  if (c) return pc_coord_session(c->clients);
  return db->ls ? pc_ls_client_session(db->ls) : 0;
}

/* Cluster liveness: only a session the lock service knows to be gone is dead;
 * an unreachable service or another epoch's session falls back to the TTL. */
static int cluster_alive(void *ctx, uint64_t session) {
  pc_db_t *db = ctx;
  coord_t *c = db->coord;
  if (c) return pc_coord_liveness(c->clients, session, 1000) != PC_LS_DEAD;
  if (!db->ls || session == 0) return 1;
  return pc_ls_client_liveness(db->ls, session, 1000) != PC_LS_DEAD;
}

/* The oldest start_ts this process's open transactions hold (UINT64_MAX:
 * none), which its lock-service session reports with every keepalive. */
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

/* Other clients' transactions bound the safe point twice: by the oldest
 * start_ts that live clients report through their lock-service sessions,
 * and by gc_lifetime_ms behind the oracle, which covers what reports have
 * not carried yet (a transaction begun since its client's last keepalive, a
 * client whose session is being renewed, a lock service that cannot be
 * asked). Tablets refuse reads below the safe point of their last pass, so
 * a transaction that outlives both bounds fails rather than reads a wrong
 * value. */
static uint64_t cluster_gc_bound(pc_db_t *db, uint64_t now) {
  uint64_t behind = (uint64_t)db->opts.gc_lifetime_ms << PC_TS_LOGICAL_BITS;
  uint64_t bound = now > behind ? now - behind : 0;
  uint64_t reported;
  size_t unreported;
  pc_error_t err;
  coord_t *c = db->coord;
  pc_status_t st = c ? pc_coord_oldest(c->clients, db->opts.timeout_ms, &reported, &unreported,
                                       &err)
               : db->ls ? pc_ls_client_oldest(db->ls, db->opts.timeout_ms, &reported,
                                              &unreported, &err)
                        : PC_UNAVAILABLE;
  if (st == PC_OK && reported < bound) bound = reported;
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
  o->lock_ttl_ms = cfg->store.lock_ttl_ms;
  o->timeout_ms = cfg->store.timeout_ms;
  o->one_phase_commit = cfg->store.one_phase_commit;
  o->lazy_start = cfg->store.lazy_start;
  o->gc_interval_ms = cfg->store.gc_interval_ms;
  o->gc_rate = cfg->store.gc_rate;
  o->gc_lifetime_ms = cfg->store.gc_lifetime_ms;
}

static pc_status_t coord_oracle_info(pc_db_t *db, uint32_t timeout_ms, uint64_t *last,
                                     pc_error_t *err) {
  coord_t *c = db->coord;
  return pc_tso_locator_info(c->tso, timeout_ms, last, err);
}

/* Timestamps from the oracle that leads in ZooKeeper. */
static pc_status_t open_coordinated(pc_db_t *db, const pc_config_t *cfg, const pc_options_t *o,
                                    pc_error_t *err) {
  coord_t *c = calloc(1, sizeof *c);
  if (!c) return pc_error_set(err, PC_NOMEM, "out of memory");
  db->coord = c;
  /* one session per client handle: its node, and the oracle's election */
  c->clients = pc_coord_open(cfg->zookeeper.connect, cfg->zookeeper.root,
                             cfg->zookeeper.session_timeout_ms, PC_COORD_CLIENT, o->timeout_ms,
                             err);
  if (!c->clients) return err->code;
  c->tso = pc_tso_locator_on(c->clients, cfg->secret, err);
  if (!c->tso) return err->code;
  pc_coord_set_reporter(c->clients, oldest_open, db);
  db->oracle_info = coord_oracle_info;
  db->batcher = pc_ts_batcher_create(pc_tso_locator_fetch, c->tso);
  return db->batcher ? PC_OK : pc_error_set(err, PC_NOMEM, "out of memory");
}

static pc_db_t *open_cluster(const pc_config_t *cfg, const pc_options_t *o, pc_error_t *err) {
  if (!cfg->zookeeper.set && (!cfg->tso.set || !cfg->tso.listen.set)) {
    pc_error_set(err, PC_INVALID,
                 "%s: \"tablets\" need a \"tso\" section with \"listen\", or \"zookeeper\"",
                 cfg->source);
    return NULL;
  }
  pc_db_t *db = pc_db_alloc(o);
  pc_tablet_addr_t *addrs = calloc(cfg->ntablets, sizeof *addrs);
  if (!db || !addrs) {
    pc_db_close(db);
    free(addrs);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  db->cluster_close = cluster_close;
  db->cluster_session = cluster_session;
  for (size_t i = 0; i < cfg->ntablets; i++) {
    const pc_config_tablet_t *t = &cfg->tablets[i];
    addrs[i] = (pc_tablet_addr_t){t->name, t->listen.host, t->listen.port,
                                  {t->start, t->start_len, t->end, t->end_len}};
  }
  db->store = pc_remote_store_open(addrs, cfg->ntablets, cfg->secret, o->timeout_ms, err);
  free(addrs);
  if (!db->store) goto fail;
  if (cfg->zookeeper.set) {
    if (open_coordinated(db, cfg, o, err) != PC_OK) goto fail;
  } else {
    db->tso =
        pc_rpc_client_create(cfg->tso.listen.host, cfg->tso.listen.port, cfg->secret, err);
    if (!db->tso) goto fail;
    db->batcher = pc_ts_batcher_create(pc_tso_remote_fetch, db->tso);
    if (!db->batcher) {
      pc_error_set(err, PC_NOMEM, "out of memory");
      goto fail;
    }
  }
  if (cfg->lockservice.set && cfg->lockservice.listen.set) {
    db->ls = pc_ls_client_create(cfg->lockservice.listen.host, cfg->lockservice.listen.port,
                                 cfg->secret, cfg->lockservice.session_ttl_ms, err);
    if (!db->ls) goto fail;
    pc_ls_client_set_reporter(db->ls, oldest_open, db);
  }
  db->liveness.is_alive = cluster_alive;
  db->liveness.ctx = db;
  db->gc_bound = cluster_gc_bound;
  if (pc_db_start_background(db, err) != PC_OK) goto fail;
  return db;
fail:
  pc_db_close(db);
  return NULL;
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
  uint64_t holder = 0;
  *mine = 1;
  if (c) return pc_coord_lock(c->clients, name, timeout_ms, mine, err);
  if (db->ls) return pc_ls_client_lock_try(db->ls, name, strlen(name), timeout_ms, mine, &holder, err);
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
  pc_error_clear(err);
  pc_config_t *cfg = pc_config_load(config_path, err);
  if (!cfg) return NULL;
  pc_db_t *db = pc_db_open_parsed_config(cfg, create, err);
  pc_config_free(cfg);
  return db;
}

pc_db_t *pc_db_open_config(const char *config_path, pc_error_t *err) {
  return pc_db_open_config_create(config_path, 0, err);
}

