/*
 * percolator.h — the public C API of libpercolator.
 *
 * Percolator: snapshot-isolation transactions across rows and tables of a
 * Bigtable-like store (rows x columns x timestamps) kept on LevelDB.
 *
 * Conventions, used by every function in this header:
 *   - Types are opaque; create them with the *_open / *_create / *_begin
 *     functions named here and release them with the matching *_close /
 *     *_destroy function.
 *   - Every function that can fail returns a pc_status_t (PC_OK on success) or,
 *     for constructors, NULL. Its last argument is a pc_error_t * that, when not
 *     NULL, receives the status and a message naming the thing at fault. Passing
 *     NULL is allowed: the status alone is returned.
 *   - Rows, columns and values are byte strings given as (pointer, length);
 *     table names are NUL-terminated strings. Memory a function returns to the
 *     caller is said in its comment, and is released with pc_free().
 *   - Every call that can block (reads that meet a lock, commit, asking the
 *     timestamp oracle) is bounded by the transaction's timeout and returns
 *     PC_LOCKED or PC_TIMEOUT instead of hanging.
 *
 * Limits (PC_INVALID when exceeded, the message naming the argument):
 *   table name  1..PC_MAX_TABLE bytes of [A-Za-z0-9_.-]
 *   row key     1..PC_MAX_ROW bytes, any bytes
 *   column      1..PC_MAX_COLUMN bytes, any bytes ("family:qualifier" by convention)
 *               but a first byte 0xFF, which marks the system's columns (the
 *               acks of observers): get, set, delete and notify_weak refuse
 *               them and scans pass over them
 *   the table "percolator.system" (the registered observers) is read-only
 *   value       1..PC_MAX_VALUE bytes (empty values are rejected: delete removes a cell)
 *   one transaction buffers at most PC_MAX_TXN_MUTATIONS cells and
 *   PC_MAX_TXN_BYTES bytes of rows, columns and values.
 */
#ifndef PERCOLATOR_PERCOLATOR_H
#define PERCOLATOR_PERCOLATOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks what libpercolator.so exports: the library is built with hidden
 * visibility, so these declarations are its whole ABI. */
#if defined(__GNUC__)
#define PC_EXPORT __attribute__((visibility("default")))
#else
#define PC_EXPORT
#endif

#define PC_VERSION_MAJOR 0
#define PC_VERSION_MINOR 1
#define PC_VERSION_PATCH 0

#define PC_MAX_TABLE 64
#define PC_MAX_ROW 4096
#define PC_MAX_COLUMN 1024
#define PC_MAX_VALUE (8u * 1024u * 1024u)
#define PC_MAX_TXN_MUTATIONS 100000u
#define PC_MAX_TXN_BYTES (64u * 1024u * 1024u)

/* ---- status and errors ------------------------------------------------ */

typedef enum pc_status {
  PC_OK = 0,
  PC_NOT_FOUND = 1,   /* no committed value at the snapshot; end of a scan */
  PC_CONFLICT = 2,    /* write-write conflict at commit; nothing was applied; retry in a new txn */
  PC_LOCKED = 3,      /* a live transaction's lock outlasted the caller's timeout */
  PC_TIMEOUT = 4,     /* a blocking call (oracle, store, service) did not answer in time */
  PC_ABORTED = 5,     /* the transaction had been rolled back by a lock resolver; nothing applied */
  PC_IO_ERROR = 6,    /* the store or a file failed; the message says which */
  PC_INVALID = 7,     /* an argument or input is malformed or out of limits; the message names it */
  PC_CORRUPTION = 8,  /* stored data failed a consistency check */
  PC_BUSY = 9,        /* a resource is held by another process (e.g. the data directory) */
  PC_UNAVAILABLE = 10,/* a service cannot be reached */
  PC_STATE = 11,      /* the object is in the wrong state for the call (e.g. txn already committed) */
  PC_NOMEM = 12,      /* an allocation failed */
  PC_INTERNAL = 13,   /* a broken invariant: a bug; please report the message */
  PC_UNKNOWN = 14,    /* commit: the commit point may or may not have been reached (the
                         primary's reply was lost and it could not be asked); readers will
                         settle it. Not a rollback: the commit may stand */
  PC_DENIED = 15      /* the caller's credentials do not allow it: a server refused them, or
                         the operation needs the system identity (docs/SECURITY.md); nothing
                         was applied */
} pc_status_t;

#define PC_ERROR_TEXT 256

/* A status and a message. Fill-in only: the library never allocates here, so a
 * pc_error_t needs no release. text is always NUL-terminated ("" on PC_OK). */
typedef struct pc_error {
  pc_status_t code;
  char text[PC_ERROR_TEXT];
} pc_error_t;

/* The stable name of a status ("ok", "not_found", "conflict", ...). Static storage. */
PC_EXPORT const char *pc_status_name(pc_status_t status);

/* Releases memory that a function of this library returned to the caller. NULL is a no-op. */
PC_EXPORT void pc_free(void *ptr);

/* The library version as "MAJOR.MINOR.PATCH". Static storage. */
PC_EXPORT const char *pc_version(void);

/* ---- timestamps --------------------------------------------------------- */

/* Timestamps are hybrid: milliseconds since the Unix epoch in the high bits,
 * an 18-bit logical counter in the low bits. 0 is never a valid timestamp. */
#define PC_TS_LOGICAL_BITS 18
#define PC_TS_PHYSICAL_MS(ts) ((uint64_t)(ts) >> PC_TS_LOGICAL_BITS)

/* ---- options ------------------------------------------------------------ */

typedef struct pc_options pc_options_t;

/* Returns new options with the defaults below; release with pc_options_destroy. */
PC_EXPORT pc_options_t *pc_options_create(void);
PC_EXPORT void pc_options_destroy(pc_options_t *opts);
/* Create the data directory when it does not exist (default 0: missing is PC_INVALID). */
PC_EXPORT void pc_options_set_create_if_missing(pc_options_t *opts, int on);
/* fsync every row operation before acknowledging it (default 1). Concurrent
 * writers share fsyncs (LevelDB's group commit). Turn it off only for data
 * you can rebuild: without it, a machine (or, in a cluster, one tablet) that
 * loses power loses commits it had acknowledged, and since a transaction's
 * rows are written one after another (on several tablets in a cluster), it
 * can lose the primary's commit record while the secondaries' commits
 * survive: readers then roll the primary back and keep the secondaries, a
 * committed transaction left half visible (atomicity broken). A crash of
 * the process alone, the machine staying up, loses nothing either way. */
PC_EXPORT void pc_options_set_sync(pc_options_t *opts, int on);
/* Lease of a transaction's locks in oracle milliseconds, counted from the
 * moment they are written (default 3000). While its transaction commits, a
 * live client renews the lease of its primary lock every third of it (the
 * paper's periodic wall-time update), so a transaction that is merely long
 * is never rolled back. A lock whose lease has run out, or whose owner's
 * session is gone, may be rolled back by any reader that meets it. */
PC_EXPORT void pc_options_set_lock_ttl_ms(pc_options_t *opts, uint32_t ms);
/* Default bound on every blocking call of a transaction (default 10000). */
PC_EXPORT void pc_options_set_timeout_ms(pc_options_t *opts, uint32_t ms);
/* Commit a transaction whose rows are all in one store (embedded) or on one
 * tablet in one atomic operation, without locks (default 1); 0: always
 * two-phase commit. */
PC_EXPORT void pc_options_set_one_phase_commit(pc_options_t *opts, int on);
/* Take a transaction's start_ts at its first read or scan (or at its commit
 * when it reads nothing) rather than in pc_txn_begin (default 0). Its
 * snapshot then includes every commit that finished before that first use:
 * still snapshot isolation, as when PostgreSQL's REPEATABLE READ takes its
 * snapshot at the first statement. The gain is in cluster mode: the tablet
 * serving the first read takes the timestamp from the oracle itself, saving
 * the client a round trip. pc_txn_start_ts is 0 until it is taken. */
PC_EXPORT void pc_options_set_lazy_start(pc_options_t *opts, int on);
/* LevelDB block cache size in bytes (default 32 MiB; 0 uses LevelDB's own default). */
PC_EXPORT void pc_options_set_cache_bytes(pc_options_t *opts, size_t bytes);
/* Memory for the store's cache of meta records (each cell's lock and newest
 * commit), which a write's conflict check reads instead of LevelDB (default
 * 32 MiB; 0: no cache). The store keeps it exact: every write updates it. */
PC_EXPORT void pc_options_set_meta_cache_bytes(pc_options_t *opts, size_t bytes);
/* LevelDB's write buffer (memtable) in bytes (default 64 MiB; 0: the
 * default). Up to two are held in memory. A larger one means fewer, larger
 * files and less compaction per write. */
PC_EXPORT void pc_options_set_write_buffer_bytes(pc_options_t *opts, size_t bytes);
/* Whether the store compresses its files with snappy (1) or keeps its blocks
 * as they are (0; the default). Compression saves disk (a fifth of a store
 * of text) and costs CPU at every flush, compaction and read of a block;
 * on a store that compacts most of the time, a large share of it. Either
 * way the files stay readable: each block says how it is stored. */
PC_EXPORT void pc_options_set_compression(pc_options_t *opts, int on);
/* How often the embedded database collects garbage in the background, in
 * milliseconds (default 60000; 0: never, only pc_db_gc). See pc_db_gc. */
PC_EXPORT void pc_options_set_gc_interval_ms(pc_options_t *opts, uint32_t ms);
/* The most keys one garbage-collection pass deletes per second (default
 * 100000; 0: no bound), so that collection never crowds out the workload. */
PC_EXPORT void pc_options_set_gc_rate(pc_options_t *opts, uint32_t keys_per_second);

/* ---- database ----------------------------------------------------------- */

typedef struct pc_db pc_db_t;

/* Opens the embedded store in directory dir (its LevelDB, its timestamp oracle
 * and this process's liveness session). Only one process may hold a directory:
 * a second gets PC_BUSY naming it. Returns NULL on error. Release with
 * pc_db_close. opts may be NULL for the defaults. After a process that held
 * dir ended without pc_db_close (a crash, a kill), the open reads every
 * cell's meta record once to rebuild the index of locks, and logs it. */
PC_EXPORT pc_db_t *pc_db_open(const pc_options_t *opts, const char *dir, pc_error_t *err);

/* Opens the database a JSON configuration file describes (see docs/CONFIG.md):
 * when it lists "tablets", a client of the cluster's tablet servers and its
 * timestamp oracle ("tso"), coordinated through ZooKeeper ("zookeeper"),
 * which may run on other machines; otherwise the embedded store in its "data_dir", which
 * must exist and hold a store, as pc_db_open's directory without
 * create_if_missing: a missing or empty one is PC_INVALID naming the file and
 * the directory (`percolator --config FILE init`, or pc_db_open with
 * create_if_missing, creates it). The file's "store" settings are the
 * options. Returns NULL on error, naming the file, the key or the
 * unreachable daemon. Release with pc_db_close. */
PC_EXPORT pc_db_t *pc_db_open_config(const char *config_path, pc_error_t *err);

/* Closes the database. Transactions still open must be destroyed first. An
 * embedded store saves its index of locks here (one synced write), so that
 * the next open need not rebuild it. */
PC_EXPORT void pc_db_close(pc_db_t *db);

/* The default bound on every blocking call of transactions begun from now on
 * (overrides the options or the configuration's store.timeout_ms; 0 is 1). */
PC_EXPORT void pc_db_set_timeout_ms(pc_db_t *db, uint32_t ms);

/* Asks the oracle for one timestamp, bounded by timeout_ms. */
PC_EXPORT pc_status_t pc_db_timestamp(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts, pc_error_t *err);

/* What a garbage-collection pass did (pc_db_gc). */
typedef struct pc_gc_stats {
  uint64_t safe_point;     /* no snapshot of any live transaction lies below it */
  uint64_t locks_resolved; /* locks below the safe point settled first */
  uint64_t locks_left;     /* locks below it still owned by a live transaction */
  uint64_t cells;          /* cells with commit records examined */
  uint64_t versions;       /* old versions deleted (commit records of puts and deletes) */
  uint64_t rollbacks;      /* rollback records deleted (and the value-less records of
                              weak notifications on their primaries) */
  uint64_t data;           /* data cells deleted (values too large to inline) */
} pc_gc_stats_t;

/* Collects garbage now: computes the safe point (embedded: the oldest start_ts
 * of this process's open transactions; in a cluster, or a directory a worker
 * serves, also the oldest that any live client reports (in ZooKeeper, or to
 * the worker's oracle), at least store.gc_lifetime_ms behind the oracle, and
 * at most store.snapshot_max_age_ms behind it), settles every lock older than it,
 * then deletes on every store what no snapshot at or above it can read:
 * every version of a cell but the newest one at or below the safe point,
 * and rollback records. Readers and writers go on meanwhile. stats may be
 * NULL. */
PC_EXPORT pc_status_t pc_db_gc(pc_db_t *db, pc_gc_stats_t *stats, pc_error_t *err);

/* The liveness session recorded as the owner of this process's locks: the
 * embedded database's own, or the handle's ZooKeeper session (0 while it has
 * none). */
PC_EXPORT uint64_t pc_db_session(const pc_db_t *db);

/* ---- transactions ------------------------------------------------------- */

typedef struct pc_txn pc_txn_t;

/* Starts a transaction: takes start_ts from the oracle. Reads see exactly the
 * commits with commit_ts <= start_ts plus this transaction's own writes.
 * Returns NULL on error. Release with pc_txn_destroy (which aborts it if it
 * was not committed). A transaction is used by one thread at a time. */
PC_EXPORT pc_txn_t *pc_txn_begin(pc_db_t *db, pc_error_t *err);

/* The snapshot's timestamp; 0 while a lazy_start transaction has not taken it. */
PC_EXPORT uint64_t pc_txn_start_ts(const pc_txn_t *txn);
/* The commit timestamp after a successful pc_txn_commit that wrote cells; 0 otherwise. */
PC_EXPORT uint64_t pc_txn_commit_ts(const pc_txn_t *txn);
/* Bound on each blocking call of this transaction (default: the db's timeout).
 * A cluster client's pc_txn_commit may first wait up to half of it for this
 * process's commits in flight of the same cells, so it returns within 1.5
 * times it. */
PC_EXPORT void pc_txn_set_timeout_ms(pc_txn_t *txn, uint32_t ms);

/* Reads one cell at the snapshot. On PC_OK *value receives a malloc'd copy of
 * the value (caller releases it with pc_free) and *vlen its length; on any
 * other status *value is set to NULL. PC_NOT_FOUND: no value (never written,
 * or deleted). PC_LOCKED: a live writer's lock outlasted the timeout. */
PC_EXPORT pc_status_t pc_txn_get(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                       const char *col, size_t clen, char **value, size_t *vlen,
                       pc_error_t *err);

/* Buffers a write of value into the cell; nothing reaches the store before commit. */
PC_EXPORT pc_status_t pc_txn_set(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                       const char *col, size_t clen, const char *value, size_t vlen,
                       pc_error_t *err);

/* Buffers a delete of the cell. */
PC_EXPORT pc_status_t pc_txn_delete(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                          const char *col, size_t clen, pc_error_t *err);

/* Buffers a weak notification of the cell (Fluo's setWeakNotification):
 * when the transaction commits, the observers registered for the cell's
 * column as weak run at least once afterwards; several notifications of one
 * cell before an observer runs are coalesced into one run, and one that
 * arrives while the observer runs makes it run again. Writes no value. Its
 * commit locks the cell as a write does, so it conflicts with a concurrent
 * transaction that writes or notifies the same cell (the first to prewrite
 * wins); it leaves no commit record, so transactions that commit after it
 * do not conflict with it. A cell the transaction also sets or deletes keeps
 * its write, and that write's commit writes the weak notification too.
 * Columns that begin with byte 0xFF (the system's) and the table
 * "percolator.system" are refused (PC_INVALID). */
PC_EXPORT pc_status_t pc_txn_notify_weak(pc_txn_t *txn, const char *table, const char *row,
                                         size_t rlen, const char *col, size_t clen,
                                         pc_error_t *err);

/* ---- many cells in one call -------------------------------------------- */

/* A cell named in a call on many cells. */
typedef struct pc_cell_ref {
  const char *table;
  const char *row;    size_t row_len;
  const char *column; size_t column_len;
} pc_cell_ref_t;

/* What pc_txn_get_many read of one cell: value NULL (vlen 0) when the cell
 * has no value at the snapshot. */
typedef struct pc_value {
  char *value;
  size_t vlen;
} pc_value_t;

/* Reads n cells at the snapshot, each as pc_txn_get would (this
 * transaction's own writes included), into values[0..n), in one call: on a
 * cluster one request per tablet, every tablet at once, so that the call
 * costs one round trip whatever n is. On PC_OK each values[i].value is a
 * malloc'd copy (release each with pc_free) or NULL when cells[i] has no
 * value; on any other status (PC_LOCKED, PC_INVALID naming the cell, ...)
 * every values[i].value is NULL. A cell may be named more than once. */
PC_EXPORT pc_status_t pc_txn_get_many(pc_txn_t *txn, const pc_cell_ref_t *cells, size_t n,
                                      pc_value_t *values, pc_error_t *err);

/* Buffers n writes, values[i] into cells[i] as pc_txn_set would, or a delete
 * where values[i].value is NULL. Stops at the first cell refused (its error);
 * the writes before it stay buffered. Writes never cost a round trip: they
 * reach the store at commit, one request per tablet and stage. */
PC_EXPORT pc_status_t pc_txn_set_many(pc_txn_t *txn, const pc_cell_ref_t *cells,
                                      const pc_value_t *values, size_t n, pc_error_t *err);

/* Commits the buffered writes: prewrite with a primary lock, commit of the
 * primary (the commit point), then the secondaries. A transaction without
 * writes commits trivially. PC_OK: the commit stands (failures after the
 * commit point are left to readers, who roll the secondaries forward).
 * PC_CONFLICT / PC_ABORTED: nothing was applied (PC_ABORTED: a resolver had
 * rolled the transaction back). When the request that decides the commit
 * (the primary's commit, or a one-phase commit)
 * fails without a verdict (a lost reply, a store error after the write), the
 * client settles it atomically on the primary — the commit is found (PC_OK)
 * or rolled back (the request's error, e.g. PC_IO_ERROR or PC_TIMEOUT;
 * nothing applied); this settling is bounded by one more timeout. Only if
 * that settling fails too (the primary cannot be reached at all) is the
 * outcome unknown: PC_UNKNOWN, the commit may or may not stand, and readers
 * settle it later (rolling it forward or back, all or nothing); the message
 * says "commit outcome unknown" and names the request's failure. Retrying
 * such a transaction may apply its writes twice. After this call the
 * transaction is finished. */
PC_EXPORT pc_status_t pc_txn_commit(pc_txn_t *txn, pc_error_t *err);

/* Discards the buffered writes; the transaction is finished. */
PC_EXPORT void pc_txn_abort(pc_txn_t *txn);

/* Releases the transaction (aborting it if still open). NULL is a no-op.
 * Its scans must be destroyed first. */
PC_EXPORT void pc_txn_destroy(pc_txn_t *txn);

/* ---- snapshot scans ----------------------------------------------------- */

typedef struct pc_scan pc_scan_t;

/* Scans the committed view of rows [start, end) of table at the transaction's
 * snapshot, merged with its own buffered writes, in (row, column) order.
 * end == NULL scans to the end of the table. Returns NULL on error; release
 * with pc_scan_destroy before the transaction. */
PC_EXPORT pc_scan_t *pc_txn_scan(pc_txn_t *txn, const char *table, const char *start, size_t slen,
                       const char *end, size_t elen, pc_error_t *err);

/* Like pc_txn_scan, over the rows of table that begin with prefix (plen 0:
 * every row), returning only the cells whose column begins with col_prefix
 * (cplen 0: every column). */
PC_EXPORT pc_scan_t *pc_txn_scan_prefix(pc_txn_t *txn, const char *table, const char *prefix,
                                        size_t plen, const char *col_prefix, size_t cplen,
                                        pc_error_t *err);

/* Like pc_txn_scan, over the one row `row` of table, returning only the
 * cells whose column begins with col_prefix (cplen 0: every column): reading
 * starts at the first such column and stops after the last. */
PC_EXPORT pc_scan_t *pc_txn_scan_row(pc_txn_t *txn, const char *table, const char *row,
                                     size_t rlen, const char *col_prefix, size_t cplen,
                                     pc_error_t *err);

/* Advances to the next cell: PC_OK when there is one, PC_NOT_FOUND at the end,
 * another status on error (PC_LOCKED, PC_IO_ERROR, ...). A scan reads only
 * while its transaction is open: after pc_txn_commit or pc_txn_abort it
 * answers PC_STATE. */
PC_EXPORT pc_status_t pc_scan_next(pc_scan_t *scan, pc_error_t *err);

/* The current cell. The pointers belong to the scan and stay valid until the
 * next pc_scan_next or pc_scan_destroy. */
PC_EXPORT const char *pc_scan_row(const pc_scan_t *scan, size_t *len);
PC_EXPORT const char *pc_scan_column(const pc_scan_t *scan, size_t *len);
PC_EXPORT const char *pc_scan_value(const pc_scan_t *scan, size_t *len);

PC_EXPORT void pc_scan_destroy(pc_scan_t *scan);

/* ---- raw view (administration and debugging) ---------------------------- */

/* The kinds of internal cells, as in the paper's figures. */
typedef enum pc_cell_kind {
  PC_CELL_DATA = 0,   /* data(c, start_ts): value written by the txn that started at ts */
  PC_CELL_LOCK = 1,   /* lock(c, start_ts): uncommitted write; primary, kind, ttl, session */
  PC_CELL_WRITE = 2,  /* write(c, commit_ts): commit record pointing at start_ts */
  PC_CELL_NOTIFY = 3, /* notify(c, ts): observers of c may need to run */
  PC_CELL_ACK = 4     /* ack(c, observer): start_ts of that observer's last run on c */
} pc_cell_kind_t;

/* The kind of a lock or of a write record. */
typedef enum pc_write_kind {
  PC_WRITE_PUT = 0,
  PC_WRITE_DELETE = 1,
  PC_WRITE_ROLLBACK = 2,
  /* a weak notification without a write (pc_txn_notify_weak): the kind of its
   * lock, and of the commit record it leaves only when it is its
   * transaction's primary (that record carries the transaction's fate and no
   * value; reads pass over it) */
  PC_WRITE_NOTIFY = 3
} pc_write_kind_t;

/* One internal cell, as handed to a raw-scan callback. Every pointer is valid
 * only during the callback. Fields that do not apply to the kind are 0/NULL. */
typedef struct pc_raw_cell {
  pc_cell_kind_t kind;
  const char *table;
  const char *row;       size_t row_len;
  const char *column;    size_t column_len;
  uint64_t ts;           /* start_ts (data, lock), commit_ts (write, ack), notify ts */
  const char *value;     size_t value_len;   /* data value; inline value of a write or lock */
  pc_write_kind_t write_kind;                /* lock and write cells */
  uint64_t start_ts;                         /* write cells: the data they point at */
  const char *primary_row;    size_t primary_row_len;    /* lock cells */
  const char *primary_column; size_t primary_column_len; /* lock cells */
  const char *primary_table;                              /* lock cells */
  uint32_t ttl_ms;                                        /* lock cells */
  uint64_t session;                                       /* lock cells: owner session */
  int observed;                                           /* lock cells */
  /* the cells of an observer's ack column: its name (NUL-terminated) */
  const char *observer;
  /* notify cells: a weak notification (0: strong); lock cells: its commit
   * also writes a weak notification */
  int weak;
} pc_raw_cell_t;

/* Returns nonzero to stop the scan. */
typedef int (*pc_raw_cell_fn)(void *ctx, const pc_raw_cell_t *cell);

/* Calls fn for every internal cell of rows [start, end) of table (table NULL:
 * every table), in key order: per cell its lock, its writes newest first, its
 * data newest first; then the notifications of the range. An observer's ack
 * of a cell is kept in a system column of the cell's row; its internal cells
 * are reported under the observed column with observer set, its commit
 * records as PC_CELL_ACK (after the row's other columns). No snapshot, no
 * lock resolution: this shows the store as it is on disk. */
PC_EXPORT pc_status_t pc_db_raw_scan(pc_db_t *db, const char *table, const char *start, size_t slen,
                           const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                           pc_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PERCOLATOR_PERCOLATOR_H */
