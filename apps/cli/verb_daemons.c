/* verb_daemons.c — the daemon verbs: `tso`, `lockd`, `tablet` run one role
 * of the cluster in the foreground; `run` runs every role the configuration
 * names in one process (the single-machine server), and its workers when it
 * has a "workers" section; `worker` runs the configured observers against a
 * cluster, or, without one, holds the embedded store and serves it to
 * other processes while its observers run (see run_worker). Each role serves the
 * rpc.h protocol on its "listen" endpoint and /health and /metrics on its
 * "http" endpoint, logs to stderr, and on SIGTERM or SIGINT stops accepting,
 * answers the requests in flight, and closes its store and oracle cleanly,
 * so nothing acknowledged is lost. `--ready-file F` writes the bound
 * endpoints as JSON once every role listens (for scripts using port 0). */
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "config/config.h"
#include "notify/worker.h"
#include "observers/plugin.h"
#include "core/db.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "net/http.h"
#include "core/log.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "lockservice/lockservice.h"
#include "tso/oracle.h"
#include "tso/tso_rpc.h"

typedef enum role_kind { ROLE_TSO, ROLE_LOCKD, ROLE_TABLET } role_kind_t;

typedef struct role {
  role_kind_t kind;
  char name[96];
  pc_rpc_server_t *rpc;
  pc_http_t *http;
  pc_oracle_t *oracle;   /* ROLE_TSO */
  pc_ls_t *ls;           /* ROLE_LOCKD */
  pc_tablet_t *tablet;   /* ROLE_TABLET */
} role_t;

/* Where tablets get commit timestamps for one-phase commits. */
typedef struct ts_provider {
  pc_oracle_t *local;      /* `run`'s own oracle: asked directly */
  pc_rpc_client_t *remote; /* or a separate tso daemon, through the batcher */
  pc_ts_batcher_t *batcher;
} ts_provider_t;

/* The cluster's garbage collector (gc_main), in each process that serves tablets. */
typedef struct gc_loop {
  pthread_t thread;
  int running, stop;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *client_config; /* a client configuration of this cluster, with bound ports */
} gc_loop_t;

/* Observers run by this process (start_workers). */
typedef struct workers {
  pc_db_t *db; /* a client of the cluster (or of the store this process serves) */
  pc_observer_registry_t *registry;
  pc_plugin_t **plugins;
  size_t nplugins;
  pc_worker_t *worker;
  pc_http_t *http;
  /* the worker's record in the system table (report_main), for `status` */
  char row[300];
  pthread_t reporter;
  int reporting, stop;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} workers_t;

typedef struct daemon_state {
  const pc_config_t *cfg;
  pc_oracle_t *oracle; /* the tso role's, when this process runs one */
  role_t roles[64];
  size_t nroles;
  ts_provider_t ts;
  gc_loop_t gc;
  workers_t w;
} daemon_state_t;

static const char *const kind_names[] = {"tso", "lockd", "tablet"};

static pc_status_t ts_from_provider(void *ctx, uint64_t *ts, pc_error_t *err) {
  ts_provider_t *p = ctx;
  if (p->local) return pc_oracle_next(p->local, 1, ts, err);
  return pc_ts_batcher_get(p->batcher, 5000, ts, err);
}

static int role_health(void *ctx, pc_buf_t *out) {
  (void)ctx;
  (void)out;
  return 1;
}

static void role_metrics(void *ctx, pc_buf_t *out) {
  role_t *r = ctx;
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(r->rpc, &st);
  pc_metric_counter(out, "percolator_rpc_connections_accepted_total", "Connections accepted",
                    st.connections_accepted);
  pc_metric_gauge(out, "percolator_rpc_connections_open", "Connections open",
                  (double)st.connections_open);
  pc_metric_counter(out, "percolator_rpc_requests_total", "Requests served", st.requests);
  pc_metric_counter(out, "percolator_rpc_protocol_errors_total",
                    "Malformed frames, bad secrets, oversized requests", st.protocol_errors);
  pc_metric_counter(out, "percolator_rpc_bytes_in_total", "Bytes received", st.bytes_in);
  pc_metric_counter(out, "percolator_rpc_bytes_out_total", "Bytes sent", st.bytes_out);
  switch (r->kind) {
    case ROLE_TSO:
      pc_metric_gauge(out, "percolator_tso_last_timestamp", "Highest timestamp handed out",
                      (double)pc_oracle_last(r->oracle));
      break;
    case ROLE_LOCKD: {
      pc_metric_gauge(out, "percolator_lockd_sessions", "Live sessions",
                      (double)pc_ls_session_count(r->ls));
      size_t unreported = 0;
      uint64_t oldest = pc_ls_oldest_reported(r->ls, &unreported);
      if (oldest != UINT64_MAX)
        pc_metric_gauge(out, "percolator_lockd_oldest_reported_ts",
                        "Oldest start_ts reported open by a live session", (double)oldest);
      pc_metric_gauge(out, "percolator_lockd_sessions_unreported",
                      "Live sessions that have not reported their oldest start_ts",
                      (double)unreported);
      break;
    }
    case ROLE_TABLET:
      pc_metric_counter(out, "percolator_tablet_operations_total", "Store operations served",
                        pc_tablet_ops(r->tablet));
      {
        pc_tablet_gc_t g;
        pc_tablet_gc_stats(r->tablet, &g);
        pc_metric_gauge(out, "percolator_gc_safe_point", "Safe point of the last GC pass",
                        (double)g.safe_point);
        pc_metric_counter(out, "percolator_gc_passes_total", "GC passes", g.passes);
        pc_metric_counter(out, "percolator_gc_versions_deleted_total",
                          "Old versions deleted by GC", g.deleted.versions);
        pc_metric_counter(out, "percolator_gc_rollbacks_deleted_total",
                          "Rollback records deleted by GC", g.deleted.rollbacks);
        pc_metric_counter(out, "percolator_gc_data_deleted_total",
                          "Data cells of large values deleted by GC", g.deleted.data);
      }
      break;
  }
}

static pc_status_t start_servers(daemon_state_t *d, role_t *r, const pc_endpoint_t *listen,
                                 const pc_endpoint_t *http, pc_rpc_handler_fn handler,
                                 void *hctx, pc_error_t *err) {
  pc_rpc_server_options_t o = {0};
  if (r->kind == ROLE_LOCKD) o.on_close = pc_ls_rpc_on_close; /* sessions die with their client */
  if (r->kind == ROLE_TSO) o.runs_inline = pc_tso_rpc_runs_inline; /* no worker hand-off */
  o.name = r->name;
  o.host = listen->host;
  o.port = listen->port;
  o.secret = d->cfg->secret;
  o.in_process = 1; /* this process's workers and collector call it directly */
  r->rpc = pc_rpc_server_start(&o, handler, hctx, err);
  if (!r->rpc) {
    pc_error_prefix(err, "%s", r->name);
    return err->code;
  }
  pc_log(PC_LOG_INFO, "%s: serving on %s:%u", r->name, listen->host,
         (unsigned)pc_rpc_server_port(r->rpc));
  if (http->set) {
    r->http = pc_http_start(http->host, http->port, role_health, role_metrics, r, err);
    if (!r->http) {
      pc_error_prefix(err, "%s: http", r->name);
      return err->code;
    }
    pc_log(PC_LOG_INFO, "%s: /health and /metrics on %s:%u", r->name, http->host,
           (unsigned)pc_http_port(r->http));
  }
  return PC_OK;
}

static role_t *new_role(daemon_state_t *d, role_kind_t kind, const char *name, pc_error_t *err) {
  if (d->nroles == sizeof d->roles / sizeof d->roles[0]) {
    pc_error_set(err, PC_INVALID, "too many roles in one process");
    return NULL;
  }
  role_t *r = &d->roles[d->nroles++];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  snprintf(r->name, sizeof r->name, "%s%s%s", kind_names[kind], name ? " " : "", name ? name : "");
  return r;
}

/* A path under the configuration's data_dir when dir is NULL. */
static char *role_dir(const pc_config_t *cfg, const char *dir, const char *sub) {
  char *p = NULL;
  if (dir) return strdup(dir);
  if (asprintf(&p, "%s/%s", cfg->data_dir, sub) < 0) return NULL;
  return p;
}

static pc_status_t make_dir(const char *path, pc_error_t *err) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
      return pc_error_set(err, PC_IO_ERROR, "cannot create %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return pc_error_set(err, PC_IO_ERROR, "cannot create %s: %s", tmp, strerror(errno));
  return PC_OK;
}

static pc_status_t start_tso(daemon_state_t *d, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  role_t *r = new_role(d, ROLE_TSO, NULL, err);
  if (!r) return PC_INVALID;
  char *dir = role_dir(cfg, cfg->tso.data_dir, "tso");
  pc_status_t st = dir ? make_dir(dir, err) : pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK) {
    char path[4200];
    snprintf(path, sizeof path, "%s/oracle", dir);
    r->oracle = d->oracle = pc_oracle_open(path, cfg->tso.window_ms, err);
    if (!r->oracle) st = err ? err->code : PC_IO_ERROR;
  }
  free(dir);
  if (st == PC_OK)
    st = start_servers(d, r, &cfg->tso.listen, &cfg->tso.http, pc_tso_rpc_handler, r->oracle, err);
  return st;
}

static pc_status_t start_lockd(daemon_state_t *d, pc_error_t *err) {
  role_t *r = new_role(d, ROLE_LOCKD, NULL, err);
  if (!r) return PC_INVALID;
  r->ls = pc_ls_create();
  if (!r->ls) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_log(PC_LOG_INFO, "lockd: epoch %08x", pc_ls_epoch(r->ls));
  return start_servers(d, r, &d->cfg->lockservice.listen, &d->cfg->lockservice.http,
                       pc_ls_rpc_handler, r->ls, err);
}

static pc_status_t start_tablet(daemon_state_t *d, const pc_config_tablet_t *t, pc_error_t *err) {
  role_t *r = new_role(d, ROLE_TABLET, t->name, err);
  if (!r) return PC_INVALID;
  char sub[160];
  snprintf(sub, sizeof sub, "tablet-%s", t->name);
  char *dir = role_dir(d->cfg, t->data_dir, sub);
  pc_status_t st = dir ? make_dir(dir, err) : pc_error_set(err, PC_NOMEM, "out of memory");
  pc_store_t *store = NULL;
  int fresh;
  if (st == PC_OK) st = pc_data_dir_prepare(dir, 1, &fresh, err);
  if (st == PC_OK) {
    char path[4200];
    snprintf(path, sizeof path, "%s/store", dir);
    pc_local_options_t lo = {1, d->cfg->store.sync, (size_t)d->cfg->store.cache_mb << 20,
                             (size_t)d->cfg->store.meta_cache_mb << 20,
                             (size_t)d->cfg->store.write_buffer_mb << 20};
    store = pc_local_store_open(path, &lo, err);
    if (!store) st = err ? err->code : PC_IO_ERROR;
  }
  free(dir);
  if (st != PC_OK) {
    pc_error_prefix(err, "tablet %s", t->name);
    return st;
  }
  pc_row_range_t range = {t->start, t->start_len, t->end, t->end_len};
  r->tablet = pc_tablet_create(t->name, store, &range, ts_from_provider, &d->ts);
  if (!r->tablet) {
    store->ops->close(store);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  return start_servers(d, r, &t->listen, &t->http, pc_tablet_rpc_handler, r->tablet, err);
}

/* ---- garbage collection ------------------------------------------------------
 *
 * Every process that serves tablets runs a collector: every store.gc_interval_ms
 * it opens (once) a client of the cluster, takes the lock-service lock
 * "percolator/gc" so that one process collects at a time (without a lock
 * service, each does: passes are idempotent), and runs pc_db_gc, which
 * settles old locks and then collects on every tablet. The client's
 * configuration is the daemon's own with the ports this process bound. */

#define GC_LOCK "percolator/gc"

/* The daemon's configuration with the endpoints of the roles this process
 * runs replaced by their bound ports, written to a temporary file; its
 * path (malloc'd), or NULL. */
static char *write_client_config(daemon_state_t *d) {
  json_error_t je;
  json_t *root = json_load_file(d->cfg->source, 0, &je);
  if (!root) return NULL;
  for (size_t i = 0; i < d->nroles; i++) {
    const role_t *r = &d->roles[i];
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%u", (unsigned)pc_rpc_server_port(r->rpc));
    json_t *o = NULL;
    if (r->kind == ROLE_TSO) o = json_object_get(root, "tso");
    else if (r->kind == ROLE_LOCKD) o = json_object_get(root, "lockservice");
    else {
      json_t *ts = json_object_get(root, "tablets");
      for (size_t k = 0; k < json_array_size(ts); k++) {
        json_t *t = json_array_get(ts, k);
        if (strcmp(json_string_value(json_object_get(t, "name")), r->name + strlen("tablet ")) == 0)
          o = t;
      }
    }
    if (o) json_object_set_new(o, "listen", json_string(ep));
  }
  char path[] = "/tmp/percolator-gc-XXXXXX";
  int fd = mkstemp(path);
  char *out = NULL;
  if (fd >= 0) {
    FILE *f = fdopen(fd, "w");
    if (f && json_dumpf(root, f, 0) == 0 && fclose(f) == 0) out = strdup(path);
    else if (f) fclose(f);
    else close(fd);
    if (!out) unlink(path);
  }
  json_decref(root);
  return out;
}

static void *gc_main(void *arg) {
  daemon_state_t *d = arg;
  gc_loop_t *g = &d->gc;
  pc_db_t *db = NULL;
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    struct timespec until = pc_mono_after_ms(d->cfg->store.gc_interval_ms);
    pthread_cond_timedwait(&g->cv, &g->mu, &until);
    if (g->stop) break;
    pthread_mutex_unlock(&g->mu);
    pc_error_t err;
    if (!db) db = pc_db_open_config(g->client_config, &err);
    if (!db) {
      pc_log(PC_LOG_WARN, "gc: cannot open a client of the cluster: %s", err.text);
    } else {
      int mine = 1;
      uint64_t holder = 0;
      /* the lock only spares work: with the lock service away, collect anyway */
      if (db->ls && pc_ls_client_lock_try(db->ls, GC_LOCK, strlen(GC_LOCK), 2000, &mine, &holder,
                                          &err) != PC_OK)
        mine = 1;
      pc_gc_stats_t s;
      if (mine && pc_db_gc(db, &s, &err) != PC_OK)
        pc_log(PC_LOG_WARN, "gc: %s", err.text);
      else if (mine)
        pc_log(PC_LOG_DEBUG, "gc: safe point %llu, %llu versions deleted",
               (unsigned long long)s.safe_point, (unsigned long long)s.versions);
    }
    pthread_mutex_lock(&g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  pc_db_close(db);
  return NULL;
}

static void gc_start(daemon_state_t *d) {
  gc_loop_t *g = &d->gc;
  if (d->cfg->store.gc_interval_ms == 0) return;
  if (!(g->client_config = write_client_config(d))) {
    pc_log(PC_LOG_WARN, "gc: cannot write a client configuration; no background collection");
    return;
  }
  pthread_mutex_init(&g->mu, NULL);
  pc_cond_init_mono(&g->cv);
  g->running = pthread_create(&g->thread, NULL, gc_main, d) == 0;
}

static void gc_stop(daemon_state_t *d) {
  gc_loop_t *g = &d->gc;
  if (g->running) {
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    g->running = 0;
  }
  if (g->client_config) unlink(g->client_config);
  free(g->client_config);
  g->client_config = NULL;
}

/* ---- workers ------------------------------------------------------------------ */

static int worker_health(void *ctx, pc_buf_t *out) {
  (void)ctx;
  (void)out;
  return 1;
}

static void worker_metrics(void *ctx, pc_buf_t *out) {
  workers_t *w = ctx;
  pc_worker_stats_t s;
  pc_error_t err;
  if (pc_worker_stats(w->worker, &s, &err) != PC_OK) return;
  pc_metric_counter(out, "percolator_worker_notifications_seen_total", "Notifications found",
                    s.notifications_seen);
  pc_metric_counter(out, "percolator_worker_claims_total", "Bucket claims taken", s.claims_taken);
  pc_metric_counter(out, "percolator_worker_claims_busy_total",
                    "Bucket claims skipped (held by another worker)", s.claims_busy);
  /* one family per counter, one sample per observer */
  static const struct {
    const char *name, *help;
    size_t off;
  } fam[] = {
      {"percolator_observer_runs_total", "Committed observer transactions",
       offsetof(pc_observer_stats_t, runs)},
      {"percolator_observer_skipped_total", "Notifications already acknowledged",
       offsetof(pc_observer_stats_t, skipped)},
      {"percolator_observer_conflicts_total", "Observer runs aborted by a conflict",
       offsetof(pc_observer_stats_t, conflicts)},
      {"percolator_observer_failures_total", "Observer runs that failed",
       offsetof(pc_observer_stats_t, failures)},
      {"percolator_observer_parked_total", "Notifications parked after repeated failures",
       offsetof(pc_observer_stats_t, parked)},
  };
  for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
    char line[256];
    int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s counter\n", fam[f].name,
                     fam[f].help, fam[f].name);
    pc_buf_append(out, line, (size_t)n);
    for (size_t i = 0; i < s.nobservers; i++) {
      const pc_observer_stats_t *o = &s.observers[i];
      uint64_t v;
      memcpy(&v, (const char *)o + fam[f].off, sizeof v);
      n = snprintf(line, sizeof line, "%s{observer=\"%s\"} %llu\n", fam[f].name, o->name,
                   (unsigned long long)v);
      pc_buf_append(out, line, (size_t)n);
    }
  }
  static const char *const le[] = {"1", "2", "5", "10", "20", "50", "100", "200", "500",
                                   "1000", "2000", "5000", "+Inf"};
  pc_buf_append(out, "# HELP percolator_notification_latency_ms From a change's commit to its "
                     "observer's commit\n# TYPE percolator_notification_latency_ms histogram\n",
                strlen("# HELP percolator_notification_latency_ms From a change's commit to its "
                       "observer's commit\n# TYPE percolator_notification_latency_ms histogram\n"));
  uint64_t cum = 0;
  for (size_t i = 0; i < 13; i++) {
    char line[160];
    cum += s.latency_le[i];
    int n = snprintf(line, sizeof line, "percolator_notification_latency_ms_bucket{le=\"%s\"} %llu\n",
                     le[i], (unsigned long long)cum);
    pc_buf_append(out, line, (size_t)n);
  }
  char line[160];
  int n = snprintf(line, sizeof line,
                   "percolator_notification_latency_ms_sum %.3f\n"
                   "percolator_notification_latency_ms_count %llu\n",
                   s.latency_sum_ms, (unsigned long long)s.latency_count);
  pc_buf_append(out, line, (size_t)n);
  pc_free(s.observers);
}

/* ---- the worker's record: live workers and their counters for `status` ----
 *
 * Every WORKER_REPORT_MS a worker writes row "worker/HOST:PID" of the system
 * table, column "state": one JSON object with the wall time, its threads and
 * each observer's counters; it deletes the row when it stops. `status`
 * counts a worker live when its record is younger than three periods. */

#define WORKER_REPORT_MS 1000

static json_t *worker_state(workers_t *w) {
  pc_worker_stats_t s;
  pc_error_t err;
  if (pc_worker_stats(w->worker, &s, &err) != PC_OK) return NULL;
  json_t *o = json_object(), *obs = json_object();
  fmt_json_u64(o, "seen_ms", pc_now_wall_ms());
  fmt_json_u64(o, "pid", (uint64_t)getpid());
  fmt_json_u64(o, "notifications_seen", s.notifications_seen);
  fmt_json_u64(o, "latency_count", s.latency_count);
  for (size_t i = 0; i < s.nobservers; i++) {
    const pc_observer_stats_t *x = &s.observers[i];
    json_t *c = json_object();
    fmt_json_u64(c, "runs", x->runs);
    fmt_json_u64(c, "skipped", x->skipped);
    fmt_json_u64(c, "conflicts", x->conflicts);
    fmt_json_u64(c, "failures", x->failures);
    fmt_json_u64(c, "parked", x->parked);
    json_object_set_new(obs, x->name, c);
  }
  json_object_set_new(o, "observers", obs);
  pc_free(s.observers);
  return o;
}

/* Writes (state non-NULL) or deletes this worker's record. */
static void write_worker_record(workers_t *w, json_t *state) {
  char *text = state ? json_dumps(state, JSON_COMPACT) : NULL;
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(w->db, &err);
  pc_status_t st = t ? PC_OK : err.code;
  const char *col = "state";
  if (st == PC_OK && text)
    st = pc_txn_set_system(t, PC_SYSTEM_TABLE, w->row, strlen(w->row), col, strlen(col), text,
                           strlen(text), &err);
  else if (st == PC_OK)
    st = pc_txn_delete_system(t, PC_SYSTEM_TABLE, w->row, strlen(w->row), col, strlen(col), &err);
  if (st == PC_OK) st = pc_txn_commit(t, &err);
  if (st != PC_OK) pc_log(PC_LOG_DEBUG, "workers: record %s: %s", w->row, err.text);
  pc_txn_destroy(t);
  free(text);
}

static void *report_main(void *arg) {
  workers_t *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    pthread_mutex_unlock(&w->mu);
    json_t *state = worker_state(w);
    if (state) write_worker_record(w, state);
    json_decref(state);
    pthread_mutex_lock(&w->mu);
    if (!w->stop) {
      struct timespec until = pc_mono_after_ms(WORKER_REPORT_MS);
      pthread_cond_timedwait(&w->cv, &w->mu, &until);
    }
  }
  pthread_mutex_unlock(&w->mu);
  write_worker_record(w, NULL);
  return NULL;
}

/* Loads the configured plugins and starts the observers of this process
 * against the database of client_config. */
static pc_status_t start_workers(daemon_state_t *d, const char *client_config, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  workers_t *w = &d->w;
  if (!(w->registry = pc_registry_create())) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = pc_plugins_load_config(w->registry, cfg, &w->plugins, &w->nplugins, err);
  if (st != PC_OK) return st;
  if (pc_registry_count(w->registry) == 0)
    pc_log(PC_LOG_WARN, "workers: no observer registered (workers.plugins lists none that does)");
  if (!(w->db = pc_db_open_config(client_config, err))) return err->code;
  pc_worker_options_t o;
  pc_worker_options_default(&o);
  o.threads = cfg->workers.threads;
  o.buckets_per_claim = cfg->workers.scan.buckets_per_claim;
  o.idle_ms = cfg->workers.scan.idle_ms;
  o.max_failures = cfg->workers.max_failures;
  o.backoff_ms = cfg->workers.backoff_ms;
  if (!(w->worker = pc_worker_start(w->db, w->registry, &o, err))) return err->code;
  if (cfg->workers.http.set) {
    w->http = pc_http_start(cfg->workers.http.host, cfg->workers.http.port, worker_health,
                            worker_metrics, w, err);
    if (!w->http) {
      pc_error_prefix(err, "workers: http");
      return err->code;
    }
    pc_log(PC_LOG_INFO, "workers: /health and /metrics on %s:%u", cfg->workers.http.host,
           (unsigned)pc_http_port(w->http));
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  snprintf(w->row, sizeof w->row, "worker/%s:%d", host, (int)getpid());
  pthread_mutex_init(&w->mu, NULL);
  pc_cond_init_mono(&w->cv);
  w->reporting = pthread_create(&w->reporter, NULL, report_main, w) == 0;
  pc_log(PC_LOG_INFO, "workers: %u threads, %zu observers from %zu plugins", o.threads,
         pc_registry_count(w->registry), w->nplugins);
  return PC_OK;
}

/* Lets in-flight observer transactions finish, then releases everything. */
static void stop_workers(daemon_state_t *d) {
  workers_t *w = &d->w;
  if (w->reporting) { /* it deletes the record as it goes */
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->reporter, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
  }
  if (w->http) pc_http_stop(w->http);
  pc_worker_stop(w->worker);
  pc_db_close(w->db);
  pc_plugins_unload(w->plugins, w->nplugins);
  pc_registry_free(w->registry);
  memset(w, 0, sizeof *w);
}

/* Stops the roles in reverse order: servers first (drain), then state. */
static void stop_all(daemon_state_t *d) {
  stop_workers(d); /* their client speaks to the roles below */
  gc_stop(d);
  for (size_t i = d->nroles; i-- > 0;) {
    role_t *r = &d->roles[i];
    if (r->http) pc_http_stop(r->http);
    if (r->rpc) pc_rpc_server_stop(r->rpc);
    pc_log(PC_LOG_INFO, "%s: stopped", r->name);
  }
  for (size_t i = 0; i < d->nroles; i++) {
    role_t *r = &d->roles[i];
    if (r->tablet) pc_tablet_destroy(r->tablet); /* closes its LevelDB */
    if (r->ls) pc_ls_destroy(r->ls);
  }
  if (d->ts.batcher) pc_ts_batcher_destroy(d->ts.batcher);
  if (d->ts.remote) pc_rpc_client_destroy(d->ts.remote);
  for (size_t i = 0; i < d->nroles; i++)
    if (d->roles[i].oracle) pc_oracle_close(d->roles[i].oracle);
  d->nroles = 0;
}

static int write_ready_file(const daemon_state_t *d, const char *path) {
  json_t *root = json_object(), *tablets = json_object();
  for (size_t i = 0; i < d->nroles; i++) {
    const role_t *r = &d->roles[i];
    char ep[300];
    snprintf(ep, sizeof ep, "127.0.0.1:%u", (unsigned)pc_rpc_server_port(r->rpc));
    json_t *o = json_object();
    json_object_set_new(o, "listen", json_string(ep));
    if (r->http) {
      snprintf(ep, sizeof ep, "127.0.0.1:%u", (unsigned)pc_http_port(r->http));
      json_object_set_new(o, "http", json_string(ep));
    }
    if (r->kind == ROLE_TABLET)
      json_object_set_new(tablets, r->name + strlen("tablet "), o);
    else
      json_object_set_new(root, r->kind == ROLE_TSO ? "tso" : "lockservice", o);
  }
  json_object_set_new(root, "tablets", tablets);
  json_object_set_new(root, "pid", json_integer(getpid()));
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int rc = json_dump_file(root, tmp, JSON_SORT_KEYS) == 0 && rename(tmp, path) == 0 ? 0 : -1;
  json_decref(root);
  return rc;
}

enum { OPT_NAME = 0x200, OPT_READY };

/* What a daemon verb runs besides its roles. */
enum workers_mode {
  NO_WORKERS,
  WORKERS_IF_CONFIGURED, /* `run`: when the configuration has a "workers" section */
  WORKERS                /* `worker` */
};

/* The configuration a `worker` serves an embedded data directory with: the
 * user's (or none), with an oracle and a lock service on ephemeral ports of
 * 127.0.0.1 and one tablet of every row whose directories are data_dir
 * itself (its LevelDB is data_dir/store and its oracle data_dir/oracle, as
 * the embedded store keeps them). Written to a temporary file; its path
 * (malloc'd), or NULL with err set. */
static char *serving_config(const char *source, const char *data_dir, pc_error_t *err) {
  json_error_t je;
  json_t *root = source ? json_load_file(source, 0, &je) : json_object();
  if (!root) {
    pc_error_set(err, PC_INVALID, "%s: %s", source, je.text);
    return NULL;
  }
  json_t *tso = json_object(), *ls = json_object(), *t = json_object(), *ts = json_array();
  json_object_set_new(tso, "listen", json_string("127.0.0.1:0"));
  json_object_set_new(tso, "data_dir", json_string(data_dir));
  json_object_set_new(ls, "listen", json_string("127.0.0.1:0"));
  json_object_set_new(t, "name", json_string("local"));
  json_object_set_new(t, "listen", json_string("127.0.0.1:0"));
  json_object_set_new(t, "data_dir", json_string(data_dir));
  json_array_append_new(ts, t);
  json_object_set_new(root, "data_dir", json_string(data_dir));
  json_object_set_new(root, "tso", tso);
  json_object_set_new(root, "lockservice", ls);
  json_object_set_new(root, "tablets", ts);
  char path[] = "/tmp/percolator-serve-XXXXXX";
  int fd = mkstemp(path);
  char *out = NULL;
  if (fd >= 0) {
    FILE *f = fdopen(fd, "w");
    if (f && json_dumpf(root, f, JSON_INDENT(1)) == 0 && fclose(f) == 0) out = strdup(path);
    else if (f) fclose(f);
    else close(fd);
    if (!out) unlink(path);
  }
  json_decref(root);
  if (!out) pc_error_set(err, PC_IO_ERROR, "cannot write a temporary configuration in /tmp");
  return out;
}

/* Shared by every daemon verb: parse, start the roles `want`, wait for a signal, stop. */
static int run_daemon(cli_ctx_t *ctx, int argc, char **argv, int want_tso, int want_lockd,
                      int want_tablets, enum workers_mode workers) {
  static const struct option longopts[] = {{"name", required_argument, NULL, OPT_NAME},
                                           {"ready-file", required_argument, NULL, OPT_READY},
                                           {NULL, 0, NULL, 0}};
  const char *name = NULL, *ready = NULL;
  int c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", longopts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_NAME) name = optarg;
    else if (c == OPT_READY) ready = optarg;
    else return cli_usage_error(ctx, "unexpected option");
  }
  if (optind != argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  const char *config = ctx->config; /* --config may come before or after the verb */
  if (!config && workers != WORKERS) return cli_usage_error(ctx, "--config FILE is required");
  if (want_tablets == 1 && !name) return cli_usage_error(ctx, "--name TABLET is required");

  pc_error_t err;
  pc_error_clear(&err);
  if (pc_failpoints_init_from_env(&err) != PC_OK) return cli_pc_error(ctx, &err);
  pc_config_t *cfg = config ? pc_config_load(config, &err) : pc_config_default();
  if (!cfg) return config ? cli_pc_error(ctx, &err) : cli_error(ctx, "out of memory");
  char *serving = NULL;   /* worker on an embedded store: the configuration it serves with */
  char *client = NULL;    /* where the workers' client configuration is */
  char served[4200] = ""; /* data_dir/serving.json while this process serves data_dir */
  if (workers == WORKERS && cfg->ntablets == 0) {
    /* hold the embedded store and serve it: tso, lock service and one tablet */
    const char *dir = config ? cfg->data_dir : ctx->data_dir;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      pc_config_free(cfg);
      return cli_error(ctx, "data directory '%s' does not exist (create it with 'percolator init')",
                       dir);
    }
    snprintf(served, sizeof served, "%s/" CLI_SERVING_FILE, dir);
    serving = serving_config(config, dir, &err);
    pc_config_t *scfg = serving ? pc_config_load(serving, &err) : NULL;
    if (!scfg) {
      free(serving);
      pc_config_free(cfg);
      return cli_pc_error(ctx, &err);
    }
    pc_config_free(cfg);
    cfg = scfg;
    want_tso = 1;
    want_lockd = 1;
    want_tablets = 2;
  } else if (workers == WORKERS) {
    client = strdup(config); /* a cluster's client */
  }
  pc_log_set_level((pc_log_level_t)cfg->log_level);

  /* signals are taken synchronously by this thread only */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  daemon_state_t *d = calloc(1, sizeof *d);
  if (!d) {
    pc_config_free(cfg);
    return cli_error(ctx, "out of memory");
  }
  d->cfg = cfg;
  pc_status_t st = PC_OK;
  if (want_tso && !(cfg->tso.set && cfg->tso.listen.set))
    st = pc_error_set(&err, PC_INVALID, "%s: no \"tso\" section with \"listen\"", cfg->source);
  if (st == PC_OK && want_lockd && !(cfg->lockservice.set && cfg->lockservice.listen.set)) {
    if (want_lockd == 1)
      st = pc_error_set(&err, PC_INVALID, "%s: no \"lockservice\" section with \"listen\"",
                        cfg->source);
    else
      want_lockd = 0; /* `run` without a lock service: TTLs only */
  }
  if (st == PC_OK && want_tablets && cfg->ntablets == 0)
    st = pc_error_set(&err, PC_INVALID, "%s: no \"tablets\"", cfg->source);
  if (st == PC_OK && want_tso) st = start_tso(d, &err);
  if (st == PC_OK && want_tablets) {
    /* tablets take commit timestamps from the in-process oracle, or from the daemon */
    if (want_tso) {
      d->ts.local = d->oracle;
    } else if (cfg->tso.set && cfg->tso.listen.set) {
      d->ts.remote = pc_rpc_client_create(cfg->tso.listen.host, cfg->tso.listen.port, cfg->secret,
                                          &err);
      if (d->ts.remote) d->ts.batcher = pc_ts_batcher_create(pc_tso_remote_fetch, d->ts.remote);
    } else {
      pc_error_set(&err, PC_INVALID, "%s: tablets need a \"tso\" section", cfg->source);
    }
    if (!d->ts.local && !d->ts.batcher)
      st = err.code != PC_OK ? err.code : pc_error_set(&err, PC_NOMEM, "out of memory");
  }
  if (st == PC_OK && want_lockd) st = start_lockd(d, &err);
  for (size_t i = 0; st == PC_OK && want_tablets && i < cfg->ntablets; i++) {
    if (name && strcmp(name, cfg->tablets[i].name) != 0) continue;
    st = start_tablet(d, &cfg->tablets[i], &err);
  }
  if (st == PC_OK && name && d->nroles == 0)
    st = pc_error_set(&err, PC_INVALID, "%s: no tablet named '%s'", cfg->source, name);
  int run_workers = workers == WORKERS || (workers == WORKERS_IF_CONFIGURED && cfg->workers.set);
  if (st == PC_OK && run_workers && !client) {
    /* a client of the roles this process runs, on the ports they bound */
    client = write_client_config(d);
    if (!client) st = pc_error_set(&err, PC_IO_ERROR, "cannot write a client configuration");
  }
  if (st == PC_OK && served[0] && rename(client, served) != 0)
    st = pc_error_set(&err, PC_IO_ERROR, "cannot write %s: %s", served, strerror(errno));
  if (st == PC_OK && served[0]) {
    free(client);
    client = strdup(served);
  }
  if (st == PC_OK && run_workers) st = start_workers(d, client, &err);
  if (st == PC_OK && ready && write_ready_file(d, ready) != 0)
    st = pc_error_set(&err, PC_IO_ERROR, "cannot write ready file %s", ready);

  int rc = CLI_EXIT_OK;
  if (st == PC_OK) {
    pc_log(PC_LOG_INFO, "ready (%zu role%s%s); SIGTERM or SIGINT stops", d->nroles,
           d->nroles == 1 ? "" : "s", run_workers ? " and the workers" : "");
    if (want_tablets) gc_start(d);
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    pc_log(PC_LOG_INFO, "signal %d: shutting down", sig);
  } else {
    rc = cli_pc_error(ctx, &err);
  }
  stop_all(d);
  if (served[0]) unlink(served);
  else if (client && workers == WORKERS_IF_CONFIGURED) unlink(client);
  if (serving) unlink(serving);
  free(serving);
  free(client);
  free(d);
  pc_config_free(cfg);
  return rc;
}

static int run_tso(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, 1, 0, 0, NO_WORKERS);
}
static int run_lockd(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, 0, 1, 0, NO_WORKERS);
}
static int run_tablet(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, 0, 0, 1, NO_WORKERS);
}
static int run_all(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, 1, 2, 2, WORKERS_IF_CONFIGURED);
}
static int run_worker(cli_ctx_t *ctx, int argc, char **argv) {
  return run_daemon(ctx, argc, argv, 0, 0, 0, WORKERS);
}

#define COMMON_DAEMON_HELP                                                              \
  "\n"                                                                                  \
  "Options:\n"                                                                          \
  "  --config FILE      the configuration (JSON; see docs/CONFIG.md)\n"                 \
  "  --ready-file FILE  once listening, write the bound endpoints there as JSON\n"      \
  "  -h, --help         show this help\n"                                               \
  "\n"                                                                                  \
  "Runs in the foreground and logs to stderr; SIGTERM or SIGINT shuts it down\n"        \
  "cleanly: the requests in flight are answered, then the stores are closed.\n"

const cli_verb_t cli_verb_tso = {
    "tso", "run the timestamp oracle daemon",
    "Usage: percolator tso --config FILE [--ready-file FILE]\n"
    "\n"
    "Serves strictly increasing timestamps on the configuration's tso.listen\n"
    "endpoint and /health, /metrics on tso.http. The oracle's persisted bound\n"
    "lives in tso.data_dir.\n" COMMON_DAEMON_HELP
    "\n"
    "Example:\n"
    "  percolator tso --config cluster.json\n",
    run_tso};

const cli_verb_t cli_verb_lockd = {
    "lockd", "run the lock service daemon",
    "Usage: percolator lockd --config FILE [--ready-file FILE]\n"
    "\n"
    "Serves client sessions and leased named locks on lockservice.listen.\n" COMMON_DAEMON_HELP
    "\n"
    "Example:\n"
    "  percolator lockd --config cluster.json\n",
    run_lockd};

const cli_verb_t cli_verb_tablet = {
    "tablet", "run one tablet server",
    "Usage: percolator tablet --config FILE --name TABLET [--ready-file FILE]\n"
    "\n"
    "Serves the rows of tablet TABLET from its own LevelDB (tablets[].data_dir),\n"
    "taking commit timestamps from the tso daemon. --name TABLET picks the entry\n"
    "of \"tablets\".\n" COMMON_DAEMON_HELP
    "\n"
    "Example:\n"
    "  percolator tablet --config cluster.json --name t1\n",
    run_tablet};

const cli_verb_t cli_verb_run = {
    "run", "run every role of the configuration in one process",
    "Usage: percolator run --config FILE [--ready-file FILE]\n"
    "\n"
    "Runs the oracle, the lock service (when configured) and every tablet in\n"
    "this process, listening where the configuration says, so that many client\n"
    "processes on this machine can share one store.\n" COMMON_DAEMON_HELP
    "\n"
    "Example:\n"
    "  percolator run --config cluster.json --ready-file /tmp/ready.json\n",
    run_all};

const cli_verb_t cli_verb_worker = {
    "worker", "run the configured observers (and serve an embedded store)",
    "Usage: percolator worker [--config FILE | --data DIR] [--ready-file FILE]\n"
    "\n"
    "Loads the observer plugins of the configuration's \"workers\" section\n"
    "(docs/OBSERVERS.md), records their observed columns in the store, and runs\n"
    "them: workers.threads threads find notifications, claim buckets of them\n"
    "through the lock service and run each observer in a transaction, retrying\n"
    "a failing one with backoff and parking it after workers.max_failures\n"
    "('percolator failures'). Any number of worker processes can run against a\n"
    "cluster. Without a cluster (an embedded data directory) the worker holds\n"
    "the store and serves it: an oracle, a lock service and one tablet on\n"
    "ephemeral ports of 127.0.0.1, whose client configuration it writes to\n"
    "DIR/serving.json, through which the other verbs given --data DIR reach the\n"
    "store meanwhile. workers.http serves /health and /metrics. On SIGTERM or\n"
    "SIGINT it stops taking work, lets the observer transactions in flight\n"
    "finish, and exits 0.\n" COMMON_DAEMON_HELP
    "\n"
    "Examples:\n"
    "  percolator worker --config cluster.json\n"
    "  percolator worker --config embedded.json    # no \"tablets\": serves data_dir\n",
    run_worker};
