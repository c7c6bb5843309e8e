/* tablet.h — cluster mode's store: a tablet server serves the operations of
 * store.h for the row ranges it owns, over rpc.h; the remote store is a
 * pc_store_t that routes each operation to the tablet owning its row.
 *
 * Wire ops (request body -> reply body; each request's encoder and decoder
 * are in tablet_wire.h); cells are (str table, str row, str col); every
 * reply body starts with u8 store status and, when that is not PC_OK, ends
 * with str message. A mutation is cell u8 kind (0 put, 1 delete,
 * 3 notify: a weak notification, no value) u8 flags (2 weak; 1 is ignored)
 * str value; a lock carries the same kind and flags bytes, 1 saying the
 * column had a strong observer at prewrite (tablet_wire.c); a notification
 * is cell u64 ts u8 weak (0 strong, 1 weak).
 *
 *   0x10 GET        cell u64 read_ts                  -> status [str value | lock]
 *   0x11 PREWRITE   spec u32 n n*mutation             -> status [lock]
 *   0x12 COMMIT     u64 start u64 commit u32 n n*cell -> status
 *   0x13 ROLLBACK   u64 start u32 n n*cell            -> status
 *   0x14 CHECK_TXN  cell u64 start u64 now u8 dead    -> status u8 state u64 commit_ts
 *   0x15 ONE_PHASE  u64 start u32 n n*mutation [clear] -> status [u64 commit_ts
 *                                                        [u8 done str missing] | lock]
 *                   clear = cell u64 below str observers: that cell's
 *                   notifications below go in the commit's batch when the
 *                   observers (each name NUL-terminated) account for the
 *                   tablet's (pc_notify_clear_t); the cell must be in a row
 *                   of the mutations; done and missing answer a clear
 *   0x16 SCAN       str table str start u8 has_col str col u8 has_end str end
 *                   u64 read_ts u32 limit             -> status u32 n n*(str row str col
 *                                                        str value) [lock]
 *   0x17 RAW_SCAN   u8 has_table str table u8 has_start str start u8 has_end str end
 *                                                     -> status u32 n n*raw cell
 *   0x18 INFO       (empty)                           -> status str name u32 n n*(str start
 *                                                        str end) u64 ops gc'
 *                   gc' = u64 safe_point u64 passes u64 versions u64 rollbacks u64 data
 *                   (garbage collection: the safe point the tablet holds, its
 *                   own across restarts; passes and deletions since it started)
 *   0x19 GET_FRESH  cell                              -> status u64 read_ts [str value | lock]
 *                   (reads at a timestamp the tablet takes from its oracle
 *                   link; read_ts is present when status is ok, not found
 *                   or locked)
 *   0x1A HEARTBEAT  cell u64 start u32 ttl_ms         -> status
 *   0x1B SCAN_LOCKS u64 below                         -> status u8 truncated u32 n n*lock
 *                   (at most PC_TABLET_LOCKS_MAX locks; truncated when more remain)
 *   0x1C GC         u64 safe_point u32 rate           -> status u64 cells u64 versions
 *                                                        u64 rollbacks u64 data
 *   0x1D SCAN_NOTIFY u32 lo u32 hi u8 has_after [notification] u32 limit
 *                                                     -> status u8 more u32 n
 *                                                        n*notification
 *                   (store.h's scan_notify on the tablet's own rows: buckets
 *                   [lo, hi), lo < hi <= 1024, after `after` if present,
 *                   1 <= limit <= 100000; a reply stops early, with more = 1,
 *                   once it holds PC_TABLET_NOTIFY_REPLY_MAX bytes: ask again
 *                   after its last notification. more = 0 and n < limit: the
 *                   range is exhausted on this tablet)
 *   0x1E CLEAR_NOTIFY cell u64 below str observers    -> status u8 done str missing
 *                   (deletes the cell's notifications with ts < below when
 *                   the observers account for the tablet's, as in ONE_PHASE)
 *   0x1F OBSERVER   u8 add str name [str record]      -> status
 *                   (store.h's observer_update: adds the observer, whose
 *                   registration record (keys.h) follows, or removes it)
 *   0x20 OBSERVERS  (empty)                           -> status u32 n
 *                                                        n*(str name str record)
 *                   (the tablet's set, store.h's observer_list)
 *   0x21 GET_MANY   u64 read_ts u32 n n*cell          -> status n*(u8 status [str value
 *                                                        | lock])
 *                   (n GETs at read_ts; each cell's status is ok, not found
 *                   or locked, in the order of the request)
 * After a GC at safe point S, a GET or SCAN at a read_ts below S is
 * PC_ABORTED (the snapshot is older than what the tablet still keeps).
 * A row outside the tablet's ranges is PC_INVALID naming the tablet (misrouted).
 */
#ifndef PC_TABLET_TABLET_H
#define PC_TABLET_TABLET_H

#include <stddef.h>
#include <stdint.h>

#include "core/store.h"
#include "net/rpc.h"

enum {
  PC_TABLET_OP_GET = 0x10,
  PC_TABLET_OP_PREWRITE = 0x11,
  PC_TABLET_OP_COMMIT = 0x12,
  PC_TABLET_OP_ROLLBACK = 0x13,
  PC_TABLET_OP_CHECK_TXN = 0x14,
  PC_TABLET_OP_ONE_PHASE = 0x15,
  PC_TABLET_OP_SCAN = 0x16,
  PC_TABLET_OP_RAW_SCAN = 0x17,
  PC_TABLET_OP_INFO = 0x18,
  PC_TABLET_OP_GET_FRESH = 0x19,
  PC_TABLET_OP_HEARTBEAT = 0x1A,
  PC_TABLET_OP_SCAN_LOCKS = 0x1B,
  PC_TABLET_OP_GC = 0x1C,
  PC_TABLET_OP_SCAN_NOTIFY = 0x1D,
  PC_TABLET_OP_CLEAR_NOTIFY = 0x1E,
  PC_TABLET_OP_OBSERVER = 0x1F,
  PC_TABLET_OP_OBSERVERS = 0x20,
  PC_TABLET_OP_GET_MANY = 0x21,
  PC_TABLET_OP_CLEAR_NOTIFY_MANY = 0x22,
  /* A request for one tablet of a server that holds several (a replicated
   * cluster's): str tablet u8 op body, answered as op is. ROUTED_READ
   * carries only the reads that run inline (pc_tablet_rpc_runs_inline). */
  PC_TABLET_OP_ROUTED_READ = 0x2E,
  PC_TABLET_OP_ROUTED = 0x2F,
};

/* The op's name for metrics ("get", "prewrite", ...), or NULL for none. */
const char *pc_tablet_op_name(uint8_t op);

/* Appends the envelope of a request of op for tablet to out; returns the op
 * to send it with (ROUTED or ROUTED_READ), 0 out of memory. */
uint8_t pc_tablet_wrap(pc_buf_t *out, const char *tablet, uint8_t op, const char *body,
                       size_t len);

/* The marker a replicated tablet's refusal carries when the server asked
 * does not lead it (replica/replica.h): PC_UNAVAILABLE "tablet T: server S
 * does not lead it (leader: L at host:port)". */
#define PC_TABLET_NOT_LEADER "(leader: "

#define PC_TABLET_LOCKS_MAX 10000u
#define PC_TABLET_NOTIFY_REPLY_MAX (4u << 20)

/* A half-open row range [start, end); end_len == 0 means no upper bound. */
typedef struct pc_row_range {
  const char *start;
  size_t start_len;
  const char *end;
  size_t end_len;
} pc_row_range_t;

/* 1 when row is inside r. */
int pc_row_range_contains(const pc_row_range_t *r, const char *row, size_t rlen);

typedef struct pc_tablet pc_tablet_t;

/* A tablet serving store (which it owns and closes) for range. ts_source
 * (the oracle) gives one-phase commits their commit_ts and GET_FRESH its
 * read_ts. Returns NULL on
 * allocation failure; release with pc_tablet_destroy. */
pc_tablet_t *pc_tablet_create(const char *name, pc_store_t *store, const pc_row_range_t *range,
                              pc_ts_source_fn ts_source, void *ts_ctx);

/* What the tablet does not take from a client (call before it serves):
 *   - a lock's lease (PREWRITE, HEARTBEAT) runs at most lock_ttl_ms past
 *     now (this machine's clock, or the oracle's when a start_ts is ahead of
 *     it by more than that; a start_ts the oracle has not issued yet is
 *     refused); 0: no cap;
 *   - a reply (SCAN, RAW_SCAN, SCAN_LOCKS) holds at most max_reply bytes
 *     (a scan past it is refused, a lock scan truncated); 0: their own caps.
 * Besides, whatever the limits: GC, OBSERVER and writes to the system table
 * need the system identity (net/rpc.h's roles; PC_DENIED for a data client;
 * OBSERVERS and GET_MANY are reads, open to both), and a
 * GC safe point beyond a fresh timestamp from ts_source is refused. */
void pc_tablet_set_limits(pc_tablet_t *t, uint32_t lock_ttl_ms, size_t max_reply);
void pc_tablet_destroy(pc_tablet_t *t);
uint64_t pc_tablet_ops(const pc_tablet_t *t);

/* Where a safe point is published so that tablets which missed a pass adopt
 * it when they start (a cluster's ZooKeeper: coord.h's gc/safe_point). A
 * tablet given one publishes the safe point of a GC frame it accepted (from
 * the system identity, at or below the oracle's timestamps) before it
 * deletes below it, and deletes nothing when publishing fails. So only a
 * pass the tablets authorised moves the published safe point: a client
 * never publishes it (docs/SECURITY.md). Call before the tablet serves. */
typedef pc_status_t (*pc_tablet_publish_fn)(void *ctx, uint64_t safe, pc_error_t *err);
void pc_tablet_set_gc_publish(pc_tablet_t *t, pc_tablet_publish_fn publish, void *ctx);

/* What garbage collection did on a tablet since it started (passes,
 * deleted), and the safe point below which it refuses reads. */
typedef struct pc_tablet_gc {
  uint64_t safe_point; /* the higher of its passes' and its store's (persisted
                        * by a pass before a restart, or adopted at start from
                        * the published one): reads below it are refused */
  uint64_t passes;
  pc_store_gc_stats_t deleted; /* added up over the passes (cells: examined) */
} pc_tablet_gc_t;
void pc_tablet_gc_stats(pc_tablet_t *t, pc_tablet_gc_t *out);

/* For pc_rpc_server_options_t.runs_inline: the reads a tablet serves on its
 * server's I/O thread (GET, GET_MANY, SCAN_NOTIFY: point reads and a scan
 * of the in-memory notification index, each bounded by its request). A read
 * that meets a one-phase commit it must wait for goes to a worker
 * (core/store_local.h's local_wait_onepc). Scans of rows, writes and
 * GET_FRESH (a call to the oracle) always go to a worker. */
int pc_tablet_rpc_runs_inline(uint8_t op);
/* The rpc.h handler serving a tablet (ctx is the pc_tablet_t *). */
pc_status_t pc_tablet_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                  pc_buf_t *reply, pc_error_t *err);

/* Where a remote store finds a tablet. */
typedef struct pc_tablet_addr {
  const char *name;
  const char *host; /* NULL: no live server holds it (yet) */
  uint16_t port;
  pc_row_range_t range;
  /* a Raft group: requests go in ROUTED envelopes, and a refusal naming
   * the leader, a server that cannot be reached and a tablet without a
   * known leader are tried again (elsewhere) within the call's deadline */
  int replicated;
} pc_tablet_addr_t;

/* A store whose operations go to the tablets (ranges must tile all rows,
 * sorted by start). Every call is bounded by timeout_ms; a call to a tablet
 * that no live server holds fails at once with PC_UNAVAILABLE, "tablet NAME
 * [start, end) has no live server". Returns NULL on error; release with
 * s->ops->close(s). */
pc_store_t *pc_remote_store_open(const pc_tablet_addr_t *tablets, size_t n,
                                 const pc_rpc_auth_t *auth, uint32_t timeout_ms, pc_error_t *err);

/* Sends tablet i's calls (i in the order of pc_remote_store_open's tablets)
 * to addr ("host:port") from now on, or, addr NULL, fails them at once: no
 * live server holds it. Calls already on their way finish where they went.
 * Thread-safe; a no-op when nothing changes. */
pc_status_t pc_remote_store_route(pc_store_t *s, size_t i, const char *addr, pc_error_t *err);

/* Bounds each attempt of a replicated tablet's point operation to ms (a
 * leader that stopped answering is left for the next one; see
 * store_remote.c); 0: one attempt takes the whole call. Set before the store
 * is shared. */
void pc_remote_store_set_attempt_ms(pc_store_t *s, uint32_t ms);

/* The address tablet i's calls go to now into out ("" none). */
void pc_remote_store_link_addr(pc_store_t *s, size_t i, char *out, size_t cap);

/* fn(ctx, i) is called (on a caller's thread, at most every 100 ms per
 * tablet) when tablet i's server could not be reached or refused a row as
 * misrouted, or it has none: it should read where the tablet is now and
 * call pc_remote_store_route, within the caller's deadline (base/deadline.h). Set before the store is
 * shared; ctx must outlive the store. */
void pc_remote_store_set_refresh(pc_store_t *s, void (*fn)(void *ctx, size_t tablet), void *ctx);

/* For `percolator status`: a tablet's name, the operations it served and
 * its garbage collection, asked with INFO over an rpc.h client of it. */
struct pc_rpc_client;
pc_status_t pc_tablet_remote_info(struct pc_rpc_client *rpc, uint32_t timeout_ms, pc_buf_t *name,
                                  uint64_t *ops, pc_tablet_gc_t *gc, pc_error_t *err);
/* The same of tablet on a replicated cluster's server (which holds several
 * and answers a request that names its tablet: the ROUTED envelope); NULL
 * tablet: a plain INFO, as pc_tablet_remote_info. Ask the tablet's leader:
 * a follower answers too, with its own counts. */
pc_status_t pc_tablet_remote_info_of(struct pc_rpc_client *rpc, const char *tablet,
                                     uint32_t timeout_ms, pc_buf_t *name, uint64_t *ops,
                                     pc_tablet_gc_t *gc, pc_error_t *err);

/* pc_db_open_config_create (core/db.h) on a configuration already parsed
 * (db_cluster.c): the daemons open clients of their own roles from a
 * configuration they build in memory. cfg is only read during the call. */
struct pc_config;
pc_db_t *pc_db_open_parsed_config(const struct pc_config *cfg, int create, pc_error_t *err);

/* Takes the cluster-wide lock `name` for this client's ZooKeeper session
 * (locks/<name>): *mine = 1 when it holds it (now or already), 0 when another
 * live client does. It is released when the client's session ends.
 * PC_UNAVAILABLE (or another error) when it cannot be asked; a client
 * without coordination (a served directory's) gets *mine = 1 (it is alone,
 * as far as it can tell). For work that one process at a time should do,
 * never for safety. */
pc_status_t pc_db_cluster_lock(pc_db_t *db, const char *name, uint32_t timeout_ms, int *mine,
                               pc_error_t *err);

/* The credentials a configuration gives this process, for its servers and
 * clients: the secrets (borrowed from cfg, which must outlive *out) and the
 * TLS certificates, loaded (errors name the key's file:line:column). Release
 * with pc_config_auth_release. */
pc_status_t pc_config_auth(const struct pc_config *cfg, pc_rpc_auth_t *out, pc_error_t *err);
void pc_config_auth_release(pc_rpc_auth_t *a);

/* An rpc.h client of host:port with cfg's credentials (pc_rpc_client_create). */
pc_rpc_client_t *pc_config_rpc_client(const struct pc_config *cfg, const char *host,
                                      uint16_t port, pc_error_t *err);

#endif
