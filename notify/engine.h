/* engine.h — the notification engine's private parts, shared by its files.
 * Each file of notify/ does one job (Apache Fluo's finder, processor and
 * work task, split further):
 *
 *   worker.c   the worker: options, start, stop, counters, and the loop of
 *              each observer thread (look, then a round over the claims)
 *   claims.c   which buckets a thread scans: the worker's share of them
 *              (its place among the workers in ZooKeeper) and claims of
 *              the share, locked in-process so that threads spread out
 *   scan.c     the scan of one claim, page by page, grouping what it finds
 *              by cell; copies of notifications
 *   pass.c     one pass over a cell: every observer of its column, then
 *              the deletion of what they covered (the deletion rule)
 *   run.c      one observer on one cell, in a transaction begun for that
 *              cell (its trigger)
 *   backoff.c  setbacks of (cell, observer) in memory: when to try again,
 *              and how many times the callback failed
 *   parked.c   parked notifications: the failure records, their listing,
 *              and re-queueing them (retry marks)
 *   sweeper.c  the sweeper, which settles old locks on cells nobody reads
 *   wait.c     for any client: the pending count and pc_notify_wait
 *
 * The contract of the whole is worker.h; docs/ARCHITECTURE.md ("The
 * workers") explains it.
 */
#ifndef PC_NOTIFY_ENGINE_H
#define PC_NOTIFY_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/db.h"
#include "notify/worker.h"

#define PC_NOTIFY_PAGE 256 /* notifications per scan_notify call */
#define PC_NOTIFY_RETRY_ATTEMPTS 5 /* of the small bookkeeping transactions (park, retry) */

static inline uint64_t pc_min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t pc_max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- the worker (worker.c) ------------------------------------------------ */

typedef struct obs_slot {
  const pc_observer_t *obs;
  _Atomic uint64_t runs, skipped, conflicts, failures, parked;
} obs_slot_t;

typedef struct backoff backoff_t; /* backoff.c */

struct pc_worker {
  pc_db_t *db;
  pc_observer_registry_t *reg;
  pc_worker_options_t o;
  struct pc_ls *local; /* the db's in-process lock service (claims.c) */
  struct pc_member *member; /* its membership of the cluster's workers, or NULL */
  obs_slot_t *slots;   /* sorted by observer pointer */
  size_t nslots;
  uint32_t nclaims;

  atomic_int stop;
  pthread_mutex_t mu; /* sleeps */
  pthread_cond_t cv;
  pthread_t *threads;
  struct wthread *threads_ctx;
  size_t nthreads;
  pthread_t sweeper;
  int sweeper_started;

  backoff_t *backoff;

  _Atomic uint64_t seen, claims_taken, claims_busy;
  _Atomic uint64_t lat_le[13], lat_sum_ms, lat_count;
};

/* One observer thread. */
typedef struct wthread {
  pc_worker_t *w;
  uint32_t idx;
  uint64_t session; /* in w->local */
  uint64_t rng;
} wthread_t;

static inline int pc_worker_stopping(pc_worker_t *w) { return atomic_load(&w->stop); }
/* Sleeps ms or until the worker stops. */
void pc_worker_nap(pc_worker_t *w, uint32_t ms);
/* The observer's slot (NULL for an observer registered after the start). */
obs_slot_t *pc_worker_slot(pc_worker_t *w, const pc_observer_t *obs);
/* Counts a committed run's latency from its notification's ts. */
void pc_worker_latency(pc_worker_t *w, uint64_t notify_ts, uint64_t commit_ts);

/* "table/row/col" for messages, each cut to 64 bytes (bytes outside
 * printable ASCII shown as '?'); returns buf. */
const char *pc_cell_name(const char *table, const char *row, size_t rlen, const char *col,
                         size_t clen, char *buf, size_t cap);

/* ---- claims (claims.c) ------------------------------------------------------ */

/* The db's in-process lock service, created by its first worker. */
struct pc_ls *pc_claims_local(pc_db_t *db);
/* Joins the cluster's workers when the db is coordinated through
 * ZooKeeper (the share then follows the membership); leaves. */
pc_status_t pc_claims_start(pc_worker_t *w, pc_error_t *err);
void pc_claims_stop(pc_worker_t *w);
/* The buckets [*lo, *hi) of claim k within the worker's share now; 0 when
 * none of them is in the share. */
int pc_claim_buckets(pc_worker_t *w, uint32_t k, uint32_t *lo, uint32_t *hi);
/* 1 when claim k is now thread t's, 0 when another holds it, -1 when it
 * cannot be asked (no session), PC_CLAIM_NOT_MINE when it lies outside the
 * worker's share. */
#define PC_CLAIM_NOT_MINE 2
int pc_claim_take(wthread_t *t, uint32_t k);
void pc_claim_release(wthread_t *t, uint32_t k);
/* Closes the thread's session in the in-process lock service. */
void pc_claims_end(wthread_t *t);

/* ---- notifications as found (scan.c) --------------------------------------- */

/* A copy of a notification (one allocation holds the strings). */
typedef struct note {
  char *mem;
  pc_notification_t n;
} note_t;

/* 0, or -1 when memory runs out. */
int pc_note_copy(note_t *dst, const pc_notification_t *n);
void pc_note_free(note_t *t);

/* The notifications of one cell that a scan found. */
typedef struct group {
  note_t cell;
  uint64_t strong_ts, weak_ts; /* the newest of each kind, 0: none */
} group_t;

/* Whether any notification is there to work on (1 when the store cannot say). */
int pc_scan_anything(pc_worker_t *w);
/* Scans claim k page by page and passes over each cell found (pc_pass).
 * Returns 1 when it did something. */
int pc_scan_claim(pc_worker_t *w, uint32_t k);

/* ---- one pass over a cell (pass.c) ----------------------------------------- */

/* Runs every observer of g's column that this worker has, then deletes the
 * notifications they covered. Returns 1 when it did something (ran, skipped
 * or cleared), 0 when every observer waits out a backoff. */
int pc_pass(pc_worker_t *w, const group_t *g);

/* What the observers of a pass have covered so far, and the rule that turns
 * it into the bound below which the cell's notifications are deleted. */
typedef struct pass {
  uint64_t newest; /* the newest notification of the cell the scan found */
  uint64_t cover;  /* the least of what the observers cover (UINT64_MAX: no bound) */
} pass_t;

/* The deletion rule (pass.c): the bound below which the cell's
 * notifications may be deleted once every observer of the pass is done,
 * given that one more observer covers below extra (UINT64_MAX: none). */
uint64_t pc_pass_clear_below(const pass_t *p, uint64_t extra);

/* ---- one observer on one cell (run.c) -------------------------------------- */

typedef enum run_result {
  RUN_DONE,    /* ran, skipped or parked: *cover is what it observed below
                * (UINT64_MAX: no bound, 0: what the scan saw) */
  RUN_IDLE,    /* nothing of its kind was notified */
  RUN_DEFERRED /* failed, conflicted or waits out a backoff: keep the notifications */
} run_result_t;

/* Whether observer o has something to do for group g: a strong one is
 * notified by a strong notification or, through a retry mark, by a weak one. */
int pc_run_acts_on(const pc_observer_t *o, const group_t *g);

/* Runs slot's observer for group g in a transaction begun for the cell.
 * pass (NULL: none) asks its commit to delete the cell's notifications too,
 * below pc_pass_clear_below(pass, what the run covers); *cleared says
 * whether they went. */
run_result_t pc_run(pc_worker_t *w, obs_slot_t *slot, const group_t *g, const pass_t *pass,
                    uint64_t *cover, int *cleared);

/* Reads / writes the timestamp in system column col of the cell's row (an
 * ack or a retry mark: 8 bytes big-endian; 0 when absent). */
pc_status_t pc_run_read_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t *ts,
                           pc_error_t *err);
pc_status_t pc_run_write_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t ts,
                            pc_error_t *err);

/* ---- setbacks in memory (backoff.c) ------------------------------------------ */

backoff_t *pc_backoff_create(void);
void pc_backoff_destroy(backoff_t *b);
/* The key of (cell, observer); 0, or -1 when memory runs out. */
int pc_backoff_key(pc_buf_t *b, const pc_cell_t *c, const char *observer);
/* Defers key after a setback (callback_failed: a failure of the callback,
 * counted toward parking), remembering when to try again. Returns the
 * callback failures so far (0 when the entry could not be kept). */
uint32_t pc_backoff_defer(pc_worker_t *w, const pc_buf_t *key, int callback_failed);
/* Whether key waits out a backoff now. */
int pc_backoff_waiting(pc_worker_t *w, const pc_buf_t *key);
/* Forgets key (after a success or once parked). */
void pc_backoff_forget(pc_worker_t *w, const pc_buf_t *key);
/* Drops entries whose retry time passed long ago. */
void pc_backoff_prune(pc_worker_t *w);

/* ---- parked notifications (parked.c) ----------------------------------------- */

/* Writes the failure record of (cell, obs) in a transaction of its own. */
pc_status_t pc_park(pc_worker_t *w, const pc_cell_t *c, const pc_observer_t *obs, uint64_t ts,
                    uint32_t failures, const char *error, pc_error_t *err);
/* The retry mark of observer for column col; 0, or -1 when memory runs out. */
int pc_retry_column(pc_buf_t *out, const char *observer, const char *col, size_t clen);

/* ---- the sweeper (sweeper.c) ------------------------------------------------- */

void *pc_sweeper_main(void *arg);

#endif
