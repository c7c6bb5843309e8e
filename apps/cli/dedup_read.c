/* dedup_read.c — reading the dedup index for the CLI (dedup_read.h).
 *
 * A read goes bucket by bucket: the cells of a bucket's row of idxbucket
 * (one a run that touched the bucket), their sections taken as pieces (a
 * term's chunk of one run), sorted by term and run, and each term's chunks
 * applied in that order (dd_postings_apply) with their runs' directories.
 * A bucket's directories are fetched together, one pc_txn_get_many for
 * those not cached yet, and kept in a cache keyed by the run (bounded in
 * bytes: past the bound, those the bucket at hand does not use are
 * dropped), since nearly every run writes in nearly every bucket. The
 * memory a read holds is a bucket's cells, the cache, and the output of
 * the ranges written out of order (a few).
 *
 * A whole read (ix_read) cuts the selected buckets into ranges of
 * RANGE_BUCKETS consecutive buckets; each thread takes the next range,
 * scans its rows of idxbucket at once (rows that are no bucket's, which
 * sort among them, are reported as malformed in the range they fall in),
 * and hands its output over; the output goes out in the order of the
 * ranges. An index that still holds the older form (table idx, a row per
 * term) is read by one thread, as before buckets: each term of a bucket
 * with its idx row's chunks, then the terms only idx holds. */
#include "dedup_read.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/db.h"

#define IDX "idx"
#define RANGE_BUCKETS 8    /* buckets a thread takes at a time */
#define WINDOW 8           /* ranges read ahead of the one to write next */
#define DIR_BATCH 64       /* directories in one pc_txn_get_many */
#define DIR_CACHE_BYTES (64u << 20)

/* ---- the directories of runs, cached ------------------------------------------------ */

typedef struct dent {
  uint64_t id;
  uint64_t gen; /* the last bucket that needed it */
  int used;     /* 0: an empty slot */
  int fetched;  /* read (rc says how), else to be read */
  int rc;       /* 0: dir holds it; -1: the run has none, or it is malformed */
  char *value;  /* the cell's value (pc_free), which dir points into */
  size_t vlen;
  dd_dir_t dir;
} dent_t;

typedef struct dcache {
  dent_t *slot;
  size_t cap, n, bytes;
} dcache_t;

static size_t dslot(uint64_t id, size_t cap) {
  return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static void dent_release(dent_t *e) {
  pc_free(e->value);
  dd_dir_free(&e->dir);
}

static void dcache_free(dcache_t *c) {
  for (size_t i = 0; i < c->cap; i++)
    if (c->slot[i].used) dent_release(&c->slot[i]);
  free(c->slot);
  memset(c, 0, sizeof *c);
}

/* Moves the entries that keep (gen) into a table of cap slots; the others
 * are released. 0, or -1 when out of memory (nothing changed). */
static int dcache_rebuild(dcache_t *c, size_t cap, int keep_all, uint64_t gen) {
  dent_t *ns = calloc(cap, sizeof *ns);
  if (!ns) return -1;
  size_t n = 0, bytes = 0;
  for (size_t i = 0; i < c->cap; i++) {
    dent_t *e = &c->slot[i];
    if (!e->used) continue;
    if (!keep_all && e->gen != gen) {
      dent_release(e);
      continue;
    }
    size_t s = dslot(e->id, cap);
    while (ns[s].used) s = (s + 1) & (cap - 1);
    ns[s] = *e;
    n++;
    bytes += e->vlen + e->dir.n * sizeof(dd_pair_t);
  }
  free(c->slot);
  c->slot = ns;
  c->cap = cap;
  c->n = n;
  c->bytes = bytes;
  return 0;
}

/* The entry of run id (a new one, not fetched, when it had none), marked as
 * needed by gen; NULL when out of memory. */
static dent_t *dcache_get(dcache_t *c, uint64_t id, uint64_t gen) {
  if ((c->n + 1) * 2 > c->cap && dcache_rebuild(c, c->cap ? c->cap * 2 : 512, 1, gen) != 0)
    return NULL;
  size_t s = dslot(id, c->cap);
  for (; c->slot[s].used; s = (s + 1) & (c->cap - 1))
    if (c->slot[s].id == id) {
      c->slot[s].gen = gen;
      return &c->slot[s];
    }
  dent_t *e = &c->slot[s];
  *e = (dent_t){.id = id, .gen = gen, .used = 1};
  c->n++;
  return e;
}

static dent_t *dcache_find(const dcache_t *c, uint64_t id) {
  if (!c->cap) return NULL;
  for (size_t s = dslot(id, c->cap); c->slot[s].used; s = (s + 1) & (c->cap - 1))
    if (c->slot[s].id == id) return &c->slot[s];
  return NULL;
}

/* ---- one reading thread ------------------------------------------------------------ */

/* A cell as read, its bytes in the thread's arena (offsets: the arena grows). */
typedef struct icell {
  const char *table;
  size_t row, rl, col, cl, v, vl;
  uint64_t id;
  int reported; /* handed to bad already (or its column is no chunk's) */
} icell_t;

/* One term's chunk of one run: offsets into the arena. */
typedef struct piece {
  size_t term, tl;
  uint64_t id;
  size_t p, n;
  size_t cell;
} piece_t;

typedef struct ix_state ix_state_t;

typedef struct rd {
  ix_state_t *r;
  const ix_sink_t *sink;
  pc_txn_t *txn;
  pc_error_t err;
  int stop, oom, failed; /* failed: a read failed, err says why */
  dcache_t dc;
  uint64_t gen;
  dd_buf_t arena;
  icell_t *cells;
  size_t ncells, capcells;
  piece_t *pieces;
  size_t npieces, cappieces;
  dd_postings_t ps;
  dd_buf_t *out;
  const char *only; /* ix_read_term: the one term taken from a bucket's cells */
  size_t only_len;
} rd_t;

static void rd_free(rd_t *t) {
  dcache_free(&t->dc);
  dd_buf_free(&t->arena);
  free(t->cells);
  free(t->pieces);
  dd_postings_free(&t->ps);
}

static void cells_clear(rd_t *t) {
  t->ncells = t->npieces = 0;
  t->arena.n = 0;
}

static const char *at(const rd_t *t, size_t off) { return t->arena.p + off; }

static void report(rd_t *t, unsigned bucket, const char *table, const char *row, size_t rl,
                   const char *col, size_t cl, const char *v, size_t vl) {
  if (!t->sink->bad || t->stop) return;
  ix_bad_t b = {bucket, table, row, col, v, rl, cl, vl};
  if (t->sink->bad(t->sink->ctx, t->out, &b)) t->oom = t->stop = 1;
}

/* Reports cell i as malformed, once. */
static void cell_bad(rd_t *t, size_t i, unsigned bucket) {
  icell_t *c = &t->cells[i];
  if (c->reported) return;
  c->reported = 1;
  report(t, bucket, c->table, at(t, c->row), c->rl, at(t, c->col), c->cl, at(t, c->v), c->vl);
}

/* Copies the cell at sc into t->cells; one whose column is no chunk's is
 * reported (bucket). 0, or -1 (t->stop set). */
static int cell_take(rd_t *t, const char *table, pc_scan_t *sc, unsigned bucket) {
  if (t->ncells == t->capcells) {
    size_t nc = t->capcells ? t->capcells * 2 : 256;
    icell_t *nv = realloc(t->cells, nc * sizeof *nv);
    if (!nv) {
      t->oom = t->stop = 1;
      return -1;
    }
    t->cells = nv;
    t->capcells = nc;
  }
  size_t l1, l2, l3;
  const char *r = pc_scan_row(sc, &l1), *c = pc_scan_column(sc, &l2), *v = pc_scan_value(sc, &l3);
  icell_t *ic = &t->cells[t->ncells];
  *ic = (icell_t){table, t->arena.n, l1, t->arena.n + l1, l2, t->arena.n + l1 + l2, l3, 0, 0};
  if (dd_buf_put(&t->arena, r, l1) || dd_buf_put(&t->arena, c, l2) ||
      dd_buf_put(&t->arena, v, l3)) {
    t->oom = t->stop = 1;
    return -1;
  }
  t->ncells++;
  if (dd_chunk_id(c, l2, &ic->id) != 0) cell_bad(t, t->ncells - 1, bucket);
  return t->stop ? -1 : 0;
}

/* Reads the cells of row `row` of table into t->cells. 0, or -1 (t->stop set). */
static int cells_read(rd_t *t, const char *table, const char *row, size_t rl, unsigned bucket) {
  pc_scan_t *sc = pc_txn_scan_row(t->txn, table, row, rl, NULL, 0, &t->err);
  if (!sc) {
    t->failed = t->stop = 1;
    return -1;
  }
  pc_status_t st = PC_NOT_FOUND;
  while (!t->stop && (st = pc_scan_next(sc, &t->err)) == PC_OK) cell_take(t, table, sc, bucket);
  if (!t->stop && st != PC_NOT_FOUND) t->failed = t->stop = 1;
  pc_scan_destroy(sc);
  return t->stop ? -1 : 0;
}

static int piece_add(rd_t *t, size_t term, size_t tl, uint64_t id, size_t p, size_t n,
                     size_t cell) {
  if (t->npieces == t->cappieces) {
    size_t nc = t->cappieces ? t->cappieces * 2 : 1024;
    piece_t *nv = realloc(t->pieces, nc * sizeof *nv);
    if (!nv) {
      t->oom = t->stop = 1;
      return -1;
    }
    t->pieces = nv;
    t->cappieces = nc;
  }
  t->pieces[t->npieces++] = (piece_t){term, tl, id, p, n, cell};
  return 0;
}

/* The sections of the bucket cells t->cells[from..] as pieces (those of
 * t->only, when set); a cell that does not parse, or that holds a term of
 * another bucket, is reported and none of its sections taken. */
static void bucket_pieces(rd_t *t, size_t from, unsigned b) {
  for (size_t i = from; i < t->ncells && !t->stop; i++) {
    const icell_t *c = &t->cells[i];
    if (c->reported) continue; /* no chunk's column */
    const char *v = at(t, c->v);
    size_t pos = 0, mark = t->npieces, sl, cn;
    const char *s, *ch;
    int rc;
    while ((rc = dd_bucket_next(v, c->vl, &pos, &s, &sl, &ch, &cn)) == 1) {
      if (dd_term_bucket(s, sl) != b) {
        rc = -1;
        break;
      }
      if (t->only && (sl != t->only_len || memcmp(s, t->only, sl) != 0)) continue;
      if (piece_add(t, (size_t)(s - t->arena.p), sl, c->id, (size_t)(ch - t->arena.p), cn, i))
        return;
    }
    if (rc < 0) {
      t->npieces = mark;
      cell_bad(t, i, b);
    }
  }
}

static int piece_cmp(const void *a, const void *b, void *arena) {
  const piece_t *x = a, *y = b;
  const char *sort_base = arena;
  size_t m = x->tl < y->tl ? x->tl : y->tl;
  int r = memcmp(sort_base + x->term, sort_base + y->term, m);
  if (r) return r;
  if (x->tl != y->tl) return x->tl < y->tl ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Reads the directories the pieces name that the cache lacks, DIR_BATCH in
 * one pc_txn_get_many; then drops, past the cache's bound, those this
 * bucket does not use. 0, or -1 (t->stop set). */
static int dirs_fetch(rd_t *t) {
  uint64_t *ids = NULL;
  size_t nids = 0, cap = 0;
  for (size_t i = 0; i < t->npieces; i++) {
    const piece_t *pc = &t->pieces[i];
    if (!dd_chunk_uses_dir(at(t, pc->p), pc->n)) continue;
    dent_t *e = dcache_get(&t->dc, pc->id, t->gen);
    if (!e) goto oom;
    if (e->fetched || e->rc == 1) continue;
    e->rc = 1; /* listed */
    if (nids == cap) {
      cap = cap ? cap * 2 : 64;
      uint64_t *nv = realloc(ids, cap * sizeof *nv);
      if (!nv) goto oom;
      ids = nv;
    }
    ids[nids++] = pc->id;
  }
  for (size_t a = 0; a < nids && !t->stop; a += DIR_BATCH) {
    size_t n = nids - a < DIR_BATCH ? nids - a : DIR_BATCH;
    char rows[DIR_BATCH][DD_DIR_ROW];
    pc_cell_ref_t refs[DIR_BATCH];
    pc_value_t vals[DIR_BATCH];
    for (size_t k = 0; k < n; k++) {
      dd_dir_row(rows[k], ids[a + k]);
      refs[k] = (pc_cell_ref_t){DD_IDXDIR, rows[k], DD_DIR_ROW, DD_DIR_COL, strlen(DD_DIR_COL)};
    }
    if (pc_txn_get_many(t->txn, refs, n, vals, &t->err) != PC_OK) {
      t->failed = t->stop = 1;
      break;
    }
    for (size_t k = 0; k < n; k++) {
      dent_t *e = dcache_find(&t->dc, ids[a + k]); /* listed above, so present */
      e->fetched = 1;
      e->value = vals[k].value;
      e->vlen = vals[k].vlen;
      e->rc = -1;
      if (!e->value) continue; /* no directory: the chunks that name it are malformed */
      int rc = dd_dir_parse(&e->dir, e->value, e->vlen);
      if (rc == -2) {
        t->oom = t->stop = 1;
      } else if (rc == 0) {
        e->rc = 0;
        t->dc.bytes += e->vlen + e->dir.n * sizeof(dd_pair_t);
      }
    }
  }
  free(ids);
  if (!t->stop && t->dc.bytes > DIR_CACHE_BYTES &&
      dcache_rebuild(&t->dc, t->dc.cap, 0, t->gen) != 0)
    t->oom = t->stop = 1;
  return t->stop ? -1 : 0;
oom:
  free(ids);
  t->oom = t->stop = 1;
  return -1;
}

/* Applies the pieces [a, b) of one term, in the order of their runs, and
 * hands the postings they leave to the sink. */
static void term_apply(rd_t *t, size_t a, size_t b, unsigned bucket) {
  dd_postings_clear(&t->ps);
  for (size_t i = a; i < b && !t->stop; i++) {
    const piece_t *pc = &t->pieces[i];
    const char *p = at(t, pc->p);
    const dd_dir_t *dir = NULL;
    int rc = 0;
    if (dd_chunk_uses_dir(p, pc->n)) {
      const dent_t *e = dcache_find(&t->dc, pc->id);
      if (!e || !e->fetched || e->rc != 0) rc = -1;
      else dir = &e->dir;
    }
    if (rc == 0) rc = dd_postings_apply(&t->ps, p, pc->n, dir);
    if (rc == -2) t->oom = t->stop = 1;
    else if (rc == -1) cell_bad(t, pc->cell, bucket);
  }
  if (t->stop) return;
  if ((t->sink->any_order ? dd_postings_settle_any(&t->ps) : dd_postings_settle(&t->ps)) != 0) {
    t->oom = t->stop = 1;
    return;
  }
  if (!t->ps.n) return;
  ix_term_t it = {bucket, at(t, t->pieces[a].term), t->pieces[a].tl, t->ps.v, t->ps.n};
  if (t->sink->term(t->sink->ctx, t->out, &it)) t->oom = t->stop = 1;
}

/* The pieces' terms in order, each applied. */
static void terms_apply(rd_t *t, unsigned bucket, int by_term) {
  if (t->stop) return;
  if (t->npieces > 1) qsort_r(t->pieces, t->npieces, sizeof *t->pieces, piece_cmp, t->arena.p);
  if (dirs_fetch(t) != 0) return;
  for (size_t a = 0, b; a < t->npieces && !t->stop; a = b) {
    const piece_t *x = &t->pieces[a];
    for (b = a + 1; b < t->npieces && t->pieces[b].tl == x->tl &&
                    memcmp(at(t, t->pieces[b].term), at(t, x->term), x->tl) == 0;
         b++) {
    }
    term_apply(t, a, b, by_term ? dd_term_bucket(at(t, x->term), x->tl) : bucket);
  }
}

/* ---- the older form ---------------------------------------------------------------- */

/* A set of terms (those found in buckets), for the terms only idx holds. */
typedef struct term_set {
  char **slot; /* a term's bytes (len[i] of them), NULL: an empty slot */
  size_t *len;
  size_t cap, n;
} term_set_t;

static uint64_t set_hash(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h;
}

/* Adds term (add) or asks for it: 1 when it is in the set, 0 when not (or
 * added), -1 when out of memory. */
static int term_set_op(term_set_t *s, const char *p, size_t n, int add) {
  if (add && (s->n + 1) * 2 > s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 4096;
    char **ns = calloc(nc, sizeof *ns);
    size_t *nl = calloc(nc, sizeof *nl);
    if (!ns || !nl) {
      free(ns);
      free(nl);
      return -1;
    }
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->slot[i]) continue;
      size_t j = set_hash(s->slot[i], s->len[i]) & (nc - 1);
      while (ns[j]) j = (j + 1) & (nc - 1);
      ns[j] = s->slot[i];
      nl[j] = s->len[i];
    }
    free(s->slot);
    free(s->len);
    s->slot = ns;
    s->len = nl;
    s->cap = nc;
  }
  if (!s->cap) return 0;
  size_t j = set_hash(p, n) & (s->cap - 1);
  for (; s->slot[j]; j = (j + 1) & (s->cap - 1))
    if (s->len[j] == n && memcmp(s->slot[j], p, n) == 0) return 1;
  if (!add) return 0;
  if (!(s->slot[j] = malloc(n ? n : 1))) return -1;
  memcpy(s->slot[j], p, n);
  s->len[j] = n;
  s->n++;
  return 0;
}

static void term_set_free(term_set_t *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->slot[i]);
  free(s->slot);
  free(s->len);
  memset(s, 0, sizeof *s);
}

/* The chunks of the older form (table idx) of term (arena offset, length),
 * as pieces. */
static void old_pieces(rd_t *t, size_t term, size_t tl, unsigned bucket) {
  size_t from = t->ncells;
  char row[PC_MAX_ROW];
  memcpy(row, at(t, term), tl); /* the arena may move while the row's cells come in */
  if (cells_read(t, IDX, row, tl, bucket) != 0) return;
  for (size_t i = from; i < t->ncells; i++)
    if (!t->cells[i].reported &&
        piece_add(t, t->cells[i].row, t->cells[i].rl, t->cells[i].id, t->cells[i].v,
                  t->cells[i].vl, i) != 0)
      return;
}

/* Whether table idx holds any cell: 1, 0, or -1 when the read failed. */
static int has_old_form(pc_txn_t *txn, pc_error_t *err) {
  pc_scan_t *sc = pc_txn_scan(txn, IDX, NULL, 0, NULL, 0, err);
  if (!sc) return -1;
  pc_status_t st = pc_scan_next(sc, err);
  pc_scan_destroy(sc);
  if (st == PC_NOT_FOUND) *err = (pc_error_t){0};
  return st == PC_OK ? 1 : st == PC_NOT_FOUND ? 0 : -1;
}

/* ---- a whole read ------------------------------------------------------------------ */

typedef struct range {
  unsigned lo, hi; /* buckets [lo, hi); lo == hi: the terms only idx holds */
} range_t;

struct ix_state {
  const unsigned char *sel;
  const ix_sink_t *sink;
  FILE *out;
  int old; /* the older form is present: one thread reads everything */
  range_t *ranges;
  size_t nranges;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t next, written; /* ranges taken, ranges written */
  dd_buf_t *done;       /* a range's output, waiting for its turn */
  unsigned char *ready;
  int solo_taken;
  term_set_t seen; /* old: the terms of the buckets */
  int failed;      /* the first failure, in st and err */
  pc_status_t st;
  pc_error_t err;
};

static void fail_with(ix_state_t *r, pc_status_t st, const pc_error_t *err, const char *text) {
  pthread_mutex_lock(&r->mu);
  if (!r->failed) {
    r->failed = 1;
    r->st = st;
    if (err) r->err = *err;
    else snprintf(r->err.text, sizeof r->err.text, "%s", text);
    r->err.code = st;
  }
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* The thread's failure, if it stopped, into the read's. */
static void rd_settle(rd_t *t) {
  if (!t->stop) return;
  if (t->failed) fail_with(t->r, t->err.code ? t->err.code : PC_IO_ERROR, &t->err, NULL);
  else fail_with(t->r, PC_NOMEM, NULL, "out of memory");
}

/* Hands over range k's output and writes every range now due. */
static void deliver(ix_state_t *r, size_t k, dd_buf_t *out) {
  pthread_mutex_lock(&r->mu);
  r->done[k] = *out;
  *out = (dd_buf_t){0};
  r->ready[k] = 1;
  while (r->written < r->nranges && r->ready[r->written]) {
    dd_buf_t *b = &r->done[r->written];
    if (r->out && !r->failed && b->n && fwrite(b->p, 1, b->n, r->out) != b->n) {
      r->failed = 1;
      r->st = PC_IO_ERROR;
      snprintf(r->err.text, sizeof r->err.text, "cannot write the answer");
      r->err.code = PC_IO_ERROR;
    }
    dd_buf_free(b);
    r->written++;
  }
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* The row of bucket b's range in which row r[0..rl) falls: the bucket of
 * the last bucket row at or before it. */
static unsigned range_bucket(const char *row, size_t rl) {
  long v = rl >= 2 ? (long)((unsigned char)row[0] << 8 | (unsigned char)row[1])
                   : rl == 1 ? (long)((unsigned char)row[0] << 8) - 1 : 0;
  if (v < 0) v = 0;
  if (v >= (long)DD_BUCKETS) v = DD_BUCKETS - 1;
  return (unsigned)v;
}

/* A bucket's cells read: its terms, each with its chunks of the older form
 * when there is one. */
static void bucket_done(rd_t *t, unsigned b) {
  t->gen++;
  t->npieces = 0;
  bucket_pieces(t, 0, b);
  ix_state_t *r = t->r;
  for (size_t i = 0, nb = t->npieces; r->old && i < nb && !t->stop; i++) {
    int s = term_set_op(&r->seen, at(t, t->pieces[i].term), t->pieces[i].tl, 1);
    if (s < 0) t->oom = t->stop = 1;
    if (s == 0 && !t->stop) old_pieces(t, t->pieces[i].term, t->pieces[i].tl, b); /* once a term */
  }
  terms_apply(t, b, 0);
}

/* The rows of buckets [g->lo, g->hi) of idxbucket. */
static void range_read(rd_t *t, const range_t *g) {
  char lo[DD_BUCKET_ROW], hi[DD_BUCKET_ROW];
  dd_bucket_row(lo, g->lo);
  dd_bucket_row(hi, g->hi < DD_BUCKETS ? g->hi : 0);
  pc_scan_t *sc = pc_txn_scan(t->txn, DD_IDXBUCKET, g->lo ? lo : NULL, g->lo ? sizeof lo : 0,
                              g->hi < DD_BUCKETS ? hi : NULL, sizeof hi, &t->err);
  if (!sc) {
    t->failed = t->stop = 1;
    return;
  }
  cells_clear(t);
  unsigned cur = 0;
  pc_status_t st = PC_NOT_FOUND;
  while (!t->stop && (st = pc_scan_next(sc, &t->err)) == PC_OK) {
    size_t rl;
    const char *row = pc_scan_row(sc, &rl);
    unsigned b;
    int valid = dd_bucket_of_row(row, rl, &b) == 0;
    if (t->ncells && (!valid || b != cur)) {
      bucket_done(t, cur);
      cells_clear(t);
      if (t->stop) break;
    }
    if (valid) {
      cur = b;
      cell_take(t, DD_IDXBUCKET, sc, b);
    } else {
      size_t cl, vl;
      const char *col = pc_scan_column(sc, &cl), *v = pc_scan_value(sc, &vl);
      report(t, range_bucket(row, rl), DD_IDXBUCKET, row, rl, col, cl, v, vl);
    }
  }
  if (!t->stop && st != PC_NOT_FOUND) t->failed = t->stop = 1;
  if (!t->stop && t->ncells) bucket_done(t, cur);
  cells_clear(t);
  pc_scan_destroy(sc);
}

/* The terms only the older form holds (the buckets' terms are in r->seen). */
static void old_only_read(rd_t *t) {
  ix_state_t *r = t->r;
  pc_scan_t *sc = pc_txn_scan(t->txn, IDX, NULL, 0, NULL, 0, &t->err);
  if (!sc) {
    t->failed = t->stop = 1;
    return;
  }
  cells_clear(t);
  pc_status_t st = PC_NOT_FOUND;
  char skip[PC_MAX_ROW]; /* the row of a term a bucket had, or one not selected */
  size_t skl = 0;
  int skipping = 0;
  while (!t->stop && (st = pc_scan_next(sc, &t->err)) == PC_OK) {
    size_t rl;
    const char *row = pc_scan_row(sc, &rl);
    if (skipping && rl == skl && memcmp(row, skip, rl) == 0) continue;
    skipping = 0;
    if (t->ncells && (t->cells[0].rl != rl || memcmp(at(t, t->cells[0].row), row, rl) != 0)) {
      terms_apply(t, 0, 1);
      cells_clear(t);
      if (t->stop) break;
    }
    unsigned b = dd_term_bucket(row, rl);
    if (!t->ncells && ((r->sel && !r->sel[b]) || term_set_op(&r->seen, row, rl, 0) == 1)) {
      memcpy(skip, row, rl);
      skl = rl;
      skipping = 1;
      continue;
    }
    if (cell_take(t, IDX, sc, b) == 0 && !t->cells[t->ncells - 1].reported) {
      const icell_t *c = &t->cells[t->ncells - 1];
      piece_add(t, c->row, c->rl, c->id, c->v, c->vl, t->ncells - 1);
    }
  }
  if (!t->stop && st != PC_NOT_FOUND) t->failed = t->stop = 1;
  if (!t->stop && t->ncells) {
    t->gen++;
    terms_apply(t, 0, 1);
  }
  cells_clear(t);
  pc_scan_destroy(sc);
}

/* Reads ranges until none is left (or the read failed), in txn. */
static void ix_work(ix_state_t *r, pc_txn_t *txn) {
  rd_t t = {.r = r, .sink = r->sink, .txn = txn};
  pthread_mutex_lock(&r->mu);
  int solo = r->old && r->solo_taken;
  if (r->old) r->solo_taken = 1;
  pthread_mutex_unlock(&r->mu);
  if (solo) return; /* the older form: one thread reads it all */
  for (;;) {
    pthread_mutex_lock(&r->mu);
    while (!r->failed && r->next < r->nranges && r->next >= r->written + WINDOW)
      pthread_cond_wait(&r->cv, &r->mu);
    size_t k = r->next;
    int go = !r->failed && k < r->nranges;
    if (go) r->next++;
    pthread_mutex_unlock(&r->mu);
    if (!go) break;
    dd_buf_t out = {0};
    t.out = &out;
    if (r->ranges[k].lo < r->ranges[k].hi) range_read(&t, &r->ranges[k]);
    else old_only_read(&t);
    if (t.stop) {
      dd_buf_free(&out);
      rd_settle(&t);
      break;
    }
    deliver(r, k, &out);
  }
  rd_free(&t);
}

typedef struct helper {
  ix_state_t *r;
  pc_txn_t *of;
} helper_t;

static void *helper_main(void *arg) {
  helper_t *h = arg;
  pc_error_t err;
  pc_txn_t *txn = pc_txn_begin_alongside(h->of, &err);
  if (txn) { /* else the other threads read it all */
    ix_work(h->r, txn);
    pc_txn_destroy(txn);
  }
  return NULL;
}

pc_status_t ix_read(pc_txn_t *txn, const unsigned char *sel, int nthreads, const ix_sink_t *sink,
                    FILE *out, pc_error_t *err) {
  *err = (pc_error_t){0};
  ix_state_t r = {.sel = sel, .sink = sink, .out = out};
  int old = has_old_form(txn, err);
  if (old < 0) return err->code;
  r.old = old;
  r.ranges = malloc((DD_BUCKETS + 1) * sizeof *r.ranges);
  if (!r.ranges) {
    snprintf(err->text, sizeof err->text, "out of memory");
    return err->code = PC_NOMEM;
  }
  for (unsigned b = 0; b < DD_BUCKETS;) { /* runs of selected buckets, cut at RANGE_BUCKETS */
    if (sel && !sel[b]) {
      b++;
      continue;
    }
    unsigned e = b + 1;
    while (e < DD_BUCKETS && e - b < RANGE_BUCKETS && (!sel || sel[e])) e++;
    r.ranges[r.nranges++] = (range_t){b, e};
    b = e;
  }
  if (old) r.ranges[r.nranges++] = (range_t){0, 0};
  r.done = calloc(r.nranges + 1, sizeof *r.done);
  r.ready = calloc(r.nranges + 1, 1);
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  pc_status_t st = PC_OK;
  if (!r.done || !r.ready) {
    snprintf(err->text, sizeof err->text, "out of memory");
    st = err->code = PC_NOMEM;
  }
  int nh = st == PC_OK && !old && nthreads > 1 ? nthreads - 1 : 0, started = 0;
  pthread_t th[8];
  helper_t h = {&r, txn};
  if (nh > 8) nh = 8;
  for (; started < nh; started++)
    if (pthread_create(&th[started], NULL, helper_main, &h) != 0) break;
  if (st == PC_OK) ix_work(&r, txn);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  if (st == PC_OK && r.failed) {
    *err = r.err;
    st = r.st;
  } else if (st == PC_OK && r.written < r.nranges) { /* every range taken was delivered */
    snprintf(err->text, sizeof err->text, "the index was not read to its end");
    st = err->code = PC_INTERNAL;
  }
  for (size_t i = 0; r.done && i < r.nranges; i++) dd_buf_free(&r.done[i]);
  free(r.done);
  free(r.ready);
  free(r.ranges);
  term_set_free(&r.seen);
  pthread_mutex_destroy(&r.mu);
  pthread_cond_destroy(&r.cv);
  return st;
}

pc_status_t ix_read_term(pc_txn_t *txn, const char *term, size_t tl, const ix_sink_t *sink,
                         pc_error_t *err) {
  *err = (pc_error_t){0};
  ix_state_t r = {.sink = sink};
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  dd_buf_t out = {0};
  rd_t t = {.r = &r, .sink = sink, .txn = txn, .out = &out, .only = term, .only_len = tl};
  char row[DD_BUCKET_ROW];
  unsigned b = dd_term_bucket(term, tl);
  dd_bucket_row(row, b);
  t.gen++;
  if (cells_read(&t, DD_IDXBUCKET, row, sizeof row, b) == 0) bucket_pieces(&t, 0, b);
  if (!t.stop) {
    size_t off = t.arena.n; /* the term, where old_pieces reads its row from */
    if (dd_buf_put(&t.arena, term, tl) != 0) t.oom = t.stop = 1;
    else old_pieces(&t, off, tl, b);
  }
  terms_apply(&t, b, 0);
  rd_settle(&t);
  rd_free(&t);
  dd_buf_free(&out);
  pc_status_t st = PC_OK;
  if (r.failed) {
    *err = r.err;
    st = r.st;
  }
  pthread_mutex_destroy(&r.mu);
  pthread_cond_destroy(&r.cv);
  return st;
}

int ix_default_threads(void) {
  uint32_t n = pc_cores();
  return n > 4 ? 4 : (int)n;
}
