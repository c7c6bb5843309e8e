/* crashes.c — runs the worker process died in. The journal (journal.c)
 * tells a starting worker every run its predecessor died in: a segfault or
 * an abort in the observer, a kill, or the watchdog's bounded stop giving
 * up on a run that did not return. Each is a death of that observer on that
 * cell, counted in the store so that it adds up across restarts and
 * workers: row "crash/<observer>/<table>/<XXH3-128 of row and column>" of
 * the system table, columns table, row, column, observer, ts (the change)
 * and deaths (decimal). At max_failures deaths in a row the change is
 * parked (parked.c) with the reason, in the transaction that deletes the
 * count, and the pair is held back: the observer does not run on the cell
 * again until a retry is asked for, so a poison cell stops killing workers
 * while every other cell goes on.
 *
 * Deaths count in a row: a run of the pair that completes (commits or
 * skips) deletes the count. Which pairs have a count is read from the store
 * when the worker starts and with each look at the parked notifications
 * (once a second), so a run of a pair without one costs a lookup in memory.
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

#define CRASH_PREFIX "crash/"
#define CC_TABLE "table"
#define CC_ROW "row"
#define CC_COLUMN "column"
#define CC_OBSERVER "observer"
#define CC_TS "ts"
#define CC_DEATHS "deaths"
static const char *const crash_columns[] = {CC_TABLE, CC_ROW, CC_COLUMN,
                                            CC_OBSERVER, CC_TS, CC_DEATHS};
#define NCRASH_COLUMNS (sizeof crash_columns / sizeof *crash_columns)

static pc_status_t put(pc_txn_t *t, const pc_buf_t *row, const char *col, const char *v, size_t n,
                       pc_error_t *err) {
  return pc_txn_set_system(t, PC_SYSTEM_TABLE, row->p, row->len, col, strlen(col), v, n, err);
}

static pc_status_t delete_count(pc_txn_t *t, const pc_buf_t *row, pc_error_t *err) {
  pc_status_t st = PC_OK;
  for (size_t i = 0; i < NCRASH_COLUMNS && st == PC_OK; i++)
    st = pc_txn_delete_system(t, PC_SYSTEM_TABLE, row->p, row->len, crash_columns[i],
                              strlen(crash_columns[i]), err);
  return st;
}

/* The deaths counted so far in row (0 when none). */
static pc_status_t read_deaths(pc_txn_t *t, const pc_buf_t *row, uint32_t *n, pc_error_t *err) {
  char *v = NULL;
  size_t vl = 0;
  *n = 0;
  pc_status_t st = pc_txn_get(t, PC_SYSTEM_TABLE, row->p, row->len, CC_DEATHS,
                              strlen(CC_DEATHS), &v, &vl, err);
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    return PC_OK;
  }
  if (st != PC_OK) return st;
  uint32_t d = 0;
  for (size_t i = 0; i < vl && i < 10; i++)
    if (v[i] >= '0' && v[i] <= '9') d = d * 10 + (uint32_t)(v[i] - '0');
  pc_free(v);
  *n = d;
  return PC_OK;
}

/* One transaction: the count of run's pair plus one, or, at max_failures,
 * the failure record and no count. *parked says which. */
static pc_status_t count_one(pc_worker_t *w, const pc_journal_run_t *run, const pc_buf_t *row,
                             int weak, uint32_t *deaths, int *parked, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(w->db, err);
  if (!t) return err ? err->code : PC_INTERNAL;
  const pc_cell_t *c = &run->cell;
  pc_status_t st = read_deaths(t, row, deaths, err);
  (*deaths)++;
  *parked = *deaths >= w->o.max_failures;
  if (st == PC_OK && *parked) {
    char why[160];
    snprintf(why, sizeof why,
             "the worker process died while the observer ran on this cell (%" PRIu32
             " times in a row)",
             *deaths);
    st = pc_park_record(t, c, run->observer, weak, run->ts, *deaths, why, err);
    if (st == PC_OK) st = delete_count(t, row, err);
  } else if (st == PC_OK) {
    char num[16], tsb[24];
    snprintf(num, sizeof num, "%" PRIu32, *deaths);
    snprintf(tsb, sizeof tsb, "%" PRIu64, run->ts);
    st = put(t, row, CC_TABLE, c->table, strlen(c->table), err);
    if (st == PC_OK) st = put(t, row, CC_ROW, c->row, c->rlen, err);
    if (st == PC_OK) st = put(t, row, CC_COLUMN, c->col, c->clen, err);
    if (st == PC_OK) st = put(t, row, CC_OBSERVER, run->observer, strlen(run->observer), err);
    if (st == PC_OK) st = put(t, row, CC_TS, tsb, strlen(tsb), err);
    if (st == PC_OK) st = put(t, row, CC_DEATHS, num, strlen(num), err);
  }
  if (st == PC_OK) st = pc_txn_commit(t, err);
  pc_txn_destroy(t);
  return st;
}

void pc_crash_count(pc_worker_t *w, const pc_journal_run_t *run) {
  const pc_cell_t *c = &run->cell;
  char name[200];
  pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, name, sizeof name);
  obs_slot_t *slot = NULL;
  for (size_t i = 0; i < w->nslots && !slot; i++)
    if (strcmp(w->slots[i].obs->name, run->observer) == 0) slot = &w->slots[i];
  int weak = slot && slot->obs->kind == PC_OBSERVER_WEAK;
  pc_buf_t row = {0}, key = {0};
  pc_error_t err;
  pc_status_t st = PC_NOMEM;
  uint32_t deaths = 0;
  int parked = 0;
  if (pc_record_row(&row, CRASH_PREFIX, c, run->observer) == 0 &&
      pc_backoff_key(&key, c, run->observer) == 0) {
    for (int attempt = 0; attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
      st = count_one(w, run, &row, weak, &deaths, &parked, &err);
      if (st != PC_CONFLICT && st != PC_LOCKED) break;
    }
  } else {
    pc_error_set(&err, PC_NOMEM, "out of memory");
  }
  if (st != PC_OK) {
    pc_log(PC_LOG_WARN, "worker: the previous worker died while observer '%s' ran on %s; "
                        "counting it: %s", run->observer, name, err.text);
  } else if (parked) {
    if (slot) pc_count(slot, PC_C_PARKED);
    pc_parked_hold(w, &key);
    pc_log(PC_LOG_WARN, "worker: observer '%s' on %s parked: the worker process died while it "
                        "ran there, %" PRIu32 " times in a row", run->observer, name, deaths);
  } else {
    if (slot) pc_count(slot, PC_C_FAILURES);
    pthread_mutex_lock(&w->sets_mu);
    (void)pc_keyset_add(w->suspects, key.p, key.len);
    pthread_mutex_unlock(&w->sets_mu);
    pc_log(PC_LOG_WARN, "worker: the previous worker died while observer '%s' ran on %s (%" PRIu32
                        " of %u times before it is parked)", run->observer, name, deaths,
           w->o.max_failures);
  }
  pc_buf_free(&row);
  pc_buf_free(&key);
}

void pc_crash_forget(pc_worker_t *w, const pc_cell_t *c, const char *observer,
                     const pc_buf_t *key) {
  pthread_mutex_lock(&w->sets_mu);
  int had = pc_keyset_del(w->suspects, key->p, key->len);
  pthread_mutex_unlock(&w->sets_mu);
  if (!had) return;
  pc_buf_t row = {0};
  pc_error_t err;
  pc_status_t st = pc_record_row(&row, CRASH_PREFIX, c, observer) == 0
                       ? PC_OK
                       : pc_error_set(&err, PC_NOMEM, "out of memory");
  for (int attempt = 0; st == PC_OK && attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(w->db, &err);
    if (!t) {
      st = err.code;
      break;
    }
    st = delete_count(t, &row, &err);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    pc_txn_destroy(t);
    if (st != PC_CONFLICT && st != PC_LOCKED) break;
  }
  if (st != PC_OK) /* the next look finds the count again, and the next run deletes it */
    pc_log(PC_LOG_DEBUG, "worker: forgetting the deaths of observer '%s': %s", observer, err.text);
  pc_buf_free(&row);
}

pc_status_t pc_crash_suspects(pc_worker_t *w, keyset_t *set, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(w->db, err);
  if (!t) return err ? err->code : PC_INTERNAL;
  static const char lo[] = CRASH_PREFIX, hi[] = "crash0"; /* '/' + 1 */
  pc_scan_t *sc = pc_txn_scan(t, PC_SYSTEM_TABLE, lo, sizeof lo - 1, hi, sizeof hi - 1, err);
  if (!sc) {
    pc_txn_destroy(t);
    return err ? err->code : PC_INTERNAL;
  }
  /* a record's columns arrive in column order: column, deaths, observer,
   * row, table, ts; the key is made at the row's last column */
  pc_buf_t cols[NCRASH_COLUMNS] = {{0}}, row = {0}, key = {0};
  pc_status_t st;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *col = pc_scan_column(sc, &cl),
               *val = pc_scan_value(sc, &vl);
    if (row.len != rl || memcmp(row.p, r, rl) != 0) {
      row.len = 0;
      for (size_t i = 0; i < NCRASH_COLUMNS; i++) cols[i].len = 0;
      if (pc_buf_append(&row, r, rl) != 0) goto oom;
    }
    for (size_t i = 0; i < NCRASH_COLUMNS; i++)
      if (strlen(crash_columns[i]) == cl && memcmp(crash_columns[i], col, cl) == 0) {
        cols[i].len = 0;
        if (pc_buf_append(&cols[i], val, vl) || pc_buf_u8(&cols[i], 0)) goto oom;
      }
    if (!cols[0].len || !cols[1].len || !cols[2].len || !cols[3].len) continue;
    const char *observer = cols[3].p;
    int mine = 0;
    for (size_t i = 0; i < w->nslots && !mine; i++) mine = strcmp(w->slots[i].obs->name, observer) == 0;
    if (!mine) continue;
    pc_cell_t c = {cols[0].p, cols[1].p, cols[1].len - 1, cols[2].p, cols[2].len - 1};
    key.len = 0;
    if (pc_backoff_key(&key, &c, observer) != 0 || pc_keyset_add(set, key.p, key.len) != 0) goto oom;
  }
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    st = PC_OK;
  }
  goto out;
oom:
  st = pc_error_set(err, PC_NOMEM, "out of memory");
out:
  for (size_t i = 0; i < NCRASH_COLUMNS; i++) pc_buf_free(&cols[i]);
  pc_buf_free(&row);
  pc_buf_free(&key);
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  return st;
}
