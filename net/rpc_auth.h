/* rpc_auth.h — the credentials of the protocol's two ends, inside net/: owned
 * copies of a pc_rpc_auth_t, the secret's challenge-response (HMAC-SHA256
 * over both ends' nonces, compared in constant time), and the role a peer's
 * credentials give it (rpc.h, "Authentication" and "Identity"). */
#ifndef PC_NET_RPC_AUTH_H
#define PC_NET_RPC_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "net/rpc.h"

typedef struct rpc_creds {
  char *secret, *system_secret; /* owned; NULL when none */
  size_t secret_len, system_len;
  pc_tls_t *tls;                /* a reference; NULL: plain TCP */
} rpc_creds_t;

/* Copies a (NULL or empty strings: none). Returns 0, or -1 out of memory. */
int rpc_creds_init(rpc_creds_t *c, const pc_rpc_auth_t *a);
void rpc_creds_free(rpc_creds_t *c);

/* A server with a secret requires HELLO and AUTH; a client with one sends them. */
int rpc_creds_has_secret(const rpc_creds_t *c);

/* A client's secret to present: the system secret when it has one (which 1),
 * else the secret (which 0); NULL when it has neither. */
const char *rpc_creds_presented(const rpc_creds_t *c, size_t *len, uint8_t *which);

/* Fills buf with n bytes from the system's cryptographic generator; 0 or -1. */
int rpc_random(unsigned char *buf, size_t n);

/* HMAC-SHA256(key, label || a || b) with a and b PC_RPC_NONCE bytes each. */
void rpc_mac(const char *key, size_t klen, const char *label, const unsigned char *a,
             const unsigned char *b, unsigned char out[PC_RPC_MAC]);

#define RPC_LABEL_CLIENT "percolator client"
#define RPC_LABEL_SERVER "percolator server"

/* The server's side of AUTH: checks payload (u8 which, the client's MAC)
 * against the nonces in constant time. Returns the role it proves
 * (PC_RPC_ROLE_NONE when wrong) and, when right, the server's proof. */
pc_rpc_role_t rpc_auth_check(const rpc_creds_t *server, const unsigned char *payload, size_t len,
                             const unsigned char snonce[PC_RPC_NONCE],
                             const unsigned char cnonce[PC_RPC_NONCE],
                             unsigned char proof[PC_RPC_MAC]);

/* The lower of two roles (both gates must grant the system identity). */
static inline pc_rpc_role_t rpc_role_min(pc_rpc_role_t a, pc_rpc_role_t b) {
  return a < b ? a : b;
}

/* The role a server with credentials server gives a client of its own
 * process holding client, as it would over a socket; PC_RPC_ROLE_NONE when
 * the network would refuse it (the client then goes over the network and is
 * refused there, with the reason). */
pc_rpc_role_t rpc_local_role(const rpc_creds_t *server, const rpc_creds_t *client);

#endif
