/* tso_client.h — a client of one timestamp oracle (tso_wire.h's protocol)
 * over an rpc.h client: the fetch function a pc_ts_batcher uses, INFO, and a
 * served directory's REPORT and OLDEST.
 * A cluster's client that follows the elected leader is tso_locator.h's
 * locator, which calls these on the leader's connection. */
#ifndef PC_TSO_TSO_CLIENT_H
#define PC_TSO_TSO_CLIENT_H

#include "core/keys.h"
#include "net/rpc.h"
#include "tso/tso_wire.h"

/* A pc_ts_fetch_fn over a client of the tso daemon (ctx is the pc_rpc_client_t *). */
pc_status_t pc_tso_remote_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                pc_error_t *err);

/* The last timestamp the daemon issued. */
pc_status_t pc_tso_remote_info(pc_rpc_client_t *c, uint32_t timeout_ms, uint64_t *last,
                               pc_error_t *err);

/* A served directory's oracle (tso/snapshots.h): reports client's floor (0:
 * it leaves), *last (may be NULL) receiving the last timestamp the oracle
 * issued; and asks for the oldest floor of its live clients. */
pc_status_t pc_tso_remote_report(pc_rpc_client_t *c, uint64_t client, uint64_t floor,
                                 uint32_t timeout_ms, uint64_t *last, pc_error_t *err);
pc_status_t pc_tso_remote_oldest(pc_rpc_client_t *c, uint32_t timeout_ms, pc_tso_oldest_t *out,
                                 pc_error_t *err);

#endif
