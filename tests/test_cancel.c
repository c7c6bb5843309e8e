/* test_cancel.c — work that nobody waits for stops (net/rpc.h, base/deadline.h).
 *
 * A request carries its budget; the server turns it into a deadline, and a
 * closed connection or a stopping server marks its requests abandoned.
 * Handlers see both through pc_call_check, which the store's long loops ask
 * between steps. Each test slows every step of the store with the failpoint
 * store.step (or runs a handler that would loop for a minute) and watches
 * the server's count of requests in service fall once nobody waits:
 *
 *   - a tablet's raw scan whose client gave up (its budget ran out);
 *   - the same scan sent by a client of protocol version 1 (no budget) that
 *     then closed its connection;
 *   - a request still queued behind a busy worker at its deadline is
 *     answered without running;
 *   - an in-process client's call (no socket) is bounded the same way;
 *   - a client of this version talking to a server of version 1 gets a
 *     clear refusal naming the versions;
 *   - pc_rpc_server_stop with a request that never ends returns after the
 *     stop's grace, its handler stopped.
 * Without the checks the scans run for tens of seconds, past every bound
 * the tests wait for (which are generous: they are not timings). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/deadline.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "core/store.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"
#include "tests/testutil.h"

#define ROWS 4000    /* cells of the tablet's table */
#define STEP_MS 5    /* store.step's sleep: a whole raw scan takes ROWS * STEP_MS = 20 s */
#define WAIT_MS 8000 /* how long a test waits for the server to drop a request */

typedef struct fixture {
  char *dir;
  pc_tablet_t *tablet;
  pc_rpc_server_t *server;
} fixture_t;

/* A tablet of every row with ROWS cells in table "t", served on 127.0.0.1. */
static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp("cancel");
  char path[4200];
  snprintf(path, sizeof path, "%s/store", f->dir);
  pc_local_options_t lo = {1, 0, 1u << 20, 1u << 20, 4u << 20, 0};
  pc_error_t err;
  pc_store_t *s = pc_local_store_open(path, &lo, &err);
  if (!s) fail_msg("pc_local_store_open: %s", err.text);
  /* 25 rows a commit: a commit holds a latch per row, and ThreadSanitizer
   * follows at most 64 mutexes held by one thread */
  for (int i = 0; i < ROWS; i += 25) {
    pc_mutation_t m[25];
    char rows[25][16];
    for (int k = 0; k < 25; k++) {
      snprintf(rows[k], sizeof rows[k], "r%06d", i + k);
      m[k] = (pc_mutation_t){{"t", rows[k], strlen(rows[k]), "c", 1}, PC_WRITE_PUT, "value", 5, 0};
    }
    uint64_t start, commit;
    tu_ts_next(NULL, &start, &err);
    pc_lock_info_t lock = {0};
    assert_int_equal(s->ops->commit_one_phase(s, m, 25, start, tu_ts_next, NULL, NULL, &commit,
                                              &lock, &err),
                     PC_OK);
  }
  pc_row_range_t all = {"", 0, "", 0};
  f->tablet = pc_tablet_create("t1", s, &all, tu_ts_next, NULL);
  pc_rpc_server_options_t o;
  memset(&o, 0, sizeof o);
  o.name = "tablet";
  o.workers = 2;
  f->server = pc_rpc_server_start(&o, pc_tablet_rpc_handler, f->tablet, &err);
  if (!f->server) fail_msg("pc_rpc_server_start: %s", err.text);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pc_failpoints_configure(NULL, NULL);
  pc_rpc_server_stop(f->server);
  pc_tablet_destroy(f->tablet);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

static pc_rpc_server_stats_t stats(pc_rpc_server_t *s) {
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  return st;
}

/* Polls until the server has no request in service (1), or WAIT_MS passed (0). */
static int wait_idle(pc_rpc_server_t *s) {
  uint64_t until = pc_now_mono_ms() + WAIT_MS;
  while (stats(s).in_service != 0) {
    if (pc_now_mono_ms() > until) return 0;
    pc_sleep_ms(10);
  }
  return 1;
}

static int wait_busy(pc_rpc_server_t *s) {
  uint64_t until = pc_now_mono_ms() + WAIT_MS;
  while (stats(s).in_service == 0) {
    if (pc_now_mono_ms() > until) return 0;
    pc_sleep_ms(5);
  }
  return 1;
}

static void raw_scan_body(pc_buf_t *b) {
  assert_int_equal(pc_wire_put_opt(b, "t", 1) || pc_wire_put_opt(b, NULL, 0) ||
                       pc_wire_put_opt(b, NULL, 0),
                   0);
}

static void slow_steps(void) {
  char spec[64];
  snprintf(spec, sizeof spec, "store.step=sleep(%d)", STEP_MS);
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure(spec, &err), PC_OK);
}

/* The client gives up after its timeout; the tablet stops its scan. */
static void test_scan_stops_at_its_deadline(void **state) {
  fixture_t *f = *state;
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(f->server), NULL, &err);
  assert_non_null(c);
  /* unslowed, the whole scan answers */
  pc_buf_t body = {0}, reply = {0};
  raw_scan_body(&body);
  assert_int_equal(pc_rpc_call(c, PC_TABLET_OP_RAW_SCAN, body.p, body.len, 30000, &reply, &err),
                   PC_OK);
  assert_int_equal(reply.p[0], PC_OK);
  slow_steps();
  uint64_t abandoned = stats(f->server).abandoned;
  reply.len = 0;
  /* the client's own timer, or (on a busy machine, when the reply that the
   * server's check made arrives before the caller wakes) the tablet's
   * answer that the scan ran out of time */
  pc_status_t st = pc_rpc_call(c, PC_TABLET_OP_RAW_SCAN, body.p, body.len, 300, &reply, &err);
  if (st == PC_OK) assert_int_equal(reply.p[0], PC_TIMEOUT);
  else assert_int_equal(st, PC_TIMEOUT);
  assert_true(wait_idle(f->server)); /* long before the scan's 20 s */
  assert_true(stats(f->server).abandoned > abandoned);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(c);
}

/* A client of protocol version 1 sends no budget: its request runs until its
 * connection closes. */
static int raw_connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

static void put_be(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
}

static void test_scan_stops_when_its_connection_closes(void **state) {
  fixture_t *f = *state;
  slow_steps();
  pc_buf_t body = {0};
  raw_scan_body(&body);
  unsigned char frame[256];
  put_be(frame, PC_RPC_HEADER_V1 + body.len, 4);
  frame[4] = PC_RPC_VERSION_1;
  frame[5] = PC_TABLET_OP_RAW_SCAN;
  frame[6] = 0;
  put_be(frame + 7, 42, 8);
  memcpy(frame + 15, body.p, body.len);
  int fd = raw_connect(pc_rpc_server_port(f->server));
  assert_int_equal(send(fd, frame, 15 + body.len, MSG_NOSIGNAL), (ssize_t)(15 + body.len));
  assert_true(wait_busy(f->server));
  pc_sleep_ms(300); /* well into the scan, which has no deadline */
  assert_true(stats(f->server).in_service >= 1);
  close(fd);
  assert_true(wait_idle(f->server));
  pc_buf_free(&body);
}

/* ---- a handler of its own: a loop of steps that would last a minute ----- */

static _Atomic int loops_started, loops_ended;

static pc_status_t looping_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                   pc_buf_t *reply, pc_error_t *err) {
  (void)ctx;
  (void)body;
  (void)len;
  (void)reply;
  if (op == 0x11) return PC_OK; /* a quick op */
  atomic_fetch_add(&loops_started, 1);
  pc_status_t st = PC_OK;
  for (int i = 0; i < 6000 && st == PC_OK; i++) {
    pc_sleep_ms(10);
    st = pc_call_check("the loop", err);
  }
  atomic_fetch_add(&loops_ended, 1);
  return st;
}

static pc_rpc_server_t *start_looping(uint32_t workers, int in_process) {
  pc_rpc_server_options_t o;
  memset(&o, 0, sizeof o);
  o.name = "loop";
  o.workers = workers;
  o.in_process = in_process;
  pc_error_t err;
  pc_rpc_server_t *s = pc_rpc_server_start(&o, looping_handler, NULL, &err);
  if (!s) fail_msg("pc_rpc_server_start: %s", err.text);
  return s;
}

typedef struct caller {
  pc_rpc_client_t *c;
  uint32_t timeout_ms;
  pc_status_t st;
  pc_error_t err;
} caller_t;

static void *call_loop(void *arg) {
  caller_t *k = arg;
  k->st = pc_rpc_call(k->c, 0x10, NULL, 0, k->timeout_ms, NULL, &k->err);
  return NULL;
}

/* With one worker busy, a request that waits in the queue past its budget is
 * answered PC_TIMEOUT by the server without its handler running. */
static void test_expired_request_is_not_run(void **state) {
  (void)state;
  atomic_store(&loops_started, 0);
  atomic_store(&loops_ended, 0);
  pc_rpc_server_t *s = start_looping(1, 0);
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(s), NULL, &err);
  caller_t first = {c, 1500, PC_OK, {0}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, call_loop, &first), 0);
  assert_true(wait_busy(s));
  /* queued behind it, with a budget it will outwait */
  assert_int_equal(pc_rpc_call(c, 0x10, NULL, 0, 200, NULL, &err), PC_TIMEOUT);
  pthread_join(t, NULL);
  assert_int_equal(first.st, PC_TIMEOUT);
  assert_true(wait_idle(s));
  /* the first ran and stopped at its deadline; the second never ran */
  assert_int_equal(atomic_load(&loops_started), 1);
  assert_int_equal(atomic_load(&loops_ended), 1);
  assert_true(stats(s).abandoned >= 2);
  /* the connection still serves */
  assert_int_equal(pc_rpc_call(c, 0x11, NULL, 0, 5000, NULL, &err), PC_OK);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

/* An in-process client runs the handler on its own thread, bounded alike. */
static void test_in_process_call_is_bounded(void **state) {
  (void)state;
  atomic_store(&loops_ended, 0);
  pc_rpc_server_t *s = start_looping(1, 1);
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", pc_rpc_server_port(s), NULL, &err);
  uint64_t t0 = pc_now_mono_ms();
  assert_int_equal(pc_rpc_call(c, 0x10, NULL, 0, 200, NULL, &err), PC_TIMEOUT);
  assert_true(pc_now_mono_ms() - t0 < WAIT_MS); /* not the loop's minute */
  assert_int_equal(atomic_load(&loops_ended), 1);
  assert_int_equal(stats(s).in_service, 0);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(s);
}

/* Stopping a server whose handler never ends on its own: the stop cancels it
 * after its grace and returns. */
static void test_stop_cancels_what_is_left(void **state) {
  (void)state;
  atomic_store(&loops_ended, 0);
  pc_rpc_server_t *s = start_looping(1, 0);
  int fd = raw_connect(pc_rpc_server_port(s));
  unsigned char frame[15];
  put_be(frame, PC_RPC_HEADER_V1, 4);
  frame[4] = PC_RPC_VERSION_1; /* no budget: it would loop for its minute */
  frame[5] = 0x10;
  frame[6] = 0;
  put_be(frame + 7, 1, 8);
  assert_int_equal(send(fd, frame, sizeof frame, MSG_NOSIGNAL), (ssize_t)sizeof frame);
  assert_true(wait_busy(s));
  uint64_t t0 = pc_now_mono_ms();
  pc_rpc_server_stop(s);
  uint64_t took = pc_now_mono_ms() - t0;
  print_message("pc_rpc_server_stop returned after %llu ms (grace %d ms)\n",
                (unsigned long long)took, PC_RPC_STOP_GRACE_MS);
  assert_true(took < PC_RPC_STOP_GRACE_MS + WAIT_MS);
  assert_int_equal(atomic_load(&loops_ended), 1);
  close(fd);
}

/* ---- a server of protocol version 1 ------------------------------------ */

static void *old_server(void *arg) {
  int lfd = *(int *)arg;
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) return NULL;
  unsigned char h[19];
  size_t got = 0;
  while (got < sizeof h) {
    ssize_t r = recv(fd, h + got, sizeof h - got, 0);
    if (r <= 0) break;
    got += (size_t)r;
  }
  /* what a server of version 1 answered any other version: a version-1
   * error reply echoing op and id, then it closed */
  char msg[96];
  int n = snprintf(msg, sizeof msg, "unsupported protocol version %u (this server speaks 1)", h[4]);
  unsigned char out[128];
  put_be(out, PC_RPC_HEADER_V1 + (uint64_t)n, 4);
  out[4] = 1;
  out[5] = h[5] | PC_RPC_OP_REPLY;
  out[6] = PC_INVALID;
  memcpy(out + 7, h + 7, 8);
  memcpy(out + 15, msg, (size_t)n);
  if (send(fd, out, 15 + (size_t)n, MSG_NOSIGNAL) < 0) perror("send");
  pc_sleep_ms(100);
  close(fd);
  return NULL;
}

static void test_version_refused_clearly(void **state) {
  (void)state;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(lfd, 4), 0);
  socklen_t al = sizeof a;
  getsockname(lfd, (struct sockaddr *)&a, &al);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, old_server, &lfd), 0);
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", ntohs(a.sin_port), NULL, &err);
  assert_int_equal(pc_rpc_call(c, 0x10, "x", 1, 5000, NULL, &err), PC_INVALID);
  print_message("against a version-1 server: %s\n", err.text);
  assert_non_null(strstr(err.text, "unsupported protocol version 2"));
  pthread_join(t, NULL);
  pc_rpc_client_destroy(c);
  close(lfd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_scan_stops_at_its_deadline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_scan_stops_when_its_connection_closes, setup, teardown),
      cmocka_unit_test(test_expired_request_is_not_run),
      cmocka_unit_test(test_in_process_call_is_bounded),
      cmocka_unit_test(test_stop_cancels_what_is_left),
      cmocka_unit_test(test_version_refused_clearly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
