/* fuzz.h — what the libFuzzer targets of fuzz/ share: the entry point
 * libFuzzer calls, and the check that turns a broken property into a crash
 * the fuzzer records (with the input that caused it).
 *
 * A target's input is untrusted bytes, exactly as the code under test would
 * receive them from a peer or a file. A target returns 0; it aborts (through
 * FUZZ_CHECK, or the sanitizers) when the code under test misbehaves. */
#ifndef PC_FUZZ_FUZZ_H
#define PC_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts, naming the property, when cond is false. */
#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                     \
    }                                                                              \
  } while (0)

#endif
