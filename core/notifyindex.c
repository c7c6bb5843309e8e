/* notifyindex.c — the embedded store's live notification keys in memory,
 * ordered as in LevelDB, so that scans never walk over deleted ones
 * (notifyindex.h says why and how it stays coherent). One sorted array per
 * notification bucket: a bucket holds a small share of what is pending, so
 * inserting by binary search and a move stays cheap. */
#include "core/notifyindex.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
  char *key;
  uint32_t klen;
  char kind;
} entry_t;

typedef struct bucket {
  entry_t *v;
  size_t n, cap;
} bucket_t;

struct pc_nindex {
  pthread_mutex_t mu;
  uint32_t nb; /* buckets in use: PC_NOTIFY_BUCKETS, or 1 (flat) */
  bucket_t b[PC_NOTIFY_BUCKETS];
  size_t count;
};

static pc_nindex_t *create(uint32_t nb) {
  pc_nindex_t *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  pthread_mutex_init(&x->mu, NULL);
  x->nb = nb;
  return x;
}

pc_nindex_t *pc_nindex_create(void) { return create(PC_NOTIFY_BUCKETS); }

pc_nindex_t *pc_nindex_create_flat(void) { return create(1); }

void pc_nindex_destroy(pc_nindex_t *x) {
  if (!x) return;
  for (uint32_t i = 0; i < PC_NOTIFY_BUCKETS; i++) {
    for (size_t k = 0; k < x->b[i].n; k++) free(x->b[i].v[k].key);
    free(x->b[i].v);
  }
  pthread_mutex_destroy(&x->mu);
  free(x);
}

/* The bucket of a key: 'n' then two bytes, big-endian; keys too short or
 * out of range go to the last bucket (they sort there among 'n' keys too).
 * A flat index has one. */
static uint32_t bucket_of(const pc_nindex_t *x, const char *key, size_t klen) {
  if (x->nb == 1 || klen < 3) return 0;
  uint32_t b = (uint32_t)(unsigned char)key[1] << 8 | (unsigned char)key[2];
  return b < PC_NOTIFY_BUCKETS ? b : PC_NOTIFY_BUCKETS - 1;
}

/* The first position in bk whose key is >= key. */
static size_t lower_bound(const bucket_t *bk, const char *key, size_t klen) {
  size_t lo = 0, hi = bk->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (pc_bytes_cmp(bk->v[mid].key, bk->v[mid].klen, key, klen) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int same_key(const entry_t *e, const char *key, size_t klen) {
  return e->klen == klen && memcmp(e->key, key, klen) == 0;
}

int pc_nindex_put(pc_nindex_t *x, const char *key, size_t klen, char kind) {
  if (klen > UINT32_MAX) return -1;
  pthread_mutex_lock(&x->mu);
  bucket_t *bk = &x->b[bucket_of(x, key, klen)];
  size_t at = lower_bound(bk, key, klen);
  int rc = 0;
  if (at < bk->n && same_key(&bk->v[at], key, klen)) {
    bk->v[at].kind = kind;
  } else {
    char *copy = malloc(klen ? klen : 1);
    if (copy && bk->n == bk->cap) {
      size_t nc = bk->cap ? bk->cap * 2 : 8;
      entry_t *nv = realloc(bk->v, nc * sizeof *nv);
      if (nv) {
        bk->v = nv;
        bk->cap = nc;
      }
    }
    if (!copy || bk->n == bk->cap) {
      free(copy);
      rc = -1;
    } else {
      memcpy(copy, key, klen);
      memmove(&bk->v[at + 1], &bk->v[at], (bk->n - at) * sizeof *bk->v);
      bk->v[at] = (entry_t){copy, (uint32_t)klen, kind};
      bk->n++;
      x->count++;
    }
  }
  pthread_mutex_unlock(&x->mu);
  return rc;
}

void pc_nindex_del(pc_nindex_t *x, const char *key, size_t klen) {
  pthread_mutex_lock(&x->mu);
  bucket_t *bk = &x->b[bucket_of(x, key, klen)];
  size_t at = lower_bound(bk, key, klen);
  if (at < bk->n && same_key(&bk->v[at], key, klen)) {
    free(bk->v[at].key);
    memmove(&bk->v[at], &bk->v[at + 1], (bk->n - at - 1) * sizeof *bk->v);
    bk->n--;
    x->count--;
  }
  pthread_mutex_unlock(&x->mu);
}

long pc_nindex_copy(pc_nindex_t *x, const char *from, size_t flen, size_t plen, const char *end,
                    size_t elen, size_t max, pc_buf_t *out) {
  long n = 0;
  pthread_mutex_lock(&x->mu);
  uint32_t first = from ? bucket_of(x, from, flen) : 0;
  if (x->nb > 1 && from && flen >= 1 && (unsigned char)from[0] > PC_KS_NOTIFY) first = x->nb;
  for (uint32_t b = first; b < x->nb && (size_t)n < max; b++) {
    const bucket_t *bk = &x->b[b];
    size_t i = from && b == first ? lower_bound(bk, from, flen) : 0;
    for (; i < bk->n && (size_t)n < max; i++) {
      const entry_t *e = &bk->v[i];
      if (from && pc_bytes_cmp(e->key, e->klen, from, flen) < 0) continue;
      if (end && pc_bytes_cmp(e->key, e->klen, end, elen) >= 0) goto done;
      if (plen && (e->klen < plen || memcmp(e->key, from, plen) != 0)) goto done;
      uint32_t kl = e->klen;
      if (pc_buf_append(out, &kl, sizeof kl) || pc_buf_append(out, e->key, kl) ||
          pc_buf_append(out, &e->kind, 1)) {
        n = -1;
        goto done;
      }
      n++;
    }
    if (plen) break; /* a prefix of a cell lies in one bucket */
  }
done:
  pthread_mutex_unlock(&x->mu);
  return n;
}

int pc_nindex_next(const pc_buf_t *buf, size_t *pos, const char **key, size_t *klen, char *kind) {
  uint32_t kl;
  if (*pos + sizeof kl > buf->len) return 0;
  memcpy(&kl, buf->p + *pos, sizeof kl);
  if (*pos + sizeof kl + kl + 1 > buf->len) return 0;
  *key = buf->p + *pos + sizeof kl;
  *klen = kl;
  *kind = buf->p[*pos + sizeof kl + kl];
  *pos += sizeof kl + kl + 1;
  return 1;
}

size_t pc_nindex_count(pc_nindex_t *x) {
  pthread_mutex_lock(&x->mu);
  size_t n = x->count;
  pthread_mutex_unlock(&x->mu);
  return n;
}
