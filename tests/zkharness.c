/* zkharness.c — private ZooKeeper servers for the tests (zkharness.h): the
 * playground's servers (playground/zkserver.c) in a temporary folder, with
 * every setup failure ending the test program. */
#include "tests/zkharness.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "playground/zkserver.h"

struct tu_zk {
  pc_zkserver_t *zk;
  char dir[256];
};

static void fail(const tu_zk_t *zk, int i, const char *what) {
  fprintf(stderr, "zookeeper test server: %s", what);
  if (zk && i >= 0) fprintf(stderr, " (see %s/zk%d/server.log)", zk->dir, i);
  fprintf(stderr, "\n");
  abort();
}

tu_zk_t *tu_zk_start(int n) {
  tu_zk_t *zk = calloc(1, sizeof *zk);
  if (!zk) abort();
  const char *tmp = getenv("TMPDIR");
  snprintf(zk->dir, sizeof zk->dir, "%s/pc-zk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(zk->dir)) fail(NULL, -1, "cannot create a temporary folder");
  pc_error_t err;
  /* a JVM takes seconds to start on a loaded machine */
  if (!(zk->zk = pc_zkserver_start(zk->dir, n, 90000, &err))) fail(NULL, -1, err.text);
  return zk;
}

void tu_zk_restart(tu_zk_t *zk, int i) {
  if (pc_zkserver_restart(zk->zk, i) != 0) fail(zk, i, "cannot start the server again");
}

int tu_zk_wait_serving(tu_zk_t *zk, int i, int timeout_ms) {
  int r = pc_zkserver_wait_serving(zk->zk, i, timeout_ms);
  if (r < 0) fail(zk, i, "server exited while starting");
  return r;
}

int tu_zk_leader(tu_zk_t *zk) { return pc_zkserver_leader(zk->zk); }
int tu_zk_connections(tu_zk_t *zk, int i) { return pc_zkserver_connections(zk->zk, i); }
void tu_zk_kill(tu_zk_t *zk, int i) { pc_zkserver_kill(zk->zk, i); }

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

void tu_zk_stop(tu_zk_t *zk) {
  if (!zk) return;
  pc_zkserver_stop(zk->zk);
  if (!getenv("PERCOLATOR_TEST_KEEP")) nftw(zk->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(zk);
}

const char *tu_zk_connect(const tu_zk_t *zk) { return pc_zkserver_connect(zk->zk); }
int tu_zk_count(const tu_zk_t *zk) { return pc_zkserver_count(zk->zk); }
pid_t tu_zk_pid(const tu_zk_t *zk, int i) { return pc_zkserver_pid(zk->zk, i); }
