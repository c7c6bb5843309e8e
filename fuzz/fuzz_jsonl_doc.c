/* fuzz_jsonl_doc.c — `percolator load`'s fast path for JSON lines
 * (apps/cli/jsonl_doc.c) against jansson on any line: it never reads or
 * writes outside the line, and a line it takes is one jansson (with
 * JSON_ALLOW_NUL, as the loader calls it) accepts as an object whose "url"
 * and "contents" are the strings the fast path decoded. */
#include <jansson.h>
#include <string.h>

#include "apps/cli/jsonl_doc.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *line = (const char *)data;
  jsonl_doc_t d = {0};
  int r = jsonl_doc_read(line, size, &d);
  FUZZ_CHECK(r == 0 || r == 1);
  if (r == 1) {
    json_t *root = json_loadb(line, size, JSON_ALLOW_NUL, NULL);
    FUZZ_CHECK(root != NULL && json_is_object(root));
    json_t *u = json_object_get(root, "url"), *c = json_object_get(root, "contents");
    FUZZ_CHECK((d.url != NULL) == json_is_string(u));
    FUZZ_CHECK((d.contents != NULL) == json_is_string(c));
    if (d.url)
      FUZZ_CHECK(d.url_len == json_string_length(u) &&
                 memcmp(d.url, json_string_value(u), d.url_len) == 0);
    if (d.contents)
      FUZZ_CHECK(d.contents_len == json_string_length(c) &&
                 memcmp(d.contents, json_string_value(c), d.contents_len) == 0);
    json_decref(root);
  }
  jsonl_doc_free(&d);
  return 0;
}
