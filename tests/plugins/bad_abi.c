/* bad_abi.c — a test plugin built for the next ABI major version. Its init
 * would register an observer: the host must refuse it before calling init. */
#include <percolator/observer.h>

#include "trace.h"

const pc_plugin_magic_t *pc_plugin_magic(void) {
  static const pc_plugin_magic_t m = {PC_PLUGIN_MAGIC, sizeof m, PC_OBSERVER_ABI_MAJOR + 1, 0,
                                      "bad_abi", "1"};
  return &m;
}

static pc_status_t observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                           pc_error_t *err) {
  (void)state, (void)txn, (void)cell, (void)err;
  return PC_OK;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)config_json;
  trace("init bad_abi");
  pc_observer_def_t def = {.name = "bad_abi", .table = "docs", .column = "in:x",
                           .column_len = 4, .observe = observe};
  return api->register_observer(reg, &def, err);
}
