/* recent.c — the table of this process's newest commits by cell (recent.h):
 * a direct-mapped array of (cell hash, commit_ts) slots, striped mutexes. */
#include "core/recent.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define STRIPES 64u

typedef struct slot {
  uint64_t hash; /* 0: empty */
  uint64_t ts;
} slot_t;

struct pc_recent {
  pthread_mutex_t mu[STRIPES];
  slot_t slot[PC_RECENT_SLOTS];
};

pc_recent_t *pc_recent_create(void) {
  pc_recent_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  for (unsigned i = 0; i < STRIPES; i++) pthread_mutex_init(&r->mu[i], NULL);
  return r;
}

void pc_recent_destroy(pc_recent_t *r) {
  if (!r) return;
  for (unsigned i = 0; i < STRIPES; i++) pthread_mutex_destroy(&r->mu[i]);
  free(r);
}

/* The cell's hash (never 0): table, row and column chained, each length
 * included, so that no two cells' bytes run together alike. */
static uint64_t cell_hash(const pc_cell_t *c) {
  size_t tl = strlen(c->table);
  uint64_t h = XXH3_64bits_withSeed(c->table, tl, tl);
  h = XXH3_64bits_withSeed(c->row, c->rlen, h ^ c->rlen);
  h = XXH3_64bits_withSeed(c->col, c->clen, h ^ (c->clen << 32));
  return h ? h : 1;
}

void pc_recent_record(pc_recent_t *r, const pc_mutation_t *muts, size_t n, uint64_t commit_ts) {
  for (size_t i = 0; r && i < n; i++) {
    if (muts[i].kind != PC_WRITE_PUT && muts[i].kind != PC_WRITE_DELETE) continue;
    uint64_t h = cell_hash(&muts[i].cell);
    size_t at = (size_t)(h % PC_RECENT_SLOTS);
    pthread_mutex_t *mu = &r->mu[at % STRIPES];
    pthread_mutex_lock(mu);
    slot_t *s = &r->slot[at];
    if (s->hash != h || s->ts < commit_ts) *s = (slot_t){h, commit_ts};
    pthread_mutex_unlock(mu);
  }
}

size_t pc_recent_conflict(pc_recent_t *r, const pc_mutation_t *muts, size_t n, uint64_t start_ts,
                          uint64_t *at) {
  for (size_t i = 0; r && i < n; i++) {
    uint64_t h = cell_hash(&muts[i].cell);
    size_t k = (size_t)(h % PC_RECENT_SLOTS);
    pthread_mutex_t *mu = &r->mu[k % STRIPES];
    pthread_mutex_lock(mu);
    slot_t s = r->slot[k];
    pthread_mutex_unlock(mu);
    if (s.hash == h && s.ts > start_ts) {
      *at = s.ts;
      return i;
    }
  }
  return n;
}
