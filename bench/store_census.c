/* store_census.c — pc_bench_store_census: what a store holds, by kind of
 * record, so that a format change can be weighed by the bytes and keys it
 * would remove before anyone writes it.
 *
 * It reads every key of a store's LevelDB (a data directory's store/, which no
 * process may hold) and counts keys, key bytes and value bytes, as the store
 * wrote them (before LevelDB's compression), by key space and table: meta
 * records ('m'), commit records ('w'), large values ('d'), notifications
 * ('n'), and the rest. Of the commit records it also counts those of a
 * cell's current head with an inline value (PC_VALUE_IN_HEAD), which only a
 * store of format 3 has: the meta record repeats the whole record, and
 * format 4 writes none (the head records of deletes and of values in data
 * keys look like any other and are not counted); and of the meta records
 * those that hold a lock. The files' size on disk is beside them.
 *
 *   pc_bench_store_census DIR     (DIR: a data directory, or its store/)
 *
 * It times nothing and has no baseline: it is the census that
 * docs/BENCHMARKS.md's byte and key shares come from. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/benchutil.h"
#include "core/keys.h"

#define WHO "pc_bench_store_census"
#define MAX_GROUPS 256

typedef struct group {
  char space;
  char table[PC_MAX_TABLE + 1];
  uint64_t keys, key_bytes, value_bytes;
} group_t;

typedef struct census {
  group_t g[MAX_GROUPS];
  int n;
  uint64_t keys, key_bytes, value_bytes, undecodable;
  uint64_t head_records, head_record_bytes; /* 'w' records of the current head */
  uint64_t locks;                           /* meta records holding a lock */
} census_t;

/* The group of (space, table), made when new; the last one ("other") once
 * MAX_GROUPS are in use. */
static group_t *group_of(census_t *c, char space, const char *table) {
  for (int i = 0; i < c->n; i++)
    if (c->g[i].space == space && strcmp(c->g[i].table, table) == 0) return &c->g[i];
  if (c->n == MAX_GROUPS) return &c->g[MAX_GROUPS - 1];
  group_t *g = &c->g[c->n++];
  g->space = space;
  snprintf(g->table, sizeof g->table, "%s", table);
  return g;
}

static void count(census_t *c, const char *k, size_t kl, const char *v, size_t vl) {
  c->keys++;
  c->key_bytes += kl;
  c->value_bytes += vl;
  pc_key_decoded_t d;
  memset(&d, 0, sizeof d);
  const char *table = "";
  /* one-byte keys are markers (fences, the saved lock index's mark) */
  int celled = kl > 1 && strchr("mwdn", k[0]) != NULL;
  int decoded = celled && pc_key_decode(k, kl, &d) == 0;
  if (decoded) table = d.table.p ? d.table.p : "";
  else if (celled) c->undecodable++;
  group_t *g = group_of(c, kl ? k[0] : '?', table);
  g->keys++;
  g->key_bytes += kl;
  g->value_bytes += vl;
  if (decoded && k[0] == PC_KS_WRITE) {
    pc_write_rec_t w;
    if (pc_write_decode(v, vl, &w) == 0 && w.has_inline == PC_VALUE_IN_HEAD) {
      c->head_records++;
      c->head_record_bytes += kl + vl;
    }
  } else if (decoded && k[0] == PC_KS_META) {
    int has_lock = 0, has_head = 0;
    uint64_t lock_start = 0;
    pc_write_rec_t head;
    if (pc_meta_peek(v, vl, &has_lock, &lock_start, &has_head, &head) == 0 && has_lock)
      c->locks++;
  }
  pc_key_decoded_free(&d);
}

/* The bytes of the files in dir (not below it). */
static uint64_t dir_bytes(const char *dir) {
  uint64_t total = 0;
  DIR *dp = opendir(dir);
  if (!dp) return 0;
  struct dirent *e;
  char path[4096 + 256 + 2];
  while ((e = readdir(dp)) != NULL) {
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
  }
  closedir(dp);
  return total;
}

static json_t *group_json(const group_t *g) {
  char space[2] = {g->space, 0};
  return json_pack("{s:s, s:s, s:I, s:I, s:I}", "space", space, "table", g->table, "keys",
                   (json_int_t)g->keys, "key_bytes", (json_int_t)g->key_bytes, "value_bytes",
                   (json_int_t)g->value_bytes);
}

int main(int argc, char **argv) {
  if (argc != 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: %s DIR   (a data directory, or its store/, that no process holds)\n",
            WHO);
    return 2;
  }
  if (strlen(argv[1]) >= 4000) {
    fprintf(stderr, "%s: the directory's name is too long\n", WHO);
    return 2;
  }
  char store[4096], current[4096 + 16];
  snprintf(current, sizeof current, "%s/store/CURRENT", argv[1]);
  struct stat st;
  snprintf(store, sizeof store, stat(current, &st) == 0 ? "%s/store" : "%s", argv[1]);

  /* never creates one: a census of nothing is a mistake */
  leveldb_options_t *opts = leveldb_options_create();
  char *e = NULL;
  leveldb_t *db = leveldb_open(opts, store, &e);
  if (e) {
    fprintf(stderr, "%s: LevelDB %s: %s\n", WHO, store, e);
    leveldb_free(e);
    leveldb_options_destroy(opts);
    return 1;
  }
  census_t *c = calloc(1, sizeof *c);
  if (!c) {
    fprintf(stderr, "%s: out of memory\n", WHO);
    leveldb_close(db);
    leveldb_options_destroy(opts);
    return 1;
  }
  leveldb_readoptions_t *ro = leveldb_readoptions_create();
  leveldb_readoptions_set_fill_cache(ro, 0);
  leveldb_iterator_t *it = leveldb_create_iterator(db, ro);
  for (leveldb_iter_seek_to_first(it); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl);
    const char *v = leveldb_iter_value(it, &vl);
    count(c, k, kl, v, vl);
  }
  int rc = 0;
  leveldb_iter_get_error(it, &e);
  if (e) {
    fprintf(stderr, "%s: reading %s: %s\n", WHO, store, e);
    leveldb_free(e);
    rc = 1;
  }
  leveldb_iter_destroy(it);
  leveldb_readoptions_destroy(ro);
  leveldb_close(db);
  leveldb_options_destroy(opts);

  json_t *doc = json_object();
  bu_json_head(doc, "store_census");
  json_object_set_new(doc, "store", json_string(store));
  json_object_set_new(doc, "files_bytes", json_integer((json_int_t)dir_bytes(store)));
  json_object_set_new(doc, "keys", json_integer((json_int_t)c->keys));
  json_object_set_new(doc, "key_bytes", json_integer((json_int_t)c->key_bytes));
  json_object_set_new(doc, "value_bytes", json_integer((json_int_t)c->value_bytes));
  json_object_set_new(doc, "undecodable_keys", json_integer((json_int_t)c->undecodable));
  json_object_set_new(doc, "locks", json_integer((json_int_t)c->locks));
  json_object_set_new(doc, "head_commit_records",
                      json_pack("{s:I, s:I, s:s}", "keys", (json_int_t)c->head_records, "bytes",
                                (json_int_t)c->head_record_bytes, "what",
                                "commit records of current heads with an inline value, which "
                                "the meta record repeats (format 3 only)"));
  json_t *groups = json_array();
  for (int i = 0; i < c->n; i++) json_array_append_new(groups, group_json(&c->g[i]));
  json_object_set_new(doc, "by_space_and_table", groups);
  free(c);
  return bu_json_finish(doc, rc);
}
