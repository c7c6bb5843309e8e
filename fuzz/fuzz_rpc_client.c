/* fuzz_rpc_client.c — the rpc client's reader of reply frames (net/rpc.c)
 * against any bytes a server can send back. For each input a new client
 * calls op 0x10 on a peer of this process, a plain TCP socket that reads
 * the request (after HELLO when the client has a secret), answers with the
 * input's bytes and half-closes. The call must return a pc_status_t and,
 * when it succeeds, exactly the body of a reply frame for its id; nothing
 * crashes, leaks or hangs. First byte: bit 0 gives the client a secret. A
 * fresh client numbers its first call 1. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/keys.h"
#include "fuzz/fuzz.h"
#include "net/rpc.h"

static int listener = -1;
static uint16_t port;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *script;
static size_t script_len;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads frames until a complete one that is not HELLO: 0, or -1 when the
 * client went away first. */
static int read_request(int fd) {
  unsigned char buf[65536];
  size_t n = 0;
  for (;;) {
    while (n >= 4 && n - 4 >= be32(buf)) {
      uint32_t flen = be32(buf);
      if (flen >= PC_RPC_HEADER && buf[5] != PC_RPC_OP_HELLO) return 0;
      memmove(buf, buf + 4 + flen, n - 4 - flen);
      n -= 4 + flen;
    }
    if (n == sizeof buf) return -1;
    ssize_t r = recv(fd, buf + n, sizeof buf - n, 0);
    if (r <= 0) return -1;
    n += (size_t)r;
  }
}

static void *peer_main(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) continue;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (read_request(fd) == 0) {
      pthread_mutex_lock(&mu);
      size_t off = 0;
      while (off < script_len) {
        ssize_t w = send(fd, script + off, script_len - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
      }
      pthread_mutex_unlock(&mu);
      shutdown(fd, SHUT_WR);
      char sink[4096];
      while (recv(fd, sink, sizeof sink, 0) > 0) {
      }
    }
    close(fd);
  }
  return NULL;
}

static void start_peer(void) {
  signal(SIGPIPE, SIG_IGN);
  pc_log_set_level(PC_LOG_ERROR); /* a warning per hostile frame would drown the run */
  listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(listener >= 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  FUZZ_CHECK(bind(listener, (struct sockaddr *)&sa, sizeof sa) == 0);
  FUZZ_CHECK(listen(listener, 64) == 0);
  FUZZ_CHECK(getsockname(listener, (struct sockaddr *)&sa, &sl) == 0);
  port = ntohs(sa.sin_port);
  pthread_t t;
  FUZZ_CHECK(pthread_create(&t, NULL, peer_main, NULL) == 0);
  pthread_detach(t);
}

/* The body of the first well-formed OK reply frame to id 1 in the script
 * (what a successful call must return), or NULL. */
static const unsigned char *expected(const unsigned char *p, size_t n, size_t *blen) {
  size_t at = 0;
  while (n - at >= 4 + PC_RPC_HEADER) {
    uint32_t flen = be32(p + at);
    if (flen < PC_RPC_HEADER || n - at - 4 < flen) return NULL;
    const unsigned char *h = p + at + 4;
    uint64_t id = 0;
    for (int i = 0; i < 8; i++) id = id << 8 | h[3 + i];
    if (h[0] != PC_RPC_VERSION || !(h[1] & PC_RPC_OP_REPLY)) return NULL;
    if (id == 1) {
      *blen = flen - PC_RPC_HEADER;
      return h[2] == PC_OK ? h + PC_RPC_HEADER : NULL;
    }
    at += 4 + flen;
  }
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (listener < 0) start_peer();
  pthread_mutex_lock(&mu);
  free(script);
  script_len = size - 1;
  script = malloc(script_len ? script_len : 1);
  FUZZ_CHECK(script != NULL);
  memcpy(script, data + 1, script_len);
  pthread_mutex_unlock(&mu);

  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", port, (data[0] & 1) ? "fuzz" : NULL, &err);
  FUZZ_CHECK(c != NULL);
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, 0x10, "request", 7, 5000, &reply, &err);
  FUZZ_CHECK((unsigned)st <= PC_UNKNOWN);
  /* the peer always answers or closes at once: the call never waits out its
   * timeout (a reply may still carry PC_TIMEOUT as its status) */
  FUZZ_CHECK(!strstr(err.text, "no reply from"));
  if (st == PC_OK) {
    size_t blen = 0;
    const unsigned char *want = expected(data + 1, size - 1, &blen);
    FUZZ_CHECK(want != NULL && reply.len == blen &&
               (blen == 0 || memcmp(reply.p, want, blen) == 0));
  } else {
    FUZZ_CHECK(err.code == st && err.text[0]);
  }
  pc_buf_free(&reply);
  pc_rpc_client_destroy(c);
  return 0;
}
