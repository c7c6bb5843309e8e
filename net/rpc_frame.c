/* rpc_frame.c — the header checks of rpc.h frames of either version
 * (rpc_frame.h). */
#include "net/rpc_frame.h"

#include <stdio.h>

#include "net/rpc.h"

static uint64_t get_be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

pc_rpc_frame_state_t pc_rpc_frame_read(const unsigned char *head, size_t avail, uint32_t max_frame,
                                       int reply, pc_rpc_frame_t *f) {
  size_t got = avail < PC_RPC_FRAME_HDR ? avail : PC_RPC_FRAME_HDR;
  f->len = 0;
  f->version = got > 4 ? head[4] : 0;
  f->known = f->version == PC_RPC_VERSION_1 || f->version == PC_RPC_VERSION;
  f->op = got > 5 ? head[5] : 0;
  f->status = got > 6 ? head[6] : 0;
  f->id = got >= PC_RPC_FRAME_HDR_V1 ? get_be(head + 7, 8) : 0;
  f->hlen = f->version == PC_RPC_VERSION ? PC_RPC_FRAME_HDR : PC_RPC_FRAME_HDR_V1;
  f->budget_ms = f->version == PC_RPC_VERSION && got >= PC_RPC_FRAME_HDR
                     ? (uint32_t)get_be(head + 15, 4)
                     : 0;
  f->fault[0] = '\0';
  if (got < PC_RPC_PREFIX) return PC_RPC_FRAME_MORE;
  f->len = (uint32_t)get_be(head, 4);
  /* the length against every version's bounds first, so that the answer
   * does not depend on whether the version's byte came with it */
  if (f->len < PC_RPC_HEADER_V1 || f->len > max_frame) {
    snprintf(f->fault, sizeof f->fault, "bad frame length %u (must be %u..%u)", f->len,
             PC_RPC_HEADER_V1, max_frame);
    return PC_RPC_FRAME_BAD;
  }
  if (got > 4 && !f->known) {
    snprintf(f->fault, sizeof f->fault,
             "unsupported protocol version %u (this %s speaks %u and %u)", f->version,
             reply ? "client" : "server", PC_RPC_VERSION_1, PC_RPC_VERSION);
    return PC_RPC_FRAME_BAD;
  }
  if (got > 4 && f->len < f->hlen - PC_RPC_PREFIX) {
    snprintf(f->fault, sizeof f->fault, "bad frame length %u (version %u's header is %zu)",
             f->len, f->version, f->hlen - PC_RPC_PREFIX);
    return PC_RPC_FRAME_BAD;
  }
  if (reply && got > 5 && !(head[5] & PC_RPC_OP_REPLY)) {
    snprintf(f->fault, sizeof f->fault, "a frame that is not a reply (op 0x%02x)", head[5]);
    return PC_RPC_FRAME_BAD;
  }
  return avail - PC_RPC_PREFIX < f->len ? PC_RPC_FRAME_MORE : PC_RPC_FRAME_READY;
}
