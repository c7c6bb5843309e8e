/* corpus.c — pc_bench_corpus: the documents the dedup benchmark
 * (bench/dedup.sh) feeds to both systems, written once in two forms: JSON
 * lines for `percolator load` ({"url": ..., "contents": ...}) and
 * PostgreSQL COPY text (URL TAB contents as bytea hex) for the
 * PostgreSQL side, so that both read exactly the same bytes.
 *
 *   pc_bench_corpus generate --docs N [--seed S] [--vocabulary V]
 *                   --jsonl FILE [--pg FILE] [--stats]
 *     A generated corpus that looks like real text, the same for the same
 *     seed on any machine:
 *       - a vocabulary of V words (20,000): the most frequent are common
 *         English words, the rest pronounceable made-up words that grow
 *         longer as they grow rarer; each word drawn with probability
 *         proportional to 1/rank (Zipf's law, exponent 1, as in English
 *         text);
 *       - documents of 150 to 400 words (uniform), in sentences of 5 to 18
 *         words (capitalised, commas, a full stop) wrapped at 72 columns,
 *         paragraphs of 2 to 5 sentences, and a last line holding the
 *         document's number (a term only that document and its copies have,
 *         which the benchmark's freshness measurement uses);
 *       - 30 % exact duplicates (a copy of a uniformly chosen earlier
 *         document), 10 % near-duplicates (a copy of an earlier document
 *         with one line, never the last, replaced by another line of
 *         words), the rest new; the first 10 documents are new;
 *       - URLs doc/0000000, doc/0000001, ... in order.
 *     --stats prints (to stderr) the words, distinct terms and bytes per
 *     document.
 *
 *   pc_bench_corpus files [--max-bytes B] --jsonl FILE [--pg FILE] DIR...
 *     The regular files under the DIRs (symbolic links are not followed), in
 *     bytewise path order, as documents whose URL is the path without its
 *     leading '/': the contents of each file, decompressed when it is
 *     gzip'ed (zlib), when they are 1..B bytes (65,536), hold no NUL byte and
 *     are valid UTF-8 (what a JSON line carries); the others are counted on
 *     stderr and left out.
 *
 * Exit status 0, or 1 with a message naming the file at fault. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define WHO "pc_bench_corpus"

/* ---- output ---------------------------------------------------------------- */

typedef struct out {
  FILE *jsonl, *pg;
  const char *jsonl_path, *pg_path;
  unsigned long long docs, bytes;
} out_t;

static void json_string(FILE *f, const char *p, size_t n) {
  static const char hex[] = "0123456789abcdef";
  putc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '"' || c == '\\') {
      putc('\\', f);
      putc((int)c, f);
    } else if (c == '\n') {
      fputs("\\n", f);
    } else if (c == '\t') {
      fputs("\\t", f);
    } else if (c < 0x20) {
      fprintf(f, "\\u00%c%c", hex[c >> 4], hex[c & 15]);
    } else {
      putc((int)c, f);
    }
  }
  putc('"', f);
}

/* COPY text format: the URL escaped, a tab, the contents as bytea hex. */
static void pg_line(FILE *f, const char *url, size_t ulen, const char *p, size_t n) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < ulen; i++) {
    unsigned char c = (unsigned char)url[i];
    if (c == '\\' || c == '\t' || c == '\n' || c == '\r') putc('\\', f);
    putc(c == '\t' ? 't' : c == '\n' ? 'n' : c == '\r' ? 'r' : (int)c, f);
  }
  fputs("\t\\\\x", f);
  for (size_t i = 0; i < n; i++) {
    putc(hex[(unsigned char)p[i] >> 4], f);
    putc(hex[(unsigned char)p[i] & 15], f);
  }
  putc('\n', f);
}

static void emit(out_t *o, const char *url, size_t ulen, const char *p, size_t n) {
  fputs("{\"url\": ", o->jsonl);
  json_string(o->jsonl, url, ulen);
  fputs(", \"contents\": ", o->jsonl);
  json_string(o->jsonl, p, n);
  fputs("}\n", o->jsonl);
  if (o->pg) pg_line(o->pg, url, ulen, p, n);
  o->docs++;
  o->bytes += n;
}

static int out_close(out_t *o) {
  int bad = 0;
  if (o->jsonl && (ferror(o->jsonl) | fclose(o->jsonl))) {
    fprintf(stderr, WHO ": %s: %s\n", o->jsonl_path, strerror(errno));
    bad = 1;
  }
  if (o->pg && (ferror(o->pg) | fclose(o->pg))) {
    fprintf(stderr, WHO ": %s: %s\n", o->pg_path, strerror(errno));
    bad = 1;
  }
  return bad;
}

static int out_open(out_t *o, const char *jsonl, const char *pg) {
  *o = (out_t){0};
  o->jsonl_path = jsonl;
  o->pg_path = pg;
  if (!jsonl) {
    fprintf(stderr, WHO ": --jsonl FILE is required\n");
    return -1;
  }
  if (!(o->jsonl = fopen(jsonl, "w"))) {
    fprintf(stderr, WHO ": %s: %s\n", jsonl, strerror(errno));
    return -1;
  }
  if (pg && !(o->pg = fopen(pg, "w"))) {
    fprintf(stderr, WHO ": %s: %s\n", pg, strerror(errno));
    fclose(o->jsonl);
    return -1;
  }
  return 0;
}

/* ---- a growable text ---------------------------------------------------------- */

typedef struct text {
  char *p;
  size_t n, cap;
} text_t;

static void text_put(text_t *t, const char *s, size_t n) {
  if (t->n + n + 1 > t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 4096;
    while (nc < t->n + n + 1) nc *= 2;
    char *np = realloc(t->p, nc);
    if (!np) {
      fprintf(stderr, WHO ": out of memory\n");
      exit(1);
    }
    t->p = np;
    t->cap = nc;
  }
  memcpy(t->p + t->n, s, n);
  t->n += n;
  t->p[t->n] = '\0';
}

/* ---- random numbers: splitmix64, one stream per document --------------------- */

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { return (double)(mix(s) >> 11) / 9007199254740992.0; }
static uint64_t below(uint64_t *s, uint64_t n) { return mix(s) % n; }

/* ---- the vocabulary ------------------------------------------------------------ */

/* The most frequent English words, most frequent first: the head of the
 * distribution, where real text spends half its words. */
static const char *const common[] = {
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "i", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "they", "you", "were", "her", "she", "there", "one", "all", "we", "their",
    "been", "has", "would", "when", "if", "more", "will", "so", "no", "what", "up", "out", "who",
    "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "could",
    "these", "two", "may", "first", "then", "do", "any", "like", "my", "now", "over", "such",
    "our", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must",
    "through", "back", "years", "where", "much", "your", "way", "well", "down", "should",
    "because", "each", "just", "those", "people", "how", "too", "little", "state", "good",
    "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here",
    "between", "both", "life", "being", "under", "never", "day", "same", "another", "know",
    "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against",
    "go", "came", "right", "used", "take", "three", "system", "data", "file", "software",
    "license", "free", "program", "source", "copyright", "version", "use", "under", "terms"};

static const char *const onsets[] = {"b",  "c",  "d",  "f",  "g",  "h",  "j",  "k",  "l",
                                     "m",  "n",  "p",  "r",  "s",  "t",  "v",  "w",  "st",
                                     "tr", "pl", "gr", "br", "ch", "sh", "th", "cr", "fl"};
static const char *const vowels[] = {"a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "e", "a"};
static const char *const codas[] = {"", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck", "ng"};
static const char *const suffixes[] = {"", "", "", "", "", "tion", "ing", "ed", "er", "ly", "ment", "s"};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef struct vocab {
  char **w;
  size_t n;
  double *cdf; /* cdf[r]: probability of ranks 0..r */
} vocab_t;

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* An open-addressing set of the words made so far, for uniqueness. */
typedef struct wset {
  const char **slot;
  size_t cap;
} wset_t;

static int wset_add(wset_t *s, const char *w) {
  size_t i = str_hash(w) & (s->cap - 1);
  for (; s->slot[i]; i = (i + 1) & (s->cap - 1))
    if (strcmp(s->slot[i], w) == 0) return 0;
  s->slot[i] = w;
  return 1;
}

static void vocab_make(vocab_t *v, size_t n, uint64_t seed) {
  v->n = n;
  v->w = calloc(n, sizeof *v->w);
  v->cdf = calloc(n, sizeof *v->cdf);
  wset_t set = {calloc(4 * n + 16, sizeof(char *)), 1};
  while (set.cap < 4 * n + 16) set.cap *= 2;
  set.slot = realloc(set.slot, set.cap * sizeof(char *));
  if (!v->w || !v->cdf || !set.slot) {
    fprintf(stderr, WHO ": out of memory\n");
    exit(1);
  }
  memset(set.slot, 0, set.cap * sizeof(char *));
  uint64_t rng = seed ^ 0x766f636162756c61ull; /* "vocabula" */
  size_t r = 0;
  for (size_t k = 0; k < NELEM(common) && r < n; k++) {
    char *w = strdup(common[k]);
    if (!w) exit(1);
    if (wset_add(&set, w)) v->w[r++] = w;
    else free(w);
  }
  while (r < n) {
    /* rarer words are longer: mostly 1..2 syllables near the head, up to 3 in the tail */
    double tail = (double)r / (double)n;
    int syl = 1 + (uniform(&rng) < 0.4 + 0.4 * tail) + (uniform(&rng) < 0.3 * tail);
    char buf[64] = "";
    for (int k = 0; k < syl; k++) {
      strcat(buf, onsets[below(&rng, NELEM(onsets))]);
      strcat(buf, vowels[below(&rng, NELEM(vowels))]);
      strcat(buf, codas[below(&rng, NELEM(codas))]);
    }
    strcat(buf, suffixes[below(&rng, NELEM(suffixes))]);
    char *w = strdup(buf);
    if (!w) exit(1);
    if (wset_add(&set, w)) v->w[r++] = w;
    else free(w);
  }
  free(set.slot);
  double sum = 0;
  for (size_t k = 0; k < n; k++) sum += 1.0 / (double)(k + 1);
  double acc = 0;
  for (size_t k = 0; k < n; k++) {
    acc += 1.0 / (double)(k + 1) / sum;
    v->cdf[k] = acc;
  }
  v->cdf[n - 1] = 1.0;
}

static const char *vocab_draw(const vocab_t *v, uint64_t *rng) {
  double u = uniform(rng);
  size_t lo = 0, hi = v->n - 1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v->cdf[mid] < u) lo = mid + 1;
    else hi = mid;
  }
  return v->w[lo];
}

/* ---- documents ------------------------------------------------------------------ */

enum kind { NEW, COPY, NEAR };

typedef struct gen {
  vocab_t v;
  uint64_t seed;
  unsigned char *kind;
  uint32_t *src;
} gen_t;

static uint64_t doc_rng(const gen_t *g, size_t i, uint64_t salt) {
  uint64_t s = g->seed * 0x2545f4914f6cdd1dull + i * 0x9e3779b97f4a7c15ull + salt;
  (void)mix(&s);
  return s;
}

#define WRAP 72

/* Appends a word to t, wrapping at WRAP columns; *col is the current column. */
static void put_word(text_t *t, size_t *col, const char *w, size_t n) {
  if (*col > 0 && *col + 1 + n > WRAP) {
    text_put(t, "\n", 1);
    *col = 0;
  } else if (*col > 0) {
    text_put(t, " ", 1);
    (*col)++;
  }
  text_put(t, w, n);
  *col += n;
}

/* A new document: sentences wrapped into lines, paragraphs, and its number. */
static void doc_new(const gen_t *g, size_t i, text_t *t) {
  uint64_t rng = doc_rng(g, i, 1);
  size_t words = 150 + (size_t)below(&rng, 251), col = 0, in_par = 0;
  size_t par_len = 2 + (size_t)below(&rng, 4);
  while (words > 0) {
    size_t len = 5 + (size_t)below(&rng, 14);
    if (len > words) len = words;
    for (size_t k = 0; k < len; k++) {
      char w[80];
      snprintf(w, sizeof w, "%s", vocab_draw(&g->v, &rng));
      if (k == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = (char)(w[0] - 'a' + 'A');
      size_t n = strlen(w);
      if (k + 1 == len) w[n++] = '.';
      else if (uniform(&rng) < 0.08) w[n++] = ',';
      w[n] = '\0';
      put_word(t, &col, w, n);
    }
    words -= len;
    if (++in_par == par_len && words > 0) {
      text_put(t, "\n\n", 2);
      col = 0;
      in_par = 0;
      par_len = 2 + (size_t)below(&rng, 4);
    }
  }
  char num[32];
  int n = snprintf(num, sizeof num, "\n\n%zu\n", i);
  text_put(t, num, (size_t)n);
}

static void doc_contents(const gen_t *g, size_t i, text_t *t);

/* A copy of document src[i] with one line (not the last) replaced. */
static void doc_near(const gen_t *g, size_t i, text_t *t) {
  text_t base = {0};
  doc_contents(g, g->src[i], &base);
  size_t lines = 0;
  for (size_t k = 0; k < base.n; k++) lines += base.p[k] == '\n';
  /* the last two lines are the blank line and the number: pick a text line */
  uint64_t rng = doc_rng(g, i, 2);
  size_t target = lines > 3 ? (size_t)below(&rng, lines - 2) : 0, line = 0, k = 0;
  for (; k < base.n && line < target; k++) line += base.p[k] == '\n';
  size_t start = k, end = k;
  while (end < base.n && base.p[end] != '\n') end++;
  text_put(t, base.p, start);
  size_t col = 0, want = 6 + (size_t)below(&rng, 7);
  for (size_t w = 0; w < want; w++) {
    const char *word = vocab_draw(&g->v, &rng);
    put_word(t, &col, word, strlen(word));
  }
  text_put(t, base.p + end, base.n - end);
  free(base.p);
}

static void doc_contents(const gen_t *g, size_t i, text_t *t) {
  switch (g->kind[i]) {
    case COPY: doc_contents(g, g->src[i], t); break;
    case NEAR: doc_near(g, i, t); break;
    default: doc_new(g, i, t); break;
  }
}

/* distinct terms of p[0..n), as the dedup application tokenises (ASCII
 * letters folded, runs of [a-z0-9]): for --stats */
static size_t distinct_terms(const char *p, size_t n, wset_t *set, char *scratch) {
  memset(set->slot, 0, set->cap * sizeof(char *));
  size_t d = 0, at = 0;
  for (size_t i = 0; i < n;) {
    while (i < n && !((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'z') && !(p[i] >= '0' && p[i] <= '9')) i++;
    if (i >= n) break;
    char *w = scratch + at;
    size_t len = 0;
    while (i < n && (((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'z') || (p[i] >= '0' && p[i] <= '9')))
      w[len++] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] | 0x20 : p[i]), i++;
    w[len] = '\0';
    at += len + 1;
    d += (size_t)wset_add(set, w);
  }
  return d;
}

static int generate(size_t docs, uint64_t seed, size_t vocabulary, out_t *o, int stats) {
  gen_t g = {.seed = seed};
  vocab_make(&g.v, vocabulary, seed);
  g.kind = calloc(docs ? docs : 1, 1);
  g.src = calloc(docs ? docs : 1, sizeof *g.src);
  if (!g.kind || !g.src) {
    fprintf(stderr, WHO ": out of memory\n");
    return 1;
  }
  uint64_t rng = seed ^ 0x636f72707573ull; /* "corpus" */
  for (size_t i = 0; i < docs; i++) {
    double r = uniform(&rng);
    uint32_t j = (uint32_t)below(&rng, i ? i : 1);
    if (i < 10 || r >= 0.40) g.kind[i] = NEW;
    else g.kind[i] = r < 0.30 ? COPY : NEAR;
    g.src[i] = j;
  }
  text_t t = {0};
  wset_t set = {NULL, 1 << 12};
  char *scratch = NULL;
  double words = 0, terms = 0;
  if (stats && (!(set.slot = calloc(set.cap, sizeof(char *))) || !(scratch = malloc(1 << 16)))) {
    fprintf(stderr, WHO ": out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < docs; i++) {
    t.n = 0;
    doc_contents(&g, i, &t);
    char url[32];
    int ul = snprintf(url, sizeof url, "doc/%07zu", i);
    emit(o, url, (size_t)ul, t.p, t.n);
    if (stats) {
      for (size_t k = 0; k < t.n; k++) words += t.p[k] == ' ' || t.p[k] == '\n';
      terms += (double)distinct_terms(t.p, t.n, &set, scratch);
    }
  }
  if (stats && docs)
    fprintf(stderr, "%zu documents: %.1f words, %.1f distinct terms, %.1f bytes each\n", docs,
            words / (double)docs, terms / (double)docs, (double)o->bytes / (double)docs);
  free(t.p);
  free(set.slot);
  free(scratch);
  free(g.kind);
  free(g.src);
  for (size_t k = 0; k < g.v.n; k++) free(g.v.w[k]);
  free(g.v.w);
  free(g.v.cdf);
  return 0;
}

/* ---- the machine's files ----------------------------------------------------------- */

typedef struct paths {
  char **v;
  size_t n, cap;
} paths_t;

static int path_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk(const char *dir, paths_t *ps) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, WHO ": %s: %s\n", dir, strerror(errno));
    return -1;
  }
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *p;
    if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) return -1;
    struct stat st;
    if (lstat(p, &st) != 0) {
      free(p);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      rc = walk(p, ps);
      free(p);
    } else if (S_ISREG(st.st_mode)) {
      if (ps->n == ps->cap) {
        ps->cap = ps->cap ? ps->cap * 2 : 1024;
        char **nv = realloc(ps->v, ps->cap * sizeof *nv);
        if (!nv) return -1;
        ps->v = nv;
      }
      ps->v[ps->n++] = p;
    } else {
      free(p);
    }
  }
  closedir(d);
  return rc;
}

/* Whether p[0..n) is valid UTF-8 (no overlong forms, no surrogates). */
static int utf8_valid(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (i + len > n) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return 0;
    i += len;
  }
  return 1;
}

static int files(char **roots, int nroots, size_t max_bytes, out_t *o) {
  paths_t ps = {0};
  for (int r = 0; r < nroots; r++)
    if (walk(roots[r], &ps) != 0) return 1;
  if (ps.n) qsort(ps.v, ps.n, sizeof *ps.v, path_cmp);
  size_t big = 0, empty = 0, binary = 0, unreadable = 0;
  char *buf = malloc(max_bytes + 1);
  if (!buf) return 1;
  for (size_t i = 0; i < ps.n; i++) {
    if (i > 0 && strcmp(ps.v[i], ps.v[i - 1]) == 0) continue; /* a root named twice */
    /* gzread reads a file that is not compressed as it is */
    gzFile f = gzopen(ps.v[i], "rb");
    size_t n = 0;
    int bad = !f;
    while (f && n <= max_bytes) {
      int got = gzread(f, buf + n, (unsigned)(max_bytes + 1 - n));
      if (got < 0) bad = 1;
      if (got <= 0) break;
      n += (size_t)got;
    }
    if (f) gzclose(f);
    const char *url = ps.v[i];
    while (*url == '/') url++;
    if (bad) unreadable++;
    else if (n == 0) empty++;
    else if (n > max_bytes) big++;
    else if (memchr(buf, '\0', n) || !utf8_valid((unsigned char *)buf, n)) binary++;
    else emit(o, url, strlen(url), buf, n);
  }
  fprintf(stderr,
          WHO ": %llu documents (%llu bytes) of %zu files; left out: %zu larger than %zu bytes, "
          "%zu empty, %zu not UTF-8 text, %zu unreadable or corrupt\n",
          o->docs, o->bytes, ps.n, big, max_bytes, empty, binary, unreadable);
  for (size_t i = 0; i < ps.n; i++) free(ps.v[i]);
  free(ps.v);
  free(buf);
  return 0;
}

/* ---- main ---------------------------------------------------------------------------- */

static int usage(void) {
  fprintf(stderr,
          "usage: " WHO " generate --docs N [--seed S] [--vocabulary V] --jsonl FILE [--pg FILE] "
          "[--stats]\n"
          "       " WHO " files [--max-bytes B] --jsonl FILE [--pg FILE] DIR...\n");
  return 2;
}

static int parse_size(const char *opt, const char *s, unsigned long long lo, unsigned long long *v) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || *end || !*s || x < lo || s[0] == '-') {
    fprintf(stderr, WHO ": %s: expected a whole number >= %llu, got '%s'\n", opt, lo, s);
    return -1;
  }
  *v = x;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  const char *mode = argv[1];
  enum { O_DOCS = 1, O_SEED, O_VOCAB, O_JSONL, O_PG, O_STATS, O_MAX };
  static const struct option opts[] = {
      {"docs", required_argument, NULL, O_DOCS},   {"seed", required_argument, NULL, O_SEED},
      {"vocabulary", required_argument, NULL, O_VOCAB},
      {"jsonl", required_argument, NULL, O_JSONL}, {"pg", required_argument, NULL, O_PG},
      {"stats", no_argument, NULL, O_STATS},
      {"max-bytes", required_argument, NULL, O_MAX}, {0, 0, 0, 0}};
  unsigned long long docs = 0, seed = 42, vocab = 20000, max_bytes = 65536;
  const char *jsonl = NULL, *pg = NULL;
  int stats = 0, c, have_docs = 0;
  optind = 2;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case O_DOCS: bad = parse_size("--docs", optarg, 1, &docs); have_docs = 1; break;
      case O_SEED: bad = parse_size("--seed", optarg, 0, &seed); break;
      case O_VOCAB: bad = parse_size("--vocabulary", optarg, NELEM(common), &vocab); break;
      case O_JSONL: jsonl = optarg; break;
      case O_PG: pg = optarg; break;
      case O_STATS: stats = 1; break;
      case O_MAX: bad = parse_size("--max-bytes", optarg, 1, &max_bytes); break;
      default: return usage();
    }
    if (bad) return 2;
  }
  if (optind < argc && strcmp(mode, "files") != 0) {
    fprintf(stderr, WHO ": unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  out_t o;
  int rc;
  if (strcmp(mode, "generate") == 0) {
    if (!have_docs) return usage();
    if (docs > UINT32_MAX) {
      fprintf(stderr, WHO ": --docs: at most %u\n", UINT32_MAX);
      return 2;
    }
    if (out_open(&o, jsonl, pg) != 0) return 1;
    rc = generate((size_t)docs, seed, (size_t)vocab, &o, stats);
  } else if (strcmp(mode, "files") == 0) {
    if (optind >= argc) return usage();
    if (out_open(&o, jsonl, pg) != 0) return 1;
    rc = files(argv + optind, argc - optind, (size_t)max_bytes, &o);
  } else {
    return usage();
  }
  return out_close(&o) || rc ? 1 : 0;
}
