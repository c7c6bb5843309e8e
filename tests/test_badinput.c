/* test_badinput.c — how the public API refuses bad input and bad state.
 * Empty or oversized table names, rows, columns and values are PC_INVALID
 * with a message naming the argument, and leave the transaction usable; the
 * limits themselves are accepted. Opening a data directory that is missing,
 * empty, a file, full of unrelated files, corrupt (FORMAT or the store's
 * CURRENT) or held by another process or handle gives the documented status
 * with a message naming the directory; a configuration whose data_dir is
 * missing or empty is refused the same way. Operations on a finished
 * transaction are PC_STATE. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/db.h"
#include "tests/testutil.h"

#define T "bad"
#define COL "c"

typedef struct fixture {
  char *dir;
  pc_db_t *db;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->dir = tu_mkdtemp("badinput");
  f->db = tu_open(f->dir, 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  if (f->db) pc_db_close(f->db);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

static pc_txn_t *begin(pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("pc_txn_begin: %s", err.text);
  return t;
}

/* Asserts st == want and that err names word. */
static void expect_err(const char *what, pc_status_t st, const pc_error_t *err, pc_status_t want,
                       const char *word) {
  if (st != want)
    fail_msg("%s: want %s, got %s (%s)", what, pc_status_name(want), pc_status_name(st), err->text);
  assert_int_equal(err->code, want);
  if (!strstr(err->text, word)) fail_msg("%s: message '%s' does not name '%s'", what, err->text, word);
}

/* Runs set, delete and get of one cell and expects PC_INVALID naming word
 * from each. */
static void expect_cell_invalid(pc_txn_t *t, const char *table, const char *row, size_t rlen,
                                const char *col, size_t clen, const char *word) {
  pc_error_t err;
  pc_status_t st = pc_txn_set(t, table, row, rlen, col, clen, "v", 1, &err);
  expect_err("set", st, &err, PC_INVALID, word);
  st = pc_txn_delete(t, table, row, rlen, col, clen, &err);
  expect_err("delete", st, &err, PC_INVALID, word);
  char *v = (char *)1;
  size_t n = 7;
  st = pc_txn_get(t, table, row, rlen, col, clen, &v, &n, &err);
  expect_err("get", st, &err, PC_INVALID, word);
  assert_null(v);
}

/* Adds row "good" to t, commits it (which must succeed) and checks that
 * exactly `cells` cells were written: the rejected writes left nothing. */
static void commit_only_good(pc_db_t *db, pc_txn_t *t, size_t cells) {
  pc_error_t err;
  tu_set(t, T, "good", COL, "yes");
  if (pc_txn_commit(t, &err) != PC_OK) fail_msg("commit: %s", err.text);
  pc_txn_destroy(t);
  pc_txn_t *r = begin(db);
  char *v = tu_get(r, T, "good", COL);
  assert_string_equal(v, "yes");
  free(v);
  pc_txn_destroy(r);
  assert_int_equal(tu_raw_count(db, NULL, PC_CELL_WRITE), cells);
}

/* ---- cell arguments --------------------------------------------------------- */

static void test_bad_table(void **state) {
  fixture_t *f = *state;
  pc_txn_t *t = begin(f->db);
  char longname[PC_MAX_TABLE + 2];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *bad[] = {"", NULL, longname, "a/b", "sp ace", "t\xc3\xa9", "x:y"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    expect_cell_invalid(t, bad[i], "r", 1, COL, 1, "table");
  pc_error_t err;
  pc_scan_t *sc = pc_txn_scan(t, "", NULL, 0, NULL, 0, &err);
  assert_null(sc);
  expect_err("scan", err.code, &err, PC_INVALID, "table");
  sc = pc_txn_scan(t, longname, NULL, 0, NULL, 0, &err);
  assert_null(sc);
  expect_err("scan", err.code, &err, PC_INVALID, "table");
  /* the longest name of every allowed character class is fine */
  char okname[PC_MAX_TABLE + 1];
  memset(okname, 'Z', PC_MAX_TABLE);
  memcpy(okname, "az_09.-", 7);
  okname[PC_MAX_TABLE] = '\0';
  assert_int_equal(pc_txn_set(t, okname, "r", 1, COL, 1, "v", 1, &err), PC_OK);
  commit_only_good(f->db, t, 2);
}

static void test_bad_row(void **state) {
  fixture_t *f = *state;
  pc_txn_t *t = begin(f->db);
  char *big = malloc(PC_MAX_ROW + 1);
  assert_non_null(big);
  memset(big, 'r', PC_MAX_ROW + 1);
  expect_cell_invalid(t, T, "r", 0, COL, 1, "row");
  expect_cell_invalid(t, T, NULL, 0, COL, 1, "row");
  expect_cell_invalid(t, T, big, PC_MAX_ROW + 1, COL, 1, "row");
  /* PC_MAX_ROW bytes, and any bytes, are fine */
  pc_error_t err;
  big[0] = '\0';
  big[1] = (char)0xff;
  assert_int_equal(pc_txn_set(t, T, big, PC_MAX_ROW, COL, 1, "max", 3, &err), PC_OK);
  commit_only_good(f->db, t, 2);
  t = begin(f->db);
  char *v = NULL;
  size_t n = 0;
  assert_int_equal(pc_txn_get(t, T, big, PC_MAX_ROW, COL, 1, &v, &n, &err), PC_OK);
  assert_int_equal(n, 3);
  assert_memory_equal(v, "max", 3);
  pc_free(v);
  pc_txn_destroy(t);
  free(big);
}

static void test_bad_column(void **state) {
  fixture_t *f = *state;
  pc_txn_t *t = begin(f->db);
  char *big = malloc(PC_MAX_COLUMN + 1);
  assert_non_null(big);
  memset(big, 'c', PC_MAX_COLUMN + 1);
  expect_cell_invalid(t, T, "r", 1, "c", 0, "column");
  expect_cell_invalid(t, T, "r", 1, NULL, 0, "column");
  expect_cell_invalid(t, T, "r", 1, big, PC_MAX_COLUMN + 1, "column");
  pc_error_t err;
  assert_int_equal(pc_txn_set(t, T, "r", 1, big, PC_MAX_COLUMN, "max", 3, &err), PC_OK);
  commit_only_good(f->db, t, 2);
  t = begin(f->db);
  char *v = NULL;
  size_t n = 0;
  assert_int_equal(pc_txn_get(t, T, "r", 1, big, PC_MAX_COLUMN, &v, &n, &err), PC_OK);
  assert_int_equal(n, 3);
  pc_free(v);
  pc_txn_destroy(t);
  free(big);
}

static void test_bad_value(void **state) {
  fixture_t *f = *state;
  pc_txn_t *t = begin(f->db);
  pc_error_t err;
  size_t max = PC_MAX_VALUE;
  char *big = malloc(max + 1);
  assert_non_null(big);
  memset(big, 'v', max + 1);
  expect_err("empty value", pc_txn_set(t, T, "r", 1, COL, 1, "", 0, &err), &err, PC_INVALID, "value");
  expect_err("NULL value", pc_txn_set(t, T, "r", 1, COL, 1, NULL, 0, &err), &err, PC_INVALID, "value");
  expect_err("NULL value", pc_txn_set(t, T, "r", 1, COL, 1, NULL, 5, &err), &err, PC_INVALID, "value");
  expect_err("oversized value", pc_txn_set(t, T, "r", 1, COL, 1, big, max + 1, &err), &err,
             PC_INVALID, "value");
  /* get without somewhere to put the value */
  size_t n;
  expect_err("get", pc_txn_get(t, T, "r", 1, COL, 1, NULL, &n, &err), &err, PC_INVALID, "value");
  /* the largest value goes through */
  big[max - 1] = 'E';
  assert_int_equal(pc_txn_set(t, T, "r", 1, COL, 1, big, max, &err), PC_OK);
  commit_only_good(f->db, t, 2);
  t = begin(f->db);
  char *v = NULL;
  assert_int_equal(pc_txn_get(t, T, "r", 1, COL, 1, &v, &n, &err), PC_OK);
  assert_int_equal(n, max);
  assert_memory_equal(v, big, max);
  pc_free(v);
  pc_txn_destroy(t);
  free(big);
}

/* The per-transaction bound on buffered bytes: values of PC_MAX_VALUE fill
 * it after PC_MAX_TXN_BYTES / PC_MAX_VALUE of them; the one beyond is
 * refused naming the transaction and the transaction stays usable.
 * Replacing a buffered cell's value by one of the same size keeps the
 * buffer's size, so it stays within the bound and must be accepted. */
static void test_transaction_byte_limit(void **state) {
  fixture_t *f = *state;
  pc_txn_t *t = begin(f->db);
  pc_error_t err;
  size_t max = PC_MAX_VALUE;
  char *big = malloc(max);
  assert_non_null(big);
  memset(big, 'x', max);
  size_t fit = PC_MAX_TXN_BYTES / PC_MAX_VALUE - 1; /* rows and columns take a few bytes too */
  char row[16];
  for (size_t i = 0; i < fit; i++) {
    snprintf(row, sizeof row, "r%zu", i);
    assert_int_equal(pc_txn_set(t, T, row, strlen(row), COL, 1, big, max, &err), PC_OK);
  }
  snprintf(row, sizeof row, "r%zu", fit);
  assert_int_equal(pc_txn_set(t, T, row, strlen(row), COL, 1, big, max - 1000, &err), PC_OK);
  expect_err("over the byte limit", pc_txn_set(t, T, "one-more", 8, COL, 1, big, max, &err), &err,
             PC_INVALID, "transaction");
  assert_int_equal(pc_txn_set(t, T, "tiny", 4, COL, 1, "v", 1, &err), PC_OK);
  assert_int_equal(pc_txn_delete(t, T, "gone", 4, COL, 1, &err), PC_OK);
  /* the buffer holds PC_MAX_TXN_BYTES - ~1000 bytes; replacing r0's value
   * by another of the same size leaves it there */
  pc_status_t st = pc_txn_set(t, T, "r0", 2, COL, 1, big, max, &err);
  if (st != PC_OK)
    fail_msg("overwriting a buffered %zu-byte value with another of the same size was refused: "
             "%s (%s)", max, pc_status_name(st), err.text);
  pc_txn_abort(t);
  pc_txn_destroy(t);
  free(big);
}

/* ---- opening data directories --------------------------------------------- */

static pc_db_t *open_with(const char *dir, int create, pc_error_t *err) {
  pc_options_t *o = pc_options_create();
  assert_non_null(o);
  pc_options_set_create_if_missing(o, create);
  pc_db_t *db = pc_db_open(o, dir, err);
  pc_options_destroy(o);
  return db;
}

static void expect_open_fails(const char *dir, int create, pc_status_t want, const char *word) {
  pc_error_t err;
  pc_db_t *db = open_with(dir, create, &err);
  if (db) {
    pc_db_close(db);
    fail_msg("open of %s succeeded, want %s", dir, pc_status_name(want));
  }
  expect_err("open", err.code, &err, want, word);
}

static void write_file(const char *path, const char *data) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
  assert_int_equal(close(fd), 0);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* A fresh directory holding a closed database with one committed cell. */
static char *make_db(void) {
  char *dir = tu_mkdtemp("badinput-db");
  pc_db_t *db = tu_open(dir, 0);
  pc_txn_t *t = begin(db);
  tu_set(t, T, "r", COL, "v");
  assert_int_equal(pc_txn_commit(t, NULL), PC_OK);
  pc_txn_destroy(t);
  pc_db_close(db);
  return dir;
}

static void test_missing_directory(void **state) {
  (void)state;
  char *base = tu_mkdtemp("badinput-missing");
  char path[512];
  snprintf(path, sizeof path, "%s/not-here", base);
  expect_open_fails(path, 0, PC_INVALID, path);
  struct stat st;
  assert_int_not_equal(stat(path, &st), 0); /* not created */
  /* the default options do not create either */
  pc_error_t err;
  assert_null(pc_db_open(NULL, path, &err));
  expect_err("open", err.code, &err, PC_INVALID, path);
  /* an empty path, and no path */
  assert_null(pc_db_open(NULL, "", &err));
  assert_int_equal(err.code, PC_INVALID);
  assert_null(pc_db_open(NULL, NULL, &err));
  assert_int_equal(err.code, PC_INVALID);
  /* an existing but empty directory without create */
  expect_open_fails(base, 0, PC_INVALID, base);
  assert_int_equal(count_entries(base), 0);
  /* a regular file where the directory should be */
  snprintf(path, sizeof path, "%s/file", base);
  write_file(path, "x");
  expect_open_fails(path, 1, PC_INVALID, path);
  tu_rmtree(base);
}

/* A configuration's data_dir is held to the same rule as pc_db_open's
 * directory: missing or empty is PC_INVALID naming the file, the directory
 * and how to create it, and nothing is created; `percolator --config FILE
 * init` (pc_db_open_config_create) creates it, and then it opens. */
static void test_config_missing_data_dir(void **state) {
  (void)state;
  char *base = tu_mkdtemp("badinput-config");
  char data[512], config[512], want[2048];
  snprintf(data, sizeof data, "%s/not-here", base);
  snprintf(config, sizeof config, "%s/embedded.json", base);
  FILE *f = fopen(config, "w");
  assert_non_null(f);
  fprintf(f, "{\"data_dir\": \"%s\"}\n", data);
  assert_int_equal(fclose(f), 0);

  pc_error_t err;
  assert_null(pc_db_open_config(config, &err));
  assert_int_equal(err.code, PC_INVALID);
  snprintf(want, sizeof want,
           "%s: data_dir '%s' does not exist (create it with 'percolator --config %s init')",
           config, data, config);
  assert_string_equal(err.text, want);
  struct stat st;
  assert_int_not_equal(stat(data, &st), 0); /* not created */

  assert_int_equal(mkdir(data, 0755), 0); /* created by hand, but not initialised */
  assert_null(pc_db_open_config(config, &err));
  assert_int_equal(err.code, PC_INVALID);
  snprintf(want, sizeof want,
           "%s: data_dir '%s' is empty (initialise it with 'percolator --config %s init')", config,
           data, config);
  assert_string_equal(err.text, want);
  assert_int_equal(count_entries(data), 0);
  assert_int_equal(rmdir(data), 0);

  pc_db_t *db = pc_db_open_config_create(config, 1, &err); /* what init does */
  if (!db) fail_msg("pc_db_open_config_create: %s", err.text);
  pc_db_close(db);
  db = pc_db_open_config(config, &err);
  if (!db) fail_msg("pc_db_open_config after init: %s", err.text);
  pc_db_close(db);
  tu_rmtree(base);
}

static void test_unrelated_directory(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("badinput-unrelated");
  char path[512];
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  write_file(path, "someone else's files\n");
  expect_open_fails(dir, 0, PC_INVALID, dir);
  expect_open_fails(dir, 1, PC_INVALID, dir);
  assert_int_equal(count_entries(dir), 1); /* nothing was added */
  tu_rmtree(dir);
}

static void test_corrupt_format(void **state) {
  (void)state;
  const char *garbage[] = {"garbage\n", "", "percolator-data 99\n", "percolator-data 1"};
  for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
    char *dir = make_db();
    char path[512];
    snprintf(path, sizeof path, "%s/FORMAT", dir);
    write_file(path, garbage[i]);
    expect_open_fails(dir, 0, PC_CORRUPTION, dir);
    expect_open_fails(dir, 1, PC_CORRUPTION, dir);
    tu_rmtree(dir);
  }
}

/* A directory of the previous format (meta records of version 1) opens,
 * keeps its data, and is marked with the current format, which older
 * binaries refuse. */
/* A directory of another format (an older version's) is refused, naming
 * what its FORMAT file says, and left as it was. */
static void test_other_format_refused(void **state) {
  (void)state;
  char *dir = make_db();
  char path[512];
  snprintf(path, sizeof path, "%s/FORMAT", dir);
  write_file(path, "percolator-data 2\n");
  expect_open_fails(dir, 0, PC_CORRUPTION, "says 'percolator-data 2'");
  expect_open_fails(dir, 1, PC_CORRUPTION, "percolator-data 4");
  char line[64] = {0};
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  assert_string_equal(line, "percolator-data 2\n");
  tu_rmtree(dir);
}

static void test_corrupt_store(void **state) {
  (void)state;
  /* CURRENT without a newline, and CURRENT naming a manifest that is not there */
  const char *garbage[] = {"garbage", "MANIFEST-999999\n"};
  for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
    char *dir = make_db();
    char path[512];
    snprintf(path, sizeof path, "%s/store/CURRENT", dir);
    write_file(path, garbage[i]);
    expect_open_fails(dir, 0, PC_CORRUPTION, dir);
    expect_open_fails(dir, 1, PC_CORRUPTION, dir);
    tu_rmtree(dir);
  }
  /* a FORMAT file but no store at all */
  char *dir = make_db();
  char store[512];
  snprintf(store, sizeof store, "%s/store", dir);
  char *moved = tu_mkdtemp("badinput-moved");
  char target[600];
  snprintf(target, sizeof target, "%s/store", moved);
  assert_int_equal(rename(store, target), 0);
  expect_open_fails(dir, 1, PC_CORRUPTION, dir);
  tu_rmtree(moved);
  tu_rmtree(dir);
}

/* A child process holds the directory until told to let go: PC_BUSY naming
 * it; afterwards the directory opens and holds what the child left. */
static void test_busy_other_process(void **state) {
  (void)state;
  char *dir = make_db();
  int ready[2], go[2];
  assert_int_equal(pipe(ready), 0);
  assert_int_equal(pipe(go), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(60); /* safety net */
    close(ready[0]);
    close(go[1]);
    pc_db_t *db = tu_open(dir, 0);
    pc_txn_t *t = pc_txn_begin(db, NULL);
    if (!t) _exit(2);
    tu_set(t, T, "child", COL, "was here");
    if (pc_txn_commit(t, NULL) != PC_OK) _exit(3);
    pc_txn_destroy(t);
    if (write(ready[1], "r", 1) != 1) _exit(4);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(5);
    pc_db_close(db);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char c;
  assert_int_equal(read(ready[0], &c, 1), 1);
  expect_open_fails(dir, 0, PC_BUSY, dir);
  expect_open_fails(dir, 1, PC_BUSY, dir);
  assert_int_equal(write(go[1], "g", 1), 1);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  close(ready[0]);
  close(go[1]);
  pc_db_t *db = tu_open(dir, 0);
  pc_txn_t *t = begin(db);
  char *v = tu_get(t, T, "child", COL);
  assert_string_equal(v, "was here");
  free(v);
  pc_txn_destroy(t);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* A second handle in the same process is refused too, and the first keeps
 * working; once it is closed the directory opens again. */
static void test_busy_same_process(void **state) {
  (void)state;
  char *dir = make_db();
  pc_db_t *a = tu_open(dir, 0);
  expect_open_fails(dir, 0, PC_BUSY, dir);
  pc_txn_t *t = begin(a);
  tu_set(t, T, "after", COL, "ok");
  assert_int_equal(pc_txn_commit(t, NULL), PC_OK);
  pc_txn_destroy(t);
  pc_db_close(a);
  pc_db_t *b = tu_open(dir, 0);
  t = begin(b);
  char *v = tu_get(t, T, "after", COL);
  assert_string_equal(v, "ok");
  free(v);
  pc_txn_destroy(t);
  pc_db_close(b);
  tu_rmtree(dir);
}

/* ---- finished transactions ------------------------------------------------- */

/* Every operation on t is PC_STATE naming how it finished. */
static void expect_finished(pc_txn_t *t, const char *how) {
  pc_error_t err;
  expect_err("set", pc_txn_set(t, T, "r", 1, COL, 1, "v", 1, &err), &err, PC_STATE, how);
  expect_err("delete", pc_txn_delete(t, T, "r", 1, COL, 1, &err), &err, PC_STATE, how);
  char *v = NULL;
  size_t n;
  expect_err("get", pc_txn_get(t, T, "r", 1, COL, 1, &v, &n, &err), &err, PC_STATE, how);
  assert_null(v);
  assert_null(pc_txn_scan(t, T, NULL, 0, NULL, 0, &err));
  expect_err("scan", err.code, &err, PC_STATE, how);
  expect_err("commit", pc_txn_commit(t, &err), &err, PC_STATE, how);
  pc_txn_abort(t); /* a no-op */
  expect_err("set after abort", pc_txn_set(t, T, "r", 1, COL, 1, "v", 1, &err), &err, PC_STATE, how);
}

static void test_finished_transactions(void **state) {
  fixture_t *f = *state;
  pc_error_t err;
  /* committed with writes */
  pc_txn_t *t = begin(f->db);
  tu_set(t, T, "r", COL, "1");
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  expect_finished(t, "committed");
  pc_txn_destroy(t);
  /* committed read-only */
  t = begin(f->db);
  free(tu_get(t, T, "r", COL));
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  assert_int_equal(pc_txn_commit_ts(t), 0);
  expect_finished(t, "committed");
  pc_txn_destroy(t);
  /* aborted */
  t = begin(f->db);
  tu_set(t, T, "r", COL, "2");
  pc_txn_abort(t);
  expect_finished(t, "aborted");
  pc_txn_destroy(t);
  /* refused with a conflict: finished too, nothing applied */
  pc_txn_t *a = begin(f->db), *b = begin(f->db);
  tu_set(a, T, "r", COL, "a");
  tu_set(b, T, "r", COL, "b");
  assert_int_equal(pc_txn_commit(a, &err), PC_OK);
  assert_int_equal(pc_txn_commit(b, &err), PC_CONFLICT);
  assert_int_equal(pc_txn_commit_ts(b), 0);
  expect_finished(b, "aborted");
  pc_txn_destroy(a);
  pc_txn_destroy(b);
  t = begin(f->db);
  char *v = tu_get(t, T, "r", COL);
  assert_string_equal(v, "a");
  free(v);
  pc_txn_destroy(t);
  /* NULL handles */
  assert_int_equal(pc_txn_commit(NULL, &err), PC_INVALID);
  assert_null(pc_txn_begin(NULL, &err));
  assert_int_equal(err.code, PC_INVALID);
  pc_txn_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bad_table, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_row, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_column, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_value, setup, teardown),
      cmocka_unit_test_setup_teardown(test_transaction_byte_limit, setup, teardown),
      cmocka_unit_test(test_missing_directory),
      cmocka_unit_test(test_config_missing_data_dir),
      cmocka_unit_test(test_unrelated_directory),
      cmocka_unit_test(test_corrupt_format),
      cmocka_unit_test(test_other_format_refused),
      cmocka_unit_test(test_corrupt_store),
      cmocka_unit_test(test_busy_other_process),
      cmocka_unit_test(test_busy_same_process),
      cmocka_unit_test_setup_teardown(test_finished_transactions, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
