/* suggest.h — "did you mean" for names typed by people: the configuration's
 * keys (config.c) and the failpoints of PERCOLATOR_FAILPOINTS (failpoint.c). */
#ifndef PC_CORE_SUGGEST_H
#define PC_CORE_SUGGEST_H

#include <stddef.h>

/* The entry of known[0..nknown) closest to word[0..len) (case-insensitive
 * optimal string alignment: at most 1 edit for names of up to 4 bytes, 2
 * for longer ones, or word a prefix of at least 4 bytes), or NULL when none
 * is close. */
const char *pc_suggest(const char *word, size_t len, const char *const *known, size_t nknown);

#endif
