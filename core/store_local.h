/* store_local.h — what the files of the embedded store share (private to
 * core/store_*.c): the store object, row latches, the frame of a row
 * operation, and the small readers and writers of records.
 *
 * The files, one concern each:
 *   store_local.c  opening and closing, latches, writing a batch
 *   store_read.c   snapshot reads: get, scan, and the history of a cell
 *   store_txn.c    the protocol's row operations: prewrite, commit,
 *                  rollback, check_txn, heartbeat, one-phase commit
 *   store_raw.c    the raw view (every internal cell) and lock scans
 *   store_notify.c finding notifications and clearing them
 *   store_gc.c     garbage collection below a safe point
 *   store_observers.c  the observers the store knows, which decide the
 *                  strong notifications its commits write
 */
#ifndef PC_CORE_STORE_LOCAL_H
#define PC_CORE_STORE_LOCAL_H

#include <leveldb/c.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/metacache.h"
#include "core/notifyindex.h"
#include "core/store.h"
#include "core/store_repl.h"

#define PC_LATCHES 65536u

typedef struct local_observers local_observers_t; /* store_observers.c */

typedef struct local {
  pc_store_t base;
  char *path;
  leveldb_t *db;
  leveldb_options_t *opts;
  leveldb_cache_t *cache;
  leveldb_filterpolicy_t *filter;
  leveldb_comparator_t *cmp; /* NULL: LevelDB's own (pc_local_store_count_compares off) */
  leveldb_readoptions_t *ropts;
  leveldb_writeoptions_t *wopts;    /* the store's sync setting */
  leveldb_writeoptions_t *gc_wopts; /* never synced: a lost delete is redone */
  pthread_mutex_t latch[PC_LATCHES];
  /* start_ts of a one-phase commit holding latch i while it takes its
   * commit_ts, or 0: a reader whose snapshot could include that commit
   * waits for the latch (local_wait_onepc) */
  _Atomic uint64_t onepc[PC_LATCHES];
  /* one-phase commits between setting and clearing their markers: a scan of
   * many rows looks at the markers only when some are (store_read.c) */
  _Atomic uint32_t onepc_active;
  pc_mcache_t *mcache; /* meta records for the write path, or NULL */
  pc_nindex_t *nindex; /* the live notification keys (notifyindex.h) */
  pc_nindex_t *lindex; /* the lock index: the locked cells, in memory (store_raw.c) */
  int opened;          /* open succeeded: a close saves the lock index */
  _Atomic uint64_t gc_safe; /* store_gc.c: the last pass's safe point ('g' key) */
  /* store_observers.c: the observers this store knows, read by commits
   * without a lock; obs_mu serialises updates */
  _Atomic(local_observers_t *) obs;
  pthread_mutex_t obs_mu;
  pthread_rwlock_t obs_rw; /* deletions of notifications read, an update writes */
  pthread_mutex_t obs_swap; /* orders the writers of obs (store_observers.c) */
  leveldb_writeoptions_t *sync_wopts; /* always synced: the safe point */
  /* A replicated tablet (core/store_repl.h): every batch goes to the log
   * through replicate instead of to LevelDB, and comes back through
   * pc_local_store_apply once committed; applied is the index of the last
   * log entry applied (its 'R' key), 0 for a store that is not replicated */
  _Atomic(pc_local_replicate_fn) replicate;
  void *replicate_ctx;
  _Atomic uint64_t applied;
} local_t;

/* The latch stripe of a cell's row. */
uint32_t local_stripe(const pc_cell_t *c);
/* Returns 0 once stripe i holds no one-phase commit that read_ts could
 * cover (after waiting for its latch if one did), 1 when it would have had
 * to wait on a thread that may not (base/deadline.h's pc_nowait_refuse). */
int local_wait_onepc(local_t *s, uint32_t i, uint64_t read_ts);

pc_status_t local_ldb_error(local_t *s, char *msg, const char *what, pc_error_t *err);
pc_status_t local_nomem(pc_error_t *err);
/* 1 when no two cells are the same cell, 0 when two are, -1 out of memory. */
int local_cells_distinct(const pc_cell_t *cells, size_t stride, size_t n);

/* Reads and decodes the meta record of cell (its latch held); *found = 0
 * leaves m zeroed. key receives the meta key. */
pc_status_t local_read_meta(local_t *s, const pc_cell_t *c, pc_buf_t *key, pc_meta_t *m,
                            int *found, pc_error_t *err);
/* Puts meta record m under key into batch b. When m gains or loses its lock
 * (has_lock against had_lock), the change of the lock index goes to locks,
 * which local_apply carries into s->lindex with the batch: the lock index
 * lives in memory (store_raw.c), not in the batch. */
pc_status_t local_put_meta(leveldb_writebatch_t *b, const pc_buf_t *key, pc_meta_t *m,
                           pc_buf_t *scratch, pc_buf_t *locks, pc_error_t *err);
pc_status_t local_put_write(leveldb_writebatch_t *b, const pc_cell_t *c, uint64_t ts,
                            const pc_write_rec_t *w, pc_buf_t *kb, pc_buf_t *vb,
                            pc_error_t *err);
/* Writes b with wopts (the latches of its cells held); keeps the meta cache
 * and the notification index in step, and the lock index by locks (what
 * local_put_meta recorded for b; NULL for a batch that writes no meta). */
pc_status_t local_apply(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                        const leveldb_writeoptions_t *wopts, pc_error_t *err);
/* local_apply without its failpoints (store.before_apply, store.after_apply):
 * the writes of garbage collection and of the safe point, which are not
 * the protocol's row operations. */
pc_status_t local_commit_batch(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                               const leveldb_writeoptions_t *wopts, pc_error_t *err);
/* local_apply's write itself, without its failpoints: to LevelDB, with the
 * caches and indexes in step. from_log: the batch comes from a replicated
 * tablet's log (pc_local_store_apply), so the observers in memory follow
 * its 'o' keys. */
pc_status_t local_write(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                        const leveldb_writeoptions_t *wopts, int from_log, pc_error_t *err);
/* A replicated tablet's local_apply (store_repl.c): b and locks go to the
 * log as one command, and return once it is applied here or has failed. */
pc_status_t local_replicate(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                            pc_error_t *err);

/* Finds the write record of transaction start_ts on cell (commit or
 * rollback); *found = 0 when there is none. rec->value points into hold. */
pc_status_t local_find_write_by_start(local_t *s, const pc_cell_t *c, const pc_meta_t *m,
                                      uint64_t start_ts, pc_write_rec_t *rec, pc_buf_t *hold,
                                      int *found, pc_error_t *err);

/* The frame of every row operation: the request's cells checked distinct,
 * their latches taken (in stripe order), one WriteBatch and scratch buffers;
 * rowop_end applies the batch if the operation succeeded and wrote, then
 * releases it all. */
typedef struct rowop {
  local_t *s;
  uint32_t one, *idx; /* the stripes held, sorted */
  size_t nidx;
  leveldb_writebatch_t *b;
  pc_buf_t key, kb, vb, hold;
  pc_buf_t locks; /* the batch's lock index changes (local_put_meta) */
  pc_meta_t m;
  int writes;
} rowop_t;

pc_status_t local_rowop_begin(rowop_t *op, local_t *s, const pc_cell_t *cells, size_t stride,
                              size_t n, const char *what, pc_error_t *err);
pc_status_t local_rowop_end(rowop_t *op, pc_status_t st, pc_error_t *err);

/* Key range [lo, hi) of space for table rows [start, end) (hi->len == 0:
 * unbounded; table NULL: the whole space); start_col starts within row
 * start. -1 out of memory. */
int local_range_keys(char space, const char *table, const char *start, size_t slen,
                     const char *start_col, size_t sclen, const char *end, size_t elen,
                     pc_buf_t *lo, pc_buf_t *hi);
/* Whether key k lies below hi (hi->len == 0: no bound). */
int local_below(const char *k, size_t kl, const pc_buf_t *hi);

/* An iterator that only moves forward, for a loop that looks up a key range
 * per cell of a scan, in key order (the commit records of each cell).
 * LevelDB walks from a seek's target over every deleted entry up to the next
 * live key, with no bound; a cursor seeks only when it is not already at or
 * past the target, so each deleted entry of the scanned range is walked over
 * once, however many cells there are. Targets must not decrease. */
typedef struct local_cursor {
  leveldb_iterator_t *it;
  int end; /* it ran off the end of the store: every later target lies beyond */
} local_cursor_t;

/* Positions c at the first key >= target; 0 when there is none (or on error). */
int local_cursor_seek(local_cursor_t *c, const char *target, size_t tlen);
int local_cursor_next(local_cursor_t *c);
pc_status_t local_cursor_error(local_t *s, local_cursor_t *c, const char *what, pc_error_t *err);

/* Called at each step of a long loop (a scan, the GC pass): the failpoint
 * store.step, and every few steps whether the call should stop (its deadline
 * passed, or the request it serves was abandoned: base/deadline.h), which is
 * then PC_TIMEOUT naming what stopped. steps counts the calls, from 1. */
pc_status_t local_step(local_t *s, unsigned steps, const char *what, pc_error_t *err);

/* The operations, by file. */
pc_status_t local_get(pc_store_t *base, const pc_cell_t *c, uint64_t read_ts, char **value,
                      size_t *vlen, pc_lock_info_t *lock, pc_error_t *err);
pc_status_t local_get_fresh(pc_store_t *base, const pc_cell_t *c, pc_ts_source_fn ts_source,
                            void *ts_ctx, uint64_t *read_ts, char **value, size_t *vlen,
                            pc_lock_info_t *lock, pc_error_t *err);
pc_status_t local_scan(pc_store_t *base, const char *table, const char *start, size_t slen,
                       const char *start_col, size_t sclen, const char *end, size_t elen,
                       uint64_t read_ts, size_t limit, pc_store_cell_fn fn, void *ctx,
                       pc_lock_info_t *lock, pc_error_t *err);
pc_status_t local_prewrite(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                           const pc_lock_spec_t *spec, pc_lock_info_t *lock, pc_error_t *err);
pc_status_t local_commit(pc_store_t *base, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                         uint64_t commit_ts, pc_error_t *err);
pc_status_t local_rollback(pc_store_t *base, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                           pc_error_t *err);
pc_status_t local_check_txn(pc_store_t *base, const pc_cell_t *primary, uint64_t start_ts,
                            uint64_t now_ts, int owner_dead, pc_txn_state_t *state,
                            uint64_t *commit_ts, pc_error_t *err);
pc_status_t local_heartbeat(pc_store_t *base, const pc_cell_t *primary, uint64_t start_ts,
                            uint32_t ttl_ms, pc_error_t *err);
pc_status_t local_commit_one_phase(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                                   uint64_t start_ts, pc_ts_source_fn ts_source, void *ts_ctx,
                                   pc_notify_clear_t *clear, uint64_t *commit_ts,
                                   pc_lock_info_t *lock, pc_error_t *err);
pc_status_t local_raw_scan(pc_store_t *base, const char *table, const char *start, size_t slen,
                           const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                           pc_error_t *err);
pc_status_t local_scan_locks(pc_store_t *base, uint64_t below, pc_store_lock_fn fn, void *ctx,
                             pc_error_t *err);
pc_status_t local_gc(pc_store_t *base, uint64_t safe_point, uint32_t rate,
                     pc_store_gc_stats_t *stats, pc_error_t *err);
uint64_t local_gc_safe_point(pc_store_t *base);
pc_status_t local_scan_notify(pc_store_t *base, uint32_t lo, uint32_t hi,
                              const pc_notification_t *after, size_t limit,
                              pc_store_notify_fn fn, void *ctx, pc_error_t *err);
/* Adds to b the deletes of cell c's notifications with ts < below (its row's
 * latch held), counting them in *n; key is scratch. */
pc_status_t local_notify_deletes(local_t *s, leveldb_writebatch_t *b, const pc_cell_t *c,
                                 uint64_t below, pc_buf_t *key, size_t *n, pc_error_t *err);
pc_status_t local_clear_notify(pc_store_t *base, pc_notify_clear_t *clears, size_t n,
                               pc_error_t *err);
/* Whether a strong observer of c's column is in the store's set. */
int local_strongly_observed(local_t *s, const pc_cell_t *c);
pc_status_t local_observer_update(pc_store_t *base, const pc_store_observer_t *o, int add,
                                  pc_error_t *err);
pc_status_t local_observer_list(pc_store_t *base, pc_store_observer_fn fn, void *ctx,
                                pc_error_t *err);
/* Whether clear->observers accounts for every observer of the set
 * registered for clear->cell's column; when not, names one in
 * clear->missing. Call between local_observers_hold and _release, which
 * keep an update of the set from coming between the check and the write of
 * the deletion. */
int local_observers_cover(local_t *s, pc_notify_clear_t *clear);
void local_observers_hold(local_t *s);
void local_observers_release(local_t *s);
/* Reads the set from the 'o' keys (at open); releases it (at close). */
pc_status_t local_observers_load(local_t *s, pc_error_t *err);
/* Reads the set from the 'o' keys again and makes it the set: a replica
 * that applied a logged update of the observers. */
pc_status_t local_observers_reload(local_t *s, pc_error_t *err);
/* Reads the index of the last log entry applied ('R') into s->applied (at open). */
pc_status_t local_applied_load(local_t *s, pc_error_t *err);
void local_observers_free(local_t *s);
/* Reads the persisted safe point into s->gc_safe (at open). */
pc_status_t local_gc_load(local_t *s, pc_error_t *err);
/* Fills s->lindex at open, before any operation: from the lock index a
 * clean close saved (then removed from the store, in one synced write), or
 * else, after a crash, from one walk over the meta records (store_raw.c). */
pc_status_t local_lock_index_open(local_t *s, pc_error_t *err);
/* Saves s->lindex's locked cells and the mark that they are complete, in
 * one synced write: at a clean close, after every operation. */
pc_status_t local_lock_index_save(local_t *s, pc_error_t *err);
/* Fills s->nindex from the notification key space (at open). */
pc_status_t local_notify_index_build(local_t *s, pc_error_t *err);

#endif
