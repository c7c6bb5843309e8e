/* dup_init.c — a test plugin that registers the name "dup" twice: the second
 * registration fails, init passes that failure on, and the host must remove
 * the first one again. */
#include <percolator/observer.h>

#include "trace.h"

PC_PLUGIN_DECLARE("dup_init", "0.1");

static pc_status_t observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                           pc_error_t *err) {
  (void)state, (void)txn, (void)cell, (void)err;
  return PC_OK;
}

static pc_status_t add(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *column,
                       const char *tag, pc_error_t *err) {
  traced_state_t *s = traced_new(tag);
  pc_observer_def_t def = {.name = "dup", .table = "docs", .column = column, .column_len = 4,
                           .kind = PC_OBSERVER_WEAK, .observe = observe, .state = s,
                           .state_free = traced_free};
  pc_status_t st = api->register_observer(reg, &def, err);
  if (st != PC_OK) {
    trace("refused %s", tag);
    free(s); /* not registered: still ours (freed without the trace line) */
  }
  return st;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)config_json;
  pc_status_t st = add(api, reg, "in:a", "dup#1", err);
  if (st == PC_OK) st = add(api, reg, "in:b", "dup#2", err);
  return st;
}
