/* tso.c — timestamps per second from the embedded timestamp oracle.
 *
 * For each thread count of --threads (default 1,8,64), every thread takes
 * timestamps in a loop for --seconds (default 2) from three sources, one after
 * the other in the same run:
 *   db_timestamp   pc_db_timestamp on an embedded database: the path every
 *                  transaction's begin and commit takes (pc_ts_batcher over
 *                  the in-process pc_oracle, one fetch in flight, each fetch
 *                  serving every thread that asked meanwhile)
 *   oracle_next    pc_oracle_next(oracle, 1) called directly (tso/oracle.h),
 *                  without the batcher: one mutex and a clock read per call
 *   mutex_counter  the baseline: a pthread mutex around a counter increment
 * and reports the throughput of each, the ratios db_timestamp/mutex_counter
 * and oracle_next/mutex_counter, and the latency of one call (p50, p99,
 * p99.9, max) from a log-linear histogram of every --sample-th call (timing
 * every call would cost about as much as the baseline itself). Each thread
 * checks that the timestamps it receives strictly increase. Also timed: opening
 * an oracle on a fresh bound file (open_fresh_oracle_ms), which persists one
 * bound (temp file, fsync, rename, directory fsync): what a caller of
 * pc_oracle_next waits for, under the oracle's mutex, each time the clock
 * reaches the persisted bound (every window, 3 s by default). The paper's
 * oracle served about 2 million timestamps/s from one machine, over RPC.
 * Output: one JSON document on stdout.
 */
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "tso/oracle.h"

#define MAX_THREADS 1024
#define MAX_COUNTS 16
#define HBUCKETS BU_HBUCKETS /* latency histograms: see benchutil.h */

enum source { SRC_DB, SRC_ORACLE, SRC_MUTEX, SRC_COUNT };
static const char *const source_name[SRC_COUNT] = {"db_timestamp", "oracle_next", "mutex_counter"};

typedef struct shared {
  pc_db_t *db;
  pc_oracle_t *oracle;
  pthread_mutex_t mu;
  uint64_t counter;
  atomic_int stop;
  pthread_barrier_t start;
  uint32_t sample_mask;
} shared_t;

typedef struct worker {
  shared_t *sh;
  enum source src;
  pthread_t tid;
  uint64_t ops;
  uint64_t *hist;
  int failed;
  char errtext[PC_ERROR_TEXT + 32];
} worker_t;

/* One call of the source; *ts receives the timestamp (or counter value). */
static int take(worker_t *w, uint64_t *ts) {
  shared_t *sh = w->sh;
  pc_error_t e;
  switch (w->src) {
    case SRC_DB:
      if (pc_db_timestamp(sh->db, 10000, ts, &e) != PC_OK) goto fail;
      return 0;
    case SRC_ORACLE:
      if (pc_oracle_next(sh->oracle, 1, ts, &e) != PC_OK) goto fail;
      return 0;
    case SRC_MUTEX:
    default:
      pthread_mutex_lock(&sh->mu);
      *ts = ++sh->counter;
      pthread_mutex_unlock(&sh->mu);
      return 0;
  }
fail:
  w->failed = 1;
  snprintf(w->errtext, sizeof w->errtext, "%s: %s", source_name[w->src], e.text);
  return -1;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  shared_t *sh = w->sh;
  uint64_t last = 0, ts = 0;
  pthread_barrier_wait(&sh->start);
  while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
    if ((w->ops & sh->sample_mask) == 0) {
      uint64_t t0 = bu_now_ns();
      if (take(w, &ts) != 0) break;
      w->hist[bu_bucket_of(bu_now_ns() - t0)]++;
    } else if (take(w, &ts) != 0) {
      break;
    }
    if (ts <= last) {
      w->failed = 1;
      snprintf(w->errtext, sizeof w->errtext, "%s: timestamp %llu after %llu",
               source_name[w->src], (unsigned long long)ts, (unsigned long long)last);
      break;
    }
    last = ts;
    w->ops++;
  }
  return NULL;
}

/* Runs src on n threads for seconds; fills a JSON object; *ops_s its throughput. */
static int run(shared_t *sh, enum source src, int n, double seconds, json_t *out,
               double *ops_s) {
  worker_t *w = calloc((size_t)n, sizeof *w);
  uint64_t *hist = calloc((size_t)n * HBUCKETS, sizeof *hist);
  if (!w || !hist) {
    fprintf(stderr, "tso: out of memory\n");
    exit(1);
  }
  atomic_store(&sh->stop, 0);
  pthread_barrier_init(&sh->start, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; i++) {
    w[i].sh = sh;
    w[i].src = src;
    w[i].hist = hist + (size_t)i * HBUCKETS;
  }
  if (bu_start_threads(w, n, sizeof *w, offsetof(worker_t, tid), worker_main) != n) {
    fprintf(stderr, "tso: pthread_create failed\n");
    exit(1);
  }
  pthread_barrier_wait(&sh->start);
  uint64_t t0 = bu_now_ns();
  bu_sleep_s(seconds);
  atomic_store(&sh->stop, 1);
  bu_join_threads(w, n, sizeof *w, offsetof(worker_t, tid));
  double elapsed = (double)(bu_now_ns() - t0) * 1e-9;
  pthread_barrier_destroy(&sh->start);

  uint64_t total = 0, minops = UINT64_MAX, maxops = 0;
  uint64_t merged[HBUCKETS] = {0};
  int rc = 0;
  for (int i = 0; i < n; i++) {
    total += w[i].ops;
    if (w[i].ops < minops) minops = w[i].ops;
    if (w[i].ops > maxops) maxops = w[i].ops;
    bu_hist_add(merged, w[i].hist);
    if (w[i].failed) {
      fprintf(stderr, "tso: thread %d: %s\n", i, w[i].errtext);
      rc = -1;
    }
  }
  uint64_t samples = bu_hist_total(merged), max = bu_hist_max(merged);
  *ops_s = (double)total / elapsed;
  json_object_set_new(out, "ops_s", json_real(*ops_s));
  json_object_set_new(out, "ops", json_integer((json_int_t)total));
  json_object_set_new(out, "seconds", json_real(elapsed));
  json_object_set_new(out, "per_thread_ops_min", json_integer((json_int_t)minops));
  json_object_set_new(out, "per_thread_ops_max", json_integer((json_int_t)maxops));
  json_t *lat = json_object();
  json_object_set_new(lat, "samples", json_integer((json_int_t)samples));
  json_object_set_new(lat, "p50", json_integer((json_int_t)bu_percentile(merged, samples, 0.50)));
  json_object_set_new(lat, "p99", json_integer((json_int_t)bu_percentile(merged, samples, 0.99)));
  json_object_set_new(lat, "p999", json_integer((json_int_t)bu_percentile(merged, samples, 0.999)));
  json_object_set_new(lat, "max", json_integer((json_int_t)max));
  json_object_set_new(out, "latency_ns", lat);
  free(hist);
  free(w);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_tso [options]\n"
          "  --threads LIST   comma-separated thread counts (default 1,8,64; each 1..%d)\n"
          "  --seconds S      seconds per source and thread count (default 2)\n"
          "  --sample N       time one call in N, N a power of two (default 8)\n"
          "  --dir D          parent of the temporary directory (default /tmp)\n"
          "Prints one JSON document on stdout.\n",
          MAX_THREADS);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"threads", required_argument, NULL, 't'},
                                           {"seconds", required_argument, NULL, 's'},
                                           {"sample", required_argument, NULL, 'S'},
                                           {"dir", required_argument, NULL, 'd'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int counts[MAX_COUNTS] = {1, 8, 64}, ncounts = 3;
  double seconds = 2.0;
  unsigned long sample = 8;
  const char *parent = "/tmp";
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    char *end;
    switch (c) {
      case 't':
        if (bu_parse_int_list(optarg, MAX_THREADS, counts, MAX_COUNTS, &ncounts) != 0) {
          fprintf(stderr, "pc_bench_tso: bad --threads '%s' (e.g. 1,8,64)\n", optarg);
          return 2;
        }
        break;
      case 's':
        if (bu_parse_double(optarg, 0, 1, 3600, &seconds) != 0) {
          fprintf(stderr, "pc_bench_tso: bad --seconds '%s'\n", optarg);
          return 2;
        }
        break;
      case 'S':
        sample = strtoul(optarg, &end, 10);
        if (*end || sample == 0 || (sample & (sample - 1)) != 0 || sample > (1ul << 20)) {
          fprintf(stderr, "pc_bench_tso: bad --sample '%s' (a power of two)\n", optarg);
          return 2;
        }
        break;
      case 'd': parent = optarg; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (bu_no_operands("pc_bench_tso", argc, argv, optind) != 0) return 2;

  char dir[4096], path[4200];
  if (bu_make_temp_dir(dir, sizeof dir, parent, "tso", "tso") != 0) return 1;
  shared_t sh;
  memset(&sh, 0, sizeof sh);
  pthread_mutex_init(&sh.mu, NULL);
  sh.sample_mask = (uint32_t)(sample - 1);
  pc_error_t e;
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  snprintf(path, sizeof path, "%s/db", dir);
  sh.db = pc_db_open(o, path, &e);
  pc_options_destroy(o);
  if (!sh.db) {
    fprintf(stderr, "tso: pc_db_open %s: %s\n", path, e.text);
    return 1;
  }
  snprintf(path, sizeof path, "%s/oracle", dir);
  sh.oracle = pc_oracle_open(path, 0, &e);
  if (!sh.oracle) {
    fprintf(stderr, "tso: pc_oracle_open %s: %s\n", path, e.text);
    return 1;
  }

  json_t *doc = json_object();
  bu_json_head(doc, "tso");
  json_t *par = json_object();
  json_object_set_new(par, "threads", bu_json_int_array(counts, ncounts));
  json_object_set_new(par, "seconds", json_real(seconds));
  json_object_set_new(par, "sample", json_integer((json_int_t)sample));
  json_object_set_new(doc, "params", par);
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  json_t *results = json_array();
  json_object_set_new(doc, "results", results);

  /* The cost of persisting one bound, as opening a fresh oracle file pays it. */
  double open_ms[5];
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "%s/fresh%d", dir, i);
    uint64_t t0 = bu_now_ns();
    pc_oracle_t *fresh = pc_oracle_open(path, 0, &e);
    open_ms[i] = (double)(bu_now_ns() - t0) * 1e-6;
    if (!fresh) {
      fprintf(stderr, "tso: pc_oracle_open %s: %s\n", path, e.text);
      return 1;
    }
    pc_oracle_close(fresh);
  }
  double open_max = open_ms[0];
  for (int i = 1; i < 5; i++)
    if (open_ms[i] > open_max) open_max = open_ms[i];
  json_object_set_new(doc, "open_fresh_oracle_ms_median", json_real(bu_median(open_ms, 5)));
  json_object_set_new(doc, "open_fresh_oracle_ms_max", json_real(open_max));

  int rc = 0;
  for (int i = 0; i < ncounts && rc == 0; i++) {
    json_t *r = json_object();
    json_object_set_new(r, "threads", json_integer(counts[i]));
    double tput[SRC_COUNT];
    for (int s = 0; s < SRC_COUNT && rc == 0; s++) {
      json_t *js = json_object();
      if (run(&sh, (enum source)s, counts[i], seconds, js, &tput[s]) != 0) rc = 1;
      json_object_set_new(r, source_name[s], js);
    }
    if (rc == 0) {
      json_object_set_new(r, "db_timestamp_vs_mutex", json_real(tput[SRC_DB] / tput[SRC_MUTEX]));
      json_object_set_new(r, "oracle_next_vs_mutex",
                          json_real(tput[SRC_ORACLE] / tput[SRC_MUTEX]));
      json_object_set_new(r, "db_timestamp_vs_oracle_next",
                          json_real(tput[SRC_DB] / tput[SRC_ORACLE]));
    }
    json_array_append_new(results, r);
  }

  pc_oracle_close(sh.oracle);
  pc_db_close(sh.db);
  pthread_mutex_destroy(&sh.mu);
  bu_remove_tree(dir);
  return bu_json_finish(doc, rc);
}
