/* verb_notify.c — the verbs of incremental processing: `observers` (what is
 * registered in the store), `wait` (until no notification is pending and
 * nothing could create one), `failures` (parked notifications, and --retry). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/db.h"
#include "core/error.h"
#include "notify/worker.h"

enum { OPT_JSON = 'j', OPT_TIMEOUT_S = 0x300, OPT_RETRY };

/* ---- observers --------------------------------------------------------------- */

typedef struct obs_out {
  int json;
  size_t n;
  int failed;
} obs_out_t;

static int print_observer(void *ctx, const char *name, const char *table, const char *col,
                          size_t clen, int kind) {
  obs_out_t *o = ctx;
  o->n++;
  const char *k = kind == 1 ? "weak" : "strong";
  if (o->json) {
    json_t *j = json_object();
    if (!j || json_object_set_new(j, "name", json_string(name)) ||
        json_object_set_new(j, "table", json_string(table)) || fmt_json_bytes(j, "column", col, clen) ||
        json_object_set_new(j, "kind", json_string(k)) || fmt_json_line(stdout, j))
      o->failed = 1;
    return o->failed;
  }
  printf("%s\t%s\t", name, table);
  fmt_escape(stdout, col, clen, 0);
  printf("\t%s\n", k);
  return 0;
}

static int run_observers(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, OPT_JSON}, {0, 0, 0, 0}};
  int json = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_JSON) json = 1;
  }
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  obs_out_t o = {json, 0, 0};
  pc_error_t err;
  pc_status_t st = pc_db_observed_foreach(db, print_observer, &o, &err);
  pc_db_close(db);
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  if (o.failed) return cli_error(ctx, "cannot write the answer");
  return cli_finish_output(ctx);
}

const cli_verb_t cli_verb_observers = {
    "observers",
    "list the observers registered in the store",
    "Usage: percolator [--data DIR | --config FILE] observers [--json]\n"
    "\n"
    "Lists every observer recorded in the store — by any worker, from any\n"
    "configuration — with the table and column it observes and its kind:\n"
    "NAME TABLE COLUMN strong|weak, tab-separated (columns C-escaped), or one\n"
    "JSON object per line with --json. Every client marks its writes of a\n"
    "strongly observed column so that their commit writes the notification.\n"
    "\n"
    "Options:\n"
    "  --json         one JSON object per observer\n"
    "  --data DIR     the data directory\n"
    "  --config FILE  the configuration\n"
    "  -h, --help     show this help\n"
    "\n"
    "Example:\n"
    "  percolator --config cluster.json observers\n",
    run_observers,
};

/* ---- wait ---------------------------------------------------------------------- */

static int run_wait(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"timeout-s", required_argument, NULL, OPT_TIMEOUT_S},
                                       {0, 0, 0, 0}};
  long seconds = 0; /* 0: no bound */
  int c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_TIMEOUT_S) {
      char *end;
      seconds = strtol(optarg, &end, 10);
      if (*end || seconds <= 0 || seconds > 86400)
        return cli_usage_error(ctx, "--timeout-s: expected 1..86400 seconds, got '%s'", optarg);
    }
  }
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  pc_error_t err;
  pc_status_t st = pc_notify_wait(db, seconds ? (uint32_t)(seconds * 1000) : UINT32_MAX, &err);
  pc_db_close(db);
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  return CLI_EXIT_OK;
}

const cli_verb_t cli_verb_wait = {
    "wait",
    "wait until every notification has been processed",
    "Usage: percolator [--data DIR | --config FILE] wait [--timeout-s S]\n"
    "\n"
    "Returns once no notification is pending and no transaction that could\n"
    "create one is in flight: a full scan of the notifications finds none, no\n"
    "lock is held, and the oracle handed no timestamp to anyone else during the\n"
    "scan (a check on the notifications alone would return while an observer\n"
    "is still committing the change that notifies the next one). Parked\n"
    "notifications ('percolator failures') do not count, but a retry of one\n"
    "asked for ('failures --retry') does until it has run. Exits 0 then, or 3\n"
    "naming the timeout.\n"
    "\n"
    "Options:\n"
    "  --timeout-s S  give up after S seconds (default: no bound)\n"
    "  --data DIR     the data directory (held by a worker: through its serving.json)\n"
    "  --config FILE  the configuration\n"
    "  -h, --help     show this help\n"
    "\n"
    "Example:\n"
    "  percolator --config cluster.json wait --timeout-s 60\n",
    run_wait,
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
    "failures",
    "list parked notifications (observers that kept failing), or retry them",
    "Usage: percolator [--data DIR | --config FILE] failures [--json] [--retry]\n"
    "\n"
    "An observer that fails on a notification workers.max_failures times in a\n"
    "row has that notification parked: the workers go on with everything else.\n"
    "This lists them: OBSERVER TABLE ROW COLUMN FAILURES ERROR, tab-separated\n"
    "(row and column C-escaped), or one JSON object per line with --json.\n"
    "--retry asks for them all to run again: a worker with the observer runs\n"
    "it alone on the parked change (the cell's other observers do not run\n"
    "again), with a fresh failure count; 'wait' waits for these retries.\n"
    "\n"
    "Options:\n"
    "  --json         machine-readable output\n"
    "  --retry        run the parked observer of every parked notification again\n"
    "  --data DIR     the data directory\n"
    "  --config FILE  the configuration\n"
    "  -h, --help     show this help\n"
    "\n"
    "Example:\n"
    "  percolator --config cluster.json failures --retry\n",
    run_failures,
};
