/* dedup_read.h — how the CLI's dedup verbs (verb_dedup.c) read the inverted
 * index of the dedup application (apps/dedup/dedup_index.h): its postings,
 * term by term, bucket by bucket, each term's chunks applied in the order of
 * their runs. A whole read goes over ranges of buckets in several threads,
 * each with a transaction of its own at the caller's snapshot
 * (pc_txn_begin_alongside); what they produce is written in the order of the
 * buckets, so the output does not depend on the threads. Private to the CLI. */
#ifndef PC_CLI_DEDUP_READ_H
#define PC_CLI_DEDUP_READ_H

#include <percolator/percolator.h>
#include <stdio.h>

#include "apps/dedup/dedup_index.h"

/* One term's postings as its chunks leave them, in (URL, hash) order (in no
 * particular order for a sink that says any_order). The pointers are valid
 * during the call only. */
typedef struct ix_term {
  unsigned bucket; /* the term's bucket (dd_term_bucket) */
  const char *term;
  size_t tl;
  const dd_posting_t *v;
  size_t n;
} ix_term_t;

/* A cell of the index that is not well formed (a column that is no chunk's,
 * a value that does not parse, a chunk naming a directory its run lacks, a
 * term in another term's bucket, a row of idxbucket that is no bucket's).
 * bucket: the bucket in whose range of rows it lies (dd_term_bucket of the
 * row for table idx). The pointers are valid during the call only. */
typedef struct ix_bad {
  unsigned bucket;
  const char *table;
  const char *row, *col, *v;
  size_t rl, cl, vl;
} ix_bad_t;

/* What a read does with what it finds: term for each term of a bucket (in
 * term order within the bucket), bad for each malformed cell. Both are
 * called from the reading threads, each bucket within one thread and one
 * call at a time; out is the output of the bucket's range of buckets, which
 * the read writes to its FILE in the order of the ranges. A nonzero return
 * stops the read, which fails with PC_NOMEM. */
typedef struct ix_sink {
  int (*term)(void *ctx, dd_buf_t *out, const ix_term_t *t);
  int (*bad)(void *ctx, dd_buf_t *out, const ix_bad_t *b);
  void *ctx;
  int any_order; /* a term's postings may come in any order (cheaper) */
} ix_sink_t;

/* Reads the index at txn's snapshot: the buckets that sel selects (sel[b]
 * nonzero; NULL: every bucket), and, after them, the terms of those buckets
 * that only the older form (table idx) holds, in nthreads threads (at least
 * one: this one, with txn; the others read alongside it; a store that holds
 * the older form is read by one). Each range's output is written to out (NULL:
 * discarded). PC_OK, or the first failure: a read's (err from the store),
 * PC_NOMEM, or PC_IO_ERROR when writing out failed. */
pc_status_t ix_read(pc_txn_t *txn, const unsigned char *sel, int nthreads, const ix_sink_t *sink,
                    FILE *out, pc_error_t *err);

/* The postings of term t[0..tl) alone, at txn's snapshot, handed to sink
 * (out is a scratch buffer, discarded). */
pc_status_t ix_read_term(pc_txn_t *txn, const char *t, size_t tl, const ix_sink_t *sink,
                         pc_error_t *err);

/* The threads a whole read uses by default: the cores this process may run
 * on, at most 4. */
int ix_default_threads(void);

#endif
