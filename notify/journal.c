/* journal.c — what a worker process is doing, where its successor can read
 * it after a crash: the in-flight journal, and the observers' counters.
 *
 * A worker keeps one file of its journal directory, journal-<k>, locked
 * with flock (released by the kernel when the process dies, however it
 * dies), and maps it shared. The file holds a slot per observer thread and
 * the counters of each observer. Before a thread calls an observer it
 * writes (cell, observer, notification ts) into its slot and marks the slot
 * busy; when the call returns it marks the slot idle. These are stores into
 * a shared mapping: no system call and no fsync per run. The kernel keeps
 * the pages when the process dies (a segfault, an abort, SIGKILL, the OOM
 * killer), so a worker that starts and takes a file nobody holds finds
 * there every run its previous holder died in, and its counters. What a
 * machine crash loses does not matter here: it is not an observer's fault.
 *
 * Files are never deleted (a process that has opened one but not yet
 * locked it would otherwise lock a file nobody can find); a starting worker
 * reads every file nobody holds, keeps the first for itself and empties the
 * others, so a directory holds as many files as workers ever ran there at
 * once.
 *
 * Without a directory the journal lives in the process's memory: the
 * watchdog (worker.c) still reads the slots, and nothing survives.
 */
#include "notify/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/log.h"

#define JOURNAL_MAGIC 0x31306c6e6a637025ULL /* "%pcjnl01" */
#define JOURNAL_MAX_FILES 256
#define HEADER_BYTES 4096u
#define SLOT_BYTES 8192u /* a slot's header and the longest cell and observer name */
#define NAME_BYTES 72u
#define COUNTER_BYTES (NAME_BYTES + PC_NCOUNTERS * 8u)

_Static_assert(64 + PC_MAX_TABLE + 1 + PC_MAX_OBSERVER_NAME + 1 + PC_MAX_ROW + PC_MAX_COLUMN <=
                   SLOT_BYTES,
               "a journal slot holds the longest cell");
_Static_assert(PC_MAX_OBSERVER_NAME + 1 <= NAME_BYTES, "a counter entry holds the longest name");

typedef struct jheader {
  uint64_t magic; /* written last */
  uint32_t nslots, ncounters;
} jheader_t;

/* A slot of the file. state and gen are read by the watchdog under the
 * slot's mutex; in a file left by a dead process, state says whether a run
 * was in flight. */
typedef struct jslot {
  _Atomic uint32_t state; /* 1: a run in flight */
  uint16_t tlen, olen;
  uint32_t rlen, clen;
  uint64_t ts, since_mono_ms, gen;
  char bytes[]; /* table, observer, row, column */
} jslot_t;

struct journal {
  char *mem; /* the mapping, or malloc'd */
  size_t size;
  int fd; /* -1: in memory */
  uint32_t nslots, ncounters;
  pthread_mutex_t *mu; /* a mutex per slot, between its thread and the watchdog */
  int *hung;           /* per slot: the watchdog gave its run up (under mu) */
  char id[128];
};

static jslot_t *slot_at(char *mem, uint32_t i) {
  return (jslot_t *)(void *)(mem + HEADER_BYTES + (size_t)i * SLOT_BYTES);
}

static char *counter_at(char *mem, uint32_t nslots, uint32_t i) {
  return mem + HEADER_BYTES + (size_t)nslots * SLOT_BYTES + (size_t)i * COUNTER_BYTES;
}

static size_t file_bytes(uint32_t nslots, uint32_t ncounters) {
  size_t n = HEADER_BYTES + (size_t)nslots * SLOT_BYTES + (size_t)ncounters * COUNTER_BYTES;
  return (n + 4095) & ~(size_t)4095;
}

/* mkdir -p */
static int make_dirs(const char *path) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

/* The runs in flight and the counters of a file left by a dead holder. */
static void recover(int fd, const char *path, pc_journal_fn found, pc_journal_counts_fn counts,
                    void *ctx) {
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < HEADER_BYTES) return;
  char *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return;
  const jheader_t *h = (const jheader_t *)(void *)m;
  if (h->magic != JOURNAL_MAGIC || file_bytes(h->nslots, h->ncounters) > (size_t)sb.st_size) {
    if (h->magic != 0) pc_log(PC_LOG_WARN, "worker: journal %s is not one: ignored", path);
    munmap(m, (size_t)sb.st_size);
    return;
  }
  for (uint32_t i = 0; i < h->nslots; i++) {
    const jslot_t *s = slot_at(m, i);
    if (atomic_load(&s->state) != 1) continue;
    if (s->tlen > PC_MAX_TABLE || s->olen > PC_MAX_OBSERVER_NAME || s->rlen > PC_MAX_ROW ||
        s->clen > PC_MAX_COLUMN)
      continue;
    char table[PC_MAX_TABLE + 1], observer[PC_MAX_OBSERVER_NAME + 1];
    memcpy(table, s->bytes, s->tlen);
    table[s->tlen] = '\0';
    memcpy(observer, s->bytes + s->tlen, s->olen);
    observer[s->olen] = '\0';
    const char *row = s->bytes + s->tlen + s->olen;
    pc_journal_run_t run = {{table, row, s->rlen, row + s->rlen, s->clen}, observer, s->ts};
    found(ctx, &run);
  }
  for (uint32_t i = 0; i < h->ncounters; i++) {
    const char *e = counter_at(m, h->nslots, i);
    char name[NAME_BYTES];
    memcpy(name, e, NAME_BYTES);
    name[NAME_BYTES - 1] = '\0';
    uint64_t v[PC_NCOUNTERS];
    memcpy(v, e + NAME_BYTES, sizeof v);
    if (name[0]) counts(ctx, name, v);
  }
  munmap(m, (size_t)sb.st_size);
}

/* Takes the first journal file of dir nobody holds (*fd, its index *k),
 * reading what every such file's dead holder left. */
static pc_status_t take_file(const char *dir, int *fd, int *k, pc_journal_fn found,
                             pc_journal_counts_fn counts, void *ctx, pc_error_t *err) {
  *fd = -1;
  if (make_dirs(dir) != 0)
    return pc_error_set(err, PC_IO_ERROR, "worker: journal directory %s: %s", dir,
                        strerror(errno));
  for (int i = 0; i < JOURNAL_MAX_FILES; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/journal-%d", dir, i);
    int exists = access(path, F_OK) == 0;
    if (!exists && *fd >= 0) break; /* files are made in order: no more */
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0) return pc_error_set(err, PC_IO_ERROR, "worker: journal %s: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) { /* a live worker's */
      close(f);
      continue;
    }
    if (exists) recover(f, path, found, counts, ctx);
    if (*fd < 0) {
      *fd = f;
      *k = i;
    } else { /* read: empty it, and leave it to whoever comes next */
      if (ftruncate(f, 0) != 0)
        pc_log(PC_LOG_WARN, "worker: emptying journal %s: %s", path, strerror(errno));
      close(f);
    }
  }
  if (*fd < 0)
    return pc_error_set(err, PC_BUSY, "worker: every journal file of %s is held (%d workers?)",
                        dir, JOURNAL_MAX_FILES);
  return PC_OK;
}

journal_t *pc_journal_open(const char *dir, uint32_t nslots, const char *const *names,
                           size_t nnames, pc_journal_fn found, pc_journal_counts_fn counts,
                           void *ctx, pc_error_t *err) {
  journal_t *j = calloc(1, sizeof *j);
  if (!j || !(j->mu = calloc(nslots ? nslots : 1, sizeof *j->mu)) ||
      !(j->hung = calloc(nslots ? nslots : 1, sizeof *j->hung))) {
    if (j) free(j->mu);
    free(j);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  for (uint32_t i = 0; i < nslots; i++) pthread_mutex_init(&j->mu[i], NULL);
  j->fd = -1;
  j->nslots = nslots;
  j->ncounters = (uint32_t)nnames;
  j->size = file_bytes(nslots, j->ncounters);
  char host[64] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  if (dir) {
    int k = 0;
    if (take_file(dir, &j->fd, &k, found, counts, ctx, err) != PC_OK) goto fail;
    if (ftruncate(j->fd, 0) != 0 || ftruncate(j->fd, (off_t)j->size) != 0) {
      pc_error_set(err, PC_IO_ERROR, "worker: journal in %s: %s", dir, strerror(errno));
      goto fail;
    }
    j->mem = mmap(NULL, j->size, PROT_READ | PROT_WRITE, MAP_SHARED, j->fd, 0);
    if (j->mem == MAP_FAILED) {
      j->mem = NULL;
      pc_error_set(err, PC_IO_ERROR, "worker: mapping the journal in %s: %s", dir, strerror(errno));
      goto fail;
    }
    snprintf(j->id, sizeof j->id, "%s:%016" PRIx64 ":%d", host,
             (uint64_t)XXH3_64bits(dir, strlen(dir)), k);
  } else {
    if (!(j->mem = calloc(1, j->size))) {
      pc_error_set(err, PC_NOMEM, "out of memory");
      goto fail;
    }
    snprintf(j->id, sizeof j->id, "%s:pid%d", host, (int)getpid());
  }
  for (uint32_t i = 0; i < j->ncounters; i++)
    snprintf(counter_at(j->mem, nslots, i), NAME_BYTES, "%s", names[i]);
  jheader_t *h = (jheader_t *)(void *)j->mem;
  h->nslots = nslots;
  h->ncounters = j->ncounters;
  h->magic = JOURNAL_MAGIC;
  return j;
fail:
  pc_journal_close(j);
  return NULL;
}

void pc_journal_close(journal_t *j) {
  if (!j) return;
  if (j->fd >= 0) {
    if (j->mem) munmap(j->mem, j->size);
    close(j->fd); /* and the lock goes */
  } else {
    free(j->mem);
  }
  for (uint32_t i = 0; i < j->nslots; i++) pthread_mutex_destroy(&j->mu[i]);
  free(j->mu);
  free(j->hung);
  free(j);
}

const char *pc_journal_id(const journal_t *j) { return j->id; }
int pc_journal_durable(const journal_t *j) { return j->fd >= 0; }

_Atomic uint64_t *pc_journal_counters(journal_t *j, size_t i) {
  return (_Atomic uint64_t *)(void *)(counter_at(j->mem, j->nslots, (uint32_t)i) + NAME_BYTES);
}

void pc_journal_begin(journal_t *j, uint32_t slot, const pc_cell_t *c, const char *observer,
                      uint64_t ts) {
  jslot_t *s = slot_at(j->mem, slot);
  size_t tl = strlen(c->table), ol = strlen(observer);
  pthread_mutex_lock(&j->mu[slot]);
  s->tlen = (uint16_t)tl;
  s->olen = (uint16_t)ol;
  s->rlen = (uint32_t)c->rlen;
  s->clen = (uint32_t)c->clen;
  s->ts = ts;
  s->since_mono_ms = pc_now_mono_ms();
  s->gen++;
  memcpy(s->bytes, c->table, tl);
  memcpy(s->bytes + tl, observer, ol);
  memcpy(s->bytes + tl + ol, c->row, c->rlen);
  memcpy(s->bytes + tl + ol + c->rlen, c->col, c->clen);
  atomic_store_explicit(&s->state, 1, memory_order_release);
  pthread_mutex_unlock(&j->mu[slot]);
}

int pc_journal_end(journal_t *j, uint32_t slot) {
  jslot_t *s = slot_at(j->mem, slot);
  pthread_mutex_lock(&j->mu[slot]);
  int hung = j->hung[slot];
  j->hung[slot] = 0;
  atomic_store_explicit(&s->state, 0, memory_order_release);
  pthread_mutex_unlock(&j->mu[slot]);
  return hung;
}

int pc_journal_peek(journal_t *j, uint32_t slot, uint64_t older_than_ms, int given_up_too,
                    pc_journal_copy_t *out) {
  jslot_t *s = slot_at(j->mem, slot);
  int busy = 0;
  pthread_mutex_lock(&j->mu[slot]);
  if (atomic_load(&s->state) == 1 && (given_up_too || !j->hung[slot]) &&
      s->since_mono_ms < older_than_ms) {
    busy = 1;
    out->gen = s->gen;
    out->ts = s->ts;
    out->since_mono_ms = s->since_mono_ms;
    memcpy(out->table, s->bytes, s->tlen);
    out->table[s->tlen] = '\0';
    memcpy(out->observer, s->bytes + s->tlen, s->olen);
    out->observer[s->olen] = '\0';
    memcpy(out->row, s->bytes + s->tlen + s->olen, s->rlen);
    memcpy(out->col, s->bytes + s->tlen + s->olen + s->rlen, s->clen);
    out->cell = (pc_cell_t){out->table, out->row, s->rlen, out->col, s->clen};
  }
  pthread_mutex_unlock(&j->mu[slot]);
  return busy;
}

int pc_journal_give_up(journal_t *j, uint32_t slot, uint64_t gen) {
  jslot_t *s = slot_at(j->mem, slot);
  pthread_mutex_lock(&j->mu[slot]);
  int given = atomic_load(&s->state) == 1 && s->gen == gen && !j->hung[slot];
  if (given) j->hung[slot] = 1;
  pthread_mutex_unlock(&j->mu[slot]);
  return given;
}
