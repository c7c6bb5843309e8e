/* rpc_peers.c — connection counts per peer address (net/rpc_peers.h): a
 * chained hash table keyed by the 16-byte address, an entry per address
 * that holds connections, so it never outgrows the connections themselves. */
#include "net/rpc_peers.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define BUCKETS 1024

typedef struct entry {
  struct entry *next;
  rpc_peer_key_t key;
  uint32_t count;
} entry_t;

struct rpc_peers {
  entry_t *buckets[BUCKETS];
};

rpc_peers_t *rpc_peers_create(void) { return calloc(1, sizeof(rpc_peers_t)); }

void rpc_peers_free(rpc_peers_t *p) {
  if (!p) return;
  for (size_t b = 0; b < BUCKETS; b++)
    for (entry_t *e = p->buckets[b], *next; e; e = next) {
      next = e->next;
      free(e);
    }
  free(p);
}

rpc_peer_key_t rpc_peer_key(const struct sockaddr *sa) {
  rpc_peer_key_t k;
  memset(&k, 0, sizeof k);
  if (sa && sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    k.addr[10] = k.addr[11] = 0xff;
    memcpy(k.addr + 12, &in->sin_addr, 4);
  } else if (sa && sa->sa_family == AF_INET6) {
    memcpy(k.addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  }
  return k;
}

static entry_t **slot(const rpc_peers_t *p, const rpc_peer_key_t *key) {
  size_t b = (size_t)(XXH3_64bits(key->addr, sizeof key->addr) % BUCKETS);
  entry_t **e = (entry_t **)&p->buckets[b];
  while (*e && memcmp((*e)->key.addr, key->addr, sizeof key->addr) != 0) e = &(*e)->next;
  return e;
}

uint32_t rpc_peers_count(const rpc_peers_t *p, const rpc_peer_key_t *key) {
  entry_t *e = *slot(p, key);
  return e ? e->count : 0;
}

int rpc_peers_add(rpc_peers_t *p, const rpc_peer_key_t *key) {
  entry_t **e = slot(p, key);
  if (!*e) {
    if (!(*e = calloc(1, sizeof **e))) return -1;
    (*e)->key = *key;
  }
  (*e)->count++;
  return 0;
}

void rpc_peers_remove(rpc_peers_t *p, const rpc_peer_key_t *key) {
  entry_t **e = slot(p, key);
  if (!*e) return;
  if (--(*e)->count == 0) {
    entry_t *gone = *e;
    *e = gone->next;
    free(gone);
  }
}
