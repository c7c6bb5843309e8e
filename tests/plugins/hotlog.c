/* hotlog.c — the test plugin of the worker processes' test
 * (tests/test_worker_cli.sh). Its strong observer "hotlog" watches column
 * v:v of table "hot" and, in the observer's transaction:
 *   - reads the notified value and writes it to seen:v of the same row;
 *   - writes one log cell per run to row "log", column
 *     "<row>@<notification ts>@<start_ts>", so that the test can count the
 *     committed runs of each notification (at most one may commit).
 * With "sleep_ms" in its config it sleeps that long inside every run, so
 * that a worker killed meanwhile dies with observer transactions in flight.
 * Its observer "fails" on column f:v of table "hot" fails every run unless
 * the row's ok:v cell says "yes", for the failures/retry path. Its observer
 * "crashes" on column c:v kills the process (SIGSEGV) when the value is
 * "segv", never returns when it is "hang", and otherwise copies the value
 * to done:c. */
#include <percolator/observer.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

PC_PLUGIN_DECLARE("hotlog", "1.0.0");

static const pc_host_api_t *host;
static long sleep_ms;

static pc_status_t observe_hot(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                               pc_error_t *err) {
  (void)state;
  char *v = NULL;
  size_t vlen = 0;
  pc_status_t st = host->txn_get(txn, cell->table, cell->row, cell->row_len, cell->column,
                                 cell->column_len, &v, &vlen, err);
  if (st == PC_NOT_FOUND) return PC_OK; /* deleted: nothing to log */
  if (st != PC_OK) return st;
  st = host->txn_set(txn, cell->table, cell->row, cell->row_len, "seen:v", 6, v, vlen, err);
  host->free(v);
  if (st != PC_OK) return st;
  char col[PC_MAX_ROW + 64];
  int n = snprintf(col, sizeof col, "%.*s@%llu@%llu", (int)cell->row_len, cell->row,
                   (unsigned long long)cell->notify_ts,
                   (unsigned long long)host->txn_start_ts(txn));
  if (sleep_ms > 0) {
    struct timespec d = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
  }
  return host->txn_set(txn, cell->table, "log", 3, col, (size_t)n, "1", 1, err);
}

static pc_status_t observe_fails(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                                 pc_error_t *err) {
  (void)state;
  char *v = NULL;
  size_t vlen = 0;
  pc_status_t st =
      host->txn_get(txn, cell->table, cell->row, cell->row_len, "ok:v", 4, &v, &vlen, err);
  int ok = st == PC_OK && vlen == 3 && memcmp(v, "yes", 3) == 0;
  host->free(v);
  if (!ok) {
    snprintf(err->text, sizeof err->text, "row %.*s is not ok yet", (int)cell->row_len,
             cell->row);
    return PC_INVALID;
  }
  return host->txn_set(txn, cell->table, cell->row, cell->row_len, "done:v", 6, "1", 1, err);
}

static pc_status_t observe_crashes(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                                   pc_error_t *err) {
  (void)state;
  char *v = NULL;
  size_t vlen = 0;
  pc_status_t st = host->txn_get(txn, cell->table, cell->row, cell->row_len, cell->column,
                                 cell->column_len, &v, &vlen, err);
  if (st == PC_NOT_FOUND) return PC_OK;
  if (st != PC_OK) return st;
  if (vlen == 4 && memcmp(v, "segv", 4) == 0) raise(SIGSEGV);
  if (vlen == 4 && memcmp(v, "hang", 4) == 0)
    for (;;) {
      struct timespec d = {1, 0};
      nanosleep(&d, NULL);
    }
  st = host->txn_set(txn, cell->table, cell->row, cell->row_len, "done:c", 6, v, vlen, err);
  host->free(v);
  return st;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  host = api;
  const char *p = strstr(config_json, "\"sleep_ms\"");
  if (p && (p = strchr(p, ':'))) sleep_ms = strtol(p + 1, NULL, 10);
  pc_observer_def_t def = {.name = "hotlog", .table = "hot", .column = "v:v", .column_len = 3,
                           .kind = PC_OBSERVER_STRONG, .observe = observe_hot};
  pc_status_t st = api->register_observer(reg, &def, err);
  if (st != PC_OK) return st;
  def = (pc_observer_def_t){.name = "fails", .table = "hot", .column = "f:v", .column_len = 3,
                            .kind = PC_OBSERVER_STRONG, .observe = observe_fails};
  if ((st = api->register_observer(reg, &def, err)) != PC_OK) return st;
  def = (pc_observer_def_t){.name = "crashes", .table = "hot", .column = "c:v", .column_len = 3,
                            .kind = PC_OBSERVER_STRONG, .observe = observe_crashes};
  return api->register_observer(reg, &def, err);
}
