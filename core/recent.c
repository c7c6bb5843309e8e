/* recent.c — what this process knows of its own commits by cell (recent.h):
 * the newest commits, a direct-mapped array of (cell hash, commit_ts) slots
 * under striped mutexes; the commits in flight, their cells' hashes chained
 * in buckets under one mutex, with a condition variable that a commit
 * waiting for another's cells sleeps on. */
#include "core/recent.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"

#define STRIPES 64u
#define BUCKETS 16384u /* of the cells in flight: a few commits of a few thousand cells */

typedef struct slot {
  uint64_t hash; /* 0: empty */
  uint64_t ts;
} slot_t;

typedef struct entry { /* a cell of a commit in flight */
  uint64_t hash;
  const pc_recent_commit_t *owner;
  struct entry *next, **pprev;
} entry_t;

struct pc_recent_commit {
  pc_recent_t *r;
  const pc_mutation_t *muts;
  size_t n;
  uint64_t *hash; /* of each mutation's cell; 0: not a put or a delete */
  entry_t *entry; /* its cells in flight, when it took them */
  size_t nentry;
};

struct pc_recent {
  pthread_mutex_t mu[STRIPES];
  slot_t slot[PC_RECENT_SLOTS];
  pthread_mutex_t flight_mu;
  pthread_cond_t flight_done; /* broadcast when a commit frees its cells */
  entry_t *bucket[BUCKETS];
};

pc_recent_t *pc_recent_create(void) {
  pc_recent_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  if (pc_cond_init_mono(&r->flight_done) != 0) {
    free(r);
    return NULL;
  }
  for (unsigned i = 0; i < STRIPES; i++) pthread_mutex_init(&r->mu[i], NULL);
  pthread_mutex_init(&r->flight_mu, NULL);
  return r;
}

void pc_recent_destroy(pc_recent_t *r) {
  if (!r) return;
  for (unsigned i = 0; i < STRIPES; i++) pthread_mutex_destroy(&r->mu[i]);
  pthread_mutex_destroy(&r->flight_mu);
  pthread_cond_destroy(&r->flight_done);
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

/* Whether another commit in flight holds one of c's cells (flight_mu held). */
static int held_by_another(const pc_recent_commit_t *c) {
  for (size_t i = 0; i < c->n; i++) {
    if (!c->hash[i]) continue;
    for (const entry_t *e = c->r->bucket[c->hash[i] % BUCKETS]; e; e = e->next)
      if (e->hash == c->hash[i] && e->owner != c) return 1;
  }
  return 0;
}

static void take_cells(pc_recent_commit_t *c) { /* flight_mu held */
  for (size_t i = 0; i < c->n; i++) {
    if (!c->hash[i]) continue;
    entry_t *e = &c->entry[c->nentry++], **head = &c->r->bucket[c->hash[i] % BUCKETS];
    *e = (entry_t){c->hash[i], c, *head, head};
    if (*head) (*head)->pprev = &e->next;
    *head = e;
  }
}

pc_recent_commit_t *pc_recent_begin(pc_recent_t *r, const pc_mutation_t *muts, size_t n,
                                    uint32_t wait_ms) {
  if (!r) return NULL;
  pc_recent_commit_t *c = calloc(1, sizeof *c);
  if (!c || !(c->hash = calloc(n ? n : 1, sizeof *c->hash))) {
    free(c);
    return NULL;
  }
  *c = (pc_recent_commit_t){r, muts, n, c->hash, NULL, 0};
  size_t writes = 0;
  for (size_t i = 0; i < n; i++) {
    if (muts[i].kind != PC_WRITE_PUT && muts[i].kind != PC_WRITE_DELETE) continue;
    c->hash[i] = cell_hash(&muts[i].cell);
    writes++;
  }
  if (writes == 0 || writes > PC_RECENT_FLIGHT_MAX ||
      !(c->entry = malloc(writes * sizeof *c->entry)))
    return c; /* takes no cells: the store decides, as without this */
  struct timespec until = pc_mono_after_ms(wait_ms);
  pthread_mutex_lock(&r->flight_mu);
  int timed_out = 0;
  while (held_by_another(c) && !timed_out)
    timed_out = pthread_cond_timedwait(&r->flight_done, &r->flight_mu, &until) == ETIMEDOUT;
  if (!timed_out) take_cells(c);
  pthread_mutex_unlock(&r->flight_mu);
  if (timed_out) {
    free(c->entry);
    c->entry = NULL;
  }
  return c;
}

size_t pc_recent_conflict(const pc_recent_commit_t *c, uint64_t start_ts, uint64_t *at) {
  if (!c) return SIZE_MAX;
  pc_recent_t *r = c->r;
  for (size_t i = 0; i < c->n; i++) {
    uint64_t h = c->hash[i];
    if (!h) continue;
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
  return c->n;
}

void pc_recent_end(pc_recent_commit_t *c, uint64_t commit_ts) {
  if (!c) return;
  pc_recent_t *r = c->r;
  for (size_t i = 0; commit_ts && i < c->n; i++) { /* recorded before the cells are free */
    uint64_t h = c->hash[i];
    if (!h) continue;
    size_t k = (size_t)(h % PC_RECENT_SLOTS);
    pthread_mutex_t *mu = &r->mu[k % STRIPES];
    pthread_mutex_lock(mu);
    slot_t *s = &r->slot[k];
    if (s->hash != h || s->ts < commit_ts) *s = (slot_t){h, commit_ts};
    pthread_mutex_unlock(mu);
  }
  if (c->nentry) {
    pthread_mutex_lock(&r->flight_mu);
    for (size_t i = 0; i < c->nentry; i++) {
      entry_t *e = &c->entry[i];
      *e->pprev = e->next;
      if (e->next) e->next->pprev = e->pprev;
    }
    pthread_cond_broadcast(&r->flight_done);
    pthread_mutex_unlock(&r->flight_mu);
  }
  free(c->entry);
  free(c->hash);
  free(c);
}
