/* failpoint_names.h — the registry: every failpoint of the code, once.
 *
 * PC_FAILPOINT("name", err) (failpoint.h) may only name a point listed here.
 * PERCOLATOR_FAILPOINTS naming any other point is refused (PC_INVALID, with
 * a did-you-mean), so that a typo cannot make a fault test pass for nothing;
 * and tests/test_failpoint.c fails when a PC_FAILPOINT in the sources (or in
 * a macro wrapping it, such as txn.c's VANISH_AT) names a point missing here,
 * passes a name that is not a string literal, or when a point listed here is
 * used nowhere or missing from docs/ARCHITECTURE.md. Add a point here, where
 * it is hit, and to the table in docs/ARCHITECTURE.md.
 *
 * X(name, where it is hit) */
#ifndef PC_CORE_FAILPOINT_NAMES_H
#define PC_CORE_FAILPOINT_NAMES_H

#define PC_FAILPOINT_LIST(X)                                                                  \
  X("txn.prewrite.after_primary", "after the primary's row is prewritten")                      \
  X("txn.prewrite.after_secondary", "after each secondary row is prewritten")                   \
  X("txn.commit.before_primary", "commit_ts taken, primary not yet committed")                  \
  X("txn.commit.after_primary", "just after the commit point")                                  \
  X("txn.commit.after_secondary", "after each secondary row is committed")                      \
  X("txn.settle.before_check", "settling the client's own commit, before asking the primary")   \
  X("resolve.after_check", "a resolver decided the primary's fate, before touching the cell")   \
  X("store.before_apply", "before every WriteBatch of the store")                                \
  X("store.after_apply", "after every WriteBatch of the store")                                  \
  X("store.step", "each step of a long loop of the store (a scan, the raw view, the lock scan, a GC pass)") \
  X("db.txn.ts_taken", "a start_ts taken, not yet recorded in the open transactions")         \
  X("gc.timestamp_taken", "a GC pass took its timestamp, before reading the open transactions") \
  X("worker.before_clear", "a worker's pass over a cell: its notifications are not deleted") \
  X("worker.wait_scanned", "pc_notify_wait found no lock and no notification, before asking the oracle") \
  X("replica.before_propose", "a replicated tablet's row operation, checked, before its entry is proposed") \
  X("replica.before_append", "a replica's log entries, before they are written") \
  X("replica.log_write", "a server's Raft log write (entries, truncations, snapshots' records) on its writer thread (return: the write fails, and the server stops)") \
  X("replica.hard_state_write", "a server's synced write of a group's term or vote (return: the write fails, and the server stops)") \
  X("replica.after_append", "a replica's log entries written and synced, before Raft hears it") \
  X("replica.before_apply", "a committed log entry, before the replica applies it to its store") \
  X("replica.before_reply", "a row operation applied on the leader, before it answers") \
  X("replica.recv_install_snapshot", "an InstallSnapshot a follower received, before Raft sees it (return: lost in flight)") \
  X("daemon.before_serving", "a worker serving its directory started its observers, before writing serving.json")

#endif
