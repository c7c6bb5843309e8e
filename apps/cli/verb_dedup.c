/* verb_dedup.c — the query verbs of the dedup application (apps/dedup/):
 * `clusters`, `search`, `doc`, and `check`, which recomputes the clusters and
 * the index from the docs table and reports every difference from what the
 * observers maintain. Each reads in one transaction (one snapshot). The hash
 * and tokeniser are apps/dedup/dedup_text.c, compiled into the plugin too. */
#include <stdlib.h>
#include <string.h>

#include "apps/dedup/dedup_index.h"
#include "apps/dedup/dedup_text.h"
#include "cli.h"

#define DOCS "docs"
#define DUPS "dups"
#define IDX "idx"

enum { OPT_JSON = 0x500, OPT_MIN_SIZE, OPT_ALL };

/* ---- bytes and lists ------------------------------------------------------------ */

typedef struct bytes {
  char *p;
  size_t n;
} bytes_t;

static int bytes_cmp(const bytes_t *a, const bytes_t *b) {
  size_t n = a->n < b->n ? a->n : b->n;
  int r = n ? memcmp(a->p, b->p, n) : 0;
  return r ? r : (a->n > b->n) - (a->n < b->n);
}

static int bytes_eq(const bytes_t *a, const char *p, size_t n) {
  return a->p && a->n == n && memcmp(a->p, p, n) == 0;
}

static int bytes_set(bytes_t *b, const char *p, size_t n) {
  free(b->p);
  b->p = malloc(n + 1);
  if (!b->p) return -1;
  memcpy(b->p, p, n);
  b->p[n] = '\0';
  b->n = n;
  return 0;
}

/* A cluster as the dups table holds it (or as check recomputes it). */
typedef struct cluster {
  char hash[DD_HASH_HEX];
  bytes_t canonical, indexed;
  bytes_t *m; /* members, in order */
  size_t n, cap;
} cluster_t;

typedef struct clusters {
  cluster_t *v;
  size_t n, cap;
} clusters_t;

static void clusters_free(clusters_t *cs) {
  for (size_t i = 0; i < cs->n; i++) {
    cluster_t *c = &cs->v[i];
    for (size_t k = 0; k < c->n; k++) free(c->m[k].p);
    free(c->m);
    free(c->canonical.p);
    free(c->indexed.p);
  }
  free(cs->v);
  memset(cs, 0, sizeof *cs);
}

static cluster_t *clusters_add(clusters_t *cs, const char *hash, size_t hl) {
  if (cs->n == cs->cap) {
    size_t nc = cs->cap ? cs->cap * 2 : 64;
    cluster_t *nv = realloc(cs->v, nc * sizeof *nv);
    if (!nv) return NULL;
    cs->v = nv;
    cs->cap = nc;
  }
  cluster_t *c = &cs->v[cs->n++];
  memset(c, 0, sizeof *c);
  snprintf(c->hash, sizeof c->hash, "%.*s", (int)(hl < DD_HASH_HEX - 1 ? hl : DD_HASH_HEX - 1),
           hash);
  return c;
}

static int member_add(cluster_t *c, const char *p, size_t n) {
  if (c->n == c->cap) {
    size_t nc = c->cap ? c->cap * 2 : 4;
    bytes_t *nm = realloc(c->m, nc * sizeof *nm);
    if (!nm) return -1;
    c->m = nm;
    c->cap = nc;
  }
  c->m[c->n] = (bytes_t){0};
  if (bytes_set(&c->m[c->n], p, n) != 0) return -1;
  c->n++;
  return 0;
}

/* Reads rows [start, end) of dups (start NULL: the whole table) into *cs, in
 * hash order. */
static pc_status_t read_dups(pc_txn_t *txn, const char *start, size_t slen, const char *end,
                             size_t elen, clusters_t *cs, pc_error_t *err) {
  pc_scan_t *sc = pc_txn_scan(txn, DUPS, start, slen, end, elen, err);
  if (!sc) return err->code;
  pc_status_t st;
  cluster_t *c = NULL;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *col = pc_scan_column(sc, &cl),
               *v = pc_scan_value(sc, &vl);
    if (!c || strlen(c->hash) != rl || memcmp(c->hash, r, rl) != 0) {
      if (!(c = clusters_add(cs, r, rl))) break;
    }
    int rc = 0;
    if (cl > 2 && memcmp(col, "m:", 2) == 0)
      rc = member_add(c, col + 2, cl - 2);
    else if (cl == 9 && memcmp(col, "canonical", 9) == 0)
      rc = bytes_set(&c->canonical, v, vl);
    else if (cl == 7 && memcmp(col, "indexed", 7) == 0)
      rc = bytes_set(&c->indexed, v, vl);
    if (rc) break;
  }
  pc_scan_destroy(sc);
  if (st == PC_OK) {
    snprintf(err->text, sizeof err->text, "out of memory");
    return err->code = PC_NOMEM;
  }
  return st == PC_NOT_FOUND ? PC_OK : st;
}

static int by_size(const void *a, const void *b) {
  const cluster_t *x = a, *y = b;
  if (x->n != y->n) return x->n < y->n ? 1 : -1;
  return strcmp(x->hash, y->hash);
}

static int parse_options(cli_ctx_t *ctx, int argc, char **argv, int *json, size_t *min_size,
                         int *all, int *code) {
  static const struct option opts[] = {{"json", no_argument, NULL, OPT_JSON},
                                       {"min-size", required_argument, NULL, OPT_MIN_SIZE},
                                       {"all", no_argument, NULL, OPT_ALL},
                                       {0, 0, 0, 0}};
  int c;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return -1;
    if (c == OPT_JSON) *json = 1;
    if (c == OPT_ALL) {
      if (!all) {
        *code = cli_usage_error(ctx, "unknown option '--all'");
        return -1;
      }
      *all = 1;
    }
    if (c == OPT_MIN_SIZE) {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (!min_size || *end || v < 1) {
        *code = cli_usage_error(ctx, min_size ? "--min-size: expected a count >= 1, got '%s'"
                                              : "unknown option '--min-size' ('%s')",
                                optarg);
        return -1;
      }
      *min_size = (size_t)v;
    }
  }
  return 0;
}

static void put_bytes(const bytes_t *b) {
  if (b->p) fmt_escape(stdout, b->p, b->n, 0);
  else fputs("-", stdout);
}

static json_t *json_bytes_array(const bytes_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t k = 0; a && k < n; k++) {
    json_t *o = json_object();
    if (!o || fmt_json_bytes(o, "u", v[k].p, v[k].n) != 0) {
      json_decref(o);
      json_decref(a);
      return NULL;
    }
    json_t *s = json_object_get(o, "u");
    json_array_append(a, s ? s : json_object_get(o, "u_base64"));
    json_decref(o);
  }
  return a;
}

static pc_txn_t *begin(cli_ctx_t *ctx, pc_db_t **db) {
  *db = cli_open_db(ctx, 0);
  if (!*db) return NULL;
  pc_error_t err;
  pc_txn_t *txn = pc_txn_begin(*db, &err);
  if (!txn) {
    cli_pc_error(ctx, &err);
    pc_db_close(*db);
  }
  return txn;
}

static void end(pc_db_t *db, pc_txn_t *txn) {
  pc_txn_destroy(txn);
  pc_db_close(db);
}

/* ---- clusters ---------------------------------------------------------------------- */

static int run_clusters(cli_ctx_t *ctx, int argc, char **argv) {
  int json = 0, code;
  size_t min_size = 1;
  if (parse_options(ctx, argc, argv, &json, &min_size, NULL, &code) != 0) return code;
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  pc_db_t *db;
  pc_txn_t *txn = begin(ctx, &db);
  if (!txn) return CLI_EXIT_ERROR;
  clusters_t cs = {0};
  pc_error_t err;
  pc_status_t st = read_dups(txn, NULL, 0, NULL, 0, &cs, &err);
  end(db, txn);
  if (st != PC_OK) {
    clusters_free(&cs);
    return cli_pc_error(ctx, &err);
  }
  if (cs.n) qsort(cs.v, cs.n, sizeof *cs.v, by_size);
  int failed = 0;
  for (size_t i = 0; i < cs.n && !failed; i++) {
    cluster_t *c = &cs.v[i];
    if (c->n < min_size) continue;
    if (json) {
      json_t *o = json_object();
      if (!o || json_object_set_new(o, "hash", json_string(c->hash)) ||
          json_object_set_new(o, "size", json_integer((json_int_t)c->n)) ||
          (c->canonical.p && fmt_json_bytes(o, "canonical", c->canonical.p, c->canonical.n)) ||
          json_object_set_new(o, "members", json_bytes_array(c->m, c->n)) ||
          fmt_json_line(stdout, o))
        failed = 1;
      continue;
    }
    printf("%s\t%zu\t", c->hash, c->n);
    put_bytes(&c->canonical);
    for (size_t k = 0; k < c->n; k++) {
      putchar('\t');
      put_bytes(&c->m[k]);
    }
    putchar('\n');
  }
  clusters_free(&cs);
  if (failed) return cli_error(ctx, "cannot write the answer");
  return cli_finish_output(ctx);
}

const cli_verb_t cli_verb_clusters = {
    .name = "clusters",
    .summary = "dedup: list the clusters of identical documents",
    .run = run_clusters,
    .args = "[--min-size N] [--json]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC,
    .about = "Lists the clusters the dedup observer maintains (table dups), largest\n"
             "first (then by hash): HASH SIZE CANONICAL MEMBER..., tab-separated, URLs\n"
             "C-escaped, members in bytewise order; or one JSON object per cluster with\n"
             "--json: {\"hash\", \"size\", \"canonical\", \"members\"}.\n",
    .options = "  --min-size N        only clusters of at least N documents (default 1)\n"
               "  --json              one JSON object per cluster\n",
    .example = "percolator --data /tmp/pc clusters --min-size 2\n",
};

/* ---- search ---------------------------------------------------------------------------- */

typedef struct posting {
  bytes_t url;
  unsigned long long count;
} posting_t;

/* Called for each posting of scan_postings, a term's postings together in
 * (URL, hash) order; nonzero stops the scan, which then fails with PC_NOMEM
 * (unless the callback keeps a reason of its own). The pointers are valid
 * during the call only. */
typedef int (*posting_fn)(void *ctx, const char *term, size_t tl, const dd_posting_t *p);

/* Called for each cell of idxbucket or idx that is not well formed (check
 * reports them; search passes over them); nonzero stops the scan. */
typedef int (*bad_cell_fn)(void *ctx, const char *table, const char *row, size_t rl,
                           const char *col, size_t cl, const char *v, size_t vl);

/* A run's directory as the scan read it. */
typedef struct dir_slot {
  uint64_t id;
  int have;
  char *value; /* the cell's value, which dir points into (pc_free) */
  size_t vlen;
  dd_dir_t dir;
} dir_slot_t;

/* Slots of the scan's cache of directories, mapped from the run's id: a
 * term's chunks come in run order, and consecutive terms name the same
 * recent runs, so most chunks find their directory read already; the cache
 * keeps a scan's memory bounded however many runs the index holds. */
#define DIR_SLOTS 1024

/* A cell of idxbucket or idx as the scan read it (copied). */
typedef struct icell {
  const char *table;
  bytes_t row, col, v;
  uint64_t id;
  int reported; /* passed to bad already */
} icell_t;

/* A chunk of one term: its run, its bytes (in cell `cell`'s value). */
typedef struct piece {
  const char *term;
  size_t tl;
  uint64_t id;
  const char *p;
  size_t n;
  size_t cell;
} piece_t;

typedef struct term_scan {
  posting_fn fn;
  bad_cell_fn bad;
  void *ctx;
  pc_txn_t *txn;
  pc_error_t *err;
  dir_slot_t *dirs; /* DIR_SLOTS of them, or NULL until a chunk needs one */
  dd_postings_t ps;
  icell_t *cells; /* the cells read for the terms at hand */
  size_t ncells, capcells;
  piece_t *pieces;
  size_t npieces, cappieces;
  int stop, oom, failed; /* failed: a read failed, err says why */
} term_scan_t;

/* The directory of run id at the scan's snapshot; NULL with *rc -1 when
 * the run has none or it is malformed (so is the chunk that names it), -2
 * when out of memory, or 1 when the read failed (t->err says why). */
static const dd_dir_t *run_dir(term_scan_t *t, uint64_t id, int *rc) {
  if (!t->dirs && !(t->dirs = calloc(DIR_SLOTS, sizeof *t->dirs))) {
    *rc = -2;
    return NULL;
  }
  dir_slot_t *s = &t->dirs[(id * 0x9E3779B97F4A7C15ull) >> 54]; /* the top 10 bits */
  if (s->have && s->id == id) return &s->dir;
  s->have = 0;
  pc_free(s->value);
  s->value = NULL;
  char row[DD_DIR_ROW];
  dd_dir_row(row, id);
  pc_status_t st = pc_txn_get(t->txn, DD_IDXDIR, row, sizeof row, DD_DIR_COL,
                              strlen(DD_DIR_COL), &s->value, &s->vlen, t->err);
  if (st == PC_NOT_FOUND) {
    *t->err = (pc_error_t){0};
    *rc = -1;
    return NULL;
  }
  if (st != PC_OK) {
    *rc = 1;
    return NULL;
  }
  if ((*rc = dd_dir_parse(&s->dir, s->value, s->vlen)) != 0) return NULL;
  s->id = id;
  s->have = 1;
  return &s->dir;
}

static void dirs_free(term_scan_t *t) {
  for (size_t i = 0; t->dirs && i < DIR_SLOTS; i++) {
    pc_free(t->dirs[i].value);
    dd_dir_free(&t->dirs[i].dir);
  }
  free(t->dirs);
  t->dirs = NULL;
}

static void cells_clear(term_scan_t *t) {
  for (size_t i = 0; i < t->ncells; i++) {
    free(t->cells[i].row.p);
    free(t->cells[i].col.p);
    free(t->cells[i].v.p);
  }
  t->ncells = 0;
  t->npieces = 0;
}

/* Reports cell i as malformed, once. */
static void cell_bad(term_scan_t *t, size_t i) {
  icell_t *c = &t->cells[i];
  if (c->reported || !t->bad) return;
  c->reported = 1;
  t->stop = t->bad(t->ctx, c->table, c->row.p, c->row.n, c->col.p, c->col.n, c->v.p, c->v.n);
}

/* Copies the cell at sc into t->cells: a chunk cell kept with its run's
 * id, any other cell reported. 0, or -1 (t->stop set). */
static int cell_take(term_scan_t *t, const char *table, pc_scan_t *sc) {
  if (t->ncells == t->capcells) {
    size_t nc = t->capcells ? t->capcells * 2 : 64;
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
  icell_t *ic = &t->cells[t->ncells++]; /* counted now: cells_clear frees what was copied */
  *ic = (icell_t){table, {0}, {0}, {0}, 0, 0};
  if (bytes_set(&ic->row, r, l1) || bytes_set(&ic->col, c, l2) || bytes_set(&ic->v, v, l3)) {
    t->oom = t->stop = 1;
    return -1;
  }
  if (dd_chunk_id(c, l2, &ic->id) != 0) cell_bad(t, t->ncells - 1);
  return t->stop ? -1 : 0;
}

/* Reads the cells of row `row` of table into t->cells (cell_take). 0, or
 * -1 (t->stop set). */
static int cells_read(term_scan_t *t, const char *table, const char *row, size_t rl) {
  pc_scan_t *sc = pc_txn_scan_row(t->txn, table, row, rl, NULL, 0, t->err);
  if (!sc) {
    t->failed = t->stop = 1;
    return -1;
  }
  pc_status_t st = PC_NOT_FOUND;
  while (!t->stop && (st = pc_scan_next(sc, t->err)) == PC_OK) cell_take(t, table, sc);
  if (!t->stop && st != PC_NOT_FOUND) t->failed = t->stop = 1;
  pc_scan_destroy(sc);
  return t->stop ? -1 : 0;
}

static int piece_add(term_scan_t *t, const char *term, size_t tl, uint64_t id, const char *p,
                     size_t n, size_t cell) {
  if (t->npieces == t->cappieces) {
    size_t nc = t->cappieces ? t->cappieces * 2 : 256;
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

/* The sections of the bucket cells t->cells[from..] as pieces (all of them,
 * or only term's when term is not NULL); a malformed cell is reported and
 * none of its sections taken. */
static void bucket_pieces(term_scan_t *t, size_t from, const char *term, size_t tl) {
  for (size_t i = from; i < t->ncells && !t->stop; i++) {
    const icell_t *c = &t->cells[i];
    if (c->reported) continue; /* no chunk's column */
    size_t pos = 0, mark = t->npieces, sl, cn;
    const char *s, *ch;
    int rc;
    while ((rc = dd_bucket_next(c->v.p, c->v.n, &pos, &s, &sl, &ch, &cn)) == 1)
      if ((!term || (sl == tl && memcmp(s, term, tl) == 0)) &&
          piece_add(t, s, sl, c->id, ch, cn, i) != 0)
        return;
    if (rc < 0) {
      t->npieces = mark;
      cell_bad(t, i);
    }
  }
}

static int piece_cmp(const void *a, const void *b) {
  const piece_t *x = a, *y = b;
  size_t m = x->tl < y->tl ? x->tl : y->tl;
  int r = memcmp(x->term, y->term, m);
  if (r) return r;
  if (x->tl != y->tl) return x->tl < y->tl ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Applies the pieces [a, b) of one term, in the order of their runs, and
 * hands the postings they leave to fn. */
static void term_apply(term_scan_t *t, size_t a, size_t b) {
  dd_postings_clear(&t->ps);
  for (size_t i = a; i < b && !t->stop; i++) {
    const piece_t *pc = &t->pieces[i];
    int rc = 0;
    const dd_dir_t *dir = NULL;
    if (dd_chunk_uses_dir(pc->p, pc->n)) dir = run_dir(t, pc->id, &rc);
    if (rc == 1) { /* the directory's read failed: t->err says why */
      t->failed = t->stop = 1;
      return;
    }
    if (rc == 0) rc = dd_postings_apply(&t->ps, pc->p, pc->n, dir);
    if (rc == -2) t->oom = t->stop = 1;
    else if (rc == -1) cell_bad(t, pc->cell);
  }
  if (t->stop) return;
  if (dd_postings_settle(&t->ps) != 0) {
    t->oom = t->stop = 1;
    return;
  }
  for (size_t i = 0; i < t->ps.n && !t->stop; i++)
    t->stop = t->fn(t->ctx, t->pieces[a].term, t->pieces[a].tl, &t->ps.v[i]);
}

/* The pieces' terms in order, each applied. */
static void terms_apply(term_scan_t *t) {
  if (t->npieces) qsort(t->pieces, t->npieces, sizeof *t->pieces, piece_cmp);
  for (size_t a = 0, b; a < t->npieces && !t->stop; a = b) {
    for (b = a + 1; b < t->npieces && t->pieces[b].tl == t->pieces[a].tl &&
                    memcmp(t->pieces[b].term, t->pieces[a].term, t->pieces[a].tl) == 0;
         b++) {
    }
    term_apply(t, a, b);
  }
}

/* The chunks of the older form (table idx) of term, as pieces. */
static void old_pieces(term_scan_t *t, const char *term, size_t tl) {
  size_t from = t->ncells;
  if (cells_read(t, IDX, term, tl) != 0) return;
  for (size_t i = from; i < t->ncells; i++)
    if (!t->cells[i].reported &&
        piece_add(t, t->cells[i].row.p, t->cells[i].row.n, t->cells[i].id, t->cells[i].v.p,
                  t->cells[i].v.n, i) != 0)
      return;
}

/* A set of terms (those found in buckets), for the scan of the older form. */
typedef struct term_set {
  bytes_t *slot;
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
    bytes_t *ns = calloc(nc, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->slot[i].p) continue;
      size_t j = set_hash(s->slot[i].p, s->slot[i].n) & (nc - 1);
      while (ns[j].p) j = (j + 1) & (nc - 1);
      ns[j] = s->slot[i];
    }
    free(s->slot);
    s->slot = ns;
    s->cap = nc;
  }
  if (!s->cap) return 0;
  size_t j = set_hash(p, n) & (s->cap - 1);
  for (; s->slot[j].p; j = (j + 1) & (s->cap - 1))
    if (bytes_eq(&s->slot[j], p, n)) return 1;
  if (!add) return 0;
  if (bytes_set(&s->slot[j], p, n) != 0) return -1;
  s->n++;
  return 0;
}

static void term_set_free(term_set_t *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->slot[i].p);
  free(s->slot);
}

/* Whether table idx holds any cell (an index written before buckets):
 * 1, 0, or -1 when the read failed. */
static int has_old_form(term_scan_t *t) {
  pc_scan_t *sc = pc_txn_scan(t->txn, IDX, NULL, 0, NULL, 0, t->err);
  if (!sc) return -1;
  pc_status_t st = pc_scan_next(sc, t->err);
  pc_scan_destroy(sc);
  if (st == PC_NOT_FOUND) *t->err = (pc_error_t){0};
  return st == PC_OK ? 1 : st == PC_NOT_FOUND ? 0 : -1;
}

/* The terms of the bucket whose cells t->cells holds (all of one row of
 * idxbucket), each with its chunks of the older form when old: every cell
 * reported when the row is no bucket's. */
static void bucket_apply(term_scan_t *t, term_set_t *seen, int old) {
  unsigned b;
  if (dd_bucket_of_row(t->cells[0].row.p, t->cells[0].row.n, &b) != 0) {
    for (size_t i = 0; i < t->ncells && !t->stop; i++) cell_bad(t, i);
    return;
  }
  bucket_pieces(t, 0, NULL, 0);
  for (size_t i = 0, nb = t->npieces; old && i < nb && !t->stop; i++) {
    const char *term = t->pieces[i].term;
    size_t tl = t->pieces[i].tl;
    int r = term_set_op(seen, term, tl, 1);
    if (r < 0) t->oom = t->stop = 1;
    if (r == 0 && !t->stop) old_pieces(t, term, tl); /* once a term */
  }
  if (!t->stop) terms_apply(t);
}

/* The postings of every term of the index: bucket by bucket (each term with
 * its chunks of the older form, if any), then the terms that only the
 * older form holds. A term's postings come together; terms come in no
 * particular order. The memory it holds is one bucket's cells. */
static void scan_all(term_scan_t *t) {
  term_set_t seen = {0};
  int old = has_old_form(t);
  if (old < 0) {
    t->failed = t->stop = 1;
    return;
  }
  for (int pass = 0; pass < 2 && !t->stop; pass++) {
    if (pass == 1 && !old) break;
    const char *table = pass == 0 ? DD_IDXBUCKET : IDX;
    pc_scan_t *sc = pc_txn_scan(t->txn, table, NULL, 0, NULL, 0, t->err);
    if (!sc) {
      t->failed = t->stop = 1;
      break;
    }
    pc_status_t st = PC_NOT_FOUND;
    bytes_t skip = {0}; /* pass 1: the row of a term a bucket had */
    while (!t->stop && (st = pc_scan_next(sc, t->err)) == PC_OK) {
      size_t rl;
      const char *row = pc_scan_row(sc, &rl);
      if (bytes_eq(&skip, row, rl)) continue;
      if (t->ncells && !bytes_eq(&t->cells[0].row, row, rl)) { /* the row before is complete */
        if (pass == 0) bucket_apply(t, &seen, old);
        else terms_apply(t);
        cells_clear(t);
        if (t->stop) break;
      }
      if (pass == 1 && !t->ncells && term_set_op(&seen, row, rl, 0) == 1) {
        if (bytes_set(&skip, row, rl) != 0) t->oom = t->stop = 1;
        continue;
      }
      if (cell_take(t, table, sc) == 0 && pass == 1 && !t->cells[t->ncells - 1].reported) {
        const icell_t *c = &t->cells[t->ncells - 1];
        piece_add(t, c->row.p, c->row.n, c->id, c->v.p, c->v.n, t->ncells - 1);
      }
    }
    if (!t->stop && st != PC_NOT_FOUND) t->failed = t->stop = 1;
    if (!t->stop && t->ncells) {
      if (pass == 0) bucket_apply(t, &seen, old);
      else terms_apply(t);
    }
    cells_clear(t);
    free(skip.p);
    pc_scan_destroy(sc);
  }
  term_set_free(&seen);
}

/* The postings of every term of the index (one NULL), or of the term `one`
 * alone: each term's chunks applied in the order of their runs
 * (apps/dedup/dedup_index.h). */
static pc_status_t scan_postings(pc_txn_t *txn, const char *one, size_t ol, posting_fn fn,
                                 bad_cell_fn bad, void *ctx, pc_error_t *err) {
  term_scan_t t = {fn, bad, ctx, txn, err, NULL, {0}, NULL, 0, 0, NULL, 0, 0, 0, 0, 0};
  *err = (pc_error_t){0};
  if (one) {
    char row[DD_BUCKET_ROW];
    dd_bucket_row(row, dd_term_bucket(one, ol));
    if (cells_read(&t, DD_IDXBUCKET, row, sizeof row) == 0) bucket_pieces(&t, 0, one, ol);
    if (!t.stop) old_pieces(&t, one, ol);
    if (!t.stop) terms_apply(&t);
  } else {
    scan_all(&t);
  }
  cells_clear(&t);
  free(t.cells);
  free(t.pieces);
  dd_postings_free(&t.ps);
  dirs_free(&t);
  if (t.stop && !t.failed) {
    if (t.oom || err->code == PC_OK) {
      snprintf(err->text, sizeof err->text, "out of memory");
      return err->code = PC_NOMEM;
    }
  }
  return t.stop ? err->code : PC_OK;
}

typedef struct posting_list {
  posting_t *v;
  size_t n, cap;
} posting_list_t;

static int posting_add(void *ctx, const char *term, size_t tl, const dd_posting_t *dp) {
  (void)term;
  (void)tl;
  posting_list_t *l = ctx;
  /* one hit per URL: a document indexed in two clusters for a moment (the
   * one it joins as canonical before the one it leaves drops it) */
  if (l->n && bytes_eq(&l->v[l->n - 1].url, dp->url, dp->ulen)) return 0;
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    posting_t *np = realloc(l->v, nc * sizeof *np);
    if (!np) return 1;
    l->v = np;
    l->cap = nc;
  }
  posting_t *p = &l->v[l->n];
  p->url = (bytes_t){0};
  p->count = dp->count;
  if (bytes_set(&p->url, dp->url, dp->ulen) != 0) return 1;
  l->n++;
  return 0;
}

/* The canonical URLs indexed under term, in order. */
static pc_status_t postings(pc_txn_t *txn, const char *term, size_t tl, posting_t **out,
                            size_t *n, pc_error_t *err) {
  posting_list_t l = {0};
  pc_status_t st = scan_postings(txn, term, tl, posting_add, NULL, &l, err);
  *out = l.v;
  *n = l.n;
  return st;
}

static void postings_free(posting_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) free(p[i].url.p);
  free(p);
}

typedef struct printer {
  int json, failed;
} printer_t;

static int print_posting(void *ctx, const char *term, size_t tl, const dd_posting_t *dp) {
  printer_t *p = ctx;
  if (p->json) {
    json_t *o = json_object();
    p->failed = !o || fmt_json_bytes(o, "term", term, tl) ||
                fmt_json_bytes(o, "url", dp->url, dp->ulen) ||
                json_object_set_new(o, "count", json_integer((json_int_t)dp->count)) ||
                fmt_json_line(stdout, o);
  } else {
    fwrite(term, 1, tl, stdout);
    putchar('\t');
    fmt_escape(stdout, dp->url, dp->ulen, 0);
    printf("\t%llu\n", (unsigned long long)dp->count);
    p->failed = ferror(stdout) != 0;
  }
  return p->failed;
}

/* search --all: every posting of the index */
static int search_all(cli_ctx_t *ctx, int json) {
  pc_db_t *db;
  pc_txn_t *txn = begin(ctx, &db);
  if (!txn) return CLI_EXIT_ERROR;
  printer_t p = {json, 0};
  pc_error_t err;
  pc_status_t st = scan_postings(txn, NULL, 0, print_posting, NULL, &p, &err);
  end(db, txn);
  if (p.failed) return cli_error(ctx, "cannot write the answer");
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  return cli_finish_output(ctx);
}

static int run_search(cli_ctx_t *ctx, int argc, char **argv) {
  int json = 0, all = 0, code;
  if (parse_options(ctx, argc, argv, &json, NULL, &all, &code) != 0) return code;
  if (all && optind < argc)
    return cli_usage_error(ctx, "--all takes no TERM (unexpected '%s')", argv[optind]);
  if (all) return search_all(ctx, json);
  if (optind >= argc) return cli_usage_error(ctx, "expected TERM... or --all");
  pc_db_t *db;
  pc_txn_t *txn = begin(ctx, &db);
  if (!txn) return CLI_EXIT_ERROR;
  posting_t *hits = NULL;
  size_t nhits = 0, nterms = 0;
  pc_error_t err;
  pc_status_t st = PC_OK;
  for (int i = optind; i < argc && st == PC_OK; i++) {
    char t[DD_MAX_TERM + 1];
    size_t pos = 0, tl;
    while (st == PC_OK && (tl = dd_next_term(argv[i], strlen(argv[i]), &pos, t)) != 0) {
      posting_t *p;
      size_t n;
      if ((st = postings(txn, t, tl, &p, &n, &err)) != PC_OK) break;
      if (nterms++ == 0) {
        hits = p;
        nhits = n;
        continue;
      }
      size_t k = 0; /* hits = hits ∩ p, both in URL order */
      for (size_t a = 0, b = 0; a < nhits;) {
        int r = b < n ? bytes_cmp(&hits[a].url, &p[b].url) : -1;
        if (r == 0) {
          hits[a].count += p[b].count;
          hits[k++] = hits[a++];
          b++;
        } else if (r < 0) {
          free(hits[a++].url.p);
        } else {
          b++;
        }
      }
      nhits = k;
      postings_free(p, n);
    }
  }
  end(db, txn);
  if (st != PC_OK) {
    postings_free(hits, nhits);
    return cli_pc_error(ctx, &err);
  }
  if (nterms == 0) return cli_usage_error(ctx, "no term in the arguments (terms are [a-z0-9]+)");
  int failed = 0;
  for (size_t i = 0; i < nhits && !failed; i++) {
    if (json) {
      json_t *o = json_object();
      failed = !o || fmt_json_bytes(o, "url", hits[i].url.p, hits[i].url.n) ||
               json_object_set_new(o, "count", json_integer((json_int_t)hits[i].count)) ||
               fmt_json_line(stdout, o);
    } else {
      put_bytes(&hits[i].url);
      putchar('\n');
    }
  }
  postings_free(hits, nhits);
  if (failed) return cli_error(ctx, "cannot write the answer");
  code = cli_finish_output(ctx);
  if (code == CLI_EXIT_OK && nhits == 0) {
    fprintf(stderr, "percolator: search: no document holds every term\n");
    return CLI_EXIT_NOT_FOUND;
  }
  return code;
}

const cli_verb_t cli_verb_search = {
    .name = "search",
    .summary = "dedup: the canonical documents containing every term",
    .run = run_search,
    .args = "[--json] TERM...\n"
            "[--json] --all",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_NOT_FOUND),
    .about = "Prints the canonical URLs (one per cluster of identical documents) whose\n"
             "contents hold every term, in bytewise order, from the inverted index the\n"
             "dedup observer maintains (tables idxbucket and idxdir). The arguments are\n"
             "tokenised as the documents are: ASCII letters folded to lower case, a term\n"
             "is a maximal run of [a-z0-9], other bytes separate terms, a term is cut at\n"
             "64 bytes. --json: one {\"url\", \"count\"} per line, count being the\n"
             "occurrences of the terms in the document. Exits 1 when no document holds\n"
             "every term.\n"
             "\n"
             "With --all, prints every posting of the index instead: TERM URL COUNT,\n"
             "tab-separated (URLs C-escaped), or one {\"term\", \"url\", \"count\"} per\n"
             "line with --json. A term's postings come together, in URL order; the\n"
             "terms come in the order of the index's buckets, not sorted (pipe through\n"
             "sort for term order). It holds one bucket of the index in memory.\n",
    .options = "  --all               every posting of the index\n"
               "  --json              one JSON object per document (per posting with --all)\n",
    .example = "percolator --data /tmp/pc search snapshot isolation\n",
};

/* ---- doc ---------------------------------------------------------------------------------- */

static int run_doc(cli_ctx_t *ctx, int argc, char **argv) {
  int json = 0, code;
  if (parse_options(ctx, argc, argv, &json, NULL, NULL, &code) != 0) return code;
  if (argc - optind != 1) return cli_usage_error(ctx, "expected one URL");
  const char *url = argv[optind];
  pc_db_t *db;
  pc_txn_t *txn = begin(ctx, &db);
  if (!txn) return CLI_EXIT_ERROR;
  pc_error_t err;
  char *h = NULL;
  size_t hl = 0;
  clusters_t cs = {0};
  pc_status_t st = pc_txn_get(txn, DOCS, url, strlen(url), "doc:hash", 8, &h, &hl, &err);
  if (st == PC_OK) {
    char e[DD_HASH_HEX + 1];
    snprintf(e, sizeof e, "%.*s", (int)(hl < DD_HASH_HEX - 1 ? hl : DD_HASH_HEX - 1), h);
    size_t el = strlen(e);
    e[el] = '\0';
    st = read_dups(txn, h, hl, e, el + 1, &cs, &err);
  }
  end(db, txn);
  if (st == PC_NOT_FOUND) {
    pc_free(h);
    fprintf(stderr, "percolator: doc: '%s' is not clustered (no such document, or not observed yet)\n",
            url);
    return CLI_EXIT_NOT_FOUND;
  }
  if (st != PC_OK) {
    pc_free(h);
    clusters_free(&cs);
    return cli_pc_error(ctx, &err);
  }
  cluster_t none = {0}, *c = cs.n ? &cs.v[0] : &none;
  bytes_t *mates = calloc(c->n + 1, sizeof *mates);
  size_t nm = 0;
  for (size_t k = 0; mates && k < c->n; k++)
    if (!bytes_eq(&c->m[k], url, strlen(url))) mates[nm++] = c->m[k];
  int failed = !mates;
  if (!failed && json) {
    json_t *o = json_object();
    failed = !o || fmt_json_bytes(o, "url", url, strlen(url)) ||
             fmt_json_bytes(o, "hash", h, hl) ||
             (c->canonical.p && fmt_json_bytes(o, "canonical", c->canonical.p, c->canonical.n)) ||
             json_object_set_new(o, "mates", json_bytes_array(mates, nm)) ||
             fmt_json_line(stdout, o);
  } else if (!failed) {
    printf("hash\t%.*s\ncanonical\t", (int)hl, h);
    put_bytes(&c->canonical);
    putchar('\n');
    for (size_t k = 0; k < nm; k++) {
      fputs("mate\t", stdout);
      put_bytes(&mates[k]);
      putchar('\n');
    }
  }
  free(mates);
  pc_free(h);
  clusters_free(&cs);
  if (failed) return cli_error(ctx, "cannot write the answer");
  return cli_finish_output(ctx);
}

const cli_verb_t cli_verb_doc = {
    .name = "doc",
    .summary = "dedup: a document's hash, canonical and cluster mates",
    .run = run_doc,
    .args = "[--json] URL",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_NOT_FOUND),
    .about = "Prints what the dedup observer knows of document URL: 'hash H', then\n"
             "'canonical C' (the smallest URL of its cluster), then one 'mate M' line\n"
             "per other member of the cluster, tab-separated, URLs C-escaped; or one\n"
             "JSON object {\"url\", \"hash\", \"canonical\", \"mates\"} with --json. Exits 1\n"
             "when the document is not clustered (absent, or not observed yet).\n",
    .options = "  --json              one JSON object\n",
    .example = "percolator --data /tmp/pc doc corpus/a.txt\n",
};

/* ---- check -------------------------------------------------------------------------------- */

typedef struct checker {
  int json;
  size_t diffs;
  int failed; /* writing */
} checker_t;

/* Reports one difference: cell table/row/column holds found (NULL: nothing)
 * where expected (NULL: nothing) was due. */
static void diff(checker_t *k, const char *table, const char *row, size_t rl, const char *col,
                 size_t cl, const char *found, size_t fl, const char *expected, size_t el) {
  k->diffs++;
  if (k->json) {
    json_t *o = json_object();
    if (!o || json_object_set_new(o, "table", json_string(table)) ||
        fmt_json_bytes(o, "row", row, rl) || fmt_json_bytes(o, "column", col, cl) ||
        (found && fmt_json_bytes(o, "found", found, fl)) ||
        (expected && fmt_json_bytes(o, "expected", expected, el)) || fmt_json_line(stdout, o))
      k->failed = 1;
    return;
  }
  printf("%s\t", table);
  fmt_escape(stdout, row, rl, 0);
  putchar('\t');
  fmt_escape(stdout, col, cl, 0);
  fputs("\tfound ", stdout);
  if (found) fmt_escape(stdout, found, fl, 1);
  else fputs("nothing", stdout);
  fputs(", expected ", stdout);
  if (expected) fmt_escape(stdout, expected, el, 1);
  else fputs("nothing", stdout);
  putchar('\n');
}

/* A document as the docs table holds it. */
typedef struct doc {
  bytes_t url;
  char hash[DD_HASH_HEX]; /* of its contents; "" without contents */
  bytes_t stored;         /* doc:hash */
} doc_t;

static int doc_by_hash(const void *a, const void *b) {
  const doc_t *x = a, *y = b;
  int r = strcmp(x->hash, y->hash);
  return r ? r : bytes_cmp(&x->url, &y->url);
}

typedef struct entry { /* one posting: idx TERM URL<NUL>HASH, or one cell */
  bytes_t row, col;
  unsigned long long count;
} entry_t;

static int entry_cmp(const void *a, const void *b) {
  const entry_t *x = a, *y = b;
  int r = bytes_cmp(&x->row, &y->row);
  return r ? r : bytes_cmp(&x->col, &y->col);
}

typedef struct entries {
  entry_t *v;
  size_t n, cap;
} entries_t;

static int entry_add(entries_t *e, const char *r, size_t rl, const char *c, size_t cl,
                     unsigned long long count) {
  if (e->n == e->cap) {
    size_t nc = e->cap ? e->cap * 2 : 256;
    entry_t *nv = realloc(e->v, nc * sizeof *nv);
    if (!nv) return -1;
    e->v = nv;
    e->cap = nc;
  }
  entry_t *x = &e->v[e->n];
  *x = (entry_t){{0}, {0}, count};
  if (bytes_set(&x->row, r, rl) || bytes_set(&x->col, c, cl)) {
    free(x->row.p);
    free(x->col.p);
    return -1;
  }
  e->n++;
  return 0;
}

static void entries_free(entries_t *e) {
  for (size_t i = 0; i < e->n; i++) {
    free(e->v[i].row.p);
    free(e->v[i].col.p);
  }
  free(e->v);
}

static pc_status_t oom(pc_error_t *err) {
  snprintf(err->text, sizeof err->text, "out of memory");
  return err->code = PC_NOMEM;
}

/* Reads the docs table: each document's hash of contents and doc:hash. */
static pc_status_t read_docs(pc_txn_t *txn, doc_t **out, size_t *n, pc_error_t *err) {
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  pc_scan_t *sc = pc_txn_scan(txn, DOCS, NULL, 0, NULL, 0, err);
  if (!sc) return err->code;
  pc_status_t st;
  doc_t *d = NULL;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *col = pc_scan_column(sc, &cl),
               *v = pc_scan_value(sc, &vl);
    int contents = cl == 12 && memcmp(col, "doc:contents", 12) == 0;
    int hash = cl == 8 && memcmp(col, "doc:hash", 8) == 0;
    if (!contents && !hash) continue;
    if (!d || !bytes_eq(&d->url, r, rl)) {
      if (*n == cap) {
        cap = cap ? cap * 2 : 256;
        doc_t *nd = realloc(*out, cap * sizeof *nd);
        if (!nd) break;
        *out = nd;
      }
      d = &(*out)[(*n)++];
      memset(d, 0, sizeof *d);
      if (bytes_set(&d->url, r, rl) != 0) break;
    }
    if (contents) dd_sha256_hex(v, vl, d->hash);
    else if (bytes_set(&d->stored, v, vl) != 0) break;
  }
  pc_scan_destroy(sc);
  if (st == PC_OK) return oom(err);
  return st == PC_NOT_FOUND ? PC_OK : st;
}

/* A posting as check compares it: row TERM, column URL 0x00 hex HASH. */
static int posting_entry(entries_t *e, const char *term, size_t tl, const char *url, size_t ul,
                         const char *hex, unsigned long long count) {
  char *col = malloc(ul + 1 + DD_HASH_HEX);
  if (!col) return -1;
  memcpy(col, url, ul);
  col[ul] = '\0';
  memcpy(col + ul + 1, hex, DD_HASH_HEX - 1);
  int rc = entry_add(e, term, tl, col, ul + DD_HASH_HEX, count);
  free(col);
  return rc;
}

typedef struct idx_reader {
  entries_t *e;
  checker_t *k;
} idx_reader_t;

static int idx_posting(void *ctx, const char *term, size_t tl, const dd_posting_t *p) {
  idx_reader_t *r = ctx;
  char hex[DD_HASH_HEX];
  dd_hash_hex(p->hash, hex);
  return posting_entry(r->e, term, tl, p->url, p->ulen, hex, p->count);
}

/* A cell of the index that is not well formed: found, where nothing was due. */
static int idx_bad(void *ctx, const char *table, const char *row, size_t rl, const char *col,
                   size_t cl, const char *v, size_t vl) {
  idx_reader_t *r = ctx;
  diff(r->k, table, row, rl, col, cl, v, vl, NULL, 0);
  return r->k->failed;
}

/* The postings the index holds, as entries; its malformed cells reported. */
static pc_status_t read_idx(pc_txn_t *txn, checker_t *k, entries_t *e, pc_error_t *err) {
  idx_reader_t r = {e, k};
  err->code = PC_OK;
  err->text[0] = '\0';
  pc_status_t st = scan_postings(txn, NULL, 0, idx_posting, idx_bad, &r, err);
  if (st != PC_OK && k->failed) return PC_OK; /* the writing failed: run_check says so */
  return st;
}

/* Compares the members, canonical and indexed cells of cluster have (NULL:
 * no such row) with want (NULL: no cluster of that hash). */
static void compare_cluster(checker_t *k, const cluster_t *have, const cluster_t *want) {
  const char *h = have ? have->hash : want->hash;
  size_t hl = strlen(h);
  size_t a = 0, b = 0, na = have ? have->n : 0, nb = want ? want->n : 0;
  while (a < na || b < nb) {
    int r = a == na ? 1 : b == nb ? -1 : bytes_cmp(&have->m[a], &want->m[b]);
    const bytes_t *u = r <= 0 ? &have->m[a] : &want->m[b];
    char col[PC_MAX_COLUMN + 3];
    size_t cl = u->n + 2 < sizeof col ? u->n + 2 : sizeof col;
    memcpy(col, "m:", 2);
    memcpy(col + 2, u->p, cl - 2);
    if (r < 0) diff(k, DUPS, h, hl, col, cl, "1", 1, NULL, 0);
    if (r > 0) diff(k, DUPS, h, hl, col, cl, NULL, 0, "1", 1);
    if (r <= 0) a++;
    if (r >= 0) b++;
  }
  const bytes_t none = {0};
  const bytes_t *hc = have ? &have->canonical : &none, *wc = want ? &want->canonical : &none;
  const bytes_t *hi = have ? &have->indexed : &none;
  if (!(hc->p == NULL && wc->p == NULL) && (!hc->p || !wc->p || bytes_cmp(hc, wc) != 0))
    diff(k, DUPS, h, hl, "canonical", 9, hc->p, hc->n, wc->p, wc->n);
  if (!(hi->p == NULL && wc->p == NULL) && (!hi->p || !wc->p || bytes_cmp(hi, wc) != 0))
    diff(k, DUPS, h, hl, "indexed", 7, hi->p, hi->n, wc->p, wc->n);
}

static pc_status_t check(pc_txn_t *txn, checker_t *k, pc_error_t *err) {
  doc_t *docs = NULL;
  size_t nd = 0;
  clusters_t want = {0}, have = {0};
  entries_t wi = {0}, hi = {0};
  pc_status_t st = read_docs(txn, &docs, &nd, err);
  if (st != PC_OK) goto out;
  /* 1. each document's doc:hash */
  for (size_t i = 0; i < nd; i++) {
    doc_t *d = &docs[i];
    size_t hl = strlen(d->hash);
    if (!bytes_eq(&d->stored, d->hash, hl) && (d->stored.p || hl))
      diff(k, DOCS, d->url.p, d->url.n, "doc:hash", 8, d->stored.p, d->stored.n,
           hl ? d->hash : NULL, hl);
  }
  /* 2. the clusters: documents grouped by hash, canonical = the smallest URL */
  if (nd) qsort(docs, nd, sizeof *docs, doc_by_hash);
  for (size_t i = 0; i < nd; i++) {
    if (!docs[i].hash[0]) continue;
    cluster_t *c = want.n ? &want.v[want.n - 1] : NULL;
    if (!c || strcmp(c->hash, docs[i].hash) != 0) {
      if (!(c = clusters_add(&want, docs[i].hash, strlen(docs[i].hash)))) {
        st = oom(err);
        goto out;
      }
      if (bytes_set(&c->canonical, docs[i].url.p, docs[i].url.n) != 0) {
        st = oom(err);
        goto out;
      }
    }
    if (member_add(c, docs[i].url.p, docs[i].url.n) != 0) {
      st = oom(err);
      goto out;
    }
  }
  if ((st = read_dups(txn, NULL, 0, NULL, 0, &have, err)) != PC_OK) goto out;
  for (size_t a = 0, b = 0; a < have.n || b < want.n;) {
    int r = a == have.n ? 1 : b == want.n ? -1 : strcmp(have.v[a].hash, want.v[b].hash);
    compare_cluster(k, r <= 0 ? &have.v[a] : NULL, r >= 0 ? &want.v[b] : NULL);
    if (r <= 0) a++;
    if (r >= 0) b++;
  }
  /* 3. the index: each canonical's terms */
  for (size_t i = 0; i < want.n; i++) {
    const bytes_t *u = &want.v[i].canonical;
    char *v = NULL;
    size_t vl = 0;
    if ((st = pc_txn_get(txn, DOCS, u->p, u->n, "doc:contents", 12, &v, &vl, err)) != PC_OK)
      goto out;
    dd_terms_t t;
    int rc = dd_terms(v, vl, &t);
    pc_free(v);
    if (rc != 0) {
      st = oom(err);
      goto out;
    }
    for (size_t j = 0; j < t.n && rc == 0; j++)
      rc = posting_entry(&wi, t.v[j].term, t.v[j].len, u->p, u->n, want.v[i].hash,
                         t.v[j].count);
    dd_terms_free(&t);
    if (rc != 0) {
      st = oom(err);
      goto out;
    }
  }
  if (wi.n) qsort(wi.v, wi.n, sizeof *wi.v, entry_cmp);
  if ((st = read_idx(txn, k, &hi, err)) != PC_OK) goto out;
  if (hi.n) qsort(hi.v, hi.n, sizeof *hi.v, entry_cmp);
  for (size_t a = 0, b = 0; a < hi.n || b < wi.n;) {
    int r = a == hi.n ? 1 : b == wi.n ? -1 : entry_cmp(&hi.v[a], &wi.v[b]);
    const entry_t *e = r <= 0 ? &hi.v[a] : &wi.v[b];
    char f[24] = "", w[24] = "";
    if (r <= 0) snprintf(f, sizeof f, "%llu", hi.v[a].count);
    if (r >= 0) snprintf(w, sizeof w, "%llu", wi.v[b].count);
    if (r != 0 || hi.v[a].count != wi.v[b].count)
      diff(k, IDX, e->row.p, e->row.n, e->col.p, e->col.n, r <= 0 ? f : NULL, strlen(f),
           r >= 0 ? w : NULL, strlen(w));
    if (r <= 0) a++;
    if (r >= 0) b++;
  }
out:
  for (size_t i = 0; i < nd; i++) {
    free(docs[i].url.p);
    free(docs[i].stored.p);
  }
  free(docs);
  clusters_free(&want);
  clusters_free(&have);
  entries_free(&wi);
  entries_free(&hi);
  return st;
}

static int run_check(cli_ctx_t *ctx, int argc, char **argv) {
  int json = 0, code;
  if (parse_options(ctx, argc, argv, &json, NULL, NULL, &code) != 0) return code;
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  pc_db_t *db;
  pc_txn_t *txn = begin(ctx, &db);
  if (!txn) return CLI_EXIT_ERROR;
  checker_t k = {json, 0, 0};
  pc_error_t err;
  pc_status_t st = check(txn, &k, &err);
  end(db, txn);
  if (st != PC_OK) return cli_pc_error(ctx, &err);
  if (k.failed) return cli_error(ctx, "cannot write the answer");
  code = cli_finish_output(ctx);
  if (code != CLI_EXIT_OK) return code;
  if (k.diffs) {
    fprintf(stderr, "percolator: check: %zu difference%s\n", k.diffs, k.diffs == 1 ? "" : "s");
    return CLI_EXIT_NOT_FOUND;
  }
  return CLI_EXIT_OK;
}

const cli_verb_t cli_verb_check = {
    .name = "check",
    .summary = "dedup: recompute clusters and index from docs, report differences",
    .run = run_check,
    .args = "[--json]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_NOT_FOUND),
    .about = "Recomputes, in one snapshot, what the dedup observers maintain from the\n"
             "docs table alone — each document's SHA-256 (doc:hash), the clusters of\n"
             "equal hashes with their members (dups m:URL), canonical (the smallest URL)\n"
             "and indexed canonical, and the inverted index of the canonicals —\n"
             "and prints each cell that differs: TABLE ROW COLUMN 'found X, expected\n"
             "Y', tab-separated and C-escaped ('nothing' for an absent cell), or one\n"
             "JSON object per difference with --json. A posting that differs is printed\n"
             "as idx TERM URL<NUL>HASH with its count; a cell of the index that is not\n"
             "well formed as its own table, row and column (idxbucket, or idx as\n"
             "versions before buckets wrote it). Run it after 'percolator wait':\n"
             "while notifications are pending the derived tables lag behind. Exits 1\n"
             "when there are differences (counted on stderr).\n",
    .options = "  --json              one JSON object per difference\n",
    .example = "percolator --data /tmp/pc wait && percolator --data /tmp/pc check\n",
};
