/* test_si.c — snapshot isolation as the public API delivers it, tested the
 * way Hermitage (github.com/ept/hermitage) tests databases: interleaved
 * transactions driven step by step from one thread. SI must prevent dirty
 * writes (G0), aborted and intermediate reads (G1a, G1b), circular
 * information flow (G1c), observed-transaction-vanishes (OTV), lost updates
 * (P4), read skew (G-single) and predicate-many-preceders (PMP, read and
 * write), and it must allow write skew (G2-item), which is what separates it
 * from serializability. Also: a transaction reads its own writes (get and
 * scan), a deleted cell reads as PC_NOT_FOUND, and a snapshot holds exactly
 * the commits that finished before it began. Every test runs twice: with
 * one-phase commit of single-row transactions on and off. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#define T "si"
#define COL "c"

typedef struct fixture {
  char *dir;
  pc_db_t *db;
} fixture_t;

static int setup_with(void **state, int one_phase) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->dir = tu_mkdtemp("si");
  f->db = tu_open_ex(f->dir, 0, one_phase);
  *state = f;
  return 0;
}

static int setup_1pc(void **state) { return setup_with(state, 1); }
static int setup_2pc(void **state) { return setup_with(state, 0); }

static int teardown(void **state) {
  fixture_t *f = *state;
  pc_db_close(f->db);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

static pc_db_t *db_of(void **state) { return ((fixture_t *)*state)->db; }

/* ---- one-line transaction steps that assert their outcome ---------------- */

static pc_txn_t *begin(pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("pc_txn_begin: %s", err.text);
  return t;
}

/* Asserts that t reads want (NULL: PC_NOT_FOUND) in cell (T, row, COL). */
static void expect(pc_txn_t *t, const char *row, const char *want) {
  char *v = NULL;
  size_t n = 0;
  pc_error_t err;
  pc_status_t st = pc_txn_get(t, T, row, strlen(row), COL, strlen(COL), &v, &n, &err);
  if (!want) {
    if (st != PC_NOT_FOUND)
      fail_msg("read of %s: want not_found, got %s '%.*s' (%s)", row, pc_status_name(st),
               (int)n, v ? v : "", err.text);
    assert_null(v);
    return;
  }
  if (st != PC_OK) fail_msg("read of %s: want '%s', got %s (%s)", row, want, pc_status_name(st), err.text);
  if (n != strlen(want) || memcmp(v, want, n) != 0)
    fail_msg("read of %s: want '%s', got '%.*s'", row, want, (int)n, v);
  pc_free(v);
}

/* The integer stored in (T, row, COL); fails when the cell is missing. */
static long readi(pc_txn_t *t, const char *row) {
  char *v = NULL;
  size_t n = 0;
  pc_error_t err;
  pc_status_t st = pc_txn_get(t, T, row, strlen(row), COL, strlen(COL), &v, &n, &err);
  if (st != PC_OK) fail_msg("read of %s: %s (%s)", row, pc_status_name(st), err.text);
  char buf[32];
  assert_true(n < sizeof buf);
  memcpy(buf, v, n);
  buf[n] = '\0';
  pc_free(v);
  return strtol(buf, NULL, 10);
}

static void put(pc_txn_t *t, const char *row, const char *val) {
  pc_error_t err;
  pc_status_t st = pc_txn_set(t, T, row, strlen(row), COL, strlen(COL), val, strlen(val), &err);
  if (st != PC_OK) fail_msg("set %s: %s (%s)", row, pc_status_name(st), err.text);
}

static void puti(pc_txn_t *t, const char *row, long v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%ld", v);
  put(t, row, buf);
}

static void del(pc_txn_t *t, const char *row) {
  pc_error_t err;
  pc_status_t st = pc_txn_delete(t, T, row, strlen(row), COL, strlen(COL), &err);
  if (st != PC_OK) fail_msg("delete %s: %s (%s)", row, pc_status_name(st), err.text);
}

/* Commits t, asserts the status and destroys t. */
static void commit_expect(pc_txn_t *t, pc_status_t want) {
  pc_error_t err;
  pc_status_t st = pc_txn_commit(t, &err);
  if (st != want)
    fail_msg("commit: want %s, got %s (%s)", pc_status_name(want), pc_status_name(st), err.text);
  pc_txn_destroy(t);
}

/* Commits t and returns its commit timestamp. */
static uint64_t commit_ok_ts(pc_txn_t *t) {
  pc_error_t err;
  pc_status_t st = pc_txn_commit(t, &err);
  if (st != PC_OK) fail_msg("commit: %s (%s)", pc_status_name(st), err.text);
  uint64_t ts = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  return ts;
}

/* Asserts the committed value of row as a fresh transaction sees it. */
static void committed(pc_db_t *db, const char *row, const char *want) {
  pc_txn_t *t = begin(db);
  expect(t, row, want);
  pc_txn_destroy(t);
}

/* Seeds rows with values in one committed transaction: "row=value" pairs. */
static void seed(pc_db_t *db, const char *const *pairs, size_t n) {
  pc_txn_t *t = begin(db);
  for (size_t i = 0; i < n; i += 2) put(t, pairs[i], pairs[i + 1]);
  commit_expect(t, PC_OK);
}

/* Writes bytes to f, non-printable ones as \xHH. */
static void put_escaped(FILE *f, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch >= 0x20 && ch < 0x7f && ch != '\\')
      fputc(ch, f);
    else
      fprintf(f, "\\x%02x", ch);
  }
}

/* The cells t's scan of rows [start, end) returns, as "row/col=value;"
 * lines, malloc'd. */
static char *scan_dump(pc_txn_t *t, const char *start, const char *end) {
  pc_error_t err;
  pc_scan_t *sc = pc_txn_scan(t, T, start, start ? strlen(start) : 0, end, end ? strlen(end) : 0, &err);
  if (!sc) fail_msg("pc_txn_scan: %s", err.text);
  char *out = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&out, &len);
  assert_non_null(mem);
  pc_status_t st;
  while ((st = pc_scan_next(sc, &err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *c = pc_scan_column(sc, &cl), *v = pc_scan_value(sc, &vl);
    put_escaped(mem, r, rl);
    fputc('/', mem);
    put_escaped(mem, c, cl);
    fputc('=', mem);
    put_escaped(mem, v, vl);
    fputc(';', mem);
  }
  fclose(mem);
  pc_scan_destroy(sc);
  if (st != PC_NOT_FOUND) fail_msg("pc_scan_next: %s (%s)", pc_status_name(st), err.text);
  return out;
}

static void expect_scan(pc_txn_t *t, const char *start, const char *end, const char *want) {
  char *got = scan_dump(t, start, end);
  if (strcmp(got, want) != 0)
    fail_msg("scan [%s, %s): want '%s', got '%s'", start ? start : "", end ? end : "(end)", want,
             got);
  free(got);
}

/* ---- Hermitage cases ------------------------------------------------------ */

/* G0 (dirty write): two transactions write the same two rows in interleaved
 * order; the first to commit wins, the other is refused and leaves nothing. */
static void test_g0_write_cycles(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "10", "y", "20"}, 4);
  pc_txn_t *t1 = begin(db), *t2 = begin(db);
  put(t1, "x", "11");
  put(t2, "x", "12");
  put(t1, "y", "21");
  put(t2, "y", "22");
  commit_expect(t1, PC_OK);
  commit_expect(t2, PC_CONFLICT);
  committed(db, "x", "11");
  committed(db, "y", "21");
}

/* G1a (aborted read): writes of an aborted transaction, or of one whose
 * commit was refused, are never seen. */
static void test_g1a_aborted_reads(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "10", "y", "20"}, 4);
  pc_txn_t *t1 = begin(db);
  put(t1, "x", "101");
  put(t1, "y", "201");
  pc_txn_t *t2 = begin(db);
  expect(t2, "x", "10");
  pc_txn_abort(t1);
  pc_txn_destroy(t1);
  expect(t2, "y", "20");
  pc_txn_destroy(t2);
  committed(db, "x", "10");

  /* a refused commit leaves no trace either, not even on the row it could
   * have locked before meeting the conflict */
  pc_txn_t *t3 = begin(db), *t4 = begin(db);
  put(t3, "x", "102");
  put(t3, "y", "202");
  put(t4, "y", "24");
  commit_expect(t4, PC_OK);
  commit_expect(t3, PC_CONFLICT);
  committed(db, "x", "10");
  committed(db, "y", "24");
  assert_int_equal(tu_raw_count(db, T, PC_CELL_LOCK), 0);
}

/* G1b (intermediate read): only a transaction's final write of a cell is
 * committed, and readers that began before the commit see the old value. */
static void test_g1b_intermediate_reads(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "10"}, 2);
  pc_txn_t *t1 = begin(db), *t2 = begin(db);
  put(t1, "x", "101");
  expect(t2, "x", "10");
  put(t1, "x", "11");
  commit_expect(t1, PC_OK);
  expect(t2, "x", "10");
  pc_txn_destroy(t2);
  committed(db, "x", "11");
}

/* G1c (circular information flow): each of two transactions writes what the
 * other reads; neither sees the other's write and both commit. */
static void test_g1c_circular_information_flow(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "10", "y", "20"}, 4);
  pc_txn_t *t1 = begin(db), *t2 = begin(db);
  put(t1, "x", "11");
  put(t2, "y", "22");
  expect(t1, "y", "20");
  expect(t2, "x", "10");
  commit_expect(t1, PC_OK);
  commit_expect(t2, PC_OK);
  committed(db, "x", "11");
  committed(db, "y", "22");
}

/* OTV (observed transaction vanishes): once a reader has seen T1's commit,
 * a later conflicting T2 cannot replace part of it. */
static void test_otv_observed_transaction_vanishes(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "10", "y", "20"}, 4);
  pc_txn_t *t1 = begin(db), *t2 = begin(db);
  put(t1, "x", "11");
  put(t1, "y", "19");
  put(t2, "x", "12");
  put(t2, "y", "18");
  commit_expect(t1, PC_OK);
  pc_txn_t *t3 = begin(db);
  expect(t3, "x", "11");
  commit_expect(t2, PC_CONFLICT);
  expect(t3, "y", "19");
  pc_txn_destroy(t3);
  committed(db, "y", "19");
}

/* PMP (predicate many preceders), read side: a scan of a row range returns
 * the same cells however often it is repeated, while other transactions
 * insert and delete rows in that range and commit. */
static void test_pmp_scan_is_stable(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"k1", "10", "k3", "30", "k5", "50", "z", "0"}, 8);
  pc_txn_t *t1 = begin(db);
  char *first = scan_dump(t1, "k0", "k9");
  assert_string_equal(first, "k1/c=10;k3/c=30;k5/c=50;");
  pc_txn_t *t2 = begin(db);
  put(t2, "k4", "40");
  put(t2, "k2", "20");
  del(t2, "k3");
  put(t2, "k5", "55");
  commit_expect(t2, PC_OK);
  expect_scan(t1, "k0", "k9", first);
  expect(t1, "k4", NULL);
  expect(t1, "k3", "30");
  /* an unbounded scan is stable too */
  expect_scan(t1, "k", NULL, "k1/c=10;k3/c=30;k5/c=50;z/c=0;");
  pc_txn_destroy(t1);
  free(first);
  pc_txn_t *t3 = begin(db);
  expect_scan(t3, "k0", "k9", "k1/c=10;k2/c=20;k4/c=40;k5/c=55;");
  pc_txn_destroy(t3);
}

/* PMP, write side: T2 deletes the rows its scan matched while T1 updates
 * them; T1 commits first, so T2 must fail rather than delete stale rows. */
static void test_pmp_write(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"r1", "10", "r2", "20"}, 4);
  pc_txn_t *t1 = begin(db), *t2 = begin(db);
  puti(t1, "r1", readi(t1, "r1") + 10);
  puti(t1, "r2", readi(t1, "r2") + 10);
  /* T2: "delete where value = 20", evaluated on its snapshot */
  const char *rows[] = {"r1", "r2"};
  int deleted = 0;
  for (size_t i = 0; i < 2; i++)
    if (readi(t2, rows[i]) == 20) {
      del(t2, rows[i]);
      deleted++;
    }
  assert_int_equal(deleted, 1);
  commit_expect(t1, PC_OK);
  commit_expect(t2, PC_CONFLICT);
  committed(db, "r1", "20");
  committed(db, "r2", "30");
}

/* P4 (lost update): two read-modify-write increments of one cell; the second
 * commit is refused with PC_CONFLICT, whichever order they buffered in. */
static void test_p4_lost_update(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "10"}, 2);
  pc_txn_t *t1 = begin(db), *t2 = begin(db);
  long a = readi(t1, "x"), b = readi(t2, "x");
  puti(t2, "x", b + 1);
  puti(t1, "x", a + 1);
  commit_expect(t1, PC_OK);
  commit_expect(t2, PC_CONFLICT);
  committed(db, "x", "11");

  /* the same with rows besides x, so that the commit is a two-phase one */
  pc_txn_t *t3 = begin(db), *t4 = begin(db);
  a = readi(t3, "x");
  b = readi(t4, "x");
  puti(t3, "x", a + 1);
  put(t3, "a", "3");
  puti(t4, "x", b + 1);
  put(t4, "b", "4");
  commit_expect(t4, PC_OK);
  commit_expect(t3, PC_CONFLICT);
  committed(db, "x", "12");
  committed(db, "a", NULL);
  committed(db, "b", "4");
}

/* G-single (read skew), read-only: T1 sees x before T2 and, after T2 commits
 * a change to both, still sees y before T2. */
static void test_g_single_read_only(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "50", "y", "50"}, 4);
  pc_txn_t *t1 = begin(db);
  long x = readi(t1, "x");
  pc_txn_t *t2 = begin(db);
  puti(t2, "x", readi(t2, "x") - 25);
  puti(t2, "y", readi(t2, "y") + 25);
  commit_expect(t2, PC_OK);
  long y = readi(t1, "y");
  assert_int_equal(x, 50);
  assert_int_equal(y, 50);
  expect_scan(t1, NULL, NULL, "x/c=50;y/c=50;");
  commit_expect(t1, PC_OK); /* read-only: commits trivially */
  committed(db, "x", "25");
  committed(db, "y", "75");
}

/* G-single with a write: after the read skew T1 writes. Writing a cell T2
 * wrote is a conflict (T2's commit stands); writing a cell nobody else wrote
 * commits, as SI allows. */
static void test_g_single_with_write(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "50", "y", "50"}, 4);
  pc_txn_t *t1 = begin(db), *t1b = begin(db);
  long x = readi(t1, "x"), xb = readi(t1b, "x");
  pc_txn_t *t2 = begin(db);
  put(t2, "x", "25");
  put(t2, "y", "75");
  commit_expect(t2, PC_OK);
  long y = readi(t1, "y"), yb = readi(t1b, "y");
  assert_int_equal(x + y, 100);
  assert_int_equal(xb + yb, 100);
  puti(t1, "x", x + y); /* x was written by T2 after T1 began */
  commit_expect(t1, PC_CONFLICT);
  puti(t1b, "sum", xb + yb);
  commit_expect(t1b, PC_OK);
  committed(db, "x", "25");
  committed(db, "y", "75");
  committed(db, "sum", "100");
}

/* G2-item (write skew) is allowed: two transactions read x and y and each
 * writes the one the other did not; both commit, although no serial order
 * of them gives this result. */
static void test_g2_item_write_skew_allowed(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "50", "y", "50"}, 4);
  pc_txn_t *t1 = begin(db), *t2 = begin(db);
  long x1 = readi(t1, "x"), y1 = readi(t1, "y");
  long x2 = readi(t2, "x"), y2 = readi(t2, "y");
  /* each keeps x + y >= 0 on its own snapshot */
  assert_true(x1 + y1 - 90 >= 0);
  assert_true(x2 + y2 - 90 >= 0);
  puti(t1, "x", x1 - 90);
  puti(t2, "y", y2 - 90);
  commit_expect(t1, PC_OK);
  commit_expect(t2, PC_OK);
  committed(db, "x", "-40");
  committed(db, "y", "-40");
}

/* ---- other SI properties ---------------------------------------------------- */

/* A transaction's get and scan see its own buffered sets, overwrites and
 * deletes, merged with the committed view; nobody else sees them. */
static void test_read_your_own_writes(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"a", "1", "b", "2", "c", "3"}, 6);
  pc_txn_t *t = begin(db), *other = begin(db);
  put(t, "a", "10");
  expect(t, "a", "10");
  put(t, "a", "11");
  expect(t, "a", "11");
  del(t, "b");
  expect(t, "b", NULL);
  put(t, "d", "4");
  expect(t, "d", "4");
  del(t, "e"); /* never written */
  expect(t, "e", NULL);
  expect_scan(t, NULL, NULL, "a/c=11;c/c=3;d/c=4;");
  expect_scan(t, "b", "d", "c/c=3;");
  put(t, "b", "20"); /* re-set after the delete */
  expect(t, "b", "20");
  expect_scan(t, "a", "c", "a/c=11;b/c=20;");
  /* another transaction sees none of it */
  expect(other, "a", "1");
  expect(other, "d", NULL);
  expect_scan(other, NULL, NULL, "a/c=1;b/c=2;c/c=3;");
  commit_expect(t, PC_OK);
  expect(other, "a", "1"); /* still its snapshot */
  pc_txn_destroy(other);
  pc_txn_t *after = begin(db);
  expect_scan(after, NULL, NULL, "a/c=11;b/c=20;c/c=3;d/c=4;");
  pc_txn_destroy(after);
}

/* A committed delete makes the cell read as PC_NOT_FOUND (get and scan) for
 * later snapshots, while earlier snapshots still see the value; writing it
 * again brings it back. */
static void test_deleted_cell_reads_not_found(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "1", "y", "2"}, 4);
  pc_txn_t *old = begin(db);
  pc_txn_t *d = begin(db);
  del(d, "x");
  commit_expect(d, PC_OK);
  pc_txn_t *now = begin(db);
  expect(now, "x", NULL);
  expect_scan(now, NULL, NULL, "y/c=2;");
  expect(old, "x", "1");
  expect_scan(old, NULL, NULL, "x/c=1;y/c=2;");
  pc_txn_destroy(now);
  pc_txn_destroy(old);
  /* deleting a cell that never existed commits and reads as not found */
  d = begin(db);
  del(d, "never");
  commit_expect(d, PC_OK);
  committed(db, "never", NULL);
  /* and the deleted cell can be written again */
  seed(db, (const char *const[]){"x", "3"}, 2);
  committed(db, "x", "3");
}

/* A transaction started before a commit never sees it; one started after
 * always does; commit_ts lies between the two start timestamps. Single-row
 * and multi-row commits, repeated. */
static void test_observed_snapshot(void **state) {
  pc_db_t *db = db_of(state);
  seed(db, (const char *const[]){"x", "0"}, 2);
  for (int i = 0; i < 20; i++) {
    char prev[16], next[16];
    snprintf(prev, sizeof prev, "%d", i);
    snprintf(next, sizeof next, "%d", i + 1);
    pc_txn_t *before = begin(db);
    if (i % 3 == 0) expect(before, "x", prev); /* a read before the commit, too */
    pc_txn_t *w = begin(db);
    put(w, "x", next);
    if (i % 2) put(w, "y", next); /* two rows: a two-phase commit */
    uint64_t cts = commit_ok_ts(w);
    pc_txn_t *after = begin(db);
    assert_true(pc_txn_start_ts(before) < cts);
    assert_true(cts < pc_txn_start_ts(after));
    expect(before, "x", prev);
    expect(after, "x", next);
    pc_txn_destroy(before);
    pc_txn_destroy(after);
  }
}

/* A scan longer than one page of the store (hundreds of cells in a row,
 * rows and columns with NUL and 0xFF bytes) returns every committed cell
 * once, in (row, column) order, merged with the transaction's own sets,
 * overwrites and deletes; another transaction's scan sees only the
 * committed cells. */
static void test_scan_across_pages(void **state) {
  pc_db_t *db = db_of(state);
  enum { NCOLS = 300 };
  static const struct {
    const char *p;
    size_t n;
    const char *shown;
  } rws[] = {{"a", 1, "a"}, {"a\0", 2, "a\\x00"}, {"a\xff", 2, "a\\xff"}, {"b", 1, "b"}};
  pc_error_t err;
  pc_txn_t *w = begin(db);
  char col[16], val[16];
  for (size_t r = 0; r < 4; r++)
    for (int i = 0; i < NCOLS; i++) {
      snprintf(col, sizeof col, "c%03d", i);
      snprintf(val, sizeof val, "%zu.%d", r, i);
      assert_int_equal(pc_txn_set(w, T, rws[r].p, rws[r].n, col, 4, val, strlen(val), &err), PC_OK);
    }
  /* a column with a NUL byte right after "c000" */
  assert_int_equal(pc_txn_set(w, T, "a", 1, "c000\0", 5, "nul", 3, &err), PC_OK);
  commit_expect(w, PC_OK);

  pc_txn_t *t = begin(db), *other = begin(db);
  char *want = NULL, *want_other = NULL;
  size_t wl = 0, wol = 0;
  FILE *m = open_memstream(&want, &wl), *mo = open_memstream(&want_other, &wol);
  assert_non_null(m);
  assert_non_null(mo);
  for (size_t r = 0; r < 4; r++)
    for (int i = 0; i < NCOLS; i++) {
      snprintf(col, sizeof col, "c%03d", i);
      snprintf(val, sizeof val, "%zu.%d", r, i);
      fprintf(mo, "%s/%s=%s;", rws[r].shown, col, val);
      if (r == 0 && i == 0) fprintf(mo, "a/c000\\x00=nul;");
      if (r == 1 && i % 7 == 0) {
        assert_int_equal(pc_txn_delete(t, T, rws[r].p, rws[r].n, col, 4, &err), PC_OK);
      } else if (r == 1 && i % 11 == 0) {
        assert_int_equal(pc_txn_set(t, T, rws[r].p, rws[r].n, col, 4, "own", 3, &err), PC_OK);
        fprintf(m, "%s/%s=own;", rws[r].shown, col);
      } else {
        fprintf(m, "%s/%s=%s;", rws[r].shown, col, val);
      }
      if (r == 0 && i == 0) fprintf(m, "a/c000\\x00=nul;");
      if (i % 13 == 0 && r != 3) { /* a new column right after this one */
        snprintf(col, sizeof col, "c%03dx", i);
        assert_int_equal(pc_txn_set(t, T, rws[r].p, rws[r].n, col, 5, "new", 3, &err), PC_OK);
        fprintf(m, "%s/%s=new;", rws[r].shown, col);
      }
    }
  fclose(m);
  fclose(mo);
  expect_scan(t, NULL, NULL, want);
  expect_scan(other, NULL, NULL, want_other);
  /* a range that starts and ends inside the data: rows [a\0, b) */
  char *got = NULL;
  pc_scan_t *sc = pc_txn_scan(other, T, "a\0", 2, "b", 1, &err);
  assert_non_null(sc);
  int n = 0;
  pc_status_t st;
  while ((st = pc_scan_next(sc, &err)) == PC_OK) n++;
  assert_int_equal(st, PC_NOT_FOUND);
  assert_int_equal(n, 2 * NCOLS);
  pc_scan_destroy(sc);
  free(got);
  free(want);
  free(want_other);
  pc_txn_destroy(t);
  pc_txn_destroy(other);
}

/* Each test with one-phase commit of single-row transactions on, then off. */
#define BOTH(fn)                                     \
  {#fn " (one-phase on)", fn, setup_1pc, teardown, NULL}, \
      {#fn " (one-phase off)", fn, setup_2pc, teardown, NULL}

int main(void) {
  const struct CMUnitTest tests[] = {
      BOTH(test_g0_write_cycles),
      BOTH(test_g1a_aborted_reads),
      BOTH(test_g1b_intermediate_reads),
      BOTH(test_g1c_circular_information_flow),
      BOTH(test_otv_observed_transaction_vanishes),
      BOTH(test_pmp_scan_is_stable),
      BOTH(test_pmp_write),
      BOTH(test_p4_lost_update),
      BOTH(test_g_single_read_only),
      BOTH(test_g_single_with_write),
      BOTH(test_g2_item_write_skew_allowed),
      BOTH(test_read_your_own_writes),
      BOTH(test_deleted_cell_reads_not_found),
      BOTH(test_observed_snapshot),
      BOTH(test_scan_across_pages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
