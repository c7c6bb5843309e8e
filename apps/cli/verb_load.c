/* verb_load.c — `percolator load`: the dedup application's loader. Writes
 * documents to table docs (row = URL, column doc:contents), each in its own
 * transaction, from JSON-lines files or directory trees, with a pool of
 * threads; bad inputs are reported with their file (and line), counted and
 * skipped. `load --delete URL...` deletes documents, each a plain delete
 * (a delete notifies the dedup observer as a put does). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define DOCS_TABLE "docs"
#define CONTENTS_COL "doc:contents"
#define DEFAULT_MAX_BYTES (1u << 20)
#define BINARY_PROBE 8192
/* A URL is the qualifier of the dups column m:<URL> (apps/dedup/dedup.c). */
#define MAX_URL (PC_MAX_COLUMN - 2)
#define MAX_RETRIES 50

enum { OPT_THREADS = 0x400, OPT_MAX_BYTES, OPT_DELETE, OPT_JSON, OPT_RATE };

/* Why an input was skipped. */
enum { SK_UNREADABLE, SK_BINARY, SK_TOO_LARGE, SK_INVALID_JSON, SK_EMPTY, SK_BAD_URL, NSKIP };
static const char *const skip_names[NSKIP] = {"unreadable", "binary",   "too_large",
                                              "invalid_json", "empty", "bad_url"};

typedef enum { IT_FILE, IT_DOC, IT_DELETE } item_kind_t;

typedef struct item {
  item_kind_t kind;
  char *url; /* IT_FILE: the path, which is the URL */
  size_t ulen;
  char *contents; /* IT_DOC */
  size_t clen;
  struct item *next;
} item_t;

typedef struct loader {
  const cli_ctx_t *ctx;
  pc_db_t *db;
  size_t max_bytes;
  /* the queue: a bounded list, producer = the main thread */
  pthread_mutex_t mu;
  pthread_cond_t cv_put, cv_get, cv_tick;
  item_t *head, *tail;
  size_t queued;
  int done; /* no more items */
  int finished; /* workers are done: the progress thread stops */
  atomic_size_t total;  /* items produced */
  atomic_size_t loaded; /* documents written (or deleted) */
  atomic_size_t failed; /* transactions that failed */
  atomic_size_t skipped[NSKIP];
  struct timespec t0;
  uint64_t pace_ns; /* --rate: the interval between two documents' starts (0: none) */
  uint64_t next_ns; /* under mu: when the next document may start (monotonic) */
} loader_t;

#define QUEUE_MAX 256

static double elapsed(const loader_t *l) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - l->t0.tv_sec) + (double)(t.tv_nsec - l->t0.tv_nsec) / 1e9;
}

/* Counts a skipped input and reports it: "FILE[:LINE]: <fmt...>, skipped". */
static void skip(loader_t *l, int why, const char *file, unsigned long line, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));
static void skip(loader_t *l, int why, const char *file, unsigned long line, const char *fmt,
                 ...) {
  atomic_fetch_add(&l->skipped[why], 1);
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line)
    fprintf(stderr, "percolator: load: %s:%lu: %s, skipped\n", file, line, msg);
  else
    fprintf(stderr, "percolator: load: %s: %s, skipped\n", file, msg);
}

static void item_free(item_t *it) {
  if (!it) return;
  free(it->url);
  free(it->contents);
  free(it);
}

static void put(loader_t *l, item_t *it) {
  pthread_mutex_lock(&l->mu);
  while (l->queued >= QUEUE_MAX) pthread_cond_wait(&l->cv_put, &l->mu);
  if (l->tail) l->tail->next = it;
  else l->head = it;
  l->tail = it;
  l->queued++;
  atomic_fetch_add(&l->total, 1);
  pthread_cond_signal(&l->cv_get);
  pthread_mutex_unlock(&l->mu);
}

static item_t *take(loader_t *l) {
  pthread_mutex_lock(&l->mu);
  while (!l->head && !l->done) pthread_cond_wait(&l->cv_get, &l->mu);
  item_t *it = l->head;
  if (it) {
    l->head = it->next;
    if (!l->head) l->tail = NULL;
    l->queued--;
    pthread_cond_signal(&l->cv_put);
  }
  pthread_mutex_unlock(&l->mu);
  return it;
}

/* One transaction writing (or deleting) the document, retried on conflict. */
static void commit_doc(loader_t *l, const item_t *it, const char *contents, size_t clen) {
  pc_error_t err = {0};
  pc_status_t st = PC_OK;
  unsigned seed = (unsigned)(uintptr_t)it;
  for (int attempt = 0; attempt < MAX_RETRIES; attempt++) {
    pc_txn_t *txn = pc_txn_begin(l->db, &err);
    if (!txn) {
      st = err.code;
      break;
    }
    if (it->kind == IT_DELETE) {
      st = pc_txn_delete(txn, DOCS_TABLE, it->url, it->ulen, CONTENTS_COL,
                         strlen(CONTENTS_COL), &err);
    } else {
      st = pc_txn_set(txn, DOCS_TABLE, it->url, it->ulen, CONTENTS_COL, strlen(CONTENTS_COL),
                      contents, clen, &err);
    }
    if (st == PC_OK) st = pc_txn_commit(txn, &err);
    pc_txn_destroy(txn);
    if (st != PC_CONFLICT) break;
    struct timespec d = {0, (long)(1 + rand_r(&seed) % (unsigned)(attempt + 1)) * 2000000L};
    nanosleep(&d, NULL);
  }
  if (st == PC_OK) {
    atomic_fetch_add(&l->loaded, 1);
  } else {
    atomic_fetch_add(&l->failed, 1);
    char *u = fmt_escape_str(it->url, it->ulen, 0);
    fprintf(stderr, "percolator: load: %s: %s\n", u ? u : "?",
            err.text[0] ? err.text : pc_status_name(st));
    free(u);
  }
}

/* The line of the byte at offset off of p (1-based). */
static unsigned long line_of(const char *p, size_t off) {
  unsigned long line = 1;
  for (size_t i = 0; i < off; i++) line += p[i] == '\n';
  return line;
}

static void load_file(loader_t *l, const item_t *it) {
  int fd = open(it->url, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    skip(l, SK_UNREADABLE, it->url, 0, "unreadable (%s)", strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  if ((uint64_t)st.st_size > l->max_bytes) {
    skip(l, SK_TOO_LARGE, it->url, 0, "too large (%llu bytes, above --max-bytes %zu)",
         (unsigned long long)st.st_size, l->max_bytes);
    close(fd);
    return;
  }
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *buf = malloc(cap);
  ssize_t r = 0;
  while (buf && (r = read(fd, buf + n, cap - n)) > 0) {
    n += (size_t)r;
    if (n > l->max_bytes) break; /* grew while we read */
    if (n == cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
  }
  int e = errno;
  close(fd);
  if (!buf || r < 0) {
    skip(l, SK_UNREADABLE, it->url, 0, "unreadable (%s)", buf ? strerror(e) : "out of memory");
  } else if (n > l->max_bytes) {
    skip(l, SK_TOO_LARGE, it->url, 0, "too large (grew above --max-bytes while read)");
  } else if (n == 0) {
    skip(l, SK_EMPTY, it->url, 0, "empty");
  } else {
    const char *nul = memchr(buf, '\0', n < BINARY_PROBE ? n : BINARY_PROBE);
    if (nul) {
      skip(l, SK_BINARY, it->url, line_of(buf, (size_t)(nul - buf)),
           "binary (a NUL byte at offset %zu)", (size_t)(nul - buf));
    } else {
      commit_doc(l, it, buf, n);
    }
  }
  free(buf);
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
  item_t *it;
  while ((it = take(l)) != NULL) {
    pace(l);
    if (it->kind == IT_FILE)
      load_file(l, it);
    else
      commit_doc(l, it, it->contents, it->clen);
    item_free(it);
  }
  return NULL;
}

/* ---- progress ------------------------------------------------------------------ */

static size_t nskipped(loader_t *l) {
  size_t s = 0;
  for (int i = 0; i < NSKIP; i++) s += atomic_load(&l->skipped[i]);
  return s;
}

static void *progress_main(void *arg) {
  loader_t *l = arg;
  int tty = isatty(STDERR_FILENO);
  int period = tty ? 1 : 5;
  pthread_mutex_lock(&l->mu);
  while (!l->finished) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += period;
    while (!l->finished && pthread_cond_timedwait(&l->cv_tick, &l->mu, &until) == 0) {
    }
    if (l->finished) break;
    int known = l->done;
    pthread_mutex_unlock(&l->mu);
    double t = elapsed(l);
    size_t done = atomic_load(&l->loaded) + atomic_load(&l->failed) + nskipped(l);
    size_t total = atomic_load(&l->total);
    double rate = t > 0 ? (double)atomic_load(&l->loaded) / t : 0;
    char eta[48] = "";
    if (known && rate > 0 && total >= done)
      snprintf(eta, sizeof eta, ", ETA %.0f s", (double)(total - done) / rate);
    if (tty)
      fprintf(stderr, "\r\033[K%zu/%zu%s documents, %.0f documents/s%s", done, total,
              known ? "" : "+", rate, eta);
    else
      fprintf(stderr, "percolator: load: %zu of %zu%s documents done, %.0f documents/s%s\n",
              done, total, known ? "" : "+", rate, eta);
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

/* A JSON-lines file: one {"url": ..., "contents": ...} per line. */
static int read_jsonl(loader_t *l, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(errno));
    return 0;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  unsigned long lineno = 0;
  int rc = 0;
  while ((n = getline(&line, &cap, f)) >= 0) {
    lineno++;
    size_t k = (size_t)n;
    while (k && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ')) k--;
    if (k == 0) continue; /* blank lines are allowed */
    json_error_t je;
    json_t *j = json_loadb(line, k, JSON_ALLOW_NUL, &je);
    json_t *u = j ? json_object_get(j, "url") : NULL;
    json_t *c = j ? json_object_get(j, "contents") : NULL;
    if (!j || !json_is_object(j) || !json_is_string(u) || !json_is_string(c)) {
      skip(l, SK_INVALID_JSON, path, lineno, "invalid JSON line (%s)",
           !j ? je.text : "expected an object with string members \"url\" and \"contents\"");
    } else if (check_url(l, path, lineno, json_string_value(u), json_string_length(u)) == 0) {
      size_t clen = json_string_length(c);
      if (clen == 0) {
        skip(l, SK_EMPTY, path, lineno, "empty contents");
      } else if (clen > l->max_bytes) {
        skip(l, SK_TOO_LARGE, path, lineno, "contents too large (%zu bytes, above --max-bytes %zu)",
             clen, l->max_bytes);
      } else {
        item_t *it = new_item(IT_DOC, json_string_value(u), json_string_length(u));
        if (it && (it->contents = malloc(clen))) {
          memcpy(it->contents, json_string_value(c), clen);
          it->clen = clen;
          put(l, it);
        } else {
          item_free(it);
          rc = -1;
        }
      }
    }
    json_decref(j);
    if (rc) break;
  }
  if (ferror(f)) skip(l, SK_UNREADABLE, path, lineno + 1, "unreadable (%s)", strerror(errno));
  free(line);
  fclose(f);
  return rc;
}

/* A directory tree: every regular file (symbolic links to files included) is
 * a document whose URL is its path; symbolic links to directories are not
 * followed, and a dangling one is unreadable. */
static int walk(loader_t *l, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    skip(l, SK_UNREADABLE, dir, 0, "unreadable directory (%s)", strerror(errno));
    return 0;
  }
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    size_t dl = strlen(dir), nl = strlen(e->d_name);
    char *path = malloc(dl + nl + 2);
    if (!path) return closedir(d), -1;
    memcpy(path, dir, dl);
    path[dl] = '/';
    memcpy(path + dl + 1, e->d_name, nl + 1);
    struct stat st;
    if (lstat(path, &st) != 0) {
      skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      rc = walk(l, path);
    } else if (S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
      skip(l, SK_UNREADABLE, path, 0, "unreadable (%s)", strerror(errno));
    } else if (S_ISREG(st.st_mode)) {
      if (check_url(l, path, 0, path, strlen(path)) == 0) {
        item_t *it = new_item(IT_FILE, path, strlen(path));
        if (it) put(l, it);
        else rc = -1;
      }
    }
    free(path);
  }
  closedir(d);
  return rc;
}

static int parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) return -1;
  *out = (size_t)v;
  return 0;
}

static int run_load(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"threads", required_argument, NULL, OPT_THREADS},
                                       {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
                                       {"delete", no_argument, NULL, OPT_DELETE},
                                       {"json", no_argument, NULL, OPT_JSON},
                                       {"rate", required_argument, NULL, OPT_RATE},
                                       {0, 0, 0, 0}};
  size_t threads = 8, max_bytes = DEFAULT_MAX_BYTES, per_s = 0;
  int del = 0, json = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_THREADS && parse_size(optarg, 1, 64, &threads) != 0)
      return cli_usage_error(ctx, "--threads: expected 1..64, got '%s'", optarg);
    if (c == OPT_MAX_BYTES && parse_size(optarg, 1, PC_MAX_VALUE, &max_bytes) != 0)
      return cli_usage_error(ctx, "--max-bytes: expected 1..%u, got '%s'", PC_MAX_VALUE, optarg);
    if (c == OPT_DELETE) del = 1;
    if (c == OPT_JSON) json = 1;
    if (c == OPT_RATE && parse_size(optarg, 1, 1000000, &per_s) != 0)
      return cli_usage_error(ctx, "--rate: expected 1..1000000 documents/s, got '%s'", optarg);
  }
  if (optind >= argc)
    return cli_usage_error(ctx, del ? "expected URL..." : "expected FILE.jsonl or DIR...");
  pc_db_t *db = cli_open_db(ctx, 0);
  if (!db) return CLI_EXIT_ERROR;

  loader_t l = {.ctx = ctx, .db = db, .max_bytes = max_bytes,
               .pace_ns = per_s ? 1000000000u / per_s : 0};
  pthread_mutex_init(&l.mu, NULL);
  pthread_cond_init(&l.cv_put, NULL);
  pthread_cond_init(&l.cv_get, NULL);
  pthread_cond_init(&l.cv_tick, NULL);
  clock_gettime(CLOCK_MONOTONIC, &l.t0);
  pthread_t tids[64], prog;
  size_t started = 0;
  int prog_started = pthread_create(&prog, NULL, progress_main, &l) == 0;
  for (; started < threads; started++)
    if (pthread_create(&tids[started], NULL, worker_main, &l) != 0) break;
  int rc = started ? 0 : -1;
  for (int i = optind; i < argc && rc == 0; i++) {
    const char *a = argv[i];
    if (del) {
      size_t al = strlen(a);
      if (check_url(&l, a, 0, a, al) != 0) continue;
      item_t *it = new_item(IT_DELETE, a, al);
      if (it) put(&l, it);
      else rc = -1;
      continue;
    }
    struct stat st;
    if (stat(a, &st) != 0) {
      skip(&l, SK_UNREADABLE, a, 0, "unreadable (%s)", strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      char *d = strdup(a);
      if (!d) rc = -1;
      for (size_t k = d ? strlen(d) : 0; k > 1 && d[k - 1] == '/'; k--) d[k - 1] = '\0';
      if (d) rc = walk(&l, d);
      free(d);
    } else {
      rc = read_jsonl(&l, a);
    }
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
  pc_db_close(db);

  double t = elapsed(&l);
  size_t loaded = atomic_load(&l.loaded), failed = atomic_load(&l.failed);
  double rate = t > 0 ? (double)loaded / t : 0;
  const char *verb = del ? "deleted" : "loaded";
  if (json) {
    json_t *o = json_object(), *s = json_object();
    if (o && s) {
      json_object_set_new(o, verb, json_integer((json_int_t)loaded));
      json_object_set_new(o, "failed", json_integer((json_int_t)failed));
      for (int i = 0; i < NSKIP; i++)
        json_object_set_new(s, skip_names[i], json_integer((json_int_t)atomic_load(&l.skipped[i])));
      json_object_set_new(o, "skipped", s);
      s = NULL;
      json_object_set_new(o, "seconds", json_real(t));
      json_object_set_new(o, "documents_per_s", json_real(rate));
    }
    json_decref(s);
    if (fmt_json_line(stdout, o) != 0) return cli_error(ctx, "cannot write the summary");
  } else {
    printf("%s %zu documents in %.1f s (%.0f documents/s); skipped %zu:", verb, loaded, t, rate,
           nskipped(&l));
    for (int i = 0; i < NSKIP; i++)
      printf(" %s %zu%s", skip_names[i], atomic_load(&l.skipped[i]), i + 1 < NSKIP ? "," : "");
    printf("; failed %zu\n", failed);
  }
  pthread_cond_destroy(&l.cv_put);
  pthread_cond_destroy(&l.cv_get);
  pthread_cond_destroy(&l.cv_tick);
  pthread_mutex_destroy(&l.mu);
  if (rc != 0) return cli_error(ctx, "out of memory");
  if (failed) return cli_error(ctx, "%zu document%s could not be written", failed,
                               failed == 1 ? "" : "s");
  return cli_finish_output(ctx);
}

const cli_verb_t cli_verb_load = {
    "load",
    "load documents for the dedup application (docs table)",
    "Usage: percolator [--data DIR | --config FILE] load [OPTIONS] (FILE.jsonl | DIR)...\n"
    "       percolator [--data DIR | --config FILE] load --delete URL...\n"
    "\n"
    "Writes each document to table docs, row URL, column doc:contents, in a\n"
    "transaction of its own, from several threads, retrying on conflict; the\n"
    "dedup observer plugin (apps/dedup/) clusters and indexes them. A FILE is\n"
    "JSON lines, one {\"url\": \"...\", \"contents\": \"...\"} per line (blank lines\n"
    "allowed); a DIR is walked, and every regular file in it is a document whose\n"
    "URL is its path as reached from DIR (symbolic links to files are followed,\n"
    "to directories not).\n"
    "\n"
    "Bad inputs are reported on stderr (FILE:LINE: reason), counted and skipped:\n"
    "unreadable files, binary files (a NUL byte in the first 8 KiB), files or\n"
    "contents above --max-bytes, invalid JSON lines, empty documents, URLs that\n"
    "are empty or longer than 1022 bytes. At the end a summary goes to stdout:\n"
    "documents loaded, skipped by reason, failed, documents/s. Meanwhile a\n"
    "progress line goes to stderr every second when it is a terminal (with an\n"
    "ETA once every input has been listed), else a plain line every 5 s.\n"
    "\n"
    "--delete deletes the documents URL... in one transaction each, as\n"
    "'percolator delete docs URL doc:contents' does: a delete is a change, which\n"
    "the dedup observer sees.\n"
    "\n"
    "Exit status: 0 when every document was written (skipped inputs do not\n"
    "count), 3 when a transaction failed or on another error.\n"
    "\n"
    "Options:\n"
    "  --threads N      writing threads, 1..64 (default 8)\n"
    "  --max-bytes N    the largest document, 1..8388608 bytes (default 1048576)\n"
    "  --delete         delete the documents named by the arguments\n"
    "  --rate N         start at most N documents a second (a steady feed; default:\n"
    "                   as fast as the store takes them)\n"
    "  --json           the summary as one JSON object\n"
    "  --data DIR       the data directory\n"
    "  --config FILE    the configuration\n"
    "  -h, --help       show this help\n"
    "\n"
    "Example:\n"
    "  percolator --data /tmp/pc load --threads 8 corpus/ more.jsonl\n",
    run_load,
};
