/* recent.h — the newest commits of this process's own transactions, by cell,
 * so that a transaction of a cluster client that is sure to lose a write
 * conflict learns it before its prewrite (core/txn.c).
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
 * Bounded: a table of PC_RECENT_SLOTS slots, each the 64-bit hash of a cell
 * and the newest commit_ts recorded for it; a newer cell hashing to a taken
 * slot replaces it. A cell it forgot is checked by the store as before; two
 * cells with one hash can refuse a transaction the store would have let
 * through, which is retried with a later start_ts like any loser (never a
 * wrong result: refusing is always safe in an optimistic protocol). */
#ifndef PC_CORE_RECENT_H
#define PC_CORE_RECENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/store.h"

#define PC_RECENT_SLOTS 65536u

typedef struct pc_recent pc_recent_t;

/* An empty table, or NULL when out of memory. Release with pc_recent_destroy. */
pc_recent_t *pc_recent_create(void);
void pc_recent_destroy(pc_recent_t *r);

/* Records muts[0..n) committed at commit_ts: each put's and delete's cell
 * (a notification alone writes no version). */
void pc_recent_record(pc_recent_t *r, const pc_mutation_t *muts, size_t n, uint64_t commit_ts);

/* The index of the first of muts[0..n) whose cell this process committed
 * after start_ts (its commit_ts in *at), or n when none is known. */
size_t pc_recent_conflict(pc_recent_t *r, const pc_mutation_t *muts, size_t n, uint64_t start_ts,
                          uint64_t *at);

#endif
