/* log.h — leveled logging to stderr for the daemons and the CLI:
 * "2026-11-22T08:00:00.123Z INFO  tablet: listening on 127.0.0.1:7100". */
#ifndef PC_BASE_LOG_H
#define PC_BASE_LOG_H

typedef enum pc_log_level { PC_LOG_DEBUG, PC_LOG_INFO, PC_LOG_WARN, PC_LOG_ERROR } pc_log_level_t;

/* Messages below level are dropped (default PC_LOG_INFO). */
void pc_log_set_level(pc_log_level_t level);
/* Parses "debug", "info", "warn", "error"; -1 if unknown. */
int pc_log_parse_level(const char *name);
void pc_log(pc_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A budget of lines for one kind of message that a peer can provoke at will
 * (protocol errors, refused connections): at most PC_LOG_LIMIT_BURST lines a
 * second; the next line after a second with drops says how many were
 * dropped. Zero-initialise; thread-safe. */
#define PC_LOG_LIMIT_BURST 10
typedef struct pc_log_limit {
  _Atomic unsigned long long window; /* the second being counted */
  _Atomic unsigned count, dropped;
} pc_log_limit_t;

void pc_log_limited(pc_log_limit_t *lim, pc_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
