/* plugin.c — the host side of the observer plugin ABI (percolator/observer.h):
 * opens a private copy of a plugin's shared object, refuses it unless its
 * pc_plugin_magic describes an ABI this host implements, hands its
 * pc_plugin_init a table of the library's own functions (pc_txn_get, ...),
 * and undoes everything a failed init did to the registry before closing the
 * library again. One registry never holds the same build of a file twice
 * (its observers' names would clash, and a second entry of one file in a
 * configuration is a mistake worth naming).
 *
 * The private copy: the file's bytes are copied into an anonymous memory
 * file (memfd) and the library is loaded from there, so that a new build
 * copied over the file (cp truncates and rewrites it in place, under the
 * pages the loader mapped) cannot change the code a running process
 * executes. pc_plugin_changed tells when the file on disk is no longer the
 * one loaded. */
#include "observers/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"

/* The size of pc_plugin_magic_t in ABI 1.0: every field the host reads. */
#define MAGIC_SIZE_1_0 (offsetof(pc_plugin_magic_t, version) + sizeof(const char *))
/* The part of pc_observer_def_t that ABI 1.0 had: up to state_free. */
#define DEF_SIZE_1_0 (offsetof(pc_observer_def_t, state_free) + sizeof(void (*)(void *)))

_Static_assert(PC_PLUGIN_LOG_DEBUG == (int)PC_LOG_DEBUG && PC_PLUGIN_LOG_INFO == (int)PC_LOG_INFO &&
                   PC_PLUGIN_LOG_WARN == (int)PC_LOG_WARN &&
                   PC_PLUGIN_LOG_ERROR == (int)PC_LOG_ERROR,
               "plugin log levels are the host's");

struct pc_plugin_reg {
  pc_plugin_t *plugin;
  pc_observer_registry_t *registry;
  int open; /* 1 only while pc_plugin_init runs */
};

struct pc_plugin {
  void *dl;
  char *path;
  pc_plugin_file_t file; /* the file's identity when it was copied */
  int copy;              /* the memfd of the private copy, open while loaded */
  char *name;
  char *version;
  int abi_minor;
  pc_plugin_teardown_fn teardown;
  pc_observer_registry_t *registry;
  pc_host_api_t api; /* this plugin's copy: host_ctx is the plugin, for log lines */
  pc_plugin_reg_t reg;
  pc_plugin_t *next; /* in the list of loaded libraries */
};

/* Every library loaded (or being initialised) in this process. */
static pthread_mutex_t loaded_lock = PTHREAD_MUTEX_INITIALIZER;
static pc_plugin_t *loaded;

static int same_file(const pc_plugin_file_t *a, const pc_plugin_file_t *b);

/* Adds p to the loaded list and returns 0, unless the same build of its file
 * is loaded into its registry already: then returns -1 with the path it was
 * loaded from in other_path. (Each load is a copy with globals of its own,
 * so a registry that replaces another may load the same file again.) */
static int loaded_claim(pc_plugin_t *p, char *other_path, size_t cap) {
  pthread_mutex_lock(&loaded_lock);
  for (const pc_plugin_t *q = loaded; q; q = q->next)
    if (q->registry == p->registry && same_file(&q->file, &p->file)) {
      snprintf(other_path, cap, "%s", q->path);
      pthread_mutex_unlock(&loaded_lock);
      return -1;
    }
  p->next = loaded;
  loaded = p;
  pthread_mutex_unlock(&loaded_lock);
  return 0;
}

/* Whether dl is the library of a loaded plugin. */
static int loaded_handle(const void *dl) {
  pthread_mutex_lock(&loaded_lock);
  const pc_plugin_t *q = loaded;
  while (q && q->dl != dl) q = q->next;
  pthread_mutex_unlock(&loaded_lock);
  return q != NULL;
}

static void loaded_release(pc_plugin_t *p) {
  pthread_mutex_lock(&loaded_lock);
  for (pc_plugin_t **pp = &loaded; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  pthread_mutex_unlock(&loaded_lock);
  p->next = NULL;
}

/* ---- the host's functions ---------------------------------------------------- */

static void host_log(void *host_ctx, int level, const char *fmt, ...) PC_PRINTF_LIKE(3, 4);
static void host_log(void *host_ctx, int level, const char *fmt, ...) {
  const pc_plugin_t *p = host_ctx;
  if (!fmt) return;
  if (level < PC_PLUGIN_LOG_DEBUG) level = PC_PLUGIN_LOG_DEBUG;
  if (level > PC_PLUGIN_LOG_ERROR) level = PC_PLUGIN_LOG_ERROR;
  char text[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  pc_log((pc_log_level_t)level, "plugin %s: %s", p && p->name ? p->name : "?", text);
}

static pc_status_t host_register(pc_plugin_reg_t *reg, const pc_observer_def_t *def,
                                 pc_error_t *err) {
  pc_error_clear(err);
  if (!reg || !reg->plugin)
    return pc_error_set(err, PC_INVALID, "register_observer: registration context is NULL");
  if (!reg->open)
    return pc_error_set(err, PC_STATE,
                        "plugin '%s': observers are registered only during pc_plugin_init",
                        reg->plugin->name);
  if (!def) return pc_error_set(err, PC_INVALID, "register_observer: definition is NULL");
  /* A plugin built for minor 0 passes the definition of ABI 1.0, which ends
   * before observe_batch: read only that much of it, the rest counting as
   * absent (a member appended in minor m is read from plugins of minor >= m). */
  pc_observer_def_t d;
  if (reg->plugin->abi_minor >= 1) {
    d = *def;
  } else {
    memset(&d, 0, sizeof d);
    memcpy(&d, def, DEF_SIZE_1_0);
  }
  return pc_registry_add(reg->registry, &d, reg->plugin, reg->plugin->name, err);
}

static void api_init(pc_host_api_t *api, pc_plugin_t *p) {
  memset(api, 0, sizeof *api);
  api->size = sizeof *api;
  api->abi_major = PC_OBSERVER_ABI_MAJOR;
  api->abi_minor = PC_OBSERVER_ABI_MINOR;
  api->host_ctx = p;
  api->txn_get = pc_txn_get;
  api->txn_set = pc_txn_set;
  api->txn_delete = pc_txn_delete;
  api->txn_scan = pc_txn_scan;
  api->scan_next = pc_scan_next;
  api->scan_row = pc_scan_row;
  api->scan_column = pc_scan_column;
  api->scan_value = pc_scan_value;
  api->scan_destroy = pc_scan_destroy;
  api->txn_start_ts = pc_txn_start_ts;
  api->free = pc_free;
  api->status_name = pc_status_name;
  api->notify_weak = pc_txn_notify_weak;
  api->log = host_log;
  api->register_observer = host_register;
  /* ABI 1.1 */
  api->txn_get_many = pc_txn_get_many;
  api->txn_set_many = pc_txn_set_many;
  api->txn_scan_row = pc_txn_scan_row;
  api->txn_scan_prefix = pc_txn_scan_prefix;
}

/* ---- the private copy ------------------------------------------------------- */

static void file_identity(const struct stat *st, pc_plugin_file_t *f) {
  f->dev = (uint64_t)st->st_dev;
  f->ino = (uint64_t)st->st_ino;
  f->size = (uint64_t)st->st_size;
  f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int same_file(const pc_plugin_file_t *a, const pc_plugin_file_t *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

/* Copies the file at path into a new memfd (*fd), retrying while a writer
 * changes it under the copy; *id is the identity of the file copied. */
static pc_status_t private_copy(const char *path, pc_plugin_file_t *id, int *fd,
                                pc_error_t *err) {
  for (int attempt = 0; attempt < 20; attempt++) {
    int src = open(path, O_RDONLY | O_CLOEXEC);
    if (src < 0)
      return pc_error_set(err, PC_INVALID, "%s: cannot load plugin: %s", path, strerror(errno));
    struct stat before, after;
    if (fstat(src, &before) != 0 || !S_ISREG(before.st_mode)) {
      close(src);
      return pc_error_set(err, PC_INVALID, "%s: cannot load plugin: not a regular file", path);
    }
    int dst = memfd_create("percolator-plugin", MFD_CLOEXEC);
    if (dst < 0) {
      close(src);
      return pc_error_set(err, PC_IO_ERROR, "%s: cannot make a private copy: memfd_create: %s",
                          path, strerror(errno));
    }
    char buf[1 << 16];
    ssize_t r = 0;
    int failed = 0;
    while (!failed && (r = read(src, buf, sizeof buf)) > 0)
      for (ssize_t off = 0; off < r && !failed;) {
        ssize_t w = write(dst, buf + off, (size_t)(r - off));
        if (w <= 0) failed = 1;
        else off += w;
      }
    int stat_ok = fstat(src, &after) == 0;
    close(src);
    if (failed || r < 0 || !stat_ok) {
      int e = errno;
      close(dst);
      return pc_error_set(err, PC_IO_ERROR, "%s: cannot make a private copy: %s", path,
                          strerror(e));
    }
    pc_plugin_file_t a, b;
    file_identity(&before, &a);
    file_identity(&after, &b);
    struct stat now;
    if (same_file(&a, &b) && stat(path, &now) == 0) {
      pc_plugin_file_t c;
      file_identity(&now, &c);
      if (same_file(&a, &c)) { /* no writer changed it during the copy */
        *id = a;
        *fd = dst;
        return PC_OK;
      }
    }
    close(dst);
    usleep(50000); /* a new build being written: copy it once it is complete */
  }
  return pc_error_set(err, PC_BUSY, "%s: cannot load plugin: the file kept changing while it "
                      "was copied (a build still being written?)", path);
}

int pc_plugin_changed(const pc_plugin_t *p) {
  if (!p) return 0;
  struct stat st;
  if (stat(p->path, &st) != 0) return 1;
  pc_plugin_file_t now;
  file_identity(&st, &now);
  return !same_file(&now, &p->file);
}

/* ---- loading ----------------------------------------------------------------- */

static void plugin_free(pc_plugin_t *p) {
  if (!p) return;
  if (p->copy >= 0) close(p->copy);
  free(p->path);
  free(p->name);
  free(p->version);
  free(p);
}

/* Closes p's library (when open) and frees p. */
static void plugin_close(pc_plugin_t *p) {
  if (p->dl && dlclose(p->dl) != 0) {
    const char *why = dlerror();
    pc_log(PC_LOG_WARN, "%s: dlclose failed: %s", p->path, why ? why : "unknown error");
  }
  plugin_free(p);
}

/* 1..max printable ASCII bytes. */
static int printable(const char *s, size_t max) {
  if (!s) return 0;
  size_t n = strnlen(s, max + 1);
  if (n == 0 || n > max) return 0;
  for (size_t k = 0; k < n; k++)
    if ((unsigned char)s[k] < 0x20 || (unsigned char)s[k] >= 0x7F) return 0;
  return 1;
}

/* dlerror's text without a leading "<path>: " (the message names path itself). */
static const char *dl_reason(const char *path) {
  const char *why = dlerror();
  if (!why) return "unknown error";
  size_t n = strlen(path);
  if (strncmp(why, path, n) == 0 && why[n] == ':' && why[n + 1] == ' ') return why + n + 2;
  return why;
}

/* Checks the plugin's description; copies name and version into p. */
static pc_status_t check_magic(pc_plugin_t *p, const char *path, pc_error_t *err) {
  dlerror();
  pc_plugin_magic_fn magic_fn;
  void *sym = dlsym(p->dl, "pc_plugin_magic");
  memcpy(&magic_fn, &sym, sizeof magic_fn); /* object to function pointer, as POSIX allows */
  if (!magic_fn)
    return pc_error_set(err, PC_INVALID,
                        "%s: not a percolator observer plugin (no pc_plugin_magic)", path);
  const pc_plugin_magic_t *m = magic_fn();
  if (!m) return pc_error_set(err, PC_INVALID, "%s: pc_plugin_magic returned NULL", path);
  if (m->magic != PC_PLUGIN_MAGIC)
    return pc_error_set(err, PC_INVALID,
                        "%s: not a percolator observer plugin: pc_plugin_magic_t.magic is "
                        "0x%08x, expected 0x%08x (PC_PLUGIN_MAGIC)",
                        path, (unsigned)m->magic, (unsigned)PC_PLUGIN_MAGIC);
  if (m->struct_size < MAGIC_SIZE_1_0)
    return pc_error_set(err, PC_INVALID,
                        "%s: pc_plugin_magic_t.struct_size is %u, expected at least %zu "
                        "(define it with PC_PLUGIN_DECLARE)",
                        path, (unsigned)m->struct_size, (size_t)MAGIC_SIZE_1_0);
  if (m->abi_major != PC_OBSERVER_ABI_MAJOR)
    return pc_error_set(err, PC_INVALID,
                        "%s: pc_plugin_magic_t.abi_major is %d, this host implements observer "
                        "ABI %d (rebuild the plugin against this release's "
                        "<percolator/observer.h>)",
                        path, m->abi_major, PC_OBSERVER_ABI_MAJOR);
  if (!printable(m->name, PC_MAX_PLUGIN_NAME))
    return pc_error_set(err, PC_INVALID,
                        "%s: pc_plugin_magic_t.name must be 1..%d printable ASCII bytes", path,
                        PC_MAX_PLUGIN_NAME);
  if (!printable(m->version, PC_MAX_PLUGIN_NAME))
    return pc_error_set(err, PC_INVALID,
                        "%s: pc_plugin_magic_t.version must be 1..%d printable ASCII bytes", path,
                        PC_MAX_PLUGIN_NAME);
  if (!(p->name = strdup(m->name)) || !(p->version = strdup(m->version)))
    return pc_error_set(err, PC_NOMEM, "%s: out of memory", path);
  p->abi_minor = m->abi_minor;
  return PC_OK;
}

/* Calls the plugin's init; on failure the message is "<path>: init failed: ...". */
static pc_status_t run_init(pc_plugin_t *p, const char *path, const char *config_json,
                            pc_error_t *err) {
  dlerror();
  void *sym = dlsym(p->dl, "pc_plugin_init");
  pc_plugin_init_fn init;
  memcpy(&init, &sym, sizeof init);
  if (!init)
    return pc_error_set(err, PC_INVALID,
                        "%s: not a percolator observer plugin (no pc_plugin_init)", path);
  sym = dlsym(p->dl, "pc_plugin_teardown");
  memcpy(&p->teardown, &sym, sizeof p->teardown);

  pc_error_t perr;
  pc_error_clear(&perr);
  p->reg.open = 1;
  pc_status_t st = init(&p->api, &p->reg, config_json ? config_json : "{}", &perr);
  p->reg.open = 0;
  perr.text[PC_ERROR_TEXT - 1] = '\0';
  if (st == PC_OK) return PC_OK;
  if ((int)st < (int)PC_OK || (int)st > (int)PC_INTERNAL)
    return pc_error_set(err, PC_INTERNAL, "%s: init failed with an unknown status %d%s%s", path,
                        (int)st, perr.text[0] ? ": " : "", perr.text);
  if (!perr.text[0])
    return pc_error_set(err, st, "%s: init failed: %s (the plugin gave no message)", path,
                        pc_status_name(st));
  return pc_error_set(err, st, "%s: init failed: %s", path, perr.text);
}

pc_status_t pc_plugin_load(pc_observer_registry_t *registry, const char *path,
                           const char *config_json, pc_plugin_t **handle, pc_error_t *err) {
  pc_error_clear(err);
  if (handle) *handle = NULL;
  if (!registry || !path || !*path || !handle)
    return pc_error_set(err, PC_INVALID, "pc_plugin_load: %s",
                        !registry ? "registry is NULL"
                        : !handle ? "handle is NULL"
                                  : "plugin path is empty");
  pc_plugin_t *p = calloc(1, sizeof *p);
  if (p) p->copy = -1;
  if (!p || !(p->path = strdup(path))) {
    free(p);
    return pc_error_set(err, PC_NOMEM, "%s: out of memory", path);
  }
  p->registry = registry;
  p->reg.plugin = p;
  p->reg.registry = registry;
  api_init(&p->api, p);

  /* a path without '/' is relative to the working directory: open() takes it so */
  int copy = -1;
  pc_status_t cst = private_copy(path, &p->file, &copy, err);
  if (cst != PC_OK) {
    plugin_free(p);
    return cst;
  }
  /* The loader knows a library by its name first: the descriptor stays open
   * while the library is loaded, so that no other copy gets its name. */
  p->copy = copy;
  char open_path[64];
  snprintf(open_path, sizeof open_path, "/proc/self/fd/%d", copy);
  dlerror();
  p->dl = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) {
    pc_status_t st = pc_error_set(err, PC_INVALID, "%s: cannot load plugin: %s", path,
                                  dl_reason(open_path));
    plugin_free(p);
    return st;
  }
  if (loaded_handle(p->dl)) { /* a copy the loader kept after it was closed */
    pc_status_t st = pc_error_set(err, PC_INTERNAL, "%s: cannot load plugin: the loader "
                                  "returned a library loaded before", path);
    dlclose(p->dl);
    p->dl = NULL;
    plugin_free(p);
    return st;
  }

  pc_status_t st = check_magic(p, path, err);
  if (st == PC_OK) {
    char other[1024];
    if (loaded_claim(p, other, sizeof other) != 0) {
      st = pc_error_set(err, PC_INVALID, "%s: plugin '%s' is already loaded (from %s)", path,
                        p->name, other);
    } else {
      st = run_init(p, path, config_json, err);
      if (st != PC_OK) {
        size_t gone = pc_registry_remove_owner(registry, p);
        if (gone)
          pc_log(PC_LOG_DEBUG, "%s: removed the %zu observer(s) its failed init registered",
                 path, gone);
        loaded_release(p);
      }
    }
  }
  if (st != PC_OK) {
    plugin_close(p);
    return st;
  }
  pc_log(PC_LOG_INFO, "loaded observer plugin %s %s from %s", p->name, p->version, path);
  *handle = p;
  return PC_OK;
}

void pc_plugin_unload(pc_plugin_t *p) {
  if (!p) return;
  pc_registry_remove_owner(p->registry, p);
  if (p->teardown) p->teardown();
  loaded_release(p);
  plugin_close(p);
}

const char *pc_plugin_name(const pc_plugin_t *p) { return p ? p->name : NULL; }
const char *pc_plugin_version(const pc_plugin_t *p) { return p ? p->version : NULL; }
const char *pc_plugin_path(const pc_plugin_t *p) { return p ? p->path : NULL; }
int pc_plugin_abi_minor(const pc_plugin_t *p) { return p ? p->abi_minor : -1; }

/* ---- the configuration's plugins --------------------------------------------- */

pc_status_t pc_plugins_load_config(pc_observer_registry_t *registry, const pc_config_t *cfg,
                                   pc_plugin_t ***plugins, size_t *n, pc_error_t *err) {
  pc_error_clear(err);
  if (plugins) *plugins = NULL;
  if (n) *n = 0;
  if (!registry || !cfg || !plugins || !n)
    return pc_error_set(err, PC_INVALID, "pc_plugins_load_config: an argument is NULL");
  size_t count = cfg->workers.nplugins;
  if (count == 0) return PC_OK;
  pc_plugin_t **v = calloc(count, sizeof *v);
  if (!v) return pc_error_set(err, PC_NOMEM, "workers.plugins: out of memory");
  for (size_t k = 0; k < count; k++) {
    const pc_config_plugin_t *cp = &cfg->workers.plugins[k];
    pc_status_t st = pc_plugin_load(registry, cp->path, cp->config, &v[k], err);
    if (st != PC_OK) {
      pc_error_prefix(err, "workers.plugins[%zu]", k);
      pc_plugins_unload(v, k);
      return st;
    }
  }
  *plugins = v;
  *n = count;
  return PC_OK;
}

void pc_plugins_unload(pc_plugin_t **plugins, size_t n) {
  if (!plugins) return;
  while (n > 0) pc_plugin_unload(plugins[--n]);
  free(plugins);
}
