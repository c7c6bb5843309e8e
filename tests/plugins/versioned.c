/* versioned.c — the test plugin of the plugin upgrade test
 * (tests/test_plugin_upgrade.sh), built twice: with BUILD_TAG "v1" and "v2"
 * (versioned_v1.so, versioned_v2.so), so that which build ran is visible in
 * the store. Its strong observer "versioned" watches column raw:text of
 * table "docs" and writes the tag of its build to ver:tag of the notified
 * row, and one cell per run to row "runs", column "<row>@<notification ts>",
 * so that the test can count the committed runs of each notification. With
 * "sleep_ms" in its config it sleeps that long inside every run, so that a
 * reload finds runs in flight to drain. */
#include <percolator/observer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BUILD_TAG
#error "build with -DBUILD_TAG=\"v1\" (or v2)"
#endif

PC_PLUGIN_DECLARE("versioned", BUILD_TAG);

static const pc_host_api_t *host;
static long sleep_ms;

static pc_status_t observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                           pc_error_t *err) {
  (void)state;
  if (sleep_ms > 0) {
    struct timespec d = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
  }
  pc_status_t st = host->txn_set(txn, cell->table, cell->row, cell->row_len, "ver:tag", 7,
                                 BUILD_TAG, strlen(BUILD_TAG), err);
  if (st != PC_OK) return st;
  char col[PC_MAX_ROW + 32];
  int n = snprintf(col, sizeof col, "%.*s@%llu", (int)cell->row_len, cell->row,
                   (unsigned long long)cell->notify_ts);
  return host->txn_set(txn, cell->table, "runs", 4, col, (size_t)n, BUILD_TAG,
                       strlen(BUILD_TAG), err);
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  host = api;
  const char *p = strstr(config_json, "\"sleep_ms\"");
  if (p && (p = strchr(p, ':'))) sleep_ms = strtol(p + 1, NULL, 10);
  pc_observer_def_t def = {.name = "versioned", .table = "docs", .column = "raw:text",
                           .column_len = 8, .kind = PC_OBSERVER_STRONG, .observe = observe};
  return api->register_observer(reg, &def, err);
}
