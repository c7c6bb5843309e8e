/* store_repl.h — what a replicated tablet (replica/) needs of the embedded
 * store: its writes turned into commands for the tablet's Raft log, the
 * commands applied on every replica in log order, and the store's contents
 * streamed to a replica that must be rebuilt.
 *
 * A store given a replicator (pc_local_store_set_replicator) writes nothing
 * itself: each row operation still takes its latches and makes its checks
 * against what the store has applied, then hands its batch (with the lock
 * index changes it records, store_local.h) to the replicator as one command
 * and waits; the replica proposes it, and once the log has committed it,
 * every replica, this one included, applies it with pc_local_store_apply,
 * which also records the entry's index in the batch (key 'R'). So the
 * store's state is always exactly the log applied up to pc_local_store_applied,
 * in the one write LevelDB makes atomic, and an entry applied twice (after a
 * restart, the log replays from its last snapshot) is recognised by its
 * index and skipped.
 *
 * Applying does not sync LevelDB: the log is the durable record. Before the
 * log drops entries (a Raft snapshot), pc_local_store_flush makes what they
 * wrote durable in LevelDB itself. */
#ifndef PC_CORE_STORE_REPL_H
#define PC_CORE_STORE_REPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"
#include "core/store.h"

/* The one-byte key of the index of the last log entry applied. */
#define PC_KEY_APPLIED "R"

/* Proposes cmd[0..len) to the tablet's log and waits until this replica has
 * applied it (PC_OK) or it cannot be: PC_UNAVAILABLE when it was never
 * proposed (this replica does not lead; nothing applied), PC_TIMEOUT when
 * the leadership was lost after it was proposed (it may still be applied
 * by the next leader). cmd is only read during the call. */
typedef pc_status_t (*pc_local_replicate_fn)(void *ctx, const char *cmd, size_t len,
                                             pc_error_t *err);

/* Makes every write of s go through fn from now on (NULL: written directly
 * again). s must be a store of pc_local_store_open. */
void pc_local_store_set_replicator(pc_store_t *s, pc_local_replicate_fn fn, void *ctx);

/* Applies the command of log entry index: PC_OK, also when index is at or
 * below pc_local_store_applied (already applied); PC_CORRUPTION for a
 * command that does not decode; another status when LevelDB failed (the
 * replica must then stop: its state would differ from the others'). Not
 * synced. Called by one thread at a time, in log order. */
pc_status_t pc_local_store_apply(pc_store_t *s, uint64_t index, const char *cmd, size_t len,
                                 pc_error_t *err);

/* The index of the last log entry applied (0: none, or not replicated). */
uint64_t pc_local_store_applied(pc_store_t *s);

/* Records index as applied, synced, without a command: a replica whose log
 * starts at index (a group bootstrapped with its configuration at index 1)
 * holds the state of every entry up to it. Only raises. */
pc_status_t pc_local_store_set_applied(pc_store_t *s, uint64_t index, pc_error_t *err);

/* Makes every write applied so far durable in LevelDB (its memtable is
 * written to a table file, synced): then the log entries up to
 * pc_local_store_applied may go. Takes as long as writing the memtable. */
pc_status_t pc_local_store_flush(pc_store_t *s, pc_error_t *err);

/* The contents of a store at one moment, for a replica being rebuilt: every
 * key of the store but those only this store's process uses (the saved lock
 * index), read from a LevelDB snapshot, in key order, in chunks. A chunk is
 * a sequence of (str key, str value) (base/buf.h's pc_buf_str). */
typedef struct pc_local_stream pc_local_stream_t;

/* Opens a stream of s; *applied receives the index of the last log entry
 * its snapshot holds. Release with pc_local_stream_close; s must outlive it. */
pc_local_stream_t *pc_local_stream_open(pc_store_t *s, uint64_t *applied, pc_error_t *err);

/* Appends to out the next pairs, stopping once out holds max_bytes or more
 * (one pair always goes); *done = 1 when the store has no more. */
pc_status_t pc_local_stream_next(pc_local_stream_t *st, size_t max_bytes, pc_buf_t *out,
                                 int *done, pc_error_t *err);
void pc_local_stream_close(pc_local_stream_t *st);

/* Writes streamed chunks into a new LevelDB at path (which must not hold
 * one), without syncing each; pc_local_loader_finish makes it durable and
 * closes it, after which pc_local_store_open opens it (rebuilding its
 * indexes from what it holds). Chunks are untrusted bytes: one that does not
 * decode is PC_CORRUPTION. */
typedef struct pc_local_loader pc_local_loader_t;
pc_local_loader_t *pc_local_loader_create(const char *path, pc_error_t *err);
pc_status_t pc_local_loader_put(pc_local_loader_t *l, const char *chunk, size_t len,
                                pc_error_t *err);
/* Bytes of keys and values written so far. */
uint64_t pc_local_loader_bytes(const pc_local_loader_t *l);
/* Flushes, closes and frees l, whatever it returns. */
pc_status_t pc_local_loader_finish(pc_local_loader_t *l, pc_error_t *err);
/* Closes and frees l without flushing (the caller deletes path). */
void pc_local_loader_abort(pc_local_loader_t *l);

#endif
