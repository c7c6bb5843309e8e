/* daemon.c — starting a daemon process's roles in order and stopping them
 * in reverse (daemon.h), and the ready file that scripts using port 0 read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "daemon/daemon_internal.h"

/* Checks that the configuration has what spec requires; clears the
 * optional roles it lacks in *spec. */
static pc_status_t check_spec(const pc_config_t *cfg, pc_daemon_spec_t *spec, pc_error_t *err) {
  if ((spec->tso || spec->tablets) && !cfg->zookeeper.set && !cfg->served)
    return pc_error_set(err, PC_INVALID,
                        "%s: the cluster's roles need a \"zookeeper\" section (docs/CONFIG.md)",
                        cfg->source);
  if (spec->tso && !(cfg->tso.set && cfg->tso.listen.set))
    return pc_error_set(err, PC_INVALID, "%s: no \"tso\" section with \"listen\"", cfg->source);
  if (spec->tablets && cfg->ntablets == 0)
    return pc_error_set(err, PC_INVALID, "%s: no \"tablets\"", cfg->source);
  if (spec->tablets == 1 && !spec->tablet_name)
    return pc_error_set(err, PC_INVALID, "a tablet name is required");
  if (spec->workers == PC_DAEMON_IF_CONFIGURED && !cfg->workers.set)
    spec->workers = PC_DAEMON_NONE;
  return PC_OK;
}

static pc_status_t start_roles(pc_daemon_t *d, const pc_daemon_spec_t *spec, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  pc_status_t st = PC_OK;
  if (spec->tso) st = pc_daemon_start_tso(d, err);
  if (st == PC_OK && spec->tablets) st = pc_daemon_ts_setup(d, err);
  size_t before = d->nroles;
  for (size_t i = 0; st == PC_OK && spec->tablets && i < cfg->ntablets; i++) {
    if (spec->tablets == 1 && strcmp(spec->tablet_name, cfg->tablets[i].name) != 0) continue;
    st = pc_daemon_start_tablet(d, &cfg->tablets[i], err);
  }
  if (st == PC_OK && spec->tablets == 1 && d->nroles == before)
    st = pc_error_set(err, PC_INVALID, "%s: no tablet named '%s'", cfg->source,
                      spec->tablet_name);
  return st;
}

pc_daemon_t *pc_daemon_start(const pc_daemon_config_t *c, const pc_daemon_spec_t *spec_in,
                             pc_error_t *err) {
  pc_error_clear(err);
  pc_daemon_spec_t spec = *spec_in;
  if (check_spec(c->cfg, &spec, err) != PC_OK) return NULL;
  pc_daemon_t *d = calloc(1, sizeof *d);
  if (!d) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  d->c = c;
  d->cfg = c->cfg;
  pc_status_t st = start_roles(d, &spec, err);
  if (st == PC_OK && spec.serving_file) {
    char *text = pc_daemon_client_text(d, err);
    st = text ? pc_daemon_write_file(spec.serving_file, text, err) : err->code;
    free(text);
    if (st == PC_OK && !(d->serving_file = strdup(spec.serving_file))) {
      unlink(spec.serving_file);
      st = pc_error_set(err, PC_NOMEM, "out of memory");
    }
  }
  if (st == PC_OK && spec.workers) st = pc_daemon_workers_start(d, spec.workers_cluster, err);
  if (st != PC_OK) {
    pc_daemon_stop(d);
    return NULL;
  }
  if (spec.tablets) pc_daemon_gc_start(d);
  return d;
}

pc_status_t pc_daemon_write_ready_file(const pc_daemon_t *d, const char *path, pc_error_t *err) {
  json_t *root = json_object(), *tablets = json_object();
  for (size_t i = 0; i < d->nroles; i++) {
    const role_t *r = &d->roles[i];
    char ep[300];
    pc_daemon_role_endpoint(r, ep, sizeof ep);
    json_t *o = json_object();
    json_object_set_new(o, "listen", json_string(ep));
    if (r->http) {
      snprintf(ep, sizeof ep, "127.0.0.1:%u", (unsigned)pc_http_port(r->http));
      json_object_set_new(o, "http", json_string(ep));
    }
    if (r->kind == ROLE_TABLET)
      json_object_set_new(tablets, pc_daemon_tablet_name(r), o);
    else
      json_object_set_new(root, "tso", o);
  }
  json_object_set_new(root, "tablets", tablets);
  json_object_set_new(root, "pid", json_integer(getpid()));
  char *text = json_dumps(root, JSON_SORT_KEYS);
  json_decref(root);
  if (!text) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = pc_daemon_write_file(path, text, err);
  free(text);
  if (st != PC_OK) pc_error_prefix(err, "ready file");
  return st;
}

size_t pc_daemon_role_count(const pc_daemon_t *d) {
  return d->nroles;
}

int pc_daemon_has_workers(const pc_daemon_t *d) {
  return d->has_workers;
}

void pc_daemon_stop(pc_daemon_t *d) {
  if (!d) return;
  if (d->has_workers) pc_daemon_workers_stop(d); /* their client speaks to the roles below */
  pc_daemon_gc_stop(d);
  if (d->serving_file) unlink(d->serving_file);
  free(d->serving_file);
  pc_daemon_stop_roles(d);
  free(d);
}
