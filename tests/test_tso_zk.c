/* test_tso_zk.c — the oracle with standbys on a 3-server ZooKeeper ensemble
 * (tso/tso_election.h, followed by tso/tso_locator.h).
 *
 * In one process: a clean hand-over between two oracles, and a leader whose
 * bound was moved by another writer is fenced off and the next term starts
 * above that bound. Then with separate processes (this program run again as
 * `node` oracles and `client` processes fetching timestamps from two threads
 * each through a batcher over a locator): the leading oracle SIGKILLed five
 * times, SIGSTOPped for twice its session timeout (after SIGCONT it answers
 * nothing), the ZooKeeper leader killed (the oracle keeps its session and its
 * leadership) and two of three ZooKeeper servers stopped (no timestamp is
 * served; everything resumes when they return). Throughout, every client's
 * timestamps increase and no timestamp is issued twice; after each failure
 * the clients' fetches, each bounded by its timeout, succeed again. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/error.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "tests/zkharness.h"
#include "tso/oracle.h"
#include "tso/tso_client.h"
#include "tso/tso_server.h"
#include "tso/tso_election.h"
#include "tso/tso_locator.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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
#define NCLIENTS 3
#define CLIENT_THREADS 2
#define MAX_NODES 16

static tu_zk_t *ensemble;
static const char *self_exe;
static char dir[256];

static void sleep_ms(unsigned ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* ---- the `node` process: an oracle that joins the election ---------------- */

/* Serves the node's handler on an ephemeral port of 127.0.0.1, joins the
 * election advertising it, writes the port to port_file, and runs until
 * SIGTERM. */
static int node_main(const char *connect, const char *root, const char *port_file) {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  pc_error_t err;
  /* a window longer than the pause below: after SIGCONT the oracle still
   * holds timestamps below its persisted bound, and only its lease keeps it
   * from serving them */
  pc_tso_node_options_t o = {{connect, root, NULL, SESSION_MS, NULL}, 4 * SESSION_MS};
  pc_tso_node_t *node = pc_tso_node_create(&o, &err);
  pc_rpc_server_options_t so = {0};
  so.name = "tso";
  so.host = "127.0.0.1";
  so.runs_inline = pc_tso_rpc_runs_inline;
  pc_rpc_server_t *srv = node ? pc_rpc_server_start(&so, pc_tso_node_handler, node, &err) : NULL;
  char advertise[64], tmp[600];
  if (srv) snprintf(advertise, sizeof advertise, "127.0.0.1:%u", pc_rpc_server_port(srv));
  if (!srv || pc_tso_node_join(node, advertise, &err) != PC_OK) {
    fprintf(stderr, "node: %s\n", err.text);
    return 1;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%u\n", pc_rpc_server_port(srv)) < 0 || fclose(f) != 0 ||
      rename(tmp, port_file) != 0)
    return 1;
  int sig;
  sigwait(&sigs, &sig);
  pc_rpc_server_stop(srv);
  pc_tso_node_stop(node);
  return 0;
}

/* ---- the `client` process: timestamps from two threads ------------------- */

typedef struct client_thread {
  pc_ts_batcher_t *b;
  _Atomic uint64_t *progress; /* shared with the test: fetches that succeeded */
  const char *stop_file;
  uint64_t *ts;
  size_t n, cap;
  int bad; /* a timestamp not above the thread's previous one */
} client_thread_t;

static void *client_thread(void *arg) {
  client_thread_t *t = arg;
  pc_error_t err;
  for (unsigned i = 0;; i++) {
    if (i % 16 == 0 && access(t->stop_file, F_OK) == 0) break;
    uint64_t ts;
    /* generous: a fetch spans a failover (session timeout and election) */
    if (pc_ts_batcher_get(t->b, SESSION_MS + 15000, &ts, &err) != PC_OK) {
      fprintf(stderr, "client %d: %s\n", (int)getpid(), err.text);
      continue;
    }
    if (t->n && ts <= t->ts[t->n - 1]) t->bad = 1;
    if (t->n == t->cap) {
      t->cap = t->cap ? 2 * t->cap : 4096;
      t->ts = realloc(t->ts, t->cap * sizeof *t->ts);
      if (!t->ts) abort();
    }
    t->ts[t->n++] = ts;
    atomic_fetch_add(t->progress, 1);
    sleep_ms(2);
  }
  return NULL;
}

static int client_main(const char *connect, const char *root, const char *progress_file,
                       const char *out_file, const char *stop_file) {
  pc_error_t err;
  int fd = open(progress_file, O_RDWR);
  _Atomic uint64_t *progress =
      fd >= 0 ? mmap(NULL, sizeof *progress, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : NULL;
  if (!progress || progress == MAP_FAILED) return 1;
  pc_tso_locator_t *l =
      pc_tso_locator_create(&(pc_zk_options_t){connect, root, NULL, SESSION_MS, NULL}, NULL, 20000, &err);
  if (!l) {
    fprintf(stderr, "client: %s\n", err.text);
    return 1;
  }
  pc_ts_batcher_t *b = pc_ts_batcher_create(pc_tso_locator_fetch, l);
  client_thread_t t[CLIENT_THREADS];
  pthread_t th[CLIENT_THREADS];
  for (int i = 0; i < CLIENT_THREADS; i++) {
    t[i] = (client_thread_t){.b = b, .progress = progress, .stop_file = stop_file};
    pthread_create(&th[i], NULL, client_thread, &t[i]);
  }
  int bad = 0;
  FILE *f = fopen(out_file, "w");
  for (int i = 0; i < CLIENT_THREADS; i++) {
    pthread_join(th[i], NULL);
    bad |= t[i].bad;
    if (f) fwrite(t[i].ts, sizeof *t[i].ts, t[i].n, f);
    free(t[i].ts);
  }
  if (!f || fclose(f) != 0) return 1;
  pc_ts_batcher_destroy(b);
  pc_tso_locator_destroy(l);
  return bad ? 3 : 0;
}

/* ---- helpers of the test process ------------------------------------------ */

static pid_t spawn(const char *const *args) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) abort();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    char log[512];
    snprintf(log, sizeof log, "%s/%s-%d.log", dir, args[1], (int)getpid());
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(self_exe, (char *const *)args);
    _exit(127);
  }
  return pid;
}

typedef struct oracle_proc {
  pid_t pid;
  uint16_t port;
} oracle_proc_t;

static oracle_proc_t nodes[MAX_NODES];
static int nnodes;

static void start_node(const char *root) {
  char port_file[512];
  snprintf(port_file, sizeof port_file, "%s/node%d.port", dir, nnodes);
  const char *args[] = {self_exe, "node", tu_zk_connect(ensemble), root, port_file, NULL};
  oracle_proc_t *p = &nodes[nnodes++];
  p->pid = spawn(args);
  for (int i = 0; i < 3000 && !p->port; i++) { /* a process starts in well under 30 s */
    FILE *f = fopen(port_file, "r");
    unsigned port = 0;
    if (f && fscanf(f, "%u", &port) == 1) p->port = (uint16_t)port;
    if (f) fclose(f);
    if (!p->port) sleep_ms(10);
  }
  if (!p->port) fail_msg("oracle process %d did not start; see %s", (int)p->pid, dir);
}

/* The index in nodes of the process serving at address "127.0.0.1:PORT". */
static int node_of(const char *addr) {
  const char *colon = strrchr(addr, ':');
  unsigned port = colon ? (unsigned)atoi(colon + 1) : 0;
  for (int i = 0; i < nnodes; i++)
    if (nodes[i].pid > 0 && nodes[i].port == port) return i;
  return -1;
}

/* Waits until the locator names a leader among the live processes. */
static int wait_leader(pc_tso_locator_t *l, int not_this) {
  for (int i = 0; i < 3000; i++) {
    char leader[300];
    pc_tso_locator_members(l, leader, sizeof leader, NULL, 0);
    int k = leader[0] ? node_of(leader) : -1;
    if (k >= 0 && k != not_this) {
      uint64_t last;
      pc_error_t err;
      if (pc_tso_locator_info(l, 200, &last, &err) == PC_OK) return k;
    }
    sleep_ms(10);
  }
  fail_msg("no oracle leads");
  return -1;
}

static _Atomic uint64_t *progress[NCLIENTS];
static pid_t clients[NCLIENTS];

static uint64_t total_progress(void) {
  uint64_t s = 0;
  for (int i = 0; i < NCLIENTS; i++) s += atomic_load(progress[i]);
  return s;
}

/* Waits until every client fetched at least `more` timestamps beyond its
 * count now; returns the milliseconds that took. Each fetch is bounded by
 * the client's timeout, so a client that cannot fetch stops counting; this
 * fails after the longest time a failover may legitimately take. */
static uint64_t wait_progress(uint64_t more, const char *after) {
  uint64_t base[NCLIENTS];
  for (int i = 0; i < NCLIENTS; i++) base[i] = atomic_load(progress[i]);
  uint64_t t0 = pc_now_mono_ms();
  for (int polls = 0; polls < 6000; polls++) {
    int all = 1;
    for (int i = 0; i < NCLIENTS; i++) all &= atomic_load(progress[i]) >= base[i] + more;
    if (all) return pc_now_mono_ms() - t0;
    sleep_ms(10);
  }
  fail_msg("clients made no progress after %s", after);
  return 0;
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ---- in-process cases ------------------------------------------------------ */

typedef struct inproc {
  pc_tso_node_t *node;
  pc_rpc_server_t *srv;
} inproc_t;

static void inproc_start(inproc_t *p, const char *root) {
  pc_error_t err;
  pc_tso_node_options_t o = {{tu_zk_connect(ensemble), root, NULL, SESSION_MS, NULL}, 1000};
  p->node = pc_tso_node_create(&o, &err);
  assert_non_null(p->node);
  pc_rpc_server_options_t so = {0};
  so.name = "tso";
  so.host = "127.0.0.1";
  p->srv = pc_rpc_server_start(&so, pc_tso_node_handler, p->node, &err);
  assert_non_null(p->srv);
  char adv[64];
  snprintf(adv, sizeof adv, "127.0.0.1:%u", pc_rpc_server_port(p->srv));
  assert_int_equal(pc_tso_node_join(p->node, adv, &err), PC_OK);
}

static void inproc_stop(inproc_t *p) {
  pc_rpc_server_stop(p->srv);
  pc_tso_node_stop(p->node);
}

static int leading(inproc_t *p) {
  pc_tso_node_info_t info;
  pc_tso_node_info(p->node, &info);
  return info.leading;
}

static void test_hand_over(void **state) {
  (void)state;
  pc_error_t err;
  inproc_t a, b;
  inproc_start(&a, "/percolator/hand-over");
  for (int i = 0; i < 3000 && !leading(&a); i++) sleep_ms(10);
  assert_true(leading(&a));
  inproc_start(&b, "/percolator/hand-over");
  pc_tso_locator_t *l = pc_tso_locator_create(
      &(pc_zk_options_t){tu_zk_connect(ensemble), "/percolator/hand-over", NULL, SESSION_MS, NULL}, NULL,
      20000, &err);
  assert_non_null(l);
  uint64_t first = 0, next = 0;
  assert_int_equal(pc_tso_locator_fetch(l, 10, 20000, &first, &err), PC_OK);
  /* a standby answers nothing and names the leader */
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(b.srv), NULL, &err);
  uint64_t ts;
  assert_int_equal(pc_tso_remote_fetch(c, 1, 5000, &ts, &err), PC_UNAVAILABLE);
  assert_non_null(strstr(err.text, "standby"));
  /* the leader leaves: the standby takes over at once, above it */
  inproc_stop(&a);
  assert_int_equal(pc_tso_locator_fetch(l, 1, 20000, &next, &err), PC_OK);
  assert_true(next >= first + 10);
  assert_true(leading(&b));
  assert_int_equal(pc_tso_remote_fetch(c, 1, 5000, &ts, &err), PC_OK);
  assert_true(ts > next);
  pc_rpc_client_destroy(c);
  pc_tso_locator_destroy(l);
  inproc_stop(&b);
}

/* Another writer moves the bound: the leader's next write is refused, it
 * serves nothing more in that term, and the next term starts above the
 * bound that writer left. */
static void test_fenced_leader(void **state) {
  (void)state;
  pc_error_t err;
  const char *root = "/percolator/fenced";
  inproc_t a;
  inproc_start(&a, root);
  for (int i = 0; i < 3000 && !leading(&a); i++) sleep_ms(10);
  pc_tso_locator_t *l = pc_tso_locator_create(
      &(pc_zk_options_t){tu_zk_connect(ensemble), root, NULL, SESSION_MS, NULL}, NULL, 20000, &err);
  assert_non_null(l);
  uint64_t ts = 0;
  assert_int_equal(pc_tso_locator_fetch(l, 1, 20000, &ts, &err), PC_OK);
  pc_zk_t *rogue = pc_zk_open(&(pc_zk_options_t){tu_zk_connect(ensemble), root, NULL, SESSION_MS, NULL},
                              20000, NULL, &err);
  assert_non_null(rogue);
  char *data;
  size_t len;
  int32_t version;
  assert_int_equal(pc_zk_get(rogue, "tso/bound", NULL, &data, &len, &version, 5000, &err), PC_OK);
  uint64_t moved = strtoull(data, NULL, 10) + ((uint64_t)600000 << PC_TS_LOGICAL_BITS);
  free(data);
  char text[32];
  snprintf(text, sizeof text, "%" PRIu64, moved);
  assert_int_equal(pc_zk_set(rogue, "tso/bound", text, strlen(text), version, NULL, 5000, &err),
                   PC_OK);
  /* the leader meets the refusal at its next write (a window of 1 s), steps
   * down, and leads again in a new term above the moved bound */
  uint64_t after = 0;
  for (int i = 0; i < 3000; i++) {
    if (pc_tso_locator_fetch(l, 1, 20000, &after, &err) != PC_OK) fail_msg("%s", err.text);
    if (after > moved) break;
    sleep_ms(10);
  }
  assert_true(after > moved);
  pc_tso_node_info_t info;
  pc_tso_node_info(a.node, &info);
  assert_true(info.elections >= 2);
  pc_zk_close(rogue);
  pc_tso_locator_destroy(l);
  inproc_stop(&a);
}

/* ---- processes --------------------------------------------------------------- */

static void test_failures_under_load(void **state) {
  (void)state;
  pc_error_t err;
  const char *root = "/percolator/failover";
  for (int i = 0; i < 3; i++) start_node(root);
  pc_tso_locator_t *l = pc_tso_locator_create(
      &(pc_zk_options_t){tu_zk_connect(ensemble), root, NULL, SESSION_MS, NULL}, NULL, 20000, &err);
  assert_non_null(l);
  int leader = wait_leader(l, -1);
  char stop_file[512], out[NCLIENTS][512];
  snprintf(stop_file, sizeof stop_file, "%s/stop", dir);
  for (int i = 0; i < NCLIENTS; i++) {
    char pf[512];
    snprintf(pf, sizeof pf, "%s/progress%d", dir, i);
    int fd = open(pf, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0 && ftruncate(fd, 4096) == 0);
    progress[i] = mmap(NULL, sizeof *progress[i], PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(progress[i] != MAP_FAILED);
    close(fd);
    snprintf(out[i], sizeof out[i], "%s/client%d.ts", dir, i);
    const char *args[] = {self_exe, "client", tu_zk_connect(ensemble), root, pf, out[i],
                          stop_file, NULL};
    clients[i] = spawn(args);
  }
  wait_progress(20, "the start");

  /* 1. the leading oracle SIGKILLed five times; a new standby each time */
  for (int k = 0; k < 5; k++) {
    kill(nodes[leader].pid, SIGKILL);
    waitpid(nodes[leader].pid, NULL, 0);
    nodes[leader].pid = 0;
    start_node(root);
    uint64_t ms = wait_progress(20, "an oracle leader was killed");
    fprintf(stderr, "oracle leader killed: timestamps again after %" PRIu64 " ms\n", ms);
    leader = wait_leader(l, leader);
  }

  /* 2. the leader SIGSTOPped for twice its session timeout */
  pid_t stopped = nodes[leader].pid;
  uint16_t stopped_port = nodes[leader].port;
  kill(stopped, SIGSTOP);
  uint64_t ms = wait_progress(20, "the oracle leader was stopped");
  fprintf(stderr, "oracle leader stopped: timestamps again after %" PRIu64 " ms\n", ms);
  sleep_ms(2 * SESSION_MS > ms ? (unsigned)(2 * SESSION_MS - ms) : 0);
  kill(stopped, SIGCONT);
  /* after SIGCONT it serves nothing: its lease ran out and its session is gone */
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", stopped_port, NULL, &err);
  uint64_t ts = 0;
  for (int i = 0; i < 20; i++) {
    pc_status_t st = pc_tso_remote_fetch(c, 1, 2000, &ts, &err);
    if (st == PC_OK) fail_msg("the oracle paused for 2 session timeouts served %" PRIu64, ts);
    sleep_ms(50);
  }
  pc_rpc_client_destroy(c);
  leader = wait_leader(l, -1);
  assert_true(nodes[leader].pid != stopped);

  /* 3. the ZooKeeper leader killed: the oracle keeps its session, so the
   * same process leads afterwards */
  int zl = tu_zk_leader(ensemble);
  assert_true(zl >= 0);
  tu_zk_kill(ensemble, zl);
  ms = wait_progress(20, "the ZooKeeper leader was killed");
  fprintf(stderr, "zookeeper leader killed: timestamps again after %" PRIu64 " ms\n", ms);
  assert_int_equal(wait_leader(l, -1), leader);
  tu_zk_restart(ensemble, zl);
  assert_true(tu_zk_wait_serving(ensemble, zl, 90000));

  /* 4. two of three servers stopped: once the lease ran out nothing is
   * served; everything resumes when they return */
  int down[2], nd = 0;
  for (int i = 0; i < 3 && nd < 2; i++)
    if (i != zl) down[nd++] = i;
  tu_zk_kill(ensemble, down[0]);
  tu_zk_kill(ensemble, down[1]);
  sleep_ms(SESSION_MS); /* more than the lease (half of it) */
  uint64_t before = total_progress();
  sleep_ms(SESSION_MS);
  assert_int_equal(total_progress(), before);
  tu_zk_restart(ensemble, down[0]);
  tu_zk_restart(ensemble, down[1]);
  ms = wait_progress(20, "the quorum returned");
  fprintf(stderr, "quorum back: timestamps again after %" PRIu64 " ms\n", ms);

  /* the clients stop; every timestamp once, each client's increasing */
  FILE *f = fopen(stop_file, "w");
  assert_non_null(f);
  fclose(f);
  size_t n = 0, cap = 0;
  uint64_t *all = NULL;
  for (int i = 0; i < NCLIENTS; i++) {
    int status = 0;
    waitpid(clients[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail_msg("client %d: status %d (3: a timestamp did not increase)", i, status);
    FILE *in = fopen(out[i], "r");
    assert_non_null(in);
    uint64_t v;
    while (fread(&v, sizeof v, 1, in) == 1) {
      if (n == cap) {
        cap = cap ? 2 * cap : 65536;
        all = realloc(all, cap * sizeof *all);
        assert_non_null(all);
      }
      all[n++] = v;
    }
    fclose(in);
  }
  qsort(all, n, sizeof *all, u64_cmp);
  for (size_t i = 1; i < n; i++)
    if (all[i] == all[i - 1]) fail_msg("timestamp %" PRIu64 " issued twice", all[i]);
  fprintf(stderr, "%zu timestamps, all distinct\n", n);
  free(all);
  pc_tso_locator_destroy(l);
  for (int i = 0; i < nnodes; i++)
    if (nodes[i].pid > 0) {
      kill(nodes[i].pid, SIGKILL);
      waitpid(nodes[i].pid, NULL, 0);
    }
}

static int setup(void **state) {
  (void)state;
  ensemble = tu_zk_start(3);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pc-tso-zk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
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
  if (argc == 5 && strcmp(argv[1], "node") == 0) return node_main(argv[2], argv[3], argv[4]);
  if (argc == 7 && strcmp(argv[1], "client") == 0)
    return client_main(argv[2], argv[3], argv[4], argv[5], argv[6]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_over),
      cmocka_unit_test(test_fenced_leader),
      cmocka_unit_test(test_failures_under_load),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
