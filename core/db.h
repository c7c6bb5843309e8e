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
 * because a data directory is held by one process at a time. ZooKeeper
 * sessions implement this for cluster mode (tablet/db_cluster.c). */
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
  size_t write_buffer_bytes;
  uint32_t gc_interval_ms; /* embedded: background GC period (0: none) */
  uint32_t gc_rate;        /* keys a GC pass deletes per second at most (0: no bound) */
  uint32_t gc_lifetime_ms; /* cluster: the safe point stays this far behind the oracle */
};

/* A transaction while it is open, in its database's list (core/gc.c): its
 * start_ts bounds the GC safe point, and while it commits, its primary is
 * kept alive by the heartbeat. */
typedef struct pc_open_txn {
  struct pc_open_txn *prev, *next; /* under the db's open_mu */
  int linked;                      /* the owner's own note (read by no other thread) */
  /* start_ts, or while it is being taken a lower bound of it (the db's
   * ts_floor when the entry was linked) */
  _Atomic uint64_t ts;
  /* set by the transaction while it holds locks (under open_mu): */
  const pc_cell_t *primary; /* NULL when it holds none */
  uint64_t start_mono_ms;   /* when start_ts was taken (client clock) */
} pc_open_txn_t;

struct pc_db {
  char *dir;                 /* embedded: the data directory; cluster: NULL */
  pc_options_t opts;
  pc_store_t *store;
  pc_oracle_t *oracle;       /* embedded oracle, or NULL with a remote one */
  /* cluster mode (tablet/db_cluster.c); NULL when embedded, so that embedded
   * users of the library do not link the network code */
  struct pc_rpc_client *tso; /* the oracle daemon */
  /* cluster: the last timestamp the oracle issued, when tso is NULL (an
   * oracle elected in ZooKeeper) */
  pc_status_t (*oracle_info)(pc_db_t *db, uint32_t timeout_ms, uint64_t *last, pc_error_t *err);
  void *coord;               /* cluster: the coordination client (tablet/db_cluster.c) */
  /* cluster: the handle's ZooKeeper session (lockservice/coord.h), for the
   * workers' membership; NULL embedded and without coordination */
  struct pc_coord *coordination;
  void (*cluster_close)(pc_db_t *db);
  uint64_t (*cluster_session)(const pc_db_t *db);
  pc_ts_batcher_t *batcher;  /* cluster: timestamps from the daemon, one request in flight */
  pc_liveness_t liveness;
  uint64_t session;

  /* open transactions, oldest first by link order (not by ts) */
  pthread_mutex_t open_mu;
  pc_open_txn_t open;        /* sentinel of the circular list */
  size_t nopen;
  /* every timestamp this client takes from now on is above it: one taken at
   * open, then the one the last GC pass took */
  _Atomic uint64_t ts_floor;

  /* background work (core/gc.c): the lease thread renews the leases of
   * committing transactions; the background thread refreshes the observed
   * columns and, embedded, runs periodic garbage collection */
  pthread_mutex_t bg_mu;
  pthread_cond_t bg_cv;
  pthread_t bg_thread;
  pthread_t lease_thread; /* renews leases only (gc.c): never behind a pass or a refresh */
  int bg_running, lease_running, bg_stop;
  uint64_t next_gc_ms;
  /* cluster: the highest safe point other clients allow, given a fresh
   * timestamp now (NULL: now) */
  uint64_t (*gc_bound)(pc_db_t *db, uint64_t now);
  /* cluster: publishes the safe point before a pass deletes below it; a
   * failure stops the pass (NULL: nothing to publish) */
  pc_status_t (*gc_publish)(pc_db_t *db, uint64_t safe, pc_error_t *err);
  pthread_mutex_t gc_mu;     /* one pass at a time */
  pc_gc_stats_t gc_last;     /* the last pass (under gc_mu) */
  uint64_t gc_passes;

  /* the observed columns (core/observed.c): an immutable set, replaced
   * whole under the write lock of observed_mu (which prefers writers);
   * commits read it under the read lock, and not at all while
   * observed_strong says it has no strong observer; observed_update_mu
   * serialises the updates (a refresh, a registration) */
  pthread_rwlock_t observed_mu;
  pthread_mutex_t observed_update_mu;
  struct pc_observed_set *observed;
  _Atomic int observed_loaded; /* read from the store at least once */
  _Atomic int observed_strong; /* the set names a strong observer */
  uint64_t next_observed_ms;   /* the background thread's next refresh */

  /* the notification workers of this handle (notify/claims.c) share an
   * in-process lock service, so that two of their threads never scan the
   * same claim at once: created by the first worker under notify_mu,
   * released by pc_db_close through notify_ls_destroy (so that core links
   * nothing of lockservice/) */
  pthread_mutex_t notify_mu;
  struct pc_ls *notify_ls;
  void (*notify_ls_destroy)(struct pc_ls *ls);
};

/* A database handle with opts and empty lists, for pc_db_open and the
 * cluster client to fill; NULL when out of memory. Release with pc_db_close. */
pc_db_t *pc_db_alloc(const pc_options_t *opts);

/* Links e into db's open transactions and takes its start_ts (*ts). PC_OK:
 * e->ts is the start_ts; otherwise e is unlinked. Unlink with
 * pc_db_close_txn. */
pc_status_t pc_db_open_txn(pc_db_t *db, pc_open_txn_t *e, uint32_t timeout_ms, uint64_t *ts,
                           pc_error_t *err);
/* pc_db_open_txn in two steps, for a start_ts taken elsewhere (a tablet's
 * get_fresh): link first (e->ts holds a lower bound meanwhile, so the GC
 * never passes the timestamp about to be taken), then record it. */
void pc_db_link_txn(pc_db_t *db, pc_open_txn_t *e);
void pc_db_txn_started(pc_open_txn_t *e, uint64_t ts);
void pc_db_close_txn(pc_db_t *db, pc_open_txn_t *e);
/* Marks e as holding locks with primary (NULL: none any more), for the heartbeat. */
void pc_db_txn_locking(pc_db_t *db, pc_open_txn_t *e, const pc_cell_t *primary);
/* The TTL a lock of e written now should carry: lock_ttl_ms past now, counted
 * like every lock's from start_ts's physical time. */
uint32_t pc_db_lock_ttl(const pc_db_t *db, const pc_open_txn_t *e);

/* Starts and stops the background thread (core/gc.c). */
pc_status_t pc_db_start_background(pc_db_t *db, pc_error_t *err);
void pc_db_stop_background(pc_db_t *db);

/* ---- observed columns (recorded in the store, loaded by every client) ----
 *
 * An observer registered for (table, column) with a kind is recorded in the
 * store itself (the system table PC_SYSTEM_TABLE), so that every client —
 * whatever configuration it started from, `percolator set` included —
 * marks its writes of a strongly observed column, and their commit writes
 * the strong notification in the same row operation as the commit record
 * (by whoever commits the cell: the client or a roll-forward). A client
 * reads the records when its background thread starts (at open) and again
 * every PC_OBSERVED_REFRESH_MS; a commit before the first read succeeded
 * reads them itself, and fails if it cannot (a notification is never left
 * out because the records were not known). A registration by another
 * client is therefore seen within PC_OBSERVED_REFRESH_MS: commits in
 * between write no notification, so register observers before the columns
 * are written (the worker does so when it starts).
 *
 * The record of observer NAME, in PC_SYSTEM_TABLE:
 *   row    "observer/" NAME
 *   column "def"
 *   value  u8 1 (format), u8 kind (0 strong, 1 weak), u32 length + table,
 *          u32 length + column (big-endian lengths)
 * Users may read and scan PC_SYSTEM_TABLE; only the _system calls below
 * write it. */
#define PC_SYSTEM_TABLE "percolator.system"
#define PC_OBSERVED_REFRESH_MS 1000
#define PC_OBSERVER_ROW_PREFIX "observer/"
#define PC_OBSERVER_COLUMN "def"

/* Records observer name (1..64 of [A-Za-z0-9_.-]) for (table, col) with kind
 * (0 strong, 1 weak: pc_observer_kind_t), in a transaction, and adds it to
 * this client's set at once. Registering the same again is PC_OK; a name
 * already registered differently is PC_INVALID naming both. */
pc_status_t pc_db_register_observed(pc_db_t *db, const char *name, const char *table,
                                    const char *col, size_t clen, int kind, pc_error_t *err);
/* Calls fn for every recorded observer (from the store, now). */
pc_status_t pc_db_observed_foreach(pc_db_t *db,
                                   int (*fn)(void *ctx, const char *name, const char *table,
                                             const char *col, size_t clen, int kind),
                                   void *ctx, pc_error_t *err);
/* Whether this client's set has a strong observer of (table, col). */
int pc_db_strongly_observed(pc_db_t *db, const char *table, const char *col, size_t clen);
/* Reads the records from the store (every call of a transaction bounded by
 * timeout_ms) and replaces this client's set with them; on failure the set
 * stays as it was. */
pc_status_t pc_db_observed_refresh(pc_db_t *db, uint32_t timeout_ms, pc_error_t *err);
/* PC_OK once the set has been read from the store: at once after the
 * first successful refresh, else a refresh now. */
pc_status_t pc_db_observed_ready(pc_db_t *db, pc_error_t *err);
/* Releases the set (pc_db_close). */
void pc_db_observed_free(pc_db_t *db);

/* ---- system columns ---------------------------------------------------------
 *
 * Columns that begin with byte 0xFF belong to the system (the ack cells of
 * observers); pc_txn_set/delete/get/notify_weak refuse them (PC_INVALID) and
 * scans do not return them. The notification engine reads and writes them
 * here: these two calls take any column (up to PC_MAX_STORED_COLUMN bytes,
 * so that the ack column of every user column fits) and any table,
 * PC_SYSTEM_TABLE included. An ack cell's value is the start_ts of the
 * observer's run, 8 bytes big-endian (its commit record's start_ts is the
 * same). */
#define PC_SYSTEM_COLUMN_BYTE PC_SYSTEM_BYTE
pc_status_t pc_txn_get_system(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                              const char *col, size_t clen, char **value, size_t *vlen,
                              pc_error_t *err);
pc_status_t pc_txn_set_system(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                              const char *col, size_t clen, const char *value, size_t vlen,
                              pc_error_t *err);
/* Buffers a delete, with the rights of the two calls above (the worker's
 * parked-failure records in PC_SYSTEM_TABLE, removed when re-queued). */
pc_status_t pc_txn_delete_system(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                                 const char *col, size_t clen, pc_error_t *err);
/* Appends to out the ack column of observer for column col: 0xFF "ack" 0x00
 * observer 0x00 col. 0, or -1 when memory runs out. */
int pc_ack_column(pc_buf_t *out, const char *observer, const char *col, size_t clen);
/* Checks a table name (percolator.h's rules); PC_INVALID naming it. */
pc_status_t pc_check_table(const char *table, pc_error_t *err);

/* A transaction begun for a notified cell: an observer's run, which carries
 * its trigger as Fluo's transactions do. It is an ordinary transaction, and
 * its commit also deletes the cell's notifications with ts below the bound
 * given to pc_txn_trigger_bound (0, the default: none) when it can do so in
 * the same atomic write: when the commit is one store operation (one-phase)
 * that writes in the cell's row (a strong observer's ack is there). txn.c's
 * trigger_clear is where that is decided. pc_txn_trigger_cleared says after
 * the commit whether they went; when not, the caller deletes them itself
 * (the store's clear_notify). The cell is copied. Release with
 * pc_txn_destroy. */
pc_txn_t *pc_txn_begin_for(pc_db_t *db, const pc_cell_t *cell, pc_error_t *err);
void pc_txn_trigger_bound(pc_txn_t *txn, uint64_t below);
int pc_txn_trigger_cleared(const pc_txn_t *txn);

/* Settles the transaction behind lock (txn.c): rolls the cell forward or
 * back when its primary says so, or its owner is gone; PC_LOCKED while the
 * owner is alive. */
pc_status_t pc_txn_resolve_lock(pc_db_t *db, const pc_lock_info_t *lock, uint64_t deadline,
                                pc_error_t *err);

/* Checks data directory dir and its FORMAT file, and creates both when dir is
 * missing or empty and create is set (*fresh = 1). A directory with other
 * files and no FORMAT, or with a FORMAT of another program or version, is an
 * error naming it. */
pc_status_t pc_data_dir_prepare(const char *dir, int create, int *fresh, pc_error_t *err);

/* One timestamp bounded by timeout_ms. */
pc_status_t pc_db_ts(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts, pc_error_t *err);

/* pc_db_open_config, creating the embedded store's data_dir when it is
 * missing or empty and create is set (`percolator --config FILE init`);
 * pc_db_open_config itself refuses such a directory (tablet/db_cluster.c). */
pc_db_t *pc_db_open_config_create(const char *config_path, int create, pc_error_t *err);

#endif
