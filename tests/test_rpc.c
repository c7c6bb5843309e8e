/* test_rpc.c — tests of the protocol library (net/rpc.h): round trips,
 * many concurrent calls multiplexed on one connection with replies out of
 * order, remote errors, timeouts, reconnection after a server restart,
 * authentication, in-flight limits, and hostile raw-socket clients (bad
 * lengths and versions, unknown ops, random bytes, slow senders) while a
 * well-behaved client keeps being served. Every server listens on
 * 127.0.0.1 port 0. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/deadline.h"
#include "base/error.h"
#include "net/rpc.h"
#include "net/tls.h"
#include "tests/testutil.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the test service ---------------------------------------------------- */

#define OP_ECHO 0x10      /* replies with the body */
#define OP_ECHO_SLOW 0x11 /* sleeps 100..500 us, then echoes */
#define OP_FAIL 0x12      /* PC_CONFLICT "conflict on <body>" */
#define OP_SLEEP 0x13     /* body: decimal ms to sleep; replies "slept" */
#define OP_CONC 0x15      /* records how many run at once, sleeps 20 ms */
#define OP_WHO 0x16       /* replies with an identity of the thread running the handler */
#define OP_ROLE 0x17      /* replies with the caller's role (u8) */
#define OP_WAITS 0x18     /* would wait where it may not (pc_nowait_refuse): replies "io", else "worker" */
/* anything else: PC_INVALID "unknown opcode 0xNN" (as services should) */

static atomic_int conc_now, conc_max, waits_runs;

static pc_status_t handler(void *ctx, uint8_t op, const char *body, size_t len, pc_buf_t *reply,
                           pc_error_t *err) {
  static _Thread_local unsigned seed;
  (void)ctx;
  switch (op) {
  case OP_ECHO:
    pc_buf_append(reply, body, len);
    return PC_OK;
  case OP_ECHO_SLOW: {
    if (!seed) seed = (unsigned)(uintptr_t)&seed ^ (unsigned)time(NULL);
    struct timespec t = {0, (long)(100 + rand_r(&seed) % 400) * 1000L};
    nanosleep(&t, NULL);
    pc_buf_append(reply, body, len);
    return PC_OK;
  }
  case OP_FAIL:
    return pc_error_set(err, PC_CONFLICT, "conflict on %.*s", (int)len, body);
  case OP_SLEEP: {
    char tmp[16] = {0};
    memcpy(tmp, body, len < 15 ? len : 15);
    pc_sleep_ms((uint32_t)atoi(tmp));
    pc_buf_append(reply, "slept", 5);
    return PC_OK;
  }
  case OP_CONC: {
    int now = atomic_fetch_add(&conc_now, 1) + 1;
    int m = atomic_load(&conc_max);
    while (now > m && !atomic_compare_exchange_weak(&conc_max, &m, now)) {
    }
    pc_sleep_ms(20);
    atomic_fetch_sub(&conc_now, 1);
    return PC_OK;
  }
  case OP_ROLE: {
    unsigned char role = (unsigned char)pc_rpc_current_role();
    pc_buf_append(reply, &role, 1);
    return PC_OK;
  }
  case OP_WAITS:
    atomic_fetch_add(&waits_runs, 1);
    if (pc_nowait_refuse()) pc_buf_append(reply, "io", 2); /* dropped by the server */
    else pc_buf_append(reply, "worker", 6);
    return PC_OK;
  case OP_WHO: {
    static _Thread_local char here;
    uintptr_t me = (uintptr_t)&here;
    pc_buf_append(reply, &me, sizeof me);
    return PC_OK;
  }
  default:
    return pc_error_set(err, PC_INVALID, "unknown opcode 0x%02x", op);
  }
}

static int who_runs_inline(uint8_t op) { return op == OP_WHO || op == OP_WAITS; }

static pc_rpc_server_options_t base_opts(void) {
  pc_rpc_server_options_t o;
  memset(&o, 0, sizeof o);
  o.name = "test";
  o.host = "127.0.0.1";
  o.port = 0;
  o.workers = 4;
  return o;
}

static pc_rpc_server_t *start(const pc_rpc_server_options_t *o) {
  pc_error_t err;
  pc_rpc_server_t *s = pc_rpc_server_start(o, handler, NULL, &err);
  if (!s) fail_msg("server start: %s", err.text);
  assert_true(pc_rpc_server_port(s) != 0);
  return s;
}

static pc_rpc_client_t *client(pc_rpc_server_t *s, const char *secret) {
  pc_error_t err;
  pc_rpc_auth_t auth = {.secret = secret};
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(s), &auth, &err);
  if (!c) fail_msg("client create: %s", err.text);
  return c;
}

/* Calls OP_ECHO with text and checks the reply. */
static void echo_ok(pc_rpc_client_t *c, const char *text, uint32_t timeout_ms) {
  pc_buf_t r = {0};
  pc_error_t err;
  pc_status_t st = pc_rpc_call(c, OP_ECHO, text, strlen(text), timeout_ms, &r, &err);
  if (st != PC_OK) fail_msg("echo %s: %s (%s)", text, pc_status_name(st), err.text);
  assert_int_equal(r.len, strlen(text));
  assert_memory_equal(r.p, text, r.len);
  pc_buf_free(&r);
}

/* ---- raw sockets ------------------------------------------------------------ */

static int raw_connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int raw_send(int fd, const void *p, size_t n) {
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

/* A frame laid out as version 1 (the version byte as given): what a client
 * from before request budgets sends, which servers still serve. */
static size_t raw_frame(unsigned char *out, uint8_t version, uint8_t op, uint64_t id,
                        const void *body, size_t len) {
  uint32_t flen = (uint32_t)(PC_RPC_HEADER_V1 + len);
  out[0] = (unsigned char)(flen >> 24);
  out[1] = (unsigned char)(flen >> 16);
  out[2] = (unsigned char)(flen >> 8);
  out[3] = (unsigned char)flen;
  out[4] = version;
  out[5] = op;
  out[6] = 0;
  for (int i = 0; i < 8; i++) out[7 + i] = (unsigned char)(id >> (56 - 8 * i));
  if (len) memcpy(out + 15, body, len);
  return 15 + len;
}

/* Reads exactly n bytes within timeout_ms: 0, or -1 on EOF, error or timeout. */
static int raw_read(int fd, void *p, size_t n, int timeout_ms) {
  char *b = p;
  while (n) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = poll(&pf, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    ssize_t got = recv(fd, b, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    b += got;
    n -= (size_t)got;
  }
  return 0;
}

typedef struct reply {
  uint8_t op, status;
  uint64_t id;
  char body[512];
  size_t len;
} reply_t;

static int raw_read_frame(int fd, reply_t *r, int timeout_ms) {
  unsigned char h[15];
  if (raw_read(fd, h, 15, timeout_ms) != 0) return -1;
  uint32_t flen = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
  assert_true(flen >= PC_RPC_HEADER_V1);
  assert_int_equal(h[4], PC_RPC_VERSION_1); /* the version of the request (or of a refusal) */
  r->op = h[5];
  r->status = h[6];
  r->id = 0;
  for (int i = 0; i < 8; i++) r->id = r->id << 8 | h[7 + i];
  r->len = flen - PC_RPC_HEADER_V1;
  assert_true(r->len < sizeof r->body);
  if (r->len && raw_read(fd, r->body, r->len, timeout_ms) != 0) return -1;
  r->body[r->len] = '\0';
  return 0;
}

/* 1 when the server closes the connection within timeout_ms (input discarded). */
static int raw_wait_closed(int fd, int timeout_ms) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long left = timeout_ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = poll(&pf, 1, (int)left);
    if (r <= 0) continue;
    char buf[4096];
    ssize_t got = recv(fd, buf, sizeof buf, 0);
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return 1;
  }
}

/* Expects an error reply (status PC_INVALID, text containing what) and then
 * the connection closed. */
static void expect_fault_and_close(int fd, const char *what) {
  reply_t r;
  assert_int_equal(raw_read_frame(fd, &r, 5000), 0);
  assert_int_equal(r.status, PC_INVALID);
  assert_true(r.op & PC_RPC_OP_REPLY);
  if (!strstr(r.body, what)) fail_msg("error reply \"%s\" does not mention \"%s\"", r.body, what);
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
}

static void wait_stats(pc_rpc_server_t *s, int (*pred)(const pc_rpc_server_stats_t *, uint64_t),
                       uint64_t arg) {
  pc_rpc_server_stats_t st;
  /* a bound on the wait, not a time the server must meet: 30 s, for a
   * loaded machine (a server that never gets there fails all the same) */
  for (int i = 0; i < 3000; i++) {
    pc_rpc_server_stats(s, &st);
    if (pred(&st, arg)) return;
    pc_sleep_ms(10);
  }
  pc_rpc_server_stats(s, &st);
  fail_msg("stats never matched: accepted %llu open %llu requests %llu protocol_errors %llu",
           (unsigned long long)st.connections_accepted,
           (unsigned long long)st.connections_open, (unsigned long long)st.requests,
           (unsigned long long)st.protocol_errors);
}

static int open_is(const pc_rpc_server_stats_t *st, uint64_t n) {
  return st->connections_open == n;
}

static int errors_at_least(const pc_rpc_server_stats_t *st, uint64_t n) {
  return st->protocol_errors >= n;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_echo(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  echo_ok(c, "hello", 5000);
  echo_ok(c, "", 5000);

  /* a body of 1 MiB with every byte value */
  size_t n = 1u << 20;
  char *big = malloc(n);
  assert_non_null(big);
  for (size_t i = 0; i < n; i++) big[i] = (char)(i * 7);
  pc_buf_t r = {0};
  pc_error_t err;
  assert_int_equal(pc_rpc_call(c, OP_ECHO, big, n, 5000, &r, &err), PC_OK);
  assert_int_equal(r.len, n);
  assert_memory_equal(r.p, big, n);
  pc_buf_free(&r);
  free(big);

  /* PING is answered by the library */
  assert_int_equal(pc_rpc_call(c, PC_RPC_OP_PING, NULL, 0, 5000, &r, &err), PC_OK);
  assert_int_equal(r.len, 0);
  /* ops a client may not send */
  assert_int_equal(pc_rpc_call(c, PC_RPC_OP_HELLO, "x", 1, 5000, &r, &err), PC_INVALID);
  assert_int_equal(pc_rpc_call(c, 0x90, NULL, 0, 5000, &r, &err), PC_INVALID);

  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 1);
  assert_int_equal(st.connections_open, 1);
  assert_true(st.requests >= 4);
  assert_true(st.bytes_in > n && st.bytes_out > n);
  assert_int_equal(st.protocol_errors, 0);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

struct conc_arg {
  pc_rpc_client_t *c;
  int thread;
  int ok;
};

static void *conc_main(void *p) {
  struct conc_arg *a = p;
  for (int i = 0; i < 2000; i++) {
    char msg[64];
    int n = snprintf(msg, sizeof msg, "thread %d call %d", a->thread, i);
    pc_buf_t r = {0};
    pc_error_t err;
    pc_status_t st = pc_rpc_call(a->c, OP_ECHO_SLOW, msg, (size_t)n, 30000, &r, &err);
    if (st == PC_OK && r.len == (size_t)n && memcmp(r.p, msg, (size_t)n) == 0) a->ok++;
    else fprintf(stderr, "call %d/%d: %s %s\n", a->thread, i, pc_status_name(st), err.text);
    pc_buf_free(&r);
  }
  return NULL;
}

static void test_concurrent_out_of_order(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.workers = 8;
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  pthread_t t[8];
  struct conc_arg a[8];
  for (int i = 0; i < 8; i++) {
    a[i] = (struct conc_arg){.c = c, .thread = i};
    assert_int_equal(pthread_create(&t[i], NULL, conc_main, &a[i]), 0);
  }
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 8; i++) assert_int_equal(a[i].ok, 2000);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 1); /* one multiplexed connection */
  assert_int_equal(st.requests, 16000);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

struct who_arg {
  pc_rpc_client_t *c;
  uintptr_t first;
  int same, ok;
};

static void *who_main(void *p) {
  struct who_arg *a = p;
  for (int i = 0; i < 500; i++) {
    pc_buf_t r = {0};
    pc_error_t err;
    if (pc_rpc_call(a->c, OP_WHO, NULL, 0, 30000, &r, &err) == PC_OK && r.len == sizeof(uintptr_t)) {
      uintptr_t who;
      memcpy(&who, r.p, sizeof who);
      if (!a->first) a->first = who;
      a->same += who == a->first;
      a->ok++;
    }
    pc_buf_free(&r);
  }
  return NULL;
}

/* An op marked runs_inline is served on the I/O thread: from 4 callers at
 * once, every call runs on one and the same thread; other ops still work. */
static void test_inline_ops(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.runs_inline = who_runs_inline;
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  pthread_t t[4];
  struct who_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (struct who_arg){.c = c};
    assert_int_equal(pthread_create(&t[i], NULL, who_main, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(a[i].ok, 500);
    assert_int_equal(a[i].same, 500);
    assert_true(a[i].first == a[0].first);
  }
  echo_ok(c, "workers still serve the rest", 10000);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.inline_served, 2000);
  assert_int_equal(st.inline_deferred, 0);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

/* An op that runs inline but would have to wait there (pc_nowait_refuse)
 * is run again from the start by a worker, and only the worker's reply is
 * sent; outside the I/O thread nothing is refused. */
static void test_inline_op_that_would_wait(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.runs_inline = who_runs_inline;
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  atomic_store(&waits_runs, 0);
  for (int i = 0; i < 50; i++) {
    pc_buf_t r = {0};
    pc_error_t err;
    assert_int_equal(pc_rpc_call(c, OP_WAITS, NULL, 0, 10000, &r, &err), PC_OK);
    assert_int_equal(r.len, 6);
    assert_memory_equal(r.p, "worker", 6);
    pc_buf_free(&r);
  }
  assert_int_equal(atomic_load(&waits_runs), 100); /* once refused, once served */
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.inline_deferred, 50);
  assert_int_equal(st.inline_served, 0);
  assert_int_equal(pc_nowait_refuse(), 0); /* this thread may wait */
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

static void test_remote_error(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  pc_buf_t r = {0};
  pc_error_t err;
  assert_int_equal(pc_rpc_call(c, OP_FAIL, "row7", 4, 5000, &r, &err), PC_CONFLICT);
  assert_int_equal(err.code, PC_CONFLICT);
  assert_string_equal(err.text, "conflict on row7");
  assert_int_equal(r.len, 0);
  /* an op the handler rejects, and ops the library rejects: connection stays */
  assert_int_equal(pc_rpc_call(c, 0x14, NULL, 0, 5000, &r, &err), PC_INVALID);
  assert_string_equal(err.text, "unknown opcode 0x14");
  assert_int_equal(pc_rpc_call(c, 0x05, NULL, 0, 5000, &r, &err), PC_INVALID);
  assert_string_equal(err.text, "unknown opcode 0x05");
  echo_ok(c, "still fine", 5000);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 1);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

static void test_timeout(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  echo_ok(c, "warm up", 5000);
  pc_buf_t r = {0};
  pc_error_t err;
  assert_int_equal(pc_rpc_call(c, OP_SLEEP, "400", 3, 50, &r, &err), PC_TIMEOUT);
  assert_non_null(strstr(err.text, "127.0.0.1:"));
  assert_int_equal(r.len, 0);
  echo_ok(c, "after the timeout", 5000); /* served while the slow one still runs */
  pc_sleep_ms(600);                      /* its late reply arrives and is dropped */
  echo_ok(c, "after the late reply", 5000);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 1);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

struct slow_call {
  pc_rpc_client_t *c;
  pc_status_t st;
  char reply[16];
};

static void *slow_call_main(void *p) {
  struct slow_call *a = p;
  pc_buf_t r = {0};
  pc_error_t err;
  a->st = pc_rpc_call(a->c, OP_SLEEP, "300", 3, 10000, &r, &err);
  if (r.len < sizeof a->reply) memcpy(a->reply, r.p ? r.p : "", r.len);
  pc_buf_free(&r);
  return NULL;
}

static void test_stop_restart(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  pc_rpc_client_t *c = client(s, NULL);
  echo_ok(c, "one", 5000);

  /* stopping waits for the request being served and delivers its reply */
  struct slow_call a = {.c = c};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, slow_call_main, &a), 0);
  pc_sleep_ms(100);
  pc_rpc_server_stop(s);
  pthread_join(t, NULL);
  assert_int_equal(a.st, PC_OK);
  assert_string_equal(a.reply, "slept");

  /* nobody listens: PC_UNAVAILABLE naming the endpoint. (A call racing with
   * the server's close of the connection fails as "connection lost"; once
   * the client has seen the close, calls say "cannot reach".) */
  pc_buf_t r = {0};
  pc_error_t err;
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%u", port);
  assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 300, &r, &err), PC_UNAVAILABLE);
  if (!strstr(err.text, ep)) fail_msg("message \"%s\" should name %s", err.text, ep);
  pc_sleep_ms(50);
  int sent = -1;
  assert_int_equal(pc_rpc_call_sent(c, OP_ECHO, "x", 1, 300, &r, &sent, &err), PC_UNAVAILABLE);
  if (!strstr(err.text, ep) || !strstr(err.text, "cannot reach") || !strstr(err.text, "refused"))
    fail_msg("message \"%s\" should say cannot reach %s: connection refused", err.text, ep);
  assert_int_equal(sent, 0); /* refused: the request never left, so it had no effect */

  /* restarted on the same port: the client reconnects by itself */
  o.port = port;
  s = start(&o);
  assert_int_equal(pc_rpc_server_port(s), port);
  echo_ok(c, "two", 5000);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

/* A port of 127.0.0.1 that nobody listens on while fd stays open: bound,
 * not listening, so a connection to it is refused and no other socket can
 * take the port meanwhile. */
static int unlistened_port(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

/* fail_on_refusal: a call whose connection is refused fails at once,
 * however long its timeout, unsent and naming the endpoint, and later calls
 * try again, so a server that comes up is found. Without the option a call
 * waits through refusals: one made before the server comes up reaches it. */
static void test_fail_on_refusal(void **state) {
  (void)state;
  uint16_t port;
  int hold = unlistened_port(&port);
  char ep[64], want[96];
  snprintf(ep, sizeof ep, "127.0.0.1:%u", port);
  snprintf(want, sizeof want, "connection to %s refused", ep);
  pc_error_t err;
  pc_rpc_client_options_t opts = {.fail_on_refusal = 1};
  pc_rpc_client_t *fast = pc_rpc_client_create_opts("127.0.0.1", port, NULL, &opts, &err);
  pc_rpc_client_t *patient = pc_rpc_client_create("127.0.0.1", port, NULL, &err);
  assert_non_null(fast);
  assert_non_null(patient);
  assert_int_equal(pc_rpc_client_refused(fast), 0); /* no attempt yet */

  /* an hour's timeout: only the refusal can end these calls */
  pc_buf_t r = {0};
  for (int i = 0; i < 2; i++) { /* the second call makes an attempt of its own */
    int sent = -1;
    pc_status_t st = pc_rpc_call_sent(fast, OP_ECHO, "x", 1, 3600000, &r, &sent, &err);
    if (st != PC_UNAVAILABLE || !strstr(err.text, want))
      fail_msg("call %d to nobody: %s: %s (wanted unavailable: %s)", i, pc_status_name(st),
               st == PC_OK ? "" : err.text, want);
    assert_int_equal(sent, 0);
    assert_int_equal(pc_rpc_client_refused(fast), ECONNREFUSED);
  }
  /* several calls waiting for one attempt all fail with it */
  pc_rpc_pending_t *p[3];
  for (int i = 0; i < 3; i++) {
    p[i] = pc_rpc_start(fast, OP_ECHO, "y", 1, 3600000, &err);
    assert_non_null(p[i]);
  }
  for (int i = 0; i < 3; i++) {
    assert_int_equal(pc_rpc_finish(p[i], &r, NULL, &err), PC_UNAVAILABLE);
    if (!strstr(err.text, want)) fail_msg("call %d: %s (wanted %s)", i, err.text, want);
  }

  /* without the option a call outlives the refusals: the server that comes
   * up within its timeout answers it */
  pc_rpc_pending_t *waiting = pc_rpc_start(patient, OP_ECHO, "late", 4, 60000, &err);
  assert_non_null(waiting);
  for (int i = 0; i < 6000 && pc_rpc_client_refused(patient) == 0; i++) pc_sleep_ms(10);
  assert_int_equal(pc_rpc_client_refused(patient), ECONNREFUSED);
  close(hold);
  pc_rpc_server_options_t o = base_opts();
  o.port = port;
  pc_rpc_server_t *s = start(&o);
  r.len = 0;
  pc_status_t st = pc_rpc_finish(waiting, &r, NULL, &err);
  if (st != PC_OK) fail_msg("the call waiting through refusals: %s: %s", pc_status_name(st), err.text);
  assert_int_equal(r.len, 4);
  assert_memory_equal(r.p, "late", 4);
  assert_int_equal(pc_rpc_client_refused(patient), 0);

  /* and the option's client finds the server on its next call */
  echo_ok(fast, "back", 60000);
  assert_int_equal(pc_rpc_client_refused(fast), 0);
  pc_buf_free(&r);
  pc_rpc_client_destroy(fast);
  pc_rpc_client_destroy(patient);
  pc_rpc_server_stop(s);
}

/* A fake server that accepts one connection, reads a little and drops it. */
static void *dropper_main(void *p) {
  int lfd = *(int *)p;
  int fd = accept(lfd, NULL, NULL);
  if (fd >= 0) {
    char buf[64];
    (void)!recv(fd, buf, sizeof buf, 0);
    close(fd);
  }
  return NULL;
}

static void test_dropped_connection(void **state) {
  (void)state;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(lfd, 4), 0);
  socklen_t al = sizeof a;
  getsockname(lfd, (struct sockaddr *)&a, &al);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, dropper_main, &lfd), 0);
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", ntohs(a.sin_port), NULL, &err);
  assert_non_null(c);
  pc_buf_t r = {0};
  /* in flight when the connection drops: PC_UNAVAILABLE, not a timeout, and
   * sent: the server may have acted on it */
  int sent = -1;
  assert_int_equal(pc_rpc_call_sent(c, OP_ECHO, "x", 1, 20000, &r, &sent, &err), PC_UNAVAILABLE);
  assert_non_null(strstr(err.text, "lost"));
  assert_int_equal(sent, 1);
  pthread_join(t, NULL);
  close(lfd);
  pc_rpc_client_destroy(c);
}

/* A TLS context with name's certificate from dir (tests/certs.sh), allowing
 * only the name allowed (NULL: any the CA signed), and taking for a server
 * only one named server (NULL: its own name). */
static pc_tls_t *tls_for_server(const char *dir, const char *name, const char *allowed,
                                const char *server) {
  char ca[512], cert[512], key[512];
  snprintf(ca, sizeof ca, "%s/ca.pem", dir);
  snprintf(cert, sizeof cert, "%s/%s.pem", dir, name);
  snprintf(key, sizeof key, "%s/%s.key", dir, name);
  const char *const list[1] = {allowed}, *const servers[1] = {server};
  pc_tls_options_t o = {ca,   cert, key, NULL, NULL, NULL, allowed ? list : NULL, allowed ? 1 : 0,
                        NULL, 0,    server ? servers : NULL, server ? 1 : 0};
  pc_error_t err;
  pc_tls_t *t = pc_tls_create(&o, &err);
  if (!t) fail_msg("tls for %s: %s", name, err.text);
  return t;
}

/* A client's context: the server it talks to is named "node". */
static pc_tls_t *tls_for(const char *dir, const char *name, const char *allowed) {
  return tls_for_server(dir, name, allowed, "node");
}

/* Expects an error reply with status st naming what, then the close. */
static void expect_fault_status(int fd, pc_status_t st, const char *what) {
  reply_t r;
  assert_int_equal(raw_read_frame(fd, &r, 5000), 0);
  assert_int_equal(r.status, st);
  assert_true(r.op & PC_RPC_OP_REPLY);
  if (!strstr(r.body, what)) fail_msg("error reply \"%s\" does not mention \"%s\"", r.body, what);
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
}

struct nohello_arg {
  pc_rpc_client_t *c;
  pc_status_t st;
  char text[PC_ERROR_TEXT];
};

static void *call_echo(void *p) {
  struct nohello_arg *a = p;
  pc_buf_t r = {0};
  pc_error_t err;
  a->st = pc_rpc_call(a->c, OP_ECHO, "x", 1, 5000, &r, &err);
  snprintf(a->text, sizeof a->text, "%s", a->st == PC_OK ? "" : err.text);
  pc_buf_free(&r);
  return NULL;
}

/* The role the server gives client c (OP_ROLE). */
static pc_rpc_role_t role_of(pc_rpc_client_t *c) {
  pc_buf_t r = {0};
  pc_error_t err;
  pc_status_t st = pc_rpc_call(c, OP_ROLE, NULL, 0, 5000, &r, &err);
  if (st != PC_OK) fail_msg("role: %s (%s)", pc_status_name(st), err.text);
  assert_int_equal(r.len, 1);
  pc_rpc_role_t role = (pc_rpc_role_t)(unsigned char)r.p[0];
  pc_buf_free(&r);
  return role;
}

static void hmac(const char *key, const char *label, const unsigned char *a,
                 const unsigned char *b, unsigned char out[32]) {
  unsigned char msg[128];
  size_t l = strlen(label);
  memcpy(msg, label, l);
  memcpy(msg + l, a, 32);
  memcpy(msg + l + 32, b, 32);
  unsigned int olen = 32;
  assert_non_null(HMAC(EVP_sha256(), key, (int)strlen(key), msg, l + 64, out, &olen));
}

/* Raw HELLO on fd: sends nonce cn (id 7) and returns the server's nonce in sn. */
static void raw_hello(int fd, const unsigned char cn[32], unsigned char sn[32]) {
  unsigned char f[128];
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, PC_RPC_OP_HELLO, 0, cn, 32)), 0);
  reply_t rep;
  assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
  assert_int_equal(rep.status, PC_OK);
  assert_int_equal(rep.op, PC_RPC_OP_HELLO | PC_RPC_OP_REPLY);
  assert_int_equal(rep.len, 32);
  memcpy(sn, rep.body, 32);
}

/* The secret's challenge-response: the library's clients with the right,
 * a wrong and no secret; the exchange by hand (a wrong MAC, a replayed one,
 * the server's proof); the frame limit before authentication; the roles of
 * the data and the system secret. */
static void test_secret(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_auth_t sa = {.secret = "s3cret-token"};
  o.auth = &sa;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);

  pc_rpc_client_t *good = client(s, "s3cret-token");
  echo_ok(good, "authenticated", 5000);
  assert_int_equal(role_of(good), PC_RPC_ROLE_SYSTEM); /* the one secret is the system's */

  pc_buf_t r = {0};
  pc_error_t err;
  pc_rpc_client_t *bad = client(s, "s3cret-tokem");
  assert_int_equal(pc_rpc_call(bad, OP_ECHO, "x", 1, 5000, &r, &err), PC_DENIED);
  if (!strstr(err.text, "wrong secret")) fail_msg("unexpected: %s", err.text);
  pc_rpc_client_destroy(bad);

  pc_rpc_client_t *none = client(s, NULL);
  pc_status_t st = pc_rpc_call(none, OP_ECHO, "x", 1, 5000, &r, &err);
  assert_int_not_equal(st, PC_OK);
  if (!strstr(err.text, "HELLO")) fail_msg("unexpected: %s", err.text);
  pc_rpc_client_destroy(none);

  /* no secret, calls pipelined: the one the server answers and those its
   * close fails all say why */
  for (int round = 0; round < 5; round++) {
    none = client(s, NULL);
    pthread_t t[4];
    struct nohello_arg w[4];
    for (int i = 0; i < 4; i++) {
      w[i] = (struct nohello_arg){none, PC_OK, ""};
      assert_int_equal(pthread_create(&t[i], NULL, call_echo, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
      pthread_join(t[i], NULL);
      assert_int_not_equal(w[i].st, PC_OK);
      if (!strstr(w[i].text, "HELLO")) fail_msg("call %d of round %d: %s", i, round, w[i].text);
    }
    pc_rpc_client_destroy(none);
  }

  /* by hand: a HELLO without a nonce, a request before HELLO, AUTH before HELLO */
  unsigned char f[256];
  reply_t rep;
  int fd = raw_connect(port);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, PC_RPC_OP_HELLO, 0, "s3cret-token", 12)), 0);
  expect_fault_status(fd, PC_DENIED, "nonce");
  close(fd);
  fd = raw_connect(port);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, OP_ECHO, 42, "hi", 2)), 0);
  assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
  assert_int_equal(rep.id, 42);
  assert_int_equal(rep.op, OP_ECHO | PC_RPC_OP_REPLY);
  assert_int_equal(rep.status, PC_DENIED);
  assert_non_null(strstr(rep.body, "HELLO"));
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);
  unsigned char auth[33] = {0};
  fd = raw_connect(port);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, PC_RPC_OP_AUTH, 0, auth, 33)), 0);
  expect_fault_status(fd, PC_DENIED, "AUTH before HELLO");
  close(fd);

  /* a frame longer than the limit before authentication is refused before it is read */
  fd = raw_connect(port);
  uint32_t big = 1u << 20;
  unsigned char bh[4] = {(unsigned char)(big >> 24), (unsigned char)(big >> 16),
                         (unsigned char)(big >> 8), (unsigned char)big};
  assert_int_equal(raw_send(fd, bh, 4), 0);
  expect_fault_status(fd, PC_INVALID, "before authentication");
  close(fd);

  /* by hand, the right way: the client's MAC, then the server's proof */
  unsigned char cn[32], sn[32], mac[32], proof[32];
  for (int i = 0; i < 32; i++) cn[i] = (unsigned char)(i * 7 + 1);
  fd = raw_connect(port);
  raw_hello(fd, cn, sn);
  hmac("s3cret-token", "percolator client", sn, cn, mac);
  auth[0] = 0;
  memcpy(auth + 1, mac, 32);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, PC_RPC_OP_AUTH, 0, auth, 33)), 0);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, OP_ECHO, 8, "hi", 2)), 0);
  assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
  assert_int_equal(rep.op, PC_RPC_OP_AUTH | PC_RPC_OP_REPLY);
  assert_int_equal(rep.status, PC_OK);
  hmac("s3cret-token", "percolator server", cn, sn, proof);
  assert_int_equal(rep.len, 32);
  assert_memory_equal(rep.body, proof, 32);
  assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
  assert_int_equal(rep.id, 8);
  assert_int_equal(rep.status, PC_OK);
  assert_string_equal(rep.body, "hi");
  close(fd);
  /* the same AUTH again, on a new connection (another server nonce): refused */
  fd = raw_connect(port);
  raw_hello(fd, cn, sn);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, PC_RPC_OP_AUTH, 0, auth, 33)), 0);
  expect_fault_status(fd, PC_DENIED, "wrong secret");
  close(fd);

  echo_ok(good, "still authenticated", 5000);
  pc_rpc_client_destroy(good);
  pc_rpc_server_stats_t stats;
  pc_rpc_server_stats(s, &stats);
  assert_true(stats.auth_failures >= 5);
  pc_rpc_server_stop(s);

  /* a data secret and a system secret: two roles */
  pc_rpc_auth_t two = {.secret = "data-secret", .system_secret = "system-secret"};
  o.auth = &two;
  s = start(&o);
  pc_rpc_client_t *data = client(s, "data-secret");
  pc_rpc_auth_t sys_auth = {.secret = "data-secret", .system_secret = "system-secret"};
  pc_rpc_client_t *sys =
      pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(s), &sys_auth, &err);
  assert_non_null(sys);
  assert_int_equal(role_of(data), PC_RPC_ROLE_DATA);
  assert_int_equal(role_of(sys), PC_RPC_ROLE_SYSTEM);
  pc_rpc_client_t *wrong = client(s, "system-secreT");
  assert_int_equal(pc_rpc_call(wrong, OP_ROLE, NULL, 0, 5000, &r, &err), PC_DENIED);
  pc_rpc_client_destroy(wrong);
  pc_rpc_client_destroy(data);
  pc_rpc_client_destroy(sys);
  pc_rpc_server_stop(s);
  pc_buf_free(&r);
}

/* What a client with a secret sends, seen by a server of the test's own: a
 * nonce, then a MAC; never the secret. */
static void test_secret_never_sent(void **state) {
  (void)state;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(lfd, 1), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
  static const char secret[] = "a-secret-nobody-may-see";
  pc_error_t err;
  pc_rpc_auth_t ca = {.secret = secret};
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", ntohs(a.sin_port), &ca, &err);
  assert_non_null(c);
  struct nohello_arg w = {c, PC_OK, ""};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, call_echo, &w), 0);
  int fd = accept(lfd, NULL, NULL);
  assert_true(fd >= 0);
  /* the client's frames are of version 2 (a budget after the id); the
   * replies below are of version 1, which a client reads too */
  unsigned char h[19], cn[32], sn[32], auth[33], mac[32];
  assert_int_equal(raw_read(fd, h, 19, 5000), 0);
  assert_int_equal(h[4], PC_RPC_VERSION);
  assert_int_equal(h[3], PC_RPC_HEADER + 32);
  assert_int_equal(h[5], PC_RPC_OP_HELLO);
  assert_int_equal(raw_read(fd, cn, 32, 5000), 0);
  for (int i = 0; i < 32; i++) sn[i] = (unsigned char)(255 - i);
  unsigned char f[128];
  raw_frame(f, 1, PC_RPC_OP_HELLO | PC_RPC_OP_REPLY, 0, sn, 32);
  assert_int_equal(raw_send(fd, f, 15 + 32), 0);
  assert_int_equal(raw_read(fd, h, 19, 5000), 0);
  assert_int_equal(h[3], PC_RPC_HEADER + 33);
  assert_int_equal(h[5], PC_RPC_OP_AUTH);
  assert_int_equal(raw_read(fd, auth, 33, 5000), 0);
  hmac(secret, "percolator client", sn, cn, mac);
  assert_int_equal(auth[0], 0);
  assert_memory_equal(auth + 1, mac, 32);
  assert_null(memmem(cn, 32, secret, 4));
  assert_null(memmem(auth, 33, secret, 4));
  /* a server that cannot prove the secret gets nothing more */
  memset(f, 0, sizeof f);
  raw_frame(f, 1, PC_RPC_OP_AUTH | PC_RPC_OP_REPLY, 0, mac, 32);
  assert_int_equal(raw_send(fd, f, 15 + 32), 0);
  pthread_join(t, NULL);
  assert_int_equal(w.st, PC_DENIED);
  if (!strstr(w.text, "proof")) fail_msg("unexpected: %s", w.text);
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);
  close(lfd);
  pc_rpc_client_destroy(c);
}

/* Certificates: a TLS server admits clients whose certificate the CA signed
 * and whose name it allows, with the role the name gives; others are
 * refused before any request, and a client checks the server's certificate:
 * signed by the CA, for a server's use, and naming a server, whatever the
 * address it dialled. */
static void test_tls(void **state) {
  (void)state;
  char dir[] = "/tmp/pc-rpc-tls-XXXXXX";
  assert_non_null(mkdtemp(dir));
  tu_make_certs(dir, "node:server app ops other:server");
  pc_tls_t *node = tls_for(dir, "node", "app");
  pc_tls_t *app = tls_for(dir, "app", NULL), *ops = tls_for(dir, "ops", NULL);
  pc_tls_t *rogue = tls_for(dir, "rogue-app", NULL);
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_auth_t sa = {.tls = node};
  o.auth = &sa;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  pc_error_t err;
  pc_buf_t r = {0};
  pc_rpc_auth_t a_node = {.tls = node}, a_app = {.tls = app}, a_ops = {.tls = ops},
                a_rogue = {.tls = rogue};

  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", port, &a_node, &err);
  echo_ok(c, "over TLS", 5000);
  assert_int_equal(role_of(c), PC_RPC_ROLE_SYSTEM); /* the server's own name */
  pc_rpc_client_destroy(c);
  c = pc_rpc_client_create("127.0.0.1", port, &a_app, &err);
  echo_ok(c, "a data client", 5000);
  assert_int_equal(role_of(c), PC_RPC_ROLE_DATA);
  pc_rpc_client_destroy(c);
  /* signed by the CA but not allowed */
  c = pc_rpc_client_create("127.0.0.1", port, &a_ops, &err);
  assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 5000, &r, &err), PC_DENIED);
  if (!strstr(err.text, "'ops' is not allowed")) fail_msg("unexpected: %s", err.text);
  pc_rpc_client_destroy(c);
  /* signed by another CA: the server refuses it, and it refuses the server */
  c = pc_rpc_client_create("127.0.0.1", port, &a_rogue, &err);
  assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 5000, &r, &err), PC_DENIED);
  fprintf(stderr, "rogue certificate: %s\n", err.text);
  if (!strstr(err.text, "TLS")) fail_msg("unexpected: %s", err.text);
  pc_rpc_client_destroy(c);
  /* no TLS at all: bytes in clear are not frames; nothing is served */
  int fd = raw_connect(port);
  unsigned char f[64];
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, PC_RPC_OP_PING, 1, NULL, 0)), 0);
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);
  /* by any name or address: the certificate's name is what counts */
  c = pc_rpc_client_create("localhost", port, &a_app, &err);
  echo_ok(c, "by name", 5000);
  pc_rpc_client_destroy(c);
  /* a client that takes only "other" for a server refuses this one, before
   * it sends anything */
  pc_tls_t *picky = tls_for_server(dir, "app", NULL, "other");
  pc_rpc_auth_t a_picky = {.tls = picky};
  c = pc_rpc_client_create("127.0.0.1", port, &a_picky, &err);
  assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 5000, &r, &err), PC_DENIED);
  fprintf(stderr, "a server not named as one: %s\n", err.text);
  if (!strstr(err.text, "'node' is not a server's")) fail_msg("unexpected: %s", err.text);
  pc_rpc_client_destroy(c);
  pc_tls_unref(picky);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_true(st.auth_failures >= 3);
  assert_int_equal(st.requests, 5); /* echo and role twice, one echo: none of the refused */
  pc_rpc_server_stop(s);

  /* a server with a data client's certificate ('app', for a client's use
   * only, as docs/SECURITY.md's recipe makes it) is refused by TLS itself,
   * even by a client that would take 'app' for a server's name; one for a
   * server's use but with another name is refused by its name */
  const char *const fakes[2] = {"app", "other"};
  for (int k = 0; k < 2; k++) {
    pc_tls_t *fake = tls_for_server(dir, fakes[k], NULL, NULL);
    pc_rpc_auth_t fa = {.tls = fake};
    o.auth = &fa;
    pc_rpc_server_t *fs = start(&o);
    pc_tls_t *lenient = tls_for_server(dir, "ops", NULL, k == 0 ? "app" : "node");
    pc_rpc_auth_t al = {.tls = lenient};
    c = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(fs), &al, &err);
    assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 5000, &r, &err), PC_DENIED);
    fprintf(stderr, "a server with the certificate '%s': %s\n", fakes[k], err.text);
    if (!strstr(err.text, k == 0 ? "purpose" : "is not a server's"))
      fail_msg("unexpected: %s", err.text);
    pc_rpc_client_destroy(c);
    pc_rpc_server_stats(fs, &st);
    assert_int_equal(st.requests, 0);
    pc_rpc_server_stop(fs);
    pc_tls_unref(lenient);
    pc_tls_unref(fake);
  }
  o.auth = &sa;

  /* TLS and a secret: both must pass; in-process clients get the same roles */
  pc_rpc_auth_t both = {.secret = "d", .system_secret = "s", .tls = node};
  o.auth = &both;
  o.in_process = 1;
  s = start(&o);
  port = pc_rpc_server_port(s);
  pc_rpc_auth_t app_d = {.secret = "d", .tls = app}, node_s = {.system_secret = "s", .tls = node},
                app_s = {.system_secret = "s", .tls = app}, node_x = {.secret = "x", .tls = node};
  pc_rpc_client_t *c1 = pc_rpc_client_create("127.0.0.1", port, &app_d, &err);
  pc_rpc_client_t *c2 = pc_rpc_client_create("127.0.0.1", port, &node_s, &err);
  pc_rpc_client_t *c3 = pc_rpc_client_create("127.0.0.1", port, &app_s, &err);
  pc_rpc_client_t *c4 = pc_rpc_client_create("127.0.0.1", port, &node_x, &err);
  assert_int_equal(role_of(c1), PC_RPC_ROLE_DATA);
  assert_int_equal(role_of(c2), PC_RPC_ROLE_SYSTEM);
  assert_int_equal(role_of(c3), PC_RPC_ROLE_DATA); /* the certificate says data */
  assert_int_equal(pc_rpc_call(c4, OP_ROLE, NULL, 0, 5000, &r, &err), PC_DENIED);
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 1); /* only c4 went over the network */
  pc_rpc_client_destroy(c1);
  pc_rpc_client_destroy(c2);
  pc_rpc_client_destroy(c3);
  pc_rpc_client_destroy(c4);
  pc_rpc_server_stop(s);

  /* fail_on_refusal over TLS: a refused connection is no TLS failure */
  int hold = unlistened_port(&port);
  pc_rpc_client_options_t fast = {.fail_on_refusal = 1};
  c = pc_rpc_client_create_opts("127.0.0.1", port, &a_app, &fast, &err);
  assert_non_null(c);
  assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 3600000, &r, &err), PC_UNAVAILABLE);
  if (!strstr(err.text, "refused")) fail_msg("TLS to nobody: %s", err.text);
  pc_rpc_client_destroy(c);
  close(hold);
  pc_buf_free(&r);
  pc_tls_unref(node);
  pc_tls_unref(app);
  pc_tls_unref(ops);
  pc_tls_unref(rogue);
  tu_rmtree(strdup(dir));
}

/* A well-behaved client calling in a loop while hostile clients misbehave. */
struct bystander {
  pc_rpc_client_t *c;
  atomic_int stop;
  int ok, failed;
};

static void *bystander_main(void *p) {
  struct bystander *b = p;
  for (int i = 0; !atomic_load(&b->stop); i++) {
    char msg[32];
    int n = snprintf(msg, sizeof msg, "bystander %d", i);
    pc_buf_t r = {0};
    pc_error_t err;
    pc_status_t st = pc_rpc_call(b->c, OP_ECHO, msg, (size_t)n, 10000, &r, &err);
    if (st == PC_OK && r.len == (size_t)n && memcmp(r.p, msg, (size_t)n) == 0) {
      b->ok++;
    } else {
      b->failed++;
      fprintf(stderr, "bystander: %s %s\n", pc_status_name(st), err.text);
    }
    pc_buf_free(&r);
    pc_sleep_ms(2);
  }
  return NULL;
}

static void test_hostile_clients(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.frame_timeout_ms = 300;
  o.max_frame = 1u << 20;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  struct bystander b = {.c = client(s, NULL)};
  echo_ok(b.c, "first", 5000);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, bystander_main, &b), 0);
  unsigned char f[8192];
  int fd;

  /* 1. a truncated frame, then close */
  fd = raw_connect(port);
  raw_frame(f, 1, OP_ECHO, 1, "0123456789abcdefghijklmnopqrstuvwxyz", 36);
  assert_int_equal(raw_send(fd, f, 20), 0);
  close(fd);

  /* 2. absurd lengths */
  fd = raw_connect(port);
  assert_int_equal(raw_send(fd, "\xff\xff\xff\xff", 4), 0);
  expect_fault_and_close(fd, "bad frame length 4294967295");
  close(fd);
  fd = raw_connect(port);
  assert_int_equal(raw_send(fd, "\x00\x00\x00\x01\x01", 5), 0);
  expect_fault_and_close(fd, "bad frame length 1");
  close(fd);
  fd = raw_connect(port); /* one byte over max_frame, announced but never sent */
  uint32_t over = (1u << 20) + 1;
  unsigned char ob[4] = {(unsigned char)(over >> 24), (unsigned char)(over >> 16),
                         (unsigned char)(over >> 8), (unsigned char)over};
  assert_int_equal(raw_send(fd, ob, 4), 0);
  expect_fault_and_close(fd, "bad frame length");
  close(fd);

  /* 3. a bad version: the reply echoes the id */
  fd = raw_connect(port);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 9, OP_ECHO, 77, "x", 1)), 0);
  reply_t rep;
  assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
  assert_int_equal(rep.id, 77);
  assert_int_equal(rep.status, PC_INVALID);
  assert_non_null(strstr(rep.body, "version 9"));
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);

  /* 4. unknown opcodes: error replies, the connection stays usable */
  fd = raw_connect(port);
  const uint8_t bad_ops[] = {0x00, 0x05, 0x0f, 0x90, 0xff, 0x14};
  for (size_t i = 0; i < sizeof bad_ops; i++) {
    assert_int_equal(raw_send(fd, f, raw_frame(f, 1, bad_ops[i], 100 + i, NULL, 0)), 0);
    assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
    assert_int_equal(rep.id, 100 + i);
    assert_int_equal(rep.status, PC_INVALID);
    assert_int_equal(rep.op, bad_ops[i] | PC_RPC_OP_REPLY);
    char want[32];
    snprintf(want, sizeof want, "unknown opcode 0x%02x", bad_ops[i]);
    assert_string_equal(rep.body, want);
  }
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, OP_ECHO, 200, "alive", 5)), 0);
  assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
  assert_int_equal(rep.id, 200);
  assert_int_equal(rep.status, PC_OK);
  assert_string_equal(rep.body, "alive");
  /* pipelined requests come back, each with its id */
  size_t n = 0;
  for (int i = 0; i < 20; i++) n += raw_frame(f + n, 1, OP_ECHO, 300 + (uint64_t)i, "p", 1);
  assert_int_equal(raw_send(fd, f, n), 0);
  int seen[20] = {0};
  for (int i = 0; i < 20; i++) {
    assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
    assert_true(rep.id >= 300 && rep.id < 320);
    seen[rep.id - 300]++;
  }
  for (int i = 0; i < 20; i++) assert_int_equal(seen[i], 1);
  close(fd);

  /* 5. random bytes (the first byte makes the length absurd) */
  fd = raw_connect(port);
  unsigned seed = 12345;
  for (size_t i = 0; i < 4096; i++) f[i] = (unsigned char)rand_r(&seed);
  f[0] = 0xab;
  assert_int_equal(raw_send(fd, f, 4096), 0);
  expect_fault_and_close(fd, "bad frame length");
  close(fd);

  /* 6. one byte per 100 ms: closed by the 300 ms frame timeout long before
   * the 40-byte frame is complete */
  fd = raw_connect(port);
  size_t flen = raw_frame(f, 1, OP_ECHO, 9, "0123456789abcdefghijklmnopqrstuvwxy", 25);
  int closed = 0;
  for (size_t i = 0; i < flen && !closed; i++) {
    if (raw_send(fd, f + i, 1) != 0) {
      closed = 1;
      break;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 100) > 0) {
      char tmp[64];
      ssize_t got = recv(fd, tmp, sizeof tmp, 0);
      if (got <= 0) closed = 1;
    }
  }
  assert_true(closed);
  close(fd);

  /* 7. a connection that never sends anything is not disturbed by the frame
   * timeout (only partial frames are timed) */
  fd = raw_connect(port);
  pc_sleep_ms(500);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 1, OP_ECHO, 11, "late", 4)), 0);
  assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
  assert_int_equal(rep.status, PC_OK);
  close(fd);

  /* 8. half-close: requests sent before shutdown(SHUT_WR) are still served,
   * and a fault's error reply still arrives */
  fd = raw_connect(port);
  n = raw_frame(f, 1, OP_ECHO_SLOW, 21, "half", 4);
  n += raw_frame(f + n, 1, OP_ECHO, 22, "closed", 6);
  assert_int_equal(raw_send(fd, f, n), 0);
  shutdown(fd, SHUT_WR);
  int got21 = 0, got22 = 0;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(raw_read_frame(fd, &rep, 5000), 0);
    assert_int_equal(rep.status, PC_OK);
    if (rep.id == 21 && strcmp(rep.body, "half") == 0) got21++;
    if (rep.id == 22 && strcmp(rep.body, "closed") == 0) got22++;
  }
  assert_int_equal(got21 + got22, 2);
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);
  fd = raw_connect(port);
  assert_int_equal(raw_send(fd, f, raw_frame(f, 3, OP_ECHO, 23, "v3", 2)), 0);
  shutdown(fd, SHUT_WR);
  expect_fault_and_close(fd, "version 3");
  close(fd);

  /* 1 truncated + 4 lengths/version + 5 library-rejected ops + random + slow */
  wait_stats(s, errors_at_least, 12);
  atomic_store(&b.stop, 1);
  pthread_join(t, NULL);
  assert_int_equal(b.failed, 0);
  assert_true(b.ok > 0);
  echo_ok(b.c, "last", 5000);
  wait_stats(s, open_is, 1); /* only the bystander is left */
  pc_rpc_client_destroy(b.c);
  wait_stats(s, open_is, 0);
  pc_rpc_server_stop(s);
}

struct conc_limit_arg {
  pc_rpc_client_t *c;
  int ok;
};

static void *conc_limit_main(void *p) {
  struct conc_limit_arg *a = p;
  for (int i = 0; i < 10; i++) {
    pc_error_t err;
    if (pc_rpc_call(a->c, OP_CONC, NULL, 0, 20000, NULL, &err) == PC_OK) a->ok++;
  }
  return NULL;
}

static void test_inflight_limit(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.workers = 8;
  o.max_inflight = 2;
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  atomic_store(&conc_now, 0);
  atomic_store(&conc_max, 0);
  pthread_t t[8];
  struct conc_limit_arg a[8];
  for (int i = 0; i < 8; i++) {
    a[i] = (struct conc_limit_arg){.c = c};
    assert_int_equal(pthread_create(&t[i], NULL, conc_limit_main, &a[i]), 0);
  }
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 8; i++) assert_int_equal(a[i].ok, 10);
  /* eight callers on one connection, never more than two handlers at once */
  assert_true(atomic_load(&conc_max) >= 1);
  assert_true(atomic_load(&conc_max) <= 2);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

/* More requests than the server's total queue (1024 with one worker): the
 * connections beyond it wait, unread, and are all served in the end. */
static void test_queue_bound(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.workers = 1;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  enum { NCONN = 24, PER = 64 };
  int fds[NCONN];
  static unsigned char f[PER * 32];
  for (int i = 0; i < NCONN; i++) {
    fds[i] = raw_connect(port);
    size_t n = 0;
    for (int j = 0; j < PER; j++) n += raw_frame(f + n, 1, OP_ECHO_SLOW, (uint64_t)j, "q", 1);
    assert_int_equal(raw_send(fds[i], f, n), 0);
  }
  for (int i = 0; i < NCONN; i++) {
    int seen[PER] = {0};
    for (int j = 0; j < PER; j++) {
      reply_t rep;
      assert_int_equal(raw_read_frame(fds[i], &rep, 20000), 0);
      assert_int_equal(rep.status, PC_OK);
      assert_true(rep.id < PER);
      seen[rep.id]++;
    }
    for (int j = 0; j < PER; j++) assert_int_equal(seen[j], 1);
    close(fds[i]);
  }
  wait_stats(s, open_is, 0);
  pc_rpc_server_stop(s);
}

struct pusher {
  int fd;
  size_t frames, body;
  int rc;
};

static void *pusher_main(void *p) {
  struct pusher *a = p;
  size_t flen = 15 + a->body;
  unsigned char *f = malloc(flen);
  char *body = malloc(a->body);
  memset(body, 'b', a->body);
  a->rc = 0;
  for (size_t i = 0; i < a->frames && a->rc == 0; i++) {
    raw_frame(f, 1, OP_ECHO, i, body, a->body);
    a->rc = raw_send(a->fd, f, flen);
  }
  free(body);
  free(f);
  return NULL;
}

/* A peer that sends many requests and does not read the replies: the server
 * stops reading once the unread replies pile up, and resumes when they are
 * read; nothing is lost. */
static void test_backpressure(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_server_t *s = start(&o);
  int fd = raw_connect(pc_rpc_server_port(s));
  struct pusher a = {.fd = fd, .frames = 240, .body = 100000}; /* 24 MB */
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, pusher_main, &a), 0);
  pc_sleep_ms(300);
  static char body[100001];
  int seen[240] = {0};
  for (size_t i = 0; i < a.frames; i++) {
    unsigned char h[15];
    assert_int_equal(raw_read(fd, h, 15, 20000), 0);
    uint32_t flen = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    assert_int_equal(flen, PC_RPC_HEADER_V1 + a.body);
    assert_int_equal(h[6], PC_OK);
    assert_int_equal(raw_read(fd, body, a.body, 20000), 0);
    for (int k = 7; k < 14; k++) assert_int_equal(h[k], 0);
    assert_true(h[14] < a.frames);
    seen[h[14]]++;
  }
  for (size_t i = 0; i < a.frames; i++) assert_int_equal(seen[i], 1);
  pthread_join(t, NULL);
  assert_int_equal(a.rc, 0);
  close(fd);
  pc_rpc_server_stop(s);
}

static void test_many_connections(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  unsigned char f[64];
  for (int round = 0; round < 4; round++) {
    int fds[50];
    for (int i = 0; i < 50; i++) {
      fds[i] = raw_connect(port);
      if (i % 2 == 0) assert_int_equal(raw_send(fds[i], f, raw_frame(f, 1, PC_RPC_OP_PING, 1, NULL, 0)), 0);
    }
    for (int i = 0; i < 50; i += 2) {
      reply_t rep;
      assert_int_equal(raw_read_frame(fds[i], &rep, 5000), 0);
      assert_int_equal(rep.status, PC_OK);
    }
    for (int i = 0; i < 50; i++) close(fds[i]);
  }
  wait_stats(s, open_is, 0);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 200);
  assert_int_equal(st.protocol_errors, 0);

  /* max_connections: the sixth is closed at once */
  pc_rpc_server_stop(s);
  o.max_connections = 5;
  s = start(&o);
  port = pc_rpc_server_port(s);
  int fds[6];
  for (int i = 0; i < 5; i++) {
    fds[i] = raw_connect(port);
    reply_t rep;
    assert_int_equal(raw_send(fds[i], f, raw_frame(f, 1, PC_RPC_OP_PING, 1, NULL, 0)), 0);
    assert_int_equal(raw_read_frame(fds[i], &rep, 5000), 0);
  }
  fds[5] = raw_connect(port);
  assert_int_equal(raw_wait_closed(fds[5], 5000), 1);
  for (int i = 0; i < 6; i++) close(fds[i]);
  wait_stats(s, open_is, 0);
  pc_rpc_server_stop(s);
}

/* Connections that do not authenticate: at most max_unauthenticated at once
 * (the oldest goes to make room), each for at most auth_timeout_ms, while a
 * client with the secret gets in and is served. */
static void test_unauthenticated(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_auth_t sa = {.secret = "k"};
  o.auth = &sa;
  o.max_unauthenticated = 4;
  o.max_connections = 8;
  o.auth_timeout_ms = 60000;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  int fds[20];
  for (int i = 0; i < 20; i++) fds[i] = raw_connect(port);
  /* the first sixteen were closed to make room, the last four stay */
  for (int i = 0; i < 16; i++) assert_int_equal(raw_wait_closed(fds[i], 5000), 1);
  pc_rpc_client_t *c = client(s, "k");
  echo_ok(c, "in despite them", 5000);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_true(st.connections_open <= 5);
  assert_true(st.connections_refused >= 16);
  for (int i = 0; i < 20; i++) close(fds[i]);
  pc_rpc_client_destroy(c);
  wait_stats(s, open_is, 0);
  pc_rpc_server_stop(s);

  /* the deadline to authenticate */
  o.auth_timeout_ms = 200;
  s = start(&o);
  int fd = raw_connect(pc_rpc_server_port(s));
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.auth_failures, 1);
  c = client(s, "k"); /* a real client is well within it */
  echo_ok(c, "quick enough", 5000);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

static int raw_connect_from(uint16_t port, const char *from) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  assert_int_equal(inet_pton(AF_INET, from, &a.sin_addr), 1);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* max_connections_per_peer counts per address: one address is cut off at
 * the cap, another is not. */
static void test_per_peer(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.max_connections_per_peer = 3;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  unsigned char f[64];
  int fds[5];
  for (int i = 0; i < 4; i++) fds[i] = raw_connect_from(port, "127.0.0.2");
  assert_int_equal(raw_wait_closed(fds[3], 5000), 1);
  fds[4] = raw_connect_from(port, "127.0.0.3");
  for (int i = 0; i < 5; i++) {
    if (i == 3) continue;
    reply_t rep;
    assert_int_equal(raw_send(fds[i], f, raw_frame(f, 1, PC_RPC_OP_PING, 9, NULL, 0)), 0);
    assert_int_equal(raw_read_frame(fds[i], &rep, 5000), 0);
    assert_int_equal(rep.status, PC_OK);
  }
  close(fds[0]); /* one goes: the address may connect again */
  wait_stats(s, open_is, 3);
  int again = raw_connect_from(port, "127.0.0.2");
  reply_t rep;
  assert_int_equal(raw_send(again, f, raw_frame(f, 1, PC_RPC_OP_PING, 9, NULL, 0)), 0);
  assert_int_equal(raw_read_frame(again, &rep, 5000), 0);
  close(again);
  for (int i = 1; i < 5; i++) close(fds[i]);
  pc_rpc_server_stop(s);
}

/* Frames being received share request_memory: a second large frame waits,
 * unread, while the first is held, and goes through once it is served;
 * small requests of others go on meanwhile. */
static void test_request_memory(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.request_memory = 1u << 20;
  o.max_frame = 1u << 20;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  size_t big = 700u << 10;
  char *body = calloc(1, big);
  unsigned char *fr = malloc(15 + big);
  assert_non_null(body);
  assert_non_null(fr);
  memset(body, 'b', big);
  size_t n = raw_frame(fr, 1, OP_ECHO, 1, body, big);
  int a = raw_connect(port), b = raw_connect(port);
  assert_int_equal(raw_send(a, fr, n / 2), 0); /* half of a frame held by a */
  pc_sleep_ms(100);
  assert_int_equal(raw_send(b, fr, n), 0); /* the whole of b's waits for room */
  pc_sleep_ms(200);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_true(st.request_memory <= (1u << 20));
  assert_int_equal(st.requests, 0);
  pc_rpc_client_t *c = client(s, NULL);
  echo_ok(c, "small requests go on", 5000);
  assert_int_equal(raw_send(a, fr + n / 2, n - n / 2), 0);
  static char got[(700u << 10) + 1];
  for (int k = 0; k < 2; k++) {
    int fd = k ? b : a;
    unsigned char h[15];
    assert_int_equal(raw_read(fd, h, 15, 10000), 0);
    assert_int_equal(h[6], PC_OK);
    assert_int_equal(raw_read(fd, got, big, 10000), 0);
    assert_memory_equal(got, body, big);
  }
  close(a);
  close(b);
  pc_rpc_client_destroy(c);
  free(body);
  free(fr);
  pc_rpc_server_stop(s);
}

/* Peers that never read their replies: reading them stops, the replies they
 * hold stay within reply_memory (the one holding the most goes first), and
 * one whose replies make no progress for reply_timeout_ms is closed; a
 * client that reads is served throughout. */
static void test_reply_memory(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.reply_memory = 4u << 20;
  o.reply_timeout_ms = 1000;
  pc_rpc_server_t *s = start(&o);
  uint16_t port = pc_rpc_server_port(s);
  struct bystander b = {.c = client(s, NULL)};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, bystander_main, &b), 0);
  int fds[3];
  struct pusher p[3];
  pthread_t pt[3];
  for (int i = 0; i < 3; i++) {
    fds[i] = raw_connect(port);
    int small = 4096;
    setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    p[i] = (struct pusher){.fd = fds[i], .frames = 200, .body = 60000}; /* 12 MB each */
    assert_int_equal(pthread_create(&pt[i], NULL, pusher_main, &p[i]), 0);
  }
  size_t most = 0;
  for (int k = 0; k < 100; k++) {
    pc_rpc_server_stats_t st;
    pc_rpc_server_stats(s, &st);
    if (st.reply_memory > most) most = st.reply_memory;
    pc_sleep_ms(20);
  }
  wait_stats(s, open_is, 1); /* reading its socket would relieve the server: count instead */
  for (int i = 0; i < 3; i++) {
    shutdown(fds[i], SHUT_RDWR);
    pthread_join(pt[i], NULL);
    close(fds[i]);
  }
  atomic_store(&b.stop, 1);
  pthread_join(t, NULL);
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  fprintf(stderr, "reply memory: at most %zu bytes seen; %llu connections closed by a limit; "
          "bystander %d ok %d failed\n", most, (unsigned long long)st.connections_refused, b.ok,
          b.failed);
  assert_true(most <= (4u << 20));
  /* every pusher was closed by a limit of the server: reply memory, the
   * reply timeout, or the frame deadline of a frame it could not finish
   * (its requests may stall behind the others' replies) */
  assert_true(st.connections_refused + st.protocol_errors >= 3);
  assert_int_equal(b.failed, 0);
  assert_true(b.ok > 0);
  pc_rpc_client_destroy(b.c);
  pc_rpc_server_stop(s);
}

static void test_idle_timeout(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.idle_timeout_ms = 200;
  pc_rpc_server_t *s = start(&o);
  int fd = raw_connect(pc_rpc_server_port(s));
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);
  /* a client whose idle connection was closed reconnects on its next call */
  pc_rpc_client_t *c = client(s, NULL);
  echo_ok(c, "before", 5000);
  wait_stats(s, open_is, 0);
  pc_sleep_ms(100); /* the client sees the close before its next call */
  echo_ok(c, "after", 5000);
  /* a request that takes longer than the idle timeout is not cut off */
  pc_buf_t r = {0};
  pc_error_t err;
  assert_int_equal(pc_rpc_call(c, OP_SLEEP, "500", 3, 5000, &r, &err), PC_OK);
  pc_buf_free(&r);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

static void test_stop_with_clients(void **state) {
  (void)state;
  /* stopping a server with idle clients, and destroying clients whose
   * server is gone, are clean (leak sanitizer) */
  pc_rpc_server_options_t o = base_opts();
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c1 = client(s, NULL), *c2 = client(s, NULL);
  echo_ok(c1, "a", 5000);
  echo_ok(c2, "b", 5000);
  int fd = raw_connect(pc_rpc_server_port(s));
  assert_int_equal(raw_send(fd, "\x00\x00", 2), 0); /* a partial frame pending */
  pc_rpc_server_stop(s);
  assert_int_equal(raw_wait_closed(fd, 5000), 1);
  close(fd);
  pc_rpc_client_destroy(c1);
  pc_rpc_client_destroy(c2);

  /* a client that never reached anything */
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", 1, NULL, &err);
  assert_non_null(c);
  pc_buf_t r = {0};
  assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 100, &r, &err), PC_UNAVAILABLE);
  pc_rpc_client_destroy(c);
  assert_null(pc_rpc_client_create("127.0.0.1", 0, NULL, &err));
  assert_int_equal(err.code, PC_INVALID);

  /* a port in use */
  s = start(&o);
  o.port = pc_rpc_server_port(s);
  assert_null(pc_rpc_server_start(&o, handler, NULL, &err));
  assert_int_equal(err.code, PC_IO_ERROR);
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%u", o.port);
  assert_non_null(strstr(err.text, ep));
  pc_rpc_server_stop(s);
}

static void test_parse_endpoint(void **state) {
  (void)state;
  char host[64];
  uint16_t port = 0;
  pc_error_t err;
  assert_int_equal(pc_parse_endpoint("127.0.0.1:7100", 0, host, sizeof host, &port, &err), PC_OK);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 7100);
  assert_int_equal(pc_parse_endpoint("tablet-1.example.com:65535", 0, host, sizeof host, &port,
                                     &err), PC_OK);
  assert_string_equal(host, "tablet-1.example.com");
  assert_int_equal(port, 65535);
  assert_int_equal(pc_parse_endpoint("[::1]:80", 0, host, sizeof host, &port, &err), PC_OK);
  assert_string_equal(host, "::1");
  assert_int_equal(port, 80);
  assert_int_equal(pc_parse_endpoint("localhost:0", 1, host, sizeof host, &port, &err), PC_OK);
  assert_int_equal(port, 0);
  const char *bad[] = {"",           "localhost",  "localhost:",   ":80",       "host:0",
                       "host:65536", "host:12ab",  "host:-1",      "::1:80",    "[::1]80",
                       "[::1",       "[zz]:80",    "ho st:80",     "host:123456", "[]:80"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pc_status_t st = pc_parse_endpoint(bad[i], 0, host, sizeof host, &port, &err);
    if (st != PC_INVALID) fail_msg("\"%s\" was accepted", bad[i]);
    assert_int_equal(err.code, PC_INVALID);
  }
  char tiny[4];
  assert_int_equal(pc_parse_endpoint("longhost:1", 0, tiny, sizeof tiny, &port, &err), PC_INVALID);
}

/* ---- in-process endpoints ------------------------------------------------- */

static atomic_int local_closes; /* of connection ids above every socket's */
static void note_close(void *ctx, uint64_t connection) {
  (void)ctx;
  if (connection >= (1ull << 62)) atomic_fetch_add(&local_closes, 1);
}

/* A server started with in_process answers the clients this process creates
 * for its endpoint on their own threads: the same replies, errors and
 * library ops as over a socket, no connection accepted, a connection id of
 * the client's own that its destruction closes; a client with another
 * secret goes over the network; after the server stops, calls fail. */
static void test_in_process(void **state) {
  (void)state;
  pc_rpc_server_options_t o = base_opts();
  o.in_process = 1;
  o.on_close = note_close;
  pc_rpc_server_t *s = start(&o);
  pc_rpc_client_t *c = client(s, NULL);
  echo_ok(c, "hello", 5000);
  echo_ok(c, "", 5000);
  pc_buf_t r = {0};
  pc_error_t err;
  assert_int_equal(pc_rpc_call(c, OP_FAIL, "row7", 4, 5000, &r, &err), PC_CONFLICT);
  assert_string_equal(err.text, "conflict on row7");
  assert_int_equal(r.len, 0);
  assert_int_equal(pc_rpc_call(c, PC_RPC_OP_PING, NULL, 0, 5000, &r, &err), PC_OK);
  assert_int_equal(pc_rpc_call(c, 0x05, NULL, 0, 5000, &r, &err), PC_INVALID);
  assert_string_equal(err.text, "unknown opcode 0x05");
  assert_int_equal(pc_rpc_call(c, PC_RPC_OP_HELLO, "x", 1, 5000, &r, &err), PC_INVALID);
  /* many threads at once */
  pthread_t t[4];
  struct conc_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (struct conc_arg){c, i, 0};
    assert_int_equal(pthread_create(&t[i], NULL, conc_main, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(a[i].ok, 2000);
  }
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 0);
  assert_true(st.requests >= 8000);

  /* a client with a secret goes over the network, where this server cannot
   * prove it knows it: the client refuses it */
  pc_rpc_client_t *other = client(s, "another");
  assert_int_equal(pc_rpc_call(other, OP_ECHO, "x", 1, 5000, &r, &err), PC_DENIED);
  pc_rpc_server_stats(s, &st);
  assert_int_equal(st.connections_accepted, 1);
  pc_rpc_client_destroy(other);
  assert_int_equal(role_of(c), PC_RPC_ROLE_SYSTEM); /* a server without credentials */

  /* destroying the client closes its connection, as a socket's closing does */
  assert_int_equal(atomic_load(&local_closes), 0);
  pc_rpc_client_destroy(c);
  assert_int_equal(atomic_load(&local_closes), 1);

  /* a client that outlives the server */
  c = client(s, NULL);
  echo_ok(c, "before the stop", 5000);
  pc_rpc_server_stop(s);
  assert_int_equal(pc_rpc_call(c, OP_ECHO, "x", 1, 5000, &r, &err), PC_UNAVAILABLE);
  pc_rpc_client_destroy(c);
  pc_buf_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_in_process),
      cmocka_unit_test(test_parse_endpoint),
      cmocka_unit_test(test_echo),
      cmocka_unit_test(test_concurrent_out_of_order),
      cmocka_unit_test(test_remote_error),
      cmocka_unit_test(test_timeout),
      cmocka_unit_test(test_stop_restart),
      cmocka_unit_test(test_fail_on_refusal),
      cmocka_unit_test(test_dropped_connection),
      cmocka_unit_test(test_secret),
      cmocka_unit_test(test_secret_never_sent),
      cmocka_unit_test(test_tls),
      cmocka_unit_test(test_unauthenticated),
      cmocka_unit_test(test_per_peer),
      cmocka_unit_test(test_request_memory),
      cmocka_unit_test(test_reply_memory),
      cmocka_unit_test(test_hostile_clients),
      cmocka_unit_test(test_inflight_limit),
      cmocka_unit_test(test_queue_bound),
      cmocka_unit_test(test_backpressure),
      cmocka_unit_test(test_many_connections),
      cmocka_unit_test(test_idle_timeout),
      cmocka_unit_test(test_stop_with_clients),
      cmocka_unit_test(test_inline_ops),
      cmocka_unit_test(test_inline_op_that_would_wait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
