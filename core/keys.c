/* keys.c — the byte layout of the store: order-preserving key encoding of
 * (key space, table, row, column, timestamp) tuples, their decoding for the raw
 * view, and the lock / commit-record / meta records kept under those keys. */
#include "core/keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define WRITE_VERSION 1

/* ---- keys ---- */

static int has_zero64(uint64_t w) {
  return ((w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull) != 0;
}

static int has_zero32(uint32_t w) { return ((w - 0x01010101u) & ~w & 0x80808080u) != 0; }

/* Writes the escaped s at dst (room for 2n + 2 bytes); returns the end.
 * Strings without 0x00 (every table name, most rows and columns) are checked
 * and copied a word at a time, the tail as one overlapping word; a string
 * with one goes a byte at a time. */
static char *escape_to(char *dst, const char *s, size_t n) {
  int plain = 1;
  if (n >= 8) {
    uint64_t w;
    for (size_t i = 0; i + 8 <= n; i += 8) {
      memcpy(&w, s + i, 8);
      if (has_zero64(w)) {
        plain = 0;
        break;
      }
      memcpy(dst + i, &w, 8);
    }
    if (plain) {
      memcpy(&w, s + n - 8, 8);
      plain = !has_zero64(w);
      memcpy(dst + n - 8, &w, 8);
    }
  } else if (n >= 4) {
    uint32_t x, y;
    memcpy(&x, s, 4);
    memcpy(&y, s + n - 4, 4);
    plain = !has_zero32(x) && !has_zero32(y);
    memcpy(dst, &x, 4);
    memcpy(dst + n - 4, &y, 4);
  } else {
    for (size_t i = 0; i < n; i++) {
      dst[i] = s[i];
      if (s[i] == '\0') plain = 0;
    }
  }
  if (plain) {
    dst += n;
  } else { /* start again: what was copied lies within the 2n + 2 bytes */
    for (size_t i = 0; i < n; i++) {
      *dst++ = s[i];
      if (s[i] == '\0') *dst++ = (char)0xFF;
    }
  }
  *dst++ = '\0';
  *dst++ = 0x01;
  return dst;
}

int pc_key_escape(pc_buf_t *b, const char *s, size_t n) {
  if (pc_buf_reserve(b, 2 * n + 2) != 0) return -1;
  b->len = (size_t)(escape_to(b->p + b->len, s, n) - b->p);
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
  /* the hottest encoder (every read and write): one reservation, no re-checks */
  size_t tlen = strlen(c->table);
  size_t need = 1 + 2 * (tlen + c->rlen + c->clen) + 6;
  if ((!b->p || b->cap - b->len < need + 1) && pc_buf_reserve(b, need) != 0) return -1;
  char *d = b->p + b->len;
  *d++ = space;
  d = escape_to(d, c->table, tlen);
  d = escape_to(d, c->row, c->rlen);
  d = escape_to(d, c->col, c->clen);
  b->len = (size_t)(d - b->p);
  b->p[b->len] = '\0';
  return 0;
}

int pc_key_cell_ts(pc_buf_t *b, char space, const pc_cell_t *c, uint64_t ts) {
  if (pc_key_cell(b, space, c) != 0) return -1;
  return append_ts(b, ts);
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

int pc_key_notify_bucket(pc_buf_t *b, uint32_t bucket) {
  unsigned char bb[3] = {PC_KS_NOTIFY, (unsigned char)(bucket >> 8), (unsigned char)bucket};
  return pc_buf_append(b, bb, 3);
}

int pc_ack_column_split(const char *col, size_t clen, const char **obs, size_t *olen,
                        const char **ucol, size_t *uclen) {
  if (clen < PC_ACK_PREFIX_LEN || memcmp(col, PC_ACK_PREFIX, PC_ACK_PREFIX_LEN) != 0) return -1;
  const char *o = col + PC_ACK_PREFIX_LEN, *end = col + clen;
  const char *nul = memchr(o, '\0', (size_t)(end - o));
  if (!nul || nul == o || nul + 1 == end) return -1;
  *obs = o;
  *olen = (size_t)(nul - o);
  *ucol = nul + 1;
  *uclen = (size_t)(end - nul - 1);
  return 0;
}

/* Unescapes one string at *pos into out; -1 if malformed. */
static int unescape(const char *k, size_t n, size_t *pos, pc_buf_t *out) {
  out->len = 0;
  if (pc_buf_reserve(out, 0) != 0) return -1;
  out->p[0] = '\0';
  size_t i = *pos;
  while (i < n) {
    const char *z = memchr(k + i, '\0', n - i); /* the bytes up to the next 0x00 as they are */
    size_t run = z ? (size_t)(z - (k + i)) : n - i;
    if (run) {
      if (pc_buf_append(out, k + i, run) != 0) return -1;
      i += run;
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
    default:
      return -1;
  }
}

void pc_key_decoded_free(pc_key_decoded_t *d) {
  pc_buf_free(&d->table);
  pc_buf_free(&d->row);
  pc_buf_free(&d->col);
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
  dst->weak = src->weak;
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
  w->first = 0; /* a head's flag, kept in the meta record */
  if (w->has_inline == PC_VALUE_INLINE) w->value = pc_rd_str(r, &w->vlen);
  if (kind > PC_WRITE_NOTIFY || w->has_inline > PC_VALUE_IN_HEAD) return -1;
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

/* Commit records ('w'): u8 1, u8 kind (put, delete, rollback, or notify: a
 * weak notification's lock that was its transaction's primary, no value),
 * u64 start_ts, u64 commit_ts, u8 value place, [u32 length + the value].
 *
 * Meta records:
 *   byte 0     0x40 | flags: 1 lock, 2 head, 4 the head is the cell's first
 *              put or delete (format 4; only with 2), 8 latest_any follows,
 *              16 the head's start_ts follows whole
 *   [u64 latest_any]            flag 8; else the head's commit_ts (0 without head)
 *   [lock]                      flag 1: u64 start_ts, u8 kind (0 put, 1 delete,
 *                               3 notify), u32 ttl_ms, u64 session, u8 flags
 *                               (1 observed: the column had a strong observer
 *                               at prewrite, so the commit writes a strong
 *                               notification; 2 weak: the commit writes a
 *                               weak notification), the primary's table,
 *                               row and column (u32 length + bytes each), u8
 *                               inline, [u32 length + the value]. Records of
 *                               before weak notifications had 0 or 1 in the
 *                               flags byte and decode the same.
 *   [head]                      flag 2: u8 kind | value place << 2, u64 commit_ts,
 *                               then u64 start_ts (flag 16) or varint
 *                               commit_ts - start_ts, then varint length and
 *                               the value if it is inline
 * A cell at rest has no lock and its latest write is its head, so its record
 * is 11-14 bytes of header and the value. Every read Gets this record from
 * LevelDB, and the bytes it carries beside the value are what a
 * transactional read costs over a raw one there. */
#define META_V2 0x40u
#define MF_LOCK 1u
#define MF_HEAD 2u
#define MF_FIRST 4u /* with MF_HEAD only: the head is the cell's first put or delete */
#define MF_LATEST 8u
#define MF_START 16u

static int buf_varint(pc_buf_t *b, uint64_t v) {
  unsigned char x[10];
  size_t n = 0;
  while (v >= 0x80) {
    x[n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  x[n++] = (unsigned char)v;
  return pc_buf_append(b, x, n);
}

/* Decodes the varint at q (before end) into *v; returns the byte after it,
 * or NULL when it runs past end or over ten bytes. */
static const unsigned char *varint_at(const unsigned char *q, const unsigned char *end,
                                      uint64_t *v) {
  *v = 0;
  for (unsigned shift = 0; q < end && shift < 64; shift += 7) {
    *v |= (uint64_t)(*q & 0x7F) << shift;
    if (!(*q++ & 0x80)) return q;
  }
  return NULL;
}

static uint64_t rd_varint(pc_rd_t *r) {
  const unsigned char *start = (const unsigned char *)r->p;
  uint64_t v;
  const unsigned char *q = r->ok ? varint_at(start + r->pos, start + r->len, &v) : NULL;
  if (!q) {
    r->ok = 0;
    return 0;
  }
  r->pos = (size_t)(q - start);
  return v;
}

static int rd_buf(pc_rd_t *r, pc_buf_t *b) {
  size_t n;
  const char *s = pc_rd_str(r, &n);
  if (!r->ok) return -1;
  b->len = 0;
  return pc_buf_append(b, s, n);
}

#define LF_OBSERVED 1u
#define LF_WEAK 2u

static int encode_lock(const pc_lock_info_t *l, pc_buf_t *out) {
  if (pc_buf_u64(out, l->start_ts) || pc_buf_u8(out, (uint8_t)l->kind) ||
      pc_buf_u32(out, l->ttl_ms) || pc_buf_u64(out, l->session) ||
      pc_buf_u8(out, (uint8_t)((l->observed ? LF_OBSERVED : 0u) | (l->weak ? LF_WEAK : 0u))) ||
      pc_buf_str(out, l->ptable.p, l->ptable.len) || pc_buf_str(out, l->prow.p, l->prow.len) ||
      pc_buf_str(out, l->pcol.p, l->pcol.len) || pc_buf_u8(out, (uint8_t)(l->has_inline != 0)))
    return -1;
  if (l->has_inline && pc_buf_str(out, l->value.p, l->value.len)) return -1;
  return 0;
}

/* Decodes a lock into l (copied); with l NULL only skips it. Returns its
 * start_ts through *start. */
static int decode_lock(pc_rd_t *r, pc_lock_info_t *l, uint64_t *start) {
  *start = pc_rd_u64(r);
  uint8_t kind = pc_rd_u8(r);
  uint32_t ttl = pc_rd_u32(r);
  uint64_t session = pc_rd_u64(r);
  uint8_t flags = pc_rd_u8(r);
  if ((kind > PC_WRITE_DELETE && kind != PC_WRITE_NOTIFY) || (flags & ~(LF_OBSERVED | LF_WEAK)))
    return -1;
  if (!l) {
    size_t len;
    for (int i = 0; i < 3; i++) (void)pc_rd_str(r, &len);
    if (pc_rd_u8(r)) (void)pc_rd_str(r, &len);
    return r->ok ? 0 : -1;
  }
  l->start_ts = *start;
  l->kind = (pc_write_kind_t)kind;
  l->ttl_ms = ttl;
  l->session = session;
  l->observed = (flags & LF_OBSERVED) != 0;
  l->weak = (flags & LF_WEAK) != 0;
  if (rd_buf(r, &l->ptable) || rd_buf(r, &l->prow) || rd_buf(r, &l->pcol)) return -1;
  l->has_inline = pc_rd_u8(r);
  l->value.len = 0;
  if (l->has_inline && rd_buf(r, &l->value)) return -1;
  return r->ok ? 0 : -1;
}

/* The head of a meta record; head->value points into the record. */
static int decode_head(pc_rd_t *r, unsigned flags, pc_write_rec_t *head) {
  uint8_t kp = pc_rd_u8(r);
  unsigned kind = kp & 3u, place = kp >> 2;
  if (kind > PC_WRITE_DELETE || place > PC_VALUE_IN_HEAD) return -1;
  head->kind = (pc_write_kind_t)kind;
  head->has_inline = (int)place;
  head->first = (flags & MF_FIRST) != 0;
  head->commit_ts = pc_rd_u64(r);
  if (flags & MF_START) {
    head->start_ts = pc_rd_u64(r);
  } else {
    uint64_t d = rd_varint(r);
    if (d > head->commit_ts) return -1;
    head->start_ts = head->commit_ts - d;
  }
  head->value = NULL;
  head->vlen = 0;
  if (place == PC_VALUE_INLINE) {
    uint64_t n = rd_varint(r);
    const unsigned char *v = r->ok && n <= r->len - r->pos ? pc_rd_take(r, (size_t)n) : NULL;
    if (!v) return -1;
    head->value = (const char *)v;
    head->vlen = (size_t)n;
  }
  return r->ok ? 0 : -1;
}

int pc_meta_encode(const pc_meta_t *m, pc_buf_t *out) {
  const pc_write_rec_t *h = &m->head;
  int has_head = m->has_head != 0;
  uint64_t implied = has_head ? h->commit_ts : 0;
  unsigned flags = (m->has_lock ? MF_LOCK : 0u) | (has_head ? MF_HEAD : 0u) |
                   (m->latest_any != implied ? MF_LATEST : 0u) |
                   (has_head && h->start_ts > h->commit_ts ? MF_START : 0u) |
                   (has_head && h->first ? MF_FIRST : 0u);
  if (pc_buf_u8(out, (uint8_t)(META_V2 | flags))) return -1;
  if ((flags & MF_LATEST) && pc_buf_u64(out, m->latest_any)) return -1;
  if (m->has_lock && encode_lock(&m->lock, out)) return -1;
  if (!has_head) return 0;
  if (pc_buf_u8(out, (uint8_t)((unsigned)h->kind | (unsigned)h->has_inline << 2)) ||
      pc_buf_u64(out, h->commit_ts))
    return -1;
  if (flags & MF_START ? pc_buf_u64(out, h->start_ts) : buf_varint(out, h->commit_ts - h->start_ts))
    return -1;
  if (h->has_inline == PC_VALUE_INLINE && (buf_varint(out, h->vlen) || pc_buf_append(out, h->value, h->vlen)))
    return -1;
  return 0;
}

/* Reads the header of a record: its flags, latest_any if the record carries
 * it, and the lock (decoded into l, or skipped with l NULL). */
static int decode_front(pc_rd_t *r, unsigned *flags, uint64_t *latest, int *latest_set,
                        pc_lock_info_t *l, uint64_t *lock_start) {
  uint8_t b0 = pc_rd_u8(r);
  *lock_start = 0;
  *latest_set = 0;
  if ((b0 & 0xE0u) != META_V2 || ((b0 & MF_FIRST) && !(b0 & MF_HEAD))) return -1;
  *flags = b0 & 0x1Fu;
  if (*flags & MF_LATEST) {
    *latest = pc_rd_u64(r);
    *latest_set = 1;
  }
  if ((*flags & MF_LOCK) && decode_lock(r, l, lock_start) != 0) return -1;
  return r->ok ? 0 : -1;
}

int pc_meta_decode(const char *p, size_t n, pc_meta_t *m) {
  pc_rd_t r = {p, n, 0, 1};
  unsigned flags;
  uint64_t latest = 0, lock_start;
  int latest_set;
  if (decode_front(&r, &flags, &latest, &latest_set, &m->lock, &lock_start) != 0) return -1;
  m->has_lock = (flags & MF_LOCK) != 0;
  m->had_lock = m->has_lock;
  m->has_head = (flags & MF_HEAD) != 0;
  if (m->has_head) {
    pc_write_rec_t h;
    if (decode_head(&r, flags, &h) != 0) return -1;
    /* copy the value so head.value survives the caller's buffer */
    m->head_buf.len = 0;
    if (h.vlen && pc_buf_append(&m->head_buf, h.value, h.vlen)) return -1;
    if (h.value) h.value = m->head_buf.p ? m->head_buf.p : "";
    m->head = h;
  }
  m->latest_any = latest_set ? latest : m->has_head ? m->head.commit_ts : 0;
  return r.ok && r.pos == n ? 0 : -1;
}

int pc_meta_peek(const char *p, size_t n, int *has_lock, uint64_t *lock_start, int *has_head,
                 pc_write_rec_t *head) {
  const unsigned char *u = (const unsigned char *)p;
  if (n >= 12 && (u[0] | MF_FIRST) == (META_V2 | MF_HEAD | MF_FIRST) &&
      u[1] == (PC_WRITE_PUT | PC_VALUE_INLINE << 2)) {
    /* the record of a cell at rest, on every read: a put, its value inline, no
     * lock; decoded in place */
    const unsigned char *end = u + n, *q;
    uint64_t delta, len;
    if (!(q = varint_at(u + 10, end, &delta)) || !(q = varint_at(q, end, &len))) return -1;
    uint64_t commit = pc_be64(u + 2);
    if (delta > commit || len != (uint64_t)(end - q)) return -1;
    *has_lock = 0;
    *lock_start = 0;
    *has_head = 1;
    *head = (pc_write_rec_t){PC_WRITE_PUT,    commit - delta,  commit, PC_VALUE_INLINE,
                             (const char *)q, (size_t)len, (u[0] & MF_FIRST) != 0};
    return 0;
  }
  pc_rd_t r = {p, n, 0, 1};
  unsigned flags;
  uint64_t latest;
  int latest_set;
  if (decode_front(&r, &flags, &latest, &latest_set, NULL, lock_start) != 0) return -1;
  *has_lock = (flags & MF_LOCK) != 0;
  *has_head = (flags & MF_HEAD) != 0;
  if (*has_head && decode_head(&r, flags, head) != 0) return -1;
  return r.ok ? 0 : -1;
}

/* ---- observer records ---------------------------------------------------- */

#define OBS_RECORD_FORMAT 1
#define OBS_NAME_MAX 64 /* PC_MAX_OBSERVER_NAME of observer.h */

static int name_char(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '.' || ch == '-';
}

int pc_obs_name_ok(const char *name, size_t n) {
  if (!name || n == 0 || n > OBS_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!name_char((unsigned char)name[i])) return 0;
  return 1;
}

int pc_obs_record_encode(pc_buf_t *b, int kind, const char *table, const char *col, size_t clen) {
  return pc_buf_u8(b, OBS_RECORD_FORMAT) || pc_buf_u8(b, (uint8_t)kind) ||
                 pc_buf_str(b, table, strlen(table)) || pc_buf_str(b, col, clen)
             ? -1
             : 0;
}

int pc_obs_record_decode(const char *v, size_t n, pc_obs_record_t *rec) {
  pc_rd_t r = {v, n, 0, 1};
  uint8_t format = pc_rd_u8(&r), kind = pc_rd_u8(&r);
  size_t tl;
  const char *t = pc_rd_str(&r, &tl);
  rec->col = pc_rd_str(&r, &rec->clen);
  /* table names and observer names share their characters */
  if (!r.ok || r.pos != n || format != OBS_RECORD_FORMAT || kind > 1 || tl == 0 ||
      tl > PC_MAX_TABLE || rec->clen == 0 || rec->clen > PC_MAX_COLUMN ||
      (unsigned char)rec->col[0] == PC_SYSTEM_BYTE)
    return -1;
  for (size_t i = 0; i < tl; i++)
    if (!name_char((unsigned char)t[i])) return -1;
  rec->kind = kind;
  memcpy(rec->table, t, tl);
  rec->table[tl] = '\0';
  return 0;
}

const char *pc_cell_name(const char *table, const char *row, size_t rlen, const char *col,
                         size_t clen, char *buf, size_t cap) {
  char r[65], c[65];
  size_t i;
  for (i = 0; i < rlen && i < 64; i++) r[i] = row[i] >= 0x20 && row[i] < 0x7f ? row[i] : '?';
  r[i] = '\0';
  for (i = 0; i < clen && i < 64; i++) c[i] = col[i] >= 0x20 && col[i] < 0x7f ? col[i] : '?';
  c[i] = '\0';
  snprintf(buf, cap, "%s/%s%s/%s%s", table, r, rlen > 64 ? "..." : "", c, clen > 64 ? "..." : "");
  return buf;
}
