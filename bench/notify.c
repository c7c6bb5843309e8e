/* notify.c — pc_bench_notify: what incremental processing costs.
 *
 * The observer is the trivial one of the issue: on a change of bench/src:v
 * of row R it reads the notified cell and writes its value to bench/dst:v of
 * R (with its ack, one row: a one-phase commit).
 *
 *   latency     a driver commits changes of src:v at a steady --rate per
 *               second to --rows rows for --seconds while the workers run;
 *               afterwards the raw view gives every dst:v commit, and each
 *               change's latency is the time from its commit to the commit of
 *               the first observer transaction of its row after it (a change
 *               coalesced into a later run is covered by that run), from the
 *               physical milliseconds of the two commit timestamps.
 *   throughput  --changes rows are written first (one notification each);
 *               then the workers start and the time until none is pending
 *               gives observer runs per second. The baseline, in the same
 *               run, is plain transactions doing the same reads and writes
 *               (begin, get src:v, set dst:v, commit) from --threads threads
 *               per worker process, over the same rows; the ratio is the
 *               observers' rate over the baseline's.
 *
 * Embedded (the default: a store in a temporary directory) the workers are
 * pc_worker_t objects in this process, --procs of them; with --config FILE
 * (a running cluster, e.g. `percolator run`) each worker is a forked process
 * with its own client, as `percolator worker` runs. Prints one JSON
 * document. */
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "core/db.h"
#include "notify/worker.h"
#include "observers/registry.h"

#define WHO "pc_bench_notify"
/* the table of the current run (a cluster keeps every run's) */
static char T[48] = "bench";
/* the observer's name of the current run (names are unique in a store) */
static char OBS[64] = "copy";
#define SRC "src:v"
#define DST "dst:v"

typedef struct params {
  const char *config; /* NULL: embedded */
  const char *parent;
  int rate, seconds, rows, changes, threads;
  int procs[4], nprocs;
} params_t;

/* ---- the observer --------------------------------------------------------- */

static pc_status_t copy_observe(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                                pc_error_t *err) {
  (void)state;
  char *v = NULL;
  size_t n = 0;
  pc_status_t st = pc_txn_get(txn, cell->table, cell->row, cell->row_len, cell->column,
                              cell->column_len, &v, &n, err);
  if (st == PC_NOT_FOUND) return PC_OK;
  if (st != PC_OK) return st;
  st = pc_txn_set(txn, cell->table, cell->row, cell->row_len, DST, strlen(DST), v, n, err);
  pc_free(v);
  return st;
}

static pc_observer_registry_t *make_registry(void) {
  pc_observer_registry_t *reg = pc_registry_create();
  pc_observer_def_t def = {.name = OBS, .table = T, .column = SRC, .column_len = strlen(SRC),
                           .kind = PC_OBSERVER_STRONG, .observe = copy_observe};
  pc_error_t err;
  if (!reg || pc_registry_add(reg, &def, NULL, "bench", &err) != PC_OK) {
    fprintf(stderr, WHO ": registry: %s\n", reg ? err.text : "out of memory");
    exit(1);
  }
  return reg;
}

/* ---- databases and workers -------------------------------------------------- */

static pc_db_t *open_db(const params_t *p, const char *dir) {
  pc_error_t err;
  pc_db_t *db;
  if (p->config) {
    db = pc_db_open_config(p->config, &err);
  } else {
    pc_options_t *o = pc_options_create();
    pc_options_set_create_if_missing(o, 1);
    pc_options_set_gc_interval_ms(o, 0); /* the latency pass reads every dst:v commit */
    db = pc_db_open(o, dir, &err);
    pc_options_destroy(o);
  }
  if (!db) {
    fprintf(stderr, WHO ": open: %s\n", err.text);
    exit(1);
  }
  return db;
}

typedef struct workers {
  int n;
  pc_worker_t *w[8];
  pid_t pid[8];
  pc_observer_registry_t *reg;
} workers_t;

static void start_workers(const params_t *p, pc_db_t *db, int n, workers_t *ws) {
  memset(ws, 0, sizeof *ws);
  ws->n = n;
  pc_worker_options_t o;
  pc_worker_options_default(&o);
  o.threads = (uint32_t)p->threads;
  o.idle_ms = 5;
  o.buckets_per_claim = 128; /* 8 claims a round: fewer lock-service calls per round */
  if (!p->config) {
    ws->reg = make_registry();
    for (int i = 0; i < n; i++) {
      pc_error_t err;
      if (!(ws->w[i] = pc_worker_start(db, ws->reg, &o, &err))) {
        fprintf(stderr, WHO ": worker: %s\n", err.text);
        exit(1);
      }
    }
    return;
  }
  fflush(NULL);
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid == 0) { /* a worker process, as `percolator worker` */
      sigset_t s;
      sigemptyset(&s);
      sigaddset(&s, SIGTERM);
      pthread_sigmask(SIG_BLOCK, &s, NULL);
      pc_db_t *cdb = open_db(p, NULL);
      pc_observer_registry_t *reg = make_registry();
      pc_error_t err;
      pc_worker_t *w = pc_worker_start(cdb, reg, &o, &err);
      if (!w) {
        fprintf(stderr, WHO ": worker: %s\n", err.text);
        _exit(1);
      }
      int sig;
      sigwait(&s, &sig);
      pc_worker_stats_t st;
      if (pc_worker_stats(w, &st, &err) == PC_OK) { /* what the run met, on stderr */
        for (size_t k = 0; k < st.nobservers; k++)
          fprintf(stderr, WHO ": worker %d: %s runs %llu skipped %llu conflicts %llu failures %llu\n",
                  (int)getpid(), st.observers[k].name, (unsigned long long)st.observers[k].runs,
                  (unsigned long long)st.observers[k].skipped,
                  (unsigned long long)st.observers[k].conflicts,
                  (unsigned long long)st.observers[k].failures);
        fprintf(stderr, WHO ": worker %d: claims %llu taken, %llu busy\n", (int)getpid(),
                (unsigned long long)st.claims_taken, (unsigned long long)st.claims_busy);
        pc_free(st.observers);
      }
      pc_worker_stop(w);
      pc_registry_free(reg);
      pc_db_close(cdb);
      _exit(0);
    }
    ws->pid[i] = pid;
  }
}

static void stop_workers(workers_t *ws) {
  for (int i = 0; i < ws->n; i++) {
    if (ws->w[i]) pc_worker_stop(ws->w[i]);
    if (ws->pid[i] > 0) kill(ws->pid[i], SIGTERM);
  }
  for (int i = 0; i < ws->n; i++)
    if (ws->pid[i] > 0) waitpid(ws->pid[i], NULL, 0);
  pc_registry_free(ws->reg);
  memset(ws, 0, sizeof *ws);
}

static void row_name(char *out, int i) { snprintf(out, 16, "r%07d", i); }

static uint64_t put(pc_db_t *db, int row, const char *col, long value) {
  char r[16], v[24];
  row_name(r, row);
  int n = snprintf(v, sizeof v, "%ld", value);
  for (;;) {
    pc_error_t err;
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t) {
      fprintf(stderr, WHO ": begin: %s\n", err.text);
      exit(1);
    }
    pc_status_t st = pc_txn_set(t, T, r, strlen(r), col, strlen(col), v, (size_t)n, &err);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    uint64_t cts = pc_txn_commit_ts(t);
    pc_txn_destroy(t);
    if (st == PC_OK) return cts;
    if (st != PC_CONFLICT && st != PC_LOCKED) {
      fprintf(stderr, WHO ": commit: %s\n", err.text);
      exit(1);
    }
  }
}

static void wait_idle(pc_db_t *db) {
  pc_error_t err;
  if (pc_notify_wait(db, 600000, &err) != PC_OK) {
    fprintf(stderr, WHO ": wait: %s\n", err.text);
    exit(1);
  }
}

/* ---- latency ------------------------------------------------------------------ */

typedef struct commits {
  uint64_t *ts; /* per row: dst:v commit timestamps, in the order seen */
  int *n, *cap;
  int rows;
} commits_t;

static int collect_dst(void *ctx, const pc_raw_cell_t *c) {
  commits_t *cm = ctx;
  if (c->kind != PC_CELL_WRITE || c->write_kind != PC_WRITE_PUT) return 0;
  if (c->column_len != strlen(DST) || memcmp(c->column, DST, c->column_len) != 0) return 0;
  if (c->row_len != 8 || c->row[0] != 'r') return 0;
  int row = atoi(c->row + 1);
  if (row < 0 || row >= cm->rows || cm->n[row] == cm->cap[row]) return 0;
  cm->ts[(size_t)row * (size_t)cm->cap[0] + (size_t)cm->n[row]++] = c->ts;
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static json_t *run_latency(const params_t *p, pc_db_t *db, int nworkers) {
  long total = (long)p->rate * p->seconds;
  uint64_t *src_ts = calloc((size_t)total, sizeof *src_ts);
  /* registered before the driver writes: then every change notifies */
  pc_error_t rerr;
  if (pc_db_register_observed(db, OBS, T, SRC, strlen(SRC), 0, &rerr) != PC_OK) {
    fprintf(stderr, WHO ": register: %s\n", rerr.text);
    exit(1);
  }
  workers_t ws;
  start_workers(p, db, nworkers, &ws);
  double t0 = bu_now_s();
  for (long i = 0; i < total; i++) {
    double due = t0 + (double)i / p->rate;
    double now = bu_now_s();
    if (due > now) bu_sleep_s(due - now);
    src_ts[i] = put(db, (int)(i % p->rows), SRC, i);
  }
  double drive_s = bu_now_s() - t0;
  wait_idle(db);
  stop_workers(&ws);
  /* every dst:v commit per row, from the raw view */
  int cap = (int)(total / p->rows + 4) * 2;
  commits_t cm = {calloc((size_t)p->rows * (size_t)cap, sizeof(uint64_t)),
                  calloc((size_t)p->rows, sizeof(int)), calloc((size_t)p->rows, sizeof(int)),
                  p->rows};
  for (int r = 0; r < p->rows; r++) cm.cap[r] = cap;
  pc_error_t err;
  if (pc_db_raw_scan(db, T, NULL, 0, NULL, 0, collect_dst, &cm, &err) != PC_OK) {
    fprintf(stderr, WHO ": raw scan: %s\n", err.text);
    exit(1);
  }
  uint64_t hist[BU_HBUCKETS] = {0}, missing = 0;
  for (int r = 0; r < p->rows; r++)
    qsort(cm.ts + (size_t)r * (size_t)cap, (size_t)cm.n[r], sizeof(uint64_t), cmp_u64);
  for (long i = 0; i < total; i++) {
    int r = (int)(i % p->rows);
    const uint64_t *v = cm.ts + (size_t)r * (size_t)cap;
    int k = 0;
    while (k < cm.n[r] && v[k] <= src_ts[i]) k++;
    if (k == cm.n[r]) {
      missing++;
      continue;
    }
    uint64_t ms = PC_TS_PHYSICAL_MS(v[k]) - PC_TS_PHYSICAL_MS(src_ts[i]);
    hist[bu_bucket_of(ms)]++;
  }
  uint64_t n = bu_hist_total(hist);
  json_t *o = json_object();
  json_object_set_new(o, "worker_processes", json_integer(nworkers));
  json_object_set_new(o, "changes", json_integer(total));
  json_object_set_new(o, "achieved_rate", json_real((double)total / drive_s));
  json_object_set_new(o, "p50_ms", json_integer((json_int_t)bu_percentile(hist, n, 0.50)));
  json_object_set_new(o, "p99_ms", json_integer((json_int_t)bu_percentile(hist, n, 0.99)));
  json_object_set_new(o, "max_ms", json_integer((json_int_t)bu_hist_max(hist)));
  json_object_set_new(o, "not_observed", json_integer((json_int_t)missing));
  free(cm.ts);
  free(cm.n);
  free(cm.cap);
  free(src_ts);
  return o;
}

/* ---- throughput ------------------------------------------------------------- */

typedef struct base_thread {
  pthread_t tid;
  pc_db_t *db;
  int first, count;
  uint64_t done;
} base_thread_t;

/* The baseline: what an observer run does, as a plain transaction. */
static void *base_main(void *arg) {
  base_thread_t *b = arg;
  for (int k = 0; k < b->count; k++) {
    char r[16];
    row_name(r, b->first + k);
    for (;;) {
      pc_error_t err;
      pc_txn_t *t = pc_txn_begin(b->db, &err);
      char *v = NULL;
      size_t n = 0;
      pc_status_t st = pc_txn_get(t, T, r, strlen(r), SRC, strlen(SRC), &v, &n, &err);
      if (st == PC_OK) st = pc_txn_set(t, T, r, strlen(r), DST, strlen(DST), v, n, &err);
      pc_free(v);
      if (st == PC_OK) st = pc_txn_commit(t, &err);
      pc_txn_destroy(t);
      if (st == PC_OK) break;
      if (st != PC_CONFLICT && st != PC_LOCKED) {
        fprintf(stderr, WHO ": baseline: %s\n", err.text);
        exit(1);
      }
    }
    b->done++;
  }
  return NULL;
}

static json_t *run_throughput(const params_t *p, pc_db_t *db, int nworkers) {
  int n = p->changes;
  /* the observer recorded first, so that the changes notify; then the
   * changes: one notification per row */
  pc_error_t err;
  if (pc_db_register_observed(db, OBS, T, SRC, strlen(SRC), 0, &err) != PC_OK) {
    fprintf(stderr, WHO ": register: %s\n", err.text);
    exit(1);
  }
  for (int i = 0; i < n; i++) put(db, i, SRC, i);
  uint64_t pending = 0;
  if (pc_notify_pending(db, &pending, NULL, NULL, &err) != PC_OK || pending != (uint64_t)n) {
    fprintf(stderr, WHO ": %llu notifications pending after %d changes\n",
            (unsigned long long)pending, n);
    exit(1);
  }
  workers_t ws;
  double t0 = bu_now_s();
  start_workers(p, db, nworkers, &ws);
  wait_idle(db);
  double obs_s = bu_now_s() - t0;
  stop_workers(&ws);
  /* the baseline over the same rows, as many threads as the workers had */
  int nth = p->threads * nworkers;
  base_thread_t *b = calloc((size_t)nth, sizeof *b);
  for (int i = 0; i < nth; i++) {
    b[i].db = db;
    b[i].first = i * (n / nth);
    b[i].count = i == nth - 1 ? n - b[i].first : n / nth;
  }
  double t1 = bu_now_s();
  bu_start_threads(b, nth, sizeof *b, offsetof(base_thread_t, tid), base_main);
  bu_join_threads(b, nth, sizeof *b, offsetof(base_thread_t, tid));
  double base_s = bu_now_s() - t1;
  free(b);
  json_t *o = json_object();
  json_object_set_new(o, "worker_processes", json_integer(nworkers));
  json_object_set_new(o, "threads_per_process", json_integer(p->threads));
  json_object_set_new(o, "changes", json_integer(n));
  json_object_set_new(o, "observer_runs_s", json_real(n / obs_s));
  json_object_set_new(o, "plain_txns_s", json_real(n / base_s));
  json_object_set_new(o, "ratio", json_real(base_s / obs_s));
  return o;
}

static void usage(void) {
  fprintf(stderr,
          "usage: pc_bench_notify [options]\n"
          "  --config FILE   a running cluster (default: an embedded store in a temp dir)\n"
          "  --procs LIST    worker processes (embedded: worker objects) (default 1,2)\n"
          "  --threads N     observer threads per worker (default 2)\n"
          "  --rate N        latency: changes per second (default 1000)\n"
          "  --seconds N     latency: how long the driver runs (default 10)\n"
          "  --rows N        latency: rows the changes go to (default 1000)\n"
          "  --changes N     throughput: changes processed (default 20000)\n"
          "  --dir D         parent of the temporary directory (default /tmp)\n"
          "Prints one JSON document on stdout.\n");
}

int main(int argc, char **argv) {
  params_t p = {NULL, "/tmp", 1000, 10, 1000, 20000, 2, {1, 2}, 2};
  static const struct option opts[] = {
      {"config", required_argument, NULL, 'c'}, {"procs", required_argument, NULL, 'p'},
      {"threads", required_argument, NULL, 't'}, {"rate", required_argument, NULL, 'r'},
      {"seconds", required_argument, NULL, 's'}, {"rows", required_argument, NULL, 'w'},
      {"changes", required_argument, NULL, 'n'}, {"dir", required_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 'c': p.config = optarg; break;
      case 'd': p.parent = optarg; break;
      case 'p':
        if (bu_parse_int_list(optarg, 8, p.procs, 4, &p.nprocs) != 0) {
          bu_bad_value(WHO, "--procs", optarg);
          return 2;
        }
        break;
      case 't': case 'r': case 's': case 'w': case 'n':
        if (bu_parse_u64(optarg, 1, 10000000, &v) != 0) {
          bu_bad_value(WHO, "a count", optarg);
          return 2;
        }
        if (c == 't') p.threads = (int)v;
        else if (c == 'r') p.rate = (int)v;
        else if (c == 's') p.seconds = (int)v;
        else if (c == 'w') p.rows = (int)v;
        else p.changes = (int)v;
        break;
      case 'h': usage(); return 0;
      default: usage(); return 2;
    }
  }
  if (bu_no_operands(WHO, argc, argv, optind)) return 2;
  json_t *doc = json_object();
  bu_json_head(doc, "notify");
  json_object_set_new(doc, "mode", json_string(p.config ? "cluster" : "embedded"));
  json_t *lat = json_array(), *thr = json_array();
  for (int k = 0; k < p.nprocs; k++) {
    for (int which = 0; which < 2; which++) {
      char dir[4096] = "";
      snprintf(T, sizeof T, "bench_%d_%d_%d", k, which, (int)getpid());
      snprintf(OBS, sizeof OBS, "copy_%s", T);
      if (!p.config && bu_make_temp_dir(dir, sizeof dir, p.parent, "pc-bench-notify", WHO) != 0)
        return 1;
      pc_db_t *db = open_db(&p, dir);
      if (which == 0) json_array_append_new(lat, run_latency(&p, db, p.procs[k]));
      else json_array_append_new(thr, run_throughput(&p, db, p.procs[k]));
      pc_db_close(db);
      if (dir[0]) bu_remove_tree(dir);
    }
  }
  json_object_set_new(doc, "latency", lat);
  json_object_set_new(doc, "throughput", thr);
  json_object_set_new(doc, "goal", json_string("latency p99 < 50 ms at 1000 changes/s; "
                                               "throughput ratio >= 0.5"));
  char *out = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  puts(out);
  free(out);
  json_decref(doc);
  return 0;
}
