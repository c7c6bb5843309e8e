/* zk.c — what coordination through ZooKeeper costs and what it buys.
 *
 * Starts a private standalone ZooKeeper server (tests/zkharness.c: Debian's
 * zookeeper package on 127.0.0.1) and measures, in one run, each against its
 * baseline without ZooKeeper:
 *   timestamps   --threads threads take one timestamp per call for --seconds
 *                through a batcher over loopback TCP: from an oracle elected in
 *                ZooKeeper (its handler, a locator following the leader) and,
 *                the baseline, from the file-backed oracle `percolator tso`
 *                served before (pc_tso_rpc_handler, a plain rpc client);
 *                ratio = elected / file
 *   transactions --threads threads run read-modify-write transactions of two
 *                rows (two-phase commit across two tablets) for --seconds
 *                against a daemon of this process (an oracle and two tablets,
 *                daemon/daemon.h) configured with "zookeeper", and against the
 *                same daemon without coordination (the configuration of a
 *                served directory, the one cluster shape without ZooKeeper);
 *                ratio = zookeeper / plain
 *   failover     --kills times: two oracle processes (this program run again
 *                as `node`), a client fetching timestamps from one thread; the
 *                leader is SIGKILLed and the time from the kill to the next
 *                timestamp is recorded (a new standby is started each time);
 *                and a client process killed after its prewrite, its locks
 *                carrying a lease of a minute: the time from its death to a
 *                read that gets past them (liveness from its session)
 * Rounds of the first two alternate which side goes first; figures are
 * medians over --rounds. Output: one JSON document on stdout.
 */
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "base/log.h"
#include "daemon/daemon.h"
#include "net/rpc.h"
#include "tests/zkharness.h"
#include "tso/oracle.h"
#include "tso/tso_client.h"
#include "tso/tso_server.h"
#include "tso/tso_election.h"
#include "tso/tso_locator.h"

#define MAX_THREADS 256
#define MAX_ROUNDS 16

static struct {
  int threads, rounds, kills;
  double seconds;
  unsigned session_ms;
} opt = {16, 3, 3, 3.0, 4000};

static tu_zk_t *zk;
static char dir[256];
static const char *self_exe;

static void die(const char *what, const pc_error_t *err) {
  fprintf(stderr, "zk bench: %s: %s\n", what, err ? err->text : "");
  exit(1);
}

static int dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, dcmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- timestamps ------------------------------------------------------------ */

typedef struct ts_run {
  pc_ts_batcher_t *b;
  double until_s;
  _Atomic uint64_t total;
  atomic_int bad;
} ts_run_t;

static void *ts_thread(void *arg) {
  ts_run_t *r = arg;
  pc_error_t err;
  uint64_t prev = 0, n = 0;
  while (bu_now_s() < r->until_s) {
    uint64_t ts;
    if (pc_ts_batcher_get(r->b, 10000, &ts, &err) != PC_OK) die("timestamp", &err);
    if (ts <= prev) atomic_store(&r->bad, 1);
    prev = ts;
    n++;
  }
  atomic_fetch_add(&r->total, n);
  return NULL;
}

/* Timestamps per second through batcher b. */
static double ts_rate(pc_ts_batcher_t *b) {
  ts_run_t r = {.b = b};
  pthread_t th[MAX_THREADS];
  double t0 = bu_now_s();
  r.until_s = t0 + opt.seconds;
  for (int i = 0; i < opt.threads; i++) pthread_create(&th[i], NULL, ts_thread, &r);
  for (int i = 0; i < opt.threads; i++) pthread_join(th[i], NULL);
  if (atomic_load(&r.bad)) die("a thread's timestamps did not increase", NULL);
  return (double)atomic_load(&r.total) / (bu_now_s() - t0);
}

static void bench_timestamps(json_t *out) {
  pc_error_t err;
  /* the baseline: the file-backed oracle over rpc.h */
  char path[400];
  snprintf(path, sizeof path, "%s/oracle", dir);
  pc_oracle_t *o = pc_oracle_open(path, 3000, &err);
  if (!o) die("oracle", &err);
  pc_rpc_server_options_t so = {.name = "tso", .host = "127.0.0.1",
                                .runs_inline = pc_tso_rpc_runs_inline};
  pc_rpc_server_t *fs = pc_rpc_server_start(&so, pc_tso_rpc_handler, o, &err);
  if (!fs) die("server", &err);
  pc_rpc_client_t *fc = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(fs), NULL, &err);
  pc_ts_batcher_t *fb = pc_ts_batcher_create(pc_tso_remote_fetch, fc);
  /* the elected oracle and a client that follows it */
  pc_tso_node_options_t no = {{tu_zk_connect(zk), "/percolator/bench-ts", NULL, opt.session_ms, NULL},
                              3000};
  pc_tso_node_t *node = pc_tso_node_create(&no, &err);
  pc_rpc_server_t *zs = node ? pc_rpc_server_start(&so, pc_tso_node_handler, node, &err) : NULL;
  if (!zs) die("elected oracle", &err);
  char adv[64];
  snprintf(adv, sizeof adv, "127.0.0.1:%u", pc_rpc_server_port(zs));
  if (pc_tso_node_join(node, adv, &err) != PC_OK) die("join", &err);
  pc_tso_locator_t *l = pc_tso_locator_create(
      &(pc_zk_options_t){tu_zk_connect(zk), "/percolator/bench-ts", NULL, opt.session_ms, NULL}, NULL,
      30000, &err);
  if (!l) die("locator", &err);
  pc_ts_batcher_t *zb = pc_ts_batcher_create(pc_tso_locator_fetch, l);
  uint64_t first;
  if (pc_tso_locator_fetch(l, 1, 30000, &first, &err) != PC_OK) die("first timestamp", &err);
  double file[MAX_ROUNDS], elected[MAX_ROUNDS], ratio[MAX_ROUNDS];
  for (int r = 0; r < opt.rounds; r++) {
    if (r % 2 == 0) {
      file[r] = ts_rate(fb);
      elected[r] = ts_rate(zb);
    } else {
      elected[r] = ts_rate(zb);
      file[r] = ts_rate(fb);
    }
    ratio[r] = elected[r] / file[r];
  }
  json_t *j = json_object();
  json_object_set_new(j, "threads", json_integer(opt.threads));
  json_object_set_new(j, "file_oracle_per_s", json_real(median(file, opt.rounds)));
  json_object_set_new(j, "elected_oracle_per_s", json_real(median(elected, opt.rounds)));
  json_object_set_new(j, "ratio", json_real(median(ratio, opt.rounds)));
  json_object_set_new(out, "timestamps", j);
  pc_ts_batcher_destroy(zb);
  pc_tso_locator_destroy(l);
  pc_rpc_server_stop(zs);
  pc_tso_node_stop(node);
  pc_ts_batcher_destroy(fb);
  pc_rpc_client_destroy(fc);
  pc_rpc_server_stop(fs);
  pc_oracle_close(o);
}

/* ---- transactions ---------------------------------------------------------- */

/* A free port of 127.0.0.1 (bound to 0 and released). */
static int free_port(void) {
  pc_error_t err;
  pc_rpc_server_options_t so = {.name = "probe", .host = "127.0.0.1"};
  pc_rpc_server_t *s = pc_rpc_server_start(&so, pc_tso_rpc_handler, NULL, &err);
  if (!s) die("probe", &err);
  int p = pc_rpc_server_port(s);
  pc_rpc_server_stop(s);
  return p;
}

/* Writes a cluster configuration (an oracle, tablets t1 ["", "k") and t2
 * ["k", "")), with "zookeeper" under root when root is not NULL, else marked
 * "served" (one process serves the data, without coordination). */
static void write_config(const char *path, const char *sub, const char *root, long lock_ttl) {
  FILE *f = fopen(path, "w");
  if (!f) die(path, NULL);
  fprintf(f, "{\"data_dir\":\"%s/%s\",\"log\":{\"level\":\"warn\"},", dir, sub);
  fprintf(f, "\"store\":{\"gc_interval_ms\":0,\"lock_ttl_ms\":%ld},", lock_ttl);
  if (root)
    fprintf(f, "\"zookeeper\":{\"connect\":\"%s\",\"root\":\"%s\",\"session_timeout_ms\":%u},",
            tu_zk_connect(zk), root, opt.session_ms);
  else
    fprintf(f, "\"served\":\"%s/%s\",", dir, sub);
  fprintf(f,
          "\"tso\":{\"listen\":\"127.0.0.1:%d\"},\"tablets\":["
          "{\"name\":\"t1\",\"listen\":\"127.0.0.1:%d\",\"start\":\"\",\"end\":\"k\"},"
          "{\"name\":\"t2\",\"listen\":\"127.0.0.1:%d\",\"start\":\"k\",\"end\":\"\"}]}\n",
          free_port(), free_port(), free_port());
  fclose(f);
}

typedef struct txn_run {
  pc_db_t *db;
  double until_s;
  _Atomic uint64_t commits, conflicts;
} txn_run_t;

static void *txn_thread(void *arg) {
  txn_run_t *r = arg;
  pc_error_t err;
  unsigned seed = (unsigned)(uintptr_t)&err;
  uint64_t n = 0, c = 0;
  while (bu_now_s() < r->until_s) {
    char a[16], b[16];
    snprintf(a, sizeof a, "a%04d", rand_r(&seed) % 1000); /* tablet t1 */
    snprintf(b, sizeof b, "r%04d", rand_r(&seed) % 1000); /* tablet t2 */
    pc_txn_t *t = pc_txn_begin(r->db, &err);
    if (!t) die("begin", &err);
    char *v = NULL;
    size_t len = 0;
    pc_status_t st = pc_txn_get(t, "b", a, strlen(a), "v", 1, &v, &len, &err);
    if (st == PC_OK || st == PC_NOT_FOUND) {
      pc_free(v);
      st = pc_txn_set(t, "b", a, strlen(a), "v", 1, "x", 1, &err);
    }
    if (st == PC_OK) st = pc_txn_set(t, "b", b, strlen(b), "v", 1, "y", 1, &err);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    if (st == PC_OK) n++;
    else if (st == PC_CONFLICT || st == PC_LOCKED) c++;
    else die("transaction", &err);
    pc_txn_destroy(t);
  }
  atomic_fetch_add(&r->commits, n);
  atomic_fetch_add(&r->conflicts, c);
  return NULL;
}

static double txn_rate(pc_db_t *db) {
  txn_run_t r = {.db = db};
  pthread_t th[MAX_THREADS];
  double t0 = bu_now_s();
  r.until_s = t0 + opt.seconds;
  for (int i = 0; i < opt.threads; i++) pthread_create(&th[i], NULL, txn_thread, &r);
  for (int i = 0; i < opt.threads; i++) pthread_join(th[i], NULL);
  return (double)atomic_load(&r.commits) / (bu_now_s() - t0);
}

typedef struct served {
  pc_daemon_config_t c;
  pc_daemon_t *d;
  pc_db_t *db;
} served_t;

static void serve(served_t *s, const char *path) {
  pc_error_t err;
  if (pc_daemon_config_load(path, &s->c, &err) != PC_OK) die(path, &err);
  pc_daemon_spec_t spec = {.tso = 1, .tablets = 2};
  if (!(s->d = pc_daemon_start(&s->c, &spec, &err))) die("daemon", &err);
  if (!(s->db = pc_db_open_config(path, &err))) die("client", &err);
}

static void unserve(served_t *s) {
  pc_db_close(s->db);
  pc_daemon_stop(s->d);
  pc_daemon_config_free(&s->c);
}

static void bench_transactions(json_t *out) {
  char plain_cfg[400], zk_cfg[400];
  snprintf(plain_cfg, sizeof plain_cfg, "%s/plain.json", dir);
  snprintf(zk_cfg, sizeof zk_cfg, "%s/zk.json", dir);
  write_config(plain_cfg, "plain", NULL, 3000);
  write_config(zk_cfg, "zk", "/percolator/bench-txn", 3000);
  served_t plain, coord;
  serve(&plain, plain_cfg);
  serve(&coord, zk_cfg);
  double p[MAX_ROUNDS], z[MAX_ROUNDS], ratio[MAX_ROUNDS];
  for (int r = 0; r < opt.rounds; r++) {
    if (r % 2 == 0) {
      p[r] = txn_rate(plain.db);
      z[r] = txn_rate(coord.db);
    } else {
      z[r] = txn_rate(coord.db);
      p[r] = txn_rate(plain.db);
    }
    ratio[r] = z[r] / p[r];
  }
  json_t *j = json_object();
  json_object_set_new(j, "threads", json_integer(opt.threads));
  json_object_set_new(j, "shape", json_string("read 1 row, write 2 rows on 2 tablets"));
  json_object_set_new(j, "plain_per_s", json_real(median(p, opt.rounds)));
  json_object_set_new(j, "zookeeper_per_s", json_real(median(z, opt.rounds)));
  json_object_set_new(j, "ratio", json_real(median(ratio, opt.rounds)));
  json_object_set_new(out, "transactions", j);
  unserve(&coord);
  unserve(&plain);
}

/* ---- failover ---------------------------------------------------------------- */

/* `node ROOT PORTFILE`: an elected oracle process until SIGTERM or SIGKILL. */
static int node_main(const char *connect, const char *root, const char *port_file) {
  pc_error_t err;
  pc_tso_node_options_t no = {{connect, root, NULL, opt.session_ms, NULL}, 3000};
  pc_tso_node_t *node = pc_tso_node_create(&no, &err);
  pc_rpc_server_options_t so = {.name = "tso", .host = "127.0.0.1",
                                .runs_inline = pc_tso_rpc_runs_inline};
  pc_rpc_server_t *s = node ? pc_rpc_server_start(&so, pc_tso_node_handler, node, &err) : NULL;
  if (!s) return 1;
  char adv[64];
  snprintf(adv, sizeof adv, "127.0.0.1:%u", pc_rpc_server_port(s));
  if (pc_tso_node_join(node, adv, &err) != PC_OK) return 1;
  FILE *f = fopen(port_file, "w");
  if (!f) return 1;
  fprintf(f, "%u\n", pc_rpc_server_port(s));
  fclose(f);
  pause();
  return 0;
}

/* `locker CONFIG`: prewrites rows of both tablets and exits before its
 * commit point, leaving its locks. */
static int locker_main(const char *config) {
  pc_error_t err;
  if (pc_failpoints_configure("txn.commit.before_primary=exit(7)", &err) != PC_OK) return 1;
  pc_db_t *db = pc_db_open_config(config, &err);
  pc_txn_t *t = db ? pc_txn_begin(db, &err) : NULL;
  if (!t || pc_txn_set(t, "b", "a0000", 5, "v", 1, "L", 1, &err) != PC_OK ||
      pc_txn_set(t, "b", "r0000", 5, "v", 1, "L", 1, &err) != PC_OK)
    return 1;
  pc_txn_commit(t, &err);
  return 2;
}

static pid_t spawn(const char *const *args) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    execv(args[0], (char *const *)args);
    _exit(127);
  }
  return pid;
}

typedef struct tso_proc {
  pid_t pid;
  int port;
} tso_proc_t;

static tso_proc_t start_node(const char *root, int k) {
  char pf[400], session[16];
  snprintf(pf, sizeof pf, "%s/node%d.port", dir, k);
  snprintf(session, sizeof session, "%u", opt.session_ms);
  const char *args[] = {self_exe, "node", tu_zk_connect(zk), root, pf, session, NULL};
  tso_proc_t p = {spawn(args), 0};
  for (int i = 0; i < 3000 && !p.port; i++) {
    FILE *f = fopen(pf, "r");
    if (f) {
      if (fscanf(f, "%d", &p.port) != 1) p.port = 0;
      fclose(f);
    }
    if (!p.port) bu_sleep_s(0.01);
  }
  if (!p.port) die("oracle process did not start", NULL);
  return p;
}

static void bench_failover(json_t *out) {
  pc_error_t err;
  const char *root = "/percolator/bench-failover";
  tso_proc_t procs[64];
  int n = 0;
  procs[n] = start_node(root, n);
  n++;
  procs[n] = start_node(root, n);
  n++;
  pc_tso_locator_t *l = pc_tso_locator_create(
      &(pc_zk_options_t){tu_zk_connect(zk), root, NULL, opt.session_ms, NULL}, NULL, 30000, &err);
  if (!l) die("locator", &err);
  json_t *kills = json_array();
  double ms[64];
  for (int k = 0; k < opt.kills; k++) {
    uint64_t ts;
    if (pc_tso_locator_fetch(l, 1, 60000, &ts, &err) != PC_OK) die("timestamp", &err);
    char leader[300];
    pc_tso_locator_members(l, leader, sizeof leader, NULL, 0);
    int port = atoi(strrchr(leader, ':') + 1), victim = -1;
    for (int i = 0; i < n; i++)
      if (procs[i].pid > 0 && procs[i].port == port) victim = i;
    if (victim < 0) die("the leader is none of ours", NULL);
    double t0 = bu_now_s();
    kill(procs[victim].pid, SIGKILL);
    waitpid(procs[victim].pid, NULL, 0);
    procs[victim].pid = 0;
    if (pc_tso_locator_fetch(l, 1, 60000, &ts, &err) != PC_OK) die("timestamp after kill", &err);
    ms[k] = (bu_now_s() - t0) * 1000;
    json_array_append_new(kills, json_real(ms[k]));
    procs[n] = start_node(root, n);
    n++;
  }
  pc_tso_locator_destroy(l);
  for (int i = 0; i < n; i++)
    if (procs[i].pid > 0) kill(procs[i].pid, SIGKILL), waitpid(procs[i].pid, NULL, 0);
  json_t *j = json_object();
  json_object_set_new(j, "session_timeout_ms", json_integer(opt.session_ms));
  json_object_set_new(j, "oracle_kill_to_timestamp_ms", kills);
  json_object_set_new(j, "oracle_median_ms", json_real(median(ms, opt.kills)));

  /* a client killed after its prewrite: locks of a minute's lease */
  char cfg[400];
  snprintf(cfg, sizeof cfg, "%s/locks.json", dir);
  write_config(cfg, "locks", "/percolator/bench-locks", 60000);
  served_t s;
  serve(&s, cfg);
  json_t *locks = json_array();
  for (int k = 0; k < opt.kills; k++) {
    const char *args[] = {self_exe, "locker", cfg, NULL};
    pid_t pid = spawn(args);
    int status;
    waitpid(pid, &status, 0);
    double t0 = bu_now_s();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 7) die("the locker did not stop", NULL);
    pc_txn_t *t = pc_txn_begin(s.db, &err);
    pc_txn_set_timeout_ms(t, 60000);
    char *v = NULL;
    size_t len;
    pc_status_t st = pc_txn_get(t, "b", "r0000", 5, "v", 1, &v, &len, &err);
    if (st != PC_OK && st != PC_NOT_FOUND) die("read past the locks", &err);
    ms[k] = (bu_now_s() - t0) * 1000;
    json_array_append_new(locks, json_real(ms[k]));
    pc_free(v);
    pc_txn_destroy(t);
  }
  unserve(&s);
  json_object_set_new(j, "client_death_to_read_ms", locks);
  json_object_set_new(j, "client_median_ms", json_real(median(ms, opt.kills)));
  json_object_set_new(out, "failover", j);
}

int main(int argc, char **argv) {
  static char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 1;
  exe[n] = '\0';
  self_exe = exe;
  if (argc == 6 && strcmp(argv[1], "node") == 0) {
    opt.session_ms = (unsigned)atoi(argv[5]);
    return node_main(argv[2], argv[3], argv[4]);
  }
  if (argc == 3 && strcmp(argv[1], "locker") == 0) return locker_main(argv[2]);
  static const struct option longopts[] = {{"threads", required_argument, NULL, 't'},
                                           {"seconds", required_argument, NULL, 's'},
                                           {"rounds", required_argument, NULL, 'r'},
                                           {"kills", required_argument, NULL, 'k'},
                                           {"session-ms", required_argument, NULL, 'S'},
                                           {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    if (c == 't') opt.threads = atoi(optarg);
    else if (c == 's') opt.seconds = atof(optarg);
    else if (c == 'r') opt.rounds = atoi(optarg);
    else if (c == 'k') opt.kills = atoi(optarg);
    else if (c == 'S') opt.session_ms = (unsigned)atoi(optarg);
    else {
      fprintf(stderr,
              "usage: pc_bench_zk [--threads N] [--seconds S] [--rounds R] [--kills K] "
              "[--session-ms MS]\n");
      return 2;
    }
  }
  if (opt.threads < 1 || opt.threads > MAX_THREADS || opt.rounds < 1 ||
      opt.rounds > MAX_ROUNDS || opt.kills < 1 || opt.kills > 32 || opt.seconds <= 0)
    die("options out of range", NULL);
  pc_log_set_level(PC_LOG_ERROR);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pc-bench-zk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) die("temporary directory", NULL);
  zk = tu_zk_start(1);
  json_t *out = json_object();
  json_object_set_new(out, "benchmark", json_string("zk"));
  json_object_set_new(out, "seconds", json_real(opt.seconds));
  json_object_set_new(out, "rounds", json_integer(opt.rounds));
  bench_timestamps(out);
  bench_transactions(out);
  bench_failover(out);
  tu_zk_stop(zk);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "zk bench: cannot remove %s\n", dir);
  json_dumpf(out, stdout, JSON_INDENT(2));
  printf("\n");
  json_decref(out);
  return 0;
}
