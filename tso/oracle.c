/* oracle.c — the server side of the timestamp oracle. It hands out
 * strictly increasing hybrid timestamps (wall-clock ms << PC_TS_LOGICAL_BITS |
 * logical counter) from memory, below an upper bound that is persisted a
 * window ahead of the clock in a small checksummed text file (written to
 * path.tmp, fsynced, renamed over path, directory fsynced) by a background
 * thread once less than half a window is left, so callers do not wait for
 * the disk. Every timestamp
 * served is below the persisted bound, and after a restart the oracle serves
 * only timestamps above the saved bound, so timestamps never repeat or go
 * back across crashes, kills or a wall clock that stepped backwards. Also the
 * adapter that lets a pc_ts_batcher fetch from an in-process oracle. */
#include "tso/oracle.h"

#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_WINDOW_MS 3000u

/* The bound file is one line: "<MAGIC> <bound> <checksum>\n" where bound is
 * decimal and checksum is the 16-hex-digit FNV-1a 64 of "<MAGIC> <bound>".
 * It is read back strictly: the line is regenerated from the parsed bound and
 * must match the file byte for byte. */
#define BOUND_MAGIC "percolator-tso-bound v1"
#define BOUND_LINE_MAX 96

/* The bound kept in a local file (pc_oracle_open). */
typedef struct file_bound {
  char *path;     /* the bound file */
  char *tmp_path; /* path + ".tmp", renamed over path */
  char *dir;      /* the directory holding path, fsynced after a rename */
  int lock_fd;    /* path + ".lock", flock()ed: one oracle per bound file */
} file_bound_t;

struct pc_oracle {
  pthread_mutex_t mu;
  pthread_cond_t wake;   /* to the extender: a new bound is wanted, or stop */
  pthread_cond_t placed; /* from the extender: a persist ended */
  pthread_t extender;    /* persists the next bound before callers reach it */
  int extender_running, want_extend, persisting, stop;
  /* want_extend || persisting, for callers outside mu: while the next bound
   * is on its way, callers below the current one need not take mu */
  _Atomic int extending;
  pc_oracle_bound_ops_t ops; /* where the bound is kept */
  void *ops_ctx;
  char *name;         /* for messages: the bound file, or the coordination node */
  uint32_t window_ms; /* how far ahead of the clock a new bound is placed */
  /* every timestamp served from now on is > floor: the last one served, or
   * the saved bound at open (floor0). Advanced by compare-and-swap, without
   * the mutex while the bound is more than half a window ahead. */
  _Atomic uint64_t floor;
  uint64_t floor0;
  _Atomic uint64_t bound; /* persisted: every timestamp served is < bound (written under mu) */
  /* the monotonic instant (pc_now_mono_ms) from which nothing is served;
   * UINT64_MAX without a lease, 0 once the oracle was fenced off for good */
  _Atomic uint64_t lease_until;
};

static uint64_t fnv1a64(const char *s, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* Writes the bound line for bound into buf; returns its length. */
static size_t format_bound(char *buf, size_t cap, uint64_t bound) {
  int n = snprintf(buf, cap, BOUND_MAGIC " %" PRIu64, bound);
  uint64_t sum = fnv1a64(buf, (size_t)n);
  int m = snprintf(buf + n, cap - (size_t)n, " %016" PRIx64 "\n", sum);
  return (size_t)n + (size_t)m;
}

/* The hybrid timestamp whose physical part is ms and logical part 0. */
static uint64_t ts_of_ms(uint64_t ms) {
  const uint64_t max_ms = UINT64_MAX >> PC_TS_LOGICAL_BITS;
  return (ms > max_ms ? max_ms : ms) << PC_TS_LOGICAL_BITS;
}

static pc_status_t io_error(pc_error_t *err, const char *what, const char *path, int errnum) {
  return pc_error_set(err, PC_IO_ERROR, "%s: %s timestamp bound file: %s", path, what,
                      strerror(errnum));
}

static pc_status_t corrupt(pc_error_t *err, const char *path, const char *why) {
  return pc_error_set(err, PC_CORRUPTION, "%s: corrupt timestamp bound file (%s)", path, why);
}

/* Reads the saved bound of o->path into *bound (0 when the file is missing). */
static pc_status_t load_bound(void *ctx, uint64_t *bound, pc_error_t *err) {
  const file_bound_t *o = ctx;
  *bound = 0;
  int fd = open(o->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return PC_OK; /* fresh start */
    return io_error(err, "cannot open", o->path, errno);
  }
  char buf[BOUND_LINE_MAX + 1];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - len);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return io_error(err, "cannot read", o->path, e);
    }
    if (r == 0) break;
    len += (size_t)r;
    if (len == sizeof buf) break; /* longer than any valid line */
  }
  close(fd);

  const size_t prefix = sizeof BOUND_MAGIC; /* the magic and the space after it */
  if (len == 0) return corrupt(err, o->path, "empty");
  if (len > BOUND_LINE_MAX) return corrupt(err, o->path, "too long");
  if (len < prefix || memcmp(buf, BOUND_MAGIC " ", prefix) != 0)
    return corrupt(err, o->path, "bad magic");
  uint64_t value = 0;
  size_t i = prefix;
  for (; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
    unsigned digit = (unsigned)(buf[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return corrupt(err, o->path, "bound out of range");
    value = value * 10 + digit;
  }
  if (i == prefix) return corrupt(err, o->path, "no bound");
  char expect[BOUND_LINE_MAX];
  size_t n = format_bound(expect, sizeof expect, value);
  if (n != len || memcmp(expect, buf, len) != 0) return corrupt(err, o->path, "bad checksum");
  *bound = value;
  return PC_OK;
}

static pc_status_t write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return PC_IO_ERROR;
    }
    buf += w;
    len -= (size_t)w;
  }
  return PC_OK;
}

/* Durably replaces the bound file with bound: temp file, fsync, rename, fsync
 * of the directory. On failure the file holds the old or the new bound. */
static pc_status_t persist_bound(void *ctx, uint64_t bound, pc_error_t *err) {
  const file_bound_t *o = ctx;
  char line[BOUND_LINE_MAX];
  size_t len = format_bound(line, sizeof line, bound);

  int fd = open(o->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_error(err, "cannot create", o->tmp_path, errno);
  if (write_all(fd, line, len) != PC_OK) {
    int e = errno;
    close(fd);
    unlink(o->tmp_path);
    return io_error(err, "cannot write", o->tmp_path, e);
  }
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    unlink(o->tmp_path);
    return io_error(err, "cannot fsync", o->tmp_path, e);
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(o->tmp_path);
    return io_error(err, "cannot close", o->tmp_path, e);
  }
  if (rename(o->tmp_path, o->path) != 0) {
    int e = errno;
    unlink(o->tmp_path);
    return io_error(err, "cannot rename over", o->path, e);
  }
  int dfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error(err, "cannot open the directory of", o->path, errno);
  /* Some file systems cannot fsync a directory (EINVAL); the rename stands. */
  if (fsync(dfd) != 0 && errno != EINVAL) {
    int e = errno;
    close(dfd);
    return io_error(err, "cannot fsync the directory of", o->path, e);
  }
  close(dfd);
  return PC_OK;
}

/* Persists bound through the oracle's store. A store that answers
 * PC_CONFLICT has refused the write because another oracle took over: this
 * one serves nothing from then on. */
static pc_status_t persist(pc_oracle_t *o, uint64_t bound, pc_error_t *err) {
  pc_status_t st = o->ops.persist(o->ops_ctx, bound, err);
  if (st == PC_CONFLICT) {
    /* for a caller this oracle is gone: it should find the one that took over */
    atomic_store(&o->lease_until, 0);
    if (err) err->code = PC_UNAVAILABLE;
    st = PC_UNAVAILABLE;
  }
  return st;
}

/* The bound a window ahead of the clock. */
static uint64_t bound_ahead(const pc_oracle_t *o, uint64_t now_ms) {
  return ts_of_ms(now_ms > UINT64_MAX - o->window_ms ? UINT64_MAX : now_ms + o->window_ms);
}

/* Makes sure every timestamp below end may be served. Holds o->mu.
 *
 * The extender thread moves the bound a window ahead whenever less than half
 * a window is left, so callers normally find room and never wait for an
 * fsync. Only a caller that outruns it (a burst, a stalled disk, a failed
 * background persist) persists here, after waiting out a persist in flight:
 * one writer of the bound file at a time, and the bound only grows. */
static pc_status_t reserve(pc_oracle_t *o, uint64_t end, uint64_t now_ms, pc_error_t *err) {
  while (end > o->bound && o->persisting) pthread_cond_wait(&o->placed, &o->mu);
  if (end > o->bound) {
    uint64_t bound = bound_ahead(o, now_ms);
    if (bound < end) bound = end;
    pc_status_t st = persist(o, bound, err);
    if (st != PC_OK) return st;
    o->bound = bound;
  }
  uint64_t half = ts_of_ms(o->window_ms / 2);
  if (o->extender_running && !o->persisting && !o->want_extend && o->bound - end < half) {
    o->want_extend = 1;
    atomic_store(&o->extending, 1);
    pthread_cond_signal(&o->wake);
  }
  return PC_OK;
}

static void *extender_main(void *arg) {
  pc_oracle_t *o = arg;
  pthread_mutex_lock(&o->mu);
  for (;;) {
    while (!o->stop && !o->want_extend) pthread_cond_wait(&o->wake, &o->mu);
    if (o->stop) break;
    o->want_extend = 0;
    uint64_t bound = bound_ahead(o, pc_now_wall_ms());
    if (bound <= o->bound) {
      atomic_store(&o->extending, 0);
      continue;
    }
    o->persisting = 1;
    pthread_mutex_unlock(&o->mu); /* callers keep serving below the old bound */
    pc_error_t err;
    pc_status_t st = persist(o, bound, &err);
    pthread_mutex_lock(&o->mu);
    o->persisting = 0;
    if (st == PC_OK && bound > o->bound) o->bound = bound;
    /* on failure the bound stays: the caller that reaches it persists itself
     * and reports the error */
    atomic_store(&o->extending, o->want_extend); /* after the bound moved */
    pthread_cond_broadcast(&o->placed);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

static char *dup_str(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  char *p = malloc(a + b + 1);
  if (!p) return NULL;
  memcpy(p, s, a);
  memcpy(p + a, suffix, b + 1);
  return p;
}

/* The directory part of path ("." when it has none). */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return dup_str(".", "");
  size_t n = (size_t)(slash - path);
  if (n == 0) n = 1; /* "/file" lives in "/" */
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, path, n);
  d[n] = '\0';
  return d;
}

void pc_oracle_close(pc_oracle_t *oracle) {
  if (!oracle) return;
  if (oracle->extender_running) {
    pthread_mutex_lock(&oracle->mu);
    oracle->stop = 1;
    pthread_cond_signal(&oracle->wake);
    pthread_mutex_unlock(&oracle->mu);
    pthread_join(oracle->extender, NULL);
  }
  if (oracle->ops.close) oracle->ops.close(oracle->ops_ctx);
  pthread_cond_destroy(&oracle->wake);
  pthread_cond_destroy(&oracle->placed);
  pthread_mutex_destroy(&oracle->mu);
  free(oracle->name);
  free(oracle);
}

pc_oracle_t *pc_oracle_open_with(const pc_oracle_bound_ops_t *ops, void *ctx, const char *name,
                                 uint32_t window_ms, int leased, pc_error_t *err) {
  if (!ops || !ops->load || !ops->persist || !name) {
    pc_error_set(err, PC_INVALID, "timestamp oracle: no bound store");
    if (ops && ops->close) ops->close(ctx);
    return NULL;
  }
  pc_oracle_t *o = calloc(1, sizeof *o);
  if (!o || !(o->name = dup_str(name, "")) || pthread_mutex_init(&o->mu, NULL) != 0 ||
      pthread_cond_init(&o->wake, NULL) != 0 || pthread_cond_init(&o->placed, NULL) != 0) {
    if (o) free(o->name);
    free(o);
    if (ops->close) ops->close(ctx);
    pc_error_set(err, PC_NOMEM, "timestamp oracle %s: out of memory", name);
    return NULL;
  }
  o->ops = *ops;
  o->ops_ctx = ctx;
  o->window_ms = window_ms ? window_ms : DEFAULT_WINDOW_MS;
  atomic_init(&o->lease_until, leased ? 1 : UINT64_MAX); /* leased: run out until extended */

  uint64_t saved = 0;
  if (o->ops.load(ctx, &saved, err) != PC_OK) {
    pc_oracle_close(o);
    return NULL;
  }
  /* Nothing at or below the saved bound is served again. Persisting a fresh
   * bound now creates a missing file and finds an unwritable one at once. */
  if (saved == UINT64_MAX) {
    pc_error_set(err, PC_CORRUPTION, "%s: bound at the end of the timestamp space", name);
    pc_oracle_close(o);
    return NULL;
  }
  atomic_init(&o->floor, saved);
  o->floor0 = saved;
  atomic_init(&o->bound, saved);
  if (reserve(o, saved + 1, pc_now_wall_ms(), err) != PC_OK) {
    pc_oracle_close(o);
    return NULL;
  }
  /* Without the extender (no thread to be had) callers persist as they go. */
  o->extender_running = pthread_create(&o->extender, NULL, extender_main, o) == 0;
  pc_error_clear(err);
  return o;
}

static void file_bound_close(void *ctx) {
  file_bound_t *f = ctx;
  if (!f) return;
  if (f->lock_fd > 0) close(f->lock_fd); /* releases the flock */
  free(f->path);
  free(f->tmp_path);
  free(f->dir);
  free(f);
}

pc_oracle_t *pc_oracle_open(const char *path, uint32_t window_ms, pc_error_t *err) {
  if (!path || !*path) {
    pc_error_set(err, PC_INVALID, "timestamp oracle: empty bound file path");
    return NULL;
  }
  file_bound_t *f = calloc(1, sizeof *f);
  if (!f || !(f->path = dup_str(path, "")) || !(f->tmp_path = dup_str(path, ".tmp")) ||
      !(f->dir = dir_of(path))) {
    file_bound_close(f);
    pc_error_set(err, PC_NOMEM, "timestamp oracle %s: out of memory", path);
    return NULL;
  }
  /* Two oracles serving one bound file would hand out the same timestamps:
   * the first to open it holds an exclusive lock until it closes (or dies). */
  char *lock_path = dup_str(path, ".lock");
  f->lock_fd = lock_path ? open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
  if (f->lock_fd < 0 || flock(f->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    if (f->lock_fd >= 0 && (e == EWOULDBLOCK || e == EAGAIN))
      pc_error_set(err, PC_BUSY, "timestamp oracle %s is in use by another process", path);
    else
      pc_error_set(err, PC_IO_ERROR, "timestamp oracle %s: cannot lock %s: %s", path,
                   lock_path ? lock_path : "(out of memory)", strerror(e));
    free(lock_path);
    file_bound_close(f);
    return NULL;
  }
  free(lock_path);
  static const pc_oracle_bound_ops_t file_ops = {load_bound, persist_bound, file_bound_close};
  return pc_oracle_open_with(&file_ops, f, path, window_ms, 0, err);
}

void pc_oracle_extend_lease(pc_oracle_t *oracle, uint64_t until_mono_ms) {
  uint64_t cur = atomic_load(&oracle->lease_until);
  /* never shortened; once fenced (0), never again; never a lease on an
   * oracle opened without one (UINT64_MAX) */
  while (cur != 0 && cur < until_mono_ms &&
         !atomic_compare_exchange_weak(&oracle->lease_until, &cur, until_mono_ms)) {
  }
}

void pc_oracle_fence(pc_oracle_t *oracle) { atomic_store(&oracle->lease_until, 0); }

int pc_oracle_serving(pc_oracle_t *oracle) {
  uint64_t until = atomic_load(&oracle->lease_until);
  return until == UINT64_MAX || pc_now_mono_ms() < until;
}

static pc_status_t not_serving(pc_oracle_t *o, pc_error_t *err) {
  return pc_error_set(err, PC_UNAVAILABLE,
                      atomic_load(&o->lease_until) == 0
                          ? "timestamp oracle %s: another oracle took over"
                          : "timestamp oracle %s: not leading (no lease)",
                      o->name);
}

/* Where a range of count timestamps starting after floor f and not before
 * the clock's now_ts ends (exclusive); 0 when the timestamp space is used up. */
static uint64_t range_end(uint64_t f, uint64_t now_ts, uint32_t count) {
  if (f >= UINT64_MAX - count) return 0;
  /* a logical counter that outgrows a millisecond simply carries into the
   * physical part: the sequence stays strictly increasing */
  uint64_t start = now_ts > f + 1 ? now_ts : f + 1;
  return start > UINT64_MAX - count ? 0 : start + count;
}

pc_status_t pc_oracle_next(pc_oracle_t *oracle, uint32_t count, uint64_t *first,
                           pc_error_t *err) {
  if (!oracle || !first) return pc_error_set(err, PC_INVALID, "pc_oracle_next: NULL argument");
  if (count == 0) return pc_error_set(err, PC_INVALID, "pc_oracle_next: count must be >= 1");
  /* under a lease (a leader elected in the coordination service) nothing is
   * served once it ran out: another oracle may be serving by then */
  if (!pc_oracle_serving(oracle)) return not_serving(oracle, err);
  uint64_t now_ms = pc_now_wall_ms();
  uint64_t now_ts = ts_of_ms(now_ms);
  uint64_t half = ts_of_ms(oracle->window_ms / 2);
  /* the common case: more than half a window left below the bound, or the
   * next bound on its way, taken with one compare-and-swap */
  uint64_t f = atomic_load(&oracle->floor);
  for (;;) {
    uint64_t end = range_end(f, now_ts, count), bound = atomic_load(&oracle->bound);
    if (end == 0 || end > bound || (bound - end < half && !atomic_load(&oracle->extending)))
      break;
    if (atomic_compare_exchange_weak(&oracle->floor, &f, end - 1)) {
      *first = end - count;
      pc_error_clear(err);
      return PC_OK;
    }
  }
  /* near or past the bound: under the mutex, which persists or waits for the
   * extender (reserve) */
  pthread_mutex_lock(&oracle->mu);
  pc_status_t st = PC_OK;
  f = atomic_load(&oracle->floor);
  for (;;) {
    uint64_t end = range_end(f, now_ts, count);
    if (end == 0) {
      st = pc_error_set(err, PC_INTERNAL, "%s: timestamp space exhausted", oracle->name);
      break;
    }
    st = reserve(oracle, end, now_ms, err);
    if (st != PC_OK) break;
    if (atomic_compare_exchange_strong(&oracle->floor, &f, end - 1)) {
      *first = end - count;
      break;
    }
  }
  pthread_mutex_unlock(&oracle->mu);
  if (st == PC_OK) pc_error_clear(err);
  return st;
}

uint64_t pc_oracle_last(pc_oracle_t *oracle) {
  if (!oracle) return 0;
  uint64_t f = atomic_load(&oracle->floor);
  return f == oracle->floor0 ? 0 : f;
}

pc_status_t pc_oracle_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                            pc_error_t *err) {
  (void)timeout_ms; /* in-process: answers at once, at most one fsync */
  if (!ctx) return pc_error_set(err, PC_INVALID, "pc_oracle_fetch: no oracle");
  return pc_oracle_next(ctx, count, first, err);
}
