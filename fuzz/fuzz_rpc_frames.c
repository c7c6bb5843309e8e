/* fuzz_rpc_frames.c — the reader of rpc frame headers (net/rpc_frame.c),
 * which the server runs on its requests and the client on its replies,
 * against any byte stream. First byte: bit 0 reads as a client (replies),
 * bit 1 picks a small frame limit (64 bytes) instead of the client's 1 GiB;
 * the rest is the stream.
 *
 * Properties: a READY frame lies inside the bytes read and within the limit,
 * its fields are the stream's; a client's is a reply of this version; and
 * the answer does not depend on how the stream was split: for every prefix
 * of the bytes of one frame, the reader says MORE or already what the whole
 * says (the same frame, the same fault), and once the whole says MORE every
 * prefix does. The stream's frames are read one after another until one is
 * bad or incomplete. */
#include <string.h>

#include "fuzz/fuzz.h"
#include "net/rpc.h"
#include "net/rpc_frame.h"

#define CLIENT_MAX (1u << 30)

static pc_rpc_frame_state_t read_at(const uint8_t *p, size_t n, uint32_t max, int reply,
                                    pc_rpc_frame_t *f) {
  unsigned char head[PC_RPC_FRAME_HDR];
  size_t got = n < sizeof head ? n : sizeof head;
  memcpy(head, p, got);
  memset(head + got, 0xEE, sizeof head - got); /* what the reader must not look at */
  return pc_rpc_frame_read(head, n, max, reply, f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int reply = data[0] & 1;
  uint32_t max = (data[0] & 2) ? 64 : CLIENT_MAX;
  const uint8_t *p = data + 1;
  size_t n = size - 1, at = 0;
  for (;;) {
    pc_rpc_frame_t whole;
    pc_rpc_frame_state_t st = read_at(p + at, n - at, max, reply, &whole);
    if (st == PC_RPC_FRAME_READY) {
      const uint8_t *h = p + at;
      FUZZ_CHECK(whole.len >= PC_RPC_HEADER && whole.len <= max);
      FUZZ_CHECK(n - at >= PC_RPC_PREFIX + (size_t)whole.len);
      FUZZ_CHECK(whole.len == ((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]));
      FUZZ_CHECK(h[4] == PC_RPC_VERSION && whole.op == h[5] && whole.status == h[6]);
      uint64_t id = 0;
      for (int i = 0; i < 8; i++) id = id << 8 | h[7 + i];
      FUZZ_CHECK(whole.id == id);
      if (reply) FUZZ_CHECK(whole.op & PC_RPC_OP_REPLY);
    } else if (st == PC_RPC_FRAME_BAD) {
      FUZZ_CHECK(whole.fault[0] != '\0');
    }
    /* every prefix: MORE, or the whole's answer (the header's bytes decide,
     * so the prefixes up to it and the one a byte short of the end say all) */
    size_t upto = st == PC_RPC_FRAME_READY ? PC_RPC_PREFIX + (size_t)whole.len : n - at;
    for (size_t k = 0; k < upto; k = k == PC_RPC_FRAME_HDR && upto > k + 2 ? upto - 1 : k + 1) {
      pc_rpc_frame_t part;
      pc_rpc_frame_state_t ps = read_at(p + at, k, max, reply, &part);
      if (ps == PC_RPC_FRAME_MORE) continue;
      FUZZ_CHECK(ps == st && st != PC_RPC_FRAME_READY); /* READY needs the whole frame */
      FUZZ_CHECK(strcmp(part.fault, whole.fault) == 0);
      break; /* decided: a longer prefix holds the same deciding bytes */
    }
    if (st != PC_RPC_FRAME_READY) return 0;
    at += PC_RPC_PREFIX + whole.len;
  }
}
