/* main.c — the entry point of `percolator`: the verb table, the global
 * options (--data, --timeout, --help, --version), dispatch to a verb, and the
 * helpers every verb shares (option parsing that adds the common options,
 * opening the store, error messages under the exit-code convention of cli.h).
 * The verbs themselves live in verbs_data.c (init/get/set/delete/scan) and
 * verb_txn.c (the interactive txn session); add new ones to the table below. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/db.h"

static int run_help(cli_ctx_t *ctx, int argc, char **argv);

static const cli_verb_t verb_help = {
    "help",
    "show the help of percolator or of one verb",
    "Usage: percolator help [VERB]\n"
    "\n"
    "Shows the overview of percolator, or the help of VERB (the same as\n"
    "'percolator VERB --help').\n"
    "\n"
    "Example:\n"
    "  percolator help scan\n",
    run_help,
};

/* The verbs, in the order 'percolator --help' lists them. Later verbs (run,
 * tablet, tso, worker, status, wait, failures, bench) are added here. */
static const cli_verb_t *const verbs[] = {
    &cli_verb_init, &cli_verb_get,   &cli_verb_set,    &cli_verb_delete, &cli_verb_scan,
    &cli_verb_txn,  &cli_verb_run,   &cli_verb_tablet, &cli_verb_tso,
    &cli_verb_worker, &cli_verb_observers, &cli_verb_wait, &cli_verb_failures,
    &cli_verb_status, &cli_verb_gc, &cli_verb_load, &cli_verb_clusters,
    &cli_verb_search, &cli_verb_doc, &cli_verb_check, &verb_help,
};
#define NVERBS (sizeof verbs / sizeof verbs[0])

/* Long-only options: values outside the range of short option characters. */
enum { OPT_DATA = 0x100, OPT_TIMEOUT, OPT_CONFIG };

/* The options every verb accepts, appended to its own by cli_getopt. */
static const struct option common_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"data", required_argument, NULL, OPT_DATA},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"config", required_argument, NULL, OPT_CONFIG},
};
#define NCOMMON (sizeof common_options / sizeof common_options[0])

static const char global_usage[] =
    "Usage: percolator [GLOBAL OPTIONS] VERB [ARGS...]\n"
    "\n"
    "Snapshot-isolation transactions over a Bigtable-like store (Percolator).\n"
    "With no configuration the verbs use the embedded store in the data\n"
    "directory; only one process at a time may hold a data directory.\n"
    "\n"
    "Global options (also accepted after the verb):\n"
    "  --data DIR     the data directory (default " CLI_DEFAULT_DATA_DIR ")\n"
    "  --timeout MS   bound on every blocking call: reads meeting a lock, commit,\n"
    "                 the timestamp oracle (default 10000)\n"
    "  --config FILE  a JSON configuration (docs/CONFIG.md): a cluster's daemons,\n"
    "                 or the embedded store in its data_dir (which, as --data DIR,\n"
    "                 must exist: 'percolator --config FILE init' creates it)\n"
    "  -h, --help     show this help ('percolator VERB --help': a verb's help)\n"
    "  -V, --version  show the version\n"
    "\n"
    "Verbs:\n";

static const char global_tail[] =
    "\n"
    "Exit status: 0 ok, 1 not found (get), 2 usage error, 3 any other error,\n"
    "4 commit outcome unknown (set, delete: it may or may not stand; readers settle it).\n"
    "Example:\n"
    "  percolator --data /tmp/pc init && percolator --data /tmp/pc set accounts Bob bal: 10\n";

static void print_global_help(FILE *out) {
  fputs(global_usage, out);
  for (size_t i = 0; i < NVERBS; i++)
    fprintf(out, "  %-8s %s\n", verbs[i]->name, verbs[i]->summary);
  fputs(global_tail, out);
}

/* A verb that is not one, and the retired ones said as such. */
static int unknown_verb(const cli_ctx_t *ctx, const char *name) {
  if (strcmp(name, "lockd") == 0)
    return cli_usage_error(ctx,
                           "'lockd' is retired: a cluster coordinates through ZooKeeper (a "
                           "\"zookeeper\" section in the configuration; docs/CONFIG.md)");
  return cli_usage_error(ctx, "unknown verb '%s'", name);
}

static const cli_verb_t *find_verb(const char *name) {
  for (size_t i = 0; i < NVERBS; i++)
    if (strcmp(verbs[i]->name, name) == 0) return verbs[i];
  return NULL;
}

static const char *verb_name(const cli_ctx_t *ctx) { return ctx->verb ? ctx->verb->name : NULL; }

static void vreport(const cli_ctx_t *ctx, const char *fmt, va_list ap) {
  fputs("percolator: ", stderr);
  if (verb_name(ctx)) fprintf(stderr, "%s: ", verb_name(ctx));
  vfprintf(stderr, fmt, ap);
}

int cli_usage_error(const cli_ctx_t *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(ctx, fmt, ap);
  va_end(ap);
  if (verb_name(ctx))
    fprintf(stderr, " (see 'percolator %s --help')\n", verb_name(ctx));
  else
    fputs(" (see 'percolator --help')\n", stderr);
  return CLI_EXIT_USAGE;
}

int cli_error(const cli_ctx_t *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(ctx, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return CLI_EXIT_ERROR;
}

int cli_pc_error(const cli_ctx_t *ctx, const pc_error_t *err) {
  return cli_error(ctx, "%s", err->text[0] ? err->text : pc_status_name(err->code));
}

pc_db_t *cli_open_db(const cli_ctx_t *ctx, int create) {
  pc_options_t *opts = pc_options_create();
  if (!opts) {
    cli_error(ctx, "out of memory");
    return NULL;
  }
  pc_options_set_create_if_missing(opts, create);
  if (ctx->timeout_ms) pc_options_set_timeout_ms(opts, ctx->timeout_ms);
  pc_error_t err;
  pc_db_t *db = ctx->config ? pc_db_open_config_create(ctx->config, create, &err)
                            : pc_db_open(opts, ctx->data_dir, &err);
  if (!db && err.code == PC_BUSY) {
    /* held by a `percolator worker` that serves it: be its client */
    char *dir = NULL;
    if (ctx->config) {
      pc_error_t e2;
      pc_config_t *cfg = pc_config_load(ctx->config, &e2);
      if (cfg && cfg->ntablets == 0) dir = strdup(cfg->data_dir);
      pc_config_free(cfg);
    } else {
      dir = strdup(ctx->data_dir);
    }
    char path[4200];
    if (dir && snprintf(path, sizeof path, "%s/" CLI_SERVING_FILE, dir) > 0 &&
        access(path, R_OK) == 0) {
      pc_error_t e3;
      pc_db_t *served = pc_db_open_config(path, &e3);
      if (served) db = served;
      else err = e3;
    }
    free(dir);
  }
  if (db && (ctx->config || ctx->timeout_ms) && ctx->timeout_ms)
    pc_db_set_timeout_ms(db, ctx->timeout_ms);
  pc_options_destroy(opts);
  if (!db) cli_pc_error(ctx, &err);
  return db;
}

int cli_finish_output(const cli_ctx_t *ctx) {
  if (fflush(stdout) != 0 || ferror(stdout))
    return cli_error(ctx, "writing the standard output: %s", strerror(errno));
  return CLI_EXIT_OK;
}

/* Parses a --timeout value: 1..86400000 milliseconds. */
static int parse_timeout(const cli_ctx_t *ctx, const char *s, uint32_t *ms) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v == 0 || v > 86400000ul) {
    cli_usage_error(ctx, "--timeout '%s': expected milliseconds, 1..86400000", s);
    return -1;
  }
  *ms = (uint32_t)v;
  return 0;
}

/* The offending option of a '?' or ':' from getopt_long, for messages:
 * argv[optind - 1] when that is the long option at fault, else optopt. */
static const char *bad_option(char **argv, const struct option *opts, char *buf, size_t bufsize) {
  const char *a = optind > 0 ? argv[optind - 1] : NULL;
  if (a && strncmp(a, "--", 2) == 0) {
    size_t n = strcspn(a + 2, "=");
    int at_fault = optopt == 0; /* an unknown long option */
    for (size_t i = 0; opts && opts[i].name && !at_fault; i++)
      at_fault = opts[i].val == optopt && strncmp(opts[i].name, a + 2, n) == 0;
    if (at_fault) {
      snprintf(buf, bufsize, "--%.*s", (int)n, a + 2);
      return buf;
    }
  }
  if (optopt > 0 && optopt < 0x100)
    snprintf(buf, bufsize, "-%c", optopt);
  else
    snprintf(buf, bufsize, "%s", a ? a : "?");
  return buf;
}

/* Builds ctx->merged: the verb's long options, the common ones, the terminator. */
static int merge_options(cli_ctx_t *ctx, const struct option *longopts) {
  size_t n = 0;
  while (longopts && longopts[n].name) n++;
  free(ctx->merged);
  ctx->merged = calloc(n + NCOMMON + 1, sizeof *ctx->merged);
  if (!ctx->merged) return -1;
  if (n) memcpy(ctx->merged, longopts, n * sizeof *longopts);
  memcpy(ctx->merged + n, common_options, sizeof common_options);
  return 0;
}

int cli_getopt(cli_ctx_t *ctx, int argc, char **argv, const char *shortopts,
               const struct option *longopts, int *exit_code) {
  char shorts[64];
  if (!ctx->merged || optind == 0) {
    if (merge_options(ctx, longopts) != 0) {
      *exit_code = cli_error(ctx, "out of memory");
      return CLI_GETOPT_EXIT;
    }
  }
  snprintf(shorts, sizeof shorts, ":h%s", shortopts ? shortopts : "");
  opterr = 0;
  for (;;) {
    int c = getopt_long(argc, argv, shorts, ctx->merged, NULL);
    char buf[128];
    switch (c) {
      case 'h':
        fputs(ctx->verb->help, stdout);
        *exit_code = cli_finish_output(ctx);
        return CLI_GETOPT_EXIT;
      case OPT_DATA:
        if (!*optarg) {
          *exit_code = cli_usage_error(ctx, "--data: empty directory name");
          return CLI_GETOPT_EXIT;
        }
        ctx->data_dir = optarg;
        break;
      case OPT_TIMEOUT:
        if (parse_timeout(ctx, optarg, &ctx->timeout_ms) != 0) {
          *exit_code = CLI_EXIT_USAGE;
          return CLI_GETOPT_EXIT;
        }
        break;
      case OPT_CONFIG:
        if (!*optarg) {
          *exit_code = cli_usage_error(ctx, "--config: empty file name");
          return CLI_GETOPT_EXIT;
        }
        ctx->config = optarg;
        break;
      case '?':
        *exit_code = cli_usage_error(ctx, "unknown option '%s'",
                                     bad_option(argv, ctx->merged, buf, sizeof buf));
        return CLI_GETOPT_EXIT;
      case ':':
        *exit_code = cli_usage_error(ctx, "option '%s' needs a value",
                                     bad_option(argv, ctx->merged, buf, sizeof buf));
        return CLI_GETOPT_EXIT;
      default: return c; /* the verb's own option, or -1 */
    }
  }
}

static int run_help(cli_ctx_t *ctx, int argc, char **argv) {
  int code;
  int c = cli_getopt(ctx, argc, argv, "", NULL, &code);
  if (c == CLI_GETOPT_EXIT) return code;
  if (c != -1) return cli_usage_error(ctx, "unexpected option");
  if (argc - optind > 1) return cli_usage_error(ctx, "expected at most one VERB");
  if (optind == argc) {
    print_global_help(stdout);
  } else {
    const cli_verb_t *v = find_verb(argv[optind]);
    if (!v) return unknown_verb(ctx, argv[optind]);
    fputs(v->help, stdout);
  }
  return cli_finish_output(ctx);
}

int main(int argc, char **argv) {
  static const struct option global_options[] = {
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {"data", required_argument, NULL, OPT_DATA},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"config", required_argument, NULL, OPT_CONFIG},
      {NULL, 0, NULL, 0},
  };
  cli_ctx_t ctx = {CLI_DEFAULT_DATA_DIR, 0, NULL, NULL, NULL};
  opterr = 0;
  int c;
  char buf[128];
  /* '+': stop at the verb, whose own options follow it */
  while ((c = getopt_long(argc, argv, "+:hV", global_options, NULL)) != -1) {
    switch (c) {
      case 'h':
        print_global_help(stdout);
        return cli_finish_output(&ctx);
      case 'V':
        printf("percolator %d.%d.%d (libpercolator %s)\n", PC_VERSION_MAJOR, PC_VERSION_MINOR,
               PC_VERSION_PATCH, pc_version());
        return cli_finish_output(&ctx);
      case OPT_DATA:
        if (!*optarg) return cli_usage_error(&ctx, "--data: empty directory name");
        ctx.data_dir = optarg;
        break;
      case OPT_TIMEOUT:
        if (parse_timeout(&ctx, optarg, &ctx.timeout_ms) != 0) return CLI_EXIT_USAGE;
        break;
      case OPT_CONFIG:
        if (!*optarg) return cli_usage_error(&ctx, "--config: empty file name");
        ctx.config = optarg;
        break;
      case ':':
        return cli_usage_error(&ctx, "option '%s' needs a value",
                               bad_option(argv, global_options, buf, sizeof buf));
      default:
        return cli_usage_error(&ctx, "unknown option '%s'",
                               bad_option(argv, global_options, buf, sizeof buf));
    }
  }
  if (optind >= argc) {
    fputs("percolator: no verb given\n\n", stderr);
    print_global_help(stderr);
    return CLI_EXIT_USAGE;
  }
  ctx.verb = find_verb(argv[optind]);
  if (!ctx.verb) return unknown_verb(&ctx, argv[optind]);
  int vargc = argc - optind;
  char **vargv = argv + optind;
  optind = 0; /* re-initialise getopt for the verb's own parse */
  int code = ctx.verb->run(&ctx, vargc, vargv);
  free(ctx.merged);
  return code;
}
