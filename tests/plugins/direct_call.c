/* direct_call.c — a test plugin that calls libpercolator directly instead of
 * through the host's table. It is not linked to the library, so loading it
 * must fail on the unresolved symbol (RTLD_NOW), naming it. */
#include <percolator/observer.h>

PC_PLUGIN_DECLARE("direct_call", "0.1");

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)api, (void)reg, (void)config_json, (void)err;
  return pc_status_name(PC_OK)[0] == 'o' ? PC_OK : PC_INTERNAL;
}
