/* dedup_text.h — what the dedup plugin (apps/dedup/dedup.c) and the CLI's
 * dedup verbs (apps/cli/verb_dedup.c) must compute identically: a document's
 * content hash and its terms (the index's layout is dedup_index.h). The
 * file is compiled into both (the plugin does not link libpercolator); it
 * depends on libc and nettle only.
 *
 * The tokeniser's rule: bytes 'A'..'Z' are folded to 'a'..'z' (ASCII only;
 * other bytes are left alone); a term is a maximal run of [a-z0-9] after
 * folding; every other byte (punctuation, whitespace, bytes >= 0x80, NUL)
 * separates terms. A run longer than DD_MAX_TERM bytes yields its first
 * DD_MAX_TERM bytes as the term; the rest of the run is dropped. */
#ifndef PC_DEDUP_TEXT_H
#define PC_DEDUP_TEXT_H

#include <stddef.h>
#include <stdint.h>

#define DD_MAX_TERM 64
/* 64 hex digits of a SHA-256 digest, NUL-terminated. */
#define DD_HASH_HEX 65

/* The lower-case hex SHA-256 of p[0..n) into out. */
void dd_sha256_hex(const char *p, size_t n, char out[DD_HASH_HEX]);

/* The next term of p[0..n) at or after *pos: copies it (folded, at most
 * DD_MAX_TERM bytes, NUL-terminated) to out and returns its length, with *pos
 * past its run; 0 when no term is left. */
size_t dd_next_term(const char *p, size_t n, size_t *pos, char out[DD_MAX_TERM + 1]);

/* A document's distinct terms with their counts, sorted by term (bytewise). */
typedef struct dd_term {
  const char *term; /* NUL-terminated after len bytes; owned by the dd_terms_t */
  uint32_t off;     /* (where term is in the dd_terms_t's memory) */
  uint8_t len;
  uint64_t count;
} dd_term_t;

typedef struct dd_terms {
  dd_term_t *v;
  size_t n;
  char *mem; /* the terms' bytes */
} dd_terms_t;

/* Tokenises p[0..n) into *out (released with dd_terms_free). 0, or -1 when
 * out of memory. */
int dd_terms(const char *p, size_t n, dd_terms_t *out);
/* The same in no particular order (faster: nothing sorted). */
int dd_terms_any(const char *p, size_t n, dd_terms_t *out);
void dd_terms_free(dd_terms_t *t);

#endif
