/* test_notifyindex.c — the embedded store's in-memory index of live
 * notification keys (core/notifyindex.h): entries come back in LevelDB's
 * (bytewise) order across buckets whatever the order they were added in; a
 * put of a present key replaces its kind; deletes (of present and absent
 * keys) leave the rest; a copy honours its start, end, prefix and count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/notifyindex.h"
#include "testutil.h"

/* A notification-like key: 'n', bucket (2 bytes), then tail. */
static size_t mk(char *out, unsigned bucket, const char *tail) {
  out[0] = 'n';
  out[1] = (char)(bucket >> 8);
  out[2] = (char)bucket;
  size_t n = strlen(tail);
  memcpy(out + 3, tail, n);
  return 3 + n;
}

/* The keys of a copy, as "bucket:tail/kind" joined by spaces, into s. */
static void dump(const pc_buf_t *page, char *s, size_t cap) {
  size_t pos = 0, kl, at = 0;
  const char *k;
  char kind;
  s[0] = '\0';
  while (pc_nindex_next(page, &pos, &k, &kl, &kind) && at < cap) {
    unsigned b = (unsigned)(unsigned char)k[1] << 8 | (unsigned char)k[2];
    at += (size_t)snprintf(s + at, cap - at, "%s%u:%.*s/%d", at ? " " : "", b, (int)(kl - 3),
                           k + 3, kind);
  }
}

static void copy_all(pc_nindex_t *x, const char *from, size_t flen, size_t plen, const char *end,
                     size_t elen, size_t max, char *s, size_t cap, long want) {
  pc_buf_t page = {0};
  long n = pc_nindex_copy(x, from, flen, plen, end, elen, max, &page);
  assert_int_equal(n, want);
  dump(&page, s, cap);
  pc_buf_free(&page);
}

static void test_order_replace_delete(void **state) {
  (void)state;
  pc_nindex_t *x = pc_nindex_create();
  assert_non_null(x);
  char k[64];
  /* added out of order, over three buckets */
  const struct {
    unsigned b;
    const char *t;
    char kind;
  } in[] = {{700, "b", 1}, {3, "zz", 2}, {700, "a", 1}, {1023, "q", 3}, {3, "a", 1}, {700, "ab", 2}};
  for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
    size_t n = mk(k, in[i].b, in[i].t);
    assert_int_equal(pc_nindex_put(x, k, n, in[i].kind), 0);
  }
  assert_int_equal(pc_nindex_count(x), 6);
  char s[512];
  copy_all(x, NULL, 0, 0, NULL, 0, 100, s, sizeof s, 6);
  assert_string_equal(s, "3:a/1 3:zz/2 700:a/1 700:ab/2 700:b/1 1023:q/3");
  /* a put of a present key replaces its kind only */
  size_t n = mk(k, 700, "ab");
  assert_int_equal(pc_nindex_put(x, k, n, 3), 0);
  assert_int_equal(pc_nindex_count(x), 6);
  /* deletes: a present key, an absent one */
  pc_nindex_del(x, k, mk(k, 3, "zz"));
  pc_nindex_del(x, k, mk(k, 5, "nothing"));
  assert_int_equal(pc_nindex_count(x), 5);
  copy_all(x, NULL, 0, 0, NULL, 0, 100, s, sizeof s, 5);
  assert_string_equal(s, "3:a/1 700:a/1 700:ab/3 700:b/1 1023:q/3");
  pc_nindex_destroy(x);
}

static void test_copy_bounds(void **state) {
  (void)state;
  pc_nindex_t *x = pc_nindex_create();
  char k[64], from[64], end[64];
  const char *tails[] = {"cell1~1", "cell1~2", "cell1~3", "cell2~1", "zzz"};
  for (unsigned b = 10; b < 13; b++)
    for (size_t i = 0; i < 5; i++) assert_int_equal(pc_nindex_put(x, k, mk(k, b, tails[i]), 1), 0);
  char s[1024];
  /* from a key inside bucket 10 (inclusive), until the start of bucket 12 */
  size_t fl = mk(from, 10, "cell1~2"), el = mk(end, 12, "");
  copy_all(x, from, fl, 0, end, el, 100, s, sizeof s, 9);
  assert_string_equal(s, "10:cell1~2/1 10:cell1~3/1 10:cell2~1/1 10:zzz/1 11:cell1~1/1 "
                         "11:cell1~2/1 11:cell1~3/1 11:cell2~1/1 11:zzz/1");
  /* at most max */
  copy_all(x, from, fl, 0, end, el, 3, s, sizeof s, 3);
  assert_string_equal(s, "10:cell1~2/1 10:cell1~3/1 10:cell2~1/1");
  /* a prefix: one cell's keys from a point on, in one bucket */
  fl = mk(from, 11, "cell1~2");
  copy_all(x, from, fl, fl - 1, NULL, 0, 100, s, sizeof s, 2);
  assert_string_equal(s, "11:cell1~2/1 11:cell1~3/1");
  /* nothing past the last key */
  fl = mk(from, 12, "zzzz");
  copy_all(x, from, fl, 0, NULL, 0, 100, s, sizeof s, 0);
  assert_string_equal(s, "");
  pc_nindex_destroy(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_replace_delete),
      cmocka_unit_test(test_copy_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
