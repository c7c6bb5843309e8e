/* db.h — the database handle shared by db.c and txn.c: where the store is,
 * where timestamps come from, and how lock owners' liveness is checked. */
#ifndef PC_CORE_DB_H
#define PC_CORE_DB_H

#include <pthread.h>
#include <stdatomic.h>

#include <percolator/percolator.h>

#include "core/store.h"
#include "tso/oracle.h"

/* Whether the owner session of a lock is alive. The embedded database knows
 * only itself: any other session belongs to a process that has exited,
 * because a data directory is held by one process at a time. The lock
 * service implements this for cluster mode. */
typedef struct pc_liveness {
  int (*is_alive)(void *ctx, uint64_t session);
  void *ctx;
} pc_liveness_t;

struct pc_options {
  int create_if_missing;
  int sync;
  uint32_t lock_ttl_ms;
  uint32_t timeout_ms;
  int one_phase_commit;
  int lazy_start;
  size_t cache_bytes;
  size_t meta_cache_bytes;
  size_t kept_versions_bytes;
  int keep_history;
};

struct pc_db {
  char *dir;                 /* embedded: the data directory; cluster: NULL */
  pc_options_t opts;
  pc_store_t *store;
  pc_oracle_t *oracle;       /* embedded oracle, or NULL with a remote one */
  /* cluster mode (db_cluster.c); NULL when embedded, so that embedded users
   * of the library do not link the network code */
  struct pc_rpc_client *tso; /* the oracle daemon */
  struct pc_ls_client *ls;   /* the lock service (NULL: TTLs only) */
  void (*cluster_close)(pc_db_t *db);
  uint64_t (*cluster_session)(const pc_db_t *db);
  pc_ts_batcher_t *batcher;  /* cluster: timestamps from the daemon, one request in flight */
  pc_liveness_t liveness;
  uint64_t session;
  /* lazy_start: fresh timestamps handed back by blind one-phase commits,
   * each used once as the id of a later one (0: empty slot) */
  _Atomic uint64_t spare_ts[8];
  /* embedded: the start_ts of every open transaction, so that the store can
   * drop versions no snapshot can read (snapshots_in_use). Each registration
   * is a slot of snap_slot, claimed and released without a lock (0: free,
   * UINT64_MAX: a timestamp being taken); slots below snap_high may be in
   * use. When every slot is taken, registrations go to the sorted overflow
   * array under snap_mu. */
  _Atomic uint64_t *snap_slot;
  _Atomic uint32_t snap_high;
  _Atomic size_t nsnap; /* registrations in the overflow array */
  pthread_mutex_t snap_mu;
  uint64_t *snap;
  size_t capsnap;
  int snap_tracked; /* the registry is in use (embedded, keep_history off) */
};

/* The handle of a registration (pc_db_snapshot_take, pc_db_snapshot_hold). */
typedef uint32_t pc_snap_slot_t;
#define PC_SNAP_NONE UINT32_MAX /* nothing registered (the database does not track) */

/* A start timestamp for a snapshot: from the oracle, and registered (when
 * the database tracks snapshots) in the same step, so that no version it can
 * read is collected. Release it with pc_db_snapshot_release(*slot, *ts). */
pc_status_t pc_db_snapshot_take(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts,
                                pc_snap_slot_t *slot, pc_error_t *err);
void pc_db_snapshot_release(pc_db_t *db, pc_snap_slot_t slot, uint64_t ts);
/* Registers ts, a timestamp taken earlier (a blind commit's id), until
 * pc_db_snapshot_release: versions it commits are not collected before its
 * transaction has settled them. */
pc_status_t pc_db_snapshot_hold(pc_db_t *db, uint64_t ts, pc_snap_slot_t *slot, pc_error_t *err);

/* Checks data directory dir and its FORMAT file, and creates both when dir is
 * missing or empty and create is set (*fresh = 1). *older = 1 when dir is of
 * an older format this version reads; write the current one with
 * pc_data_dir_mark once the store is open (and locked). legacy_store: a
 * directory with a "store" subdirectory and no FORMAT is of the older format
 * (tablet directories had none before format 2). A directory with other
 * files and no FORMAT, or with a FORMAT of another program or version, is an
 * error naming it. */
pc_status_t pc_data_dir_prepare(const char *dir, int create, int legacy_store, int *fresh,
                                int *older, pc_error_t *err);
pc_status_t pc_data_dir_mark(const char *dir, pc_error_t *err);

/* One timestamp bounded by timeout_ms. */
pc_status_t pc_db_ts(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts, pc_error_t *err);

/* pc_db_open_config, creating the embedded store's data_dir when it is
 * missing or empty and create is set (`percolator --config FILE init`);
 * pc_db_open_config itself refuses such a directory (tablet/db_cluster.c). */
pc_db_t *pc_db_open_config_create(const char *config_path, int create, pc_error_t *err);

#endif
