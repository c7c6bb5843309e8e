/* replication.c — what replicated tablets cost and what they buy, in one
 * run on this machine. Every cluster is started through the playground
 * (playground/playground.h, as `percolator playground --servers 3
 * --replicas R` starts one): a private ZooKeeper server, one oracle, and
 * three tablet servers s1..s3 holding three tablets, each a Raft group of R
 * replicas (R = 1: tablet i alone on server i). Parts (--parts, all by
 * default), each on clusters of its own:
 *
 *   throughput  bank transfers (read two accounts, write both: a two-row
 *               transaction, across two tablets two times in three) from
 *               --procs client processes of --threads threads each for
 *               --seconds, against 3 replicas and against 1, --rounds
 *               rounds (the order alternating); committed transactions a
 *               second, and the CPU seconds a transaction of every process
 *               (the oracle, each server, ZooKeeper, the clients: /proc and
 *               getrusage over the measured interval), added up;
 *   dedup       the dedup indexer (apps/dedup) on --docs generated
 *               documents (bench/corpus.c, seed 42), --workers worker
 *               processes: `percolator load`, then `percolator wait`;
 *               documents a second from the load's start to wait's end and
 *               the CPU a document of every process (the workers, load and
 *               wait too), 3 replicas against 1; `percolator check` after
 *               each run must pass;
 *   failover    3 replicas, --kills times: the leader of a tablet (each
 *               tablet in turn) killed with SIGKILL and, for every tablet it
 *               led, the time from the kill to the first commit on a row of
 *               that tablet (a thread of this process committing one
 *               transaction after another on it, each retried at once);
 *               then the server restarted and waited for until its replicas
 *               hold what their leaders had committed, before the next kill;
 *               a client process commits transfers all along (--background
 *               threads). Median, p99 and the largest, against the goal of
 *               the election timeout (--election-timeout-ms) plus a second;
 *   rebuild     3 replicas, --rebuild-mb MB of incompressible values
 *               loaded (64 KiB each, eight a transaction), then the server
 *               leading the fewest tablets killed, its data directory
 *               deleted and the server restarted empty, while the
 *               background client commits transfers: the seconds until each
 *               of its replicas is a voter that has applied what its leader
 *               had committed when the server restarted, and the bytes of
 *               store streamed to it, each also per GB of the replicas'
 *               stores the server held before.
 *
 * No acknowledged write may be lost: after each part the accounts must sum
 * to what they started with, each probe row must hold at least its
 * acknowledged increments, and `check` must pass. A part that finds
 * otherwise prints its finding and the program exits 1.
 *
 * Client processes are this program run again (`client`), sharing a file
 * of counters with it. Every process it starts dies with it; the temporary
 * directory is removed at the end (kept with --keep). Output: one JSON
 * document on stdout. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "base/error.h"
#include "net/rpc.h"
#include "playground/playground.h"
#include "replica/repl_client.h"

#define WHO "replication"
#define MAX_PROCS 16
#define MAX_THREADS 64
#define MAX_KILLS 1000
#define NTABLETS 3
#define NSERVERS 3
#define BALANCE 1000
#define START_WAIT_MS 180000u   /* a JVM and five daemons on a loaded machine */
#define CATCH_UP_MS 600000u     /* a restarted server's replicas catching up */
#define PROBE_GIVE_UP_S 60.0    /* a tablet without a commit this long after a kill: failed */
#define BLOB_VALUE (64u << 10)  /* the rebuild's values */
#define BLOB_CELLS 8            /* values a loading transaction writes */

enum { PART_THROUGHPUT = 1, PART_DEDUP = 2, PART_FAILOVER = 4, PART_REBUILD = 8 };
static const char *const part_names[] = {"throughput", "dedup", "failover", "rebuild"};

static struct {
  const char *cli, *plugin, *corpus, *parent;
  int parts;
  int rounds, procs, threads, keys;
  double seconds;
  int docs, workers, loaders, dedup_rounds;
  int kills, background;
  unsigned election_ms;
  int rebuild_mb;
  int keep;
  const char *log_level;
} opt = {NULL, NULL, NULL, "/tmp", PART_THROUGHPUT | PART_DEDUP | PART_FAILOVER | PART_REBUILD,
         2, 2, 4, 3000, 20.0, 20000, 2, 16, 1, 40, 2, 1000, 300, 0, "warn"};

static char self_exe[PATH_MAX], work[PATH_MAX];
static volatile sig_atomic_t interrupted;
static int failures; /* findings of lost writes or failed checks */

static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, WHO ": ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (work[0] && !opt.keep) bu_remove_tree(work);
  exit(1);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, WHO ": ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void account_row(char *out, size_t cap, int i) { snprintf(out, cap, "acct%06d", i); }

/* The row of tablet t (0..2) that the failover probes commit on: after
 * the tablet's first account, before its second. */
static void probe_row(char *out, size_t cap, int t) {
  snprintf(out, cap, "acct%06dp", t * opt.keys / NTABLETS);
}

/* ---- the client processes ------------------------------------------------------ */

/* What a client process reports, in the file both map. */
typedef struct slot {
  _Atomic int ready, done;
  _Atomic uint64_t committed, conflicts, unknown, errors;
  double cpu_s, seconds; /* from go to the end of its last transaction */
  char error[PC_ERROR_TEXT + 64];
  uint64_t hist[BU_HBUCKETS]; /* committed transfers' latency, ns */
} slot_t;

typedef struct shared {
  _Atomic int go, stop;
  slot_t slot[MAX_PROCS];
} shared_t;

static shared_t *map_shared(const char *path, int create) {
  int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
  if (fd < 0) return NULL;
  if (create && ftruncate(fd, (off_t)sizeof(shared_t)) != 0) {
    close(fd);
    return NULL;
  }
  shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return s == MAP_FAILED ? NULL : s;
}

typedef struct client_thread {
  pthread_t tid;
  pc_db_t *db;
  slot_t *slot;
  shared_t *sh;
  uint64_t rng;
  uint64_t hist[BU_HBUCKETS];
} client_thread_t;

static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;

static pc_status_t get_long(pc_txn_t *t, const char *table, const char *row, long *v,
                            pc_error_t *err) {
  char *val = NULL;
  size_t len = 0;
  pc_status_t st = pc_txn_get(t, table, row, strlen(row), "v", 1, &val, &len, err);
  if (st == PC_NOT_FOUND) {
    *v = 0;
    return PC_OK;
  }
  if (st == PC_OK) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), val);
    *v = strtol(buf, NULL, 10);
    pc_free(val);
  }
  return st;
}

static pc_status_t set_long(pc_txn_t *t, const char *table, const char *row, long v,
                            pc_error_t *err) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld", v);
  return pc_txn_set(t, table, row, strlen(row), "v", 1, buf, (size_t)n, err);
}

/* Transfers between random accounts until told to stop. */
static void *client_thread(void *arg) {
  client_thread_t *c = arg;
  while (!atomic_load(&c->sh->stop)) {
    int a = (int)(bu_splitmix64(&c->rng) % (uint64_t)opt.keys);
    int b = (int)(bu_splitmix64(&c->rng) % (uint64_t)opt.keys);
    if (a == b) continue;
    char ra[32], rb[32];
    account_row(ra, sizeof ra, a);
    account_row(rb, sizeof rb, b);
    pc_error_t err;
    uint64_t t0 = bu_now_ns();
    pc_txn_t *t = pc_txn_begin(c->db, &err);
    pc_status_t st = t ? PC_OK : err.code;
    long va = 0, vb = 0;
    if (t) pc_txn_set_timeout_ms(t, 30000);
    if (st == PC_OK) st = get_long(t, "bank", ra, &va, &err);
    if (st == PC_OK) st = get_long(t, "bank", rb, &vb, &err);
    if (st == PC_OK) st = set_long(t, "bank", ra, va - 1, &err);
    if (st == PC_OK) st = set_long(t, "bank", rb, vb + 1, &err);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    pc_txn_destroy(t);
    if (st == PC_OK) {
      c->hist[bu_bucket_of(bu_now_ns() - t0)]++;
      atomic_fetch_add(&c->slot->committed, 1);
    } else if (st == PC_CONFLICT || st == PC_LOCKED || st == PC_ABORTED) {
      atomic_fetch_add(&c->slot->conflicts, 1);
    } else if (st == PC_UNKNOWN) {
      atomic_fetch_add(&c->slot->unknown, 1);
    } else {
      if (atomic_fetch_add(&c->slot->errors, 1) == 0)
        snprintf(c->slot->error, sizeof c->slot->error, "%s: %s", pc_status_name(st), err.text);
      bu_sleep_s(0.01); /* a cluster without a leader for a while: no busy loop */
    }
  }
  pthread_mutex_lock(&hist_mu);
  bu_hist_add(c->slot->hist, c->hist);
  pthread_mutex_unlock(&hist_mu);
  return NULL;
}

static int client_main(const char *config, const char *shm, int id, int threads) {
  shared_t *sh = map_shared(shm, 0);
  if (!sh || id < 0 || id >= MAX_PROCS || threads < 1 || threads > MAX_THREADS) return 2;
  slot_t *slot = &sh->slot[id];
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(config, &err);
  if (!db) {
    snprintf(slot->error, sizeof slot->error, "opening the cluster: %s", err.text);
    atomic_store(&slot->errors, 1);
    atomic_store(&slot->done, 1);
    return 1;
  }
  static client_thread_t th[MAX_THREADS];
  atomic_store(&slot->ready, 1);
  while (!atomic_load(&sh->go) && !atomic_load(&sh->stop)) bu_sleep_s(0.001);
  double t0 = bu_now_s(), c0 = bu_cpu_s(NULL);
  for (int i = 0; i < threads; i++) {
    th[i].db = db;
    th[i].slot = slot;
    th[i].sh = sh;
    th[i].rng = (uint64_t)getpid() * 7919u + (uint64_t)i;
  }
  int started = bu_start_threads(th, threads, sizeof th[0], offsetof(client_thread_t, tid),
                                 client_thread);
  bu_join_threads(th, started, sizeof th[0], offsetof(client_thread_t, tid));
  slot->cpu_s = bu_cpu_s(NULL) - c0;
  slot->seconds = bu_now_s() - t0;
  pc_db_close(db);
  atomic_store(&slot->done, 1);
  return 0;
}

typedef struct clients {
  shared_t *sh;
  pid_t pid[MAX_PROCS];
  int n;
} clients_t;

/* Starts n client processes of threads threads each against config, and
 * waits until each has opened the cluster. */
static void clients_start(clients_t *c, const char *config, int n, int threads, const char *tag) {
  char shm[PATH_MAX + 64];
  snprintf(shm, sizeof shm, "%s/%s.shared", work, tag);
  memset(c, 0, sizeof *c);
  if (!(c->sh = map_shared(shm, 1))) die("cannot map %s: %s", shm, strerror(errno));
  c->n = n;
  pid_t parent = getpid();
  char keys[16];
  snprintf(keys, sizeof keys, "%d", opt.keys);
  for (int i = 0; i < n; i++) {
    char id[16], nt[16], log[PATH_MAX + 64];
    snprintf(id, sizeof id, "%d", i);
    snprintf(nt, sizeof nt, "%d", threads);
    snprintf(log, sizeof log, "%s/%s-client%d.log", work, tag, i);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
      execl(self_exe, self_exe, "client", config, shm, id, nt, keys, (char *)NULL);
      _exit(127);
    }
    c->pid[i] = pid;
  }
  double until = bu_now_s() + 120;
  for (int i = 0; i < n; i++) {
    while (!atomic_load(&c->sh->slot[i].ready)) {
      if (atomic_load(&c->sh->slot[i].done))
        die("client %d: %s", i, c->sh->slot[i].error);
      if (bu_now_s() > until || interrupted) die("client %d did not open the cluster", i);
      int status;
      if (waitpid(c->pid[i], &status, WNOHANG) == c->pid[i])
        die("client %d exited (status %d) before it opened the cluster", i, status);
      bu_sleep_s(0.01);
    }
  }
}

static void clients_go(clients_t *c) { atomic_store(&c->sh->go, 1); }

/* Stops the clients and reaps them. */
static void clients_stop(clients_t *c) {
  atomic_store(&c->sh->stop, 1);
  for (int i = 0; i < c->n; i++) {
    int status = 0;
    if (waitpid(c->pid[i], &status, 0) != c->pid[i] || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      die("client %d ended with status %d", i, status);
  }
}

static uint64_t clients_committed(const clients_t *c) {
  uint64_t n = 0;
  for (int i = 0; i < c->n; i++) n += atomic_load(&c->sh->slot[i].committed);
  return n;
}

static void clients_free(clients_t *c) {
  if (c->sh) munmap(c->sh, sizeof *c->sh);
  c->sh = NULL;
}

/* ---- clusters ------------------------------------------------------------------------ */

typedef struct cluster {
  pc_pg_t *pg;
  char dir[PATH_MAX + 64];
  int replicas;
} cluster_t;

/* Starts a cluster of three servers holding three tablets split at the
 * two rows given, each tablet in replicas copies, with workers worker
 * processes running the dedup plugin (0: none); extra is merged into its
 * configurations. */
static void cluster_start(cluster_t *c, const char *tag, int replicas, const char *split1,
                          const char *split2, int workers, json_t *extra) {
  memset(c, 0, sizeof *c);
  snprintf(c->dir, sizeof c->dir, "%s/%s", work, tag);
  c->replicas = replicas;
  const char *splits[2] = {split1, split2};
  const char *plugins[1] = {opt.plugin};
  json_t *x = extra ? json_deep_copy(extra) : json_object();
  json_t *log = json_object(), *repl = json_object();
  json_object_set_new(log, "level", json_string(opt.log_level));
  json_object_set_new(x, "log", log);
  json_object_set_new(repl, "election_timeout_ms", json_integer(opt.election_ms));
  json_object_set_new(x, "replication", repl);
  pc_pg_options_t o = {.cli = opt.cli, .dir = c->dir, .zk_servers = 1, .oracles = 1,
                       .splits = splits, .nsplits = 2, .servers = NSERVERS, .replicas = replicas,
                       .workers = workers, .plugins = plugins, .nplugins = workers ? 1 : 0,
                       .extra = x};
  pc_error_t err;
  c->pg = pc_pg_create(&o, &err);
  json_decref(x);
  if (!c->pg) die("%s: %s", tag, err.text);
  if (pc_pg_start(c->pg, START_WAIT_MS, &err) != PC_OK) die("%s: %s", tag, err.text);
}

static void cluster_stop(cluster_t *c) {
  pc_pg_free(c->pg);
  c->pg = NULL;
  if (!opt.keep) bu_remove_tree(c->dir);
}

static const char *client_config(const cluster_t *c) { return pc_pg_client_config(c->pg); }

/* The CPU seconds of every role of c so far, by role index. */
static void roles_cpu(const cluster_t *c, double *out) {
  for (size_t i = 0; i < pc_pg_role_count(c->pg); i++) {
    const pc_pg_role_t *r = pc_pg_role(c->pg, i);
    out[i] = r->pid > 0 ? bu_proc_cpu_s(r->pid) : 0;
  }
}

/* What process pid has read and written so far (/proc/PID/io): rchar (every
 * read: sockets and files), write_bytes (to the disk). */
static void proc_io(pid_t pid, uint64_t *rchar, uint64_t *write_bytes) {
  char path[64], line[128];
  *rchar = *write_bytes = 0;
  snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return;
  unsigned long long v;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "rchar: %llu", &v) == 1) *rchar = v;
    if (sscanf(line, "write_bytes: %llu", &v) == 1) *write_bytes = v;
  }
  fclose(f);
}

/* The role index of server k (0-based: s1 is 0). */
static int server_role(const cluster_t *c, int k) {
  char name[16];
  snprintf(name, sizeof name, "s%d", k + 1);
  int i = pc_pg_find(c->pg, name);
  if (i < 0) die("no server %s in the playground", name);
  return i;
}

/* The replicas server k holds and their state: *out (free()), *n. */
static pc_status_t server_replicas(const cluster_t *c, int k, pc_replica_info_t **out, size_t *n,
                                   pc_error_t *err) {
  const pc_pg_role_t *r = pc_pg_role(c->pg, (size_t)server_role(c, k));
  char host[256];
  uint16_t port = 0;
  *out = NULL;
  *n = 0;
  if (r->pid <= 0 || !r->listen[0]) return pc_error_set(err, PC_UNAVAILABLE, "%s is down", r->name);
  pc_status_t st = pc_parse_endpoint(r->listen, 0, host, sizeof host, &port, err);
  if (st != PC_OK) return st;
  pc_rpc_client_t *rc = pc_rpc_client_create(host, port, NULL, err);
  if (!rc) return err->code;
  st = pc_repl_remote_replicas(rc, 3000, out, n, err);
  pc_rpc_client_destroy(rc);
  return st;
}

static const char *tablet_name(int t) {
  static const char *const names[NTABLETS] = {"t1", "t2", "t3"};
  return names[t];
}

static int tablet_index(const char *group) {
  for (int t = 0; t < NTABLETS; t++)
    if (strcmp(group, tablet_name(t)) == 0) return t;
  return -1;
}

/* Which server leads (and serves) each tablet now: leader[t] = k, or -1;
 * commit[t] its commit index (may be NULL). */
static void leaders(const cluster_t *c, int *leader, uint64_t *commit) {
  for (int t = 0; t < NTABLETS; t++) {
    leader[t] = -1;
    if (commit) commit[t] = 0;
  }
  for (int k = 0; k < NSERVERS; k++) {
    pc_replica_info_t *info = NULL;
    size_t n = 0;
    pc_error_t err;
    if (server_replicas(c, k, &info, &n, &err) != PC_OK) continue;
    for (size_t j = 0; j < n; j++) {
      int t = tablet_index(info[j].group);
      if (t < 0 || info[j].state != RAFT_LEADER || !info[j].ready) continue;
      leader[t] = k;
      if (commit) commit[t] = info[j].commit;
    }
    free(info);
  }
}

/* The term of each tablet's leader now (0: none known). */
static void tablet_terms(const cluster_t *c, uint64_t *term) {
  for (int t = 0; t < NTABLETS; t++) term[t] = 0;
  for (int k = 0; k < NSERVERS; k++) {
    pc_replica_info_t *info = NULL;
    size_t n = 0;
    pc_error_t err;
    if (server_replicas(c, k, &info, &n, &err) != PC_OK) continue;
    for (size_t j = 0; j < n; j++) {
      int t = tablet_index(info[j].group);
      if (t >= 0 && info[j].state == RAFT_LEADER && info[j].term > term[t]) term[t] = info[j].term;
    }
    free(info);
  }
}

/* Waits until every tablet has a serving leader; 0, or -1 after timeout_s. */
static int await_leaders(const cluster_t *c, int *leader, uint64_t *commit, double timeout_s) {
  double until = bu_now_s() + timeout_s;
  for (;;) {
    leaders(c, leader, commit);
    int all = 1;
    for (int t = 0; t < NTABLETS; t++) all &= leader[t] >= 0;
    if (all) return 0;
    if (bu_now_s() > until || interrupted) return -1;
    bu_sleep_s(0.05);
  }
}

/* Whether server k's replica of each tablet it holds is a voter that has
 * applied target[t]; with whole, also that each configuration holds exactly
 * the tablet's number of replicas (a rejoin's old incarnation removed). */
static int caught_up(const cluster_t *c, int k, const uint64_t *target, int whole,
                     pc_replica_info_t *saw) {
  pc_replica_info_t *info = NULL;
  size_t n = 0;
  pc_error_t err;
  if (server_replicas(c, k, &info, &n, &err) != PC_OK) return 0;
  int done = 0;
  for (size_t j = 0; j < n; j++) {
    int t = tablet_index(info[j].group);
    if (t < 0) continue;
    int voter = 0;
    uint32_t voters = 0;
    for (uint32_t m = 0; m < info[j].n && m < 16; m++) {
      if (info[j].members[m].role == RAFT_VOTER) voters++;
      if (info[j].members[m].id == info[j].id) voter = info[j].members[m].role == RAFT_VOTER;
    }
    if (saw) saw[t] = info[j];
    done += voter && info[j].applied >= target[t] && (!whole || voters == (uint32_t)c->replicas);
  }
  free(info);
  return done == NTABLETS;
}

/* The bytes of the regular files under path. */
static uint64_t tree_bytes_total;
static int tree_fn(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)path;
  (void)f;
  if (flag == FTW_F) tree_bytes_total += (uint64_t)st->st_size;
  return 0;
}
static uint64_t tree_bytes(const char *path) {
  tree_bytes_total = 0;
  nftw(path, tree_fn, 16, FTW_PHYS);
  return tree_bytes_total;
}

/* ---- what the bank holds --------------------------------------------------------------- */

/* Writes the accounts, BALANCE each, 250 a transaction. */
static void preload_accounts(const char *config) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(config, &err);
  if (!db) die("opening the cluster: %s", err.text);
  for (int first = 0; first < opt.keys; first += 250) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t) die("begin: %s", err.text);
    pc_txn_set_timeout_ms(t, 60000);
    pc_status_t st = PC_OK;
    for (int i = first; i < first + 250 && i < opt.keys && st == PC_OK; i++) {
      char row[32];
      account_row(row, sizeof row, i);
      st = set_long(t, "bank", row, BALANCE, &err);
    }
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    pc_txn_destroy(t);
    if (st != PC_OK) die("preloading the accounts: %s", err.text);
  }
  pc_db_close(db);
}

/* The accounts' sum in one snapshot must be what they started with; the
 * finding goes into out ("total_holds"). */
static void check_total(const char *config, json_t *out) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(config, &err);
  if (!db) die("opening the cluster: %s", err.text);
  long sum = 0, v = 0;
  pc_status_t st = PC_OK;
  for (int attempt = 0; attempt < 5; attempt++) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t) continue;
    pc_txn_set_timeout_ms(t, 60000);
    sum = 0;
    st = PC_OK;
    for (int i = 0; i < opt.keys && st == PC_OK; i++) {
      char row[32];
      account_row(row, sizeof row, i);
      st = get_long(t, "bank", row, &v, &err);
      sum += v;
    }
    pc_txn_destroy(t);
    if (st == PC_OK) break;
  }
  pc_db_close(db);
  if (st != PC_OK) die("summing the accounts: %s", err.text);
  long want = (long)opt.keys * BALANCE;
  json_object_set_new(out, "total_holds", json_boolean(sum == want));
  if (sum != want) {
    note("the accounts sum to %ld, not %ld", sum, want);
    failures++;
  }
}

/* ---- CPU of every process -------------------------------------------------------------- */

/* {"oracle", "s1", "s2", "s3", "servers", "zookeeper", "workers", "clients", ..., "total"}:
 * CPU seconds per unit of work (a transaction, a document) of each process
 * and of each kind, from the roles' CPU before and after (by role index)
 * and what the other processes (clients, load, wait) used. */
static json_t *cpu_json(const cluster_t *c, const double *before, const double *after,
                        const char *other_name, double other_s, double units, double *total_out) {
  json_t *o = json_object();
  double servers = 0, workers = 0, oracle = 0, zk = 0;
  for (size_t i = 0; i < pc_pg_role_count(c->pg); i++) {
    const pc_pg_role_t *r = pc_pg_role(c->pg, i);
    double d = after[i] - before[i];
    if (d < 0) d = 0;
    switch (r->kind) {
      case PC_PG_TABLET:
        servers += d;
        json_object_set_new(o, r->name, json_real(d / units));
        break;
      case PC_PG_WORKER: workers += d; break;
      case PC_PG_TSO:
      case PC_PG_SERVER: oracle += d; break;
      case PC_PG_ZOOKEEPER: zk += d; break;
    }
  }
  json_object_set_new(o, "oracle", json_real(oracle / units));
  json_object_set_new(o, "servers", json_real(servers / units));
  json_object_set_new(o, "zookeeper", json_real(zk / units));
  if (workers > 0) json_object_set_new(o, "workers", json_real(workers / units));
  json_object_set_new(o, other_name, json_real(other_s / units));
  double total = servers + workers + oracle + zk + other_s;
  json_object_set_new(o, "total", json_real(total / units));
  if (total_out) *total_out = total;
  return o;
}

/* {"s1": N, ...}: how many tablets each server leads now. */
static json_t *led_json(const cluster_t *c) {
  int leader[NTABLETS];
  leaders(c, leader, NULL);
  json_t *o = json_object();
  for (int k = 0; k < NSERVERS; k++) {
    char name[16];
    int n = 0;
    snprintf(name, sizeof name, "s%d", k + 1);
    for (int t = 0; t < NTABLETS; t++) n += leader[t] == k;
    json_object_set_new(o, name, json_integer(n));
  }
  return o;
}

/* ---- throughput ------------------------------------------------------------------------- */

typedef struct tp_result {
  double txns_s, cpu_per_txn_ms, p50_ms, p99_ms;
} tp_result_t;

static json_t *throughput_run(int replicas, int round, tp_result_t *res) {
  char tag[64], s1[32], s2[32];
  snprintf(tag, sizeof tag, "tp-r%d-%d", replicas, round);
  account_row(s1, sizeof s1, opt.keys / NTABLETS);
  account_row(s2, sizeof s2, 2 * opt.keys / NTABLETS);
  note("throughput: %d replica%s, round %d", replicas, replicas == 1 ? "" : "s", round + 1);
  cluster_t c;
  cluster_start(&c, tag, replicas, s1, s2, 0, NULL);
  int leader[NTABLETS];
  if (await_leaders(&c, leader, NULL, 60) != 0) die("%s: a tablet has no leader", tag);
  preload_accounts(client_config(&c));
  clients_t cl;
  clients_start(&cl, client_config(&c), opt.procs, opt.threads, tag);
  double before[PC_PG_MAX_ROLES], after[PC_PG_MAX_ROLES];
  bu_meter_t m, d;
  roles_cpu(&c, before);
  bu_meter_start(&m);
  clients_go(&cl);
  bu_sleep_s(opt.seconds);
  atomic_store(&cl.sh->stop, 1);
  bu_meter_read(&m, &d);
  roles_cpu(&c, after);
  clients_stop(&cl);
  double secs = (double)d.t_ns * 1e-9, client_cpu = 0;
  uint64_t committed = 0, conflicts = 0, unknown = 0, errors = 0;
  static uint64_t hist[BU_HBUCKETS];
  memset(hist, 0, sizeof hist);
  json_t *errs = json_array();
  for (int i = 0; i < cl.n; i++) {
    slot_t *s = &cl.sh->slot[i];
    committed += atomic_load(&s->committed);
    conflicts += atomic_load(&s->conflicts);
    unknown += atomic_load(&s->unknown);
    errors += atomic_load(&s->errors);
    client_cpu += s->cpu_s;
    bu_hist_add(hist, s->hist);
    if (s->error[0]) json_array_append_new(errs, json_string(s->error));
  }
  double total_cpu = 0;
  json_t *cpu = cpu_json(&c, before, after, "clients", client_cpu, (double)committed, &total_cpu);
  /* milliseconds, for reading */
  const char *key;
  json_t *v;
  json_object_foreach(cpu, key, v) json_real_set(v, json_real_value(v) * 1000.0);
  double others = bu_others_cores(d.busy_s, total_cpu, secs);
  json_t *o = json_object();
  json_object_set_new(o, "replicas", json_integer(replicas));
  json_object_set_new(o, "round", json_integer(round + 1));
  json_object_set_new(o, "seconds", json_real(secs));
  json_object_set_new(o, "committed", json_integer((json_int_t)committed));
  json_object_set_new(o, "txns_s", json_real((double)committed / secs));
  json_object_set_new(o, "conflicts", json_integer((json_int_t)conflicts));
  json_object_set_new(o, "unknown", json_integer((json_int_t)unknown));
  json_object_set_new(o, "errors", json_integer((json_int_t)errors));
  if (json_array_size(errs)) json_object_set(o, "first_errors", errs);
  json_decref(errs);
  uint64_t total = bu_hist_total(hist);
  res->p50_ms = (double)bu_percentile(hist, total, 0.5) / 1e6;
  res->p99_ms = (double)bu_percentile(hist, total, 0.99) / 1e6;
  json_object_set_new(o, "commit_latency_ms", json_pack("{s:f, s:f}", "p50", res->p50_ms, "p99", res->p99_ms));
  json_object_set_new(o, "cpu_ms_per_txn", cpu);
  json_object_set_new(o, "tablets_led_at_end", led_json(&c));
  json_object_set_new(o, "cpu_bound_txns_s",
                      json_real(total_cpu > 0 ? (double)sysconf(_SC_NPROCESSORS_ONLN) *
                                                    (double)committed / total_cpu
                                              : 0));
  json_object_set_new(o, "machine_busy_cores", json_real(d.busy_s / secs));
  json_object_set_new(o, "others_cores", json_real(others));
  json_object_set_new(o, "host_steal_s", json_real(d.steal_s));
  clients_free(&cl);
  check_total(client_config(&c), o);
  res->txns_s = (double)committed / secs;
  res->cpu_per_txn_ms = committed ? total_cpu * 1000.0 / (double)committed : 0;
  cluster_stop(&c);
  return o;
}

/* Into o, the medians over rounds of rate[which] and cpu[which] (which 0:
 * 1 replica, 1: 3 replicas) as "<rate>_1_replica", "<rate>_3_replicas",
 * "<cpu>_1_replica", "<cpu>_3_replicas", with "ratio_3_of_1" (of the rates)
 * and "cpu_ceiling_ratio_3_of_1" (1 replica's CPU over 3's). */
static void put_medians(json_t *o, const char *rate_key, const char *cpu_key,
                        double rate[2][BU_MAX_ROUNDS], double cpu[2][BU_MAX_ROUNDS], int rounds) {
  double r1 = bu_median(rate[0], rounds), r3 = bu_median(rate[1], rounds);
  double c1 = bu_median(cpu[0], rounds), c3 = bu_median(cpu[1], rounds);
  char key[64];
  snprintf(key, sizeof key, "%s_1_replica", rate_key);
  json_object_set_new(o, key, json_real(r1));
  snprintf(key, sizeof key, "%s_3_replicas", rate_key);
  json_object_set_new(o, key, json_real(r3));
  json_object_set_new(o, "ratio_3_of_1", json_real(r1 > 0 ? r3 / r1 : 0));
  snprintf(key, sizeof key, "%s_1_replica", cpu_key);
  json_object_set_new(o, key, json_real(c1));
  snprintf(key, sizeof key, "%s_3_replicas", cpu_key);
  json_object_set_new(o, key, json_real(c3));
  json_object_set_new(o, "cpu_ceiling_ratio_3_of_1", json_real(c3 > 0 ? c1 / c3 : 0));
}

static json_t *part_throughput(void) {
  json_t *runs = json_array();
  double rate[2][BU_MAX_ROUNDS], cpu[2][BU_MAX_ROUNDS];
  for (int round = 0; round < opt.rounds && !interrupted; round++)
    for (int k = 0; k < 2; k++) {
      /* the order alternates: 3 then 1 in even rounds, 1 then 3 in odd ones */
      int which = round % 2 ? k : 1 - k, replicas = which ? 3 : 1;
      tp_result_t r;
      json_array_append_new(runs, throughput_run(replicas, round, &r));
      rate[which][round] = r.txns_s;
      cpu[which][round] = r.cpu_per_txn_ms;
    }
  json_t *o = json_object();
  json_object_set_new(o, "what", json_string(
      "bank transfers (read two of the accounts, write both; conflicts are counted, not retried) "
      "from client processes for the seconds given, against 3 tablets on 3 servers, each tablet "
      "a Raft group of 3 replicas or of 1; medians over the rounds; CPU: every process of the "
      "cluster (/proc) and the clients (getrusage) over the measured interval, in ms a committed "
      "transaction"));
  json_object_set_new(o, "procs", json_integer(opt.procs));
  json_object_set_new(o, "threads_per_proc", json_integer(opt.threads));
  json_object_set_new(o, "accounts", json_integer(opt.keys));
  json_object_set_new(o, "seconds", json_real(opt.seconds));
  json_object_set_new(o, "runs", runs);
  if (!interrupted) {
    put_medians(o, "txns_s", "cpu_ms_per_txn", rate, cpu, opt.rounds);
    json_object_set_new(o, "cpu_ceiling_what", json_string(
        "CPU a transaction with 1 replica / with 3: the most that 3 replicas can do of 1's "
        "transactions/s when every core of the machine is busy with the cluster, since the "
        "three copies share the same cores"));
  }
  return o;
}

/* ---- dedup ------------------------------------------------------------------------------- */

/* Runs argv (argv[0] a path) with stdout and stderr into files of work/tag;
 * its exit status (-1: did not run) and CPU seconds in *cpu. */
static int run_program(const char *const *argv, const char *tag, double *cpu) {
  char out[PATH_MAX + 64], err[PATH_MAX + 64];
  snprintf(out, sizeof out, "%s/%s.out", work, tag);
  snprintf(err, sizeof err, "%s/%s.err", work, tag);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(126);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0)
    if (errno != EINTR) die("wait4: %s", strerror(errno));
  if (cpu) *cpu = bu_rusage_cpu_s(&ru);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The last line of work/tag.SUFFIX, for a message or the output. */
static void last_line(const char *tag, const char *suffix, char *out, size_t cap) {
  char path[PATH_MAX + 64], line[1024];
  snprintf(path, sizeof path, "%s/%s.%s", work, tag, suffix);
  out[0] = '\0';
  FILE *f = fopen(path, "re");
  if (!f) return;
  while (fgets(line, sizeof line, f))
    if (line[0] != '\n') snprintf(out, cap, "%.*s", (int)strcspn(line, "\n"), line);
  fclose(f);
}

typedef struct dd_result {
  double docs_s, cpu_per_doc_ms;
} dd_result_t;

static json_t *dedup_run(int replicas, int round, const char *corpus, dd_result_t *res) {
  char tag[64], split2[32];
  snprintf(tag, sizeof tag, "dd-r%d-%d", replicas, round);
  snprintf(split2, sizeof split2, "doc/%07d", opt.docs / 2);
  note("dedup: %d replica%s, round %d, %d documents", replicas, replicas == 1 ? "" : "s",
       round + 1, opt.docs);
  /* as bench/dedup.sh configures its clusters; rows: the index's binary
   * rows and the hashes below "8" in t1, the other hashes and the first
   * half of the documents in t2, the rest in t3 */
  json_t *extra = json_pack("{s:{s:i}, s:{s:i, s:{s:i, s:i}}}", "store", "gc_interval_ms", 0,
                            "workers", "threads", 4, "scan", "idle_ms", 10, "buckets_per_claim", 64);
  cluster_t c;
  cluster_start(&c, tag, replicas, "8", split2, opt.workers, extra);
  json_decref(extra);
  int leader[NTABLETS];
  if (await_leaders(&c, leader, NULL, 60) != 0) die("%s: a tablet has no leader", tag);
  char loaders[16], ltag[80], wtag[80], ctag[80];
  snprintf(loaders, sizeof loaders, "%d", opt.loaders);
  snprintf(ltag, sizeof ltag, "%s-load", tag);
  snprintf(wtag, sizeof wtag, "%s-wait", tag);
  snprintf(ctag, sizeof ctag, "%s-check", tag);
  const char *cfg = client_config(&c);
  const char *load[] = {opt.cli, "--config", cfg, "load", "--threads", loaders,
                        "--max-bytes", "8388608", corpus, NULL};
  const char *wait[] = {opt.cli, "--config", cfg, "wait", "--timeout-s", "7200", NULL};
  const char *check[] = {opt.cli, "--config", cfg, "check", NULL};
  double before[PC_PG_MAX_ROLES], after[PC_PG_MAX_ROLES], load_cpu = 0, wait_cpu = 0;
  bu_meter_t m, d;
  roles_cpu(&c, before);
  bu_meter_start(&m);
  int lrc = run_program(load, ltag, &load_cpu);
  double load_s = (double)(bu_now_ns() - m.t_ns) * 1e-9;
  int wrc = run_program(wait, wtag, &wait_cpu);
  bu_meter_read(&m, &d);
  roles_cpu(&c, after);
  double secs = (double)d.t_ns * 1e-9;
  char line[1024];
  if (lrc != 0) {
    last_line(ltag, "err", line, sizeof line);
    die("%s: load exited %d: %s", tag, lrc, line);
  }
  if (wrc != 0) {
    last_line(wtag, "err", line, sizeof line);
    die("%s: wait exited %d: %s", tag, wrc, line);
  }
  double t0 = bu_now_s(), check_cpu = 0;
  int crc = run_program(check, ctag, &check_cpu);
  double check_s = bu_now_s() - t0;
  double total_cpu = 0;
  json_t *cpu = cpu_json(&c, before, after, "load_and_wait", load_cpu + wait_cpu,
                         (double)opt.docs, &total_cpu);
  const char *key;
  json_t *v;
  json_object_foreach(cpu, key, v) json_real_set(v, json_real_value(v) * 1000.0);
  json_t *o = json_object();
  json_object_set_new(o, "replicas", json_integer(replicas));
  json_object_set_new(o, "round", json_integer(round + 1));
  json_object_set_new(o, "seconds", json_real(secs));
  json_object_set_new(o, "load_seconds", json_real(load_s));
  json_object_set_new(o, "documents_s", json_real((double)opt.docs / secs));
  json_object_set_new(o, "cpu_ms_per_document", cpu);
  json_object_set_new(o, "tablets_led_at_end", led_json(&c));
  json_object_set_new(o, "cpu_bound_documents_s",
                      json_real(total_cpu > 0 ? (double)sysconf(_SC_NPROCESSORS_ONLN) *
                                                    (double)opt.docs / total_cpu
                                              : 0));
  json_object_set_new(o, "machine_busy_cores", json_real(d.busy_s / secs));
  json_object_set_new(o, "others_cores", json_real(bu_others_cores(d.busy_s, total_cpu, secs)));
  json_object_set_new(o, "host_steal_s", json_real(d.steal_s));
  last_line(ltag, "out", line, sizeof line);
  json_object_set_new(o, "load_summary", json_string(line));
  last_line(ctag, "out", line, sizeof line);
  json_object_set_new(o, "check", json_pack("{s:i, s:f, s:s}", "exit", crc, "seconds", check_s,
                                            "last_line", line));
  if (crc != 0) {
    note("%s: check exited %d: %s", tag, crc, line);
    failures++;
  }
  res->docs_s = (double)opt.docs / secs;
  res->cpu_per_doc_ms = total_cpu * 1000.0 / (double)opt.docs;
  cluster_stop(&c);
  return o;
}

static json_t *part_dedup(void) {
  char corpus[PATH_MAX + 32], docs[16];
  snprintf(corpus, sizeof corpus, "%s/gen.jsonl", work);
  snprintf(docs, sizeof docs, "%d", opt.docs);
  note("dedup: generating %d documents", opt.docs);
  const char *gen[] = {opt.corpus, "generate", "--docs", docs, "--seed", "42", "--jsonl", corpus,
                       NULL};
  if (run_program(gen, "corpus", NULL) != 0) die("the corpus generator failed (see %s)", work);
  json_t *runs = json_array();
  double rate[2][BU_MAX_ROUNDS], cpu[2][BU_MAX_ROUNDS];
  for (int round = 0; round < opt.dedup_rounds && !interrupted; round++)
    for (int k = 0; k < 2; k++) {
      int which = round % 2 ? 1 - k : k, replicas = which ? 3 : 1; /* 1 first in round 1 */
      dd_result_t r;
      json_array_append_new(runs, dedup_run(replicas, round, corpus, &r));
      rate[which][round] = r.docs_s;
      cpu[which][round] = r.cpu_per_doc_ms;
    }
  json_t *o = json_object();
  json_object_set_new(o, "what", json_string(
      "the dedup indexer (apps/dedup) on generated documents (bench/corpus.c, seed 42): "
      "`percolator load --threads L --max-bytes 8388608`, then `percolator wait`, with worker "
      "processes of 4 observer threads; documents/s from the load's start to wait's end; CPU "
      "of every process over that interval in ms a document; `percolator check` after each "
      "run (exit 0: every document in its cluster); medians over the rounds"));
  json_object_set_new(o, "documents", json_integer(opt.docs));
  json_object_set_new(o, "worker_processes", json_integer(opt.workers));
  json_object_set_new(o, "loader_threads", json_integer(opt.loaders));
  json_object_set_new(o, "runs", runs);
  if (!interrupted) {
    put_medians(o, "documents_s", "cpu_ms_per_document", rate, cpu, opt.dedup_rounds);
    json_object_set_new(o, "cpu_ceiling_what", json_string(
        "CPU a document with 1 replica / with 3: the most that 3 replicas can do of 1's "
        "documents/s when every core of the machine is busy with the cluster"));
    json_object_set_new(o, "goal", json_string("3 replicas at least 0.6 of 1 replica's documents/s"));
  }
  return o;
}

/* ---- failover ------------------------------------------------------------------------------ */

typedef struct probe {
  pthread_t tid;
  pc_db_t *db;
  int tablet;
  bu_gate_t *gate;
  uint64_t kill_ns;
  double ms; /* to the first commit; < 0: none within PROBE_GIVE_UP_S */
  double elected_ms; /* to the first sight of another replica leading and serving; < 0: none */
  _Atomic int done;
  uint64_t ok, unknown; /* acknowledged and unknown increments of its row */
  int attempts;
  char error[PC_ERROR_TEXT + 32];
} probe_t;

/* One increment of the tablet's probe row: its status. */
static pc_status_t probe_once(pc_db_t *db, int tablet, pc_error_t *err) {
  char row[32];
  probe_row(row, sizeof row, tablet);
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err->code;
  pc_txn_set_timeout_ms(t, 15000);
  long v = 0;
  pc_status_t st = get_long(t, "bank", row, &v, err);
  if (st == PC_OK) st = set_long(t, "bank", row, v + 1, err);
  if (st == PC_OK) st = pc_txn_commit(t, err);
  pc_txn_destroy(t);
  return st;
}

/* After the gate opens, commits on its tablet until one commit succeeds. */
static void *probe_thread(void *arg) {
  probe_t *p = arg;
  bu_gate_wait(p->gate);
  p->ms = -1;
  for (;;) {
    pc_error_t err;
    p->attempts++;
    pc_status_t st = probe_once(p->db, p->tablet, &err);
    uint64_t now = bu_now_ns();
    if (st == PC_OK) {
      p->ok++;
      p->ms = (double)(now - p->kill_ns) / 1e6;
      break;
    }
    if (st == PC_UNKNOWN) p->unknown++;
    snprintf(p->error, sizeof p->error, "%s: %s", pc_status_name(st), err.text);
    if ((double)(now - p->kill_ns) * 1e-9 > PROBE_GIVE_UP_S || interrupted) break;
    bu_sleep_s(0.002);
  }
  atomic_store(&p->done, 1);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* {"p50", "p99", "max"} of v[0..n) (left as it is): quantiles by the
 * nearest rank. */
static json_t *quantiles_json(const double *v, int n) {
  static double sorted[MAX_KILLS * NTABLETS];
  if (n == 0) return json_pack("{s:n, s:n, s:n}", "p50", "p99", "max");
  memcpy(sorted, v, (size_t)n * sizeof *v);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
  double q[2] = {0.5, 0.99}, at[2];
  for (int i = 0; i < 2; i++) {
    int k = (int)(q[i] * n + 0.999999);
    at[i] = sorted[(k < 1 ? 1 : k > n ? n : k) - 1];
  }
  return json_pack("{s:f, s:f, s:f}", "p50", at[0], "p99", at[1], "max", sorted[n - 1]);
}

/* Restarts server k (on its port) and waits until it holds what each
 * leader had committed: the seconds that took, from the restart. */
static double restart_and_catch_up(cluster_t *c, int k, int whole, pc_replica_info_t *saw,
                                   double *ready_s) {
  pc_error_t err;
  double t0 = bu_now_s();
  if (pc_pg_restart(c->pg, (size_t)server_role(c, k), 0, START_WAIT_MS, &err) != PC_OK)
    die("restarting s%d: %s", k + 1, err.text);
  if (ready_s) *ready_s = bu_now_s() - t0;
  int leader[NTABLETS];
  uint64_t target[NTABLETS];
  if (await_leaders(c, leader, target, 60) != 0) die("after s%d restarted: a tablet has no leader", k + 1);
  while (!caught_up(c, k, target, whole, saw)) {
    if (bu_now_s() - t0 > CATCH_UP_MS / 1000.0 || interrupted)
      die("s%d did not catch up within %u s", k + 1, CATCH_UP_MS / 1000);
    bu_sleep_s(0.05);
  }
  return bu_now_s() - t0;
}

/* Each probe row must hold at least its acknowledged increments and at
 * most those and the unknown ones. */
static void check_probes(const char *config, const uint64_t *ok, const uint64_t *unknown,
                         json_t *out) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(config, &err);
  if (!db) die("opening the cluster: %s", err.text);
  int holds = 1;
  for (int t = 0; t < NTABLETS; t++) {
    char row[32];
    probe_row(row, sizeof row, t);
    pc_txn_t *x = pc_txn_begin(db, &err);
    long v = -1;
    if (x) {
      pc_txn_set_timeout_ms(x, 60000);
      if (get_long(x, "bank", row, &v, &err) != PC_OK) v = -1;
      pc_txn_destroy(x);
    }
    if (v < 0 || (uint64_t)v < ok[t] || (uint64_t)v > ok[t] + unknown[t]) {
      note("probe row of %s holds %ld: %" PRIu64 " increments acknowledged, %" PRIu64 " unknown",
           tablet_name(t), v, ok[t], unknown[t]);
      holds = 0;
      failures++;
    }
  }
  pc_db_close(db);
  json_object_set_new(out, "probe_rows_hold_every_acknowledged_commit", json_boolean(holds));
}

static json_t *part_failover(void) {
  char s1[32], s2[32];
  account_row(s1, sizeof s1, opt.keys / NTABLETS);
  account_row(s2, sizeof s2, 2 * opt.keys / NTABLETS);
  note("failover: %d kills, election timeout %u ms", opt.kills, opt.election_ms);
  cluster_t c;
  cluster_start(&c, "failover", 3, s1, s2, 0, NULL);
  int leader[NTABLETS];
  if (await_leaders(&c, leader, NULL, 60) != 0) die("failover: a tablet has no leader");
  preload_accounts(client_config(&c));
  clients_t cl = {0};
  if (opt.background) {
    clients_start(&cl, client_config(&c), 1, opt.background, "failover");
    clients_go(&cl);
  }
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(client_config(&c), &err);
  if (!db) die("opening the cluster: %s", err.text);
  static double ms[MAX_KILLS * NTABLETS], elected[MAX_KILLS * NTABLETS], catch_s[MAX_KILLS];
  uint64_t ok[NTABLETS] = {0}, unknown[NTABLETS] = {0};
  int nms = 0, nelected = 0, ncatch = 0, missed = 0;
  json_t *kills = json_array();
  for (int kill_no = 0; kill_no < opt.kills && !interrupted; kill_no++) {
    int t = kill_no % NTABLETS;
    /* a commit on every tablet first: the cluster is whole again */
    for (int u = 0; u < NTABLETS; u++) {
      pc_status_t st = PC_OK;
      for (int attempt = 0; attempt < 50; attempt++) {
        if ((st = probe_once(db, u, &err)) == PC_OK) break;
        if (st == PC_UNKNOWN) unknown[u]++;
        bu_sleep_s(0.1);
      }
      if (st != PC_OK) die("failover: no commit on %s before kill %d: %s", tablet_name(u),
                           kill_no + 1, err.text);
      ok[u]++;
    }
    if (await_leaders(&c, leader, NULL, 60) != 0) die("failover: a tablet has no leader");
    int victim = leader[t];
    bu_gate_t gate;
    bu_gate_init(&gate);
    probe_t probes[NTABLETS];
    int np = 0;
    for (int u = 0; u < NTABLETS; u++)
      if (leader[u] == victim) {
        memset(&probes[np], 0, sizeof probes[np]);
        probes[np].db = db;
        probes[np].tablet = u;
        probes[np].gate = &gate;
        if (pthread_create(&probes[np].tid, NULL, probe_thread, &probes[np]) != 0)
          die("pthread_create failed");
        np++;
      }
    uint64_t kill_ns = bu_now_ns();
    for (int i = 0; i < np; i++) probes[i].kill_ns = kill_ns;
    pc_pg_signal(c.pg, (size_t)server_role(&c, victim), SIGKILL);
    bu_gate_open(&gate);
    /* meanwhile: when a new leader serves each tablet (each server asked
     * every 20 ms, the killed one refusing at once) */
    for (int i = 0; i < np; i++) probes[i].elected_ms = -1;
    for (int pending = np; pending > 0;) {
      int now_leader[NTABLETS];
      leaders(&c, now_leader, NULL);
      double at = (double)(bu_now_ns() - kill_ns) / 1e6;
      pending = 0;
      for (int i = 0; i < np; i++) {
        int u = probes[i].tablet;
        if (probes[i].elected_ms < 0 && now_leader[u] >= 0 && now_leader[u] != victim)
          probes[i].elected_ms = at;
        pending += probes[i].elected_ms < 0 || !atomic_load(&probes[i].done);
      }
      if (pending && at > PROBE_GIVE_UP_S * 1000.0 + 5000.0) break;
      if (pending) bu_sleep_s(0.02);
    }
    json_t *k = json_object(), *per = json_object(), *per_elected = json_object();
    for (int i = 0; i < np; i++) {
      pthread_join(probes[i].tid, NULL);
      if (probes[i].elected_ms >= 0) {
        elected[nelected++] = probes[i].elected_ms;
        json_object_set_new(per_elected, tablet_name(probes[i].tablet),
                            json_real(probes[i].elected_ms));
      }
      int u = probes[i].tablet;
      ok[u] += probes[i].ok;
      unknown[u] += probes[i].unknown;
      if (probes[i].ms >= 0) {
        ms[nms++] = probes[i].ms;
        json_object_set_new(per, tablet_name(u), json_real(probes[i].ms));
      } else {
        missed++;
        json_object_set_new(per, tablet_name(u), json_string(probes[i].error));
      }
    }
    bu_gate_destroy(&gate);
    double ready_s = 0;
    catch_s[ncatch++] = restart_and_catch_up(&c, victim, 0, NULL, &ready_s);
    char name[16];
    snprintf(name, sizeof name, "s%d", victim + 1);
    json_object_set_new(k, "killed", json_string(name));
    json_object_set_new(k, "first_commit_ms", per);
    json_object_set_new(k, "new_leader_seen_ms", per_elected);
    json_object_set_new(k, "restart_to_caught_up_s", json_real(catch_s[ncatch - 1]));
    json_array_append_new(kills, k);
    char shown[256] = "";
    size_t used = 0;
    for (int i = 0; i < np && used < sizeof shown; i++)
      used += (size_t)snprintf(shown + used, sizeof shown - used, " %s %.0f ms",
                               tablet_name(probes[i].tablet), probes[i].ms);
    note("failover: kill %d of %s, the first commit on:%s", kill_no + 1, name, shown);
  }
  pc_db_close(db);
  json_t *o = json_object();
  if (opt.background) {
    clients_stop(&cl);
    uint64_t bg_unknown = 0, bg_errors = 0;
    for (int i = 0; i < cl.n; i++) {
      bg_unknown += atomic_load(&cl.sh->slot[i].unknown);
      bg_errors += atomic_load(&cl.sh->slot[i].errors);
    }
    json_object_set_new(o, "background_committed", json_integer((json_int_t)clients_committed(&cl)));
    json_object_set_new(o, "background_unknown", json_integer((json_int_t)bg_unknown));
    json_object_set_new(o, "background_errors", json_integer((json_int_t)bg_errors));
    if (cl.sh->slot[0].error[0])
      json_object_set_new(o, "background_first_error", json_string(cl.sh->slot[0].error));
    clients_free(&cl);
  }
  check_total(client_config(&c), o);
  check_probes(client_config(&c), ok, unknown, o);
  cluster_stop(&c);
  json_t *first = quantiles_json(ms, nms);
  double p99 = json_real_value(json_object_get(first, "p99"));
  json_object_set_new(o, "what", json_string(
      "3 replicas of 3 tablets on 3 servers; each time the leader of a tablet (t1, t2, t3 in "
      "turn) is killed with SIGKILL, and for every tablet it led, the milliseconds from the kill "
      "to the first commit on a row of that tablet (a client thread per tablet committing one "
      "single-row transaction after another, each retried at once); then the server is "
      "restarted and waited for until its replicas hold what their leaders had committed; a "
      "client process commits transfers all along"));
  json_object_set_new(o, "election_timeout_ms", json_integer(opt.election_ms));
  json_object_set_new(o, "kills", json_integer(opt.kills));
  json_object_set_new(o, "samples", json_integer(nms));
  json_object_set_new(o, "no_commit_within_60_s", json_integer(missed));
  json_object_set_new(o, "first_commit_ms", first);
  json_object_set_new(o, "new_leader_seen_ms", quantiles_json(elected, nelected));
  json_object_set_new(o, "new_leader_seen_what", json_string(
      "from the kill until this program, asking every server for its replicas' state every 20 "
      "ms, first saw another replica leading the tablet and serving (its term's first entry "
      "applied): the election's share of the failover"));
  json_object_set_new(o, "goal_ms", json_integer(opt.election_ms + 1000));
  json_object_set_new(o, "p99_under_goal", json_boolean(nms > 0 && missed == 0 &&
                                                        p99 < opt.election_ms + 1000.0));
  json_object_set_new(o, "restart_to_caught_up_s", quantiles_json(catch_s, ncatch));
  json_object_set_new(o, "background_threads", json_integer(opt.background));
  json_object_set_new(o, "each_kill", kills);
  return o;
}

/* ---- rebuild from empty ---------------------------------------------------------------------- */

typedef struct loader {
  pthread_t tid;
  pc_db_t *db;
  const char *random; /* 1 MiB + a value of random bytes */
  _Atomic uint64_t *next, *bytes;
  uint64_t cells, rng;
  char error[PC_ERROR_TEXT + 32];
} loader_t;

/* Writes transactions of BLOB_CELLS values until the cells are all taken. */
static void *loader_thread(void *arg) {
  loader_t *l = arg;
  for (;;) {
    uint64_t first = atomic_fetch_add(l->next, BLOB_CELLS);
    if (first >= l->cells || interrupted) break;
    pc_status_t st = PC_OK;
    pc_error_t err;
    for (int attempt = 0; attempt < 20; attempt++) {
      pc_txn_t *t = pc_txn_begin(l->db, &err);
      if (!t) {
        st = err.code;
        continue;
      }
      pc_txn_set_timeout_ms(t, 60000);
      st = PC_OK;
      for (uint64_t i = first; i < first + BLOB_CELLS && i < l->cells && st == PC_OK; i++) {
        /* rows spread over every account, so over every tablet */
        char row[64];
        snprintf(row, sizeof row, "acct%06d/blob%08" PRIu64, (int)(i % (uint64_t)opt.keys), i);
        size_t off = (size_t)(bu_splitmix64(&l->rng) % (1u << 20));
        st = pc_txn_set(t, "blob", row, strlen(row), "v", 1, l->random + off, BLOB_VALUE, &err);
      }
      if (st == PC_OK) st = pc_txn_commit(t, &err);
      pc_txn_destroy(t);
      if (st == PC_OK || st == PC_UNKNOWN) break;
    }
    if (st != PC_OK && st != PC_UNKNOWN) {
      snprintf(l->error, sizeof l->error, "%s: %s", pc_status_name(st), err.text);
      break;
    }
    atomic_fetch_add(l->bytes, (uint64_t)BLOB_CELLS * BLOB_VALUE);
  }
  return NULL;
}

static json_t *part_rebuild(void) {
  char s1[32], s2[32];
  account_row(s1, sizeof s1, opt.keys / NTABLETS);
  account_row(s2, sizeof s2, 2 * opt.keys / NTABLETS);
  cluster_t c;
  cluster_start(&c, "rebuild", 3, s1, s2, 0, NULL);
  int leader[NTABLETS];
  if (await_leaders(&c, leader, NULL, 60) != 0) die("rebuild: a tablet has no leader");
  preload_accounts(client_config(&c));
  /* the data */
  note("rebuild: loading %d MB", opt.rebuild_mb);
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(client_config(&c), &err);
  if (!db) die("opening the cluster: %s", err.text);
  char *random = bu_random_bytes((1u << 20) + BLOB_VALUE, 38);
  if (!random) die("out of memory");
  _Atomic uint64_t next = 0, bytes = 0;
  loader_t ld[4];
  double t0 = bu_now_s();
  for (int i = 0; i < 4; i++) {
    memset(&ld[i], 0, sizeof ld[i]);
    ld[i].db = db;
    ld[i].random = random;
    ld[i].next = &next;
    ld[i].bytes = &bytes;
    ld[i].cells = ((uint64_t)opt.rebuild_mb << 20) / BLOB_VALUE;
    ld[i].rng = 1000u + (uint64_t)i;
  }
  bu_start_threads(ld, 4, sizeof ld[0], offsetof(loader_t, tid), loader_thread);
  bu_join_threads(ld, 4, sizeof ld[0], offsetof(loader_t, tid));
  double load_s = bu_now_s() - t0;
  for (int i = 0; i < 4; i++)
    if (ld[i].error[0]) die("rebuild: loading: %s", ld[i].error);
  pc_db_close(db);
  free(random);
  if (interrupted) die("interrupted");
  /* every replica holds it all before the loss */
  uint64_t target[NTABLETS];
  if (await_leaders(&c, leader, target, 60) != 0) die("rebuild: a tablet has no leader");
  for (int k = 0; k < NSERVERS; k++) {
    double until = bu_now_s() + CATCH_UP_MS / 1000.0;
    while (!caught_up(&c, k, target, 1, NULL))
      if (bu_now_s() > until || interrupted) die("rebuild: s%d is behind before the loss", k + 1);
      else bu_sleep_s(0.1);
  }
  /* the server leading the fewest tablets loses its directory */
  int led[NSERVERS] = {0}, victim = 0;
  for (int t = 0; t < NTABLETS; t++) led[leader[t]]++;
  for (int k = 1; k < NSERVERS; k++)
    if (led[k] < led[victim]) victim = k;
  char sdir[sizeof c.dir + 32], rdir[sizeof c.dir + 48];
  snprintf(sdir, sizeof sdir, "%s/data/server-s%d", c.dir, victim + 1);
  snprintf(rdir, sizeof rdir, "%s/replicas", sdir);
  uint64_t stores_before = tree_bytes(rdir), dir_before = tree_bytes(sdir);
  uint64_t terms_before[NTABLETS], terms_after[NTABLETS];
  tablet_terms(&c, terms_before);
  clients_t cl = {0};
  if (opt.background) {
    clients_start(&cl, client_config(&c), 1, opt.background, "rebuild");
    clients_go(&cl);
    bu_sleep_s(2);
  }
  note("rebuild: s%d (%.0f MB of stores) killed, its directory deleted, restarted", victim + 1,
       (double)stores_before / 1e6);
  pc_pg_signal(c.pg, (size_t)server_role(&c, victim), SIGKILL);
  bu_remove_tree(sdir);
  uint64_t bg0 = opt.background ? clients_committed(&cl) : 0;
  double r0 = bu_now_s(), ready_s = 0;
  pc_replica_info_t saw[NTABLETS];
  memset(saw, 0, sizeof saw);
  double voters_s = restart_and_catch_up(&c, victim, 0, saw, &ready_s);
  uint64_t rchar = 0, written = 0;
  proc_io(pc_pg_role(c.pg, (size_t)server_role(&c, victim))->pid, &rchar, &written);
  char raft_dir[sizeof sdir + 16];
  snprintf(raft_dir, sizeof raft_dir, "%s/raft", sdir);
  uint64_t log_after = tree_bytes(raft_dir);
  uint64_t received = 0, snapshots = 0;
  for (int t = 0; t < NTABLETS; t++) {
    received += saw[t].snapshot_bytes_received;
    snapshots += saw[t].snapshots_received;
  }
  /* and the old incarnations' replicas removed */
  double whole_s = voters_s;
  for (;;) {
    uint64_t zero[NTABLETS] = {0};
    if (caught_up(&c, victim, zero, 1, NULL)) break;
    if (bu_now_s() - r0 > CATCH_UP_MS / 1000.0 || interrupted) die("rebuild: the old replicas stay");
    bu_sleep_s(0.05);
    whole_s = bu_now_s() - r0;
  }
  uint64_t bg1 = opt.background ? clients_committed(&cl) : 0;
  double during_s = bu_now_s() - r0;
  uint64_t stores_after = tree_bytes(rdir);
  tablet_terms(&c, terms_after);
  int elections = 0;
  for (int t = 0; t < NTABLETS; t++) elections += terms_after[t] != terms_before[t];
  json_t *o = json_object();
  json_object_set_new(o, "tablets_whose_leader_changed_meanwhile", json_integer(elections));
  if (opt.background) {
    clients_stop(&cl);
    json_object_set_new(o, "background_txns_s_during_rebuild",
                        json_real((double)(bg1 - bg0) / during_s));
    clients_free(&cl);
  }
  check_total(client_config(&c), o);
  cluster_stop(&c);
  double gb = (double)stores_before / 1e9;
  char name[16];
  snprintf(name, sizeof name, "s%d", victim + 1);
  json_object_set_new(o, "what", json_string(
      "3 replicas of 3 tablets on 3 servers, loaded with incompressible 64 KiB values; the "
      "server leading the fewest tablets killed with SIGKILL, its data directory deleted, and "
      "started again on an empty one (it rejoins each group under a new incarnation and "
      "catches up from a snapshot streamed by a peer) while a client process commits "
      "transfers; seconds from its restart until each of its replicas is a voter that has "
      "applied what its leader had committed at the restart; bytes of store streamed to it "
      "(the snapshots' key-value pairs); both per GB of the replicas' stores it held before "
      "(1 GB = 10^9 bytes)"));
  json_object_set_new(o, "loaded_mb", json_integer(opt.rebuild_mb));
  json_object_set_new(o, "load_seconds", json_real(load_s));
  json_object_set_new(o, "server", json_string(name));
  json_object_set_new(o, "stores_bytes_before", json_integer((json_int_t)stores_before));
  json_object_set_new(o, "directory_bytes_before", json_integer((json_int_t)dir_before));
  json_object_set_new(o, "stores_bytes_after", json_integer((json_int_t)stores_after));
  json_object_set_new(o, "restart_to_ready_s", json_real(ready_s));
  json_object_set_new(o, "restart_to_caught_up_voters_s", json_real(voters_s));
  json_object_set_new(o, "restart_to_old_replicas_removed_s", json_real(whole_s));
  json_object_set_new(o, "snapshots_received", json_integer((json_int_t)snapshots));
  json_object_set_new(o, "bytes_streamed", json_integer((json_int_t)received));
  json_object_set_new(o, "server_read_bytes", json_integer((json_int_t)rchar));
  json_object_set_new(o, "server_disk_written_bytes", json_integer((json_int_t)written));
  json_object_set_new(o, "server_log_bytes_after", json_integer((json_int_t)log_after));
  json_object_set_new(o, "io_what", json_string(
      "of the restarted server's process from its start until its replicas were caught-up "
      "voters (/proc/PID/io): read_bytes is every byte it read (sockets and files: the streamed "
      "stores, then the log entries its leaders sent it), disk_written_bytes what it wrote to "
      "the disk; log_bytes_after the size of its Raft log directory then"));
  json_object_set_new(o, "seconds_per_gb", json_real(gb > 0 ? voters_s / gb : 0));
  json_object_set_new(o, "read_bytes_per_gb_of_store", json_real(gb > 0 ? (double)rchar / gb : 0));
  json_object_set_new(o, "bytes_streamed_per_gb_of_store",
                      json_real(gb > 0 ? (double)received / gb : 0));
  return o;
}

/* ---- main --------------------------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_replication [options]\n"
          "  --parts LIST           of throughput,dedup,failover,rebuild (default all)\n"
          "  --rounds N             throughput rounds per replica count (default 2)\n"
          "  --seconds S            a throughput round's measured seconds (default 20)\n"
          "  --procs N              throughput client processes (default 2)\n"
          "  --threads N            threads per client process (default 4)\n"
          "  --keys N               bank accounts (default 3000)\n"
          "  --docs N               dedup documents (default 20000)\n"
          "  --workers N            dedup worker processes (default 2)\n"
          "  --loaders N            `load --threads` (default 16)\n"
          "  --dedup-rounds N       dedup rounds per replica count (default 1)\n"
          "  --kills N              failover kills (default 40)\n"
          "  --election-timeout-ms  replication.election_timeout_ms (default 1000, the default)\n"
          "  --background N         threads of the client committing during failover and\n"
          "                         rebuild (default 2; 0: none)\n"
          "  --rebuild-mb N         MB loaded before the rebuild (default 300)\n"
          "  --cli PATH             the percolator program (default ../apps/cli/percolator)\n"
          "  --plugin PATH          the dedup plugin (default ../apps/dedup/dedup.so)\n"
          "  --corpus PATH          pc_bench_corpus (default: next to this program)\n"
          "  --dir DIR              where the temporary directory goes (default /tmp)\n"
          "  --keep                 keep the temporary directory (with the clusters' logs)\n"
          "  --log-level LEVEL      the daemons' log.level (default warn)\n");
}

static int parse_parts(const char *s) {
  int parts = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
    int k = bu_choice(p, part_names, 4);
    if (k < 0) return -1;
    parts |= 1 << k;
  }
  return parts;
}

/* path next to this program: dir of self_exe + rel */
static const char *beside(const char *rel) {
  static char bufs[3][PATH_MAX + 64];
  static int n;
  char *b = bufs[n++ % 3];
  const char *slash = strrchr(self_exe, '/');
  snprintf(b, sizeof bufs[0], "%.*s/%s", (int)(slash ? slash - self_exe : 1), slash ? self_exe : ".",
           rel);
  return b;
}

int main(int argc, char **argv) {
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  if (n <= 0) return 1;
  self_exe[n] = '\0';
  if (argc == 7 && strcmp(argv[1], "client") == 0) {
    opt.keys = atoi(argv[6]);
    if (opt.keys < 2) return 2;
    return client_main(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
  }
  static const struct option longopts[] = {
      {"parts", required_argument, NULL, 'P'},    {"rounds", required_argument, NULL, 'r'},
      {"seconds", required_argument, NULL, 's'},  {"procs", required_argument, NULL, 'p'},
      {"threads", required_argument, NULL, 't'},  {"keys", required_argument, NULL, 'k'},
      {"docs", required_argument, NULL, 'd'},     {"workers", required_argument, NULL, 'w'},
      {"loaders", required_argument, NULL, 'l'},  {"dedup-rounds", required_argument, NULL, 'R'},
      {"kills", required_argument, NULL, 'K'},    {"election-timeout-ms", required_argument, NULL, 'e'},
      {"background", required_argument, NULL, 'b'}, {"rebuild-mb", required_argument, NULL, 'm'},
      {"cli", required_argument, NULL, 'c'},      {"plugin", required_argument, NULL, 'g'},
      {"corpus", required_argument, NULL, 'C'},   {"dir", required_argument, NULL, 'D'},
      {"keep", no_argument, NULL, 'x'},           {"help", no_argument, NULL, 'h'},
      {"log-level", required_argument, NULL, 'L'},
      {NULL, 0, NULL, 0}};
  int c, at = 0;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "", longopts, &at)) != -1) {
    int *ip = NULL;
    uint64_t lo = 1, hi = 1000000;
    switch (c) {
      case 'P':
        if ((opt.parts = parse_parts(optarg)) <= 0) return bu_bad_value(WHO, "--parts", optarg), 2;
        continue;
      case 's':
        if (bu_parse_double(optarg, 0, 1, 3600, &opt.seconds) != 0)
          return bu_bad_value(WHO, "--seconds", optarg), 2;
        continue;
      case 'r': ip = &opt.rounds, hi = BU_MAX_ROUNDS; break;
      case 'p': ip = &opt.procs, hi = MAX_PROCS; break;
      case 't': ip = &opt.threads, hi = MAX_THREADS; break;
      case 'k': ip = &opt.keys, lo = 30, hi = 999999; break;
      case 'd': ip = &opt.docs, lo = 2; break;
      case 'w': ip = &opt.workers, hi = 16; break;
      case 'l': ip = &opt.loaders, hi = 64; break;
      case 'R': ip = &opt.dedup_rounds, hi = BU_MAX_ROUNDS; break;
      case 'K': ip = &opt.kills, hi = MAX_KILLS; break;
      case 'b': ip = &opt.background, lo = 0, hi = MAX_THREADS; break;
      case 'm': ip = &opt.rebuild_mb, hi = 100000; break;
      case 'e':
        if (bu_parse_u64(optarg, 100, 60000, &v) != 0)
          return bu_bad_value(WHO, "--election-timeout-ms", optarg), 2;
        opt.election_ms = (unsigned)v;
        continue;
      case 'c': opt.cli = optarg; continue;
      case 'g': opt.plugin = optarg; continue;
      case 'C': opt.corpus = optarg; continue;
      case 'D': opt.parent = optarg; continue;
      case 'x': opt.keep = 1; continue;
      case 'L': opt.log_level = optarg; continue;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
    if (bu_parse_u64(optarg, lo, hi, &v) != 0) {
      char name[64];
      snprintf(name, sizeof name, "--%s", longopts[at].name);
      bu_bad_value(WHO, name, optarg);
      return 2;
    }
    *ip = (int)v;
  }
  if (bu_no_operands(WHO, argc, argv, optind) != 0) return 2;
  if (!opt.cli) opt.cli = beside("../apps/cli/percolator");
  if (!opt.plugin) opt.plugin = beside("../apps/dedup/dedup.so");
  if (!opt.corpus) opt.corpus = beside("pc_bench_corpus");
  if (access(opt.cli, X_OK) != 0) die("%s is not a program (pass --cli PATH)", opt.cli);
  if ((opt.parts & PART_DEDUP) && access(opt.plugin, R_OK) != 0)
    die("no dedup plugin at %s (pass --plugin PATH)", opt.plugin);
  if ((opt.parts & PART_DEDUP) && access(opt.corpus, X_OK) != 0)
    die("%s is not a program (pass --corpus PATH)", opt.corpus);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (bu_make_temp_dir(work, sizeof work, opt.parent, "bench-replication", WHO) != 0) return 1;

  json_t *doc = json_object();
  bu_json_head(doc, "replication");
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_object_set_new(doc, "cluster", json_string(
      "through the playground: a private ZooKeeper server, one oracle, servers s1..s3 on "
      "127.0.0.1, 3 tablets each a Raft group of 3 replicas (one on each server) or of 1 "
      "(tablet i on server i); sync on; every process on this machine"));
  json_object_set_new(doc, "election_timeout_ms", json_integer(opt.election_ms));
  if (opt.parts & PART_THROUGHPUT) json_object_set_new(doc, "throughput", part_throughput());
  if ((opt.parts & PART_DEDUP) && !interrupted) json_object_set_new(doc, "dedup", part_dedup());
  if ((opt.parts & PART_FAILOVER) && !interrupted)
    json_object_set_new(doc, "failover", part_failover());
  if ((opt.parts & PART_REBUILD) && !interrupted)
    json_object_set_new(doc, "rebuild", part_rebuild());
  json_object_set_new(doc, "loadavg_at_end", bu_json_loadavg());
  json_object_set_new(doc, "no_acknowledged_write_lost", json_boolean(failures == 0));
  if (!opt.keep) bu_remove_tree(work);
  else note("kept %s", work);
  if (interrupted) note("interrupted");
  return bu_json_finish(doc, failures || interrupted ? 1 : 0);
}
