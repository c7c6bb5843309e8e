/* tso_server.h — the server side of the timestamp oracle's protocol
 * (tso_wire.h): the rpc.h handler the `percolator tso` daemon serves over a
 * pc_oracle_t. A cluster's oracle with standbys wraps it (tso_election.h's
 * pc_tso_node_handler); the oracle of a served data directory wraps it with
 * the record of its clients' snapshots (pc_tso_served_handler). */
#ifndef PC_TSO_TSO_SERVER_H
#define PC_TSO_TSO_SERVER_H

#include "core/keys.h"
#include "net/rpc.h"
#include "tso/oracle.h"
#include "tso/snapshots.h"
#include "tso/tso_wire.h"

/* ctx is the pc_oracle_t *. An unknown op or a malformed body is
 * PC_INVALID, with nothing in reply. */
pc_status_t pc_tso_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                               pc_buf_t *reply, pc_error_t *err);

/* rpc.h's runs_inline for the oracle: its ops are a mutex and arithmetic
 * (plus, every window, one fsync of the bound), so they run on the I/O
 * thread; so do REPORT and OLDEST (a mutex and an array). */
int pc_tso_rpc_runs_inline(uint8_t op);

/* The oracle of a served data directory: its timestamps, and its clients'
 * snapshot floors (snapshots.h). Both borrowed. */
typedef struct pc_tso_served {
  pc_oracle_t *oracle;
  pc_snapshots_t *snapshots;
} pc_tso_served_t;

/* ctx is the pc_tso_served_t *: REPORT (on the connection of the request,
 * rpc.h's pc_rpc_current_connection) and OLDEST, and the oracle's ops. */
pc_status_t pc_tso_served_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                  pc_buf_t *reply, pc_error_t *err);
/* rpc.h's on_close for it: the connection's reports hold their grace. */
void pc_tso_served_closed(void *ctx, uint64_t connection);

#endif
