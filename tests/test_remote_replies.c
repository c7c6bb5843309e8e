/* test_remote_replies.c — the remote store (tablet/store_remote.c) reading
 * replies that no well-behaved tablet sends, from a scripted server in this
 * process (rpc.h's in_process mode: no socket). Each case is one that
 * fuzz/fuzz_replies found; every answer must be a status of percolator.h
 * with its message, PC_LOCKED only with its lock, and nothing leaked (run
 * under ASan for the leaks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/keys.h"
#include "core/store.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"

/* ---- the scripted tablet ------------------------------------------------- */

#define MAX_SCRIPT 4

/* The answers to the next calls, in order: an rpc status (with the body as
 * its message) or PC_OK and the body as the reply. */
static struct {
  pc_status_t st;
  pc_buf_t body;
} script[MAX_SCRIPT];
static size_t nscript, next;

static pc_status_t scripted(void *ctx, uint8_t op, const char *body, size_t len, pc_buf_t *reply,
                            pc_error_t *err) {
  (void)ctx;
  (void)op;
  (void)body;
  (void)len;
  if (next == nscript) return pc_error_set(err, PC_UNAVAILABLE, "script used up");
  size_t k = next++;
  if (script[k].st != PC_OK)
    return pc_error_set(err, script[k].st, "%.*s", (int)script[k].body.len, script[k].body.p);
  pc_buf_append(reply, script[k].body.p, script[k].body.len);
  return PC_OK;
}

/* Appends an answer; returns its body for the caller to fill. */
static pc_buf_t *answer(pc_status_t st) {
  assert_true(nscript < MAX_SCRIPT);
  script[nscript].st = st;
  script[nscript].body.len = 0;
  return &script[nscript++].body;
}

typedef struct fixture {
  pc_rpc_server_t *server;
  pc_store_t *store;
  pc_rpc_client_t *rpc;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  pc_rpc_server_options_t o = {0};
  o.name = "scripted";
  o.host = "127.0.0.1";
  o.workers = 1;
  o.in_process = 1;
  pc_error_t err;
  f->server = pc_rpc_server_start(&o, scripted, NULL, &err);
  assert_non_null(f->server);
  uint16_t port = pc_rpc_server_port(f->server);
  pc_tablet_addr_t t[1] = {{"t1", "127.0.0.1", port, {"", 0, "", 0}, 0}};
  f->store = pc_remote_store_open(t, 1, NULL, 2000, &err);
  assert_non_null(f->store);
  f->rpc = pc_rpc_client_create("127.0.0.1", port, NULL, &err);
  assert_non_null(f->rpc);
  nscript = next = 0;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  f->store->ops->close(f->store);
  pc_rpc_client_destroy(f->rpc);
  pc_rpc_server_stop(f->server);
  for (size_t i = 0; i < MAX_SCRIPT; i++) pc_buf_free(&script[i].body);
  free(f);
  return 0;
}

static const pc_cell_t cell = {"t", "row", 3, "col", 3};

/* A lock as a tablet encodes it. */
static void put_lock(pc_buf_t *b) {
  pc_lock_info_t l = {0};
  l.start_ts = 90;
  l.kind = PC_WRITE_PUT;
  l.ttl_ms = 3000;
  l.session = 7;
  pc_buf_append(&l.ptable, "t", 1);
  pc_buf_append(&l.prow, "row", 3);
  pc_buf_append(&l.pcol, "col", 3);
  pc_buf_append(&l.ctable, "t", 1);
  pc_buf_append(&l.crow, "row", 3);
  pc_buf_append(&l.ccol, "col", 3);
  assert_int_equal(pc_wire_put_lock(b, &l), 0);
  pc_lock_info_free(&l);
}

/* ---- the cases ------------------------------------------------------------ */

/* A store verdict (locked, not found) as the status of the call itself: a
 * tablet sends verdicts inside its replies, so this is a protocol error and
 * the outcome unknown; it used to be taken as the verdict, a PC_LOCKED
 * without its lock and a PC_NOT_FOUND without a read timestamp. */
static void test_call_status_is_not_a_verdict(void **state) {
  fixture_t *f = *state;
  pc_buf_append(answer(PC_LOCKED), "locked", 6);
  pc_buf_append(answer(PC_NOT_FOUND), "nothing", 7);
  char *v = NULL;
  size_t vlen = 0;
  uint64_t read_ts = 1;
  pc_lock_info_t lock;
  pc_error_t err;
  pc_status_t st = f->store->ops->get(f->store, &cell, 100, &v, &vlen, &lock, &err);
  assert_int_equal(st, PC_UNAVAILABLE);
  assert_int_equal(err.code, PC_UNAVAILABLE);
  assert_non_null(strstr(err.text, "tablet t1: protocol error"));
  st = f->store->ops->get_fresh(f->store, &cell, NULL, NULL, &read_ts, &v, &vlen, &lock, &err);
  assert_int_equal(st, PC_UNAVAILABLE);
  assert_int_equal(read_ts, 0);
  assert_null(v);
}

/* A reply whose status byte is not a pc_status_t is malformed; it used to
 * be handed to the caller as status 200. */
static void test_unknown_reply_status(void **state) {
  fixture_t *f = *state;
  for (int k = 0; k < 3; k++) {
    pc_buf_t *b = answer(PC_OK);
    pc_buf_u8(b, 200);
    pc_buf_str(b, "", 0);
  }
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock;
  pc_error_t err;
  assert_int_equal(f->store->ops->get(f->store, &cell, 100, &v, &vlen, &lock, &err), PC_CORRUPTION);
  assert_int_equal(err.code, PC_CORRUPTION);
  assert_int_equal(f->store->ops->commit(f->store, &cell, 1, 100, 200, &err), PC_CORRUPTION);
  pc_store_gc_stats_t g;
  assert_int_equal(f->store->ops->gc(f->store, 100, 0, &g, &err), PC_CORRUPTION);
  assert_non_null(strstr(err.text, "unknown status 200"));
  /* and `status`'s INFO */
  nscript = next = 0;
  pc_buf_t *b = answer(PC_OK);
  pc_buf_u8(b, 200);
  pc_buf_str(b, "", 0);
  pc_buf_t name = {0};
  uint64_t ops;
  pc_tablet_gc_t tg;
  assert_int_equal(pc_tablet_remote_info(f->rpc, 2000, &name, &ops, &tg, &err), PC_CORRUPTION);
  pc_buf_free(&name);
}

/* The tablet's own PC_NOMEM comes with its message (a get used to return it
 * with err left empty, as if the client had run out of memory). */
static void test_tablet_nomem_has_its_message(void **state) {
  fixture_t *f = *state;
  pc_buf_t *b = answer(PC_OK);
  pc_buf_u8(b, PC_NOMEM);
  pc_buf_str(b, "tablet t1: out of memory", 24);
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock;
  pc_error_t err;
  assert_int_equal(f->store->ops->get(f->store, &cell, 100, &v, &vlen, &lock, &err), PC_NOMEM);
  assert_int_equal(err.code, PC_NOMEM);
  assert_string_equal(err.text, "tablet t1: out of memory");
}

static int stop_at_first(void *ctx, const pc_cell_t *c, const char *v, size_t vlen) {
  (void)c;
  (void)v;
  (void)vlen;
  ++*(int *)ctx;
  return 1;
}

static int count_cells(void *ctx, const pc_cell_t *c, const char *v, size_t vlen) {
  (void)c;
  (void)v;
  (void)vlen;
  ++*(int *)ctx;
  return 0;
}

/* A scan whose caller stops at a cell before the lock the reply ends with
 * has not met the lock: PC_OK (it used to be PC_LOCKED with *lock never
 * written). */
static void test_scan_stopped_before_its_lock(void **state) {
  fixture_t *f = *state;
  pc_buf_t *b = answer(PC_OK);
  pc_buf_u8(b, PC_LOCKED);
  pc_buf_u32(b, 2);
  for (int k = 0; k < 2; k++) {
    pc_buf_str(b, k ? "b" : "a", 1);
    pc_buf_str(b, "c", 1);
    pc_buf_str(b, "v", 1);
  }
  put_lock(b);
  pc_buf_str(b, "locked", 6);
  int seen = 0;
  pc_lock_info_t lock;
  pc_error_t err;
  pc_status_t st = f->store->ops->scan(f->store, "t", "", 0, NULL, 0, NULL, 0, 100, 10,
                                       stop_at_first, &seen, &lock, &err);
  assert_int_equal(st, PC_OK);
  assert_int_equal(seen, 1);
}

/* A lock followed by a malformed message: the answer is PC_CORRUPTION, and
 * the lock decoded on the way is released (it used to leak: callers release
 * a lock only with PC_LOCKED). For get, prewrite and scan. */
static void test_lock_then_bad_message(void **state) {
  fixture_t *f = *state;
  for (int k = 0; k < 3; k++) {
    pc_buf_t *b = answer(PC_OK);
    pc_buf_u8(b, PC_LOCKED);
    if (k == 2) pc_buf_u32(b, 0); /* scan: no cells */
    put_lock(b);
    pc_buf_str(b, "locked", 6);
    pc_buf_u8(b, 0); /* a trailing byte */
  }
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock;
  pc_error_t err;
  assert_int_equal(f->store->ops->get(f->store, &cell, 100, &v, &vlen, &lock, &err), PC_CORRUPTION);
  pc_mutation_t m = {cell, PC_WRITE_PUT, "v", 1, 0};
  pc_lock_spec_t spec = {cell, 100, 3000, 7};
  assert_int_equal(f->store->ops->prewrite(f->store, &m, 1, &spec, &lock, &err), PC_CORRUPTION);
  int seen = 0;
  assert_int_equal(f->store->ops->scan(f->store, "t", "", 0, NULL, 0, NULL, 0, 100, 10, count_cells,
                                       &seen, &lock, &err),
                   PC_CORRUPTION);
}

/* A scan reply with more cells than the request's limit is malformed; they
 * used to be delivered, past the caller's limit. */
static void test_scan_more_cells_than_asked(void **state) {
  fixture_t *f = *state;
  pc_buf_t *b = answer(PC_OK);
  pc_buf_u8(b, PC_OK);
  pc_buf_u32(b, 3);
  for (int k = 0; k < 3; k++) {
    pc_buf_str(b, k == 0 ? "a" : k == 1 ? "b" : "c", 1);
    pc_buf_str(b, "c", 1);
    pc_buf_str(b, "v", 1);
  }
  pc_buf_str(b, "", 0);
  int seen = 0;
  pc_lock_info_t lock;
  pc_error_t err;
  pc_status_t st = f->store->ops->scan(f->store, "t", "", 0, NULL, 0, NULL, 0, 100, 2, count_cells,
                                       &seen, &lock, &err);
  assert_int_equal(st, PC_CORRUPTION);
  assert_true(seen <= 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_call_status_is_not_a_verdict, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_reply_status, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tablet_nomem_has_its_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_scan_stopped_before_its_lock, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lock_then_bad_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_scan_more_cells_than_asked, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
