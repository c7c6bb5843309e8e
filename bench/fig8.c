/* fig8.c — the Percolator paper's Figure 8 on this machine.
 *
 * Measures single-cell transactional reads and writes per second against raw
 * LevelDB get/put, in the same process and run, with the same value size,
 * the same sync setting and the same thread count, and reports the ratios
 * read_ratio = txn_reads/raw_gets and write_ratio = txn_writes/raw_puts (the
 * paper measured 0.94 and 0.23 against Bigtable; our goals are >= 0.9 and
 * >= 0.5).
 *
 *   transactional read  = pc_txn_begin (start_ts from the embedded oracle via
 *                         the batcher) + pc_txn_get + pc_txn_commit of the
 *                         read-only txn + pc_txn_destroy
 *   transactional write = pc_txn_begin + pc_txn_set + pc_txn_commit (one cell:
 *                         the one-phase commit path); a PC_CONFLICT is counted
 *                         and retried in a new transaction
 *   raw get / put       = leveldb_get / leveldb_put on a separate LevelDB in
 *                         its own directory, opened with the options of the
 *                         project's store (pc_local_store_open: bloom filter
 *                         10 bits, 32 MiB LRU cache, 16 MiB write buffer,
 *                         no compression, as the store's default)
 *
 * Both stores are preloaded with the same --keys rows (row "k0000000042",
 * column "f:v" in table "bench" on the Percolator side, key "k0000000042" on
 * the raw side), written without sync, then both are fully compacted (the
 * Percolator store by opening its LevelDB directory <db>/store directly while
 * the database is closed) so neither side reads from a fresher memtable.
 * Reads go to random existing keys; writes overwrite random existing keys
 * with values cut from a buffer of random bytes (so snappy cannot shrink
 * them). Reads are measured first, on the compacted stores, then writes,
 * after an untimed warm-up of --warmup-writes writes on each side: for
 * each kind, --rounds rounds each run the raw phase and the transactional
 * phase. A read round interleaves the two in slices of --slice reads (see
 * run_interleaved); a write round runs them whole, the raw side first in
 * even rounds and the transactional side first in odd ones. Before every phase the benchmark waits until LevelDB's
 * background thread is idle, so no phase pays for compactions another one
 * caused; after a write phase it times that drain too, and reports, besides
 * the foreground rate, a settled rate ops / (phase time + drain time) that
 * charges each side with the flushes and compactions its writes caused. The
 * figures are medians over rounds (ratios: the median of per-round ratios).
 * With --breakdown 1 (the default) it also times the parts of a transactional
 * read and write, and the same LevelDB work done directly on the Percolator
 * store's LevelDB (see read_breakdown and breakdown below), so the ratios can
 * be split into what the store's layout costs and what the library adds. The
 * JSON also records, per phase, how many CPUs other processes kept busy.
 * Output: one JSON document on stdout.
 */
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <leveldb/c.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "core/keys.h" /* breakdown only: the store's key and record encodings */

#define TABLE "bench"
#define COLUMN "f:v"
#define KEY_LEN BU_KEY_LEN /* "k" + 10 digits */
#define RANDBUF_BYTES (1u << 20)
#define MAX_THREADS 256
#define MAX_ROUNDS BU_MAX_ROUNDS

/* The four measured phases, then the breakdown phases (--breakdown). */
enum phase {
  PH_RAW_GET, PH_TXN_READ, PH_RAW_PUT, PH_TXN_WRITE, PH_COUNT,
  PH_TS = PH_COUNT, PH_TXN_EMPTY, PH_TXN_SET_ABORT, PH_RAW_GET_PUT, PH_STORE_GET_META,
  PH_STORE_1PC, PH_STORE_1PC_ONCE, PH_STORE_1PC_NOHIST, PH_STORE_1PC_NOREAD,
  PH_STORE_1PC_NOREAD_ONCE, PH_ALL
};

static const char *const phase_name[PH_ALL] = {
    "raw_get", "txn_read", "raw_put", "txn_write", "timestamp", "txn_begin_commit_empty",
    "txn_begin_set_abort", "raw_get_then_put", "store_get_meta", "store_emulated_1pc",
    "store_emulated_1pc_value_once", "store_emulated_1pc_no_history",
    "store_emulated_1pc_no_read", "store_emulated_1pc_no_read_value_once"};

typedef struct params {
  uint64_t ops;      /* per write phase (and read phase unless read_ops is set) */
  uint64_t read_ops; /* per read phase; 0: ops */
  uint64_t keys;
  size_t value_size;
  int sync;
  int threads;
  int rounds;
  int compact;
  int keep;
  uint64_t seed;
  const char *parent; /* where the temp directory is made */
  int only;           /* -1: every phase; else one phase (for profiling) */
  int breakdown;      /* run the breakdown phases at the end */
  uint64_t warmup_writes; /* untimed writes on each side before the write rounds */
  int warmup_set;
  uint64_t slice; /* read rounds: reads per interleaved slice; 0: whole phases */
} params_t;

typedef struct bench {
  params_t p;
  char dir[4096];
  char pc_dir[4200];
  char raw_dir[4200];
  leveldb_t *raw;
  leveldb_readoptions_t *raw_ro;
  leveldb_writeoptions_t *raw_wo;      /* sync as --sync */
  leveldb_writeoptions_t *raw_wo_load; /* no sync: preload */
  pc_db_t *db;
  leveldb_t *pcstore; /* breakdown: the Percolator store's LevelDB, opened directly */
  bu_ldb_t raw_l, pcstore_l;
  char *randbuf; /* RANDBUF_BYTES + value_size random bytes */
} bench_t;

typedef struct worker {
  bench_t *b;
  pthread_t tid;
  pthread_barrier_t *start;
  enum phase phase;
  uint64_t first, count; /* preload: key range; phases: number of operations */
  uint64_t rng;
  uint64_t done, conflicts;
  uint64_t ts;           /* store_emulated_1pc: the next fake commit timestamp */
  pc_buf_t kb, wkb, vb, mb; /* breakdown: reused encodings */
  int failed;
  char errtext[PC_ERROR_TEXT + 64];
  /* interleaved rounds: the last slice's clock and CPU times, ops per slice */
  enum phase sides[2];
  uint64_t slice_ops, nslices, last_slice_ops;
  uint64_t t0_ns, t1_ns, cpu_ns;
} worker_t;

typedef struct result {
  double others_cores; /* CPUs other processes kept busy meanwhile (machine noise) */
  double steal_cores;  /* CPUs the hypervisor took meanwhile */
  double ops_s;
  double seconds;
  double cpu_us_per_op;
  uint64_t ops, conflicts;
} result_t;

/* ---- small helpers ------------------------------------------------------ */

static const char *value_at(const bench_t *b, uint64_t r) {
  return b->randbuf + (r % RANDBUF_BYTES);
}

/* Waits until LevelDB's background thread (flushes, compactions) has gone
 * idle: two consecutive 50 ms windows in which the whole process used under
 * 2.5 ms of CPU (the measuring threads are parked). Returns the seconds until
 * the start of those windows (at most about 120). */
static double wait_quiet(void) {
  double t0 = bu_now_s(), quiet_since = t0;
  int quiet = 0;
  while (quiet < 2 && bu_now_s() - t0 < 120) {
    double c0 = bu_cpu_s(NULL), w0 = bu_now_s();
    struct timespec d = {0, 50 * 1000 * 1000};
    nanosleep(&d, NULL);
    if (bu_cpu_s(NULL) - c0 < 0.0025) {
      if (quiet++ == 0) quiet_since = w0;
    } else {
      quiet = 0;
    }
  }
  return quiet_since - t0;
}

static uint64_t du_total;
static int du_fn(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)path, (void)f;
  if (flag == FTW_F) du_total += (uint64_t)st->st_size;
  return 0;
}

/* Bytes of the files under path. */
static uint64_t disk_bytes(const char *path) {
  du_total = 0;
  nftw(path, du_fn, 16, FTW_PHYS);
  return du_total;
}

static void fail_worker(worker_t *w, const char *what, const char *msg) {
  w->failed = 1;
  snprintf(w->errtext, sizeof w->errtext, "%s: %s", what, msg);
}

/* ---- the stores --------------------------------------------------------- */

static int open_raw(bench_t *b) {
  if (bu_ldb_open(&b->raw_l, b->raw_dir, "fig8") != 0) return -1;
  b->raw = b->raw_l.db;
  b->raw_ro = leveldb_readoptions_create();
  b->raw_wo = leveldb_writeoptions_create();
  leveldb_writeoptions_set_sync(b->raw_wo, (unsigned char)b->p.sync);
  b->raw_wo_load = leveldb_writeoptions_create();
  return 0;
}

static void close_raw(bench_t *b) {
  bu_ldb_close(&b->raw_l);
  bu_ldb_close(&b->pcstore_l);
  if (b->raw_ro) leveldb_readoptions_destroy(b->raw_ro);
  if (b->raw_wo) leveldb_writeoptions_destroy(b->raw_wo);
  if (b->raw_wo_load) leveldb_writeoptions_destroy(b->raw_wo_load);
  b->raw = b->pcstore = NULL;
  b->raw_ro = NULL;
  b->raw_wo = b->raw_wo_load = NULL;
}

static pc_db_t *open_pc(const bench_t *b, int sync, int create) {
  pc_options_t *o = pc_options_create();
  if (!o) return NULL;
  pc_options_set_create_if_missing(o, create);
  pc_options_set_sync(o, sync);
  pc_error_t e;
  pc_db_t *db = pc_db_open(o, b->pc_dir, &e);
  pc_options_destroy(o);
  if (!db) fprintf(stderr, "fig8: pc_db_open %s: %s\n", b->pc_dir, e.text);
  return db;
}

/* ---- the operations ----------------------------------------------------- */

static void *preload_thread(void *arg) {
  worker_t *w = arg;
  bench_t *b = w->b;
  char key[KEY_LEN];
  pc_error_t e;
  leveldb_writebatch_t *wb = leveldb_writebatch_create();
  for (uint64_t i = w->first; i < w->first + w->count && !w->failed; i++) {
    bu_make_key(key, i);
    const char *v = value_at(b, bu_splitmix64(&w->rng));
    leveldb_writebatch_put(wb, key, KEY_LEN, v, b->p.value_size);
    if ((i - w->first) % 1000 == 999 || i + 1 == w->first + w->count) {
      char *err = NULL;
      leveldb_write(b->raw, b->raw_wo_load, wb, &err);
      if (err) {
        fail_worker(w, "raw preload", err);
        leveldb_free(err);
      }
      leveldb_writebatch_clear(wb);
    }
    for (;;) {
      pc_txn_t *t = pc_txn_begin(b->db, &e);
      if (!t) {
        fail_worker(w, "preload begin", e.text);
        break;
      }
      pc_status_t st = pc_txn_set(t, TABLE, key, KEY_LEN, COLUMN, strlen(COLUMN), v,
                                  b->p.value_size, &e);
      if (st == PC_OK) st = pc_txn_commit(t, &e);
      pc_txn_destroy(t);
      if (st == PC_OK) break;
      if (st != PC_CONFLICT) {
        fail_worker(w, "preload commit", e.text);
        break;
      }
    }
  }
  leveldb_writebatch_destroy(wb);
  return NULL;
}

static void raw_get(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  char *e = NULL;
  size_t vl = 0;
  char *v = leveldb_get(w->b->raw, w->b->raw_ro, key, KEY_LEN, &vl, &e);
  if (e) {
    fail_worker(w, "leveldb_get", e);
    leveldb_free(e);
  } else if (!v || vl != w->b->p.value_size) {
    fail_worker(w, "leveldb_get", v ? "value of the wrong size" : "preloaded key is missing");
  }
  leveldb_free(v);
}

static void raw_put(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  char *e = NULL;
  leveldb_put(w->b->raw, w->b->raw_wo, key, KEY_LEN, value_at(w->b, r >> 20), w->b->p.value_size,
              &e);
  if (e) {
    fail_worker(w, "leveldb_put", e);
    leveldb_free(e);
  }
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
  if (st != PC_OK) {
    fail_worker(w, "pc_txn_get", st == PC_NOT_FOUND ? "preloaded cell is missing" : e.text);
  } else if (vl != w->b->p.value_size) {
    fail_worker(w, "pc_txn_get", "value of the wrong size");
  } else if ((st = pc_txn_commit(t, &e)) != PC_OK) {
    fail_worker(w, "pc_txn_commit (read-only)", e.text);
  }
  pc_free(v);
  pc_txn_destroy(t);
}

static void txn_write(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  const char *v = value_at(w->b, r >> 20);
  pc_error_t e;
  int tries = 0;
  for (;;) {
    pc_txn_t *t = pc_txn_begin(w->b->db, &e);
    if (!t) {
      fail_worker(w, "pc_txn_begin", e.text);
      return;
    }
    pc_status_t st = pc_txn_set(t, TABLE, key, KEY_LEN, COLUMN, strlen(COLUMN), v,
                                w->b->p.value_size, &e);
    if (st == PC_OK) st = pc_txn_commit(t, &e);
    pc_txn_destroy(t);
    if (st == PC_OK) return;
    if (st != PC_CONFLICT || ++tries == 1000) {
      fail_worker(w, "pc_txn_commit", e.text);
      return;
    }
    w->conflicts++;
  }
}

static void ts_only(worker_t *w, uint64_t r) {
  (void)r;
  uint64_t ts;
  pc_error_t e;
  if (pc_db_timestamp(w->b->db, 10000, &ts, &e) != PC_OK) fail_worker(w, "pc_db_timestamp", e.text);
}

static void txn_empty(worker_t *w, uint64_t r) {
  (void)r;
  pc_error_t e;
  pc_txn_t *t = pc_txn_begin(w->b->db, &e);
  if (!t) {
    fail_worker(w, "pc_txn_begin", e.text);
    return;
  }
  if (pc_txn_commit(t, &e) != PC_OK) fail_worker(w, "pc_txn_commit (empty)", e.text);
  pc_txn_destroy(t);
}

static void txn_set_abort(worker_t *w, uint64_t r) {
  char key[KEY_LEN];
  bu_make_key(key, r % w->b->p.keys);
  pc_error_t e;
  pc_txn_t *t = pc_txn_begin(w->b->db, &e);
  if (!t) {
    fail_worker(w, "pc_txn_begin", e.text);
    return;
  }
  if (pc_txn_set(t, TABLE, key, KEY_LEN, COLUMN, strlen(COLUMN), value_at(w->b, r >> 20),
                 w->b->p.value_size, &e) != PC_OK)
    fail_worker(w, "pc_txn_set", e.text);
  pc_txn_destroy(t);
}

static void raw_get_put(worker_t *w, uint64_t r) {
  raw_get(w, r);
  if (!w->failed) raw_put(w, r);
}

/* The meta key of row r's cell, in w->kb. */
static pc_buf_t *meta_key(worker_t *w, uint64_t r, pc_cell_t *cell, char *key) {
  bu_make_key(key, r % w->b->p.keys);
  *cell = (pc_cell_t){TABLE, key, KEY_LEN, COLUMN, strlen(COLUMN)};
  w->kb.len = 0;
  if (pc_key_cell(&w->kb, PC_KS_META, cell) != 0) return NULL;
  return &w->kb;
}

/* What local_get does in LevelDB: one Get of the meta record. */
static void store_get_meta(worker_t *w, uint64_t r) {
  pc_cell_t cell;
  char key[KEY_LEN];
  pc_buf_t *kb = meta_key(w, r, &cell, key);
  char *e = NULL;
  size_t vl = 0;
  char *v = kb ? leveldb_get(w->b->pcstore, w->b->raw_ro, kb->p, kb->len, &vl, &e) : NULL;
  if (e) {
    fail_worker(w, "leveldb_get (meta)", e);
    leveldb_free(e);
  } else if (!v) {
    fail_worker(w, "leveldb_get (meta)", "meta record missing");
  }
  leveldb_free(v);
}

/* What local_commit_one_phase did in LevelDB for one cell with an inline
 * value before the meta cache and one-row commit records in the head (now
 * it writes only the meta record when the replaced version is unread): Get
 * the meta record, then one WriteBatch with the commit record (carrying the
 * value) and the new meta record (carrying it again). Kept as the reference
 * the variants are measured against; the records are made with the
 * library's own encoders. What-if variants:
 * value_in_write = 0 leaves the value out of the commit record (the value
 * stored once); history = 0 gives every cell one commit-record key that each
 * commit overwrites (old versions collected at once, as a GC would); read = 0
 * skips the Get of the meta record (as a cache of meta records would). */
static void emulate_1pc(worker_t *w, uint64_t r, int value_in_write, int history, int read) {
  pc_buf_t *wkb = &w->wkb, *vb = &w->vb, *mb = &w->mb;
  pc_cell_t cell;
  char key[KEY_LEN];
  if (read) store_get_meta(w, r);
  if (w->failed) return;
  pc_buf_t *kb = meta_key(w, r, &cell, key);
  size_t vlen = w->b->p.value_size;
  int inl = vlen <= PC_INLINE_MAX;
  uint64_t ts = w->ts++;
  pc_write_rec_t rec = {PC_WRITE_PUT, ts - 1, ts, inl, inl ? value_at(w->b, r >> 20) : NULL,
                        inl ? vlen : 0, 0};
  pc_write_rec_t wrec = rec;
  if (!value_in_write) {
    wrec.has_inline = 0;
    wrec.value = NULL;
    wrec.vlen = 0;
  }
  pc_meta_t m;
  memset(&m, 0, sizeof m);
  m.has_head = 1;
  m.head = rec;
  m.latest_any = ts;
  wkb->len = vb->len = mb->len = 0;
  leveldb_writebatch_t *batch = leveldb_writebatch_create();
  if (!inl) {
    pc_buf_t dk = {0};
    pc_key_cell_ts(&dk, PC_KS_DATA, &cell, ts - 1);
    leveldb_writebatch_put(batch, dk.p, dk.len, value_at(w->b, r >> 20), vlen);
    pc_buf_free(&dk);
  }
  if (!kb || pc_key_cell_ts(wkb, PC_KS_WRITE, &cell, history ? ts : 1) != 0 ||
      pc_write_encode(&wrec, vb) != 0 ||
      pc_meta_encode(&m, mb) != 0) {
    fail_worker(w, "emulated 1pc", "out of memory");
  } else {
    leveldb_writebatch_put(batch, wkb->p, wkb->len, vb->p, vb->len);
    leveldb_writebatch_put(batch, kb->p, kb->len, mb->p, mb->len);
    char *e = NULL;
    leveldb_write(w->b->pcstore, w->b->raw_wo, batch, &e);
    if (e) {
      fail_worker(w, "leveldb_write (emulated 1pc)", e);
      leveldb_free(e);
    }
  }
  leveldb_writebatch_destroy(batch);
}

static void store_emulated_1pc(worker_t *w, uint64_t r) { emulate_1pc(w, r, 1, 1, 1); }
static void store_emulated_1pc_once(worker_t *w, uint64_t r) { emulate_1pc(w, r, 0, 1, 1); }
static void store_emulated_1pc_nohist(worker_t *w, uint64_t r) { emulate_1pc(w, r, 1, 0, 1); }
static void store_emulated_1pc_noread(worker_t *w, uint64_t r) { emulate_1pc(w, r, 1, 1, 0); }
static void store_emulated_1pc_noread_once(worker_t *w, uint64_t r) { emulate_1pc(w, r, 0, 1, 0); }

static void (*const phase_op[PH_ALL])(worker_t *, uint64_t) = {
    raw_get, txn_read, raw_put, txn_write, ts_only, txn_empty, txn_set_abort, raw_get_put,
    store_get_meta, store_emulated_1pc, store_emulated_1pc_once, store_emulated_1pc_nohist,
    store_emulated_1pc_noread, store_emulated_1pc_noread_once};

static void *phase_thread(void *arg) {
  worker_t *w = arg;
  void (*op)(worker_t *, uint64_t) = phase_op[w->phase];
  pthread_barrier_wait(w->start);
  for (uint64_t i = 0; i < w->count && !w->failed; i++) {
    op(w, bu_splitmix64(&w->rng));
    w->done++;
  }
  pc_buf_free(&w->kb);
  pc_buf_free(&w->wkb);
  pc_buf_free(&w->vb);
  pc_buf_free(&w->mb);
  return NULL;
}

/* Runs phase ph with the configured threads and ops; -1 (message printed) on failure. */
static int run_phase(bench_t *b, enum phase ph, uint64_t ops, uint64_t seed, result_t *res) {
  int n = b->p.threads;
  worker_t w[MAX_THREADS];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].b = b;
    w[i].start = &start;
    w[i].phase = ph;
    w[i].count = ops / (uint64_t)n + ((uint64_t)i < ops % (uint64_t)n);
    w[i].rng = seed * 1000003u + (uint64_t)i * 7919u + (uint64_t)ph;
    /* Fake commit timestamps for store_emulated_1pc: the hybrid form of the
     * oracle's, from the wall clock now, so that the database, reopened later,
     * starts above them and later transactions do not conflict with them. */
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    w[i].ts = ((uint64_t)wall.tv_sec * 1000u + (uint64_t)wall.tv_nsec / 1000000u)
              << PC_TS_LOGICAL_BITS;
  }
  if (bu_start_threads(w, n, sizeof *w, offsetof(worker_t, tid), phase_thread) != n) {
    fprintf(stderr, "fig8: pthread_create failed\n");
    exit(1);
  }
  pthread_barrier_wait(&start);
  bu_meter_t m0, d;
  bu_meter_start(&m0);
  bu_join_threads(w, n, sizeof *w, offsetof(worker_t, tid));
  bu_meter_read(&m0, &d);
  pthread_barrier_destroy(&start);
  memset(res, 0, sizeof *res);
  int rc = 0;
  for (int i = 0; i < n; i++) {
    res->ops += w[i].done;
    res->conflicts += w[i].conflicts;
    if (w[i].failed) {
      fprintf(stderr, "fig8: %s thread %d: %s\n", phase_name[ph], i, w[i].errtext);
      rc = -1;
    }
  }
  res->seconds = (double)d.t_ns * 1e-9;
  res->ops_s = res->seconds > 0 ? (double)res->ops / res->seconds : 0;
  res->cpu_us_per_op = bu_per(d.cpu_s * 1e6, res->ops);
  if (res->seconds > 0.05) { /* /proc/stat counts in ticks: too coarse for shorter phases */
    res->others_cores = bu_others_cores(d.busy_s, d.cpu_s, res->seconds);
    res->steal_cores = d.steal_s / res->seconds;
  }
  return rc;
}

/* ---- interleaved read rounds ---------------------------------------------
 *
 * A read phase lasts a fraction of a second, and this VM's speed drifts by
 * tens of percent from one second to the next (neighbours, frequency), so two
 * whole phases run one after the other compare two different machines. An
 * interleaved round instead alternates short slices of the two phases (raw
 * first in even slices, transactional first in odd ones) with every thread
 * in the same slice, and sums each side's slice times: the drift lands on
 * both sides alike. A slice's time is taken inside the workers, from the
 * first thread's start to the last one's end, so the barriers between slices
 * are not counted. Only reads are interleaved: a write slice would leave its
 * flushes and compactions to the other side's slice. */

static uint64_t thread_cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static const enum phase read_side[2] = {PH_RAW_GET, PH_TXN_READ};

static void *interleave_thread(void *arg) {
  worker_t *w = arg;
  for (uint64_t k = 0; k < w->nslices; k++) {
    uint64_t n = k + 1 == w->nslices ? w->last_slice_ops : w->slice_ops;
    for (int j = 0; j < 2; j++) {
      void (*op)(worker_t *, uint64_t) = phase_op[w->sides[k % 2 ? 1 - j : j]];
      pthread_barrier_wait(w->start); /* slice starts */
      uint64_t c0 = thread_cpu_ns();
      w->t0_ns = bu_now_ns();
      for (uint64_t i = 0; i < n && !w->failed; i++) {
        op(w, bu_splitmix64(&w->rng));
        w->done++;
      }
      w->t1_ns = bu_now_ns();
      w->cpu_ns = thread_cpu_ns() - c0;
      pthread_barrier_wait(w->start); /* slice ends: the main thread reads the times */
    }
  }
  return NULL;
}

/* One interleaved round of ops reads on each side in slices of slice reads;
 * res[i] is sides[i]'s. -1 on failure. */
static int run_interleaved(bench_t *b, const enum phase sides[2], uint64_t ops, uint64_t slice,
                           uint64_t seed, result_t res[2]) {
  int n = b->p.threads;
  worker_t w[MAX_THREADS];
  pthread_barrier_t gate;
  pthread_barrier_init(&gate, NULL, (unsigned)n + 1);
  if (slice < (uint64_t)n) slice = (uint64_t)n;
  uint64_t per_thread = slice / (uint64_t)n;
  uint64_t nslices = (ops + slice - 1) / slice;
  uint64_t last = (ops - (nslices - 1) * slice) / (uint64_t)n;
  if (last == 0) last = 1;
  for (int i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].b = b;
    w[i].start = &gate;
    w[i].rng = seed * 1000003u + (uint64_t)i * 7919u;
    w[i].slice_ops = per_thread;
    w[i].nslices = nslices;
    w[i].last_slice_ops = last;
    w[i].sides[0] = sides[0];
    w[i].sides[1] = sides[1];
  }
  if (bu_start_threads(w, n, sizeof *w, offsetof(worker_t, tid), interleave_thread) != n) {
    fprintf(stderr, "fig8: pthread_create failed\n");
    exit(1);
  }
  uint64_t wall[2] = {0, 0}, cpu[2] = {0, 0}, done[2] = {0, 0};
  bu_meter_t m0, d;
  bu_meter_start(&m0);
  for (uint64_t k = 0; k < nslices; k++) {
    for (int j = 0; j < 2; j++) {
      int side = k % 2 ? 1 - j : j;
      uint64_t before = 0;
      for (int i = 0; i < n; i++) before += w[i].done;
      pthread_barrier_wait(&gate);
      pthread_barrier_wait(&gate);
      uint64_t lo = UINT64_MAX, hi = 0;
      for (int i = 0; i < n; i++) {
        if (w[i].t0_ns < lo) lo = w[i].t0_ns;
        if (w[i].t1_ns > hi) hi = w[i].t1_ns;
        cpu[side] += w[i].cpu_ns;
        done[side] += w[i].done;
      }
      done[side] -= before;
      wall[side] += hi - lo;
    }
  }
  bu_meter_read(&m0, &d);
  bu_join_threads(w, n, sizeof *w, offsetof(worker_t, tid));
  pthread_barrier_destroy(&gate);
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (w[i].failed) {
      fprintf(stderr, "fig8: interleaved reads, thread %d: %s\n", i, w[i].errtext);
      rc = -1;
    }
  }
  double secs = (double)d.t_ns * 1e-9;
  for (int side = 0; side < 2; side++) {
    result_t *r = &res[side];
    memset(r, 0, sizeof *r);
    r->ops = done[side];
    r->seconds = (double)wall[side] * 1e-9;
    r->ops_s = r->seconds > 0 ? (double)r->ops / r->seconds : 0;
    r->cpu_us_per_op = bu_per((double)cpu[side] * 1e-3, r->ops);
    if (secs > 0.05) { /* the whole round's: both sides share it */
      r->others_cores = bu_others_cores(d.busy_s, d.cpu_s, secs);
      r->steal_cores = d.steal_s / secs;
    }
  }
  return rc;
}

/* ---- setup -------------------------------------------------------------- */

static int preload(bench_t *b) {
  int n = b->p.threads;
  worker_t w[MAX_THREADS];
  for (int i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].b = b;
    w[i].first = b->p.keys * (uint64_t)i / (uint64_t)n;
    w[i].count = b->p.keys * (uint64_t)(i + 1) / (uint64_t)n - w[i].first;
    w[i].rng = b->p.seed ^ ((uint64_t)i << 32);
  }
  int started = bu_start_threads(w, n, sizeof *w, offsetof(worker_t, tid), preload_thread);
  bu_join_threads(w, started, sizeof *w, offsetof(worker_t, tid));
  int rc = started == n ? 0 : -1;
  for (int i = 0; i < started; i++) {
    if (w[i].failed) {
      fprintf(stderr, "fig8: preload thread %d: %s\n", i, w[i].errtext);
      rc = -1;
    }
  }
  return rc;
}

/* The LevelDB part of a transactional read in the state the read rounds
 * measure (both stores preloaded and compacted): --rounds rounds of a raw get
 * against a Get of the meta record on the Percolator store's LevelDB, opened
 * directly while the database is closed; interleaved like the read rounds
 * unless --slice is 0. */
static int read_breakdown(bench_t *b, json_t *info) {
  char store[4300];
  snprintf(store, sizeof store, "%s/store", b->pc_dir);
  if (bu_ldb_open(&b->pcstore_l, store, "fig8") != 0) return -1;
  b->pcstore = b->pcstore_l.db;
  result_t res;
  uint64_t wops = b->p.read_ops; /* a whole round: see the warm-up in main */
  double ops_s[2][MAX_ROUNDS], cpu[2][MAX_ROUNDS];
  static const enum phase ph[2] = {PH_RAW_GET, PH_STORE_GET_META};
  int rc = run_phase(b, PH_STORE_GET_META, wops, b->p.seed + 500, &res);
  if (rc == 0) rc = run_phase(b, PH_RAW_GET, wops, b->p.seed + 501, &res);
  for (int r = 0; r < b->p.rounds && rc == 0; r++) {
    if (b->p.slice) {
      result_t two[2];
      wait_quiet();
      rc = run_interleaved(b, ph, b->p.read_ops, b->p.slice, b->p.seed + 600 + (uint64_t)r, two);
      for (int k = 0; k < 2; k++) {
        ops_s[k][r] = two[k].ops_s;
        cpu[k][r] = two[k].cpu_us_per_op;
      }
      continue;
    }
    for (int j = 0; j < 2 && rc == 0; j++) {
      int k = r % 2 ? 1 - j : j;
      wait_quiet();
      rc = run_phase(b, ph[k], b->p.read_ops, b->p.seed + 600 + (uint64_t)r, &res);
      ops_s[k][r] = res.ops_s;
      cpu[k][r] = res.cpu_us_per_op;
    }
  }
  bu_ldb_close(&b->pcstore_l);
  b->pcstore = NULL;
  if (rc != 0) return -1;
  json_t *j = json_object();
  json_object_set_new(j, "raw_get_ops_s", json_real(bu_median(ops_s[0], b->p.rounds)));
  json_object_set_new(j, "raw_get_cpu_us_per_op", json_real(bu_median(cpu[0], b->p.rounds)));
  json_object_set_new(j, "store_get_meta_ops_s", json_real(bu_median(ops_s[1], b->p.rounds)));
  json_object_set_new(j, "store_get_meta_cpu_us_per_op", json_real(bu_median(cpu[1], b->p.rounds)));
  double ratio[MAX_ROUNDS];
  for (int r = 0; r < b->p.rounds; r++) ratio[r] = ops_s[1][r] / ops_s[0][r];
  json_object_set_new(j, "store_get_meta_vs_raw_get", json_real(bu_median(ratio, b->p.rounds)));
  json_object_set_new(info, "read_breakdown_compacted", j);
  return 0;
}

static int setup(bench_t *b, json_t *info) {
  if (bu_make_temp_dir(b->dir, sizeof b->dir, b->p.parent, "fig8", "fig8") != 0) return -1;
  snprintf(b->pc_dir, sizeof b->pc_dir, "%s/pc", b->dir);
  snprintf(b->raw_dir, sizeof b->raw_dir, "%s/raw", b->dir);
  b->randbuf = bu_random_bytes(RANDBUF_BYTES + b->p.value_size, b->p.seed);
  if (!b->randbuf) return -1;
  if (open_raw(b) != 0) return -1;
  /* Preload without sync on both sides; --sync applies to the measured phases. */
  if (!(b->db = open_pc(b, 0, 1))) return -1;
  double t0 = bu_now_s();
  if (preload(b) != 0) return -1;
  json_object_set_new(info, "preload_seconds", json_real(bu_now_s() - t0));
  pc_db_close(b->db);
  b->db = NULL;
  if (b->p.compact) {
    char store[4300];
    snprintf(store, sizeof store, "%s/store", b->pc_dir);
    t0 = bu_now_s();
    if (bu_ldb_compact_dir(store, "fig8") != 0) return -1;
    leveldb_compact_range(b->raw, NULL, 0, NULL, 0);
    json_object_set_new(info, "compact_seconds", json_real(bu_now_s() - t0));
  }
  json_object_set_new(info, "preloaded_bytes_txn", json_integer((json_int_t)disk_bytes(b->pc_dir)));
  json_object_set_new(info, "preloaded_bytes_raw", json_integer((json_int_t)disk_bytes(b->raw_dir)));
  if (b->p.breakdown && b->p.only < 0 && read_breakdown(b, info) != 0) return -1;
  if (!(b->db = open_pc(b, b->p.sync, 0))) return -1;
  return 0;
}

static void teardown(bench_t *b) {
  if (b->db) pc_db_close(b->db);
  b->db = NULL;
  close_raw(b);
  free(b->randbuf);
  if (b->dir[0] && !b->p.keep) bu_remove_tree(b->dir);
}

/* ---- breakdown ---------------------------------------------------------- */

/* One breakdown phase: waits for quiet, runs ph, times the drain after
 * writes; appends ops/s, wall and CPU us per op to the arrays of out[ph]. */
static int bd_phase(bench_t *b, enum phase ph, json_t *out) {
  result_t res;
  int writes = ph == PH_TXN_WRITE || ph == PH_RAW_PUT || ph == PH_RAW_GET_PUT ||
               ph >= PH_STORE_1PC;
  wait_quiet();
  if (run_phase(b, ph, writes ? b->p.ops : b->p.read_ops, b->p.seed + 7000 + (uint64_t)ph, &res) != 0)
    return -1;
  json_t *j = json_object_get(out, phase_name[ph]);
  if (!j) {
    j = json_object();
    json_object_set_new(out, phase_name[ph], j);
  }
  static const char *const fields[] = {"ops_s",         "wall_us_per_op",      "cpu_us_per_op",
                                       "ops_s_settled", "drain_cpu_us_per_op", "others_cores"};
  double v[6] = {res.ops_s, res.ops ? res.seconds * 1e6 * b->p.threads / (double)res.ops : 0,
                 res.cpu_us_per_op, -1, -1, res.others_cores};
  if (writes) {
    double c0 = bu_cpu_s(NULL);
    double drain = wait_quiet();
    v[3] = (double)res.ops / (res.seconds + drain);
    v[4] = res.ops ? (bu_cpu_s(NULL) - c0) * 1e6 / (double)res.ops : 0;
  }
  for (int i = 0; i < 6; i++) {
    if (v[i] < 0) continue;
    json_t *arr = json_object_get(j, fields[i]);
    if (!arr) {
      arr = json_array();
      json_object_set_new(j, fields[i], arr);
    }
    json_array_append_new(arr, json_real(v[i]));
  }
  return 0;
}

/* Replaces each array of numbers in the breakdown by its median. */
static void bd_medians(json_t *out) {
  const char *name;
  json_t *j;
  json_object_foreach(out, name, j) {
    const char *field;
    json_t *arr;
    json_object_foreach(j, field, arr) {
      double v[MAX_ROUNDS];
      int n = 0;
      size_t i;
      json_t *x;
      json_array_foreach(arr, i, x) if (n < MAX_ROUNDS) v[n++] = json_real_value(x);
      json_object_set_new(j, field, json_real(bu_median(v, n)));
    }
  }
}

/* Where the time of a transactional read and write goes. After the rounds,
 * --rounds passes alternate between (a) the database: txn read, one
 * timestamp, an empty transaction, begin + set + abort, txn write; and (b)
 * with the database closed, its LevelDB opened directly: the LevelDB work the
 * store does for one read (a Get of the meta record) and for one single-cell
 * one-phase commit (a Get, then one WriteBatch of the commit record and the
 * new meta record, both carrying the value, made with the library's
 * encoders). Each side is reopened for every pass, so both start with an
 * empty memtable. Then the raw store: get, put, get + put. Medians over passes. */
static int breakdown(bench_t *b, json_t *doc) {
  json_t *out = json_object();
  json_object_set_new(doc, "breakdown", out);
  static const enum phase on_db[] = {PH_TXN_READ, PH_TS, PH_TXN_EMPTY, PH_TXN_SET_ABORT,
                                     PH_TXN_WRITE};
  static const enum phase on_store[] = {PH_STORE_1PC, PH_STORE_1PC_ONCE, PH_STORE_1PC_NOHIST,
                                        PH_STORE_1PC_NOREAD, PH_STORE_1PC_NOREAD_ONCE};
  static const enum phase on_raw[] = {PH_RAW_GET, PH_RAW_PUT, PH_RAW_GET_PUT};
  char store[4300];
  snprintf(store, sizeof store, "%s/store", b->pc_dir);
  pc_db_close(b->db);
  b->db = NULL;
  result_t warm;
  uint64_t wops = b->p.read_ops / 10 ? b->p.read_ops / 10 : 1;
  for (int pass = 0; pass < b->p.rounds; pass++) {
    for (int side = 0; side < 2; side++) {
      if ((side == 0) == (pass % 2 == 0)) {
        if (!(b->db = open_pc(b, b->p.sync, 0))) return -1;
        if (run_phase(b, PH_TXN_READ, wops, b->p.seed + 9000, &warm) != 0) return -1;
        for (size_t i = 0; i < sizeof on_db / sizeof *on_db; i++)
          if (bd_phase(b, on_db[i], out) != 0) return -1;
        pc_db_close(b->db);
        b->db = NULL;
      } else {
        if (bu_ldb_open(&b->pcstore_l, store, "fig8") != 0) return -1;
        b->pcstore = b->pcstore_l.db;
        if (run_phase(b, PH_STORE_GET_META, wops, b->p.seed + 9000, &warm) != 0) return -1;
        if (bd_phase(b, PH_STORE_GET_META, out) != 0) return -1;
        const size_t nstore = sizeof on_store / sizeof *on_store;
        for (size_t i = 0; i < nstore; i++) /* the write variants in rotated order */
          if (bd_phase(b, on_store[(i + (size_t)pass) % nstore], out) != 0) return -1;
        bu_ldb_close(&b->pcstore_l);
        b->pcstore = NULL;
      }
    }
    for (size_t i = 0; i < sizeof on_raw / sizeof *on_raw; i++)
      if (bd_phase(b, on_raw[i], out) != 0) return -1;
  }
  bd_medians(out);
  return 0;
}

/* ---- main --------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_fig8 [options]\n"
          "  --ops N          operations per phase and round (default 200000)\n"
          "  --read-ops N     operations per read phase (default: --ops; reads never sync)\n"
          "  --warmup-writes N  untimed writes on each side before the write rounds\n"
          "                   (default: the smaller of --keys and --ops; 0: none)\n"
          "  --keys N         preloaded key space (default 100000)\n"
          "  --value-size B   value bytes (default 100; 1..%u)\n"
          "  --sync 0|1       fsync every write on both sides (default 0)\n"
          "  --threads T      threads on both sides (default 1)\n"
          "  --rounds R       rounds of the four phases, alternating order (default 3)\n"
          "  --slice N        read rounds alternate raw and txn slices of N reads, so\n"
          "                   the machine's drift lands on both sides (default 5000;\n"
          "                   0: one whole phase after the other, like the writes)\n"
          "  --dir D          parent of the temporary directory (default /tmp)\n"
          "  --compact 0|1    compact both stores after preloading (default 1)\n"
          "  --only PHASE     run only raw_get, txn_read, raw_put or txn_write (profiling)\n"
          "  --breakdown 0|1  afterwards, time the parts of a txn read and write (default 1)\n"
          "  --seed S         random seed (default 42)\n"
          "  --keep           keep the temporary directory\n"
          "Prints one JSON document on stdout.\n",
          PC_MAX_VALUE);
}

static int parse_args(int argc, char **argv, params_t *p) {
  static const struct option longopts[] = {
      {"ops", required_argument, NULL, 'o'},    {"keys", required_argument, NULL, 'k'},
      {"value-size", required_argument, NULL, 'v'}, {"sync", required_argument, NULL, 's'},
      {"threads", required_argument, NULL, 't'}, {"rounds", required_argument, NULL, 'r'},
      {"dir", required_argument, NULL, 'd'},    {"compact", required_argument, NULL, 'c'},
      {"only", required_argument, NULL, 'O'},   {"seed", required_argument, NULL, 'S'},
      {"keep", no_argument, NULL, 'K'},         {"help", no_argument, NULL, 'h'},
      {"breakdown", required_argument, NULL, 'B'}, {"read-ops", required_argument, NULL, 'R'},
      {"warmup-writes", required_argument, NULL, 'W'}, {"slice", required_argument, NULL, 'L'},
      {NULL, 0, NULL, 0}};
  *p = (params_t){200000, 0, 100000, 100, 0, 1, 3, 1, 0, 42, "/tmp", -1, 1, 0, 0, 5000};
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    const char *bad = NULL;
    switch (c) {
      case 'o': if (bu_parse_u64(optarg, 1, UINT64_MAX, &p->ops)) bad = "--ops"; break;
      case 'R': if (bu_parse_u64(optarg, 1, UINT64_MAX, &p->read_ops)) bad = "--read-ops"; break;
      case 'W':
        if (bu_parse_u64(optarg, 0, UINT64_MAX, &p->warmup_writes)) bad = "--warmup-writes";
        else p->warmup_set = 1;
        break;
      case 'k': if (bu_parse_u64(optarg, 1, 9999999999ull, &p->keys)) bad = "--keys"; break;
      case 'L': if (bu_parse_u64(optarg, 0, UINT64_MAX, &p->slice)) bad = "--slice"; break;
      case 'v':
        if (bu_parse_u64(optarg, 1, PC_MAX_VALUE, &v)) bad = "--value-size";
        else p->value_size = (size_t)v;
        break;
      case 's':
        if (bu_parse_u64(optarg, 0, 1, &v)) bad = "--sync";
        else p->sync = (int)v;
        break;
      case 't':
        if (bu_parse_u64(optarg, 1, MAX_THREADS, &v)) bad = "--threads";
        else p->threads = (int)v;
        break;
      case 'r':
        if (bu_parse_u64(optarg, 1, MAX_ROUNDS, &v)) bad = "--rounds";
        else p->rounds = (int)v;
        break;
      case 'c':
        if (bu_parse_u64(optarg, 0, 1, &v)) bad = "--compact";
        else p->compact = (int)v;
        break;
      case 'd': p->parent = optarg; break;
      case 'S': if (bu_parse_u64(optarg, 0, UINT64_MAX, &p->seed)) bad = "--seed"; break;
      case 'K': p->keep = 1; break;
      case 'B':
        if (bu_parse_u64(optarg, 0, 1, &v)) bad = "--breakdown";
        else p->breakdown = (int)v;
        break;
      case 'O':
        if ((p->only = bu_choice(optarg, phase_name, PH_COUNT)) < 0) bad = "--only";
        break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) return bu_bad_value("pc_bench_fig8", bad, optarg);
  }
  return bu_no_operands("pc_bench_fig8", argc, argv, optind);
}

int main(int argc, char **argv) {
  bench_t b;
  memset(&b, 0, sizeof b);
  if (parse_args(argc, argv, &b.p) != 0) return 2;
  if (b.p.read_ops == 0) b.p.read_ops = b.p.ops;
  if (!b.p.warmup_set) b.p.warmup_writes = b.p.keys < b.p.ops ? b.p.keys : b.p.ops;

  json_t *doc = json_object();
  json_t *par = json_object();
  bu_json_head(doc, "fig8");
  json_object_set_new(par, "ops", json_integer((json_int_t)b.p.ops));
  json_object_set_new(par, "read_ops", json_integer((json_int_t)b.p.read_ops));
  json_object_set_new(par, "warmup_writes", json_integer((json_int_t)b.p.warmup_writes));
  json_object_set_new(par, "keys", json_integer((json_int_t)b.p.keys));
  json_object_set_new(par, "value_size", json_integer((json_int_t)b.p.value_size));
  json_object_set_new(par, "sync", json_integer(b.p.sync));
  json_object_set_new(par, "threads", json_integer(b.p.threads));
  json_object_set_new(par, "rounds", json_integer(b.p.rounds));
  json_object_set_new(par, "read_slice", json_integer((json_int_t)b.p.slice));
  json_object_set_new(par, "compact", json_integer(b.p.compact));
  json_object_set_new(par, "seed", json_integer((json_int_t)b.p.seed));
  json_object_set_new(par, "breakdown", json_integer(b.p.breakdown));
  json_object_set_new(par, "only", b.p.only >= 0 ? json_string(phase_name[b.p.only]) : json_null());
  json_object_set_new(doc, "params", par);
  json_t *setup_info = json_object();
  json_object_set_new(doc, "setup", setup_info);

  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());

  int rc = 0;
  if (setup(&b, setup_info) != 0) {
    rc = 1;
    goto out;
  }

  /* Warm-up (not reported): a round's worth of reads on each side faults in
   * the stores' pages and fills the caches. A shorter warm-up leaves the
   * first read round low: the transactional side touches more cold pages. */
  result_t warm;
  uint64_t wops = b.p.read_ops;
  if (b.p.only < 0 || b.p.only == PH_RAW_GET || b.p.only == PH_TXN_READ) {
    if (run_phase(&b, PH_RAW_GET, wops, b.p.seed + 1000, &warm) != 0 ||
        run_phase(&b, PH_TXN_READ, wops, b.p.seed + 2000, &warm) != 0) {
      rc = 1;
      goto out;
    }
  }

  double ops_s[PH_COUNT][MAX_ROUNDS], cpu[PH_COUNT][MAX_ROUNDS], settled[PH_COUNT][MAX_ROUNDS];
  double ratio[2][MAX_ROUNDS], ratio_settled[MAX_ROUNDS];
  uint64_t conflicts = 0;
  /* Reads first, on the freshly compacted stores (one version per key), then
   * writes; within each kind, rounds alternate which side goes first. */
  static const enum phase pairs[2][2] = {{PH_RAW_GET, PH_TXN_READ}, {PH_RAW_PUT, PH_TXN_WRITE}};
  static const char *const kind_name[2] = {"read_rounds", "write_rounds"};
  for (int kind = 0; kind < 2 && rc == 0; kind++) {
    json_t *rounds = json_array();
    json_object_set_new(doc, kind_name[kind], rounds);
    /* Warm-up of the writes (not reported): --warmup-writes on each side, so
     * that the rounds measure a running store — its meta cache filled, both
     * LevelDBs past their first flushes — rather than the first touches. */
    if (kind == 1 && b.p.warmup_writes && b.p.only < 0) {
      if (run_phase(&b, PH_RAW_PUT, b.p.warmup_writes, b.p.seed + 3000, &warm) != 0 ||
          run_phase(&b, PH_TXN_WRITE, b.p.warmup_writes, b.p.seed + 4000, &warm) != 0) {
        rc = 1;
        break;
      }
    }
    for (int r = 0; r < b.p.rounds && rc == 0; r++) {
      int txn_first = r % 2;
      json_t *jr = json_object();
      int ran = 0;
      if (kind == 0 && b.p.slice && b.p.only < 0) {
        result_t res[2];
        double quiet = wait_quiet();
        if (run_interleaved(&b, read_side, b.p.read_ops, b.p.slice, b.p.seed + (uint64_t)r * 10 + 1, res) != 0) {
          rc = 1;
          break;
        }
        json_object_set_new(jr, "order", json_string("interleaved slices"));
        for (int side = 0; side < 2; side++) {
          enum phase ph = read_side[side];
          ops_s[ph][r] = res[side].ops_s;
          cpu[ph][r] = res[side].cpu_us_per_op;
          json_t *jp = json_object();
          json_object_set_new(jp, "ops_s", json_real(res[side].ops_s));
          json_object_set_new(jp, "seconds", json_real(res[side].seconds));
          json_object_set_new(jp, "cpu_us_per_op", json_real(res[side].cpu_us_per_op));
          json_object_set_new(jp, "waited_for_quiet_before_s", json_real(quiet));
          json_object_set_new(jp, "others_cores", json_real(res[side].others_cores));
          json_object_set_new(jp, "steal_cores", json_real(res[side].steal_cores));
          json_object_set_new(jr, phase_name[ph], jp);
        }
        ran = 2;
      } else {
        json_object_set_new(jr, "order", json_string(txn_first ? "txn first" : "raw first"));
      }
      for (int j = 0; j < 2 && rc == 0 && ran < 2; j++) {
        enum phase ph = pairs[kind][txn_first ? 1 - j : j];
        if (b.p.only >= 0 && (int)ph != b.p.only) continue;
        result_t res;
        double quiet = wait_quiet();
        uint64_t ops = kind == 0 ? b.p.read_ops : b.p.ops;
        if (run_phase(&b, ph, ops, b.p.seed + (uint64_t)r * 10 + 1, &res) != 0) {
          rc = 1;
          break;
        }
        ran++;
        ops_s[ph][r] = res.ops_s;
        cpu[ph][r] = res.cpu_us_per_op;
        conflicts += res.conflicts;
        json_t *jp = json_object();
        json_object_set_new(jp, "ops_s", json_real(res.ops_s));
        json_object_set_new(jp, "seconds", json_real(res.seconds));
        json_object_set_new(jp, "cpu_us_per_op", json_real(res.cpu_us_per_op));
        json_object_set_new(jp, "waited_for_quiet_before_s", json_real(quiet));
        json_object_set_new(jp, "others_cores", json_real(res.others_cores));
        json_object_set_new(jp, "steal_cores", json_real(res.steal_cores));
        if (kind == 1) {
          /* The background work (memtable flushes, compactions) the phase left behind. */
          double c0 = bu_cpu_s(NULL);
          double drain = wait_quiet();
          double dcpu = bu_cpu_s(NULL) - c0;
          settled[ph][r] = (double)res.ops / (res.seconds + drain);
          json_object_set_new(jp, "drain_s", json_real(drain));
          json_object_set_new(jp, "drain_cpu_us_per_op",
                              json_real(res.ops ? dcpu * 1e6 / (double)res.ops : 0));
          json_object_set_new(jp, "ops_s_settled", json_real(settled[ph][r]));
        }
        if (ph == PH_TXN_WRITE)
          json_object_set_new(jp, "conflicts", json_integer((json_int_t)res.conflicts));
        json_object_set_new(jr, phase_name[ph], jp);
      }
      if (ran == 2) {
        ratio[kind][r] = ops_s[pairs[kind][1]][r] / ops_s[pairs[kind][0]][r];
        json_object_set_new(jr, "ratio", json_real(ratio[kind][r]));
        if (kind == 1) {
          ratio_settled[r] = settled[PH_TXN_WRITE][r] / settled[PH_RAW_PUT][r];
          json_object_set_new(jr, "ratio_settled", json_real(ratio_settled[r]));
        }
      }
      json_array_append_new(rounds, jr);
    }
  }
  if (rc != 0) goto out;

  json_t *med = json_object();
  for (int ph = 0; ph < PH_COUNT; ph++) {
    if (b.p.only >= 0 && ph != b.p.only) continue;
    char name[64];
    snprintf(name, sizeof name, "%s_ops_s", phase_name[ph]);
    json_object_set_new(med, name, json_real(bu_median(ops_s[ph], b.p.rounds)));
    if (ph == PH_RAW_PUT || ph == PH_TXN_WRITE) {
      snprintf(name, sizeof name, "%s_ops_s_settled", phase_name[ph]);
      json_object_set_new(med, name, json_real(bu_median(settled[ph], b.p.rounds)));
    }
    snprintf(name, sizeof name, "%s_cpu_us_per_op", phase_name[ph]);
    json_object_set_new(med, name, json_real(bu_median(cpu[ph], b.p.rounds)));
  }
  json_object_set_new(doc, "median", med);
  json_object_set_new(doc, "txn_write_conflicts", json_integer((json_int_t)conflicts));
  if (b.p.only < 0) {
    double r_ratio = bu_median(ratio[0], b.p.rounds), w_ratio = bu_median(ratio[1], b.p.rounds);
    json_object_set_new(doc, "read_ratio", json_real(r_ratio));
    json_object_set_new(doc, "write_ratio", json_real(w_ratio));
    json_object_set_new(doc, "write_ratio_settled", json_real(bu_median(ratio_settled, b.p.rounds)));
    json_t *paper = json_object();
    json_object_set_new(paper, "read_ratio", json_real(0.94));
    json_object_set_new(paper, "write_ratio", json_real(0.23));
    json_object_set_new(doc, "paper", paper);
    json_t *goal = json_object();
    json_object_set_new(goal, "read_ratio", json_real(0.9));
    json_object_set_new(goal, "write_ratio", json_real(0.5));
    json_object_set_new(goal, "read_met", json_boolean(r_ratio >= 0.9));
    json_object_set_new(goal, "write_met", json_boolean(w_ratio >= 0.5));
    json_object_set_new(doc, "goal", goal);
  }
  json_t *end = json_object();
  json_object_set_new(end, "bytes_txn", json_integer((json_int_t)disk_bytes(b.pc_dir)));
  json_object_set_new(end, "bytes_raw", json_integer((json_int_t)disk_bytes(b.raw_dir)));
  json_object_set_new(doc, "final_disk", end);
  if (b.p.breakdown && b.p.only < 0 && breakdown(&b, doc) != 0) rc = 1;

out:
  teardown(&b);
  return bu_json_finish(doc, rc);
}
