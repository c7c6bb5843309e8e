/* servers.c — a tablet server of a replicated cluster ("servers" in the
 * configuration): one process, one rpc port, holding a replica of each
 * tablet whose "replicas" name it, through one replication host
 * (replica/replica.h). Its port serves the replication ops to the other
 * servers and each tablet's ops, a request naming its tablet (tablet.h's
 * ROUTED envelope; a plain op when it holds one tablet). It publishes where
 * it serves (servers/<name>/live) and, for each tablet it leads, that it
 * does (tablets/<name>/owner, whose identity carries the term), which is
 * where clients look.
 *
 * A server's first start ever bootstraps its tablets' groups with the
 * configured replicas (its directory takes incarnation 0); a start on an
 * empty directory after that (ZooKeeper's servers/<name> says the server
 * ran before) is a rebuild: a new incarnation, an empty replica of each
 * tablet, and the leader of each asked to take it back (a rejoin: added as
 * a non-voter, caught up from a snapshot, made a voter, the old incarnation
 * removed). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/db.h"
#include "base/deadline.h"
#include "base/error.h"
#include "base/log.h"
#include "daemon/daemon_internal.h"
#include "replica/repl_wire.h"

#define REJOIN_RETRY_MS 1000u

/* ---- the tablets it holds ------------------------------------------------------- */

static stab_t *find_tab(role_t *r, const char *name, size_t nlen) {
  stab_t *found = NULL;
  pthread_rwlock_rdlock(&r->tabs_lk);
  for (size_t i = 0; i < r->ntabs && !found; i++)
    if (strlen(r->tabs[i]->name) == nlen && memcmp(r->tabs[i]->name, name, nlen) == 0)
      found = r->tabs[i];
  pthread_rwlock_unlock(&r->tabs_lk);
  return found;
}

/* Raft's messages run on the I/O thread too: their handler only hands them
 * to the Raft thread, and they must never wait behind the tablet ops that
 * occupy the handler threads waiting for their entries to commit, which
 * needs those very messages. */
static int server_runs_inline(uint8_t op) {
  return op == PC_TABLET_OP_ROUTED_READ || op == PC_REPL_OP_RAFT || pc_tablet_rpc_runs_inline(op);
}

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* A tablet op's handler, timed for /metrics. */
static pc_status_t serve_op(role_t *r, pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                            pc_buf_t *reply, pc_error_t *err) {
  uint64_t t0 = now_us();
  pc_status_t st = pc_tablet_rpc_handler(t, op, body, len, reply, err);
  if (op >= 0x10 && op < 0x30) {
    uint64_t us = now_us() - t0;
    size_t b = 0;
    while (b < PC_RPC_LATENCY_BUCKETS && (double)us / 1e6 > pc_rpc_latency_bounds[b]) b++;
    atomic_fetch_add(&r->op_in[op - 0x10][b], 1);
    atomic_fetch_add(&r->op_us[op - 0x10], us);
  }
  return st;
}

void pc_daemon_server_durations(role_t *r, pc_buf_t *out) {
  static const char name[] = "percolator_rpc_request_duration_seconds";
  pc_metric_family(out, name, "histogram",
                   "Tablet requests, their handler's run, by the op they carry");
  for (unsigned k = 0; k < 32; k++) {
    const char *opname = pc_tablet_op_name((uint8_t)(0x10 + k));
    uint64_t le[PC_RPC_LATENCY_BUCKETS], acc = 0;
    for (size_t b = 0; b < PC_RPC_LATENCY_BUCKETS; b++) le[b] = acc += atomic_load(&r->op_in[k][b]);
    uint64_t count = acc + atomic_load(&r->op_in[k][PC_RPC_LATENCY_BUCKETS]);
    if (!opname || !count) continue;
    pc_metric_histogram_series(out, name, "op", opname, pc_rpc_latency_bounds, le,
                               PC_RPC_LATENCY_BUCKETS, (double)atomic_load(&r->op_us[k]) / 1e6,
                               count);
  }
}

static pc_status_t server_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                  pc_buf_t *reply, pc_error_t *err) {
  role_t *r = ctx;
  if (op >= PC_REPL_OP_RAFT && op <= PC_REPL_OP_LAST) {
    pc_repl_host_t *h = atomic_load(&r->host);
    if (!h) return pc_error_set(err, PC_UNAVAILABLE, "server %s is starting", r->server->name);
    return pc_repl_rpc_handler(h, op, body, len, reply, err);
  }
  if (op == PC_TABLET_OP_ROUTED || op == PC_TABLET_OP_ROUTED_READ) {
    pc_rd_t rd = {body, len, 0, 1};
    size_t nl = 0;
    const char *name = pc_rd_str(&rd, &nl);
    uint8_t inner = pc_rd_u8(&rd);
    if (!rd.ok || nl == 0 || nl >= sizeof ((stab_t *)0)->name)
      return pc_error_set(err, PC_INVALID, "server %s: a malformed tablet envelope", r->server->name);
    if (op == PC_TABLET_OP_ROUTED_READ && !pc_tablet_rpc_runs_inline(inner))
      return pc_error_set(err, PC_INVALID, "server %s: op 0x%02x is not a read of ROUTED_READ",
                          r->server->name, inner);
    stab_t *t = find_tab(r, name, nl);
    if (!t)
      return pc_error_set(err, PC_INVALID, "server %s holds no replica of tablet %.*s "
                          "(misrouted request)", r->server->name, (int)(nl > 64 ? 64 : nl), name);
    return serve_op(r, t->tablet, inner, body + rd.pos, len - rd.pos, reply, err);
  }
  pthread_rwlock_rdlock(&r->tabs_lk);
  pc_tablet_t *only = r->ntabs == 1 ? r->tabs[0]->tablet : NULL;
  size_t n = r->ntabs;
  pthread_rwlock_unlock(&r->tabs_lk);
  if (only) return serve_op(r, only, op, body, len, reply, err);
  return pc_error_set(err, PC_INVALID, "server %s holds %zu tablets: a request names its tablet "
                      "(op 0x%02x)", r->server->name, n, PC_TABLET_OP_ROUTED);
}

/* Lists a tablet the server holds a replica of, served from now on. */
static pc_status_t add_tab(role_t *r, const char *name, const pc_row_range_t *range,
                           pc_replica_t *rep, int rejoin, pc_error_t *err) {
  pc_daemon_t *d = r->d;
  pc_tablet_t *t = pc_tablet_create(name, pc_replica_store(rep), range, pc_daemon_ts, &d->ts);
  if (!t) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_tablet_set_gc_publish(t, pc_daemon_publish_safe_point, d);
  pc_tablet_set_limits(t, d->cfg->store.lock_ttl_ms,
                       ((size_t)d->cfg->limits.max_frame_mb << 20) - (64u << 10));
  stab_t *s = calloc(1, sizeof *s);
  if (!s) {
    pc_tablet_destroy(t);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  snprintf(s->name, sizeof s->name, "%s", name);
  s->tablet = t;
  s->rep = rep;
  s->rejoin = rejoin;
  pthread_rwlock_wrlock(&r->tabs_lk);
  pc_status_t st = PC_OK;
  if (r->ntabs == r->captabs) { /* the array of pointers moves; the entries do not */
    size_t cap = r->captabs ? r->captabs * 2 : 8;
    stab_t **v = realloc(r->tabs, cap * sizeof *v);
    if (v) {
      r->tabs = v;
      r->captabs = cap;
    } else {
      st = pc_error_set(err, PC_NOMEM, "out of memory");
    }
  }
  if (st == PC_OK) r->tabs[r->ntabs++] = s;
  pthread_rwlock_unlock(&r->tabs_lk);
  if (st != PC_OK) {
    pc_tablet_destroy(t);
    free(s);
  }
  return st;
}

/* Opens this server's replica of tablet name (rows range) as start says
 * (a replica with state here opens from it whatever start says) and serves it. */
static pc_status_t open_tablet(role_t *r, const char *name, const pc_row_range_t *range,
                               pc_replica_start_t start, const char *const *voters,
                               size_t nvoters, pc_error_t *err) {
  pc_repl_host_t *h = atomic_load(&r->host);
  int had = pc_repl_host_has(h, name);
  pc_replica_t *rep = NULL;
  pc_status_t st = pc_repl_host_replica(h, name, had ? PC_REPLICA_EXISTING : start, voters,
                                        nvoters, &rep, err);
  if (st != PC_OK) return st;
  return add_tab(r, name, range, rep, !had && start == PC_REPLICA_JOIN, err);
}

/* CREATE from a tablet's leader: an empty replica here (its rows from
 * ZooKeeper's record), which the leader then adds to its group. */
static pc_status_t on_create(void *ctx, const char *group, pc_replica_t **out, pc_error_t *err) {
  role_t *r = ctx;
  pc_daemon_t *d = r->d;
  char *start = NULL, *end = NULL;
  size_t sl = 0, el = 0;
  pc_status_t st = pc_coord_tablet_range_get(d->coord, group, d->cfg->store.timeout_ms, &start,
                                             &sl, &end, &el, err);
  if (st == PC_OK) {
    pc_row_range_t range = {start, sl, end, el};
    st = open_tablet(r, group, &range, PC_REPLICA_JOIN, NULL, 0, err);
    if (st == PC_OK) {
      stab_t *t = find_tab(r, group, strlen(group));
      pthread_rwlock_wrlock(&r->tabs_lk);
      t->rejoin = 0; /* the leader asked for it: it adds it itself */
      pthread_rwlock_unlock(&r->tabs_lk);
      *out = t->rep;
      pc_log(PC_LOG_INFO, "server %s: a new replica of tablet %s, to be added by its leader",
             r->server->name, group);
    }
  }
  free(start);
  free(end);
  return st;
}

/* ---- leadership in ZooKeeper ------------------------------------------------------ */

static void on_leader(void *ctx, const char *group, uint64_t term) {
  role_t *r = ctx;
  pc_daemon_t *d = r->d;
  pc_error_t err;
  pc_status_t st = pc_coord_tablet_lead(d->coord, group, r->advertise, r->server->name, term,
                                        d->cfg->store.timeout_ms, &err);
  if (st != PC_OK)
    pc_log(PC_LOG_WARN, "tablet %s: cannot publish %s in ZooKeeper: %s", group,
           term ? "its leader" : "that this server no longer leads it", err.text);
}

/* Where server name listens: the configuration's address when it names a
 * port and a reachable host, else what the server published. */
static pc_status_t resolve(void *ctx, const char *server, char *endpoint, size_t cap,
                           pc_error_t *err) {
  role_t *r = ctx;
  const pc_config_t *cfg = r->d->cfg;
  for (size_t i = 0; i < cfg->nservers; i++) {
    const pc_config_server_t *s = &cfg->servers[i];
    if (strcmp(s->name, server) != 0) continue;
    if (s->listen.port && strcmp(s->listen.host, "0.0.0.0") != 0 && strcmp(s->listen.host, "::") != 0) {
      snprintf(endpoint, cap, strchr(s->listen.host, ':') ? "[%s]:%u" : "%s:%u", s->listen.host,
               (unsigned)s->listen.port);
      return PC_OK;
    }
    break;
  }
  return pc_coord_server_addr(r->d->coord, server, 2000, endpoint, cap, err);
}

/* ---- rejoining after a lost directory ------------------------------------------- */

/* Asks server (a replica of t's tablet) to take this server's new replica
 * of it back, as its leader: PC_OK once done. */
static pc_status_t ask_rejoin(role_t *r, stab_t *t, const char *server, pc_error_t *err) {
  char ep[320], host[300];
  uint16_t port;
  pc_status_t st = resolve(r, server, ep, sizeof ep, err);
  if (st == PC_OK) st = pc_parse_endpoint(ep, 0, host, sizeof host, &port, err);
  if (st != PC_OK) return st;
  pc_rpc_client_t *c = pc_rpc_client_create(host, port, &r->d->auth, err);
  if (!c) return err->code;
  pc_replica_info_t *info = malloc(sizeof *info);
  pc_buf_t body = {0}, reply = {0};
  if (!info) st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK) {
    pc_replica_info(t->rep, info);
    if (pc_buf_u8(&body, PC_MEMBER_REJOIN) || pc_buf_str(&body, t->name, strlen(t->name)) ||
        pc_buf_str(&body, r->server->name, strlen(r->server->name)) ||
        pc_buf_u64(&body, info->id) || pc_buf_str(&body, info->address, strlen(info->address)))
      st = pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (st == PC_OK) st = pc_rpc_call(c, PC_REPL_OP_MEMBER, body.p, body.len, 120000, &reply, err);
  free(info);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(c);
  return st;
}

static void *rejoin_main(void *arg) {
  role_t *r = arg;
  const pc_config_t *cfg = r->d->cfg;
  while (!atomic_load(&r->stopping)) {
    int pending = 0;
    pthread_rwlock_rdlock(&r->tabs_lk);
    size_t n = r->ntabs;
    pthread_rwlock_unlock(&r->tabs_lk);
    for (size_t i = 0; i < n && !atomic_load(&r->stopping); i++) {
      pthread_rwlock_rdlock(&r->tabs_lk);
      stab_t *t = r->tabs[i];
      int want = t->rejoin;
      pthread_rwlock_unlock(&r->tabs_lk);
      if (!want) continue;
      pending = 1;
      const pc_config_tablet_t *ct = NULL;
      for (size_t k = 0; k < cfg->ntablets && !ct; k++)
        if (strcmp(cfg->tablets[k].name, t->name) == 0) ct = &cfg->tablets[k];
      for (size_t k = 0; ct && k < ct->nreplicas && want; k++) {
        if (strcmp(ct->replicas[k], r->server->name) == 0) continue;
        pc_error_t err;
        if (ask_rejoin(r, t, ct->replicas[k], &err) == PC_OK) {
          pthread_rwlock_wrlock(&r->tabs_lk);
          t->rejoin = want = 0;
          pthread_rwlock_unlock(&r->tabs_lk);
          pc_log(PC_LOG_INFO, "tablet %s: this server's replica rejoined its group", t->name);
        } else {
          pc_log(PC_LOG_DEBUG, "tablet %s: rejoining through %s: %s", t->name, ct->replicas[k],
                 err.text);
        }
      }
    }
    if (!pending) break;
    for (uint32_t w = 0; w < REJOIN_RETRY_MS && !atomic_load(&r->stopping); w += 50)
      pc_sleep_ms(50);
  }
  return NULL;
}

/* ---- replicas of a server down too long, made again elsewhere ---------------------- */

#define REPAIR_EVERY_MS 1000u
#define REPAIR_MAX 64

/* Since when each member of the tablets this server leads has been seen
 * without a live server (a servers/<name>/live node). */
typedef struct down {
  char tablet[80];
  uint64_t id;
  uint64_t since_ms;
} down_t;

static int listed_in(char *const *names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

/* Since when member id of tablet has been seen down, from the list of the
 * last pass (now when it was not in it). */
static uint64_t down_since(const down_t *down, size_t n, const char *tablet, uint64_t id,
                           uint64_t now) {
  for (size_t k = 0; k < n; k++)
    if (down[k].id == id && strcmp(down[k].tablet, tablet) == 0) return down[k].since_ms;
  return now;
}

/* The first live server that holds no replica of info's tablet, or NULL. */
static const char *spare_server(const pc_replica_info_t *info, char *const *live, size_t nlive) {
  for (size_t l = 0; l < nlive; l++) {
    int holds = 0;
    for (uint32_t q = 0; q < info->n && !holds; q++) {
      char s2[80];
      holds = pc_repl_address_server(info->members[q].address, s2, sizeof s2) == 0 &&
              strcmp(s2, live[l]) == 0;
    }
    if (!holds) return live[l];
  }
  return NULL;
}

/* One look at the tablets this server leads: a member whose server has had
 * no live node (servers/<name>/live) for replication.down_after_ms gets its
 * replica made again on a live server that holds none of the tablet, then
 * is removed. down[0..*ndown) says since when each member seen down in the
 * last pass was; it is replaced by this pass's. */
static void repair_pass(role_t *r, down_t *down, size_t *ndown) {
  pc_daemon_t *d = r->d;
  uint32_t after = d->cfg->replication.down_after_ms;
  pc_error_t err;
  char **live = NULL;
  size_t nlive = 0;
  if (pc_coord_servers_live(d->coord, d->cfg->store.timeout_ms, &live, &nlive, &err) != PC_OK)
    return; /* ZooKeeper cannot say: nothing is judged down */
  pc_replica_info_t *info = malloc(sizeof *info);
  down_t seen[REPAIR_MAX];
  size_t nseen = 0;
  pthread_rwlock_rdlock(&r->tabs_lk);
  size_t n = r->ntabs;
  pthread_rwlock_unlock(&r->tabs_lk);
  uint64_t now = pc_now_mono_ms();
  for (size_t i = 0; info && i < n && !atomic_load(&r->stopping); i++) {
    pthread_rwlock_rdlock(&r->tabs_lk);
    stab_t t = *r->tabs[i];
    pthread_rwlock_unlock(&r->tabs_lk);
    pc_replica_info(t.rep, info);
    if (!info->ready) continue; /* the leader repairs */
    for (uint32_t m = 0; m < info->n && nseen < REPAIR_MAX; m++) {
      char server[80];
      if (info->members[m].id == info->id ||
          pc_repl_address_server(info->members[m].address, server, sizeof server) != 0 ||
          listed_in(live, nlive, server))
        continue;
      down_t *x = &seen[nseen++];
      snprintf(x->tablet, sizeof x->tablet, "%s", t.name);
      x->id = info->members[m].id;
      x->since_ms = down_since(down, *ndown, t.name, x->id, now);
      if (now - x->since_ms < after) continue;
      const char *to = spare_server(info, live, nlive);
      unsigned long long secs = (now - x->since_ms) / 1000;
      if (!to) {
        pc_log(PC_LOG_WARN, "tablet %s: server %s has been down for %llu s, and no live server "
               "without a replica of the tablet can take it (start one, or run 'percolator "
               "tablet add-replica %s SERVER')", t.name, server, secs, t.name);
        x->since_ms = now; /* said again after another down_after_ms */
        continue;
      }
      pc_log(PC_LOG_WARN, "tablet %s: server %s has been down for %llu s (replication."
             "down_after_ms): its replica is made again on server %s", t.name, server, secs, to);
      pc_buf_t text = {0};
      pc_repl_host_t *h = atomic_load(&r->host);
      pc_status_t st = pc_replica_member(h, t.name, PC_MEMBER_ADD, to, 0, NULL, 0, &text, &err);
      if (st == PC_OK)
        st = pc_replica_member(h, t.name, PC_MEMBER_REMOVE, server, 0, NULL, 0, &text, &err);
      pc_buf_free(&text);
      if (st != PC_OK)
        pc_log(PC_LOG_WARN, "tablet %s: re-replicating server %s's replica: %s", t.name, server,
               err.text);
      break; /* one change a pass for a tablet: its configuration is read again next time */
    }
  }
  memcpy(down, seen, nseen * sizeof *seen);
  *ndown = nseen;
  free(info);
  for (size_t l = 0; l < nlive; l++) free(live[l]);
  free(live);
}

static void *repair_main(void *arg) {
  role_t *r = arg;
  down_t down[REPAIR_MAX];
  size_t ndown = 0;
  while (!atomic_load(&r->stopping)) {
    for (uint32_t w = 0; w < REPAIR_EVERY_MS && !atomic_load(&r->stopping); w += 50) pc_sleep_ms(50);
    if (!atomic_load(&r->stopping)) repair_pass(r, down, &ndown);
  }
  return NULL;
}

/* ---- starting and stopping ---------------------------------------------------------- */

static int server_listed(const pc_config_tablet_t *t, const char *server) {
  for (size_t k = 0; k < t->nreplicas; k++)
    if (strcmp(t->replicas[k], server) == 0) return 1;
  return 0;
}

typedef struct others {
  role_t *r;
  pc_error_t *err;
  pc_status_t st;
} others_t;

/* A group this server holds that the configuration does not list it in (a
 * replica added by `percolator tablet add-replica`): opened from its state. */
static void open_other(void *ctx, const char *group) {
  others_t *o = ctx;
  if (o->st != PC_OK || find_tab(o->r, group, strlen(group))) return;
  pc_daemon_t *d = o->r->d;
  char *start = NULL, *end = NULL;
  size_t sl = 0, el = 0;
  o->st = pc_coord_tablet_range_get(d->coord, group, d->cfg->store.timeout_ms, &start, &sl, &end,
                                    &el, o->err);
  if (o->st == PC_OK) {
    pc_row_range_t range = {start, sl, end, el};
    o->st = open_tablet(o->r, group, &range, PC_REPLICA_EXISTING, NULL, 0, o->err);
  }
  free(start);
  free(end);
}

static uint64_t random_incarnation(void) {
  uint64_t v = 0;
  while (v == 0)
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = pc_now_wall_ms() ^ (uint64_t)getpid();
  return v;
}

pc_status_t pc_daemon_start_server(pc_daemon_t *d, const pc_config_server_t *sv, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  if (!d->coord)
    return pc_error_set(err, PC_INVALID, "%s: servers need a \"zookeeper\" section", cfg->source);
  role_t *r = pc_daemon_new_role(d, ROLE_SERVER, sv->name, err);
  if (!r) return PC_INVALID;
  r->server = sv;
  r->d = d;
  pthread_rwlock_init(&r->tabs_lk, NULL);
  r->tabs_lk_init = 1;
  char *dir = NULL;
  if (sv->data_dir) dir = strdup(sv->data_dir);
  else if (asprintf(&dir, "%s/server-%s", cfg->data_dir, sv->name) < 0) dir = NULL;
  pc_status_t st = dir ? pc_daemon_make_dir(dir, err) : pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK && !(d->lock_dir && strcmp(d->lock_dir, dir) == 0) &&
      (r->dir_lock = pc_data_dir_lock(dir, "tablet", err)) < 0)
    st = err->code;
  /* its port first: peers and clients find it where it published it */
  if (st == PC_OK)
    st = pc_daemon_serve(d, r, &sv->listen, &sv->http, server_handler, r, server_runs_inline, err);
  if (st == PC_OK)
    pc_daemon_advertised(sv->listen.host, pc_rpc_server_port(r->rpc), r->advertise,
                         sizeof r->advertise);
  /* a directory found empty: the first start of this server, or a rebuild */
  int fresh = dir && pc_repl_dir_fresh(dir), seen = 0;
  if (st == PC_OK && fresh) st = pc_coord_server_seen(d->coord, sv->name, cfg->store.timeout_ms, &seen, err);
  pc_repl_host_t *h = NULL;
  if (st == PC_OK) {
    pc_repl_options_t o = {0};
    o.server = sv->name;
    o.dir = dir;
    o.election_timeout_ms = cfg->replication.election_timeout_ms;
    o.heartbeat_ms = cfg->replication.heartbeat_ms;
    o.snapshot_entries = cfg->replication.snapshot_entries;
    o.auth = &d->auth;
    o.resolve = resolve;
    o.resolve_ctx = r;
    o.on_leader = on_leader;
    o.on_leader_ctx = r;
    o.on_create = on_create;
    o.on_create_ctx = r;
    o.store = (pc_local_options_t){1, 0, (size_t)cfg->store.cache_mb << 20,
                                   (size_t)cfg->store.meta_cache_mb << 20,
                                   (size_t)cfg->store.write_buffer_mb << 20,
                                   !cfg->store.compress};
    o.fresh_incarnation = seen ? random_incarnation() : 0;
    int was_fresh = 0;
    if (!(h = pc_repl_host_open(&o, &was_fresh, err))) st = err->code;
    else atomic_store(&r->host, h);
    if (st == PC_OK && fresh && seen)
      pc_log(PC_LOG_WARN, "server %s: its directory %s is empty but the server ran before: it "
             "rebuilds its replicas from the others under a new incarnation", sv->name, dir);
  }
  if (st == PC_OK && fresh && !seen) {
    int first = 0;
    st = pc_coord_server_mark(d->coord, sv->name, cfg->store.timeout_ms, &first, err);
  }
  if (st == PC_OK) st = pc_coord_server_live(d->coord, sv->name, r->advertise, cfg->store.timeout_ms, err);
  int first_incarnation = h && pc_repl_host_incarnation(h) == 0;
  for (size_t i = 0; st == PC_OK && i < cfg->ntablets; i++) {
    const pc_config_tablet_t *t = &cfg->tablets[i];
    if (!server_listed(t, sv->name)) continue;
    st = pc_coord_tablet_range(d->coord, t->name, t->start, t->start_len, t->end, t->end_len,
                               cfg->store.timeout_ms, err);
    if (st == PC_INVALID) pc_error_prefix(err, "%s", cfg->source);
    pc_row_range_t range = {t->start, t->start_len, t->end, t->end_len};
    if (st == PC_OK)
      st = open_tablet(r, t->name, &range,
                       first_incarnation ? PC_REPLICA_BOOTSTRAP : PC_REPLICA_JOIN,
                       (const char *const *)t->replicas, t->nreplicas, err);
  }
  if (st == PC_OK) {
    others_t o = {r, err, PC_OK};
    pc_repl_host_groups(h, open_other, &o);
    st = o.st;
  }
  if (st == PC_OK) {
    int any = 0;
    pthread_rwlock_rdlock(&r->tabs_lk);
    for (size_t i = 0; i < r->ntabs; i++) any |= r->tabs[i]->rejoin;
    size_t ntabs = r->ntabs;
    pthread_rwlock_unlock(&r->tabs_lk);
    if (any && pthread_create(&r->rejoin, NULL, rejoin_main, r) == 0) r->rejoin_running = 1;
    if (cfg->replication.down_after_ms && pthread_create(&r->repair, NULL, repair_main, r) == 0)
      r->repair_running = 1;
    pc_log(PC_LOG_INFO, "server %s: serving %zu replica%s on %s", sv->name, ntabs,
           ntabs == 1 ? "" : "s", r->advertise);
  }
  free(dir);
  if (st != PC_OK) pc_error_prefix(err, "server %s", sv->name);
  return st;
}

void pc_daemon_server_stop(role_t *r) {
  atomic_store(&r->stopping, 1);
  if (r->rejoin_running) pthread_join(r->rejoin, NULL);
  r->rejoin_running = 0;
  if (r->repair_running) pthread_join(r->repair, NULL);
  r->repair_running = 0;
  for (size_t i = 0; i < r->ntabs; i++) {
    pc_tablet_destroy(r->tabs[i]->tablet);
    free(r->tabs[i]);
  }
  pc_repl_host_close(atomic_load(&r->host)); /* pending proposals fail, stores close */
  atomic_store(&r->host, NULL);
  free(r->tabs);
  r->tabs = NULL;
  r->ntabs = r->captabs = 0;
  if (r->tabs_lk_init) pthread_rwlock_destroy(&r->tabs_lk);
  r->tabs_lk_init = 0;
}

/* ---- metrics ------------------------------------------------------------------------ */

void pc_daemon_server_metrics(role_t *r, pc_buf_t *out) {
  pc_metric_gauge(out, "percolator_zookeeper_session_state",
                  "ZooKeeper session: 0 connecting, 1 connected, 2 expired, -1 none",
                  pc_coord_zk_state(r->d->coord));
  pthread_rwlock_rdlock(&r->tabs_lk);
  size_t n = r->ntabs;
  stab_t *copy = n ? malloc(n * sizeof *copy) : NULL;
  for (size_t i = 0; copy && i < n; i++) copy[i] = *r->tabs[i];
  pthread_rwlock_unlock(&r->tabs_lk);
  if (n && !copy) return;
  pc_replica_info_t *info = malloc((n ? n : 1) * sizeof *info);
  if (!info) {
    free(copy);
    return;
  }
  for (size_t i = 0; i < n; i++) pc_replica_info(copy[i].rep, &info[i]);
  char v[64];
  static const struct {
    const char *name, *type, *help;
  } fams[] = {
      {"percolator_raft_term", "gauge", "The replica's Raft term"},
      {"percolator_raft_leading", "gauge", "1 while the replica leads its tablet and serves"},
      {"percolator_raft_commit_index", "gauge", "The highest log index known committed"},
      {"percolator_raft_applied_index", "gauge", "The highest log index applied to the store"},
      {"percolator_raft_last_index", "gauge", "The replica's last log index"},
      {"percolator_raft_snapshot_index", "gauge", "The log index of the replica's last snapshot"},
      {"percolator_raft_leader_elections_total", "counter", "Times the replica became its tablet's leader"},
      {"percolator_raft_snapshots_sent_total", "counter", "Snapshots sent to replicas being rebuilt"},
      {"percolator_raft_snapshots_received_total", "counter", "Snapshots installed from a peer"},
      {"percolator_raft_snapshot_sent_bytes_total", "counter", "Bytes of store streamed to other replicas"},
      {"percolator_raft_snapshot_received_bytes_total", "counter", "Bytes of store received from a peer"},
  };
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
    pc_metric_family(out, fams[f].name, fams[f].type, fams[f].help);
    for (size_t i = 0; i < n; i++) {
      const pc_replica_info_t *x = &info[i];
      uint64_t val = 0;
      switch (f) {
        case 0: val = x->term; break;
        case 1: val = x->ready; break;
        case 2: val = x->commit; break;
        case 3: val = x->applied; break;
        case 4: val = x->last_index; break;
        case 5: val = x->snapshot_index; break;
        case 6: val = x->elections; break;
        case 7: val = x->snapshots_sent; break;
        case 8: val = x->snapshots_received; break;
        case 9: val = x->snapshot_bytes_sent; break;
        default: val = x->snapshot_bytes_received; break;
      }
      pc_metric_sample(out, fams[f].name, "tablet", x->group, val);
    }
  }
  static const char lat[] = "percolator_raft_proposal_duration_seconds";
  pc_metric_family(out, lat, "histogram",
                   "A row operation's entry, from its proposal to its application on the leader");
  for (size_t i = 0; i < n; i++) {
    pc_replica_stats_t st;
    pc_replica_stats(copy[i].rep, &st);
    pc_metric_histogram_series(out, lat, "tablet", info[i].group, pc_rpc_latency_bounds,
                               st.proposal_le, PC_RPC_LATENCY_BUCKETS, st.proposal_seconds,
                               st.proposals);
  }
  pc_metric_family(out, "percolator_raft_leader_changes_total", "counter",
                   "Times the leader a replica knows of changed");
  for (size_t i = 0; i < n; i++) {
    pc_replica_stats_t st;
    pc_replica_stats(copy[i].rep, &st);
    pc_metric_sample(out, "percolator_raft_leader_changes_total", "tablet", info[i].group,
                     st.leader_changes);
  }
  /* tablet and replica names are [A-Za-z0-9._-#]: nothing to escape */
  char line[600];
  /* each tablet's operations and garbage collection, as a tablet's own server reports them */
  pc_metric_family(out, "percolator_tablet_operations_total", "counter",
                   "Store operations served, by tablet");
  for (size_t i = 0; i < n; i++)
    pc_metric_sample(out, "percolator_tablet_operations_total", "tablet", copy[i].name,
                     pc_tablet_ops(copy[i].tablet));
  pc_tablet_gc_t *gc = malloc((n ? n : 1) * sizeof *gc);
  for (size_t i = 0; gc && i < n; i++) pc_tablet_gc_stats(copy[i].tablet, &gc[i]);
  pc_metric_family(out, "percolator_gc_safe_point_timestamp_seconds", "gauge",
                   "GC safe point, by tablet (reads below it are refused): its physical part, "
                   "Unix time");
  for (size_t i = 0; gc && i < n; i++) {
    int k = snprintf(line, sizeof line,
                     "percolator_gc_safe_point_timestamp_seconds{tablet=\"%s\"} %.3f\n",
                     copy[i].name, (double)PC_TS_PHYSICAL_MS(gc[i].safe_point) / 1000.0);
    if (k > 0 && (size_t)k < sizeof line) pc_buf_append(out, line, (size_t)k);
  }
  pc_metric_family(out, "percolator_gc_passes_total", "counter", "GC passes, by tablet");
  for (size_t i = 0; gc && i < n; i++)
    pc_metric_sample(out, "percolator_gc_passes_total", "tablet", copy[i].name, gc[i].passes);
  pc_metric_family(out, "percolator_gc_versions_deleted_total", "counter",
                   "Old versions deleted by GC, by tablet");
  for (size_t i = 0; gc && i < n; i++)
    pc_metric_sample(out, "percolator_gc_versions_deleted_total", "tablet", copy[i].name,
                     gc[i].deleted.versions);
  free(gc);
  pc_metric_family(out, "percolator_raft_lease_remaining_seconds", "gauge",
                   "On a leader: how long its read lease has left");
  for (size_t i = 0; i < n; i++) {
    int k = snprintf(line, sizeof line, "percolator_raft_lease_remaining_seconds{tablet=\"%s\"} %.3f\n",
                     info[i].group, (double)info[i].lease_ms / 1000.0);
    if (k > 0 && (size_t)k < sizeof line) pc_buf_append(out, line, (size_t)k);
  }
  /* the leader's view of each follower: how far behind it is */
  pc_metric_family(out, "percolator_raft_follower_lag_entries", "gauge",
                   "On a leader: log entries a replica of its tablet has yet to store");
  for (size_t i = 0; i < n; i++) {
    const pc_replica_info_t *x = &info[i];
    if (!x->ready) continue;
    for (uint32_t m = 0; m < x->n; m++) {
      if (x->members[m].id == x->id) continue;
      uint64_t lag = x->last_index > x->members[m].match ? x->last_index - x->members[m].match : 0;
      int k = snprintf(line, sizeof line,
                       "percolator_raft_follower_lag_entries{tablet=\"%s\",replica=\"%s\"} %" PRIu64 "\n",
                       x->group, x->members[m].address, lag);
      if (k > 0 && (size_t)k < sizeof line) pc_buf_append(out, line, (size_t)k);
    }
  }
  (void)v;
  free(info);
  free(copy);
}
