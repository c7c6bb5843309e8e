/* http.h — the small HTTP endpoint every daemon serves beside its protocol
 * port: GET /health (200 "ok", or 503 with the reason) and GET /metrics
 * (Prometheus text format 0.0.4), one request per connection, on its own
 * thread; anything else is 404, and non-GET methods 405. */
#ifndef PC_NET_HTTP_H
#define PC_NET_HTTP_H

#include <stdint.h>

#include <percolator/percolator.h>

#include "base/buf.h"

/* Appends a one-line reason to out and returns 0 when unhealthy; returns 1 when healthy. */
typedef int (*pc_http_health_fn)(void *ctx, pc_buf_t *out);
/* Appends the metrics in Prometheus text format to out. Called on the HTTP thread. */
typedef void (*pc_http_metrics_fn)(void *ctx, pc_buf_t *out);

typedef struct pc_http pc_http_t;

/* What the endpoint holds for its peers: at most max_connections at once
 * (the oldest is closed to admit another; default 64), each for at most
 * timeout_ms to send its request (default 5000). NULL: the defaults. */
typedef struct pc_http_limits {
  uint32_t max_connections;
  uint32_t timeout_ms;
} pc_http_limits_t;

/* Serves on host:port (port 0: ephemeral). Returns NULL on error naming
 * host:port; release with pc_http_stop. */
pc_http_t *pc_http_start(const char *host, uint16_t port, const pc_http_limits_t *limits,
                         pc_http_health_fn health, pc_http_metrics_fn metrics, void *ctx,
                         pc_error_t *err);
uint16_t pc_http_port(const pc_http_t *h);
void pc_http_stop(pc_http_t *h);

/* Helpers to write one metric: "# HELP", "# TYPE" and the sample line. */
void pc_metric_counter(pc_buf_t *out, const char *name, const char *help, uint64_t value);
void pc_metric_gauge(pc_buf_t *out, const char *name, const char *help, double value);

/* The "# HELP" and "# TYPE" lines of a family whose samples follow. */
void pc_metric_family(pc_buf_t *out, const char *name, const char *type, const char *help);
/* One sample "name{label=\"value\"} v" (label NULL: "name v"), the value
 * escaped as the format requires (\\, \", \n). */
void pc_metric_sample(pc_buf_t *out, const char *name, const char *label, const char *value,
                      uint64_t v);
/* A histogram: HELP, TYPE, a bucket per bound with le[i] = the observations
 * <= bounds[i] (cumulative, as the format counts them), the "+Inf" bucket
 * (= count), _sum and _count. */
void pc_metric_histogram(pc_buf_t *out, const char *name, const char *help,
                         const double *bounds, const uint64_t *le, size_t n, double sum,
                         uint64_t count);
/* One labelled series of a histogram whose family (pc_metric_family, type
 * "histogram") was written: name_bucket{label="value",le="..."} per bound
 * and +Inf, name_sum{...} and name_count{...}. */
void pc_metric_histogram_series(pc_buf_t *out, const char *name, const char *label,
                                const char *value, const double *bounds, const uint64_t *le,
                                size_t n, double sum, uint64_t count);

#endif
