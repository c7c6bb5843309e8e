/* fuzz_dedup_terms.c — the dedup application's tokeniser
 * (apps/dedup/dedup_text.c) against any document: its terms follow the rule
 * of dedup_text.h (runs of [a-z0-9] after folding, at most DD_MAX_TERM
 * bytes), come sorted and distinct, and their counts add up to the terms
 * dd_next_term finds one by one. */
#include <string.h>

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
  /* an index row holds the term, the URL and the hash, each findable again */
  if (t.n) {
    char hash[DD_HASH_HEX], row[DD_MAX_TERM + 2 + 64 + DD_HASH_HEX];
    dd_sha256_hex(p, size, hash);
    size_t ulen = size < 64 ? size : 64;
    int n = dd_idx_row(row, sizeof row, t.v[0].term, t.v[0].len, p, ulen, hash, 64);
    FUZZ_CHECK(n == (int)(t.v[0].len + 2 + ulen + 64));
    FUZZ_CHECK(memcmp(row, t.v[0].term, t.v[0].len) == 0 && row[t.v[0].len] == '\0');
    FUZZ_CHECK(memcmp(row + n - 64, hash, 64) == 0);
  }
  dd_terms_free(&t);
  return 0;
}
