/* workers.c — the observers a daemon process runs: the configured plugins
 * loaded into a registry, a notification worker (notify/worker.h) on a
 * client of the cluster or of the store this process serves, /health and
 * /metrics on workers.http, and the worker's record in the system table.
 *
 * The record: every WORKER_REPORT_MS a worker writes row "worker/HOST:PID"
 * of the system table, column "state": one JSON object with the wall time,
 * its pid and each observer's counters; it deletes the row when it stops.
 * `status` counts a worker live when its record is younger than three
 * periods (the counters it sums outlive workers: notify/counters.c).
 *
 * The journal: the workers of a process that serves its store (`run`, a
 * `worker` of an embedded directory) keep it in <data_dir>/worker-journal
 * unless workers.journal_dir says otherwise; a worker of another cluster
 * only where workers.journal_dir says.
 *
 * Stopping waits WORKER_STOP_MS at most for the observers in flight; one
 * that has not returned by then is left running, and so are the database
 * handle and the plugins it uses: the process exits around it.
 *
 * Plugins are loaded from private copies (observers/plugin.h), so a new
 * build written over a plugin's file changes nothing that runs; the
 * reporter notices the change and logs it once. A reload (SIGHUP) loads the
 * configured plugins again into a new registry, so that a build that fails
 * to load leaves the running one untouched; then it stops the notification
 * worker, which lets the observer runs in flight commit or abort (drains),
 * and starts a new one on the new registry and the same database handle.
 * No notification is lost meanwhile: notifications are cells of the store,
 * deleted only by the acknowledged runs of their observers, and the new
 * worker scans them again. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/db.h"
#include "base/error.h"
#include "base/log.h"
#include "daemon/daemon_internal.h"

#define WORKER_REPORT_MS 1000
#define WORKER_STOP_MS 10000 /* the most a stop waits for observers in flight */
/* The record's deletion at stop waits this long at most: a record left
 * behind looks dead to `status` after three periods anyway. */
#define RECORD_DELETE_TIMEOUT_MS 2000

static int worker_health(void *ctx, pc_buf_t *out) {
  (void)ctx;
  (void)out;
  return 1;
}

/* The worker's counters, read under the reload's lock (none while a reload
 * swaps the worker). */
static pc_status_t stats_of(workers_t *w, pc_worker_stats_t *s) {
  pc_error_t err;
  pthread_mutex_lock(&w->swap);
  pc_status_t st = w->worker ? pc_worker_stats(w->worker, s, &err) : PC_UNAVAILABLE;
  pthread_mutex_unlock(&w->swap);
  return st;
}

static void worker_metrics(void *ctx, pc_buf_t *out) {
  workers_t *w = ctx;
  pc_worker_stats_t s;
  if (stats_of(w, &s) != PC_OK) return;
  pc_metric_counter(out, "percolator_worker_notifications_seen_total", "Notifications found",
                    s.notifications_seen);
  pc_metric_counter(out, "percolator_worker_claims_total", "Bucket claims taken", s.claims_taken);
  pc_metric_counter(out, "percolator_worker_claims_busy_total",
                    "Bucket claims skipped (held by another worker)", s.claims_busy);
  if (w->db->coordination)
    pc_metric_gauge(out, "percolator_zookeeper_session_state",
                    "ZooKeeper session: 0 connecting, 1 connected, 2 expired, -1 none",
                    pc_coord_zk_state(w->db->coordination));
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
    pc_metric_family(out, fam[f].name, "counter", fam[f].help);
    for (size_t i = 0; i < s.nobservers; i++) {
      const pc_observer_stats_t *o = &s.observers[i];
      uint64_t v;
      memcpy(&v, (const char *)o + fam[f].off, sizeof v);
      pc_metric_sample(out, fam[f].name, "observer", o->name, v);
    }
  }
  /* latency_le is cumulative already (notify/worker.h), counted in ms; its
   * 13th is +Inf */
  static const double bounds[12] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                    0.1,   0.2,   0.5,   1,    2,    5};
  pc_metric_histogram(out, "percolator_notification_latency_seconds",
                      "From a change's commit to its observer's commit", bounds, s.latency_le, 12,
                      s.latency_sum_ms / 1000.0, s.latency_count);
  pc_free(s.observers);
}

static void set_u64(json_t *o, const char *key, uint64_t v) {
  json_object_set_new(o, key, json_integer((json_int_t)v));
}

static json_t *worker_state(workers_t *w) {
  pc_worker_stats_t s;
  if (stats_of(w, &s) != PC_OK) return NULL;
  json_t *o = json_object(), *obs = json_object();
  set_u64(o, "seen_ms", pc_now_wall_ms());
  set_u64(o, "pid", (uint64_t)getpid());
  set_u64(o, "notifications_seen", s.notifications_seen);
  set_u64(o, "latency_count", s.latency_count);
  for (size_t i = 0; i < s.nobservers; i++) {
    const pc_observer_stats_t *x = &s.observers[i];
    json_t *c = json_object();
    set_u64(c, "runs", x->runs);
    set_u64(c, "skipped", x->skipped);
    set_u64(c, "conflicts", x->conflicts);
    set_u64(c, "failures", x->failures);
    set_u64(c, "parked", x->parked);
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
  if (t && !text) pc_txn_set_timeout_ms(t, RECORD_DELETE_TIMEOUT_MS);
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

/* Logs, once per change, each plugin whose file is no longer the build this
 * process loaded. */
static void notice_plugin_changes(workers_t *w) {
  pthread_mutex_lock(&w->swap);
  for (size_t i = 0; i < w->nplugins; i++) {
    int changed = pc_plugin_changed(w->plugins[i]);
    if (changed && !w->change_logged[i])
      pc_log(PC_LOG_WARN, "workers: plugin %s: its file %s changed on disk; this worker goes on "
             "running the build it loaded (%s %s) until SIGHUP reloads it or it restarts",
             pc_plugin_name(w->plugins[i]), pc_plugin_path(w->plugins[i]),
             pc_plugin_name(w->plugins[i]), pc_plugin_version(w->plugins[i]));
    w->change_logged[i] = changed;
  }
  pthread_mutex_unlock(&w->swap);
}

/* Logs an outage of the cluster as it starts and as it ends: the leading
 * oracle that stops answering (a failover follows once ZooKeeper ends its
 * session) and answers again, or another takes the lead; a tablet that no
 * live server holds (ZooKeeper ended its server's session) and is served
 * again. Observer runs meanwhile fail and are retried; these lines say why. */
static void watch_cluster(workers_t *w) {
  if (!w->cluster) return;
  pc_error_t err;
  if (w->tso) {
    uint64_t last;
    char leader[300] = "";
    int ok = pc_tso_locator_info(w->tso, 1000, &last, &err) == PC_OK;
    pc_tso_locator_members(w->tso, leader, sizeof leader, NULL, 0);
    uint64_t now = pc_now_mono_ms();
    if (!ok && !w->tso_down_ms) {
      w->tso_down_ms = now;
      pc_log(PC_LOG_WARN, "workers: the leading oracle%s%s does not answer (%s): transactions "
             "wait, and a standby takes over once ZooKeeper ends its session",
             leader[0] ? " " : "", leader, err.text);
    } else if (ok && w->tso_down_ms) {
      pc_log(PC_LOG_WARN, "workers: oracle %s answers as the leader again, after %.1f s%s",
             leader, (double)(now - w->tso_down_ms) / 1000.0,
             strcmp(leader, w->tso_leader) != 0 ? " (a failover)" : "");
      w->tso_down_ms = 0;
    } else if (ok && w->tso_leader[0] && strcmp(leader, w->tso_leader) != 0) {
      pc_log(PC_LOG_INFO, "workers: oracle %s leads now (%s led)", leader, w->tso_leader);
    }
    if (ok) snprintf(w->tso_leader, sizeof w->tso_leader, "%s", leader);
  }
  for (size_t i = 0; w->tablet_addr && i < w->cluster->ntablets; i++) {
    const char *name = w->cluster->tablets[i].name;
    char addr[300];
    if (pc_coord_tablet_owner(w->db->coordination, name, 0, 1000, addr, sizeof addr, NULL,
                              &err) != PC_OK)
      continue; /* ZooKeeper does not answer: its own outage, logged by the session */
    uint64_t now = pc_now_mono_ms();
    if (!addr[0] && !w->tablet_down_ms[i]) {
      w->tablet_down_ms[i] = now;
      pc_log(PC_LOG_WARN, "workers: tablet %s has no live server%s%s%s: observer runs on its "
             "rows fail and are retried until one serves it", name,
             w->tablet_addr[i][0] ? " (" : "", w->tablet_addr[i],
             w->tablet_addr[i][0] ? "'s session ended)" : "");
    } else if (addr[0] && w->tablet_down_ms[i]) {
      pc_log(PC_LOG_WARN, "workers: tablet %s is served again, by %s, after %.1f s without a "
             "server", name, addr, (double)(now - w->tablet_down_ms[i]) / 1000.0);
      w->tablet_down_ms[i] = 0;
    } else if (addr[0] && w->tablet_addr[i][0] && strcmp(addr, w->tablet_addr[i]) != 0) {
      pc_log(PC_LOG_INFO, "workers: tablet %s moved from %s to %s", name, w->tablet_addr[i], addr);
    }
    if (addr[0]) snprintf(w->tablet_addr[i], sizeof w->tablet_addr[i], "%s", addr);
  }
}

static void *report_main(void *arg) {
  workers_t *w = arg;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    pthread_mutex_unlock(&w->mu);
    notice_plugin_changes(w);
    watch_cluster(w);
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

/* A client of the cluster at cluster_path, or of this process's roles. */
static pc_db_t *open_client(pc_daemon_t *d, const char *cluster_path, uint32_t timeout_ms,
                            pc_error_t *err) {
  if (cluster_path) return pc_db_open_config_timeout(cluster_path, 0, timeout_ms, err);
  pc_config_t *cfg = pc_daemon_client_config(d, err);
  if (!cfg) return NULL;
  pc_db_t *db = pc_db_open_parsed_config(cfg, 0, err);
  pc_config_free(cfg);
  return db;
}

pc_status_t pc_daemon_workers_load(pc_daemon_t *d, pc_error_t *err) {
  workers_t *w = &d->w;
  d->has_workers = 1;
  pthread_mutex_init(&w->swap, NULL);
  if (!(w->registry = pc_registry_create())) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = pc_plugins_load_config(w->registry, d->cfg, &w->plugins, &w->nplugins, err);
  if (st != PC_OK) return st;
  if (w->nplugins && !(w->change_logged = calloc(w->nplugins, sizeof *w->change_logged)))
    return pc_error_set(err, PC_NOMEM, "out of memory");
  return PC_OK;
}

pc_status_t pc_daemon_workers_start(pc_daemon_t *d, const char *cluster_path,
                                    uint32_t timeout_ms, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  workers_t *w = &d->w;
  if (!(w->db = open_client(d, cluster_path, timeout_ms, err))) return err->code;
  pc_worker_options_t o;
  pc_worker_options_default(&o);
  o.threads = cfg->workers.threads ? cfg->workers.threads : pc_worker_default_threads();
  o.buckets_per_claim = cfg->workers.scan.buckets_per_claim;
  o.idle_ms = cfg->workers.scan.idle_ms;
  o.batch_wait_ms = cfg->workers.scan.batch_wait_ms;
  o.stable_ms = cfg->workers.scan.stable_ms;
  o.max_failures = cfg->workers.max_failures;
  o.backoff_ms = cfg->workers.backoff_ms;
  o.hang_ms = cfg->workers.hang_ms;
  o.journal_dir = cfg->workers.journal_dir;
  if (!o.journal_dir && !cluster_path) {
    snprintf(w->journal, sizeof w->journal, "%s/worker-journal", cfg->data_dir);
    o.journal_dir = w->journal;
  }
  w->opts = o;
  if (!o.journal_dir)
    pc_log(PC_LOG_WARN, "workers: no workers.journal_dir: an observer that kills this process "
                        "is not counted across restarts, and counters since the last second "
                        "die with it");
  w->worker = pc_worker_start(w->db, w->registry, &o, err);
  if (!w->worker) return err->code;
  if (cfg->workers.http.set) {
    pc_http_limits_t hl = {cfg->limits.http_max_connections, cfg->limits.http_timeout_ms};
    w->http = pc_http_start(cfg->workers.http.host, cfg->workers.http.port, &hl, worker_health,
                            worker_metrics, w, err);
    if (!w->http) {
      pc_error_prefix(err, "workers: http");
      return err->code;
    }
  }
  if (cluster_path && w->db->coordination) { /* outages of the cluster are logged */
    pc_error_t werr;
    w->cluster = cfg;
    w->tso = pc_tso_locator_on(w->db->coordination, &d->auth, &werr);
    w->tablet_addr = calloc(cfg->ntablets ? cfg->ntablets : 1, sizeof *w->tablet_addr);
    w->tablet_down_ms = calloc(cfg->ntablets ? cfg->ntablets : 1, sizeof *w->tablet_down_ms);
    if (!w->tablet_addr || !w->tablet_down_ms) {
      free(w->tablet_addr);
      free(w->tablet_down_ms);
      w->tablet_addr = NULL;
      w->tablet_down_ms = NULL;
    }
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

/* The workers a bounded stop left running (pc_daemon_workers_stop). */
static workers_t left_behind;

/* The reporter (which deletes the record as it goes) and the observer
 * threads stop at the same time, so that their waits overlap. */
void pc_daemon_workers_stop(pc_daemon_t *d) {
  workers_t *w = &d->w;
  if (w->reporting) {
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
  }
  if (w->http) pc_http_stop(w->http);
  /* the observers end while the reporter deletes the record; the worker is
   * released only once the reporter, which reads its counters, is gone */
  pc_worker_stop_begin(w->worker);
  if (w->reporting) {
    pthread_join(w->reporter, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
  }
  pc_error_t err;
  int left = pc_worker_stop_within(w->worker, WORKER_STOP_MS, &err) != PC_OK;
  if (left) {
    /* those observers still run the plugins' code on the database handle:
     * both stay, and the process exits around them (kept reachable here, so
     * that a leak checker does not count what is left on purpose) */
    pc_log(PC_LOG_WARN, "workers: %s; leaving them", err.text);
    left_behind = *w;
    memset(w, 0, sizeof *w);
    return;
  }
  pc_tso_locator_destroy(w->tso); /* before the session it follows the election on */
  free(w->tablet_addr);
  free(w->tablet_down_ms);
  pc_db_close(w->db);
  pc_plugins_unload(w->plugins, w->nplugins);
  pc_registry_free(w->registry);
  free(w->change_logged);
  pthread_mutex_destroy(&w->swap);
  memset(w, 0, sizeof *w);
}

/* What reloads left running: observers that did not return within the
 * drain, with their worker, plugins and registry (kept reachable). */
typedef struct left_reload {
  pc_worker_t *worker;
  pc_plugin_t **plugins;
  size_t nplugins;
  pc_observer_registry_t *registry;
  struct left_reload *next;
} left_reload_t;
static left_reload_t *reloads_left;

pc_status_t pc_daemon_workers_reload(pc_daemon_t *d, pc_error_t *err) {
  workers_t *w = &d->w;
  if (!d->has_workers || !w->worker)
    return pc_error_set(err, PC_STATE, "reload: this process runs no workers");
  /* the new builds first: one that fails leaves the running ones alone */
  pc_observer_registry_t *reg = pc_registry_create();
  pc_plugin_t **plugins = NULL;
  size_t n = 0;
  int *logged = NULL;
  if (!reg) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = pc_plugins_load_config(reg, d->cfg, &plugins, &n, err);
  if (st == PC_OK && n && !(logged = calloc(n, sizeof *logged)))
    st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st != PC_OK) {
    pc_plugins_unload(plugins, n);
    pc_registry_free(reg);
    pc_error_prefix(err, "reload: the running plugins go on");
    return st;
  }
  /* drain: the runs in flight commit or abort; what is pending stays in the store */
  uint64_t t0 = pc_now_mono_ms();
  pthread_mutex_lock(&w->swap);
  pc_worker_t *old = w->worker;
  w->worker = NULL;
  pc_error_t e;
  if (pc_worker_stop_within(old, WORKER_STOP_MS, &e) != PC_OK) {
    left_reload_t *l = calloc(1, sizeof *l);
    pc_log(PC_LOG_WARN, "workers: reload: %s; leaving them and their plugins loaded", e.text);
    if (l) {
      *l = (left_reload_t){old, w->plugins, w->nplugins, w->registry, reloads_left};
      reloads_left = l;
    }
  } else {
    pc_plugins_unload(w->plugins, w->nplugins);
    pc_registry_free(w->registry);
  }
  free(w->change_logged);
  w->plugins = plugins;
  w->nplugins = n;
  w->registry = reg;
  w->change_logged = logged;
  uint64_t t1 = pc_now_mono_ms();
  w->worker = pc_worker_start(w->db, w->registry, &w->opts, err);
  pthread_mutex_unlock(&w->swap);
  if (!w->worker) {
    pc_error_prefix(err, "reload: the new plugins are loaded but their worker did not start "
                    "(no observer runs until the next SIGHUP or a restart)");
    return err->code;
  }
  for (size_t i = 0; i < n; i++)
    pc_log(PC_LOG_INFO, "workers: reload: running plugin %s %s from %s",
           pc_plugin_name(plugins[i]), pc_plugin_version(plugins[i]),
           pc_plugin_path(plugins[i]));
  pc_log(PC_LOG_INFO, "workers: reloaded %zu plugin%s, %zu observers (drained in %llu ms)", n,
         n == 1 ? "" : "s", pc_registry_count(reg), (unsigned long long)(t1 - t0));
  return PC_OK;
}
