/* verb_load.c — `percolator load`: the dedup application's loader. Writes
 * documents to table docs (row = URL, column doc:contents) with a pool of
 * threads, in one transaction the documents a thread finds queued together
 * (at most BATCH_DOCS; each in its own when the load is paced, when that
 * transaction fails, and each delete), from plain files (one document each),
 * JSON-lines files and directory trees. Inputs that are not documents
 * (devices, FIFOs, sockets, binary or oversized files, malformed lines) are
 * reported with their file (and line), counted and skipped, never opened
 * for reading when they are not regular files; every read is bounded by
 * --max-bytes before memory is taken for it, and memory held by the queue is
 * bounded too. Each document's outcome is a library status (--json prints
 * one line per document), and the exit status follows the worst of them.
 * `load --delete URL...` deletes documents, each a plain delete (a delete
 * notifies the dedup observer as a put does). SIGINT stops the load cleanly: transactions in
 * flight finish, the summary says what was written. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "apps/cli/jsonl_doc.h"
#include "base/error.h"

#define DOCS_TABLE "docs"
#define CONTENTS_COL "doc:contents"
#define DEFAULT_MAX_BYTES (1u << 20)
#define BINARY_PROBE 8192
/* A URL is the qualifier of the dups column m:<URL> (apps/dedup/dedup.c). */
#define MAX_URL (PC_MAX_COLUMN - 2)
#define MAX_RETRIES 50
/* A transaction that applied nothing because a server could not be reached
 * (a tablet's leader killed, an oracle failing over) goes again this many
 * times at most, 100 ms more apart each time: about 5 s, past an election. */
#define TRANSIENT_RETRIES 9
/* The queue between the readers and the writing threads: at most this many
 * items and bytes of contents (but always one item). */
#define QUEUE_MAX 256
#define QUEUE_MAX_BYTES (64u << 20)
/* A JSON line holds at most a URL and contents of --max-bytes, each byte of
 * which JSON may spell in 6 ("\u00XX"), and some room for the rest. */
#define LINE_SLACK (64u << 10)
#define READ_CHUNK (1u << 20)
/* Documents that a writing thread finds queued together go out in one
 * transaction, at most this many and this many bytes of contents: one
 * commit (one round trip to a served store or a tablet, one synced write)
 * for all of them instead of one each. */
#define BATCH_DOCS 32
#define BATCH_BYTES (1u << 20)

enum { OPT_THREADS = 0x400, OPT_MAX_BYTES, OPT_DELETE, OPT_JSON, OPT_RATE, OPT_JSONL, OPT_VERBOSE };

/* Without --verbose, the skipped inputs of each reason shown on stderr; the
 * rest are counted, and the summary says how many were not shown. */
#define SKIPS_SHOWN 3

/* Why an input was skipped. */
enum {
  SK_UNREADABLE,
  SK_BINARY,
  SK_TOO_LARGE,
  SK_INVALID_JSON,
  SK_EMPTY,
  SK_BAD_URL,
  SK_SPECIAL,
  NSKIP
};
static const char *const skip_names[NSKIP] = {"unreadable", "binary",  "too_large", "invalid_json",
                                              "empty",      "bad_url", "special"};

typedef enum { IT_FILE, IT_DOC, IT_DELETE } item_kind_t;

typedef struct item {
  item_kind_t kind;
  char *url; /* IT_FILE: the path, which is the URL */
  size_t ulen;
  char *contents; /* IT_DOC */
  size_t clen;
  struct item *next;
} item_t;

#define NSTATUS (PC_UNKNOWN + 1)

typedef struct loader {
  const cli_ctx_t *ctx;
  pc_db_t *db;
  size_t max_bytes;
  int json;
  int verbose; /* every skipped input on stderr */
  atomic_size_t unshown; /* skipped inputs not shown on stderr */
  pthread_mutex_t out_mu; /* one line at a time on stdout and stderr */
  /* the queue: a bounded list, producer = the main thread */
  pthread_mutex_t mu;
  pthread_cond_t cv_put, cv_get, cv_tick;
  item_t *head, *tail;
  size_t queued, queued_bytes;
  int done;     /* no more items */
  int finished; /* workers are done: the progress thread stops */
  atomic_size_t total;            /* items produced */
  atomic_size_t by_status[NSTATUS]; /* documents attempted, by final status */
  atomic_size_t skipped[NSKIP];
  atomic_size_t not_started; /* queued when SIGINT came */
  atomic_int fatal;          /* out of memory: the load stops, exit 3 */
  size_t arg_errors;         /* arguments that could not be read at all */
  struct timespec t0;
  uint64_t pace_ns; /* --rate: the interval between two documents' starts (0: none) */
  uint64_t next_ns; /* under mu: when the next document may start (monotonic) */
} loader_t;

/* SIGINT: the load stops taking inputs; a second one kills (SA_RESETHAND). */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static double elapsed(const loader_t *l) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - l->t0.tv_sec) + (double)(t.tv_nsec - l->t0.tv_nsec) / 1e9;
}

/* ---- reporting ------------------------------------------------------------------ */

/* Counts a skipped input and reports it: "FILE[:LINE]: <fmt...>, skipped" on
 * stderr, and with --json {"input","line","status":"skipped","reason","error"}. */
static void skip(loader_t *l, int why, const char *file, unsigned long line, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));
static void skip(loader_t *l, int why, const char *file, unsigned long line, const char *fmt,
                 ...) {
  size_t before = atomic_fetch_add(&l->skipped[why], 1);
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&l->out_mu);
  if (!l->verbose && before >= SKIPS_SHOWN)
    atomic_fetch_add(&l->unshown, 1);
  else if (line)
    fprintf(stderr, "percolator: load: %s:%lu: %s, skipped\n", file, line, msg);
  else
    fprintf(stderr, "percolator: load: %s: %s, skipped\n", file, msg);
  if (l->json) {
    json_t *o = json_object();
    if (o && fmt_json_bytes(o, "input", file, strlen(file)) == 0) {
      if (line) json_object_set_new(o, "line", json_integer((json_int_t)line));
      json_object_set_new(o, "status", json_string("skipped"));
      json_object_set_new(o, "reason", json_string(skip_names[why]));
      json_object_set_new(o, "error", json_string(msg));
    }
    fmt_json_line(stdout, o);
  }
  pthread_mutex_unlock(&l->out_mu);
}

/* A document's outcome: counted; reported on stderr unless ok, and with
 * --json as {"url","status"[,"error"]}. */
static void outcome(loader_t *l, const item_t *it, pc_status_t st, const pc_error_t *err) {
  atomic_fetch_add(&l->by_status[(unsigned)st < NSTATUS ? st : PC_INTERNAL], 1);
  const char *text = st == PC_OK ? NULL
                     : st == PC_NOT_FOUND ? "no such document"
                     : err->text[0]       ? err->text
                                          : pc_status_name(st);
  pthread_mutex_lock(&l->out_mu);
  if (text) {
    char *u = fmt_escape_str(it->url, it->ulen, 0);
    fprintf(stderr, "percolator: load: %s: %s\n", u ? u : "?", text);
    free(u);
  }
  if (l->json) {
    json_t *o = json_object();
    if (o && fmt_json_bytes(o, "url", it->url, it->ulen) == 0) {
      json_object_set_new(o, "status", json_string(pc_status_name(st)));
      if (text) json_object_set_new(o, "error", json_string(text));
    }
    fmt_json_line(stdout, o);
  }
  pthread_mutex_unlock(&l->out_mu);
}

/* An allocation failed: the load stops and exits 3 (never a shortened input). */
static void fatal_nomem(loader_t *l, const char *what) {
  if (atomic_exchange(&l->fatal, 1) == 0) {
    pthread_mutex_lock(&l->out_mu);
    fprintf(stderr, "percolator: load: out of memory %s; stopping\n", what);
    pthread_mutex_unlock(&l->out_mu);
  }
}

static int stopping(loader_t *l) { return interrupted || atomic_load(&l->fatal); }

/* ---- the queue ------------------------------------------------------------------- */

static void item_free(item_t *it) {
  if (!it) return;
  free(it->url);
  free(it->contents);
  free(it);
}

/* Queues it (taking it), waiting while the queue is full; frees it instead
 * when the load is stopping. */
static void put(loader_t *l, item_t *it) {
  pthread_mutex_lock(&l->mu);
  while (l->queued > 0 &&
         (l->queued >= QUEUE_MAX || l->queued_bytes + it->clen > QUEUE_MAX_BYTES) &&
         !stopping(l)) {
    struct timespec until = pc_mono_after_ms(100); /* SIGINT cannot signal a condition */
    pthread_cond_timedwait(&l->cv_put, &l->mu, &until);
  }
  if (stopping(l)) {
    pthread_mutex_unlock(&l->mu);
    item_free(it);
    return;
  }
  if (l->tail) l->tail->next = it;
  else l->head = it;
  l->tail = it;
  l->queued++;
  l->queued_bytes += it->clen;
  atomic_fetch_add(&l->total, 1);
  pthread_cond_signal(&l->cv_get);
  pthread_mutex_unlock(&l->mu);
}

/* The item at the queue's head, taken (under mu). */
static item_t *unqueue(loader_t *l) {
  item_t *it = l->head;
  l->head = it->next;
  if (!l->head) l->tail = NULL;
  it->next = NULL;
  l->queued--;
  l->queued_bytes -= it->clen;
  pthread_cond_signal(&l->cv_put);
  return it;
}

static int batchable(const item_t *it) { return it->kind != IT_DELETE; }

/* Takes the next item, waiting for one; then, unless the load is paced,
 * the documents queued right behind it that may share its transaction
 * (not deletes, not a URL already taken, within BATCH_DOCS and about
 * BATCH_BYTES), into its[]. The count taken; 0 when the load is over. */
static size_t take(loader_t *l, item_t *its[BATCH_DOCS]) {
  pthread_mutex_lock(&l->mu);
  while (!l->head && !l->done && !stopping(l)) {
    struct timespec until = pc_mono_after_ms(100);
    pthread_cond_timedwait(&l->cv_get, &l->mu, &until);
  }
  size_t n = 0, bytes = 0;
  if (!stopping(l) && l->head) {
    its[n++] = unqueue(l);
    bytes = its[0]->clen;
  }
  while (n && batchable(its[0]) && !l->pace_ns && n < BATCH_DOCS && l->head &&
         batchable(l->head) && bytes + l->head->clen <= BATCH_BYTES) {
    int dup = 0;
    for (size_t i = 0; i < n && !dup; i++)
      dup = its[i]->ulen == l->head->ulen && memcmp(its[i]->url, l->head->url, its[i]->ulen) == 0;
    if (dup) break; /* a later version of a document: a transaction after this one */
    bytes += l->head->clen;
    its[n++] = unqueue(l);
  }
  pthread_mutex_unlock(&l->mu);
  return n;
}

/* ---- writing ---------------------------------------------------------------------- */

/* One delete attempt: PC_NOT_FOUND (nothing written) when the document is absent. */
static pc_status_t delete_doc(pc_txn_t *txn, const item_t *it, pc_error_t *err) {
  char *v = NULL;
  size_t vl;
  pc_status_t st = pc_txn_get(txn, DOCS_TABLE, it->url, it->ulen, CONTENTS_COL,
                              strlen(CONTENTS_COL), &v, &vl, err);
  pc_free(v);
  if (st != PC_OK) return st;
  /* a plain delete: it notifies the column's strong observers as a put does */
  return pc_txn_delete(txn, DOCS_TABLE, it->url, it->ulen, CONTENTS_COL, strlen(CONTENTS_COL), err);
}

/* One transaction writing (or deleting) the document, retried on conflict,
 * and on a failure that left nothing written and may pass (pc_txn_commit:
 * a commit whose outcome was settled as rolled back returns the request's
 * error). PC_UNKNOWN is never retried: the write may stand. */
static void commit_doc(loader_t *l, const item_t *it, const char *contents, size_t clen) {
  pc_error_t err;
  pc_error_clear(&err);
  pc_status_t st = PC_OK;
  unsigned seed = (unsigned)(uintptr_t)it;
  int transient = 0;
  for (int attempt = 0; attempt < MAX_RETRIES; attempt++) {
    pc_txn_t *txn = pc_txn_begin(l->db, &err);
    if (!txn) {
      st = err.code;
      break;
    }
    if (it->kind == IT_DELETE)
      st = delete_doc(txn, it, &err);
    else
      st = pc_txn_set(txn, DOCS_TABLE, it->url, it->ulen, CONTENTS_COL, strlen(CONTENTS_COL),
                      contents, clen, &err);
    if (st == PC_OK) st = pc_txn_commit(txn, &err);
    pc_txn_destroy(txn);
    if (stopping(l)) break;
    if (st == PC_UNAVAILABLE || st == PC_TIMEOUT || st == PC_IO_ERROR) {
      if (++transient > TRANSIENT_RETRIES) break;
      pc_sleep_ms(100u * (unsigned)transient);
      continue;
    }
    if (st != PC_CONFLICT) break;
    struct timespec d = {0, (long)(1 + rand_r(&seed) % (unsigned)(attempt + 1)) * 2000000L};
    nanosleep(&d, NULL);
  }
  outcome(l, it, st, &err);
}

/* The line of the byte at offset off of p (1-based). */
static unsigned long line_of(const char *p, size_t off) {
  unsigned long line = 1;
  for (size_t i = 0; i < off; i++) line += p[i] == '\n';
  return line;
}

static const char *file_kind(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
         : S_ISDIR(m)  ? "a directory"
                       : "not a regular file";
}

/* Reads the regular file path whole, at most max bytes: 0 with *buf (malloc'd)
 * and *n; 1 when it was skipped (reported); -1 when memory ran out. The
 * file is opened without blocking and checked to be regular before any read,
 * so a FIFO or device put in its place is never read. */
static int read_document(loader_t *l, const char *path, char **buf, size_t *n) {
  *buf = NULL;
  *n = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  if (!S_ISREG(st.st_mode)) {
    skip(l, SK_SPECIAL, path, 0, "%s, not a document", file_kind(st.st_mode));
    close(fd);
    return 1;
  }
  if ((uint64_t)st.st_size > l->max_bytes) {
    skip(l, SK_TOO_LARGE, path, 0, "too large (%llu bytes, above --max-bytes %zu)",
         (unsigned long long)st.st_size, l->max_bytes);
    close(fd);
    return 1;
  }
  /* the size may be wrong (a file being written, /proc): read up to max + 1 */
  size_t limit = l->max_bytes + 1;
  size_t cap = (size_t)st.st_size + 1 < 65536 ? 65536 : (size_t)st.st_size + 1;
  if (cap > limit) cap = limit;
  char *b = malloc(cap);
  size_t got = 0;
  ssize_t r = 0;
  int rc = 0;
  while (b && got < limit) {
    if (got == cap) {
      size_t nc = cap * 2 < limit ? cap * 2 : limit;
      char *nb = realloc(b, nc);
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap = nc;
    }
    r = read(fd, b + got, cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  int e = errno;
  close(fd);
  if (!b) {
    fatal_nomem(l, "reading a file");
    return -1;
  }
  if (r < 0) {
    skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(e));
    rc = 1;
  } else if (got > l->max_bytes) {
    skip(l, SK_TOO_LARGE, path, 0, "too large (more than --max-bytes %zu while read)",
         l->max_bytes);
    rc = 1;
  } else if (got == 0) {
    skip(l, SK_EMPTY, path, 0, "empty");
    rc = 1;
  }
  if (rc) {
    free(b);
    return rc;
  }
  *buf = b;
  *n = got;
  return 0;
}

/* Reads the document of file item it into it->contents: 0, or nonzero when
 * it was skipped (reported) or memory ran out. */
static int load_file(loader_t *l, item_t *it) {
  char *buf;
  size_t n;
  if (read_document(l, it->url, &buf, &n) != 0) return -1;
  const char *nul = memchr(buf, '\0', n < BINARY_PROBE ? n : BINARY_PROBE);
  if (nul) {
    skip(l, SK_BINARY, it->url, line_of(buf, (size_t)(nul - buf)),
         "binary (a NUL byte at offset %zu)", (size_t)(nul - buf));
    free(buf);
    return 1;
  }
  it->contents = buf;
  it->clen = n;
  return 0;
}

/* Documents its[0..n) (n >= 2) in one transaction; when it does not
 * commit, each on its own (commit_doc), so that each has its own outcome
 * (a conflict of one is then retried alone, an invalid one fails alone). A
 * commit whose outcome is unknown may stand: writing a document's contents
 * again is harmless, and each then has an outcome of its own too. */
static void commit_batch(loader_t *l, item_t **its, size_t n) {
  pc_error_t err;
  pc_error_clear(&err);
  pc_txn_t *txn = pc_txn_begin(l->db, &err);
  pc_status_t st = txn ? PC_OK : err.code;
  for (size_t i = 0; i < n && st == PC_OK; i++)
    st = pc_txn_set(txn, DOCS_TABLE, its[i]->url, its[i]->ulen, CONTENTS_COL,
                    strlen(CONTENTS_COL), its[i]->contents, its[i]->clen, &err);
  if (st == PC_OK) st = pc_txn_commit(txn, &err);
  pc_txn_destroy(txn);
  for (size_t i = 0; i < n; i++) {
    if (st == PC_OK) outcome(l, its[i], PC_OK, &err);
    else if (!stopping(l)) commit_doc(l, its[i], its[i]->contents, its[i]->clen);
    else outcome(l, its[i], st, &err);
  }
}

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* --rate: waits for this document's turn, one every pace_ns across threads. */
static void pace(loader_t *l) {
  if (!l->pace_ns) return;
  pthread_mutex_lock(&l->mu);
  uint64_t now = mono_ns();
  uint64_t at = l->next_ns > now ? l->next_ns : now;
  l->next_ns = at + l->pace_ns;
  pthread_mutex_unlock(&l->mu);
  if (at > now) {
    struct timespec d = {(time_t)((at - now) / 1000000000u), (long)((at - now) % 1000000000u)};
    nanosleep(&d, NULL);
  }
}

static void *worker_main(void *arg) {
  loader_t *l = arg;
  item_t *its[BATCH_DOCS];
  size_t n;
  while ((n = take(l, its)) > 0) {
    pace(l);
    size_t k = 0; /* the items with contents to write */
    for (size_t i = 0; i < n; i++) {
      if (its[i]->kind == IT_FILE && load_file(l, its[i]) != 0) item_free(its[i]);
      else its[k++] = its[i];
    }
    for (size_t a = 0, b; a < k; a = b) { /* files' sizes were known only now */
      size_t bytes = its[a]->clen;
      for (b = a + 1; b < k && bytes + its[b]->clen <= BATCH_BYTES; b++) bytes += its[b]->clen;
      if (b - a == 1) commit_doc(l, its[a], its[a]->contents, its[a]->clen);
      else commit_batch(l, its + a, b - a);
    }
    for (size_t i = 0; i < k; i++) item_free(its[i]);
  }
  return NULL;
}

/* ---- progress ------------------------------------------------------------------ */

static size_t nskipped(loader_t *l) {
  size_t s = 0;
  for (int i = 0; i < NSKIP; i++) s += atomic_load(&l->skipped[i]);
  return s;
}

static size_t ndone(loader_t *l) {
  size_t s = nskipped(l);
  for (int i = 0; i < NSTATUS; i++) s += atomic_load(&l->by_status[i]);
  return s;
}

static void *progress_main(void *arg) {
  loader_t *l = arg;
  int tty = isatty(STDERR_FILENO);
  int period = tty ? 1 : 5;
  pthread_mutex_lock(&l->mu);
  while (!l->finished) {
    struct timespec until = pc_mono_after_ms((uint32_t)period * 1000);
    while (!l->finished && pthread_cond_timedwait(&l->cv_tick, &l->mu, &until) == 0) {
    }
    if (l->finished) break;
    int known = l->done;
    pthread_mutex_unlock(&l->mu);
    double t = elapsed(l);
    size_t loaded = atomic_load(&l->by_status[PC_OK]);
    size_t done = ndone(l), total = atomic_load(&l->total);
    double rate = t > 0 ? (double)loaded / t : 0;
    char eta[48] = "";
    if (known && rate > 0 && total >= done)
      snprintf(eta, sizeof eta, ", ETA %.0f s", (double)(total - done) / rate);
    pthread_mutex_lock(&l->out_mu);
    if (tty)
      fprintf(stderr, "\r\033[K%zu/%zu%s documents, %.0f documents/s%s", done, total,
              known ? "" : "+", rate, eta);
    else
      fprintf(stderr, "percolator: load: %zu of %zu%s documents done, %.0f documents/s%s\n",
              done, total, known ? "" : "+", rate, eta);
    pthread_mutex_unlock(&l->out_mu);
    pthread_mutex_lock(&l->mu);
  }
  pthread_mutex_unlock(&l->mu);
  if (tty) fputs("\r\033[K", stderr);
  return NULL;
}

/* ---- inputs ---------------------------------------------------------------------- */

static item_t *new_item(item_kind_t kind, const char *url, size_t ulen) {
  item_t *it = calloc(1, sizeof *it);
  if (!it || !(it->url = malloc(ulen + 1))) {
    free(it);
    return NULL;
  }
  memcpy(it->url, url, ulen);
  it->url[ulen] = '\0';
  it->ulen = ulen;
  it->kind = kind;
  return it;
}

static int check_url(loader_t *l, const char *file, unsigned long line, const char *url,
                     size_t ulen) {
  if (ulen == 0) {
    skip(l, SK_BAD_URL, file, line, "empty URL");
    return -1;
  }
  if (ulen > MAX_URL) {
    skip(l, SK_BAD_URL, file, line, "URL too long (%zu bytes, above the limit of %d)", ulen,
         MAX_URL);
    return -1;
  }
  return 0;
}

/* Lines of a file read with bounded memory: a line longer than limit is
 * reported as such and its bytes are not kept. */
typedef struct lines {
  int fd;
  char *buf; /* READ_CHUNK bytes */
  size_t pos, end;
  int eof;
  char *line;
  size_t len, cap, limit;
} lines_t;

/* The next line into r->line[0..len) (without '\n'): 1, with *too_long set
 * when it exceeded the limit (its bytes dropped); 0 at the end; -1 on a read
 * error (errno); -2 when memory ran out. */
static int next_line(lines_t *r, int *too_long) {
  r->len = 0;
  *too_long = 0;
  int any = 0;
  for (;;) {
    if (r->pos == r->end) {
      if (r->eof) return any ? 1 : 0;
      ssize_t n = read(r->fd, r->buf, READ_CHUNK);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -1;
      if (n == 0) {
        r->eof = 1;
        continue;
      }
      r->pos = 0;
      r->end = (size_t)n;
    }
    any = 1;
    const char *p = r->buf + r->pos;
    size_t avail = r->end - r->pos;
    const char *nl = memchr(p, '\n', avail);
    size_t take = nl ? (size_t)(nl - p) : avail;
    if (!*too_long && r->len + take > r->limit) {
      *too_long = 1;
      r->len = 0;
    }
    if (!*too_long) {
      if (r->len + take > r->cap) {
        size_t nc = r->cap ? r->cap : 65536;
        while (nc < r->len + take) nc *= 2;
        if (nc > r->limit) nc = r->limit;
        char *nb = realloc(r->line, nc);
        if (!nb) return -2;
        r->line = nb;
        r->cap = nc;
      }
      memcpy(r->line + r->len, p, take);
      r->len += take;
    }
    r->pos += take + (nl != NULL);
    if (nl) return 1;
  }
}

/* The document of a line with url[0..ulen) and contents[0..clen): queued,
 * or reported and skipped. -1 when memory ran out. */
static int doc_entry(loader_t *l, const char *path, unsigned long lineno, const char *url,
                     size_t ulen, const char *contents, size_t clen) {
  if (check_url(l, path, lineno, url, ulen) != 0) return 0;
  if (clen == 0) {
    skip(l, SK_EMPTY, path, lineno, "empty contents");
    return 0;
  }
  if (clen > l->max_bytes) {
    skip(l, SK_TOO_LARGE, path, lineno, "contents too large (%zu bytes, above --max-bytes %zu)",
         clen, l->max_bytes);
    return 0;
  }
  item_t *it = new_item(IT_DOC, url, ulen);
  if (!it || !(it->contents = malloc(clen))) {
    item_free(it);
    return -1;
  }
  memcpy(it->contents, contents, clen);
  it->clen = clen;
  put(l, it);
  return 0;
}

/* One JSON line: queued as a document, or reported and skipped. A line of
 * string members is read without jansson's tree (jsonl_doc.c); any other,
 * or one without both members, is jansson's to accept or report. -1 when
 * memory ran out. */
static int jsonl_entry(loader_t *l, jsonl_doc_t *fast, const char *path, unsigned long lineno,
                       const char *line, size_t k) {
  int r = jsonl_doc_read(line, k, fast);
  if (r < 0) return -1;
  if (r == 1 && fast->url && fast->contents)
    return doc_entry(l, path, lineno, fast->url, fast->url_len, fast->contents,
                     fast->contents_len);
  json_error_t je;
  json_t *j = json_loadb(line, k, JSON_ALLOW_NUL, &je);
  json_t *u = j ? json_object_get(j, "url") : NULL;
  json_t *c = j ? json_object_get(j, "contents") : NULL;
  int rc = 0;
  if (!j || !json_is_object(j) || !json_is_string(u) || !json_is_string(c))
    skip(l, SK_INVALID_JSON, path, lineno, "invalid JSON line (%s)",
         !j ? je.text : "expected an object with string members \"url\" and \"contents\"");
  else
    rc = doc_entry(l, path, lineno, json_string_value(u), json_string_length(u),
                   json_string_value(c), json_string_length(c));
  json_decref(j);
  return rc;
}

/* A JSON-lines file: one {"url": ..., "contents": ...} per line. */
static void read_jsonl(loader_t *l, const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    skip(l, SK_SPECIAL, path, 0, "%s, not a file of documents", file_kind(st.st_mode));
    close(fd);
    return;
  }
  lines_t r = {.fd = fd, .buf = malloc(READ_CHUNK), .limit = l->max_bytes * 6 + MAX_URL * 6 +
                                                              LINE_SLACK};
  jsonl_doc_t fast = {0};
  unsigned long lineno = 0;
  int got = r.buf ? 0 : -2, too_long;
  while (got == 0 || got == 1) {
    if (stopping(l)) break;
    got = next_line(&r, &too_long);
    if (got != 1) break;
    lineno++;
    if (too_long) {
      skip(l, SK_TOO_LARGE, path, lineno, "line too long (above %zu bytes for --max-bytes %zu)",
           r.limit, l->max_bytes);
      continue;
    }
    size_t k = r.len;
    while (k && (r.line[k - 1] == '\r' || r.line[k - 1] == ' ')) k--;
    if (k == 0) continue; /* blank lines are allowed */
    if (jsonl_entry(l, &fast, path, lineno, r.line, k) != 0) got = -2;
  }
  if (got == -1)
    skip(l, SK_UNREADABLE, path, lineno + 1, "unreadable (%s)", strerror(errno));
  if (got == -2) fatal_nomem(l, "reading a JSON-lines file");
  free(r.buf);
  free(r.line);
  jsonl_doc_free(&fast);
  close(fd);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A directory tree: every regular file (symbolic links to files included) is
 * a document whose URL is its path; symbolic links to directories are not
 * followed, a dangling one is unreadable, and devices, FIFOs and sockets are
 * reported and skipped without being opened. */
static void walk(loader_t *l, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    skip(l, SK_UNREADABLE, dir, 0, "unreadable directory (%s)", strerror(errno));
    return;
  }
  struct dirent *e;
  while (!stopping(l) && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    size_t dl = strlen(dir), nl = strlen(e->d_name);
    char *path = malloc(dl + nl + 2);
    if (!path) {
      fatal_nomem(l, "walking a directory");
      break;
    }
    memcpy(path, dir, dl);
    path[dl] = '/';
    memcpy(path + dl + 1, e->d_name, nl + 1);
    struct stat st;
    if (lstat(path, &st) != 0) {
      skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      walk(l, path);
    } else if (S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
      skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(errno));
    } else if (S_ISREG(st.st_mode)) {
      if (check_url(l, path, 0, path, strlen(path)) == 0) {
        item_t *it = new_item(IT_FILE, path, strlen(path));
        if (it) put(l, it);
        else fatal_nomem(l, "walking a directory");
      }
    } else if (!S_ISDIR(st.st_mode)) { /* a link to a directory is not followed */
      skip(l, SK_SPECIAL, path, 0, "%s, not a document", file_kind(st.st_mode));
    }
    free(path);
  }
  closedir(d);
}

/* One argument of `load` (not --delete). Arguments that cannot be read at
 * all are counted: the load then exits 3. */
static void load_argument(loader_t *l, const char *a, int jsonl) {
  struct stat st;
  if (stat(a, &st) != 0) {
    skip(l, SK_UNREADABLE, a, 0, "cannot read it (%s)", strerror(errno));
    l->arg_errors++;
  } else if (S_ISDIR(st.st_mode)) {
    char *d = strdup(a);
    if (!d) {
      fatal_nomem(l, "reading the arguments");
      return;
    }
    for (size_t k = strlen(d); k > 1 && d[k - 1] == '/'; k--) d[k - 1] = '\0';
    walk(l, d);
    free(d);
  } else if (!S_ISREG(st.st_mode)) {
    skip(l, SK_SPECIAL, a, 0, "%s, not a document or a directory", file_kind(st.st_mode));
    l->arg_errors++;
  } else if (jsonl || ends_with(a, ".jsonl")) {
    read_jsonl(l, a);
  } else if (check_url(l, a, 0, a, strlen(a)) == 0) {
    item_t *it = new_item(IT_FILE, a, strlen(a));
    if (it) put(l, it);
    else fatal_nomem(l, "reading the arguments");
  }
}

static int parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) return -1;
  *out = (size_t)v;
  return 0;
}

/* ---- the summary ---------------------------------------------------------------------- */

static int print_summary(loader_t *l, int del) {
  double t = elapsed(l);
  size_t ok = atomic_load(&l->by_status[PC_OK]);
  size_t absent = atomic_load(&l->by_status[PC_NOT_FOUND]);
  size_t unknown = atomic_load(&l->by_status[PC_UNKNOWN]);
  size_t failed = 0;
  for (int i = 0; i < NSTATUS; i++)
    if (i != PC_OK && i != PC_NOT_FOUND && i != PC_UNKNOWN) failed += atomic_load(&l->by_status[i]);
  double rate = t > 0 ? (double)ok / t : 0;
  const char *verb = del ? "deleted" : "loaded";
  if (l->json) {
    json_t *o = json_object(), *s = json_object(), *by = json_object();
    if (!o || !s || !by) {
      json_decref(o);
      json_decref(s);
      json_decref(by);
      return -1;
    }
    json_object_set_new(o, verb, json_integer((json_int_t)ok));
    json_object_set_new(o, "failed", json_integer((json_int_t)failed));
    json_object_set_new(o, "unknown", json_integer((json_int_t)unknown));
    if (del) json_object_set_new(o, "not_found", json_integer((json_int_t)absent));
    for (int i = 0; i < NSKIP; i++)
      json_object_set_new(s, skip_names[i], json_integer((json_int_t)atomic_load(&l->skipped[i])));
    json_object_set_new(o, "skipped", s);
    for (int i = 0; i < NSTATUS; i++)
      if (atomic_load(&l->by_status[i]))
        json_object_set_new(by, pc_status_name((pc_status_t)i),
                            json_integer((json_int_t)atomic_load(&l->by_status[i])));
    json_object_set_new(o, "by_status", by);
    json_object_set_new(o, "not_started", json_integer((json_int_t)atomic_load(&l->not_started)));
    json_object_set_new(o, "interrupted", json_boolean(interrupted));
    json_object_set_new(o, "seconds", json_real(t));
    json_object_set_new(o, "documents_per_s", json_real(rate));
    return fmt_json_line(stdout, o);
  }
  if (interrupted)
    printf("interrupted: %zu queued documents not started\n", atomic_load(&l->not_started));
  printf("%s %zu documents in %.1f s (%.0f documents/s); skipped %zu:", verb, ok, t, rate,
         nskipped(l));
  for (int i = 0; i < NSKIP; i++)
    printf(" %s %zu%s", skip_names[i], atomic_load(&l->skipped[i]), i + 1 < NSKIP ? "," : "");
  if (del) printf("; not found %zu", absent);
  if (unknown) printf("; outcome unknown %zu", unknown);
  printf("; failed %zu\n", failed);
  size_t unshown = atomic_load(&l->unshown);
  if (unshown)
    fprintf(stderr, "percolator: load: %zu more skipped input%s not shown (the first %d of each "
            "reason are); 'load --verbose' lists every one\n",
            unshown, unshown == 1 ? "" : "s", SKIPS_SHOWN);
  return 0;
}

/* The exit status: the worst of the outcomes (cli.h's order of severity). */
static int exit_status(loader_t *l, const cli_ctx_t *ctx) {
  size_t unknown = atomic_load(&l->by_status[PC_UNKNOWN]);
  size_t failed = 0;
  for (int i = 0; i < NSTATUS; i++)
    if (i != PC_OK && i != PC_NOT_FOUND && i != PC_UNKNOWN) failed += atomic_load(&l->by_status[i]);
  if (atomic_load(&l->fatal)) return CLI_EXIT_ERROR;
  if (interrupted) return CLI_EXIT_INTERRUPTED;
  if (unknown) {
    fprintf(stderr, "percolator: load: %zu document%s of unknown outcome (readers settle them)\n",
            unknown, unknown == 1 ? "" : "s");
    return CLI_EXIT_UNKNOWN;
  }
  if (failed)
    return cli_error(ctx, "%zu document%s could not be written", failed, failed == 1 ? "" : "s");
  if (l->arg_errors)
    return cli_error(ctx, "%zu argument%s could not be read", l->arg_errors,
                     l->arg_errors == 1 ? "" : "s");
  if (atomic_load(&l->by_status[PC_NOT_FOUND])) return CLI_EXIT_NOT_FOUND;
  return CLI_EXIT_OK;
}

static int run_load(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"threads", required_argument, NULL, OPT_THREADS},
                                       {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
                                       {"delete", no_argument, NULL, OPT_DELETE},
                                       {"json", no_argument, NULL, OPT_JSON},
                                       {"jsonl", no_argument, NULL, OPT_JSONL},
                                       {"rate", required_argument, NULL, OPT_RATE},
                                       {"verbose", no_argument, NULL, OPT_VERBOSE},
                                       {0, 0, 0, 0}};
  size_t threads = 8, max_bytes = DEFAULT_MAX_BYTES, per_s = 0;
  int del = 0, json = 0, jsonl = 0, verbose = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_THREADS && parse_size(optarg, 1, 64, &threads) != 0)
      return cli_usage_error(ctx, "--threads: expected 1..64, got '%s'", optarg);
    if (c == OPT_MAX_BYTES && parse_size(optarg, 1, PC_MAX_VALUE, &max_bytes) != 0)
      return cli_usage_error(ctx, "--max-bytes: expected 1..%u, got '%s'", PC_MAX_VALUE, optarg);
    if (c == OPT_DELETE) del = 1;
    if (c == OPT_JSON) json = 1;
    if (c == OPT_JSONL) jsonl = 1;
    if (c == OPT_VERBOSE) verbose = 1;
    if (c == OPT_RATE && parse_size(optarg, 1, 1000000, &per_s) != 0)
      return cli_usage_error(ctx, "--rate: expected 1..1000000 documents/s, got '%s'", optarg);
  }
  if (optind >= argc)
    return cli_usage_error(ctx, del ? "expected URL..." : "expected FILE, FILE.jsonl or DIR...");
  if (del && jsonl) return cli_usage_error(ctx, "--jsonl and --delete exclude each other");
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;

  loader_t l = {.ctx = ctx, .db = db, .max_bytes = max_bytes, .json = json, .verbose = verbose,
                .pace_ns = per_s ? 1000000000u / per_s : 0};
  pthread_mutex_init(&l.out_mu, NULL);
  pthread_mutex_init(&l.mu, NULL);
  pc_cond_init_mono(&l.cv_put);
  pc_cond_init_mono(&l.cv_get);
  pc_cond_init_mono(&l.cv_tick);
  clock_gettime(CLOCK_MONOTONIC, &l.t0);
  struct sigaction sa = {0}, old_sa;
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_sa);
  pthread_t tids[64], prog;
  size_t started = 0;
  int prog_started = pthread_create(&prog, NULL, progress_main, &l) == 0;
  for (; started < threads; started++)
    if (pthread_create(&tids[started], NULL, worker_main, &l) != 0) break;
  if (!started) fatal_nomem(&l, "starting the threads");
  for (int i = optind; i < argc && !stopping(&l); i++) {
    const char *a = argv[i];
    if (!del) {
      load_argument(&l, a, jsonl);
      continue;
    }
    size_t al = strlen(a);
    if (check_url(&l, a, 0, a, al) != 0) continue;
    item_t *it = new_item(IT_DELETE, a, al);
    if (it) put(&l, it);
    else fatal_nomem(&l, "reading the arguments");
  }
  pthread_mutex_lock(&l.mu);
  l.done = 1;
  pthread_cond_broadcast(&l.cv_get);
  pthread_mutex_unlock(&l.mu);
  for (size_t i = 0; i < started; i++) pthread_join(tids[i], NULL);
  pthread_mutex_lock(&l.mu);
  l.finished = 1;
  pthread_cond_broadcast(&l.cv_tick);
  pthread_mutex_unlock(&l.mu);
  if (prog_started) pthread_join(prog, NULL);
  for (item_t *it = l.head, *next; it; it = next) { /* left by SIGINT */
    next = it->next;
    atomic_fetch_add(&l.not_started, 1);
    item_free(it);
  }
  pc_db_close(db);
  sigaction(SIGINT, &old_sa, NULL);

  code = print_summary(&l, del) != 0 ? cli_error(ctx, "cannot write the summary")
                                     : exit_status(&l, ctx);
  pthread_cond_destroy(&l.cv_put);
  pthread_cond_destroy(&l.cv_get);
  pthread_cond_destroy(&l.cv_tick);
  pthread_mutex_destroy(&l.mu);
  pthread_mutex_destroy(&l.out_mu);
  int out = cli_finish_output(ctx);
  return code != CLI_EXIT_OK ? code : out;
}

const cli_verb_t cli_verb_load = {
    .name = "load",
    .summary = "load documents for the dedup application (docs table)",
    .run = run_load,
    .args = "[OPTIONS] (FILE | FILE.jsonl | DIR)...\n"
            "--delete [--json] URL...",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_NOT_FOUND) | CLI_EXIT_BIT(CLI_EXIT_UNKNOWN) |
             CLI_EXIT_BIT(CLI_EXIT_INTERRUPTED),
    .about =
        "Writes each document to table docs, row URL, column doc:contents, from\n"
        "several threads; a thread writes the documents it finds queued together (up\n"
        "to 32, 1 MiB) in one transaction, and each on its own when that one does\n"
        "not commit or the load is paced (--rate), retrying on conflict and, for\n"
        "about 5 s, after a failure that wrote nothing because a server could not\n"
        "be reached (a tablet's leader lost, an oracle failing over); the dedup\n"
        "observer plugin (apps/dedup/) clusters and indexes them. A FILE is one\n"
        "document whose URL is its path; a FILE.jsonl (or any FILE with --jsonl) is\n"
        "JSON lines, one {\"url\": \"...\", \"contents\": \"...\"} per line (blank lines\n"
        "allowed); a DIR is walked, and every regular file in it is a document whose\n"
        "URL is its path as reached from DIR (symbolic links to files are followed,\n"
        "to directories not).\n"
        "\n"
        "Bad inputs are reported on stderr (FILE:LINE: reason; the first 3 of each\n"
        "reason, every one with --verbose), counted and skipped:\n"
        "unreadable files, devices, FIFOs and sockets (never opened for reading),\n"
        "binary files (a NUL byte in the first 8 KiB), files, lines or contents above\n"
        "--max-bytes (never read into memory whole), invalid JSON lines, empty\n"
        "documents, URLs that are empty or longer than 1022 bytes. At the end a\n"
        "summary goes to stdout: documents loaded, skipped by reason, failed,\n"
        "documents/s. Meanwhile a progress line goes to stderr every second when it\n"
        "is a terminal (with an ETA once every input has been listed), else a plain\n"
        "line every 5 s. Ctrl-C stops it cleanly: the transactions in flight finish,\n"
        "queued documents are not started, the summary says what was written.\n"
        "\n"
        "--delete deletes the documents URL... in one transaction each, as\n"
        "'percolator delete docs URL doc:contents' does: a delete is a change, which\n"
        "the dedup observer sees; an absent document is reported as not found and\n"
        "nothing is written for it.\n"
        "\n"
        "Each document's outcome is a library status: ok; conflict, aborted,\n"
        "unavailable, timeout, ... (definitely not written); unknown (the commit's\n"
        "reply was lost: it may stand); not_found (--delete of an absent document).\n"
        "The exit status is the worst: 4 when any outcome is unknown, else 3 when a\n"
        "document failed or an argument could not be read (missing, a device, ...),\n"
        "else 1 when --delete found a document absent, else 0 (inputs skipped inside\n"
        "a directory or a JSON-lines file do not count); 130 after Ctrl-C.\n",
    .options =
        "  --threads N         writing threads, 1..64 (default 8)\n"
        "  --max-bytes N       the largest document, 1..8388608 bytes (default 1048576)\n"
        "  --jsonl             read every FILE as JSON lines, whatever its name\n"
        "  --delete            delete the documents named by the arguments\n"
        "  --verbose           report every skipped input on stderr (by default the\n"
        "                      first 3 of each reason, then a count)\n"
        "  --rate N            start at most N documents a second (a steady feed;\n"
        "                      default: as fast as the store takes them)\n"
        "  --json              one JSON object per document on stdout,\n"
        "                      {\"url\",\"status\"[,\"error\"]}, and per skipped input,\n"
        "                      {\"input\"[,\"line\"],\"status\":\"skipped\",\"reason\",\"error\"};\n"
        "                      then the summary: {\"loaded\"|\"deleted\",\"failed\",\"unknown\",\n"
        "                      \"skipped\":{REASON:N},\"by_status\":{STATUS:N},...}\n",
    .example = "percolator --data /tmp/pc load --threads 8 corpus/ more.jsonl\n",
};
