/* tso_rpc.c — serving the timestamp oracle over rpc.h, and fetching batches
 * of timestamps from it: the client side of the daemon that pc_ts_batcher
 * drives, one request in flight per process. */
#include "tso/tso_rpc.h"

#include "core/error.h"

pc_status_t pc_tso_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                               pc_buf_t *reply, pc_error_t *err) {
  pc_oracle_t *o = ctx;
  pc_rd_t r = {body, len, 0, 1};
  switch (op) {
    case PC_TSO_OP_TIMESTAMPS: {
      uint32_t count = pc_rd_u32(&r);
      if (!r.ok || r.pos != len || count == 0 || count > PC_TSO_MAX_BATCH)
        return pc_error_set(err, PC_INVALID, "timestamps: want a count of 1..%u",
                            PC_TSO_MAX_BATCH);
      uint64_t first;
      pc_status_t st = pc_oracle_next(o, count, &first, err);
      if (st != PC_OK) return st;
      return pc_buf_u64(reply, first) ? pc_error_set(err, PC_NOMEM, "out of memory") : PC_OK;
    }
    case PC_TSO_OP_INFO:
      if (len != 0) return pc_error_set(err, PC_INVALID, "info takes no body");
      return pc_buf_u64(reply, pc_oracle_last(o)) ? pc_error_set(err, PC_NOMEM, "out of memory")
                                                  : PC_OK;
    default:
      return pc_error_set(err, PC_INVALID, "unknown opcode 0x%02x", op);
  }
}

int pc_tso_rpc_runs_inline(uint8_t op) {
  return op == PC_TSO_OP_TIMESTAMPS || op == PC_TSO_OP_INFO;
}

static pc_status_t read_u64_reply(const pc_buf_t *reply, uint64_t *out, pc_error_t *err) {
  pc_rd_t r = {reply->p, reply->len, 0, 1};
  *out = pc_rd_u64(&r);
  if (!r.ok || r.pos != reply->len)
    return pc_error_set(err, PC_CORRUPTION, "timestamp oracle: malformed reply");
  return PC_OK;
}

pc_status_t pc_tso_remote_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                pc_error_t *err) {
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = pc_buf_u32(&body, count) ? pc_error_set(err, PC_NOMEM, "out of memory")
                                            : PC_OK;
  if (st == PC_OK)
    st = pc_rpc_call(ctx, PC_TSO_OP_TIMESTAMPS, body.p, body.len, timeout_ms, &reply, err);
  if (st == PC_OK) st = read_u64_reply(&reply, first, err);
  else pc_error_prefix(err, "timestamp oracle");
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

pc_status_t pc_tso_remote_info(pc_rpc_client_t *c, uint32_t timeout_ms, uint64_t *last,
                               pc_error_t *err) {
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, PC_TSO_OP_INFO, NULL, 0, timeout_ms, &reply, err);
  if (st == PC_OK) st = read_u64_reply(&reply, last, err);
  pc_buf_free(&reply);
  return st;
}
