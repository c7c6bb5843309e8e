/* client_config.c — the configurations a daemon process deals in: its own
 * (validated, with its JSON kept), the one a `worker` serves an embedded
 * data directory with, and the client configuration of the roles this
 * process runs, with the ports they bound, from which its collector and
 * workers open their clients (in memory) and which a serving worker writes
 * to DIR/serving.json for other processes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
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

pc_status_t pc_daemon_config_serving(const char *path, const char *data_dir,
                                     pc_daemon_config_t *out, pc_error_t *err) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *root = path ? json_load_file(path, 0, &je) : json_object();
  if (!root) {
    return path ? pc_error_set(err, PC_INVALID, "%s: %s", path, je.text)
                : pc_error_set(err, PC_NOMEM, "out of memory");
  }
  json_t *tso = json_object(), *t = json_object(), *ts = json_array();
  json_object_set_new(tso, "listen", json_string("127.0.0.1:0"));
  json_object_set_new(tso, "data_dir", json_string(data_dir));
  json_object_set_new(t, "name", json_string("local"));
  json_object_set_new(t, "listen", json_string("127.0.0.1:0"));
  json_object_set_new(t, "data_dir", json_string(data_dir));
  json_array_append_new(ts, t);
  json_object_set_new(root, "data_dir", json_string(data_dir));
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
    json_t *o = r->kind == ROLE_TSO ? json_object_get(root, "tso")
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
  int ok = off == n;
  if (close(fd) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno ? errno : EIO;
    unlink(tmp);
    return pc_error_set(err, PC_IO_ERROR, "cannot write %s: %s", path, strerror(e));
  }
  return PC_OK;
}
