/* test_oracle.c — tests of the timestamp oracle and its client-side batcher
 * (tso/oracle.h): uniqueness and order under many threads, restart
 * and crash safety of the persisted bound, detection of a corrupt bound file,
 * and the batcher's error, timeout and batching behaviour. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tso/oracle.h"
#include "tso/snapshots.h"
#include "tso/tso_server.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

/* A fresh directory under /tmp and the bound file path inside it. */
struct tmp {
  char dir[64];
  char path[128];
};

static void tmp_make(struct tmp *t) {
  strcpy(t->dir, "/tmp/pc_test_oracle_XXXXXX");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->path, sizeof t->path, "%s/tso.bound", t->dir);
}

static void tmp_remove(struct tmp *t) {
  char tmp_path[160];
  snprintf(tmp_path, sizeof tmp_path, "%s.tmp", t->path);
  unlink(t->path);
  unlink(tmp_path);
  snprintf(tmp_path, sizeof tmp_path, "%s.lock", t->path);
  unlink(tmp_path);
  assert_int_equal(rmdir(t->dir), 0);
}

static void write_file(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  assert_int_equal(close(fd), 0);
}

static size_t read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  ssize_t n = read(fd, buf, cap);
  assert_true(n > 0);
  close(fd);
  return (size_t)n;
}

static pc_oracle_t *open_ok(const char *path, uint32_t window_ms) {
  pc_error_t err;
  pc_oracle_t *o = pc_oracle_open(path, window_ms, &err);
  if (!o) fail_msg("pc_oracle_open(%s): %s", path, err.text);
  return o;
}

static uint64_t next_ok(pc_oracle_t *o, uint32_t count) {
  pc_error_t err;
  uint64_t first = 0;
  pc_status_t st = pc_oracle_next(o, count, &first, &err);
  if (st != PC_OK) fail_msg("pc_oracle_next: %s", err.text);
  return first;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void assert_all_distinct(uint64_t *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_u64);
  for (size_t i = 1; i < n; i++)
    if (v[i] == v[i - 1]) fail_msg("timestamp %llu handed out twice", (unsigned long long)v[i]);
}

/* Threads that each take per_thread timestamps through one batcher. */
struct taker {
  pthread_t thread;
  pc_ts_batcher_t *batcher;
  uint32_t per_thread;
  uint32_t timeout_ms;
  uint64_t *out;
  uint32_t got;          /* timestamps taken before the first failure */
  pc_status_t status;    /* the first failure (PC_OK if none) */
  pc_error_t err;
};

static void *taker_main(void *arg) {
  struct taker *t = arg;
  t->status = PC_OK;
  for (uint32_t i = 0; i < t->per_thread; i++) {
    pc_status_t st = pc_ts_batcher_get(t->batcher, t->timeout_ms, &t->out[i], &t->err);
    if (st != PC_OK) {
      t->status = st;
      break;
    }
    t->got++;
  }
  return NULL;
}

/* Runs nthreads takers; checks each thread's sequence increases and all
 * timestamps are distinct. Returns them all (sorted), the caller frees. */
static uint64_t *take_concurrently(pc_ts_batcher_t *b, int nthreads, uint32_t per_thread) {
  struct taker *t = calloc((size_t)nthreads, sizeof *t);
  uint64_t *all = calloc((size_t)nthreads * per_thread, sizeof *all);
  assert_non_null(t);
  assert_non_null(all);
  for (int i = 0; i < nthreads; i++) {
    t[i].batcher = b;
    t[i].per_thread = per_thread;
    t[i].timeout_ms = 30000;
    t[i].out = all + (size_t)i * per_thread;
    assert_int_equal(pthread_create(&t[i].thread, NULL, taker_main, &t[i]), 0);
  }
  for (int i = 0; i < nthreads; i++) assert_int_equal(pthread_join(t[i].thread, NULL), 0);
  for (int i = 0; i < nthreads; i++) {
    if (t[i].status != PC_OK) fail_msg("thread %d: %s", i, t[i].err.text);
    assert_int_equal(t[i].got, per_thread);
    for (uint32_t k = 0; k < per_thread; k++) {
      assert_true(t[i].out[k] != 0);
      if (k > 0 && t[i].out[k] <= t[i].out[k - 1])
        fail_msg("thread %d: timestamp %u (%llu) not above the previous (%llu)", i, k,
                 (unsigned long long)t[i].out[k], (unsigned long long)t[i].out[k - 1]);
    }
  }
  free(t);
  assert_all_distinct(all, (size_t)nthreads * per_thread);
  return all;
}

/* ---- oracle -------------------------------------------------------------- */

static void test_concurrent_unique(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  pc_oracle_t *o = open_ok(t.path, 0);
  assert_int_equal(pc_oracle_last(o), 0);
  pc_ts_batcher_t *b = pc_ts_batcher_create(pc_oracle_fetch, o);
  assert_non_null(b);

  enum { THREADS = 8, PER_THREAD = 20000 };
  uint64_t *all = take_concurrently(b, THREADS, PER_THREAD);
  assert_true(pc_oracle_last(o) >= all[THREADS * PER_THREAD - 1]);
  free(all);

  pc_ts_batcher_destroy(b);
  pc_oracle_close(o);
  tmp_remove(&t);
}

static void test_next_reserves_ranges(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  uint64_t before_ms = pc_now_wall_ms();
  pc_oracle_t *o = open_ok(t.path, 0);

  uint64_t a = next_ok(o, 1);
  assert_true(PC_TS_PHYSICAL_MS(a) >= before_ms);
  assert_int_equal(pc_oracle_last(o), a);
  /* More timestamps than the logical counter holds in one millisecond: the
   * counter carries into the physical part and the order stays strict. */
  uint32_t big = 3u << PC_TS_LOGICAL_BITS;
  uint64_t r = next_ok(o, big);
  assert_true(r > a);
  assert_int_equal(pc_oracle_last(o), r + big - 1);
  uint64_t prev = r + big - 1;
  for (int i = 0; i < 10000; i++) {
    uint64_t x = next_ok(o, 1);
    assert_true(x > prev);
    prev = x;
  }
  /* The range ending above the in-memory window is persisted: a restart
   * starts above it. */
  pc_oracle_close(o);
  o = open_ok(t.path, 0);
  assert_true(next_ok(o, 1) > prev);

  pc_error_t err;
  uint64_t first = 0;
  assert_int_equal(pc_oracle_next(o, 0, &first, &err), PC_INVALID);
  assert_int_equal(err.code, PC_INVALID);
  assert_int_equal(pc_oracle_fetch(NULL, 1, 100, &first, &err), PC_INVALID);
  assert_int_equal(pc_oracle_fetch(o, 5, 100, &first, &err), PC_OK);
  assert_int_equal(pc_oracle_last(o), first + 4);
  pc_oracle_close(o);
  tmp_remove(&t);
}

static void test_restart_safety(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  uint64_t prev = 0;
  for (int round = 0; round < 5; round++) {
    pc_oracle_t *o = open_ok(t.path, round % 2 ? 50 : 0);
    pc_ts_batcher_t *b = pc_ts_batcher_create(pc_oracle_fetch, o);
    assert_non_null(b);
    for (int i = 0; i < 500; i++) {
      uint64_t x = 0;
      pc_error_t err;
      if (i % 2) {
        x = next_ok(o, 3);
      } else if (pc_ts_batcher_get(b, 10000, &x, &err) != PC_OK) {
        fail_msg("pc_ts_batcher_get: %s", err.text);
      }
      if (x <= prev)
        fail_msg("restart %d: %llu not above %llu", round, (unsigned long long)x,
                 (unsigned long long)prev);
      prev = x;
    }
    pc_ts_batcher_destroy(b);
    pc_oracle_close(o);
    /* A temp file left by a crash during a bound update is ignored. */
    char tmp_path[160];
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", t.path);
    write_file(tmp_path, "half-written", 12);
  }
  tmp_remove(&t);
}

/* The bound saved in the file at path. */
static uint64_t saved_bound(const char *path) {
  char buf[128];
  size_t n = read_file(path, buf, sizeof buf - 1);
  buf[n] = '\0';
  unsigned long long v = 0;
  if (sscanf(buf, "percolator-tso-bound v1 %llu", &v) != 1) fail_msg("bound file: %s", buf);
  return v;
}

static void sleep_ms(uint64_t ms) {
  struct timespec d = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
}

/* Callers do not wait for the bound's fsync: once less than half a window
 * is left, the next bound is persisted in the background, before any caller
 * reaches the old one. The test takes one timestamp in the second half of
 * the window and then none: only a background persist can move the file.
 * It does so twice: after one extension, the next caller in the second half
 * must ask for another (the oracle's 'extending' flag is cleared). */
static void test_bound_moves_ahead(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  const uint32_t window = 2000;
  pc_oracle_t *o = open_ok(t.path, window);
  for (int round = 0; round < 2; round++) {
    int moved = 0;
    for (int attempt = 0; attempt < 3 && !moved; attempt++) {
      uint64_t b0 = saved_bound(t.path);
      uint64_t trigger_ms = PC_TS_PHYSICAL_MS(b0) - window / 2 + 50;
      uint64_t now = pc_now_wall_ms();
      if (now < trigger_ms) sleep_ms(trigger_ms - now);
      uint64_t ts = next_ok(o, 1);
      if (ts >= b0) continue; /* this process slept past the bound: try again */
      for (int i = 0; i < 1000 && saved_bound(t.path) == b0; i++) sleep_ms(10);
      uint64_t b1 = saved_bound(t.path);
      assert_true(b1 > b0);
      assert_true(pc_oracle_last(o) < b0); /* nobody had reached the old bound */
      moved = 1;
    }
    assert_true(moved);
  }
  /* what was persisted holds across a restart */
  uint64_t last = pc_oracle_last(o);
  pc_oracle_close(o);
  o = open_ok(t.path, window);
  assert_true(next_ok(o, 1) > last);
  pc_oracle_close(o);
  tmp_remove(&t);
}

/* A bound saved far ahead of the clock (as after the clock stepped back) is
 * respected: the reopened oracle serves above it, not from the clock. */
static void test_clock_behind_saved_bound(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  const uint32_t hour_ms = 3600u * 1000u;
  uint64_t t0 = pc_now_wall_ms();
  pc_oracle_t *o = open_ok(t.path, hour_ms);
  uint64_t a = next_ok(o, 1);
  pc_oracle_close(o);

  o = open_ok(t.path, 10);
  uint64_t b = next_ok(o, 1);
  assert_true(b > a);
  assert_true(PC_TS_PHYSICAL_MS(b) >= t0 + hour_ms);
  uint64_t c = next_ok(o, 1);
  assert_true(c > b);
  pc_oracle_close(o);
  tmp_remove(&t);
}

static int write_u64(int fd, uint64_t v) {
  return write(fd, &v, sizeof v) == (ssize_t)sizeof v ? 0 : -1;
}

/* Reads 8-byte values from fd until EOF; returns how many, *last the last. */
static size_t drain_u64(int fd, uint64_t *last) {
  size_t n = 0;
  uint64_t v;
  for (;;) {
    size_t have = 0;
    while (have < sizeof v) {
      ssize_t r = read(fd, (char *)&v + have, sizeof v - have);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return n;
      have += (size_t)r;
    }
    *last = v;
    n++;
  }
}

/* The child takes timestamps, reports the last and _exit()s without closing
 * the oracle: the parent's reopened oracle serves above it. */
static void test_exit_mid_window(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    pc_error_t err;
    pc_oracle_t *o = pc_oracle_open(t.path, 60000, &err);
    if (!o) _exit(2);
    uint64_t first = 0, last = 0;
    for (uint32_t i = 0; i < 1000; i++) {
      uint32_t count = 1 + i % 7;
      if (pc_oracle_next(o, count, &first, &err) != PC_OK) _exit(3);
      if (first <= last) _exit(4);
      last = first + count - 1;
    }
    if (write_u64(fds[1], last) != 0) _exit(5);
    _exit(0);
  }
  close(fds[1]);
  uint64_t child_last = 0;
  assert_int_equal(drain_u64(fds[0], &child_last), 1);
  close(fds[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_true(child_last != 0);

  pc_oracle_t *o = open_ok(t.path, 0);
  assert_int_equal(pc_oracle_last(o), 0);
  uint64_t prev = child_last;
  for (int i = 0; i < 100; i++) {
    uint64_t x = next_ok(o, 1);
    assert_true(x > prev);
    prev = x;
  }
  pc_oracle_close(o);
  tmp_remove(&t);
}

/* The child streams timestamps through a batcher until SIGKILL stops it in the
 * middle of its window; every one it reported is below the parent's. */
static void test_sigkill_mid_window(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    pc_error_t err;
    pc_oracle_t *o = pc_oracle_open(t.path, 0, &err);
    if (!o) _exit(2);
    pc_ts_batcher_t *b = pc_ts_batcher_create(pc_oracle_fetch, o);
    if (!b) _exit(3);
    for (;;) {
      uint64_t x = 0;
      if (pc_ts_batcher_get(b, 10000, &x, &err) != PC_OK) _exit(4);
      if (write_u64(fds[1], x) != 0) _exit(5);
    }
  }
  close(fds[1]);
  uint64_t v = 0, last = 0;
  size_t got = 0;
  while (got < 2000) {
    ssize_t r = read(fds[0], &v, sizeof v);
    if (r < 0 && errno == EINTR) continue;
    assert_int_equal(r, (ssize_t)sizeof v); /* 8-byte pipe writes are atomic */
    assert_true(v > last);
    last = v;
    got++;
  }
  assert_int_equal(kill(pid, SIGKILL), 0);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  drain_u64(fds[0], &last);
  close(fds[0]);

  pc_oracle_t *o = open_ok(t.path, 0);
  uint64_t x = next_ok(o, 1);
  if (x <= last)
    fail_msg("after kill: %llu not above the child's %llu", (unsigned long long)x,
             (unsigned long long)last);
  pc_oracle_close(o);
  tmp_remove(&t);
}

static void expect_corrupt(const char *path) {
  pc_error_t err;
  pc_oracle_t *o = pc_oracle_open(path, 0, &err);
  if (o) fail_msg("opened a corrupt bound file %s", path);
  assert_int_equal(err.code, PC_CORRUPTION);
  if (!strstr(err.text, path)) fail_msg("error does not name %s: %s", path, err.text);
}

static void test_corrupt_bound_file(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);

  write_file(t.path, "garbage\n", 8);
  expect_corrupt(t.path);
  write_file(t.path, "", 0);
  expect_corrupt(t.path);
  char big[4096];
  memset(big, '7', sizeof big);
  write_file(t.path, big, sizeof big);
  expect_corrupt(t.path);

  /* A valid file with any one byte changed, or cut short, is detected. */
  unlink(t.path);
  pc_oracle_close(open_ok(t.path, 0));
  char good[256];
  size_t len = read_file(t.path, good, sizeof good);
  for (size_t i = 0; i < len; i++) {
    char bad[256];
    memcpy(bad, good, len);
    bad[i] = (char)(bad[i] == '1' ? '2' : '1');
    write_file(t.path, bad, len);
    expect_corrupt(t.path);
    write_file(t.path, good, i);
    expect_corrupt(t.path);
  }
  write_file(t.path, good, len);
  pc_oracle_close(open_ok(t.path, 0)); /* the original is still fine */
  tmp_remove(&t);
}

static void test_unwritable_bound_file(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  char path[200];
  snprintf(path, sizeof path, "%s/missing/tso.bound", t.dir);
  pc_error_t err;
  assert_null(pc_oracle_open(path, 0, &err));
  assert_int_equal(err.code, PC_IO_ERROR);
  assert_non_null(strstr(err.text, path));
  assert_null(pc_oracle_open("", 0, &err));
  assert_int_equal(err.code, PC_INVALID);
  assert_null(pc_oracle_open(NULL, 0, NULL));
  tmp_remove(&t);
}

/* ---- batcher with scripted fetch functions -------------------------------- */

struct script {
  pthread_mutex_t mu;
  pthread_cond_t cv;     /* signals entered and hold changes */
  uint32_t sleep_ms;     /* each fetch sleeps this long first */
  int hold;              /* while set, fetches wait (after counting themselves) */
  pc_status_t fail;      /* PC_OK: answer from next; else fail with this */
  uint64_t next;         /* the next timestamp to hand out */
  uint32_t calls;        /* fetches so far */
  uint32_t bad_args;     /* fetches asked for 0 timestamps or with timeout 0 */
  uint32_t max_count;    /* the largest count asked for */
  uint64_t asked;        /* timestamps asked for in all */
};

static void script_init(struct script *s, uint32_t sleep_ms, pc_status_t fail) {
  memset(s, 0, sizeof *s);
  assert_int_equal(pthread_mutex_init(&s->mu, NULL), 0);
  assert_int_equal(pthread_cond_init(&s->cv, NULL), 0);
  s->sleep_ms = sleep_ms;
  s->fail = fail;
  s->next = 1;
}

static void script_destroy(struct script *s) {
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
}

static void script_set_hold(struct script *s, int hold) {
  pthread_mutex_lock(&s->mu);
  s->hold = hold;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Waits until calls fetches have started. */
static void script_wait_calls(struct script *s, uint32_t calls) {
  pthread_mutex_lock(&s->mu);
  while (s->calls < calls) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static pc_status_t script_fetch(void *ctx, uint32_t count, uint32_t timeout_ms,
                                uint64_t *first, pc_error_t *err) {
  struct script *s = ctx;
  pthread_mutex_lock(&s->mu);
  s->calls++;
  if (count == 0 || timeout_ms == 0) s->bad_args++;
  if (count > s->max_count) s->max_count = count;
  s->asked += count;
  pthread_cond_broadcast(&s->cv);
  while (s->hold) pthread_cond_wait(&s->cv, &s->mu);
  uint32_t sleep_ms = s->sleep_ms;
  pc_status_t fail = s->fail;
  pthread_mutex_unlock(&s->mu);

  if (sleep_ms) pc_sleep_ms(sleep_ms);
  if (fail != PC_OK) return pc_error_set(err, fail, "scripted oracle is down (%u)", count);
  pthread_mutex_lock(&s->mu);
  *first = s->next;
  s->next += count;
  pthread_mutex_unlock(&s->mu);
  return PC_OK;
}

/* One caller that takes one timestamp on its own thread. */
static void taker_start(struct taker *t, pc_ts_batcher_t *b, uint32_t timeout_ms, uint64_t *out) {
  memset(t, 0, sizeof *t);
  t->batcher = b;
  t->per_thread = 1;
  t->timeout_ms = timeout_ms;
  t->out = out;
  assert_int_equal(pthread_create(&t->thread, NULL, taker_main, t), 0);
}

static void test_fetch_error_reaches_every_waiter(void **state) {
  (void)state;
  struct script s;
  script_init(&s, 20, PC_UNAVAILABLE);
  pc_ts_batcher_t *b = pc_ts_batcher_create(script_fetch, &s);
  assert_non_null(b);

  /* The first fetch is held until the other callers have queued behind it. */
  enum { THREADS = 12 };
  struct taker t[THREADS];
  uint64_t out[THREADS];
  s.hold = 1;
  taker_start(&t[0], b, 30000, &out[0]);
  script_wait_calls(&s, 1);
  for (int i = 1; i < THREADS; i++) taker_start(&t[i], b, 30000, &out[i]);
  pc_sleep_ms(30); /* correctness does not depend on this */
  script_set_hold(&s, 0);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i].thread, NULL), 0);
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(t[i].status, PC_UNAVAILABLE);
    assert_int_equal(t[i].err.code, PC_UNAVAILABLE);
    assert_non_null(strstr(t[i].err.text, "scripted oracle is down"));
    assert_int_equal(t[i].got, 0);
  }
  pthread_mutex_lock(&s.mu);
  assert_true(s.calls >= 1);
  assert_int_equal(s.bad_args, 0);
  assert_int_equal(s.asked, THREADS); /* every caller was in exactly one round */
  pthread_mutex_unlock(&s.mu);

  /* The oracle recovers: the batcher works again. */
  pthread_mutex_lock(&s.mu);
  s.fail = PC_OK;
  s.sleep_ms = 0;
  pthread_mutex_unlock(&s.mu);
  uint64_t x = 0;
  pc_error_t err;
  assert_int_equal(pc_ts_batcher_get(b, 10000, &x, &err), PC_OK);
  assert_true(x >= 1);

  pc_ts_batcher_destroy(b);
  script_destroy(&s);
}

/* A fetch slower than the caller's timeout: the caller that fetches itself
 * reports PC_TIMEOUT once the fetch returns. */
static void test_fetch_slower_than_timeout(void **state) {
  (void)state;
  struct script s;
  script_init(&s, 300, PC_OK);
  pc_ts_batcher_t *b = pc_ts_batcher_create(script_fetch, &s);
  assert_non_null(b);

  pc_error_t err;
  uint64_t x = 0;
  assert_int_equal(pc_ts_batcher_get(b, 30, &x, &err), PC_TIMEOUT);
  assert_int_equal(err.code, PC_TIMEOUT);
  assert_string_equal(err.text, "timestamp oracle did not answer within 30 ms");

  /* Many callers, all with a timeout shorter than the fetch: all time out. */
  enum { THREADS = 6 };
  struct taker t[THREADS];
  uint64_t out[THREADS];
  for (int i = 0; i < THREADS; i++) taker_start(&t[i], b, 20, &out[i]);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i].thread, NULL), 0);
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(t[i].status, PC_TIMEOUT);
    assert_string_equal(t[i].err.text, "timestamp oracle did not answer within 20 ms");
  }

  /* A caller that allows enough time is served. */
  assert_int_equal(pc_ts_batcher_get(b, 30000, &x, &err), PC_OK);
  assert_true(x >= 1);
  pc_ts_batcher_destroy(b);
  script_destroy(&s);
}

/* A caller waiting behind a fetch that does not return gets PC_TIMEOUT on
 * time, and leaves its round: the next fetch does not count it. */
static void test_waiter_times_out_behind_hung_fetch(void **state) {
  (void)state;
  struct script s;
  script_init(&s, 0, PC_OK);
  s.hold = 1;
  pc_ts_batcher_t *b = pc_ts_batcher_create(script_fetch, &s);
  assert_non_null(b);

  struct taker leader;
  uint64_t leader_ts = 0;
  taker_start(&leader, b, 60000, &leader_ts);
  script_wait_calls(&s, 1); /* its fetch is in flight and held */

  pc_error_t err;
  uint64_t x = 0;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(pc_ts_batcher_get(b, 20, &x, &err), PC_TIMEOUT);
    assert_string_equal(err.text, "timestamp oracle did not answer within 20 ms");
  }
  assert_int_equal(pc_ts_batcher_get(b, 0, &x, &err), PC_TIMEOUT);

  script_set_hold(&s, 0);
  assert_int_equal(pthread_join(leader.thread, NULL), 0);
  assert_int_equal(leader.status, PC_OK);
  assert_int_equal(leader_ts, 1);

  assert_int_equal(pc_ts_batcher_get(b, 10000, &x, &err), PC_OK);
  assert_int_equal(x, 2);
  pthread_mutex_lock(&s.mu);
  assert_int_equal(s.calls, 2);
  assert_int_equal(s.asked, 2); /* the callers that timed out were not fetched for */
  assert_int_equal(s.bad_args, 0);
  pthread_mutex_unlock(&s.mu);
  pc_ts_batcher_destroy(b);
  script_destroy(&s);
}

/* Callers that arrive while a fetch is in flight share the next fetch. */
static void test_waiters_share_one_fetch(void **state) {
  (void)state;
  struct script s;
  script_init(&s, 0, PC_OK);
  s.hold = 1;
  pc_ts_batcher_t *b = pc_ts_batcher_create(script_fetch, &s);
  assert_non_null(b);

  struct taker first;
  uint64_t first_ts = 0;
  taker_start(&first, b, 60000, &first_ts);
  script_wait_calls(&s, 1);

  enum { THREADS = 10 };
  struct taker t[THREADS];
  uint64_t out[THREADS];
  for (int i = 0; i < THREADS; i++) taker_start(&t[i], b, 60000, &out[i]);
  /* Give them time to queue up; correctness does not depend on it. */
  pc_sleep_ms(50);
  script_set_hold(&s, 0);
  assert_int_equal(pthread_join(first.thread, NULL), 0);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i].thread, NULL), 0);
  assert_int_equal(first.status, PC_OK);
  assert_int_equal(first_ts, 1);
  for (int i = 0; i < THREADS; i++) assert_int_equal(t[i].status, PC_OK);
  assert_all_distinct(out, THREADS);
  assert_true(out[0] >= 2);
  assert_int_equal(out[THREADS - 1], 1 + THREADS);
  pthread_mutex_lock(&s.mu);
  assert_int_equal(s.asked, 1 + THREADS);
  assert_true(s.calls >= 2 && s.calls <= 1 + THREADS);
  print_message("%u waiters were served by %u fetch(es)\n", (unsigned)THREADS, s.calls - 1);
  pthread_mutex_unlock(&s.mu);
  pc_ts_batcher_destroy(b);
  script_destroy(&s);
}

static void test_batching_batches(void **state) {
  (void)state;
  struct script s;
  script_init(&s, 3, PC_OK);
  pc_ts_batcher_t *b = pc_ts_batcher_create(script_fetch, &s);
  assert_non_null(b);

  enum { THREADS = 16, PER_THREAD = 200 };
  uint64_t *all = take_concurrently(b, THREADS, PER_THREAD);
  free(all);
  pc_ts_batcher_destroy(b);

  assert_int_equal(s.bad_args, 0);
  assert_true(s.calls >= 1);
  assert_true(s.calls < THREADS * PER_THREAD);
  assert_true(s.max_count > 1);
  assert_true(s.max_count <= THREADS);
  /* Each fetch asked for exactly its waiters: nobody timed out, so every
   * timestamp asked for was handed out. */
  assert_int_equal(s.asked, THREADS * PER_THREAD);
  print_message("batching: %u fetches for %u timestamps (largest batch %u)\n", s.calls,
                (unsigned)(THREADS * PER_THREAD), s.max_count);
  script_destroy(&s);
}

static void test_batcher_arguments(void **state) {
  (void)state;
  assert_null(pc_ts_batcher_create(NULL, NULL));
  pc_ts_batcher_destroy(NULL);
  pc_oracle_close(NULL);
  assert_int_equal(pc_oracle_last(NULL), 0);
  struct script s;
  script_init(&s, 0, PC_OK);
  pc_ts_batcher_t *b = pc_ts_batcher_create(script_fetch, &s);
  assert_non_null(b);
  pc_error_t err;
  assert_int_equal(pc_ts_batcher_get(b, 1000, NULL, &err), PC_INVALID);
  uint64_t prev = 0;
  for (int i = 0; i < 100; i++) {
    uint64_t x = 0;
    assert_int_equal(pc_ts_batcher_get(b, 10000, &x, NULL), PC_OK);
    assert_true(x > prev);
    prev = x;
  }
  pc_ts_batcher_destroy(b);
  script_destroy(&s);
}

/* One oracle per bound file: a second open, here or in another process,
 * would serve the same timestamps; it is refused until the first closes. */
static void test_bound_file_is_exclusive(void **state) {
  (void)state;
  struct tmp t;
  tmp_make(&t);
  pc_error_t err;
  pc_oracle_t *a = pc_oracle_open(t.path, 0, &err);
  assert_non_null(a);
  assert_null(pc_oracle_open(t.path, 0, &err));
  assert_int_equal(err.code, PC_BUSY);
  assert_non_null(strstr(err.text, t.path));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* another process is refused as well */
    pc_error_t e;
    pc_oracle_t *o = pc_oracle_open(t.path, 0, &e);
    _exit(o == NULL && e.code == PC_BUSY ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  uint64_t last = 0;
  assert_int_equal(pc_oracle_next(a, 1, &last, &err), PC_OK);
  pc_oracle_close(a);
  pc_oracle_t *b = pc_oracle_open(t.path, 0, &err); /* free again */
  assert_non_null(b);
  uint64_t next = 0;
  assert_int_equal(pc_oracle_next(b, 1, &next, &err), PC_OK);
  assert_true(next > last);
  pc_oracle_close(b);
  tmp_remove(&t);
}

/* The served oracle's record of its clients' snapshot floors
 * (tso/snapshots.h): the oldest floor of the live clients; a client that
 * leaves goes at once, one whose connection closes after the grace; an
 * oracle is complete once it has been up for the grace; the caps. */
static void test_snapshot_floors(void **state) {
  (void)state;
  pc_error_t err;
  uint64_t oldest;
  int complete;
  uint32_t n;
  pc_snapshots_t *s = pc_snapshots_create(60000); /* a grace no test outlives */
  assert_non_null(s);
  pc_snapshots_oldest(s, &oldest, &complete, &n);
  assert_int_equal(oldest, UINT64_MAX);
  assert_int_equal(complete, 0); /* just started: it may not have heard from every client */
  assert_int_equal(n, 0);
  assert_int_equal(pc_snapshots_report(s, 1, 101, 500, &err), PC_OK);
  assert_int_equal(pc_snapshots_report(s, 2, 102, 300, &err), PC_OK);
  assert_int_equal(pc_snapshots_report(s, 3, 103, 900, &err), PC_OK);
  pc_snapshots_oldest(s, &oldest, &complete, &n);
  assert_int_equal(oldest, 300);
  assert_int_equal(n, 3);
  assert_int_equal(pc_snapshots_report(s, 2, 102, 700, &err), PC_OK); /* its next report */
  pc_snapshots_oldest(s, &oldest, &complete, &n);
  assert_int_equal(oldest, 500);
  assert_int_equal(pc_snapshots_report(s, 1, 101, 0, &err), PC_OK); /* leaves */
  pc_snapshots_oldest(s, &oldest, &complete, &n);
  assert_int_equal(oldest, 700);
  assert_int_equal(n, 2);
  pc_snapshots_closed(s, 2); /* its floor holds for the grace: it may reconnect */
  pc_snapshots_oldest(s, &oldest, &complete, &n);
  assert_int_equal(oldest, 700);
  assert_int_equal(pc_snapshots_report(s, 4, 102, 800, &err), PC_OK); /* reconnected */
  pc_snapshots_closed(s, 2);
  pc_snapshots_oldest(s, &oldest, &complete, &n);
  assert_int_equal(oldest, 800);
  assert_int_equal(n, 2);
  /* one connection holds at most PC_SNAPSHOTS_PER_CONNECTION clients */
  for (uint64_t c = 0; c < PC_SNAPSHOTS_PER_CONNECTION; c++)
    assert_int_equal(pc_snapshots_report(s, 9, 1000 + c, 2000, &err), PC_OK);
  assert_int_equal(pc_snapshots_report(s, 9, 5000, 2000, &err), PC_BUSY);
  assert_non_null(strstr(err.text, "per connection"));
  pc_snapshots_destroy(s);

  s = pc_snapshots_create(20); /* a grace of 20 ms */
  assert_int_equal(pc_snapshots_report(s, 1, 101, 500, &err), PC_OK);
  assert_int_equal(pc_snapshots_report(s, 2, 102, 300, &err), PC_OK);
  pc_snapshots_closed(s, 2);
  struct timespec d = {0, 100 * 1000000L};
  nanosleep(&d, NULL);
  pc_snapshots_oldest(s, &oldest, &complete, &n);
  assert_int_equal(oldest, 500); /* the closed connection's client is gone */
  assert_int_equal(n, 1);
  assert_int_equal(complete, 1);
  pc_snapshots_destroy(s);
}

/* The served oracle's handler: REPORT on the request's connection, OLDEST,
 * and bodies that are not theirs. */
static void test_snapshot_ops(void **state) {
  (void)state;
  char dir[] = "/tmp/pc-oracle-served-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/oracle", dir);
  pc_error_t err;
  pc_oracle_t *o = pc_oracle_open(path, 3000, &err);
  assert_non_null(o);
  pc_tso_served_t sv = {o, pc_snapshots_create(0)};
  pc_buf_t body = {0}, reply = {0};
  assert_int_equal(pc_tso_put_report(&body, 7, 1234), 0);
  uint64_t first, last;
  assert_int_equal(pc_oracle_next(o, 1, &first, &err), PC_OK);
  assert_int_equal(pc_tso_served_handler(&sv, PC_TSO_OP_REPORT, body.p, body.len, &reply, &err),
                   PC_OK);
  /* the reply is the oracle's last timestamp: the client's next floor at most */
  assert_int_equal(pc_tso_get_reply(reply.p, reply.len, &last, &err), PC_OK);
  assert_int_equal(last, first);
  reply.len = 0;
  assert_int_equal(pc_tso_served_handler(&sv, PC_TSO_OP_OLDEST, NULL, 0, &reply, &err), PC_OK);
  pc_tso_oldest_t old;
  assert_int_equal(pc_tso_get_oldest_reply(reply.p, reply.len, &old, &err), PC_OK);
  assert_int_equal(old.oldest, 1234);
  assert_int_equal(old.complete, 1);
  assert_int_equal(old.clients, 1);
  reply.len = 0;
  assert_int_equal(pc_tso_served_handler(&sv, PC_TSO_OP_REPORT, body.p, 9, &reply, &err),
                   PC_INVALID);
  body.len = 0;
  assert_int_equal(pc_tso_put_report(&body, 0, 1), 0); /* client 0 is no client */
  assert_int_equal(pc_tso_served_handler(&sv, PC_TSO_OP_REPORT, body.p, body.len, &reply, &err),
                   PC_INVALID);
  assert_int_equal(pc_tso_served_handler(&sv, PC_TSO_OP_OLDEST, "x", 1, &reply, &err), PC_INVALID);
  /* the oracle's own ops still answer */
  body.len = 0;
  assert_int_equal(pc_tso_put_timestamps(&body, 1), 0);
  assert_int_equal(pc_tso_served_handler(&sv, PC_TSO_OP_TIMESTAMPS, body.p, body.len, &reply, &err),
                   PC_OK);
  assert_true(pc_tso_rpc_runs_inline(PC_TSO_OP_REPORT) && pc_tso_rpc_runs_inline(PC_TSO_OP_OLDEST));
  pc_buf_free(&body);
  pc_buf_free(&reply);
  pc_snapshots_destroy(sv.snapshots);
  pc_oracle_close(o);
  unlink(path);
  char lock[300];
  snprintf(lock, sizeof lock, "%s/oracle.lock", dir);
  unlink(lock);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concurrent_unique),
      cmocka_unit_test(test_next_reserves_ranges),
      cmocka_unit_test(test_restart_safety),
      cmocka_unit_test(test_clock_behind_saved_bound),
      cmocka_unit_test(test_bound_moves_ahead),
      cmocka_unit_test(test_exit_mid_window),
      cmocka_unit_test(test_sigkill_mid_window),
      cmocka_unit_test(test_corrupt_bound_file),
      cmocka_unit_test(test_unwritable_bound_file),
      cmocka_unit_test(test_fetch_error_reaches_every_waiter),
      cmocka_unit_test(test_fetch_slower_than_timeout),
      cmocka_unit_test(test_waiter_times_out_behind_hung_fetch),
      cmocka_unit_test(test_waiters_share_one_fetch),
      cmocka_unit_test(test_batching_batches),
      cmocka_unit_test(test_batcher_arguments),
      cmocka_unit_test(test_bound_file_is_exclusive),
      cmocka_unit_test(test_snapshot_floors),
      cmocka_unit_test(test_snapshot_ops),
  };
  /* PC_TEST_FILTER=test_name (wildcards * and ?) runs a subset. */
  const char *filter = getenv("PC_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
