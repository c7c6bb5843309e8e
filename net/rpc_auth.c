/* rpc_auth.c — the credentials of the protocol's ends (net/rpc_auth.h): the
 * secret's challenge-response on OpenSSL's HMAC and random generator, and
 * the roles that secrets and certificates give. A MAC binds both nonces and
 * a label saying which end made it, so a recorded exchange cannot be
 * replayed to another server nonce, nor a server's proof reflected back as
 * a client's. */
#include "net/rpc_auth.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "net/tls.h"

static char *dup_nonempty(const char *s, size_t *len) {
  *len = 0;
  if (!s || !s[0]) return NULL;
  *len = strlen(s);
  return strdup(s);
}

int rpc_creds_init(rpc_creds_t *c, const pc_rpc_auth_t *a) {
  memset(c, 0, sizeof *c);
  if (!a) return 0;
  c->secret = dup_nonempty(a->secret, &c->secret_len);
  c->system_secret = dup_nonempty(a->system_secret, &c->system_len);
  if ((c->secret_len && !c->secret) || (c->system_len && !c->system_secret)) {
    rpc_creds_free(c);
    return -1;
  }
  c->tls = pc_tls_ref(a->tls);
  return 0;
}

void rpc_creds_free(rpc_creds_t *c) {
  if (c->secret) OPENSSL_cleanse(c->secret, c->secret_len);
  if (c->system_secret) OPENSSL_cleanse(c->system_secret, c->system_len);
  free(c->secret);
  free(c->system_secret);
  pc_tls_unref(c->tls);
  memset(c, 0, sizeof *c);
}

int rpc_creds_has_secret(const rpc_creds_t *c) { return c->secret || c->system_secret; }

const char *rpc_creds_presented(const rpc_creds_t *c, size_t *len, uint8_t *which) {
  if (c->system_secret) {
    *len = c->system_len;
    *which = 1;
    return c->system_secret;
  }
  *len = c->secret_len;
  *which = 0;
  return c->secret;
}

int rpc_random(unsigned char *buf, size_t n) {
  return RAND_bytes(buf, (int)n) == 1 ? 0 : -1;
}

void rpc_mac(const char *key, size_t klen, const char *label, const unsigned char *a,
             const unsigned char *b, unsigned char out[PC_RPC_MAC]) {
  size_t llen = strlen(label);
  unsigned char msg[64 + 2 * PC_RPC_NONCE];
  memcpy(msg, label, llen);
  memcpy(msg + llen, a, PC_RPC_NONCE);
  memcpy(msg + llen + PC_RPC_NONCE, b, PC_RPC_NONCE);
  unsigned int olen = PC_RPC_MAC;
  if (!HMAC(EVP_sha256(), key, (int)klen, msg, llen + 2 * PC_RPC_NONCE, out, &olen))
    memset(out, 0, PC_RPC_MAC); /* compares equal to no real MAC's check below */
}

pc_rpc_role_t rpc_auth_check(const rpc_creds_t *server, const unsigned char *payload, size_t len,
                             const unsigned char snonce[PC_RPC_NONCE],
                             const unsigned char cnonce[PC_RPC_NONCE],
                             unsigned char proof[PC_RPC_MAC]) {
  if (len != 1 + PC_RPC_MAC || payload[0] > 1) return PC_RPC_ROLE_NONE;
  int system = payload[0] == 1;
  const char *key = system ? server->system_secret : server->secret;
  size_t klen = system ? server->system_len : server->secret_len;
  if (!key) return PC_RPC_ROLE_NONE;
  unsigned char want[PC_RPC_MAC];
  rpc_mac(key, klen, RPC_LABEL_CLIENT, snonce, cnonce, want);
  int ok = CRYPTO_memcmp(want, payload + 1, PC_RPC_MAC) == 0;
  int zero = 1; /* an HMAC that failed left zeros: never accept them */
  for (size_t i = 0; i < PC_RPC_MAC; i++) zero &= want[i] == 0;
  OPENSSL_cleanse(want, sizeof want);
  if (!ok || zero) return PC_RPC_ROLE_NONE;
  rpc_mac(key, klen, RPC_LABEL_SERVER, cnonce, snonce, proof);
  /* without a system secret, the one secret is the system's */
  return system || !server->system_secret ? PC_RPC_ROLE_SYSTEM : PC_RPC_ROLE_DATA;
}

pc_rpc_role_t rpc_local_role(const rpc_creds_t *server, const rpc_creds_t *client) {
  pc_rpc_role_t role = PC_RPC_ROLE_SYSTEM;
  if (rpc_creds_has_secret(server) != rpc_creds_has_secret(client)) return PC_RPC_ROLE_NONE;
  if ((server->tls != NULL) != (client->tls != NULL)) return PC_RPC_ROLE_NONE;
  if (rpc_creds_has_secret(server)) {
    size_t len;
    uint8_t which;
    const char *p = rpc_creds_presented(client, &len, &which);
    const char *key = which ? server->system_secret : server->secret;
    size_t klen = which ? server->system_len : server->secret_len;
    if (!key || klen != len || CRYPTO_memcmp(key, p, len) != 0) return PC_RPC_ROLE_NONE;
    role = which || !server->system_secret ? PC_RPC_ROLE_SYSTEM : PC_RPC_ROLE_DATA;
  }
  if (server->tls) role = rpc_role_min(role, pc_tls_local_role(server->tls, client->tls));
  return role;
}
