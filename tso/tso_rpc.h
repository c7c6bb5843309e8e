/* tso_rpc.h — the timestamp oracle over rpc.h: the handler the `percolator
 * tso` daemon serves, and the fetch function a pc_ts_batcher uses to ask it.
 *   0x10 TIMESTAMPS  u32 count (1..65536)    -> u64 first   (count consecutive timestamps)
 * The bound keeps one request from moving the oracle far past its clock: 65536
 * is a quarter of a millisecond's logical counter.
 *   0x11 INFO        (empty)                  -> u64 last issued
 */
#ifndef PC_TSO_TSO_RPC_H
#define PC_TSO_TSO_RPC_H

#include "core/keys.h"
#include "net/rpc.h"
#include "tso/oracle.h"

enum { PC_TSO_OP_TIMESTAMPS = 0x10, PC_TSO_OP_INFO = 0x11 };
#define PC_TSO_MAX_BATCH 65536u

/* ctx is the pc_oracle_t *. */
pc_status_t pc_tso_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                               pc_buf_t *reply, pc_error_t *err);

/* rpc.h's runs_inline for the oracle: its ops are a mutex and arithmetic
 * (plus, every window, one fsync of the bound), so they run on the I/O thread. */
int pc_tso_rpc_runs_inline(uint8_t op);

/* A pc_ts_fetch_fn over a client of the tso daemon (ctx is the pc_rpc_client_t *). */
pc_status_t pc_tso_remote_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                pc_error_t *err);

/* The last timestamp the daemon issued. */
pc_status_t pc_tso_remote_info(pc_rpc_client_t *c, uint32_t timeout_ms, uint64_t *last,
                               pc_error_t *err);

#endif
