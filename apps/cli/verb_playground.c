/* verb_playground.c — `percolator playground`: a whole cluster on this
 * machine in one command (playground/playground.h does the work): it
 * prints the client configuration and a line per role, then a line for
 * every change of state (a role that exits, an oracle that takes the lead)
 * while it runs, and stops everything in order on SIGINT (Ctrl-C) or
 * SIGTERM. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "base/error.h"
#include "playground/playground.h"

enum {
  OPT_DIR = 0x300,
  OPT_SPLIT,
  OPT_TABLETS,
  OPT_ORACLES,
  OPT_ZK,
  OPT_WORKERS,
  OPT_PLUGIN,
  OPT_EXTRA,
  OPT_ONE,
  OPT_READY,
  OPT_KEEP,
  OPT_ZK_ONLY,
  OPT_SERVERS,
  OPT_REPLICAS,
};

#define START_WAIT_MS 90000u /* a JVM and several daemons on a loaded machine */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

/* "HH:MM:SS" of now. */
static void clock_text(char *out, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(out, cap, "%H:%M:%S", &tm);
}

static void print_roles(const pc_pg_t *p, const char *const *plugins, size_t nplugins) {
  for (size_t i = 0; i < pc_pg_role_count(p); i++) {
    const pc_pg_role_t *r = pc_pg_role(p, i);
    printf("  %-12s", r->name);
    if (r->listen[0]) printf(" %-21s", r->listen);
    else printf(" %-21s", "");
    printf(" http %-21s pid %-7d", r->http[0] ? r->http : "-", (int)r->pid);
    switch (r->kind) {
      case PC_PG_TSO:
      case PC_PG_SERVER: printf(" %s", r->leading ? "leads" : "stands by"); break;
      case PC_PG_TABLET: {
        /* a tablet's own server (named as the tablet), or a replicated
         * cluster's server sN holding replicas of some */
        int server = r->tablet[0] == 's' ? atoi(r->tablet + 1) : 0, first = 1;
        for (size_t t = 0; t < pc_pg_tablet_count(p); t++) {
          const pc_pg_tablet_t *tb = pc_pg_tablet(p, t);
          int mine = strcmp(tb->name, r->tablet) == 0;
          for (int k = 0; !mine && server && k < tb->replicas; k++) mine = tb->on[k] == server - 1;
          if (!mine) continue;
          printf("%s%s rows [\"%s\", %s%s%s)", first && server ? " holds " : first ? "" : ",",
                 server ? tb->name : "", tb->start, *tb->end ? "\"" : "",
                 *tb->end ? tb->end : "end", *tb->end ? "\"" : "");
          first = 0;
        }
        break;
      }
      case PC_PG_WORKER:
        for (size_t k = 0; k < nplugins; k++) printf("%s%s", k ? ", " : " plugins: ", plugins[k]);
        break;
      default: break;
    }
    putchar('\n');
  }
}

/* Ends the process when a second signal comes while the playground stops:
 * its roles get SIGTERM from the kernel as it exits (PR_SET_PDEATHSIG). */
static void *second_signal(void *arg) {
  sigset_t *sigs = arg;
  int sig;
  while (sigwait(sigs, &sig) != 0) {
  }
  fprintf(stderr, "percolator: playground: signal %d again: exiting now (the roles get SIGTERM)\n",
          sig);
  _exit(CLI_EXIT_ERROR);
  return NULL;
}

static int run_playground(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option longopts[] = {
      {"dir", required_argument, NULL, OPT_DIR},
      {"split", required_argument, NULL, OPT_SPLIT},
      {"tablets", required_argument, NULL, OPT_TABLETS},
      {"oracles", required_argument, NULL, OPT_ORACLES},
      {"zookeeper-servers", required_argument, NULL, OPT_ZK},
      {"workers", required_argument, NULL, OPT_WORKERS},
      {"plugin", required_argument, NULL, OPT_PLUGIN},
      {"extra-config", required_argument, NULL, OPT_EXTRA},
      {"one-process", no_argument, NULL, OPT_ONE},
      {"ready-file", required_argument, NULL, OPT_READY},
      {"keep", no_argument, NULL, OPT_KEEP},
      {"zookeeper-only", no_argument, NULL, OPT_ZK_ONLY},
      {"servers", required_argument, NULL, OPT_SERVERS},
      {"replicas", required_argument, NULL, OPT_REPLICAS},
      {NULL, 0, NULL, 0}};
  const char *dir = NULL, *ready = NULL, *extra_path = NULL;
  const char *splits[PC_PG_MAX_TABLETS], *plugins[PC_PG_MAX_PLUGINS];
  size_t nsplits = 0, nplugins = 0;
  long tablets = 0, oracles = 2, zk = 1, workers = -1, servers = 3, replicas = -1;
  int one = 0, keep = 0, zk_only = 0, c, code;
  char *end;
  while ((c = cli_getopt(ctx, argc, argv, "", longopts, &code)) != -1) {
    long *num = NULL;
    switch (c) {
      case CLI_GETOPT_EXIT: return code;
      case OPT_DIR: dir = optarg; break;
      case OPT_SPLIT:
        if (nsplits == PC_PG_MAX_TABLETS - 1)
          return cli_usage_error(ctx, "at most %d --split rows", PC_PG_MAX_TABLETS - 1);
        splits[nsplits++] = optarg;
        break;
      case OPT_TABLETS: num = &tablets; break;
      case OPT_ORACLES: num = &oracles; break;
      case OPT_ZK: num = &zk; break;
      case OPT_WORKERS: num = &workers; break;
      case OPT_PLUGIN:
        if (nplugins == PC_PG_MAX_PLUGINS)
          return cli_usage_error(ctx, "at most %d --plugin", PC_PG_MAX_PLUGINS);
        plugins[nplugins++] = optarg;
        break;
      case OPT_EXTRA: extra_path = optarg; break;
      case OPT_ONE: one = 1; break;
      case OPT_READY: ready = optarg; break;
      case OPT_KEEP: keep = 1; break;
      case OPT_ZK_ONLY: zk_only = 1; break;
      case OPT_SERVERS: num = &servers; break;
      case OPT_REPLICAS: num = &replicas; break;
      default: return cli_usage_error(ctx, "unexpected option");
    }
    if (num) {
      errno = 0;
      *num = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || *num < 0)
        return cli_usage_error(ctx, "'%s' is not a count", optarg);
    }
  }
  if (optind != argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  if (ctx->config)
    return cli_usage_error(ctx, "the playground writes its own configuration (--extra-config "
                           "FILE adds to it)");
  if (tablets && nsplits)
    return cli_usage_error(ctx, "--tablets and --split: give one of them");
  if (tablets > PC_PG_MAX_TABLETS || (tablets && tablets > 26))
    return cli_usage_error(ctx, "--tablets %ld: 1 to 26 (or --split ROW for each boundary)",
                           tablets);
  if (zk != 1 && zk != 3) return cli_usage_error(ctx, "--zookeeper-servers %ld: 1 or 3", zk);
  if (oracles < 1 || oracles > 9) return cli_usage_error(ctx, "--oracles %ld: 1 to 9", oracles);
  if (zk_only && (nplugins || nsplits || tablets || workers > 0 || one))
    return cli_usage_error(ctx, "--zookeeper-only starts ZooKeeper alone: no tablets, plugins "
                           "or workers");
  if (servers > 15) return cli_usage_error(ctx, "--servers %ld: 0 to 15", servers);
  if (replicas < 0) replicas = servers < 3 ? servers : 3;
  if (servers ? replicas < 1 || replicas > servers : replicas > 1)
    return cli_usage_error(ctx, "--replicas %ld: 1 to the servers' number (%ld)%s", replicas,
                           servers, servers ? "" : "; without --servers a tablet has one copy");
  if (workers < 0) workers = nplugins ? 1 : 0;
  if (workers > 0 && !nplugins) return cli_usage_error(ctx, "--workers needs a --plugin");
  if (workers > 32) return cli_usage_error(ctx, "--workers %ld: at most 32", workers);
  /* N tablets: the letters cut into N ranges of rows */
  static char letters[PC_PG_MAX_TABLETS][2];
  if (!nsplits) {
    if (!tablets) tablets = 2;
    for (long i = 1; i < tablets; i++) {
      letters[i][0] = (char)('a' + (26 * i) / tablets);
      splits[nsplits++] = letters[i];
    }
  }
  json_t *extra = NULL;
  if (extra_path) {
    json_error_t je;
    if (!(extra = json_load_file(extra_path, 0, &je)) || !json_is_object(extra)) {
      json_decref(extra);
      return cli_error(ctx, "%s:%d:%d: %s", extra_path, je.line, je.column,
                       extra ? "not a JSON object" : je.text);
    }
  }
  char made[PATH_MAX] = "", cli[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", cli, sizeof cli - 1);
  if (n <= 0) {
    json_decref(extra);
    return cli_error(ctx, "cannot find this program (/proc/self/exe): %s", strerror(errno));
  }
  cli[n] = '\0';
  if (!dir) {
    const char *tmp = getenv("TMPDIR");
    snprintf(made, sizeof made, "%s/percolator-playground-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(made)) {
      json_decref(extra);
      return cli_error(ctx, "cannot create a directory under %s: %s", tmp && *tmp ? tmp : "/tmp",
                       strerror(errno));
    }
    dir = made;
  }
  pc_pg_options_t o = {.cli = cli, .dir = dir, .zk_servers = (int)zk, .oracles = (int)oracles,
                       .one_process = one, .zookeeper_only = zk_only, .splits = splits, .nsplits = nsplits,
                       .workers = (int)workers, .plugins = plugins, .nplugins = nplugins,
                       .extra = extra, .servers = (int)servers, .replicas = (int)replicas};
  pc_error_t err;
  pc_pg_t *p = pc_pg_create(&o, &err);
  json_decref(extra);
  if (!p) {
    if (made[0]) rmdir(made);
    return cli_pc_error(ctx, &err);
  }

  /* signals are taken by this thread only; the roles are in process groups
   * of their own, so a terminal's Ctrl-C reaches this process alone */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  printf("percolator playground: starting in %s (logs in %s/logs)\n", pc_pg_dir(p), pc_pg_dir(p));
  fflush(stdout);
  int rc = CLI_EXIT_OK;
  if (pc_pg_start(p, START_WAIT_MS, &err) != PC_OK) {
    rc = cli_pc_error(ctx, &err);
  } else {
    char events[4096];
    (void)pc_pg_poll(p, events, sizeof events); /* which oracle leads */
    if (ready && pc_pg_write_state(p, ready, &err) != PC_OK) rc = cli_pc_error(ctx, &err);
  }
  if (rc == CLI_EXIT_OK) {
    print_roles(p, plugins, nplugins);
    if (zk_only)
      printf("ZooKeeper: %s\nCtrl-C stops it.\n", pc_pg_zk_connect(p));
    else
      printf("Client configuration: %s\n"
             "  percolator --config %s status\n"
             "Ctrl-C stops everything.\n",
             pc_pg_client_config(p), pc_pg_client_config(p));
    fflush(stdout);
    for (;;) {
      struct timespec second = {1, 0};
      int sig = sigtimedwait(&sigs, NULL, &second);
      if (sig > 0) {
        char at[16];
        clock_text(at, sizeof at);
        printf("%s  signal %d: stopping the workers, the tablets, the oracles, ZooKeeper\n", at,
               sig);
        fflush(stdout);
        break;
      }
      char events[8192];
      if (pc_pg_poll(p, events, sizeof events) == 0) continue;
      char at[16];
      clock_text(at, sizeof at);
      for (char *line = events, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) break;
        printf("%s  %.*s\n", at, (int)(nl - line), line);
      }
      fflush(stdout);
      if (ready && pc_pg_write_state(p, ready, &err) != PC_OK)
        fprintf(stderr, "percolator: playground: %s\n", err.text);
    }
    pthread_t t;
    int watching = pthread_create(&t, NULL, second_signal, &sigs) == 0;
    pc_pg_stop(p);
    if (watching) pthread_cancel(t), pthread_join(t, NULL);
    if (ready) (void)pc_pg_write_state(p, ready, &err);
    printf("stopped%s\n", made[0] && !keep ? "; its directory is removed" : "");
  }
  pc_pg_free(p);
  if (made[0] && !keep) nftw(made, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  else if (made[0]) printf("kept %s\n", made);
  fflush(stdout);
  return rc;
}

const cli_verb_t cli_verb_playground = {
    .name = "playground",
    .summary = "a whole cluster on this machine in one command (Ctrl-C stops it)",
    .run = run_playground,
    .args = "[--dir DIR] [--tablets N | --split ROW...] [--plugin SO...] [options]",
    .flags = 0,
    .exits = CLI_EXITS_BASIC,
    .about =
        "Starts, in a directory of its own, a private ZooKeeper (Debian's zookeeper\n"
        "package), the oracles (one leads, the others stand by), the tablet servers\n"
        "(by default three, each tablet a Raft group of a replica on each: see\n"
        "--servers) and workers running the given plugins: each a percolator process\n"
        "on 127.0.0.1 with ports the kernel picks, logging to DIR/logs/. Once every\n"
        "tablet has a leader it prints the client configuration (DIR/cluster.json:\n"
        "any verb takes it with --config) and a line per role, then a line for\n"
        "each change while it runs (a role that exits, an oracle that takes the\n"
        "lead), and on SIGINT (Ctrl-C) or SIGTERM stops the workers, the tablets,\n"
        "the oracles and ZooKeeper in that order and exits 0 (a second signal exits\n"
        "at once; the roles then get SIGTERM from the kernel, as they do if this\n"
        "process is killed).\n"
        "\n"
        "Without --dir the directory is a new one under $TMPDIR, removed when the\n"
        "playground stops (--keep keeps it). With --dir DIR it stays, and a\n"
        "playground started again on DIR keeps its data (the same tablets must be\n"
        "asked for: ZooKeeper remembers their rows). The tests and the benchmarks\n"
        "start their clusters through the same code (playground/).\n",
    .options =
        "  --dir DIR           the directory (created when missing; kept)\n"
        "  --tablets N         N tablets cutting the rows at letters (default 2: at \"n\")\n"
        "  --split ROW         a tablet begins at ROW (repeat, in increasing order)\n"
        "  --oracles N         oracle processes, one leading (default 2)\n"
        "  --servers N         tablet servers s1..sN (default 3), each tablet a Raft group\n"
        "                      of replicas on them; 0: a server of its own for each\n"
        "                      tablet, not replicated\n"
        "  --replicas R        copies of each tablet, 1 to N (default 3, or N when fewer)\n"
        "  --zookeeper-servers N  1 or 3 ZooKeeper servers (default 1)\n"
        "  --plugin SO         an observer plugin the workers run (repeat for more)\n"
        "  --workers N         worker processes (default 1 with --plugin, else 0)\n"
        "  --extra-config FILE a JSON object merged into every configuration written\n"
        "                      (\"store\", \"log\", \"limits\", \"secret\", \"tls\"; its\n"
        "                      \"zookeeper\", \"tso\" and \"workers\" members merged into\n"
        "                      the playground's own)\n"
        "  --one-process       the first oracle and every tablet in one 'percolator run'\n"
        "  --ready-file FILE   once started (and at each change), the state as JSON:\n"
        "                      {\"dir\", \"client_config\", \"zookeeper\", \"pid\",\n"
        "                      \"roles\": [{\"name\", \"kind\", \"pid\", \"listen\", \"http\",\n"
        "                      \"log\", \"state\", \"leading\", \"exit_code\" or\n"
        "                      \"exit_signal\" once it exited}]}\n"
        "  --keep              keep the directory made without --dir\n"
        "  --zookeeper-only    start the ZooKeeper servers alone (for scripts that run\n"
        "                      their own roles: the connect string is in the state)\n",
    .example = "percolator playground --plugin ./normalize_count.so\n"
               "percolator --config /tmp/percolator-playground-*/cluster.json set docs d1 raw:text Hi\n"
               "percolator playground --dir pg --tablets 4 --zookeeper-servers 3 --ready-file pg.json\n",
};
