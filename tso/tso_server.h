/* tso_server.h — the server side of the timestamp oracle's protocol
 * (tso_wire.h): the rpc.h handler the `percolator tso` daemon serves over a
 * pc_oracle_t. A cluster's oracle with standbys wraps it (tso_election.h's
 * pc_tso_node_handler). */
#ifndef PC_TSO_TSO_SERVER_H
#define PC_TSO_TSO_SERVER_H

#include "core/keys.h"
#include "net/rpc.h"
#include "tso/oracle.h"
#include "tso/tso_wire.h"

/* ctx is the pc_oracle_t *. An unknown op or a malformed body is
 * PC_INVALID, with nothing in reply. */
pc_status_t pc_tso_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                               pc_buf_t *reply, pc_error_t *err);

/* rpc.h's runs_inline for the oracle: its ops are a mutex and arithmetic
 * (plus, every window, one fsync of the bound), so they run on the I/O thread. */
int pc_tso_rpc_runs_inline(uint8_t op);

#endif
