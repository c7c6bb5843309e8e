/* fuzz_config.c — the configuration parser (config/config.c) against any
 * text, as a mistyped or hostile configuration file would be: it must accept
 * it or refuse it with a message that names the file, never crash; an
 * accepted configuration keeps the limits config.h states. */
#include <string.h>

#include "config/config.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pc_error_t err;
  pc_config_t *cfg = pc_config_parse((const char *)data, size, "fuzz.json", &err);
  if (!cfg) {
    FUZZ_CHECK(err.code == PC_INVALID || err.code == PC_NOMEM);
    FUZZ_CHECK(strncmp(err.text, "fuzz.json", 9) == 0);
    return 0;
  }
  FUZZ_CHECK(err.code == PC_OK);
  FUZZ_CHECK(cfg->data_dir && cfg->data_dir[0]);
  FUZZ_CHECK(!cfg->secret || cfg->secret[0]);
  FUZZ_CHECK(cfg->store.lock_ttl_ms >= 1 && cfg->store.timeout_ms >= 1);
  FUZZ_CHECK(cfg->workers.nplugins <= 256);
  for (size_t i = 0; i < cfg->ntablets; i++) {
    const pc_config_tablet_t *t = &cfg->tablets[i];
    FUZZ_CHECK(t->name && t->name[0] && t->listen.set);
    /* the tablets tile the rows: sorted, each starting where the previous ends */
    if (i == 0) FUZZ_CHECK(t->start_len == 0);
    if (i + 1 == cfg->ntablets) FUZZ_CHECK(t->end_len == 0);
    if (i > 0) {
      const pc_config_tablet_t *p = &cfg->tablets[i - 1];
      FUZZ_CHECK(p->end_len == t->start_len && memcmp(p->end, t->start, t->start_len) == 0);
    }
  }
  pc_config_free(cfg);
  return 0;
}
