/* tls.c — TLS contexts for the protocol's links (net/tls.h) on OpenSSL, and
 * the libevent bufferevents (bufferevent_openssl) that carry a connection
 * through them. One server and one client SSL_CTX per pc_tls_t, both with the
 * same certificate, key and CA, TLS 1.2 at least, no renegotiation (a peer
 * could make the server redo handshakes at will) and no compression. Each
 * end checks the other's certificate for its use (OpenSSL's purpose check,
 * which a verifying client and server make by default: sslserver and
 * sslclient); which names a client takes for servers is pc_tls_server_name. */
#include "net/tls.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/error.h"

#define CN_MAX 256

struct pc_tls {
  atomic_int refs;
  SSL_CTX *server, *client;
  char own[CN_MAX];
  char **allowed, **system, **servers; /* owned copies */
  size_t nallowed, nsystem, nservers;
};

/* The most recent OpenSSL error of this thread as text ("" when none); clears the queue. */
static void last_error(char *out, size_t cap) {
  unsigned long e, last = 0;
  while ((e = ERR_get_error()) != 0) last = e;
  if (last)
    ERR_error_string_n(last, out, cap);
  else
    snprintf(out, cap, "unknown error");
}

static void free_names(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

static char **copy_names(const char *const *v, size_t n) {
  char **out = calloc(n ? n : 1, sizeof *out);
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++)
    if (!(out[i] = strdup(v[i]))) {
      free_names(out, i);
      return NULL;
    }
  return out;
}

/* The subject's common name of x into out; 0, or -1 when absent or malformed. */
static int cert_cn(X509 *x, char *out, size_t cap) {
  X509_NAME *subject = x ? X509_get_subject_name(x) : NULL;
  int idx = subject ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  if (idx < 0) return -1;
  ASN1_STRING *s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx));
  const unsigned char *p = ASN1_STRING_get0_data(s);
  int len = ASN1_STRING_length(s);
  /* a name with a NUL inside would compare equal to its prefix */
  if (!p || len <= 0 || (size_t)len >= cap || memchr(p, '\0', (size_t)len)) return -1;
  memcpy(out, p, (size_t)len);
  out[len] = '\0';
  return 0;
}

static const char *at_or(const char *at, const char *key) { return at ? at : key; }

static SSL_CTX *new_ctx(const pc_tls_options_t *o, int server, pc_error_t *err) {
  char why[256];
  SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) {
    last_error(why, sizeof why);
    pc_error_set(err, PC_NOMEM, "tls: cannot create a context: %s", why);
    return NULL;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  /* a peer that closes without close_notify just closed (the protocol's
   * framing tells a cut-off frame apart): OpenSSL 3 would otherwise report
   * it as an error, which libevent does not take for an end of stream */
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               SSL_OP_IGNORE_UNEXPECTED_EOF);
  /* a server asks every client for its certificate and refuses one without */
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
  SSL_CTX_set_verify_depth(ctx, 8);
  if (SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) != 1) {
    last_error(why, sizeof why);
    pc_error_set(err, PC_INVALID, "%s: cannot load CA certificates from '%s': %s",
                 at_or(o->ca_at, "tls.ca_file"), o->ca_file, why);
  } else if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
    last_error(why, sizeof why);
    pc_error_set(err, PC_INVALID, "%s: cannot load a certificate from '%s': %s",
                 at_or(o->cert_at, "tls.cert_file"), o->cert_file, why);
  } else if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
    last_error(why, sizeof why);
    pc_error_set(err, PC_INVALID, "%s: cannot load a private key from '%s': %s",
                 at_or(o->key_at, "tls.key_file"), o->key_file, why);
  } else if (SSL_CTX_check_private_key(ctx) != 1) {
    last_error(why, sizeof why);
    pc_error_set(err, PC_INVALID, "%s: the key in '%s' does not match the certificate in '%s'",
                 at_or(o->key_at, "tls.key_file"), o->key_file, o->cert_file);
  } else {
    if (server) {
      /* the names of the CA, sent to clients so they pick the right certificate */
      STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->ca_file);
      if (names) SSL_CTX_set_client_CA_list(ctx, names);
    }
    return ctx;
  }
  SSL_CTX_free(ctx);
  return NULL;
}

pc_tls_t *pc_tls_create(const pc_tls_options_t *o, pc_error_t *err) {
  if (!o || !o->ca_file || !o->cert_file || !o->key_file) {
    pc_error_set(err, PC_INVALID, "tls: ca_file, cert_file and key_file are all required");
    return NULL;
  }
  pc_tls_t *t = calloc(1, sizeof *t);
  if (!t) {
    pc_error_set(err, PC_NOMEM, "tls: out of memory");
    return NULL;
  }
  atomic_init(&t->refs, 1);
  t->server = new_ctx(o, 1, err);
  t->client = t->server ? new_ctx(o, 0, err) : NULL;
  if (!t->client) {
    pc_tls_unref(t);
    return NULL;
  }
  if (cert_cn(SSL_CTX_get0_certificate(t->server), t->own, sizeof t->own) != 0) {
    pc_error_set(err, PC_INVALID, "%s: the certificate in '%s' has no usable common name (CN)",
                 at_or(o->cert_at, "tls.cert_file"), o->cert_file);
    pc_tls_unref(t);
    return NULL;
  }
  t->allowed = copy_names(o->allowed_cn, o->nallowed_cn);
  t->system = copy_names(o->system_cn, o->nsystem_cn);
  t->servers = copy_names(o->server_cn, o->nserver_cn);
  if (!t->allowed || !t->system || !t->servers) {
    pc_error_set(err, PC_NOMEM, "tls: out of memory");
    pc_tls_unref(t);
    return NULL;
  }
  t->nallowed = o->nallowed_cn;
  t->nsystem = o->nsystem_cn;
  t->nservers = o->nserver_cn;
  pc_error_clear(err);
  return t;
}

pc_tls_t *pc_tls_ref(pc_tls_t *t) {
  if (t) atomic_fetch_add(&t->refs, 1);
  return t;
}

void pc_tls_unref(pc_tls_t *t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
  SSL_CTX_free(t->server);
  SSL_CTX_free(t->client);
  free_names(t->allowed, t->nallowed);
  free_names(t->system, t->nsystem);
  free_names(t->servers, t->nservers);
  free(t);
}

const char *pc_tls_own_name(const pc_tls_t *t) { return t->own; }

static int listed(char *const *v, size_t n, const char *cn) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i], cn) == 0) return 1;
  return 0;
}

pc_rpc_role_t pc_tls_role_of(const pc_tls_t *t, const char *cn) {
  if (t->nsystem ? listed(t->system, t->nsystem, cn) : strcmp(cn, t->own) == 0)
    return PC_RPC_ROLE_SYSTEM;
  if (t->nallowed == 0 || listed(t->allowed, t->nallowed, cn)) return PC_RPC_ROLE_DATA;
  return PC_RPC_ROLE_NONE;
}

int pc_tls_server_name(const pc_tls_t *t, const char *cn) {
  if (t->nservers) return listed(t->servers, t->nservers, cn);
  return t->nsystem ? listed(t->system, t->nsystem, cn) : strcmp(cn, t->own) == 0;
}

pc_rpc_role_t pc_tls_local_role(const pc_tls_t *server, const pc_tls_t *client) {
  X509 *cert = SSL_CTX_get0_certificate(client->client);
  STACK_OF(X509) *chain = NULL;
  SSL_CTX_get0_chain_certs(client->client, &chain);
  X509_STORE_CTX *vctx = X509_STORE_CTX_new();
  int ok = vctx && cert &&
           X509_STORE_CTX_init(vctx, SSL_CTX_get_cert_store(server->server), cert, chain) == 1 &&
           X509_verify_cert(vctx) == 1;
  X509_STORE_CTX_free(vctx);
  ERR_clear_error();
  return ok ? pc_tls_role_of(server, client->own) : PC_RPC_ROLE_NONE;
}

struct bufferevent *pc_tls_server_bev(pc_tls_t *t, struct event_base *base, evutil_socket_t fd) {
  SSL *ssl = SSL_new(t->server);
  if (!ssl) return NULL;
  struct bufferevent *bev =
      bufferevent_openssl_socket_new(base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                     BEV_OPT_CLOSE_ON_FREE);
  if (!bev) {
    SSL_free(ssl);
    return NULL;
  }
  /* a peer that closes without TLS's close_notify just closed: the
   * protocol's own framing tells a cut-off frame apart */
  bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
  return bev;
}

struct bufferevent *pc_tls_client_bev(pc_tls_t *t, struct event_base *base, evutil_socket_t fd,
                                      const char *host) {
  SSL *ssl = SSL_new(t->client);
  if (!ssl) return NULL;
  unsigned char addr[16];
  int is_ip = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
  int ok = is_ip || SSL_set_tlsext_host_name(ssl, host) == 1;
  struct bufferevent *bev =
      ok ? bufferevent_openssl_socket_new(base, fd, ssl, BUFFEREVENT_SSL_CONNECTING,
                                          BEV_OPT_CLOSE_ON_FREE)
         : NULL;
  if (!bev) {
    SSL_free(ssl);
    return NULL;
  }
  bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
  return bev;
}

int pc_tls_peer_name(struct bufferevent *bev, char *name, size_t cap) {
  SSL *ssl = bufferevent_openssl_get_ssl(bev);
  if (!ssl || SSL_get_verify_result(ssl) != X509_V_OK) return -1;
  X509 *peer = SSL_get1_peer_certificate(ssl);
  int rc = cert_cn(peer, name, cap);
  X509_free(peer);
  return rc;
}

int pc_tls_failure(struct bufferevent *bev, char *out, size_t cap) {
  SSL *ssl = bufferevent_openssl_get_ssl(bev);
  unsigned long e, first = 0;
  while ((e = bufferevent_get_openssl_error(bev)) != 0) {
    if (!first && ERR_reason_error_string(e)) first = e;
  }
  char why[256] = "";
  if (first) ERR_error_string_n(first, why, sizeof why);
  long verdict = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (verdict != X509_V_OK) {
    snprintf(out, cap, PC_TLS_PEER_CERT ": %s%s%s",
             X509_verify_cert_error_string(verdict), why[0] ? "; " : "", why);
    return 1;
  }
  if (why[0]) {
    snprintf(out, cap, "TLS: %s", why);
    return 1;
  }
  snprintf(out, cap, "TLS: the peer closed the connection during the handshake");
  return 0;
}
