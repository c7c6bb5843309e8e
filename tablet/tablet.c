/* tablet.c — the tablet server's request handler: one handler per op of the
 * tablet protocol (tablet.h), found in a table by op, decodes a store
 * operation from the body (tablet_wire.h), refuses rows outside the tablet's
 * range, runs it on the tablet's own store (normally store_local.c), and
 * encodes the outcome: decode (tablet_wire.h's whole-request decoders),
 * logic, reply. Every body is untrusted: decoding is bounds-checked and
 * a malformed body is PC_INVALID naming the operation and the field, never a
 * crash; what
 * only the system may do is refused to data clients, and what the server
 * can check without trusting the client (a lock's lease, a safe point) is
 * checked (pc_tablet_set_limits). */
#include "tablet/tablet.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/db.h"
#include "base/deadline.h"
#include "base/error.h"
#include "core/keys.h"
#include "net/rpc.h"
#include "tablet/tablet_wire.h"

#define RAW_REPLY_MAX (64u << 20)

struct pc_tablet {
  char *name;
  pc_store_t *store;
  char *start, *end;
  size_t start_len, end_len;
  pc_ts_source_fn ts_source;
  void *ts_ctx;
  pc_tablet_publish_fn publish; /* pc_tablet_set_gc_publish; NULL: nothing to publish */
  void *publish_ctx;
  atomic_uint_fast64_t ops;
  _Atomic uint64_t issued; /* the highest timestamp this tablet has had from the oracle */
  pthread_mutex_t gc_mu;    /* one pass at a time; guards gc */
  pc_tablet_gc_t gc;
  uint32_t lock_ttl_ms;     /* pc_tablet_set_limits; 0: no cap */
  size_t raw_reply_max, scan_reply_max, locks_reply_max;
};

int pc_tablet_rpc_runs_inline(uint8_t op) {
  return op == PC_TABLET_OP_GET || op == PC_TABLET_OP_GET_MANY || op == PC_TABLET_OP_SCAN_NOTIFY;
}

int pc_row_range_contains(const pc_row_range_t *r, const char *row, size_t rlen) {
  if (pc_bytes_cmp(row, rlen, r->start, r->start_len) < 0) return 0;
  return r->end_len == 0 || pc_bytes_cmp(row, rlen, r->end, r->end_len) < 0;
}

pc_tablet_t *pc_tablet_create(const char *name, pc_store_t *store, const pc_row_range_t *range,
                              pc_ts_source_fn ts_source, void *ts_ctx) {
  pc_tablet_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->name = strdup(name);
  t->start = malloc(range->start_len + 1);
  t->end = malloc(range->end_len + 1);
  if (!t->name || !t->start || !t->end) {
    free(t->name);
    free(t->start);
    free(t->end);
    free(t);
    return NULL;
  }
  if (range->start_len) memcpy(t->start, range->start, range->start_len);
  if (range->end_len) memcpy(t->end, range->end, range->end_len);
  t->start_len = range->start_len;
  t->end_len = range->end_len;
  t->store = store;
  t->ts_source = ts_source;
  t->ts_ctx = ts_ctx;
  pthread_mutex_init(&t->gc_mu, NULL);
  pc_tablet_set_limits(t, 0, 0);
  return t;
}

void pc_tablet_set_limits(pc_tablet_t *t, uint32_t lock_ttl_ms, size_t max_reply) {
  t->lock_ttl_ms = lock_ttl_ms;
  t->raw_reply_max = max_reply && max_reply < RAW_REPLY_MAX ? max_reply : RAW_REPLY_MAX;
  t->scan_reply_max = max_reply ? max_reply : SIZE_MAX;
  t->locks_reply_max = max_reply ? max_reply : SIZE_MAX;
}

void pc_tablet_set_gc_publish(pc_tablet_t *t, pc_tablet_publish_fn publish, void *ctx) {
  t->publish = publish;
  t->publish_ctx = ctx;
}

void pc_tablet_destroy(pc_tablet_t *t) {
  if (!t) return;
  t->store->ops->close(t->store);
  free(t->name);
  free(t->start);
  free(t->end);
  pthread_mutex_destroy(&t->gc_mu);
  free(t);
}

uint64_t pc_tablet_ops(const pc_tablet_t *t) { return atomic_load(&t->ops); }

void pc_tablet_gc_stats(pc_tablet_t *t, pc_tablet_gc_t *out) {
  pthread_mutex_lock(&t->gc_mu);
  *out = t->gc;
  pthread_mutex_unlock(&t->gc_mu);
  /* a restarted tablet refuses reads below its store's safe point (persisted
   * by its last pass, or adopted from the published one) before any pass */
  uint64_t kept = t->store->ops->gc_safe_point(t->store);
  if (kept > out->safe_point) out->safe_point = kept;
}

static pc_row_range_t range_of(const pc_tablet_t *t) {
  return (pc_row_range_t){t->start, t->start_len, t->end, t->end_len};
}

static pc_status_t check_row(const pc_tablet_t *t, const pc_cell_t *c, pc_error_t *err) {
  pc_row_range_t r = range_of(t);
  if (pc_row_range_contains(&r, c->row, c->rlen)) return PC_OK;
  return pc_error_set(err, PC_INVALID, "tablet %s does not serve row '%.*s' (misrouted request)",
                      t->name, (int)(c->rlen > 64 ? 64 : c->rlen), c->row);
}

/* ---- what a client is not trusted with ------------------------------------ */

/* Only the system identity may run op (what), e.g. set a GC safe point. */
static pc_status_t need_system(const pc_tablet_t *t, const char *what, pc_error_t *e) {
  if (pc_rpc_current_role() == PC_RPC_ROLE_SYSTEM) return PC_OK;
  return pc_error_set(e, PC_DENIED, "tablet %s: %s needs the system identity (a data client "
                      "cannot: docs/SECURITY.md)", t->name, what);
}

/* Writes to the system table (observer records, parked failures, worker
 * records) are the system's. */
static pc_status_t check_writes(const pc_tablet_t *t, const pc_mutation_t *muts, size_t n,
                                pc_error_t *e) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(muts[i].cell.table, PC_SYSTEM_TABLE) == 0)
      return need_system(t, "writing table " PC_SYSTEM_TABLE, e);
  return PC_OK;
}

/* Resolving a lock of the system table (committing it, rolling it back,
 * asking its transaction's fate with the power to roll it back, renewing
 * its lease) is the system's: a data client could otherwise make the
 * system's own transactions fail. A transaction that writes the system
 * table has one of its cells as its primary (core/txn.c), so its fate is
 * decided only here. */
static pc_status_t check_resolve(const pc_tablet_t *t, const pc_cell_t *cells, size_t n,
                                 const char *what, pc_error_t *e) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(cells[i].table, PC_SYSTEM_TABLE) == 0) {
      char why[96];
      snprintf(why, sizeof why, "%s a lock of table " PC_SYSTEM_TABLE, what);
      return need_system(t, why, e);
    }
  return PC_OK;
}

/* Whether ts could have come from the oracle: it is at or below the highest
 * timestamp this tablet has had from it, or its physical part is at most a
 * lease (lock_ttl_ms) ahead of this machine's clock; else the tablet asks
 * the oracle for a fresh timestamp, and one beyond it was never issued. A
 * commit at a timestamp the oracle has not reached makes the cell
 * unwritable until it does (2^64-2: for good), and a rollback record or a
 * lock there the same. One at most a lease ahead of the clock (plus the
 * skew between this clock and the oracle's) holds a cell no longer than a
 * lock any client may take does, so it passes without a question: the
 * oracle is not asked on the path of a request unless a timestamp is far
 * ahead (an oracle just elected serves a window ahead of its clock). On a
 * server's I/O thread, which may not wait for the oracle, the question is
 * left to a handler thread, which runs the request again. */
static pc_status_t check_issued(pc_tablet_t *t, const char *what, uint64_t ts, pc_error_t *e) {
  if (ts <= atomic_load(&t->issued) || PC_TS_PHYSICAL_MS(ts) <= pc_now_wall_ms() + t->lock_ttl_ms)
    return PC_OK;
  if (pc_nowait_refuse()) return PC_OK; /* this answer is dropped; a worker asks */
  uint64_t fresh = 0;
  pc_status_t st = t->ts_source(t->ts_ctx, &fresh, e);
  if (st != PC_OK) return st;
  uint64_t cur = atomic_load(&t->issued);
  while (cur < fresh && !atomic_compare_exchange_weak(&t->issued, &cur, fresh)) {
  }
  if (ts <= fresh) return PC_OK;
  return pc_error_set(e, PC_INVALID, "tablet %s: %s %llu is beyond the oracle's timestamps "
                      "(%llu)", t->name, what, (unsigned long long)ts,
                      (unsigned long long)fresh);
}

/* A lock's lease (ttl_ms counted from start_ts's physical time) may run at
 * most lock_ttl_ms past now: this machine's clock, or, when start_ts is ahead
 * of it by more than that, a fresh timestamp of the oracle (and a start_ts
 * past that is one the oracle never issued). */
static pc_status_t bound_lease(pc_tablet_t *t, uint64_t start_ts, uint32_t *ttl_ms,
                               pc_error_t *e) {
  if (!t->lock_ttl_ms) return PC_OK;
  uint64_t start_ms = PC_TS_PHYSICAL_MS(start_ts), now = pc_now_wall_ms();
  if (start_ms > now + t->lock_ttl_ms) {
    uint64_t fresh = 0;
    pc_status_t st = t->ts_source(t->ts_ctx, &fresh, e);
    if (st != PC_OK) return st;
    if (start_ts > fresh)
      return pc_error_set(e, PC_INVALID, "tablet %s: start_ts %llu is beyond the oracle's "
                          "timestamps (%llu)", t->name, (unsigned long long)start_ts,
                          (unsigned long long)fresh);
    now = PC_TS_PHYSICAL_MS(fresh);
  }
  uint64_t cap = (now > start_ms ? now - start_ms : 0) + t->lock_ttl_ms;
  if (*ttl_ms > cap) *ttl_ms = (uint32_t)cap;
  return PC_OK;
}

/* A safe point at or below a fresh timestamp: one above every timestamp the
 * oracle issued would make the tablet refuse every read for good. */
static pc_status_t check_safe_point(pc_tablet_t *t, uint64_t safe, pc_error_t *e) {
  uint64_t fresh = 0;
  pc_status_t st = t->ts_source(t->ts_ctx, &fresh, e);
  if (st != PC_OK) return st;
  if (safe <= fresh) return PC_OK;
  return pc_error_set(e, PC_INVALID, "tablet %s: GC safe point %llu is beyond the oracle's "
                      "timestamps (%llu)", t->name, (unsigned long long)safe,
                      (unsigned long long)fresh);
}

/* Appends the outcome: status, the op's payload (already in payload), message. */
static pc_status_t finish(pc_buf_t *reply, pc_status_t st, const pc_buf_t *payload,
                          const pc_error_t *e) {
  const char *msg = st == PC_OK ? "" : e->text;
  if (pc_buf_u8(reply, (uint8_t)st) || pc_buf_append(reply, payload->p, payload->len) ||
      pc_buf_str(reply, msg, strlen(msg)))
    return PC_NOMEM;
  return PC_OK;
}

typedef struct scan_out {
  pc_buf_t *payload;
  uint32_t n;
  int oom;   /* out of memory, or (raw scan) past max */
  int over;  /* past max */
  size_t max;
} scan_out_t;

static int scan_cell(void *ctx, const pc_cell_t *c, const char *v, size_t vlen) {
  scan_out_t *o = ctx;
  if (o->payload->len > o->max) {
    o->over = 1;
    return 1;
  }
  if (pc_buf_str(o->payload, c->row, c->rlen) || pc_buf_str(o->payload, c->col, c->clen) ||
      pc_buf_str(o->payload, v, vlen)) {
    o->oom = 1;
    return 1;
  }
  o->n++;
  return 0;
}

static int raw_cell(void *ctx, const pc_raw_cell_t *c) {
  scan_out_t *o = ctx;
  if (o->payload->len > o->max || pc_wire_put_raw(o->payload, c)) {
    o->oom = 1;
    return 1;
  }
  o->n++;
  return 0;
}

typedef struct locks_out {
  pc_buf_t *payload;
  uint32_t n;
  int oom, truncated;
  size_t max;
} locks_out_t;

static int lock_out(void *ctx, const pc_lock_info_t *lock) {
  locks_out_t *o = ctx;
  if (o->n == PC_TABLET_LOCKS_MAX || o->payload->len > o->max) {
    o->truncated = 1;
    return 1;
  }
  if (pc_wire_put_lock(o->payload, lock)) {
    o->oom = 1;
    return 1;
  }
  o->n++;
  return 0;
}

typedef struct notes_out {
  pc_buf_t *payload;
  uint32_t n;
  int oom, more;
} notes_out_t;

static int note_out(void *ctx, const pc_notification_t *note) {
  notes_out_t *o = ctx;
  if (pc_wire_put_notification(o->payload, note)) {
    o->oom = 1;
    return 1;
  }
  o->n++;
  /* a full reply stops here; the client asks again after this one */
  if (o->payload->len >= PC_TABLET_NOTIFY_REPLY_MAX) o->more = 1;
  return o->more;
}

typedef struct obs_out {
  pc_buf_t *payload;
  uint32_t n;
  int oom;
} obs_out_t;

static int observer_out(void *ctx, const pc_store_observer_t *ob) {
  obs_out_t *o = ctx;
  pc_buf_t rec = {0};
  o->oom = pc_obs_record_encode(&rec, ob->kind, ob->table, ob->col, ob->clen) ||
           pc_buf_str(o->payload, ob->name, strlen(ob->name)) ||
           pc_buf_str(o->payload, rec.p, rec.len);
  pc_buf_free(&rec);
  o->n += !o->oom;
  return o->oom;
}

/* A read below the last GC's safe point could miss versions it deleted. A
 * read checks before and again after it reads: the pass records its safe
 * point in the store before it deletes anything, so a read that still passes
 * the check afterwards read nothing the pass had removed. */
static pc_status_t check_snapshot(pc_tablet_t *t, uint64_t read_ts, pc_error_t *e) {
  uint64_t safe = t->store->ops->gc_safe_point(t->store);
  if (read_ts >= safe) return PC_OK;
  return pc_error_set(e, PC_ABORTED,
                      "tablet %s: snapshot %llu is older than the garbage-collection safe point "
                      "%llu (kept while its client lives, up to store.snapshot_max_age_ms)",
                      t->name, (unsigned long long)read_ts, (unsigned long long)safe);
}

/* The handlers of the ops, one each (GET and GET_FRESH, PREWRITE and
 * ONE_PHASE, COMMIT and ROLLBACK share one, told apart by op): each decodes
 * its request body with tablet_wire.h (strings into a), runs it, fills
 * payload and e, and returns the store status. */
typedef pc_status_t (*op_fn)(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                             pc_arena_t *a, pc_buf_t *payload, pc_error_t *e);

/* GET_MANY: each cell's answer in turn; a cell's lock is an answer, an
 * error of the store fails the whole request. */
static pc_status_t op_get_many(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                               pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_get_many_req_t q;
  pc_status_t st = pc_tablet_decode_get_many(body, len, a, &q, e);
  if (st == PC_OK) st = check_issued(t, "read_ts", q.read_ts, e);
  if (st == PC_OK) st = check_snapshot(t, q.read_ts, e);
  for (size_t k = 0; st == PC_OK && k < q.n; k++) st = check_row(t, &q.cells[k], e);
  for (size_t k = 0; st == PC_OK && k < q.n; k++) {
    char *v = NULL;
    size_t vlen = 0;
    pc_lock_info_t lock = {0};
    pc_error_t ce;
    pc_status_t cs = s->ops->get(s, &q.cells[k], q.read_ts, &v, &vlen, &lock, &ce);
    if (cs == PC_OK || cs == PC_NOT_FOUND || cs == PC_LOCKED) {
      if (pc_buf_u8(payload, (uint8_t)cs) || (cs == PC_OK && pc_buf_str(payload, v, vlen)) ||
          (cs == PC_LOCKED && pc_wire_put_lock(payload, &lock)))
        st = pc_error_set(e, PC_NOMEM, "oom");
    } else {
      st = cs;
      *e = ce;
    }
    pc_free(v);
    if (cs == PC_LOCKED) pc_lock_info_free(&lock);
  }
  if (st == PC_OK) st = check_snapshot(t, q.read_ts, e);
  return st;
}

static pc_status_t op_get(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                          pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_get_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_get(body, len, op, a, &q, e)) != PC_OK) return st;
  if ((st = check_row(t, &q.cell, e)) != PC_OK) return st;
  uint64_t ts = q.read_ts;
  if (op == PC_TABLET_OP_GET && ((st = check_issued(t, "read_ts", ts, e)) != PC_OK ||
                                 (st = check_snapshot(t, ts, e)) != PC_OK))
    return st;
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock = {0};
  if (op == PC_TABLET_OP_GET) {
    st = s->ops->get(s, &q.cell, ts, &v, &vlen, &lock, e);
  } else {
    st = s->ops->get_fresh(s, &q.cell, t->ts_source, t->ts_ctx, &ts, &v, &vlen, &lock, e);
    if (ts && pc_buf_u64(payload, ts)) st = pc_error_set(e, PC_NOMEM, "oom");
  }
  if (op == PC_TABLET_OP_GET && st != PC_NOMEM) {
    pc_status_t again = check_snapshot(t, ts, e);
    if (again != PC_OK) st = again;
  }
  if (st == PC_OK && pc_buf_str(payload, v, vlen)) st = pc_error_set(e, PC_NOMEM, "oom");
  if (st == PC_LOCKED && pc_wire_put_lock(payload, &lock)) st = pc_error_set(e, PC_NOMEM, "oom");
  pc_free(v);
  pc_lock_info_free(&lock);
  return st;
}

static pc_status_t op_write(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                            pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  const char *name = op == PC_TABLET_OP_PREWRITE ? "prewrite" : "one-phase commit";
  pc_tablet_write_req_t q;
  pc_status_t st = pc_tablet_decode_write(body, len, op, a, &q, e);
  if (st != PC_OK) return st;
  for (size_t i = 0; i < q.n && st == PC_OK; i++) st = check_row(t, &q.muts[i].cell, e);
  if (st == PC_OK && q.start_ts == 0) st = pc_error_set(e, PC_INVALID, "%s: start_ts is 0", name);
  if (st == PC_OK) st = check_writes(t, q.muts, q.n, e);
  if (st == PC_OK)
    st = check_issued(t, "start_ts", op == PC_TABLET_OP_PREWRITE ? q.spec.start_ts : q.start_ts,
                      e);
  if (st == PC_OK && op == PC_TABLET_OP_PREWRITE)
    st = bound_lease(t, q.spec.start_ts, &q.spec.ttl_ms, e);
  /* one-phase: the clear's cell must be in a row the commit writes, which
   * the store checks */
  pc_notify_clear_t *cl = q.has_clear ? &q.clear : NULL;
  pc_lock_info_t lock = {0};
  uint64_t commit_ts = 0;
  if (st == PC_OK) {
    if (op == PC_TABLET_OP_PREWRITE)
      st = s->ops->prewrite(s, q.muts, q.n, &q.spec, &lock, e);
    else
      st = s->ops->commit_one_phase(s, q.muts, q.n, q.start_ts, t->ts_source, t->ts_ctx, cl,
                                    &commit_ts, &lock, e);
  }
  if (st == PC_OK && op != PC_TABLET_OP_PREWRITE &&
      (pc_buf_u64(payload, commit_ts) ||
       (cl && (pc_buf_u8(payload, (uint8_t)cl->done) ||
               pc_buf_str(payload, cl->missing, strlen(cl->missing))))))
    st = pc_error_set(e, PC_NOMEM, "oom");
  if (st == PC_LOCKED && pc_wire_put_lock(payload, &lock)) st = pc_error_set(e, PC_NOMEM, "oom");
  pc_lock_info_free(&lock);
  return st;
}

static pc_status_t op_commit(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                             pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_cells_req_t q;
  pc_status_t st = pc_tablet_decode_cells(body, len, op, a, &q, e);
  for (size_t i = 0; st == PC_OK && i < q.n; i++) st = check_row(t, &q.cells[i], e);
  if (st == PC_OK)
    st = check_resolve(t, q.cells, q.n, op == PC_TABLET_OP_COMMIT ? "committing" : "rolling back",
                       e);
  if (st == PC_OK) st = check_issued(t, "start_ts", q.start_ts, e);
  if (st == PC_OK && op == PC_TABLET_OP_COMMIT) st = check_issued(t, "commit_ts", q.commit_ts, e);
  if (st == PC_OK)
    st = op == PC_TABLET_OP_COMMIT ? s->ops->commit(s, q.cells, q.n, q.start_ts, q.commit_ts, e)
                                   : s->ops->rollback(s, q.cells, q.n, q.start_ts, e);
  return st;
}

static pc_status_t op_check_txn(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                                pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_check_txn_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_check_txn(body, len, a, &q, e)) != PC_OK) return st;
  if ((st = check_row(t, &q.primary, e)) != PC_OK ||
      (st = check_resolve(t, &q.primary, 1, "settling", e)) != PC_OK ||
      (st = check_issued(t, "start_ts", q.start_ts, e)) != PC_OK)
    return st;
  /* now is not checked: it is written nowhere, and a now past the lease
   * does no more than owner_dead, which any client may send */
  pc_txn_state_t state = PC_TXN_ALIVE;
  uint64_t commit_ts = 0;
  st = s->ops->check_txn(s, &q.primary, q.start_ts, q.now_ts, q.owner_dead, &state, &commit_ts,
                         e);
  if (st == PC_OK && (pc_buf_u8(payload, (uint8_t)state) || pc_buf_u64(payload, commit_ts)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  return st;
}

static pc_status_t op_scan(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                           pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_scan_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_scan(body, len, a, &q, e)) != PC_OK) return st;
  /* the range must lie inside the tablet */
  if (pc_bytes_cmp(q.start, q.start_len, t->start, t->start_len) < 0 ||
      (t->end_len && (!q.end || pc_bytes_cmp(q.end, q.end_len, t->end, t->end_len) > 0)))
    return pc_error_set(e, PC_INVALID, "tablet %s: scan range outside its rows (misrouted)",
                        t->name);
  if ((st = check_issued(t, "read_ts", q.read_ts, e)) != PC_OK ||
      (st = check_snapshot(t, q.read_ts, e)) != PC_OK)
    return st;
  pc_buf_t cells = {0};
  scan_out_t o = {&cells, 0, 0, 0, t->scan_reply_max};
  pc_lock_info_t lock = {0};
  st = s->ops->scan(s, q.table, q.start, q.start_len, q.start_col, q.start_col_len, q.end,
                    q.end_len, q.read_ts, q.limit, scan_cell, &o, &lock, e);
  if (o.oom) st = pc_error_set(e, PC_NOMEM, "out of memory");
  if (o.over)
    st = pc_error_set(e, PC_INVALID, "scan of tablet %s: a reply of %u cells exceeds %zu "
                      "bytes: ask for fewer", t->name, q.limit, t->scan_reply_max);
  if (st != PC_NOMEM) {
    pc_status_t again = check_snapshot(t, q.read_ts, e);
    if (again != PC_OK) st = again;
  }
  if ((st == PC_OK || st == PC_LOCKED) &&
      (pc_buf_u32(payload, o.n) || pc_buf_append(payload, cells.p, cells.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  if (st == PC_LOCKED && pc_wire_put_lock(payload, &lock)) st = pc_error_set(e, PC_NOMEM, "oom");
  pc_lock_info_free(&lock);
  pc_buf_free(&cells);
  return st;
}

static pc_status_t op_raw_scan(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                               pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_raw_scan_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_raw_scan(body, len, a, &q, e)) != PC_OK) return st;
  pc_buf_t cells = {0};
  scan_out_t o = {&cells, 0, 0, 0, t->raw_reply_max};
  st = s->ops->raw_scan(s, q.table, q.start, q.start_len, q.end, q.end_len, raw_cell, &o, e);
  if (o.oom)
    st = pc_error_set(e, PC_INVALID, "raw scan of tablet %s exceeds %zu bytes: narrow the "
                      "range", t->name, t->raw_reply_max);
  if (st == PC_OK && (pc_buf_u32(payload, o.n) || pc_buf_append(payload, cells.p, cells.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  pc_buf_free(&cells);
  return st;
}

static pc_status_t op_heartbeat(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                                pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_heartbeat_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_heartbeat(body, len, a, &q, e)) != PC_OK) return st;
  if ((st = check_row(t, &q.primary, e)) != PC_OK ||
      (st = check_resolve(t, &q.primary, 1, "renewing", e)) != PC_OK ||
      (st = check_issued(t, "start_ts", q.start_ts, e)) != PC_OK)
    return st;
  if ((st = bound_lease(t, q.start_ts, &q.ttl_ms, e)) != PC_OK) return st;
  return s->ops->heartbeat(s, &q.primary, q.start_ts, q.ttl_ms, e);
}

static pc_status_t op_scan_locks(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                                 pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  uint64_t below;
  pc_status_t st;
  if ((st = pc_tablet_decode_scan_locks(body, len, &below, e)) != PC_OK) return st;
  pc_buf_t locks = {0};
  locks_out_t o = {&locks, 0, 0, 0, t->locks_reply_max};
  st = s->ops->scan_locks(s, below, lock_out, &o, e);
  if (o.oom) st = pc_error_set(e, PC_NOMEM, "out of memory");
  if (st == PC_OK && (pc_buf_u8(payload, (uint8_t)o.truncated) || pc_buf_u32(payload, o.n) ||
                      pc_buf_append(payload, locks.p, locks.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  pc_buf_free(&locks);
  return st;
}

static pc_status_t op_gc(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                         pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_gc_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_gc(body, len, &q, e)) != PC_OK) return st;
  uint64_t safe = q.safe_point;
  if ((st = need_system(t, "setting a GC safe point", e)) != PC_OK ||
      (st = check_safe_point(t, safe, e)) != PC_OK)
    return st;
  /* published (where tablets that missed this pass adopt it) before
   * anything below it is deleted, and only once the frame is authorised */
  if (t->publish && (st = t->publish(t->publish_ctx, safe, e)) != PC_OK) {
    pc_error_prefix(e, "tablet %s: gc", t->name);
    return st;
  }
  /* the store records the safe point before it deletes below it, and
   * readers below it are refused from then on (check_snapshot) */
  pc_store_gc_stats_t g;
  pthread_mutex_lock(&t->gc_mu);
  st = s->ops->gc(s, safe, q.rate, &g, e);
  if (st == PC_OK) {
    if (safe > t->gc.safe_point) t->gc.safe_point = safe;
    t->gc.passes++;
    t->gc.deleted.cells += g.cells;
    t->gc.deleted.versions += g.versions;
    t->gc.deleted.rollbacks += g.rollbacks;
    t->gc.deleted.data += g.data;
  }
  pthread_mutex_unlock(&t->gc_mu);
  if (st == PC_OK && (pc_buf_u64(payload, g.cells) || pc_buf_u64(payload, g.versions) ||
                      pc_buf_u64(payload, g.rollbacks) || pc_buf_u64(payload, g.data)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  return st;
}

static pc_status_t op_scan_notify(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                                  pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_scan_notify_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_scan_notify(body, len, a, &q, e)) != PC_OK) return st;
  pc_buf_t notes = {0};
  notes_out_t o = {&notes, 0, 0, 0};
  st = s->ops->scan_notify(s, q.lo, q.hi, q.has_after ? &q.after : NULL, q.limit, note_out, &o,
                           e);
  if (o.oom) st = pc_error_set(e, PC_NOMEM, "out of memory");
  if (st == PC_OK && (pc_buf_u8(payload, (uint8_t)o.more) || pc_buf_u32(payload, o.n) ||
                      pc_buf_append(payload, notes.p, notes.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  pc_buf_free(&notes);
  return st;
}

static pc_status_t op_clear_notify(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                                   pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_notify_clear_t clear;
  pc_status_t st;
  if ((st = pc_tablet_decode_clear_notify(body, len, a, &clear, e)) != PC_OK) return st;
  if ((st = check_row(t, &clear.cell, e)) != PC_OK) return st;
  st = s->ops->clear_notify(s, &clear, 1, e);
  if (st == PC_OK && (pc_buf_u8(payload, (uint8_t)clear.done) ||
                      pc_buf_str(payload, clear.missing, strlen(clear.missing))))
    st = pc_error_set(e, PC_NOMEM, "oom");
  return st;
}

/* Many cells of this tablet's in one request: one call of the store, one
 * write (store.h); the answers in the request's order. */
static pc_status_t op_clear_notify_many(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                                        pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  (void)op;
  pc_store_t *s = t->store;
  pc_notify_clear_t *clears;
  size_t n;
  pc_status_t st = pc_tablet_decode_clear_notify_many(body, len, a, &clears, &n, e);
  for (size_t k = 0; st == PC_OK && k < n; k++) st = check_row(t, &clears[k].cell, e);
  if (st == PC_OK) st = s->ops->clear_notify(s, clears, n, e);
  for (size_t k = 0; st == PC_OK && k < n; k++)
    if (pc_buf_u8(payload, (uint8_t)clears[k].done) ||
        pc_buf_str(payload, clears[k].missing, strlen(clears[k].missing)))
      st = pc_error_set(e, PC_NOMEM, "oom");
  return st;
}

static pc_status_t op_observer(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                               pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_tablet_observer_req_t q;
  pc_status_t st;
  if ((st = pc_tablet_decode_observer(body, len, a, &q, e)) != PC_OK) return st;
  /* the set decides which commits write notifications: adding to it
   * floods a column with notifications no worker clears, removing from
   * it makes a registered observer miss changes */
  if ((st = need_system(t, q.add ? "adding an observer to the tablet's set"
                                 : "removing an observer from the tablet's set",
                        e)) != PC_OK)
    return st;
  return s->ops->observer_update(s, &q.observer, q.add, e);
}

static pc_status_t op_observers(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                                pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  if ((st = pc_tablet_decode_empty(body, len, "observers", e)) != PC_OK) return st;
  pc_buf_t list = {0};
  obs_out_t o = {&list, 0, 0};
  st = s->ops->observer_list(s, observer_out, &o, e);
  if (o.oom) st = pc_error_set(e, PC_NOMEM, "out of memory");
  if (st == PC_OK && (pc_buf_u32(payload, o.n) || pc_buf_append(payload, list.p, list.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  pc_buf_free(&list);
  return st;
}

static pc_status_t op_info(pc_tablet_t *t, uint8_t op, const char *body, size_t len,
                           pc_arena_t *a, pc_buf_t *payload, pc_error_t *e) {
  pc_status_t st;
  if ((st = pc_tablet_decode_empty(body, len, "info", e)) != PC_OK) return st;
  if (pc_buf_str(payload, t->name, strlen(t->name)) || pc_buf_u32(payload, 1) ||
      pc_buf_str(payload, t->start, t->start_len) || pc_buf_str(payload, t->end, t->end_len) ||
      pc_buf_u64(payload, pc_tablet_ops(t)))
    return pc_error_set(e, PC_NOMEM, "oom");
  pc_tablet_gc_t g;
  pc_tablet_gc_stats(t, &g);
  if (pc_buf_u64(payload, g.safe_point) || pc_buf_u64(payload, g.passes) ||
      pc_buf_u64(payload, g.deleted.versions) || pc_buf_u64(payload, g.deleted.rollbacks) ||
      pc_buf_u64(payload, g.deleted.data))
    return pc_error_set(e, PC_NOMEM, "oom");
  return PC_OK;
}

static const op_fn ops[256] = {
    [PC_TABLET_OP_GET] = op_get,
    [PC_TABLET_OP_GET_FRESH] = op_get,
    [PC_TABLET_OP_GET_MANY] = op_get_many,
    [PC_TABLET_OP_PREWRITE] = op_write,
    [PC_TABLET_OP_ONE_PHASE] = op_write,
    [PC_TABLET_OP_COMMIT] = op_commit,
    [PC_TABLET_OP_ROLLBACK] = op_commit,
    [PC_TABLET_OP_CHECK_TXN] = op_check_txn,
    [PC_TABLET_OP_SCAN] = op_scan,
    [PC_TABLET_OP_RAW_SCAN] = op_raw_scan,
    [PC_TABLET_OP_HEARTBEAT] = op_heartbeat,
    [PC_TABLET_OP_SCAN_LOCKS] = op_scan_locks,
    [PC_TABLET_OP_GC] = op_gc,
    [PC_TABLET_OP_SCAN_NOTIFY] = op_scan_notify,
    [PC_TABLET_OP_CLEAR_NOTIFY] = op_clear_notify,
    [PC_TABLET_OP_CLEAR_NOTIFY_MANY] = op_clear_notify_many,
    [PC_TABLET_OP_OBSERVER] = op_observer,
    [PC_TABLET_OP_OBSERVERS] = op_observers,
    [PC_TABLET_OP_INFO] = op_info,
};

const char *pc_tablet_op_name(uint8_t op) {
  static const char *const names[] = {
      [PC_TABLET_OP_GET] = "get",           [PC_TABLET_OP_PREWRITE] = "prewrite",
      [PC_TABLET_OP_COMMIT] = "commit",     [PC_TABLET_OP_ROLLBACK] = "rollback",
      [PC_TABLET_OP_CHECK_TXN] = "check_txn", [PC_TABLET_OP_ONE_PHASE] = "one_phase",
      [PC_TABLET_OP_SCAN] = "scan",         [PC_TABLET_OP_RAW_SCAN] = "raw_scan",
      [PC_TABLET_OP_INFO] = "info",         [PC_TABLET_OP_GET_FRESH] = "get_fresh",
      [PC_TABLET_OP_HEARTBEAT] = "heartbeat", [PC_TABLET_OP_SCAN_LOCKS] = "scan_locks",
      [PC_TABLET_OP_GC] = "gc",             [PC_TABLET_OP_SCAN_NOTIFY] = "scan_notify",
      [PC_TABLET_OP_CLEAR_NOTIFY] = "clear_notify", [PC_TABLET_OP_OBSERVER] = "observer",
      [PC_TABLET_OP_OBSERVERS] = "observers", [PC_TABLET_OP_GET_MANY] = "get_many",
      [PC_TABLET_OP_CLEAR_NOTIFY_MANY] = "clear_notify_many",
  };
  return op < sizeof names / sizeof names[0] ? names[op] : NULL;
}

pc_status_t pc_tablet_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                  pc_buf_t *reply, pc_error_t *err) {
  pc_tablet_t *t = ctx;
  if (!ops[op]) return pc_error_set(err, PC_INVALID, "unknown opcode 0x%02x", op);
  atomic_fetch_add(&t->ops, 1);
  pc_arena_t a = {0};
  pc_buf_t payload = {0};
  pc_error_t e;
  pc_error_clear(&e);
  pc_status_t st = ops[op](t, op, body, len, &a, &payload, &e);
  if (st != PC_OK && st != PC_LOCKED && !(st == PC_NOT_FOUND && op == PC_TABLET_OP_GET_FRESH))
    payload.len = 0;
  if (st == PC_LOCKED && e.text[0] == '\0') pc_error_set(&e, PC_LOCKED, "locked");
  pc_status_t out = finish(reply, st, &payload, &e);
  pc_arena_free(&a);
  pc_buf_free(&payload);
  if (out != PC_OK) return pc_error_set(err, PC_NOMEM, "tablet %s: out of memory", t->name);
  return PC_OK;
}
