/* suggest.c — the closest known name to a mistyped one (suggest.h). */
#include "core/suggest.h"

#include <string.h>

static int lower(int ch) { return ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch; }

/* Case-insensitive optimal-string-alignment distance, or 3 when it is at least 3. */
static size_t edit_distance(const char *a, size_t an, const char *b, size_t bn) {
  enum { W = 64 };
  if (bn >= W || (an > bn ? an - bn : bn - an) >= 3) return 3;
  size_t prev2[W], prev[W], cur[W];
  for (size_t j = 0; j <= bn; j++) prev[j] = j;
  memset(prev2, 0, sizeof prev2);
  for (size_t i = 1; i <= an; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= bn; j++) {
      size_t cost = lower((unsigned char)a[i - 1]) != lower((unsigned char)b[j - 1]);
      size_t d = prev[j - 1] + cost;
      if (prev[j] + 1 < d) d = prev[j] + 1;
      if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;
      if (i > 1 && j > 1 && lower((unsigned char)a[i - 1]) == lower((unsigned char)b[j - 2]) &&
          lower((unsigned char)a[i - 2]) == lower((unsigned char)b[j - 1]) && prev2[j - 2] + 1 < d)
        d = prev2[j - 2] + 1;
      cur[j] = d;
    }
    memcpy(prev2, prev, sizeof prev);
    memcpy(prev, cur, sizeof cur);
  }
  return prev[bn] < 3 ? prev[bn] : 3;
}

const char *pc_suggest(const char *word, size_t len, const char *const *known, size_t nknown) {
  const char *best = NULL;
  size_t best_d = 3;
  for (size_t k = 0; k < nknown; k++) {
    size_t kn = strlen(known[k]);
    size_t d = edit_distance(word, len, known[k], kn);
    if (d > (kn <= 4 ? 1u : 2u)) d = 3;
    if (d == 3 && len >= 4 && len < kn && memcmp(known[k], word, len) == 0) d = 2; /* "cache" */
    if (d < best_d) {
      best_d = d;
      best = known[k];
    }
  }
  return best;
}
