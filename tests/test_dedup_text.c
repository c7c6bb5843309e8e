/* test_dedup_text.c — the dedup application's tokeniser and content hash
 * (apps/dedup/dedup_text.c, shared by the plugin and the CLI's check): the
 * documented rule (ASCII folding, maximal [a-z0-9] runs, other bytes
 * separate, terms cut at 64 bytes) and SHA-256 against known digests; and
 * the chunks of the index (apps/dedup/dedup_index.c): their columns and
 * entries, malformed ones refused, and the postings a term's chunks leave;
 * the buckets the chunks are grouped by, and the cells that hold them. */
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

/* dd_terms_any finds what dd_terms finds, in some order. */
static void test_terms_any(void **state) {
  (void)state;
  static char s[20000 * 7];
  size_t n = 0;
  for (int i = 0; i < 20000; i++) n += (size_t)snprintf(s + n, sizeof s - n, "t%d ", i % 3001);
  dd_terms_t a, b;
  assert_int_equal(dd_terms(s, n, &a), 0);
  assert_int_equal(dd_terms_any(s, n, &b), 0);
  assert_int_equal(a.n, 3001);
  assert_int_equal(b.n, a.n);
  for (size_t i = 0; i < b.n; i++) {
    size_t j = 0;
    while (j < a.n && strcmp(a.v[j].term, b.v[i].term) != 0) j++;
    assert_true(j < a.n);
    assert_int_equal(b.v[i].count, a.v[j].count);
  }
  dd_terms_free(&a);
  dd_terms_free(&b);
}

/* dd_postings_settle_any leaves what dd_postings_settle leaves, in some
 * order: chunks with repeated and removed postings, hashes that share their
 * first 8 bytes (the integer key) and hashes that do not. */
static void test_postings_settle_any(void **state) {
  (void)state;
  uint8_t h[7][DD_HASH_RAW];
  for (int k = 0; k < 7; k++) {
    memset(h[k], 0x40, DD_HASH_RAW);
    h[k][k < 4 ? 20 : 0] = (uint8_t)k; /* 0..3 differ after the key, 4..6 in it */
  }
  dd_buf_t c[3] = {{0}};
  char url[16];
  for (int i = 0; i < 3000; i++) {
    int ul = snprintf(url, sizeof url, "u%d", i % 250);
    char op = i % 5 == 3 ? '-' : '+';
    assert_int_equal(dd_chunk_add_inline(&c[i % 3], op, h[i % 7], url, (size_t)ul,
                                         op == '+' ? (uint64_t)(i % 9 + 1) : 0),
                     0);
  }
  dd_postings_t a = {0}, b = {0};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(dd_postings_apply(&a, c[k].p, c[k].n, NULL), 0);
    assert_int_equal(dd_postings_apply(&b, c[k].p, c[k].n, NULL), 0);
  }
  assert_int_equal(dd_postings_settle(&a), 0);
  assert_int_equal(dd_postings_settle_any(&b), 0);
  assert_true(a.n > 100);
  assert_int_equal(b.n, a.n);
  for (size_t i = 0; i < b.n; i++) {
    size_t j = 0;
    const dd_posting_t *y = &b.v[i];
    while (j < a.n && !(a.v[j].ulen == y->ulen && memcmp(a.v[j].url, y->url, y->ulen) == 0 &&
                        memcmp(a.v[j].hash, y->hash, DD_HASH_RAW) == 0))
      j++;
    assert_true(j < a.n);
    assert_int_equal(b.v[i].count, a.v[j].count);
  }
  dd_postings_free(&a);
  dd_postings_free(&b);
  for (int k = 0; k < 3; k++) dd_buf_free(&c[k]);
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
  assert_int_equal(ps.v[0].ulen, 1);
  assert_memory_equal(ps.v[0].url, "b", 1);
  assert_memory_equal(ps.v[0].hash, h2, DD_HASH_RAW);
  assert_int_equal(ps.v[0].count, 4);
  assert_int_equal(ps.v[1].ulen, 1);
  assert_memory_equal(ps.v[1].url, "c", 1);
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
  assert_int_equal(ps.v[0].ulen, 4);
  assert_memory_equal(ps.v[0].url, "u/bb", 4);
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

/* FNV-1a (64 bits: offset basis 14695981039346656037, prime 1099511628211)
 * modulo 1024, written out again here: a term's bucket names the row its
 * chunks are stored in, so dd_term_bucket must keep to it. */
static unsigned ref_bucket(const char *t, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)t[i];
    h *= 0x100000001b3ull;
  }
  return (unsigned)(h % 1024u);
}

/* Bucket cells: the bucket of a term (pinned: it is part of the stored
 * format), the bucket's row, and a cell's sections, each a term and its
 * chunk, read back and applied; malformed cells refused. */
static void test_bucket_cells(void **state) {
  (void)state;
  assert_int_equal(DD_BUCKETS, 1024);
  /* values computed apart from the code (Python, the same FNV-1a) */
  assert_int_equal(dd_term_bucket("hello", 5), 267);
  assert_int_equal(dd_term_bucket("license", 7), 452);
  assert_int_equal(dd_term_bucket("a", 1), 140);
  assert_int_equal(ref_bucket("hello", 5), 267);
  /* and against the loop above, over many terms and every byte */
  static char used[1024];
  memset(used, 0, sizeof used);
  size_t spread = 0;
  for (int i = 0; i < 5000; i++) {
    char t[16];
    int n = snprintf(t, sizeof t, "t%d", i);
    unsigned b = dd_term_bucket(t, (size_t)n);
    assert_int_equal(b, ref_bucket(t, (size_t)n));
    assert_true(b < DD_BUCKETS);
    if (!used[b]) spread++;
    used[b] = 1;
  }
  assert_true(spread > 900); /* 5000 terms reach nearly every bucket */
  char all[256];
  for (int i = 0; i < 256; i++) all[i] = (char)i;
  for (size_t n = 0; n <= sizeof all; n++) {
    assert_int_equal(dd_term_bucket(all, n), ref_bucket(all, n));
    assert_true(dd_term_bucket(all, n) < DD_BUCKETS);
  }
  /* the row of a bucket, and back; rows sort as the buckets */
  static const unsigned bs[] = {0, 1, 255, 256, 1023};
  char row[DD_BUCKET_ROW], prev[DD_BUCKET_ROW];
  for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
    unsigned b = 9999;
    dd_bucket_row(row, bs[i]);
    assert_int_equal(dd_bucket_of_row(row, sizeof row, &b), 0);
    assert_int_equal(b, bs[i]);
    if (i) assert_true(memcmp(prev, row, DD_BUCKET_ROW) < 0);
    memcpy(prev, row, DD_BUCKET_ROW);
  }
  dd_bucket_row(row, 256);
  assert_memory_equal(row, "\x01\x00", 2);
  unsigned b = 7;
  assert_int_equal(dd_bucket_of_row(row, 1, &b), -1);
  assert_int_equal(dd_bucket_of_row("\x01\x00\x00", 3, &b), -1);
  assert_int_equal(dd_bucket_of_row("", 0, &b), -1);
  assert_int_equal(dd_bucket_of_row("\x04\x00", 2, &b), -1); /* 1024 */
  assert_int_equal(dd_bucket_of_row("\xff\xff", 2, &b), -1);

  /* a run's directory and the chunks of four terms naming it */
  uint8_t h1[DD_HASH_RAW], h2[DD_HASH_RAW], h3[DD_HASH_RAW];
  memset(h1, 0x11, sizeof h1);
  memset(h2, 0x22, sizeof h2);
  memset(h3, 0x33, sizeof h3);
  dd_buf_t dir = {0};
  uint64_t nd = 0, r1, r2, r3;
  assert_int_equal(dd_dir_add(&dir, &nd, h1, "u/a", 3, &r1), 0);
  assert_int_equal(dd_dir_add(&dir, &nd, h2, "u/bb", 4, &r2), 0);
  assert_int_equal(dd_dir_add(&dir, &nd, h3, "u/c", 3, &r3), 0);
  char longest[DD_MAX_TERM + 1];
  memset(longest, 'q', sizeof longest);
  enum { NT = 4 };
  const char *terms[NT] = {"alpha", "beta", "gamma", longest};
  const size_t tls[NT] = {5, 4, 5, DD_MAX_TERM};
  dd_buf_t chunk[NT] = {{0}};
  assert_int_equal(dd_chunk_add(&chunk[0], '+', r1, 3), 0);
  assert_int_equal(dd_chunk_add(&chunk[0], '+', r2, 1), 0);
  assert_int_equal(dd_chunk_add(&chunk[1], '-', r1, 0), 0);
  assert_int_equal(dd_chunk_add(&chunk[2], '+', r3, 7), 0);
  for (int i = 0; i < 200; i++) /* a chunk over 127 bytes: a varint length of two */
    assert_int_equal(dd_chunk_add(&chunk[3], '+', r2, (uint64_t)i + 1), 0);
  assert_true(chunk[3].n > 127);
  dd_buf_t cell = {0};
  size_t ends[NT]; /* where each section ends */
  for (int i = 0; i < NT; i++) {
    assert_int_equal(dd_bucket_add(&cell, terms[i], tls[i], chunk[i].p, chunk[i].n), 0);
    ends[i] = cell.n;
  }
  assert_int_equal((unsigned char)cell.p[0], DD_CHUNK_BUCKET);
  assert_int_equal(ends[0], 1 + 1 + 5 + 1 + chunk[0].n);
  assert_int_equal(cell.n, ends[2] + 1 + DD_MAX_TERM + 2 + chunk[3].n);
  /* read back and applied with the directory: each term's postings */
  dd_dir_t d = {0};
  assert_int_equal(dd_dir_parse(&d, dir.p, dir.n), 0);
  dd_postings_t ps = {0};
  size_t pos = 0, tl, cn;
  const char *t, *c;
  for (int i = 0; i < NT; i++) {
    assert_int_equal(dd_bucket_next(cell.p, cell.n, &pos, &t, &tl, &c, &cn), 1);
    assert_int_equal(pos, ends[i]);
    assert_int_equal(tl, tls[i]);
    assert_memory_equal(t, terms[i], tl);
    assert_int_equal(cn, chunk[i].n);
    assert_memory_equal(c, chunk[i].p, cn);
    assert_true(c > cell.p && c + cn <= cell.p + cell.n); /* into the cell */
    dd_postings_clear(&ps);
    assert_int_equal(dd_postings_apply(&ps, c, cn, &d), 0);
    assert_int_equal(dd_postings_settle(&ps), 0);
    if (i == 0) {
      assert_int_equal(ps.n, 2);
      assert_int_equal(ps.v[0].ulen, 3);
      assert_memory_equal(ps.v[0].url, "u/a", 3);
      assert_memory_equal(ps.v[0].hash, h1, DD_HASH_RAW);
      assert_int_equal(ps.v[0].count, 3);
      assert_int_equal(ps.v[1].ulen, 4);
      assert_memory_equal(ps.v[1].url, "u/bb", 4);
      assert_memory_equal(ps.v[1].hash, h2, DD_HASH_RAW);
      assert_int_equal(ps.v[1].count, 1);
    } else if (i == 1) {
      assert_int_equal(ps.n, 0); /* a removal alone leaves nothing */
    } else if (i == 2) {
      assert_int_equal(ps.n, 1);
      assert_int_equal(ps.v[0].ulen, 3);
      assert_memory_equal(ps.v[0].url, "u/c", 3);
      assert_memory_equal(ps.v[0].hash, h3, DD_HASH_RAW);
      assert_int_equal(ps.v[0].count, 7);
    } else {
      assert_int_equal(ps.n, 1); /* the last of its 200 entries wins */
      assert_int_equal(ps.v[0].ulen, 4);
      assert_memory_equal(ps.v[0].url, "u/bb", 4);
      assert_int_equal(ps.v[0].count, 200);
    }
  }
  assert_int_equal(dd_bucket_next(cell.p, cell.n, &pos, &t, &tl, &c, &cn), 0);
  /* no term: empty, or a byte too long; the cell is left as it was */
  dd_buf_t empty = {0};
  assert_int_equal(dd_bucket_add(&empty, "", 0, chunk[0].p, chunk[0].n), -1);
  assert_int_equal(dd_bucket_add(&empty, longest, DD_MAX_TERM + 1, chunk[0].p, chunk[0].n), -1);
  assert_int_equal(empty.n, 0);
  size_t was = cell.n;
  assert_int_equal(dd_bucket_add(&cell, longest, DD_MAX_TERM + 1, chunk[0].p, chunk[0].n), -1);
  assert_int_equal(cell.n, was);
  /* not a bucket's cell: empty, or another first byte */
  pos = 0;
  assert_int_equal(dd_bucket_next(cell.p, 0, &pos, &t, &tl, &c, &cn), -1);
  dd_buf_t other = {0};
  assert_int_equal(dd_buf_put(&other, cell.p, cell.n), 0);
  other.p[0] = DD_CHUNK_DIRECTORY;
  pos = 0;
  assert_int_equal(dd_bucket_next(other.p, other.n, &pos, &t, &tl, &c, &cn), -1);
  /* a term length of 0, or over DD_MAX_TERM */
  other.p[0] = DD_CHUNK_BUCKET;
  other.p[1] = 0;
  pos = 0;
  assert_int_equal(dd_bucket_next(other.p, other.n, &pos, &t, &tl, &c, &cn), -1);
  other.p[1] = DD_MAX_TERM + 1;
  pos = 0;
  assert_int_equal(dd_bucket_next(other.p, other.n, &pos, &t, &tl, &c, &cn), -1);
  /* every cut: at a section's end (or after the first byte) the sections
   * before it and no more, anywhere inside a section malformed, after the
   * sections before the cut */
  for (size_t cut = 1; cut < cell.n; cut++) {
    size_t whole = 0;
    int boundary = cut == 1;
    for (int i = 0; i < NT; i++) {
      if (ends[i] <= cut) whole++;
      if (ends[i] == cut) boundary = 1;
    }
    size_t got = 0;
    int rc;
    pos = 0;
    while ((rc = dd_bucket_next(cell.p, cut, &pos, &t, &tl, &c, &cn)) == 1) {
      assert_true(got < whole);
      assert_memory_equal(t, terms[got], tls[got]);
      got++;
    }
    assert_int_equal(got, whole);
    assert_int_equal(rc, boundary ? 0 : -1);
  }
  dd_buf_free(&other);
  dd_buf_free(&cell);
  for (int i = 0; i < NT; i++) dd_buf_free(&chunk[i]);
  dd_postings_free(&ps);
  dd_dir_free(&d);
  dd_buf_free(&dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule),         cmocka_unit_test(test_long_terms_are_cut),
      cmocka_unit_test(test_counts_sorted), cmocka_unit_test(test_many_terms),
      cmocka_unit_test(test_sha256),       cmocka_unit_test(test_chunk_columns),
      cmocka_unit_test(test_chunk_entries), cmocka_unit_test(test_postings_settle),
      cmocka_unit_test(test_terms_any),    cmocka_unit_test(test_postings_settle_any),
      cmocka_unit_test(test_directory_chunks), cmocka_unit_test(test_bucket_cells),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
