/* log.h — leveled logging to stderr for the daemons and the CLI:
 * "2026-11-22T08:00:00.123Z INFO  tablet: listening on 127.0.0.1:7100". */
#ifndef PC_CORE_LOG_H
#define PC_CORE_LOG_H

typedef enum pc_log_level { PC_LOG_DEBUG, PC_LOG_INFO, PC_LOG_WARN, PC_LOG_ERROR } pc_log_level_t;

/* Messages below level are dropped (default PC_LOG_INFO). */
void pc_log_set_level(pc_log_level_t level);
/* Parses "debug", "info", "warn", "error"; -1 if unknown. */
int pc_log_parse_level(const char *name);
void pc_log(pc_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
