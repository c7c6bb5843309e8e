/* net_scale.c — cluster throughput as client processes are added.
 *
 * For each tablet count of --tablets (default 1,3) this starts a real daemon
 * through the playground (playground/playground.h, as `percolator
 * playground --one-process` does): one `percolator run`, every role in one
 * process (the oracle and the tablets, on 127.0.0.1 with ephemeral ports,
 * coordinated through a private standalone ZooKeeper server that this
 * program starts once, tests/zkharness.c; the binary is --cli, by default
 * apps/cli/percolator of the build directory this benchmark was built in);
 * its clients use the client configuration the playground writes. It preloads --keys accounts ("acct000000".., balance 1000)
 * whose rows are split evenly over the tablets' ranges, and then, for each
 * process count of --procs (default 1,2,4), forks that many client processes.
 * Each opens the cluster with pc_db_open_config and, once all are connected,
 * runs --threads threads for --seconds, each doing a mix of
 *   transfers  (1 - --read-pct): begin, read two random accounts, move 1..10
 *              from one to the other, commit (a two-row, usually two-tablet
 *              transaction: prewrite primary, prewrite secondary, commit)
 *   reads      (--read-pct, default 20%): begin, read two random accounts,
 *              commit (read-only)
 * and reports what it committed. Conflicts (PC_CONFLICT, PC_ABORTED and
 * PC_LOCKED) are counted, not retried. The baseline is the 1-process run of
 * the same daemon: scaling = txns_s(N processes) / txns_s(1 process); the
 * effect of tablets is txns_s(3 tablets) / txns_s(1 tablet) at each N.
 * After the runs of a tablet count the balances are summed in one snapshot
 * (they must total keys * 1000), and the playground stops the daemon with
 * SIGTERM and waits for it. Also reported: each run's CPU time and context switches per
 * transaction (transfers and reads) of the clients (wait4; this includes
 * opening and closing the cluster) and of the daemon (/proc/PID/stat and
 * /proc/PID/task/N/status), and the CPU other processes used meanwhile
 * (others_cores: machine noise). Every process and the temporary directory
 * are removed at the end, also on SIGINT or
 * SIGTERM. Output: one JSON document on stdout.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "playground/playground.h"
#include "tests/zkharness.h"

#define TABLE "bank"
#define COLUMN "bal"
#define MAX_LIST 8
#define MAX_PROCS 64
#define MAX_THREADS 64
#define MAX_TABLETS 16
#define INITIAL_BALANCE 1000
#define HBUCKETS BU_HBUCKETS /* latency histograms: see benchutil.h */

typedef struct params {
  const char *cli;
  int tablets[MAX_LIST], ntablets;
  int procs[MAX_LIST], nprocs;
  int threads;
  double seconds;
  uint64_t ops; /* per process, 0: bounded by seconds only */
  uint64_t keys;
  int read_pct;
  int sync;
  const char *zk_connect; /* the private ZooKeeper server */
  uint64_t seed;
  const char *parent;
} params_t;

/* What one client process reports through its pipe. */
typedef struct proc_result {
  int ok;             /* opened the cluster and ran */
  double seconds;     /* its measured interval */
  uint64_t committed; /* transfers committed */
  uint64_t reads;     /* read-only transactions */
  uint64_t conflicts, aborted, locked, errors;
  char first_error[PC_ERROR_TEXT + 32];
  uint64_t hist[HBUCKETS]; /* committed transfers' latency, ns */
} proc_result_t;

typedef struct client_thread {
  pc_db_t *db;
  const params_t *p;
  pthread_t tid;
  uint64_t rng;
  uint64_t deadline_ns, limit;
  proc_result_t r;
} client_thread_t;

static volatile sig_atomic_t interrupted;
static pid_t daemon_pid = -1;
static pid_t child_pids[MAX_PROCS + 1];
static int nchild;

/* ---- helpers ----------------------------------------------------------------- */

static void sleep_ms(long ms) {
  struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
}

/* Context switches (voluntary + involuntary) of every thread of process pid so far. */
static uint64_t proc_csw(pid_t pid) {
  char path[96], line[256];
  uint64_t total = 0;
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    char sp[160];
    snprintf(sp, sizeof sp, "/proc/%d/task/%.20s/status", (int)pid, de->d_name);
    FILE *f = fopen(sp, "re");
    if (!f) continue;
    while (fgets(line, sizeof line, f)) {
      unsigned long long v;
      if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
          sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
        total += v;
    }
    fclose(f);
  }
  closedir(d);
  return total;
}

static void account(char *out, size_t cap, uint64_t i) {
  snprintf(out, cap, "acct%06llu", (unsigned long long)i);
}

static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

/* Writes all of buf to fd. */
static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Reads n bytes from fd before deadline_ns (monotonic); -1 on EOF, timeout or interrupt. */
static int read_all(int fd, void *buf, size_t n, uint64_t deadline_ns) {
  char *p = buf;
  while (n) {
    uint64_t now = bu_now_ns();
    if (now >= deadline_ns || interrupted) return -1;
    struct pollfd pf = {fd, POLLIN, 0};
    int ms = (int)((deadline_ns - now) / 1000000u) + 1;
    int rc = poll(&pf, 1, ms > 200 ? 200 : ms);
    if (rc < 0 && errno != EINTR) return -1;
    if (rc <= 0) continue;
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Forks a child that dies with this process; returns its pid (0 in the child). */
static pid_t fork_child(void) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
  }
  return pid;
}

/* Waits for pid for at most ms, then SIGKILLs it; returns its wait status. */
static int reap(pid_t pid, long ms, struct rusage *ru) {
  int status = 0;
  for (long waited = 0;; waited += 5) {
    pid_t r = wait4(pid, &status, WNOHANG, ru);
    if (r == pid || (r < 0 && errno == ECHILD)) return status;
    if (waited >= ms) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, ru);
      return status;
    }
    sleep_ms(5);
  }
}

/* ---- the client process --------------------------------------------------------- */

static int parse_balance(const char *v, size_t n, long *out) {
  char buf[32];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, v, n);
  buf[n] = '\0';
  char *end;
  errno = 0;
  *out = strtol(buf, &end, 10);
  return errno || *end ? -1 : 0;
}

static void note_error(proc_result_t *r, pc_status_t st, const pc_error_t *e) {
  if (st == PC_CONFLICT) r->conflicts++;
  else if (st == PC_ABORTED) r->aborted++;
  else if (st == PC_LOCKED) r->locked++;
  else {
    r->errors++;
    if (!r->first_error[0]) snprintf(r->first_error, sizeof r->first_error, "%s", e->text);
  }
}

/* One transfer (or, with read_only, a two-account read); returns its status. */
static pc_status_t one_txn(client_thread_t *t, int read_only, pc_error_t *e) {
  uint64_t keys = t->p->keys;
  uint64_t a = bu_splitmix64(&t->rng) % keys, b = bu_splitmix64(&t->rng) % (keys - 1);
  if (b >= a) b++;
  char ra[32], rb[32];
  account(ra, sizeof ra, a);
  account(rb, sizeof rb, b);
  pc_txn_t *txn = pc_txn_begin(t->db, e);
  if (!txn) return e->code;
  char *va = NULL, *vb = NULL;
  size_t la = 0, lb = 0;
  long ba = 0, bb = 0;
  pc_status_t st = pc_txn_get(txn, TABLE, ra, strlen(ra), COLUMN, strlen(COLUMN), &va, &la, e);
  if (st == PC_OK) st = pc_txn_get(txn, TABLE, rb, strlen(rb), COLUMN, strlen(COLUMN), &vb, &lb, e);
  if (st == PC_OK && (parse_balance(va, la, &ba) || parse_balance(vb, lb, &bb))) {
    snprintf(e->text, sizeof e->text, "malformed balance in %s or %s", ra, rb);
    st = e->code = PC_CORRUPTION;
  }
  if (st == PC_OK && !read_only) {
    long amt = 1 + (long)(bu_splitmix64(&t->rng) % 10);
    char na[32], nb[32];
    int n1 = snprintf(na, sizeof na, "%ld", ba - amt), n2 = snprintf(nb, sizeof nb, "%ld", bb + amt);
    st = pc_txn_set(txn, TABLE, ra, strlen(ra), COLUMN, strlen(COLUMN), na, (size_t)n1, e);
    if (st == PC_OK)
      st = pc_txn_set(txn, TABLE, rb, strlen(rb), COLUMN, strlen(COLUMN), nb, (size_t)n2, e);
  }
  if (st == PC_OK) st = pc_txn_commit(txn, e);
  pc_free(va);
  pc_free(vb);
  pc_txn_destroy(txn);
  return st;
}

static void *client_thread_main(void *arg) {
  client_thread_t *t = arg;
  pc_error_t e;
  uint64_t n = 0;
  while (bu_now_ns() < t->deadline_ns && (t->limit == 0 || n < t->limit)) {
    int read_only = (int)(bu_splitmix64(&t->rng) % 100) < t->p->read_pct;
    uint64_t t0 = bu_now_ns();
    pc_status_t st = one_txn(t, read_only, &e);
    n++;
    if (st != PC_OK) {
      note_error(&t->r, st, &e);
      if (t->r.errors > 100) break; /* the cluster is gone; report what we have */
    } else if (read_only) {
      t->r.reads++;
    } else {
      t->r.committed++;
      t->r.hist[bu_bucket_of(bu_now_ns() - t0)]++;
    }
  }
  return NULL;
}

/* The body of client process index: open, report ready, wait for go, run, report. */
static void client_main(const params_t *p, const char *config, int index, int ready_fd,
                        int go_fd, int result_fd) {
  static proc_result_t res;
  memset(&res, 0, sizeof res);
  pc_error_t e;
  pc_db_t *db = pc_db_open_config(config, &e);
  char c = db ? 'r' : 'x';
  if (!db) snprintf(res.first_error, sizeof res.first_error, "pc_db_open_config: %s", e.text);
  if (write_all(ready_fd, &c, 1) != 0) _exit(1);
  if (db && read_all(go_fd, &c, 1, bu_now_ns() + 120000000000ull) != 0) {
    pc_db_close(db);
    _exit(1);
  }
  if (db) {
    client_thread_t *ts = calloc((size_t)p->threads, sizeof *ts);
    if (!ts) _exit(1);
    uint64_t t0 = bu_now_ns(), deadline = t0 + (uint64_t)(p->seconds * 1e9);
    for (int i = 0; i < p->threads; i++) {
      client_thread_t *t = &ts[i];
      t->db = db;
      t->p = p;
      t->rng = p->seed * 7919u + (uint64_t)index * 1000u + (uint64_t)i;
      t->deadline_ns = deadline;
      t->limit = p->ops ? p->ops / (uint64_t)p->threads + 1 : 0;
    }
    size_t tid_at = offsetof(client_thread_t, tid);
    int started = bu_start_threads(ts, p->threads, sizeof *ts, tid_at, client_thread_main);
    bu_join_threads(ts, started, sizeof *ts, tid_at);
    res.seconds = (double)(bu_now_ns() - t0) * 1e-9;
    res.ok = started == p->threads;
    for (int i = 0; i < started; i++) {
      proc_result_t *r = &ts[i].r;
      res.committed += r->committed;
      res.reads += r->reads;
      res.conflicts += r->conflicts;
      res.aborted += r->aborted;
      res.locked += r->locked;
      res.errors += r->errors;
      if (!res.first_error[0] && r->first_error[0])
        memcpy(res.first_error, r->first_error, sizeof res.first_error);
      bu_hist_add(res.hist, r->hist);
    }
    free(ts);
    pc_db_close(db);
  }
  _exit(write_all(result_fd, &res, sizeof res) == 0 ? 0 : 1);
}

/* ---- one-off client jobs in a child: preload and the balance check ------------- */

static int preload_main(const params_t *p, const char *config) {
  pc_error_t e;
  pc_db_t *db = pc_db_open_config(config, &e);
  if (!db) {
    fprintf(stderr, "net_scale: preload: %s\n", e.text);
    return 1;
  }
  int rc = 0;
  char row[32], val[32];
  int vl = snprintf(val, sizeof val, "%d", INITIAL_BALANCE);
  for (uint64_t i = 0; i < p->keys && rc == 0; i += 100) {
    pc_txn_t *t = pc_txn_begin(db, &e);
    pc_status_t st = t ? PC_OK : e.code;
    for (uint64_t k = i; k < i + 100 && k < p->keys && st == PC_OK; k++) {
      account(row, sizeof row, k);
      st = pc_txn_set(t, TABLE, row, strlen(row), COLUMN, strlen(COLUMN), val, (size_t)vl, &e);
    }
    if (st == PC_OK) st = pc_txn_commit(t, &e);
    pc_txn_destroy(t);
    if (st != PC_OK) {
      fprintf(stderr, "net_scale: preload: %s\n", e.text);
      rc = 1;
    }
  }
  pc_db_close(db);
  return rc;
}

/* Sums every balance in one snapshot; writes "rows sum" to fd. */
static int check_main(const char *config, int fd) {
  pc_error_t e;
  pc_db_t *db = pc_db_open_config(config, &e);
  if (!db) return 1;
  long long sum = 0, rows = 0;
  pc_txn_t *t = pc_txn_begin(db, &e);
  pc_scan_t *s = t ? pc_txn_scan(t, TABLE, "", 0, NULL, 0, &e) : NULL;
  pc_status_t st = s ? PC_OK : e.code;
  while (st == PC_OK && (st = pc_scan_next(s, &e)) == PC_OK) {
    size_t n;
    const char *v = pc_scan_value(s, &n);
    long b;
    if (parse_balance(v, n, &b) != 0) {
      st = PC_CORRUPTION;
      break;
    }
    sum += b;
    rows++;
  }
  pc_scan_destroy(s);
  pc_txn_destroy(t);
  pc_db_close(db);
  if (st != PC_NOT_FOUND) return 1;
  char buf[64];
  int n = snprintf(buf, sizeof buf, "%lld %lld", rows, sum);
  return write_all(fd, buf, (size_t)n) == 0 ? 0 : 1;
}

/* Runs fn in a child and waits (bounded) for it; returns its exit code, -1 on trouble. */
static int run_child_job(const params_t *p, const char *config, int check, long long out[2]) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork_child();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    close(fds[0]);
    _exit(check ? check_main(config, fds[1]) : preload_main(p, config));
  }
  child_pids[nchild++] = pid;
  close(fds[1]);
  char buf[64] = {0};
  size_t got = 0;
  uint64_t deadline = bu_now_ns() + 120000000000ull;
  while (got < sizeof buf - 1 && bu_now_ns() < deadline && !interrupted) {
    struct pollfd pf = {fds[0], POLLIN, 0};
    if (poll(&pf, 1, 200) <= 0) continue;
    ssize_t r = read(fds[0], buf + got, sizeof buf - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fds[0]);
  int status = reap(pid, interrupted ? 0 : 30000, NULL);
  nchild--;
  if (out && sscanf(buf, "%lld %lld", &out[0], &out[1]) != 2) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- the daemon ---------------------------------------------------------------- */

/* The cluster of n tablets: the playground's (playground/playground.h), an
 * oracle and the tablets in one `percolator run` under the ZooKeeper root
 * /percolator/net-scale-N, the accounts' rows split evenly over the tablets. */
static pc_pg_t *start_cluster(const params_t *p, const char *dir, int n) {
  char sub[4200], root[64], bounds[MAX_TABLETS][32];
  const char *splits[MAX_TABLETS];
  for (int i = 1; i < n; i++) {
    account(bounds[i - 1], sizeof bounds[i - 1], p->keys * (uint64_t)i / (uint64_t)n);
    splits[i - 1] = bounds[i - 1];
  }
  snprintf(sub, sizeof sub, "%s/cluster-%d", dir, n);
  snprintf(root, sizeof root, "/percolator/net-scale-%d", n);
  json_t *extra = json_pack("{s:{s:s}, s:{s:b}}", "log", "level", "warn", "store", "sync", p->sync);
  pc_pg_options_t o = {.cli = p->cli, .dir = sub, .zk_connect = p->zk_connect, .zk_root = root,
                       .oracles = 1, .one_process = 1, .splits = splits,
                       .nsplits = (size_t)(n - 1), .extra = extra};
  pc_error_t err;
  pc_pg_t *pg = pc_pg_create(&o, &err);
  json_decref(extra);
  if (pg && pc_pg_start(pg, 60000, &err) != PC_OK) {
    pc_pg_free(pg);
    pg = NULL;
  }
  if (!pg) fprintf(stderr, "net_scale: the cluster of %d tablets: %s\n", n, err.text);
  return pg;
}

/* Copies the last lines of the daemon's log to stderr (the temp dir goes away). */
static void show_log(const char *log) {
  FILE *f = fopen(log, "re");
  if (!f) return;
  static char buf[8192];
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
  }
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  fprintf(stderr, "net_scale: --- end of the daemon's log ---\n%s--- (end) ---\n", buf);
}

/* ---- one run: N client processes ------------------------------------------------- */

static json_t *run_clients(const params_t *p, const char *config, int nprocs, double *txns_s) {
  int ready[2], go[2], res_fd[MAX_PROCS];
  pid_t pids[MAX_PROCS];
  proc_result_t *res = calloc((size_t)nprocs, sizeof *res);
  if (!res || pipe2(ready, O_CLOEXEC) != 0) {
    free(res);
    return NULL;
  }
  if (pipe2(go, O_CLOEXEC) != 0) {
    close(ready[0]);
    close(ready[1]);
    free(res);
    return NULL;
  }
  int started = 0;
  for (; started < nprocs; started++) {
    int rf[2];
    if (pipe2(rf, O_CLOEXEC) != 0) break;
    pid_t pid = fork_child();
    if (pid < 0) {
      close(rf[0]);
      close(rf[1]);
      break;
    }
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      close(rf[0]);
      client_main(p, config, started, ready[1], go[0], rf[1]);
    }
    close(rf[1]);
    res_fd[started] = rf[0];
    pids[started] = pid;
    child_pids[nchild++] = pid;
  }
  close(ready[1]);
  close(go[0]);
  /* every client connected: go */
  int ok = started == nprocs, nready = 0;
  for (int i = 0; ok && i < nprocs; i++) {
    char c;
    if (read_all(ready[0], &c, 1, bu_now_ns() + 30000000000ull) != 0 || c != 'r') ok = 0;
    else nready++;
  }
  double busy0 = bu_machine_busy(NULL), d0 = bu_proc_cpu_s(daemon_pid);
  uint64_t dcsw0 = proc_csw(daemon_pid);
  uint64_t t0 = bu_now_ns();
  if (ok) {
    char gobuf[MAX_PROCS];
    memset(gobuf, 'g', sizeof gobuf);
    if (write_all(go[1], gobuf, (size_t)nprocs) != 0) ok = 0;
  }
  close(go[1]); /* clients not told to go see EOF and leave */
  uint64_t deadline = bu_now_ns() + (uint64_t)((p->seconds + 60) * 1e9);
  for (int i = 0; i < started; i++) {
    if (read_all(res_fd[i], &res[i], sizeof res[i], deadline) != 0) {
      res[i].ok = 0;
      ok = 0;
    }
    close(res_fd[i]);
  }
  double wall = (double)(bu_now_ns() - t0) * 1e-9;
  double daemon_cpu = bu_proc_cpu_s(daemon_pid) - d0, busy = bu_machine_busy(NULL) - busy0;
  uint64_t daemon_csw = proc_csw(daemon_pid) - dcsw0, client_csw = 0;
  double client_cpu = 0;
  for (int i = 0; i < started; i++) {
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    reap(pids[i], interrupted ? 0 : 30000, &ru);
    client_cpu += bu_rusage_cpu_s(&ru);
    client_csw += bu_rusage_csw(&ru);
    nchild--;
  }
  close(ready[0]);

  json_t *o = json_object();
  json_object_set_new(o, "procs", json_integer(nprocs));
  json_object_set_new(o, "threads_per_proc", json_integer(p->threads));
  uint64_t committed = 0, reads = 0, conflicts = 0, aborted = 0, locked = 0, errors = 0;
  double secs = 0;
  static uint64_t hist[HBUCKETS];
  memset(hist, 0, sizeof hist);
  json_t *per = json_array();
  for (int i = 0; i < started; i++) {
    proc_result_t *r = &res[i];
    if (!r->ok) {
      ok = 0;
      if (r->first_error[0]) fprintf(stderr, "net_scale: client %d: %s\n", i, r->first_error);
    }
    committed += r->committed;
    reads += r->reads;
    conflicts += r->conflicts;
    aborted += r->aborted;
    locked += r->locked;
    errors += r->errors;
    if (r->seconds > secs) secs = r->seconds;
    bu_hist_add(hist, r->hist);
    json_array_append_new(per, json_real(r->seconds > 0 ? (double)r->committed / r->seconds : 0));
    if (r->errors && r->first_error[0])
      fprintf(stderr, "net_scale: client %d: %llu errors, first: %s\n", i,
              (unsigned long long)r->errors, r->first_error);
  }
  *txns_s = secs > 0 ? (double)committed / secs : 0;
  uint64_t attempted = committed + conflicts + aborted + locked + errors;
  json_object_set_new(o, "txns_s", json_real(*txns_s));
  json_object_set_new(o, "per_proc_txns_s", per);
  json_object_set_new(o, "reads_s", json_real(secs > 0 ? (double)reads / secs : 0));
  json_object_set_new(o, "committed", json_integer((json_int_t)committed));
  json_object_set_new(o, "reads", json_integer((json_int_t)reads));
  json_object_set_new(o, "conflicts", json_integer((json_int_t)conflicts));
  json_object_set_new(o, "aborted", json_integer((json_int_t)aborted));
  json_object_set_new(o, "locked", json_integer((json_int_t)locked));
  json_object_set_new(o, "errors", json_integer((json_int_t)errors));
  json_object_set_new(o, "conflict_rate",
                      json_real(attempted ? (double)(conflicts + aborted + locked) /
                                                (double)attempted
                                          : 0));
  uint64_t transfers = bu_hist_total(hist);
  json_object_set_new(o, "transfer_p50_ms",
                      json_real((double)bu_percentile(hist, transfers, 0.5) / 1e6));
  json_object_set_new(o, "transfer_p99_ms",
                      json_real((double)bu_percentile(hist, transfers, 0.99) / 1e6));
  json_object_set_new(o, "seconds", json_real(secs));
  uint64_t txns = committed + reads;
  json_object_set_new(o, "client_cpu_us_per_txn", json_real(bu_per(client_cpu * 1e6, txns)));
  json_object_set_new(o, "daemon_cpu_us_per_txn", json_real(bu_per(daemon_cpu * 1e6, txns)));
  json_object_set_new(o, "client_context_switches_per_txn",
                      json_real(bu_per((double)client_csw, txns)));
  json_object_set_new(o, "daemon_context_switches_per_txn",
                      json_real(bu_per((double)daemon_csw, txns)));
  json_object_set_new(o, "daemon_cores", json_real(wall > 0 ? daemon_cpu / wall : 0));
  /* client CPU includes opening and closing the cluster, outside the interval */
  json_object_set_new(o, "others_cores",
                      json_real(bu_others_cores(busy, daemon_cpu + client_cpu, wall)));
  json_object_set_new(o, "ok", json_boolean(ok && nready == nprocs));
  free(res);
  if (!ok) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* ---- command line ------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_net_scale [options]\n"
          "  --cli PATH        the percolator binary (default: ../apps/cli/percolator next to\n"
          "                    this program's directory)\n"
          "  --tablets LIST    tablet counts, one daemon each (default 1,3; each 1..%d)\n"
          "  --procs LIST      client process counts (default 1,2,4; each 1..%d)\n"
          "  --threads N       threads per client process (default 1)\n"
          "  --seconds S       seconds per run (default 3)\n"
          "  --ops N           also end a process after about N transactions (default: none)\n"
          "  --keys N          accounts (default 10000)\n"
          "  --read-pct P      percent of read-only transactions (default 20)\n"
          "  --sync 0|1        the tablets fsync every write (default 0)\n"
          "  --seed N          (default 42)\n"
          "  --dir D           parent of the temporary directory (default /tmp)\n"
          "Prints one JSON document on stdout.\n",
          MAX_TABLETS, MAX_PROCS);
}

static int parse_args(int argc, char **argv, params_t *p, char *cli_buf, size_t cap) {
  static const struct option longopts[] = {
      {"cli", required_argument, NULL, 'c'},      {"tablets", required_argument, NULL, 'T'},
      {"procs", required_argument, NULL, 'P'},    {"threads", required_argument, NULL, 't'},
      {"seconds", required_argument, NULL, 's'},  {"ops", required_argument, NULL, 'o'},
      {"keys", required_argument, NULL, 'k'},     {"read-pct", required_argument, NULL, 'R'},
      {"sync", required_argument, NULL, 'y'},
      {"seed", required_argument, NULL, 'e'},     {"dir", required_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  *p = (params_t){.tablets = {1, 3}, .ntablets = 2, .procs = {1, 2, 4}, .nprocs = 3,
                  .threads = 1, .seconds = 3, .keys = 10000, .read_pct = 20,
                  .seed = 42, .parent = "/tmp"};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    const char *bad = NULL;
    uint64_t v;
    switch (c) {
      case 'c': p->cli = optarg; break;
      case 'T':
        if (bu_parse_int_list(optarg, MAX_TABLETS, p->tablets, MAX_LIST, &p->ntablets))
          bad = "--tablets";
        break;
      case 'P':
        if (bu_parse_int_list(optarg, MAX_PROCS, p->procs, MAX_LIST, &p->nprocs)) bad = "--procs";
        break;
      case 't':
        if (bu_parse_u64(optarg, 1, MAX_THREADS, &v)) bad = "--threads";
        else p->threads = (int)v;
        break;
      case 's': if (bu_parse_double(optarg, 0, 1, 3600, &p->seconds)) bad = "--seconds"; break;
      case 'o': if (bu_parse_u64(optarg, 1, INT64_MAX, &p->ops)) bad = "--ops"; break;
      case 'k': if (bu_parse_u64(optarg, 2, 999999, &p->keys)) bad = "--keys"; break;
      case 'R':
        if (bu_parse_u64(optarg, 0, 100, &v)) bad = "--read-pct";
        else p->read_pct = (int)v;
        break;
      case 'y':
        if (bu_parse_u64(optarg, 0, 1, &v)) bad = "--sync";
        else p->sync = (int)v;
        break;
      case 'e': if (bu_parse_u64(optarg, 0, INT64_MAX, &p->seed)) bad = "--seed"; break;
      case 'd': p->parent = optarg; break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) return bu_bad_value("pc_bench_net_scale", bad, optarg);
  }
  if (bu_no_operands("pc_bench_net_scale", argc, argv, optind) != 0) return -1;
  if (!p->cli) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
      fprintf(stderr, "pc_bench_net_scale: cannot find this program's path; pass --cli\n");
      return -1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(cli_buf, cap, "%s/../apps/cli/percolator", self);
    p->cli = cli_buf;
  }
  if (access(p->cli, X_OK) != 0) {
    fprintf(stderr, "pc_bench_net_scale: %s is not an executable (pass --cli PATH)\n", p->cli);
    return -1;
  }
  return 0;
}

/* Stops the cluster (the playground stops its `run` with SIGTERM and waits,
 * bounded) and releases it. Returns the seconds it took. */
static double stop_daemon(pc_pg_t *pg, json_t *out) {
  if (!pg) return 0;
  uint64_t t0 = bu_now_ns();
  pc_pg_stop(pg);
  double s = (double)(bu_now_ns() - t0) * 1e-9;
  int i = pc_pg_find(pg, "server");
  int status = i >= 0 ? pc_pg_role(pg, (size_t)i)->exit_status : -1;
  if (out) {
    json_object_set_new(out, "daemon_stop_s", json_real(s));
    json_object_set_new(out, "daemon_exit",
                        status < 0          ? json_null()
                        : WIFEXITED(status) ? json_integer(WEXITSTATUS(status))
                                            : json_string(strsignal(WTERMSIG(status))));
  }
  pc_pg_free(pg);
  daemon_pid = -1;
  return s;
}

int main(int argc, char **argv) {
  params_t p;
  static char cli_buf[PATH_MAX + 64];
  if (parse_args(argc, argv, &p, cli_buf, sizeof cli_buf) != 0) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  char dir[4096];
  if (bu_make_temp_dir(dir, sizeof dir, p.parent, "net-scale", "net_scale") != 0) return 1;
  /* the daemons' coordination; a child of this process (it dies with it) */
  tu_zk_t *zk = tu_zk_start(1);
  p.zk_connect = tu_zk_connect(zk);
  json_t *doc = json_object();
  bu_json_head(doc, "net_scale");
  json_object_set_new(doc, "cli", json_string(p.cli));
  json_t *par = json_object();
  json_object_set_new(par, "tablets", bu_json_int_array(p.tablets, p.ntablets));
  json_object_set_new(par, "procs", bu_json_int_array(p.procs, p.nprocs));
  json_object_set_new(par, "threads_per_proc", json_integer(p.threads));
  json_object_set_new(par, "seconds", json_real(p.seconds));
  json_object_set_new(par, "ops", p.ops ? json_integer((json_int_t)p.ops) : json_null());
  json_object_set_new(par, "keys", json_integer((json_int_t)p.keys));
  json_object_set_new(par, "read_pct", json_integer(p.read_pct));
  json_object_set_new(par, "sync", json_integer(p.sync));
  json_object_set_new(par, "seed", json_integer((json_int_t)p.seed));
  json_object_set_new(doc, "params", par);
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());

  int rc = 0;
  pc_pg_t *pg = NULL;
  json_t *configs = json_array();
  json_object_set_new(doc, "configs", configs);
  double tput[MAX_LIST][MAX_LIST] = {{0}};
  for (int ti = 0; ti < p.ntablets && rc == 0 && !interrupted; ti++) {
    int n = p.tablets[ti];
    json_t *jc = json_object();
    json_array_append_new(configs, jc);
    json_object_set_new(jc, "tablets", json_integer(n));
    uint64_t t0 = bu_now_ns();
    pg = start_cluster(&p, dir, n);
    if (!pg) {
      rc = 1;
      break;
    }
    json_object_set_new(jc, "daemon_ready_s", json_real((double)(bu_now_ns() - t0) * 1e-9));
    const pc_pg_role_t *server = pc_pg_role(pg, (size_t)pc_pg_find(pg, "server"));
    daemon_pid = server->pid;
    const char *log = server->log, *ccfg = pc_pg_client_config(pg);
    json_t *cc = json_load_file(ccfg, 0, NULL);
    json_object_set_new(jc, "client_config", cc ? cc : json_null());
    t0 = bu_now_ns();
    if (run_child_job(&p, ccfg, 0, NULL) != 0) {
      fprintf(stderr, "net_scale: preload failed\n");
      show_log(log);
      rc = 1;
      break;
    }
    json_object_set_new(jc, "preload_s", json_real((double)(bu_now_ns() - t0) * 1e-9));
    json_t *runs = json_array();
    json_object_set_new(jc, "runs", runs);
    for (int pi = 0; pi < p.nprocs && !interrupted; pi++) {
      json_t *r = run_clients(&p, ccfg, p.procs[pi], &tput[ti][pi]);
      if (!r) {
        if (!interrupted)
        {
          fprintf(stderr, "net_scale: the run with %d processes failed\n", p.procs[pi]);
          show_log(log);
        }
        rc = 1;
        break;
      }
      if (tput[ti][0] > 0)
        json_object_set_new(r, "scaling_vs_first", json_real(tput[ti][pi] / tput[ti][0]));
      json_array_append_new(runs, r);
    }
    if (rc == 0 && !interrupted) {
      long long sums[2];
      int cr = run_child_job(&p, ccfg, 1, sums);
      long long want = (long long)p.keys * INITIAL_BALANCE;
      json_t *chk = json_object();
      json_object_set_new(chk, "rows", json_integer(cr == 0 ? sums[0] : -1));
      json_object_set_new(chk, "sum", json_integer(cr == 0 ? sums[1] : -1));
      json_object_set_new(chk, "want", json_integer(want));
      json_object_set_new(chk, "ok", json_boolean(cr == 0 && sums[1] == want &&
                                                  sums[0] == (long long)p.keys));
      json_object_set_new(jc, "balance_check", chk);
      if (cr != 0 || sums[1] != want) {
        fprintf(stderr, "net_scale: balance check failed\n");
        rc = 1;
      }
    }
    stop_daemon(pg, jc);
    pg = NULL;
  }
  if (rc == 0 && !interrupted) {
    json_t *sc = json_object();
    json_object_set_new(doc, "scaling", sc);
    for (int ti = 0; ti < p.ntablets; ti++) {
      char k[64];
      json_t *a = json_array();
      for (int pi = 0; pi < p.nprocs; pi++)
        json_array_append_new(a, json_real(tput[ti][0] > 0 ? tput[ti][pi] / tput[ti][0] : 0));
      snprintf(k, sizeof k, "tablets_%d_vs_%d_procs", p.tablets[ti], p.procs[0]);
      json_object_set_new(sc, k, a);
    }
    if (p.ntablets > 1) {
      json_t *a = json_array();
      for (int pi = 0; pi < p.nprocs; pi++)
        json_array_append_new(a, json_real(tput[0][pi] > 0 ? tput[p.ntablets - 1][pi] / tput[0][pi]
                                                           : 0));
      char k[64];
      snprintf(k, sizeof k, "tablets_%d_vs_%d_per_procs", p.tablets[p.ntablets - 1],
               p.tablets[0]);
      json_object_set_new(sc, k, a);
    }
  }
  if (interrupted) {
    fprintf(stderr, "net_scale: interrupted; cleaning up\n");
    rc = 1;
  }
  /* whatever is left: clients first, then the daemon */
  for (int i = 0; i < nchild; i++) kill(child_pids[i], SIGKILL);
  for (int i = 0; i < nchild; i++) reap(child_pids[i], 5000, NULL);
  nchild = 0;
  stop_daemon(pg, NULL);
  tu_zk_stop(zk);
  bu_remove_tree(dir);
  return bu_json_finish(doc, rc);
}
