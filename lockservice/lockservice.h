/* lockservice.h — the in-process lock service: sessions with a TTL kept
 * alive by their holder, and leased named locks that die with their session.
 * The notification workers of a database handle share one, so that two of
 * their threads never scan the same claim of buckets at once
 * (notify/claims.c). A cluster's coordination (liveness of lock owners,
 * workers' membership, cluster-wide locks) is ZooKeeper's: coord.h. The two
 * are layered, not alternatives: this keeps one handle's threads apart,
 * ZooKeeper keeps processes apart, and a worker in a cluster takes a named
 * lock in both (docs/ARCHITECTURE.md, "The in-process lock service beside
 * ZooKeeper"). pc_ls_liveness_t is shared with coord.h's pc_coord_liveness.
 *
 * Session ids are (epoch << 32 | counter), where epoch is chosen at random
 * when the service starts. A session of another epoch is PC_LS_UNKNOWN, not
 * dead.
 */
#ifndef PC_LOCKSERVICE_LOCKSERVICE_H
#define PC_LOCKSERVICE_LOCKSERVICE_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#include "core/keys.h"
#include "net/rpc.h"

#define PC_LS_MAX_NAME 1024

typedef enum pc_ls_liveness {
  PC_LS_DEAD = 0,    /* the session is gone (closed or expired) */
  PC_LS_ALIVE = 1,
  PC_LS_UNKNOWN = 2  /* it cannot be told: fall back to the locks' leases */
} pc_ls_liveness_t;

/* ---- in-process service ------------------------------------------------- */

typedef struct pc_ls pc_ls_t;

/* A new service with a fresh random epoch. Returns NULL on allocation failure.
 * Thread-safe. Expiry uses the monotonic clock. Release with pc_ls_destroy. */
pc_ls_t *pc_ls_create(void);
void pc_ls_destroy(pc_ls_t *ls);
uint32_t pc_ls_epoch(const pc_ls_t *ls);

/* Opens a session living ttl_ms (1..600000) past its last keep-alive. */
pc_status_t pc_ls_session_open(pc_ls_t *ls, uint32_t ttl_ms, uint64_t *session, pc_error_t *err);
/* Extends a session; PC_NOT_FOUND if it has expired or was closed. */
pc_status_t pc_ls_session_keepalive(pc_ls_t *ls, uint64_t session, pc_error_t *err);
/* Closes a session and releases its locks; PC_NOT_FOUND if unknown. */
pc_status_t pc_ls_session_close(pc_ls_t *ls, uint64_t session, pc_error_t *err);
pc_ls_liveness_t pc_ls_session_liveness(pc_ls_t *ls, uint64_t session);
/* Number of live sessions (expired ones are reaped first). */
size_t pc_ls_session_count(pc_ls_t *ls);

/* Tries to take lock `name` for session: *acquired = 1 when taken now or
 * already held by the same session; otherwise *holder is the holding session.
 * PC_NOT_FOUND if session is not alive. */
pc_status_t pc_ls_lock_try(pc_ls_t *ls, uint64_t session, const char *name, size_t nlen,
                           int *acquired, uint64_t *holder, pc_error_t *err);
/* Releases lock `name` if session holds it; PC_NOT_FOUND otherwise. */
pc_status_t pc_ls_lock_release(pc_ls_t *ls, uint64_t session, const char *name, size_t nlen,
                               pc_error_t *err);
/* The live session holding `name`, or 0. */
uint64_t pc_ls_lock_holder(pc_ls_t *ls, const char *name, size_t nlen);

#endif
