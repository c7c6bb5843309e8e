/* http.c — the small HTTP endpoint of every daemon (core/http.h): GET /health
 * and GET /metrics on libevent's evhttp, served from an event base and a
 * thread of its own so a slow scrape never delays the protocol port, plus
 * the helpers that format Prometheus text-format samples.
 *
 * Threading and ownership: the HTTP thread alone runs the event base and
 * calls the health and metrics callbacks. pc_http_stop wakes it through a
 * pipe (so no libevent object is touched from two threads), joins it and then
 * frees everything. The thread blocks all signals.
 */
#include "net/http.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>

#include "core/error.h"
#include "core/log.h"

#define HTTP_TIMEOUT_S 10
#define HTTP_MAX_HEADERS 16384
#define HTTP_MAX_BODY 65536

struct pc_http {
  char endpoint[300];
  uint16_t port;
  pc_http_health_fn health;
  pc_http_metrics_fn metrics;
  void *ctx;
  struct event_base *base; /* owned; run by the thread only until it is joined */
  struct evhttp *http;
  struct event *wake_ev;
  int wake[2]; /* pipe: stop writes one byte */
  pthread_t thread;
  int started;
};

static void format_endpoint(char *out, size_t cap, const char *host, unsigned port) {
  if (strchr(host, ':'))
    snprintf(out, cap, "[%s]:%u", host, port);
  else
    snprintf(out, cap, "%s:%u", host, port);
}

static void send_text(struct evhttp_request *req, int code, const char *reason,
                      const char *ctype, const char *body, size_t len) {
  struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
  evhttp_add_header(hdr, "Content-Type", ctype);
  evhttp_add_header(hdr, "Cache-Control", "no-store");
  struct evbuffer *out = evbuffer_new();
  if (!out) {
    evhttp_send_error(req, 500, "Out of memory");
    return;
  }
  evbuffer_add(out, body, len);
  evhttp_send_reply(req, code, reason, out);
  evbuffer_free(out);
}

static void handle(struct evhttp_request *req, void *arg) {
  struct pc_http *h = arg;
  static const char plain[] = "text/plain; charset=utf-8";
  const char *uri = evhttp_request_get_uri(req);
  size_t plen = uri ? strcspn(uri, "?#") : 0;
  int is_health = plen == 7 && memcmp(uri, "/health", 7) == 0;
  int is_metrics = plen == 8 && memcmp(uri, "/metrics", 8) == 0;
  if (!is_health && !is_metrics) {
    send_text(req, 404, "Not Found", plain, "not found\n", 10);
    return;
  }
  if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET");
    send_text(req, 405, "Method Not Allowed", plain, "method not allowed\n", 19);
    return;
  }
  pc_buf_t out = {0};
  if (is_health) {
    int ok = h->health ? h->health(h->ctx, &out) : 1;
    if (ok) {
      send_text(req, 200, "OK", plain, "ok\n", 3);
    } else {
      if (out.len == 0 && pc_buf_append(&out, "unhealthy", 9) != 0) out.len = 0;
      if (out.len == 0 || out.p[out.len - 1] != '\n') pc_buf_append(&out, "\n", 1);
      send_text(req, 503, "Service Unavailable", plain, out.p ? out.p : "\n", out.p ? out.len : 1);
    }
  } else {
    if (h->metrics) h->metrics(h->ctx, &out);
    send_text(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", out.p ? out.p : "",
              out.len);
  }
  pc_buf_free(&out);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_http *h = arg;
  (void)what;
  char b;
  while (read(fd, &b, 1) < 0 && errno == EINTR) {
  }
  event_base_loopbreak(h->base);
}

static void *http_main(void *arg) {
  struct pc_http *h = arg;
  event_base_loop(h->base, EVLOOP_NO_EXIT_ON_EMPTY);
  return NULL;
}

static void http_free(struct pc_http *h) {
  if (h->http) evhttp_free(h->http);
  if (h->wake_ev) event_free(h->wake_ev);
  if (h->base) event_base_free(h->base);
  if (h->wake[0] >= 0) close(h->wake[0]);
  if (h->wake[1] >= 0) close(h->wake[1]);
  free(h);
}

pc_http_t *pc_http_start(const char *host, uint16_t port, pc_http_health_fn health,
                         pc_http_metrics_fn metrics, void *ctx, pc_error_t *err) {
  if (!host || !host[0]) host = "127.0.0.1";
  char ep[300];
  format_endpoint(ep, sizeof ep, host, port);
  struct pc_http *h = calloc(1, sizeof *h);
  if (!h) {
    pc_error_set(err, PC_NOMEM, "http %s: out of memory", ep);
    return NULL;
  }
  h->wake[0] = h->wake[1] = -1;
  h->health = health;
  h->metrics = metrics;
  h->ctx = ctx;
  if (pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    pc_error_set(err, PC_IO_ERROR, "http %s: pipe: %s", ep, strerror(errno));
    http_free(h);
    return NULL;
  }
  h->base = event_base_new();
  h->http = h->base ? evhttp_new(h->base) : NULL;
  h->wake_ev = h->base ? event_new(h->base, h->wake[0], EV_READ | EV_PERSIST, wake_cb, h) : NULL;
  if (!h->http || !h->wake_ev || event_add(h->wake_ev, NULL) != 0) {
    pc_error_set(err, PC_INTERNAL, "http %s: cannot create its event loop", ep);
    http_free(h);
    return NULL;
  }
  evhttp_set_timeout(h->http, HTTP_TIMEOUT_S);
  evhttp_set_max_headers_size(h->http, HTTP_MAX_HEADERS);
  evhttp_set_max_body_size(h->http, HTTP_MAX_BODY);
  /* every method reaches handle(), which answers 405 itself */
  evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                          EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                          EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                          EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
  evhttp_set_gencb(h->http, handle, h);
  errno = 0;
  struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(h->http, host, port);
  if (!bs) {
    int e = errno;
    pc_error_set(err, PC_IO_ERROR, "cannot listen on %s for HTTP: %s", ep,
                 e ? strerror(e) : "bind failed");
    http_free(h);
    return NULL;
  }
  h->port = port;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET)
      h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
      h->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  format_endpoint(h->endpoint, sizeof h->endpoint, host, h->port);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&h->thread, NULL, http_main, h);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pc_error_set(err, PC_INTERNAL, "http %s: cannot start its thread", h->endpoint);
    http_free(h);
    return NULL;
  }
  h->started = 1;
  pc_log(PC_LOG_INFO, "http: serving /health and /metrics on %s", h->endpoint);
  return h;
}

uint16_t pc_http_port(const pc_http_t *h) { return h ? h->port : 0; }

void pc_http_stop(pc_http_t *h) {
  if (!h) return;
  if (h->started) {
    char b = 1;
    while (write(h->wake[1], &b, 1) < 0 && errno == EINTR) {
    }
    pthread_join(h->thread, NULL);
  }
  http_free(h);
}

/* Appends the HELP text with '\' and newlines escaped as the format requires. */
static void append_help(pc_buf_t *out, const char *name, const char *help) {
  pc_buf_append(out, "# HELP ", 7);
  pc_buf_append(out, name, strlen(name));
  pc_buf_append(out, " ", 1);
  for (const char *p = help ? help : ""; *p; p++) {
    if (*p == '\\')
      pc_buf_append(out, "\\\\", 2);
    else if (*p == '\n')
      pc_buf_append(out, "\\n", 2);
    else
      pc_buf_append(out, p, 1);
  }
  pc_buf_append(out, "\n", 1);
}

static void append_type(pc_buf_t *out, const char *name, const char *type) {
  pc_buf_append(out, "# TYPE ", 7);
  pc_buf_append(out, name, strlen(name));
  pc_buf_append(out, " ", 1);
  pc_buf_append(out, type, strlen(type));
  pc_buf_append(out, "\n", 1);
}

void pc_metric_counter(pc_buf_t *out, const char *name, const char *help, uint64_t value) {
  append_help(out, name, help);
  append_type(out, name, "counter");
  char line[64];
  int n = snprintf(line, sizeof line, " %llu\n", (unsigned long long)value);
  pc_buf_append(out, name, strlen(name));
  pc_buf_append(out, line, (size_t)n);
}

void pc_metric_gauge(pc_buf_t *out, const char *name, const char *help, double value) {
  append_help(out, name, help);
  append_type(out, name, "gauge");
  char line[64];
  int n;
  if (isnan(value))
    n = snprintf(line, sizeof line, " NaN\n");
  else if (isinf(value))
    n = snprintf(line, sizeof line, " %sInf\n", value > 0 ? "+" : "-");
  else {
    n = snprintf(line, sizeof line, " %.15g\n", value);
    if (strtod(line, NULL) != value) n = snprintf(line, sizeof line, " %.17g\n", value);
  }
  pc_buf_append(out, name, strlen(name));
  pc_buf_append(out, line, (size_t)n);
}

void pc_metric_family(pc_buf_t *out, const char *name, const char *type, const char *help) {
  append_help(out, name, help);
  append_type(out, name, type);
}

/* Appends a label value with '\\', '"' and newlines escaped as the format requires. */
static void append_label_value(pc_buf_t *out, const char *v) {
  for (const char *p = v ? v : ""; *p; p++) {
    if (*p == '\\')
      pc_buf_append(out, "\\\\", 2);
    else if (*p == '"')
      pc_buf_append(out, "\\\"", 2);
    else if (*p == '\n')
      pc_buf_append(out, "\\n", 2);
    else
      pc_buf_append(out, p, 1);
  }
}

void pc_metric_sample(pc_buf_t *out, const char *name, const char *label, const char *value,
                      uint64_t v) {
  pc_buf_append(out, name, strlen(name));
  if (label) {
    pc_buf_append(out, "{", 1);
    pc_buf_append(out, label, strlen(label));
    pc_buf_append(out, "=\"", 2);
    append_label_value(out, value);
    pc_buf_append(out, "\"}", 2);
  }
  char line[32];
  int n = snprintf(line, sizeof line, " %llu\n", (unsigned long long)v);
  pc_buf_append(out, line, (size_t)n);
}

void pc_metric_histogram(pc_buf_t *out, const char *name, const char *help,
                         const double *bounds, const uint64_t *le, size_t n, double sum,
                         uint64_t count) {
  pc_metric_family(out, name, "histogram", help);
  /* counters read one by one while observations land may disagree by a few:
   * never print a bucket above a later one, nor +Inf apart from _count */
  char line[160];
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (le[i] > v) v = le[i];
    int k = snprintf(line, sizeof line, "%s_bucket{le=\"%.15g\"} %llu\n", name, bounds[i],
                     (unsigned long long)v);
    pc_buf_append(out, line, (size_t)k);
  }
  if (v > count) count = v;
  int k = snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n",
                   name, (unsigned long long)count, name, sum, name, (unsigned long long)count);
  pc_buf_append(out, line, (size_t)k);
}
