/* repl_client.c — the client side of the replication ops (repl_wire.h)
 * for the tools: the state of every replica a server holds (REPLICAS:
 * `percolator status`, `doctor`) and membership requests to a tablet's
 * leader (MEMBER: `percolator tablet ...`). The servers' own calls to
 * each other (Raft's messages, snapshot streams, CREATE) are in host.c and
 * group.c. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "replica/repl_client.h"

pc_status_t pc_repl_remote_replicas(pc_rpc_client_t *c, uint32_t timeout_ms,
                                    pc_replica_info_t **out, size_t *n, pc_error_t *err) {
  *out = NULL;
  *n = 0;
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, PC_REPL_OP_REPLICAS, NULL, 0, timeout_ms, &reply, err);
  if (st != PC_OK) {
    pc_buf_free(&reply);
    return st;
  }
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  uint32_t count = pc_rd_u32(&r);
  if (!r.ok || count > 4096) {
    pc_buf_free(&reply);
    return pc_error_set(err, PC_CORRUPTION, "REPLICAS: a malformed reply");
  }
  pc_replica_info_t *v = calloc(count ? count : 1, sizeof *v);
  if (!v) {
    pc_buf_free(&reply);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  for (uint32_t i = 0; i < count; i++)
    if (pc_replica_info_decode(&r, &v[i]) != 0) {
      free(v);
      pc_buf_free(&reply);
      return pc_error_set(err, PC_CORRUPTION, "REPLICAS: replica %u of the reply is malformed",
                          i + 1);
    }
  pc_buf_free(&reply);
  *out = v;
  *n = count;
  return PC_OK;
}

pc_status_t pc_repl_remote_member(pc_rpc_client_t *c, int action, const char *tablet,
                                  const char *server, uint32_t timeout_ms, pc_buf_t *text,
                                  pc_error_t *err) {
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = PC_OK;
  if (pc_buf_u8(&body, (uint8_t)action) || pc_buf_str(&body, tablet, strlen(tablet)) ||
      pc_buf_str(&body, server, strlen(server)))
    st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK) st = pc_rpc_call(c, PC_REPL_OP_MEMBER, body.p, body.len, timeout_ms, &reply, err);
  if (st == PC_OK) {
    pc_rd_t r = {reply.p, reply.len, 0, 1};
    size_t n = 0;
    const char *msg = pc_rd_str(&r, &n);
    if (!r.ok) st = pc_error_set(err, PC_CORRUPTION, "MEMBER: a malformed reply");
    else if (text && pc_buf_append(text, msg, n)) st = pc_error_set(err, PC_NOMEM, "out of memory");
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}
