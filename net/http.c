/* http.c — the small HTTP endpoint of every daemon (net/http.h): GET /health
 * and GET /metrics, served from an event base and a thread of its own so a
 * slow scrape never delays the protocol port, plus the helpers that format
 * Prometheus text-format samples.
 *
 * The server is a few dozen lines of HTTP/1.x on libevent bufferevents
 * rather than evhttp, which cannot bound its connections: each connection
 * may send one request head (at most HTTP_MAX_HEAD bytes) within
 * timeout_ms, gets one answer and is closed; at most max_connections are
 * open, the oldest being closed to admit a new one, so idle connections can
 * neither exhaust the process's descriptors nor lock scrapes out.
 *
 * Threading and ownership: the HTTP thread alone runs the event base, owns
 * every connection and calls the health and metrics callbacks. pc_http_stop
 * wakes it through a pipe (so no libevent object is touched from two
 * threads), joins it and then frees everything. The thread blocks all
 * signals.
 */
#include "net/http.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "base/error.h"
#include "base/log.h"

#define HTTP_MAX_HEAD 16384       /* a request line and headers */
#define HTTP_LINGER_MS 1000       /* after the answer: discard input until the peer closes */
#define HTTP_ACCEPT_RETRY_MS 100  /* pause after a failing accept() (e.g. EMFILE) */

typedef struct hconn {
  struct pc_http *h;
  struct bufferevent *bev;
  struct event *timer;           /* the request's deadline, then the linger */
  struct hconn *prev, *next;     /* open connections, oldest first */
  int answered, shut;
  char peer[80];
} hconn_t;

struct pc_http {
  char endpoint[300];
  uint16_t port;
  pc_http_health_fn health;
  pc_http_metrics_fn metrics;
  void *ctx;
  uint32_t max_connections, timeout_ms;
  struct event_base *base; /* owned; run by the thread only until it is joined */
  struct evconnlistener *listener;
  struct event *wake_ev, *retry_ev;
  int wake[2]; /* pipe: stop writes one byte */
  pthread_t thread;
  int started;
  /* HTTP thread only */
  hconn_t *head, *tail;
  uint32_t nconns;
  pc_log_limit_t loglim;
};

static void format_endpoint(char *out, size_t cap, const char *host, unsigned port) {
  if (strchr(host, ':'))
    snprintf(out, cap, "[%s]:%u", host, port);
  else
    snprintf(out, cap, "%s:%u", host, port);
}

static void hconn_close(hconn_t *c) {
  struct pc_http *h = c->h;
  if (c->prev) c->prev->next = c->next; else h->head = c->next;
  if (c->next) c->next->prev = c->prev; else h->tail = c->prev;
  h->nconns--;
  bufferevent_free(c->bev);
  event_free(c->timer);
  free(c);
}

/* Queues the answer; the connection closes once it is written. */
static void answer(hconn_t *c, int code, const char *reason, const char *ctype,
                   const char *extra, const char *body, size_t len) {
  struct evbuffer *out = bufferevent_get_output(c->bev);
  evbuffer_add_printf(out,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                      code, reason, ctype, len, extra ? extra : "");
  if (len) evbuffer_add(out, body, len);
  c->answered = 1;
  bufferevent_disable(c->bev, EV_READ);
  bufferevent_enable(c->bev, EV_WRITE);
}

static void serve(hconn_t *c, const char *method, const char *target) {
  static const char plain[] = "text/plain; charset=utf-8";
  struct pc_http *h = c->h;
  size_t plen = strcspn(target, "?#");
  int is_health = plen == 7 && memcmp(target, "/health", 7) == 0;
  int is_metrics = plen == 8 && memcmp(target, "/metrics", 8) == 0;
  if (!is_health && !is_metrics) {
    answer(c, 404, "Not Found", plain, NULL, "not found\n", 10);
    return;
  }
  if (strcmp(method, "GET") != 0) {
    answer(c, 405, "Method Not Allowed", plain, "Allow: GET\r\n", "method not allowed\n", 19);
    return;
  }
  pc_buf_t out = {0};
  if (is_health) {
    int ok = h->health ? h->health(h->ctx, &out) : 1;
    if (ok) {
      answer(c, 200, "OK", plain, NULL, "ok\n", 3);
    } else {
      if (out.len == 0 && pc_buf_append(&out, "unhealthy", 9) != 0) out.len = 0;
      if (out.len == 0 || out.p[out.len - 1] != '\n') pc_buf_append(&out, "\n", 1);
      answer(c, 503, "Service Unavailable", plain, NULL, out.p ? out.p : "\n",
             out.p ? out.len : 1);
    }
  } else {
    if (h->metrics) h->metrics(h->ctx, &out);
    answer(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", NULL, out.p ? out.p : "",
           out.len);
  }
  pc_buf_free(&out);
}

/* A complete request head in the input: its request line decides. */
static void serve_head(hconn_t *c, struct evbuffer *in) {
  char *line = evbuffer_readln(in, NULL, EVBUFFER_EOL_CRLF);
  char method[16], target[1024], version[16];
  int ok = line && sscanf(line, "%15s %1023s %15s", method, target, version) == 3 &&
           strncmp(version, "HTTP/1.", 7) == 0 && target[0] == '/';
  free(line);
  if (ok)
    serve(c, method, target);
  else
    answer(c, 400, "Bad Request", "text/plain; charset=utf-8", NULL, "bad request\n", 12);
}

static void read_cb(struct bufferevent *bev, void *arg) {
  hconn_t *c = arg;
  struct evbuffer *in = bufferevent_get_input(bev);
  if (c->shut) { /* lingering: discard */
    evbuffer_drain(in, evbuffer_get_length(in));
    return;
  }
  if (c->answered) return;
  struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
  if (end.pos < 0) end = evbuffer_search(in, "\n\n", 2, NULL);
  if (end.pos >= 0) {
    serve_head(c, in);
  } else if (evbuffer_get_length(in) > HTTP_MAX_HEAD) {
    answer(c, 431, "Request Header Fields Too Large", "text/plain; charset=utf-8", NULL,
           "request head too large\n", 23);
  }
}

/* The answer is out: send FIN and discard input until the peer closes too
 * (or HTTP_LINGER_MS passes), so that a reset cannot destroy the answer. */
static void write_cb(struct bufferevent *bev, void *arg) {
  hconn_t *c = arg;
  if (!c->answered || c->shut) return;
  c->shut = 1;
  shutdown(bufferevent_getfd(bev), SHUT_WR);
  bufferevent_enable(bev, EV_READ);
  struct timeval tv = {HTTP_LINGER_MS / 1000, (HTTP_LINGER_MS % 1000) * 1000};
  evtimer_add(c->timer, &tv);
}

static void event_cb(struct bufferevent *bev, short what, void *arg) {
  hconn_t *c = arg;
  (void)bev;
  /* a peer that closed its side may still read an answer being written */
  if ((what & BEV_EVENT_EOF) && c->answered && !c->shut &&
      evbuffer_get_length(bufferevent_get_output(c->bev)) > 0)
    return;
  hconn_close(c);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
  hconn_t *c = arg;
  (void)fd;
  (void)what;
  if (!c->shut)
    pc_log_limited(&c->h->loglim, PC_LOG_WARN, "http %s: %s sent no complete request within %u ms; "
                   "closing (limits.http_timeout_ms)", c->h->endpoint, c->peer, c->h->timeout_ms);
  hconn_close(c);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg) {
  struct pc_http *h = arg;
  (void)l;
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  getnameinfo(sa, (socklen_t)salen, host, sizeof host, port, sizeof port,
              NI_NUMERICHOST | NI_NUMERICSERV);
  if (h->nconns >= h->max_connections) {
    /* the oldest makes room: scrapes get in whatever idle peers do */
    pc_log_limited(&h->loglim, PC_LOG_WARN, "http %s: %u connections open; closing the oldest, "
                   "from %s (limits.http_max_connections)", h->endpoint, h->nconns,
                   h->head->peer);
    hconn_close(h->head);
  }
  hconn_t *c = calloc(1, sizeof *c);
  struct bufferevent *bev = c ? bufferevent_socket_new(h->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
  struct event *timer = bev ? evtimer_new(h->base, timer_cb, c) : NULL;
  if (!timer) {
    pc_log_limited(&h->loglim, PC_LOG_ERROR, "http %s: out of memory accepting %s", h->endpoint,
                   host);
    if (bev) bufferevent_free(bev); else evutil_closesocket(fd);
    free(c);
    return;
  }
  c->h = h;
  c->bev = bev;
  c->timer = timer;
  snprintf(c->peer, sizeof c->peer, "%.64s:%.8s", host, port);
  c->prev = h->tail;
  if (h->tail) h->tail->next = c; else h->head = c;
  h->tail = c;
  h->nconns++;
  bufferevent_setwatermark(bev, EV_READ, 0, HTTP_MAX_HEAD + 4096);
  bufferevent_setcb(bev, read_cb, write_cb, event_cb, c);
  bufferevent_enable(bev, EV_READ);
  struct timeval tv = {h->timeout_ms / 1000, (suseconds_t)(h->timeout_ms % 1000) * 1000};
  evtimer_add(timer, &tv);
}

static void accept_error_cb(struct evconnlistener *l, void *arg) {
  struct pc_http *h = arg;
  int e = EVUTIL_SOCKET_ERROR();
  pc_log_limited(&h->loglim, PC_LOG_WARN, "http %s: accept failed: %s; pausing accepts for %d ms",
                 h->endpoint, evutil_socket_error_to_string(e), HTTP_ACCEPT_RETRY_MS);
  evconnlistener_disable(l);
  struct timeval tv = {0, HTTP_ACCEPT_RETRY_MS * 1000};
  evtimer_add(h->retry_ev, &tv);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
  struct pc_http *h = arg;
  (void)fd;
  (void)what;
  evconnlistener_enable(h->listener);
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
  while (h->head) hconn_close(h->head);
  if (h->listener) evconnlistener_free(h->listener);
  if (h->wake_ev) event_free(h->wake_ev);
  if (h->retry_ev) event_free(h->retry_ev);
  if (h->base) event_base_free(h->base);
  if (h->wake[0] >= 0) close(h->wake[0]);
  if (h->wake[1] >= 0) close(h->wake[1]);
  free(h);
}

/* Binds host:port (the first address that works). */
static int http_bind(struct pc_http *h, const char *host, uint16_t port, pc_error_t *err) {
  char portstr[8], ep[300];
  snprintf(portstr, sizeof portstr, "%u", (unsigned)port);
  format_endpoint(ep, sizeof ep, host, port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(host, portstr, &hints, &res);
  if (gai != 0) {
    pc_error_set(err, PC_INVALID, "cannot listen on %s for HTTP: %s", ep, gai_strerror(gai));
    return -1;
  }
  int e = 0;
  for (struct addrinfo *ai = res; ai && !h->listener; ai = ai->ai_next) {
    h->listener = evconnlistener_new_bind(
        h->base, accept_cb, h, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
        128, ai->ai_addr, (int)ai->ai_addrlen);
    if (!h->listener) e = EVUTIL_SOCKET_ERROR();
  }
  freeaddrinfo(res);
  if (!h->listener) {
    pc_error_set(err, PC_IO_ERROR, "cannot listen on %s for HTTP: %s", ep,
                 evutil_socket_error_to_string(e));
    return -1;
  }
  evconnlistener_set_error_cb(h->listener, accept_error_cb);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  h->port = port;
  if (getsockname(evconnlistener_get_fd(h->listener), (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET)
      h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
      h->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  format_endpoint(h->endpoint, sizeof h->endpoint, host, h->port);
  return 0;
}

pc_http_t *pc_http_start(const char *host, uint16_t port, const pc_http_limits_t *limits,
                         pc_http_health_fn health, pc_http_metrics_fn metrics, void *ctx,
                         pc_error_t *err) {
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
  h->max_connections = limits && limits->max_connections ? limits->max_connections : 64;
  h->timeout_ms = limits && limits->timeout_ms ? limits->timeout_ms : 5000;
  if (pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    pc_error_set(err, PC_IO_ERROR, "http %s: pipe: %s", ep, strerror(errno));
    http_free(h);
    return NULL;
  }
  h->base = event_base_new();
  h->wake_ev = h->base ? event_new(h->base, h->wake[0], EV_READ | EV_PERSIST, wake_cb, h) : NULL;
  h->retry_ev = h->base ? evtimer_new(h->base, retry_cb, h) : NULL;
  if (!h->wake_ev || !h->retry_ev || event_add(h->wake_ev, NULL) != 0) {
    pc_error_set(err, PC_INTERNAL, "http %s: cannot create its event loop", ep);
    http_free(h);
    return NULL;
  }
  if (http_bind(h, host, port, err) != 0) {
    http_free(h);
    return NULL;
  }
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
  char line[512];
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

void pc_metric_histogram_series(pc_buf_t *out, const char *name, const char *label,
                                const char *value, const double *bounds, const uint64_t *le,
                                size_t n, double sum, uint64_t count) {
  char line[768];
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (le[i] > v) v = le[i];
    int k = snprintf(line, sizeof line, "%s_bucket{%s=\"%s\",le=\"%.15g\"} %llu\n", name, label,
                     value, bounds[i], (unsigned long long)v);
    pc_buf_append(out, line, (size_t)k);
  }
  if (v > count) count = v;
  int k = snprintf(line, sizeof line,
                   "%s_bucket{%s=\"%s\",le=\"+Inf\"} %llu\n%s_sum{%s=\"%s\"} %.17g\n"
                   "%s_count{%s=\"%s\"} %llu\n",
                   name, label, value, (unsigned long long)count, name, label, value, sum, name,
                   label, value, (unsigned long long)count);
  pc_buf_append(out, line, (size_t)k);
}
