/* testutil.c — temporary directories and small transaction wrappers for the
 * test programs (see testutil.h). */
#include "tests/testutil.h"
#include "tests/zkharness.h"
#include "tso/tso_locator.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what, const pc_error_t *err) {
  fprintf(stderr, "test setup failed: %s: %s (%s)\n", what, err ? err->text : "",
          err ? pc_status_name(err->code) : "");
  abort();
}


/* ---- cluster mode --------------------------------------------------------
 * With PERCOLATOR_TEST_CLUSTER=/path/to/percolator in the environment, every
 * test directory gets its own cluster of real daemons on 127.0.0.1 with
 * ephemeral ports — an oracle and a standby, elected in ZooKeeper, and
 * three tablet servers, each a separate process — started by tu_mkdtemp and
 * stopped by tu_rmtree; tu_open then connects to it through a client
 * configuration instead of opening the embedded store, so the same tests run
 * unchanged against it. One private ZooKeeper server (tests/zkharness.c)
 * serves every test directory of the program, each cluster under a root of
 * its own (/percolator/<directory name>), so a program pays one server start.
 * The tablets split rows at "acct25" and "r2", so the rows the tests use
 * ("a", "acct00".."acct49", "b", "k0".., "r0".."r3", "x", "y") spread over all three. */

#define CLUSTER_MAX_PIDS 8
#define ZK_SESSION_MS 4000

static const char *forced_cli; /* set by tu_cluster_mkdtemp */
static uint32_t forced_session_ms; /* set by tu_cluster_mkdtemp_session (0: ZK_SESSION_MS) */

static const char *cluster_cli(void) {
  if (forced_cli) return forced_cli;
  const char *p = getenv("PERCOLATOR_TEST_CLUSTER");
  return p && *p ? p : NULL;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) die(path, NULL);
}

static const char *const server_names[3] = {"s1", "s2", "s3"};

/* PERCOLATOR_TEST_REPLICAS=3: the cluster's tablets are Raft groups, a
 * replica of each on each of three servers (s1, s2, s3), instead of a
 * server per tablet. */
static int replicated(void) {
  const char *p = getenv("PERCOLATOR_TEST_REPLICAS");
  return p && atoi(p) > 1;
}

/* Starts `cli --config cfg VERB [--name NAME] --ready-file dir/LOG.ready` with
 * its output in dir/LOG.log; it gets SIGTERM if this process dies. */
static pid_t spawn_daemon(const char *dir, const char *cfg, const char *verb, const char *name,
                          const char *log) {
  char logpath[4200], ready[4200];
  snprintf(logpath, sizeof logpath, "%s/%s.log", dir, log);
  snprintf(ready, sizeof ready, "%s/%s.ready", dir, log);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) die("fork", NULL);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(1);
    const char *argv[10];
    int n = 0;
    argv[n++] = cluster_cli();
    argv[n++] = "--config";
    argv[n++] = cfg;
    argv[n++] = verb;
    if (name) {
      argv[n++] = "--name";
      argv[n++] = name;
    }
    argv[n++] = "--ready-file";
    argv[n++] = ready;
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* Waits (bounded) for dir/LOG.ready and returns the port of its `key` role's
 * listen; a daemon that exits meanwhile fails at once, naming its log. */
static int ready_port(const char *dir, const char *log, const char *key, const char *tablet,
                      pid_t pid) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.ready", dir, log);
  for (int i = 0; i < 6000; i++) { /* up to ~60 s: ZooKeeper sessions on a loaded machine */
    json_t *j = json_load_file(path, 0, NULL);
    if (j) {
      json_t *o = !tablet ? json_object_get(j, key)
                  : replicated() ? json_object_get(json_object_get(j, "servers"), tablet)
                                 : json_object_get(json_object_get(j, "tablets"), tablet);
      const char *ep = json_string_value(json_object_get(o, "listen"));
      const char *colon = ep ? strrchr(ep, ':') : NULL;
      int port = colon ? atoi(colon + 1) : -1;
      json_decref(j);
      if (port > 0) return port;
    }
    if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid) {
      fprintf(stderr, "cluster daemon %s exited while starting; see %s/%s.log\n", log, dir, log);
      abort();
    }
    struct timespec t = {0, 10 * 1000000L};
    nanosleep(&t, NULL);
  }
  fprintf(stderr, "cluster daemon %s did not become ready; see %s/%s.log\n", log, dir, log);
  abort();
}

static const char *const tablet_names[3] = {"t1", "t2", "t3"};


/* The tests choose their clients' lock TTLs (up to an hour, for locks that
 * must outlive a test's reads): the tablets' cap on them (store.lock_ttl_ms)
 * is set above every one. */
#define DAEMON_STORE "\"store\":{\"lock_ttl_ms\":3600000},"

/* The "tablets" array with the given listen ports (0 = ephemeral); or,
 * replicated, "servers" with those ports and the tablets' replicas (with
 * the election timeout the tests expect). */
static void tablets_json(char *out, size_t cap, const int ports[3]) {
  if (replicated()) {
    snprintf(out, cap,
             "[{\"name\":\"t1\",\"start\":\"\",\"end\":\"acct25\",\"replicas\":[\"s1\",\"s2\",\"s3\"]},"
             "{\"name\":\"t2\",\"start\":\"acct25\",\"end\":\"r2\",\"replicas\":[\"s1\",\"s2\",\"s3\"]},"
             "{\"name\":\"t3\",\"start\":\"r2\",\"end\":\"\",\"replicas\":[\"s1\",\"s2\",\"s3\"]}],"
             "\"servers\":[{\"name\":\"s1\",\"listen\":\"127.0.0.1:%d\"},"
             "{\"name\":\"s2\",\"listen\":\"127.0.0.1:%d\"},"
             "{\"name\":\"s3\",\"listen\":\"127.0.0.1:%d\"}],"
             "\"replication\":{\"election_timeout_ms\":1000}",
             ports[0], ports[1], ports[2]);
    return;
  }
  snprintf(out, cap,
           "[{\"name\":\"t1\",\"listen\":\"127.0.0.1:%d\",\"start\":\"\",\"end\":\"acct25\"},"
           "{\"name\":\"t2\",\"listen\":\"127.0.0.1:%d\",\"start\":\"acct25\",\"end\":\"r2\"},"
           "{\"name\":\"t3\",\"listen\":\"127.0.0.1:%d\",\"start\":\"r2\",\"end\":\"\"}]",
           ports[0], ports[1], ports[2]);
}

/* The daemons' log level: PERCOLATOR_TEST_LOG (e.g. "info"), "warn" by default. */
static const char *daemon_log_level(void) {
  const char *l = getenv("PERCOLATOR_TEST_LOG");
  return l && (!strcmp(l, "debug") || !strcmp(l, "info") || !strcmp(l, "error")) ? l : "warn";
}

/* The ZooKeeper server of this program's clusters, started at the first. */
static tu_zk_t *shared_zk;

static void stop_shared_zk(void) {
  tu_zk_stop(shared_zk);
  shared_zk = NULL;
}

const char *tu_zk_shared(void) {
  if (!shared_zk) {
    shared_zk = tu_zk_start(1);
    atexit(stop_shared_zk);
  }
  return tu_zk_connect(shared_zk);
}

/* The cluster root of test directory dir. */
static const char *cluster_root(const char *dir, char *out, size_t cap) {
  const char *name = strrchr(dir, '/');
  snprintf(out, cap, "/percolator/%s", name ? name + 1 : dir);
  return out;
}

/* The "zookeeper" member of dir's configurations. */
static void zk_json(const char *dir, char *out, size_t cap) {
  char root[300];
  snprintf(out, cap,
           "\"zookeeper\":{\"connect\":\"%s\",\"root\":\"%s\",\"session_timeout_ms\":%d},",
           tu_zk_shared(), cluster_root(dir, root, sizeof root),
           forced_session_ms ? (int)forced_session_ms : ZK_SESSION_MS);
}

/* The port of the oracle whose ready file is dir/LOG.ready, or -1. */
static int ready_tso_port(const char *dir, const char *log) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.ready", dir, log);
  json_t *j = json_load_file(path, 0, NULL);
  const char *ep = json_string_value(json_object_get(json_object_get(j, "tso"), "listen"));
  const char *colon = ep ? strrchr(ep, ':') : NULL;
  int port = colon ? atoi(colon + 1) : -1;
  json_decref(j);
  return port;
}

int tu_cluster_tso_leader(const char *dir) {
  char root[300];
  pc_error_t err;
  pc_tso_locator_t *l = pc_tso_locator_create(
      &(pc_zk_options_t){tu_zk_shared(), cluster_root(dir, root, sizeof root), NULL, ZK_SESSION_MS},
      NULL, 20000, &err);
  if (!l) die("tu_cluster_tso_leader", &err);
  int found = -1;
  for (int i = 0; i < 2000 && found < 0; i++) { /* up to ~20 s */
    char leader[300] = "";
    pc_tso_locator_members(l, leader, sizeof leader, NULL, 0);
    const char *colon = strrchr(leader, ':');
    int port = colon ? atoi(colon + 1) : -1;
    if (port > 0 && port == ready_tso_port(dir, "tso")) found = 0;
    else if (port > 0 && port == ready_tso_port(dir, "tso-standby")) found = 1;
    else nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
  }
  pc_tso_locator_destroy(l);
  if (found < 0) die("tu_cluster_tso_leader: no oracle of the cluster leads", NULL);
  return found;
}

static void cluster_start(const char *dir) {
  char cfg[4200], text[4096], tablets[1024], zk[600], log[16];
  int zero[3] = {0, 0, 0}, ports[3];
  pid_t pids[CLUSTER_MAX_PIDS];
  int np = 0;
  zk_json(dir, zk, sizeof zk);
  /* every role on an ephemeral port, all at once: the tablets find the
   * oracle's leader in ZooKeeper, not in the file */
  tablets_json(tablets, sizeof tablets, zero);
  snprintf(cfg, sizeof cfg, "%s/daemons0.json", dir);
  snprintf(text, sizeof text,
           "{\"data_dir\":\"%s/data\",\"log\":{\"level\":\"%s\"}," DAEMON_STORE "%s"
           "\"tso\":{\"listen\":\"127.0.0.1:0\"},\"tablets\":%s}\n",
           dir, daemon_log_level(), zk, tablets);
  write_file(cfg, text);
  pids[np++] = spawn_daemon(dir, cfg, "tso", NULL, "tso");
  pids[np++] = spawn_daemon(dir, cfg, "tso", NULL, "tso-standby");
  const char *const *names = replicated() ? server_names : tablet_names;
  for (int i = 0; i < 3; i++) {
    snprintf(log, sizeof log, "tablet-%s", names[i]);
    pids[np++] = spawn_daemon(dir, cfg, "tablet", names[i], log);
  }
  /* the pids first, so that tu_rmtree stops them whatever happens next */
  snprintf(cfg, sizeof cfg, "%s/cluster.pids", dir);
  FILE *f = fopen(cfg, "w");
  if (!f) die(cfg, NULL);
  for (int i = 0; i < np; i++) fprintf(f, "%d\n", (int)pids[i]);
  fclose(f);
  int tso = ready_port(dir, "tso", "tso", NULL, pids[0]);
  (void)ready_port(dir, "tso-standby", "tso", NULL, pids[1]);
  for (int i = 0; i < 3; i++) {
    snprintf(log, sizeof log, "tablet-%s", names[i]);
    ports[i] = ready_port(dir, log, NULL, names[i], pids[2 + i]);
  }
  tablets_json(tablets, sizeof tablets, ports);
  /* what clients read, and what a restarted tablet reads to come back on its port */
  snprintf(cfg, sizeof cfg, "%s/cluster.json", dir);
  snprintf(text, sizeof text,
           "{\"data_dir\":\"%s/data\",\"log\":{\"level\":\"%s\"}," DAEMON_STORE "%s"
           "\"tso\":{\"listen\":\"127.0.0.1:%d\"},\"tablets\":%s}\n",
           dir, daemon_log_level(), zk, tso, tablets);
  write_file(cfg, text);
}

/* Stops the daemons of dir's cluster, if it has one: SIGTERM, then a bounded wait. */
static void cluster_stop(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.pids", dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  int pid;
  while (fscanf(f, "%d", &pid) == 1) {
    if (pid <= 0) continue; /* a role this cluster does not run */
    kill(pid, SIGTERM);
    for (int i = 0; i < 1000; i++) { /* up to ~10 s, then SIGKILL */
      if (waitpid(pid, NULL, WNOHANG) == pid || (kill(pid, 0) != 0 && errno == ESRCH)) break;
      struct timespec t = {0, 10 * 1000000L};
      nanosleep(&t, NULL);
      if (i == 999) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    }
  }
  fclose(f);
  remove(path);
}

int tu_cluster_mode(void) { return cluster_cli() != NULL; }

static pc_db_t *cluster_open(const char *dir, uint32_t lock_ttl_ms, int one_phase_commit);

char *tu_cluster_mkdtemp(const char *tag, const char *cli) {
  return tu_cluster_mkdtemp_session(tag, cli, 0);
}

char *tu_cluster_mkdtemp_session(const char *tag, const char *cli, uint32_t session_ms) {
  forced_cli = cli;
  forced_session_ms = session_ms;
  return tu_mkdtemp(tag);
}

pc_db_t *tu_cluster_open(const char *dir, uint32_t lock_ttl_ms) {
  return cluster_open(dir, lock_ttl_ms, 1);
}

static void set_pid(const char *dir, int index, pid_t pid) {
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.pids", dir);
  int pids[CLUSTER_MAX_PIDS], n = 0;
  FILE *f = fopen(path, "r");
  while (f && n < CLUSTER_MAX_PIDS && fscanf(f, "%d", &pids[n]) == 1) n++;
  if (f) fclose(f);
  if (index < n) pids[index] = (int)pid;
  f = fopen(path, "w");
  if (!f) die(path, NULL);
  for (int i = 0; i < n; i++) fprintf(f, "%d\n", pids[i]);
  fclose(f);
}

static int cluster_restart(const char *dir, int index, int moved) {
  static const char *const verbs[] = {"tso", "tso", "tablet", "tablet", "tablet"};
  const char *const *logs = (const char *const[]){"tso", "tso-standby", "tablet-t1", "tablet-t2",
                                                   "tablet-t3"};
  static const char *const slogs[] = {"tso", "tso-standby", "tablet-s1", "tablet-s2", "tablet-s3"};
  if (index < 0 || index > 4) die("tu_cluster_restart: no such daemon in this cluster", NULL);
  const char *const *names = replicated() ? server_names : tablet_names;
  if (replicated()) logs = slogs;
  char cfg[4200], ready[4200];
  /* an elected oracle may come back on any port; a tablet on its own, or,
   * moved, on any (clients find it in ZooKeeper) */
  snprintf(cfg, sizeof cfg, "%s/%s", dir,
           index < 2 || moved ? "daemons0.json" : "cluster.json");
  snprintf(ready, sizeof ready, "%s/%s.ready", dir, logs[index]);
  remove(ready);
  pid_t pid = spawn_daemon(dir, cfg, verbs[index], index >= 2 ? names[index - 2] : NULL,
                           logs[index]);
  set_pid(dir, index, pid);
  if (index < 2) return ready_port(dir, logs[index], "tso", NULL, pid);
  return ready_port(dir, logs[index], NULL, names[index - 2], pid);
}

void tu_cluster_restart(const char *dir, int index) { (void)cluster_restart(dir, index, 0); }

int tu_cluster_restart_moved(const char *dir, int index) {
  return cluster_restart(dir, index, 1);
}

pid_t tu_cluster_pid(const char *dir, int index) {
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.pids", dir);
  FILE *f = fopen(path, "r");
  int pid = -1;
  for (int i = 0; f && i <= index; i++)
    if (fscanf(f, "%d", &pid) != 1) pid = -1;
  if (f) fclose(f);
  return pid;
}

/* PERCOLATOR_TEST_LAZY=1: every database tu_open* opens takes start
 * timestamps lazily (pc_options_set_lazy_start), so the same tests check that mode. */
static int test_lazy(void) {
  const char *p = getenv("PERCOLATOR_TEST_LAZY");
  return p && *p == '1';
}

/* Opens a client of dir's cluster with these store options. */
static pc_db_t *cluster_open(const char *dir, uint32_t lock_ttl_ms, int one_phase_commit) {
  char base[4200], cfg[4300];
  snprintf(base, sizeof base, "%s/cluster.json", dir);
  json_t *j = json_load_file(base, 0, NULL);
  if (!j) die("cluster.json (was the directory made by tu_mkdtemp?)", NULL);
  json_t *store = json_object();
  json_object_set_new(store, "lock_ttl_ms", json_integer(lock_ttl_ms ? lock_ttl_ms : 3000));
  json_object_set_new(store, "one_phase_commit", json_boolean(one_phase_commit));
  json_object_set_new(store, "lazy_start", json_boolean(test_lazy()));
  json_object_set_new(j, "store", store);
  snprintf(cfg, sizeof cfg, "%s/client-%u-%d.json", dir, lock_ttl_ms, one_phase_commit);
  if (json_dump_file(j, cfg, 0) != 0) die(cfg, NULL);
  json_decref(j);
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(cfg, &err);
  if (!db) die("pc_db_open_config", &err);
  return db;
}

uint64_t tu_dead_session(const char *dir) {
  if (!cluster_cli()) return 0xdead5e55ull; /* embedded: any session but the opener's is dead */
  pc_db_t *db = cluster_open(dir, 0, 1);
  uint64_t s = pc_db_session(db);
  pc_db_close(db); /* closes the session */
  if (s == 0) die("tu_dead_session: the cluster gave no session", NULL);
  return s;
}

void tu_make_certs(const char *dir, const char *names) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "bash '%s/tests/certs.sh' '%s' %s", PC_SOURCE_DIR, dir, names);
  if (system(cmd) != 0) die("making test certificates with tests/certs.sh (openssl)", NULL);
}

static uint64_t tu_ts = 1000000;

pc_status_t tu_ts_next(void *ctx, uint64_t *ts, pc_error_t *err) {
  (void)ctx;
  (void)err;
  *ts = __atomic_add_fetch(&tu_ts, 1, __ATOMIC_SEQ_CST);
  return PC_OK;
}

uint64_t tu_ts_last(void) { return __atomic_load_n(&tu_ts, __ATOMIC_SEQ_CST); }

char *tu_mkdtemp(const char *tag) {
  const char *base = getenv("TMPDIR");
  char *path;
  if (asprintf(&path, "%s/pc-%s-XXXXXX", base && *base ? base : "/tmp", tag) < 0) abort();
  if (!mkdtemp(path)) die("mkdtemp", NULL);
  if (cluster_cli()) cluster_start(path);
  return path;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

void tu_rmtree(char *path) {
  if (!path) return;
  if (cluster_cli()) cluster_stop(path);
  const char *keep = getenv("PERCOLATOR_TEST_KEEP"); /* for a look at the daemons' logs */
  if (keep && *keep == '1') fprintf(stderr, "kept %s (PERCOLATOR_TEST_KEEP)\n", path);
  else nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(path);
}

static pc_db_t *open_embedded(const char *dir, uint32_t lock_ttl_ms) {
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  if (lock_ttl_ms) pc_options_set_lock_ttl_ms(o, lock_ttl_ms);
  pc_options_set_gc_interval_ms(o, 0); /* tests collect garbage when they say so */
  pc_options_set_lazy_start(o, test_lazy());
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  if (!db) die("pc_db_open", &err);
  return db;
}

pc_db_t *tu_open(const char *dir, uint32_t lock_ttl_ms) {
  if (cluster_cli()) return cluster_open(dir, lock_ttl_ms, 1);
  return open_embedded(dir, lock_ttl_ms);
}

char *tu_get(pc_txn_t *txn, const char *table, const char *row, const char *col) {
  char *v = NULL;
  size_t n = 0;
  pc_error_t err;
  pc_status_t st = pc_txn_get(txn, table, row, strlen(row), col, strlen(col), &v, &n, &err);
  if (st == PC_NOT_FOUND) return NULL;
  if (st != PC_OK) die("pc_txn_get", &err);
  char *s = malloc(n + 1);
  if (!s) abort();
  memcpy(s, v, n);
  s[n] = '\0';
  pc_free(v);
  return s;
}

void tu_set(pc_txn_t *txn, const char *table, const char *row, const char *col, const char *val) {
  pc_error_t err;
  if (pc_txn_set(txn, table, row, strlen(row), col, strlen(col), val, strlen(val), &err) != PC_OK)
    die("pc_txn_set", &err);
}

/* ---- helpers added for the protocol, crash and isolation tests ---------- */

pc_db_t *tu_open_ex(const char *dir, uint32_t lock_ttl_ms, int one_phase_commit) {
  if (cluster_cli()) return cluster_open(dir, lock_ttl_ms, one_phase_commit);
  pc_options_t *o = pc_options_create();
  if (!o) abort();
  pc_options_set_create_if_missing(o, 1);
  if (lock_ttl_ms) pc_options_set_lock_ttl_ms(o, lock_ttl_ms);
  pc_options_set_one_phase_commit(o, one_phase_commit);
  pc_options_set_lazy_start(o, test_lazy());
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  if (!db) die("pc_db_open", &err);
  return db;
}

typedef struct raw_count {
  pc_cell_kind_t kind;
  size_t n;
} raw_count_t;

static int raw_count_cell(void *ctx, const pc_raw_cell_t *cell) {
  raw_count_t *c = ctx;
  if (cell->kind == c->kind) c->n++;
  return 0;
}

size_t tu_raw_count(pc_db_t *db, const char *table, pc_cell_kind_t kind) {
  raw_count_t c = {kind, 0};
  pc_error_t err;
  if (pc_db_raw_scan(db, table, NULL, 0, NULL, 0, raw_count_cell, &c, &err) != PC_OK)
    die("pc_db_raw_scan", &err);
  return c.n;
}

void tu_put_rows(pc_db_t *db, const char *table, const char *const *rows, size_t n,
                 const char *col, const char *val) {
  pc_error_t err;
  pc_txn_t *txn = pc_txn_begin(db, &err);
  if (!txn) die("pc_txn_begin", &err);
  for (size_t i = 0; i < n; i++) tu_set(txn, table, rows[i], col, val);
  if (pc_txn_commit(txn, &err) != PC_OK) die("pc_txn_commit", &err);
  pc_txn_destroy(txn);
}
