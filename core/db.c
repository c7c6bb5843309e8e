/* db.c — opening and closing an embedded database: the data directory and its
 * FORMAT marker, the LevelDB store, the persisted timestamp oracle, and this
 * process's liveness session; plus the options object and the raw view. */
#include "core/db.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "core/error.h"
#include "core/failpoint.h"

/* 2: meta records of version 2 (core/keys.c). A directory of format 1 is
 * upgraded when opened: its records are read as they are and rewritten by
 * the next write of their cell, and the new FORMAT keeps older binaries,
 * which cannot read version 2 records, out. */
#define FORMAT_LINE "percolator-data 2\n"
#define FORMAT_LINE_1 "percolator-data 1\n"

pc_options_t *pc_options_create(void) {
  pc_options_t *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->sync = 1;
  o->lock_ttl_ms = 3000;
  o->timeout_ms = 10000;
  o->one_phase_commit = 1;
  o->cache_bytes = 32u << 20;
  o->meta_cache_bytes = 32u << 20;
  o->kept_versions_bytes = 64u << 20;
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
void pc_options_set_keep_history(pc_options_t *o, int on) { o->keep_history = on != 0; }
void pc_options_set_kept_versions_bytes(pc_options_t *o, size_t bytes) {
  o->kept_versions_bytes = bytes;
}

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

/* Writes the FORMAT file at path (temp file, fsync, rename). */
static pc_status_t write_format(const char *path, pc_error_t *err);

pc_status_t pc_data_dir_mark(const char *dir, pc_error_t *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/FORMAT", dir);
  return write_format(path, err);
}

static pc_status_t write_format(const char *path, pc_error_t *err) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, FORMAT_LINE, strlen(FORMAT_LINE)) != (ssize_t)strlen(FORMAT_LINE) ||
      fsync(fd) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return pc_error_set(err, PC_IO_ERROR, "cannot write %s: %s", path, strerror(e));
  }
  close(fd);
  return PC_OK;
}

pc_status_t pc_data_dir_prepare(const char *dir, int create, int legacy_store, int *fresh,
                                int *older, pc_error_t *err) {
  struct stat st;
  *fresh = 0;
  *older = 0;
  if (stat(dir, &st) != 0) {
    if (errno != ENOENT)
      return pc_error_set(err, PC_IO_ERROR, "data directory '%s': %s", dir, strerror(errno));
    if (!create)
      return pc_error_set(err, PC_INVALID,
                          "data directory '%s' does not exist (create it with 'percolator init')",
                          dir);
    if (mkdir(dir, 0755) != 0)
      return pc_error_set(err, PC_IO_ERROR, "cannot create data directory '%s': %s", dir,
                          strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    return pc_error_set(err, PC_INVALID, "data directory '%s' is not a directory", dir);
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/FORMAT", dir);
  FILE *f = fopen(path, "re");
  if (f) {
    char line[64] = {0};
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    *older = ok && strcmp(line, FORMAT_LINE_1) == 0;
    ok = ok && (*older || strcmp(line, FORMAT_LINE) == 0);
    if (!ok)
      return pc_error_set(err, PC_CORRUPTION,
                          "data directory '%s': FORMAT file is not '%.*s' (corrupt, or another "
                          "program's directory)",
                          dir, (int)strlen(FORMAT_LINE) - 1, FORMAT_LINE);
    return PC_OK;
  }
  if (errno != ENOENT)
    return pc_error_set(err, PC_IO_ERROR, "%s: %s", path, strerror(errno));
  if (!dir_is_empty(dir)) {
    char store[4200];
    snprintf(store, sizeof store, "%s/store", dir);
    if (legacy_store && stat(store, &st) == 0 && S_ISDIR(st.st_mode)) {
      *older = 1; /* a tablet directory from before format 2 */
      return PC_OK;
    }
    return pc_error_set(err, PC_INVALID,
                        "'%s' is not a percolator data directory (it has files but no FORMAT)",
                        dir);
  }
  if (!create)
    return pc_error_set(err, PC_INVALID,
                        "data directory '%s' is empty (initialise it with 'percolator init')",
                        dir);
  pc_status_t wst = write_format(path, err);
  if (wst == PC_OK) *fresh = 1;
  return wst;
}

/* ---- the snapshot registry ------------------------------------------------
 *
 * Every transaction registers its start_ts from begin to destroy, and a
 * one-row overwrite asks whether a registered snapshot lies between the
 * version it replaces and its own commit (snapshots_in_use). A registration
 * is a slot claimed with one compare-and-swap; the thread's last slot is
 * tried first, so a thread that runs one transaction at a time keeps its
 * slot. Taking a snapshot claims the slot as SNAP_PENDING before asking the
 * oracle and then stores the timestamp: a writer that takes its commit_ts
 * after the reader's start_ts was issued then finds the slot pending or
 * holding that start_ts (both sides' accesses are sequentially consistent,
 * and the oracle orders the two timestamps), and a pending slot counts as in
 * use. Only with all SNAP_SLOTS slots taken do registrations go to the
 * sorted overflow array under snap_mu, taken and registered under that
 * lock as before. */

#define SNAP_SLOTS 4096u
#define SNAP_STRIDE 8u /* one slot per 64-byte line: threads do not share lines */
#define SLOT(db, i) ((db)->snap_slot[(size_t)(i) * SNAP_STRIDE])
#define SNAP_PENDING UINT64_MAX
#define SNAP_OVERFLOW (PC_SNAP_NONE - 1u)

static _Thread_local uint32_t snap_hint; /* this thread's last slot */

/* Claims a free slot holding v; SNAP_OVERFLOW when every slot is taken. */
static uint32_t slot_claim(pc_db_t *db, uint64_t v) {
  for (uint32_t k = 0; k < SNAP_SLOTS; k++) {
    uint32_t i = (snap_hint + k) % SNAP_SLOTS;
    uint64_t empty = 0;
    if (atomic_load_explicit(&SLOT(db, i), memory_order_relaxed) != 0 ||
        !atomic_compare_exchange_strong(&SLOT(db, i), &empty, v))
      continue;
    uint32_t high = atomic_load(&db->snap_high);
    while (high <= i && !atomic_compare_exchange_weak(&db->snap_high, &high, i + 1)) {
    }
    snap_hint = i;
    return i;
  }
  return SNAP_OVERFLOW;
}

/* Index of the first overflow timestamp >= ts (snap_mu held). */
static size_t snap_lower_bound(const pc_db_t *db, uint64_t ts) {
  size_t a = 0, b = atomic_load_explicit(&db->nsnap, memory_order_relaxed);
  while (a < b) {
    size_t mid = (a + b) / 2;
    if (db->snap[mid] < ts) a = mid + 1;
    else b = mid;
  }
  return a;
}

/* pc_local_store_track_snapshots's question: is a snapshot other than
 * self's (one registration of it) in [lo, hi), or is owner registered? */
static int snapshots_in_use(void *ctx, uint64_t lo, uint64_t hi, uint64_t self, uint64_t owner) {
  pc_db_t *db = ctx;
  int self_seen = 0;
  uint32_t high = atomic_load(&db->snap_high);
  for (uint32_t i = 0; i < high; i++) {
    uint64_t v = atomic_load(&SLOT(db, i));
    if (v == 0) continue;
    if (v == SNAP_PENDING || v == owner) return 1; /* owner: its transaction may still settle it */
    if (v < lo || v >= hi) continue;
    if (v == self && !self_seen) {
      self_seen = 1;
      continue;
    }
    return 1;
  }
  if (atomic_load(&db->nsnap) == 0) return 0;
  pthread_mutex_lock(&db->snap_mu);
  size_t n = atomic_load_explicit(&db->nsnap, memory_order_relaxed);
  size_t o = snap_lower_bound(db, owner);
  int in_use = o < n && db->snap[o] == owner;
  for (size_t i = snap_lower_bound(db, lo); !in_use && i < n && db->snap[i] < hi; i++) {
    if (db->snap[i] == self && !self_seen) self_seen = 1;
    else in_use = 1;
  }
  pthread_mutex_unlock(&db->snap_mu);
  return in_use;
}

/* Inserts ts into the overflow array (snap_mu held). */
static pc_status_t overflow_insert(pc_db_t *db, uint64_t ts, pc_error_t *err) {
  size_t n = atomic_load_explicit(&db->nsnap, memory_order_relaxed);
  if (n == db->capsnap) {
    size_t cap = db->capsnap ? db->capsnap * 2 : 64;
    uint64_t *p = realloc(db->snap, cap * sizeof *p);
    if (!p) return pc_error_set(err, PC_NOMEM, "out of memory");
    db->snap = p;
    db->capsnap = cap;
  }
  size_t a = snap_lower_bound(db, ts);
  memmove(&db->snap[a + 1], &db->snap[a], (n - a) * sizeof *db->snap);
  db->snap[a] = ts;
  atomic_store(&db->nsnap, n + 1);
  return PC_OK;
}

pc_status_t pc_db_snapshot_hold(pc_db_t *db, uint64_t ts, pc_snap_slot_t *slot, pc_error_t *err) {
  *slot = PC_SNAP_NONE;
  if (!db->snap_tracked) return PC_OK;
  if ((*slot = slot_claim(db, ts)) != SNAP_OVERFLOW) return PC_OK;
  pthread_mutex_lock(&db->snap_mu);
  pc_status_t st = overflow_insert(db, ts, err);
  pthread_mutex_unlock(&db->snap_mu);
  if (st != PC_OK) *slot = PC_SNAP_NONE;
  return st;
}

pc_status_t pc_db_snapshot_take(pc_db_t *db, uint32_t timeout_ms, uint64_t *ts,
                                pc_snap_slot_t *slot, pc_error_t *err) {
  *slot = PC_SNAP_NONE;
  if (!db->snap_tracked) return pc_db_ts(db, timeout_ms, ts, err);
  uint32_t i = slot_claim(db, SNAP_PENDING);
  if (i != SNAP_OVERFLOW) {
    pc_status_t st = pc_oracle_next(db->oracle, 1, ts, err);
    /* the slot is still pending here: a writer now must keep what ts may read */
    if (st == PC_OK) st = PC_FAILPOINT("db.snapshot.pending", err);
    atomic_store(&SLOT(db, i), st == PC_OK ? *ts : 0);
    if (st == PC_OK) *slot = i;
    return st;
  }
  pthread_mutex_lock(&db->snap_mu);
  /* taken and registered under one lock: a writer that asks after taking
   * its commit_ts sees every snapshot below it */
  uint64_t t;
  pc_status_t st = pc_oracle_next(db->oracle, 1, &t, err);
  if (st == PC_OK) st = overflow_insert(db, t, err);
  pthread_mutex_unlock(&db->snap_mu);
  if (st == PC_OK) {
    *ts = t;
    *slot = SNAP_OVERFLOW;
  }
  return st;
}

void pc_db_snapshot_release(pc_db_t *db, pc_snap_slot_t slot, uint64_t ts) {
  if (!db->snap_tracked || slot == PC_SNAP_NONE) return;
  if (slot != SNAP_OVERFLOW) {
    atomic_store_explicit(&SLOT(db, slot), 0, memory_order_release);
    return;
  }
  pthread_mutex_lock(&db->snap_mu);
  size_t n = atomic_load_explicit(&db->nsnap, memory_order_relaxed);
  size_t a = snap_lower_bound(db, ts);
  if (a < n && db->snap[a] == ts) {
    memmove(&db->snap[a], &db->snap[a + 1], (n - a - 1) * sizeof *db->snap);
    atomic_store(&db->nsnap, n - 1);
  }
  pthread_mutex_unlock(&db->snap_mu);
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
  int fresh, older;
  if (pc_data_dir_prepare(dir, opts->create_if_missing, 0, &fresh, &older, err) != PC_OK)
    return NULL;

  pc_db_t *db = calloc(1, sizeof *db);
  if (!db || !(db->dir = strdup(dir))) {
    free(db);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  db->opts = *opts;
  pthread_mutex_init(&db->snap_mu, NULL);
  char path[4200];
  snprintf(path, sizeof path, "%s/store", dir);
  pc_local_options_t lo = {fresh, opts->sync, opts->cache_bytes, opts->meta_cache_bytes,
                           opts->kept_versions_bytes};
  db->store = pc_local_store_open(path, &lo, err);
  if (!db->store) {
    if (err && err->code == PC_INVALID)
      pc_error_set(err, PC_CORRUPTION, "data directory '%s' has a FORMAT file but no store", dir);
    else if (err && err->code == PC_BUSY)
      pc_error_set(err, PC_BUSY, "data directory '%s' is in use by another process", dir);
    pc_db_close(db);
    return NULL;
  }
  /* the store is ours now (its LOCK): upgrade the marker before any write */
  if (older && pc_data_dir_mark(dir, err) != PC_OK) {
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
  if (!opts->keep_history) { /* this process is the only reader: it knows every snapshot */
    size_t bytes = (size_t)SNAP_SLOTS * SNAP_STRIDE * sizeof *db->snap_slot;
    db->snap_slot = aligned_alloc(64, bytes);
    if (db->snap_slot) memset((void *)db->snap_slot, 0, bytes);
    if (!db->snap_slot) {
      pc_error_set(err, PC_NOMEM, "out of memory");
      pc_db_close(db);
      return NULL;
    }
    db->snap_tracked = 1;
    pc_local_store_track_snapshots(db->store, snapshots_in_use, db);
  }
  return db;
}

void pc_db_close(pc_db_t *db) {
  if (!db) return;
  if (db->batcher) pc_ts_batcher_destroy(db->batcher);
  if (db->cluster_close) db->cluster_close(db);
  if (db->oracle) pc_oracle_close(db->oracle);
  if (db->store) db->store->ops->close(db->store);
  free(db->snap);
  free((void *)db->snap_slot);
  pthread_mutex_destroy(&db->snap_mu);
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
