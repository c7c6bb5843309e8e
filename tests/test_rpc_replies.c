/* test_rpc_replies.c — the rpc client (net/rpc_client.c) against a server
 * that sends frames no well-behaved server sends: a plain socket of this process
 * reads the client's request and answers with given bytes. The cases are
 * the ones fuzz/fuzz_rpc_client found; each call must end with a status of
 * percolator.h and a message that says what failed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "net/rpc.h"

typedef struct peer {
  int listener;
  uint16_t port;
  const unsigned char *answer;
  size_t len;
  int every;          /* answer every connection until stopped, not only the first */
  int connections;    /* accepted */
  pthread_t thread;
} peer_t;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void answer_one(peer_t *p, int fd);

/* Accepts one connection (or each, with every), reads one whole frame,
 * answers, half-closes and waits for the client to close. */
static void *peer_main(void *arg) {
  peer_t *p = arg;
  do {
    int fd = accept(p->listener, NULL, NULL);
    if (fd < 0) return NULL;
    p->connections++;
    answer_one(p, fd);
  } while (p->every);
  return NULL;
}

static void answer_one(peer_t *p, int fd) {
  unsigned char buf[4096];
  size_t n = 0;
  while (n < 4 || n - 4 < be32(buf)) {
    ssize_t r = recv(fd, buf + n, sizeof buf - n, 0);
    if (r <= 0) break;
    n += (size_t)r;
  }
  if (send(fd, p->answer, p->len, MSG_NOSIGNAL) < 0) {
    close(fd);
    return;
  }
  shutdown(fd, SHUT_WR);
  while (recv(fd, buf, sizeof buf, 0) > 0) {
  }
  close(fd);
}

static void peer_start(peer_t *p, const unsigned char *answer, size_t len) {
  p->answer = answer;
  p->len = len;
  p->connections = 0;
  p->listener = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(p->listener >= 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  assert_int_equal(bind(p->listener, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(p->listener, 4), 0);
  assert_int_equal(getsockname(p->listener, (struct sockaddr *)&sa, &sl), 0);
  p->port = ntohs(sa.sin_port);
  assert_int_equal(pthread_create(&p->thread, NULL, peer_main, p), 0);
}

static void peer_stop(peer_t *p) {
  if (p->every) shutdown(p->listener, SHUT_RDWR); /* wakes its accept */
  pthread_join(p->thread, NULL);
  close(p->listener);
}

/* A reply frame: length, version 1, op, status, id, body. */
static size_t frame(unsigned char *out, uint8_t op, uint8_t status, uint64_t id, const char *body,
                    size_t blen) {
  uint32_t len = (uint32_t)(PC_RPC_HEADER_V1 + blen);
  out[0] = (unsigned char)(len >> 24);
  out[1] = (unsigned char)(len >> 16);
  out[2] = (unsigned char)(len >> 8);
  out[3] = (unsigned char)len;
  out[4] = PC_RPC_VERSION_1; /* what a server answers a request of version 1 in */
  out[5] = op;
  out[6] = status;
  for (int i = 0; i < 8; i++) out[7 + i] = (unsigned char)(id >> (56 - 8 * i));
  memcpy(out + 15, body, blen);
  return 15 + blen;
}

/* An error reply without a message: the call's message names the status
 * (it used to be empty, saying nothing of what failed). */
static void test_error_reply_without_message(void **state) {
  (void)state;
  unsigned char answer[64];
  size_t n = frame(answer, 0x90, PC_CONFLICT, 1, "", 0);
  peer_t p;
  peer_start(&p, answer, n);
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", p.port, NULL, &err);
  assert_non_null(c);
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, 0x10, "q", 1, 5000, &reply, &err);
  assert_int_equal(st, PC_CONFLICT);
  assert_int_equal(err.code, PC_CONFLICT);
  assert_string_equal(err.text, pc_status_name(PC_CONFLICT));
  assert_int_equal(reply.len, 0);
  pc_rpc_client_destroy(c);
  peer_stop(&p);
}

/* A frame that is not a reply fails the call with a protocol error, at once. */
static void test_frame_that_is_not_a_reply(void **state) {
  (void)state;
  unsigned char answer[64];
  size_t n = frame(answer, 0x10, PC_OK, 1, "x", 1);
  peer_t p;
  peer_start(&p, answer, n);
  pc_error_t err;
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", p.port, NULL, &err);
  assert_non_null(c);
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, 0x10, "q", 1, 5000, &reply, &err);
  assert_int_equal(st, PC_UNAVAILABLE);
  assert_non_null(strstr(err.text, "protocol error: a frame that is not a reply"));
  pc_rpc_client_destroy(c);
  peer_stop(&p);
}

/* A server that answers the secret's HELLO with a reply to an id the client
 * never sent, then closes, every time: a frame that answers nothing asked is
 * no sign the link works, so the client waits longer and longer between its
 * attempts (it took it for one and retried every 10 ms until the call's
 * deadline: 150 connections in 2 s). */
static void test_stray_reply_is_no_sign_of_life(void **state) {
  (void)state;
  unsigned char answer[64];
  size_t n = frame(answer, PC_RPC_OP_HELLO | PC_RPC_OP_REPLY, PC_OK, 12, "", 0);
  peer_t p = {.every = 1};
  peer_start(&p, answer, n);
  pc_error_t err;
  pc_rpc_auth_t auth = {.secret = "s3cret"};
  pc_rpc_client_t *c = pc_rpc_client_create("127.0.0.1", p.port, &auth, &err);
  assert_non_null(c);
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(c, 0x10, "q", 1, 2000, &reply, &err);
  assert_int_not_equal(st, PC_OK);
  assert_true(err.text[0] != '\0');
  pc_rpc_client_destroy(c);
  peer_stop(&p);
  /* backoff from 10 ms doubling to 1 s: about 8 attempts in 2 s */
  if (p.connections > 20) fail_msg("%d connections in the call's 2 s", p.connections);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_reply_without_message),
      cmocka_unit_test(test_frame_that_is_not_a_reply),
      cmocka_unit_test(test_stray_reply_is_no_sign_of_life),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
