/* test_plugin.c — unit tests of the observer plugin host (observers/): the
 * registry's rules; the loader refusing each kind of bad plugin
 * (tests/plugins/) with a message naming the file and the reason, and
 * rolling back what a failed init registered; a good plugin's observers
 * registered as declared, and its callback, run in a real embedded
 * transaction, writing through the host's table; the example plugins
 * (observers/examples/), normalize_count's chain run by hand; and loading
 * the plugins a configuration lists. The paths of the plugins come from
 * compile definitions (tests/CMakeLists.txt). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "observers/plugin.h"
#include "observers/registry.h"
#include "tests/testutil.h"

static char *trace_dir, *trace_path;

/* The lines the test plugins traced since the last call (and forgets them). */
static char *take_trace(void) {
  FILE *f = fopen(trace_path, "r");
  char *text = calloc(1, 4096);
  assert_non_null(text);
  if (f) {
    size_t n = fread(text, 1, 4095, f);
    text[n] = '\0';
    fclose(f);
  }
  remove(trace_path);
  return text;
}

static void expect_trace(const char *want) {
  char *got = take_trace();
  if (strcmp(got, want) != 0) {
    fprintf(stderr, "trace: want\n%s\ngot\n%s\n", want, got);
    free(got);
    fail();
  }
  free(got);
}

static int setup(void **state) {
  (void)state;
  trace_dir = tu_mkdtemp("plugin-trace");
  if (asprintf(&trace_path, "%s/trace", trace_dir) < 0) return -1;
  setenv("PC_TEST_PLUGIN_TRACE", trace_path, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  unsetenv("PC_TEST_PLUGIN_TRACE");
  free(trace_path);
  tu_rmtree(trace_dir);
  return 0;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static void assert_contains(const char *text, const char *part) {
  if (!strstr(text, part)) {
    fprintf(stderr, "message: %s\nlacks:   %s\n", text, part);
    fail();
  }
}

/* Loading path with config fails with code, leaving the registry as it was;
 * the message starts with the path and contains reason. */
static void expect_refused_cfg(pc_observer_registry_t *reg, const char *path, const char *config,
                               pc_status_t code, const char *reason) {
  size_t before = pc_registry_count(reg);
  pc_plugin_t *h = (pc_plugin_t *)&h; /* must be reset to NULL */
  pc_error_t err;
  pc_status_t st = pc_plugin_load(reg, path, config, &h, &err);
  if (st != code || err.code != code) {
    fprintf(stderr, "%s: want %s, got %s: %s\n", path, pc_status_name(code), pc_status_name(st),
            err.text);
    fail();
  }
  assert_null(h);
  assert_int_equal(strncmp(err.text, path, strlen(path)), 0);
  assert_contains(err.text, base_name(path));
  assert_contains(err.text, reason);
  assert_int_equal(pc_registry_count(reg), before);
}

static void expect_refused(pc_observer_registry_t *reg, const char *path, pc_status_t code,
                           const char *reason) {
  expect_refused_cfg(reg, path, NULL, code, reason);
}

/* ---- the registry ------------------------------------------------------------ */

static pc_status_t noop(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                        pc_error_t *err) {
  (void)state, (void)txn, (void)cell, (void)err;
  return PC_OK;
}

static int freed;
static void count_free(void *state) {
  (void)state;
  freed++;
}

static pc_observer_def_t def_of(const char *name, const char *table, const char *column) {
  return (pc_observer_def_t){.name = name, .table = table, .column = column,
                             .column_len = column ? strlen(column) : 0,
                             .kind = PC_OBSERVER_STRONG, .observe = noop,
                             .state_free = count_free};
}

static void expect_add_error(pc_observer_registry_t *reg, const pc_observer_def_t *def,
                             const char *want) {
  pc_error_t err;
  assert_int_equal(pc_registry_add(reg, def, NULL, NULL, &err), PC_INVALID);
  assert_int_equal(err.code, PC_INVALID);
  if (strcmp(err.text, want) != 0) {
    fprintf(stderr, "want: %s\ngot:  %s\n", want, err.text);
    fail();
  }
}

static int collect(void *ctx, const pc_observer_t *obs) {
  char *out = ctx;
  strcat(out, obs->name);
  strcat(out, " ");
  return 0;
}

static void test_registry(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  assert_non_null(reg);
  int a, b;
  freed = 0;
  pc_observer_def_t d = def_of("n2", "docs", "c:a");
  assert_int_equal(pc_registry_add(reg, &d, &a, "plugin-a", NULL), PC_OK);
  d = def_of("n1", "docs", "c:a");
  assert_int_equal(pc_registry_add(reg, &d, &b, "plugin-b", NULL), PC_OK);
  d = def_of("n0", "docs", "c:b");
  d.kind = PC_OBSERVER_WEAK;
  assert_int_equal(pc_registry_add(reg, &d, &a, "plugin-a", NULL), PC_OK);
  d = def_of("n3", "apps", "c:\0z");
  d.column_len = 4; /* columns are bytes, NUL included */
  assert_int_equal(pc_registry_add(reg, &d, &b, NULL, NULL), PC_OK);
  assert_int_equal(pc_registry_count(reg), 4);

  /* the definition was copied: changing it afterwards changes nothing */
  char name[8] = "n9";
  d = def_of(name, "docs", "c:a");
  assert_int_equal(pc_registry_add(reg, &d, &a, NULL, NULL), PC_OK);
  name[1] = '8';
  assert_non_null(pc_registry_find(reg, "n9"));
  assert_null(pc_registry_find(reg, "n8"));

  /* lookup by (table, column), in name order; cap bounds what is stored */
  const pc_observer_t *found[4] = {0};
  assert_int_equal(pc_registry_lookup(reg, "docs", "c:a", 3, found, 4), 3);
  assert_string_equal(found[0]->name, "n1");
  assert_string_equal(found[1]->name, "n2");
  assert_string_equal(found[2]->name, "n9");
  assert_string_equal(found[0]->origin, "plugin-b");
  found[1] = NULL;
  assert_int_equal(pc_registry_lookup(reg, "docs", "c:a", 3, found, 1), 3);
  assert_null(found[1]);
  assert_int_equal(pc_registry_lookup(reg, "docs", "c:", 2, NULL, 0), 0);
  assert_int_equal(pc_registry_lookup(reg, "doc", "c:a", 3, NULL, 0), 0);
  assert_int_equal(pc_registry_lookup(reg, "apps", "c:\0z", 4, found, 4), 1);
  assert_string_equal(found[0]->name, "n3");
  assert_int_equal(found[0]->column_len, 4);
  assert_memory_equal(found[0]->column, "c:\0z", 5);
  assert_int_equal(pc_registry_lookup(reg, "apps", "c:", 2, NULL, 0), 0);
  assert_int_equal(pc_registry_lookup(reg, "docs", "c:b", 3, found, 4), 1);
  assert_int_equal(found[0]->kind, PC_OBSERVER_WEAK);

  char order[64] = "";
  assert_int_equal(pc_registry_foreach(reg, collect, order), 0);
  assert_string_equal(order, "n3 n1 n2 n9 n0 "); /* (table, column, name) */

  /* names are unique across tables and columns */
  d = def_of("n1", "other", "c:z");
  expect_add_error(reg, &d,
                   "observer 'n1' is already registered (on table 'docs' column 'c:a', by "
                   "plugin 'plugin-b')");
  d = def_of("n3", "docs", "c:a");
  expect_add_error(reg, &d, "observer 'n3' is already registered (on table 'apps' column "
                            "'c:\\x00z')");
  assert_int_equal(freed, 0); /* a refused state stays the caller's */

  /* malformed definitions */
  d = def_of(NULL, "docs", "c:a");
  expect_add_error(reg, &d, "observer name is NULL");
  d = def_of("", "docs", "c:a");
  expect_add_error(reg, &d, "observer name '' is empty (1..64 bytes of [A-Za-z0-9_.-])");
  d = def_of("a b", "docs", "c:a");
  expect_add_error(reg, &d,
                   "observer name 'a b' has a character outside [A-Za-z0-9_.-] (1..64 bytes of "
                   "[A-Za-z0-9_.-])");
  char longname[80];
  memset(longname, 'x', 65);
  longname[65] = '\0';
  d = def_of(longname, "docs", "c:a");
  expect_add_error(reg, &d,
                   "observer name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' is too long "
                   "(1..64 bytes of [A-Za-z0-9_.-])");
  longname[64] = '\0'; /* 64 bytes: fits */
  d = def_of(longname, "docs", "c:a");
  assert_int_equal(pc_registry_add(reg, &d, &a, NULL, NULL), PC_OK);
  d = def_of("t", NULL, "c:a");
  expect_add_error(reg, &d, "observer 't': table is NULL");
  d = def_of("t", "my table", "c:a");
  expect_add_error(reg, &d,
                   "observer 't': table name 'my table' has a character outside [A-Za-z0-9_.-] "
                   "(1..64 bytes of [A-Za-z0-9_.-])");
  d = def_of("t", "docs", "");
  expect_add_error(reg, &d, "observer 't': column is empty");
  d = def_of("t", "docs", "c:a");
  d.column_len = PC_MAX_COLUMN + 1;
  expect_add_error(reg, &d, "observer 't': column of 1025 bytes exceeds the limit of 1024");
  d = def_of("t", "docs", "c:a");
  d.kind = (pc_observer_kind_t)7;
  expect_add_error(reg, &d,
                   "observer 't': kind 7 is neither PC_OBSERVER_STRONG nor PC_OBSERVER_WEAK");
  d = def_of("t", "docs", "c:a");
  d.observe = NULL;
  expect_add_error(reg, &d, "observer 't': observe callback is NULL");
  expect_add_error(reg, NULL, "observer definition is NULL");
  assert_int_equal(pc_registry_count(reg), 6);

  /* removal by owner calls state_free; the others stay */
  assert_int_equal(pc_registry_remove_owner(reg, &a), 4);
  assert_int_equal(freed, 4);
  assert_int_equal(pc_registry_count(reg), 2);
  assert_null(pc_registry_find(reg, "n2"));
  assert_non_null(pc_registry_find(reg, "n1"));
  assert_int_equal(pc_registry_remove_owner(reg, &a), 0);
  /* the name is free again */
  d = def_of("n2", "docs", "c:a");
  assert_int_equal(pc_registry_add(reg, &d, &a, NULL, NULL), PC_OK);
  pc_registry_free(reg);
  assert_int_equal(freed, 7);
  pc_registry_free(NULL);
}

/* Readers looking up one column while observers of the columns sorted
 * around it come and go: they always find exactly that column's observers. */
typedef struct churn {
  pc_observer_registry_t *reg;
  atomic_int stop;
  atomic_int bad;
} churn_t;

static void *churn_reader(void *arg) {
  churn_t *c = arg;
  while (!atomic_load(&c->stop)) {
    const pc_observer_t *found[4] = {0};
    size_t n = pc_registry_lookup(c->reg, "docs", "c:m", 3, found, 4);
    if (n != 2 || strcmp(found[0]->name, "m1") != 0 || strcmp(found[1]->name, "m2") != 0 ||
        found[0]->column_len != 3)
      atomic_fetch_add(&c->bad, 1);
  }
  return NULL;
}

static void test_registry_concurrent(void **state) {
  (void)state;
  churn_t c = {.reg = pc_registry_create()};
  int fixed, churned;
  pc_observer_def_t d = def_of("m2", "docs", "c:m");
  d.state_free = NULL;
  assert_int_equal(pc_registry_add(c.reg, &d, &fixed, NULL, NULL), PC_OK);
  d.name = "m1";
  assert_int_equal(pc_registry_add(c.reg, &d, &fixed, NULL, NULL), PC_OK);
  pthread_t th[3];
  for (int k = 0; k < 3; k++) assert_int_equal(pthread_create(&th[k], NULL, churn_reader, &c), 0);
  for (int round = 0; round < 50; round++) {
    for (int k = 0; k < 40; k++) {
      char name[32], col[32];
      snprintf(name, sizeof name, "x%d", k);
      snprintf(col, sizeof col, k % 2 ? "c:a%d" : "c:z%d", k); /* before and after c:m */
      d = def_of(name, "docs", col);
      d.state_free = NULL;
      assert_int_equal(pc_registry_add(c.reg, &d, &churned, NULL, NULL), PC_OK);
    }
    assert_int_equal(pc_registry_count(c.reg), 42);
    assert_int_equal(pc_registry_remove_owner(c.reg, &churned), 40);
  }
  atomic_store(&c.stop, 1);
  for (int k = 0; k < 3; k++) pthread_join(th[k], NULL);
  assert_int_equal(atomic_load(&c.bad), 0);
  assert_int_equal(pc_registry_count(c.reg), 2);
  pc_registry_free(c.reg);
}

/* pc_observer_run's guarantees on what a callback returns. */
static pc_status_t fail_quiet(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                              pc_error_t *err) {
  (void)state, (void)txn, (void)cell;
  memset(err->text, 'x', sizeof err->text); /* no NUL at all */
  return *(const int *)state == 1 ? PC_CONFLICT : (pc_status_t)-3;
}

static pc_status_t fail_silent(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                               pc_error_t *err) {
  (void)state, (void)txn, (void)cell, (void)err;
  return PC_LOCKED;
}

static void test_observer_run(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("plugin-run");
  pc_db_t *db = tu_open(dir, 0);
  pc_observer_registry_t *reg = pc_registry_create();
  int one = 1, two = 2;
  pc_observer_def_t d = def_of("loud", "docs", "c:a");
  d.observe = fail_quiet;
  d.state = &one;
  d.state_free = NULL;
  assert_int_equal(pc_registry_add(reg, &d, NULL, NULL, NULL), PC_OK);
  d = def_of("odd", "docs", "c:a");
  d.observe = fail_quiet;
  d.state = &two;
  d.state_free = NULL;
  assert_int_equal(pc_registry_add(reg, &d, NULL, NULL, NULL), PC_OK);
  d = def_of("silent", "docs", "c:a");
  d.observe = fail_silent;
  d.state_free = NULL;
  assert_int_equal(pc_registry_add(reg, &d, NULL, NULL, NULL), PC_OK);

  pc_txn_t *txn = pc_txn_begin(db, NULL);
  pc_notified_cell_t cell = {"docs", "r", 1, "c:a", 3, 1};
  pc_error_t err;
  assert_int_equal(pc_observer_run(pc_registry_find(reg, "loud"), txn, &cell, &err), PC_CONFLICT);
  assert_int_equal(err.code, PC_CONFLICT);
  assert_int_equal(strncmp(err.text, "observer 'loud': xxxx", 21), 0);
  assert_true(strlen(err.text) < PC_ERROR_TEXT);
  assert_int_equal(pc_observer_run(pc_registry_find(reg, "odd"), txn, &cell, &err), PC_INTERNAL);
  assert_int_equal(strncmp(err.text, "observer 'odd' returned an unknown status -3: xxx", 49), 0);
  assert_int_equal(pc_observer_run(pc_registry_find(reg, "silent"), txn, &cell, &err), PC_LOCKED);
  assert_string_equal(err.text, "observer 'silent' failed: locked");
  assert_int_equal(pc_observer_run(pc_registry_find(reg, "silent"), txn, &cell, NULL), PC_LOCKED);
  assert_int_equal(pc_observer_run(NULL, txn, &cell, &err), PC_INVALID);
  pc_txn_destroy(txn);
  pc_registry_free(reg);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- refusing bad plugins ------------------------------------------------------ */

static void test_missing_file(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  char *path;
  if (asprintf(&path, "%s/no-such-plugin.so", trace_dir) < 0) abort();
  expect_refused(reg, path, PC_INVALID, "cannot load plugin: ");
  expect_refused(reg, path, PC_INVALID, "No such file or directory");
  free(path);
  /* a bare name is looked for in the working directory, not the library path */
  expect_refused(reg, "libc.so.6", PC_INVALID, "No such file or directory");
  /* not a shared object at all */
  char *text;
  if (asprintf(&text, "%s/text.so", trace_dir) < 0) abort();
  FILE *f = fopen(text, "w");
  assert_non_null(f);
  fputs("hello\n", f);
  fclose(f);
  expect_refused(reg, text, PC_INVALID, "cannot load plugin: ");
  free(text);

  pc_error_t err;
  pc_plugin_t *h;
  assert_int_equal(pc_plugin_load(reg, "", NULL, &h, &err), PC_INVALID);
  assert_string_equal(err.text, "pc_plugin_load: plugin path is empty");
  assert_int_equal(pc_plugin_load(NULL, PLUGIN_GOOD, NULL, &h, &err), PC_INVALID);
  assert_int_equal(pc_plugin_load(reg, PLUGIN_GOOD, NULL, NULL, &err), PC_INVALID);
  pc_registry_free(reg);
}

static void test_bad_descriptions(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  expect_refused(reg, PLUGIN_NO_MAGIC, PC_INVALID,
                 ": not a percolator observer plugin (no pc_plugin_magic)");
  expect_refused(reg, PLUGIN_BAD_MAGIC, PC_INVALID,
                 ": not a percolator observer plugin: pc_plugin_magic_t.magic is 0xdeadbeef, "
                 "expected 0x50435042 (PC_PLUGIN_MAGIC)");
  char want[256];
  snprintf(want, sizeof want, ": pc_plugin_magic_t.struct_size is 8, expected at least %zu",
           sizeof(pc_plugin_magic_t));
  expect_refused(reg, PLUGIN_SMALL_MAGIC, PC_INVALID, want);
  expect_refused(reg, PLUGIN_BAD_ABI, PC_INVALID,
                 ": pc_plugin_magic_t.abi_major is 2, this host implements observer ABI 1");
  expect_refused(reg, PLUGIN_NO_INIT, PC_INVALID,
                 ": not a percolator observer plugin (no pc_plugin_init)");
  /* a plugin that calls the library instead of the host's table does not
   * load: it is not linked to it, and the symbol is named */
  expect_refused(reg, PLUGIN_DIRECT_CALL, PC_INVALID, "undefined symbol: pc_status_name");
  expect_trace(""); /* no init was called: bad_abi's would have traced */
  pc_registry_free(reg);
}

static void test_failing_init_rolls_back(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  pc_observer_def_t d = def_of("resident", "docs", "in:x");
  d.state_free = NULL;
  assert_int_equal(pc_registry_add(reg, &d, NULL, NULL, NULL), PC_OK);

  expect_refused(reg, PLUGIN_FAIL_INIT, PC_INVALID, ": init failed: config says no");
  assert_null(pc_registry_find(reg, "fail_first"));
  assert_non_null(pc_registry_find(reg, "resident"));
  /* the registered observer's state was released; no teardown after a failed init */
  expect_trace("init fail_init\nfree fail_first\n");

  /* the second registration of a name fails; the first is removed again */
  expect_refused(reg, PLUGIN_DUP_INIT, PC_INVALID,
                 ": init failed: observer 'dup' is already registered (on table 'docs' column "
                 "'in:a', by plugin 'dup_init')");
  assert_null(pc_registry_find(reg, "dup"));
  expect_trace("refused dup#2\nfree dup#1\n");
  assert_int_equal(pc_registry_count(reg), 1);

  /* the same plugins fail the same way again: nothing was left behind */
  expect_refused(reg, PLUGIN_FAIL_INIT, PC_INVALID, ": init failed: config says no");
  expect_trace("init fail_init\nfree fail_first\n");
  pc_registry_free(reg);
}

/* ---- a good plugin ------------------------------------------------------------- */

static char *get(pc_db_t *db, const char *table, const char *row, const char *col) {
  pc_txn_t *t = pc_txn_begin(db, NULL);
  assert_non_null(t);
  char *v = tu_get(t, table, row, col);
  pc_txn_destroy(t);
  return v;
}

static void expect_cell(pc_db_t *db, const char *table, const char *row, const char *col,
                        const char *want) {
  char *v = get(db, table, row, col);
  if (want == NULL ? v != NULL : (v == NULL || strcmp(v, want) != 0)) {
    fprintf(stderr, "%s/%s/%s: want %s, got %s\n", table, row, col, want ? want : "(none)",
            v ? v : "(none)");
    free(v);
    fail();
  }
  free(v);
}

/* Commits (table, row, col) = val; returns the commit timestamp. */
static uint64_t write_cell(pc_db_t *db, const char *table, const char *row, const char *col,
                           const char *val) {
  pc_txn_t *t = pc_txn_begin(db, NULL);
  assert_non_null(t);
  tu_set(t, table, row, col, val);
  pc_error_t err;
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  uint64_t ts = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  assert_true(ts != 0);
  return ts;
}

/* What the worker will do for one notification: begin a transaction, run the
 * observer in it, commit on PC_OK (else abort). *start_ts and *commit_ts
 * (when not NULL) receive the transaction's timestamps. */
static pc_status_t run_observer(pc_db_t *db, const pc_observer_t *obs, const char *row,
                                uint64_t notify_ts, uint64_t *start_ts, uint64_t *commit_ts,
                                pc_error_t *err) {
  assert_non_null(obs);
  pc_txn_t *t = pc_txn_begin(db, err);
  assert_non_null(t);
  pc_notified_cell_t cell = {obs->table, row, strlen(row), obs->column, obs->column_len,
                             notify_ts};
  pc_status_t st = pc_observer_run(obs, t, &cell, err);
  if (start_ts) *start_ts = pc_txn_start_ts(t);
  if (st == PC_OK)
    st = pc_txn_commit(t, err);
  else
    pc_txn_abort(t);
  if (commit_ts) *commit_ts = pc_txn_commit_ts(t);
  pc_txn_destroy(t);
  return st;
}

static void test_good_plugin(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  /* a bad plugin first: the registry and the loader are fine afterwards */
  expect_refused(reg, PLUGIN_FAIL_INIT, PC_INVALID, ": init failed: config says no");
  expect_trace("init fail_init\nfree fail_first\n");

  pc_plugin_t *h = NULL;
  pc_error_t err;
  assert_int_equal(pc_plugin_load(reg, PLUGIN_GOOD, "{\"greeting\":\"hi\"}", &h, &err), PC_OK);
  assert_non_null(h);
  assert_int_equal(err.code, PC_OK);
  expect_trace("init {\"greeting\":\"hi\"}\n");
  assert_string_equal(pc_plugin_name(h), "good");
  assert_string_equal(pc_plugin_version(h), "2.3.4");
  assert_string_equal(pc_plugin_path(h), PLUGIN_GOOD);
  assert_int_equal(pc_plugin_abi_minor(h), PC_OBSERVER_ABI_MINOR);

  assert_int_equal(pc_registry_count(reg), 2);
  const pc_observer_t *obs[2];
  assert_int_equal(pc_registry_lookup(reg, "docs", "in:x", 4, obs, 2), 1);
  const pc_observer_t *strong = obs[0];
  assert_string_equal(strong->name, "good_strong");
  assert_string_equal(strong->table, "docs");
  assert_int_equal(strong->column_len, 4);
  assert_memory_equal(strong->column, "in:x", 4);
  assert_int_equal(strong->kind, PC_OBSERVER_STRONG);
  assert_string_equal(strong->origin, "good");
  assert_int_equal(pc_registry_lookup(reg, "docs", "in:y", 4, obs, 2), 1);
  const pc_observer_t *weak = obs[0];
  assert_string_equal(weak->name, "good_weak");
  assert_int_equal(weak->kind, PC_OBSERVER_WEAK);
  assert_ptr_equal(pc_registry_find(reg, "good_weak"), weak);

  /* the same library again: refused (its globals would be overwritten) */
  pc_plugin_t *h2 = NULL;
  assert_int_equal(pc_plugin_load(reg, PLUGIN_GOOD, NULL, &h2, &err), PC_INVALID);
  assert_null(h2);
  assert_contains(err.text, ": plugin 'good' is already loaded (from ");
  expect_trace("");
  assert_int_equal(pc_registry_count(reg), 2);

  /* the strong observer in a real transaction, writing through the host's table */
  char *dir = tu_mkdtemp("plugin-good");
  pc_db_t *db = tu_open(dir, 0);
  write_cell(db, "docs", "r1", "in:del", "doomed");
  uint64_t nts = write_cell(db, "docs", "r1", "in:x", "hello");
  uint64_t start_ts = 0, commit_ts = 0;
  assert_int_equal(run_observer(db, strong, "r1", nts, &start_ts, &commit_ts, &err), PC_OK);
  assert_true(start_ts > nts);
  assert_true(commit_ts > start_ts);
  char buf[64];
  expect_cell(db, "docs", "r1", "out:copy", "hello");
  expect_cell(db, "docs", "r1", "out:cells", "2"); /* in:del and in:x */
  snprintf(buf, sizeof buf, "%" PRIu64, start_ts);
  expect_cell(db, "docs", "r1", "out:start_ts", buf);
  snprintf(buf, sizeof buf, "%" PRIu64, nts);
  expect_cell(db, "docs", "r1", "out:notify_ts", buf);
  expect_cell(db, "docs", "r1", "out:weak", "ok: ");
  expect_cell(db, "docs", "r1", "out:late", "wrong_state"); /* registering after init */
  /* the calls of ABI 1.1 */
  expect_cell(db, "docs", "r1", "out:many", "hello|doomed|-");
  expect_cell(db, "docs", "r1", "out:set1", "one");
  expect_cell(db, "docs", "r1", "out:row", "in:del,in:x");
  expect_cell(db, "docs", "r1", "out:prefix", "1");
  expect_cell(db, "docs", "r1", "in:del", NULL);
  assert_null(pc_registry_find(reg, "late"));

  /* a failing run applies nothing, and says why */
  write_cell(db, "docs", "r2", "in:y", "fine");
  assert_int_equal(run_observer(db, weak, "r2", nts, NULL, NULL, &err), PC_OK);
  write_cell(db, "docs", "r2", "in:y", "fail");
  assert_int_equal(run_observer(db, weak, "r2", nts, NULL, NULL, &err), PC_IO_ERROR);
  assert_string_equal(err.text, "observer 'good_weak' failed: io_error");
  write_cell(db, "docs", "r2", "in:y", "weird");
  assert_int_equal(run_observer(db, weak, "r2", nts, NULL, NULL, &err), PC_INTERNAL);
  assert_string_equal(err.text, "observer 'good_weak' returned an unknown status 99");
  /* the strong observer on a row without its cell fails with the read's status */
  assert_int_equal(run_observer(db, strong, "r3", nts, NULL, NULL, &err), PC_NOT_FOUND);
  expect_cell(db, "docs", "r3", "out:cells", NULL);
  pc_db_close(db);
  tu_rmtree(dir);

  /* unloading: observers removed (state_free), then teardown */
  pc_plugin_unload(h);
  assert_int_equal(pc_registry_count(reg), 0);
  expect_trace("free good_strong\nfree good_weak\nteardown good\n");
  /* and it loads again */
  assert_int_equal(pc_plugin_load(reg, PLUGIN_GOOD, NULL, &h, &err), PC_OK);
  expect_trace("init {}\n");
  assert_int_equal(pc_registry_count(reg), 2);
  pc_plugin_unload(h);
  expect_trace("free good_strong\nfree good_weak\nteardown good\n");
  pc_plugin_unload(NULL);
  pc_registry_free(reg);
}

/* A plugin built against ABI 1.0's header loads into this host, which reads
 * only ABI 1.0's part of its observer definition (the bytes after it are
 * garbage), and its observer runs. */
static void test_old_abi_plugin(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  pc_plugin_t *h = NULL;
  pc_error_t err;
  assert_int_equal(pc_plugin_load(reg, PLUGIN_OLD_ABI, NULL, &h, &err), PC_OK);
  assert_int_equal(pc_plugin_abi_minor(h), 0);
  const pc_observer_t *o = pc_registry_find(reg, "old_strong");
  assert_non_null(o);
  assert_null(o->observe_batch);
  assert_int_equal(o->batch_max, 1);
  char *dir = tu_mkdtemp("plugin-old");
  pc_db_t *db = tu_open(dir, 0);
  uint64_t nts = write_cell(db, "docs", "r1", "in:o", "from 1.0");
  assert_int_equal(run_observer(db, o, "r1", nts, NULL, NULL, &err), PC_OK);
  expect_cell(db, "docs", "r1", "out:old", "from 1.0");
  pc_db_close(db);
  tu_rmtree(dir);
  pc_plugin_unload(h);
  pc_registry_free(reg);
}

/* ---- the examples ---------------------------------------------------------- */

static void test_template_example(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  pc_plugin_t *h = NULL;
  pc_error_t err;
  assert_int_equal(pc_plugin_load(reg, EXAMPLE_TEMPLATE, NULL, &h, &err), PC_OK);
  assert_string_equal(pc_plugin_name(h), "template");
  const pc_observer_t *obs = NULL;
  assert_int_equal(pc_registry_lookup(reg, "docs", "raw:text", 8, &obs, 1), 1);
  assert_string_equal(obs->name, "template");
  assert_int_equal(obs->kind, PC_OBSERVER_STRONG);

  char *dir = tu_mkdtemp("plugin-template");
  pc_db_t *db = tu_open(dir, 0);
  uint64_t nts = write_cell(db, "docs", "d1", "raw:text", "some text");
  uint64_t commit_ts = 1;
  assert_int_equal(run_observer(db, obs, "d1", nts, NULL, &commit_ts, &err), PC_OK);
  assert_int_equal(commit_ts, 0); /* it wrote nothing */
  /* a cell deleted since its notification is not an error */
  assert_int_equal(run_observer(db, obs, "d2", nts, NULL, NULL, &err), PC_OK);
  pc_db_close(db);
  tu_rmtree(dir);
  pc_plugin_unload(h);
  assert_int_equal(pc_registry_count(reg), 0);
  pc_registry_free(reg);
}

/* Runs normalize on row (as its notification would) and then, when it wrote
 * norm:text, count on it: the chain a worker follows. Returns whether
 * normalize wrote anything. */
static int run_chain(pc_db_t *db, const pc_observer_t *normalize, const pc_observer_t *count,
                     const char *row, uint64_t notify_ts) {
  pc_error_t err;
  uint64_t commit_ts = 0;
  if (run_observer(db, normalize, row, notify_ts, NULL, &commit_ts, &err) != PC_OK) {
    fprintf(stderr, "normalize: %s\n", err.text);
    fail();
  }
  if (commit_ts == 0) return 0;
  if (run_observer(db, count, row, commit_ts, NULL, NULL, &err) != PC_OK) {
    fprintf(stderr, "count: %s\n", err.text);
    fail();
  }
  return 1;
}

static void test_normalize_count_example(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  pc_plugin_t *h = NULL;
  pc_error_t err;

  /* its own configuration is checked by its init */
  expect_refused_cfg(reg, EXAMPLE_NORMALIZE_COUNT, "{\"tabel\":\"x\"}", PC_INVALID,
                     ": init failed: config: unknown key \"tabel\" (the only key is \"table\")");
  expect_refused_cfg(reg, EXAMPLE_NORMALIZE_COUNT, "{\"table\":7}", PC_INVALID,
                     ": init failed: config.table: expected a table name");
  /* a table name the host refuses: the first observer fails to register */
  expect_refused_cfg(reg, EXAMPLE_NORMALIZE_COUNT, "{\"table\":\"a b\"}", PC_INVALID,
                     ": init failed: observer 'normalize': table name 'a b' has a character");
  assert_int_equal(pc_registry_count(reg), 0);

  /* the default table is "docs" */
  assert_int_equal(pc_plugin_load(reg, EXAMPLE_NORMALIZE_COUNT, NULL, &h, &err), PC_OK);
  assert_non_null(pc_registry_find(reg, "normalize"));
  assert_string_equal(pc_registry_find(reg, "normalize")->table, "docs");
  pc_plugin_unload(h);

  assert_int_equal(pc_plugin_load(reg, EXAMPLE_NORMALIZE_COUNT, " { \"table\" : \"articles\" } ",
                                  &h, &err),
                   PC_OK);
  const pc_observer_t *normalize = NULL, *count = NULL;
  assert_int_equal(pc_registry_lookup(reg, "articles", "raw:text", 8, &normalize, 1), 1);
  assert_int_equal(pc_registry_lookup(reg, "articles", "norm:text", 9, &count, 1), 1);
  assert_string_equal(normalize->name, "normalize");
  assert_string_equal(count->name, "count");
  assert_int_equal(normalize->kind, PC_OBSERVER_STRONG);
  assert_int_equal(count->kind, PC_OBSERVER_STRONG);

  char *dir = tu_mkdtemp("plugin-normalize");
  pc_db_t *db = tu_open(dir, 0);
  uint64_t ts = write_cell(db, "articles", "a1", "raw:text", "  Hello, World!\t\n");
  assert_true(run_chain(db, normalize, count, "a1", ts));
  expect_cell(db, "articles", "a1", "norm:text", "hello, world!");
  expect_cell(db, "articles", "stats", "count:normalized", "1");

  /* a rerun of the same notification changes nothing (and triggers nothing) */
  assert_false(run_chain(db, normalize, count, "a1", ts));
  expect_cell(db, "articles", "a1", "norm:text", "hello, world!");
  expect_cell(db, "articles", "stats", "count:normalized", "1");

  /* a second document, and a change that normalizes to the same text */
  ts = write_cell(db, "articles", "a2", "raw:text", "BYE");
  assert_true(run_chain(db, normalize, count, "a2", ts));
  ts = write_cell(db, "articles", "a1", "raw:text", "hello, WORLD!   ");
  assert_false(run_chain(db, normalize, count, "a1", ts));
  ts = write_cell(db, "articles", "a1", "raw:text", "Other");
  assert_true(run_chain(db, normalize, count, "a1", ts));
  expect_cell(db, "articles", "a1", "norm:text", "other");
  expect_cell(db, "articles", "a2", "norm:text", "bye");
  expect_cell(db, "articles", "stats", "count:normalized", "3");
  /* only whitespace left: the derived cell goes too (a delete, which
   * notifies no observer: count does not run) */
  ts = write_cell(db, "articles", "a2", "raw:text", " \t ");
  uint64_t commit_ts = 0;
  assert_int_equal(run_observer(db, normalize, "a2", ts, NULL, &commit_ts, &err), PC_OK);
  assert_true(commit_ts != 0);
  expect_cell(db, "articles", "a2", "norm:text", NULL);
  expect_cell(db, "articles", "stats", "count:normalized", "3");

  /* a counter that is not a number fails the run, which applies nothing */
  write_cell(db, "articles", "stats", "count:normalized", "many");
  assert_int_equal(run_observer(db, count, "a1", ts, NULL, NULL, &err), PC_CORRUPTION);
  assert_string_equal(err.text,
                      "observer 'count': articles/stats/count:normalized does not hold a decimal "
                      "count");
  expect_cell(db, "articles", "stats", "count:normalized", "many");
  pc_db_close(db);
  tu_rmtree(dir);
  pc_plugin_unload(h);
  assert_int_equal(pc_registry_count(reg), 0);
  pc_registry_free(reg);
}

/* ---- plugins from the configuration ------------------------------------------ */

static void test_config_plugins(void **state) {
  (void)state;
  pc_observer_registry_t *reg = pc_registry_create();
  pc_error_t err;
  char text[2048];
  snprintf(text, sizeof text,
           "{\"workers\": {\"plugins\": [\n"
           "  {\"path\": \"%s\", \"config\": {\"greeting\": \"hi\", \"n\": [1, 2]}},\n"
           "  {\"path\": \"%s\", \"config\": {\"table\": \"articles\"}}]}}",
           PLUGIN_GOOD, EXAMPLE_NORMALIZE_COUNT);
  pc_config_t *cfg = pc_config_parse(text, strlen(text), "workers.json", &err);
  if (!cfg) fprintf(stderr, "%s\n", err.text);
  assert_non_null(cfg);
  pc_plugin_t **plugins = NULL;
  size_t n = 0;
  assert_int_equal(pc_plugins_load_config(reg, cfg, &plugins, &n, &err), PC_OK);
  assert_int_equal(n, 2);
  assert_string_equal(pc_plugin_name(plugins[0]), "good");
  assert_string_equal(pc_plugin_name(plugins[1]), "normalize_count");
  assert_int_equal(pc_registry_count(reg), 4);
  assert_string_equal(pc_registry_find(reg, "count")->table, "articles");
  expect_trace("init {\"greeting\":\"hi\",\"n\":[1,2]}\n");
  pc_plugins_unload(plugins, n);
  assert_int_equal(pc_registry_count(reg), 0);
  expect_trace("free good_strong\nfree good_weak\nteardown good\n");
  pc_config_free(cfg);

  /* the second fails: the first is unloaded again, the message names the entry */
  snprintf(text, sizeof text,
           "{\"workers\": {\"plugins\": [{\"path\": \"%s\"}, {\"path\": \"%s\"}]}}", PLUGIN_GOOD,
           PLUGIN_FAIL_INIT);
  cfg = pc_config_parse(text, strlen(text), "workers.json", &err);
  assert_non_null(cfg);
  assert_int_equal(pc_plugins_load_config(reg, cfg, &plugins, &n, &err), PC_INVALID);
  assert_null(plugins);
  assert_int_equal(n, 0);
  char want[1024];
  snprintf(want, sizeof want, "workers.plugins[1]: %s: init failed: config says no",
           PLUGIN_FAIL_INIT);
  assert_string_equal(err.text, want);
  assert_int_equal(pc_registry_count(reg), 0);
  expect_trace("init {}\ninit fail_init\nfree fail_first\n"
               "free good_strong\nfree good_weak\nteardown good\n");
  pc_config_free(cfg);

  /* no plugins: nothing to do */
  cfg = pc_config_default();
  assert_int_equal(pc_plugins_load_config(reg, cfg, &plugins, &n, &err), PC_OK);
  assert_null(plugins);
  assert_int_equal(n, 0);
  pc_plugins_unload(NULL, 0);
  pc_config_free(cfg);
  pc_registry_free(reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry),
      cmocka_unit_test(test_registry_concurrent),
      cmocka_unit_test(test_observer_run),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_bad_descriptions),
      cmocka_unit_test(test_failing_init_rolls_back),
      cmocka_unit_test(test_good_plugin),
      cmocka_unit_test(test_old_abi_plugin),
      cmocka_unit_test(test_template_example),
      cmocka_unit_test(test_normalize_count_example),
      cmocka_unit_test(test_config_plugins),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
