/* test_crash.c — atomicity across crashes. A forked child opens the data
 * directory, arms one failpoint of the commit protocol with exit(42) and
 * commits a transaction writing "v1" over "v0" in four rows; the process
 * dies at that exact step. The parent then opens the directory (a new
 * session: the child's is dead), checks the locks the child left behind,
 * reads the four rows in a new transaction and asserts all-or-nothing: a
 * crash before the commit point (the primary's commit) leaves v0 everywhere,
 * one after it leaves v1 everywhere. The reads resolve every lock, leaving
 * a rollback record on the primary (or commit records on every row) and no
 * orphan data cell; in some cases a writer meets the dead locks first and
 * must resolve them itself. The same with the "return" action in-process:
 * the client vanishes without cleanup while its session stays alive, so only
 * the lock TTL lets a reader roll it back, and until then the rows stay
 * locked. Finally the store fails at one write of the commit (before or
 * after applying it): the status pc_txn_commit reports must agree with what
 * readers find, PC_OK exactly when the commit point was passed, and
 * PC_UNKNOWN (never PC_OK or an error that says "nothing applied") when the
 * client could not find out because settling its commit failed too, in the
 * two-phase and the one-phase path. A transaction that a resolver rolled
 * back before its commit point still gets PC_ABORTED. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

#include "core/db.h"
#include "core/failpoint.h"
#include "tests/testutil.h"

#define T "crash"
#define COL "c"
#define NROWS 4
#define BIG_LEN 6000 /* above PC_INLINE_MAX: the value lives in a data cell */

static const char *const rows[NROWS] = {"r0", "r1", "r2", "r3"}; /* r0 is the primary */

typedef struct crash_case {
  const char *spec;  /* failpoint specification */
  int committed;     /* the crash is after the commit point */
  int locks_left;    /* locks the crash leaves behind */
  int big;           /* values large enough for data cells */
  int writer_first;  /* the next one to meet the locks is a writer, not a reader */
} crash_case_t;

/* The value a row holds in generation gen ("v0", "v1"); big values repeat
 * the generation digit to BIG_LEN bytes. Returns a malloc'd string. */
static char *value_of(int gen, int big) {
  size_t n = big ? BIG_LEN : 2;
  char *v = malloc(n + 1);
  assert_non_null(v);
  if (big) {
    memset(v, '0' + gen, n);
    v[0] = 'v';
  } else {
    v[0] = 'v';
    v[1] = (char)('0' + gen);
  }
  v[n] = '\0';
  return v;
}

/* ---- the raw view ---------------------------------------------------------- */

typedef struct lockseen {
  int locks, rollbacks, datas;
  int puts_of_start[NROWS]; /* per row: commit records pointing at start */
  uint64_t lock_start, commit_ts;
  int mixed_start, bad_primary, lock_row[NROWS];
  uint64_t session;
  uint64_t start; /* filter for puts_of_start / rollbacks / datas (0: lock census) */
} lockseen_t;

static int row_index(const char *r, size_t n) {
  for (int i = 0; i < NROWS; i++)
    if (n == strlen(rows[i]) && memcmp(r, rows[i], n) == 0) return i;
  return -1;
}

static int seen_cb(void *ctx, const pc_raw_cell_t *c) {
  lockseen_t *s = ctx;
  int i = row_index(c->row, c->row_len);
  if (i < 0) return 0;
  if (c->kind == PC_CELL_LOCK) {
    if (s->locks && c->ts != s->lock_start) s->mixed_start = 1;
    s->lock_start = c->ts;
    s->session = c->session;
    s->locks++;
    s->lock_row[i] = 1;
    if (c->primary_row_len != 2 || memcmp(c->primary_row, "r0", 2) != 0 ||
        strcmp(c->primary_table, T) != 0)
      s->bad_primary = 1;
  } else if (c->kind == PC_CELL_WRITE && s->start) {
    if (c->write_kind == PC_WRITE_ROLLBACK && c->start_ts == s->start) s->rollbacks++;
    if (c->write_kind == PC_WRITE_PUT && c->start_ts == s->start) {
      s->puts_of_start[i]++;
      if (s->commit_ts && s->commit_ts != c->ts) s->mixed_start = 1;
      s->commit_ts = c->ts;
    }
  } else if (c->kind == PC_CELL_DATA && s->start && c->ts == s->start) {
    s->datas++;
  }
  return 0;
}

static lockseen_t census(pc_db_t *db, uint64_t start) {
  lockseen_t s;
  memset(&s, 0, sizeof s);
  s.start = start;
  pc_error_t err;
  if (pc_db_raw_scan(db, T, NULL, 0, NULL, 0, seen_cb, &s, &err) != PC_OK)
    fail_msg("raw scan: %s", err.text);
  return s;
}

/* ---- steps ------------------------------------------------------------------ */

static void write_generation(pc_db_t *db, int gen, int big) {
  char *v = value_of(gen, big);
  tu_put_rows(db, T, rows, NROWS, COL, v);
  free(v);
}

/* Writes generation gen like write_generation, retrying on PC_CONFLICT: the
 * rows may hold locks of a crashed client whose session the lock service
 * still counts as alive (in cluster mode, until its lease runs out); a
 * writer that meets a live lock conflicts at once, and retries. */
static void write_generation_retrying(pc_db_t *db, int gen, int big) {
  char *v = value_of(gen, big);
  pc_status_t st = PC_CONFLICT;
  pc_error_t err;
  for (int attempt = 0; attempt < 3000 && st == PC_CONFLICT; attempt++) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    assert_non_null(t);
    for (int i = 0; i < NROWS; i++) tu_set(t, T, rows[i], COL, v);
    st = pc_txn_commit(t, &err);
    pc_txn_destroy(t);
    if (st == PC_CONFLICT) {
      struct timespec pause = {0, 10 * 1000000L};
      nanosleep(&pause, NULL);
    }
  }
  free(v);
  if (st != PC_OK) fail_msg("writing generation %d: %s (%s)", gen, pc_status_name(st), err.text);
}

/* Reads all rows in a new transaction (timeout_ms) and asserts they all hold
 * generation gen. */
static void expect_generation(pc_db_t *db, int gen, int big, uint32_t timeout_ms) {
  char *want = value_of(gen, big);
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, timeout_ms);
  char got[NROWS][8];
  int mismatch = 0;
  for (int i = 0; i < NROWS; i++) {
    char *v = NULL;
    size_t n = 0;
    pc_status_t st = pc_txn_get(t, T, rows[i], strlen(rows[i]), COL, strlen(COL), &v, &n, &err);
    if (st != PC_OK) fail_msg("read of %s: %s (%s)", rows[i], pc_status_name(st), err.text);
    snprintf(got[i], sizeof got[i], "%.2s", v);
    if (n != strlen(want) || memcmp(v, want, n) != 0) mismatch = 1;
    pc_free(v);
  }
  pc_txn_destroy(t);
  free(want);
  if (mismatch)
    fail_msg("want all rows at v%d, got %s %s %s %s (not all-or-nothing?)", gen, got[0], got[1],
             got[2], got[3]);
}

/* In a forked child: open dir, arm spec and commit generation 1; the
 * failpoint must end the process with status 42. */
static void run_crashing_child(const char *dir, const char *spec, int big) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(60); /* safety net: a hung child dies and fails the test */
    pc_db_t *db = tu_open_ex(dir, 0, 0);
    pc_error_t err;
    if (pc_failpoints_configure(spec, &err) != PC_OK) {
      fprintf(stderr, "child: %s\n", err.text);
      _exit(3);
    }
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t) _exit(4);
    char *v = value_of(1, big);
    for (int i = 0; i < NROWS; i++) tu_set(t, T, rows[i], COL, v);
    pc_status_t st = pc_txn_commit(t, &err);
    fprintf(stderr, "child: commit returned %s (%s) instead of exiting\n", pc_status_name(st), err.text);
    _exit(5);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status)) fail_msg("child for %s died by signal %d", spec, WTERMSIG(status));
  if (WEXITSTATUS(status) != 42) fail_msg("child for %s exited with %d, not 42", spec, WEXITSTATUS(status));
}

/* In cluster mode the client batches secondaries per tablet and sends the
 * batches in parallel: r0 (primary) and r1 live on tablet t2, r2 and r3 on t3,
 * so there are two secondary requests, both done before the first
 * after_secondary point fires. Returns the locks a case leaves there, or -1
 * when its point cannot fire (a third secondary request does not exist). */
static int cluster_locks_left(const char *spec, int locks_left) {
  const char *star = strchr(spec, '*');
  int nth = star ? atoi(strchr(spec, '=') + 1) : 1;
  if (strstr(spec, "after_secondary") && nth > 2) return -1;
  if (strstr(spec, "txn.prewrite.after_secondary")) return NROWS;
  if (strstr(spec, "txn.commit.after_secondary")) return 0;
  return locks_left;
}

static void run_case(const crash_case_t *c) {
  crash_case_t adjusted = *c;
  if (tu_cluster_mode()) {
    adjusted.locks_left = cluster_locks_left(c->spec, c->locks_left);
    if (adjusted.locks_left < 0) skip();
    c = &adjusted;
  }
  char *dir = tu_mkdtemp("crash");
  pc_db_t *db = tu_open_ex(dir, 0, 0);
  write_generation(db, 0, c->big);
  pc_db_close(db); /* the directory is the child's now */

  run_crashing_child(dir, c->spec, c->big);

  db = tu_open_ex(dir, 0, 0);
  /* what the dead child left: locks of one transaction, all naming r0 */
  lockseen_t before = census(db, 0);
  assert_int_equal(before.locks, c->locks_left);
  assert_false(before.mixed_start);
  assert_false(before.bad_primary);
  if (before.locks) {
    assert_true(before.session != pc_db_session(db));
    assert_int_equal(before.lock_row[0], !c->committed); /* the primary is locked until the commit point */
  }
  uint64_t start = before.lock_start;

  if (c->writer_first) {
    /* a writer resolves the dead transaction's locks on its way */
    write_generation_retrying(db, 2, c->big);
  } else {
    /* the child's session is dead: no waiting for the TTL (3 s by default)
     * is needed, but allow it anyway so that a slow machine cannot fail */
    expect_generation(db, c->committed ? 1 : 0, c->big, 10000);
  }

  lockseen_t after = census(db, start);
  assert_int_equal(after.locks, 0);
  assert_false(after.mixed_start);
  if (start) {
    if (c->committed) {
      for (int i = 0; i < NROWS; i++) assert_int_equal(after.puts_of_start[i], 1);
      assert_int_equal(after.rollbacks, 0);
      assert_int_equal(after.datas, c->big ? NROWS : 0);
    } else {
      for (int i = 0; i < NROWS; i++) assert_int_equal(after.puts_of_start[i], 0);
      assert_true(after.rollbacks >= 1); /* at least the primary's */
      assert_int_equal(after.datas, 0);  /* no orphan data of the rolled-back txn */
    }
  }
  /* the rows are free: a new transaction writes them */
  write_generation(db, 2, c->big);
  expect_generation(db, 2, c->big, 10000);
  assert_int_equal(tu_raw_count(db, T, PC_CELL_LOCK), 0);
  pc_db_close(db);
  tu_rmtree(dir);
}

static const crash_case_t cases[] = {
    {"txn.prewrite.after_primary=exit(42)", 0, 1, 0, 0},
    {"txn.prewrite.after_secondary=1*exit(42)", 0, 2, 0, 0},
    {"txn.prewrite.after_secondary=2*exit(42)", 0, 3, 0, 0},
    {"txn.prewrite.after_secondary=3*exit(42)", 0, 4, 0, 0},
    {"txn.commit.before_primary=exit(42)", 0, 4, 0, 0},
    {"txn.commit.after_primary=exit(42)", 1, 3, 0, 0},
    {"txn.commit.after_secondary=1*exit(42)", 1, 2, 0, 0},
    {"txn.commit.after_secondary=2*exit(42)", 1, 1, 0, 0},
    {"txn.commit.after_secondary=3*exit(42)", 1, 0, 0, 0},
    /* large values: the data cells of a rolled-back transaction go too */
    {"txn.prewrite.after_secondary=2*exit(42)", 0, 3, 1, 0},
    {"txn.commit.before_primary=exit(42)", 0, 4, 1, 0},
    {"txn.commit.after_primary=exit(42)", 1, 3, 1, 0},
    /* a writer, not a reader, is the first to meet the dead transaction */
    {"txn.prewrite.after_secondary=2*exit(42)", 0, 3, 0, 1},
    {"txn.commit.before_primary=exit(42)", 0, 4, 1, 1},
    {"txn.commit.after_primary=exit(42)", 1, 3, 0, 1},
    {"txn.commit.after_secondary=1*exit(42)", 1, 2, 1, 1},
};

static void test_exit_case(void **state) { run_case(*state); }

/* ---- in-process: the client vanishes, its session lives on ---------------- */

/* Arms spec with "return", commits generation 1 in db, and clears it.
 * Before the commit point the commit reports the failpoint's I/O error;
 * after it the status is not asserted (the client "vanished"). Returns the
 * start_ts used. */
static uint64_t vanish_commit(pc_db_t *db, const char *spec, int committed) {
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure(spec, &err), PC_OK);
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  uint64_t start = pc_txn_start_ts(t);
  char *v = value_of(1, 0);
  for (int i = 0; i < NROWS; i++) tu_set(t, T, rows[i], COL, v);
  free(v);
  pc_status_t st = pc_txn_commit(t, &err);
  pc_error_t err2;
  assert_int_equal(pc_failpoints_configure(NULL, &err2), PC_OK);
  if (!committed) {
    assert_int_equal(st, PC_IO_ERROR);
    assert_non_null(strstr(err.text, "failpoint"));
  }
  pc_txn_destroy(t);
  return start;
}

typedef struct vanish_case {
  const char *spec;
  int committed;
  int locks_left;
} vanish_case_t;

static const vanish_case_t vanish_cases[] = {
    {"txn.prewrite.after_primary=return", 0, 1},
    {"txn.prewrite.after_secondary=2*return", 0, 3},
    {"txn.commit.before_primary=return", 0, 4},
    {"txn.commit.after_primary=return", 1, 3},
    {"txn.commit.after_secondary=1*return", 1, 2},
};

/* A short TTL (300 ms): a reader waits it out (its timeout is far longer),
 * then rolls the live session's abandoned transaction back, or forward once
 * its primary committed. */
static void test_return_case(void **state) {
  const vanish_case_t *c = *state;
  vanish_case_t adjusted = *c;
  if (tu_cluster_mode()) { /* secondaries are batched per tablet there */
    adjusted.locks_left = cluster_locks_left(c->spec, c->locks_left);
    if (adjusted.locks_left < 0) skip();
    c = &adjusted;
  }
  char *dir = tu_mkdtemp("vanish");
  pc_db_t *db = tu_open_ex(dir, 300, 0);
  write_generation(db, 0, 0);
  uint64_t start = vanish_commit(db, c->spec, c->committed);
  lockseen_t before = census(db, start);
  assert_int_equal(before.locks, c->locks_left);
  if (before.locks) {
    assert_int_equal(before.session, pc_db_session(db)); /* owner alive */
    assert_int_equal(before.lock_start, start);
  }
  expect_generation(db, c->committed, 0, 30000);
  lockseen_t after = census(db, start);
  assert_int_equal(after.locks, 0);
  if (c->committed)
    for (int i = 0; i < NROWS; i++) assert_int_equal(after.puts_of_start[i], 1);
  else
    assert_true(after.rollbacks >= 1);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A long TTL: the abandoned locks of a live session block readers (PC_LOCKED
 * after their timeout) and writers (PC_CONFLICT) until the session ends;
 * reopening the directory starts a new session, and then a reader rolls the
 * transaction back at once. */
static void test_live_session_blocks_until_it_ends(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("vanish-live");
  pc_db_t *db = tu_open_ex(dir, 600000, 0);
  write_generation(db, 0, 0);
  uint64_t start = vanish_commit(db, "txn.commit.before_primary=return", 0);
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, 2000); /* a busy machine's round trips fit in it */
  char *v = NULL;
  size_t n = 0;
  assert_int_equal(pc_txn_get(t, T, "r2", 2, COL, strlen(COL), &v, &n, &err), PC_LOCKED);
  assert_null(v);
  assert_non_null(strstr(err.text, "r2"));
  pc_txn_destroy(t);
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, 2000); /* a busy machine's round trips fit in it */
  tu_set(t, T, "r1", COL, "mine");
  tu_set(t, T, "other", COL, "mine");
  assert_int_equal(pc_txn_commit(t, &err), PC_CONFLICT);
  pc_txn_destroy(t);
  lockseen_t held = census(db, start);
  if (held.locks != NROWS)
    fail_msg("the live session's locks: %d of %d left (r0 %d r1 %d r2 %d r3 %d)", held.locks,
             NROWS, held.lock_row[0], held.lock_row[1], held.lock_row[2], held.lock_row[3]);
  pc_db_close(db);

  db = tu_open_ex(dir, 600000, 0);
  expect_generation(db, 0, 0, 10000);
  assert_int_equal(census(db, start).locks, 0);
  /* the failed writer above left nothing behind either */
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  assert_null(tu_get(t, T, "other", COL));
  pc_txn_destroy(t);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- in-process: the store fails at one write --------------------------- */

typedef struct store_fail_case {
  const char *spec;
  pc_status_t want;  /* what pc_txn_commit must return */
  int committed;     /* what readers must find */
  int locks_left;    /* locks left right after the commit returned */
} store_fail_case_t;

/* Writes in order: prewrites of r0 (the primary), r1, r2, r3, then the
 * commits of r0 (the commit point), r1, r2, r3. */
static const store_fail_case_t store_fail_cases[] = {
    /* a prewrite fails: the client rolls back what it prewrote, at once */
    {"store.before_apply=3*return", PC_IO_ERROR, 0, 0},
    /* the primary's commit is not applied: the client settles the outcome on
     * the primary (rolling back, with a rollback record) and cleans up */
    {"store.before_apply=5*return", PC_IO_ERROR, 0, 0},
    /* a secondary's commit fails after the commit point: the commit stands,
     * the status is PC_OK, and readers roll the secondary forward */
    {"store.before_apply=6*return", PC_OK, 1, 1},
    {"store.before_apply=8*return", PC_OK, 1, 1},
    /* the primary's commit is applied but its reply is lost: the client finds
     * the commit record on the primary, so the status is PC_OK (percolator.h)
     * and it commits the secondaries */
    {"store.after_apply=5*return", PC_OK, 1, 0},
    /* the same, and settling fails too (the primary cannot be asked): the
     * client cannot know, PC_UNKNOWN; readers roll the commit forward, and
     * the secondaries stay locked until they do */
    {"store.after_apply=5*return;txn.settle.before_check=return", PC_UNKNOWN, 1, 3},
    /* the primary's commit is not applied and settling fails: PC_UNKNOWN
     * too (the client cannot tell the two apart); readers roll back */
    {"store.before_apply=5*return;txn.settle.before_check=return", PC_UNKNOWN, 0, 4},
};

static void test_store_fail_case(void **state) {
  const store_fail_case_t *c = *state;
  if (tu_cluster_mode()) skip(); /* the store's failpoints live in the tablet servers there */
  char *dir = tu_mkdtemp("storefail");
  pc_db_t *db = tu_open_ex(dir, 300, 0);
  write_generation(db, 0, 0);
  pc_error_t err, err2;
  assert_int_equal(pc_failpoints_configure(c->spec, &err), PC_OK);
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  uint64_t start = pc_txn_start_ts(t);
  for (int i = 0; i < NROWS; i++) tu_set(t, T, rows[i], COL, "v1");
  pc_status_t st = pc_txn_commit(t, &err);
  uint64_t cts = pc_txn_commit_ts(t);
  assert_int_equal(pc_failpoints_configure(NULL, &err2), PC_OK);
  pc_txn_destroy(t);
  lockseen_t before = census(db, start);
  /* readers first: whatever the status says, the rows are all-or-nothing */
  expect_generation(db, c->committed, 0, 30000);
  lockseen_t after = census(db, start);
  pc_db_close(db);
  tu_rmtree(dir);
  assert_int_equal(after.locks, 0);
  if (st != c->want)
    fail_msg("%s: commit returned %s (%s), want %s; readers see v%d", c->spec, pc_status_name(st),
             err.text, pc_status_name(c->want), c->committed);
  assert_int_equal(cts != 0, st == PC_OK);
  assert_int_equal(before.locks, c->locks_left);
  if (st == PC_UNKNOWN) { /* the message says so and names the request's failure */
    assert_int_equal(err.code, PC_UNKNOWN);
    assert_non_null(strstr(err.text, "commit outcome unknown"));
    assert_non_null(strstr(err.text, "failpoint store."));
  }
}

/* A single-row transaction commits in one request (one-phase): when that
 * request fails without a verdict and settling fails too, the status is
 * PC_UNKNOWN whether or not the write was applied, and readers find one or
 * the other. */
static void test_one_phase_outcome_unknown(void **state) {
  (void)state;
  if (tu_cluster_mode()) skip(); /* the store's failpoints live in the tablet servers there */
  static const struct {
    const char *spec;
    const char *want; /* what a reader finds */
  } onephase[] = {
      {"store.after_apply=1*return;txn.settle.before_check=return", "new"},
      {"store.before_apply=1*return;txn.settle.before_check=return", "old"},
  };
  char *dir = tu_mkdtemp("onephase-unknown");
  pc_db_t *db = tu_open_ex(dir, 300, 1);
  for (size_t i = 0; i < sizeof onephase / sizeof onephase[0]; i++) {
    const char *r = "one";
    tu_put_rows(db, T, &r, 1, COL, "old");
    pc_error_t err, err2;
    assert_int_equal(pc_failpoints_configure(onephase[i].spec, &err), PC_OK);
    pc_txn_t *t = pc_txn_begin(db, &err);
    assert_non_null(t);
    tu_set(t, T, r, COL, "new");
    pc_status_t st = pc_txn_commit(t, &err);
    uint64_t cts = pc_txn_commit_ts(t);
    assert_int_equal(pc_failpoints_configure(NULL, &err2), PC_OK);
    pc_txn_destroy(t);
    if (st != PC_UNKNOWN)
      fail_msg("%s: commit returned %s (%s), want unknown", onephase[i].spec, pc_status_name(st),
               err.text);
    assert_int_equal(err.code, PC_UNKNOWN);
    assert_non_null(strstr(err.text, "commit outcome unknown"));
    assert_non_null(strstr(err.text, "failpoint store."));
    assert_int_equal(cts, 0);
    t = pc_txn_begin(db, &err);
    assert_non_null(t);
    char *v = tu_get(t, T, r, COL);
    pc_txn_destroy(t);
    assert_non_null(v);
    if (strcmp(v, onephase[i].want) != 0)
      fail_msg("%s: a reader finds '%s', want '%s'", onephase[i].spec, v, onephase[i].want);
    free(v);
  }
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- a definite rollback is PC_ABORTED ------------------------------------- */

typedef struct held_commit {
  pc_db_t *db;
  _Atomic uint64_t start;
  pc_status_t st;
  pc_error_t err;
} held_commit_t;

static void *held_committer(void *arg) {
  held_commit_t *h = arg;
  pc_txn_t *t = pc_txn_begin(h->db, &h->err);
  if (!t) {
    h->st = h->err.code;
    return NULL;
  }
  h->start = pc_txn_start_ts(t);
  for (int i = 0; i < NROWS; i++) tu_set(t, T, rows[i], COL, "v1");
  h->st = pc_txn_commit(t, &h->err); /* held at txn.commit.before_primary */
  pc_txn_destroy(t);
  return NULL;
}

/* A resolver rolls the transaction back (on its primary) while the client
 * is held before its commit point: the client's commit of the primary then
 * finds the rollback record, and pc_txn_commit says PC_ABORTED, not
 * PC_UNKNOWN nor an error; nothing is applied and no lock is left. Should
 * the committer pass its commit point first (a very slow machine), the
 * rollback finds the commit instead and the case is tried again with a
 * longer hold. */
static void test_rolled_back_is_aborted(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("rolledback");
  pc_db_t *db = tu_open_ex(dir, 600000, 0); /* no reader rolls it back on its own */
  write_generation(db, 0, 0);
  int done = 0;
  for (int hold = 500; hold <= 8000 && !done; hold *= 2) {
    char spec[64];
    snprintf(spec, sizeof spec, "txn.commit.before_primary=sleep(%d)", hold);
    pc_error_t err;
    assert_int_equal(pc_failpoints_configure(spec, &err), PC_OK);
    held_commit_t h = {db, 0, PC_INTERNAL, {PC_OK, ""}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, held_committer, &h), 0);
    lockseen_t seen = {0};
    for (int i = 0; i < 20000 && seen.locks < NROWS; i++) { /* every row prewritten */
      seen = census(db, 0);
      if (seen.locks < NROWS) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
      }
    }
    assert_int_equal(seen.locks, NROWS);
    /* what a resolver that found the owner dead does: check_txn on the primary */
    pc_cell_t primary = {T, rows[0], strlen(rows[0]), COL, strlen(COL)};
    uint64_t now, cts = 0;
    pc_txn_state_t found;
    assert_int_equal(pc_db_timestamp(db, 10000, &now, &err), PC_OK);
    pc_status_t st = db->store->ops->check_txn(db->store, &primary, h.start, now, 1, &found,
                                               &cts, &err);
    pthread_join(th, NULL);
    assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
    if (st != PC_OK) fail_msg("check_txn: %s (%s)", pc_status_name(st), err.text);
    if (found == PC_TXN_COMMITTED) { /* the committer was first: try a longer hold */
      assert_int_equal(h.st, PC_OK);
      write_generation(db, 0, 0);
      continue;
    }
    assert_int_equal(found, PC_TXN_ROLLED_BACK);
    if (h.st != PC_ABORTED)
      fail_msg("commit after a rollback returned %s (%s), want aborted", pc_status_name(h.st),
               h.err.text);
    assert_int_equal(h.err.code, PC_ABORTED);
    assert_int_equal(census(db, h.start).locks, 0);
    expect_generation(db, 0, 0, 10000);
    done = 1;
  }
  assert_true(done);
  pc_db_close(db);
  tu_rmtree(dir);
}

int main(void) {
  enum {
    NEXIT = sizeof cases / sizeof cases[0],
    NRET = sizeof vanish_cases / sizeof vanish_cases[0],
    NFAIL = sizeof store_fail_cases / sizeof store_fail_cases[0]
  };
  struct CMUnitTest tests[NEXIT + NRET + NFAIL + 3];
  char names[NEXIT + NRET + NFAIL][112];
  size_t k = 0;
  for (size_t i = 0; i < NEXIT; i++, k++) {
    snprintf(names[k], sizeof names[k], "exit at %s%s%s", cases[i].spec,
             cases[i].big ? " (large values)" : "", cases[i].writer_first ? " (writer first)" : "");
    tests[k] = (struct CMUnitTest){names[k], test_exit_case, NULL, NULL, (void *)&cases[i]};
  }
  for (size_t i = 0; i < NRET; i++, k++) {
    snprintf(names[k], sizeof names[k], "vanish at %s", vanish_cases[i].spec);
    tests[k] = (struct CMUnitTest){names[k], test_return_case, NULL, NULL, (void *)&vanish_cases[i]};
  }
  for (size_t i = 0; i < NFAIL; i++, k++) {
    snprintf(names[k], sizeof names[k], "store fails at %s", store_fail_cases[i].spec);
    tests[k] = (struct CMUnitTest){names[k], test_store_fail_case, NULL, NULL,
                                   (void *)&store_fail_cases[i]};
  }
  tests[k++] = (struct CMUnitTest){"live session blocks until it ends",
                                   test_live_session_blocks_until_it_ends, NULL, NULL, NULL};
  tests[k++] = (struct CMUnitTest){"one-phase commit outcome unknown",
                                   test_one_phase_outcome_unknown, NULL, NULL, NULL};
  tests[k++] = (struct CMUnitTest){"rolled back before the commit point is aborted",
                                   test_rolled_back_is_aborted, NULL, NULL, NULL};
  return _cmocka_run_group_tests("test_crash", tests, k, NULL, NULL);
}
