/* good.c — a well-formed test plugin. Its strong observer "good_strong" uses
 * every transaction function of the host's table on the notified row and
 * writes what it saw to columns out:* of that row, so that the test can check
 * each call after the commit; its weak observer "good_weak" fails on demand
 * (the notified value "fail" or "weird"). Init, state_free and teardown are
 * traced (trace.h). */
#include <percolator/observer.h>

#include <stdio.h>
#include <string.h>

#include "trace.h"

PC_PLUGIN_DECLARE("good", "2.3.4");

static const pc_host_api_t *host;
static pc_plugin_reg_t *saved_reg; /* to show that registering after init is refused */

static pc_status_t put(pc_txn_t *txn, const pc_notified_cell_t *cell, const char *col,
                       const char *val, size_t vlen, pc_error_t *err) {
  return host->txn_set(txn, cell->table, cell->row, cell->row_len, col, strlen(col), val, vlen,
                       err);
}

static pc_status_t observe_strong(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                                  pc_error_t *err) {
  (void)state;
  char buf[PC_ERROR_TEXT + 64];
  /* scan the row before writing anything: how many committed cells it has */
  pc_scan_t *scan = host->txn_scan(txn, cell->table, cell->row, cell->row_len, NULL, 0, err);
  if (!scan) return err->code;
  int cells = 0;
  pc_status_t st;
  size_t n;
  while ((st = host->scan_next(scan, err)) == PC_OK) {
    const char *r = host->scan_row(scan, &n);
    if (n != cell->row_len || memcmp(r, cell->row, n) != 0) break; /* the next row */
    (void)host->scan_column(scan, &n);
    (void)host->scan_value(scan, &n);
    cells++;
  }
  host->scan_destroy(scan);
  if (st != PC_OK && st != PC_NOT_FOUND) return st;

  char *value = NULL;
  size_t vlen = 0;
  st = host->txn_get(txn, cell->table, cell->row, cell->row_len, cell->column, cell->column_len,
                     &value, &vlen, err);
  if (st != PC_OK) return st;
  st = put(txn, cell, "out:copy", value, vlen, err);
  host->free(value);
  if (st != PC_OK) return st;

  int m = snprintf(buf, sizeof buf, "%d", cells);
  if ((st = put(txn, cell, "out:cells", buf, (size_t)m, err)) != PC_OK) return st;
  m = snprintf(buf, sizeof buf, "%llu", (unsigned long long)host->txn_start_ts(txn));
  if ((st = put(txn, cell, "out:start_ts", buf, (size_t)m, err)) != PC_OK) return st;
  m = snprintf(buf, sizeof buf, "%llu", (unsigned long long)cell->notify_ts);
  if ((st = put(txn, cell, "out:notify_ts", buf, (size_t)m, err)) != PC_OK) return st;

  pc_error_t e2;
  st = host->notify_weak(txn, cell->table, cell->row, cell->row_len, "in:y", 4, &e2);
  m = snprintf(buf, sizeof buf, "%s: %s", host->status_name(st), st == PC_OK ? "" : e2.text);
  if ((st = put(txn, cell, "out:weak", buf, (size_t)m, err)) != PC_OK) return st;

  pc_observer_def_t late = {.name = "late", .table = "docs", .column = "in:z", .column_len = 4,
                            .observe = observe_strong};
  st = host->register_observer(saved_reg, &late, &e2);
  m = snprintf(buf, sizeof buf, "%s", host->status_name(st));
  if ((st = put(txn, cell, "out:late", buf, (size_t)m, err)) != PC_OK) return st;

  /* ABI 1.1: the notified cell, in:del and a cell without a value in one
   * read; two writes in one call; the row's in: columns; rows with its prefix */
  if (PC_HOST_HAS(host, txn_scan_prefix)) {
    pc_cell_ref_t refs[3] = {{cell->table, cell->row, cell->row_len, cell->column, cell->column_len},
                             {cell->table, cell->row, cell->row_len, "in:del", 6},
                             {cell->table, cell->row, cell->row_len, "in:none", 7}};
    pc_value_t v[3];
    if ((st = host->txn_get_many(txn, refs, 3, v, err)) != PC_OK) return st;
    m = snprintf(buf, sizeof buf, "%.*s|%.*s|%s", (int)v[0].vlen, v[0].value ? v[0].value : "",
                 (int)v[1].vlen, v[1].value ? v[1].value : "", v[2].value ? "?" : "-");
    for (int i = 0; i < 3; i++) host->free(v[i].value);
    if ((st = put(txn, cell, "out:many", buf, (size_t)m, err)) != PC_OK) return st;
    pc_cell_ref_t w[2] = {{cell->table, cell->row, cell->row_len, "out:set1", 8},
                          {cell->table, cell->row, cell->row_len, "out:set2", 8}};
    pc_value_t wv[2] = {{(char *)"one", 3}, {NULL, 0}};
    if ((st = host->txn_set_many(txn, w, wv, 2, err)) != PC_OK) return st;
    pc_scan_t *sc = host->txn_scan_row(txn, cell->table, cell->row, cell->row_len, "in:", 3, err);
    if (!sc) return err->code;
    size_t at = 0;
    while ((st = host->scan_next(sc, err)) == PC_OK) {
      const char *c = host->scan_column(sc, &n);
      at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%.*s", at ? "," : "", (int)n, c);
    }
    host->scan_destroy(sc);
    if (st != PC_NOT_FOUND) return st;
    if ((st = put(txn, cell, "out:row", buf, at, err)) != PC_OK) return st;
    sc = host->txn_scan_prefix(txn, cell->table, cell->row, cell->row_len, "in:x", 4, err);
    if (!sc) return err->code;
    int rows = 0;
    while ((st = host->scan_next(sc, err)) == PC_OK) rows++;
    host->scan_destroy(sc);
    if (st != PC_NOT_FOUND) return st;
    m = snprintf(buf, sizeof buf, "%d", rows);
    if ((st = put(txn, cell, "out:prefix", buf, (size_t)m, err)) != PC_OK) return st;
  }

  if ((st = host->txn_delete(txn, cell->table, cell->row, cell->row_len, "in:del", 6, err)) !=
      PC_OK)
    return st;
  host->log(host->host_ctx, PC_PLUGIN_LOG_DEBUG, "good_strong ran on %zu-byte row",
            cell->row_len);
  return PC_OK;
}

static pc_status_t observe_weak(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                                pc_error_t *err) {
  (void)state;
  char *value = NULL;
  size_t vlen = 0;
  pc_status_t st = host->txn_get(txn, cell->table, cell->row, cell->row_len, cell->column,
                                 cell->column_len, &value, &vlen, err);
  if (st != PC_OK) return st;
  int fail = vlen == 4 && memcmp(value, "fail", 4) == 0;
  int weird = vlen == 5 && memcmp(value, "weird", 5) == 0;
  host->free(value);
  err->text[0] = '\0'; /* a failure without a message */
  if (fail) return PC_IO_ERROR;
  if (weird) return (pc_status_t)99;
  return PC_OK;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  trace("init %s", config_json);
  if (api->abi_major != PC_OBSERVER_ABI_MAJOR || !PC_HOST_HAS(api, register_observer)) {
    snprintf(err->text, sizeof err->text, "unexpected host table");
    return PC_INTERNAL;
  }
  host = api;
  saved_reg = reg;
  traced_state_t *s = traced_new("good_strong");
  pc_observer_def_t def = {.name = "good_strong", .table = "docs", .column = "in:x",
                           .column_len = 4, .kind = PC_OBSERVER_STRONG, .observe = observe_strong,
                           .state = s, .state_free = traced_free};
  pc_status_t st = api->register_observer(reg, &def, err);
  if (st != PC_OK) {
    traced_free(s);
    return st;
  }
  s = traced_new("good_weak");
  def = (pc_observer_def_t){.name = "good_weak", .table = "docs", .column = "in:y",
                            .column_len = 4, .kind = PC_OBSERVER_WEAK, .observe = observe_weak,
                            .state = s, .state_free = traced_free};
  st = api->register_observer(reg, &def, err);
  if (st != PC_OK) traced_free(s);
  return st;
}

void pc_plugin_teardown(void) { trace("teardown good"); }
