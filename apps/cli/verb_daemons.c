/* verb_daemons.c — the daemon verbs: `tso`, `tablet` run one role
 * of the cluster in the foreground; `run` runs every role the configuration
 * names in one process (the single-machine server), and its workers when it
 * has a "workers" section; `worker` runs the configured observers against a
 * cluster, or, without one, holds the embedded store and serves it to
 * other processes while its observers run. This file parses the options,
 * takes the signals and waits; daemon/ starts and stops the roles.
 * `--ready-file F` writes the bound endpoints as JSON once every role
 * listens (for scripts using port 0). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "core/log.h"
#include "daemon/daemon.h"

enum { OPT_NAME = 0x200, OPT_READY };

/* Shared by every daemon verb: parse, start what spec asks, wait for a signal, stop. */
static int run_daemon(cli_ctx_t *ctx, int argc, char **argv, pc_daemon_spec_t spec) {
  static const struct option longopts[] = {{"name", required_argument, NULL, OPT_NAME},
                                           {"ready-file", required_argument, NULL, OPT_READY},
                                           {NULL, 0, NULL, 0}};
  const char *name = NULL, *ready = NULL;
  int c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", longopts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_NAME) name = optarg;
    else if (c == OPT_READY) ready = optarg;
    else return cli_usage_error(ctx, "unexpected option");
  }
  if (optind != argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  const char *config = ctx->config; /* --config may come before or after the verb */
  int worker = spec.workers == PC_DAEMON_REQUIRED;
  if (!config && !worker) return cli_usage_error(ctx, "--config FILE is required");
  if (spec.tablets == 1 && !name) return cli_usage_error(ctx, "--name TABLET is required");
  spec.tablet_name = name;

  pc_error_t err;
  pc_error_clear(&err);
  if (pc_failpoints_init_from_env(&err) != PC_OK) return cli_pc_error(ctx, &err);
  pc_daemon_config_t dc;
  pc_config_t *cfg = config ? pc_config_load(config, &err) : pc_config_default();
  if (!cfg) return config ? cli_pc_error(ctx, &err) : cli_error(ctx, "out of memory");
  char served[4200] = ""; /* data_dir/serving.json while this process serves data_dir */
  pc_status_t st;
  if (worker && cfg->ntablets == 0) {
    /* hold the embedded store and serve it: an oracle and one tablet */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", config ? cfg->data_dir : ctx->data_dir);
    pc_config_free(cfg);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return cli_error(ctx, "data directory '%s' does not exist (create it with 'percolator init')",
                       dir);
    snprintf(served, sizeof served, "%s/" CLI_SERVING_FILE, dir);
    st = pc_daemon_config_serving(config, dir, &dc, &err);
    spec.tso = 1;
    spec.tablets = 2;
    spec.serving_file = served;
  } else {
    pc_config_free(cfg);
    st = pc_daemon_config_load(config, &dc, &err);
    if (worker) spec.workers_cluster = config; /* a cluster's client */
  }
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  pc_log_set_level((pc_log_level_t)dc.cfg->log_level);

  /* signals are taken synchronously by this thread only */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  int rc = CLI_EXIT_OK;
  pc_daemon_t *d = pc_daemon_start(&dc, &spec, &err);
  if (d && ready && pc_daemon_write_ready_file(d, ready, &err) != PC_OK) {
    pc_daemon_stop(d);
    d = NULL;
  }
  if (d) {
    size_t n = pc_daemon_role_count(d);
    pc_log(PC_LOG_INFO, "ready (%zu role%s%s); SIGTERM or SIGINT stops", n, n == 1 ? "" : "s",
           pc_daemon_has_workers(d) ? " and the workers" : "");
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    pc_log(PC_LOG_INFO, "signal %d: shutting down", sig);
    pc_daemon_stop(d);
  } else {
    rc = cli_pc_error(ctx, &err);
  }
  pc_daemon_config_free(&dc);
  return rc;
}

static int run_tso(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, (pc_daemon_spec_t){.tso = 1});
}
static int run_tablet(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, (pc_daemon_spec_t){.tablets = 1});
}
static int run_all(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv,
                    (pc_daemon_spec_t){.tso = 1, .tablets = 2, .workers = PC_DAEMON_IF_CONFIGURED});
}
static int run_worker(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, (pc_daemon_spec_t){.workers = PC_DAEMON_REQUIRED});
}

#define COMMON_DAEMON_HELP                                                              \
  "\n"                                                                                  \
  "Options:\n"                                                                          \
  "  --config FILE      the configuration (JSON; see docs/CONFIG.md)\n"                 \
  "  --ready-file FILE  once listening, write the bound endpoints there as JSON\n"      \
  "  -h, --help         show this help\n"                                               \
  "\n"                                                                                  \
  "Runs in the foreground and logs to stderr; SIGTERM or SIGINT shuts it down\n"        \
  "cleanly: the requests in flight are answered, then the stores are closed.\n"

const cli_verb_t cli_verb_tso = {
    "tso", "run the timestamp oracle daemon",
    "Usage: percolator tso --config FILE [--ready-file FILE]\n"
    "\n"
    "Serves strictly increasing timestamps on the configuration's tso.listen\n"
    "endpoint and /health, /metrics on tso.http. Any number of tso processes\n"
    "run: they elect one leader in ZooKeeper (the \"zookeeper\" section), where\n"
    "its bound lives, the others stand by, and clients follow the leader.\n" COMMON_DAEMON_HELP
    "\n"
    "Example:\n"
    "  percolator tso --config cluster.json\n",
    run_tso};

const cli_verb_t cli_verb_tablet = {
    "tablet", "run one tablet server",
    "Usage: percolator tablet --config FILE --name TABLET [--ready-file FILE]\n"
    "\n"
    "Serves the rows of tablet TABLET from its own LevelDB (tablets[].data_dir),\n"
    "taking commit timestamps from the oracle that leads in ZooKeeper. --name\n"
    "TABLET picks the entry of \"tablets\". When it starts it raises the rows'\n"
    "garbage-collection safe point to the one published in ZooKeeper.\n" COMMON_DAEMON_HELP
    "\n"
    "Example:\n"
    "  percolator tablet --config cluster.json --name t1\n",
    run_tablet};

const cli_verb_t cli_verb_run = {
    "run", "run every role of the configuration in one process",
    "Usage: percolator run --config FILE [--ready-file FILE]\n"
    "\n"
    "Runs an oracle (elected in ZooKeeper) and every tablet in this process,\n"
    "listening where the configuration says, so that many client processes on\n"
    "this machine can share one store; and the workers of its \"workers\"\n"
    "section.\n" COMMON_DAEMON_HELP
    "\n"
    "Example:\n"
    "  percolator run --config cluster.json --ready-file /tmp/ready.json\n",
    run_all};

const cli_verb_t cli_verb_worker = {
    "worker", "run the configured observers (and serve an embedded store)",
    "Usage: percolator worker [--config FILE | --data DIR] [--ready-file FILE]\n"
    "\n"
    "Loads the observer plugins of the configuration's \"workers\" section\n"
    "(docs/OBSERVERS.md), records their observed columns in the store, and runs\n"
    "them: workers.threads threads find notifications, claim buckets of them\n"
    "and run each observer in a transaction, retrying a failing one with\n"
    "backoff and parking it after workers.max_failures ('percolator\n"
    "failures'). Any number of worker processes can run against a cluster:\n"
    "each registers in ZooKeeper and scans its share of the buckets, which\n"
    "moves when workers join or leave. Without a cluster (an embedded data\n"
    "directory) the worker holds the store and serves it: an oracle and one\n"
    "tablet on ephemeral ports of 127.0.0.1, whose client configuration it\n"
    "writes to DIR/serving.json, through which the other verbs given --data DIR\n"
    "reach the store meanwhile. workers.http serves /health and /metrics. On SIGTERM or\n"
    "SIGINT it stops taking work, lets the observer transactions in flight\n"
    "finish, and exits 0.\n" COMMON_DAEMON_HELP
    "\n"
    "Examples:\n"
    "  percolator worker --config cluster.json\n"
    "  percolator worker --config embedded.json    # no \"tablets\": serves data_dir\n",
    run_worker};
