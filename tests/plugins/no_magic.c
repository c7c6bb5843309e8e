/* no_magic.c — a test plugin without pc_plugin_magic: the host must refuse it
 * before calling anything in it. */
#include <percolator/observer.h>

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)api, (void)reg, (void)config_json, (void)err;
  return PC_OK;
}
