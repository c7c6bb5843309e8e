/* test_lockservice.c — the lock service (lockservice/lockservice.h):
 * sessions (open, keep-alive, close, expiry), leased locks (exclusive between
 * sessions, re-entrant for the holder, released with their session, refused
 * to non-holders), liveness answers across epochs, capacity limits, many
 * threads at once, the RPC handler against well-formed and hostile bodies,
 * and the network client against a real server: keep-alive, renewal after
 * the session is lost, lockd stopped (UNKNOWN / PC_UNAVAILABLE) and
 * restarted (new epoch; the old session is UNKNOWN); the reports for garbage
 * collection (each session's oldest start_ts, the minimum over live
 * sessions) in-process, through the handler and from a client's reporter.
 *
 * Expiry is observed by polling with a bounded number of polls; nothing
 * asserts on elapsed time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "lockservice/lockservice.h"
#include "lockservice/ls_internal.h"
#include "core/error.h"
#include "core/keys.h"
#include "core/log.h"
#include "net/rpc.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_MS 10u
#define MAX_POLLS 1000u /* 10 s: generous bounds for loaded or sanitized runs */

/* ---- helpers ------------------------------------------------------------- */

static void expect_status(const char *what, pc_status_t st, const pc_error_t *err,
                          pc_status_t want) {
  if (st != want)
    fail_msg("%s: want %s, got %s (%s)", what, pc_status_name(want), pc_status_name(st),
             err ? err->text : "");
  if (err) {
    assert_int_equal(err->code, want);
    if (want != PC_OK && err->text[0] == '\0') fail_msg("%s: empty error message", what);
  }
}

static uint64_t open_session(pc_ls_t *ls, uint32_t ttl_ms) {
  pc_error_t err;
  uint64_t id = 0;
  expect_status("session_open", pc_ls_session_open(ls, ttl_ms, &id, &err), &err, PC_OK);
  assert_true(id != 0);
  assert_int_equal((uint32_t)(id >> 32), pc_ls_epoch(ls));
  return id;
}

static int try_lock(pc_ls_t *ls, uint64_t s, const char *name, uint64_t *holder) {
  pc_error_t err;
  int acquired = -1;
  uint64_t h = 0;
  expect_status("lock_try", pc_ls_lock_try(ls, s, name, strlen(name), &acquired, &h, &err), &err,
                PC_OK);
  assert_true(acquired == 0 || acquired == 1);
  if (holder) *holder = h;
  return acquired;
}

/* Polls until session is DEAD; fails after MAX_POLLS. */
static void wait_dead(pc_ls_t *ls, uint64_t s) {
  for (unsigned i = 0; i < MAX_POLLS; i++) {
    pc_ls_liveness_t l = pc_ls_session_liveness(ls, s);
    if (l == PC_LS_DEAD) return;
    assert_int_equal(l, PC_LS_ALIVE);
    pc_sleep_ms(POLL_MS);
  }
  fail_msg("session %016" PRIx64 " did not expire", s);
}

/* An id of the service's epoch plus one (never the service's own). */
static uint64_t other_epoch_id(const pc_ls_t *ls, uint32_t counter) {
  return (uint64_t)(pc_ls_epoch(ls) + 1u) << 32 | counter;
}

/* ---- sessions ------------------------------------------------------------ */

static void test_session_lifecycle(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  assert_true(pc_ls_epoch(ls) != 0);
  assert_int_equal(pc_ls_session_count(ls), 0);

  pc_error_t err;
  uint64_t a = open_session(ls, 60000), b = open_session(ls, 60000);
  assert_true(a != b);
  assert_int_equal(pc_ls_session_count(ls), 2);
  assert_int_equal(pc_ls_session_liveness(ls, a), PC_LS_ALIVE);
  expect_status("keepalive", pc_ls_session_keepalive(ls, a, &err), &err, PC_OK);

  expect_status("close", pc_ls_session_close(ls, a, &err), &err, PC_OK);
  assert_int_equal(pc_ls_session_liveness(ls, a), PC_LS_DEAD);
  assert_int_equal(pc_ls_session_liveness(ls, b), PC_LS_ALIVE);
  assert_int_equal(pc_ls_session_count(ls), 1);
  expect_status("keepalive closed", pc_ls_session_keepalive(ls, a, &err), &err, PC_NOT_FOUND);
  expect_status("close twice", pc_ls_session_close(ls, a, &err), &err, PC_NOT_FOUND);
  expect_status("close unknown", pc_ls_session_close(ls, other_epoch_id(ls, 1), &err), &err,
                PC_NOT_FOUND);
  expect_status("keepalive 0", pc_ls_session_keepalive(ls, 0, &err), &err, PC_NOT_FOUND);

  /* TTL bounds. */
  uint64_t id = 77;
  expect_status("ttl 0", pc_ls_session_open(ls, 0, &id, &err), &err, PC_INVALID);
  assert_true(id == 0);
  assert_non_null(strstr(err.text, "ttl"));
  expect_status("ttl too big", pc_ls_session_open(ls, PC_LS_TTL_MAX + 1, &id, &err), &err,
                PC_INVALID);
  expect_status("ttl max", pc_ls_session_open(ls, PC_LS_TTL_MAX, &id, &err), &err, PC_OK);
  expect_status("ttl min", pc_ls_session_open(ls, PC_LS_TTL_MIN, &id, &err), &err, PC_OK);
  expect_status("NULL out", pc_ls_session_open(ls, 1000, NULL, &err), &err, PC_INVALID);
  /* NULL err is allowed everywhere. */
  assert_int_equal(pc_ls_session_keepalive(ls, 0, NULL), PC_NOT_FOUND);
  pc_ls_destroy(ls);
  pc_ls_destroy(NULL);
}

/* Keep-alives extend a session well past its TTL; each check follows a
 * keep-alive immediately, so this does not depend on scheduling. */
static void test_keepalive_extends(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  uint64_t s = open_session(ls, 1000);
  pc_error_t err;
  for (int i = 0; i < 15; i++) {
    expect_status("keepalive", pc_ls_session_keepalive(ls, s, &err), &err, PC_OK);
    assert_int_equal(pc_ls_session_liveness(ls, s), PC_LS_ALIVE);
    pc_sleep_ms(100);
  }
  pc_ls_destroy(ls);
}

static void test_expiry_releases_locks(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  uint64_t shortlived = open_session(ls, 50), other = open_session(ls, 60000);
  assert_int_equal(try_lock(ls, shortlived, "bucket/1", NULL), 1);
  assert_int_equal(try_lock(ls, shortlived, "bucket/2", NULL), 1);
  wait_dead(ls, shortlived);

  pc_error_t err;
  assert_true(pc_ls_lock_holder(ls, "bucket/1", 8) == 0);
  uint64_t h = 0;
  assert_int_equal(try_lock(ls, other, "bucket/2", &h), 1);
  assert_true(h == other);
  expect_status("keepalive expired", pc_ls_session_keepalive(ls, shortlived, &err), &err,
                PC_NOT_FOUND);
  int acquired = -1;
  expect_status("lock_try expired",
                pc_ls_lock_try(ls, shortlived, "bucket/3", 8, &acquired, &h, &err), &err,
                PC_NOT_FOUND);
  assert_int_equal(acquired, 0);
  assert_int_equal(pc_ls_session_liveness(ls, shortlived), PC_LS_DEAD);
  assert_int_equal(pc_ls_session_count(ls), 1);

  /* Sessions nobody asks about are reaped by session_count. */
  for (int i = 0; i < 20; i++) open_session(ls, 20);
  for (unsigned i = 0; i < MAX_POLLS && pc_ls_session_count(ls) != 1; i++) pc_sleep_ms(POLL_MS);
  assert_int_equal(pc_ls_session_count(ls), 1);
  pc_ls_destroy(ls);
}

/* ---- reports for garbage collection --------------------------------------- */

static void report(pc_ls_t *ls, uint64_t s, uint64_t oldest) {
  pc_error_t err;
  expect_status("report", pc_ls_session_report(ls, s, oldest, &err), &err, PC_OK);
}

static void expect_oldest(pc_ls_t *ls, uint64_t want, size_t want_unreported) {
  size_t unreported = 12345;
  uint64_t got = pc_ls_oldest_reported(ls, &unreported);
  if (got != want || unreported != want_unreported)
    fail_msg("oldest %" PRIu64 " (%zu unreported), want %" PRIu64 " (%zu unreported)", got,
             unreported, want, want_unreported);
}

/* The minimum over the latest reports of live sessions; a report dies with
 * its session however it ends; sessions that never reported are counted. */
static void test_session_report(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  pc_error_t err;
  expect_oldest(ls, UINT64_MAX, 0); /* no sessions */
  assert_true(pc_ls_oldest_reported(ls, NULL) == UINT64_MAX);

  uint64_t a = open_session(ls, 60000), b = open_session(ls, 60000), c = open_session(ls, 60000);
  expect_oldest(ls, UINT64_MAX, 3); /* sessions, none reported */
  report(ls, a, 500);
  expect_oldest(ls, 500, 2);
  report(ls, b, 300);
  expect_oldest(ls, 300, 1);
  report(ls, c, UINT64_MAX); /* holds nothing: reported, no bound */
  expect_oldest(ls, 300, 0);
  report(ls, b, 900); /* the latest report counts, even when it rises */
  expect_oldest(ls, 500, 0);
  report(ls, a, UINT64_MAX);
  expect_oldest(ls, 900, 0);
  report(ls, b, UINT64_MAX);
  expect_oldest(ls, UINT64_MAX, 0); /* every session reports none */
  report(ls, a, 0);                 /* the whole range is a legal value */
  expect_oldest(ls, 0, 0);
  assert_true(pc_ls_oldest_reported(ls, NULL) == 0);

  /* A closed session's report disappears with it. */
  report(ls, b, 200);
  expect_oldest(ls, 0, 0);
  expect_status("close a", pc_ls_session_close(ls, a, &err), &err, PC_OK);
  expect_oldest(ls, 200, 0);
  expect_status("report closed", pc_ls_session_report(ls, a, 1, &err), &err, PC_NOT_FOUND);
  assert_non_null(strstr(err.text, "not alive"));
  expect_oldest(ls, 200, 0);
  expect_status("report unknown", pc_ls_session_report(ls, other_epoch_id(ls, 2), 1, &err),
                &err, PC_NOT_FOUND);
  expect_status("report 0", pc_ls_session_report(ls, 0, 1, &err), &err, PC_NOT_FOUND);
  expect_status("report NULL", pc_ls_session_report(NULL, b, 1, &err), &err, PC_INVALID);
  assert_int_equal(pc_ls_session_report(ls, 0, 1, NULL), PC_NOT_FOUND);
  size_t unreported = 7;
  assert_true(pc_ls_oldest_reported(NULL, &unreported) == UINT64_MAX);
  assert_int_equal(unreported, 0);

  /* So does the report of a session whose connection closed. */
  expect_status("bind", pc_ls_session_bind(ls, b, 77, &err), &err, PC_OK);
  assert_int_equal(pc_ls_connection_closed(ls, 77), 1);
  expect_oldest(ls, UINT64_MAX, 0);

  /* And an expired session's, reaped by pc_ls_oldest_reported itself: poll
   * it alone (no liveness or count call does the reaping). */
  uint64_t shortlived = open_session(ls, 200);
  report(ls, shortlived, 10);
  report(ls, c, 400);
  unsigned polls = 0;
  while (pc_ls_oldest_reported(ls, NULL) == 10 && polls++ < MAX_POLLS) pc_sleep_ms(POLL_MS);
  expect_oldest(ls, 400, 0);
  assert_int_equal(pc_ls_session_liveness(ls, shortlived), PC_LS_DEAD);
  expect_status("report expired", pc_ls_session_report(ls, shortlived, 1, &err), &err,
                PC_NOT_FOUND);

  /* An unreported session that expires stops being counted. */
  uint64_t silent = open_session(ls, 30);
  (void)silent;
  polls = 0;
  for (;;) {
    pc_ls_oldest_reported(ls, &unreported);
    if (unreported == 0 || polls++ >= MAX_POLLS) break;
    pc_sleep_ms(POLL_MS);
  }
  expect_oldest(ls, 400, 0);
  assert_int_equal(pc_ls_session_count(ls), 1);
  pc_ls_destroy(ls);
}

/* ---- locks --------------------------------------------------------------- */

static void test_locks_exclusive(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  pc_error_t err;
  uint64_t s1 = open_session(ls, 60000), s2 = open_session(ls, 60000), h = 0;

  assert_int_equal(try_lock(ls, s1, "x", &h), 1);
  assert_true(h == s1);
  assert_int_equal(try_lock(ls, s1, "x", &h), 1); /* re-entrant */
  assert_true(h == s1);
  assert_int_equal(try_lock(ls, s2, "x", &h), 0);
  assert_true(h == s1);
  assert_true(pc_ls_lock_holder(ls, "x", 1) == s1);
  assert_true(pc_ls_lock_holder(ls, "y", 1) == 0);

  /* Names are byte strings: "x\0" and "x" differ. */
  int acquired = -1;
  expect_status("binary name", pc_ls_lock_try(ls, s2, "x\0", 2, &acquired, &h, &err), &err,
                PC_OK);
  assert_int_equal(acquired, 1);
  assert_true(pc_ls_lock_holder(ls, "x\0", 2) == s2);

  expect_status("release by non-holder", pc_ls_lock_release(ls, s2, "x", 1, &err), &err,
                PC_NOT_FOUND);
  assert_true(pc_ls_lock_holder(ls, "x", 1) == s1);
  expect_status("release free lock", pc_ls_lock_release(ls, s1, "nope", 4, &err), &err,
                PC_NOT_FOUND);
  expect_status("release", pc_ls_lock_release(ls, s1, "x", 1, &err), &err, PC_OK);
  assert_true(pc_ls_lock_holder(ls, "x", 1) == 0);
  expect_status("release twice", pc_ls_lock_release(ls, s1, "x", 1, &err), &err, PC_NOT_FOUND);
  assert_int_equal(try_lock(ls, s2, "x", &h), 1);
  assert_true(h == s2);

  /* Closing a session releases its locks. */
  assert_int_equal(try_lock(ls, s1, "y", NULL), 1);
  assert_int_equal(try_lock(ls, s1, "z", NULL), 1);
  expect_status("close", pc_ls_session_close(ls, s1, &err), &err, PC_OK);
  assert_true(pc_ls_lock_holder(ls, "y", 1) == 0);
  assert_int_equal(try_lock(ls, s2, "z", NULL), 1);
  expect_status("lock_try closed", pc_ls_lock_try(ls, s1, "w", 1, &acquired, &h, &err), &err,
                PC_NOT_FOUND);
  expect_status("release closed", pc_ls_lock_release(ls, s1, "z", 1, &err), &err,
                PC_NOT_FOUND);
  expect_status("lock_try unknown",
                pc_ls_lock_try(ls, other_epoch_id(ls, 1), "w", 1, &acquired, &h, &err), &err,
                PC_NOT_FOUND);

  /* Name bounds. */
  char *big = malloc(PC_LS_MAX_NAME + 1);
  assert_non_null(big);
  memset(big, 'n', PC_LS_MAX_NAME + 1);
  expect_status("empty name", pc_ls_lock_try(ls, s2, "", 0, &acquired, &h, &err), &err,
                PC_INVALID);
  expect_status("NULL name", pc_ls_lock_try(ls, s2, NULL, 1, &acquired, &h, &err), &err,
                PC_INVALID);
  expect_status("long name",
                pc_ls_lock_try(ls, s2, big, PC_LS_MAX_NAME + 1, &acquired, &h, &err), &err,
                PC_INVALID);
  assert_non_null(strstr(err.text, "1025"));
  expect_status("release long name", pc_ls_lock_release(ls, s2, big, PC_LS_MAX_NAME + 1, &err),
                &err, PC_INVALID);
  expect_status("max name", pc_ls_lock_try(ls, s2, big, PC_LS_MAX_NAME, &acquired, &h, &err),
                &err, PC_OK);
  assert_int_equal(acquired, 1);
  assert_true(pc_ls_lock_holder(ls, big, PC_LS_MAX_NAME) == s2);
  assert_true(pc_ls_lock_holder(ls, big, PC_LS_MAX_NAME + 1) == 0);
  assert_true(pc_ls_lock_holder(ls, NULL, 0) == 0);
  /* holder may be NULL. */
  expect_status("NULL holder", pc_ls_lock_try(ls, s2, "q", 1, &acquired, NULL, &err), &err,
                PC_OK);
  expect_status("NULL acquired", pc_ls_lock_try(ls, s2, "q", 1, NULL, NULL, &err), &err,
                PC_INVALID);
  free(big);
  pc_ls_destroy(ls); /* frees sessions still holding locks */
}

static void test_liveness_epochs(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create(), *ls2 = pc_ls_create();
  assert_non_null(ls);
  assert_non_null(ls2);
  pc_error_t err;
  uint64_t s = open_session(ls, 60000);
  assert_int_equal(pc_ls_session_liveness(ls, s), PC_LS_ALIVE);
  expect_status("close", pc_ls_session_close(ls, s, &err), &err, PC_OK);
  assert_int_equal(pc_ls_session_liveness(ls, s), PC_LS_DEAD);

  /* Another incarnation's ids (any counter) are unknown, never dead. */
  assert_int_equal(pc_ls_session_liveness(ls, other_epoch_id(ls, 1)), PC_LS_UNKNOWN);
  assert_int_equal(pc_ls_session_liveness(ls, other_epoch_id(ls, (uint32_t)s)), PC_LS_UNKNOWN);
  assert_int_equal(pc_ls_session_liveness(ls, 0), PC_LS_UNKNOWN);
  /* Our epoch but a counter never issued: unknown too. */
  assert_int_equal(pc_ls_session_liveness(ls, s + 1000), PC_LS_UNKNOWN);
  assert_int_equal(pc_ls_session_liveness(ls, (uint64_t)pc_ls_epoch(ls) << 32), PC_LS_UNKNOWN);
  if (pc_ls_epoch(ls) != pc_ls_epoch(ls2)) {
    uint64_t s2 = open_session(ls2, 60000);
    assert_int_equal(pc_ls_session_liveness(ls, s2), PC_LS_UNKNOWN);
    assert_int_equal(pc_ls_session_liveness(ls2, s), PC_LS_UNKNOWN);
    assert_int_equal(pc_ls_session_liveness(ls2, s2), PC_LS_ALIVE);
  }
  pc_ls_destroy(ls);
  pc_ls_destroy(ls2);
}

static void test_limits(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  pc_error_t err;
  pc_ls_set_limits(ls, 3, 2, 5, 100);
  uint64_t s[3], id;
  for (int i = 0; i < 3; i++) s[i] = open_session(ls, 60000);
  expect_status("4th session", pc_ls_session_open(ls, 60000, &id, &err), &err, PC_BUSY);
  assert_non_null(strstr(err.text, "limit 3"));
  expect_status("close", pc_ls_session_close(ls, s[2], &err), &err, PC_OK);
  s[2] = open_session(ls, 60000);

  /* Expired sessions do not count against the limit. */
  pc_ls_t *ls2 = pc_ls_create();
  assert_non_null(ls2);
  pc_ls_set_limits(ls2, 2, 0, 0, 0);
  open_session(ls2, 20);
  open_session(ls2, 20);
  for (unsigned i = 0; i < MAX_POLLS && pc_ls_session_count(ls2) != 0; i++) pc_sleep_ms(POLL_MS);
  open_session(ls2, 60000);
  open_session(ls2, 60000);
  pc_ls_destroy(ls2);

  /* Locks per session, in all, and bytes of names. */
  int acquired;
  assert_int_equal(try_lock(ls, s[0], "a", NULL), 1);
  assert_int_equal(try_lock(ls, s[0], "b", NULL), 1);
  assert_int_equal(try_lock(ls, s[0], "a", NULL), 1); /* re-entry takes nothing new */
  expect_status("3rd lock of session", pc_ls_lock_try(ls, s[0], "c", 1, &acquired, NULL, &err),
                &err, PC_BUSY);
  assert_int_equal(acquired, 0);
  assert_non_null(strstr(err.text, "this session"));
  assert_int_equal(try_lock(ls, s[1], "c", NULL), 1);
  assert_int_equal(try_lock(ls, s[1], "d", NULL), 1);
  assert_int_equal(try_lock(ls, s[2], "e", NULL), 1);
  expect_status("6th lock", pc_ls_lock_try(ls, s[2], "f", 1, &acquired, NULL, &err), &err,
                PC_BUSY);
  assert_non_null(strstr(err.text, "limit 5"));
  expect_status("release", pc_ls_lock_release(ls, s[1], "d", 1, &err), &err, PC_OK);
  char name[97]; /* a, b, c, e hold 4 of the 100 bytes */
  memset(name, 'k', sizeof name);
  expect_status("name bytes", pc_ls_lock_try(ls, s[2], name, sizeof name, &acquired, NULL, &err),
                &err, PC_BUSY);
  assert_non_null(strstr(err.text, "bytes"));
  expect_status("name fits", pc_ls_lock_try(ls, s[2], name, 96, &acquired, NULL, &err), &err,
                PC_OK);
  assert_int_equal(acquired, 1);
  pc_ls_destroy(ls);
}

/* The default limits, with the tables growing to them. */
static void test_default_limits(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  pc_error_t err;
  uint64_t first = 0, id;
  for (unsigned i = 0; i < PC_LS_DEFAULT_MAX_SESSIONS; i++) {
    if (pc_ls_session_open(ls, 60000, &id, &err) != PC_OK) fail_msg("open %u: %s", i, err.text);
    if (i == 0) first = id;
  }
  expect_status("one session too many", pc_ls_session_open(ls, 60000, &id, &err), &err, PC_BUSY);
  assert_int_equal(pc_ls_session_count(ls), PC_LS_DEFAULT_MAX_SESSIONS);
  char name[32];
  int acquired;
  for (unsigned i = 0; i < PC_LS_DEFAULT_MAX_LOCKS_PER_SESSION; i++) {
    int n = snprintf(name, sizeof name, "lock-%u", i);
    if (pc_ls_lock_try(ls, first, name, (size_t)n, &acquired, NULL, &err) != PC_OK || !acquired)
      fail_msg("lock %u: %s", i, err.text);
  }
  expect_status("one lock too many", pc_ls_lock_try(ls, first, "more", 4, &acquired, NULL, &err),
                &err, PC_BUSY);
  assert_true(pc_ls_lock_holder(ls, "lock-4242", 9) == first);
  expect_status("close", pc_ls_session_close(ls, first, &err), &err, PC_OK);
  assert_true(pc_ls_lock_holder(ls, "lock-4242", 9) == 0);
  expect_status("open after close", pc_ls_session_open(ls, 60000, &id, &err), &err, PC_OK);
  pc_ls_destroy(ls);
}

/* ---- many threads -------------------------------------------------------- */

#define CT_THREADS 8
#define CT_NAMES 16
#define CT_ITERS 3000

typedef struct ct_shared {
  pc_ls_t *ls;
  atomic_int inside[CT_NAMES]; /* threads between acquire and release, per name */
  atomic_int violations;
  atomic_int errors;
  atomic_long acquisitions;
} ct_shared_t;

typedef struct ct_thread {
  ct_shared_t *sh;
  pthread_t thread;
  unsigned seed;
  int churn; /* short-lived sessions that expire while holding locks */
} ct_thread_t;

static unsigned ct_rand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

static void *ct_main(void *arg) {
  ct_thread_t *t = arg;
  ct_shared_t *sh = t->sh;
  pc_error_t err;
  uint64_t s = 0;
  if (pc_ls_session_open(sh->ls, t->churn ? 2 : 60000, &s, &err) != PC_OK) {
    atomic_fetch_add(&sh->errors, 1);
    return NULL;
  }
  char name[16];
  for (int i = 0; i < CT_ITERS; i++) {
    unsigned k = ct_rand(&t->seed) % CT_NAMES;
    int n = snprintf(name, sizeof name, "%s%u", t->churn ? "churn" : "n", k);
    int acquired = 0;
    uint64_t holder = 0;
    pc_status_t st = pc_ls_lock_try(sh->ls, s, name, (size_t)n, &acquired, &holder, &err);
    if (t->churn) {
      if (st == PC_NOT_FOUND) { /* expired: start over */
        if (pc_ls_session_open(sh->ls, 2, &s, &err) != PC_OK) atomic_fetch_add(&sh->errors, 1);
      } else if (st != PC_OK) {
        atomic_fetch_add(&sh->errors, 1);
      }
      if ((i & 63) == 0) (void)pc_ls_session_count(sh->ls);
      continue;
    }
    if (st != PC_OK) {
      atomic_fetch_add(&sh->errors, 1);
      continue;
    }
    if (!acquired) {
      if (holder == s || holder == 0) atomic_fetch_add(&sh->violations, 1);
      continue;
    }
    if (holder != s) atomic_fetch_add(&sh->violations, 1);
    atomic_fetch_add(&sh->acquisitions, 1);
    if (atomic_fetch_add(&sh->inside[k], 1) != 0) atomic_fetch_add(&sh->violations, 1);
    if (pc_ls_lock_holder(sh->ls, name, (size_t)n) != s) atomic_fetch_add(&sh->violations, 1);
    if (pc_ls_session_liveness(sh->ls, s) != PC_LS_ALIVE) atomic_fetch_add(&sh->violations, 1);
    atomic_fetch_sub(&sh->inside[k], 1);
    if (pc_ls_lock_release(sh->ls, s, name, (size_t)n, &err) != PC_OK)
      atomic_fetch_add(&sh->errors, 1);
    if ((i & 255) == 0 && pc_ls_session_keepalive(sh->ls, s, &err) != PC_OK)
      atomic_fetch_add(&sh->errors, 1);
  }
  if (t->churn) {
    pc_ls_session_close(sh->ls, s, NULL); /* may have expired already */
  } else if (pc_ls_session_close(sh->ls, s, &err) != PC_OK) {
    atomic_fetch_add(&sh->errors, 1);
  }
  return NULL;
}

static void test_concurrent_locks(void **state) {
  (void)state;
  ct_shared_t *sh = calloc(1, sizeof *sh);
  assert_non_null(sh);
  sh->ls = pc_ls_create();
  assert_non_null(sh->ls);
  ct_thread_t t[CT_THREADS + 2];
  for (int i = 0; i < CT_THREADS + 2; i++) {
    t[i].sh = sh;
    t[i].seed = 1234u + (unsigned)i * 7919u;
    t[i].churn = i >= CT_THREADS;
    assert_int_equal(pthread_create(&t[i].thread, NULL, ct_main, &t[i]), 0);
  }
  for (int i = 0; i < CT_THREADS + 2; i++) pthread_join(t[i].thread, NULL);
  assert_int_equal(atomic_load(&sh->violations), 0);
  assert_int_equal(atomic_load(&sh->errors), 0);
  assert_true(atomic_load(&sh->acquisitions) > 0);
  char name[16];
  for (int k = 0; k < CT_NAMES; k++) {
    int n = snprintf(name, sizeof name, "n%d", k);
    assert_true(pc_ls_lock_holder(sh->ls, name, (size_t)n) == 0);
  }
  pc_ls_destroy(sh->ls);
  free(sh);
}

/* ---- the RPC handler ----------------------------------------------------- */

/* Calls the handler; the reply lands in *reply (freed by the caller). */
static pc_status_t call(pc_ls_t *ls, uint8_t op, const pc_buf_t *body, pc_buf_t *reply,
                        pc_error_t *err) {
  pc_buf_free(reply);
  return pc_ls_rpc_handler(ls, op, body ? body->p : NULL, body ? body->len : 0, reply, err);
}

static pc_buf_t body_u64(uint64_t v) {
  pc_buf_t b = {0};
  assert_int_equal(pc_buf_u64(&b, v), 0);
  return b;
}

static pc_buf_t body_session_name(uint64_t s, const char *name, size_t n) {
  pc_buf_t b = body_u64(s);
  assert_int_equal(pc_buf_str(&b, name, n), 0);
  return b;
}

/* A keep-alive: the session and its report. */
static pc_buf_t body_keepalive(uint64_t s, uint64_t oldest) {
  pc_buf_t b = body_u64(s);
  assert_int_equal(pc_buf_u64(&b, oldest), 0);
  return b;
}

/* Asks the handler for OLDEST; checks the reply's length. */
static uint64_t handler_oldest(pc_ls_t *ls, size_t *unreported) {
  pc_error_t err;
  pc_buf_t reply = {0};
  expect_status("oldest", call(ls, PC_LS_OP_OLDEST, NULL, &reply, &err), &err, PC_OK);
  assert_int_equal(reply.len, 16);
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  uint64_t oldest = pc_rd_u64(&r);
  *unreported = (size_t)pc_rd_u64(&r);
  assert_true(r.ok && r.pos == r.len);
  pc_buf_free(&reply);
  return oldest;
}

static void test_handler_ops(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  pc_error_t err;
  pc_buf_t body = {0}, reply = {0};

  /* open */
  assert_int_equal(pc_buf_u32(&body, 60000), 0);
  expect_status("open", call(ls, PC_LS_OP_SESSION_OPEN, &body, &reply, &err), &err, PC_OK);
  assert_int_equal(reply.len, 8);
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  uint64_t s = pc_rd_u64(&r);
  assert_int_equal(pc_ls_session_liveness(ls, s), PC_LS_ALIVE);
  pc_buf_free(&body);

  /* keepalive (with its report), liveness */
  body = body_keepalive(s, UINT64_MAX);
  expect_status("keepalive", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err, PC_OK);
  assert_int_equal(reply.len, 0);
  pc_buf_free(&body);
  body = body_u64(s);
  expect_status("liveness", call(ls, PC_LS_OP_LIVENESS, &body, &reply, &err), &err, PC_OK);
  assert_int_equal(reply.len, 1);
  assert_int_equal((uint8_t)reply.p[0], PC_LS_ALIVE);
  pc_buf_free(&body);
  body = body_u64(other_epoch_id(ls, 5));
  expect_status("liveness other", call(ls, PC_LS_OP_LIVENESS, &body, &reply, &err), &err, PC_OK);
  assert_int_equal((uint8_t)reply.p[0], PC_LS_UNKNOWN);
  pc_buf_free(&body);
  body = body_keepalive(other_epoch_id(ls, 5), 7);
  expect_status("keepalive other", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err,
                PC_NOT_FOUND);
  pc_buf_free(&body);

  /* lock_try, holder, release */
  body = body_session_name(s, "bucket/7", 8);
  expect_status("lock_try", call(ls, PC_LS_OP_LOCK_TRY, &body, &reply, &err), &err, PC_OK);
  assert_int_equal(reply.len, 9);
  r = (pc_rd_t){reply.p, reply.len, 0, 1};
  assert_int_equal(pc_rd_u8(&r), 1);
  assert_true(pc_rd_u64(&r) == s);
  pc_buf_t hb = {0};
  assert_int_equal(pc_buf_str(&hb, "bucket/7", 8), 0);
  expect_status("holder", call(ls, PC_LS_OP_LOCK_HOLDER, &hb, &reply, &err), &err, PC_OK);
  r = (pc_rd_t){reply.p, reply.len, 0, 1};
  assert_true(pc_rd_u64(&r) == s);
  assert_true(r.ok && r.pos == reply.len);
  expect_status("release", call(ls, PC_LS_OP_LOCK_RELEASE, &body, &reply, &err), &err, PC_OK);
  expect_status("release again", call(ls, PC_LS_OP_LOCK_RELEASE, &body, &reply, &err), &err,
                PC_NOT_FOUND);
  expect_status("holder free", call(ls, PC_LS_OP_LOCK_HOLDER, &hb, &reply, &err), &err, PC_OK);
  r = (pc_rd_t){reply.p, reply.len, 0, 1};
  assert_true(pc_rd_u64(&r) == 0);
  pc_buf_free(&hb);
  pc_buf_free(&body);

  /* info (empty body, also as NULL) */
  expect_status("info", call(ls, PC_LS_OP_INFO, NULL, &reply, &err), &err, PC_OK);
  assert_int_equal(reply.len, 12);
  r = (pc_rd_t){reply.p, reply.len, 0, 1};
  assert_int_equal(pc_rd_u32(&r), pc_ls_epoch(ls));
  assert_true(pc_rd_u64(&r) == 1);

  /* close */
  body = body_u64(s);
  expect_status("close", call(ls, PC_LS_OP_SESSION_CLOSE, &body, &reply, &err), &err, PC_OK);
  expect_status("liveness closed", call(ls, PC_LS_OP_LIVENESS, &body, &reply, &err), &err,
                PC_OK);
  assert_int_equal((uint8_t)reply.p[0], PC_LS_DEAD);
  expect_status("close again", call(ls, PC_LS_OP_SESSION_CLOSE, &body, &reply, &err), &err,
                PC_NOT_FOUND);
  pc_buf_free(&body);

  /* a TTL out of range travels as PC_INVALID */
  assert_int_equal(pc_buf_u32(&body, 0), 0);
  expect_status("open ttl 0", call(ls, PC_LS_OP_SESSION_OPEN, &body, &reply, &err), &err,
                PC_INVALID);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  pc_ls_destroy(ls);
}

/* Each well-formed request of every op, for the malformation tests. */
#define N_OPS 9
static size_t valid_requests(uint64_t s, uint8_t ops[N_OPS], pc_buf_t bodies[N_OPS]) {
  memset(bodies, 0, N_OPS * sizeof *bodies);
  ops[0] = PC_LS_OP_SESSION_OPEN;
  pc_buf_u32(&bodies[0], 1000);
  ops[1] = PC_LS_OP_KEEPALIVE;
  bodies[1] = body_keepalive(s, 42);
  ops[2] = PC_LS_OP_SESSION_CLOSE;
  bodies[2] = body_u64(s + 12345); /* unknown: NOT_FOUND, keeps s open */
  ops[3] = PC_LS_OP_LIVENESS;
  bodies[3] = body_u64(s);
  ops[4] = PC_LS_OP_LOCK_TRY;
  bodies[4] = body_session_name(s, "name", 4);
  ops[5] = PC_LS_OP_LOCK_RELEASE;
  bodies[5] = body_session_name(s, "other", 5);
  ops[6] = PC_LS_OP_LOCK_HOLDER;
  pc_buf_str(&bodies[6], "name", 4);
  ops[7] = PC_LS_OP_INFO;
  ops[8] = PC_LS_OP_OLDEST;
  return N_OPS;
}

static void test_handler_malformed(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  pc_error_t err;
  pc_buf_t reply = {0};
  uint64_t s = open_session(ls, 60000);
  uint8_t ops[N_OPS];
  pc_buf_t bodies[N_OPS];
  size_t n = valid_requests(s, ops, bodies);

  for (size_t i = 0; i < n; i++) {
    /* Well-formed: never PC_INVALID. */
    pc_status_t st = call(ls, ops[i], &bodies[i], &reply, &err);
    if (st == PC_INVALID) fail_msg("op 0x%02x valid body refused: %s", ops[i], err.text);
    /* Every truncation. */
    for (size_t cut = 0; cut < bodies[i].len; cut++) {
      pc_buf_t t = {0};
      assert_int_equal(pc_buf_append(&t, bodies[i].p, cut), 0);
      expect_status("truncated", call(ls, ops[i], &t, &reply, &err), &err, PC_INVALID);
      if (!strstr(err.text, "truncated"))
        fail_msg("op 0x%02x cut %zu: message '%s'", ops[i], cut, err.text);
      pc_buf_free(&t);
    }
    /* A trailing byte. */
    pc_buf_t t = {0};
    assert_int_equal(pc_buf_append(&t, bodies[i].p, bodies[i].len), 0);
    assert_int_equal(pc_buf_u8(&t, 0), 0);
    expect_status("trailing", call(ls, ops[i], &t, &reply, &err), &err, PC_INVALID);
    assert_non_null(strstr(err.text, "trailing"));
    pc_buf_free(&t);
  }

  /* Names: empty, oversized (present or only claimed), the maximum. */
  char *big = malloc(PC_LS_MAX_NAME + 1);
  assert_non_null(big);
  memset(big, 'b', PC_LS_MAX_NAME + 1);
  pc_buf_t b = body_session_name(s, "", 0);
  expect_status("empty name", call(ls, PC_LS_OP_LOCK_TRY, &b, &reply, &err), &err, PC_INVALID);
  assert_non_null(strstr(err.text, "name"));
  pc_buf_free(&b);
  b = body_session_name(s, big, PC_LS_MAX_NAME + 1);
  expect_status("long name", call(ls, PC_LS_OP_LOCK_TRY, &b, &reply, &err), &err, PC_INVALID);
  assert_non_null(strstr(err.text, "1025"));
  expect_status("long name release", call(ls, PC_LS_OP_LOCK_RELEASE, &b, &reply, &err), &err,
                PC_INVALID);
  pc_buf_free(&b);
  b = body_u64(s);
  pc_buf_u32(&b, 0xFFFFFFFFu); /* claims 4 GiB, carries 3 bytes */
  pc_buf_append(&b, "abc", 3);
  expect_status("claimed name", call(ls, PC_LS_OP_LOCK_TRY, &b, &reply, &err), &err, PC_INVALID);
  assert_non_null(strstr(err.text, "4294967295"));
  pc_buf_free(&b);
  b = (pc_buf_t){0};
  pc_buf_str(&b, big, PC_LS_MAX_NAME + 1);
  expect_status("long holder name", call(ls, PC_LS_OP_LOCK_HOLDER, &b, &reply, &err), &err,
                PC_INVALID);
  pc_buf_free(&b);
  b = body_session_name(s, big, PC_LS_MAX_NAME);
  expect_status("max name", call(ls, PC_LS_OP_LOCK_TRY, &b, &reply, &err), &err, PC_OK);
  pc_buf_free(&b);
  free(big);

  /* Unknown ops, including the rpc layer's reserved ones. */
  uint8_t unknown[] = {0x00, PC_RPC_OP_HELLO, PC_RPC_OP_PING, 0x0f, 0x19, 0x7f, 0x80, 0xff};
  for (size_t i = 0; i < sizeof unknown; i++) {
    expect_status("unknown op", call(ls, unknown[i], &bodies[1], &reply, &err), &err, PC_INVALID);
    assert_non_null(strstr(err.text, "unknown op"));
  }
  /* NULL body with a length. */
  expect_status("NULL body", pc_ls_rpc_handler(ls, PC_LS_OP_INFO, NULL, 4, &reply, &err), &err,
                PC_INVALID);

  /* Random bodies for every op: answers, never crashes. */
  unsigned seed = 42;
  char junk[64];
  for (int round = 0; round < 20000; round++) {
    uint8_t op = (uint8_t)(ct_rand(&seed) & 0xff);
    if (round % 2) op = (uint8_t)(PC_LS_OP_SESSION_OPEN + ct_rand(&seed) % N_OPS);
    size_t len = ct_rand(&seed) % sizeof junk;
    for (size_t k = 0; k < len; k++) junk[k] = (char)ct_rand(&seed);
    if (len >= 8 && round % 3 == 0) memcpy(junk, bodies[1].p, 8); /* a real session id */
    pc_buf_free(&reply);
    pc_status_t st = pc_ls_rpc_handler(ls, op, junk, len, &reply, &err);
    if (st != PC_OK && st != PC_INVALID && st != PC_NOT_FOUND && st != PC_BUSY)
      fail_msg("op 0x%02x len %zu: %s", op, len, pc_status_name(st));
    if (st != PC_OK && err.text[0] == '\0') fail_msg("op 0x%02x: empty message", op);
  }
  for (size_t i = 0; i < n; i++) pc_buf_free(&bodies[i]);
  pc_buf_free(&reply);
  pc_ls_destroy(ls);
}

/* KEEPALIVE records its report, OLDEST answers the minimum; a keep-alive in
 * the old format (the session alone) is refused as truncated. */
static void test_handler_oldest(void **state) {
  (void)state;
  pc_ls_t *ls = pc_ls_create();
  assert_non_null(ls);
  pc_error_t err;
  pc_buf_t body = {0}, reply = {0};
  size_t unreported = 99;
  assert_true(handler_oldest(ls, &unreported) == UINT64_MAX);
  assert_int_equal(unreported, 0);
  uint64_t a = open_session(ls, 60000), b = open_session(ls, 60000);
  assert_true(handler_oldest(ls, &unreported) == UINT64_MAX);
  assert_int_equal(unreported, 2);

  body = body_keepalive(a, 1000);
  expect_status("keepalive a", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err, PC_OK);
  assert_int_equal(reply.len, 0);
  pc_buf_free(&body);
  assert_true(handler_oldest(ls, &unreported) == 1000);
  assert_int_equal(unreported, 1);
  assert_true(pc_ls_oldest_reported(ls, NULL) == 1000); /* the same state as in-process */

  body = body_keepalive(b, 0x0102030405060708ull); /* all eight bytes travel */
  expect_status("keepalive b", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err, PC_OK);
  pc_buf_free(&body);
  assert_true(handler_oldest(ls, &unreported) == 1000);
  assert_int_equal(unreported, 0);
  body = body_keepalive(a, UINT64_MAX);
  expect_status("keepalive a none", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err,
                PC_OK);
  pc_buf_free(&body);
  assert_true(handler_oldest(ls, &unreported) == 0x0102030405060708ull);

  /* The old format: refused, and it neither keeps alive nor reports. */
  body = body_u64(b);
  expect_status("old keepalive", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err,
                PC_INVALID);
  assert_non_null(strstr(err.text, "keepalive"));
  assert_non_null(strstr(err.text, "truncated"));
  pc_buf_free(&body);
  assert_true(handler_oldest(ls, &unreported) == 0x0102030405060708ull);

  /* A dead session's keep-alive reports nothing. */
  expect_status("close b", pc_ls_session_close(ls, b, &err), &err, PC_OK);
  body = body_keepalive(b, 5);
  expect_status("keepalive closed", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err,
                PC_NOT_FOUND);
  pc_buf_free(&body);
  assert_true(handler_oldest(ls, &unreported) == UINT64_MAX);
  assert_int_equal(unreported, 0);

  /* OLDEST takes no body at all; a NULL body with a length is refused. */
  pc_buf_u8(&body, 0);
  expect_status("oldest trailing", call(ls, PC_LS_OP_OLDEST, &body, &reply, &err), &err,
                PC_INVALID);
  assert_non_null(strstr(err.text, "oldest"));
  assert_non_null(strstr(err.text, "trailing"));
  pc_buf_free(&body);
  body = body_u64(a);
  expect_status("oldest with a session", call(ls, PC_LS_OP_OLDEST, &body, &reply, &err), &err,
                PC_INVALID);
  pc_buf_free(&body);
  expect_status("oldest NULL body", pc_ls_rpc_handler(ls, PC_LS_OP_OLDEST, NULL, 8, &reply, &err),
                &err, PC_INVALID);
  /* A keep-alive with more than the report. */
  body = body_keepalive(a, 5);
  pc_buf_u64(&body, 6);
  expect_status("keepalive long", call(ls, PC_LS_OP_KEEPALIVE, &body, &reply, &err), &err,
                PC_INVALID);
  assert_non_null(strstr(err.text, "8 trailing bytes"));
  pc_buf_free(&body);
  assert_true(handler_oldest(ls, &unreported) == UINT64_MAX); /* a still reports none */
  pc_buf_free(&reply);
  pc_ls_destroy(ls);
}


/* ---- over the network ---------------------------------------------------- */

#define NET_TIMEOUT_MS 2000u

typedef struct lockd {
  pc_ls_t *ls;
  pc_rpc_server_t *srv;
  uint16_t port;
} lockd_t;

/* Starts a lock service on 127.0.0.1:port (0: ephemeral). A restart on the
 * same port is retried for a while in case the port is not free yet. */
static void lockd_start(lockd_t *d, uint16_t port, const char *secret) {
  d->ls = pc_ls_create();
  assert_non_null(d->ls);
  pc_rpc_server_options_t o;
  memset(&o, 0, sizeof o);
  o.name = "lockd";
  o.host = "127.0.0.1";
  o.port = port;
  pc_rpc_auth_t auth = {.secret = secret};
  o.auth = &auth;
  o.workers = 2;
  pc_error_t err;
  d->srv = NULL;
  for (unsigned i = 0; i < 200 && !d->srv; i++) {
    d->srv = pc_rpc_server_start(&o, pc_ls_rpc_handler, d->ls, &err);
    if (!d->srv) pc_sleep_ms(50);
  }
  if (!d->srv) fail_msg("pc_rpc_server_start: %s", err.text);
  d->port = pc_rpc_server_port(d->srv);
  assert_true(d->port != 0);
  if (port) assert_int_equal(d->port, port);
}

static void lockd_stop(lockd_t *d) {
  pc_rpc_server_stop(d->srv);
  pc_ls_destroy(d->ls);
  d->srv = NULL;
  d->ls = NULL;
}

static pc_ls_client_t *client(const lockd_t *d, uint16_t port, const char *secret,
                              uint32_t ttl_ms) {
  pc_error_t err;
  pc_rpc_auth_t auth = {.secret = secret};
  pc_ls_client_t *c = pc_ls_client_create("127.0.0.1", d ? d->port : port, &auth, ttl_ms, &err);
  if (!c) fail_msg("pc_ls_client_create: %s", err.text);
  return c;
}

/* Polls until the client has a session other than not; returns it. */
static uint64_t wait_session(pc_ls_client_t *c, uint64_t not) {
  for (unsigned i = 0; i < MAX_POLLS; i++) {
    uint64_t s = pc_ls_client_session(c);
    if (s != 0 && s != not) return s;
    pc_sleep_ms(POLL_MS);
  }
  fail_msg("the client did not get a new session");
  return 0;
}

static int net_try(pc_ls_client_t *c, const char *name, uint64_t *holder) {
  pc_error_t err;
  int acquired = -1;
  uint64_t h = 0;
  expect_status("client lock_try",
                pc_ls_client_lock_try(c, name, strlen(name), NET_TIMEOUT_MS, &acquired, &h, &err),
                &err, PC_OK);
  assert_true(acquired == 0 || acquired == 1);
  if (holder) *holder = h;
  return acquired;
}

static void test_net_sessions_and_locks(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, NULL);
  pc_ls_client_t *c1 = client(&d, 0, NULL, 10000), *c2 = client(&d, 0, NULL, 10000);
  uint64_t s1 = wait_session(c1, 0), s2 = wait_session(c2, 0), h = 0;
  assert_true(s1 != s2);
  assert_int_equal((uint32_t)(s1 >> 32), pc_ls_epoch(d.ls));
  assert_int_equal(pc_ls_session_liveness(d.ls, s1), PC_LS_ALIVE);

  pc_error_t err;
  uint32_t epoch = 0;
  uint64_t sessions = 0;
  expect_status("info", pc_ls_client_info(c1, NET_TIMEOUT_MS, &epoch, &sessions, &err), &err,
                PC_OK);
  assert_int_equal(epoch, pc_ls_epoch(d.ls));
  assert_true(sessions == 2);

  assert_int_equal(net_try(c1, "bucket/1", &h), 1);
  assert_true(h == s1);
  assert_int_equal(net_try(c1, "bucket/1", &h), 1); /* re-entrant */
  assert_int_equal(net_try(c2, "bucket/1", &h), 0);
  assert_true(h == s1);
  assert_true(pc_ls_lock_holder(d.ls, "bucket/1", 8) == s1);
  expect_status("release by non-holder",
                pc_ls_client_lock_release(c2, "bucket/1", 8, NET_TIMEOUT_MS, &err), &err,
                PC_NOT_FOUND);
  int acquired;
  expect_status("empty name", pc_ls_client_lock_try(c2, "", 0, NET_TIMEOUT_MS, &acquired, &h, &err),
                &err, PC_INVALID);
  expect_status("long name",
                pc_ls_client_lock_release(c2, "x", PC_LS_MAX_NAME + 1, NET_TIMEOUT_MS, &err),
                &err, PC_INVALID);

  assert_int_equal(pc_ls_client_liveness(c2, s1, NET_TIMEOUT_MS), PC_LS_ALIVE);
  assert_int_equal(pc_ls_client_liveness(c2, 0, NET_TIMEOUT_MS), PC_LS_UNKNOWN);
  assert_int_equal(pc_ls_client_liveness(c2, other_epoch_id(d.ls, 1), NET_TIMEOUT_MS),
                   PC_LS_UNKNOWN);

  /* Destroying a client closes its session: dead at once, its locks free. */
  pc_ls_client_destroy(c1);
  assert_int_equal(pc_ls_client_liveness(c2, s1, NET_TIMEOUT_MS), PC_LS_DEAD);
  assert_int_equal(net_try(c2, "bucket/1", &h), 1);
  assert_true(h == s2);
  expect_status("release", pc_ls_client_lock_release(c2, "bucket/1", 8, NET_TIMEOUT_MS, &err),
                &err, PC_OK);
  assert_true(pc_ls_lock_holder(d.ls, "bucket/1", 8) == 0);
  pc_ls_client_destroy(c2);
  assert_int_equal(pc_ls_session_count(d.ls), 0);
  lockd_stop(&d);
}

/* The keep-alive thread keeps a session past its TTL; when lockd loses the
 * session the client opens a new one by itself. */
static void test_net_keepalive_and_renewal(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, NULL);
  pc_ls_client_t *c = client(&d, 0, NULL, 1500);
  uint64_t s = wait_session(c, 0);
  for (int i = 0; i < 50; i++) pc_sleep_ms(50); /* well past the TTL */
  assert_int_equal(pc_ls_session_liveness(d.ls, s), PC_LS_ALIVE);
  assert_true(pc_ls_client_session(c) == s);

  /* lockd forgets the session (as if it had expired). */
  assert_int_equal(net_try(c, "held", NULL), 1);
  pc_error_t err;
  expect_status("server-side close", pc_ls_session_close(d.ls, s, &err), &err, PC_OK);
  int acquired = -1;
  pc_status_t st = pc_ls_client_lock_try(c, "other", 5, NET_TIMEOUT_MS, &acquired, NULL, &err);
  assert_true(st == PC_NOT_FOUND || st == PC_OK); /* OK if renewed already */
  uint64_t s2 = wait_session(c, s);
  assert_int_equal(pc_ls_session_liveness(d.ls, s2), PC_LS_ALIVE);
  assert_int_equal(pc_ls_client_liveness(c, s, NET_TIMEOUT_MS), PC_LS_DEAD);
  assert_true(pc_ls_lock_holder(d.ls, "held", 4) == 0);
  uint64_t h = 0;
  assert_int_equal(net_try(c, "held", &h), 1);
  assert_true(h == s2);
  pc_ls_client_destroy(c);
  lockd_stop(&d);
}

/* lockd stopped: liveness UNKNOWN, lock calls PC_UNAVAILABLE; restarted: a
 * new epoch, the client renews its session, the old id is UNKNOWN. */
static void test_net_lockd_down_and_restart(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, NULL);
  uint16_t port = d.port;
  uint32_t old_epoch = pc_ls_epoch(d.ls);
  pc_ls_client_t *c = client(&d, 0, NULL, 2000);
  uint64_t s = wait_session(c, 0);
  assert_int_equal(net_try(c, "bucket/9", NULL), 1);
  lockd_stop(&d);

  pc_error_t err;
  int acquired = -1;
  assert_int_equal(pc_ls_client_liveness(c, s, 500), PC_LS_UNKNOWN);
  expect_status("lock_try while down",
                pc_ls_client_lock_try(c, "bucket/9", 8, 500, &acquired, NULL, &err), &err,
                PC_UNAVAILABLE);
  assert_int_equal(acquired, 0);
  expect_status("release while down", pc_ls_client_lock_release(c, "bucket/9", 8, 500, &err),
                &err, PC_UNAVAILABLE);
  uint32_t epoch;
  expect_status("info while down", pc_ls_client_info(c, 500, &epoch, NULL, &err), &err,
                PC_UNAVAILABLE);

  lockd_start(&d, port, NULL);
  uint64_t s2 = wait_session(c, s);
  assert_int_equal((uint32_t)(s2 >> 32), pc_ls_epoch(d.ls));
  if (pc_ls_epoch(d.ls) != old_epoch) {
    assert_int_equal(pc_ls_client_liveness(c, s, NET_TIMEOUT_MS), PC_LS_UNKNOWN);
    assert_int_equal(pc_ls_session_liveness(d.ls, s), PC_LS_UNKNOWN);
  }
  assert_int_equal(pc_ls_client_liveness(c, s2, NET_TIMEOUT_MS), PC_LS_ALIVE);
  uint64_t h = 0;
  assert_int_equal(net_try(c, "bucket/9", &h), 1);
  assert_true(h == s2);
  pc_ls_client_destroy(c);
  lockd_stop(&d);
}

/* A client created while lockd is down works on without a session and gets
 * one once lockd is up. */
static void test_net_client_before_lockd(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, NULL);
  uint16_t port = d.port;
  lockd_stop(&d);

  pc_ls_client_t *c = client(NULL, port, NULL, 600);
  assert_true(pc_ls_client_session(c) == 0);
  pc_error_t err;
  int acquired = -1;
  expect_status("lock_try without session",
                pc_ls_client_lock_try(c, "a", 1, 500, &acquired, NULL, &err), &err,
                PC_UNAVAILABLE);
  assert_int_equal(pc_ls_client_liveness(c, 1, 500), PC_LS_UNKNOWN);

  lockd_start(&d, port, NULL);
  uint64_t s = wait_session(c, 0);
  assert_int_equal(pc_ls_session_liveness(d.ls, s), PC_LS_ALIVE);
  assert_int_equal(net_try(c, "a", NULL), 1);
  pc_ls_client_destroy(c);
  assert_int_equal(pc_ls_session_liveness(d.ls, s), PC_LS_DEAD);
  lockd_stop(&d);
}

static void test_net_secret_and_arguments(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, "s3cret");
  pc_ls_client_t *good = client(&d, 0, "s3cret", 5000), *bad = client(&d, 0, "wrong", 5000);
  uint64_t s = wait_session(good, 0);
  assert_int_equal(pc_ls_client_liveness(good, s, NET_TIMEOUT_MS), PC_LS_ALIVE);
  assert_true(pc_ls_client_session(bad) == 0);
  assert_int_equal(pc_ls_client_liveness(bad, s, 500), PC_LS_UNKNOWN);
  pc_error_t err;
  int acquired = -1;
  assert_true(pc_ls_client_lock_try(bad, "a", 1, 500, &acquired, NULL, &err) != PC_OK);
  assert_int_equal(acquired, 0);
  pc_ls_client_destroy(bad);
  pc_ls_client_destroy(good);

  err.code = PC_OK;
  assert_null(pc_ls_client_create(NULL, d.port, NULL, 1000, &err));
  assert_int_equal(err.code, PC_INVALID);
  assert_null(pc_ls_client_create("127.0.0.1", 0, NULL, 1000, &err));
  assert_int_equal(err.code, PC_INVALID);
  assert_null(pc_ls_client_create("127.0.0.1", d.port, NULL, 0, &err));
  assert_int_equal(err.code, PC_INVALID);
  assert_null(pc_ls_client_create("127.0.0.1", d.port, NULL, PC_LS_TTL_MAX + 1, &err));
  assert_int_equal(err.code, PC_INVALID);
  assert_int_equal(pc_ls_client_liveness(NULL, 1, 10), PC_LS_UNKNOWN);
  assert_true(pc_ls_client_session(NULL) == 0);
  pc_ls_client_destroy(NULL);
  lockd_stop(&d);
}

#define NT_CLIENTS 4
#define NT_ITERS 300

typedef struct nt_thread {
  pc_ls_client_t *c;
  atomic_int *inside; /* CT_NAMES counters */
  atomic_int *violations, *errors;
  pthread_t thread;
  unsigned seed;
} nt_thread_t;

static void *nt_main(void *arg) {
  nt_thread_t *t = arg;
  char name[16];
  pc_error_t err;
  for (int i = 0; i < NT_ITERS; i++) {
    unsigned k = ct_rand(&t->seed) % CT_NAMES;
    int n = snprintf(name, sizeof name, "n%u", k);
    int acquired = 0;
    uint64_t holder = 0;
    uint64_t me = pc_ls_client_session(t->c);
    if (pc_ls_client_lock_try(t->c, name, (size_t)n, NET_TIMEOUT_MS, &acquired, &holder, &err) !=
        PC_OK) {
      atomic_fetch_add(t->errors, 1);
      continue;
    }
    if (!acquired) {
      if (pc_ls_client_liveness(t->c, holder, NET_TIMEOUT_MS) == PC_LS_UNKNOWN)
        atomic_fetch_add(t->errors, 1);
      continue;
    }
    if (holder != me) atomic_fetch_add(t->violations, 1);
    if (atomic_fetch_add(&t->inside[k], 1) != 0) atomic_fetch_add(t->violations, 1);
    atomic_fetch_sub(&t->inside[k], 1);
    if (pc_ls_client_lock_release(t->c, name, (size_t)n, NET_TIMEOUT_MS, &err) != PC_OK)
      atomic_fetch_add(t->errors, 1);
  }
  return NULL;
}

static void test_net_concurrent(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, NULL);
  static atomic_int inside[CT_NAMES];
  atomic_int violations = 0, errors = 0;
  nt_thread_t t[NT_CLIENTS];
  for (int i = 0; i < NT_CLIENTS; i++) {
    t[i].c = client(&d, 0, NULL, 10000);
    wait_session(t[i].c, 0);
    t[i].inside = inside;
    t[i].violations = &violations;
    t[i].errors = &errors;
    t[i].seed = 99u + (unsigned)i * 31337u;
  }
  for (int i = 0; i < NT_CLIENTS; i++)
    assert_int_equal(pthread_create(&t[i].thread, NULL, nt_main, &t[i]), 0);
  for (int i = 0; i < NT_CLIENTS; i++) pthread_join(t[i].thread, NULL);
  for (int i = 0; i < NT_CLIENTS; i++) pc_ls_client_destroy(t[i].c);
  assert_int_equal(atomic_load(&violations), 0);
  assert_int_equal(atomic_load(&errors), 0);
  assert_int_equal(pc_ls_session_count(d.ls), 0);
  lockd_stop(&d);
}

/* ---- reports over the network ---------------------------------------------- */

typedef struct value_reporter {
  _Atomic uint64_t value;
  atomic_uint calls;
} value_reporter_t;

static uint64_t value_report(void *ctx) {
  value_reporter_t *r = ctx;
  atomic_fetch_add(&r->calls, 1);
  return atomic_load(&r->value);
}

/* Polls OLDEST through c until it answers want and want_unreported. */
static void wait_oldest(pc_ls_client_t *c, uint64_t want, size_t want_unreported) {
  uint64_t got = 0;
  size_t unreported = 0;
  pc_error_t err;
  for (unsigned i = 0; i < MAX_POLLS; i++) {
    expect_status("client oldest",
                  pc_ls_client_oldest(c, NET_TIMEOUT_MS, &got, &unreported, &err), &err, PC_OK);
    if (got == want && unreported == want_unreported) return;
    pc_sleep_ms(POLL_MS);
  }
  fail_msg("OLDEST answers %" PRIu64 " (%zu unreported), want %" PRIu64 " (%zu unreported)",
           got, unreported, want, want_unreported);
}

/* Keep-alives carry the reporter's value: at once for a new session or a new
 * reporter (the slow clients' period is 20 s, far beyond the poll bound), and
 * every period for a changed value; a session's report leaves with it. */
static void test_net_reporter(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, NULL);
  pc_error_t err;

  /* Without a reporter a client reports UINT64_MAX, right after opening. */
  pc_ls_client_t *asker = client(&d, 0, NULL, 60000);
  wait_session(asker, 0);
  wait_oldest(asker, UINT64_MAX, 0);
  pc_ls_client_t *slow = client(&d, 0, NULL, 60000);
  uint64_t s = wait_session(slow, 0);
  wait_oldest(asker, UINT64_MAX, 0);

  /* Setting a reporter sends its value at once. */
  value_reporter_t r1, r2;
  atomic_init(&r1.value, 1000);
  atomic_init(&r1.calls, 0);
  atomic_init(&r2.value, 2000);
  atomic_init(&r2.calls, 0);
  pc_ls_client_set_reporter(slow, value_report, &r1);
  wait_oldest(asker, 1000, 0);
  assert_true(atomic_load(&r1.calls) >= 1);
  size_t unreported = 9;
  assert_true(pc_ls_oldest_reported(d.ls, &unreported) == 1000);
  assert_int_equal(unreported, 0);

  /* A value the test changes shows after the next keep-alive. */
  pc_ls_client_t *fast = client(&d, 0, NULL, 600);
  wait_session(fast, 0);
  pc_ls_client_set_reporter(fast, value_report, &r2);
  wait_oldest(asker, 1000, 0);
  atomic_store(&r2.value, 700);
  wait_oldest(asker, 700, 0);
  atomic_store(&r2.value, 5000); /* its transaction ended: the minimum rises */
  wait_oldest(asker, 1000, 0);
  atomic_store(&r2.value, 3);
  wait_oldest(fast, 3, 0); /* any client may ask */
  pc_ls_client_set_reporter(fast, NULL, NULL); /* back to reporting none */
  wait_oldest(asker, 1000, 0);

  /* lockd loses the session: its report goes with it; the renewed session
   * reports at once. */
  expect_status("server-side close", pc_ls_session_close(d.ls, s, &err), &err, PC_OK);
  assert_true(pc_ls_oldest_reported(d.ls, &unreported) == UINT64_MAX);
  int acquired = -1;
  pc_status_t st = pc_ls_client_lock_try(slow, "renew", 5, NET_TIMEOUT_MS, &acquired, NULL, &err);
  assert_true(st == PC_NOT_FOUND || st == PC_OK);
  uint64_t s2 = wait_session(slow, s);
  wait_oldest(asker, 1000, 0);
  assert_int_equal(pc_ls_session_liveness(d.ls, s2), PC_LS_ALIVE);

  /* Destroying the client closes the session, and its report with it; the
   * reporter is not called once destroy has returned. */
  pc_ls_client_destroy(slow);
  assert_true(pc_ls_oldest_reported(d.ls, &unreported) == UINT64_MAX);
  assert_int_equal(unreported, 0);
  unsigned calls = atomic_load(&r1.calls);
  pc_sleep_ms(50);
  assert_int_equal(atomic_load(&r1.calls), calls);

  /* lockd down: the question fails with the rpc status, naming lockd. */
  uint16_t port = d.port;
  lockd_stop(&d);
  uint64_t oldest = 5;
  expect_status("oldest while down", pc_ls_client_oldest(asker, 500, &oldest, &unreported, &err),
                &err, PC_UNAVAILABLE);
  char where[32];
  snprintf(where, sizeof where, "127.0.0.1:%u", (unsigned)port);
  assert_non_null(strstr(err.text, where));
  assert_true(oldest == 5);
  expect_status("oldest NULL", pc_ls_client_oldest(NULL, 500, &oldest, NULL, &err), &err,
                PC_INVALID);
  pc_ls_client_set_reporter(NULL, value_report, &r1);
  pc_ls_client_destroy(fast);
  pc_ls_client_destroy(asker);
}

/* A reporter held inside a call by the test: replacing it, and destroying
 * the client, wait for that call to return; other calls do not. */
typedef struct gate {
  atomic_int entered; /* calls begun */
  atomic_int open;    /* 0: a call waits until the test opens the gate */
  atomic_int left;    /* the sequence number when the latest call returned */
  atomic_int *seq;
  uint64_t value;
} gate_t;

static uint64_t gate_report(void *ctx) {
  gate_t *g = ctx;
  atomic_fetch_add(&g->entered, 1);
  while (!atomic_load(&g->open)) pc_sleep_ms(1);
  atomic_store(&g->left, atomic_fetch_add(g->seq, 1) + 1);
  return g->value;
}

typedef struct gate_job {
  pc_ls_client_t *c;
  value_reporter_t *next; /* NULL: destroy the client */
  atomic_int done;        /* the sequence number when the call returned */
  atomic_int *seq;
} gate_job_t;

static void *gate_job_main(void *arg) {
  gate_job_t *j = arg;
  if (j->next)
    pc_ls_client_set_reporter(j->c, value_report, j->next);
  else
    pc_ls_client_destroy(j->c);
  atomic_store(&j->done, atomic_fetch_add(j->seq, 1) + 1);
  return NULL;
}

static void wait_entered(gate_t *g) {
  for (unsigned i = 0; i < MAX_POLLS && atomic_load(&g->entered) == 0; i++) pc_sleep_ms(POLL_MS);
  if (atomic_load(&g->entered) == 0) fail_msg("the reporter was not called");
}

static void test_net_reporter_ordering(void **state) {
  (void)state;
  lockd_t d;
  lockd_start(&d, 0, NULL);
  atomic_int seq;
  atomic_init(&seq, 0);
  gate_t g1 = {0}, g2 = {0};
  g1.seq = g2.seq = &seq;
  g1.value = 11;
  g2.value = 22;
  value_reporter_t r;
  atomic_init(&r.value, 77);
  atomic_init(&r.calls, 0);
  pc_ls_client_t *c = client(&d, 0, NULL, 10000);
  uint64_t s = wait_session(c, 0);
  pc_ls_client_set_reporter(c, gate_report, &g1); /* returns; the thread then blocks in it */
  wait_entered(&g1);

  /* Callers do not wait for the reporter. */
  assert_true(pc_ls_client_session(c) == s);
  uint64_t oldest = 0;
  size_t unreported = 0;
  pc_error_t err;
  expect_status("oldest meanwhile",
                pc_ls_client_oldest(c, NET_TIMEOUT_MS, &oldest, &unreported, &err), &err, PC_OK);
  assert_int_equal(pc_ls_client_liveness(c, s, NET_TIMEOUT_MS), PC_LS_ALIVE);

  /* Replacing it waits for the call in progress. */
  gate_job_t j = {c, &r, 0, &seq};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, gate_job_main, &j), 0);
  pc_sleep_ms(50);
  assert_int_equal(atomic_load(&j.done), 0);
  atomic_store(&g1.open, 1);
  pthread_join(t, NULL);
  assert_true(atomic_load(&g1.left) != 0 && atomic_load(&g1.left) < atomic_load(&j.done));
  wait_oldest(c, 77, 0);
  int entered = atomic_load(&g1.entered);
  pc_sleep_ms(50);
  assert_int_equal(atomic_load(&g1.entered), entered); /* never called again */

  /* Destroy waits for the call in progress too, then nothing calls it. */
  pc_ls_client_set_reporter(c, gate_report, &g2);
  wait_entered(&g2);
  gate_job_t k = {c, NULL, 0, &seq};
  assert_int_equal(pthread_create(&t, NULL, gate_job_main, &k), 0);
  pc_sleep_ms(50);
  assert_int_equal(atomic_load(&k.done), 0);
  atomic_store(&g2.open, 1);
  pthread_join(t, NULL);
  assert_true(atomic_load(&g2.left) != 0 && atomic_load(&g2.left) < atomic_load(&k.done));
  entered = atomic_load(&g2.entered);
  pc_sleep_ms(50);
  assert_int_equal(atomic_load(&g2.entered), entered);
  assert_int_equal(pc_ls_session_liveness(d.ls, s), PC_LS_DEAD);
  lockd_stop(&d);
}

int main(void) {
  pc_log_set_level(PC_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_session_lifecycle),
      cmocka_unit_test(test_keepalive_extends),
      cmocka_unit_test(test_expiry_releases_locks),
      cmocka_unit_test(test_session_report),
      cmocka_unit_test(test_locks_exclusive),
      cmocka_unit_test(test_liveness_epochs),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_default_limits),
      cmocka_unit_test(test_concurrent_locks),
      cmocka_unit_test(test_handler_ops),
      cmocka_unit_test(test_handler_malformed),
      cmocka_unit_test(test_handler_oldest),
      cmocka_unit_test(test_net_sessions_and_locks),
      cmocka_unit_test(test_net_keepalive_and_renewal),
      cmocka_unit_test(test_net_lockd_down_and_restart),
      cmocka_unit_test(test_net_client_before_lockd),
      cmocka_unit_test(test_net_secret_and_arguments),
      cmocka_unit_test(test_net_concurrent),
      cmocka_unit_test(test_net_reporter),
      cmocka_unit_test(test_net_reporter_ordering),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
