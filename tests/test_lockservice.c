/* test_lockservice.c — the in-process lock service (lockservice/lockservice.h)
 * that the notification workers of a handle share: sessions (open,
 * keep-alive, close, expiry), leased locks (exclusive between sessions,
 * re-entrant for the holder, released with their session, refused to
 * non-holders), liveness answers across epochs, capacity limits, many
 * threads at once.
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
#include "base/error.h"
#include "core/keys.h"
#include "base/log.h"

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

int main(void) {
  pc_log_set_level(PC_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_session_lifecycle),
      cmocka_unit_test(test_keepalive_extends),
      cmocka_unit_test(test_expiry_releases_locks),
      cmocka_unit_test(test_locks_exclusive),
      cmocka_unit_test(test_liveness_epochs),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_default_limits),
      cmocka_unit_test(test_concurrent_locks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
