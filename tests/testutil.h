/* testutil.h — helpers shared by the test programs: temporary directories
 * that are removed afterwards, and opening a fresh database in one. */
#ifndef PC_TESTS_TESTUTIL_H
#define PC_TESTS_TESTUTIL_H

#include <percolator/percolator.h>

/* Creates a fresh directory under $TMPDIR (or /tmp); returns a malloc'd path.
 * With PERCOLATOR_TEST_CLUSTER=/path/to/percolator set, also starts a cluster
 * of real daemons for it (an oracle and a standby elected in ZooKeeper, and
 * three tablets, each a process on 127.0.0.1 with an ephemeral port; one
 * private ZooKeeper server serves every directory of the program) that
 * tu_open connects to and tu_rmtree stops. Aborts the test program on
 * failure. */
char *tu_mkdtemp(const char *tag);

/* Stops path's cluster (if any), removes path recursively and frees it. */
void tu_rmtree(char *path);

/* An oracle for stores and tablets driven without one (pc_ts_source_fn):
 * each call returns the next of one process-wide counter, from 1,000,001. */
pc_status_t tu_ts_next(void *ctx, uint64_t *ts, pc_error_t *err);
/* The last timestamp tu_ts_next returned (1,000,000 before the first). */
uint64_t tu_ts_last(void);

/* Opens (creating) a database in dir with the given lock TTL (0 = default). Aborts on failure. */
pc_db_t *tu_open(const char *dir, uint32_t lock_ttl_ms);

/* Convenience wrappers over one transaction that abort the program on
 * unexpected errors; tu_get returns a malloc'd NUL-terminated copy or NULL when not found. */
char *tu_get(pc_txn_t *txn, const char *table, const char *row, const char *col);
void tu_set(pc_txn_t *txn, const char *table, const char *row, const char *col, const char *val);

/* Writes text to path (created or truncated); aborts the program on failure. */
void tu_write_text(const char *path, const char *text);

/* The whole of file path as a malloc'd NUL-terminated string (the caller
 * frees it); "" when it cannot be read. */
char *tu_slurp(const char *path);

/* The bank tests' balances: column "v" of row as a decimal number. tu_get_long
 * reads a missing cell as 0; both return the status of the read or write
 * (PC_LOCKED, PC_CONFLICT, ... are the caller's to handle) with err filled. */
pc_status_t tu_get_long(pc_txn_t *t, const char *table, const char *row, long *v,
                        pc_error_t *err);
pc_status_t tu_set_long(pc_txn_t *t, const char *table, const char *row, long v,
                        pc_error_t *err);

/* ---- helpers added for the protocol, crash and isolation tests ---------- */

/* Opens (creating) a database in dir with the given lock TTL (0 = default),
 * one-phase commit on or off and the default timeout. Aborts on failure. */
pc_db_t *tu_open_ex(const char *dir, uint32_t lock_ttl_ms, int one_phase_commit);

/* Counts the internal cells of kind in table (NULL: every table) through
 * pc_db_raw_scan. Aborts on failure. */
size_t tu_raw_count(pc_db_t *db, const char *table, pc_cell_kind_t kind);

/* Writes val into each (table, row, col) of rows[0..n) in one transaction and
 * commits it. Aborts on failure. */
void tu_put_rows(pc_db_t *db, const char *table, const char *const *rows, size_t n,
                 const char *col, const char *val);

/* A session id that the liveness check of dir's database reports dead: in
 * cluster mode a ZooKeeper session opened and closed for the purpose. */
uint64_t tu_dead_session(const char *dir);

/* 1 when the tests run against a cluster (PERCOLATOR_TEST_CLUSTER). */
int tu_cluster_mode(void);

/* The ZooKeeper server of this program's clusters ("host:port"), started
 * on the first call if no cluster started it yet. */
const char *tu_zk_shared(void);

/* Which oracle of dir's cluster leads (0 or 1, its tu_cluster_pid index),
 * as clients find it in ZooKeeper; waits (bounded) for a leader. */
int tu_cluster_tso_leader(const char *dir);

/* The pid of daemon index of dir's cluster (0 the first oracle, 1 the
 * standby oracle, 2..4 tablets t1..t3), or -1. */
#include <sys/types.h>
pid_t tu_cluster_pid(const char *dir, int index);

/* Like tu_mkdtemp, but always with a cluster run by the percolator binary cli
 * (for tests of cluster behaviour itself). dir/cluster.json is the client
 * configuration (every daemon's real port). */
char *tu_cluster_mkdtemp(const char *tag, const char *cli);

/* tu_cluster_mkdtemp whose configurations give every daemon and client a
 * ZooKeeper session of session_ms (0: the usual 4 s; the test server
 * allows 1..30 s), so that a killed daemon's nodes outlive what a test
 * checks meanwhile. */
char *tu_cluster_mkdtemp_session(const char *tag, const char *cli, uint32_t session_ms);

/* A client of dir's cluster (as tu_open in cluster mode). */
pc_db_t *tu_cluster_open(const char *dir, uint32_t lock_ttl_ms);

/* Starts daemon index again (after the test killed it) on the same port and
 * data, waiting until it listens, and records its new pid. */
void tu_cluster_restart(const char *dir, int index);
/* The same, but a tablet (index 2..4) listens on a new ephemeral port,
 * which dir/cluster.json does not name: clients find it through ZooKeeper.
 * Returns its port. */
int tu_cluster_restart_moved(const char *dir, int index);

/* Makes the certificates of tests/certs.sh in dir (a CA, one certificate
 * per name of the space-separated names, each also signed by a rogue CA),
 * at run time. Aborts on failure. */
void tu_make_certs(const char *dir, const char *names);

#endif
