/* test_replication.c — replicated tablets under failures: three tablets
 * (t1, t2, t3), each a Raft group of three replicas on three `percolator
 * tablet` servers (s1, s2, s3), two oracles, a private ZooKeeper, three
 * bank client processes moving money between 21 accounts over the three
 * tablets (each transfer also counts itself in its client's row), and an
 * auditor process summing every account in one snapshot after another.
 *
 * In order:
 *   1. the leader of each tablet in turn SIGKILLed (then restarted);
 *   2. a leader SIGSTOPped for three election timeouts, then SIGCONT: while
 *      it was paused the others elected a leader, and once it resumes it
 *      answers no read as leader;
 *   3. a server SIGKILLed, its data directory deleted, and restarted on an
 *      empty one: it rejoins every group under a new incarnation and
 *      catches up from snapshots; then it leads every tablet and answers
 *      with all the data;
 *   4. two servers of three paused: the one left refuses writes and reads
 *      (no majority, no lease), and commits stop until they return;
 *   5. a server crashed at each step of the replication path (the
 *      failpoints replica.before_append, after_append, before_apply and
 *      before_reply, armed for a hit well into its traffic), then
 *      restarted; and one whose Raft log write fails
 *      (replica.log_write=return), and one that cannot store a new term
 *      (replica.hard_state_write=return): each stops with its reason in
 *      its log.
 * After each failure every client commits again (each commit bounded by
 * its timeout; the time it took is printed, not asserted). At the end: the
 * total holds, the auditor never saw a total that a snapshot could not,
 * every client's counter lies between its acknowledged commits and those
 * plus its commits of unknown outcome, and no lock is left. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <percolator/percolator.h>

#include "base/error.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "replica/repl_wire.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"
#include "tests/testutil.h"
#include "tests/zkharness.h"

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
#define ELECTION_MS 1000u
#define NACCOUNTS 21
#define START_BALANCE 100
#define NCLIENTS 3
#define NSERVERS 3

static tu_zk_t *zk;
static const char *self_exe, *cli;
static char dir[256];

static void sleep_ms(unsigned ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* ---- the client processes ------------------------------------------------------ */

typedef struct shared {
  _Atomic uint64_t ok, unknown, aborted;
  _Atomic uint64_t lost; /* failed on a connection lost with a request in flight */
  _Atomic uint64_t audits, violations; /* the auditor's */
  _Atomic int stop;
  char violation[256];
} shared_t;

static shared_t *map_shared(const char *path, int create) {
  int fd = open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0644);
  if (fd < 0 || (create && ftruncate(fd, 4096) != 0)) return NULL;
  shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return s == MAP_FAILED ? NULL : s;
}

static void acct_row(char *out, size_t cap, int i) { snprintf(out, cap, "acct%02d", i); }

/* Transfers between random accounts until told to stop; each also counts
 * itself in row c<id> of table "clients". */
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
    acct_row(ra, sizeof ra, a);
    acct_row(rb, sizeof rb, b);
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t) {
      sleep_ms(20);
      continue;
    }
    pc_txn_set_timeout_ms(t, SESSION_MS + 15000);
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
    if (st == PC_UNAVAILABLE && strstr(err.text, " lost")) atomic_fetch_add(&sh->lost, 1);
    if (st != PC_OK && st != PC_CONFLICT && st != PC_LOCKED)
      fprintf(stderr, "bank %d: %s: %s\n", id, pc_status_name(st), err.text);
  }
  pc_db_close(db);
  return 0;
}

/* Sums every account in one snapshot after another: a sum other than the
 * total is a state no snapshot could see. */
static int audit_main(const char *config, const char *shared_path) {
  shared_t *sh = map_shared(shared_path, 0);
  pc_error_t err;
  pc_db_t *db = sh ? pc_db_open_config(config, &err) : NULL;
  if (!db) return 1;
  while (!atomic_load(&sh->stop)) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t) {
      sleep_ms(20);
      continue;
    }
    pc_txn_set_timeout_ms(t, SESSION_MS + 15000);
    long total = 0, v = 0;
    pc_status_t st = PC_OK;
    for (int i = 0; i < NACCOUNTS && st == PC_OK; i++) {
      char row[16];
      acct_row(row, sizeof row, i);
      st = tu_get_long(t, "bank", row, &v, &err);
      total += v;
    }
    uint64_t ts = pc_txn_start_ts(t);
    pc_txn_destroy(t);
    if (st != PC_OK) continue;
    atomic_fetch_add(&sh->audits, 1);
    if (total != NACCOUNTS * START_BALANCE && atomic_fetch_add(&sh->violations, 1) == 0)
      snprintf(sh->violation, sizeof sh->violation, "snapshot %" PRIu64 " summed %ld", ts, total);
  }
  pc_db_close(db);
  return 0;
}

/* ---- the cluster ---------------------------------------------------------------- */

static pid_t tsos[2];
static pid_t servers[NSERVERS];
static const char *const server_names[NSERVERS] = {"s1", "s2", "s3"};
static const char *const tablet_names[3] = {"t1", "t2", "t3"};
/* a row of each tablet, outside the accounts */
static const char *const probe_rows[3] = {"acct00p", "acct07p", "acct14p"};

static pid_t spawn(const char *const *args, const char *log, const char *failpoints) {
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
    if (failpoints) setenv("PERCOLATOR_FAILPOINTS", failpoints, 1);
    else unsetenv("PERCOLATOR_FAILPOINTS");
    execv(args[0], (char *const *)args);
    _exit(127);
  }
  return pid;
}

static int ready(const char *path) {
  for (int i = 0; i < 6000; i++) {
    json_t *j = json_load_file(path, 0, NULL);
    if (j) {
      json_decref(j);
      return 1;
    }
    sleep_ms(10);
  }
  return 0;
}

/* ready(path) for process pid, which may also end first (a failpoint it
 * reached while it caught up, before it listened): 1 ready, -1 ended (its
 * wait status in *status, reaped), 0 neither within 60 s. */
static int ready_or_ended(const char *path, pid_t pid, int *status) {
  for (int i = 0; i < 6000; i++) {
    json_t *j = json_load_file(path, 0, NULL);
    if (j) {
      json_decref(j);
      return 1;
    }
    if (waitpid(pid, status, WNOHANG) == pid) return -1;
    sleep_ms(10);
  }
  return 0;
}

static void start_tso(int i) {
  char cfg[512], rd[512], log[16];
  snprintf(cfg, sizeof cfg, "%s/cluster.json", dir);
  snprintf(log, sizeof log, "tso%d", i);
  snprintf(rd, sizeof rd, "%s/%s.ready", dir, log);
  const char *args[] = {cli, "--config", cfg, "tso", "--ready-file", rd, NULL};
  tsos[i] = spawn(args, log, NULL);
  if (!ready(rd)) fail_msg("oracle %d did not start", i);
}

/* Starts server i (failpoints armed in it when not NULL); waits for it to
 * listen, or to end first (with failpoints armed, at one of them: catching
 * up from its log applies entries, say): returns 1 when it ended, its wait
 * status in *ended (reaped; servers[i] 0); else 0. */
static int start_server_armed(int i, const char *failpoints, int *ended) {
  char cfg[512], rd[512];
  snprintf(cfg, sizeof cfg, "%s/cluster.json", dir);
  snprintf(rd, sizeof rd, "%s/%s.ready", dir, server_names[i]);
  remove(rd);
  const char *args[] = {cli, "--config", cfg, "tablet", "--name", server_names[i],
                        "--ready-file", rd, NULL};
  servers[i] = spawn(args, server_names[i], failpoints);
  int status = 0, r = ready_or_ended(rd, servers[i], &status);
  if (r < 0) {
    servers[i] = 0;
    *ended = status;
    return 1;
  }
  if (!r) fail_msg("server %s did not start; see %s/%s.log", server_names[i], dir,
                   server_names[i]);
  return 0;
}

/* start_server_armed, for a server that must come up: one that ends says how. */
static void start_server(int i, const char *failpoints) {
  int ended = 0;
  if (start_server_armed(i, failpoints, &ended))
    fail_msg("server %s ended as it started (%s %d); see %s/%s.log", server_names[i],
             WIFEXITED(ended) ? "exit status" : "signal",
             WIFEXITED(ended) ? WEXITSTATUS(ended) : WTERMSIG(ended), dir, server_names[i]);
}

static int paused[NSERVERS]; /* SIGSTOPped: not asked */

static void kill_server(int i, int sig) {
  kill(servers[i], sig);
  if (sig == SIGSTOP || sig == SIGCONT) paused[i] = sig == SIGSTOP;
  if (sig == SIGKILL) {
    waitpid(servers[i], NULL, 0);
    servers[i] = 0;
  }
}

/* The port server i serves on now (from ZooKeeper's servers/<name>/live). */
static int server_port(pc_zk_t *z, int i) {
  char rel[64], *data = NULL;
  size_t len;
  pc_error_t err;
  snprintf(rel, sizeof rel, "servers/%s/live", server_names[i]);
  if (pc_zk_get(z, rel, NULL, &data, &len, NULL, 5000, &err) != PC_OK) return -1;
  const char *colon = memrchr(data, ':', len);
  int port = colon ? atoi(colon + 1) : -1;
  free(data);
  return port;
}

static pc_zk_t *zk_client(void) {
  pc_error_t err;
  pc_zk_t *z = pc_zk_open(&(pc_zk_options_t){tu_zk_connect(zk), "/percolator/repl", NULL, SESSION_MS, NULL},
                          30000, NULL, &err);
  if (!z) fail_msg("%s", err.text);
  return z;
}


/* Replica info of tablet t from server i into *out (0), -1 when it cannot
 * be asked. */
static int replica_info(int i, int t, pc_replica_info_t *out);

/* The server whose replica of tablet t leads and serves under its lease,
 * among the running ones (their own word, from REPLICAS); waits up to 30 s. */
static int leader_of(int t) {
  pc_replica_info_t *info = malloc(sizeof *info);
  int found = -1;
  for (int k = 0; k < 3000 && found < 0; k++) {
    for (int i = 0; i < NSERVERS && found < 0; i++)
      if (servers[i] > 0 && !paused[i] && replica_info(i, t, info) == 0 && info->ready &&
          info->lease_ms > 0)
        found = i;
    if (found < 0) sleep_ms(10);
  }
  free(info);
  if (found < 0) fail_msg("tablet %s has no leader", tablet_names[t]);
  return found;
}

/* What server i answers a read of tablet t's probe row: the reply's store
 * status (PC_UNAVAILABLE: it does not serve it as leader). */
static pc_status_t direct_read(int i, int t) {
  pc_zk_t *z = zk_client();
  int port = server_port(z, i);
  pc_zk_close(z);
  if (port <= 0) return PC_UNAVAILABLE;
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", (uint16_t)port, NULL, &err);
  pc_buf_t body = {0}, env = {0}, reply = {0};
  /* at the present: a tablet refuses a timestamp far beyond the oracle's */
  pc_tablet_get_req_t q = {{"bank", probe_rows[t], strlen(probe_rows[t]), "v", 1},
                           pc_now_wall_ms() << PC_TS_LOGICAL_BITS};
  assert_int_equal(pc_tablet_encode_get(&body, PC_TABLET_OP_GET, &q), 0);
  uint8_t op = pc_tablet_wrap(&env, tablet_names[t], PC_TABLET_OP_GET, body.p, body.len);
  pc_status_t st = pc_rpc_call(c, op, env.p, env.len, 5000, &reply, &err);
  if (st == PC_OK) st = reply.len ? (pc_status_t)(uint8_t)reply.p[0] : PC_CORRUPTION;
  pc_buf_free(&body);
  pc_buf_free(&env);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(c);
  return st;
}

static int replica_info(int i, int t, pc_replica_info_t *out) {
  pc_zk_t *z = zk_client();
  int port = server_port(z, i);
  pc_zk_close(z);
  if (port <= 0) return -1;
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", (uint16_t)port, NULL, &err);
  pc_buf_t reply = {0};
  int found = -1;
  if (c && pc_rpc_call(c, PC_REPL_OP_REPLICAS, NULL, 0, 2000, &reply, &err) == PC_OK) {
    pc_rd_t r = {reply.p, reply.len, 0, 1};
    uint32_t n = pc_rd_u32(&r);
    for (uint32_t j = 0; j < n && r.ok && found < 0; j++)
      if (pc_replica_info_decode(&r, out) == 0 && strcmp(out->group, tablet_names[t]) == 0)
        found = 0;
  }
  pc_buf_free(&reply);
  if (c) pc_rpc_client_destroy(c);
  return found;
}

static shared_t *sh[NCLIENTS + 1]; /* the bank clients, then the auditor */
static pid_t client_pids[NCLIENTS + 1];
static pc_db_t *db;

static uint64_t total_ok(void) {
  uint64_t s = 0;
  for (int i = 0; i < NCLIENTS; i++) s += atomic_load(&sh[i]->ok);
  return s;
}

/* Whether log lines a and b (each up to its newline) say the same after
 * their timestamps (the first 25 bytes, "2026-11-29T19:57:32.468Z "). */
static int same_message(const char *a, const char *b) {
  const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
  size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
  return la == lb && la > 25 && memcmp(a + 25, b + 25, la - 25) == 0;
}

/* The last lines of every process's log, to stderr: what CI keeps of a
 * failure (the test's directory is gone with it). A message repeated line
 * after line (a server retrying every half second) counts once, so that it
 * does not push out what came before it. */
static void dump_logs(void) {
  static const char *const logs[] = {"s1", "s2", "s3", "tso0", "tso1", "bank0", "bank1", "bank2",
                                     "audit"};
  for (size_t i = 0; i < sizeof logs / sizeof logs[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.log", dir, logs[i]);
    char *text = tu_slurp(path);
    if (!text) continue;
    const char *from = text + strlen(text), *kept = NULL;
    for (int lines = 0; from > text && lines <= 40; from--) {
      if (from[-1] != '\n' || !*from) continue;
      if (!kept || !same_message(from, kept)) lines++;
      kept = from;
    }
    fprintf(stderr, "---- the end of %s.log (a message repeated line after line: once) ----\n",
            logs[i]);
    for (const char *line = from, *last = NULL; *line;) {
      const char *nl = strchr(line, '\n');
      size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
      if (!last || !same_message(line, last)) fwrite(line, 1, len, stderr);
      last = line;
      line += len;
    }
    fputc('\n', stderr);
    free(text);
  }
}

/* Waits until every client has `more` acknowledged commits beyond its count
 * now; returns how long that took. */
static uint64_t wait_commits(uint64_t more, const char *after) {
  uint64_t base[NCLIENTS];
  for (int i = 0; i < NCLIENTS; i++) base[i] = atomic_load(&sh[i]->ok);
  uint64_t t0 = pc_now_mono_ms();
  for (int polls = 0; polls < 12000; polls++) {
    int all = 1;
    for (int i = 0; i < NCLIENTS; i++) all &= atomic_load(&sh[i]->ok) >= base[i] + more;
    if (all) return pc_now_mono_ms() - t0;
    sleep_ms(10);
  }
  for (int i = 0; i < NCLIENTS; i++)
    fprintf(stderr, "client %d: %" PRIu64 " commits, %" PRIu64 " when the wait began\n", i,
            (uint64_t)atomic_load(&sh[i]->ok), base[i]);
  dump_logs();
  fail_msg("the clients stopped committing after %s", after);
  return 0;
}

/* Commits to tablet t's probe row until one commit succeeds; how long it took. */
static uint64_t probe_commit(int t) {
  uint64_t t0 = pc_now_mono_ms();
  for (int k = 0; k < 200; k++) {
    pc_error_t err;
    pc_txn_t *x = pc_txn_begin(db, &err);
    if (!x) continue;
    pc_txn_set_timeout_ms(x, 15000);
    long v = 0;
    pc_status_t st = tu_get_long(x, "bank", probe_rows[t], &v, &err);
    if (st == PC_OK) st = tu_set_long(x, "bank", probe_rows[t], v + 1, &err);
    if (st == PC_OK) st = pc_txn_commit(x, &err);
    pc_txn_destroy(x);
    if (st == PC_OK) return pc_now_mono_ms() - t0;
    sleep_ms(10);
  }
  fail_msg("no commit on tablet %s's rows", tablet_names[t]);
  return 0;
}

static void write_config(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/cluster.json", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f,
          "{\"data_dir\":\"%s/data\",\"log\":{\"level\":\"info\"},"
          "\"store\":{\"lock_ttl_ms\":20000,\"timeout_ms\":%u},"
          "\"zookeeper\":{\"connect\":\"%s\",\"root\":\"/percolator/repl\","
          "\"session_timeout_ms\":%u},"
          "\"tso\":{\"listen\":\"127.0.0.1:0\"},"
          "\"replication\":{\"election_timeout_ms\":%u,\"snapshot_entries\":256},"
          "\"servers\":[{\"name\":\"s1\",\"listen\":\"127.0.0.1:0\"},"
          "{\"name\":\"s2\",\"listen\":\"127.0.0.1:0\"},"
          "{\"name\":\"s3\",\"listen\":\"127.0.0.1:0\"}],"
          "\"tablets\":["
          "{\"name\":\"t1\",\"start\":\"\",\"end\":\"acct07\",\"replicas\":[\"s1\",\"s2\",\"s3\"]},"
          "{\"name\":\"t2\",\"start\":\"acct07\",\"end\":\"acct14\",\"replicas\":[\"s1\",\"s2\",\"s3\"]},"
          "{\"name\":\"t3\",\"start\":\"acct14\",\"end\":\"\",\"replicas\":[\"s1\",\"s2\",\"s3\"]}]}\n",
          dir, SESSION_MS + 15000, tu_zk_connect(zk), SESSION_MS, ELECTION_MS);
  assert_int_equal(fclose(f), 0);
}

/* Asks the leader of tablet t to move its leadership to server i. With
 * exited non-NULL, server i may stop meanwhile (a failpoint armed in it):
 * then its wait status goes there and 1 is returned, else 0. */
static int move_leader(int t, int i, int *exited) {
  for (int attempt = 0; attempt < 20; attempt++) {
    if (exited && waitpid(servers[i], exited, WNOHANG) == servers[i]) return 1;
    int lead = leader_of(t);
    if (lead == i) return 0;
    pc_zk_t *z = zk_client();
    int port = server_port(z, lead);
    pc_zk_close(z);
    pc_error_t err;
    pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", (uint16_t)port, NULL, &err);
    pc_buf_t body = {0}, reply = {0};
    pc_buf_u8(&body, PC_MEMBER_MOVE);
    pc_buf_str(&body, tablet_names[t], strlen(tablet_names[t]));
    pc_buf_str(&body, server_names[i], strlen(server_names[i]));
    pc_status_t st = pc_rpc_call(c, PC_REPL_OP_MEMBER, body.p, body.len, 20000, &reply, &err);
    pc_buf_free(&body);
    pc_buf_free(&reply);
    pc_rpc_client_destroy(c);
    if (st == PC_OK) return 0;
    fprintf(stderr, "moving %s's leadership to %s: %s\n", tablet_names[t], server_names[i],
            err.text);
    sleep_ms(500);
  }
  int status = 0;
  if (waitpid(servers[i], &status, WNOHANG) != servers[i])
    fail_msg("the leadership of %s did not move to %s (running)", tablet_names[t],
             server_names[i]);
  fail_msg("the leadership of %s did not move to %s (it ended: %s %d)", tablet_names[t],
           server_names[i], WIFEXITED(status) ? "exit status" : "signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return 0;
}

/* Moves t1's leadership to neither server i nor its leader: a new term. */
static void new_term(int i) {
  int lead = leader_of(0); /* not i: it has just come back */
  move_leader(0, lead == i ? (i + 1) % NSERVERS : NSERVERS - i - lead, NULL);
}

/* Restarts server i with failpoint spec armed (NAME=ACTION), calls provoke(i)
 * (when not NULL) while it still runs, and requires it to stop by SIGABRT
 * with its reason in what it logged since: the failpoint's name and "the
 * server stops". what says what it went on after, for the failure. Then the
 * clients commit, it comes back, and they commit again. */
static void stops_at(int i, const char *spec, void (*provoke)(int i), const char *what) {
  kill_server(i, SIGTERM);
  waitpid(servers[i], NULL, 0);
  char logpath[512], name[64];
  snprintf(logpath, sizeof logpath, "%s/%s.log", dir, server_names[i]);
  snprintf(name, sizeof name, "failpoint %.*s", (int)strcspn(spec, "="), spec);
  char *so_far = tu_slurp(logpath); /* its log so far: what it says now comes after */
  size_t said = so_far ? strlen(so_far) : 0;
  free(so_far);
  int status = 0, gone = start_server_armed(i, spec, &status);
  if (!gone && provoke) provoke(i);
  for (int w = 0; !gone && w < 6000 && waitpid(servers[i], &status, WNOHANG) == 0; w++)
    sleep_ms(10);
  if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT))
    fail_msg("server %s went on after %s", server_names[i], what);
  servers[i] = 0;
  char *log = tu_slurp(logpath);
  const char *now = log && strlen(log) >= said ? log + said : NULL;
  if (!now || !strstr(now, name) || !strstr(now, "the server stops"))
    fail_msg("server %s stopped without saying why; see %s", server_names[i], logpath);
  free(log);
  fprintf(stderr, "server %s stopped: %s\n", server_names[i], what);
  wait_commits(3, what);
  start_server(i, NULL);
  wait_commits(3, "the stopped server came back");
}

/* Waits until server i's replica of each tablet is a voter that holds what
 * its leader committed when the wait began. */
static void wait_caught_up(int i) {
  for (int k = 0; k < 1200; k++) {
    int done = 0;
    pc_zk_t *z = zk_client();
    int port = server_port(z, i);
    pc_zk_close(z);
    pc_error_t err;
    pc_rpc_client_t *c = port > 0 ? pc_rpc_client_create("127.0.0.1", (uint16_t)port, NULL, &err) : NULL;
    pc_buf_t reply = {0};
    if (c && pc_rpc_call(c, PC_REPL_OP_REPLICAS, NULL, 0, 5000, &reply, &err) == PC_OK) {
      pc_rd_t r = {reply.p, reply.len, 0, 1};
      uint32_t n = pc_rd_u32(&r);
      pc_replica_info_t *info = malloc(sizeof *info);
      for (uint32_t j = 0; j < n && r.ok; j++)
        if (pc_replica_info_decode(&r, info) == 0) {
          int voter = 0;
          for (uint32_t m = 0; m < info->n; m++)
            if (info->members[m].id == info->id) voter = info->members[m].role == RAFT_VOTER;
          done += voter && info->applied >= info->commit && info->commit > 1;
        }
      free(info);
    }
    pc_buf_free(&reply);
    if (c) pc_rpc_client_destroy(c);
    if (done == 3) return;
    sleep_ms(100);
  }
  fail_msg("server %s did not catch up", server_names[i]);
}

static void test_replicated_bank_through_failures(void **state) {
  (void)state;
  pc_error_t err;
  write_config();
  start_tso(0);
  start_tso(1);
  for (int i = 0; i < NSERVERS; i++) start_server(i, NULL);
  char cfg[512];
  snprintf(cfg, sizeof cfg, "%s/cluster.json", dir);
  if (!(db = pc_db_open_config(cfg, &err))) fail_msg("%s", err.text);
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, 30000);
  for (int i = 0; i < NACCOUNTS; i++) {
    char row[16];
    acct_row(row, sizeof row, i);
    assert_int_equal(tu_set_long(t, "bank", row, START_BALANCE, &err), PC_OK);
  }
  if (pc_txn_commit(t, &err) != PC_OK) fail_msg("the accounts' first commit: %s", err.text);
  pc_txn_destroy(t);
  for (int i = 0; i <= NCLIENTS; i++) {
    char path[512], id[16], log[24];
    snprintf(path, sizeof path, "%s/shared%d", dir, i);
    sh[i] = map_shared(path, 1);
    assert_non_null(sh[i]);
    snprintf(id, sizeof id, "%d", i);
    snprintf(log, sizeof log, i < NCLIENTS ? "bank%d" : "audit", i);
    const char *bank[] = {self_exe, "bank", cfg, path, id, NULL};
    const char *audit[] = {self_exe, "audit", cfg, path, NULL};
    client_pids[i] = spawn(i < NCLIENTS ? bank : audit, log, NULL);
  }
  wait_commits(5, "the start");

  /* 1. each tablet's leader killed in turn */
  for (int tb = 0; tb < 3; tb++) {
    int lead = leader_of(tb);
    kill_server(lead, SIGKILL);
    uint64_t ms = probe_commit(tb);
    fprintf(stderr, "tablet %s: leader %s killed: a commit on its rows after %" PRIu64 " ms\n",
            tablet_names[tb], server_names[lead], ms);
    wait_commits(3, "a leader was killed");
    start_server(lead, NULL);
    wait_commits(3, "a killed server came back");
  }

  /* 2. a leader paused past the election timeout */
  int stopped = leader_of(1);
  kill_server(stopped, SIGSTOP);
  uint64_t ms = probe_commit(1);
  fprintf(stderr, "tablet t2: leader %s paused: a commit on its rows after %" PRIu64 " ms\n",
          server_names[stopped], ms);
  if (ms < 3 * ELECTION_MS) sleep_ms((unsigned)(3 * ELECTION_MS - ms));
  kill_server(stopped, SIGCONT);
  assert_int_equal(direct_read(stopped, 1), PC_UNAVAILABLE); /* it does not answer as leader */
  wait_commits(3, "a paused leader resumed");

  /* 3. a server's data directory lost: it rebuilds itself from the others */
  int lost = 2;
  kill_server(lost, SIGKILL);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/data/server-%s'", dir, server_names[lost]);
  assert_int_equal(system(cmd), 0);
  wait_commits(3, "a server was lost");
  start_server(lost, NULL);
  wait_caught_up(lost);
  for (int tb = 0; tb < 3; tb++) move_leader(tb, lost, NULL);
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, 30000);
  long sum = 0, v;
  for (int i = 0; i < NACCOUNTS; i++) {
    char row[16];
    acct_row(row, sizeof row, i);
    if (tu_get_long(t, "bank", row, &v, &err) != PC_OK) fail_msg("read: %s", err.text);
    sum += v;
  }
  pc_txn_destroy(t);
  assert_int_equal(sum, NACCOUNTS * START_BALANCE);
  fprintf(stderr, "server %s rebuilt from empty, leads every tablet, total %ld\n",
          server_names[lost], sum);
  wait_commits(3, "the rebuilt server took the leadership");

  /* 4. a minority alone */
  int alone = 0;
  kill_server(1, SIGSTOP);
  kill_server(2, SIGSTOP);
  sleep_ms(3 * ELECTION_MS);
  for (int tb = 0; tb < 3; tb++) assert_int_equal(direct_read(alone, tb), PC_UNAVAILABLE);
  uint64_t before = total_ok();
  sleep_ms(2 * ELECTION_MS);
  uint64_t during = total_ok();
  kill_server(1, SIGCONT);
  kill_server(2, SIGCONT);
  /* commits in flight when they were paused may end meanwhile: none begins */
  assert_true(during - before <= NCLIENTS);
  ms = wait_commits(3, "the majority returned");
  fprintf(stderr, "majority back: every client committed again within %" PRIu64 " ms\n", ms);

  /* 5. crashes at each step of the replication path */
  static const char *const points[] = {"replica.before_append", "replica.after_append",
                                       "replica.before_apply", "replica.before_reply"};
  for (size_t k = 0; k < sizeof points / sizeof points[0]; k++) {
    /* restarted with the point armed, then leading a tablet: it proposes,
     * appends, applies and replies */
    int victim = (int)(k % NSERVERS), tb = (int)(k % 3);
    char spec[128];
    snprintf(spec, sizeof spec, "%s=100*exit(9)", points[k]);
    kill_server(victim, SIGTERM);
    waitpid(servers[victim], NULL, 0);
    int status = 0, gone = start_server_armed(victim, spec, &status);
    if (gone) fprintf(stderr, "server %s stopped as it started\n", server_names[victim]);
    /* leaders reply: one that won a tablet of its own may have replied its
     * 100 times, and stopped, before its move */
    if (!gone && strcmp(points[k], "replica.before_reply") == 0) {
      gone = move_leader(tb, victim, &status);
      if (gone) fprintf(stderr, "server %s stopped before its move\n", server_names[victim]);
    }
    for (int w = 0; !gone && w < 6000 && waitpid(servers[victim], &status, WNOHANG) == 0; w++)
      sleep_ms(10);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 9))
      fail_msg("server %s did not stop at %s", server_names[victim], points[k]);
    servers[victim] = 0;
    fprintf(stderr, "server %s crashed at %s\n", server_names[victim], points[k]);
    wait_commits(3, points[k]);
    start_server(victim, NULL);
    wait_commits(3, "a crashed server came back");
  }
  /* a Raft log write that fails (a failing disk) stops the server, with its
   * reason, rather than letting it go on from a log it could not write */
  stops_at(1, "replica.log_write=100*return", NULL, "a Raft log write failed");
  /* so does a term or vote it could not store: libraft would leave the
   * group unavailable on a server that stays up. A leadership moved between
   * the two others makes a new term, which s2 must store. */
  stops_at(1, "replica.hard_state_write=return", new_term, "its term or vote was not stored");

  /* the end */
  for (int i = 0; i <= NCLIENTS; i++) atomic_store(&sh[i]->stop, 1);
  for (int i = 0; i <= NCLIENTS; i++) {
    int status = 0;
    waitpid(client_pids[i], &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  if (atomic_load(&sh[NCLIENTS]->violations))
    fail_msg("%" PRIu64 " snapshots saw a wrong total, the first: %s",
             atomic_load(&sh[NCLIENTS]->violations), sh[NCLIENTS]->violation);
  t = pc_txn_begin(db, &err);
  assert_non_null(t);
  pc_txn_set_timeout_ms(t, 30000);
  sum = 0;
  for (int i = 0; i < NACCOUNTS; i++) {
    char row[16];
    acct_row(row, sizeof row, i);
    assert_int_equal(tu_get_long(t, "bank", row, &v, &err), PC_OK);
    sum += v;
  }
  assert_int_equal(sum, NACCOUNTS * START_BALANCE);
  for (int i = 0; i < NCLIENTS; i++) {
    char row[16];
    snprintf(row, sizeof row, "c%d", i);
    assert_int_equal(tu_get_long(t, "clients", row, &v, &err), PC_OK);
    uint64_t ok = atomic_load(&sh[i]->ok), unknown = atomic_load(&sh[i]->unknown);
    /* a killed leader's requests in flight go again to the next leader: a
     * transfer fails on a lost connection only as a commit of unknown outcome */
    if (atomic_load(&sh[i]->lost))
      fail_msg("client %d: %" PRIu64 " transfers failed on a lost connection", i,
               (uint64_t)atomic_load(&sh[i]->lost));
    if ((uint64_t)v < ok || (uint64_t)v > ok + unknown)
      fail_msg("client %d: %ld transfers stored, %" PRIu64 " acknowledged, %" PRIu64 " unknown",
               i, v, ok, unknown);
  }
  for (int tb = 0; tb < 3; tb++) /* every row has been read now: a lock met is settled */
    assert_int_equal(tu_get_long(t, "bank", probe_rows[tb], &v, &err), PC_OK);
  pc_txn_destroy(t);
  size_t locks = tu_raw_count(db, "bank", PC_CELL_LOCK) + tu_raw_count(db, "clients", PC_CELL_LOCK);
  assert_int_equal(locks, 0);
  fprintf(stderr, "%" PRIu64 " transfers acknowledged, %" PRIu64 " audits, total %ld, %zu locks\n",
          total_ok(), atomic_load(&sh[NCLIENTS]->audits), sum, locks);
  pc_db_close(db);
  db = NULL;
}

static int setup(void **state) {
  (void)state;
  cli = getenv("PERCOLATOR_CLI");
  if (!cli || !*cli) {
    fprintf(stderr, "PERCOLATOR_CLI must name the percolator binary\n");
    return -1;
  }
  zk = tu_zk_start(1);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/pc-replication-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i <= NCLIENTS; i++)
    if (client_pids[i] > 0) kill(client_pids[i], SIGKILL), waitpid(client_pids[i], NULL, 0);
  for (int i = 0; i < 2; i++)
    if (tsos[i] > 0) kill(tsos[i], SIGKILL), waitpid(tsos[i], NULL, 0);
  for (int i = 0; i < NSERVERS; i++)
    if (servers[i] > 0) {
      kill(servers[i], SIGCONT);
      kill(servers[i], SIGKILL);
      waitpid(servers[i], NULL, 0);
    }
  tu_zk_stop(zk);
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
  if (argc == 4 && strcmp(argv[1], "audit") == 0) return audit_main(argv[2], argv[3]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replicated_bank_through_failures),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
