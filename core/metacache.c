/* metacache.c — the embedded store's cache of meta records (metacache.h):
 * 64 shards by key hash, each a chained hash table with its own mutex and a
 * FIFO list for eviction, holding a byte budget of 1/64 of the whole. */
#include "core/metacache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SHARDS 64u
#define BUCKETS 2048u /* per shard; a power of two */
/* what an entry costs besides its bytes: the struct, the allocator's header */
#define ENTRY_OVERHEAD (sizeof(entry_t) + 16u)

typedef struct entry {
  struct entry *hnext;       /* bucket chain */
  struct entry *older, *newer; /* FIFO: insertion order */
  uint64_t hash;
  uint32_t klen, vlen;
  int present;
  char data[]; /* key, then value */
} entry_t;

typedef struct shard {
  pthread_mutex_t mu;
  entry_t *bucket[BUCKETS];
  entry_t *oldest, *newest;
  size_t bytes, entries;
  unsigned long long hits, misses;
} shard_t;

struct pc_mcache {
  size_t budget; /* per shard */
  shard_t shard[SHARDS];
};

pc_mcache_t *pc_mcache_create(size_t bytes) {
  if (bytes == 0) return NULL;
  pc_mcache_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->budget = bytes / SHARDS ? bytes / SHARDS : 1;
  for (unsigned i = 0; i < SHARDS; i++) pthread_mutex_init(&c->shard[i].mu, NULL);
  return c;
}

void pc_mcache_destroy(pc_mcache_t *c) {
  if (!c) return;
  for (unsigned i = 0; i < SHARDS; i++) {
    entry_t *e = c->shard[i].oldest;
    while (e) {
      entry_t *next = e->newer;
      free(e);
      e = next;
    }
    pthread_mutex_destroy(&c->shard[i].mu);
  }
  free(c);
}

static shard_t *shard_of(pc_mcache_t *c, uint64_t h) { return &c->shard[h >> 58 & (SHARDS - 1)]; }

static entry_t **slot_of(shard_t *s, uint64_t h, const char *key, size_t klen) {
  entry_t **p = &s->bucket[h & (BUCKETS - 1)];
  while (*p && !((*p)->hash == h && (*p)->klen == klen && memcmp((*p)->data, key, klen) == 0))
    p = &(*p)->hnext;
  return p;
}

static size_t cost(const entry_t *e) { return ENTRY_OVERHEAD + e->klen + e->vlen; }

/* Unlinks *p (found by slot_of) from its chain and the FIFO and frees it. */
static void drop(shard_t *s, entry_t **p) {
  entry_t *e = *p;
  *p = e->hnext;
  if (e->older) e->older->newer = e->newer;
  else s->oldest = e->newer;
  if (e->newer) e->newer->older = e->older;
  else s->newest = e->older;
  s->bytes -= cost(e);
  s->entries--;
  free(e);
}

int pc_mcache_get(pc_mcache_t *c, const char *key, size_t klen, pc_buf_t *out, int *present) {
  uint64_t h = XXH3_64bits(key, klen);
  shard_t *s = shard_of(c, h);
  pthread_mutex_lock(&s->mu);
  entry_t *e = *slot_of(s, h, key, klen);
  int hit = 0;
  if (e) {
    out->len = 0;
    hit = pc_buf_append(out, e->data + e->klen, e->vlen) == 0;
    *present = e->present;
  }
  if (hit) s->hits++;
  else s->misses++;
  pthread_mutex_unlock(&s->mu);
  return hit;
}

void pc_mcache_put(pc_mcache_t *c, const char *key, size_t klen, const char *val, size_t vlen,
                   int present) {
  uint64_t h = XXH3_64bits(key, klen);
  shard_t *s = shard_of(c, h);
  if (!present) vlen = 0;
  entry_t *n = NULL;
  if (klen <= UINT32_MAX && vlen <= UINT32_MAX && ENTRY_OVERHEAD + klen + vlen <= c->budget)
    n = malloc(sizeof *n + klen + vlen);
  if (n) {
    n->hash = h;
    n->klen = (uint32_t)klen;
    n->vlen = (uint32_t)vlen;
    n->present = present;
    memcpy(n->data, key, klen);
    if (vlen) memcpy(n->data + klen, val, vlen);
  }
  pthread_mutex_lock(&s->mu);
  entry_t **p = slot_of(s, h, key, klen);
  if (*p) drop(s, p);
  if (n) {
    while (s->oldest && s->bytes + cost(n) > c->budget)
      drop(s, slot_of(s, s->oldest->hash, s->oldest->data, s->oldest->klen));
    p = &s->bucket[h & (BUCKETS - 1)];
    n->hnext = *p;
    *p = n;
    n->older = s->newest;
    n->newer = NULL;
    if (s->newest) s->newest->newer = n;
    else s->oldest = n;
    s->newest = n;
    s->bytes += cost(n);
    s->entries++;
  }
  pthread_mutex_unlock(&s->mu);
}

void pc_mcache_erase(pc_mcache_t *c, const char *key, size_t klen) {
  uint64_t h = XXH3_64bits(key, klen);
  shard_t *s = shard_of(c, h);
  pthread_mutex_lock(&s->mu);
  entry_t **p = slot_of(s, h, key, klen);
  if (*p) drop(s, p);
  pthread_mutex_unlock(&s->mu);
}

void pc_mcache_stats(pc_mcache_t *c, pc_mcache_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!c) return;
  for (unsigned i = 0; i < SHARDS; i++) {
    shard_t *s = &c->shard[i];
    pthread_mutex_lock(&s->mu);
    out->entries += s->entries;
    out->bytes += s->bytes;
    out->hits += s->hits;
    out->misses += s->misses;
    pthread_mutex_unlock(&s->mu);
  }
}
