/* failmalloc.c — an LD_PRELOAD library for tests: malloc and realloc of a
 * size between the bounds of FAILMALLOC_BETWEEN="LO-HI" (bytes) return NULL,
 * every other call goes to the C library's. tests/test_load_faults.sh uses it
 * to make the loader's buffers for one large input fail and check that the
 * load stops with an error rather than loading a shortened document. (Not
 * built with the sanitizers, whose runtime must come first.) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdlib.h>

static size_t lo, hi;
static int ready;

static int fails(size_t n) {
  if (!ready) {
    const char *s = getenv("FAILMALLOC_BETWEEN");
    char *e;
    if (s) {
      lo = strtoull(s, &e, 10);
      if (*e == '-') hi = strtoull(e + 1, NULL, 10);
    }
    ready = 1;
  }
  return hi && n >= lo && n <= hi;
}

__attribute__((visibility("default"))) void *malloc(size_t n) {
  static void *(*real)(size_t);
  if (!real) real = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  return fails(n) ? NULL : real(n);
}

__attribute__((visibility("default"))) void *realloc(void *p, size_t n) {
  static void *(*real)(void *, size_t);
  if (!real) real = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  return fails(n) ? NULL : real(p, n);
}
