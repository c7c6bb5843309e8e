/* txn_line.h — the grammar of `percolator txn` lines, apart from the session
 * that runs them (verb_txn.c), so that it can be tested without a terminal
 * or a store.
 *
 * A line is: [@NAME] COMMAND [ARG...]. Tokens are separated by spaces or
 * tabs; a token is bare (taken as is, no '"') or double-quoted with the
 * escapes of fmt_unescape_one (\" \\ \n \t \r \0 \xHH), so any byte string
 * can be said. NAME is 1..TXN_MAX_NAME of [A-Za-z0-9_.-]. */
#ifndef PC_CLI_TXN_LINE_H
#define PC_CLI_TXN_LINE_H

#include <stddef.h>

#include <percolator/percolator.h>

#define TXN_MAX_TOKENS 8
#define TXN_MAX_LINE (48u * 1024u * 1024u) /* an 8 MiB value written as \xHH fits */
#define TXN_MAX_NAME 32

typedef enum txn_cmd {
  TXN_BEGIN,
  TXN_GET,
  TXN_SET,
  TXN_DELETE,
  TXN_SCAN,
  TXN_COMMIT,
  TXN_ABORT,
  TXN_HELP,
  TXN_QUIT,
} txn_cmd_t;

/* A decoded token: n bytes at p, followed by a NUL (table names are C
 * strings: a token with a NUL inside is refused where a table is expected). */
typedef struct txn_token {
  char *p;
  size_t n;
  int quoted;
} txn_token_t;

typedef struct txn_line {
  char *buf;        /* owns the decoded tokens */
  const char *name; /* the @NAME without '@', or NULL */
  const char *op;   /* the command as typed, or NULL when the line did not parse that far */
  size_t oplen;
  txn_cmd_t cmd;
  int nargs;
  txn_token_t args[TXN_MAX_TOKENS]; /* the command's operands */
  char msg[128];                    /* why the line was refused */
} txn_line_t;

/* Parses line[0..n) (without its newline) into *out. PC_OK: out->cmd and
 * its nargs operands, within the command's operand count. Otherwise
 * PC_INVALID (or PC_NOMEM) with out->msg saying why; out->name and out->op
 * are set as far as the line parsed, for the answer. Release with
 * txn_line_free either way. */
pc_status_t txn_line_parse(const char *line, size_t n, txn_line_t *out);
void txn_line_free(txn_line_t *l);

/* 1 when the line holds only blanks, or is a comment ('#' first). */
int txn_line_ignorable(const char *line, size_t n);

#endif
