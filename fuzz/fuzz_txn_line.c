/* fuzz_txn_line.c — the line grammar of `percolator txn`
 * (apps/cli/txn_line.c) against any line: it parses or refuses with a
 * message, never reads or writes outside the line; a parsed line's operands
 * fit their command; and writing the parsed tokens back quoted (as the
 * answers quote values, fmt_escape_str) parses to the same tokens. */
#include <string.h>

#include "apps/cli/cli.h"
#include "apps/cli/txn_line.h"
#include "fuzz/fuzz.h"

static const int min_args[] = {0, 3, 4, 3, 1, 0, 0, 0, 0};
static const int max_args[] = {0, 3, 4, 3, 3, 0, 0, 0, 0};

/* Appends s to *w (room is checked by the caller's sizing). */
static char *put(char *w, const char *s) {
  size_t n = strlen(s);
  memcpy(w, s, n);
  return w + n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *line = (const char *)data;
  txn_line_t l;
  pc_status_t st = txn_line_parse(line, size, &l);
  if (st != PC_OK) {
    FUZZ_CHECK(st == PC_INVALID && l.msg[0]);
    txn_line_free(&l);
    return 0;
  }
  FUZZ_CHECK(l.op && l.cmd <= TXN_QUIT);
  FUZZ_CHECK(l.nargs >= min_args[l.cmd] && l.nargs <= max_args[l.cmd]);
  if (l.name) FUZZ_CHECK(strlen(l.name) >= 1 && strlen(l.name) <= TXN_MAX_NAME);
  for (int i = 0; i < l.nargs; i++) FUZZ_CHECK(l.args[i].p[l.args[i].n] == '\0');

  /* the same command, every operand quoted: each byte takes at most 4 */
  size_t cap = 64 + 4 * size + 3 * TXN_MAX_TOKENS;
  char *again = malloc(cap), *w = again;
  FUZZ_CHECK(again != NULL);
  if (l.name) {
    w = put(w, "@");
    w = put(w, l.name);
    w = put(w, " ");
  }
  memcpy(w, l.op, l.oplen);
  w += l.oplen;
  for (int i = 0; i < l.nargs; i++) {
    char *q = fmt_escape_str(l.args[i].p, l.args[i].n, 1);
    FUZZ_CHECK(q != NULL);
    w = put(w, "\t");
    w = put(w, q);
    free(q);
  }
  FUZZ_CHECK((size_t)(w - again) <= cap);
  txn_line_t m;
  FUZZ_CHECK(txn_line_parse(again, (size_t)(w - again), &m) == PC_OK);
  FUZZ_CHECK(m.cmd == l.cmd && m.nargs == l.nargs);
  FUZZ_CHECK((m.name == NULL) == (l.name == NULL));
  if (l.name) FUZZ_CHECK(strcmp(m.name, l.name) == 0);
  for (int i = 0; i < l.nargs; i++)
    FUZZ_CHECK(m.args[i].n == l.args[i].n &&
               memcmp(m.args[i].p, l.args[i].p, l.args[i].n) == 0 && m.args[i].quoted);
  txn_line_free(&m);
  free(again);
  txn_line_free(&l);
  return 0;
}
