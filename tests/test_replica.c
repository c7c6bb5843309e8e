/* test_replica.c — replicated tablets below the daemons (replica/): three
 * replication hosts in this process, each with its own rpc server on an
 * ephemeral port of 127.0.0.1, hold the replicas of one tablet. The
 * transaction protocol's row operations go to the store of the replica that
 * leads (replica.h's pc_replica_store); the tests check what Raft must give
 * the store:
 *   - writes are refused where the replica does not lead, naming the leader,
 *     and reads where it has no lease;
 *   - every replica applies the same commands, so the leadership moved to
 *     another replica reads what the first acknowledged;
 *   - the leader's host stopped, the other two elect a leader and lose
 *     nothing acknowledged; alone, a replica serves nothing;
 *   - a host restarted on an empty directory rejoins under a new incarnation,
 *     catches up from a snapshot streamed by a peer (snapshots are taken
 *     every few entries here), and then holds every value;
 *   - a rejoin that ran out of time with its replica added as a standby
 *     (the replica could not be reached) is finished by asking again, as
 *     its message says, and as a server does through the next leader when
 *     the leadership moved meanwhile;
 *   - every host starts again after its replica's last snapshot fell on an
 *     entry that is no command (a new leader's barrier);
 *   - a replica rebuilt from empty catches up through a log that holds
 *     more than one message could (80 MB since the last snapshot);
 *   - an InstallSnapshot lost on its way to the one follower the leader's
 *     majority needs is sent again: the follower installs it and a write
 *     commits (the follower answers the leader's heartbeats meanwhile, so
 *     the leader does not step down: it must not wait long to resend). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "core/failpoint.h"
#include "core/store.h"
#include "net/rpc.h"
#include "replica/repl_wire.h"
#include "replica/replica.h"
#include "tests/testutil.h"

#define N 3
#define GROUP "t1"

typedef struct server {
  pthread_rwlock_t lk; /* the handler reads host under it; stop() changes it */
  char name[8];
  char dir[4200];
  pc_rpc_server_t *rpc;
  uint16_t port;
  pc_repl_host_t *host;
  _Atomic(pc_replica_t *) rep; /* on_create sets it from the host's thread */
} server_t;

static server_t servers[N];
static char *root;
/* entries applied between two snapshots of a replica (hosts started from now on) */
static uint32_t snapshot_entries = 16;
/* a server whose port refuses Raft's messages (as if it could not be reached) */
static _Atomic int deaf[N];

static pc_status_t resolve(void *ctx, const char *server, char *endpoint, size_t cap,
                           pc_error_t *err) {
  (void)ctx;
  for (int i = 0; i < N; i++)
    if (strcmp(servers[i].name, server) == 0 && servers[i].port) {
      snprintf(endpoint, cap, "127.0.0.1:%u", (unsigned)servers[i].port);
      return PC_OK;
    }
  return pc_error_set(err, PC_UNAVAILABLE, "server %s is not running", server);
}

static pc_status_t handler(void *ctx, uint8_t op, const char *body, size_t len, pc_buf_t *reply,
                           pc_error_t *err) {
  server_t *s = ctx;
  if (op == PC_REPL_OP_RAFT && s >= servers && s < servers + N && atomic_load(&deaf[s - servers]))
    return pc_error_set(err, PC_UNAVAILABLE, "unreachable");
  pthread_rwlock_rdlock(&s->lk);
  pc_status_t st = s->host ? pc_repl_rpc_handler(s->host, op, body, len, reply, err)
                           : pc_error_set(err, PC_UNAVAILABLE, "not started");
  pthread_rwlock_unlock(&s->lk);
  return st;
}

static pc_status_t on_create(void *ctx, const char *group, pc_replica_t **out, pc_error_t *err) {
  server_t *s = ctx;
  pc_status_t st = pc_repl_host_replica(s->host, group, PC_REPLICA_JOIN, NULL, 0, out, err);
  if (st == PC_OK) s->rep = *out;
  return st;
}

/* Starts server i: its rpc port (kept across restarts) and its host, which
 * bootstraps the group on a first start and joins it on an empty directory
 * after that (fresh_incarnation says which). */
static void listen_on(int i) {
  server_t *s = &servers[i];
  pc_error_t err;
  pc_rpc_server_options_t o = {0};
  o.name = s->name;
  s->rpc = pc_rpc_server_start(&o, handler, s, &err);
  assert_non_null(s->rpc);
  s->port = pc_rpc_server_port(s->rpc);
}

static void start(int i, int first) {
  server_t *s = &servers[i];
  pc_error_t err;
  pc_repl_options_t ro = {0};
  ro.server = s->name;
  ro.dir = s->dir;
  ro.election_timeout_ms = 1000; /* the product's defaults: a loaded machine keeps a leader */
  ro.heartbeat_ms = 100;
  ro.snapshot_entries = snapshot_entries;
  ro.snapshot_trailing = 4;
  ro.resolve = resolve;
  ro.on_create = on_create;
  ro.on_create_ctx = s;
  ro.store.create_if_missing = 1;
  ro.fresh_incarnation = first ? 0 : (uint64_t)(1000 + i) + pc_now_mono_ms();
  int fresh = 0;
  pc_repl_host_t *h = pc_repl_host_open(&ro, &fresh, &err);
  assert_non_null(h);
  pthread_rwlock_wrlock(&s->lk);
  s->host = h;
  pthread_rwlock_unlock(&s->lk);
  const char *voters[N];
  for (int k = 0; k < N; k++) voters[k] = servers[k].name;
  pc_replica_start_t how = first ? PC_REPLICA_BOOTSTRAP : PC_REPLICA_JOIN;
  if (!fresh) how = PC_REPLICA_EXISTING;
  pc_replica_t *rep = NULL;
  pc_status_t st = pc_repl_host_replica(s->host, GROUP, how, voters, N, &rep, &err);
  pthread_rwlock_wrlock(&s->lk);
  if (rep) s->rep = rep;
  pthread_rwlock_unlock(&s->lk);
  if (st != PC_OK) fail_msg("%s", err.text);
}

static void stop(int i) {
  server_t *s = &servers[i];
  pthread_rwlock_wrlock(&s->lk); /* no request reaches the host while it closes */
  pc_repl_host_close(s->host);
  s->host = NULL;
  s->rep = NULL;
  pthread_rwlock_unlock(&s->lk);
}

/* The index of the server whose replica leads, waiting up to 20 s. */
static int leader(void) {
  for (int tries = 0; tries < 400; tries++) {
    for (int i = 0; i < N; i++)
      if (servers[i].host && servers[i].rep && pc_replica_wait_leader(servers[i].rep, 0))
        return i;
    pc_sleep_ms(50);
  }
  fail_msg("no leader elected");
  return -1;
}

static pc_cell_t cell(const char *row) {
  return (pc_cell_t){"t", row, strlen(row), "c:", 2};
}

/* One-phase commit of row = value on the leader's store; retried while the
 * leadership moves: on a replica that does not lead (PC_UNAVAILABLE) and on
 * one that lost the leadership while the write was being replicated
 * (PC_TIMEOUT: it may or may not have been applied, and writing the same
 * value again leaves the row as asked either way). */
static pc_status_t put_at(int i, const char *row, const char *value) {
  pc_error_t err;
  pc_store_t *st = pc_replica_store(servers[i].rep);
  pc_mutation_t m = {cell(row), PC_WRITE_PUT, value, strlen(value), 0};
  uint64_t commit = 0;
  pc_lock_info_t lock;
  uint64_t start = 0; /* above every earlier commit: asked again, no conflict with itself */
  if (tu_ts_next(NULL, &start, &err) != PC_OK) return err.code;
  return st->ops->commit_one_phase(st, &m, 1, start, tu_ts_next, NULL, NULL, &commit, &lock,
                                   &err);
}

static pc_status_t put(int *lead, const char *row, const char *value) {
  for (int tries = 0; tries < 100; tries++) {
    pc_status_t rc = put_at(*lead, row, value);
    if (rc != PC_UNAVAILABLE && rc != PC_TIMEOUT) return rc;
    *lead = leader();
  }
  return PC_UNAVAILABLE;
}

/* A read of row on server i's replica; one that leads is given up to a
 * second for its lease (its first acknowledgements), as a client would
 * retry. */
static char *get(int i, const char *row, pc_status_t *rc) {
  pc_store_t *st = pc_replica_store(servers[i].rep);
  pc_cell_t c = cell(row);
  char *v = NULL;
  size_t vl = 0;
  pc_lock_info_t lock;
  pc_error_t err;
  uint64_t now = 0;
  for (int tries = 0; tries < 50; tries++) {
    tu_ts_next(NULL, &now, &err);
    *rc = st->ops->get(st, &c, now, &v, &vl, &lock, &err);
    if (*rc != PC_UNAVAILABLE || !strstr(err.text, "lease")) break;
    pc_sleep_ms(20);
  }
  if (*rc != PC_OK) return NULL;
  char *z = malloc(vl + 1); /* a value is bytes: a string for the comparisons here */
  memcpy(z, v, vl);
  z[vl] = '\0';
  pc_free(v);
  return z;
}

/* A read of row on whichever replica leads, followed while the leadership
 * moves or a new leader waits for its lease (a loaded machine delays the
 * acknowledgements that grant it): *lead ends as the replica read. */
static char *get_lead(int *lead, const char *row, pc_status_t *rc) {
  char *v = NULL;
  for (int tries = 0; tries < 100; tries++) {
    *lead = leader();
    v = get(*lead, row, rc);
    if (*rc != PC_UNAVAILABLE) break;
    pc_sleep_ms(200);
  }
  return v;
}

/* Rows "<rp>000".."<rp><n-1>" written with the values "<vp>0".., through
 * the leader (followed as it moves). */
static void put_rows(int *lead, char rp, char vp, int n) {
  char row[16], val[16];
  for (int k = 0; k < n; k++) {
    snprintf(row, sizeof row, "%c%03d", rp, k);
    snprintf(val, sizeof val, "%c%d", vp, k);
    assert_int_equal(put(lead, row, val), PC_OK);
  }
}

/* The leading replica holds what put_rows(rp, vp, n) wrote. */
static void check_rows(int *lead, char rp, char vp, int n) {
  char row[16], val[16];
  for (int k = 0; k < n; k++) {
    snprintf(row, sizeof row, "%c%03d", rp, k);
    snprintf(val, sizeof val, "%c%d", vp, k);
    pc_status_t rc;
    char *v = get_lead(lead, row, &rc);
    assert_int_equal(rc, PC_OK);
    assert_string_equal(v, val);
    free(v);
  }
}

/* Server i started again on the empty directory it was left with: its new
 * replica's id, its address into addr. */
static uint64_t start_empty(int i, char *addr, size_t cap) {
  start(i, 0);
  pc_replica_info_t *info = malloc(sizeof *info);
  pc_replica_info(servers[i].rep, info);
  snprintf(addr, cap, "%s", info->address);
  free(info);
  return pc_replica_id(servers[i].rep);
}

/* Asks the leader to take server lost's new replica (id at addr) back, up
 * to ms each time, again on whichever replica leads while the leadership
 * moves (PC_UNAVAILABLE); *lead ends as the last one asked. */
static pc_status_t rejoin(int *lead, int lost, uint64_t id, const char *addr, uint32_t ms,
                          pc_error_t *err) {
  pc_buf_t text = {0};
  pc_status_t rc = PC_UNAVAILABLE;
  for (int attempt = 0; attempt < 10 && rc == PC_UNAVAILABLE; attempt++) {
    *lead = leader();
    rc = pc_replica_member(servers[*lead].host, GROUP, PC_MEMBER_REJOIN, servers[lost].name, id,
                           addr, ms, &text, err);
  }
  pc_buf_free(&text);
  return rc;
}

/* Whether server lead's configuration has the replica id as a voter. */
static int is_voter(int lead, uint64_t id) {
  pc_replica_info_t *info = malloc(sizeof *info);
  pc_replica_info(servers[lead].rep, info);
  int voter = 0;
  for (uint32_t k = 0; k < info->n; k++)
    if (info->members[k].id == id) voter = info->members[k].role == 1;
  free(info);
  return voter;
}

static int setup(void **state) {
  (void)state;
  root = tu_mkdtemp("replica");
  for (int i = 0; i < N; i++) {
    pthread_rwlock_init(&servers[i].lk, NULL);
    snprintf(servers[i].name, sizeof servers[i].name, "s%d", i + 1);
    snprintf(servers[i].dir, sizeof servers[i].dir, "%.4000s/s%d", root, i + 1);
  }
  for (int i = 0; i < N; i++) listen_on(i); /* every port known before any host resolves one */
  for (int i = 0; i < N; i++) start(i, 1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < N; i++) {
    if (servers[i].host) stop(i);
    if (servers[i].rpc) pc_rpc_server_stop(servers[i].rpc);
    servers[i].rpc = NULL;
  }
  tu_rmtree(root);
  return 0;
}

static void test_replicated_writes(void **state) {
  (void)state;
  int lead = leader();
  /* a follower refuses, naming the leader */
  int follower = (lead + 1) % N;
  pc_status_t rc;
  char *v = get(follower, "a", &rc);
  assert_null(v);
  assert_int_equal(rc, PC_UNAVAILABLE);
  put_rows(&lead, 'r', 'v', 60); /* past a few snapshots */
  v = get_lead(&lead, "r007", &rc);
  assert_int_equal(rc, PC_OK);
  assert_string_equal(v, "v7");
  free(v);
  /* the leadership moves: the new leader applied the same */
  pc_buf_t text = {0};
  pc_error_t err;
  rc = pc_replica_member(servers[lead].host, GROUP, PC_MEMBER_MOVE, servers[follower].name, 0,
                         NULL, 10000, &text, &err);
  pc_buf_free(&text);
  if (rc != PC_OK) fail_msg("%s", err.text);
  lead = leader();
  assert_int_equal(lead, follower);
  check_rows(&lead, 'r', 'v', 60);
}

static void test_leader_stopped(void **state) {
  (void)state;
  int lead = leader();
  assert_int_equal(put(&lead, "before", "1"), PC_OK);
  stop(lead);
  int dead = lead;
  lead = leader();
  assert_int_not_equal(lead, dead);
  pc_status_t rc;
  char *v = get_lead(&lead, "before", &rc);
  assert_int_equal(rc, PC_OK);
  assert_string_equal(v, "1");
  free(v);
  assert_int_equal(put(&lead, "after", "2"), PC_OK);
  /* one replica alone: no leader, no reads */
  int other = 3 - lead - dead;
  stop(lead);
  pc_sleep_ms(1500);
  assert_false(pc_replica_wait_leader(servers[other].rep, 0));
  v = get(other, "before", &rc);
  assert_null(v);
  assert_int_equal(rc, PC_UNAVAILABLE);
  /* both back: nothing acknowledged is lost */
  start(dead, 0);
  start(lead, 0);
  lead = leader();
  v = get_lead(&lead, "after", &rc);
  assert_int_equal(rc, PC_OK);
  assert_string_equal(v, "2");
  free(v);
}

static void test_rebuilt_from_empty(void **state) {
  (void)state;
  int lead = leader();
  int lost = (lead + 2) % N;
  stop(lost);
  tu_rmtree(strdup(servers[lost].dir));
  put_rows(&lead, 'e', 'w', 40);
  char addr[256];
  uint64_t id = start_empty(lost, addr, sizeof addr); /* a new incarnation, an empty replica */
  pc_buf_t text = {0};
  pc_error_t err;
  if (rejoin(&lead, lost, id, addr, 30000, &err) != PC_OK) fail_msg("%s", err.text);
  /* the old incarnation is gone from the configuration, the new one votes */
  pc_replica_info_t *info = malloc(sizeof *info);
  pc_replica_info(servers[lead].rep, info);
  assert_int_equal(info->n, N);
  assert_true(is_voter(lead, id));
  pc_replica_info(servers[lost].rep, info);
  assert_true(info->snapshots_received >= 1);
  free(info);
  /* it leads next and reads what it never received as log entries */
  pc_status_t rc = pc_replica_member(servers[lead].host, GROUP, PC_MEMBER_MOVE,
                                     servers[lost].name, 0, NULL, 10000, &text, &err);
  pc_buf_free(&text);
  if (rc != PC_OK) fail_msg("%s", err.text);
  lead = leader();
  assert_int_equal(lead, lost);
  check_rows(&lead, 'e', 'w', 40);
}

/* A rejoin that ran out of time after its replica was added (a standby
 * that cannot catch up while it cannot be reached) is finished by the same
 * request asked again: the configuration then holds the server's old
 * incarnation and its new one, and the new one is found by its id. */
static void test_rejoin_asked_again(void **state) {
  (void)state;
  int lead = leader();
  int lost = (lead + 1) % N;
  stop(lost);
  tu_rmtree(strdup(servers[lost].dir));
  put_rows(&lead, 'j', 'x', 40);
  atomic_store(&deaf[lost], 1);
  char addr[256];
  uint64_t id = start_empty(lost, addr, sizeof addr);
  pc_replica_info_t *info = malloc(sizeof *info);
  pc_buf_t text = {0};
  pc_error_t err;
  /* it cannot catch up while it cannot be reached: the request runs out of
   * time with the new replica added beside the old one (asked again, on
   * whichever replica leads, should the leadership move meanwhile) */
  int added = 0;
  for (int attempt = 0; attempt < 10 && !added; attempt++) {
    lead = leader();
    pc_status_t rc = pc_replica_member(servers[lead].host, GROUP, PC_MEMBER_REJOIN,
                                       servers[lost].name, id, addr, 3000, &text, &err);
    assert_int_not_equal(rc, PC_OK);
    pc_replica_info(servers[lead].rep, info);
    for (uint32_t k = 0; k < info->n; k++) added |= info->members[k].id == id;
  }
  assert_true(added);
  assert_int_equal(info->n, N + 1); /* the old incarnation and the new standby */
  atomic_store(&deaf[lost], 0);
  pc_buf_free(&text);
  if (rejoin(&lead, lost, id, addr, 30000, &err) != PC_OK) fail_msg("asked again: %s", err.text);
  pc_replica_info(servers[lead].rep, info);
  assert_int_equal(info->n, N);
  assert_true(is_voter(lead, id));
  pc_replica_info(servers[lost].rep, info);
  assert_true(info->snapshots_received >= 1);
  free(info);
}

/* libraft hands the state machine only commands: a new leader's barrier
 * and a configuration change advance its applied index, not the store's.
 * A snapshot taken when the last entry applied is one of those stands for
 * a store that holds every command up to it; every replica must start
 * again from it, and a replica rebuilt from it must take it. The
 * leadership moved more times in a row than entries between two snapshots
 * (16 here): each new leader's barrier is the only entry it appends, so
 * each replica's last snapshot is at a barrier. */
static void test_snapshot_at_a_barrier(void **state) {
  (void)state;
  int lead = leader();
  assert_int_equal(put(&lead, "barrier", "1"), PC_OK);
  for (uint32_t k = 0; k < snapshot_entries + 4; k++) {
    int next = (lead + 1) % N;
    pc_buf_t text = {0};
    pc_error_t err;
    pc_status_t rc = pc_replica_member(servers[lead].host, GROUP, PC_MEMBER_MOVE,
                                       servers[next].name, 0, NULL, 10000, &text, &err);
    pc_buf_free(&text);
    if (rc != PC_OK && rc != PC_UNAVAILABLE) fail_msg("move %u: %s", k, err.text);
    lead = leader();
  }
  for (int i = 0; i < N; i++) { /* each from its snapshot at a barrier */
    stop(i);
    start(i, 0);
  }
  lead = leader();
  pc_status_t rc;
  char *v = NULL;
  for (int tries = 0; tries < 50 && !v; tries++) {
    lead = leader();
    v = get(lead, "barrier", &rc);
    if (!v) pc_sleep_ms(100);
  }
  assert_non_null(v);
  assert_string_equal(v, "1");
  free(v);
}

/* The one follower the leader's majority needs (the third server stopped)
 * loses every InstallSnapshot sent to it (a failpoint drops them on
 * arrival, as lost messages or ones libraft ignores while it takes a
 * snapshot of its own). It keeps answering the leader's heartbeats, so the
 * leader keeps leading and commits nothing: it must say so in its log,
 * naming that follower (group.c, watch_commits). Then the messages get
 * through again, and a write commits only once the InstallSnapshot goes
 * again and the follower installs it, within 60 s (group.c,
 * INSTALL_RETRY_TIMEOUTS: 2 s here). */
typedef struct bg_put {
  _Atomic int done, stop;
  int lead; /* the server whose replica committed it */
} bg_put_t;

/* Writes one row through whichever replica leads, trying again while none
 * can (no cmocka call here: a failure is the test thread's to report). */
static void *bg_put_main(void *arg) {
  bg_put_t *b = arg;
  while (!atomic_load(&b->stop)) {
    for (int i = 0; i < N; i++) {
      /* under the server's lock: the test thread may start it meanwhile */
      pthread_rwlock_rdlock(&servers[i].lk);
      int ok = servers[i].host && servers[i].rep && pc_replica_wait_leader(servers[i].rep, 0) &&
               put_at(i, "after", "1") == PC_OK;
      pthread_rwlock_unlock(&servers[i].lk);
      if (ok) {
        b->lead = i;
        atomic_store(&b->done, 1);
        return NULL;
      }
    }
    pc_sleep_ms(50);
  }
  return NULL;
}

static void test_lost_install_snapshot_sent_again(void **state) {
  (void)state;
  pc_error_t err;
  int lead = leader();
  int behind = (lead + 1) % N, third = (lead + 2) % N;
  stop(behind);
  put_rows(&lead, 'r', 'v', 60); /* past a few snapshots: behind needs one */
  stop(third);
  /* this process's log (stderr) into a file while it runs, to be read back */
  char path[4300];
  snprintf(path, sizeof path, "%s/stderr.log", root);
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  /* every InstallSnapshot that reaches behind is lost */
  assert_int_equal(pc_failpoints_configure("replica.recv_install_snapshot=return", &err), PC_OK);
  start(behind, 0); /* on its directory: the replica it had */
  bg_put_t b = {0, 0, -1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, bg_put_main, &b), 0);
  char want[32], *line = NULL;
  snprintf(want, sizeof want, "%s#", servers[behind].name);
  for (int w = 0; w < 300 && !line; w++) { /* the leader's warning, within 30 s */
    char *text = tu_slurp(path);
    const char *at = text ? strstr(text, "has not committed for") : NULL;
    const char *eol = at ? strchr(at, '\n') : NULL;
    if (eol && memmem(at, (size_t)(eol - at), want, strlen(want)))
      line = strndup(at, (size_t)(eol - at));
    free(text);
    if (!line) pc_sleep_ms(100);
  }
  int done_early = atomic_load(&b.done);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK); /* they get through again */
  for (int w = 0; w < 600 && !atomic_load(&b.done); w++) pc_sleep_ms(100);
  atomic_store(&b.stop, 1);
  int done = atomic_load(&b.done);
  if (!done) start(third, 0); /* the write in flight commits with it, and the thread ends */
  pthread_join(t, NULL);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  if (!line || done_early)
    fail_msg("the leader never said that its log stopped committing, naming %s (see %s)", want,
             path);
  fprintf(stderr, "the leader said: ...%s\n", line);
  free(line);
  if (!done)
    fail_msg("no write committed 60 s after the InstallSnapshots to the follower the majority "
             "needs got through again");
  lead = b.lead;
  check_rows(&lead, 'r', 'v', 60);
  start(third, 0);
}

/* ThreadSanitizer shadows every byte a large copy touches with fresh pages
 * (a page fault and a TLB shootdown per page), which makes each 2 MiB value
 * cost the hosts more than an election timeout: under it the test writes the
 * same count of 256 KiB values, which runs the same path (a snapshot, then
 * the log after it), and leaves the log's length to the other builds. */
#if defined(__SANITIZE_THREAD__)
#define BIG_VALUE_BYTES (256 << 10)
#else
#define BIG_VALUE_BYTES (2 << 20)
#endif

/* A replica rebuilt from empty is sent the leader's snapshot and then every
 * entry of its log after it, which libraft puts in one AppendEntries: with
 * 80 MB of entries since the last snapshot (no snapshot for a long while),
 * more than a peer's queue or a frame holds. The leader sends them in
 * parts, and the replica catches up. */
static void test_catch_up_through_a_long_log(void **state) {
  (void)state;
  snapshot_entries = 100000;
  for (int i = 0; i < N; i++) { /* the hosts again, snapshotting seldom */
    stop(i);
    start(i, 0);
  }
  int lead = leader();
  enum { VALUES = 40, VALUE_BYTES = BIG_VALUE_BYTES };
  char *big = malloc(VALUE_BYTES + 1);
  assert_non_null(big);
  char row[16];
  int written = 0;
  for (int k = 0; k < VALUES; k++) {
    memset(big, 'a' + k % 26, VALUE_BYTES);
    big[VALUE_BYTES] = '\0';
    snprintf(row, sizeof row, "big%03d", k);
    if (put(&lead, row, big) != PC_OK) break;
    written++;
  }
  free(big);
  assert_int_equal(written, VALUES);
  int lost = (lead + 1) % N;
  stop(lost);
  tu_rmtree(strdup(servers[lost].dir));
  char addr[256];
  uint64_t id = start_empty(lost, addr, sizeof addr);
  pc_error_t err;
  if (rejoin(&lead, lost, id, addr, 60000, &err) != PC_OK)
    fail_msg("the rebuilt replica did not catch up: %s", err.text);
  pc_replica_info_t *info = malloc(sizeof *info);
  /* and it applies what its leader committed */
  pc_replica_info(servers[lead].rep, info);
  uint64_t commit = info->commit;
  for (int polls = 0; polls < 400; polls++) {
    pc_replica_info(servers[lost].rep, info);
    if (info->applied >= commit) break;
    pc_sleep_ms(50);
  }
  assert_true(info->applied >= commit);
  free(info);
}

/* The replication ops need the system identity: with secrets configured, a
 * data client is refused each of them, the system is served. */
static void test_replication_needs_the_system(void **state) {
  (void)state;
  pc_rpc_auth_t server_auth = {"data-secret", "system-secret", NULL};
  pc_rpc_server_options_t o = {0};
  o.name = "s9";
  o.auth = &server_auth;
  pc_error_t err;
  server_t s;
  memset(&s, 0, sizeof s);
  pthread_rwlock_init(&s.lk, NULL);
  s.host = servers[0].host; /* any host answers REPLICAS */
  pc_rpc_server_t *srv = pc_rpc_server_start(&o, handler, &s, &err);
  assert_non_null(srv);
  uint16_t port = pc_rpc_server_port(srv);
  pc_rpc_auth_t data = {"data-secret", NULL, NULL}, system = {NULL, "system-secret", NULL};
  pc_rpc_client_t *dc = pc_rpc_client_create("127.0.0.1", port, &data, &err);
  pc_rpc_client_t *sc = pc_rpc_client_create("127.0.0.1", port, &system, &err);
  pc_buf_t reply = {0};
  static const uint8_t ops[] = {PC_REPL_OP_RAFT, PC_REPL_OP_SNAP_OPEN, PC_REPL_OP_SNAP_NEXT,
                                PC_REPL_OP_REPLICAS, PC_REPL_OP_MEMBER, PC_REPL_OP_CREATE};
  for (size_t i = 0; i < sizeof ops; i++) {
    reply.len = 0;
    assert_int_equal(pc_rpc_call(dc, ops[i], NULL, 0, 5000, &reply, &err), PC_DENIED);
    assert_non_null(strstr(err.text, "system identity"));
  }
  reply.len = 0;
  assert_int_equal(pc_rpc_call(sc, PC_REPL_OP_REPLICAS, NULL, 0, 5000, &reply, &err), PC_OK);
  pc_buf_free(&reply);
  pc_rpc_client_destroy(dc);
  pc_rpc_client_destroy(sc);
  pc_rpc_server_stop(srv);
  pthread_rwlock_destroy(&s.lk);
}

int main(void) {
  const char *level = getenv("PERCOLATOR_TEST_LOG"); /* e.g. "debug", for a look at a failure */
  if (level && pc_log_parse_level(level) >= 0) pc_log_set_level((pc_log_level_t)pc_log_parse_level(level));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replicated_writes),
      cmocka_unit_test(test_leader_stopped),
      cmocka_unit_test(test_rebuilt_from_empty),
      cmocka_unit_test(test_rejoin_asked_again),
      cmocka_unit_test(test_snapshot_at_a_barrier),
      cmocka_unit_test(test_lost_install_snapshot_sent_again),
      cmocka_unit_test(test_catch_up_through_a_long_log),
      cmocka_unit_test(test_replication_needs_the_system),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
