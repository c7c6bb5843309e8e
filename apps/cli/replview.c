/* replview.c — the view of a replicated cluster that `percolator status`,
 * `doctor` and `tablet ...` share (replview.h): every server asked for the
 * replicas it holds (REPLICAS, which needs the system identity), each
 * tablet's group assembled from those answers with its leader's view as
 * the authority, and ZooKeeper's owner node of each tablet read beside it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/cli/replview.h"
#include "base/error.h"
#include "net/rpc.h"
#include "replica/repl_client.h"
#include "tablet/tablet.h"

const char *cli_role_name(int role) {
  switch (role) {
    case CLI_ROLE_LEADER: return "leader";
    case CLI_ROLE_FOLLOWER: return "follower";
    case CLI_ROLE_STANDBY: return "standby";
    case CLI_ROLE_SPARE: return "spare";
    default: return "not a member";
  }
}

static const char *state_name(uint8_t s) {
  switch (s) {
    case RAFT_FOLLOWER: return "follower";
    case RAFT_CANDIDATE: return "candidate";
    case RAFT_LEADER: return "leader";
    default: return "unavailable";
  }
}

pc_status_t cli_owner_read(pc_coord_t *coord, const char *tablet, uint32_t timeout_ms, char *addr,
                           size_t acap, char *server, size_t scap, uint64_t *term,
                           pc_error_t *err) {
  addr[0] = '\0';
  if (server && scap) server[0] = '\0';
  if (term) *term = 0;
  char rel[160];
  if (snprintf(rel, sizeof rel, "tablets/%s/owner", tablet) >= (int)sizeof rel)
    return pc_error_set(err, PC_INVALID, "tablet name too long: %s", tablet);
  pc_zk_t *zk = pc_coord_acquire(coord);
  char *data = NULL;
  size_t len = 0;
  pc_status_t st = zk ? pc_zk_sync(zk, "tablets", timeout_ms, err)
                      : pc_error_set(err, PC_UNAVAILABLE, "no ZooKeeper session");
  if (st == PC_OK || st == PC_NOT_FOUND)
    st = pc_zk_get(zk, rel, NULL, &data, &len, NULL, timeout_ms, err);
  pc_coord_release(coord);
  if (st == PC_NOT_FOUND) return PC_OK; /* no live leader */
  if (st != PC_OK) return st;
  /* "<host:port> <session> <identity>" */
  const char *sp = strchr(data, ' ');
  snprintf(addr, acap, "%.*s", (int)(sp ? sp - data : (long)len), data);
  const char *id = sp ? strchr(sp + 1, ' ') : NULL;
  if (id && strncmp(id + 1, "raft:", 5) == 0) {
    const char *name = id + 6, *colon = strrchr(name, ':');
    if (colon && server) snprintf(server, scap, "%.*s", (int)(colon - name), name);
    if (colon && term) *term = strtoull(colon + 1, NULL, 10);
  }
  free(data);
  return PC_OK;
}

/* ---- the servers ----------------------------------------------------------------- */

static cli_rserver_t *find_server(cli_rview_t *v, const char *name) {
  for (size_t i = 0; i < v->nservers; i++)
    if (strcmp(v->servers[i].name, name) == 0) return &v->servers[i];
  return NULL;
}

const cli_rserver_t *cli_rview_server(const cli_rview_t *v, const char *name) {
  return find_server((cli_rview_t *)v, name);
}

/* Where s serves: ZooKeeper's servers/<name>/live, else its configured
 * listen (when it names a port and a host to reach). */
static void locate(cli_rserver_t *s, const pc_config_t *cfg, pc_coord_t *coord,
                   uint32_t timeout_ms) {
  pc_error_t err;
  if (coord && pc_coord_server_addr(coord, s->name, timeout_ms, s->addr, sizeof s->addr, &err) ==
                   PC_OK) {
    s->live = 1;
    return;
  }
  s->addr[0] = '\0';
  for (size_t i = 0; i < cfg->nservers; i++) {
    const pc_config_server_t *c = &cfg->servers[i];
    if (strcmp(c->name, s->name) != 0) continue;
    if (c->listen.port && strcmp(c->listen.host, "0.0.0.0") != 0 &&
        strcmp(c->listen.host, "::") != 0)
      snprintf(s->addr, sizeof s->addr, strchr(c->listen.host, ':') ? "[%s]:%u" : "%s:%u",
               c->listen.host, (unsigned)c->listen.port);
  }
  if (!s->addr[0])
    snprintf(s->error, sizeof s->error, "not running (no servers/%s/live in ZooKeeper)", s->name);
}

/* Asks s for its replicas; a server that refuses connections fails at once. */
static void ask(cli_rserver_t *s, const pc_config_t *cfg, uint32_t timeout_ms) {
  if (!s->addr[0]) return;
  pc_error_t err;
  char host[300];
  uint16_t port = 0;
  pc_rpc_auth_t auth;
  pc_rpc_client_t *c = NULL;
  pc_status_t st = pc_parse_endpoint(s->addr, 0, host, sizeof host, &port, &err);
  if (st == PC_OK) st = pc_config_auth(cfg, &auth, &err);
  if (st == PC_OK) {
    pc_rpc_client_options_t o = {.fail_on_refusal = 1};
    c = pc_rpc_client_create_opts(host, port, &auth, &o, &err);
    pc_config_auth_release(&auth);
    if (!c) st = err.code;
  }
  if (st == PC_OK) st = pc_repl_remote_replicas(c, timeout_ms, &s->reps, &s->nreps, &err);
  pc_rpc_client_destroy(c);
  s->up = st == PC_OK;
  if (st != PC_OK) snprintf(s->error, sizeof s->error, "%s", err.text);
}

static int add_server(cli_rview_t *v, size_t *cap, const char *name, int configured) {
  if (find_server(v, name)) return 0;
  if (v->nservers == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    cli_rserver_t *n = realloc(v->servers, nc * sizeof *n);
    if (!n) return -1;
    v->servers = n;
    *cap = nc;
  }
  cli_rserver_t *s = &v->servers[v->nservers++];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->configured = configured;
  return 0;
}

/* ---- the tablets ------------------------------------------------------------------- */

const cli_rtablet_t *cli_rview_tablet(const cli_rview_t *v, const char *name) {
  for (size_t i = 0; i < v->ntablets; i++)
    if (strcmp(v->tablets[i].cfg->name, name) == 0) return &v->tablets[i];
  return NULL;
}

const cli_rreplica_t *cli_rtablet_replica(const cli_rtablet_t *t, const char *server) {
  for (size_t i = 0; i < t->nreps; i++)
    if (t->reps[i].role != CLI_ROLE_OUTSIDE && strcmp(t->reps[i].server, server) == 0)
      return &t->reps[i];
  return NULL;
}

void cli_rtablet_voters(const cli_rtablet_t *t, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < t->nreps && used < cap; i++) {
    if (t->reps[i].role != CLI_ROLE_LEADER && t->reps[i].role != CLI_ROLE_FOLLOWER) continue;
    int k = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", t->reps[i].server);
    if (k > 0) used += (size_t)k;
  }
}

/* The replica of group held by server s with id, NULL when none. */
static const pc_replica_info_t *held(const cli_rserver_t *s, const char *group, uint64_t id) {
  for (size_t i = 0; s && s->up && i < s->nreps; i++)
    if (strcmp(s->reps[i].group, group) == 0 && (!id || s->reps[i].id == id)) return &s->reps[i];
  return NULL;
}

static int later(const pc_replica_info_t *a, const pc_replica_info_t *b) {
  return !b || a->term > b->term || (a->term == b->term && a->last_index > b->last_index);
}

static pc_status_t build_tablet(cli_rview_t *v, cli_rtablet_t *t, pc_error_t *err) {
  const char *g = t->cfg->name;
  t->configured = t->cfg->nreplicas;
  /* the leader: a replica that says it leads, in the highest term (a
   * deposed leader that has not heard of its successor says so too) */
  for (size_t i = 0; i < v->nservers; i++) {
    const cli_rserver_t *s = &v->servers[i];
    for (size_t k = 0; s->up && k < s->nreps; k++) {
      const pc_replica_info_t *r = &s->reps[k];
      if (strcmp(r->group, g) != 0) continue;
      if (r->state == RAFT_LEADER &&
          (!t->leader || r->term > t->leader->term ||
           (r->term == t->leader->term && r->ready && !t->leader->ready))) {
        t->leader = r;
        t->leader_server = s;
      }
      if (later(r, t->view)) t->view = r;
    }
  }
  if (t->leader) t->view = t->leader;
  size_t cap = (t->view ? t->view->n : 0) + 4, n = 0;
  cli_rreplica_t *reps = calloc(cap, sizeof *reps);
  if (!reps) return pc_error_set(err, PC_NOMEM, "out of memory");
  for (uint32_t k = 0; t->view && k < t->view->n; k++) {
    const struct pc_replica_member *m = &t->view->members[k];
    cli_rreplica_t *r = &reps[n++];
    snprintf(r->address, sizeof r->address, "%s", m->address);
    if (pc_repl_address_server(m->address, r->server, sizeof r->server) != 0)
      snprintf(r->server, sizeof r->server, "%.*s", (int)(sizeof r->server - 1), m->address);
    r->id = m->id;
    r->role = m->role == RAFT_STANDBY ? CLI_ROLE_STANDBY
              : m->role == RAFT_SPARE ? CLI_ROLE_SPARE
              : t->leader && m->id == t->leader->id ? CLI_ROLE_LEADER
                                                    : CLI_ROLE_FOLLOWER;
    r->info = held(find_server(v, r->server), g, m->id);
    r->up = r->info != NULL;
    if (t->leader) {
      r->have_lag = 1;
      r->match = m->match;
      r->lag = t->leader->last_index > m->match ? t->leader->last_index - m->match : 0;
      r->silent_ms = m->silent_ms;
      r->lagging = r->lag >= CLI_LAG_ENTRIES ||
                   (m->id != t->leader->id && m->silent_ms > v->election_timeout_ms);
    }
    if (m->role == RAFT_VOTER) {
      t->voters++;
      r->counted = r->up && !(r->have_lag && r->silent_ms > v->election_timeout_ms);
      t->voters_up += (size_t)r->counted;
    }
  }
  /* replicas held outside the configuration */
  for (size_t i = 0; i < v->nservers; i++) {
    const cli_rserver_t *s = &v->servers[i];
    for (size_t k = 0; s->up && k < s->nreps; k++) {
      const pc_replica_info_t *x = &s->reps[k];
      if (strcmp(x->group, g) != 0) continue;
      int member = 0;
      for (size_t j = 0; j < n && !member; j++) member = reps[j].id == x->id;
      if (member) continue;
      if (n == cap) {
        cli_rreplica_t *nr = realloc(reps, (cap *= 2) * sizeof *nr);
        if (!nr) {
          free(reps);
          return pc_error_set(err, PC_NOMEM, "out of memory");
        }
        reps = nr;
      }
      cli_rreplica_t *r = &reps[n++];
      memset(r, 0, sizeof *r);
      snprintf(r->server, sizeof r->server, "%s", s->name);
      snprintf(r->address, sizeof r->address, "%s", x->address);
      r->id = x->id;
      r->role = CLI_ROLE_OUTSIDE;
      r->info = x;
      r->up = 1;
    }
  }
  t->reps = reps;
  t->nreps = n;
  t->under = t->voters_up < t->configured;
  return PC_OK;
}

pc_status_t cli_rview_load(const pc_config_t *cfg, pc_coord_t *coord, uint32_t timeout_ms,
                           cli_rview_t *v, pc_error_t *err) {
  memset(v, 0, sizeof *v);
  v->election_timeout_ms = cfg->replication.election_timeout_ms;
  size_t cap = 0;
  for (size_t i = 0; i < cfg->nservers; i++)
    if (add_server(v, &cap, cfg->servers[i].name, 1) != 0)
      return pc_error_set(err, PC_NOMEM, "out of memory");
  /* the configured servers, then any other server a group names as a
   * member (a replica added on a server the file does not list) */
  for (size_t asked = 0; asked < v->nservers;) {
    size_t upto = v->nservers;
    for (size_t i = asked; i < upto; i++) {
      locate(&v->servers[i], cfg, coord, timeout_ms);
      ask(&v->servers[i], cfg, timeout_ms);
    }
    for (size_t i = asked; i < upto; i++) {
      for (size_t k = 0; k < v->servers[i].nreps; k++) {
        const pc_replica_info_t *r = &v->servers[i].reps[k];
        for (uint32_t m = 0; m < r->n; m++) {
          char name[CLI_SERVER_NAME_MAX + 1];
          if (pc_repl_address_server(r->members[m].address, name, sizeof name) == 0 &&
              add_server(v, &cap, name, 0) != 0)
            return pc_error_set(err, PC_NOMEM, "out of memory");
        }
      }
    }
    asked = upto;
  }
  if (!(v->tablets = calloc(cfg->ntablets ? cfg->ntablets : 1, sizeof *v->tablets)))
    return pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; i < cfg->ntablets; i++) {
    cli_rtablet_t *t = &v->tablets[v->ntablets++];
    t->cfg = &cfg->tablets[i];
    pc_error_t oerr;
    if (coord)
      (void)cli_owner_read(coord, t->cfg->name, timeout_ms, t->owner, sizeof t->owner,
                           t->owner_server, sizeof t->owner_server, &t->owner_term, &oerr);
    pc_status_t st = build_tablet(v, t, err);
    if (st != PC_OK) return st;
  }
  return PC_OK;
}

void cli_rview_free(cli_rview_t *v) {
  for (size_t i = 0; i < v->nservers; i++) free(v->servers[i].reps);
  free(v->servers);
  for (size_t i = 0; i < v->ntablets; i++) free(v->tablets[i].reps);
  free(v->tablets);
  memset(v, 0, sizeof *v);
}

/* ---- JSON ------------------------------------------------------------------------------ */

static void set_u64(json_t *o, const char *key, uint64_t v) {
  json_object_set_new(o, key, json_integer((json_int_t)(v > INT64_MAX ? INT64_MAX : v)));
}

json_t *cli_rserver_json(const cli_rserver_t *s) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(s->name));
  json_object_set_new(o, "listen", s->addr[0] ? json_string(s->addr) : json_null());
  json_object_set_new(o, "configured", json_boolean(s->configured));
  json_object_set_new(o, "live", json_boolean(s->live));
  json_object_set_new(o, "up", json_boolean(s->up));
  if (!s->up) json_object_set_new(o, "error", json_string(s->error));
  else set_u64(o, "replicas", s->nreps);
  return o;
}

void cli_rtablet_json(const cli_rtablet_t *t, json_t *o) {
  if (t->leader) {
    json_t *l = json_object();
    json_object_set_new(l, "server", json_string(t->leader_server->name));
    json_object_set_new(l, "address", json_string(t->leader_server->addr));
    set_u64(l, "term", t->leader->term);
    json_object_set_new(l, "serving", json_boolean(t->leader->ready));
    json_object_set_new(o, "leader", l);
  } else {
    json_object_set_new(o, "leader", json_null());
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < t->nreps; i++) {
    const cli_rreplica_t *r = &t->reps[i];
    json_t *x = json_object();
    json_object_set_new(x, "server", json_string(r->server));
    json_object_set_new(x, "replica", json_string(r->address));
    set_u64(x, "id", r->id);
    json_object_set_new(x, "role", json_string(cli_role_name(r->role)));
    json_object_set_new(x, "up", json_boolean(r->up));
    if (r->info) {
      json_object_set_new(x, "state", json_string(state_name(r->info->state)));
      set_u64(x, "term", r->info->term);
      set_u64(x, "applied", r->info->applied);
      set_u64(x, "commit", r->info->commit);
      set_u64(x, "last_index", r->info->last_index);
    }
    if (r->have_lag) {
      set_u64(x, "match", r->match);
      set_u64(x, "lag", r->lag);
      json_object_set_new(x, "silent_ms", r->silent_ms == UINT64_MAX
                                              ? json_null()
                                              : json_integer((json_int_t)r->silent_ms));
      json_object_set_new(x, "lagging", json_boolean(r->lagging));
    }
    json_array_append_new(arr, x);
  }
  json_object_set_new(o, "replicas", arr);
  set_u64(o, "voters", t->voters);
  set_u64(o, "voters_up", t->voters_up);
  set_u64(o, "configured_replicas", t->configured);
  json_object_set_new(o, "under_replicated", json_boolean(t->under));
}
