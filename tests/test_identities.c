/* test_identities.c — what each identity can and cannot do in a cluster, and
 * what readers of coordination state check instead of trusting it, against
 * real daemons (`percolator run` on 127.0.0.1 with ephemeral ports, one
 * private ZooKeeper server for the program, certificates made at run time by
 * tests/certs.sh):
 *
 *   - the table of docs/SECURITY.md ("What each identity can do"), row by
 *     row: each row's id names a check below, which tries what the row says
 *     on a cluster with two identities in ZooKeeper and in the protocol, and
 *     must find the outcome the row gives (can, cannot); a row without a
 *     check, or a check without a row, fails the test;
 *   - a bound written into ZooKeeper far beyond the clock (2^64-2) stops no
 *     cluster for good: no oracle leads from it, its clients are told why,
 *     and once the bound is set back (as the oracle's log says) timestamps
 *     go on, above every one issued before, without a restart; with two
 *     identities a data client cannot write it;
 *   - a candidate of the oracle's election and a tablet's owner that are not
 *     ephemeral nodes of system sessions are not followed: clients reach
 *     neither the fake oracle nor the fake tablet server (a listener that
 *     counts connections), and keep timestamps from the real oracle;
 *   - a commit, a rollback and a settling at a timestamp beyond the oracle's
 *     are refused, and the cell stays writable;
 *   - a data client cannot settle the system's locks (ROLLBACK, CHECK_TXN,
 *     COMMIT, HEARTBEAT on percolator.system), the system's commit then
 *     succeeds, and a transaction writing the system table has a cell of it
 *     as its primary;
 *   - a node under clients/ that is not an ephemeral node of the session it
 *     is named after does not hold the garbage collector's safe point;
 *   - a tablet's owner node deleted while its server runs is made again;
 *   - a cluster refuses to start on a root squatted before it (its nodes
 *     open to everybody), printing the commands that fix it; run as printed
 *     (zkCli.sh), they let it start.
 *
 * Every process started here is stopped by pid in teardown; a test that
 * passes stops its daemons with SIGTERM and requires exit 0. The
 * `percolator` binary comes from $PERCOLATOR_CLI (skipped without it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/db.h"
#include "base/error.h"
#include "core/keys.h"
#include "lockservice/coord.h"
#include "lockservice/zk.h"
#include "net/rpc.h"
#include "net/tls.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"
#include "tests/daemons.h"
#include "tests/testutil.h"
#include "tso/tso_client.h"
#include "tso/tso_locator.h"

#define ZK_DATA "zk-data-s3cret"
#define ZK_SYSTEM "zk-system-s3cret"
#define DATA_SECRET "data-s3cret"
#define SYSTEM_SECRET "system-s3cret"
#define ZKCLI "/usr/share/zookeeper/bin/zkCli.sh"

/* ---- processes -------------------------------------------------------------- */

typedef tu_daemons_t fixture_t;

static int setup(void **state) { return tu_daemons_setup(state, "identities"); }
static int teardown(void **state) { return tu_daemons_teardown(state); }

#define NEED_CLI(fx)   \
  do {                 \
    if (!(fx)) skip(); \
  } while (0)

/* Starts `percolator --config cfg run --ready-file DIR/TAG.ready` (its
 * output in DIR/TAG.log) and waits until it is ready; returns the ready
 * file's JSON. */
static json_t *start_run(fixture_t *fx, const char *cfg, const char *tag, pid_t *pid_out) {
  char ready[4200], logp[4200];
  snprintf(ready, sizeof ready, "%s/%s.ready", fx->dir, tag);
  snprintf(logp, sizeof logp, "%s/%s.log", fx->dir, tag);
  const char *argv[] = {tu_cli_path(), "--config", cfg, "run", "--ready-file", ready, NULL};
  *pid_out = tu_daemons_spawn(fx, logp, argv);
  return tu_daemons_ready(fx, *pid_out, ready, logp, 60000, "percolator run");
}

/* Starts `percolator --config cfg run` expecting it to refuse: waits for
 * its exit (within 60 s); returns its output (malloc'd) and its status. */
static char *run_refused(fixture_t *fx, const char *cfg, const char *tag, int *status) {
  char logp[4200];
  snprintf(logp, sizeof logp, "%s/%s.log", fx->dir, tag);
  const char *argv[] = {tu_cli_path(), "--config", cfg, "run", NULL};
  pid_t pid = tu_daemons_spawn(fx, logp, argv);
  uint64_t end = pc_now_mono_ms() + 60000;
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) != pid) {
    if (pc_now_mono_ms() > end) fail_msg("percolator run neither served nor refused; see %s", logp);
    pc_sleep_ms(20);
  }
  tu_daemons_no_sanitizer_report(fx, pid);
  tu_daemons_forget(fx, pid);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return tu_slurp(logp);
}

static const char *endpoint(json_t *ready, const char *tablet) {
  json_t *o = tablet ? json_object_get(json_object_get(ready, "tablets"), tablet)
                     : json_object_get(ready, "tso");
  const char *ep = json_string_value(json_object_get(o, "listen"));
  assert_non_null(ep);
  return ep;
}

static uint16_t port_of(const char *ep) { return (uint16_t)atoi(strrchr(ep, ':') + 1); }

/* ---- configurations ------------------------------------------------------------ */

/* How a cluster's processes prove who they are. */
typedef enum mode {
  OPEN, /* nothing: whoever reaches a port or the ensemble */
  TWO   /* two identities, in the protocol and in ZooKeeper */
} cluster_mode_t;

/* The root of the cluster in dir. */
static const char *root_of(const char *dir, char *out, size_t cap) {
  const char *base = strrchr(dir, '/');
  snprintf(out, cap, "/percolator/%s", base ? base + 1 : dir);
  return out;
}

/* The "zookeeper" member (ending in a comma) with the given secrets. */
static const char *zk_member(const char *dir, const char *secret, const char *system) {
  static char buf[1024];
  char root[300], extra[256] = "";
  if (secret && system)
    snprintf(extra, sizeof extra, ",\"secret\":\"%s\",\"system_secret\":\"%s\"", secret, system);
  else if (secret)
    snprintf(extra, sizeof extra, ",\"secret\":\"%s\"", secret);
  snprintf(buf, sizeof buf,
           "\"zookeeper\":{\"connect\":\"%s\",\"root\":\"%s\",\"session_timeout_ms\":5000%s},",
           tu_zk_shared(), root_of(dir, root, sizeof root), extra);
  return buf;
}

/* Writes DIR/run.json, a cluster of an oracle and tablets a [.."m") and b
 * ["m"..) in mode; returns its path (malloc'd). */
static char *cluster_config(const char *dir, cluster_mode_t mode, const char *extra) {
  char *text = NULL, *path = NULL;
  const char *creds = mode == TWO ? "\"secret\":\"" DATA_SECRET "\",\"system_secret\":\""
                                    SYSTEM_SECRET "\","
                                  : "";
  int rc = asprintf(&text,
                    "{\"data_dir\":\"%s/data\",\"log\":{\"level\":\"info\"},%s%s%s"
                    "\"tso\":{\"listen\":\"127.0.0.1:0\"},"
                    "\"tablets\":[{\"name\":\"a\",\"listen\":\"127.0.0.1:0\",\"end\":\"m\"},"
                    "{\"name\":\"b\",\"listen\":\"127.0.0.1:0\",\"start\":\"m\"}]}\n",
                    dir, creds, extra ? extra : "",
                    mode == TWO ? zk_member(dir, ZK_DATA, ZK_SYSTEM) : zk_member(dir, NULL, NULL));
  assert_true(rc > 0);
  if (asprintf(&path, "%s/run.json", dir) < 0) abort();
  tu_write_text(path, text);
  free(text);
  return path;
}

/* Who a client is. */
typedef enum who { STRANGER, DATA, SYSTEM_ID } who_t;

/* Writes DIR/NAME.json, a client of the cluster whose ready file is ready,
 * as who in mode; returns its path (malloc'd). */
static char *client_config(const char *dir, json_t *ready, const char *name, cluster_mode_t mode,
                           who_t who) {
  char *text = NULL, *path = NULL;
  const char *creds = "", *zk = zk_member(dir, NULL, NULL);
  if (mode == TWO && who == DATA) {
    creds = "\"secret\":\"" DATA_SECRET "\",";
    zk = zk_member(dir, ZK_DATA, NULL);
  } else if (mode == TWO && who == SYSTEM_ID) {
    creds = "\"system_secret\":\"" SYSTEM_SECRET "\",";
    zk = zk_member(dir, ZK_DATA, ZK_SYSTEM);
  }
  int rc = asprintf(&text,
                    "{%s%s\"log\":{\"level\":\"warn\"},\"store\":{\"timeout_ms\":5000,"
                    "\"gc_lifetime_ms\":1000},"
                    "\"tso\":{\"listen\":\"%s\"},"
                    "\"tablets\":[{\"name\":\"a\",\"listen\":\"%s\",\"end\":\"m\"},"
                    "{\"name\":\"b\",\"listen\":\"%s\",\"start\":\"m\"}]}\n",
                    creds, zk, endpoint(ready, NULL), endpoint(ready, "a"),
                    endpoint(ready, "b"));
  assert_true(rc > 0);
  if (asprintf(&path, "%s/%s.json", dir, name) < 0) abort();
  tu_write_text(path, text);
  free(text);
  return path;
}

static pc_db_t *open_db(const char *cfg) {
  pc_error_t err;
  pc_db_t *db = pc_db_open_config(cfg, &err);
  if (!db) fail_msg("pc_db_open_config(%s): %s", cfg, err.text);
  return db;
}

/* A ZooKeeper session on the cluster in dir, as who (STRANGER: no secret,
 * DATA: zookeeper.secret, SYSTEM_ID: both). NULL when it cannot open
 * (err says why). */
static pc_zk_t *zk_as(const char *dir, who_t who, pc_error_t *err) {
  char root[300];
  pc_zk_options_t o = {tu_zk_shared(), root_of(dir, root, sizeof root),
                       who == STRANGER ? NULL : ZK_DATA, 5000,
                       who == SYSTEM_ID ? ZK_SYSTEM : NULL};
  return pc_zk_open(&o, 20000, NULL, err);
}

static pc_zk_t *must_zk(const char *dir, who_t who) {
  pc_error_t err;
  pc_zk_t *zk = zk_as(dir, who, &err);
  if (!zk) fail_msg("zookeeper session: %s", err.text);
  return zk;
}

/* An rpc client of the endpoint ep with the credentials of config cfg. */
static pc_rpc_client_t *rpc_as(const char *cfg, const char *ep) {
  pc_error_t err;
  pc_config_t *c = pc_config_load(cfg, &err);
  if (!c) fail_msg("%s: %s", cfg, err.text);
  char host[64];
  snprintf(host, sizeof host, "%.*s", (int)(strrchr(ep, ':') - ep), ep);
  pc_rpc_client_t *r = pc_config_rpc_client(c, host, port_of(ep), &err);
  if (!r) fail_msg("rpc client of %s: %s", ep, err.text);
  pc_config_free(c);
  return r;
}

/* A tablet request: op with body b; the tablet's status (the call's own when
 * it failed), its payload after the status in *payload (when not NULL), its
 * message in msg. */
static pc_status_t tablet_call(pc_rpc_client_t *c, uint8_t op, const pc_buf_t *b, char *msg,
                               size_t cap, pc_buf_t *payload) {
  pc_buf_t reply = {0};
  pc_error_t err;
  pc_status_t st = pc_rpc_call(c, op, b->p, b->len, 10000, &reply, &err);
  if (st != PC_OK) {
    snprintf(msg, cap, "%s", err.text);
    pc_buf_free(&reply);
    return st;
  }
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  st = (pc_status_t)pc_rd_u8(&r);
  /* the message is the last string: the payload lies between */
  size_t at = r.pos, ml = 0;
  const char *m = NULL;
  for (size_t p = at; p + 4 <= reply.len; p++) {
    pc_rd_t t = {reply.p, reply.len, p, 1};
    size_t n = 0;
    const char *s = pc_rd_str(&t, &n);
    if (t.ok && t.pos == reply.len) {
      m = s;
      ml = n;
      if (payload) {
        payload->len = 0;
        pc_buf_append(payload, reply.p + at, p - at);
      }
      break;
    }
  }
  snprintf(msg, cap, "%.*s", m ? (int)ml : 0, m ? m : "");
  pc_buf_free(&reply);
  return st;
}

static uint64_t fresh_ts(pc_db_t *db) {
  uint64_t ts = 0;
  pc_error_t err;
  if (pc_db_timestamp(db, 10000, &ts, &err) != PC_OK) fail_msg("a timestamp: %s", err.text);
  return ts;
}

static pc_status_t prewrite(pc_rpc_client_t *c, const char *table, const char *row,
                            uint64_t start, char *msg, size_t cap) {
  pc_cell_t cell = {table, row, strlen(row), "c", 1};
  pc_mutation_t m = {cell, PC_WRITE_PUT, "v", 1, 0};
  pc_tablet_write_req_t q = {.spec = {cell, start, 600000, 0}, .muts = &m, .n = 1};
  pc_buf_t b = {0};
  assert_int_equal(pc_tablet_encode_write(&b, PC_TABLET_OP_PREWRITE, &q), 0);
  pc_status_t st = tablet_call(c, PC_TABLET_OP_PREWRITE, &b, msg, cap, NULL);
  pc_buf_free(&b);
  return st;
}

/* COMMIT (commit_ts nonzero) or ROLLBACK of table/row/"c" of start. */
static pc_status_t settle(pc_rpc_client_t *c, const char *table, const char *row, uint64_t start,
                          uint64_t commit, char *msg, size_t cap) {
  pc_cell_t cell = {table, row, strlen(row), "c", 1};
  pc_tablet_cells_req_t q = {start, commit, &cell, 1};
  uint8_t op = commit ? PC_TABLET_OP_COMMIT : PC_TABLET_OP_ROLLBACK;
  pc_buf_t b = {0};
  assert_int_equal(pc_tablet_encode_cells(&b, op, &q), 0);
  pc_status_t st = tablet_call(c, op, &b, msg, cap, NULL);
  pc_buf_free(&b);
  return st;
}

/* CHECK_TXN of table/row/"c" at start, dead; *state the answer. */
static pc_status_t check_txn(pc_rpc_client_t *c, const char *table, const char *row,
                             uint64_t start, uint64_t now, int dead, int *state, char *msg,
                             size_t cap) {
  pc_cell_t cell = {table, row, strlen(row), "c", 1};
  pc_tablet_check_txn_req_t q = {cell, start, now, dead};
  pc_buf_t b = {0}, payload = {0};
  assert_int_equal(pc_tablet_encode_check_txn(&b, &q), 0);
  pc_status_t st = tablet_call(c, PC_TABLET_OP_CHECK_TXN, &b, msg, cap, &payload);
  if (st == PC_OK && payload.len >= 1) *state = (unsigned char)payload.p[0];
  pc_buf_free(&b);
  pc_buf_free(&payload);
  return st;
}

static pc_status_t heartbeat(pc_rpc_client_t *c, const char *table, const char *row,
                             uint64_t start, char *msg, size_t cap) {
  pc_cell_t cell = {table, row, strlen(row), "c", 1};
  pc_tablet_heartbeat_req_t q = {cell, start, 600000};
  pc_buf_t b = {0};
  assert_int_equal(pc_tablet_encode_heartbeat(&b, &q), 0);
  pc_status_t st = tablet_call(c, PC_TABLET_OP_HEARTBEAT, &b, msg, cap, NULL);
  pc_buf_free(&b);
  return st;
}

static pc_status_t put(pc_db_t *db, const char *table, const char *row, const char *val,
                       pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err->code;
  pc_status_t st = strcmp(table, PC_SYSTEM_TABLE) == 0
                       ? pc_txn_set_system(t, table, row, strlen(row), "c", 1, val, strlen(val),
                                           err)
                       : pc_txn_set(t, table, row, strlen(row), "c", 1, val, strlen(val), err);
  if (st == PC_OK) st = pc_txn_commit(t, err);
  pc_txn_destroy(t);
  return st;
}

/* The value of table/row/"c" as a fresh transaction of db reads it
 * (malloc'd; NULL when absent), or fails the test. */
static char *get(pc_db_t *db, const char *table, const char *row) {
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(db, &err);
  if (!t) fail_msg("begin: %s", err.text);
  char *v = NULL;
  size_t vl = 0;
  pc_status_t st = strcmp(table, PC_SYSTEM_TABLE) == 0
                       ? pc_txn_get_system(t, table, row, strlen(row), "c", 1, &v, &vl, &err)
                       : pc_txn_get(t, table, row, strlen(row), "c", 1, &v, &vl, &err);
  pc_txn_destroy(t);
  if (st == PC_NOT_FOUND) return NULL;
  if (st != PC_OK) fail_msg("get %s/%s: %s", table, row, err.text);
  char *out = strndup(v, vl);
  pc_free(v);
  return out;
}

/* A listener on 127.0.0.1 that counts the connections it accepts (a fake
 * server: nothing should ever reach it). */
typedef struct listener {
  int fd;
  uint16_t port;
  atomic_int accepted, stop;
  pthread_t thread;
} listener_t;

static void *listen_main(void *arg) {
  listener_t *l = arg;
  while (!atomic_load(&l->stop)) {
    struct pollfd pf = {.fd = l->fd, .events = POLLIN};
    if (poll(&pf, 1, 50) <= 0) continue;
    int c = accept(l->fd, NULL, NULL);
    if (c >= 0) {
      atomic_fetch_add(&l->accepted, 1);
      close(c);
    }
  }
  return NULL;
}

static void listener_start(listener_t *l) {
  memset(l, 0, sizeof *l);
  l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  assert_true(l->fd >= 0 && bind(l->fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              listen(l->fd, 64) == 0 && getsockname(l->fd, (struct sockaddr *)&a, &len) == 0);
  l->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&l->thread, NULL, listen_main, l), 0);
}

static void listener_stop(listener_t *l) {
  atomic_store(&l->stop, 1);
  pthread_join(l->thread, NULL);
  close(l->fd);
}

/* ---- the table of docs/SECURITY.md ------------------------------------------------- */

/* What the checks share: one cluster with two identities. */
typedef struct table_ctx {
  fixture_t *fx;
  json_t *ready;
  char *data_cfg, *data2_cfg, *system_cfg, *stranger_cfg;
  pc_db_t *data, *system;
} table_ctx_t;

/* A check tries what its row says; returns 1 when it was done, 0 when it
 * was refused or had no effect, with what happened in why. */
typedef int (*check_fn)(table_ctx_t *t, char *why, size_t cap);

static int stranger_reads(table_ctx_t *t, char *why, size_t cap) {
  pc_rpc_client_t *c = rpc_as(t->stranger_cfg, endpoint(t->ready, "a"));
  pc_cell_t cell = {"t", "k1", 2, "c", 1};
  pc_tablet_get_req_t q = {cell, 1};
  pc_buf_t b = {0};
  assert_int_equal(pc_tablet_encode_get(&b, PC_TABLET_OP_GET, &q), 0);
  pc_status_t st = tablet_call(c, PC_TABLET_OP_GET, &b, why, cap, NULL);
  pc_buf_free(&b);
  pc_rpc_client_destroy(c);
  return st == PC_OK || st == PC_NOT_FOUND;
}

static int anonymous_zookeeper(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, STRANGER);
  char *data = NULL;
  pc_error_t err;
  int done = 0;
  if (pc_zk_get(zk, "tso/bound", NULL, &data, NULL, NULL, 5000, &err) == PC_OK) done = 1;
  free(data);
  if (pc_zk_create(zk, "clients/00000000000000aa", "1", 1, 0, NULL, 0, 5000, &err) == PC_OK)
    done = 1;
  snprintf(why, cap, "%s", err.text);
  pc_zk_close(zk);
  return done;
}

static int data_reads_writes(table_ctx_t *t, char *why, size_t cap) {
  pc_error_t err;
  if (put(t->data, "t", "k1", "v1", &err) != PC_OK || put(t->data, "t", "z1", "v1", &err) != PC_OK) {
    snprintf(why, cap, "%s", err.text);
    return 0;
  }
  char *v = get(t->data, "t", "z1");
  int done = v && strcmp(v, "v1") == 0;
  free(v);
  snprintf(why, cap, "wrote and read rows of both tablets");
  return done;
}

static int data_gc(table_ctx_t *t, char *why, size_t cap) {
  pc_gc_stats_t gs;
  pc_error_t err;
  pc_status_t st = pc_db_gc(t->data, &gs, &err);
  snprintf(why, cap, "%s", err.text);
  return st == PC_OK;
}

static int data_system_write(table_ctx_t *t, char *why, size_t cap) {
  pc_error_t err;
  pc_status_t st = put(t->data, PC_SYSTEM_TABLE, "test/data", "x", &err);
  snprintf(why, cap, "%s", err.text);
  return st == PC_OK;
}

/* The system's lock on percolator.system/row, prewritten now; *start its
 * transaction's. */
static pc_rpc_client_t *system_lock(table_ctx_t *t, const char *row, uint64_t *start) {
  pc_rpc_client_t *sys = rpc_as(t->system_cfg, endpoint(t->ready, "a"));
  char msg[512];
  *start = fresh_ts(t->system);
  if (prewrite(sys, PC_SYSTEM_TABLE, row, *start, msg, sizeof msg) != PC_OK)
    fail_msg("the system's prewrite: %s", msg);
  return sys;
}

static int data_settles_system_lock(table_ctx_t *t, char *why, size_t cap) {
  uint64_t start;
  pc_rpc_client_t *sys = system_lock(t, "a/locked", &start);
  pc_rpc_client_t *c = rpc_as(t->data_cfg, endpoint(t->ready, "a"));
  char msg[512];
  int state = -1, done = 0;
  if (settle(c, PC_SYSTEM_TABLE, "a/locked", start, 0, msg, sizeof msg) == PC_OK) done = 1;
  snprintf(why, cap, "ROLLBACK: %s", msg);
  if (check_txn(c, PC_SYSTEM_TABLE, "a/locked", start, fresh_ts(t->data), 1, &state, msg,
                sizeof msg) == PC_OK)
    done = 1;
  if (settle(c, PC_SYSTEM_TABLE, "a/locked", start, fresh_ts(t->data), msg, sizeof msg) == PC_OK)
    done = 1; /* a commit of it at a time of the data client's choosing */
  /* the system's commit goes through */
  if (settle(sys, PC_SYSTEM_TABLE, "a/locked", start, fresh_ts(t->system), msg, sizeof msg) !=
      PC_OK)
    fail_msg("the system's commit after the data client's tries: %s", msg);
  pc_rpc_client_destroy(c);
  pc_rpc_client_destroy(sys);
  return done;
}

static int data_commits_beyond(table_ctx_t *t, char *why, size_t cap) {
  pc_rpc_client_t *c = rpc_as(t->data_cfg, endpoint(t->ready, "a"));
  char msg[512];
  uint64_t start = fresh_ts(t->data);
  if (prewrite(c, "t", "k5", start, msg, sizeof msg) != PC_OK) fail_msg("prewrite: %s", msg);
  pc_status_t st = settle(c, "t", "k5", start, UINT64_MAX - 1, msg, sizeof msg);
  snprintf(why, cap, "%s", msg);
  if (st != PC_OK) settle(c, "t", "k5", start, 0, msg, sizeof msg);
  pc_rpc_client_destroy(c);
  return st == PC_OK;
}

static int data_rolls_back_other(table_ctx_t *t, char *why, size_t cap) {
  pc_rpc_client_t *a = rpc_as(t->data_cfg, endpoint(t->ready, "a"));
  pc_rpc_client_t *b = rpc_as(t->data2_cfg, endpoint(t->ready, "a"));
  char msg[512];
  uint64_t start = fresh_ts(t->data);
  if (prewrite(a, "t", "k6", start, msg, sizeof msg) != PC_OK) fail_msg("prewrite: %s", msg);
  int state = -1;
  pc_status_t st = check_txn(b, "t", "k6", start, fresh_ts(t->data), 1, &state, msg, sizeof msg);
  snprintf(why, cap, "CHECK_TXN with dead = 1: %s, state %d", pc_status_name(st), state);
  pc_rpc_client_destroy(a);
  pc_rpc_client_destroy(b);
  return st == PC_OK && state == PC_TXN_ROLLED_BACK;
}

/* Serves rpc ops with TLS credentials tls: every request answered with a
 * value nobody wrote. */
static pc_status_t fake_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                pc_buf_t *reply, pc_error_t *err) {
  (void)ctx, (void)op, (void)body, (void)len, (void)err;
  return pc_buf_append(reply, "FAKE VALUE", 10) ? PC_NOMEM : PC_OK;
}

static int data_serves_with_its_certificate(table_ctx_t *t, char *why, size_t cap) {
  const char *d = t->fx->dir;
  char ca[4300], cert[4300], key[4300], cfg[4300], text[8192];
  snprintf(ca, sizeof ca, "%s/ca.pem", d);
  snprintf(cert, sizeof cert, "%s/app.pem", d);
  snprintf(key, sizeof key, "%s/app.key", d);
  pc_tls_options_t to = {ca, cert, key, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, 0};
  pc_error_t err;
  pc_tls_t *tls = pc_tls_create(&to, &err);
  if (!tls) fail_msg("tls: %s", err.text);
  pc_rpc_auth_t auth = {.tls = tls};
  pc_rpc_server_options_t so = {.name = "fake", .host = "127.0.0.1", .auth = &auth};
  pc_rpc_server_t *fake = pc_rpc_server_start(&so, fake_handler, NULL, &err);
  if (!fake) fail_msg("fake server: %s", err.text);
  /* an operator's client, configured as docs/SECURITY.md shows */
  snprintf(cfg, sizeof cfg, "%s/ops-tls.json", d);
  snprintf(text, sizeof text,
           "{\"tls\":{\"ca_file\":\"%s/ca.pem\",\"cert_file\":\"%s/ops.pem\","
           "\"key_file\":\"%s/ops.key\",\"allowed_cn\":[\"app\"],\"system_cn\":[\"node\","
           "\"ops\"]}}\n",
           d, d, d);
  tu_write_text(cfg, text);
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%u", (unsigned)pc_rpc_server_port(fake));
  pc_rpc_client_t *c = rpc_as(cfg, ep);
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, PC_TABLET_OP_INFO, NULL, 0, 10000, &reply, &err);
  snprintf(why, cap, "%s", st == PC_OK ? "answered" : err.text);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(c);
  pc_rpc_server_stop(fake);
  pc_tls_unref(tls);
  return st == PC_OK;
}

static int zk_data_reads_topology(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, DATA);
  const char *const nodes[] = {"tso/bound", "tablets/a/owner", "tablets/a/range"};
  pc_error_t err;
  int done = 1;
  for (size_t i = 0; i < 3; i++) {
    char *data = NULL;
    if (pc_zk_get(zk, nodes[i], NULL, &data, NULL, NULL, 5000, &err) != PC_OK) done = 0;
    free(data);
  }
  char **names = NULL;
  size_t n = 0;
  if (pc_zk_children(zk, "tso/election", NULL, &names, &n, 5000, &err) != PC_OK || n == 0)
    done = 0;
  pc_zk_free_names(names, n);
  snprintf(why, cap, "%s", done ? "read the bound, the election and the tablet map" : err.text);
  pc_zk_close(zk);
  return done;
}

static int zk_data_writes_bound(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, DATA);
  char text[32];
  pc_error_t err;
  snprintf(text, sizeof text, "%" PRIu64, UINT64_MAX - 1);
  pc_status_t st = pc_zk_set(zk, "tso/bound", text, strlen(text), -1, NULL, 5000, &err);
  snprintf(why, cap, "%s", err.text);
  pc_zk_close(zk);
  return st == PC_OK;
}

static int zk_data_takes_topology(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, DATA);
  pc_error_t err;
  int done = 0;
  char fake[32];
  snprintf(fake, sizeof fake, "127.0.0.1:9 %016" PRIx64 " x", pc_zk_session_id(zk));
  if (pc_zk_delete(zk, "tablets/a/owner", -1, 5000, &err) == PC_OK) done = 1;
  if (pc_zk_create(zk, "tablets/c", NULL, 0, 0, NULL, 0, 5000, &err) == PC_OK) done = 1;
  if (pc_zk_create(zk, "tso/election/n-", "127.0.0.1:9", 11, PC_ZK_EPHEMERAL | PC_ZK_SEQUENCE,
                   NULL, 0, 5000, &err) == PC_OK)
    done = 1;
  snprintf(why, cap, "%s", err.text);
  pc_zk_close(zk);
  return done;
}

static int zk_data_writes_safe_point(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, DATA);
  pc_error_t err;
  pc_status_t st = pc_zk_create(zk, "gc/safe_point", "1", 1, 0, NULL, 0, 5000, &err);
  if (st == PC_BUSY) st = pc_zk_set(zk, "gc/safe_point", "1", 1, -1, NULL, 5000, &err);
  snprintf(why, cap, "%s", err.text);
  pc_zk_close(zk);
  return st == PC_OK;
}

static int zk_data_own_node(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, DATA);
  pc_error_t err;
  char rel[64];
  snprintf(rel, sizeof rel, "clients/%016" PRIx64, pc_zk_session_id(zk));
  pc_status_t st = pc_zk_create(zk, rel, "1 test", 6, PC_ZK_EPHEMERAL | PC_ZK_OWN, NULL, 0, 5000,
                                &err);
  if (st == PC_OK) st = pc_zk_set(zk, rel, "2 test", 6, -1, NULL, 5000, &err);
  snprintf(why, cap, "%s", st == PC_OK ? "made and rewrote its node" : err.text);
  pc_zk_close(zk);
  return st == PC_OK;
}

static int zk_data_pins_gc(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, DATA);
  pc_error_t err;
  pc_status_t st = pc_zk_create(zk, "clients/00000000000000ff", "1 pinned", 8, 0, NULL, 0, 5000,
                                &err);
  pc_zk_close(zk);
  if (st != PC_OK) {
    snprintf(why, cap, "%s", err.text);
    return 0;
  }
  pc_gc_stats_t gs;
  if (pc_db_gc(t->system, &gs, &err) != PC_OK) fail_msg("the system's pass: %s", err.text);
  snprintf(why, cap, "a persistent report of 1 made; the system's pass took the safe point %" PRIu64,
           gs.safe_point);
  return gs.safe_point <= 1;
}

static int zk_data_deletes_other(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, DATA);
  pc_error_t err;
  char rel[64];
  snprintf(rel, sizeof rel, "clients/%016" PRIx64, pc_coord_session(t->system->coordination));
  pc_status_t st = pc_zk_delete(zk, rel, -1, 5000, &err);
  snprintf(why, cap, "%s", err.text);
  pc_zk_close(zk);
  return st == PC_OK;
}

static int system_gc(table_ctx_t *t, char *why, size_t cap) {
  pc_gc_stats_t gs;
  pc_error_t err;
  pc_status_t st = pc_db_gc(t->system, &gs, &err);
  snprintf(why, cap, "%s", st == PC_OK ? "collected" : err.text);
  return st == PC_OK;
}

static int system_system_write(table_ctx_t *t, char *why, size_t cap) {
  pc_error_t err;
  pc_status_t st = put(t->system, PC_SYSTEM_TABLE, "test/system", "x", &err);
  snprintf(why, cap, "%s", st == PC_OK ? "wrote" : err.text);
  return st == PC_OK;
}

static int system_writes_topology(table_ctx_t *t, char *why, size_t cap) {
  pc_zk_t *zk = must_zk(t->fx->dir, SYSTEM_ID);
  char *data = NULL;
  size_t len = 0;
  pc_error_t err;
  pc_status_t st = pc_zk_get(zk, "tablets/a/range", NULL, &data, &len, NULL, 5000, &err);
  if (st == PC_OK) st = pc_zk_set(zk, "tablets/a/range", data, len, -1, NULL, 5000, &err);
  free(data);
  snprintf(why, cap, "%s", st == PC_OK ? "rewrote tablets/a/range" : err.text);
  pc_zk_close(zk);
  return st == PC_OK;
}

static int system_commits_beyond(table_ctx_t *t, char *why, size_t cap) {
  pc_rpc_client_t *c = rpc_as(t->system_cfg, endpoint(t->ready, "a"));
  char msg[512];
  uint64_t start = fresh_ts(t->system);
  if (prewrite(c, "t", "k8", start, msg, sizeof msg) != PC_OK) fail_msg("prewrite: %s", msg);
  pc_status_t st = settle(c, "t", "k8", start, UINT64_MAX - 1, msg, sizeof msg);
  snprintf(why, cap, "%s", msg);
  if (st != PC_OK) settle(c, "t", "k8", start, 0, msg, sizeof msg);
  pc_rpc_client_destroy(c);
  return st == PC_OK;
}

static const struct {
  const char *id;
  check_fn fn;
} checks[] = {
    {"S1", stranger_reads},
    {"S2", anonymous_zookeeper},
    {"D1", data_reads_writes},
    {"D2", data_gc},
    {"D3", data_system_write},
    {"D4", data_settles_system_lock},
    {"D5", data_commits_beyond},
    {"D6", data_rolls_back_other},
    {"D7", data_serves_with_its_certificate},
    {"Z1", zk_data_reads_topology},
    {"Z2", zk_data_writes_bound},
    {"Z3", zk_data_takes_topology},
    {"Z4", zk_data_writes_safe_point},
    {"Z5", zk_data_own_node},
    {"Z6", zk_data_pins_gc},
    {"Z7", zk_data_deletes_other},
    {"Y1", system_gc},
    {"Y2", system_system_write},
    {"Y3", system_writes_topology},
    {"Y4", system_commits_beyond},
};
#define NCHECKS (sizeof checks / sizeof checks[0])

/* The rows of the table that follows the marker in docs/SECURITY.md: id,
 * and the outcome (1 can, 0 cannot). */
typedef struct row {
  char id[8];
  int can;
  char text[400];
} row_t;

static size_t read_table(row_t *rows, size_t cap) {
  char path[4200];
  snprintf(path, sizeof path, "%s/docs/SECURITY.md", PC_SOURCE_DIR);
  char *doc = tu_slurp(path);
  const char *at = strstr(doc, "<!-- identity table: tests/test_identities.c -->");
  if (!at) fail_msg("docs/SECURITY.md has no identity table marker");
  size_t n = 0;
  const char *line = strchr(at, '\n');
  while (line && *++line == '|') {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[1024];
    snprintf(buf, sizeof buf, "%.*s", (int)len, line);
    /* | id | identity | what | outcome | */
    char *cells[8];
    int k = 0;
    for (char *p = strtok(buf, "|"); p && k < 8; p = strtok(NULL, "|")) {
      while (*p == ' ') p++;
      char *e = p + strlen(p);
      while (e > p && e[-1] == ' ') *--e = '\0';
      cells[k++] = p;
    }
    if (k == 4 && cells[0][0] && strchr("SDZY", cells[0][0]) && cells[0][1] >= '0' &&
        cells[0][1] <= '9') {
      assert_true(n < cap);
      snprintf(rows[n].id, sizeof rows[n].id, "%s", cells[0]);
      if (strncmp(cells[3], "cannot", 6) == 0) rows[n].can = 0;
      else if (strncmp(cells[3], "can", 3) == 0) rows[n].can = 1;
      else fail_msg("docs/SECURITY.md row %s: outcome '%s' is neither can nor cannot", cells[0],
                    cells[3]);
      snprintf(rows[n].text, sizeof rows[n].text, "%s: %s", cells[1], cells[2]);
      n++;
    }
    line = end;
  }
  free(doc);
  return n;
}

static void test_table(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  row_t rows[64];
  size_t n = read_table(rows, 64);
  /* every row has its check and every check its row */
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < NCHECKS && strcmp(checks[k].id, rows[i].id) != 0) k++;
    if (k == NCHECKS) fail_msg("docs/SECURITY.md row %s has no check here", rows[i].id);
  }
  for (size_t k = 0; k < NCHECKS; k++) {
    size_t i = 0;
    while (i < n && strcmp(checks[k].id, rows[i].id) != 0) i++;
    if (i == n) fail_msg("check %s has no row in docs/SECURITY.md", checks[k].id);
  }
  tu_make_certs(fx->dir, "node:server app ops");
  char *cfg = cluster_config(fx->dir, TWO, "\"store\":{\"gc_interval_ms\":0},");
  pid_t run;
  table_ctx_t t = {.fx = fx, .ready = start_run(fx, cfg, "run", &run)};
  t.data_cfg = client_config(fx->dir, t.ready, "data", TWO, DATA);
  t.data2_cfg = client_config(fx->dir, t.ready, "data2", TWO, DATA);
  t.system_cfg = client_config(fx->dir, t.ready, "system", TWO, SYSTEM_ID);
  t.stranger_cfg = client_config(fx->dir, t.ready, "stranger", OPEN, STRANGER);
  t.data = open_db(t.data_cfg);
  t.system = open_db(t.system_cfg);
  int wrong = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (strcmp(checks[k].id, rows[i].id) != 0) k++;
    char why[1024] = "";
    int done = checks[k].fn(&t, why, sizeof why);
    fprintf(stderr, "%s %s: %s (%s)\n", rows[i].id, rows[i].text, done ? "done" : "not done",
            why);
    if (done != rows[i].can) {
      fprintf(stderr, "  ^ docs/SECURITY.md says it %s\n", rows[i].can ? "can" : "cannot");
      wrong++;
    }
  }
  pc_db_close(t.data);
  pc_db_close(t.system);
  tu_daemons_stop(fx, run);
  json_decref(t.ready);
  free(t.data_cfg);
  free(t.data2_cfg);
  free(t.system_cfg);
  free(t.stranger_cfg);
  free(cfg);
  if (wrong) fail_msg("%d row(s) of docs/SECURITY.md's table do not hold", wrong);
}

/* ---- a bound far beyond the clock ------------------------------------------------ */

/* A timestamp through db, retried until deadline; PC_OK, or the last error in err. */
static pc_status_t ts_until(pc_db_t *db, uint64_t deadline, uint64_t *ts, pc_error_t *err) {
  pc_status_t st;
  do {
    st = pc_db_timestamp(db, 2000, ts, err);
    if (st == PC_OK) return st;
    pc_sleep_ms(100);
  } while (pc_now_mono_ms() < deadline);
  return st;
}

/* The last "last bound written: N" the oracle's log (the output of `run`)
 * holds; 0 when none. */
static uint64_t last_bound_logged(const char *logp) {
  char *log = tu_slurp(logp);
  uint64_t v = 0;
  for (const char *p = log; (p = strstr(p, "last bound written: ")); p++)
    v = strtoull(p + strlen("last bound written: "), NULL, 10);
  free(log);
  return v;
}

static void test_bound_far_ahead(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  char *cfg = cluster_config(fx->dir, OPEN, NULL), logp[4300];
  snprintf(logp, sizeof logp, "%s/run.log", fx->dir);
  pid_t run;
  json_t *ready = start_run(fx, cfg, "run", &run);
  char *ccfg = client_config(fx->dir, ready, "client", OPEN, STRANGER);
  pc_db_t *db = open_db(ccfg);
  pc_error_t err;
  uint64_t before = 0, ts = 0;
  assert_int_equal(pc_db_timestamp(db, 10000, &before, &err), PC_OK);
  /* whoever reaches the ensemble of a cluster without secrets writes 2^64-2 */
  pc_zk_t *zk = must_zk(fx->dir, STRANGER);
  char text[32];
  snprintf(text, sizeof text, "%" PRIu64, UINT64_MAX - 1);
  assert_int_equal(pc_zk_set(zk, "tso/bound", text, strlen(text), -1, NULL, 5000, &err), PC_OK);
  /* the leader's next write is fenced; no oracle leads from that bound, and
   * a client is told why */
  uint64_t end = pc_now_mono_ms() + 30000;
  pc_status_t st;
  do {
    st = pc_db_timestamp(db, 2000, &ts, &err);
    if (st != PC_OK && strstr(err.text, "tso/bound")) break;
    pc_sleep_ms(100);
  } while (pc_now_mono_ms() < end);
  fprintf(stderr, "after 2^64-2 in tso/bound: %s: %s\n", pc_status_name(st), err.text);
  if (st == PC_OK || !strstr(err.text, "far beyond"))
    fail_msg("the oracle does not say why it does not lead: %s: %s", pc_status_name(st),
             err.text);
  /* as the oracle's log says: the bound set back to the last one an oracle wrote */
  uint64_t last = last_bound_logged(logp);
  fprintf(stderr, "the stepped-down leader's last bound: %" PRIu64 "\n", last);
  assert_true(last > before);
  snprintf(text, sizeof text, "%" PRIu64, last);
  assert_int_equal(pc_zk_set(zk, "tso/bound", text, strlen(text), -1, NULL, 5000, &err), PC_OK);
  /* timestamps again, without a restart, above every one issued before */
  if (ts_until(db, pc_now_mono_ms() + 30000, &ts, &err) != PC_OK)
    fail_msg("no timestamp once the bound was set back: %s", err.text);
  assert_true(ts > last);
  pc_zk_close(zk);
  pc_db_close(db);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(ccfg);
  free(cfg);
}

/* ---- fake servers in ZooKeeper ---------------------------------------------------- */

static void test_fake_servers(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  char *cfg = cluster_config(fx->dir, OPEN, NULL);
  pid_t run;
  json_t *ready = start_run(fx, cfg, "run", &run);
  char *ccfg = client_config(fx->dir, ready, "client", OPEN, STRANGER);
  listener_t fake;
  listener_start(&fake);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)fake.port);
  /* a candidate of the election that sorts before every oracle's, and an
   * owner of tablet a in place of its server's: persistent nodes, made by a
   * process that reached the ensemble */
  pc_zk_t *zk = must_zk(fx->dir, STRANGER);
  pc_error_t err;
  assert_int_equal(pc_zk_create(zk, "tso/election/a", addr, strlen(addr), 0, NULL, 0, 5000, &err),
                   PC_OK);
  char owner[128];
  snprintf(owner, sizeof owner, "%s %016" PRIx64 " fake:/nowhere", addr, pc_zk_session_id(zk));
  assert_int_equal(pc_zk_delete(zk, "tablets/a/owner", -1, 5000, &err), PC_OK);
  pc_status_t st = pc_zk_create(zk, "tablets/a/owner", owner, strlen(owner), 0, NULL, 0, 5000,
                                &err);
  assert_true(st == PC_OK || st == PC_BUSY); /* the server may have made its own again first */
  /* a new client: timestamps from the real oracle, never the fake */
  pc_db_t *db = open_db(ccfg);
  uint64_t ts = 0;
  if (ts_until(db, pc_now_mono_ms() + 20000, &ts, &err) != PC_OK)
    fail_msg("timestamps with a fake candidate first in the election: %s", err.text);
  /* the rows of tablet b are written; those of a never reach the fake */
  assert_int_equal(put(db, "t", "z1", "v", &err), PC_OK);
  st = put(db, "t", "k1", "v", &err);
  fprintf(stderr, "a row of tablet a while a persistent node names a fake owner: %s (%s)\n",
          pc_status_name(st), err.text);
  assert_int_equal(atomic_load(&fake.accepted), 0);
  pc_db_close(db);
  pc_zk_close(zk);
  listener_stop(&fake);
  assert_int_equal(atomic_load(&fake.accepted), 0);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(ccfg);
  free(cfg);
}

/* ---- timestamps beyond the oracle's ------------------------------------------------- */

static void test_future_timestamps(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  char *cfg = cluster_config(fx->dir, TWO, NULL);
  pid_t run;
  json_t *ready = start_run(fx, cfg, "run", &run);
  char *dcfg = client_config(fx->dir, ready, "data", TWO, DATA);
  pc_db_t *db = open_db(dcfg);
  pc_rpc_client_t *c = rpc_as(dcfg, endpoint(ready, "a"));
  char msg[512];
  uint64_t start = fresh_ts(db), far = UINT64_MAX - 1;
  assert_int_equal(prewrite(c, "t", "k1", start, msg, sizeof msg), PC_OK);
  /* a commit at 2^64-2 */
  assert_int_equal(settle(c, "t", "k1", start, far, msg, sizeof msg), PC_INVALID);
  fprintf(stderr, "COMMIT at 2^64-2: %s\n", msg);
  if (!strstr(msg, "beyond the oracle")) fail_msg("unexpected: %s", msg);
  /* a rollback record, a settling and a lock there */
  assert_int_equal(settle(c, "t", "k2", far, 0, msg, sizeof msg), PC_INVALID);
  int state2 = -1;
  assert_int_equal(check_txn(c, "t", "k3", far, fresh_ts(db), 1, &state2, msg, sizeof msg),
                   PC_INVALID);
  assert_int_equal(prewrite(c, "t", "k4", far, msg, sizeof msg), PC_INVALID);
  /* the lock's own commit, at the oracle's time, and every cell stays writable */
  assert_int_equal(settle(c, "t", "k1", start, fresh_ts(db), msg, sizeof msg), PC_OK);
  pc_error_t err;
  const char *const rows[] = {"k1", "k2", "k3", "k4"};
  for (int i = 0; i < 4; i++)
    if (put(db, "t", rows[i], "after", &err) != PC_OK)
      fail_msg("%s is not writable: %s", rows[i], err.text);
  pc_rpc_client_destroy(c);
  pc_db_close(db);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(dcfg);
  free(cfg);
}

/* ---- the system's locks -------------------------------------------------------------- */

static void test_system_locks(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  char *cfg = cluster_config(fx->dir, TWO, NULL);
  pid_t run;
  json_t *ready = start_run(fx, cfg, "run", &run);
  char *dcfg = client_config(fx->dir, ready, "data", TWO, DATA);
  char *scfg = client_config(fx->dir, ready, "system", TWO, SYSTEM_ID);
  pc_db_t *data = open_db(dcfg), *sys = open_db(scfg);
  pc_rpc_client_t *dc = rpc_as(dcfg, endpoint(ready, "a"));
  pc_rpc_client_t *sc = rpc_as(scfg, endpoint(ready, "a"));
  char msg[512];
  uint64_t start = fresh_ts(sys);
  assert_int_equal(prewrite(sc, PC_SYSTEM_TABLE, "a/rec", start, msg, sizeof msg), PC_OK);
  /* the data client settles none of it */
  int s = -1;
  assert_int_equal(settle(dc, PC_SYSTEM_TABLE, "a/rec", start, 0, msg, sizeof msg), PC_DENIED);
  fprintf(stderr, "data client's ROLLBACK of the system's lock: %s\n", msg);
  assert_int_equal(check_txn(dc, PC_SYSTEM_TABLE, "a/rec", start, fresh_ts(data), 1, &s, msg,
                             sizeof msg),
                   PC_DENIED);
  assert_int_equal(
      settle(dc, PC_SYSTEM_TABLE, "a/rec", start, fresh_ts(data), msg, sizeof msg), PC_DENIED);
  assert_int_equal(heartbeat(dc, PC_SYSTEM_TABLE, "a/rec", start, msg, sizeof msg), PC_DENIED);
  /* a data client's read of the locked cell waits for the system: it does
   * not settle it */
  pc_error_t err;
  pc_txn_t *t = pc_txn_begin(data, &err);
  assert_non_null(t);
  char *v = NULL;
  size_t vl = 0;
  pc_status_t st = pc_txn_get_system(t, PC_SYSTEM_TABLE, "a/rec", 5, "c", 1, &v, &vl, &err);
  fprintf(stderr, "a data client's read of the locked cell: %s (%s)\n", pc_status_name(st),
          err.text);
  assert_int_equal(st, PC_LOCKED);
  pc_txn_destroy(t);
  /* the system's commit */
  assert_int_equal(settle(sc, PC_SYSTEM_TABLE, "a/rec", start, fresh_ts(sys), msg, sizeof msg),
                   PC_OK);
  char *got = get(data, PC_SYSTEM_TABLE, "a/rec");
  assert_non_null(got);
  assert_string_equal(got, "v");
  free(got);
  pc_rpc_client_destroy(dc);
  pc_rpc_client_destroy(sc);
  pc_db_close(data);
  pc_db_close(sys);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(dcfg);
  free(scfg);
  free(cfg);
}

/* ---- reports that are not a live client's ---------------------------------------------- */

static void test_pinned_reports(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  char *cfg = cluster_config(fx->dir, TWO, "\"store\":{\"gc_interval_ms\":0},");
  pid_t run;
  json_t *ready = start_run(fx, cfg, "run", &run);
  char *scfg = client_config(fx->dir, ready, "system", TWO, SYSTEM_ID);
  /* a data client's persistent node reporting 1, and its ephemeral node
   * named after another session */
  pc_zk_t *zk = must_zk(fx->dir, DATA);
  pc_error_t err;
  assert_int_equal(pc_zk_create(zk, "clients/00000000000000ff", "1 pinned", 8, 0, NULL, 0, 5000,
                                &err),
                   PC_OK);
  assert_int_equal(pc_zk_create(zk, "clients/00000000000000fe", "2 other", 7,
                                PC_ZK_EPHEMERAL | PC_ZK_OWN, NULL, 0, 5000, &err),
                   PC_OK);
  pc_db_t *sys = open_db(scfg);
  pc_error_t e2;
  assert_int_equal(put(sys, "t", "k1", "v1", &e2), PC_OK);
  pc_sleep_ms(1200); /* past the client's gc_lifetime_ms */
  pc_gc_stats_t gs;
  assert_int_equal(pc_db_gc(sys, &gs, &err), PC_OK);
  fprintf(stderr, "safe point with two forged reports: %" PRIu64 "\n", gs.safe_point);
  assert_true(gs.safe_point > 2);
  pc_zk_close(zk);
  pc_db_close(sys);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(scfg);
  free(cfg);
}

/* ---- a deleted owner node -------------------------------------------------------------- */

static void test_owner_recreated(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  char *cfg = cluster_config(fx->dir, TWO, NULL);
  pid_t run;
  json_t *ready = start_run(fx, cfg, "run", &run);
  char *dcfg = client_config(fx->dir, ready, "data", TWO, DATA);
  pc_zk_t *zk = must_zk(fx->dir, SYSTEM_ID);
  pc_error_t err;
  char *before = NULL, *after = NULL;
  assert_int_equal(pc_zk_get(zk, "tablets/a/owner", NULL, &before, NULL, NULL, 5000, &err),
                   PC_OK);
  assert_int_equal(pc_zk_delete(zk, "tablets/a/owner", -1, 5000, &err), PC_OK);
  uint64_t end = pc_now_mono_ms() + 30000;
  pc_status_t st;
  do {
    pc_sleep_ms(50);
    st = pc_zk_get(zk, "tablets/a/owner", NULL, &after, NULL, NULL, 5000, &err);
  } while (st == PC_NOT_FOUND && pc_now_mono_ms() < end);
  if (st != PC_OK) fail_msg("the owner node was not made again: %s", err.text);
  assert_string_equal(after, before);
  /* a client that starts now finds the tablet's server */
  pc_db_t *db = open_db(dcfg);
  assert_int_equal(put(db, "t", "k1", "v", &err), PC_OK);
  pc_db_close(db);
  free(before);
  free(after);
  pc_zk_close(zk);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(dcfg);
  free(cfg);
}

/* ---- a squatted root ----------------------------------------------------------------- */

/* Runs ZooKeeper's CLI on the cluster's ensemble with the commands in cmds
 * (one a line); returns its exit status. */
static int zkcli(const char *dir, const char *cmds) {
  char path[4200], cmd[8400];
  snprintf(path, sizeof path, "%s/zkcli.in", dir);
  tu_write_text(path, cmds);
  snprintf(cmd, sizeof cmd, "timeout 60 %s -server %s <'%s' >'%s/zkcli.out' 2>&1", ZKCLI,
           tu_zk_shared(), path, dir);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_squatted_root(void **state) {
  fixture_t *fx = *state;
  NEED_CLI(fx);
  if (access(ZKCLI, X_OK) != 0) skip();
  /* before the cluster ever ran, a process that reached the ensemble made
   * its root and a safe point, open to everybody */
  pc_zk_t *zk = must_zk(fx->dir, STRANGER);
  pc_error_t err;
  assert_int_equal(pc_zk_ensure(zk, "gc", 5000, &err), PC_OK);
  assert_int_equal(pc_zk_create(zk, "gc/safe_point", "1", 1, 0, NULL, 0, 5000, &err), PC_OK);
  pc_zk_close(zk);
  char *cfg = cluster_config(fx->dir, TWO, NULL);
  int status = 0;
  char *out = run_refused(fx, cfg, "squatted", &status);
  fprintf(stderr, "on a squatted root (exit %d):\n%s", status, out);
  assert_int_not_equal(status, 0);
  if (!strstr(out, "setAcl ")) fail_msg("no command that fixes the root in: %s", out);
  /* the command, as printed, then the nodes under the root */
  char cmds[8192] = "", root[300];
  root_of(fx->dir, root, sizeof root);
  const char *p = strstr(out, "setAcl ");
  size_t used = 0;
  const char *q = strstr(p, "\n");
  const char *stop = strstr(p, " (then");
  size_t len = stop && (!q || stop < q) ? (size_t)(stop - p) : q ? (size_t)(q - p) : strlen(p);
  used += (size_t)snprintf(cmds + used, sizeof cmds - used, "%.*s\n", (int)len, p);
  free(out);
  assert_int_equal(zkcli(fx->dir, cmds), 0);
  out = run_refused(fx, cfg, "squatted2", &status);
  fprintf(stderr, "with the root set right (exit %d):\n%s", status, out);
  assert_int_not_equal(status, 0);
  /* every node it names, with the command for each */
  used = 0;
  cmds[0] = '\0';
  int count = 0;
  for (const char *l = out; (l = strstr(l, "  setAcl ")); l++) {
    const char *e = strchr(l, '\n');
    used += (size_t)snprintf(cmds + used, sizeof cmds - used, "%.*s\n",
                             (int)((e ? e : l + strlen(l)) - (l + 2)), l + 2);
    count++;
  }
  free(out);
  assert_true(count >= 2); /* gc and gc/safe_point */
  fprintf(stderr, "running:\n%s", cmds);
  assert_int_equal(zkcli(fx->dir, cmds), 0);
  /* now it is the cluster's: it starts (what the squatter wrote is checked
   * on read like anything else) */
  pid_t run;
  json_t *ready = start_run(fx, cfg, "run", &run);
  char *dcfg = client_config(fx->dir, ready, "data", TWO, DATA);
  pc_db_t *db = open_db(dcfg);
  assert_int_equal(put(db, "t", "k1", "v", &err), PC_OK);
  pc_db_close(db);
  tu_daemons_stop(fx, run);
  json_decref(ready);
  free(dcfg);
  free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_table, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bound_far_ahead, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fake_servers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_future_timestamps, setup, teardown),
      cmocka_unit_test_setup_teardown(test_system_locks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pinned_reports, setup, teardown),
      cmocka_unit_test_setup_teardown(test_owner_recreated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_squatted_root, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
