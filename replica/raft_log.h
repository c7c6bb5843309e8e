/* raft_log.h — the durable Raft state of every replica a tablet server
 * hosts, in one LevelDB of the server's ("raft/" in its directory), as
 * TiKV keeps its Raft logs in one engine apart from the data: each group's
 * term and vote, its last snapshot (a small descriptor, the configuration
 * at its index) and the entries after it; and the server's identity.
 *
 * Keys (a group is named by its tablet, at most PC_RAFT_GROUP_MAX bytes):
 *   'I'                   the server: str name u64 incarnation
 *   'H' str group          u64 term u64 vote
 *   'S' str group          u64 index u64 term u64 conf_index str conf str data
 *   'E' str group u64 idx   u64 term u8 type str data   (idx big-endian: in order)
 * conf is pc_raft_conf_encode's.
 *
 * Every write is synced. Writes of many groups and threads go through one
 * writer thread, which writes what has queued up as one batch: one fsync
 * for all of them, as LevelDB's own group commit would give writers on
 * many threads. */
#ifndef PC_REPLICA_RAFT_LOG_H
#define PC_REPLICA_RAFT_LOG_H

#include <raft.h>
#include <stddef.h>
#include <stdint.h>

#include <leveldb/c.h>

#include "core/keys.h"

#define PC_RAFT_GROUP_MAX 64

typedef struct pc_raft_log pc_raft_log_t;

/* Opens (creating) the log store in dir. NULL on error (err names dir). */
pc_raft_log_t *pc_raft_log_open(const char *dir, pc_error_t *err);
/* Stops the writer (after what is queued) and closes. */
void pc_raft_log_close(pc_raft_log_t *l);

/* The server's identity: *found = 0 when the store has none (a new
 * directory). name receives at most cap bytes. */
pc_status_t pc_raft_log_identity(pc_raft_log_t *l, char *name, size_t cap,
                                 uint64_t *incarnation, int *found, pc_error_t *err);
pc_status_t pc_raft_log_set_identity(pc_raft_log_t *l, const char *name, uint64_t incarnation,
                                     pc_error_t *err);

/* What a group has stored: hard state, snapshot, the range of entries. */
typedef struct pc_raft_stored {
  uint64_t term, vote;
  int has_snapshot;
  uint64_t snap_index, snap_term, conf_index;
  pc_buf_t conf, data; /* release with pc_raft_stored_free */
  uint64_t first, last; /* entries [first, last]; none when first > last */
} pc_raft_stored_t;
void pc_raft_stored_free(pc_raft_stored_t *s);

/* Reads group's state; *found = 0 when it has none at all. */
pc_status_t pc_raft_log_state(pc_raft_log_t *l, const char *group, pc_raft_stored_t *out,
                              int *found, pc_error_t *err);

/* Reads entries [from, to] of group into *out (raft_malloc'd array, each
 * entry's buf raft_malloc'd, batch NULL: libraft's load convention). */
pc_status_t pc_raft_log_entries(pc_raft_log_t *l, const char *group, uint64_t from, uint64_t to,
                                struct raft_entry **out, size_t *n, pc_error_t *err);

/* Calls fn for each group that has state. */
pc_status_t pc_raft_log_groups(pc_raft_log_t *l, void (*fn)(void *ctx, const char *group),
                               void *ctx, pc_error_t *err);

/* Synchronous, synced writes (elections: libraft requires them durable
 * before it goes on). The failpoint replica.hard_state_write fails one;
 * the replica's caller stops the server on a failure (replica/group.c). */
pc_status_t pc_raft_log_set_hard(pc_raft_log_t *l, const char *group, uint64_t term,
                                 uint64_t vote, pc_error_t *err);

/* Building a batch for pc_raft_log_submit. -1 out of memory. */
int pc_raft_log_put_entry(leveldb_writebatch_t *b, const char *group, uint64_t index,
                          const struct raft_entry *e);
void pc_raft_log_del_entries(leveldb_writebatch_t *b, const char *group, uint64_t from,
                             uint64_t to);
int pc_raft_log_put_snapshot(leveldb_writebatch_t *b, const char *group, uint64_t index,
                             uint64_t term, uint64_t conf_index, const pc_buf_t *conf,
                             const void *data, size_t dlen);
int pc_raft_log_put_hard(leveldb_writebatch_t *b, const char *group, uint64_t term,
                         uint64_t vote);
/* Writes b now, synced, on the calling thread (b is not taken). */
pc_status_t pc_raft_log_write(pc_raft_log_t *l, leveldb_writebatch_t *b, pc_error_t *err);

/* Queues b (taken: destroyed after it is written) for the writer thread;
 * done(ctx, PC_OK) is called on the writer thread once it is durable.
 * Writes complete in the order submitted. A write that fails (or a job
 * that cannot be queued for want of memory) stops the process with its
 * reason in the log: a replica goes on only from a log that holds what it
 * was told to hold. */
void pc_raft_log_submit(pc_raft_log_t *l, leveldb_writebatch_t *b,
                        void (*done)(void *ctx, pc_status_t st), void *ctx);

/* Raft configurations: u32 n, n * (u64 id str address u8 role). */
int pc_raft_conf_encode(const struct raft_configuration *c, pc_buf_t *out);
/* Fills c (raft_configuration_init'ed by the caller); -1 malformed or out
 * of memory. */
int pc_raft_conf_decode(const char *p, size_t len, struct raft_configuration *c);

#endif
