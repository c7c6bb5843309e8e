/* verb_dedup.c — the query verbs of the dedup application (apps/dedup/):
 * `clusters`, `search`, `doc`, and `check`, which recomputes the clusters and
 * the index from the docs table and reports every difference from what the
 * observers maintain. Each reads at one snapshot (several threads, each in a
 * transaction of its own at that snapshot, for `search --all` and `check`).
 * The index is read through dedup_read.c; the hash and tokeniser are
 * apps/dedup/dedup_text.c, compiled into the plugin too. */
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "apps/dedup/dedup_index.h"
#include "apps/dedup/dedup_text.h"
#include "cli.h"
#include "core/db.h"
#include "dedup_read.h"

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

/* Called by scan_dups with each row of dups read (a cluster): 0 goes on,
 * nonzero stops the scan, which then fails with PC_NOMEM. The callback may
 * take the cluster's contents (leaving *c zeroed); what it leaves is freed. */
typedef int (*cluster_fn)(void *ctx, cluster_t *c);

static void cluster_clear(cluster_t *c) {
  for (size_t k = 0; k < c->n; k++) free(c->m[k].p);
  free(c->m);
  free(c->canonical.p);
  free(c->indexed.p);
  memset(c, 0, sizeof *c);
}

/* Reads rows [start, end) of dups (start NULL: the whole table) in hash
 * order, handing each to fn; one row in memory at a time. */
static pc_status_t scan_dups(pc_txn_t *txn, const char *start, size_t slen, const char *end,
                             size_t elen, cluster_fn fn, void *ctx, pc_error_t *err) {
  pc_scan_t *sc = pc_txn_scan(txn, DUPS, start, slen, end, elen, err);
  if (!sc) return err->code;
  pc_status_t st;
  cluster_t c = {0};
  bytes_t row = {0}; /* the row of c (its hash is cut at 64 characters) */
  int stopped = 0;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *col = pc_scan_column(sc, &cl),
               *v = pc_scan_value(sc, &vl);
    if (!row.p || !bytes_eq(&row, r, rl)) {
      if (row.p && (stopped = fn(ctx, &c)) != 0) break;
      cluster_clear(&c);
      snprintf(c.hash, sizeof c.hash, "%.*s",
               (int)(rl < DD_HASH_HEX - 1 ? rl : DD_HASH_HEX - 1), r);
      if (bytes_set(&row, r, rl) != 0) break;
    }
    int rc = 0;
    if (cl > 2 && memcmp(col, "m:", 2) == 0)
      rc = member_add(&c, col + 2, cl - 2);
    else if (cl == 9 && memcmp(col, "canonical", 9) == 0)
      rc = bytes_set(&c.canonical, v, vl);
    else if (cl == 7 && memcmp(col, "indexed", 7) == 0)
      rc = bytes_set(&c.indexed, v, vl);
    if (rc) break;
  }
  if (st == PC_NOT_FOUND && row.p) stopped = fn(ctx, &c);
  cluster_clear(&c);
  free(row.p);
  pc_scan_destroy(sc);
  if (st == PC_OK || stopped) {
    snprintf(err->text, sizeof err->text, "out of memory");
    return err->code = PC_NOMEM;
  }
  return st == PC_NOT_FOUND ? PC_OK : st;
}

static int cluster_keep(void *ctx, cluster_t *c) {
  clusters_t *cs = ctx;
  if (cs->n == cs->cap) {
    size_t nc = cs->cap ? cs->cap * 2 : 64;
    cluster_t *nv = realloc(cs->v, nc * sizeof *nv);
    if (!nv) return 1;
    cs->v = nv;
    cs->cap = nc;
  }
  cs->v[cs->n++] = *c;
  memset(c, 0, sizeof *c);
  return 0;
}

/* Reads rows [start, end) of dups (start NULL: the whole table) into *cs, in
 * hash order. */
static pc_status_t read_dups(pc_txn_t *txn, const char *start, size_t slen, const char *end,
                             size_t elen, clusters_t *cs, pc_error_t *err) {
  return scan_dups(txn, start, slen, end, elen, cluster_keep, cs, err);
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

/* Room for n more bytes in b: 0, or -1 when out of memory. */
static int room(dd_buf_t *b, size_t n) {
  if (b->cap - b->n >= n) return 0;
  size_t nc = b->cap ? b->cap * 2 : 4096;
  while (nc - b->n < n) nc *= 2;
  char *np = realloc(b->p, nc);
  if (!np) return -1;
  b->p = np;
  b->cap = nc;
  return 0;
}

/* Appends bytes C-escaped (fmt_escape's form). 0, or -1 when out of memory. */
static int put_escaped(dd_buf_t *b, const char *p, size_t n, int quote) {
  if (room(b, 4 * n + 2) != 0) return -1;
  b->n += fmt_escape_to(b->p + b->n, p, n, quote);
  return 0;
}

/* Appends obj as one compact JSON line and releases it. 0, or -1. */
static int put_json(dd_buf_t *b, json_t *obj) {
  if (!obj) return -1;
  char *s = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(obj);
  if (!s) return -1;
  int rc = dd_buf_put(b, s, strlen(s)) || dd_buf_put(b, "\n", 1) ? -1 : 0;
  free(s);
  return rc;
}

typedef struct posting_list {
  posting_t *v;
  size_t n, cap;
} posting_list_t;

static int posting_add(void *ctx, dd_buf_t *out, const ix_term_t *t) {
  (void)out;
  posting_list_t *l = ctx;
  for (size_t i = 0; i < t->n; i++) {
    const dd_posting_t *dp = &t->v[i];
    /* one hit per URL: a document indexed in two clusters for a moment (the
     * one it joins as canonical before the one it leaves drops it) */
    if (l->n && bytes_eq(&l->v[l->n - 1].url, dp->url, dp->ulen)) continue;
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
  }
  return 0;
}

/* The canonical URLs indexed under term, in order. */
static pc_status_t postings(pc_txn_t *txn, const char *term, size_t tl, posting_t **out,
                            size_t *n, pc_error_t *err) {
  posting_list_t l = {0};
  ix_sink_t sink = {posting_add, NULL, &l, 0};
  pc_status_t st = ix_read_term(txn, term, tl, &sink, err);
  *out = l.v;
  *n = l.n;
  return st;
}

static void postings_free(posting_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) free(p[i].url.p);
  free(p);
}

/* search --all: a term's postings as lines, TERM URL COUNT or JSON */
static int print_term(void *ctx, dd_buf_t *out, const ix_term_t *t) {
  const int *json = ctx;
  for (size_t i = 0; i < t->n; i++) {
    const dd_posting_t *dp = &t->v[i];
    if (*json) {
      json_t *o = json_object();
      if (!o || fmt_json_bytes(o, "term", t->term, t->tl) ||
          fmt_json_bytes(o, "url", dp->url, dp->ulen) ||
          json_object_set_new(o, "count", json_integer((json_int_t)dp->count))) {
        json_decref(o);
        return 1;
      }
      if (put_json(out, o) != 0) return 1;
      continue;
    }
    if (room(out, t->tl + 4 * dp->ulen + 24) != 0) return 1;
    memcpy(out->p + out->n, t->term, t->tl);
    out->n += t->tl;
    out->p[out->n++] = '\t';
    out->n += fmt_escape_to(out->p + out->n, dp->url, dp->ulen, 0);
    out->n += (size_t)snprintf(out->p + out->n, 23, "\t%llu\n", (unsigned long long)dp->count);
  }
  return 0;
}

static int search_all(cli_ctx_t *ctx, int json) {
  pc_db_t *db;
  pc_txn_t *txn = begin(ctx, &db);
  if (!txn) return CLI_EXIT_ERROR;
  ix_sink_t sink = {print_term, NULL, &json, 0};
  pc_error_t err;
  pc_status_t st = ix_read(txn, NULL, ix_default_threads(), &sink, stdout, &err);
  end(db, txn);
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
             "sort for term order). It reads the index in a thread per core (at most\n"
             "4), a few buckets at a time, all at one snapshot.\n",
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

/* check reads, in one snapshot and at once: the docs table (each document's
 * SHA-256, and the terms of each cluster's canonical: in URL order the
 * first document of a hash is its canonical), the dups table (compared
 * cluster by cluster with the documents grouped by hash), and the index
 * (ix_read, in threads of its own). It does not hold the postings: each
 * side adds each of its postings to a digest of the posting's bucket, a sum
 * of 128-bit hashes (XXH3, seeded at random each run) and a count, and only
 * the buckets whose digests differ are read again, postings and all, to
 * name the differences (a group of buckets of at most EXACT_POSTINGS
 * postings at a time). A posting is on each side at most once, so the
 * digests of a bucket differ whenever its postings do, but for a sum of
 * hashes that matches by chance: about 2^-128 for a bucket. */
#define EXACT_POSTINGS (1u << 20)
#define GET_BATCH 64 /* documents read by one pc_txn_get_many */

typedef struct checker {
  int json;
  size_t diffs;
  int failed; /* writing */
} checker_t;

/* Appends one difference to out: cell table/row/column holds found (NULL:
 * nothing) where expected (NULL: nothing) was due. 0, or -1 when out of
 * memory. */
static int diff_put(checker_t *k, dd_buf_t *out, const char *table, const char *row, size_t rl,
                    const char *col, size_t cl, const char *found, size_t fl,
                    const char *expected, size_t el) {
  k->diffs++;
  if (k->json) {
    json_t *o = json_object();
    if (!o || json_object_set_new(o, "table", json_string(table)) ||
        fmt_json_bytes(o, "row", row, rl) || fmt_json_bytes(o, "column", col, cl) ||
        (found && fmt_json_bytes(o, "found", found, fl)) ||
        (expected && fmt_json_bytes(o, "expected", expected, el))) {
      json_decref(o);
      return -1;
    }
    return put_json(out, o);
  }
  if (dd_buf_put(out, table, strlen(table)) || dd_buf_put(out, "\t", 1) ||
      put_escaped(out, row, rl, 0) || dd_buf_put(out, "\t", 1) || put_escaped(out, col, cl, 0) ||
      dd_buf_put(out, "\tfound ", 7) ||
      (found ? put_escaped(out, found, fl, 1) : dd_buf_put(out, "nothing", 7)) ||
      dd_buf_put(out, ", expected ", 11) ||
      (expected ? put_escaped(out, expected, el, 1) : dd_buf_put(out, "nothing", 7)) ||
      dd_buf_put(out, "\n", 1))
    return -1;
  return 0;
}

/* diff_put, written to the standard output at once. */
static void diff(checker_t *k, const char *table, const char *row, size_t rl, const char *col,
                 size_t cl, const char *found, size_t fl, const char *expected, size_t el) {
  dd_buf_t b = {0};
  if (diff_put(k, &b, table, row, rl, col, cl, found, fl, expected, el) != 0 ||
      fwrite(b.p, 1, b.n, stdout) != b.n)
    k->failed = 1;
  dd_buf_free(&b);
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

static pc_status_t oom(pc_error_t *err) {
  snprintf(err->text, sizeof err->text, "out of memory");
  return err->code = PC_NOMEM;
}

/* The postings of a bucket, as a digest. */
typedef struct digest {
  uint64_t lo, hi, n;
  int bad; /* the bucket holds a malformed cell */
} digest_t;

/* A posting as check compares it; its term and URL in an arena. */
typedef struct pentry {
  unsigned bucket;
  uint32_t tl, ul;
  size_t term, url;
  uint8_t hash[DD_HASH_RAW];
  uint64_t count;
} pentry_t;

typedef struct pentries {
  pentry_t *v;
  size_t n, cap;
  dd_buf_t arena;
} pentries_t;

static void pentries_free(pentries_t *e) {
  free(e->v);
  dd_buf_free(&e->arena);
  memset(e, 0, sizeof *e);
}

static int pentry_add(pentries_t *e, unsigned bucket, const char *term, size_t tl,
                      const char *url, size_t ul, const uint8_t hash[DD_HASH_RAW],
                      uint64_t count) {
  if (e->n == e->cap) {
    size_t nc = e->cap ? e->cap * 2 : 4096;
    pentry_t *nv = realloc(e->v, nc * sizeof *nv);
    if (!nv) return -1;
    e->v = nv;
    e->cap = nc;
  }
  pentry_t *x = &e->v[e->n];
  *x = (pentry_t){bucket, (uint32_t)tl, (uint32_t)ul, e->arena.n, e->arena.n + tl, {0}, count};
  memcpy(x->hash, hash, DD_HASH_RAW);
  if (dd_buf_put(&e->arena, term, tl) || dd_buf_put(&e->arena, url, ul)) return -1;
  e->n++;
  return 0;
}

static int span_cmp(const char *a, size_t an, const char *b, size_t bn) {
  size_t m = an < bn ? an : bn;
  int r = m ? memcmp(a, b, m) : 0;
  return r ? r : (an > bn) - (an < bn);
}

/* bucket, term, URL, hash */
static int pentry_cmp(const pentry_t *x, const char *xa, const pentry_t *y, const char *ya) {
  if (x->bucket != y->bucket) return x->bucket < y->bucket ? -1 : 1;
  int r = span_cmp(xa + x->term, x->tl, ya + y->term, y->tl);
  if (!r) r = span_cmp(xa + x->url, x->ul, ya + y->url, y->ul);
  return r ? r : memcmp(x->hash, y->hash, DD_HASH_RAW);
}

static int pentry_sort_cmp(const void *a, const void *b, void *arena) {
  return pentry_cmp(a, arena, b, arena);
}

/* What a check shares between its threads. */
typedef struct check {
  checker_t *k;
  uint64_t seed;
  digest_t want[DD_BUCKETS], have[DD_BUCKETS];
  /* the documents (docs_pass), then sorted by hash */
  struct cdoc *docs;
  size_t ndocs, capdocs;
  dd_buf_t urls;
  /* the exact pass: the buckets of the group at hand, the postings read */
  const unsigned char *sel;
  pentries_t found;
} check_t;

typedef struct cdoc {
  size_t url, ul; /* in the check's urls */
  uint8_t hash[DD_HASH_RAW];
  int has; /* contents present */
} cdoc_t;

/* Adds the posting (term, url, hash, count) to d. 0, or -1 when out of
 * memory. */
static int digest_add(digest_t *d, uint64_t seed, const char *term, size_t tl, const char *url,
                      size_t ul, const uint8_t *hash, uint64_t count) {
  char stack[512], *m = stack;
  size_t n = 24 + tl + ul + DD_HASH_RAW;
  if (n > sizeof stack && !(m = malloc(n))) return -1;
  for (int i = 0; i < 8; i++) { /* the lengths and the count, then the bytes */
    m[i] = (char)(tl >> (8 * i));
    m[8 + i] = (char)(ul >> (8 * i));
    m[16 + i] = (char)(count >> (8 * i));
  }
  memcpy(m + 24, term, tl);
  memcpy(m + 24 + tl, url, ul);
  memcpy(m + 24 + tl + ul, hash, DD_HASH_RAW);
  XXH128_hash_t h = XXH3_128bits_withSeed(m, n, seed);
  if (m != stack) free(m);
  uint64_t lo = d->lo + h.low64;
  d->hi += h.high64 + (lo < d->lo);
  d->lo = lo;
  d->n++;
  return 0;
}

static int digest_same(const digest_t *a, const digest_t *b) {
  return !a->bad && !b->bad && a->lo == b->lo && a->hi == b->hi && a->n == b->n;
}

/* ---- the docs table ---- */

/* A set of SHA-256 digests (the hashes seen: their canonicals came first). */
typedef struct hset {
  uint8_t (*slot)[DD_HASH_RAW];
  unsigned char *used;
  size_t cap, n;
} hset_t;

static uint64_t hset_key(const uint8_t *h) {
  uint64_t v;
  memcpy(&v, h, sizeof v);
  return v;
}

/* Adds h: 1 when it was new, 0 when it was there, -1 when out of memory. */
static int hset_add(hset_t *s, const uint8_t h[DD_HASH_RAW]) {
  if ((s->n + 1) * 2 > s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 4096;
    uint8_t(*ns)[DD_HASH_RAW] = malloc(nc * sizeof *ns);
    unsigned char *nu = calloc(nc, 1);
    if (!ns || !nu) {
      free(ns);
      free(nu);
      return -1;
    }
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->used[i]) continue;
      size_t j = hset_key(s->slot[i]) & (nc - 1);
      while (nu[j]) j = (j + 1) & (nc - 1);
      memcpy(ns[j], s->slot[i], DD_HASH_RAW);
      nu[j] = 1;
    }
    free(s->slot);
    free(s->used);
    s->slot = ns;
    s->used = nu;
    s->cap = nc;
  }
  size_t j = hset_key(h) & (s->cap - 1);
  for (; s->used[j]; j = (j + 1) & (s->cap - 1))
    if (memcmp(s->slot[j], h, DD_HASH_RAW) == 0) return 0;
  memcpy(s->slot[j], h, DD_HASH_RAW);
  s->used[j] = 1;
  s->n++;
  return 1;
}

static void sha256_raw(const char *p, size_t n, uint8_t out[DD_HASH_RAW]) {
  struct sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, n, (const uint8_t *)p);
  sha256_digest(&ctx, DD_HASH_RAW, out);
}

/* The postings of a canonical document (url, its contents p[0..n), hash h)
 * into the expected digests want (e NULL), or into e when its bucket is
 * selected (sel). 0, or -1 when out of memory. */
static int canonical_terms(digest_t *want, uint64_t seed, const char *url, size_t ul,
                           const char *p, size_t n, const uint8_t h[DD_HASH_RAW],
                           const unsigned char *sel, pentries_t *e) {
  dd_terms_t t;
  if (dd_terms_any(p, n, &t) != 0) return -1;
  int rc = 0;
  for (size_t j = 0; j < t.n && rc == 0; j++) {
    unsigned b = dd_term_bucket(t.v[j].term, t.v[j].len);
    if (!e)
      rc = digest_add(&want[b], seed, t.v[j].term, t.v[j].len, url, ul, h, t.v[j].count);
    else if (sel[b])
      rc = pentry_add(e, b, t.v[j].term, t.v[j].len, url, ul, h, t.v[j].count);
  }
  dd_terms_free(&t);
  return rc;
}

/* The canonical documents on their way from the docs scan to the thread
 * that tokenises them (into digests of its own), in batches of about
 * TBATCH_BYTES, at most TQUEUE of them waiting. */
#define TBATCH_BYTES (1u << 21)
#define TQUEUE 4

typedef struct canon {
  size_t url, ul, p, n; /* in the batch's mem */
  uint8_t hash[DD_HASH_RAW];
} canon_t;

typedef struct tbatch {
  dd_buf_t mem;
  canon_t *v;
  size_t n, cap;
} tbatch_t;

typedef struct tokenizer {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  tbatch_t *q[TQUEUE];
  size_t head, n;
  int closed, failed; /* failed: out of memory in the thread */
  uint64_t seed;
  digest_t want[DD_BUCKETS];
} tokenizer_t;

static void tbatch_free(tbatch_t *b) {
  if (!b) return;
  dd_buf_free(&b->mem);
  free(b->v);
  free(b);
}

static void *tokenizer_main(void *arg) {
  tokenizer_t *tk = arg;
  for (;;) {
    pthread_mutex_lock(&tk->mu);
    while (!tk->n && !tk->closed) pthread_cond_wait(&tk->cv, &tk->mu);
    tbatch_t *b = NULL;
    if (tk->n) {
      b = tk->q[tk->head];
      tk->head = (tk->head + 1) % TQUEUE;
      tk->n--;
      pthread_cond_broadcast(&tk->cv);
    }
    pthread_mutex_unlock(&tk->mu);
    if (!b) break;
    for (size_t i = 0; i < b->n && !tk->failed; i++) {
      const canon_t *d = &b->v[i];
      if (canonical_terms(tk->want, tk->seed, b->mem.p + d->url, d->ul, b->mem.p + d->p, d->n,
                          d->hash, NULL, NULL) != 0) {
        pthread_mutex_lock(&tk->mu);
        tk->failed = 1;
        pthread_cond_broadcast(&tk->cv);
        pthread_mutex_unlock(&tk->mu);
      }
    }
    tbatch_free(b);
  }
  return NULL;
}

/* Hands batch *b to the tokenizer (waiting for room), *b NULL after. 0, or
 * -1 when the tokenizer failed. */
static int tokenizer_push(tokenizer_t *tk, tbatch_t **b) {
  pthread_mutex_lock(&tk->mu);
  while (tk->n == TQUEUE && !tk->failed) pthread_cond_wait(&tk->cv, &tk->mu);
  int rc = tk->failed ? -1 : 0;
  if (!rc) {
    tk->q[(tk->head + tk->n) % TQUEUE] = *b;
    tk->n++;
    pthread_cond_broadcast(&tk->cv);
    *b = NULL;
  }
  pthread_mutex_unlock(&tk->mu);
  return rc;
}

static void tokenizer_close(tokenizer_t *tk) {
  pthread_mutex_lock(&tk->mu);
  tk->closed = 1;
  pthread_cond_broadcast(&tk->cv);
  pthread_mutex_unlock(&tk->mu);
}

/* A canonical document for the tokenizer (tk NULL: tokenised here, into
 * c->want). 0, or -1. */
static int canonical(check_t *c, tokenizer_t *tk, tbatch_t **b, const char *url, size_t ul,
                     const char *p, size_t n, const uint8_t h[DD_HASH_RAW]) {
  if (!tk) return canonical_terms(c->want, c->seed, url, ul, p, n, h, NULL, NULL);
  if (!*b && !(*b = calloc(1, sizeof **b))) return -1;
  tbatch_t *x = *b;
  if (x->n == x->cap) {
    size_t nc = x->cap ? x->cap * 2 : 256;
    canon_t *nv = realloc(x->v, nc * sizeof *nv);
    if (!nv) return -1;
    x->v = nv;
    x->cap = nc;
  }
  canon_t *d = &x->v[x->n];
  *d = (canon_t){x->mem.n, ul, x->mem.n + ul, n, {0}};
  memcpy(d->hash, h, DD_HASH_RAW);
  if (dd_buf_put(&x->mem, url, ul) || dd_buf_put(&x->mem, p, n)) return -1;
  x->n++;
  return x->mem.n >= TBATCH_BYTES ? tokenizer_push(tk, b) : 0;
}

typedef struct docs_pass {
  check_t *c;
  pc_txn_t *txn;
  tokenizer_t *tk; /* NULL: none, tokenise in the scan's thread */
  pc_status_t st;
  pc_error_t err;
} docs_pass_t;

/* The document just read (the check's last one): its doc:hash against the
 * hash of its contents. */
static void doc_done(check_t *c, const bytes_t *stored) {
  cdoc_t *d = &c->docs[c->ndocs - 1];
  char hex[DD_HASH_HEX] = "";
  if (d->has) dd_hash_hex(d->hash, hex);
  size_t hl = strlen(hex);
  if (!bytes_eq(stored, hex, hl) && (stored->p || hl))
    diff(c->k, DOCS, c->urls.p + d->url, d->ul, "doc:hash", 8, stored->p, stored->n,
         hl ? hex : NULL, hl);
}

/* Reads the docs table: each document's hash into c->docs, doc:hash
 * compared, and each hash's first document (its canonical) handed to the
 * tokenizer tk, whose thread adds its postings to the expected digests. */
static pc_status_t read_docs(check_t *c, pc_txn_t *txn, tokenizer_t *tk, pc_error_t *err) {
  pc_scan_t *sc = pc_txn_scan(txn, DOCS, NULL, 0, NULL, 0, err);
  if (!sc) return err->code;
  tbatch_t *batch = NULL;
  hset_t seen = {0};
  bytes_t stored = {0};
  pc_status_t st;
  int bad = 0;
  while (!bad && (st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, cl, vl;
    const char *r = pc_scan_row(sc, &rl), *col = pc_scan_column(sc, &cl),
               *v = pc_scan_value(sc, &vl);
    int contents = cl == 12 && memcmp(col, "doc:contents", 12) == 0;
    int hash = cl == 8 && memcmp(col, "doc:hash", 8) == 0;
    if (!contents && !hash) continue;
    cdoc_t *d = c->ndocs ? &c->docs[c->ndocs - 1] : NULL;
    if (!d || d->ul != rl || memcmp(c->urls.p + d->url, r, rl) != 0) {
      if (d) doc_done(c, &stored);
      free(stored.p);
      stored = (bytes_t){0};
      if (c->ndocs == c->capdocs) {
        size_t nc = c->capdocs ? c->capdocs * 2 : 1024;
        cdoc_t *nv = realloc(c->docs, nc * sizeof *nv);
        if (!nv) {
          bad = 1;
          break;
        }
        c->docs = nv;
        c->capdocs = nc;
      }
      d = &c->docs[c->ndocs];
      *d = (cdoc_t){c->urls.n, rl, {0}, 0};
      if (dd_buf_put(&c->urls, r, rl) != 0) {
        bad = 1;
        break;
      }
      c->ndocs++;
    }
    if (hash) {
      bad = bytes_set(&stored, v, vl) != 0;
      continue;
    }
    sha256_raw(v, vl, d->hash);
    d->has = 1;
    int first = hset_add(&seen, d->hash);
    if (first < 0 || (first && canonical(c, tk, &batch, r, rl, v, vl, d->hash) != 0))
      bad = 1;
  }
  if (!bad && st == PC_NOT_FOUND && c->ndocs) doc_done(c, &stored);
  if (!bad && batch && tokenizer_push(tk, &batch) != 0) bad = 1;
  tbatch_free(batch);
  pc_scan_destroy(sc);
  free(stored.p);
  free(seen.slot);
  free(seen.used);
  if (bad) return oom(err);
  return st == PC_NOT_FOUND ? PC_OK : st;
}

static int cdoc_by_hash(const void *a, const void *b, void *urls) {
  const cdoc_t *x = a, *y = b;
  int r = memcmp(x->hash, y->hash, DD_HASH_RAW);
  return r ? r : span_cmp((const char *)urls + x->url, x->ul, (const char *)urls + y->url, y->ul);
}

/* The clusters: c->docs (sorted by hash) against dups, row by row. */
typedef struct dups_cmp {
  check_t *c;
  size_t next; /* the next document of c->docs to compare */
  cluster_t want;
} dups_cmp_t;

/* The cluster of the documents of c->docs from *i on with one hash (the
 * members point into the check's urls), *i moved past them; 0, or -1 when
 * out of memory. */
static int want_cluster(check_t *c, size_t *i, cluster_t *w) {
  w->n = 0;
  const cdoc_t *d = &c->docs[*i];
  dd_hash_hex(d->hash, w->hash);
  w->canonical = (bytes_t){c->urls.p + d->url, d->ul};
  for (; *i < c->ndocs && memcmp(c->docs[*i].hash, d->hash, DD_HASH_RAW) == 0; (*i)++) {
    if (w->n == w->cap) {
      size_t nc = w->cap ? w->cap * 2 : 4;
      bytes_t *nm = realloc(w->m, nc * sizeof *nm);
      if (!nm) return -1;
      w->m = nm;
      w->cap = nc;
    }
    w->m[w->n++] = (bytes_t){c->urls.p + c->docs[*i].url, c->docs[*i].ul};
  }
  return 0;
}

/* Compares the wanted clusters whose hash sorts before have's (have NULL:
 * all that are left) as missing, then have with its own, if any. */
static int dups_step(dups_cmp_t *x, const cluster_t *have) {
  check_t *c = x->c;
  while (x->next < c->ndocs) {
    char hex[DD_HASH_HEX];
    dd_hash_hex(c->docs[x->next].hash, hex);
    int r = have ? strcmp(hex, have->hash) : -1;
    if (r > 0) break;
    if (want_cluster(c, &x->next, &x->want) != 0) return 1;
    compare_cluster(c->k, r == 0 ? have : NULL, &x->want);
    if (r == 0) return 0;
  }
  if (have) compare_cluster(c->k, have, NULL);
  return 0;
}

static int dups_row(void *ctx, cluster_t *have) { return dups_step(ctx, have); }

static pc_status_t compare_dups(check_t *c, pc_txn_t *txn, pc_error_t *err) {
  size_t k = 0; /* documents without contents belong to no cluster: at the front (hash 0) */
  for (size_t i = 0; i < c->ndocs; i++)
    if (c->docs[i].has) c->docs[k++] = c->docs[i];
  c->ndocs = k;
  if (c->ndocs) qsort_r(c->docs, c->ndocs, sizeof *c->docs, cdoc_by_hash, c->urls.p);
  dups_cmp_t x = {.c = c};
  pc_status_t st = scan_dups(txn, NULL, 0, NULL, 0, dups_row, &x, err);
  if (st == PC_OK && dups_step(&x, NULL) != 0) st = oom(err);
  free(x.want.m);
  return st;
}

static void *docs_main(void *arg) {
  docs_pass_t *p = arg;
  p->st = read_docs(p->c, p->txn, p->tk, &p->err);
  if (p->tk) tokenizer_close(p->tk);
  if (p->st == PC_OK) p->st = compare_dups(p->c, p->txn, &p->err);
  return NULL;
}

/* ---- the index ---- */

static int have_term(void *ctx, dd_buf_t *out, const ix_term_t *t) {
  check_t *c = ctx;
  int rc = 0;
  (void)out;
  for (size_t i = 0; i < t->n && rc == 0; i++)
    rc = digest_add(&c->have[t->bucket], c->seed, t->term, t->tl, t->v[i].url, t->v[i].ulen,
                    t->v[i].hash, t->v[i].count);
  return rc;
}

static int have_bad(void *ctx, dd_buf_t *out, const ix_bad_t *b) {
  check_t *c = ctx;
  (void)out;
  c->have[b->bucket].bad = 1;
  return 0;
}

/* The exact pass: the postings read, and the malformed cells reported */
static int found_term(void *ctx, dd_buf_t *out, const ix_term_t *t) {
  check_t *c = ctx;
  (void)out;
  for (size_t i = 0; i < t->n; i++)
    if (pentry_add(&c->found, t->bucket, t->term, t->tl, t->v[i].url, t->v[i].ulen, t->v[i].hash,
                   t->v[i].count) != 0)
      return 1;
  return 0;
}

static int found_bad(void *ctx, dd_buf_t *out, const ix_bad_t *b) {
  check_t *c = ctx;
  return diff_put(c->k, out, b->table, b->row, b->rl, b->col, b->cl, b->v, b->vl, NULL, 0) != 0;
}

/* The postings of the canonicals whose buckets sel selects, into e. */
static pc_status_t expected_postings(check_t *c, pc_txn_t *txn, const unsigned char *sel,
                                     pentries_t *e, pc_error_t *err) {
  pc_cell_ref_t refs[GET_BATCH];
  pc_value_t vals[GET_BATCH];
  size_t which[GET_BATCH];
  pc_status_t st = PC_OK;
  for (size_t i = 0; i < c->ndocs && st == PC_OK;) {
    size_t n = 0;
    for (; i < c->ndocs && n < GET_BATCH; i++) {
      if (i && memcmp(c->docs[i - 1].hash, c->docs[i].hash, DD_HASH_RAW) == 0) continue;
      refs[n] = (pc_cell_ref_t){DOCS, c->urls.p + c->docs[i].url, c->docs[i].ul, "doc:contents",
                                12};
      which[n++] = i;
    }
    if (!n || (st = pc_txn_get_many(txn, refs, n, vals, err)) != PC_OK) break;
    for (size_t k = 0; k < n; k++) {
      const cdoc_t *d = &c->docs[which[k]];
      if (st == PC_OK && vals[k].value &&
          canonical_terms(NULL, 0, c->urls.p + d->url, d->ul, vals[k].value, vals[k].vlen,
                          d->hash, sel, e) != 0)
        st = oom(err);
      pc_free(vals[k].value);
    }
  }
  return st;
}

/* Reports each posting that differs between found (the index) and want. */
static void postings_diff(checker_t *k, const pentries_t *found, const pentries_t *want) {
  const char *fa = found->arena.p, *wa = want->arena.p;
  char *col = NULL;
  for (size_t a = 0, b = 0; a < found->n || b < want->n;) {
    const pentry_t *x = a < found->n ? &found->v[a] : NULL, *y = b < want->n ? &want->v[b] : NULL;
    int r = !x ? 1 : !y ? -1 : pentry_cmp(x, fa, y, wa);
    const pentry_t *e = r <= 0 ? x : y;
    const char *ea = r <= 0 ? fa : wa;
    if (r != 0 || x->count != y->count) {
      char f[24] = "", w[24] = "", hex[DD_HASH_HEX];
      if (r <= 0) snprintf(f, sizeof f, "%llu", (unsigned long long)x->count);
      if (r >= 0) snprintf(w, sizeof w, "%llu", (unsigned long long)y->count);
      char *nc = realloc(col, e->ul + 1 + DD_HASH_HEX);
      if (!nc) {
        k->failed = 1;
        break;
      }
      col = nc;
      memcpy(col, ea + e->url, e->ul); /* URL, a NUL byte, the hex hash */
      col[e->ul] = '\0';
      dd_hash_hex(e->hash, hex);
      memcpy(col + e->ul + 1, hex, DD_HASH_HEX - 1);
      diff(k, IDX, ea + e->term, e->tl, col, e->ul + DD_HASH_HEX, r <= 0 ? f : NULL, strlen(f),
           r >= 0 ? w : NULL, strlen(w));
    }
    if (r <= 0) a++;
    if (r >= 0) b++;
  }
  free(col);
}

/* The buckets whose digests differ, in groups of at most EXACT_POSTINGS
 * postings: each group's postings read from both sides and compared. */
static pc_status_t exact_pass(check_t *c, pc_txn_t *txn, pc_error_t *err) {
  unsigned char sel[DD_BUCKETS];
  pentries_t want = {0};
  pc_status_t st = PC_OK;
  for (unsigned b = 0; b < DD_BUCKETS && st == PC_OK;) {
    memset(sel, 0, sizeof sel);
    uint64_t postings = 0;
    int any = 0;
    for (; b < DD_BUCKETS; b++) {
      if (digest_same(&c->want[b], &c->have[b])) continue;
      uint64_t n = c->want[b].n + c->have[b].n;
      if (any && postings + n > EXACT_POSTINGS) break;
      sel[b] = 1;
      postings += n;
      any = 1;
    }
    if (!any) break;
    ix_sink_t sink = {found_term, found_bad, c, 1};
    st = expected_postings(c, txn, sel, &want, err);
    if (st == PC_OK) st = ix_read(txn, sel, 1, &sink, stdout, err);
    if (st == PC_OK) {
      if (want.n) qsort_r(want.v, want.n, sizeof *want.v, pentry_sort_cmp, want.arena.p);
      if (c->found.n)
        qsort_r(c->found.v, c->found.n, sizeof *c->found.v, pentry_sort_cmp, c->found.arena.p);
      postings_diff(c->k, &c->found, &want);
    }
    pentries_free(&want);
    pentries_free(&c->found);
  }
  return st;
}

static uint64_t random_seed(void) {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s)
    s = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
  return s;
}

static pc_status_t check(pc_txn_t *txn, checker_t *k, pc_error_t *err) {
  check_t *c = calloc(1, sizeof *c);
  tokenizer_t *tk = calloc(1, sizeof *tk);
  if (!c || !tk) {
    free(c);
    free(tk);
    return oom(err);
  }
  c->k = k;
  c->seed = tk->seed = random_seed();
  pthread_mutex_init(&tk->mu, NULL);
  pthread_cond_init(&tk->cv, NULL);
  pthread_t tt, dt;
  int tk_started = pthread_create(&tt, NULL, tokenizer_main, tk) == 0;
  /* the docs and dups tables in a thread of their own (and the canonicals'
   * terms in the tokenizer's), the index in others */
  docs_pass_t dp = {c, pc_txn_begin_alongside(txn, err), tk_started ? tk : NULL, PC_OK, {0}};
  pc_status_t st = dp.txn ? PC_OK : err->code;
  int started = st == PC_OK && pthread_create(&dt, NULL, docs_main, &dp) == 0;
  if (st == PC_OK && !started) docs_main(&dp); /* no thread: one after the other */
  if (st != PC_OK && tk_started) tokenizer_close(tk);
  ix_sink_t sink = {have_term, have_bad, c, 1};
  if (st == PC_OK) st = ix_read(txn, NULL, ix_default_threads(), &sink, NULL, err);
  if (started) pthread_join(dt, NULL);
  if (tk_started) pthread_join(tt, NULL);
  pc_txn_destroy(dp.txn);
  if (st == PC_OK && dp.st != PC_OK) {
    *err = dp.err;
    st = dp.st;
  }
  if (st == PC_OK && tk->failed) st = oom(err);
  for (unsigned b = 0; b < DD_BUCKETS; b++) { /* the tokenizer's digests into the check's */
    uint64_t lo = c->want[b].lo + tk->want[b].lo;
    c->want[b].hi += tk->want[b].hi + (lo < c->want[b].lo);
    c->want[b].lo = lo;
    c->want[b].n += tk->want[b].n;
  }
  if (st == PC_OK && !k->failed) st = exact_pass(c, txn, err);
  for (size_t i = 0; i < tk->n; i++) tbatch_free(tk->q[(tk->head + i) % TQUEUE]);
  pthread_mutex_destroy(&tk->mu);
  pthread_cond_destroy(&tk->cv);
  free(tk);
  free(c->docs);
  dd_buf_free(&c->urls);
  pentries_free(&c->found);
  free(c);
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
             "versions before buckets wrote it); the index's differences come last, by\n"
             "bucket. It reads the three tables at once, in a thread per core, and holds\n"
             "the documents' URLs and hashes, not the postings (it compares digests of\n"
             "each bucket's postings, and reads again only the buckets that differ).\n"
             "Run it after 'percolator wait': while notifications are pending the\n"
             "derived tables lag behind. Exits 1 when there are differences (counted on\n"
             "stderr).\n",
    .options = "  --json              one JSON object per difference\n",
    .example = "percolator --data /tmp/pc wait && percolator --data /tmp/pc check\n",
};
