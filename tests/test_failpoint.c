/* test_failpoint.c — the failpoint registry (core/failpoint_names.h).
 * PERCOLATOR_FAILPOINTS naming a point that does not exist is PC_INVALID
 * naming it, with a did-you-mean when a listed name is close, and leaves
 * what was armed before armed; pc_db_open and pc_db_open_config refuse to
 * open with such an environment. Every listed point can be armed. The
 * sources agree with the list: every PC_FAILPOINT (or macro wrapping it,
 * like txn.c's VANISH_AT) in core/, tso/, lockservice/, tablet/, net/,
 * config/, apps/, bench/, include/, notify/, observers/, daemon/ and
 * replica/ names listed points with string literals, nothing calls
 * pc_failpoint_eval around the macro, every listed point is used somewhere
 * and documented in docs/ARCHITECTURE.md. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/failpoint.h"
#include "tests/testutil.h"

#ifndef PC_SOURCE_DIR
#error "PC_SOURCE_DIR must name the source tree (tests/CMakeLists.txt)"
#endif

static void expect_refused(const char *spec, const char *want) {
  pc_error_t err;
  pc_status_t st = pc_failpoints_configure(spec, &err);
  if (st != PC_INVALID) fail_msg("'%s': %s, want invalid_argument", spec, pc_status_name(st));
  assert_int_equal(err.code, PC_INVALID);
  if (strcmp(err.text, want) != 0) fail_msg("'%s':\n got: %s\nwant: %s", spec, err.text, want);
}

static void test_unknown_names_refused(void **state) {
  (void)state;
  expect_refused("txn.comit.before_primary=exit",
                 "PERCOLATOR_FAILPOINTS: no failpoint named 'txn.comit.before_primary' (did you "
                 "mean 'txn.commit.before_primary'?)");
  expect_refused("store.afterapply=return",
                 "PERCOLATOR_FAILPOINTS: no failpoint named 'store.afterapply' (did you mean "
                 "'store.after_apply'?)");
  expect_refused("TXN.COMMIT.AFTER_PRIMARY=return", /* names are exact */
                 "PERCOLATOR_FAILPOINTS: no failpoint named 'TXN.COMMIT.AFTER_PRIMARY' (did you "
                 "mean 'txn.commit.after_primary'?)");
  expect_refused("no.such.point=return",
                 "PERCOLATOR_FAILPOINTS: no failpoint named 'no.such.point'");
  /* the name is checked before the action, in every entry */
  expect_refused("txn.commit.after_primary=exit; tx.commit.after_secondary=2*bogus",
                 "PERCOLATOR_FAILPOINTS: no failpoint named 'tx.commit.after_secondary' (did you "
                 "mean 'txn.commit.after_secondary'?)");

  /* a refused spec leaves what was armed before armed */
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure("txn.commit.before_primary=return", &err), PC_OK);
  assert_int_equal(pc_failpoint_eval("txn.commit.before_primary", &err), PC_IO_ERROR);
  expect_refused("txn.commit.before_primary=off;txn.comit.after_primary=exit",
                 "PERCOLATOR_FAILPOINTS: no failpoint named 'txn.comit.after_primary' (did you "
                 "mean 'txn.commit.after_primary'?)");
  assert_int_equal(pc_failpoint_eval("txn.commit.before_primary", &err), PC_IO_ERROR);
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
  assert_int_equal(pc_failpoint_eval("txn.commit.before_primary", &err), PC_OK);
}

static void test_every_listed_point_can_be_armed(void **state) {
  (void)state;
  size_t n;
  const char *const *names = pc_failpoint_names(&n);
  assert_true(n > 0);
  for (size_t i = 0; i < n; i++) {
    char spec[128];
    snprintf(spec, sizeof spec, "%s=2*return", names[i]);
    pc_error_t err;
    if (pc_failpoints_configure(spec, &err) != PC_OK) fail_msg("'%s': %s", spec, err.text);
    assert_int_equal(pc_failpoint_eval(names[i], &err), PC_OK); /* the 1st hit */
    assert_int_equal(pc_failpoint_eval(names[i], &err), PC_IO_ERROR);
    for (size_t j = 0; j < i; j++) assert_string_not_equal(names[i], names[j]);
  }
  pc_error_t err;
  assert_int_equal(pc_failpoints_configure(NULL, &err), PC_OK);
}

/* ---- the environment: opening refuses a bad PERCOLATOR_FAILPOINTS ---------- */

/* In a child (the environment is read once per process): sets
 * PERCOLATOR_FAILPOINTS to spec, opens dir (config NULL) or the configuration,
 * and returns what the open said. */
static pc_error_t open_in_child(const char *spec, const char *dir, const char *config) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    setenv("PERCOLATOR_FAILPOINTS", spec, 1);
    pc_error_t err = {PC_OK, ""};
    pc_db_t *db;
    if (config) {
      db = pc_db_open_config(config, &err);
    } else {
      pc_options_t *o = pc_options_create();
      pc_options_set_create_if_missing(o, 1);
      db = pc_db_open(o, dir, &err);
      pc_options_destroy(o);
    }
    if (db) pc_db_close(db);
    _exit(write(fds[1], &err, sizeof err) == (ssize_t)sizeof err ? 0 : 1);
  }
  close(fds[1]);
  pc_error_t err;
  memset(&err, 0, sizeof err);
  assert_int_equal(read(fds[0], &err, sizeof err), (ssize_t)sizeof err);
  close(fds[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return err;
}

static void test_open_refuses_unknown_point(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("failpoint-env");
  char data[4200], config[4200];
  snprintf(data, sizeof data, "%s/data", dir);
  static const char want[] =
      "PERCOLATOR_FAILPOINTS: no failpoint named 'txn.comit.before_primary' (did you mean "
      "'txn.commit.before_primary'?)";
  pc_error_t err = open_in_child("txn.comit.before_primary=exit", data, NULL);
  assert_int_equal(err.code, PC_INVALID);
  assert_string_equal(err.text, want);
  /* a correct name opens (and creates the directory) */
  err = open_in_child("txn.commit.before_primary=off", data, NULL);
  if (err.code != PC_OK) fail_msg("open with a correct name: %s", err.text);

  snprintf(config, sizeof config, "%s/embedded.json", dir);
  FILE *f = fopen(config, "w");
  assert_non_null(f);
  fprintf(f, "{\"data_dir\": \"%s\"}\n", data);
  assert_int_equal(fclose(f), 0);
  err = open_in_child("txn.comit.before_primary=exit", NULL, config);
  assert_int_equal(err.code, PC_INVALID);
  assert_string_equal(err.text, want);
  err = open_in_child("txn.commit.before_primary=off", NULL, config);
  if (err.code != PC_OK) fail_msg("pc_db_open_config with a correct name: %s", err.text);
  tu_rmtree(dir);
}

/* ---- the sources agree with the registry ----------------------------------- */

#define MAX_USED 256
#define MAX_WRAPPERS 16

typedef struct scan {
  char used[MAX_USED][64]; /* names found in the sources */
  size_t nused;
  size_t uses; /* macro uses found */
  char problems[4096];
  size_t plen;
} scan_t;

static scan_t *the_scan;

static void problem(scan_t *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(scan_t *sc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (sc->plen < sizeof sc->problems - 1) {
    int k = vsnprintf(sc->problems + sc->plen, sizeof sc->problems - sc->plen, fmt, ap);
    if (k > 0) sc->plen += (size_t)k;
    if (sc->plen > sizeof sc->problems - 1) sc->plen = sizeof sc->problems - 1;
  }
  va_end(ap);
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 65536;
      char *b = realloc(buf, cap);
      if (!b) abort();
      buf = b;
    }
    size_t got = fread(buf + n, 1, 4096, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* Blanks comments (keeping newlines) so that only code is searched. */
static void strip_comments(char *s, size_t n) {
  enum { CODE, STR, CHR, BLOCK, LINE } st = CODE;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    switch (st) {
      case CODE:
        if (c == '"') st = STR;
        else if (c == '\'') st = CHR;
        else if (c == '/' && i + 1 < n && s[i + 1] == '*') st = BLOCK, s[i] = s[i + 1] = ' ', i++;
        else if (c == '/' && i + 1 < n && s[i + 1] == '/') st = LINE, s[i] = ' ';
        break;
      case STR:
      case CHR:
        if (c == '\\' && i + 1 < n) i++;
        else if ((st == STR && c == '"') || (st == CHR && c == '\'') || c == '\n') st = CODE;
        break;
      case BLOCK:
        if (c == '*' && i + 1 < n && s[i + 1] == '/') st = CODE, s[i] = s[i + 1] = ' ', i++;
        else if (c != '\n') s[i] = ' ';
        break;
      case LINE:
        if (c == '\n') st = CODE;
        else s[i] = ' ';
        break;
    }
  }
}

static int ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Whether s[i..] is the identifier id, standing alone. */
static int ident_at(const char *s, size_t n, size_t i, const char *id) {
  size_t k = strlen(id);
  return i + k <= n && memcmp(s + i, id, k) == 0 && (i == 0 || !ident_char(s[i - 1])) &&
         (i + k == n || !ident_char(s[i + k]));
}

static size_t line_of(const char *s, size_t i) {
  size_t line = 1;
  for (size_t k = 0; k < i; k++) line += s[k] == '\n';
  return line;
}

/* Blanks preprocessor directives (with their continuation lines), first
 * adding the name of every #define whose body uses PC_FAILPOINT to
 * wrappers[]. */
static void strip_directives(char *s, size_t n, char wrappers[][64], size_t *nwrappers) {
  size_t i = 0;
  while (i < n) {
    size_t start = i, j = i;
    while (j < n && (s[j] == ' ' || s[j] == '\t')) j++;
    size_t end = start; /* one past the directive's last line */
    if (j < n && s[j] == '#') {
      end = j;
      for (;;) {
        while (end < n && s[end] != '\n') end++;
        if (end > 0 && s[end - 1] == '\\' && end < n) {
          end++;
          continue;
        }
        break;
      }
      size_t k = j + 1;
      while (k < end && (s[k] == ' ' || s[k] == '\t')) k++;
      if (end - k > 6 && memcmp(s + k, "define", 6) == 0) {
        k += 6;
        while (k < end && (s[k] == ' ' || s[k] == '\t')) k++;
        size_t name = k;
        while (k < end && ident_char(s[k])) k++;
        int uses = 0;
        for (size_t m = k; m < end && !uses; m++) uses = ident_at(s, end, m, "PC_FAILPOINT");
        int itself = k - name == strlen("PC_FAILPOINT") &&
                     memcmp(s + name, "PC_FAILPOINT", k - name) == 0;
        if (uses && !itself && k > name && k - name < 64 && *nwrappers < MAX_WRAPPERS) {
          memcpy(wrappers[*nwrappers], s + name, k - name);
          wrappers[*nwrappers][k - name] = '\0';
          (*nwrappers)++;
        }
      }
      for (size_t m = start; m < end; m++)
        if (s[m] != '\n') s[m] = ' ';
    } else {
      while (end < n && s[end] != '\n') end++;
    }
    i = end < n ? end + 1 : n;
  }
}

static void add_used(scan_t *sc, const char *name, size_t len, const char *path, size_t line) {
  if (len >= sizeof sc->used[0]) {
    problem(sc, "%s:%zu: failpoint name of %zu bytes\n", path, line, len);
    return;
  }
  for (size_t i = 0; i < sc->nused; i++)
    if (strlen(sc->used[i]) == len && memcmp(sc->used[i], name, len) == 0) return;
  if (sc->nused == MAX_USED) return;
  memcpy(sc->used[sc->nused], name, len);
  sc->used[sc->nused][len] = '\0';
  sc->nused++;
}

/* The arguments of the call whose '(' is at s[open]: every string literal in
 * them is a failpoint name; at least one is required. */
static void scan_call(scan_t *sc, const char *s, size_t n, size_t open, const char *path,
                      const char *macro) {
  size_t line = line_of(s, open);
  int depth = 0, literals = 0;
  for (size_t i = open; i < n; i++) {
    if (s[i] == '"') {
      size_t j = i + 1;
      while (j < n && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
      if (j >= n) break;
      add_used(sc, s + i + 1, j - i - 1, path, line);
      literals++;
      i = j;
    } else if (s[i] == '(') {
      depth++;
    } else if (s[i] == ')' && --depth == 0) {
      if (!literals) problem(sc, "%s:%zu: %s without a string literal name\n", path, line, macro);
      return;
    }
  }
  problem(sc, "%s:%zu: unterminated %s(\n", path, line, macro);
}

static void scan_file(scan_t *sc, const char *path) {
  size_t n;
  char *s = read_all(path, &n);
  if (!s) {
    problem(sc, "%s: cannot read\n", path);
    return;
  }
  strip_comments(s, n);
  char wrappers[MAX_WRAPPERS][64];
  size_t nw = 1;
  snprintf(wrappers[0], sizeof wrappers[0], "PC_FAILPOINT");
  strip_directives(s, n, wrappers, &nw);
  int is_registry = strstr(path, "/core/failpoint.c") || strstr(path, "/core/failpoint.h");
  for (size_t i = 0; i < n; i++) {
    if (!ident_char(s[i]) || (i > 0 && ident_char(s[i - 1]))) continue;
    if (!is_registry && ident_at(s, n, i, "pc_failpoint_eval"))
      problem(sc, "%s:%zu: pc_failpoint_eval called directly (use PC_FAILPOINT)\n", path,
              line_of(s, i));
    for (size_t w = 0; w < nw; w++) {
      if (!ident_at(s, n, i, wrappers[w])) continue;
      size_t j = i + strlen(wrappers[w]);
      while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n')) j++;
      if (j < n && s[j] == '(') {
        sc->uses++;
        scan_call(sc, s, n, j, path, wrappers[w]);
      }
    }
  }
  free(s);
}

static int visit(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  size_t len = strlen(path);
  if (flag == FTW_F && len > 2 && path[len - 2] == '.' &&
      (path[len - 1] == 'c' || path[len - 1] == 'h'))
    scan_file(the_scan, path);
  return 0;
}

static int known(const char *name) {
  size_t n;
  const char *const *names = pc_failpoint_names(&n);
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

static void test_sources_agree_with_registry(void **state) {
  (void)state;
  static const char *const dirs[] = {"core",   "tso",  "lockservice", "tablet",    "net",
                                     "config", "apps", "bench",       "include",   "notify",
                                     "observers", "daemon", "replica"};
  scan_t *sc = calloc(1, sizeof *sc);
  assert_non_null(sc);
  the_scan = sc;
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", PC_SOURCE_DIR, dirs[i]);
    if (nftw(path, visit, 16, FTW_PHYS) != 0) problem(sc, "%s: cannot walk\n", path);
  }
  for (size_t i = 0; i < sc->nused; i++)
    if (!known(sc->used[i]))
      problem(sc, "failpoint '%s' is used but not listed in core/failpoint_names.h\n",
              sc->used[i]);
  size_t n;
  const char *const *names = pc_failpoint_names(&n);
  char doc[4200];
  snprintf(doc, sizeof doc, "%s/docs/ARCHITECTURE.md", PC_SOURCE_DIR);
  size_t dlen;
  char *arch = read_all(doc, &dlen);
  if (!arch) problem(sc, "%s: cannot read\n", doc);
  for (size_t i = 0; i < n; i++) {
    int used = 0;
    for (size_t k = 0; k < sc->nused && !used; k++) used = strcmp(sc->used[k], names[i]) == 0;
    if (!used) problem(sc, "failpoint '%s' is listed but used nowhere\n", names[i]);
    char quoted[80];
    snprintf(quoted, sizeof quoted, "`%s`", names[i]);
    if (arch && !strstr(arch, quoted))
      problem(sc, "failpoint '%s' is missing from docs/ARCHITECTURE.md\n", names[i]);
  }
  free(arch);
  if (sc->uses < n) problem(sc, "only %zu failpoint uses found in the sources\n", sc->uses);
  print_message("%zu failpoint uses, %zu names\n", sc->uses, sc->nused);
  if (sc->plen) fail_msg("%s", sc->problems);
  free(sc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unknown_names_refused),
      cmocka_unit_test(test_every_listed_point_can_be_armed),
      cmocka_unit_test(test_open_refuses_unknown_point),
      cmocka_unit_test(test_sources_agree_with_registry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
