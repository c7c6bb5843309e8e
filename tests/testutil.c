/* testutil.c — temporary directories and small transaction wrappers for the
 * test programs (see testutil.h). */
#include "tests/testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what, const pc_error_t *err) {
  fprintf(stderr, "test setup failed: %s: %s (%s)\n", what, err ? err->text : "",
          err ? pc_status_name(err->code) : "");
  abort();
}

char *tu_mkdtemp(const char *tag) {
  const char *base = getenv("TMPDIR");
  char *path;
  if (asprintf(&path, "%s/pc-%s-XXXXXX", base && *base ? base : "/tmp", tag) < 0) abort();
  if (!mkdtemp(path)) die("mkdtemp", NULL);
  return path;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

void tu_rmtree(char *path) {
  if (!path) return;
  nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(path);
}

pc_db_t *tu_open(const char *dir, uint32_t lock_ttl_ms) {
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  if (lock_ttl_ms) pc_options_set_lock_ttl_ms(o, lock_ttl_ms);
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  if (!db) die("pc_db_open", &err);
  return db;
}

char *tu_get(pc_txn_t *txn, const char *table, const char *row, const char *col) {
  char *v = NULL;
  size_t n = 0;
  pc_error_t err;
  pc_status_t st = pc_txn_get(txn, table, row, strlen(row), col, strlen(col), &v, &n, &err);
  if (st == PC_NOT_FOUND) return NULL;
  if (st != PC_OK) die("pc_txn_get", &err);
  char *s = malloc(n + 1);
  if (!s) abort();
  memcpy(s, v, n);
  s[n] = '\0';
  pc_free(v);
  return s;
}

void tu_set(pc_txn_t *txn, const char *table, const char *row, const char *col, const char *val) {
  pc_error_t err;
  if (pc_txn_set(txn, table, row, strlen(row), col, strlen(col), val, strlen(val), &err) != PC_OK)
    die("pc_txn_set", &err);
}

/* ---- helpers added for the protocol, crash and isolation tests ---------- */

pc_db_t *tu_open_ex(const char *dir, uint32_t lock_ttl_ms, int one_phase_commit) {
  pc_options_t *o = pc_options_create();
  if (!o) abort();
  pc_options_set_create_if_missing(o, 1);
  if (lock_ttl_ms) pc_options_set_lock_ttl_ms(o, lock_ttl_ms);
  pc_options_set_one_phase_commit(o, one_phase_commit);
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  if (!db) die("pc_db_open", &err);
  return db;
}

typedef struct raw_count {
  pc_cell_kind_t kind;
  size_t n;
} raw_count_t;

static int raw_count_cell(void *ctx, const pc_raw_cell_t *cell) {
  raw_count_t *c = ctx;
  if (cell->kind == c->kind) c->n++;
  return 0;
}

size_t tu_raw_count(pc_db_t *db, const char *table, pc_cell_kind_t kind) {
  raw_count_t c = {kind, 0};
  pc_error_t err;
  if (pc_db_raw_scan(db, table, NULL, 0, NULL, 0, raw_count_cell, &c, &err) != PC_OK)
    die("pc_db_raw_scan", &err);
  return c.n;
}

void tu_put_rows(pc_db_t *db, const char *table, const char *const *rows, size_t n,
                 const char *col, const char *val) {
  pc_error_t err;
  pc_txn_t *txn = pc_txn_begin(db, &err);
  if (!txn) die("pc_txn_begin", &err);
  for (size_t i = 0; i < n; i++) tu_set(txn, table, rows[i], col, val);
  if (pc_txn_commit(txn, &err) != PC_OK) die("pc_txn_commit", &err);
  pc_txn_destroy(txn);
}
