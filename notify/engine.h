/* engine.h — the notification engine's private parts, shared by its files.
 * Each file of notify/ does one job (Apache Fluo's finder, processor and
 * work task, split further):
 *
 *   worker.c   the worker: options, start, stop (bounded), and its threads:
 *              the observer threads' loop (look, then a round over the
 *              claims), the keeper (the sweeper's turn, the watchdog of
 *              runs that do not return, the counters' flush), and the
 *              start of the backfill thread (backfill.c)
 *   journal.c  the in-flight journal and the counters, in a file mapped
 *              shared that outlives the process
 *   crashes.c  runs the process died in: counted in the store, parked at
 *              max_failures
 *   counters.c the observers' counters, written to the store
 *   claims.c   which buckets a thread scans: the worker's share of them
 *              (its place among the workers in ZooKeeper) and claims of
 *              the share, locked in-process so that threads spread out
 *   scan.c     the scan of one claim, page by page, grouping what it finds
 *              by cell; copies of notifications
 *   pass.c     one pass over a cell: every observer of its column, then
 *              the deletion of what they covered (the deletion rule)
 *   run.c      one observer on one cell, in a transaction begun for that
 *              cell (its trigger)
 *   batch.c    one observer on many cells of a claim in one transaction
 *              (observers with a batch callback)
 *   backoff.c  setbacks of (cell, observer) in memory: when to try again,
 *              and how many times the callback failed
 *   view.c     the observers registered in the store, as this worker knows
 *              them: whose coverage a deletion accounts for
 *   waiting.c  cells whose notifications wait for other workers' observers,
 *              so that a pass over them is not repeated for nothing
 *   backfill.c the backfill thread: the view's refresh, and the backfills
 *              of new registrations of this worker's observers
 *   parked.c   parked notifications: the failure records, their listing,
 *              and the retries asked for
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

#include <percolator/observer.h>

#include "core/db.h"
#include "notify/worker.h"

#define PC_NOTIFY_PAGE 256 /* notifications per scan_notify call */
#define PC_NOTIFY_RETRY_ATTEMPTS 5 /* of the small bookkeeping transactions (park, retry) */

static inline uint64_t pc_min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t pc_max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- the worker (worker.c) ------------------------------------------------ */

/* An observer's counters, in the journal (journal.c). */
enum { PC_C_RUNS, PC_C_SKIPPED, PC_C_CONFLICTS, PC_C_FAILURES, PC_C_PARKED, PC_NCOUNTERS };

typedef struct obs_slot {
  const pc_observer_t *obs;
  _Atomic uint64_t *n; /* PC_NCOUNTERS counters */
  atomic_uint running; /* its batched runs in flight in this worker (batch.c) */
} obs_slot_t;

static inline void pc_count(obs_slot_t *s, int which) { atomic_fetch_add(&s->n[which], 1); }

typedef struct backoff backoff_t; /* backoff.c */
typedef struct keyset keyset_t;   /* backoff.c */
typedef struct journal journal_t; /* journal.c */
typedef struct waiting waiting_t; /* waiting.c */
typedef struct pc_view pc_view_t; /* view.c */

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
  atomic_int abandoned; /* a bounded stop gave up on runs still going */
  pthread_mutex_t mu;   /* sleeps, and the threads' exits */
  pthread_cond_t cv;
  pthread_t *threads;          /* room for 2 * threads: the replacements of hung ones */
  struct wthread *threads_ctx; /* as many */
  size_t nthreads, maxthreads; /* started, room */
  size_t nlive;                /* observer threads not yet out of their loop (under mu) */
  pthread_t keeper;
  int keeper_started;
  uint64_t next_sweep_ms, next_flush_ms; /* the keeper's */

  backoff_t *backoff;
  journal_t *journal;
  char *journal_dir; /* o.journal_dir's copy */
  /* (cell, observer) keys: parked (not to run until a retry), and with deaths counted (crashes.c);
   * rebuilt from the store by pc_parked_retry, added to as they happen; under sets_mu */
  pthread_mutex_t sets_mu;
  keyset_t *held, *suspects;
  uint64_t (*flushed)[PC_NCOUNTERS]; /* per slot: the counters last written (counters.c) */

  waiting_t *waiting;

  /* the registered observers as this worker knows them (view.c) */
  pthread_mutex_t view_mu;
  pc_view_t *view;
  uint64_t view_next_ms; /* monotonic: when to read them again */
  atomic_int view_stale; /* a refresh is owed: a store refused a deletion, or a read failed */
  pthread_t backfiller; /* view.c's refresh and backfill.c's backfills */
  int backfiller_started;

  _Atomic uint64_t next_retry_scan_ms; /* parked.c */
  _Atomic uint64_t seen, claims_taken, claims_busy;
  _Atomic uint64_t lat_le[13], lat_sum_ms, lat_count;
};

/* One observer thread. */
typedef struct wthread {
  pc_worker_t *w;
  uint32_t idx;         /* also its journal slot */
  uint64_t session;     /* in w->local */
  uint64_t rng;
  _Atomic int64_t claim; /* the claim it holds, -1: none */
  int given_up;          /* its run was given up by the watchdog: the thread leaves */
  uint64_t wake_ms;      /* this round: when the first batch left to wait may run
                            (wall ms; 0: none waits) */
} wthread_t;

/* The observer thread calling, or NULL (another thread). */
wthread_t *pc_worker_self(void);

static inline int pc_worker_stopping(pc_worker_t *w) { return atomic_load(&w->stop); }
/* Sleeps ms or until the worker stops or pc_worker_wake. */
void pc_worker_nap(pc_worker_t *w, uint32_t ms);
/* Ends every thread's nap now. */
void pc_worker_wake(pc_worker_t *w);
/* The observer's slot (NULL for an observer registered after the start). */
obs_slot_t *pc_worker_slot(pc_worker_t *w, const pc_observer_t *obs);
/* Counts a committed run's latency from its notification's ts. */
void pc_worker_latency(pc_worker_t *w, uint64_t notify_ts, uint64_t commit_ts);

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
/* The named lock behind claims: 1 when name is now held by *session (in the
 * in-process lock service, opened or renewed as needed) and, in a cluster,
 * by this client's ZooKeeper session (coord.h's locks/); 0 when another
 * holds it; -1 when it cannot be
 * asked. Release with pc_lock_release; close the session with
 * pc_lock_session_end. */
int pc_lock_take(pc_worker_t *w, uint64_t *session, const char *name, size_t nl);
void pc_lock_release(pc_worker_t *w, uint64_t session, const char *name, size_t nl);
void pc_lock_session_end(pc_worker_t *w, uint64_t *session);

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
  int backfill; /* no notification: a backfill presents the cell (backfill.c) */
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

/* What the registered observers of a cell's column have covered so far,
 * and the rule that turns it into the bound below which the cell's
 * notifications are deleted. */
typedef struct pass {
  uint64_t newest; /* the newest notification of the cell the scan found */
  uint64_t cover;  /* the least of what the observers cover (UINT64_MAX: no bound) */
  const char *names; /* the observers the deletion accounts for (view.c) */
  size_t nlen;
} pass_t;

/* The deletion rule (pass.c): the bound below which the cell's
 * notifications may be deleted once every observer of the column is done,
 * given that one more of this worker's observers covers below extra
 * (UINT64_MAX: none). */
uint64_t pc_pass_clear_below(const pass_t *p, uint64_t extra);

/* ---- batched runs (batch.c) --------------------------------------------------- */

/* The cells of one claim waiting for one batched run of the same observer. */
typedef struct batch {
  obs_slot_t *slot; /* NULL while empty */
  size_t mine;      /* the observers of the column in this worker */
  group_t *v;
  size_t n, cap;
} batch_t;

/* The batches of one claim's scan, one per observer with a batch callback
 * (a scan meets the cells of several columns in turn, bucket by bucket). */
#define PC_BATCHES_MAX 8
typedef struct batches {
  batch_t b[PC_BATCHES_MAX];
} batches_t;

/* Takes g from the scan of a claim: into its observer's batch when its one
 * acting observer runs in batches (g's memory moves there), else through
 * pc_pass at once (g's memory is freed). Runs a batch when it is full.
 * Returns 1 when something was done. */
int pc_batch_take(pc_worker_t *w, batches_t *bs, group_t *g);
/* At the end of a claim's scan: runs what the batches hold and releases them. */
int pc_batch_end(pc_worker_t *w, batches_t *bs);

/* ---- one observer on one cell (run.c) -------------------------------------- */

typedef enum run_result {
  RUN_DONE,    /* ran, skipped or parked: *cover is what it observed below
                * (UINT64_MAX: no bound, 0: what the scan saw) */
  RUN_IDLE,    /* nothing of its kind was notified */
  RUN_DEFERRED /* failed, conflicted or waits out a backoff: keep the notifications */
} run_result_t;

/* Whether observer o has something to do for group g: a notification of
 * its kind. */
int pc_run_acts_on(const pc_observer_t *o, const group_t *g);

/* Runs slot's observer for group g in a transaction begun for the cell.
 * pass (NULL: none) asks its commit to delete the cell's notifications too,
 * below pc_pass_clear_below(pass, what the run covers); *cleared is set
 * when they went. RUN_DEFERRED sets *retry_at, when to try again. */
run_result_t pc_run(pc_worker_t *w, obs_slot_t *slot, const group_t *g, const pass_t *pass,
                    uint64_t *cover, int *cleared, uint64_t *retry_at);

/* Calls observer o on nc in t, with the run in the calling thread's
 * journal slot. An error also when the watchdog gave the run up meanwhile
 * (the thread's given_up is set then) or the worker was abandoned. */
pc_status_t pc_run_callback(pc_worker_t *w, const pc_observer_t *o, pc_txn_t *t,
                            const pc_notified_cell_t *nc, pc_error_t *err);

/* Reads / writes the timestamp in system column col of the cell's row (an
 * ack: 8 bytes big-endian; 0 when absent). */
pc_status_t pc_run_read_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t *ts,
                           pc_error_t *err);
pc_status_t pc_run_write_ts(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *col, uint64_t ts,
                            pc_error_t *err);
/* What a run writes when its callback succeeded: its ack (ack_col) = ts,
 * and the cell's turn, which every run on the cell writes, whatever its
 * observer, so that two runs on one cell that overlap conflict. */
pc_status_t pc_run_write_ack(pc_txn_t *t, const pc_cell_t *c, const pc_buf_t *ack_col,
                             uint64_t ts, pc_error_t *err);

/* ---- the registered observers (view.c) --------------------------------------- */

/* A registered observer of a column, as the view holds it. */
typedef struct view_obs {
  char name[PC_MAX_OBSERVER_NAME + 1];
  int kind;  /* pc_observer_kind_t */
  int state; /* pc_backfill_state_t */
  int mine;  /* this worker runs it */
} view_obs_t;

/* A column with registered observers (or observers of this worker). */
typedef struct view_col {
  char table[PC_MAX_TABLE + 1];
  char *col;
  size_t clen;
  view_obs_t *obs;
  size_t nobs, nmine;
  char *names; /* what a deletion accounts for: every name, each NUL-terminated */
  size_t nlen;
} view_col_t;

struct pc_view {
  int refs; /* under the worker's view_mu */
  view_col_t *cols; /* sorted by (table, column) */
  size_t n;
};

/* Reads the records and installs a new view (logging, once, the observers
 * of a column that this worker does not run). */
pc_status_t pc_view_refresh(pc_worker_t *w, pc_error_t *err);
/* A reference to the current view (NULL before the first); release it with
 * pc_view_put. */
pc_view_t *pc_view_get(pc_worker_t *w);
void pc_view_put(pc_worker_t *w, pc_view_t *v);
/* The view's column, or NULL when it has no observer, registered or own. */
const view_col_t *pc_view_column(const pc_view_t *v, const char *table, const char *col,
                                 size_t clen);
/* Asks for a refresh soon, waking the backfill thread (a store refused a
 * deletion for an observer the view lacks, or reading the records failed). */
void pc_view_stale(pc_worker_t *w);
/* Whether the view may lack a registration: pc_view_stale since the last
 * refresh. */
int pc_view_is_stale(pc_worker_t *w);
/* Whether a refresh is due now; the ms until one is (at most cap). */
int pc_view_due(pc_worker_t *w);
uint32_t pc_view_due_in(pc_worker_t *w, uint32_t cap);
/* Drops the current view (pc_worker_stop). */
void pc_view_release(pc_worker_t *w);

/* ---- cells left to other workers (waiting.c) ------------------------------------ */

waiting_t *pc_waiting_create(void);
void pc_waiting_destroy(waiting_t *t);
/* Whether the pass over c can be skipped now: this worker did every part of
 * it it can for the notifications up to newest, and only other workers'
 * observers are behind; it looks again after a wait that doubles. */
int pc_waiting_skip(pc_worker_t *w, const pc_cell_t *c, uint64_t newest);
/* Records that the notifications of c up to newest wait for other workers'
 * observers (left = 1), or that they are gone (left = 0). */
void pc_waiting_note(pc_worker_t *w, const pc_cell_t *c, uint64_t newest, int left);
/* Drops entries not seen for long (their notifications went meanwhile). */
void pc_waiting_prune(pc_worker_t *w);

/* ---- backfills (backfill.c) ---------------------------------------------------- */

/* The backfill thread's loop (worker.c starts the thread): refreshes the
 * view when due, and runs the backfill of each registration of this
 * worker's observers that is not finished, until the worker stops. */
void pc_backfill_main(pc_worker_t *w);

/* ---- setbacks in memory (backoff.c) ------------------------------------------ */

backoff_t *pc_backoff_create(void);
void pc_backoff_destroy(backoff_t *b);
/* The key of (cell, observer), or of the cell alone (observer NULL); 0, or
 * -1 when memory runs out. */
int pc_backoff_key(pc_buf_t *b, const pc_cell_t *c, const char *observer);
/* Defers key after a setback (callback_failed: a failure of the callback,
 * counted toward parking), remembering when to try again (*retry_at, NULL:
 * not wanted). Returns the callback failures so far (0 when the entry could
 * not be kept). */
uint32_t pc_backoff_defer(pc_worker_t *w, const pc_buf_t *key, int callback_failed,
                          uint64_t *retry_at);
/* Whether key waits out a backoff now (*retry_at then says until when). */
int pc_backoff_waiting(pc_worker_t *w, const pc_buf_t *key, uint64_t *retry_at);
/* Forgets key, of (cell, observer) or of a cell (after a success, once
 * parked, once a pass is complete). */
void pc_backoff_forget(pc_worker_t *w, const pc_buf_t *key);
/* Whether a pass over the cell (its key) that found notifications up to
 * newest must wait: a pass that saw them already ended with observers that
 * are still waiting. When not, and the cell had waited, *covers is a
 * malloc'd copy of what its weak observers' runs covered (per slot; else
 * NULL). */
int pc_backoff_cell_check(pc_worker_t *w, const pc_buf_t *cell, uint64_t newest,
                          uint64_t **covers);
/* A pass over the cell that saw notifications up to newest ended with
 * observers waiting until until_ms at the earliest; covers (per slot) is
 * what weak runs covered. */
void pc_backoff_cell_defer(pc_worker_t *w, const pc_buf_t *cell, uint64_t newest,
                           uint64_t until_ms, const uint64_t *covers);
/* Drops entries whose retry time passed long ago. */
void pc_backoff_prune(pc_worker_t *w);

/* ---- parked notifications (parked.c) ----------------------------------------- */

/* The row of the record of (cell, observer) with prefix ("failure/", or
 * "crash/" for a count of deaths); 0, or -1 when memory runs out. */
int pc_record_row(pc_buf_t *out, const char *prefix, const pc_cell_t *c, const char *observer);
/* Writes the failure record of (cell, observer) in t. */
pc_status_t pc_park_record(pc_txn_t *t, const pc_cell_t *c, const char *observer, int weak,
                           uint64_t ts, uint32_t failures, const char *error, pc_error_t *err);
/* Writes the failure record of (cell, obs) in a transaction of its own, and
 * holds the pair back (pc_parked_holds). */
pc_status_t pc_park(pc_worker_t *w, const pc_cell_t *c, const pc_observer_t *obs, uint64_t ts,
                    uint32_t failures, const char *error, pc_error_t *err);
/* Runs the retries asked for of this worker's observers, at most once every
 * RETRY_SCAN_MS across its threads (parked.c). */
void pc_parked_retry(pc_worker_t *w);

/* Whether (cell, observer) is parked here, so that it does not run until
 * a retry is asked for (key: pc_backoff_key's). */
int pc_parked_holds(pc_worker_t *w, const pc_buf_t *key);
/* Adds key to the parked ones (it was just parked). */
void pc_parked_hold(pc_worker_t *w, const pc_buf_t *key);

/* ---- the sweeper (sweeper.c) ------------------------------------------------- */

/* Settles every lock older than the lock TTL. */
void pc_sweep_once(pc_worker_t *w);

/* ---- the journal (journal.c) --------------------------------------------------- */

/* A run found in flight in a dead holder's journal. */
typedef struct pc_journal_run {
  pc_cell_t cell;
  const char *observer;
  uint64_t ts;
} pc_journal_run_t;

typedef void (*pc_journal_fn)(void *ctx, const pc_journal_run_t *run);
typedef void (*pc_journal_counts_fn)(void *ctx, const char *observer, const uint64_t *values);

/* Opens the journal: a file of dir that no live process holds (dir NULL:
 * memory only), with nslots run slots and the counters of observers
 * names[0..nnames), which continue from the file's previous holder's.
 * Calls found for each run that holder died in, and counts for each of its
 * counters (before they continue here). Release with pc_journal_close. */
journal_t *pc_journal_open(const char *dir, uint32_t nslots, const char *const *names,
                           size_t nnames, pc_journal_fn found, pc_journal_counts_fn counts,
                           void *ctx, pc_error_t *err);
void pc_journal_close(journal_t *j);
/* "host:dirhash:k" for a file, "host:pidN" in memory: a name of its own. */
const char *pc_journal_id(const journal_t *j);
int pc_journal_durable(const journal_t *j);
/* The PC_NCOUNTERS counters of names[i]. */
_Atomic uint64_t *pc_journal_counters(journal_t *j, size_t i);
/* A run starts in slot / returns. pc_journal_end returns 1 when the
 * watchdog gave the run up meanwhile (pc_journal_give_up). */
void pc_journal_begin(journal_t *j, uint32_t slot, const pc_cell_t *c, const char *observer,
                      uint64_t ts);
int pc_journal_end(journal_t *j, uint32_t slot);

/* A copy of the run in a slot. */
typedef struct pc_journal_copy {
  pc_cell_t cell;
  char table[PC_MAX_TABLE + 1], observer[PC_MAX_OBSERVER_NAME + 1];
  char row[PC_MAX_ROW], col[PC_MAX_COLUMN];
  uint64_t ts, since_mono_ms, gen;
} pc_journal_copy_t;

/* 1 with *out when slot's run started before older_than_ms (monotonic) and
 * has not been given up (or given_up_too). */
int pc_journal_peek(journal_t *j, uint32_t slot, uint64_t older_than_ms, int given_up_too,
                    pc_journal_copy_t *out);
/* Gives up the run gen of slot if it is still going: 1 then. */
int pc_journal_give_up(journal_t *j, uint32_t slot, uint64_t gen);

/* ---- runs the process died in (crashes.c) ------------------------------------------ */

/* Counts the death of run in the store; parks it at max_failures (worker
 * start, before the threads). */
void pc_crash_count(pc_worker_t *w, const pc_journal_run_t *run);
/* A run of (cell, observer) completed: its deaths no longer count. */
void pc_crash_forget(pc_worker_t *w, const pc_cell_t *c, const char *observer,
                     const pc_buf_t *key);
/* The (cell, observer) keys with deaths counted, read from the store into
 * set (the observers of this worker only). */
pc_status_t pc_crash_suspects(pc_worker_t *w, keyset_t *set, pc_error_t *err);

/* ---- the counters (counters.c) ----------------------------------------------------- */

/* Writes the counters that changed since the last flush (the keeper, and
 * the worker as it stops). */
void pc_counters_flush(pc_worker_t *w);
/* Writes the counters of observer (one this worker no longer has) as its
 * journal left them. */
void pc_counters_write_left(pc_worker_t *w, const char *observer, const uint64_t *values);

/* ---- sets of keys (backoff.c) ------------------------------------------------------- */

keyset_t *pc_keyset_create(void);
void pc_keyset_destroy(keyset_t *s);
/* 0, or -1 when memory runs out. */
int pc_keyset_add(keyset_t *s, const char *key, size_t len);
int pc_keyset_has(const keyset_t *s, const char *key, size_t len);
int pc_keyset_del(keyset_t *s, const char *key, size_t len);
size_t pc_keyset_size(const keyset_t *s);

#endif
