/* fuzz_lockd.c — the lock service (lockservice/): its request handler
 * against any sequence of requests, and its client's decoding of any INFO
 * reply. Kept apart from the other targets, to go with lockd when the lock
 * service moves to ZooKeeper.
 *
 * First byte even: the rest is a sequence of requests (chunks of
 * fuzz_util.h: tag = op, bytes = body) served by a new service; each is
 * answered or refused with a message, and a reply has the size its op
 * defines. Odd: the rest is a script of replies (fuzz_util.h's fake server)
 * that pc_ls_remote_info decodes: it returns a known status, and PC_OK only
 * for a well-formed reply. */
#include <string.h>

#include "core/error.h"
#include "core/keys.h"
#include "fuzz/fuzz.h"
#include "fuzz/fuzz_util.h"
#include "lockservice/lockservice.h"
#include "lockservice/ls_internal.h"
#include "net/rpc.h"

#define MAX_REQUESTS 16

static size_t reply_size(uint8_t op) {
  switch (op) {
    case PC_LS_OP_SESSION_OPEN: return 8;
    case PC_LS_OP_LIVENESS: return 1;
    case PC_LS_OP_LOCK_TRY: return 9;
    case PC_LS_OP_LOCK_HOLDER: return 8;
    case PC_LS_OP_INFO: return 12;
    case PC_LS_OP_OLDEST: return 16;
    default: return 0;
  }
}

static void serve(const uint8_t *data, size_t size) {
  pc_ls_t *ls = pc_ls_create();
  FUZZ_CHECK(ls != NULL);
  fuzz_chunks_t in = {data, size, 0};
  uint8_t op;
  const char *body;
  size_t len;
  for (int k = 0; k < MAX_REQUESTS && fuzz_next_chunk(&in, &op, &body, &len); k++) {
    pc_buf_t reply = {0};
    pc_error_t err;
    pc_error_clear(&err);
    pc_status_t st = pc_ls_rpc_handler(ls, op, body, len, &reply, &err);
    if (st != PC_OK) {
      FUZZ_CHECK(st <= PC_UNKNOWN && err.text[0]);
    } else {
      FUZZ_CHECK(reply.len == reply_size(op));
    }
    pc_buf_free(&reply);
  }
  pc_ls_destroy(ls);
}

static void info_reply(const uint8_t *data, size_t size) {
  static pc_rpc_client_t *client;
  uint16_t port = fuzz_fake_server_port();
  if (!client) {
    pc_error_t err;
    client = pc_rpc_client_create("127.0.0.1", port, NULL, &err);
    FUZZ_CHECK(client != NULL);
  }
  fuzz_fake_script(data, size);
  uint32_t epoch = 0;
  uint64_t sessions = 0;
  pc_error_t err;
  pc_status_t st = pc_ls_remote_info(client, 1000, &epoch, &sessions, &err);
  FUZZ_CHECK(st <= PC_UNKNOWN);
  /* the first chunk was the reply: u32 epoch u64 sessions, nothing more */
  if (st == PC_OK) FUZZ_CHECK(size >= 3 + 12 && (data[0] > PC_UNKNOWN || data[0] == PC_OK));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0)
    serve(data + 1, size - 1);
  else
    info_reply(data + 1, size - 1);
  return 0;
}
