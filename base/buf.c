/* buf.c — the growable byte buffer and the reader of base/buf.h: what every
 * codec of the project (store records, rpc frames, wire bodies) writes and
 * reads bytes with. */
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

void pc_buf_free(pc_buf_t *b) {
  if (b->heap) free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
  b->heap = 0;
}

int pc_buf_reserve(pc_buf_t *b, size_t extra) {
  if (b->p && b->cap > b->len && b->cap - b->len >= extra + 1) return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap - b->len < extra + 1) cap *= 2;
  char *p;
  if (b->heap) {
    p = realloc(b->p, cap);
  } else { /* first allocation, or leaving caller-owned storage */
    p = malloc(cap);
    if (p && b->len) memcpy(p, b->p, b->len);
  }
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  b->heap = 1;
  return 0;
}

int pc_buf_append(pc_buf_t *b, const void *data, size_t n) {
  if (pc_buf_reserve(b, n) != 0) return -1;
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0'; /* always NUL-terminated for string users */
  return 0;
}

int pc_buf_u8(pc_buf_t *b, uint8_t v) { return pc_buf_append(b, &v, 1); }

int pc_buf_u32(pc_buf_t *b, uint32_t v) {
  unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 8), (unsigned char)v};
  return pc_buf_append(b, x, 4);
}

int pc_buf_u64(pc_buf_t *b, uint64_t v) {
  unsigned char x[8];
  for (int i = 0; i < 8; i++) x[i] = (unsigned char)(v >> (56 - 8 * i));
  return pc_buf_append(b, x, 8);
}

int pc_buf_str(pc_buf_t *b, const void *data, size_t n) {
  if (n > UINT32_MAX) return -1;
  if (pc_buf_u32(b, (uint32_t)n) != 0) return -1;
  return pc_buf_append(b, data, n);
}

const unsigned char *pc_rd_take(pc_rd_t *r, size_t n) {
  if (!r->ok || r->len - r->pos < n) {
    r->ok = 0;
    return NULL;
  }
  const unsigned char *p = (const unsigned char *)r->p + r->pos;
  r->pos += n;
  return p;
}

uint8_t pc_rd_u8(pc_rd_t *r) {
  const unsigned char *p = pc_rd_take(r, 1);
  return p ? p[0] : 0;
}

uint32_t pc_rd_u32(pc_rd_t *r) {
  const unsigned char *p = pc_rd_take(r, 4);
  if (!p) return 0;
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t pc_rd_u64(pc_rd_t *r) {
  const unsigned char *p = pc_rd_take(r, 8);
  return p ? pc_be64(p) : 0;
}

const char *pc_rd_str(pc_rd_t *r, size_t *n) {
  uint32_t len = pc_rd_u32(r);
  const unsigned char *p = pc_rd_take(r, len);
  *n = p ? len : 0;
  return (const char *)p;
}

int pc_bytes_cmp(const char *a, size_t al, const char *b, size_t bl) {
  size_t n = al < bl ? al : bl;
  int c = n ? memcmp(a, b, n) : 0;
  if (c) return c;
  return al < bl ? -1 : al > bl;
}
