/* test_worker.c — the notification engine (notify/worker.h) end to end:
 * observers registered in-process in a registry, workers running them on a
 * real database (embedded, or with PERCOLATOR_TEST_CLUSTER a cluster of
 * daemons), and what the engine promises:
 *   - a chain of observers converges, and pc_notify_wait returns only once
 *     every link has run (it times out while work remains);
 *   - strong observers run at most once per change and see the latest value,
 *     with two workers (two clients in a cluster) and writers hammering hot
 *     cells;
 *   - data derived by observers is exact after random updates and deletes;
 *   - a writer that vanished just after its commit point: the sweeper rolls
 *     its secondaries forward, their notifications appear and are observed;
 *   - weak notifications coalesce, and one that arrives while its observer
 *     runs makes it run again;
 *   - an observer that always fails is parked with its error, listed, and
 *     run again by pc_worker_retry_failures (strong and weak), alone: the
 *     other observers of its column do not run again;
 *   - while an observer of a cell waits out its backoff, the healthy ones
 *     run once per change.
 * No assertion is on elapsed time; every wait is a bounded poll. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/db.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "notify/worker.h"
#include "observers/registry.h"
#include "tests/testutil.h"

/* Under ThreadSanitizer: LevelDB comes from the system, uninstrumented, so
 * TSan cannot see the atomics with which its memtable publishes entries to
 * concurrent readers and reports every read of a fresh entry as a race
 * inside libleveldb. Those reports are suppressed; races in this project's
 * own code are still reported. */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "race:libleveldb.so\n"; }
#endif

#define WAIT_MS 60000u /* bound on every wait for the workers */

/* ---- small helpers ---------------------------------------------------------- */

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static pc_txn_t *begin(pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("pc_txn_begin: %s", err.text);
  return t;
}

static uint64_t commit(pc_txn_t *t) {
  pc_error_t err;
  pc_status_t st = pc_txn_commit(t, &err);
  if (st != PC_OK) fail_msg("commit: %s (%s)", pc_status_name(st), err.text);
  uint64_t cts = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  return cts;
}

/* One transaction setting (table, row, col) = val; returns its commit_ts. */
static uint64_t put(pc_db_t *db, const char *table, const char *row, const char *col,
                    const char *val) {
  pc_txn_t *t = begin(db);
  tu_set(t, table, row, col, val);
  return commit(t);
}

/* The committed value (malloc'd, NUL-terminated) or NULL. */
static char *get(pc_db_t *db, const char *table, const char *row, const char *col) {
  pc_txn_t *t = begin(db);
  char *v = tu_get(t, table, row, col);
  pc_txn_destroy(t);
  return v;
}

static uint64_t notify_weak(pc_db_t *db, const char *table, const char *row, const char *col) {
  pc_txn_t *t = begin(db);
  pc_error_t err;
  if (pc_txn_notify_weak(t, table, row, strlen(row), col, strlen(col), &err) != PC_OK)
    fail_msg("pc_txn_notify_weak: %s", err.text);
  return commit(t);
}

/* An observer's read: PC_OK with *out malloc'd (NUL-terminated), PC_NOT_FOUND
 * with *out NULL, or the error. */
static pc_status_t oget(pc_txn_t *t, const char *table, const char *row, size_t rlen,
                        const char *col, char **out, pc_error_t *err) {
  char *v = NULL;
  size_t n = 0;
  *out = NULL;
  pc_status_t st = pc_txn_get(t, table, row, rlen, col, strlen(col), &v, &n, err);
  if (st != PC_OK) return st;
  char *s = malloc(n + 1);
  if (!s) abort();
  memcpy(s, v, n);
  s[n] = '\0';
  pc_free(v);
  *out = s;
  return PC_OK;
}

static pc_status_t oset(pc_txn_t *t, const char *table, const char *row, size_t rlen,
                        const char *col, const char *val, pc_error_t *err) {
  return pc_txn_set(t, table, row, rlen, col, strlen(col), val, strlen(val), err);
}

static void add_observer(pc_observer_registry_t *reg, const char *name, const char *table,
                         const char *col, pc_observer_kind_t kind, pc_observe_fn fn, void *state) {
  pc_observer_def_t d = {.name = name, .table = table, .column = col, .column_len = strlen(col),
                         .kind = kind, .observe = fn, .state = state};
  pc_error_t err;
  if (pc_registry_add(reg, &d, NULL, "test", &err) != PC_OK)
    fail_msg("pc_registry_add %s: %s", name, err.text);
}

static pc_worker_options_t quick_options(uint32_t threads) {
  pc_worker_options_t o;
  pc_worker_options_default(&o);
  o.threads = threads;
  o.idle_ms = 5;
  o.backoff_ms = 5;
  o.sweep_ms = 50;
  return o;
}

typedef struct unready {
  const pc_observer_registry_t *reg;
  int n;
} unready_t;

static int count_unready(void *ctx, const pc_observer_info_t *o) {
  unready_t *u = ctx;
  char name[PC_MAX_OBSERVER_NAME + 1];
  snprintf(name, sizeof name, "%.*s", (int)o->name_len, o->name);
  if (!o->problem && o->state != PC_BACKFILL_DONE && pc_registry_find(u->reg, name)) u->n++;
  return 0;
}

/* The workers this process's tests started and have not stopped. A test that
 * fails leaves its workers running; the teardown stops them, so that they
 * neither write into the next test's cells nor hold a lock when the next
 * test forks (the child would inherit it taken and hang). */
static pc_worker_t *live[8];

static pc_worker_t *track(pc_worker_t *w) {
  for (size_t i = 0; w && i < sizeof live / sizeof live[0]; i++)
    if (!live[i]) {
      live[i] = w;
      return w;
    }
  if (w) fail_msg("more than %zu workers at once: raise live[]", sizeof live / sizeof live[0]);
  return w;
}

/* pc_worker_stop, for a worker track() knows. */
static void stop(pc_worker_t *w) {
  for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
    if (live[i] == w) live[i] = NULL;
  pc_worker_stop(w);
}

/* Every test's teardown: stops what a failed test left running. A worker
 * whose observer never returns cannot be stopped; the remaining tests would
 * then hang until ctest's timeout, so the process ends here, failed. */
static int stop_leftovers(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof live / sizeof live[0]; i++) {
    if (!live[i]) continue;
    pc_error_t err;
    if (pc_worker_stop_within(live[i], 10000, &err) != PC_OK) {
      fprintf(stderr, "test_worker: a worker left by a failed test does not stop: %s\n",
              err.text);
      _exit(1);
    }
    live[i] = NULL;
  }
  return 0;
}

/* Starts a worker, and returns once the registrations of its observers are
 * ready: their backfills (of whatever the test wrote before) are done, so
 * that what the test writes next is observed through its own
 * notifications alone. */
static pc_worker_t *start(pc_db_t *db, pc_observer_registry_t *reg, const pc_worker_options_t *o) {
  pc_error_t err;
  pc_worker_t *w = track(pc_worker_start(db, reg, o, &err));
  if (!w) fail_msg("pc_worker_start: %s", err.text);
  unready_t u = {reg, 1};
  for (int i = 0; i < 60000 && u.n; i++) {
    u.n = 0;
    if (pc_db_observers(db, count_unready, &u, &err) != PC_OK) fail_msg("observers: %s", err.text);
    if (u.n) {
      struct timespec d = {0, 1000000};
      nanosleep(&d, NULL);
    }
  }
  if (u.n) fail_msg("the worker's observers are not ready after 60 s");
  return w;
}

static void wait_idle(pc_db_t *db) {
  pc_error_t err;
  pc_status_t st = pc_notify_wait(db, WAIT_MS, &err);
  if (st != PC_OK) fail_msg("pc_notify_wait: %s (%s)", pc_status_name(st), err.text);
}

static uint64_t pending(pc_db_t *db) {
  uint64_t n;
  pc_error_t err;
  if (pc_notify_pending(db, &n, NULL, NULL, &err) != PC_OK)
    fail_msg("pc_notify_pending: %s", err.text);
  return n;
}

/* The counters of observer name. */
static pc_observer_stats_t stats_of(pc_worker_t *w, const char *name) {
  pc_worker_stats_t s;
  pc_error_t err;
  if (pc_worker_stats(w, &s, &err) != PC_OK) fail_msg("pc_worker_stats: %s", err.text);
  pc_observer_stats_t out;
  memset(&out, 0, sizeof out);
  int found = 0;
  for (size_t i = 0; i < s.nobservers; i++)
    if (strcmp(s.observers[i].name, name) == 0) {
      out = s.observers[i];
      found = 1;
    }
  pc_free(s.observers);
  if (!found) fail_msg("no stats for observer %s", name);
  return out;
}

/* The observer's stats once its runs reach want (for up to 10 s). A run is
 * counted when its commit returns, and the commit may have deleted its
 * notification already (its transaction was begun for the cell): right after wait_idle the
 * count can trail the committed runs by the ones still returning. */
static pc_observer_stats_t runs_of(pc_worker_t *w, const char *name, uint64_t want) {
  pc_observer_stats_t s = stats_of(w, name);
  for (int i = 0; i < 10000 && s.runs < want; i++) {
    sleep_ms(1);
    s = stats_of(w, name);
  }
  return s;
}

static void register_observed(pc_db_t *db, const char *name, const char *table, const char *col,
                              int kind) {
  pc_error_t err;
  if (pc_db_register_observed(db, name, table, col, strlen(col), kind, &err) != PC_OK)
    fail_msg("pc_db_register_observed %s: %s", name, err.text);
}

static int present_none(void *ctx, const pc_observer_info_t *o, const char *row, size_t rlen,
                        uint64_t since) {
  (void)ctx, (void)o, (void)row, (void)rlen, (void)since;
  fail_msg("a backfill presented a cell of an empty column");
  return 1;
}

/* Runs the backfill of observer name, whose column is empty, to its end. */
static void backfill_done(pc_db_t *db, const char *name) {
  int done = 0;
  for (int i = 0; i < 10000 && !done; i++) {
    pc_error_t err;
    pc_status_t st = pc_db_backfill_step(db, name, present_none, NULL, &done, &err);
    if (st != PC_OK && st != PC_CONFLICT) fail_msg("backfill of %s: %s", name, err.text);
  }
  if (!done) fail_msg("the backfill of %s did not end", name);
}

/* Records the first failure an observer thread meets (checked by the test thread). */
typedef struct problems {
  atomic_int n;
  pthread_mutex_t mu;
  char first[256];
} problems_t;

static void problem(problems_t *p, const char *fmt, ...) {
  if (atomic_fetch_add(&p->n, 1) != 0) return;
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&p->mu);
  vsnprintf(p->first, sizeof p->first, fmt, ap);
  pthread_mutex_unlock(&p->mu);
  va_end(ap);
}

static void no_problems(problems_t *p) {
  if (atomic_load(&p->n)) {
    pthread_mutex_lock(&p->mu);
    fail_msg("%d problem(s), the first: %s", atomic_load(&p->n), p->first);
  }
}

/* ---- 1. a chain of observers converges; wait waits for all of it ------------ */

#define NDOCS 20

/* A: docs/raw:text -> norm:text, lower-cased and trimmed (written on change only). */
static pc_status_t obs_normalize(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                                 pc_error_t *err) {
  char *raw, *old;
  pc_status_t st = oget(t, c->table, c->row, c->row_len, "raw:text", &raw, err);
  if (st == PC_NOT_FOUND) return PC_OK;
  if (st != PC_OK) return st;
  char *b = raw, *e = raw + strlen(raw);
  while (*b == ' ') b++;
  while (e > b && e[-1] == ' ') e--;
  *e = '\0';
  for (char *p = b; *p; p++)
    if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
  st = oget(t, c->table, c->row, c->row_len, "norm:text", &old, err);
  if (st == PC_OK || st == PC_NOT_FOUND) {
    if (!old || strcmp(old, b) != 0) st = oset(t, c->table, c->row, c->row_len, "norm:text", b, err);
    else st = PC_OK;
  }
  free(old);
  free(raw);
  return st;
}

/* B: docs/norm:text -> stats/<row> count:words (the number of words). */
static pc_status_t obs_count(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                             pc_error_t *err) {
  char *norm;
  pc_status_t st = oget(t, c->table, c->row, c->row_len, "norm:text", &norm, err);
  if (st == PC_NOT_FOUND) return PC_OK;
  if (st != PC_OK) return st;
  int words = 0, in = 0;
  for (char *p = norm; *p; p++) {
    if (*p != ' ' && !in) words++;
    in = *p != ' ';
  }
  free(norm);
  sleep_ms(1); /* a link that takes a little while */
  char v[16];
  snprintf(v, sizeof v, "%d", words);
  return oset(t, "stats", c->row, c->row_len, "count:words", v, err);
}

/* C: stats/count:words -> sizes/<row> class:size ("short" below 4 words). */
static pc_status_t obs_classify(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                                pc_error_t *err) {
  char *n;
  pc_status_t st = oget(t, c->table, c->row, c->row_len, "count:words", &n, err);
  if (st == PC_NOT_FOUND) return PC_OK;
  if (st != PC_OK) return st;
  int words = atoi(n);
  free(n);
  return oset(t, "sizes", c->row, c->row_len, "class:size", words < 4 ? "short" : "long", err);
}

typedef struct per_column {
  uint64_t raw, other;
} per_column_t;

static int count_column(void *ctx, const char *table, const char *col, size_t clen,
                        uint64_t count) {
  per_column_t *p = ctx;
  if (strcmp(table, "docs") == 0 && clen == 8 && memcmp(col, "raw:text", 8) == 0) p->raw += count;
  else p->other += count;
  return 0;
}

static void test_chain_converges(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-chain");
  pc_db_t *db = tu_open(dir, 0);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "normalize", "docs", "raw:text", PC_OBSERVER_STRONG, obs_normalize, NULL);
  add_observer(reg, "count", "docs", "norm:text", PC_OBSERVER_STRONG, obs_count, NULL);
  add_observer(reg, "classify", "stats", "count:words", PC_OBSERVER_STRONG, obs_classify, NULL);
  /* recorded first, so that the writes below are notified before any worker runs */
  register_observed(db, "normalize", "docs", "raw:text", PC_OBSERVER_STRONG);
  register_observed(db, "count", "docs", "norm:text", PC_OBSERVER_STRONG);
  register_observed(db, "classify", "stats", "count:words", PC_OBSERVER_STRONG);

  /* with nothing to do, a worker takes no claim: it looks for a notification first */
  pc_worker_options_t idle = quick_options(4);
  pc_worker_t *w0 = start(db, reg, &idle);
  pc_sleep_ms(200); /* rounds come every idle_ms: several have passed */
  pc_worker_stats_t ws0;
  pc_error_t err0;
  assert_int_equal(pc_worker_stats(w0, &ws0, &err0), PC_OK);
  assert_int_equal(ws0.claims_taken, 0);
  pc_free(ws0.observers);
  stop(w0);
  for (int i = 0; i < NDOCS; i++) {
    char row[16], text[128] = "  ";
    snprintf(row, sizeof row, "doc%02d", i);
    for (int k = 0; k <= i % 7; k++) strcat(text, k % 2 ? "Word " : "WORD ");
    put(db, "docs", row, "raw:text", text);
  }
  /* nothing has run: every change is pending, and wait says so */
  per_column_t pc = {0, 0};
  uint64_t total;
  pc_error_t err;
  assert_int_equal(pc_notify_pending(db, &total, count_column, &pc, &err), PC_OK);
  assert_int_equal(total, NDOCS);
  assert_int_equal(pc.raw, NDOCS);
  assert_int_equal(pc.other, 0);
  pc_status_t st = pc_notify_wait(db, 2000, &err); /* long enough for a whole check */
  assert_int_equal(st, PC_TIMEOUT);
  assert_non_null(strstr(err.text, "notification"));
  assert_null(get(db, "sizes", "doc00", "class:size"));

  pc_worker_options_t o = quick_options(4);
  pc_worker_t *w = start(db, reg, &o);
  wait_idle(db);
  assert_int_equal(pending(db), 0);
  for (int i = 0; i < NDOCS; i++) {
    char row[16], want_norm[128] = "";
    snprintf(row, sizeof row, "doc%02d", i);
    int words = i % 7 + 1;
    for (int k = 0; k < words; k++) strcat(want_norm, k ? " word" : "word");
    char *norm = get(db, "docs", row, "norm:text"), *count = get(db, "stats", row, "count:words"),
         *cls = get(db, "sizes", row, "class:size");
    if (!norm || strcmp(norm, want_norm) != 0) fail_msg("%s norm:text = '%s'", row, norm);
    if (!count || atoi(count) != words) fail_msg("%s count:words = '%s'", row, count);
    if (!cls || strcmp(cls, words < 4 ? "short" : "long") != 0)
      fail_msg("%s class:size = '%s'", row, cls);
    free(norm);
    free(count);
    free(cls);
  }
  /* each change was observed once */
  const char *names[] = {"normalize", "count", "classify"};
  for (int i = 0; i < 3; i++) {
    pc_observer_stats_t s = runs_of(w, names[i], NDOCS);
    if (s.runs != NDOCS || s.failures != 0 || s.parked != 0)
      fail_msg("%s: runs %" PRIu64 " failures %" PRIu64 " parked %" PRIu64, names[i], s.runs,
               s.failures, s.parked);
  }
  pc_worker_stats_t ws;
  assert_int_equal(pc_worker_stats(w, &ws, &err), PC_OK);
  assert_int_equal(ws.latency_count, 3 * NDOCS);
  assert_int_equal(ws.latency_le[12], 3 * NDOCS); /* +Inf holds every run */
  for (int i = 1; i < 13; i++) assert_true(ws.latency_le[i] >= ws.latency_le[i - 1]);
  assert_true(ws.notifications_seen >= 3 * NDOCS);
  assert_true(ws.claims_taken > 0);
  pc_free(ws.observers);
  /* a change later runs the chain again */
  put(db, "docs", "doc00", "raw:text", "one two three four five");
  wait_idle(db);
  char *cls = get(db, "sizes", "doc00", "class:size");
  assert_non_null(cls);
  assert_string_equal(cls, "long");
  free(cls);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- 2. strong: at most once per change, the latest value seen --------------- */

#define NHOT 3
#define WRITES_PER_WRITER 120

typedef struct hot {
  pc_db_t *db[2];
  atomic_uint_fast64_t next_value;
  atomic_int calls;
  problems_t p;
} hot_t;

/* Logs each run at log/<row>/<notify ts> = the value read, after checking that
 * no run for that notification committed before (dup/...), and counts the
 * runs of each cell (count/<row>), all in the run's transaction. */
static pc_status_t obs_log(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                           pc_error_t *err) {
  hot_t *h = state;
  atomic_fetch_add(&h->calls, 1);
  char row[64], *v, *seen, *count;
  snprintf(row, sizeof row, "%.*s/%020" PRIu64, (int)c->row_len, c->row, c->notify_ts);
  pc_status_t st = oget(t, c->table, c->row, c->row_len, "v:val", &v, err);
  if (st == PC_NOT_FOUND) {
    problem(&h->p, "%.*s: no value at the snapshot of a run", (int)c->row_len, c->row);
    return PC_OK;
  }
  if (st != PC_OK) return st;
  st = oget(t, "log", row, strlen(row), "l:value", &seen, err);
  if (st == PC_OK) { /* this notification was observed (and committed) before */
    st = oset(t, "dup", row, strlen(row), "d:value", v, err);
    free(seen);
  } else if (st == PC_NOT_FOUND) {
    st = oset(t, "log", row, strlen(row), "l:value", v, err);
  }
  free(v);
  if (st != PC_OK) return st;
  st = oget(t, "count", c->row, c->row_len, "c:runs", &count, err);
  if (st != PC_OK && st != PC_NOT_FOUND) return st;
  char n[24];
  snprintf(n, sizeof n, "%lld", (count ? atoll(count) : 0) + 1);
  free(count);
  return oset(t, "count", c->row, c->row_len, "c:runs", n, err);
}

typedef struct writer {
  hot_t *h;
  int idx;
} writer_t;

static void *hot_writer(void *arg) {
  writer_t *wr = arg;
  hot_t *h = wr->h;
  uint64_t seed = (uint64_t)wr->idx * 7919u + 17u;
  for (int i = 0; i < WRITES_PER_WRITER; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    char row[8], val[32];
    snprintf(row, sizeof row, "h%d", (int)((seed >> 33) % NHOT));
    for (int attempt = 0;; attempt++) {
      snprintf(val, sizeof val, "%020" PRIu64, (uint64_t)atomic_fetch_add(&h->next_value, 1));
      pc_error_t err;
      pc_txn_t *t = pc_txn_begin(h->db[wr->idx % 2], &err);
      if (!t) {
        problem(&h->p, "writer begin: %s", err.text);
        return NULL;
      }
      pc_status_t st = pc_txn_set(t, "hot", row, strlen(row), "v:val", 5, val, strlen(val), &err);
      if (st == PC_OK) st = pc_txn_commit(t, &err);
      pc_txn_destroy(t);
      if (st == PC_OK) break;
      if ((st != PC_CONFLICT && st != PC_LOCKED) || attempt > 1000) {
        problem(&h->p, "writer commit: %s (%s)", pc_status_name(st), err.text);
        return NULL;
      }
    }
  }
  return NULL;
}

typedef struct log_check {
  const char *row;
  size_t n;
  char last_ts[32], last_value[64];
  int bad;
} log_check_t;

static void test_strong_once_and_latest(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-strong");
  hot_t h;
  memset(&h, 0, sizeof h);
  pthread_mutex_init(&h.p.mu, NULL);
  h.db[0] = tu_open(dir, 0);
  h.db[1] = tu_cluster_mode() ? tu_open(dir, 0) : h.db[0]; /* a second client in a cluster */
  atomic_store(&h.next_value, 1);
  pc_observer_registry_t *reg[2] = {pc_registry_create(), pc_registry_create()};
  for (int i = 0; i < 2; i++)
    add_observer(reg[i], "log", "hot", "v:val", PC_OBSERVER_STRONG, obs_log, &h);
  /* claims of different sizes overlap ("percolator/notify/16" covers buckets
   * 16..31, "percolator/notify/20" 20..24): both workers may take the same
   * cell at once, and the acks alone must keep each change observed once */
  pc_worker_options_t o = quick_options(4), o2 = quick_options(4);
  o2.buckets_per_claim = 5;
  pc_worker_t *w[2] = {start(h.db[0], reg[0], &o), start(h.db[1], reg[1], &o2)};
  pthread_t th[2];
  writer_t wr[2] = {{&h, 0}, {&h, 1}};
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, hot_writer, &wr[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  no_problems(&h.p);
  wait_idle(h.db[0]);
  no_problems(&h.p);
  assert_int_equal(pending(h.db[0]), 0);

  /* no notification was committed twice */
  pc_txn_t *t = begin(h.db[0]);
  pc_error_t err;
  pc_scan_t *sc = pc_txn_scan(t, "dup", NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  pc_status_t st = pc_scan_next(sc, &err);
  if (st == PC_OK) {
    size_t rl;
    const char *r = pc_scan_row(sc, &rl);
    fail_msg("notification %.*s was observed by two committed runs", (int)rl, r);
  }
  assert_int_equal(st, PC_NOT_FOUND);
  pc_scan_destroy(sc);

  /* every hot cell's latest value was read by its last run, and the runs
   * counted in the store match the log */
  uint64_t logged = 0;
  for (int i = 0; i < NHOT; i++) {
    char row[8], lo[16], hi[16];
    snprintf(row, sizeof row, "h%d", i);
    snprintf(lo, sizeof lo, "h%d/", i);
    snprintf(hi, sizeof hi, "h%d0", i);
    char *latest = tu_get(t, "hot", row, "v:val");
    if (!latest) continue; /* never written */
    sc = pc_txn_scan(t, "log", lo, strlen(lo), hi, strlen(hi), &err);
    assert_non_null(sc);
    size_t n = 0;
    char last[64] = "";
    while ((st = pc_scan_next(sc, &err)) == PC_OK) {
      size_t vl;
      const char *v = pc_scan_value(sc, &vl);
      snprintf(last, sizeof last, "%.*s", (int)vl, v); /* rows sort by notify ts */
      n++;
    }
    assert_int_equal(st, PC_NOT_FOUND);
    pc_scan_destroy(sc);
    if (strcmp(last, latest) != 0)
      fail_msg("%s: latest value %s, but the last run read '%s'", row, latest, last);
    char *count = tu_get(t, "count", row, "c:runs");
    assert_non_null(count);
    if ((size_t)atoll(count) != n) fail_msg("%s: %s runs counted, %zu logged", row, count, n);
    free(count);
    free(latest);
    logged += n;
  }
  pc_txn_destroy(t);
  uint64_t runs = 0;
  for (int k = 0; k < 10000; k++, sleep_ms(1)) { /* counts trail commits: see runs_of */
    runs = 0;
    for (int i = 0; i < 2; i++) runs += stats_of(w[i], "log").runs;
    if (runs >= logged) break;
  }
  assert_int_equal(runs, logged);
  assert_true(logged >= 1);
  assert_true((uint64_t)atomic_load(&h.calls) >= logged);
  for (int i = 0; i < 2; i++) stop(w[i]);
  for (int i = 0; i < 2; i++) pc_registry_free(reg[i]);
  if (h.db[1] != h.db[0]) pc_db_close(h.db[1]);
  pc_db_close(h.db[0]);
  pthread_mutex_destroy(&h.p.mu);
  tu_rmtree(dir);
}

/* A worker that dies after its observer committed, before it deleted the
 * notification (failpoint worker.before_clear): the notification is found
 * again, and the ack makes the next pass skip it instead of running the
 * observer a second time for the same change. */
typedef struct counting {
  atomic_int calls;
} counting_t;

static pc_status_t obs_count_calls(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                                   pc_error_t *err) {
  counting_t *k = state;
  atomic_fetch_add(&k->calls, 1);
  return oset(t, "ackout", c->row, c->row_len, "o:seen", "yes", err);
}

static void test_ack_skips_a_change_seen_again(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-ack");
  pc_db_t *db = tu_open(dir, 0);
  counting_t k;
  memset(&k, 0, sizeof k);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "once", "ak", "a:c", PC_OBSERVER_STRONG, obs_count_calls, &k);
  pc_worker_options_t o = quick_options(2);
  pc_worker_t *w = start(db, reg, &o);
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure("worker.before_clear=return", &err), PC_OK);
  uint64_t changed = put(db, "ak", "r", "a:c", "v1");
  /* the run commits, the notification stays, and later passes skip it */
  for (int i = 0; i < 60000 && stats_of(w, "once").skipped < 2; i++) sleep_ms(1);
  assert_int_equal(pending(db), 1);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  wait_idle(db);
  pc_observer_stats_t s = stats_of(w, "once");
  assert_int_equal(s.runs, 1);
  assert_true(s.skipped >= 2);
  assert_int_equal(atomic_load(&k.calls), 1);
  /* the ack holds the run's start_ts, 8 bytes big-endian (core/db.h): after
   * the change, before now */
  pc_buf_t col = {0};
  assert_int_equal(pc_ack_column(&col, "once", "a:c", 3), 0);
  pc_txn_t *t = begin(db);
  char *v = NULL;
  size_t n = 0;
  assert_int_equal(pc_txn_get_system(t, "ak", "r", 1, col.p, col.len, &v, &n, &err), PC_OK);
  assert_int_equal(n, 8);
  uint64_t ack = 0;
  for (size_t i = 0; i < 8; i++) ack = ack << 8 | (unsigned char)v[i];
  if (ack <= changed || ack >= pc_txn_start_ts(t))
    fail_msg("ack %" PRIu64 ": want after the change %" PRIu64 " and before %" PRIu64, ack, changed,
             pc_txn_start_ts(t));
  pc_free(v);
  pc_txn_destroy(t);
  pc_buf_free(&col);
  /* a new change still runs it */
  put(db, "ak", "r", "a:c", "v2");
  wait_idle(db);
  assert_int_equal(runs_of(w, "once", 2).runs, 2);
  assert_int_equal(atomic_load(&k.calls), 2);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* wait's last condition: the oracle issued no timestamp during the check.
 * With the check's window held open (failpoint worker.wait_scanned) while
 * another thread takes timestamps, wait must not return; once they stop, it
 * does. */
typedef struct ticker {
  pc_db_t *db;
  atomic_int stop, ticks;
} ticker_t;

static void *tick_main(void *arg) {
  ticker_t *k = arg;
  while (!atomic_load(&k->stop)) {
    uint64_t ts;
    if (pc_db_timestamp(k->db, 10000, &ts, NULL) == PC_OK) atomic_fetch_add(&k->ticks, 1);
    sleep_ms(1);
  }
  return NULL;
}

static void test_wait_sees_timestamps_taken(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-wait");
  pc_db_t *db = tu_open(dir, 0);
  register_observed(db, "quiet", "quiet", "o:x", PC_OBSERVER_STRONG);
  backfill_done(db, "quiet"); /* no worker runs it here */
  put(db, "quiet", "r", "c", "v"); /* an unobserved column: no notification, no lock */
  wait_idle(db);
  pc_error_t err;
  /* a window long enough that the ticker (every millisecond) takes a
   * timestamp in it; a busy machine may still keep the ticker off the CPU
   * for a whole window, when wait rightly returns, so up to 5 tries: a wait
   * that ignored the timestamps would return in every one */
  assert_int_equal(pc_failpoints_configure("worker.wait_scanned=sleep(250)", &err), PC_OK);
  ticker_t k = {.db = db};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, tick_main, &k), 0);
  for (int i = 0; i < 10000 && atomic_load(&k.ticks) == 0; i++) sleep_ms(1);
  pc_status_t st = PC_OK;
  for (int i = 0; i < 5 && st == PC_OK; i++) st = pc_notify_wait(db, 400, &err);
  atomic_store(&k.stop, 1);
  pthread_join(th, NULL);
  pc_error_t cerr;
  assert_int_equal(pc_failpoints_configure(NULL, &cerr), PC_OK); /* before any assert fails */
  assert_int_equal(st, PC_TIMEOUT);
  assert_non_null(strstr(err.text, "timestamps were issued"));
  assert_int_equal(pc_failpoints_configure("worker.wait_scanned=sleep(250)", &err), PC_OK);
  wait_idle(db); /* the window is still held open, but nobody takes timestamps */
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- 3. derived data stays exact ------------------------------------------------ */

#define NKEYS 5
#define NSUB 8
#define OPS_PER_WRITER 150

/* Recomputes sums/<key> s:total from every src/<key>/<j> n:v at the run's
 * snapshot (key = the row up to '/'). Runs for puts (strong, n:v) and for
 * deletes (weak, n:gone: a delete writes no notification of its own). */
static pc_status_t obs_sum(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                           pc_error_t *err) {
  const char *slash = memchr(c->row, '/', c->row_len);
  if (!slash) return pc_error_set(err, PC_INVALID, "row without a key");
  char lo[64], hi[64];
  int kl = (int)(slash - c->row);
  snprintf(lo, sizeof lo, "%.*s/", kl, c->row);
  snprintf(hi, sizeof hi, "%.*s0", kl, c->row);
  pc_scan_t *sc = pc_txn_scan(t, "src", lo, strlen(lo), hi, strlen(hi), err);
  if (!sc) return err->code;
  long long sum = 0;
  pc_status_t st;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t cl, vl;
    const char *col = pc_scan_column(sc, &cl), *v = pc_scan_value(sc, &vl);
    if (cl != 3 || memcmp(col, "n:v", 3) != 0) continue;
    char num[32];
    snprintf(num, sizeof num, "%.*s", (int)vl, v);
    sum += atoll(num);
  }
  pc_scan_destroy(sc);
  if (st != PC_NOT_FOUND) return st;
  pc_error_clear(err);
  char v[32];
  snprintf(v, sizeof v, "%lld", sum);
  return pc_txn_set(t, "sums", c->row, (size_t)kl, "s:total", 7, v, strlen(v), err);
}

typedef struct derive {
  pc_db_t *db;
  int idx;
  problems_t *p;
} derive_t;

static void *derive_writer(void *arg) {
  derive_t *d = arg;
  uint64_t seed = (uint64_t)d->idx * 104729u + 3u;
  for (int i = 0; i < OPS_PER_WRITER; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    char row[32], val[16];
    snprintf(row, sizeof row, "k%d/%d", (int)((seed >> 33) % NKEYS), (int)((seed >> 40) % NSUB));
    int del = (seed >> 50) % 5 == 0;
    snprintf(val, sizeof val, "%d", (int)((seed >> 20) % 100) + 1);
    for (int attempt = 0;; attempt++) {
      pc_error_t err;
      pc_txn_t *t = pc_txn_begin(d->db, &err);
      if (!t) {
        problem(d->p, "begin: %s", err.text);
        return NULL;
      }
      pc_status_t st;
      if (del) {
        st = pc_txn_delete(t, "src", row, strlen(row), "n:v", 3, &err);
        if (st == PC_OK) st = pc_txn_notify_weak(t, "src", row, strlen(row), "n:gone", 6, &err);
      } else {
        st = pc_txn_set(t, "src", row, strlen(row), "n:v", 3, val, strlen(val), &err);
      }
      if (st == PC_OK) st = pc_txn_commit(t, &err);
      pc_txn_destroy(t);
      if (st == PC_OK) break;
      if ((st != PC_CONFLICT && st != PC_LOCKED) || attempt > 1000) {
        problem(d->p, "commit: %s (%s)", pc_status_name(st), err.text);
        return NULL;
      }
    }
  }
  return NULL;
}

static void test_derived_data_exact(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-derive");
  pc_db_t *db = tu_open(dir, 0);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "sum", "src", "n:v", PC_OBSERVER_STRONG, obs_sum, NULL);
  add_observer(reg, "sum_gone", "src", "n:gone", PC_OBSERVER_WEAK, obs_sum, NULL);
  pc_worker_options_t o = quick_options(4);
  pc_worker_t *w = start(db, reg, &o);
  problems_t p;
  memset(&p, 0, sizeof p);
  pthread_mutex_init(&p.mu, NULL);
  pthread_t th[2];
  derive_t d[2] = {{db, 0, &p}, {db, 1, &p}};
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, derive_writer, &d[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  no_problems(&p);
  wait_idle(db);
  /* recompute every sum from the source and compare */
  pc_txn_t *t = begin(db);
  long long want[NKEYS] = {0};
  pc_error_t err;
  pc_scan_t *sc = pc_txn_scan(t, "src", NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  pc_status_t st;
  int cells = 0;
  while ((st = pc_scan_next(sc, &err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *col = pc_scan_column(sc, &cl),
               *v = pc_scan_value(sc, &vl);
    if (cl != 3 || memcmp(col, "n:v", 3) != 0) continue;
    char num[32];
    snprintf(num, sizeof num, "%.*s", (int)vl, v);
    want[r[1] - '0'] += atoll(num);
    cells++;
  }
  assert_int_equal(st, PC_NOT_FOUND);
  pc_scan_destroy(sc);
  assert_true(cells > 0);
  for (int k = 0; k < NKEYS; k++) {
    char key[8];
    snprintf(key, sizeof key, "k%d", k);
    char *got = tu_get(t, "sums", key, "s:total");
    long long g = got ? atoll(got) : 0;
    if (g != want[k]) fail_msg("sum of %s: %lld derived, %lld recomputed", key, g, want[k]);
    free(got);
  }
  pc_txn_destroy(t);
  assert_true(runs_of(w, "sum", 1).runs > 0);
  assert_true(runs_of(w, "sum_gone", 1).runs > 0);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  pthread_mutex_destroy(&p.mu);
  tu_rmtree(dir);
}

/* ---- 4. a writer gone after its commit point ---------------------------------- */

/* mirror: crash/<row> c:x -> mirror/<row> m:x */
static pc_status_t obs_mirror(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                              pc_error_t *err) {
  char *v;
  pc_status_t st = oget(t, c->table, c->row, c->row_len, "c:x", &v, err);
  if (st == PC_NOT_FOUND) return PC_OK;
  if (st != PC_OK) return st;
  st = oset(t, "mirror", c->row, c->row_len, "m:x", v, err);
  free(v);
  return st;
}

static void test_crashed_writer_rolled_forward(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-crash");
  pc_db_t *db = tu_open_ex(dir, 300, 0); /* two phases, short leases: the sweeper looks at locks this old */
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "mirror", "crash", "c:x", PC_OBSERVER_STRONG, obs_mirror, NULL);
  register_observed(db, "mirror", "crash", "c:x", PC_OBSERVER_STRONG);
  /* one transaction over three rows, gone just after its primary committed */
  pc_txn_t *t = begin(db);
  tu_set(t, "crash", "a", "c:x", "va");
  tu_set(t, "crash", "b", "c:x", "vb");
  tu_set(t, "crash", "c", "c:x", "vc");
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure("txn.commit.after_primary=return", &err), PC_OK);
  pc_status_t st = pc_txn_commit(t, &err);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  assert_int_not_equal(st, PC_OK);
  pc_txn_destroy(t);
  /* only the primary's notification exists; the secondaries are locked */
  assert_int_equal(pending(db), 1);
  st = pc_notify_wait(db, 100, &err);
  assert_int_equal(st, PC_TIMEOUT);

  pc_worker_options_t o = quick_options(2);
  pc_worker_t *w = start(db, reg, &o);
  wait_idle(db);
  const char *rows[] = {"a", "b", "c"}, *vals[] = {"va", "vb", "vc"};
  for (int i = 0; i < 3; i++) {
    char *m = get(db, "mirror", rows[i], "m:x");
    if (!m || strcmp(m, vals[i]) != 0) fail_msg("mirror/%s = '%s', want %s", rows[i], m, vals[i]);
    free(m);
  }
  assert_int_equal(runs_of(w, "mirror", 3).runs, 3);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- 5. weak notifications ------------------------------------------------------ */

typedef struct weak_state {
  atomic_int runs;
  atomic_int block;   /* the next run waits while set */
  atomic_int running; /* a run is waiting */
} weak_state_t;

static pc_status_t obs_weak(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                            pc_error_t *err) {
  weak_state_t *s = state;
  atomic_fetch_add(&s->runs, 1);
  if (atomic_load(&s->block)) {
    atomic_store(&s->running, 1);
    for (int i = 0; i < 60000 && atomic_load(&s->block); i++) sleep_ms(1);
    atomic_store(&s->running, 0);
  }
  char n[16];
  snprintf(n, sizeof n, "%d", atomic_load(&s->runs));
  return oset(t, "weakout", c->row, c->row_len, "o:runs", n, err);
}

static void test_weak_coalesce_and_rerun(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-weak");
  pc_db_t *db = tu_open(dir, 0);
  weak_state_t coalesce, rerun;
  memset(&coalesce, 0, sizeof coalesce);
  memset(&rerun, 0, sizeof rerun);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "coalesce", "wk", "w:c", PC_OBSERVER_WEAK, obs_weak, &coalesce);
  add_observer(reg, "rerun", "wk", "w:b", PC_OBSERVER_WEAK, obs_weak, &rerun);
  register_observed(db, "coalesce", "wk", "w:c", PC_OBSERVER_WEAK);
  register_observed(db, "rerun", "wk", "w:b", PC_OBSERVER_WEAK);

  /* many notifications of one cell before the worker runs: fewer runs */
  for (int i = 0; i < 10; i++) notify_weak(db, "wk", "r1", "w:c");
  assert_int_equal(pending(db), 10);
  pc_worker_options_t o = quick_options(2);
  pc_worker_t *w = start(db, reg, &o);
  wait_idle(db);
  int runs = atomic_load(&coalesce.runs);
  if (runs < 1 || runs >= 10) fail_msg("10 weak notifications ran the observer %d times", runs);
  assert_int_equal(runs_of(w, "coalesce", (uint64_t)runs).runs, (uint64_t)runs);

  /* one that arrives while the observer runs makes it run again */
  atomic_store(&rerun.block, 1);
  notify_weak(db, "wk", "r2", "w:b");
  for (int i = 0; i < 60000 && !atomic_load(&rerun.running); i++) sleep_ms(1);
  assert_true(atomic_load(&rerun.running));
  assert_int_equal(atomic_load(&rerun.runs), 1);
  notify_weak(db, "wk", "r2", "w:b");
  assert_int_equal(pc_notify_wait(db, 50, NULL), PC_TIMEOUT); /* the run is in flight */
  atomic_store(&rerun.block, 0);
  wait_idle(db);
  if (atomic_load(&rerun.runs) < 2)
    fail_msg("a notification during the run was lost: %d run(s)", atomic_load(&rerun.runs));
  char *out = get(db, "weakout", "r2", "o:runs");
  assert_non_null(out);
  assert_true(atoi(out) >= 2);
  free(out);
  assert_int_equal(pending(db), 0);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- 6. failures: parked, listed, re-queued ----------------------------------- */

typedef struct failing {
  atomic_int broken;
  atomic_int calls;
} failing_t;

/* Writes fx/<row> done:<column> = the value, or fails while broken. */
static pc_status_t obs_maybe_fail(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                                  pc_error_t *err) {
  failing_t *f = state;
  atomic_fetch_add(&f->calls, 1);
  if (f && atomic_load(&f->broken)) {
    snprintf(err->text, sizeof err->text, "broken on purpose");
    return PC_IO_ERROR;
  }
  char col[64];
  snprintf(col, sizeof col, "done:%.*s", (int)c->column_len, c->column);
  return oset(t, "fxout", c->row, c->row_len, col, "yes", err);
}

/* Counts its calls and writes fxnext/<row> done:<column>. */
static pc_status_t obs_neighbour(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                                 pc_error_t *err) {
  failing_t *f = state;
  atomic_fetch_add(&f->calls, 1);
  char col[64];
  snprintf(col, sizeof col, "done:%.*s", (int)c->column_len, c->column);
  return oset(t, "fxnext", c->row, c->row_len, col, "yes", err);
}

typedef struct listed {
  int n;
  char observer[8][72], error[8][256], row[8][16], col[8][16];
  uint64_t ts[8];
  uint32_t failures[8];
} listed_t;

static int list_parked(void *ctx, const pc_parked_t *p) {
  listed_t *l = ctx;
  if (l->n < 8) {
    snprintf(l->observer[l->n], sizeof l->observer[0], "%s", p->observer);
    snprintf(l->error[l->n], sizeof l->error[0], "%s", p->error);
    snprintf(l->row[l->n], sizeof l->row[0], "%.*s", (int)p->rlen, p->row);
    snprintf(l->col[l->n], sizeof l->col[0], "%.*s", (int)p->clen, p->col);
    l->ts[l->n] = p->ts;
    l->failures[l->n] = p->failures;
  }
  l->n++;
  return 0;
}

static listed_t parked(pc_db_t *db) {
  listed_t l;
  memset(&l, 0, sizeof l);
  pc_error_t err;
  if (pc_worker_failures(db, list_parked, &l, &err) != PC_OK)
    fail_msg("pc_worker_failures: %s", err.text);
  return l;
}

static void test_failures_parked_and_retried(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-fail");
  pc_db_t *db = tu_open(dir, 0);
  failing_t bad, badweak, good, nextbad, nextweak;
  memset(&bad, 0, sizeof bad);
  memset(&badweak, 0, sizeof badweak);
  memset(&good, 0, sizeof good);
  memset(&nextbad, 0, sizeof nextbad);
  memset(&nextweak, 0, sizeof nextweak);
  atomic_store(&bad.broken, 1);
  atomic_store(&badweak.broken, 1);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "bad", "fx", "f:c", PC_OBSERVER_STRONG, obs_maybe_fail, &bad);
  add_observer(reg, "badweak", "fx", "w:c", PC_OBSERVER_WEAK, obs_maybe_fail, &badweak);
  add_observer(reg, "good", "fx", "g:c", PC_OBSERVER_STRONG, obs_maybe_fail, &good);
  /* healthy neighbours of the failing ones, on their columns */
  add_observer(reg, "nextbad", "fx", "f:c", PC_OBSERVER_STRONG, obs_neighbour, &nextbad);
  add_observer(reg, "nextweak", "fx", "w:c", PC_OBSERVER_WEAK, obs_neighbour, &nextweak);
  pc_worker_options_t o = quick_options(2);
  o.max_failures = 3;
  o.backoff_ms = 2;
  pc_worker_t *w = start(db, reg, &o);
  pc_txn_t *t = begin(db);
  tu_set(t, "fx", "r1", "f:c", "x");
  tu_set(t, "fx", "r1", "g:c", "y");
  uint64_t strong_ts = commit(t);
  uint64_t weak_ts = notify_weak(db, "fx", "r2", "w:c");
  /* both failing observers end up parked; wait returns then (nothing pending) */
  wait_idle(db);
  pc_observer_stats_t sb = stats_of(w, "bad"), sw = stats_of(w, "badweak");
  assert_int_equal(sb.parked, 1);
  assert_int_equal(sb.failures, 3);
  assert_int_equal(sb.runs, 0);
  assert_int_equal(sw.parked, 1);
  assert_int_equal(sw.failures, 3);
  assert_int_equal(atomic_load(&bad.calls), 3);
  /* the others kept running */
  char *g = get(db, "fxout", "r1", "done:g:c");
  assert_non_null(g);
  free(g);
  put(db, "fx", "r3", "g:c", "z");
  wait_idle(db);
  g = get(db, "fxout", "r3", "done:g:c");
  assert_non_null(g);
  free(g);
  assert_int_equal(runs_of(w, "good", 2).runs, 2);

  listed_t l = parked(db);
  assert_int_equal(l.n, 2);
  for (int i = 0; i < 2; i++) {
    int strong = strcmp(l.observer[i], "bad") == 0;
    assert_true(strong || strcmp(l.observer[i], "badweak") == 0);
    assert_non_null(strstr(l.error[i], "broken on purpose"));
    assert_int_equal(l.failures[i], 3);
    assert_string_equal(l.row[i], strong ? "r1" : "r2");
    assert_string_equal(l.col[i], strong ? "f:c" : "w:c");
    assert_int_equal(l.ts[i], strong ? strong_ts : weak_ts);
  }
  assert_null(get(db, "fxout", "r1", "done:f:c"));
  assert_int_equal(atomic_load(&nextbad.calls), 1);
  assert_int_equal(atomic_load(&nextweak.calls), 1);

  /* fixed, then re-queued: both run, and the records are gone; their
   * neighbours on the same columns do not run again */
  atomic_store(&bad.broken, 0);
  atomic_store(&badweak.broken, 0);
  uint64_t n = 0;
  pc_error_t err;
  assert_int_equal(pc_worker_retry_failures(db, &n, &err), PC_OK);
  assert_int_equal(n, 2);
  assert_int_equal(parked(db).n, 0);
  wait_idle(db); /* returns once the retries ran */
  char *f = get(db, "fxout", "r1", "done:f:c"), *fw = get(db, "fxout", "r2", "done:w:c");
  assert_non_null(f);
  assert_non_null(fw);
  free(f);
  free(fw);
  assert_int_equal(runs_of(w, "bad", 1).runs, 1);
  assert_int_equal(runs_of(w, "badweak", 1).runs, 1);
  assert_int_equal(atomic_load(&nextbad.calls), 1);
  assert_int_equal(atomic_load(&nextweak.calls), 1);
  assert_int_equal(stats_of(w, "nextweak").runs, 1);
  /* nothing is left to retry, and a weak notification of the strong
   * observer's column does not make it run */
  assert_int_equal(pc_worker_retry_failures(db, &n, &err), PC_OK);
  assert_int_equal(n, 0);
  notify_weak(db, "fx", "r1", "f:c");
  wait_idle(db);
  assert_int_equal(stats_of(w, "bad").runs, 1);
  assert_int_equal(parked(db).n, 0);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- batches ------------------------------------------------------------------- */

/* A batch observer of bt v:c: copies each notified value to btout/<row>
 * done:v, reading the cells with one get_many; the value "fail" fails the
 * run (the batch, and then that cell alone). */
typedef struct batching {
  atomic_int calls, batches, largest, cells;
  atomic_int holding, release; /* a batch with a row "hold...": it waits for release */
} batching_t;

static pc_status_t obs_copy_one(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                                pc_error_t *err) {
  batching_t *b = state;
  atomic_fetch_add(&b->calls, 1);
  char *v;
  pc_status_t st = oget(t, c->table, c->row, c->row_len, "v:c", &v, err);
  if (st != PC_OK) return st;
  if (strcmp(v, "fail") == 0) {
    free(v);
    snprintf(err->text, sizeof err->text, "failing on purpose");
    return PC_IO_ERROR;
  }
  st = oset(t, "btout", c->row, c->row_len, "done:v", v, err);
  free(v);
  return st;
}

static pc_status_t obs_copy_batch(void *state, pc_txn_t *t, const pc_notified_cell_t *cells,
                                  size_t n, pc_error_t *err) {
  batching_t *b = state;
  atomic_fetch_add(&b->batches, 1);
  atomic_fetch_add(&b->cells, (int)n);
  for (size_t i = 0; i < n; i++)
    if (cells[i].row_len >= 4 && memcmp(cells[i].row, "hold", 4) == 0) {
      atomic_store(&b->holding, 1);
      for (int w = 0; w < 60000 && !atomic_load(&b->release); w++) sleep_ms(1);
      atomic_store(&b->holding, 0);
    }
  int largest = atomic_load(&b->largest);
  while ((int)n > largest && !atomic_compare_exchange_weak(&b->largest, &largest, (int)n)) {
  }
  pc_cell_ref_t *refs = calloc(n, sizeof *refs);
  pc_value_t *vals = calloc(n, sizeof *vals);
  if (!refs || !vals) abort();
  for (size_t i = 0; i < n; i++)
    refs[i] = (pc_cell_ref_t){cells[i].table, cells[i].row, cells[i].row_len, cells[i].column,
                              cells[i].column_len};
  pc_status_t st = pc_txn_get_many(t, refs, n, vals, err);
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    if (!vals[i].value) {
      st = PC_NOT_FOUND;
      snprintf(err->text, sizeof err->text, "a notified cell has no value");
    } else if (vals[i].vlen == 4 && memcmp(vals[i].value, "fail", 4) == 0) {
      snprintf(err->text, sizeof err->text, "failing on purpose");
      st = PC_IO_ERROR;
    } else {
      st = pc_txn_set(t, "btout", cells[i].row, cells[i].row_len, "done:v", 6, vals[i].value,
                      vals[i].vlen, err);
    }
  }
  for (size_t i = 0; i < n; i++) pc_free(vals[i].value);
  free(refs);
  free(vals);
  return st;
}

/* The batch observer "copyb" of bt v:c, counting into b. */
static pc_observer_def_t copyb_def(batching_t *b, size_t batch_max) {
  return (pc_observer_def_t){.name = "copyb", .table = "bt", .column = "v:c", .column_len = 3,
                             .kind = PC_OBSERVER_STRONG, .observe = obs_copy_one, .state = b,
                             .observe_batch = obs_copy_batch, .batch_max = batch_max};
}

/* Rows PREFIX<from>..PREFIX<to - 1> (3 digits) hold btout done:v = v<i>. */
static void assert_copied(pc_db_t *db, const char *prefix, int from, int to) {
  char row[32], val[32];
  for (int i = from; i < to; i++) {
    snprintf(row, sizeof row, "%s%03d", prefix, i);
    snprintf(val, sizeof val, "v%d", i);
    char *v = get(db, "btout", row, "done:v");
    if (!v || strcmp(v, val) != 0) fail_msg("%s: done:v is %s, want %s", row, v ? v : "absent", val);
    free(v);
  }
}

static void test_batches(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-batch");
  pc_db_t *db = tu_open(dir, 0);
  batching_t b;
  memset(&b, 0, sizeof b);
  pc_observer_registry_t *reg = pc_registry_create();
  pc_observer_def_t d = copyb_def(&b, 16);
  pc_error_t err;
  assert_int_equal(pc_registry_add(reg, &d, NULL, "test", &err), PC_OK);
  /* a batch callback on a weak observer, or more than the most cells, is refused */
  pc_observer_def_t bad = d;
  bad.name = "weakb";
  bad.kind = PC_OBSERVER_WEAK;
  assert_int_equal(pc_registry_add(reg, &bad, NULL, "test", &err), PC_INVALID);
  bad.kind = PC_OBSERVER_STRONG;
  bad.batch_max = PC_MAX_OBSERVER_BATCH + 1;
  assert_int_equal(pc_registry_add(reg, &bad, NULL, "test", &err), PC_INVALID);
  register_observed(db, "copyb", "bt", "v:c", PC_OBSERVER_STRONG);
  backfill_done(db, "copyb"); /* the column is empty: the notifications alone present the cells */

  /* 200 notified cells before the worker starts: it finds them in pages.
   * Written 20 rows a transaction, and batches of at most 16 cells (32
   * rows), because a commit holds a latch per row and ThreadSanitizer
   * follows at most 64 mutexes held by one thread. */
  pc_txn_t *t = NULL;
  char row[32], val[32];
  for (int i = 0; i < 200; i++) {
    if (i % 20 == 0) t = begin(db);
    snprintf(row, sizeof row, "r%03d", i);
    snprintf(val, sizeof val, "v%d", i);
    tu_set(t, "bt", row, "v:c", val);
    if (i % 20 == 19) commit(t);
  }
  pc_worker_options_t o = quick_options(2);
  o.max_failures = 3;
  o.backoff_ms = 2;
  pc_worker_t *w = start(db, reg, &o);
  wait_idle(db);
  assert_copied(db, "r", 0, 200);
  pc_observer_stats_t st = runs_of(w, "copyb", 200);
  assert_int_equal(st.runs, 200); /* each cell once */
  assert_true(atomic_load(&b.largest) > 1);
  assert_true(atomic_load(&b.largest) <= 16);
  assert_int_equal(atomic_load(&b.calls), 0); /* nothing failed: no cell ran alone */
  assert_int_equal(pending(db), 0);

  /* a failing cell among others: the batch fails, every cell runs alone, the
   * others commit and only that cell is parked */
  for (int i = 200; i < 240; i++) {
    if (i % 20 == 0) t = begin(db);
    snprintf(row, sizeof row, "r%03d", i);
    snprintf(val, sizeof val, "%s", i == 220 ? "fail" : "ok");
    tu_set(t, "bt", row, "v:c", val);
    if (i % 20 == 19) commit(t);
  }
  wait_idle(db);
  for (int i = 200; i < 240; i++) {
    snprintf(row, sizeof row, "r%03d", i);
    char *v = get(db, "btout", row, "done:v");
    if (i == 220) assert_null(v);
    else if (!v || strcmp(v, "ok") != 0) fail_msg("%s: done:v is %s", row, v ? v : "absent");
    free(v);
  }
  listed_t l = parked(db);
  assert_int_equal(l.n, 1);
  assert_string_equal(l.row[0], "r220");
  assert_string_equal(l.observer[0], "copyb");
  st = runs_of(w, "copyb", 239);
  assert_int_equal(st.runs, 239);
  assert_int_equal(st.parked, 1);
  assert_true(atomic_load(&b.calls) >= 3); /* the failing cell, alone, until parked */
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* workers.scan.batch_wait_ms: while a batched run of its observer is in
 * flight in the worker, a batch that is not full waits for more cells (its
 * notifications stay, scan after scan) until it fills, the run in flight
 * ends, or its oldest notification is batch_wait_ms old; with no run in
 * flight it runs at once. Two claims, two threads: a batch holding a row
 * "hold..." (in claim 0) stays in its callback until released, while the
 * rows "w..." (in claim 1) are scanned by the other thread. 60 s is far
 * longer than the first part waits, so there nothing may run until the
 * batch fills or the hold ends. */
static void copy_rows(pc_db_t *db, const char *prefix, int from, int to) {
  pc_txn_t *t = begin(db);
  char row[32], val[32];
  for (int i = from; i < to; i++) {
    snprintf(row, sizeof row, "%s%03d", prefix, i);
    snprintf(val, sizeof val, "v%d", i);
    tu_set(t, "bt", row, "v:c", val);
  }
  commit(t);
}

/* Whether the row PREFIX<i> (3 digits) of bt is in buckets [lo, hi). */
static int row_in(const char *prefix, int i, uint32_t lo, uint32_t hi) {
  char row[32];
  snprintf(row, sizeof row, "%s%03d", prefix, i);
  uint32_t k = pc_notify_bucket("bt", row, strlen(row));
  return k >= lo && k < hi;
}

/* The first n indices i >= from whose rows PREFIX<i> are in [lo, hi). */
static void rows_in(const char *prefix, int from, uint32_t lo, uint32_t hi, int *out, int n) {
  for (int i = from, k = 0; k < n; i++) {
    assert_true(i < 1000);
    if (row_in(prefix, i, lo, hi)) out[k++] = i;
  }
}

static void copy_listed(pc_db_t *db, const char *prefix, const int *v, int n) {
  for (int k = 0; k < n; k++) copy_rows(db, prefix, v[k], v[k] + 1);
}

static void assert_listed(pc_db_t *db, const char *prefix, const int *v, int n) {
  for (int k = 0; k < n; k++) assert_copied(db, prefix, v[k], v[k] + 1);
}

/* Waits (up to 30 s) until w's observer copyb has seen more notifications
 * than it had by `more`, i.e. until scans went over the waiting cells. */
static void scans_saw(pc_worker_t *w, uint64_t more) {
  pc_worker_stats_t ws;
  pc_error_t err;
  assert_int_equal(pc_worker_stats(w, &ws, &err), PC_OK);
  pc_free(ws.observers);
  uint64_t want = ws.notifications_seen + more;
  for (int i = 0; i < 30000 && ws.notifications_seen < want; i++) {
    sleep_ms(1);
    assert_int_equal(pc_worker_stats(w, &ws, &err), PC_OK);
    pc_free(ws.observers);
  }
  assert_true(ws.notifications_seen >= want);
}

static void hold_until_running(pc_db_t *db, batching_t *b, int i) {
  atomic_store(&b->release, 0);
  copy_rows(db, "hold", i, i + 1);
  for (int w = 0; w < 30000 && !atomic_load(&b->holding); w++) sleep_ms(1);
  assert_true(atomic_load(&b->holding));
}

static void test_batch_wait(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-batchwait");
  pc_db_t *db = tu_open(dir, 0);
  batching_t b;
  memset(&b, 0, sizeof b);
  pc_observer_registry_t *reg = pc_registry_create();
  pc_observer_def_t d = copyb_def(&b, 8);
  pc_error_t err;
  assert_int_equal(pc_registry_add(reg, &d, NULL, "test", &err), PC_OK);
  register_observed(db, "copyb", "bt", "v:c", PC_OBSERVER_STRONG);
  backfill_done(db, "copyb");
  const uint32_t half = PC_NOTIFY_BUCKETS / 2;
  int holds[2], ws[12];
  rows_in("hold", 0, 0, half, holds, 2);
  rows_in("w", 0, half, PC_NOTIFY_BUCKETS, ws, 12);

  pc_worker_options_t o = quick_options(2);
  o.buckets_per_claim = half;
  o.batch_wait_ms = 60000;
  pc_worker_t *w = start(db, reg, &o);
  /* nothing in flight: a lone cell runs at once, 60 s or not */
  copy_listed(db, "w", ws, 1);
  wait_idle(db);
  assert_listed(db, "w", ws, 1);

  /* a run in flight: 5 of 8 wait, scan after scan */
  hold_until_running(db, &b, holds[0]);
  copy_listed(db, "w", ws + 1, 5);
  scans_saw(w, 15); /* three scans saw them */
  assert_int_equal(stats_of(w, "copyb").runs, 1); /* the lone cell's */
  assert_true(pending(db) >= 5);

  /* 3 more fill the batch: the eight run together, the hold still on */
  copy_listed(db, "w", ws + 6, 3);
  assert_int_equal(runs_of(w, "copyb", 9).runs, 9);
  assert_listed(db, "w", ws + 1, 8);
  assert_int_equal(atomic_load(&b.largest), 8);
  assert_true(atomic_load(&b.holding));

  /* 2 more wait again; the hold ends, and they run without their 60 s */
  copy_listed(db, "w", ws + 9, 2);
  scans_saw(w, 6);
  assert_int_equal(stats_of(w, "copyb").runs, 9);
  atomic_store(&b.release, 1);
  assert_int_equal(runs_of(w, "copyb", 12).runs, 12); /* the hold's and the two */
  assert_listed(db, "w", ws + 9, 2);
  assert_int_equal(atomic_load(&b.calls), 0);
  stop(w);

  /* a short wait ends: with a run in flight, a cell that never fills a
   * batch runs once its notification is batch_wait_ms old */
  o.batch_wait_ms = 50;
  w = start(db, reg, &o);
  hold_until_running(db, &b, holds[1]);
  copy_listed(db, "w", ws + 11, 1);
  assert_int_equal(runs_of(w, "copyb", 1).runs, 1); /* a new worker counts from 0 */
  assert_listed(db, "w", ws + 11, 1);
  assert_true(atomic_load(&b.holding));
  atomic_store(&b.release, 1);
  wait_idle(db);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A batch that loses a write conflict runs again in halves: the batch
 * observer "copyh" copies as copyb does, and while a batch of more than one
 * cell holds row h003, it first commits another value to btout/h003 done:v
 * in a transaction of its own, so the batch's commit loses to it. The eight
 * cells, one batch at first: 8 loses; of its halves the one without h003
 * commits (4), the other loses and halves (2 commits, 2 loses), and h003
 * commits alone in a batch of 1 (nothing interferes then) beside the other
 * cell of its pair. None of them runs through the single path. */
typedef struct halving {
  batching_t b;
  pc_db_t *db;
  atomic_int lost; /* batches this observer made lose */
} halving_t;

static pc_status_t obs_halving_batch(void *state, pc_txn_t *t, const pc_notified_cell_t *cells,
                                     size_t n, pc_error_t *err) {
  halving_t *h = state;
  for (size_t i = 0; n > 1 && i < n; i++)
    if (cells[i].row_len == 4 && memcmp(cells[i].row, "h003", 4) == 0) {
      pc_txn_t *other = begin(h->db);
      tu_set(other, "btout", "h003", "done:v", "theirs");
      commit(other);
      atomic_fetch_add(&h->lost, 1);
      break;
    }
  return obs_copy_batch(&h->b, t, cells, n, err);
}

static void test_batch_halves(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-batchhalves");
  pc_db_t *db = tu_open(dir, 0);
  halving_t h;
  memset(&h, 0, sizeof h);
  h.db = db;
  pc_observer_registry_t *reg = pc_registry_create();
  pc_observer_def_t d = copyb_def(&h.b, 8);
  d.name = "copyh";
  d.observe_batch = obs_halving_batch;
  d.state = &h;
  pc_error_t err;
  assert_int_equal(pc_registry_add(reg, &d, NULL, "test", &err), PC_OK);
  register_observed(db, "copyh", "bt", "v:c", PC_OBSERVER_STRONG);
  backfill_done(db, "copyh");
  pc_txn_t *t = begin(db);
  char row[32], val[32];
  for (int i = 0; i < 8; i++) {
    snprintf(row, sizeof row, "h%03d", i);
    snprintf(val, sizeof val, "v%d", i);
    tu_set(t, "bt", row, "v:c", val);
  }
  commit(t);
  /* one thread, one claim of every bucket: the eight cells make one batch */
  pc_worker_options_t o = quick_options(1);
  o.buckets_per_claim = PC_NOTIFY_BUCKETS;
  pc_worker_t *w = start(db, reg, &o);
  wait_idle(db);
  assert_copied(db, "h", 0, 8); /* h003 holds the batch's value, not "theirs" */
  pc_observer_stats_t st = runs_of(w, "copyh", 8);
  assert_int_equal(st.runs, 8);
  assert_int_equal(st.conflicts, 3);
  assert_int_equal(atomic_load(&h.lost), 3);
  assert_int_equal(atomic_load(&h.b.batches), 7);    /* 8; 4 and 4; 2 and 2; 1 and 1 */
  assert_int_equal(atomic_load(&h.b.cells), 22);     /* 8 + 8 + 4 + 2 */
  assert_int_equal(atomic_load(&h.b.largest), 8);
  assert_int_equal(atomic_load(&h.b.calls), 0);      /* none alone through the single path */
  assert_int_equal(pending(db), 0);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- 6b. backoff waits: the healthy observers of a cell run once per change -- */

/* A failing observer next to healthy ones on the same column: while the
 * failing ones wait out their backoff, nothing re-runs the cell's pass, so
 * the healthy strong observer runs once per change and skips (reads its
 * ack) only when a failing one retries, and the healthy weak observer,
 * which has no ack, runs once for its weak notification. A new change is
 * seen by the healthy observers at once, whatever the backoff. */
static void test_backoff_waits(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-backoff");
  pc_db_t *db = tu_open(dir, 0);
  failing_t bad, badweak, good, goodweak;
  memset(&bad, 0, sizeof bad);
  memset(&badweak, 0, sizeof badweak);
  memset(&good, 0, sizeof good);
  memset(&goodweak, 0, sizeof goodweak);
  atomic_store(&bad.broken, 1);
  atomic_store(&badweak.broken, 1);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "bad", "bk", "b:c", PC_OBSERVER_STRONG, obs_maybe_fail, &bad);
  add_observer(reg, "badweak", "bk", "b:c", PC_OBSERVER_WEAK, obs_maybe_fail, &badweak);
  add_observer(reg, "good", "bk", "b:c", PC_OBSERVER_STRONG, obs_maybe_fail, &good);
  add_observer(reg, "goodweak", "bk", "b:c", PC_OBSERVER_WEAK, obs_maybe_fail, &goodweak);
  pc_worker_options_t o = quick_options(2);
  o.max_failures = 1000; /* never parked here */
  o.backoff_ms = 10;
  pc_worker_t *w = start(db, reg, &o);
  put(db, "bk", "r1", "b:c", "v1");
  notify_weak(db, "bk", "r1", "b:c");
  /* the failing ones retry a few times (10, 20, 40, 80 ms, ...) */
  for (int i = 0; i < 60000 && (stats_of(w, "bad").failures < 6 ||
                                stats_of(w, "badweak").failures < 6);
       i++)
    sleep_ms(1);
  pc_observer_stats_t sb = stats_of(w, "bad"), sbw = stats_of(w, "badweak");
  pc_observer_stats_t sg = runs_of(w, "good", 1), sgw = runs_of(w, "goodweak", 1);
  assert_true(sb.failures >= 6 && sbw.failures >= 6);
  assert_int_equal(sb.parked + sbw.parked, 0);
  assert_int_equal(atomic_load(&good.calls), 1);
  assert_int_equal(sg.runs, 1);
  assert_int_equal(atomic_load(&goodweak.calls), 1);
  assert_int_equal(sgw.runs, 1);
  /* a pass runs only when a failing observer may retry (and once at first) */
  pc_observer_stats_t s2 = stats_of(w, "good");
  if (s2.skipped > stats_of(w, "bad").failures + stats_of(w, "badweak").failures + 2)
    fail_msg("the healthy observer skipped %" PRIu64 " times while the failing ones failed %" PRIu64
             " and %" PRIu64 " times: the cell's pass ran again and again",
             s2.skipped, stats_of(w, "bad").failures, stats_of(w, "badweak").failures);
  /* a new change: the healthy strong observer runs for it once, at once */
  put(db, "bk", "r1", "b:c", "v2");
  sg = runs_of(w, "good", 2);
  assert_int_equal(sg.runs, 2);
  assert_int_equal(atomic_load(&good.calls), 2);
  assert_int_equal(atomic_load(&goodweak.calls), 1);
  assert_int_equal(atomic_load(&bad.calls), (int)stats_of(w, "bad").failures);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- 6c. an observer that kills the worker process, or never returns --------- */

#define NCRASH 6 /* rows of table cr: r0.. r4, and "poison" */

/* Writes cr/<row> out:c = the value, or kills the process on row "poison". */
static pc_status_t obs_crashy(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                              pc_error_t *err) {
  (void)state;
  if (c->row_len == 6 && memcmp(c->row, "poison", 6) == 0) raise(SIGSEGV);
  char *v;
  pc_status_t st = oget(t, c->table, c->row, c->row_len, "in:c", &v, err);
  if (st != PC_OK) return st == PC_NOT_FOUND ? PC_OK : st;
  st = oset(t, c->table, c->row, c->row_len, "out:c", v, err);
  free(v);
  return st;
}

static pc_worker_options_t crash_options(const char *journal) {
  pc_worker_options_t o = quick_options(2);
  o.max_failures = 3;
  o.journal_dir = journal;
  return o;
}

/* A worker process: runs the worker until nothing is pending, then exits
 * 0 (or 2 on an error); dies when the observer kills it. */
static void crash_child(const char *dir, const char *journal) {
  signal(SIGSEGV, SIG_DFL); /* cmocka's handler would catch it */
  pc_db_t *db = tu_open(dir, 0);
  pc_observer_registry_t *reg = pc_registry_create();
  pc_observer_def_t d = {.name = "crashy", .table = "cr", .column = "in:c", .column_len = 4,
                         .kind = PC_OBSERVER_STRONG, .observe = obs_crashy};
  pc_error_t err;
  if (!reg || pc_registry_add(reg, &d, NULL, "test", &err) != PC_OK) _exit(2);
  pc_worker_options_t o = crash_options(journal);
  pc_worker_t *w = pc_worker_start(db, reg, &o, &err);
  if (!w) _exit(2);
  pc_status_t st = pc_notify_wait(db, WAIT_MS, &err);
  pc_worker_stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  _exit(st == PC_OK ? 0 : 2);
}

/* An observer that kills its worker process on one cell (a segfault): the
 * test restarts the worker each time, as a supervisor would; each start
 * counts the death of the run in flight (the journal), and after
 * max_failures deaths the cell is parked with the reason, while every other
 * cell is processed. */
static void test_crash_parked(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-crash");
  char journal[4096];
  snprintf(journal, sizeof journal, "%s/journal", dir);
  pc_db_t *db = tu_open(dir, 0);
  register_observed(db, "crashy", "cr", "in:c", PC_OBSERVER_STRONG);
  backfill_done(db, "crashy"); /* the column is empty: the notifications alone present the cells */
  pc_txn_t *t = begin(db);
  for (int i = 0; i < NCRASH; i++) {
    char row[16];
    if (i == NCRASH - 1) snprintf(row, sizeof row, "poison");
    else snprintf(row, sizeof row, "r%d", i);
    tu_set(t, "cr", row, "in:c", row);
  }
  uint64_t cts = commit(t);
  pc_db_close(db);
  int starts = 0, deaths = 0, done = 0;
  while (!done && starts < 10) {
    starts++;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) crash_child(dir, journal);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) deaths++;
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) done = 1;
    else fail_msg("the worker process exited %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  if (!done) fail_msg("the worker died %d times and never finished: the cell is never parked", deaths);
  assert_int_equal(deaths, 3);
  db = tu_open(dir, 0);
  listed_t l = parked(db);
  assert_int_equal(l.n, 1);
  assert_string_equal(l.observer[0], "crashy");
  assert_string_equal(l.row[0], "poison");
  assert_string_equal(l.col[0], "in:c");
  assert_int_equal(l.ts[0], cts);
  assert_int_equal(l.failures[0], 3);
  assert_non_null(strstr(l.error[0], "died"));
  for (int i = 0; i < NCRASH - 1; i++) {
    char row[16];
    snprintf(row, sizeof row, "r%d", i);
    char *v = get(db, "cr", row, "out:c");
    assert_non_null(v);
    assert_string_equal(v, row);
    free(v);
  }
  assert_null(get(db, "cr", "poison", "out:c"));
  assert_int_equal(pending(db), 0);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A run that never returns (until the test lets it): released with a flag. */
typedef struct hang {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int release, waiting;
} hang_t;

static pc_status_t obs_hangs(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                             pc_error_t *err) {
  hang_t *h = state;
  if (c->row_len == 5 && memcmp(c->row, "stuck", 5) == 0) {
    pthread_mutex_lock(&h->mu);
    h->waiting++;
    while (!h->release) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
  }
  return oset(t, c->table, c->row, c->row_len, "out:c", "ran", err);
}

/* An observer that never returns on one cell, with one thread and one
 * claim for the whole store: after hang_ms the run is given up (a failure,
 * here the last before parking), its claim released and its thread
 * replaced, so every other cell is processed; a bounded stop then ends
 * within its bound, naming the observer still running, and what that run
 * does when it finally returns commits nothing. */
static void test_hung_observer_given_up(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-hang");
  pc_db_t *db = tu_open(dir, 0);
  hang_t h;
  memset(&h, 0, sizeof h);
  pthread_mutex_init(&h.mu, NULL);
  pthread_cond_init(&h.cv, NULL);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "hangs", "hg", "in:c", PC_OBSERVER_STRONG, obs_hangs, &h);
  pc_worker_options_t o = quick_options(1);
  o.buckets_per_claim = PC_NOTIFY_BUCKETS;
  o.hang_ms = 200;
  o.max_failures = 1;
  pc_worker_t *w = start(db, reg, &o);
  put(db, "hg", "stuck", "in:c", "x");
  int seen = 0;
  for (int i = 0; i < 60000 && !seen; i++) {
    pthread_mutex_lock(&h.mu);
    seen = h.waiting;
    pthread_mutex_unlock(&h.mu);
    if (!seen) sleep_ms(1);
  }
  assert_true(seen);
  const char *rows[] = {"a", "b", "c", "d"};
  for (size_t i = 0; i < 4; i++) put(db, "hg", rows[i], "in:c", "y");
  wait_idle(db); /* the others ran, and the stuck one was parked */
  for (size_t i = 0; i < 4; i++) {
    char *v = get(db, "hg", rows[i], "out:c");
    assert_non_null(v);
    free(v);
  }
  listed_t l = parked(db);
  assert_int_equal(l.n, 1);
  assert_string_equal(l.row[0], "stuck");
  assert_non_null(strstr(l.error[0], "did not return"));
  pc_observer_stats_t s = stats_of(w, "hangs");
  assert_int_equal(s.parked, 1);
  assert_int_equal(s.runs, 4);
  pc_error_t err;
  assert_int_equal(pc_worker_stop_within(w, 300, &err), PC_TIMEOUT);
  assert_non_null(strstr(err.text, "'hangs' on hg/stuck/in:c"));
  pthread_mutex_lock(&h.mu);
  h.release = 1;
  pthread_cond_broadcast(&h.cv);
  pthread_mutex_unlock(&h.mu);
  stop(w);
  assert_null(get(db, "hg", "stuck", "out:c"));
  pc_registry_free(reg);
  pc_db_close(db);
  pthread_mutex_destroy(&h.mu);
  pthread_cond_destroy(&h.cv);
  tu_rmtree(dir);
}

/* Totals of observer name over every worker (pc_worker_totals). */
typedef struct total_of {
  const char *name;
  pc_observer_stats_t s;
} total_of_t;

static int total_one(void *ctx, const pc_observer_stats_t *t) {
  total_of_t *x = ctx;
  if (strcmp(t->name, x->name) == 0) x->s = *t;
  return 0;
}

static pc_observer_stats_t totals(pc_db_t *db, const char *name) {
  total_of_t x;
  memset(&x, 0, sizeof x);
  x.name = name;
  pc_error_t err;
  if (pc_worker_totals(db, total_one, &x, &err) != PC_OK) fail_msg("totals: %s", err.text);
  return x.s;
}

/* The counters of a worker killed with SIGKILL are not lost: those it had
 * written are in the store, and the rest in its journal, which the next
 * worker with that journal takes over, counting on from them. */
static void test_counters_survive_kill(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-counters");
  char journal[4096];
  snprintf(journal, sizeof journal, "%s/journal", dir);
  pc_db_t *db = tu_open(dir, 0);
  register_observed(db, "crashy", "cr", "in:c", PC_OBSERVER_STRONG);
  backfill_done(db, "crashy"); /* the column is empty: the notifications alone present the cells */
  for (int i = 0; i < 5; i++) {
    char row[16];
    snprintf(row, sizeof row, "r%d", i);
    put(db, "cr", row, "in:c", "v");
  }
  pc_db_close(db);
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* a worker that processes them, says so, and is killed */
    close(ready[0]);
    pc_db_t *cdb = tu_open(dir, 0);
    pc_observer_registry_t *reg = pc_registry_create();
    pc_observer_def_t d = {.name = "crashy", .table = "cr", .column = "in:c", .column_len = 4,
                           .kind = PC_OBSERVER_STRONG, .observe = obs_crashy};
    pc_error_t err;
    pc_worker_options_t o = crash_options(journal);
    pc_worker_t *w = reg && pc_registry_add(reg, &d, NULL, "test", &err) == PC_OK
                         ? pc_worker_start(cdb, reg, &o, &err)
                         : NULL;
    if (!w || pc_notify_wait(cdb, WAIT_MS, &err) != PC_OK) _exit(2);
    pc_worker_stats_t s;
    while (pc_worker_stats(w, &s, &err) == PC_OK && s.observers[0].runs < 5) {
      pc_free(s.observers);
      sleep_ms(1);
    }
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  char c;
  assert_int_equal(read(ready[0], &c, 1), 1);
  close(ready[0]);
  kill(pid, SIGKILL);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  /* a new worker on the same journal, with one more change to count */
  db = tu_open(dir, 0);
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "crashy", "cr", "in:c", PC_OBSERVER_STRONG, obs_crashy, NULL);
  pc_worker_options_t o = crash_options(journal);
  pc_worker_t *w = start(db, reg, &o);
  assert_int_equal(stats_of(w, "crashy").runs, 5);
  put(db, "cr", "r9", "in:c", "v");
  wait_idle(db);
  assert_int_equal(runs_of(w, "crashy", 6).runs, 6);
  stop(w); /* writes what it counted */
  pc_registry_free(reg);
  assert_int_equal(totals(db, "crashy").runs, 6);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- 7. arguments -------------------------------------------------------------- */

static void test_start_refuses(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-args");
  pc_db_t *db = tu_open(dir, 0);
  pc_observer_registry_t *reg = pc_registry_create();
  pc_error_t err;
  /* no observers: it would only delete notifications */
  assert_null(pc_worker_start(db, reg, NULL, &err));
  assert_int_equal(err.code, PC_INVALID);
  add_observer(reg, "mirror", "crash", "c:x", PC_OBSERVER_STRONG, obs_mirror, NULL);
  pc_worker_options_t o;
  pc_worker_options_default(&o);
  o.threads = 257;
  assert_null(pc_worker_start(db, reg, &o, &err));
  assert_non_null(strstr(err.text, "threads"));
  /* threads 0 (the default): a core each, of the cores the process may run on */
  cpu_set_t all, one;
  assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
  assert_int_equal(pc_worker_default_threads(), (uint32_t)CPU_COUNT(&all));
  int first = 0;
  while (!CPU_ISSET(first, &all)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  uint32_t pinned = pc_worker_default_threads();
  assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
  assert_int_equal(pinned, 1);
  pc_worker_options_default(&o);
  o.buckets_per_claim = PC_NOTIFY_BUCKETS + 1;
  assert_null(pc_worker_start(db, reg, &o, &err));
  assert_non_null(strstr(err.text, "buckets_per_claim"));
  /* 0 lets the worker choose: a claim a thread when it scans every bucket
   * alone, 128 when the workers of a cluster divide them */
  pc_worker_options_default(&o);
  assert_int_equal(pc_worker_claim_size(&o, 0), PC_WORKER_CLAIM_BUCKETS);
  o.buckets_per_claim = 0;
  assert_int_equal(pc_worker_claim_size(&o, 0), PC_NOTIFY_BUCKETS / pc_worker_default_threads());
  o.threads = 4;
  assert_int_equal(pc_worker_claim_size(&o, 0), PC_NOTIFY_BUCKETS / 4);
  assert_int_equal(pc_worker_claim_size(&o, 1), 128); /* the documented default (CONFIG.md) */
  o.threads = 3;
  assert_int_equal(pc_worker_claim_size(&o, 0), PC_NOTIFY_BUCKETS / 3);
  o.threads = 1;
  assert_int_equal(pc_worker_claim_size(&o, 0), PC_NOTIFY_BUCKETS);
  pc_worker_stop(NULL);
  /* the defaults start and stop cleanly, and with nothing to do wait returns */
  pc_worker_t *w = track(pc_worker_start(db, reg, NULL, &err));
  assert_non_null(w);
  wait_idle(db);
  /* and their threads (a core each) run observers */
  register_observed(db, "mirror", "crash", "c:x", PC_OBSERVER_STRONG);
  put(db, "crash", "d", "c:x", "vd");
  wait_idle(db);
  char *m = get(db, "mirror", "d", "m:x");
  if (!m || strcmp(m, "vd") != 0) fail_msg("mirror/d = '%s', want vd", m ? m : "(none)");
  free(m);
  stop(w);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}


/* ---- 7. registered observers are the authority ------------------------------- */

#define TWO "two"
#define NROWS 8

/* Copies the notified cell's value (or "-" when it is gone) to the row's
 * column seen:<observer>, the observer's name being its state; the weak
 * observer b.poke copies p:v instead (what the writer set with its weak
 * notification). */
static pc_status_t obs_copy(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                            pc_error_t *err) {
  const char *name = state;
  char seen[80], col[64], *v = NULL;
  snprintf(seen, sizeof seen, "seen:%s", name);
  if (strstr(name, "poke")) snprintf(col, sizeof col, "p:v");
  else snprintf(col, sizeof col, "%.*s", (int)c->column_len, c->column);
  pc_status_t st = oget(t, c->table, c->row, c->row_len, col, &v, err);
  if (st != PC_OK && st != PC_NOT_FOUND) return st;
  pc_error_clear(err);
  st = oset(t, c->table, c->row, c->row_len, seen, v ? v : "-", err);
  free(v);
  return st;
}

/* Set a: a.shared (strong, s:v) and a.own (strong, a:v); set b: b.shared
 * (strong, s:v), b.own (strong, b:v) and b.poke (weak, s:v). s:v is
 * observed by both sets, a:v and b:v by one each. */
static pc_observer_registry_t *pair_set(char which) {
  pc_observer_registry_t *reg = pc_registry_create();
  if (which == 'a') {
    add_observer(reg, "a.shared", TWO, "s:v", PC_OBSERVER_STRONG, obs_copy, "a.shared");
    add_observer(reg, "a.own", TWO, "a:v", PC_OBSERVER_STRONG, obs_copy, "a.own");
  } else {
    add_observer(reg, "b.shared", TWO, "s:v", PC_OBSERVER_STRONG, obs_copy, "b.shared");
    add_observer(reg, "b.own", TWO, "b:v", PC_OBSERVER_STRONG, obs_copy, "b.own");
    add_observer(reg, "b.poke", TWO, "s:v", PC_OBSERVER_WEAK, obs_copy, "b.poke");
  }
  return reg;
}

/* Whether seen:<observer> of row equals col's value ("-" when absent). */
static int seen_latest(pc_db_t *db, const char *row, const char *observer, const char *col) {
  char seen[80];
  snprintf(seen, sizeof seen, "seen:%s", observer);
  char *v = get(db, TWO, row, col), *s = get(db, TWO, row, seen);
  int ok = s && strcmp(s, v ? v : "-") == 0;
  free(v);
  free(s);
  return ok;
}

/* Fails naming the first (row, observer) whose seen cell is not the latest. */
static void all_seen(pc_db_t *db, const char *const *observers, const char *const *cols, size_t n) {
  char row[16];
  for (int r = 0; r < NROWS; r++) {
    snprintf(row, sizeof row, "r%d", r);
    for (size_t i = 0; i < n; i++)
      if (!seen_latest(db, row, observers[i], cols[i])) {
        char seen[80];
        snprintf(seen, sizeof seen, "seen:%s", observers[i]);
        char *v = get(db, TWO, row, cols[i]), *sv = get(db, TWO, row, seen);
        fail_msg("%s of %s: saw '%s', the latest is '%s'", observers[i], row, sv ? sv : "(none)",
                 v ? v : "-");
      }
  }
}

typedef struct pair_writer {
  pc_db_t *db;
  int id, ops;
} pair_writer_t;

/* Random changes to rows r0..r7: sets and deletes of s:v, sets of a:v and
 * b:v, and p:v with a weak notification of s:v; a conflict is retried. */
static void *pair_write_main(void *arg) {
  pair_writer_t *pw = arg;
  unsigned seed = (unsigned)pw->id * 7919u + 1;
  for (int i = 0; i < pw->ops; i++) {
    char row[16], val[32];
    snprintf(row, sizeof row, "r%d", (int)(rand_r(&seed) % NROWS));
    snprintf(val, sizeof val, "w%d.%d", pw->id, i);
    int op = (int)(rand_r(&seed) % 10);
    for (int attempt = 0; attempt < 100; attempt++) {
      pc_error_t err;
      pc_txn_t *t = pc_txn_begin(pw->db, &err);
      if (!t) fail_msg("begin: %s", err.text);
      pc_status_t st;
      if (op < 4) st = oset(t, TWO, row, strlen(row), "s:v", val, &err);
      else if (op == 4) st = pc_txn_delete(t, TWO, row, strlen(row), "s:v", 3, &err);
      else if (op < 7) st = oset(t, TWO, row, strlen(row), "a:v", val, &err);
      else if (op < 9) st = oset(t, TWO, row, strlen(row), "b:v", val, &err);
      else {
        st = oset(t, TWO, row, strlen(row), "p:v", val, &err);
        if (st == PC_OK) st = pc_txn_notify_weak(t, TWO, row, strlen(row), "s:v", 3, &err);
      }
      if (st == PC_OK) st = pc_txn_commit(t, &err);
      pc_txn_destroy(t);
      if (st == PC_OK) break;
      if (st != PC_CONFLICT && st != PC_LOCKED) fail_msg("writer: %s", err.text);
    }
  }
  return NULL;
}

static const char *const pair_obs[] = {"a.shared", "a.own", "b.shared", "b.own"};
static const char *const pair_cols[] = {"s:v", "a:v", "s:v", "b:v"};

/* Changes to every column of every row while only set a runs; returns once
 * a's observers saw theirs. */
static void late_changes(pc_db_t *db) {
  char row[16];
  for (int r = 0; r < NROWS; r++) {
    snprintf(row, sizeof row, "r%d", r);
    put(db, TWO, row, "s:v", "late-s");
    put(db, TWO, row, "a:v", "late-a");
    put(db, TWO, row, "b:v", "late-b");
  }
  for (int i = 0; i < 30000; i++) {
    int ok = 1;
    for (int r = 0; r < NROWS && ok; r++) {
      snprintf(row, sizeof row, "r%d", r);
      ok = seen_latest(db, row, "a.shared", "s:v") && seen_latest(db, row, "a.own", "a:v");
    }
    if (ok) break;
    sleep_ms(2);
  }
  all_seen(db, pair_obs, pair_cols, 2);
}

/* b's changes stay pending: no worker runs its observers, and nobody
 * deleted their notifications. */
static void b_waits(pc_db_t *db) {
  char row[16];
  for (int r = 0; r < NROWS; r++) {
    snprintf(row, sizeof row, "r%d", r);
    assert_false(seen_latest(db, row, "b.shared", "s:v"));
    assert_false(seen_latest(db, row, "b.own", "b:v"));
  }
  assert_true(pending(db) >= 2 * NROWS);
}

/* Fails when a's worker passed over the cells of s:v more than a few times
 * each (the waits double) in a second since before: a loop, not looks. */
static void a_does_not_spin(pc_worker_t *wa, pc_observer_stats_t before) {
  sleep_ms(1000);
  pc_observer_stats_t after = stats_of(wa, "a.shared");
  uint64_t passes = after.skipped + after.runs - before.skipped - before.runs;
  if (passes > 4 * NROWS)
    fail_msg("a.shared passed %" PRIu64 " times over %d cells", passes, NROWS);
}

/* A worker with b's observers, started now on db, processes what waited
 * for them: then every observer saw the latest, and nothing is pending. */
static void b_drains(pc_db_t *db, pc_db_t *db_b, const pc_worker_options_t *o) {
  pc_observer_registry_t *rb = pair_set('b');
  pc_worker_t *wb = start(db_b, rb, o);
  wait_idle(db);
  all_seen(db, pair_obs, pair_cols, 4);
  assert_int_equal(pending(db), 0);
  stop(wb);
  pc_registry_free(rb);
}

/* Two workers with different observer sets on one store, each observing a
 * column the other does not and both the column s:v: with writers running
 * throughout, once both ran and wait returned, every registered observer has
 * seen the latest of every cell of its column (none consumed the other's
 * changes). Then one worker stops: its observers' changes stay pending while
 * the other goes on with its own (without passing again and again over the
 * cells it is done with), wait does not return, and a worker with those
 * observers, started later, processes them. */
static void test_workers_with_different_observers(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-pair");
  pc_db_t *db = tu_open(dir, 0);
  pc_db_t *db_b = tu_cluster_mode() ? tu_open(dir, 0) : db; /* another client in a cluster */
  pc_observer_registry_t *ra = pair_set('a'), *rb = pair_set('b');
  pc_worker_options_t o = quick_options(2);
  pc_worker_t *wa = start(db, ra, &o), *wb = start(db_b, rb, &o);
  pair_writer_t pw[2] = {{db, 1, 80}, {db_b, 2, 80}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, pair_write_main, &pw[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  wait_idle(db);
  all_seen(db, pair_obs, pair_cols, 4);
  char row[16];
  for (int r = 0; r < NROWS; r++) { /* the weak observer saw every p:v set with a notification */
    snprintf(row, sizeof row, "r%d", r);
    char *p = get(db, TWO, row, "p:v"), *sp = get(db, TWO, row, "seen:b.poke");
    if (p && (!sp || strcmp(p, sp) != 0)) fail_msg("b.poke of %s saw '%s', want '%s'", row, sp, p);
    free(p);
    free(sp);
  }

  /* b's worker stops; changes to every column: a's observers see theirs,
   * b's wait, and a's worker does not keep passing over the cells it is
   * done with */
  stop(wb);
  late_changes(db);
  b_waits(db);
  pc_error_t err;
  assert_int_equal(pc_notify_wait(db, 300, &err), PC_TIMEOUT);
  a_does_not_spin(wa, stats_of(wa, "a.shared"));
  b_drains(db, db_b, &o);
  stop(wa);
  pc_registry_free(ra);
  pc_registry_free(rb);
  if (db_b != db) pc_db_close(db_b);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* Copies the notified cell's value to m:<column>, counting its runs; while
 * its stall counter is above zero it fails once the counter runs out (a
 * worker that cannot go on), else it counts the stall down. */
typedef struct copier {
  atomic_int runs, stall;
} copier_t;

static pc_status_t obs_count_copy(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                                  pc_error_t *err) {
  copier_t *k = state;
  if (atomic_load(&k->stall) == 1) return pc_error_set(err, PC_UNAVAILABLE, "stalled");
  if (atomic_load(&k->stall) > 1) atomic_fetch_sub(&k->stall, 1);
  char col[64], seen[80], *v = NULL;
  snprintf(col, sizeof col, "%.*s", (int)c->column_len, c->column);
  snprintf(seen, sizeof seen, "m:%s", col);
  pc_status_t st = oget(t, c->table, c->row, c->row_len, col, &v, err);
  if (st != PC_OK && st != PC_NOT_FOUND) return st;
  pc_error_clear(err);
  st = oset(t, c->table, c->row, c->row_len, seen, v ? v : "-", err);
  free(v);
  if (st == PC_OK) atomic_fetch_add(&k->runs, 1);
  return st;
}

/* The backfill's progress of observer name: cells presented, and its state. */
typedef struct progress {
  const char *name;
  uint64_t presented;
  int state;
} progress_t;

static int progress_of(void *ctx, const pc_observer_info_t *o) {
  progress_t *p = ctx;
  if (!o->problem && o->name_len == strlen(p->name) && memcmp(o->name, p->name, o->name_len) == 0) {
    p->presented = o->presented;
    p->state = o->state;
  }
  return 0;
}

#define EARLY 150 /* more than a backfill page */
#define STALL 30  /* the first worker's backfill gets this far */

/* Registration misses nothing: cells written before any worker ran (and
 * before the observers' registration) are observed, each once, by the strong
 * observer, and by the weak one; a worker whose backfill stopped half-way
 * (its observer could not go on) leaves it to the next, which goes on from
 * where it stopped without presenting those cells again; a client opened
 * before the registration, writing right after it, is observed too. */
/* Observers registered while a worker runs, by a worker that then stops:
 * the running worker's view lacks them until it reads the registrations
 * again, so the store refuses its deletions of the shared column's
 * notifications. It must not pass over those cells again and again
 * meanwhile (a few looks per cell, as for cells waiting for another
 * worker), and the changes wait for the new observers, which see them once
 * a worker runs them. */
static void test_late_registration_no_spin(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-late");
  pc_db_t *db = tu_open(dir, 0);
  pc_observer_registry_t *ra = pair_set('a'), *rb = pair_set('b');
  pc_worker_options_t o = quick_options(2);
  pc_worker_t *wa = start(db, ra, &o);
  stop(start(db, rb, &o)); /* b's observers: registered, run by nobody */
  pc_observer_stats_t before = stats_of(wa, "a.shared");
  late_changes(db);
  a_does_not_spin(wa, before);
  b_waits(db);
  b_drains(db, db, &o);
  stop(wa);
  pc_registry_free(ra);
  pc_registry_free(rb);
  pc_db_close(db);
  tu_rmtree(dir);
}

static void test_registration_misses_nothing(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-late");
  pc_db_t *writer = tu_open(dir, 0); /* opened before every registration */
  char row[16], val[16];
  for (int i = 0; i < EARLY; i += 10) {
    pc_txn_t *t = begin(writer);
    for (int j = i; j < i + 10; j++) {
      snprintf(row, sizeof row, "e%03d", j);
      snprintf(val, sizeof val, "v%d", j);
      tu_set(t, "late", row, "x:v", val);
      tu_set(t, "late", row, "y:v", val);
    }
    commit(t);
  }
  pc_txn_t *t = begin(writer);
  pc_error_t err;
  assert_int_equal(pc_txn_delete(t, "late", "e007", 4, "x:v", 3, &err), PC_OK);
  commit(t);
  pc_db_t *db = tu_cluster_mode() ? tu_open(dir, 0) : writer;
  copier_t kx = {0}, ky = {0};
  atomic_store(&kx.stall, STALL + 1); /* x stops after STALL runs */
  pc_worker_options_t o = quick_options(2);
  o.max_failures = 1000; /* stalled, not parked */
  pc_observer_registry_t *reg = pc_registry_create();
  add_observer(reg, "x", "late", "x:v", PC_OBSERVER_STRONG, obs_count_copy, &kx);
  pc_worker_t *w = track(pc_worker_start(db, reg, &o, &err));
  if (!w) fail_msg("pc_worker_start: %s", err.text);
  progress_t px = {"x", 0, 0};
  for (int i = 0; i < 60000 && px.presented < STALL; i++) {
    assert_int_equal(pc_db_observers(db, progress_of, &px, &err), PC_OK);
    if (px.presented < STALL) sleep_ms(1);
  }
  assert_int_equal(px.presented, STALL);
  assert_int_equal(px.state, PC_BACKFILL_RUNNING);
  stop(w);
  pc_registry_free(reg);
  assert_int_equal(atomic_load(&kx.runs), STALL);

  /* the next worker of x, with the weak y, goes on */
  atomic_store(&kx.stall, 0);
  reg = pc_registry_create();
  add_observer(reg, "x", "late", "x:v", PC_OBSERVER_STRONG, obs_count_copy, &kx);
  add_observer(reg, "y", "late", "y:v", PC_OBSERVER_WEAK, obs_count_copy, &ky);
  w = track(pc_worker_start(db, reg, &o, &err));
  if (!w) fail_msg("pc_worker_start: %s", err.text);
  /* right after the registration, a client opened long before writes */
  for (int j = EARLY; j < EARLY + 20; j++) {
    snprintf(row, sizeof row, "e%03d", j);
    snprintf(val, sizeof val, "v%d", j);
    put(writer, "late", row, "x:v", val);
  }
  wait_idle(writer);
  for (int j = 0; j < EARLY + 20; j++) {
    snprintf(row, sizeof row, "e%03d", j);
    char *v = get(writer, "late", row, "x:v"), *m = get(writer, "late", row, "m:x:v");
    if (j == 7 ? m != NULL : !(v && m && strcmp(v, m) == 0))
      fail_msg("x of %s: saw '%s', the value is '%s'", row, m ? m : "(nothing)", v ? v : "-");
    free(v);
    free(m);
    if (j < EARLY) {
      char *y = get(writer, "late", row, "m:y:v");
      if (!y) fail_msg("the weak observer y did not see %s", row);
      free(y);
    }
  }
  /* once per cell: those the first worker saw were not presented again */
  assert_int_equal(atomic_load(&kx.runs), EARLY - 1 + 20);
  assert_int_equal(atomic_load(&ky.runs), EARLY);
  px.presented = 0;
  assert_int_equal(pc_db_observers(db, progress_of, &px, &err), PC_OK);
  assert_int_equal(px.state, PC_BACKFILL_DONE);
  stop(w);
  pc_registry_free(reg);
  if (db != writer) pc_db_close(db);
  pc_db_close(writer);
  tu_rmtree(dir);
}

/* An observer removed (`percolator observers remove`) while a delete of its
 * column was pending, a worker's pass meanwhile (the delete's notification
 * goes: no registered observer waits for it), then the observer registered
 * again under its name: its backfill presents the deleted cell too, since
 * the observer's ack shows it ran on it, so what it derived from it goes. */
static void test_reregistered_learns_deletes(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("worker-rereg");
  pc_db_t *db = tu_open(dir, 0);
  pc_error_t err;
  copier_t kx = {0}, kz = {0};
  pc_worker_options_t o = quick_options(2);
  pc_observer_registry_t *rx = pc_registry_create(), *rz = pc_registry_create();
  add_observer(rx, "x", "rereg", "x:v", PC_OBSERVER_STRONG, obs_count_copy, &kx);
  add_observer(rz, "z", "rereg", "z:v", PC_OBSERVER_STRONG, obs_count_copy, &kz);
  pc_worker_t *w = start(db, rx, &o);
  put(db, "rereg", "r1", "x:v", "a");
  put(db, "rereg", "r2", "x:v", "b");
  wait_idle(db);
  char *m = get(db, "rereg", "r1", "m:x:v");
  assert_non_null(m);
  assert_string_equal(m, "a");
  free(m);
  stop(w);

  pc_txn_t *t = begin(db);
  assert_int_equal(pc_txn_delete(t, "rereg", "r1", 2, "x:v", 3, &err), PC_OK);
  commit(t);
  int found = 0;
  assert_int_equal(pc_db_unregister_observed(db, "x", 1, &found, &err), PC_OK);
  assert_true(found);
  w = start(db, rz, &o); /* a pass of another worker: the delete's notification goes */
  put(db, "rereg", "r3", "z:v", "c");
  wait_idle(db);
  assert_int_equal(pending(db), 0);
  stop(w);

  w = start(db, rx, &o); /* x comes back: registered again, backfilled */
  wait_idle(db);
  m = get(db, "rereg", "r1", "m:x:v");
  if (!m || strcmp(m, "-") != 0)
    fail_msg("x registered again did not learn that r1 was deleted: it still holds '%s'",
             m ? m : "(nothing)");
  free(m);
  m = get(db, "rereg", "r2", "m:x:v");
  assert_non_null(m);
  assert_string_equal(m, "b");
  free(m);
  stop(w);
  pc_registry_free(rx);
  pc_registry_free(rz);
  pc_db_close(db);
  tu_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_start_refuses, stop_leftovers),
      cmocka_unit_test_teardown(test_chain_converges, stop_leftovers),
      cmocka_unit_test_teardown(test_strong_once_and_latest, stop_leftovers),
      cmocka_unit_test_teardown(test_ack_skips_a_change_seen_again, stop_leftovers),
      cmocka_unit_test_teardown(test_wait_sees_timestamps_taken, stop_leftovers),
      cmocka_unit_test_teardown(test_derived_data_exact, stop_leftovers),
      cmocka_unit_test_teardown(test_crashed_writer_rolled_forward, stop_leftovers),
      cmocka_unit_test_teardown(test_weak_coalesce_and_rerun, stop_leftovers),
      cmocka_unit_test_teardown(test_failures_parked_and_retried, stop_leftovers),
      cmocka_unit_test_teardown(test_workers_with_different_observers, stop_leftovers),
      cmocka_unit_test_teardown(test_late_registration_no_spin, stop_leftovers),
      cmocka_unit_test_teardown(test_registration_misses_nothing, stop_leftovers),
      cmocka_unit_test_teardown(test_reregistered_learns_deletes, stop_leftovers),
      cmocka_unit_test_teardown(test_batches, stop_leftovers),
      cmocka_unit_test_teardown(test_batch_wait, stop_leftovers),
      cmocka_unit_test_teardown(test_batch_halves, stop_leftovers),
      cmocka_unit_test_teardown(test_backoff_waits, stop_leftovers),
      cmocka_unit_test_teardown(test_crash_parked, stop_leftovers),
      cmocka_unit_test_teardown(test_hung_observer_given_up, stop_leftovers),
      cmocka_unit_test_teardown(test_counters_survive_kill, stop_leftovers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
