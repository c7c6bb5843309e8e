/* index.c — the index observer of the dedup plugin (dedup.c registers it):
 * keeps table idx (dedup_index.h) holding the postings of every cluster's
 * canonical document. It runs on a change of a cluster's canonical cell, for
 * one cluster (observe) or, handed many at once by the worker, for many in
 * one transaction (observe_batch): the run reads each cluster's canonical,
 * indexed and terms cells and its canonical's contents (two get_many calls),
 * and builds, per term it touches, one chunk holding every cluster's entry
 * for that term ('-' for the URL the cluster was indexed under, '+' for its
 * canonical now); it writes the chunks grouped by the term's bucket, one
 * cell per bucket (so a run costs at most DD_BUCKETS index cells, however
 * many terms its documents have), with the run's directory, which holds each
 * entry's (hash, URL) once for all its terms, then each cluster's indexed
 * and terms cells.
 *
 * Per cluster, as before batches: nothing to do when its canonical is the
 * URL it is indexed under; when the canonical's contents do not hash to the
 * cluster (a change of that document is committed and its dedup run
 * pending), nothing is written for the cluster, and that dedup run either
 * changes the canonical or notifies the canonical cell weakly; a cluster
 * that disappeared (no canonical) loses its postings and its indexed and
 * terms cells. */
#include <percolator/observer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup_index.h"
#include "dedup_internal.h"

static const pc_host_api_t *host;

void dd_index_set_host(const pc_host_api_t *api) { host = api; }

/* ---- the chunks of one run, by term ------------------------------------------ */

/* A term's chunk. The term points into what the run read (a cluster's terms
 * cell or its canonical's terms), which lives until the run ends. */
typedef struct tentry {
  const char *term;
  size_t len;
  dd_buf_t chunk;
} tentry_t;

/* The run's terms: the entries densely in first-seen order, and an open-
 * addressing table of (hash, entry index + 1; 0 = empty). A run of many
 * documents meets tens of thousands of terms, so the table is kept small
 * (8 bytes a slot) and the entries dense, with their terms where the run
 * read them: each fresh page the table's growth touches costs a page fault
 * and a TLB shootdown across the cores. */
typedef struct tslot {
  uint32_t hash, idx;
} tslot_t;

typedef struct tmap {
  tslot_t *slot;
  tentry_t *e;
  size_t cap, n, ecap;
} tmap_t;

static uint32_t term_hash(const char *t, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)t[i]) * 1099511628211ull;
  return (uint32_t)(h ^ (h >> 32));
}

/* The chunk of term t[0..len) (made empty when new; t must outlive the
 * map), or NULL when out of memory. */
static dd_buf_t *tmap_chunk(tmap_t *m, const char *t, size_t len) {
  if ((m->n + 1) * 2 > m->cap) { /* grow at half full */
    size_t nc = m->cap ? m->cap * 2 : 1024;
    tslot_t *ns = calloc(nc, sizeof *ns);
    if (!ns) return NULL;
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->slot[i].idx) continue;
      size_t s = m->slot[i].hash & (nc - 1);
      while (ns[s].idx) s = (s + 1) & (nc - 1);
      ns[s] = m->slot[i];
    }
    free(m->slot);
    m->slot = ns;
    m->cap = nc;
  }
  uint32_t h = term_hash(t, len);
  size_t s = h & (m->cap - 1);
  for (; m->slot[s].idx; s = (s + 1) & (m->cap - 1)) {
    const tentry_t *e = &m->e[m->slot[s].idx - 1];
    if (m->slot[s].hash == h && e->len == len && memcmp(e->term, t, len) == 0)
      return &m->e[m->slot[s].idx - 1].chunk;
  }
  if (m->n == m->ecap) {
    size_t ne = m->ecap ? m->ecap * 2 : 512;
    tentry_t *ee = realloc(m->e, ne * sizeof *ee);
    if (!ee) return NULL;
    m->e = ee;
    m->ecap = ne;
  }
  tentry_t *e = &m->e[m->n++];
  *e = (tentry_t){.term = t, .len = len};
  m->slot[s] = (tslot_t){h, (uint32_t)m->n};
  return &e->chunk;
}

static void tmap_free(tmap_t *m) {
  for (size_t i = 0; i < m->n; i++) dd_buf_free(&m->e[i].chunk);
  free(m->slot);
  free(m->e);
  memset(m, 0, sizeof *m);
}

static pc_status_t fail(pc_error_t *err, pc_status_t st, const char *what) {
  snprintf(err->text, sizeof err->text, "%s", what);
  return err->code = st;
}

/* Writes the run's chunks (m), each term's in its bucket's cell of column
 * col: one cell per bucket the run touched. */
static pc_status_t write_buckets(pc_txn_t *txn, tmap_t *m, const char col[DD_CHUNK_COL],
                                 pc_error_t *err) {
  /* the terms' slots in bucket order (a counting sort) */
  uint32_t *start = calloc(DD_BUCKETS + 1, sizeof *start);
  uint32_t *order = malloc(m->n * sizeof *order), *bucket = malloc(m->n * sizeof *bucket);
  dd_buf_t cell = {0};
  pc_status_t st = PC_OK;
  if (!start || !order || !bucket) {
    st = fail(err, PC_NOMEM, "out of memory");
    goto out;
  }
  for (size_t k = 0; k < m->n; k++) {
    bucket[k] = dd_term_bucket(m->e[k].term, m->e[k].len);
    start[bucket[k] + 1]++;
  }
  for (unsigned b = 0; b < DD_BUCKETS; b++) start[b + 1] += start[b];
  /* placing each slot moves start[b] on: after this, it is bucket b's end */
  for (size_t k = 0; k < m->n; k++) order[start[bucket[k]]++] = (uint32_t)k;
  for (unsigned b = 0, i = 0; b < DD_BUCKETS && st == PC_OK; b++) {
    cell.n = 0;
    for (; i < start[b]; i++) {
      const tentry_t *t = &m->e[order[i]];
      if (dd_bucket_add(&cell, t->term, t->len, t->chunk.p, t->chunk.n) != 0) {
        st = fail(err, PC_NOMEM, "out of memory");
        break;
      }
    }
    if (st != PC_OK || !cell.n) continue;
    char row[DD_BUCKET_ROW];
    dd_bucket_row(row, b);
    st = host->txn_set(txn, DD_IDXBUCKET, row, sizeof row, col, DD_CHUNK_COL, cell.p, cell.n, err);
  }
out:
  free(start);
  free(order);
  free(bucket);
  dd_buf_free(&cell);
  return st;
}

/* ---- one run ------------------------------------------------------------------------ */

/* What the run reads of a cluster: its canonical, indexed and terms cells. */
enum { V_CANON, V_INDEXED, V_TERMS, NV };

static int same(const pc_value_t *v, const char *p, size_t n) {
  return v->value && v->vlen == n && memcmp(v->value, p, n) == 0;
}

/* Adds the entries of one cluster (raw hash h) to the run's chunks, and the
 * pairs they name to its directory dir (of *nd pairs): '-' for each term of
 * the list of the URL it was indexed under, '+' for each term of its
 * canonical now (tv, when canon). */
static int add_entries(tmap_t *m, dd_buf_t *dir, uint64_t *nd, const uint8_t h[DD_HASH_RAW],
                       const pc_value_t *indexed, const pc_value_t *terms,
                       const pc_value_t *canon, const dd_terms_t *tv) {
  uint64_t ref;
  if (indexed->value && terms->value) {
    if (dd_dir_add(dir, nd, h, indexed->value, indexed->vlen, &ref) != 0) return -1;
    const char *p = terms->value;
    size_t i = 0, n = terms->vlen;
    while (i < n) {
      const char *nl = memchr(p + i, '\n', n - i);
      size_t tl = nl ? (size_t)(nl - (p + i)) : n - i;
      if (tl > 0 && tl <= DD_MAX_TERM) {
        dd_buf_t *c = tmap_chunk(m, p + i, tl);
        if (!c || dd_chunk_add(c, '-', ref, 0) != 0) return -1;
      }
      i += tl + 1;
    }
  }
  if (canon && tv->n && dd_dir_add(dir, nd, h, canon->value, canon->vlen, &ref) != 0) return -1;
  for (size_t k = 0; canon && k < tv->n; k++) {
    dd_buf_t *c = tmap_chunk(m, tv->v[k].term, tv->v[k].len);
    if (!c || dd_chunk_add(c, '+', ref, tv->v[k].count) != 0) return -1;
  }
  return 0;
}

/* The newline-separated list of tv's terms into out. */
static int term_list(const dd_terms_t *tv, dd_buf_t *out) {
  out->n = 0;
  for (size_t k = 0; k < tv->n; k++)
    if ((k && dd_buf_put(out, "\n", 1)) || dd_buf_put(out, tv->v[k].term, tv->v[k].len)) return -1;
  return 0;
}

pc_status_t dd_index_run(void *state, pc_txn_t *txn, const pc_notified_cell_t *cells, size_t n,
                         pc_error_t *err) {
  (void)state;
  pc_cell_ref_t *refs = calloc(n * NV, sizeof *refs);
  pc_value_t *vals = calloc(n * NV, sizeof *vals), *docs = calloc(n, sizeof *docs);
  dd_terms_t *tv = calloc(n, sizeof *tv);
  size_t *which = calloc(n, sizeof *which); /* the clusters whose canonical is read */
  uint8_t (*raw)[DD_HASH_RAW] = calloc(n, sizeof *raw);
  tmap_t m = {0};
  dd_buf_t list = {0}, dir = {0};
  uint64_t ndir = 0;
  pc_status_t st = PC_OK;
  size_t nd = 0;
  if (!refs || !vals || !docs || !tv || !which || !raw) {
    st = fail(err, PC_NOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    const pc_notified_cell_t *c = &cells[i];
    static const char *const cols[NV] = {DD_C_CANON, DD_C_INDEXED, DD_C_TERMS};
    for (int v = 0; v < NV; v++)
      refs[i * NV + v] = (pc_cell_ref_t){DD_DUPS, c->row, c->row_len, cols[v], strlen(cols[v])};
  }
  if ((st = host->txn_get_many(txn, refs, n * NV, vals, err)) != PC_OK) goto out;
  /* the canonical documents of the clusters not indexed under them */
  for (size_t i = 0; i < n; i++) {
    const pc_value_t *canon = &vals[i * NV + V_CANON], *indexed = &vals[i * NV + V_INDEXED];
    if (!canon->value || same(indexed, canon->value, canon->vlen)) continue;
    refs[nd] = (pc_cell_ref_t){DD_DOCS, canon->value, canon->vlen, DD_C_CONTENTS,
                               strlen(DD_C_CONTENTS)};
    which[nd++] = i;
  }
  if (nd && (st = host->txn_get_many(txn, refs, nd, docs, err)) != PC_OK) goto out;
  char col[DD_CHUNK_COL];
  dd_chunk_col(col, host->txn_start_ts(txn));
  size_t d = 0;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    const pc_notified_cell_t *c = &cells[i];
    pc_value_t *canon = &vals[i * NV + V_CANON], *indexed = &vals[i * NV + V_INDEXED],
               *terms = &vals[i * NV + V_TERMS];
    int has_doc = d < nd && which[d] == i;
    const pc_value_t *doc = has_doc ? &docs[d++] : NULL;
    if (canon->value && !has_doc) continue; /* indexed under its canonical already */
    if (dd_hash_raw(c->row, c->row_len, raw[i]) != 0) {
      host->log(host->host_ctx, PC_PLUGIN_LOG_WARN, "dups row of %zu bytes is not a SHA-256",
                c->row_len);
      continue;
    }
    if (canon->value) {
      char h[DD_HASH_HEX];
      if (doc->value) dd_sha256_hex(doc->value, doc->vlen, h);
      if (!doc->value || memcmp(h, c->row, c->row_len) != 0) {
        /* its change is committed and its dedup run pending: that run fixes it */
        host->log(host->host_ctx, PC_PLUGIN_LOG_DEBUG,
                  "cluster %.*s: canonical changed since; indexing later", (int)c->row_len, c->row);
        continue;
      }
      if (dd_terms_any(doc->value, doc->vlen, &tv[i]) != 0) { /* their order matters nowhere */
        st = fail(err, PC_NOMEM, "out of memory");
        break;
      }
    } else if (!indexed->value && !terms->value) {
      continue; /* gone, and never indexed */
    }
    if (add_entries(&m, &dir, &ndir, raw[i], indexed, terms, canon->value ? canon : NULL,
                    &tv[i]) != 0) {
      st = fail(err, PC_NOMEM, "out of memory");
      break;
    }
    if (!canon->value) { /* the cluster is gone */
      if (indexed->value)
        st = host->txn_delete(txn, DD_DUPS, c->row, c->row_len, DD_S(DD_C_INDEXED), err);
      if (st == PC_OK && terms->value)
        st = host->txn_delete(txn, DD_DUPS, c->row, c->row_len, DD_S(DD_C_TERMS), err);
      continue;
    }
    st = host->txn_set(txn, DD_DUPS, c->row, c->row_len, DD_S(DD_C_INDEXED), canon->value,
                       canon->vlen, err);
    if (st == PC_OK && term_list(&tv[i], &list) != 0) st = fail(err, PC_NOMEM, "out of memory");
    if (st == PC_OK && list.n)
      st = host->txn_set(txn, DD_DUPS, c->row, c->row_len, DD_S(DD_C_TERMS), list.p, list.n, err);
    else if (st == PC_OK && terms->value)
      st = host->txn_delete(txn, DD_DUPS, c->row, c->row_len, DD_S(DD_C_TERMS), err);
  }
  /* one cell per bucket of the terms the run touched, and the directory
   * their chunks name */
  if (st == PC_OK && m.n) st = write_buckets(txn, &m, col, err);
  if (st == PC_OK && m.n) {
    char row[DD_DIR_ROW];
    dd_dir_row(row, host->txn_start_ts(txn));
    st = host->txn_set(txn, DD_IDXDIR, row, sizeof row, DD_S(DD_DIR_COL), dir.p, dir.n, err);
  }
out:
  for (size_t i = 0; vals && i < n * NV; i++) host->free(vals[i].value);
  for (size_t i = 0; docs && i < nd; i++) host->free(docs[i].value);
  for (size_t i = 0; tv && i < n; i++) dd_terms_free(&tv[i]);
  free(refs);
  free(vals);
  free(docs);
  free(tv);
  free(which);
  free(raw);
  tmap_free(&m);
  dd_buf_free(&list);
  dd_buf_free(&dir);
  return st;
}

pc_status_t dd_index_one(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                         pc_error_t *err) {
  return dd_index_run(state, txn, cell, 1, err);
}
