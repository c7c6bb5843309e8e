/* worker.h — the notification engine: worker threads that find
 * notifications and run the observers registered for them, in transactions.
 *
 * Scanning. Notifications live in their own key space, in PC_NOTIFY_BUCKETS
 * hash buckets of the row. In a cluster coordinated through ZooKeeper each
 * worker takes a share of the buckets, a contiguous range, by its place
 * among the workers registered there (a change of membership is used once
 * it has been stable for stable_ms; pc_worker_share). The share is cut into
 * claims of buckets_per_claim; a thread visits the claims in a random
 * order, takes each one's lock in the process ("percolator/notify/<first
 * bucket>"), skips it when another thread holds it, scans it, and releases
 * it — so threads spread out instead of clumping behind each other. Safety
 * never depends on shares or claims: the ack cells make two runs for the
 * same change conflict, and at most one commits.
 *
 * A strong notification of cell c at ts runs each strong observer O of c's
 * column in a transaction T with a fresh start_ts: T reads ack(c, O); if it
 * is at or after ts the change was already observed; otherwise O's callback
 * runs, T writes ack(c, O) = T.start_ts and commits. A weak notification
 * runs the weak observers the same way. The observers registered in the
 * store are the authority over what goes: c's notifications are deleted
 * only below what every observer registered for c's column has covered —
 * this worker's by their runs, other workers' by their acks — and the store
 * checks that the deletion accounts for every observer it knows. A column
 * whose registered observers this worker runs none of is left to the
 * workers that do. An observer that fails (an error, or a conflict) is
 * retried with backoff, and while it waits nothing runs the cell's pass
 * again; after max_failures failures of its callback its notification is
 * parked: recorded in the system table with the error, and removed from
 * scanning (pc_worker_failures lists them, pc_worker_retry_failures asks for
 * a retry). Conflicts are retried but never parked: another transaction
 * committed, so the cell made progress.
 *
 * An observer that kills the worker process is counted across restarts
 * through the in-flight journal (journal_dir) and parked after
 * max_failures deaths in a row; one that does not return within hang_ms is
 * given up (a failure), and its thread's share of the scanning goes to a
 * new thread. A parked (cell, observer) does not run again until a retry.
 *
 * A keeper thread settles locks older than the lock TTL on cells nobody
 * reads (the sweeper), so that a crashed writer's notifications appear
 * (roll-forward writes them) and its other locks go; it also writes the
 * observers' counters to the store and watches for runs that do not return.
 * Another reads the registered observers again now and then, and runs the
 * backfill of each new registration of this worker's observers.
 */
#ifndef PC_NOTIFY_WORKER_H
#define PC_NOTIFY_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "observers/registry.h"

typedef struct pc_worker pc_worker_t;

/* Buckets a claim: the default of pc_worker_options_default, and what a
 * worker of a coordinated cluster takes when buckets_per_claim is 0 */
#define PC_WORKER_CLAIM_BUCKETS 128u
/* batch_wait_ms chosen by the worker: this for a worker alone on its store
 * (embedded, the default), where one process pays every run's fixed cost
 * and fewer, larger runs under a steady feed leave the CPU to the rest
 * (docs/BENCHMARKS.md, "Freshness at a steady feed"); no more than 50 ms,
 * since a document pays the wait at each observer it crosses ("A shorter
 * batch wait"). 0 for the workers of a cluster, coordinated through
 * ZooKeeper, whose waiting claims are scanned again over RPC and whose runs
 * wait on round trips more than on the CPU. */
#define PC_WORKER_BATCH_WAIT_AUTO UINT32_MAX
#define PC_WORKER_ALONE_BATCH_WAIT_MS 50u

/* The observer threads a worker runs when its options say 0: one for each
 * core this process may run on (its CPU affinity), 1..256. More threads
 * than cores only add batches of one observer running side by side, which
 * lose to each other's commits and run again (docs/BENCHMARKS.md,
 * "Observer threads"); a worker of a cluster whose tablet servers are on
 * other machines waits on round trips, and may be given more. */
uint32_t pc_worker_default_threads(void);

typedef struct pc_worker_options {
  uint32_t threads; /* observer threads (1..256); 0: pc_worker_default_threads() [0] */
  /* [128]: 8 claims of the 1024 buckets. 0: chosen at start, 1024 / threads
   * (a claim a thread) for a worker that scans every bucket alone (no
   * coordination: embedded, a served directory), 128 in a cluster, whose
   * workers divide the buckets (pc_worker_claim_size) */
  uint32_t buckets_per_claim;
  uint32_t idle_ms;           /* sleep after a round that found nothing [100] */
  uint32_t max_failures;      /* failures of one notification before it is parked [5] */
  uint32_t backoff_ms;        /* first wait before a retry, doubling [100] */
  uint32_t sweep_ms;          /* how often the sweeper runs (0: none) [1000] */
  /* While a batched run of its observer is in flight in this worker, a batch
   * of that observer that is not full waits until its oldest notification
   * is this old (or the batch fills) before it runs: later scans find more
   * cells to run with it (batch.c). 0: it runs at once. [PC_WORKER_BATCH_WAIT_AUTO:
   * PC_WORKER_ALONE_BATCH_WAIT_MS alone, 0 coordinated with other workers] */
  uint32_t batch_wait_ms;
  uint32_t stable_ms; /* a membership change is used once stable this long [3000] */
  /* a run whose observer has not returned after hang_ms is given up: it
   * counts as a failure of (cell, observer), its claim is released, and
   * another thread takes its place (0: never) [60000] */
  uint32_t hang_ms;
  /* the directory of the in-flight journal, so that the deaths of the
   * process during a run are counted across restarts and the counters
   * survive it (NULL: none; the string is copied) [NULL] */
  const char *journal_dir;
} pc_worker_options_t;

/* The defaults above. */
void pc_worker_options_default(pc_worker_options_t *o);
/* The claim size a worker with options o uses: o->buckets_per_claim, or when
 * it is 0, 1024 / threads (at least 1) without coordination, where one
 * worker scans every bucket and a claim a thread gives each change the
 * shortest wait for its claim's turn and the largest batches
 * (docs/BENCHMARKS.md, "Claims sized by the threads"); 128 with
 * coordination, where the workers of a cluster divide the buckets and a
 * share must still hold a claim for each of a worker's threads. */
uint32_t pc_worker_claim_size(const pc_worker_options_t *o, int coordinated);

/* Registers every observer of registry in db's store (pc_db_register_observed),
 * gives every store the copy of every registration (pc_db_observers_sync),
 * reads the registered observers (logging, per column, those it does not
 * run: their notifications wait for another worker) and starts the threads.
 * db and registry must outlive the worker; the observers are those of the
 * registry at the start (one registered later is not run). Workers of one
 * store may run different observers. A registry without observers is
 * PC_INVALID. Returns NULL on error (naming the observer or the resource).
 * Stop and release with pc_worker_stop. */
pc_worker_t *pc_worker_start(pc_db_t *db, pc_observer_registry_t *registry,
                             const pc_worker_options_t *o, pc_error_t *err);

/* Stops taking work, lets in-flight observer transactions finish or abort,
 * joins the threads and releases the worker. NULL is a no-op. Waits as long
 * as an observer takes to return. */
void pc_worker_stop(pc_worker_t *w);

/* Tells the worker's threads to stop taking work and returns at once; w
 * stays valid (pc_worker_stats answers) until pc_worker_stop or
 * pc_worker_stop_within releases it. Lets a caller's own waits (its
 * reporter's last write) overlap the observers' ending. */
void pc_worker_stop_begin(pc_worker_t *w);

/* Like pc_worker_stop, but waits at most ms for the observers in flight:
 * PC_OK once everything stopped and w is released; PC_TIMEOUT (naming the
 * observers still running) when some have not returned, and then w is not
 * released: their threads go on using it, the database and the observers'
 * code, so the caller must not close or unload those. Nothing those
 * observers do commits any more; their runs count as deaths of the process
 * at the next start with the same journal. A process that gets PC_TIMEOUT
 * exits; pc_worker_stop(w) waits for the rest and releases w. */
pc_status_t pc_worker_stop_within(pc_worker_t *w, uint32_t ms, pc_error_t *err);

/* Counters of one observer (added up since start). */
typedef struct pc_observer_stats {
  char name[PC_MAX_OBSERVER_NAME + 1];
  uint64_t runs;      /* committed observer transactions, counted when the commit
                       * returns: a moment after its effects (and perhaps the
                       * deletion of its notification) are visible */
  uint64_t skipped;   /* notifications already acknowledged */
  uint64_t conflicts; /* runs that aborted on a conflict (retried) */
  uint64_t failures;  /* runs whose callback failed (retried or parked) */
  uint64_t parked;
} pc_observer_stats_t;

typedef struct pc_worker_stats {
  uint64_t notifications_seen;
  uint64_t claims_taken, claims_busy;
  /* latency from a notification's ts (its change's commit) to the commit of
   * its observer transaction, in milliseconds, over the runs that wrote
   * something: cumulative counts per bucket of the Prometheus histogram (le
   * 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, +Inf; the last is
   * latency_count) and the sum */
  uint64_t latency_le[13];
  double latency_sum_ms;
  uint64_t latency_count;
  size_t nobservers;
  pc_observer_stats_t *observers; /* malloc'd; release with pc_free */
} pc_worker_stats_t;

/* The buckets [*lo, *hi) the worker scans now (lo == hi: none), its place
 * *index among *count workers (0 of 1 without coordination); index and
 * count may be NULL. */
void pc_worker_share(pc_worker_t *w, uint32_t *lo, uint32_t *hi, uint32_t *index,
                     uint32_t *count);

/* A snapshot of the counters. *out's observers array is malloc'd. With a
 * journal file, an observer's counters continue from those its previous
 * holder left. */
pc_status_t pc_worker_stats(pc_worker_t *w, pc_worker_stats_t *out, pc_error_t *err);

/* Calls fn with each observer's counters summed over every worker that
 * ever ran it on this store, dead or alive (written by each worker within
 * 200 ms of a change; a dead worker's last counts reach the store when
 * another takes its journal file, or never without one). */
pc_status_t pc_worker_totals(pc_db_t *db,
                             int (*fn)(void *ctx, const pc_observer_stats_t *totals), void *ctx,
                             pc_error_t *err);

/* ---- for any client (the CLI's wait, status and failures) ------------------ */

/* Counts pending notifications per (table, column) with a full scan; fn may
 * be NULL. *total receives the count. */
pc_status_t pc_notify_pending(pc_db_t *db, uint64_t *total,
                              int (*fn)(void *ctx, const char *table, const char *col, size_t clen,
                                        uint64_t count),
                              void *ctx, pc_error_t *err);

/* Returns PC_OK once no notification is pending and no transaction that
 * could create one is in flight: after a fresh timestamp T, no lock is held
 * anywhere, a full scan finds no notification, and the oracle's last issued
 * timestamp is still T (nobody took one during the check: Fluo's check, made
 * exact by asking the oracle rather than comparing two timestamps, which a
 * hybrid clock's millisecond tick would defeat). Then every transaction that
 * had written a lock before the check, and every observer run it led to,
 * has been observed; one that took its start_ts earlier but writes its first
 * lock after the check began is not waited for (wait.c says why).
 * PC_TIMEOUT after timeout_ms, saying what was still going on. */
pc_status_t pc_notify_wait(pc_db_t *db, uint32_t timeout_ms, pc_error_t *err);

/* A parked notification. */
typedef struct pc_parked {
  const char *table, *row, *col, *observer, *error;
  size_t rlen, clen;
  uint64_t ts;
  uint32_t failures;
  int retrying; /* a retry was asked for (pc_worker_retry_failures), not yet run */
} pc_parked_t;

/* Calls fn for each parked notification (not those whose retry was asked
 * for and has not run yet); pointers valid during the call. */
pc_status_t pc_worker_failures(pc_db_t *db, int (*fn)(void *ctx, const pc_parked_t *p),
                               void *ctx, pc_error_t *err);
/* Asks for a retry of every parked notification: a worker that runs its
 * observer runs that observer alone, on the parked change, once more (its
 * failure count starts again; after max_failures it is parked again), and
 * pc_notify_wait waits for it. No notification is written, so the other
 * observers of the cell do not run. *n receives how many. */
pc_status_t pc_worker_retry_failures(pc_db_t *db, uint64_t *n, pc_error_t *err);

#endif
