/* prom_check.c — checks that its standard input is valid Prometheus text
 * exposition format (version 0.0.4), as a scraper reads it, and exits 0, or
 * 1 after printing each fault with its line number. What it checks:
 *   - every line is a "# HELP name text", a "# TYPE name type", another
 *     comment, or a sample "name[{labels}] value [timestamp]";
 *   - metric and label names match [a-zA-Z_:][a-zA-Z0-9_:]* (labels without
 *     ':'), label values are quoted with only \\ \" \n escapes, HELP text
 *     only \\ and \n escapes, values are floats, NaN or +Inf/-Inf;
 *   - HELP and TYPE at most once per family, TYPE before the family's
 *     samples, the samples of a family together, no series twice;
 *   - counters are not negative;
 *   - Prometheus' conventions: families in base units (no _ms, _us, _ns,
 *     _minutes...), and no value above 2^53, which a float holds only with
 *     its low bits lost (a 64-bit timestamp exported whole);
 *   - a histogram's series (name_bucket, name_sum, name_count) per label set:
 *     buckets in increasing le with cumulative, non-decreasing counts, one
 *     le="+Inf" bucket whose count equals name_count.
 * Usage: prom_check [NAME] < metrics.txt (NAME labels the messages). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE 65536
#define MAX_SERIES 4096
#define MAX_FAMILIES 512

static const char *source = "stdin";
static int faults;
static unsigned long lineno;

static void fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fault(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s:%lu: ", source, lineno);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  faults++;
}

typedef struct family {
  char name[256];
  char type[16];
  int help, typed, sampled, closed;
} family_t;

static family_t families[MAX_FAMILIES];
static size_t nfamilies;
static char *series[MAX_SERIES];
static size_t nseries;

/* A histogram's label set (without le) and what its series said. */
typedef struct hist {
  char key[800]; /* family name + labels */
  double last_le;
  double last_count;
  int buckets, has_inf;
  double inf_count;
  int has_count;
  double count;
} hist_t;

static hist_t hists[MAX_SERIES];
static size_t nhists;

static int name_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
static int name_char(int c) { return name_start(c) || (c >= '0' && c <= '9'); }

/* Reads a metric or label name at *p; returns its length (0: none). */
static size_t read_name(const char *p, int colon_ok) {
  size_t n = 0;
  if (!name_start((unsigned char)p[0]) || (!colon_ok && p[0] == ':')) return 0;
  while (name_char((unsigned char)p[n]) && (colon_ok || p[n] != ':')) n++;
  return n;
}

static int parse_value(const char *s, double *v) {
  if (strcmp(s, "NaN") == 0) return *v = NAN, 0;
  if (strcmp(s, "+Inf") == 0) return *v = INFINITY, 0;
  if (strcmp(s, "-Inf") == 0) return *v = -INFINITY, 0;
  char *end;
  *v = strtod(s, &end);
  if (end == s || *end) return -1;
  /* strtod reads "inf", "nan", hex: the format does not */
  for (const char *p = s; *p; p++)
    if (!strchr("0123456789+-.eE", *p)) return -1;
  return 0;
}

static family_t *family(const char *name) {
  for (size_t i = 0; i < nfamilies; i++)
    if (strcmp(families[i].name, name) == 0) return &families[i];
  if (nfamilies == MAX_FAMILIES) return NULL;
  family_t *f = &families[nfamilies++];
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  return f;
}

/* The family a sample name belongs to: name itself, or for a histogram
 * (summary) the name without _bucket/_sum/_count. */
static family_t *family_of(const char *name, const char **suffix) {
  static const char *const sfx[] = {"_bucket", "_sum", "_count"};
  *suffix = "";
  for (size_t i = 0; i < 3; i++) {
    size_t n = strlen(name), k = strlen(sfx[i]);
    if (n > k && strcmp(name + n - k, sfx[i]) == 0) {
      char base[256];
      snprintf(base, sizeof base, "%.*s", (int)(n - k), name);
      for (size_t j = 0; j < nfamilies; j++)
        if (strcmp(families[j].name, base) == 0 && (strcmp(families[j].type, "histogram") == 0 ||
                                                    strcmp(families[j].type, "summary") == 0)) {
          *suffix = sfx[i];
          return &families[j];
        }
    }
  }
  return family(name);
}

static family_t *current; /* the family of the last sample */

static void check_help(const char *p) {
  size_t n = read_name(p, 1);
  if (!n) {
    fault("HELP without a valid metric name");
    return;
  }
  char name[256];
  snprintf(name, sizeof name, "%.*s", (int)n, p);
  if (p[n] != ' ' && p[n] != '\0') {
    fault("HELP %s: a space must follow the name", name);
    return;
  }
  for (const char *q = p + n; *q; q++)
    if (*q == '\\' && q[1] != '\\' && q[1] != 'n') {
      fault("HELP %s: bad escape (only \\\\ and \\n)", name);
      return;
    } else if (*q == '\\')
      q++;
  family_t *f = family(name);
  if (!f) return;
  if (f->help++) fault("HELP %s given twice", name);
  if (f->sampled) fault("HELP %s after its samples", name);
}

/* Prometheus' naming conventions: base units (seconds, bytes), so no
 * family is named in milliseconds, microseconds or nanoseconds. */
static void check_unit(const char *name) {
  static const char *const bad[] = {"_ms", "_milliseconds", "_us", "_microseconds", "_ns",
                                     "_nanoseconds", "_minutes", "_hours", "_kb", "_mb"};
  size_t n = strlen(name);
  for (const char *const *b = bad; b < bad + sizeof bad / sizeof bad[0]; b++) {
    size_t k = strlen(*b);
    for (size_t at = 0; at + k <= n; at++)
      if (strncmp(name + at, *b, k) == 0 && (name[at + k] == '\0' || name[at + k] == '_')) {
        fault("%s: named in %s: use the base unit (_seconds, _bytes)", name, *b + 1);
        return;
      }
  }
}

static void check_type(const char *p) {
  size_t n = read_name(p, 1);
  if (!n) {
    fault("TYPE without a valid metric name");
    return;
  }
  char name[256];
  snprintf(name, sizeof name, "%.*s", (int)n, p);
  const char *t = p + n;
  if (*t != ' ') {
    fault("TYPE %s: no type", name);
    return;
  }
  t++;
  if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
      strcmp(t, "summary") && strcmp(t, "untyped")) {
    fault("TYPE %s: unknown type '%s'", name, t);
    return;
  }
  family_t *f = family(name);
  if (!f) return;
  check_unit(name);
  if (f->typed++) fault("TYPE %s given twice", name);
  if (f->sampled) fault("TYPE %s after its samples", name);
  snprintf(f->type, sizeof f->type, "%s", t);
}

static hist_t *hist(const char *key) {
  for (size_t i = 0; i < nhists; i++)
    if (strcmp(hists[i].key, key) == 0) return &hists[i];
  if (nhists == MAX_SERIES) return NULL;
  hist_t *h = &hists[nhists++];
  memset(h, 0, sizeof *h);
  snprintf(h->key, sizeof h->key, "%s", key);
  h->last_le = -INFINITY;
  return h;
}

static void check_sample(const char *p) {
  size_t n = read_name(p, 1);
  if (!n) {
    fault("a sample without a valid metric name: '%s'", p);
    return;
  }
  char name[256], labels[512] = "", le[256] = "";
  snprintf(name, sizeof name, "%.*s", (int)n, p);
  const char *q = p + n;
  int has_le = 0;
  if (*q == '{') {
    q++;
    size_t ll = 0;
    while (*q != '}') {
      size_t k = read_name(q, 0);
      if (!k) {
        fault("%s: bad label name at '%s'", name, q);
        return;
      }
      char lname[128];
      snprintf(lname, sizeof lname, "%.*s", (int)k, q);
      q += k;
      if (q[0] != '=' || q[1] != '"') {
        fault("%s: label %s: expected =\"", name, lname);
        return;
      }
      q += 2;
      char value[256];
      size_t vl = 0;
      while (*q && *q != '"') {
        if (*q == '\\') {
          if (q[1] != '\\' && q[1] != '"' && q[1] != 'n') {
            fault("%s: label %s: bad escape (only \\\\ \\\" \\n)", name, lname);
            return;
          }
          q++;
        }
        if (vl + 1 < sizeof value) value[vl++] = *q;
        q++;
      }
      value[vl] = '\0';
      if (*q != '"') {
        fault("%s: label %s: unterminated value", name, lname);
        return;
      }
      q++;
      if (strcmp(lname, "le") == 0) {
        has_le = 1;
        snprintf(le, sizeof le, "%s", value);
      } else {
        ll += (size_t)snprintf(labels + ll, ll < sizeof labels ? sizeof labels - ll : 0, "%s=%s,",
                               lname, value);
      }
      if (*q == ',')
        q++;
      else if (*q != '}') {
        fault("%s: expected ',' or '}' after label %s", name, lname);
        return;
      }
    }
    q++;
  }
  if (*q != ' ') {
    fault("%s: expected a space before the value", name);
    return;
  }
  q++;
  char vbuf[300];
  size_t vl = strcspn(q, " ");
  snprintf(vbuf, sizeof vbuf, "%.*s", (int)vl, q);
  double v;
  if (parse_value(vbuf, &v) != 0) {
    fault("%s: bad value '%s'", name, vbuf);
    return;
  }
  /* a float holds integers exactly up to 2^53: a value above that (a 64-bit
   * timestamp, say) has lost its low bits */
  if (isfinite(v) && fabs(v) > 9007199254740992.0)
    fault("%s: value %s is above 2^53: a float loses its low bits (split it, or use a "
          "base unit)", name, vbuf);
  if (q[vl] == ' ') {
    const char *ts = q + vl + 1;
    if (!*ts || strspn(ts, "-0123456789") != strlen(ts)) {
      fault("%s: bad timestamp '%s'", name, ts);
      return;
    }
  }
  /* the series, once */
  char key[1100];
  snprintf(key, sizeof key, "%s{%s%s%s}", name, labels, has_le ? "le=" : "", le);
  for (size_t i = 0; i < nseries; i++)
    if (strcmp(series[i], key) == 0) {
      fault("series %s given twice", key);
      return;
    }
  if (nseries < MAX_SERIES) series[nseries++] = strdup(key);
  const char *suffix;
  family_t *f = family_of(name, &suffix);
  if (!f) return;
  if (f != current) {
    if (f->closed) fault("samples of %s are not together", f->name);
    if (current) current->closed = 1;
    current = f;
  }
  f->sampled = 1;
  if (!f->typed) return; /* untyped */
  if (strcmp(f->type, "counter") == 0 && !(v >= 0)) fault("counter %s is negative or NaN", name);
  if (strcmp(f->type, "histogram") != 0) return;
  char hkey[800];
  snprintf(hkey, sizeof hkey, "%s{%s}", f->name, labels);
  hist_t *h = hist(hkey);
  if (!h) return;
  if (strcmp(suffix, "_bucket") == 0) {
    double bound;
    if (!has_le || parse_value(le, &bound) != 0) {
      fault("%s: a bucket needs le=\"number\"", name);
      return;
    }
    if (h->has_inf) fault("%s: a bucket after le=\"+Inf\"", hkey);
    if (!(bound > h->last_le)) fault("%s: buckets not in increasing le (le=\"%s\")", hkey, le);
    if (h->buckets && v < h->last_count)
      fault("%s: bucket le=\"%s\" counts fewer than the one before (buckets are cumulative)", hkey,
            le);
    h->last_le = bound;
    h->last_count = v;
    h->buckets++;
    if (isinf(bound)) {
      h->has_inf = 1;
      h->inf_count = v;
    }
  } else if (strcmp(suffix, "_count") == 0) {
    h->has_count = 1;
    h->count = v;
  } else if (strcmp(suffix, "") == 0) {
    fault("histogram %s: a sample without _bucket, _sum or _count", name);
  }
}

int main(int argc, char **argv) {
  if (argc > 1) source = argv[1];
  static char line[MAX_LINE];
  unsigned long samples = 0;
  while (fgets(line, sizeof line, stdin)) {
    lineno++;
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n')
      line[--n] = '\0';
    else if (!feof(stdin))
      fault("line too long");
    if (n == 0) continue;
    if (strncmp(line, "# HELP ", 7) == 0)
      check_help(line + 7);
    else if (strncmp(line, "# TYPE ", 7) == 0)
      check_type(line + 7);
    else if (line[0] == '#')
      continue;
    else {
      check_sample(line);
      samples++;
    }
  }
  lineno = 0;
  for (size_t i = 0; i < nhists; i++) {
    hist_t *h = &hists[i];
    if (!h->has_inf) fault("histogram %s has no le=\"+Inf\" bucket", h->key);
    if (!h->has_count) fault("histogram %s has no _count", h->key);
    if (h->has_inf && h->has_count && h->inf_count != h->count) {
      char a[64];
      snprintf(a, sizeof a, "%.17g vs %.17g", h->inf_count, h->count);
      fault("histogram %s: le=\"+Inf\" bucket differs from _count (%s)", h->key, a);
    }
  }
  for (size_t i = 0; i < nseries; i++) free(series[i]);
  if (faults) {
    fprintf(stderr, "%s: %d fault%s\n", source, faults, faults == 1 ? "" : "s");
    return 1;
  }
  printf("%s: %lu samples, %zu families: valid\n", source, samples, nfamilies);
  return 0;
}
