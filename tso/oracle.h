/* oracle.h — the timestamp oracle, private to the library.
 *
 * Two halves:
 *   pc_oracle_*      the server side: hands out strictly increasing hybrid
 *                    timestamps (physical ms << 18 | logical) from memory below
 *                    an upper bound persisted a window ahead (temp file, fsync,
 *                    rename); after a restart it starts above the saved bound.
 *                    The embedded store uses it in-process; the tso daemon
 *                    serves it over the network.
 *   pc_ts_batcher_*  the client side: many threads ask for one timestamp each;
 *                    at most one fetch is in flight per batcher and each fetch
 *                    asks for as many timestamps as there are waiters, handing
 *                    them out to every thread that asked meanwhile.
 */
#ifndef PC_TSO_ORACLE_H
#define PC_TSO_ORACLE_H

#include <stdint.h>

#include <percolator/percolator.h>

typedef struct pc_oracle pc_oracle_t;

/* Opens the oracle whose bound lives in file path (created if missing; a
 * corrupt or unreadable file is PC_CORRUPTION / PC_IO_ERROR naming it).
 * path + ".lock" is held with flock() while it is open: another oracle on the
 * same file, in this process or another, is PC_BUSY.
 * window_ms: how far ahead of the clock the persisted bound is kept (0 = 3000);
 * a thread of the oracle's persists the next bound when less than half of it
 * is left, so pc_oracle_next waits for the disk only if it outruns that.
 * Returns NULL on error; release with pc_oracle_close. */
pc_oracle_t *pc_oracle_open(const char *path, uint32_t window_ms, pc_error_t *err);
void pc_oracle_close(pc_oracle_t *oracle);

/* Where an oracle keeps its bound: load reads the saved bound (0 when none
 * was ever saved); persist durably replaces it with a larger one, answering
 * PC_CONFLICT when the store refuses because another oracle has taken over
 * (the oracle then serves nothing, ever again, and answers its callers
 * PC_UNAVAILABLE); close (may be NULL) releases
 * ctx. Calls come from one thread at a time. */
typedef struct pc_oracle_bound_ops {
  pc_status_t (*load)(void *ctx, uint64_t *bound, pc_error_t *err);
  pc_status_t (*persist)(void *ctx, uint64_t bound, pc_error_t *err);
  void (*close)(void *ctx);
} pc_oracle_bound_ops_t;

/* Opens an oracle over the bound store ops (ctx is theirs; it is closed with
 * the oracle, or here on failure). name is used in messages. The oracle
 * serves only above the saved bound, and persists a new bound before it
 * returns. leased: it serves only under a lease (pc_oracle_extend_lease),
 * none yet at first. Returns NULL on error. */
pc_oracle_t *pc_oracle_open_with(const pc_oracle_bound_ops_t *ops, void *ctx, const char *name,
                                 uint32_t window_ms, int leased, pc_error_t *err);

/* An oracle elected in a coordination service serves only under a lease:
 * from until_mono_ms (pc_now_mono_ms) on, pc_oracle_next answers
 * PC_UNAVAILABLE until the lease is extended. A lease only grows; it never
 * comes back after pc_oracle_fence or a fenced persist, after which the
 * oracle serves nothing. An oracle opened without a lease serves always. */
void pc_oracle_extend_lease(pc_oracle_t *oracle, uint64_t until_mono_ms);
void pc_oracle_fence(pc_oracle_t *oracle);
/* 1 while the oracle may serve (no lease, or a lease not yet run out). */
int pc_oracle_serving(pc_oracle_t *oracle);

/* Reserves count (>= 1) consecutive timestamps; *first receives the first.
 * Thread-safe. Every timestamp is greater than any returned before, in this
 * process or any earlier one on the same file. */
pc_status_t pc_oracle_next(pc_oracle_t *oracle, uint32_t count, uint64_t *first,
                           pc_error_t *err);

/* The highest timestamp handed out so far (0 if none). */
uint64_t pc_oracle_last(pc_oracle_t *oracle);

/* How a batcher fetches count consecutive timestamps, bounded by timeout_ms. */
typedef pc_status_t (*pc_ts_fetch_fn)(void *ctx, uint32_t count, uint32_t timeout_ms,
                                      uint64_t *first, pc_error_t *err);

typedef struct pc_ts_batcher pc_ts_batcher_t;

/* Returns a batcher over fetch (NULL on allocation failure); release with
 * pc_ts_batcher_destroy once no thread uses it. */
pc_ts_batcher_t *pc_ts_batcher_create(pc_ts_fetch_fn fetch, void *ctx);
void pc_ts_batcher_destroy(pc_ts_batcher_t *b);

/* One timestamp for the calling thread, bounded by timeout_ms (PC_TIMEOUT). */
pc_status_t pc_ts_batcher_get(pc_ts_batcher_t *b, uint32_t timeout_ms, uint64_t *ts,
                              pc_error_t *err);

/* Adapter: a pc_ts_fetch_fn over an in-process oracle (ctx is the pc_oracle_t *). */
pc_status_t pc_oracle_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                            pc_error_t *err);

#endif
