/* daemons.h — the `percolator` processes a test starts itself and must stop
 * (test_security, test_identities): each runs with its output in a log of
 * the test's directory, dies with the test (PR_SET_PDEATHSIG), and is
 * killed by the teardown if the test did not stop it. A failure here fails
 * the running cmocka test with a message naming the log. */
#ifndef PC_TESTS_DAEMONS_H
#define PC_TESTS_DAEMONS_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#define TU_DAEMONS_MAX 8

typedef struct tu_daemons {
  char *dir;                         /* the test's directory (tu_mkdtemp) */
  pid_t pids[TU_DAEMONS_MAX];        /* 0 once stopped or reaped */
  char logs[TU_DAEMONS_MAX][4200];   /* each process's output */
  int npids;
} tu_daemons_t;

/* The `percolator` program (PERCOLATOR_CLI), or NULL when not set. */
const char *tu_cli_path(void);

/* cmocka setup and teardown: *state becomes a tu_daemons_t in a new directory
 * named after tag, or NULL (the tests skip) when PERCOLATOR_CLI is not set;
 * the teardown kills what is left and removes the directory (kept with
 * PC_KEEP_TEST_DIRS). */
int tu_daemons_setup(void **state, const char *tag);
int tu_daemons_teardown(void **state);

/* Starts argv (argv[0] a path) with stdin from /dev/null and its output in
 * logp (truncated), dying with this process; returns its pid, which the
 * caller reaps. */
pid_t tu_spawn_logged(const char *logp, const char *const *argv);

/* tu_spawn_logged, the process recorded in fx for the teardown to stop. */
pid_t tu_daemons_spawn(tu_daemons_t *fx, const char *logp, const char *const *argv);

/* Waits up to ms for pid's ready file to hold JSON and returns it (the
 * caller json_decref()s it); fails the test, naming what and logp, when pid
 * exits first or the time runs out. */
json_t *tu_daemons_ready(tu_daemons_t *fx, pid_t pid, const char *ready, const char *logp,
                         uint32_t ms, const char *what);

/* SIGTERM to pid: it must exit 0 within 30 s, its output free of sanitizer
 * reports. */
void tu_daemons_stop(tu_daemons_t *fx, pid_t pid);

/* Fails the test when pid's output holds a sanitizer's report. */
void tu_daemons_no_sanitizer_report(tu_daemons_t *fx, pid_t pid);

/* pid was reaped by the caller: the teardown leaves it alone. */
void tu_daemons_forget(tu_daemons_t *fx, pid_t pid);

#endif
