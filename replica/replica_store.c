/* replica_store.c — the store a tablet handler serves a replicated tablet
 * with: store.h's operations on the replica's current store, each run only
 * where the replica may run it (group.c): a write where it leads and has
 * applied its term's first entry, a read also under its lease. Anything
 * else is refused before it touches the store, PC_UNAVAILABLE naming the
 * leader, so that the client can send it there. The store in use is held
 * for the whole operation, so that installing a snapshot, which replaces
 * it, never closes it under a reader. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "replica/replica_int.h"

extern _Thread_local uint64_t pc_replica_checked_term;

typedef struct rstore {
  pc_store_t base;
  pc_replica_t *r;
} rstore_t;

#define REP(base) (((rstore_t *)(base))->r)

/* Runs call with g the store in use, once may(r) allowed it. */
#define RUN(base, may, call)                                   \
  do {                                                         \
    pc_replica_t *r_ = REP(base);                              \
    pc_status_t st_ = may(r_, err);                            \
    if (st_ != PC_OK) return st_;                              \
    gen_t *g = gen_acquire(r_);                                \
    if (!g) {                                                  \
      pc_replica_checked_term = 0;                             \
      return group_not_leader(r_, "holds no store of it", err); \
    }                                                          \
    st_ = (call);                                              \
    gen_release(r_, g);                                        \
    pc_replica_checked_term = 0;                               \
    return st_;                                                \
  } while (0)

/* A read also checks once it is done that the lease still holds in the
 * term it began in: a read can wait (for a one-phase commit's latch), and a
 * leader deposed meanwhile may then have read a state from before entries
 * that the next leader committed and acknowledged. Holding at the end, the
 * lease held throughout: no other leader was elected before it runs out.
 * on_refuse releases what the read returned. */
#define READ(base, call, on_refuse)                            \
  do {                                                         \
    pc_replica_t *r_ = REP(base);                              \
    pc_status_t st_ = group_may_read(r_, err);                 \
    if (st_ != PC_OK) return st_;                              \
    uint64_t term_ = pc_replica_checked_term;                  \
    gen_t *g = gen_acquire(r_);                                \
    if (!g) {                                                  \
      pc_replica_checked_term = 0;                             \
      return group_not_leader(r_, "holds no store of it", err); \
    }                                                          \
    st_ = (call);                                              \
    gen_release(r_, g);                                        \
    pc_replica_checked_term = 0;                               \
    if (group_read_held(r_, term_) != PC_OK) {                 \
      on_refuse;                                               \
      return group_not_leader(r_, "lost its lease while it read", err); \
    }                                                          \
    return st_;                                                \
  } while (0)

#define S (g->store)

/* A get's answer, given up. */
static void drop_get(pc_status_t st, char **value, size_t *vlen, pc_lock_info_t *lock) {
  if (st == PC_OK) {
    pc_free(*value);
    *value = NULL;
    *vlen = 0;
  } else if (st == PC_LOCKED) {
    pc_lock_info_free(lock);
  }
}

static pc_status_t r_get(pc_store_t *s, const pc_cell_t *cell, uint64_t read_ts, char **value,
                         size_t *vlen, pc_lock_info_t *lock, pc_error_t *err) {
  READ(s, S->ops->get(S, cell, read_ts, value, vlen, lock, err), drop_get(st_, value, vlen, lock));
}

/* get_fresh's timestamp, then the lease: the read must come after a moment
 * at which the lease held, later than the timestamp's issue. */
typedef struct fresh_ts {
  pc_ts_source_fn fn;
  void *ctx;
  pc_replica_t *r;
} fresh_ts_t;

static pc_status_t fresh_source(void *ctx, uint64_t *ts, pc_error_t *err) {
  fresh_ts_t *f = ctx;
  pc_status_t st = f->fn(f->ctx, ts, err);
  if (st == PC_OK) st = group_may_read(f->r, err);
  return st;
}

static pc_status_t r_get_fresh(pc_store_t *s, const pc_cell_t *cell, pc_ts_source_fn ts_source,
                               void *ts_ctx, uint64_t *read_ts, char **value, size_t *vlen,
                               pc_lock_info_t *lock, pc_error_t *err) {
  fresh_ts_t f = {ts_source, ts_ctx, REP(s)};
  READ(s, S->ops->get_fresh(S, cell, fresh_source, &f, read_ts, value, vlen, lock, err),
       drop_get(st_, value, vlen, lock));
}

static pc_status_t r_prewrite(pc_store_t *s, const pc_mutation_t *muts, size_t n,
                              const pc_lock_spec_t *spec, pc_lock_info_t *lock, pc_error_t *err) {
  RUN(s, group_may_write, S->ops->prewrite(S, muts, n, spec, lock, err));
}

static pc_status_t r_commit(pc_store_t *s, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                            uint64_t commit_ts, pc_error_t *err) {
  RUN(s, group_may_write, S->ops->commit(S, cells, n, start_ts, commit_ts, err));
}

static pc_status_t r_rollback(pc_store_t *s, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                              pc_error_t *err) {
  RUN(s, group_may_write, S->ops->rollback(S, cells, n, start_ts, err));
}

static pc_status_t r_check_txn(pc_store_t *s, const pc_cell_t *primary, uint64_t start_ts,
                               uint64_t now_ts, int owner_dead, pc_txn_state_t *state,
                               uint64_t *commit_ts, pc_error_t *err) {
  RUN(s, group_may_write,
      S->ops->check_txn(S, primary, start_ts, now_ts, owner_dead, state, commit_ts, err));
}

static pc_status_t r_heartbeat(pc_store_t *s, const pc_cell_t *primary, uint64_t start_ts,
                               uint32_t ttl_ms, pc_error_t *err) {
  RUN(s, group_may_write, S->ops->heartbeat(S, primary, start_ts, ttl_ms, err));
}

static pc_status_t r_one_phase(pc_store_t *s, const pc_mutation_t *muts, size_t n,
                               uint64_t start_ts, pc_ts_source_fn ts_source, void *ts_ctx,
                               pc_notify_clear_t *clear, uint64_t *commit_ts,
                               pc_lock_info_t *lock, pc_error_t *err) {
  RUN(s, group_may_write,
      S->ops->commit_one_phase(S, muts, n, start_ts, ts_source, ts_ctx, clear, commit_ts, lock,
                               err));
}

static pc_status_t r_scan(pc_store_t *s, const char *table, const char *start, size_t slen,
                          const char *start_col, size_t sclen, const char *end, size_t elen,
                          uint64_t read_ts, size_t limit, pc_store_cell_fn fn, void *ctx,
                          pc_lock_info_t *lock, pc_error_t *err) {
  READ(s,
       S->ops->scan(S, table, start, slen, start_col, sclen, end, elen, read_ts, limit, fn, ctx,
                    lock, err),
       if (st_ == PC_LOCKED) pc_lock_info_free(lock));
}

static pc_status_t r_raw_scan(pc_store_t *s, const char *table, const char *start, size_t slen,
                              const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                              pc_error_t *err) {
  READ(s, S->ops->raw_scan(S, table, start, slen, end, elen, fn, ctx, err), (void)0);
}

static pc_status_t r_scan_locks(pc_store_t *s, uint64_t below, pc_store_lock_fn fn, void *ctx,
                                pc_error_t *err) {
  READ(s, S->ops->scan_locks(S, below, fn, ctx, err), (void)0);
}

static pc_status_t r_gc(pc_store_t *s, uint64_t safe_point, uint32_t rate,
                        pc_store_gc_stats_t *stats, pc_error_t *err) {
  RUN(s, group_may_write, S->ops->gc(S, safe_point, rate, stats, err));
}

static pc_status_t r_scan_notify(pc_store_t *s, uint32_t lo, uint32_t hi,
                                 const pc_notification_t *after, size_t limit,
                                 pc_store_notify_fn fn, void *ctx, pc_error_t *err) {
  READ(s, S->ops->scan_notify(S, lo, hi, after, limit, fn, ctx, err), (void)0);
}

static pc_status_t r_clear_notify(pc_store_t *s, pc_notify_clear_t *clears, size_t n,
                                  pc_error_t *err) {
  RUN(s, group_may_write, S->ops->clear_notify(S, clears, n, err));
}

static pc_status_t r_observer_update(pc_store_t *s, const pc_store_observer_t *o, int add,
                                     pc_error_t *err) {
  RUN(s, group_may_write, S->ops->observer_update(S, o, add, err));
}

static pc_status_t r_observer_list(pc_store_t *s, pc_store_observer_fn fn, void *ctx,
                                   pc_error_t *err) {
  READ(s, S->ops->observer_list(S, fn, ctx, err), (void)0);
}

static uint64_t r_gc_safe_point(pc_store_t *s) {
  pc_replica_t *r = REP(s);
  gen_t *g = gen_acquire(r);
  uint64_t safe = g ? g->store->ops->gc_safe_point(g->store) : 0;
  gen_release(r, g);
  return safe;
}

/* The replica closes its stores itself (pc_repl_host_close). */
static void r_close(pc_store_t *s) { (void)s; }

static const pc_store_ops_t replica_ops = {
    .get = r_get,
    .get_fresh = r_get_fresh,
    .prewrite = r_prewrite,
    .commit = r_commit,
    .rollback = r_rollback,
    .check_txn = r_check_txn,
    .heartbeat = r_heartbeat,
    .commit_one_phase = r_one_phase,
    .scan = r_scan,
    .raw_scan = r_raw_scan,
    .scan_locks = r_scan_locks,
    .gc = r_gc,
    .scan_notify = r_scan_notify,
    .clear_notify = r_clear_notify,
    .observer_update = r_observer_update,
    .observer_list = r_observer_list,
    .gc_safe_point = r_gc_safe_point,
    .close = r_close,
};

pc_store_t *replica_store_create(pc_replica_t *r) {
  rstore_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->base.ops = &replica_ops;
  s->r = r;
  return &s->base;
}

void replica_store_free(pc_store_t *s) { free(s); }
