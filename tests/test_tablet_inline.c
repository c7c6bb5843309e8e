/* test_tablet_inline.c — a tablet's reads served on its server's I/O thread
 * (tablet.h's pc_tablet_rpc_runs_inline, net/rpc.h's runs_inline).
 *
 *   - GET, GET_MANY and SCAN_NOTIFY run on the I/O thread, with the answers
 *     a worker would give, and writes still go to the workers;
 *   - a GET of a row whose one-phase commit is in flight (its latch held
 *     across the commit's write, held there by the failpoint
 *     store.before_apply=pause) would have to wait for that commit: it is
 *     sent on to a worker, waits there until the test lets the commit go,
 *     and returns the committed value, never the one the I/O thread read
 *     before the commit landed;
 *   - the store refuses that wait only where the thread may not wait
 *     (base/deadline.h's pc_nowait_*).
 * Over a real socket (no in-process shortcut), on 127.0.0.1. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/deadline.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "core/store.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "tests/testutil.h"

#define WAIT_MS 60000 /* bounds on waiting for what must happen (not timings) */

typedef struct fixture {
  char *dir;
  pc_store_t *local;  /* the tablet's own store */
  pc_tablet_t *tablet;
  pc_rpc_server_t *server;
  pc_store_t *remote; /* a client of the server, over TCP */
} fixture_t;

static void put(pc_store_t *s, const char *row, const char *value) {
  pc_mutation_t m = {{"t", row, strlen(row), "c", 1}, PC_WRITE_PUT, value, strlen(value), 0};
  uint64_t start, commit;
  pc_error_t err;
  tu_ts_next(NULL, &start, &err);
  pc_lock_info_t lock = {0};
  assert_int_equal(
      s->ops->commit_one_phase(s, &m, 1, start, tu_ts_next, NULL, NULL, &commit, &lock, &err),
      PC_OK);
}

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->dir = tu_mkdtemp("inline");
  char path[4200];
  snprintf(path, sizeof path, "%s/store", f->dir);
  pc_local_options_t lo = {1, 0, 1u << 20, 1u << 20, 4u << 20, 0};
  pc_error_t err;
  f->local = pc_local_store_open(path, &lo, &err);
  if (!f->local) fail_msg("pc_local_store_open: %s", err.text);
  put(f->local, "r1", "old");
  put(f->local, "r2", "two");
  pc_row_range_t all = {"", 0, "", 0};
  f->tablet = pc_tablet_create("t1", f->local, &all, tu_ts_next, NULL);
  assert_non_null(f->tablet);
  pc_rpc_server_options_t o;
  memset(&o, 0, sizeof o);
  o.name = "tablet";
  o.host = "127.0.0.1";
  o.workers = 2;
  o.runs_inline = pc_tablet_rpc_runs_inline;
  f->server = pc_rpc_server_start(&o, pc_tablet_rpc_handler, f->tablet, &err);
  if (!f->server) fail_msg("pc_rpc_server_start: %s", err.text);
  pc_tablet_addr_t t[1] = {{"t1", "127.0.0.1", pc_rpc_server_port(f->server), all, 0}};
  f->remote = pc_remote_store_open(t, 1, NULL, WAIT_MS, &err);
  if (!f->remote) fail_msg("pc_remote_store_open: %s", err.text);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pc_failpoints_configure(NULL, NULL);
  f->remote->ops->close(f->remote);
  pc_rpc_server_stop(f->server);
  pc_tablet_destroy(f->tablet);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

static pc_rpc_server_stats_t stats(pc_rpc_server_t *s) {
  pc_rpc_server_stats_t st;
  pc_rpc_server_stats(s, &st);
  return st;
}

/* The value of t/row/c at read_ts through s, as a string (caller frees). */
static char *get(pc_store_t *s, const char *row, uint64_t read_ts) {
  pc_cell_t c = {"t", row, strlen(row), "c", 1};
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock = {0};
  pc_error_t err;
  pc_status_t st = s->ops->get(s, &c, read_ts, &v, &vlen, &lock, &err);
  if (st != PC_OK) fail_msg("get %s: %s", row, err.text);
  char *out = malloc(vlen + 1);
  assert_non_null(out);
  memcpy(out, v, vlen);
  out[vlen] = '\0';
  pc_free(v);
  return out;
}

static int count_note(void *ctx, const pc_notification_t *n) {
  (void)n;
  (*(int *)ctx)++;
  return 0;
}

/* Point reads and notification scans are served on the I/O thread, with
 * the same answers; a write goes to a worker. */
static void test_reads_run_inline(void **state) {
  fixture_t *f = *state;
  uint64_t now = tu_ts_last() + 1;
  char *v = get(f->remote, "r1", now);
  assert_string_equal(v, "old");
  free(v);
  pc_cell_t cells[2] = {{"t", "r1", 2, "c", 1}, {"t", "r2", 2, "c", 1}};
  pc_got_t out[2];
  pc_lock_info_t lock = {0};
  pc_error_t err;
  assert_non_null(f->remote->ops->get_many);
  assert_int_equal(f->remote->ops->get_many(f->remote, cells, 2, now, out, &lock, &err), PC_OK);
  assert_int_equal(out[0].status, PC_OK);
  assert_int_equal(out[1].status, PC_OK);
  assert_int_equal(out[1].vlen, 3);
  assert_memory_equal(out[1].value, "two", 3);
  for (int i = 0; i < 2; i++) pc_free(out[i].value);
  int notes = 0;
  assert_int_equal(f->remote->ops->scan_notify(f->remote, 0, PC_NOTIFY_BUCKETS, NULL, 100,
                                               count_note, &notes, &err),
                   PC_OK);
  assert_int_equal(notes, 0); /* nothing observes t/c */
  pc_rpc_server_stats_t st = stats(f->server);
  assert_true(st.inline_served >= 3);
  assert_int_equal(st.inline_deferred, 0);
  uint64_t before = st.inline_served;
  put(f->remote, "r3", "three"); /* a write: not inline */
  assert_int_equal(stats(f->server).inline_served, before);
}

static void *commit_main(void *p) {
  put(p, "r1", "new");
  return NULL;
}

/* A GET of t/r1/c at read_ts through s, on its own thread (no cmocka
 * assertions there: the test checks st and value after the join). */
struct get_arg {
  pc_store_t *s;
  uint64_t read_ts;
  pc_status_t st;
  char *value;
  size_t vlen;
  atomic_int done;
};

static void *get_main(void *p) {
  struct get_arg *g = p;
  pc_cell_t c = {"t", "r1", 2, "c", 1};
  pc_lock_info_t lock = {0};
  pc_error_t err;
  g->st = g->s->ops->get(g->s, &c, g->read_ts, &g->value, &g->vlen, &lock, &err);
  pc_lock_info_free(&lock);
  atomic_store(&g->done, 1);
  return NULL;
}

/* A GET that meets a one-phase commit in flight on its row goes to a worker
 * and returns the committed value. */
static void test_read_behind_a_commit_goes_to_a_worker(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"t", "r1", 2, "c", 1};
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock = {0};
  pc_error_t err;
  /* nothing in flight: a read where the thread may not wait refuses nothing */
  pc_nowait_begin();
  assert_int_equal(f->local->ops->get(f->local, &c, tu_ts_last(), &v, &vlen, &lock, &err),
                   PC_OK);
  assert_int_equal(pc_nowait_end(), 0);
  pc_free(v);

  assert_int_equal(pc_failpoints_configure("store.before_apply=pause", &err), PC_OK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, commit_main, f->local), 0);
  /* until the commit holds r1's latch: a read that may not wait refuses */
  int held = 0;
  for (uint64_t until = pc_now_mono_ms() + WAIT_MS; !held && pc_now_mono_ms() < until;) {
    pc_nowait_begin();
    v = NULL;
    pc_status_t st = f->local->ops->get(f->local, &c, tu_ts_last() + 1000, &v, &vlen,
                                        &lock, &err);
    held = pc_nowait_end();
    if (st == PC_OK) pc_free(v);
    if (!held) pc_sleep_ms(1);
  }
  assert_true(held);
  /* over the network, at a read_ts the commit's commit_ts is below: the
   * read is sent on to a worker, which waits while the commit is paused */
  uint64_t deferred = stats(f->server).inline_deferred;
  struct get_arg g = {.s = f->remote, .read_ts = tu_ts_last() + 1000};
  pthread_t gt;
  assert_int_equal(pthread_create(&gt, NULL, get_main, &g), 0);
  for (uint64_t until = pc_now_mono_ms() + WAIT_MS;
       stats(f->server).inline_deferred == deferred && pc_now_mono_ms() < until;)
    pc_sleep_ms(1);
  assert_true(stats(f->server).inline_deferred > deferred);
  assert_int_equal(atomic_load(&g.done), 0); /* the commit is still paused */
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK); /* let it go */
  pthread_join(gt, NULL);
  pthread_join(t, NULL);
  assert_int_equal(g.st, PC_OK);
  assert_int_equal(g.vlen, 3);
  assert_memory_equal(g.value, "new", 3);
  pc_free(g.value);
  assert_int_equal(pc_nowait_refuse(), 0); /* outside a scope: wait as usual */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reads_run_inline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_behind_a_commit_goes_to_a_worker, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
