/* zk.h — the cluster's coordination client: a ZooKeeper session (the
 * official multi-threaded C client, libzookeeper_mt) with every blocking call
 * bounded by a timeout, paths relative to the cluster's root node, the one
 * fenced write the oracle needs (check a node, set another at an expected
 * version, atomically), and who the session is to ZooKeeper.
 *
 * Everything a cluster coordinates lives under its root ("zookeeper.root" of
 * the configuration, e.g. /percolator/NAME); callers name nodes relative to
 * it ("tso/bound"). The layout is in docs/ARCHITECTURE.md ("Coordination").
 *
 * Identities (ZooKeeper's digest scheme; docs/SECURITY.md has the table):
 *   - no secret: the session authenticates as nobody and the nodes it makes
 *     are open to every client of the ensemble;
 *   - zookeeper.secret alone: the session is "percolator"; the nodes it makes
 *     admit that identity only. Every process of a cluster with one secret
 *     holds it: they are all one identity;
 *   - zookeeper.secret and zookeeper.system_secret: the session is both
 *     "percolator" (the data clients' identity) and "percolator-system" (the
 *     system's: oracles, tablet servers, workers, the collector), and the
 *     nodes it makes let the system do everything and a data client only
 *     read, except the folder where data clients make their own nodes
 *     (PC_ZK_OPEN_TO_CLIENTS). A data client of such a cluster holds
 *     zookeeper.secret alone, and makes its own node readable and writable
 *     by its identity (PC_ZK_OWN), never deletable but by its session's end.
 * Which of the two a cluster with a secret uses, its root says: pc_zk_open
 * reads the root's ACL and refuses a root whose ACL is not the one this
 * session's identity makes (a root made by another process first: squatted,
 * or made before the cluster had its secrets), naming the command that sets
 * it right.
 *
 * Statuses: PC_NOT_FOUND (no such node), PC_BUSY (the node exists already),
 * PC_CONFLICT (a version or a multi-op's check failed: a fenced write lost),
 * PC_TIMEOUT (no answer within the caller's timeout; the request may still be
 * applied later), PC_UNAVAILABLE (connection lost, session expired, handle
 * closing; the request may or may not have been applied), PC_DENIED (the
 * node's ACL does not admit this session: another zookeeper.secret, none,
 * or a node only the system may change), PC_INVALID.
 *
 * Watches: a pc_zk_watch_t is owned by the caller and must outlive the handle
 * (its function may be called until pc_zk_close returns). Its function runs
 * on the client's completion thread: it must not block and must not call a
 * blocking pc_zk_* function; it should only note that something changed. It
 * is also called (with PC_ZK_EV_SESSION) when the session's state changes.
 *
 * A process that forks after pc_zk_open must exec before using ZooKeeper in
 * the child: the handle's threads do not survive fork. */
#ifndef PC_LOCKSERVICE_ZK_H
#define PC_LOCKSERVICE_ZK_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

typedef struct pc_zk pc_zk_t;

typedef enum pc_zk_state {
  PC_ZK_CONNECTING = 0, /* no server answers at the moment; the session may still live */
  PC_ZK_CONNECTED = 1,
  PC_ZK_EXPIRED = 2 /* the session is gone for good: open a new handle */
} pc_zk_state_t;

enum { PC_ZK_EV_CREATED = 1, PC_ZK_EV_DELETED, PC_ZK_EV_CHANGED, PC_ZK_EV_CHILD, PC_ZK_EV_SESSION };

/* Node flags for pc_zk_create. The last two choose the node's ACL, which
 * only matters with two identities (see above): PC_ZK_OPEN_TO_CLIENTS, data
 * clients may make nodes in it; PC_ZK_OWN, a data client's own node (made by
 * a system session, it is a topology node like any other). */
enum { PC_ZK_EPHEMERAL = 1, PC_ZK_SEQUENCE = 2, PC_ZK_OPEN_TO_CLIENTS = 4, PC_ZK_OWN = 8 };

/* Who a session is (its configuration's secrets). */
typedef enum pc_zk_identity {
  PC_ZK_ANONYMOUS = 0, /* no secret */
  PC_ZK_SHARED = 1,    /* zookeeper.secret alone: a data client, or every process of a
                          cluster with one secret */
  PC_ZK_SYSTEM = 2     /* zookeeper.secret and zookeeper.system_secret */
} pc_zk_identity_t;

/* What a read says of a node beside its data. */
typedef struct pc_zk_stat {
  int32_t version;
  uint64_t ephemeral_owner; /* the session of an ephemeral node; 0 for a persistent one */
} pc_zk_stat_t;

typedef struct pc_zk_watch {
  void (*fn)(void *ctx, int event, const char *path); /* path: absolute, or NULL */
  void *ctx;
} pc_zk_watch_t;

/* Where a cluster coordinates: the "zookeeper" section of its configuration.
 * The strings are the caller's; pc_zk_open and pc_coord_open copy them. */
typedef struct pc_zk_options {
  const char *connect; /* the ensemble, "host:port,host:port,..." */
  const char *root;    /* the cluster's root node, "/percolator/NAME" */
  /* NULL: no authentication, and the nodes made are open to every client of
   * the ensemble. Else the session authenticates as "percolator" with this
   * password (ZooKeeper's digest scheme), and the root and every node under
   * it are made with an ACL that admits that identity only (or, with
   * system_secret, the ACLs of the two identities above); the parents of
   * the root, which other clusters share, let everybody read them and
   * create children, and nobody else delete them. */
  const char *secret;
  uint32_t session_timeout_ms; /* asked of the ensemble */
  /* NULL: the session is not the system of a cluster with two identities.
   * Else (with secret, and another value) it also authenticates as
   * "percolator-system" with this password. */
  const char *system_secret;
} pc_zk_options_t;

/* Opens a session on the ensemble o->connect asking for
 * o->session_timeout_ms, authenticates with o->secret (and
 * o->system_secret) when set, waits until it is connected (at most
 * timeout_ms: PC_UNAVAILABLE naming the ensemble otherwise), creates the
 * root node and its parents if missing, and with a secret checks the root's
 * ACL (PC_DENIED naming the root, the ACL it has, the one it should have
 * and the command that sets it, when it is not this cluster's). session
 * (may be NULL) is told of session state changes. Returns NULL on error;
 * release with pc_zk_close. A node whose ACL does not admit this session
 * answers PC_DENIED. */
pc_zk_t *pc_zk_open(const pc_zk_options_t *o, uint32_t timeout_ms, pc_zk_watch_t *session,
                    pc_error_t *err);
/* Closes the session (its ephemeral nodes go at once) and frees the handle. */
void pc_zk_close(pc_zk_t *zk);

pc_zk_state_t pc_zk_state(pc_zk_t *zk);
/* Who this session is, and whether its cluster has two identities (its
 * root's ACL says so; always 0 without a secret). */
pc_zk_identity_t pc_zk_identity(pc_zk_t *zk);
int pc_zk_two_identities(pc_zk_t *zk);
/* The ensemble, as configured. */
const char *pc_zk_connect(pc_zk_t *zk);
/* The session id (0 before the first connection). */
uint64_t pc_zk_session_id(pc_zk_t *zk);
/* For tests: ends zk's session as ZooKeeper does when a client falls silent
 * past its timeout (a second handle attaches to the session and closes it),
 * so that zk sees it expire at its next contact. PC_OK once the server
 * says the session is gone. */
pc_status_t pc_zk_expire_for_test(pc_zk_t *zk, uint32_t timeout_ms, pc_error_t *err);
/* The session timeout the server granted (the one asked before it answers). */
uint32_t pc_zk_session_timeout(pc_zk_t *zk);
/* The monotonic time (pc_now_mono_ms) at which the latest request that a
 * server answered was sent: the server heard from this session no earlier,
 * so the session lives at least until then plus the session timeout. */
uint64_t pc_zk_last_answer_ms(pc_zk_t *zk);
/* The root as configured, and "root/rel" in buf (cap bytes; "" when too long). */
const char *pc_zk_root(pc_zk_t *zk);
const char *pc_zk_path(pc_zk_t *zk, const char *rel, char *buf, size_t cap);
/* Sessions expired and connections lost since open, and whether it is
 * connected now, for /metrics. */
void pc_zk_counters(pc_zk_t *zk, uint64_t *connects, uint64_t *disconnects);

/* Creates node rel with data (flags: PC_ZK_EPHEMERAL, PC_ZK_SEQUENCE, and
 * the ACL's PC_ZK_OPEN_TO_CLIENTS or PC_ZK_OWN; the parent must exist).
 * created (may be NULL) receives the node's name relative to the root (with
 * its sequence number), cap bytes. */
pc_status_t pc_zk_create(pc_zk_t *zk, const char *rel, const void *data, size_t len, int flags,
                         char *created, size_t cap, uint32_t timeout_ms, pc_error_t *err);
/* Creates rel and its missing parents as persistent empty nodes (an existing
 * node is fine, even under a parent where this session may not make one).
 * pc_zk_ensure_as gives rel itself the ACL of flags (PC_ZK_OPEN_TO_CLIENTS). */
pc_status_t pc_zk_ensure(pc_zk_t *zk, const char *rel, uint32_t timeout_ms, pc_error_t *err);
pc_status_t pc_zk_ensure_as(pc_zk_t *zk, const char *rel, int flags, uint32_t timeout_ms,
                            pc_error_t *err);
/* Reads node rel: *data (malloc'd, NUL-terminated beyond *len; free with
 * free()) and *version (may be NULL). watch (may be NULL) fires once on its
 * next change or deletion. */
pc_status_t pc_zk_get(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, char **data,
                      size_t *len, int32_t *version, uint32_t timeout_ms, pc_error_t *err);
/* pc_zk_get with the node's stat (may be NULL). */
pc_status_t pc_zk_read(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, char **data,
                       size_t *len, pc_zk_stat_t *stat, uint32_t timeout_ms, pc_error_t *err);
/* Sets node rel if its version is `version` (-1: any); *new_version (may be NULL). */
pc_status_t pc_zk_set(pc_zk_t *zk, const char *rel, const void *data, size_t len,
                      int32_t version, int32_t *new_version, uint32_t timeout_ms,
                      pc_error_t *err);
pc_status_t pc_zk_delete(pc_zk_t *zk, const char *rel, int32_t version, uint32_t timeout_ms,
                         pc_error_t *err);
/* *exists = whether rel exists; watch (may be NULL) fires once on its
 * creation, change or deletion. */
pc_status_t pc_zk_exists(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, int *exists,
                         uint32_t timeout_ms, pc_error_t *err);
/* The children of rel, sorted bytewise: *names (free with pc_zk_free_names),
 * *n. watch (may be NULL) fires once when the set of children changes. */
pc_status_t pc_zk_children(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, char ***names,
                           size_t *n, uint32_t timeout_ms, pc_error_t *err);
void pc_zk_free_names(char **names, size_t n);
/* The fenced write: one multi-operation {check(check_rel exists), set(rel,
 * data, version)}: PC_CONFLICT when check_rel is gone or rel's version is
 * not `version` (nothing is written). *new_version (may be NULL). */
pc_status_t pc_zk_check_set(pc_zk_t *zk, const char *check_rel, const char *rel,
                            const void *data, size_t len, int32_t version, int32_t *new_version,
                            uint32_t timeout_ms, pc_error_t *err);
/* Node rel's ACL as ZooKeeper's CLI writes it ("scheme:id:perms,..." with
 * perms in "cdrwa" order, entries sorted) into out (cap bytes). */
pc_status_t pc_zk_get_acl(pc_zk_t *zk, const char *rel, char *out, size_t cap,
                          uint32_t timeout_ms, pc_error_t *err);
/* The ACL, in the same form, that a node made with flags (pc_zk_create's)
 * has in this session's cluster, as ZooKeeper shows it to this session
 * (to a data client of a cluster with two identities, without the
 * digests: "x"). "" without a secret (every node is open). */
void pc_zk_acl_expected(pc_zk_t *zk, int flags, char *out, size_t cap);
/* Whether pc_zk_acl_expected is an ACL this session can name to set (not
 * the masked one of a data client of a cluster with two identities). */
int pc_zk_acl_fixable(pc_zk_t *zk);
/* Brings the server this session talks to up to date with the leader, so a
 * read after it sees every write that completed before it. */
pc_status_t pc_zk_sync(pc_zk_t *zk, const char *rel, uint32_t timeout_ms, pc_error_t *err);

#endif
