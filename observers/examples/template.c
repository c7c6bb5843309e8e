/* template.c — the smallest observer plugin, to copy when writing one: it
 * registers one strong observer on column "raw:text" of table "docs" that
 * reads the cell it was notified about and logs its size, writing nothing.
 * See docs/OBSERVERS.md for the whole contract.
 *
 * Build it with the installed headers only (no libpercolator to link):
 *
 *   cc -shared -fPIC -o template.so template.c $(pkg-config --cflags percolator)
 *
 * and list it in the configuration's workers.plugins:
 *
 *   "workers": { "plugins": [ { "path": "/path/to/template.so" } ] }
 */
#include <percolator/observer.h>

/* 1. Say what this is: pc_plugin_magic() names the ABI this file was built
 *    against, so that a host of another ABI refuses it with a clear message
 *    instead of crashing. */
PC_PLUGIN_DECLARE("template", "1.0.0");

/* The host's functions. The table stays valid until the plugin is unloaded,
 * so keeping the pointer for the callbacks is allowed. */
static const pc_host_api_t *host;

/* 3. The callback. It may run on many threads at once: everything it touches
 *    besides txn and its own locals must be safe for that. It reads and
 *    writes only through txn, never commits or aborts it (the host does, by
 *    the status returned), and may run more than once for one notification,
 *    so what it does must be idempotent. */
static pc_status_t observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                           pc_error_t *err) {
  (void)state;
  char *value = NULL;
  size_t len = 0;
  pc_status_t st = host->txn_get(txn, cell->table, cell->row, cell->row_len, cell->column,
                                 cell->column_len, &value, &len, err);
  if (st == PC_NOT_FOUND) return PC_OK; /* deleted since: nothing to do */
  if (st != PC_OK) return st;           /* err says why; the run is retried later */
  host->log(host->host_ctx, PC_PLUGIN_LOG_DEBUG, "%.*s: %zu bytes", (int)cell->row_len,
            cell->row, len);
  host->free(value); /* what the host returns is released with its free */
  return PC_OK;      /* commit (here: nothing but the run's own bookkeeping) */
}

/* 2. Register the observers. Only here, during init, may the plugin do so;
 *    the definition is copied, so it can live on the stack. */
pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg,
                           const char *config_json, pc_error_t *err) {
  (void)config_json; /* this plugin takes no settings: its "config" is ignored */
  host = api;
  pc_observer_def_t def = {
      .name = "template",
      .table = "docs",
      .column = "raw:text",
      .column_len = 8,
      .kind = PC_OBSERVER_STRONG,
      .observe = observe,
  };
  return api->register_observer(reg, &def, err);
}
