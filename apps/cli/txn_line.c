/* txn_line.c — parsing one line of `percolator txn` (grammar in
 * txn_line.h): tokens, the optional @NAME, the command and its operand
 * count. It allocates only the buffer of decoded tokens and touches no store. */
#include "txn_line.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Splits line[0..n) into at most TXN_MAX_TOKENS tokens decoded into buf
 * (n + TXN_MAX_TOKENS bytes). Returns the count, or -1 with a message. */
static int tokenize(const char *line, size_t n, char *buf, txn_token_t *tok, const char **msg) {
  size_t i = 0;
  int nt = 0;
  char *w = buf;
  for (;;) {
    while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i == n) return nt;
    if (nt == TXN_MAX_TOKENS) {
      *msg = "too many arguments";
      return -1;
    }
    tok[nt].p = w;
    tok[nt].quoted = line[i] == '"';
    if (tok[nt].quoted) {
      i++;
      for (;;) {
        if (i == n) {
          *msg = "unbalanced quote";
          return -1;
        }
        if (line[i] == '"') break;
        if (line[i] == '\\') {
          size_t k = fmt_unescape_one(line + i, n - i, w);
          if (k == 0) {
            *msg = i + 1 < n && line[i + 1] == 'x'
                       ? "bad escape: \\x needs two hex digits"
                       : "bad escape (use \\\" \\\\ \\n \\t \\r \\0 \\xHH)";
            return -1;
          }
          w++;
          i += k;
        } else {
          *w++ = line[i++];
        }
      }
      i++; /* the closing quote */
      if (i < n && line[i] != ' ' && line[i] != '\t') {
        *msg = "text right after a closing quote (separate tokens with spaces)";
        return -1;
      }
    } else {
      while (i < n && line[i] != ' ' && line[i] != '\t') {
        if (line[i] == '"') {
          *msg = "a quote inside an unquoted token (quote the whole token)";
          return -1;
        }
        *w++ = line[i++];
      }
    }
    tok[nt].n = (size_t)(w - tok[nt].p);
    *w++ = '\0';
    nt++;
  }
}

/* The commands: name and operand count range. */
typedef struct command {
  const char *name;
  txn_cmd_t cmd;
  int min_args, max_args;
  const char *usage;
} command_t;

static const command_t commands[] = {
    {"begin", TXN_BEGIN, 0, 0, "begin"},
    {"get", TXN_GET, 3, 3, "get TABLE ROW COLUMN"},
    {"set", TXN_SET, 4, 4, "set TABLE ROW COLUMN VALUE"},
    {"delete", TXN_DELETE, 3, 3, "delete TABLE ROW COLUMN"},
    {"scan", TXN_SCAN, 1, 3, "scan TABLE [START [END]]"},
    {"commit", TXN_COMMIT, 0, 0, "commit"},
    {"abort", TXN_ABORT, 0, 0, "abort"},
    {"help", TXN_HELP, 0, 0, "help"},
    {"quit", TXN_QUIT, 0, 0, "quit"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static int valid_name(const char *p, size_t n) {
  if (n == 0 || n > TXN_MAX_NAME) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return 0;
  }
  return 1;
}

static pc_status_t refuse(txn_line_t *l, pc_status_t st, const char *msg) {
  snprintf(l->msg, sizeof l->msg, "%s", msg);
  return st;
}

pc_status_t txn_line_parse(const char *line, size_t n, txn_line_t *out) {
  memset(out, 0, sizeof *out);
  if (n > TXN_MAX_LINE) return refuse(out, PC_INVALID, "line too long");
  out->buf = malloc(n + TXN_MAX_TOKENS + 1);
  if (!out->buf) return refuse(out, PC_NOMEM, "out of memory");
  txn_token_t tok[TXN_MAX_TOKENS];
  const char *msg = NULL;
  int nt = tokenize(line, n, out->buf, tok, &msg);
  txn_token_t *t = tok;
  if (nt > 0 && !t[0].quoted && t[0].n > 0 && t[0].p[0] == '@') {
    if (!valid_name(t[0].p + 1, t[0].n - 1))
      return refuse(out, PC_INVALID, "bad transaction name after '@' (1-32 of [A-Za-z0-9_.-])");
    out->name = t[0].p + 1;
    t++;
    nt--;
  }
  if (nt < 0) return refuse(out, PC_INVALID, msg);
  if (nt == 0) return refuse(out, PC_INVALID, "no command after the transaction name");
  out->op = t[0].p;
  out->oplen = t[0].n;
  const command_t *cmd = NULL;
  for (size_t i = 0; i < NCOMMANDS && !cmd; i++)
    if (strlen(commands[i].name) == t[0].n && strcmp(commands[i].name, t[0].p) == 0)
      cmd = &commands[i];
  int nargs = nt - 1;
  if (!cmd) {
    snprintf(out->msg, sizeof out->msg, "unknown command '%.40s' (try 'help')", t[0].p);
    return PC_INVALID;
  }
  if (nargs < cmd->min_args || nargs > cmd->max_args) {
    snprintf(out->msg, sizeof out->msg, "%s arguments; usage: %s",
             nargs < cmd->min_args ? "missing" : "too many", cmd->usage);
    return PC_INVALID;
  }
  out->cmd = cmd->cmd;
  out->nargs = nargs;
  for (int i = 0; i < nargs; i++) out->args[i] = t[1 + i];
  return PC_OK;
}

void txn_line_free(txn_line_t *l) {
  free(l->buf);
  l->buf = NULL;
}

int txn_line_ignorable(const char *line, size_t n) {
  size_t i = 0;
  while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
  return i == n || line[i] == '#';
}
