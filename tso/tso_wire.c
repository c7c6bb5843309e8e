/* tso_wire.c — the codecs of the timestamp oracle's request and reply
 * bodies (the protocol is in tso_wire.h). Decoders refuse a body that is
 * short, long or out of range, naming the op. */
#include "tso/tso_wire.h"

#include "base/error.h"

int pc_tso_put_timestamps(pc_buf_t *b, uint32_t count) { return pc_buf_u32(b, count); }

pc_status_t pc_tso_get_timestamps(const char *body, size_t len, uint32_t *count,
                                  pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  *count = pc_rd_u32(&r);
  if (!r.ok || r.pos != len || *count == 0 || *count > PC_TSO_MAX_BATCH)
    return pc_error_set(err, PC_INVALID, "timestamps: want a count of 1..%u", PC_TSO_MAX_BATCH);
  return PC_OK;
}

pc_status_t pc_tso_get_info(const char *body, size_t len, pc_error_t *err) {
  (void)body;
  if (len != 0) return pc_error_set(err, PC_INVALID, "info takes no body");
  return PC_OK;
}

int pc_tso_put_reply(pc_buf_t *b, uint64_t v) { return pc_buf_u64(b, v); }

pc_status_t pc_tso_get_reply(const char *body, size_t len, uint64_t *v, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  *v = pc_rd_u64(&r);
  if (!r.ok || r.pos != len)
    return pc_error_set(err, PC_CORRUPTION, "timestamp oracle: malformed reply");
  return PC_OK;
}

int pc_tso_put_report(pc_buf_t *b, uint64_t client, uint64_t floor) {
  return pc_buf_u64(b, client) || pc_buf_u64(b, floor);
}

pc_status_t pc_tso_get_report(const char *body, size_t len, uint64_t *client, uint64_t *floor,
                              pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  *client = pc_rd_u64(&r);
  *floor = pc_rd_u64(&r);
  if (!r.ok || r.pos != len || *client == 0)
    return pc_error_set(err, PC_INVALID, "report: want a client (not 0) and a floor");
  return PC_OK;
}

pc_status_t pc_tso_get_oldest(const char *body, size_t len, pc_error_t *err) {
  (void)body;
  if (len != 0) return pc_error_set(err, PC_INVALID, "oldest takes no body");
  return PC_OK;
}

int pc_tso_put_oldest_reply(pc_buf_t *b, const pc_tso_oldest_t *o) {
  return pc_buf_u64(b, o->oldest) || pc_buf_u8(b, o->complete ? 1 : 0) ||
         pc_buf_u32(b, o->clients);
}

pc_status_t pc_tso_get_oldest_reply(const char *body, size_t len, pc_tso_oldest_t *o,
                                    pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  o->oldest = pc_rd_u64(&r);
  uint8_t complete = pc_rd_u8(&r);
  o->clients = pc_rd_u32(&r);
  o->complete = complete == 1;
  if (!r.ok || r.pos != len || complete > 1)
    return pc_error_set(err, PC_CORRUPTION, "timestamp oracle: malformed reply to oldest");
  return PC_OK;
}
