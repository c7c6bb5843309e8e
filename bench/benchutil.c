/* benchutil.c — the scaffolding the benchmark programs in bench/ share:
 * clocks and CPU accounting, latency histograms, medians, random bytes,
 * option parsing, a start gate and thread loops, LevelDB opened with the
 * project store's options, the temporary directory and the JSON document's
 * head and tail. See benchutil.h for what each function does.
 */
#include "benchutil.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <percolator/percolator.h>

/* ---- time and CPU ------------------------------------------------------- */

uint64_t bu_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

double bu_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void bu_sleep_s(double seconds) {
  struct timespec d = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&d, &d) != 0 && errno == EINTR) {
  }
}

double bu_rusage_cpu_s(const struct rusage *ru) {
  return (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec * 1e-6 +
         (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec * 1e-6;
}

uint64_t bu_rusage_csw(const struct rusage *ru) {
  return (uint64_t)ru->ru_nvcsw + (uint64_t)ru->ru_nivcsw;
}

double bu_proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the command name may hold spaces */
  unsigned long long ut = 0, st = 0;
  /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
  if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double bu_cpu_s(uint64_t *csw) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  if (csw) *csw = bu_rusage_csw(&u);
  return bu_rusage_cpu_s(&u);
}

double bu_machine_busy(double *steal) {
  double busy = 0;
  if (steal) *steal = 0;
  FILE *f = fopen("/proc/stat", "re");
  if (!f) return 0;
  unsigned long long v[8] = {0};
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
             &v[5], &v[6], &v[7]) == 8) {
    double hz = (double)sysconf(_SC_CLK_TCK);
    /* user nice system idle iowait irq softirq steal */
    busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / hz;
    if (steal) *steal = (double)v[7] / hz;
  }
  fclose(f);
  return busy;
}

double bu_others_cores(double busy_s, double own_s, double seconds) {
  double others = busy_s - own_s;
  return seconds > 0 && others > 0 ? others / seconds : 0;
}

double bu_per(double x, uint64_t n) { return n ? x / (double)n : 0; }

void bu_meter_start(bu_meter_t *m) {
  m->busy_s = bu_machine_busy(&m->steal_s);
  m->cpu_s = bu_cpu_s(&m->csw);
  m->t_ns = bu_now_ns();
}

void bu_meter_read(const bu_meter_t *start, bu_meter_t *d) {
  d->t_ns = bu_now_ns() - start->t_ns;
  d->cpu_s = bu_cpu_s(&d->csw) - start->cpu_s;
  d->csw -= start->csw;
  d->busy_s = bu_machine_busy(&d->steal_s) - start->busy_s;
  d->steal_s -= start->steal_s;
}

/* ---- latency histograms ------------------------------------------------- */

unsigned bu_bucket_of(uint64_t v) {
  if (v < BU_SUBS) return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= BU_SUB_BITS */
  unsigned sub = (unsigned)(v >> (e - BU_SUB_BITS)) & (BU_SUBS - 1);
  return (e - BU_SUB_BITS + 1) * BU_SUBS + sub;
}

uint64_t bu_bucket_high(unsigned i) {
  if (i < BU_SUBS) return i;
  unsigned e = i / BU_SUBS + BU_SUB_BITS - 1, sub = i % BU_SUBS;
  uint64_t lo = ((uint64_t)(BU_SUBS + sub)) << (e - BU_SUB_BITS);
  return lo + (1ull << (e - BU_SUB_BITS)) - 1;
}

uint64_t bu_hist_total(const uint64_t *h) {
  uint64_t total = 0;
  for (unsigned i = 0; i < BU_HBUCKETS; i++) total += h[i];
  return total;
}

uint64_t bu_hist_max(const uint64_t *h) {
  for (unsigned i = BU_HBUCKETS; i-- > 0;)
    if (h[i]) return bu_bucket_high(i);
  return 0;
}

void bu_hist_add(uint64_t *dst, const uint64_t *src) {
  for (unsigned i = 0; i < BU_HBUCKETS; i++) dst[i] += src[i];
}

uint64_t bu_percentile(const uint64_t *h, uint64_t total, double q) {
  if (total == 0) return 0;
  uint64_t want = (uint64_t)(q * (double)total);
  if (want >= total) want = total - 1;
  uint64_t seen = 0;
  for (unsigned i = 0; i < BU_HBUCKETS; i++) {
    seen += h[i];
    if (seen > want) return bu_bucket_high(i);
  }
  return bu_bucket_high(BU_HBUCKETS - 1);
}

/* ---- medians ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bu_median(const double *v, int n) {
  double buf[BU_MAX_ROUNDS];
  double *s = n <= BU_MAX_ROUNDS ? buf : malloc((size_t)n * sizeof *s);
  if (!s || n < 1) return 0;
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
  if (s != buf) free(s);
  return m;
}

/* ---- random numbers ------------------------------------------------------- */

uint64_t bu_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

char *bu_random_bytes(size_t n, uint64_t seed) {
  char *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = bu_splitmix64(&seed);
    size_t left = n - i;
    memcpy(buf + i, &r, left < 8 ? left : 8);
  }
  return buf;
}

void bu_make_key(char *out, uint64_t i) {
  out[0] = 'k';
  for (int d = BU_KEY_LEN - 1; d >= 1; d--) {
    out[d] = (char)('0' + i % 10);
    i /= 10;
  }
}

/* ---- options -------------------------------------------------------------- */

int bu_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int bu_parse_double(const char *s, double lo, int lo_open, double hi, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (*end || !((lo_open ? v > lo : v >= lo) && v <= hi)) return -1;
  *out = v;
  return 0;
}

int bu_parse_int_list(const char *s, int max, int *out, int cap, int *n) {
  *n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p || v < 1 || v > max || *n == cap) return -1;
    out[(*n)++] = (int)v;
    if (*end == ',') end++;
    else if (*end) return -1;
    p = end;
  }
  return *n ? 0 : -1;
}

int bu_bad_value(const char *who, const char *option, const char *value) {
  fprintf(stderr, "%s: bad value '%s' for %s\n", who, value ? value : "", option);
  return -1;
}

int bu_choice(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

int bu_no_operands(const char *who, int argc, char **argv, int first) {
  if (first >= argc) return 0;
  fprintf(stderr, "%s: unexpected argument '%s'\n", who, argv[first]);
  return -1;
}

/* ---- threads -------------------------------------------------------------- */

void bu_gate_init(bu_gate_t *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = 0;
}

void bu_gate_wait(bu_gate_t *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

void bu_gate_open(bu_gate_t *g) {
  pthread_mutex_lock(&g->mu);
  g->open = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

void bu_gate_destroy(bu_gate_t *g) {
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
}

int bu_start_threads(void *args, int n, size_t stride, size_t tid_offset, void *(*fn)(void *)) {
  char *base = args;
  for (int i = 0; i < n; i++) {
    char *arg = base + (size_t)i * stride;
    if (pthread_create((pthread_t *)(void *)(arg + tid_offset), NULL, fn, arg) != 0) return i;
  }
  return n;
}

void bu_join_threads(void *args, int n, size_t stride, size_t tid_offset) {
  char *base = args;
  for (int i = 0; i < n; i++)
    pthread_join(*(pthread_t *)(void *)(base + (size_t)i * stride + tid_offset), NULL);
}

/* ---- LevelDB with the project store's options ------------------------------ */

int bu_ldb_open(bu_ldb_t *l, const char *path, const char *who) {
  l->opts = leveldb_options_create();
  leveldb_options_set_create_if_missing(l->opts, 1);
  l->filter = leveldb_filterpolicy_create_bloom(10);
  leveldb_options_set_filter_policy(l->opts, l->filter);
  l->cache = leveldb_cache_create_lru(32u << 20);
  leveldb_options_set_cache(l->opts, l->cache);
  leveldb_options_set_write_buffer_size(l->opts, 16u << 20);
  /* the store's default (store.compression "none") */
  leveldb_options_set_compression(l->opts, leveldb_no_compression);
  char *e = NULL;
  l->db = leveldb_open(l->opts, path, &e);
  if (e) {
    fprintf(stderr, "%s: LevelDB %s: %s\n", who, path, e);
    leveldb_free(e);
    l->db = NULL;
    return -1;
  }
  return 0;
}

void bu_ldb_close(bu_ldb_t *l) {
  if (l->db) leveldb_close(l->db);
  if (l->opts) leveldb_options_destroy(l->opts);
  if (l->cache) leveldb_cache_destroy(l->cache);
  if (l->filter) leveldb_filterpolicy_destroy(l->filter);
  memset(l, 0, sizeof *l);
}

int bu_ldb_compact_dir(const char *path, const char *who) {
  bu_ldb_t l = {0};
  if (bu_ldb_open(&l, path, who) != 0) {
    bu_ldb_close(&l);
    return -1;
  }
  leveldb_compact_range(l.db, NULL, 0, NULL, 0);
  bu_ldb_close(&l);
  return 0;
}

/* ---- temporary directory ---------------------------------------------------- */

int bu_make_temp_dir(char *dir, size_t cap, const char *parent, const char *name,
                     const char *who) {
  snprintf(dir, cap, "%s/pc-%s-XXXXXX", parent, name);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "%s: mkdtemp in %s: %s\n", who, parent, strerror(errno));
    dir[0] = '\0';
    return -1;
  }
  return 0;
}

static int rm_fn(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(path);
}

void bu_remove_tree(const char *path) { nftw(path, rm_fn, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- JSON output ------------------------------------------------------------ */

void bu_json_head(json_t *doc, const char *name) {
  json_object_set_new(doc, "benchmark", json_string(name));
  json_object_set_new(doc, "library_version", json_string(pc_version()));
}

json_t *bu_json_loadavg(void) {
  char load[128] = "";
  FILE *lf = fopen("/proc/loadavg", "re");
  if (lf) {
    if (!fgets(load, sizeof load, lf)) load[0] = '\0';
    fclose(lf);
    load[strcspn(load, "\n")] = '\0';
  }
  return json_string(load);
}

json_t *bu_json_cpus_online(void) { return json_integer(sysconf(_SC_NPROCESSORS_ONLN)); }

json_t *bu_json_int_array(const int *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
  return a;
}

int bu_json_finish(json_t *doc, int rc) {
  if (rc != 0) json_object_set_new(doc, "error", json_string("see stderr"));
  json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  fputc('\n', stdout);
  json_decref(doc);
  return rc;
}
