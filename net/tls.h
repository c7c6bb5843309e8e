/* tls.h — TLS for the links of the protocol (net/rpc.h): the certificate a
 * process presents, the certificate authority it checks its peers against,
 * and what a peer's certificate name makes it, in the manner of TiKV's
 * cert-allowed-cn. One pc_tls_t serves both ends: a server requires a client
 * certificate signed by the CA (mutual authentication, for a client's use:
 * OpenSSL's purpose check refuses a certificate whose extendedKeyUsage
 * lacks clientAuth), and a client accepts a server only if its certificate
 * is signed by the CA, is for a server's use (serverAuth, when the
 * certificate says), and names a server (pc_tls_server_name), whatever the
 * address it was reached at: an address is no identity, and a data
 * client's certificate must never pass for a server's.
 *
 * Roles of a peer by its certificate's common name (CN):
 *   - in system_cn (or, without that list, the CN of this process's own
 *     certificate): PC_RPC_ROLE_SYSTEM;
 *   - else in allowed_cn, or any name when there is no allowed_cn list:
 *     PC_RPC_ROLE_DATA;
 *   - else refused.
 * Thread-safe; shared by reference counting. */
#ifndef PC_NET_TLS_H
#define PC_NET_TLS_H

#include <stddef.h>

#include <event2/bufferevent.h>
#include <event2/util.h>

#include <percolator/percolator.h>

#include "net/rpc.h"

typedef struct pc_tls_options {
  const char *ca_file, *cert_file, *key_file; /* PEM files, all required */
  /* where each file is named ("cluster.json:7:18: tls.cert_file"), for
   * messages; NULL: the key's name alone */
  const char *ca_at, *cert_at, *key_at;
  const char *const *allowed_cn; /* nallowed_cn 0: any name the CA signed */
  size_t nallowed_cn;
  const char *const *system_cn; /* nsystem_cn 0: the common name of cert_file */
  size_t nsystem_cn;
  const char *const *server_cn; /* nserver_cn 0: the names of the system, above */
  size_t nserver_cn;
} pc_tls_options_t;

/* Loads the certificates and key (refusing a key that does not match the
 * certificate and a certificate without a common name). Returns NULL with
 * err naming the file and OpenSSL's reason; release with pc_tls_unref. */
pc_tls_t *pc_tls_create(const pc_tls_options_t *o, pc_error_t *err);

/* Takes a reference; returns t. */
pc_tls_t *pc_tls_ref(pc_tls_t *t);
/* Drops a reference; the last one frees. NULL is a no-op. */
void pc_tls_unref(pc_tls_t *t);

/* The common name of this process's own certificate. */
const char *pc_tls_own_name(const pc_tls_t *t);

/* The role a peer presenting certificate name cn gets: PC_RPC_ROLE_SYSTEM,
 * PC_RPC_ROLE_DATA, or PC_RPC_ROLE_NONE (not allowed). */
pc_rpc_role_t pc_tls_role_of(const pc_tls_t *t, const char *cn);

/* Whether a server presenting certificate name cn is one this process talks
 * to: cn is in server_cn, or, without that list, is a name of the system
 * (system_cn, or the name of this process's own certificate). */
int pc_tls_server_name(const pc_tls_t *t, const char *cn);

/* The role server gives a client of its own process that holds client: as a
 * handshake would, client's certificate must be signed by server's CA, and
 * its name then decides (PC_RPC_ROLE_NONE when it is refused). */
pc_rpc_role_t pc_tls_local_role(const pc_tls_t *server, const pc_tls_t *client);

/* A bufferevent that accepts a TLS connection on fd (owning fd), or NULL. */
struct bufferevent *pc_tls_server_bev(pc_tls_t *t, struct event_base *base, evutil_socket_t fd);

/* A bufferevent over fd (owning it; connect it with bufferevent_socket_connect)
 * that opens a TLS connection to host (named to it, when a DNS name, for
 * servers that host several); the certificate's name is the caller's to
 * check once connected (pc_tls_peer_name, pc_tls_server_name). NULL on
 * allocation failure. */
struct bufferevent *pc_tls_client_bev(pc_tls_t *t, struct event_base *base, evutil_socket_t fd,
                                      const char *host);

/* After the handshake: copies the common name of the peer's certificate into
 * name (cap bytes). Returns 0, or -1 when there is none or it is malformed
 * (embedded NUL, too long). */
int pc_tls_peer_name(struct bufferevent *bev, char *name, size_t cap);

/* Why TLS failed on bev (OpenSSL's errors and the certificate check's
 * verdict), as text in out: beginning with PC_TLS_PEER_CERT when this end
 * refused the peer's certificate. Returns 1 when TLS itself failed (a
 * certificate refused or unusable, a TLS alert), 0 when nothing says so
 * (the peer just closed, or the socket failed). */
#define PC_TLS_PEER_CERT "TLS: the peer's certificate"
int pc_tls_failure(struct bufferevent *bev, char *out, size_t cap);

#endif
