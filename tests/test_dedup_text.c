/* test_dedup_text.c — the dedup application's tokeniser and content hash
 * (apps/dedup/dedup_text.c, shared by the plugin and the CLI's check): the
 * documented rule (ASCII folding, maximal [a-z0-9] runs, other bytes
 * separate, terms cut at 64 bytes) and SHA-256 against known digests; and
 * the chunks of the index (apps/dedup/dedup_index.c): their columns and
 * entries, malformed ones refused, and the postings a term's chunks leave. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "apps/dedup/dedup_index.h"
#include "apps/dedup/dedup_text.h"

/* The terms of s, each followed by '|'. */
static void terms_of(const char *s, size_t n, char *out, size_t cap) {
  char t[DD_MAX_TERM + 1];
  size_t pos = 0, len, at = 0;
  out[0] = '\0';
  while ((len = dd_next_term(s, n, &pos, t)) != 0) {
    assert_true(at + len + 2 < cap);
    memcpy(out + at, t, len);
    at += len;
    out[at++] = '|';
    out[at] = '\0';
  }
}

static void test_rule(void **state) {
  (void)state;
  char out[512];
  terms_of("Hello, WORLD! x9z", 17, out, sizeof out);
  assert_string_equal(out, "hello|world|x9z|");
  terms_of("", 0, out, sizeof out);
  assert_string_equal(out, "");
  terms_of("  ...  ", 7, out, sizeof out);
  assert_string_equal(out, "");
  /* underscores, hyphens, bytes >= 0x80 and NUL separate; no Unicode folding */
  terms_of("snake_case-word caf\xc3\xa9 a\0b \xc3\x89t\xc3\xa9", 31, out, sizeof out);
  assert_string_equal(out, "snake|case|word|caf|a|b|t|");
  terms_of("ABC123def", 9, out, sizeof out);
  assert_string_equal(out, "abc123def|");
}

static void test_long_terms_are_cut(void **state) {
  (void)state;
  char s[200], want[DD_MAX_TERM + 1], out[512];
  memset(s, 'Q', 150);
  s[150] = ' ';
  memcpy(s + 151, "next", 4);
  memset(want, 'q', DD_MAX_TERM);
  want[DD_MAX_TERM] = '\0';
  terms_of(s, 155, out, sizeof out);
  char expect[256];
  snprintf(expect, sizeof expect, "%s|next|", want);
  assert_string_equal(out, expect); /* the rest of the long run is dropped */
  terms_of(s, DD_MAX_TERM, out, sizeof out); /* exactly 64 bytes: whole */
  snprintf(expect, sizeof expect, "%s|", want);
  assert_string_equal(out, expect);
}

static void test_counts_sorted(void **state) {
  (void)state;
  dd_terms_t t;
  const char *s = "b a B c a A zz b";
  assert_int_equal(dd_terms(s, strlen(s), &t), 0);
  assert_int_equal(t.n, 4);
  assert_string_equal(t.v[0].term, "a");
  assert_int_equal(t.v[0].count, 3);
  assert_string_equal(t.v[1].term, "b");
  assert_int_equal(t.v[1].count, 3);
  assert_string_equal(t.v[2].term, "c");
  assert_int_equal(t.v[2].count, 1);
  assert_string_equal(t.v[3].term, "zz");
  assert_int_equal(t.v[3].len, 2);
  dd_terms_free(&t);
  assert_int_equal(dd_terms("--", 2, &t), 0);
  assert_int_equal(t.n, 0);
  dd_terms_free(&t);
}

static void test_many_terms(void **state) {
  (void)state;
  /* enough distinct terms to grow the table several times */
  static char s[20000 * 7];
  size_t n = 0;
  for (int i = 0; i < 20000; i++) n += (size_t)snprintf(s + n, sizeof s - n, "t%d ", i % 5000);
  dd_terms_t t;
  assert_int_equal(dd_terms(s, n, &t), 0);
  assert_int_equal(t.n, 5000);
  for (size_t i = 0; i < t.n; i++) {
    assert_int_equal(t.v[i].count, 4);
    if (i) assert_true(strcmp(t.v[i - 1].term, t.v[i].term) < 0);
  }
  dd_terms_free(&t);
}

static void test_sha256(void **state) {
  (void)state;
  char h[DD_HASH_HEX];
  dd_sha256_hex("abc", 3, h);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  dd_sha256_hex("", 0, h);
  assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* ---- the index's chunks ------------------------------------------------------ */

static void test_chunk_columns(void **state) {
  (void)state;
  char col[DD_CHUNK_COL];
  dd_chunk_col(col, 0x0102030405060708ull);
  assert_int_equal(col[0], 'p');
  uint64_t id = 0;
  assert_int_equal(dd_chunk_id(col, sizeof col, &id), 0);
  assert_true(id == 0x0102030405060708ull);
  assert_int_equal(dd_chunk_id(col, sizeof col - 1, &id), -1);
  assert_int_equal(dd_chunk_id("n", 1, &id), -1);
  /* the order of columns is the order of ids */
  char a[DD_CHUNK_COL], b[DD_CHUNK_COL];
  dd_chunk_col(a, 255);
  dd_chunk_col(b, 256);
  assert_true(memcmp(a, b, DD_CHUNK_COL) < 0);
  uint8_t raw[DD_HASH_RAW];
  char hex[DD_HASH_HEX];
  const char *h = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  assert_int_equal(dd_hash_raw(h, 64, raw), 0);
  dd_hash_hex(raw, hex);
  assert_string_equal(hex, h);
  assert_int_equal(dd_hash_raw(h, 63, raw), -1);
  assert_int_equal(dd_hash_raw("BA7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", 64, raw), -1);
}

static void test_chunk_entries(void **state) {
  (void)state;
  uint8_t h1[DD_HASH_RAW], h2[DD_HASH_RAW];
  memset(h1, 0x11, sizeof h1);
  memset(h2, 0x22, sizeof h2);
  dd_buf_t c = {0};
  assert_int_equal(dd_chunk_add_inline(&c, '+', h1, "u/a", 3, 300), 0);
  assert_int_equal(dd_chunk_add_inline(&c, '-', h2, "", 0, 0), 0);
  assert_int_equal(dd_chunk_add_inline(&c, '?', h2, "x", 1, 0), -1);
  size_t pos = 0;
  dd_entry_t e;
  assert_int_equal(dd_chunk_next(c.p, c.n, NULL, &pos, &e), 1);
  assert_int_equal(e.op, '+');
  assert_memory_equal(e.hash, h1, DD_HASH_RAW);
  assert_int_equal(e.ulen, 3);
  assert_memory_equal(e.url, "u/a", 3);
  assert_int_equal(e.count, 300);
  assert_int_equal(dd_chunk_next(c.p, c.n, NULL, &pos, &e), 1);
  assert_int_equal(e.op, '-');
  assert_int_equal(e.ulen, 0);
  assert_int_equal(dd_chunk_next(c.p, c.n, NULL, &pos, &e), 0);
  /* every truncation of a chunk, and a bad op byte, is malformed */
  for (size_t cut = 1; cut < c.n; cut++) {
    int rc = 1;
    pos = 0;
    while (rc == 1) rc = dd_chunk_next(c.p, cut, NULL, &pos, &e);
    if (cut == 1 + DD_HASH_RAW + 1 + 3 + 2) assert_int_equal(rc, 0); /* after the first entry */
    else assert_int_equal(rc, -1);
  }
  c.p[0] = 'x';
  pos = 0;
  assert_int_equal(dd_chunk_next(c.p, c.n, NULL, &pos, &e), -1);
  dd_buf_free(&c);
  /* a URL length past the end */
  const char bad[] = {'+', [1 + DD_HASH_RAW] = 9, 'a'};
  pos = 0;
  assert_int_equal(dd_chunk_next(bad, sizeof bad, NULL, &pos, &e), -1);
}

/* Chunks applied in order: the last entry of a (URL, hash) wins, '-'
 * removes it; the result is in (URL, hash) order. */
static void test_postings_settle(void **state) {
  (void)state;
  uint8_t h1[DD_HASH_RAW], h2[DD_HASH_RAW];
  memset(h1, 0x11, sizeof h1);
  memset(h2, 0x22, sizeof h2);
  dd_buf_t c1 = {0}, c2 = {0}, c3 = {0};
  assert_int_equal(dd_chunk_add_inline(&c1, '+', h1, "b", 1, 1), 0);
  assert_int_equal(dd_chunk_add_inline(&c1, '+', h2, "a", 1, 2), 0);
  assert_int_equal(dd_chunk_add_inline(&c1, '+', h1, "c", 1, 3), 0);
  assert_int_equal(dd_chunk_add_inline(&c2, '-', h1, "b", 1, 0), 0); /* b leaves cluster 1 */
  assert_int_equal(dd_chunk_add_inline(&c2, '+', h2, "b", 1, 4), 0); /* and is indexed in 2 */
  assert_int_equal(dd_chunk_add_inline(&c2, '+', h1, "c", 1, 5), 0); /* set again */
  assert_int_equal(dd_chunk_add_inline(&c3, '-', h2, "a", 1, 0), 0);
  dd_postings_t ps = {0};
  assert_int_equal(dd_postings_apply(&ps, c1.p, c1.n, NULL), 0);
  assert_int_equal(dd_postings_apply(&ps, c2.p, c2.n, NULL), 0);
  assert_int_equal(dd_postings_apply(&ps, c3.p, c3.n, NULL), 0);
  assert_int_equal(dd_postings_apply(&ps, "junk", 4, NULL), -1);
  assert_int_equal(dd_postings_settle(&ps), 0);
  assert_int_equal(ps.n, 2);
  assert_string_equal(ps.v[0].url, "b");
  assert_memory_equal(ps.v[0].hash, h2, DD_HASH_RAW);
  assert_int_equal(ps.v[0].count, 4);
  assert_string_equal(ps.v[1].url, "c");
  assert_int_equal(ps.v[1].count, 5);
  /* the same chunks in another order leave another result: order matters */
  dd_postings_clear(&ps);
  assert_int_equal(dd_postings_apply(&ps, c2.p, c2.n, NULL), 0);
  assert_int_equal(dd_postings_apply(&ps, c1.p, c1.n, NULL), 0);
  assert_int_equal(dd_postings_settle(&ps), 0);
  assert_int_equal(ps.n, 4); /* a, b in 1, b in 2, c */
  dd_postings_free(&ps);
  dd_buf_free(&c1);
  dd_buf_free(&c2);
  dd_buf_free(&c3);
}

/* Chunks that name their run's directory: each entry resolves to its pair,
 * a pair the directory lacks (or no directory) makes the chunk malformed,
 * and such chunks apply after chunks of the older form, as in a store
 * indexed before directories. */
static void test_directory_chunks(void **state) {
  (void)state;
  uint8_t h1[DD_HASH_RAW], h2[DD_HASH_RAW];
  memset(h1, 0x11, sizeof h1);
  memset(h2, 0x22, sizeof h2);
  dd_buf_t dir = {0}, c = {0}, old = {0};
  uint64_t n = 0, r1 = 9, r2 = 9;
  assert_int_equal(dd_dir_add(&dir, &n, h1, "u/a", 3, &r1), 0);
  assert_int_equal(dd_dir_add(&dir, &n, h2, "u/bb", 4, &r2), 0);
  assert_true(r1 == 0 && r2 == 1 && n == 2);
  assert_int_equal(dd_chunk_add(&c, '-', r1, 0), 0);
  assert_int_equal(dd_chunk_add(&c, '+', r2, 300), 0);
  assert_int_equal(dd_chunk_add(&c, '?', r2, 1), -1);
  assert_int_equal(c.n, 1 + 2 + 4); /* the mark; - 0; + 1 300 (a varint of two bytes) */
  assert_true(dd_chunk_uses_dir(c.p, c.n));
  dd_dir_t d = {0};
  assert_int_equal(dd_dir_parse(&d, dir.p, dir.n), 0);
  assert_int_equal(d.n, 2);
  size_t pos = 0;
  dd_entry_t e;
  assert_int_equal(dd_chunk_next(c.p, c.n, &d, &pos, &e), 1);
  assert_int_equal(e.op, '-');
  assert_memory_equal(e.hash, h1, DD_HASH_RAW);
  assert_int_equal(e.ulen, 3);
  assert_memory_equal(e.url, "u/a", 3);
  assert_int_equal(dd_chunk_next(c.p, c.n, &d, &pos, &e), 1);
  assert_int_equal(e.op, '+');
  assert_memory_equal(e.hash, h2, DD_HASH_RAW);
  assert_memory_equal(e.url, "u/bb", 4);
  assert_int_equal(e.count, 300);
  assert_int_equal(dd_chunk_next(c.p, c.n, &d, &pos, &e), 0);
  /* no directory, or one without the pair named */
  pos = 0;
  assert_int_equal(dd_chunk_next(c.p, c.n, NULL, &pos, &e), -1);
  dd_dir_t short_dir = {0};
  assert_int_equal(dd_dir_parse(&short_dir, dir.p, DD_HASH_RAW + 1 + 3), 0);
  assert_int_equal(short_dir.n, 1);
  dd_postings_t ps = {0};
  assert_int_equal(dd_postings_apply(&ps, c.p, c.n, &short_dir), -1);
  dd_postings_clear(&ps);
  /* every cut of a directory inside a pair is malformed */
  for (size_t cut = 1; cut < dir.n; cut++) {
    int rc = dd_dir_parse(&short_dir, dir.p, cut);
    if (cut == DD_HASH_RAW + 1 + 3) assert_int_equal(rc, 0);
    else assert_int_equal(rc, -1);
  }
  /* after chunks of the older form: (u/a, h1) set there, removed here */
  assert_int_equal(dd_chunk_add_inline(&old, '+', h1, "u/a", 3, 5), 0);
  assert_false(dd_chunk_uses_dir(old.p, old.n));
  assert_int_equal(dd_postings_apply(&ps, old.p, old.n, NULL), 0);
  assert_int_equal(dd_postings_apply(&ps, c.p, c.n, &d), 0);
  assert_int_equal(dd_postings_settle(&ps), 0);
  assert_int_equal(ps.n, 1);
  assert_string_equal(ps.v[0].url, "u/bb");
  assert_memory_equal(ps.v[0].hash, h2, DD_HASH_RAW);
  assert_int_equal(ps.v[0].count, 300);
  /* directories' rows sort as the runs' ids */
  char a[DD_DIR_ROW], b[DD_DIR_ROW];
  dd_dir_row(a, 255);
  dd_dir_row(b, 256);
  assert_true(memcmp(a, b, DD_DIR_ROW) < 0);
  dd_postings_free(&ps);
  dd_dir_free(&d);
  dd_dir_free(&short_dir);
  dd_buf_free(&dir);
  dd_buf_free(&c);
  dd_buf_free(&old);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule),         cmocka_unit_test(test_long_terms_are_cut),
      cmocka_unit_test(test_counts_sorted), cmocka_unit_test(test_many_terms),
      cmocka_unit_test(test_sha256),       cmocka_unit_test(test_chunk_columns),
      cmocka_unit_test(test_chunk_entries), cmocka_unit_test(test_postings_settle),
      cmocka_unit_test(test_directory_chunks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
