/* dedup_index.c — the chunks of the dedup index and the runs' directories:
 * their columns and rows, their entries, and the postings a term's chunks
 * leave (the layout is in dedup_index.h). */
#include "dedup_index.h"

#include <stdlib.h>
#include <string.h>

void dd_chunk_col(char out[DD_CHUNK_COL], uint64_t id) {
  out[0] = DD_CHUNK_PREFIX;
  for (int i = 0; i < 8; i++) out[1 + i] = (char)(id >> (56 - 8 * i));
}

int dd_chunk_id(const char *col, size_t clen, uint64_t *id) {
  if (clen != DD_CHUNK_COL || col[0] != DD_CHUNK_PREFIX) return -1;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | (unsigned char)col[1 + i];
  *id = v;
  return 0;
}

void dd_dir_row(char out[DD_DIR_ROW], uint64_t id) {
  for (int i = 0; i < 8; i++) out[i] = (char)(id >> (56 - 8 * i));
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

int dd_hash_raw(const char *hex, size_t hl, uint8_t out[DD_HASH_RAW]) {
  if (hl != 2 * DD_HASH_RAW) return -1;
  for (size_t i = 0; i < DD_HASH_RAW; i++) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

void dd_hash_hex(const uint8_t raw[DD_HASH_RAW], char out[DD_HASH_HEX]) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < DD_HASH_RAW; i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[2 * DD_HASH_RAW] = '\0';
}

int dd_buf_put(dd_buf_t *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < b->n + n) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) return -1;
    b->p = np;
    b->cap = nc;
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
  return 0;
}

void dd_buf_free(dd_buf_t *b) {
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
}

static int put_varint(dd_buf_t *b, uint64_t v) {
  unsigned char tmp[10];
  size_t n = 0;
  do {
    tmp[n] = (unsigned char)(v & 0x7F);
    v >>= 7;
    if (v) tmp[n] |= 0x80;
    n++;
  } while (v);
  return dd_buf_put(b, tmp, n);
}

static int get_varint(const char *p, size_t n, size_t *pos, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= n) return -1;
    unsigned char c = (unsigned char)p[(*pos)++];
    r |= (uint64_t)(c & 0x7F) << shift;
    if (!(c & 0x80)) {
      *v = r;
      return 0;
    }
  }
  return -1;
}

int dd_dir_add(dd_buf_t *dir, uint64_t *n, const uint8_t hash[DD_HASH_RAW], const char *url,
               size_t ulen, uint64_t *ref) {
  if (dd_buf_put(dir, hash, DD_HASH_RAW) || put_varint(dir, ulen) || dd_buf_put(dir, url, ulen))
    return -1;
  *ref = (*n)++;
  return 0;
}

int dd_chunk_add(dd_buf_t *chunk, char op, uint64_t ref, uint64_t count) {
  static const char mark = DD_CHUNK_DIRECTORY;
  if (op != '+' && op != '-') return -1;
  if ((chunk->n == 0 && dd_buf_put(chunk, &mark, 1)) || dd_buf_put(chunk, &op, 1) ||
      put_varint(chunk, ref))
    return -1;
  return op == '+' ? put_varint(chunk, count) : 0;
}

int dd_chunk_add_inline(dd_buf_t *chunk, char op, const uint8_t hash[DD_HASH_RAW],
                        const char *url, size_t ulen, uint64_t count) {
  if (op != '+' && op != '-') return -1;
  if (dd_buf_put(chunk, &op, 1) || dd_buf_put(chunk, hash, DD_HASH_RAW) ||
      put_varint(chunk, ulen) || dd_buf_put(chunk, url, ulen))
    return -1;
  return op == '+' ? put_varint(chunk, count) : 0;
}

/* The pair of p[0..n) at *pos, *pos moved past it: 0, or -1 when malformed. */
static int pair_next(const char *p, size_t n, size_t *pos, dd_pair_t *pr) {
  if (n - *pos < DD_HASH_RAW) return -1;
  pr->hash = (const uint8_t *)p + *pos;
  *pos += DD_HASH_RAW;
  uint64_t ul;
  if (get_varint(p, n, pos, &ul) || ul > n - *pos) return -1;
  pr->url = p + *pos;
  pr->ulen = (size_t)ul;
  *pos += pr->ulen;
  return 0;
}

int dd_dir_parse(dd_dir_t *d, const char *p, size_t n) {
  d->n = 0;
  for (size_t pos = 0; pos < n;) {
    if (d->n == d->cap) {
      size_t nc = d->cap ? d->cap * 2 : 64;
      dd_pair_t *nv = realloc(d->v, nc * sizeof *nv);
      if (!nv) return -2;
      d->v = nv;
      d->cap = nc;
    }
    if (pair_next(p, n, &pos, &d->v[d->n]) != 0) {
      d->n = 0;
      return -1;
    }
    d->n++;
  }
  return 0;
}

void dd_dir_free(dd_dir_t *d) {
  free(d->v);
  memset(d, 0, sizeof *d);
}

int dd_chunk_uses_dir(const char *p, size_t n) { return n > 0 && p[0] == DD_CHUNK_DIRECTORY; }

int dd_chunk_next(const char *p, size_t n, const dd_dir_t *dir, size_t *pos, dd_entry_t *e) {
  int uses_dir = dd_chunk_uses_dir(p, n);
  if (*pos == 0 && uses_dir) *pos = 1;
  if (*pos == n) return 0;
  if (*pos > n) return -1;
  e->op = p[(*pos)++];
  if (e->op != '+' && e->op != '-') return -1;
  dd_pair_t pr;
  if (uses_dir) {
    uint64_t ref;
    if (get_varint(p, n, pos, &ref) || !dir || ref >= dir->n) return -1;
    pr = dir->v[ref];
  } else if (pair_next(p, n, pos, &pr) != 0) {
    return -1;
  }
  e->hash = pr.hash;
  e->url = pr.url;
  e->ulen = pr.ulen;
  e->count = 0;
  if (e->op == '+' && get_varint(p, n, pos, &e->count)) return -1;
  return 1;
}

int dd_postings_apply(dd_postings_t *ps, const char *chunk, size_t n, const dd_dir_t *dir) {
  size_t pos = 0;
  dd_entry_t e;
  int rc;
  while ((rc = dd_chunk_next(chunk, n, dir, &pos, &e)) == 1) {
    if (ps->n == ps->cap) {
      size_t nc = ps->cap ? ps->cap * 2 : 64;
      dd_posting_t *nv = realloc(ps->v, nc * sizeof *nv);
      if (!nv) return -2;
      ps->v = nv;
      ps->cap = nc;
    }
    dd_posting_t *p = &ps->v[ps->n];
    p->url = e.url;
    p->ulen = e.ulen;
    p->hash = e.hash;
    memcpy(&p->key, e.hash, sizeof p->key);
    p->count = e.count;
    p->op = e.op;
    p->seq = ps->seq++;
    ps->n++;
  }
  return rc < 0 ? -1 : 0;
}

static int posting_key_cmp(const dd_posting_t *x, const dd_posting_t *y) {
  size_t m = x->ulen < y->ulen ? x->ulen : y->ulen;
  int r = m ? memcmp(x->url, y->url, m) : 0;
  if (r) return r;
  if (x->ulen != y->ulen) return x->ulen < y->ulen ? -1 : 1;
  return memcmp(x->hash, y->hash, DD_HASH_RAW);
}

static int posting_seq_cmp(const void *a, const void *b) {
  const dd_posting_t *x = a, *y = b;
  int r = posting_key_cmp(x, y);
  if (r) return r;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

int dd_postings_settle(dd_postings_t *ps) {
  if (ps->n) qsort(ps->v, ps->n, sizeof *ps->v, posting_seq_cmp);
  size_t k = 0;
  for (size_t i = 0; i < ps->n; i++) {
    int last = i + 1 == ps->n || posting_key_cmp(&ps->v[i], &ps->v[i + 1]) != 0;
    if (last && ps->v[i].op == '+') ps->v[k++] = ps->v[i];
  }
  ps->n = k;
  return 0;
}

/* Whether x sorts before y by (hash, URL, seq), the hash's first 8 bytes
 * (random: they nearly always decide) compared as an integer. */
static int any_less(const dd_posting_t *x, const dd_posting_t *y) {
  if (x->key != y->key) return x->key < y->key;
  int r = memcmp(x->hash, y->hash, DD_HASH_RAW);
  if (r) return r < 0;
  size_t m = x->ulen < y->ulen ? x->ulen : y->ulen;
  r = m ? memcmp(x->url, y->url, m) : 0;
  if (r) return r < 0;
  if (x->ulen != y->ulen) return x->ulen < y->ulen;
  return x->seq < y->seq;
}

static void swap(dd_posting_t *a, dd_posting_t *b) {
  dd_posting_t t = *a;
  *a = *b;
  *b = t;
}

/* Quicksort by any_less (median of three; insertion sort for short runs;
 * the smaller side first, so the stack stays logarithmic). */
static void sort_any(dd_posting_t *v, size_t n) {
  while (n > 16) {
    size_t m = n / 2;
    if (any_less(&v[m], &v[0])) swap(&v[m], &v[0]);
    if (any_less(&v[n - 1], &v[0])) swap(&v[n - 1], &v[0]);
    if (any_less(&v[n - 1], &v[m])) swap(&v[n - 1], &v[m]);
    dd_posting_t pivot = v[m];
    size_t i = 0, j = n - 1;
    for (;;) {
      while (any_less(&v[i], &pivot)) i++;
      while (any_less(&pivot, &v[j])) j--;
      if (i >= j) break;
      swap(&v[i], &v[j]);
      i++;
      j--;
    }
    /* [0, j] and [j + 1, n) */
    if (j + 1 < n - j - 1) {
      sort_any(v, j + 1);
      v += j + 1;
      n -= j + 1;
    } else {
      sort_any(v + j + 1, n - j - 1);
      n = j + 1;
    }
  }
  for (size_t i = 1; i < n; i++) {
    dd_posting_t x = v[i];
    size_t j = i;
    for (; j > 0 && any_less(&x, &v[j - 1]); j--) v[j] = v[j - 1];
    v[j] = x;
  }
}

int dd_postings_settle_any(dd_postings_t *ps) {
  sort_any(ps->v, ps->n);
  size_t k = 0;
  for (size_t i = 0; i < ps->n; i++) {
    int last = i + 1 == ps->n || posting_key_cmp(&ps->v[i], &ps->v[i + 1]) != 0;
    if (last && ps->v[i].op == '+') ps->v[k++] = ps->v[i];
  }
  ps->n = k;
  return 0;
}

void dd_postings_clear(dd_postings_t *ps) {
  ps->n = 0;
  ps->seq = 0;
}

void dd_postings_free(dd_postings_t *ps) {
  dd_postings_clear(ps);
  free(ps->v);
  ps->v = NULL;
  ps->cap = 0;
}

/* ---- buckets ------------------------------------------------------------------------ */

unsigned dd_term_bucket(const char *t, size_t len) {
  uint64_t h = 14695981039346656037ull; /* FNV-1a's offset basis */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)t[i]) * 1099511628211ull;
  return (unsigned)(h % DD_BUCKETS);
}

void dd_bucket_row(char out[DD_BUCKET_ROW], unsigned b) {
  out[0] = (char)(b >> 8);
  out[1] = (char)b;
}

int dd_bucket_of_row(const char *row, size_t rl, unsigned *b) {
  if (rl != DD_BUCKET_ROW) return -1;
  unsigned v = (unsigned)(unsigned char)row[0] << 8 | (unsigned char)row[1];
  if (v >= DD_BUCKETS) return -1;
  *b = v;
  return 0;
}

int dd_bucket_add(dd_buf_t *cell, const char *t, size_t tl, const char *c, size_t cn) {
  static const char mark = DD_CHUNK_BUCKET;
  const unsigned char len = (unsigned char)tl;
  if (tl == 0 || tl > DD_MAX_TERM) return -1;
  if ((cell->n == 0 && dd_buf_put(cell, &mark, 1)) || dd_buf_put(cell, &len, 1) ||
      dd_buf_put(cell, t, tl) || put_varint(cell, cn) || dd_buf_put(cell, c, cn))
    return -1;
  return 0;
}

int dd_bucket_next(const char *p, size_t n, size_t *pos, const char **t, size_t *tl,
                   const char **c, size_t *cn) {
  if (*pos == 0) {
    if (n == 0 || p[0] != DD_CHUNK_BUCKET) return -1;
    *pos = 1;
  }
  if (*pos == n) return 0;
  if (*pos > n) return -1;
  size_t len = (unsigned char)p[(*pos)++];
  if (len == 0 || len > DD_MAX_TERM || len > n - *pos) return -1;
  *t = p + *pos;
  *tl = len;
  *pos += len;
  uint64_t cl;
  if (get_varint(p, n, pos, &cl) || cl > n - *pos) return -1;
  *c = p + *pos;
  *cn = (size_t)cl;
  *pos += *cn;
  return 1;
}
