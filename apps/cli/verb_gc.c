/* verb_gc.c — `percolator gc`: one garbage-collection pass now, on the
 * embedded store or on every tablet of a cluster (pc_db_gc), and what it
 * did, as text or one JSON object. */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"

enum { OPT_JSON = 'j' };

static int run_gc(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, OPT_JSON}, {0, 0, 0, 0}};
  int json = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_JSON) json = 1;
  }
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;
  pc_gc_stats_t s;
  pc_error_t err;
  if (pc_db_gc(db, &s, &err) != PC_OK) {
    code = cli_pc_error(ctx, &err);
    pc_db_close(db);
    return code;
  }
  pc_db_close(db);
  if (json) {
    json_t *o = json_object();
    if (fmt_json_u64(o, "safe_point", s.safe_point) ||
        fmt_json_u64(o, "locks_resolved", s.locks_resolved) ||
        fmt_json_u64(o, "locks_left", s.locks_left) || fmt_json_u64(o, "cells", s.cells) ||
        fmt_json_u64(o, "versions_deleted", s.versions) ||
        fmt_json_u64(o, "rollbacks_deleted", s.rollbacks) ||
        fmt_json_u64(o, "data_deleted", s.data) || fmt_json_line(stdout, o))
      return cli_error(ctx, "cannot write the answer");
  } else {
    printf("safe point        %llu\n", (unsigned long long)s.safe_point);
    printf("locks resolved    %llu\n", (unsigned long long)s.locks_resolved);
    printf("locks left        %llu (owned by live transactions)\n",
           (unsigned long long)s.locks_left);
    printf("cells examined    %llu\n", (unsigned long long)s.cells);
    printf("versions deleted  %llu\n", (unsigned long long)s.versions);
    printf("rollbacks deleted %llu\n", (unsigned long long)s.rollbacks);
    printf("data deleted      %llu\n", (unsigned long long)s.data);
  }
  return cli_finish_output(ctx);
}

const cli_verb_t cli_verb_gc = {
    .name = "gc",
    .summary = "collect garbage now: old versions and rollback records",
    .run = run_gc,
    .args = "[--json]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about = "Runs one garbage-collection pass now. The safe point is the oldest\n"
             "snapshot any live transaction may still read (embedded: this process\n"
             "holds the store, so none but its own; a cluster or a directory a worker\n"
             "serves: the oldest its live clients report, and store.gc_lifetime_ms\n"
             "behind the oracle; none older than store.snapshot_max_age_ms). Locks\n"
             "older than it are settled first (rolled forward or back by their\n"
             "primary); then, on the embedded store or on every tablet, each cell keeps\n"
             "its versions newer than the safe point and the newest one at or below\n"
             "it, and loses the rest and its rollback records. Readers and writers go\n"
             "on meanwhile; store.gc_rate bounds the deletes per second. The embedded\n"
             "store also does this every store.gc_interval_ms.\n",
    .options = "  --json              one JSON object: safe_point, locks_resolved, locks_left,\n"
               "                      cells, versions_deleted, rollbacks_deleted, data_deleted\n",
    .example = "percolator --data ./percolator-data gc\n",
};
