/* roles.c — the server roles a daemon process runs: the timestamp oracle
 * and tablet servers. Each serves the rpc.h protocol on its
 * "listen" endpoint (in_process, so this process's own clients call it
 * without a socket) and /health and /metrics on its "http" endpoint. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/db.h"
#include "base/deadline.h"
#include "base/error.h"
#include "base/log.h"
#include "daemon/daemon_internal.h"
#include "tso/tso_wire.h"

static const char *const kind_names[] = {"tso", "tablet", "server"};

/* A one-phase commit's timestamp waits as long as its request may: through
 * an oracle's failover, which takes longer than a fixed cap would allow.
 * Without a request (a tablet starting), store.timeout_ms. */
pc_status_t pc_daemon_ts(void *ctx, uint64_t *ts, pc_error_t *err) {
  ts_provider_t *p = ctx;
  if (p->local) return pc_oracle_next(p->local, 1, ts, err);
  uint32_t bound = pc_deadline_get() ? pc_deadline_bound(UINT32_MAX) : p->wait_ms;
  return pc_ts_batcher_get(p->batcher, bound, ts, err);
}

static int role_health(void *ctx, pc_buf_t *out) {
  (void)ctx;
  (void)out;
  return 1;
}

/* A hybrid timestamp as two exact gauges: NAME_seconds, its physical part
 * (Unix time, to the millisecond), and NAME_logical, its logical counter (a
 * double would lose the low bits of the whole). */
static void timestamp_gauges(pc_buf_t *out, const char *name, const char *help, uint64_t ts) {
  char n[128], h[256];
  snprintf(n, sizeof n, "%s_seconds", name);
  snprintf(h, sizeof h, "%s: its physical part, Unix time", help);
  pc_metric_gauge(out, n, h, (double)PC_TS_PHYSICAL_MS(ts) / 1000.0);
  snprintf(n, sizeof n, "%s_logical", name);
  snprintf(h, sizeof h, "%s: its logical counter", help);
  pc_metric_gauge(out, n, h, (double)(ts & ((1u << PC_TS_LOGICAL_BITS) - 1)));
}

/* percolator_rpc_request_duration_seconds: a series per op served. */
static void request_durations(const role_t *r, pc_buf_t *out) {
  static const char name[] = "percolator_rpc_request_duration_seconds";
  pc_metric_family(out, name, "histogram",
                   "Requests from arrival to reply (in-process calls: the handler's run), by op");
  for (unsigned op = 0; op < 256; op++) {
    const char *opname = r->kind == ROLE_TSO ? pc_tso_op_name((uint8_t)op)
                                             : pc_tablet_op_name((uint8_t)op);
    pc_rpc_op_latency_t l;
    if (!opname || !pc_rpc_server_latency(r->rpc, (uint8_t)op, &l)) continue;
    pc_metric_histogram_series(out, name, "op", opname, pc_rpc_latency_bounds, l.le,
                               PC_RPC_LATENCY_BUCKETS, l.sum_seconds, l.count);
  }
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
                    "Malformed frames, oversized requests", st.protocol_errors);
  pc_metric_counter(out, "percolator_rpc_bytes_in_total", "Bytes received", st.bytes_in);
  pc_metric_counter(out, "percolator_rpc_bytes_out_total", "Bytes sent", st.bytes_out);
  pc_metric_gauge(out, "percolator_rpc_requests_in_service",
                  "Requests queued or running (in-process calls included)", (double)st.in_service);
  pc_metric_counter(out, "percolator_rpc_requests_abandoned_total",
                    "Requests that ended, or were dropped, past their deadline or after their "
                    "client closed or the server began to stop",
                    st.abandoned);
  pc_metric_counter(out, "percolator_rpc_requests_inline_total",
                    "Reads served on the I/O thread, without a hand-off to a handler thread",
                    st.inline_served);
  pc_metric_counter(out, "percolator_rpc_requests_deferred_total",
                    "Reads sent on to a handler thread because they had to wait for a commit",
                    st.inline_deferred);
  pc_metric_counter(out, "percolator_rpc_connections_refused_total",
                    "Connections refused or closed by a limit (limits.*)", st.connections_refused);
  pc_metric_counter(out, "percolator_rpc_auth_failures_total",
                    "Failed authentications: certificates, secrets, deadlines", st.auth_failures);
  pc_metric_gauge(out, "percolator_rpc_request_bytes", "Request bytes held (limits.request_memory_mb)",
                  (double)st.request_memory);
  pc_metric_gauge(out, "percolator_rpc_reply_bytes", "Unread reply bytes held (limits.reply_memory_mb)",
                  (double)st.reply_memory);
  if (r->kind == ROLE_SERVER) pc_daemon_server_durations(r, out); /* by the op a request carries */
  else request_durations(r, out);
  switch (r->kind) {
    case ROLE_TSO:
      if (r->node) {
        pc_tso_node_info_t i;
        pc_tso_node_info(r->node, &i);
        timestamp_gauges(out, "percolator_tso_last_timestamp",
                         "Highest timestamp handed out in this term of leadership", i.last_ts);
        pc_metric_gauge(out, "percolator_tso_leading",
                        "1 while this oracle leads and serves under its lease", i.leading);
        pc_metric_counter(out, "percolator_tso_elections_total",
                          "Times this oracle became the leader", i.elections);
        pc_metric_gauge(out, "percolator_zookeeper_session_state",
                        "ZooKeeper session: 0 connecting, 1 connected, 2 expired, -1 none",
                        i.zk_state);
      } else {
        timestamp_gauges(out, "percolator_tso_last_timestamp", "Highest timestamp handed out",
                         pc_oracle_last(r->oracle));
        uint64_t oldest;
        int complete;
        uint32_t clients;
        pc_snapshots_oldest(r->served.snapshots, &oldest, &complete, &clients);
        pc_metric_gauge(out, "percolator_gc_clients_reporting",
                        "Clients whose snapshots hold garbage collection back", clients);
        timestamp_gauges(out, "percolator_gc_oldest_snapshot",
                         "The oldest snapshot a live client reads (0: none)",
                         oldest == UINT64_MAX ? 0 : oldest);
      }
      break;
    case ROLE_SERVER:
      pc_daemon_server_metrics(r, out);
      break;
    case ROLE_TABLET: {
      pc_metric_counter(out, "percolator_tablet_operations_total", "Store operations served",
                        pc_tablet_ops(r->tablet));
      pc_tablet_gc_t g;
      pc_tablet_gc_stats(r->tablet, &g);
      timestamp_gauges(out, "percolator_gc_safe_point_timestamp",
                       "GC safe point: reads below it are refused (kept across restarts)",
                       g.safe_point);
      pc_metric_counter(out, "percolator_gc_passes_total", "GC passes", g.passes);
      pc_metric_counter(out, "percolator_gc_versions_deleted_total", "Old versions deleted by GC",
                        g.deleted.versions);
      pc_metric_counter(out, "percolator_gc_rollbacks_deleted_total",
                        "Rollback records deleted by GC", g.deleted.rollbacks);
      pc_metric_counter(out, "percolator_gc_data_deleted_total",
                        "Data cells of large values deleted by GC", g.deleted.data);
      if (r->coord)
        pc_metric_gauge(out, "percolator_zookeeper_session_state",
                        "ZooKeeper session: 0 connecting, 1 connected, 2 expired, -1 none",
                        pc_coord_zk_state(r->coord));
      break;
    }
  }
}

pc_status_t pc_daemon_serve(pc_daemon_t *d, role_t *r, const pc_endpoint_t *listen,
                            const pc_endpoint_t *http, pc_rpc_handler_fn handler, void *hctx,
                            int (*runs_inline)(uint8_t op), pc_error_t *err) {
  pc_rpc_server_options_t o = {0};
  o.runs_inline = runs_inline; /* the oracle's ops, a tablet's reads: no worker hand-off */
  if (r->kind == ROLE_TSO && r->served.snapshots) o.on_close = pc_tso_served_closed;
  const pc_config_limits_t *l = &d->cfg->limits;
  o.name = r->name;
  o.host = listen->host;
  o.port = listen->port;
  o.auth = &d->auth;
  o.max_frame = l->max_frame_mb << 20;
  o.frame_timeout_ms = l->frame_timeout_ms;
  o.idle_timeout_ms = l->idle_timeout_ms;
  o.max_connections = l->max_connections;
  o.max_connections_per_peer = l->max_connections_per_peer;
  o.max_unauthenticated = l->max_unauthenticated;
  o.auth_timeout_ms = l->auth_timeout_ms;
  o.request_memory = (size_t)l->request_memory_mb << 20;
  o.reply_memory = (size_t)l->reply_memory_mb << 20;
  o.reply_timeout_ms = l->reply_timeout_ms;
  o.in_process = 1; /* this process's workers and collector call it directly */
  if (r->kind == ROLE_SERVER) o.workers = PC_DAEMON_SERVER_WORKERS;
  r->rpc = pc_rpc_server_start(&o, handler, hctx, err);
  if (!r->rpc) {
    pc_error_prefix(err, "%s", r->name);
    return err->code;
  }
  if (http->set) { /* rpc_server.c and http.c say where they listen */
    pc_http_limits_t hl = {l->http_max_connections, l->http_timeout_ms};
    r->http = pc_http_start(http->host, http->port, &hl, role_health, role_metrics, r, err);
    if (!r->http) {
      pc_error_prefix(err, "%s: http", r->name);
      return err->code;
    }
  }
  return PC_OK;
}

role_t *pc_daemon_new_role(pc_daemon_t *d, role_kind_t kind, const char *name, pc_error_t *err) {
  if (d->nroles == sizeof d->roles / sizeof d->roles[0]) {
    pc_error_set(err, PC_INVALID, "too many roles in one process");
    return NULL;
  }
  role_t *r = &d->roles[d->nroles++];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->dir_lock = -1;
  snprintf(r->name, sizeof r->name, "%s%s%s", kind_names[kind], name ? " " : "", name ? name : "");
  return r;
}

/* dir, or a path under the configuration's data_dir when dir is NULL; malloc'd. */
static char *role_dir(const pc_config_t *cfg, const char *dir, const char *sub) {
  char *p = NULL;
  if (dir) return strdup(dir);
  if (asprintf(&p, "%s/%s", cfg->data_dir, sub) < 0) return NULL;
  return p;
}

/* mkdir -p, private to this user (the directories it creates are 0700) */
pc_status_t pc_daemon_make_dir(const char *path, pc_error_t *err) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
    return pc_error_set(err, PC_INVALID, "path too long: %s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
      return pc_error_set(err, PC_IO_ERROR, "cannot create %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
    return pc_error_set(err, PC_IO_ERROR, "cannot create %s: %s", tmp, strerror(errno));
  return PC_OK;
}

/* "host:port" where clients reach the server listening at host:port: a
 * wildcard address is no address to reach, so the host's name stands for it. */
void pc_daemon_advertised(const char *host, uint16_t port, char *out, size_t cap) {
  char name[PC_HOST_MAX] = "";
  if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
    if (gethostname(name, sizeof name - 1) != 0) snprintf(name, sizeof name, "localhost");
    host = name;
  }
  snprintf(out, cap, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, (unsigned)port);
}

/* The oracle with standbys: its place in the election, served, then joined
 * with the address clients reach it at. */
static pc_status_t start_tso_elected(pc_daemon_t *d, role_t *r, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  pc_tso_node_options_t o = {pc_config_zk(cfg), cfg->tso.window_ms};
  /* the process's session, opened now: it checks the nodes' ACLs, and a
   * root that is not this cluster's stops the start here (the election's
   * own sessions only wait) */
  if (!d->coord && !(d->coord = pc_coord_open(&o.zk, 0, cfg->store.timeout_ms, err)))
    return err->code;
  if (!(r->node = pc_tso_node_create(&o, err))) return err->code;
  pc_status_t st = pc_daemon_serve(d, r, &cfg->tso.listen, &cfg->tso.http, pc_tso_node_handler,
                                   r->node, pc_tso_rpc_runs_inline, err);
  if (st != PC_OK) return st;
  char advertise[PC_HOST_MAX + 16];
  pc_daemon_advertised(cfg->tso.listen.host, pc_rpc_server_port(r->rpc), advertise, sizeof advertise);
  st = pc_tso_node_join(r->node, advertise, err);
  if (st == PC_OK)
    pc_log(PC_LOG_INFO, "tso: joining the election under %s/tso as %s", cfg->zookeeper.root,
           advertise);
  return st;
}

pc_status_t pc_daemon_start_tso(pc_daemon_t *d, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  role_t *r = pc_daemon_new_role(d, ROLE_TSO, NULL, err);
  if (!r) return PC_INVALID;
  if (cfg->zookeeper.set) return start_tso_elected(d, r, err);
  char *dir = role_dir(cfg, cfg->tso.data_dir, "tso");
  pc_status_t st = dir ? pc_daemon_make_dir(dir, err) : pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK) {
    char path[4200];
    snprintf(path, sizeof path, "%s/oracle", dir);
    r->oracle = d->oracle = pc_oracle_open(path, cfg->tso.window_ms, err);
    if (!r->oracle) st = err ? err->code : PC_IO_ERROR;
  }
  free(dir);
  /* a served directory's clients report their snapshots to it */
  if (st == PC_OK && !(r->served.snapshots = pc_snapshots_create(PC_SNAPSHOT_GRACE_MS)))
    st = pc_error_set(err, PC_NOMEM, "out of memory");
  r->served.oracle = r->oracle;
  if (st == PC_OK)
    st = pc_daemon_serve(d, r, &cfg->tso.listen, &cfg->tso.http, pc_tso_served_handler,
                         &r->served, pc_tso_rpc_runs_inline, err);
  return st;
}

/* A GC frame's safe point, which the tablet accepted, goes to ZooKeeper
 * before the tablet deletes below it (tablet.h's pc_tablet_set_gc_publish). */
pc_status_t pc_daemon_publish_safe_point(void *ctx, uint64_t safe, pc_error_t *err) {
  pc_daemon_t *d = ctx;
  pc_status_t st = pc_coord_publish_safe_point(
      d->coord, safe, pc_deadline_bound(d->cfg->store.timeout_ms), NULL, err);
  if (st != PC_OK) pc_error_prefix(err, "publishing the safe point");
  return st;
}

/* Holds tablet t in ZooKeeper for this server, now that it serves at its
 * port: its owner node names where clients reach it and what this server is
 * (this host and the tablet's data directory, which one process at a time
 * can lock), so that a run of this server after a crash waits out its
 * previous session, while a second server of the tablet is refused. */
static pc_status_t claim_tablet(pc_daemon_t *d, role_t *r, const pc_config_tablet_t *t,
                                const char *identity, pc_error_t *err) {
  char addr[PC_HOST_MAX + 16];
  pc_daemon_advertised(t->listen.host, pc_rpc_server_port(r->rpc), addr, sizeof addr);
  /* a previous run's session lasts at most its timeout after its death */
  uint32_t wait_ms = 2 * pc_coord_session_timeout(d->coord) + d->cfg->store.timeout_ms;
  pc_status_t st = pc_coord_tablet_claim(d->coord, t->name, addr, identity, wait_ms, err);
  if (st == PC_OK)
    pc_log(PC_LOG_INFO, "tablet %s: held in ZooKeeper under %s/tablets as %s", t->name,
           d->cfg->zookeeper.root, addr);
  return st;
}

/* Whether the published safe point is above a fresh oracle timestamp: no
 * pass of this cluster published it (a tablet publishes only a point at or
 * below one, and the oracle's timestamps only rise), so it was written into
 * ZooKeeper from outside, and adopting it would refuse every read for good.
 * An oracle that does not answer leaves it unchecked, with a warning. */
static int safe_point_forged(pc_daemon_t *d, const pc_config_tablet_t *t, uint64_t safe) {
  uint64_t now = 0;
  pc_error_t err;
  if (pc_daemon_ts(&d->ts, &now, &err) != PC_OK) {
    pc_log(PC_LOG_WARN, "tablet %s: adopting the published safe point %" PRIu64
           " unchecked: no timestamp from the oracle (%s)", t->name, safe, err.text);
    return 0;
  }
  if (safe <= now) return 0;
  pc_log(PC_LOG_ERROR, "tablet %s: the published safe point %" PRIu64 " (%s/gc/safe_point) is "
         "above the oracle's timestamp %" PRIu64 ": no pass of this cluster published it, so it "
         "is not adopted (docs/SECURITY.md)", t->name, safe, d->cfg->zookeeper.root, now);
  return 1;
}

/* A tablet answers once it holds its tablet in ZooKeeper (its ready file
 * follows): before that, a previous server's session may still hold it. */
static pc_status_t tablet_gate(void *ctx, uint8_t op, const char *body, size_t len,
                               pc_buf_t *reply, pc_error_t *err) {
  role_t *r = ctx;
  if (!atomic_load(&r->serving))
    return pc_error_set(err, PC_UNAVAILABLE, "%s is starting: it serves once it holds the "
                        "tablet in ZooKeeper", r->name);
  return pc_tablet_rpc_handler(r->tablet, op, body, len, reply, err);
}

pc_status_t pc_daemon_start_tablet(pc_daemon_t *d, const pc_config_tablet_t *t, pc_error_t *err) {
  role_t *r = pc_daemon_new_role(d, ROLE_TABLET, t->name, err);
  if (!r) return PC_INVALID;
  char sub[160];
  snprintf(sub, sizeof sub, "tablet-%s", t->name);
  char *dir = role_dir(d->cfg, t->data_dir, sub);
  pc_status_t st = dir ? pc_daemon_make_dir(dir, err) : pc_error_set(err, PC_NOMEM, "out of memory");
  /* its rows as ZooKeeper records them (the first to find none records them) */
  if (st == PC_OK && d->coord) {
    st = pc_coord_tablet_range(d->coord, t->name, t->start, t->start_len, t->end, t->end_len,
                               d->cfg->store.timeout_ms, err);
    if (st == PC_INVALID) pc_error_prefix(err, "%s", d->cfg->source);
  }
  char identity[PC_HOST_MAX + 4200] = "";
  if (st == PC_OK) {
    char host[PC_HOST_MAX] = "localhost", *real = realpath(dir, NULL);
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(identity, sizeof identity, "%s:%s", host, real ? real : dir);
    free(real);
  }
  pc_store_t *store = NULL;
  int fresh;
  if (st == PC_OK) st = pc_data_dir_prepare(dir, 1, &fresh, err);
  /* one lock per data directory, taken before the store's own */
  if (st == PC_OK && !(d->lock_dir && strcmp(d->lock_dir, dir) == 0) &&
      (r->dir_lock = pc_data_dir_lock(dir, "tablet", err)) < 0)
    st = err->code;
  if (st == PC_OK) st = pc_data_dir_upgrade(dir, err);
  if (st == PC_OK) {
    char path[4200];
    snprintf(path, sizeof path, "%s/store", dir);
    pc_local_options_t lo = {1, d->cfg->store.sync, (size_t)d->cfg->store.cache_mb << 20,
                             (size_t)d->cfg->store.meta_cache_mb << 20,
                             (size_t)d->cfg->store.write_buffer_mb << 20,
                             !d->cfg->store.compress};
    st = pc_dir_private(path, err);
    if (st == PC_OK) store = pc_local_store_open(path, &lo, err);
    if (store) (void)pc_dir_private(path, NULL);
    else if (st == PC_OK) st = err ? err->code : PC_IO_ERROR;
  }
  free(dir);
  if (st == PC_OK && d->coord) {
    /* a pass this tablet missed (down, or partitioned) may have published a
     * higher safe point, below which the other tablets deleted: refuse the
     * reads they refuse before serving any */
    uint64_t safe = 0;
    /* it cannot serve without the value: a ZooKeeper that is slow to answer
     * (a busy machine, a session being re-established) is waited for as long
     * as a previous run's session may last, as the claim below does */
    uint64_t until = pc_now_mono_ms() + 2ull * pc_coord_session_timeout(d->coord) +
                     d->cfg->store.timeout_ms;
    for (;;) {
      st = pc_coord_safe_point(d->coord, d->cfg->store.timeout_ms, &safe, err);
      if ((st != PC_TIMEOUT && st != PC_UNAVAILABLE) || pc_now_mono_ms() >= until) break;
      struct timespec pause = {0, 200 * 1000000L};
      nanosleep(&pause, NULL);
    }
    if (st != PC_OK) pc_error_prefix(err, "reading the published safe point");
    else if (safe > store->ops->gc_safe_point(store) && !safe_point_forged(d, t, safe))
      st = pc_local_store_raise_gc_safe_point(store, safe, err);
    if (st != PC_OK) {
      store->ops->close(store);
      store = NULL;
    }
  }
  if (st != PC_OK) {
    pc_error_prefix(err, "tablet %s", t->name);
    return st;
  }
  r->coord = d->coord;
  pc_row_range_t range = {t->start, t->start_len, t->end, t->end_len};
  r->tablet = pc_tablet_create(t->name, store, &range, pc_daemon_ts, &d->ts);
  if (!r->tablet) {
    store->ops->close(store);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (d->coord) pc_tablet_set_gc_publish(r->tablet, pc_daemon_publish_safe_point, d);
  /* a reply leaves room in a frame for its status and message */
  pc_tablet_set_limits(r->tablet, d->cfg->store.lock_ttl_ms,
                       ((size_t)d->cfg->limits.max_frame_mb << 20) - (64u << 10));
  st = pc_daemon_serve(d, r, &t->listen, &t->http, tablet_gate, r, pc_tablet_rpc_runs_inline,
                       err);
  if (st == PC_OK && d->coord) st = claim_tablet(d, r, t, identity, err);
  if (st == PC_OK) atomic_store(&r->serving, 1);
  return st;
}

pc_status_t pc_daemon_ts_setup(pc_daemon_t *d, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  d->ts.wait_ms = cfg->store.timeout_ms;
  if (d->oracle) {
    d->ts.local = d->oracle;
    return PC_OK;
  }
  if (cfg->zookeeper.set) { /* whichever oracle leads, this process's own included */
    pc_zk_options_t zo = pc_config_zk(cfg);
    if (!d->coord && !(d->coord = pc_coord_open(&zo, 0, cfg->store.timeout_ms, err)))
      return err->code;
    d->ts.locator = pc_tso_locator_on(d->coord, &d->auth, err);
    if (!d->ts.locator) return err->code;
    d->ts.batcher = pc_ts_batcher_create(pc_tso_locator_fetch, d->ts.locator);
    return d->ts.batcher ? PC_OK : pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (!cfg->tso.set || !cfg->tso.listen.set)
    return pc_error_set(err, PC_INVALID, "%s: tablets need a \"tso\" section", cfg->source);
  if (cfg->tso.listen.port == 0)
    return pc_error_set(err, PC_INVALID,
                        "%s: tso.listen %s:0: tablets take timestamps from the oracle at that "
                        "port, and port 0 is only for the process that runs the oracle",
                        cfg->source, cfg->tso.listen.host);
  d->ts.remote =
      pc_rpc_client_create(cfg->tso.listen.host, cfg->tso.listen.port, &d->auth, err);
  if (!d->ts.remote) return err->code;
  d->ts.batcher = pc_ts_batcher_create(pc_tso_remote_fetch, d->ts.remote);
  if (!d->ts.batcher) return pc_error_set(err, PC_NOMEM, "out of memory");
  return PC_OK;
}

void pc_daemon_stop_roles(pc_daemon_t *d) {
  /* servers first, in reverse order (each drains its requests in flight),
   * then the state they served */
  for (size_t i = d->nroles; i-- > 0;) {
    role_t *r = &d->roles[i];
    if (r->http) pc_http_stop(r->http);
    if (r->rpc) pc_rpc_server_stop(r->rpc);
  }
  for (size_t i = 0; i < d->nroles; i++) {
    role_t *r = &d->roles[i];
    if (r->tablet) pc_tablet_destroy(r->tablet); /* closes its LevelDB */
    if (r->kind == ROLE_SERVER) pc_daemon_server_stop(r); /* its tablets, then its replicas */
    pc_data_dir_unlock(r->dir_lock);
  }
  if (d->ts.batcher) pc_ts_batcher_destroy(d->ts.batcher);
  if (d->ts.remote) pc_rpc_client_destroy(d->ts.remote);
  pc_tso_locator_destroy(d->ts.locator);
  memset(&d->ts, 0, sizeof d->ts);
  pc_coord_close(d->coord); /* after its users: the locator, the tablets */
  d->coord = NULL;
  for (size_t i = 0; i < d->nroles; i++)
    if (d->roles[i].node) pc_tso_node_stop(d->roles[i].node); /* a standby takes over now */
  for (size_t i = 0; i < d->nroles; i++) {
    if (d->roles[i].oracle) pc_oracle_close(d->roles[i].oracle);
    pc_snapshots_destroy(d->roles[i].served.snapshots);
  }
  d->oracle = NULL;
  d->nroles = 0;
}

void pc_daemon_role_endpoint(const role_t *r, char *out, size_t cap) {
  snprintf(out, cap, "127.0.0.1:%u", (unsigned)pc_rpc_server_port(r->rpc));
}

const char *pc_daemon_tablet_name(const role_t *r) {
  return r->name + strlen(kind_names[r->kind]) + 1;
}
