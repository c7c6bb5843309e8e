/* test_dedup_text.c — the dedup application's tokeniser and content hash
 * (apps/dedup/dedup_text.c, shared by the plugin and the CLI's check): the
 * documented rule (ASCII folding, maximal [a-z0-9] runs, other bytes
 * separate, terms cut at 64 bytes) and SHA-256 against known digests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule),         cmocka_unit_test(test_long_terms_are_cut),
      cmocka_unit_test(test_counts_sorted), cmocka_unit_test(test_many_terms),
      cmocka_unit_test(test_sha256),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
