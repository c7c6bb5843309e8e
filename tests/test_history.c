/* test_history.c — versions no snapshot can read (pc_options_set_keep_history).
 * The embedded database drops the value of a version that a single-row
 * commit replaces when no open transaction's snapshot lies between the two
 * commits; versions an open snapshot can read, and versions of multi-row
 * transactions, stay. Also: single-row transfers under concurrent snapshot
 * readers (which must always see a constant sum) while versions are being
 * collected, and a read whose snapshot lies above a single-row commit still
 * being written waits for it. Embedded only: a cluster's tablets keep every
 * version. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/db.h"
#include "core/failpoint.h"
#include "testutil.h"

#define T "hist"

/* Where a replaced version that an open snapshot can read is kept: in the
 * history (a budget of 0 for memory) or in memory. */
enum { KEPT_IN_HISTORY = 0, KEPT_IN_MEMORY = 1 };

static pc_db_t *open_kept(const char *dir, int keep_history, int lazy, int kept) {
  pc_options_t *o = pc_options_create();
  assert_non_null(o);
  pc_options_set_create_if_missing(o, 1);
  /* these tests are about which versions are kept, not about durability,
   * and commit thousands of small transactions: no fsync per commit */
  pc_options_set_sync(o, 0);
  pc_options_set_keep_history(o, keep_history);
  pc_options_set_lazy_start(o, lazy);
  pc_options_set_kept_versions_bytes(o, kept == KEPT_IN_MEMORY ? 1u << 20 : 0);
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  if (!db) fail_msg("pc_db_open: %s", err.text);
  return db;
}

static pc_db_t *open_db(const char *dir, int keep_history, int lazy) {
  return open_kept(dir, keep_history, lazy, KEPT_IN_MEMORY);
}

static void put(pc_db_t *db, const char *row, const char *col, const char *val) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  tu_set(t, T, row, col, val);
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  pc_txn_destroy(t);
}

static void expect(pc_txn_t *t, const char *row, const char *col, const char *want) {
  char *v = tu_get(t, T, row, col);
  assert_non_null(v);
  assert_string_equal(v, want);
  free(v);
}

/* The write records of one cell, newest first: value (NULL when none) and
 * whether it was collected. */
typedef struct version {
  char value[32];
  int has_value;
} version_t;

typedef struct versions {
  version_t v[4096];
  int n;
  const char *row;
} versions_t;

static int collect_versions(void *ctx, const pc_raw_cell_t *c) {
  versions_t *vs = ctx;
  if (c->kind != PC_CELL_WRITE || c->write_kind != PC_WRITE_PUT) return 0;
  if (c->row_len != strlen(vs->row) || memcmp(c->row, vs->row, c->row_len) != 0) return 0;
  if (vs->n == (int)(sizeof vs->v / sizeof vs->v[0])) return 1;
  version_t *v = &vs->v[vs->n++];
  v->has_value = c->value != NULL;
  snprintf(v->value, sizeof v->value, "%.*s", (int)(c->value_len < 31 ? c->value_len : 31),
           c->value ? c->value : "");
  return 0;
}

static versions_t vbuf; /* large: not on the stack */

static const versions_t *versions(pc_db_t *db, const char *row) {
  memset(&vbuf, 0, sizeof vbuf);
  vbuf.row = row;
  pc_error_t err;
  /* this row only: [row, row "\0") */
  char end[64];
  size_t rl = strlen(row);
  assert_true(rl < sizeof end);
  memcpy(end, row, rl);
  end[rl] = '\0';
  assert_int_equal(pc_db_raw_scan(db, T, row, rl, end, rl + 1, collect_versions, &vbuf, &err),
                   PC_OK);
  return &vbuf;
}


/* The history of row: its head, then, if kept_value is set and the version
 * is kept in the history, that version (a version kept in memory is not in
 * the raw view). */
static void expect_history(pc_db_t *db, const char *row, int kept, const char *head,
                           const char *kept_value) {
  static versions_t vs;
  vs = *versions(db, row);
  int n = kept_value && kept == KEPT_IN_HISTORY ? 2 : 1;
  assert_int_equal(vs.n, n);
  assert_string_equal(vs.v[0].value, head);
  if (n == 2) {
    assert_true(vs.v[1].has_value);
    assert_string_equal(vs.v[1].value, kept_value);
  }
}

/* Waits (up to 10 s) until the collector has removed n versions in all. */
static void collected_settle(pc_db_t *db, uint64_t n) {
  for (int i = 0; i < 1000 && pc_local_store_collected(db->store) < n; i++) {
    struct timespec d = {0, 10 * 1000000L};
    nanosleep(&d, NULL);
  }
  assert_int_equal(pc_local_store_collected(db->store), n);
}

/* Nobody reads: each replaced version of a single-row commit vanishes. */
static void test_unread_versions_collected(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("hist-unread");
  pc_db_t *db = open_db(dir, 0, 0);
  put(db, "x", "c", "one");
  put(db, "x", "c", "two");
  put(db, "x", "c", "three");
  static versions_t vs;
  vs = *versions(db, "x");
  assert_int_equal(vs.n, 1); /* the head only */
  assert_true(vs.v[0].has_value);
  assert_string_equal(vs.v[0].value, "three");
  pc_error_t err;
  pc_txn_t *r = pc_txn_begin(db, &err);
  expect(r, "x", "c", "three");
  pc_txn_destroy(r);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* An open snapshot keeps the version it reads, across later commits, and
 * only that one, in the history or in memory; once it is gone, the next
 * commit collects, and the collector removes the kept one. */
static void test_open_snapshot_keeps_its_version(void **state) {
  (void)state;
  for (int mode = 0; mode < 4; mode++) {
    int lazy = mode & 1, kept = mode >> 1;
    char *dir = tu_mkdtemp("hist-open");
    pc_db_t *db = open_kept(dir, 0, lazy, kept);
    put(db, "x", "c", "v1");
    pc_error_t err;
    pc_txn_t *r = pc_txn_begin(db, &err);
    assert_non_null(r);
    expect(r, "x", "c", "v1"); /* fixes the snapshot (lazy: here) */
    put(db, "x", "c", "v2");
    put(db, "x", "c", "v3");
    expect(r, "x", "c", "v1");
    /* v2 vanished: no snapshot between its commit and v3's; v1: r reads it */
    expect_history(db, "x", kept, "v3", "v1");
    pc_txn_destroy(r);
    put(db, "x", "c", "v4");
    /* v3 vanished at once; v1, kept for r, goes once r is gone (the collector) */
    collected_settle(db, 1);
    expect_history(db, "x", kept, "v4", NULL);
    pc_db_close(db);
    tu_rmtree(dir);
  }
}

/* More open transactions than the registry has lock-free slots (4096): the
 * registrations beyond them are kept in the overflow list and protect their
 * versions just the same. The fillers are older than every version here, so
 * only r, registered in the overflow, can keep v1. */
static void test_registry_overflow(void **state) {
  (void)state;
  enum { FILL = 4200 };
  char *dir = tu_mkdtemp("hist-overflow");
  pc_db_t *db = open_kept(dir, 0, 0, KEPT_IN_HISTORY);
  pc_txn_t **fill = calloc(FILL, sizeof *fill);
  assert_non_null(fill);
  pc_error_t err;
  for (int i = 0; i < FILL; i++) assert_non_null(fill[i] = pc_txn_begin(db, &err));
  put(db, "x", "c", "v1");
  pc_txn_t *r = pc_txn_begin(db, &err);
  assert_non_null(r);
  expect(r, "x", "c", "v1");
  put(db, "x", "c", "v2");
  put(db, "x", "c", "v3");
  expect(r, "x", "c", "v1");
  expect_history(db, "x", KEPT_IN_HISTORY, "v3", "v1"); /* v2 vanished; v1 kept for r */
  pc_txn_destroy(r);
  for (int i = 0; i < FILL; i++) pc_txn_destroy(fill[i]);
  free(fill);
  /* every registration released: the next overwrite collects v3, and the
   * collector v1 */
  put(db, "x", "c", "v4");
  collected_settle(db, 1);
  expect_history(db, "x", KEPT_IN_HISTORY, "v4", NULL);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A transaction run on another thread: begin_reader begins it, commit_txn
 * commits it. */
typedef struct other {
  pc_db_t *db;
  pc_txn_t *txn;
  pc_status_t st;
} other_t;

static void *begin_reader(void *arg) {
  other_t *o = arg;
  pc_error_t err;
  o->txn = pc_txn_begin(o->db, &err);
  return NULL;
}

static void *commit_txn(void *arg) {
  other_t *o = arg;
  pc_error_t err;
  o->st = pc_txn_commit(o->txn, &err);
  return NULL;
}

/* Arms the failpoint spec, runs fn(arg) on a new thread (*th), and returns
 * once that thread has taken a timestamp from db's oracle: from then on it is
 * held at the failpoint, or past it. */
static void start_held(pc_db_t *db, const char *spec, void *(*fn)(void *), void *arg,
                       pthread_t *th) {
  uint64_t before = pc_oracle_last(db->oracle);
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure(spec, &err), PC_OK);
  assert_int_equal(pthread_create(th, NULL, fn, arg), 0);
  while (pc_oracle_last(db->oracle) == before) {
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
  }
}

/* A reader that has its start_ts but has not yet stored it in its registry
 * slot (held there by a failpoint) still keeps the version it will read: a
 * writer counts a pending slot as a snapshot. */
static void test_pending_registration_keeps_version(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("hist-pending");
  pc_db_t *db = open_db(dir, 0, 0);
  put(db, "x", "c", "v1");
  other_t r = {db, NULL, PC_OK};
  pthread_t th;
  start_held(db, "db.snapshot.pending=1*sleep(1000)", begin_reader, &r, &th);
  /* the reader's timestamp is issued: every commit below is newer */
  put(db, "x", "c", "v2");
  put(db, "x", "c", "v3");
  assert_int_equal(pthread_join(th, NULL), 0);
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  assert_non_null(r.txn);
  expect(r.txn, "x", "c", "v1");
  pc_txn_destroy(r.txn);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* The value of (x, c) that a scan of table T at t's snapshot meets, malloc'd. */
static char *scan_x(pc_txn_t *t) {
  pc_error_t err;
  pc_scan_t *sc = pc_txn_scan(t, T, NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  char *v = NULL;
  pc_status_t st;
  while ((st = pc_scan_next(sc, &err)) == PC_OK) {
    size_t n;
    const char *row = pc_scan_row(sc, &n);
    if (n != 1 || row[0] != 'x') continue;
    const char *p = pc_scan_value(sc, &n);
    free(v);
    v = calloc(1, n + 1);
    assert_non_null(v);
    memcpy(v, p, n);
  }
  assert_int_equal(st, PC_NOT_FOUND);
  pc_scan_destroy(sc);
  return v;
}

/* A single-row commit that has taken its commit_ts but not yet written
 * (held there by a failpoint) is seen by a read whose snapshot is newer, by
 * get and by scan: the read waits on the row's stripe (a scan on every
 * stripe). Reads skip that wait while no such commit is in flight anywhere;
 * this is the case where they must not. */
static void test_read_waits_for_one_phase_commit_in_flight(void **state) {
  (void)state;
  for (int by_scan = 0; by_scan < 2; by_scan++) {
    char *dir = tu_mkdtemp("hist-1pc-wait");
    pc_db_t *db = open_db(dir, 0, 0);
    put(db, "x", "c", "v1");
    pc_error_t err;
    other_t c = {db, pc_txn_begin(db, &err), PC_INTERNAL};
    assert_non_null(c.txn);
    tu_set(c.txn, T, "x", "c", "v2");
    pthread_t th;
    start_held(db, "store.before_apply=1*sleep(1500)", commit_txn, &c, &th);
    /* the commit's timestamp is issued: every snapshot taken is above it */
    pc_txn_t *r = pc_txn_begin(db, &err);
    assert_non_null(r);
    if (by_scan) {
      char *v = scan_x(r);
      assert_non_null(v);
      assert_string_equal(v, "v2");
      free(v);
    } else {
      expect(r, "x", "c", "v2");
    }
    pc_txn_destroy(r);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
    assert_int_equal(c.st, PC_OK);
    pc_txn_destroy(c.txn);
    pc_db_close(db);
    tu_rmtree(dir);
  }
}

/* A version kept because an open transaction could read it is removed by
 * the collector once that transaction is gone, and not before, whether it
 * was kept in the history or in memory; the reader reads it while open. */
static void test_collector_removes_kept_versions(void **state) {
  (void)state;
  for (int kept = 0; kept < 2; kept++) {
    char *dir = tu_mkdtemp("hist-collect");
    pc_db_t *db = open_kept(dir, 0, 0, kept);
    put(db, "x", "c", "v1");
    put(db, "y", "c", "w1");
    pc_error_t err;
    pc_txn_t *r = pc_txn_begin(db, &err); /* another thread's open transaction */
    assert_non_null(r);
    put(db, "x", "c", "v2");
    put(db, "y", "c", "w2");
    put(db, "x", "c", "v3");
    /* v1 and w1 were kept for r; v2 was not (no snapshot between v2 and v3) */
    expect_history(db, "x", kept, "v3", "v1");
    expect_history(db, "y", kept, "w2", "w1");
    /* however long the collector runs, r keeps them */
    struct timespec d = {0, 200 * 1000000L};
    nanosleep(&d, NULL);
    assert_int_equal(pc_local_store_collected(db->store), 0);
    expect(r, "x", "c", "v1");
    expect(r, "y", "c", "w1");
    expect_history(db, "x", kept, "v3", "v1");
    pc_txn_destroy(r);
    collected_settle(db, 2);
    expect_history(db, "x", kept, "v3", NULL);
    expect_history(db, "y", kept, "w2", NULL);
    /* what the readers see is unchanged */
    pc_txn_t *t = pc_txn_begin(db, &err);
    expect(t, "x", "c", "v3");
    expect(t, "y", "c", "w2");
    pc_txn_destroy(t);
    pc_db_close(db);
    tu_rmtree(dir);
  }
}

/* Versions held in memory are found by a scan at an old snapshot too, and
 * the memory budget sends the rest to the history. */
static void test_kept_in_memory_scan_and_budget(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("hist-mem");
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  pc_options_set_kept_versions_bytes(o, 4096); /* a few dozen small versions */
  pc_options_set_sync(o, 0); /* not about durability (see open_kept) */
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  assert_non_null(db);
  enum { ROWS = 200 };
  char row[16], val[16];
  for (int i = 0; i < ROWS; i++) {
    snprintf(row, sizeof row, "r%03d", i);
    snprintf(val, sizeof val, "old%03d", i);
    put(db, row, "c", val);
  }
  pc_txn_t *r = pc_txn_begin(db, &err);
  assert_non_null(r);
  for (int i = 0; i < ROWS; i++) {
    snprintf(row, sizeof row, "r%03d", i);
    snprintf(val, sizeof val, "new%03d", i);
    put(db, row, "c", val);
  }
  /* some old versions went to memory, the rest to the history */
  int in_history = 0;
  for (int i = 0; i < ROWS; i++) {
    snprintf(row, sizeof row, "r%03d", i);
    in_history += versions(db, row)->n == 2;
  }
  assert_true(in_history > 0 && in_history < ROWS);
  /* r sees every old value, by get and by scan */
  for (int i = 0; i < ROWS; i++) {
    snprintf(row, sizeof row, "r%03d", i);
    snprintf(val, sizeof val, "old%03d", i);
    expect(r, row, "c", val);
  }
  pc_scan_t *sc = pc_txn_scan(r, T, NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  int n = 0;
  while (pc_scan_next(sc, &err) == PC_OK) {
    size_t vl;
    const char *v = pc_scan_value(sc, &vl);
    snprintf(val, sizeof val, "old%03d", n);
    assert_int_equal(vl, strlen(val));
    assert_memory_equal(v, val, vl);
    n++;
  }
  assert_int_equal(n, ROWS);
  pc_scan_destroy(sc);
  pc_txn_destroy(r);
  collected_settle(db, ROWS);
  assert_int_equal(versions(db, "r000")->n, 1);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* More kept versions than the collector asks about in one pass (20000):
 * later passes take the rest, those in memory and those in the history. */
static void test_collector_many_passes(void **state) {
  (void)state;
  enum { ROWS = 25000 };
  char *dir = tu_mkdtemp("hist-passes");
  pc_db_t *db = open_kept(dir, 0, 0, KEPT_IN_MEMORY); /* 1 MiB: some go to the history */
  char row[16];
  for (int i = 0; i < ROWS; i++) {
    snprintf(row, sizeof row, "r%05d", i);
    put(db, row, "c", "old");
  }
  pc_error_t err;
  pc_txn_t *r = pc_txn_begin(db, &err);
  assert_non_null(r);
  for (int i = 0; i < ROWS; i++) {
    snprintf(row, sizeof row, "r%05d", i);
    put(db, row, "c", "new");
  }
  expect(r, "r00000", "c", "old");
  expect(r, "r24999", "c", "old");
  pc_txn_destroy(r);
  collected_settle(db, ROWS);
  assert_int_equal(versions(db, "r24999")->n, 1);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* Versions of a multi-row transaction are kept: lock resolution may still
 * ask its primary about it. keep_history keeps everything. */
static void test_kept_versions(void **state) {
  (void)state;
  for (int keep = 0; keep < 2; keep++) {
    char *dir = tu_mkdtemp("hist-kept");
    pc_db_t *db = open_db(dir, keep, 0);
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(db, &err);
    tu_set(t, T, "x", "c", "two-rows");
    tu_set(t, T, "y", "c", "two-rows");
    assert_int_equal(pc_txn_commit(t, &err), PC_OK);
    pc_txn_destroy(t);
    put(db, "x", "c", "single");
    put(db, "y", "c", "a");
    put(db, "y", "c", "b");
    static versions_t vx, vy;
    vx = *versions(db, "x");
    vy = *versions(db, "y");
    assert_int_equal(vx.n, 2);
    assert_string_equal(vx.v[1].value, "two-rows");
    assert_int_equal(vy.n, keep ? 3 : 2); /* "a", a single-row commit, replaced by "b" */
    assert_string_equal(vy.v[0].value, "b");
    assert_string_equal(vy.v[vy.n - 1].value, "two-rows");
    if (keep) assert_string_equal(vy.v[1].value, "a");
    pc_db_close(db);
    tu_rmtree(dir);
  }
}

/* Writers move units between two columns of one row (single-row commits,
 * so replaced versions are collected as they go); readers read the two
 * columns with pauses in between and must always see the same sum. */
#define TOTAL 1000
#define WRITERS 2
#define READERS 2
#define MOVES 400

typedef struct shared {
  pc_db_t *db;
  atomic_int failed, writers_done, commits;
  char msg[256];
} shared_t;

static long get_num(pc_txn_t *t, const char *col, shared_t *sh) {
  char *v = NULL;
  size_t n = 0;
  pc_error_t err;
  pc_status_t st = pc_txn_get(t, T, "pair", 4, col, strlen(col), &v, &n, &err);
  if (st != PC_OK) {
    if (!atomic_exchange(&sh->failed, 1))
      snprintf(sh->msg, sizeof sh->msg, "get %s: %.200s", col, err.text);
    return 0;
  }
  char buf[32];
  snprintf(buf, sizeof buf, "%.*s", (int)(n < 31 ? n : 31), v);
  pc_free(v);
  return strtol(buf, NULL, 10);
}

static void *writer(void *arg) {
  shared_t *sh = arg;
  uint64_t seed = (uint64_t)(uintptr_t)&seed;
  for (int i = 0; i < MOVES && !atomic_load(&sh->failed); i++) {
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(sh->db, &err);
    if (!t) break;
    long a = get_num(t, "a", sh), b = get_num(t, "b", sh);
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    long d = (long)((seed >> 33) % 21) - 10;
    char va[32], vb[32];
    snprintf(va, sizeof va, "%ld", a - d);
    snprintf(vb, sizeof vb, "%ld", b + d);
    tu_set(t, T, "pair", "a", va);
    tu_set(t, T, "pair", "b", vb);
    pc_status_t st = pc_txn_commit(t, &err);
    if (st == PC_OK) atomic_fetch_add(&sh->commits, 1);
    if (st != PC_OK && st != PC_CONFLICT && !atomic_exchange(&sh->failed, 1))
      snprintf(sh->msg, sizeof sh->msg, "commit: %.200s", err.text);
    pc_txn_destroy(t);
  }
  atomic_fetch_add(&sh->writers_done, 1);
  return NULL;
}

static void *reader(void *arg) {
  shared_t *sh = arg;
  int reads = 0;
  while ((atomic_load(&sh->writers_done) < WRITERS || reads < 10) && !atomic_load(&sh->failed)) {
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(sh->db, &err);
    if (!t) break;
    long a = get_num(t, "a", sh);
    for (volatile int spin = 0; spin < 20000; spin++) {
    } /* let writers replace what was read */
    long b = get_num(t, "b", sh);
    if (!atomic_load(&sh->failed) && a + b != TOTAL && !atomic_exchange(&sh->failed, 1))
      snprintf(sh->msg, sizeof sh->msg, "snapshot %llu saw a=%ld b=%ld",
               (unsigned long long)pc_txn_start_ts(t), a, b);
    pc_txn_destroy(t);
    reads++;
  }
  return NULL;
}

static void test_concurrent_readers_see_constant_sum(void **state) {
  (void)state;
  for (int lazy = 0; lazy < 2; lazy++) {
    char *dir = tu_mkdtemp("hist-conc");
    shared_t sh = {.db = open_db(dir, 0, lazy)};
    char init[16];
    snprintf(init, sizeof init, "%d", TOTAL);
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(sh.db, &err);
    tu_set(t, T, "pair", "a", init);
    tu_set(t, T, "pair", "b", "0");
    assert_int_equal(pc_txn_commit(t, &err), PC_OK);
    pc_txn_destroy(t);
    pthread_t w[WRITERS], r[READERS];
    for (int i = 0; i < WRITERS; i++) assert_int_equal(pthread_create(&w[i], NULL, writer, &sh), 0);
    for (int i = 0; i < READERS; i++) assert_int_equal(pthread_create(&r[i], NULL, reader, &sh), 0);
    for (int i = 0; i < WRITERS; i++) pthread_join(w[i], NULL);
    for (int i = 0; i < READERS; i++) pthread_join(r[i], NULL);
    if (atomic_load(&sh.failed)) fail_msg("%s", sh.msg);
    /* every commit made a version of a and of b; many vanished meanwhile */
    const versions_t *vs = versions(sh.db, "pair");
    int made = 2 * (atomic_load(&sh.commits) + 1);
    assert_true(atomic_load(&sh.commits) > 0);
    assert_true(vs->n < made);
    pc_db_close(sh.db);
    tu_rmtree(dir);
  }
}

int main(void) {
  if (tu_cluster_mode()) return 0; /* tablets keep every version */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unread_versions_collected),
      cmocka_unit_test(test_open_snapshot_keeps_its_version),
      cmocka_unit_test(test_registry_overflow),
      cmocka_unit_test(test_collector_removes_kept_versions),
      cmocka_unit_test(test_kept_in_memory_scan_and_budget),
      cmocka_unit_test(test_collector_many_passes),
      cmocka_unit_test(test_pending_registration_keeps_version),
      cmocka_unit_test(test_read_waits_for_one_phase_commit_in_flight),
      cmocka_unit_test(test_kept_versions),
      cmocka_unit_test(test_concurrent_readers_see_constant_sum),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
