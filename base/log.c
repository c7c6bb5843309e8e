/* log.c — leveled, timestamped log lines on stderr, one write(2) per line so
 * lines from several threads never interleave. */
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = PC_LOG_INFO;
static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void pc_log_set_level(pc_log_level_t level) { atomic_store(&log_level, (int)level); }

int pc_log_parse_level(const char *name) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  for (int i = 0; i < 4; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

static void vlog(pc_log_level_t level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

void pc_log(pc_log_level_t level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, fmt, ap);
  va_end(ap);
}

void pc_log_limited(pc_log_limit_t *lim, pc_log_level_t level, const char *fmt, ...) {
  if ((int)level < atomic_load(&log_level)) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned long long now = (unsigned long long)ts.tv_sec;
  unsigned long long window = atomic_load(&lim->window);
  if (window != now && atomic_compare_exchange_strong(&lim->window, &window, now)) {
    atomic_store(&lim->count, 0);
    unsigned dropped = atomic_exchange(&lim->dropped, 0);
    if (dropped)
      pc_log(level, "(%u similar message%s dropped in the last %llu s)", dropped,
             dropped == 1 ? "" : "s", now - window);
  }
  if (atomic_fetch_add(&lim->count, 1) >= PC_LOG_LIMIT_BURST) {
    atomic_fetch_add(&lim->dropped, 1);
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vlog(level, fmt, ap);
  va_end(ap);
}

static void vlog(pc_log_level_t level, const char *fmt, va_list ap) {
  if ((int)level < atomic_load(&log_level)) return;
  char line[1024];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  n += snprintf(line + n, sizeof line - (size_t)n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000L,
                level_names[level]);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  n = m < 0 ? n : (n + m > (int)sizeof line - 2 ? (int)sizeof line - 2 : n + m);
  line[n++] = '\n';
  ssize_t w = write(2, line, (size_t)n);
  (void)w;
}
