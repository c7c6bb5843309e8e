/* old_abi.c — a plugin built against ABI 1.0's header
 * (tests/plugins/abi_1_0/percolator/observer.h, the release's file), as one
 * built before ABI 1.1 and never rebuilt. Its definition of an observer is
 * followed in memory by bytes 0xA5, where ABI 1.1 put observe_batch and
 * batch_max: a host that read past ABI 1.0's definition would find a bogus
 * batch callback there. Its strong observer "old_strong" copies the notified
 * value to out:old of the row. */
#include <percolator/observer.h>

#include <string.h>

PC_PLUGIN_DECLARE("old_abi", "1.0.0");

#if PC_OBSERVER_ABI_MINOR != 0
#error "old_abi.c must be built against ABI 1.0's observer.h"
#endif

static const pc_host_api_t *host;

static pc_status_t observe_old(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                               pc_error_t *err) {
  (void)state;
  char *v = NULL;
  size_t n = 0;
  pc_status_t st = host->txn_get(txn, cell->table, cell->row, cell->row_len, cell->column,
                                 cell->column_len, &v, &n, err);
  if (st != PC_OK) return st;
  st = host->txn_set(txn, cell->table, cell->row, cell->row_len, "out:old", 7, v, n, err);
  host->free(v);
  return st;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)config_json;
  host = api;
  static struct {
    pc_observer_def_t def;
    unsigned char after[64];
  } d;
  memset(&d, 0xA5, sizeof d);
  d.def = (pc_observer_def_t){.name = "old_strong", .table = "docs", .column = "in:o",
                              .column_len = 4, .kind = PC_OBSERVER_STRONG,
                              .observe = observe_old};
  return api->register_observer(reg, &d.def, err);
}
