/* zk.c — the coordination client of zk.h over libzookeeper_mt. Every call is
 * the client's asynchronous form plus a wait on a condition variable with the
 * caller's deadline, so no call blocks longer than its timeout even while the
 * ensemble is unreachable (the synchronous API waits for the client's own
 * connection-loss detection, which may take most of a session timeout). A
 * request whose caller gave up stays alive until its completion runs: the
 * request record is shared by the caller and the completion and freed by
 * whichever of the two is last. With a secret, the session authenticates
 * with ZooKeeper's digest scheme, every node it makes under the root gets the
 * ACL of its identity (zk.h), and the root's ACL is checked when the session
 * opens: it says whether the cluster has one identity or two, and a root
 * whose ACL is neither this cluster's is refused. */
#include "lockservice/zk.h"

#include "base/error.h"
#include "base/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zookeeper/zookeeper.h>

#include <openssl/evp.h>

#define PATH_CAP 1024
#define DIGEST_USER "percolator"
#define SYSTEM_USER "percolator-system"
#define ID_CAP 160  /* "user:" + base64 of a SHA-1 */
#define ACL_CAP 1024

struct pc_zk {
  zhandle_t *zh;
  char *connect, *root;
  pc_zk_watch_t *session; /* the owner's session watch, or NULL */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* state changed (CLOCK_MONOTONIC) */
  pc_zk_state_t state;
  uint32_t asked_timeout_ms;
  pc_zk_identity_t identity;
  char data_id[ID_CAP];   /* digest id of zookeeper.secret ("percolator:..."), or "" */
  char system_id[ID_CAP]; /* of zookeeper.system_secret: this session's (the system),
                             or the root's (a shared session of a cluster with two) */
  char shown_data_id[ID_CAP]; /* a shared session of a cluster with two: the data
                                 clients' id as ZooKeeper shows it to it */
  int two;                /* the cluster has two identities (its root's ACL) */
  _Atomic uint64_t last_answer_ms;
  _Atomic uint64_t connects, disconnects;
};

/* One request in flight: shared by the caller and the completion. */
typedef struct zk_req {
  atomic_int refs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, rc;
  pc_zk_t *zk;
  uint64_t sent_ms;
  char *data; /* get: the value; create: the node's path */
  size_t len;
  int32_t version;
  uint64_t ephemeral_owner; /* get: the stat's */
  char *acl;                /* get_acl: the ACL as text (acl_text) */
  char **names;
  size_t n;
  zoo_op_result_t results[2]; /* check_set: written by the completion */
} zk_req_t;

static void req_unref(zk_req_t *r) {
  if (atomic_fetch_sub(&r->refs, 1) != 1) return;
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r->data);
  free(r->acl);
  pc_zk_free_names(r->names, r->n);
  free(r);
}

static zk_req_t *req_new(pc_zk_t *zk) {
  zk_req_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  atomic_init(&r->refs, 2);
  pthread_mutex_init(&r->mu, NULL);
  pc_cond_init_mono(&r->cv);
  r->zk = zk;
  r->sent_ms = pc_now_mono_ms();
  r->version = -1;
  return r;
}

/* Return codes that are the server's answer (as opposed to the connection's). */
static int answered(int rc) {
  return rc == ZOK || rc == ZNONODE || rc == ZNODEEXISTS || rc == ZBADVERSION || rc == ZNOTEMPTY ||
         rc == ZNOCHILDRENFOREPHEMERALS || rc == ZRUNTIMEINCONSISTENCY || rc == ZNOAUTH ||
         rc == ZINVALIDACL;
}

/* Marks r done with rc and drops the completion's reference. */
static void req_finish(zk_req_t *r, int rc) {
  if (answered(rc)) {
    uint64_t prev = atomic_load(&r->zk->last_answer_ms);
    while (prev < r->sent_ms &&
           !atomic_compare_exchange_weak(&r->zk->last_answer_ms, &prev, r->sent_ms)) {
    }
  }
  pthread_mutex_lock(&r->mu);
  r->rc = rc;
  r->done = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  req_unref(r);
}

static void on_void(int rc, const void *data) { req_finish((zk_req_t *)data, rc); }

static void on_stat(int rc, const struct Stat *stat, const void *data) {
  zk_req_t *r = (zk_req_t *)data;
  if (rc == ZOK && stat) r->version = stat->version;
  req_finish(r, rc);
}

static void on_data(int rc, const char *value, int len, const struct Stat *stat,
                    const void *data) {
  zk_req_t *r = (zk_req_t *)data;
  if (rc == ZOK) {
    size_t n = value && len > 0 ? (size_t)len : 0;
    r->data = malloc(n + 1);
    if (!r->data) {
      rc = ZSYSTEMERROR;
    } else {
      if (n) memcpy(r->data, value, n);
      r->data[n] = '\0';
      r->len = n;
      if (stat) {
        r->version = stat->version;
        r->ephemeral_owner = (uint64_t)stat->ephemeralOwner;
      }
    }
  }
  req_finish(r, rc);
}

static void on_string(int rc, const char *value, const void *data) {
  zk_req_t *r = (zk_req_t *)data;
  if (rc == ZOK && value && !(r->data = strdup(value))) rc = ZSYSTEMERROR;
  req_finish(r, rc);
}

/* "cdrwa" letters of perms, in that order. */
static void perm_letters(int perms, char out[6]) {
  const int bits[5] = {ZOO_PERM_CREATE, ZOO_PERM_DELETE, ZOO_PERM_READ, ZOO_PERM_WRITE,
                       ZOO_PERM_ADMIN};
  size_t k = 0;
  for (size_t i = 0; i < 5; i++)
    if (perms & bits[i]) out[k++] = "cdrwa"[i];
  out[k] = '\0';
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The ACL entries[0..n) as "scheme:id:perms,..." (sorted) into out; "" when
 * it does not fit. */
static void acl_text(const struct ACL *entries, int n, char *out, size_t cap) {
  char items[8][ID_CAP + 32], *sorted[8];
  out[0] = '\0';
  if (n < 0 || n > 8) {
    snprintf(out, cap, "(%d entries)", n);
    return;
  }
  for (int i = 0; i < n; i++) {
    char perms[6];
    perm_letters(entries[i].perms, perms);
    snprintf(items[i], sizeof items[i], "%s:%s:%s", entries[i].id.scheme, entries[i].id.id,
             perms);
    sorted[i] = items[i];
  }
  qsort(sorted, (size_t)n, sizeof *sorted, str_cmp);
  size_t used = 0;
  for (int i = 0; i < n; i++) {
    int w = snprintf(out + used, cap - used, "%s%s", i ? "," : "", sorted[i]);
    if (w < 0 || (size_t)w >= cap - used) {
      out[0] = '\0';
      return;
    }
    used += (size_t)w;
  }
}

static void on_acl(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data) {
  (void)stat;
  zk_req_t *r = (zk_req_t *)data;
  if (rc == ZOK && (r->acl = malloc(ACL_CAP)) != NULL)
    acl_text(acl ? acl->data : NULL, acl ? acl->count : 0, r->acl, ACL_CAP);
  else if (rc == ZOK)
    rc = ZSYSTEMERROR;
  req_finish(r, rc);
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void on_strings(int rc, const struct String_vector *v, const void *data) {
  zk_req_t *r = (zk_req_t *)data;
  if (rc == ZOK && v && v->count > 0) {
    r->names = calloc((size_t)v->count, sizeof *r->names);
    if (!r->names) {
      rc = ZSYSTEMERROR;
    } else {
      for (int i = 0; i < v->count && rc == ZOK; i++) {
        if (!(r->names[i] = strdup(v->data[i]))) rc = ZSYSTEMERROR;
        else r->n++;
      }
      qsort(r->names, r->n, sizeof *r->names, name_cmp);
    }
  }
  req_finish(r, rc);
}

static pc_status_t status_of(int rc, const char *path, pc_error_t *err) {
  switch (rc) {
    case ZOK: return PC_OK;
    case ZNONODE: return pc_error_set(err, PC_NOT_FOUND, "zookeeper %s: no such node", path);
    case ZNODEEXISTS: return pc_error_set(err, PC_BUSY, "zookeeper %s: node exists", path);
    case ZBADVERSION:
      return pc_error_set(err, PC_CONFLICT, "zookeeper %s: version changed", path);
    case ZSESSIONEXPIRED:
    case ZINVALIDSTATE:
      return pc_error_set(err, PC_UNAVAILABLE, "zookeeper %s: session expired", path);
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZCLOSING:
      return pc_error_set(err, PC_UNAVAILABLE, "zookeeper %s: %s", path, zerror(rc));
    case ZBADARGUMENTS:
      return pc_error_set(err, PC_INVALID, "zookeeper %s: bad arguments", path);
    case ZNOAUTH:
    case ZINVALIDACL:
    case ZAUTHFAILED:
      return pc_error_set(err, PC_DENIED,
                          "zookeeper %s: not authorised (the node's ACL does not admit this "
                          "client: another zookeeper.secret, none, or a node only the "
                          "system, with zookeeper.system_secret, may change)",
                          path);
    default:
      return pc_error_set(err, PC_IO_ERROR, "zookeeper %s: %s", path, zerror(rc));
  }
}

/* Waits for r (submitted with submit_rc) until timeout_ms; returns the zk rc,
 * or 1 on our own timeout. Drops the caller's reference only when told. */
static int req_wait(zk_req_t *r, int submit_rc, uint32_t timeout_ms) {
  if (submit_rc != ZOK) {
    req_unref(r); /* the completion will never run */
    return submit_rc;
  }
  struct timespec until = pc_mono_after_ms(timeout_ms);
  pthread_mutex_lock(&r->mu);
  while (!r->done)
    if (pthread_cond_timedwait(&r->cv, &r->mu, &until) != 0 && !r->done) break;
  int rc = r->done ? r->rc : 1;
  pthread_mutex_unlock(&r->mu);
  return rc;
}

static pc_status_t finish(zk_req_t *r, int rc, const char *path, uint32_t timeout_ms,
                          pc_error_t *err) {
  pc_status_t st = rc == 1 ? pc_error_set(err, PC_TIMEOUT, "zookeeper %s: no answer in %u ms",
                                          path, timeout_ms)
                           : status_of(rc, path, err);
  req_unref(r);
  return st;
}

/* ---- the handle --------------------------------------------------------- */

static void global_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh;
  (void)path;
  pc_zk_t *zk = ctx;
  if (type != ZOO_SESSION_EVENT) return;
  pthread_mutex_lock(&zk->mu);
  pc_zk_state_t old = zk->state;
  if (state == ZOO_CONNECTED_STATE) zk->state = PC_ZK_CONNECTED;
  else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
    zk->state = PC_ZK_EXPIRED;
  else if (zk->state != PC_ZK_EXPIRED)
    zk->state = PC_ZK_CONNECTING;
  pc_zk_state_t now = zk->state;
  pthread_cond_broadcast(&zk->cv);
  pthread_mutex_unlock(&zk->mu);
  if (now == old) return;
  atomic_fetch_add(now == PC_ZK_CONNECTED ? &zk->connects : &zk->disconnects, 1);
  pc_log(now == PC_ZK_CONNECTED ? PC_LOG_DEBUG : PC_LOG_WARN, "zookeeper %s: %s", zk->connect,
         now == PC_ZK_CONNECTED ? "connected"
                                : (now == PC_ZK_EXPIRED ? "session expired" : "connection lost"));
  if (zk->session && zk->session->fn) zk->session->fn(zk->session->ctx, PC_ZK_EV_SESSION, NULL);
}

static void init_client(void) { zoo_set_debug_level((ZooLogLevel)0); }

/* ZooKeeper's digest id of user with password: "user:" and the base64 of
 * SHA-1("user:password"), as its DigestAuthenticationProvider makes it. */
static int digest_id(const char *user, const char *password, char *out, size_t cap) {
  size_t ul = strlen(user), pl = strlen(password);
  char *both = malloc(ul + 1 + pl);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdl = 0;
  if (!both) return -1;
  memcpy(both, user, ul);
  both[ul] = ':';
  memcpy(both + ul + 1, password, pl);
  int ok = EVP_Digest(both, ul + 1 + pl, md, &mdl, EVP_sha1(), NULL) == 1;
  explicit_bzero(both, ul + 1 + pl);
  free(both);
  unsigned char b64[64];
  if (!ok || mdl > 40) return -1;
  int bl = EVP_EncodeBlock(b64, md, (int)mdl);
  int w = snprintf(out, cap, "%s:%.*s", user, bl, (const char *)b64);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

/* The ACL that a node made with flags gets in this session's cluster, by
 * the session's identity: vec over out (their ids pointing into zk), or one
 * of ZooKeeper's constants (open to all, all to the creator's identities).
 * Above the root (above_root), the ACL of the root's parents, which other
 * clusters share: everybody may read them and make children, only their
 * maker may change or delete them. */
static struct ACL_vector *node_acl(pc_zk_t *zk, int flags, int above_root, struct ACL out[2],
                                   struct ACL_vector *vec) {
  static char digest[] = "digest", world[] = "world", anyone[] = "anyone", auth[] = "auth",
              empty[] = "";
  if (zk->identity == PC_ZK_ANONYMOUS) return &ZOO_OPEN_ACL_UNSAFE;
  if (above_root) {
    out[0] = (struct ACL){ZOO_PERM_READ | ZOO_PERM_CREATE, {world, anyone}};
    out[1] = zk->identity == PC_ZK_SYSTEM ? (struct ACL){ZOO_PERM_ALL, {digest, zk->system_id}}
                                          : (struct ACL){ZOO_PERM_ALL, {auth, empty}};
    *vec = (struct ACL_vector){2, out};
    return vec;
  }
  if (zk->identity == PC_ZK_SHARED) {
    if (!(flags & PC_ZK_OWN)) return &ZOO_CREATOR_ALL_ACL;
    /* its own node: written by it (its report), deleted only with its session */
    out[0] = (struct ACL){ZOO_PERM_READ | ZOO_PERM_WRITE, {auth, empty}};
    *vec = (struct ACL_vector){1, out};
    return vec;
  }
  out[0] = (struct ACL){ZOO_PERM_ALL, {digest, zk->system_id}};
  out[1] = (struct ACL){ZOO_PERM_READ | ((flags & PC_ZK_OPEN_TO_CLIENTS) ? ZOO_PERM_CREATE : 0),
                        {digest, zk->data_id}};
  *vec = (struct ACL_vector){2, out};
  return vec;
}

void pc_zk_acl_expected(pc_zk_t *zk, int flags, char *out, size_t cap) {
  out[0] = '\0';
  if (zk->identity == PC_ZK_ANONYMOUS) return;
  if (!zk->two) { /* one identity: the creator's, which is this session's */
    snprintf(out, cap, "digest:%s:cdrwa", zk->data_id);
    return;
  }
  struct ACL e[2] = {{ZOO_PERM_ALL, {(char *)"digest", zk->system_id}},
                     {ZOO_PERM_READ | ((flags & PC_ZK_OPEN_TO_CLIENTS) ? ZOO_PERM_CREATE : 0),
                      {(char *)"digest", zk->identity == PC_ZK_SYSTEM ? zk->data_id
                                                                      : zk->shown_data_id}}};
  acl_text(e, 2, out, cap);
}

/* Authenticates the connected session as user with password. */
static pc_status_t authenticate(pc_zk_t *zk, const char *user, const char *secret,
                                uint32_t timeout_ms, pc_error_t *err) {
  size_t ul = strlen(user), sl = strlen(secret);
  char *cred = malloc(ul + 1 + sl + 1);
  zk_req_t *r = cred ? req_new(zk) : NULL;
  if (!r) {
    free(cred);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  memcpy(cred, user, ul);
  cred[ul] = ':';
  memcpy(cred + ul + 1, secret, sl + 1);
  int rc =
      req_wait(r, zoo_add_auth(zk->zh, "digest", cred, (int)(ul + 1 + sl), on_void, r), timeout_ms);
  /* the client keeps its own copy, sent again on every reconnection */
  explicit_bzero(cred, ul + 1 + sl);
  free(cred);
  pc_status_t st = finish(r, rc, zk->connect, timeout_ms, err);
  if (st != PC_OK)
    pc_error_prefix(err, "authenticating with zookeeper.%s",
                    strcmp(user, SYSTEM_USER) == 0 ? "system_secret" : "secret");
  return st;
}

/* Reads the root's ACL: it tells a shared session whether the cluster has
 * one identity or two (and the system's id), and it must be one this
 * cluster makes, else the root was made by somebody else first. What it
 * has and the command that sets it right go to the log (an error holds too
 * little). */
static pc_status_t check_root(pc_zk_t *zk, uint32_t timeout_ms, pc_error_t *err) {
  char have[ACL_CAP], want[ACL_CAP];
  pc_status_t st = pc_zk_get_acl(zk, "", have, sizeof have, timeout_ms, err);
  if (st != PC_OK) return st;
  zk->two = zk->identity == PC_ZK_SYSTEM;
  pc_zk_acl_expected(zk, 0, want, sizeof want);
  if (strcmp(have, want) == 0) return PC_OK;
  if (zk->identity == PC_ZK_SHARED) {
    /* two identities: the system's entry, then the data clients', read
     * only; ZooKeeper shows a session without the admin right "x" for
     * the digests, and a session not in the second entry could not read */
    const char *sys = "digest:" SYSTEM_USER ":", *data = ",digest:" DIGEST_USER ":";
    const char *comma = strchr(have, ',');
    size_t sl = strlen(sys);
    if (strncmp(have, sys, sl) == 0 && comma && comma - have > (ptrdiff_t)(sl + 6) &&
        strncmp(comma - 6, ":cdrwa", 6) == 0 && strncmp(comma, data, strlen(data)) == 0 &&
        strlen(comma) > strlen(data) + 2 && strcmp(comma + strlen(comma) - 2, ":r") == 0 &&
        !strchr(comma + strlen(data), ',') &&
        !memchr(comma + strlen(data), ':', strlen(comma + strlen(data)) - 2)) {
      snprintf(zk->system_id, sizeof zk->system_id, "%.*s", (int)(comma - 6 - have - 7),
               have + 7);
      snprintf(zk->shown_data_id, sizeof zk->shown_data_id, "%.*s",
               (int)(strlen(comma) - 10), comma + 8);
      zk->two = 1;
      return PC_OK;
    }
  }
  char one[ID_CAP + 16];
  snprintf(one, sizeof one, "digest:%s:cdrwa", zk->data_id);
  int by_data = zk->identity == PC_ZK_SYSTEM && strcmp(have, one) == 0;
  pc_log(PC_LOG_ERROR,
         "zookeeper %s: the cluster's root %s has the ACL %s, not this cluster's (%s%s): %s",
         zk->connect, zk->root, have[0] ? have : "(none)", want,
         zk->identity == PC_ZK_SHARED ? "; or, with zookeeper.system_secret, "
                                        "digest:" SYSTEM_USER ":...:cdrwa and this id's :r"
                                      : "",
         by_data ? "it was made with zookeeper.secret alone, by a data client started before "
                   "any daemon of the cluster or while the cluster had no "
                   "zookeeper.system_secret, and every holder of that secret can still change "
                   "what is under it"
                 : "another process made it first (before the cluster had its secrets, or to "
                   "squat it) and can still change what is under it, or this process holds "
                   "another secret than the cluster's");
  pc_log(PC_LOG_ERROR,
         "zookeeper %s: if you trust what %s holds, make it this cluster's with ZooKeeper's "
         "CLI (zkCli.sh -server %s), authenticated as a user that may change its ACL (addauth "
         "digest, or ZooKeeper's super user): setAcl %s %s (then start a daemon of the "
         "cluster: it checks every node under it); else use another zookeeper.root",
         zk->connect, zk->root, zk->connect, zk->root, want);
  return pc_error_set(err, PC_DENIED,
                      "zookeeper %s: the cluster's root has an ACL that is not this cluster's: "
                      "not using it (the log says what it has and how to set it)",
                      zk->root);
}

void pc_zk_close(pc_zk_t *zk) {
  if (!zk) return;
  if (zk->zh) zookeeper_close(zk->zh); /* runs the pending completions (ZCLOSING) */
  pthread_cond_destroy(&zk->cv);
  pthread_mutex_destroy(&zk->mu);
  free(zk->connect);
  free(zk->root);
  free(zk);
}

pc_zk_t *pc_zk_open(const pc_zk_options_t *o, uint32_t timeout_ms, pc_zk_watch_t *session,
                    pc_error_t *err) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_client);
  const char *connect = o->connect, *root = o->root;
  if (!connect || !*connect || !root || root[0] != '/') {
    pc_error_set(err, PC_INVALID, "zookeeper: want an ensemble and a root starting with '/'");
    return NULL;
  }
  pc_zk_t *zk = calloc(1, sizeof *zk);
  if (!zk || !(zk->connect = strdup(connect)) || !(zk->root = strdup(root))) {
    if (zk) free(zk->connect);
    free(zk);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  size_t rl = strlen(zk->root);
  while (rl > 1 && zk->root[rl - 1] == '/') zk->root[--rl] = '\0';
  if (o->system_secret && (!o->secret || strcmp(o->secret, o->system_secret) == 0)) {
    pc_error_set(err, PC_INVALID, "zookeeper: a system_secret needs a secret (the data clients' "
                 "identity) that differs from it");
    free(zk->connect);
    free(zk->root);
    free(zk);
    return NULL;
  }
  zk->identity = o->system_secret ? PC_ZK_SYSTEM : o->secret ? PC_ZK_SHARED : PC_ZK_ANONYMOUS;
  zk->session = session;
  zk->asked_timeout_ms = o->session_timeout_ms;
  pthread_mutex_init(&zk->mu, NULL);
  pc_cond_init_mono(&zk->cv);
  zk->zh = zookeeper_init(connect, global_watcher, (int)o->session_timeout_ms, NULL, zk, 0);
  if (!zk->zh) {
    pc_error_set(err, PC_INVALID, "zookeeper %s: cannot start a client (bad ensemble?)", connect);
    pc_zk_close(zk);
    return NULL;
  }
  struct timespec until = pc_mono_after_ms(timeout_ms);
  pthread_mutex_lock(&zk->mu);
  while (zk->state == PC_ZK_CONNECTING)
    if (pthread_cond_timedwait(&zk->cv, &zk->mu, &until) != 0) break;
  pc_zk_state_t st = zk->state;
  pthread_mutex_unlock(&zk->mu);
  if (st != PC_ZK_CONNECTED) {
    pc_error_set(err, PC_UNAVAILABLE, "zookeeper %s: %s within %u ms", connect,
                 st == PC_ZK_EXPIRED ? "session refused" : "no server answered", timeout_ms);
    pc_zk_close(zk);
    return NULL;
  }
  if ((o->secret && (authenticate(zk, DIGEST_USER, o->secret, timeout_ms, err) != PC_OK ||
                     digest_id(DIGEST_USER, o->secret, zk->data_id, sizeof zk->data_id) != 0)) ||
      (o->system_secret &&
       (authenticate(zk, SYSTEM_USER, o->system_secret, timeout_ms, err) != PC_OK ||
        digest_id(SYSTEM_USER, o->system_secret, zk->system_id, sizeof zk->system_id) != 0))) {
    if (err->code == PC_OK) pc_error_set(err, PC_NOMEM, "zookeeper: cannot digest a secret");
    pc_zk_close(zk);
    return NULL;
  }
  if (strcmp(zk->root, "/") != 0 && pc_zk_ensure(zk, "", timeout_ms, err) != PC_OK) {
    pc_error_prefix(err, "creating the root");
    pc_zk_close(zk);
    return NULL;
  }
  if (zk->identity != PC_ZK_ANONYMOUS && strcmp(zk->root, "/") != 0 &&
      check_root(zk, timeout_ms, err) != PC_OK) {
    pc_zk_close(zk);
    return NULL;
  }
  return zk;
}

pc_zk_state_t pc_zk_state(pc_zk_t *zk) {
  pthread_mutex_lock(&zk->mu);
  pc_zk_state_t st = zk->state;
  pthread_mutex_unlock(&zk->mu);
  return st;
}

uint64_t pc_zk_session_id(pc_zk_t *zk) {
  const clientid_t *id = zoo_client_id(zk->zh);
  return id ? (uint64_t)id->client_id : 0;
}

/* The watcher of expire_for_test's second handle: tells it whether the
 * session it attached to is alive (1) or gone (2). */
static void attach_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh;
  (void)path;
  if (type != ZOO_SESSION_EVENT) return;
  if (state == ZOO_CONNECTED_STATE) atomic_store((_Atomic int *)ctx, 1);
  else if (state == ZOO_EXPIRED_SESSION_STATE) atomic_store((_Atomic int *)ctx, 2);
}

/* A session has one connection: attaching moves it from zk's handle to the
 * second one. If zk's handle reconnects before the second handle's close
 * reaches the server, the connection moves back and the close is never sent;
 * so the helper attaches again until the server says the session is gone. */
pc_status_t pc_zk_expire_for_test(pc_zk_t *zk, uint32_t timeout_ms, pc_error_t *err) {
  const clientid_t *id = zoo_client_id(zk->zh);
  if (!id || !id->client_id) return pc_error_set(err, PC_STATE, "zookeeper: no session yet");
  clientid_t copy = *id;
  uint64_t until = pc_now_mono_ms() + timeout_ms;
  while (pc_now_mono_ms() < until) {
    _Atomic int seen = 0;
    zhandle_t *zh = zookeeper_init(zk->connect, attach_watcher, (int)zk->asked_timeout_ms, &copy,
                                   (void *)&seen, 0);
    if (!zh) return pc_error_set(err, PC_UNAVAILABLE, "zookeeper %s: no client", zk->connect);
    while (!atomic_load(&seen) && pc_now_mono_ms() < until) pc_sleep_ms(10);
    int was = atomic_load(&seen);
    zookeeper_close(zh); /* while attached, closes the session both handles share */
    if (was == 2) return PC_OK;
  }
  return pc_error_set(err, PC_UNAVAILABLE, "zookeeper %s: session not ended within %u ms",
                      zk->connect, timeout_ms);
}

uint32_t pc_zk_session_timeout(pc_zk_t *zk) {
  int t = zoo_recv_timeout(zk->zh);
  return t > 0 ? (uint32_t)t : zk->asked_timeout_ms;
}

uint64_t pc_zk_last_answer_ms(pc_zk_t *zk) { return atomic_load(&zk->last_answer_ms); }

const char *pc_zk_root(pc_zk_t *zk) { return zk->root; }

const char *pc_zk_connect(pc_zk_t *zk) { return zk->connect; }

pc_zk_identity_t pc_zk_identity(pc_zk_t *zk) { return zk->identity; }

int pc_zk_two_identities(pc_zk_t *zk) { return zk->two; }

int pc_zk_acl_fixable(pc_zk_t *zk) { return zk->identity == PC_ZK_SYSTEM || !zk->two; }

void pc_zk_counters(pc_zk_t *zk, uint64_t *connects, uint64_t *disconnects) {
  if (connects) *connects = atomic_load(&zk->connects);
  if (disconnects) *disconnects = atomic_load(&zk->disconnects);
}

const char *pc_zk_path(pc_zk_t *zk, const char *rel, char *buf, size_t cap) {
  int root_only = strcmp(zk->root, "/") == 0;
  int n = !rel || !*rel ? snprintf(buf, cap, "%s", zk->root)
                        : snprintf(buf, cap, "%s/%s", root_only ? "" : zk->root, rel);
  if (n < 0 || (size_t)n >= cap) buf[0] = '\0';
  return buf;
}

/* ---- operations --------------------------------------------------------- */

static void watch_trampoline(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh;
  (void)state;
  pc_zk_watch_t *w = ctx;
  int ev = type == ZOO_CREATED_EVENT   ? PC_ZK_EV_CREATED
           : type == ZOO_DELETED_EVENT ? PC_ZK_EV_DELETED
           : type == ZOO_CHANGED_EVENT ? PC_ZK_EV_CHANGED
           : type == ZOO_CHILD_EVENT   ? PC_ZK_EV_CHILD
                                       : PC_ZK_EV_SESSION;
  if (w && w->fn) w->fn(w->ctx, ev, path);
}

#define PREPARE(zk, rel, path, r, err)                                              \
  char path[PATH_CAP];                                                             \
  if (!*pc_zk_path(zk, rel, path, sizeof path))                                    \
    return pc_error_set(err, PC_INVALID, "zookeeper: path under %s too long", (zk)->root); \
  zk_req_t *r = req_new(zk);                                                       \
  if (!r) return pc_error_set(err, PC_NOMEM, "out of memory")

pc_status_t pc_zk_create(pc_zk_t *zk, const char *rel, const void *data, size_t len, int flags,
                         char *created, size_t cap, uint32_t timeout_ms, pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int mode = ((flags & PC_ZK_EPHEMERAL) ? ZOO_EPHEMERAL : 0) |
             ((flags & PC_ZK_SEQUENCE) ? ZOO_SEQUENCE : 0);
  struct ACL entries[2];
  struct ACL_vector vec;
  /* the request is serialized before zoo_acreate returns: the ACL may go */
  int rc = req_wait(r,
                    zoo_acreate(zk->zh, path, data, data ? (int)len : -1,
                                node_acl(zk, flags, 0, entries, &vec), mode, on_string, r),
                    timeout_ms);
  if (rc == ZOK && created && cap) {
    const char *name = r->data ? r->data : path;
    size_t skip = strcmp(zk->root, "/") == 0 ? 1 : strlen(zk->root) + 1;
    snprintf(created, cap, "%s", strlen(name) >= skip ? name + skip : name);
  }
  return finish(r, rc, path, timeout_ms, err);
}

/* Whether node path (absolute) exists; a ZooKeeper return code. */
static int exists_abs(pc_zk_t *zk, const char *path, uint32_t timeout_ms, int *exists) {
  zk_req_t *r = req_new(zk);
  if (!r) return ZSYSTEMERROR;
  int rc = req_wait(r, zoo_aexists(zk->zh, path, 0, on_stat, r), timeout_ms);
  *exists = rc == ZOK;
  if (rc == ZNONODE) rc = ZOK;
  req_unref(r);
  return rc;
}

pc_status_t pc_zk_ensure_as(pc_zk_t *zk, const char *rel, int flags, uint32_t timeout_ms,
                            pc_error_t *err) {
  char full[PATH_CAP];
  if (!*pc_zk_path(zk, rel, full, sizeof full))
    return pc_error_set(err, PC_INVALID, "zookeeper: path under %s too long", zk->root);
  /* each prefix of the absolute path, from the top; those above the root
   * are shared with other clusters */
  size_t root_len = strcmp(zk->root, "/") == 0 ? 0 : strlen(zk->root);
  for (char *p = full + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    zk_req_t *r = req_new(zk);
    if (!r) return pc_error_set(err, PC_NOMEM, "out of memory");
    struct ACL entries[2];
    struct ACL_vector vec;
    struct ACL_vector *acl = node_acl(zk, saved == '\0' ? flags : 0,
                                      (size_t)(p - full) < root_len, entries, &vec);
    int rc = req_wait(r, zoo_acreate(zk->zh, full, NULL, -1, acl, 0, on_string, r), timeout_ms);
    if (rc == ZNODEEXISTS) rc = ZOK;
    /* a node this session may not make may exist already (a data client
     * under the system's nodes): ZooKeeper checks the right to make it first */
    int exists = 0;
    if (rc == ZNOAUTH && exists_abs(zk, full, timeout_ms, &exists) == ZOK && exists) rc = ZOK;
    pc_status_t st = finish(r, rc, full, timeout_ms, err);
    *p = saved;
    if (st != PC_OK) return st;
    if (saved == '\0') return PC_OK;
  }
}

pc_status_t pc_zk_ensure(pc_zk_t *zk, const char *rel, uint32_t timeout_ms, pc_error_t *err) {
  return pc_zk_ensure_as(zk, rel, 0, timeout_ms, err);
}

pc_status_t pc_zk_read(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, char **data,
                       size_t *len, pc_zk_stat_t *stat, uint32_t timeout_ms, pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int rc = req_wait(r,
                    zoo_awget(zk->zh, path, watch ? watch_trampoline : NULL, watch, on_data, r),
                    timeout_ms);
  if (rc == ZOK) {
    *data = r->data;
    r->data = NULL;
    if (len) *len = r->len;
    if (stat) *stat = (pc_zk_stat_t){r->version, r->ephemeral_owner};
  }
  return finish(r, rc, path, timeout_ms, err);
}

pc_status_t pc_zk_get(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, char **data,
                      size_t *len, int32_t *version, uint32_t timeout_ms, pc_error_t *err) {
  pc_zk_stat_t st;
  pc_status_t s = pc_zk_read(zk, rel, watch, data, len, &st, timeout_ms, err);
  if (s == PC_OK && version) *version = st.version;
  return s;
}

pc_status_t pc_zk_get_acl(pc_zk_t *zk, const char *rel, char *out, size_t cap,
                          uint32_t timeout_ms, pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int rc = req_wait(r, zoo_aget_acl(zk->zh, path, on_acl, r), timeout_ms);
  if (rc == ZOK) snprintf(out, cap, "%s", r->acl);
  return finish(r, rc, path, timeout_ms, err);
}

pc_status_t pc_zk_set(pc_zk_t *zk, const char *rel, const void *data, size_t len,
                      int32_t version, int32_t *new_version, uint32_t timeout_ms,
                      pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int rc = req_wait(r, zoo_aset(zk->zh, path, data, (int)len, version, on_stat, r), timeout_ms);
  if (rc == ZOK && new_version) *new_version = r->version;
  return finish(r, rc, path, timeout_ms, err);
}

pc_status_t pc_zk_delete(pc_zk_t *zk, const char *rel, int32_t version, uint32_t timeout_ms,
                         pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int rc = req_wait(r, zoo_adelete(zk->zh, path, version, on_void, r), timeout_ms);
  return finish(r, rc, path, timeout_ms, err);
}

pc_status_t pc_zk_exists(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, int *exists,
                         uint32_t timeout_ms, pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int rc = req_wait(r,
                    zoo_awexists(zk->zh, path, watch ? watch_trampoline : NULL, watch, on_stat,
                                 r),
                    timeout_ms);
  if (rc == ZOK || rc == ZNONODE) {
    *exists = rc == ZOK;
    rc = ZOK;
  }
  return finish(r, rc, path, timeout_ms, err);
}

void pc_zk_free_names(char **names, size_t n) {
  for (size_t i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

pc_status_t pc_zk_children(pc_zk_t *zk, const char *rel, pc_zk_watch_t *watch, char ***names,
                           size_t *n, uint32_t timeout_ms, pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int rc = req_wait(r,
                    zoo_awget_children(zk->zh, path, watch ? watch_trampoline : NULL, watch,
                                       on_strings, r),
                    timeout_ms);
  if (rc == ZOK) {
    *names = r->names;
    *n = r->n;
    r->names = NULL;
    r->n = 0;
  }
  return finish(r, rc, path, timeout_ms, err);
}

pc_status_t pc_zk_check_set(pc_zk_t *zk, const char *check_rel, const char *rel,
                            const void *data, size_t len, int32_t version, int32_t *new_version,
                            uint32_t timeout_ms, pc_error_t *err) {
  char check[PATH_CAP];
  if (!*pc_zk_path(zk, check_rel, check, sizeof check))
    return pc_error_set(err, PC_INVALID, "zookeeper: path under %s too long", zk->root);
  PREPARE(zk, rel, path, r, err);
  struct Stat *stat = calloc(1, sizeof *stat);
  if (!stat) {
    req_unref(r);
    req_unref(r);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  zoo_op_t ops[2];
  zoo_check_op_init(&ops[0], check, -1);
  zoo_set_op_init(&ops[1], path, data, (int)len, version, stat);
  /* the results (and the stat the set fills) belong to the request record,
   * which outlives a caller that gave up */
  r->data = (char *)stat;
  int rc = req_wait(r, zoo_amulti(zk->zh, 2, ops, r->results, on_void, r), timeout_ms);
  if (rc == ZOK && new_version) *new_version = stat->version;
  if (rc == ZNONODE || rc == ZBADVERSION) {
    /* the check's node is gone, or another writer moved the bound */
    req_unref(r);
    if (rc == ZNONODE)
      return pc_error_set(err, PC_CONFLICT, "zookeeper %s: fenced write refused (%s is gone)",
                          path, check);
    return pc_error_set(err, PC_CONFLICT, "zookeeper %s: fenced write refused (version changed)",
                        path);
  }
  return finish(r, rc, path, timeout_ms, err);
}

pc_status_t pc_zk_sync(pc_zk_t *zk, const char *rel, uint32_t timeout_ms, pc_error_t *err) {
  PREPARE(zk, rel, path, r, err);
  int rc = req_wait(r, zoo_async(zk->zh, path, on_string, r), timeout_ms);
  return finish(r, rc, path, timeout_ms, err);
}
