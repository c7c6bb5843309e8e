/* daemon.c — starting a daemon process's roles in order and stopping them
 * in reverse (daemon.h), bounded when the process exits on a signal, and the
 * ready file that scripts using port 0 read. */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/db.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "base/log.h"
#include "daemon/daemon_internal.h"

#define LOCK_WAIT_MS 10000u

pc_status_t pc_daemon_plan(const char *config_path, const char *data_dir,
                           const pc_daemon_spec_t *spec, uint32_t timeout_ms,
                           pc_daemon_plan_t *out, pc_error_t *err) {
  memset(out, 0, sizeof *out);
  out->spec = *spec;
  out->spec.workers_timeout_ms = timeout_ms;
  if (spec->workers != PC_DAEMON_REQUIRED)
    return pc_daemon_config_load(config_path, &out->config, err);
  pc_config_t *cfg = config_path ? pc_config_load(config_path, err) : pc_config_default();
  if (!cfg) return config_path ? err->code : pc_error_set(err, PC_NOMEM, "out of memory");
  int cluster = cfg->ntablets != 0;
  if (!cluster)
    snprintf(out->data_dir, sizeof out->data_dir, "%s", config_path ? cfg->data_dir : data_dir);
  pc_config_free(cfg);
  if (cluster) {
    out->spec.workers_cluster = config_path;
    return pc_daemon_config_load(config_path, &out->config, err);
  }
  /* hold the embedded store and serve it: an oracle and one tablet */
  int fresh;
  pc_status_t st = pc_data_dir_prepare(out->data_dir, 0, &fresh, err);
  if (st != PC_OK) return st;
  snprintf(out->serving_file, sizeof out->serving_file, "%s/" PC_DAEMON_SERVING_FILE, out->data_dir);
  out->spec.tso = 1;
  out->spec.tablets = 2;
  out->spec.serving_file = out->serving_file;
  out->spec.lock_dir = out->data_dir;
  out->spec.lock_wait_ms = timeout_ms ? timeout_ms : LOCK_WAIT_MS;
  return pc_daemon_config_serving(config_path, out->data_dir, &out->config, err);
}

void pc_daemon_plan_free(pc_daemon_plan_t *p) { pc_daemon_config_free(&p->config); }

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

/* ---- ports, checked before anything serves ----------------------------------- */

typedef struct port_use {
  const char *role, *what; /* "tablet t1", "listen" or "http" */
  const pc_endpoint_t *ep;
} port_use_t;

/* 0 when ep can be listened on now, else errno (a name that does not
 * resolve: EADDRNOTAVAIL). */
static int can_listen(const pc_endpoint_t *ep) {
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)ep->port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (getaddrinfo(ep->host, port, &hints, &res) != 0) return EADDRNOTAVAIL;
  int e = EADDRNOTAVAIL;
  for (struct addrinfo *ai = res; ai && e; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      e = errno;
      continue;
    }
    int one = 1; /* as the servers bind: a port in TIME_WAIT is free */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    e = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    close(fd);
  }
  freeaddrinfo(res);
  return e;
}

/* Every fixed port this process will listen on is free and named once, so
 * that a port in use stops it before any role serves (or an oracle joins
 * the election only to leave it). Port 0 is the kernel's pick. */
static pc_status_t check_ports(const pc_config_t *cfg, const pc_daemon_spec_t *spec,
                               pc_error_t *err) {
  port_use_t use[2 * 64 + 4];
  size_t n = 0;
  if (spec->tso) {
    use[n++] = (port_use_t){"tso", "listen", &cfg->tso.listen};
    use[n++] = (port_use_t){"tso", "http", &cfg->tso.http};
  }
  char names[64][96];
  for (size_t i = 0; spec->tablets && i < cfg->ntablets && n + 2 <= sizeof use / sizeof use[0];
       i++) {
    if (spec->tablets == 1 && strcmp(spec->tablet_name, cfg->tablets[i].name) != 0) continue;
    if (i >= 64) break;
    snprintf(names[i], sizeof names[i], "tablet %s", cfg->tablets[i].name);
    use[n++] = (port_use_t){names[i], "listen", &cfg->tablets[i].listen};
    use[n++] = (port_use_t){names[i], "http", &cfg->tablets[i].http};
  }
  if (spec->workers) use[n++] = (port_use_t){"workers", "http", &cfg->workers.http};
  for (size_t i = 0; i < n; i++) {
    const pc_endpoint_t *ep = use[i].ep;
    if (!ep->set || ep->port == 0) continue;
    for (size_t k = 0; k < i; k++)
      if (use[k].ep->set && use[k].ep->port == ep->port && strcmp(use[k].ep->host, ep->host) == 0)
        return pc_error_set(err, PC_INVALID, "%s: %s: %s:%u is also %s's %s endpoint (nothing "
                            "was started)", cfg->source, use[i].role, ep->host,
                            (unsigned)ep->port, use[k].role, use[k].what);
    int e = can_listen(ep);
    if (e)
      return pc_error_set(err, PC_IO_ERROR, "%s: %scannot listen on %s:%u%s: %s (nothing was "
                          "started)", use[i].role,
                          strcmp(use[i].what, "http") == 0 ? "http: " : "", ep->host,
                          (unsigned)ep->port,
                          strcmp(use[i].what, "http") == 0 ? " for HTTP" : "", strerror(e));
  }
  return PC_OK;
}

static pc_status_t start_roles(pc_daemon_t *d, const pc_daemon_spec_t *spec, pc_error_t *err) {
  const pc_config_t *cfg = d->cfg;
  pc_status_t st = PC_OK;
  if (spec->tso) st = pc_daemon_start_tso(d, err);
  if (st == PC_OK && spec->tablets) st = pc_daemon_ts_setup(d, err);
  size_t before = d->nroles;
  /* a replicated cluster's servers, each holding replicas of several
   * tablets; or, without "servers", a server per tablet */
  for (size_t i = 0; st == PC_OK && spec->tablets && i < cfg->nservers; i++) {
    if (spec->tablets == 1 && strcmp(spec->tablet_name, cfg->servers[i].name) != 0) continue;
    st = pc_daemon_start_server(d, &cfg->servers[i], err);
  }
  for (size_t i = 0; st == PC_OK && spec->tablets && !cfg->nservers && i < cfg->ntablets; i++) {
    if (spec->tablets == 1 && strcmp(spec->tablet_name, cfg->tablets[i].name) != 0) continue;
    st = pc_daemon_start_tablet(d, &cfg->tablets[i], err);
  }
  if (st == PC_OK && spec->tablets == 1 && d->nroles == before)
    st = pc_error_set(err, PC_INVALID, "%s: no %s named '%s'", cfg->source,
                      cfg->nservers ? "server" : "tablet", spec->tablet_name);
  return st;
}

/* Takes dir's lock as a worker; while a client (a short-lived verb) holds
 * it, tries again until wait_ms have passed. */
static int lock_dir(const char *dir, uint32_t wait_ms, pc_error_t *err) {
  uint64_t deadline = pc_now_mono_ms() + wait_ms;
  int said = 0;
  for (;;) {
    int fd = pc_data_dir_lock(dir, "worker", err);
    if (fd >= 0 || err->code != PC_BUSY) return fd;
    long pid = 0;
    char role[32] = "";
    if (pc_data_dir_holder(dir, &pid, role, sizeof role) == 0 && strcmp(role, "worker") == 0)
      return -1; /* another worker serves it: not ours to wait for */
    if (pc_now_mono_ms() >= deadline) return -1;
    if (!said++)
      pc_log(PC_LOG_INFO, "waiting for process %ld to release data directory '%s'", pid, dir);
    pc_sleep_ms(20);
  }
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
  d->dir_lock = -1;
  d->lock_dir = spec.lock_dir;
  pc_status_t st = pc_config_auth(d->cfg, &d->auth, err);
  /* first what can fail for the user's reasons, before any server says it listens */
  if (st == PC_OK && spec.lock_dir &&
      (d->dir_lock = lock_dir(spec.lock_dir, spec.lock_wait_ms, err)) < 0)
    st = err->code;
  /* the serving file a worker before left stays: it holds the ports and the
   * secret this process serves with again (pc_daemon_config_serving read
   * them), so that a crash before this process rewrites it loses neither;
   * clients take it for this process's only once it is newer than the
   * directory's lock (apps/cli/main.c), which this process just took */
  if (st == PC_OK && spec.workers) st = pc_daemon_workers_load(d, err);
  if (st == PC_OK && !spec.serving_file) st = check_ports(d->cfg, &spec, err);
  if (st == PC_OK) st = start_roles(d, &spec, err);
  if (st == PC_OK && spec.workers)
    st = pc_daemon_workers_start(d, spec.workers_cluster, spec.workers_timeout_ms, err);
  /* served only once the observers are registered: a client that reaches the
   * store through this file never writes before them */
  if (st == PC_OK && spec.serving_file) st = PC_FAILPOINT("daemon.before_serving", err);
  if (st == PC_OK && spec.serving_file) {
    char *text = pc_daemon_client_text(d, err);
    st = text ? pc_daemon_write_file(spec.serving_file, text, err) : err->code;
    free(text);
    if (st == PC_OK && !(d->serving_file = strdup(spec.serving_file)))
      st = pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (st != PC_OK) {
    pc_daemon_stop(d);
    return NULL;
  }
  if (spec.tablets) pc_daemon_gc_start(d);
  return d;
}

pc_status_t pc_daemon_write_ready_file(const pc_daemon_t *d, const char *path, pc_error_t *err) {
  json_t *root = json_object(), *tablets = json_object(), *servers = json_object();
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
    else if (r->kind == ROLE_SERVER)
      json_object_set_new(servers, pc_daemon_tablet_name(r), o);
    else
      json_object_set_new(root, "tso", o);
  }
  json_object_set_new(root, "tablets", tablets);
  json_object_set_new(root, "servers", servers);
  if (d->has_workers) {
    json_t *w = json_object();
    if (d->w.http) {
      char ep[64];
      snprintf(ep, sizeof ep, "127.0.0.1:%u", (unsigned)pc_http_port(d->w.http));
      json_object_set_new(w, "http", json_string(ep));
    }
    json_object_set_new(root, "workers", w);
  }
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

pc_status_t pc_daemon_reload(pc_daemon_t *d, pc_error_t *err) {
  pc_error_clear(err);
  if (!d->has_workers) return pc_error_set(err, PC_STATE, "this process runs no workers");
  return pc_daemon_workers_reload(d, err);
}

static void stage(pc_daemon_t *d, const char *what) { atomic_store(&d->stage, what); }

/* pc_daemon_stop but the release of d, which the shutdown's watchdog may
 * still be reading. */
static void stop_all(pc_daemon_t *d) {
  uint64_t t0 = pc_now_mono_ms();
  /* other processes' requests stop now: every server stops accepting and
   * reading, and the graces of the requests in flight run together */
  stage(d, "stopping the servers from taking requests");
  for (size_t i = 0; i < d->nroles; i++) pc_rpc_server_stop_begin(d->roles[i].rpc);
  stage(d, "stopping the garbage collector");
  pc_daemon_gc_stop(d); /* its pass stops at a step */
  uint64_t t1 = pc_now_mono_ms();
  stage(d, "stopping the workers (their observer transactions finish)");
  if (d->has_workers) pc_daemon_workers_stop(d); /* in-process clients of the roles below */
  free(d->serving_file);
  uint64_t t2 = pc_now_mono_ms();
  stage(d, "draining the servers' requests in flight and closing the stores");
  size_t roles = d->nroles;
  pc_daemon_stop_roles(d);
  pc_data_dir_unlock(d->dir_lock); /* last: the store and the oracle are closed */
  pc_config_auth_release(&d->auth);
  uint64_t t3 = pc_now_mono_ms();
  if (roles || d->has_workers)
    pc_log(PC_LOG_INFO, "stopped in %llu ms (collector %llu ms, workers %llu ms, servers and "
           "stores %llu ms)", (unsigned long long)(t3 - t0), (unsigned long long)(t1 - t0),
           (unsigned long long)(t2 - t1), (unsigned long long)(t3 - t2));
}

void pc_daemon_stop(pc_daemon_t *d) {
  if (!d) return;
  stop_all(d);
  free(d);
}

/* ---- shutdown on a signal -------------------------------------------------- */

uint32_t pc_daemon_stop_bound_ms(const pc_daemon_t *d) {
  return PC_RPC_STOP_GRACE_MS + 2 * d->cfg->store.timeout_ms + PC_DAEMON_STOP_SLACK_MS;
}

typedef struct watchdog {
  pc_daemon_t *d; /* released only once the watchdog is joined */
  const sigset_t *sigs;
  int forced_status;
  uint32_t bound_ms;
  uint64_t until_ms; /* the stop's deadline, counted from the signal */
  _Atomic int done;
} watchdog_t;

/* Ends the process when the stop outlasts its bound or a second signal comes. */
static void *watchdog_main(void *arg) {
  watchdog_t *w = arg;
  uint32_t bound = w->bound_ms;
  uint64_t until = w->until_ms;
  while (!atomic_load(&w->done)) {
    struct timespec slice = {0, 100 * 1000000L};
    int sig = sigtimedwait(w->sigs, NULL, &slice);
    if (atomic_load(&w->done)) break;
    if (sig > 0 || pc_now_mono_ms() >= until) {
      const char *what = atomic_load(&w->d->stage);
      if (sig > 0)
        pc_log(PC_LOG_ERROR, "signal %d again while %s: exiting now", sig, what ? what : "stopping");
      else
        pc_log(PC_LOG_ERROR, "shutdown did not finish within %u ms (still %s): exiting now",
               bound, what ? what : "stopping");
      _exit(w->forced_status);
    }
  }
  return NULL;
}

void pc_daemon_shutdown(pc_daemon_t *d, const sigset_t *sigs, int forced_status) {
  if (!d) return;
  /* the bound is counted from now, however late the watchdog starts */
  uint32_t bound = pc_daemon_stop_bound_ms(d);
  watchdog_t w = {d, sigs, forced_status, bound, pc_now_mono_ms() + bound, 0};
  pthread_t t;
  int watching = pthread_create(&t, NULL, watchdog_main, &w) == 0;
  if (!watching) pc_log(PC_LOG_WARN, "cannot start the shutdown watchdog; stopping unbounded");
  stop_all(d);
  atomic_store(&w.done, 1);
  if (watching) pthread_join(t, NULL);
  free(d);
}
