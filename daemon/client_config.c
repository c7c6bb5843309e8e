/* client_config.c — the configurations a daemon process deals in: its own
 * (validated, with its JSON kept), the one a `worker` serves an embedded
 * data directory with, and the client configuration of the roles this
 * process runs, with the ports they bound, from which its collector and
 * workers open their clients (in memory) and which a serving worker writes
 * to DIR/serving.json for other processes (and reads again when it starts:
 * the same ports, when they are free, and the same secret let the clients
 * of the worker before reconnect; workers.serve_ports pins the ports). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/error.h"
#include "daemon/daemon_internal.h"

pc_status_t pc_daemon_config_load(const char *path, pc_daemon_config_t *out, pc_error_t *err) {
  memset(out, 0, sizeof *out);
  if (!(out->cfg = pc_config_load(path, err))) return err->code;
  json_error_t je;
  if (!(out->json = json_load_file(path, 0, &je))) {
    pc_daemon_config_free(out);
    return pc_error_set(err, PC_IO_ERROR, "%s: %s", path, je.text);
  }
  return PC_OK;
}

/* Whether 127.0.0.1:port can be listened on now (as the servers bind it). */
static int port_free(long port) {
  if (port <= 0 || port > 65535) return 0;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* "127.0.0.1:PORT" where a served role listens: the port the configuration
 * pins (workers.serve_ports.KEY of root: an error when it is taken), else
 * the one of the listen endpoint at o in the previous serving.json when
 * that port is free now, else 0 (the kernel picks one). NULL with err set. */
static json_t *serving_endpoint(json_t *root, const char *key, json_t *o, pc_error_t *err) {
  json_t *pin = json_object_get(json_object_get(json_object_get(root, "workers"), "serve_ports"),
                                key);
  long port = 0;
  char buf[32];
  if (json_is_integer(pin)) {
    port = (long)json_integer_value(pin);
    if (port >= 1 && port <= 65535 && !port_free(port)) {
      pc_error_set(err, PC_BUSY, "workers.serve_ports.%s: port %ld of 127.0.0.1 is taken", key,
                   port);
      return NULL;
    }
  } else {
    const char *ep = json_string_value(json_object_get(o, "listen"));
    const char *colon = ep ? strrchr(ep, ':') : NULL;
    port = colon && strncmp(ep, "127.0.0.1:", 10) == 0 ? strtol(colon + 1, NULL, 10) : 0;
    if (!port_free(port)) port = 0;
  }
  snprintf(buf, sizeof buf, "127.0.0.1:%ld", port);
  json_t *j = json_string(buf);
  if (!j) pc_error_set(err, PC_NOMEM, "out of memory");
  return j;
}

/* A fresh random secret, 64 hex digits, into out (65 bytes); 0 or -1. */
static int random_secret(char out[65]) {
  unsigned char b[32];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return -1;
  for (size_t i = 0; i < sizeof b; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
  return 0;
}

pc_status_t pc_daemon_config_serving(const char *path, const char *data_dir,
                                     pc_daemon_config_t *out, pc_error_t *err) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *root = path ? json_load_file(path, 0, &je) : json_object();
  if (!root) {
    return path ? pc_error_set(err, PC_INVALID, "%s: %s", path, je.text)
                : pc_error_set(err, PC_NOMEM, "out of memory");
  }
  /* the ports (and the secret, below) of the worker before, so that its
   * clients reconnect to this one */
  char prev_path[4200];
  snprintf(prev_path, sizeof prev_path, "%s/" PC_DAEMON_SERVING_FILE, data_dir);
  json_t *prev = json_load_file(prev_path, 0, &je); /* NULL: none, or unreadable */
  json_t *tso = json_object(), *t = json_object(), *ts = json_array();
  json_t *tso_ep = serving_endpoint(root, "tso", json_object_get(prev, "tso"), err);
  json_t *t_ep = tso_ep ? serving_endpoint(root, "tablet",
                                           json_array_get(json_object_get(prev, "tablets"), 0), err)
                        : NULL;
  if (!t_ep) {
    json_decref(tso_ep);
    json_decref(tso);
    json_decref(t);
    json_decref(ts);
    json_decref(prev);
    json_decref(root);
    pc_error_prefix(err, "%s", path ? path : "(defaults)");
    return err->code;
  }
  json_object_set_new(tso, "listen", tso_ep);
  json_object_set_new(tso, "data_dir", json_string(data_dir));
  json_object_set_new(t, "name", json_string("local"));
  json_object_set_new(t, "listen", t_ep);
  json_object_set_new(t, "data_dir", json_string(data_dir));
  json_array_append_new(ts, t);
  json_object_set_new(root, "data_dir", json_string(data_dir));
  /* only this user's processes may reach the store it serves: without
   * credentials of its own, the configuration gets a secret that only
   * serving.json (mode 0600) tells */
  if (!json_object_get(root, "secret") && !json_object_get(root, "system_secret") &&
      !json_object_get(root, "tls")) {
    /* the worker before's, so that its clients' sessions go on with this one */
    const char *old = json_string_value(json_object_get(prev, "secret"));
    char secret[65];
    if (old && strlen(old) == 64 && strspn(old, "0123456789abcdef") == 64) {
      memcpy(secret, old, sizeof secret);
    } else if (random_secret(secret) != 0) {
      json_decref(prev);
      json_decref(root);
      return pc_error_set(err, PC_IO_ERROR, "getrandom: %s", strerror(errno));
    }
    json_object_set_new(root, "secret", json_string(secret));
  }
  json_decref(prev);
  json_object_set_new(root, "tso", tso);
  json_object_set_new(root, "tablets", ts);
  /* no cluster: one process serves the directory, without coordination */
  json_object_del(root, "zookeeper");
  json_object_set_new(root, "served", json_string(data_dir));
  char *text = json_dumps(root, JSON_INDENT(1));
  char name[4200];
  snprintf(name, sizeof name, "%s (serving %s)", path ? path : "(defaults)", data_dir);
  if (text) out->cfg = pc_config_parse(text, strlen(text), name, err);
  else pc_error_set(err, PC_NOMEM, "out of memory");
  free(text);
  if (!out->cfg) {
    json_decref(root);
    return err->code;
  }
  out->json = root;
  return PC_OK;
}

void pc_daemon_config_free(pc_daemon_config_t *c) {
  if (!c) return;
  pc_config_free(c->cfg);
  json_decref(c->json);
  c->cfg = NULL;
  c->json = NULL;
}

/* The entry of tablet name in the configuration's "tablets", or NULL. */
static json_t *tablet_entry(json_t *root, const char *name) {
  json_t *ts = json_object_get(root, "tablets");
  for (size_t k = 0; k < json_array_size(ts); k++) {
    json_t *t = json_array_get(ts, k);
    const char *n = json_string_value(json_object_get(t, "name"));
    if (n && strcmp(n, name) == 0) return t;
  }
  return NULL;
}

/* The entry of server name in the configuration's "servers", or NULL. */
static json_t *server_entry(json_t *root, const char *name) {
  json_t *ss = json_object_get(root, "servers");
  for (size_t k = 0; k < json_array_size(ss); k++) {
    json_t *t = json_array_get(ss, k);
    const char *n = json_string_value(json_object_get(t, "name"));
    if (n && strcmp(n, name) == 0) return t;
  }
  return NULL;
}

char *pc_daemon_client_text(const pc_daemon_t *d, pc_error_t *err) {
  json_t *root = json_deep_copy(d->c->json);
  if (!root) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < d->nroles; i++) {
    const role_t *r = &d->roles[i];
    char ep[64];
    pc_daemon_role_endpoint(r, ep, sizeof ep);
    json_t *o = r->kind == ROLE_TSO      ? json_object_get(root, "tso")
                : r->kind == ROLE_SERVER ? server_entry(root, pc_daemon_tablet_name(r))
                                         : tablet_entry(root, pc_daemon_tablet_name(r));
    if (o) json_object_set_new(o, "listen", json_string(ep));
  }
  char *text = json_dumps(root, 0);
  json_decref(root);
  if (!text) pc_error_set(err, PC_NOMEM, "out of memory");
  return text;
}

pc_config_t *pc_daemon_client_config(const pc_daemon_t *d, pc_error_t *err) {
  char *text = pc_daemon_client_text(d, err);
  if (!text) return NULL;
  pc_config_t *cfg = pc_config_parse(text, strlen(text), d->cfg->source, err);
  free(text);
  return cfg;
}

pc_status_t pc_daemon_write_file(const char *path, const char *text, pc_error_t *err) {
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp)
    return pc_error_set(err, PC_INVALID, "path too long: %s", path);
  int fd = mkstemp(tmp); /* mode 0600, beside path: the rename stays on one filesystem */
  if (fd < 0) return pc_error_set(err, PC_IO_ERROR, "cannot write %s: %s", path, strerror(errno));
  size_t n = strlen(text), off = 0;
  errno = 0;
  while (off < n) {
    ssize_t w = write(fd, text + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  int ok = off == n && fsync(fd) == 0; /* the file is whole after a crash, or the old one */
  if (close(fd) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno ? errno : EIO;
    unlink(tmp);
    return pc_error_set(err, PC_IO_ERROR, "cannot write %s: %s", path, strerror(e));
  }
  /* the rename too: a crash of the machine leaves this file, not the one before */
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
  int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return PC_OK;
}
