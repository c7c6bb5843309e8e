/* store.h — the storage interface the transaction client talks to.
 *
 * Every operation is atomic per row: the implementation latches
 * the rows involved, reads what it must check and applies its changes in one
 * write. An operation may name cells of many rows (the paper's batching); it
 * then applies all of them or none. The embedded implementation is
 * store_local.c; a network client to tablet servers implements the same
 * table of operations, so the transaction code never knows where the store is.
 */
#ifndef PC_CORE_STORE_H
#define PC_CORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"

typedef struct pc_store pc_store_t;

#define PC_STORE_SCAN_LIMIT_MAX 100000u

/* A buffered write of a transaction. */
typedef struct pc_mutation {
  pc_cell_t cell;
  /* PC_WRITE_PUT, PC_WRITE_DELETE, or PC_WRITE_NOTIFY: a weak notification
   * and no write (value NULL, weak set). Its lock is taken like a write's;
   * its commit writes notify(c, commit_ts, weak) and removes the lock,
   * without a commit record (unless it is the transaction's primary, whose
   * fate needs one: a record of kind NOTIFY) and without touching the
   * cell's head. */
  pc_write_kind_t kind;
  const char *value;
  size_t vlen;
  int weak; /* commit writes a weak notification */
} pc_mutation_t;

/* An observer as a store knows it: a copy of its registration, which
 * core/observed.c gives every store before the registration counts as made.
 * The store itself writes the strong notification of every put or delete it
 * commits of a column that a strong observer in its set observes, whoever
 * commits and whatever that client knows. */
typedef struct pc_store_observer {
  const char *name; /* 1..64 bytes of [A-Za-z0-9_.-] */
  const char *table;
  const char *col;
  size_t clen;
  int kind; /* 0 strong, 1 weak (pc_observer_kind_t) */
} pc_store_observer_t;

/* Called for each observer of a store's set; nonzero stops. */
typedef int (*pc_store_observer_fn)(void *ctx, const pc_store_observer_t *o);

/* What a prewrite lock records besides the mutation. */
typedef struct pc_lock_spec {
  pc_cell_t primary;
  uint64_t start_ts;
  uint32_t ttl_ms;
  uint64_t session;
} pc_lock_spec_t;

/* The state of a transaction as seen on its primary. */
typedef enum pc_txn_state {
  PC_TXN_ALIVE = 0,      /* primary lock present, owner alive, TTL not passed */
  PC_TXN_COMMITTED = 1,  /* commit record found; commit_ts set */
  PC_TXN_ROLLED_BACK = 2 /* rollback record present (written now if needed) */
} pc_txn_state_t;

/* Called for each committed cell of a scan; value NULL never (deletes are skipped).
 * Return nonzero to stop. */
typedef int (*pc_store_cell_fn)(void *ctx, const pc_cell_t *cell, const char *value, size_t vlen);

/* Called for each lock of scan_locks; lock is valid during the call only.
 * Return nonzero to stop. */
typedef int (*pc_store_lock_fn)(void *ctx, const pc_lock_info_t *lock);

/* What a garbage-collection pass did. For every cell it keeps every version
 * newer than the safe point and the newest one at or below it (when that is
 * a put), and deletes the rest: older versions and their data, rollback
 * records, and a delete that nothing older survives. */
typedef struct pc_store_gc_stats {
  uint64_t cells;    /* cells examined */
  uint64_t versions; /* commit records deleted (puts and deletes) */
  uint64_t rollbacks;/* rollback records deleted (and value-less notify records) */
  uint64_t data;     /* data cells deleted (values too large to inline) */
} pc_store_gc_stats_t;

/* A notification (notify(c, ts) of the data model), as scan_notify
 * finds it: the cell's strings point into the store's buffers and are
 * valid during the callback only. */
typedef struct pc_notification {
  pc_cell_t cell;
  uint64_t ts;   /* commit_ts of the change (strong) or of the notifying transaction (weak) */
  int weak;
  uint32_t bucket;
} pc_notification_t;

/* Called for each notification of scan_notify; nonzero stops. */
typedef int (*pc_store_notify_fn)(void *ctx, const pc_notification_t *n);

/* Source of a commit timestamp for one-phase commit. */
typedef pc_status_t (*pc_ts_source_fn)(void *ctx, uint64_t *ts, pc_error_t *err);

/* A deletion of notifications: cell's, with ts < below, on behalf of the
 * observers named in `observers` (olen bytes, each name followed by a NUL
 * byte): the caller has found that each of them covered what it deletes.
 * The store deletes them only when every observer its set holds for the
 * cell's column is among them (store_observers.c); otherwise it deletes
 * nothing and names one it lacks in `missing`. So the registered observers
 * decide, whatever the caller knows, and a registration that a store has
 * applied holds back every deletion that begins after it. done says whether
 * they went.
 *
 * A one-phase commit can carry one, deleting them in its own batch. The
 * caller (txn.c, for a transaction begun for a notified cell) sends one only
 * when the commit writes in cell's row, so that the operation holds that
 * row's latch and, on a tablet, the row is the tablet's own; a store refuses
 * one of another row (PC_INVALID). */
#define PC_NOTIFY_MISSING_MAX 64 /* an observer's name, PC_MAX_OBSERVER_NAME */
typedef struct pc_notify_clear {
  pc_cell_t cell;
  uint64_t below;
  const char *observers;
  size_t olen;
  int done;                                 /* set by the store */
  char missing[PC_NOTIFY_MISSING_MAX + 1];  /* set by the store when not done */
} pc_notify_clear_t;

/* One cell's answer to get_many: status PC_OK (value malloc'd, release
 * with pc_free), PC_NOT_FOUND, or PC_LOCKED (a lock with start_ts <= read_ts
 * is on the cell; the call's *lock describes the first such cell). */
typedef struct pc_got {
  pc_status_t status;
  char *value;
  size_t vlen;
} pc_got_t;

/* One request of a commit stage sent by prewrite_many or commit_many: the
 * mutations to prewrite, or the cells to commit, of one shard. The store
 * fills st, and err and lock as prewrite and commit would. */
typedef struct pc_store_req {
  const pc_mutation_t *muts; /* prewrite_many */
  const pc_cell_t *cells;    /* commit_many */
  size_t n;
  pc_status_t st;
  pc_lock_info_t lock; /* prewrite's PC_LOCKED (release with pc_lock_info_free) */
  pc_error_t err;
} pc_store_req_t;

typedef struct pc_store_ops {
  /* The value of cell committed at or before read_ts. PC_OK: *value malloc'd
   * (release with pc_free). PC_NOT_FOUND. PC_LOCKED: a lock with
   * start_ts <= read_ts is on the cell; *lock receives a copy (release with
   * pc_lock_info_free). */
  pc_status_t (*get)(pc_store_t *s, const pc_cell_t *cell, uint64_t read_ts, char **value,
                     size_t *vlen, pc_lock_info_t *lock, pc_error_t *err);

  /* get at a timestamp the store takes itself, right before reading: the
   * embedded store from ts_source, a remote one through the tablet, which
   * asks its own oracle link (saving the client a round trip). *read_ts
   * receives it with PC_OK, PC_NOT_FOUND and PC_LOCKED (0 otherwise); the
   * caller uses it as its snapshot from then on. */
  pc_status_t (*get_fresh)(pc_store_t *s, const pc_cell_t *cell, pc_ts_source_fn ts_source,
                           void *ts_ctx, uint64_t *read_ts, char **value, size_t *vlen,
                           pc_lock_info_t *lock, pc_error_t *err);

  /* Every PC_LOCKED answer fills *lock (release with pc_lock_info_free),
   * including the cell the lock sits on. *lock is written only then, and
   * whole: callers need not clear it first, nor release it after any other
   * answer. */

  /* Prewrites muts (all or none): a write with commit_ts >= start_ts on any
   * cell is PC_CONFLICT; another transaction's lock is PC_LOCKED with *lock
   * set; this transaction's own lock is accepted (re-sent prewrite). */
  pc_status_t (*prewrite)(pc_store_t *s, const pc_mutation_t *muts, size_t n,
                          const pc_lock_spec_t *spec, pc_lock_info_t *lock, pc_error_t *err);

  /* Commits cells of transaction start_ts at commit_ts: writes the commit
   * record and removes the lock in one write (a NOTIFY lock: see
   * pc_mutation_t). A cell whose commit record already exists is accepted;
   * a cell with a rollback record or with neither lock nor record is
   * PC_ABORTED (nothing applied) — which is also what a committed NOTIFY
   * lock that is not its primary leaves behind. PC_UNAVAILABLE: the
   * request never reached the store (nothing applied); other failures may
   * have been applied. */
  pc_status_t (*commit)(pc_store_t *s, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                        uint64_t commit_ts, pc_error_t *err);

  /* Rolls back cells of transaction start_ts: removes its lock and data and
   * writes a rollback record, so that a delayed prewrite fails. Idempotent. */
  pc_status_t (*rollback)(pc_store_t *s, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                          pc_error_t *err);

  /* Decides the fate of transaction start_ts on its primary cell, atomically:
   * committed (*commit_ts set), rolled back, or alive. A primary lock whose
   * owner is dead (owner_dead) or whose TTL has passed at oracle time now_ts
   * is rolled back here; a primary with neither lock nor record gets a
   * rollback record. */
  pc_status_t (*check_txn)(pc_store_t *s, const pc_cell_t *primary, uint64_t start_ts,
                           uint64_t now_ts, int owner_dead, pc_txn_state_t *state,
                           uint64_t *commit_ts, pc_error_t *err);

  /* Keeps transaction start_ts alive: raises the TTL of its lock on primary
   * to ttl_ms (counted, like every lock's, from start_ts's physical time),
   * never lowering it. PC_ABORTED when the lock is gone (the transaction was
   * rolled back, or has committed: the caller knows which). */
  pc_status_t (*heartbeat)(pc_store_t *s, const pc_cell_t *primary, uint64_t start_ts,
                           uint32_t ttl_ms, pc_error_t *err);

  /* Commits muts, of any rows of this store (of one tablet, remote), in one
   * atomic operation: under the latches of their rows, the conflict checks
   * of prewrite on every cell, then commit_ts from ts_source (a tablet uses
   * its own oracle link), then the commit records, all or nothing.
   * muts[0] is the primary (a NOTIFY primary leaves a record of kind
   * NOTIFY, so that check_txn can tell the commit happened). clear (NULL:
   * none) names notifications to delete in the same batch, see
   * pc_notify_clear_t. As commit, PC_UNAVAILABLE only when the request never
   * reached the store. */
  pc_status_t (*commit_one_phase)(pc_store_t *s, const pc_mutation_t *muts, size_t n,
                                  uint64_t start_ts, pc_ts_source_fn ts_source, void *ts_ctx,
                                  pc_notify_clear_t *clear, uint64_t *commit_ts,
                                  pc_lock_info_t *lock, pc_error_t *err);

  /* Calls fn for each committed cell at read_ts of table, rows [start, end)
   * (end NULL: to the end of the table), starting at column start_col of row
   * start (NULL: its first column), at most limit (1..PC_STORE_SCAN_LIMIT_MAX) cells;
   * fewer than limit means the range is exhausted. PC_LOCKED with *lock
   * set when it meets a lock with start_ts <= read_ts (cells before it were
   * delivered). */
  pc_status_t (*scan)(pc_store_t *s, const char *table, const char *start, size_t slen,
                      const char *start_col, size_t sclen, const char *end, size_t elen,
                      uint64_t read_ts, size_t limit, pc_store_cell_fn fn, void *ctx,
                      pc_lock_info_t *lock, pc_error_t *err);

  /* The raw view of percolator.h's pc_db_raw_scan. */
  pc_status_t (*raw_scan)(pc_store_t *s, const char *table, const char *start, size_t slen,
                          const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                          pc_error_t *err);

  /* Calls fn for every lock with start_ts < below (a copy of it, with the
   * cell it sits on; fn returns nonzero to stop). For garbage collection,
   * which settles such locks before it collects below them. */
  pc_status_t (*scan_locks)(pc_store_t *s, uint64_t below, pc_store_lock_fn fn, void *ctx,
                            pc_error_t *err);

  /* One garbage-collection pass below safe_point (see pc_store_gc_stats_t):
   * the caller guarantees that no reader will ask for a snapshot older than
   * safe_point and that no lock with start_ts < safe_point remains. Reads
   * and writes go on meanwhile; rate bounds the keys deleted per second
   * (0: no bound). *stats receives what was done (added up over tablets). */
  pc_status_t (*gc)(pc_store_t *s, uint64_t safe_point, uint32_t rate,
                    pc_store_gc_stats_t *stats, pc_error_t *err);

  /* Calls fn for the notifications of buckets [lo, hi) (lo < hi <=
   * PC_NOTIFY_BUCKETS) in key order — bucket, table, row, column, newest
   * first; a strong and a weak notification of one cell at one ts (one
   * commit wrote both) come as two, the strong first — starting after
   * `after` (NULL: at the start of bucket lo), at most limit
   * (1..PC_STORE_SCAN_LIMIT_MAX); fewer than limit means the range is
   * exhausted. To go on, pass the last notification delivered as `after`.
   * A remote store asks every tablet in turn (each holds the notifications
   * of its own rows), so its order is by tablet, then by key; `after`
   * resumes within the tablet of its row. n->bucket is the bucket of the
   * cell's row; PC_INVALID for a range or limit out of bounds. */
  pc_status_t (*scan_notify)(pc_store_t *s, uint32_t lo, uint32_t hi,
                             const pc_notification_t *after, size_t limit, pc_store_notify_fn fn,
                             void *ctx, pc_error_t *err);

  /* For each of the n clears (distinct cells): deletes clear->cell's
   * notifications, strong and weak, with ts < clear->below, when
   * clear->observers covers the store's set (see pc_notify_clear_t;
   * clear->done says whether they went); newer ones stay. An embedded store
   * deletes them all in one write, atomic on their rows like every row
   * operation; a remote store asks each cell's tablet in turn (a failure
   * stops there: the clears before it are done, the rest not). Not synced: a
   * delete lost in a crash brings the notification back, and its observers
   * run again (they are then skipped by their acks). */
  pc_status_t (*clear_notify)(pc_store_t *s, pc_notify_clear_t *clears, size_t n,
                              pc_error_t *err);

  /* Adds observer o to the store's set (add = 1; an observer of that name
   * is replaced) or removes the observer named o->name (add = 0), durably,
   * and for every commit the store begins from then on; idempotent. A
   * remote store updates every tablet, and succeeds only when each did. */
  pc_status_t (*observer_update)(pc_store_t *s, const pc_store_observer_t *o, int add,
                                 pc_error_t *err);

  /* Calls fn for each observer of the store's set (a remote store: of each
   * tablet's, tablet after tablet; an observer every tablet holds comes once
   * per tablet). */
  pc_status_t (*observer_list)(pc_store_t *s, pc_store_observer_fn fn, void *ctx,
                               pc_error_t *err);

  /* The safe point of the last gc pass begun on this store (persisted), 0
   * before any: reads below it may miss collected versions. NULL for a store
   * of many shards. */
  uint64_t (*gc_safe_point)(pc_store_t *s);

  /* Which shard (tablet) holds cell's row, for batching: the transaction
   * client sends the secondaries of one shard in one request and requests to
   * different shards in parallel, and commits in one phase a transaction
   * whose rows are all in one shard. NULL for a store with no shards
   * (embedded): one shard. */
  size_t (*shard_of)(pc_store_t *s, const pc_cell_t *cell);

  /* Optional (NULL: the transaction client calls get for each cell). Reads
   * n cells at read_ts, as get would, into out[0..n): one request per shard,
   * every shard at once. PC_OK when every cell answered (each out[i].status
   * is PC_OK, PC_NOT_FOUND or PC_LOCKED; *lock, valid when any is
   * PC_LOCKED, describes the first locked cell: release it with
   * pc_lock_info_free); another status when the read failed (every
   * out[i].value NULL then). */
  pc_status_t (*get_many)(pc_store_t *s, const pc_cell_t *cells, size_t n, uint64_t read_ts,
                          pc_got_t *out, pc_lock_info_t *lock, pc_error_t *err);

  /* Optional (NULL: the transaction client sends the requests one after the
   * other). Send the requests of one commit stage — each the rows of one
   * shard — all at once from the calling thread, and wait for every reply:
   * prewrites with spec, or commits of start_ts at commit_ts. */
  void (*prewrite_many)(pc_store_t *s, pc_store_req_t *reqs, size_t n,
                        const pc_lock_spec_t *spec);
  void (*commit_many)(pc_store_t *s, pc_store_req_t *reqs, size_t n, uint64_t start_ts,
                      uint64_t commit_ts);

  void (*close)(pc_store_t *s);
} pc_store_ops_t;

struct pc_store {
  const pc_store_ops_t *ops;
};

typedef struct pc_local_options {
  int create_if_missing;
  int sync;
  size_t cache_bytes;      /* LevelDB's block cache (0: LevelDB's default) */
  size_t meta_cache_bytes; /* core/metacache.h (0: none) */
  size_t write_buffer_bytes; /* LevelDB's memtable (0: the store's default, 64 MiB) */
  int no_compression;        /* LevelDB's blocks as they are (0: snappy) */
} pc_local_options_t;

/* Opens the embedded LevelDB store in directory path. PC_BUSY when another
 * process holds it, PC_CORRUPTION / PC_IO_ERROR naming path. Returns NULL on
 * error; release with s->ops->close(s). */
pc_store_t *pc_local_store_open(const char *path, const pc_local_options_t *opts,
                                pc_error_t *err);
/* Raises the garbage-collection safe point of a store pc_local_store_open
 * opened to safe (persisted, synced), unless it is at or above it already,
 * without deleting anything: reads below it are refused from now on, as
 * after a pass at safe. A tablet server starting in a cluster raises its
 * store's to the safe point published in ZooKeeper, which a pass it missed
 * may have raised. */
pc_status_t pc_local_store_raise_gc_safe_point(pc_store_t *s, uint64_t safe, pc_error_t *err);

/* For tests and benchmarks: the stores this process opens from now on (on)
 * have LevelDB compare keys through a comparator of the store's own that
 * counts the comparisons; pc_local_compares returns the running count of
 * those made on the calling thread. Every entry a LevelDB iterator walks
 * over, the deleted ones it skips included, costs at least one comparison
 * once the store holds more than its memtable, or once the entry hides an
 * older one, so the difference across a call measures the entries the call
 * visited, which a time cannot do on a shared machine. The comparator has
 * LevelDB's own order and name: a store opened either way opens the other. */
void pc_local_store_count_compares(int on);
uint64_t pc_local_compares(void);

#endif
