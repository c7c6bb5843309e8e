/* daemons.c — the processes a test starts and stops itself (daemons.h). */
#include "tests/daemons.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "tests/testutil.h"

const char *tu_cli_path(void) {
  const char *p = getenv("PERCOLATOR_CLI");
  return p && *p ? p : NULL;
}

int tu_daemons_setup(void **state, const char *tag) {
  if (!tu_cli_path()) {
    fprintf(stderr, "PERCOLATOR_CLI is not set: skipping\n");
    *state = NULL;
    return 0;
  }
  tu_daemons_t *fx = calloc(1, sizeof *fx);
  assert_non_null(fx);
  fx->dir = tu_mkdtemp(tag);
  *state = fx;
  return 0;
}

int tu_daemons_teardown(void **state) {
  tu_daemons_t *fx = *state;
  if (!fx) return 0;
  for (int i = 0; i < fx->npids; i++)
    if (fx->pids[i] > 0) {
      kill(fx->pids[i], SIGKILL);
      waitpid(fx->pids[i], NULL, 0);
    }
  if (getenv("PC_KEEP_TEST_DIRS"))
    fprintf(stderr, "kept %s\n", fx->dir), free(fx->dir);
  else
    tu_rmtree(fx->dir);
  free(fx);
  return 0;
}

pid_t tu_spawn_logged(const char *logp, const char *const *argv) {
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null = open("/dev/null", O_RDONLY);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(1);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

pid_t tu_daemons_spawn(tu_daemons_t *fx, const char *logp, const char *const *argv) {
  assert_true(fx->npids < TU_DAEMONS_MAX);
  pid_t pid = tu_spawn_logged(logp, argv);
  snprintf(fx->logs[fx->npids], sizeof fx->logs[fx->npids], "%s", logp);
  fx->pids[fx->npids++] = pid;
  return pid;
}

json_t *tu_daemons_ready(tu_daemons_t *fx, pid_t pid, const char *ready, const char *logp,
                         uint32_t ms, const char *what) {
  uint64_t end = pc_now_mono_ms() + ms;
  for (;;) {
    json_t *j = json_load_file(ready, 0, NULL);
    if (j) return j;
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      tu_daemons_forget(fx, pid);
      char *log = tu_slurp(logp);
      fail_msg("%s exited (status 0x%x): %s", what, st, log);
    }
    if (pc_now_mono_ms() > end) fail_msg("%s did not become ready; see %s", what, logp);
    pc_sleep_ms(10);
  }
}

void tu_daemons_no_sanitizer_report(tu_daemons_t *fx, pid_t pid) {
  for (int i = 0; i < fx->npids; i++) {
    if (fx->pids[i] != pid) continue;
    char *log = tu_slurp(fx->logs[i]);
    if (strstr(log, "Sanitizer") || strstr(log, "runtime error:"))
      fail_msg("a sanitizer report in %s:\n%s", fx->logs[i], log);
    free(log);
  }
}

void tu_daemons_forget(tu_daemons_t *fx, pid_t pid) {
  for (int i = 0; i < fx->npids; i++)
    if (fx->pids[i] == pid) fx->pids[i] = 0;
}

void tu_daemons_stop(tu_daemons_t *fx, pid_t pid) {
  assert_int_equal(kill(pid, SIGTERM), 0);
  uint64_t end = pc_now_mono_ms() + 30000;
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) != pid) {
    if (pc_now_mono_ms() > end) fail_msg("pid %d ignored SIGTERM", (int)pid);
    pc_sleep_ms(10);
  }
  tu_daemons_no_sanitizer_report(fx, pid);
  tu_daemons_forget(fx, pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}
