/* dedup_index.h — the inverted index of the dedup application as the plugin
 * (apps/dedup/dedup.c) writes it and the CLI's search and check
 * (apps/cli/verb_dedup.c) read it. Compiled into both; libc only.
 *
 * Each index run (one transaction, over one or many clusters) holds, for
 * each term it touches, a chunk: the byte DD_CHUNK_DIRECTORY, then entries,
 * each: u8 op ('+' the posting is set, '-' it is removed), the varint index
 * of a (hash, URL) pair in the run's directory, and for '+' the varint count
 * of the term in that document. It writes them in table idxbucket, grouped
 * by the term's bucket (dd_term_bucket), at most one cell a bucket:
 *   row     the bucket, 2 bytes big-endian (DD_BUCKETS of them);
 *   column  DD_CHUNK_PREFIX then the run's start_ts, 8 bytes big-endian
 *           (so a row's cells sort in the order of their runs);
 *   value   the byte DD_CHUNK_BUCKET, then sections, each: u8 length and
 *           bytes of a term (1..DD_MAX_TERM, each term once a cell), varint
 *           length and bytes of the term's chunk.
 * and one cell in table idxdir, the run's directory:
 *   row     the run's start_ts, 8 bytes big-endian; column DD_DIR_COL;
 *   value   pairs, each: a cluster's SHA-256 (32 bytes), varint length and
 *           bytes of a URL — each (hash, URL) the run's chunks name, once.
 * A run names about 180 terms per document: one cell per term would be
 * thousands of cells a run, most of them for a term only one of its
 * documents has, and each entry would repeat the 32-byte hash and the URL
 * without the directory (see docs/ARCHITECTURE.md, "The dedup index").
 *
 * Older forms, which readers still take: a chunk in table idx, row the
 * term's bytes, column as above, one cell per term a run (written before
 * buckets); and a chunk without directory, whose first byte is an op and
 * whose entries hold the pair (op, hash, varint URL length, URL, count for
 * '+'; written before directories).
 *
 * A posting is (term, URL, cluster hash). The postings of a term at a
 * snapshot are its chunks, from its bucket's cells and its idx row, applied
 * in the order of their runs: for each (URL, hash) the last entry wins, and
 * a '-' removes it. Why the order of the runs is the order of the changes,
 * and what a reader at any snapshot sees, is argued in docs/ARCHITECTURE.md
 * ("The dedup index"). */
#ifndef PC_DEDUP_INDEX_H
#define PC_DEDUP_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "dedup_text.h"

#define DD_CHUNK_PREFIX 'p'
#define DD_CHUNK_COL 9 /* bytes of a chunk's column */
#define DD_HASH_RAW 32
#define DD_CHUNK_DIRECTORY 0x01 /* first byte of a chunk that names its run's directory */
#define DD_IDXDIR "idxdir"      /* the table of the runs' directories */
#define DD_DIR_COL "d"
#define DD_DIR_ROW 8 /* bytes of a directory's row: the run's start_ts */
#define DD_IDXBUCKET "idxbucket" /* the table of the runs' chunks, by bucket */
#define DD_BUCKETS 1024u
#define DD_BUCKET_ROW 2       /* bytes of a bucket's row */
#define DD_CHUNK_BUCKET 0x02 /* first byte of a bucket's cell */

/* The column of the chunk of the run that started at id. */
void dd_chunk_col(char out[DD_CHUNK_COL], uint64_t id);
/* 0 with *id set when col is a chunk's column, else -1. */
int dd_chunk_id(const char *col, size_t clen, uint64_t *id);

/* The row of the directory of the run that started at id. */
void dd_dir_row(char out[DD_DIR_ROW], uint64_t id);

/* The bucket of term t[0..len): FNV-1a (64 bits) of its bytes modulo
 * DD_BUCKETS. Part of the stored format: it never changes. */
unsigned dd_term_bucket(const char *t, size_t len);
/* The row of bucket b; and back: 0 with *b set when row is a bucket's, else
 * -1. */
void dd_bucket_row(char out[DD_BUCKET_ROW], unsigned b);
int dd_bucket_of_row(const char *row, size_t rl, unsigned *b);

/* The 32 bytes of a lower-case hex SHA-256 (64 digits): 0, or -1 when hex is
 * not one. And back, NUL-terminated. */
int dd_hash_raw(const char *hex, size_t hl, uint8_t out[DD_HASH_RAW]);
void dd_hash_hex(const uint8_t raw[DD_HASH_RAW], char out[DD_HASH_HEX]);

/* A growable byte buffer. */
typedef struct dd_buf {
  char *p;
  size_t n, cap;
} dd_buf_t;
/* 0, or -1 when out of memory. */
int dd_buf_put(dd_buf_t *b, const void *p, size_t n);
void dd_buf_free(dd_buf_t *b);

/* Appends the section of term t[0..tl) (1..DD_MAX_TERM bytes) with its
 * chunk c[0..cn) to a bucket's cell (the DD_CHUNK_BUCKET byte first when
 * the cell is empty). 0, or -1 when out of memory or t is no term. */
int dd_bucket_add(dd_buf_t *cell, const char *t, size_t tl, const char *c, size_t cn);
/* The section of bucket cell p[0..n) at *pos (0 at the start), *pos moved
 * past it: 1 with *t, *tl (the term) and *c, *cn (its chunk, pointing into
 * p) set, 0 at the end, or -1 when the cell is malformed. */
int dd_bucket_next(const char *p, size_t n, size_t *pos, const char **t, size_t *tl,
                   const char **c, size_t *cn);

/* Appends the pair (hash, url) to a run's directory being written, whose
 * pairs number *n; *ref is set to the pair's index and *n grows by one. 0,
 * or -1 when out of memory. */
int dd_dir_add(dd_buf_t *dir, uint64_t *n, const uint8_t hash[DD_HASH_RAW], const char *url,
               size_t ulen, uint64_t *ref);

/* Appends an entry to a chunk (the DD_CHUNK_DIRECTORY byte first when the
 * chunk is empty): op '+' (with count) or '-', of the pair ref of the run's
 * directory. 0, or -1 when out of memory (or op is neither). */
int dd_chunk_add(dd_buf_t *chunk, char op, uint64_t ref, uint64_t count);

/* Appends an entry in the form of chunks written before directories (the
 * pair in the entry), which readers still take: op '+' (with count) or
 * '-'. 0, or -1 when out of memory (or op is neither). */
int dd_chunk_add_inline(dd_buf_t *chunk, char op, const uint8_t hash[DD_HASH_RAW],
                        const char *url, size_t ulen, uint64_t count);

/* One pair of a directory; the pointers point into the directory's value. */
typedef struct dd_pair {
  const uint8_t *hash;
  const char *url;
  size_t ulen;
} dd_pair_t;

/* A run's directory as read: its pairs, pointing into the value it was
 * parsed from, which the caller keeps alive. */
typedef struct dd_dir {
  dd_pair_t *v;
  size_t n, cap;
} dd_dir_t;

/* Parses the directory value p[0..n) into d (emptied first): 0, -1 when it
 * is malformed, -2 when out of memory. */
int dd_dir_parse(dd_dir_t *d, const char *p, size_t n);
void dd_dir_free(dd_dir_t *d);

/* 1 when chunk p[0..n) names its run's directory (the reader needs it to
 * apply the chunk), else 0. */
int dd_chunk_uses_dir(const char *p, size_t n);

/* One entry of a chunk; the pointers point into the chunk or its directory. */
typedef struct dd_entry {
  char op;
  const uint8_t *hash;
  const char *url;
  size_t ulen;
  uint64_t count; /* 0 for '-' */
} dd_entry_t;

/* The entry of chunk p[0..n) at *pos (0 at the start), *pos moved past it:
 * 1, or 0 at the end, or -1 when the chunk is malformed or names a pair its
 * run's directory dir (NULL: none) does not have. */
int dd_chunk_next(const char *p, size_t n, const dd_dir_t *dir, size_t *pos, dd_entry_t *e);

/* A posting as a term's chunks leave it. url and hash point into the chunk
 * it came from or into that chunk's directory. */
typedef struct dd_posting {
  const char *url;
  size_t ulen;
  const uint8_t *hash;
  uint64_t count;
  uint64_t seq; /* (the order of the entry it came from) */
  uint64_t key; /* (the hash's first 8 bytes, for dd_postings_settle_any) */
  char op;
} dd_posting_t;

/* The postings of one term, built from its chunks in column order. */
typedef struct dd_postings {
  dd_posting_t *v;
  size_t n, cap;
  uint64_t seq;
} dd_postings_t;

/* Applies a chunk (the next in column order) with its run's directory
 * (NULL when it has none). 0, -1 when it is malformed (or needs a
 * directory that dir is not), -2 when out of memory. The postings point
 * into the chunk and into the value dir was parsed from: the caller keeps
 * both alive and unchanged until ps is cleared. */
int dd_postings_apply(dd_postings_t *ps, const char *chunk, size_t n, const dd_dir_t *dir);
/* Settles what the chunks applied so far leave: the postings, in (URL,
 * hash) order. 0, or -2 when out of memory. */
int dd_postings_settle(dd_postings_t *ps);
/* The same, the postings in no particular order (faster: they are ordered
 * by their hashes, compared as integers first, and not by URL). */
int dd_postings_settle_any(dd_postings_t *ps);
/* Empties ps for the next term (keeping its memory). */
void dd_postings_clear(dd_postings_t *ps);
void dd_postings_free(dd_postings_t *ps);

#endif
