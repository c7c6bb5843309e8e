/* test_observer_pair.c — two observers of one cell, replayed step by step:
 * runs of different observers on one cell are serial (docs/OBSERVERS.md,
 * "Guarantees"), so that a pair of observers that derive the same cells from
 * it stays exact whatever the order in which their runs interleave.
 *
 * The store is served in this process as `percolator worker --data DIR`
 * serves it (an oracle and a tablet over DIR, daemon.h), and the workers are
 * clients of it through two database handles, as a second worker process
 * would be: the observers of one handle's workers share its claims, so two
 * runs on one cell meet only across handles (or processes).
 *
 * The interleaving, for a strong observer S and a weak observer W of cell c
 * that both keep d = c (the shape of dedup's dedup.index and
 * dedup.index.weak, which keep a cluster's index = its canonical):
 *   1. c = v1, d = v1; the worker of S stops;
 *   2. c = v2 (S's notification waits); a weak notification of c: W runs,
 *      reads c = v2 and d = v1, writes d = v2, and is held before it returns;
 *   3. c = v1 again; the worker of S starts: S reads c = v1 and d = v1, and
 *      commits with nothing to write;
 *   4. W is let go. Its commit must conflict (it read d before S committed,
 *      and S's decision rested on d): W runs again and finds d = c. Before
 *      the turn of a cell, W committed d = v2 and nothing ever ran again.
 * test_dedup_pair replays it with the dedup plugin itself (dedup.so, its
 * three observers split over three workers so that each can be stopped and
 * held alone), and checks that the cluster's index names its canonical.
 *
 * test_dedup_batch_moves is the dedup observer's batched run on documents
 * that move between clusters together: one batch in which a cluster's
 * canonical leaves, then the next canonical leaves too, then a member joins,
 * and another cluster gains two members. Each document's run goes by the
 * canonical that the batch's earlier runs left (apps/dedup/dedup.c,
 * observe_docs), so a canonical that was read ahead and since changed would
 * show here as a canonical that is not the smallest member. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
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
#include "daemon/daemon_internal.h"
#include "notify/worker.h"
#include "observers/plugin.h"
#include "observers/registry.h"
#include "tests/testutil.h"

/* Under ThreadSanitizer: LevelDB comes from the system, uninstrumented, and
 * its memtable's publication of entries to concurrent readers is reported
 * as a race inside libleveldb; those reports are suppressed, as in
 * test_worker.c. */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "race:libleveldb.so\n"; }
#endif

#define WAIT_MS 60000u /* bound on every wait */

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- the served store and its clients --------------------------------------- */

typedef struct served {
  char *dir;
  pc_daemon_config_t cfg;
  pc_daemon_t *d;
  pc_config_t *client;
} served_t;

static void serve(served_t *s, const char *tag) {
  pc_error_t err;
  int fresh;
  memset(s, 0, sizeof *s);
  s->dir = tu_mkdtemp(tag);
  if (pc_data_dir_prepare(s->dir, 1, &fresh, &err) != PC_OK) fail_msg("prepare: %s", err.text);
  if (pc_daemon_config_serving(NULL, s->dir, &s->cfg, &err) != PC_OK)
    fail_msg("serving configuration: %s", err.text);
  pc_daemon_spec_t spec = {0};
  spec.tso = 1;
  spec.tablets = 2;
  spec.lock_dir = s->dir;
  spec.lock_wait_ms = 1000;
  if (!(s->d = pc_daemon_start(&s->cfg, &spec, &err))) fail_msg("serving: %s", err.text);
  if (!(s->client = pc_daemon_client_config(s->d, &err))) fail_msg("client: %s", err.text);
}

static pc_db_t *client(served_t *s) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_parsed_config(s->client, 0, &err);
  if (!db) fail_msg("a client of the served store: %s", err.text);
  return db;
}

static void unserve(served_t *s) {
  pc_config_free(s->client);
  pc_daemon_stop(s->d);
  pc_daemon_config_free(&s->cfg);
  tu_rmtree(s->dir);
}

/* ---- transactions ---------------------------------------------------------------- */

static pc_txn_t *begin(pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("pc_txn_begin: %s", err.text);
  return t;
}

static void commit(pc_txn_t *t) {
  pc_error_t err;
  pc_status_t st = pc_txn_commit(t, &err);
  if (st != PC_OK) fail_msg("commit: %s (%s)", pc_status_name(st), err.text);
  pc_txn_destroy(t);
}

static void put(pc_db_t *db, const char *table, const char *row, const char *col,
                const char *val) {
  pc_txn_t *t = begin(db);
  tu_set(t, table, row, col, val);
  commit(t);
}

static void del(pc_db_t *db, const char *table, const char *row, const char *col) {
  pc_txn_t *t = begin(db);
  pc_error_t err;
  if (pc_txn_delete(t, table, row, strlen(row), col, strlen(col), &err) != PC_OK)
    fail_msg("pc_txn_delete: %s", err.text);
  commit(t);
}

static void notify_weak(pc_db_t *db, const char *table, const char *row, const char *col) {
  pc_txn_t *t = begin(db);
  pc_error_t err;
  if (pc_txn_notify_weak(t, table, row, strlen(row), col, strlen(col), &err) != PC_OK)
    fail_msg("pc_txn_notify_weak: %s", err.text);
  commit(t);
}

/* The committed value (malloc'd, NUL-terminated) or NULL. */
static char *get(pc_db_t *db, const char *table, const char *row, const char *col) {
  pc_txn_t *t = begin(db);
  char *v = tu_get(t, table, row, col);
  pc_txn_destroy(t);
  return v;
}

static void wait_idle(pc_db_t *db) {
  pc_error_t err;
  pc_status_t st = pc_notify_wait(db, WAIT_MS, &err);
  if (st != PC_OK) fail_msg("pc_notify_wait: %s (%s)", pc_status_name(st), err.text);
}

/* ---- workers ----------------------------------------------------------------------- */

static pc_worker_options_t options(void) {
  pc_worker_options_t o;
  pc_worker_options_default(&o);
  o.threads = 2;
  o.idle_ms = 5;
  o.backoff_ms = 5;
  o.max_failures = 1000; /* conflicts are never parked anyway */
  o.hang_ms = 0;         /* a run held by the test is not given up */
  return o;
}

static pc_worker_t *start(pc_db_t *db, pc_observer_registry_t *reg) {
  pc_worker_options_t o = options();
  pc_error_t err;
  pc_worker_t *w = pc_worker_start(db, reg, &o, &err);
  if (!w) fail_msg("pc_worker_start: %s", err.text);
  return w;
}

/* Committed runs of observer name in w. */
static uint64_t runs_of(pc_worker_t *w, const char *name) {
  pc_worker_stats_t s;
  pc_error_t err;
  if (pc_worker_stats(w, &s, &err) != PC_OK) fail_msg("pc_worker_stats: %s", err.text);
  uint64_t n = 0;
  for (size_t i = 0; i < s.nobservers; i++)
    if (strcmp(s.observers[i].name, name) == 0) n = s.observers[i].runs;
  pc_free(s.observers);
  return n;
}

static void wait_runs(pc_worker_t *w, const char *name, uint64_t at_least) {
  for (unsigned i = 0; i < WAIT_MS && runs_of(w, name) < at_least; i++) sleep_ms(1);
  if (runs_of(w, name) < at_least) fail_msg("observer %s did not run", name);
}

/* ---- an observer held by the test ------------------------------------------------ */

/* Wraps an observer's callback: once armed, the next call runs the callback
 * and then waits, before returning (so before its run writes its ack and
 * commits), until the test lets it go. */
typedef struct hold {
  pc_observe_fn inner;
  void *inner_state;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int armed, held, go;
} hold_t;

static pc_status_t held_observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                                pc_error_t *err) {
  hold_t *h = state;
  pc_status_t st = h->inner(h->inner_state, txn, cell, err);
  pthread_mutex_lock(&h->mu);
  if (h->armed) {
    h->armed = 0;
    h->held = 1;
    pthread_cond_broadcast(&h->cv);
    while (!h->go) pthread_cond_wait(&h->cv, &h->mu);
  }
  pthread_mutex_unlock(&h->mu);
  return st;
}

static void hold_init(hold_t *h, pc_observe_fn inner, void *inner_state) {
  memset(h, 0, sizeof *h);
  h->inner = inner;
  h->inner_state = inner_state;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
}

static void hold_arm(hold_t *h) {
  pthread_mutex_lock(&h->mu);
  h->armed = 1;
  h->held = h->go = 0;
  pthread_mutex_unlock(&h->mu);
}

/* Waits (bounded) until the armed call is held. */
static void hold_reached(hold_t *h) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += WAIT_MS / 1000;
  pthread_mutex_lock(&h->mu);
  while (!h->held)
    if (pthread_cond_timedwait(&h->cv, &h->mu, &until) != 0) break;
  int held = h->held;
  pthread_mutex_unlock(&h->mu);
  if (!held) fail_msg("the held observer did not run");
}

static void hold_release(hold_t *h) {
  pthread_mutex_lock(&h->mu);
  h->go = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

static void hold_destroy(hold_t *h) {
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
}

static void add(pc_observer_registry_t *reg, const char *name, const char *table, const char *col,
                pc_observer_kind_t kind, pc_observe_fn fn, void *state,
                pc_observe_batch_fn batch, size_t batch_max) {
  pc_observer_def_t d = {.name = name, .table = table, .column = col, .column_len = strlen(col),
                         .kind = kind, .observe = fn, .state = state,
                         .observe_batch = batch, .batch_max = batch_max};
  pc_error_t err;
  if (pc_registry_add(reg, &d, NULL, "test", &err) != PC_OK)
    fail_msg("pc_registry_add %s: %s", name, err.text);
}

/* ---- two observers that keep d:v = c:v ---------------------------------------------- */

#define PAIR "pair"

/* Writes the cell's d:v when it differs from its c:v (deletes it when c:v is gone). */
static pc_status_t keep_copy(void *state, pc_txn_t *t, const pc_notified_cell_t *c,
                             pc_error_t *err) {
  (void)state;
  char *v = NULL, *d = NULL;
  size_t vn = 0, dn = 0;
  pc_status_t st = pc_txn_get(t, c->table, c->row, c->row_len, "c:v", 3, &v, &vn, err);
  if (st != PC_OK && st != PC_NOT_FOUND) return st;
  pc_status_t sd = pc_txn_get(t, c->table, c->row, c->row_len, "d:v", 3, &d, &dn, err);
  if (sd != PC_OK && sd != PC_NOT_FOUND) {
    pc_free(v);
    return sd;
  }
  pc_error_clear(err);
  int same = (st == PC_NOT_FOUND && sd == PC_NOT_FOUND) ||
             (st == PC_OK && sd == PC_OK && vn == dn && memcmp(v, d, vn) == 0);
  pc_status_t out = PC_OK;
  if (!same && st == PC_OK) out = pc_txn_set(t, c->table, c->row, c->row_len, "d:v", 3, v, vn, err);
  else if (!same) out = pc_txn_delete(t, c->table, c->row, c->row_len, "d:v", 3, err);
  pc_free(v);
  pc_free(d);
  return out;
}

static void test_pair_runs_serial(void **state) {
  (void)state;
  served_t s;
  serve(&s, "pair");
  pc_db_t *db1 = client(&s), *db2 = client(&s);
  hold_t h;
  hold_init(&h, keep_copy, NULL);
  pc_observer_registry_t *rs = pc_registry_create(), *rw = pc_registry_create();
  add(rs, "copy.strong", PAIR, "c:v", PC_OBSERVER_STRONG, keep_copy, NULL, NULL, 0);
  add(rw, "copy.weak", PAIR, "c:v", PC_OBSERVER_WEAK, held_observe, &h, NULL, 0);
  pc_worker_t *ws = start(db1, rs), *ww = start(db2, rw);

  put(db1, PAIR, "r", "c:v", "v1");
  wait_idle(db1);
  char *d = get(db1, PAIR, "r", "d:v");
  assert_non_null(d);
  assert_string_equal(d, "v1");
  free(d);

  pc_worker_stop(ws); /* 1 */
  put(db1, PAIR, "r", "c:v", "v2"); /* 2 */
  hold_arm(&h);
  notify_weak(db1, PAIR, "r", "c:v");
  hold_reached(&h); /* W read c = v2, d = v1, wrote d = v2 */
  put(db1, PAIR, "r", "c:v", "v1"); /* 3 */
  ws = start(db1, rs);
  wait_runs(ws, "copy.strong", 1); /* S read c = v1, d = v1: nothing to write */
  hold_release(&h); /* 4 */
  wait_idle(db1);
  char *c = get(db1, PAIR, "r", "c:v");
  d = get(db1, PAIR, "r", "d:v");
  if (!c || !d || strcmp(c, d) != 0)
    fail_msg("d:v is '%s' while c:v is '%s': the weak run committed what it read before the "
             "strong one", d ? d : "(none)", c ? c : "(none)");
  free(c);
  free(d);

  pc_worker_stop(ws);
  pc_worker_stop(ww);
  pc_registry_free(rs);
  pc_registry_free(rw);
  hold_destroy(&h);
  pc_db_close(db1);
  pc_db_close(db2);
  unserve(&s);
}

/* ---- the dedup plugin's index pair ------------------------------------------------- */

#define CONTENTS "alpha beta gamma"

static void test_dedup_pair(void **state) {
  (void)state;
  served_t s;
  serve(&s, "dedup-pair");
  pc_db_t *db1 = client(&s), *db2 = client(&s);
  pc_observer_registry_t *all = pc_registry_create();
  pc_plugin_t *plugin = NULL;
  pc_error_t err;
  if (pc_plugin_load(all, DEDUP_PLUGIN, "{}", &plugin, &err) != PC_OK)
    fail_msg("loading dedup: %s", err.text);
  const pc_observer_t *od = pc_registry_find(all, "dedup"),
                      *oi = pc_registry_find(all, "dedup.index"),
                      *ow = pc_registry_find(all, "dedup.index.weak");
  assert_non_null(od);
  assert_non_null(oi);
  assert_non_null(ow);
  /* each observer in a worker of its own, the weak one held when asked */
  hold_t h;
  hold_init(&h, ow->observe, ow->state);
  pc_observer_registry_t *rd = pc_registry_create(), *ri = pc_registry_create(),
                         *rw = pc_registry_create();
  add(rd, od->name, od->table, od->column, od->kind, od->observe, od->state, od->observe_batch,
      od->batch_max);
  add(ri, oi->name, oi->table, oi->column, oi->kind, oi->observe, oi->state, oi->observe_batch,
      oi->batch_max);
  add(rw, ow->name, ow->table, ow->column, ow->kind, held_observe, &h, NULL, 0);
  pc_worker_t *wd = start(db1, rd), *wi = start(db1, ri), *ww = start(db2, rw);

  /* a cluster of two documents: canonical u1, indexed under u1 */
  put(db1, "docs", "u1", "doc:contents", CONTENTS);
  put(db1, "docs", "u2", "doc:contents", CONTENTS);
  wait_idle(db1);
  char *hash = get(db1, "docs", "u1", "doc:hash");
  assert_non_null(hash);
  char *canon = get(db1, "dups", hash, "canonical"), *indexed = get(db1, "dups", hash, "indexed");
  assert_non_null(canon);
  assert_non_null(indexed);
  assert_string_equal(canon, "u1");
  assert_string_equal(indexed, "u1");
  free(canon);
  free(indexed);

  pc_worker_stop(wi); /* 1: the strong index observer stops */
  del(db1, "docs", "u1", "doc:contents"); /* 2: dedup makes u2 the canonical */
  for (unsigned i = 0; i < WAIT_MS; i++) {
    canon = get(db1, "dups", hash, "canonical");
    int moved = canon && strcmp(canon, "u2") == 0;
    free(canon);
    if (moved) break;
    sleep_ms(1);
  }
  canon = get(db1, "dups", hash, "canonical");
  assert_non_null(canon);
  assert_string_equal(canon, "u2");
  free(canon);
  hold_arm(&h);
  notify_weak(db1, "dups", hash, "canonical");
  hold_reached(&h); /* the weak run read canonical u2 and indexed u1: it re-indexes u2 */
  put(db1, "docs", "u1", "doc:contents", CONTENTS); /* 3: u1 is the canonical again */
  for (unsigned i = 0; i < WAIT_MS; i++) {
    canon = get(db1, "dups", hash, "canonical");
    int back = canon && strcmp(canon, "u1") == 0;
    free(canon);
    if (back) break;
    sleep_ms(1);
  }
  wi = start(db1, ri);
  wait_runs(wi, "dedup.index", 1); /* canonical u1, indexed u1: nothing to write */
  hold_release(&h); /* 4 */
  wait_idle(db1);
  canon = get(db1, "dups", hash, "canonical");
  indexed = get(db1, "dups", hash, "indexed");
  if (!canon || !indexed || strcmp(canon, indexed) != 0)
    fail_msg("cluster %s: indexed under '%s', its canonical is '%s'", hash,
             indexed ? indexed : "(none)", canon ? canon : "(none)");
  free(canon);
  free(indexed);
  free(hash);

  pc_worker_stop(wd);
  pc_worker_stop(wi);
  pc_worker_stop(ww);
  pc_registry_free(rd);
  pc_registry_free(ri);
  pc_registry_free(rw);
  pc_plugin_unload(plugin);
  pc_registry_free(all);
  hold_destroy(&h);
  pc_db_close(db1);
  pc_db_close(db2);
  unserve(&s);
}

/* The smallest member of cluster hash: its first m: column (malloc'd), or NULL. */
static char *smallest(pc_db_t *db, const char *hash) {
  pc_txn_t *t = begin(db);
  char end[80];
  snprintf(end, sizeof end, "%s", hash);
  size_t hl = strlen(hash);
  pc_error_t err;
  pc_scan_t *sc = pc_txn_scan(t, "dups", hash, hl, end, hl + 1, &err);
  assert_non_null(sc);
  char *min = NULL;
  while (!min && pc_scan_next(sc, &err) == PC_OK) {
    size_t cl;
    const char *c = pc_scan_column(sc, &cl);
    if (cl > 2 && memcmp(c, "m:", 2) == 0 && (min = malloc(cl - 1))) {
      memcpy(min, c + 2, cl - 2);
      min[cl - 2] = '\0';
    }
  }
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  return min;
}

/* Cluster of document url: its canonical is want, the smallest member, and
 * the index names it. */
static void assert_cluster(pc_db_t *db, const char *url, const char *want) {
  char *hash = get(db, "docs", url, "doc:hash");
  if (!hash) fail_msg("%s has no doc:hash", url);
  char *canon = get(db, "dups", hash, "canonical"), *min = smallest(db, hash),
       *indexed = get(db, "dups", hash, "indexed");
  if (!canon || !min || !indexed || strcmp(canon, want) != 0 || strcmp(min, want) != 0 ||
      strcmp(indexed, want) != 0)
    fail_msg("the cluster of %s: canonical '%s', smallest member '%s', indexed '%s'; want %s", url,
             canon ? canon : "(none)", min ? min : "(none)", indexed ? indexed : "(none)", want);
  free(canon);
  free(min);
  free(indexed);
  free(hash);
}

static void test_dedup_batch_moves(void **state) {
  (void)state;
  served_t s;
  serve(&s, "dedup-batch");
  pc_db_t *db = client(&s);
  pc_observer_registry_t *all = pc_registry_create();
  pc_plugin_t *plugin = NULL;
  pc_error_t err;
  if (pc_plugin_load(all, DEDUP_PLUGIN, "{}", &plugin, &err) != PC_OK)
    fail_msg("loading dedup: %s", err.text);
  pc_worker_options_t o = options();
  o.threads = 1; /* the cells notified together make one batch */
  pc_worker_t *w = pc_worker_start(db, all, &o, &err);
  if (!w) fail_msg("pc_worker_start: %s", err.text);
  /* cluster Z = {c2, c4, c6}, canonical c2; cluster Y = {y1} */
  put(db, "docs", "c2", "doc:contents", "zeta");
  put(db, "docs", "c4", "doc:contents", "zeta");
  put(db, "docs", "c6", "doc:contents", "zeta");
  put(db, "docs", "y1", "doc:contents", "ypsilon");
  wait_idle(db);
  assert_cluster(db, "c2", "c2");
  assert_cluster(db, "y1", "y1");
  pc_worker_stop(w);
  /* in one batch: c2 leaves Z for Y, c4 leaves Z (gone), c5 joins Z, c3 joins Y */
  put(db, "docs", "c2", "doc:contents", "ypsilon");
  del(db, "docs", "c4", "doc:contents");
  put(db, "docs", "c5", "doc:contents", "zeta");
  put(db, "docs", "c3", "doc:contents", "ypsilon");
  w = pc_worker_start(db, all, &o, &err);
  if (!w) fail_msg("pc_worker_start: %s", err.text);
  wait_idle(db);
  assert_int_equal(runs_of(w, "dedup"), 4); /* each document once */
  assert_cluster(db, "c6", "c5");
  assert_cluster(db, "y1", "c2");
  assert_cluster(db, "c3", "c2");
  assert_null(get(db, "docs", "c4", "doc:hash"));
  pc_worker_stop(w);
  pc_plugin_unload(plugin);
  pc_registry_free(all);
  pc_db_close(db);
  unserve(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pair_runs_serial),
      cmocka_unit_test(test_dedup_pair),
      cmocka_unit_test(test_dedup_batch_moves),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
