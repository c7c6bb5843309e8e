/* fuzz_rpc_server.c — the rpc server's frame reader (net/rpc_server.c)
 * against any bytes a peer can send on a connection: each input is sent on a
 * new connection to a real server of this process (a socketpair whose end
 * the server adopts as if accepted from 127.0.0.1, pc_rpc_server_test_adopt:
 * no TCP handshake, no port per input), which is then half-closed; the
 * server must answer with well-formed reply frames only, and close the
 * connection (it does when the peer has nothing more to send), never crash
 * or hang. First byte: bit 0 picks the server with a secret ("fuzz", so the
 * first frame must be HELLO), the rest is sent.
 *
 * The handler echoes the body of ops 0x10..0x3f (0x11 on the I/O thread),
 * fails 0x40..0x7f with a message, and the frame limit is 4 KiB, so that
 * every branch of the reader is within reach of small inputs. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "core/keys.h"
#include "fuzz/fuzz.h"
#include "net/rpc.h"

#define MAX_FRAME 4096u

static pc_rpc_server_t *servers[2];

static pc_status_t echo(void *ctx, uint8_t op, const char *body, size_t len, pc_buf_t *reply,
                        pc_error_t *err) {
  (void)ctx;
  if (op >= 0x40) return pc_error_set(err, PC_INVALID, "op 0x%02x fails here", op);
  return pc_buf_append(reply, body, len) ? pc_error_set(err, PC_NOMEM, "out of memory") : PC_OK;
}

static int inline_op(uint8_t op) { return op == 0x11; }

static void start_servers(void) {
  signal(SIGPIPE, SIG_IGN);
  pc_log_set_level(PC_LOG_ERROR); /* a warning per hostile frame would drown the run */
  for (int i = 0; i < 2; i++) {
    pc_rpc_server_options_t o = {0};
    o.name = i ? "fuzz-secret" : "fuzz";
    o.host = "127.0.0.1";
    static const pc_rpc_auth_t secret = {.secret = "fuzz"};
    o.auth = i ? &secret : NULL;
    o.workers = 2;
    o.max_frame = MAX_FRAME;
    o.max_inflight = 4;
    o.frame_timeout_ms = 2000;
    o.runs_inline = inline_op;
    pc_error_t err;
    servers[i] = pc_rpc_server_start(&o, echo, NULL, &err);
    if (!servers[i]) fprintf(stderr, "server: %s\n", err.text);
    FUZZ_CHECK(servers[i] != NULL);
  }
  /* the servers serve until the process ends, as a daemon's do: stopped
   * at exit, their threads' OpenSSL state (the secret's random generator
   * and error queue, made on the first HELLO) was reported as leaked by the
   * leak check of libFuzzer's binaries, which an ordinary ASan program
   * stopping a server does not see */
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Every frame the server sent is a well-formed reply (a last one may be
 * cut off only if the server closed mid-write, which it must not). */
static void check_replies(const unsigned char *p, size_t n) {
  size_t at = 0;
  while (at < n) {
    FUZZ_CHECK(n - at >= 4 + PC_RPC_HEADER_V1);
    uint32_t flen = be32(p + at);
    /* in the version of the request, or 1 (every version's start) */
    FUZZ_CHECK(p[at + 4] == PC_RPC_VERSION || p[at + 4] == PC_RPC_VERSION_1);
    uint32_t hl = p[at + 4] == PC_RPC_VERSION ? PC_RPC_HEADER : PC_RPC_HEADER_V1;
    FUZZ_CHECK(flen >= hl && flen <= MAX_FRAME && n - at - 4 >= flen);
    FUZZ_CHECK(p[at + 5] & PC_RPC_OP_REPLY);
    FUZZ_CHECK(p[at + 6] <= PC_STATUS_MAX);
    at += 4 + flen;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (!servers[0]) start_servers();
  pc_rpc_server_t *s = servers[data[0] & 1];
  int sv[2];
  FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  FUZZ_CHECK(pc_rpc_server_test_adopt(s, sv[1]) == 0);
  int fd = sv[0];
  /* a server that hangs fails the input instead of the run */
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t off = 1;
  while (off < size) {
    ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (w <= 0) break; /* the server closed: it may, after a fault */
    off += (size_t)w;
  }
  shutdown(fd, SHUT_WR);
  unsigned char *in = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (cap - n < 4096) {
      cap = cap ? 2 * cap : 8192;
      in = realloc(in, cap);
      FUZZ_CHECK(in != NULL);
    }
    ssize_t r = recv(fd, in + n, cap - n, 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) break;
    if (r < 0 && errno == EINTR) continue;
    FUZZ_CHECK(r > 0); /* EAGAIN: the server neither answered nor closed in 10 s */
    n += (size_t)r;
  }
  close(fd);
  check_replies(in, n);
  free(in);
  return 0;
}
