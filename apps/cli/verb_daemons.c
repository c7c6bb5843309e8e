/* verb_daemons.c — the daemon verbs: `tso`, `tablet --name` run one role
 * of the cluster in the foreground (`tablet SUBCOMMAND`, the operations on
 * a replicated tablet's replicas, is verb_tablet.c's); `run` runs every role the configuration
 * names in one process (the single-machine server), and its workers when it
 * has a "workers" section; `worker` runs the configured observers against a
 * cluster, or, without one, holds the embedded store and serves it to
 * other processes while its observers run. This file parses the options,
 * takes the signals and waits; daemon/ decides what a verb runs
 * (pc_daemon_plan) and starts and stops the roles.
 * `--ready-file F` writes the bound endpoints as JSON once every role
 * listens (for scripts using port 0). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "base/log.h"
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
  if (optind != argc && spec.tablets == 1) { /* `tablet SUBCOMMAND ...`: verb_tablet.c */
    if (name || ready)
      return cli_usage_error(ctx, "%s runs a server: it does not go with '%s'",
                             name ? "--name" : "--ready-file", argv[optind]);
    return cli_tablet_ops(ctx, argc - optind, argv + optind);
  }
  if (optind != argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  const char *config = ctx->config; /* --config may come before or after the verb */
  int worker = spec.workers == PC_DAEMON_REQUIRED;
  if (!config && !worker) return cli_usage_error(ctx, "--config FILE is required");
  if (spec.tablets == 1 && !name)
    return cli_usage_error(ctx, "--name NAME is required (the server, or the tablet, to run), or a "
                           "subcommand such as add-replica");
  spec.tablet_name = name;

  pc_error_t err;
  pc_error_clear(&err);
  if (pc_failpoints_init_from_env(&err) != PC_OK) return cli_pc_error(ctx, &err);
  pc_daemon_plan_t plan;
  if (pc_daemon_plan(config, ctx->data_dir, &spec, ctx->timeout_ms, &plan, &err) != PC_OK) {
    pc_daemon_plan_free(&plan);
    return cli_pc_error(ctx, &err);
  }
  pc_log_set_level((pc_log_level_t)plan.config.cfg->log_level);

  /* signals are taken synchronously by this thread only */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  int rc = CLI_EXIT_OK;
  pc_daemon_t *d = pc_daemon_start(&plan.config, &plan.spec, &err);
  if (d && ready && pc_daemon_write_ready_file(d, ready, &err) != PC_OK) {
    pc_daemon_stop(d);
    d = NULL;
  }
  if (d) {
    size_t n = pc_daemon_role_count(d);
    pc_log(PC_LOG_INFO, "ready (%zu role%s%s); SIGTERM or SIGINT stops", n, n == 1 ? "" : "s",
           pc_daemon_has_workers(d) ? " and the workers" : "");
    int sig = 0;
    for (;;) {
      if (sigwait(&sigs, &sig) != 0) continue;
      if (sig != SIGHUP) break;
      pc_error_t rerr;
      if (!pc_daemon_has_workers(d))
        pc_log(PC_LOG_INFO, "SIGHUP: nothing to reload (this process runs no workers)");
      else if (pc_daemon_reload(d, &rerr) != PC_OK)
        pc_log(PC_LOG_ERROR, "SIGHUP: %s", rerr.text);
    }
    pc_log(PC_LOG_INFO, "signal %d: shutting down", sig);
    /* bounded; a second signal exits at once (SIGHUP no longer counts) */
    sigdelset(&sigs, SIGHUP);
    pc_daemon_shutdown(d, &sigs, CLI_EXIT_ERROR);
  } else {
    rc = cli_pc_error(ctx, &err);
  }
  pc_daemon_plan_free(&plan);
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

#define DAEMON_OPTIONS \
  "  --ready-file FILE   once started, write the bound endpoints there as JSON:\n" \
  "                      {\"tso\": {\"listen\", \"http\"}, \"tablets\": {NAME: ...},\n" \
  "                      \"servers\": {NAME: ...}, \"workers\": {\"http\"}, \"pid\"}\n" \
  "                      (for scripts, and with port 0)\n"
#define DAEMON_ABOUT \
  "\n" \
  "Runs in the foreground and logs to stderr; SIGTERM or SIGINT shuts it down\n" \
  "cleanly: it stops taking requests at once, answers those in flight (those\n" \
  "still running after 5 s are cancelled), closes the stores and exits 0, within\n" \
  "5 s + 2 x store.timeout_ms + 5 s (30 s by default); past that, or on a second\n" \
  "signal, it exits 3 at once (nothing acknowledged is lost). A configuration\n" \
  "at fault, a port in use or a data directory that cannot be used stops it\n" \
  "before it serves anything (exit 3). SIGHUP reloads the workers' plugins\n" \
  "(see 'percolator worker --help'); the other roles log it and go on.\n"

const cli_verb_t cli_verb_tso = {
    .name = "tso",
    .summary = "run the timestamp oracle daemon",
    .run = run_tso,
    .args = "[--ready-file FILE]",
    .flags = CLI_NEEDS_CONFIG,
    .exits = CLI_EXITS_BASIC,
    .about = "Serves strictly increasing timestamps on the configuration's tso.listen\n"
             "endpoint and /health, /metrics on tso.http. The oracle's persisted bound\n"
             "lives in tso.data_dir (default DATA_DIR/tso). In a cluster (a \"zookeeper\"\n"
             "section) any number of tso processes run: they elect one leader in\n"
             "ZooKeeper, where the bound then lives, the others stand by, and clients\n"
             "follow the leader.\n"
             DAEMON_ABOUT,
    .options = DAEMON_OPTIONS,
    .example = "percolator tso --config cluster.json\n",
};

const cli_verb_t cli_verb_tablet = {
    .name = "tablet",
    .summary = "run a tablet server; add, remove or move a replicated tablet's replicas",
    .run = run_tablet,
    .args = "--name NAME [--ready-file FILE]\n"
            "add-replica TABLET SERVER\n"
            "remove-replica TABLET SERVER\n"
            "move-leader TABLET SERVER\n"
            "replace-server OLD NEW",
    .flags = CLI_NEEDS_CONFIG | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about =
        "With --name (and no subcommand) it runs a server. In a replicated cluster\n"
        "(\"servers\" in the configuration) NAME is a server: it holds a replica of\n"
        "each tablet whose \"replicas\" name it, and of any it was given with\n"
        "add-replica, in servers[].data_dir (default DATA_DIR/server-NAME), serves\n"
        "them on servers[].listen and /health, /metrics on servers[].http. Started\n"
        "on an empty directory, a server that ran before rebuilds its replicas from\n"
        "the others. Without \"servers\", NAME is a tablet: the server serves its\n"
        "rows from its own LevelDB in tablets[].data_dir (default\n"
        "DATA_DIR/tablet-NAME) on tablets[].listen. Either way it takes commit\n"
        "timestamps from the oracle that leads in ZooKeeper, and when it starts it\n"
        "raises the rows' garbage-collection safe point to the one published there.\n"
        DAEMON_ABOUT
        "\n"
        "The subcommands (a first argument without a leading '-') change a\n"
        "replicated tablet's group, one change at a time, each committed through\n"
        "the group's log, so they are safe while clients write:\n"
        "  add-replica TABLET SERVER     an empty replica on SERVER catches up from a\n"
        "                                snapshot without voting, then votes\n"
        "  remove-replica TABLET SERVER  SERVER's replica leaves the group (refused\n"
        "                                when the voters left up would be no majority)\n"
        "  move-leader TABLET SERVER     SERVER's replica leads the tablet\n"
        "  replace-server OLD NEW        for every tablet OLD holds a replica of: add\n"
        "                                one on NEW, then remove OLD's (OLD may be dead)\n"
        "Each finds the tablet's leader (its owner in ZooKeeper, or a follower's\n"
        "refusal naming it), asks it, follows a leader that changes, and prints what\n"
        "was done. --timeout bounds the whole operation (default 5m here: a new\n"
        "replica first receives a copy of the tablet); one cut short may still\n"
        "complete, and running it again finishes it (a replica already added, or\n"
        "already gone, is nothing to do). They need the system identity (the\n"
        "configuration's system_secret or a system certificate, docs/SECURITY.md).\n"
        "\n"
        "The configuration file is yours to update: a server keeps a replica it was\n"
        "given across restarts whatever the file says, but \"replicas\" is what a\n"
        "server started on an empty directory rejoins and what status counts as\n"
        "configured, so list the new server and take out the removed one (the verb\n"
        "prints a note saying so). An unknown tablet or server, a missing argument\n"
        "and a configuration without \"servers\" exit 2; a server that holds no\n"
        "replica of the tablet, or that is down, and a failed change exit 3.\n",
    .options = "  --name NAME         the server (servers[].name), or without \"servers\" the\n"
               "                      tablet (tablets[].name), to run\n" DAEMON_OPTIONS,
    .example = "percolator tablet --config cluster.json --name s1\n"
               "percolator --config cluster.json tablet add-replica t1 s4\n"
               "percolator --config cluster.json tablet move-leader t1 s4\n"
               "percolator --config cluster.json tablet remove-replica t1 s2\n"
               "percolator --config cluster.json --timeout 20m tablet replace-server s2 s5\n",
};

const cli_verb_t cli_verb_run = {
    .name = "run",
    .summary = "run every role of the configuration, and its workers, in one process",
    .run = run_all,
    .args = "[--ready-file FILE]",
    .flags = CLI_NEEDS_CONFIG,
    .exits = CLI_EXITS_BASIC,
    .about = "Runs an oracle (elected in ZooKeeper) and every tablet in this process,\n"
             "listening where the configuration says, so that many client\n"
             "processes on this machine can share one store; and, when the configuration\n"
             "has a \"workers\" section, the observer workers too (as 'percolator worker'\n"
             "would, in this process).\n" DAEMON_ABOUT,
    .options = DAEMON_OPTIONS,
    .example = "percolator run --config cluster.json --ready-file /tmp/ready.json\n",
};

const cli_verb_t cli_verb_worker = {
    .name = "worker",
    .summary = "run the configured observers (and serve an embedded store)",
    .run = run_worker,
    .args = "[--ready-file FILE]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about =
        "Loads the observer plugins of the configuration's \"workers\" section\n"
        "(docs/OBSERVERS.md), records their observed columns in the store, and runs\n"
        "them: workers.threads threads find notifications, claim buckets of them\n"
        "and run each observer in a transaction, retrying a failing one with\n"
        "backoff and parking it after workers.max_failures ('percolator\n"
        "failures'). Any number of worker processes can run against a cluster:\n"
        "each registers in ZooKeeper and scans its share of the buckets, which\n"
        "moves when workers join or leave (once stable for workers.scan.stable_ms).\n"
        "workers.http serves /health and /metrics.\n"
        "\n"
        "Without a cluster (--data DIR, or a configuration without \"tablets\") the\n"
        "worker holds the data directory and serves it: an oracle and one tablet\n"
        "on 127.0.0.1, without a coordination service, whose client configuration\n"
        "it writes to DIR/serving.json once its observers are registered. The\n"
        "other verbs given --data DIR reach the store through it meanwhile (one\n"
        "that finds the worker still starting waits for it, up to its --timeout);\n"
        "a worker started again, after a stop or a crash, takes the same ports\n"
        "(when they are free; workers.serve_ports pins them) and the same secret,\n"
        "so that their clients reconnect. Its garbage collection keeps what the\n"
        "clients' open transactions read, up to store.snapshot_max_age_ms.\n"
        "A worker that finds DIR held by a short-lived verb waits for it (up to\n"
        "--timeout); held by another worker, it stops at once and leaves that one's\n"
        "files alone. Scripts wait for --ready-file before writing (see the\n"
        "example). On SIGTERM or SIGINT it stops taking work, lets the observer\n"
        "transactions in flight finish, and exits 0.\n"
        "\n"
        "Upgrading a plugin: the worker runs a private copy of each plugin, so a\n"
        "new build may be written over the file while it runs (the worker logs\n"
        "that the file changed and goes on with the build it loaded). SIGHUP then\n"
        "loads the new builds from the same paths, lets the observer runs in\n"
        "flight finish, and runs the new observers on every pending notification;\n"
        "a build that fails to load is logged and the old one goes on. Or restart\n"
        "the workers one at a time (docs/OBSERVERS.md, \"Upgrading a plugin\").\n",
    .options = DAEMON_OPTIONS,
    .example = "percolator worker --config cluster.json\n"
               "percolator --config app.json worker --ready-file ready.json &\n"
               "while [ ! -s ready.json ] && kill -0 $!; do sleep 0.1; done\n",
};
