/* dedup.c — the observer plugin of the dedup application: the paper's
 * document indexer that clusters documents by the hash of their contents and
 * indexes one canonical document per cluster. Tables and cells:
 *
 *   docs  row URL   doc:contents  the document (written by `percolator load`)
 *                   doc:hash      the hex SHA-256 of the contents it was last
 *                                 clustered under (written here)
 *   dups  row HASH  m:<URL>       "1" for each member of the cluster
 *                   canonical     its lexicographically (bytewise) smallest member
 *                   rev           the start_ts (hex) of the last run that changed
 *                                 the membership
 *                   indexed       the canonical whose terms idx holds (index)
 *                   terms         those terms, newline-separated, in no
 *                                 particular order (index)
 *   idxbucket row B  p<8 bytes> the chunks of postings of one index run
 *                                 (one transaction, over one cluster or
 *                                 many) for the terms of bucket B (2 bytes
 *                                 big-endian, FNV-1a of the term mod 1024):
 *                                 per term, what the run changed of its
 *                                 postings, '+' (URL, HASH, count) or '-'
 *                                 (URL, HASH) per cluster, each (URL, HASH)
 *                                 named by its index in the run's directory;
 *                                 a term's postings are its chunks applied
 *                                 in the order of the runs
 *                                 (apps/dedup/dedup_index.h). A
 *                                 posting names its cluster's hash as well, so
 *                                 that two clusters that name the same URL in
 *                                 turn keep apart: a document that moves to a
 *                                 new cluster as its canonical is indexed
 *                                 there before its old cluster, re-indexed in
 *                                 another run, drops it. A search for TERM
 *                                 reads the one row of its bucket, and the
 *                                 directories its chunks name.
 *   idx   row TERM    p<8 bytes> a chunk of TERM alone, as versions before
 *                                 buckets wrote it (read, no longer written).
 *   idxdir row ID     d           the directory of the index run that
 *                                 started at ID (8 bytes big-endian): each
 *                                 (HASH, URL) its chunks name, once.
 *
 * Observers (each idempotent per notification: it derives what to write from
 * what it reads):
 *   dedup             strong, docs doc:contents: moves the document from the
 *                     cluster of its old hash (doc:hash) to the cluster of its
 *                     current contents, or out of every cluster when the
 *                     contents are gone (a delete notifies it as a put does,
 *                     so every change of a document, by any writer, comes to
 *                     this one observer and its one ack); keeps each
 *                     touched cluster's canonical its smallest member (the
 *                     smaller of the canonical and a member that joins; a
 *                     scan of the dups row when the canonical leaves),
 *                     deletes an emptied cluster's cells.
 *   dedup.index       strong, dups canonical (apps/dedup/index.c): when a
 *                     cluster's canonical differs from the one it indexed,
 *                     removes the old one's postings and adds the new one's;
 *                     a cluster that disappeared (its canonical deleted)
 *                     loses its index. It runs over many clusters at once
 *                     when the worker finds many notified (a batch), writing
 *                     one chunk per term for all of them.
 *   dedup.index.weak  weak, dups canonical: the same, when dedup asks for a
 *                     retry (below).
 *
 * Concurrency. Every run that changes a cluster's membership writes its rev
 * cell, so two such runs on one cluster conflict and one is retried: without
 * it, two runs from snapshots that each miss the other's member could leave a
 * canonical that is not the smallest (write skew). A cluster's members all
 * have the same contents, so its terms never change; only the canonical URL
 * they are filed under does. The index observer indexes a canonical only when
 * its contents hash to the cluster's hash; otherwise a change of that
 * document is committed and its dedup run pending, and that run either
 * changes the canonical or, finding the document still the canonical of a
 * cluster indexed under another URL, notifies the canonical cell weakly.
 *
 * Limits: a URL is at most PC_MAX_COLUMN - 2 bytes (it is the qualifier of
 * m:<URL>); re-indexing a cluster writes a cell per distinct term of its old
 * and new canonical in one transaction, so a document has fewer than
 * PC_MAX_TXN_MUTATIONS / 2 distinct terms (else its index run fails and is
 * parked, `percolator failures`; a batch that would exceed the limits runs
 * its clusters one by one).
 *
 * Configuration (workers.plugins[].config): {"batch_max": 1..4096}, the cells
 * a batched run of dedup and dedup.index takes (512 by default); an unknown
 * key is refused with the closest known one.
 *
 * `percolator check` recomputes all of this from the docs table. */
#include <jansson.h>
#include <percolator/observer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup_internal.h"
#include "dedup_text.h"

PC_PLUGIN_DECLARE("dedup", "1.0.0");

#define DOCS "docs"
#define DUPS "dups"
#define C_CONTENTS "doc:contents"
#define C_HASH "doc:hash"
#define C_CANON "canonical"
#define C_REV "rev"
#define C_INDEXED "indexed"
#define MEMBER_MAX (PC_MAX_COLUMN - 2)

#define S(lit) lit, (sizeof lit - 1)

static const pc_host_api_t *host;

/* A value read from the store: p NULL when absent. */
typedef struct val {
  char *p;
  size_t n;
} val_t;

static pc_status_t get(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                       const char *col, size_t clen, val_t *v, pc_error_t *err) {
  v->p = NULL;
  v->n = 0;
  pc_status_t st = host->txn_get(txn, table, row, rlen, col, clen, &v->p, &v->n, err);
  if (st == PC_NOT_FOUND) {
    v->p = NULL;
    return PC_OK;
  }
  return st;
}

static int same(const val_t *v, const char *p, size_t n) {
  return v->p && v->n == n && memcmp(v->p, p, n) == 0;
}

/* Whether a sorts before b bytewise, as the columns m:<a> and m:<b> do. */
static int bytes_less(const char *a, size_t an, const char *b, size_t bn) {
  int c = memcmp(a, b, an < bn ? an : bn);
  return c < 0 || (c == 0 && an < bn);
}

static pc_status_t fail(pc_error_t *err, pc_status_t st, const char *what) {
  snprintf(err->text, sizeof err->text, "%s", what);
  return err->code = st;
}

/* *out = a malloc'd copy of v (p NULL when v's is). */
static pc_status_t copy_val(val_t *out, const val_t *v, pc_error_t *err) {
  *out = (val_t){NULL, 0};
  if (!v->p) return PC_OK;
  if (!(out->p = malloc(v->n ? v->n : 1))) return fail(err, PC_NOMEM, "out of memory");
  memcpy(out->p, v->p, v->n);
  out->n = v->n;
  return PC_OK;
}

/* The smallest member of cluster hash (after this transaction's own writes),
 * into *min (malloc'd, NULL when the cluster is empty). The columns of a row
 * come in order, so it is the first m: column. */
static pc_status_t smallest_member(pc_txn_t *txn, const char *hash, char **min, size_t *mlen,
                                   pc_error_t *err) {
  char end[DD_HASH_HEX + 1];
  memcpy(end, hash, DD_HASH_HEX - 1);
  end[DD_HASH_HEX - 1] = '\0'; /* the row's key + one NUL byte: just this row */
  *min = NULL;
  pc_scan_t *sc = host->txn_scan(txn, DUPS, hash, DD_HASH_HEX - 1, end, DD_HASH_HEX, err);
  if (!sc) return err->code;
  pc_status_t st;
  while ((st = host->scan_next(sc, err)) == PC_OK) {
    size_t clen;
    const char *c = host->scan_column(sc, &clen);
    if (clen < 2 || memcmp(c, "m:", 2) != 0) {
      if (clen >= 2 && memcmp(c, "m:", 2) > 0) break; /* past the members */
      continue;
    }
    if (!(*min = malloc(clen - 2 + 1))) {
      st = fail(err, PC_NOMEM, "out of memory");
      break;
    }
    memcpy(*min, c + 2, clen - 2);
    *mlen = clen - 2;
    break;
  }
  host->scan_destroy(sc);
  return st == PC_NOT_FOUND || st == PC_OK ? PC_OK : st;
}

/* Makes url a member of cluster hash (member = 1) or not (member = 0), and
 * keeps the cluster's canonical and rev cells right. m and canon, when not
 * NULL, are the cluster's m:<url> and canonical cells as this transaction
 * sees them, read ahead by the caller (still the caller's to free); NULL:
 * read them here. canon_after, when not NULL, receives the canonical as the
 * transaction sees it after this update (malloc'd, the caller's to free();
 * p NULL: the cluster has none). */
static pc_status_t cluster_update(pc_txn_t *txn, const char *hash, const char *url, size_t ulen,
                                  int member, const val_t *m_ahead, const val_t *canon_ahead,
                                  val_t *canon_after, pc_error_t *err) {
  const size_t hl = DD_HASH_HEX - 1;
  if (canon_after) *canon_after = (val_t){NULL, 0};
  char col[PC_MAX_COLUMN];
  memcpy(col, "m:", 2);
  memcpy(col + 2, url, ulen);
  val_t m = {0}, canon = {0}, indexed = {0};
  pc_status_t st;
  int present;
  if (m_ahead) {
    present = m_ahead->p != NULL;
  } else {
    if ((st = get(txn, DUPS, hash, hl, col, ulen + 2, &m, err)) != PC_OK) return st;
    present = m.p != NULL;
    host->free(m.p);
  }
  if (!canon_ahead && (st = get(txn, DUPS, hash, hl, S(C_CANON), &canon, err)) != PC_OK)
    return st;
  const val_t *cv = canon_ahead ? canon_ahead : &canon;
  st = PC_OK;
  if (present == member) {
    /* no change of membership; the document's contents were written again.
     * If it is the canonical and the index holds another URL, the index
     * observer may have met its contents in flux: let it run again. */
    if (member && same(cv, url, ulen)) {
      st = get(txn, DUPS, hash, hl, S(C_INDEXED), &indexed, err);
      if (st == PC_OK && !same(&indexed, url, ulen))
        st = host->notify_weak(txn, DUPS, hash, hl, S(C_CANON), err);
      host->free(indexed.p);
    }
    if (st == PC_OK && canon_after) st = copy_val(canon_after, cv, err);
    host->free(canon.p);
    return st;
  }
  if (member)
    st = host->txn_set(txn, DUPS, hash, hl, col, ulen + 2, "1", 1, err);
  else
    st = host->txn_delete(txn, DUPS, hash, hl, col, ulen + 2, err);
  /* The canonical is the smallest member, in the snapshot and after each
   * run of this transaction: a member that joins is the new smallest or not,
   * one that leaves changes it only when it was it, and then the members are
   * scanned (as when there is no canonical to go by). */
  char *min = NULL;
  size_t mlen = 0;
  if (st == PC_OK && (member || (cv->p && !same(cv, url, ulen)))) {
    const char *p = url;
    mlen = ulen;
    if (cv->p && (!member || bytes_less(cv->p, cv->n, url, ulen))) {
      p = cv->p;
      mlen = cv->n;
    }
    if ((min = malloc(mlen + 1))) memcpy(min, p, mlen);
    else st = fail(err, PC_NOMEM, "out of memory");
  } else if (st == PC_OK) {
    st = smallest_member(txn, hash, &min, &mlen, err);
  }
  if (st == PC_OK && min) {
    char rev[24];
    int n = snprintf(rev, sizeof rev, "%llx", (unsigned long long)host->txn_start_ts(txn));
    st = host->txn_set(txn, DUPS, hash, hl, S(C_REV), rev, (size_t)n, err);
    if (st == PC_OK && !same(cv, min, mlen))
      st = host->txn_set(txn, DUPS, hash, hl, S(C_CANON), min, mlen, err);
    if (st == PC_OK && canon_after) {
      *canon_after = (val_t){min, mlen};
      min = NULL;
    }
  } else if (st == PC_OK) {
    /* emptied: the cluster disappears; its index goes with the index run */
    st = host->txn_delete(txn, DUPS, hash, hl, S(C_REV), err);
    if (st == PC_OK && cv->p) st = host->txn_delete(txn, DUPS, hash, hl, S(C_CANON), err);
    if (canon_after) *canon_after = (val_t){NULL, 0};
  }
  free(min);
  host->free(canon.p);
  return st;
}

static int is_hash(const val_t *v) {
  if (!v->p || v->n != DD_HASH_HEX - 1) return 0;
  for (size_t i = 0; i < v->n; i++)
    if (!((v->p[i] >= '0' && v->p[i] <= '9') || (v->p[i] >= 'a' && v->p[i] <= 'f'))) return 0;
  return 1;
}

/* One document's run: the hash of its contents now (now) and the hash it was
 * last clustered under (was); "" for none. For a batch, what the run will see
 * of the clusters it leaves ([0], was's) and joins ([1], now's), known ahead. */
typedef struct docrun {
  const char *url;
  size_t ulen;
  char now[DD_HASH_HEX], was[DD_HASH_HEX];
  const val_t *m[2];     /* m:<url> of the cluster, read ahead (NULL: read it in turn) */
  const val_t *canon[2]; /* its canonical as the run will see it (NULL: read it) */
  val_t *canon_after[2]; /* where its canonical after the run goes (NULL: nowhere) */
  size_t at[2]; /* observe_docs: where they are among its reads, + 1 (0: not read) */
} docrun_t;

/* The first half of a run, from the document's doc:contents and doc:hash
 * cells (contents, old; not freed here). */
static pc_status_t doc_start(docrun_t *d, const char *url, size_t ulen, const val_t *contents,
                             const val_t *old, pc_error_t *err) {
  memset(d, 0, sizeof *d);
  d->url = url;
  d->ulen = ulen;
  if (ulen > MEMBER_MAX) {
    snprintf(err->text, sizeof err->text,
             "URL of %zu bytes: dedup takes URLs of at most %d bytes (m:<URL> is a column)", ulen,
             MEMBER_MAX);
    return err->code = PC_INVALID;
  }
  if (contents->p) dd_sha256_hex(contents->p, contents->n, d->now);
  if (old->p && !is_hash(old)) {
    snprintf(err->text, sizeof err->text, "docs/%.*s/" C_HASH " is not a hex SHA-256",
             (int)(ulen > 200 ? 200 : ulen), url);
    return err->code = PC_CORRUPTION;
  }
  if (old->p) memcpy(d->was, old->p, DD_HASH_HEX - 1);
  return PC_OK;
}

/* Whether the run leaves the cluster of was: it had one, and its contents
 * are gone or hash elsewhere now. */
static int leaves(const docrun_t *d) { return d->was[0] && strcmp(d->was, d->now) != 0; }

/* One cluster's update for d (k: 0 leaves was's, 1 joins now's), the
 * canonical after it kept where d says. */
static pc_status_t doc_cluster(pc_txn_t *txn, const docrun_t *d, int k, pc_error_t *err) {
  val_t after = {NULL, 0};
  pc_status_t st = cluster_update(txn, k ? d->now : d->was, d->url, d->ulen, k, d->m[k],
                                  d->canon[k], d->canon_after[k] ? &after : NULL, err);
  if (st == PC_OK && d->canon_after[k]) {
    free(d->canon_after[k]->p);
    *d->canon_after[k] = after;
  }
  return st;
}

/* The second half: moves the document between clusters, writes doc:hash. */
static pc_status_t doc_finish(pc_txn_t *txn, const docrun_t *d, pc_error_t *err) {
  pc_status_t st = PC_OK;
  if (leaves(d)) st = doc_cluster(txn, d, 0, err);
  if (st != PC_OK) return st;
  if (d->now[0]) {
    st = doc_cluster(txn, d, 1, err);
    if (st == PC_OK && strcmp(d->was, d->now) != 0)
      st = host->txn_set(txn, DOCS, d->url, d->ulen, S(C_HASH), d->now, DD_HASH_HEX - 1, err);
  } else if (d->was[0]) {
    st = host->txn_delete(txn, DOCS, d->url, d->ulen, S(C_HASH), err);
  }
  return st;
}

/* Reads n cells in one call, into vals (p NULL: absent; free each with
 * host->free). */
static pc_status_t get_many(pc_txn_t *txn, const pc_cell_ref_t *refs, size_t n, val_t *vals,
                            pc_error_t *err) {
  if (n == 0) return PC_OK;
  pc_value_t *v = calloc(n, sizeof *v);
  if (!v) return fail(err, PC_NOMEM, "out of memory");
  pc_status_t st = host->txn_get_many(txn, refs, n, v, err);
  for (size_t i = 0; i < n; i++) {
    vals[i].p = st == PC_OK ? v[i].value : NULL;
    vals[i].n = st == PC_OK ? v[i].vlen : 0;
  }
  free(v);
  return st;
}

static pc_status_t observe_doc(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                               pc_error_t *err) {
  (void)state;
  const pc_cell_ref_t refs[2] = {
      {DOCS, cell->row, cell->row_len, S(C_CONTENTS)},
      {DOCS, cell->row, cell->row_len, S(C_HASH)},
  };
  val_t v[2] = {{0}};
  pc_status_t st = get_many(txn, refs, 2, v, err);
  docrun_t d;
  if (st == PC_OK) st = doc_start(&d, cell->row, cell->row_len, &v[0], &v[1], err);
  host->free(v[0].p);
  host->free(v[1].p);
  return st == PC_OK ? doc_finish(txn, &d, err) : st;
}

/* The dedup observer over many documents in one transaction: each in turn,
 * as observe_doc alone would (the transaction's own writes are visible to
 * its later reads and scans, so documents of one cluster in one batch see
 * each other), with one commit for all.
 *
 * Its reads come in two calls for the whole batch, not four a document (on
 * a cluster a round trip each): every document's doc:contents and doc:hash,
 * then the m:<URL> and canonical cells of every cluster a document leaves or
 * joins. m:<URL> read ahead is what the run reads in turn: only the run of
 * URL writes it (the cells of a batch are distinct documents). So is the
 * canonical, for a cluster that no earlier document of the batch touched:
 * only a run on cluster H writes H's canonical. For a cluster that one did,
 * the run goes by the canonical that the last such run left (what the
 * transaction would read back of its own write). */
static pc_status_t observe_docs(void *state, pc_txn_t *txn, const pc_notified_cell_t *cells,
                                size_t n, pc_error_t *err) {
  (void)state;
  docrun_t *d = calloc(n, sizeof *d);
  pc_cell_ref_t *refs = calloc(4 * n, sizeof *refs);
  val_t *vals = calloc(4 * n, sizeof *vals);
  char *cols = malloc(n * PC_MAX_COLUMN);
  /* the clusters the batch's runs touched so far, and the canonical each left */
  char(*touched)[DD_HASH_HEX] = calloc(2 * n, sizeof *touched);
  val_t *left = calloc(2 * n, sizeof *left);
  size_t nt = 0, nr = 0;
  pc_status_t st = PC_OK;
  if (!d || !refs || !vals || !cols || !touched || !left) st = fail(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; st == PC_OK && i < n; i++) {
    refs[2 * i] = (pc_cell_ref_t){DOCS, cells[i].row, cells[i].row_len, S(C_CONTENTS)};
    refs[2 * i + 1] = (pc_cell_ref_t){DOCS, cells[i].row, cells[i].row_len, S(C_HASH)};
  }
  if (st == PC_OK) st = get_many(txn, refs, 2 * n, vals, err);
  for (size_t i = 0; st == PC_OK && i < n; i++)
    st = doc_start(&d[i], cells[i].row, cells[i].row_len, &vals[2 * i], &vals[2 * i + 1], err);
  for (size_t i = 0; vals && i < 2 * n; i++) {
    host->free(vals[i].p);
    vals[i].p = NULL;
  }
  /* the clusters' cells, two a cluster: m:<URL>, then canonical */
  for (size_t i = 0; st == PC_OK && i < n; i++) {
    char *col = cols + i * PC_MAX_COLUMN;
    memcpy(col, "m:", 2);
    memcpy(col + 2, d[i].url, d[i].ulen);
    for (int k = 0; k < 2; k++) {
      const char *h = k ? d[i].now : d[i].was;
      int reads = k ? h[0] != '\0' : leaves(&d[i]); /* joins now's / leaves was's */
      if (!reads) continue;
      d[i].at[k] = nr + 1;
      refs[nr++] = (pc_cell_ref_t){DUPS, h, DD_HASH_HEX - 1, col, d[i].ulen + 2};
      refs[nr++] = (pc_cell_ref_t){DUPS, h, DD_HASH_HEX - 1, S(C_CANON)};
    }
  }
  if (st == PC_OK) st = get_many(txn, refs, nr, vals, err);
  for (size_t i = 0; st == PC_OK && i < n; i++) {
    for (int k = 0; k < 2; k++) {
      if (!d[i].at[k]) continue;
      const char *h = k ? d[i].now : d[i].was;
      size_t at = d[i].at[k] - 1;
      size_t t = 0;
      while (t < nt && strcmp(touched[t], h) != 0) t++;
      d[i].m[k] = &vals[at];
      d[i].canon[k] = t < nt ? &left[t] : &vals[at + 1];
      d[i].canon_after[k] = &left[t];
      if (t == nt) memcpy(touched[nt++], h, DD_HASH_HEX);
    }
    st = doc_finish(txn, &d[i], err);
  }
  for (size_t i = 0; vals && i < nr; i++) host->free(vals[i].p);
  for (size_t t = 0; left && t < nt; t++) free(left[t].p);
  free(left);
  free(touched);
  free(cols);
  free(vals);
  free(refs);
  free(d);
  return st;
}

/* ---- configuration ------------------------------------------------------------- */

/* The keys workers.plugins[].config may give, checked as the CLI checks its
 * options: an unknown one is refused with the closest known one. */
static const char *const config_keys[] = {"batch_max"};
#define NKEYS (sizeof config_keys / sizeof config_keys[0])

/* Levenshtein distance of a and b (short strings: a key). */
static size_t distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

/* Reads config_json: {"batch_max": 1..4096} (the cells a batched run takes,
 * DD_BATCH_DEFAULT when absent). */
static pc_status_t read_config(const char *config_json, size_t *batch_max, pc_error_t *err) {
  json_error_t je;
  json_t *o = json_loads(config_json ? config_json : "{}", 0, &je);
  if (!o || !json_is_object(o)) {
    snprintf(err->text, sizeof err->text, "config: expected a JSON object%s%s",
             o ? "" : ": ", o ? "" : je.text);
    json_decref(o);
    return err->code = PC_INVALID;
  }
  const char *key;
  json_t *v;
  pc_status_t st = PC_OK;
  json_object_foreach(o, key, v) {
    if (strcmp(key, "batch_max") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096) {
        snprintf(err->text, sizeof err->text, "config: batch_max: expected 1..4096");
        st = PC_INVALID;
        break;
      }
      *batch_max = (size_t)json_integer_value(v);
      continue;
    }
    const char *close = NULL;
    size_t best = 3;
    for (size_t k = 0; k < NKEYS; k++) {
      size_t dist = distance(key, config_keys[k]);
      if (dist < best && dist <= strlen(config_keys[k]) / 2) best = dist, close = config_keys[k];
    }
    if (close)
      snprintf(err->text, sizeof err->text, "config: unknown key \"%.100s\"; did you mean "
               "\"%s\"?", key, close);
    else
      snprintf(err->text, sizeof err->text, "config: unknown key \"%.100s\" (dedup takes "
               "\"batch_max\")", key);
    st = PC_INVALID;
    break;
  }
  json_decref(o);
  return st == PC_OK ? PC_OK : (err->code = st);
}

/* ---- registration ------------------------------------------------------------ */

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  if (!PC_HOST_HAS(api, txn_get_many)) {
    snprintf(err->text, sizeof err->text,
             "this host implements observer ABI %d.%d; dedup needs 1.1 (txn_get_many)",
             api->abi_major, api->abi_minor);
    return err->code = PC_INVALID;
  }
  /* Both batched observers take up to DD_BATCH_DEFAULT cells a run, above
   * the host's default: under a backlog a larger run commits less often and
   * the index writes each term's chunk once for all of the run's clusters,
   * so the store holds fewer, larger chunks. Past this size the gain
   * flattens while a batch that fails sends more cells to run alone
   * (docs/BENCHMARKS.md, "Batches of 512"). */
  enum { DD_BATCH_DEFAULT = 512 };
  size_t batch_max = DD_BATCH_DEFAULT;
  pc_status_t cst = read_config(config_json, &batch_max, err);
  if (cst != PC_OK) return cst;
  host = api;
  dd_index_set_host(api);
  static const struct {
    const char *name, *table, *column;
    pc_observer_kind_t kind;
    pc_observe_fn fn;
    pc_observe_batch_fn batch; /* many cells in one transaction (index: one chunk per term) */
  } defs[] = {
      {"dedup", DOCS, C_CONTENTS, PC_OBSERVER_STRONG, observe_doc, observe_docs},
      {"dedup.index", DUPS, C_CANON, PC_OBSERVER_STRONG, dd_index_one, dd_index_run},
      {"dedup.index.weak", DUPS, C_CANON, PC_OBSERVER_WEAK, dd_index_one, NULL},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
    pc_observer_def_t def = {.name = defs[i].name,
                             .table = defs[i].table,
                             .column = defs[i].column,
                             .column_len = strlen(defs[i].column),
                             .kind = defs[i].kind,
                             .observe = defs[i].fn,
                             .observe_batch = defs[i].batch,
                             .batch_max = defs[i].batch ? batch_max : 0};
    pc_status_t st = api->register_observer(reg, &def, err);
    if (st != PC_OK) return st;
  }
  return PC_OK;
}
