/* verb_status.c — `percolator status`: what the configuration's daemons say
 * about themselves — the elected oracle and its standbys, each tablet's row
 * range, the server holding it (its owner in ZooKeeper's tablet map, or "no
 * live server"), operations and garbage collection; in a replicated cluster
 * ("servers") each server, and each tablet's leader and replicas with their
 * role, term, applied and commit index and lag behind the leader
 * (replview.h), flagged under-replicated when fewer voting replicas are up
 * than its "replicas" lists — and what the cluster keeps in
 * ZooKeeper: the live clients with the oldest snapshot each holds, the
 * workers with the share of the notification buckets each takes, the
 * published safe point; or, without a cluster, the embedded store's
 * directory. Exit 0 when every daemon answered, 3 when any did not (the
 * report is printed either way). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <percolator/observer.h>

#include "apps/cli/replview.h"
#include "cli.h"
#include "core/db.h"
#include "notify/worker.h"
#include "config/config.h"
#include "base/error.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "lockservice/coord.h"
#include "tso/tso_client.h"
#include "tso/tso_locator.h"

/* The bound of each daemon's answer: --timeout, or 2 s (set by run_status). */
static uint32_t status_timeout_ms = 2000;
#define STATUS_TIMEOUT_MS status_timeout_ms

/* The pending notifications of one column, as counted. */
typedef struct col_pending {
  char *table, *col;
  size_t clen;
  uint64_t count;
} col_pending_t;

typedef struct report {
  int json;
  json_t *root;
  int down;   /* daemons that did not answer */
  int failed; /* a count that could not be made */
  col_pending_t *pending; /* per column, from report_notifications */
  size_t npending;
} report_t;

static void print_range(FILE *out, const char *p, size_t n, const char *empty) {
  if (n == 0) {
    fputs(empty, out);
    return;
  }
  fmt_escape(out, p, n, 1);
}

static json_t *endpoint_obj(const pc_endpoint_t *ep, const char *err_text) {
  json_t *o = json_object();
  char buf[PC_HOST_MAX + 8];
  snprintf(buf, sizeof buf, "%s:%u", ep->host, (unsigned)ep->port);
  json_object_set_new(o, "listen", json_string(buf));
  json_object_set_new(o, "up", json_boolean(err_text == NULL));
  if (err_text) json_object_set_new(o, "error", json_string(err_text));
  return o;
}

static void line(report_t *r, const char *what, const pc_endpoint_t *ep, const char *err_text) {
  if (r->json) return;
  printf("%-18s %s:%-6u %-5s ", what, ep->host, (unsigned)ep->port, err_text ? "down" : "up");
  if (err_text) printf("%s", err_text);
}

static void report_tso(report_t *r, const pc_config_t *cfg) {
  pc_error_t err;
  pc_error_clear(&err);
  uint64_t last = 0;
  pc_rpc_client_t *c =
      pc_config_rpc_client(cfg, cfg->tso.listen.host, cfg->tso.listen.port, &err);
  pc_status_t st = c ? pc_tso_remote_info(c, STATUS_TIMEOUT_MS, &last, &err) : err.code;
  if (c) pc_rpc_client_destroy(c);
  const char *e = st == PC_OK ? NULL : err.text;
  r->down += st != PC_OK;
  line(r, "tso", &cfg->tso.listen, e);
  if (!r->json && !e) printf("last_ts=%llu", (unsigned long long)last);
  if (!r->json) putchar('\n');
  json_t *o = endpoint_obj(&cfg->tso.listen, e);
  if (!e) fmt_json_u64(o, "last_ts", last);
  json_object_set_new(r->root, "tso", o);
}

/* With "zookeeper": the elected oracle, found where clients find it (on
 * the session coord), and every candidate in election order (the first
 * leads). */
static void report_tso_elected(report_t *r, pc_coord_t *coord, const pc_config_t *cfg) {
  pc_error_t err;
  pc_error_clear(&err);
  uint64_t last = 0;
  char leader[300] = "", all[1024] = "";
  pc_rpc_auth_t auth;
  pc_tso_locator_t *l = !coord || pc_config_auth(cfg, &auth, &err) != PC_OK
                            ? NULL
                            : pc_tso_locator_on(coord, &auth, &err);
  if (coord) pc_config_auth_release(&auth);
  pc_status_t st = l ? pc_tso_locator_info(l, STATUS_TIMEOUT_MS, &last, &err)
                 : coord ? err.code
                         : pc_error_set(&err, PC_UNAVAILABLE, "no ZooKeeper session to find it");
  if (l) pc_tso_locator_members(l, leader, sizeof leader, all, sizeof all);
  pc_tso_locator_destroy(l);
  const char *e = st == PC_OK ? NULL : err.text;
  r->down += st != PC_OK;
  json_t *o = json_object(), *cands = json_array();
  size_t n = 0;
  for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n"), n++)
    json_array_append_new(cands, json_string(line));
  if (!r->json) {
    printf("%-18s %-13s %-5s ", "tso (elected)", leader[0] ? leader : "(none)", e ? "down" : "up");
    if (e) printf("%s", e);
    else printf("last_ts=%llu candidates=%zu", (unsigned long long)last, n);
    putchar('\n');
  }
  json_object_set_new(o, "leader", json_string(leader));
  json_object_set_new(o, "up", json_boolean(e == NULL));
  if (e) json_object_set_new(o, "error", json_string(e));
  else fmt_json_u64(o, "last_ts", last);
  json_object_set_new(o, "candidates", cands);
  json_object_set_new(r->root, "tso", o);
}

/* "<oldest> <host>:<pid>" of a client's node: its fields. */
static void client_fields(const char *data, uint64_t *oldest, int *reported, const char **who) {
  char *end;
  *oldest = strtoull(data, &end, 10);
  *reported = end != data && *oldest != UINT64_MAX;
  *who = *end == ' ' ? end + 1 : data;
}

/* What the cluster keeps in ZooKeeper: the session this report reads it
 * through, the live clients and what each holds open, the workers and their
 * shares of the notification buckets, and the published safe point. */
static void report_coordination(report_t *r, pc_coord_t *coord, const pc_config_t *cfg,
                                const char *open_error) {
  json_t *zk = json_object();
  json_object_set_new(zk, "connect", json_string(cfg->zookeeper.connect));
  json_object_set_new(zk, "root", json_string(cfg->zookeeper.root));
  json_object_set_new(zk, "up", json_boolean(coord != NULL));
  if (!coord) {
    r->down++;
    json_object_set_new(zk, "error", json_string(open_error));
    json_object_set_new(r->root, "zookeeper", zk);
    if (!r->json) printf("%-18s %s %s  down  %s\n", "zookeeper", cfg->zookeeper.connect,
                         cfg->zookeeper.root, open_error);
    return;
  }
  if (!r->json) printf("%-18s %s %s  up\n", "zookeeper", cfg->zookeeper.connect,
                       cfg->zookeeper.root);
  json_object_set_new(r->root, "zookeeper", zk);
  pc_error_t err;
  pc_coord_node_t *v = NULL;
  size_t n = 0;
  json_t *arr = json_array();
  if (pc_coord_list(coord, "clients", STATUS_TIMEOUT_MS, &v, &n, &err) == PC_OK) {
    if (!r->json) printf("%-18s %zu live\n", "clients", n);
    for (size_t i = 0; i < n; i++) {
      uint64_t oldest;
      int reported;
      const char *who;
      client_fields(v[i].data, &oldest, &reported, &who);
      if (!r->json) {
        printf("  client %s  %s", v[i].name, who);
        if (reported) printf("  oldest_start_ts=%llu", (unsigned long long)oldest);
        else printf("  no open transaction");
        putchar('\n');
      }
      json_t *o = json_object();
      json_object_set_new(o, "session", json_string(v[i].name));
      json_object_set_new(o, "process", json_string(who));
      if (reported) fmt_json_u64(o, "oldest_start_ts", oldest);
      json_array_append_new(arr, o);
    }
    free(v);
  } else {
    r->down++;
    if (!r->json) printf("%-18s (cannot read: %s)\n", "clients", err.text);
  }
  json_object_set_new(r->root, "clients", arr);
  arr = json_array();
  if (pc_coord_list(coord, "workers", STATUS_TIMEOUT_MS, &v, &n, &err) == PC_OK) {
    if (!r->json) printf("%-18s %zu registered\n", "members", n);
    for (size_t i = 0; i < n; i++) {
      /* its share among the members of its group (those running the same
       * observers; the names are sorted, so a group's are contiguous) */
      char group[64] = "", g[64];
      uint32_t index = 0, count = 0, lo = 0, hi = 0;
      pc_member_group(v[i].name, group, sizeof group);
      for (size_t k = 0; k < n; k++) {
        if (!pc_member_group(v[k].name, g, sizeof g) || strcmp(g, group) != 0) continue;
        if (k < i) index++;
        count++;
      }
      if (count) pc_member_buckets(index, count, PC_NOTIFY_BUCKETS, &lo, &hi);
      char who[256];
      snprintf(who, sizeof who, "%s", v[i].data);
      char *sp = strchr(who, ' '); /* the process, without the member's token */
      if (sp) *sp = '\0';
      if (!r->json) printf("  member %s  %s  buckets [%u, %u)\n", v[i].name, who, lo, hi);
      json_t *o = json_object();
      json_object_set_new(o, "node", json_string(v[i].name));
      json_object_set_new(o, "group", json_string(group));
      json_object_set_new(o, "process", json_string(who));
      json_object_set_new(o, "buckets", json_pack("[i, i]", (json_int_t)lo, (json_int_t)hi));
      json_array_append_new(arr, o);
    }
    free(v);
  } else {
    r->down++;
    if (!r->json) printf("%-18s (cannot read: %s)\n", "members", err.text);
  }
  json_object_set_new(r->root, "members", arr);
  uint64_t safe = 0;
  if (pc_coord_safe_point(coord, STATUS_TIMEOUT_MS, &safe, &err) == PC_OK) {
    if (!r->json) {
      if (safe) printf("%-18s %llu\n", "safe point", (unsigned long long)safe);
      else printf("%-18s none published yet\n", "safe point");
    }
    fmt_json_u64(r->root, "safe_point", safe);
  } else {
    r->down++;
    if (!r->json) printf("%-18s (cannot read: %s)\n", "safe point", err.text);
  }
}


/* A tablet's served operations and its garbage collection, from its INFO,
 * into o ("ops", "gc"). */
static void tablet_counts_json(json_t *o, uint64_t ops, const pc_tablet_gc_t *gc) {
  fmt_json_u64(o, "ops", ops);
  json_t *g = json_object();
  fmt_json_u64(g, "passes", gc->passes);
  fmt_json_u64(g, "safe_point", gc->safe_point);
  fmt_json_u64(g, "versions_deleted", gc->deleted.versions);
  fmt_json_u64(g, "rollbacks_deleted", gc->deleted.rollbacks);
  fmt_json_u64(g, "data_deleted", gc->deleted.data);
  json_object_set_new(o, "gc", g);
}
/* Where tablet t is served: with "zookeeper", by its owner in the tablet
 * map (PC_UNAVAILABLE "no live server" when it has none), else at its
 * configured listen. *owned = 1 when ZooKeeper named it. */
static pc_status_t tablet_endpoint(const pc_config_t *cfg, pc_coord_t *coord,
                                   const pc_config_tablet_t *t, pc_endpoint_t *ep, int *owned,
                                   pc_error_t *err) {
  *ep = t->listen;
  *owned = 0;
  if (!cfg->zookeeper.set) return PC_OK;
  if (!coord) return pc_error_set(err, PC_UNAVAILABLE, "no ZooKeeper session to find its server");
  char owner[300];
  pc_status_t st =
      pc_coord_tablet_owner(coord, t->name, 0, STATUS_TIMEOUT_MS, owner, sizeof owner, NULL, err);
  if (st != PC_OK) return st;
  if (!owner[0]) {
    ep->port = 0;
    return pc_error_set(err, PC_UNAVAILABLE, "no live server");
  }
  st = pc_parse_endpoint(owner, 0, ep->host, sizeof ep->host, &ep->port, err);
  *owned = st == PC_OK;
  return st;
}

static void report_tablets(report_t *r, const pc_config_t *cfg, pc_coord_t *coord) {
  json_t *arr = json_array();
  for (size_t i = 0; i < cfg->ntablets; i++) {
    const pc_config_tablet_t *t = &cfg->tablets[i];
    pc_error_t err;
    pc_error_clear(&err);
    pc_endpoint_t ep;
    int owned;
    pc_status_t st = tablet_endpoint(cfg, coord, t, &ep, &owned, &err);
    pc_rpc_client_t *c =
        st == PC_OK ? pc_config_rpc_client(cfg, ep.host, ep.port, &err) : NULL;
    pc_buf_t name = {0};
    uint64_t ops = 0;
    pc_tablet_gc_t gc = {0};
    if (st == PC_OK)
      st = c ? pc_tablet_remote_info(c, STATUS_TIMEOUT_MS, &name, &ops, &gc, &err) : err.code;
    if (c) pc_rpc_client_destroy(c);
    const char *e = st == PC_OK ? NULL : err.text;
    r->down += st != PC_OK;
    char what[96];
    snprintf(what, sizeof what, "tablet %s", t->name);
    if (!r->json && cfg->zookeeper.set && !owned) {
      printf("%-18s %-13s %-5s ", what, "(no owner)", "down");
    } else if (!r->json) {
      line(r, what, &ep, e ? "" : NULL); /* the error follows the range */
    }
    if (!r->json) {
      fputs("rows [", stdout);
      print_range(stdout, t->start, t->start_len, "\"\"");
      fputs(", ", stdout);
      print_range(stdout, t->end, t->end_len, "end");
      fputs(")", stdout);
      if (!e)
        printf(" ops=%llu gc: passes=%llu safe_point=%llu versions_deleted=%llu",
               (unsigned long long)ops, (unsigned long long)gc.passes,
               (unsigned long long)gc.safe_point, (unsigned long long)gc.deleted.versions);
      else printf("  %s", e);
      putchar('\n');
    }
    json_t *o = endpoint_obj(&ep, e);
    json_object_set_new(o, "name", json_string(t->name));
    if (cfg->zookeeper.set) { /* the server holding it in the tablet map, or null */
      char addr[PC_HOST_MAX + 16];
      snprintf(addr, sizeof addr, strchr(ep.host, ':') ? "[%s]:%u" : "%s:%u", ep.host,
               (unsigned)ep.port);
      json_object_set_new(o, "owner", owned ? json_string(addr) : json_null());
    }
    fmt_json_bytes(o, "start", t->start, t->start_len);
    fmt_json_bytes(o, "end", t->end, t->end_len);
    if (!e) tablet_counts_json(o, ops, &gc);
    json_array_append_new(arr, o);
    pc_buf_free(&name);
  }
  json_object_set_new(r->root, "tablets", arr);
}

/* A replicated cluster's servers, then each tablet's group: its leader
 * (asked INFO in the ROUTED envelope, since a server holds several
 * tablets), its replicas with their role, state and lag behind the leader
 * (the leader's view), and whether fewer voting replicas are up than the
 * configuration lists. */
static void report_replicated(report_t *r, const pc_config_t *cfg, pc_coord_t *coord) {
  cli_rview_t v;
  pc_error_t err;
  if (cli_rview_load(cfg, coord, STATUS_TIMEOUT_MS, &v, &err) != PC_OK) {
    cli_rview_free(&v);
    r->down++;
    if (!r->json) printf("%-18s (cannot read them: %s)\n", "servers", err.text);
    return;
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < v.nservers; i++) {
    const cli_rserver_t *s = &v.servers[i];
    r->down += !s->up;
    json_array_append_new(arr, cli_rserver_json(s));
    if (r->json) continue;
    char what[96];
    snprintf(what, sizeof what, "server %s", s->name);
    printf("%-18s %-21s %-5s ", what, s->addr[0] ? s->addr : "(unknown)", s->up ? "up" : "down");
    if (s->up) printf("%zu replica%s%s\n", s->nreps, s->nreps == 1 ? "" : "s",
                      s->configured ? "" : " (not in the configuration's \"servers\")");
    else printf("%s\n", s->error);
  }
  json_object_set_new(r->root, "servers", arr);
  arr = json_array();
  for (size_t i = 0; i < v.ntablets; i++) {
    const cli_rtablet_t *t = &v.tablets[i];
    const pc_config_tablet_t *ct = t->cfg;
    pc_buf_t name = {0};
    uint64_t ops = 0;
    pc_tablet_gc_t gc = {0};
    pc_status_t st = PC_UNAVAILABLE;
    pc_error_clear(&err);
    if (t->leader) {
      char host[300];
      uint16_t port;
      st = pc_parse_endpoint(t->leader_server->addr, 0, host, sizeof host, &port, &err);
      pc_rpc_client_t *c = st == PC_OK ? pc_config_rpc_client(cfg, host, port, &err) : NULL;
      if (st == PC_OK)
        st = c ? pc_tablet_remote_info_of(c, ct->name, STATUS_TIMEOUT_MS, &name, &ops, &gc, &err)
               : err.code;
      pc_rpc_client_destroy(c);
    } else {
      pc_error_set(&err, PC_UNAVAILABLE, "no replica leads it: %zu of %zu voting replicas up (a "
                   "majority is %zu)", t->voters_up, t->voters, cli_majority(t->voters));
    }
    const char *e = st == PC_OK ? NULL : err.text;
    r->down += st != PC_OK;
    if (!r->json) {
      char what[96];
      snprintf(what, sizeof what, "tablet %s", ct->name);
      printf("%-18s %-21s %-5s rows [", what, t->leader ? t->leader_server->addr : "(no leader)",
             e ? "down" : "up");
      print_range(stdout, ct->start, ct->start_len, "\"\"");
      fputs(", ", stdout);
      print_range(stdout, ct->end, ct->end_len, "end");
      fputs(")", stdout);
      if (t->leader) printf(" leader %s term %llu", t->leader_server->name,
                            (unsigned long long)t->leader->term);
      if (!e)
        printf(" ops=%llu gc: passes=%llu safe_point=%llu versions_deleted=%llu",
               (unsigned long long)ops, (unsigned long long)gc.passes,
               (unsigned long long)gc.safe_point, (unsigned long long)gc.deleted.versions);
      else printf("  %s", e);
      putchar('\n');
      for (size_t k = 0; k < t->nreps; k++) {
        const cli_rreplica_t *x = &t->reps[k];
        char who[96];
        snprintf(who, sizeof who, "replica %s", x->server);
        printf("  %-16s %-12s %-5s", who, cli_role_name(x->role), x->up ? "up" : "down");
        if (x->info)
          printf(" term=%llu applied=%llu commit=%llu", (unsigned long long)x->info->term,
                 (unsigned long long)x->info->applied, (unsigned long long)x->info->commit);
        if (x->have_lag) {
          printf(" lag=%llu", (unsigned long long)x->lag);
          if (x->role != CLI_ROLE_LEADER && x->silent_ms == UINT64_MAX)
            printf(" (not heard from)");
          else if (x->role != CLI_ROLE_LEADER && x->silent_ms >= 1000)
            printf(" (not heard from for %.1f s)", (double)x->silent_ms / 1000.0);
          if (x->lagging && x->up) printf(" LAGGING");
        }
        if (x->role == CLI_ROLE_OUTSIDE) printf(" (%s: outside the group's configuration)", x->address);
        putchar('\n');
      }
      if (t->under)
        printf("  UNDER-REPLICATED: %zu of %zu configured voting replicas up ('percolator "
               "doctor' says what to do)\n", t->voters_up, t->configured);
    }
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(ct->name));
    json_object_set_new(o, "listen", t->leader ? json_string(t->leader_server->addr) : json_null());
    json_object_set_new(o, "up", json_boolean(e == NULL));
    if (e) json_object_set_new(o, "error", json_string(e));
    json_object_set_new(o, "owner", t->owner[0] ? json_string(t->owner) : json_null());
    fmt_json_bytes(o, "start", ct->start, ct->start_len);
    fmt_json_bytes(o, "end", ct->end, ct->end_len);
    if (!e) tablet_counts_json(o, ops, &gc);
    cli_rtablet_json(t, o);
    json_array_append_new(arr, o);
    pc_buf_free(&name);
  }
  json_object_set_new(r->root, "tablets", arr);
  cli_rview_free(&v);
}

typedef struct pending_out {
  report_t *r;
  json_t *arr;
} pending_out_t;

static int print_pending(void *ctx, const char *table, const char *col, size_t clen,
                         uint64_t count) {
  pending_out_t *p = ctx;
  col_pending_t *v = realloc(p->r->pending, (p->r->npending + 1) * sizeof *v);
  if (v) {
    p->r->pending = v;
    col_pending_t *e = &v[p->r->npending];
    e->table = strdup(table);
    e->col = malloc(clen ? clen : 1);
    e->clen = clen;
    e->count = count;
    if (e->table && e->col) {
      memcpy(e->col, col, clen);
      p->r->npending++;
    } else {
      free(e->table);
      free(e->col);
    }
  }
  if (!p->r->json) {
    printf("pending          %llu in %s ", (unsigned long long)count, table);
    fmt_escape(stdout, col, clen, 0);
    putchar('\n');
  }
  json_t *o = json_object();
  json_object_set_new(o, "table", json_string(table));
  fmt_json_bytes(o, "column", col, clen);
  fmt_json_u64(o, "count", count);
  json_array_append_new(p->arr, o);
  return 0;
}

/* Pending notifications per observed column and parked ones, through db. */
static void report_notifications(report_t *r, pc_db_t *db) {
  pending_out_t p = {r, json_array()};
  uint64_t total = 0;
  pc_error_t err;
  pc_status_t st = pc_notify_pending(db, &total, print_pending, &p, &err);
  json_t *n = json_object();
  if (st != PC_OK) {
    r->failed = 1;
    if (!r->json) printf("notifications    (cannot count: %s)\n", err.text);
    json_object_set_new(n, "error", json_string(err.text));
  } else if (!r->json) {
    printf("notifications    %llu pending\n", (unsigned long long)total);
  }
  fmt_json_u64(n, "pending", total);
  json_object_set_new(n, "columns", p.arr);
  json_object_set_new(r->root, "notifications", n);
}

static int count_parked(void *ctx, const pc_parked_t *p) {
  (void)p;
  (*(uint64_t *)ctx)++;
  return 0;
}

static void report_parked(report_t *r, pc_db_t *db) {
  uint64_t n = 0;
  pc_error_t err;
  if (pc_worker_failures(db, count_parked, &n, &err) != PC_OK) return;
  if (!r->json) printf("parked           %llu ('percolator failures' lists them)\n",
                       (unsigned long long)n);
  fmt_json_u64(r->root, "parked", n);
}

/* The pending count of (table, col), 0 when none was counted. */
static uint64_t pending_of(const report_t *r, const char *table, const char *col, size_t clen) {
  for (size_t i = 0; i < r->npending; i++)
    if (strcmp(r->pending[i].table, table) == 0 && r->pending[i].clen == clen &&
        memcmp(r->pending[i].col, col, clen) == 0)
      return r->pending[i].count;
  return 0;
}

typedef struct obs_report {
  report_t *r;
  json_t *sums, *runners; /* observer -> counters; observer -> [live workers] */
  size_t unrun;
} obs_report_t;

/* The counters object of observer name in sums, made when missing (runs
 * first, so that it reads the same with or without a live worker). */
static json_t *counters_of(json_t *sums, const char *name) {
  json_t *c = json_object_get(sums, name);
  if (!c) {
    json_object_set_new(sums, name, c = json_object());
    static const char *const keys[] = {"runs", "skipped", "conflicts", "failures", "parked"};
    for (size_t i = 0; i < 5; i++) json_object_set_new(c, keys[i], json_integer(0));
  }
  return c;
}

static void print_counters(json_t *c) {
  printf("runs=%lld skipped=%lld conflicts=%lld failures=%lld parked=%lld\n",
         (long long)json_integer_value(json_object_get(c, "runs")),
         (long long)json_integer_value(json_object_get(c, "skipped")),
         (long long)json_integer_value(json_object_get(c, "conflicts")),
         (long long)json_integer_value(json_object_get(c, "failures")),
         (long long)json_integer_value(json_object_get(c, "parked")));
}

/* One registered observer: its definition, state, live workers and pending
 * count, flagged when no live worker runs it (its notifications then wait). */
static int report_observer(void *ctx, const pc_observer_info_t *o) {
  obs_report_t *x = ctx;
  report_t *r = x->r;
  char name[PC_MAX_OBSERVER_NAME + 1];
  if (o->problem) {
    char *n = fmt_escape_str(o->name, o->name_len, 0);
    if (!r->json)
      printf("observer         %s: malformed record (%s): passed over ('percolator observers "
             "remove %s' removes it)\n",
             n ? n : "?", o->problem, n ? n : "NAME");
    json_t *bad = json_object_get(r->root, "malformed_observers");
    if (!bad) json_object_set_new(r->root, "malformed_observers", bad = json_array());
    json_array_append_new(bad, json_string(n ? n : "?"));
    free(n);
    return 0;
  }
  snprintf(name, sizeof name, "%.*s", (int)o->name_len, o->name);
  json_t *c = counters_of(x->sums, name), *w = json_object_get(x->runners, name);
  size_t nw = w ? json_array_size(w) : 0;
  uint64_t pending = pending_of(r, o->table, o->col, o->clen);
  const char *state = o->state == PC_BACKFILL_REGISTERING ? "registering"
                      : o->state == PC_BACKFILL_RUNNING   ? "backfill"
                                                          : "ready";
  json_object_set_new(c, "table", json_string(o->table));
  fmt_json_bytes(c, "column", o->col, o->clen);
  json_object_set_new(c, "kind", json_string(o->kind == 1 ? "weak" : "strong"));
  json_object_set_new(c, "state", json_string(state));
  fmt_json_u64(c, "presented", o->presented);
  json_object_set_new(c, "workers", w ? json_incref(w) : json_array());
  fmt_json_u64(c, "pending", pending);
  json_object_set_new(c, "run_by_no_live_worker", json_boolean(nw == 0));
  x->unrun += nw == 0;
  if (!r->json) {
    printf("observer         %s %s ", name, o->table);
    fmt_escape(stdout, o->col, o->clen, 0);
    printf(" %s %s", o->kind == 1 ? "weak" : "strong", state);
    if (o->state == PC_BACKFILL_RUNNING)
      printf(" (%llu cells presented)", (unsigned long long)o->presented);
    printf(" pending=%llu", (unsigned long long)pending);
    if (nw == 0) {
      printf(" NO LIVE WORKER RUNS IT: its column's notifications wait for one\n");
    } else {
      printf(" workers=%zu", nw);
      size_t i;
      json_t *e;
      json_array_foreach(w, i, e) printf("%s%s", i ? "," : " (", json_string_value(e));
      printf(") ");
      print_counters(c);
    }
  }
  json_object_set_new(c, "registered", json_true());
  return 0;
}

/* Adds one observer's totals (over every worker that ran it, live or dead)
 * to the object sums. */
static int add_totals(void *ctx, const pc_observer_stats_t *t) {
  json_t *c = counters_of(ctx, t->name);
  fmt_json_u64(c, "runs", t->runs);
  fmt_json_u64(c, "skipped", t->skipped);
  fmt_json_u64(c, "conflicts", t->conflicts);
  fmt_json_u64(c, "failures", t->failures);
  fmt_json_u64(c, "parked", t->parked);
  return 0;
}

/* Live workers (their records in the system table, written every second by
 * `percolator worker`; live: younger than 3 s), each registered observer
 * with the live workers that run it and its column's pending count (flagged
 * when no live worker runs it), and each observer's counters summed over
 * every worker that ran it, live or dead (pc_worker_totals). */
static void report_workers(report_t *r, pc_db_t *db) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  pc_scan_t *sc = t ? pc_txn_scan(t, PC_SYSTEM_TABLE, "worker/", 7, "worker0", 7, &err) : NULL;
  if (!sc) {
    pc_txn_destroy(t);
    return;
  }
  json_t *live = json_array(), *sums = json_object(), *runners = json_object();
  uint64_t now = pc_now_wall_ms();
  size_t rl, vl;
  while (pc_scan_next(sc, &err) == PC_OK) {
    const char *row = pc_scan_row(sc, &rl), *val = pc_scan_value(sc, &vl);
    json_t *st = json_loadb(val, vl, 0, NULL);
    json_int_t seen = json_integer_value(json_object_get(st, "seen_ms"));
    if (st && seen > 0 && now - (uint64_t)seen < 3000) {
      json_t *wname = json_stringn(row + 7, rl - 7);
      json_array_append(live, wname);
      const char *name;
      json_t *c;
      json_object_foreach(json_object_get(st, "observers"), name, c) {
        json_t *ws = json_object_get(runners, name);
        if (!ws) json_object_set_new(runners, name, ws = json_array());
        json_array_append(ws, wname);
      }
      json_decref(wname);
    }
    json_decref(st);
  }
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  (void)pc_worker_totals(db, add_totals, sums, &err); /* none read: none shown */
  if (!r->json) {
    printf("workers          %zu live", json_array_size(live));
    size_t i;
    json_t *w;
    json_array_foreach(live, i, w) printf("%s%s", i ? ", " : ": ", json_string_value(w));
    putchar('\n');
  }
  obs_report_t x = {r, sums, runners, 0};
  if (pc_db_observers(db, report_observer, &x, &err) != PC_OK && !r->json)
    printf("observers        (cannot list them: %s)\n", err.text);
  /* observers that the store no longer registers (retired), whose counters
   * remain, or that a live worker still runs */
  const char *name;
  json_t *c;
  json_object_foreach(sums, name, c) {
    if (json_object_get(c, "registered")) continue;
    json_object_set_new(c, "registered", json_false());
    if (!r->json) {
      printf("observer         %s (not registered%s) ", name,
             json_object_get(runners, name) ? ", run by a live worker" : "");
      print_counters(c);
    }
  }
  fmt_json_u64(r->root, "observers_run_by_no_live_worker", x.unrun);
  json_object_set_new(r->root, "workers", live);
  json_object_set_new(r->root, "observers", sums);
  json_decref(runners);
}

static int run_status(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option longopts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
  int c, code, json = 0;
  while ((c = cli_getopt(ctx, argc, argv, "j", longopts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == 'j') json = 1;
    else return cli_usage_error(ctx, "unexpected option");
  }
  if (optind != argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  if (ctx->timeout_ms) status_timeout_ms = ctx->timeout_ms;
  report_t r = {json, json_object(), 0, 0, NULL, 0};
  pc_error_t err;
  pc_config_t *cfg = ctx->config ? pc_config_load(ctx->config, &err) : NULL;
  if (ctx->config && !cfg) {
    json_decref(r.root);
    return cli_pc_error(ctx, &err);
  }
  if (!cfg || cfg->ntablets == 0) {
    /* embedded: open it, which also proves nobody else holds it */
    pc_db_t *db = cli_open_db(ctx, 0);
    if (!db) {
      json_decref(r.root);
      pc_config_free(cfg);
      return CLI_EXIT_ERROR;
    }
    const char *dir = cfg ? cfg->data_dir : ctx->data_dir;
    uint64_t ts = 0;
    pc_db_timestamp(db, 1000, &ts, NULL);
    if (!json) printf("embedded store   %s\nsession          %016llx\ntimestamp        %llu\n", dir,
                      (unsigned long long)pc_db_session(db), (unsigned long long)ts);
    json_object_set_new(r.root, "mode", json_string("embedded"));
    json_object_set_new(r.root, "data_dir", json_string(dir));
    fmt_json_u64(r.root, "timestamp", ts);
    report_notifications(&r, db);
    report_parked(&r, db);
    report_workers(&r, db);
    pc_db_close(db);
  } else {
    json_object_set_new(r.root, "mode", json_string(cfg->served ? "served" : "cluster"));
    if (cfg->zookeeper.set) {
      /* one session, without a client node: status is not a client */
      pc_zk_options_t zo = pc_config_zk(cfg);
      pc_coord_t *coord = pc_coord_open(&zo, 0, STATUS_TIMEOUT_MS, &err);
      report_tso_elected(&r, coord, cfg);
      report_coordination(&r, coord, cfg, coord ? NULL : err.text);
      if (cfg->nservers) report_replicated(&r, cfg, coord);
      else report_tablets(&r, cfg, coord); /* each one's server from the tablet map */
      pc_coord_close(coord);
    } else {
      if (cfg->tso.set && cfg->tso.listen.set) report_tso(&r, cfg);
      report_tablets(&r, cfg, NULL);
    }
    if (!r.down) { /* every daemon answered: count the notifications through them */
      pc_db_t *db = pc_db_open_config_timeout(ctx->config, 0, ctx->timeout_ms, &err);
      if (db) {
        report_notifications(&r, db);
        report_parked(&r, db);
        report_workers(&r, db);
        pc_db_close(db);
      }
    }
  }
  if (json) fmt_json_line(stdout, r.root);
  else json_decref(r.root);
  for (size_t i = 0; i < r.npending; i++) {
    free(r.pending[i].table);
    free(r.pending[i].col);
  }
  free(r.pending);
  pc_config_free(cfg);
  code = cli_finish_output(ctx);
  if (code != CLI_EXIT_OK) return code;
  if (r.down)
    return cli_error(ctx, "%d daemon%s down (see the report)", r.down, r.down == 1 ? "" : "s");
  if (r.failed) return cli_error(ctx, "the notifications could not be counted (see the report)");
  return CLI_EXIT_OK;
}

const cli_verb_t cli_verb_status = {
    .name = "status",
    .summary = "show the cluster's daemons, or the embedded store",
    .run = run_status,
    .args = "[--json]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about = "Asks the elected oracle and every tablet of the configuration for their\n"
             "state: the leader, its last timestamp and the standbys in election order,\n"
             "row ranges, operations served and garbage collection; and reads what the\n"
             "cluster keeps in ZooKeeper: the live clients with the oldest start\n"
             "timestamp each holds open, the registered workers with the share of the\n"
             "notification buckets each takes once the membership is stable, and the\n"
             "published garbage-collection safe point. Without a cluster configuration,\n"
             "shows the embedded store. Then counts the pending notifications per\n"
             "observed column and the parked ones, lists the live workers, shows each\n"
             "registered observer with its state (registering, backfill, ready), the\n"
             "live workers that run it and its column's pending count — flagging one\n"
             "that no live worker runs, whose column's notifications then wait — and\n"
             "sums each observer's runs, skips, conflicts, failures and parked\n"
             "notifications over every worker that ran it, live or dead (each worker\n"
             "also serves its own on workers.http /metrics, with the latency histogram).\n"
             "\n"
             "In a replicated cluster (\"servers\" in the configuration) it asks every\n"
             "server for its replicas and shows each server (up or down), and each\n"
             "tablet's leader (server and address) and replicas: role (leader, follower,\n"
             "standby, spare, or not a member: a removed replica its server still\n"
             "holds), whether its server is up, term, applied and commit index, and how\n"
             "many log entries it lags the leader (the leader's view: its last index\n"
             "minus the replica's match index; LAGGING from 1024 entries, or when the\n"
             "leader has not heard from it for an election timeout); UNDER-REPLICATED\n"
             "when fewer voting replicas are up than the tablet's \"replicas\" lists\n"
             "('percolator doctor' says what to do). --json has the same: \"servers\":\n"
             "[{\"name\", \"listen\", \"up\", ...}], and in each of \"tablets\" \"leader\":\n"
             "{\"server\", \"address\", \"term\"} (null: none), \"replicas\": [{\"server\",\n"
             "\"role\", \"up\", \"term\", \"applied\", \"commit\", \"lag\", \"lagging\", ...}],\n"
             "\"voters_up\", \"configured_replicas\", \"under_replicated\".\n"
             "Exits 0 when every daemon answered, 3 when any is down (a server, or a\n"
             "tablet without a leader).\n",
    .options = "  -j, --json          one JSON object\n",
    .example = "percolator --config cluster.json status\n",
};
