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
 *                   terms         those terms, newline-separated (index)
 *   idx   row TERM    p<8 bytes> a chunk of postings of TERM: what one index
 *                                 run (one transaction, over one cluster or
 *                                 many) changed of them, '+' (URL, HASH,
 *                                 count) or '-' (URL, HASH) per cluster; the
 *                                 term's postings are its chunks applied in
 *                                 column order (apps/dedup/dedup_index.h). A
 *                                 posting names its cluster's hash as well, so
 *                                 that two clusters that name the same URL in
 *                                 turn keep apart: a document that moves to a
 *                                 new cluster as its canonical is indexed
 *                                 there before its old cluster, re-indexed in
 *                                 another run, drops it. A search for TERM
 *                                 reads the one row TERM.
 *
 * Observers (each idempotent per notification: it derives what to write from
 * what it reads):
 *   dedup             strong, docs doc:contents: moves the document from the
 *                     cluster of its old hash (doc:hash) to the cluster of its
 *                     current contents, or out of every cluster when the
 *                     contents are gone (a delete notifies it as a put does,
 *                     so every change of a document, by any writer, comes to
 *                     this one observer and its one ack); recomputes each
 *                     touched cluster's canonical from its members (a scan
 *                     of the dups row), deletes an emptied cluster's cells.
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
 * `percolator check` recomputes all of this from the docs table. */
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

static pc_status_t fail(pc_error_t *err, pc_status_t st, const char *what) {
  snprintf(err->text, sizeof err->text, "%s", what);
  return err->code = st;
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
 * keeps the cluster's canonical and rev cells right. */
static pc_status_t cluster_update(pc_txn_t *txn, const char *hash, const char *url, size_t ulen,
                                  int member, pc_error_t *err) {
  const size_t hl = DD_HASH_HEX - 1;
  char col[PC_MAX_COLUMN];
  memcpy(col, "m:", 2);
  memcpy(col + 2, url, ulen);
  val_t m, canon = {0}, indexed = {0};
  pc_status_t st = get(txn, DUPS, hash, hl, col, ulen + 2, &m, err);
  if (st != PC_OK) return st;
  int present = m.p != NULL;
  host->free(m.p);
  if ((st = get(txn, DUPS, hash, hl, S(C_CANON), &canon, err)) != PC_OK) return st;
  if (present == member) {
    /* no change of membership; the document's contents were written again.
     * If it is the canonical and the index holds another URL, the index
     * observer may have met its contents in flux: let it run again. */
    if (member && same(&canon, url, ulen)) {
      st = get(txn, DUPS, hash, hl, S(C_INDEXED), &indexed, err);
      if (st == PC_OK && !same(&indexed, url, ulen))
        st = host->notify_weak(txn, DUPS, hash, hl, S(C_CANON), err);
      host->free(indexed.p);
    }
    host->free(canon.p);
    return st;
  }
  if (member)
    st = host->txn_set(txn, DUPS, hash, hl, col, ulen + 2, "1", 1, err);
  else
    st = host->txn_delete(txn, DUPS, hash, hl, col, ulen + 2, err);
  char *min = NULL;
  size_t mlen = 0;
  if (st == PC_OK) st = smallest_member(txn, hash, &min, &mlen, err);
  if (st == PC_OK && min) {
    char rev[24];
    int n = snprintf(rev, sizeof rev, "%llx", (unsigned long long)host->txn_start_ts(txn));
    st = host->txn_set(txn, DUPS, hash, hl, S(C_REV), rev, (size_t)n, err);
    if (st == PC_OK && !same(&canon, min, mlen))
      st = host->txn_set(txn, DUPS, hash, hl, S(C_CANON), min, mlen, err);
  } else if (st == PC_OK) {
    /* emptied: the cluster disappears; its index goes with the index run */
    st = host->txn_delete(txn, DUPS, hash, hl, S(C_REV), err);
    if (st == PC_OK && canon.p) st = host->txn_delete(txn, DUPS, hash, hl, S(C_CANON), err);
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

static pc_status_t observe_doc(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                               pc_error_t *err) {
  (void)state;
  const char *url = cell->row;
  size_t ulen = cell->row_len;
  if (ulen > MEMBER_MAX) {
    snprintf(err->text, sizeof err->text,
             "URL of %zu bytes: dedup takes URLs of at most %d bytes (m:<URL> is a column)", ulen,
             MEMBER_MAX);
    return err->code = PC_INVALID;
  }
  val_t contents, old;
  pc_status_t st = get(txn, DOCS, url, ulen, S(C_CONTENTS), &contents, err);
  if (st != PC_OK) return st;
  char now[DD_HASH_HEX] = "";
  int has = contents.p != NULL;
  if (has) dd_sha256_hex(contents.p, contents.n, now);
  host->free(contents.p);
  if ((st = get(txn, DOCS, url, ulen, S(C_HASH), &old, err)) != PC_OK) return st;
  if (old.p && !is_hash(&old)) {
    host->free(old.p);
    snprintf(err->text, sizeof err->text, "docs/%.*s/" C_HASH " is not a hex SHA-256",
             (int)(ulen > 200 ? 200 : ulen), url);
    return err->code = PC_CORRUPTION;
  }
  char was[DD_HASH_HEX] = "";
  if (old.p) {
    memcpy(was, old.p, DD_HASH_HEX - 1);
    was[DD_HASH_HEX - 1] = '\0';
  }
  host->free(old.p);
  if (was[0] && (!has || strcmp(was, now) != 0))
    if ((st = cluster_update(txn, was, url, ulen, 0, err)) != PC_OK) return st;
  if (has) {
    if ((st = cluster_update(txn, now, url, ulen, 1, err)) != PC_OK) return st;
    if (strcmp(was, now) != 0)
      st = host->txn_set(txn, DOCS, url, ulen, S(C_HASH), now, DD_HASH_HEX - 1, err);
  } else if (was[0]) {
    st = host->txn_delete(txn, DOCS, url, ulen, S(C_HASH), err);
  }
  return st;
}

/* The dedup observer over many documents in one transaction: each in turn,
 * as observe_doc alone would (the transaction's own writes are visible to
 * its later reads and scans, so documents of one cluster in one batch see
 * each other), with one commit for all. */
static pc_status_t observe_docs(void *state, pc_txn_t *txn, const pc_notified_cell_t *cells,
                                size_t n, pc_error_t *err) {
  pc_status_t st = PC_OK;
  for (size_t i = 0; i < n && st == PC_OK; i++) st = observe_doc(state, txn, &cells[i], err);
  return st;
}

/* ---- registration ------------------------------------------------------------ */

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg, const char *config_json,
                           pc_error_t *err) {
  (void)config_json;
  if (!PC_HOST_HAS(api, txn_get_many)) {
    snprintf(err->text, sizeof err->text,
             "this host implements observer ABI %d.%d; dedup needs 1.1 (txn_get_many)",
             api->abi_major, api->abi_minor);
    return err->code = PC_INVALID;
  }
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
                             .observe_batch = defs[i].batch};
    pc_status_t st = api->register_observer(reg, &def, err);
    if (st != PC_OK) return st;
  }
  return PC_OK;
}
