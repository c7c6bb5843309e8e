/* tombstones.c — pc_bench_tombstones: what deleted entries cost the reads
 * that come after them.
 *
 * LevelDB keeps a deleted key as a tombstone until compaction reaches it, and
 * its iterators walk over every tombstone between a seek's target and the
 * next live key. In a store that commits in two phases (a cluster of several
 * tablets) every written cell's lock index entry is written and deleted, and
 * every notification is deleted once observed, so a new store holds as many
 * tombstones as it holds cells until its first compaction.
 *
 * The run: the dedup plugin indexes --docs documents of real text (this
 * machine's copyright files and common licenses, as apps/demo.sh loads them)
 * in an embedded store with two-phase commit, no fsync and no background
 * garbage collection. Then, for the raw view of the index table (`percolator
 * scan --raw idxbucket`), the lock scan (the sweeper's, GC's and `wait`'s) and a
 * scan of the system table (the last one, right before the notifications),
 * the wall time and the LevelDB key comparisons (pc_local_compares) of each,
 * --rounds times (the median): before the store's first GC pass, after it,
 * and, as the baseline, after a compaction of the whole LevelDB (no
 * tombstones left, the fewest files to merge). The ratios are over the
 * baseline: 1 means the deletes cost nothing.
 *
 * Usage: pc_bench_tombstones [--docs N] [--rounds N] [--plugin PATH] [--dir PARENT]
 * (--plugin: dedup.so, by default ../apps/dedup/dedup.so from this program).
 * Prints one JSON document. */
#include <dirent.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "core/db.h"
#include "core/store.h"
#include "notify/worker.h"
#include "observers/plugin.h"
#include "observers/registry.h"

#define WHO "pc_bench_tombstones"

/* ---- the corpus ----------------------------------------------------------- */

typedef struct corpus {
  char **paths;
  size_t n, cap;
} corpus_t;

static void corpus_add(corpus_t *c, const char *path) {
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 256;
    c->paths = realloc(c->paths, c->cap * sizeof *c->paths);
    if (!c->paths) abort();
  }
  c->paths[c->n++] = strdup(path);
}

/* The common licenses, then /usr/share/doc/<package>/copyright, sorted. */
static void corpus_find(corpus_t *c) {
  const char *dirs[] = {"/usr/share/common-licenses", "/usr/share/doc"};
  for (int d = 0; d < 2; d++) {
    struct dirent **ents;
    int n = scandir(dirs[d], &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
      char path[PATH_MAX];
      struct stat st;
      if (ents[i]->d_name[0] != '.') {
        if (d == 0) snprintf(path, sizeof path, "%s/%s", dirs[d], ents[i]->d_name);
        else snprintf(path, sizeof path, "%s/%s/copyright", dirs[d], ents[i]->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
            st.st_size < (1 << 20))
          corpus_add(c, path);
      }
      free(ents[i]);
    }
    if (n >= 0) free(ents);
  }
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 20);
  *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
  fclose(f);
  return buf;
}

/* ---- measurements --------------------------------------------------------- */

typedef struct cost {
  double seconds;
  uint64_t compares;
  uint64_t items;
} cost_t;

static int count_raw(void *ctx, const pc_raw_cell_t *c) {
  (void)c;
  (*(uint64_t *)ctx)++;
  return 0;
}

static int count_lock(void *ctx, const pc_lock_info_t *l) {
  (void)l;
  (*(uint64_t *)ctx)++;
  return 0;
}

enum { M_RAW, M_LOCKS, M_SYSTEM, M_N };
static const char *const m_names[M_N] = {"raw_scan_index", "scan_locks", "scan_system_table"};

static int measure_once(pc_db_t *db, int what, cost_t *out) {
  pc_error_t err;
  uint64_t items = 0, c0 = pc_local_compares();
  double t0 = bu_now_s();
  pc_status_t st = PC_OK;
  if (what == M_RAW) {
    st = pc_db_raw_scan(db, "idxbucket", NULL, 0, NULL, 0, count_raw, &items, &err);
  } else if (what == M_LOCKS) {
    st = db->store->ops->scan_locks(db->store, UINT64_MAX, count_lock, &items, &err);
  } else {
    pc_txn_t *t = pc_txn_begin(db, &err);
    pc_scan_t *sc = t ? pc_txn_scan(t, "percolator.system", NULL, 0, NULL, 0, &err) : NULL;
    while (sc && (st = pc_scan_next(sc, &err)) == PC_OK) items++;
    if (st == PC_NOT_FOUND) st = PC_OK;
    if (!sc) st = err.code;
    pc_scan_destroy(sc);
    pc_txn_destroy(t);
  }
  out->seconds = bu_now_s() - t0;
  out->compares = pc_local_compares() - c0;
  out->items = items;
  if (st != PC_OK) fprintf(stderr, "%s: %s: %s\n", WHO, m_names[what], err.text);
  return st == PC_OK ? 0 : -1;
}

/* The median of rounds runs (their comparisons are the same every time). */
static int measure(pc_db_t *db, int what, int rounds, cost_t *out) {
  double t[BU_MAX_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    if (measure_once(db, what, out) != 0) return -1;
    t[r] = out->seconds;
  }
  out->seconds = bu_median(t, rounds);
  return 0;
}

static json_t *cost_json(const cost_t *c) {
  json_t *o = json_object();
  json_object_set_new(o, "seconds", json_real(c->seconds));
  json_object_set_new(o, "key_comparisons", json_integer((json_int_t)c->compares));
  json_object_set_new(o, "items", json_integer((json_int_t)c->items));
  return o;
}

/* ---- the run -------------------------------------------------------------- */

static int load(pc_db_t *db, const char *plugin_path, const corpus_t *corpus, size_t docs,
                size_t *loaded) {
  pc_error_t err;
  pc_observer_registry_t *reg = pc_registry_create();
  pc_plugin_t *plugin = NULL;
  if (pc_plugin_load(reg, plugin_path, NULL, &plugin, &err) != PC_OK) {
    fprintf(stderr, "%s: %s\n", WHO, err.text);
    pc_registry_free(reg);
    return -1;
  }
  pc_worker_options_t wo;
  pc_worker_options_default(&wo);
  wo.threads = 4;
  wo.idle_ms = 5;
  pc_worker_t *w = pc_worker_start(db, reg, &wo, &err);
  int rc = w ? 0 : -1;
  if (!w) fprintf(stderr, "%s: pc_worker_start: %s\n", WHO, err.text);
  *loaded = 0;
  for (size_t i = 0; rc == 0 && i < corpus->n && *loaded < docs; i++) {
    size_t len;
    char *text = read_file(corpus->paths[i], &len);
    if (!text) continue;
    pc_txn_t *t = pc_txn_begin(db, &err);
    if (!t || pc_txn_set(t, "docs", corpus->paths[i], strlen(corpus->paths[i]), "doc:contents",
                         12, text, len, &err) != PC_OK ||
        pc_txn_commit(t, &err) != PC_OK) {
      fprintf(stderr, "%s: loading %s: %s\n", WHO, corpus->paths[i], err.text);
      rc = -1;
    }
    pc_txn_destroy(t);
    free(text);
    (*loaded)++;
  }
  if (rc == 0 && pc_notify_wait(db, 600000, &err) != PC_OK) {
    fprintf(stderr, "%s: pc_notify_wait: %s\n", WHO, err.text);
    rc = -1;
  }
  pc_worker_stop(w);
  pc_plugin_unload(plugin);
  pc_registry_free(reg);
  return rc;
}

int main(int argc, char **argv) {
  uint64_t docs = 400, rounds = 3;
  const char *parent = NULL;
  char plugin[PATH_MAX];
  char self[PATH_MAX];
  snprintf(self, sizeof self, "%s", argv[0]);
  snprintf(plugin, sizeof plugin, "%s/../apps/dedup/dedup.so", dirname(self));
  static const struct option longopts[] = {{"docs", required_argument, NULL, 'd'},
                                            {"rounds", required_argument, NULL, 'r'},
                                            {"plugin", required_argument, NULL, 'p'},
                                            {"dir", required_argument, NULL, 'D'},
                                            {NULL, 0, NULL, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    if (opt == 'd' && bu_parse_u64(optarg, 1, 1000000, &docs) == 0) continue;
    if (opt == 'r' && bu_parse_u64(optarg, 1, BU_MAX_ROUNDS, &rounds) == 0) continue;
    if (opt == 'p') {
      snprintf(plugin, sizeof plugin, "%s", optarg);
      continue;
    }
    if (opt == 'D') {
      parent = optarg;
      continue;
    }
    if (opt == 'd' || opt == 'r')
      bu_bad_value(WHO, opt == 'd' ? "--docs" : "--rounds", optarg);
    return 2;
  }
  if (bu_no_operands(WHO, argc, argv, optind) != 0) return 2;

  json_t *doc = json_object();
  bu_json_head(doc, "tombstones");
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  corpus_t corpus = {0};
  corpus_find(&corpus);
  char dir[PATH_MAX];
  if (!parent) parent = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  if (bu_make_temp_dir(dir, sizeof dir, parent, "tombstones", WHO) != 0)
    return bu_json_finish(doc, 1);
  pc_local_store_count_compares(1);
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  pc_options_set_sync(o, 0);
  pc_options_set_one_phase_commit(o, 0); /* as in a cluster of several tablets */
  pc_options_set_gc_interval_ms(o, 0);
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  int rc = db ? 0 : 1;
  if (!db) fprintf(stderr, "%s: pc_db_open: %s\n", WHO, err.text);
  size_t loaded = 0;
  double t0 = bu_now_s();
  if (rc == 0 && load(db, plugin, &corpus, docs, &loaded) != 0) rc = 1;
  json_object_set_new(doc, "documents", json_integer((json_int_t)loaded));
  json_object_set_new(doc, "load_and_index_seconds", json_real(bu_now_s() - t0));
  cost_t before[M_N], after_gc[M_N], after[M_N];
  for (int m = 0; rc == 0 && m < M_N; m++)
    if (measure(db, m, (int)rounds, &before[m]) != 0) rc = 1;
  pc_gc_stats_t gs;
  if (rc == 0 && pc_db_gc(db, &gs, &err) != PC_OK) {
    fprintf(stderr, "%s: pc_db_gc: %s\n", WHO, err.text);
    rc = 1;
  }
  for (int m = 0; rc == 0 && m < M_N; m++)
    if (measure(db, m, (int)rounds, &after_gc[m]) != 0) rc = 1;
  if (db) pc_db_close(db);
  db = NULL;
  /* the baseline: the same store after a compaction of everything */
  char store[PATH_MAX + 8];
  snprintf(store, sizeof store, "%s/store", dir);
  if (rc == 0 && bu_ldb_compact_dir(store, WHO) != 0) rc = 1;
  if (rc == 0) {
    pc_options_t *o2 = pc_options_create();
    pc_options_set_gc_interval_ms(o2, 0);
    pc_options_set_sync(o2, 0);
    db = pc_db_open(o2, dir, &err);
    pc_options_destroy(o2);
    if (!db) {
      fprintf(stderr, "%s: pc_db_open: %s\n", WHO, err.text);
      rc = 1;
    }
  }
  for (int m = 0; rc == 0 && m < M_N; m++)
    if (measure(db, m, (int)rounds, &after[m]) != 0) rc = 1;
  if (rc == 0) {
    json_t *res = json_object();
    for (int m = 0; m < M_N; m++) {
      json_t *o3 = json_object();
      json_object_set_new(o3, "before_first_gc", cost_json(&before[m]));
      json_object_set_new(o3, "after_gc", cost_json(&after_gc[m]));
      json_object_set_new(o3, "baseline_compacted", cost_json(&after[m]));
      double base_s = after[m].seconds, base_c = after[m].compares ? after[m].compares : 1;
      json_object_set_new(o3, "time_ratio_before_gc", json_real(before[m].seconds / base_s));
      json_object_set_new(o3, "time_ratio_after_gc", json_real(after_gc[m].seconds / base_s));
      json_object_set_new(o3, "comparisons_ratio_before_gc",
                          json_real((double)before[m].compares / base_c));
      json_object_set_new(o3, "comparisons_ratio_after_gc",
                          json_real((double)after_gc[m].compares / base_c));
      json_object_set_new(res, m_names[m], o3);
    }
    json_object_set_new(doc, "results", res);
  }
  if (db) pc_db_close(db);
  bu_remove_tree(dir);
  for (size_t i = 0; i < corpus.n; i++) free(corpus.paths[i]);
  free(corpus.paths);
  return bu_json_finish(doc, rc);
}
