/* verb_doctor.c — `percolator doctor`: what is wrong with a data directory
 * or a cluster, said to a newcomer with what to do about it. Each check
 * prints "ok" or "PROBLEM" with the thing it is about:
 *   - an embedded data directory: it exists, is one of ours and in our
 *     format; who holds it (a worker serving it, a client, nobody) and
 *     whether that process still lives; a worker's serving.json and whether
 *     its endpoints answer;
 *   - a cluster: ZooKeeper answers within the timeout, the configured
 *     root node exists and an oracle is elected under it and answers; each
 *     role of the configuration answers; in a replicated cluster each
 *     server answers and each tablet has a leader, as many voting replicas
 *     up as the configuration lists and none lagging, and what to do
 *     otherwise (start a server, replace it, add a replica);
 *   - through the store: every registered observer has a live worker that
 *     runs it (else its column's notifications wait), pending notifications
 *     no live worker can process, parked notifications.
 * Exit 0 when nothing is wrong, 3 when a problem was found. */
#include <errno.h>
#include <leveldb/c.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/cli/replview.h"
#include "cli.h"
#include "config/config.h"
#include "core/db.h"
#include "base/error.h"
#include "daemon/daemon.h"
#include "lockservice/coord.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "notify/worker.h"
#include "tablet/tablet.h"
#include "tso/tso_client.h"
#include "tso/tso_locator.h"

typedef struct doctor {
  const cli_ctx_t *ctx;
  int json;
  int repair;     /* --repair: rebuild a damaged store */
  int store_bad;  /* the store check found damage */
  json_t *checks; /* [{"ok": bool, "what", "detail"}] */
  int problems;
  uint32_t timeout_ms;
} doctor_t;

/* One finding: ok or a problem, about what, with detail (what to do). */
static void finding(doctor_t *d, int ok, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finding(doctor_t *d, int ok, const char *what, const char *fmt, ...) {
  char detail[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  d->problems += !ok;
  if (d->json) {
    json_t *o = json_object();
    json_object_set_new(o, "ok", json_boolean(ok));
    json_object_set_new(o, "what", json_string(what));
    json_object_set_new(o, "detail", json_string(detail));
    json_array_append_new(d->checks, o);
  } else {
    printf("%-8s %s: %s\n", ok ? "ok" : "PROBLEM", what, detail);
  }
}

static int process_alive(long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

/* ---- an embedded data directory ------------------------------------------------------ */

/* Whether dir can be opened at all (reported); 0 when not. */
static int check_directory(doctor_t *d, const char *dir) {
  int fresh;
  pc_error_t err;
  if (pc_data_dir_prepare(dir, 0, &fresh, &err) != PC_OK) {
    finding(d, 0, "data directory", "%s", err.text);
    return 0;
  }
  finding(d, 1, "data directory", "'%s' is a percolator data directory in this version's format",
          dir);
  return 1;
}

/* Opens DIR/store with LevelDB's own checks and reads every entry with
 * its checksums verified: NULL when the store is sound, else LevelDB's
 * description of the damage (malloc'd). */
static char *store_damage(const char *path) {
  leveldb_options_t *o = leveldb_options_create();
  leveldb_options_set_create_if_missing(o, 0);
  leveldb_options_set_paranoid_checks(o, 1);
  char *e = NULL;
  leveldb_t *db = leveldb_open(o, path, &e);
  if (db) {
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_readoptions_set_verify_checksums(ro, 1);
    leveldb_readoptions_set_fill_cache(ro, 0);
    leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
    for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    }
    leveldb_iter_get_error(it, &e);
    leveldb_iter_destroy(it);
    leveldb_readoptions_destroy(ro);
    leveldb_close(db);
  }
  leveldb_options_destroy(o);
  char *out = e ? strdup(e) : NULL;
  leveldb_free(e);
  return out;
}

/* The store of an embedded directory that nobody holds (the caller holds
 * its lock): sound, or its damage named with the repair; with --repair,
 * LevelDB's RepairDB, then the check again. */
static void check_store(doctor_t *d, const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/store", dir);
  char *damage = store_damage(path);
  if (damage && d->repair) {
    leveldb_options_t *o = leveldb_options_create();
    char *e = NULL;
    leveldb_repair_db(o, path, &e);
    leveldb_options_destroy(o);
    if (e) {
      finding(d, 0, "store", "%s: %s; the repair failed: %s", path, damage, e);
      leveldb_free(e);
      free(damage);
      d->store_bad = 1;
      return;
    }
    char *after = store_damage(path);
    if (!after)
      finding(d, 1, "store", "%s was damaged (%s) and is repaired: what its table files held "
              "is back; entries in a damaged block are lost (LevelDB moved unreadable files "
              "to %s/lost)", path, damage, path);
    else
      finding(d, 0, "store", "%s: still damaged after the repair: %s", path, after);
    d->store_bad = after != NULL;
    free(after);
    free(damage);
    return;
  }
  if (!damage) {
    finding(d, 1, "store", "%s opens and every entry reads back with its checksum", path);
    return;
  }
  char current[4300];
  snprintf(current, sizeof current, "%s/CURRENT", path);
  const char *what = access(current, F_OK) != 0 || strstr(damage, "CURRENT")
                         ? "its CURRENT file (which names the manifest) is missing or unreadable"
                     : strstr(damage, "orruption") ? "a file of it is corrupt"
                                                    : "LevelDB cannot open it";
  finding(d, 0, "store",
          "%s: %s (%s). Repair: 'percolator --data %s doctor --repair' rebuilds it from its "
          "table and log files (LevelDB's RepairDB): what they hold is kept, entries in a "
          "damaged block are lost; stop every process using it first, and copy the directory "
          "before if you can",
          path, what, damage, dir);
  d->store_bad = 1;
  free(damage);
}

/* Who holds dir: nobody, a live worker serving it, a client, a process gone. */
static void check_holder(doctor_t *d, const char *dir) {
  char serving[4200];
  snprintf(serving, sizeof serving, "%s/" PC_DAEMON_SERVING_FILE, dir);
  pc_error_t err;
  int fd = pc_data_dir_lock(dir, "doctor", &err);
  if (fd >= 0) {
    finding(d, 1, "holder", "no process holds '%s'%s", dir,
            access(serving, R_OK) == 0
                ? " (serving.json is the last worker's: a worker started again takes its ports)"
                : "");
    check_store(d, dir); /* under the lock: nobody writes it meanwhile */
    pc_data_dir_unlock(fd);
    return;
  }
  if (d->repair) {
    finding(d, 0, "store", "'%s' is in use: --repair needs it free (stop its holder)", dir);
    d->store_bad = 1;
  }
  if (err.code != PC_BUSY) {
    finding(d, 0, "holder", "%s", err.text);
    return;
  }
  long pid = 0;
  char role[32] = "";
  pc_data_dir_holder(dir, &pid, role, sizeof role);
  if (pid > 0 && !process_alive(pid)) {
    finding(d, 0, "holder", "'%s' is locked, and the process it names (%s %ld) is gone", dir,
            role[0] ? role : "process", pid);
    return;
  }
  if (strcmp(role, "worker") != 0) {
    finding(d, 1, "holder",
            "%s %ld holds '%s' (a verb or a program using the library): the other verbs fail "
            "with 'in use' until it ends, and a worker waits for it",
            role[0] ? role : "process", pid, dir);
    return;
  }
  if (access(serving, R_OK) != 0) {
    finding(d, 0, "holder",
            "worker %ld holds '%s' but has written no serving.json: it is starting, or stuck "
            "loading its plugins (see its log)",
            pid, dir);
    return;
  }
  pc_db_t *db = pc_db_open_config_timeout(serving, 0, d->timeout_ms, &err);
  uint64_t ts = 0;
  if (db && pc_db_timestamp(db, d->timeout_ms, &ts, &err) == PC_OK)
    finding(d, 1, "holder", "worker %ld serves '%s' through %s", pid, dir, serving);
  else
    finding(d, 0, "holder", "worker %ld holds '%s', but its serving.json does not answer: %s", pid,
            dir, err.text);
  pc_db_close(db);
}

/* ---- a cluster ---------------------------------------------------------------------- */

static void check_role(doctor_t *d, const char *what, const pc_endpoint_t *ep, pc_status_t st,
                       const pc_error_t *err, const char *start) {
  char name[600];
  snprintf(name, sizeof name, "%s %s:%u", what, ep->host, (unsigned)ep->port);
  if (st == PC_OK)
    finding(d, 1, name, "answers");
  else
    finding(d, 0, name, "does not answer (%s); start it: 'percolator --config %s %s'", err->text,
            d->ctx->config, start);
}

/* The cluster's ZooKeeper: it answers within the timeout (a session of its
 * own on the ensemble, under "/" so that nothing is created), the root node
 * the configuration names exists (a cluster that ran under it made it), and
 * an oracle is elected under it and answers (found as clients find it). */
static void check_zookeeper(doctor_t *d, const pc_config_t *cfg) {
  const char *connect = cfg->zookeeper.connect, *root = cfg->zookeeper.root;
  char what[600];
  snprintf(what, sizeof what, "zookeeper %s", connect);
  pc_error_t err;
  pc_zk_options_t zo = pc_config_zk(cfg);
  zo.root = "/";
  pc_zk_t *zk = pc_zk_open(&zo, d->timeout_ms, NULL, &err);
  if (!zk) {
    finding(d, 0, what,
            "not reachable within %u ms (%s): start the ensemble, or correct zookeeper.connect "
            "in %s",
            (unsigned)d->timeout_ms, err.text, d->ctx->config);
    return;
  }
  finding(d, 1, what, "answers");
  int exists = 0;
  pc_status_t st = pc_zk_exists(zk, root + 1, NULL, &exists, d->timeout_ms, &err);
  pc_zk_close(zk);
  snprintf(what, sizeof what, "zookeeper root %s", root);
  if (st != PC_OK) {
    finding(d, 0, what, "cannot be read: %s", err.text);
    return;
  }
  if (!exists) {
    finding(d, 0, what,
            "does not exist: no cluster has run under it; start its daemons ('percolator "
            "--config %s run'), or correct zookeeper.root",
            d->ctx->config);
    return;
  }
  finding(d, 1, what, "exists");
  pc_rpc_auth_t auth;
  if (pc_config_auth(cfg, &auth, &err) != PC_OK) {
    finding(d, 0, "tso (elected)", "%s", err.text);
    return;
  }
  zo.root = root;
  pc_tso_locator_t *l = pc_tso_locator_create(&zo, &auth, d->timeout_ms, &err);
  pc_config_auth_release(&auth);
  uint64_t last = 0;
  char leader[300] = "", all[1024] = "";
  st = l ? pc_tso_locator_info(l, d->timeout_ms, &last, &err) : err.code;
  if (l) pc_tso_locator_members(l, leader, sizeof leader, all, sizeof all);
  pc_tso_locator_destroy(l);
  if (st == PC_OK)
    finding(d, 1, "tso (elected)", "leader %s answers (last timestamp %llu)", leader,
            (unsigned long long)last);
  else if (!leader[0])
    finding(d, 0, "tso (elected)",
            "no oracle is elected under %s (%s): start one ('percolator --config %s tso', or "
            "'run')",
            root, err.text, d->ctx->config);
  else
    finding(d, 0, "tso (elected)",
            "the elected oracle %s does not answer (%s): see its log; a standby takes over "
            "when its session ends",
            leader, err.text);
}

/* Each role at its configured address. With ZooKeeper the oracle is found
 * through its election (check_zookeeper), not at tso.listen, which is then
 * the address a `tso` process binds and may be port 0. */
static void check_cluster(doctor_t *d, const pc_config_t *cfg) {
  pc_error_t err;
  pc_coord_t *coord = NULL; /* opened for the first tablet that does not answer */
  int coord_tried = 0;
  if (cfg->tso.set && cfg->tso.listen.set && !cfg->zookeeper.set) {
    pc_rpc_client_t *c =
        pc_config_rpc_client(cfg, cfg->tso.listen.host, cfg->tso.listen.port, &err);
    uint64_t last;
    pc_status_t st = c ? pc_tso_remote_info(c, d->timeout_ms, &last, &err) : err.code;
    pc_rpc_client_destroy(c);
    check_role(d, "tso", &cfg->tso.listen, st, &err, "tso");
  }
  for (size_t i = 0; i < cfg->ntablets; i++) {
    const pc_config_tablet_t *t = &cfg->tablets[i];
    pc_rpc_client_t *c = pc_config_rpc_client(cfg, t->listen.host, t->listen.port, &err);
    pc_buf_t name = {0};
    uint64_t ops;
    pc_tablet_gc_t gc;
    pc_status_t st = c ? pc_tablet_remote_info(c, d->timeout_ms, &name, &ops, &gc, &err) : err.code;
    pc_rpc_client_destroy(c);
    pc_buf_free(&name);
    char what[300], start[300];
    snprintf(what, sizeof what, "tablet %s", t->name);
    snprintf(start, sizeof start, "tablet --name %s", t->name);
    /* a server started from this configuration must agree with ZooKeeper's
     * map of the tablet's rows, or it is refused: say so instead */
    if (st != PC_OK && cfg->zookeeper.set && !coord_tried++) {
      pc_zk_options_t zo = pc_config_zk(cfg);
      pc_error_t cerr;
      coord = pc_coord_open(&zo, 0, d->timeout_ms, &cerr);
    }
    pc_error_t rerr;
    if (st != PC_OK && coord &&
        pc_coord_tablet_range_check(coord, t->name, t->start, t->start_len, t->end, t->end_len,
                                    d->timeout_ms, &rerr) == PC_INVALID) {
      char label[600];
      snprintf(label, sizeof label, "%s %s:%u", what, t->listen.host, (unsigned)t->listen.port);
      finding(d, 0, label,
              "does not answer, and a server started from %s would be refused: %s. Reconcile "
              "the configuration with the map: give tablets[%zu] (\"%s\") the rows ZooKeeper "
              "holds, which its data was written under (and the tablets next to it theirs, so "
              "that they still tile the rows); a cluster set up anew takes another "
              "zookeeper.root",
              d->ctx->config, rerr.text, i, t->name);
      continue;
    }
    check_role(d, what, &t->listen, st, &err, start);
  }
  pc_coord_close(coord);
}

/* ---- a replicated cluster --------------------------------------------------------------- */

/* The tablets server s holds a voting replica of, comma-separated. */
static void tablets_of(const cli_rview_t *v, const char *server, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < v->ntablets && used < cap; i++) {
    const cli_rreplica_t *r = cli_rtablet_replica(&v->tablets[i], server);
    if (!r) continue;
    int k = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", v->tablets[i].cfg->name);
    if (k > 0) used += (size_t)k;
  }
}

/* The servers of t's members that are down, comma-separated. */
static void down_of(const cli_rtablet_t *t, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < t->nreps && used < cap; i++) {
    const cli_rreplica_t *r = &t->reps[i];
    if (r->role == CLI_ROLE_OUTSIDE || r->up) continue;
    int k = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", r->server);
    if (k > 0) used += (size_t)k;
  }
}

/* Each server answers; each tablet has a leader, as many voting replicas
 * up as the configuration lists, none lagging; and what to do otherwise. */
static void check_replicated(doctor_t *d, const pc_config_t *cfg) {
  const char *c = d->ctx->config;
  pc_error_t err;
  pc_zk_options_t zo = pc_config_zk(cfg);
  pc_coord_t *coord = pc_coord_open(&zo, 0, d->timeout_ms, &err);
  cli_rview_t v;
  if (cli_rview_load(cfg, coord, d->timeout_ms, &v, &err) != PC_OK) {
    finding(d, 0, "servers", "cannot ask them: %s", err.text);
    cli_rview_free(&v);
    pc_coord_close(coord);
    return;
  }
  for (size_t i = 0; i < v.nservers; i++) {
    const cli_rserver_t *s = &v.servers[i];
    char what[400], held[512];
    snprintf(what, sizeof what, "server %s%s%s", s->name, s->addr[0] ? " " : "", s->addr);
    tablets_of(&v, s->name, held, sizeof held);
    if (s->up) {
      size_t outside = 0;
      for (size_t k = 0; k < s->nreps; k++) {
        const cli_rtablet_t *t = cli_rview_tablet(&v, s->reps[k].group);
        const cli_rreplica_t *r = t ? cli_rtablet_replica(t, s->name) : NULL;
        outside += !r || r->id != s->reps[k].id;
      }
      finding(d, 1, what, "answers, holding %zu replica%s%s", s->nreps, s->nreps == 1 ? "" : "s",
              outside ? " (some outside their groups: removed ones, which serve nothing)" : "");
      continue;
    }
    if (!held[0] && s->configured) {
      finding(d, 0, what,
              "does not answer (%s), and no tablet's group counts a replica on it: if it is "
              "retired, take it out of \"servers\" in %s; else start it: 'percolator --config "
              "%s tablet --name %s'", s->error, c, c, s->name);
      continue;
    }
    char later[160] = "";
    if (held[0] && cfg->replication.down_after_ms)
      snprintf(later, sizeof later, " (the tablets' leaders do that themselves once it has been "
               "down for replication.down_after_ms, %u s)", cfg->replication.down_after_ms / 1000);
    finding(d, 0, what,
            "does not answer (%s)%s%s. Start it: 'percolator --config %s tablet --name %s' (on "
            "an empty directory, if its disk is lost, it rebuilds its replicas from the "
            "others); or, if it is gone for good, move its replicas to another server: "
            "'percolator --config %s tablet replace-server %s NEW'%s",
            s->error, held[0] ? "; it holds replicas of " : "", held, c, s->name, c, s->name,
            later);
  }
  for (size_t i = 0; i < v.ntablets; i++) {
    const cli_rtablet_t *t = &v.tablets[i];
    const char *name = t->cfg->name;
    char what[160], down[512], voters[512];
    snprintf(what, sizeof what, "tablet %s", name);
    down_of(t, down, sizeof down);
    cli_rtablet_voters(t, voters, sizeof voters);
    if (!t->view) {
      finding(d, 0, what, "no server answers for any of its replicas: start its servers "
              "('percolator --config %s tablet --name SERVER')", c);
      continue;
    }
    if (!t->leader) {
      if (t->voters_up < cli_majority(t->voters))
        finding(d, 0, what, "no replica leads it: %zu of its %zu voting replicas are up, and a "
                "majority (%zu) is needed to elect a leader. Start the servers that are down "
                "(%s): 'percolator --config %s tablet --name SERVER'",
                t->voters_up, t->voters, cli_majority(t->voters), down[0] ? down : "none known", c);
      else
        finding(d, 0, what, "no replica leads it, though %zu of its %zu voting replicas are up: "
                "an election is under way (it takes about replication.election_timeout_ms); if "
                "this lasts, see the servers' logs", t->voters_up, t->voters);
      continue;
    }
    if (t->under && !down[0]) {
      finding(d, 0, what,
              "under-replicated: its group has %zu voting replica%s up, and \"replicas\" in %s "
              "lists %zu. Add one on a live server: 'percolator --config %s tablet add-replica %s "
              "SERVER'; or, if the group is meant to be smaller, list only its servers (%s)",
              t->voters_up, t->voters_up == 1 ? "" : "s", c, t->configured, c, name, voters);
    } else if (t->under) {
      /* one server down: name it in the commands; several: say which */
      int one = !strchr(down, ',');
      finding(d, 0, what,
              "under-replicated: %zu of %zu configured voting replicas are up (down: %s). Start "
              "%s ('percolator --config %s tablet --name %s'; a server started on an empty "
              "directory rebuilds its replicas from the others), or replace it by a live server "
              "('percolator --config %s tablet replace-server %s NEW'), or add a replica on a "
              "live server: 'percolator --config %s tablet add-replica %s SERVER'",
              t->voters_up, t->configured, down, one ? down : "the servers that are down", c,
              one ? down : "SERVER", c, one ? down : "OLD", c, name);
    }
    int bad = t->under;
    for (size_t k = 0; k < t->nreps; k++) {
      const cli_rreplica_t *r = &t->reps[k];
      char rw[200];
      snprintf(rw, sizeof rw, "tablet %s replica on %s", name, r->server);
      if (r->role == CLI_ROLE_STANDBY || r->role == CLI_ROLE_SPARE) {
        bad = 1;
        finding(d, 0, rw, "is a %s (it does not vote): an add-replica that ran out of time "
                "leaves it so; 'percolator --config %s tablet add-replica %s %s' finishes it",
                cli_role_name(r->role), c, name, r->server);
      } else if (r->role != CLI_ROLE_OUTSIDE && !r->up && !t->under) {
        bad = 1;
        finding(d, 0, rw, "is down: start server %s ('percolator --config %s tablet --name "
                "%s'), or replace it ('percolator --config %s tablet replace-server %s NEW')",
                r->server, c, r->server, c, r->server);
      } else if (r->role != CLI_ROLE_OUTSIDE && r->up && r->lagging) {
        bad = 1;
        if (r->silent_ms > v.election_timeout_ms)
          finding(d, 0, rw, "lags the leader by %llu entries, and the leader has not heard "
                  "from it %s: its server answers, but not to its leader (a network problem "
                  "between them?); see both servers' logs", (unsigned long long)r->lag,
                  r->silent_ms == UINT64_MAX ? "since it was elected" : "for over an election timeout");
        else
          finding(d, 0, rw, "lags the leader by %llu entries: it is catching up (from a "
                  "snapshot when far behind); if the lag keeps growing, see its server's log "
                  "(a slow disk?)", (unsigned long long)r->lag);
      }
    }
    if (!bad)
      finding(d, 1, what, "led by %s (term %llu); %zu of %zu configured voting replicas up and "
              "in step", t->leader_server->name, (unsigned long long)t->leader->term,
              t->voters_up, t->configured);
  }
  cli_rview_free(&v);
  pc_coord_close(coord);
}

/* ---- through the store ------------------------------------------------------------------ */

static int count_parked(void *ctx, const pc_parked_t *p) {
  (void)p;
  (*(uint64_t *)ctx)++;
  return 0;
}

static void check_observers(doctor_t *d, pc_db_t *db) {
  cli_view_t v;
  pc_error_t err;
  if (cli_view_load(db, db->dir != NULL, &v, &err) != PC_OK) {
    finding(d, 0, "observers", "cannot read them: %s", err.text);
    return;
  }
  if (v.nobs == 0)
    finding(d, 1, "observers", "none registered (a worker registers those of its plugins)");
  for (size_t i = 0; i < v.nobs; i++) {
    const cli_observer_t *o = &v.obs[i];
    char what[160], *col = fmt_escape_str(o->col, o->clen, 0);
    snprintf(what, sizeof what, "observer %s (%s %s)", o->name, o->table, col ? col : "?");
    free(col);
    if (o->nworkers)
      finding(d, 1, what, "run by %zu live worker%s; %llu pending", o->nworkers,
              o->nworkers == 1 ? "" : "s", (unsigned long long)o->pending);
    else if (o->pending)
      finding(d, 0, what,
              "no live worker runs it, so its column's %llu pending notification%s wait for "
              "one: start a worker whose plugins register it, or, if no plugin registers it "
              "any more, retire it: 'percolator observers remove %s'",
              (unsigned long long)o->pending, o->pending == 1 ? "" : "s", o->name);
    else
      finding(d, 0, what,
              "no live worker runs it: its column's notifications will wait for one (start a "
              "worker whose plugins register it, or, if no plugin registers it any more, "
              "retire it: 'percolator observers remove %s')", o->name);
  }
  for (size_t k = 0; k < v.ncols; k++) {
    const cli_column_t *c = &v.cols[k];
    int observed = 0;
    for (size_t i = 0; i < v.nobs; i++)
      observed |= strcmp(v.obs[i].table, c->table) == 0 && v.obs[i].clen == c->clen &&
                  memcmp(v.obs[i].col, c->col, c->clen) == 0;
    if (observed) continue;
    char what[160], *col = fmt_escape_str(c->col, c->clen, 0);
    snprintf(what, sizeof what, "column %s %s", c->table, col ? col : "?");
    free(col);
    finding(d, 0, what, "%llu notification%s pending, and no observer is registered for it",
            (unsigned long long)c->count, c->count == 1 ? "" : "s");
  }
  finding(d, 1, "workers", "%zu live", v.nworkers);
  cli_view_free(&v);
  uint64_t parked = 0;
  if (pc_worker_failures(db, count_parked, &parked, &err) != PC_OK)
    finding(d, 0, "parked notifications", "cannot list them: %s", err.text);
  else if (parked)
    finding(d, 0, "parked notifications",
            "%llu (observers kept failing on them): 'percolator failures' lists them, "
            "'percolator failures --retry' queues them again",
            (unsigned long long)parked);
  else
    finding(d, 1, "parked notifications", "none");
}

static int run_doctor(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"repair", no_argument, NULL, 'R'},
                                       {0, 0, 0, 0}};
  int json = 0, repair = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "j", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == 'j') json = 1;
    if (c == 'R') repair = 1;
  }
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  doctor_t d = {ctx, json, repair, 0, json_array(), 0, ctx->timeout_ms ? ctx->timeout_ms : 2000};
  pc_error_t err;
  pc_config_t *cfg = NULL;
  int usable = 1;
  if (ctx->config) {
    cfg = pc_config_load(ctx->config, &err);
    if (!cfg) {
      finding(&d, 0, "configuration", "%s", err.text);
      usable = 0;
    } else {
      finding(&d, 1, "configuration", "%s is valid", ctx->config);
    }
  }
  if (usable && (!cfg || cfg->ntablets == 0)) {
    const char *dir = cfg ? cfg->data_dir : ctx->data_dir;
    usable = check_directory(&d, dir);
    if (usable) check_holder(&d, dir);
    if (d.store_bad) usable = 0; /* the store cannot be read through */
  } else if (usable) {
    int before = d.problems;
    if (cfg->zookeeper.set) check_zookeeper(&d, cfg);
    if (cfg->nservers) check_replicated(&d, cfg);
    else check_cluster(&d, cfg);
    usable = d.problems == before;
  }
  if (usable) {
    cli_ctx_t quick = *ctx;
    quick.timeout_ms = d.timeout_ms;
    pc_db_t *db = cli_open_db(&quick, 0);
    if (db) {
      check_observers(&d, db);
      pc_db_close(db);
    } else {
      d.problems++;
    }
  }
  pc_config_free(cfg);
  if (json) {
    json_t *o = json_object();
    json_object_set_new(o, "problems", json_integer(d.problems));
    json_object_set_new(o, "checks", d.checks);
    if (fmt_json_line(stdout, o) != 0) return cli_error(ctx, "cannot write the answer");
  } else {
    json_decref(d.checks);
  }
  code = cli_finish_output(ctx);
  if (code != CLI_EXIT_OK) return code;
  if (d.problems)
    return cli_error(ctx, "%d problem%s found", d.problems, d.problems == 1 ? "" : "s");
  return CLI_EXIT_OK;
}

const cli_verb_t cli_verb_doctor = {
    .name = "doctor",
    .summary = "say what is wrong with a data directory or a cluster, and what to do",
    .run = run_doctor,
    .args = "[--json]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about =
        "Checks, one line each ('ok' or 'PROBLEM', with what to do):\n"
        "  - an embedded data directory: that it exists and is a percolator data\n"
        "    directory of this version; who holds it (nobody, a worker serving it and\n"
        "    whether its serving.json answers, another process) and whether that\n"
        "    process still lives; when nobody holds it, that its store opens and every\n"
        "    entry reads back with its checksum (a missing CURRENT file, a corrupt\n"
        "    table file are named, with the repair);\n"
        "  - a cluster's configuration: that ZooKeeper answers within the timeout,\n"
        "    that the configured root node exists, that an oracle is elected under\n"
        "    it and answers, and that each role (oracle, tablets) answers;\n"
        "  - a replicated cluster (\"servers\"): that each server answers, and that\n"
        "    each tablet has a leader, as many voting replicas up as its \"replicas\"\n"
        "    list and none lagging the leader; it names a tablet that is\n"
        "    under-replicated or has no leader, a replica that is down, lags or does\n"
        "    not vote, and says what to do: start the server (on an empty directory\n"
        "    a server rebuilds its replicas from the others), 'percolator tablet\n"
        "    replace-server OLD NEW' or 'percolator tablet add-replica TABLET SERVER';\n"
        "  - through the store: each registered observer and the live workers that\n"
        "    run it (none: its column's notifications wait), pending notifications of\n"
        "    columns no observer is registered for, parked notifications.\n"
        "Exits 0 when nothing is wrong, 3 when it found a problem.\n",
    .options = "  -j, --json          one object: {\"problems\": N, \"checks\": [{\"ok\", \"what\",\n"
               "                      \"detail\"}]}\n"
               "  --repair            rebuild a damaged store of an embedded directory nobody\n"
               "                      holds (LevelDB's RepairDB: what its files hold is kept,\n"
               "                      entries in a damaged block are lost)\n",
    .example = "percolator --data /tmp/pc doctor\n"
               "percolator --config cluster.json doctor\n",
};
