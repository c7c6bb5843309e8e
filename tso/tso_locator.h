/* tso_locator.h — the client side of the timestamp oracle with standbys
 * (tso_election.h): a client of whichever oracle leads the cluster. It reads
 * the leader's address from the election nodes (tso_wire.h's layout), keeps
 * a watch on them and moves to a new leader on its own; it asks the leader
 * with tso_client.h on that leader's connection. A timestamp request never
 * waits on ZooKeeper (a background thread follows the election, on the
 * session of the client handle), only on the oracle. */
#ifndef PC_TSO_TSO_LOCATOR_H
#define PC_TSO_TSO_LOCATOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"
#include "lockservice/zk.h"
#include "net/rpc.h"

typedef struct pc_tso_locator pc_tso_locator_t;
struct pc_coord;

/* A client of whichever oracle leads the cluster, following the election on
 * coord's session (lockservice/coord.h: the client handle's one session;
 * coord must outlive the locator) from a background thread; auth's
 * credentials (copied; NULL: none) reach each leader. Returns NULL on error;
 * release with pc_tso_locator_destroy. */
pc_tso_locator_t *pc_tso_locator_on(struct pc_coord *coord, const pc_rpc_auth_t *auth,
                                    pc_error_t *err);
/* The same on a session of its own (a coordinator without a client node),
 * opened on the ensemble zo names, waiting at most timeout_ms for it
 * (PC_UNAVAILABLE otherwise), and closed with the locator. */
pc_tso_locator_t *pc_tso_locator_create(const pc_zk_options_t *zo, const pc_rpc_auth_t *auth,
                                        uint32_t timeout_ms, pc_error_t *err);
void pc_tso_locator_destroy(pc_tso_locator_t *l);

/* A pc_ts_fetch_fn (ctx is the locator): asks the leader it knows of, and
 * on failure waits (within timeout_ms) for the election to name another
 * one and asks it. */
pc_status_t pc_tso_locator_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                 pc_error_t *err);
/* The last timestamp the leader issued (tso_wire.h INFO). */
pc_status_t pc_tso_locator_info(pc_tso_locator_t *l, uint32_t timeout_ms, uint64_t *last,
                                pc_error_t *err);
/* The leader's address as last read ("" while none is known), and every
 * candidate's in election order, one per line, into buf (cap bytes). */
void pc_tso_locator_members(pc_tso_locator_t *l, char *leader, size_t lcap, char *all,
                            size_t acap);

#endif
