/* rpc_frame.c — the header checks of rpc.h frames (rpc_frame.h). */
#include "net/rpc_frame.h"

#include <stdio.h>

#include "net/rpc.h"

pc_rpc_frame_state_t pc_rpc_frame_read(const unsigned char *head, size_t avail, uint32_t max_frame,
                                       int reply, pc_rpc_frame_t *f) {
  size_t got = avail < PC_RPC_FRAME_HDR ? avail : PC_RPC_FRAME_HDR;
  f->len = 0;
  f->op = got > 5 ? head[5] : 0;
  f->status = got > 6 ? head[6] : 0;
  f->id = 0;
  if (got == PC_RPC_FRAME_HDR)
    for (int i = 0; i < 8; i++) f->id = f->id << 8 | head[7 + i];
  f->fault[0] = '\0';
  if (got < PC_RPC_PREFIX) return PC_RPC_FRAME_MORE;
  f->len = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
  if (f->len < PC_RPC_HEADER || f->len > max_frame) {
    snprintf(f->fault, sizeof f->fault, "bad frame length %u (must be %u..%u)", f->len,
             PC_RPC_HEADER, max_frame);
    return PC_RPC_FRAME_BAD;
  }
  if (got > 4 && head[4] != PC_RPC_VERSION) {
    snprintf(f->fault, sizeof f->fault, "unsupported protocol version %u (this %s speaks %u)",
             head[4], reply ? "client" : "server", PC_RPC_VERSION);
    return PC_RPC_FRAME_BAD;
  }
  if (reply && got > 5 && !(head[5] & PC_RPC_OP_REPLY)) {
    snprintf(f->fault, sizeof f->fault, "a frame that is not a reply (op 0x%02x)", head[5]);
    return PC_RPC_FRAME_BAD;
  }
  return avail - PC_RPC_PREFIX < f->len ? PC_RPC_FRAME_MORE : PC_RPC_FRAME_READY;
}
