/* test_recent.c — what this process knows of its own commits by cell
 * (core/recent.h): what it records (puts and deletes, not notifications),
 * what it refuses (a cell committed after the start, not at or before it),
 * that the newest commit of a cell is kept, that cells whose bytes run
 * together alike stay apart, that an empty or absent table refuses nothing;
 * that a commit waits for another in flight with one of its cells, and then
 * sees its outcome, and for none other; that a wait is bounded. The refusal
 * in a cluster's commit is in test_cluster. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "core/recent.h"

static pc_mutation_t put(const char *table, const char *row, const char *col) {
  return (pc_mutation_t){{table, row, strlen(row), col, strlen(col)}, PC_WRITE_PUT, "v", 1, 0};
}

/* A commit of m[0..n) at commit_ts, begun and ended at once. */
static void record(pc_recent_t *r, const pc_mutation_t *m, size_t n, uint64_t commit_ts) {
  pc_recent_commit_t *c = pc_recent_begin(r, m, n, 0);
  assert_non_null(c);
  pc_recent_end(c, commit_ts);
}

/* pc_recent_conflict of a commit of m[0..n) that starts at start_ts and fails. */
static size_t conflict(pc_recent_t *r, const pc_mutation_t *m, size_t n, uint64_t start_ts,
                       uint64_t *at) {
  pc_recent_commit_t *c = pc_recent_begin(r, m, n, 0);
  assert_non_null(c);
  size_t i = pc_recent_conflict(c, start_ts, at);
  pc_recent_end(c, 0);
  return i;
}

static void test_records_and_refuses(void **state) {
  (void)state;
  pc_recent_t *r = pc_recent_create();
  assert_non_null(r);
  pc_mutation_t m[3] = {put("t", "r1", "c"), put("t", "r2", "c"), put("t", "r3", "c")};
  m[1].kind = PC_WRITE_DELETE;
  m[2].kind = PC_WRITE_NOTIFY; /* writes no version: never recorded */
  uint64_t at = 0;
  assert_int_equal(conflict(r, m, 3, 100, &at), 3); /* empty */
  record(r, m, 3, 200);
  assert_int_equal(conflict(r, m, 3, 150, &at), 0);
  assert_int_equal(at, 200);
  assert_int_equal(conflict(r, m + 1, 2, 150, &at), 0); /* the delete */
  assert_int_equal(conflict(r, m + 2, 1, 150, &at), 1); /* the notification */
  assert_int_equal(conflict(r, m, 3, 200, &at), 3);      /* started at it: later */
  assert_int_equal(conflict(r, m, 3, 250, &at), 3);
  /* the newest commit of a cell is kept, an older one does not replace it */
  record(r, m, 1, 300);
  record(r, m, 1, 120);
  assert_int_equal(conflict(r, m, 1, 250, &at), 0);
  assert_int_equal(at, 300);
  pc_recent_destroy(r);
}

static void test_cells_stay_apart(void **state) {
  (void)state;
  pc_recent_t *r = pc_recent_create();
  assert_non_null(r);
  pc_mutation_t a = put("t", "ab", "c"), b = put("t", "a", "bc"), c = put("ta", "b", "c"),
                d = put("t", "ab", "c");
  record(r, &a, 1, 500);
  uint64_t at = 0;
  assert_int_equal(conflict(r, &b, 1, 100, &at), 1);
  assert_int_equal(conflict(r, &c, 1, 100, &at), 1);
  assert_int_equal(conflict(r, &d, 1, 100, &at), 0); /* the same cell */
  /* many cells: a direct-mapped table forgets the few whose slots a later
   * one took (about n*n/2/PC_RECENT_SLOTS of n), never refuses one it was
   * not given */
  char rows[1000][16];
  pc_mutation_t many[1000];
  for (int i = 0; i < 1000; i++) {
    snprintf(rows[i], sizeof rows[i], "row%d", i);
    many[i] = put("t", rows[i], "c");
  }
  record(r, many, 999, 700);
  int found = 0;
  for (int i = 0; i < 999; i++) found += conflict(r, &many[i], 1, 600, &at) == 0;
  assert_true(found >= 950);
  assert_int_equal(conflict(r, &many[999], 1, 600, &at), 1);
  pc_recent_destroy(r);
}

static void test_absent_table(void **state) {
  (void)state;
  pc_mutation_t m = put("t", "r", "c");
  uint64_t at = 0;
  /* embedded: no table, nothing to do */
  assert_null(pc_recent_begin(NULL, &m, 1, 1000));
  assert_int_equal(pc_recent_conflict(NULL, 5, &at), SIZE_MAX);
  pc_recent_end(NULL, 10);
  pc_recent_destroy(NULL);
}

/* Another commit, of v->m[0..n), that starts at 100 and fails: the index of
 * the first of its cells it found committed after its start (v->n: none),
 * and that commit's timestamp. Run in a thread of its own, or in this one. */
typedef struct rival {
  pc_recent_t *r;
  const pc_mutation_t *m;
  size_t n;
  uint32_t wait_ms;
  size_t lost;
  uint64_t at;
} rival_t;

static void *rival_commit(void *arg) {
  rival_t *v = arg;
  pc_recent_commit_t *c = pc_recent_begin(v->r, v->m, v->n, v->wait_ms);
  v->lost = pc_recent_conflict(c, 100, &v->at);
  pc_recent_end(c, 0);
  return NULL;
}

/* Whether the rival's thread is still in pc_recent_begin after a while
 * (it waits on a condition variable: it cannot have ended by then unless
 * it did not wait). */
static int still_waiting(pthread_t t) {
  pc_sleep_ms(200);
  return pthread_tryjoin_np(t, NULL) != 0;
}

static void test_waits_for_a_commit_in_flight(void **state) {
  (void)state;
  pc_recent_t *r = pc_recent_create();
  assert_non_null(r);
  pc_mutation_t a[2] = {put("t", "x", "c"), put("t", "y", "c")};
  pc_mutation_t b[2] = {put("t", "w", "c"), put("t", "y", "c")}; /* y in common */
  pc_mutation_t d[1] = {put("t", "z", "c")};                    /* nothing in common */
  /* a commit that succeeds: the rival waits, then loses to it before its prewrite */
  pc_recent_commit_t *first = pc_recent_begin(r, a, 2, 0);
  rival_t v = {r, b, 2, 60000, 0, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, rival_commit, &v), 0);
  assert_true(still_waiting(t));
  /* another commit, of other cells, does not wait */
  rival_t other = {r, d, 1, 60000, 0, 0};
  rival_commit(&other);
  assert_int_equal(other.lost, 1);
  pc_recent_end(first, 200);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(v.lost, 1); /* y */
  assert_int_equal(v.at, 200);
  /* a commit that fails: the rival waits, then goes ahead */
  pc_mutation_t e[1] = {put("t", "v", "c")}, f[1] = {put("t", "v", "c")};
  first = pc_recent_begin(r, e, 1, 0);
  rival_t u = {r, f, 1, 60000, 0, 0};
  assert_int_equal(pthread_create(&t, NULL, rival_commit, &u), 0);
  assert_true(still_waiting(t));
  pc_recent_end(first, 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(u.lost, 1); /* none known */
  pc_recent_destroy(r);
}

static void test_wait_is_bounded(void **state) {
  (void)state;
  pc_recent_t *r = pc_recent_create();
  assert_non_null(r);
  pc_mutation_t a[1] = {put("t", "x", "c")};
  pc_recent_commit_t *first = pc_recent_begin(r, a, 1, 0);
  /* a commit that never ends: the rival stops waiting, takes nothing,
   * and goes ahead (the store decides) */
  rival_t v = {r, a, 1, 50, 0, 0};
  rival_commit(&v);
  assert_int_equal(v.lost, 1);
  /* which did not take the cell from the first: a third still waits */
  rival_t w = {r, a, 1, 60000, 0, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, rival_commit, &w), 0);
  assert_true(still_waiting(t));
  pc_recent_end(first, 300);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(w.lost, 0);
  assert_int_equal(w.at, 300);
  /* notifications alone take no cell: a commit of one never waits */
  pc_mutation_t n[1] = {put("t", "x", "c")};
  n[0].kind = PC_WRITE_NOTIFY;
  first = pc_recent_begin(r, a, 1, 0);
  rival_t nv = {r, n, 1, 60000, 0, 0};
  rival_commit(&nv);
  assert_int_equal(nv.lost, 1);
  pc_recent_end(first, 0);
  pc_recent_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_records_and_refuses),
      cmocka_unit_test(test_cells_stay_apart),
      cmocka_unit_test(test_absent_table),
      cmocka_unit_test(test_waits_for_a_commit_in_flight),
      cmocka_unit_test(test_wait_is_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
