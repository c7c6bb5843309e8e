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
  int no_compression; /* the store's files without snappy */
  uint32_t gc_interval_ms; /* embedded: background GC period (0: none) */
  uint32_t gc_rate;        /* keys a GC pass deletes per second at most (0: no bound) */
  uint32_t gc_lifetime_ms; /* cluster: the safe point stays this far behind the oracle */
  /* other clients' snapshots hold the safe point back at most this long
   * (never less than gc_lifetime_ms) */
  uint32_t snapshot_max_age_ms;
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
  int dir_lock;              /* embedded: the descriptor holding DIR/LOCK; else -1 */
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
  /* a served directory's client: reports the floor of its snapshots to the
   * oracle (tablet/db_cluster.c), from the background thread every
   * report_ms (NULL: nothing to report) */
  void (*report)(pc_db_t *db);
  uint32_t report_ms;
  uint64_t next_report_ms;
  uint64_t report_id; /* the client's id in its reports: random, not 0 */
  /* a timestamp the oracle had issued before the last report's reply came:
   * every start_ts taken from then on is above it (the next report's floor) */
  uint64_t report_last;
  pthread_mutex_t gc_mu;     /* one pass at a time */
  pc_gc_stats_t gc_last;     /* the last pass (under gc_mu) */
  uint64_t gc_passes;

  /* the notification workers of this handle (notify/claims.c) share an
   * in-process lock service, so that two of their threads never scan the
   * same claim at once: created by the first worker under notify_mu,
   * released by pc_db_close through notify_ls_destroy (so that core links
   * nothing of lockservice/) */
  pthread_mutex_t notify_mu;
  struct pc_ls *notify_ls;
  void (*notify_ls_destroy)(struct pc_ls *ls);

  /* cluster: this process's newest commits by cell (core/recent.h), so that
   * a transaction sure to lose a write conflict to one learns it before its
   * prewrite; NULL embedded, where a loser's one-phase commit writes nothing */
  struct pc_recent *recent;
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
/* Links e with start_ts ts, which an open transaction of db already holds
 * (pc_txn_begin_alongside): the safe point is at or below ts already. */
void pc_db_link_txn_at(pc_db_t *db, pc_open_txn_t *e, uint64_t ts);
void pc_db_close_txn(pc_db_t *db, pc_open_txn_t *e);
/* Marks e as holding locks with primary (NULL: none any more), for the heartbeat. */
void pc_db_txn_locking(pc_db_t *db, pc_open_txn_t *e, const pc_cell_t *primary);
/* The TTL a lock of e written now should carry: lock_ttl_ms past now, counted
 * like every lock's from start_ts's physical time. */
uint32_t pc_db_lock_ttl(const pc_db_t *db, const pc_open_txn_t *e);

/* Starts and stops the background thread (core/gc.c). */
pc_status_t pc_db_start_background(pc_db_t *db, pc_error_t *err);
void pc_db_stop_background(pc_db_t *db);

/* ---- observers registered in the store (core/observed.c) -------------------
 *
 * An observer registered for (table, column) with a kind is recorded in the
 * store itself, in the system table PC_SYSTEM_TABLE, whichever worker or
 * configuration registered it, and every store (the embedded one, each
 * tablet) is given a copy (store.h's observer_update) before the
 * registration counts as made. The store, not the client, then writes the
 * strong notification of every put and delete it commits of a strongly
 * observed column (store_txn.c), so no client needs to know the
 * registrations: one opened long before commits the notifications all the
 * same, and the records are read only by the workers and the operator's
 * verbs. A malformed record is reported, named, and passed over; it never
 * stops a commit, and pc_db_unregister_observed removes it.
 *
 * The cells of the column committed before the registration are presented
 * to the new observer by its backfill (pc_db_backfill_step): a worker that
 * runs it goes through the table in pages, each read at a snapshot taken
 * after every store had the copy, and runs it on each cell. Every commit is
 * therefore either seen by the backfill or applied by a store that writes
 * its notification (docs/ARCHITECTURE.md, "Registration misses nothing").
 *
 * Row "observer/" NAME of PC_SYSTEM_TABLE holds:
 *   column "def"       the registration record (keys.h, pc_obs_record_t)
 *   column "backfill"  u8 1 (format), u8 state (pc_backfill_state_t), u64
 *                      since (a timestamp taken once every store had the
 *                      copy), u64 cells presented, u8 has_row [str row]: the
 *                      last row the backfill went past
 * A record without a backfill cell was made before backfills existed and
 * counts as done. Users may read and scan PC_SYSTEM_TABLE; only the _system
 * calls below write it. */
#define PC_SYSTEM_TABLE "percolator.system"
#define PC_OBSERVER_ROW_PREFIX "observer/"
#define PC_OBSERVER_COLUMN "def"
#define PC_BACKFILL_COLUMN "backfill"

typedef enum pc_backfill_state {
  PC_BACKFILL_REGISTERING = 0, /* recorded; not yet given to every store */
  PC_BACKFILL_RUNNING = 1,     /* every store has it; existing cells being presented */
  PC_BACKFILL_DONE = 2
} pc_backfill_state_t;

/* Records observer name (1..64 of [A-Za-z0-9_.-]) for (table, col) with kind
 * (0 strong, 1 weak: pc_observer_kind_t) in a transaction, gives every
 * store the copy, and marks its backfill as running; fails (the record
 * then stays REGISTERING) when a store does not take the copy. Registering
 * the same again gives the stores the copy again, which only repairs one
 * that lost it: a store that does not answer is then logged, not an error.
 * A name already registered differently is PC_INVALID naming both, and an
 * observer of PC_SYSTEM_TABLE is PC_INVALID. */
pc_status_t pc_db_register_observed(pc_db_t *db, const char *name, const char *table,
                                    const char *col, size_t clen, int kind, pc_error_t *err);

/* A record of PC_SYSTEM_TABLE's observer rows, as pc_db_observers reads it.
 * Strings are valid during the callback only. */
typedef struct pc_observer_info {
  const char *name; /* the row's part after "observer/" (any bytes when malformed) */
  size_t name_len;
  /* NULL, or why the record is malformed: the fields below are then unset */
  const char *problem;
  const char *table, *col;
  size_t clen;
  int kind;          /* pc_observer_kind_t */
  int state;         /* pc_backfill_state_t */
  uint64_t presented; /* cells the backfill has presented so far */
  const char *at_row; /* the last row it went past (NULL: none yet) */
  size_t at_len;
} pc_observer_info_t;

/* Calls fn for every record in the store now, malformed ones included
 * (problem set); fn returns nonzero to stop. */
pc_status_t pc_db_observers(pc_db_t *db, int (*fn)(void *ctx, const pc_observer_info_t *o),
                            void *ctx, pc_error_t *err);
/* The same, its reads bounded by timeout_ms instead of the handle's timeout
 * (pc_notify_wait's bound). */
pc_status_t pc_db_observers_within(pc_db_t *db, uint32_t timeout_ms,
                                   int (*fn)(void *ctx, const pc_observer_info_t *o), void *ctx,
                                   pc_error_t *err);

/* Gives every store the copy of every well-formed record and moves the
 * registrations left REGISTERING (a registrar that stopped half-way) to
 * RUNNING: what a worker does when it starts, so that a store that lost
 * its copies, or a registration never finished, is repaired. Copies are
 * only added: removing one is pc_db_unregister_observed's alone. A store
 * that does not take the copy of a finished registration is logged; one
 * that does not take a REGISTERING one's is an error. */
pc_status_t pc_db_observers_sync(pc_db_t *db, pc_error_t *err);

/* Retires observer name: deletes its record (well-formed or not) and its
 * backfill, then removes its copy from every store; from then on its
 * coverage is not waited for and its notifications may go. *found says
 * whether a record was there. Removing a name that is not registered is
 * PC_OK (the stores' copies are removed all the same). */
pc_status_t pc_db_unregister_observed(pc_db_t *db, const char *name, size_t nlen, int *found,
                                      pc_error_t *err);

/* Presents one cell of observer o's column to it (o->name, table, col,
 * kind are set): the backfill's caller runs the observer on (table, row,
 * col), unless its ack is at or past since — a run that began once the
 * registration had taken effect saw the cell, and every change after it
 * has a notification of its own. 0 when the cell is presented (the observer
 * ran, skipped it, or its failure was parked), nonzero when it must be
 * presented again later: the page stops before it. */
typedef int (*pc_backfill_fn)(void *ctx, const pc_observer_info_t *o, const char *row,
                              size_t rlen, uint64_t since);

/* One page of observer name's backfill: a transaction at a fresh snapshot
 * S reads the next rows of the observer's table after where the last page
 * stopped, calls fn for each cell of its column (in row order, until fn
 * declines one) — and for each cell of it deleted since the observer ran on
 * it under that name (its ack is there: it was retired and is registered
 * again, and must learn of the delete) — and records the progress — cells presented, the last row
 * gone past, and DONE once the table is gone through — in its commit.
 * *done = 1 once the state is DONE (or the observer is not RUNNING).
 * PC_BUSY when fn declined a cell (call again later), PC_CONFLICT when the
 * page kept meeting another backfiller or locks. */
pc_status_t pc_db_backfill_step(pc_db_t *db, const char *name, pc_backfill_fn fn, void *ctx,
                                int *done, pc_error_t *err);

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
/* pc_txn_scan that returns the system's columns (the acks of observers)
 * besides the users' (not the transaction's own buffered writes of them). */
pc_scan_t *pc_txn_scan_system(pc_txn_t *txn, const char *table, const char *start, size_t slen,
                              const char *end, size_t elen, pc_error_t *err);
/* pc_txn_get_many for the system's columns too (the acks of observers). */
pc_status_t pc_txn_get_many_system(pc_txn_t *txn, const pc_cell_ref_t *cells, size_t n,
                                   pc_value_t *values, pc_error_t *err);
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
/* The observer name of a cell's turn: the ack column of PC_TURN_OBSERVER
 * (a name no observer can have) is written by every observer's run on the
 * cell besides its own ack, so that runs of different observers of one
 * cell conflict as runs of one observer do (notify/run.c). */
#define PC_TURN_OBSERVER "*"

/* Checks a table name (percolator.h's rules); PC_INVALID naming it. */
pc_status_t pc_check_table(const char *table, pc_error_t *err);

/* pc_txn_begin with every step of the transaction, its start timestamp
 * included, bounded by timeout_ms instead of the handle's timeout (bounded
 * callers such as pc_notify_wait). */
pc_txn_t *pc_txn_begin_within(pc_db_t *db, uint32_t timeout_ms, pc_error_t *err);
/* A second transaction at the snapshot of of, for another thread to read
 * in while of's reads go on in its own (one snapshot read by several
 * threads, as `percolator check` reads its tables): gets and scans only, a
 * write is refused (PC_INVALID). It takes of's start_ts then (of's first
 * read, with lazy_start). of must stay open until this one is destroyed.
 * NULL on error (of not open, or its start_ts not taken). Release with
 * pc_txn_destroy. */
pc_txn_t *pc_txn_begin_alongside(pc_txn_t *of, pc_error_t *err);
/* A transaction begun for a notified cell: an observer's run, which carries
 * its trigger as Fluo's transactions do. It is an ordinary transaction, and
 * its commit also deletes the cell's notifications with ts below the bound
 * given to pc_txn_trigger_bound (0, the default: none) when it can do so in
 * the same atomic write: when the commit is one store operation (one-phase)
 * that writes in the cell's row (an observer's ack is there). txn.c's
 * trigger_clear is where that is decided. The bound is on behalf of
 * observers (each name NUL-terminated, olen bytes, valid until the commit),
 * and the store deletes nothing unless they account for every observer
 * registered for the column (pc_notify_clear_t). pc_txn_trigger_cleared
 * says after the commit whether they went; when not, the caller deletes
 * them itself (the store's clear_notify). The cell is copied. Release with
 * pc_txn_destroy. */
pc_txn_t *pc_txn_begin_for(pc_db_t *db, const pc_cell_t *cell, pc_error_t *err);
void pc_txn_trigger_bound(pc_txn_t *txn, uint64_t below, const char *observers, size_t olen);
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
/* Marks a data directory of format 3, which this version reads as it is, as
 * format 4 (logged), so that older versions no longer open it. Call it
 * holding the directory's lock (pc_data_dir_lock). */
pc_status_t pc_data_dir_upgrade(const char *dir, pc_error_t *err);

/* Takes the data directory's one lock, DIR/LOCK (flock), before anything
 * inside it is opened, and writes "PID ROLE" there. Returns the descriptor
 * holding it, or -1 with PC_BUSY naming the holder ("worker 1234") when
 * another process (or another open of this one) holds it. */
int pc_data_dir_lock(const char *dir, const char *role, pc_error_t *err);
/* Releases a lock of pc_data_dir_lock (fd < 0: nothing). */
void pc_data_dir_unlock(int fd);
/* The pid and role that DIR/LOCK names: 0, or -1 when it names none. Only
 * meaningful while the lock is held (pc_data_dir_lock failed with PC_BUSY). */
int pc_data_dir_holder(const char *dir, long *pid, char *role, size_t cap);
/* Keeps dir private to this user: creates it mode 0700 when missing, and
 * takes group and other permissions off it and off the files directly in it
 * (a store's directory, before and after LevelDB opens it: the files LevelDB
 * makes later are created under the process's umask, inside a directory
 * nobody else can enter). */
pc_status_t pc_dir_private(const char *dir, pc_error_t *err);

/* One timestamp bounded by timeout_ms. */
pc_status_t pc_db_ts(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts, pc_error_t *err);

/* pc_db_open_config, creating the embedded store's data_dir when it is
 * missing or empty and create is set (`percolator --config FILE init`);
 * pc_db_open_config itself refuses such a directory (tablet/db_cluster.c). */
pc_db_t *pc_db_open_config_create(const char *config_path, int create, pc_error_t *err);

/* The same with timeout_ms (when not 0) in place of the file's
 * store.timeout_ms: the bound of every call of the database, the requests to
 * tablets included (`percolator --timeout`). */
pc_db_t *pc_db_open_config_timeout(const char *config_path, int create, uint32_t timeout_ms,
                                   pc_error_t *err);

#endif
