/* test_protocol.c — the rules of the Percolator protocol checked
 * one store operation at a time, through the store interface (core/store.h)
 * of an embedded database: a delayed prewrite after its transaction was
 * rolled back fails (TiKV issue 921); a commit after a rollback is
 * PC_ABORTED; re-sent commits and rollbacks are idempotent; check_txn rolls a
 * lock back when its owner is dead or its TTL has passed in oracle time and
 * not before; a read blocks only on locks that started at or before its
 * snapshot; readers roll secondaries forward or back according to their
 * primary; prewrite and one-phase commit detect write-write conflicts. */
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

#include "core/db.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "core/store_local.h"
#include "tests/testutil.h"

#define T "proto"
#define COL "f:q"
#define DEAD_SESSION (f->dead_session) /* a session no process owns any more */
#define LONG_TTL 600000u           /* ten minutes: never passes during a test */

typedef struct fixture {
  char *dir;
  pc_db_t *db;
  pc_store_t *s;
  uint64_t dead_session;
} fixture_t;

static int setup_with(void **state, int one_phase) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->dir = tu_mkdtemp("proto");
  f->db = tu_open_ex(f->dir, 0, one_phase); /* reads at bare timestamps */
  f->s = f->db->store;
  f->dead_session = tu_dead_session(f->dir);
  *state = f;
  return 0;
}
/* commits of several rows in two phases, as in a cluster across tablets */
static int setup(void **state) { return setup_with(state, 0); }
static int setup_1pc(void **state) { return setup_with(state, 1); }

static int teardown(void **state) {
  fixture_t *f = *state;
  pc_db_close(f->db);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

static uint64_t ts(pc_db_t *db) {
  uint64_t t = 0;
  pc_error_t err;
  if (pc_db_timestamp(db, 10000, &t, &err) != PC_OK) fail_msg("timestamp: %s", err.text);
  return t;
}

static pc_cell_t cell(const char *row) { return (pc_cell_t){T, row, strlen(row), COL, strlen(COL)}; }

static pc_mutation_t put_mut(const char *row, const char *val) {
  return (pc_mutation_t){cell(row), PC_WRITE_PUT, val, strlen(val), 0};
}

/* Prewrites one put of row (primary prow) at start; returns the status. */
static pc_status_t prewrite(fixture_t *f, const char *row, const char *val, const char *prow,
                            uint64_t start, uint32_t ttl, uint64_t session,
                            pc_lock_info_t *lock) {
  pc_mutation_t m = put_mut(row, val);
  pc_lock_spec_t spec = {cell(prow), start, ttl, session};
  pc_lock_info_t ignored = {0};
  pc_error_t err;
  pc_status_t st = f->s->ops->prewrite(f->s, &m, 1, &spec, lock ? lock : &ignored, &err);
  pc_lock_info_free(&ignored);
  return st;
}

static void prewrite_ok(fixture_t *f, const char *row, const char *val, const char *prow,
                        uint64_t start, uint32_t ttl, uint64_t session) {
  pc_lock_info_t lock = {0};
  pc_status_t st = prewrite(f, row, val, prow, start, ttl, session, &lock);
  pc_lock_info_free(&lock);
  if (st != PC_OK) fail_msg("prewrite of %s at %llu: %s", row, (unsigned long long)start, pc_status_name(st));
}

static pc_status_t commit(fixture_t *f, const char *row, uint64_t start, uint64_t cts) {
  pc_cell_t c = cell(row);
  pc_error_t err;
  return f->s->ops->commit(f->s, &c, 1, start, cts, &err);
}

static pc_status_t rollback(fixture_t *f, const char *row, uint64_t start) {
  pc_cell_t c = cell(row);
  pc_error_t err;
  return f->s->ops->rollback(f->s, &c, 1, start, &err);
}

static pc_status_t check_txn(fixture_t *f, const char *prow, uint64_t start, uint64_t now,
                             int owner_dead, pc_txn_state_t *state, uint64_t *cts) {
  pc_cell_t c = cell(prow);
  pc_error_t err;
  *cts = 0;
  return f->s->ops->check_txn(f->s, &c, start, now, owner_dead, state, cts, &err);
}

/* Asserts the store-level read of row at read_ts: want (NULL: not found). */
static void expect_get(fixture_t *f, const char *row, uint64_t read_ts, const char *want) {
  pc_cell_t c = cell(row);
  char *v = NULL;
  size_t n = 0;
  pc_lock_info_t lock = {0};
  pc_error_t err;
  pc_status_t st = f->s->ops->get(f->s, &c, read_ts, &v, &n, &lock, &err);
  pc_lock_info_free(&lock);
  if (!want) {
    if (st != PC_NOT_FOUND) fail_msg("get %s: want not_found, got %s", row, pc_status_name(st));
    return;
  }
  if (st != PC_OK) fail_msg("get %s: want '%s', got %s (%s)", row, want, pc_status_name(st), err.text);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(v, want, n);
  pc_free(v);
}

/* Commits row = val in a transaction of the public API; returns commit_ts. */
static uint64_t txn_put(pc_db_t *db, const char *row, const char *val) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  tu_set(t, T, row, COL, val);
  if (pc_txn_commit(t, &err) != PC_OK) fail_msg("commit: %s", err.text);
  uint64_t cts = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  return cts;
}

/* ---- the raw view of one row --------------------------------------------- */

typedef struct rawrow {
  int locks;
  uint64_t lock_start;
  int puts, rollbacks, datas;
  uint64_t put_start[8], put_commit[8], rollback_ts[8];
  char dump[2048];
  size_t dlen;
} rawrow_t;

static int raw_cb(void *ctx, const pc_raw_cell_t *c) {
  rawrow_t *r = ctx;
  r->dlen += (size_t)snprintf(r->dump + r->dlen, sizeof r->dump - r->dlen, "%d:%llu:%d:%llu;",
                              (int)c->kind, (unsigned long long)c->ts, (int)c->write_kind,
                              (unsigned long long)c->start_ts);
  if (r->dlen >= sizeof r->dump) r->dlen = sizeof r->dump - 1;
  switch (c->kind) {
    case PC_CELL_LOCK:
      r->locks++;
      r->lock_start = c->ts;
      break;
    case PC_CELL_WRITE:
      if (c->write_kind == PC_WRITE_ROLLBACK && r->rollbacks < 8) {
        r->rollback_ts[r->rollbacks++] = c->ts;
      } else if (c->write_kind != PC_WRITE_ROLLBACK && r->puts < 8) {
        r->put_start[r->puts] = c->start_ts;
        r->put_commit[r->puts++] = c->ts;
      }
      break;
    case PC_CELL_DATA:
      r->datas++;
      break;
    default:
      break;
  }
  return 0;
}

/* Everything the store holds for row. */
static rawrow_t raw(fixture_t *f, const char *row) {
  rawrow_t r;
  memset(&r, 0, sizeof r);
  size_t n = strlen(row);
  char end[64];
  assert_true(n + 1 < sizeof end);
  memcpy(end, row, n);
  end[n] = '\0'; /* the smallest row after row: row + "\0" */
  pc_error_t err;
  if (pc_db_raw_scan(f->db, T, row, n, end, n + 1, raw_cb, &r, &err) != PC_OK)
    fail_msg("raw scan: %s", err.text);
  return r;
}

/* ---- tests ------------------------------------------------------------------ */

/* TiKV issue 921: a prewrite of the primary that arrives after a resolver
 * rolled the transaction back must fail, whether the resolver met a lock
 * (owner dead) or found nothing at all on the primary. */
static void test_delayed_prewrite_after_rollback(void **state) {
  fixture_t *f = *state;
  pc_txn_state_t st;
  uint64_t cts;

  /* the resolver checks a primary the (slow) transaction has not reached yet */
  uint64_t s1 = ts(f->db);
  assert_int_equal(check_txn(f, "p1", s1, ts(f->db), 0, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ROLLED_BACK);
  assert_int_equal(prewrite(f, "p1", "late", "p1", s1, LONG_TTL, f->db->session, NULL), PC_CONFLICT);
  rawrow_t r = raw(f, "p1");
  assert_int_equal(r.locks, 0);
  assert_int_equal(r.rollbacks, 1);
  assert_int_equal(r.rollback_ts[0], s1);
  expect_get(f, "p1", ts(f->db), NULL);

  /* the transaction prewrote, its owner died, a reader rolled it back, and
   * then a duplicate of the first prewrite arrives */
  txn_put(f->db, "p2", "v0");
  uint64_t s2 = ts(f->db);
  prewrite_ok(f, "p2", "v1", "p2", s2, LONG_TTL, DEAD_SESSION);
  assert_int_equal(check_txn(f, "p2", s2, ts(f->db), 1, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ROLLED_BACK);
  assert_int_equal(prewrite(f, "p2", "v1", "p2", s2, LONG_TTL, DEAD_SESSION, NULL), PC_CONFLICT);
  assert_int_equal(raw(f, "p2").locks, 0);
  expect_get(f, "p2", ts(f->db), "v0");
  /* and its commit cannot succeed either */
  assert_int_equal(commit(f, "p2", s2, ts(f->db)), PC_ABORTED);
  expect_get(f, "p2", ts(f->db), "v0");
}

/* Committing a primary that a reader already rolled back is PC_ABORTED and
 * applies nothing; so is committing a cell that holds neither lock nor
 * record of the transaction. */
static void test_commit_after_rollback_is_aborted(void **state) {
  fixture_t *f = *state;
  txn_put(f->db, "p", "v0");
  uint64_t s = ts(f->db);
  prewrite_ok(f, "p", "v1", "p", s, LONG_TTL, DEAD_SESSION);
  prewrite_ok(f, "q", "v1", "p", s, LONG_TTL, DEAD_SESSION);
  uint64_t cts = ts(f->db); /* the client took commit_ts ... */
  pc_txn_state_t st;
  uint64_t got;
  /* ... but a reader decided first */
  assert_int_equal(check_txn(f, "p", s, ts(f->db), 1, &st, &got), PC_OK);
  assert_int_equal(st, PC_TXN_ROLLED_BACK);
  rawrow_t before = raw(f, "p");
  assert_int_equal(commit(f, "p", s, cts), PC_ABORTED);
  rawrow_t after = raw(f, "p");
  assert_string_equal(before.dump, after.dump);
  assert_int_equal(after.puts, 1); /* only v0's commit record */
  assert_true(after.put_start[0] != s);
  expect_get(f, "p", ts(f->db), "v0");

  /* a cell with no trace of transaction s */
  assert_int_equal(commit(f, "nothing", s, cts), PC_ABORTED);
  assert_int_equal(raw(f, "nothing").dlen, 0);
  /* the secondary's own lock is still there, but its primary is rolled back:
   * a reader rolls it back, and then it cannot be committed */
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(f->db, &err);
  assert_non_null(t);
  char *v = tu_get(t, T, "q", COL);
  assert_null(v);
  pc_txn_destroy(t);
  assert_int_equal(raw(f, "q").locks, 0);
  assert_int_equal(commit(f, "q", s, cts), PC_ABORTED);
}

/* Re-sending a commit that succeeded returns PC_OK and changes nothing,
 * whether it names the same commit_ts or (a confused client) another one. */
static void test_commit_resend_is_noop(void **state) {
  fixture_t *f = *state;
  uint64_t s = ts(f->db);
  prewrite_ok(f, "p", "v1", "p", s, LONG_TTL, f->db->session);
  prewrite_ok(f, "q", "v1", "p", s, LONG_TTL, f->db->session);
  uint64_t cts = ts(f->db);
  assert_int_equal(commit(f, "p", s, cts), PC_OK);
  rawrow_t p1 = raw(f, "p");
  assert_int_equal(p1.locks, 0);
  assert_int_equal(p1.puts, 1);
  assert_int_equal(p1.put_commit[0], cts);
  assert_int_equal(p1.put_start[0], s);
  assert_int_equal(commit(f, "p", s, cts), PC_OK);
  assert_string_equal(raw(f, "p").dump, p1.dump);
  assert_int_equal(commit(f, "p", s, ts(f->db)), PC_OK);
  assert_string_equal(raw(f, "p").dump, p1.dump);

  assert_int_equal(commit(f, "q", s, cts), PC_OK);
  rawrow_t q1 = raw(f, "q");
  assert_int_equal(commit(f, "q", s, cts), PC_OK);
  assert_string_equal(raw(f, "q").dump, q1.dump);
  expect_get(f, "q", cts, "v1");
  expect_get(f, "q", cts - 1, NULL);

  /* re-sent after later transactions wrote the cell: still a no-op */
  uint64_t later = txn_put(f->db, "p", "v2");
  rawrow_t p2 = raw(f, "p");
  assert_int_equal(commit(f, "p", s, cts), PC_OK);
  assert_string_equal(raw(f, "p").dump, p2.dump);
  expect_get(f, "p", later, "v2");
  expect_get(f, "p", cts, "v1");
}

/* Rollback is idempotent: twice is once, on a locked cell and on a cell the
 * transaction never reached; it never undoes a commit. */
static void test_rollback_idempotent(void **state) {
  fixture_t *f = *state;
  txn_put(f->db, "p", "v0");
  uint64_t s = ts(f->db);
  prewrite_ok(f, "p", "v1", "p", s, LONG_TTL, f->db->session);
  assert_int_equal(rollback(f, "p", s), PC_OK);
  rawrow_t r1 = raw(f, "p");
  assert_int_equal(r1.locks, 0);
  assert_int_equal(r1.rollbacks, 1);
  assert_int_equal(rollback(f, "p", s), PC_OK);
  assert_string_equal(raw(f, "p").dump, r1.dump);
  expect_get(f, "p", ts(f->db), "v0");

  assert_int_equal(rollback(f, "fresh", s), PC_OK);
  rawrow_t r2 = raw(f, "fresh");
  assert_int_equal(r2.rollbacks, 1);
  assert_int_equal(rollback(f, "fresh", s), PC_OK);
  assert_string_equal(raw(f, "fresh").dump, r2.dump);
  assert_int_equal(prewrite(f, "fresh", "v1", "p", s, LONG_TTL, f->db->session, NULL), PC_CONFLICT);

  /* a large value lives in a data cell: rollback removes it */
  char big[PC_INLINE_MAX + 100];
  memset(big, 'B', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  uint64_t s2 = ts(f->db);
  prewrite_ok(f, "big", big, "big", s2, LONG_TTL, f->db->session);
  assert_int_equal(raw(f, "big").datas, 1);
  assert_int_equal(rollback(f, "big", s2), PC_OK);
  assert_int_equal(rollback(f, "big", s2), PC_OK);
  assert_int_equal(raw(f, "big").datas, 0);
  assert_int_equal(raw(f, "big").locks, 0);

  /* rolling back a committed transaction is refused and the commit stands */
  uint64_t s3 = ts(f->db);
  prewrite_ok(f, "c", "v3", "c", s3, LONG_TTL, f->db->session);
  uint64_t c3 = ts(f->db);
  assert_int_equal(commit(f, "c", s3, c3), PC_OK);
  assert_int_not_equal(rollback(f, "c", s3), PC_OK);
  expect_get(f, "c", ts(f->db), "v3");
  assert_int_equal(raw(f, "c").rollbacks, 0);
}

/* check_txn: a lock whose owner is alive and whose TTL has not passed is
 * ALIVE and left alone; owner_dead rolls it back at once; a passed TTL in
 * oracle time rolls it back; a committed primary reports its commit_ts. */
static void test_check_txn(void **state) {
  fixture_t *f = *state;
  pc_txn_state_t st;
  uint64_t cts;
  uint64_t s = ts(f->db);
  prewrite_ok(f, "p", "v1", "p", s, LONG_TTL, f->db->session);
  assert_int_equal(check_txn(f, "p", s, ts(f->db), 0, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ALIVE);
  assert_int_equal(raw(f, "p").locks, 1);
  assert_int_equal(check_txn(f, "p", s, ts(f->db), 1, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ROLLED_BACK);
  rawrow_t r = raw(f, "p");
  assert_int_equal(r.locks, 0);
  assert_int_equal(r.rollbacks, 1);
  assert_int_equal(check_txn(f, "p", s, ts(f->db), 0, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ROLLED_BACK);
  assert_string_equal(raw(f, "p").dump, r.dump);

  /* TTL of 1000 ms: judged by the oracle time given, not by any clock */
  uint64_t s2 = ts(f->db);
  prewrite_ok(f, "q", "v1", "q", s2, 1000, f->db->session);
  uint64_t ms = 1ull << PC_TS_LOGICAL_BITS;
  assert_int_equal(check_txn(f, "q", s2, s2 + 500 * ms, 0, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ALIVE);
  assert_int_equal(check_txn(f, "q", s2, s2 + 999 * ms, 0, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ALIVE);
  assert_int_equal(raw(f, "q").locks, 1);
  assert_int_equal(check_txn(f, "q", s2, s2 + 2000 * ms, 0, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_ROLLED_BACK);
  assert_int_equal(raw(f, "q").locks, 0);

  /* committed */
  uint64_t s3 = ts(f->db);
  prewrite_ok(f, "r", "v1", "r", s3, LONG_TTL, f->db->session);
  uint64_t c3 = ts(f->db);
  assert_int_equal(commit(f, "r", s3, c3), PC_OK);
  txn_put(f->db, "r", "v2"); /* the commit is no longer the newest */
  assert_int_equal(check_txn(f, "r", s3, ts(f->db), 1, &st, &cts), PC_OK);
  assert_int_equal(st, PC_TXN_COMMITTED);
  assert_int_equal(cts, c3);
  assert_int_equal(raw(f, "r").rollbacks, 0);
}

/* A read at read_ts ignores a lock with start_ts > read_ts (its commit can
 * only be later) and reports one with start_ts <= read_ts as PC_LOCKED,
 * naming the lock; the same holds for scans and for a transaction's reads. */
static void test_newer_lock_does_not_block(void **state) {
  fixture_t *f = *state;
  txn_put(f->db, "p", "v0");
  pc_error_t err;
  pc_txn_t *reader = pc_txn_begin(f->db, &err);
  assert_non_null(reader);
  /* any wait for the lock would fail: it belongs to a live session with a
   * long TTL; over a network a read itself needs more than 1 ms */
  pc_txn_set_timeout_ms(reader, tu_cluster_mode() ? 2000 : 1);
  uint64_t r = pc_txn_start_ts(reader);
  uint64_t s = ts(f->db);
  assert_true(s > r);
  prewrite_ok(f, "p", "v1", "p", s, LONG_TTL, f->db->session);

  expect_get(f, "p", r, "v0");
  char *v = tu_get(reader, T, "p", COL);
  assert_string_equal(v, "v0");
  free(v);
  pc_scan_t *sc = pc_txn_scan(reader, T, NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  assert_int_equal(pc_scan_next(sc, &err), PC_OK);
  size_t vl;
  const char *sv = pc_scan_value(sc, &vl);
  assert_int_equal(vl, 2);
  assert_memory_equal(sv, "v0", 2);
  assert_int_equal(pc_scan_next(sc, &err), PC_NOT_FOUND);
  pc_scan_destroy(sc);
  pc_txn_destroy(reader);

  /* a read at or after start_ts meets the lock */
  pc_cell_t c = cell("p");
  pc_lock_info_t lock = {0};
  size_t n;
  v = NULL;
  assert_int_equal(f->s->ops->get(f->s, &c, s, &v, &n, &lock, &err), PC_LOCKED);
  assert_null(v);
  assert_int_equal(lock.start_ts, s);
  assert_int_equal(lock.prow.len, 1);
  assert_memory_equal(lock.prow.p, "p", 1);
  assert_int_equal(lock.crow.len, 1);
  assert_memory_equal(lock.crow.p, "p", 1);
  assert_int_equal(lock.session, f->db->session);
  pc_lock_info_free(&lock);

  /* and a transaction of the live owner's process waits, then gives up */
  pc_txn_t *late = pc_txn_begin(f->db, &err);
  assert_non_null(late);
  pc_txn_set_timeout_ms(late, 20);
  char *val = NULL;
  assert_int_equal(pc_txn_get(late, T, "p", 1, COL, strlen(COL), &val, &n, &err), PC_LOCKED);
  assert_null(val);
  pc_txn_destroy(late);
  assert_int_equal(raw(f, "p").locks, 1);
}

/* Secondaries follow their primary: once the primary is committed a reader
 * rolls a secondary forward to the same commit_ts (even though the owner is
 * dead); once the primary is rolled back a reader rolls it back. */
static void test_secondaries_resolved_by_primary(void **state) {
  fixture_t *f = *state;
  pc_error_t err;
  txn_put(f->db, "a", "v0");
  txn_put(f->db, "b", "v0");

  txn_put(f->db, "d", "v0");

  uint64_t s = ts(f->db);
  prewrite_ok(f, "a", "v1", "a", s, LONG_TTL, DEAD_SESSION);
  prewrite_ok(f, "b", "v1", "a", s, LONG_TTL, DEAD_SESSION);
  pc_mutation_t dm = {cell("d"), PC_WRITE_DELETE, NULL, 0, 0}; /* a delete rolls forward too */
  pc_lock_spec_t spec = {cell("a"), s, LONG_TTL, DEAD_SESSION};
  pc_lock_info_t dl = {0};
  assert_int_equal(f->s->ops->prewrite(f->s, &dm, 1, &spec, &dl, &err), PC_OK);
  pc_lock_info_free(&dl);
  uint64_t cts = ts(f->db);
  assert_int_equal(commit(f, "a", s, cts), PC_OK); /* the commit point; then the client died */
  pc_txn_t *t = pc_txn_begin(f->db, &err);
  assert_non_null(t);
  char *v = tu_get(t, T, "b", COL);
  assert_string_equal(v, "v1");
  free(v);
  assert_null(tu_get(t, T, "d", COL));
  pc_txn_destroy(t);
  assert_int_equal(raw(f, "d").locks, 0);
  expect_get(f, "d", cts - 1, "v0");
  rawrow_t rb = raw(f, "b");
  assert_int_equal(rb.locks, 0);
  assert_int_equal(rb.puts, 2);
  assert_int_equal(rb.put_commit[0], cts); /* newest first */
  assert_int_equal(rb.put_start[0], s);
  assert_int_equal(rb.rollbacks, 0);

  /* the other way: the primary was never committed and its owner is dead */
  uint64_t s2 = ts(f->db);
  prewrite_ok(f, "a", "v2", "a", s2, LONG_TTL, DEAD_SESSION);
  prewrite_ok(f, "b", "v2", "a", s2, LONG_TTL, DEAD_SESSION);
  t = pc_txn_begin(f->db, &err);
  assert_non_null(t);
  v = tu_get(t, T, "b", COL);
  assert_string_equal(v, "v1");
  free(v);
  pc_txn_destroy(t);
  rb = raw(f, "b");
  assert_int_equal(rb.locks, 0);
  assert_int_equal(rb.rollbacks, 1);
  rawrow_t ra = raw(f, "a");
  assert_int_equal(ra.locks, 0); /* the primary is rolled back first */
  assert_int_equal(ra.rollbacks, 1);
  assert_int_equal(ra.rollback_ts[0], s2);
  assert_int_equal(commit(f, "a", s2, ts(f->db)), PC_ABORTED);
}

/* ---- many cells in one call ------------------------------------------- */

static void put_col(pc_txn_t *t, const char *row, size_t rlen, const char *col, const char *val) {
  pc_error_t err;
  if (pc_txn_set(t, T, row, rlen, col, strlen(col), val, strlen(val), &err) != PC_OK)
    fail_msg("set %s/%s: %s", row, col, err.text);
}

/* Reads a scan to its end as "row/col=value;" pairs (rows of printable bytes). */
static void scan_text(pc_scan_t *sc, char *out, size_t cap) {
  pc_error_t err;
  pc_status_t st;
  size_t at = 0;
  out[0] = '\0';
  assert_non_null(sc);
  while ((st = pc_scan_next(sc, &err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *c = pc_scan_column(sc, &cl), *v = pc_scan_value(sc, &vl);
    int n = snprintf(out + at, cap - at, "%.*s/%.*s=%.*s;", (int)rl, r, (int)cl, c, (int)vl, v);
    assert_true(n > 0 && (size_t)n < cap - at);
    at += (size_t)n;
  }
  if (st != PC_NOT_FOUND) fail_msg("scan: %s (%s)", pc_status_name(st), err.text);
  pc_scan_destroy(sc);
}

/* pc_txn_get_many, set_many, scan_row and scan_prefix read what gets and
 * scans read — own writes first, absent cells, a dead owner's lock settled on
 * the way — over rows of every tablet in the cluster suite (split at
 * "acct25" and "r2": one request per tablet). */
static void test_many_cells(void **state) {
  fixture_t *f = *state;
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(f->db, &err);
  assert_non_null(t);
  put_col(t, "a", 1, COL, "va");
  put_col(t, "m", 1, COL, "vm");
  put_col(t, "z", 1, COL, "vz");
  put_col(t, "m", 1, "x:1", "1");
  put_col(t, "m", 1, "x:2", "2");
  put_col(t, "m", 1, "y:1", "y");
  put_col(t, "pre1", 4, "x:1", "p1");
  put_col(t, "pre2", 4, "x:1", "p2");
  put_col(t, "pre2", 4, "y:1", "no");
  put_col(t, "pro", 3, "x:1", "p3");
  put_col(t, "q", 1, COL, "vq");
  put_col(t, "\xff\x01", 2, "x:1", "ff");
  put_col(t, "\xfe", 1, "x:1", "fe");
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  pc_txn_destroy(t);
  /* a dead owner's lock on q: readers settle it (rolled back) */
  prewrite_ok(f, "q", "v-lost", "q", ts(f->db), LONG_TTL, DEAD_SESSION);

  t = pc_txn_begin(f->db, &err);
  assert_non_null(t);
  put_col(t, "a", 1, COL, "own");
  assert_int_equal(pc_txn_delete(t, T, "z", 1, COL, strlen(COL), &err), PC_OK);
  pc_cell_ref_t cells[6] = {{T, "a", 1, COL, strlen(COL)}, {T, "m", 1, COL, strlen(COL)},
                            {T, "z", 1, COL, strlen(COL)}, {T, "b", 1, COL, strlen(COL)},
                            {T, "m", 1, COL, strlen(COL)}, {T, "q", 1, COL, strlen(COL)}};
  const char *want[6] = {"own", "vm", NULL, NULL, "vm", "vq"};
  pc_value_t vals[6];
  assert_int_equal(pc_txn_get_many(t, cells, 6, vals, &err), PC_OK);
  for (int i = 0; i < 6; i++) {
    if (!want[i]) {
      assert_null(vals[i].value);
      assert_int_equal(vals[i].vlen, 0);
      continue;
    }
    assert_non_null(vals[i].value);
    assert_int_equal(vals[i].vlen, strlen(want[i]));
    assert_memory_equal(vals[i].value, want[i], vals[i].vlen);
    pc_free(vals[i].value);
  }
  assert_int_equal(raw(f, "q").locks, 0);
  /* a bad cell is named, and nothing is returned */
  pc_cell_ref_t bad[2] = {{T, "a", 1, COL, strlen(COL)}, {T, "a", 0, COL, strlen(COL)}};
  assert_int_equal(pc_txn_get_many(t, bad, 2, vals, &err), PC_INVALID);
  assert_non_null(strstr(err.text, "cells[1]"));
  assert_null(vals[0].value);

  /* set_many: a put and a delete, visible to the transaction's reads */
  pc_cell_ref_t w[2] = {{T, "m", 1, "x:3", 3}, {T, "m", 1, "x:2", 3}};
  pc_value_t wv[2] = {{(char *)"3", 1}, {NULL, 0}};
  assert_int_equal(pc_txn_set_many(t, w, wv, 2, &err), PC_OK);
  char text[512];
  scan_text(pc_txn_scan_row(t, T, "m", 1, "x:", 2, &err), text, sizeof text);
  assert_string_equal(text, "m/x:1=1;m/x:3=3;");
  scan_text(pc_txn_scan_row(t, T, "m", 1, NULL, 0, &err), text, sizeof text);
  assert_string_equal(text, "m/f:q=vm;m/x:1=1;m/x:3=3;m/y:1=y;");
  scan_text(pc_txn_scan_prefix(t, T, "pr", 2, "x:", 2, &err), text, sizeof text);
  assert_string_equal(text, "pre1/x:1=p1;pre2/x:1=p2;pro/x:1=p3;");
  scan_text(pc_txn_scan_prefix(t, T, "\xff", 1, NULL, 0, &err), text, sizeof text);
  assert_string_equal(text, "\xff\x01/x:1=ff;");
  scan_text(pc_txn_scan_prefix(t, T, NULL, 0, "y:", 2, &err), text, sizeof text);
  assert_string_equal(text, "m/y:1=y;pre2/y:1=no;");
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  pc_txn_destroy(t);

  t = pc_txn_begin(f->db, &err);
  assert_non_null(t);
  scan_text(pc_txn_scan_row(t, T, "m", 1, "x:", 2, &err), text, sizeof text);
  assert_string_equal(text, "m/x:1=1;m/x:3=3;");
  pc_txn_destroy(t);
}

static pc_status_t db_ts_source(void *ctx, uint64_t *out, pc_error_t *err) {
  return pc_db_timestamp(ctx, 10000, out, err);
}

/* One-phase commit: the prewrite conflict rules apply (a write newer than
 * start_ts, a rollback record at start_ts, a lock), and nothing is applied;
 * on success commit_ts comes after start_ts and the value is readable at it. */
static void test_one_phase_commit_conflicts(void **state) {
  fixture_t *f = *state;
  pc_error_t err;
  txn_put(f->db, "x", "v0");
  uint64_t s = ts(f->db);
  txn_put(f->db, "x", "v1"); /* commits after s */
  pc_mutation_t m = put_mut("x", "mine");
  pc_lock_info_t lock = {0};
  uint64_t cts = 0;
  rawrow_t before = raw(f, "x");
  pc_status_t st = f->s->ops->commit_one_phase(f->s, &m, 1, s, db_ts_source, f->db, NULL, &cts, &lock,
                                               &err);
  assert_int_equal(st, PC_CONFLICT);
  pc_lock_info_free(&lock);
  assert_string_equal(raw(f, "x").dump, before.dump);
  expect_get(f, "x", ts(f->db), "v1");
}

/* One-phase commit refuses a rollback record at start_ts and another
 * transaction's lock, and commits a put and a delete of one row at once. */
static void test_one_phase_commit_rules(void **state) {
  fixture_t *f = *state;
  pc_error_t err;
  pc_lock_info_t lock = {0};
  uint64_t cts = 0;

  /* a rollback record at start_ts: the transaction was given up on */
  uint64_t s = ts(f->db);
  assert_int_equal(rollback(f, "y", s), PC_OK);
  pc_mutation_t m = put_mut("y", "mine");
  assert_int_equal(f->s->ops->commit_one_phase(f->s, &m, 1, s, db_ts_source, f->db, NULL, &cts, &lock, &err),
                   PC_CONFLICT);
  pc_lock_info_free(&lock);
  expect_get(f, "y", ts(f->db), NULL);

  /* a lock of another transaction: PC_LOCKED naming it */
  uint64_t other = ts(f->db);
  prewrite_ok(f, "z", "theirs", "z", other, LONG_TTL, f->db->session);
  uint64_t s2 = ts(f->db);
  m = put_mut("z", "mine");
  memset(&lock, 0, sizeof lock);
  assert_int_equal(f->s->ops->commit_one_phase(f->s, &m, 1, s2, db_ts_source, f->db, NULL, &cts, &lock, &err),
                   PC_LOCKED);
  assert_int_equal(lock.start_ts, other);
  pc_lock_info_free(&lock);
  assert_int_equal(raw(f, "z").puts, 0);

  /* success, with a delete in the same row */
  txn_put(f->db, "w", "old");
  uint64_t s3 = ts(f->db);
  pc_cell_t wc = {T, "w", 1, "f:other", 7};
  pc_mutation_t two[2] = {put_mut("w", "new"), {wc, PC_WRITE_DELETE, NULL, 0, 0}};
  memset(&lock, 0, sizeof lock);
  assert_int_equal(f->s->ops->commit_one_phase(f->s, two, 2, s3, db_ts_source, f->db, NULL, &cts, &lock, &err),
                   PC_OK);
  pc_lock_info_free(&lock);
  assert_true(cts > s3);
  expect_get(f, "w", cts, "new");
  expect_get(f, "w", cts - 1, "old");
  assert_int_equal(raw(f, "w").locks, 0);
}

/* One-phase commit of several rows of one store: all or nothing. A conflict
 * or another transaction's lock on any row applies none of them; success
 * commits every row at one commit_ts without ever writing a lock. Through
 * the client, a transaction of several rows then never prewrites. */
static void test_one_phase_commit_many_rows(void **state) {
  fixture_t *f = *state;
  if (tu_cluster_mode()) skip(); /* the rows may lie on several tablets */
  pc_error_t err;
  pc_lock_info_t lock = {0};
  uint64_t cts = 0;
  txn_put(f->db, "r3", "v0");
  uint64_t s = ts(f->db);
  txn_put(f->db, "r3", "v1"); /* commits after s: r3 conflicts */
  pc_mutation_t three[3] = {put_mut("r1", "a"), put_mut("r2", "b"), put_mut("r3", "c")};
  assert_int_equal(
      f->s->ops->commit_one_phase(f->s, three, 3, s, db_ts_source, f->db, NULL, &cts, &lock, &err),
      PC_CONFLICT);
  pc_lock_info_free(&lock);
  assert_int_equal(raw(f, "r1").puts, 0);
  assert_int_equal(raw(f, "r2").puts, 0);

  uint64_t other = ts(f->db);
  prewrite_ok(f, "r2", "theirs", "r2", other, LONG_TTL, f->db->session);
  uint64_t s2 = ts(f->db);
  memset(&lock, 0, sizeof lock);
  assert_int_equal(
      f->s->ops->commit_one_phase(f->s, three, 3, s2, db_ts_source, f->db, NULL, &cts, &lock, &err),
      PC_LOCKED);
  assert_int_equal(lock.start_ts, other);
  pc_lock_info_free(&lock);
  assert_int_equal(raw(f, "r1").puts, 0);
  assert_int_equal(rollback(f, "r2", other), PC_OK);

  uint64_t s3 = ts(f->db);
  memset(&lock, 0, sizeof lock);
  assert_int_equal(
      f->s->ops->commit_one_phase(f->s, three, 3, s3, db_ts_source, f->db, NULL, &cts, &lock, &err),
      PC_OK);
  pc_lock_info_free(&lock);
  assert_true(cts > s3);
  expect_get(f, "r1", cts, "a");
  expect_get(f, "r2", cts, "b");
  expect_get(f, "r3", cts, "c");
  expect_get(f, "r3", cts - 1, "v1");
  assert_int_equal(raw(f, "r1").locks + raw(f, "r2").locks + raw(f, "r3").locks, 0);

  /* the client: no prewrite (the point after it would fail the commit) */
  assert_int_equal(pc_failpoints_configure("txn.prewrite.after_primary=return", &err), PC_OK);
  pc_txn_t *t = pc_txn_begin(f->db, &err);
  assert_non_null(t);
  tu_set(t, T, "r1", COL, "x1");
  tu_set(t, T, "r4", COL, "x4");
  pc_status_t st = pc_txn_commit(t, &err);
  pc_error_t err2;
  assert_int_equal(pc_failpoints_configure(NULL, &err2), PC_OK);
  if (st != PC_OK) fail_msg("a two-row commit of one store: %s (%s)", pc_status_name(st), err.text);
  uint64_t c2 = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  expect_get(f, "r1", c2, "x1");
  expect_get(f, "r4", c2, "x4");
}

/* I7 with one-phase commits of two rows: a commit is held between taking its
 * commit_ts and writing its batch (a failpoint sleeps there); a reader that
 * begins meanwhile sees the commit exactly when its snapshot covers
 * commit_ts — through a get, a scan of the second row alone (which waits for
 * that row's stripe only), and a scan of the table. */
typedef struct held_commit {
  pc_db_t *db;
  uint64_t commit_ts;
  pc_status_t st;
} held_commit_t;

static void *commit_two_rows(void *arg) {
  held_commit_t *h = arg;
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(h->db, &err);
  if (!t) {
    h->st = err.code;
    return NULL;
  }
  tu_set(t, T, "ha", COL, "new");
  tu_set(t, T, "hb", COL, "new");
  h->st = pc_txn_commit(t, &err);
  h->commit_ts = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  return NULL;
}

static int scan_value(void *ctx, const pc_cell_t *c, const char *v, size_t n) {
  (void)c;
  char *out = ctx;
  snprintf(out, 16, "%.*s", (int)n, v);
  return 0;
}

static void test_reader_waits_for_one_phase_commit(void **state) {
  fixture_t *f = *state;
  if (tu_cluster_mode()) skip(); /* the failpoint fires in the tablet's process */
  for (int kind = 0; kind < 3; kind++) {
    txn_put(f->db, "ha", "old");
    txn_put(f->db, "hb", "old");
    pc_error_t err;
    assert_int_equal(pc_failpoints_configure("store.before_apply=1*sleep(400)", &err), PC_OK);
    held_commit_t h = {f->db, 0, PC_INTERNAL};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, commit_two_rows, &h), 0);
    /* until the commit holds its markers (set before it takes commit_ts) */
    local_t *ls = (local_t *)f->s;
    pc_cell_t hb = {T, "hb", 2, COL, strlen(COL)};
    while (atomic_load(&ls->onepc[local_stripe(&hb)]) == 0) pc_sleep_ms(1);
    pc_sleep_ms(50); /* most often past its commit_ts by now; either way is checked */
    uint64_t read_ts = ts(f->db);
    char got[16] = "";
    if (kind == 0) {
      char *v = NULL;
      size_t n = 0;
      pc_lock_info_t lock;
      assert_int_equal(f->s->ops->get(f->s, &hb, read_ts, &v, &n, &lock, &err), PC_OK);
      snprintf(got, sizeof got, "%.*s", (int)n, v);
      pc_free(v);
    } else {
      pc_lock_info_t lock;
      const char *start = kind == 1 ? "hb" : NULL, *end = kind == 1 ? "hb\0" : NULL;
      assert_int_equal(f->s->ops->scan(f->s, T, start, start ? 2 : 0, NULL, 0, end,
                                       end ? 3 : 0, read_ts, 1000, scan_value, got, &lock, &err),
                       PC_OK);
    }
    pthread_join(th, NULL);
    assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
    assert_int_equal(h.st, PC_OK);
    const char *want = read_ts >= h.commit_ts ? "new" : "old";
    if (strcmp(got, want) != 0)
      fail_msg("reader %d at %llu, commit at %llu: got '%s', want '%s'", kind,
               (unsigned long long)read_ts, (unsigned long long)h.commit_ts, got, want);
  }
}

/* Prewrite: a write with commit_ts >= start_ts conflicts; another
 * transaction's lock is PC_LOCKED with the lock handed back (primary
 * included); the transaction's own lock accepts a re-sent prewrite. */
static void test_prewrite_rules(void **state) {
  fixture_t *f = *state;
  uint64_t s = ts(f->db);
  uint64_t c = txn_put(f->db, "x", "v1");
  assert_true(c > s);
  assert_int_equal(prewrite(f, "x", "late", "x", s, LONG_TTL, f->db->session, NULL), PC_CONFLICT);
  assert_int_equal(raw(f, "x").locks, 0);

  uint64_t s1 = ts(f->db);
  prewrite_ok(f, "x", "a", "prim", s1, LONG_TTL, f->db->session);
  prewrite_ok(f, "x", "a", "prim", s1, LONG_TTL, f->db->session); /* re-sent */
  assert_int_equal(raw(f, "x").locks, 1);
  uint64_t s2 = ts(f->db);
  pc_lock_info_t lock = {0};
  assert_int_equal(prewrite(f, "x", "b", "x", s2, LONG_TTL, f->db->session, &lock), PC_LOCKED);
  assert_int_equal(lock.start_ts, s1);
  assert_int_equal(lock.prow.len, 4);
  assert_memory_equal(lock.prow.p, "prim", 4);
  assert_string_equal(lock.ptable.p, T);
  pc_lock_info_free(&lock);
  rawrow_t r = raw(f, "x");
  assert_int_equal(r.locks, 1);
  assert_int_equal(r.lock_start, s1);

  /* a multi-cell prewrite is all or nothing (both rows on one tablet in cluster mode) */
  uint64_t s3 = ts(f->db);
  pc_mutation_t ms[2] = {put_mut("wfresh", "v"), put_mut("x", "v")};
  pc_lock_spec_t spec = {cell("wfresh"), s3, LONG_TTL, f->db->session};
  pc_error_t err;
  memset(&lock, 0, sizeof lock);
  assert_int_equal(f->s->ops->prewrite(f->s, ms, 2, &spec, &lock, &err), PC_LOCKED);
  pc_lock_info_free(&lock);
  assert_int_equal(raw(f, "wfresh").locks, 0);
}

/* A commit that fails reports commit_ts 0, as percolator.h promises: in the
 * one-phase path when the store's write fails (nothing is applied; the
 * client settles that by writing a rollback record), also when that
 * settling fails as well (the outcome is then unknown to the client), and
 * in the two-phase path when the client stops after taking commit_ts but
 * before the commit point. Run with one-phase commit on (the one-row
 * cases) and off (the two-row case). */
static void test_failed_commit_reports_no_commit_ts(void **state) {
  fixture_t *f = *state;
  static const struct {
    const char *spec;
    int two_rows;
    pc_status_t want;
  } cases[] = {{"store.before_apply=1*return", 0, PC_IO_ERROR},
               {"store.before_apply=return", 0, PC_UNKNOWN},
               {"txn.commit.before_primary=return", 1, PC_IO_ERROR}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pc_error_t err, err2;
    /* store.* points fire where the store runs: in a tablet server in cluster mode */
    if (tu_cluster_mode() && strncmp(cases[i].spec, "store.", 6) == 0) continue;
    /* the one-row cases are about one-phase commit, the two-row case about
     * two-phase commit: each runs with its own setting */
    if (cases[i].two_rows == (f->db->opts.one_phase_commit != 0)) continue;
    assert_int_equal(pc_failpoints_configure(cases[i].spec, &err), PC_OK);
    pc_txn_t *t = pc_txn_begin(f->db, &err);
    assert_non_null(t);
    tu_set(t, T, "x", COL, "v");
    if (cases[i].two_rows) tu_set(t, T, "y", COL, "v");
    pc_status_t st = pc_txn_commit(t, &err);
    assert_int_equal(pc_failpoints_configure(NULL, &err2), PC_OK);
    if (st != cases[i].want)
      fail_msg("%s: commit returned %s (%s), want %s", cases[i].spec, pc_status_name(st),
               err.text, pc_status_name(cases[i].want));
    if (!cases[i].two_rows) { /* nothing applied (a rollback record at most) */
      expect_get(f, "x", ts(f->db), NULL);
      rawrow_t r = raw(f, "x");
      if (r.puts || r.locks || r.datas) fail_msg("%s: x holds %s", cases[i].spec, r.dump);
    }
    uint64_t cts = pc_txn_commit_ts(t);
    pc_txn_destroy(t);
    if (cts != 0)
      fail_msg("%s: commit failed with %s but pc_txn_commit_ts() = %llu, want 0", cases[i].spec,
               pc_status_name(st), (unsigned long long)cts);
  }
}

/* ---- a slow committer, through the public API ---------------------------- */

typedef struct slow {
  pc_db_t *db;
  pc_status_t st;
  char text[PC_ERROR_TEXT];
} slow_t;

static void *slow_committer(void *arg) {
  slow_t *w = arg;
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(w->db, &err);
  if (!t) {
    w->st = err.code;
    snprintf(w->text, sizeof w->text, "%s", err.text);
    return NULL;
  }
  tu_set(t, T, "p", COL, "slow");
  tu_set(t, T, "q", COL, "slow");
  w->st = pc_txn_commit(t, &err); /* sleeps at txn.commit.before_primary */
  snprintf(w->text, sizeof w->text, "%s", err.text);
  pc_txn_destroy(t);
  return NULL;
}

/* A committer that stalls before its commit point for several times its
 * lock lease is alive: the database's heartbeat renews its primary's lease,
 * so a reader that meets its lock meanwhile waits instead of rolling it
 * back, and the commit succeeds. (A dead committer's locks do expire: see
 * test_crash.) */
static void test_stalled_live_committer_keeps_its_locks(void **state) {
  fixture_t *f = *state;
  /* a fresh directory: after a reopen the oracle starts at its persisted
   * bound, ahead of the clock, and its time stands still until the clock
   * catches up, which would hold leases back */
  pc_db_close(f->db);
  tu_rmtree(f->dir);
  f->dir = tu_mkdtemp("proto");
  /* long enough that a busy machine (a sanitizer build, a loaded CI) does
   * not delay a renewal past it */
  const uint32_t ttl = 1000;
  f->db = tu_open_ex(f->dir, ttl, 0);
  f->s = f->db->store;
  pc_error_t err;
  char spec[64];
  snprintf(spec, sizeof spec, "txn.commit.before_primary=sleep(%u)", ttl * 6);
  assert_int_equal(pc_failpoints_configure(spec, &err), PC_OK);
  slow_t w = {f->db, PC_INTERNAL, ""};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, slow_committer, &w), 0);
  /* wait (bounded by a count) until both rows are prewritten */
  int seen = 0;
  for (int i = 0; i < 20000 && seen < 2; i++) {
    seen = (int)tu_raw_count(f->db, T, PC_CELL_LOCK);
    struct timespec ms = {0, 1000000};
    if (seen < 2) nanosleep(&ms, NULL);
  }
  assert_int_equal(seen, 2);
  /* readers keep meeting q's lock (resolving via p) while the commit stalls */
  int locked = 0;
  for (int i = 0; i < 4; i++) {
    pc_txn_t *r = pc_txn_begin(f->db, &err);
    assert_non_null(r);
    pc_txn_set_timeout_ms(r, ttl);
    char *v = NULL;
    size_t n;
    pc_status_t st = pc_txn_get(r, T, "q", 1, COL, strlen(COL), &v, &n, &err);
    locked += st == PC_LOCKED;
    assert_true(st == PC_LOCKED || st == PC_NOT_FOUND);
    pc_free(v);
    pc_txn_destroy(r);
  }
  pthread_join(th, NULL);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  if (w.st != PC_OK) fail_msg("stalled live commit returned %s (%s)", pc_status_name(w.st), w.text);
  assert_true(locked > 0); /* the readers did meet the live lock */
  pc_txn_t *t = pc_txn_begin(f->db, &err);
  char *p = tu_get(t, T, "p", COL), *q = tu_get(t, T, "q", COL);
  pc_txn_destroy(t);
  assert_string_equal(p, "slow");
  assert_string_equal(q, "slow");
  free(p);
  free(q);
  assert_int_equal(tu_raw_count(f->db, T, PC_CELL_LOCK), 0);
}

#define NSPIN 4 /* busy threads: twice the cores of the machines this runs on */

/* A thread that keeps a core busy until told to stop. */
static void *spin(void *arg) {
  atomic_int *stop = arg;
  volatile uint64_t x = 0;
  while (!atomic_load_explicit(stop, memory_order_relaxed)) x++;
  return NULL;
}

/* Leases are renewed on time whatever else the database's background work
 * does: a committer stalls before its commit point for four lock TTLs while
 * garbage-collection passes run back to back, each held for two TTLs (a
 * failpoint), readers keep meeting its locks, and busy threads load every
 * core (the TTL leaves a renewal two thirds of it to be late by); the lease thread renews its primary meanwhile, so the readers wait
 * and the commit succeeds. (Embedded, where the handle runs the passes; a
 * cluster client runs none, and there this is the stalled committer again.) */
static void test_lease_renewed_during_gc_passes(void **state) {
  fixture_t *f = *state;
  pc_db_close(f->db);
  tu_rmtree(f->dir);
  f->dir = tu_mkdtemp("proto");
  /* the renewal may be late by two thirds of it: on a busy machine (a
   * sanitizer build, a loaded CI) beside the spinners, 500 ms was not enough */
  const uint32_t ttl = 1500;
  if (tu_cluster_mode()) {
    f->db = tu_open_ex(f->dir, ttl, 0);
  } else {
    pc_options_t *o = pc_options_create();
    assert_non_null(o);
    pc_options_set_create_if_missing(o, 1);
    pc_options_set_lock_ttl_ms(o, ttl);
    pc_options_set_one_phase_commit(o, 0);
    pc_options_set_gc_interval_ms(o, 10);
    pc_error_t oerr;
    f->db = pc_db_open(o, f->dir, &oerr);
    pc_options_destroy(o);
    if (!f->db) fail_msg("pc_db_open: %s", oerr.text);
  }
  f->s = f->db->store;
  atomic_int stop_spin;
  atomic_init(&stop_spin, 0);
  pthread_t spinners[NSPIN];
  for (int i = 0; i < NSPIN; i++)
    assert_int_equal(pthread_create(&spinners[i], NULL, spin, &stop_spin), 0);
  pc_error_t err;
  char spec[128];
  snprintf(spec, sizeof spec, "txn.commit.before_primary=sleep(%u);gc.timestamp_taken=sleep(%u)",
           ttl * 4, ttl * 2);
  assert_int_equal(pc_failpoints_configure(spec, &err), PC_OK);
  slow_t w = {f->db, PC_INTERNAL, ""};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, slow_committer, &w), 0);
  int seen = 0;
  for (int i = 0; i < 20000 && seen < 2; i++) {
    seen = (int)tu_raw_count(f->db, T, PC_CELL_LOCK);
    struct timespec ms = {0, 1000000};
    if (seen < 2) nanosleep(&ms, NULL);
  }
  assert_int_equal(seen, 2);
  /* readers meet q's lock until the commit is through (bounded by a count) */
  int locked = 0;
  for (int i = 0; i < 100 && tu_raw_count(f->db, T, PC_CELL_LOCK) > 0; i++) {
    pc_txn_t *r = pc_txn_begin(f->db, &err);
    assert_non_null(r);
    pc_txn_set_timeout_ms(r, ttl);
    char *v = NULL;
    size_t n;
    pc_status_t st = pc_txn_get(r, T, "q", 1, COL, strlen(COL), &v, &n, &err);
    locked += st == PC_LOCKED;
    pc_free(v);
    pc_txn_destroy(r);
  }
  pthread_join(th, NULL);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  atomic_store(&stop_spin, 1);
  for (int i = 0; i < NSPIN; i++) pthread_join(spinners[i], NULL);
  if (w.st != PC_OK) fail_msg("stalled live commit returned %s (%s)", pc_status_name(w.st), w.text);
  assert_true(locked > 0);
  pc_txn_t *t = pc_txn_begin(f->db, &err);
  char *p = tu_get(t, T, "p", COL), *q = tu_get(t, T, "q", COL);
  pc_txn_destroy(t);
  assert_string_equal(p, "slow");
  assert_string_equal(q, "slow");
  free(p);
  free(q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_delayed_prewrite_after_rollback, setup, teardown),
      cmocka_unit_test_setup_teardown(test_commit_after_rollback_is_aborted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_commit_resend_is_noop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rollback_idempotent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_txn, setup, teardown),
      cmocka_unit_test_setup_teardown(test_newer_lock_does_not_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_secondaries_resolved_by_primary, setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_phase_commit_conflicts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_phase_commit_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prewrite_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_commit_reports_no_commit_ts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failed_commit_reports_no_commit_ts, setup_1pc,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_one_phase_commit_many_rows, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_reader_waits_for_one_phase_commit, setup_1pc,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_stalled_live_committer_keeps_its_locks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_many_cells, setup, teardown),
      cmocka_unit_test_setup_teardown(test_many_cells, setup_1pc, teardown),
      cmocka_unit_test_setup_teardown(test_lease_renewed_during_gc_passes, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
