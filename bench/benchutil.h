/* benchutil.h — the scaffolding the benchmark programs in bench/ share.
 *
 * Every pc_bench_* program (fig8.c, tso.c, net_tso.c, net_fig8.c,
 * net_scale.c) times things, accounts for the CPU it and the rest of the
 * machine used meanwhile, keeps latency histograms, takes medians over
 * rounds, parses the same kinds of options, makes and removes a temporary
 * directory and prints one JSON document. Those pieces live here, once, so
 * that every benchmark measures and reports them the same way; what a
 * benchmark measures stays in its own file. Names start with bu_ (macros
 * with BU_). Functions that print a message take `who`, the prefix the
 * calling program puts on its messages ("fig8", "net_tso", ...). Nothing
 * here is thread-unsafe unless it says so.
 */
#ifndef PC_BENCH_BENCHUTIL_H
#define PC_BENCH_BENCHUTIL_H

#include <jansson.h>
#include <leveldb/c.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* ---- time and CPU ------------------------------------------------------- */

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t bu_now_ns(void);

/* Seconds of CLOCK_MONOTONIC. */
double bu_now_s(void);

/* Sleeps for seconds (>= 0), resuming after signals until the time is up. */
void bu_sleep_s(double seconds);

/* User + system CPU seconds in *ru. */
double bu_rusage_cpu_s(const struct rusage *ru);

/* Context switches (voluntary + involuntary) in *ru. */
uint64_t bu_rusage_csw(const struct rusage *ru);

/* This process's CPU seconds so far (all threads); if csw is not NULL, *csw
 * receives its context switches so far (voluntary + involuntary). */
double bu_cpu_s(uint64_t *csw);

/* The CPU seconds (user + system) of process pid so far, from
 * /proc/PID/stat; 0 when it cannot be read (the process is gone). */
double bu_proc_cpu_s(pid_t pid);

/* Busy seconds of all CPUs so far (user, nice, system, irq, softirq), from the
 * "cpu" line of /proc/stat; if steal is not NULL, *steal receives the seconds
 * the hypervisor took. Both 0 if /proc/stat is unreadable. */
double bu_machine_busy(double *steal);

/* The CPUs other processes kept busy over an interval of seconds in which
 * the machine was busy for busy_s CPU seconds and the processes measured
 * for own_s: (busy_s - own_s) / seconds, or 0 if that is not positive or
 * seconds is not. */
double bu_others_cores(double busy_s, double own_s, double seconds);

/* x / n, or 0 when n is 0 (a per-operation figure of an empty phase). */
double bu_per(double x, uint64_t n);

/* What bu_meter_start records and bu_meter_read subtracts. */
typedef struct bu_meter {
  uint64_t t_ns;  /* bu_now_ns */
  double cpu_s;   /* bu_cpu_s */
  uint64_t csw;   /* context switches of this process */
  double busy_s;  /* bu_machine_busy */
  double steal_s; /* the hypervisor's share */
} bu_meter_t;

/* Starts measuring an interval: the machine's CPU, then this process's CPU
 * and context switches, then the clock. */
void bu_meter_start(bu_meter_t *m);

/* The interval since bu_meter_start(start), into *d as differences: t_ns
 * (wall), cpu_s and csw (this process), busy_s and steal_s (the machine).
 * Reads the clock first, the machine's CPU last, so the wall interval lies
 * inside the CPU ones. */
void bu_meter_read(const bu_meter_t *start, bu_meter_t *d);

/* ---- latency histograms ------------------------------------------------- */

/* A log-linear histogram of nanoseconds: an array of BU_HBUCKETS counters,
 * 2^BU_SUB_BITS sub-buckets per power of two (relative error under 1/16). */
#define BU_SUB_BITS 4
#define BU_SUBS (1u << BU_SUB_BITS)
#define BU_HBUCKETS (64u * BU_SUBS)

/* The bucket of value v. */
unsigned bu_bucket_of(uint64_t v);

/* The largest value that falls in bucket i. */
uint64_t bu_bucket_high(unsigned i);

/* The number of values in histogram h. */
uint64_t bu_hist_total(const uint64_t *h);

/* The upper bound of the highest non-empty bucket of h (0 if h is empty). */
uint64_t bu_hist_max(const uint64_t *h);

/* Adds histogram src into dst. */
void bu_hist_add(uint64_t *dst, const uint64_t *src);

/* The q-quantile (0 <= q <= 1) of histogram h holding total values, as the
 * upper bound of its bucket; 0 if total is 0. */
uint64_t bu_percentile(const uint64_t *h, uint64_t total, double q);

/* ---- medians ------------------------------------------------------------ */

/* The most rounds any benchmark runs (its --rounds bound). */
#define BU_MAX_ROUNDS 99

/* The median of v[0..n-1] (n >= 1; the mean of the middle two for even n).
 * v is left as it is. */
double bu_median(const double *v, int n);

/* ---- random numbers ------------------------------------------------------- */

/* The next number of the splitmix64 sequence with state *s. */
uint64_t bu_splitmix64(uint64_t *s);

/* A malloc'd buffer of n bytes of the splitmix64 sequence seeded with seed
 * (eight bytes per number, little end first as memcpy lays them out); NULL
 * if out of memory. The caller frees it. */
char *bu_random_bytes(size_t n, uint64_t seed);

/* Benchmark row keys: "k" and i in 10 zero-padded decimal digits. */
#define BU_KEY_LEN 11

/* Writes the key of row i to out (BU_KEY_LEN bytes, no NUL). */
void bu_make_key(char *out, uint64_t i);

/* ---- options -------------------------------------------------------------- */

/* Parses s as a decimal integer in lo..hi (no sign, nothing after it) into
 * *out; 0, or -1 (and *out unchanged) if it is not one. */
int bu_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* Parses s (strtod, nothing after it) into *out if it lies in lo..hi, lo
 * excluded when lo_open; 0, or -1 (and *out unchanged). */
int bu_parse_double(const char *s, double lo, int lo_open, double hi, double *out);

/* Parses a comma-separated list of integers, each 1..max, at most cap of
 * them and at least one, into out[0..*n-1]; 0, or -1. */
int bu_parse_int_list(const char *s, int max, int *out, int cap, int *n);

/* Option parsing's two complaints, on stderr: "who: bad value 'value' for
 * option" (returns -1), and "who: unexpected argument 'X'" for the first of
 * argv[first..], the operands left after the options: callers pass optind
 * (returns -1; 0 when none is left). */
int bu_bad_value(const char *who, const char *option, const char *value);
int bu_no_operands(const char *who, int argc, char **argv, int first);

/* The index of s among names[0..n-1], or -1. */
int bu_choice(const char *s, const char *const *names, int n);

/* ---- threads -------------------------------------------------------------- */

/* A gate that holds threads until it is opened (once). */
typedef struct bu_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;
} bu_gate_t;

/* Initialises g, closed. */
void bu_gate_init(bu_gate_t *g);

/* Blocks until g is open. */
void bu_gate_wait(bu_gate_t *g);

/* Opens g, releasing every waiting thread and every later bu_gate_wait. */
void bu_gate_open(bu_gate_t *g);

/* Releases g's resources; no thread may be waiting on it. */
void bu_gate_destroy(bu_gate_t *g);

/* Starts n threads running fn, thread i with the argument
 * (char *)args + i * stride and its id stored at (char *)args + i * stride
 * + tid_offset (so args is usually an array of structs holding a pthread_t:
 * bu_start_threads(w, n, sizeof *w, offsetof(worker_t, tid), fn)). Returns
 * how many it started: n, or fewer if pthread_create failed. */
int bu_start_threads(void *args, int n, size_t stride, size_t tid_offset, void *(*fn)(void *));

/* Joins the n threads bu_start_threads started with the same args, stride
 * and tid_offset. */
void bu_join_threads(void *args, int n, size_t stride, size_t tid_offset);

/* ---- LevelDB with the project store's options ------------------------------ */

/* A LevelDB opened by bu_ldb_open and what it was opened with. */
typedef struct bu_ldb {
  leveldb_t *db;
  leveldb_options_t *opts;
  leveldb_cache_t *cache;
  leveldb_filterpolicy_t *filter;
} bu_ldb_t;

/* Opens (creating it if missing) the LevelDB in path with the options
 * pc_local_store_open gives the project's store: bloom filter of 10 bits,
 * 32 MiB LRU cache, 16 MiB write buffer, LevelDB's default snappy
 * compression. 0, or -1 with a message "who: LevelDB path: ..." on stderr. */
int bu_ldb_open(bu_ldb_t *l, const char *path, const char *who);

/* Closes what bu_ldb_open opened (any part of it may be NULL) and zeroes *l. */
void bu_ldb_close(bu_ldb_t *l);

/* Compacts the whole LevelDB in path, which no one holds open; 0 or -1. */
int bu_ldb_compact_dir(const char *path, const char *who);

/* ---- temporary directory ---------------------------------------------------- */

/* Makes the directory parent/pc-NAME-XXXXXX (mkdtemp) and writes its path to
 * dir (cap bytes). 0, or -1 with dir set to "" and a message
 * "who: mkdtemp in parent: reason" on stderr. */
int bu_make_temp_dir(char *dir, size_t cap, const char *parent, const char *name,
                     const char *who);

/* Removes path and everything below it (no symlinks followed). */
void bu_remove_tree(const char *path);

/* ---- JSON output ------------------------------------------------------------ */

/* Sets "benchmark" (name) and "library_version" (pc_version()) in doc. */
void bu_json_head(json_t *doc, const char *name);

/* The first line of /proc/loadavg as a JSON string ("" if unreadable): the
 * value of "loadavg_at_start". */
json_t *bu_json_loadavg(void);

/* The CPUs online (sysconf) as a JSON integer: the value of "cpus_online". */
json_t *bu_json_cpus_online(void);

/* A JSON array of the integers v[0..n-1]. */
json_t *bu_json_int_array(const int *v, int n);

/* Finishes a benchmark's output: sets "error": "see stderr" in doc if rc is
 * not 0, prints doc on stdout (indent 2, reals with 6 significant digits) and
 * a newline, releases doc and returns rc. */
int bu_json_finish(json_t *doc, int rc);

#endif
