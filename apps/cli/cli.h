/* cli.h — what the files of the `percolator` command-line tool share: the
 * verb descriptor and the verb table's entries, the per-run context (global
 * options), option parsing that adds the common options to every verb,
 * opening the database, error reporting with the exit-code convention, and
 * the output helpers of format.c.
 *
 * Adding a verb: write apps/cli/verb_NAME.c defining
 *     const cli_verb_t cli_verb_NAME = {.name = "NAME", .summary = "one line",
 *         .run = run_fn, .args = "ARGS", .flags = CLI_USES_STORE, .exits = ...,
 *         .about = "...", .options = "...", .example = "..."};
 * declare it below, add &cli_verb_NAME to the table in main.c and the file to
 * apps/cli/CMakeLists.txt. Its synopsis, the common options and its exit
 * codes in 'percolator NAME --help' are generated from those fields. run_fn
 * receives argv with argv[0] = the verb name, parses it with cli_getopt()
 * (which handles --help, --data, --config and --timeout, and suggests the
 * closest option for a mistyped one) and returns one of the CLI_EXIT_* codes. */
#ifndef PC_CLI_H
#define PC_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <percolator/percolator.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- exit codes ----------------------------------------------------------
 *
 * One set for every verb; main.c's table describes each, and 'percolator
 * --help', 'percolator help exit-codes' and each verb's help ("Exit
 * status:") are made from it; tests/test_readme.sh compares the README's
 * table with it. */

#define CLI_EXIT_OK 0          /* success */
#define CLI_EXIT_NOT_FOUND 1   /* nothing found: get, doc, search, load --delete, observers remove; check's differences */
#define CLI_EXIT_USAGE 2       /* unknown verb or option, wrong or malformed arguments */
#define CLI_EXIT_ERROR 3       /* any other error: "percolator: VERB: message" on stderr */
#define CLI_EXIT_UNKNOWN 4     /* a commit's outcome is unknown (PC_UNKNOWN): it may stand */
#define CLI_EXIT_TIMEOUT 5     /* wait: work still pending when its time ran out */
#define CLI_EXIT_STALLED 6     /* wait: pending work that no live worker can do */
#define CLI_EXIT_INTERRUPTED 130 /* SIGINT (load: stopped cleanly, summary printed) */

/* Bit of code c in a verb's exits mask (codes 0..6; 130 is bit 7). */
#define CLI_EXIT_BIT(c) (1u << ((c) == CLI_EXIT_INTERRUPTED ? 7 : (c)))
/* What every verb may return: ok, usage error, error. */
#define CLI_EXITS_BASIC (CLI_EXIT_BIT(0) | CLI_EXIT_BIT(2) | CLI_EXIT_BIT(3))

#define CLI_DEFAULT_DATA_DIR "./percolator-data"

/* ---- verbs --------------------------------------------------------------- */

struct cli_ctx;

/* What a verb accepts besides its own options and arguments (its synopsis
 * and help are generated from these flags). */
#define CLI_USES_STORE 1u   /* --data DIR or --config FILE: the store it works on */
#define CLI_USES_TIMEOUT 2u /* --timeout DURATION: it makes blocking calls */
#define CLI_NEEDS_CONFIG 4u /* --config FILE is required (the daemons of a cluster) */

typedef struct cli_verb {
  const char *name;    /* as typed on the command line */
  const char *summary; /* one line for 'percolator --help' */
  /* Runs the verb; argv[0] is the verb name. Returns a CLI_EXIT_* code. */
  int (*run)(struct cli_ctx *ctx, int argc, char **argv);
  /* The generated help: "Usage: percolator [GLOBALS] NAME ARGS" (one line per
   * '\n'-separated alternative of args, "" for none), about, the verb's
   * options followed by the common ones its flags imply, "Exit status:" from
   * exits, and the example lines. */
  const char *args;
  unsigned flags;       /* CLI_USES_* */
  unsigned exits;       /* CLI_EXIT_BIT() of every code it may return */
  const char *about;    /* what it does: paragraphs, each line ending in '\n' */
  const char *options;  /* its own options: "  --json   ...\n" lines, or NULL */
  const char *example;  /* command lines, each ending in '\n' */
} cli_verb_t;

/* The context of one run: global options, then the verb being run. */
typedef struct cli_ctx {
  const char *data_dir;   /* --data DIR */
  uint32_t timeout_ms;    /* --timeout DURATION in ms; 0 = the library's default */
  const cli_verb_t *verb; /* the verb being run (NULL while parsing global options) */
  struct option *merged;  /* cli_getopt's option table (verb's + common); freed by main */
  const char *config;     /* --config FILE, or NULL: the embedded store in data_dir */
  int data_given;         /* --data was given (with --config it is a usage error) */
} cli_ctx_t;

/* verbs_data.c */
extern const cli_verb_t cli_verb_init;
extern const cli_verb_t cli_verb_get;
extern const cli_verb_t cli_verb_set;
extern const cli_verb_t cli_verb_delete;
extern const cli_verb_t cli_verb_scan;
/* verb_txn.c */
extern const cli_verb_t cli_verb_txn;
/* verb_daemons.c (the roles themselves: daemon/) */
extern const cli_verb_t cli_verb_run;
extern const cli_verb_t cli_verb_worker;
extern const cli_verb_t cli_verb_tablet;
extern const cli_verb_t cli_verb_tso;
/* verb_tablet.c: `percolator tablet SUBCOMMAND ARGS...` (argv[0] the
 * subcommand), handed over by the tablet verb when it has operands */
int cli_tablet_ops(cli_ctx_t *ctx, int argc, char **argv);
/* verb_playground.c (the cluster itself: playground/) */
extern const cli_verb_t cli_verb_playground;
/* verb_status.c */
extern const cli_verb_t cli_verb_status;
/* verb_gc.c */
extern const cli_verb_t cli_verb_gc;
/* verb_notify.c */
extern const cli_verb_t cli_verb_observers;
extern const cli_verb_t cli_verb_failures;
/* verb_wait.c */
extern const cli_verb_t cli_verb_wait;
/* verb_doctor.c */
extern const cli_verb_t cli_verb_doctor;
/* verb_load.c, verb_dedup.c: the dedup application */
extern const cli_verb_t cli_verb_load;
extern const cli_verb_t cli_verb_clusters;
extern const cli_verb_t cli_verb_search;
extern const cli_verb_t cli_verb_doc;
extern const cli_verb_t cli_verb_check;

/* ---- option parsing and errors (main.c) ------------------------------------ */

/* Returned by cli_getopt when the verb must return *exit_code at once
 * (after --help: CLI_EXIT_OK; after a bad option: CLI_EXIT_USAGE, message printed). */
#define CLI_GETOPT_EXIT (-2)

/* getopt_long over the verb's options plus the common ones (-h/--help,
 * --data DIR, --timeout MS), which it handles itself. shortopts must not
 * start with ':' or '+' (it adds ':'); long options of the verb should use
 * values >= 'A' or >= 0x100. Returns the next verb option, -1 when options
 * end (optind is then the first operand), or CLI_GETOPT_EXIT. Options may
 * follow operands; '--' ends them. --data and --config together (before or
 * after the verb) are a usage error. */
int cli_getopt(cli_ctx_t *ctx, int argc, char **argv, const char *shortopts,
               const struct option *longopts, int *exit_code);

/* Prints "percolator: VERB: <fmt...> (see 'percolator VERB --help')" and
 * returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "percolator: VERB: <text>" on stderr and returns CLI_EXIT_ERROR. */
int cli_error(const cli_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* cli_error with a library error's text (its status name when the text is
 * empty; a leading "VERB: " of the text is not repeated). Returns
 * CLI_EXIT_UNKNOWN for PC_UNKNOWN, else CLI_EXIT_ERROR. */
int cli_pc_error(const cli_ctx_t *ctx, const pc_error_t *err);

/* Parses a duration: digits with a unit, "ms", "s", "m" or "h" ("500ms",
 * "10s", "1.5s"); a bare number takes bare_unit ("s", or NULL: a unit is
 * required). Returns 0 with *ms in 1..max_ms, or -1. */
int cli_parse_duration(const char *s, const char *bare_unit, uint64_t max_ms, uint64_t *ms);

/* Writes 'percolator VERB --help' of v to out. */
void cli_print_help(const cli_verb_t *v, FILE *out);

/* Opens the database of --config FILE, or else the embedded store in
 * ctx->data_dir; the embedded store's directory (ctx->data_dir or the
 * configuration's data_dir) is created when create is set, and refused when
 * missing otherwise. Returns NULL after printing the error. */
pc_db_t *cli_open_db(const cli_ctx_t *ctx, int create);

/* Checks that the standard output was written completely; CLI_EXIT_OK or an error. */
int cli_finish_output(const cli_ctx_t *ctx);

/* ---- output formatting (format.c) ---------------------------------------- */

/* Writes bytes C-escaped: \\ \n \t \r as such, other bytes outside 0x20..0x7e
 * as \xHH (always two hex digits). quote: also escape '"' and wrap in quotes. */
void fmt_escape(FILE *out, const char *p, size_t n, int quote);

/* The same into dst, which has room for 4 * n + 2 bytes; returns the length
 * written (no NUL). */
size_t fmt_escape_to(char *dst, const char *p, size_t n, int quote);

/* The same into a new NUL-terminated string (NULL when out of memory). */
char *fmt_escape_str(const char *p, size_t n, int quote);

/* Decodes one C escape at s[0] == '\\' of the text s[0..n): appends the byte
 * to *out, returns the characters consumed, or 0 for a malformed escape. The
 * escapes are the ones fmt_escape writes plus \" \0 and \xHH in any case. */
size_t fmt_unescape_one(const char *s, size_t n, char *out);

/* Sets obj[key] to the bytes as a JSON string when they are valid UTF-8, else
 * obj[key + "_base64"] to their base64. Returns 0, or -1 when out of memory. */
int fmt_json_bytes(json_t *obj, const char *key, const char *p, size_t n);

/* Sets obj[key] to an integer (timestamps are below 2^63). -1 when out of memory. */
int fmt_json_u64(json_t *obj, const char *key, uint64_t v);

/* Writes obj as one compact line and releases it. Returns 0, or -1 on error
 * (obj NULL from a failed allocation, or a write error). */
int fmt_json_line(FILE *out, json_t *obj);

/* "put", "delete" or "rollback". */
const char *fmt_write_kind(pc_write_kind_t kind);

/* ---- the observers' view (view.c) ---------------------------------------------
 *
 * What `wait` and `doctor` show of incremental processing: the registered
 * observers, the pending notifications per column, the live workers, and
 * the columns whose pending notifications no live worker can process (an
 * observer registered for the column runs in no live worker, or none is
 * registered: the column's notifications are kept until every registered
 * observer has covered them). */

typedef struct cli_observer {
  char *name, *table, *col; /* col: clen bytes (NUL-terminated too) */
  size_t clen;
  int kind;         /* 0 strong, 1 weak */
  uint64_t pending; /* notifications pending in its column */
  size_t nworkers;  /* live workers that run it */
} cli_observer_t;

typedef struct cli_column {
  char *table, *col;
  size_t clen;
  uint64_t count; /* pending notifications */
} cli_column_t;

typedef struct cli_view {
  uint64_t pending; /* every pending notification */
  cli_column_t *cols;
  size_t ncols;
  cli_observer_t *obs;
  size_t nobs;
  char **workers; /* live workers, "HOST:PID" */
  size_t nworkers;
} cli_view_t;

/* Reads the view through db. no_live_worker: the caller knows that no
 * worker can be running (it holds the embedded store itself), so worker
 * records (which outlive a killed worker by seconds) are not read. Release
 * with cli_view_free (also after an error). */
pc_status_t cli_view_load(pc_db_t *db, int no_live_worker, cli_view_t *v, pc_error_t *err);
void cli_view_free(cli_view_t *v);
/* Whether column c's pending notifications wait for a worker that does not run. */
int cli_view_column_stalled(const cli_view_t *v, const cli_column_t *c);
/* The pending notifications of the stalled columns. */
uint64_t cli_view_stalled(const cli_view_t *v);
/* {"pending", "stalled", "columns": [{"table","column","pending","stalled",
 * "observers": [{"name","live_workers"}]}], "live_workers": [...]}, or NULL. */
json_t *cli_view_json(const cli_view_t *v);

/* ---- the raw view (rawview.c) ---------------------------------------------- */

/* 'scan --raw': every internal cell of table (NULL: all tables), rows
 * [start, end), whose ts is above since (0: every cell), as the paper's
 * figures (text) or one JSON object per cell. */
int cli_raw_scan(const cli_ctx_t *ctx, pc_db_t *db, const char *table, const char *start,
                 const char *end, uint64_t since, int json);

#endif
