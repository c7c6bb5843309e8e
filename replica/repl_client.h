/* repl_client.h — what the tools ask of a tablet server's replication:
 * the state of the replicas it holds, and membership changes of a tablet,
 * sent to its leader. Both need the system identity (net/rpc.h). */
#ifndef PC_REPLICA_REPL_CLIENT_H
#define PC_REPLICA_REPL_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "net/rpc.h"
#include "replica/repl_wire.h"

/* Every replica the server at c holds: *out (malloc'd array of *n; free()). */
pc_status_t pc_repl_remote_replicas(pc_rpc_client_t *c, uint32_t timeout_ms,
                                    pc_replica_info_t **out, size_t *n, pc_error_t *err);

/* Asks the server at c, which must lead tablet, to add (PC_MEMBER_ADD), remove
 * or move the leadership to (PC_MEMBER_MOVE) server's replica of it; text
 * (may be NULL) receives what was done. A server that does not lead it
 * answers PC_UNAVAILABLE naming the leader (replica.h). */
pc_status_t pc_repl_remote_member(pc_rpc_client_t *c, int action, const char *tablet,
                                  const char *server, uint32_t timeout_ms, pc_buf_t *text,
                                  pc_error_t *err);

#endif
