/* net_tso.c — the timestamp oracle over loopback TCP.
 *
 * Starts, in this process, an rpc.h server on 127.0.0.1 (ephemeral port)
 * serving pc_tso_rpc_handler over a pc_oracle_t kept in a temporary
 * directory — exactly what `percolator tso` serves, without the process
 * boundary — and a client (pc_rpc_client + pc_ts_batcher over
 * pc_tso_remote_fetch), as a cluster client process has. For each thread
 * count of --threads (default 1,16,256) every thread takes one timestamp per
 * call in a loop for --seconds, from two sources, in the same run:
 *   network     the batcher over pc_tso_remote_fetch (one fetch in flight,
 *               each fetch a round trip asking for as many timestamps as
 *               there are waiting threads)
 *   in_process  the baseline: the same batcher over pc_oracle_fetch on an
 *               in-process oracle (the embedded database's path)
 * Rounds (--rounds) alternate which source goes first; the throughputs are
 * medians over rounds and ratio = network / in_process (median of per-round
 * ratios). Every call is timed (p50, p99, p99.9, max from a log-linear
 * histogram merged over rounds); every fetch is counted through a wrapper
 * of the fetch function, giving the round trips made and the average batch
 * (timestamps per fetch), and the process's CPU time and context switches
 * per timestamp and the CPU other processes used meanwhile (others_cores:
 * machine noise) are reported. Each thread checks that its timestamps
 * strictly increase. With --clients N the network side has N rpc clients,
 * each with its own batcher (as N client processes would), threads spread
 * over them.
 * Before that, the loopback floor: round trips of a plain blocking TCP
 * ping-pong between two threads, of rpc.h PING (answered on the server's I/O
 * thread) and of a one-timestamp fetch (through a handler thread), and the
 * server's capacity when each request asks for --server-batch timestamps
 * (one thread per client connection, no batcher: the paper's oracle was
 * measured so, its clients batching). The paper's oracle served about 2
 * million timestamps/s; our goal is >= 5 million/s delivered over the
 * network. Output: one JSON document on stdout.
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
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "base/error.h"
#include "net/rpc.h"
#include "tso/oracle.h"
#include "tso/tso_client.h"
#include "tso/tso_server.h"

#define MAX_THREADS 1024
#define MAX_COUNTS 16
#define MAX_ROUNDS BU_MAX_ROUNDS
#define CALL_TIMEOUT_MS 10000
#define HBUCKETS BU_HBUCKETS /* latency histograms: see benchutil.h */

enum source { SRC_NET, SRC_LOCAL, SRC_COUNT };
static const char *const source_name[SRC_COUNT] = {"network", "in_process"};

/* A fetch function that counts its calls and the timestamps asked for. */
typedef struct counted_fetch {
  pc_ts_fetch_fn fetch;
  void *ctx;
  atomic_uint_fast64_t calls, timestamps;
} counted_fetch_t;

#define MAX_CLIENTS 64

typedef struct shared {
  /* network: one rpc client and batcher per simulated client process; the
   * baseline has one batcher */
  int nclients;
  pc_rpc_client_t *rpc[MAX_CLIENTS];
  pc_ts_batcher_t *net[MAX_CLIENTS];
  pc_ts_batcher_t *local;
  counted_fetch_t net_counted[MAX_CLIENTS];
  counted_fetch_t local_counted;
  atomic_int stop;
  bu_gate_t *start;
} shared_t;

typedef struct worker {
  shared_t *sh;
  enum source src;
  int index;
  pthread_t tid;
  uint64_t ops;
  uint64_t *hist;
  int failed;
  char errtext[PC_ERROR_TEXT + 64];
} worker_t;

/* What one (source, thread count, round) measured. */
typedef struct result {
  double ts_s, seconds, cpu_us_per_ts, csw_per_ts, others_cores;
  uint64_t ops, fetches, fetched;
} result_t;

static pc_status_t counted_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                 pc_error_t *err) {
  counted_fetch_t *c = ctx;
  atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->timestamps, count, memory_order_relaxed);
  return c->fetch(c->ctx, count, timeout_ms, first, err);
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  shared_t *sh = w->sh;
  pc_ts_batcher_t *b = w->src == SRC_NET ? sh->net[w->index % sh->nclients] : sh->local;
  uint64_t last = 0, ts = 0;
  pc_error_t e;
  bu_gate_wait(sh->start);
  while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
    uint64_t t0 = bu_now_ns();
    if (pc_ts_batcher_get(b, CALL_TIMEOUT_MS, &ts, &e) != PC_OK) {
      w->failed = 1;
      snprintf(w->errtext, sizeof w->errtext, "%s: %s", source_name[w->src], e.text);
      break;
    }
    w->hist[bu_bucket_of(bu_now_ns() - t0)]++;
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

/* Runs src on n threads for seconds, adding each call's latency to hist. */
static int run(shared_t *sh, enum source src, int n, double seconds, uint64_t *hist,
               result_t *res) {
  worker_t *w = calloc((size_t)n, sizeof *w);
  uint64_t *h = calloc((size_t)n * HBUCKETS, sizeof *h);
  if (!w || !h) {
    fprintf(stderr, "net_tso: out of memory\n");
    free(w);
    free(h);
    return -1;
  }
  uint64_t calls0 = 0, ts0 = 0;
  for (int i = 0; i < (src == SRC_NET ? sh->nclients : 1); i++) {
    counted_fetch_t *cf = src == SRC_NET ? &sh->net_counted[i] : &sh->local_counted;
    calls0 += atomic_load(&cf->calls);
    ts0 += atomic_load(&cf->timestamps);
  }
  atomic_store(&sh->stop, 0);
  bu_gate_t gate;
  bu_gate_init(&gate);
  sh->start = &gate;
  int rc = 0;
  for (int i = 0; i < n; i++) {
    w[i].sh = sh;
    w[i].src = src;
    w[i].index = i;
    w[i].hist = h + (size_t)i * HBUCKETS;
  }
  int started = bu_start_threads(w, n, sizeof *w, offsetof(worker_t, tid), worker_main);
  if (started < n) {
    fprintf(stderr, "net_tso: pthread_create failed after %d threads\n", started);
    rc = -1;
  }
  bu_meter_t m0, d;
  bu_meter_start(&m0);
  if (rc == 0) {
    bu_gate_open(&gate);
    bu_sleep_s(seconds);
  }
  atomic_store(&sh->stop, 1);
  bu_gate_open(&gate); /* after a failure: the threads see stop at once */
  bu_join_threads(w, started, sizeof *w, offsetof(worker_t, tid));
  n = started;
  bu_meter_read(&m0, &d);
  double elapsed = (double)d.t_ns * 1e-9;
  bu_gate_destroy(&gate);
  sh->start = NULL;

  memset(res, 0, sizeof *res);
  for (int i = 0; i < n; i++) {
    res->ops += w[i].ops;
    bu_hist_add(hist, w[i].hist);
    if (w[i].failed) {
      fprintf(stderr, "net_tso: thread %d: %s\n", i, w[i].errtext);
      rc = -1;
    }
  }
  res->seconds = elapsed;
  res->ts_s = (double)res->ops / elapsed;
  res->cpu_us_per_ts = bu_per(d.cpu_s * 1e6, res->ops);
  res->csw_per_ts = bu_per((double)d.csw, res->ops);
  res->others_cores = bu_others_cores(d.busy_s, d.cpu_s, elapsed);
  for (int i = 0; i < (src == SRC_NET ? sh->nclients : 1); i++) {
    counted_fetch_t *cf = src == SRC_NET ? &sh->net_counted[i] : &sh->local_counted;
    res->fetches += atomic_load(&cf->calls);
    res->fetched += atomic_load(&cf->timestamps);
  }
  res->fetches -= calls0;
  res->fetched -= ts0;
  free(h);
  free(w);
  return rc;
}

/* ---- the loopback floor ------------------------------------------------ */

typedef struct pingpong {
  int fd;
  atomic_int stop;
} pingpong_t;

/* Echoes 15-byte messages (an rpc.h header) until the peer closes. */
static void *echo_main(void *arg) {
  pingpong_t *pp = arg;
  char buf[15];
  for (;;) {
    size_t got = 0;
    while (got < sizeof buf) {
      ssize_t n = read(pp->fd, buf + got, sizeof buf - got);
      if (n <= 0) return NULL;
      got += (size_t)n;
    }
    if (write(pp->fd, buf, sizeof buf) != (ssize_t)sizeof buf) return NULL;
  }
}

/* Round trips per second of two threads ping-ponging 15 bytes over a
 * blocking 127.0.0.1 TCP connection (TCP_NODELAY): the kernel's and the
 * VM's share of any round trip, with exactly two thread wake-ups per trip.
 * Returns -1 on a socket error. */
static int tcp_pingpong(double seconds, double *rtt_us, double *csw_per_rt) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), cs = -1, as = -1, one = 1;
  struct sockaddr_in a = {0};
  socklen_t alen = sizeof a;
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int rc = -1;
  pthread_t echo;
  pingpong_t pp = {-1, 0};
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &alen) != 0)
    goto out;
  cs = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (cs < 0 || connect(cs, (struct sockaddr *)&a, sizeof a) != 0) goto out;
  as = accept(ls, NULL, NULL);
  if (as < 0) goto out;
  setsockopt(cs, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(as, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  pp.fd = as;
  if (pthread_create(&echo, NULL, echo_main, &pp) != 0) goto out;
  char buf[15] = {0};
  uint64_t trips = 0, csw0, csw1;
  bu_cpu_s(&csw0);
  uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)(seconds * 1e9), t = t0;
  while (t < end) {
    if (write(cs, buf, sizeof buf) != (ssize_t)sizeof buf) break;
    size_t got = 0;
    while (got < sizeof buf) {
      ssize_t n = read(cs, buf + got, sizeof buf - got);
      if (n <= 0) break;
      got += (size_t)n;
    }
    if (got < sizeof buf) break;
    trips++;
    if ((trips & 63) == 0) t = bu_now_ns();
  }
  t = bu_now_ns();
  bu_cpu_s(&csw1);
  shutdown(cs, SHUT_RDWR);
  pthread_join(echo, NULL);
  if (trips) {
    *rtt_us = (double)(t - t0) / 1e3 / (double)trips;
    *csw_per_rt = (double)(csw1 - csw0) / (double)trips;
    rc = 0;
  }
out:
  if (cs >= 0) close(cs);
  if (as >= 0) close(as);
  if (ls >= 0) close(ls);
  return rc;
}

/* One thread calling op back to back on one client until deadline. */
typedef struct rpc_loop_arg {
  pc_rpc_client_t *cli;
  uint8_t op;
  uint32_t count; /* PC_TSO_OP_TIMESTAMPS: timestamps per request */
  uint64_t deadline_ns;
  uint64_t trips;
  int failed;
  pc_error_t e;
  pthread_t tid;
} rpc_loop_arg_t;

static void *rpc_loop_main(void *arg) {
  rpc_loop_arg_t *a = arg;
  pc_buf_t body = {0}, reply = {0};
  if (a->op == PC_TSO_OP_TIMESTAMPS && pc_buf_u32(&body, a->count) != 0) {
    a->failed = 1;
    pc_error_set(&a->e, PC_NOMEM, "out of memory");
    return NULL;
  }
  while (bu_now_ns() < a->deadline_ns) {
    reply.len = 0;
    if (pc_rpc_call(a->cli, a->op, body.p, body.len, CALL_TIMEOUT_MS, &reply, &a->e) != PC_OK) {
      a->failed = 1;
      break;
    }
    a->trips++;
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return NULL;
}

/* n threads, thread i on clients[i], each calling op back to back for
 * seconds (PC_RPC_OP_PING is answered on the server's I/O thread;
 * PC_TSO_OP_TIMESTAMPS goes through a handler thread). Fills the mean round
 * trip of one thread, the total requests per second and the context
 * switches per request. */
static int rpc_loop(pc_rpc_client_t *const *clients, int n, uint8_t op, uint32_t count,
                    double seconds, double *rtt_us, double *req_s, double *csw_per_rt,
                    pc_error_t *e) {
  rpc_loop_arg_t a[MAX_CLIENTS];
  uint64_t csw0, csw1;
  bu_cpu_s(&csw0);
  uint64_t t0 = bu_now_ns();
  int rc = 0;
  for (int i = 0; i < n; i++)
    a[i] = (rpc_loop_arg_t){clients[i], op, count, t0 + (uint64_t)(seconds * 1e9), 0, 0,
                            {PC_OK, ""}, 0};
  int started = bu_start_threads(a, n, sizeof *a, offsetof(rpc_loop_arg_t, tid), rpc_loop_main);
  bu_join_threads(a, started, sizeof *a, offsetof(rpc_loop_arg_t, tid));
  uint64_t trips = 0;
  for (int i = 0; i < started; i++) {
    trips += a[i].trips;
    if (a[i].failed && rc == 0) {
      *e = a[i].e;
      rc = -1;
    }
  }
  double elapsed = (double)(bu_now_ns() - t0) * 1e-9;
  bu_cpu_s(&csw1);
  if (started < n) return pc_error_set(e, PC_INTERNAL, "pthread_create failed"), -1;
  if (rc == 0 && trips) {
    *req_s = (double)trips / elapsed;
    *rtt_us = elapsed * 1e6 * n / (double)trips;
    *csw_per_rt = (double)(csw1 - csw0) / (double)trips;
  }
  return rc;
}

static json_t *floor_json(double rtt_us, double csw) {
  json_t *o = json_object();
  json_object_set_new(o, "rtt_us", json_real(rtt_us));
  json_object_set_new(o, "round_trips_s", json_real(rtt_us > 0 ? 1e6 / rtt_us : 0));
  json_object_set_new(o, "context_switches_per_rt", json_real(csw));
  return o;
}

static json_t *latency_json(const uint64_t *hist) {
  uint64_t samples = bu_hist_total(hist), max = bu_hist_max(hist);
  json_t *lat = json_object();
  json_object_set_new(lat, "calls", json_integer((json_int_t)samples));
  json_object_set_new(lat, "p50_us", json_real((double)bu_percentile(hist, samples, 0.50) / 1e3));
  json_object_set_new(lat, "p99_us", json_real((double)bu_percentile(hist, samples, 0.99) / 1e3));
  json_object_set_new(lat, "p999_us", json_real((double)bu_percentile(hist, samples, 0.999) / 1e3));
  json_object_set_new(lat, "max_us", json_real((double)max / 1e3));
  return lat;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_net_tso [options]\n"
          "  --threads LIST   comma-separated client thread counts (default 1,16,256; each "
          "1..%d)\n"
          "  --seconds S      seconds per source, thread count and round (default 1)\n"
          "  --rounds N       rounds, alternating which source goes first (default 3)\n"
          "  --workers N      handler threads of the oracle's rpc server (default 4, as the "
          "daemon)\n"
          "  --dir D          parent of the temporary directory (default /tmp)\n"
          "  --clients N      network side: N rpc clients, each with its own batcher (as N\n"
          "                   client processes have), threads spread over them (default 1)\n"
          "  --floor-seconds S  seconds of each loopback floor measurement (TCP ping-pong,\n"
          "                   rpc PING, one-timestamp fetch, server capacity; default 0.5;\n"
          "                   0 skips them)\n"
          "  --server-batch B timestamps per request in the server-capacity measurement\n"
          "                   (one thread per --clients connection, no batcher; default 1000)\n"
          "  --inline 0|1     serve timestamps on the server's I/O thread, as the tso\n"
          "                   daemon does (default 1), or through its workers (0)\n"
          "  --only SRC       run one source only, network or in_process (for profiling;\n"
          "                   no ratio)\n"
          "Prints one JSON document on stdout.\n",
          MAX_THREADS);
}

/* --inline: serve timestamps on the I/O thread (rpc.h runs_inline), as the daemon does. */
static int serve_inline = 1;

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"threads", required_argument, NULL, 't'},
                                           {"inline", required_argument, NULL, 'I'},
                                           {"seconds", required_argument, NULL, 's'},
                                           {"rounds", required_argument, NULL, 'r'},
                                           {"workers", required_argument, NULL, 'w'},
                                           {"dir", required_argument, NULL, 'd'},
                                           {"only", required_argument, NULL, 'O'},
                                           {"clients", required_argument, NULL, 'c'},
                                           {"floor-seconds", required_argument, NULL, 'F'},
                                           {"server-batch", required_argument, NULL, 'B'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int counts[MAX_COUNTS] = {1, 16, 256}, ncounts = 3, rounds = 3, nclients = 1;
  uint64_t workers = 4;
  double seconds = 1.0, floor_seconds = 0.5;
  uint64_t server_batch = 1000;
  const char *parent = "/tmp";
  int only = -1, c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    uint64_t v;
    switch (c) {
      case 't':
        if (bu_parse_int_list(optarg, MAX_THREADS, counts, MAX_COUNTS, &ncounts) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --threads '%s' (e.g. 1,16,256)\n", optarg);
          return 2;
        }
        break;
      case 's':
        if (bu_parse_double(optarg, 0, 1, 3600, &seconds) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --seconds '%s'\n", optarg);
          return 2;
        }
        break;
      case 'r':
        if (bu_parse_u64(optarg, 1, MAX_ROUNDS, &v) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --rounds '%s'\n", optarg);
          return 2;
        }
        rounds = (int)v;
        break;
      case 'I':
        if (bu_parse_u64(optarg, 0, 1, &v) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --inline '%s' (0 or 1)\n", optarg);
          return 2;
        }
        serve_inline = (int)v;
        break;
      case 'w':
        if (bu_parse_u64(optarg, 1, 1024, &workers) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --workers '%s'\n", optarg);
          return 2;
        }
        break;
      case 'c':
        if (bu_parse_u64(optarg, 1, MAX_CLIENTS, &v) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --clients '%s' (1..%d)\n", optarg, MAX_CLIENTS);
          return 2;
        }
        nclients = (int)v;
        break;
      case 'F':
        if (bu_parse_double(optarg, 0, 0, 60, &floor_seconds) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --floor-seconds '%s'\n", optarg);
          return 2;
        }
        break;
      case 'B':
        if (bu_parse_u64(optarg, 1, PC_TSO_MAX_BATCH, &server_batch) != 0) {
          fprintf(stderr, "pc_bench_net_tso: bad --server-batch '%s' (1..%u)\n", optarg,
                  PC_TSO_MAX_BATCH);
          return 2;
        }
        break;
      case 'd': parent = optarg; break;
      case 'O':
        only = -2;
        for (int s = 0; s < SRC_COUNT; s++)
          if (strcmp(optarg, source_name[s]) == 0) only = s;
        if (only == -2) {
          fprintf(stderr, "pc_bench_net_tso: bad --only '%s' (network or in_process)\n", optarg);
          return 2;
        }
        break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (bu_no_operands("pc_bench_net_tso", argc, argv, optind) != 0) return 2;

  char dir[4096], path[4200];
  if (bu_make_temp_dir(dir, sizeof dir, parent, "net-tso", "net_tso") != 0) return 1;
  int rc = 1;
  pc_error_t e;
  pc_oracle_t *served = NULL, *local = NULL;
  pc_rpc_server_t *srv = NULL;
  shared_t *sh = calloc(1, sizeof *sh);
  json_t *doc = json_object();
  uint64_t *hist = calloc((size_t)SRC_COUNT * HBUCKETS, sizeof *hist);
  if (!sh || !hist) goto out;

  /* the served oracle and the baseline's are separate files: neither shares a mutex */
  snprintf(path, sizeof path, "%s/served-oracle", dir);
  if (!(served = pc_oracle_open(path, 0, &e))) goto fail;
  snprintf(path, sizeof path, "%s/local-oracle", dir);
  if (!(local = pc_oracle_open(path, 0, &e))) goto fail;
  pc_rpc_server_options_t so = {0};
  so.name = "tso";
  so.host = "127.0.0.1";
  so.port = 0;
  so.workers = (uint32_t)workers;
  if (serve_inline) so.runs_inline = pc_tso_rpc_runs_inline; /* as `percolator tso` does */
  if (!(srv = pc_rpc_server_start(&so, pc_tso_rpc_handler, served, &e))) goto fail;
  sh->nclients = nclients;
  for (int i = 0; i < nclients; i++) {
    sh->rpc[i] = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(srv), NULL, &e);
    if (!sh->rpc[i]) goto fail;
    sh->net_counted[i].fetch = pc_tso_remote_fetch;
    sh->net_counted[i].ctx = sh->rpc[i];
    sh->net[i] = pc_ts_batcher_create(counted_fetch, &sh->net_counted[i]);
    if (!sh->net[i]) {
      pc_error_set(&e, PC_NOMEM, "out of memory");
      goto fail;
    }
    /* connect before measuring */
    uint64_t warm;
    if (pc_ts_batcher_get(sh->net[i], CALL_TIMEOUT_MS, &warm, &e) != PC_OK) goto fail;
  }
  sh->local_counted.fetch = pc_oracle_fetch;
  sh->local_counted.ctx = local;
  sh->local = pc_ts_batcher_create(counted_fetch, &sh->local_counted);
  if (!sh->local) {
    pc_error_set(&e, PC_NOMEM, "out of memory");
    goto fail;
  }

  bu_json_head(doc, "net_tso");
  json_object_set_new(doc, "server",
                      json_string("in-process rpc.h server on 127.0.0.1 (ephemeral port) serving "
                                  "pc_tso_rpc_handler over a pc_oracle in a temp dir"));
  json_t *par = json_object();
  json_object_set_new(par, "threads", bu_json_int_array(counts, ncounts));
  json_object_set_new(par, "seconds", json_real(seconds));
  json_object_set_new(par, "rounds", json_integer(rounds));
  json_object_set_new(par, "server_workers", json_integer((json_int_t)workers));
  json_object_set_new(par, "clients", json_integer(nclients));
  json_object_set_new(par, "floor_seconds", json_real(floor_seconds));
  json_object_set_new(par, "server_batch", json_integer((json_int_t)server_batch));
  json_object_set_new(par, "only", only >= 0 ? json_string(source_name[only]) : json_null());
  json_object_set_new(doc, "params", par);
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());

  if (floor_seconds > 0) {
    double rtt = 0, csw = 0;
    json_t *fl = json_object();
    json_object_set_new(doc, "loopback_floor", fl);
    if (tcp_pingpong(floor_seconds, &rtt, &csw) == 0)
      json_object_set_new(fl, "tcp_pingpong", floor_json(rtt, csw));
    double req_s = 0;
    if (rpc_loop(sh->rpc, 1, PC_RPC_OP_PING, 0, floor_seconds, &rtt, &req_s, &csw, &e) != 0)
      goto fail;
    json_object_set_new(fl, "rpc_ping", floor_json(rtt, csw));
    if (rpc_loop(sh->rpc, 1, PC_TSO_OP_TIMESTAMPS, 1, floor_seconds, &rtt, &req_s, &csw, &e) != 0)
      goto fail;
    json_object_set_new(fl, "rpc_timestamps_1", floor_json(rtt, csw));
    /* The server's capacity when requests carry big batches (as the paper's
     * clients did): one thread per client connection, no batcher. */
    if (rpc_loop(sh->rpc, nclients, PC_TSO_OP_TIMESTAMPS, server_batch, floor_seconds, &rtt,
                 &req_s, &csw, &e) != 0)
      goto fail;
    json_t *cap = json_object();
    json_object_set_new(cap, "connections", json_integer(nclients));
    json_object_set_new(cap, "batch", json_integer((json_int_t)server_batch));
    json_object_set_new(cap, "requests_s", json_real(req_s));
    json_object_set_new(cap, "ts_s", json_real(req_s * (double)server_batch));
    json_object_set_new(cap, "rtt_us", json_real(rtt));
    json_object_set_new(cap, "context_switches_per_request", json_real(csw));
    json_object_set_new(doc, "server_capacity", cap);
  }

  json_t *results = json_array();
  json_object_set_new(doc, "results", results);
  double best_net = 0;
  for (int ci = 0; ci < ncounts; ci++) {
    int n = counts[ci];
    double ts_s[SRC_COUNT][MAX_ROUNDS], cpu[SRC_COUNT][MAX_ROUNDS], csw[SRC_COUNT][MAX_ROUNDS];
    double others[SRC_COUNT][MAX_ROUNDS];
    double ratio[MAX_ROUNDS];
    uint64_t fetches[SRC_COUNT] = {0}, fetched[SRC_COUNT] = {0}, ops[SRC_COUNT] = {0};
    memset(hist, 0, (size_t)SRC_COUNT * HBUCKETS * sizeof *hist);
    pc_rpc_server_stats_t st0, st1;
    pc_rpc_server_stats(srv, &st0);
    json_t *jrounds = json_array();
    for (int r = 0; r < rounds; r++) {
      json_t *jr = json_object();
      json_object_set_new(jr, "order", json_string(r % 2 ? "in_process first" : "network first"));
      for (int k = 0; k < SRC_COUNT; k++) {
        enum source src = (enum source)(r % 2 ? 1 - k : k);
        if (only >= 0 && (int)src != only) continue;
        result_t res;
        if (run(sh, src, n, seconds, hist + (size_t)src * HBUCKETS, &res) != 0) goto out;
        ts_s[src][r] = res.ts_s;
        cpu[src][r] = res.cpu_us_per_ts;
        csw[src][r] = res.csw_per_ts;
        others[src][r] = res.others_cores;
        fetches[src] += res.fetches;
        fetched[src] += res.fetched;
        ops[src] += res.ops;
        json_t *jp = json_object();
        json_object_set_new(jp, "ts_s", json_real(res.ts_s));
        json_object_set_new(jp, "fetches", json_integer((json_int_t)res.fetches));
        json_object_set_new(jp, "cpu_us_per_ts", json_real(res.cpu_us_per_ts));
        json_object_set_new(jp, "context_switches_per_ts", json_real(res.csw_per_ts));
        json_object_set_new(jp, "others_cores", json_real(res.others_cores));
        json_object_set_new(jr, source_name[src], jp);
      }
      if (only < 0) {
        ratio[r] = ts_s[SRC_NET][r] / ts_s[SRC_LOCAL][r];
        json_object_set_new(jr, "ratio", json_real(ratio[r]));
      }
      json_array_append_new(jrounds, jr);
    }
    pc_rpc_server_stats(srv, &st1);
    json_t *jc = json_object();
    json_object_set_new(jc, "threads", json_integer(n));
    for (int s = 0; s < SRC_COUNT; s++) {
      if (only >= 0 && s != only) continue;
      json_t *js = json_object();
      double m = bu_median(ts_s[s], rounds);
      json_object_set_new(js, "ts_s", json_real(m));
      json_object_set_new(js, "cpu_us_per_ts", json_real(bu_median(cpu[s], rounds)));
      json_object_set_new(js, "context_switches_per_ts", json_real(bu_median(csw[s], rounds)));
      json_object_set_new(js, "others_cores", json_real(bu_median(others[s], rounds)));
      json_object_set_new(js, "latency", latency_json(hist + (size_t)s * HBUCKETS));
      json_object_set_new(js, "fetches", json_integer((json_int_t)fetches[s]));
      json_object_set_new(js, "timestamps", json_integer((json_int_t)ops[s]));
      json_object_set_new(js, "avg_batch",
                          json_real(fetches[s] ? (double)fetched[s] / (double)fetches[s] : 0));
      if (s == SRC_NET) {
        /* every fetch is one request frame; the server's count confirms it */
        json_object_set_new(js, "server_requests",
                            json_integer((json_int_t)(st1.requests - st0.requests)));
        json_object_set_new(js, "round_trips_s",
                            json_real((double)fetches[s] / (seconds * rounds)));
        if (m > best_net) best_net = m;
      }
      json_object_set_new(jc, source_name[s], js);
    }
    if (only < 0) json_object_set_new(jc, "ratio", json_real(bu_median(ratio, rounds)));
    json_object_set_new(jc, "rounds", jrounds);
    json_array_append_new(results, jc);
  }
  json_t *goal = json_object();
  json_object_set_new(goal, "network_ts_s", json_real(5e6));
  json_object_set_new(goal, "best_network_ts_s", json_real(best_net));
  json_object_set_new(goal, "met", json_boolean(best_net >= 5e6));
  json_object_set_new(doc, "goal", goal);
  json_object_set_new(doc, "paper_ts_s", json_real(2e6));
  rc = 0;
  goto out;

fail:
  fprintf(stderr, "net_tso: %s\n", e.text);
out:
  if (sh) {
    for (int i = 0; i < MAX_CLIENTS; i++) {
      if (sh->net[i]) pc_ts_batcher_destroy(sh->net[i]);
      if (sh->rpc[i]) pc_rpc_client_destroy(sh->rpc[i]);
    }
    if (sh->local) pc_ts_batcher_destroy(sh->local);
  }
  if (srv) pc_rpc_server_stop(srv);
  if (served) pc_oracle_close(served);
  if (local) pc_oracle_close(local);
  bu_remove_tree(dir);
  free(sh);
  free(hist);
  return bu_json_finish(doc, rc);
}
