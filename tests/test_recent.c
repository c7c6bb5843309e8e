/* test_recent.c — the table of this process's newest commits by cell
 * (core/recent.h): what it records (puts and deletes, not notifications),
 * what it refuses (a cell committed after the start, not at or before it),
 * that the newest commit of a cell is kept, that cells whose bytes run
 * together alike stay apart, and that an empty or absent table refuses
 * nothing. The refusal in a cluster's commit is in test_cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/recent.h"

static pc_mutation_t put(const char *table, const char *row, const char *col) {
  return (pc_mutation_t){{table, row, strlen(row), col, strlen(col)}, PC_WRITE_PUT, "v", 1, 0};
}

static void test_records_and_refuses(void **state) {
  (void)state;
  pc_recent_t *r = pc_recent_create();
  assert_non_null(r);
  pc_mutation_t m[3] = {put("t", "r1", "c"), put("t", "r2", "c"), put("t", "r3", "c")};
  m[1].kind = PC_WRITE_DELETE;
  m[2].kind = PC_WRITE_NOTIFY; /* writes no version: never recorded */
  uint64_t at = 0;
  assert_int_equal(pc_recent_conflict(r, m, 3, 100, &at), 3); /* empty */
  pc_recent_record(r, m, 3, 200);
  assert_int_equal(pc_recent_conflict(r, m, 3, 150, &at), 0);
  assert_int_equal(at, 200);
  assert_int_equal(pc_recent_conflict(r, m + 1, 2, 150, &at), 0); /* the delete */
  assert_int_equal(pc_recent_conflict(r, m + 2, 1, 150, &at), 1); /* the notification */
  assert_int_equal(pc_recent_conflict(r, m, 3, 200, &at), 3);      /* started at it: later */
  assert_int_equal(pc_recent_conflict(r, m, 3, 250, &at), 3);
  /* the newest commit of a cell is kept, an older one does not replace it */
  pc_recent_record(r, m, 1, 300);
  pc_recent_record(r, m, 1, 120);
  assert_int_equal(pc_recent_conflict(r, m, 1, 250, &at), 0);
  assert_int_equal(at, 300);
  pc_recent_destroy(r);
}

static void test_cells_stay_apart(void **state) {
  (void)state;
  pc_recent_t *r = pc_recent_create();
  assert_non_null(r);
  pc_mutation_t a = put("t", "ab", "c"), b = put("t", "a", "bc"), c = put("ta", "b", "c"),
                d = put("t", "ab", "c");
  pc_recent_record(r, &a, 1, 500);
  uint64_t at = 0;
  assert_int_equal(pc_recent_conflict(r, &b, 1, 100, &at), 1);
  assert_int_equal(pc_recent_conflict(r, &c, 1, 100, &at), 1);
  assert_int_equal(pc_recent_conflict(r, &d, 1, 100, &at), 0); /* the same cell */
  /* many cells: a direct-mapped table forgets the few whose slots a later
   * one took (about n*n/2/PC_RECENT_SLOTS of n), never refuses one it was
   * not given */
  char rows[1000][16];
  pc_mutation_t many[1000];
  for (int i = 0; i < 1000; i++) {
    snprintf(rows[i], sizeof rows[i], "row%d", i);
    many[i] = put("t", rows[i], "c");
  }
  pc_recent_record(r, many, 999, 700);
  int found = 0;
  for (int i = 0; i < 999; i++) found += pc_recent_conflict(r, &many[i], 1, 600, &at) == 0;
  assert_true(found >= 950);
  assert_int_equal(pc_recent_conflict(r, &many[999], 1, 600, &at), 1);
  pc_recent_destroy(r);
}

static void test_absent_table(void **state) {
  (void)state;
  pc_mutation_t m = put("t", "r", "c");
  uint64_t at = 0;
  pc_recent_record(NULL, &m, 1, 10); /* embedded: no table, nothing to do */
  assert_int_equal(pc_recent_conflict(NULL, &m, 1, 5, &at), 1);
  pc_recent_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_records_and_refuses),
      cmocka_unit_test(test_cells_stay_apart),
      cmocka_unit_test(test_absent_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
