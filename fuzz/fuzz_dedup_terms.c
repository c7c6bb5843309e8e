/* fuzz_dedup_terms.c — the dedup application's tokeniser
 * (apps/dedup/dedup_text.c) against any document: its terms follow the rule
 * of dedup_text.h (runs of [a-z0-9] after folding, at most DD_MAX_TERM
 * bytes), come sorted and distinct, and their counts add up to the terms
 * dd_next_term finds one by one; the index's chunks (dedup_index.c) keep
 * what is written into them, and any bytes read as a chunk are either one
 * or refused. */
#include <string.h>

#include "apps/dedup/dedup_index.h"
#include "apps/dedup/dedup_text.h"
#include "fuzz/fuzz.h"

static int term_byte(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

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
  dd_dir_free(&dir);
  dd_postings_free(&any);
  dd_terms_free(&t);
  return 0;
}
