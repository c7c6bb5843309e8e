/* test_rereplicate.c — a server down longer than replication.down_after_ms
 * has its replicas made again elsewhere: a replicated cluster (through the
 * playground's code) of four servers holding three replicas of one tablet;
 * rows written; the server of one replica killed; the tablet's leader adds
 * a replica on the fourth server (which catches up from a snapshot) and
 * removes the dead one's; then the new replica leads and every row reads
 * back through it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <percolator/percolator.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "net/rpc.h"
#include "playground/playground.h"
#include "replica/repl_client.h"
#include "tests/testutil.h"

#define ROWS 200

static pc_pg_t *pg;
static char *dir;

/* The replicas server i's host reports; *n of them (free with free()). */
static pc_replica_info_t *replicas_of(int i, size_t *n) {
  const pc_pg_role_t *r = pc_pg_role(pg, (size_t)pc_pg_find(pg, (char[]){'s', (char)('1' + i), 0}));
  *n = 0;
  if (!r || r->pid <= 0 || !r->listen[0]) return NULL;
  char host[64];
  uint16_t port;
  pc_error_t err;
  if (pc_parse_endpoint(r->listen, 0, host, sizeof host, &port, &err) != PC_OK) return NULL;
  pc_rpc_client_t *c = pc_rpc_client_create(host, port, NULL, &err);
  pc_replica_info_t *v = NULL;
  if (c && pc_repl_remote_replicas(c, 2000, &v, n, &err) != PC_OK) v = NULL;
  if (c) pc_rpc_client_destroy(c);
  return v;
}

/* The index of the server leading the tablet, its configuration in *info. */
static int leader(pc_replica_info_t *info) {
  for (int tries = 0; tries < 600; tries++) {
    for (int i = 0; i < 4; i++) {
      size_t n;
      pc_replica_info_t *v = replicas_of(i, &n);
      int found = n && v[0].ready && v[0].lease_ms > 0;
      if (found) *info = v[0];
      free(v);
      if (found) return i;
    }
    pc_sleep_ms(100);
  }
  fail_msg("the tablet has no leader");
  return -1;
}

static int member_on(const pc_replica_info_t *info, const char *server) {
  for (uint32_t m = 0; m < info->n; m++)
    if (strncmp(info->members[m].address, server, strlen(server)) == 0 &&
        info->members[m].address[strlen(server)] == '#')
      return info->members[m].role == 1 ? 2 : 1; /* 2: a voter */
  return 0;
}

static void test_down_server_replaced(void **state) {
  (void)state;
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(pc_pg_client_config(pg), &err);
  if (!db) fail_msg("%s", err.text);
  pc_txn_t *t = pc_txn_begin(db, &err);
  for (int i = 0; i < ROWS; i++) {
    char row[16], val[16];
    snprintf(row, sizeof row, "r%03d", i);
    snprintf(val, sizeof val, "v%d", i);
    assert_int_equal(pc_txn_set(t, "t", row, strlen(row), "c", 1, val, strlen(val), &err), PC_OK);
  }
  assert_int_equal(pc_txn_commit(t, &err), PC_OK);
  pc_txn_destroy(t);

  pc_replica_info_t *info = malloc(sizeof *info);
  int lead = leader(info);
  /* the replicas are on s1, s2, s3: kill one that does not lead */
  int victim = lead == 0 ? 1 : 0;
  char victim_name[4] = {'s', (char)('1' + victim), 0};
  assert_int_equal(member_on(info, victim_name), 2);
  assert_int_equal(member_on(info, "s4"), 0);
  pc_pg_signal(pg, (size_t)pc_pg_find(pg, victim_name), SIGKILL);

  /* the leader replaces it with a replica on s4 */
  int done = 0;
  for (int tries = 0; tries < 600 && !done; tries++) {
    pc_sleep_ms(100);
    lead = leader(info);
    done = member_on(info, "s4") == 2 && !member_on(info, victim_name);
  }
  assert_true(done);
  free(info);

  /* s4 leads, and serves every row it got from a snapshot and the log */
  const pc_pg_role_t *lr = pc_pg_role(pg, (size_t)pc_pg_find(pg, (char[]){'s', (char)('1' + lead), 0}));
  char host[64];
  uint16_t port;
  assert_int_equal(pc_parse_endpoint(lr->listen, 0, host, sizeof host, &port, &err), PC_OK);
  pc_rpc_client_t *c = pc_rpc_client_create(host, port, NULL, &err);
  pc_buf_t text = {0};
  if (pc_repl_remote_member(c, PC_MEMBER_MOVE, "t1", "s4", 30000, &text, &err) != PC_OK)
    fail_msg("moving the leadership to s4: %s", err.text);
  pc_buf_free(&text);
  pc_rpc_client_destroy(c);
  t = pc_txn_begin(db, &err);
  for (int i = 0; i < ROWS; i++) {
    char row[16], want[16], *v = NULL;
    size_t vl = 0;
    snprintf(row, sizeof row, "r%03d", i);
    snprintf(want, sizeof want, "v%d", i);
    assert_int_equal(pc_txn_get(t, "t", row, strlen(row), "c", 1, &v, &vl, &err), PC_OK);
    assert_int_equal(vl, strlen(want));
    assert_memory_equal(v, want, vl);
    pc_free(v);
  }
  pc_txn_destroy(t);
  pc_db_close(db);
}

static int setup(void **state) {
  (void)state;
  const char *cli = getenv("PERCOLATOR_CLI");
  if (!cli || !*cli) return -1;
  dir = tu_mkdtemp("rereplicate");
  json_t *extra = json_loads("{\"log\":{\"level\":\"info\"},\"zookeeper\":{\"session_timeout_ms\":"
                             "4000},\"replication\":{\"down_after_ms\":3000}}", 0, NULL);
  pc_pg_options_t o = {.cli = cli, .dir = dir, .zk_servers = 1, .oracles = 1, .servers = 4,
                       .replicas = 3, .extra = extra};
  pc_error_t err;
  pg = pc_pg_create(&o, &err);
  json_decref(extra);
  if (!pg || pc_pg_start(pg, 60000, &err) != PC_OK) {
    fprintf(stderr, "playground: %s\n", err.text);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  pc_pg_free(pg);
  tu_rmtree(dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_down_server_replaced)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
