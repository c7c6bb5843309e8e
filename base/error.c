/* error.c — the one error convention of the library: a pc_status_t returned by
 * every fallible call, with an optional pc_error_t that receives the status and
 * a message naming the thing at fault. Also the small time helpers every
 * module uses for deadlines, the count of cores a module sizes its threads
 * by, and the per-thread call deadline of deadline.h. */
#include "base/error.h"
#include "base/deadline.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const status_names[] = {
    [PC_OK] = "ok",
    [PC_NOT_FOUND] = "not_found",
    [PC_CONFLICT] = "conflict",
    [PC_LOCKED] = "locked",
    [PC_TIMEOUT] = "timeout",
    [PC_ABORTED] = "aborted",
    [PC_IO_ERROR] = "io_error",
    [PC_INVALID] = "invalid_argument",
    [PC_CORRUPTION] = "corruption",
    [PC_BUSY] = "busy",
    [PC_UNAVAILABLE] = "unavailable",
    [PC_STATE] = "wrong_state",
    [PC_NOMEM] = "out_of_memory",
    [PC_INTERNAL] = "internal",
    [PC_UNKNOWN] = "unknown",
    [PC_DENIED] = "denied",
};

const char *pc_status_name(pc_status_t status) {
  if ((unsigned)status < sizeof status_names / sizeof status_names[0] && status_names[status])
    return status_names[status];
  return "unrecognized_status"; /* not a pc_status_t: "unknown" is PC_UNKNOWN's name */
}

void pc_free(void *ptr) { free(ptr); }

const char *pc_version(void) { return "0.1.0"; }

pc_status_t pc_error_set(pc_error_t *err, pc_status_t code, const char *fmt, ...) {
  if (err) {
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
  }
  return code;
}

void pc_error_prefix(pc_error_t *err, const char *fmt, ...) {
  if (!err) return;
  char prefix[PC_ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char joined[2 * PC_ERROR_TEXT + 2];
  snprintf(joined, sizeof joined, "%s: %s", prefix, err->text);
  size_t n = strnlen(joined, PC_ERROR_TEXT - 1);
  memcpy(err->text, joined, n);
  err->text[n] = '\0';
}

static uint64_t clock_ms(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

uint64_t pc_now_mono_ms(void) { return clock_ms(CLOCK_MONOTONIC); }
uint64_t pc_now_wall_ms(void) { return clock_ms(CLOCK_REALTIME); }

int pc_cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  int rc = pthread_condattr_init(&attr);
  if (rc != 0) return rc;
  rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (rc == 0) rc = pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
  return rc;
}

struct timespec pc_mono_after_ms(uint32_t ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += (time_t)(ms / 1000u);
  t.tv_nsec += (long)(ms % 1000u) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

void pc_sleep_ms(uint32_t ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

uint32_t pc_cores(void) {
  cpu_set_t set;
  long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (uint32_t)n;
}

/* ---- per-thread call deadline (deadline.h) ---- */

static _Thread_local uint64_t call_deadline;

uint64_t pc_deadline_set(uint64_t deadline_ms) {
  uint64_t old = call_deadline;
  call_deadline = deadline_ms;
  return old;
}

uint64_t pc_deadline_get(void) { return call_deadline; }

static _Thread_local int nowait_on, nowait_refused;

void pc_nowait_begin(void) {
  nowait_on = 1;
  nowait_refused = 0;
}

int pc_nowait_refuse(void) {
  if (!nowait_on) return 0;
  nowait_refused = 1;
  return 1;
}

int pc_nowait_end(void) {
  int r = nowait_refused;
  nowait_on = nowait_refused = 0;
  return r;
}

static _Thread_local pc_cancel_t call_cancel;

pc_cancel_t pc_cancel_set(pc_cancel_t c) {
  pc_cancel_t old = call_cancel;
  call_cancel = c;
  return old;
}

pc_status_t pc_call_check(const char *what, pc_error_t *err) {
  int why = call_cancel.fn ? call_cancel.fn(call_cancel.ctx) : 0;
  if (why == PC_CANCEL_STOPPING)
    return pc_error_set(err, PC_TIMEOUT, "%s stopped: the server is stopping", what);
  if (why)
    return pc_error_set(err, PC_TIMEOUT, "%s stopped: nobody waits for it any more (its "
                        "client went away)", what);
  if (call_deadline && pc_now_mono_ms() >= call_deadline)
    return pc_error_set(err, PC_TIMEOUT, "%s stopped: its deadline passed", what);
  return PC_OK;
}

uint32_t pc_deadline_bound(uint32_t default_ms) {
  if (call_deadline == 0) return default_ms;
  uint64_t now = pc_now_mono_ms();
  uint64_t left = call_deadline > now ? call_deadline - now : 1;
  return left < default_ms ? (uint32_t)left : default_ms;
}
