/* db.c — opening and closing an embedded database: the data directory, its
 * FORMAT marker and its lock, the LevelDB store, the persisted timestamp oracle, and this
 * process's liveness session; plus the options object and the raw view. */
#include "core/db.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "base/error.h"
#include "core/failpoint.h"
#include "core/recent.h"
#include "base/log.h"

/* The layout of the records in the store (core/keys.c); a directory of
 * another format is refused, naming what it found. Format 4 keeps a cell's
 * newest commit in its meta record only (docs/ARCHITECTURE.md, "The head's
 * commit record"). This version reads format 3 as it is, and marks such a
 * directory format 4 once it holds its lock (pc_data_dir_upgrade): a version
 * that writes format 3 would, on replacing a head that has no record, lose
 * that version from older snapshots. */
#define FORMAT_LINE "percolator-data 4\n"
#define FORMAT_LINE_3 "percolator-data 3\n"

pc_options_t *pc_options_create(void) {
  pc_options_t *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->sync = 1;
  o->lock_ttl_ms = 3000;
  o->timeout_ms = 10000;
  o->one_phase_commit = 1;
  o->cache_bytes = 32u << 20;
  o->meta_cache_bytes = 32u << 20;
  o->write_buffer_bytes = 64u << 20;
  o->no_compression = 1; /* as the configuration: store.compression "none" */
  o->gc_interval_ms = 60000;
  o->gc_rate = 100000;
  o->gc_lifetime_ms = 60000;
  o->snapshot_max_age_ms = 86400000;
  return o;
}

void pc_options_destroy(pc_options_t *o) { free(o); }
void pc_options_set_create_if_missing(pc_options_t *o, int on) { o->create_if_missing = on != 0; }
void pc_options_set_sync(pc_options_t *o, int on) { o->sync = on != 0; }
void pc_options_set_lock_ttl_ms(pc_options_t *o, uint32_t ms) { o->lock_ttl_ms = ms; }
void pc_options_set_timeout_ms(pc_options_t *o, uint32_t ms) { o->timeout_ms = ms ? ms : 1; }
void pc_options_set_one_phase_commit(pc_options_t *o, int on) { o->one_phase_commit = on != 0; }
void pc_options_set_lazy_start(pc_options_t *o, int on) { o->lazy_start = on != 0; }
void pc_options_set_cache_bytes(pc_options_t *o, size_t bytes) { o->cache_bytes = bytes; }
void pc_options_set_meta_cache_bytes(pc_options_t *o, size_t bytes) { o->meta_cache_bytes = bytes; }
void pc_options_set_write_buffer_bytes(pc_options_t *o, size_t bytes) {
  o->write_buffer_bytes = bytes;
}
void pc_options_set_compression(pc_options_t *o, int on) { o->no_compression = on == 0; }
void pc_options_set_gc_interval_ms(pc_options_t *o, uint32_t ms) { o->gc_interval_ms = ms; }
void pc_options_set_gc_rate(pc_options_t *o, uint32_t rate) { o->gc_rate = rate; }

static int embedded_alive(void *ctx, uint64_t session) {
  return session == *(const uint64_t *)ctx;
}

static int dir_is_empty(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int empty = 1;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = 0;
  closedir(d);
  return empty;
}

/* Reads the first line of the FORMAT file at path into line (64 bytes):
 * 1, 0 when it has none (empty), or -1 when it cannot be opened (errno). */
static int read_format(const char *path, char line[64]) {
  memset(line, 0, 64);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  int ok = fgets(line, 64, f) != NULL;
  fclose(f);
  return ok;
}

/* Writes the FORMAT file at path (temp file, fsync, rename). */
static pc_status_t write_format(const char *path, pc_error_t *err) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, FORMAT_LINE, strlen(FORMAT_LINE)) != (ssize_t)strlen(FORMAT_LINE) ||
      fsync(fd) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return pc_error_set(err, PC_IO_ERROR, "cannot write %s: %s", path, strerror(e));
  }
  close(fd);
  return PC_OK;
}

pc_status_t pc_dir_private(const char *dir, pc_error_t *err) {
  struct stat st;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    return pc_error_set(err, PC_IO_ERROR, "cannot create '%s': %s", dir, strerror(errno));
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return PC_OK; /* the open that follows says */
  if ((st.st_mode & 077) && chmod(dir, st.st_mode & 0700) != 0)
    return pc_error_set(err, PC_IO_ERROR, "cannot make '%s' private: %s", dir, strerror(errno));
  DIR *d = opendir(dir);
  if (!d) return PC_OK;
  int dfd = dirfd(d);
  for (struct dirent *e; (e = readdir(d));) {
    struct stat fs;
    if (fstatat(dfd, e->d_name, &fs, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(fs.st_mode) &&
        (fs.st_mode & 077))
      (void)fchmodat(dfd, e->d_name, fs.st_mode & 0700, 0); /* the directory protects it anyway */
  }
  closedir(d);
  return PC_OK;
}

pc_status_t pc_data_dir_prepare(const char *dir, int create, int *fresh, pc_error_t *err) {
  struct stat st;
  *fresh = 0;
  if (stat(dir, &st) != 0) {
    if (errno != ENOENT)
      return pc_error_set(err, PC_IO_ERROR, "data directory '%s': %s", dir, strerror(errno));
    if (!create)
      return pc_error_set(err, PC_INVALID,
                          "data directory '%s' does not exist (create it with 'percolator init')",
                          dir);
    if (mkdir(dir, 0700) != 0)
      return pc_error_set(err, PC_IO_ERROR, "cannot create data directory '%s': %s", dir,
                          strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    return pc_error_set(err, PC_INVALID, "data directory '%s' is not a directory", dir);
  }
  char path[4096], line[64];
  snprintf(path, sizeof path, "%s/FORMAT", dir);
  int found = read_format(path, line);
  if (found >= 0) {
    if (!found || (strcmp(line, FORMAT_LINE) != 0 && strcmp(line, FORMAT_LINE_3) != 0)) {
      line[strcspn(line, "\n")] = '\0';
      return pc_error_set(err, PC_CORRUPTION,
                          "data directory '%s': FORMAT file says '%s', not '%.*s' (another "
                          "version's or program's directory, or corrupt)",
                          dir, line, (int)strlen(FORMAT_LINE) - 1, FORMAT_LINE);
    }
    return PC_OK;
  }
  if (errno != ENOENT)
    return pc_error_set(err, PC_IO_ERROR, "%s: %s", path, strerror(errno));
  if (!dir_is_empty(dir))
    return pc_error_set(err, PC_INVALID,
                        "'%s' is not a percolator data directory (it has files but no FORMAT)",
                        dir);
  if (!create)
    return pc_error_set(err, PC_INVALID,
                        "data directory '%s' is empty (initialise it with 'percolator init')",
                        dir);
  pc_status_t wst = write_format(path, err);
  if (wst == PC_OK) *fresh = 1;
  return wst;
}

pc_status_t pc_data_dir_upgrade(const char *dir, pc_error_t *err) {
  char path[4096], line[64];
  snprintf(path, sizeof path, "%s/FORMAT", dir);
  /* prepare has checked the file: only format 3 has anything to do */
  if (read_format(path, line) != 1 || strcmp(line, FORMAT_LINE_3) != 0) return PC_OK;
  pc_status_t st = write_format(path, err);
  if (st == PC_OK)
    pc_log(PC_LOG_INFO, "data directory '%s': format 3 is now marked %.*s (older versions no "
                        "longer open it)",
           dir, (int)strlen(FORMAT_LINE) - 1, FORMAT_LINE);
  return st;
}

/* ---- the data directory's lock ------------------------------------------------
 *
 * One lock, DIR/LOCK, taken first by whoever opens the directory (the
 * embedded database, a worker serving it), so that the store's and the
 * oracle's own locks inside are never contended, whatever order their
 * owners open them in. The file holds "PID ROLE", so that a process
 * finding it held can say who holds it and whether to wait (a starting
 * worker) or not. */

int pc_data_dir_lock(const char *dir, const char *role, pc_error_t *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/LOCK", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    pc_error_set(err, PC_IO_ERROR, "data directory '%s': cannot open its LOCK file: %s", dir,
                 strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK && e != EAGAIN) {
      pc_error_set(err, PC_IO_ERROR, "data directory '%s': cannot lock it: %s", dir, strerror(e));
      return -1;
    }
    long pid = 0;
    char who[32] = "";
    if (pc_data_dir_holder(dir, &pid, who, sizeof who) == 0 && pid > 0)
      pc_error_set(err, PC_BUSY, "data directory '%s' is in use by another process (%s %ld)",
                   dir, who[0] ? who : "process", pid);
    else
      pc_error_set(err, PC_BUSY, "data directory '%s' is in use by another process", dir);
    return -1;
  }
  char line[64];
  int n = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), role);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
    /* the lock stands; only the holder's description is missing */
  }
  return fd;
}

void pc_data_dir_unlock(int fd) {
  if (fd < 0) return;
  if (ftruncate(fd, 0) != 0) {
    /* a stale description names a process that is gone: harmless */
  }
  close(fd); /* releases the flock */
}

int pc_data_dir_holder(const char *dir, long *pid, char *role, size_t cap) {
  char path[4200], line[64] = {0};
  snprintf(path, sizeof path, "%s/LOCK", dir);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, line, sizeof line - 1);
  close(fd);
  if (n <= 0) return -1;
  line[n] = '\0';
  char r[32] = "";
  if (sscanf(line, "%ld %31s", pid, r) < 1) return -1;
  if (cap) snprintf(role, cap, "%s", r);
  return 0;
}

/* ---- open transactions ----------------------------------------------------
 *
 * Every transaction is linked here from begin to destroy. Its entry holds
 * its start_ts, or, while that is being taken, ts_floor as it was when the
 * entry was linked: a timestamp taken earlier, so below the one being taken.
 * The GC takes a fresh timestamp F, then reads the list under open_mu: an
 * entry linked before that read bounds the safe point by its floor or its
 * start_ts; one linked after takes its start_ts after F. So the safe point,
 * min(F, every entry), never passes a snapshot of this process. */

pc_db_t *pc_db_alloc(const pc_options_t *opts) {
  pc_db_t *db = calloc(1, sizeof *db);
  if (!db) return NULL;
  db->opts = *opts;
  db->dir_lock = -1;
  pthread_mutex_init(&db->open_mu, NULL);
  db->open.prev = db->open.next = &db->open;
  pthread_mutex_init(&db->bg_mu, NULL);
  pc_cond_init_mono(&db->bg_cv);
  pthread_mutex_init(&db->gc_mu, NULL);
  pthread_mutex_init(&db->notify_mu, NULL);
  return db;
}

static void db_destroy_lists(pc_db_t *db) {
  pthread_mutex_destroy(&db->open_mu);
  pthread_mutex_destroy(&db->bg_mu);
  pthread_cond_destroy(&db->bg_cv);
  pthread_mutex_destroy(&db->gc_mu);
  pthread_mutex_destroy(&db->notify_mu);
}

void pc_db_link_txn(pc_db_t *db, pc_open_txn_t *e) {
  e->primary = NULL;
  e->linked = 1;
  atomic_store(&e->ts, atomic_load(&db->ts_floor));
  pthread_mutex_lock(&db->open_mu);
  e->prev = db->open.prev;
  e->next = &db->open;
  e->prev->next = e;
  db->open.prev = e;
  db->nopen++;
  pthread_mutex_unlock(&db->open_mu);
}

void pc_db_link_txn_at(pc_db_t *db, pc_open_txn_t *e, uint64_t ts) {
  e->primary = NULL;
  e->linked = 1;
  e->start_mono_ms = pc_now_mono_ms();
  atomic_store(&e->ts, ts);
  pthread_mutex_lock(&db->open_mu);
  e->prev = db->open.prev;
  e->next = &db->open;
  e->prev->next = e;
  db->open.prev = e;
  db->nopen++;
  pthread_mutex_unlock(&db->open_mu);
}

void pc_db_txn_started(pc_open_txn_t *e, uint64_t ts) {
  e->start_mono_ms = pc_now_mono_ms();
  atomic_store(&e->ts, ts); /* raises it: no lock needed */
}

pc_status_t pc_db_open_txn(pc_db_t *db, pc_open_txn_t *e, uint32_t timeout_ms, uint64_t *ts,
                           pc_error_t *err) {
  pc_db_link_txn(db, e);
  pc_status_t st = pc_db_ts(db, timeout_ms, ts, err);
  if (st == PC_OK) st = PC_FAILPOINT("db.txn.ts_taken", err);
  if (st != PC_OK) {
    pc_db_close_txn(db, e);
    return st;
  }
  pc_db_txn_started(e, *ts);
  return PC_OK;
}

void pc_db_close_txn(pc_db_t *db, pc_open_txn_t *e) {
  if (!e->linked) return;
  pthread_mutex_lock(&db->open_mu);
  e->prev->next = e->next;
  e->next->prev = e->prev;
  db->nopen--;
  e->prev = e->next = NULL;
  pthread_mutex_unlock(&db->open_mu);
  e->linked = 0;
}

void pc_db_txn_locking(pc_db_t *db, pc_open_txn_t *e, const pc_cell_t *primary) {
  pthread_mutex_lock(&db->open_mu);
  e->primary = primary;
  pthread_mutex_unlock(&db->open_mu);
}

uint32_t pc_db_lock_ttl(const pc_db_t *db, const pc_open_txn_t *e) {
  uint64_t ttl = pc_now_mono_ms() - e->start_mono_ms + db->opts.lock_ttl_ms;
  return ttl > UINT32_MAX ? UINT32_MAX : (uint32_t)ttl;
}

pc_db_t *pc_db_open(const pc_options_t *opts, const char *dir, pc_error_t *err) {
  pc_error_clear(err);
  pc_options_t defaults;
  if (!opts) {
    pc_options_t *d = pc_options_create();
    if (!d) {
      pc_error_set(err, PC_NOMEM, "out of memory");
      return NULL;
    }
    defaults = *d;
    pc_options_destroy(d);
    opts = &defaults;
  }
  if (!dir || !*dir) {
    pc_error_set(err, PC_INVALID, "data directory: empty path");
    return NULL;
  }
  if (pc_failpoints_init_from_env(err) != PC_OK) return NULL;
  int fresh;
  if (pc_data_dir_prepare(dir, opts->create_if_missing, &fresh, err) != PC_OK) return NULL;

  pc_db_t *db = pc_db_alloc(opts);
  if (!db || !(db->dir = strdup(dir))) {
    pc_db_close(db);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  if ((db->dir_lock = pc_data_dir_lock(dir, "client", err)) < 0 ||
      pc_data_dir_upgrade(dir, err) != PC_OK) {
    pc_db_close(db);
    return NULL;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/store", dir);
  pc_local_options_t lo = {fresh, opts->sync, opts->cache_bytes, opts->meta_cache_bytes,
                          opts->write_buffer_bytes, opts->no_compression};
  if ((fresh || opts->create_if_missing) && pc_dir_private(path, err) != PC_OK) {
    pc_db_close(db);
    return NULL;
  }
  db->store = pc_local_store_open(path, &lo, err);
  if (db->store) (void)pc_dir_private(path, NULL);
  if (!db->store) {
    if (err && err->code == PC_INVALID)
      pc_error_set(err, PC_CORRUPTION, "data directory '%s' has a FORMAT file but no store", dir);
    else if (err && err->code == PC_BUSY)
      pc_error_set(err, PC_BUSY, "data directory '%s' is in use by another process", dir);
    pc_db_close(db);
    return NULL;
  }
  snprintf(path, sizeof path, "%s/oracle", dir);
  db->oracle = pc_oracle_open(path, 0, err);
  if (!db->oracle) {
    pc_db_close(db);
    return NULL;
  }
  while (db->session == 0) {
    if (getrandom(&db->session, sizeof db->session, 0) != (ssize_t)sizeof db->session) {
      pc_error_set(err, PC_IO_ERROR, "getrandom: %s", strerror(errno));
      pc_db_close(db);
      return NULL;
    }
  }
  db->liveness.is_alive = embedded_alive;
  db->liveness.ctx = &db->session;
  if (pc_db_start_background(db, err) != PC_OK) {
    pc_db_close(db);
    return NULL;
  }
  return db;
}

void pc_db_close(pc_db_t *db) {
  if (!db) return;
  pc_db_stop_background(db);
  if (db->batcher) pc_ts_batcher_destroy(db->batcher);
  if (db->cluster_close) db->cluster_close(db);
  if (db->oracle) pc_oracle_close(db->oracle);
  if (db->store) db->store->ops->close(db->store);
  if (db->notify_ls) db->notify_ls_destroy(db->notify_ls);
  pc_recent_destroy(db->recent);
  pc_data_dir_unlock(db->dir_lock);
  db_destroy_lists(db);
  free(db->dir);
  free(db);
}

pc_status_t pc_db_ts(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts, pc_error_t *err) {
  /* the embedded oracle is a mutex away: batching only pays across a network */
  if (db->oracle) return pc_oracle_next(db->oracle, 1, ts, err);
  return pc_ts_batcher_get(db->batcher, timeout_ms, ts, err);
}

pc_status_t pc_db_timestamp(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts, pc_error_t *err) {
  pc_error_clear(err);
  return pc_db_ts(db, timeout_ms, ts, err);
}

void pc_db_set_timeout_ms(pc_db_t *db, uint32_t ms) { db->opts.timeout_ms = ms ? ms : 1; }

uint64_t pc_db_session(const pc_db_t *db) {
  return db->cluster_session ? db->cluster_session(db) : db->session;
}

pc_status_t pc_db_raw_scan(pc_db_t *db, const char *table, const char *start, size_t slen,
                           const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                           pc_error_t *err) {
  pc_error_clear(err);
  return db->store->ops->raw_scan(db->store, table, start, slen, end, elen, fn, ctx, err);
}
