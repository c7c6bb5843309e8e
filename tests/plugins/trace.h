/* trace.h — for the test plugins: appends a line describing an event (init,
 * state_free, teardown) to the file named by $PC_TEST_PLUGIN_TRACE, so that
 * tests/test_plugin.c can check what the host called and in which order. */
#ifndef PC_TESTS_PLUGINS_TRACE_H
#define PC_TESTS_PLUGINS_TRACE_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static inline void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void trace(const char *fmt, ...) {
  const char *path = getenv("PC_TEST_PLUGIN_TRACE");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

/* A state whose release is traced: "free NAME". */
typedef struct traced_state {
  char name[64];
} traced_state_t;

static inline void traced_free(void *state) {
  traced_state_t *s = state;
  trace("free %s", s->name);
  free(s);
}

static inline traced_state_t *traced_new(const char *name) {
  traced_state_t *s = calloc(1, sizeof *s);
  if (s) snprintf(s->name, sizeof s->name, "%s", name);
  return s;
}

#endif
