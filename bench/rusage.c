/* rusage.c — pc_bench_rusage: runs a command and says what it cost, for the
 * benchmark scripts (bench/dedup.sh), which time CLI verbs and need their
 * peak memory too, with nothing beyond the build.
 *
 *   pc_bench_rusage OUT.json COMMAND [ARG...]
 *
 * Runs COMMAND with this program's standard input, output and error, waits
 * for it, and writes one JSON line to OUT.json: {"seconds": wall time,
 * "user_s", "sys_s": its CPU (and its children's), "max_rss_kb": its peak
 * resident set (the largest of it and its waited-for children's, from
 * wait4), "exit": its exit status (128 + the signal's number when a signal
 * ended it)}. Exits with COMMAND's status, so a script under set -e still
 * sees a failure; 127 when COMMAND cannot be run, 125 when OUT.json cannot be
 * written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WHO "pc_bench_rusage"

static double secs(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: " WHO " OUT.json COMMAND [ARG...]\n");
    return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, WHO ": fork: %s\n", strerror(errno));
    return 127;
  }
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    fprintf(stderr, WHO ": %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0)
    if (errno != EINTR) {
      fprintf(stderr, WHO ": wait4: %s\n", strerror(errno));
      return 127;
    }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  /* wait4 reports the child alone; its own children (a shell's) are in
   * RUSAGE_CHILDREN, which holds the child too */
  struct rusage all;
  getrusage(RUSAGE_CHILDREN, &all);
  long rss = ru.ru_maxrss > all.ru_maxrss ? ru.ru_maxrss : all.ru_maxrss;
  FILE *f = fopen(argv[1], "w");
  if (!f) {
    fprintf(stderr, WHO ": %s: %s\n", argv[1], strerror(errno));
    return 125;
  }
  fprintf(f,
          "{\"seconds\": %.3f, \"user_s\": %.2f, \"sys_s\": %.2f, \"max_rss_kb\": %ld, "
          "\"exit\": %d}\n",
          (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
          secs(all.ru_utime), secs(all.ru_stime), rss, code);
  if (fclose(f) != 0) {
    fprintf(stderr, WHO ": %s: %s\n", argv[1], strerror(errno));
    return 125;
  }
  return code;
}
