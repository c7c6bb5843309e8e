/* failpoint.c — the registry behind PC_FAILPOINT: parses the
 * PERCOLATOR_FAILPOINTS specification, refusing points that
 * failpoint_names.h does not list, and performs the armed action when a
 * named point of the protocol is reached, so tests can crash or fail a
 * process at an exact step. */
#include "core/failpoint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "core/failpoint_names.h"
#include "core/suggest.h"

enum fp_action { FP_OFF, FP_RETURN, FP_EXIT, FP_ABORT, FP_SLEEP, FP_PAUSE };

struct fp {
  char name[64];
  enum fp_action action;
  long arg;
  unsigned long nth;  /* fire only on this hit (0 = every hit) */
  unsigned long hits;
};

#define FP_MAX 64

atomic_int pc_failpoints_armed;
static pthread_mutex_t fp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fp_cv = PTHREAD_COND_INITIALIZER; /* a new spec: paused points go on */
static unsigned long fp_gen;                             /* specs configured so far */
static struct fp fps[FP_MAX];
static int fp_count;

#define FP_NAME(name, where) name,
static const char *const known_names[] = {PC_FAILPOINT_LIST(FP_NAME)};
#undef FP_NAME
#define NKNOWN (sizeof known_names / sizeof known_names[0])

const char *const *pc_failpoint_names(size_t *n) {
  *n = NKNOWN;
  return known_names;
}

/* PC_OK when name is a point of the registry, else PC_INVALID naming it. */
static pc_status_t check_name(const char *name, pc_error_t *err) {
  for (size_t i = 0; i < NKNOWN; i++)
    if (strcmp(known_names[i], name) == 0) return PC_OK;
  const char *hint = pc_suggest(name, strlen(name), known_names, NKNOWN);
  if (hint)
    return pc_error_set(err, PC_INVALID,
                        "PERCOLATOR_FAILPOINTS: no failpoint named '%s' (did you mean '%s'?)",
                        name, hint);
  return pc_error_set(err, PC_INVALID, "PERCOLATOR_FAILPOINTS: no failpoint named '%s'", name);
}

static pc_status_t parse_action(const char *s, struct fp *fp, pc_error_t *err) {
  char *end;
  fp->nth = 0;
  const char *star = strchr(s, '*');
  if (star) {
    unsigned long n = strtoul(s, &end, 10);
    if (end != star || n == 0)
      return pc_error_set(err, PC_INVALID, "failpoint '%s': bad count before '*' in '%s'",
                          fp->name, s);
    fp->nth = n;
    s = star + 1;
  }
  fp->arg = 0;
  if (strcmp(s, "off") == 0) {
    fp->action = FP_OFF;
  } else if (strcmp(s, "return") == 0) {
    fp->action = FP_RETURN;
  } else if (strcmp(s, "abort") == 0) {
    fp->action = FP_ABORT;
  } else if (strcmp(s, "pause") == 0) {
    fp->action = FP_PAUSE;
  } else if (strncmp(s, "exit", 4) == 0) {
    fp->action = FP_EXIT;
    fp->arg = 137;
    if (s[4] == '(') {
      fp->arg = strtol(s + 5, &end, 10);
      if (*end != ')' || end[1])
        return pc_error_set(err, PC_INVALID, "failpoint '%s': bad action '%s'", fp->name, s);
    } else if (s[4]) {
      return pc_error_set(err, PC_INVALID, "failpoint '%s': bad action '%s'", fp->name, s);
    }
  } else if (strncmp(s, "sleep(", 6) == 0) {
    fp->action = FP_SLEEP;
    fp->arg = strtol(s + 6, &end, 10);
    if (*end != ')' || end[1] || fp->arg < 0)
      return pc_error_set(err, PC_INVALID, "failpoint '%s': bad action '%s'", fp->name, s);
  } else {
    return pc_error_set(err, PC_INVALID,
                        "failpoint '%s': unknown action '%s' (return, exit, exit(N), abort, "
                        "sleep(MS), pause, off)",
                        fp->name, s);
  }
  return PC_OK;
}

pc_status_t pc_failpoints_configure(const char *spec, pc_error_t *err) {
  struct fp parsed[FP_MAX];
  int n = 0;
  if (spec) {
    char *copy = strdup(spec);
    if (!copy) return pc_error_set(err, PC_NOMEM, "failpoints: out of memory");
    char *save = NULL;
    for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
      while (*tok == ' ') tok++;
      if (!*tok) continue;
      char *eq = strchr(tok, '=');
      if (!eq || eq == tok || (size_t)(eq - tok) >= sizeof parsed[0].name || n == FP_MAX) {
        pc_error_set(err, PC_INVALID, "PERCOLATOR_FAILPOINTS: bad entry '%s' (want name=action)",
                     tok);
        free(copy);
        return PC_INVALID;
      }
      memset(&parsed[n], 0, sizeof parsed[n]);
      memcpy(parsed[n].name, tok, (size_t)(eq - tok));
      if (check_name(parsed[n].name, err) != PC_OK ||
          parse_action(eq + 1, &parsed[n], err) != PC_OK) {
        free(copy);
        return PC_INVALID;
      }
      n++;
    }
    free(copy);
  }
  pthread_mutex_lock(&fp_mu);
  memcpy(fps, parsed, sizeof(struct fp) * (size_t)n);
  fp_count = n;
  atomic_store(&pc_failpoints_armed, n > 0);
  fp_gen++;
  pthread_cond_broadcast(&fp_cv);
  pthread_mutex_unlock(&fp_mu);
  return PC_OK;
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pc_status_t env_status = PC_OK;
static pc_error_t env_error;

static void init_from_env_once(void) {
  const char *spec = getenv("PERCOLATOR_FAILPOINTS");
  if (spec && *spec) env_status = pc_failpoints_configure(spec, &env_error);
}

pc_status_t pc_failpoints_init_from_env(pc_error_t *err) {
  pthread_once(&env_once, init_from_env_once);
  if (env_status != PC_OK && err) *err = env_error;
  return env_status;
}

pc_status_t pc_failpoint_eval(const char *name, pc_error_t *err) {
  enum fp_action action = FP_OFF;
  long arg = 0;
  pthread_mutex_lock(&fp_mu);
  unsigned long gen = fp_gen;
  for (int i = 0; i < fp_count; i++) {
    if (strcmp(fps[i].name, name) != 0) continue;
    fps[i].hits++;
    if (fps[i].nth == 0 || fps[i].hits == fps[i].nth) {
      action = fps[i].action;
      arg = fps[i].arg;
    }
    break;
  }
  while (action == FP_PAUSE && gen == fp_gen) pthread_cond_wait(&fp_cv, &fp_mu);
  pthread_mutex_unlock(&fp_mu);
  switch (action) {
    case FP_OFF:
    case FP_PAUSE:
      return PC_OK;
    case FP_SLEEP:
      pc_sleep_ms((uint32_t)arg);
      return PC_OK;
    case FP_RETURN:
      return pc_error_set(err, PC_IO_ERROR, "failpoint %s", name);
    case FP_EXIT:
      fprintf(stderr, "failpoint %s: exiting with status %ld\n", name, arg);
      _exit((int)arg);
    case FP_ABORT:
      fprintf(stderr, "failpoint %s: abort\n", name);
      abort();
  }
  return PC_OK;
}
