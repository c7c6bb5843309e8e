/* gc_loop.c — the cluster's background garbage collector. Every process
 * that serves tablets runs one: every store.gc_interval_ms it opens (once) a
 * client of its own roles, takes the cluster lock "gc" (in ZooKeeper, as
 * locks/gc) so that one process collects at a time (without coordination,
 * as for a served directory, each does: passes are idempotent), and runs
 * pc_db_gc, which settles old locks and then collects on every tablet (each
 * tablet, once it has authorised the pass, publishes its safe point in
 * ZooKeeper before it deletes: tablet.h's pc_tablet_set_gc_publish). */
#include <string.h>

#include "core/db.h"
#include "base/deadline.h"
#include "base/error.h"
#include "base/log.h"
#include "daemon/daemon_internal.h"

#define GC_LOCK "gc"

/* The pass of a stopping daemon stops at its next step: the tablets' GC
 * loops and the rate's sleep see it through base/deadline.h (in-process
 * calls carry the caller's cancellation to the handler). */
static int gc_stopping(void *arg) {
  return atomic_load_explicit(&((gc_loop_t *)arg)->stopping, memory_order_relaxed)
             ? PC_CANCEL_STOPPING
             : 0;
}

static void *gc_main(void *arg) {
  pc_daemon_t *d = arg;
  gc_loop_t *g = &d->gc;
  pc_db_t *db = NULL;
  pc_cancel_set((pc_cancel_t){gc_stopping, g});
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    struct timespec until = pc_mono_after_ms(d->cfg->store.gc_interval_ms);
    pthread_cond_timedwait(&g->cv, &g->mu, &until);
    if (g->stop) break;
    pthread_mutex_unlock(&g->mu);
    pc_error_t err;
    if (!db) db = pc_db_open_parsed_config(g->client, 0, &err);
    if (!db) {
      pc_log(PC_LOG_WARN, "gc: cannot open a client of the cluster: %s", err.text);
    } else {
      int mine = 1;
      /* the lock (in ZooKeeper) only spares work:
       * when it cannot be asked, collect anyway */
      if (pc_db_cluster_lock(db, GC_LOCK, 2000, &mine, &err) != PC_OK) mine = 1;
      pc_gc_stats_t s;
      if (mine && pc_db_gc(db, &s, &err) != PC_OK)
        pc_log(PC_LOG_WARN, "gc: %s", err.text);
      else if (mine)
        pc_log(PC_LOG_DEBUG, "gc: safe point %llu, %llu versions deleted",
               (unsigned long long)s.safe_point, (unsigned long long)s.versions);
    }
    pthread_mutex_lock(&g->mu);
  }
  pthread_mutex_unlock(&g->mu);
  pc_db_close(db);
  return NULL;
}

void pc_daemon_gc_start(pc_daemon_t *d) {
  gc_loop_t *g = &d->gc;
  if (d->cfg->store.gc_interval_ms == 0) return;
  pc_error_t err;
  if (!(g->client = pc_daemon_client_config(d, &err))) {
    pc_log(PC_LOG_WARN, "gc: no background collection: %s", err.text);
    return;
  }
  pthread_mutex_init(&g->mu, NULL);
  pc_cond_init_mono(&g->cv);
  g->running = pthread_create(&g->thread, NULL, gc_main, d) == 0;
  if (!g->running) {
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    pc_log(PC_LOG_WARN, "gc: cannot start its thread; no background collection");
  }
}

void pc_daemon_gc_stop(pc_daemon_t *d) {
  gc_loop_t *g = &d->gc;
  if (g->running) {
    atomic_store(&g->stopping, 1);
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    g->running = 0;
  }
  pc_config_free(g->client);
  g->client = NULL;
  g->stop = 0;
  atomic_store(&g->stopping, 0);
}
