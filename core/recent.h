/* recent.h — what this process knows of its own commits, by cell, so that a
 * transaction of a cluster client that is sure to lose a write conflict
 * learns it before its prewrite (core/txn.c): the newest commit of each cell,
 * and the commits in flight.
 *
 * Percolator's prewrite refuses a cell written at or after the transaction's
 * start_ts. When a transaction of this process committed a put or a delete
 * of cell C at commit_ts W (its primary committed: W is, or will be once
 * rolled forward, C's write), every transaction with start_ts below W that
 * writes C fails its prewrite on C. Refusing it before it prewrites changes
 * no outcome; it saves the prewrite of every other cell and their rollback,
 * the cost of a lost transaction across tablets (a one-phase commit on one
 * tablet fails at its first check, before it writes anything).
 *
 * A commit of this process that writes C while another is still committing
 * C would meet that one's lock or its fresh write in its prewrite, and lose,
 * unless the other fails. So a commit first waits until no other commit of
 * this process in flight writes any of its cells (pc_recent_begin), and only
 * then looks for a newer commit of them: it loses before its prewrite, or
 * goes ahead once the other's outcome is known. As a latch of TiKV's
 * scheduler, on the client: all of a commit's cells or none are taken, and a
 * commit that holds them never waits for another's, so no two wait for each
 * other; the wait is bounded by the waiter's deadline, after which it goes
 * ahead without them (the store decides, as always).
 *
 * Bounded: the newest commits are a table of PC_RECENT_SLOTS slots, each the
 * 64-bit hash of a cell and the newest commit_ts recorded for it; a newer
 * cell hashing to a taken slot replaces it. A cell it forgot is checked by
 * the store as before; two cells with one hash can refuse a transaction the
 * store would have let through, or make one wait for another, which is
 * retried with a later start_ts like any loser (never a wrong result:
 * refusing is always safe in an optimistic protocol). The commits in flight
 * hold their own entries (one a written cell), and one of more than
 * PC_RECENT_FLIGHT_MAX cells takes none. */
#ifndef PC_CORE_RECENT_H
#define PC_CORE_RECENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/store.h"

#define PC_RECENT_SLOTS 65536u
#define PC_RECENT_FLIGHT_MAX 65536u

typedef struct pc_recent pc_recent_t;
typedef struct pc_recent_commit pc_recent_commit_t;

/* An empty table, or NULL when out of memory. Release with pc_recent_destroy,
 * once no commit of it is in flight. */
pc_recent_t *pc_recent_create(void);
void pc_recent_destroy(pc_recent_t *r);

/* A commit of muts[0..n) (which must outlive it) begins: waits, at most
 * wait_ms, until no other commit in flight writes one of its put or delete
 * cells, then takes them (not when more than PC_RECENT_FLIGHT_MAX, nor after
 * waiting wait_ms). Returns the commit, to end
 * with pc_recent_end (the caller owns it until then), or NULL when r is NULL
 * (no table: nothing to do) or out of memory. Never call it twice in one
 * thread without ending the first: the second could wait for the first. */
pc_recent_commit_t *pc_recent_begin(pc_recent_t *r, const pc_mutation_t *muts, size_t n,
                                    uint32_t wait_ms);

/* The index of the first of the commit's mutations whose cell this process
 * committed after start_ts (its commit_ts in *at), or n when none is known;
 * SIZE_MAX when c is NULL. */
size_t pc_recent_conflict(const pc_recent_commit_t *c, uint64_t start_ts, uint64_t *at);

/* Ends the commit: records its puts and deletes at commit_ts when it is not
 * 0 (the commit succeeded), then frees its cells for the commits waiting for
 * them, and frees c. NULL: nothing. */
void pc_recent_end(pc_recent_commit_t *c, uint64_t commit_ts);

#endif
