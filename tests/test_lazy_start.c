/* test_lazy_start.c — transactions whose start timestamp is taken at their
 * first use (pc_options_set_lazy_start): the snapshot is fixed by the first
 * read or scan (in cluster mode the tablet serving that read takes the
 * timestamp), or at commit for a transaction that reads nothing; from then on
 * it is snapshot isolation as usual. Runs embedded, and as
 * cluster_test_lazy_start against real daemons (GET_FRESH on the tablets). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/failpoint.h"
#include "testutil.h"

#define T "lazy"

static uint64_t commit_one(pc_db_t *db, const char *row, const char *col, const char *val) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  tu_set(t, T, row, col, val);
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  uint64_t c = pc_txn_commit_ts(t);
  assert_true(c > pc_txn_start_ts(t));
  pc_txn_destroy(t);
  return c;
}

static void assert_value(pc_txn_t *t, const char *row, const char *col, const char *want) {
  char *v = tu_get(t, T, row, col);
  if (!want) {
    assert_null(v);
    return;
  }
  assert_non_null(v);
  assert_string_equal(v, want);
  free(v);
}

/* A commit that finishes after begin but before the first read is in the
 * snapshot; one that finishes after the first read is not. */
static void test_snapshot_at_first_read(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("lazy-first-read");
  pc_db_t *db = tu_open(dir, 0);
  commit_one(db, "x", "c", "1");
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  assert_int_equal(pc_txn_start_ts(t), 0);
  uint64_t c2 = commit_one(db, "x", "c", "2");
  assert_value(t, "x", "c", "2");
  assert_true(pc_txn_start_ts(t) > c2);
  uint64_t start = pc_txn_start_ts(t);
  commit_one(db, "x", "c", "3");
  commit_one(db, "y", "c", "new");
  assert_value(t, "x", "c", "2");
  assert_value(t, "y", "c", NULL);
  assert_int_equal(pc_txn_start_ts(t), start);
  assert_int_equal(pc_txn_commit(t, &err), PC_OK); /* read-only */
  pc_txn_destroy(t);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A first read that finds nothing still fixes the snapshot. */
static void test_first_read_not_found(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("lazy-not-found");
  pc_db_t *db = tu_open(dir, 0);
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  assert_value(t, "r2", "c", NULL);
  uint64_t start = pc_txn_start_ts(t);
  assert_true(start != 0);
  uint64_t c = commit_one(db, "r2", "c", "late");
  assert_true(c > start);
  assert_value(t, "r2", "c", NULL);
  pc_txn_destroy(t);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* Transactions that read nothing take start_ts at commit: one row (the
 * one-phase path) and rows on several tablets (two-phase). */
static void test_write_only(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("lazy-write-only");
  pc_db_t *db = tu_open(dir, 0);
  pc_error_t err;
  for (int rows = 1; rows <= 3; rows += 2) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    assert_non_null(t);
    static const char *const names[] = {"a", "k1", "x"}; /* one per tablet in cluster mode */
    for (int i = 0; i < rows; i++) tu_set(t, T, names[i], "w", rows == 1 ? "one" : "three");
    assert_int_equal(pc_txn_start_ts(t), 0);
    assert_value(t, names[0], "w", rows == 1 ? "one" : "three"); /* own write: no timestamp */
    assert_int_equal(pc_txn_start_ts(t), 0);
    assert_int_equal(pc_txn_commit(t, &err), PC_OK);
    assert_true(pc_txn_start_ts(t) != 0);
    assert_true(pc_txn_commit_ts(t) > pc_txn_start_ts(t));
    pc_txn_destroy(t);
  }
  pc_txn_t *r = pc_txn_begin(db, &err);
  assert_non_null(r);
  assert_value(r, "a", "w", "three");
  assert_value(r, "k1", "w", "three");
  assert_value(r, "x", "w", "three");
  pc_txn_destroy(r);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A write-only transaction takes its start_ts at commit: it lies after
 * every commit that finished before, so there is nothing to conflict with,
 * and commit_ts follows it. */
static void test_write_only_start_at_commit(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("lazy-write-only");
  pc_db_t *db = tu_open(dir, 0);
  uint64_t prev_commit = 0;
  for (int i = 0; i < 3; i++) {
    pc_error_t err;
    uint64_t before;
    assert_int_equal(pc_db_timestamp(db, 1000, &before, &err), PC_OK);
    pc_txn_t *t = pc_txn_begin(db, &err);
    assert_non_null(t);
    tu_set(t, T, "b", "c", i == 0 ? "0" : i == 1 ? "1" : "2");
    if (i == 2) tu_set(t, T, "b2", "c", "other row"); /* two rows: prewrite and commit */
    assert_int_equal(pc_txn_start_ts(t), 0);
    assert_int_equal(pc_txn_commit(t, &err), PC_OK);
    uint64_t s = pc_txn_start_ts(t), c = pc_txn_commit_ts(t);
    assert_true(s > before && s > prev_commit);
    assert_true(c > s);
    prev_commit = c;
    pc_txn_destroy(t);
  }
  pc_error_t err;
  pc_txn_t *r = pc_txn_begin(db, &err);
  assert_value(r, "b", "c", "2");
  assert_value(r, "b2", "c", "other row");
  pc_txn_destroy(r);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A one-row commit whose store write fails after (or before) it was
 * applied is settled on its start_ts: committed stands, not applied is
 * rolled back. The store's failpoints are in this process only when
 * embedded. */
static void test_one_row_commit_settled(void **state) {
  (void)state;
  if (tu_cluster_mode()) skip();
  char *dir = tu_mkdtemp("lazy-settle");
  pc_db_t *db = tu_open(dir, 0);
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure("store.after_apply=1*return", &err), PC_OK);
  pc_txn_t *t = pc_txn_begin(db, &err);
  tu_set(t, T, "b", "c", "applied");
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  pc_txn_destroy(t);
  assert_int_equal(pc_failpoints_configure("store.before_apply=1*return", &err), PC_OK);
  t = pc_txn_begin(db, &err);
  tu_set(t, T, "b", "c", "lost");
  assert_int_not_equal(pc_txn_commit(t, &err), PC_OK);
  assert_true(pc_txn_start_ts(t) != 0);
  pc_txn_destroy(t);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  pc_txn_t *r = pc_txn_begin(db, &err);
  assert_value(r, "b", "c", "applied");
  pc_txn_destroy(r);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* Lost update (Hermitage P4) is still prevented: two transactions read the
 * same cell, both write it; the second to commit conflicts. */
static void test_lost_update_prevented(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("lazy-p4");
  pc_db_t *db = tu_open(dir, 0);
  commit_one(db, "acct10", "bal", "100");
  pc_error_t err;
  pc_txn_t *t1 = pc_txn_begin(db, &err), *t2 = pc_txn_begin(db, &err);
  assert_non_null(t1);
  assert_non_null(t2);
  assert_value(t1, "acct10", "bal", "100");
  assert_value(t2, "acct10", "bal", "100");
  tu_set(t1, T, "acct10", "bal", "110");
  tu_set(t2, T, "acct10", "bal", "120");
  assert_int_equal(pc_txn_commit(t1, &err), PC_OK);
  assert_int_equal(pc_txn_commit(t2, &err), PC_CONFLICT);
  pc_txn_destroy(t1);
  pc_txn_destroy(t2);
  pc_txn_t *r = pc_txn_begin(db, &err);
  assert_value(r, "acct10", "bal", "110");
  pc_txn_destroy(r);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* The first read meets the lock of a live transaction (its commit stopped
 * before the primary): it reports PC_LOCKED after its timeout, with the
 * snapshot taken; once the owner's session is gone the same snapshot reads
 * the old value. */
static void test_first_read_meets_lock(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("lazy-lock");
  pc_db_t *db = tu_open_ex(dir, 600000, 0);
  commit_one(db, "r1", "c", "old");
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure("txn.commit.before_primary=return", &err), PC_OK);
  pc_txn_t *w = pc_txn_begin(db, &err);
  assert_non_null(w);
  tu_set(w, T, "r1", "c", "new");
  tu_set(w, T, "x", "c", "new"); /* two rows: a two-phase commit leaves locks */
  assert_int_equal(pc_txn_commit(w, &err), PC_IO_ERROR);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  uint64_t locked_start = pc_txn_start_ts(w);
  pc_txn_destroy(w);

  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, 250);
  char *v = NULL;
  size_t n = 0;
  assert_int_equal(pc_txn_get(t, T, "r1", 2, "c", 1, &v, &n, &err), PC_LOCKED);
  assert_null(v);
  assert_true(pc_txn_start_ts(t) > locked_start);
  pc_txn_destroy(t);
  pc_db_close(db);

  db = tu_open_ex(dir, 600000, 0); /* a new session: the old owner is dead */
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  assert_value(t, "r1", "c", "old");
  assert_value(t, "x", "c", NULL);
  pc_txn_destroy(t);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A scan takes the snapshot when it is opened. */
static void test_scan_takes_start(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("lazy-scan");
  pc_db_t *db = tu_open(dir, 0);
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  uint64_t c = commit_one(db, "b", "c", "v");
  pc_scan_t *sc = pc_txn_scan(t, T, NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  assert_true(pc_txn_start_ts(t) > c);
  commit_one(db, "k5", "c", "after");
  int rows = 0;
  while (pc_scan_next(sc, &err) == PC_OK) {
    size_t rl;
    const char *row = pc_scan_row(sc, &rl);
    assert_int_equal(rl, 1);
    assert_memory_equal(row, "b", 1);
    rows++;
  }
  assert_int_equal(err.code, PC_OK);
  assert_int_equal(rows, 1);
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  pc_db_close(db);
  tu_rmtree(dir);
}

int main(void) {
  setenv("PERCOLATOR_TEST_LAZY", "1", 1); /* every tu_open takes start_ts lazily */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_snapshot_at_first_read), cmocka_unit_test(test_first_read_not_found),
      cmocka_unit_test(test_write_only),             cmocka_unit_test(test_lost_update_prevented),
      cmocka_unit_test(test_first_read_meets_lock),  cmocka_unit_test(test_scan_takes_start),
      cmocka_unit_test(test_write_only_start_at_commit),              cmocka_unit_test(test_one_row_commit_settled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
