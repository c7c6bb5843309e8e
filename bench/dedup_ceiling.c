/* dedup_ceiling.c — pc_bench_dedup_ceiling: how fast raw LevelDB takes the
 * dedup indexer's writes, with no transaction machinery and no read: a
 * reference for what this store and this disk allow the indexer.
 *
 * It reads a corpus as `percolator load` does (JSON lines {"url", "contents"},
 * bench/corpus.c writes them), hashes and tokenises each document with the
 * dedup plugin's own code (apps/dedup/dedup_text.c), and writes the cells the
 * indexer ends with, named as the plugin names them (apps/dedup/dedup.c):
 *   docs URL doc:contents, doc:hash;  dups HASH m:URL;
 *   for the first document of each hash (the cluster's canonical here):
 *   dups HASH canonical, indexed, terms, and one postings cell idx TERM
 *   p<8 bytes> per distinct term ("+URL\tHASH\tCOUNT"; in the store modes
 *   below, the plugin's bucket form instead: the terms' chunks in one cell
 *   idxbucket BUCKET p<8 bytes> per bucket, with the run's directory).
 * In the first two modes below each key is "table\0row\0column" and an
 * 8-byte timestamp, each value the cell's bytes. LevelDB is opened with the
 * store's options (bloom filter, 64 MiB write buffer, 8 MiB tables, no
 * compression: the store's default)
 * and every write is synced, as the store's are with sync on.
 *
 * Modes, one after the other, each on a fresh LevelDB, --threads writer
 * threads taking documents in turn. The first two write the cells as
 * PostgreSQL's rows hold them (a postings cell per term and document):
 *   one_write   a document's cells in one synced batch: the floor of any
 *               system that makes each document durable once;
 *   per_stage   the same cells in three synced batches, one per stage of the
 *               indexer (load: contents; dedup: hash, member, canonical;
 *               index: indexed, terms, postings): the floor of a system that
 *               commits each stage as its own transaction, as Percolator's
 *               observers do.
 * The store modes write the cells ours writes, in the keys ours writes
 * them with (core/keys.h), and no more: the floor of this store's format
 * for this corpus. Postings go in the bucket form of apps/dedup/index.c
 * (dedup_index.h), for a batch of --index-batch canonical documents (512,
 * the index observer's largest batch: the fewest cells ours can write): a
 * chunk per term naming the batch's directory, the chunks grouped by the
 * term's bucket (dd_term_bucket) in one idxbucket cell per bucket, and one
 * idxdir cell, the directory. Each cell is written once, as a meta key
 * holding its commit and value (a value over 4 KiB in a data key of its
 * own; a head has no commit record of its own until a newer commit replaces
 * it, which these cells never see); load notifies the document's contents,
 * dedup its cluster's canonical (and writes the rev cell that serialises a
 * cluster's runs), and each observer stage acks the cell it observed and
 * deletes its notification. Each stage commits as many documents at once
 * as ours can at most, so that no mode of ours makes fewer synced writes:
 * a writer takes --dedup-batch documents (512: the dedup observer's
 * batch_max), loads them in transactions of --load-batch (32: `percolator
 * load`'s largest), runs their dedup stage in one transaction (a cluster's
 * rev written once in it, as ours writes it once a batch) and their index
 * stages --index-batch canonicals at a time.
 *   store_keys  every stage committed in one phase, as the embedded store
 *               commits (local_commit_one_phase): one synced batch;
 *   store_keys_two_phase  every stage in two, as a transaction across
 *               tablets (local_prewrite, then local_commit): first a synced
 *               batch of locks (the meta key holding a lock with the value
 *               and the primary's name; the lock index is in memory), then
 *               the synced batch above;
 *   store_keys_cluster  (with --split ROW) two LevelDBs, one a tablet, split
 *               at ROW as bench/dedup.sh's cluster is: a stage whose rows
 *               all sit on one tablet commits there in one phase, any other
 *               in two on both (prewrites, then the primary's tablet's
 *               commit, then the other's).
 *   store_keys_replicated  (with --split ROW and --replicas N, N > 1) the
 *               cluster above with each tablet in N copies, as a Raft group
 *               of N applies every write: each of the cluster's synced
 *               writes becomes, on each of N servers, a synced write of one
 *               key holding as many bytes (the entry in that server's log,
 *               a LevelDB of its own) and the batch itself written unsynced
 *               to that server's copy of the tablet (a replica applies
 *               without syncing: the log is the durable record). No message,
 *               no term, no index: the floor of N copies.
 * No read, no latch, no oracle, no network, no observer: what is left of
 * ours beyond these is the cost of everything else. bench/dedup.sh runs it
 * on the same corpus file as ours and divides ours by it.
 *
 * Usage: pc_bench_dedup_ceiling --jsonl FILE [--threads N] [--dir PARENT] [--split ROW]
 *                               [--load-batch N] [--dedup-batch N] [--index-batch N]
 *                               [--replicas N]
 * Prints one JSON document. */
#include <getopt.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/dedup/dedup_index.h"
#include "apps/dedup/dedup_text.h"
#include "benchutil.h"
#include "core/db.h"
#include "core/keys.h"

#define WHO "pc_bench_dedup_ceiling"

typedef struct doc {
  char *url, *contents;
  size_t ulen, clen;
} doc_t;

typedef struct corpus {
  doc_t *v;
  size_t n, cap;
} corpus_t;

static int read_corpus(const char *path, corpus_t *c) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  size_t lineno = 0;
  int rc = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    lineno++;
    json_error_t je;
    json_t *o = json_loadb(line, (size_t)len, 0, &je);
    const char *url = NULL, *contents = NULL;
    size_t ulen = 0, clen = 0;
    if (!o || json_unpack(o, "{s:s%, s:s%}", "url", &url, &ulen, "contents", &contents,
                          &clen) != 0) {
      fprintf(stderr, WHO ": %s:%zu: not a {\"url\", \"contents\"} line\n", path, lineno);
      json_decref(o);
      rc = -1;
      break;
    }
    if (c->n == c->cap) {
      c->cap = c->cap ? c->cap * 2 : 1024;
      c->v = realloc(c->v, c->cap * sizeof *c->v);
      if (!c->v) abort();
    }
    doc_t *d = &c->v[c->n++];
    d->url = malloc(ulen + 1);
    d->contents = malloc(clen + 1);
    if (!d->url || !d->contents) abort();
    memcpy(d->url, url, ulen + 1);
    memcpy(d->contents, contents, clen + 1);
    d->ulen = ulen;
    d->clen = clen;
    json_decref(o);
  }
  free(line);
  fclose(f);
  return rc;
}

/* ---- the cells ---------------------------------------------------------------- */

/* Appends the cell (table, row, column) = value to b, with timestamp ts. */
static void put(leveldb_writebatch_t *b, const char *table, const char *row, size_t rlen,
                const char *col, size_t clen, const char *val, size_t vlen, uint64_t ts,
                uint64_t *bytes) {
  size_t tl = strlen(table), kl = tl + 1 + rlen + 1 + clen + 8;
  char stack[512], *k = kl <= sizeof stack ? stack : malloc(kl);
  if (!k) abort();
  memcpy(k, table, tl);
  k[tl] = 0;
  memcpy(k + tl + 1, row, rlen);
  k[tl + 1 + rlen] = 0;
  memcpy(k + tl + 2 + rlen, col, clen);
  for (int i = 0; i < 8; i++) k[kl - 8 + i] = (char)(ts >> (56 - 8 * i));
  leveldb_writebatch_put(b, k, kl, val, vlen);
  *bytes += kl + vlen;
  if (k != stack) free(k);
}

/* Where a writer thread puts its keys: per tablet (two when the run has a
 * split row, as bench/dedup.sh's cluster has; one otherwise), the batch of
 * the stage under way and, when the stage commits in two phases, the batch
 * of its prewrite, written first; the primary is the stage's first cell,
 * which every lock names. */
typedef struct sink {
  leveldb_writebatch_t *pre[2], *b[2];
  const char *split; /* NULL: one tablet */
  size_t split_len;
  int two_phase;
  int used[2]; /* the tablets the stage writes */
  pc_cell_t primary;
  int has_primary;
  uint64_t bytes, keys;
  char *zero; /* STORE_REPLICATED: zcap zero bytes, a log entry's value */
  size_t zcap;
} sink_t;

/* The tablet holding row: the second when row sorts at or after the split. */
static int tablet_of(const sink_t *k, const char *row, size_t rlen) {
  return k->split && pc_bytes_cmp(row, rlen, k->split, k->split_len) >= 0;
}

static void sink_put(sink_t *k, leveldb_writebatch_t *b, const pc_buf_t *key, const char *val,
                     size_t vlen) {
  leveldb_writebatch_put(b, key->p, key->len, val, vlen);
  k->bytes += key->len + vlen;
  k->keys++;
}

/* The same cell written as the store writes a first version of it
 * (core/store_txn.c): a value over PC_INLINE_MAX in a data key; in one
 * phase (local_commit_one_phase) the meta key with the commit and an inline
 * value, which is the head's only record; in two (local_prewrite, then
 * local_commit) first the meta key with a lock holding the value and the
 * primary's name, then the meta key with the commit (the lock index is in
 * memory: no key). */
static void put_store(sink_t *k, const char *table, const char *row, size_t rlen,
                      const char *col, size_t clen, const char *val, size_t vlen, uint64_t ts) {
  pc_cell_t c = {table, row, rlen, col, clen};
  if (!k->has_primary) {
    k->primary = c;
    k->has_primary = 1;
  }
  int inl = vlen <= PC_INLINE_MAX, t = tablet_of(k, row, rlen);
  leveldb_writebatch_t *pre = k->pre[t], *b = k->b[t];
  k->used[t] = 1;
  uint64_t commit_ts = ts + 0x100;
  pc_buf_t kb = {0}, vb = {0}, mk = {0};
  if (pc_key_cell(&mk, PC_KS_META, &c) != 0) abort();
  if (!inl) {
    if (pc_key_cell_ts(&kb, PC_KS_DATA, &c, ts) != 0) abort();
    sink_put(k, k->two_phase ? pre : b, &kb, val, vlen);
  }
  if (k->two_phase) {
    pc_meta_t m = {.has_lock = 1, .latest_any = 0};
    pc_lock_info_t *l = &m.lock;
    l->start_ts = ts;
    l->kind = PC_WRITE_PUT;
    l->ttl_ms = 10000;
    l->has_inline = inl;
    if (pc_buf_append(&l->ptable, k->primary.table, strlen(k->primary.table)) ||
        pc_buf_append(&l->prow, k->primary.row, k->primary.rlen) ||
        pc_buf_append(&l->pcol, k->primary.col, k->primary.clen) ||
        (inl && pc_buf_append(&l->value, val, vlen)) || pc_meta_encode(&m, &vb) != 0)
      abort();
    sink_put(k, pre, &mk, vb.p, vb.len);
    pc_lock_info_free(l);
    vb.len = 0;
  }
  pc_write_rec_t w = {PC_WRITE_PUT, ts, commit_ts, inl ? PC_VALUE_INLINE : PC_VALUE_IN_DATA,
                      inl ? val : NULL, inl ? vlen : 0, 1}; /* the cell's first put */
  pc_meta_t m = {.has_head = 1, .head = w, .latest_any = commit_ts};
  if (pc_meta_encode(&m, &vb) != 0) abort();
  sink_put(k, b, &mk, vb.p, vb.len); /* the head's commit record lives there only */
  pc_buf_free(&kb);
  pc_buf_free(&vb);
  pc_buf_free(&mk);
}

/* The notification of cell (table, row, col) at ts: written (put 1) or
 * deleted (put 0), as a commit that changes an observed column writes it
 * and the observer's commit deletes it. */
static void notify_key(sink_t *k, const char *table, const char *row, size_t rlen,
                       const char *col, size_t clen, uint64_t ts, int put) {
  pc_cell_t c = {table, row, rlen, col, clen};
  pc_buf_t kb = {0};
  if (pc_key_notify(&kb, &c, ts) != 0) abort();
  const char v = PC_NOTIFY_STRONG;
  int t = tablet_of(k, row, rlen);
  leveldb_writebatch_t *b = k->b[t];
  k->used[t] = 1;
  if (put) {
    sink_put(k, b, &kb, &v, 1);
  } else {
    leveldb_writebatch_delete(b, kb.p, kb.len);
    k->keys++;
  }
  pc_buf_free(&kb);
}

/* An observer's commit on cell (table, row, col), notified at nts: its ack
 * cell (an ordinary cell of the row, value the notification's timestamp) and
 * the deletion of the notification. */
static void ack(sink_t *k, const char *observer, const char *table, const char *row, size_t rlen,
                const char *col, size_t clen, uint64_t nts, uint64_t ts) {
  pc_buf_t ac = {0};
  if (pc_ack_column(&ac, observer, col, clen) != 0) abort();
  char v[8];
  for (int i = 0; i < 8; i++) v[i] = (char)(nts >> (56 - 8 * i));
  put_store(k, table, row, rlen, ac.p, ac.len, v, sizeof v, ts);
  notify_key(k, table, row, rlen, col, clen, nts + 0x100, 0);
  pc_buf_free(&ac);
}

typedef struct seen { /* the hashes met so far: the first document of each is canonical */
  pthread_mutex_t mu;
  char **v;
  size_t cap, n;
} seen_t;

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* 1 when hash is new (and records it), 0 when seen before. */
static int first_of(seen_t *s, const char *hash) {
  pthread_mutex_lock(&s->mu);
  size_t i = fnv(hash) & (s->cap - 1);
  for (; s->v[i]; i = (i + 1) & (s->cap - 1))
    if (strcmp(s->v[i], hash) == 0) {
      pthread_mutex_unlock(&s->mu);
      return 0;
    }
  s->v[i] = strdup(hash);
  if (!s->v[i]) abort();
  s->n++;
  pthread_mutex_unlock(&s->mu);
  return 1;
}

/* CELLS: the cells alone; the store's keys in one phase, in two, or as in
 * a cluster of two tablets split at --split: a stage whose cells all sit
 * on one tablet in one phase there, any other in two on both. */
typedef enum { CELLS, STORE_ONE_PHASE, STORE_TWO_PHASE, STORE_CLUSTER, STORE_REPLICATED } shape_t;

#define MAX_REPLICAS 7

/* The store modes' transactions, at most what ours puts in one: documents
 * a load takes (percolator load's BATCH_DOCS, 32), documents a dedup run
 * takes (the dedup observer's batch_max, 512 by default) and canonicals an
 * index run takes (512). */
typedef struct batches {
  size_t load, dedup, index;
} batches_t;

typedef struct run {
  leveldb_t *db[2]; /* db[1] only for STORE_CLUSTER */
  /* STORE_REPLICATED: server i's copy of tablet t and its log */
  leveldb_t *copy[2][MAX_REPLICAS], *log[MAX_REPLICAS];
  int replicas;
  leveldb_writeoptions_t *wo_nosync;
  atomic_uint_fast64_t entry; /* the log entries' keys */
  const char *split;
  leveldb_writeoptions_t *wo;
  const corpus_t *c;
  seen_t *seen;
  int per_stage;
  shape_t shape;
  size_t load_batch, dedup_batch, index_batch; /* the store modes' batches (batches_t) */
  atomic_size_t next;
  atomic_uint_fast64_t keys, bytes, writes;
  atomic_int failed;
} run_t;

typedef struct writer {
  run_t *r;
  pthread_t tid;
} writer_t;

static void add_put(void *st, const char *k, size_t kl, const char *v, size_t vl) {
  (void)k;
  (void)v;
  *(uint64_t *)st += kl + vl;
}

static void add_del(void *st, const char *k, size_t kl) {
  (void)k;
  *(uint64_t *)st += kl;
}

/* STORE_REPLICATED: b, a write of tablet t, on each of the group's servers:
 * an entry of as many bytes in its log (synced), then b in its copy. */
static void write_replicated(run_t *r, sink_t *k, int t, leveldb_writebatch_t *b, char **e) {
  uint64_t len = 0;
  leveldb_writebatch_iterate(b, &len, add_put, add_del);
  if (len > k->zcap) {
    free(k->zero);
    if (!(k->zero = calloc(1, (size_t)len))) abort();
    k->zcap = (size_t)len;
  }
  char key[8];
  uint64_t id = atomic_fetch_add(&r->entry, 1);
  for (int i = 0; i < 8; i++) key[i] = (char)(id >> (56 - 8 * i));
  for (int i = 0; i < r->replicas && !*e; i++) {
    leveldb_put(r->log[i], r->wo, key, sizeof key, k->zero, (size_t)len, e);
    if (!*e) leveldb_write(r->copy[t][i], r->wo_nosync, b, e);
  }
}

static void write_batch(run_t *r, sink_t *k, int t, leveldb_writebatch_t *b, uint64_t *writes) {
  char *e = NULL;
  if (r->shape == STORE_REPLICATED) write_replicated(r, k, t, b, &e);
  else leveldb_write(r->db[t], r->wo, b, &e);
  if (e) {
    fprintf(stderr, WHO ": LevelDB write: %s\n", e);
    leveldb_free(e);
    atomic_store(&r->failed, 1);
  }
  leveldb_writebatch_clear(b);
  (*writes)++;
}

/* Ends a stage: its prewrites first when it has them, then its commits,
 * the primary's tablet first. */
static void flush(run_t *r, sink_t *k, uint64_t *writes) {
  int first = k->has_primary ? tablet_of(k, k->primary.row, k->primary.rlen) : 0;
  for (int t = 0; t < 2; t++)
    if (k->two_phase && k->used[t]) write_batch(r, k, t, k->pre[t], writes);
  for (int i = 0; i < 2; i++) {
    int t = i ? !first : first;
    if (k->used[t]) write_batch(r, k, t, k->b[t], writes);
    k->used[t] = 0;
  }
  k->has_primary = 0;
}

/* Sets how the next stage commits: by the run's shape, or in a cluster by
 * whether rows[0..n) sit on more than one tablet. */
static void stage(const run_t *r, sink_t *k, const char *const *rows, const size_t *lens,
                  size_t n) {
  k->two_phase = r->shape == STORE_TWO_PHASE;
  if (r->shape != STORE_CLUSTER && r->shape != STORE_REPLICATED) return;
  for (size_t i = 1; i < n; i++)
    if (tablet_of(k, rows[i], lens[i]) != tablet_of(k, rows[0], lens[0])) k->two_phase = 1;
}

/* One cell, in the run's shape: the cell alone, or the store's keys for it. */
static void cell(const run_t *r, sink_t *k, const char *table, const char *row, size_t rlen,
                 const char *col, size_t clen, const char *val, size_t vlen, uint64_t ts) {
  if (r->shape != CELLS) {
    put_store(k, table, row, rlen, col, clen, val, vlen, ts);
  } else {
    put(k->b[0], table, row, rlen, col, clen, val, vlen, ts, &k->bytes);
    k->used[0] = 1;
    k->keys++;
  }
}

/* A canonical document waiting for its index stage. */
typedef struct pending {
  const doc_t *d;
  char hash[DD_HASH_HEX];
  dd_terms_t t;
  uint64_t ts;
} pending_t;

/* One term of one pending document, for grouping a batch's postings. */
typedef struct posting_ref {
  const char *term;
  size_t len;
  size_t doc; /* in the batch */
  uint64_t count;
  unsigned bucket; /* the term's, in the store modes; else 0 */
} posting_ref_t;

static int posting_cmp(const void *a, const void *b) {
  const posting_ref_t *x = a, *y = b;
  int c = pc_bytes_cmp(x->term, x->len, y->term, y->len);
  return c ? c : (x->doc > y->doc) - (x->doc < y->doc);
}

/* The store modes' order: by bucket, then as posting_cmp. */
static int posting_bucket_cmp(const void *a, const void *b) {
  const posting_ref_t *x = a, *y = b;
  if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
  return posting_cmp(a, b);
}

/* The writer thread's scratch for index stages. */
typedef struct index_buf {
  const char **rows;
  size_t *lens, rows_cap, lens_cap;
  posting_ref_t *refs;
  size_t refs_cap;
  char *text, *chunk;
  size_t text_cap, chunk_cap;
  dd_buf_t dchunk, dir; /* the store modes' chunk and the run's directory */
  dd_buf_t bcell;       /* and the cell of the bucket under way */
  uint64_t *dref;       /* each document's pair in it */
  size_t dref_cap;
  char brow[DD_BUCKETS][DD_BUCKET_ROW]; /* the buckets' rows */
} index_buf_t;

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return p;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *q = realloc(p, n * size);
  if (!q) abort();
  *cap = n;
  return q;
}

/* The index stage of batch p[0..n) of canonical documents, in one
 * transaction: each document's indexed and terms cells (and, in the store
 * modes, its ack), and the postings. In the first two modes, per distinct
 * term one postings cell holding the entry ("+URL\tHASH\tCOUNT\n") of every
 * document of the batch that has it; with n 1 that is one postings cell per
 * term and document. In the store modes, as apps/dedup/index.c writes a run
 * over many clusters: per distinct term a chunk naming the run's directory,
 * the chunks in one idxbucket cell per bucket, and the directory's cell. */
static void index_stage(const run_t *r, sink_t *k, pending_t *p, size_t n, index_buf_t *ib) {
  int direct = r->shape != CELLS;
  size_t nrefs = 0, nrows = 0;
  for (size_t i = 0; i < n; i++) nrefs += p[i].t.n;
  ib->refs = grow(ib->refs, &ib->refs_cap, nrefs + 1, sizeof *ib->refs);
  ib->rows = grow(ib->rows, &ib->rows_cap, nrefs + n + 1, sizeof *ib->rows);
  ib->lens = grow(ib->lens, &ib->lens_cap, nrefs + n + 1, sizeof *ib->lens);
  nrefs = 0;
  for (size_t i = 0; i < n; i++) {
    ib->rows[nrows] = p[i].hash;
    ib->lens[nrows++] = 64;
    for (size_t j = 0; j < p[i].t.n; j++) {
      const dd_term_t *t = &p[i].t.v[j];
      unsigned bucket = direct ? dd_term_bucket(t->term, t->len) : 0;
      ib->refs[nrefs++] = (posting_ref_t){t->term, t->len, i, t->count, bucket};
    }
  }
  qsort(ib->refs, nrefs, sizeof *ib->refs, direct ? posting_bucket_cmp : posting_cmp);
  uint64_t ts = p[0].ts + 2;
  char col[DD_CHUNK_COL], drow[DD_DIR_ROW];
  dd_chunk_col(col, ts);
  dd_dir_row(drow, ts);
  /* the rows of the postings, for where the stage commits: a term's, or in
   * the store modes each bucket's once and the directory's */
  for (size_t a = 0; a < nrefs; a++) {
    const posting_ref_t *f = &ib->refs[a];
    if (!direct) {
      ib->rows[nrows] = f->term;
      ib->lens[nrows++] = f->len;
    } else if (a == 0 || f->bucket != f[-1].bucket) {
      dd_bucket_row(ib->brow[f->bucket], f->bucket);
      ib->rows[nrows] = ib->brow[f->bucket];
      ib->lens[nrows++] = DD_BUCKET_ROW;
    }
  }
  if (direct && nrefs) {
    ib->rows[nrows] = drow;
    ib->lens[nrows++] = sizeof drow;
  }
  stage(r, k, ib->rows, ib->lens, nrows);
  for (size_t i = 0; i < n; i++) {
    const dd_terms_t *t = &p[i].t;
    size_t tl = 1;
    for (size_t j = 0; j < t->n; j++) tl += t->v[j].len + 1u;
    ib->text = grow(ib->text, &ib->text_cap, tl, 1);
    size_t at = 0;
    for (size_t j = 0; j < t->n; j++) {
      memcpy(ib->text + at, t->v[j].term, t->v[j].len);
      at += t->v[j].len;
      ib->text[at++] = '\n';
    }
    cell(r, k, "dups", p[i].hash, 64, "indexed", 7, p[i].d->url, p[i].d->ulen, ts);
    cell(r, k, "dups", p[i].hash, 64, "terms", 5, ib->text, at, ts);
  }
  /* the store modes write chunks as apps/dedup/index.c does: entries that
   * name the run's directory, which holds each document's (hash, URL) */
  uint64_t ndir = 0;
  ib->dir.n = 0;
  ib->bcell.n = 0;
  ib->dref = grow(ib->dref, &ib->dref_cap, n, sizeof *ib->dref);
  for (size_t i = 0; direct && i < n; i++) {
    uint8_t raw[DD_HASH_RAW];
    if (dd_hash_raw(p[i].hash, 64, raw) != 0 ||
        dd_dir_add(&ib->dir, &ndir, raw, p[i].d->url, p[i].d->ulen, &ib->dref[i]) != 0)
      abort();
  }
  for (size_t a = 0, b; a < nrefs; a = b) {
    size_t at = 0;
    ib->dchunk.n = 0;
    for (b = a; b < nrefs && ib->refs[b].len == ib->refs[a].len &&
                memcmp(ib->refs[b].term, ib->refs[a].term, ib->refs[a].len) == 0;
         b++) {
      const pending_t *q = &p[ib->refs[b].doc];
      if (direct) {
        if (dd_chunk_add(&ib->dchunk, '+', ib->dref[ib->refs[b].doc], ib->refs[b].count) != 0)
          abort();
        continue;
      }
      ib->chunk = grow(ib->chunk, &ib->chunk_cap, at + q->d->ulen + 100, 1);
      at += (size_t)snprintf(ib->chunk + at, ib->chunk_cap - at, "+%s\t%s\t%llu\n", q->d->url,
                             q->hash, (unsigned long long)ib->refs[b].count);
    }
    if (!direct) {
      cell(r, k, "idx", ib->refs[a].term, ib->refs[a].len, col, sizeof col, ib->chunk, at, ts);
      continue;
    }
    /* the term's chunk into its bucket's cell, written after the bucket's
     * last term */
    unsigned bucket = ib->refs[a].bucket;
    if (dd_bucket_add(&ib->bcell, ib->refs[a].term, ib->refs[a].len, ib->dchunk.p,
                      ib->dchunk.n) != 0)
      abort();
    if (b == nrefs || ib->refs[b].bucket != bucket) {
      cell(r, k, DD_IDXBUCKET, ib->brow[bucket], DD_BUCKET_ROW, col, sizeof col, ib->bcell.p,
           ib->bcell.n, ts);
      ib->bcell.n = 0;
    }
  }
  if (direct && nrefs)
    cell(r, k, DD_IDXDIR, drow, sizeof drow, DD_DIR_COL, strlen(DD_DIR_COL), ib->dir.p, ib->dir.n,
         ts);
  if (r->shape != CELLS)
    for (size_t i = 0; i < n; i++)
      ack(k, "dedup.index", "dups", p[i].hash, 64, "canonical", 9, p[i].ts + 1, ts);
}

static void *writer_main(void *arg) {
  writer_t *w = arg;
  run_t *r = w->r;
  sink_t k = {.split = r->shape == STORE_CLUSTER || r->shape == STORE_REPLICATED ? r->split : NULL,
              .split_len = r->split ? strlen(r->split) : 0};
  for (int t = 0; t < 2; t++) {
    k.pre[t] = leveldb_writebatch_create();
    k.b[t] = leveldb_writebatch_create();
  }
  int store = r->shape != CELLS;
  /* the first two modes take one document at a time through every stage;
   * the store modes take a chunk of --dedup-batch documents, load them in
   * transactions of --load-batch, run the dedup stage over the chunk in one,
   * and index --index-batch canonicals at once, as ours does at most */
  size_t chunk = store ? r->dedup_batch : 1, lchunk = store ? r->load_batch : 1;
  size_t batch = store ? r->index_batch : 1, np = 0;
  pending_t *p = calloc(batch, sizeof *p);
  char(*hash)[DD_HASH_HEX] = calloc(chunk, sizeof *hash);
  int *canonical = calloc(chunk, sizeof *canonical);
  const char **rows = calloc(2 * chunk, sizeof *rows);
  size_t *lens = calloc(2 * chunk, sizeof *lens);
  index_buf_t ib = {0};
  if (!p || !hash || !canonical || !rows || !lens) abort();
  uint64_t writes = 0;
  size_t i0;
  while ((i0 = atomic_fetch_add(&r->next, chunk)) < r->c->n && !atomic_load(&r->failed)) {
    const doc_t *d = &r->c->v[i0];
    size_t n = r->c->n - i0 < chunk ? r->c->n - i0 : chunk;
    for (size_t j = 0; j < n; j++) dd_sha256_hex(d[j].contents, d[j].clen, hash[j]);
    /* load */
    for (size_t a = 0; a < n; a += lchunk) {
      size_t e = n - a < lchunk ? n : a + lchunk;
      for (size_t j = a; j < e; j++) {
        rows[j - a] = d[j].url;
        lens[j - a] = d[j].ulen;
      }
      stage(r, &k, rows, lens, e - a);
      for (size_t j = a; j < e; j++) {
        uint64_t ts = (uint64_t)(i0 + j + 1) << 18;
        cell(r, &k, "docs", d[j].url, d[j].ulen, "doc:contents", 12, d[j].contents, d[j].clen,
             ts);
        if (store) notify_key(&k, "docs", d[j].url, d[j].ulen, "doc:contents", 12, ts + 0x100, 1);
      }
      if (r->per_stage) flush(r, &k, &writes);
    }
    /* dedup */
    for (size_t j = 0; j < n; j++) {
      rows[2 * j] = d[j].url;
      lens[2 * j] = d[j].ulen;
      rows[2 * j + 1] = hash[j];
      lens[2 * j + 1] = 64;
    }
    stage(r, &k, rows, lens, 2 * n);
    for (size_t j = 0; j < n; j++) {
      uint64_t ts = (uint64_t)(i0 + j + 1) << 18;
      char member[2 + 4096];
      size_t ml = d[j].ulen < 4096 ? d[j].ulen : 4096;
      memcpy(member, "m:", 2);
      memcpy(member + 2, d[j].url, ml);
      cell(r, &k, "docs", d[j].url, d[j].ulen, "doc:hash", 8, hash[j], 64, ts + 1);
      cell(r, &k, "dups", hash[j], 64, member, 2 + ml, "1", 1, ts + 1);
      canonical[j] = first_of(r->seen, hash[j]);
      if (canonical[j])
        cell(r, &k, "dups", hash[j], 64, "canonical", 9, d[j].url, d[j].ulen, ts + 1);
      if (!store) continue;
      /* a cluster's rev once a transaction, however many of its members
       * the chunk holds */
      size_t before = 0;
      while (before < j && strcmp(hash[before], hash[j]) != 0) before++;
      if (before == j) {
        char rev[8];
        for (int b = 0; b < 8; b++) rev[b] = (char)((ts + 1) >> (56 - 8 * b));
        cell(r, &k, "dups", hash[j], 64, "rev", 3, rev, sizeof rev, ts + 1);
      }
      if (canonical[j]) notify_key(&k, "dups", hash[j], 64, "canonical", 9, ts + 1 + 0x100, 1);
      ack(&k, "dedup", "docs", d[j].url, d[j].ulen, "doc:contents", 12, ts, ts + 1);
    }
    if (r->per_stage) flush(r, &k, &writes);
    /* index: the canonicals' terms */
    for (size_t j = 0; j < n; j++) {
      if (canonical[j]) {
        pending_t *q = &p[np++];
        q->d = &d[j];
        memcpy(q->hash, hash[j], DD_HASH_HEX);
        q->ts = (uint64_t)(i0 + j + 1) << 18;
        if (dd_terms(d[j].contents, d[j].clen, &q->t) != 0) abort();
      }
      if (np == batch || (np && !r->per_stage)) {
        index_stage(r, &k, p, np, &ib);
        for (size_t m = 0; m < np; m++) dd_terms_free(&p[m].t);
        np = 0;
        flush(r, &k, &writes);
      }
    }
    flush(r, &k, &writes);
  }
  if (np) {
    index_stage(r, &k, p, np, &ib);
    for (size_t j = 0; j < np; j++) dd_terms_free(&p[j].t);
    flush(r, &k, &writes);
  }
  atomic_fetch_add(&r->keys, k.keys);
  atomic_fetch_add(&r->bytes, k.bytes);
  atomic_fetch_add(&r->writes, writes);
  free(p);
  free(hash);
  free(canonical);
  free(rows);
  free(lens);
  free(ib.rows);
  free(ib.lens);
  free(ib.refs);
  free(ib.text);
  free(ib.chunk);
  free(ib.dref);
  dd_buf_free(&ib.dchunk);
  dd_buf_free(&ib.dir);
  dd_buf_free(&ib.bcell);
  for (int t = 0; t < 2; t++) {
    leveldb_writebatch_destroy(k.pre[t]);
    leveldb_writebatch_destroy(k.b[t]);
  }
  free(k.zero);
  return NULL;
}

static leveldb_t *open_db(const leveldb_options_t *o, const char *path) {
  char *e = NULL;
  leveldb_t *db = leveldb_open(o, path, &e);
  if (e) {
    fprintf(stderr, WHO ": LevelDB %s: %s\n", path, e);
    leveldb_free(e);
    return NULL;
  }
  return db;
}

/* One mode on a fresh LevelDB under parent (two, a tablet each, for
 * STORE_CLUSTER, split at split; for STORE_REPLICATED replicas copies of
 * each and a log per server); its figures go into out. */
static int run_mode(const corpus_t *c, int threads, int per_stage, shape_t shape,
                    const char *split, batches_t batches, int replicas, const char *parent,
                    json_t *out) {
  char dir[4096], sub[4200];
  if (bu_make_temp_dir(dir, sizeof dir, parent, "dedup-ceiling", WHO) != 0) return -1;
  leveldb_options_t *o = leveldb_options_create();
  leveldb_filterpolicy_t *fp = leveldb_filterpolicy_create_bloom(10);
  leveldb_cache_t *cache = leveldb_cache_create_lru(32u << 20);
  leveldb_options_set_create_if_missing(o, 1);
  leveldb_options_set_filter_policy(o, fp);
  leveldb_options_set_cache(o, cache);
  leveldb_options_set_write_buffer_size(o, 64u << 20);
  leveldb_options_set_max_file_size(o, 8u << 20);
  leveldb_options_set_compression(o, leveldb_no_compression);
  leveldb_t *db[2] = {NULL, NULL}, *copy[2][MAX_REPLICAS] = {{NULL}}, *log[MAX_REPLICAS] = {NULL};
  int ndb = shape == STORE_CLUSTER ? 2 : shape == STORE_REPLICATED ? 0 : 1, rc = 0;
  int nrep = shape == STORE_REPLICATED ? replicas : 0;
  for (int t = 0; t < ndb && rc == 0; t++) {
    snprintf(sub, sizeof sub, "%s/t%d", dir, t + 1);
    if (!(db[t] = open_db(o, sub))) rc = -1;
  }
  for (int i = 0; i < nrep && rc == 0; i++) {
    snprintf(sub, sizeof sub, "%s/log-s%d", dir, i + 1);
    if (!(log[i] = open_db(o, sub))) rc = -1;
    for (int t = 0; t < 2 && rc == 0; t++) {
      snprintf(sub, sizeof sub, "%s/t%d-s%d", dir, t + 1, i + 1);
      if (!(copy[t][i] = open_db(o, sub))) rc = -1;
    }
  }
  if (rc == 0) {
    seen_t seen = {.cap = 1};
    while (seen.cap < 2 * c->n + 2) seen.cap *= 2;
    seen.v = calloc(seen.cap, sizeof *seen.v);
    if (!seen.v) abort();
    pthread_mutex_init(&seen.mu, NULL);
    run_t r = {.db = {db[0], db[1]}, .split = split, .wo = leveldb_writeoptions_create(),
               .wo_nosync = leveldb_writeoptions_create(), .replicas = nrep,
               .c = c, .seen = &seen, .per_stage = per_stage, .shape = shape,
               .load_batch = batches.load, .dedup_batch = batches.dedup,
               .index_batch = batches.index};
    memcpy(r.copy, copy, sizeof copy);
    memcpy(r.log, log, sizeof log);
    leveldb_writeoptions_set_sync(r.wo, 1);
    writer_t *w = calloc((size_t)threads, sizeof *w);
    if (!w) abort();
    for (int i = 0; i < threads; i++) w[i].r = &r;
    bu_meter_t m0, dm;
    bu_meter_start(&m0);
    double t0 = bu_now_s();
    int started = bu_start_threads(w, threads, sizeof *w, offsetof(writer_t, tid), writer_main);
    bu_join_threads(w, started, sizeof *w, offsetof(writer_t, tid));
    double secs = bu_now_s() - t0;
    bu_meter_read(&m0, &dm);
    if (started < threads || atomic_load(&r.failed)) rc = -1;
    json_object_set_new(out, "documents_s", json_real((double)c->n / secs));
    json_object_set_new(out, "seconds", json_real(secs));
    json_object_set_new(out, "clusters", json_integer((json_int_t)seen.n));
    json_object_set_new(out, "synced_writes", json_integer((json_int_t)atomic_load(&r.writes)));
    json_object_set_new(out, "keys", json_integer((json_int_t)atomic_load(&r.keys)));
    json_object_set_new(out, "bytes", json_integer((json_int_t)atomic_load(&r.bytes)));
    json_object_set_new(out, "cpu_s", json_real(dm.cpu_s));
    free(w);
    leveldb_writeoptions_destroy(r.wo);
    leveldb_writeoptions_destroy(r.wo_nosync);
    for (size_t i = 0; i < seen.cap; i++) free(seen.v[i]);
    free(seen.v);
    pthread_mutex_destroy(&seen.mu);
  }
  for (int t = 0; t < ndb; t++)
    if (db[t]) leveldb_close(db[t]);
  for (int i = 0; i < nrep; i++) {
    if (log[i]) leveldb_close(log[i]);
    for (int t = 0; t < 2; t++)
      if (copy[t][i]) leveldb_close(copy[t][i]);
  }
  leveldb_options_destroy(o);
  leveldb_cache_destroy(cache);
  leveldb_filterpolicy_destroy(fp);
  bu_remove_tree(dir);
  return rc;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"jsonl", required_argument, NULL, 'j'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"dir", required_argument, NULL, 'd'},
                                       {"split", required_argument, NULL, 's'},
                                       {"index-batch", required_argument, NULL, 'b'},
                                       {"load-batch", required_argument, NULL, 'l'},
                                       {"dedup-batch", required_argument, NULL, 'u'},
                                       {"replicas", required_argument, NULL, 'r'},
                                       {NULL, 0, NULL, 0}};
  const char *jsonl = NULL, *parent = "/tmp", *split = NULL;
  uint64_t threads = 16, index_batch = 512, load_batch = 32, dedup_batch = 512, replicas = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
      case 'j': jsonl = optarg; break;
      case 't':
        if (bu_parse_u64(optarg, 1, 256, &threads) != 0) {
          bu_bad_value(WHO, "--threads", optarg);
          return 2;
        }
        break;
      case 'd': parent = optarg; break;
      case 's': split = optarg; break;
      case 'b':
        if (bu_parse_u64(optarg, 1, 4096, &index_batch) != 0) {
          bu_bad_value(WHO, "--index-batch", optarg);
          return 2;
        }
        break;
      case 'l':
        if (bu_parse_u64(optarg, 1, 4096, &load_batch) != 0) {
          bu_bad_value(WHO, "--load-batch", optarg);
          return 2;
        }
        break;
      case 'u':
        if (bu_parse_u64(optarg, 1, 4096, &dedup_batch) != 0) {
          bu_bad_value(WHO, "--dedup-batch", optarg);
          return 2;
        }
        break;
      case 'r':
        if (bu_parse_u64(optarg, 1, MAX_REPLICAS, &replicas) != 0) {
          bu_bad_value(WHO, "--replicas", optarg);
          return 2;
        }
        break;
      default:
        fprintf(stderr,
                "usage: " WHO " --jsonl FILE [--threads N] [--dir PARENT] [--split ROW] "
                "[--load-batch N] [--dedup-batch N] [--index-batch N] [--replicas N]\n");
        return 2;
    }
  }
  if (bu_no_operands(WHO, argc, argv, optind) != 0) return 2;
  if (!jsonl) {
    fprintf(stderr, WHO ": --jsonl FILE is required\n");
    return 2;
  }
  corpus_t c = {0};
  json_t *doc = json_object();
  bu_json_head(doc, "dedup_ceiling");
  json_object_set_new(doc, "loadavg_at_start", bu_json_loadavg());
  json_object_set_new(doc, "cpus_online", bu_json_cpus_online());
  json_object_set_new(doc, "corpus", json_string(jsonl));
  json_object_set_new(doc, "threads", json_integer((json_int_t)threads));
  json_object_set_new(doc, "load_batch", json_integer((json_int_t)load_batch));
  json_object_set_new(doc, "dedup_batch", json_integer((json_int_t)dedup_batch));
  json_object_set_new(doc, "index_batch", json_integer((json_int_t)index_batch));
  int rc = read_corpus(jsonl, &c);
  json_object_set_new(doc, "documents", json_integer((json_int_t)c.n));
  if (rc == 0 && c.n) {
    json_t *one = json_object(), *stage = json_object(), *store = json_object(),
           *store2 = json_object(), *cl = json_object(), *rp = json_object();
    int n = (int)threads;
    batches_t b = {(size_t)load_batch, (size_t)dedup_batch, (size_t)index_batch};
    batches_t one_doc = {1, 1, 1};
    int nr = (int)replicas;
    rc = run_mode(&c, n, 0, CELLS, NULL, one_doc, 1, parent, one);
    if (rc == 0) rc = run_mode(&c, n, 1, CELLS, NULL, one_doc, 1, parent, stage);
    if (rc == 0) rc = run_mode(&c, n, 1, STORE_ONE_PHASE, NULL, b, 1, parent, store);
    if (rc == 0) rc = run_mode(&c, n, 1, STORE_TWO_PHASE, NULL, b, 1, parent, store2);
    if (rc == 0 && split) rc = run_mode(&c, n, 1, STORE_CLUSTER, split, b, 1, parent, cl);
    if (rc == 0 && split && nr > 1)
      rc = run_mode(&c, n, 1, STORE_REPLICATED, split, b, nr, parent, rp);
    json_object_set_new(doc, "one_write", one);
    json_object_set_new(doc, "per_stage", stage);
    json_object_set_new(doc, "store_keys", store);
    json_object_set_new(doc, "store_keys_two_phase", store2);
    if (split) {
      json_object_set_new(cl, "split", json_string(split));
      json_object_set_new(doc, "store_keys_cluster", cl);
    } else {
      json_decref(cl);
    }
    if (split && nr > 1) {
      json_object_set_new(rp, "replicas", json_integer(nr));
      json_object_set_new(doc, "store_keys_replicated", rp);
    } else {
      json_decref(rp);
    }
  } else if (rc == 0) {
    fprintf(stderr, WHO ": %s holds no document\n", jsonl);
    rc = -1;
  }
  for (size_t i = 0; i < c.n; i++) {
    free(c.v[i].url);
    free(c.v[i].contents);
  }
  free(c.v);
  return bu_json_finish(doc, rc ? 1 : 0);
}
