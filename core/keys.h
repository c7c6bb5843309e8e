/* keys.h — order-preserving encoding of internal cells into LevelDB keys and
 * the binary records stored under them.
 *
 * Every key starts with a one-byte key space, like a column family:
 *   'm' T R C             meta: the cell's lock (if any) and its newest commit
 *   'w' T R C ~ts         write(c, commit_ts) records, newest first: of every
 *                         commit but the head (in the meta record), and of
 *                         rollbacks
 *   'd' T R C ~ts         data(c, start_ts) for values too large to inline
 *   'n' B T R C ~ts       notify(c, ts) in hash bucket B (2 bytes, big-endian)
 *                         of (T, R); the value is one byte, PC_NOTIFY_*
 * T, R, C are byte strings escaped so that their concatenation sorts like
 * the tuple: 0x00 becomes 0x00 0xFF and each string ends with 0x00 0x01.
 * ~ts is the bitwise complement of the timestamp, big-endian, so the newest
 * version of a cell sorts first and "latest <= ts" is one seek.
 *
 * An observer's ack of a cell, ack(c, O), is an ordinary transactional cell
 * of c's row in a system column: 0xFF "ack" 0x00 O 0x00 C (pc_ack_column).
 */
#ifndef PC_CORE_KEYS_H
#define PC_CORE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "base/buf.h"

#define PC_KS_META 'm'
#define PC_KS_WRITE 'w'
#define PC_KS_DATA 'd'
#define PC_KS_NOTIFY 'n'
#define PC_KS_GC 'g' /* 'g' alone: the safe point of the last garbage collection */
/* 'o' NAME: an observer registered in this store (store_observers.c), the
 * value its record (pc_obs_record_encode) */
#define PC_KS_OBSERVER 'o'
/* The saved lock index: 'l' + a cell's meta key without its 'm', no value,
 * one for each cell whose meta record holds a lock, and 'L' alone marking
 * them complete. Written only by a clean close and removed by the next open
 * (store_raw.c); while the store is open the index lives in memory. */
#define PC_KS_LOCK 'l'
#define PC_KEY_LOCK_INDEX_SAVED "L"
/* A fence: the one-byte key right after every meta key, always present
 * (written at open, never deleted). LevelDB walks from a seek or a step to
 * the next live key over every deleted entry in between, without a bound;
 * meta keys are never deleted, but the notifications that follow them are
 * all the time, so a scan that reaches the end of the meta key space (the
 * last table's last rows) would otherwise walk over every notification
 * deleted since the last compaction. It is also the end of the meta key
 * space as local_range_keys computes it. */
#define PC_KEY_META_END "n"

#define PC_NOTIFY_BUCKETS 1024u
/* The value of a notify key: which notifications it holds. One commit of a
 * cell can write both (an observed put that the transaction also notified
 * weakly); they then share the key. */
#define PC_NOTIFY_STRONG 0
#define PC_NOTIFY_WEAK 1
#define PC_NOTIFY_BOTH 2

/* System columns begin with this byte; an ack column is
 * PC_ACK_PREFIX (5 bytes: 0xFF "ack" 0x00) observer 0x00 column. */
#define PC_SYSTEM_BYTE 0xFF
#define PC_ACK_PREFIX "\xff" "ack"
#define PC_ACK_PREFIX_LEN 5 /* with its 0x00 */
/* The longest column the store holds: a user column's ack column. */
#define PC_MAX_STORED_COLUMN (PC_MAX_COLUMN + PC_ACK_PREFIX_LEN + 64 + 1)
/* Values up to this size live inside the lock and the commit record. */
#define PC_INLINE_MAX 4096u

/* A reference to a user cell; table is NUL-terminated. */
typedef struct pc_cell {
  const char *table;
  const char *row;
  size_t rlen;
  const char *col;
  size_t clen;
} pc_cell_t;

/* "table/row/col" for messages, written into buf (cap bytes) and returned:
 * the row and the column each cut to 64 bytes ("..." follows a cut one),
 * bytes outside printable ASCII shown as '?'. */
const char *pc_cell_name(const char *table, const char *row, size_t rlen, const char *col,
                         size_t clen, char *buf, size_t cap);
static inline const char *pc_cell_str(const pc_cell_t *c, char *buf, size_t cap) {
  return pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, buf, cap);
}

/* Appends the escaped string to b. */
int pc_key_escape(pc_buf_t *b, const char *s, size_t n);
/* space T R C */
int pc_key_cell(pc_buf_t *b, char space, const pc_cell_t *c);
/* space T R C ~ts */
int pc_key_cell_ts(pc_buf_t *b, char space, const pc_cell_t *c, uint64_t ts);
/* space T R (the prefix of every cell of a row; with a NULL row, of the table) */
int pc_key_row(pc_buf_t *b, char space, const char *table, const char *row, size_t rlen);
/* 'n' B T R C ~ts */
int pc_key_notify(pc_buf_t *b, const pc_cell_t *c, uint64_t ts);
/* 'n' B: the first key of bucket B (B == PC_NOTIFY_BUCKETS: after the last). */
int pc_key_notify_bucket(pc_buf_t *b, uint32_t bucket);
/* Splits an ack column (PC_ACK_PREFIX observer 0x00 column): 0 and the
 * observer's name (obs, olen, no NUL inside) and the observed column; -1 when
 * col is not one. */
int pc_ack_column_split(const char *col, size_t clen, const char **obs, size_t *olen,
                        const char **ucol, size_t *uclen);
/* The notify bucket of a row. */
uint32_t pc_notify_bucket(const char *table, const char *row, size_t rlen);
/* The row-latch stripe hash of a row. */
uint64_t pc_row_hash(const char *table, const char *row, size_t rlen);

/* A decoded key. Strings are unescaped into storage owned by the struct;
 * release with pc_key_decoded_free. */
typedef struct pc_key_decoded {
  char space;
  uint32_t bucket;
  pc_buf_t table; /* NUL-terminated */
  pc_buf_t row, col;
  uint64_t ts;
} pc_key_decoded_t;

/* 0 on success, -1 if the key is malformed. */
int pc_key_decode(const char *key, size_t n, pc_key_decoded_t *out);
void pc_key_decoded_free(pc_key_decoded_t *d);

/* ---- records ---- */

/* A lock as stored in the meta record (and as returned to resolvers). */
typedef struct pc_lock_info {
  uint64_t start_ts;
  pc_write_kind_t kind; /* PUT, DELETE or NOTIFY (a weak notification, no write) */
  uint32_t ttl_ms;
  uint64_t session;
  int observed;         /* the store had a strong observer of the column at prewrite */
  int weak;             /* the commit writes a weak notification (always with NOTIFY) */
  int has_inline;       /* value stored in the lock */
  pc_buf_t value;       /* inline value (if has_inline) */
  pc_buf_t ptable;      /* primary cell; ptable NUL-terminated */
  pc_buf_t prow, pcol;
  /* the cell the lock sits on, set by the store when it returns PC_LOCKED */
  pc_buf_t ctable, crow, ccol;
} pc_lock_info_t;

/* Where a put's value is, in its commit record. */
#define PC_VALUE_IN_DATA 0 /* in data(c, start_ts): values over PC_INLINE_MAX */
#define PC_VALUE_INLINE 1  /* in the record itself */
#define PC_VALUE_IN_HEAD 2 /* in the cell's meta record: this is the newest commit (format 3
                              only: format 4 writes no record of the head; when a newer
                              commit replaces it, the record is written with its value) */

/* A commit record (write cell). */
typedef struct pc_write_rec {
  pc_write_kind_t kind;
  uint64_t start_ts;
  uint64_t commit_ts;
  int has_inline; /* PC_VALUE_* */
  const char *value; /* points into the record's bytes */
  size_t vlen;
  /* only of a meta record's head: this commit is the cell's first put or
   * delete, so no older put or delete record exists (not in commit records) */
  int first;
} pc_write_rec_t;

/* The meta record of a cell: lock, newest put/delete commit, newest write of any kind. */
typedef struct pc_meta {
  int has_lock;
  pc_lock_info_t lock;
  int has_head;
  pc_write_rec_t head; /* head.value points into head_buf */
  pc_buf_t head_buf;
  uint64_t latest_any; /* newest write record ts, rollbacks included */
  int had_lock; /* has_lock as decoded: whether the lock index holds the cell */
} pc_meta_t;

void pc_lock_info_free(pc_lock_info_t *l);
/* Deep copy of src (as stored) into dst, recording cell c as where it sits;
 * -1 on allocation failure. */
int pc_lock_info_copy(pc_lock_info_t *dst, const pc_lock_info_t *src, const pc_cell_t *c);
void pc_meta_free(pc_meta_t *m);
int pc_meta_encode(const pc_meta_t *m, pc_buf_t *out);
/* 0 ok, -1 malformed */
int pc_meta_decode(const char *p, size_t n, pc_meta_t *m);
/* Decodes only what a read needs, copying nothing: head->value points into p.
 * 0 ok, -1 malformed. */
int pc_meta_peek(const char *p, size_t n, int *has_lock, uint64_t *lock_start, int *has_head,
                 pc_write_rec_t *head);
int pc_write_encode(const pc_write_rec_t *w, pc_buf_t *out);
int pc_write_decode(const char *p, size_t n, pc_write_rec_t *w);

/* An observer's registration record: the value of the def cell of row
 * "observer/" NAME in the system table, and of a store's 'o' NAME key.
 *   u8 1 (format), u8 kind (0 strong, 1 weak), str table, str column */
typedef struct pc_obs_record {
  int kind;
  char table[PC_MAX_TABLE + 1];
  const char *col; /* into the decoded bytes */
  size_t clen;
} pc_obs_record_t;
int pc_obs_record_encode(pc_buf_t *b, int kind, const char *table, const char *col, size_t clen);
/* 0, or -1 when the bytes are not a record of a valid table, a column of
 * 1..PC_MAX_COLUMN bytes that is not a system column, and a kind. */
int pc_obs_record_decode(const char *v, size_t n, pc_obs_record_t *rec);
/* Whether name (n bytes) is an observer's name: 1..64 bytes of [A-Za-z0-9_.-]. */
int pc_obs_name_ok(const char *name, size_t n);

#endif
