/* bad_magic.c — a test plugin whose description has the wrong magic constant. */
#include <percolator/observer.h>

const pc_plugin_magic_t *pc_plugin_magic(void) {
  static const pc_plugin_magic_t m = {0xDEADBEEFu, sizeof m, PC_OBSERVER_ABI_MAJOR,
                                      PC_OBSERVER_ABI_MINOR, "bad_magic", "1"};
  return &m;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)api, (void)reg, (void)config_json, (void)err;
  return PC_OK;
}
