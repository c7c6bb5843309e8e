/* pair.c — the test plugin of tests/test_observers_cli.sh: two sets of
 * observers, chosen by its config ({"set": "a"} or {"set": "b"}), for two
 * worker processes with different observers on one store. Every observer
 * watches table "two" and copies what it sees to the row's column
 * seen:<observer> ("-" when the cell is gone):
 *   set a  a.shared (strong, s:v), a.own (strong, a:v)
 *   set b  b.shared (strong, s:v), b.own (strong, b:v), and b.poke (weak,
 *          s:v), which copies p:v: what a writer set with its weak
 *          notification.
 * s:v is observed by both sets, a:v and b:v by one each. */
#include <percolator/observer.h>

#include <stdio.h>
#include <string.h>

PC_PLUGIN_DECLARE("pair", "1.0.0");

static const pc_host_api_t *host;

static pc_status_t observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                           pc_error_t *err) {
  const char *name = state;
  int poke = strstr(name, "poke") != NULL;
  char seen[80];
  int sl = snprintf(seen, sizeof seen, "seen:%s", name);
  char *v = NULL;
  size_t vl = 0;
  pc_status_t st = poke ? host->txn_get(txn, cell->table, cell->row, cell->row_len, "p:v", 3, &v,
                                        &vl, err)
                        : host->txn_get(txn, cell->table, cell->row, cell->row_len, cell->column,
                                        cell->column_len, &v, &vl, err);
  if (st == PC_NOT_FOUND) {
    v = NULL;
    st = PC_OK;
  }
  if (st != PC_OK) return st;
  st = host->txn_set(txn, cell->table, cell->row, cell->row_len, seen, (size_t)sl, v ? v : "-",
                     v ? vl : 1, err);
  host->free(v);
  return st;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  host = api;
  static const struct {
    char set;
    const char *name, *column;
    pc_observer_kind_t kind;
  } defs[] = {
      {'a', "a.shared", "s:v", PC_OBSERVER_STRONG}, {'a', "a.own", "a:v", PC_OBSERVER_STRONG},
      {'b', "b.shared", "s:v", PC_OBSERVER_STRONG}, {'b', "b.own", "b:v", PC_OBSERVER_STRONG},
      {'b', "b.poke", "s:v", PC_OBSERVER_WEAK},
  };
  char set = strstr(config_json, "\"b\"") ? 'b' : strstr(config_json, "\"a\"") ? 'a' : 0;
  if (!set) {
    snprintf(err->text, sizeof err->text, "config: want {\"set\": \"a\"} or {\"set\": \"b\"}");
    return err->code = PC_INVALID;
  }
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    if (defs[i].set != set) continue;
    pc_observer_def_t def = {.name = defs[i].name, .table = "two", .column = defs[i].column,
                             .column_len = strlen(defs[i].column), .kind = defs[i].kind,
                             .observe = observe, .state = (void *)defs[i].name};
    pc_status_t st = api->register_observer(reg, &def, err);
    if (st != PC_OK) return st;
  }
  return PC_OK;
}
