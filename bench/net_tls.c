/* net_tls.c — what TLS costs: transaction throughput through a tablet server
 * with every link on TLS against the same links in clear, in one run.
 *
 * One oracle and one tablet (a local store owning every row, its one-phase
 * commit_ts from the in-process oracle, as `percolator run` serves them),
 * each served twice, on a plain port and on a TLS port of its own (mutual
 * authentication with EC P-256 certificates made at run time by
 * tests/certs.sh, TLS 1.3, AES-GCM). Two clients, each a database opened
 * with pc_db_open_config on a configuration naming one set of ports: the
 * plain one, and the TLS one with a client certificate. So both read and
 * write the same rows of the same store; only the links differ.
 *
 *   transaction = pc_txn_begin (a start timestamp from the oracle, through
 *                 the process's batcher) + pc_txn_get of a random preloaded
 *                 row + pc_txn_set of it + pc_txn_commit (one-phase: one
 *                 ONE_PHASE request) — three round trips; a PC_CONFLICT is
 *                 counted and the transaction is not retried
 *
 * For each thread count, --rounds rounds each run a plain and a TLS phase
 * of --seconds (plain first in even rounds, TLS first in odd ones).
 * Figures are medians over rounds; tls_ratio is the median of the
 * per-round ratios TLS/plain and tls_cost = 1 - tls_ratio (the goal: under
 * 0.15 at 8 threads). Every phase also reports the process's CPU per
 * transaction (servers and clients share this process), the CPU other
 * processes used meanwhile (others_cores: machine noise), and the frames
 * and bytes per transaction the servers received and sent.
 *
 * The ceiling: what encrypting and decrypting those bytes alone costs, as
 * TLS 1.3 records of AES-256-GCM (the suite the links negotiate), one
 * record per frame (an upper bound: frames queued together share a
 * record), timed here on one thread with OpenSSL's EVP interface:
 * record_crypto_us_per_txn, and ceiling_ratio = plain CPU per transaction
 * / (that + record_crypto_us_per_txn), the TLS/plain ratio of a CPU-bound
 * run if TLS added nothing but the records' cryptography.
 * Output: one JSON document on stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <percolator/percolator.h>

#include "benchutil.h"
#include "base/error.h"
#include "core/store.h"
#include "net/rpc.h"
#include "net/tls.h"
#include "tablet/tablet.h"
#include "tso/oracle.h"
#include "tso/tso_server.h"

#define WHO "net_tls"
#define TABLE "bench"
#define COLUMN "f:v"
#define MAX_THREADS 256
#define MAX_COUNTS 8

typedef struct params {
  double seconds;
  uint64_t keys, value_size, seed;
  int threads[MAX_COUNTS], nthreads, rounds;
  const char *parent;
} params_t;

typedef struct bench {
  params_t p;
  char dir[4096];
  pc_oracle_t *oracle;
  pc_tablet_t *tablet;
  pc_tls_t *tls;
  pc_rpc_server_t *srv[2][2]; /* [plain, tls][tso, tablet] */
  pc_db_t *db[2];             /* plain, tls */
  char *value;
} bench_t;

typedef struct worker {
  pthread_t tid;
  bench_t *b;
  pc_db_t *db;
  bu_gate_t *gate;
  atomic_int *stop;
  uint64_t seed, ok, conflicts, failed;
  char failure[PC_ERROR_TEXT];
} worker_t;

static pc_status_t ts_from_oracle(void *ctx, uint64_t *ts, pc_error_t *err) {
  return pc_oracle_next(ctx, 1, ts, err);
}

static void *run_worker(void *arg) {
  worker_t *w = arg;
  bench_t *b = w->b;
  char key[BU_KEY_LEN];
  bu_gate_wait(w->gate);
  while (!atomic_load(w->stop)) {
    bu_make_key(key, bu_splitmix64(&w->seed) % b->p.keys);
    pc_error_t e;
    pc_txn_t *t = pc_txn_begin(w->db, &e);
    pc_status_t st = t ? PC_OK : e.code;
    char *v = NULL;
    size_t vl = 0;
    if (st == PC_OK) st = pc_txn_get(t, TABLE, key, BU_KEY_LEN, COLUMN, 3, &v, &vl, &e);
    pc_free(v);
    if (st == PC_OK || st == PC_NOT_FOUND)
      st = pc_txn_set(t, TABLE, key, BU_KEY_LEN, COLUMN, 3, b->value, b->p.value_size, &e);
    if (st == PC_OK) st = pc_txn_commit(t, &e);
    pc_txn_destroy(t);
    if (st == PC_OK) {
      w->ok++;
    } else if (st == PC_CONFLICT) {
      w->conflicts++;
    } else {
      w->failed++;
      snprintf(w->failure, sizeof w->failure, "%s", e.text);
    }
  }
  return NULL;
}

/* Requests and bytes in and out of the servers of links k. */
static void traffic(const bench_t *b, int k, uint64_t *requests, uint64_t *bytes) {
  *requests = *bytes = 0;
  for (int r = 0; r < 2; r++) {
    pc_rpc_server_stats_t st;
    pc_rpc_server_stats(b->srv[k][r], &st);
    *requests += st.requests;
    *bytes += st.bytes_in + st.bytes_out;
  }
}

/* One phase on links k with n threads: transactions per second into out. */
static int phase(bench_t *b, int k, int n, uint64_t seed, json_t *out) {
  pc_db_t *db = b->db[k];
  uint64_t req0, bytes0, req1, bytes1;
  traffic(b, k, &req0, &bytes0);
  static worker_t w[MAX_THREADS];
  bu_gate_t gate;
  atomic_int stop = 0;
  bu_gate_init(&gate);
  for (int i = 0; i < n; i++)
    w[i] = (worker_t){.b = b, .db = db, .gate = &gate, .stop = &stop, .seed = seed + (uint64_t)i};
  int started = bu_start_threads(w, n, sizeof w[0], offsetof(worker_t, tid), run_worker);
  bu_meter_t m0, d;
  bu_meter_start(&m0);
  bu_gate_open(&gate);
  bu_sleep_s(b->p.seconds);
  atomic_store(&stop, 1);
  bu_join_threads(w, started, sizeof w[0], offsetof(worker_t, tid));
  bu_meter_read(&m0, &d);
  traffic(b, k, &req1, &bytes1);
  bu_gate_destroy(&gate);
  uint64_t ok = 0, conflicts = 0, failed = 0;
  for (int i = 0; i < started; i++) {
    ok += w[i].ok;
    conflicts += w[i].conflicts;
    failed += w[i].failed;
    if (w[i].failed) fprintf(stderr, WHO ": a transaction failed: %s\n", w[i].failure);
  }
  double secs = (double)d.t_ns * 1e-9;
  json_object_set_new(out, "txn_per_s", json_real((double)ok / secs));
  json_object_set_new(out, "conflicts", json_integer((json_int_t)conflicts));
  json_object_set_new(out, "failed", json_integer((json_int_t)failed));
  json_object_set_new(out, "cpu_us_per_txn", json_real(bu_per(d.cpu_s * 1e6, ok)));
  json_object_set_new(out, "others_cores",
                      json_real(bu_others_cores(d.busy_s, d.cpu_s, secs)));
  /* a request and its reply: two frames */
  json_object_set_new(out, "frames_per_txn", json_real(bu_per(2.0 * (double)(req1 - req0), ok)));
  json_object_set_new(out, "bytes_per_txn", json_real(bu_per((double)(bytes1 - bytes0), ok)));
  return started == n && failed == 0 ? 0 : -1;
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU microseconds to seal and open one TLS 1.3 record of AES-256-GCM
 * holding len bytes of a frame (plus its content-type byte, the 5-byte
 * record header as associated data, a 16-byte tag), or -1. */
static double record_crypto_us(size_t len) {
  enum { ROUNDS = 20000 };
  unsigned char key[32], iv[12], aad[5] = {23, 3, 3, 0, 0}, tag[16];
  size_t n = len + 1;
  unsigned char *plain = calloc(1, n), *sealed = malloc(n), *opened = malloc(n);
  EVP_CIPHER_CTX *enc = EVP_CIPHER_CTX_new(), *dec = EVP_CIPHER_CTX_new();
  double us = -1;
  int ok = plain && sealed && opened && enc && dec && RAND_bytes(key, sizeof key) == 1 &&
           RAND_bytes(iv, sizeof iv) == 1 &&
           EVP_EncryptInit_ex(enc, EVP_aes_256_gcm(), NULL, key, NULL) == 1 &&
           EVP_DecryptInit_ex(dec, EVP_aes_256_gcm(), NULL, key, NULL) == 1;
  aad[3] = (unsigned char)((n + 16) >> 8);
  aad[4] = (unsigned char)(n + 16);
  double t0 = thread_cpu_s();
  for (int i = 0; ok && i < ROUNDS; i++) {
    int l = 0, f = 0;
    iv[11] = (unsigned char)i; /* a record's nonce: the sequence number into the IV */
    ok = EVP_EncryptInit_ex(enc, NULL, NULL, NULL, iv) == 1 &&
         EVP_EncryptUpdate(enc, NULL, &l, aad, sizeof aad) == 1 &&
         EVP_EncryptUpdate(enc, sealed, &l, plain, (int)n) == 1 &&
         EVP_EncryptFinal_ex(enc, sealed + l, &f) == 1 &&
         EVP_CIPHER_CTX_ctrl(enc, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1 &&
         EVP_DecryptInit_ex(dec, NULL, NULL, NULL, iv) == 1 &&
         EVP_DecryptUpdate(dec, NULL, &l, aad, sizeof aad) == 1 &&
         EVP_DecryptUpdate(dec, opened, &l, sealed, (int)n) == 1 &&
         EVP_CIPHER_CTX_ctrl(dec, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1 &&
         EVP_DecryptFinal_ex(dec, opened + l, &f) == 1;
  }
  if (ok) us = (thread_cpu_s() - t0) * 1e6 / ROUNDS;
  EVP_CIPHER_CTX_free(enc);
  EVP_CIPHER_CTX_free(dec);
  free(plain);
  free(sealed);
  free(opened);
  return us;
}

/* ---- setup ------------------------------------------------------------------- */

static pc_rpc_server_t *serve(const char *name, pc_rpc_handler_fn fn, void *ctx,
                              int (*runs_inline)(uint8_t op), const pc_rpc_auth_t *auth) {
  pc_rpc_server_options_t o = {0};
  o.name = name;
  o.host = "127.0.0.1";
  o.auth = auth;
  o.runs_inline = runs_inline;
  o.workers = 4;
  pc_error_t e;
  pc_rpc_server_t *s = pc_rpc_server_start(&o, fn, ctx, &e);
  if (!s) fprintf(stderr, WHO ": %s server: %s\n", name, e.text);
  return s;
}

static pc_db_t *client(bench_t *b, int tls) {
  char path[4300];
  snprintf(path, sizeof path, "%s/client-%s.json", b->dir, tls ? "tls" : "plain");
  FILE *f = fopen(path, "w");
  if (!f) return NULL;
  fprintf(f, "{\"data_dir\": \"%s\", \"log\": {\"level\": \"warn\"},\n", b->dir);
  if (tls)
    fprintf(f,
            " \"tls\": {\"ca_file\": \"%s/ca.pem\", \"cert_file\": \"%s/app.pem\", "
            "\"key_file\": \"%s/app.key\", \"system_cn\": [\"node\"]},\n",
            b->dir, b->dir, b->dir);
  fprintf(f,
          " \"store\": {\"sync\": false}, \"tso\": {\"listen\": \"127.0.0.1:%u\"},\n"
          " \"tablets\": [{\"name\": \"t1\", \"listen\": \"127.0.0.1:%u\"}]}\n",
          (unsigned)pc_rpc_server_port(b->srv[tls][0]),
          (unsigned)pc_rpc_server_port(b->srv[tls][1]));
  if (fclose(f) != 0) return NULL;
  pc_error_t e;
  pc_db_t *db = pc_db_open_config(path, &e);
  if (!db) fprintf(stderr, WHO ": %s: %s\n", path, e.text);
  return db;
}

static int setup(bench_t *b) {
  pc_error_t e;
  if (bu_make_temp_dir(b->dir, sizeof b->dir, b->p.parent, "net-tls", WHO) != 0) return -1;
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "bash '%s/tests/certs.sh' '%s' node:server app", PC_SOURCE_DIR, b->dir);
  if (system(cmd) != 0) {
    fprintf(stderr, WHO ": making certificates with tests/certs.sh failed\n");
    return -1;
  }
  char ca[4300], cert[4300], key[4300], path[4300];
  snprintf(ca, sizeof ca, "%s/ca.pem", b->dir);
  snprintf(cert, sizeof cert, "%s/node.pem", b->dir);
  snprintf(key, sizeof key, "%s/node.key", b->dir);
  pc_tls_options_t to = {ca, cert, key, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, 0};
  if (!(b->tls = pc_tls_create(&to, &e))) {
    fprintf(stderr, WHO ": %s\n", e.text);
    return -1;
  }
  snprintf(path, sizeof path, "%s/oracle", b->dir);
  if (!(b->oracle = pc_oracle_open(path, 0, &e))) {
    fprintf(stderr, WHO ": oracle: %s\n", e.text);
    return -1;
  }
  snprintf(path, sizeof path, "%s/store", b->dir);
  pc_local_options_t lo = {1, 0, 32u << 20, 32u << 20, 0, 0};
  pc_store_t *s = pc_local_store_open(path, &lo, &e);
  if (!s) {
    fprintf(stderr, WHO ": store: %s\n", e.text);
    return -1;
  }
  pc_row_range_t all = {"", 0, "", 0};
  if (!(b->tablet = pc_tablet_create("t1", s, &all, ts_from_oracle, b->oracle))) {
    s->ops->close(s);
    return -1;
  }
  pc_rpc_auth_t plain = {0}, tls = {.tls = b->tls};
  const pc_rpc_auth_t *auth[2] = {&plain, &tls};
  for (int k = 0; k < 2; k++) {
    b->srv[k][0] = serve("tso", pc_tso_rpc_handler, b->oracle, pc_tso_rpc_runs_inline, auth[k]);
    b->srv[k][1] = serve("tablet", pc_tablet_rpc_handler, b->tablet, NULL, auth[k]);
    if (!b->srv[k][0] || !b->srv[k][1]) return -1;
  }
  for (int k = 0; k < 2; k++)
    if (!(b->db[k] = client(b, k))) return -1;
  /* the rows, written through the plain client in transactions of 1000 */
  if (!(b->value = bu_random_bytes(b->p.value_size, b->p.seed))) return -1;
  char rkey[BU_KEY_LEN];
  for (uint64_t i = 0; i < b->p.keys;) {
    pc_txn_t *t = pc_txn_begin(b->db[0], &e);
    pc_status_t st = t ? PC_OK : e.code;
    for (uint64_t n = 0; n < 1000 && i < b->p.keys && st == PC_OK; n++, i++) {
      bu_make_key(rkey, i);
      st = pc_txn_set(t, TABLE, rkey, BU_KEY_LEN, COLUMN, 3, b->value, b->p.value_size, &e);
    }
    if (st == PC_OK) st = pc_txn_commit(t, &e);
    pc_txn_destroy(t);
    if (st != PC_OK) {
      fprintf(stderr, WHO ": preload: %s\n", e.text);
      return -1;
    }
  }
  return 0;
}

static void teardown(bench_t *b) {
  for (int k = 0; k < 2; k++)
    if (b->db[k]) pc_db_close(b->db[k]);
  for (int k = 0; k < 2; k++)
    for (int r = 0; r < 2; r++)
      if (b->srv[k][r]) pc_rpc_server_stop(b->srv[k][r]);
  if (b->tablet) pc_tablet_destroy(b->tablet);
  if (b->oracle) pc_oracle_close(b->oracle);
  pc_tls_unref(b->tls);
  if (b->dir[0]) bu_remove_tree(b->dir);
  free(b->value);
}

/* ---- command line -------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_net_tls [options]\n"
          "  --threads LIST    client thread counts (default 1,8; each 1..%d)\n"
          "  --seconds S       seconds per phase (default 2)\n"
          "  --rounds N        rounds per thread count (default 5)\n"
          "  --keys N          preloaded rows (default 100000)\n"
          "  --value-size N    bytes per value (default 100)\n"
          "  --seed N          (default 42)\n"
          "  --dir D           parent of the temporary directory (default /tmp)\n"
          "Prints one JSON document on stdout.\n",
          MAX_THREADS);
}

static int parse_args(int argc, char **argv, params_t *p) {
  static const struct option longopts[] = {
      {"threads", required_argument, NULL, 't'}, {"seconds", required_argument, NULL, 'S'},
      {"rounds", required_argument, NULL, 'r'},  {"keys", required_argument, NULL, 'k'},
      {"value-size", required_argument, NULL, 'v'}, {"seed", required_argument, NULL, 'e'},
      {"dir", required_argument, NULL, 'd'},     {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *p = (params_t){.seconds = 2.0, .keys = 100000, .value_size = 100, .threads = {1, 8},
                  .nthreads = 2, .rounds = 5, .seed = 42, .parent = "/tmp"};
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
      case 't':
        if (bu_parse_int_list(optarg, MAX_THREADS, p->threads, MAX_COUNTS, &p->nthreads) != 0)
          return bu_bad_value(WHO, "--threads", optarg);
        break;
      case 'S':
        if (bu_parse_double(optarg, 0, 1, 3600, &p->seconds) != 0)
          return bu_bad_value(WHO, "--seconds", optarg);
        break;
      case 'r':
        if (bu_parse_u64(optarg, 1, BU_MAX_ROUNDS, &v) != 0)
          return bu_bad_value(WHO, "--rounds", optarg);
        p->rounds = (int)v;
        break;
      case 'k':
        if (bu_parse_u64(optarg, 1, 100000000, &p->keys) != 0)
          return bu_bad_value(WHO, "--keys", optarg);
        break;
      case 'v':
        if (bu_parse_u64(optarg, 1, 1u << 20, &p->value_size) != 0)
          return bu_bad_value(WHO, "--value-size", optarg);
        break;
      case 'e':
        if (bu_parse_u64(optarg, 0, UINT64_MAX, &p->seed) != 0)
          return bu_bad_value(WHO, "--seed", optarg);
        break;
      case 'd': p->parent = optarg; break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
  }
  return bu_no_operands(WHO, argc, argv, optind);
}

int main(int argc, char **argv) {
  static bench_t b;
  if (parse_args(argc, argv, &b.p) != 0) return 2;
  json_t *doc = json_object();
  bu_json_head(doc, "net_tls");
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  json_t *params = json_object();
  json_object_set_new(params, "threads", bu_json_int_array(b.p.threads, b.p.nthreads));
  json_object_set_new(params, "seconds", json_real(b.p.seconds));
  json_object_set_new(params, "rounds", json_integer(b.p.rounds));
  json_object_set_new(params, "keys", json_integer((json_int_t)b.p.keys));
  json_object_set_new(params, "value_size", json_integer((json_int_t)b.p.value_size));
  json_object_set_new(doc, "params", params);
  int rc = setup(&b);
  json_t *results = json_array();
  for (int ti = 0; rc == 0 && ti < b.p.nthreads; ti++) {
    int n = b.p.threads[ti];
    double rate[2][BU_MAX_ROUNDS], ratio[BU_MAX_ROUNDS], cpu[BU_MAX_ROUNDS],
        frames[BU_MAX_ROUNDS], bytes[BU_MAX_ROUNDS];
    json_t *rounds = json_array();
    for (int r = 0; rc == 0 && r < b.p.rounds; r++) {
      json_t *ph[2] = {json_object(), json_object()};
      for (int j = 0; j < 2 && rc == 0; j++) {
        int k = (r % 2) ? 1 - j : j; /* plain first in even rounds */
        rc = phase(&b, k, n, b.p.seed + (uint64_t)(r * 1000 + k * 100), ph[k]);
        rate[k][r] = json_real_value(json_object_get(ph[k], "txn_per_s"));
      }
      ratio[r] = rate[0][r] > 0 ? rate[1][r] / rate[0][r] : 0;
      cpu[r] = json_real_value(json_object_get(ph[0], "cpu_us_per_txn"));
      frames[r] = json_real_value(json_object_get(ph[1], "frames_per_txn"));
      bytes[r] = json_real_value(json_object_get(ph[1], "bytes_per_txn"));
      json_t *ro = json_object();
      json_object_set_new(ro, "plain", ph[0]);
      json_object_set_new(ro, "tls", ph[1]);
      json_array_append_new(rounds, ro);
    }
    if (rc != 0) {
      json_decref(rounds);
      break;
    }
    json_t *res = json_object();
    json_object_set_new(res, "threads", json_integer(n));
    json_object_set_new(res, "plain_txn_per_s", json_real(bu_median(rate[0], b.p.rounds)));
    json_object_set_new(res, "tls_txn_per_s", json_real(bu_median(rate[1], b.p.rounds)));
    double med = bu_median(ratio, b.p.rounds);
    json_object_set_new(res, "tls_ratio", json_real(med));
    json_object_set_new(res, "tls_cost", json_real(1 - med));
    /* the ceiling, from the medians of the rounds */
    double nf = bu_median(frames, b.p.rounds), nb = bu_median(bytes, b.p.rounds);
    double per = nf > 0 ? record_crypto_us((size_t)(nb / nf + 0.5)) : -1;
    double crypto = per >= 0 ? nf * per : -1, plain_cpu = bu_median(cpu, b.p.rounds);
    json_object_set_new(res, "record_crypto_us_per_txn", json_real(crypto));
    json_object_set_new(res, "ceiling_ratio",
                        json_real(crypto >= 0 ? plain_cpu / (plain_cpu + crypto) : 0));
    json_object_set_new(res, "rounds", rounds);
    json_array_append_new(results, res);
  }
  json_object_set_new(doc, "results", results);
  teardown(&b);
  return bu_json_finish(doc, rc);
}
