/* ls_internal.h — private to lockservice/ (and its tests): the bounds of a
 * session's TTL and the capacity limits of the in-process lock service.
 */
#ifndef PC_LOCKSERVICE_LS_INTERNAL_H
#define PC_LOCKSERVICE_LS_INTERNAL_H

/* Bounds of a session's TTL, shared by the object and the client. */
#define PC_LS_TTL_MIN 1u
#define PC_LS_TTL_MAX 600000u

/* Default capacity limits of a pc_ls_t (memory stays bounded whatever the
 * clients do): a new session beyond max_sessions, or a new lock beyond
 * max_locks_per_session, max_locks or max_name_bytes (sum of the names of all
 * held locks), is refused with PC_BUSY naming the limit. */
#define PC_LS_DEFAULT_MAX_SESSIONS 100000u
#define PC_LS_DEFAULT_MAX_LOCKS_PER_SESSION 100000u
#define PC_LS_DEFAULT_MAX_LOCKS 1000000u
#define PC_LS_DEFAULT_MAX_NAME_BYTES (64u << 20)

#include <stddef.h>

#include "lockservice/lockservice.h"

/* Changes the limits (0 keeps a limit as it is); limits below the current
 * usage only refuse new sessions and locks. For tests and tuning. */
void pc_ls_set_limits(pc_ls_t *ls, size_t max_sessions, size_t max_locks_per_session,
                      size_t max_locks, size_t max_name_bytes);

#endif
