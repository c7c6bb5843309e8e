/* rpc_common.c — what the two sides of the protocol (net/rpc_server.c,
 * net/rpc_client.c) share, declared in net/rpc_int.h: libevent's thread
 * support, threads started with every signal blocked, the writer of a
 * frame's header, and the handing of frames to a connection's output. */
#include "net/rpc_int.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/thread.h>

#include "base/error.h"

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_threads_rc = -1;

static void lib_init(void) { lib_threads_rc = evthread_use_pthreads(); }

int rpc_lib_ready(pc_error_t *err) {
  pthread_once(&lib_once, lib_init);
  if (lib_threads_rc != 0) {
    pc_error_set(err, PC_INTERNAL, "libevent: evthread_use_pthreads failed");
    return -1;
  }
  return 0;
}

/* Starts fn(arg) with every signal blocked in the new thread. */
int rpc_start_thread(pthread_t *t, void *(*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(t, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

/* The bytes before the payload of a frame of version v (1 or 2). */
static size_t header_len(uint8_t v) { return v == PC_RPC_VERSION_1 ? HDR_V1 : HDR; }

/* Writes the header of a frame of version v before a payload of plen bytes;
 * returns its length. budget_ms only in version 2. */
size_t rpc_put_header(unsigned char h[HDR], uint8_t v, size_t plen, uint8_t op, uint8_t status,
                      uint64_t id, uint32_t budget_ms) {
  size_t hl = header_len(v);
  uint32_t len = (uint32_t)(hl - PREFIX + plen);
  h[0] = (unsigned char)(len >> 24);
  h[1] = (unsigned char)(len >> 16);
  h[2] = (unsigned char)(len >> 8);
  h[3] = (unsigned char)len;
  h[4] = v;
  h[5] = op;
  h[6] = status;
  for (int i = 0; i < 8; i++) h[7 + i] = (unsigned char)(id >> (56 - 8 * i));
  if (hl == HDR)
    for (int i = 0; i < 4; i++) h[15 + i] = (unsigned char)(budget_ms >> (24 - 8 * i));
  return hl;
}

struct timeval rpc_ms_tv(uint32_t ms) {
  struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
  return tv;
}

/* "host:port", with brackets around IPv6 hosts. */
void rpc_format_endpoint(char *out, size_t cap, const char *host, unsigned port) {
  if (strchr(host, ':'))
    snprintf(out, cap, "[%s]:%u", host, port);
  else
    snprintf(out, cap, "%s:%u", host, port);
}

void rpc_set_nodelay(evutil_socket_t fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void rpc_free_reference(const void *data, size_t len, void *arg) {
  (void)len;
  (void)arg;
  free((void *)data);
}

/* Appends frame p[0..len) to out, which then owns p (malloc'd): copied and
 * freed when small, else by reference. 0, or -1 (out of memory; p still the
 * caller's). */
int rpc_out_add_owned(struct evbuffer *out, void *p, size_t len) {
  if (len > COPY_MAX) return evbuffer_add_reference(out, p, len, rpc_free_reference, NULL);
  if (evbuffer_add(out, p, len) != 0) return -1;
  free(p);
  return 0;
}
