/* ls_rpc.c — serves a pc_ls_t over rpc.h: decodes the bodies of
 * the lock-service ops (table in ls_internal.h), calls the in-process object
 * and encodes its answers. Bodies come from the network: every read is
 * bounds-checked, trailing bytes are refused, names are checked against
 * 1..PC_LS_MAX_NAME, and any fault is PC_INVALID with a message naming the
 * op and the fault; nothing here can crash on hostile input. */
#include "core/log.h"
#include "net/rpc.h"
#include "lockservice/lockservice.h"
#include "lockservice/ls_internal.h"

#include "core/error.h"

#include <inttypes.h>

static const char *op_name(uint8_t op) {
  switch (op) {
  case PC_LS_OP_SESSION_OPEN: return "session_open";
  case PC_LS_OP_KEEPALIVE: return "keepalive";
  case PC_LS_OP_SESSION_CLOSE: return "session_close";
  case PC_LS_OP_LIVENESS: return "liveness";
  case PC_LS_OP_LOCK_TRY: return "lock_try";
  case PC_LS_OP_LOCK_RELEASE: return "lock_release";
  case PC_LS_OP_LOCK_HOLDER: return "lock_holder";
  case PC_LS_OP_INFO: return "info";
  case PC_LS_OP_OLDEST: return "oldest";
  default: return "unknown";
  }
}

/* A session bound to a connection is used only over that connection: no
 * other client can keep it alive, close it, or take locks in its name. */
static pc_status_t check_owner(pc_ls_t *ls, uint64_t session, uint8_t op, pc_error_t *err) {
  uint64_t conn = pc_rpc_current_connection();
  if (!conn || pc_ls_session_usable_by(ls, session, conn)) return PC_OK;
  return pc_error_set(err, PC_INVALID, "lockservice: %s: session %016llx belongs to another "
                      "connection", op_name(op), (unsigned long long)session);
}

/* PC_OK when r read exactly the whole body, else PC_INVALID naming the fault. */
static pc_status_t check_end(const pc_rd_t *r, uint8_t op, pc_error_t *err) {
  if (!r->ok)
    return pc_error_set(err, PC_INVALID, "lockservice: %s request truncated (%zu bytes)",
                        op_name(op), r->len);
  if (r->pos != r->len)
    return pc_error_set(err, PC_INVALID,
                        "lockservice: %s request has %zu trailing bytes (%zu expected)",
                        op_name(op), r->len - r->pos, r->pos);
  return PC_OK;
}

/* Reads a lock name; PC_INVALID unless it is 1..PC_LS_MAX_NAME bytes. Call
 * check_end first when the name is the last field, so truncation is named. */
static pc_status_t read_name(pc_rd_t *r, uint8_t op, const char **name, size_t *nlen,
                             pc_error_t *err) {
  *name = NULL;
  *nlen = 0;
  if (!r->ok) return check_end(r, op, err); /* an earlier field was short */
  size_t pos = r->pos;
  *name = pc_rd_str(r, nlen);
  if (!r->ok) {
    /* Name the claimed length when it is the fault. */
    pc_rd_t peek = {r->p, r->len, pos, 1};
    uint32_t claimed = pc_rd_u32(&peek);
    if (peek.ok && claimed > PC_LS_MAX_NAME)
      return pc_error_set(err, PC_INVALID,
                          "lockservice: %s: lock name of %" PRIu32 " bytes (must be 1..%d)",
                          op_name(op), claimed, PC_LS_MAX_NAME);
    return check_end(r, op, err);
  }
  if (*nlen < 1 || *nlen > PC_LS_MAX_NAME)
    return pc_error_set(err, PC_INVALID,
                        "lockservice: %s: lock name of %zu bytes (must be 1..%d)", op_name(op),
                        *nlen, PC_LS_MAX_NAME);
  return PC_OK;
}

static pc_status_t nomem(pc_error_t *err, uint8_t op) {
  return pc_error_set(err, PC_NOMEM, "lockservice: out of memory encoding the %s reply",
                      op_name(op));
}

pc_status_t pc_ls_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                              pc_buf_t *reply, pc_error_t *err) {
  pc_ls_t *ls = ctx;
  if (!ls || !reply) return pc_error_set(err, PC_INTERNAL, "lockservice: handler without service");
  if (!body) {
    if (len) return pc_error_set(err, PC_INVALID, "lockservice: NULL body of %zu bytes", len);
    body = "";
  }
  pc_rd_t r = {body, len, 0, 1};
  pc_status_t st;
  switch (op) {
  case PC_LS_OP_SESSION_OPEN: {
    uint32_t ttl = pc_rd_u32(&r);
    if ((st = check_end(&r, op, err)) != PC_OK) return st;
    if (pc_buf_reserve(reply, 8) != 0) return nomem(err, op);
    uint64_t id;
    if ((st = pc_ls_session_open(ls, ttl, &id, err)) != PC_OK) return st;
    uint64_t conn = pc_rpc_current_connection();
    if (conn && (st = pc_ls_session_bind(ls, id, conn, err)) != PC_OK) return st;
    pc_buf_u64(reply, id);
    return PC_OK;
  }
  case PC_LS_OP_KEEPALIVE: {
    uint64_t id = pc_rd_u64(&r);
    uint64_t oldest = pc_rd_u64(&r);
    if ((st = check_end(&r, op, err)) != PC_OK) return st;
    if ((st = check_owner(ls, id, op, err)) != PC_OK) return st;
    if ((st = pc_ls_session_keepalive(ls, id, err)) != PC_OK) return st;
    /* PC_NOT_FOUND only if the session ended in between: the right answer. */
    return pc_ls_session_report(ls, id, oldest, err);
  }
  case PC_LS_OP_SESSION_CLOSE:
  case PC_LS_OP_LIVENESS: {
    uint64_t id = pc_rd_u64(&r);
    if ((st = check_end(&r, op, err)) != PC_OK) return st;
    if (op != PC_LS_OP_LIVENESS && (st = check_owner(ls, id, op, err)) != PC_OK) return st;
    if (op == PC_LS_OP_SESSION_CLOSE) return pc_ls_session_close(ls, id, err);
    if (pc_buf_u8(reply, (uint8_t)pc_ls_session_liveness(ls, id)) != 0) return nomem(err, op);
    pc_error_clear(err);
    return PC_OK;
  }
  case PC_LS_OP_LOCK_TRY:
  case PC_LS_OP_LOCK_RELEASE: {
    uint64_t id = pc_rd_u64(&r);
    const char *name;
    size_t nlen;
    if ((st = read_name(&r, op, &name, &nlen, err)) != PC_OK) return st;
    if ((st = check_end(&r, op, err)) != PC_OK) return st;
    if ((st = check_owner(ls, id, op, err)) != PC_OK) return st;
    if (op == PC_LS_OP_LOCK_RELEASE) return pc_ls_lock_release(ls, id, name, nlen, err);
    /* Reserve first: once the lock is taken, encoding the answer cannot fail. */
    if (pc_buf_reserve(reply, 9) != 0) return nomem(err, op);
    int acquired;
    uint64_t holder;
    if ((st = pc_ls_lock_try(ls, id, name, nlen, &acquired, &holder, err)) != PC_OK) return st;
    pc_buf_u8(reply, acquired ? 1 : 0);
    pc_buf_u64(reply, holder);
    return PC_OK;
  }
  case PC_LS_OP_LOCK_HOLDER: {
    const char *name;
    size_t nlen;
    if ((st = read_name(&r, op, &name, &nlen, err)) != PC_OK) return st;
    if ((st = check_end(&r, op, err)) != PC_OK) return st;
    if (pc_buf_u64(reply, pc_ls_lock_holder(ls, name, nlen)) != 0) return nomem(err, op);
    pc_error_clear(err);
    return PC_OK;
  }
  case PC_LS_OP_INFO: {
    if ((st = check_end(&r, op, err)) != PC_OK) return st;
    if (pc_buf_u32(reply, pc_ls_epoch(ls)) != 0 ||
        pc_buf_u64(reply, (uint64_t)pc_ls_session_count(ls)) != 0)
      return nomem(err, op);
    pc_error_clear(err);
    return PC_OK;
  }
  case PC_LS_OP_OLDEST: {
    if ((st = check_end(&r, op, err)) != PC_OK) return st;
    size_t unreported = 0;
    uint64_t oldest = pc_ls_oldest_reported(ls, &unreported);
    if (pc_buf_u64(reply, oldest) != 0 || pc_buf_u64(reply, (uint64_t)unreported) != 0)
      return nomem(err, op);
    pc_error_clear(err);
    return PC_OK;
  }
  default:
    return pc_error_set(err, PC_INVALID, "lockservice: unknown op 0x%02x", (unsigned)op);
  }
}

void pc_ls_rpc_on_close(void *ctx, uint64_t connection) {
  size_t n = pc_ls_connection_closed(ctx, connection);
  if (n) pc_log(PC_LOG_INFO, "lockd: connection %llu closed: ended %zu session%s",
                (unsigned long long)connection, n, n == 1 ? "" : "s");
}
