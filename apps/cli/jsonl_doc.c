/* jsonl_doc.c — reads a JSON line of string members for `percolator load`
 * without jansson's tree, and declines any other line (jsonl_doc.h). The
 * rules it holds are jansson's with JSON_ALLOW_NUL (RFC 8259's grammar,
 * strict UTF-8, "\u0000" allowed in values); where a rule would need more
 * than a few lines here (escapes in a member's name, a name given twice),
 * the line is declined rather than judged. */
#include "apps/cli/jsonl_doc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *p, size_t n, size_t i) {
  while (i < n && ws(p[i])) i++;
  return i;
}

static int hex4(const char *p, uint32_t *v) {
  *v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p[k];
    uint32_t x;
    if (c >= '0' && c <= '9') x = (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') x = (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') x = (uint32_t)(c - 'A' + 10);
    else return -1;
    *v = *v << 4 | x;
  }
  return 0;
}

/* The length of the UTF-8 sequence at p[0..n) (its first byte >= 0x80), or
 * 0 when it is not one: a stray continuation byte, an overlong form, a
 * surrogate, a code point above U+10FFFF or a sequence cut short. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  size_t len;
  uint32_t v;
  if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07;
  else return 0;
  if (n < len) return 0;
  for (size_t k = 1; k < len; k++) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    v = v << 6 | (p[k] & 0x3F);
  }
  if ((len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || (v >= 0xD800 && v <= 0xDFFF) ||
      v > 0x10FFFF)
    return 0;
  return len;
}

static size_t put_utf8(char *o, uint32_t v) {
  if (v < 0x80) {
    o[0] = (char)v;
    return 1;
  }
  if (v < 0x800) {
    o[0] = (char)(0xC0 | v >> 6);
    o[1] = (char)(0x80 | (v & 0x3F));
    return 2;
  }
  if (v < 0x10000) {
    o[0] = (char)(0xE0 | v >> 12);
    o[1] = (char)(0x80 | (v >> 6 & 0x3F));
    o[2] = (char)(0x80 | (v & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | v >> 18);
  o[1] = (char)(0x80 | (v >> 12 & 0x3F));
  o[2] = (char)(0x80 | (v >> 6 & 0x3F));
  o[3] = (char)(0x80 | (v & 0x3F));
  return 4;
}

/* The string whose opening quote is p[*i]: decoded into out (NULL: only
 * checked), its length in *olen, *i moved past the closing quote. A name
 * (name != 0) with an escape or a NUL is declined. 0, or -1 to decline. */
static int string_at(const char *p, size_t n, size_t *i, char *out, size_t *olen, int name) {
  size_t k = *i + 1, o = 0;
  for (;;) {
    size_t run = k;
    while (run < n) {
      unsigned char c = (unsigned char)p[run];
      if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) break;
      run++;
    }
    if (out && run > k) memcpy(out + o, p + k, run - k);
    o += run - k;
    k = run;
    if (k >= n) return -1; /* no closing quote */
    unsigned char c = (unsigned char)p[k];
    if (c == '"') break;
    if (c < 0x20) return -1; /* a control character: jansson refuses it */
    if (c >= 0x80) {
      size_t len = utf8_len((const unsigned char *)p + k, n - k);
      if (!len) return -1;
      if (out) memcpy(out + o, p + k, len);
      o += len;
      k += len;
      continue;
    }
    /* an escape */
    if (name || k + 1 >= n) return -1;
    char e = p[k + 1], ch;
    switch (e) {
      case '"': ch = '"'; break;
      case '\\': ch = '\\'; break;
      case '/': ch = '/'; break;
      case 'b': ch = '\b'; break;
      case 'f': ch = '\f'; break;
      case 'n': ch = '\n'; break;
      case 'r': ch = '\r'; break;
      case 't': ch = '\t'; break;
      case 'u': {
        uint32_t v, lo;
        if (k + 6 > n || hex4(p + k + 2, &v) != 0) return -1;
        k += 6;
        if (v >= 0xDC00 && v <= 0xDFFF) return -1; /* a low surrogate alone */
        if (v >= 0xD800 && v <= 0xDBFF) {          /* its low half must follow */
          if (k + 6 > n || p[k] != '\\' || p[k + 1] != 'u' || hex4(p + k + 2, &lo) != 0 ||
              lo < 0xDC00 || lo > 0xDFFF)
            return -1;
          k += 6;
          v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        }
        char u[4];
        size_t ul = put_utf8(u, v);
        if (out) memcpy(out + o, u, ul);
        o += ul;
        continue;
      }
      default: return -1;
    }
    if (out) out[o] = ch;
    o++;
    k += 2;
  }
  *i = k + 1;
  *olen = o;
  return 0;
}

int jsonl_doc_read(const char *line, size_t n, jsonl_doc_t *d) {
  d->url = d->contents = NULL;
  d->url_len = d->contents_len = 0;
  /* a decoded string is never longer than its text */
  if (d->cap < n + 1) {
    char *m = realloc(d->mem, n + 1);
    if (!m) return -1;
    d->mem = m;
    d->cap = n + 1;
  }
  size_t i = skip_ws(line, n, 0), used = 0, url_at = 0, contents_at = 0;
  int have_url = 0, have_contents = 0;
  if (i >= n || line[i] != '{') return 0;
  i = skip_ws(line, n, i + 1);
  if (i < n && line[i] == '}') {
    i++;
  } else {
    for (;;) {
      if (i >= n || line[i] != '"') return 0;
      size_t name_at = i + 1, name_len;
      if (string_at(line, n, &i, NULL, &name_len, 1) != 0) return 0;
      /* no escape in a name: its text is its value */
      const char *name = line + name_at;
      i = skip_ws(line, n, i);
      if (i >= n || line[i] != ':') return 0;
      i = skip_ws(line, n, i + 1);
      if (i >= n || line[i] != '"') return 0; /* only strings on this path */
      int is_url = name_len == 3 && memcmp(name, "url", 3) == 0;
      int is_contents = name_len == 8 && memcmp(name, "contents", 8) == 0;
      if ((is_url && have_url) || (is_contents && have_contents)) return 0; /* named twice */
      size_t len;
      char *out = is_url || is_contents ? d->mem + used : NULL;
      if (string_at(line, n, &i, out, &len, 0) != 0) return 0;
      if (is_url) have_url = 1, url_at = used, d->url_len = len, used += len;
      if (is_contents) have_contents = 1, contents_at = used, d->contents_len = len, used += len;
      i = skip_ws(line, n, i);
      if (i < n && line[i] == ',') {
        i = skip_ws(line, n, i + 1);
        continue;
      }
      if (i < n && line[i] == '}') {
        i++;
        break;
      }
      return 0;
    }
  }
  if (skip_ws(line, n, i) != n) return 0; /* bytes after the object */
  if (have_url) d->url = d->mem + url_at;
  if (have_contents) d->contents = d->mem + contents_at;
  return 1;
}

void jsonl_doc_free(jsonl_doc_t *d) {
  free(d->mem);
  memset(d, 0, sizeof *d);
}
