/* config.c — loads and validates the one JSON configuration file of every
 * role (schema in config.h). jansson decodes the text; because its values
 * carry no source positions, a small locator scans the same text (already
 * accepted by jansson, so well-formed) into a tree of byte offsets mirroring
 * the JSON structure, and the validator walks the jansson values alongside
 * it so that every error names the file, line:column (1-based, columns count
 * bytes), the key path (tablets[1].listen) and what is wrong. */
#include "config/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "core/keys.h"
#include "base/log.h"
#include "core/suggest.h"

#define CFG_MAX_TEXT (16u << 20) /* larger inputs are refused */
#define CFG_MAX_TABLETS 4096
#define CFG_MAX_PLUGINS 256
#define CFG_NAME_MAX 64         /* tablet names become directory names */
#define CFG_SCAN_MAX_DEPTH 2100 /* jansson refuses nesting beyond 2048 */
#define CFG_SHOW_MAX 40         /* bytes of a key or value quoted in a message */

/* ---- position locator ------------------------------------------------------ */

typedef struct pnode {
  size_t off;             /* first byte of the value */
  size_t key_off;         /* first byte ('"') of the key for object members; off otherwise */
  size_t key_end;         /* one past the key's closing quote (object members) */
  size_t key_at, key_len; /* decoded key in the tree's key arena (object members) */
  size_t nkids;
  int32_t parent, first, last, next; /* -1: none */
  char member;                       /* 1: object member, 0: array element or the root */
} pnode_t;

typedef struct ptree {
  pnode_t *nodes;
  size_t n, cap;
  char *keys;
  size_t klen, kcap;
} ptree_t;

typedef struct scan {
  const char *t;
  size_t len, i;
  ptree_t *pt;
  size_t dup_end; /* find-duplicate mode: the end offset of the duplicated key (0: off) */
  int32_t dup;    /* the duplicate key's node once found, -1 before */
  int32_t dup_first;
  int oom;
} scan_t;

static void pt_free(ptree_t *pt) {
  free(pt->nodes);
  free(pt->keys);
  memset(pt, 0, sizeof *pt);
}

static int32_t pt_add(scan_t *s, int32_t parent, size_t off) {
  ptree_t *pt = s->pt;
  if (pt->n == pt->cap) {
    size_t cap = pt->cap ? pt->cap * 2 : 64;
    pnode_t *p = realloc(pt->nodes, cap * sizeof *p);
    if (!p) {
      s->oom = 1;
      return -1;
    }
    pt->nodes = p;
    pt->cap = cap;
  }
  int32_t id = (int32_t)pt->n++;
  pnode_t *nd = &pt->nodes[id];
  memset(nd, 0, sizeof *nd);
  nd->off = nd->key_off = off;
  nd->parent = parent;
  nd->first = nd->last = nd->next = -1;
  if (parent >= 0) {
    pnode_t *pa = &pt->nodes[parent];
    if (pa->last >= 0)
      pt->nodes[pa->last].next = id;
    else
      pa->first = id;
    pa->last = id;
    pa->nkids++;
  }
  return id;
}

static int key_putc(scan_t *s, char ch) {
  ptree_t *pt = s->pt;
  if (pt->klen == pt->kcap) {
    size_t cap = pt->kcap ? pt->kcap * 2 : 256;
    char *p = realloc(pt->keys, cap);
    if (!p) {
      s->oom = 1;
      return -1;
    }
    pt->keys = p;
    pt->kcap = cap;
  }
  pt->keys[pt->klen++] = ch;
  return 0;
}

static int key_putcp(scan_t *s, uint32_t cp) {
  char b[4];
  int n;
  if (cp < 0x80) {
    b[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    b[0] = (char)(0xC0 | (cp >> 6));
    b[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    b[0] = (char)(0xE0 | (cp >> 12));
    b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    b[0] = (char)(0xF0 | (cp >> 18));
    b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  for (int k = 0; k < n; k++)
    if (key_putc(s, b[k])) return -1;
  return 0;
}

static int hex4(const char *p, size_t avail, uint32_t *out) {
  uint32_t v = 0;
  if (avail < 4) return -1;
  for (int k = 0; k < 4; k++) {
    char ch = p[k];
    v <<= 4;
    if (ch >= '0' && ch <= '9')
      v |= (uint32_t)(ch - '0');
    else if (ch >= 'a' && ch <= 'f')
      v |= (uint32_t)(ch - 'a' + 10);
    else if (ch >= 'A' && ch <= 'F')
      v |= (uint32_t)(ch - 'A' + 10);
    else
      return -1;
  }
  *out = v;
  return 0;
}

static void sc_ws(scan_t *s) {
  while (s->i < s->len) {
    char ch = s->t[s->i];
    if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
    s->i++;
  }
}

/* Scans the string at s->i (its opening quote); decodes it into the key arena
 * when keep. Returns 0, or -1 on malformed text or memory exhaustion. */
static int sc_string(scan_t *s, int keep) {
  if (s->i >= s->len || s->t[s->i] != '"') return -1;
  s->i++;
  while (s->i < s->len) {
    char ch = s->t[s->i];
    if (ch == '"') {
      s->i++;
      return 0;
    }
    if (ch != '\\') {
      if (keep && key_putc(s, ch)) return -1;
      s->i++;
      continue;
    }
    if (s->i + 1 >= s->len) return -1;
    char e = s->t[s->i + 1];
    s->i += 2;
    if (e == 'u') {
      uint32_t cp, lo;
      if (hex4(s->t + s->i, s->len - s->i, &cp)) return -1;
      s->i += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF && s->i + 6 <= s->len && s->t[s->i] == '\\' &&
          s->t[s->i + 1] == 'u' && hex4(s->t + s->i + 2, 4, &lo) == 0 && lo >= 0xDC00 &&
          lo <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        s->i += 6;
      }
      if (keep && key_putcp(s, cp)) return -1;
      continue;
    }
    char d;
    switch (e) {
      case '"': d = '"'; break;
      case '\\': d = '\\'; break;
      case '/': d = '/'; break;
      case 'b': d = '\b'; break;
      case 'f': d = '\f'; break;
      case 'n': d = '\n'; break;
      case 'r': d = '\r'; break;
      case 't': d = '\t'; break;
      default: return -1;
    }
    if (keep && key_putc(s, d)) return -1;
  }
  return -1;
}

/* The decoded key at offset at of the key arena. The arena stays NULL while
 * every key so far is empty, and NULL + 0 (or memcmp on NULL) is undefined. */
static const char *pt_key(const ptree_t *pt, size_t at) { return pt->keys ? pt->keys + at : ""; }

static int sc_same_key(const ptree_t *pt, int32_t a, int32_t b) {
  const pnode_t *x = &pt->nodes[a], *y = &pt->nodes[b];
  return x->key_len == y->key_len &&
         memcmp(pt_key(pt, x->key_at), pt_key(pt, y->key_at), x->key_len) == 0;
}

/* Scans the value starting at s->i into node id (already created at s->i).
 * Returns 0, 1 when a searched duplicate key was found (scan stops), or -1. */
static int sc_value(scan_t *s, int32_t id, int depth) {
  if (depth > CFG_SCAN_MAX_DEPTH || s->i >= s->len) return -1;
  char ch = s->t[s->i];
  if (ch == '{') {
    s->i++;
    sc_ws(s);
    if (s->i < s->len && s->t[s->i] == '}') {
      s->i++;
      return 0;
    }
    for (;;) {
      sc_ws(s);
      size_t key_off = s->i, key_at = s->pt->klen;
      if (sc_string(s, 1)) return -1;
      size_t key_end = s->i;
      sc_ws(s);
      if (s->i >= s->len || s->t[s->i] != ':') return -1;
      s->i++;
      sc_ws(s);
      int32_t kid = pt_add(s, id, s->i);
      if (kid < 0) return -1;
      pnode_t *k = &s->pt->nodes[kid];
      k->member = 1;
      k->key_off = key_off;
      k->key_end = key_end;
      k->key_at = key_at;
      k->key_len = s->pt->klen - key_at;
      if (s->dup_end && key_end == s->dup_end) {
        for (int32_t o = s->pt->nodes[id].first; o >= 0 && o != kid; o = s->pt->nodes[o].next)
          if (sc_same_key(s->pt, o, kid)) {
            s->dup = kid;
            s->dup_first = o;
            return 1;
          }
      }
      int r = sc_value(s, kid, depth + 1);
      if (r) return r;
      sc_ws(s);
      if (s->i >= s->len) return -1;
      if (s->t[s->i] == '}') {
        s->i++;
        return 0;
      }
      if (s->t[s->i] != ',') return -1;
      s->i++;
    }
  }
  if (ch == '[') {
    s->i++;
    sc_ws(s);
    if (s->i < s->len && s->t[s->i] == ']') {
      s->i++;
      return 0;
    }
    for (;;) {
      sc_ws(s);
      int32_t kid = pt_add(s, id, s->i);
      if (kid < 0) return -1;
      int r = sc_value(s, kid, depth + 1);
      if (r) return r;
      sc_ws(s);
      if (s->i >= s->len) return -1;
      if (s->t[s->i] == ']') {
        s->i++;
        return 0;
      }
      if (s->t[s->i] != ',') return -1;
      s->i++;
    }
  }
  if (ch == '"') return sc_string(s, 0);
  /* number, true, false or null */
  size_t start = s->i;
  while (s->i < s->len) {
    char c = s->t[s->i];
    if (c == ',' || c == ']' || c == '}' || c == ':' || c == ' ' || c == '\t' || c == '\n' ||
        c == '\r' || c == '"' || c == '[' || c == '{')
      break;
    s->i++;
  }
  return s->i > start ? 0 : -1;
}

/* Builds pt from text. A partial tree is kept on malformed text; lookups
 * that miss fall back to the enclosing value's position. Returns -1 only
 * when memory ran out. */
static int pt_build(ptree_t *pt, const char *text, size_t len, size_t dup_end, int32_t *dup,
                    int32_t *dup_first) {
  scan_t s = {.t = text, .len = len, .pt = pt, .dup_end = dup_end, .dup = -1, .dup_first = -1};
  memset(pt, 0, sizeof *pt);
  sc_ws(&s);
  if (pt_add(&s, -1, s.i) >= 0) (void)sc_value(&s, 0, 0);
  if (dup) *dup = s.dup;
  if (dup_first) *dup_first = s.dup_first;
  return s.oom ? -1 : 0;
}

static int32_t pt_member(const ptree_t *pt, int32_t obj, const char *key, size_t klen) {
  if (obj < 0 || (size_t)obj >= pt->n) return -1;
  for (int32_t k = pt->nodes[obj].first; k >= 0; k = pt->nodes[k].next) {
    const pnode_t *nd = &pt->nodes[k];
    if (nd->member && nd->key_len == klen && memcmp(pt_key(pt, nd->key_at), key, klen) == 0)
      return k;
  }
  return -1;
}

/* ---- messages -------------------------------------------------------------- */

/* Writes s[0..n) for a message: control bytes, DEL, quote and backslash
 * escaped, at most CFG_SHOW_MAX bytes (then "..."), never cutting a UTF-8
 * sequence. out has room for 4 * CFG_SHOW_MAX + 8 bytes. */
#define SHOW_CAP (4 * CFG_SHOW_MAX + 8)
static void show(char out[SHOW_CAP], const char *s, size_t n) {
  size_t lim = n, o = 0;
  if (lim > CFG_SHOW_MAX) {
    lim = CFG_SHOW_MAX;
    while (lim > 0 && ((unsigned char)s[lim] & 0xC0) == 0x80) lim--;
  }
  for (size_t k = 0; k < lim; k++) {
    unsigned char ch = (unsigned char)s[k];
    if (ch == '"' || ch == '\\') {
      out[o++] = '\\';
      out[o++] = (char)ch;
    } else if (ch < 0x20 || ch == 0x7F) {
      o += (size_t)snprintf(out + o, SHOW_CAP - o, "\\x%02x", ch);
    } else {
      out[o++] = (char)ch;
    }
  }
  if (lim < n) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
  }
  return "a value";
}

/* The value itself for scalars ("42", "\"localhost\"", "true"), else its type. */
#define RENDER_CAP (SHOW_CAP + 8)
static void render(char out[RENDER_CAP], const json_t *v) {
  char buf[SHOW_CAP];
  switch (json_typeof(v)) {
    case JSON_STRING:
      show(buf, json_string_value(v), json_string_length(v));
      snprintf(out, RENDER_CAP, "\"%s\"", buf);
      return;
    case JSON_INTEGER:
      snprintf(out, RENDER_CAP, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
      return;
    case JSON_REAL: snprintf(out, RENDER_CAP, "%g", json_real_value(v)); return;
    case JSON_TRUE: snprintf(out, RENDER_CAP, "true"); return;
    case JSON_FALSE: snprintf(out, RENDER_CAP, "false"); return;
    default: snprintf(out, RENDER_CAP, "%s", type_name(v)); return;
  }
}

/* 1-based line and byte column of offset off in text. */
static void linecol(const char *text, size_t len, size_t off, size_t *line, size_t *col) {
  size_t ln = 1, start = 0;
  if (off > len) off = len;
  for (size_t k = 0; k < off; k++)
    if (text[k] == '\n') {
      ln++;
      start = k + 1;
    }
  *line = ln;
  *col = off - start + 1;
}

/* ---- validation context ---------------------------------------------------- */

typedef struct vctx {
  const char *src;
  const char *text;
  size_t len;
  const ptree_t *pt;
  pc_error_t *err;
  char path[256];
  size_t plen;
} vctx_t;

static size_t node_off(const vctx_t *c, int32_t node) {
  return node >= 0 && (size_t)node < c->pt->n ? c->pt->nodes[node].off : 0;
}

static size_t node_key_off(const vctx_t *c, int32_t node) {
  return node >= 0 && (size_t)node < c->pt->n ? c->pt->nodes[node].key_off : 0;
}

/* The position node of obj's member key, or obj's own when not located. */
static int32_t member_node(const vctx_t *c, int32_t obj, const char *key, size_t klen) {
  int32_t k = pt_member(c->pt, obj, key, klen);
  return k >= 0 ? k : obj;
}

static pc_status_t fail_at(vctx_t *c, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pc_status_t fail_at(vctx_t *c, size_t off, const char *fmt, ...) {
  char what[PC_ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  size_t line, col;
  linecol(c->text, c->len, off, &line, &col);
  if (c->plen)
    return pc_error_set(c->err, PC_INVALID, "%s:%zu:%zu: %s: %s", c->src, line, col, c->path, what);
  return pc_error_set(c->err, PC_INVALID, "%s:%zu:%zu: %s", c->src, line, col, what);
}

static pc_status_t fail_nomem(vctx_t *c) {
  return pc_error_set(c->err, PC_NOMEM, "%s: out of memory", c->src);
}

/* Appends seg to the path; a path that would not fit ends in "..." instead. */
static void path_append(vctx_t *c, const char *seg) {
  size_t n = strlen(seg), room = sizeof c->path - 1 - c->plen;
  if (c->plen >= 3 && memcmp(c->path + c->plen - 3, "...", 3) == 0) return; /* already cut */
  if (n + 3 > room) seg = "...", n = room < 3 ? room : 3;
  memcpy(c->path + c->plen, seg, n);
  c->plen += n;
  c->path[c->plen] = '\0';
}

static size_t path_key(vctx_t *c, const char *key, size_t klen) {
  size_t old = c->plen;
  char buf[SHOW_CAP];
  show(buf, key, klen);
  if (c->plen) path_append(c, ".");
  path_append(c, buf);
  return old;
}

static size_t path_index(vctx_t *c, size_t idx) {
  size_t old = c->plen;
  char buf[32];
  snprintf(buf, sizeof buf, "[%zu]", idx);
  path_append(c, buf);
  return old;
}

static void path_pop(vctx_t *c, size_t old) {
  c->plen = old;
  c->path[old] = '\0';
}

/* ---- unknown keys ---------------------------------------------------------- */

static pc_status_t fail_unknown(vctx_t *c, int32_t kn, const char *key, size_t klen,
                                const char *const *known, size_t nknown) {
  char shown[SHOW_CAP];
  show(shown, key, klen);
  const char *hint = pc_suggest(key, klen, known, nknown);
  if (hint)
    return fail_at(c, node_key_off(c, kn), "unknown key '%s' (did you mean '%s'?)", shown, hint);
  return fail_at(c, node_key_off(c, kn), "unknown key '%s'", shown);
}

/* Index of key in known, or -1. */
static int known_index(const char *key, size_t klen, const char *const *known, size_t nknown) {
  for (size_t k = 0; k < nknown; k++)
    if (strlen(known[k]) == klen && memcmp(known[k], key, klen) == 0) return (int)k;
  return -1;
}

/* ---- typed values ---------------------------------------------------------- */

static pc_status_t want_object(vctx_t *c, const json_t *v, int32_t n) {
  if (json_is_object(v)) return PC_OK;
  return fail_at(c, node_off(c, n), "expected an object, got %s", type_name(v));
}

static pc_status_t get_bool(vctx_t *c, const json_t *v, int32_t n, int *out) {
  if (!json_is_boolean(v))
    return fail_at(c, node_off(c, n), "expected a boolean, got %s", type_name(v));
  *out = json_is_true(v);
  return PC_OK;
}

static pc_status_t get_uint(vctx_t *c, const json_t *v, int32_t n, uint32_t lo, uint32_t hi,
                            uint32_t *out) {
  if (!json_is_integer(v))
    return fail_at(c, node_off(c, n), "expected an integer in %u..%u, got %s", lo, hi,
                   type_name(v));
  json_int_t x = json_integer_value(v);
  if (x < (json_int_t)lo || x > (json_int_t)hi)
    return fail_at(c, node_off(c, n), "expected an integer in %u..%u, got %" JSON_INTEGER_FORMAT,
                   lo, hi, x);
  *out = (uint32_t)x;
  return PC_OK;
}

/* A non-empty string without NUL bytes, copied into *out. */
static pc_status_t get_str(vctx_t *c, const json_t *v, int32_t n, char **out) {
  if (!json_is_string(v))
    return fail_at(c, node_off(c, n), "expected a string, got %s", type_name(v));
  const char *s = json_string_value(v);
  size_t len = json_string_length(v);
  if (len == 0) return fail_at(c, node_off(c, n), "must not be empty");
  if (memchr(s, '\0', len))
    return fail_at(c, node_off(c, n), "must not contain a NUL byte (\\u0000)");
  char *copy = strdup(s);
  if (!copy) return fail_nomem(c);
  free(*out);
  *out = copy;
  return PC_OK;
}

/* Any bytes, NUL included; *out is NUL-terminated after len bytes. */
static pc_status_t get_bytes(vctx_t *c, const json_t *v, int32_t n, char **out, size_t *olen) {
  if (!json_is_string(v))
    return fail_at(c, node_off(c, n), "expected a string, got %s", type_name(v));
  size_t len = json_string_length(v);
  char *copy = malloc(len + 1);
  if (!copy) return fail_nomem(c);
  memcpy(copy, json_string_value(v), len);
  copy[len] = '\0';
  free(*out);
  *out = copy;
  *olen = len;
  return PC_OK;
}

static int host_char(char ch, int bracketed) {
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) return 1;
  if (ch == '.' || ch == '-' || ch == '_') return 1;
  return bracketed && (ch == ':' || ch == '%');
}

/* Parses "host:port" or "[v6addr]:port" into ep; returns why it is not one, or NULL. */
static const char *parse_endpoint(const char *s, size_t len, pc_endpoint_t *ep) {
  const char *host, *port;
  size_t hlen, plen;
  int bracketed = len > 0 && s[0] == '[';
  if (bracketed) {
    const char *close = memchr(s, ']', len);
    if (!close) return "missing ']'";
    host = s + 1;
    hlen = (size_t)(close - host);
    if ((size_t)(close - s) + 1 >= len || close[1] != ':') return "missing \":port\" after ']'";
    port = close + 2;
  } else {
    const char *colon = memrchr(s, ':', len);
    if (!colon) return "missing \":port\"";
    host = s;
    hlen = (size_t)(colon - s);
    port = colon + 1;
    if (memchr(host, ':', hlen)) return "an IPv6 address needs brackets, as in \"[::1]:7100\"";
  }
  plen = len - (size_t)(port - s);
  if (hlen == 0) return "empty host";
  if (hlen >= PC_HOST_MAX) return "host longer than 255 bytes";
  for (size_t k = 0; k < hlen; k++)
    if (!host_char(host[k], bracketed)) return "invalid character in host";
  if (plen == 0) return "empty port";
  unsigned long p = 0;
  for (size_t k = 0; k < plen; k++) {
    if (port[k] < '0' || port[k] > '9') return "port is not a number";
    p = p * 10 + (unsigned long)(port[k] - '0');
    if (p > 65535) return "port must be in 0..65535";
  }
  memcpy(ep->host, host, hlen);
  ep->host[hlen] = '\0';
  ep->port = (uint16_t)p;
  ep->set = 1;
  return NULL;
}

static pc_status_t get_endpoint(vctx_t *c, const json_t *v, int32_t n, pc_endpoint_t *ep) {
  char shown[RENDER_CAP];
  render(shown, v);
  if (!json_is_string(v))
    return fail_at(c, node_off(c, n), "expected \"host:port\", got %s", shown);
  const char *why = parse_endpoint(json_string_value(v), json_string_length(v), ep);
  if (why) return fail_at(c, node_off(c, n), "expected \"host:port\", got %s (%s)", shown, why);
  return PC_OK;
}

/* ---- sections -------------------------------------------------------------- */

/* Calls field(c, dst, which, value, node) for each member of obj in file
 * order, which indexing known; an unknown key is an error. */
typedef pc_status_t (*field_fn)(vctx_t *c, void *dst, int which, const json_t *v, int32_t n);

/* How many keys a key table lists. */
#define NKEYS(a) ((int)(sizeof(a) / sizeof(a)[0]))

static pc_status_t walk(vctx_t *c, const json_t *obj, int32_t node, const char *const *known,
                        size_t nknown, field_fn field, void *dst) {
  const char *key;
  size_t klen;
  json_t *v;
  json_object_keylen_foreach((json_t *)obj, key, klen, v) {
    int32_t kn = member_node(c, node, key, klen);
    size_t old = path_key(c, key, klen);
    int which = known_index(key, klen, known, nknown);
    pc_status_t st =
        which < 0 ? fail_unknown(c, kn, key, klen, known, nknown) : field(c, dst, which, v, kn);
    if (st != PC_OK) return st;
    path_pop(c, old);
  }
  return PC_OK;
}

static pc_status_t require(vctx_t *c, const json_t *obj, int32_t node, const char *key) {
  if (json_object_get(obj, key)) return PC_OK;
  return fail_at(c, node_off(c, node), "missing required key '%s'", key);
}

static const char *const log_keys[] = {"level"};

static pc_status_t log_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_t *cfg = dst;
  (void)which;
  if (!json_is_string(v))
    return fail_at(c, node_off(c, n), "expected a string, got %s", type_name(v));
  int level = memchr(json_string_value(v), '\0', json_string_length(v))
                  ? -1
                  : pc_log_parse_level(json_string_value(v));
  if (level < 0) {
    char shown[RENDER_CAP];
    render(shown, v);
    return fail_at(c, node_off(c, n), "expected \"debug\", \"info\", \"warn\" or \"error\", got %s",
                   shown);
  }
  cfg->log_level = level;
  return PC_OK;
}

static const char *const store_keys[] = {"sync",       "cache_mb",         "lock_ttl_ms",
                                         "timeout_ms", "one_phase_commit", "lazy_start",
                                         "meta_cache_mb", "gc_interval_ms", "gc_rate",
                                         "gc_lifetime_ms", "write_buffer_mb",
                                         "snapshot_max_age_ms", "compression"};

static pc_status_t store_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_t *cfg = dst;
  switch (which) {
    case 0: return get_bool(c, v, n, &cfg->store.sync);
    case 1: return get_uint(c, v, n, 0, 65536, &cfg->store.cache_mb);
    case 2: return get_uint(c, v, n, 1, 3600000, &cfg->store.lock_ttl_ms);
    case 3: return get_uint(c, v, n, 1, 3600000, &cfg->store.timeout_ms);
    case 4: return get_bool(c, v, n, &cfg->store.one_phase_commit);
    case 5: return get_bool(c, v, n, &cfg->store.lazy_start);
    case 6: return get_uint(c, v, n, 0, 65536, &cfg->store.meta_cache_mb);
    case 7: return get_uint(c, v, n, 0, 86400000, &cfg->store.gc_interval_ms);
    case 8: return get_uint(c, v, n, 0, 100000000, &cfg->store.gc_rate);
    case 9: return get_uint(c, v, n, 1000, 86400000, &cfg->store.gc_lifetime_ms);
    case 10: return get_uint(c, v, n, 1, 4096, &cfg->store.write_buffer_mb);
    case 11: return get_uint(c, v, n, 1000, 2592000000u, &cfg->store.snapshot_max_age_ms);
    default: {
      const char *s = json_is_string(v) ? json_string_value(v) : NULL;
      if (s && strcmp(s, "snappy") == 0) cfg->store.compress = 1;
      else if (s && strcmp(s, "none") == 0) cfg->store.compress = 0;
      else {
        char shown[RENDER_CAP];
        render(shown, v);
        return fail_at(c, node_off(c, n), "expected \"snappy\" or \"none\", got %s", shown);
      }
      return PC_OK;
    }
  }
}

static const char *const tso_keys[] = {"listen", "http", "data_dir", "window_ms"};

static pc_status_t tso_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_t *cfg = dst;
  switch (which) {
    case 0: return get_endpoint(c, v, n, &cfg->tso.listen);
    case 1: return get_endpoint(c, v, n, &cfg->tso.http);
    case 2: return get_str(c, v, n, &cfg->tso.data_dir);
    default: return get_uint(c, v, n, 100, 600000, &cfg->tso.window_ms);
  }
}

/* An ensemble: "host:port[,host:port]..." with every endpoint well formed. */
static pc_status_t get_ensemble(vctx_t *c, const json_t *v, int32_t n, char **out) {
  pc_status_t st = get_str(c, v, n, out);
  if (st != PC_OK) return st;
  const char *s = *out;
  size_t k = 0;
  for (const char *p = s;; k++) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    pc_endpoint_t ep;
    const char *why = parse_endpoint(p, len, &ep);
    if (!why && ep.port == 0) why = "port 0";
    if (why) {
      char shown[RENDER_CAP];
      render(shown, v);
      return fail_at(c, node_off(c, n),
                     "expected \"host:port[,host:port]...\", got %s (server %zu: %s)", shown,
                     k + 1, why);
    }
    if (!comma) break;
    p = comma + 1;
  }
  return PC_OK;
}

/* A ZooKeeper path for a cluster's root: "/" then components of letters,
 * digits, '.', '_' or '-' (not "." or ".."), separated by single '/'. */
static pc_status_t get_zk_root(vctx_t *c, const json_t *v, int32_t n, char **out) {
  pc_status_t st = get_str(c, v, n, out);
  if (st != PC_OK) return st;
  const char *s = *out, *why = NULL;
  size_t len = strlen(s);
  if (s[0] != '/') why = "must start with '/'";
  else if (len == 1) why = "must name a node below '/'";
  else if (len > 512) why = "longer than 512 bytes";
  for (size_t i = 1, start = 1; !why && i <= len; i++) {
    if (i < len && s[i] != '/') {
      if (!host_char(s[i], 0)) why = "letters, digits, '.', '_', '-' and '/' only";
      continue;
    }
    size_t clen = i - start;
    if (clen == 0) why = "empty path component";
    else if ((clen == 1 && s[start] == '.') || (clen == 2 && s[start] == '.' && s[start + 1] == '.'))
      why = "'.' and '..' are not node names";
    start = i + 1;
  }
  if (!why) return PC_OK;
  char shown[RENDER_CAP];
  render(shown, v);
  return fail_at(c, node_off(c, n), "expected a ZooKeeper path like \"/percolator/NAME\", got %s (%s)",
                 shown, why);
}

static const char *const zookeeper_keys[] = {"connect", "root", "session_timeout_ms", "secret",
                                             "system_secret"};

static pc_status_t zookeeper_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_t *cfg = dst;
  switch (which) {
    case 0: return get_ensemble(c, v, n, &cfg->zookeeper.connect);
    case 1: return get_zk_root(c, v, n, &cfg->zookeeper.root);
    case 2: return get_uint(c, v, n, 1000, 60000, &cfg->zookeeper.session_timeout_ms);
    case 3: return get_str(c, v, n, &cfg->zookeeper.secret);
    default: return get_str(c, v, n, &cfg->zookeeper.system_secret);
  }
}

/* Where each tablet's pieces sit in the file, for range messages. */
typedef struct tref {
  pc_config_tablet_t *t;
  size_t idx; /* position in the file's array */
  int32_t node, name_node, start_node, end_node;
} tref_t;

static const char *const tablet_keys[] = {"name", "listen", "http", "data_dir", "start", "end",
                                           "replicas"};

static pc_status_t get_server_names(vctx_t *c, const json_t *v, int32_t n, char ***out,
                                    size_t *count);

static pc_status_t tablet_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  tref_t *r = dst;
  pc_config_tablet_t *t = r->t;
  switch (which) {
    case 0: {
      if (!json_is_string(v))
        return fail_at(c, node_off(c, n), "expected a string, got %s", type_name(v));
      const char *s = json_string_value(v);
      size_t len = json_string_length(v);
      int ok = len > 0 && len <= CFG_NAME_MAX && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
      for (size_t k = 0; ok && k < len; k++) ok = host_char(s[k], 0);
      if (!ok) {
        if (memchr(s, '\0', len))
          return fail_at(c, node_off(c, n), "must not contain a NUL byte (\\u0000)");
        char shown[RENDER_CAP];
        render(shown, v);
        return fail_at(c, node_off(c, n),
                       "invalid tablet name %s (1..%d letters, digits, '.', '_' or '-')", shown,
                       CFG_NAME_MAX);
      }
      r->name_node = n;
      return get_str(c, v, n, &t->name);
    }
    case 1: return get_endpoint(c, v, n, &t->listen);
    case 2: return get_endpoint(c, v, n, &t->http);
    case 3: return get_str(c, v, n, &t->data_dir);
    case 4: r->start_node = n; return get_bytes(c, v, n, &t->start, &t->start_len);
    case 5: r->end_node = n; return get_bytes(c, v, n, &t->end, &t->end_len);
    default: return get_server_names(c, v, n, &t->replicas, &t->nreplicas);
  }
}

static int tref_cmp(const void *x, const void *y) {
  const tref_t *a = x, *b = y;
  int r = pc_bytes_cmp(a->t->start, a->t->start_len, b->t->start, b->t->start_len);
  if (r) return r;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Sets the path to tablets[idx].key for a message about one tablet. */
static void path_tablet(vctx_t *c, size_t idx, const char *key) {
  path_pop(c, 0);
  path_key(c, "tablets", 7);
  path_index(c, idx);
  if (key) path_key(c, key, strlen(key));
}

static size_t tref_off(const vctx_t *c, const tref_t *r, int32_t n) {
  return node_off(c, n >= 0 ? n : r->node);
}

/* Checks that the ranges of the tablets tile the row space; orders them by start. */
static pc_status_t check_ranges(vctx_t *c, tref_t *refs, size_t n) {
  char a[SHOW_CAP], b[SHOW_CAP];
  for (size_t k = 0; k < n; k++) {
    const pc_config_tablet_t *t = refs[k].t;
    if (t->end_len && pc_bytes_cmp(t->start, t->start_len, t->end, t->end_len) >= 0) {
      path_tablet(c, refs[k].idx, "end");
      show(a, t->start, t->start_len);
      show(b, t->end, t->end_len);
      return fail_at(c, tref_off(c, &refs[k], refs[k].end_node),
                     "tablet '%s' has an empty range: end \"%s\" is not after start \"%s\"",
                     t->name, b, a);
    }
  }
  qsort(refs, n, sizeof *refs, tref_cmp);
  const tref_t *first = &refs[0];
  if (first->t->start_len) {
    path_tablet(c, first->idx, "start");
    show(a, first->t->start, first->t->start_len);
    return fail_at(
        c, tref_off(c, first, first->start_node),
        "no tablet starts at \"\": the lowest start is \"%s\" (tablet '%s'), rows before "
        "it are not served",
        a, first->t->name);
  }
  for (size_t k = 1; k < n; k++) {
    const tref_t *p = &refs[k - 1], *q = &refs[k];
    path_tablet(c, q->idx, "start");
    show(b, q->t->start, q->t->start_len);
    if (p->t->end_len == 0)
      return fail_at(c, tref_off(c, q, q->start_node),
                     "tablet '%s' (starts at \"%s\") overlaps tablet '%s' (tablets[%zu], no end)",
                     q->t->name, b, p->t->name, p->idx);
    show(a, p->t->end, p->t->end_len);
    int r = pc_bytes_cmp(q->t->start, q->t->start_len, p->t->end, p->t->end_len);
    if (r < 0)
      return fail_at(c, tref_off(c, q, q->start_node),
                     "tablet '%s' (starts at \"%s\") overlaps tablet '%s' (tablets[%zu], ends at "
                     "\"%s\")",
                     q->t->name, b, p->t->name, p->idx, a);
    if (r > 0)
      return fail_at(c, tref_off(c, q, q->start_node),
                     "gap between tablet '%s' (tablets[%zu], ends at \"%s\") and tablet '%s' "
                     "(starts at \"%s\")",
                     p->t->name, p->idx, a, q->t->name, b);
  }
  const tref_t *last = &refs[n - 1];
  if (last->t->end_len) {
    path_tablet(c, last->idx, "end");
    show(a, last->t->end, last->t->end_len);
    return fail_at(c, tref_off(c, last, last->end_node),
                   "no tablet ends at \"\": the last tablet '%s' ends at \"%s\", rows from there "
                   "on are not served",
                   last->t->name, a);
  }
  path_pop(c, 0);
  return PC_OK;
}

static pc_status_t parse_tablets(vctx_t *c, pc_config_t *cfg, const json_t *arr, int32_t node) {
  if (!json_is_array(arr))
    return fail_at(c, node_off(c, node), "expected an array of tablets, got %s", type_name(arr));
  size_t n = json_array_size(arr);
  if (n == 0) return fail_at(c, node_off(c, node), "must list at least one tablet");
  if (n > CFG_MAX_TABLETS)
    return fail_at(c, node_off(c, node), "at most %d tablets, got %zu", CFG_MAX_TABLETS, n);
  cfg->tablets = calloc(n, sizeof *cfg->tablets);
  tref_t *refs = calloc(n, sizeof *refs);
  if (!cfg->tablets || !refs) {
    free(refs);
    return fail_nomem(c);
  }
  cfg->ntablets = n;
  pc_status_t st = PC_OK;
  int32_t en = node >= 0 && (size_t)node < c->pt->n ? c->pt->nodes[node].first : -1;
  for (size_t k = 0; k < n && st == PC_OK; k++) {
    const json_t *v = json_array_get(arr, k);
    int32_t vn = en >= 0 ? en : node;
    if (en >= 0) en = c->pt->nodes[en].next;
    pc_config_tablet_t *t = &cfg->tablets[k];
    refs[k] =
        (tref_t){.t = t, .idx = k, .node = vn, .name_node = -1, .start_node = -1, .end_node = -1};
    size_t old = path_index(c, k);
    if ((st = want_object(c, v, vn)) != PC_OK) break;
    t->file_index = k;
    if ((st = walk(c, v, vn, tablet_keys, NKEYS(tablet_keys), tablet_field, &refs[k])) != PC_OK)
      break;
    /* "listen" or "replicas": checked with "servers" (check_topology) */
    if ((st = require(c, v, vn, "name")) != PC_OK) break;
    if ((!t->start && !(t->start = strdup(""))) || (!t->end && !(t->end = strdup("")))) {
      st = fail_nomem(c);
      break;
    }
    for (size_t j = 0; j < k; j++)
      if (strcmp(cfg->tablets[j].name, t->name) == 0) {
        size_t line, col;
        linecol(c->text, c->len, tref_off(c, &refs[j], refs[j].name_node), &line, &col);
        path_key(c, "name", 4);
        st = fail_at(c, tref_off(c, &refs[k], refs[k].name_node),
                     "duplicate tablet name '%s' (also tablets[%zu].name at %zu:%zu)", t->name, j,
                     line, col);
        break;
      }
    if (st == PC_OK) path_pop(c, old);
  }
  if (st == PC_OK) st = check_ranges(c, refs, n);
  if (st == PC_OK) {
    pc_config_tablet_t *sorted = malloc(n * sizeof *sorted);
    if (!sorted) {
      st = fail_nomem(c);
    } else {
      for (size_t k = 0; k < n; k++) sorted[k] = *refs[k].t;
      free(cfg->tablets);
      cfg->tablets = sorted;
    }
  }
  free(refs);
  return st;
}

/* A server's name: 1..64 letters, digits, '.', '_' or '-' (it names a
 * directory and a ZooKeeper node). */
static pc_status_t get_server_name(vctx_t *c, const json_t *v, int32_t n, char **out) {
  if (!json_is_string(v))
    return fail_at(c, node_off(c, n), "expected a string, got %s", type_name(v));
  const char *s = json_string_value(v);
  size_t len = json_string_length(v);
  int ok = len > 0 && len <= CFG_NAME_MAX && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
  for (size_t k = 0; ok && k < len; k++) ok = host_char(s[k], 0);
  if (!ok) {
    char shown[RENDER_CAP];
    render(shown, v);
    return fail_at(c, node_off(c, n),
                   "invalid server name %s (1..%d letters, digits, '.', '_' or '-')", shown,
                   CFG_NAME_MAX);
  }
  return get_str(c, v, n, out);
}

static pc_status_t get_server_names(vctx_t *c, const json_t *v, int32_t n, char ***out,
                                    size_t *count) {
  if (!json_is_array(v))
    return fail_at(c, node_off(c, n), "expected an array of server names, got %s", type_name(v));
  size_t k = json_array_size(v);
  if (k == 0) return fail_at(c, node_off(c, n), "must name at least one server");
  if (k > 15) return fail_at(c, node_off(c, n), "at most 15 replicas, got %zu", k);
  char **names = calloc(k, sizeof *names);
  if (!names) return fail_nomem(c);
  for (size_t i = 0; i < *count; i++) free((*out)[i]);
  free(*out);
  *out = names;
  *count = k;
  int32_t en = n >= 0 && (size_t)n < c->pt->n ? c->pt->nodes[n].first : -1;
  for (size_t i = 0; i < k; i++) {
    const json_t *e = json_array_get(v, i);
    int32_t vn = en >= 0 ? en : n;
    if (en >= 0) en = c->pt->nodes[en].next;
    size_t old = path_index(c, i);
    pc_status_t st = get_server_name(c, e, vn, &names[i]);
    if (st != PC_OK) return st;
    for (size_t j = 0; j < i; j++)
      if (strcmp(names[j], names[i]) == 0)
        return fail_at(c, node_off(c, vn), "server '%s' is named twice: a server holds one "
                       "replica of a tablet", names[i]);
    path_pop(c, old);
  }
  return PC_OK;
}

static const char *const server_keys[] = {"name", "listen", "http", "data_dir"};

static pc_status_t server_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_server_t *s = dst;
  switch (which) {
    case 0: return get_server_name(c, v, n, &s->name);
    case 1: return get_endpoint(c, v, n, &s->listen);
    case 2: return get_endpoint(c, v, n, &s->http);
    default: return get_str(c, v, n, &s->data_dir);
  }
}

static pc_status_t parse_servers(vctx_t *c, pc_config_t *cfg, const json_t *arr, int32_t node) {
  if (!json_is_array(arr))
    return fail_at(c, node_off(c, node), "expected an array of servers, got %s", type_name(arr));
  size_t n = json_array_size(arr);
  if (n == 0) return fail_at(c, node_off(c, node), "must list at least one server");
  if (n > CFG_MAX_TABLETS)
    return fail_at(c, node_off(c, node), "at most %d servers, got %zu", CFG_MAX_TABLETS, n);
  if (!(cfg->servers = calloc(n, sizeof *cfg->servers))) return fail_nomem(c);
  cfg->nservers = n;
  int32_t en = node >= 0 && (size_t)node < c->pt->n ? c->pt->nodes[node].first : -1;
  for (size_t k = 0; k < n; k++) {
    const json_t *v = json_array_get(arr, k);
    int32_t vn = en >= 0 ? en : node;
    if (en >= 0) en = c->pt->nodes[en].next;
    size_t old = path_index(c, k);
    pc_status_t st;
    if ((st = want_object(c, v, vn)) != PC_OK ||
        (st = walk(c, v, vn, server_keys, NKEYS(server_keys), server_field, &cfg->servers[k])) !=
            PC_OK ||
        (st = require(c, v, vn, "name")) != PC_OK || (st = require(c, v, vn, "listen")) != PC_OK)
      return st;
    for (size_t j = 0; j < k; j++)
      if (strcmp(cfg->servers[j].name, cfg->servers[k].name) == 0) {
        path_key(c, "name", 4);
        return fail_at(c, node_off(c, member_node(c, vn, "name", 4)),
                       "duplicate server name '%s' (also servers[%zu])", cfg->servers[k].name, j);
      }
    path_pop(c, old);
  }
  return PC_OK;
}

static const char *const replication_keys[] = {"election_timeout_ms", "heartbeat_ms",
                                               "snapshot_entries", "down_after_ms"};

static pc_status_t replication_field(vctx_t *c, void *dst, int which, const json_t *v,
                                     int32_t n) {
  pc_config_t *cfg = dst;
  switch (which) {
    case 0: return get_uint(c, v, n, 100, 60000, &cfg->replication.election_timeout_ms);
    case 1: return get_uint(c, v, n, 10, 10000, &cfg->replication.heartbeat_ms);
    case 2: return get_uint(c, v, n, 16, 10000000, &cfg->replication.snapshot_entries);
    default: return get_uint(c, v, n, 0, 604800000, &cfg->replication.down_after_ms);
  }
}

/* The node of tablets[file_index] in the file (or of the array, -1: none). */
static int32_t tablet_node(vctx_t *c, size_t file_index) {
  int32_t arr = member_node(c, 0, "tablets", 7);
  int32_t e = arr >= 0 && (size_t)arr < c->pt->n ? c->pt->nodes[arr].first : -1;
  for (size_t k = 0; e >= 0 && k < file_index; k++) e = c->pt->nodes[e].next;
  return e >= 0 ? e : arr;
}

/* Who serves each tablet: with "servers", the servers its "replicas" name
 * (a Raft group each); without, the tablet's own "listen". */
static pc_status_t check_topology(vctx_t *c, pc_config_t *cfg) {
  if (cfg->nservers && !cfg->ntablets) {
    path_pop(c, 0);
    path_key(c, "servers", 7);
    return fail_at(c, node_off(c, member_node(c, 0, "servers", 7)),
                   "servers hold tablets: list them in \"tablets\" with their \"replicas\"");
  }
  for (size_t k = 0; k < cfg->ntablets; k++) {
    pc_config_tablet_t *t = &cfg->tablets[k];
    int32_t tn = tablet_node(c, t->file_index);
    static const char *const own[] = {"listen", "http", "data_dir"};
    path_tablet(c, t->file_index, NULL);
    if (cfg->nservers) {
      const int has[] = {t->listen.set, t->http.set, t->data_dir != NULL};
      for (size_t i = 0; i < 3; i++) {
        if (!has[i]) continue;
        int32_t kn = member_node(c, tn, own[i], strlen(own[i]));
        path_key(c, own[i], strlen(own[i]));
        return fail_at(c, node_off(c, kn),
                       "tablet '%s': with \"servers\", a tablet is held by the servers its "
                       "\"replicas\" name: give each server its \"%s\" (servers[].%s)",
                       t->name, own[i], own[i]);
      }
      if (!t->nreplicas)
        return fail_at(c, node_off(c, tn), "missing required key 'replicas' (the servers "
                       "holding tablet '%s')", t->name);
      for (size_t r = 0; r < t->nreplicas; r++) {
        size_t j = 0;
        while (j < cfg->nservers && strcmp(cfg->servers[j].name, t->replicas[r]) != 0) j++;
        if (j < cfg->nservers) continue;
        int32_t rn = member_node(c, tn, "replicas", 8);
        path_key(c, "replicas", 8);
        path_index(c, r);
        return fail_at(c, node_off(c, rn), "tablet '%s': no server '%s' in \"servers\"",
                       t->name, t->replicas[r]);
      }
    } else {
      if (t->nreplicas) {
        path_key(c, "replicas", 8);
        return fail_at(c, node_off(c, member_node(c, tn, "replicas", 8)),
                       "tablet '%s': replicas need a \"servers\" section naming them", t->name);
      }
      if (!t->listen.set)
        return fail_at(c, node_off(c, tn), "missing required key 'listen'");
    }
  }
  path_pop(c, 0);
  return PC_OK;
}

static const char *const scan_keys[] = {"buckets_per_claim", "idle_ms", "batch_wait_ms",
                                        "stable_ms"};

static pc_status_t scan_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_t *cfg = dst;
  if (which == 0) return get_uint(c, v, n, 1, 1024, &cfg->workers.scan.buckets_per_claim);
  if (which == 1) return get_uint(c, v, n, 1, 60000, &cfg->workers.scan.idle_ms);
  if (which == 2) return get_uint(c, v, n, 0, 60000, &cfg->workers.scan.batch_wait_ms);
  return get_uint(c, v, n, 0, 600000, &cfg->workers.scan.stable_ms);
}

static const char *const plugin_keys[] = {"path", "config"};

static pc_status_t plugin_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_plugin_t *p = dst;
  if (which == 0) return get_str(c, v, n, &p->path);
  pc_status_t st = want_object(c, v, n);
  if (st != PC_OK) return st;
  /* the plugin parses its own settings: it gets them back as JSON text */
  char *text = json_dumps(v, JSON_COMPACT);
  if (!text) return fail_nomem(c);
  free(p->config);
  p->config = text;
  return PC_OK;
}

static pc_status_t parse_plugins(vctx_t *c, pc_config_t *cfg, const json_t *arr, int32_t node) {
  if (!json_is_array(arr))
    return fail_at(c, node_off(c, node), "expected an array of plugins, got %s", type_name(arr));
  size_t n = json_array_size(arr);
  if (n > CFG_MAX_PLUGINS)
    return fail_at(c, node_off(c, node), "at most %d plugins, got %zu", CFG_MAX_PLUGINS, n);
  if (n == 0) return PC_OK;
  if (!(cfg->workers.plugins = calloc(n, sizeof *cfg->workers.plugins))) return fail_nomem(c);
  cfg->workers.nplugins = n;
  int32_t en = node >= 0 && (size_t)node < c->pt->n ? c->pt->nodes[node].first : -1;
  for (size_t k = 0; k < n; k++) {
    const json_t *v = json_array_get(arr, k);
    int32_t vn = en >= 0 ? en : node;
    if (en >= 0) en = c->pt->nodes[en].next;
    pc_config_plugin_t *p = &cfg->workers.plugins[k];
    size_t old = path_index(c, k);
    pc_status_t st;
    if ((st = want_object(c, v, vn)) != PC_OK ||
        (st = walk(c, v, vn, plugin_keys, 2, plugin_field, p)) != PC_OK ||
        (st = require(c, v, vn, "path")) != PC_OK)
      return st;
    if (!p->config && !(p->config = strdup("{}"))) return fail_nomem(c);
    path_pop(c, old);
  }
  return PC_OK;
}

static const char *const workers_keys[] = {"threads", "scan",   "max_failures", "backoff_ms",
                                           "plugins", "http",   "hang_ms",      "journal_dir",
                                           "serve_ports"};

static const char *const serve_ports_keys[] = {"tso", "tablet"};

static pc_status_t serve_ports_field(vctx_t *c, void *dst, int which, const json_t *v,
                                     int32_t n) {
  pc_config_t *cfg = dst;
  return get_uint(c, v, n, 1, 65535,
                  which == 0 ? &cfg->workers.serve_tso_port : &cfg->workers.serve_tablet_port);
}

static pc_status_t workers_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_t *cfg = dst;
  pc_status_t st;
  switch (which) {
    case 0: return get_uint(c, v, n, 0, 256, &cfg->workers.threads);
    case 1:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      return walk(c, v, n, scan_keys, NKEYS(scan_keys), scan_field, cfg);
    case 2: return get_uint(c, v, n, 1, 1000, &cfg->workers.max_failures);
    case 3: return get_uint(c, v, n, 1, 600000, &cfg->workers.backoff_ms);
    case 4: return parse_plugins(c, cfg, v, n);
    case 5: return get_endpoint(c, v, n, &cfg->workers.http);
    case 6: return get_uint(c, v, n, 0, 86400000, &cfg->workers.hang_ms);
    case 7: return get_str(c, v, n, &cfg->workers.journal_dir);
    default:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      if ((st = walk(c, v, n, serve_ports_keys, NKEYS(serve_ports_keys), serve_ports_field, cfg)) !=
          PC_OK)
        return st;
      if (cfg->workers.serve_tso_port && cfg->workers.serve_tso_port == cfg->workers.serve_tablet_port)
        return fail_at(c, node_off(c, n), "the oracle and the tablet cannot share port %u",
                       cfg->workers.serve_tso_port);
      return PC_OK;
  }
}

/* ---- security and limits --------------------------------------------------- */

#define CFG_MAX_NAMES 256 /* certificate names in one list */
#define CFG_CN_MAX 255

/* "file:line:col: path" of node n, malloc'd, for messages about the value later. */
static char *where_of(vctx_t *c, int32_t n) {
  size_t line, col;
  linecol(c->text, c->len, node_off(c, n), &line, &col);
  char *w = NULL;
  if (asprintf(&w, "%s:%zu:%zu: %s", c->src, line, col, c->path) < 0) return NULL;
  return w;
}

/* A path to a file this process must be able to read now. */
static pc_status_t get_readable(vctx_t *c, const json_t *v, int32_t n, char **out, char **at) {
  pc_status_t st = get_str(c, v, n, out);
  if (st != PC_OK) return st;
  int fd = open(*out, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    char shown[SHOW_CAP];
    show(shown, *out, strlen(*out));
    return fail_at(c, node_off(c, n), "cannot read \"%s\": %s", shown, strerror(errno));
  }
  close(fd);
  free(*at);
  if (!(*at = where_of(c, n))) return fail_nomem(c);
  return PC_OK;
}

/* An array of certificate common names: 1..255 bytes each, no NUL. */
static pc_status_t get_names(vctx_t *c, const json_t *v, int32_t n, char ***out, size_t *count) {
  if (!json_is_array(v))
    return fail_at(c, node_off(c, n), "expected an array of names, got %s", type_name(v));
  size_t k = json_array_size(v);
  if (k == 0) return fail_at(c, node_off(c, n), "must list at least one name");
  if (k > CFG_MAX_NAMES)
    return fail_at(c, node_off(c, n), "at most %d names, got %zu", CFG_MAX_NAMES, k);
  char **names = calloc(k, sizeof *names);
  if (!names) return fail_nomem(c);
  for (size_t i = 0; i < *count; i++) free((*out)[i]);
  free(*out);
  *out = names;
  *count = k;
  int32_t en = n >= 0 && (size_t)n < c->pt->n ? c->pt->nodes[n].first : -1;
  for (size_t i = 0; i < k; i++) {
    const json_t *e = json_array_get(v, i);
    int32_t vn = en >= 0 ? en : n;
    if (en >= 0) en = c->pt->nodes[en].next;
    size_t old = path_index(c, i);
    pc_status_t st = get_str(c, e, vn, &names[i]);
    if (st != PC_OK) return st;
    if (strlen(names[i]) > CFG_CN_MAX)
      return fail_at(c, node_off(c, vn), "a certificate name is at most %d bytes", CFG_CN_MAX);
    path_pop(c, old);
  }
  return PC_OK;
}

static const char *const tls_keys[] = {"ca_file", "cert_file", "key_file", "allowed_cn",
                                       "system_cn", "server_cn"};

static pc_status_t tls_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_tls_t *t = &((pc_config_t *)dst)->tls;
  switch (which) {
    case 0: return get_readable(c, v, n, &t->ca_file, &t->ca_at);
    case 1: return get_readable(c, v, n, &t->cert_file, &t->cert_at);
    case 2: return get_readable(c, v, n, &t->key_file, &t->key_at);
    case 3: return get_names(c, v, n, &t->allowed_cn, &t->nallowed_cn);
    case 4: return get_names(c, v, n, &t->system_cn, &t->nsystem_cn);
    default: return get_names(c, v, n, &t->server_cn, &t->nserver_cn);
  }
}

static pc_status_t parse_tls(vctx_t *c, pc_config_t *cfg, const json_t *v, int32_t n) {
  pc_status_t st = want_object(c, v, n);
  if (st != PC_OK) return st;
  cfg->tls.set = 1;
  if ((st = walk(c, v, n, tls_keys, NKEYS(tls_keys), tls_field, cfg)) != PC_OK) return st;
  for (int k = 0; k < 3; k++)
    if ((st = require(c, v, n, tls_keys[k])) != PC_OK) return st;
  return PC_OK;
}

static const char *const limits_keys[] = {
    "max_connections",   "max_connections_per_peer", "max_unauthenticated", "auth_timeout_ms",
    "idle_timeout_ms",   "frame_timeout_ms",         "max_frame_mb",        "request_memory_mb",
    "reply_memory_mb",   "reply_timeout_ms",         "http_max_connections", "http_timeout_ms"};

static pc_status_t limits_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_limits_t *l = &((pc_config_t *)dst)->limits;
  switch (which) {
    case 0: return get_uint(c, v, n, 1, 1000000, &l->max_connections);
    case 1: return get_uint(c, v, n, 1, 1000000, &l->max_connections_per_peer);
    case 2: return get_uint(c, v, n, 1, 1000000, &l->max_unauthenticated);
    case 3: return get_uint(c, v, n, 10, 600000, &l->auth_timeout_ms);
    case 4: return get_uint(c, v, n, 1000, 86400000, &l->idle_timeout_ms);
    case 5: return get_uint(c, v, n, 10, 600000, &l->frame_timeout_ms);
    case 6: return get_uint(c, v, n, 1, 1024, &l->max_frame_mb);
    case 7: return get_uint(c, v, n, 1, 1048576, &l->request_memory_mb);
    case 8: return get_uint(c, v, n, 1, 1048576, &l->reply_memory_mb);
    case 9: return get_uint(c, v, n, 10, 3600000, &l->reply_timeout_ms);
    case 10: return get_uint(c, v, n, 1, 100000, &l->http_max_connections);
    default: return get_uint(c, v, n, 10, 600000, &l->http_timeout_ms);
  }
}

static const char *const root_keys[] = {"data_dir", "secret",      "log",     "store",
                                        "tso",      "lockservice", "tablets", "workers",
                                        "zookeeper", "system_secret", "tls", "limits",
                                        "served", "servers", "replication"};

static pc_status_t root_field(vctx_t *c, void *dst, int which, const json_t *v, int32_t n) {
  pc_config_t *cfg = dst;
  pc_status_t st;
  switch (which) {
    case 0: return get_str(c, v, n, &cfg->data_dir);
    case 1: return get_str(c, v, n, &cfg->secret);
    case 2:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      return walk(c, v, n, log_keys, NKEYS(log_keys), log_field, cfg);
    case 3:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      return walk(c, v, n, store_keys, NKEYS(store_keys), store_field, cfg);
    case 4:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      cfg->tso.set = 1;
      return walk(c, v, n, tso_keys, NKEYS(tso_keys), tso_field, cfg);
    case 5:
      return fail_at(c, node_off(c, n),
                     "the lock service daemon (\"lockd\") is retired: a cluster coordinates "
                     "through ZooKeeper; remove this section and write \"zookeeper\": "
                     "{\"connect\": \"host:port,...\", \"root\": \"/percolator/NAME\"} "
                     "(docs/CONFIG.md)");
    case 6: return parse_tablets(c, cfg, v, n);
    case 7:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      cfg->workers.set = 1;
      return walk(c, v, n, workers_keys, NKEYS(workers_keys), workers_field, cfg);
    case 8: {
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      cfg->zookeeper.set = 1;
      if ((st = walk(c, v, n, zookeeper_keys, NKEYS(zookeeper_keys), zookeeper_field, cfg)) !=
          PC_OK)
        return st;
      if ((st = require(c, v, n, "connect")) != PC_OK) return st;
      return require(c, v, n, "root");
    }
    case 9: return get_str(c, v, n, &cfg->system_secret);
    case 10: return parse_tls(c, cfg, v, n);
    case 11:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      return walk(c, v, n, limits_keys, NKEYS(limits_keys), limits_field, cfg);
    case 12: return get_str(c, v, n, &cfg->served);
    case 13: return parse_servers(c, cfg, v, n);
    default:
      if ((st = want_object(c, v, n)) != PC_OK) return st;
      return walk(c, v, n, replication_keys, NKEYS(replication_keys), replication_field, cfg);
  }
}

/* Rules between keys, checked once every key is read. */
static pc_status_t check_security(vctx_t *c, const pc_config_t *cfg) {
  if (cfg->secret && cfg->system_secret && strcmp(cfg->secret, cfg->system_secret) == 0) {
    path_key(c, "system_secret", 13);
    int32_t n = member_node(c, 0, "system_secret", 13);
    return fail_at(c, node_off(c, n), "must differ from secret (it names another identity)");
  }
  const char *zs = cfg->zookeeper.secret, *zsys = cfg->zookeeper.system_secret;
  if (zsys && (!zs || strcmp(zs, zsys) == 0)) {
    int32_t zn = member_node(c, 0, "zookeeper", 9);
    path_key(c, "zookeeper", 9);
    path_key(c, "system_secret", 13);
    int32_t n = member_node(c, zn, "system_secret", 13);
    return fail_at(c, node_off(c, n),
                   zs ? "must differ from zookeeper.secret (it names another identity)"
                      : "needs zookeeper.secret too: the system's sessions hold both, to read "
                        "the nodes data clients make (docs/SECURITY.md)");
  }
  return PC_OK;
}

/* ---- entry points ---------------------------------------------------------- */

pc_config_t *pc_config_default(void) {
  pc_config_t *cfg = calloc(1, sizeof *cfg);
  if (!cfg) return NULL;
  cfg->source = strdup("(defaults)");
  cfg->data_dir = strdup("./percolator-data");
  if (!cfg->source || !cfg->data_dir) {
    pc_config_free(cfg);
    return NULL;
  }
  cfg->log_level = PC_LOG_INFO;
  cfg->store.sync = 1;
  cfg->store.cache_mb = 32;
  cfg->store.meta_cache_mb = 32;
  cfg->store.write_buffer_mb = 64;
  cfg->store.compress = 0; /* as pc_options_create: no compression */
  cfg->store.gc_interval_ms = 60000;
  cfg->store.gc_rate = 100000;
  cfg->store.gc_lifetime_ms = 60000;
  cfg->store.snapshot_max_age_ms = 86400000;
  cfg->store.lock_ttl_ms = 3000;
  cfg->store.timeout_ms = 10000;
  cfg->store.one_phase_commit = 1;
  cfg->tso.window_ms = 3000;
  cfg->workers.scan.stable_ms = 3000;
  cfg->zookeeper.session_timeout_ms = 10000;
  cfg->workers.threads = 0; /* a core each (notify/worker.h) */
  cfg->workers.scan.buckets_per_claim = 0; /* chosen by the worker (notify/worker.h) */
  cfg->workers.scan.idle_ms = 100;
  cfg->workers.scan.batch_wait_ms = UINT32_MAX; /* chosen by the worker (notify/worker.h) */
  cfg->workers.max_failures = 5;
  cfg->workers.backoff_ms = 100;
  cfg->workers.hang_ms = 60000;
  cfg->replication.election_timeout_ms = 1000;
  cfg->replication.heartbeat_ms = 100;
  cfg->replication.snapshot_entries = 8192;
  cfg->replication.down_after_ms = 1800000;
  cfg->limits = (pc_config_limits_t){.max_connections = 1024,
                                     .max_connections_per_peer = 512,
                                     .max_unauthenticated = 64,
                                     .auth_timeout_ms = 5000,
                                     .idle_timeout_ms = 300000,
                                     .frame_timeout_ms = 10000,
                                     .max_frame_mb = 80,
                                     .request_memory_mb = 256,
                                     .reply_memory_mb = 256,
                                     .reply_timeout_ms = 30000,
                                     .http_max_connections = 64,
                                     .http_timeout_ms = 5000};
  return cfg;
}

void pc_config_free(pc_config_t *cfg) {
  if (!cfg) return;
  for (size_t k = 0; k < cfg->ntablets; k++) {
    pc_config_tablet_t *t = &cfg->tablets[k];
    free(t->name);
    free(t->data_dir);
    free(t->start);
    free(t->end);
    for (size_t r = 0; r < t->nreplicas; r++) free(t->replicas[r]);
    free(t->replicas);
  }
  free(cfg->tablets);
  for (size_t k = 0; k < cfg->nservers; k++) {
    free(cfg->servers[k].name);
    free(cfg->servers[k].data_dir);
  }
  free(cfg->servers);
  for (size_t k = 0; k < cfg->workers.nplugins; k++) {
    free(cfg->workers.plugins[k].path);
    free(cfg->workers.plugins[k].config);
  }
  free(cfg->workers.plugins);
  free(cfg->tso.data_dir);
  free(cfg->zookeeper.connect);
  free(cfg->zookeeper.root);
  free(cfg->zookeeper.secret);
  free(cfg->zookeeper.system_secret);
  pc_config_tls_t *t = &cfg->tls;
  free(t->ca_file);
  free(t->cert_file);
  free(t->key_file);
  free(t->ca_at);
  free(t->cert_at);
  free(t->key_at);
  for (size_t k = 0; k < t->nallowed_cn; k++) free(t->allowed_cn[k]);
  free(t->allowed_cn);
  for (size_t k = 0; k < t->nsystem_cn; k++) free(t->system_cn[k]);
  free(t->system_cn);
  for (size_t k = 0; k < t->nserver_cn; k++) free(t->server_cn[k]);
  free(t->server_cn);
  free(cfg->system_secret);
  free(cfg->served);
  free(cfg->secret);
  free(cfg->data_dir);
  free(cfg->workers.journal_dir);
  free(cfg->source);
  free(cfg);
}

/* A syntax error (or a duplicate key, which jansson also refuses) as a message. */
static void syntax_error(vctx_t *c, const json_error_t *je) {
  size_t line = je->line > 0 ? (size_t)je->line : 1, col = je->column > 0 ? (size_t)je->column : 1;
  size_t pos = je->position >= 0 ? (size_t)je->position : 0;
  if (je->position >= 0 && pos <= c->len) linecol(c->text, c->len, pos, &line, &col);
  if (col > 1 && pos > 0 && pos <= c->len)
    col--; /* jansson's position is one past the token's last byte */
  if (json_error_code(je) == json_error_duplicate_key && je->position > 0) {
    ptree_t pt;
    int32_t dup, first;
    if (pt_build(&pt, c->text, c->len, pos, &dup, &first) == 0 && dup >= 0) {
      const ptree_t *saved = c->pt;
      c->pt = &pt;
      /* key path of the duplicate: its ancestors, outermost first */
      size_t depth = 0;
      for (int32_t k = dup; k > 0; k = pt.nodes[k].parent) depth++;
      int32_t *chain = malloc(depth * sizeof *chain);
      if (chain) {
        size_t d = depth;
        for (int32_t k = dup; k > 0; k = pt.nodes[k].parent) chain[--d] = k;
        for (d = 0; d < depth; d++) {
          const pnode_t *nd = &pt.nodes[chain[d]];
          if (nd->member) {
            path_key(c, pt_key(&pt, nd->key_at), nd->key_len);
          } else {
            size_t idx = 0;
            for (int32_t s = pt.nodes[nd->parent].first; s >= 0 && s != chain[d];
                 s = pt.nodes[s].next)
              idx++;
            path_index(c, idx);
          }
        }
        free(chain);
      }
      char shown[SHOW_CAP];
      size_t fl, fc;
      show(shown, pt_key(&pt, pt.nodes[dup].key_at), pt.nodes[dup].key_len);
      linecol(c->text, c->len, pt.nodes[first].key_off, &fl, &fc);
      fail_at(c, pt.nodes[dup].key_off, "duplicate key '%s' (first at %zu:%zu)", shown, fl, fc);
      c->pt = saved;
      pt_free(&pt);
      return;
    }
    pt_free(&pt);
  }
  /* jansson quotes the offending input: escape its control and non-ASCII bytes */
  char text[4 * JSON_ERROR_TEXT_LENGTH];
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)je->text; *p && o + 5 < sizeof text; p++) {
    if (*p < 0x20 || *p >= 0x7F)
      o += (size_t)snprintf(text + o, sizeof text - o, "\\x%02x", *p);
    else
      text[o++] = (char)*p;
  }
  text[o] = '\0';
  pc_error_set(c->err, PC_INVALID, "%s:%zu:%zu: syntax error: %s", c->src, line, col, text);
}

pc_config_t *pc_config_parse(const char *text, size_t len, const char *name, pc_error_t *err) {
  pc_error_clear(err);
  if (!name) name = "(config)";
  if (!text && len) {
    pc_error_set(err, PC_INVALID, "%s: configuration text is NULL", name);
    return NULL;
  }
  if (len > CFG_MAX_TEXT) {
    pc_error_set(err, PC_INVALID, "%s: configuration larger than %u MiB", name, CFG_MAX_TEXT >> 20);
    return NULL;
  }
  ptree_t pt = {0};
  vctx_t c = {.src = name, .text = text ? text : "", .len = len, .pt = &pt, .err = err};
  size_t k = 0;
  while (k < len && (text[k] == ' ' || text[k] == '\t' || text[k] == '\n' || text[k] == '\r')) k++;
  if (k == len) {
    fail_at(&c, 0, "the configuration is empty (expected a JSON object)");
    return NULL;
  }
  json_error_t je;
  json_t *root =
      json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
  if (!root) {
    syntax_error(&c, &je);
    return NULL;
  }
  pc_config_t *cfg = pc_config_default();
  if (!cfg || pt_build(&pt, text, len, 0, NULL, NULL) != 0) {
    fail_nomem(&c);
    goto fail;
  }
  free(cfg->source);
  if (!(cfg->source = strdup(name))) {
    fail_nomem(&c);
    goto fail;
  }
  if (!json_is_object(root)) {
    fail_at(&c, node_off(&c, 0), "expected an object at the top level, got %s", type_name(root));
    goto fail;
  }
  if (walk(&c, root, 0, root_keys, NKEYS(root_keys), root_field, cfg) != PC_OK) goto fail;
  if (check_topology(&c, cfg) != PC_OK) goto fail;
  if (cfg->ntablets && !cfg->zookeeper.set && !cfg->served) {
    /* a cluster has one coordination engine, ZooKeeper; only the client
     * configuration a worker writes for the embedded directory it serves
     * (one process, one machine) runs without one */
    path_pop(&c, 0);
    path_key(&c, "tablets", 7);
    fail_at(&c, node_off(&c, member_node(&c, 0, "tablets", 7)),
            "a cluster needs a \"zookeeper\" section ({\"connect\": \"host:port,...\", "
            "\"root\": \"/percolator/NAME\"}): its oracles, clients and workers coordinate "
            "through ZooKeeper (docs/CONFIG.md)");
    goto fail;
  }
  if (check_security(&c, cfg) != PC_OK) goto fail;
  json_decref(root);
  pt_free(&pt);
  return cfg;
fail:
  json_decref(root);
  pt_free(&pt);
  pc_config_free(cfg);
  return NULL;
}

pc_config_t *pc_config_load(const char *path, pc_error_t *err) {
  pc_error_clear(err);
  if (!path) {
    pc_error_set(err, PC_INVALID, "configuration path is NULL");
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    pc_error_set(err, e == ENOENT || e == ENOTDIR ? PC_INVALID : PC_IO_ERROR, "%s: cannot open: %s",
                 path, strerror(e));
    return NULL;
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      if (cap > CFG_MAX_TEXT) {
        pc_error_set(err, PC_INVALID, "%s: configuration larger than %u MiB", path,
                     CFG_MAX_TEXT >> 20);
        goto fail;
      }
      size_t ncap = cap ? cap * 2 : 4096;
      char *p = realloc(buf, ncap);
      if (!p) {
        pc_error_set(err, PC_NOMEM, "%s: out of memory", path);
        goto fail;
      }
      buf = p;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      pc_error_set(err, PC_IO_ERROR, "%s: cannot read: %s", path, strerror(errno));
      goto fail;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  pc_config_t *cfg = pc_config_parse(buf, len, path, err);
  free(buf);
  return cfg;
fail:
  close(fd);
  free(buf);
  return NULL;
}
