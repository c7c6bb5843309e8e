/* fuzz_rpc_client.c — the rpc client's reader of reply frames
 * (net/rpc_client.c) against any bytes a server can send back. For each
 * input a new client calls op 0x10 over a socketpair that its connection
 * hook hands it instead of a TCP connection (pc_rpc_client_test_create: the
 * client's event loop runs on this thread, so an input costs no thread and
 * no wake-up): the peer's end already holds the input's bytes and is
 * half-closed, as a server that answered at once and closed. A fresh client
 * numbers its first call 1. First byte: bit 0 gives the client a secret.
 *
 * Properties: the call returns a pc_status_t with a message and never
 * waits out its timeout (a reply may still carry PC_TIMEOUT as its status);
 * it succeeds only with exactly the body of a well-formed OK reply frame to
 * its id; nothing crashes, leaks or hangs. A client without a secret sends
 * its call as soon as it is connected, so it never connects twice for it.
 *
 * A client with a secret whose HELLO the input neither completes nor refuses
 * (a reply to another id, a frame cut short) keeps its call queued and
 * connects again, which a real server would answer: here every attempt
 * after the first gets a peer that refuses the HELLO (an error reply to id
 * 0), so the call ends at once with PC_DENIED instead of retrying until its
 * deadline (and does not connect again). The hook skips the backoff between attempts; the backoff itself
 * is tested in tests/test_rpc_replies.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "core/keys.h"
#include "fuzz/fuzz.h"
#include "net/rpc.h"

#define REFUSAL "the fuzz peer has nothing more to say"
#define MAX_PEERS 8

/* One input's connections: the peer ends, closed when the input is done. */
typedef struct peer {
  const unsigned char *script;
  size_t script_len;
  int ends[MAX_PEERS];
  int attempts;
} peer_t;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Writes what fits of p[0..n) into fd's buffer without blocking, then
 * half-closes: the client reads it all, then end of file. */
static void preload(int fd, const unsigned char *p, size_t n) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  size_t off = 0;
  while (off < n) {
    ssize_t w = send(fd, p + off, n - off, MSG_NOSIGNAL);
    if (w <= 0) break; /* full (inputs past the socket's buffer are cut there) */
    off += (size_t)w;
  }
  shutdown(fd, SHUT_WR);
}

/* The client's connector: a socketpair whose other end has the input (first
 * attempt) or a refusal of the HELLO (later ones). */
static int connect_peer(void *ctx) {
  peer_t *pe = ctx;
  FUZZ_CHECK(pe->attempts < MAX_PEERS); /* a refused client stops connecting */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  pe->ends[pe->attempts++] = sv[1];
  if (pe->attempts == 1) {
    preload(sv[1], pe->script, pe->script_len);
  } else {
    unsigned char f[4 + PC_RPC_HEADER + sizeof REFUSAL - 1] = {0};
    size_t flen = sizeof f - 4;
    f[3] = (unsigned char)flen;
    f[4] = PC_RPC_VERSION;
    f[5] = PC_RPC_OP_HELLO | PC_RPC_OP_REPLY;
    f[6] = PC_DENIED; /* id 0 and budget 0 */
    memcpy(f + 4 + PC_RPC_HEADER, REFUSAL, sizeof REFUSAL - 1);
    preload(sv[1], f, sizeof f);
  }
  return sv[0];
}

/* The body of the first well-formed OK reply frame to id 1 in the script
 * (what a successful call must return), or NULL. */
static const unsigned char *expected(const unsigned char *p, size_t n, size_t *blen) {
  size_t at = 0;
  while (n - at >= 4 + PC_RPC_HEADER_V1) {
    uint32_t flen = be32(p + at);
    const unsigned char *h = p + at + 4;
    if (h[0] != PC_RPC_VERSION && h[0] != PC_RPC_VERSION_1) return NULL;
    uint32_t hl = h[0] == PC_RPC_VERSION ? PC_RPC_HEADER : PC_RPC_HEADER_V1;
    if (flen < hl || n - at - 4 < flen) return NULL;
    uint64_t id = 0;
    for (int i = 0; i < 8; i++) id = id << 8 | h[3 + i];
    if (!(h[1] & PC_RPC_OP_REPLY)) return NULL;
    if (id == 1) {
      *blen = flen - hl;
      return h[2] == PC_OK ? h + hl : NULL;
    }
    at += 4 + flen;
  }
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (size == 0) return 0;
  if (!ready) {
    signal(SIGPIPE, SIG_IGN);
    pc_log_set_level(PC_LOG_ERROR); /* a warning per hostile frame would drown the run */
    ready = 1;
  }
  int secret = data[0] & 1;
  peer_t pe = {data + 1, size - 1, {0}, 0};

  pc_error_t err;
  pc_rpc_auth_t auth = {.secret = "fuzz"};
  /* the port is never connected to: the hook gives the socket */
  pc_rpc_client_t *c =
      pc_rpc_client_test_create("127.0.0.1", 9, secret ? &auth : NULL, connect_peer, &pe, &err);
  FUZZ_CHECK(c != NULL);
  pc_buf_t reply = {0};
  pc_rpc_pending_t *p = pc_rpc_start(c, 0x10, "request", 7, 5000, &err);
  FUZZ_CHECK(p != NULL);
  pc_status_t st = pc_rpc_test_finish(p, &reply, NULL, &err);
  pc_rpc_client_destroy(c);
  FUZZ_CHECK((unsigned)st <= PC_STATUS_MAX);
  /* the client's own timeout says "no reply from"; an error reply may say
   * anything, that too */
  static const char timed_out[] = "no reply from";
  FUZZ_CHECK(!strstr(err.text, timed_out) ||
             memmem(data + 1, size - 1, timed_out, sizeof timed_out - 1) != NULL);
  FUZZ_CHECK(pe.attempts >= 1 && (secret || pe.attempts == 1));
  if (st == PC_OK) {
    size_t blen = 0;
    const unsigned char *want = expected(data + 1, size - 1, &blen);
    FUZZ_CHECK(want != NULL && reply.len == blen &&
               (blen == 0 || memcmp(reply.p, want, blen) == 0));
  } else {
    FUZZ_CHECK(err.code == st && err.text[0]);
  }
  pc_buf_free(&reply);
  for (int i = 0; i < pe.attempts; i++) close(pe.ends[i]);
  return 0;
}
