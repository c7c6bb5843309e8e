/* keys.c — the byte layout of the store: order-preserving key encoding of
 * (key space, table, row, column, timestamp) tuples, their decoding for the raw
 * view, and the lock / commit-record / meta records kept under those keys. */
#include "core/keys.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define META_VERSION 1
#define WRITE_VERSION 1

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

static const unsigned char *rd_take(pc_rd_t *r, size_t n) {
  if (!r->ok || r->len - r->pos < n) {
    r->ok = 0;
    return NULL;
  }
  const unsigned char *p = (const unsigned char *)r->p + r->pos;
  r->pos += n;
  return p;
}

uint8_t pc_rd_u8(pc_rd_t *r) {
  const unsigned char *p = rd_take(r, 1);
  return p ? p[0] : 0;
}

uint32_t pc_rd_u32(pc_rd_t *r) {
  const unsigned char *p = rd_take(r, 4);
  if (!p) return 0;
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t pc_rd_u64(pc_rd_t *r) {
  const unsigned char *p = rd_take(r, 8);
  if (!p) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

const char *pc_rd_str(pc_rd_t *r, size_t *n) {
  uint32_t len = pc_rd_u32(r);
  const unsigned char *p = rd_take(r, len);
  *n = p ? len : 0;
  return (const char *)p;
}

/* ---- keys ---- */

int pc_key_escape(pc_buf_t *b, const char *s, size_t n) {
  if (pc_buf_reserve(b, 2 * n + 2) != 0) return -1;
  for (size_t i = 0; i < n; i++) {
    b->p[b->len++] = s[i];
    if (s[i] == '\0') b->p[b->len++] = (char)0xFF;
  }
  b->p[b->len++] = '\0';
  b->p[b->len++] = 0x01;
  b->p[b->len] = '\0';
  return 0;
}

static int append_ts(pc_buf_t *b, uint64_t ts) { return pc_buf_u64(b, ~ts); }

int pc_key_row(pc_buf_t *b, char space, const char *table, const char *row, size_t rlen) {
  if (pc_buf_u8(b, (uint8_t)space) != 0) return -1;
  if (table && pc_key_escape(b, table, strlen(table)) != 0) return -1;
  if (table && row && pc_key_escape(b, row, rlen) != 0) return -1;
  return 0;
}

int pc_key_cell(pc_buf_t *b, char space, const pc_cell_t *c) {
  if (pc_key_row(b, space, c->table, c->row, c->rlen) != 0) return -1;
  return pc_key_escape(b, c->col, c->clen);
}

int pc_key_cell_ts(pc_buf_t *b, char space, const pc_cell_t *c, uint64_t ts) {
  if (pc_key_cell(b, space, c) != 0) return -1;
  return append_ts(b, ts);
}

int pc_key_ack(pc_buf_t *b, const pc_cell_t *c, const char *observer) {
  if (pc_key_cell(b, PC_KS_ACK, c) != 0) return -1;
  return pc_key_escape(b, observer, strlen(observer));
}

uint64_t pc_row_hash(const char *table, const char *row, size_t rlen) {
  return XXH64(row, rlen, XXH64(table, strlen(table), 0));
}

uint32_t pc_notify_bucket(const char *table, const char *row, size_t rlen) {
  return (uint32_t)(pc_row_hash(table, row, rlen) >> 32) % PC_NOTIFY_BUCKETS;
}

int pc_key_notify(pc_buf_t *b, const pc_cell_t *c, uint64_t ts) {
  uint32_t bucket = pc_notify_bucket(c->table, c->row, c->rlen);
  unsigned char bb[2] = {(unsigned char)(bucket >> 8), (unsigned char)bucket};
  if (pc_buf_u8(b, PC_KS_NOTIFY) != 0 || pc_buf_append(b, bb, 2) != 0) return -1;
  if (pc_key_escape(b, c->table, strlen(c->table)) != 0) return -1;
  if (pc_key_escape(b, c->row, c->rlen) != 0) return -1;
  if (pc_key_escape(b, c->col, c->clen) != 0) return -1;
  return append_ts(b, ts);
}

/* Unescapes one string at *pos into out; -1 if malformed. */
static int unescape(const char *k, size_t n, size_t *pos, pc_buf_t *out) {
  out->len = 0;
  if (pc_buf_reserve(out, 0) != 0) return -1;
  out->p[0] = '\0';
  size_t i = *pos;
  while (i < n) {
    char ch = k[i];
    if (ch != '\0') {
      if (pc_buf_append(out, &ch, 1) != 0) return -1;
      i++;
      continue;
    }
    if (i + 1 >= n) return -1;
    unsigned char next = (unsigned char)k[i + 1];
    if (next == 0xFF) {
      if (pc_buf_append(out, "", 1) != 0) return -1;
      i += 2;
    } else if (next == 0x01) {
      *pos = i + 2;
      return 0;
    } else {
      return -1;
    }
  }
  return -1;
}

static int decode_ts(const char *k, size_t n, size_t *pos, uint64_t *ts) {
  if (n - *pos != 8) return -1;
  pc_rd_t r = {k + *pos, 8, 0, 1};
  *ts = ~pc_rd_u64(&r);
  *pos += 8;
  return 0;
}

int pc_key_decode(const char *k, size_t n, pc_key_decoded_t *d) {
  if (n < 1) return -1;
  size_t pos = 1;
  d->space = k[0];
  d->bucket = 0;
  d->ts = 0;
  if (d->space == PC_KS_NOTIFY) {
    if (n < 3) return -1;
    d->bucket = (uint32_t)(unsigned char)k[1] << 8 | (unsigned char)k[2];
    pos = 3;
  }
  if (unescape(k, n, &pos, &d->table) != 0) return -1;
  if (unescape(k, n, &pos, &d->row) != 0) return -1;
  if (unescape(k, n, &pos, &d->col) != 0) return -1;
  switch (d->space) {
    case PC_KS_META:
      return pos == n ? 0 : -1;
    case PC_KS_WRITE:
    case PC_KS_DATA:
    case PC_KS_NOTIFY:
      return decode_ts(k, n, &pos, &d->ts);
    case PC_KS_ACK:
      if (unescape(k, n, &pos, &d->observer) != 0) return -1;
      return pos == n ? 0 : -1;
    default:
      return -1;
  }
}

void pc_key_decoded_free(pc_key_decoded_t *d) {
  pc_buf_free(&d->table);
  pc_buf_free(&d->row);
  pc_buf_free(&d->col);
  pc_buf_free(&d->observer);
}

/* ---- records ---- */

void pc_lock_info_free(pc_lock_info_t *l) {
  pc_buf_free(&l->value);
  pc_buf_free(&l->ptable);
  pc_buf_free(&l->prow);
  pc_buf_free(&l->pcol);
  pc_buf_free(&l->ctable);
  pc_buf_free(&l->crow);
  pc_buf_free(&l->ccol);
}

int pc_lock_info_copy(pc_lock_info_t *dst, const pc_lock_info_t *src, const pc_cell_t *c) {
  memset(dst, 0, sizeof *dst);
  dst->start_ts = src->start_ts;
  dst->kind = src->kind;
  dst->ttl_ms = src->ttl_ms;
  dst->session = src->session;
  dst->observed = src->observed;
  dst->has_inline = src->has_inline;
  if (pc_buf_append(&dst->value, src->value.p, src->value.len) != 0 ||
      pc_buf_append(&dst->ptable, src->ptable.p, src->ptable.len) != 0 ||
      pc_buf_append(&dst->prow, src->prow.p, src->prow.len) != 0 ||
      pc_buf_append(&dst->pcol, src->pcol.p, src->pcol.len) != 0 ||
      pc_buf_append(&dst->ctable, c->table, strlen(c->table)) != 0 ||
      pc_buf_append(&dst->crow, c->row, c->rlen) != 0 ||
      pc_buf_append(&dst->ccol, c->col, c->clen) != 0) {
    pc_lock_info_free(dst);
    return -1;
  }
  return 0;
}

void pc_meta_free(pc_meta_t *m) {
  pc_lock_info_free(&m->lock);
  pc_buf_free(&m->head_buf);
}

static int encode_write_body(const pc_write_rec_t *w, pc_buf_t *out) {
  if (pc_buf_u8(out, (uint8_t)w->kind) || pc_buf_u64(out, w->start_ts) ||
      pc_buf_u64(out, w->commit_ts) || pc_buf_u8(out, (uint8_t)w->has_inline))
    return -1;
  if (w->has_inline == PC_VALUE_INLINE && pc_buf_str(out, w->value, w->vlen)) return -1;
  return 0;
}

static int decode_write_body(pc_rd_t *r, pc_write_rec_t *w) {
  uint8_t kind = pc_rd_u8(r);
  w->start_ts = pc_rd_u64(r);
  w->commit_ts = pc_rd_u64(r);
  w->has_inline = pc_rd_u8(r);
  w->value = NULL;
  w->vlen = 0;
  if (w->has_inline == PC_VALUE_INLINE) w->value = pc_rd_str(r, &w->vlen);
  if (kind > PC_WRITE_ROLLBACK || w->has_inline > PC_VALUE_IN_HEAD) return -1;
  w->kind = (pc_write_kind_t)kind;
  return r->ok ? 0 : -1;
}

int pc_write_encode(const pc_write_rec_t *w, pc_buf_t *out) {
  if (pc_buf_u8(out, WRITE_VERSION)) return -1;
  return encode_write_body(w, out);
}

int pc_write_decode(const char *p, size_t n, pc_write_rec_t *w) {
  pc_rd_t r = {p, n, 0, 1};
  if (pc_rd_u8(&r) != WRITE_VERSION) return -1;
  if (decode_write_body(&r, w) != 0) return -1;
  return r.pos == n ? 0 : -1;
}

int pc_meta_encode(const pc_meta_t *m, pc_buf_t *out) {
  uint8_t flags = (uint8_t)((m->has_lock ? 1 : 0) | (m->has_head ? 2 : 0) |
                            (m->has_head && m->head_one_row ? 4 : 0));
  if (pc_buf_u8(out, META_VERSION) || pc_buf_u8(out, flags) || pc_buf_u64(out, m->latest_any))
    return -1;
  if (m->has_lock) {
    const pc_lock_info_t *l = &m->lock;
    if (pc_buf_u64(out, l->start_ts) || pc_buf_u8(out, (uint8_t)l->kind) ||
        pc_buf_u32(out, l->ttl_ms) || pc_buf_u64(out, l->session) ||
        pc_buf_u8(out, (uint8_t)(l->observed != 0)) ||
        pc_buf_str(out, l->ptable.p, l->ptable.len) || pc_buf_str(out, l->prow.p, l->prow.len) ||
        pc_buf_str(out, l->pcol.p, l->pcol.len) ||
        pc_buf_u8(out, (uint8_t)(l->has_inline != 0)))
      return -1;
    if (l->has_inline && pc_buf_str(out, l->value.p, l->value.len)) return -1;
  }
  if (m->has_head && encode_write_body(&m->head, out)) return -1;
  return 0;
}

static int rd_buf(pc_rd_t *r, pc_buf_t *b) {
  size_t n;
  const char *s = pc_rd_str(r, &n);
  if (!r->ok) return -1;
  b->len = 0;
  return pc_buf_append(b, s, n);
}

int pc_meta_decode(const char *p, size_t n, pc_meta_t *m) {
  pc_rd_t r = {p, n, 0, 1};
  if (pc_rd_u8(&r) != META_VERSION) return -1;
  uint8_t flags = pc_rd_u8(&r);
  m->latest_any = pc_rd_u64(&r);
  m->has_lock = flags & 1;
  m->has_head = (flags & 2) != 0;
  m->head_one_row = (flags & 4) != 0;
  if (m->has_lock) {
    pc_lock_info_t *l = &m->lock;
    l->start_ts = pc_rd_u64(&r);
    uint8_t kind = pc_rd_u8(&r);
    l->ttl_ms = pc_rd_u32(&r);
    l->session = pc_rd_u64(&r);
    l->observed = pc_rd_u8(&r);
    if (kind > PC_WRITE_DELETE || rd_buf(&r, &l->ptable) || rd_buf(&r, &l->prow) ||
        rd_buf(&r, &l->pcol))
      return -1;
    l->kind = (pc_write_kind_t)kind;
    l->has_inline = pc_rd_u8(&r);
    l->value.len = 0;
    if (l->has_inline && rd_buf(&r, &l->value)) return -1;
  }
  if (m->has_head) {
    /* copy the head's body so head.value survives the caller's buffer */
    size_t start = r.pos;
    pc_rd_t probe = r;
    if (decode_write_body(&probe, &m->head) != 0) return -1;
    m->head_buf.len = 0;
    if (pc_buf_append(&m->head_buf, p + start, probe.pos - start)) return -1;
    pc_rd_t own = {m->head_buf.p, m->head_buf.len, 0, 1};
    if (decode_write_body(&own, &m->head) != 0) return -1;
    r.pos = probe.pos;
  }
  return r.ok && r.pos == n ? 0 : -1;
}

int pc_meta_peek(const char *p, size_t n, int *has_lock, uint64_t *lock_start, int *has_head,
                 pc_write_rec_t *head) {
  pc_rd_t r = {p, n, 0, 1};
  if (pc_rd_u8(&r) != META_VERSION) return -1;
  uint8_t flags = pc_rd_u8(&r);
  (void)pc_rd_u64(&r); /* latest_any */
  *has_lock = flags & 1;
  *has_head = (flags & 2) != 0;
  *lock_start = 0;
  if (*has_lock) {
    size_t len;
    *lock_start = pc_rd_u64(&r);
    (void)pc_rd_u8(&r);
    (void)pc_rd_u32(&r);
    (void)pc_rd_u64(&r);
    (void)pc_rd_u8(&r);
    for (int i = 0; i < 3; i++) (void)pc_rd_str(&r, &len);
    if (pc_rd_u8(&r)) (void)pc_rd_str(&r, &len);
  }
  if (*has_head && decode_write_body(&r, head) != 0) return -1;
  return r.ok ? 0 : -1;
}
