/* verbs_data.c — the one-shot data verbs of `percolator`: init (create the
 * data directory), get / set / delete (each one transaction on one cell) and
 * scan (the committed view of a table as escaped TSV or JSON lines; with
 * --raw, the internal cells, drawn by rawview.c). Each opens the embedded
 * store for the duration of the command and releases everything it took. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/db.h"

/* ---- init ------------------------------------------------------------------ */

static int run_init(cli_ctx_t *ctx, int argc, char **argv) {
  int code;
  int c = cli_getopt(ctx, argc, argv, "", NULL, &code);
  if (c == CLI_GETOPT_EXIT) return code;
  if (c != -1) return cli_usage_error(ctx, "unexpected option");
  if (optind != argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  pc_db_t *db = cli_open_db(ctx, 1);
  if (!db) return CLI_EXIT_ERROR;
  if (!db->dir && !ctx->config) /* reached through the worker that serves it */
    printf("data directory '%s' is ready (a worker serves it)\n", ctx->data_dir);
  else if (!db->dir) /* a cluster's client: its daemons create their own directories */
    printf("'%s' describes a cluster: its daemons create their data directories\n", ctx->config);
  else
    printf("data directory '%s' is ready\n", db->dir);
  pc_db_close(db);
  return cli_finish_output(ctx);
}

const cli_verb_t cli_verb_init = {
    .name = "init",
    .summary = "create and initialise the data directory",
    .run = run_init,
    .args = "",
    .flags = CLI_USES_STORE,
    .exits = CLI_EXITS_BASIC,
    .about = "Creates the data directory (default " CLI_DEFAULT_DATA_DIR ") and initialises\n"
             "its store and timestamp oracle. Running it on an initialised directory is\n"
             "harmless. The other verbs never create a directory: they refuse a missing\n"
             "one, whether named by --data or by the data_dir of --config FILE (which\n"
             "init creates).\n",
    .example = "percolator --data /tmp/pc init\n",
};

/* ---- get / set / delete ------------------------------------------------------ */

/* Parses the options of get/set/delete (only the common ones) and checks
 * that exactly nargs operands follow: -1 when they do, else the exit code. */
static int cell_args(cli_ctx_t *ctx, int argc, char **argv, int nargs, const char *names) {
  int code;
  int c = cli_getopt(ctx, argc, argv, "", NULL, &code);
  if (c == CLI_GETOPT_EXIT) return code;
  if (c != -1) return cli_usage_error(ctx, "unexpected option");
  if (argc - optind != nargs)
    return cli_usage_error(ctx, "expected %s, got %d argument%s", names, argc - optind,
                           argc - optind == 1 ? "" : "s");
  return -1;
}

static int run_get(cli_ctx_t *ctx, int argc, char **argv) {
  int code = cell_args(ctx, argc, argv, 3, "TABLE ROW COLUMN");
  if (code >= 0) return code;
  const char *table = argv[optind], *row = argv[optind + 1], *col = argv[optind + 2];
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  pc_error_t err;
  pc_txn_t *txn = pc_txn_begin(db, &err);
  char *value = NULL;
  size_t vlen = 0;
  pc_status_t st =
      txn ? pc_txn_get(txn, table, row, strlen(row), col, strlen(col), &value, &vlen, &err)
          : err.code;
  if (st == PC_OK) {
    fwrite(value, 1, vlen, stdout);
    putchar('\n');
    code = cli_finish_output(ctx);
  } else if (st == PC_INVALID) {
    code = cli_usage_error(ctx, "%s", err.text);
  } else if (st == PC_NOT_FOUND) {
    fprintf(stderr, "percolator: get: not found: %s/", table);
    fmt_escape(stderr, row, strlen(row), 0);
    fputc('/', stderr);
    fmt_escape(stderr, col, strlen(col), 0);
    fputc('\n', stderr);
    code = CLI_EXIT_NOT_FOUND;
  } else {
    code = cli_pc_error(ctx, &err);
  }
  pc_free(value);
  pc_txn_destroy(txn); /* a read-only transaction: nothing to commit */
  pc_db_close(db);
  return code;
}

/* One transaction that writes (value != NULL) or deletes one cell. */
static int write_cell(cli_ctx_t *ctx, char **args, const char *value) {
  const char *table = args[0], *row = args[1], *col = args[2];
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  pc_error_t err;
  pc_status_t st;
  pc_txn_t *txn = pc_txn_begin(db, &err);
  if (!txn)
    st = err.code;
  else if (value)
    st = pc_txn_set(txn, table, row, strlen(row), col, strlen(col), value, strlen(value), &err);
  else
    st = pc_txn_delete(txn, table, row, strlen(row), col, strlen(col), &err);
  int code;
  if (st == PC_INVALID) { /* the arguments: nothing was sent */
    code = cli_usage_error(ctx, "%s", err.text);
  } else {
    if (st == PC_OK) st = pc_txn_commit(txn, &err);
    /* PC_UNKNOWN: exit 4, not a failure: it may stand */
    code = st == PC_OK ? CLI_EXIT_OK : cli_pc_error(ctx, &err);
  }
  pc_txn_destroy(txn);
  pc_db_close(db);
  return code;
}

static int run_set(cli_ctx_t *ctx, int argc, char **argv) {
  int code = cell_args(ctx, argc, argv, 4, "TABLE ROW COLUMN VALUE");
  if (code >= 0) return code;
  if (!argv[optind + 3][0])
    return cli_usage_error(ctx, "empty VALUE (a cell holds 1 byte or more; 'delete' removes it)");
  return write_cell(ctx, argv + optind, argv[optind + 3]);
}

static int run_delete(cli_ctx_t *ctx, int argc, char **argv) {
  int code = cell_args(ctx, argc, argv, 3, "TABLE ROW COLUMN");
  if (code >= 0) return code;
  return write_cell(ctx, argv + optind, NULL);
}

const cli_verb_t cli_verb_get = {
    .name = "get",
    .summary = "print the committed value of one cell",
    .run = run_get,
    .args = "TABLE ROW COLUMN",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_NOT_FOUND),
    .about = "Reads one cell in a new transaction (a snapshot at its start) and prints\n"
             "the value's raw bytes and a newline. A lock left by a crashed writer is\n"
             "resolved on the way (rolled forward or back); a live writer's lock is\n"
             "waited for, up to --timeout. Exits 1 with 'not found' on stderr when the\n"
             "cell has no value.\n",
    .example = "percolator get accounts Bob bal:\n",
};

const cli_verb_t cli_verb_set = {
    .name = "set",
    .summary = "write one cell in its own transaction",
    .run = run_set,
    .args = "TABLE ROW COLUMN VALUE",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_UNKNOWN),
    .about = "Writes VALUE (non-empty) into the cell and commits, in one transaction.\n"
             "Prints nothing on success. Put '--' before a VALUE that starts with '-'.\n"
             "For byte strings that cannot be arguments use 'percolator txn'.\n"
             "Exits 3 when the commit failed (nothing was written), 4 when its outcome\n"
             "is unknown: the reply was lost and the store could not be asked, so the\n"
             "write may or may not stand (readers settle it; read the cell to know).\n",
    .example = "percolator set accounts Bob bal: 10\n",
};

const cli_verb_t cli_verb_delete = {
    .name = "delete",
    .summary = "delete one cell in its own transaction",
    .run = run_delete,
    .args = "TABLE ROW COLUMN",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_UNKNOWN),
    .about = "Deletes the cell and commits, in one transaction (a cell that has no value\n"
             "stays without one). Prints nothing on success. Exits 3 when the commit\n"
             "failed, 4 when its outcome is unknown (see 'percolator set --help').\n",
    .example = "percolator delete accounts Bob bal:\n",
};

/* ---- scan ------------------------------------------------------------------------ */

enum { OPT_START = 's', OPT_END = 'e', OPT_JSON = 'j', OPT_RAW = 'r', OPT_SINCE = 0x400 };

/* One cell of the committed view: escaped TSV or one JSON object. */
static int print_cell(const pc_scan_t *scan, int json) {
  size_t rl, cl, vl;
  const char *r = pc_scan_row(scan, &rl), *c = pc_scan_column(scan, &cl),
             *v = pc_scan_value(scan, &vl);
  if (json) {
    json_t *o = json_object();
    if (!o || fmt_json_bytes(o, "row", r, rl) || fmt_json_bytes(o, "column", c, cl) ||
        fmt_json_bytes(o, "value", v, vl)) {
      json_decref(o);
      return -1;
    }
    return fmt_json_line(stdout, o);
  }
  fmt_escape(stdout, r, rl, 0);
  putchar('\t');
  fmt_escape(stdout, c, cl, 0);
  putchar('\t');
  fmt_escape(stdout, v, vl, 0);
  putchar('\n');
  return 0;
}

static int committed_scan(cli_ctx_t *ctx, pc_db_t *db, const char *table, const char *start,
                          const char *end, int json) {
  pc_error_t err;
  pc_txn_t *txn = pc_txn_begin(db, &err);
  if (!txn) return cli_pc_error(ctx, &err);
  int code = CLI_EXIT_OK;
  pc_scan_t *scan =
      pc_txn_scan(txn, table, start, start ? strlen(start) : 0, end, end ? strlen(end) : 0, &err);
  if (!scan) {
    code = cli_pc_error(ctx, &err);
  } else {
    pc_status_t st;
    while ((st = pc_scan_next(scan, &err)) == PC_OK) {
      if (print_cell(scan, json) != 0) {
        code = cli_error(ctx, "out of memory or write error");
        break;
      }
    }
    if (code == CLI_EXIT_OK && st != PC_NOT_FOUND) code = cli_pc_error(ctx, &err);
    pc_scan_destroy(scan);
  }
  pc_txn_destroy(txn);
  if (code == CLI_EXIT_OK) code = cli_finish_output(ctx);
  return code;
}

static int run_scan(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {
      {"start", required_argument, NULL, OPT_START},
      {"end", required_argument, NULL, OPT_END},
      {"json", no_argument, NULL, OPT_JSON},
      {"raw", no_argument, NULL, OPT_RAW},
      {"since", required_argument, NULL, OPT_SINCE},
      {NULL, 0, NULL, 0},
  };
  const char *start = NULL, *end = NULL;
  uint64_t since = 0;
  int json = 0, raw = 0, has_since = 0, code, c;
  char *endp;
  while ((c = cli_getopt(ctx, argc, argv, "s:e:jr", opts, &code)) != -1) {
    switch (c) {
      case CLI_GETOPT_EXIT: return code;
      case OPT_START: start = optarg; break;
      case OPT_END: end = optarg; break;
      case OPT_JSON: json = 1; break;
      case OPT_RAW: raw = 1; break;
      case OPT_SINCE:
        errno = 0;
        since = strtoull(optarg, &endp, 10);
        if (errno || endp == optarg || *endp || optarg[0] == '-')
          return cli_usage_error(ctx, "--since: expected a timestamp, got '%s'", optarg);
        has_since = 1;
        break;
      default: return cli_usage_error(ctx, "unexpected option");
    }
  }
  int nargs = argc - optind;
  if (nargs > 1) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind + 1]);
  if (nargs == 0 && !raw) return cli_usage_error(ctx, "expected TABLE");
  const char *table = nargs ? argv[optind] : NULL;
  if ((start || end) && !table) return cli_usage_error(ctx, "--start and --end need a TABLE");
  if (has_since && !raw) return cli_usage_error(ctx, "--since needs --raw");
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  if (raw)
    code = cli_raw_scan(ctx, db, table, start, end, since, json);
  else
    code = committed_scan(ctx, db, table, start, end, json);
  pc_db_close(db);
  return code;
}

const cli_verb_t cli_verb_scan = {
    .name = "scan",
    .summary = "list the committed cells of a table, or every internal cell (--raw)",
    .run = run_scan,
    .args = "TABLE [--start ROW] [--end ROW] [--json]\n"
            "--raw [TABLE] [--start ROW] [--end ROW] [--since TS] [--json]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about =
        "Without --raw: the committed view of rows [START, END) of TABLE at a new\n"
        "snapshot, one line per cell in (row, column) order:\n"
        "  ROW<TAB>COLUMN<TAB>VALUE\n"
        "where backslash, tab, newline, carriage return and bytes outside printable\n"
        "ASCII are written C-style (\\\\ \\t \\n \\r \\xHH). Locks of crashed writers\n"
        "met on the way are resolved.\n"
        "\n"
        "With --raw: the store as it is (no snapshot, no lock resolution): for each\n"
        "(row, column) a block of lines, newest timestamp first, with the columns\n"
        "ts | data | lock | write (| notify | ack when there are any), as in the\n"
        "Percolator paper's figures. 'data' shows data(c, ts); a value the store\n"
        "keeps inline in a lock or write record is shown there too, marked\n"
        "'(inline)'. 'lock' shows 'primary' on a primary lock and 'primary @ ROW/COL'\n"
        "on a secondary (with ' delete' for a delete). 'write' shows 'data @ START_TS'\n"
        "for a committed put, 'delete @ START_TS' and 'rollback @ START_TS'.\n"
        "Timestamps are the 64-bit hybrid integers (ms << 18 | logical).\n"
        "Without TABLE every table is shown, each under a 'table NAME' line.\n",
    .options =
        "  -s, --start ROW     first row (inclusive)\n"
        "  -e, --end ROW       end row (exclusive)\n"
        "  -j, --json          one JSON object per line: {\"row\",\"column\",\"value\"}; with\n"
        "                      --raw one object per internal cell: {\"table\",\"row\",\n"
        "                      \"column\",\"kind\" (data|lock|write|notify|ack),\"ts\",...}.\n"
        "                      Byte strings that are not UTF-8 appear as KEY_base64.\n"
        "  -r, --raw           show the internal cells\n"
        "  --since TS          with --raw: only the cells whose ts is above TS (what was\n"
        "                      written after a transaction that started at TS: its data\n"
        "                      and locks, the commit records and acks of later commits,\n"
        "                      later notifications); the whole store is still read\n",
    .example = "percolator scan accounts --start A --end M\n"
               "percolator scan --raw accounts\n",
};
