/* jsonl_doc.h — the fast path of `percolator load`'s JSON lines: an object
 * whose members are all strings, read without building a JSON tree.
 *
 * Why: jansson's lexer reads a byte at a time and builds a tree, the larger
 * part of the loader's CPU on documents of real text (docs/BENCHMARKS.md,
 * "Where the time went on the files"). This reader takes only the shape the loader is fed nearly always, and for
 * anything else (another value than a string, a member named twice, a
 * malformed or unusual escape, bytes that are not UTF-8, trailing bytes)
 * says so, and the caller asks jansson, which accepts or reports the line as
 * before. What it accepts, jansson accepts with the same strings
 * (fuzz/fuzz_jsonl_doc.c holds it to that; tests/test_jsonl_doc.c the
 * cases). */
#ifndef PC_CLI_JSONL_DOC_H
#define PC_CLI_JSONL_DOC_H

#include <stddef.h>

typedef struct jsonl_doc {
  /* the members "url" and "contents" decoded (NULL when absent), pointing
   * into mem; any other member is read and dropped */
  const char *url, *contents;
  size_t url_len, contents_len;
  char *mem; /* owned; released by jsonl_doc_free */
  size_t cap;
} jsonl_doc_t;

/* Reads line[0..n). 1: *d holds the line's url and contents; 0: not a line
 * for this path (ask jansson); -1: out of memory. *d may be reused from line
 * to line (its memory is kept) and must start zeroed. */
int jsonl_doc_read(const char *line, size_t n, jsonl_doc_t *d);
void jsonl_doc_free(jsonl_doc_t *d);

#endif
