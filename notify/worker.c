/* worker.c — the worker (worker.h; the other jobs are listed in engine.h):
 * its options, start and stop, its counters, and its threads.
 *
 * An observer thread looks for any notification first (an idle worker then
 * costs one scan, not a lock per claim); when there is one it makes a round
 * over every claim in a random order (claims.c), scanning each claim it
 * takes (scan.c) and passing over each cell found (pass.c).
 *
 * The backfill thread refreshes the worker's view of the registered
 * observers and runs the backfills of new registrations (backfill.c).
 *
 * The keeper thread does the periodic work: the sweeper's turn
 * (sweeper.c), the counters' flush (counters.c), and the watchdog. A run
 * whose observer has not returned after hang_ms is given up: it counts as
 * a failure of (cell, observer) (parked at max_failures), its thread's
 * claim is released so that the claim's buckets are scanned again, and a
 * new thread takes its place, up to as many replacements as threads. The
 * thread itself, if its observer ever returns, commits nothing and ends.
 *
 * Starting, the worker opens its journal (journal.c) and counts the runs
 * its predecessor died in (crashes.c) before any thread runs. Stopping
 * waits for the observers in flight, without bound (pc_worker_stop) or
 * for a bounded time (pc_worker_stop_within), after which the process is
 * expected to exit.
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/log.h"

static const uint64_t latency_bounds_ms[12] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};

/* How often the keeper writes the counters that changed: often enough that
 * `status` shows a run within a second of it (a flush is one transaction,
 * and none while nothing changed). */
#define FLUSH_MS 200u

uint32_t pc_worker_default_threads(void) {
  uint32_t n = pc_cores();
  return n > 256 ? 256 : n;
}

void pc_worker_options_default(pc_worker_options_t *o) {
  o->threads = 0;
  o->buckets_per_claim = PC_WORKER_CLAIM_BUCKETS;
  o->idle_ms = 100;
  o->max_failures = 5;
  o->backoff_ms = 100;
  o->sweep_ms = 1000;
  o->batch_wait_ms = PC_WORKER_BATCH_WAIT_AUTO;
  o->stable_ms = 3000;
  o->hang_ms = 60000;
  o->journal_dir = NULL;
}

uint32_t pc_worker_claim_size(const pc_worker_options_t *o, int coordinated) {
  if (o->buckets_per_claim) return o->buckets_per_claim;
  if (coordinated) return PC_WORKER_CLAIM_BUCKETS;
  uint32_t t = o->threads ? o->threads : pc_worker_default_threads();
  return t >= PC_NOTIFY_BUCKETS ? 1 : PC_NOTIFY_BUCKETS / t;
}

static _Thread_local wthread_t *self_;

wthread_t *pc_worker_self(void) { return self_; }

void pc_worker_nap(pc_worker_t *w, uint32_t ms) {
  pthread_mutex_lock(&w->mu);
  if (!pc_worker_stopping(w)) {
    struct timespec until = pc_mono_after_ms(ms);
    pthread_cond_timedwait(&w->cv, &w->mu, &until);
  }
  pthread_mutex_unlock(&w->mu);
}

void pc_worker_wake(pc_worker_t *w) {
  pthread_mutex_lock(&w->mu);
  pthread_cond_broadcast(&w->cv);
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

/* ---- the observer threads ---------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* How long a thread that found nothing to run naps: idle_ms, or less when a
 * batch it left to wait for more cells may run sooner (batch.c). */
static uint32_t nap_ms(const pc_worker_t *w, const wthread_t *t) {
  if (!t->wake_ms) return w->o.idle_ms;
  uint64_t now = pc_now_wall_ms();
  if (t->wake_ms <= now) return 1;
  return (uint32_t)pc_min_u64(w->o.idle_ms, t->wake_ms - now);
}

/* The thread leaves its loop (pc_worker_stop_within waits for that). */
static void thread_out(pc_worker_t *w) {
  pthread_mutex_lock(&w->mu);
  w->nlive--;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void *worker_main(void *arg) {
  wthread_t *t = arg;
  pc_worker_t *w = t->w;
  self_ = t;
  uint32_t *order = malloc(w->nclaims * sizeof *order);
  if (!order) {
    pc_log(PC_LOG_ERROR, "worker: thread %u: out of memory", t->idx);
    thread_out(w);
    return NULL;
  }
  while (!pc_worker_stopping(w) && !t->given_up) {
    pc_parked_retry(w); /* now and then: the retries asked for */
    if (t->given_up) break;
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
    t->wake_ms = 0;
    for (uint32_t i = 0; i < w->nclaims && !pc_worker_stopping(w); i++) {
      int got = pc_claim_take(t, order[i]);
      if (got == PC_CLAIM_NOT_MINE) continue; /* another worker's share */
      if (got < 0) break; /* no session: the round ends here */
      if (got == 0) {
        atomic_fetch_add(&w->claims_busy, 1);
        continue;
      }
      atomic_fetch_add(&w->claims_taken, 1);
      atomic_store(&t->claim, (int64_t)order[i]);
      did |= pc_scan_claim(w, order[i]);
      if (t->given_up) break; /* the watchdog released the claim */
      atomic_store(&t->claim, -1);
      pc_claim_release(t, order[i]);
    }
    if (!did && !t->given_up) pc_worker_nap(w, nap_ms(w, t));
  }
  free(order);
  pc_claims_end(t);
  thread_out(w);
  return NULL;
}

/* Starts observer thread i (< maxthreads); 0, or -1. */
static int start_thread(pc_worker_t *w, uint32_t i, uint64_t seed) {
  wthread_t *t = &w->threads_ctx[i];
  memset(t, 0, sizeof *t);
  t->w = w;
  t->idx = i;
  t->rng = XXH3_64bits_withSeed(&i, sizeof i, seed) | 1;
  atomic_init(&t->claim, -1);
  pthread_mutex_lock(&w->mu);
  w->nlive++;
  pthread_mutex_unlock(&w->mu);
  if (pthread_create(&w->threads[i], NULL, worker_main, t) != 0) {
    thread_out(w);
    return -1;
  }
  w->nthreads++;
  return 0;
}

/* The backfill thread (backfill.c) runs observers as well: it has the
 * journal slot after the observer threads' (so that a run it dies in is
 * counted like theirs), and counts among the threads a bounded stop waits
 * for. The watchdog does not give its runs up: it holds no claim, and a
 * backfill that hangs delays only later backfills. */
static void *backfiller_main(void *arg) {
  wthread_t *t = arg;
  self_ = t;
  pc_backfill_main(t->w);
  thread_out(t->w);
  return NULL;
}

static int start_backfiller(pc_worker_t *w) {
  wthread_t *t = &w->threads_ctx[w->maxthreads];
  memset(t, 0, sizeof *t);
  t->w = w;
  t->idx = (uint32_t)w->maxthreads;
  atomic_init(&t->claim, -1);
  pthread_mutex_lock(&w->mu);
  w->nlive++;
  pthread_mutex_unlock(&w->mu);
  if (pthread_create(&w->backfiller, NULL, backfiller_main, t) != 0) {
    thread_out(w);
    return -1;
  }
  w->backfiller_started = 1;
  return 0;
}

/* ---- the keeper: sweeps, the watchdog, the counters ---------------------------- */

/* The run of t (copied in cp) has not returned after hang_ms: it was given
 * up (pc_journal_give_up); count it, free its claim, replace its thread. */
static void give_up(pc_worker_t *w, wthread_t *t, const pc_journal_copy_t *cp) {
  int64_t k = atomic_exchange(&t->claim, -1);
  if (k >= 0) pc_claim_release(t, (uint32_t)k);
  char name[200], why[128];
  pc_cell_name(cp->cell.table, cp->cell.row, cp->cell.rlen, cp->cell.col, cp->cell.clen, name,
               sizeof name);
  snprintf(why, sizeof why, "the observer did not return within %u ms", w->o.hang_ms);
  obs_slot_t *slot = NULL;
  for (size_t i = 0; i < w->nslots && !slot; i++)
    if (strcmp(w->slots[i].obs->name, cp->observer) == 0) slot = &w->slots[i];
  pc_buf_t key = {0};
  if (slot && pc_backoff_key(&key, &cp->cell, cp->observer) == 0) {
    pc_count(slot, PC_C_FAILURES);
    uint32_t n = pc_backoff_defer(w, &key, 1, NULL);
    pc_error_t perr;
    if (n >= w->o.max_failures &&
        pc_park(w, &cp->cell, slot->obs, cp->ts, n, why, &perr) == PC_OK) {
      pc_count(slot, PC_C_PARKED);
      pc_backoff_forget(w, &key);
      pc_log(PC_LOG_WARN, "worker: observer '%s' on %s parked: %s, %u times", cp->observer, name,
             why, n);
    } else {
      pc_log(PC_LOG_WARN, "worker: observer '%s' on %s given up (%u of %u): %s", cp->observer,
             name, n, w->o.max_failures, why);
    }
  }
  pc_buf_free(&key);
  if (w->nthreads < w->maxthreads &&
      start_thread(w, (uint32_t)w->nthreads, pc_now_mono_ms() ^ (uint64_t)(uintptr_t)t) == 0)
    return;
  pc_log(PC_LOG_WARN, "worker: no thread replaces the one running observer '%s' (%zu given up "
                      "already)", cp->observer, w->nthreads - w->o.threads + 1);
}

static void watch(pc_worker_t *w, pc_journal_copy_t *cp) {
  uint64_t now = pc_now_mono_ms();
  if (now < w->o.hang_ms) return;
  for (size_t i = 0; i < w->nthreads && !pc_worker_stopping(w); i++) {
    wthread_t *t = &w->threads_ctx[i];
    if (pc_journal_peek(w->journal, t->idx, now - w->o.hang_ms, 0, cp) &&
        pc_journal_give_up(w->journal, t->idx, cp->gen))
      give_up(w, t, cp);
  }
}

static void *keeper_main(void *arg) {
  pc_worker_t *w = arg;
  uint32_t period = 1000;
  if (w->o.sweep_ms && w->o.sweep_ms < period) period = w->o.sweep_ms;
  if (w->o.hang_ms && w->o.hang_ms / 4 < period) period = w->o.hang_ms / 4;
  if (FLUSH_MS < period) period = FLUSH_MS;
  if (period < 5) period = 5;
  pc_journal_copy_t *cp = malloc(sizeof *cp);
  while (!pc_worker_stopping(w)) {
    pc_worker_nap(w, period);
    if (pc_worker_stopping(w)) break;
    uint64_t now = pc_now_mono_ms();
    if (w->o.hang_ms && cp) watch(w, cp);
    if (w->o.sweep_ms && now >= w->next_sweep_ms) {
      pc_sweep_once(w);
      w->next_sweep_ms = pc_now_mono_ms() + w->o.sweep_ms;
    }
    if (now >= w->next_flush_ms) {
      pc_counters_flush(w);
      pc_backoff_prune(w);
      w->next_flush_ms = pc_now_mono_ms() + FLUSH_MS;
    }
  }
  free(cp);
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
  if (o->threads > 256)
    return pc_error_set(err, PC_INVALID, "worker: threads is %u, want 0 (auto)..256", o->threads);
  if (o->buckets_per_claim > PC_NOTIFY_BUCKETS)
    return pc_error_set(err, PC_INVALID, "worker: buckets_per_claim is %u, want 0 (auto)..%u",
                        o->buckets_per_claim, PC_NOTIFY_BUCKETS);
  if (o->batch_wait_ms > 600000 && o->batch_wait_ms != PC_WORKER_BATCH_WAIT_AUTO)
    return pc_error_set(err, PC_INVALID, "worker: batch_wait_ms is %u, want 0..600000",
                        o->batch_wait_ms);
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
  if (o->hang_ms && (o->hang_ms < 10 || o->hang_ms > 86400000))
    return pc_error_set(err, PC_INVALID, "worker: hang_ms is %u, want 0 or 10..86400000",
                        o->hang_ms);
  return PC_OK;
}

/* What the journal's previous holder left, gathered while it opens. */
typedef struct left {
  pc_worker_t *w;
  pc_journal_run_t *runs; /* the strings in mem */
  char **mem;
  size_t nruns;
  struct {
    char name[PC_MAX_OBSERVER_NAME + 1];
    uint64_t v[PC_NCOUNTERS];
  } * counts;
  size_t ncounts;
  int oom;
} left_t;

static void left_run(void *ctx, const pc_journal_run_t *run) {
  left_t *l = ctx;
  pc_journal_run_t *r = realloc(l->runs, (l->nruns + 1) * sizeof *r);
  char **m = realloc(l->mem, (l->nruns + 1) * sizeof *m);
  if (r) l->runs = r;
  if (m) l->mem = m;
  size_t tl = strlen(run->cell.table), ol = strlen(run->observer);
  char *s = r && m ? malloc(tl + ol + 2 + run->cell.rlen + run->cell.clen + 1) : NULL;
  if (!s) {
    l->oom = 1;
    return;
  }
  memcpy(s, run->cell.table, tl + 1);
  memcpy(s + tl + 1, run->observer, ol + 1);
  char *row = s + tl + ol + 2;
  memcpy(row, run->cell.row, run->cell.rlen);
  memcpy(row + run->cell.rlen, run->cell.col, run->cell.clen);
  l->mem[l->nruns] = s;
  l->runs[l->nruns++] = (pc_journal_run_t){
      {s, row, run->cell.rlen, row + run->cell.rlen, run->cell.clen}, s + tl + 1, run->ts};
}

static void left_counts(void *ctx, const char *observer, const uint64_t *v) {
  left_t *l = ctx;
  void *c = realloc(l->counts, (l->ncounts + 1) * sizeof *l->counts);
  if (!c) {
    l->oom = 1;
    return;
  }
  l->counts = c;
  snprintf(l->counts[l->ncounts].name, sizeof l->counts[0].name, "%s", observer);
  memcpy(l->counts[l->ncounts].v, v, sizeof l->counts[0].v);
  l->ncounts++;
}

/* Opens the journal: the counters continue from the previous holder's, its
 * observers this worker lacks have theirs written once, and every run it
 * died in is counted (crashes.c). */
static pc_status_t open_journal(pc_worker_t *w, pc_error_t *err) {
  const char **names = calloc(w->nslots, sizeof *names);
  if (!names) return pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; i < w->nslots; i++) names[i] = w->slots[i].obs->name;
  left_t l = {w, NULL, NULL, 0, NULL, 0, 0};
  w->journal = pc_journal_open(w->journal_dir, (uint32_t)w->maxthreads + 1, names, w->nslots,
                               left_run, left_counts, &l, err);
  free(names);
  if (w->journal) {
    for (size_t i = 0; i < w->nslots; i++) w->slots[i].n = pc_journal_counters(w->journal, i);
    for (size_t k = 0; k < l.ncounts; k++) {
      obs_slot_t *slot = NULL;
      for (size_t i = 0; i < w->nslots && !slot; i++)
        if (strcmp(w->slots[i].obs->name, l.counts[k].name) == 0) slot = &w->slots[i];
      if (slot)
        for (int c = 0; c < PC_NCOUNTERS; c++) atomic_store(&slot->n[c], l.counts[k].v[c]);
      else
        pc_counters_write_left(w, l.counts[k].name, l.counts[k].v);
    }
    for (size_t i = 0; i < l.nruns; i++) pc_crash_count(w, &l.runs[i]);
    if (l.oom)
      pc_log(PC_LOG_WARN, "worker: out of memory reading the journal: some deaths not counted");
  }
  for (size_t i = 0; i < l.nruns; i++) free(l.mem[i]);
  free(l.runs);
  free(l.mem);
  free(l.counts);
  return w->journal ? PC_OK : err->code;
}

pc_worker_t *pc_worker_start(pc_db_t *db, pc_observer_registry_t *registry,
                             const pc_worker_options_t *o, pc_error_t *err) {
  pc_error_t local_err;
  if (!err) err = &local_err;
  pc_error_clear(err);
  if (!db || !registry) {
    pc_error_set(err, PC_INVALID, "worker: %s is NULL", !db ? "database" : "registry");
    return NULL;
  }
  pc_worker_options_t opts;
  pc_worker_options_default(&opts);
  if (o) opts = *o;
  if (check_options(&opts, err) != PC_OK) return NULL;
  if (opts.threads == 0) opts.threads = pc_worker_default_threads();
  pc_worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  w->db = db;
  w->reg = registry;
  w->o = opts;
  w->o.journal_dir = NULL; /* w->journal_dir holds the copy */
  w->o.buckets_per_claim = pc_worker_claim_size(&opts, db->coordination != NULL);
  if (opts.batch_wait_ms == PC_WORKER_BATCH_WAIT_AUTO)
    w->o.batch_wait_ms = db->coordination ? 0 : PC_WORKER_ALONE_BATCH_WAIT_MS;
  w->nclaims = (PC_NOTIFY_BUCKETS + w->o.buckets_per_claim - 1) / w->o.buckets_per_claim;
  pc_log(PC_LOG_DEBUG,
         "worker: %u threads%s, claims of %u notification buckets (%u claims)%s; a batch waits "
         "up to %u ms while its observer runs another",
         opts.threads, o && o->threads ? "" : " (a core each)", w->o.buckets_per_claim, w->nclaims,
         opts.buckets_per_claim ? "" : ", sized by the threads", w->o.batch_wait_ms);
  w->maxthreads = (size_t)opts.threads * 2;
  atomic_init(&w->stop, 0);
  atomic_init(&w->abandoned, 0);
  pthread_mutex_init(&w->mu, NULL);
  pthread_mutex_init(&w->sets_mu, NULL);
  pc_cond_init_mono(&w->cv);

  pthread_mutex_init(&w->view_mu, NULL);

  collect_t c = {w, 0, 0};
  pc_registry_foreach(registry, collect_observer, &c);
  if (c.oom || !(w->backoff = pc_backoff_create()) || !(w->waiting = pc_waiting_create()) ||
      !(w->held = pc_keyset_create()) || !(w->suspects = pc_keyset_create()) ||
      (opts.journal_dir && !(w->journal_dir = strdup(opts.journal_dir))) ||
      !(w->flushed = calloc(w->nslots ? w->nslots : 1, sizeof *w->flushed))) {
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
  /* every store gets every registration (one may have lost its copies, or
   * a registrar stopped half-way); then what this worker leaves to others */
  if (pc_db_observers_sync(db, err) != PC_OK) {
    pc_error_prefix(err, "worker: giving the stores the registered observers");
    goto fail;
  }
  if (pc_view_refresh(w, err) != PC_OK) {
    pc_error_prefix(err, "worker: reading the registered observers");
    goto fail;
  }
  if (!db->store->ops->scan_notify || !db->store->ops->clear_notify) {
    pc_error_set(err, PC_INVALID, "worker: this store keeps no notifications");
    goto fail;
  }
  if (!(w->local = pc_claims_local(db))) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  if (open_journal(w, err) != PC_OK) goto fail;
  if (pc_claims_start(w, err) != PC_OK) {
    pc_error_prefix(err, "worker");
    goto fail;
  }

  w->threads_ctx = calloc(w->maxthreads + 1, sizeof *w->threads_ctx); /* + the backfiller's */
  w->threads = calloc(w->maxthreads, sizeof *w->threads);
  if (!w->threads_ctx || !w->threads) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    goto fail;
  }
  uint64_t seed = pc_now_mono_ms() ^ (uint64_t)(uintptr_t)w;
  for (uint32_t i = 0; i < opts.threads; i++) {
    if (start_thread(w, i, seed) != 0) {
      pc_error_set(err, PC_INTERNAL, "worker: cannot start thread %u", i);
      goto fail;
    }
  }
  if (start_backfiller(w) != 0) {
    pc_error_set(err, PC_INTERNAL, "worker: cannot start its backfill thread");
    goto fail;
  }
  w->next_sweep_ms = pc_now_mono_ms() + opts.sweep_ms;
  w->next_flush_ms = pc_now_mono_ms() + FLUSH_MS;
  if (pthread_create(&w->keeper, NULL, keeper_main, w) != 0) {
    pc_error_set(err, PC_INTERNAL, "worker: cannot start its keeper thread");
    goto fail;
  }
  w->keeper_started = 1;
  return w;

fail:
  pc_worker_stop(w);
  return NULL;
}

/* Tells every thread to stop; returns at once. A nap checks stop under mu,
 * which the wake takes after the store: no nap misses it. */
static void set_stop(pc_worker_t *w) {
  atomic_store(&w->stop, 1);
  pc_worker_wake(w);
}

/* Asks every thread to stop and joins the keeper (after which no thread is
 * started). */
static void signal_stop(pc_worker_t *w) {
  set_stop(w);
  if (w->keeper_started) pthread_join(w->keeper, NULL);
  w->keeper_started = 0;
}

/* Joins the threads (all out of their loops, or waited for) and releases w. */
static void release(pc_worker_t *w) {
  for (size_t i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
  if (w->backfiller_started) pthread_join(w->backfiller, NULL);
  pc_claims_stop(w);
  if (w->journal && w->nslots) pc_counters_flush(w); /* what the keeper had not written */
  pc_journal_close(w->journal);
  pc_view_release(w);
  pthread_mutex_destroy(&w->view_mu);
  pc_waiting_destroy(w->waiting);
  pc_backoff_destroy(w->backoff);
  pc_keyset_destroy(w->held);
  pc_keyset_destroy(w->suspects);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->sets_mu);
  pthread_cond_destroy(&w->cv);
  free(w->journal_dir);
  free(w->flushed);
  free(w->threads_ctx);
  free(w->threads);
  free(w->slots);
  free(w);
}

void pc_worker_stop(pc_worker_t *w) {
  if (!w) return;
  signal_stop(w);
  release(w);
}

void pc_worker_stop_begin(pc_worker_t *w) {
  if (w) set_stop(w);
}

pc_status_t pc_worker_stop_within(pc_worker_t *w, uint32_t ms, pc_error_t *err) {
  pc_error_clear(err);
  if (!w) return PC_OK;
  signal_stop(w);
  struct timespec until = pc_mono_after_ms(ms);
  pthread_mutex_lock(&w->mu);
  while (w->nlive > 0 && pthread_cond_timedwait(&w->cv, &w->mu, &until) == 0) {
  }
  size_t live = w->nlive;
  pthread_mutex_unlock(&w->mu);
  if (live == 0) {
    release(w);
    return PC_OK;
  }
  atomic_store(&w->abandoned, 1); /* what they do commits nothing now */
  char what[512] = "";
  size_t len = 0;
  pc_journal_copy_t *cp = malloc(sizeof *cp);
  for (size_t i = 0; cp && i <= w->maxthreads && len < sizeof what - 1; i++) {
    if (i < w->maxthreads && i >= w->nthreads) continue; /* never started */
    if (!pc_journal_peek(w->journal, (uint32_t)i, UINT64_MAX, 1, cp)) continue;
    char name[200];
    int n = snprintf(what + len, sizeof what - len, "%s'%s' on %s", len ? ", " : "", cp->observer,
                     pc_cell_name(cp->cell.table, cp->cell.row, cp->cell.rlen, cp->cell.col,
                                  cp->cell.clen, name, sizeof name));
    len = n > 0 && (size_t)n < sizeof what - len ? len + (size_t)n : sizeof what - 1;
  }
  free(cp);
  return pc_error_set(err, PC_TIMEOUT, "worker: %zu observer run%s still going after %u ms%s%s",
                      live, live == 1 ? "" : "s", ms, len ? ": " : "", what);
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
    d->runs = atomic_load(&s->n[PC_C_RUNS]);
    d->skipped = atomic_load(&s->n[PC_C_SKIPPED]);
    d->conflicts = atomic_load(&s->n[PC_C_CONFLICTS]);
    d->failures = atomic_load(&s->n[PC_C_FAILURES]);
    d->parked = atomic_load(&s->n[PC_C_PARKED]);
  }
  return PC_OK;
}
