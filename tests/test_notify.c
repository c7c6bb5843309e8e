/* test_notify.c — the notification layer under the worker engine:
 * strong notifications written by the commit of an observed put or delete
 * (one-phase and two-phase, primary and secondary, and by a reader rolling
 * a crashed writer's secondary forward), none for other columns; observers
 * registered in the store, which every store knows, so that a client opened
 * before a registration notifies at once; the backfill that presents the
 * cells written before a registration; a malformed record passed over and
 * retired; weak notifications (pc_txn_notify_weak): written at commit, not
 * after an abort, conflicting with a concurrent writer of the cell,
 * coexisting with a write of the cell; the store's scan_notify by bucket
 * ranges with resumption, and clear_notify; system columns; and observer
 * registration errors. It runs embedded and, with PERCOLATOR_TEST_CLUSTER
 * set, against a cluster of real daemons (three tablets), where
 * scan_notify asks every tablet and every tablet is given the observers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <percolator/observer.h>

#include "core/db.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "tests/testutil.h"

#define T "nt"
#define OBS "c:obs"   /* strongly observed in most tests */
#define PLAIN "c:plain"

typedef struct fixture {
  char *dir;
  pc_db_t *db;
} fixture_t;

static int setup_with(void **state, int one_phase, uint32_t lease_ms) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->dir = tu_mkdtemp("notify");
  f->db = tu_open_ex(f->dir, lease_ms, one_phase);
  *state = f;
  return 0;
}

/* a short lease: a vanished writer's locks are settled quickly */
static int setup_1pc(void **state) { return setup_with(state, 1, 400); }
static int setup_2pc(void **state) { return setup_with(state, 0, 400); }
/* a lease that a busy machine does not run out between a writer's prewrite
 * and the next transaction's commit, for tests that need its owner alive */
#define LONG_LEASE_MS 5000
static int setup_2pc_long_lease(void **state) { return setup_with(state, 0, LONG_LEASE_MS); }

static int teardown(void **state) {
  fixture_t *f = *state;
  pc_db_close(f->db);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

static pc_db_t *db_of(void **state) { return ((fixture_t *)*state)->db; }

static void arm(const char *spec) {
  pc_error_t err;
  if (pc_failpoints_configure(spec, &err) != PC_OK) fail_msg("failpoints: %s", err.text);
}

/* ---- transactions -------------------------------------------------------- */

static pc_txn_t *begin(pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("pc_txn_begin: %s", err.text);
  return t;
}

static void set(pc_txn_t *t, const char *row, const char *col, const char *val) {
  pc_error_t err;
  pc_status_t st = pc_txn_set(t, T, row, strlen(row), col, strlen(col), val, strlen(val), &err);
  if (st != PC_OK) fail_msg("set %s/%s: %s (%s)", row, col, pc_status_name(st), err.text);
}

static void del(pc_txn_t *t, const char *row, const char *col) {
  pc_error_t err;
  pc_status_t st = pc_txn_delete(t, T, row, strlen(row), col, strlen(col), &err);
  if (st != PC_OK) fail_msg("delete %s/%s: %s (%s)", row, col, pc_status_name(st), err.text);
}

static void weak(pc_txn_t *t, const char *row, const char *col) {
  pc_error_t err;
  pc_status_t st = pc_txn_notify_weak(t, T, row, strlen(row), col, strlen(col), &err);
  if (st != PC_OK) fail_msg("notify_weak %s/%s: %s (%s)", row, col, pc_status_name(st), err.text);
}

/* Commits t (asserting want), returns its commit_ts and destroys it. */
static uint64_t commit_expect(pc_txn_t *t, pc_status_t want) {
  pc_error_t err;
  pc_status_t st = pc_txn_commit(t, &err);
  if (st != want)
    fail_msg("commit: want %s, got %s (%s)", pc_status_name(want), pc_status_name(st), err.text);
  uint64_t ts = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  return ts;
}

/* The committed value of (T, row, col), or NULL; malloc'd. */
static char *read_cell(pc_db_t *db, const char *row, const char *col) {
  pc_txn_t *t = begin(db);
  char *v = tu_get(t, T, row, col);
  pc_txn_destroy(t);
  return v;
}

static void register_obs(pc_db_t *db, const char *name, const char *col, int kind) {
  pc_error_t err;
  pc_status_t st = pc_db_register_observed(db, name, T, col, strlen(col), kind, &err);
  if (st != PC_OK) fail_msg("register %s: %s (%s)", name, pc_status_name(st), err.text);
}

/* A transaction that vanishes at failpoint spec, leaving what it wrote to
 * resolvers (its session, this process's, stays alive). */
static void vanish(pc_txn_t *t, const char *spec) {
  arm(spec);
  pc_error_t err;
  (void)pc_txn_commit(t, &err);
  arm(NULL);
  pc_txn_destroy(t);
}

typedef struct raw_tally {
  const char *col;
  pc_cell_kind_t kind;
  size_t n;
  int write_kind; /* of the last one counted */
} raw_tally_t;

static int tally_fn(void *ctx, const pc_raw_cell_t *c) {
  raw_tally_t *t = ctx;
  if (c->kind == t->kind && c->column_len == strlen(t->col) &&
      memcmp(c->column, t->col, c->column_len) == 0) {
    t->n++;
    t->write_kind = (int)c->write_kind;
  }
  return 0;
}

/* The internal cells of kind of (T, row, col) in the raw view; *write_kind
 * receives the last one's. */
static size_t raw_count_of(pc_db_t *db, const char *row, const char *col, pc_cell_kind_t kind,
                           int *write_kind) {
  raw_tally_t t = {col, kind, 0, -1};
  char end[32];
  size_t rl = strlen(row);
  assert_true(rl + 1 < sizeof end);
  memcpy(end, row, rl);
  end[rl] = '\0'; /* the row right after row */
  pc_error_t err;
  if (pc_db_raw_scan(db, T, row, rl, end, rl + 1, tally_fn, &t, &err) != PC_OK)
    fail_msg("raw scan: %s", err.text);
  if (write_kind) *write_kind = t.write_kind;
  return t.n;
}

/* ---- notifications, as the store's scan_notify finds them ---------------- */

#define MAX_SEEN 512

typedef struct seen_one {
  char table[PC_MAX_TABLE + 1];
  char row[32], col[32];
  size_t rlen, clen;
  uint64_t ts;
  int weak;
  uint32_t bucket;
} seen_one_t;

typedef struct seen {
  seen_one_t v[MAX_SEEN];
  size_t n;
  uint32_t lo, hi; /* the range scanned: every bucket must lie in it */
} seen_t;

static int collect(void *ctx, const pc_notification_t *n) {
  seen_t *s = ctx;
  if (s->n == MAX_SEEN) fail_msg("more than %d notifications", MAX_SEEN);
  seen_one_t *o = &s->v[s->n++];
  memset(o, 0, sizeof *o);
  if (strlen(n->cell.table) > PC_MAX_TABLE || n->cell.rlen >= sizeof o->row ||
      n->cell.clen >= sizeof o->col)
    fail_msg("notification of an unexpected cell");
  strcpy(o->table, n->cell.table);
  memcpy(o->row, n->cell.row, n->cell.rlen);
  memcpy(o->col, n->cell.col, n->cell.clen);
  o->rlen = n->cell.rlen;
  o->clen = n->cell.clen;
  o->ts = n->ts;
  o->weak = n->weak;
  o->bucket = n->bucket;
  if (n->bucket < s->lo || n->bucket >= s->hi)
    fail_msg("bucket %u outside [%u, %u)", n->bucket, s->lo, s->hi);
  if (n->bucket != pc_notify_bucket(n->cell.table, n->cell.row, n->cell.rlen))
    fail_msg("bucket %u is not its row's", n->bucket);
  return 0;
}

/* Every notification of buckets [lo, hi), page by page, each page resuming
 * after the last notification of the one before. */
static void scan_range(pc_db_t *db, uint32_t lo, uint32_t hi, size_t page, seen_t *out) {
  pc_store_t *s = db->store;
  memset(out, 0, sizeof *out);
  out->lo = lo;
  out->hi = hi;
  for (;;) {
    size_t before = out->n;
    pc_notification_t after;
    seen_one_t *last = before ? &out->v[before - 1] : NULL;
    if (last)
      after = (pc_notification_t){{last->table, last->row, last->rlen, last->col, last->clen},
                                  last->ts, last->weak, last->bucket};
    pc_error_t err;
    pc_status_t st = s->ops->scan_notify(s, lo, hi, last ? &after : NULL, page, collect, out, &err);
    if (st != PC_OK) fail_msg("scan_notify: %s (%s)", pc_status_name(st), err.text);
    if (out->n - before > page) fail_msg("scan_notify delivered more than its limit");
    if (out->n - before < page) return;
  }
}

static void scan_all(pc_db_t *db, seen_t *out) { scan_range(db, 0, PC_NOTIFY_BUCKETS, 7, out); }

/* How many notifications of (T, row, col) of that kind out holds; *ts
 * receives the last one's timestamp. */
static size_t count_of(const seen_t *s, const char *row, const char *col, int weak_kind,
                       uint64_t *ts) {
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++) {
    const seen_one_t *o = &s->v[i];
    if (strcmp(o->table, T) == 0 && strcmp(o->row, row) == 0 && strcmp(o->col, col) == 0 &&
        o->weak == weak_kind) {
      n++;
      if (ts) *ts = o->ts;
    }
  }
  return n;
}

/* Asserts that (T, row, col) has exactly one notification of the kind, at ts. */
static void expect_one(const seen_t *s, const char *row, const char *col, int weak_kind,
                       uint64_t ts) {
  uint64_t got = 0;
  size_t n = count_of(s, row, col, weak_kind, &got);
  if (n != 1)
    fail_msg("%s/%s: %zu %s notifications, want 1", row, col, n, weak_kind ? "weak" : "strong");
  if (ts && got != ts)
    fail_msg("%s/%s: notification at %llu, want the commit's %llu", row, col,
             (unsigned long long)got, (unsigned long long)ts);
}

static void expect_none(const seen_t *s, const char *row, const char *col) {
  size_t n = count_of(s, row, col, 0, NULL) + count_of(s, row, col, 1, NULL);
  if (n) fail_msg("%s/%s: %zu notifications, want none", row, col, n);
}

/* ---- strong notifications ------------------------------------------------- */

/* Whether s holds a notification of (T, row, col) of that kind at ts. */
static int has_at(const seen_t *s, const char *row, const char *col, int weak_kind, uint64_t ts) {
  for (size_t i = 0; i < s->n; i++) {
    const seen_one_t *o = &s->v[i];
    if (strcmp(o->table, T) == 0 && strcmp(o->row, row) == 0 && strcmp(o->col, col) == 0 &&
        o->weak == weak_kind && o->ts == ts)
      return 1;
  }
  return 0;
}

/* A put or a delete of a strongly observed column writes exactly one strong
 * notification at its commit_ts, on the primary and on the secondaries, in
 * one row (one-phase when on) and across rows (two-phase); other columns
 * write none. */
static void test_strong_commit(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);

  pc_txn_t *t = begin(db);
  set(t, "r1", OBS, "one");
  set(t, "r1", PLAIN, "x");
  uint64_t c1 = commit_expect(t, PC_OK);

  t = begin(db); /* ra is the primary, rb a secondary */
  set(t, "ra", OBS, "a");
  set(t, "rb", OBS, "b");
  set(t, "rb", PLAIN, "p");
  set(t, "zz", PLAIN, "z");
  uint64_t c2 = commit_expect(t, PC_OK);

  t = begin(db); /* deletes: r1 the primary, rb a secondary */
  del(t, "r1", OBS);
  del(t, "rb", OBS);
  del(t, "rb", PLAIN);
  set(t, "r9", PLAIN, "q");
  uint64_t c3 = commit_expect(t, PC_OK);

  seen_t s;
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, NULL), 2);
  assert_true(has_at(&s, "r1", OBS, 0, c1));
  assert_true(has_at(&s, "r1", OBS, 0, c3)); /* a delete is a change */
  expect_one(&s, "ra", OBS, 0, c2);
  assert_int_equal(count_of(&s, "rb", OBS, 0, NULL), 2);
  assert_true(has_at(&s, "rb", OBS, 0, c2));
  assert_true(has_at(&s, "rb", OBS, 0, c3));
  expect_none(&s, "r1", PLAIN);
  expect_none(&s, "rb", PLAIN);
  expect_none(&s, "zz", PLAIN);
  expect_none(&s, "r9", PLAIN);
  assert_int_equal(s.n, 5);
  assert_int_equal(tu_raw_count(db, T, PC_CELL_NOTIFY), 5);
}

/* A writer that vanished after its commit point leaves its secondary
 * locked; the reader who rolls it forward writes its strong notification,
 * at the transaction's commit_ts (the primary's). */
static void test_roll_forward_writes_notification(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  pc_txn_t *t = begin(db);
  set(t, "ra", OBS, "a");
  set(t, "rb", OBS, "b");
  del(t, "rc", OBS);
  vanish(t, "txn.commit.after_primary=return");
  seen_t s;
  scan_all(db, &s);
  uint64_t c = 0;
  assert_int_equal(count_of(&s, "ra", OBS, 0, &c), 1);
  expect_none(&s, "rb", OBS); /* still locked */
  expect_none(&s, "rc", OBS);
  char *v = read_cell(db, "rb", OBS); /* waits out the lease, rolls it forward */
  assert_string_equal(v, "b");
  free(v);
  v = read_cell(db, "rc", OBS); /* a delete rolled forward notifies too */
  assert_null(v);
  scan_all(db, &s);
  expect_one(&s, "ra", OBS, 0, c);
  expect_one(&s, "rb", OBS, 0, c);
  expect_one(&s, "rc", OBS, 0, c);
  /* reading them again writes nothing more */
  v = read_cell(db, "rb", OBS);
  free(v);
  v = read_cell(db, "rc", OBS);
  free(v);
  scan_all(db, &s);
  assert_int_equal(s.n, 3);
}

/* The same for weak notifications: a secondary that only notifies, and one
 * that writes and notifies, rolled forward by readers, write their weak
 * notifications at the commit's ts. A second resolver of a notify-only
 * lock that was rolled forward already (it left no record) is told the
 * cell is free, not that the transaction was aborted. */
static void test_roll_forward_writes_weak(void **state) {
  pc_db_t *db = db_of(state);
  pc_txn_t *t = begin(db);
  set(t, "ra", PLAIN, "a");
  weak(t, "rb", "c:w");
  set(t, "rc", "c:w", "c");
  weak(t, "rc", "c:w");
  vanish(t, "txn.commit.after_primary=return");
  seen_t s;
  scan_all(db, &s);
  assert_int_equal(s.n, 0);
  /* the lock on rb, as a reader meets it */
  pc_store_t *st = db->store;
  pc_cell_t rb = {T, "rb", 2, "c:w", 3};
  uint64_t now;
  pc_error_t err;
  assert_int_equal(pc_db_timestamp(db, 5000, &now, &err), PC_OK);
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock;
  assert_int_equal(st->ops->get(st, &rb, now, &v, &vlen, &lock, &err), PC_LOCKED);
  assert_int_equal(lock.kind, PC_WRITE_NOTIFY);
  assert_true(lock.weak);
  v = read_cell(db, "rb", "c:w"); /* waits out the lease, rolls rb forward */
  assert_null(v);
  /* a second resolver that met the same lock */
  assert_int_equal(pc_txn_resolve_lock(db, &lock, pc_now_mono_ms() + 5000, &err), PC_OK);
  pc_lock_info_free(&lock);
  v = read_cell(db, "rc", "c:w");
  assert_string_equal(v, "c");
  free(v);
  scan_all(db, &s);
  assert_int_equal(s.n, 2);
  uint64_t c = s.v[0].ts;
  expect_one(&s, "rb", "c:w", 1, c);
  expect_one(&s, "rc", "c:w", 1, c);
  assert_int_equal(tu_raw_count(db, T, PC_CELL_LOCK), 0);
}

/* Without a strong observer of the column, a commit writes no
 * notification; a weak observer of it does not make puts notify either. */
static void test_unobserved_writes_none(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "weak1", "c:weak", PC_OBSERVER_WEAK);
  pc_txn_t *t = begin(db);
  set(t, "r1", OBS, "x");
  set(t, "r1", "c:weak", "y");
  set(t, "r2", PLAIN, "z");
  commit_expect(t, PC_OK);
  t = begin(db);
  set(t, "r3", "c:weak", "w");
  del(t, "r2", PLAIN);
  commit_expect(t, PC_OK);
  seen_t s;
  scan_all(db, &s);
  assert_int_equal(s.n, 0);
}

typedef struct listing {
  int n, strong, weak, bad, running, done;
  char names[8][PC_MAX_OBSERVER_NAME + 1];
  char problem[8][128];
} listing_t;

static int list_fn(void *ctx, const pc_observer_info_t *o) {
  listing_t *l = ctx;
  int i = l->n++;
  if (i < 8)
    snprintf(l->names[i], sizeof l->names[0], "%.*s", (int)(o->name_len > 64 ? 64 : o->name_len),
             o->name);
  if (o->problem) {
    if (i < 8) snprintf(l->problem[i], sizeof l->problem[0], "%s", o->problem);
    l->bad++;
    return 0;
  }
  assert_string_equal(o->table, T);
  assert_true(o->clen > 0 && o->col != NULL);
  if (o->kind == PC_OBSERVER_STRONG) l->strong++;
  else l->weak++;
  l->running += o->state == PC_BACKFILL_RUNNING;
  l->done += o->state == PC_BACKFILL_DONE;
  return 0;
}

static listing_t list_observers(pc_db_t *db) {
  listing_t l = {0};
  pc_error_t err;
  if (pc_db_observers(db, list_fn, &l, &err) != PC_OK) fail_msg("observers: %s", err.text);
  return l;
}

/* A client opened before a registration commits the notification of a
 * write made right after it: the store it writes to decides, not the
 * client, whatever the client knows. In a cluster the registrar is another
 * client; embedded, there is one. */
static void test_client_opened_before_registration(void **state) {
  fixture_t *f = *state;
  pc_db_t *db = f->db, *other = db;
  if (tu_cluster_mode()) other = tu_open_ex(f->dir, 400, 1);
  /* the client has committed before: whatever it may cache is warm */
  pc_txn_t *t = begin(db);
  set(t, "r0", OBS, "before");
  commit_expect(t, PC_OK);
  register_obs(other, "late", OBS, PC_OBSERVER_STRONG);
  t = begin(db); /* at once */
  set(t, "r1", OBS, "x");
  uint64_t c = commit_expect(t, PC_OK);
  t = begin(db);
  del(t, "r0", OBS);
  uint64_t d = commit_expect(t, PC_OK);
  seen_t s;
  scan_all(db, &s);
  expect_one(&s, "r1", OBS, 0, c);
  expect_one(&s, "r0", OBS, 0, d);
  listing_t l = list_observers(db);
  assert_int_equal(l.n, 1);
  assert_string_equal(l.names[0], "late");
  if (other != db) pc_db_close(other);
}

/* What a backfill presented: the rows, in order; decline names a row to
 * refuse once (as a worker does with a cell whose run is deferred). */
typedef struct presented {
  char rows[256][16];
  size_t n;
  uint64_t since;
  const char *decline;
  int declined;
  char col[32];
  int kind;
} presented_t;

static int record_present(void *ctx, const pc_observer_info_t *o, const char *row, size_t rlen,
                          uint64_t since) {
  presented_t *p = ctx;
  if (p->decline && !p->declined && rlen == strlen(p->decline) &&
      memcmp(row, p->decline, rlen) == 0) {
    p->declined = 1;
    return 1;
  }
  if (p->n == 256 || rlen >= 16) fail_msg("too many rows presented");
  memcpy(p->rows[p->n], row, rlen);
  p->rows[p->n][rlen] = '\0';
  if (p->n && strcmp(p->rows[p->n - 1], p->rows[p->n]) >= 0)
    fail_msg("%s presented after %s", p->rows[p->n], p->rows[p->n - 1]);
  p->n++;
  if (!since) fail_msg("no since");
  p->since = since;
  snprintf(p->col, sizeof p->col, "%.*s", (int)o->clen, o->col);
  p->kind = o->kind;
  return 0;
}

/* Runs observer name's backfill to its end, recording what it presents;
 * returns the pages it took. A declined row makes one step PC_BUSY. */
static int backfill_all(pc_db_t *db, const char *name, presented_t *p) {
  int done = 0, pages = 0;
  for (int i = 0; i < 1000 && !done; i++) {
    pc_error_t err;
    pc_status_t st = pc_db_backfill_step(db, name, record_present, p, &done, &err);
    if (st != PC_OK && st != PC_BUSY) fail_msg("backfill: %s (%s)", pc_status_name(st), err.text);
    pages++;
  }
  assert_true(done);
  return pages;
}

/* Data written before an observer's registration is presented to it by
 * the backfill: every live cell of its column, once, in row order, page
 * after page, at a timestamp taken once the registration took effect; a
 * deleted cell, and other columns, are not; and no notification is written
 * for it (the column's other observers do not run again). Its progress is
 * recorded with each page, the state ends DONE, and a finished backfill
 * presents nothing more. A cell the caller declines stops the page before
 * it, and the next page presents it again, the ones before it not. */
#define BACKFILL_ROWS 150
static void test_backfill_presents_existing_cells(void **state) {
  pc_db_t *db = db_of(state);
  char row[16];
  for (int i = 0; i < BACKFILL_ROWS; i += 10) {
    pc_txn_t *t = begin(db);
    for (int j = i; j < i + 10; j++) {
      snprintf(row, sizeof row, "b%03d", j);
      set(t, row, OBS, "before");
      set(t, row, PLAIN, "other");
    }
    commit_expect(t, PC_OK);
  }
  pc_txn_t *t = begin(db);
  del(t, "b007", OBS);
  set(t, "c000", PLAIN, "no observed cell here");
  uint64_t last_write = commit_expect(t, PC_OK);
  seen_t s;
  scan_all(db, &s);
  assert_int_equal(s.n, 0); /* nobody observed the column */

  register_obs(db, "late", OBS, PC_OBSERVER_STRONG);
  listing_t l = list_observers(db);
  assert_int_equal(l.running, 1);
  presented_t p = {0};
  p.decline = "b100";
  int pages = backfill_all(db, "late", &p);
  assert_true(pages >= 3); /* 149 cells, at most 64 a page (a declined one stops one) */
  assert_true(p.declined);
  assert_int_equal(p.n, BACKFILL_ROWS - 1);
  for (size_t i = 0, j = 0; i < BACKFILL_ROWS; i++) {
    if (i == 7) continue;
    snprintf(row, sizeof row, "b%03zu", i);
    assert_string_equal(p.rows[j++], row);
  }
  assert_string_equal(p.col, OBS);
  assert_int_equal(p.kind, PC_OBSERVER_STRONG);
  assert_true(p.since > last_write);
  l = list_observers(db);
  assert_int_equal(l.done, 1);
  scan_all(db, &s);
  assert_int_equal(s.n, 0); /* no notification: the presenter runs the observer itself */
  presented_t again = {0};
  assert_int_equal(backfill_all(db, "late", &again), 1);
  assert_int_equal(again.n, 0);
}

/* A malformed observer record in the system table is reported, named, and
 * passed over: commits go on (they never read the records), registrations
 * of other observers and the stores' repair go on; retiring it by name
 * removes it. */
static void test_malformed_record_isolated(void **state) {
  pc_db_t *db = db_of(state);
  static const char *const rows[] = {PC_OBSERVER_ROW_PREFIX "broken",
                                     PC_OBSERVER_ROW_PREFIX "bad name"};
  pc_txn_t *t = begin(db);
  pc_error_t err;
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(pc_txn_set_system(t, PC_SYSTEM_TABLE, rows[i], strlen(rows[i]),
                                       PC_OBSERVER_COLUMN, strlen(PC_OBSERVER_COLUMN),
                                       "\x01garbage", 9, &err),
                     PC_OK);
  commit_expect(t, PC_OK);
  t = begin(db);
  set(t, "r1", OBS, "commits go on");
  commit_expect(t, PC_OK);
  register_obs(db, "good", OBS, PC_OBSERVER_STRONG);
  assert_int_equal(pc_db_observers_sync(db, &err), PC_OK);
  listing_t l = list_observers(db);
  assert_int_equal(l.n, 3);
  assert_int_equal(l.bad, 2);
  assert_int_equal(l.strong, 1);
  int found_broken = 0;
  for (int i = 0; i < 3; i++)
    if (strcmp(l.names[i], "broken") == 0) {
      found_broken = 1;
      assert_non_null(strstr(l.problem[i], "definition"));
    }
  assert_true(found_broken);
  t = begin(db);
  set(t, "r2", OBS, "and notify");
  uint64_t c = commit_expect(t, PC_OK);
  seen_t s;
  scan_all(db, &s);
  expect_one(&s, "r2", OBS, 0, c);
  int found = 0;
  assert_int_equal(pc_db_unregister_observed(db, "broken", 6, &found, &err), PC_OK);
  assert_true(found);
  assert_int_equal(pc_db_unregister_observed(db, "bad name", 8, &found, &err), PC_OK);
  assert_true(found);
  assert_int_equal(pc_db_unregister_observed(db, "never", 5, &found, &err), PC_OK);
  assert_false(found);
  l = list_observers(db);
  assert_int_equal(l.n, 1);
  assert_int_equal(l.bad, 0);
  /* retiring the good one: its column's commits notify no more */
  assert_int_equal(pc_db_unregister_observed(db, "good", 4, &found, &err), PC_OK);
  assert_true(found);
  t = begin(db);
  set(t, "r3", OBS, "unobserved now");
  commit_expect(t, PC_OK);
  scan_all(db, &s);
  expect_none(&s, "r3", OBS);
  assert_int_equal(list_observers(db).n, 0);
}

/* ---- weak notifications ------------------------------------------------- */

/* pc_txn_notify_weak writes one weak notification at the commit, and no
 * value: reads find nothing, and no commit record is left on a cell that
 * is not the primary; an aborted transaction, or one that fails to
 * commit, writes none. */
static void test_weak_at_commit_not_after_abort(void **state) {
  pc_db_t *db = db_of(state);
  pc_txn_t *t = begin(db);
  weak(t, "w1", "c:w");
  uint64_t c = commit_expect(t, PC_OK);
  t = begin(db); /* a write as the primary, a notification alone as a secondary */
  set(t, "a0", PLAIN, "p");
  weak(t, "w2", "c:w");
  uint64_t c2 = commit_expect(t, PC_OK);
  seen_t s;
  scan_all(db, &s);
  expect_one(&s, "w1", "c:w", 1, c);
  expect_one(&s, "w2", "c:w", 1, c2);
  expect_none(&s, "a0", PLAIN);
  char *v = read_cell(db, "w1", "c:w");
  assert_null(v);
  v = read_cell(db, "w2", "c:w");
  assert_null(v);
  /* no lock is left; a notification alone leaves no commit record, but as
   * its transaction's primary one without a value, which readers pass over */
  assert_int_equal(tu_raw_count(db, T, PC_CELL_LOCK), 0);
  assert_int_equal(raw_count_of(db, "w2", "c:w", PC_CELL_WRITE, NULL), 0);
  int wk;
  assert_int_equal(raw_count_of(db, "w1", "c:w", PC_CELL_WRITE, &wk), 1);
  assert_int_equal(wk, PC_WRITE_NOTIFY);
  assert_int_equal(raw_count_of(db, "a0", PLAIN, PC_CELL_WRITE, &wk), 1);
  assert_int_equal(wk, PC_WRITE_PUT);
  size_t writes_before = tu_raw_count(db, T, PC_CELL_WRITE);

  t = begin(db);
  weak(t, "w3", "c:w");
  pc_txn_abort(t);
  pc_txn_destroy(t);
  t = begin(db);
  weak(t, "w4", "c:w");
  pc_txn_destroy(t); /* aborts it */
  /* a commit that conflicts applies nothing */
  pc_txn_t *loser = begin(db);
  free(tu_get(loser, T, "w5", "c:w")); /* its snapshot is taken (lazy_start too) */
  t = begin(db);
  set(t, "w5", "c:w", "first");
  commit_expect(t, PC_OK);
  weak(loser, "w5", "c:w");
  weak(loser, "w6", "c:w");
  commit_expect(loser, PC_CONFLICT);
  scan_all(db, &s);
  expect_none(&s, "w3", "c:w");
  expect_none(&s, "w4", "c:w");
  expect_none(&s, "w5", "c:w");
  expect_none(&s, "w6", "c:w");
  assert_int_equal(s.n, 2);
  assert_int_equal(tu_raw_count(db, T, PC_CELL_WRITE), writes_before + 1); /* w5's put */
}

/* A weak notification locks its cell at commit as a write does: while a
 * writer's lock is on the cell it cannot commit, and while its own lock is
 * there a writer cannot. */
static void test_weak_conflicts_with_writer(void **state) {
  pc_db_t *db = db_of(state);
  /* a writer of c1 stalls with its locks in place (its owner alive) */
  pc_txn_t *w = begin(db);
  set(w, "a1", PLAIN, "p");
  set(w, "c1", "c:w", "v");
  vanish(w, "txn.commit.before_primary=return");
  pc_txn_t *t = begin(db);
  weak(t, "c1", "c:w");
  pc_error_t err;
  /* a fifth of the lease: the owner counts as alive throughout */
  pc_txn_set_timeout_ms(t, LONG_LEASE_MS / 5);
  pc_status_t st = pc_txn_commit(t, &err);
  if (st != PC_CONFLICT)
    fail_msg("weak notification of a cell locked by a writer: %s (%s)", pc_status_name(st),
             err.text);
  pc_txn_destroy(t);

  /* a weak notification of c2 stalls with its lock in place */
  pc_txn_t *n = begin(db);
  set(n, "a2", PLAIN, "p");
  weak(n, "c2", "c:w");
  vanish(n, "txn.commit.before_primary=return");
  t = begin(db);
  set(t, "c2", "c:w", "v");
  pc_txn_set_timeout_ms(t, LONG_LEASE_MS / 5);
  st = pc_txn_commit(t, &err);
  if (st != PC_CONFLICT)
    fail_msg("write of a cell locked by a weak notification: %s (%s)", pc_status_name(st),
             err.text);
  pc_txn_destroy(t);
  /* a reader meets that lock like any other and settles it once the lease ends */
  char *v = read_cell(db, "c2", "c:w");
  assert_null(v);
  seen_t s;
  scan_all(db, &s);
  expect_none(&s, "c2", "c:w"); /* rolled back: it never committed */
  assert_int_equal(s.n, 0);
}

/* A cell both written and notified in one transaction keeps its write
 * (either order of the calls), and its commit writes the weak notification
 * too; on a strongly observed column both notifications, at the same ts. A
 * transaction of weak notifications alone commits over several rows. */
static void test_weak_with_write_of_cell(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  pc_txn_t *t = begin(db);
  set(t, "r1", "c:w", "v1");
  weak(t, "r1", "c:w");
  weak(t, "r2", "c:w");
  set(t, "r2", "c:w", "v2");
  weak(t, "r3", OBS);
  set(t, "r3", OBS, "v3");
  uint64_t c = commit_expect(t, PC_OK);
  char *v = read_cell(db, "r1", "c:w");
  assert_string_equal(v, "v1");
  free(v);
  v = read_cell(db, "r2", "c:w");
  assert_string_equal(v, "v2");
  free(v);
  seen_t s;
  scan_all(db, &s);
  expect_one(&s, "r1", "c:w", 1, c);
  expect_one(&s, "r2", "c:w", 1, c);
  expect_one(&s, "r3", OBS, 0, c);
  expect_one(&s, "r3", OBS, 1, c);
  assert_int_equal(s.n, 4);

  /* read-your-writes and scans ignore a notification alone */
  t = begin(db);
  weak(t, "r1", PLAIN);
  char *own = tu_get(t, T, "r1", PLAIN);
  assert_null(own);
  pc_error_t err;
  pc_scan_t *sc = pc_txn_scan(t, T, "r1", 2, "r2", 2, &err);
  assert_non_null(sc);
  int cells = 0;
  while (pc_scan_next(sc, &err) == PC_OK) cells++;
  assert_int_equal(cells, 1); /* r1/c:w */
  pc_scan_destroy(sc);
  pc_txn_destroy(t);

  /* notifications alone, over rows of (in a cluster) several tablets */
  t = begin(db);
  weak(t, "a5", "c:w");
  weak(t, "m5", "c:w");
  weak(t, "z5", "c:w");
  uint64_t c2 = commit_expect(t, PC_OK);
  scan_all(db, &s);
  expect_one(&s, "a5", "c:w", 1, c2);
  expect_one(&s, "m5", "c:w", 1, c2);
  expect_one(&s, "z5", "c:w", 1, c2);
  assert_int_equal(tu_raw_count(db, T, PC_CELL_LOCK), 0);
  v = read_cell(db, "a5", "c:w");
  assert_null(v);
}

/* ---- the store's scan_notify and clear_notify ---------------------------- */

static int same_one(const seen_one_t *a, const seen_one_t *b) {
  return strcmp(a->table, b->table) == 0 && a->rlen == b->rlen && a->clen == b->clen &&
         memcmp(a->row, b->row, a->rlen) == 0 && memcmp(a->col, b->col, a->clen) == 0 &&
         a->ts == b->ts && a->weak == b->weak;
}

static size_t find_one(const seen_t *s, const seen_one_t *o) {
  size_t n = 0;
  for (size_t i = 0; i < s->n; i++) n += same_one(&s->v[i], o);
  return n;
}

/* Notifications spread over buckets (and tablets): a scan of every bucket
 * in pages resumes after each page's last one and finds each exactly once,
 * in bucket order within a store; scans of four bucket ranges find only
 * their buckets and together the same set. */
static void test_scan_notify_buckets(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  static const char *const prefixes[] = {"a", "m", "z"};
  char row[16];
  pc_txn_t *t = begin(db);
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < 20; i++) {
      snprintf(row, sizeof row, "%s%02d", prefixes[p], i);
      if (i % 2) weak(t, row, "c:w");
      else set(t, row, OBS, "v");
    }
  set(t, "a00", "c:w", "both"); /* a put notified weakly: a second notification of a00 */
  weak(t, "a00", "c:w");
  uint64_t c = commit_expect(t, PC_OK);
  static seen_t all, one_page, part, total;
  scan_range(db, 0, PC_NOTIFY_BUCKETS, 1000, &one_page);
  assert_int_equal(one_page.n, 61);
  for (size_t page = 1; page <= 13; page += 4) {
    scan_range(db, 0, PC_NOTIFY_BUCKETS, page, &all);
    assert_int_equal(all.n, 61);
    for (size_t i = 0; i < all.n; i++) {
      assert_int_equal(all.v[i].ts, c);
      assert_int_equal(find_one(&one_page, &all.v[i]), 1);
      assert_int_equal(find_one(&all, &all.v[i]), 1);
      /* one store's notifications come in bucket order (a cluster's tablet by tablet) */
      if (i && !tu_cluster_mode()) assert_true(all.v[i - 1].bucket <= all.v[i].bucket);
    }
  }
  memset(&total, 0, sizeof total);
  for (uint32_t lo = 0; lo < PC_NOTIFY_BUCKETS; lo += PC_NOTIFY_BUCKETS / 4) {
    scan_range(db, lo, lo + PC_NOTIFY_BUCKETS / 4, 3, &part);
    for (size_t i = 0; i < part.n; i++) total.v[total.n++] = part.v[i];
  }
  assert_int_equal(total.n, all.n);
  for (size_t i = 0; i < all.n; i++) assert_int_equal(find_one(&total, &all.v[i]), 1);
  /* bounds out of range are refused */
  pc_error_t err;
  pc_store_t *s = db->store;
  assert_int_equal(s->ops->scan_notify(s, 5, 5, NULL, 10, collect, &part, &err), PC_INVALID);
  assert_int_equal(s->ops->scan_notify(s, 0, PC_NOTIFY_BUCKETS + 1, NULL, 10, collect, &part, &err),
                   PC_INVALID);
  assert_int_equal(s->ops->scan_notify(s, 0, 1, NULL, 0, collect, &part, &err), PC_INVALID);
}

/* clear_notify of (T, row, OBS) below below on behalf of observers (NUL-
 * separated, olen bytes): PC_OK asserted; returns whether they went, and
 * the name of an observer the store missed into missing (may be NULL). */
static int clear_as(pc_db_t *db, const char *row, uint64_t below, const char *observers,
                    size_t olen, char *missing) {
  pc_notify_clear_t cl = {{T, row, strlen(row), OBS, strlen(OBS)}, below, observers, olen, 0, ""};
  pc_error_t err;
  pc_status_t st = db->store->ops->clear_notify(db->store, &cl, 1, &err);
  if (st != PC_OK) fail_msg("clear_notify: %s (%s)", pc_status_name(st), err.text);
  if (missing) strcpy(missing, cl.missing);
  return cl.done;
}

#define OBS1 "obs1\0"

/* clear_notify deletes a cell's notifications older than a timestamp, of
 * both kinds, and keeps the newer ones and other cells'. */
static void test_clear_notify_keeps_newer(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  uint64_t c[3];
  for (int i = 0; i < 3; i++) {
    pc_txn_t *t = begin(db);
    char v[8];
    snprintf(v, sizeof v, "v%d", i);
    set(t, "r1", OBS, v);
    if (i == 0) weak(t, "r1", OBS);
    set(t, "r2", OBS, v);
    c[i] = commit_expect(t, PC_OK);
  }
  seen_t s;
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, NULL), 3);
  assert_int_equal(count_of(&s, "r1", OBS, 1, NULL), 1);
  assert_true(clear_as(db, "r1", c[1], OBS1, 5, NULL)); /* below the second */
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, NULL), 2);
  assert_int_equal(count_of(&s, "r1", OBS, 1, NULL), 0); /* the weak one was at c[0] */
  for (size_t i = 0; i < s.n; i++)
    if (strcmp(s.v[i].row, "r1") == 0) assert_true(s.v[i].ts >= c[1]);
  assert_int_equal(count_of(&s, "r2", OBS, 0, NULL), 3);
  assert_true(clear_as(db, "r1", c[1], OBS1, 5, NULL)); /* again: nothing */
  assert_true(clear_as(db, "r1", c[2] + 1, OBS1, 5, NULL));
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, NULL), 0);
  assert_int_equal(count_of(&s, "r2", OBS, 0, NULL), 3);
}

/* One clear_notify of several cells (a batched run's) treats each as a call
 * of its own would: each cell's notifications below its own bound go, newer
 * ones and other cells' stay, and a cell whose registered observers the
 * call does not cover keeps its notifications and names the one missing,
 * without holding back the others. */
static void test_clear_notify_many(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  register_obs(db, "elsewhere", PLAIN, PC_OBSERVER_STRONG);
  uint64_t c[2];
  for (int i = 0; i < 2; i++) {
    pc_txn_t *t = begin(db);
    set(t, "m1", OBS, i ? "b" : "a");
    set(t, "m2", OBS, i ? "b" : "a");
    set(t, "m3", PLAIN, i ? "b" : "a");
    c[i] = commit_expect(t, PC_OK);
  }
  pc_notify_clear_t cl[3] = {
      {{T, "m1", 2, OBS, strlen(OBS)}, c[1] + 1, OBS1, 5, 0, ""},
      {{T, "m2", 2, OBS, strlen(OBS)}, c[1], OBS1, 5, 0, ""},
      {{T, "m3", 2, PLAIN, strlen(PLAIN)}, c[1] + 1, OBS1, 5, 0, ""},
  };
  pc_error_t err;
  assert_int_equal(db->store->ops->clear_notify(db->store, cl, 3, &err), PC_OK);
  assert_true(cl[0].done);
  assert_true(cl[1].done);
  assert_false(cl[2].done);
  assert_string_equal(cl[2].missing, "elsewhere");
  seen_t s;
  scan_all(db, &s);
  expect_none(&s, "m1", OBS);
  expect_one(&s, "m2", OBS, 0, c[1]); /* below its own bound only */
  assert_int_equal(count_of(&s, "m3", PLAIN, 0, NULL), 2);
  assert_int_equal(db->store->ops->clear_notify(db->store, cl, 0, &err), PC_OK); /* none */
}

/* Scans read the store's in-memory index of live notifications
 * (core/notifyindex.h): a store opened again rebuilds it from LevelDB, and
 * finds exactly what was left — the cleared ones stay gone. */
static void test_notifications_after_reopen(void **state) {
  fixture_t *f = *state;
  register_obs(f->db, "obs1", OBS, PC_OBSERVER_STRONG);
  uint64_t c[3];
  for (int i = 0; i < 3; i++) {
    pc_txn_t *t = begin(f->db);
    set(t, "r1", OBS, i == 0 ? "v0" : i == 1 ? "v1" : "v2");
    if (i == 2) weak(t, "r2", OBS);
    c[i] = commit_expect(t, PC_OK);
  }
  assert_true(clear_as(f->db, "r1", c[1], OBS1, 5, NULL));
  seen_t before, after;
  scan_all(f->db, &before);
  assert_int_equal(count_of(&before, "r1", OBS, 0, NULL), 2);
  assert_int_equal(count_of(&before, "r2", OBS, 1, NULL), 1);
  pc_db_close(f->db);
  f->db = tu_open_ex(f->dir, 400, 1);
  scan_all(f->db, &after);
  assert_int_equal(after.n, before.n);
  for (size_t i = 0; i < before.n; i++) assert_int_equal(find_one(&after, &before.v[i]), 1);
}

/* A transaction begun for the notified cell (T, row, OBS). */
static pc_txn_t *begin_for(pc_db_t *db, const char *row) {
  pc_cell_t c = {T, row, strlen(row), OBS, strlen(OBS)};
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin_for(db, &c, &err);
  if (!t) fail_msg("pc_txn_begin_for: %s", err.text);
  return t;
}

/* Commits t, begun for a notified cell, asking it to delete the cell's
 * notifications below below; returns whether they went with it. */
static int commit_clearing(pc_txn_t *t, uint64_t below) {
  pc_txn_trigger_bound(t, below, OBS1, 5);
  pc_error_t err;
  pc_status_t st = pc_txn_commit(t, &err);
  if (st != PC_OK) fail_msg("commit: %s (%s)", pc_status_name(st), err.text);
  int cleared = pc_txn_trigger_cleared(t);
  pc_txn_destroy(t);
  return cleared;
}

/* A transaction begun for a notified cell whose one-phase commit writes in
 * the cell's row deletes that cell's notifications below the bound in its
 * own batch (what a worker asks of its observer's commit), keeps newer
 * ones — its own included — and other cells'; a commit of other rows
 * leaves them and says so. */
static void test_commit_clears_notifications(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  uint64_t c[2];
  for (int i = 0; i < 2; i++) {
    pc_txn_t *t = begin(db);
    set(t, "r1", OBS, i ? "v1" : "v0");
    if (i == 0) weak(t, "r1", OBS);
    set(t, "r2", OBS, "v");
    c[i] = commit_expect(t, PC_OK);
  }
  seen_t s;
  /* a commit of another row only: nothing deleted, done 0 */
  pc_txn_t *t = begin_for(db, "r1");
  set(t, "elsewhere", "f:x", "1");
  assert_int_equal(commit_clearing(t, c[1] + 1), 0);
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, NULL), 2);
  /* a commit in r1's row, below the second: the first of each kind goes */
  t = begin_for(db, "r1");
  set(t, "r1", "f:other", "1");
  assert_int_equal(commit_clearing(t, c[1]), 1);
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, NULL), 1);
  assert_int_equal(count_of(&s, "r1", OBS, 1, NULL), 0);
  assert_int_equal(count_of(&s, "r2", OBS, 0, NULL), 2);
  /* a commit that writes the cell itself, bound below its own commit: the
   * older one goes, the one it writes stays */
  t = begin_for(db, "r1");
  set(t, "r1", OBS, "v2");
  uint64_t now = 0;
  pc_error_t err;
  if (pc_db_timestamp(db, 10000, &now, &err) != PC_OK) fail_msg("timestamp: %s", err.text);
  assert_int_equal(commit_clearing(t, now), 1);
  uint64_t left = 0;
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, &left), 1);
  assert_true(left > c[1]);
  assert_int_equal(count_of(&s, "r2", OBS, 0, NULL), 2);
}

/* The store's registered observers decide what goes: a deletion on behalf
 * of observers that do not account for every observer registered for the
 * column deletes nothing and names one it lacks, by clear_notify or with an
 * observer's commit; once every one is accounted for, or the missing one
 * is retired, they go. */
static void test_clear_needs_every_registered_observer(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  register_obs(db, "obs2", OBS, PC_OBSERVER_WEAK);
  register_obs(db, "elsewhere", PLAIN, PC_OBSERVER_STRONG);
  pc_txn_t *t = begin(db);
  set(t, "r1", OBS, "v");
  uint64_t c = commit_expect(t, PC_OK);
  char missing[PC_MAX_OBSERVER_NAME + 1];
  assert_false(clear_as(db, "r1", c + 1, OBS1, 5, missing));
  assert_string_equal(missing, "obs2");
  assert_false(clear_as(db, "r1", c + 1, "", 0, missing));
  assert_false(clear_as(db, "r1", c + 1, NULL, 0, missing));
  seen_t s;
  scan_all(db, &s);
  expect_one(&s, "r1", OBS, 0, c);
  /* with an observer's commit */
  t = begin_for(db, "r1");
  set(t, "r1", "f:other", "1");
  assert_int_equal(commit_clearing(t, c + 1), 0);
  scan_all(db, &s);
  expect_one(&s, "r1", OBS, 0, c);
  /* every observer of the column accounted for (others' names are harmless) */
  assert_true(clear_as(db, "r1", c + 1, "obs2\0gone\0obs1\0", 16, missing));
  scan_all(db, &s);
  expect_none(&s, "r1", OBS);
  /* the missing one retired: the rest goes for obs1 alone */
  t = begin(db);
  set(t, "r1", OBS, "w");
  c = commit_expect(t, PC_OK);
  int found;
  pc_error_t err;
  assert_int_equal(pc_db_unregister_observed(db, "obs2", 4, &found, &err), PC_OK);
  assert_true(clear_as(db, "r1", c + 1, OBS1, 5, missing));
  scan_all(db, &s);
  expect_none(&s, "r1", OBS);
}

/* A commit in two phases (one_phase_commit off) deletes nothing and says so:
 * the worker then deletes them with a write of its own. */
static void test_two_phase_commit_clears_nothing(void **state) {
  pc_db_t *db = db_of(state);
  register_obs(db, "obs1", OBS, PC_OBSERVER_STRONG);
  pc_txn_t *t = begin(db);
  set(t, "r1", OBS, "v0");
  uint64_t c0 = commit_expect(t, PC_OK);
  t = begin_for(db, "r1");
  set(t, "r1", "f:other", "1");
  assert_int_equal(commit_clearing(t, c0 + 1), 0);
  seen_t s;
  scan_all(db, &s);
  assert_int_equal(count_of(&s, "r1", OBS, 0, NULL), 1);
}

/* ---- system columns ------------------------------------------------------ */

typedef struct acks {
  int n;
  char observer[PC_MAX_OBSERVER_NAME + 1];
  char col[32];
  uint64_t start_ts;
} acks_t;

static int ack_fn(void *ctx, const pc_raw_cell_t *c) {
  acks_t *a = ctx;
  if (c->kind != PC_CELL_ACK) return 0;
  a->n++;
  assert_non_null(c->observer);
  snprintf(a->observer, sizeof a->observer, "%s", c->observer);
  assert_true(c->column_len < sizeof a->col);
  memcpy(a->col, c->column, c->column_len);
  a->col[c->column_len] = '\0';
  a->start_ts = c->start_ts;
  return 0;
}

/* Columns beginning with 0xFF are the system's: get, set, delete and
 * notify_weak refuse them, scans pass over them, the _system calls read
 * and write them; the table of the observers is read-only to users; the
 * raw view shows an ack under the observed column, named by its observer. */
static void test_system_columns(void **state) {
  pc_db_t *db = db_of(state);
  pc_buf_t ack = {0};
  assert_int_equal(pc_ack_column(&ack, "obs1", OBS, strlen(OBS)), 0);
  static const char want[] = "\xff"
                             "ack\0obs1\0c:obs";
  assert_int_equal(ack.len, sizeof want - 1);
  assert_memory_equal(ack.p, want, ack.len);

  pc_txn_t *t = begin(db);
  pc_error_t err;
  char *v = NULL;
  size_t vlen = 0;
  assert_int_equal(pc_txn_set(t, T, "r1", 2, ack.p, ack.len, "x", 1, &err), PC_INVALID);
  assert_non_null(strstr(err.text, "0xFF"));
  assert_int_equal(pc_txn_delete(t, T, "r1", 2, ack.p, ack.len, &err), PC_INVALID);
  assert_int_equal(pc_txn_notify_weak(t, T, "r1", 2, ack.p, ack.len, &err), PC_INVALID);
  assert_int_equal(pc_txn_get(t, T, "r1", 2, ack.p, ack.len, &v, &vlen, &err), PC_INVALID);
  assert_null(v);
  assert_int_equal(pc_txn_set(t, PC_SYSTEM_TABLE, "r1", 2, "c", 1, "x", 1, &err), PC_INVALID);
  assert_non_null(strstr(err.text, PC_SYSTEM_TABLE));
  assert_int_equal(pc_txn_delete(t, PC_SYSTEM_TABLE, "r1", 2, "c", 1, &err), PC_INVALID);
  assert_int_equal(pc_txn_notify_weak(t, PC_SYSTEM_TABLE, "r1", 2, "c", 1, &err), PC_INVALID);
  assert_int_equal(pc_txn_get(t, PC_SYSTEM_TABLE, "r1", 2, "c", 1, &v, &vlen, &err), PC_NOT_FOUND);

  /* the engine's way: an ack written beside the cell's value */
  uint64_t run = pc_txn_start_ts(t) ? pc_txn_start_ts(t) : 1;
  pc_buf_t runv = {0};
  assert_int_equal(pc_buf_u64(&runv, run), 0);
  set(t, "r1", OBS, "value");
  assert_int_equal(pc_txn_set_system(t, T, "r1", 2, ack.p, ack.len, runv.p, runv.len, &err), PC_OK);
  assert_int_equal(pc_txn_get_system(t, T, "r1", 2, ack.p, ack.len, &v, &vlen, &err), PC_OK);
  assert_int_equal(vlen, 8);
  pc_free(v);
  commit_expect(t, PC_OK);
  uint64_t start = 0;

  t = begin(db);
  assert_int_equal(pc_txn_get_system(t, T, "r1", 2, ack.p, ack.len, &v, &vlen, &err), PC_OK);
  assert_int_equal(vlen, 8);
  assert_memory_equal(v, runv.p, 8);
  pc_free(v);
  pc_scan_t *sc = pc_txn_scan(t, T, NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  int cells = 0;
  while (pc_scan_next(sc, &err) == PC_OK) {
    size_t cl;
    const char *col = pc_scan_column(sc, &cl);
    assert_false(cl > 0 && (unsigned char)col[0] == 0xFF);
    cells++;
  }
  assert_int_equal(cells, 1);
  pc_scan_destroy(sc);
  /* its own system writes are not in its scans either */
  assert_int_equal(pc_txn_set_system(t, T, "r2", 2, ack.p, ack.len, runv.p, runv.len, &err), PC_OK);
  sc = pc_txn_scan(t, T, NULL, 0, NULL, 0, &err);
  cells = 0;
  while (pc_scan_next(sc, &err) == PC_OK) cells++;
  assert_int_equal(cells, 1);
  pc_scan_destroy(sc);
  start = pc_txn_start_ts(t);
  (void)start;
  pc_txn_destroy(t);

  acks_t a = {0};
  assert_int_equal(pc_db_raw_scan(db, T, NULL, 0, NULL, 0, ack_fn, &a, &err), PC_OK);
  assert_int_equal(a.n, 1);
  assert_string_equal(a.observer, "obs1");
  assert_string_equal(a.col, OBS);
  pc_buf_free(&ack);
  pc_buf_free(&runv);
}

/* ---- registration -------------------------------------------------------- */

static void test_register_errors(void **state) {
  pc_db_t *db = db_of(state);
  pc_error_t err;
  static const char *const bad_names[] = {"", "a b", "x/y", "caf\xc3\xa9",
                                          "n23456789012345678901234567890123456789012345678901234567890123456"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    assert_int_equal(pc_db_register_observed(db, bad_names[i], T, OBS, strlen(OBS),
                                             PC_OBSERVER_STRONG, &err),
                     PC_INVALID);
    assert_non_null(strstr(err.text, "observer name"));
  }
  assert_int_equal(pc_db_register_observed(db, NULL, T, OBS, 5, 0, &err), PC_INVALID);
  assert_int_equal(pc_db_register_observed(db, "o", "bad table", OBS, 5, 0, &err), PC_INVALID);
  assert_int_equal(pc_db_register_observed(db, "o", T, "", 0, 0, &err), PC_INVALID);
  assert_int_equal(pc_db_register_observed(db, "o", T, "\xff" "x", 2, 0, &err), PC_INVALID);
  assert_int_equal(pc_db_register_observed(db, "o", T, OBS, strlen(OBS), 2, &err), PC_INVALID);
  assert_int_equal(pc_db_register_observed(db, "o", PC_SYSTEM_TABLE, OBS, strlen(OBS), 0, &err),
                   PC_INVALID);
  assert_int_equal(list_observers(db).n, 0); /* none of those was recorded */

  register_obs(db, "count", OBS, PC_OBSERVER_STRONG);
  register_obs(db, "count", OBS, PC_OBSERVER_STRONG); /* the same again */
  register_obs(db, "tidy", "c:w", PC_OBSERVER_WEAK);
  assert_int_equal(pc_db_register_observed(db, "count", T, "c:other", 7, PC_OBSERVER_STRONG, &err),
                   PC_INVALID);
  assert_non_null(strstr(err.text, "count"));
  assert_non_null(strstr(err.text, OBS));
  assert_non_null(strstr(err.text, "c:other"));
  assert_int_equal(pc_db_register_observed(db, "count", T, OBS, strlen(OBS), PC_OBSERVER_WEAK, &err),
                   PC_INVALID);
  assert_non_null(strstr(err.text, "weak"));
  listing_t l = list_observers(db);
  assert_int_equal(l.n, 2);
  assert_int_equal(l.strong, 1);
  assert_int_equal(l.weak, 1);
  /* the strong one's column notifies; the weak one's does not */
  pc_txn_t *w = begin(db);
  set(w, "r1", OBS, "x");
  set(w, "r1", "c:w", "y");
  set(w, "r1", PLAIN, "z");
  uint64_t c = commit_expect(w, PC_OK);
  seen_t s;
  scan_all(db, &s);
  expect_one(&s, "r1", OBS, 0, c);
  assert_int_equal(s.n, 1);
  /* users read the records (the CLI lists observers) */
  pc_txn_t *t = begin(db);
  char *v = tu_get(t, PC_SYSTEM_TABLE, PC_OBSERVER_ROW_PREFIX "count", PC_OBSERVER_COLUMN);
  assert_non_null(v);
  free(v);
  pc_txn_destroy(t);
}

/* Each such test with one-phase commit on, then off. */
#define BOTH(fn)                                          \
  {#fn " (one-phase on)", fn, setup_1pc, teardown, NULL}, \
      {#fn " (one-phase off)", fn, setup_2pc, teardown, NULL}

int main(void) {
  const struct CMUnitTest tests[] = {
      BOTH(test_strong_commit),
      cmocka_unit_test_setup_teardown(test_roll_forward_writes_notification, setup_2pc, teardown),
      cmocka_unit_test_setup_teardown(test_roll_forward_writes_weak, setup_2pc, teardown),
      cmocka_unit_test_setup_teardown(test_unobserved_writes_none, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_client_opened_before_registration, setup_1pc, teardown),
      BOTH(test_backfill_presents_existing_cells),
      cmocka_unit_test_setup_teardown(test_malformed_record_isolated, setup_1pc, teardown),
      BOTH(test_weak_at_commit_not_after_abort),
      /* a stalled writer holds locks: two-phase commit */
      cmocka_unit_test_setup_teardown(test_weak_conflicts_with_writer, setup_2pc_long_lease,
                                      teardown),
      BOTH(test_weak_with_write_of_cell),
      cmocka_unit_test_setup_teardown(test_scan_notify_buckets, setup_2pc, teardown),
      cmocka_unit_test_setup_teardown(test_clear_notify_keeps_newer, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_clear_notify_many, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_commit_clears_notifications, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_notifications_after_reopen, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_two_phase_commit_clears_nothing, setup_2pc, teardown),
      BOTH(test_clear_needs_every_registered_observer),
      cmocka_unit_test_setup_teardown(test_system_columns, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_register_errors, setup_1pc, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
