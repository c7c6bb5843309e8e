/* fail_init.c — a test plugin whose init registers one observer and then
 * fails: the host must remove that observer again (calling its state_free)
 * and must not call pc_plugin_teardown. */
#include <percolator/observer.h>

#include <string.h>

#include "trace.h"

PC_PLUGIN_DECLARE("fail_init", "0.1");

static pc_status_t observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                           pc_error_t *err) {
  (void)state, (void)txn, (void)cell, (void)err;
  return PC_OK;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)config_json;
  trace("init fail_init");
  traced_state_t *s = traced_new("fail_first");
  pc_observer_def_t def = {.name = "fail_first", .table = "docs", .column = "in:x",
                           .column_len = 4, .kind = PC_OBSERVER_STRONG, .observe = observe,
                           .state = s, .state_free = traced_free};
  pc_status_t st = api->register_observer(reg, &def, err);
  if (st != PC_OK) {
    traced_free(s);
    return st;
  }
  snprintf(err->text, sizeof err->text, "config says no");
  return PC_INVALID;
}

void pc_plugin_teardown(void) { trace("teardown fail_init"); }
