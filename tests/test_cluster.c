/* test_cluster.c — behaviour of the cluster itself: real daemons (an oracle
 * and a standby elected in ZooKeeper, three tablet servers, each a
 * `percolator` process started by testutil on 127.0.0.1 with ephemeral
 * ports; one private ZooKeeper server for the program) and real client
 * processes.
 *
 *   - three client processes run bank transfers at once while the parent
 *     checks, through snapshot scans and gets, that the total never changes;
 *   - a client killed (SIGKILL) in the middle of its commit — after the
 *     primary's prewrite, after the secondaries', with commit_ts in hand, or
 *     just after the primary commit (failpoints stop it there) — is resolved
 *     by the next reader through its dead ZooKeeper session once the session
 *     has expired (its locks' TTL is 10 minutes, the reader waits at most
 *     20 s): rolled back, or rolled forward once the primary had committed;
 *   - a tablet server killed and restarted under a bank workload loses no
 *     acknowledged transfer and breaks no total; while it is down, requests
 *     to its rows fail at once naming the tablet and its rows (however long
 *     the caller's store timeout), transfers between the other tablets keep
 *     committing, and once it is back on another port the clients find it
 *     through ZooKeeper;
 *   - the same before ZooKeeper has ended the killed server's session (20 s
 *     there): its owner node still names it, yet requests to its rows fail at
 *     once, naming the tablet, its rows and the dead server, a commit with a
 *     row on it leaves nothing behind, and nothing acknowledged is lost;
 *   - a second server for a tablet that a live server holds is refused, and
 *     so is a configuration whose rows for a tablet differ from ZooKeeper's;
 *   - the oracle killed and restarted under load never goes back;
 *   - a tablet server down while a garbage-collection pass publishes its
 *     safe point starts again with that safe point (from ZooKeeper);
 *   - hostile bytes to every daemon (truncated frames, absurd lengths, bad
 *     versions, unknown ops, random bytes, malformed bodies of every op, slow
 *     senders) leave every daemon alive, serving and small, while a normal
 *     client keeps committing;
 *   - a daemon with a secret refuses a client with the wrong one, or none,
 *     clearly (PC_DENIED).
 *
 * Client processes are this program re-executed (/proc/self/exe) with a
 * "child-*" first argument, so no child inherits the parent's threads. Every
 * wait is bounded; every process started here is killed and reaped in the
 * test's teardown (and dies with this process through PR_SET_PDEATHSIG); a
 * test that passes also stops its daemons with SIGTERM and requires exit 0
 * and logs free of sanitizer reports. The `percolator` binary comes from
 * $PERCOLATOR_CLI (the tests are skipped without it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "core/failpoint.h"
#include "core/keys.h"
#include "config/config.h"
#include "lockservice/coord.h"
#include "tests/daemons.h"
#include "tests/testutil.h"

/* ---- small utilities ---------------------------------------------------- */

static char self_exe[4096];

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static const char *cli_path(void) {
  const char *p = getenv("PERCOLATOR_CLI");
  return p && *p ? p : NULL;
}

/* A test's directory (with its cluster) and the processes it started
 * (children, daemons of its own), which teardown kills and reaps. */
typedef struct fixture {
  char *dir;
  pid_t pids[32];
  int npids;
  uint64_t started_ms; /* for the wall-clock time printed by teardown */
} fixture_t;

static void fx_add_pid(fixture_t *fx, pid_t pid) {
  assert_true(fx->npids < 32);
  fx->pids[fx->npids++] = pid;
}

static void fx_forget_pid(fixture_t *fx, pid_t pid) {
  for (int i = 0; i < fx->npids; i++)
    if (fx->pids[i] == pid) fx->pids[i] = 0;
}

/* Waits at most timeout_ms for pid to exit; 1 and *status when it did. */
static int wait_exit(pid_t pid, long timeout_ms, int *status) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      if (status) *status = st;
      return 1;
    }
    if (r < 0 && errno != EINTR) return 1; /* not our child any more */
    if (now_ms() > end) return 0;
    sleep_ms(10);
  }
}

static void kill_and_reap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  wait_exit(pid, 10000, NULL);
}

/* Threads a test started, and the flags that stop them: a test that fails
 * while they run leaves through a longjmp, so teardown stops and joins them
 * (their state is static, never on the test's stack). */
static struct {
  pthread_t th[16];
  int n;
  atomic_int *stops[16];
  int nstops;
} tracked;

static void track_stop(atomic_int *flag) {
  assert_true(tracked.nstops < 16);
  tracked.stops[tracked.nstops++] = flag;
}

static void start_thread(void *(*fn)(void *), void *arg) {
  assert_true(tracked.n < 16);
  assert_int_equal(pthread_create(&tracked.th[tracked.n], NULL, fn, arg), 0);
  tracked.n++;
}

/* Raises every stop flag and joins every thread started. */
static void join_threads(void) {
  for (int i = 0; i < tracked.nstops; i++) atomic_store(tracked.stops[i], 1);
  for (int i = 0; i < tracked.n; i++) pthread_join(tracked.th[i], NULL);
  tracked.n = tracked.nstops = 0;
}

/* Waits at most timeout_ms until pid has exited, without reaping it: until
 * the test has recorded the daemon's successor, its pid stays a zombie that
 * no other process can take (so signals to it on failure paths are harmless). */
static int wait_dead_unreaped(pid_t pid, long timeout_ms) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
      return 1;
    if (now_ms() > end) return 0;
    sleep_ms(10);
  }
}

/* A fixture with a cluster of the CLI's daemons whose sessions last
 * session_ms (0: the test utilities' default). */
static int setup_with_session(void **state, uint32_t session_ms) {
  if (!cli_path()) {
    fprintf(stderr, "PERCOLATOR_CLI is not set: skipping (it names the percolator binary)\n");
    *state = NULL;
    return 0;
  }
  fixture_t *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  fx->started_ms = now_ms();
  fx->dir = session_ms ? tu_cluster_mkdtemp_session("cluster", cli_path(), session_ms)
                       : tu_cluster_mkdtemp("cluster", cli_path());
  *state = fx;
  return 0;
}

static int setup_cluster(void **state) { return setup_with_session(state, 0); }

/* A killed daemon's ZooKeeper nodes outlive it this long. */
#define LONG_SESSION_MS 20000

/* setup_cluster whose daemons' and clients' sessions last LONG_SESSION_MS. */
static int setup_cluster_long_session(void **state) {
  return setup_with_session(state, LONG_SESSION_MS);
}

static int setup_plain(void **state) {
  if (!cli_path()) {
    *state = NULL;
    return 0;
  }
  fixture_t *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  const char *base = getenv("TMPDIR");
  if (asprintf(&fx->dir, "%s/pc-secret-XXXXXX", base && *base ? base : "/tmp") < 0) abort();
  assert_non_null(mkdtemp(fx->dir));
  fx->started_ms = now_ms();
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  join_threads();
  fixture_t *fx = *state;
  if (!fx) return 0;
  for (int i = 0; i < fx->npids; i++) kill_and_reap(fx->pids[i]);
  fprintf(stderr, "(%.1f s wall clock with the cluster's start and stop)\n",
          (double)(now_ms() - fx->started_ms) / 1000.0);
  /* keep the daemons' logs of a failed test for the report */
  if (getenv("PC_KEEP_TEST_DIRS")) {
    fprintf(stderr, "kept %s\n", fx->dir);
    free(fx->dir);
  } else {
    tu_rmtree(fx->dir);
  }
  free(fx);
  return 0;
}

#define NEED_CLUSTER(fx)                                   \
  do {                                                     \
    if (!(fx)) {                                           \
      skip();                                              \
    }                                                      \
  } while (0)

/* Writes DIR/NAME.json: the cluster's client configuration with these store
 * settings. Returns a malloc'd path. */
static char *client_config(const char *dir, const char *name, uint32_t lock_ttl_ms,
                           uint32_t timeout_ms) {
  char base[4200], *path;
  snprintf(base, sizeof base, "%s/cluster.json", dir);
  json_t *j = json_load_file(base, 0, NULL);
  assert_non_null(j);
  json_t *store = json_object();
  json_object_set_new(store, "lock_ttl_ms", json_integer(lock_ttl_ms));
  json_object_set_new(store, "timeout_ms", json_integer(timeout_ms));
  json_object_set_new(j, "store", store);
  if (asprintf(&path, "%s/%s.json", dir, name) < 0) abort();
  assert_int_equal(json_dump_file(j, path, 0), 0);
  json_decref(j);
  return path;
}

static pc_db_t *open_config(const char *path) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(path, &err);
  if (!db) fail_msg("pc_db_open_config(%s): %s", path, err.text);
  return db;
}

static int daemon_alive(pid_t pid) {
  /* they are this process's children: a zombie would pass kill(pid, 0) */
  return pid > 0 && kill(pid, 0) == 0 && waitpid(pid, NULL, WNOHANG) == 0;
}
/* Fails when a daemon log in dir holds a sanitizer report. */
static void check_logs_clean(const char *dir) {
  static const char *const logs[] = {"logs/tso-1", "logs/tso-2", "logs/t1",
                                     "logs/t2",    "logs/t3",    "run"};
  static const char *const marks[] = {"AddressSanitizer", "LeakSanitizer", "runtime error:",
                                      "ThreadSanitizer", "UndefinedBehaviorSanitizer"};
  for (size_t i = 0; i < sizeof logs / sizeof logs[0]; i++) {
    char path[4200], line[1024];
    snprintf(path, sizeof path, "%s/%s.log", dir, logs[i]);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f))
      for (size_t k = 0; k < sizeof marks / sizeof marks[0]; k++)
        if (strstr(line, marks[k])) {
          fclose(f);
          fail_msg("%s: %s", path, line);
        }
    fclose(f);
  }
}

/* The end of a test that passed: SIGTERM to every daemon of the cluster, each
 * must exit 0 (a clean shutdown; under ASan also no leak), and no log may
 * hold a sanitizer report. The daemons are then gone, so teardown has
 * nothing to stop. */
static void stop_cluster_checked(fixture_t *fx) {
  static const char *const names[5] = {"tso-1", "tso-2", "t1", "t2", "t3"};
  pid_t pids[5];
  for (int i = 0; i < 5; i++) {
    pids[i] = tu_cluster_pid(fx->dir, i);
    assert_true(pids[i] > 0);
    if (!daemon_alive(pids[i])) fail_msg("daemon %s (pid %d) is not running", names[i], pids[i]);
  }
  for (int i = 0; i < 5; i++) kill(pids[i], SIGTERM);
  char failure[512] = "";
  for (int i = 0; i < 5; i++) {
    int st = 0;
    if (!wait_exit(pids[i], 30000, &st)) {
      kill_and_reap(pids[i]);
      snprintf(failure, sizeof failure, "%s did not stop within 30 s of SIGTERM", names[i]);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      snprintf(failure, sizeof failure, "%s exited with status 0x%x on SIGTERM; see %s/logs/%s.log",
               names[i], st, fx->dir, names[i]);
    }
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.pids", fx->dir);
  remove(path); /* all reaped: tu_rmtree must not signal their (reusable) pids */
  if (failure[0]) fail_msg("%s", failure);
  check_logs_clean(fx->dir);
}

/* Re-executes this program as a child: argv = {self, args...}. The child
 * dies with this process. fd_for_3 >= 0 becomes the child's fd 3. */
static pid_t spawn_self(const char *const *args, int fd_for_3) {
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (fd_for_3 >= 0) {
      if (fd_for_3 == 3) fcntl(3, F_SETFD, 0);
      else if (dup2(fd_for_3, 3) < 0) _exit(1);
    }
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0);
    const char *argv[16];
    int n = 0;
    argv[n++] = self_exe;
    for (int i = 0; args[i] && n < 15; i++) argv[n++] = args[i];
    argv[n] = NULL;
    execv(self_exe, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* ---- accounts ----------------------------------------------------------- */

#define NACCTS 30
#define START_BALANCE 100
#define BANK "bank"

/* acct00..acct09 live on t1, acct25..acct34 on t2, s00..s09 on t3. */
static void acct_name(int i, char out[16]) {
  if (i < 10) snprintf(out, 16, "acct%02d", i);
  else if (i < 20) snprintf(out, 16, "acct%02d", 25 + i - 10);
  else snprintf(out, 16, "s%02d", i - 20);
}

static void seed_accounts(pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("begin: %s", err.text);
  for (int i = 0; i < NACCTS; i++) {
    char name[16];
    acct_name(i, name);
    tu_set(t, BANK, name, "bal", "100");
  }
  if (pc_txn_commit(t, &err) != PC_OK) fail_msg("seeding: %s", err.text);
  pc_txn_destroy(t);
}

/* Reads one balance; PC_CORRUPTION when the account is missing. */
static pc_status_t read_bal(pc_txn_t *t, int i, long *bal, pc_error_t *err) {
  char name[16];
  acct_name(i, name);
  char *v = NULL;
  size_t n = 0;
  pc_status_t st = pc_txn_get(t, BANK, name, strlen(name), "bal", 3, &v, &n, err);
  if (st == PC_NOT_FOUND) return pc_error_set(err, PC_CORRUPTION, "account %s is missing", name);
  if (st != PC_OK) return st;
  char buf[32];
  if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, v, n);
  buf[n] = '\0';
  pc_free(v);
  *bal = strtol(buf, NULL, 10);
  return PC_OK;
}

static pc_status_t write_bal(pc_txn_t *t, int i, long bal, pc_error_t *err) {
  char name[16], v[32];
  acct_name(i, name);
  snprintf(v, sizeof v, "%ld", bal);
  return pc_txn_set(t, BANK, name, strlen(name), "bal", 3, v, strlen(v), err);
}

/* One transfer in one transaction; with jrow also a journal cell recording it. */
static pc_status_t transfer(pc_db_t *db, int from, int to, long amount, const char *jrow,
                            uint32_t timeout_ms, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err->code;
  pc_txn_set_timeout_ms(t, timeout_ms);
  long a = 0, b = 0;
  pc_status_t st = read_bal(t, from, &a, err);
  if (st == PC_OK) st = read_bal(t, to, &b, err);
  if (st == PC_OK) st = write_bal(t, from, a - amount, err);
  if (st == PC_OK) st = write_bal(t, to, b + amount, err);
  if (st == PC_OK && jrow) {
    char v[64];
    snprintf(v, sizeof v, "%d,%d,%ld", from, to, amount);
    st = pc_txn_set(t, "journal", jrow, strlen(jrow), "j", 1, v, strlen(v), err);
  }
  if (st == PC_OK) st = pc_txn_commit(t, err);
  pc_txn_destroy(t);
  return st;
}

/* A commit that may be retried (PC_UNKNOWN: a tablet went away with the
 * commit's outcome; the transfer is not acknowledged, and readers settle it). */
static int transient(pc_status_t st) {
  return st == PC_CONFLICT || st == PC_LOCKED || st == PC_ABORTED || st == PC_TIMEOUT ||
         st == PC_UNKNOWN;
}

/* Sum and count of the balances through gets; PC_OK or the failing status. */
static pc_status_t total_by_gets(pc_db_t *db, uint32_t timeout_ms, long *sum, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err->code;
  pc_txn_set_timeout_ms(t, timeout_ms);
  pc_status_t st = PC_OK;
  *sum = 0;
  for (int i = 0; i < NACCTS && st == PC_OK; i++) {
    long b = 0;
    st = read_bal(t, i, &b, err);
    *sum += b;
  }
  pc_txn_destroy(t);
  return st;
}

/* Sum and count of the balances through one snapshot scan of the table. */
static pc_status_t total_by_scan(pc_db_t *db, uint32_t timeout_ms, long *sum, int *count,
                                 pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err->code;
  pc_txn_set_timeout_ms(t, timeout_ms);
  pc_scan_t *sc = pc_txn_scan(t, BANK, "", 0, NULL, 0, err);
  if (!sc) {
    pc_txn_destroy(t);
    return err->code;
  }
  pc_status_t st;
  *sum = 0;
  *count = 0;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t n;
    const char *v = pc_scan_value(sc, &n);
    char buf[32];
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    *sum += strtol(buf, NULL, 10);
    (*count)++;
  }
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  return st == PC_NOT_FOUND ? PC_OK : st;
}

/* ---- child processes ---------------------------------------------------- */

/* child-bank CONFIG SEED ITERATIONS: ITERATIONS transfers, each retried on
 * conflicts; exit 0 when all went through, 2 on an unexpected error. */
static int child_bank(int argc, char **argv) {
  if (argc != 5) return 64;
  pc_db_t *db = open_config(argv[2]);
  unsigned seed = (unsigned)strtoul(argv[3], NULL, 10);
  int iters = atoi(argv[4]), retries = 0;
  for (int i = 0; i < iters; i++) {
    int from = (int)(rand_r(&seed) % NACCTS), to = (int)(rand_r(&seed) % (NACCTS - 1));
    if (to >= from) to++;
    long amount = 1 + (long)(rand_r(&seed) % 20);
    pc_error_t err;
    pc_status_t st;
    int tries = 0;
    while ((st = transfer(db, from, to, amount, NULL, 10000, &err)) != PC_OK) {
      if (!transient(st) || ++tries > 200) {
        fprintf(stderr, "child-bank: transfer %d: %s: %s\n", i, pc_status_name(st), err.text);
        pc_db_close(db);
        return 2;
      }
      retries++;
      sleep_ms(1 + rand_r(&seed) % 5);
    }
  }
  fprintf(stderr, "child-bank %d: %d transfers, %d retries\n", (int)getpid(), iters, retries);
  pc_db_close(db);
  return 0;
}

#define CRASH_ROWS 3
static const char *const crash_rows[CRASH_ROWS] = {"acct03", "acct27", "s05"}; /* t1, t2, t3 */

/* child-crash CONFIG TABLE FAILPOINTS: writes "new" to the crash rows of
 * TABLE, tells fd 3 "START_TS SESSION\n" just before committing, and commits
 * with FAILPOINTS armed (which stop it for a minute: the parent kills it). */
static int child_crash(int argc, char **argv) {
  if (argc != 5) return 64;
  pc_db_t *db = open_config(argv[2]);
  const char *table = argv[3];
  pc_error_t err;
  /* locks must name a live session: wait (bounded) for the lock service */
  for (int i = 0; i < 1000 && pc_db_session(db) == 0; i++) sleep_ms(10);
  if (pc_db_session(db) == 0) return 3;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) return 4;
  for (int i = 0; i < CRASH_ROWS; i++) tu_set(t, table, crash_rows[i], "v", "new");
  if (pc_failpoints_configure(argv[4], &err) != PC_OK) return 5;
  char line[128];
  int n = snprintf(line, sizeof line, "%llu %llu\n", (unsigned long long)pc_txn_start_ts(t),
                   (unsigned long long)pc_db_session(db));
  if (write(3, line, (size_t)n) != n) return 6;
  pc_status_t st = pc_txn_commit(t, &err);
  fprintf(stderr, "child-crash: commit returned %s (%s) — it should have been killed\n",
          pc_status_name(st), err.text);
  return 7;
}

/* ---- raw views ---------------------------------------------------------- */

typedef struct raw_probe {
  uint64_t start_ts;
  int locks, locks_of_txn;    /* all locks / those of start_ts */
  int puts_of_txn;            /* write records (put) pointing at start_ts */
  int rollbacks_of_txn;       /* rollback records of start_ts */
  uint64_t lock_session;      /* the session of a lock of start_ts */
  char primary_put_row[64];   /* a row with a put record of start_ts */
} raw_probe_t;

static int probe_cell(void *ctx, const pc_raw_cell_t *c) {
  raw_probe_t *p = ctx;
  if (c->kind == PC_CELL_LOCK) {
    p->locks++;
    if (c->ts == p->start_ts) {
      p->locks_of_txn++;
      p->lock_session = c->session;
    }
  } else if (c->kind == PC_CELL_WRITE && c->start_ts == p->start_ts) {
    if (c->write_kind == PC_WRITE_ROLLBACK) {
      p->rollbacks_of_txn++;
    } else {
      p->puts_of_txn++;
      snprintf(p->primary_put_row, sizeof p->primary_put_row, "%.*s", (int)c->row_len, c->row);
    }
  }
  return 0;
}

static raw_probe_t probe(pc_db_t *db, const char *table, uint64_t start_ts) {
  raw_probe_t p;
  memset(&p, 0, sizeof p);
  p.start_ts = start_ts;
  pc_error_t err;
  pc_status_t st = pc_db_raw_scan(db, table, NULL, 0, NULL, 0, probe_cell, &p, &err);
  if (st != PC_OK) fail_msg("raw scan of %s: %s", table ? table : "(all)", err.text);
  return p;
}

/* ---- 1. several client processes at once -------------------------------- */

static void test_bank_processes(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  char *cfg = client_config(fx->dir, "bank-client", 3000, 10000);
  pc_db_t *db = open_config(cfg);
  seed_accounts(db);
  const long total = (long)NACCTS * START_BALANCE;

  pid_t kids[3];
  for (int i = 0; i < 3; i++) {
    char seed[16];
    snprintf(seed, sizeof seed, "%d", 1000 + i);
    const char *args[] = {"child-bank", cfg, seed, "300", NULL};
    kids[i] = spawn_self(args, -1);
    fx_add_pid(fx, kids[i]);
  }
  /* check the invariant while they run: every snapshot sees the same total */
  int running = 3, scans_ok = 0, gets_ok = 0, checks_while_running = 0, status[3] = {0};
  int done[3] = {0};
  uint64_t deadline = now_ms() + 180000;
  while (running > 0 || scans_ok == 0 || gets_ok == 0) {
    assert_true(now_ms() < deadline);
    int was_running = running > 0;
    long sum = 0;
    int count = 0;
    pc_error_t err;
    pc_status_t st = total_by_scan(db, 10000, &sum, &count, &err);
    if (st == PC_OK) {
      if (sum != total || count != NACCTS)
        fail_msg("a snapshot scan saw %d accounts totalling %ld (want %d, %ld)", count, sum,
                 NACCTS, total);
      scans_ok++;
    } else if (!transient(st)) {
      fail_msg("snapshot scan: %s: %s", pc_status_name(st), err.text);
    }
    st = total_by_gets(db, 10000, &sum, &err);
    if (st == PC_OK) {
      if (sum != total) fail_msg("a snapshot of gets saw a total of %ld (want %ld)", sum, total);
      gets_ok++;
    } else if (!transient(st)) {
      fail_msg("snapshot gets: %s: %s", pc_status_name(st), err.text);
    }
    if (was_running) checks_while_running++;
    for (int i = 0; i < 3; i++)
      if (!done[i] && waitpid(kids[i], &status[i], WNOHANG) == kids[i]) {
        done[i] = 1;
        running--;
        fx_forget_pid(fx, kids[i]);
      }
  }
  for (int i = 0; i < 3; i++)
    if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
      fail_msg("bank child %d failed (status 0x%x); see its stderr above", i, status[i]);
  assert_true(checks_while_running > 0);
  fprintf(stderr, "bank: %d scans and %d get-snapshots checked, %d while clients ran\n", scans_ok,
          gets_ok, checks_while_running);

  /* afterwards: the total is intact, every account is there, and once read no lock remains */
  long sum = 0;
  int count = 0;
  pc_error_t err;
  assert_int_equal(total_by_gets(db, 20000, &sum, &err), PC_OK);
  assert_int_equal(sum, total);
  assert_int_equal(total_by_scan(db, 20000, &sum, &count, &err), PC_OK);
  assert_int_equal(sum, total);
  assert_int_equal(count, NACCTS);
  assert_int_equal(tu_raw_count(db, NULL, PC_CELL_LOCK), 0);
  /* 900 transfers happened: every account's history has more than its seed */
  assert_true(tu_raw_count(db, BANK, PC_CELL_WRITE) > NACCTS);
  pc_db_close(db);
  stop_cluster_checked(fx);
  free(cfg);
}

/* ---- 2. and 3. a client killed in the middle of a commit ---------------- */

/* Reads one line from fd within timeout_ms; 0 on success. */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms) {
  size_t n = 0;
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  while (n + 1 < cap) {
    long left = (long)(end - now_ms());
    if ((int64_t)(end - now_ms()) <= 0) return -1;
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    ssize_t k = read(fd, buf + n, 1);
    if (k <= 0) return -1;
    if (buf[n] == '\n') {
      buf[n] = '\0';
      return 0;
    }
    n++;
  }
  return -1;
}

typedef struct crash_run {
  pid_t pid;
  uint64_t start_ts, session;
} crash_run_t;

/* Seeds "old" in table's crash rows and starts a child that will stop at failpoints. */
static crash_run_t start_crashing_child(fixture_t *fx, pc_db_t *db, const char *cfg,
                                        const char *table, const char *failpoints) {
  tu_put_rows(db, table, crash_rows, CRASH_ROWS, "v", "old");
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  const char *args[] = {"child-crash", cfg, table, failpoints, NULL};
  crash_run_t run = {0, 0, 0};
  run.pid = spawn_self(args, p[1]);
  fx_add_pid(fx, run.pid);
  close(p[1]);
  char line[128];
  int rc = read_line(p[0], line, sizeof line, 30000);
  close(p[0]);
  if (rc != 0) fail_msg("the crashing child did not report its transaction");
  unsigned long long s, sess;
  assert_int_equal(sscanf(line, "%llu %llu", &s, &sess), 2);
  run.start_ts = s;
  run.session = sess;
  assert_true(run.start_ts != 0 && run.session != 0);
  return run;
}

static char *read_value(pc_txn_t *t, const char *table, const char *row, pc_status_t *st,
                        pc_error_t *err) {
  char *v = NULL;
  size_t n = 0;
  *st = pc_txn_get(t, table, row, strlen(row), "v", 1, &v, &n, err);
  if (*st != PC_OK) return NULL;
  char *s = malloc(n + 1);
  memcpy(s, v, n);
  s[n] = '\0';
  pc_free(v);
  return s;
}

/* Seeds table's crash rows with "old", starts a child that writes "new" to
 * them and stops at failpoint (which sleeps a minute), waits until the store
 * shows the child there (want_locks locks of its transaction, and its
 * primary's commit record when committed), kills it with SIGKILL, and reads
 * the rows with a 20 s timeout while its locks live 10 minutes: they must be
 * resolved through the dead session once ZooKeeper has expired it (4 s) —
 * to "new" everywhere when the primary had committed (rolled forward), else
 * to "old" (rolled back). */
static void kill_case(fixture_t *fx, const char *table, const char *failpoint, int want_locks,
                      int committed) {
  char *cfg = client_config(fx->dir, "crash-client", 600000, 10000);
  pc_db_t *db = open_config(cfg);
  crash_run_t run = start_crashing_child(fx, db, cfg, table, failpoint);
  raw_probe_t p;
  uint64_t deadline = now_ms() + 30000;
  for (;;) {
    p = probe(db, table, run.start_ts);
    if (committed ? p.puts_of_txn >= 1 : p.locks_of_txn >= want_locks) break;
    if (now_ms() > deadline)
      fail_msg("%s: the child did not get there (%d locks, %d commit records)", failpoint,
               p.locks_of_txn, p.puts_of_txn);
    sleep_ms(10);
  }
  if (p.locks_of_txn != want_locks)
    fail_msg("%s: %d locks of the transaction, want %d", failpoint, p.locks_of_txn, want_locks);
  assert_int_equal(p.lock_session, run.session);
  assert_int_equal(p.puts_of_txn, committed ? 1 : 0);
  if (committed) assert_string_equal(p.primary_put_row, crash_rows[0]);

  assert_int_equal(kill(run.pid, SIGKILL), 0);
  int status;
  assert_true(wait_exit(run.pid, 10000, &status));
  fx_forget_pid(fx, run.pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  assert_true(pc_txn_start_ts(t) > run.start_ts);
  pc_txn_set_timeout_ms(t, 20000);
  const char *want = committed ? "new" : "old";
  for (int i = 0; i < CRASH_ROWS; i++) {
    pc_status_t st;
    char *v = read_value(t, table, crash_rows[i], &st, &err);
    if (st != PC_OK)
      fail_msg("%s: reading %s after the kill: %s: %s", failpoint, crash_rows[i],
               pc_status_name(st), err.text);
    if (strcmp(v, want) != 0)
      fail_msg("%s: %s reads '%s' after the kill, want '%s'", failpoint, crash_rows[i], v, want);
    free(v);
  }
  pc_txn_destroy(t);
  /* resolved for good: no lock left; rolled forward on every cell, or rolled
   * back with a rollback record on the primary */
  p = probe(db, table, run.start_ts);
  assert_int_equal(p.locks, 0);
  if (committed) {
    assert_int_equal(p.puts_of_txn, CRASH_ROWS);
    assert_int_equal(p.rollbacks_of_txn, 0);
  } else {
    assert_int_equal(p.puts_of_txn, 0);
    assert_true(p.rollbacks_of_txn >= 1);
  }
  /* and the rows take new writes */
  tu_put_rows(db, table, crash_rows, CRASH_ROWS, "v", "after");
  pc_db_close(db);
  stop_cluster_checked(fx);
  free(cfg);
}

/* killed after its primary is prewritten: one lock */
static void test_kill_client_after_primary_prewrite(void **state) {
  NEED_CLUSTER(*state);
  kill_case(*state, "crash1", "txn.prewrite.after_primary=sleep(60000)", 1, 0);
}

/* killed after the secondaries are prewritten (in parallel: all three locks) */
static void test_kill_client_after_prewrite(void **state) {
  NEED_CLUSTER(*state);
  kill_case(*state, "crash2", "txn.prewrite.after_secondary=sleep(60000)", CRASH_ROWS, 0);
}

/* killed with its commit_ts in hand, the primary not yet committed */
static void test_kill_client_before_primary_commit(void **state) {
  NEED_CLUSTER(*state);
  kill_case(*state, "crash3", "txn.commit.before_primary=sleep(60000)", CRASH_ROWS, 0);
}

/* killed just after the commit point: the secondaries' locks remain */
static void test_kill_client_after_primary_commit(void **state) {
  NEED_CLUSTER(*state);
  kill_case(*state, "crash4", "txn.commit.after_primary=sleep(60000)", CRASH_ROWS - 1, 1);
}

/* ---- 4. a tablet server killed and restarted under load ----------------- */

/* The acknowledged transfers check_journal looks for (32 B each); the
 * workload goes on past it, since waits for a dead server's ZooKeeper
 * session to end can last long enough to commit any number. */
#define MAX_ACKS 100000
/* What a request to t2's rows says while no live server holds t2. */
#define T2_DOWN "tablet t2 [acct25, r2) has no live server"
/* ... and while ZooKeeper still names its dead server (before its session
 * expires), between these two: the server's address */
#define T2_REFUSED "tablet t2 [acct25, r2): its server "
#define REFUSES "refuses connections"

typedef struct journal_state {
  pc_db_t *db;
  atomic_int stop;
  atomic_int acked, failed;
  atomic_int no_server; /* failures saying that t2 has no live server */
  atomic_int refused;   /* failures saying that t2's server refuses connections */
  atomic_int fatal;
  char fatal_text[400];
  pthread_mutex_t mu;
  char (*acks)[32]; /* acknowledged journal rows */
  int nacks;
  int by_status[PC_UNKNOWN + 1];
} journal_state_t;

typedef struct journal_worker {
  journal_state_t *js;
  int id;
} journal_worker_t;

static void *journal_worker(void *arg) {
  journal_worker_t *w = arg;
  journal_state_t *js = w->js;
  unsigned seed = 77u + (unsigned)w->id;
  for (int seq = 0; !atomic_load(&js->stop) && !atomic_load(&js->fatal); seq++) {
    int from = (int)(rand_r(&seed) % NACCTS), to = (int)(rand_r(&seed) % (NACCTS - 1));
    if (to >= from) to++;
    long amount = 1 + (long)(rand_r(&seed) % 20);
    char jrow[32], fname[16];
    acct_name(from, fname);
    snprintf(jrow, sizeof jrow, "%s/j%d-%d", fname, w->id, seq);
    pc_error_t err;
    pc_status_t st = transfer(js->db, from, to, amount, jrow, 2000, &err);
    pthread_mutex_lock(&js->mu);
    js->by_status[st <= PC_UNKNOWN ? st : PC_INTERNAL]++;
    if (st == PC_OK) {
      /* past MAX_ACKS the workload goes on unrecorded: a test waiting for
       * more transfers (after a restart) must not find it stopped */
      if (js->nacks < MAX_ACKS) snprintf(js->acks[js->nacks++], 32, "%s", jrow);
    }
    pthread_mutex_unlock(&js->mu);
    if (st == PC_OK) {
      atomic_fetch_add(&js->acked, 1);
    } else if (transient(st) || st == PC_UNAVAILABLE) {
      atomic_fetch_add(&js->failed, 1);
      if (st == PC_UNAVAILABLE && strstr(err.text, T2_DOWN)) atomic_fetch_add(&js->no_server, 1);
      if (st == PC_UNAVAILABLE && strstr(err.text, T2_REFUSED) && strstr(err.text, REFUSES))
        atomic_fetch_add(&js->refused, 1);
      sleep_ms(5);
    } else {
      pthread_mutex_lock(&js->mu);
      snprintf(js->fatal_text, sizeof js->fatal_text, "worker %d: %s: %s", w->id,
               pc_status_name(st), err.text);
      pthread_mutex_unlock(&js->mu);
      atomic_store(&js->fatal, 1);
    }
  }
  return NULL;
}

static void wait_counter(atomic_int *c, int target, long timeout_ms, journal_state_t *js,
                         const char *what) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  while (atomic_load(c) < target) {
    if (atomic_load(&js->fatal)) fail_msg("%s", js->fatal_text);
    if (now_ms() > end) fail_msg("%s: only %d of %d within %ld ms", what, atomic_load(c), target,
                                 timeout_ms);
    sleep_ms(10);
  }
}

/* Seeds the accounts and starts three journal workers on a client of cfg,
 * returning once they acknowledged 30 transfers. The state is static: one
 * workload at a time. */
static journal_state_t *journal_start(const char *cfg) {
  static journal_state_t js;
  memset(&js, 0, sizeof js);
  pthread_mutex_init(&js.mu, NULL);
  js.acks = calloc(MAX_ACKS, sizeof *js.acks);
  assert_non_null(js.acks);
  js.db = open_config(cfg);
  seed_accounts(js.db);
  enum { NW = 3 };
  static journal_worker_t w[NW];
  track_stop(&js.stop);
  for (int i = 0; i < NW; i++) {
    w[i] = (journal_worker_t){&js, i};
    start_thread(journal_worker, &w[i]);
  }
  wait_counter(&js.acked, 30, 60000, &js, "transfers before the kill");
  return &js;
}

typedef struct journal_check {
  char (*rows)[32];
  int n, cap;
  long bal[NACCTS];
  int bad;
} journal_check_t;

static int cmp_row(const void *a, const void *b) { return strcmp(a, b); }

/* After a workload of journal workers: the total is constant, every
 * acknowledged transfer is visible, and the balances are exactly the seed
 * plus the transfers whose journal cell exists (all or nothing each). */
static void check_journal(journal_state_t *js) {
  const long total = (long)NACCTS * START_BALANCE;
  pc_error_t err;
  long sum = 0;
  pc_status_t st = total_by_gets(js->db, 30000, &sum, &err);
  if (st != PC_OK) fail_msg("final read: %s: %s", pc_status_name(st), err.text);
  assert_int_equal(sum, total);

  /* every acknowledged transfer is visible, and the balances are exactly the
   * seed plus the transfers whose journal cell exists (all or nothing each) */
  journal_check_t jc;
  memset(&jc, 0, sizeof jc);
  jc.cap = MAX_ACKS * 2;
  jc.rows = calloc((size_t)jc.cap, sizeof *jc.rows);
  assert_non_null(jc.rows);
  for (int i = 0; i < NACCTS; i++) jc.bal[i] = START_BALANCE;
  pc_txn_t *t = pc_txn_begin(js->db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, 30000);
  pc_scan_t *sc = pc_txn_scan(t, "journal", "", 0, NULL, 0, &err);
  assert_non_null(sc);
  while ((st = pc_scan_next(sc, &err)) == PC_OK) {
    size_t rl, vl;
    const char *r = pc_scan_row(sc, &rl), *v = pc_scan_value(sc, &vl);
    assert_true(rl < 32 && vl < 64);
    if (jc.n == jc.cap) { /* the workload went on past MAX_ACKS */
      jc.cap *= 2;
      jc.rows = realloc(jc.rows, (size_t)jc.cap * sizeof *jc.rows);
      assert_non_null(jc.rows);
    }
    memcpy(jc.rows[jc.n], r, rl);
    jc.rows[jc.n][rl] = '\0';
    jc.n++;
    char vb[64];
    memcpy(vb, v, vl);
    vb[vl] = '\0';
    int from, to;
    long amount;
    assert_int_equal(sscanf(vb, "%d,%d,%ld", &from, &to, &amount), 3);
    assert_true(from >= 0 && from < NACCTS && to >= 0 && to < NACCTS);
    jc.bal[from] -= amount;
    jc.bal[to] += amount;
  }
  if (st != PC_NOT_FOUND) fail_msg("journal scan: %s: %s", pc_status_name(st), err.text);
  pc_scan_destroy(sc);
  for (int i = 0; i < NACCTS; i++) {
    long b;
    st = read_bal(t, i, &b, &err);
    if (st != PC_OK) fail_msg("balance %d: %s", i, err.text);
    if (b != jc.bal[i])
      fail_msg("account %d holds %ld but its journal says %ld: a transfer was applied in part", i,
               b, jc.bal[i]);
  }
  pc_txn_destroy(t);
  qsort(jc.rows, (size_t)jc.n, sizeof *jc.rows, cmp_row);
  for (int i = 0; i < js->nacks; i++)
    if (!bsearch(js->acks[i], jc.rows, (size_t)jc.n, sizeof *jc.rows, cmp_row))
      fail_msg("acknowledged transfer %s is lost", js->acks[i]);
  assert_true(jc.n >= js->nacks);
  fprintf(stderr, "tablet kill: %d journal cells, %d acknowledged, all present\n", jc.n, js->nacks);
  /* everything was read: no lock is left */
  assert_int_equal(tu_raw_count(js->db, NULL, PC_CELL_LOCK), 0);
  free(jc.rows);
}

/* One read of BANK acct30/bal through probe, in a transaction of its own
 * whose calls may wait timeout_ms: its status, err saying why when not
 * PC_OK. */
static pc_status_t probe_read(pc_db_t *probe, uint32_t timeout_ms, pc_error_t *err) {
  pc_txn_t *pt = pc_txn_begin(probe, err);
  if (!pt) fail_msg("begin: %s", err->text);
  pc_txn_set_timeout_ms(pt, timeout_ms);
  char *v = NULL;
  size_t n = 0;
  pc_status_t st = pc_txn_get(pt, BANK, "acct30", 6, "bal", 3, &v, &n, err);
  pc_free(v);
  pc_txn_destroy(pt);
  return st;
}

static void test_tablet_kill_restart(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  /* store calls bounded by 2 s: a call to the dead tablet otherwise waits the
   * store timeout whatever the transaction's (cluster-bugs.md #3) */
  char *cfg = client_config(fx->dir, "journal-client", 3000, 2000);
  journal_state_t *js = journal_start(cfg);

  /* kill -9 tablet t2 (index 3) in the middle of the workload */
  pid_t t2 = tu_cluster_pid(fx->dir, 3);
  assert_true(t2 > 0);
  assert_int_equal(kill(t2, SIGKILL), 0);
  assert_true(wait_dead_unreaped(t2, 10000));
  int acked_at_kill = atomic_load(&js->acked), failed_at_kill = atomic_load(&js->failed);
  /* the clients notice: transfers touching t2 fail (not acknowledged) */
  wait_counter(&js->failed, failed_at_kill + 10, 60000, js, "failures while t2 is down");

  /* ZooKeeper ends the dead server's session, and its owner node with it */
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.json", fx->dir);
  pc_error_t err;
  pc_config_t *ccfg = pc_config_load(path, &err);
  if (!ccfg) fail_msg("%s: %s", path, err.text);
  pc_zk_options_t zo = pc_config_zk(ccfg);
  pc_coord_t *zc = pc_coord_open(&zo, 0, 20000, &err);
  if (!zc) fail_msg("coordination: %s", err.text);
  char owner[300] = "?";
  uint64_t until = now_ms() + 60000;
  while (owner[0] && now_ms() < until) {
    if (pc_coord_tablet_owner(zc, "t2", 1, 5000, owner, sizeof owner, NULL, &err) != PC_OK)
      fail_msg("t2's owner: %s", err.text);
    if (owner[0]) sleep_ms(50);
  }
  if (owner[0]) fail_msg("t2 still held by %s a minute after its server died", owner);
  /* the workload's client (its map followed with a watch) fails fast on t2's
   * rows, while transfers between the other tablets keep committing */
  int acked_down = atomic_load(&js->acked);
  wait_counter(&js->no_server, 1, 60000, js, "failures naming t2 as having no live server");
  wait_counter(&js->acked, acked_down + 20, 60000, js, "transfers while t2 has no server");
  /* a client whose store calls may wait an hour learns at once that t2 has
   * no server: had it waited for the store's timeout, this test would time
   * out instead */
  char *patient = client_config(fx->dir, "patient-client", 3000, 3600000);
  pc_db_t *probe = open_config(patient);
  pc_status_t pst = probe_read(probe, 3600000, &err);
  if (pst != PC_UNAVAILABLE || !strstr(err.text, T2_DOWN))
    fail_msg("a read of acct30 while t2 has no server: %s: %s (wanted unavailable: %s)",
             pc_status_name(pst), pst == PC_OK ? "" : err.text, T2_DOWN);
  fprintf(stderr, "tablet kill: while t2 is down: %s\n", err.text);

  /* t2 comes back on another port, which no configuration names */
  int old_port = ccfg->tablets[1].listen.port;
  int new_port = tu_cluster_restart_moved(fx->dir, 3);
  assert_int_not_equal(new_port, old_port);
  assert_int_equal(waitpid(t2, NULL, 0), t2); /* reaped once its successor is recorded */
  if (pc_coord_tablet_owner(zc, "t2", 1, 5000, owner, sizeof owner, NULL, &err) != PC_OK)
    fail_msg("t2's owner: %s", err.text);
  char want[32];
  snprintf(want, sizeof want, "127.0.0.1:%d", new_port);
  assert_string_equal(owner, want);
  pc_coord_close(zc);
  pc_config_free(ccfg);
  /* the probe, which never knew where t2 is, finds it through ZooKeeper */
  pst = probe_read(probe, 30000, &err);
  if (pst != PC_OK) fail_msg("acct30 after t2's restart: %s: %s", pc_status_name(pst), err.text);
  pc_db_close(probe);
  free(patient);
  int acked_at_restart = atomic_load(&js->acked);
  /* the workload goes on, through t2 again: its client follows the map */
  wait_counter(&js->acked, acked_at_restart + 200, 120000, js, "transfers after the restart");
  join_threads();
  if (atomic_load(&js->fatal)) fail_msg("%s", js->fatal_text);
  fprintf(stderr,
          "tablet kill: %d acked before the kill, %d at the restart, %d in all; statuses:",
          acked_at_kill, acked_at_restart, js->nacks);
  for (int s = 0; s <= PC_UNKNOWN; s++)
    if (js->by_status[s]) fprintf(stderr, " %s=%d", pc_status_name((pc_status_t)s), js->by_status[s]);
  fprintf(stderr, "\n");

  check_journal(js);

  pc_db_close(js->db);
  free(js->acks);
  pthread_mutex_destroy(&js->mu);
  stop_cluster_checked(fx);
  free(cfg);
}

/* t2's owner in ZooKeeper now, read after a sync ("" when none). */
static void t2_owner(pc_coord_t *zc, char *owner, size_t cap) {
  pc_error_t err;
  if (pc_coord_tablet_owner(zc, "t2", 1, 5000, owner, cap, NULL, &err) != PC_OK)
    fail_msg("t2's owner: %s", err.text);
}

/* A tablet server killed while its ZooKeeper session lives on (20 s here):
 * the map still names it, yet requests to its rows fail at once, naming
 * the tablet, its rows and the dead server, however long their timeouts
 * (an hour: waiting for the session's expiry, or for the timeout, would
 * time this test out instead); transfers between the other tablets keep
 * committing; a transaction with a row on it is rolled back whole; and
 * once the server is back, nothing acknowledged is lost. */
static void test_tablet_kill_fails_fast(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.json", fx->dir);
  pc_error_t err;
  pc_config_t *ccfg = pc_config_load(path, &err);
  if (!ccfg) fail_msg("%s: %s", path, err.text);
  assert_int_equal(ccfg->zookeeper.session_timeout_ms, LONG_SESSION_MS);
  char dead[32];
  snprintf(dead, sizeof dead, "127.0.0.1:%u", (unsigned)ccfg->tablets[1].listen.port);
  pc_zk_options_t zo = pc_config_zk(ccfg);
  pc_coord_t *zc = pc_coord_open(&zo, 0, 20000, &err);
  if (!zc) fail_msg("coordination: %s", err.text);

  char *cfg = client_config(fx->dir, "journal-client", 3000, 30000);
  journal_state_t *js = journal_start(cfg);

  /* a client whose calls may wait an hour, connected to t2 before the kill */
  char *patient = client_config(fx->dir, "patient-client", 3000, 3600000);
  pc_db_t *probe = open_config(patient);
  pc_status_t pst = probe_read(probe, 3600000, &err);
  if (pst != PC_OK) fail_msg("acct30 before the kill: %s: %s", pc_status_name(pst), err.text);

  pid_t t2 = tu_cluster_pid(fx->dir, 3);
  assert_true(t2 > 0);
  assert_int_equal(kill(t2, SIGKILL), 0);
  assert_true(wait_dead_unreaped(t2, 10000));
  int acked_at_kill = atomic_load(&js->acked);
  /* ZooKeeper still names the dead server: its session lives on */
  char owner[300];
  t2_owner(zc, owner, sizeof owner);
  assert_string_equal(owner, dead);

  /* the patient client's read fails at once, saying why */
  char want[200];
  snprintf(want, sizeof want, T2_REFUSED "%s " REFUSES, dead);
  pst = probe_read(probe, 3600000, &err);
  if (pst != PC_UNAVAILABLE || !strstr(err.text, want))
    fail_msg("a read of acct30 while t2's dead server is its owner: %s: %s (wanted unavailable: "
             "%s)", pc_status_name(pst), pst == PC_OK ? "" : err.text, want);
  fprintf(stderr, "tablet kill: while t2's owner node outlives its server: %s\n", err.text);
  /* and so does a commit with a row on t2 (its primary on t1): rolled back */
  pc_txn_t *pt = pc_txn_begin(probe, &err);
  if (!pt) fail_msg("begin: %s", err.text);
  pc_txn_set_timeout_ms(pt, 3600000);
  tu_set(pt, "probe", "acct01", "c", "half");
  tu_set(pt, "probe", "acct31", "c", "half");
  pst = pc_txn_commit(pt, &err);
  if (pst != PC_UNAVAILABLE || !strstr(err.text, want))
    fail_msg("a commit to t1 and t2 while t2's dead server is its owner: %s: %s (wanted "
             "unavailable: %s)", pc_status_name(pst), pst == PC_OK ? "" : err.text, want);
  pc_txn_destroy(pt);

  /* meanwhile the workload's transfers touching t2 fail the same way, and
   * those between the other tablets keep committing */
  wait_counter(&js->refused, 1, 60000, js, "failures naming t2's server as refusing");
  wait_counter(&js->acked, acked_at_kill + 20, 60000, js, "transfers while t2's server is dead");
  t2_owner(zc, owner, sizeof owner);
  fprintf(stderr, "tablet kill: %d transfers since the kill, %d failures naming the refusal; "
          "t2's owner now: %s\n", atomic_load(&js->acked) - acked_at_kill,
          atomic_load(&js->refused), owner[0] ? owner : "none");

  /* t2 comes back on its port, once ZooKeeper has ended its dead session */
  tu_cluster_restart(fx->dir, 3);
  assert_int_equal(waitpid(t2, NULL, 0), t2); /* reaped once its successor is recorded */
  pst = probe_read(probe, 30000, &err);
  if (pst != PC_OK) fail_msg("acct30 after t2's restart: %s: %s", pc_status_name(pst), err.text);
  /* nothing of the failed commit is visible, on either tablet */
  pt = pc_txn_begin(probe, &err);
  if (!pt) fail_msg("begin: %s", err.text);
  pc_txn_set_timeout_ms(pt, 30000);
  static const char *const probed[] = {"acct01", "acct31"};
  for (int i = 0; i < 2; i++) {
    char *pv = NULL;
    size_t pn = 0;
    pst = pc_txn_get(pt, "probe", probed[i], 6, "c", 1, &pv, &pn, &err);
    pc_free(pv);
    if (pst != PC_NOT_FOUND)
      fail_msg("probe/%s after the failed commit: %s: %s", probed[i], pc_status_name(pst),
               pst == PC_OK ? "(a value)" : err.text);
  }
  pc_txn_destroy(pt);
  pc_db_close(probe);
  free(patient);
  int acked_at_restart = atomic_load(&js->acked);
  wait_counter(&js->acked, acked_at_restart + 200, 120000, js, "transfers after the restart");
  join_threads();
  if (atomic_load(&js->fatal)) fail_msg("%s", js->fatal_text);
  fprintf(stderr, "tablet kill: %d acked before the kill, %d at the restart, %d in all\n",
          acked_at_kill, acked_at_restart, js->nacks);
  check_journal(js);

  pc_coord_close(zc);
  pc_config_free(ccfg);
  pc_db_close(js->db);
  free(js->acks);
  pthread_mutex_destroy(&js->mu);
  stop_cluster_checked(fx);
  free(cfg);
}

/* Runs `percolator --config cfg tablet --name name` to its end (bounded:
 * SIGKILL after timeout_ms), its output into log; returns its exit status,
 * or -1 when it had to be killed. */
static int run_tablet_server(fixture_t *fx, const char *cfg, const char *name, const char *log,
                             long timeout_ms) {
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(1);
    execl(cli_path(), cli_path(), "--config", cfg, "tablet", "--name", name, (char *)NULL);
    _exit(127);
  }
  fx_add_pid(fx, pid);
  int status = 0;
  if (!wait_exit(pid, timeout_ms, &status)) {
    kill_and_reap(pid);
    fx_forget_pid(fx, pid);
    return -1;
  }
  fx_forget_pid(fx, pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A second server for a tablet that a live server holds is refused, naming
 * the tablet and its owner; a configuration whose rows for a tablet differ
 * from what ZooKeeper records is refused, naming the tablet, by clients and
 * by servers. */
static void test_tablet_owned_refused(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  char path[4200], cfg2[4300], log[4300];
  snprintf(path, sizeof path, "%s/daemons.json", fx->dir);
  json_t *j = json_load_file(path, 0, NULL);
  assert_non_null(j);
  /* another data directory: the same one is refused by its lock before
   * ZooKeeper is asked */
  char data2[4300];
  snprintf(data2, sizeof data2, "%s/data2", fx->dir);
  json_object_set_new(j, "data_dir", json_string(data2));
  snprintf(cfg2, sizeof cfg2, "%s/second.json", fx->dir);
  assert_int_equal(json_dump_file(j, cfg2, 0), 0);
  snprintf(log, sizeof log, "%s/second-t2.log", fx->dir);
  int code = run_tablet_server(fx, cfg2, "t2", log, 120000);
  char *out = tu_slurp(log);
  char cpath[4200];
  snprintf(cpath, sizeof cpath, "%s/cluster.json", fx->dir);
  pc_error_t err;
  pc_config_t *ccfg = pc_config_load(cpath, &err);
  if (!ccfg) fail_msg("%s: %s", cpath, err.text);
  char want[200];
  snprintf(want, sizeof want, "tablet t2 is held by the live server at 127.0.0.1:%u",
           (unsigned)ccfg->tablets[1].listen.port);
  if (code <= 0 || !strstr(out, want) || !strstr(out, "a second server for it is refused"))
    fail_msg("a second server for t2 exited with %d, saying:\n%s\n(wanted: %s)", code, out, want);
  fprintf(stderr, "second server: %s", out);
  free(out);
  pc_config_free(ccfg);

  /* t2's and t3's boundary moved: refused by a client and by a server */
  json_t *tablets = json_object_get(j, "tablets");
  json_object_set_new(json_array_get(tablets, 1), "end", json_string("r3"));
  json_object_set_new(json_array_get(tablets, 2), "start", json_string("r3"));
  assert_int_equal(json_dump_file(j, cfg2, 0), 0);
  json_decref(j);
  pc_db_t *db = pc_db_open_config(cfg2, &err);
  if (db || err.code != PC_INVALID || !strstr(err.text, "tablet t2: the configuration gives it rows [acct25, r3)") ||
      !strstr(err.text, "holds [acct25, r2)"))
    fail_msg("a client with t2's rows changed: %s", db ? "opened" : err.text);
  code = run_tablet_server(fx, cfg2, "t3", log, 120000);
  out = tu_slurp(log);
  if (code <= 0 || !strstr(out, "tablet t3: the configuration gives it rows [r3, end)"))
    fail_msg("a server of t3 with its rows changed exited with %d, saying:\n%s", code, out);
  free(out);
  stop_cluster_checked(fx);
}

/* ---- 5. the oracle killed and restarted never goes back ----------------- */

#define TS_PER_THREAD 100000

typedef struct ts_state {
  pc_db_t *db;
  atomic_int phase; /* 0 before the kill, 1 while down, 2 after the restart */
  atomic_int stop;
  atomic_int before_min_count, after_min_count;
} ts_state_t;

typedef struct ts_worker {
  ts_state_t *s;
  uint64_t max_before, min_after;
  int n_before, n_after, n_failed, n_total;
  int not_increasing;
  uint64_t last;
  char failure[400];
} ts_worker_t;

static void *ts_worker(void *arg) {
  ts_worker_t *w = arg;
  w->min_after = UINT64_MAX;
  while (!atomic_load(&w->s->stop) && w->n_total < TS_PER_THREAD) {
    int phase_before = atomic_load(&w->s->phase);
    uint64_t ts = 0;
    pc_error_t err;
    pc_status_t st = pc_db_timestamp(w->s->db, 2000, &ts, &err);
    int phase_after = atomic_load(&w->s->phase);
    if (st != PC_OK) {
      w->n_failed++;
      if (phase_before == 0 && phase_after == 0)
        snprintf(w->failure, sizeof w->failure, "%s: %s", pc_status_name(st), err.text);
      sleep_ms(5);
      continue;
    }
    w->n_total++;
    if (ts <= w->last) w->not_increasing++;
    w->last = ts;
    if (phase_before == 0 && phase_after == 0) {
      if (ts > w->max_before) w->max_before = ts;
      w->n_before++;
    } else if (phase_before == 2) {
      if (ts < w->min_after) w->min_after = ts;
      w->n_after++;
    }
  }
  return NULL;
}

static int min_count(ts_worker_t *w, int n, int after) {
  int m = INT32_MAX;
  for (int i = 0; i < n; i++) {
    int c = after ? w[i].n_after : w[i].n_before; /* racy read: only a progress hint */
    if (c < m) m = c;
  }
  return m;
}

/* A tablet server that was down while a garbage-collection pass published
 * its safe point (the pass could not reach it, while the other tablets
 * deleted below it) starts with that safe point, read from ZooKeeper: it
 * refuses the reads the others refuse, here a read of a snapshot taken
 * before the safe point. */
static void test_tablet_loads_published_safe_point(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.json", fx->dir);
  pc_error_t err;
  pc_config_t *cfg = pc_config_load(path, &err);
  if (!cfg) fail_msg("%s: %s", path, err.text);
  pc_db_t *db = open_config(path);
  pc_txn_t *old = pc_txn_begin(db, &err); /* its snapshot: below the safe point */
  if (!old) fail_msg("begin: %s", err.text);
  pc_txn_set_timeout_ms(old, 20000);
  uint64_t ts = 0;
  if (pc_db_timestamp(db, 20000, &ts, &err) != PC_OK) fail_msg("timestamp: %s", err.text);
  assert_true(ts > pc_txn_start_ts(old));
  pid_t t1 = tu_cluster_pid(fx->dir, 2);
  assert_true(t1 > 0);
  assert_int_equal(kill(t1, SIGKILL), 0);
  assert_true(wait_dead_unreaped(t1, 10000));
  /* the pass that t1 misses: its safe point published, as the other tablets
   * do before they delete */
  pc_zk_options_t zo = pc_config_zk(cfg);
  pc_coord_t *c = pc_coord_open(&zo, 0, 20000, &err);
  if (!c) fail_msg("coordination: %s", err.text);
  uint64_t published = 0;
  if (pc_coord_publish_safe_point(c, ts, 20000, &published, &err) != PC_OK)
    fail_msg("publish: %s", err.text);
  pc_coord_close(c);
  assert_true(published >= ts);
  tu_cluster_restart(fx->dir, 2);
  assert_int_equal(waitpid(t1, NULL, 0), t1);
  /* row "a" is t1's ("" .. "acct25") */
  char *v = NULL;
  size_t n = 0;
  pc_status_t st = pc_txn_get(old, "bank", "a", 1, "bal", 3, &v, &n, &err);
  pc_free(v);
  if (st != PC_ABORTED || !strstr(err.text, "safe point"))
    fail_msg("a read of snapshot %llu on the restarted t1 (published safe point %llu): %s: %s",
             (unsigned long long)pc_txn_start_ts(old), (unsigned long long)published,
             pc_status_name(st), st == PC_OK ? "" : err.text);
  pc_txn_destroy(old);
  pc_db_close(db);
  pc_config_free(cfg);
}

/* A transaction whose write another transaction of this process committed
 * after its start is refused before it prewrites (core/recent.h), with the
 * conflict the store would have given; a handle of its own (another process)
 * meets the store's check as before; a transaction begun after the commit
 * is not refused. */
static pc_status_t write_two_tablets(pc_txn_t *t, const char *v, pc_error_t *err) {
  pc_status_t st = pc_txn_set(t, "bank", "a", 1, "memo", 4, v, strlen(v), err); /* t1 */
  if (st == PC_OK) st = pc_txn_set(t, "bank", "s00", 3, "memo", 4, v, strlen(v), err); /* t3 */
  return st == PC_OK ? pc_txn_commit(t, err) : st;
}

static pc_txn_t *begun(pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("begin: %s", err.text);
  pc_txn_set_timeout_ms(t, 20000);
  char *v = NULL;
  size_t n = 0;
  pc_status_t st = pc_txn_get(t, "bank", "a", 1, "memo", 4, &v, &n, &err); /* its snapshot */
  pc_free(v);
  if (st != PC_OK && st != PC_NOT_FOUND) fail_msg("read: %s", err.text);
  return t;
}

typedef struct committing {
  pc_txn_t *t;
  const char *v;
  pc_status_t st;
  pc_error_t err;
} committing_t;

static void *commit_two_tablets(void *arg) {
  committing_t *c = arg;
  c->st = write_two_tablets(c->t, c->v, &c->err);
  return NULL;
}

/* Whether bank/a/memo is locked, as a reader of other finds it. */
static int memo_locked(pc_db_t *other) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(other, &err);
  if (!t) fail_msg("begin: %s", err.text);
  pc_txn_set_timeout_ms(t, 300); /* how long its read waits for a lock */
  char *v = NULL;
  size_t n = 0;
  pc_status_t st = pc_txn_get(t, "bank", "a", 1, "memo", 4, &v, &n, &err);
  pc_free(v);
  pc_txn_destroy(t);
  return st != PC_OK && st != PC_NOT_FOUND;
}

static void test_conflict_known_before_prewrite(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.json", fx->dir);
  pc_db_t *db = open_config(path), *other = open_config(path);
  pc_error_t err;
  pc_txn_t *loser = begun(db), *stranger = begun(other), *winner = begun(db);
  if (write_two_tablets(winner, "w", &err) != PC_OK) fail_msg("winner: %s", err.text);
  pc_status_t st = write_two_tablets(loser, "l", &err);
  if (st != PC_CONFLICT || !strstr(err.text, "write conflict on bank/a/memo") ||
      !strstr(err.text, "by this process"))
    fail_msg("the loser of this process: %s: %s", pc_status_name(st), err.text);
  st = write_two_tablets(stranger, "s", &err); /* the store's own check */
  if (st != PC_CONFLICT || strstr(err.text, "by this process"))
    fail_msg("the loser of another process: %s: %s", pc_status_name(st), err.text);
  pc_txn_t *later = begun(db);
  if (write_two_tablets(later, "x", &err) != PC_OK) fail_msg("a later writer: %s", err.text);
  pc_txn_t *t = begun(db);
  char *v = NULL;
  size_t n = 0;
  if (pc_txn_get(t, "bank", "s00", 3, "memo", 4, &v, &n, &err) != PC_OK) fail_msg("%s", err.text);
  assert_int_equal(n, 1);
  assert_memory_equal(v, "x", 1);
  pc_free(v);
  pc_txn_destroy(t);
  /* a commit of this process in flight (held between its prewrite and its
   * commit point): another of the same cells waits for its outcome, then
   * loses before its prewrite; without the wait it would prewrite and meet
   * the held one's lock */
  pc_txn_t *waiter = begun(db);
  committing_t held = {begun(db), "h", PC_OK, {0}}, second = {waiter, "w2", PC_OK, {0}};
  if (pc_failpoints_configure("txn.commit.before_primary=pause", &err) != PC_OK)
    fail_msg("%s", err.text);
  pthread_t th, tw;
  assert_int_equal(pthread_create(&th, NULL, commit_two_tablets, &held), 0);
  uint64_t until = now_ms() + 60000;
  int locked;
  while (!(locked = memo_locked(other)) && now_ms() < until) sleep_ms(20);
  if (!locked) {
    pc_failpoints_configure(NULL, &err);
    pthread_join(th, NULL);
    fail_msg("the held commit did not prewrite: %s", held.err.text);
  }
  assert_int_equal(pthread_create(&tw, NULL, commit_two_tablets, &second), 0);
  sleep_ms(300); /* the second reaches its wait (not asserted: it may come later) */
  if (pc_failpoints_configure(NULL, &err) != PC_OK) fail_msg("%s", err.text);
  pthread_join(th, NULL);
  pthread_join(tw, NULL);
  if (held.st != PC_OK) fail_msg("the held commit: %s", held.err.text);
  if (second.st != PC_CONFLICT || !strstr(second.err.text, "by this process"))
    fail_msg("the commit after one in flight: %s: %s", pc_status_name(second.st),
             second.err.text);
  pc_txn_destroy(held.t);
  pc_txn_destroy(waiter);
  pc_txn_destroy(later);
  pc_txn_destroy(stranger);
  pc_txn_destroy(winner);
  pc_txn_destroy(loser);
  pc_db_close(other);
  pc_db_close(db);
}

static void test_oracle_kill_restart(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  char *cfg = client_config(fx->dir, "ts-client", 3000, 10000);
  static ts_state_t s;
  memset(&s, 0, sizeof s);
  s.db = open_config(cfg);
  enum { NT = 3 };
  static ts_worker_t w[NT];
  memset(w, 0, sizeof w);
  track_stop(&s.stop);
  for (int i = 0; i < NT; i++) {
    w[i].s = &s;
    start_thread(ts_worker, &w[i]);
  }
  uint64_t deadline = now_ms() + 60000;
  while (min_count(w, NT, 0) < 200 && now_ms() < deadline) sleep_ms(10);

  atomic_store(&s.phase, 1);
  /* the leader: the standby takes over, then the killed one comes back as a standby */
  int leader = tu_cluster_tso_leader(fx->dir);
  assert_true(leader == 0 || leader == 1);
  pid_t tso = tu_cluster_pid(fx->dir, leader);
  assert_true(tso > 0);
  assert_int_equal(kill(tso, SIGKILL), 0);
  assert_true(wait_dead_unreaped(tso, 10000));
  sleep_ms(200); /* let the clients find it gone (not asserted) */
  tu_cluster_restart(fx->dir, leader);
  assert_int_equal(waitpid(tso, NULL, 0), tso);
  atomic_store(&s.phase, 2);
  deadline = now_ms() + 60000;
  while (min_count(w, NT, 1) < 200 && now_ms() < deadline) sleep_ms(10);
  join_threads();

  uint64_t max_before = 0, min_after = UINT64_MAX;
  for (int i = 0; i < NT; i++) {
    if (w[i].failure[0]) fail_msg("thread %d failed before the kill: %s", i, w[i].failure);
    if (w[i].n_before == 0 || w[i].n_after == 0)
      fail_msg("thread %d: %d timestamps before the kill, %d after the restart", i,
               w[i].n_before, w[i].n_after);
    assert_int_equal(w[i].not_increasing, 0);
    if (w[i].max_before > max_before) max_before = w[i].max_before;
    if (w[i].min_after < min_after) min_after = w[i].min_after;
  }
  fprintf(stderr, "oracle kill: max before %llu, min after %llu\n",
          (unsigned long long)max_before, (unsigned long long)min_after);
  assert_true(min_after > max_before);

  /* a transaction after the restart sees what was committed before it */
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(s.db, &err);
  assert_non_null(t);
  assert_true(pc_txn_start_ts(t) > max_before);
  pc_txn_destroy(t);
  pc_db_close(s.db);
  stop_cluster_checked(fx);
  free(cfg);
}

/* ---- 6. hostile input to every daemon ----------------------------------- */

#define FRAME_HDR 15
#define OP_HELLO 0x01
#define OP_PING 0x02
#define PC_STATUS_INVALID 7

typedef struct daemon_ep {
  const char *name;
  int port;
  int index; /* tu_cluster_pid index */
  uint8_t first_op, last_op; /* the service's own ops */
  uint8_t info_op;           /* the op whose empty body is valid */
} daemon_ep_t;

static int endpoint_port(json_t *o) {
  const char *ep = json_string_value(json_object_get(o, "listen"));
  const char *colon = ep ? strrchr(ep, ':') : NULL;
  return colon ? atoi(colon + 1) : -1;
}

static int ready_file_port(const char *dir, const char *log) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.ready", dir, log);
  json_t *j = json_load_file(path, 0, NULL);
  assert_non_null(j);
  int port = endpoint_port(json_object_get(j, "tso"));
  json_decref(j);
  return port;
}

static int load_daemons(const char *dir, daemon_ep_t d[5]) {
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster.json", dir);
  json_t *j = json_load_file(path, 0, NULL);
  assert_non_null(j);
  d[0] = (daemon_ep_t){"tso", endpoint_port(json_object_get(j, "tso")), 0, 0x10, 0x11, 0x11};
  /* the standby answers every op, as unavailable */
  d[1] = (daemon_ep_t){"tso (standby)", ready_file_port(dir, "run/tso-2"), 1, 0x10, 0x11, 0x11};
  json_t *tablets = json_object_get(j, "tablets");
  static const char *const names[3] = {"tablet t1", "tablet t2", "tablet t3"};
  for (int i = 0; i < 3; i++)
    d[2 + i] = (daemon_ep_t){names[i], endpoint_port(json_array_get(tablets, (size_t)i)), 2 + i,
                             0x10, 0x18, 0x18};
  json_decref(j);
  for (int i = 0; i < 5; i++) assert_true(d[i].port > 0);
  return 5;
}

static int tcp_connect(int port, int timeout_s) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct timeval tv = {timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 0 when everything was sent; -1 when the peer closed or the send timed out. */
static int send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int recv_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    ssize_t r = recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

typedef struct frame {
  uint8_t version, op, status;
  uint64_t id;
  char body[4096];
  size_t len; /* bytes of the payload (only the first 4096 kept) */
} frame_t;

/* Reads one reply frame; 0 on success, -1 on EOF, error or timeout. */
static int read_frame(int fd, frame_t *f) {
  unsigned char h[FRAME_HDR];
  if (recv_all(fd, h, sizeof h) != 0) return -1;
  uint32_t len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
  if (len < 11 || len > (64u << 20)) return -1;
  f->version = h[4];
  f->op = h[5];
  f->status = h[6];
  f->id = 0;
  for (int i = 0; i < 8; i++) f->id = f->id << 8 | h[7 + i];
  f->len = len - 11;
  size_t keep = f->len < sizeof f->body ? f->len : sizeof f->body;
  if (recv_all(fd, f->body, keep) != 0) return -1;
  char sink[4096];
  for (size_t left = f->len - keep; left;) {
    size_t k = left < sizeof sink ? left : sizeof sink;
    if (recv_all(fd, sink, k) != 0) return -1;
    left -= k;
  }
  return 0;
}

/* 1 when the peer closes the connection (EOF or reset) within the socket's
 * receive timeout, reading and discarding whatever comes first. */
static int wait_closed(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r > 0) continue;
    if (r == 0) return 1;
    if (errno == EINTR) continue;
    return errno == ECONNRESET || errno == EPIPE;
  }
}

static void put_frame(pc_buf_t *b, uint32_t len_field, uint8_t version, uint8_t op, uint64_t id,
                      const void *body, size_t blen) {
  assert_int_equal(pc_buf_u32(b, len_field) || pc_buf_u8(b, version) || pc_buf_u8(b, op) ||
                       pc_buf_u8(b, 0) || pc_buf_u64(b, id),
                   0);
  if (blen) assert_int_equal(pc_buf_append(b, body, blen), 0);
}

static void frame_of(pc_buf_t *b, uint8_t op, uint64_t id, const void *body, size_t blen) {
  put_frame(b, (uint32_t)(11 + blen), 1, op, id, body, blen);
}

/* A PING on fd answers OK. */
static void expect_ping(int fd, const daemon_ep_t *d, const char *after) {
  pc_buf_t b = {0};
  frame_of(&b, OP_PING, 0x5157, NULL, 0);
  if (send_all(fd, b.p, b.len) != 0) fail_msg("%s: cannot send a ping after %s", d->name, after);
  pc_buf_free(&b);
  frame_t f;
  if (read_frame(fd, &f) != 0) fail_msg("%s: no ping reply after %s", d->name, after);
  if (f.op != (OP_PING | 0x80) || f.status != 0 || f.id != 0x5157)
    fail_msg("%s: bad ping reply after %s: op 0x%02x status %u", d->name, after, f.op, f.status);
}

/* An error reply (status != 0, a message) to request id, then the connection closes. */
static void expect_fault(int fd, const daemon_ep_t *d, const char *what, const char *word) {
  frame_t f;
  if (read_frame(fd, &f) != 0) fail_msg("%s: no error reply to %s", d->name, what);
  if (f.status == 0 || f.len == 0) fail_msg("%s: %s answered status %u", d->name, what, f.status);
  f.body[f.len < sizeof f.body ? f.len : sizeof f.body - 1] = '\0';
  if (word && !strstr(f.body, word))
    fail_msg("%s: the error for %s does not say '%s': %s", d->name, what, word, f.body);
  if (!wait_closed(fd)) fail_msg("%s: the connection stayed open after %s", d->name, what);
}

static uint64_t hrng = 0x2545F4914F6CDD1Dull;
static uint32_t hrand(void) {
  hrng ^= hrng << 13;
  hrng ^= hrng >> 7;
  hrng ^= hrng << 17;
  return (uint32_t)(hrng >> 13);
}

/* Malformed bodies of every op of d, pipelined on one connection. */
static void hostile_bodies(int fd, const daemon_ep_t *d) {
  pc_buf_t b = {0};
  enum { KINDS = 6 };
  uint64_t id = 1000;
  int sent = 0;
  for (int op = d->first_op; op <= d->last_op; op++) {
    for (int k = 0; k < KINDS; k++) {
      char body[96];
      size_t n = 0;
      switch (k) {
        case 0: n = 0; break;                                 /* empty */
        case 1: body[0] = (char)0xff, n = 1; break;            /* one byte */
        case 2: memcpy(body, "\xff\xff\xff\xff" "garbage", 11), n = 11; break; /* huge str/count */
        case 3: memcpy(body, "\x00\x00\x00\x03tbl\x00\x00\x00\x09" "ab", 13), n = 13; break;
        case 4: /* random */
          n = 1 + hrand() % 90;
          for (size_t i = 0; i < n; i++) body[i] = (char)hrand();
          break;
        default: /* a cell with a 2 GiB row, then garbage */
          memcpy(body, "\x00\x00\x00\x01t\x7f\xff\xff\xff" "rowrowrow", 18), n = 18;
          break;
      }
      frame_of(&b, (uint8_t)op, id + (uint64_t)(op * KINDS + k), body, n);
      sent++;
    }
  }
  if (send_all(fd, b.p, b.len) != 0) fail_msg("%s: sending malformed bodies failed", d->name);
  pc_buf_free(&b);
  for (int i = 0; i < sent; i++) {
    frame_t f;
    if (read_frame(fd, &f) != 0)
      fail_msg("%s: reply %d of %d to malformed bodies missing", d->name, i, sent);
    uint64_t rel = f.id - id;
    int op = (int)(rel / KINDS), k = (int)(rel % KINDS);
    if (f.id < id || op < d->first_op || op > d->last_op || f.op != (uint8_t)(op | 0x80))
      fail_msg("%s: reply with id %llu op 0x%02x matches no request", d->name,
               (unsigned long long)f.id, f.op);
    /* a tablet answers OK at the rpc level with its store status first in the body */
    int error = f.status != 0 || (d->index >= 2 && f.len >= 1 && f.body[0] != 0);
    int must_fail = k == 1 || k == 2 || k == 3 || k == 5 || (k == 0 && op != d->info_op);
    if (must_fail && !error)
      fail_msg("%s: op 0x%02x accepted malformed body kind %d", d->name, op, k);
    if (error && f.len == 0) fail_msg("%s: op 0x%02x: an error without a message", d->name, op);
  }
  expect_ping(fd, d, "malformed bodies");
}

/* One hostile connection of the given kind. */
static void hostile_connection(const daemon_ep_t *d, int kind) {
  int fd = tcp_connect(d->port, 15);
  if (fd < 0) fail_msg("%s: cannot connect to port %d", d->name, d->port);
  pc_buf_t b = {0};
  switch (kind) {
    case 0: { /* a truncated frame, then the client goes away */
      put_frame(&b, 11 + 100, 1, d->first_op, 1, "0123456789", 10);
      send_all(fd, b.p, b.len);
      shutdown(fd, SHUT_WR);
      if (!wait_closed(fd)) fail_msg("%s: a truncated frame kept the connection", d->name);
      break;
    }
    case 1: /* an absurd length */
      put_frame(&b, 0xFFFFFFFFu, 1, d->first_op, 2, "xxxx", 4);
      send_all(fd, b.p, b.len);
      expect_fault(fd, d, "a length of 0xFFFFFFFF", "length");
      break;
    case 2: /* a length below the header */
      put_frame(&b, 3, 1, d->first_op, 3, NULL, 0);
      send_all(fd, b.p, b.len);
      expect_fault(fd, d, "a length of 3", "length");
      break;
    case 3: /* a bad version byte */
      put_frame(&b, 11, 9, OP_PING, 4, NULL, 0);
      send_all(fd, b.p, b.len);
      expect_fault(fd, d, "version 9", "version");
      break;
    case 4: { /* unknown opcodes answer an error and keep the connection */
      static const uint8_t ops[] = {0x7f, 0x05, 0x00, 0x90, 0xff, 0x60};
      for (size_t i = 0; i < sizeof ops; i++) frame_of(&b, ops[i], 100 + i, "abc", 3);
      send_all(fd, b.p, b.len);
      for (size_t i = 0; i < sizeof ops; i++) {
        frame_t f;
        if (read_frame(fd, &f) != 0) fail_msg("%s: no reply to op 0x%02x", d->name, ops[i]);
        int err = f.status != 0 || (d->index >= 2 && f.len && f.body[0] != 0);
        if (!err || f.len == 0)
          fail_msg("%s: unknown op 0x%02x answered status %u", d->name, f.op & 0x7f, f.status);
      }
      expect_ping(fd, d, "unknown opcodes");
      break;
    }
    case 5: { /* random bytes, then the client goes away */
      char junk[256];
      for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)hrand();
      send_all(fd, junk, sizeof junk);
      shutdown(fd, SHUT_WR);
      if (!wait_closed(fd)) fail_msg("%s: random bytes kept the connection", d->name);
      break;
    }
    case 6: /* malformed bodies of every real op */
      hostile_bodies(fd, d);
      break;
    case 7: { /* most of a 64 MiB frame, then gone: the server must let it go */
      put_frame(&b, 11 + (64u << 20), 1, d->first_op, 7, NULL, 0);
      size_t chunk = 1u << 20;
      char *zeros = calloc(1, chunk);
      assert_non_null(zeros);
      assert_int_equal(pc_buf_append(&b, zeros, chunk), 0);
      free(zeros);
      send_all(fd, b.p, b.len);
      shutdown(fd, SHUT_WR);
      if (!wait_closed(fd)) fail_msg("%s: a partial 64 MiB frame kept the connection", d->name);
      break;
    }
    case 8: { /* HELLO with junk on a server without a secret, then many pipelined pings */
      frame_of(&b, OP_HELLO, 8, "whatever", 8);
      for (int i = 0; i < 200; i++) frame_of(&b, OP_PING, 1000 + (uint64_t)i, NULL, 0);
      send_all(fd, b.p, b.len);
      for (int i = 0; i < 201; i++) {
        frame_t f;
        if (read_frame(fd, &f) != 0 || f.status != 0)
          fail_msg("%s: pipelined reply %d missing or failed", d->name, i);
      }
      break;
    }
    default: { /* a frame cut right after its header, then a reset */
      put_frame(&b, 11 + 50, 1, d->first_op, 9, "abc", 3);
      send_all(fd, b.p, b.len);
      struct linger lg = {1, 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg); /* close sends RST */
      break;
    }
  }
  pc_buf_free(&b);
  close(fd);
}

/* A connection sending one byte per 100 ms: a complete (slow) PING is
 * served; a frame that never completes gets the connection closed. */
typedef struct slow_arg {
  const daemon_ep_t *d;
  atomic_int *stop;
  atomic_int finished;
  int ping_ok, closed, bytes;
  char failure[400];
} slow_arg_t;

static void *slow_sender(void *arg) {
  slow_arg_t *s = arg;
  int fd = tcp_connect(s->d->port, 20);
  if (fd < 0) {
    snprintf(s->failure, sizeof s->failure, "cannot connect");
    atomic_store(&s->finished, 1);
    return NULL;
  }
  pc_buf_t b = {0};
  frame_of(&b, OP_PING, 77, NULL, 0);
  for (size_t i = 0; i < b.len && !atomic_load(s->stop); i++) {
    if (send_all(fd, b.p + i, 1) != 0) {
      snprintf(s->failure, sizeof s->failure, "slow ping: send failed at byte %zu", i);
      goto out;
    }
    sleep_ms(100);
  }
  if (atomic_load(s->stop)) goto out; /* the test is over: no reply to wait for */
  frame_t f;
  s->ping_ok = read_frame(fd, &f) == 0 && f.op == (OP_PING | 0x80) && f.status == 0 && f.id == 77;
  /* now a frame that claims 1000 bytes and dribbles: at most 400 bytes (40 s) */
  b.len = 0;
  put_frame(&b, 11 + 1000, 1, s->d->first_op, 78, NULL, 0);
  for (int i = 0; i < 1000; i++) (void)pc_buf_u8(&b, (uint8_t)'z'); /* no cmocka asserts off the main thread */
  for (size_t i = 0; i < 400 && !s->closed && !atomic_load(s->stop); i++) {
    if (send_all(fd, b.p + i, 1) != 0) s->closed = 1;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE))) s->closed = 1;
    s->bytes = (int)i + 1;
    sleep_ms(100);
  }
out:
  pc_buf_free(&b);
  close(fd);
  atomic_store(&s->finished, 1);
  return NULL;
}

/* A normal client running transactions all along. */
typedef struct normal_arg {
  pc_db_t *db;
  atomic_int stop;
  int ok, failed;
  char failure[400];
} normal_arg_t;

static void *normal_client(void *arg) {
  normal_arg_t *n = arg;
  static const char *const rows[3] = {"acct05", "acct30", "s07"};
  while (!atomic_load(&n->stop)) {
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(n->db, &err);
    pc_status_t st = t ? PC_OK : err.code;
    for (int i = 0; i < 3 && st == PC_OK; i++) {
      char *v = NULL;
      size_t vl = 0;
      long c = 0;
      st = pc_txn_get(t, "normal", rows[i], strlen(rows[i]), "n", 1, &v, &vl, &err);
      if (st == PC_OK) {
        char buf[32];
        snprintf(buf, sizeof buf, "%.*s", (int)vl, v);
        c = atol(buf);
        pc_free(v);
      } else if (st == PC_NOT_FOUND) {
        st = PC_OK;
      }
      char nv[32];
      snprintf(nv, sizeof nv, "%ld", c + 1);
      if (st == PC_OK) st = pc_txn_set(t, "normal", rows[i], strlen(rows[i]), "n", 1, nv,
                                       strlen(nv), &err);
    }
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    pc_txn_destroy(t);
    if (st == PC_OK) {
      n->ok++;
    } else {
      n->failed++;
      snprintf(n->failure, sizeof n->failure, "%s: %s", pc_status_name(st), err.text);
    }
    sleep_ms(5);
  }
  return NULL;
}

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

static void test_hostile_input(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  daemon_ep_t d[5];
  load_daemons(fx->dir, d);
  char *cfg = client_config(fx->dir, "normal-client", 3000, 10000);
  static normal_arg_t normal;
  memset(&normal, 0, sizeof normal);
  normal.db = open_config(cfg);
  static daemon_ep_t sd[5];
  memcpy(sd, d, sizeof sd);
  track_stop(&normal.stop);
  start_thread(normal_client, &normal);
  static atomic_int stop_slow;
  static slow_arg_t slow[5];
  atomic_store(&stop_slow, 0);
  memset(slow, 0, sizeof slow);
  track_stop(&stop_slow);
  for (int i = 0; i < 5; i++) {
    slow[i].d = &sd[i];
    slow[i].stop = &stop_slow;
    start_thread(slow_sender, &slow[i]);
  }

  /* 100 hostile connections to every daemon, of every kind in turn */
  enum { CONNS = 100, KINDS = 10 };
  for (int c = 0; c < CONNS; c++)
    for (int i = 0; i < 5; i++) hostile_connection(&d[i], c % KINDS);

  /* the slow senders end by themselves (their last frame is cut off) */
  for (int i = 0; i < 5; i++) {
    uint64_t end = now_ms() + 60000;
    while (!atomic_load(&slow[i].finished) && now_ms() < end) sleep_ms(50);
  }
  join_threads();

  for (int i = 0; i < 5; i++) {
    if (slow[i].failure[0]) fail_msg("%s: slow sender: %s", d[i].name, slow[i].failure);
    if (!slow[i].ping_ok) fail_msg("%s: a PING sent one byte per 100 ms was not answered", d[i].name);
    if (!slow[i].closed)
      fail_msg("%s: a frame dribbled for %d bytes (one per 100 ms) was never cut off", d[i].name,
               slow[i].bytes);
  }
  fprintf(stderr, "hostile: normal client committed %d transactions meanwhile (%d failed)\n",
          normal.ok, normal.failed);
  if (normal.failed) fail_msg("the normal client failed %d times: %s", normal.failed, normal.failure);
  assert_true(normal.ok >= 10);

  /* every daemon is alive, still serves, and stayed small */
  for (int i = 0; i < 5; i++) {
    pid_t pid = tu_cluster_pid(fx->dir, d[i].index);
    if (!daemon_alive(pid)) fail_msg("%s (pid %d) died; see its log in %s", d[i].name, pid, fx->dir);
    int fd = tcp_connect(d[i].port, 10);
    if (fd < 0) fail_msg("%s: refuses connections after the hostile input", d[i].name);
    expect_ping(fd, &d[i], "the hostile input");
    close(fd);
    long kib = rss_kib(pid);
    fprintf(stderr, "hostile: %s RSS %ld KiB\n", d[i].name, kib);
    assert_true(kib > 0);
    if (kib > 512 * 1024) fail_msg("%s uses %ld KiB after the hostile input", d[i].name, kib);
  }
  /* a transaction and a timestamp still work, and the counters are consistent */
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(normal.db, &err);
  assert_non_null(t);
  static const char *const rows[3] = {"acct05", "acct30", "s07"};
  char want[32];
  snprintf(want, sizeof want, "%d", normal.ok);
  for (int i = 0; i < 3; i++) {
    char *v = tu_get(t, "normal", rows[i], "n");
    assert_non_null(v);
    assert_string_equal(v, want);
    free(v);
  }
  tu_set(t, "normal", "acct05", "n", "done");
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  pc_txn_destroy(t);
  uint64_t ts;
  assert_int_equal(pc_db_timestamp(normal.db, 5000, &ts, &err), PC_OK);
  pc_db_close(normal.db);
  stop_cluster_checked(fx);
  free(cfg);
}

/* ---- 7. a wrong secret -------------------------------------------------- */

/* A client configuration for the `run` daemon whose ready file is ready. */
static char *secret_client_config(const char *dir, const char *ready, const char *name,
                                  const char *secret) {
  json_t *r = json_load_file(ready, 0, NULL);
  assert_non_null(r);
  json_t *tab = json_object_get(r, "tablets");
  char *text = NULL, *path = NULL;
  char secret_kv[128] = "";
  if (secret) snprintf(secret_kv, sizeof secret_kv, "\"secret\":\"%s\",", secret);
  int rc = asprintf(
      &text,
      "{%s\"store\":{\"timeout_ms\":3000},"
      "\"zookeeper\":{\"connect\":\"%s\",\"root\":\"/percolator/secret\"},"
      "\"tso\":{\"listen\":\"%s\"},"
      "\"tablets\":[{\"name\":\"a\",\"listen\":\"%s\",\"end\":\"m\"},"
      "{\"name\":\"b\",\"listen\":\"%s\",\"start\":\"m\"}]}\n",
      secret_kv, tu_zk_shared(),
      json_string_value(json_object_get(json_object_get(r, "tso"), "listen")),
      json_string_value(json_object_get(json_object_get(tab, "a"), "listen")),
      json_string_value(json_object_get(json_object_get(tab, "b"), "listen")));
  assert_true(rc > 0);
  json_decref(r);
  if (asprintf(&path, "%s/%s.json", dir, name) < 0) abort();
  tu_write_text(path, text);
  free(text);
  return path;
}

static void test_wrong_secret(void **state) {
  fixture_t *fx = *state;
  NEED_CLUSTER(fx);
  char cfg[4200], ready[4200], logp[4200], text[2048];
  snprintf(cfg, sizeof cfg, "%s/run.json", fx->dir);
  snprintf(ready, sizeof ready, "%s/run.ready", fx->dir);
  snprintf(logp, sizeof logp, "%s/run.log", fx->dir);
  snprintf(text, sizeof text,
           "{\"data_dir\":\"%s/data\",\"secret\":\"s3cret\",\"log\":{\"level\":\"warn\"},"
           "\"zookeeper\":{\"connect\":\"%s\",\"root\":\"/percolator/secret\"},"
           "\"tso\":{\"listen\":\"127.0.0.1:0\"},"
           "\"tablets\":[{\"name\":\"a\",\"listen\":\"127.0.0.1:0\",\"end\":\"m\"},"
           "{\"name\":\"b\",\"listen\":\"127.0.0.1:0\",\"start\":\"m\"}]}\n",
           fx->dir, tu_zk_shared());
  tu_write_text(cfg, text);
  /* the global --config form (the verb-position form is tested by test_cluster_cli.sh) */
  const char *argv[] = {cli_path(), "--config", cfg, "run", "--ready-file", ready, NULL};
  pid_t pid = tu_spawn_logged(logp, argv);
  fx_add_pid(fx, pid);
  struct stat sb;
  uint64_t deadline = now_ms() + 30000;
  while (stat(ready, &sb) != 0) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      fx_forget_pid(fx, pid);
      fail_msg("percolator run exited (status 0x%x); see %s", st, logp);
    }
    if (now_ms() > deadline) fail_msg("percolator run did not become ready; see %s", logp);
    sleep_ms(10);
  }
  char *good = secret_client_config(fx->dir, ready, "good", "s3cret");
  char *bad = secret_client_config(fx->dir, ready, "bad", "wrong");
  char *none = secret_client_config(fx->dir, ready, "none", NULL);

  /* the right secret works */
  pc_db_t *db = open_config(good);
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("begin with the right secret: %s", err.text);
  tu_set(t, "s", "alpha", "c", "1");
  tu_set(t, "s", "zulu", "c", "2");
  if (pc_txn_commit(t, &err) != PC_OK) fail_msg("commit with the right secret: %s", err.text);
  pc_txn_destroy(t);
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  char *v = tu_get(t, "s", "zulu", "c");
  assert_string_equal(v, "2");
  free(v);
  pc_txn_destroy(t);
  assert_true(pc_db_session(db) != 0);
  pc_db_close(db);

  /* a wrong secret: opening is lazy, the first transaction fails clearly */
  db = pc_db_open_config(bad, &err);
  if (!db) fail_msg("pc_db_open_config with a wrong secret should open lazily: %s", err.text);
  t = pc_txn_begin(db, &err);
  assert_null(t);
  fprintf(stderr, "wrong secret: %s: %s\n", pc_status_name(err.code), err.text);
  assert_int_equal(err.code, PC_DENIED);
  if (!strstr(err.text, "secret") && !strstr(err.text, "HELLO"))
    fail_msg("the error does not name the secret: %s", err.text);
  uint64_t ts;
  assert_int_not_equal(pc_db_timestamp(db, 2000, &ts, &err), PC_OK);
  pc_db_close(db);

  /* no secret at all fails too, naming HELLO */
  db = pc_db_open_config(none, &err);
  assert_non_null(db);
  t = pc_txn_begin(db, &err);
  assert_null(t);
  fprintf(stderr, "no secret: %s: %s\n", pc_status_name(err.code), err.text);
  assert_int_equal(err.code, PC_DENIED);
  if (!strstr(err.text, "secret") && !strstr(err.text, "HELLO"))
    fail_msg("the error does not name the secret: %s", err.text);
  pc_db_close(db);

  /* a raw connection without HELLO is refused and closed */
  json_t *r = json_load_file(ready, 0, NULL);
  assert_non_null(r);
  int port = endpoint_port(json_object_get(json_object_get(r, "tablets"), "a"));
  json_decref(r);
  int fd = tcp_connect(port, 10);
  assert_true(fd >= 0);
  pc_buf_t b = {0};
  frame_of(&b, OP_PING, 1, NULL, 0);
  assert_int_equal(send_all(fd, b.p, b.len), 0);
  pc_buf_free(&b);
  daemon_ep_t ep = {"run (secret)", port, -1, 0x10, 0x18, 0x18};
  expect_fault(fd, &ep, "a PING without HELLO", "HELLO");
  close(fd);

  /* SIGTERM stops it cleanly */
  assert_int_equal(kill(pid, SIGTERM), 0);
  int st = 0;
  if (!wait_exit(pid, 30000, &st)) fail_msg("percolator run ignored SIGTERM");
  fx_forget_pid(fx, pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  check_logs_clean(fx->dir);
  free(good);
  free(bad);
  free(none);
}

int main(int argc, char **argv) {
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (n <= 0) return 70;
  self_exe[n] = '\0';
  if (argc >= 2 && strcmp(argv[1], "child-bank") == 0) return child_bank(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "child-crash") == 0) return child_crash(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bank_processes, setup_cluster, teardown),
      cmocka_unit_test_setup_teardown(test_kill_client_after_primary_prewrite, setup_cluster,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_kill_client_after_prewrite, setup_cluster, teardown),
      cmocka_unit_test_setup_teardown(test_kill_client_before_primary_commit, setup_cluster,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_kill_client_after_primary_commit, setup_cluster,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_tablet_kill_restart, setup_cluster, teardown),
      cmocka_unit_test_setup_teardown(test_tablet_kill_fails_fast, setup_cluster_long_session,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_tablet_owned_refused, setup_cluster, teardown),
      cmocka_unit_test_setup_teardown(test_oracle_kill_restart, setup_cluster, teardown),
      cmocka_unit_test_setup_teardown(test_conflict_known_before_prewrite, setup_cluster,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_tablet_loads_published_safe_point, setup_cluster,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_hostile_input, setup_cluster, teardown),
      cmocka_unit_test_setup_teardown(test_wrong_secret, setup_plain, teardown),
  };
  /* PC_TEST_FILTER=test_name (wildcards * and ?) runs a subset. */
  const char *filter = getenv("PC_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
