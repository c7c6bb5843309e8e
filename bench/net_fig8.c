/* net_fig8.c — the Percolator paper's Figure 8 through the network.
 *
 * Measures single-cell transactional reads and writes per second through a
 * tablet server against raw get/put through the same rpc.h protocol, in the
 * same process and run, with the same value size, sync setting and client
 * thread count, and reports read_ratio = txn_read/raw_get and write_ratio =
 * txn_write/raw_put (goals: >= 0.9 and >= 0.5; the paper measured 0.94 and
 * 0.23 against Bigtable).
 *
 * Servers, all in this process on 127.0.0.1 with ephemeral ports, each an
 * rpc.h server with --workers handler threads (default 4, as the daemons):
 *   tso     pc_tso_rpc_handler over a pc_oracle in the temp dir, its ops
 *           run on the I/O thread
 *   tablet  pc_tablet_rpc_handler over pc_local_store_open (one tablet owning
 *           every row), taking its timestamps (one-phase commit_ts, GET_FRESH
 *           read_ts) from the same oracle directly — what
 *           `percolator run` serves
 *   raw     this file's handler: op 0x10 GET (body: key) answers leveldb_get,
 *           op 0x11 PUT (body: u32 key length, key, value) does leveldb_put
 *           on its own LevelDB opened with the store's options (bloom filter
 *           10 bits, 32 MiB LRU cache, 16 MiB write buffer, snappy), sync as
 *           --sync
 * Clients: a database opened with pc_db_open_config on a client configuration
 * naming the tso and the tablet (so timestamps go through the process's
 * batcher over the network), and a pc_rpc_client of the raw server. The
 * configuration is a served directory's (marked "served": one process serves
 * the data, its oracle at tso.listen, without coordination), the shape these
 * in-process servers have; ZooKeeper is on neither measured path, as a
 * cluster's timestamps also come from the oracle's memory.
 *
 *   transactional read  = pc_txn_begin + pc_txn_get + pc_txn_commit (read-only)
 *                         + pc_txn_destroy: two round trips (tso, tablet GET);
 *                         with --lazy-start 1 one (GET_FRESH: the tablet
 *                         takes the timestamp from its oracle)
 *   transactional write = pc_txn_begin + pc_txn_set + pc_txn_commit: the
 *                         one-phase commit, two round trips (tso, ONE_PHASE),
 *                         with --lazy-start too (start_ts is taken at commit);
 *                         a PC_CONFLICT is counted and retried
 *   raw get / put       = one pc_rpc_call each
 *
 * Both stores are preloaded with --keys rows (row "k0000000042", column "f:v"
 * of table "bench" on the tablet; key "k0000000042" on the raw side), the
 * tablet directly through its store before it serves, then both are fully
 * compacted. Reads go to random existing keys, writes overwrite them with
 * random bytes. All read phases run first (every thread count), then all
 * write phases; for each thread count --rounds rounds each run the raw and
 * the transactional phase, raw first in even rounds, transactional first in
 * odd ones. A phase runs --seconds (or until --ops operations, if given).
 * Figures are medians over rounds; ratios are medians of per-round ratios.
 * Every phase also reports the process CPU and context switches per
 * operation (servers and clients share this process, so these are the whole
 * cost of an operation on this machine), p50/p99 latency, and the CPU other
 * processes used meanwhile (others_cores: machine noise).
 * Output: one JSON document on stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <leveldb/c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "base/error.h"
#include "net/rpc.h"
#include "core/store.h"
#include "tablet/tablet.h"
#include "tso/oracle.h"
#include "tso/tso_server.h"

#define TABLE "bench"
#define COLUMN "f:v"
#define KEY_LEN BU_KEY_LEN /* "k" + 10 digits */
#define RANDBUF_BYTES (1u << 20)
#define MAX_THREADS 256
#define MAX_COUNTS 8
#define MAX_ROUNDS BU_MAX_ROUNDS
#define CALL_TIMEOUT_MS 10000
#define RAW_OP_GET 0x10
#define RAW_OP_PUT 0x11
#define HBUCKETS BU_HBUCKETS /* latency histograms: see benchutil.h */

enum phase { PH_RAW_GET, PH_TXN_READ, PH_RAW_PUT, PH_TXN_WRITE, PH_COUNT };
static const char *const phase_name[PH_COUNT] = {"raw_get", "txn_read", "raw_put", "txn_write"};

typedef struct params {
  double seconds;
  uint64_t ops; /* per phase, 0: bounded by seconds only */
  uint64_t keys;
  size_t value_size;
  int sync;
  int threads[MAX_COUNTS], nthreads;
  int rounds;
  uint32_t workers;
  uint64_t seed;
  const char *parent;
  int only; /* -1: every phase; else one phase (for profiling; no ratios) */
  int lazy_start; /* the client's store.lazy_start */
} params_t;

typedef struct bench {
  params_t p;
  char dir[4096];
  pc_oracle_t *oracle;
  pc_tablet_t *tablet;
  pc_rpc_server_t *tso_srv, *tablet_srv, *raw_srv;
  bu_ldb_t raw;
  leveldb_readoptions_t *raw_ro;
  leveldb_writeoptions_t *raw_wo, *raw_wo_load;
  pc_db_t *db;
  pc_rpc_client_t *raw_cli;
  char *randbuf;
  atomic_int stop;
  atomic_int finished; /* workers done with their --ops share */
  bu_gate_t *start;
} bench_t;

typedef struct worker {
  bench_t *b;
  pthread_t tid;
  enum phase phase;
  uint64_t limit; /* operations, 0: until stop */
  uint64_t rng;
  uint64_t done, conflicts;
  uint64_t *hist;
  pc_buf_t body, reply;
  int failed;
  char errtext[PC_ERROR_TEXT + 64];
} worker_t;

typedef struct result {
  double ops_s, seconds, cpu_us_per_op, csw_per_op, others_cores, p50_us, p99_us;
  uint64_t ops, conflicts;
} result_t;

/* ---- helpers ------------------------------------------------------------ */

static const char *value_at(const bench_t *b, uint64_t r) {
  return b->randbuf + (r % RANDBUF_BYTES);
}

static void fail_worker(worker_t *w, const char *what, const char *msg) {
  w->failed = 1;
  snprintf(w->errtext, sizeof w->errtext, "%s: %s", what, msg);
}

/* ---- the raw server --------------------------------------------------------- */

static pc_status_t raw_handler(void *ctx, uint8_t op, const char *body, size_t len,
                               pc_buf_t *reply, pc_error_t *err) {
  bench_t *b = ctx;
  char *e = NULL;
  if (op == RAW_OP_GET) {
    size_t vl = 0;
    char *v = leveldb_get(b->raw.db, b->raw_ro, body, len, &vl, &e);
    if (e) {
      pc_error_set(err, PC_IO_ERROR, "leveldb_get: %s", e);
      leveldb_free(e);
      return PC_IO_ERROR;
    }
    if (!v) return pc_error_set(err, PC_NOT_FOUND, "no such key");
    int rc = pc_buf_append(reply, v, vl);
    leveldb_free(v);
    return rc ? pc_error_set(err, PC_NOMEM, "out of memory") : PC_OK;
  }
  if (op == RAW_OP_PUT) {
    pc_rd_t r = {body, len, 0, 1};
    uint32_t kl = pc_rd_u32(&r);
    if (!r.ok || kl > len - r.pos) return pc_error_set(err, PC_INVALID, "put: bad body");
    leveldb_put(b->raw.db, b->raw_wo, body + r.pos, kl, body + r.pos + kl, len - r.pos - kl, &e);
    if (e) {
      pc_error_set(err, PC_IO_ERROR, "leveldb_put: %s", e);
      leveldb_free(e);
      return PC_IO_ERROR;
    }
    return PC_OK;
  }
  return pc_error_set(err, PC_INVALID, "unknown op 0x%02x", op);
}

/* ---- commit timestamps ------------------------------------------------------ */

static pc_status_t ts_from_oracle(void *ctx, uint64_t *ts, pc_error_t *err) {
  return pc_oracle_next(ctx, 1, ts, err);
}

/* ---- the operations ------------------------------------------------------- */

static void raw_get(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  pc_error_t e;
  w->reply.len = 0;
  if (pc_rpc_call(w->b->raw_cli, RAW_OP_GET, key, KEY_LEN, CALL_TIMEOUT_MS, &w->reply, &e) !=
      PC_OK)
    fail_worker(w, "raw get", e.text);
  else if (w->reply.len != w->b->p.value_size)
    fail_worker(w, "raw get", "value of the wrong size");
}

static void raw_put(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  pc_error_t e;
  w->body.len = 0;
  w->reply.len = 0;
  if (pc_buf_u32(&w->body, KEY_LEN) || pc_buf_append(&w->body, key, KEY_LEN) ||
      pc_buf_append(&w->body, value_at(w->b, r >> 20), w->b->p.value_size)) {
    fail_worker(w, "raw put", "out of memory");
    return;
  }
  if (pc_rpc_call(w->b->raw_cli, RAW_OP_PUT, w->body.p, w->body.len, CALL_TIMEOUT_MS, &w->reply,
                  &e) != PC_OK)
    fail_worker(w, "raw put", e.text);
}

static void txn_read(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  pc_error_t e;
  pc_txn_t *t = pc_txn_begin(w->b->db, &e);
  if (!t) {
    fail_worker(w, "pc_txn_begin", e.text);
    return;
  }
  char *v = NULL;
  size_t vl = 0;
  pc_status_t st = pc_txn_get(t, TABLE, key, KEY_LEN, COLUMN, strlen(COLUMN), &v, &vl, &e);
  if (st != PC_OK)
    fail_worker(w, "pc_txn_get", st == PC_NOT_FOUND ? "preloaded cell is missing" : e.text);
  else if (vl != w->b->p.value_size)
    fail_worker(w, "pc_txn_get", "value of the wrong size");
  else if (pc_txn_commit(t, &e) != PC_OK)
    fail_worker(w, "pc_txn_commit (read-only)", e.text);
  pc_free(v);
  pc_txn_destroy(t);
}

static void txn_write(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  const char *v = value_at(w->b, r >> 20);
  pc_error_t e;
  for (int tries = 0;; tries++) {
    pc_txn_t *t = pc_txn_begin(w->b->db, &e);
    if (!t) {
      fail_worker(w, "pc_txn_begin", e.text);
      return;
    }
    pc_status_t st =
        pc_txn_set(t, TABLE, key, KEY_LEN, COLUMN, strlen(COLUMN), v, w->b->p.value_size, &e);
    if (st == PC_OK) st = pc_txn_commit(t, &e);
    pc_txn_destroy(t);
    if (st == PC_OK) return;
    if (st != PC_CONFLICT || tries == 1000) {
      fail_worker(w, "pc_txn_commit", e.text);
      return;
    }
    w->conflicts++;
  }
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  bench_t *b = w->b;
  bu_gate_wait(b->start);
  while (!w->failed && !atomic_load_explicit(&b->stop, memory_order_relaxed) &&
         (w->limit == 0 || w->done < w->limit)) {
    uint64_t r = bu_splitmix64(&w->rng), t0 = bu_now_ns();
    switch (w->phase) {
      case PH_RAW_GET: raw_get(w, r); break;
      case PH_TXN_READ: txn_read(w, r); break;
      case PH_RAW_PUT: raw_put(w, r); break;
      case PH_TXN_WRITE: txn_write(w, r); break;
      case PH_COUNT: break;
    }
    w->hist[bu_bucket_of(bu_now_ns() - t0)]++;
    w->done++;
  }
  atomic_fetch_add(&b->finished, 1);
  return NULL;
}

/* Runs phase on n threads for p.seconds (or p.ops operations). */
static int run_phase(bench_t *b, enum phase ph, int n, double seconds, uint64_t seed,
                     result_t *res) {
  worker_t *w = calloc((size_t)n, sizeof *w);
  uint64_t *hist = calloc((size_t)n * HBUCKETS, sizeof *hist);
  if (!w || !hist) {
    fprintf(stderr, "net_fig8: out of memory\n");
    free(w);
    free(hist);
    return -1;
  }
  atomic_store(&b->stop, 0);
  atomic_store(&b->finished, 0);
  bu_gate_t gate;
  bu_gate_init(&gate);
  b->start = &gate;
  int rc = 0;
  for (int i = 0; i < n; i++) {
    worker_t *x = &w[i];
    x->b = b;
    x->phase = ph;
    x->rng = seed * 1000003u + (uint64_t)i;
    x->hist = hist + (size_t)i * HBUCKETS;
    if (b->p.ops) x->limit = b->p.ops / (uint64_t)n + (i < (int)(b->p.ops % (uint64_t)n));
  }
  int started = bu_start_threads(w, n, sizeof *w, offsetof(worker_t, tid), worker_main);
  if (started < n) {
    fprintf(stderr, "net_fig8: pthread_create failed after %d threads\n", started);
    rc = -1;
  }
  bu_meter_t m0, d;
  bu_meter_start(&m0);
  uint64_t deadline = m0.t_ns + (uint64_t)(seconds * 1e9);
  if (rc == 0) {
    bu_gate_open(&gate);
    /* sleep in slices so that an --ops bound ends the phase early */
    for (;;) {
      uint64_t now = bu_now_ns();
      if (atomic_load(&b->finished) == n || now >= deadline) break;
      uint64_t left = deadline - now, slice = left < 10000000u ? left : 10000000u;
      struct timespec ts = {0, (long)slice};
      nanosleep(&ts, NULL);
    }
  }
  atomic_store(&b->stop, 1);
  bu_gate_open(&gate); /* after a failure: the threads see stop at once */
  bu_join_threads(w, started, sizeof *w, offsetof(worker_t, tid));
  n = started;
  bu_meter_read(&m0, &d);
  double elapsed = (double)d.t_ns * 1e-9;
  bu_gate_destroy(&gate);
  b->start = NULL;

  memset(res, 0, sizeof *res);
  uint64_t merged[HBUCKETS] = {0};
  for (int i = 0; i < n; i++) {
    res->ops += w[i].done;
    res->conflicts += w[i].conflicts;
    bu_hist_add(merged, w[i].hist);
    if (w[i].failed) {
      fprintf(stderr, "net_fig8: %s thread %d: %s\n", phase_name[ph], i, w[i].errtext);
      rc = -1;
    }
    pc_buf_free(&w[i].body);
    pc_buf_free(&w[i].reply);
  }
  res->seconds = elapsed;
  res->ops_s = (double)res->ops / elapsed;
  res->cpu_us_per_op = bu_per(d.cpu_s * 1e6, res->ops);
  res->csw_per_op = bu_per((double)d.csw, res->ops);
  res->others_cores = bu_others_cores(d.busy_s, d.cpu_s, elapsed);
  res->p50_us = (double)bu_percentile(merged, res->ops, 0.50) / 1e3;
  res->p99_us = (double)bu_percentile(merged, res->ops, 0.99) / 1e3;
  free(hist);
  free(w);
  return rc;
}

/* ---- setup and teardown ------------------------------------------------------ */

static int preload(bench_t *b, const char *store_path) {
  pc_error_t e;
  pc_local_options_t lo = {1, 0, 32u << 20, 0, 0, 0};
  pc_store_t *s = pc_local_store_open(store_path, &lo, &e);
  if (!s) {
    fprintf(stderr, "net_fig8: store %s: %s\n", store_path, e.text);
    return -1;
  }
  uint64_t rng = b->p.seed;
  char key[KEY_LEN];
  int rc = 0;
  leveldb_writebatch_t *wb = leveldb_writebatch_create();
  for (uint64_t i = 0; i < b->p.keys && rc == 0; i++) {
    bu_make_key(key, i);
    const char *v = value_at(b, bu_splitmix64(&rng));
    leveldb_writebatch_put(wb, key, KEY_LEN, v, b->p.value_size);
    if (i % 1000 == 999 || i + 1 == b->p.keys) {
      char *err = NULL;
      leveldb_write(b->raw.db, b->raw_wo_load, wb, &err);
      if (err) {
        fprintf(stderr, "net_fig8: raw preload: %s\n", err);
        leveldb_free(err);
        rc = -1;
      }
      leveldb_writebatch_clear(wb);
    }
    pc_mutation_t m = {{TABLE, key, KEY_LEN, COLUMN, strlen(COLUMN)}, PC_WRITE_PUT, v,
                       b->p.value_size, 0};
    pc_lock_info_t lock;
    memset(&lock, 0, sizeof lock);
    uint64_t start, commit;
    if (pc_oracle_next(b->oracle, 1, &start, &e) != PC_OK ||
        s->ops->commit_one_phase(s, &m, 1, start, ts_from_oracle, b->oracle, NULL, &commit, &lock,
                                 &e) != PC_OK) {
      fprintf(stderr, "net_fig8: tablet preload: %s\n", e.text);
      rc = -1;
    }
    pc_lock_info_free(&lock);
  }
  leveldb_writebatch_destroy(wb);
  s->ops->close(s);
  return rc;
}

/* An rpc.h server as the daemons configure it (the oracle's ops run on the
 * I/O thread, like `percolator tso` and `percolator run`). */
static pc_rpc_server_t *serve(bench_t *b, const char *name, pc_rpc_handler_fn fn, void *ctx,
                              int (*runs_inline)(uint8_t op)) {
  pc_rpc_server_options_t o = {0};
  o.name = name;
  o.runs_inline = runs_inline;
  o.host = "127.0.0.1";
  o.port = 0;
  o.workers = b->p.workers;
  pc_error_t e;
  pc_rpc_server_t *s = pc_rpc_server_start(&o, fn, ctx, &e);
  if (!s) fprintf(stderr, "net_fig8: %s server: %s\n", name, e.text);
  return s;
}

static int setup(bench_t *b, json_t *info) {
  char path[4300], store_path[4300];
  pc_error_t e;
  if (bu_make_temp_dir(b->dir, sizeof b->dir, b->p.parent, "net-fig8", "net_fig8") != 0)
    return -1;
  b->randbuf = bu_random_bytes(RANDBUF_BYTES + b->p.value_size, b->p.seed ^ 0x5eed);
  if (!b->randbuf) return -1;
  snprintf(path, sizeof path, "%s/oracle", b->dir);
  if (!(b->oracle = pc_oracle_open(path, 0, &e))) {
    fprintf(stderr, "net_fig8: oracle: %s\n", e.text);
    return -1;
  }
  snprintf(path, sizeof path, "%s/raw", b->dir);
  if (bu_ldb_open(&b->raw, path, "net_fig8") != 0) return -1;
  b->raw_ro = leveldb_readoptions_create();
  b->raw_wo = leveldb_writeoptions_create();
  leveldb_writeoptions_set_sync(b->raw_wo, (unsigned char)b->p.sync);
  b->raw_wo_load = leveldb_writeoptions_create();

  snprintf(store_path, sizeof store_path, "%s/tablet-store", b->dir);
  double t0 = (double)bu_now_ns() * 1e-9;
  if (preload(b, store_path) != 0) return -1;
  double t1 = (double)bu_now_ns() * 1e-9;
  leveldb_compact_range(b->raw.db, NULL, 0, NULL, 0);
  if (bu_ldb_compact_dir(store_path, "net_fig8") != 0) return -1;
  double t2 = (double)bu_now_ns() * 1e-9;
  json_object_set_new(info, "preload_s", json_real(t1 - t0));
  json_object_set_new(info, "compact_s", json_real(t2 - t1));

  pc_local_options_t lo = {0, b->p.sync, 32u << 20, 32u << 20, 0, 0};
  pc_store_t *s = pc_local_store_open(store_path, &lo, &e);
  if (!s) {
    fprintf(stderr, "net_fig8: store %s: %s\n", store_path, e.text);
    return -1;
  }
  pc_row_range_t all = {"", 0, "", 0};
  /* as in `percolator run`, the tablet asks the in-process oracle directly */
  b->tablet = pc_tablet_create("t1", s, &all, ts_from_oracle, b->oracle);
  if (!b->tablet) {
    s->ops->close(s);
    fprintf(stderr, "net_fig8: out of memory\n");
    return -1;
  }
  if (!(b->tso_srv = serve(b, "tso", pc_tso_rpc_handler, b->oracle, pc_tso_rpc_runs_inline))) return -1;
  if (!(b->tablet_srv = serve(b, "tablet t1", pc_tablet_rpc_handler, b->tablet, NULL))) return -1;
  if (!(b->raw_srv = serve(b, "raw", raw_handler, b, NULL))) return -1;

  snprintf(path, sizeof path, "%s/client.json", b->dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "net_fig8: %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f,
          "{\"data_dir\": \"%s/client\", \"served\": \"%s\", \"log\": {\"level\": \"warn\"},\n"
          " \"store\": {\"sync\": %s, \"lazy_start\": %s},\n"
          " \"tso\": {\"listen\": \"127.0.0.1:%u\"},\n"
          " \"tablets\": [{\"name\": \"t1\", \"listen\": \"127.0.0.1:%u\", \"start\": \"\", "
          "\"end\": \"\"}]}\n",
          b->dir, b->dir, b->p.sync ? "true" : "false", b->p.lazy_start ? "true" : "false",
          (unsigned)pc_rpc_server_port(b->tso_srv),
          (unsigned)pc_rpc_server_port(b->tablet_srv));
  if (fclose(f) != 0) return -1;
  if (!(b->db = pc_db_open_config(path, &e))) {
    fprintf(stderr, "net_fig8: pc_db_open_config %s: %s\n", path, e.text);
    return -1;
  }
  if (!(b->raw_cli = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(b->raw_srv), NULL,
                                          &e))) {
    fprintf(stderr, "net_fig8: raw client: %s\n", e.text);
    return -1;
  }
  json_object_set_new(info, "tso_port", json_integer(pc_rpc_server_port(b->tso_srv)));
  json_object_set_new(info, "tablet_port", json_integer(pc_rpc_server_port(b->tablet_srv)));
  json_object_set_new(info, "raw_port", json_integer(pc_rpc_server_port(b->raw_srv)));
  return 0;
}

static void teardown(bench_t *b) {
  if (b->db) pc_db_close(b->db);
  if (b->raw_cli) pc_rpc_client_destroy(b->raw_cli);
  if (b->raw_srv) pc_rpc_server_stop(b->raw_srv);
  if (b->tablet_srv) pc_rpc_server_stop(b->tablet_srv);
  if (b->tso_srv) pc_rpc_server_stop(b->tso_srv);
  if (b->tablet) pc_tablet_destroy(b->tablet); /* closes its store */
  if (b->oracle) pc_oracle_close(b->oracle);
  bu_ldb_close(&b->raw);
  if (b->raw_ro) leveldb_readoptions_destroy(b->raw_ro);
  if (b->raw_wo) leveldb_writeoptions_destroy(b->raw_wo);
  if (b->raw_wo_load) leveldb_writeoptions_destroy(b->raw_wo_load);
  if (b->dir[0]) bu_remove_tree(b->dir);
  free(b->randbuf);
}

/* ---- command line ------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_net_fig8 [options]\n"
          "  --threads LIST    client thread counts (default 1,8; each 1..%d)\n"
          "  --seconds S       seconds per phase (default 1)\n"
          "  --ops N           also end a phase after N operations (default: no bound)\n"
          "  --rounds N        rounds per thread count (default 3)\n"
          "  --keys N          preloaded rows (default 100000)\n"
          "  --value-size N    bytes per value (default 100)\n"
          "  --sync 0|1        fsync every write on both sides (default 0)\n"
          "  --workers N       handler threads of each rpc server (default 4)\n"
          "  --lazy-start 0|1  the client takes start timestamps at first use (store.lazy_start):\n"
          "                    a read's comes from the tablet (GET_FRESH)\n"
          "                    (default 0)\n"
          "  --seed N          (default 42)\n"
          "  --dir D           parent of the temporary directory (default /tmp)\n"
          "  --only PHASE      run one phase only: raw_get, txn_read, raw_put or txn_write\n"
          "                    (for profiling; no ratios)\n"
          "Prints one JSON document on stdout.\n",
          MAX_THREADS);
}

static int parse_args(int argc, char **argv, params_t *p) {
  static const struct option longopts[] = {
      {"threads", required_argument, NULL, 't'}, {"seconds", required_argument, NULL, 'S'},
      {"ops", required_argument, NULL, 'o'},     {"rounds", required_argument, NULL, 'r'},
      {"keys", required_argument, NULL, 'k'},    {"value-size", required_argument, NULL, 'v'},
      {"sync", required_argument, NULL, 's'},    {"workers", required_argument, NULL, 'w'},
      {"seed", required_argument, NULL, 'e'},    {"dir", required_argument, NULL, 'd'},
      {"only", required_argument, NULL, 'O'},    {"help", no_argument, NULL, 'h'},
      {"lazy-start", required_argument, NULL, 'L'},
      {NULL, 0, NULL, 0}};
  *p = (params_t){.seconds = 1.0, .keys = 100000, .value_size = 100, .threads = {1, 8},
                  .nthreads = 2, .rounds = 3, .workers = 4, .seed = 42, .parent = "/tmp",
                  .only = -1};
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    const char *bad = NULL;
    switch (c) {
      case 't':
        if (bu_parse_int_list(optarg, MAX_THREADS, p->threads, MAX_COUNTS, &p->nthreads))
          bad = "--threads";
        break;
      case 'S': if (bu_parse_double(optarg, 0, 1, 3600, &p->seconds)) bad = "--seconds"; break;
      case 'o': if (bu_parse_u64(optarg, 1, UINT64_MAX, &p->ops)) bad = "--ops"; break;
      case 'r':
        if (bu_parse_u64(optarg, 1, MAX_ROUNDS, &v)) bad = "--rounds";
        else p->rounds = (int)v;
        break;
      case 'k': if (bu_parse_u64(optarg, 1, 9999999999ull, &p->keys)) bad = "--keys"; break;
      case 'v':
        if (bu_parse_u64(optarg, 1, PC_MAX_VALUE, &v)) bad = "--value-size";
        else p->value_size = (size_t)v;
        break;
      case 's':
        if (bu_parse_u64(optarg, 0, 1, &v)) bad = "--sync";
        else p->sync = (int)v;
        break;
      case 'w':
        if (bu_parse_u64(optarg, 1, 1024, &v)) bad = "--workers";
        else p->workers = (uint32_t)v;
        break;
      case 'e': if (bu_parse_u64(optarg, 0, UINT64_MAX, &p->seed)) bad = "--seed"; break;
      case 'd': p->parent = optarg; break;
      case 'L':
        if (bu_parse_u64(optarg, 0, 1, &v)) bad = "--lazy-start";
        else p->lazy_start = (int)v;
        break;
      case 'O':
        if ((p->only = bu_choice(optarg, phase_name, PH_COUNT)) < 0) bad = "--only";
        break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) return bu_bad_value("pc_bench_net_fig8", bad, optarg);
  }
  return bu_no_operands("pc_bench_net_fig8", argc, argv, optind);
}

static json_t *phase_json(const result_t *r) {
  json_t *o = json_object();
  json_object_set_new(o, "ops_s", json_real(r->ops_s));
  json_object_set_new(o, "ops", json_integer((json_int_t)r->ops));
  json_object_set_new(o, "seconds", json_real(r->seconds));
  json_object_set_new(o, "p50_us", json_real(r->p50_us));
  json_object_set_new(o, "p99_us", json_real(r->p99_us));
  json_object_set_new(o, "cpu_us_per_op", json_real(r->cpu_us_per_op));
  json_object_set_new(o, "context_switches_per_op", json_real(r->csw_per_op));
  json_object_set_new(o, "others_cores", json_real(r->others_cores));
  return o;
}

int main(int argc, char **argv) {
  bench_t *b = calloc(1, sizeof *b);
  if (!b) return 1;
  if (parse_args(argc, argv, &b->p) != 0) {
    free(b);
    return 2;
  }
  const params_t *p = &b->p;
  json_t *doc = json_object();
  bu_json_head(doc, "net_fig8");
  json_t *par = json_object();
  json_object_set_new(par, "threads", bu_json_int_array(p->threads, p->nthreads));
  json_object_set_new(par, "seconds", json_real(p->seconds));
  json_object_set_new(par, "ops", p->ops ? json_integer((json_int_t)p->ops) : json_null());
  json_object_set_new(par, "rounds", json_integer(p->rounds));
  json_object_set_new(par, "keys", json_integer((json_int_t)p->keys));
  json_object_set_new(par, "value_size", json_integer((json_int_t)p->value_size));
  json_object_set_new(par, "sync", json_integer(p->sync));
  json_object_set_new(par, "lazy_start", json_integer(p->lazy_start));
  json_object_set_new(par, "workers", json_integer(p->workers));
  json_object_set_new(par, "seed", json_integer((json_int_t)p->seed));
  json_object_set_new(par, "only", p->only >= 0 ? json_string(phase_name[p->only]) : json_null());
  json_object_set_new(doc, "params", par);
  json_object_set_new(doc, "servers",
                      json_string("in-process rpc.h servers on 127.0.0.1 (ephemeral ports): tso, "
                                  "one tablet over pc_local_store_open, raw LevelDB get/put"));
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_t *info = json_object();
  json_object_set_new(doc, "setup", info);

  int rc = 0;
  if (setup(b, info) != 0) {
    rc = 1;
    goto out;
  }
  /* warm-up, not reported: connections, caches */
  result_t warm;
  if (run_phase(b, PH_RAW_GET, 1, 0.2, 7, &warm) != 0 ||
      run_phase(b, PH_TXN_READ, 1, 0.2, 8, &warm) != 0) {
    rc = 1;
    goto out;
  }

  /* [thread count][phase][round] */
  static double ops_s[MAX_COUNTS][PH_COUNT][MAX_ROUNDS], ratio[MAX_COUNTS][2][MAX_ROUNDS];
  static double cpu[MAX_COUNTS][PH_COUNT][MAX_ROUNDS], csw[MAX_COUNTS][PH_COUNT][MAX_ROUNDS];
  static double p50[MAX_COUNTS][PH_COUNT][MAX_ROUNDS], p99[MAX_COUNTS][PH_COUNT][MAX_ROUNDS];
  static double others[MAX_COUNTS][PH_COUNT][MAX_ROUNDS];
  uint64_t conflicts[MAX_COUNTS] = {0};
  json_t *jrounds = json_array();
  json_object_set_new(doc, "rounds", jrounds);
  static const enum phase pairs[2][2] = {{PH_RAW_GET, PH_TXN_READ}, {PH_RAW_PUT, PH_TXN_WRITE}};
  for (int kind = 0; kind < 2 && rc == 0; kind++) {
    for (int ti = 0; ti < p->nthreads && rc == 0; ti++) {
      for (int r = 0; r < p->rounds && rc == 0; r++) {
        int txn_first = r % 2;
        json_t *jr = json_object();
        json_object_set_new(jr, "kind", json_string(kind ? "write" : "read"));
        json_object_set_new(jr, "threads", json_integer(p->threads[ti]));
        json_object_set_new(jr, "round", json_integer(r));
        json_object_set_new(jr, "order", json_string(txn_first ? "txn first" : "raw first"));
        for (int j = 0; j < 2 && rc == 0; j++) {
          enum phase ph = pairs[kind][txn_first ? 1 - j : j];
          if (p->only >= 0 && (int)ph != p->only) continue;
          result_t res;
          uint64_t seed = p->seed + (uint64_t)(kind * 1000 + ti * 100 + r * 10 + (int)ph);
          if (run_phase(b, ph, p->threads[ti], p->seconds, seed, &res) != 0) {
            rc = 1;
            break;
          }
          ops_s[ti][ph][r] = res.ops_s;
          cpu[ti][ph][r] = res.cpu_us_per_op;
          csw[ti][ph][r] = res.csw_per_op;
          p50[ti][ph][r] = res.p50_us;
          p99[ti][ph][r] = res.p99_us;
          others[ti][ph][r] = res.others_cores;
          conflicts[ti] += res.conflicts;
          json_t *jp = phase_json(&res);
          if (ph == PH_TXN_WRITE)
            json_object_set_new(jp, "conflicts", json_integer((json_int_t)res.conflicts));
          json_object_set_new(jr, phase_name[ph], jp);
        }
        if (rc == 0 && p->only < 0) {
          ratio[ti][kind][r] = ops_s[ti][pairs[kind][1]][r] / ops_s[ti][pairs[kind][0]][r];
          json_object_set_new(jr, "ratio", json_real(ratio[ti][kind][r]));
        }
        json_array_append_new(jrounds, jr);
      }
    }
  }
  if (rc != 0) goto out;

  json_t *results = json_array();
  json_object_set_new(doc, "results", results);
  int read_met = 1, write_met = 1;
  for (int ti = 0; ti < p->nthreads; ti++) {
    json_t *jt = json_object();
    json_object_set_new(jt, "threads", json_integer(p->threads[ti]));
    for (int ph = 0; ph < PH_COUNT; ph++) {
      if (p->only >= 0 && ph != p->only) continue;
      json_t *jp = json_object();
      json_object_set_new(jp, "ops_s", json_real(bu_median(ops_s[ti][ph], p->rounds)));
      json_object_set_new(jp, "p50_us", json_real(bu_median(p50[ti][ph], p->rounds)));
      json_object_set_new(jp, "p99_us", json_real(bu_median(p99[ti][ph], p->rounds)));
      json_object_set_new(jp, "cpu_us_per_op", json_real(bu_median(cpu[ti][ph], p->rounds)));
      json_object_set_new(jp, "context_switches_per_op",
                          json_real(bu_median(csw[ti][ph], p->rounds)));
      json_object_set_new(jp, "others_cores", json_real(bu_median(others[ti][ph], p->rounds)));
      json_object_set_new(jt, phase_name[ph], jp);
    }
    json_object_set_new(jt, "txn_write_conflicts", json_integer((json_int_t)conflicts[ti]));
    json_array_append_new(results, jt);
    if (p->only >= 0) continue;
    double rr = bu_median(ratio[ti][0], p->rounds), wr = bu_median(ratio[ti][1], p->rounds);
    json_object_set_new(jt, "read_ratio", json_real(rr));
    json_object_set_new(jt, "write_ratio", json_real(wr));
    if (rr < 0.9) read_met = 0;
    if (wr < 0.5) write_met = 0;
  }
  if (p->only >= 0) goto out;
  json_t *goal = json_object();
  json_object_set_new(goal, "read_ratio", json_real(0.9));
  json_object_set_new(goal, "write_ratio", json_real(0.5));
  json_object_set_new(goal, "read_met", json_boolean(read_met));
  json_object_set_new(goal, "write_met", json_boolean(write_met));
  json_object_set_new(doc, "goal", goal);
  json_t *paper = json_object();
  json_object_set_new(paper, "read_ratio", json_real(0.94));
  json_object_set_new(paper, "write_ratio", json_real(0.23));
  json_object_set_new(doc, "paper", paper);

out:
  teardown(b);
  free(b);
  return bu_json_finish(doc, rc);
}
