/* tablet_wire.h — the codecs of the tablet protocol (its ops and body
 * layouts are in tablet.h), shared by the tablet server (tablet.c) and the
 * remote store (store_remote.c): the pieces (cells, mutations, locks, raw
 * cells, notifications, optional strings), read from a pc_rd_t, and one
 * encoder and one decoder of each op's whole request body. Decoded strings
 * either point into the body or are copies owned by an arena, as each
 * decoder says; arrays of cells and mutations are owned by the arena. */
#ifndef PC_TABLET_TABLET_WIRE_H
#define PC_TABLET_TABLET_WIRE_H

#include "core/store.h"

/* Owns NUL-terminated copies of strings decoded from a body, and the arrays
 * that hold them: carved from blocks that grow from under a kilobyte to 64 KiB,
 * so decoding a request costs a few allocations however many cells it has.
 * Starts zeroed ({0}); everything goes at once in pc_arena_free. */
typedef struct pc_arena_block pc_arena_block_t;
typedef struct pc_arena {
  pc_arena_block_t *head; /* the block being carved, then older ones */
  size_t used;            /* bytes of head's space taken */
  size_t size;            /* bytes of head's space; 0: no block yet */
} pc_arena_t;

/* A copy of p[0..n) plus a NUL, owned by the arena; NULL on allocation failure. */
char *pc_arena_dup(pc_arena_t *a, const char *p, size_t n);
/* n zeroed items of size bytes, aligned for any type, owned by the arena; NULL
 * on allocation failure or overflow. */
void *pc_arena_calloc(pc_arena_t *a, size_t n, size_t size);
/* Frees everything the arena owns; it is empty and usable again after. */
void pc_arena_free(pc_arena_t *a);

int pc_wire_put_cell(pc_buf_t *b, const pc_cell_t *c);
/* Decodes a cell whose strings are copied into a; -1 on malformed input. */
int pc_wire_get_cell(pc_rd_t *r, pc_arena_t *a, pc_cell_t *c);

int pc_wire_put_mutation(pc_buf_t *b, const pc_mutation_t *m);
int pc_wire_get_mutation(pc_rd_t *r, pc_arena_t *a, pc_mutation_t *m);

int pc_wire_put_lock(pc_buf_t *b, const pc_lock_info_t *l);
/* Decodes into l, which it initialises (its buffers are its own; release
 * with pc_lock_info_free). On -1, l holds nothing to release. */
int pc_wire_get_lock(pc_rd_t *r, pc_lock_info_t *l);

int pc_wire_put_raw(pc_buf_t *b, const pc_raw_cell_t *c);
/* Decodes a raw cell whose strings point into the body or into a. */
int pc_wire_get_raw(pc_rd_t *r, pc_arena_t *a, pc_raw_cell_t *c);

/* A notification: cell u64 ts u8 weak (the bucket is the cell's row's). */
int pc_wire_put_notification(pc_buf_t *b, const pc_notification_t *n);
/* Decodes a notification whose strings are copied into a; -1 on malformed input. */
int pc_wire_get_notification(pc_rd_t *r, pc_arena_t *a, pc_notification_t *n);

/* An optional string: u8 present, str. */
int pc_wire_put_opt(pc_buf_t *b, const char *p, size_t n);
/* *p = NULL when absent; strings copied into a (NUL-terminated). */
int pc_wire_get_opt(pc_rd_t *r, pc_arena_t *a, const char **p, size_t *n);

/* ---- whole requests --------------------------------------------------------
 * Each request of tablet.h has a struct, an encoder (nonzero when out of
 * memory) and a decoder. A decoder reads the whole body: PC_INVALID, "malformed
 * OP request body: FIELD", for a short, long or out-of-range field, a count
 * the body cannot hold, or bytes after the last field; PC_NOMEM when the arena
 * cannot grow. Decoded cells' strings are NUL-terminated copies in the arena;
 * values, observer lists and rows of raw scans point into the body, which
 * must outlive the request. What a decoder checks is the layout and the
 * bounds of store.h; what depends on the tablet (its rows, the caller's
 * identity, its clock) is the handler's. */

/* GET (cell u64 read_ts) and GET_FRESH (cell; read_ts unused): op says which. */
typedef struct pc_tablet_get_req {
  pc_cell_t cell;
  uint64_t read_ts;
} pc_tablet_get_req_t;
int pc_tablet_encode_get(pc_buf_t *b, uint8_t op, const pc_tablet_get_req_t *q);
pc_status_t pc_tablet_decode_get(const char *body, size_t len, uint8_t op, pc_arena_t *a,
                                 pc_tablet_get_req_t *q, pc_error_t *err);

/* GET_MANY: u64 read_ts u32 n n*cell (n may be 0). */
typedef struct pc_tablet_get_many_req {
  uint64_t read_ts;
  const pc_cell_t *cells;
  size_t n;
} pc_tablet_get_many_req_t;
int pc_tablet_encode_get_many(pc_buf_t *b, const pc_tablet_get_many_req_t *q);
pc_status_t pc_tablet_decode_get_many(const char *body, size_t len, pc_arena_t *a,
                                      pc_tablet_get_many_req_t *q, pc_error_t *err);

/* PREWRITE (spec: cell primary u64 start u32 ttl_ms u64 session; u32 n
 * n*mutation) and ONE_PHASE (u64 start_ts u32 n n*mutation [clear]): op says
 * which. n >= 1. A clear is cell u64 below str observers (each name
 * NUL-terminated, so a non-empty list ends in a NUL). */
typedef struct pc_tablet_write_req {
  pc_lock_spec_t spec;   /* PREWRITE */
  uint64_t start_ts;     /* ONE_PHASE (PREWRITE's is spec.start_ts) */
  const pc_mutation_t *muts;
  size_t n;
  int has_clear;         /* ONE_PHASE: clear's cell, below and observers follow */
  pc_notify_clear_t clear;
} pc_tablet_write_req_t;
int pc_tablet_encode_write(pc_buf_t *b, uint8_t op, const pc_tablet_write_req_t *q);
pc_status_t pc_tablet_decode_write(const char *body, size_t len, uint8_t op, pc_arena_t *a,
                                   pc_tablet_write_req_t *q, pc_error_t *err);

/* COMMIT (u64 start u64 commit u32 n n*cell) and ROLLBACK (u64 start u32 n
 * n*cell; commit_ts unused): op says which. n >= 1. */
typedef struct pc_tablet_cells_req {
  uint64_t start_ts, commit_ts;
  const pc_cell_t *cells;
  size_t n;
} pc_tablet_cells_req_t;
int pc_tablet_encode_cells(pc_buf_t *b, uint8_t op, const pc_tablet_cells_req_t *q);
pc_status_t pc_tablet_decode_cells(const char *body, size_t len, uint8_t op, pc_arena_t *a,
                                   pc_tablet_cells_req_t *q, pc_error_t *err);

/* CHECK_TXN: cell u64 start u64 now u8 dead (any nonzero byte is dead). */
typedef struct pc_tablet_check_txn_req {
  pc_cell_t primary;
  uint64_t start_ts, now_ts;
  int owner_dead;
} pc_tablet_check_txn_req_t;
int pc_tablet_encode_check_txn(pc_buf_t *b, const pc_tablet_check_txn_req_t *q);
pc_status_t pc_tablet_decode_check_txn(const char *body, size_t len, pc_arena_t *a,
                                       pc_tablet_check_txn_req_t *q, pc_error_t *err);

/* SCAN: opt table, opt start (both present), opt start_col, opt end, u64
 * read_ts, u32 limit (1..PC_STORE_SCAN_LIMIT_MAX); the table is a valid
 * name. Strings are NUL-terminated copies in the arena; NULL when absent. */
typedef struct pc_tablet_scan_req {
  const char *table;
  const char *start, *start_col, *end;
  size_t start_len, start_col_len, end_len;
  uint64_t read_ts;
  uint32_t limit;
} pc_tablet_scan_req_t;
int pc_tablet_encode_scan(pc_buf_t *b, const pc_tablet_scan_req_t *q);
pc_status_t pc_tablet_decode_scan(const char *body, size_t len, pc_arena_t *a,
                                  pc_tablet_scan_req_t *q, pc_error_t *err);

/* RAW_SCAN: opt table (a valid name when present), opt start, opt end;
 * copies in the arena, NULL when absent. */
typedef struct pc_tablet_raw_scan_req {
  const char *table, *start, *end;
  size_t start_len, end_len;
} pc_tablet_raw_scan_req_t;
int pc_tablet_encode_raw_scan(pc_buf_t *b, const pc_tablet_raw_scan_req_t *q);
pc_status_t pc_tablet_decode_raw_scan(const char *body, size_t len, pc_arena_t *a,
                                      pc_tablet_raw_scan_req_t *q, pc_error_t *err);

/* HEARTBEAT: cell u64 start u32 ttl_ms. */
typedef struct pc_tablet_heartbeat_req {
  pc_cell_t primary;
  uint64_t start_ts;
  uint32_t ttl_ms;
} pc_tablet_heartbeat_req_t;
int pc_tablet_encode_heartbeat(pc_buf_t *b, const pc_tablet_heartbeat_req_t *q);
pc_status_t pc_tablet_decode_heartbeat(const char *body, size_t len, pc_arena_t *a,
                                       pc_tablet_heartbeat_req_t *q, pc_error_t *err);

/* SCAN_LOCKS: u64 below. */
int pc_tablet_encode_scan_locks(pc_buf_t *b, uint64_t below);
pc_status_t pc_tablet_decode_scan_locks(const char *body, size_t len, uint64_t *below,
                                        pc_error_t *err);

/* GC: u64 safe_point u32 rate. */
typedef struct pc_tablet_gc_req {
  uint64_t safe_point;
  uint32_t rate;
} pc_tablet_gc_req_t;
int pc_tablet_encode_gc(pc_buf_t *b, const pc_tablet_gc_req_t *q);
pc_status_t pc_tablet_decode_gc(const char *body, size_t len, pc_tablet_gc_req_t *q,
                                pc_error_t *err);

/* SCAN_NOTIFY: u32 lo u32 hi u8 has_after [notification] u32 limit, with
 * lo < hi <= PC_NOTIFY_BUCKETS and 1 <= limit <= PC_STORE_SCAN_LIMIT_MAX. */
typedef struct pc_tablet_scan_notify_req {
  uint32_t lo, hi;
  int has_after;
  pc_notification_t after;
  uint32_t limit;
} pc_tablet_scan_notify_req_t;
int pc_tablet_encode_scan_notify(pc_buf_t *b, const pc_tablet_scan_notify_req_t *q);
pc_status_t pc_tablet_decode_scan_notify(const char *body, size_t len, pc_arena_t *a,
                                         pc_tablet_scan_notify_req_t *q, pc_error_t *err);

/* CLEAR_NOTIFY: the request is store.h's pc_notify_clear_t (cell u64 below
 * str observers); the decoder leaves done and missing empty. */
int pc_tablet_encode_clear_notify(pc_buf_t *b, const pc_notify_clear_t *q);
pc_status_t pc_tablet_decode_clear_notify(const char *body, size_t len, pc_arena_t *a,
                                          pc_notify_clear_t *q, pc_error_t *err);

/* CLEAR_NOTIFY_MANY: u32 n, then n clears as CLEAR_NOTIFY's (1 .. the
 * most cells a request may name); answered by u8 done str missing for each,
 * in the request's order. The decoder allocates *q in a. */
int pc_tablet_encode_clear_notify_many(pc_buf_t *b, const pc_notify_clear_t *q, size_t n);
pc_status_t pc_tablet_decode_clear_notify_many(const char *body, size_t len, pc_arena_t *a,
                                               pc_notify_clear_t **q, size_t *n,
                                               pc_error_t *err);

/* OBSERVER: u8 add str name [str record] (the record, keys.h's
 * pc_obs_record_t, only when adding). The decoder checks the name and the
 * record; the name and the table are NUL-terminated copies in the arena, the
 * column points into the body; removing leaves table and col NULL. */
typedef struct pc_tablet_observer_req {
  int add;
  pc_store_observer_t observer;
} pc_tablet_observer_req_t;
int pc_tablet_encode_observer(pc_buf_t *b, const pc_tablet_observer_req_t *q);
pc_status_t pc_tablet_decode_observer(const char *body, size_t len, pc_arena_t *a,
                                      pc_tablet_observer_req_t *q, pc_error_t *err);

/* OBSERVERS and INFO take an empty body; what names the op in the error. */
pc_status_t pc_tablet_decode_empty(const char *body, size_t len, const char *what,
                                   pc_error_t *err);

#endif
