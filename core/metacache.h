/* metacache.h — a bounded in-memory copy of recently used meta records of
 * the embedded store (core/store_local.c), so that a write's conflict check
 * does not have to read LevelDB.
 *
 * Coherence comes from the store, not from this cache: an entry is filled or
 * changed only while the caller holds the row latch of its cell (read_meta
 * fills it on a miss; apply updates it from the WriteBatch just written).
 * Every meta-record write goes through apply, so an entry is never older than
 * LevelDB. The shard mutexes below only protect the hash structure. Lock-free
 * readers (snapshot gets and scans) do not use it. */
#ifndef PC_CORE_METACACHE_H
#define PC_CORE_METACACHE_H

#include <stddef.h>

#include "core/keys.h"

typedef struct pc_mcache pc_mcache_t;

/* A cache holding at most about `bytes` of keys and records; NULL when bytes
 * is 0 (no cache) or on allocation failure. Release with pc_mcache_destroy. */
pc_mcache_t *pc_mcache_create(size_t bytes);
void pc_mcache_destroy(pc_mcache_t *c);

/* 1 on a hit: *present = 1 and the record copied into out (out->len = its
 * length), or *present = 0 when the cache knows the key has no record.
 * 0 on a miss, or when out could not grow. */
int pc_mcache_get(pc_mcache_t *c, const char *key, size_t klen, pc_buf_t *out, int *present);

/* Records that key holds val (present = 1) or nothing (present = 0),
 * replacing what the cache had; may evict older entries. A failed
 * allocation leaves the key absent from the cache. */
void pc_mcache_put(pc_mcache_t *c, const char *key, size_t klen, const char *val, size_t vlen,
                   int present);

/* Forgets key. */
void pc_mcache_erase(pc_mcache_t *c, const char *key, size_t klen);

/* Counters for the store's metrics and tests. */
typedef struct pc_mcache_stats {
  size_t entries, bytes;
  unsigned long long hits, misses;
} pc_mcache_stats_t;
void pc_mcache_stats(pc_mcache_t *c, pc_mcache_stats_t *out);

#endif
