/* backoff.c — setbacks in the worker's memory.
 *
 * Of (cell, observer), since its last success: how many times the callback
 * failed (toward parking), and when to try again. The wait starts at
 * backoff_ms and doubles with each setback, up to BACKOFF_CAP_MS (or
 * backoff_ms, if that is longer).
 *
 * Of a cell whose pass ended with observers waiting: the newest
 * notification that pass saw, the first of their retry times, and what each
 * weak observer's run covered. Until that time no pass over the cell runs
 * unless a newer notification arrives (a new change, which the healthy
 * observers then see at once, while the waiting ones still wait); a weak
 * observer whose run covered the cell's weak notifications is not run again
 * for them. So a failing observer costs its retries and nothing else: the
 * healthy observers of its cell run once per change.
 *
 * An entry whose retry time passed long ago is dropped by the prune: its
 * notification was handled elsewhere (another worker) or is gone.
 */
#include "notify/engine.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"
#include "core/keys.h"

#define BACKOFF_CAP_MS 300000u /* the longest wait between retries (unless backoff_ms is longer) */
#define FAIL_FORGET_MS 600000u /* an entry untouched this long past its retry time is dropped */
#define FAIL_BUCKETS 1024u

/* What one (cell, observer) has gone through since its last success, or
 * (with covers) a cell that waits. The keys of the two kinds never meet: a
 * cell's is a proper prefix of its observers'. */
typedef struct fail_entry {
  struct fail_entry *next;
  uint64_t hash;
  char *key; /* escaped table, row, column[, observer] */
  size_t klen;
  uint32_t failures, retries; /* callback failures; every deferral (failures too) */
  uint64_t next_try_ms;       /* monotonic; a cell's: the first retry of its observers */
  uint64_t newest;            /* a cell's: the newest notification its pass saw */
  uint64_t *covers;           /* a cell's: per observer slot, what a weak run covered */
} fail_entry_t;

static void entry_free(fail_entry_t *e) {
  free(e->key);
  free(e->covers);
  free(e);
}

struct backoff {
  pthread_mutex_t mu;
  fail_entry_t *fail[FAIL_BUCKETS];
};

backoff_t *pc_backoff_create(void) {
  backoff_t *b = calloc(1, sizeof *b);
  if (b) pthread_mutex_init(&b->mu, NULL);
  return b;
}

void pc_backoff_destroy(backoff_t *b) {
  if (!b) return;
  for (size_t i = 0; i < FAIL_BUCKETS; i++) {
    for (fail_entry_t *e = b->fail[i], *next; e; e = next) {
      next = e->next;
      entry_free(e);
    }
  }
  pthread_mutex_destroy(&b->mu);
  free(b);
}

int pc_backoff_key(pc_buf_t *b, const pc_cell_t *c, const char *observer) {
  return pc_key_escape(b, c->table, strlen(c->table)) || pc_key_escape(b, c->row, c->rlen) ||
         pc_key_escape(b, c->col, c->clen) ||
         (observer && pc_key_escape(b, observer, strlen(observer)));
}

/* The entry of key (created when create is set); under mu. */
static fail_entry_t *find(backoff_t *b, const pc_buf_t *key, int create) {
  uint64_t h = XXH3_64bits(key->p, key->len);
  fail_entry_t **head = &b->fail[h % FAIL_BUCKETS];
  for (fail_entry_t *e = *head; e; e = e->next)
    if (e->hash == h && e->klen == key->len && memcmp(e->key, key->p, key->len) == 0) return e;
  if (!create) return NULL;
  fail_entry_t *e = calloc(1, sizeof *e);
  if (!e || !(e->key = malloc(key->len ? key->len : 1))) {
    free(e);
    return NULL;
  }
  memcpy(e->key, key->p, key->len);
  e->klen = key->len;
  e->hash = h;
  e->next = *head;
  *head = e;
  return e;
}

static uint64_t wait_ms(const pc_worker_t *w, uint32_t n) {
  uint64_t cap = pc_max_u64(w->o.backoff_ms, BACKOFF_CAP_MS), d = w->o.backoff_ms;
  for (uint32_t i = 1; i < n && d < cap; i++) d *= 2;
  return pc_min_u64(d, cap);
}

uint32_t pc_backoff_defer(pc_worker_t *w, const pc_buf_t *key, int callback_failed,
                          uint64_t *retry_at) {
  backoff_t *b = w->backoff;
  pthread_mutex_lock(&b->mu);
  fail_entry_t *e = find(b, key, 1);
  uint32_t n = 0;
  uint64_t at = pc_now_mono_ms() + w->o.backoff_ms; /* when the entry cannot be kept */
  if (e) {
    if (callback_failed) e->failures++;
    e->retries++;
    e->next_try_ms = at = pc_now_mono_ms() + wait_ms(w, e->retries);
    n = e->failures;
  }
  pthread_mutex_unlock(&b->mu);
  if (retry_at) *retry_at = at;
  return n;
}

int pc_backoff_waiting(pc_worker_t *w, const pc_buf_t *key, uint64_t *retry_at) {
  backoff_t *b = w->backoff;
  pthread_mutex_lock(&b->mu);
  fail_entry_t *e = find(b, key, 0);
  int wait = e && pc_now_mono_ms() < e->next_try_ms;
  if (wait && retry_at) *retry_at = e->next_try_ms;
  pthread_mutex_unlock(&b->mu);
  return wait;
}

int pc_backoff_cell_check(pc_worker_t *w, const pc_buf_t *cell, uint64_t newest,
                          uint64_t **covers) {
  backoff_t *b = w->backoff;
  *covers = NULL;
  pthread_mutex_lock(&b->mu);
  fail_entry_t *e = find(b, cell, 0);
  int wait = e && newest <= e->newest && pc_now_mono_ms() < e->next_try_ms;
  if (e && !wait && e->covers && (*covers = malloc(w->nslots * sizeof **covers)))
    memcpy(*covers, e->covers, w->nslots * sizeof **covers);
  pthread_mutex_unlock(&b->mu);
  return wait;
}

void pc_backoff_cell_defer(pc_worker_t *w, const pc_buf_t *cell, uint64_t newest,
                           uint64_t until_ms, const uint64_t *covers) {
  backoff_t *b = w->backoff;
  pthread_mutex_lock(&b->mu);
  fail_entry_t *e = find(b, cell, 1);
  if (e && !e->covers) e->covers = calloc(w->nslots, sizeof *e->covers);
  if (e && e->covers) {
    e->newest = pc_max_u64(e->newest, newest);
    e->next_try_ms = until_ms;
    for (size_t i = 0; i < w->nslots; i++) e->covers[i] = pc_max_u64(e->covers[i], covers[i]);
  }
  pthread_mutex_unlock(&b->mu);
}

void pc_backoff_forget(pc_worker_t *w, const pc_buf_t *key) {
  backoff_t *b = w->backoff;
  uint64_t h = XXH3_64bits(key->p, key->len);
  pthread_mutex_lock(&b->mu);
  for (fail_entry_t **p = &b->fail[h % FAIL_BUCKETS]; *p; p = &(*p)->next) {
    fail_entry_t *e = *p;
    if (e->hash == h && e->klen == key->len && memcmp(e->key, key->p, key->len) == 0) {
      *p = e->next;
      entry_free(e);
      break;
    }
  }
  pthread_mutex_unlock(&b->mu);
}

void pc_backoff_prune(pc_worker_t *w) {
  backoff_t *b = w->backoff;
  uint64_t now = pc_now_mono_ms();
  pthread_mutex_lock(&b->mu);
  for (size_t i = 0; i < FAIL_BUCKETS; i++) {
    for (fail_entry_t **p = &b->fail[i]; *p;) {
      fail_entry_t *e = *p;
      if (e->next_try_ms + FAIL_FORGET_MS < now) {
        *p = e->next;
        entry_free(e);
      } else {
        p = &e->next;
      }
    }
  }
  pthread_mutex_unlock(&b->mu);
}

/* ---- sets of keys ------------------------------------------------------------ */

#define SET_BUCKETS 256u

typedef struct set_entry {
  struct set_entry *next;
  uint64_t hash;
  size_t len;
  char key[];
} set_entry_t;

struct keyset {
  set_entry_t *b[SET_BUCKETS];
  size_t n;
};

keyset_t *pc_keyset_create(void) { return calloc(1, sizeof(keyset_t)); }

void pc_keyset_destroy(keyset_t *s) {
  if (!s) return;
  for (size_t i = 0; i < SET_BUCKETS; i++)
    for (set_entry_t *e = s->b[i], *next; e; e = next) {
      next = e->next;
      free(e);
    }
  free(s);
}

static set_entry_t **set_find(const keyset_t *s, const char *key, size_t len, uint64_t h) {
  set_entry_t *const *p = &s->b[h % SET_BUCKETS];
  for (; *p; p = &(*p)->next)
    if ((*p)->hash == h && (*p)->len == len && memcmp((*p)->key, key, len) == 0) break;
  return (set_entry_t **)p;
}

int pc_keyset_add(keyset_t *s, const char *key, size_t len) {
  uint64_t h = XXH3_64bits(key, len);
  if (*set_find(s, key, len, h)) return 0;
  set_entry_t *e = malloc(sizeof *e + (len ? len : 1));
  if (!e) return -1;
  e->hash = h;
  e->len = len;
  memcpy(e->key, key, len);
  e->next = s->b[h % SET_BUCKETS];
  s->b[h % SET_BUCKETS] = e;
  s->n++;
  return 0;
}

int pc_keyset_has(const keyset_t *s, const char *key, size_t len) {
  return s && s->n && *set_find(s, key, len, XXH3_64bits(key, len)) != NULL;
}

int pc_keyset_del(keyset_t *s, const char *key, size_t len) {
  if (!s || !s->n) return 0;
  set_entry_t **p = set_find(s, key, len, XXH3_64bits(key, len)), *e = *p;
  if (!e) return 0;
  *p = e->next;
  free(e);
  s->n--;
  return 1;
}

size_t pc_keyset_size(const keyset_t *s) { return s ? s->n : 0; }
