/* fuzz_util.c — the helpers of fuzz_util.h. */
#include "fuzz/fuzz_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "fuzz/fuzz.h"
#include "net/rpc.h"

static char scratch[4096];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  return remove(path);
}

void fuzz_remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void remove_scratch(void) {
  if (scratch[0]) fuzz_remove_tree(scratch);
}

const char *fuzz_scratch_dir(void) {
  if (scratch[0]) return scratch;
  const char *tmp = getenv("TMPDIR");
  snprintf(scratch, sizeof scratch, "%s/pc-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  FUZZ_CHECK(mkdtemp(scratch) != NULL);
  atexit(remove_scratch);
  return scratch;
}

int fuzz_next_chunk(fuzz_chunks_t *c, uint8_t *tag, const char **body, size_t *n) {
  if (c->len - c->pos < 1) return 0;
  *tag = c->p[c->pos++];
  size_t want = 0;
  if (c->len - c->pos >= 2) {
    want = (size_t)c->p[c->pos] << 8 | c->p[c->pos + 1];
    c->pos += 2;
  } else {
    c->pos = c->len;
  }
  if (want > c->len - c->pos) want = c->len - c->pos;
  *body = (const char *)c->p + c->pos;
  *n = want;
  c->pos += want;
  return 1;
}

/* ---- the fake server ---------------------------------------------------- */

static fuzz_chunks_t script;
static size_t calls;

static pc_status_t fake_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                pc_buf_t *reply, pc_error_t *err) {
  (void)ctx;
  (void)op;
  (void)body;
  (void)len;
  calls++;
  uint8_t tag;
  const char *p;
  size_t n;
  if (!fuzz_next_chunk(&script, &tag, &p, &n))
    return pc_error_set(err, PC_UNAVAILABLE, "the script of replies is used up");
  pc_status_t st = tag <= PC_STATUS_MAX ? (pc_status_t)tag : PC_OK;
  if (st != PC_OK) return pc_error_set(err, st, "%.*s", (int)n, p);
  return pc_buf_append(reply, p, n) ? pc_error_set(err, PC_NOMEM, "out of memory") : PC_OK;
}

uint16_t fuzz_fake_server_port(void) {
  static pc_rpc_server_t *server;
  if (!server) {
    pc_log_set_level(PC_LOG_ERROR); /* a warning per hostile frame would drown the run */
    pc_rpc_server_options_t o = {0};
    o.name = "fake";
    o.host = "127.0.0.1";
    o.workers = 1;
    o.in_process = 1;
    pc_error_t err;
    server = pc_rpc_server_start(&o, fake_handler, NULL, &err);
    if (!server) fprintf(stderr, "fake server: %s\n", err.text);
    FUZZ_CHECK(server != NULL);
  }
  return pc_rpc_server_port(server);
}

void fuzz_fake_script(const uint8_t *data, size_t size) {
  script = (fuzz_chunks_t){data, size, 0};
  calls = 0;
}

size_t fuzz_fake_calls(void) { return calls; }
