/* test_jsonl_doc.c — the fast path of `percolator load`'s JSON lines
 * (apps/cli/jsonl_doc.c): the lines it must take (escapes, surrogate pairs,
 * UTF-8, "\u0000", other string members, whitespace) with their decoded
 * strings, the lines it must leave to jansson (other value types, a member
 * named twice, escaped names, bad escapes, lone surrogates, bytes that are
 * not UTF-8, control characters, trailing bytes), and, for every case and
 * for 200,000 mutations of them, that a line it takes is one jansson
 * (JSON_ALLOW_NUL, as the loader calls it) accepts with the same url and
 * contents. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/cli/jsonl_doc.h"

/* What jansson makes of line: 1 with url and contents (either may be
 * missing: NULL), 0 when it refuses the line or it is no object. */
static int jansson_read(const char *line, size_t n, json_t **root, json_t **url,
                        json_t **contents) {
  *url = *contents = NULL;
  *root = json_loadb(line, n, JSON_ALLOW_NUL, NULL);
  if (!*root || !json_is_object(*root)) return 0;
  *url = json_object_get(*root, "url");
  *contents = json_object_get(*root, "contents");
  return 1;
}

/* A line the fast path takes is taken by jansson with the same strings. */
static void agrees(const char *line, size_t n) {
  jsonl_doc_t d = {0};
  int r = jsonl_doc_read(line, n, &d);
  assert_true(r == 0 || r == 1);
  if (r == 1) {
    json_t *root, *u = NULL, *c = NULL;
    if (!jansson_read(line, n, &root, &u, &c)) {
      fprintf(stderr, "taken, but jansson refuses: %.*s\n", (int)n, line);
      fail();
    }
    assert_int_equal(d.url != NULL, json_is_string(u));
    assert_int_equal(d.contents != NULL, json_is_string(c));
    if (d.url) {
      assert_int_equal(d.url_len, json_string_length(u));
      assert_memory_equal(d.url, json_string_value(u), d.url_len);
    }
    if (d.contents) {
      assert_int_equal(d.contents_len, json_string_length(c));
      assert_memory_equal(d.contents, json_string_value(c), d.contents_len);
    }
    json_decref(root);
  }
  jsonl_doc_free(&d);
}

typedef struct {
  const char *line;
  size_t len; /* 0: strlen */
  const char *url, *contents;
  size_t url_len, contents_len; /* 0: strlen */
} taken_t;

static const taken_t taken[] = {
    {"{\"url\": \"a\", \"contents\": \"hello world\"}", 0, "a", "hello world", 0, 0},
    {"  {\"contents\":\"x\",\"url\":\"u/1\"}  \r", 0, "u/1", "x", 0, 0},
    {"{\"url\":\"u\",\"contents\":\"q\\\"b\\\\s\\/n\\nt\\tr\\rb\\bf\\f\"}", 0, "u",
     "q\"b\\s/n\nt\tr\rb\bf\f", 0, 0},
    {"{\"url\":\"u\",\"contents\":\"\\u00e9\\u20AC\\ud83d\\ude00\"}", 0, "u",
     "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 0, 0},
    {"{\"url\":\"u\",\"contents\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}", 0, "u",
     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0, 0},
    {"{\"url\":\"u\",\"contents\":\"a\\u0000b\"}", 0, "u", "a\0b", 0, 3},
    {"{\"url\":\"u\",\"title\":\"t\",\"contents\":\"c\",\"title\":\"again\"}", 0, "u", "c", 0, 0},
    {"{\"url\":\"\",\"contents\":\"\"}", 0, "", "", 0, 0},
    {"{}", 0, NULL, NULL, 0, 0},
    {"{\"url\":\"only\"}", 0, "only", NULL, 0, 0},
};

/* A member as read (got, NULL when absent) is want[0..want_len) (0: strlen),
 * or absent when want is NULL. */
static void expect_member(const char *got, size_t got_len, const char *want, size_t want_len) {
  if (!want) {
    assert_null(got);
    return;
  }
  size_t wl = want_len ? want_len : strlen(want);
  assert_non_null(got);
  assert_int_equal(got_len, wl);
  assert_memory_equal(got, want, wl);
}

static void test_taken(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
    const taken_t *t = &taken[i];
    size_t n = t->len ? t->len : strlen(t->line);
    jsonl_doc_t d = {0};
    if (jsonl_doc_read(t->line, n, &d) != 1) {
      fprintf(stderr, "not taken: %s\n", t->line);
      fail();
    }
    expect_member(d.url, d.url_len, t->url, t->url_len);
    expect_member(d.contents, d.contents_len, t->contents, t->contents_len);
    jsonl_doc_free(&d);
    agrees(t->line, n);
  }
}

static const char *const declined[] = {
    "",
    "[]",
    "\"a string\"",
    "{\"url\":\"u\",\"contents\":\"c\",\"size\":3}",      /* a number */
    "{\"url\":\"u\",\"contents\":\"c\",\"tags\":[\"x\"]}", /* an array */
    "{\"url\":\"u\",\"contents\":null}",
    "{\"url\":\"u\",\"url\":\"v\",\"contents\":\"c\"}", /* named twice */
    "{\"u\\u0072l\":\"u\",\"contents\":\"c\"}",         /* an escaped name */
    "{\"url\":\"u\",\"contents\":\"bad \\x escape\"}",
    "{\"url\":\"u\",\"contents\":\"short \\u12\"}",
    "{\"url\":\"u\",\"contents\":\"lone \\ud800 high\"}",
    "{\"url\":\"u\",\"contents\":\"lone \\udc00 low\"}",
    "{\"url\":\"u\",\"contents\":\"\\ud800\\u0041 not a low half\"}",
    "{\"url\":\"u\",\"contents\":\"\xff not UTF-8\"}",
    "{\"url\":\"u\",\"contents\":\"\xc0\xaf overlong\"}",
    "{\"url\":\"u\",\"contents\":\"\xed\xa0\x80 a surrogate\"}",
    "{\"url\":\"u\",\"contents\":\"\xf4\x90\x80\x80 above U+10FFFF\"}",
    "{\"url\":\"u\",\"contents\":\"\xe2\x82 cut short\"}",
    "{\"url\":\"u\",\"contents\":\"a\tcontrol character\"}",
    "{\"url\":\"u\",\"contents\":\"c\"} trailing",
    "{\"url\":\"u\",\"contents\":\"c\"",
    "{\"url\":\"u\",\"contents\":\"c\",}",
    "{\"url\" \"u\"}",
    "{\"url\":\"u\" \"contents\":\"c\"}",
    "{\"url\":\"u\",\"contents\":\"unterminated}",
};

static void test_declined(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++) {
    jsonl_doc_t d = {0};
    if (jsonl_doc_read(declined[i], strlen(declined[i]), &d) != 0) {
      fprintf(stderr, "taken: %s\n", declined[i]);
      fail();
    }
    jsonl_doc_free(&d);
  }
  /* a raw NUL in a string is a control character */
  static const char nul[] = "{\"url\":\"u\",\"contents\":\"a\0b\"}";
  jsonl_doc_t d = {0};
  assert_int_equal(jsonl_doc_read(nul, sizeof nul - 1, &d), 0);
  jsonl_doc_free(&d);
}

/* A small PRNG (xorshift64*), so the mutations are the same every run. */
static uint64_t rnd(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static void test_mutations_agree(void **state) {
  (void)state;
  static const char alphabet[] = "{}[]\",:\\ /unbfrt0123456789abcdefABCDEF\x01\x7f\x80\xc3\xa9"
                                 "\xed\xf0\xf4\xff";
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  char buf[256];
  size_t ncases = sizeof taken / sizeof taken[0] + sizeof declined / sizeof declined[0];
  for (int iter = 0; iter < 200000; iter++) {
    size_t c = (size_t)(rnd(&seed) % ncases);
    const char *base = c < sizeof taken / sizeof taken[0]
                           ? taken[c].line
                           : declined[c - sizeof taken / sizeof taken[0]];
    size_t n = c < sizeof taken / sizeof taken[0] && taken[c].len ? taken[c].len : strlen(base);
    if (n > sizeof buf - 8) n = sizeof buf - 8;
    memcpy(buf, base, n);
    int edits = 1 + (int)(rnd(&seed) % 3);
    for (int e = 0; e < edits && n > 0; e++) {
      size_t at = (size_t)(rnd(&seed) % n);
      char ch = alphabet[rnd(&seed) % (sizeof alphabet - 1)];
      switch (rnd(&seed) % 3) {
        case 0: buf[at] = ch; break;                                    /* replace */
        case 1: memmove(buf + at, buf + at + 1, n - at - 1), n--; break; /* delete */
        default:                                                        /* insert */
          memmove(buf + at + 1, buf + at, n - at);
          buf[at] = ch;
          n++;
      }
    }
    agrees(buf, n);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_taken),
      cmocka_unit_test(test_declined),
      cmocka_unit_test(test_mutations_agree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
