/* main.c — the entry point of `percolator`: the verb table and the exit-code
 * table (from which every help text's synopsis, common options and exit
 * status are generated), the global options (--data, --config, --timeout,
 * --help, --version), dispatch to a verb with a did-you-mean for mistyped
 * verbs and options, and the helpers every verb shares (option parsing that
 * adds the common options, opening the store, error messages under the
 * exit-code convention of cli.h). The verbs live in verb*.c; add new ones to
 * the table below. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "core/db.h"
#include "base/error.h"
#include "core/suggest.h"
#include "daemon/daemon.h"

#ifdef PC_WITH_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

static int run_help(cli_ctx_t *ctx, int argc, char **argv);

/* Prints the malloc this program allocates through (CMakeLists.txt's
 * PC_JEMALLOC), as --version shows it. jemalloc is named only when it served
 * this thread's mallocs, the copy of its version among them: linked but
 * shadowed (by an LD_PRELOAD, say), it would have counted none. */
static void print_malloc(FILE *f) {
#ifdef PC_WITH_JEMALLOC
  const char *v = NULL;
  char *version = NULL;
  uint64_t served = 0;
  size_t vlen = sizeof v, slen = sizeof served;
  if (mallctl("version", (void *)&v, &vlen, NULL, 0) == 0 && v &&
      (version = strndup(v, strcspn(v, "-"))) &&
      mallctl("thread.allocated", &served, &slen, NULL, 0) == 0 && served > 0)
    fprintf(f, "malloc: jemalloc %s", version);
  else
    fputs("malloc: not jemalloc, which is linked but shadowed", f);
  free(version);
#else
  fputs("malloc: libc", f);
#endif
}

static const cli_verb_t verb_help = {
    .name = "help",
    .summary = "show the help of percolator, of one verb, or the exit codes",
    .run = run_help,
    .args = "[VERB | exit-codes]",
    .exits = CLI_EXIT_BIT(0) | CLI_EXIT_BIT(2),
    .about = "Shows the overview of percolator, the help of VERB (the same as\n"
             "'percolator VERB --help'), or the table of exit codes.\n",
    .example = "percolator help scan\n"
               "percolator help exit-codes\n",
};

/* The verbs, in the order 'percolator --help' lists them. */
static const cli_verb_t *const verbs[] = {
    &cli_verb_init, &cli_verb_get,   &cli_verb_set,    &cli_verb_delete, &cli_verb_scan,
    &cli_verb_txn,  &cli_verb_playground, &cli_verb_run,   &cli_verb_tablet, &cli_verb_tso,
    &cli_verb_worker, &cli_verb_observers, &cli_verb_wait, &cli_verb_failures,
    &cli_verb_status, &cli_verb_doctor, &cli_verb_gc, &cli_verb_load, &cli_verb_clusters,
    &cli_verb_search, &cli_verb_doc, &cli_verb_check, &verb_help,
};
#define NVERBS (sizeof verbs / sizeof verbs[0])

typedef struct cli_exit_code {
  int code;
  const char *name;    /* short, for help lines: "not found" */
  const char *meaning; /* one sentence, for the full table */
} cli_exit_code_t;

static const cli_exit_code_t exit_codes[] = {
    {CLI_EXIT_OK, "ok", "success"},
    {CLI_EXIT_NOT_FOUND, "not found",
     "nothing found: the cell (get), the document (doc, load --delete), a search hit, the "
     "observer (observers remove); check found differences"},
    {CLI_EXIT_USAGE, "usage error",
     "unknown verb or option, wrong or malformed arguments (nothing was done)"},
    {CLI_EXIT_ERROR, "error",
     "any other error; the message names the thing at fault (for a commit: nothing was "
     "applied)"},
    {CLI_EXIT_UNKNOWN, "outcome unknown",
     "a commit's reply was lost and the store could not be asked: it may or may not stand, "
     "and readers settle it (set, delete, load)"},
    {CLI_EXIT_TIMEOUT, "timed out", "wait: work was still pending when its time ran out"},
    {CLI_EXIT_STALLED, "stalled",
     "wait: notifications are pending that no live worker can process"},
    {CLI_EXIT_INTERRUPTED, "interrupted",
     "SIGINT (Ctrl-C); load stops cleanly and prints what it wrote"},
};

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

#define HELP_DATA "  --data DIR          the data directory (default " CLI_DEFAULT_DATA_DIR ")\n"
#define HELP_CONFIG                                                                      \
  "  --config FILE       a JSON configuration (docs/CONFIG.md): a cluster's daemons,\n" \
  "                      or an embedded store in its data_dir\n"
#define HELP_TIMEOUT                                                                     \
  "  --timeout DURATION  bound on every blocking call and request it makes, and on\n"  \
  "                      the wait for a data directory another process holds, with\n" \
  "                      a unit: 500ms, 10s, 2m (default 10s)\n"
#define HELP_HELP "  -h, --help          show this help\n"

static const char global_usage[] =
    "Usage: percolator [GLOBAL OPTIONS] VERB [ARGS...]\n"
    "\n"
    "Snapshot-isolation transactions over a Bigtable-like store (Percolator).\n"
    "With no configuration the verbs use the embedded store in the data\n"
    "directory; one process at a time holds a data directory, and while a\n"
    "'percolator worker' holds it the other verbs reach the store through it.\n"
    "A verb that finds it held by another process waits for it, up to its\n"
    "--timeout (saying whom it waits for on a terminal).\n"
    "\n"
    "Global options (also accepted after the verb):\n" HELP_DATA HELP_CONFIG
    "                      (that data_dir, like --data DIR, must exist:\n"
    "                      'percolator --config FILE init' creates it)\n" HELP_TIMEOUT
    "  -h, --help          show this help ('percolator VERB --help': a verb's help)\n"
    "  -V, --version       show the version\n"
    "\n"
    "Verbs:\n";

/* "0 ok, 1 not found, ..." for the codes of mask (every code when mask is 0). */
static void print_exit_line(FILE *out, unsigned mask) {
  const char *sep = "";
  for (size_t i = 0; i < sizeof exit_codes / sizeof exit_codes[0]; i++) {
    if (mask && !(mask & CLI_EXIT_BIT(exit_codes[i].code))) continue;
    fprintf(out, "%s%d %s", sep, exit_codes[i].code, exit_codes[i].name);
    sep = ", ";
  }
  fputs(".\n", out);
}

static void print_exit_table(FILE *out) {
  fputs("Exit status (every verb):\n", out);
  for (size_t i = 0; i < sizeof exit_codes / sizeof exit_codes[0]; i++)
    fprintf(out, "  %3d  %-16s %s\n", exit_codes[i].code, exit_codes[i].name,
            exit_codes[i].meaning);
}

static void print_global_help(FILE *out) {
  fputs(global_usage, out);
  for (size_t i = 0; i < NVERBS; i++)
    fprintf(out, "  %-10s %s\n", verbs[i]->name, verbs[i]->summary);
  fputc('\n', out);
  print_exit_table(out);
  fputs("\nExample:\n"
        "  percolator --data /tmp/pc init && percolator --data /tmp/pc set accounts Bob bal: 10\n",
        out);
}

/* Writes text with each line indented by two spaces. */
static void put_indented(FILE *out, const char *text) {
  while (*text) {
    size_t n = strcspn(text, "\n");
    fprintf(out, "  %.*s\n", (int)n, text);
    text += n + (text[n] == '\n');
  }
}

void cli_print_help(const cli_verb_t *v, FILE *out) {
  const char *globals = v->flags & CLI_NEEDS_CONFIG ? "--config FILE"
                        : v->flags & CLI_USES_STORE ? "[--data DIR | --config FILE]"
                                                    : NULL;
  const char *args = v->args;
  int first = 1;
  do {
    size_t n = strcspn(args, "\n");
    fprintf(out, "%s percolator%s%s%s %s%s%.*s\n", first ? "Usage:" : "      ",
            globals ? " " : "", globals ? globals : "",
            v->flags & CLI_USES_TIMEOUT ? " [--timeout DURATION]" : "", v->name, n ? " " : "",
            (int)n, args);
    args += n + (args[n] == '\n');
    first = 0;
  } while (*args);
  if (v->about) fprintf(out, "\n%s", v->about);
  fputs("\nOptions:\n", out);
  if (v->options) fputs(v->options, out);
  if (v->flags & CLI_NEEDS_CONFIG)
    fputs("  --config FILE       the configuration (JSON; docs/CONFIG.md)\n", out);
  else if (v->flags & CLI_USES_STORE)
    fputs(HELP_DATA HELP_CONFIG, out);
  if (v->flags & CLI_USES_TIMEOUT) fputs(HELP_TIMEOUT, out);
  fputs(HELP_HELP, out);
  fputs("\nExit status: ", out);
  print_exit_line(out, v->exits ? v->exits : CLI_EXITS_BASIC);
  if (v->example) {
    fputs("\nExample:\n", out);
    put_indented(out, v->example);
  }
}

static const char *verb_names[NVERBS];

/* "; did you mean 'X'?" for the verb closest to name, or "". */
static const char *verb_hint(const char *name, char *buf, size_t cap) {
  for (size_t i = 0; i < NVERBS; i++) verb_names[i] = verbs[i]->name;
  const char *s = pc_suggest(name, strlen(name), verb_names, NVERBS);
  if (!s) return "";
  snprintf(buf, cap, "; did you mean '%s'?", s);
  return buf;
}

/* A verb that is not one, and the retired ones said as such. */
static int unknown_verb(const cli_ctx_t *ctx, const char *name) {
  if (strcmp(name, "lockd") == 0)
    return cli_usage_error(ctx,
                           "'lockd' is retired: a cluster coordinates through ZooKeeper (a "
                           "\"zookeeper\" section in the configuration; docs/CONFIG.md)");
  char hint[96];
  return cli_usage_error(ctx, "unknown verb '%s'%s", name, verb_hint(name, hint, sizeof hint));
}

static const cli_verb_t *find_verb(const char *name) {
  for (size_t i = 0; i < NVERBS; i++)
    if (strcmp(verbs[i]->name, name) == 0) return verbs[i];
  return NULL;
}

static const char *verb_name(const cli_ctx_t *ctx) { return ctx->verb ? ctx->verb->name : NULL; }

__attribute__((format(printf, 2, 0))) static void vreport(const cli_ctx_t *ctx, const char *fmt,
                                                         va_list ap) {
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
  const char *text = err->text[0] ? err->text : pc_status_name(err->code);
  /* the library may name the operation the verb is named after: say it once */
  size_t vl = verb_name(ctx) ? strlen(verb_name(ctx)) : 0;
  if (vl && strncmp(text, verb_name(ctx), vl) == 0 && text[vl] == ':' && text[vl + 1] == ' ')
    text += vl + 2;
  cli_error(ctx, "%s", text);
  return err->code == PC_UNKNOWN ? CLI_EXIT_UNKNOWN : CLI_EXIT_ERROR;
}

int cli_parse_duration(const char *s, const char *bare_unit, uint64_t max_ms, uint64_t *ms) {
  static const struct {
    const char *unit;
    double ms;
  } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
  if (!s || !(*s >= '0' && *s <= '9')) return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s) return -1;
  const char *unit = *end ? end : bare_unit;
  if (!unit) return -1;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(unit, units[i].unit) != 0) continue;
    double total = v * units[i].ms;
    if (!(total >= 1) || total > (double)max_ms) return -1;
    *ms = (uint64_t)total;
    return 0;
  }
  return -1;
}

/* The embedded data directory that ctx names (malloc'd), or NULL for a cluster. */
static char *embedded_dir(const cli_ctx_t *ctx) {
  if (!ctx->config) return strdup(ctx->data_dir);
  pc_error_t err;
  pc_config_t *cfg = pc_config_load(ctx->config, &err);
  char *dir = cfg && cfg->ntablets == 0 ? strdup(cfg->data_dir) : NULL;
  pc_config_free(cfg);
  return dir;
}

/* Opens the store of ctx directly: a cluster's client, or the embedded store. */
static pc_db_t *open_direct(const cli_ctx_t *ctx, int create, pc_error_t *err) {
  if (ctx->config) return pc_db_open_config_timeout(ctx->config, create, ctx->timeout_ms, err);
  pc_options_t *opts = pc_options_create();
  if (!opts) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  pc_options_set_create_if_missing(opts, create);
  if (ctx->timeout_ms) pc_options_set_timeout_ms(opts, ctx->timeout_ms);
  pc_db_t *db = pc_db_open(opts, ctx->data_dir, err);
  pc_options_destroy(opts);
  return db;
}

/* Whether DIR/serving.json was written by the worker that holds DIR now: it
 * is written after the holder wrote DIR/LOCK, while the one a worker before
 * left is older. */
static int serving_current(const char *dir, const char *path) {
  char lock[4200];
  snprintf(lock, sizeof lock, "%s/LOCK", dir);
  struct stat s, l;
  if (stat(path, &s) != 0 || stat(lock, &l) != 0) return 0;
  return s.st_mtim.tv_sec > l.st_mtim.tv_sec ||
         (s.st_mtim.tv_sec == l.st_mtim.tv_sec && s.st_mtim.tv_nsec >= l.st_mtim.tv_nsec);
}

/* The command line of process pid, its arguments separated by spaces and
 * cut to fit, into out; "" when it cannot be read (the process is gone). */
static void command_of(long pid, char *out, size_t cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
  out[0] = '\0';
  FILE *f = fopen(path, "re");
  if (!f) return;
  size_t n = fread(out, 1, cap - 4, f); /* room for "..." */
  int cut = n == cap - 4;
  fclose(f);
  while (n > 0 && out[n - 1] == '\0') n--;
  out[n] = '\0';
  /* the program by its name, not its path */
  size_t arg0 = strlen(out);
  char *base = memrchr(out, '/', arg0);
  if (base) {
    memmove(out, base + 1, n - (size_t)(base + 1 - out) + 1);
    n -= (size_t)(base + 1 - out);
  }
  for (size_t i = 0; i < n; i++)
    if (out[i] == '\0' || (unsigned char)out[i] < 0x20) out[i] = ' ';
  if (cut) memcpy(out + n, "...", 4);
}

/* "process 1234 (percolator --data d txn)", or "client 1234" when its
 * command line cannot be read. */
static void holder_name(long pid, const char *role, char *out, size_t cap) {
  char cmd[96];
  command_of(pid, cmd, sizeof cmd);
  if (cmd[0]) snprintf(out, cap, "process %ld (%s)", pid, cmd);
  else snprintf(out, cap, "%s %ld", role[0] ? role : "process", pid);
}

/* A data directory held by a worker: through its serving.json; while the
 * worker is still starting, waits for that file, until deadline. NULL with
 * *err untouched when the holder is no worker (any more). */
static pc_db_t *open_served(const cli_ctx_t *ctx, const char *dir, uint64_t deadline,
                            pc_error_t *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/" PC_DAEMON_SERVING_FILE, dir);
  int said = 0;
  for (;;) {
    if (serving_current(dir, path)) {
      pc_error_t e;
      pc_db_t *db = pc_db_open_config_timeout(path, 0, ctx->timeout_ms, &e);
      if (db) return db;
      if (e.code != PC_UNAVAILABLE && e.code != PC_INVALID) {
        *err = e;
        return NULL;
      }
      /* a serving.json being replaced, or of a worker that just stopped: look again */
    }
    long pid = 0;
    char role[32] = "";
    if (pc_data_dir_holder(dir, &pid, role, sizeof role) != 0 || strcmp(role, "worker") != 0)
      return NULL;
    if (pc_now_mono_ms() >= deadline) {
      pc_error_set(err, PC_BUSY,
                   "data directory '%s' is held by worker %ld, which did not start serving it "
                   "within the timeout (see its log)", dir, pid);
      return NULL;
    }
    if (!said++)
      fprintf(stderr, "percolator: %s: waiting for worker %ld to serve '%s'\n",
              ctx->verb ? ctx->verb->name : "", pid, dir);
    struct timespec d = {0, 50 * 1000000L};
    nanosleep(&d, NULL);
    pc_db_t *db = open_direct(ctx, 0, err); /* the worker may have failed and let go */
    if (db) return db;
    if (err->code != PC_BUSY) return NULL;
  }
}

/* A data directory another process holds (*err says who, PC_BUSY): a worker
 * serves it, so the store is reached through it; any other holder (a verb,
 * a txn session, a program of the library) is waited for, until the
 * timeout, with a line on a terminal saying whom. */
static pc_db_t *open_busy(const cli_ctx_t *ctx, const char *dir, int create, pc_error_t *err) {
  uint32_t timeout_ms = ctx->timeout_ms ? ctx->timeout_ms : 10000;
  uint64_t deadline = pc_now_mono_ms() + timeout_ms;
  int said = 0;
  for (;;) {
    long pid = 0;
    char role[32] = "";
    int known = pc_data_dir_holder(dir, &pid, role, sizeof role) == 0 && pid > 0;
    if (known && strcmp(role, "worker") == 0) {
      pc_db_t *db = open_served(ctx, dir, deadline, err);
      if (db || err->code != PC_BUSY || pc_now_mono_ms() >= deadline) return db;
    } else if (pc_now_mono_ms() >= deadline) {
      size_t n = strlen(err->text); /* the library's words (who holds it), and the wait's */
      if (timeout_ms % 1000 == 0)
        snprintf(err->text + n, sizeof err->text - n, ", which did not release it within %u s",
                 timeout_ms / 1000);
      else
        snprintf(err->text + n, sizeof err->text - n, ", which did not release it within %u ms",
                 timeout_ms);
      return NULL;
    } else if (!said && known && isatty(STDERR_FILENO)) {
      char who[160];
      holder_name(pid, role, who, sizeof who);
      fprintf(stderr, "percolator: %s: waiting for %s to release data directory '%s'\n",
              ctx->verb ? ctx->verb->name : "", who, dir);
      said = 1;
    }
    struct timespec d = {0, 20 * 1000000L};
    nanosleep(&d, NULL);
    pc_db_t *db = open_direct(ctx, create, err);
    if (db || err->code != PC_BUSY) return db;
  }
}

pc_db_t *cli_open_db(const cli_ctx_t *ctx, int create) {
  pc_error_t err;
  pc_db_t *db = open_direct(ctx, create, &err);
  if (!db && err.code == PC_BUSY) {
    char *dir = embedded_dir(ctx);
    if (dir) db = open_busy(ctx, dir, create, &err);
    free(dir);
  }
  if (!db) cli_pc_error(ctx, &err);
  return db;
}

int cli_finish_output(const cli_ctx_t *ctx) {
  if (fflush(stdout) != 0 || ferror(stdout))
    return cli_error(ctx, "writing the standard output: %s", strerror(errno));
  return CLI_EXIT_OK;
}

/* Parses a --timeout value: a duration with a unit, 1 ms to 24 h. */
static int parse_timeout(const cli_ctx_t *ctx, const char *s, uint32_t *ms) {
  uint64_t v;
  if (cli_parse_duration(s, NULL, 86400000u, &v) != 0) {
    char *end;
    errno = 0;
    unsigned long long bare = strtoull(s, &end, 10);
    if (!errno && end != s && !*end && s[0] != '-' && bare > 0)
      cli_usage_error(ctx, "--timeout '%s': give a unit (%sms or %ss)", s, s, s);
    else
      cli_usage_error(ctx, "--timeout '%s': expected a duration from 1ms to 24h, such as 500ms, "
                      "10s or 2m", s);
    return -1;
  }
  *ms = (uint32_t)v;
  return 0;
}

/* "; did you mean '--X'?" for the long option of opts closest to the
 * unknown one (typed "--NAME" or "--NAME=..."), or "". */
static const char *option_hint(const char *typed, const struct option *opts, char *buf,
                               size_t cap) {
  if (!typed || strncmp(typed, "--", 2) != 0 || !opts) return "";
  const char *names[64];
  size_t n = 0;
  for (size_t i = 0; opts[i].name && n < 64; i++) names[n++] = opts[i].name;
  const char *s = pc_suggest(typed + 2, strcspn(typed + 2, "="), names, n);
  if (!s) return "";
  snprintf(buf, cap, "; did you mean '--%s'?", s);
  return buf;
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
        cli_print_help(ctx->verb, stdout);
        *exit_code = cli_finish_output(ctx);
        return CLI_GETOPT_EXIT;
      case OPT_DATA:
        if (!*optarg) {
          *exit_code = cli_usage_error(ctx, "--data: empty directory name");
          return CLI_GETOPT_EXIT;
        }
        ctx->data_dir = optarg;
        ctx->data_given = 1;
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
      case '?': {
        char hint[96];
        const char *bad = bad_option(argv, ctx->merged, buf, sizeof buf);
        *exit_code = cli_usage_error(ctx, "unknown option '%s'%s", bad,
                                     option_hint(bad, ctx->merged, hint, sizeof hint));
        return CLI_GETOPT_EXIT;
      }
      case ':':
        *exit_code = cli_usage_error(ctx, "option '%s' needs a value",
                                     bad_option(argv, ctx->merged, buf, sizeof buf));
        return CLI_GETOPT_EXIT;
      case -1:
        if (ctx->config && ctx->data_given) {
          *exit_code = cli_usage_error(ctx, "--data %s and --config %s: give one of them (a "
                                       "configuration names its own data_dir)",
                                       ctx->data_dir, ctx->config);
          return CLI_GETOPT_EXIT;
        }
        return -1;
      default: return c; /* the verb's own option */
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
  } else if (strcmp(argv[optind], "exit-codes") == 0) {
    print_exit_table(stdout);
  } else {
    const cli_verb_t *v = find_verb(argv[optind]);
    if (!v) return unknown_verb(ctx, argv[optind]);
    cli_print_help(v, stdout);
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
  cli_ctx_t ctx = {CLI_DEFAULT_DATA_DIR, 0, NULL, NULL, NULL, 0};
  /* everything this process creates (data directories, LevelDB's files,
   * serving.json, ready files) is private to its user */
  umask(077);
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
        printf("percolator %d.%d.%d (libpercolator %s; ", PC_VERSION_MAJOR, PC_VERSION_MINOR,
               PC_VERSION_PATCH, pc_version());
        print_malloc(stdout);
        puts(")");
        return cli_finish_output(&ctx);
      case OPT_DATA:
        if (!*optarg) return cli_usage_error(&ctx, "--data: empty directory name");
        ctx.data_dir = optarg;
        ctx.data_given = 1;
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
      default: {
        char hint[96];
        const char *bad = bad_option(argv, global_options, buf, sizeof buf);
        return cli_usage_error(&ctx, "unknown option '%s'%s", bad,
                               option_hint(bad, global_options, hint, sizeof hint));
      }
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
