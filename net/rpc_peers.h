/* rpc_peers.h — inside net/: how many connections each peer address holds
 * on one server, for limits.max_connections_per_peer. Used by one thread
 * (the server's loop). */
#ifndef PC_NET_RPC_PEERS_H
#define PC_NET_RPC_PEERS_H

#include <stdint.h>
#include <sys/socket.h>

/* A peer's address: IPv4 as IPv4-mapped IPv6, so that both forms count as one. */
typedef struct rpc_peer_key {
  uint8_t addr[16];
} rpc_peer_key_t;

typedef struct rpc_peers rpc_peers_t;

rpc_peers_t *rpc_peers_create(void);
void rpc_peers_free(rpc_peers_t *p);

/* The key of sa (a zero key for other families). */
rpc_peer_key_t rpc_peer_key(const struct sockaddr *sa);

/* The connections key holds now. */
uint32_t rpc_peers_count(const rpc_peers_t *p, const rpc_peer_key_t *key);

/* Counts one more connection of key; 0, or -1 out of memory. */
int rpc_peers_add(rpc_peers_t *p, const rpc_peer_key_t *key);

/* Counts one fewer (the entry goes at zero). */
void rpc_peers_remove(rpc_peers_t *p, const rpc_peer_key_t *key);

#endif
