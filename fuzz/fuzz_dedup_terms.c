/* fuzz_dedup_terms.c — the dedup application's tokeniser
 * (apps/dedup/dedup_text.c) against any document: its terms follow the rule
 * of dedup_text.h (runs of [a-z0-9] after folding, at most DD_MAX_TERM
 * bytes), come sorted and distinct, and their counts add up to the terms
 * dd_next_term finds one by one; the index's chunks (dedup_index.c) keep
 * what is written into them, and any bytes read as a chunk are either one
 * or refused; so do the bucket cells that group a run's chunks, built from
 * the input's terms, and any bytes read as a bucket cell (with a directory
 * read from the input's end) are either one or refused. */
#include <stdlib.h>
#include <string.h>

#include "apps/dedup/dedup_index.h"
#include "apps/dedup/dedup_text.h"
#include "fuzz/fuzz.h"

static int term_byte(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* The chunk the round trip below writes for term j (count times in its
 * document) in a run whose directory has nd pairs: pair j % nd set with
 * the count, and when the count is even the next pair removed. */
static void term_chunk(dd_buf_t *c, size_t j, uint64_t nd, uint64_t count) {
  c->n = 0;
  FUZZ_CHECK(dd_chunk_add(c, '+', j % nd, count) == 0);
  if (nd > 1 && count % 2 == 0) FUZZ_CHECK(dd_chunk_add(c, '-', (j + 1) % nd, 0) == 0);
}

typedef struct bucketed {
  unsigned bucket;
  size_t j; /* the term's index */
} bucketed_t;

static int bucketed_cmp(const void *a, const void *b) {
  const bucketed_t *x = a, *y = b;
  if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
  return (x->j > y->j) - (x->j < y->j);
}

/* The input's terms written as a run writes them: a directory of a few
 * pairs taken from the input, a chunk per term, the chunks in one cell per
 * bucket. Each cell reads back as its terms, in the order written, each
 * with its chunk and in its cell's bucket, and each chunk applied with the
 * directory leaves the one posting it set. */
static void bucket_round_trip(const char *p, size_t size, const dd_terms_t *t) {
  char hex[DD_HASH_HEX];
  uint8_t hash[DD_HASH_RAW];
  dd_sha256_hex(p, size, hex);
  FUZZ_CHECK(dd_hash_raw(hex, DD_HASH_HEX - 1, hash) == 0);
  dd_buf_t dbuf = {0}, chunk = {0}, cell = {0};
  uint64_t nd = 0, want = 1 + size % 4, ref;
  for (uint64_t i = 0; i < want; i++) {
    size_t off = (size_t)(i * size / want), ulen = size - off < 64 ? size - off : 64;
    uint8_t h[DD_HASH_RAW];
    memcpy(h, hash, sizeof h);
    h[0] ^= (uint8_t)i; /* each pair its own hash */
    FUZZ_CHECK(dd_dir_add(&dbuf, &nd, h, p + off, ulen, &ref) == 0 && ref == i);
  }
  dd_dir_t dir = {0};
  FUZZ_CHECK(dd_dir_parse(&dir, dbuf.p, dbuf.n) == 0 && dir.n == nd);
  bucketed_t *by = malloc(t->n * sizeof *by);
  FUZZ_CHECK(by != NULL);
  for (size_t j = 0; j < t->n; j++) {
    by[j].bucket = dd_term_bucket(t->v[j].term, t->v[j].len);
    by[j].j = j;
    FUZZ_CHECK(by[j].bucket < DD_BUCKETS);
  }
  qsort(by, t->n, sizeof *by, bucketed_cmp);
  dd_postings_t ps = {0};
  for (size_t a = 0, b; a < t->n; a = b) {
    cell.n = 0;
    for (b = a; b < t->n && by[b].bucket == by[a].bucket; b++) {
      const dd_term_t *e = &t->v[by[b].j];
      term_chunk(&chunk, by[b].j, nd, e->count);
      FUZZ_CHECK(dd_bucket_add(&cell, e->term, e->len, chunk.p, chunk.n) == 0);
    }
    char row[DD_BUCKET_ROW];
    unsigned rb = DD_BUCKETS;
    dd_bucket_row(row, by[a].bucket);
    FUZZ_CHECK(dd_bucket_of_row(row, sizeof row, &rb) == 0 && rb == by[a].bucket);
    size_t pos = 0, last = 0, tl, cn;
    const char *tp, *cp;
    for (size_t k = a; k < b; k++) {
      const dd_term_t *e = &t->v[by[k].j];
      FUZZ_CHECK(dd_bucket_next(cell.p, cell.n, &pos, &tp, &tl, &cp, &cn) == 1);
      FUZZ_CHECK(pos > last && pos <= cell.n);
      last = pos;
      FUZZ_CHECK(tl == e->len && memcmp(tp, e->term, tl) == 0);
      FUZZ_CHECK(dd_term_bucket(tp, tl) == by[a].bucket);
      term_chunk(&chunk, by[k].j, nd, e->count);
      FUZZ_CHECK(cn == chunk.n && memcmp(cp, chunk.p, cn) == 0);
      dd_postings_clear(&ps);
      FUZZ_CHECK(dd_postings_apply(&ps, cp, cn, &dir) == 0 && dd_postings_settle(&ps) == 0);
      const dd_pair_t *pr = &dir.v[by[k].j % nd];
      FUZZ_CHECK(ps.n == 1 && ps.v[0].count == e->count && ps.v[0].ulen == pr->ulen);
      FUZZ_CHECK(memcmp(ps.v[0].url, pr->url, pr->ulen) == 0);
      FUZZ_CHECK(memcmp(ps.v[0].hash, pr->hash, DD_HASH_RAW) == 0);
    }
    FUZZ_CHECK(dd_bucket_next(cell.p, cell.n, &pos, &tp, &tl, &cp, &cn) == 0);
  }
  free(by);
  dd_postings_free(&ps);
  dd_dir_free(&dir);
  dd_buf_free(&dbuf);
  dd_buf_free(&chunk);
  dd_buf_free(&cell);
}

/* 1 when [q, q + n) lies inside [lo, hi). */
static int inside(const char *q, size_t n, const char *lo, const char *hi) {
  return q >= lo && q <= hi && n <= (size_t)(hi - q);
}

/* p[0..n) read as a bucket cell, each section's chunk read with dir (NULL:
 * none), whose value is d[0..dn): malformed is an answer, never a read out
 * of bounds; each section and entry lies in the bytes it was read from, and
 * a cell read to its end is written again by dd_bucket_add into a cell
 * that reads the same. */
static void any_bucket_cell(const char *p, size_t n, const dd_dir_t *dir, const char *d,
                            size_t dn) {
  size_t pos = 0, last = 0, tl, cn, sections = 0;
  const char *tp, *cp;
  dd_buf_t again = {0};
  int rc;
  while ((rc = dd_bucket_next(p, n, &pos, &tp, &tl, &cp, &cn)) == 1) {
    FUZZ_CHECK(pos > last && pos <= n);
    last = pos;
    FUZZ_CHECK(tl >= 1 && tl <= DD_MAX_TERM && inside(tp, tl, p, p + n));
    FUZZ_CHECK(inside(cp, cn, p, p + n) && cp + cn == p + pos);
    FUZZ_CHECK(dd_bucket_add(&again, tp, tl, cp, cn) == 0);
    sections++;
    size_t cpos = 0, clast = 0;
    dd_entry_t e;
    int erc;
    while ((erc = dd_chunk_next(cp, cn, dir, &cpos, &e)) == 1) {
      FUZZ_CHECK(cpos > clast && cpos <= cn);
      clast = cpos;
      FUZZ_CHECK(e.op == '+' || (e.op == '-' && e.count == 0));
      if (dd_chunk_uses_dir(cp, cn)) {
        FUZZ_CHECK(dir != NULL && inside((const char *)e.hash, DD_HASH_RAW, d, d + dn));
        FUZZ_CHECK(inside(e.url, e.ulen, d, d + dn));
      } else {
        FUZZ_CHECK(inside((const char *)e.hash, DD_HASH_RAW, cp, cp + cn));
        FUZZ_CHECK(inside(e.url, e.ulen, cp, cp + cn));
      }
    }
    FUZZ_CHECK(erc == 0 || erc == -1);
  }
  FUZZ_CHECK(rc == 0 || rc == -1);
  if (rc == 0) {
    FUZZ_CHECK(n >= 1 && (unsigned char)p[0] == DD_CHUNK_BUCKET);
    FUZZ_CHECK(again.n <= n); /* varints read may be longer than written */
    size_t apos = 0, k = 0, atl, acn;
    const char *atp, *acp;
    pos = 0;
    while (k < sections) {
      FUZZ_CHECK(dd_bucket_next(p, n, &pos, &tp, &tl, &cp, &cn) == 1);
      FUZZ_CHECK(dd_bucket_next(again.p, again.n, &apos, &atp, &atl, &acp, &acn) == 1);
      FUZZ_CHECK(atl == tl && memcmp(atp, tp, tl) == 0);
      FUZZ_CHECK(acn == cn && memcmp(acp, cp, cn) == 0);
      k++;
    }
    if (sections) FUZZ_CHECK(dd_bucket_next(again.p, again.n, &apos, &atp, &atl, &acp, &acn) == 0);
  }
  dd_buf_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data;
  dd_terms_t t;
  FUZZ_CHECK(dd_terms(p, size, &t) == 0);
  uint64_t total = 0;
  for (size_t i = 0; i < t.n; i++) {
    const dd_term_t *e = &t.v[i];
    FUZZ_CHECK(e->len >= 1 && e->len <= DD_MAX_TERM && e->term[e->len] == '\0');
    for (size_t k = 0; k < e->len; k++) FUZZ_CHECK(term_byte(e->term[k]));
    FUZZ_CHECK(e->count >= 1);
    total += e->count;
    if (i > 0) {
      const dd_term_t *d = &t.v[i - 1];
      size_t m = d->len < e->len ? d->len : e->len;
      int c = memcmp(d->term, e->term, m);
      FUZZ_CHECK(c < 0 || (c == 0 && d->len < e->len));
    }
  }
  uint64_t seen = 0;
  size_t pos = 0, last = 0;
  char term[DD_MAX_TERM + 1];
  while (dd_next_term(p, size, &pos, term) != 0) {
    FUZZ_CHECK(pos > last && pos <= size);
    last = pos;
    seen++;
  }
  FUZZ_CHECK(seen == total);
  /* a chunk of the index holds the URL, the hash and the count of a
   * posting, each found again; applied after it, a removal leaves nothing */
  if (t.n) {
    char hex[DD_HASH_HEX];
    uint8_t hash[DD_HASH_RAW];
    dd_sha256_hex(p, size, hex);
    FUZZ_CHECK(dd_hash_raw(hex, DD_HASH_HEX - 1, hash) == 0);
    size_t ulen = size < 64 ? size : 64;
    dd_buf_t chunk = {0};
    FUZZ_CHECK(dd_chunk_add_inline(&chunk, '+', hash, p, ulen, t.v[0].count) == 0);
    size_t cpos = 0;
    dd_entry_t e;
    FUZZ_CHECK(dd_chunk_next(chunk.p, chunk.n, NULL, &cpos, &e) == 1);
    FUZZ_CHECK(e.op == '+' && e.ulen == ulen && memcmp(e.url, p, ulen) == 0);
    FUZZ_CHECK(memcmp(e.hash, hash, DD_HASH_RAW) == 0 && e.count == t.v[0].count);
    FUZZ_CHECK(dd_chunk_next(chunk.p, chunk.n, NULL, &cpos, &e) == 0);
    dd_postings_t ps = {0};
    FUZZ_CHECK(dd_postings_apply(&ps, chunk.p, chunk.n, NULL) == 0 && dd_postings_settle(&ps) == 0);
    FUZZ_CHECK(ps.n == 1 && ps.v[0].ulen == ulen && ps.v[0].count == t.v[0].count);
    dd_postings_clear(&ps);
    chunk.n = 0;
    FUZZ_CHECK(dd_chunk_add_inline(&chunk, '+', hash, p, ulen, t.v[0].count) == 0 &&
               dd_chunk_add_inline(&chunk, '-', hash, p, ulen, 0) == 0);
    FUZZ_CHECK(dd_postings_apply(&ps, chunk.p, chunk.n, NULL) == 0 && dd_postings_settle(&ps) == 0);
    FUZZ_CHECK(ps.n == 0);
    /* the same through a run's directory */
    dd_buf_t dbuf = {0};
    uint64_t nd = 0, ref = 0;
    chunk.n = 0;
    FUZZ_CHECK(dd_dir_add(&dbuf, &nd, hash, p, ulen, &ref) == 0 && ref == 0 && nd == 1);
    FUZZ_CHECK(dd_chunk_add(&chunk, '+', ref, t.v[0].count) == 0);
    dd_dir_t dir = {0};
    FUZZ_CHECK(dd_dir_parse(&dir, dbuf.p, dbuf.n) == 0 && dir.n == 1);
    cpos = 0;
    FUZZ_CHECK(dd_chunk_next(chunk.p, chunk.n, &dir, &cpos, &e) == 1);
    FUZZ_CHECK(e.op == '+' && e.ulen == ulen && memcmp(e.url, p, ulen) == 0);
    FUZZ_CHECK(memcmp(e.hash, hash, DD_HASH_RAW) == 0 && e.count == t.v[0].count);
    FUZZ_CHECK(dd_chunk_next(chunk.p, chunk.n, &dir, &cpos, &e) == 0);
    dd_dir_free(&dir);
    dd_buf_free(&dbuf);
    dd_postings_free(&ps);
    dd_buf_free(&chunk);
    bucket_round_trip(p, size, &t);
  }
  /* the input as a chunk read from the store: malformed is an answer, never
   * a read out of bounds */
  dd_postings_t any = {0};
  int rc = dd_postings_apply(&any, p, size, NULL);
  FUZZ_CHECK(rc == 0 || rc == -1 || rc == -2);
  if (rc == 0) FUZZ_CHECK(dd_postings_settle(&any) != -1);
  dd_postings_clear(&any);
  /* and as a run's directory, then as a chunk that names it */
  dd_dir_t dir = {0};
  rc = dd_dir_parse(&dir, p, size);
  FUZZ_CHECK(rc == 0 || rc == -1 || rc == -2);
  if (rc == 0 && size > 0) {
    rc = dd_postings_apply(&any, p, size, &dir);
    FUZZ_CHECK(rc == 0 || rc == -1 || rc == -2);
  }
  /* the input as a bucket cell, its chunks read with no directory; then
   * with its last two bytes (big-endian) the length of a directory read
   * from the bytes just before them, and the rest the cell */
  any_bucket_cell(p, size, NULL, NULL, 0);
  if (size >= 2) {
    size_t dl = (size_t)((unsigned char)p[size - 2] << 8 | (unsigned char)p[size - 1]);
    if (dl <= size - 2) {
      const char *d = p + (size - 2 - dl);
      rc = dd_dir_parse(&dir, d, dl);
      FUZZ_CHECK(rc == 0 || rc == -1 || rc == -2);
      if (rc == 0) any_bucket_cell(p, size - 2 - dl, &dir, d, dl);
    }
  }
  dd_dir_free(&dir);
  dd_postings_free(&any);
  dd_terms_free(&t);
  return 0;
}
