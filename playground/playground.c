/* playground.c — a whole cluster on this machine (playground.h): its
 * description (roles, tablets and where they are placed), its
 * configurations, and its processes, started, watched and stopped by pid. */
#include "playground/playground.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "lockservice/zk.h"
#include "playground/zkserver.h"
#include "tso/tso_locator.h"

/* How long a role may take to stop on SIGTERM before it is killed: above a
 * daemon's own bound with the default timeouts (daemon.h, 30 s). */
#define STOP_WAIT_MS 40000u

struct pc_pg {
  char cli[PATH_MAX];
  char dir[PATH_MAX];
  char zk_root[256];
  char zk_connect[512];
  int own_zk, zk_servers, oracles, one_process, workers, zookeeper_only;
  int nservers; /* a replicated cluster's tablet servers (0: a server per tablet) */
  char *plugins[PC_PG_MAX_PLUGINS];
  size_t nplugins;
  json_t *extra;
  pc_pg_tablet_t tablets[PC_PG_MAX_TABLETS];
  size_t ntablets;
  char tablet_listen[PC_PG_MAX_TABLETS][64]; /* where each tablet is served */
  pc_pg_role_t roles[PC_PG_MAX_ROLES];
  size_t nroles;
  pc_zkserver_t *zk;
  pc_tso_locator_t *locator;
  char daemons_config[PATH_MAX + 32];
  char client_config[PATH_MAX + 32];
};

/* ---- the description ----------------------------------------------------------- */

static pc_pg_role_t *add_role(pc_pg_t *p, pc_pg_kind_t kind, const char *name, pc_error_t *err) {
  if (p->nroles == PC_PG_MAX_ROLES) {
    pc_error_set(err, PC_INVALID, "playground: more than %d processes", PC_PG_MAX_ROLES);
    return NULL;
  }
  pc_pg_role_t *r = &p->roles[p->nroles++];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->exit_status = -1;
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->log, sizeof r->log, "%s/logs/%s.log", p->dir, name);
  snprintf(r->ready, sizeof r->ready, "%s/run/%s.ready", p->dir, name);
  return r;
}

/* The tablets' copies, placed on tablet servers: one server per copy. This
 * is the one place that decides which process serves which tablet. */
static pc_status_t place_tablets(pc_pg_t *p, pc_error_t *err) {
  if (p->nservers) { /* the replicas of tablet i on servers i, i + 1, ... */
    for (size_t i = 0; i < p->ntablets; i++)
      for (int copy = 0; copy < p->tablets[i].replicas; copy++)
        p->tablets[i].on[copy] = (int)((i + (size_t)copy) % (size_t)p->nservers);
    for (int k = 0; !p->one_process && k < p->nservers; k++) {
      char name[16];
      snprintf(name, sizeof name, "s%d", k + 1);
      pc_pg_role_t *r = add_role(p, PC_PG_TABLET, name, err);
      if (!r) return err->code;
      snprintf(r->tablet, sizeof r->tablet, "%s", name);
    }
    return PC_OK;
  }
  if (p->one_process) return PC_OK; /* the `run` process serves them all */
  for (size_t i = 0; i < p->ntablets; i++) {
    const pc_pg_tablet_t *t = &p->tablets[i];
    for (int copy = 0; copy < t->replicas; copy++) {
      char name[64];
      snprintf(name, sizeof name, t->replicas > 1 ? "%s-%d" : "%s", t->name, copy + 1);
      pc_pg_role_t *r = add_role(p, PC_PG_TABLET, name, err);
      if (!r) return err->code;
      snprintf(r->tablet, sizeof r->tablet, "%s", t->name);
    }
  }
  return PC_OK;
}

/* The tablets of the split rows: t1 [ "", s1), t2 [s1, s2), ..., each held once. */
static pc_status_t make_tablets(pc_pg_t *p, const pc_pg_options_t *o, pc_error_t *err) {
  if (o->nsplits + 1 > PC_PG_MAX_TABLETS)
    return pc_error_set(err, PC_INVALID, "playground: at most %d tablets", PC_PG_MAX_TABLETS);
  for (size_t i = 0; i < o->nsplits; i++) {
    if (!o->splits[i][0])
      return pc_error_set(err, PC_INVALID, "playground: split row %zu is empty", i + 1);
    if (i > 0 && strcmp(o->splits[i - 1], o->splits[i]) >= 0)
      return pc_error_set(err, PC_INVALID,
                          "playground: split rows must increase: '%s' then '%s'",
                          o->splits[i - 1], o->splits[i]);
  }
  for (size_t i = 0; i <= o->nsplits; i++) {
    pc_pg_tablet_t *t = &p->tablets[p->ntablets++];
    snprintf(t->name, sizeof t->name, "t%zu", i + 1);
    t->start = strdup(i == 0 ? "" : o->splits[i - 1]);
    t->end = strdup(i == o->nsplits ? "" : o->splits[i]);
    t->replicas = p->nservers ? (o->replicas ? o->replicas : (p->nservers < 3 ? p->nservers : 3)) : 1;
    if (!t->start || !t->end) return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  return PC_OK;
}

static pc_status_t describe(pc_pg_t *p, pc_error_t *err) {
  char name[64];
  for (int i = 0; p->own_zk && i < p->zk_servers; i++) {
    snprintf(name, sizeof name, "zookeeper-%d", i + 1);
    pc_pg_role_t *r = add_role(p, PC_PG_ZOOKEEPER, name, err);
    if (!r) return err->code;
    r->index = i;
    snprintf(r->log, sizeof r->log, "%s/zookeeper/zk%d/server.log", p->dir, i);
    r->ready[0] = '\0';
  }
  if (p->zookeeper_only) return PC_OK;
  for (int i = 0; i < p->oracles; i++) {
    int server = p->one_process && i == 0;
    snprintf(name, sizeof name, server ? "server" : "tso-%d", i + 1);
    if (!add_role(p, server ? PC_PG_SERVER : PC_PG_TSO, name, err)) return err->code;
  }
  if (place_tablets(p, err) != PC_OK) return err->code;
  for (int i = 0; i < p->workers; i++) {
    snprintf(name, sizeof name, "worker-%d", i + 1);
    if (!add_role(p, PC_PG_WORKER, name, err)) return err->code;
  }
  return PC_OK;
}

static pc_status_t make_dir(const char *path, pc_error_t *err) {
  if (mkdir(path, 0700) != 0 && errno != EEXIST)
    return pc_error_set(err, PC_IO_ERROR, "playground: cannot create %s: %s", path,
                        strerror(errno));
  return PC_OK;
}

pc_pg_t *pc_pg_create(const pc_pg_options_t *o, pc_error_t *err) {
  pc_error_clear(err);
  pc_pg_t *p = calloc(1, sizeof *p);
  if (!p) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  pc_status_t st = PC_OK;
  if (!o->cli || access(o->cli, X_OK) != 0)
    st = pc_error_set(err, PC_INVALID, "playground: cannot run '%s'", o->cli ? o->cli : "");
  else if (!o->dir || !*o->dir)
    st = pc_error_set(err, PC_INVALID, "playground: no directory");
  else if (o->zookeeper_only && o->zk_connect)
    st = pc_error_set(err, PC_INVALID, "playground: ZooKeeper only, but an ensemble is given");
  else if (!o->zk_connect && o->zk_servers != 1 && o->zk_servers != 3)
    st = pc_error_set(err, PC_INVALID, "playground: %d ZooKeeper servers: 1 or 3",
                      o->zk_servers);
  else if (o->oracles < 1 || o->oracles > 9)
    st = pc_error_set(err, PC_INVALID, "playground: %d oracles: 1 to 9", o->oracles);
  else if (o->workers < 0 || o->workers > 32)
    st = pc_error_set(err, PC_INVALID, "playground: %d workers: 0 to 32", o->workers);
  else if (o->workers > 0 && o->nplugins == 0)
    st = pc_error_set(err, PC_INVALID, "playground: workers need a plugin");
  else if (o->nplugins > PC_PG_MAX_PLUGINS)
    st = pc_error_set(err, PC_INVALID, "playground: at most %d plugins", PC_PG_MAX_PLUGINS);
  else if (o->servers < 0 || o->servers > 15 || o->replicas < 0 ||
           (o->servers && o->replicas > o->servers) || (!o->servers && o->replicas > 1))
    st = pc_error_set(err, PC_INVALID, "playground: %d replicas on %d servers: 1 to 15 servers, "
                      "at most as many replicas", o->replicas, o->servers);
  else if (o->extra && !json_is_object(o->extra))
    st = pc_error_set(err, PC_INVALID, "playground: the extra configuration is not an object");
  if (st == PC_OK && (!realpath(o->cli, p->cli)))
    st = pc_error_set(err, PC_INVALID, "playground: %s: %s", o->cli, strerror(errno));
  if (st == PC_OK) st = make_dir(o->dir, err);
  if (st == PC_OK && !realpath(o->dir, p->dir))
    st = pc_error_set(err, PC_IO_ERROR, "playground: %s: %s", o->dir, strerror(errno));
  for (size_t i = 0; st == PC_OK && i < o->nplugins; i++) {
    char real[PATH_MAX];
    if (!realpath(o->plugins[i], real))
      st = pc_error_set(err, PC_INVALID, "playground: plugin %s: %s", o->plugins[i],
                        strerror(errno));
    else if (!(p->plugins[p->nplugins++] = strdup(real)))
      st = pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (st == PC_OK) {
    p->own_zk = o->zk_connect == NULL;
    p->zk_servers = p->own_zk ? o->zk_servers : 0;
    p->oracles = o->oracles;
    p->one_process = o->one_process;
    p->zookeeper_only = o->zookeeper_only;
    p->workers = o->workers;
    p->nservers = o->servers;
    snprintf(p->zk_root, sizeof p->zk_root, "%s", o->zk_root ? o->zk_root : "/percolator/playground");
    if (o->zk_connect) snprintf(p->zk_connect, sizeof p->zk_connect, "%s", o->zk_connect);
    p->extra = o->extra ? json_deep_copy(o->extra) : json_object();
    snprintf(p->daemons_config, sizeof p->daemons_config, "%s/daemons.json", p->dir);
    snprintf(p->client_config, sizeof p->client_config, "%s/cluster.json", p->dir);
    st = p->extra ? make_tablets(p, o, err) : pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (st == PC_OK) st = describe(p, err);
  char sub[PATH_MAX + 16];
  const char *subs[] = {"logs", "run", "data"};
  for (size_t i = 0; st == PC_OK && i < 3; i++) {
    snprintf(sub, sizeof sub, "%s/%s", p->dir, subs[i]);
    st = make_dir(sub, err);
  }
  if (st != PC_OK) {
    pc_pg_free(p);
    return NULL;
  }
  return p;
}

/* ---- configurations -------------------------------------------------------------- */

/* Sets every member of p->extra in root; an object whose root member is an
 * object too ("zookeeper", "tso", "workers") is merged into it, member by
 * member. "workers" goes only where root has it (the client configuration
 * of a playground with plugins). */
static void merge_extra(const pc_pg_t *p, json_t *root) {
  const char *key;
  json_t *v;
  json_object_foreach(p->extra, key, v) {
    json_t *mine = json_object_get(root, key);
    if (json_is_object(mine) && json_is_object(v))
      json_object_update(mine, v);
    else if (strcmp(key, "workers") != 0)
      json_object_set(root, key, v);
  }
}

static json_t *zk_json(const pc_pg_t *p) {
  json_t *zk = json_object();
  json_object_set_new(zk, "connect", json_string(p->zk_connect));
  json_object_set_new(zk, "root", json_string(p->zk_root));
  return zk;
}

static json_t *tablet_json(const pc_pg_t *p, const pc_pg_tablet_t *t, const char *listen, int http) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(t->name));
  if (p->nservers) {
    json_t *reps = json_array();
    for (int k = 0; k < t->replicas; k++) {
      char name[16];
      snprintf(name, sizeof name, "s%d", t->on[k] + 1);
      json_array_append_new(reps, json_string(name));
    }
    json_object_set_new(o, "replicas", reps);
  } else {
    json_object_set_new(o, "listen", json_string(listen));
    if (http) json_object_set_new(o, "http", json_string("127.0.0.1:0"));
  }
  json_object_set_new(o, "start", json_string(t->start));
  json_object_set_new(o, "end", json_string(t->end));
  return o;
}

/* A replicated cluster's "servers": listen[k] for server k (NULL: port 0). */
static json_t *servers_json(const pc_pg_t *p, const char *fixed, int fixed_port, int http,
                            int bound) {
  json_t *arr = json_array();
  for (int k = 0; k < p->nservers; k++) {
    char name[16], ep[64];
    snprintf(name, sizeof name, "s%d", k + 1);
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    snprintf(ep, sizeof ep, "127.0.0.1:%d", fixed && strcmp(fixed, name) == 0 ? fixed_port : 0);
    const char *listen = ep;
    for (size_t i = 0; bound && i < p->nroles; i++)
      if (p->roles[i].kind == PC_PG_TABLET && strcmp(p->roles[i].tablet, name) == 0 &&
          p->roles[i].listen[0])
        listen = p->roles[i].listen;
    json_object_set_new(o, "listen", json_string(listen));
    if (http) json_object_set_new(o, "http", json_string("127.0.0.1:0"));
    json_array_append_new(arr, o);
  }
  return arr;
}

static pc_status_t write_json(json_t *root, const char *path, pc_error_t *err) {
  char tmp[PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  int rc = root ? json_dump_file(root, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) : -1;
  json_decref(root);
  if (rc != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return pc_error_set(err, PC_IO_ERROR, "playground: cannot write %s", path);
  }
  return PC_OK;
}

/* The servers' configuration: every role on port 0, except tablet fixed,
 * which listens on fixed_port. */
static pc_status_t write_daemons_config(const pc_pg_t *p, const char *path, const char *fixed,
                                        int fixed_port, pc_error_t *err) {
  json_t *root = json_object(), *tso = json_object(), *tablets = json_array();
  char data[PATH_MAX + 16], ep[64];
  snprintf(data, sizeof data, "%s/data", p->dir);
  json_object_set_new(root, "data_dir", json_string(data));
  json_object_set_new(root, "zookeeper", zk_json(p));
  json_object_set_new(tso, "listen", json_string("127.0.0.1:0"));
  json_object_set_new(tso, "http", json_string("127.0.0.1:0"));
  json_object_set_new(root, "tso", tso);
  for (size_t i = 0; i < p->ntablets; i++) {
    int mine = fixed && strcmp(fixed, p->tablets[i].name) == 0;
    snprintf(ep, sizeof ep, "127.0.0.1:%d", mine ? fixed_port : 0);
    json_array_append_new(tablets, tablet_json(p, &p->tablets[i], ep, 1));
  }
  json_object_set_new(root, "tablets", tablets);
  if (p->nservers) json_object_set_new(root, "servers", servers_json(p, fixed, fixed_port, 1, 0));
  merge_extra(p, root);
  return write_json(root, path, err);
}

/* What clients read: the endpoints the roles bound, and the workers' section. */
static pc_status_t write_client_config(const pc_pg_t *p, pc_error_t *err) {
  json_t *root = json_object(), *tso = json_object(), *tablets = json_array();
  json_object_set_new(root, "zookeeper", zk_json(p));
  for (size_t i = 0; i < p->nroles; i++)
    if ((p->roles[i].kind == PC_PG_TSO || p->roles[i].kind == PC_PG_SERVER) &&
        p->roles[i].listen[0]) {
      json_object_set_new(tso, "listen", json_string(p->roles[i].listen));
      break;
    }
  json_object_set_new(root, "tso", tso);
  for (size_t i = 0; i < p->ntablets; i++)
    json_array_append_new(tablets, tablet_json(p, &p->tablets[i], p->tablet_listen[i], 0));
  json_object_set_new(root, "tablets", tablets);
  if (p->nservers) json_object_set_new(root, "servers", servers_json(p, NULL, 0, 0, 1));
  if (p->nplugins) {
    json_t *w = json_object(), *plugins = json_array();
    json_object_set_new(w, "http", json_string("127.0.0.1:0"));
    for (size_t i = 0; i < p->nplugins; i++) {
      json_t *pl = json_object();
      json_object_set_new(pl, "path", json_string(p->plugins[i]));
      json_array_append_new(plugins, pl);
    }
    json_object_set_new(w, "plugins", plugins);
    json_object_set_new(root, "workers", w);
  }
  merge_extra(p, root);
  return write_json(root, p->client_config, err);
}

/* ---- processes ----------------------------------------------------------------- */

static const char *verb_of(pc_pg_kind_t k) {
  switch (k) {
    case PC_PG_TSO: return "tso";
    case PC_PG_SERVER: return "run";
    case PC_PG_TABLET: return "tablet";
    case PC_PG_WORKER: return "worker";
    default: return "";
  }
}

static pc_status_t spawn(pc_pg_t *p, pc_pg_role_t *r, const char *config, pc_error_t *err) {
  unlink(r->ready);
  r->listen[0] = r->http[0] = '\0';
  r->exit_status = -1;
  r->leading = 0;
  r->is_ready = 0;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return pc_error_set(err, PC_IO_ERROR, "%s: fork: %s", r->name, strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the process that started it */
    if (getppid() != parent) _exit(1);
    setpgid(0, 0); /* a terminal's Ctrl-C reaches the caller, which stops this in order */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the caller's blocked signals are its own */
    int fd = open(r->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(1);
    const char *argv[10];
    int n = 0;
    argv[n++] = p->cli;
    argv[n++] = "--config";
    argv[n++] = config;
    argv[n++] = verb_of(r->kind);
    if (r->kind == PC_PG_TABLET) {
      argv[n++] = "--name";
      argv[n++] = r->tablet;
    }
    argv[n++] = "--ready-file";
    argv[n++] = r->ready;
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  r->pid = pid;
  return PC_OK;
}

/* Copies the string at key of o into out; 1 when there was one. */
static int get_endpoint(json_t *o, const char *key, char *out, size_t cap) {
  const char *s = json_string_value(json_object_get(o, key));
  if (!s) return 0;
  snprintf(out, cap, "%s", s);
  return 1;
}

static int tablet_index(const pc_pg_t *p, const char *name) {
  for (size_t i = 0; i < p->ntablets; i++)
    if (strcmp(p->tablets[i].name, name) == 0) return (int)i;
  return -1;
}

/* Reads r's ready file: 1 once it names what r serves. */
static int read_ready(pc_pg_t *p, pc_pg_role_t *r) {
  json_t *j = json_load_file(r->ready, 0, NULL);
  if (!j) return 0;
  int ok = 0;
  json_t *tablets = json_object_get(j, "tablets");
  switch (r->kind) {
    case PC_PG_TSO:
    case PC_PG_SERVER:
      ok = get_endpoint(json_object_get(j, "tso"), "listen", r->listen, sizeof r->listen);
      get_endpoint(json_object_get(j, "tso"), "http", r->http, sizeof r->http);
      if (ok && r->kind == PC_PG_SERVER && !p->nservers)
        for (size_t i = 0; i < p->ntablets; i++)
          ok &= get_endpoint(json_object_get(tablets, p->tablets[i].name), "listen",
                             p->tablet_listen[i], sizeof p->tablet_listen[i]);
      break;
    case PC_PG_TABLET: {
      json_t *o = json_object_get(p->nservers ? json_object_get(j, "servers") : tablets, r->tablet);
      ok = get_endpoint(o, "listen", r->listen, sizeof r->listen);
      get_endpoint(o, "http", r->http, sizeof r->http);
      int t = tablet_index(p, r->tablet);
      if (ok && t >= 0) snprintf(p->tablet_listen[t], sizeof p->tablet_listen[t], "%s", r->listen);
      break;
    }
    case PC_PG_WORKER:
      ok = json_object_get(j, "workers") != NULL;
      get_endpoint(json_object_get(j, "workers"), "http", r->http, sizeof r->http);
      break;
    default: break;
  }
  json_decref(j);
  return ok;
}

/* The last line of a log, for a message. */
static void last_line(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof line, f))
    if (line[0] != '\n') snprintf(out, cap, "%.*s", (int)strcspn(line, "\n"), line);
  fclose(f);
}

/* Whether r has exited (reaped, its status kept). */
static int reap(pc_pg_t *p, pc_pg_role_t *r) {
  if (r->kind == PC_PG_ZOOKEEPER) {
    if (!p->zk || r->pid == 0) return r->exit_status >= 0;
    if (!pc_zkserver_exited(p->zk, r->index)) return 0;
    r->pid = 0;
    r->exit_status = 0;
    return 1;
  }
  if (r->pid <= 0) return r->exit_status >= 0;
  int status = 0;
  pid_t got = waitpid(r->pid, &status, WNOHANG);
  if (got == 0 || (got < 0 && errno != ECHILD)) return 0;
  /* ECHILD: the caller reaped it itself (a test that killed it) */
  r->exit_status = got > 0 ? status : 0;
  r->pid = 0;
  return 1;
}

/* "exit 3" / "signal 9" */
static void describe_exit(int status, char *out, size_t cap) {
  if (WIFSIGNALED(status)) snprintf(out, cap, "killed by signal %d", WTERMSIG(status));
  else snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
}

/* Waits until every started role of the given kinds is ready. */
static pc_status_t wait_ready(pc_pg_t *p, const int *kinds, size_t nkinds, uint32_t wait_ms,
                              pc_error_t *err) {
  uint64_t until = pc_now_mono_ms() + wait_ms;
  for (;;) {
    int pending = 0;
    for (size_t i = 0; i < p->nroles; i++) {
      pc_pg_role_t *r = &p->roles[i];
      int mine = 0;
      for (size_t k = 0; k < nkinds; k++) mine |= (int)r->kind == kinds[k];
      if (!mine || r->pid <= 0 || r->is_ready) continue;
      if ((r->is_ready = read_ready(p, r))) continue;
      if (reap(p, r)) {
        char how[64], line[600];
        describe_exit(r->exit_status, how, sizeof how);
        last_line(r->log, line, sizeof line);
        return pc_error_set(err, PC_UNAVAILABLE, "%s %s while starting (%s): %s", r->name, how,
                            r->log, line);
      }
      pending = 1;
    }
    if (!pending) break;
    if (pc_now_mono_ms() >= until)
      return pc_error_set(err, PC_TIMEOUT, "playground: not every role was ready within %u ms "
                          "(see %s/logs)", wait_ms, p->dir);
    pc_sleep_ms(20);
  }
  return PC_OK;
}

/* A replicated playground serves once each tablet's group has elected a
 * leader, which then holds tablets/<name>/owner: waits for every owner
 * node until deadline (monotonic ms), so that what runs next (a client, a
 * status) finds every tablet led. */
static pc_status_t wait_leaders(pc_pg_t *p, uint64_t until, pc_error_t *err) {
  if (!p->nservers) return PC_OK;
  uint64_t now = pc_now_mono_ms();
  pc_zk_options_t zo = {p->zk_connect, p->zk_root, NULL, 10000, NULL}; /* exists needs no ACL */
  pc_zk_t *zk = pc_zk_open(&zo, (uint32_t)(until > now ? until - now : 1), NULL, err);
  if (!zk) return err->code;
  pc_status_t st = PC_OK;
  for (size_t i = 0; st == PC_OK && i < p->ntablets;) {
    char rel[160];
    int exists = 0;
    snprintf(rel, sizeof rel, "tablets/%s/owner", p->tablets[i].name);
    now = pc_now_mono_ms();
    st = now < until ? pc_zk_exists(zk, rel, NULL, &exists, (uint32_t)(until - now), err)
                     : pc_error_set(err, PC_TIMEOUT, "playground: tablet %s elected no leader "
                                    "(see %s/logs)", p->tablets[i].name, p->dir);
    if (st == PC_NOT_FOUND) st = PC_OK; /* its parent is not made yet */
    if (st == PC_OK && exists) i++;
    else if (st == PC_OK) pc_sleep_ms(20);
  }
  pc_zk_close(zk);
  return st;
}

pc_status_t pc_pg_start(pc_pg_t *p, uint32_t wait_ms, pc_error_t *err) {
  pc_error_clear(err);
  pc_status_t st = PC_OK;
  if (p->own_zk) {
    char zdir[PATH_MAX + 16];
    snprintf(zdir, sizeof zdir, "%s/zookeeper", p->dir);
    if (!(p->zk = pc_zkserver_start(zdir, p->zk_servers, (int)wait_ms, err))) return err->code;
    snprintf(p->zk_connect, sizeof p->zk_connect, "%s", pc_zkserver_connect(p->zk));
    for (size_t i = 0; i < p->nroles; i++)
      if (p->roles[i].kind == PC_PG_ZOOKEEPER) {
        pc_pg_role_t *r = &p->roles[i];
        r->pid = pc_zkserver_pid(p->zk, r->index);
        snprintf(r->listen, sizeof r->listen, "127.0.0.1:%d", pc_zkserver_port(p->zk, r->index));
      }
  }
  if (p->zookeeper_only) return PC_OK;
  st = write_daemons_config(p, p->daemons_config, NULL, 0, err);
  /* the oracles and tablets at once: tablets find the leader in ZooKeeper */
  for (size_t i = 0; st == PC_OK && i < p->nroles; i++) {
    pc_pg_role_t *r = &p->roles[i];
    if (r->kind == PC_PG_TSO || r->kind == PC_PG_SERVER || r->kind == PC_PG_TABLET)
      st = spawn(p, r, p->daemons_config, err);
  }
  static const int servers[] = {PC_PG_TSO, PC_PG_SERVER, PC_PG_TABLET};
  if (st == PC_OK) st = wait_ready(p, servers, 3, wait_ms, err);
  if (st == PC_OK) st = wait_leaders(p, pc_now_mono_ms() + wait_ms, err);
  if (st == PC_OK) st = write_client_config(p, err);
  for (size_t i = 0; st == PC_OK && i < p->nroles; i++)
    if (p->roles[i].kind == PC_PG_WORKER) st = spawn(p, &p->roles[i], p->client_config, err);
  static const int workers[] = {PC_PG_WORKER};
  if (st == PC_OK) st = wait_ready(p, workers, 1, wait_ms, err);
  if (st != PC_OK) pc_pg_stop(p);
  return st;
}

/* Stops the running roles of the given kinds: SIGTERM to all, then each
 * waited for up to STOP_WAIT_MS, then SIGKILL. */
static void stop_kinds(pc_pg_t *p, const int *kinds, size_t nkinds) {
  for (size_t i = 0; i < p->nroles; i++)
    for (size_t k = 0; k < nkinds; k++)
      if ((int)p->roles[i].kind == kinds[k] && p->roles[i].pid > 0) kill(p->roles[i].pid, SIGTERM);
  uint64_t until = pc_now_mono_ms() + STOP_WAIT_MS;
  for (size_t i = 0; i < p->nroles; i++) {
    pc_pg_role_t *r = &p->roles[i];
    int mine = 0;
    for (size_t k = 0; k < nkinds; k++) mine |= (int)r->kind == kinds[k];
    if (!mine) continue;
    while (r->pid > 0 && !reap(p, r) && pc_now_mono_ms() < until) pc_sleep_ms(10);
    if (r->pid > 0) {
      kill(r->pid, SIGKILL);
      int status;
      if (waitpid(r->pid, &status, 0) == r->pid) r->exit_status = status;
      r->pid = 0;
    }
  }
}

void pc_pg_stop(pc_pg_t *p) {
  if (!p) return;
  static const int workers[] = {PC_PG_WORKER}, tablets[] = {PC_PG_TABLET},
                   oracles[] = {PC_PG_TSO, PC_PG_SERVER};
  stop_kinds(p, workers, 1);
  stop_kinds(p, tablets, 1);
  stop_kinds(p, oracles, 2);
  pc_tso_locator_destroy(p->locator);
  p->locator = NULL;
  pc_zkserver_stop(p->zk);
  p->zk = NULL;
  for (size_t i = 0; i < p->nroles; i++)
    if (p->roles[i].kind == PC_PG_ZOOKEEPER && p->roles[i].pid > 0) {
      p->roles[i].pid = 0;
      p->roles[i].exit_status = 0;
    }
}

void pc_pg_free(pc_pg_t *p) {
  if (!p) return;
  pc_pg_stop(p);
  for (size_t i = 0; i < p->ntablets; i++) {
    free(p->tablets[i].start);
    free(p->tablets[i].end);
  }
  for (size_t i = 0; i < p->nplugins; i++) free(p->plugins[i]);
  json_decref(p->extra);
  free(p);
}

size_t pc_pg_role_count(const pc_pg_t *p) { return p->nroles; }
const pc_pg_role_t *pc_pg_role(const pc_pg_t *p, size_t i) {
  return i < p->nroles ? &p->roles[i] : NULL;
}
int pc_pg_find(const pc_pg_t *p, const char *name) {
  for (size_t i = 0; i < p->nroles; i++)
    if (strcmp(p->roles[i].name, name) == 0) return (int)i;
  return -1;
}
size_t pc_pg_tablet_count(const pc_pg_t *p) { return p->ntablets; }
const pc_pg_tablet_t *pc_pg_tablet(const pc_pg_t *p, size_t i) {
  return i < p->ntablets ? &p->tablets[i] : NULL;
}
const char *pc_pg_client_config(const pc_pg_t *p) { return p->client_config; }
const char *pc_pg_zk_connect(const pc_pg_t *p) { return p->zk_connect; }
const char *pc_pg_zk_root(const pc_pg_t *p) { return p->zk_root; }
const char *pc_pg_dir(const pc_pg_t *p) { return p->dir; }

void pc_pg_forget(pc_pg_t *p, size_t i) {
  if (i >= p->nroles || p->roles[i].kind == PC_PG_ZOOKEEPER) return;
  if (p->roles[i].pid > 0) p->roles[i].exit_status = 0;
  p->roles[i].pid = 0;
}

void pc_pg_signal(pc_pg_t *p, size_t i, int sig) {
  if (i >= p->nroles) return;
  pc_pg_role_t *r = &p->roles[i];
  if (r->kind == PC_PG_ZOOKEEPER) {
    if (p->zk && sig == SIGKILL) pc_zkserver_kill(p->zk, r->index), r->pid = 0, r->exit_status = 0;
    else if (r->pid > 0) kill(r->pid, sig);
    return;
  }
  if (r->pid <= 0) return;
  kill(r->pid, sig);
  if (sig == SIGKILL) {
    int status;
    if (waitpid(r->pid, &status, 0) == r->pid) r->exit_status = status;
    r->pid = 0;
  }
}

pc_status_t pc_pg_restart(pc_pg_t *p, size_t i, int moved, uint32_t wait_ms, pc_error_t *err) {
  pc_error_clear(err);
  if (i >= p->nroles) return pc_error_set(err, PC_INVALID, "playground: no role %zu", i);
  pc_pg_role_t *r = &p->roles[i];
  if (r->kind != PC_PG_ZOOKEEPER && r->pid > 0) {
    /* exited, but left for whoever killed it to reap (WNOWAIT) */
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)r->pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0)
      return pc_error_set(err, PC_STATE, "playground: %s still runs (pid %d)", r->name,
                          (int)r->pid);
    r->pid = 0;
  } else if (r->kind == PC_PG_ZOOKEEPER && r->pid > 0 && !reap(p, r)) {
    return pc_error_set(err, PC_STATE, "playground: %s still runs", r->name);
  }
  if (r->kind == PC_PG_ZOOKEEPER) {
    if (!p->zk || pc_zkserver_restart(p->zk, r->index) != 0)
      return pc_error_set(err, PC_IO_ERROR, "playground: cannot start %s again", r->name);
    r->pid = pc_zkserver_pid(p->zk, r->index);
    r->exit_status = -1;
    return PC_OK;
  }
  const char *config = p->daemons_config;
  char restart[PATH_MAX + 128];
  pc_status_t st = PC_OK;
  if (r->kind == PC_PG_WORKER) {
    config = p->client_config;
  } else if (r->kind == PC_PG_TABLET && !moved) {
    const char *colon = strrchr(r->listen, ':');
    snprintf(restart, sizeof restart, "%s/run/%s.json", p->dir, r->name);
    st = write_daemons_config(p, restart, r->tablet, colon ? atoi(colon + 1) : 0, err);
    config = restart;
  }
  if (st == PC_OK) st = spawn(p, r, config, err);
  int kinds[1] = {(int)r->kind};
  if (st == PC_OK) st = wait_ready(p, kinds, 1, wait_ms, err);
  return st;
}

/* ---- watching ---------------------------------------------------------------- */

static void say(char *out, size_t cap, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(char *out, size_t cap, size_t *used, const char *fmt, ...) {
  if (*used >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *used, cap - *used, fmt, ap);
  va_end(ap);
  if (n > 0) *used = *used + (size_t)n < cap ? *used + (size_t)n : cap;
}

size_t pc_pg_poll(pc_pg_t *p, char *out, size_t cap) {
  size_t changes = 0, used = 0;
  if (cap) out[0] = '\0';
  for (size_t i = 0; i < p->nroles; i++) {
    pc_pg_role_t *r = &p->roles[i];
    if (r->pid <= 0 || !reap(p, r)) continue;
    char how[64];
    describe_exit(r->exit_status, how, sizeof how);
    say(out, cap, &used, "%s %s (log: %s)\n", r->name, how, r->log);
    if (r->leading) r->leading = 0;
    changes++;
  }
  if (!p->locator && p->zk_connect[0]) {
    pc_error_t err;
    pc_zk_options_t zo = {p->zk_connect, p->zk_root, NULL, 10000, NULL};
    p->locator = pc_tso_locator_create(&zo, NULL, 2000, &err);
  }
  if (p->locator) {
    char leader[300] = "";
    pc_tso_locator_members(p->locator, leader, sizeof leader, NULL, 0);
    for (size_t i = 0; i < p->nroles; i++) {
      pc_pg_role_t *r = &p->roles[i];
      if (r->kind != PC_PG_TSO && r->kind != PC_PG_SERVER) continue;
      int leads = r->pid > 0 && r->listen[0] && strcmp(r->listen, leader) == 0;
      if (leads != r->leading) {
        r->leading = leads;
        if (leads) {
          say(out, cap, &used, "%s leads the oracles (%s)\n", r->name, r->listen);
          changes++;
        }
      }
    }
  }
  return changes;
}

static const char *kind_name(pc_pg_kind_t k) {
  static const char *const names[] = {"zookeeper", "tso", "server", "tablet", "worker"};
  return names[k];
}

pc_status_t pc_pg_write_state(const pc_pg_t *p, const char *path, pc_error_t *err) {
  json_t *root = json_object(), *roles = json_array();
  json_object_set_new(root, "dir", json_string(p->dir));
  json_object_set_new(root, "client_config", json_string(p->client_config));
  json_object_set_new(root, "zookeeper", json_string(p->zk_connect));
  json_object_set_new(root, "root", json_string(p->zk_root));
  json_object_set_new(root, "pid", json_integer(getpid()));
  for (size_t i = 0; i < p->nroles; i++) {
    const pc_pg_role_t *r = &p->roles[i];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(r->name));
    json_object_set_new(o, "kind", json_string(kind_name(r->kind)));
    json_object_set_new(o, "pid", json_integer(r->pid));
    json_object_set_new(o, "listen", json_string(r->listen));
    json_object_set_new(o, "http", json_string(r->http));
    json_object_set_new(o, "log", json_string(r->log));
    json_object_set_new(o, "state", json_string(r->pid > 0 ? "running" : "exited"));
    if (r->pid <= 0 && r->exit_status >= 0 && WIFEXITED(r->exit_status))
      json_object_set_new(o, "exit_code", json_integer(WEXITSTATUS(r->exit_status)));
    else if (r->pid <= 0 && r->exit_status >= 0 && WIFSIGNALED(r->exit_status))
      json_object_set_new(o, "exit_signal", json_integer(WTERMSIG(r->exit_status)));
    if (r->kind == PC_PG_TSO || r->kind == PC_PG_SERVER)
      json_object_set_new(o, "leading", json_boolean(r->leading));
    if (r->kind == PC_PG_TABLET) json_object_set_new(o, "tablet", json_string(r->tablet));
    json_array_append_new(roles, o);
  }
  json_object_set_new(root, "roles", roles);
  return write_json(root, path, err);
}
