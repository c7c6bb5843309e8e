/* format.c — how the CLI writes byte strings: C-style escaping for text output
 * (scan lines, txn answers, the raw figure) and its inverse for the quoted
 * tokens of txn lines, and the JSON helpers (byte strings as UTF-8 strings or
 * base64, timestamps as integers, one compact object per line). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char hexdigits[] = "0123456789abcdef";

/* The escape of byte c into out (at most 4 chars + NUL); returns its length. */
static size_t escape_byte(unsigned char c, int quote, char out[5]) {
  switch (c) {
    case '\\': memcpy(out, "\\\\", 3); return 2;
    case '\n': memcpy(out, "\\n", 3); return 2;
    case '\t': memcpy(out, "\\t", 3); return 2;
    case '\r': memcpy(out, "\\r", 3); return 2;
    case '"':
      if (quote) {
        memcpy(out, "\\\"", 3);
        return 2;
      }
      break;
    default: break;
  }
  if (c < 0x20 || c > 0x7e) {
    out[0] = '\\';
    out[1] = 'x';
    out[2] = hexdigits[c >> 4];
    out[3] = hexdigits[c & 15];
    out[4] = '\0';
    return 4;
  }
  out[0] = (char)c;
  out[1] = '\0';
  return 1;
}

/* The escapes of p[0..n) into dst (room for 4 * n bytes), '"' escaped too
 * when quote; returns their length. */
static size_t escape_run(char *dst, const char *p, size_t n, int quote) {
  char *w = dst;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c >= 0x20 && c <= 0x7e && c != '\\' && (c != '"' || !quote)) {
      *w++ = (char)c; /* the common case: the byte as it is */
      continue;
    }
    char e[5];
    size_t k = escape_byte(c, quote, e);
    memcpy(w, e, k);
    w += k;
  }
  return (size_t)(w - dst);
}

size_t fmt_escape_to(char *dst, const char *p, size_t n, int quote) {
  if (!quote) return escape_run(dst, p, n, 0);
  dst[0] = '"';
  size_t k = escape_run(dst + 1, p, n, 1);
  dst[k + 1] = '"';
  return k + 2;
}

void fmt_escape(FILE *out, const char *p, size_t n, int quote) {
  char buf[4 * 256]; /* a slice of 256 bytes, each escaped to at most 4 */
  if (quote) putc('"', out);
  for (size_t i = 0; i < n; i += 256) {
    size_t k = n - i < 256 ? n - i : 256;
    fwrite(buf, 1, escape_run(buf, p + i, k, quote), out);
  }
  if (quote) putc('"', out);
}

char *fmt_escape_str(const char *p, size_t n, int quote) {
  char e[5];
  size_t len = quote ? 2 : 0;
  for (size_t i = 0; i < n; i++) len += escape_byte((unsigned char)p[i], quote, e);
  char *s = malloc(len + 1), *w = s;
  if (!s) return NULL;
  if (quote) *w++ = '"';
  for (size_t i = 0; i < n; i++) {
    size_t k = escape_byte((unsigned char)p[i], quote, e);
    memcpy(w, e, k);
    w += k;
  }
  if (quote) *w++ = '"';
  *w = '\0';
  return s;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

size_t fmt_unescape_one(const char *s, size_t n, char *out) {
  if (n < 2 || s[0] != '\\') return 0;
  switch (s[1]) {
    case '\\': *out = '\\'; return 2;
    case '"': *out = '"'; return 2;
    case 'n': *out = '\n'; return 2;
    case 't': *out = '\t'; return 2;
    case 'r': *out = '\r'; return 2;
    case '0': *out = '\0'; return 2;
    case 'x': {
      if (n < 4) return 0;
      int hi = hexval(s[2]), lo = hexval(s[3]);
      if (hi < 0 || lo < 0) return 0;
      *out = (char)(hi << 4 | lo);
      return 4;
    }
    default: return 0;
  }
}

/* Whether p[0..n) is well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF). */
static int valid_utf8(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      k = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      k = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      k = 3, cp = c & 0x07;
    } else {
      return 0;
    }
    if (n - i <= k) return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((p[i + j] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (p[i + j] & 0x3f);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += k + 1;
  }
  return 1;
}

static char *base64(const unsigned char *p, size_t n) {
  static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *s = malloc((n + 2) / 3 * 4 + 1), *w = s;
  if (!s) return NULL;
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    *w++ = tbl[v >> 18];
    *w++ = tbl[(v >> 12) & 63];
    *w++ = tbl[(v >> 6) & 63];
    *w++ = tbl[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
    *w++ = tbl[v >> 18];
    *w++ = tbl[(v >> 12) & 63];
    *w++ = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
    *w++ = '=';
  }
  *w = '\0';
  return s;
}

int fmt_json_bytes(json_t *obj, const char *key, const char *p, size_t n) {
  if (!p) p = "", n = 0;
  if (valid_utf8((const unsigned char *)p, n)) {
    json_t *s = json_stringn(p, n);
    return s ? json_object_set_new(obj, key, s) : -1;
  }
  char *b = base64((const unsigned char *)p, n);
  size_t klen = strlen(key);
  char *k = malloc(klen + sizeof "_base64");
  int rc = -1;
  if (b && k) {
    memcpy(k, key, klen);
    memcpy(k + klen, "_base64", sizeof "_base64");
    rc = json_object_set_new(obj, k, json_string(b));
  }
  free(b);
  free(k);
  return rc;
}

int fmt_json_u64(json_t *obj, const char *key, uint64_t v) {
  return json_object_set_new(obj, key, json_integer((json_int_t)v));
}

int fmt_json_line(FILE *out, json_t *obj) {
  if (!obj) return -1;
  char *s = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(obj);
  if (!s) return -1;
  int rc = fputs(s, out) < 0 || putc('\n', out) == EOF ? -1 : 0;
  free(s);
  return rc;
}

const char *fmt_write_kind(pc_write_kind_t kind) {
  switch (kind) {
    case PC_WRITE_PUT: return "put";
    case PC_WRITE_DELETE: return "delete";
    case PC_WRITE_ROLLBACK: return "rollback";
    case PC_WRITE_NOTIFY: return "notify";
  }
  return "unknown";
}
