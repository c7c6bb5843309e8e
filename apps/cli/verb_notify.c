/* verb_notify.c — the verbs of incremental processing: `observers` (what is
 * registered in the store, and retiring one) and `failures` (parked
 * notifications, and --retry); `wait` is verb_wait.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/db.h"
#include "base/error.h"
#include "core/suggest.h"
#include "notify/worker.h"

enum { OPT_JSON = 'j', OPT_RETRY = 0x300 };

/* ---- observers ---------------------------------------------------------------- */

typedef struct obs_out {
  const cli_ctx_t *ctx;
  int json;
  size_t n, bad;
  int failed;
} obs_out_t;

/* "ready", "registering", or "backfill: N cells presented". */
static const char *state_text(const pc_observer_info_t *o, char *buf, size_t cap) {
  switch (o->state) {
    case PC_BACKFILL_REGISTERING:
      return "registering";
    case PC_BACKFILL_RUNNING:
      snprintf(buf, cap, "backfill: %llu cells presented", (unsigned long long)o->presented);
      return buf;
    default:
      return "ready";
  }
}

static int print_observer(void *ctx, const pc_observer_info_t *o) {
  obs_out_t *out = ctx;
  if (o->problem) { /* reported, named, and passed over */
    out->bad++;
    char *name = fmt_escape_str(o->name, o->name_len, 0);
    fprintf(stderr,
            "percolator: observers: the record of '%s' in %s is malformed: %s; passed over "
            "('percolator observers remove %s' removes it)\n",
            name ? name : "?", PC_SYSTEM_TABLE, o->problem, name ? name : "NAME");
    free(name);
    return 0;
  }
  out->n++;
  const char *k = o->kind == 1 ? "weak" : "strong";
  char buf[64];
  const char *state = state_text(o, buf, sizeof buf);
  if (out->json) {
    json_t *j = json_object();
    if (!j || fmt_json_bytes(j, "name", o->name, o->name_len) ||
        json_object_set_new(j, "table", json_string(o->table)) ||
        fmt_json_bytes(j, "column", o->col, o->clen) ||
        json_object_set_new(j, "kind", json_string(k)) ||
        json_object_set_new(j, "state", json_string(o->state == PC_BACKFILL_DONE ? "ready"
                                                    : o->state == PC_BACKFILL_RUNNING
                                                        ? "backfill"
                                                        : "registering")) ||
        fmt_json_u64(j, "presented", o->presented) || fmt_json_line(stdout, j))
      out->failed = 1;
    return out->failed;
  }
  printf("%.*s\t%s\t", (int)o->name_len, o->name, o->table);
  fmt_escape(stdout, o->col, o->clen, 0);
  printf("\t%s\t%s\n", k, state);
  return 0;
}

static int observers_list(cli_ctx_t *ctx, int json) {
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  obs_out_t o = {ctx, json, 0, 0, 0};
  pc_error_t err;
  pc_status_t st = pc_db_observers(db, print_observer, &o, &err);
  pc_db_close(db);
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  if (o.failed) return cli_error(ctx, "cannot write the answer");
  return cli_finish_output(ctx);
}

/* NAME as given, C escapes decoded (the listing escapes a malformed name). */
static int unescape_arg(const char *arg, char *out, size_t cap, size_t *n) {
  size_t len = strlen(arg), i = 0;
  *n = 0;
  while (i < len) {
    char b = arg[i];
    size_t used = 1;
    if (b == '\\' && !(used = fmt_unescape_one(arg + i, len - i, &b))) return -1;
    if (*n == cap) return -1;
    out[(*n)++] = b;
    i += used;
  }
  return *n ? 0 : -1;
}

/* Before a removal: the registered observer closest to a name that is not
 * registered (into hint), and a warning when live workers run the one named. */
static void removal_context(cli_ctx_t *ctx, pc_db_t *db, const char *name, size_t n, char *hint,
                            size_t cap) {
  hint[0] = '\0';
  cli_view_t v;
  pc_error_t err;
  if (cli_view_load(db, db->dir != NULL, &v, &err) != PC_OK) {
    cli_view_free(&v);
    return;
  }
  const char **names = calloc(v.nobs ? v.nobs : 1, sizeof *names);
  for (size_t i = 0; names && i < v.nobs; i++) {
    const cli_observer_t *o = &v.obs[i];
    names[i] = o->name;
    if (strlen(o->name) != n || memcmp(o->name, name, n) != 0 || !o->nworkers) continue;
    fprintf(stderr, "percolator: observers: warning: observer '%s' is run by %zu live worker%s "
            "(%s%s): it goes on running there and registers again when that worker starts; "
            "stop those workers, or remove it from their plugin, first\n",
            o->name, o->nworkers, o->nworkers == 1 ? "" : "s", v.nworkers ? v.workers[0] : "?",
            v.nworkers > 1 ? ", ..." : "");
  }
  const char *s = names ? pc_suggest(name, n, names, v.nobs) : NULL;
  if (s) snprintf(hint, cap, "; did you mean '%s'?", s);
  free(names);
  cli_view_free(&v);
}

static int observers_remove(cli_ctx_t *ctx, const char *arg, int json) {
  char name[PC_MAX_ROW];
  size_t n;
  if (unescape_arg(arg, name, sizeof name - 16, &n) != 0)
    return cli_usage_error(ctx, "remove: '%s' is not an observer's name", arg);
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  char hint[PC_MAX_OBSERVER_NAME + 32];
  removal_context(ctx, db, name, n, hint, sizeof hint);
  pc_error_t err;
  int found = 0;
  pc_status_t st = pc_db_unregister_observed(db, name, n, &found, &err);
  pc_db_close(db);
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  if (json) printf("{\"removed\":%s}\n", found ? "true" : "false");
  else if (found) printf("observer '%s' removed: its notifications no longer wait for it\n", arg);
  int code = cli_finish_output(ctx);
  if (code != CLI_EXIT_OK || found) return code;
  fprintf(stderr, "percolator: observers: remove: no observer '%s' is registered%s "
          "('percolator observers' lists them)\n", arg, hint);
  return CLI_EXIT_NOT_FOUND;
}

static int run_observers(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, OPT_JSON}, {0, 0, 0, 0}};
  int json = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_JSON) json = 1;
  }
  const char *sub = optind < argc ? argv[optind++] : "list";
  if (strcmp(sub, "list") == 0) {
    if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
    return observers_list(ctx, json);
  }
  if (strcmp(sub, "remove") == 0) {
    if (optind >= argc) return cli_usage_error(ctx, "remove: which observer?");
    if (optind + 1 < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind + 1]);
    return observers_remove(ctx, argv[optind], json);
  }
  return cli_usage_error(ctx, "unknown subcommand '%s' (list or remove)", sub);
}

const cli_verb_t cli_verb_observers = {
    .name = "observers",
    .summary = "list the observers registered in the store, or retire one",
    .run = run_observers,
    .args = "[list] [--json]\nremove NAME",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_NOT_FOUND),
    .about = "list (the default) shows every observer registered in the store — by any\n"
             "worker, from any configuration — with the table and column it observes,\n"
             "its kind and its state: NAME TABLE COLUMN strong|weak STATE, tab-separated\n"
             "(columns C-escaped), or one JSON object per line with --json. STATE is\n"
             "'registering' (not yet known to every store), 'backfill: N cells\n"
             "presented' (the cells written before it are being presented to it) or\n"
             "'ready'. A malformed record is reported on stderr, named, and passed over.\n"
             "\n"
             "remove NAME retires an observer: its record goes, and the notifications of\n"
             "its column no longer wait for it (they are kept until every registered\n"
             "observer of the column has covered them). What it derived stays. A worker\n"
             "that still runs it registers it again when it starts, so stop those first\n"
             "(it warns when a live worker runs it); registered again under that name,\n"
             "it is presented every cell of its column and every deleted one it had run\n"
             "on, so it catches up on what it missed, deletes included. A name that is\n"
             "not registered exits 1, with the closest registered one. It also removes a\n"
             "malformed record (NAME as the listing shows it, C escapes allowed).\n",
    .options = "  --json              machine-readable output\n",
    .example = "percolator --config cluster.json observers\n"
               "percolator --config cluster.json observers remove dedup.deleted\n",
};

/* ---- failures ------------------------------------------------------------------ */

typedef struct fail_out {
  int json;
  int failed;
} fail_out_t;

static int print_failure(void *ctx, const pc_parked_t *p) {
  fail_out_t *o = ctx;
  if (o->json) {
    json_t *j = json_object();
    if (!j || json_object_set_new(j, "observer", json_string(p->observer)) ||
        json_object_set_new(j, "table", json_string(p->table)) ||
        fmt_json_bytes(j, "row", p->row, p->rlen) || fmt_json_bytes(j, "column", p->col, p->clen) ||
        fmt_json_u64(j, "ts", p->ts) || fmt_json_u64(j, "failures", p->failures) ||
        json_object_set_new(j, "error", json_string(p->error)) || fmt_json_line(stdout, j))
      o->failed = 1;
    return o->failed;
  }
  printf("%s\t%s\t", p->observer, p->table);
  fmt_escape(stdout, p->row, p->rlen, 0);
  putchar('\t');
  fmt_escape(stdout, p->col, p->clen, 0);
  printf("\t%u\t%s\n", (unsigned)p->failures, p->error);
  return 0;
}

static int run_failures(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, OPT_JSON},
                                       {"retry", no_argument, NULL, OPT_RETRY},
                                       {0, 0, 0, 0}};
  int json = 0, retry = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_JSON) json = 1;
    else if (c == OPT_RETRY) retry = 1;
  }
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  pc_error_t err;
  pc_status_t st;
  if (retry) {
    uint64_t n = 0;
    st = pc_worker_retry_failures(db, &n, &err);
    if (st == PC_OK) {
      if (json) printf("{\"requeued\":%llu}\n", (unsigned long long)n);
      else printf("%llu notification%s queued again\n", (unsigned long long)n, n == 1 ? "" : "s");
    }
  } else {
    fail_out_t o = {json, 0};
    st = pc_worker_failures(db, print_failure, &o, &err);
    if (st == PC_OK && o.failed) st = pc_error_set(&err, PC_IO_ERROR, "cannot write the answer");
  }
  pc_db_close(db);
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  return cli_finish_output(ctx);
}

const cli_verb_t cli_verb_failures = {
    .name = "failures",
    .summary = "list parked notifications (observers that kept failing), or retry them",
    .run = run_failures,
    .args = "[--json] [--retry]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about = "An observer that fails on a notification workers.max_failures times in a\n"
             "row has that notification parked: the workers go on with everything else.\n"
             "This lists them: OBSERVER TABLE ROW COLUMN FAILURES ERROR, tab-separated\n"
             "(row and column C-escaped), or one JSON object per line with --json.\n"
             "--retry asks for them all to run again: a worker with the observer runs\n"
             "it alone on the parked change (the cell's other observers do not run\n"
             "again), with a fresh failure count; 'wait' waits for these retries.\n",
    .options = "  --json              machine-readable output\n"
               "  --retry             run the parked observer of every parked notification again\n",
    .example = "percolator --config cluster.json failures --retry\n",
};
