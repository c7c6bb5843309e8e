/* waiting.c — cells whose notifications wait for other workers' observers.
 * When a column has registered observers that this worker does not run, a
 * pass over one of its cells runs this worker's observers and then finds
 * that the others have not yet covered the notifications, which therefore
 * stay (pass.c). The next scans would find them again and repeat the pass,
 * reading acks for nothing, for as long as the other worker is away. This
 * table remembers such a cell with the newest notification the pass saw:
 * a scan that finds nothing newer skips the cell without a transaction,
 * and looks at it again only after a wait that doubles from WAIT_FIRST_MS
 * to WAIT_MAX_MS (the other worker may have covered them since, while this
 * one's reading of its acks was just before; the looks settle that). A
 * newer notification is new work and is passed over at once.
 *
 * Safety does not depend on it: a pass over a cell it skipped would only
 * have found its own observers' acks past the notifications. It is bounded
 * (MAX_ENTRIES; beyond, cells are passed over each time), and entries not
 * seen by a scan for FORGET_MS are dropped: their notifications went.
 */
#include "notify/engine.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"
#include "core/keys.h"

#define BUCKETS 4096u
#define MAX_ENTRIES 262144u
#define WAIT_FIRST_MS 500u
#define WAIT_MAX_MS 30000u
#define FORGET_MS 120000u

typedef struct entry {
  struct entry *next;
  uint64_t hash;
  char *key; /* escaped table, row, column */
  size_t klen;
  uint64_t newest;  /* the newest notification the pass saw */
  uint64_t wait_ms; /* the current wait */
  uint64_t next_ms, seen_ms; /* monotonic: the next look; the last scan that met it */
} entry_t;

struct waiting {
  pthread_mutex_t mu;
  entry_t *b[BUCKETS];
  size_t n;
};

waiting_t *pc_waiting_create(void) {
  waiting_t *t = calloc(1, sizeof *t);
  if (t) pthread_mutex_init(&t->mu, NULL);
  return t;
}

void pc_waiting_destroy(waiting_t *t) {
  if (!t) return;
  for (size_t i = 0; i < BUCKETS; i++)
    for (entry_t *e = t->b[i], *next; e; e = next) {
      next = e->next;
      free(e->key);
      free(e);
    }
  pthread_mutex_destroy(&t->mu);
  free(t);
}

static int key_of(pc_buf_t *k, const pc_cell_t *c) {
  return pc_key_escape(k, c->table, strlen(c->table)) || pc_key_escape(k, c->row, c->rlen) ||
         pc_key_escape(k, c->col, c->clen);
}

/* The entry's link in t (under mu): *link points at it, or at the NULL
 * that ends its bucket. */
static entry_t **find(waiting_t *t, const pc_buf_t *k, uint64_t h) {
  entry_t **p = &t->b[h % BUCKETS];
  while (*p && !((*p)->hash == h && (*p)->klen == k->len && memcmp((*p)->key, k->p, k->len) == 0))
    p = &(*p)->next;
  return p;
}

int pc_waiting_skip(pc_worker_t *w, const pc_cell_t *c, uint64_t newest) {
  waiting_t *t = w->waiting;
  char kb[256];
  pc_buf_t k = PC_BUF_ON(kb);
  if (key_of(&k, c) != 0) {
    pc_buf_free(&k);
    return 0;
  }
  uint64_t h = XXH3_64bits(k.p, k.len), now = pc_now_mono_ms();
  pthread_mutex_lock(&t->mu);
  entry_t *e = *find(t, &k, h);
  int skip = 0;
  if (e) {
    e->seen_ms = now;
    skip = newest <= e->newest && now < e->next_ms;
  }
  pthread_mutex_unlock(&t->mu);
  pc_buf_free(&k);
  return skip;
}

void pc_waiting_note(pc_worker_t *w, const pc_cell_t *c, uint64_t newest, int left) {
  waiting_t *t = w->waiting;
  char kb[256];
  pc_buf_t k = PC_BUF_ON(kb);
  if (key_of(&k, c) != 0) {
    pc_buf_free(&k);
    return;
  }
  uint64_t h = XXH3_64bits(k.p, k.len), now = pc_now_mono_ms();
  pthread_mutex_lock(&t->mu);
  entry_t **p = find(t, &k, h), *e = *p;
  if (!left) {
    if (e) { /* the notifications went */
      *p = e->next;
      free(e->key);
      free(e);
      t->n--;
    }
  } else if (e) { /* looked again and still waiting: wait longer, unless it is new work */
    e->wait_ms = newest > e->newest ? WAIT_FIRST_MS : pc_min_u64(e->wait_ms * 2, WAIT_MAX_MS);
    e->newest = pc_max_u64(e->newest, newest);
    e->next_ms = now + e->wait_ms;
    e->seen_ms = now;
  } else if (t->n < MAX_ENTRIES && (e = calloc(1, sizeof *e)) && (e->key = malloc(k.len))) {
    memcpy(e->key, k.p, k.len);
    e->klen = k.len;
    e->hash = h;
    e->newest = newest;
    e->wait_ms = WAIT_FIRST_MS;
    e->next_ms = now + e->wait_ms;
    e->seen_ms = now;
    e->next = t->b[h % BUCKETS];
    t->b[h % BUCKETS] = e;
    t->n++;
  } else {
    free(e); /* full, or out of memory: the cell is passed over each time */
  }
  pthread_mutex_unlock(&t->mu);
  pc_buf_free(&k);
}

void pc_waiting_prune(pc_worker_t *w) {
  waiting_t *t = w->waiting;
  uint64_t now = pc_now_mono_ms();
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < BUCKETS; i++)
    for (entry_t **p = &t->b[i]; *p;) {
      entry_t *e = *p;
      if (e->seen_ms + FORGET_MS < now) {
        *p = e->next;
        free(e->key);
        free(e);
        t->n--;
      } else {
        p = &e->next;
      }
    }
  pthread_mutex_unlock(&t->mu);
}
