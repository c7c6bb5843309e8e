/* test_tombstones.c — the embedded store's reads cost what they read, not
 * what was deleted before them.
 *
 * LevelDB keeps a deleted key as a tombstone until compaction reaches it, and
 * an iterator's seek or step walks over every tombstone between where it
 * starts and the next live key, without a bound (the C API has no upper
 * bound). A seek whose next live key lies beyond a key space where deletes
 * accumulate (notifications; lock index entries, in versions that kept them
 * in LevelDB) therefore costs as much as
 * everything deleted there. These tests count the key comparisons LevelDB
 * makes on the test's thread (pc_local_compares: every entry walked over
 * costs at least one once the store holds more than its memtable, or the
 * entry hides an older one) and compare a read on a store full of tombstones
 * with the same read where there are none, or after garbage collection:
 *
 *   - the raw scan of a few hundred documents indexed by the dedup plugin,
 *     with two-phase commit, before the store's first GC pass and after it;
 *   - the lock scan (the sweeper's, GC's and wait's) after many locks came
 *     and went, against a store that never had one;
 *   - a scan of the last table, after many notifications came and went;
 *   - reads of a cell at an old snapshot, and a rollback's lookup of its
 *     own record, beside many deleted entries;
 *   - a read before a cell's first put, when every commit record after it
 *     is a deleted one (a head has no record of its own).
 *
 * Each figure is a count, not a time, so the tests do not depend on the
 * machine's load; each fails without the bounds of core/store_*.c, by a
 * factor that grows with the number of deletes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/db.h" /* the database's store, for the lock scan */
#include "base/error.h"
#include "core/store.h"
#include "notify/worker.h"
#include "observers/plugin.h"
#include "observers/registry.h"
#include "tests/testutil.h"

static const char *dedup_path; /* the plugin, from the command line */

/* An embedded database that counts its comparisons: two-phase commit as in a
 * cluster of several tablets (so every written cell's lock comes and goes),
 * no background GC, no fsync. */
static pc_db_t *open_counting(const char *dir, int one_phase) {
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  pc_options_set_sync(o, 0);
  pc_options_set_one_phase_commit(o, one_phase);
  pc_options_set_gc_interval_ms(o, 0);
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  if (!db) fail_msg("pc_db_open %s: %s", dir, err.text);
  return db;
}

typedef struct raw_count {
  size_t cells;
} raw_count_t;

static int count_cell(void *ctx, const pc_raw_cell_t *c) {
  (void)c;
  ((raw_count_t *)ctx)->cells++;
  return 0;
}

/* The comparisons a raw scan of table makes, and the cells it shows. */
static uint64_t raw_scan_cost(pc_db_t *db, const char *table, size_t *cells) {
  raw_count_t rc = {0};
  pc_error_t err;
  uint64_t before = pc_local_compares();
  if (pc_db_raw_scan(db, table, NULL, 0, NULL, 0, count_cell, &rc, &err) != PC_OK)
    fail_msg("pc_db_raw_scan: %s", err.text);
  *cells = rc.cells;
  return pc_local_compares() - before;
}

/* ---- documents ---------------------------------------------------------- */

/* Words of ordinary English prose, drawn with a fixed seed: the documents
 * repeat words as text does, so index rows share prefixes as a real index's. */
static const char *const words[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "software", "license",
    "copyright", "permission", "distribute", "modify", "warranty", "source", "program",
    "library", "terms", "conditions", "notice", "provided", "without", "including", "limited",
    "merchantability", "fitness", "particular", "purpose", "author", "holders", "damages",
    "liability", "contract", "tort", "otherwise", "arising", "connection", "use", "dealings",
    "free", "foundation", "version", "general", "public", "redistribution", "binary", "forms",
    "retain", "above", "following", "disclaimer", "documentation", "materials", "written",
    "prior", "specific", "products", "derived", "endorse", "promote", "names", "contributors",
    "express", "implied", "event", "shall", "direct", "indirect", "incidental", "special",
    "exemplary", "consequential", "procurement", "substitute", "goods", "services", "loss",
    "data", "profits", "business", "interruption", "however", "caused", "theory", "strict",
    "negligence", "advised", "possibility", "such", "damage", "file", "files", "work", "works",
    "code", "object", "form", "patent", "grant", "trademark", "compliance", "apache", "mit",
    "debian", "package", "upstream", "maintainer", "system", "network", "store", "table",
    "column", "value", "transaction", "commit", "lock", "index", "document", "cluster"};

static uint32_t rng = 12345;
static uint32_t next_rand(void) {
  rng = rng * 1103515245u + 12345u;
  return rng >> 8;
}

static void document(char *out, size_t cap, int n_words) {
  size_t len = 0;
  out[0] = '\0';
  for (int i = 0; i < n_words && len + 32 < cap; i++) {
    const char *w = words[next_rand() % (sizeof words / sizeof *words)];
    len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? " " : "", w);
    if (i % 12 == 11) len += (size_t)snprintf(out + len, cap - len, ".");
  }
}

static void wait_for_observers(pc_db_t *db) {
  pc_error_t err;
  pc_status_t st = pc_notify_wait(db, 120000, &err);
  if (st != PC_OK) fail_msg("pc_notify_wait: %s (%s)", pc_status_name(st), err.text);
}

/* ---- the raw scan of dedup's index, before and after the first GC ------ */

#define NDOCS 240

static void test_raw_scan_of_index_before_and_after_gc(void **state) {
  (void)state;
  if (!dedup_path) skip();
  char *dir = tu_mkdtemp("tomb-dedup");
  pc_db_t *db = open_counting(dir, 0);
  pc_observer_registry_t *reg = pc_registry_create();
  pc_plugin_t *plugin = NULL;
  pc_error_t err;
  if (pc_plugin_load(reg, dedup_path, NULL, &plugin, &err) != PC_OK)
    fail_msg("loading %s: %s", dedup_path, err.text);
  pc_worker_options_t wo;
  pc_worker_options_default(&wo);
  wo.threads = 2;
  wo.idle_ms = 5;
  pc_worker_t *w = pc_worker_start(db, reg, &wo, &err);
  if (!w) fail_msg("pc_worker_start: %s", err.text);

  /* documents, one transaction each, every tenth a copy of an earlier one */
  static char texts[NDOCS][2048];
  for (int i = 0; i < NDOCS; i++) {
    if (i % 10 == 9) memcpy(texts[i], texts[i / 2], sizeof texts[i]);
    else document(texts[i], sizeof texts[i], 60 + (int)(next_rand() % 120));
    char url[64];
    snprintf(url, sizeof url, "https://example.org/licenses/%04d.txt", i);
    pc_txn_t *t = pc_txn_begin(db, &err);
    assert_non_null(t);
    assert_int_equal(pc_txn_set(t, "docs", url, strlen(url), "doc:contents", 12, texts[i],
                                strlen(texts[i]), &err),
                     PC_OK);
    assert_int_equal(pc_txn_commit(t, &err), PC_OK);
    pc_txn_destroy(t);
  }
  wait_for_observers(db);
  pc_worker_stop(w);
  pc_plugin_unload(plugin);
  pc_registry_free(reg);

  size_t cells_before, cells_after, idx_rows;
  uint64_t before = raw_scan_cost(db, "idxbucket", &cells_before);
  pc_gc_stats_t gs;
  assert_int_equal(pc_db_gc(db, &gs, &err), PC_OK);
  uint64_t after = raw_scan_cost(db, "idxbucket", &cells_after);
  idx_rows = tu_raw_count(db, "idxbucket", PC_CELL_WRITE);
  print_message("raw scan of the index, idxbucket (%zu cells, %zu commit records): %llu "
                "comparisons before the first GC pass, %llu after it\n",
                cells_before, idx_rows, (unsigned long long)before, (unsigned long long)after);
  assert_true(idx_rows > 1000); /* the index is there: every document's terms */
  assert_true(cells_after <= cells_before); /* the pass deleted some records */
  /* about the same: each cell costs a few seeks' comparisons either way,
   * while without bounds the first scan pays, for each cell, every lock
   * index entry deleted so far */
  assert_true(before <= 3 * after);
  assert_true(after <= 3 * before);

  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- the lock scan after many locks came and went ---------------------- */

typedef struct lock_count {
  size_t n;
} lock_count_t;

static int count_lock(void *ctx, const pc_lock_info_t *l) {
  (void)l;
  ((lock_count_t *)ctx)->n++;
  return 0;
}

static uint64_t scan_locks_cost(pc_db_t *db, size_t *found) {
  lock_count_t lc = {0};
  pc_error_t err;
  uint64_t before = pc_local_compares();
  assert_int_equal(db->store->ops->scan_locks(db->store, UINT64_MAX, count_lock, &lc, &err),
                   PC_OK);
  *found = lc.n;
  return pc_local_compares() - before;
}

/* Writes n rows of table in transactions of 10 rows each. */
static void write_rows(pc_db_t *db, const char *table, int n) {
  for (int i = 0; i < n; i += 10) {
    char rows[10][32];
    const char *ptrs[10];
    for (int k = 0; k < 10; k++) {
      snprintf(rows[k], sizeof rows[k], "row%06d", i + k);
      ptrs[k] = rows[k];
    }
    tu_put_rows(db, table, ptrs, 10, "c", "v");
  }
}

static void test_scan_locks_after_many_locks(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("tomb-locks");
  char *base = tu_mkdtemp("tomb-locks-base");
  pc_db_t *db = open_counting(dir, 0);   /* every row locked and unlocked */
  pc_db_t *ref = open_counting(base, 1); /* the same rows, never locked */
  write_rows(db, "t", 5000);
  write_rows(ref, "t", 5000);
  /* one lock left standing in each: a prewrite nobody commits */
  pc_error_t err;
  pc_db_t *dbs[2] = {db, ref};
  for (int i = 0; i < 2; i++) {
    uint64_t ts;
    assert_int_equal(pc_db_timestamp(dbs[i], 5000, &ts, &err), PC_OK);
    pc_mutation_t m = {{"t", "row000001", 9, "c", 1}, PC_WRITE_PUT, "w", 1, 0};
    pc_lock_spec_t spec = {{"t", "row000001", 9, "c", 1}, ts, 60000, 1};
    pc_lock_info_t li = {0};
    assert_int_equal(dbs[i]->store->ops->prewrite(dbs[i]->store, &m, 1, &spec, &li, &err), PC_OK);
    pc_lock_info_free(&li);
  }
  size_t n_db, n_ref;
  uint64_t cost = scan_locks_cost(db, &n_db), base_cost = scan_locks_cost(ref, &n_ref);
  print_message("scan_locks: %llu comparisons after 5000 locks came and went, %llu on a store "
                "that never had one\n",
                (unsigned long long)cost, (unsigned long long)base_cost);
  assert_int_equal(n_db, 1);
  assert_int_equal(n_ref, 1);
  assert_true(cost <= 3 * base_cost + 64);
  pc_db_close(db);
  pc_db_close(ref);
  tu_rmtree(dir);
  tu_rmtree(base);
}

/* ---- a scan of the last table after many notifications came and went --- */

typedef struct rows_seen {
  size_t n;
} rows_seen_t;

static uint64_t scan_table_cost(pc_db_t *db, const char *table, size_t *rows) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  uint64_t before = pc_local_compares();
  pc_scan_t *sc = pc_txn_scan(t, table, NULL, 0, NULL, 0, &err);
  assert_non_null(sc);
  pc_status_t st;
  *rows = 0;
  while ((st = pc_scan_next(sc, &err)) == PC_OK) (*rows)++;
  assert_int_equal(st, PC_NOT_FOUND);
  uint64_t cost = pc_local_compares() - before;
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  return cost;
}

static void test_scan_of_last_table_after_many_notifications(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("tomb-notify");
  char *base = tu_mkdtemp("tomb-notify-base");
  pc_db_t *db = open_counting(dir, 1);
  pc_db_t *ref = open_counting(base, 1);
  pc_error_t err;
  /* 3000 weak notifications in table "a", then every one deleted */
  for (int i = 0; i < 3000; i += 100) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    for (int k = 0; k < 100; k++) {
      char row[32];
      snprintf(row, sizeof row, "doc%06d", i + k);
      assert_int_equal(pc_txn_notify_weak(t, "a", row, strlen(row), "c", 1, &err), PC_OK);
    }
    assert_int_equal(pc_txn_commit(t, &err), PC_OK);
    pc_txn_destroy(t);
  }
  for (int i = 0; i < 3000; i++) {
    char row[32];
    snprintf(row, sizeof row, "doc%06d", i);
    /* no observer is registered for a:c, so a deletion on behalf of none goes */
    pc_notify_clear_t cl = {{"a", row, strlen(row), "c", 1}, UINT64_MAX, "", 0, 0, ""};
    assert_int_equal(db->store->ops->clear_notify(db->store, &cl, 1, &err), PC_OK);
    assert_true(cl.done);
  }
  assert_int_equal(tu_raw_count(db, NULL, PC_CELL_NOTIFY), 0);
  /* a few rows in the last table of each store */
  write_rows(db, "zz", 20);
  write_rows(ref, "zz", 20);
  size_t rows, ref_rows;
  uint64_t cost = scan_table_cost(db, "zz", &rows), base_cost = scan_table_cost(ref, "zz", &ref_rows);
  print_message("scan of the last table: %llu comparisons after 3000 notifications came and "
                "went, %llu on a store that never had one\n",
                (unsigned long long)cost, (unsigned long long)base_cost);
  assert_int_equal(rows, 20);
  assert_int_equal(ref_rows, 20);
  assert_true(cost <= 3 * base_cost + 64);
  pc_db_close(db);
  pc_db_close(ref);
  tu_rmtree(dir);
  tu_rmtree(base);
}

/* ---- a rollback's lookup of its record on a cell rolled back many times -- */

static void test_rollback_lookup_among_many_rollbacks(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("tomb-rollbacks");
  pc_db_t *db = open_counting(dir, 0);
  pc_error_t err;
  pc_cell_t hot = {"t", "hot", 3, "c", 1}, cold = {"t", "cold", 4, "c", 1};
  uint64_t first_hot = 0, first_cold = 0;
  /* 2000 transactions rolled back on the hot cell, one on the cold one */
  for (int i = 0; i < 2000; i++) {
    uint64_t ts;
    assert_int_equal(pc_db_timestamp(db, 5000, &ts, &err), PC_OK);
    if (i == 0) first_hot = ts;
    assert_int_equal(db->store->ops->rollback(db->store, &hot, 1, ts, &err), PC_OK);
  }
  assert_int_equal(pc_db_timestamp(db, 5000, &first_cold, &err), PC_OK);
  assert_int_equal(db->store->ops->rollback(db->store, &cold, 1, first_cold, &err), PC_OK);
  /* the oldest one, rolled back again: the store finds its record first */
  uint64_t before = pc_local_compares();
  assert_int_equal(db->store->ops->rollback(db->store, &hot, 1, first_hot, &err), PC_OK);
  uint64_t cost = pc_local_compares() - before;
  before = pc_local_compares();
  assert_int_equal(db->store->ops->rollback(db->store, &cold, 1, first_cold, &err), PC_OK);
  uint64_t base_cost = pc_local_compares() - before;
  print_message("a repeated rollback: %llu comparisons below 2000 newer rollback records, %llu "
                "on a cell with none\n",
                (unsigned long long)cost, (unsigned long long)base_cost);
  assert_true(cost <= 3 * base_cost + 64);
  pc_db_close(db);
  tu_rmtree(dir);
}

/* ---- a read at an old snapshot of a cell whose head is its first put ------ */

/* Commits put (c, value) through prewrite and commit; returns commit_ts. */
static uint64_t put_cell(pc_db_t *db, const pc_cell_t *c, const char *value) {
  pc_error_t err;
  uint64_t start, commit;
  assert_int_equal(pc_db_timestamp(db, 5000, &start, &err), PC_OK);
  pc_mutation_t m = {*c, PC_WRITE_PUT, value, strlen(value), 0};
  pc_lock_spec_t spec = {*c, start, 5000, db->session};
  pc_lock_info_t lock = {0};
  assert_int_equal(db->store->ops->prewrite(db->store, &m, 1, &spec, &lock, &err), PC_OK);
  assert_int_equal(pc_db_timestamp(db, 5000, &commit, &err), PC_OK);
  assert_int_equal(db->store->ops->commit(db->store, c, 1, start, commit, &err), PC_OK);
  return commit;
}

/* The comparisons a read of c at read_ts makes; it finds nothing. */
static uint64_t old_read_cost(pc_db_t *db, const pc_cell_t *c, uint64_t read_ts) {
  char *v = NULL;
  size_t n;
  pc_lock_info_t lock = {0};
  pc_error_t err;
  uint64_t before = pc_local_compares();
  assert_int_equal(db->store->ops->get(db->store, c, read_ts, &v, &n, &lock, &err), PC_NOT_FOUND);
  return pc_local_compares() - before;
}

/* A cell's head has no commit record of its own (format 4), so the commit
 * records that follow a cell written once may all be deleted ones: here
 * the old versions of 2000 cells after it, collected by GC. A read of that
 * cell at a snapshot before its commit must not seek its history and walk
 * them: its head says it is the cell's first put. */
static void test_old_read_of_first_head_beside_deleted_records(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("tomb-first-head");
  pc_db_t *db = open_counting(dir, 0);
  pc_error_t err;
  uint64_t snapshot;
  assert_int_equal(pc_db_timestamp(db, 5000, &snapshot, &err), PC_OK);
  pc_cell_t first = {"t", "a", 1, "c", 1}, last = {"t", "z", 1, "c", 1};
  put_cell(db, &first, "new");
  char rows[2000][8];
  for (int i = 0; i < 2000; i++) {
    snprintf(rows[i], sizeof rows[i], "b%04d", i);
    pc_cell_t c = {"t", rows[i], 5, "c", 1};
    put_cell(db, &c, "old");
    put_cell(db, &c, "new");
  }
  uint64_t safe;
  put_cell(db, &last, "new");
  assert_int_equal(pc_db_timestamp(db, 5000, &safe, &err), PC_OK);
  pc_store_gc_stats_t gs;
  assert_int_equal(db->store->ops->gc(db->store, safe, 0, &gs, &err), PC_OK);
  assert_int_equal(gs.versions, 2000);
  uint64_t cost = old_read_cost(db, &first, snapshot);
  uint64_t base_cost = old_read_cost(db, &last, snapshot);
  print_message("a read before a cell's first put: %llu comparisons beside 2000 deleted commit "
                "records, %llu with none after it\n",
                (unsigned long long)cost, (unsigned long long)base_cost);
  assert_true(cost <= 3 * base_cost + 64);
  pc_db_close(db);
  tu_rmtree(dir);
}

int main(int argc, char **argv) {
  dedup_path = argc > 1 ? argv[1] : NULL;
  pc_local_store_count_compares(1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_raw_scan_of_index_before_and_after_gc),
      cmocka_unit_test(test_scan_locks_after_many_locks),
      cmocka_unit_test(test_scan_of_last_table_after_many_notifications),
      cmocka_unit_test(test_rollback_lookup_among_many_rollbacks),
      cmocka_unit_test(test_old_read_of_first_head_beside_deleted_records),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
