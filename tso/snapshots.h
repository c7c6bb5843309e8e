/* snapshots.h — what the oracle of a served data directory knows of its
 * clients' snapshots, so that garbage collection never passes one a live
 * client still reads (docs/ARCHITECTURE.md, "Garbage collection"). A served
 * directory has no ZooKeeper, where a cluster's clients report theirs; its
 * clients report to the oracle instead, over their connection to it
 * (tso_wire.h's REPORT), and a collector asks it (OLDEST).
 *
 * A client reports a floor: a timestamp the oracle had issued before the
 * client looked at its open transactions (the reply to its previous
 * report), lowered to the start_ts of each of them. Every transaction it
 * opens later takes its start_ts after that timestamp, so the floor bounds
 * every snapshot the client reads from the report on, and a later report
 * only replaces it with another bound. The client reports when it opens,
 * before any transaction, then every PC_SNAPSHOT_REPORT_MS, and leaves
 * (floor 0) when it closes.
 *
 * A report belongs to the connection it came on: while the connection is
 * open the client is alive and its floor holds, however long it is silent
 * (a paused process keeps its snapshot). When the connection closes (the
 * process died, or the server closed an idle connection) the floor holds
 * grace_ms more, time for a live client that reconnects to report again,
 * then goes. An oracle that starts knows no client: for its first grace_ms
 * the answer is not complete, and a collector then keeps everything its
 * other bounds allow.
 *
 * Memory is bounded: at most PC_SNAPSHOTS_MAX clients, and
 * PC_SNAPSHOTS_PER_CONNECTION per connection; a report past either is
 * refused (PC_BUSY), naming the limit. Thread-safe. */
#ifndef PC_TSO_SNAPSHOTS_H
#define PC_TSO_SNAPSHOTS_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#define PC_SNAPSHOT_REPORT_MS 1000u  /* how often a client reports */
#define PC_SNAPSHOT_GRACE_MS 10000u  /* see above */
#define PC_SNAPSHOTS_MAX 65536u
#define PC_SNAPSHOTS_PER_CONNECTION 16u

typedef struct pc_snapshots pc_snapshots_t;

/* NULL when out of memory. Release with pc_snapshots_destroy. */
pc_snapshots_t *pc_snapshots_create(uint32_t grace_ms);
void pc_snapshots_destroy(pc_snapshots_t *s);

/* Client's report, received on connection: its floor (0: it leaves). */
pc_status_t pc_snapshots_report(pc_snapshots_t *s, uint64_t connection, uint64_t client,
                                uint64_t floor, pc_error_t *err);

/* Connection closed: its clients' floors hold grace_ms more. */
void pc_snapshots_closed(pc_snapshots_t *s, uint64_t connection);

/* The oldest floor of the clients whose floors hold (UINT64_MAX: none), how
 * many they are, and whether the oracle has been up grace_ms (complete). */
void pc_snapshots_oldest(pc_snapshots_t *s, uint64_t *oldest, int *complete, uint32_t *clients);

#endif
