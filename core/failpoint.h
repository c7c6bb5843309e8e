/* failpoint.h — named fault-injection points.
 *
 * PERCOLATOR_FAILPOINTS="name=action;name=action..." arms points, where action is
 *   return          the point fails with PC_IO_ERROR "failpoint NAME"
 *   exit / exit(N)  the process exits at once with _exit(N) (default 137)
 *   abort           abort()
 *   sleep(MS)       sleep MS milliseconds, then continue
 *   pause           wait until the points are configured again, then continue
 *                   (tests that hold a thread at a point: pc_failpoints_configure)
 *   off             nothing
 * optionally prefixed by "K*" to fire only on the K-th time the point is hit
 * (e.g. "txn.commit.after_secondary=2*exit"). Points cost one relaxed atomic
 * load when nothing is armed. pc_failpoints_configure() re-reads a spec (tests).
 * Every point is listed in failpoint_names.h; a spec naming another is
 * refused. */
#ifndef PC_CORE_FAILPOINT_H
#define PC_CORE_FAILPOINT_H

#include <stdatomic.h>
#include <stddef.h>

#include <percolator/percolator.h>

extern atomic_int pc_failpoints_armed;

pc_status_t pc_failpoint_eval(const char *name, pc_error_t *err);

/* Parses spec (NULL: clear all); PC_INVALID naming the bad entry, e.g. a
 * point that failpoint_names.h does not list ("no failpoint named 'X' (did
 * you mean 'Y'?)"). On error the points armed before stay armed. */
pc_status_t pc_failpoints_configure(const char *spec, pc_error_t *err);

/* Reads PERCOLATOR_FAILPOINTS once per process; called by pc_db_open,
 * pc_db_open_config and the daemons, which refuse to start on its error. */
pc_status_t pc_failpoints_init_from_env(pc_error_t *err);

/* The names of failpoint_names.h, in its order: *n receives the count. */
const char *const *pc_failpoint_names(size_t *n);

#define PC_FAILPOINT(name, err)                                                   \
  (atomic_load_explicit(&pc_failpoints_armed, memory_order_relaxed)              \
       ? pc_failpoint_eval((name), (err))                                         \
       : PC_OK)

#endif
