/* layout.c — pc_bench_layout: what the shape of the store's records costs a
 * LevelDB Get, with no library code in the timed loop.
 *
 * A transactional read is one Get of the cell's meta record (docs/ARCHITECTURE.md,
 * "Key layout"), whose key and value are longer than a raw get's. This program
 * loads one LevelDB per layout with the same cells (--keys rows, one column,
 * --value-size bytes each), compacts them, and times Gets of the same random
 * rows on each, in interleaved slices as pc_bench_fig8's read rounds do. Keys
 * are built before a slice is timed, so a slice times LevelDB's Get and the
 * free of its result only. Every ratio is against raw_row, the key that
 * pc_bench_fig8's raw side uses:
 *
 *   raw_row   the row key alone (11 bytes), the value as it is
 *   raw_cell  row, a 0x00 byte and the column (15 bytes), the value as it is:
 *             raw LevelDB keyed by cell, as a store of several columns must be
 *   store     the store's meta key (26 bytes) and meta record (the value and an
 *             11-14 byte header), exactly as the store writes them
 *   ids       a hypothetical key with one-byte ids for table and column
 *             (16 bytes) and the store's meta record: what a format change
 *             to ids would give
 *
 * One thread; medians over --rounds. All LevelDBs get the store's options
 * (bu_ldb_open). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/benchutil.h"
#include "core/keys.h"

#define WHO "layout"
#define TABLE "bench"
#define COLUMN "f:v"
#define MAX_KEY 64

enum layout { L_RAW_ROW, L_RAW_CELL, L_STORE, L_IDS, L_COUNT };
static const char *const layout_name[L_COUNT] = {"raw_row", "raw_cell", "store", "ids"};

typedef struct params {
  uint64_t keys, reads, slice, rounds, value_size, seed;
  const char *parent;
  int keep;
} params_t;

typedef struct key {
  char p[MAX_KEY];
  size_t n;
} lkey_t;

/* The key of row i under layout l. */
static void make_key(enum layout l, uint64_t i, lkey_t *k) {
  char row[BU_KEY_LEN];
  bu_make_key(row, i);
  pc_buf_t b = PC_BUF_ON(k->p);
  pc_cell_t c = {TABLE, row, BU_KEY_LEN, COLUMN, strlen(COLUMN)};
  switch (l) {
    case L_RAW_ROW:
      memcpy(k->p, row, BU_KEY_LEN);
      k->n = BU_KEY_LEN;
      return;
    case L_RAW_CELL:
      memcpy(k->p, row, BU_KEY_LEN);
      k->p[BU_KEY_LEN] = '\0';
      memcpy(k->p + BU_KEY_LEN + 1, COLUMN, strlen(COLUMN));
      k->n = BU_KEY_LEN + 1 + strlen(COLUMN);
      return;
    case L_STORE:
      pc_key_cell(&b, PC_KS_META, &c); /* fits in k->p: no allocation */
      break;
    case L_IDS:
      pc_buf_u8(&b, PC_KS_META);
      pc_buf_u8(&b, 1); /* table id */
      pc_key_escape(&b, row, BU_KEY_LEN);
      pc_buf_u8(&b, 1); /* column id */
      break;
    case L_COUNT:
      break;
  }
  k->n = b.len;
}

/* The value stored under layout l: the value itself, or the meta record of
 * a put holding it inline (commit_ts of this millisecond). */
static int make_value(enum layout l, const char *v, size_t n, uint64_t commit_ts, pc_buf_t *out) {
  out->len = 0;
  if (l == L_RAW_ROW || l == L_RAW_CELL) return pc_buf_append(out, v, n);
  pc_meta_t m = {0};
  m.has_head = 1;
  m.head = (pc_write_rec_t){PC_WRITE_PUT, commit_ts - 3, commit_ts, PC_VALUE_INLINE, v, n, 0};
  m.latest_any = commit_ts;
  return pc_meta_encode(&m, out);
}

static int load(leveldb_t *db, enum layout l, const params_t *p, const char *values,
                size_t *record_len, size_t *key_len) {
  leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
  leveldb_writebatch_t *wb = leveldb_writebatch_create();
  pc_buf_t val = {0};
  uint64_t commit_ts = (uint64_t)bu_now_s() * 1000u << PC_TS_LOGICAL_BITS;
  int rc = 0;
  for (uint64_t i = 0; i < p->keys && rc == 0; i++) {
    lkey_t k;
    make_key(l, i, &k);
    const char *v = values + (i % 1024) * 8; /* random bytes at a varying offset */
    if (make_value(l, v, p->value_size, commit_ts + i, &val) != 0) {
      fprintf(stderr, WHO ": out of memory\n");
      rc = -1;
      break;
    }
    *record_len = val.len;
    *key_len = k.n;
    leveldb_writebatch_put(wb, k.p, k.n, val.p, val.len);
    if ((i + 1) % 1000 == 0 || i + 1 == p->keys) {
      char *e = NULL;
      leveldb_write(db, wo, wb, &e);
      leveldb_writebatch_clear(wb);
      if (e) {
        fprintf(stderr, WHO ": load %s: %s\n", layout_name[l], e);
        leveldb_free(e);
        rc = -1;
      }
    }
  }
  pc_buf_free(&val);
  leveldb_writebatch_destroy(wb);
  leveldb_writeoptions_destroy(wo);
  return rc;
}

/* Gets the n keys of ks from db; 0, or -1 if one is missing or fails. */
static int get_all(leveldb_t *db, const leveldb_readoptions_t *ro, const lkey_t *ks, uint64_t n,
                   enum layout l) {
  for (uint64_t i = 0; i < n; i++) {
    char *e = NULL;
    size_t vl;
    char *v = leveldb_get(db, ro, ks[i].p, ks[i].n, &vl, &e);
    if (e || !v) {
      fprintf(stderr, WHO ": get %s: %s\n", layout_name[l], e ? e : "key missing");
      leveldb_free(e);
      leveldb_free(v);
      return -1;
    }
    leveldb_free(v);
  }
  return 0;
}

/* One round: p->reads Gets per layout, in slices, the layouts in a rotating
 * order. ns[l] receives each layout's time. */
static int round_of(bu_ldb_t *dbs, const leveldb_readoptions_t *ro, const params_t *p,
                    uint64_t seed, lkey_t *ks, uint64_t *rows, double *ns) {
  for (int l = 0; l < L_COUNT; l++) ns[l] = 0;
  uint64_t rng = seed;
  for (uint64_t done = 0, s = 0; done < p->reads; done += p->slice, s++) {
    uint64_t n = p->reads - done < p->slice ? p->reads - done : p->slice;
    for (uint64_t i = 0; i < n; i++) rows[i] = bu_splitmix64(&rng) % p->keys;
    for (int j = 0; j < L_COUNT; j++) {
      enum layout l = (enum layout)((s + (uint64_t)j) % L_COUNT);
      for (uint64_t i = 0; i < n; i++) make_key(l, rows[i], &ks[i]);
      uint64_t t0 = bu_now_ns();
      if (get_all(dbs[l].db, ro, ks, n, l) != 0) return -1;
      ns[l] += (double)(bu_now_ns() - t0);
    }
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: pc_bench_layout [options]\n"
          "LevelDB Get rates for the store's key and record shapes against a raw\n"
          "row-keyed get, interleaved; one JSON document on stdout.\n"
          "  --keys N         rows per layout (default 100000)\n"
          "  --value-size B   bytes per value (default 100)\n"
          "  --reads N        Gets per layout per round (default 200000)\n"
          "  --slice N        Gets per interleaved slice (default 5000)\n"
          "  --rounds N       measured rounds, after one warm-up round (default 5)\n"
          "  --seed N         random seed (default 42)\n"
          "  --dir D          parent of the temporary directory (default /tmp)\n"
          "  --keep           keep the temporary directory\n");
}

static int parse(int argc, char **argv, params_t *p) {
  *p = (params_t){100000, 200000, 5000, 5, 100, 42, "/tmp", 0};
  static const struct option longopts[] = {
      {"keys", required_argument, NULL, 'k'},   {"value-size", required_argument, NULL, 'v'},
      {"reads", required_argument, NULL, 'R'},  {"slice", required_argument, NULL, 'L'},
      {"rounds", required_argument, NULL, 'r'}, {"seed", required_argument, NULL, 'S'},
      {"dir", required_argument, NULL, 'd'},    {"keep", no_argument, NULL, 'K'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    const char *bad = NULL;
    switch (c) {
      case 'k': if (bu_parse_u64(optarg, 1, 9999999999ull, &p->keys)) bad = "--keys"; break;
      case 'v': if (bu_parse_u64(optarg, 1, 1u << 20, &p->value_size)) bad = "--value-size"; break;
      case 'R': if (bu_parse_u64(optarg, 1, UINT64_MAX, &p->reads)) bad = "--reads"; break;
      case 'L': if (bu_parse_u64(optarg, 1, 10000000, &p->slice)) bad = "--slice"; break;
      case 'r': if (bu_parse_u64(optarg, 1, 1000, &p->rounds)) bad = "--rounds"; break;
      case 'S': if (bu_parse_u64(optarg, 0, UINT64_MAX, &p->seed)) bad = "--seed"; break;
      case 'd': p->parent = optarg; break;
      case 'K': p->keep = 1; break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) return bu_bad_value("pc_bench_layout", bad, optarg);
  }
  return bu_no_operands("pc_bench_layout", argc, argv, optind);
}

int main(int argc, char **argv) {
  params_t p;
  if (parse(argc, argv, &p) != 0) return 2;
  json_t *doc = json_object();
  bu_json_head(doc, "layout");
  json_object_set_new(doc, "params",
                      json_pack("{sI sI sI sI sI sI}", "keys", (json_int_t)p.keys, "value_size",
                                (json_int_t)p.value_size, "reads", (json_int_t)p.reads, "slice",
                                (json_int_t)p.slice, "rounds", (json_int_t)p.rounds, "seed",
                                (json_int_t)p.seed));
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  char dir[4096];
  if (bu_make_temp_dir(dir, sizeof dir, p.parent, "layout", WHO) != 0) return bu_json_finish(doc, 1);
  bu_ldb_t dbs[L_COUNT] = {{0}};
  char *values = bu_random_bytes(1024 * 8 + p.value_size, p.seed);
  lkey_t *ks = malloc(p.slice * sizeof *ks);
  uint64_t *rows = malloc(p.slice * sizeof *rows);
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  int rc = values && ks && rows ? 0 : -1;
  json_t *shapes = json_object();
  for (int l = 0; l < L_COUNT && rc == 0; l++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, layout_name[l]);
    size_t rec = 0, kl = 0;
    rc = bu_ldb_open(&dbs[l], path, WHO);
    if (rc == 0) rc = load(dbs[l].db, (enum layout)l, &p, values, &rec, &kl);
    if (rc == 0) {
      leveldb_compact_range(dbs[l].db, NULL, 0, NULL, 0);
      json_object_set_new(shapes, layout_name[l],
                          json_pack("{sI sI}", "key_bytes", (json_int_t)kl, "record_bytes",
                                    (json_int_t)rec));
    }
  }
  json_object_set_new(doc, "shapes", shapes);
  double ns[L_COUNT], ratio[L_COUNT][1000], rate[L_COUNT][1000];
  json_t *rounds = json_array();
  if (rc == 0) rc = round_of(dbs, ro, &p, p.seed ^ 0x5eed, ks, rows, ns); /* warm-up */
  for (uint64_t r = 0; r < p.rounds && rc == 0; r++) {
    rc = round_of(dbs, ro, &p, p.seed + r + 1, ks, rows, ns);
    if (rc != 0) break;
    json_t *jr = json_object();
    for (int l = 0; l < L_COUNT; l++) {
      rate[l][r] = (double)p.reads / (ns[l] / 1e9);
      ratio[l][r] = ns[L_RAW_ROW] / ns[l];
      json_object_set_new(jr, layout_name[l],
                          json_pack("{sf sf}", "gets_s", rate[l][r], "vs_raw_row", ratio[l][r]));
    }
    json_array_append_new(rounds, jr);
  }
  json_object_set_new(doc, "rounds", rounds);
  if (rc == 0) {
    json_t *med = json_object();
    for (int l = 0; l < L_COUNT; l++)
      json_object_set_new(med, layout_name[l],
                          json_pack("{sf sf}", "gets_s", bu_median(rate[l], (int)p.rounds),
                                    "vs_raw_row", bu_median(ratio[l], (int)p.rounds)));
    json_object_set_new(doc, "median", med);
  }
  leveldb_readoptions_destroy(ro);
  for (int l = 0; l < L_COUNT; l++) bu_ldb_close(&dbs[l]);
  free(values);
  free(ks);
  free(rows);
  if (!p.keep) bu_remove_tree(dir);
  else json_object_set_new(doc, "kept_dir", json_string(dir));
  return bu_json_finish(doc, rc == 0 ? 0 : 1);
}
