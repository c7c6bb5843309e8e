/* test_cluster_zk.c — a cluster coordinated through a 3-server ZooKeeper
 * ensemble, under bank transfers from three client processes: two `percolator
 * tso` processes (a leader and a standby, with a new standby started after
 * every kill), three `percolator tablet` servers, all started by the
 * playground (playground/playground.h) on the test's ensemble, and clients
 * that find the oracle's leader and each other's liveness in ZooKeeper.
 *
 * In order: the oracle's leader SIGKILLed five times; the leader SIGSTOPped
 * for twice the session timeout (after SIGCONT it serves nothing); the
 * ZooKeeper leader killed (no live client's lock is judged dead: no commit is
 * aborted); two of three ZooKeeper servers stopped (no commit completes; all
 * resume when they return); a client killed between its prewrite and its
 * commit (a reader gets past its locks within the session timeout, while
 * their lease is far longer). After each failure every client commits again,
 * each commit bounded by its transaction timeout. At the end the total holds
 * and every acknowledged commit is there: each transfer also increments its
 * client's counter, which must equal the client's acknowledged commits (plus
 * at most its commits of unknown outcome). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <percolator/percolator.h>

#include "base/error.h"
#include "core/failpoint.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "playground/playground.h"
#include "tests/testutil.h"
#include "tests/zkharness.h"
#include "tso/tso_client.h"

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SESSION_MS 4000u
#define NACCOUNTS 20
#define START_BALANCE 100
#define NCLIENTS 3

static tu_zk_t *ensemble;
static const char *self_exe, *cli;
static char dir[256];

static void sleep_ms(unsigned ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* ---- a bank client process ------------------------------------------------- */

/* Per client, shared with the test through a file: commits acknowledged
 * (PC_OK), of unknown outcome (PC_UNKNOWN), aborted by a resolver
 * (PC_ABORTED), and the stop flag. */
typedef struct shared {
  _Atomic uint64_t ok, unknown, aborted;
  _Atomic int stop;
} shared_t;

static shared_t *map_shared(const char *path, int create) {
  int fd = open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0644);
  if (fd < 0 || (create && ftruncate(fd, 4096) != 0)) return NULL;
  shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return s == MAP_FAILED ? NULL : s;
}

/* Transfers between random accounts until told to stop; each transfer also
 * increments row c<id> of table "clients". */
static int bank_main(const char *config, const char *shared_path, int id) {
  shared_t *sh = map_shared(shared_path, 0);
  pc_error_t err;
  pc_db_t *db = sh ? pc_db_open_config(config, &err) : NULL;
  if (!db) {
    fprintf(stderr, "bank %d: %s\n", id, sh ? err.text : "no shared file");
    return 1;
  }
  char counter[16];
  snprintf(counter, sizeof counter, "c%d", id);
  unsigned seed = (unsigned)getpid();
  while (!atomic_load(&sh->stop)) {
    int a = rand_r(&seed) % NACCOUNTS, b = rand_r(&seed) % NACCOUNTS;
    if (a == b) continue;
    char ra[16], rb[16];
    snprintf(ra, sizeof ra, "acct%02d", a);
    snprintf(rb, sizeof rb, "acct%02d", b);
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t) {
      sleep_ms(20);
      continue;
    }
    pc_txn_set_timeout_ms(t, SESSION_MS + 15000); /* spans a failover */
    long va, vb, vc;
    pc_status_t st = tu_get_long(t, "bank", ra, &va, &err);
    if (st == PC_OK) st = tu_get_long(t, "bank", rb, &vb, &err);
    if (st == PC_OK) st = tu_get_long(t, "clients", counter, &vc, &err);
    if (st == PC_OK) st = tu_set_long(t, "bank", ra, va - 1, &err);
    if (st == PC_OK) st = tu_set_long(t, "bank", rb, vb + 1, &err);
    if (st == PC_OK) st = tu_set_long(t, "clients", counter, vc + 1, &err);
    if (st == PC_OK) {
      st = pc_txn_commit(t, &err);
      if (st == PC_OK) atomic_fetch_add(&sh->ok, 1);
      else if (st == PC_UNKNOWN) atomic_fetch_add(&sh->unknown, 1);
      else if (st == PC_ABORTED) atomic_fetch_add(&sh->aborted, 1);
    }
    pc_txn_destroy(t);
    if (st != PC_OK && st != PC_CONFLICT && st != PC_LOCKED)
      fprintf(stderr, "bank %d: %s: %s\n", id, pc_status_name(st), err.text);
  }
  pc_db_close(db);
  return 0;
}

/* A client that prewrites two accounts and exits before its commit point:
 * its locks stay, and only its session's end can let readers past them
 * before their lease (a minute here) runs out. The bank clients still run,
 * so an attempt may meet their locks or lose a conflict to them: it tries
 * again (at most 100 times), saying why on stderr. */
static int crash_main(const char *config) {
  pc_error_t err;
  if (pc_failpoints_configure("txn.commit.before_primary=exit(7)", &err) != PC_OK) return 1;
  pc_db_t *db = pc_db_open_config(config, &err);
  if (!db) {
    fprintf(stderr, "crash: open: %s\n", err.text);
    return 1;
  }
  for (int attempt = 0; attempt < 100; attempt++) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    long va, vb;
    pc_status_t st = PC_OK;
    if (!t || (st = tu_get_long(t, "bank", "acct00", &va, &err)) != PC_OK ||
        (st = tu_get_long(t, "bank", "acct19", &vb, &err)) != PC_OK ||
        (st = tu_set_long(t, "bank", "acct00", va - 5, &err)) != PC_OK ||
        (st = tu_set_long(t, "bank", "acct19", vb + 5, &err)) != PC_OK ||
        (st = pc_txn_commit(t, &err)) != PC_OK) /* exits at the failpoint */
      fprintf(stderr, "crash: attempt %d: %s: %s\n", attempt, pc_status_name(st), err.text);
    pc_txn_destroy(t);
    sleep_ms(50);
  }
  return 2;
}

/* ---- the cluster ------------------------------------------------------------- */

/* The cluster's daemons, started and stopped by the playground
 * (playground/playground.h) on the test's ensemble. */
static pc_pg_t *pg;

/* The test's own processes (bank clients, the crashing client), output in
 * DIR/LOG.log. */
static pid_t spawn(const char *const *args, const char *log) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) abort();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.log", dir, log);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(args[0], (char *const *)args);
    _exit(127);
  }
  return pid;
}

/* Two oracles (`percolator tso`) and three tablet servers (`percolator
 * tablet`, t1 ["", acct07), t2 [acct07, acct14), t3 [acct14, "")) under
 * /percolator/bank; clients' locks have a lease of lock_ttl_ms. */
static void start_cluster(long lock_ttl_ms) {
  static const char *const splits[] = {"acct07", "acct14"};
  char sub[300];
  snprintf(sub, sizeof sub, "%s/cluster", dir);
  json_t *extra = json_pack("{s:{s:s}, s:{s:I, s:I}, s:{s:I}, s:{s:I}}", "log", "level", "info",
                            "store", "lock_ttl_ms", (json_int_t)lock_ttl_ms, "timeout_ms",
                            (json_int_t)(SESSION_MS + 15000), "zookeeper", "session_timeout_ms",
                            (json_int_t)SESSION_MS, "tso", "window_ms",
                            (json_int_t)(4 * SESSION_MS));
  assert_non_null(extra);
  pc_pg_options_t o = {.cli = cli, .dir = sub, .zk_connect = tu_zk_connect(ensemble),
                       .zk_root = "/percolator/bank", .oracles = 2, .splits = splits,
                       .nsplits = 2, .extra = extra};
  pc_error_t err;
  pg = pc_pg_create(&o, &err);
  json_decref(extra);
  if (!pg) fail_msg("the cluster: %s", err.text);
  if (pc_pg_start(pg, 90000, &err) != PC_OK) fail_msg("starting the cluster: %s", err.text);
}

static int port_of(const char *ep) {
  const char *colon = strrchr(ep, ':');
  return colon ? atoi(colon + 1) : 0;
}

/* The playground's index of the oracle that leads (its election node is first). */
static int tso_leader(void) {
  pc_error_t err;
  pc_zk_t *zk =
      pc_zk_open(&(pc_zk_options_t){tu_zk_connect(ensemble), "/percolator/bank", NULL, SESSION_MS, NULL},
                 30000, NULL, &err);
  if (!zk) fail_msg("%s", err.text);
  int found = -1;
  for (int attempt = 0; attempt < 3000 && found < 0; attempt++) {
    char **names = NULL, *data = NULL, rel[300];
    size_t n = 0, len;
    if (pc_zk_children(zk, "tso/election", NULL, &names, &n, 5000, &err) == PC_OK && n) {
      snprintf(rel, sizeof rel, "tso/election/%s", names[0]);
      if (pc_zk_get(zk, rel, NULL, &data, &len, NULL, 5000, &err) == PC_OK) {
        int port = atoi(strrchr(data, ':') + 1);
        for (size_t i = 0; i < pc_pg_role_count(pg); i++) {
          const pc_pg_role_t *r = pc_pg_role(pg, i);
          if (r->kind == PC_PG_TSO && r->pid > 0 && port_of(r->listen) == port) found = (int)i;
        }
        free(data);
      }
    }
    pc_zk_free_names(names, n);
    if (found < 0) sleep_ms(10);
  }
  pc_zk_close(zk);
  if (found < 0) fail_msg("no oracle leads");
  return found;
}

static shared_t *clients[NCLIENTS];
static pid_t client_pids[NCLIENTS];

static uint64_t total_ok(void) {
  uint64_t s = 0;
  for (int i = 0; i < NCLIENTS; i++) s += atomic_load(&clients[i]->ok);
  return s;
}

/* Waits until every client has `more` acknowledged commits beyond its count
 * now (each commit bounded by its timeout); returns how long that took. */
static uint64_t wait_commits(uint64_t more, const char *after) {
  uint64_t base[NCLIENTS];
  for (int i = 0; i < NCLIENTS; i++) base[i] = atomic_load(&clients[i]->ok);
  uint64_t t0 = pc_now_mono_ms();
  for (int polls = 0; polls < 9000; polls++) {
    int all = 1;
    for (int i = 0; i < NCLIENTS; i++) all &= atomic_load(&clients[i]->ok) >= base[i] + more;
    if (all) return pc_now_mono_ms() - t0;
    sleep_ms(10);
  }
  fail_msg("the clients stopped committing after %s", after);
  return 0;
}

static uint64_t total_aborted(void) {
  uint64_t s = 0;
  for (int i = 0; i < NCLIENTS; i++) s += atomic_load(&clients[i]->aborted);
  return s;
}

static pc_db_t *open_client(void) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(pc_pg_client_config(pg), &err);
  if (!db) fail_msg("%s", err.text);
  return db;
}

static void test_bank_through_failures(void **state) {
  (void)state;
  pc_error_t err;
  /* a lease of a minute, so that only liveness can resolve a killed
   * client's locks within a reader's timeout */
  start_cluster(60000);

  pc_db_t *db = open_client();
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  for (int i = 0; i < NACCOUNTS; i++) {
    char row[16];
    snprintf(row, sizeof row, "acct%02d", i);
    assert_int_equal(tu_set_long(t, "bank", row, START_BALANCE, &err), PC_OK);
  }
  if (pc_txn_commit(t, &err) != PC_OK) fail_msg("the accounts' first commit: %s", err.text);
  pc_txn_destroy(t);

  const char *cfg = pc_pg_client_config(pg);
  for (int i = 0; i < NCLIENTS; i++) {
    char path[512], id[16], log[24];
    snprintf(path, sizeof path, "%s/shared%d", dir, i);
    clients[i] = map_shared(path, 1);
    assert_non_null(clients[i]);
    snprintf(id, sizeof id, "%d", i);
    snprintf(log, sizeof log, "bank%d", i);
    const char *args[] = {self_exe, "bank", cfg, path, id, NULL};
    client_pids[i] = spawn(args, log);
  }
  wait_commits(5, "the start");

  /* 1. the oracle's leader SIGKILLed five times, a new standby started
   * in its place each time */
  int leader = tso_leader();
  for (int k = 0; k < 5; k++) {
    pc_pg_signal(pg, (size_t)leader, SIGKILL);
    if (pc_pg_restart(pg, (size_t)leader, 0, 90000, &err) != PC_OK)
      fail_msg("a new standby: %s", err.text);
    uint64_t ms = wait_commits(3, "the oracle's leader was killed");
    fprintf(stderr, "oracle leader killed: every client committed again within %" PRIu64 " ms\n",
            ms);
    leader = tso_leader();
  }

  /* 2. the leader SIGSTOPped for twice the session timeout */
  int stopped_port = port_of(pc_pg_role(pg, (size_t)leader)->listen);
  pc_pg_signal(pg, (size_t)leader, SIGSTOP);
  uint64_t ms = wait_commits(3, "the oracle's leader was stopped");
  fprintf(stderr, "oracle leader stopped: every client committed again within %" PRIu64 " ms\n",
          ms);
  if (ms < 2 * SESSION_MS) sleep_ms((unsigned)(2 * SESSION_MS - ms));
  pc_pg_signal(pg, (size_t)leader, SIGCONT);
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", (uint16_t)stopped_port, NULL, &err);
  for (int i = 0; i < 20; i++) {
    uint64_t ts;
    if (pc_tso_remote_fetch(c, 1, 2000, &ts, &err) == PC_OK)
      fail_msg("the oracle paused for two session timeouts served %" PRIu64, ts);
    sleep_ms(50);
  }
  pc_rpc_client_destroy(c);

  /* 3. the ZooKeeper leader killed: sessions survive, no lock of a live
   * client is rolled back (its commit would be PC_ABORTED) */
  uint64_t aborted = total_aborted();
  int zl = tu_zk_leader(ensemble);
  assert_true(zl >= 0);
  tu_zk_kill(ensemble, zl);
  ms = wait_commits(3, "the ZooKeeper leader was killed");
  fprintf(stderr, "zookeeper leader killed: every client committed again within %" PRIu64 " ms\n",
          ms);
  tu_zk_restart(ensemble, zl);
  assert_true(tu_zk_wait_serving(ensemble, zl, 90000));
  wait_commits(3, "the ZooKeeper server returned");
  assert_int_equal(total_aborted(), aborted);

  /* 4. two of three servers stopped: once the oracle's lease ran out and
   * the commits in flight ended, none completes; all resume afterwards */
  int down[2], nd = 0;
  for (int i = 0; i < 3 && nd < 2; i++)
    if (i != zl) down[nd++] = i;
  tu_zk_kill(ensemble, down[0]);
  tu_zk_kill(ensemble, down[1]);
  sleep_ms(SESSION_MS);
  uint64_t before = total_ok();
  sleep_ms(SESSION_MS);
  assert_int_equal(total_ok(), before);
  tu_zk_restart(ensemble, down[0]);
  tu_zk_restart(ensemble, down[1]);
  ms = wait_commits(3, "the quorum returned");
  fprintf(stderr, "quorum back: every client committed again within %" PRIu64 " ms\n", ms);

  /* 5. a client killed between prewrite and commit: a reader gets past its
   * locks once its session is gone, long before their lease */
  const char *cargs[] = {self_exe, "crash", cfg, NULL};
  pid_t crasher = spawn(cargs, "crash");
  int status = 0;
  waitpid(crasher, &status, 0);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, SESSION_MS + 15000);
  long v;
  uint64_t t0 = pc_now_mono_ms();
  if (tu_get_long(t, "bank", "acct00", &v, &err) != PC_OK) fail_msg("read: %s", err.text);
  fprintf(stderr, "killed client's locks passed after %" PRIu64 " ms\n", pc_now_mono_ms() - t0);
  pc_txn_destroy(t);

  /* the end: the total holds, and every acknowledged commit is there */
  for (int i = 0; i < NCLIENTS; i++) atomic_store(&clients[i]->stop, 1);
  for (int i = 0; i < NCLIENTS; i++) {
    waitpid(client_pids[i], &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  long total = 0;
  for (int i = 0; i < NACCOUNTS; i++) {
    char row[16];
    snprintf(row, sizeof row, "acct%02d", i);
    assert_int_equal(tu_get_long(t, "bank", row, &v, &err), PC_OK);
    total += v;
  }
  assert_int_equal(total, NACCOUNTS * START_BALANCE);
  for (int i = 0; i < NCLIENTS; i++) {
    char row[16];
    snprintf(row, sizeof row, "c%d", i);
    assert_int_equal(tu_get_long(t, "clients", row, &v, &err), PC_OK);
    uint64_t ok = atomic_load(&clients[i]->ok), unknown = atomic_load(&clients[i]->unknown);
    if ((uint64_t)v < ok || (uint64_t)v > ok + unknown)
      fail_msg("client %d: %ld transfers stored, %" PRIu64 " acknowledged, %" PRIu64 " unknown",
               i, v, ok, unknown);
  }
  fprintf(stderr, "%" PRIu64 " transfers acknowledged, total %ld\n", total_ok(), total);
  pc_txn_destroy(t);
  pc_db_close(db);
}

static int setup(void **state) {
  (void)state;
  cli = getenv("PERCOLATOR_CLI");
  if (!cli || !*cli) {
    fprintf(stderr, "PERCOLATOR_CLI must name the percolator binary\n");
    return -1;
  }
  ensemble = tu_zk_start(3);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pc-cluster-zk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  pc_pg_free(pg); /* SIGTERM to every daemon, waited for */
  pg = NULL;
  tu_zk_stop(ensemble);
  if (!getenv("PERCOLATOR_TEST_KEEP")) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 1;
  exe[n] = '\0';
  self_exe = exe;
  if (argc == 5 && strcmp(argv[1], "bank") == 0) return bank_main(argv[2], argv[3], atoi(argv[4]));
  if (argc == 3 && strcmp(argv[1], "crash") == 0) return crash_main(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bank_through_failures),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
