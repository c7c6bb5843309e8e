/* rpc_frame.h — reading the header of an rpc.h frame from the bytes a
 * connection has received so far: the one reader of the server's requests
 * (net/rpc_server.c) and the client's replies (net/rpc_client.c), apart
 * from the I/O so that it can be tested on its own (fuzz/fuzz_rpc_frames.c).
 *
 * A reader calls it with what its input holds; it answers as soon as the
 * bytes decide: a version other than PC_RPC_VERSION_1 and PC_RPC_VERSION
 * once its byte is in, a length outside its version's header..max_frame
 * once the length field is (below the shortest header of any version while
 * the version is not in yet), and on a client's side a frame that is not a
 * reply once the op is. Otherwise it waits for the whole frame. The same
 * bytes give the same answer however they were split on the way. */
#ifndef PC_NET_RPC_FRAME_H
#define PC_NET_RPC_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define PC_RPC_PREFIX 4 /* the length field */
#define PC_RPC_FRAME_HDR 19 /* PC_RPC_PREFIX + PC_RPC_HEADER (rpc.h): the most bytes before a payload */
#define PC_RPC_FRAME_HDR_V1 15 /* PC_RPC_PREFIX + PC_RPC_HEADER_V1: before a version-1 payload */

typedef enum pc_rpc_frame_state {
  PC_RPC_FRAME_MORE,  /* the bytes so far do not decide: read more */
  PC_RPC_FRAME_READY, /* a whole frame: 4 + len bytes, its payload after hlen */
  PC_RPC_FRAME_BAD    /* the connection cannot go on: fault says why */
} pc_rpc_frame_state_t;

typedef struct pc_rpc_frame {
  uint32_t len;      /* the length field: the bytes after it */
  uint8_t version;   /* 0 before its byte is received */
  int known;         /* version is one this side speaks */
  uint8_t op, status;
  uint64_t id;       /* op and id as far as received (0 before), for a server's fault reply */
  uint32_t budget_ms; /* version 2's budget field; 0 in version 1 */
  size_t hlen;       /* the bytes before the payload, the length field included */
  char fault[96];
} pc_rpc_frame_t;

/* head: the first min(avail, PC_RPC_FRAME_HDR) bytes of the avail bytes
 * received. reply: 1 on a client's side (every frame must be a reply). */
pc_rpc_frame_state_t pc_rpc_frame_read(const unsigned char *head, size_t avail, uint32_t max_frame,
                                       int reply, pc_rpc_frame_t *f);

#endif
