/* tso_server.c — serving the timestamp oracle over rpc.h: one handler per
 * op of tso_wire.h, found in a table by op; each decodes its request with
 * tso_wire.c, asks the oracle (or, served, the record of its clients'
 * snapshots) and encodes the reply. */
#include "tso/tso_server.h"

#include "base/error.h"

typedef pc_status_t (*op_fn)(pc_oracle_t *o, const char *body, size_t len, pc_buf_t *reply,
                             pc_error_t *err);

static pc_status_t reply_u64(pc_buf_t *reply, uint64_t v, pc_error_t *err) {
  return pc_tso_put_reply(reply, v) ? pc_error_set(err, PC_NOMEM, "out of memory") : PC_OK;
}

static pc_status_t op_timestamps(pc_oracle_t *o, const char *body, size_t len, pc_buf_t *reply,
                                 pc_error_t *err) {
  uint32_t count;
  uint64_t first;
  pc_status_t st = pc_tso_get_timestamps(body, len, &count, err);
  if (st == PC_OK) st = pc_oracle_next(o, count, &first, err);
  return st == PC_OK ? reply_u64(reply, first, err) : st;
}

static pc_status_t op_info(pc_oracle_t *o, const char *body, size_t len, pc_buf_t *reply,
                           pc_error_t *err) {
  pc_status_t st = pc_tso_get_info(body, len, err);
  return st == PC_OK ? reply_u64(reply, pc_oracle_last(o), err) : st;
}

static const op_fn ops[256] = {
    [PC_TSO_OP_TIMESTAMPS] = op_timestamps,
    [PC_TSO_OP_INFO] = op_info,
};

pc_status_t pc_tso_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                               pc_buf_t *reply, pc_error_t *err) {
  if (!ops[op]) return pc_error_set(err, PC_INVALID, "unknown opcode 0x%02x", op);
  return ops[op](ctx, body, len, reply, err);
}

int pc_tso_rpc_runs_inline(uint8_t op) {
  return ops[op] != NULL || op == PC_TSO_OP_REPORT || op == PC_TSO_OP_OLDEST;
}

pc_status_t pc_tso_served_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                  pc_buf_t *reply, pc_error_t *err) {
  pc_tso_served_t *s = ctx;
  if (op == PC_TSO_OP_REPORT) {
    uint64_t client, floor;
    pc_status_t st = pc_tso_get_report(body, len, &client, &floor, err);
    if (st == PC_OK)
      st = pc_snapshots_report(s->snapshots, pc_rpc_current_connection(), client, floor, err);
    return st == PC_OK ? reply_u64(reply, pc_oracle_last(s->oracle), err) : st;
  }
  if (op == PC_TSO_OP_OLDEST) {
    pc_status_t st = pc_tso_get_oldest(body, len, err);
    if (st != PC_OK) return st;
    pc_tso_oldest_t o;
    pc_snapshots_oldest(s->snapshots, &o.oldest, &o.complete, &o.clients);
    return pc_tso_put_oldest_reply(reply, &o) ? pc_error_set(err, PC_NOMEM, "out of memory")
                                              : PC_OK;
  }
  return pc_tso_rpc_handler(s->oracle, op, body, len, reply, err);
}

void pc_tso_served_closed(void *ctx, uint64_t connection) {
  pc_tso_served_t *s = ctx;
  pc_snapshots_closed(s->snapshots, connection);
}
