/* test_http.c — tests of the daemons' HTTP endpoint (core/http.h): /health
 * healthy and unhealthy, /metrics in Prometheus text format, 404 for other
 * paths, 405 for other methods, and the metric helpers' exact output. The
 * requests are written by hand on raw sockets. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/error.h"
#include "net/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_int healthy = 1;
static atomic_int scrapes;

static int health(void *ctx, pc_buf_t *out) {
  (void)ctx;
  if (atomic_load(&healthy)) return 1;
  pc_buf_append(out, "store is closed", 15);
  return 0;
}

static void metrics(void *ctx, pc_buf_t *out) {
  (void)ctx;
  int n = atomic_fetch_add(&scrapes, 1) + 1;
  pc_metric_counter(out, "pc_test_scrapes_total", "Scrapes served.", (uint64_t)n);
  pc_metric_gauge(out, "pc_test_ratio", "A ratio.", 0.25);
}

/* Sends a raw request and reads the whole response (HTTP/1.0: the server
 * closes). Returns the status code; *body points into resp. */
static int http_req(uint16_t port, const char *request, char *resp, size_t cap, char **body) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  size_t len = strlen(request);
  assert_int_equal(send(fd, request, len, MSG_NOSIGNAL), (ssize_t)len);
  size_t n = 0;
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int r = poll(&pf, 1, 5000);
    assert_true(r > 0); /* bounded: 5 s without data fails the test */
    ssize_t got = recv(fd, resp + n, cap - 1 - n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    n += (size_t)got;
    assert_true(n < cap - 1);
  }
  close(fd);
  resp[n] = '\0';
  int code = 0;
  assert_int_equal(sscanf(resp, "HTTP/1.%*d %d", &code), 1);
  char *sep = strstr(resp, "\r\n\r\n");
  assert_non_null(sep);
  *body = sep + 4;
  return code;
}

static void test_endpoints(void **state) {
  (void)state;
  pc_error_t err;
  pc_http_t *h = pc_http_start("127.0.0.1", 0, NULL, health, metrics, NULL, &err);
  if (!h) fail_msg("http start: %s", err.text);
  uint16_t port = pc_http_port(h);
  assert_true(port != 0);
  static char resp[65536];
  char *body;

  assert_int_equal(http_req(port, "GET /health HTTP/1.0\r\n\r\n", resp, sizeof resp, &body), 200);
  assert_string_equal(body, "ok\n");

  atomic_store(&healthy, 0);
  assert_int_equal(http_req(port, "GET /health HTTP/1.0\r\n\r\n", resp, sizeof resp, &body), 503);
  assert_string_equal(body, "store is closed\n");
  atomic_store(&healthy, 1);

  assert_int_equal(
      http_req(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", resp,
               sizeof resp, &body),
      200);
  assert_non_null(strcasestr(resp, "Content-Type: text/plain; version=0.0.4"));
  assert_string_equal(body,
                      "# HELP pc_test_scrapes_total Scrapes served.\n"
                      "# TYPE pc_test_scrapes_total counter\n"
                      "pc_test_scrapes_total 1\n"
                      "# HELP pc_test_ratio A ratio.\n"
                      "# TYPE pc_test_ratio gauge\n"
                      "pc_test_ratio 0.25\n");
  /* a query string does not change the path */
  assert_int_equal(http_req(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n", resp, sizeof resp, &body),
                   200);
  assert_non_null(strstr(body, "pc_test_scrapes_total 2\n"));

  assert_int_equal(http_req(port, "GET /nope HTTP/1.0\r\n\r\n", resp, sizeof resp, &body), 404);
  assert_int_equal(http_req(port, "GET / HTTP/1.0\r\n\r\n", resp, sizeof resp, &body), 404);
  assert_int_equal(http_req(port, "GET /healthz HTTP/1.0\r\n\r\n", resp, sizeof resp, &body), 404);
  assert_int_equal(
      http_req(port, "POST /health HTTP/1.0\r\nContent-Length: 0\r\n\r\n", resp, sizeof resp, &body),
      405);
  assert_non_null(strcasestr(resp, "Allow: GET"));
  assert_int_equal(http_req(port, "DELETE /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp, &body),
                   405);
  assert_int_equal(http_req(port, "OPTIONS /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp, &body),
                   405);

  /* a port in use is an error naming it */
  pc_http_t *h2 = pc_http_start("127.0.0.1", port, NULL, health, metrics, NULL, &err);
  assert_null(h2);
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%u", port);
  assert_non_null(strstr(err.text, ep));
  pc_http_stop(h);

  /* no callbacks: healthy, empty metrics */
  h = pc_http_start(NULL, 0, NULL, NULL, NULL, NULL, &err);
  assert_non_null(h);
  assert_int_equal(http_req(pc_http_port(h), "GET /health HTTP/1.0\r\n\r\n", resp, sizeof resp,
                            &body), 200);
  assert_int_equal(http_req(pc_http_port(h), "GET /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp,
                            &body), 200);
  assert_string_equal(body, "");
  pc_http_stop(h);
}

static int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* 1 when the server closes fd within timeout_ms (whatever it sent first). */
static int closed_within(int fd, int timeout_ms) {
  char buf[4096];
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 10) > 0) {
      ssize_t got = recv(fd, buf, sizeof buf, 0);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return 1;
    }
  }
  return 0;
}

/* Idle connections cannot lock scrapes out: past max_connections the
 * oldest are closed, each has timeout_ms to send its request, and a request
 * head past 16 KiB is refused. */
static void test_connection_limits(void **state) {
  (void)state;
  pc_error_t err;
  pc_http_limits_t lim = {8, 60000};
  pc_http_t *h = pc_http_start("127.0.0.1", 0, &lim, health, metrics, NULL, &err);
  if (!h) fail_msg("http start: %s", err.text);
  uint16_t port = pc_http_port(h);
  int fds[50];
  for (int i = 0; i < 50; i++) fds[i] = connect_to(port);
  static char resp[65536];
  char *body;
  assert_int_equal(http_req(port, "GET /health HTTP/1.0\r\n\r\n", resp, sizeof resp, &body), 200);
  for (int i = 0; i < 42; i++) assert_int_equal(closed_within(fds[i], 5000), 1);
  for (int i = 0; i < 50; i++) close(fds[i]);
  pc_http_stop(h);
  /* the deadline to send a request */
  lim.timeout_ms = 300;
  h = pc_http_start("127.0.0.1", 0, &lim, health, metrics, NULL, &err);
  assert_non_null(h);
  port = pc_http_port(h);
  int idle = connect_to(port);
  assert_int_equal(closed_within(idle, 5000), 1);
  close(idle);
  /* a request head that never ends */
  int fd = connect_to(port);
  static char junk[20000];
  memset(junk, 'a', sizeof junk);
  memcpy(junk, "GET /health HTTP/1.0\r\nX: ", 26);
  assert_int_equal(send(fd, junk, sizeof junk, MSG_NOSIGNAL), (ssize_t)sizeof junk);
  size_t n = 0;
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    assert_true(poll(&pf, 1, 5000) > 0);
    ssize_t got = recv(fd, resp + n, sizeof resp - 1 - n, 0);
    if (got <= 0) break;
    n += (size_t)got;
  }
  resp[n] = '\0';
  assert_non_null(strstr(resp, "HTTP/1.1 431"));
  close(fd);
  assert_int_equal(http_req(port, "GET /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp, &body),
                   200);
  pc_http_stop(h);
}

static void test_metric_format(void **state) {
  (void)state;
  pc_buf_t b = {0};
  pc_metric_counter(&b, "pc_requests_total", "Requests served.", 18446744073709551615ull);
  assert_string_equal(b.p, "# HELP pc_requests_total Requests served.\n"
                           "# TYPE pc_requests_total counter\n"
                           "pc_requests_total 18446744073709551615\n");
  b.len = 0;
  pc_metric_gauge(&b, "pc_open", "Open things.", 3);
  assert_string_equal(b.p, "# HELP pc_open Open things.\n# TYPE pc_open gauge\npc_open 3\n");
  b.len = 0;
  pc_metric_gauge(&b, "g", "h", 0.1);
  assert_string_equal(strstr(b.p, "\ng ") + 1, "g 0.1\n");
  b.len = 0;
  pc_metric_gauge(&b, "g", "h", NAN);
  assert_string_equal(strstr(b.p, "\ng ") + 1, "g NaN\n");
  b.len = 0;
  pc_metric_gauge(&b, "g", "h", -INFINITY);
  assert_string_equal(strstr(b.p, "\ng ") + 1, "g -Inf\n");
  b.len = 0;
  pc_metric_gauge(&b, "g", "line\\one\ntwo", 1e300);
  assert_string_equal(b.p, "# HELP g line\\\\one\\ntwo\n# TYPE g gauge\ng 1e+300\n");
  pc_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_metric_format),
      cmocka_unit_test(test_endpoints),
      cmocka_unit_test(test_connection_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
