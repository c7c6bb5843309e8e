/* test_security.c — who gets in and what they may do, and what no client can
 * take from a server, against real daemons (`percolator` processes on
 * 127.0.0.1, ephemeral ports, certificates made at run time in the test's
 * temporary folder by tests/certs.sh):
 *
 *   - certificates: a cluster on TLS admits a data client ('app', in
 *     tls.allowed_cn) and the system ('node', 'ops' in tls.system_cn); a peer
 *     without TLS, with a certificate of another authority or with a name not
 *     allowed is refused before any op (the tablet's request counter does not
 *     move); a data client's GC and its write of percolator.system are
 *     refused; a lease asked for 49 days is capped by the tablet's
 *     store.lock_ttl_ms; a safe point of 2^64-1 is refused; a reader's
 *     snapshot is not rewritten by frames with older timestamps from
 *     unauthorised peers;
 *   - secrets: the same roles from a data secret and a system secret; a
 *     data client's OBSERVER frames (add to and remove from a tablet's
 *     observer set) are refused, the system's are served, and both may list
 *     the set (OBSERVERS);
 *   - the GC safe point: a data client's pass leaves the safe point
 *     published in ZooKeeper where it was, so the tablets, restarted, still
 *     serve reads below the point it tried; the system's pass publishes;
 *   - private by default: a served embedded store's files are its user's
 *     (directories 0700, files 0600, LevelDB's too), its serving.json holds
 *     a secret, and a client without it is refused; serving.json stays,
 *     private, when the worker stops, as docs/SECURITY.md and
 *     docs/ARCHITECTURE.md both say;
 *   - resources: a tablet with small limits, while a client commits all
 *     along, gets peers that pipeline raw scans and never read the replies,
 *     a thousand idle connections, half-sent huge frames (authenticated and
 *     not) and a thousand HTTP connections; it keeps serving, and its RSS
 *     (read from /proc) stays under the bound docs/ARCHITECTURE.md gives for
 *     its configuration.
 *
 * Every process started here is stopped in teardown (by pid); a test that
 * passes stops its daemons with SIGTERM and requires exit 0. The
 * `percolator` binary comes from $PERCOLATOR_CLI (skipped without it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "config/config.h"
#include "core/db.h"
#include "base/error.h"
#include "core/keys.h"
#include "lockservice/coord.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"
#include "tests/daemons.h"
#include "tests/testutil.h"
#include "tso/tso_client.h"

/* ---- processes ------------------------------------------------------------ */

typedef tu_daemons_t fixture_t;

static int setup(void **state) { return tu_daemons_setup(state, "security"); }
static int teardown(void **state) { return tu_daemons_teardown(state); }

#define NEED_CLI(fx) \
  do {               \
    if (!(fx)) skip(); \
  } while (0)

/* Starts `percolator --config cfg VERB [--name NAME] --ready-file DIR/TAG.ready`
 * (its output in DIR/TAG.log) and waits until it is ready; returns the ready
 * file's JSON. */
static json_t *start_daemon(fixture_t *fx, const char *cfg, const char *verb, const char *name,
                            const char *tag, pid_t *pid_out) {
  char ready[4200], logp[4200];
  snprintf(ready, sizeof ready, "%s/%s.ready", fx->dir, tag);
  snprintf(logp, sizeof logp, "%s/%s.log", fx->dir, tag);
  char verb_text[64];
  snprintf(verb_text, sizeof verb_text, "percolator %s", verb);
  const char *argv[] = {tu_cli_path(), "--config", cfg, verb, "--ready-file", ready, NULL, NULL,
                        NULL};
  if (name) {
    argv[4] = "--name", argv[5] = name, argv[6] = "--ready-file", argv[7] = ready;
  }
  pid_t pid = tu_daemons_spawn(fx, logp, argv);
  *pid_out = pid;
  return tu_daemons_ready(fx, pid, ready, logp, 30000, verb_text);
}


static const char *endpoint(json_t *ready, const char *role, const char *tablet,
                            const char *which) {
  json_t *o = tablet ? json_object_get(json_object_get(ready, "tablets"), tablet)
                     : json_object_get(ready, role);
  const char *ep = json_string_value(json_object_get(o, which));
  assert_non_null(ep);
  return ep;
}

static uint16_t port_of(const char *ep) { return (uint16_t)atoi(strrchr(ep, ':') + 1); }

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

/* ---- sockets ---------------------------------------------------------------- */

static int tcp_connect_from(uint16_t port, const char *from) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  if (from) {
    inet_pton(AF_INET, from, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
      close(fd);
      return -1;
    }
  }
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int send_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static int recv_all(int fd, void *p, size_t n, int timeout_ms) {
  char *b = p;
  while (n) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, timeout_ms) <= 0) return -1;
    ssize_t r = recv(fd, b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r;
    n -= (size_t)r;
  }
  return 0;
}

/* A request frame (net/rpc.h) of op with body. */
static void put_frame(pc_buf_t *b, uint8_t op, uint64_t id, const void *body, size_t len) {
  assert_int_equal(pc_buf_u32(b, (uint32_t)(11 + len)) || pc_buf_u8(b, PC_RPC_VERSION_1) ||
                       pc_buf_u8(b, op) || pc_buf_u8(b, 0) || pc_buf_u64(b, id),
                   0);
  if (len) assert_int_equal(pc_buf_append(b, body, len), 0);
}

typedef struct frame {
  uint8_t op, status;
  uint64_t id;
  char body[4096];
  size_t len;
} frame_t;

/* Reads one frame (its body cut to 4095 bytes); -1 when none comes. */
static int read_frame(int fd, frame_t *f, int timeout_ms) {
  unsigned char h[15];
  if (recv_all(fd, h, 15, timeout_ms) != 0) return -1;
  uint32_t flen = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
  f->op = h[5];
  f->status = h[6];
  f->id = 0;
  for (int i = 0; i < 8; i++) f->id = f->id << 8 | h[7 + i];
  size_t blen = flen - 11, keep = blen < sizeof f->body - 1 ? blen : sizeof f->body - 1;
  if (recv_all(fd, f->body, keep, timeout_ms) != 0) return -1;
  for (size_t left = blen - keep; left;) {
    char junk[4096];
    size_t n = left < sizeof junk ? left : sizeof junk;
    if (recv_all(fd, junk, n, timeout_ms) != 0) return -1;
    left -= n;
  }
  f->body[keep] = '\0';
  f->len = keep;
  return 0;
}

/* 1 when the peer closed fd (after anything it sent) within timeout_ms. */
static int closed_within(int fd, int timeout_ms) {
  char buf[4096];
  uint64_t end = pc_now_mono_ms() + (uint64_t)timeout_ms;
  while (pc_now_mono_ms() < end) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 50) > 0) {
      ssize_t got = recv(fd, buf, sizeof buf, 0);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return 1;
    }
  }
  return 0;
}

/* The secret's challenge-response by hand (which 0: data secret, 1: system). */
static int raw_authenticate(int fd, const char *secret, uint8_t which) {
  unsigned char cn[32], sn[32], msg[128], auth[33];
  for (int i = 0; i < 32; i++) cn[i] = (unsigned char)rand();
  pc_buf_t b = {0};
  put_frame(&b, PC_RPC_OP_HELLO, 0, cn, 32);
  int rc = send_all(fd, b.p, b.len);
  pc_buf_free(&b);
  frame_t f;
  if (rc != 0 || read_frame(fd, &f, 5000) != 0 || f.status != 0 || f.len != 32) return -1;
  memcpy(sn, f.body, 32);
  memcpy(msg, "percolator client", 17);
  memcpy(msg + 17, sn, 32);
  memcpy(msg + 49, cn, 32);
  unsigned int olen = 32;
  auth[0] = which;
  HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, 81, auth + 1, &olen);
  put_frame(&b, PC_RPC_OP_AUTH, 0, auth, 33);
  rc = send_all(fd, b.p, b.len);
  pc_buf_free(&b);
  if (rc != 0 || read_frame(fd, &f, 5000) != 0 || f.status != 0) return -1;
  return 0;
}

/* The value of metric name in the Prometheus text at http endpoint ep; -1 if absent. */
static double metric(const char *ep, const char *name) {
  int fd = tcp_connect_from(port_of(ep), NULL);
  assert_true(fd >= 0);
  const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
  assert_int_equal(send_all(fd, req, sizeof req - 1), 0);
  static char resp[1 << 16];
  size_t n = 0;
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    assert_true(poll(&pf, 1, 5000) > 0);
    ssize_t r = recv(fd, resp + n, sizeof resp - 1 - n, 0);
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  resp[n] = '\0';
  char want[160];
  snprintf(want, sizeof want, "\n%s ", name);
  const char *p = strstr(resp, want);
  return p ? strtod(p + strlen(want), NULL) : -1;
}

/* The "zookeeper" member (ending in a comma) of the configurations of the
 * cluster in dir: this program's private server (testutil), a root of dir's
 * own. */
static const char *zk_member(const char *dir) {
  static char buf[1024];
  const char *base = strrchr(dir, '/');
  snprintf(buf, sizeof buf,
           "\"zookeeper\":{\"connect\":\"%s\",\"root\":\"/percolator/%s\","
           "\"session_timeout_ms\":5000},",
           tu_zk_shared(), base ? base + 1 : dir);
  return buf;
}

/* ---- clients ---------------------------------------------------------------- */

/* Writes DIR/NAME.json, a client configuration of the `run` daemon whose
 * ready file is ready (tablets a [.."m") and b ["m"..)), with extra (JSON
 * members, ending in a comma) for its credentials. Returns a malloc'd path. */
static char *client_config(const char *dir, json_t *ready, const char *name, const char *extra) {
  char *text = NULL, *path = NULL;
  int rc = asprintf(&text,
                    "{%s%s\"store\":{\"timeout_ms\":5000},"
                    "\"tso\":{\"listen\":\"%s\"},"
                    "\"tablets\":[{\"name\":\"a\",\"listen\":\"%s\",\"end\":\"m\"},"
                    "{\"name\":\"b\",\"listen\":\"%s\",\"start\":\"m\"}]}\n",
                    extra, zk_member(dir), endpoint(ready, "tso", NULL, "listen"),
                    endpoint(ready, NULL, "a", "listen"), endpoint(ready, NULL, "b", "listen"));
  assert_true(rc > 0);
  if (asprintf(&path, "%s/%s.json", dir, name) < 0) abort();
  tu_write_text(path, text);
  free(text);
  return path;
}

static pc_db_t *open_db(const char *cfg) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(cfg, &err);
  if (!db) fail_msg("pc_db_open_config(%s): %s", cfg, err.text);
  return db;
}

static pc_status_t put(pc_db_t *db, const char *row, const char *val, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err->code;
  pc_status_t st = pc_txn_set(t, "t", row, strlen(row), "c", 1, val, strlen(val), err);
  if (st == PC_OK) st = pc_txn_commit(t, err);
  pc_txn_destroy(t);
  return st;
}

static pc_status_t put_system(pc_db_t *db, const char *row, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err->code;
  pc_status_t st =
      pc_txn_set_system(t, PC_SYSTEM_TABLE, row, strlen(row), "def", 3, "x", 1, err);
  if (st == PC_OK) st = pc_txn_commit(t, err);
  pc_txn_destroy(t);
  return st;
}

/* The body of a ONE_PHASE writing "t"/row/"c" = val at start. */
static void one_phase_body(pc_buf_t *b, uint64_t start, const char *row, const char *val) {
  pc_mutation_t m = {{"t", row, strlen(row), "c", 1}, PC_WRITE_PUT, val, strlen(val), 0};
  assert_int_equal(pc_buf_u64(b, start) || pc_buf_u32(b, 1) || pc_wire_put_mutation(b, &m), 0);
}

/* ---- 1. certificates ---------------------------------------------------------- */

static void test_certificates(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  const char *d = fx->dir;
  tu_make_certs(d, "node:server app ops stranger");
  char cfg[4200], text[4096];
  snprintf(cfg, sizeof cfg, "%s/run.json", d);
  snprintf(text, sizeof text,
           "{\"data_dir\":\"%s/data\",\"log\":{\"level\":\"warn\"},"
           "\"store\":{\"lock_ttl_ms\":2000},"
           "\"tls\":{\"ca_file\":\"%s/ca.pem\",\"cert_file\":\"%s/node.pem\","
           "\"key_file\":\"%s/node.key\",\"allowed_cn\":[\"app\"],"
           "\"system_cn\":[\"node\",\"ops\"]},%s"
           "\"tso\":{\"listen\":\"127.0.0.1:0\"},"
           "\"tablets\":[{\"name\":\"a\",\"listen\":\"127.0.0.1:0\",\"http\":\"127.0.0.1:0\","
           "\"end\":\"m\"},{\"name\":\"b\",\"listen\":\"127.0.0.1:0\",\"start\":\"m\"}]}\n",
           d, d, d, d, zk_member(d));
  tu_write_text(cfg, text);
  pid_t run;
  json_t *ready = start_daemon(fx, cfg, "run", NULL, "run", &run);
  const char *http_a = endpoint(ready, NULL, "a", "http");
  uint16_t port_a = port_of(endpoint(ready, NULL, "a", "listen"));
  char extra[1024];
#define TLS_AS(who)                                                                             \
  (snprintf(extra, sizeof extra,                                                                \
            "\"tls\":{\"ca_file\":\"%s/ca.pem\",\"cert_file\":\"%s/%s.pem\","                  \
            "\"key_file\":\"%s/%s.key\",\"system_cn\":[\"node\",\"ops\"]},",                   \
            d, d, who, d, who),                                                                 \
   extra)
  char *app_cfg = client_config(d, ready, "app", TLS_AS("app"));
  char *ops_cfg = client_config(d, ready, "ops", TLS_AS("ops"));
  char *rogue_cfg = client_config(d, ready, "rogue", TLS_AS("rogue-app"));
  char *stranger_cfg = client_config(d, ready, "stranger", TLS_AS("stranger"));
  pc_db_t *app = open_db(app_cfg), *ops = open_db(ops_cfg);
  pc_error_t err;

  /* a data client reads and writes user tables */
  assert_int_equal(put(app, "k1", "v1", &err), PC_OK);
  assert_int_equal(put(app, "z1", "v1", &err), PC_OK);

  /* ... but neither collects garbage nor writes the system table */
  pc_gc_stats_t gs;
  assert_int_equal(pc_db_gc(app, &gs, &err), PC_DENIED);
  fprintf(stderr, "data client's gc: %s\n", err.text);
  if (!strstr(err.text, "system identity")) fail_msg("unexpected: %s", err.text);
  assert_int_equal(put_system(app, "observer/evil", &err), PC_DENIED);
  fprintf(stderr, "data client's system write: %s\n", err.text);
  /* the system ('ops' is in system_cn, not in allowed_cn) may */
  assert_int_equal(pc_db_gc(ops, &gs, &err), PC_OK);
  assert_int_equal(put_system(ops, "test/ops", &err), PC_OK);
  pc_txn_t *t = pc_txn_begin(ops, &err);
  assert_non_null(t);
  char *v = NULL;
  size_t vl = 0;
  assert_int_equal(pc_txn_get_system(t, PC_SYSTEM_TABLE, "observer/evil", 13, "def", 3, &v, &vl,
                                     &err),
                   PC_NOT_FOUND);
  pc_txn_destroy(t);

  /* a reader's snapshot, and peers that would rewrite it from below */
  pc_txn_t *reader = pc_txn_begin(app, &err);
  assert_non_null(reader);
  char *got = tu_get(reader, "t", "k1", "c");
  assert_string_equal(got, "v1");
  free(got);
  uint64_t snap = pc_txn_start_ts(reader);
  double requests = metric(http_a, "percolator_rpc_requests_total");
  double failures = metric(http_a, "percolator_rpc_auth_failures_total");
  assert_true(requests > 0);
  pc_buf_t body = {0}, reply = {0};
  one_phase_body(&body, snap - 1000, "k1", "rewritten");
  /* (a) no TLS at all: the frame in clear is never served */
  int fd = tcp_connect_from(port_a, NULL);
  assert_true(fd >= 0);
  pc_buf_t raw = {0};
  put_frame(&raw, PC_TABLET_OP_ONE_PHASE, 1, body.p, body.len);
  assert_int_equal(send_all(fd, raw.p, raw.len), 0);
  frame_t f;
  assert_int_equal(read_frame(fd, &f, 3000), -1);
  assert_int_equal(closed_within(fd, 5000), 1);
  close(fd);
  pc_buf_free(&raw);
  /* (b) a certificate of another authority, and (c) one of this authority
   * with a name tls.allowed_cn does not list */
  const char *const peers[2] = {rogue_cfg, stranger_cfg};
  for (int k = 0; k < 2; k++) {
    pc_config_t *pcfg = pc_config_load(peers[k], &err);
    assert_non_null(pcfg);
    pc_rpc_client_t *c = pc_config_rpc_client(pcfg, "127.0.0.1", port_a, &err);
    assert_non_null(c);
    assert_int_equal(pc_rpc_call(c, PC_TABLET_OP_ONE_PHASE, body.p, body.len, 5000, &reply, &err),
                     PC_DENIED);
    fprintf(stderr, "%s: %s\n", peers[k], err.text);
    pc_rpc_client_destroy(c);
    pc_config_free(pcfg);
  }
  /* nothing was served for them, and the snapshot reads what it read */
  assert_true(metric(http_a, "percolator_rpc_requests_total") == requests);
  assert_true(metric(http_a, "percolator_rpc_auth_failures_total") >= failures + 2);
  got = tu_get(reader, "t", "k1", "c");
  assert_string_equal(got, "v1");
  free(got);
  assert_int_equal(pc_txn_commit(reader, &err), PC_OK);
  pc_txn_destroy(reader);
  t = pc_txn_begin(app, &err);
  got = tu_get(t, "t", "k1", "c");
  assert_string_equal(got, "v1");
  free(got);
  pc_txn_destroy(t);
  pc_buf_free(&body);

  /* the rogue client through the library: refused, saying why */
  pc_db_t *rogue = pc_db_open_config(rogue_cfg, &err);
  assert_non_null(rogue);
  assert_null(pc_txn_begin(rogue, &err));
  assert_int_equal(err.code, PC_DENIED);
  fprintf(stderr, "rogue through the library: %s\n", err.text);
  pc_db_close(rogue);

  /* a lease of 49 days asked by a data client: capped at store.lock_ttl_ms */
  pc_config_t *ac = pc_config_load(app_cfg, &err);
  assert_non_null(ac);
  pc_rpc_client_t *tab = pc_config_rpc_client(ac, "127.0.0.1", port_a, &err);
  pc_rpc_client_t *tso = pc_config_rpc_client(
      ac, "127.0.0.1", port_of(endpoint(ready, "tso", NULL, "listen")), &err);
  assert_non_null(tab);
  assert_non_null(tso);
  uint64_t start = 0;
  assert_int_equal(pc_tso_remote_fetch(tso, 1, 5000, &start, &err), PC_OK);
  pc_cell_t lc = {"t", "k9", 2, "c", 1};
  pc_mutation_t lm = {lc, PC_WRITE_PUT, "locked", 6, 0};
  assert_int_equal(pc_wire_put_cell(&body, &lc) || pc_buf_u64(&body, start) ||
                       pc_buf_u32(&body, UINT32_MAX) || pc_buf_u64(&body, 7) ||
                       pc_buf_u32(&body, 1) || pc_wire_put_mutation(&body, &lm),
                   0);
  reply.len = 0;
  assert_int_equal(pc_rpc_call(tab, PC_TABLET_OP_PREWRITE, body.p, body.len, 5000, &reply, &err),
                   PC_OK);
  assert_int_equal(reply.p[0], PC_OK);
  body.len = reply.len = 0;
  assert_int_equal(pc_buf_u64(&body, UINT64_MAX), 0);
  assert_int_equal(
      pc_rpc_call(tab, PC_TABLET_OP_SCAN_LOCKS, body.p, body.len, 5000, &reply, &err), PC_OK);
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  assert_int_equal(pc_rd_u8(&r), PC_OK);
  (void)pc_rd_u8(&r);
  assert_int_equal(pc_rd_u32(&r), 1);
  pc_lock_info_t lock;
  assert_int_equal(pc_wire_get_lock(&r, &lock), 0);
  fprintf(stderr, "a lease of 49 days asked: %u ms granted\n", lock.ttl_ms);
  assert_true(lock.ttl_ms <= 2000 + 10000);
  pc_lock_info_free(&lock);
  body.len = reply.len = 0;
  assert_int_equal(pc_buf_u64(&body, start) || pc_buf_u32(&body, 1) || pc_wire_put_cell(&body, &lc),
                   0);
  assert_int_equal(pc_rpc_call(tab, PC_TABLET_OP_ROLLBACK, body.p, body.len, 5000, &reply, &err),
                   PC_OK);
  /* a timestamp request's count is bounded */
  body.len = reply.len = 0;
  assert_int_equal(pc_buf_u32(&body, 1000000), 0);
  assert_int_equal(
      pc_rpc_call(tso, PC_TSO_OP_TIMESTAMPS, body.p, body.len, 5000, &reply, &err), PC_INVALID);
  pc_rpc_client_destroy(tab);
  pc_rpc_client_destroy(tso);
  pc_config_free(ac);

  /* even the system cannot set a safe point past the oracle's timestamps */
  pc_config_t *oc = pc_config_load(ops_cfg, &err);
  assert_non_null(oc);
  tab = pc_config_rpc_client(oc, "127.0.0.1", port_a, &err);
  assert_non_null(tab);
  body.len = reply.len = 0;
  assert_int_equal(pc_buf_u64(&body, UINT64_MAX) || pc_buf_u32(&body, 0), 0);
  assert_int_equal(pc_rpc_call(tab, PC_TABLET_OP_GC, body.p, body.len, 5000, &reply, &err), PC_OK);
  assert_int_equal(reply.p[0], PC_INVALID);
  pc_rpc_client_destroy(tab);
  pc_config_free(oc);
  t = pc_txn_begin(app, &err);
  got = tu_get(t, "t", "z1", "c"); /* reads still work */
  assert_string_equal(got, "v1");
  free(got);
  pc_txn_destroy(t);
  pc_buf_free(&body);
  pc_buf_free(&reply);

  pc_db_close(app);
  pc_db_close(ops);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(app_cfg);
  free(ops_cfg);
  free(rogue_cfg);
  free(stranger_cfg);
}

/* ---- 2. secrets ------------------------------------------------------------------ */

/* A tablet's OBSERVER request (add, with its record, or remove) sent by
 * the client of configuration cfg; returns the tablet's status. */
static pc_status_t observer_frame(const char *cfg, uint16_t port, int add, const char *name,
                                  char *msg, size_t cap) {
  pc_error_t err;
  pc_config_t *c = pc_config_load(cfg, &err);
  assert_non_null(c);
  pc_rpc_client_t *cl = pc_config_rpc_client(c, "127.0.0.1", port, &err);
  assert_non_null(cl);
  pc_buf_t body = {0}, rec = {0}, reply = {0};
  assert_int_equal(pc_buf_u8(&body, (uint8_t)add) || pc_buf_str(&body, name, strlen(name)), 0);
  if (add)
    assert_int_equal(pc_obs_record_encode(&rec, 0, "t", "c", 1) ||
                         pc_buf_str(&body, rec.p, rec.len),
                     0);
  assert_int_equal(pc_rpc_call(cl, PC_TABLET_OP_OBSERVER, body.p, body.len, 5000, &reply, &err),
                   PC_OK);
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  pc_status_t st = (pc_status_t)pc_rd_u8(&r);
  size_t ml = 0;
  const char *m = pc_rd_str(&r, &ml);
  snprintf(msg, cap, "%.*s", m ? (int)ml : 0, m ? m : "");
  pc_buf_free(&body);
  pc_buf_free(&rec);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(cl);
  pc_config_free(c);
  return st;
}

/* How many observers the tablet's set names, as the client of cfg lists them. */
static int observers_named(const char *cfg, uint16_t port, const char *name) {
  pc_error_t err;
  pc_config_t *c = pc_config_load(cfg, &err);
  assert_non_null(c);
  pc_rpc_client_t *cl = pc_config_rpc_client(c, "127.0.0.1", port, &err);
  assert_non_null(cl);
  pc_buf_t reply = {0};
  assert_int_equal(pc_rpc_call(cl, PC_TABLET_OP_OBSERVERS, NULL, 0, 5000, &reply, &err), PC_OK);
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  assert_int_equal(pc_rd_u8(&r), PC_OK);
  uint32_t n = pc_rd_u32(&r);
  int named = 0;
  for (uint32_t i = 0; i < n && r.ok; i++) {
    size_t nl, rl;
    const char *nm = pc_rd_str(&r, &nl);
    (void)pc_rd_str(&r, &rl);
    if (r.ok && nl == strlen(name) && memcmp(nm, name, nl) == 0) named++;
  }
  assert_true(r.ok);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(cl);
  pc_config_free(c);
  return named;
}

static void test_secrets(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  const char *d = fx->dir;
  char cfg[4200], text[2048];
  snprintf(cfg, sizeof cfg, "%s/run.json", d);
  snprintf(text, sizeof text,
           "{\"data_dir\":\"%s/data\",\"log\":{\"level\":\"warn\"},"
           "\"secret\":\"data-s3cret\",\"system_secret\":\"system-s3cret\",%s"
           "\"tso\":{\"listen\":\"127.0.0.1:0\"},"
           "\"tablets\":[{\"name\":\"a\",\"listen\":\"127.0.0.1:0\",\"end\":\"m\"},"
           "{\"name\":\"b\",\"listen\":\"127.0.0.1:0\",\"start\":\"m\"}]}\n",
           d, zk_member(d));
  tu_write_text(cfg, text);
  pid_t run;
  json_t *ready = start_daemon(fx, cfg, "run", NULL, "run", &run);
  char *data_cfg = client_config(d, ready, "data", "\"secret\":\"data-s3cret\",");
  char *sys_cfg = client_config(d, ready, "system", "\"system_secret\":\"system-s3cret\",");
  char *wrong_cfg = client_config(d, ready, "wrong", "\"secret\":\"data-s3creT\",");
  pc_db_t *data = open_db(data_cfg), *sys = open_db(sys_cfg), *wrong = open_db(wrong_cfg);
  pc_error_t err;
  pc_gc_stats_t gs;
  assert_int_equal(put(data, "k1", "v1", &err), PC_OK);
  assert_int_equal(pc_db_gc(data, &gs, &err), PC_DENIED);
  assert_int_equal(put_system(data, "test/data", &err), PC_DENIED);
  assert_int_equal(pc_db_gc(sys, &gs, &err), PC_OK);
  assert_int_equal(put_system(sys, "test/system", &err), PC_OK);
  assert_null(pc_txn_begin(wrong, &err));
  assert_int_equal(err.code, PC_DENIED);
  if (!strstr(err.text, "wrong secret")) fail_msg("unexpected: %s", err.text);
  /* a tablet's observer set: a data client may list it, not change it */
  uint16_t port_a = port_of(endpoint(ready, NULL, "a", "listen"));
  char msg[512];
  assert_int_equal(observer_frame(data_cfg, port_a, 1, "flood", msg, sizeof msg), PC_DENIED);
  fprintf(stderr, "data client's OBSERVER add: %s\n", msg);
  if (!strstr(msg, "system identity")) fail_msg("unexpected: %s", msg);
  assert_int_equal(observers_named(data_cfg, port_a, "flood"), 0);
  assert_int_equal(observer_frame(sys_cfg, port_a, 1, "flood", msg, sizeof msg), PC_OK);
  assert_int_equal(observers_named(data_cfg, port_a, "flood"), 1);
  assert_int_equal(observer_frame(data_cfg, port_a, 0, "flood", msg, sizeof msg), PC_DENIED);
  fprintf(stderr, "data client's OBSERVER remove: %s\n", msg);
  assert_int_equal(observers_named(sys_cfg, port_a, "flood"), 1);
  assert_int_equal(observer_frame(sys_cfg, port_a, 0, "flood", msg, sizeof msg), PC_OK);
  assert_int_equal(observers_named(sys_cfg, port_a, "flood"), 0);
  /* a frame without the exchange is refused, before it is served */
  int fd = tcp_connect_from(port_of(endpoint(ready, NULL, "a", "listen")), NULL);
  pc_buf_t b = {0};
  put_frame(&b, PC_TABLET_OP_INFO, 5, NULL, 0);
  assert_int_equal(send_all(fd, b.p, b.len), 0);
  frame_t f;
  assert_int_equal(read_frame(fd, &f, 5000), 0);
  assert_int_equal(f.status, PC_DENIED);
  assert_non_null(strstr(f.body, "authentication required"));
  assert_int_equal(closed_within(fd, 5000), 1);
  close(fd);
  pc_buf_free(&b);
  pc_db_close(data);
  pc_db_close(sys);
  pc_db_close(wrong);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(data_cfg);
  free(sys_cfg);
  free(wrong_cfg);
}

/* A coordination handle (no client node) on the cluster in dir. */
static pc_coord_t *cluster_coord(const char *dir) {
  const char *base = strrchr(dir, '/');
  char root[1024];
  snprintf(root, sizeof root, "/percolator/%s", base ? base + 1 : dir);
  pc_error_t err;
  pc_coord_t *c =
      pc_coord_open(&(pc_zk_options_t){tu_zk_shared(), root, NULL, 5000, NULL}, 0, 20000, &err);
  if (!c) fail_msg("coordination: %s", err.text);
  return c;
}

/* The safe point published in ZooKeeper for the cluster in dir (0: none). */
static uint64_t published_safe_point(const char *dir) {
  pc_coord_t *c = cluster_coord(dir);
  pc_error_t err;
  uint64_t safe = 0;
  if (pc_coord_safe_point(c, 20000, &safe, &err) != PC_OK) fail_msg("safe point: %s", err.text);
  pc_coord_close(c);
  return safe;
}

/* Writes safe into the cluster's published safe point directly, as a
 * process that reaches ZooKeeper but none of the daemons could. */
static void forge_safe_point(const char *dir, uint64_t safe) {
  pc_coord_t *c = cluster_coord(dir);
  pc_error_t err;
  uint64_t published = 0;
  if (pc_coord_publish_safe_point(c, safe, 20000, &published, &err) != PC_OK)
    fail_msg("publishing: %s", err.text);
  assert_int_equal(published, safe);
  pc_coord_close(c);
}

/* A GET of "t"/row/"c" at read_ts, sent by the client of cfg to the tablet at
 * port; its value (or the refusal's message) goes into out. */
static pc_status_t get_at(const char *cfg, uint16_t port, const char *row, uint64_t read_ts,
                          char *out, size_t cap) {
  pc_error_t err;
  pc_config_t *c = pc_config_load(cfg, &err);
  assert_non_null(c);
  pc_rpc_client_t *cl = pc_config_rpc_client(c, "127.0.0.1", port, &err);
  assert_non_null(cl);
  pc_buf_t body = {0}, reply = {0};
  pc_cell_t cell = {"t", row, strlen(row), "c", 1};
  assert_int_equal(pc_wire_put_cell(&body, &cell) || pc_buf_u64(&body, read_ts), 0);
  assert_int_equal(pc_rpc_call(cl, PC_TABLET_OP_GET, body.p, body.len, 5000, &reply, &err), PC_OK);
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  pc_status_t st = (pc_status_t)pc_rd_u8(&r);
  size_t n = 0;
  const char *v = st != PC_LOCKED ? pc_rd_str(&r, &n) : NULL;
  snprintf(out, cap, "%.*s", v ? (int)n : 0, v ? v : "");
  pc_buf_free(&body);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(cl);
  pc_config_free(c);
  return st;
}

/* A data client's garbage-collection pass is refused by the tablets, and it
 * moves nothing: the safe point published in ZooKeeper stays where it was,
 * so a tablet server that restarts (and adopts the published point) still
 * serves reads below the point the data client tried. The system's pass
 * publishes its safe point. A safe point written into ZooKeeper directly,
 * above the oracle's timestamps, is not adopted by a restarted tablet. */
static void test_gc_safe_point_publication(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  const char *d = fx->dir;
  char cfg[4200], text[2048], msg[512];
  snprintf(cfg, sizeof cfg, "%s/run.json", d);
  /* no background pass: every pass here is the test's */
  snprintf(text, sizeof text,
           "{\"data_dir\":\"%s/data\",\"log\":{\"level\":\"warn\"},"
           "\"secret\":\"data-s3cret\",\"system_secret\":\"system-s3cret\",%s"
           "\"store\":{\"gc_interval_ms\":0},"
           "\"tso\":{\"listen\":\"127.0.0.1:0\"},"
           "\"tablets\":[{\"name\":\"a\",\"listen\":\"127.0.0.1:0\",\"end\":\"m\"},"
           "{\"name\":\"b\",\"listen\":\"127.0.0.1:0\",\"start\":\"m\"}]}\n",
           d, zk_member(d));
  tu_write_text(cfg, text);
  pid_t run;
  json_t *ready = start_daemon(fx, cfg, "run", NULL, "run", &run);
  /* the data client's passes keep at most a second of history */
  char *data_cfg = client_config(d, ready, "data", "\"secret\":\"data-s3cret\",");
  json_t *j = json_load_file(data_cfg, 0, NULL);
  assert_non_null(j);
  assert_int_equal(json_object_set_new(json_object_get(j, "store"), "gc_lifetime_ms",
                                       json_integer(1000)),
                   0);
  assert_int_equal(json_dump_file(j, data_cfg, 0), 0);
  json_decref(j);
  pc_db_t *data = open_db(data_cfg);
  pc_error_t err;
  assert_int_equal(put(data, "k1", "v1", &err), PC_OK);
  uint64_t old = 0; /* a snapshot that sees v1 */
  assert_int_equal(pc_db_timestamp(data, 5000, &old, &err), PC_OK);
  uint64_t before = published_safe_point(d);
  assert_true(before < old);
  /* passes until one tries a safe point above the snapshot (a second
   * later, once the client's ZooKeeper node no longer reports its put) */
  pc_gc_stats_t gs = {0};
  uint64_t end = pc_now_mono_ms() + 30000;
  do {
    pc_sleep_ms(500);
    assert_int_equal(pc_db_gc(data, &gs, &err), PC_DENIED);
    if (!strstr(err.text, "system identity")) fail_msg("unexpected: %s", err.text);
    uint64_t after = published_safe_point(d);
    if (after != before)
      fail_msg("a refused pass moved the published safe point from %llu to %llu (it tried %llu)",
               (unsigned long long)before, (unsigned long long)after,
               (unsigned long long)gs.safe_point);
  } while (gs.safe_point <= old && pc_now_mono_ms() < end);
  fprintf(stderr, "data client's pass (safe point %llu, snapshot %llu): %s\n",
          (unsigned long long)gs.safe_point, (unsigned long long)old, err.text);
  if (gs.safe_point <= old)
    fail_msg("the data client's passes tried no safe point above the snapshot %llu in 30 s",
             (unsigned long long)old);
  pc_db_close(data);
  free(data_cfg);
  /* the tablets restart and adopt the published safe point */
  tu_daemons_stop(fx, run);
  json_decref(ready);
  ready = start_daemon(fx, cfg, "run", NULL, "run2", &run);
  char *sys_cfg = client_config(d, ready, "system", "\"system_secret\":\"system-s3cret\",");
  uint16_t port_a = port_of(endpoint(ready, NULL, "a", "listen"));
  pc_status_t st = get_at(sys_cfg, port_a, "k1", old, msg, sizeof msg);
  if (st != PC_OK || strcmp(msg, "v1") != 0)
    fail_msg("a read at %llu, below the refused safe point %llu, on the restarted tablet: %s: %s",
             (unsigned long long)old, (unsigned long long)gs.safe_point, pc_status_name(st), msg);
  /* the system's pass publishes its safe point, before the tablets delete */
  pc_db_t *sys = open_db(sys_cfg);
  assert_int_equal(pc_db_gc(sys, &gs, &err), PC_OK);
  assert_true(gs.safe_point > 0);
  assert_int_equal(published_safe_point(d), gs.safe_point);
  /* a safe point written into ZooKeeper from outside, above every timestamp
   * the oracle issued: the restarted tablets do not adopt it */
  uint64_t forged = 1ull << 62;
  forge_safe_point(d, forged);
  pc_db_close(sys);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  ready = start_daemon(fx, cfg, "run", NULL, "run3", &run);
  free(sys_cfg);
  sys_cfg = client_config(d, ready, "system", "\"system_secret\":\"system-s3cret\",");
  sys = open_db(sys_cfg);
  uint64_t fresh = 0;
  assert_int_equal(pc_db_timestamp(sys, 5000, &fresh, &err), PC_OK);
  assert_true(fresh < forged);
  port_a = port_of(endpoint(ready, NULL, "a", "listen"));
  st = get_at(sys_cfg, port_a, "k1", fresh, msg, sizeof msg);
  if (st != PC_OK || strcmp(msg, "v1") != 0)
    fail_msg("a read at %llu on a tablet restarted under a forged safe point %llu: %s: %s",
             (unsigned long long)fresh, (unsigned long long)forged, pc_status_name(st), msg);
  pc_db_close(sys);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(sys_cfg);
}

/* ---- 3. private by default ------------------------------------------------------------ */

static int run_cli(const char *const *argv, char *out, size_t cap) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execv(tu_cli_path(), (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(p[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
  out[n] = '\0';
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Fails when path or anything below it can be read by group or others. */
static void check_private(const char *path, int *files) {
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  if (st.st_mode & 077) fail_msg("%s has mode %04o", path, (unsigned)(st.st_mode & 07777));
  if (!S_ISDIR(st.st_mode)) {
    (*files)++;
    return;
  }
  DIR *dir = opendir(path);
  assert_non_null(dir);
  for (struct dirent *e; (e = readdir(dir));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    check_private(sub, files);
  }
  closedir(dir);
}

static void test_private_by_default(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  char data[4200], out[4096], serving[4300], ready_path[4300];
  snprintf(data, sizeof data, "%s/data", fx->dir);
  const char *init[] = {tu_cli_path(), "--data", data, "init", NULL};
  assert_int_equal(run_cli(init, out, sizeof out), 0);
  const char *set[] = {tu_cli_path(), "--data", data, "set", "t", "r", "c", "secretive", NULL};
  assert_int_equal(run_cli(set, out, sizeof out), 0);
  /* a worker holds the store and serves it */
  char wcfg[4300], text[8600];
  snprintf(wcfg, sizeof wcfg, "%s/worker.json", fx->dir);
  snprintf(text, sizeof text,
           "{\"data_dir\":\"%s\",\"workers\":{\"plugins\":[{\"path\":\"%s\"}]}}\n", data,
           EXAMPLE_TEMPLATE);
  tu_write_text(wcfg, text);
  snprintf(ready_path, sizeof ready_path, "%s/worker.ready", fx->dir);
  pid_t parent = getpid(), pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    char logp[4300];
    snprintf(logp, sizeof logp, "%s/worker.log", fx->dir);
    int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(1);
    execl(tu_cli_path(), tu_cli_path(), "--config", wcfg, "worker", "--ready-file", ready_path,
          (char *)NULL);
    _exit(127);
  }
  fx->pids[fx->npids++] = pid;
  snprintf(serving, sizeof serving, "%s/serving.json", data);
  struct stat st;
  uint64_t end = pc_now_mono_ms() + 30000;
  while (stat(serving, &st) != 0 || stat(ready_path, &st) != 0) {
    if (pc_now_mono_ms() > end) fail_msg("the worker did not serve %s", data);
    pc_sleep_ms(10);
  }
  /* the served store: through serving.json, which only this user can read */
  const char *get[] = {tu_cli_path(), "--data", data, "get", "t", "r", "c", NULL};
  assert_int_equal(run_cli(get, out, sizeof out), 0);
  assert_string_equal(out, "secretive\n");
  assert_int_equal(stat(serving, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  json_t *sj = json_load_file(serving, 0, NULL);
  assert_non_null(sj);
  const char *secret = json_string_value(json_object_get(sj, "secret"));
  assert_non_null(secret);
  assert_int_equal(strlen(secret), 64);
  /* every file and directory of the data directory is private: LevelDB's too */
  int files = 0;
  check_private(data, &files);
  fprintf(stderr, "private: %d files under %s\n", files, data);
  assert_true(files >= 6);
  /* a client that cannot read serving.json has no secret: refused */
  uint16_t port = port_of(json_string_value(
      json_object_get(json_array_get(json_object_get(sj, "tablets"), 0), "listen")));
  int fd = tcp_connect_from(port, NULL);
  pc_buf_t b = {0};
  put_frame(&b, PC_TABLET_OP_INFO, 3, NULL, 0);
  assert_int_equal(send_all(fd, b.p, b.len), 0);
  frame_t f;
  assert_int_equal(read_frame(fd, &f, 5000), 0);
  assert_int_equal(f.status, PC_DENIED);
  close(fd);
  pc_buf_free(&b);
  json_object_del(sj, "secret");
  char stolen[4300];
  snprintf(stolen, sizeof stolen, "%s/stolen.json", fx->dir);
  assert_int_equal(json_dump_file(sj, stolen, 0), 0);
  json_decref(sj);
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(stolen, &err);
  assert_non_null(db);
  assert_null(pc_txn_begin(db, &err));
  if (err.code != PC_DENIED) fail_msg("without the secret: %s (%s)", pc_status_name(err.code), err.text);
  pc_db_close(db);
  /* stopping leaves serving.json, still private: a worker started again
   * takes its ports and its secret, and clients trust it only while a
   * worker holds the directory's lock */
  tu_daemons_stop(fx, pid);
  assert_int_equal(stat(serving, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  /* and the documentation says so, in both places that speak of it */
  static const char *const docs[] = {"docs/SECURITY.md", "docs/ARCHITECTURE.md"};
  for (size_t i = 0; i < 2; i++) {
    char path[4300], *doc;
    snprintf(path, sizeof path, "%s/%s", PC_SOURCE_DIR, docs[i]);
    FILE *df = fopen(path, "r");
    assert_non_null(df);
    assert_non_null(doc = calloc(1, 1 << 20));
    size_t dn = fread(doc, 1, (1 << 20) - 1, df);
    fclose(df);
    doc[dn] = '\0';
    for (char *c = doc; *c; c++)
      if (*c == '\n') *c = ' '; /* sentences run over lines */
    if ((!strstr(doc, "stays when the worker stops") && !strstr(doc, "never removed")) ||
        strstr(doc, "removed when the worker stops"))
      fail_msg("%s does not say that serving.json stays when the worker stops", docs[i]);
    free(doc);
  }

  /* the library alone (no umask of the CLI's): directories 0700, its files 0600 */
  char lib[4300];
  snprintf(lib, sizeof lib, "%s/lib", fx->dir);
  mode_t old = umask(022);
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  db = pc_db_open(o, lib, &err);
  pc_options_destroy(o);
  assert_non_null(db);
  pc_db_close(db);
  umask(old);
  static const char *const names[] = {"", "/store", "/FORMAT", "/oracle", "/store/CURRENT"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char p[4400];
    snprintf(p, sizeof p, "%s%s", lib, names[i]);
    assert_int_equal(stat(p, &st), 0);
    if (st.st_mode & 077) fail_msg("%s has mode %04o", p, (unsigned)(st.st_mode & 07777));
  }
}

/* ---- 4. resources ------------------------------------------------------------------ */

/* The tablet's limits in this test (its configuration below). */
#define T_MAX_CONNECTIONS 256
#define T_FRAME_MB 8
#define T_REQUEST_MB 16
#define T_REPLY_MB 16
#define T_WORKERS 4 /* the daemons' handler threads */
#define T_CACHE_MB 4
#define T_WRITE_BUFFER_MB 4
#define T_META_CACHE_MB 4
#define T_HTTP_CONNECTIONS 16

/* docs/ARCHITECTURE.md, "Memory stays bounded": what one protocol port (over
 * TCP) may hold, what the HTTP port may, and the store's caches, in KiB, over
 * the process as it began serving (base_kib: code, libraries, threads, the
 * row latches). */
static long documented_bound_kib(long base_kib, long store_kib) {
  long conn = 20; /* per connection over TCP */
  long frame = T_FRAME_MB * 1024L, req = T_REQUEST_MB * 1024L, rep = T_REPLY_MB * 1024L;
  long rpc = T_MAX_CONNECTIONS * conn + 2 * (req > frame ? req : frame) + frame + 2 * rep +
             3L * T_WORKERS * frame;
  long http = T_HTTP_CONNECTIONS * 17L + 64; /* request heads, and a metrics page */
  long store = (T_CACHE_MB + 2 * T_WRITE_BUFFER_MB + T_META_CACHE_MB) * 1024L + store_kib / 50;
  return base_kib + rpc + http + store;
}

typedef struct sampler {
  pid_t pid;
  atomic_int stop;
  atomic_long max_kib;
} sampler_t;

static void *sample_main(void *arg) {
  sampler_t *s = arg;
  while (!atomic_load(&s->stop)) {
    long kib = rss_kib(s->pid);
    if (kib > atomic_load(&s->max_kib)) atomic_store(&s->max_kib, kib);
    pc_sleep_ms(20);
  }
  return NULL;
}

typedef struct committer {
  pc_db_t *db;
  atomic_int stop;
  int ok, failed;
  char failure[PC_ERROR_TEXT + 32];
} committer_t;

static void *commit_main(void *arg) {
  committer_t *c = arg;
  for (int i = 0; !atomic_load(&c->stop); i++) {
    char row[32], val[32];
    snprintf(row, sizeof row, "n%03d", i % 100);
    snprintf(val, sizeof val, "%d", i);
    pc_error_t err;
    if (put(c->db, row, val, &err) == PC_OK) {
      c->ok++;
    } else {
      c->failed++;
      snprintf(c->failure, sizeof c->failure, "%s: %s", pc_status_name(err.code), err.text);
    }
    pc_sleep_ms(5);
  }
  return NULL;
}

/* A peer that authenticates, pipelines raw scans of the whole table and
 * never reads a reply. */
typedef struct nonreader {
  uint16_t port;
  int fd, sent;
} nonreader_t;

static void *nonreader_main(void *arg) {
  nonreader_t *n = arg;
  pc_buf_t scan = {0}, b = {0};
  (void)(pc_wire_put_opt(&scan, "t", 1) || pc_wire_put_opt(&scan, NULL, 0) ||
         pc_wire_put_opt(&scan, NULL, 0));
  for (int i = 0; i < 300; i++) {
    b.len = 0;
    put_frame(&b, PC_TABLET_OP_RAW_SCAN, (uint64_t)i + 1, scan.p, scan.len);
    if (send_all(n->fd, b.p, b.len) != 0) break; /* closed by the server */
    n->sent++;
  }
  pc_buf_free(&scan);
  pc_buf_free(&b);
  return NULL;
}

static void raise_fd_limit(void) {
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < 2300) skip(); /* this test needs 2,000 sockets at once */
}

static long dir_kib(const char *path) {
  char cmd[4400], out[64] = "0";
  snprintf(cmd, sizeof cmd, "du -sk '%s'", path);
  FILE *p = popen(cmd, "r");
  if (p && fgets(out, sizeof out, p)) {
  }
  if (p) pclose(p);
  return atol(out);
}

static void test_resources(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  raise_fd_limit();
  const char *d = fx->dir;
  char cfg0[4200], cfg[4200], text[4096], common[2048];
  snprintf(common, sizeof common,
           "\"data_dir\":\"%s/data\",\"log\":{\"level\":\"warn\"},"
           "\"secret\":\"data-s3cret\",\"system_secret\":\"system-s3cret\","
           "\"store\":{\"cache_mb\":%d,\"write_buffer_mb\":%d,\"meta_cache_mb\":%d,"
           "\"lock_ttl_ms\":3000,\"gc_interval_ms\":0},"
           "\"limits\":{\"max_connections\":%d,\"max_connections_per_peer\":200,"
           "\"max_unauthenticated\":32,\"auth_timeout_ms\":2000,\"frame_timeout_ms\":3000,"
           "\"max_frame_mb\":%d,\"request_memory_mb\":%d,\"reply_memory_mb\":%d,"
           "\"reply_timeout_ms\":3000,\"http_max_connections\":%d,\"http_timeout_ms\":2000},%s",
           d, T_CACHE_MB, T_WRITE_BUFFER_MB, T_META_CACHE_MB, T_MAX_CONNECTIONS, T_FRAME_MB,
           T_REQUEST_MB, T_REPLY_MB, T_HTTP_CONNECTIONS, zk_member(d));
  snprintf(cfg0, sizeof cfg0, "%s/tso.json", d);
  snprintf(text, sizeof text,
           "{%s\"tso\":{\"listen\":\"127.0.0.1:0\"},"
           "\"tablets\":[{\"name\":\"t1\",\"listen\":\"127.0.0.1:0\"}]}\n",
           common);
  tu_write_text(cfg0, text);
  pid_t tso_pid, tab_pid;
  json_t *tso_ready = start_daemon(fx, cfg0, "tso", NULL, "tso", &tso_pid);
  snprintf(cfg, sizeof cfg, "%s/tablet.json", d);
  snprintf(text, sizeof text,
           "{%s\"tso\":{\"listen\":\"%s\"},"
           "\"tablets\":[{\"name\":\"t1\",\"listen\":\"127.0.0.1:0\",\"http\":\"127.0.0.1:0\"}]}\n",
           common, endpoint(tso_ready, "tso", NULL, "listen"));
  tu_write_text(cfg, text);
  json_t *ready = start_daemon(fx, cfg, "tablet", "t1", "tablet", &tab_pid);
  const char *listen = endpoint(ready, NULL, "t1", "listen");
  const char *http = endpoint(ready, NULL, "t1", "http");
  uint16_t port = port_of(listen), hport = port_of(http);
  char client[4200];
  snprintf(client, sizeof client, "%s/client.json", d);
  snprintf(text, sizeof text,
           "{\"secret\":\"data-s3cret\",\"store\":{\"timeout_ms\":20000},%s"
           "\"tso\":{\"listen\":\"%s\"},\"tablets\":[{\"name\":\"t1\",\"listen\":\"%s\"}]}\n",
           zk_member(d), endpoint(tso_ready, "tso", NULL, "listen"), listen);
  tu_write_text(client, text);
  long base_kib = rss_kib(tab_pid);

  /* a table whose raw scan is a few MB */
  pc_db_t *db = open_db(client);
  pc_error_t err;
  static char value[1025];
  memset(value, 'v', 1024);
  for (int k = 0; k < 30; k++) {
    pc_txn_t *t = pc_txn_begin(db, &err);
    assert_non_null(t);
    for (int i = 0; i < 100; i++) {
      char row[32];
      snprintf(row, sizeof row, "r%05d", k * 100 + i);
      assert_int_equal(pc_txn_set(t, "t", row, strlen(row), "c", 1, value, 1024, &err), PC_OK);
    }
    assert_int_equal(pc_txn_commit(t, &err), PC_OK);
    pc_txn_destroy(t);
  }
  char store[4300];
  snprintf(store, sizeof store, "%s/data/tablet-t1", d);
  long bound = documented_bound_kib(base_kib, dir_kib(store));

  static sampler_t sm;
  memset(&sm, 0, sizeof sm);
  sm.pid = tab_pid;
  pthread_t st;
  assert_int_equal(pthread_create(&st, NULL, sample_main, &sm), 0);
  static committer_t cm;
  memset(&cm, 0, sizeof cm);
  cm.db = db;
  pthread_t ct;
  assert_int_equal(pthread_create(&ct, NULL, commit_main, &cm), 0);

  /* 1. two peers pipelining raw scans and never reading a reply */
  nonreader_t nr[2];
  pthread_t nt[2];
  for (int i = 0; i < 2; i++) {
    nr[i] = (nonreader_t){port, tcp_connect_from(port, NULL), 0};
    assert_true(nr[i].fd >= 0);
    int small = 4096;
    setsockopt(nr[i].fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    assert_int_equal(raw_authenticate(nr[i].fd, "data-s3cret", 0), 0);
    assert_int_equal(pthread_create(&nt[i], NULL, nonreader_main, &nr[i]), 0);
  }
  pc_sleep_ms(5000); /* past limits.reply_timeout_ms */
  for (int i = 0; i < 2; i++) {
    shutdown(nr[i].fd, SHUT_RDWR);
    pthread_join(nt[i], NULL);
    close(nr[i].fd);
  }
  long after_nonreaders = atomic_load(&sm.max_kib);

  /* 2. a thousand idle connections, from five addresses of a stranger's */
  static int idle[1000];
  int opened = 0;
  for (int i = 0; i < 1000; i++) {
    char from[32];
    snprintf(from, sizeof from, "127.0.0.%d", 2 + i % 5);
    if ((idle[i] = tcp_connect_from(port, from)) >= 0) opened++;
  }
  pc_sleep_ms(500);
  int ok_before = cm.ok;
  pc_db_t *fresh = open_db(client); /* a new client gets in meanwhile */
  assert_int_equal(put(fresh, "fresh", "in", &err), PC_OK);
  pc_db_close(fresh);
  pc_sleep_ms(1500);
  assert_true(cm.ok > ok_before); /* and the old one is served */
  for (int i = 0; i < 1000; i++)
    if (idle[i] >= 0) close(idle[i]);

  /* 3. half-sent huge frames: unauthenticated ones are cut off at their
   * header; authenticated ones share request_memory until their deadline */
  int half[32];
  pc_buf_t b = {0};
  static char mib[1 << 20];
  for (int i = 0; i < 32; i++) {
    half[i] = tcp_connect_from(port, i < 16 ? "127.0.0.4" : NULL);
    assert_true(half[i] >= 0);
    if (i >= 16) assert_int_equal(raw_authenticate(half[i], "data-s3cret", 0), 0);
    b.len = 0;
    assert_int_equal(pc_buf_u32(&b, (T_FRAME_MB << 20) - 1) || pc_buf_u8(&b, PC_RPC_VERSION_1) ||
                         pc_buf_u8(&b, PC_TABLET_OP_PREWRITE) || pc_buf_u8(&b, 0) ||
                         pc_buf_u64(&b, 9),
                     0);
    if (send_all(half[i], b.p, b.len) != 0) continue;
    for (int k = 0; k < 4; k++)
      if (send_all(half[i], mib, sizeof mib) != 0) break;
  }
  pc_sleep_ms(500);
  ok_before = cm.ok;
  pc_sleep_ms(1500);
  assert_true(cm.ok > ok_before);
  for (int i = 0; i < 16; i++) assert_int_equal(closed_within(half[i], 5000), 1);
  for (int i = 0; i < 32; i++) close(half[i]);
  pc_buf_free(&b);

  /* 4. a thousand HTTP connections */
  for (int i = 0; i < 1000; i++) idle[i] = tcp_connect_from(hport, "127.0.0.3");
  pc_sleep_ms(500);
  int fd = tcp_connect_from(hport, NULL);
  const char req[] = "GET /health HTTP/1.0\r\n\r\n";
  assert_int_equal(send_all(fd, req, sizeof req - 1), 0);
  char resp[256] = {0};
  assert_int_equal(recv_all(fd, resp, 12, 5000), 0);
  assert_memory_equal(resp, "HTTP/1.1 200", 12);
  close(fd);
  ok_before = cm.ok;
  pc_sleep_ms(1000);
  assert_true(cm.ok > ok_before);
  for (int i = 0; i < 1000; i++)
    if (idle[i] >= 0) close(idle[i]);

  atomic_store(&cm.stop, 1);
  pthread_join(ct, NULL);
  atomic_store(&sm.stop, 1);
  pthread_join(st, NULL);
  long most = atomic_load(&sm.max_kib);
  fprintf(stderr,
          "tablet RSS: %ld KiB at start, %ld KiB at most (%ld after the non-readers); the "
          "documented bound for its limits: %ld KiB; %d commits meanwhile (%d failed); %d idle "
          "connections opened\n",
          base_kib, most, after_nonreaders, bound, cm.ok, cm.failed, opened);
  fprintf(stderr, "refused or closed by a limit: %.0f; failed authentications: %.0f\n",
          metric(http, "percolator_rpc_connections_refused_total"),
          metric(http, "percolator_rpc_auth_failures_total"));
  if (cm.failed) fail_msg("the client failed %d times: %s", cm.failed, cm.failure);
  assert_true(most > 0);
#if defined(__SANITIZE_ADDRESS__)
  /* AddressSanitizer keeps freed memory in quarantine and adds its shadow:
   * the daemon's RSS is not its own memory there, so the bound is checked by
   * the plain build alone */
  (void)bound;
#else
  if (most > bound) fail_msg("the tablet used %ld KiB, over the bound of %ld KiB", most, bound);
#endif
  /* it still serves, and its last values are there */
  pc_txn_t *t = pc_txn_begin(db, &err);
  assert_non_null(t);
  char *v = tu_get(t, "t", "r00042", "c");
  assert_non_null(v);
  assert_int_equal(strlen(v), 1024);
  free(v);
  pc_txn_destroy(t);
  pc_db_close(db);
  tu_daemons_stop(fx, tab_pid);
  tu_daemons_stop(fx, tso_pid);
  json_decref(ready);
  json_decref(tso_ready);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_certificates, setup, teardown),
      cmocka_unit_test_setup_teardown(test_secrets, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_safe_point_publication, setup, teardown),
      cmocka_unit_test_setup_teardown(test_private_by_default, setup, teardown),
      cmocka_unit_test_setup_teardown(test_resources, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
