/* dedup_text.c — the content hash and the tokeniser of the dedup
 * application (rules in dedup_text.h). */
#include "dedup_text.h"

#include <nettle/sha2.h>
#include <stdlib.h>
#include <string.h>

void dd_sha256_hex(const char *p, size_t n, char out[DD_HASH_HEX]) {
  static const char hex[] = "0123456789abcdef";
  struct sha256_ctx ctx;
  uint8_t d[SHA256_DIGEST_SIZE];
  sha256_init(&ctx);
  sha256_update(&ctx, n, (const uint8_t *)p);
  sha256_digest(&ctx, sizeof d, d);
  for (size_t i = 0; i < sizeof d; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[2 * SHA256_DIGEST_SIZE] = '\0';
}

/* The folded byte, or 0 when ch separates terms. */
static char term_byte(unsigned char ch) {
  if (ch >= 'A' && ch <= 'Z') return (char)(ch - 'A' + 'a');
  if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) return (char)ch;
  return 0;
}

size_t dd_next_term(const char *p, size_t n, size_t *pos, char out[DD_MAX_TERM + 1]) {
  size_t i = *pos;
  while (i < n && !term_byte((unsigned char)p[i])) i++;
  size_t len = 0;
  for (char c; i < n && (c = term_byte((unsigned char)p[i])) != 0; i++)
    if (len < DD_MAX_TERM) out[len++] = c;
  out[len] = '\0';
  *pos = i;
  return len;
}

static uint64_t term_hash(const char *t, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)t[i]) * 1099511628211ull;
  return h;
}

static int term_cmp(const void *a, const void *b) {
  const dd_term_t *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int r = memcmp(x->term, y->term, n);
  return r ? r : (x->len > y->len) - (x->len < y->len);
}

static int terms(const char *p, size_t n, dd_terms_t *out, int sorted) {
  out->v = NULL;
  out->n = 0;
  out->mem = NULL;
  size_t cap = 0, slots = 0, used = 0, room = 0;
  size_t *table = NULL; /* open addressing: index + 1 into out->v, 0 = empty */
  char t[DD_MAX_TERM + 1];
  size_t pos = 0, len;
  while ((len = dd_next_term(p, n, &pos, t)) != 0) {
    if ((out->n + 1) * 2 > slots) { /* grow the table (and rehash) at half full */
      size_t ns = slots ? slots * 2 : 64;
      size_t *nt = calloc(ns, sizeof *nt);
      if (!nt) goto oom;
      for (size_t k = 0; k < out->n; k++) {
        const dd_term_t *e = &out->v[k];
        size_t s = term_hash(out->mem + e->off, e->len) & (ns - 1);
        while (nt[s]) s = (s + 1) & (ns - 1);
        nt[s] = k + 1;
      }
      free(table);
      table = nt;
      slots = ns;
    }
    size_t s = term_hash(t, len) & (slots - 1);
    for (; table[s]; s = (s + 1) & (slots - 1)) {
      dd_term_t *e = &out->v[table[s] - 1];
      if (e->len == len && memcmp(out->mem + e->off, t, len) == 0) break;
    }
    if (table[s]) {
      out->v[table[s] - 1].count++;
      continue;
    }
    if (out->n == cap) {
      size_t nc = cap ? cap * 2 : 32;
      dd_term_t *nv = realloc(out->v, nc * sizeof *nv);
      if (!nv) goto oom;
      out->v = nv;
      cap = nc;
    }
    if (used + len + 1 > room) {
      size_t nr = room ? room * 2 : 1024;
      while (nr < used + len + 1) nr *= 2;
      char *nm = realloc(out->mem, nr);
      if (!nm) goto oom;
      out->mem = nm;
      room = nr;
    }
    dd_term_t *e = &out->v[out->n++];
    memcpy(out->mem + used, t, len + 1);
    e->off = (uint32_t)used;
    e->len = (uint8_t)len;
    e->count = 1;
    used += len + 1;
    table[s] = out->n;
  }
  free(table);
  for (size_t k = 0; k < out->n; k++) out->v[k].term = out->mem + out->v[k].off;
  if (sorted && out->n) qsort(out->v, out->n, sizeof *out->v, term_cmp);
  return 0;
oom:
  free(table);
  dd_terms_free(out);
  return -1;
}

int dd_terms(const char *p, size_t n, dd_terms_t *out) { return terms(p, n, out, 1); }

int dd_terms_any(const char *p, size_t n, dd_terms_t *out) { return terms(p, n, out, 0); }

void dd_terms_free(dd_terms_t *t) {
  free(t->v);
  free(t->mem);
  t->v = NULL;
  t->mem = NULL;
  t->n = 0;
}
