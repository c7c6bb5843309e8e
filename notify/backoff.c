/* backoff.c — the setbacks of (cell, observer) since its last success, in
 * the worker's memory: how many times the callback failed (toward parking),
 * and when to try again. The wait starts at backoff_ms and doubles with
 * each setback, up to BACKOFF_CAP_MS (or backoff_ms, if that is longer).
 * An entry whose retry time passed long ago is dropped by the sweeper's
 * prune: its notification was handled elsewhere (another worker) or is gone.
 */
#include "notify/engine.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/keys.h"

#define BACKOFF_CAP_MS 300000u /* the longest wait between retries (unless backoff_ms is longer) */
#define FAIL_FORGET_MS 600000u /* an entry untouched this long past its retry time is dropped */
#define FAIL_BUCKETS 1024u

/* What one (cell, observer) has gone through since its last success. */
typedef struct fail_entry {
  struct fail_entry *next;
  uint64_t hash;
  char *key; /* escaped table, row, column, observer */
  size_t klen;
  uint32_t failures, retries; /* callback failures; every deferral (failures too) */
  uint64_t next_try_ms;       /* monotonic */
} fail_entry_t;

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
      free(e->key);
      free(e);
    }
  }
  pthread_mutex_destroy(&b->mu);
  free(b);
}

int pc_backoff_key(pc_buf_t *b, const pc_cell_t *c, const char *observer) {
  return pc_key_escape(b, c->table, strlen(c->table)) || pc_key_escape(b, c->row, c->rlen) ||
         pc_key_escape(b, c->col, c->clen) || pc_key_escape(b, observer, strlen(observer));
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

uint32_t pc_backoff_defer(pc_worker_t *w, const pc_buf_t *key, int callback_failed) {
  backoff_t *b = w->backoff;
  pthread_mutex_lock(&b->mu);
  fail_entry_t *e = find(b, key, 1);
  uint32_t n = 0;
  if (e) {
    if (callback_failed) e->failures++;
    e->retries++;
    e->next_try_ms = pc_now_mono_ms() + wait_ms(w, e->retries);
    n = e->failures;
  }
  pthread_mutex_unlock(&b->mu);
  return n;
}

int pc_backoff_waiting(pc_worker_t *w, const pc_buf_t *key) {
  backoff_t *b = w->backoff;
  pthread_mutex_lock(&b->mu);
  fail_entry_t *e = find(b, key, 0);
  int wait = e && pc_now_mono_ms() < e->next_try_ms;
  pthread_mutex_unlock(&b->mu);
  return wait;
}

void pc_backoff_forget(pc_worker_t *w, const pc_buf_t *key) {
  backoff_t *b = w->backoff;
  uint64_t h = XXH3_64bits(key->p, key->len);
  pthread_mutex_lock(&b->mu);
  for (fail_entry_t **p = &b->fail[h % FAIL_BUCKETS]; *p; p = &(*p)->next) {
    fail_entry_t *e = *p;
    if (e->hash == h && e->klen == key->len && memcmp(e->key, key->p, key->len) == 0) {
      *p = e->next;
      free(e->key);
      free(e);
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
        free(e->key);
        free(e);
      } else {
        p = &e->next;
      }
    }
  }
  pthread_mutex_unlock(&b->mu);
}
