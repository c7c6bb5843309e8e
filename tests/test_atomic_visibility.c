/* test_atomic_visibility.c — no reader ever sees part of a transaction. One
 * writer thread commits a sequence of transactions, the k-th writing k into
 * four rows of table "av" and one cell of table "av2"; failpoints stretch the
 * windows in which the transaction is half done (after the primary's commit,
 * after each secondary's commit, between prewrites). Reader threads take
 * snapshot after snapshot, by gets and by scan, and require all five cells
 * to hold the same k, and k never to go back for one reader. Readers that
 * meet the half-committed transaction roll its secondaries forward in
 * parallel with the writer. Bounded by the writer's transaction count. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/failpoint.h"
#include "tests/testutil.h"

/* Under ThreadSanitizer: LevelDB comes from the system, uninstrumented, so
 * TSan cannot see the atomics with which its memtable publishes entries to
 * concurrent readers and reports every read of a fresh entry as a race
 * inside libleveldb (memcpy in Add vs memcmp in Get). Those reports are
 * suppressed; races in this project's own code are still reported. */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "race:libleveldb.so\n"; }
#endif

#define T "av"
#define T2 "av2"
#define COL "c"
#define NROWS 4
#define WRITES 30
#define READERS 2
#define MAX_SNAPSHOTS 1000000 /* per reader: a bound in case the writer stalls */
#define PACE_NS 200000       /* readers pause 0.2 ms between snapshots to leave the writer CPU */

static const char *const rows[NROWS] = {"r0", "r1", "r2", "r3"};

typedef struct shared {
  pc_db_t *db;
  atomic_int writer_done, failed;
  atomic_long snapshots, changes;
  pthread_mutex_t mu;
  char failure[512];
} shared_t;

typedef struct reader_arg {
  shared_t *s;
  int id;
} reader_arg_t;

static void failf(shared_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(shared_t *s, const char *fmt, ...) {
  pthread_mutex_lock(&s->mu);
  if (!atomic_load(&s->failed)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->failure, sizeof s->failure, fmt, ap);
    va_end(ap);
    atomic_store(&s->failed, 1);
  }
  pthread_mutex_unlock(&s->mu);
}

static long parse(const char *v, size_t n) {
  char buf[32];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, v, n);
  buf[n] = '\0';
  return strtol(buf, NULL, 10);
}

/* The value of (table, row, COL) at t: k, 0 when not found, -1 on failure. */
static long read_cell(shared_t *s, pc_txn_t *t, const char *table, const char *row) {
  char *v = NULL;
  size_t n = 0;
  pc_error_t err;
  pc_status_t st = pc_txn_get(t, table, row, strlen(row), COL, strlen(COL), &v, &n, &err);
  if (st == PC_NOT_FOUND) return 0;
  if (st != PC_OK) {
    failf(s, "read of %s/%s: %s (%s)", table, row, pc_status_name(st), err.text);
    return -1;
  }
  long k = parse(v, n);
  pc_free(v);
  return k;
}

static void *writer(void *arg) {
  shared_t *s = arg;
  for (long k = 1; k <= WRITES && !atomic_load(&s->failed); k++) {
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(s->db, &err);
    if (!t) {
      failf(s, "writer begin: %s", err.text);
      break;
    }
    char val[32];
    snprintf(val, sizeof val, "%ld", k);
    for (int i = 0; i < NROWS; i++) tu_set(t, T, rows[i], COL, val);
    tu_set(t, T2, "x", COL, val);
    pc_status_t st = pc_txn_commit(t, &err);
    if (st != PC_OK) failf(s, "writer commit %ld: %s (%s)", k, pc_status_name(st), err.text);
    pc_txn_destroy(t);
  }
  atomic_store(&s->writer_done, 1);
  return NULL;
}

static void *reader(void *arg) {
  reader_arg_t *ra = arg;
  shared_t *s = ra->s;
  long last = 0;
  for (long i = 0; i < MAX_SNAPSHOTS && !atomic_load(&s->failed); i++) {
    int done = atomic_load(&s->writer_done); /* one more snapshot after the writer finished */
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(s->db, &err);
    if (!t) {
      failf(s, "reader begin: %s", err.text);
      return NULL;
    }
    long got[NROWS + 1];
    int by_scan = (i + ra->id) % 2;
    if (by_scan) {
      for (int r = 0; r < NROWS; r++) got[r] = 0;
      pc_scan_t *sc = pc_txn_scan(t, T, NULL, 0, NULL, 0, &err);
      if (!sc) {
        failf(s, "scan: %s", err.text);
        pc_txn_destroy(t);
        return NULL;
      }
      pc_status_t st;
      while ((st = pc_scan_next(sc, &err)) == PC_OK) {
        size_t rl, vl;
        const char *row = pc_scan_row(sc, &rl), *v = pc_scan_value(sc, &vl);
        int r = 0;
        while (r < NROWS && !(rl == strlen(rows[r]) && memcmp(row, rows[r], rl) == 0)) r++;
        if (r == NROWS) {
          failf(s, "scan returned an unexpected row '%.*s'", (int)rl, row);
          break;
        }
        got[r] = parse(v, vl);
      }
      pc_scan_destroy(sc);
      if (st != PC_OK && st != PC_NOT_FOUND) {
        failf(s, "scan: %s (%s)", pc_status_name(st), err.text);
        pc_txn_destroy(t);
        return NULL;
      }
    } else {
      for (int r = 0; r < NROWS; r++) got[r] = read_cell(s, t, T, rows[r]);
    }
    got[NROWS] = read_cell(s, t, T2, "x");
    uint64_t ts = pc_txn_start_ts(t);
    pc_txn_destroy(t);
    if (atomic_load(&s->failed)) return NULL;
    for (int r = 1; r <= NROWS; r++)
      if (got[r] != got[0]) {
        failf(s, "snapshot %llu (%s) saw part of a transaction: %ld %ld %ld %ld %ld",
              (unsigned long long)ts, by_scan ? "scan" : "gets", got[0], got[1], got[2], got[3],
              got[4]);
        return NULL;
      }
    if (got[0] < last) {
      failf(s, "snapshot %llu went back from %ld to %ld", (unsigned long long)ts, last, got[0]);
      return NULL;
    }
    if (got[0] != last) atomic_fetch_add(&s->changes, 1);
    last = got[0];
    atomic_fetch_add(&s->snapshots, 1);
    if (done) {
      if (last != WRITES) failf(s, "after the writer finished a snapshot saw %ld, not %d", last, WRITES);
      return NULL;
    }
    struct timespec pace = {0, PACE_NS};
    nanosleep(&pace, NULL);
  }
  failf(s, "reader %d: the writer did not finish within %d snapshots", ra->id, MAX_SNAPSHOTS);
  return NULL;
}

static void run(const char *spec) {
  char *dir = tu_mkdtemp("atomic");
  shared_t *s = calloc(1, sizeof *s);
  assert_non_null(s);
  pthread_mutex_init(&s->mu, NULL);
  s->db = tu_open(dir, 0);
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure(spec, &err), PC_OK);

  pthread_t w, r[READERS];
  reader_arg_t ra[READERS];
  for (int i = 0; i < READERS; i++) {
    ra[i].s = s;
    ra[i].id = i;
    assert_int_equal(pthread_create(&r[i], NULL, reader, &ra[i]), 0);
  }
  assert_int_equal(pthread_create(&w, NULL, writer, s), 0);
  pthread_join(w, NULL);
  for (int i = 0; i < READERS; i++) pthread_join(r[i], NULL);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  if (atomic_load(&s->failed)) fail_msg("%s", s->failure);
  print_message("%s: %ld snapshots, %ld changes seen\n", spec, atomic_load(&s->snapshots),
                atomic_load(&s->changes));
  assert_true(atomic_load(&s->snapshots) >= READERS);
  assert_int_equal(tu_raw_count(s->db, NULL, PC_CELL_LOCK), 0);

  pc_db_close(s->db);
  pthread_mutex_destroy(&s->mu);
  free(s);
  tu_rmtree(dir);
}

/* After each secondary's commit: readers meet the remaining secondaries'
 * locks and must roll them forward (primary committed). */
static void test_sleep_after_secondary(void **state) {
  (void)state;
  run("txn.commit.after_secondary=sleep(5)");
}

/* After the commit point, before any secondary is committed. */
static void test_sleep_after_primary(void **state) {
  (void)state;
  run("txn.commit.after_primary=sleep(20)");
}

/* Between prewrites and before the commit point: readers at a later
 * snapshot wait on the live locks; readers at an earlier one pass them. */
static void test_sleep_before_commit_point(void **state) {
  (void)state;
  run("txn.prewrite.after_secondary=sleep(3);txn.commit.before_primary=sleep(10)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sleep_after_secondary),
      cmocka_unit_test(test_sleep_after_primary),
      cmocka_unit_test(test_sleep_before_commit_point),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
