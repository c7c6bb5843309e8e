/* db_cluster.c — opening a database from a JSON configuration file: the
 * embedded store in its data_dir, or, when it lists tablets, a client of the
 * cluster: the remote store routing rows to tablet servers, timestamps from
 * the oracle daemon through this process's batcher, and liveness from the
 * lock service. */
#include <stdlib.h>

#include "config/config.h"
#include "core/db.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "lockservice/lockservice.h"
#include "tso/tso_rpc.h"

static void cluster_close(pc_db_t *db) {
  if (db->tso) pc_rpc_client_destroy(db->tso);
  if (db->ls) pc_ls_client_destroy(db->ls);
  db->tso = NULL;
  db->ls = NULL;
}

static uint64_t cluster_session(const pc_db_t *db) {
  return db->ls ? pc_ls_client_session(db->ls) : 0;
}

/* Cluster liveness: only a session the lock service knows to be gone is dead;
 * an unreachable service or another epoch's session falls back to the TTL. */
static int cluster_alive(void *ctx, uint64_t session) {
  pc_db_t *db = ctx;
  if (!db->ls || session == 0) return 1;
  return pc_ls_client_liveness(db->ls, session, 1000) != PC_LS_DEAD;
}

static void options_from_config(const pc_config_t *cfg, pc_options_t *o) {
  pc_options_t *d = pc_options_create();
  if (d) {
    *o = *d;
    pc_options_destroy(d);
  }
  o->create_if_missing = 1;
  o->sync = cfg->store.sync;
  o->cache_bytes = (size_t)cfg->store.cache_mb << 20;
  o->meta_cache_bytes = (size_t)cfg->store.meta_cache_mb << 20;
  o->kept_versions_bytes = (size_t)cfg->store.kept_versions_mb << 20;
  o->lock_ttl_ms = cfg->store.lock_ttl_ms;
  o->timeout_ms = cfg->store.timeout_ms;
  o->one_phase_commit = cfg->store.one_phase_commit;
  o->lazy_start = cfg->store.lazy_start;
  o->keep_history = cfg->store.keep_history;
}

static pc_db_t *open_cluster(const pc_config_t *cfg, const pc_options_t *o, pc_error_t *err) {
  if (!cfg->tso.set || !cfg->tso.listen.set) {
    pc_error_set(err, PC_INVALID, "%s: \"tablets\" need a \"tso\" section with \"listen\"",
                 cfg->source);
    return NULL;
  }
  pc_db_t *db = calloc(1, sizeof *db);
  pc_tablet_addr_t *addrs = calloc(cfg->ntablets, sizeof *addrs);
  if (!db || !addrs) {
    free(db);
    free(addrs);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  db->opts = *o;
  pthread_mutex_init(&db->snap_mu, NULL); /* unused: tablets keep every version */
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
  db->tso = pc_rpc_client_create(cfg->tso.listen.host, cfg->tso.listen.port, cfg->secret, err);
  if (!db->tso) goto fail;
  db->batcher = pc_ts_batcher_create(pc_tso_remote_fetch, db->tso);
  if (!db->batcher) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  if (cfg->lockservice.set && cfg->lockservice.listen.set) {
    db->ls = pc_ls_client_create(cfg->lockservice.listen.host, cfg->lockservice.listen.port,
                                 cfg->secret, cfg->lockservice.session_ttl_ms, err);
    if (!db->ls) goto fail;
  }
  db->liveness.is_alive = cluster_alive;
  db->liveness.ctx = db;
  return db;
fail:
  pc_db_close(db);
  return NULL;
}

pc_db_t *pc_db_open_config(const char *config_path, pc_error_t *err) {
  pc_error_clear(err);
  pc_config_t *cfg = pc_config_load(config_path, err);
  if (!cfg) return NULL;
  if (pc_failpoints_init_from_env(err) != PC_OK) {
    pc_config_free(cfg);
    return NULL;
  }
  pc_options_t o;
  options_from_config(cfg, &o);
  pc_db_t *db = cfg->ntablets ? open_cluster(cfg, &o, err) : pc_db_open(&o, cfg->data_dir, err);
  pc_config_free(cfg);
  return db;
}

