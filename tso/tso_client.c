/* tso_client.c — fetching batches of timestamps from the oracle daemon, the
 * client side that pc_ts_batcher drives (one request in flight per
 * process), asking it the last timestamp it issued, and a served
 * directory's client's snapshot reports. */
#include "tso/tso_client.h"

#include "base/error.h"

pc_status_t pc_tso_remote_fetch(void *ctx, uint32_t count, uint32_t timeout_ms, uint64_t *first,
                                pc_error_t *err) {
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = pc_tso_put_timestamps(&body, count)
                       ? pc_error_set(err, PC_NOMEM, "out of memory")
                       : PC_OK;
  if (st == PC_OK)
    st = pc_rpc_call(ctx, PC_TSO_OP_TIMESTAMPS, body.p, body.len, timeout_ms, &reply, err);
  if (st == PC_OK) st = pc_tso_get_reply(reply.p, reply.len, first, err);
  else pc_error_prefix(err, "timestamp oracle");
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

pc_status_t pc_tso_remote_info(pc_rpc_client_t *c, uint32_t timeout_ms, uint64_t *last,
                               pc_error_t *err) {
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, PC_TSO_OP_INFO, NULL, 0, timeout_ms, &reply, err);
  if (st == PC_OK) st = pc_tso_get_reply(reply.p, reply.len, last, err);
  pc_buf_free(&reply);
  return st;
}

pc_status_t pc_tso_remote_report(pc_rpc_client_t *c, uint64_t client, uint64_t floor,
                                 uint32_t timeout_ms, uint64_t *last, pc_error_t *err) {
  pc_buf_t body = {0}, reply = {0};
  uint64_t scratch;
  pc_status_t st = pc_tso_put_report(&body, client, floor)
                       ? pc_error_set(err, PC_NOMEM, "out of memory")
                       : pc_rpc_call(c, PC_TSO_OP_REPORT, body.p, body.len, timeout_ms, &reply, err);
  if (st == PC_OK) st = pc_tso_get_reply(reply.p, reply.len, last ? last : &scratch, err);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

pc_status_t pc_tso_remote_oldest(pc_rpc_client_t *c, uint32_t timeout_ms, pc_tso_oldest_t *out,
                                 pc_error_t *err) {
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, PC_TSO_OP_OLDEST, NULL, 0, timeout_ms, &reply, err);
  if (st == PC_OK) st = pc_tso_get_oldest_reply(reply.p, reply.len, out, err);
  pc_buf_free(&reply);
  return st;
}
