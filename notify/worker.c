/* worker.c — the worker (worker.h; the other jobs are listed in engine.h):
 * its options, start and stop, its counters, and the loop of each observer
 * thread. A thread looks for any notification first (an idle worker then
 * costs one scan, not a lock per claim); when there is one it makes a round
 * over every claim in a random order (claims.c), scanning each claim it
 * takes (scan.c) and passing over each cell found (pass.c).
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/error.h"
#include "core/log.h"

static const uint64_t latency_bounds_ms[12] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};

void pc_worker_options_default(pc_worker_options_t *o) {
  o->threads = 4;
  o->buckets_per_claim = 16;
  o->idle_ms = 100;
  o->max_failures = 5;
  o->backoff_ms = 100;
  o->sweep_ms = 1000;
  o->stable_ms = 3000;
}

void pc_worker_nap(pc_worker_t *w, uint32_t ms) {
  pthread_mutex_lock(&w->mu);
  if (!pc_worker_stopping(w)) {
    struct timespec until = pc_mono_after_ms(ms);
    pthread_cond_timedwait(&w->cv, &w->mu, &until);
  }
  pthread_mutex_unlock(&w->mu);
}

obs_slot_t *pc_worker_slot(pc_worker_t *w, const pc_observer_t *obs) {
  size_t lo = 0, hi = w->nslots;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    uintptr_t m = (uintptr_t)w->slots[mid].obs;
    if (m == (uintptr_t)obs) return &w->slots[mid];
    if (m < (uintptr_t)obs) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

void pc_worker_latency(pc_worker_t *w, uint64_t notify_ts, uint64_t commit_ts) {
  if (!commit_ts || !notify_ts) return;
  uint64_t a = PC_TS_PHYSICAL_MS(notify_ts), b = PC_TS_PHYSICAL_MS(commit_ts);
  uint64_t ms = b > a ? b - a : 0;
  for (size_t i = 0; i < 12; i++)
    if (ms <= latency_bounds_ms[i]) atomic_fetch_add(&w->lat_le[i], 1);
  atomic_fetch_add(&w->lat_le[12], 1);
  atomic_fetch_add(&w->lat_sum_ms, ms);
  atomic_fetch_add(&w->lat_count, 1);
}

const char *pc_cell_name(const char *table, const char *row, size_t rlen, const char *col,
                         size_t clen, char *buf, size_t cap) {
  char r[65], c[65];
  size_t i;
  for (i = 0; i < rlen && i < 64; i++) r[i] = row[i] >= 0x20 && row[i] < 0x7f ? row[i] : '?';
  r[i] = '\0';
  for (i = 0; i < clen && i < 64; i++) c[i] = col[i] >= 0x20 && col[i] < 0x7f ? col[i] : '?';
  c[i] = '\0';
  snprintf(buf, cap, "%s/%s%s/%s%s", table, r, rlen > 64 ? "..." : "", c, clen > 64 ? "..." : "");
  return buf;
}

/* ---- the observer threads ---------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static void *worker_main(void *arg) {
  wthread_t *t = arg;
  pc_worker_t *w = t->w;
  uint32_t *order = malloc(w->nclaims * sizeof *order);
  if (!order) {
    pc_log(PC_LOG_ERROR, "worker: thread %u: out of memory", t->idx);
    return NULL;
  }
  while (!pc_worker_stopping(w)) {
    /* look before taking claims: an idle worker costs a scan, not a lock per claim */
    if (!pc_scan_anything(w)) {
      pc_worker_nap(w, w->o.idle_ms);
      continue;
    }
    /* a round: every claim once, in a random order */
    for (uint32_t i = 0; i < w->nclaims; i++) order[i] = i;
    for (uint32_t i = w->nclaims; i > 1; i--) {
      uint32_t j = (uint32_t)(rng_next(&t->rng) % i), x = order[i - 1];
      order[i - 1] = order[j];
      order[j] = x;
    }
    int did = 0;
    for (uint32_t i = 0; i < w->nclaims && !pc_worker_stopping(w); i++) {
      int got = pc_claim_take(t, order[i]);
      if (got == PC_CLAIM_NOT_MINE) continue; /* another worker's share */
      if (got < 0) break; /* no session: the round ends here */
      if (got == 0) {
        atomic_fetch_add(&w->claims_busy, 1);
        continue;
      }
      atomic_fetch_add(&w->claims_taken, 1);
      did |= pc_scan_claim(w, order[i]);
      pc_claim_release(t, order[i]);
    }
    if (!did) pc_worker_nap(w, w->o.idle_ms);
  }
  free(order);
  pc_claims_end(t);
  return NULL;
}

/* ---- start and stop ------------------------------------------------------- */

typedef struct collect {
  pc_worker_t *w;
  size_t cap;
  int oom;
} collect_t;

static int collect_observer(void *ctx, const pc_observer_t *obs) {
  collect_t *c = ctx;
  pc_worker_t *w = c->w;
  if (w->nslots == c->cap) {
    size_t n = c->cap ? c->cap * 2 : 8;
    obs_slot_t *s = realloc(w->slots, n * sizeof *s);
    if (!s) {
      c->oom = 1;
      return 1;
    }
    w->slots = s;
    c->cap = n;
  }
  obs_slot_t *s = &w->slots[w->nslots++];
  memset(s, 0, sizeof *s);
  s->obs = obs;
  return 0;
}

static int slot_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const obs_slot_t *)a)->obs, y = (uintptr_t)((const obs_slot_t *)b)->obs;
  return x < y ? -1 : x > y;
}

static pc_status_t check_options(const pc_worker_options_t *o, pc_error_t *err) {
  if (o->threads < 1 || o->threads > 256)
    return pc_error_set(err, PC_INVALID, "worker: threads is %u, want 1..256", o->threads);
  if (o->buckets_per_claim < 1 || o->buckets_per_claim > PC_NOTIFY_BUCKETS)
    return pc_error_set(err, PC_INVALID, "worker: buckets_per_claim is %u, want 1..%u",
                        o->buckets_per_claim, PC_NOTIFY_BUCKETS);
  if (o->idle_ms < 1 || o->idle_ms > 600000)
    return pc_error_set(err, PC_INVALID, "worker: idle_ms is %u, want 1..600000", o->idle_ms);
  if (o->max_failures < 1)
    return pc_error_set(err, PC_INVALID, "worker: max_failures is 0, want at least 1");
  if (o->backoff_ms < 1 || o->backoff_ms > 600000)
    return pc_error_set(err, PC_INVALID, "worker: backoff_ms is %u, want 1..600000",
                        o->backoff_ms);
  if (o->sweep_ms > 3600000)
    return pc_error_set(err, PC_INVALID, "worker: sweep_ms is %u, want 0..3600000", o->sweep_ms);
  if (o->stable_ms > 600000)
    return pc_error_set(err, PC_INVALID, "worker: stable_ms is %u, want 0..600000", o->stable_ms);
  return PC_OK;
}

pc_worker_t *pc_worker_start(pc_db_t *db, pc_observer_registry_t *registry,
                             const pc_worker_options_t *o, pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !registry) {
    pc_error_set(err, PC_INVALID, "worker: %s is NULL", !db ? "database" : "registry");
    return NULL;
  }
  pc_worker_options_t opts;
  pc_worker_options_default(&opts);
  if (o) opts = *o;
  if (check_options(&opts, err) != PC_OK) return NULL;
  pc_worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  w->db = db;
  w->reg = registry;
  w->o = opts;
  w->nclaims = (PC_NOTIFY_BUCKETS + opts.buckets_per_claim - 1) / opts.buckets_per_claim;
  atomic_init(&w->stop, 0);
  pthread_mutex_init(&w->mu, NULL);
  pc_cond_init_mono(&w->cv);

  collect_t c = {w, 0, 0};
  pc_registry_foreach(registry, collect_observer, &c);
  if (c.oom || !(w->backoff = pc_backoff_create())) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  if (w->nslots == 0) {
    /* a worker without observers would delete every notification it finds */
    pc_error_set(err, PC_INVALID, "worker: no observer is registered");
    goto fail;
  }
  qsort(w->slots, w->nslots, sizeof *w->slots, slot_cmp);
  for (size_t i = 0; i < w->nslots; i++) {
    const pc_observer_t *ob = w->slots[i].obs;
    if (pc_db_register_observed(db, ob->name, ob->table, ob->column, ob->column_len,
                                (int)ob->kind, err) != PC_OK) {
      pc_error_prefix(err, "worker: recording observer '%s'", ob->name);
      goto fail;
    }
  }
  if (!db->store->ops->scan_notify || !db->store->ops->clear_notify) {
    pc_error_set(err, PC_INVALID, "worker: this store keeps no notifications");
    goto fail;
  }
  if (!(w->local = pc_claims_local(db))) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  if (pc_claims_start(w, err) != PC_OK) {
    pc_error_prefix(err, "worker");
    goto fail;
  }

  wthread_t *ts = calloc(opts.threads, sizeof *ts);
  w->threads = calloc(opts.threads, sizeof *w->threads);
  if (!ts || !w->threads) {
    free(ts);
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  uint64_t seed = pc_now_mono_ms() ^ (uint64_t)(uintptr_t)w;
  for (uint32_t i = 0; i < opts.threads; i++) {
    ts[i].w = w;
    ts[i].idx = i;
    ts[i].rng = XXH3_64bits_withSeed(&i, sizeof i, seed) | 1;
    if (pthread_create(&w->threads[i], NULL, worker_main, &ts[i]) != 0) {
      pc_error_set(err, PC_INTERNAL, "worker: cannot start thread %u", i);
      atomic_store(&w->stop, 1);
      for (uint32_t j = 0; j < i; j++) pthread_join(w->threads[j], NULL);
      free(ts);
      goto fail;
    }
    w->nthreads++;
  }
  w->threads_ctx = ts;
  if (opts.sweep_ms) {
    if (pthread_create(&w->sweeper, NULL, pc_sweeper_main, w) != 0) {
      pc_error_set(err, PC_INTERNAL, "worker: cannot start the sweeper");
      pc_worker_stop(w);
      return NULL;
    }
    w->sweeper_started = 1;
  }
  return w;

fail:
  w->nthreads = 0;
  pc_worker_stop(w);
  return NULL;
}

void pc_worker_stop(pc_worker_t *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  atomic_store(&w->stop, 1);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  for (size_t i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
  if (w->sweeper_started) pthread_join(w->sweeper, NULL);
  pc_claims_stop(w);
  pc_backoff_destroy(w->backoff);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->threads_ctx);
  free(w->threads);
  free(w->slots);
  free(w);
}

pc_status_t pc_worker_stats(pc_worker_t *w, pc_worker_stats_t *out, pc_error_t *err) {
  pc_error_clear(err);
  if (!w || !out) return pc_error_set(err, PC_INVALID, "worker stats: NULL argument");
  memset(out, 0, sizeof *out);
  out->observers = calloc(w->nslots ? w->nslots : 1, sizeof *out->observers);
  if (!out->observers) return pc_error_set(err, PC_NOMEM, "out of memory");
  out->nobservers = w->nslots;
  out->notifications_seen = atomic_load(&w->seen);
  out->claims_taken = atomic_load(&w->claims_taken);
  out->claims_busy = atomic_load(&w->claims_busy);
  for (size_t i = 0; i < 13; i++) out->latency_le[i] = atomic_load(&w->lat_le[i]);
  out->latency_sum_ms = (double)atomic_load(&w->lat_sum_ms);
  out->latency_count = atomic_load(&w->lat_count);
  for (size_t i = 0; i < w->nslots; i++) {
    obs_slot_t *s = &w->slots[i];
    pc_observer_stats_t *d = &out->observers[i];
    snprintf(d->name, sizeof d->name, "%s", s->obs->name);
    d->runs = atomic_load(&s->runs);
    d->skipped = atomic_load(&s->skipped);
    d->conflicts = atomic_load(&s->conflicts);
    d->failures = atomic_load(&s->failures);
    d->parked = atomic_load(&s->parked);
  }
  return PC_OK;
}
