/* rpc_int.h — what net/rpc_server.c and net/rpc_client.c share inside net/
 * (net/rpc_common.c defines it): the frame header's layout and writer, the
 * start of the library's threads, the handing of frames to a connection's
 * output, and the in-process endpoints a server registers (rpc_server.c)
 * and a client of the same process calls. Not for use outside net/. */
#ifndef PC_NET_RPC_INT_H
#define PC_NET_RPC_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/util.h>

#include "net/rpc.h"
#include "net/rpc_auth.h"

#define PREFIX 4                        /* the length field */
#define HDR (PREFIX + PC_RPC_HEADER)    /* 19 bytes before the payload (version 2) */
#define HDR_V1 (PREFIX + PC_RPC_HEADER_V1) /* 15 (version 1) */
#define AUTH_REQUIRED "authentication required" /* a server's answer to a frame before HELLO */

/* Frames (or reply bodies) up to COPY_MAX bytes are copied into a
 * connection's output buffer, where they join what is queued before them;
 * larger ones are handed over without a copy. A TLS link encrypts each
 * chunk of the buffer as a record of its own and writes each record with a
 * system call of its own (bufferevent_openssl writes chunk by chunk), so a
 * reply whose header and body were separate chunks cost two records, and
 * pipelined frames one each; copied, the frames queued together go out as
 * one record. 16 KiB is a TLS record's most plaintext. */
#define COPY_MAX (16u << 10)

/* 0 once libevent runs with pthreads (done once per process), else -1 and err. */
int rpc_lib_ready(pc_error_t *err);

/* Starts fn(arg) with every signal blocked in the new thread. */
int rpc_start_thread(pthread_t *t, void *(*fn)(void *), void *arg);

/* Writes the header of a frame of version v before a payload of plen bytes;
 * returns its length. budget_ms only in version 2. */
size_t rpc_put_header(unsigned char h[HDR], uint8_t v, size_t plen, uint8_t op, uint8_t status,
                      uint64_t id, uint32_t budget_ms);

struct timeval rpc_ms_tv(uint32_t ms);

/* "host:port", with brackets around IPv6 hosts. */
void rpc_format_endpoint(char *out, size_t cap, const char *host, unsigned port);

void rpc_set_nodelay(evutil_socket_t fd);

/* An evbuffer cleanup function freeing data (malloc'd). */
void rpc_free_reference(const void *data, size_t len, void *arg);

/* Appends frame p[0..len) to out, which then owns p (malloc'd): copied and
 * freed when small, else by reference. 0, or -1 (out of memory; p still the
 * caller's). */
int rpc_out_add_owned(struct evbuffer *out, void *p, size_t len);

/* ---- in-process endpoints (rpc_server.c) ---- */

typedef struct local_ep local_ep_t;

/* The endpoint serving host:port in this process that admits creds (a
 * reference, a connection id in *cid and the role in *role), or NULL. */
local_ep_t *rpc_local_find(const char *host, uint16_t port, const rpc_creds_t *creds,
                           uint64_t *cid, pc_rpc_role_t *role);

/* A client of e goes: its connection closes, then its reference. */
void rpc_local_release(local_ep_t *e, uint64_t cid);

/* pc_rpc_call's in-process path: the handler on this thread, within the
 * caller's deadline and timeout_ms. *reached = 0 when the server had
 * stopped, so that nothing ran. */
pc_status_t rpc_local_call(local_ep_t *e, uint64_t cid, pc_rpc_role_t role,
                           const char *endpoint, uint8_t op, const void *body, size_t len,
                           uint32_t timeout_ms, pc_buf_t *reply, int *reached,
                           pc_error_t *err);

#endif
