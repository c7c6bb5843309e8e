/* coord.h — a process's ZooKeeper session in a cluster, and what the
 * cluster coordinates through it: the liveness of clients, the oldest
 * snapshot each one holds open, the membership of the notification workers,
 * the garbage collector's safe point and cluster-wide locks. One session
 * per client handle: the oracle's follower (tso/tso_locator.h) borrows it too.
 *
 * Nodes under the cluster's root (docs/ARCHITECTURE.md lays them all out):
 *   clients/<session, 16 hex digits>   ephemeral, one per client handle; data
 *       "<oldest start_ts> <host>:<pid>", the oldest start_ts the client holds
 *       open (18446744073709551615 when none), rewritten when it changes, at
 *       most every third of the session timeout: ZooKeeper's writes follow
 *       time, not transactions.
 *   workers/m-<group>-<seq>   ephemeral, sequential: one per running
 *       notification worker; data "<host>:<pid>". Workers of one group run
 *       the same observers; the buckets of notifications are divided over
 *       the members of each group sorted by name (pc_member_partition).
 *   gc/safe_point     persistent: the garbage collector's safe point, decimal
 *       text; it only rises (pc_coord_publish_safe_point).
 *   locks/<name>      ephemeral: a cluster-wide lock, data the holder's session.
 *   tablets/<name>/range   persistent: the tablet's rows, "<start> <end>" in
 *       hex (an empty end: no bound), written once from the configuration
 *       by whoever first finds it absent; a configuration that disagrees is
 *       refused (pc_coord_tablet_range).
 *   tablets/<name>/owner   ephemeral: the server that holds the tablet,
 *       "<host>:<port> <session, 16 hex digits> <host>:<data directory>"
 *       (pc_coord_tablet_claim); absent while no live server holds it.
 *   system/<session, 16 hex digits>   ephemeral: one per session of the
 *       system identity (zookeeper.system_secret), made before the session
 *       makes anything else; data "<host>:<pid>". What says that an
 *       ephemeral node belongs to the system (pc_coord_system_node).
 *
 * Who may write what (zk.h has the identities): with two identities, the
 * system makes every node above and data clients only read them, but for
 * their own nodes under clients/. A reader checks what it follows all the
 * same: a tablet's owner and an oracle candidate must be ephemeral nodes of
 * system sessions, a client's report an ephemeral node of the session it is
 * named after; and a process refuses to open on a root where a node has an
 * ACL the cluster would not give it (pc_coord_prepare).
 *
 * A lock names its owner's session. A resolver asks pc_coord_liveness: a
 * session in the watched view of clients/ is alive; one missing from it is
 * confirmed (a sync, then a read of its node) before it is declared dead, so
 * a client is judged dead only once ZooKeeper has removed its node, which it
 * does when the session ends: closed, or expired one session timeout after
 * the client was last heard from. ZooKeeper unreachable: PC_LS_UNKNOWN, and
 * resolution falls back to lock leases, as it never needs liveness for
 * safety.
 *
 * A background thread keeps the session (a new one after an expiry, with the
 * client's node and the members' nodes made again: locks written under the
 * old session are then dead owners'), the watched views and the report. No
 * call of this interface waits longer than its timeout. */
#ifndef PC_LOCKSERVICE_COORD_H
#define PC_LOCKSERVICE_COORD_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "lockservice/lockservice.h"
#include "lockservice/zk.h"

typedef struct pc_coord pc_coord_t;

struct pc_config;
/* The "zookeeper" section of cfg as options for pc_coord_open and
 * pc_zk_open (its strings are cfg's). */
pc_zk_options_t pc_config_zk(const struct pc_config *cfg);

/* pc_coord_open's flags. */
enum {
  PC_COORD_CLIENT = 1 /* a client handle: its node clients/<session> says it is alive */
};

/* Opens a session on the ensemble o names (its strings are copied), readied
 * and checked by pc_coord_prepare, with this client's node when flags has
 * PC_COORD_CLIENT (waiting at most timeout_ms: PC_UNAVAILABLE otherwise),
 * then keeps them from a background thread, opening a new session with the
 * same options after an expiry. Returns NULL on error; release with
 * pc_coord_close (the session's nodes go at once). */
pc_coord_t *pc_coord_open(const pc_zk_options_t *o, int flags, uint32_t timeout_ms,
                          pc_error_t *err);
void pc_coord_close(pc_coord_t *c);

/* ---- who owns what (for any node of the layout) ------------------------------- */

/* Readies a new session zk for the cluster: a system session makes the
 * layout's folders (clients/ open to data clients' nodes) and its own node
 * system/<session>; with check (a process that opens), every node under the
 * root must have the ACL this cluster gives it: PC_DENIED otherwise, each
 * such node and the command that fixes it in the log. The children of the
 * folders of ephemeral nodes (clients, workers, locks, system, the
 * election) are not checked here: their readers check them. */
pc_status_t pc_coord_prepare(pc_zk_t *zk, int check, uint32_t timeout_ms, pc_error_t *err);

/* *system = whether session is one of the system's (its node system/<id>
 * is an ephemeral node of that session; any session of a cluster with one
 * identity). */
pc_status_t pc_coord_system_session(pc_zk_t *zk, uint64_t session, uint32_t timeout_ms,
                                    int *system, pc_error_t *err);

/* Reads node rel as pc_zk_read does (watch may be NULL; *data malloc'd,
 * free with free(); len and stat may be NULL), and answers PC_OK only when
 * it is an ephemeral node of a system session: PC_DENIED naming the node
 * and why (persistent, or another session's) otherwise, *data NULL. For
 * nodes whose maker readers follow (a tablet's server, an oracle). */
pc_status_t pc_coord_system_node(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch,
                                 char **data, size_t *len, pc_zk_stat_t *stat,
                                 uint32_t timeout_ms, pc_error_t *err);

/* ---- the session, for other users of it ------------------------------------ */

/* The current session's handle, NULL while there is none (between an expiry
 * and the next session); the handle stays valid until pc_coord_release,
 * which the caller must call either way, after a bounded number of calls. */
pc_zk_t *pc_coord_acquire(pc_coord_t *c);
void pc_coord_release(pc_coord_t *c);
/* The watch to give pc_zk_* calls made on the session: it wakes every
 * listener, as does any change of the session's state or its replacement.
 * fn is called on ZooKeeper's or the coordinator's thread: it must only
 * note that something changed. Returns an id for pc_coord_unlisten, or -1
 * when PC_COORD_MAX_LISTENERS listen already. After pc_coord_unlisten
 * returns, fn is not running and is never called again. */
#define PC_COORD_MAX_LISTENERS 8
pc_zk_watch_t *pc_coord_watch(pc_coord_t *c);
int pc_coord_listen(pc_coord_t *c, void (*fn)(void *ctx), void *ctx);
void pc_coord_unlisten(pc_coord_t *c, int id);
/* The session timeout granted (or asked, before the first session). */
uint32_t pc_coord_session_timeout(pc_coord_t *c);
/* The session's state (pc_zk_state_t; -1 without a session) and how many
 * times a session was replaced after it expired, for /metrics. */
int pc_coord_zk_state(pc_coord_t *c);
uint64_t pc_coord_expiries(pc_coord_t *c);

/* ---- clients -------------------------------------------------------------- */

/* The session that this client's node names, 0 while it has none (between
 * an expiry and the new node, or without PC_COORD_CLIENT). */
uint64_t pc_coord_session(pc_coord_t *c);

/* Whether session's client is alive; ZooKeeper is asked (within
 * timeout_ms) only when the watched view does not list it. */
pc_ls_liveness_t pc_coord_liveness(pc_coord_t *c, uint64_t session, uint32_t timeout_ms);

/* From now on this client's node reports oldest(ctx) (the oldest start_ts it
 * holds open, UINT64_MAX for none). oldest is called from the background
 * thread; it must be thread-safe and fast. ctx must stay valid until the
 * reporter is replaced or the coordinator closed. */
void pc_coord_set_reporter(pc_coord_t *c, uint64_t (*oldest)(void *ctx), void *ctx);

/* The minimum of the live clients' reports (UINT64_MAX: none) and how many
 * live clients have not reported yet, read from ZooKeeper. A node of
 * clients/ that is not an ephemeral node of the session it is named after
 * is no live client's: it is left out (logged). */
pc_status_t pc_coord_oldest(pc_coord_t *c, uint32_t timeout_ms, uint64_t *oldest,
                            size_t *unreported, pc_error_t *err);

/* The live clients as the view last saw them, for /metrics. */
size_t pc_coord_client_count(pc_coord_t *c);

/* One node of clients/ or workers/ as read now (pc_coord_list). */
typedef struct pc_coord_node {
  char name[64]; /* the node's name: a session in hex, or m-<seq> */
  char data[256];
} pc_coord_node_t;

/* Reads the nodes of group ("clients" or "workers") with their data, sorted
 * by name: *out (malloc'd, free with free()), *n. */
pc_status_t pc_coord_list(pc_coord_t *c, const char *group, uint32_t timeout_ms,
                          pc_coord_node_t **out, size_t *n, pc_error_t *err);

/* ---- the workers' membership ------------------------------------------------ */

typedef struct pc_member pc_member_t;

/* Registers a notification worker of group `group` (1..32 letters and
 * digits: workers run the same observers exactly when their groups are
 * equal): the ephemeral sequential node workers/m-<group>-<seq> (made again
 * under a new session after an expiry). The buckets of notifications are
 * divided over the members of its group sorted by name, so that every
 * group, which alone runs its observers, scans every bucket;
 * pc_member_partition says which share this one takes. Returns NULL on error
 * (waiting at most timeout_ms); release with pc_member_leave (its node goes
 * at once). */
pc_member_t *pc_member_join(pc_coord_t *c, const char *group, uint32_t stable_ms,
                            uint32_t timeout_ms, pc_error_t *err);
void pc_member_leave(pc_member_t *m);

/* The share this member works on: index of count (count 0: none yet). It
 * follows the watched membership, but a change is used only once the
 * membership has stayed the same for stable_ms, so that members joining or
 * leaving in a burst move the partition once; meanwhile the previous share
 * is kept. A member's first share is used at once. Never waits on
 * ZooKeeper. Returns 1 when the share changed since the last call. */
int pc_member_partition(pc_member_t *m, uint32_t *index, uint32_t *count);
/* The group of member node `name` ("m-<group>-<seq>") into out; 0 when name
 * is not a member's. */
int pc_member_group(const char *name, char *out, size_t cap);

/* The buckets [*lo, *hi) of share index of count, of nbuckets buckets
 * (count > 0): contiguous ranges, in the members' order. */
void pc_member_buckets(uint32_t index, uint32_t count, uint32_t nbuckets, uint32_t *lo,
                       uint32_t *hi);

/* ---- garbage collection's safe point ---------------------------------------- */

/* The published safe point (0 when none was ever published). */
pc_status_t pc_coord_safe_point(pc_coord_t *c, uint32_t timeout_ms, uint64_t *safe,
                                pc_error_t *err);
/* Raises the published safe point to safe, unless it is higher already
 * (version-checked, so concurrent publishers never lower it). *published
 * (may be NULL) receives the value now published: at least safe. */
pc_status_t pc_coord_publish_safe_point(pc_coord_t *c, uint64_t safe, uint32_t timeout_ms,
                                        uint64_t *published, pc_error_t *err);

/* ---- locks ------------------------------------------------------------------ */

/* Takes lock `name` (letters, digits, '.', '_', '-') for this session: the
 * ephemeral node locks/<name> holding the session. *mine = 1 when this
 * session holds it, 0 when another does. It goes with the session. */
pc_status_t pc_coord_lock(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *mine,
                          pc_error_t *err);
/* Gives up lock `name` if this session holds it (another holder's is left
 * alone; PC_OK when none holds it). */
pc_status_t pc_coord_unlock(pc_coord_t *c, const char *name, uint32_t timeout_ms,
                            pc_error_t *err);

/* ---- the tablet map ---------------------------------------------------------- */

/* Records tablet name's rows [start, end) in tablets/<name>/range when it
 * has none (a data client of a cluster with two identities may not: it
 * leaves that to the tablet's server); when it has, PC_INVALID unless they
 * are the same, naming the tablet and both ranges (a tablet's rows never
 * change under its data). */
pc_status_t pc_coord_tablet_range(pc_coord_t *c, const char *name, const char *start,
                                  size_t start_len, const char *end, size_t end_len,
                                  uint32_t timeout_ms, pc_error_t *err);

/* The same check without writing: PC_OK when ZooKeeper records no rows for
 * tablet name or the same ones, PC_INVALID naming both ranges otherwise. */
pc_status_t pc_coord_tablet_range_check(pc_coord_t *c, const char *name, const char *start,
                                        size_t start_len, const char *end, size_t end_len,
                                        uint32_t timeout_ms, pc_error_t *err);

/* Takes tablet name for this session: the ephemeral node
 * tablets/<name>/owner naming addr ("host:port", where clients reach it)
 * and identity (what the server is: "<host>:<data directory>"), made again
 * by the background thread under a new session after an expiry, and when
 * it is deleted (watched). A node of
 * another live session with another identity: PC_BUSY naming the tablet and
 * its owner (a second server for a tablet is refused). One with the same
 * identity is a previous run of this server whose session ZooKeeper has
 * not expired yet: waited out, up to timeout_ms (then PC_BUSY). */
pc_status_t pc_coord_tablet_claim(pc_coord_t *c, const char *name, const char *addr,
                                  const char *identity, uint32_t timeout_ms, pc_error_t *err);

/* The server holding tablet name, "host:port" into addr (cap bytes), ""
 * when no live server holds it (or its owner node is not an ephemeral node
 * of the system session it names: logged); *session (may be NULL) its
 * session. fresh: after a sync, so that it sees every change made before
 * the call. */
pc_status_t pc_coord_tablet_owner(pc_coord_t *c, const char *name, int fresh,
                                  uint32_t timeout_ms, char *addr, size_t cap, uint64_t *session,
                                  pc_error_t *err);

/* From now on the background thread follows the owners of tablets
 * names[0..n) with watches, and calls fn(ctx, i, addr) with each one's
 * address (NULL: no live server) after every change it sees (and at each of
 * its passes: fn must be cheap when nothing changed). fn runs on the
 * background thread and must not call this interface; ctx must stay valid
 * until pc_coord_close. Call once. */
pc_status_t pc_coord_follow_tablets(pc_coord_t *c, const char *const *names, size_t n,
                                    void (*fn)(void *ctx, size_t i, const char *addr), void *ctx,
                                    pc_error_t *err);

/* ---- replicated tablets ------------------------------------------------------------ */

/* Replicated tablets (replica/): each tablet's leader holds
 * tablets/<name>/owner as a legacy server holds it, its identity
 * "raft:<server>:<term>", so that clients follow leaders the way they
 * follow owners; each server has
 *   servers/<name>        persistent: made when the server first starts (a
 *                         later start on an empty directory is a rebuild)
 *   servers/<name>/live   ephemeral: "<host>:<port>" where it serves now */

/* Makes servers/<name> when absent: *first = 1 when this call made it. */
pc_status_t pc_coord_server_mark(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *first,
                                 pc_error_t *err);
/* Whether servers/<name> exists (after a sync). */
pc_status_t pc_coord_server_seen(pc_coord_t *c, const char *name, uint32_t timeout_ms, int *seen,
                                 pc_error_t *err);
/* The servers that run now (a servers/<name>/live node): *names (malloc'd,
 * each too; free each and the array), *n. */
pc_status_t pc_coord_servers_live(pc_coord_t *c, uint32_t timeout_ms, char ***names, size_t *n,
                                  pc_error_t *err);
/* Tablet name's rows as ZooKeeper records them (malloc'd, NUL-terminated
 * after their lengths); PC_NOT_FOUND when none are recorded. */
pc_status_t pc_coord_tablet_range_get(pc_coord_t *c, const char *name, uint32_t timeout_ms,
                                      char **start, size_t *start_len, char **end,
                                      size_t *end_len, pc_error_t *err);
/* Holds servers/<name>/live with addr for this session (replacing a
 * previous run's node, made again after an expiry). */
pc_status_t pc_coord_server_live(pc_coord_t *c, const char *name, const char *addr,
                                 uint32_t timeout_ms, pc_error_t *err);
/* Where server name serves now ("host:port"); PC_UNAVAILABLE when it does not
 * run, or when its live node is not an ephemeral node of a system session
 * (pc_coord_system_node: logged). */
pc_status_t pc_coord_server_addr(pc_coord_t *c, const char *name, uint32_t timeout_ms, char *addr,
                                 size_t cap, pc_error_t *err);
/* The leader of replicated tablet name is server at addr from term on
 * (term > 0): tablets/<name>/owner names it, replacing an owner of an
 * earlier term (never one of a later term: this leader was deposed
 * meanwhile), made again after an expiry. term 0: this session's node goes
 * (another's stays). A deleted node is not made again: a leader of a later
 * term replaces the owner node by deleting it. */
pc_status_t pc_coord_tablet_lead(pc_coord_t *c, const char *name, const char *addr,
                                 const char *server, uint64_t term, uint32_t timeout_ms,
                                 pc_error_t *err);

#endif
