/* testutil.c — temporary directories and small transaction wrappers for the
 * test programs (see testutil.h). */
#include "tests/testutil.h"
#include "tests/zkharness.h"
#include "playground/playground.h"
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
 * stopped by tu_rmtree, through the playground's code (playground/), as
 * `percolator playground` starts its own; tu_open then connects to it
 * through the client configuration it writes (DIR/cluster.json) instead of
 * opening the embedded store, so the same tests run unchanged against it.
 * One private ZooKeeper server (tests/zkharness.c) serves every test
 * directory of the program, each cluster under a root of its own
 * (/percolator/<directory name>), so a program pays one server start. The
 * tablets split rows at "acct25" and "r2", so the rows the tests use ("a",
 * "acct00".."acct49", "b", "k0".., "r0".."r3", "x", "y") spread over all
 * three. The daemons' logs are DIR/logs/NAME.log, their ready files
 * DIR/run/NAME.ready (NAME: tso-1, tso-2, t1, t2, t3). */

#define ZK_SESSION_MS 4000
#define CLUSTER_WAIT_MS 60000 /* ZooKeeper sessions on a loaded machine */
#define MAX_CLUSTERS 64

static const char *forced_cli; /* set by tu_cluster_mkdtemp */
static uint32_t forced_session_ms; /* set by tu_cluster_mkdtemp_session (0: ZK_SESSION_MS) */

static const char *cluster_cli(void) {
  if (forced_cli) return forced_cli;
  const char *p = getenv("PERCOLATOR_TEST_CLUSTER");
  return p && *p ? p : NULL;
}

/* The clusters of this program, by test directory. */
static struct {
  char *dir;
  pc_pg_t *pg;
} clusters[MAX_CLUSTERS];

static pc_pg_t *cluster_of(const char *dir) {
  for (int i = 0; i < MAX_CLUSTERS; i++)
    if (clusters[i].dir && strcmp(clusters[i].dir, dir) == 0) return clusters[i].pg;
  return NULL;
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

int tu_cluster_tso_leader(const char *dir) {
  pc_pg_t *pg = cluster_of(dir);
  if (!pg) die("tu_cluster_tso_leader: no cluster in this directory", NULL);
  char root[300];
  pc_error_t err;
  pc_tso_locator_t *l = pc_tso_locator_create(
      &(pc_zk_options_t){tu_zk_shared(), cluster_root(dir, root, sizeof root), NULL, ZK_SESSION_MS, NULL},
      NULL, 20000, &err);
  if (!l) die("tu_cluster_tso_leader", &err);
  int found = -1;
  for (int i = 0; i < 2000 && found < 0; i++) { /* up to ~20 s */
    char leader[300] = "";
    pc_tso_locator_members(l, leader, sizeof leader, NULL, 0);
    for (int k = 0; k < 2 && leader[0]; k++)
      if (strcmp(pc_pg_role(pg, (size_t)k)->listen, leader) == 0) found = k;
    if (found < 0) nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
  }
  pc_tso_locator_destroy(l);
  if (found < 0) die("tu_cluster_tso_leader: no oracle of the cluster leads", NULL);
  return found;
}

/* The tests choose their clients' lock TTLs (up to an hour, for locks that
 * must outlive a test's reads): the tablets' cap on them (store.lock_ttl_ms)
 * is set above every one. */
/* PERCOLATOR_TEST_REPLICAS=3: the cluster's tablets are Raft groups, a
 * replica of each on each of three servers (s1, s2, s3; their logs
 * DIR/logs/sN.log), instead of a server per tablet. */
static int replicated(void) {
  const char *p = getenv("PERCOLATOR_TEST_REPLICAS");
  return p && atoi(p) > 1 ? atoi(p) : 0;
}

/* The daemons' log level: PERCOLATOR_TEST_LOG (e.g. "info"), "warn" by default. */
static const char *daemon_log_level(void) {
  const char *l = getenv("PERCOLATOR_TEST_LOG");
  return l && (!strcmp(l, "debug") || !strcmp(l, "info") || !strcmp(l, "error")) ? l : "warn";
}

static void cluster_start(const char *dir) {
  static const char *const splits[] = {"acct25", "r2"};
  char root[300], extra_text[400];
  snprintf(extra_text, sizeof extra_text,
           "{\"log\":{\"level\":\"%s\"},\"store\":{\"lock_ttl_ms\":3600000},"
           "\"zookeeper\":{\"session_timeout_ms\":%d}%s}",
           daemon_log_level(), forced_session_ms ? (int)forced_session_ms : ZK_SESSION_MS,
           replicated() ? ",\"replication\":{\"election_timeout_ms\":1000}" : "");
  json_t *extra = json_loads(extra_text, 0, NULL);
  pc_pg_options_t o = {.cli = cluster_cli(), .dir = dir, .zk_connect = tu_zk_shared(),
                       .zk_root = cluster_root(dir, root, sizeof root), .oracles = 2,
                       .splits = splits, .nsplits = 2, .extra = extra,
                       .servers = replicated() ? 3 : 0, .replicas = replicated()};
  pc_error_t err;
  pc_pg_t *pg = pc_pg_create(&o, &err);
  json_decref(extra);
  if (!pg) die("the test cluster's description", &err);
  int slot = 0;
  while (slot < MAX_CLUSTERS && clusters[slot].dir) slot++;
  if (slot == MAX_CLUSTERS) die("more than 64 test clusters at once", NULL);
  clusters[slot].dir = strdup(dir);
  clusters[slot].pg = pg;
  if (pc_pg_start(pg, CLUSTER_WAIT_MS, &err) != PC_OK) die("starting the test cluster", &err);
  /* the pids, for tests that stop daemons themselves (see tu_rmtree) */
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.pids", dir);
  FILE *f = fopen(path, "w");
  if (!f) die(path, NULL);
  for (size_t i = 0; i < pc_pg_role_count(pg); i++) fprintf(f, "%d\n", (int)pc_pg_role(pg, i)->pid);
  fclose(f);
}

/* Stops dir's cluster, if it has one. A test that stopped and reaped every
 * daemon itself removes DIR/cluster.pids, so that their (reusable) pids are
 * not signalled. */
static void cluster_stop(const char *dir) {
  for (int i = 0; i < MAX_CLUSTERS; i++) {
    if (!clusters[i].dir || strcmp(clusters[i].dir, dir) != 0) continue;
    char path[4200];
    snprintf(path, sizeof path, "%s/cluster.pids", dir);
    if (access(path, F_OK) != 0)
      for (size_t k = 0; k < pc_pg_role_count(clusters[i].pg); k++)
        pc_pg_forget(clusters[i].pg, k);
    pc_pg_free(clusters[i].pg);
    remove(path);
    free(clusters[i].dir);
    clusters[i].dir = NULL;
    clusters[i].pg = NULL;
  }
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

static int cluster_restart(const char *dir, int index, int moved) {
  pc_pg_t *pg = cluster_of(dir);
  if (!pg || index < 0 || (size_t)index >= pc_pg_role_count(pg))
    die("tu_cluster_restart: no such daemon in this cluster", NULL);
  pc_error_t err;
  if (pc_pg_restart(pg, (size_t)index, moved, CLUSTER_WAIT_MS, &err) != PC_OK)
    die("tu_cluster_restart", &err);
  const char *ep = pc_pg_role(pg, (size_t)index)->listen;
  const char *colon = strrchr(ep, ':');
  return colon ? atoi(colon + 1) : -1;
}

void tu_cluster_restart(const char *dir, int index) { (void)cluster_restart(dir, index, 0); }

int tu_cluster_restart_moved(const char *dir, int index) {
  return cluster_restart(dir, index, 1);
}

pid_t tu_cluster_pid(const char *dir, int index) {
  pc_pg_t *pg = cluster_of(dir);
  if (!pg || index < 0 || (size_t)index >= pc_pg_role_count(pg)) return -1;
  pid_t pid = pc_pg_role(pg, (size_t)index)->pid;
  return pid > 0 ? pid : -1;
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

void tu_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    abort();
  }
}

char *tu_slurp(const char *path) {
  FILE *f = fopen(path, "r");
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) abort();
  while (f) {
    if (n + 4096 > cap && !(buf = realloc(buf, cap *= 2))) abort();
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    if (r == 0) break;
    n += r;
  }
  if (f) fclose(f);
  buf[n] = '\0';
  return buf;
}

pc_status_t tu_get_long(pc_txn_t *t, const char *table, const char *row, long *v,
                        pc_error_t *err) {
  char *val = NULL;
  size_t len = 0;
  pc_status_t st = pc_txn_get(t, table, row, strlen(row), "v", 1, &val, &len, err);
  if (st == PC_NOT_FOUND) {
    *v = 0;
    return PC_OK;
  }
  if (st == PC_OK) { /* the value is len bytes, not a C string */
    char buf[32];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), val);
    *v = strtol(buf, NULL, 10);
    pc_free(val);
  }
  return st;
}

pc_status_t tu_set_long(pc_txn_t *t, const char *table, const char *row, long v,
                        pc_error_t *err) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld", v);
  return pc_txn_set(t, table, row, strlen(row), "v", 1, buf, (size_t)n, err);
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
