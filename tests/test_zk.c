/* test_zk.c — the coordination client (lockservice/zk.h) against a private
 * ZooKeeper server: nodes under the root, ephemeral nodes that go with their
 * session, sequence nodes in order, watches, the fenced write (check one
 * node, set another at an expected version) refused when either condition
 * fails, and every call bounded by its timeout once the server is gone; the
 * coordination built on it (lockservice/coord.h): clients' liveness and
 * reports, one session per client handle, the workers' membership and
 * shares, the safe point that only rises; with zookeeper.secret, nodes that
 * admit only the sessions that hold it; with zookeeper.system_secret too,
 * two identities: a data client reads the topology and makes only its own
 * node, readers tell the system's ephemeral nodes from others, and a root
 * that is not the cluster's is refused.
 * One server serves every case; the last case stops it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/error.h"
#include "lockservice/coord.h"
#include "lockservice/zk.h"
#include "tests/zkharness.h"

#include <percolator/percolator.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tu_zk_t *server;

static void must(const char *what, pc_status_t st, const pc_error_t *err, pc_status_t want) {
  if (st != want)
    fail_msg("%s: want %s, got %s (%s)", what, pc_status_name(want), pc_status_name(st),
             err->text);
}

static pc_zk_t *open_root(const char *root) {
  pc_error_t err;
  pc_zk_t *zk =
      pc_zk_open(&(pc_zk_options_t){tu_zk_connect(server), root, NULL, 4000, NULL}, 20000, NULL, &err);
  if (!zk) fail_msg("pc_zk_open: %s", err.text);
  return zk;
}

static void test_nodes_under_root(void **state) {
  (void)state;
  pc_error_t err;
  pc_zk_t *zk = open_root("/percolator/t1");
  char *data = NULL;
  size_t len = 0;
  int32_t version = -2;
  must("ensure", pc_zk_ensure(zk, "a/b", 5000, &err), &err, PC_OK);
  must("ensure again", pc_zk_ensure(zk, "a/b", 5000, &err), &err, PC_OK);
  must("create", pc_zk_create(zk, "a/b/c", "v1", 2, 0, NULL, 0, 5000, &err), &err, PC_OK);
  must("create twice", pc_zk_create(zk, "a/b/c", "v1", 2, 0, NULL, 0, 5000, &err), &err,
       PC_BUSY);
  must("get", pc_zk_get(zk, "a/b/c", NULL, &data, &len, &version, 5000, &err), &err, PC_OK);
  assert_int_equal(len, 2);
  assert_string_equal(data, "v1");
  assert_int_equal(version, 0);
  free(data);
  int32_t nv = -1;
  must("set", pc_zk_set(zk, "a/b/c", "v2", 2, 0, &nv, 5000, &err), &err, PC_OK);
  assert_int_equal(nv, 1);
  must("set stale", pc_zk_set(zk, "a/b/c", "v3", 2, 0, NULL, 5000, &err), &err, PC_CONFLICT);
  int exists = -1;
  must("exists", pc_zk_exists(zk, "a/b/c", NULL, &exists, 5000, &err), &err, PC_OK);
  assert_int_equal(exists, 1);
  must("delete", pc_zk_delete(zk, "a/b/c", -1, 5000, &err), &err, PC_OK);
  must("exists gone", pc_zk_exists(zk, "a/b/c", NULL, &exists, 5000, &err), &err, PC_OK);
  assert_int_equal(exists, 0);
  must("get gone", pc_zk_get(zk, "a/b/c", NULL, &data, &len, NULL, 5000, &err), &err,
       PC_NOT_FOUND);
  char buf[256];
  assert_string_equal(pc_zk_path(zk, "x", buf, sizeof buf), "/percolator/t1/x");
  assert_true(pc_zk_session_id(zk) != 0);
  assert_true(pc_zk_last_answer_ms(zk) > 0);
  pc_zk_close(zk);
  /* another root sees none of it */
  zk = open_root("/percolator/t1b");
  must("other root", pc_zk_exists(zk, "a", NULL, &exists, 5000, &err), &err, PC_OK);
  assert_int_equal(exists, 0);
  pc_zk_close(zk);
}

static pc_zk_t *open_secret(const char *root, const char *secret) {
  pc_error_t err;
  pc_zk_t *zk =
      pc_zk_open(&(pc_zk_options_t){tu_zk_connect(server), root, secret, 4000, NULL}, 20000, NULL, &err);
  if (!zk) fail_msg("pc_zk_open %s: %s", root, err.text);
  return zk;
}

static void denied(const char *what, pc_status_t st, const pc_error_t *err) {
  must(what, st, err, PC_DENIED);
  if (!strstr(err->text, "not authorised") || !strstr(err->text, "/secured/"))
    fail_msg("%s: the error names neither the node nor the reason: %s", what, err->text);
}

/* With a secret, the cluster's nodes admit only the sessions that hold it
 * (any session, any process); without it every operation on them is
 * refused, naming the node, and a session with another secret is refused
 * when it opens (it cannot read the root's ACL). The root's parents are
 * shared: anybody may make another cluster's root beside it, nobody else
 * may delete one. */
static void test_secret_acl(void **state) {
  (void)state;
  pc_error_t err;
  pc_zk_t *a = open_secret("/secured/t9", "s1");
  must("create", pc_zk_create(a, "a", "v", 1, 0, NULL, 0, 5000, &err), &err, PC_OK);
  must("ephemeral", pc_zk_create(a, "e", "w", 1, PC_ZK_EPHEMERAL, NULL, 0, 5000, &err), &err,
       PC_OK);
  pc_zk_t *empty = open_secret("/secured/t9e", "s1"); /* a root with no children */
  pc_zk_close(empty);

  pc_zk_t *wrong = pc_zk_open(&(pc_zk_options_t){tu_zk_connect(server), "/secured/t9", "s2", 4000,
                                                 NULL},
                              20000, NULL, &err);
  assert_null(wrong);
  denied("another secret", err.code, &err);
  pc_zk_t *outsiders[1] = {open_root("/secured/t9")};
  for (int i = 0; i < 1; i++) {
    pc_zk_t *o = outsiders[i];
    char *data = NULL;
    char **names = NULL;
    size_t n = 0;
    denied("get", pc_zk_get(o, "a", NULL, &data, NULL, NULL, 5000, &err), &err);
    denied("set", pc_zk_set(o, "a", "x", 1, -1, NULL, 5000, &err), &err);
    denied("delete", pc_zk_delete(o, "a", -1, 5000, &err), &err);
    denied("delete ephemeral", pc_zk_delete(o, "e", -1, 5000, &err), &err);
    denied("create", pc_zk_create(o, "b", "x", 1, 0, NULL, 0, 5000, &err), &err);
    denied("children", pc_zk_children(o, "", NULL, &names, &n, 5000, &err), &err);
    pc_zk_close(o);
  }
  /* the shared parent: another cluster's root beside it, but no deletes */
  pc_zk_t *other = open_root("/secured/other");
  pc_zk_close(other);
  pc_zk_t *parent = open_root("/secured");
  denied("delete another cluster's root", pc_zk_delete(parent, "t9e", -1, 5000, &err), &err);
  pc_zk_close(parent);

  /* another session with the secret, as another process of the cluster */
  pc_zk_t *b = open_secret("/secured/t9", "s1");
  char *data = NULL;
  must("get with the secret", pc_zk_get(b, "a", NULL, &data, NULL, NULL, 5000, &err), &err,
       PC_OK);
  assert_string_equal(data, "v");
  free(data);
  must("set with the secret", pc_zk_set(b, "a", "v2", 2, -1, NULL, 5000, &err), &err, PC_OK);
  must("delete with the secret", pc_zk_delete(b, "e", -1, 5000, &err), &err, PC_OK);
  pc_zk_close(b);
  pc_zk_close(a);
}

static pc_zk_t *open_as(const char *root, const char *secret, const char *system,
                        pc_error_t *err) {
  return pc_zk_open(&(pc_zk_options_t){tu_zk_connect(server), root, secret, 4000, system}, 20000,
                    NULL, err);
}

/* Two identities: the system makes the layout (clients/ open to data
 * clients' nodes) and its node system/<session>; a data client reads, makes
 * and rewrites only its own node, which another data client may not delete
 * and the system may; a reader tells the system's ephemeral nodes from a
 * data client's and from persistent ones. A root made by another identity
 * first is refused by every process with a secret; one made with the one
 * secret is refused by the system until its ACLs are set. */
static void test_two_identities(void **state) {
  (void)state;
  pc_error_t err;
  const char *root = "/identities/t10";
  pc_zk_t *sys = open_as(root, "d", "s", &err);
  if (!sys) fail_msg("system: %s", err.text);
  assert_int_equal(pc_zk_identity(sys), PC_ZK_SYSTEM);
  must("prepare", pc_coord_prepare(sys, 1, 5000, &err), &err, PC_OK);
  must("owner", pc_zk_create(sys, "tablets/t1", NULL, 0, 0, NULL, 0, 5000, &err), &err, PC_OK);
  must("ephemeral", pc_zk_create(sys, "tablets/t1/owner", "x", 1, PC_ZK_EPHEMERAL, NULL, 0, 5000,
                                 &err),
       &err, PC_OK);
  pc_zk_t *data = open_as(root, "d", NULL, &err), *data2 = open_as(root, "d", NULL, &err);
  if (!data || !data2) fail_msg("data: %s", err.text);
  assert_int_equal(pc_zk_identity(data), PC_ZK_SHARED);
  assert_int_equal(pc_zk_two_identities(data), 1);
  must("data's check", pc_coord_prepare(data, 1, 5000, &err), &err, PC_OK);
  char *v = NULL;
  must("data reads", pc_zk_get(data, "tablets/t1/owner", NULL, &v, NULL, NULL, 5000, &err), &err,
       PC_OK);
  free(v);
  must("data writes", pc_zk_set(data, "tablets/t1/owner", "y", 1, -1, NULL, 5000, &err), &err,
       PC_DENIED);
  must("data deletes", pc_zk_delete(data, "tablets/t1/owner", -1, 5000, &err), &err, PC_DENIED);
  must("data makes", pc_zk_create(data, "tablets/t2", NULL, 0, 0, NULL, 0, 5000, &err), &err,
       PC_DENIED);
  must("data ensures", pc_zk_ensure(data, "clients", 5000, &err), &err, PC_OK); /* exists */
  must("data's node", pc_zk_create(data, "clients/c1", "1", 1, PC_ZK_EPHEMERAL | PC_ZK_OWN, NULL,
                                   0, 5000, &err),
       &err, PC_OK);
  must("its report", pc_zk_set(data, "clients/c1", "2", 1, -1, NULL, 5000, &err), &err, PC_OK);
  must("another's delete", pc_zk_delete(data2, "clients/c1", -1, 5000, &err), &err, PC_DENIED);
  /* readers: the system's ephemeral node, a data client's, a persistent one */
  pc_zk_stat_t st;
  must("system node", pc_coord_system_node(data, "tablets/t1/owner", NULL, &v, NULL, &st, 5000,
                                           &err),
       &err, PC_OK);
  assert_int_equal(st.ephemeral_owner, pc_zk_session_id(sys));
  free(v);
  must("data's node", pc_coord_system_node(sys, "clients/c1", NULL, &v, NULL, NULL, 5000, &err),
       &err, PC_DENIED);
  if (!strstr(err.text, "not the system's")) fail_msg("unexpected: %s", err.text);
  must("persistent", pc_coord_system_node(data, "tablets/t1", NULL, &v, NULL, NULL, 5000, &err),
       &err, PC_DENIED);
  if (!strstr(err.text, "persistent")) fail_msg("unexpected: %s", err.text);
  must("system deletes", pc_zk_delete(sys, "clients/c1", -1, 5000, &err), &err, PC_OK);
  pc_zk_close(data2);
  pc_zk_close(data);
  pc_zk_close(sys);

  /* a root another identity made first, and one made with one secret */
  pc_zk_t *squatter = open_root("/identities/t10b");
  pc_zk_close(squatter);
  pc_zk_t *one = open_as("/identities/t10c", "d", NULL, &err);
  assert_non_null(one);
  assert_int_equal(pc_zk_two_identities(one), 0);
  pc_zk_close(one);
  const char *const roots[] = {"/identities/t10b", "/identities/t10b", "/identities/t10c"};
  const char *const systems[] = {"s", NULL, "s"};
  for (int i = 0; i < 3; i++) {
    assert_null(open_as(roots[i], "d", systems[i], &err));
    must(roots[i], err.code, &err, PC_DENIED);
    if (!strstr(err.text, "not this cluster's")) fail_msg("unexpected: %s", err.text);
  }
}

typedef struct counter {
  atomic_int events;
  atomic_int last;
} counter_t;

static void count_event(void *ctx, int event, const char *path) {
  (void)path;
  counter_t *c = ctx;
  atomic_store(&c->last, event);
  atomic_fetch_add(&c->events, 1);
}

static void test_ephemeral_sequence_and_watches(void **state) {
  (void)state;
  pc_error_t err;
  pc_zk_t *a = open_root("/percolator/t2"), *b = open_root("/percolator/t2");
  must("ensure", pc_zk_ensure(a, "members", 5000, &err), &err, PC_OK);
  counter_t c = {0};
  pc_zk_watch_t w = {count_event, &c};
  char **names = NULL;
  size_t n = 0;
  must("children", pc_zk_children(b, "members", &w, &names, &n, 5000, &err), &err, PC_OK);
  assert_int_equal(n, 0);
  pc_zk_free_names(names, 0);
  char first[128], second[128];
  must("seq 1", pc_zk_create(a, "members/m-", "a", 1, PC_ZK_EPHEMERAL | PC_ZK_SEQUENCE, first,
                             sizeof first, 5000, &err),
       &err, PC_OK);
  must("seq 2", pc_zk_create(b, "members/m-", "b", 1, PC_ZK_EPHEMERAL | PC_ZK_SEQUENCE, second,
                             sizeof second, 5000, &err),
       &err, PC_OK);
  assert_true(strncmp(first, "members/m-", 10) == 0);
  assert_true(strcmp(first, second) < 0);
  for (int i = 0; i < 500 && atomic_load(&c.events) == 0; i++) usleep(10000);
  assert_int_equal(atomic_load(&c.last), PC_ZK_EV_CHILD);
  must("children 2", pc_zk_children(b, "members", NULL, &names, &n, 5000, &err), &err, PC_OK);
  assert_int_equal(n, 2);
  assert_string_equal(names[0], first + strlen("members/"));
  pc_zk_free_names(names, n);
  /* closing a session removes its ephemeral node at once */
  counter_t gone = {0};
  pc_zk_watch_t gw = {count_event, &gone};
  int exists = 0;
  must("watch first", pc_zk_exists(b, first, &gw, &exists, 5000, &err), &err, PC_OK);
  assert_int_equal(exists, 1);
  pc_zk_close(a);
  for (int i = 0; i < 500 && atomic_load(&gone.events) == 0; i++) usleep(10000);
  assert_int_equal(atomic_load(&gone.last), PC_ZK_EV_DELETED);
  must("children 3", pc_zk_children(b, "members", NULL, &names, &n, 5000, &err), &err, PC_OK);
  assert_int_equal(n, 1);
  assert_string_equal(names[0], second + strlen("members/"));
  pc_zk_free_names(names, n);
  pc_zk_close(b);
}

static void test_fenced_write(void **state) {
  (void)state;
  pc_error_t err;
  pc_zk_t *a = open_root("/percolator/t3"), *b = open_root("/percolator/t3");
  must("ensure", pc_zk_ensure(a, "e", 5000, &err), &err, PC_OK);
  must("bound", pc_zk_create(a, "bound", "0", 1, 0, NULL, 0, 5000, &err), &err, PC_OK);
  char mine[128];
  must("leader", pc_zk_create(a, "e/n-", NULL, 0, PC_ZK_EPHEMERAL | PC_ZK_SEQUENCE, mine,
                              sizeof mine, 5000, &err),
       &err, PC_OK);
  int32_t v = -1;
  must("fenced ok", pc_zk_check_set(a, mine, "bound", "10", 2, 0, &v, 5000, &err), &err, PC_OK);
  assert_int_equal(v, 1);
  /* a writer with a stale version is refused, and nothing is written */
  must("stale version", pc_zk_check_set(a, mine, "bound", "5", 1, 0, NULL, 5000, &err), &err,
       PC_CONFLICT);
  /* once the leader's node is gone its writes are refused, whatever version */
  must("delete node", pc_zk_delete(b, mine, -1, 5000, &err), &err, PC_OK);
  must("no longer leader", pc_zk_check_set(a, mine, "bound", "20", 2, 1, NULL, 5000, &err), &err,
       PC_CONFLICT);
  assert_non_null(strstr(err.text, "is gone"));
  char *data = NULL;
  size_t len;
  int32_t version;
  must("sync", pc_zk_sync(b, "bound", 5000, &err), &err, PC_OK);
  must("read", pc_zk_get(b, "bound", NULL, &data, &len, &version, 5000, &err), &err, PC_OK);
  assert_string_equal(data, "10");
  assert_int_equal(version, 1);
  free(data);
  pc_zk_close(a);
  pc_zk_close(b);
}

static uint64_t report_42(void *ctx) {
  (void)ctx;
  return 42;
}

/* Clients' nodes: a live client is alive to the others, a closed one dead
 * (confirmed in ZooKeeper, not taken from the view), and reports reach the
 * minimum that garbage collection reads. */
static void test_client_liveness_and_reports(void **state) {
  (void)state;
  pc_error_t err;
  pc_coord_t *a =
      pc_coord_open(&(pc_zk_options_t){tu_zk_connect(server), "/percolator/t5", NULL, 4000, NULL},
                    PC_COORD_CLIENT, 20000, &err);
  assert_non_null(a);
  pc_coord_t *b =
      pc_coord_open(&(pc_zk_options_t){tu_zk_connect(server), "/percolator/t5", NULL, 4000, NULL},
                    PC_COORD_CLIENT, 20000, &err);
  assert_non_null(b);
  uint64_t sa = pc_coord_session(a), sb = pc_coord_session(b);
  assert_true(sa != 0 && sb != 0 && sa != sb);
  assert_int_equal(pc_coord_liveness(a, sb, 5000), PC_LS_ALIVE);
  assert_int_equal(pc_coord_liveness(b, sa, 5000), PC_LS_ALIVE);
  assert_int_equal(pc_coord_liveness(a, sa, 5000), PC_LS_ALIVE);
  /* a session ZooKeeper never had has no node: dead */
  assert_int_equal(pc_coord_liveness(a, 0x1234, 5000), PC_LS_DEAD);
  /* reports: none yet from a's side (UINT64_MAX), then 42 */
  uint64_t oldest = 0;
  size_t unreported = 9;
  assert_int_equal(pc_coord_oldest(b, 5000, &oldest, &unreported, &err), PC_OK);
  assert_int_equal(unreported, 0);
  assert_true(oldest == UINT64_MAX);
  pc_coord_set_reporter(a, report_42, NULL);
  for (int i = 0; i < 1000 && oldest != 42; i++) {
    assert_int_equal(pc_coord_oldest(b, 5000, &oldest, NULL, &err), PC_OK);
    if (oldest != 42) usleep(10000);
  }
  assert_int_equal(oldest, 42);
  for (int i = 0; i < 1000 && pc_coord_client_count(b) < 2; i++) usleep(10000);
  assert_int_equal(pc_coord_client_count(b), 2);
  assert_int_equal(pc_coord_zk_state(b), PC_ZK_CONNECTED);
  /* one holder of a lock at a time; it goes with its session */
  int mine = -1;
  assert_int_equal(pc_coord_lock(a, "gc", 5000, &mine, &err), PC_OK);
  assert_int_equal(mine, 1);
  assert_int_equal(pc_coord_lock(a, "gc", 5000, &mine, &err), PC_OK);
  assert_int_equal(mine, 1);
  assert_int_equal(pc_coord_lock(b, "gc", 5000, &mine, &err), PC_OK);
  assert_int_equal(mine, 0);
  /* a closes: its node goes with its session; once b's view (a watch)
   * has dropped it, b confirms in ZooKeeper that it is dead */
  pc_coord_close(a);
  pc_ls_liveness_t l = PC_LS_ALIVE;
  for (int i = 0; i < 1000 && (l = pc_coord_liveness(b, sa, 5000)) == PC_LS_ALIVE; i++)
    usleep(10000);
  assert_int_equal(l, PC_LS_DEAD);
  assert_int_equal(pc_coord_liveness(b, sa, 5000), PC_LS_DEAD);
  assert_int_equal(pc_coord_oldest(b, 5000, &oldest, NULL, &err), PC_OK);
  assert_true(oldest == UINT64_MAX);
  assert_int_equal(pc_coord_lock(b, "gc", 5000, &mine, &err), PC_OK);
  assert_int_equal(mine, 1);
  pc_coord_close(b);
}

/* Waits (bounded) until the server counts want connections; returns the count. */
static int connections_become(int want) {
  int n = -1;
  for (int i = 0; i < 500 && (n = tu_zk_connections(server, 0)) != want; i++) usleep(10000);
  return n;
}

/* The server's connection count once it has held still for half a second:
 * the handles earlier tests closed may still be counted for a moment (a
 * count taken then drops under the test's feet on a loaded machine). */
static int settled_connections(void) {
  int n = tu_zk_connections(server, 0);
  for (int still = 0, i = 0; still < 50 && i < 1000; i++) {
    usleep(10000);
    int m = tu_zk_connections(server, 0);
    still = m == n ? still + 1 : 0;
    n = m;
  }
  return n;
}

/* A client handle of a cluster holds one ZooKeeper session: its node under
 * clients/ and the oracle's election are followed on the same one. */
static void test_one_session_per_client(void **state) {
  (void)state;
  char dir[] = "/tmp/pc-zk-client-XXXXXX", path[128];
  if (!mkdtemp(dir)) fail_msg("mkdtemp");
  snprintf(path, sizeof path, "%s/client.json", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f,
          "{\"zookeeper\":{\"connect\":\"%s\",\"root\":\"/percolator/t6\","
          "\"session_timeout_ms\":4000},\"store\":{\"timeout_ms\":500},"
          "\"tso\":{\"listen\":\"127.0.0.1:0\"},"
          "\"tablets\":[{\"name\":\"t\",\"listen\":\"127.0.0.1:1\"}]}\n",
          tu_zk_connect(server));
  fclose(f);
  int before = settled_connections();
  assert_true(before >= 0);
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(path, &err);
  if (!db) fail_msg("pc_db_open_config: %s", err.text);
  assert_int_equal(connections_become(before + 1), before + 1);
  usleep(300000); /* a second session would have connected by now */
  assert_int_equal(tu_zk_connections(server, 0), before + 1);
  assert_true(pc_db_session(db) != 0);
  pc_db_close(db);
  assert_int_equal(connections_become(before), before);
  remove(path);
  rmdir(dir);
}

static uint32_t share_of(pc_member_t *m, uint32_t *count) {
  uint32_t index = 0;
  pc_member_partition(m, &index, count);
  return index;
}

/* Workers' members: each takes a contiguous share of the buckets, in the
 * order of their nodes; a member's first share is used at once, a change
 * only once the membership has been stable for the delay; a member that
 * leaves (or whose session ends) gives its share to the others.
 *
 * Nothing here depends on how fast the machine is: each wait polls for the
 * state it wants (for up to SHARE_WAIT_POLLS * 10 ms), and "a keeps its
 * share until the membership is stable" is checked as a lower bound: a's
 * share changes no sooner than STABLE_MS after b joined (a's view changes
 * after b's node exists), which a busy scheduler can only make later. */
#define STABLE_MS 1500
#define SHARE_WAIT_POLLS 3000

static void test_membership_partition(void **state) {
  (void)state;
  pc_error_t err;
  const char *root = "/percolator/t7";
  pc_coord_t *a =
      pc_coord_open(&(pc_zk_options_t){tu_zk_connect(server), root, NULL, 4000, NULL}, 0, 20000, &err);
  pc_coord_t *b =
      pc_coord_open(&(pc_zk_options_t){tu_zk_connect(server), root, NULL, 4000, NULL}, 0, 20000, &err);
  assert_non_null(a);
  assert_non_null(b);
  pc_member_t *ma = pc_member_join(a, "g", STABLE_MS, 5000, &err);
  assert_non_null(ma);
  uint32_t count = 0;
  for (int i = 0; i < SHARE_WAIT_POLLS && (share_of(ma, &count), count) == 0; i++) usleep(10000);
  assert_int_equal(count, 1); /* alone: every bucket, at once */
  uint64_t joined = pc_now_mono_ms();
  pc_member_t *mb = pc_member_join(b, "g", STABLE_MS, 5000, &err);
  assert_non_null(mb);
  for (int i = 0; i < SHARE_WAIT_POLLS && (share_of(mb, &count), count) == 0; i++) usleep(10000);
  assert_int_equal(count, 2); /* its first share: the second half */
  assert_int_equal(share_of(mb, &count), 1);
  /* a keeps the whole range until the membership has been stable */
  uint32_t index = share_of(ma, &count);
  for (int i = 0; i < SHARE_WAIT_POLLS && count == 1; i++) {
    assert_int_equal(index, 0);
    usleep(10000);
    index = share_of(ma, &count);
  }
  uint64_t moved = pc_now_mono_ms();
  assert_int_equal(count, 2);
  assert_int_equal(index, 0);
  if (moved - joined < STABLE_MS)
    fail_msg("a's share changed %llu ms after b joined, before the membership was stable (%u ms)",
             (unsigned long long)(moved - joined), STABLE_MS);
  uint32_t lo, hi;
  pc_member_buckets(0, 2, 1024, &lo, &hi);
  assert_true(lo == 0 && hi == 512);
  pc_member_buckets(1, 2, 1024, &lo, &hi);
  assert_true(lo == 512 && hi == 1024);
  pc_member_buckets(2, 3, 1024, &lo, &hi);
  assert_true(lo == 682 && hi == 1024);
  /* the list that `status` shows */
  pc_coord_node_t *nodes = NULL;
  size_t n = 0;
  assert_int_equal(pc_coord_list(a, "workers", 5000, &nodes, &n, &err), PC_OK);
  assert_int_equal(n, 2);
  assert_true(strncmp(nodes[0].name, "m-", 2) == 0 && strcmp(nodes[0].name, nodes[1].name) < 0);
  assert_non_null(strchr(nodes[0].data, ':'));
  free(nodes);
  /* a worker running other observers (another group) scans every bucket for
   * them, and the first group's shares stay as they are */
  pc_member_t *mh = pc_member_join(b, "h", STABLE_MS, 5000, &err);
  assert_non_null(mh);
  for (int i = 0; i < SHARE_WAIT_POLLS && (share_of(mh, &count), count) == 0; i++) usleep(10000);
  assert_int_equal(count, 1);
  assert_int_equal(share_of(mh, &count), 0);
  usleep((STABLE_MS + 100) * 1000); /* past the delay: the new membership is in use */
  assert_int_equal(share_of(ma, &count), 0);
  assert_int_equal(count, 2);
  assert_int_equal(share_of(mb, &count), 1);
  assert_int_equal(count, 2);
  char group[64];
  assert_int_equal(pc_member_group("m-h-0000000007", group, sizeof group), 1);
  assert_string_equal(group, "h");
  assert_int_equal(pc_member_group("x-0000000007", group, sizeof group), 0);
  pc_member_leave(mh);
  /* a's session ends: b takes every bucket once the membership is stable */
  pc_member_leave(ma);
  pc_coord_close(a);
  for (int i = 0; i < SHARE_WAIT_POLLS && (share_of(mb, &count), count) != 1; i++) usleep(10000);
  assert_int_equal(count, 1);
  assert_int_equal(share_of(mb, &count), 0);
  pc_member_leave(mb);
  assert_int_equal(pc_coord_list(b, "workers", 5000, &nodes, &n, &err), PC_OK);
  assert_int_equal(n, 0);
  free(nodes);
  pc_coord_close(b);
}

/* The safe point only rises, whoever publishes it. */
static void test_safe_point_rises(void **state) {
  (void)state;
  pc_error_t err;
  pc_coord_t *a = pc_coord_open(
      &(pc_zk_options_t){tu_zk_connect(server), "/percolator/t8", NULL, 4000, NULL}, 0, 20000, &err);
  pc_coord_t *b = pc_coord_open(
      &(pc_zk_options_t){tu_zk_connect(server), "/percolator/t8", NULL, 4000, NULL}, 0, 20000, &err);
  assert_non_null(a);
  assert_non_null(b);
  uint64_t safe = 1, published = 0;
  assert_int_equal(pc_coord_safe_point(a, 5000, &safe, &err), PC_OK);
  assert_true(safe == 0); /* never published */
  assert_int_equal(pc_coord_publish_safe_point(a, 100, 5000, &published, &err), PC_OK);
  assert_true(published == 100);
  assert_int_equal(pc_coord_publish_safe_point(b, 50, 5000, &published, &err), PC_OK);
  assert_true(published == 100);
  assert_int_equal(pc_coord_publish_safe_point(b, 250, 5000, &published, &err), PC_OK);
  assert_true(published == 250);
  assert_int_equal(pc_coord_safe_point(a, 5000, &safe, &err), PC_OK);
  assert_true(safe == 250);
  pc_coord_close(a);
  pc_coord_close(b);
}

static void test_unreachable(void **state) {
  (void)state;
  pc_error_t err;
  /* nobody listens on port 1 */
  pc_zk_t *none =
      pc_zk_open(&(pc_zk_options_t){"127.0.0.1:1", "/percolator/x", NULL, 4000, NULL}, 300, NULL, &err);
  assert_null(none);
  assert_int_equal(err.code, PC_UNAVAILABLE);
  assert_non_null(strstr(err.text, "127.0.0.1:1"));
  none = pc_zk_open(&(pc_zk_options_t){"127.0.0.1:1", "relative", NULL, 4000, NULL}, 300, NULL, &err);
  assert_null(none);
  assert_int_equal(err.code, PC_INVALID);
}

/* Last: stops the server under an open session. Every call then returns
 * within its timeout, with PC_TIMEOUT or PC_UNAVAILABLE. */
static void test_calls_bounded_when_server_gone(void **state) {
  (void)state;
  pc_error_t err;
  counter_t c = {0};
  pc_zk_watch_t w = {count_event, &c};
  pc_zk_t *zk = pc_zk_open(&(pc_zk_options_t){tu_zk_connect(server), "/percolator/t4", NULL, 30000, NULL},
                           20000, &w, &err);
  assert_non_null(zk);
  pc_coord_t *coord =
      pc_coord_open(&(pc_zk_options_t){tu_zk_connect(server), "/percolator/t4", NULL, 30000, NULL},
                    PC_COORD_CLIENT, 20000, &err);
  assert_non_null(coord);
  tu_zk_kill(server, 0);
  /* liveness that ZooKeeper cannot confirm is unknown, never dead */
  assert_int_equal(pc_coord_liveness(coord, 0x777, 300), PC_LS_UNKNOWN);
  pc_coord_close(coord);
  char *data = NULL;
  size_t len;
  int exists;
  char **names;
  size_t n;
  for (int round = 0; round < 2; round++) {
    pc_status_t st[6];
    st[0] = pc_zk_get(zk, "x", NULL, &data, &len, NULL, 200, &err);
    st[1] = pc_zk_set(zk, "x", "1", 1, -1, NULL, 200, &err);
    st[2] = pc_zk_create(zk, "y", NULL, 0, 0, NULL, 0, 200, &err);
    st[3] = pc_zk_exists(zk, "x", NULL, &exists, 200, &err);
    st[4] = pc_zk_children(zk, "", NULL, &names, &n, 200, &err);
    st[5] = pc_zk_check_set(zk, "x", "y", "1", 1, 0, NULL, 200, &err);
    for (int i = 0; i < 6; i++)
      if (st[i] != PC_TIMEOUT && st[i] != PC_UNAVAILABLE)
        fail_msg("call %d with the server gone: %s", i, pc_status_name(st[i]));
  }
  for (int i = 0; i < 1000 && pc_zk_state(zk) == PC_ZK_CONNECTED; i++) usleep(10000);
  assert_int_equal(pc_zk_state(zk), PC_ZK_CONNECTING);
  assert_true(atomic_load(&c.events) > 0);
  pc_zk_close(zk); /* with requests abandoned by their callers still pending */
}

/* A tablet's leader whose session expires makes its owner node again under
 * its next session, naming that session: clients follow only an owner that
 * names the session it belongs to, so a node naming the old one would hide
 * a live leader from every client until the leadership moved. */
static uint64_t zk_session(pc_coord_t *c) {
  pc_zk_t *zk = pc_coord_acquire(c);
  uint64_t id = zk ? pc_zk_session_id(zk) : 0;
  pc_coord_release(c);
  return id;
}

static void test_owner_made_again_after_expiry(void **state) {
  (void)state;
  pc_error_t err;
  pc_zk_options_t o = {tu_zk_connect(server), "/percolator/t9", NULL, 4000, NULL};
  pc_coord_t *leader = pc_coord_open(&o, 0, 20000, &err);
  assert_non_null(leader);
  pc_coord_t *client = pc_coord_open(&o, PC_COORD_CLIENT, 20000, &err);
  assert_non_null(client);
  assert_int_equal(pc_coord_tablet_lead(leader, "t1", "127.0.0.1:4242", "s1", 7, 5000, &err),
                   PC_OK);
  char addr[300];
  uint64_t named = 0, first = zk_session(leader);
  assert_int_equal(pc_coord_tablet_owner(client, "t1", 1, 5000, addr, sizeof addr, &named, &err),
                   PC_OK);
  assert_string_equal(addr, "127.0.0.1:4242");
  assert_true(named == first);
  pc_zk_t *zk = pc_coord_acquire(leader);
  pc_status_t st = pc_zk_expire_for_test(zk, 10000, &err);
  pc_coord_release(leader);
  if (st != PC_OK) fail_msg("%s", err.text);
  /* the leader opens its next session and makes the node again: followed */
  addr[0] = '\0';
  for (int i = 0; i < 600 && !addr[0]; i++) {
    uint64_t now = zk_session(leader);
    if (now != 0 && now != first &&
        pc_coord_tablet_owner(client, "t1", 1, 5000, addr, sizeof addr, &named, &err) != PC_OK)
      fail_msg("%s", err.text);
    if (!addr[0]) pc_sleep_ms(50);
  }
  assert_string_equal(addr, "127.0.0.1:4242");
  assert_true(named == zk_session(leader));
  assert_true(named != first);
  pc_coord_close(client);
  pc_coord_close(leader);
}

static int setup(void **state) {
  (void)state;
  server = tu_zk_start(1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tu_zk_stop(server);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nodes_under_root),
      cmocka_unit_test(test_secret_acl),
      cmocka_unit_test(test_two_identities),
      cmocka_unit_test(test_ephemeral_sequence_and_watches),
      cmocka_unit_test(test_fenced_write),
      cmocka_unit_test(test_client_liveness_and_reports),
      cmocka_unit_test(test_one_session_per_client),
      cmocka_unit_test(test_membership_partition),
      cmocka_unit_test(test_safe_point_rises),
      cmocka_unit_test(test_owner_made_again_after_expiry),
      cmocka_unit_test(test_unreachable),
      cmocka_unit_test(test_calls_bounded_when_server_gone),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
