/* error.h — internal helpers for the pc_error_t convention of percolator.h,
 * and the few facts of the platform every module asks for: the clocks and
 * sleeps deadlines are built on, monotonic condition variables, and the count
 * of cores a module sizes its threads by (pc_cores). */
#ifndef PC_BASE_ERROR_H
#define PC_BASE_ERROR_H

#include <pthread.h>
#include <time.h>

#include <percolator/percolator.h>

/* The highest pc_status_t: a status read from the network above it is not one. */
#define PC_STATUS_MAX PC_DENIED

/* Fills err (when not NULL) with code and a printf-style message; returns code.
 * Marked cold, as is pc_error_prefix: the compiler then lays every path that
 * ends in an error away from the hot code, which keeps the read path's code
 * in fewer cache lines. */
pc_status_t pc_error_set(pc_error_t *err, pc_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), cold));

/* Resets err to PC_OK with an empty message (when not NULL). Inline: every
 * public call starts with it. */
static inline void pc_error_clear(pc_error_t *err) {
  if (err) {
    err->code = PC_OK;
    err->text[0] = '\0';
  }
}

/* Prefixes err's message with "prefix: ", keeping its code (no-op when err is
 * NULL; callers return the status they hold, not err->code). */
void pc_error_prefix(pc_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), cold));

/* Current time in milliseconds: monotonic clock (for deadlines) and wall clock. */
uint64_t pc_now_mono_ms(void);
uint64_t pc_now_wall_ms(void);

/* Sleeps for ms milliseconds (restarting after signals). */
void pc_sleep_ms(uint32_t ms);

/* The cores this process may run on: its CPU affinity, or the online cores
 * when that cannot be read; at least 1. */
uint32_t pc_cores(void);

/* Condition variables whose timed waits run on the monotonic clock, so that
 * a wall clock stepping does not stretch or cut them: pc_cond_init_mono
 * initialises cv (0, or an error number), and pc_mono_after_ms is the
 * instant ms milliseconds from now to pass to pthread_cond_timedwait. */
int pc_cond_init_mono(pthread_cond_t *cv);
struct timespec pc_mono_after_ms(uint32_t ms);

#endif
