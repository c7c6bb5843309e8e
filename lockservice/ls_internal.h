/* ls_internal.h — private to lockservice/ (and its tests): the ops of the
 * lock service on the rpc.h protocol, the encoding of their bodies (every
 * integer big-endian, str = u32 length + bytes, as written by pc_buf_* and
 * read by pc_rd_* of core/keys.h), and the capacity limits. A request with
 * a truncated body, trailing bytes, a name outside 1..PC_LS_MAX_NAME bytes or
 * an unknown op is answered PC_INVALID with a message naming the fault.
 *
 *   op    name            request                      reply (on PC_OK)
 *   0x10  SESSION_OPEN    ttl_ms:u32                   session:u64
 *   0x11  KEEPALIVE       session:u64 oldest:u64       (empty)
 *   0x12  SESSION_CLOSE   session:u64                  (empty)
 *   0x13  LIVENESS        session:u64                  liveness:u8 (0 dead, 1 alive, 2 unknown)
 *   0x14  LOCK_TRY        session:u64 name:str         acquired:u8 holder:u64
 *   0x15  LOCK_RELEASE    session:u64 name:str         (empty)
 *   0x16  LOCK_HOLDER     name:str                     holder:u64 (0: free)
 *   0x17  INFO            (empty)                      epoch:u32 sessions:u64
 *   0x18  OLDEST          (empty)                      oldest:u64 unreported:u64
 *
 * KEEPALIVE extends the session and records its report for garbage
 * collection: oldest is the oldest start_ts the client holds open, UINT64_MAX
 * when it holds none (pc_ls_session_report); a body of the session alone is
 * truncated. OLDEST needs no session: it answers pc_ls_oldest_reported, the
 * minimum of the latest reports of live sessions (UINT64_MAX: none) and how
 * many live sessions have not reported yet.
 *
 * Errors travel as the rpc status with a message: PC_NOT_FOUND (session not
 * alive, lock not held), PC_INVALID (malformed request or argument out of
 * range), PC_BUSY (a capacity limit), PC_NOMEM.
 */
#ifndef PC_LOCKSERVICE_LS_INTERNAL_H
#define PC_LOCKSERVICE_LS_INTERNAL_H

#define PC_LS_OP_SESSION_OPEN 0x10
#define PC_LS_OP_KEEPALIVE 0x11
#define PC_LS_OP_SESSION_CLOSE 0x12
#define PC_LS_OP_LIVENESS 0x13
#define PC_LS_OP_LOCK_TRY 0x14
#define PC_LS_OP_LOCK_RELEASE 0x15
#define PC_LS_OP_LOCK_HOLDER 0x16
#define PC_LS_OP_INFO 0x17
#define PC_LS_OP_OLDEST 0x18

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
