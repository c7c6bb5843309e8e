/* buf.h — the growable byte buffer every codec of the project writes with,
 * the reader it reads back with (big-endian integers; str is a u32 length and
 * the bytes), and the one order of byte strings. Knows nothing of what the
 * bytes mean: the store's keys and records (core/keys.h), the rpc frames and
 * every room's wire bodies are built on it. */
#ifndef PC_BASE_BUF_H
#define PC_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A growable byte buffer. Appending functions return 0, or -1 when an
 * allocation fails (the buffer keeps what it had). {0} is an empty buffer;
 * PC_BUF_ON(array) starts in caller-owned storage (e.g. on the stack) and
 * moves to the heap only if it outgrows it; pc_buf_free frees only heap. */
typedef struct pc_buf {
  char *p;
  size_t len, cap;
  int heap; /* p was allocated here */
} pc_buf_t;

#define PC_BUF_ON(array) ((pc_buf_t){(array), 0, sizeof(array), 0})

void pc_buf_free(pc_buf_t *b);
int pc_buf_reserve(pc_buf_t *b, size_t extra);
int pc_buf_append(pc_buf_t *b, const void *data, size_t n);
int pc_buf_u8(pc_buf_t *b, uint8_t v);
int pc_buf_u32(pc_buf_t *b, uint32_t v);
int pc_buf_u64(pc_buf_t *b, uint64_t v);
/* u32 length followed by the bytes */
int pc_buf_str(pc_buf_t *b, const void *data, size_t n);

/* A reader over a record; sets ok = 0 on any overrun. */
typedef struct pc_rd {
  const char *p;
  size_t len, pos;
  int ok;
} pc_rd_t;

/* The next n bytes, or NULL (and ok = 0) when fewer are left. */
const unsigned char *pc_rd_take(pc_rd_t *r, size_t n);
uint8_t pc_rd_u8(pc_rd_t *r);
uint32_t pc_rd_u32(pc_rd_t *r);
uint64_t pc_rd_u64(pc_rd_t *r);
const char *pc_rd_str(pc_rd_t *r, size_t *n);

/* The big-endian u64 at p: one load and one bswap, not a loop over eight
 * bytes (every read of the store decodes timestamps). */
static inline uint64_t pc_be64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

/* Compares byte strings as unsigned bytes, a shorter prefix first: the order
 * of rows, columns and keys everywhere in the project. */
int pc_bytes_cmp(const char *a, size_t al, const char *b, size_t bl);

#endif
