/* test_metacache.c — the store's cache of meta records (core/metacache.h):
 * hits, misses and negative entries, replacement, erase, the byte budget
 * under eviction; and, through the embedded store, that a write path served
 * by a tiny cache (constant eviction) still sees every committed write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/metacache.h"
#include "testutil.h"

static void test_hit_miss_negative(void **state) {
  (void)state;
  pc_mcache_t *c = pc_mcache_create(1 << 20);
  assert_non_null(c);
  pc_buf_t out = {0};
  int present = -1;
  assert_int_equal(pc_mcache_get(c, "mk1", 3, &out, &present), 0);
  pc_mcache_put(c, "mk1", 3, "value-1", 7, 1);
  assert_int_equal(pc_mcache_get(c, "mk1", 3, &out, &present), 1);
  assert_int_equal(present, 1);
  assert_int_equal(out.len, 7);
  assert_memory_equal(out.p, "value-1", 7);
  /* replaced */
  pc_mcache_put(c, "mk1", 3, "v2", 2, 1);
  assert_int_equal(pc_mcache_get(c, "mk1", 3, &out, &present), 1);
  assert_int_equal(out.len, 2);
  assert_memory_equal(out.p, "v2", 2);
  /* a key known to have no record */
  pc_mcache_put(c, "mk2", 3, NULL, 0, 0);
  assert_int_equal(pc_mcache_get(c, "mk2", 3, &out, &present), 1);
  assert_int_equal(present, 0);
  /* keys differing in length or one byte are distinct */
  assert_int_equal(pc_mcache_get(c, "mk", 2, &out, &present), 0);
  assert_int_equal(pc_mcache_get(c, "mk3", 3, &out, &present), 0);
  pc_mcache_erase(c, "mk1", 3);
  assert_int_equal(pc_mcache_get(c, "mk1", 3, &out, &present), 0);
  pc_mcache_stats_t st;
  pc_mcache_stats(c, &st);
  assert_int_equal(st.entries, 1);
  assert_int_equal(st.hits, 3);
  assert_int_equal(st.misses, 4);
  pc_buf_free(&out);
  pc_mcache_destroy(c);
  assert_null(pc_mcache_create(0)); /* 0 bytes: no cache */
}

/* Many more entries than fit: the budget holds, the newest survive, and
 * whatever is found is exactly what was put last under that key. */
static void test_eviction_keeps_budget(void **state) {
  (void)state;
  const size_t budget = 64 * 1024;
  pc_mcache_t *c = pc_mcache_create(budget);
  assert_non_null(c);
  char key[32], val[200];
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 20000; i++) {
      int kl = snprintf(key, sizeof key, "m%08d", i);
      int vl = snprintf(val, sizeof val, "%d:%d:%0100d", round, i, i);
      pc_mcache_put(c, key, (size_t)kl, val, (size_t)vl, 1);
    }
  pc_mcache_stats_t st;
  pc_mcache_stats(c, &st);
  assert_true(st.bytes <= budget);
  assert_true(st.entries > 0 && st.entries < 20000);
  pc_buf_t out = {0};
  int present, found = 0;
  for (int i = 0; i < 20000; i++) {
    int kl = snprintf(key, sizeof key, "m%08d", i);
    if (!pc_mcache_get(c, key, (size_t)kl, &out, &present)) continue;
    found++;
    int vl = snprintf(val, sizeof val, "1:%d:%0100d", i, i);
    assert_int_equal(present, 1);
    assert_int_equal(out.len, (size_t)vl);
    assert_memory_equal(out.p, val, (size_t)vl);
  }
  assert_int_equal((size_t)found, st.entries);
  /* the last ones put are there */
  int kl = snprintf(key, sizeof key, "m%08d", 19999);
  assert_int_equal(pc_mcache_get(c, key, (size_t)kl, &out, &present), 1);
  /* an entry larger than a shard's budget is not kept */
  char *big = malloc(budget);
  assert_non_null(big);
  memset(big, 'x', budget);
  pc_mcache_put(c, "big", 3, big, budget, 1);
  assert_int_equal(pc_mcache_get(c, "big", 3, &out, &present), 0);
  free(big);
  pc_buf_free(&out);
  pc_mcache_destroy(c);
}

/* The embedded store with a cache far smaller than its cells: counters
 * incremented by many transactions over many rows end exact, and a fresh
 * process (no cache) reads the same. */
static void test_store_tiny_cache(void **state) {
  (void)state;
  if (tu_cluster_mode()) skip(); /* the tablets' caches are their own */
  char *dir = tu_mkdtemp("mcache");
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  pc_options_set_meta_cache_bytes(o, 16 * 1024); /* a few entries per shard */
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  assert_non_null(db);
  enum { ROWS = 300, PASSES = 4 };
  char row[16], val[32];
  for (int p = 0; p < PASSES; p++)
    for (int i = 0; i < ROWS; i++) {
      pc_txn_t *t = pc_txn_begin(db, &err);
      assert_non_null(t);
      snprintf(row, sizeof row, "r%04d", i);
      char *v = tu_get(t, "mc", row, "n");
      long n = v ? strtol(v, NULL, 10) : 0;
      free(v);
      snprintf(val, sizeof val, "%ld", n + 1);
      tu_set(t, "mc", row, "n", val);
      if (i % 3 == 0) tu_set(t, "mc", "sum", "n", val); /* two rows: two-phase */
      assert_int_equal(pc_txn_commit(t, &err), PC_OK);
      pc_txn_destroy(t);
    }
  pc_db_close(db);
  pc_options_set_meta_cache_bytes(o, 0);
  db = pc_db_open(o, dir, &err);
  assert_non_null(db);
  pc_txn_t *t = pc_txn_begin(db, &err);
  for (int i = 0; i < ROWS; i++) {
    snprintf(row, sizeof row, "r%04d", i);
    char *v = tu_get(t, "mc", row, "n");
    assert_non_null(v);
    assert_string_equal(v, "4");
    free(v);
  }
  char *sum = tu_get(t, "mc", "sum", "n");
  assert_non_null(sum);
  assert_string_equal(sum, "4");
  free(sum);
  pc_txn_destroy(t);
  pc_db_close(db);
  pc_options_destroy(o);
  tu_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hit_miss_negative),
      cmocka_unit_test(test_eviction_keeps_budget),
      cmocka_unit_test(test_store_tiny_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
