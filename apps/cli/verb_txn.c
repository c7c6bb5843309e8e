/* verb_txn.c — `percolator txn`: an interactive transaction session. It reads
 * command lines on stdin (begin, get, set, delete, scan, commit, abort, help,
 * quit), answers each one at once and flushes, so a person or a script can
 * drive it step by step; --json makes every answer one JSON object per line.
 * Tokens may be double-quoted with C escapes, so any byte string can be said.
 * A line may start with "@NAME" to address one of several transactions open
 * at once in the session (the embedded store admits one process per data
 * directory, so this is how concurrent transactions meet on one store).
 * Malformed lines get error answers; EOF or quit aborts what is still open.
 * The grammar of a line is txn_line.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "txn_line.h"

#define MAX_NAMED 1024

typedef txn_token_t token_t;

/* A transaction slot: "" is the default, "@NAME" lines use named ones. */
typedef struct slot {
  char name[TXN_MAX_NAME + 1];
  pc_txn_t *txn;
} slot_t;

typedef struct session {
  cli_ctx_t *ctx;
  pc_db_t *db;
  int json;
  slot_t *slots;
  size_t nslots;
  int quit;
} session_t;

/* What one line is about, for the answer. */
typedef struct request {
  const char *op; /* the command as typed (NULL when the line did not parse) */
  size_t oplen;
  const char *name; /* the @NAME without '@', or NULL */
} request_t;

/* ---- answers ------------------------------------------------------------------------ */

static json_t *json_answer(const request_t *rq, const char *status) {
  json_t *o = json_object();
  if (!o) return NULL;
  if (rq->name && json_object_set_new(o, "txn", json_string(rq->name))) goto fail;
  if (rq->op ? fmt_json_bytes(o, "op", rq->op, rq->oplen)
             : json_object_set_new(o, "op", json_null()))
    goto fail;
  if (json_object_set_new(o, "status", json_string(status))) goto fail;
  return o;
fail:
  json_decref(o);
  return NULL;
}

static void text_prefix(const request_t *rq) {
  if (rq->name) printf("@%s ", rq->name);
}

/* "error STATUS: MESSAGE" / {"status":"STATUS","error":"MESSAGE"} */
static void answer_error(session_t *s, const request_t *rq, pc_status_t st, const char *msg) {
  if (!msg || !*msg) msg = pc_status_name(st);
  if (s->json) {
    json_t *o = json_answer(rq, pc_status_name(st));
    if (o && fmt_json_bytes(o, "error", msg, strlen(msg))) {
      json_decref(o);
      o = NULL;
    }
    fmt_json_line(stdout, o);
    return;
  }
  text_prefix(rq);
  printf("error %s: ", pc_status_name(st));
  fmt_escape(stdout, msg, strlen(msg), 0);
  putchar('\n');
}

static void answer_pc_error(session_t *s, const request_t *rq, const pc_error_t *err) {
  answer_error(s, rq, err->code, err->text);
}

/* "ok" plus an optional "key=value" (key NULL for none). */
static void answer_ok(session_t *s, const request_t *rq, const char *key, uint64_t v) {
  if (s->json) {
    json_t *o = json_answer(rq, "ok");
    if (o && key && fmt_json_u64(o, key, v)) {
      json_decref(o);
      o = NULL;
    }
    fmt_json_line(stdout, o);
    return;
  }
  text_prefix(rq);
  if (key)
    printf("ok %s=%llu\n", key, (unsigned long long)v);
  else
    puts("ok");
}

/* ---- commands ---------------------------------------------------------------------- */

static slot_t *find_slot(session_t *s, const char *name) {
  for (size_t i = 0; i < s->nslots; i++)
    if (strcmp(s->slots[i].name, name) == 0) return &s->slots[i];
  return NULL;
}

/* The open transaction of the request, or NULL after answering an error. */
static pc_txn_t *open_txn(session_t *s, const request_t *rq) {
  slot_t *sl = find_slot(s, rq->name ? rq->name : "");
  if (sl && sl->txn) return sl->txn;
  answer_error(s, rq, PC_STATE, "no open transaction (send 'begin' first)");
  return NULL;
}

/* Ends the request's transaction (after commit or abort). */
static void close_txn(session_t *s, const request_t *rq) {
  slot_t *sl = find_slot(s, rq->name ? rq->name : "");
  if (!sl) return;
  pc_txn_destroy(sl->txn);
  sl->txn = NULL;
}

static void cmd_begin(session_t *s, const request_t *rq) {
  const char *name = rq->name ? rq->name : "";
  slot_t *sl = find_slot(s, name);
  if (sl && sl->txn) {
    char msg[128];
    snprintf(msg, sizeof msg, "a transaction is already open (start_ts=%llu): commit or abort it",
             (unsigned long long)pc_txn_start_ts(sl->txn));
    answer_error(s, rq, PC_STATE, msg);
    return;
  }
  if (!sl) {
    if (s->nslots == MAX_NAMED) {
      answer_error(s, rq, PC_INVALID, "too many named transactions in this session");
      return;
    }
    slot_t *v = realloc(s->slots, (s->nslots + 1) * sizeof *v);
    if (!v) {
      answer_error(s, rq, PC_NOMEM, "out of memory");
      return;
    }
    s->slots = v;
    sl = &s->slots[s->nslots++];
    snprintf(sl->name, sizeof sl->name, "%s", name);
    sl->txn = NULL;
  }
  pc_error_t err;
  sl->txn = pc_txn_begin(s->db, &err);
  if (!sl->txn) {
    answer_pc_error(s, rq, &err);
    return;
  }
  answer_ok(s, rq, "start_ts", pc_txn_start_ts(sl->txn));
}

/* Table names are C strings: a decoded token must not hold a NUL. */
static int check_table_token(session_t *s, const request_t *rq, const token_t *t) {
  if (strlen(t->p) == t->n) return 0;
  answer_error(s, rq, PC_INVALID, "table name contains a NUL byte");
  return -1;
}

static void cmd_get(session_t *s, const request_t *rq, token_t *a) {
  pc_txn_t *txn = open_txn(s, rq);
  if (!txn || check_table_token(s, rq, &a[0])) return;
  pc_error_t err;
  char *value = NULL;
  size_t vlen = 0;
  pc_status_t st = pc_txn_get(txn, a[0].p, a[1].p, a[1].n, a[2].p, a[2].n, &value, &vlen, &err);
  if (st == PC_OK) {
    if (s->json) {
      json_t *o = json_answer(rq, "ok");
      if (o && fmt_json_bytes(o, "value", value, vlen)) {
        json_decref(o);
        o = NULL;
      }
      fmt_json_line(stdout, o);
    } else {
      text_prefix(rq);
      fputs("value ", stdout);
      fmt_escape(stdout, value, vlen, 1);
      putchar('\n');
    }
  } else if (st == PC_NOT_FOUND) {
    if (s->json) {
      fmt_json_line(stdout, json_answer(rq, "not_found"));
    } else {
      text_prefix(rq);
      puts("not_found");
    }
  } else {
    answer_pc_error(s, rq, &err);
  }
  pc_free(value);
}

static void cmd_write(session_t *s, const request_t *rq, token_t *a, int is_set) {
  pc_txn_t *txn = open_txn(s, rq);
  if (!txn || check_table_token(s, rq, &a[0])) return;
  pc_error_t err;
  pc_status_t st =
      is_set ? pc_txn_set(txn, a[0].p, a[1].p, a[1].n, a[2].p, a[2].n, a[3].p, a[3].n, &err)
             : pc_txn_delete(txn, a[0].p, a[1].p, a[1].n, a[2].p, a[2].n, &err);
  if (st == PC_OK)
    answer_ok(s, rq, NULL, 0);
  else
    answer_pc_error(s, rq, &err);
}

/* scan T [START [END]]: text answers a "cell ROW COLUMN VALUE" line per cell
 * then "ok cells=N"; JSON answers one object with a "cells" array. */
static void cmd_scan(session_t *s, const request_t *rq, token_t *a, int nargs) {
  pc_txn_t *txn = open_txn(s, rq);
  if (!txn || check_table_token(s, rq, &a[0])) return;
  pc_error_t err;
  pc_scan_t *scan = pc_txn_scan(txn, a[0].p, nargs > 1 ? a[1].p : NULL, nargs > 1 ? a[1].n : 0,
                                nargs > 2 ? a[2].p : NULL, nargs > 2 ? a[2].n : 0, &err);
  if (!scan) {
    answer_pc_error(s, rq, &err);
    return;
  }
  json_t *cells = s->json ? json_array() : NULL;
  uint64_t count = 0;
  pc_status_t st = PC_OK;
  int oom = s->json && !cells;
  while (!oom && (st = pc_scan_next(scan, &err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(scan, &rl), *c = pc_scan_column(scan, &cl),
               *v = pc_scan_value(scan, &vl);
    count++;
    if (s->json) {
      json_t *o = json_object();
      if (!o || fmt_json_bytes(o, "row", r, rl) || fmt_json_bytes(o, "column", c, cl) ||
          fmt_json_bytes(o, "value", v, vl) || json_array_append_new(cells, o)) {
        json_decref(o);
        oom = 1;
      }
    } else {
      text_prefix(rq);
      fputs("cell ", stdout);
      fmt_escape(stdout, r, rl, 1);
      putchar(' ');
      fmt_escape(stdout, c, cl, 1);
      putchar(' ');
      fmt_escape(stdout, v, vl, 1);
      putchar('\n');
    }
  }
  pc_scan_destroy(scan);
  if (oom) {
    json_decref(cells);
    answer_error(s, rq, PC_NOMEM, "out of memory");
  } else if (st != PC_NOT_FOUND) {
    json_decref(cells);
    answer_pc_error(s, rq, &err);
  } else if (s->json) {
    json_t *o = json_answer(rq, "ok");
    if (!o || fmt_json_u64(o, "count", count)) {
      json_decref(cells);
      json_decref(o);
      answer_error(s, rq, PC_NOMEM, "out of memory");
    } else if (json_object_set_new(o, "cells", cells)) { /* releases cells */
      json_decref(o);
      answer_error(s, rq, PC_NOMEM, "out of memory");
    } else {
      fmt_json_line(stdout, o);
    }
  } else {
    answer_ok(s, rq, "cells", count);
  }
}

static void cmd_commit(session_t *s, const request_t *rq) {
  pc_txn_t *txn = open_txn(s, rq);
  if (!txn) return;
  pc_error_t err;
  pc_status_t st = pc_txn_commit(txn, &err);
  if (st == PC_OK)
    answer_ok(s, rq, "commit_ts", pc_txn_commit_ts(txn));
  else
    answer_pc_error(s, rq, &err);
  close_txn(s, rq); /* finished either way */
}

static void cmd_abort(session_t *s, const request_t *rq) {
  pc_txn_t *txn = open_txn(s, rq);
  if (!txn) return;
  pc_txn_abort(txn);
  close_txn(s, rq);
  answer_ok(s, rq, NULL, 0);
}

static const char *const help_lines[] = {
    "begin                  start a transaction (answer: ok start_ts=N)",
    "get T R C              read a cell (value \"...\" | not_found)",
    "set T R C VALUE        buffer a write (ok)",
    "delete T R C           buffer a delete (ok)",
    "scan T [START [END]]   list cells of rows [START, END) (cell R C V lines, then ok cells=N)",
    "commit                 commit (ok commit_ts=N, 0 when nothing was written)",
    "abort                  discard the transaction (ok)",
    "help                   this list",
    "quit                   end the session (open transactions are aborted)",
    "tokens: separated by spaces; \"quoted\" with \\\" \\\\ \\n \\t \\r \\0 \\xHH for any bytes",
    "@NAME COMMAND          address transaction NAME (several may be open at once)",
};
#define NHELP (sizeof help_lines / sizeof help_lines[0])

static void cmd_help(session_t *s, const request_t *rq) {
  if (s->json) {
    json_t *o = json_answer(rq, "ok"), *a = json_array();
    int bad = !o || !a;
    for (size_t i = 0; i < NHELP && !bad; i++)
      bad = json_array_append_new(a, json_string(help_lines[i])) != 0;
    if (bad || json_object_set_new(o, "help", a)) {
      if (bad) json_decref(a);
      json_decref(o);
      answer_error(s, rq, PC_NOMEM, "out of memory");
      return;
    }
    fmt_json_line(stdout, o);
    return;
  }
  for (size_t i = 0; i < NHELP; i++) {
    text_prefix(rq);
    printf("# %s\n", help_lines[i]);
  }
  answer_ok(s, rq, NULL, 0);
}

/* Answers one line (without its newline). */
static void handle_line(session_t *s, const char *line, size_t n) {
  txn_line_t l;
  pc_status_t st = txn_line_parse(line, n, &l);
  request_t rq = {l.op, l.oplen, l.name};
  token_t *a = l.args;
  if (st != PC_OK) {
    answer_error(s, &rq, st, l.msg);
  } else {
    switch (l.cmd) {
      case TXN_BEGIN: cmd_begin(s, &rq); break;
      case TXN_GET: cmd_get(s, &rq, a); break;
      case TXN_SET: cmd_write(s, &rq, a, 1); break;
      case TXN_DELETE: cmd_write(s, &rq, a, 0); break;
      case TXN_SCAN: cmd_scan(s, &rq, a, l.nargs); break;
      case TXN_COMMIT: cmd_commit(s, &rq); break;
      case TXN_ABORT: cmd_abort(s, &rq); break;
      case TXN_HELP: cmd_help(s, &rq); break;
      case TXN_QUIT:
        answer_ok(s, &rq, NULL, 0);
        s->quit = 1;
        break;
    }
  }
  txn_line_free(&l);
}

static int run_txn(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'},
      {NULL, 0, NULL, 0},
  };
  int json = 0, code, c;
  while ((c = cli_getopt(ctx, argc, argv, "j", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == 'j')
      json = 1;
    else
      return cli_usage_error(ctx, "unexpected option");
  }
  if (optind != argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  session_t s = {ctx, NULL, json, NULL, 0, 0};
  s.db = cli_open_db(ctx, 0);
  if (!s.db) return CLI_EXIT_ERROR;
  int prompt = !json && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  char *line = NULL;
  size_t cap = 0;
  code = CLI_EXIT_OK;
  while (!s.quit) {
    if (prompt) {
      fputs("percolator> ", stdout);
      fflush(stdout);
    }
    errno = 0;
    ssize_t got = getline(&line, &cap, stdin);
    if (got < 0) {
      if (errno) code = cli_error(ctx, "reading the standard input: %s", strerror(errno));
      break;
    }
    size_t n = (size_t)got;
    if (n && line[n - 1] == '\n') n--;
    if (n && line[n - 1] == '\r') n--;
    if (txn_line_ignorable(line, n)) continue;
    handle_line(&s, line, n);
    if (fflush(stdout) != 0 || ferror(stdout)) {
      code = cli_error(ctx, "writing the standard output: %s", strerror(errno));
      break;
    }
  }
  free(line);
  for (size_t i = 0; i < s.nslots; i++) pc_txn_destroy(s.slots[i].txn); /* aborts */
  free(s.slots);
  pc_db_close(s.db);
  return code;
}

const cli_verb_t cli_verb_txn = {
    "txn",
    "run an interactive transaction session on stdin/stdout",
    "Usage: percolator [--data DIR] txn [--json]\n"
    "\n"
    "Reads one command per line on stdin and answers each at once (stdout is\n"
    "flushed after every answer), so a person or a script can drive it step by\n"
    "step. Many transactions may follow one another in a session. Blank lines\n"
    "and lines starting with '#' are ignored. EOF or 'quit' ends the session;\n"
    "a transaction still open is aborted.\n"
    "\n"
    "Commands and their text answers:\n"
    "  begin                  ok start_ts=N\n"
    "  get T R C              value \"BYTES\" | not_found\n"
    "  set T R C VALUE        ok\n"
    "  delete T R C           ok\n"
    "  scan T [START [END]]   one 'cell \"ROW\" \"COLUMN\" \"VALUE\"' line per cell of\n"
    "                         rows [START, END), then ok cells=N\n"
    "  commit                 ok commit_ts=N (0 when nothing was written)\n"
    "  abort                  ok\n"
    "  help                   '# ...' lines, then ok\n"
    "  quit                   ok\n"
    "Any command may fail with 'error STATUS: MESSAGE', STATUS being a library\n"
    "status name (conflict, locked, timeout, invalid_argument, wrong_state, ...).\n"
    "A commit that fails finishes the transaction; other failures leave it open.\n"
    "A failed commit applied nothing (conflict, aborted, ...), except 'unknown':\n"
    "its reply was lost and the store could not be asked, so it may or may not\n"
    "stand; readers settle it, all or nothing.\n"
    "Commands other than begin, help and quit need an open transaction.\n"
    "\n"
    "Tokens are separated by spaces. A token may be double-quoted, with the\n"
    "escapes \\\" \\\\ \\n \\t \\r \\0 and \\xHH (two hex digits), to say any byte\n"
    "string; answers quote values the same way.\n"
    "\n"
    "Several transactions at once: a line starting with @NAME (1-32 of\n"
    "[A-Za-z0-9_.-]) addresses transaction NAME, and its answer starts with\n"
    "'@NAME '. Lines without it use the session's default transaction.\n"
    "\n"
    "Options:\n"
    "  -j, --json     answer one JSON object per line: {\"op\",\"status\", ...} with\n"
    "                 \"start_ts\", \"commit_ts\", \"value\", \"count\"+\"cells\" or\n"
    "                 \"error\", and \"txn\" for @NAME lines; \"status\" is \"ok\",\n"
    "                 \"not_found\" or the STATUS of an error (match on it, not on\n"
    "                 the message); bytes that are not UTF-8 appear as KEY_base64\n"
    "  --data DIR     the data directory\n"
    "  --timeout MS   bound on every blocking call (default 10000)\n"
    "  -h, --help     show this help\n"
    "\n"
    "Example:\n"
    "  printf 'begin\\nset accounts Bob bal: \"$10\"\\ncommit\\n' | percolator txn\n",
    run_txn,
};
