/* tablet.c — the tablet server's request handler: one handler per op of the
 * tablet protocol (tablet.h), found in a table by op, decodes a store
 * operation from the body (tablet_wire.h), refuses rows outside the tablet's
 * range, runs it on the tablet's own store (normally store_local.c), and
 * encodes the outcome. Every body is untrusted: decoding is bounds-checked and
 * a malformed body is PC_INVALID naming the operation, never a crash; what
 * only the system may do is refused to data clients, and what the server
 * can check without trusting the client (a lock's lease, a safe point) is
 * checked (pc_tablet_set_limits). */
#include "tablet/tablet.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/db.h"
#include "core/error.h"
#include "core/keys.h"
#include "net/rpc.h"
#include "tablet/tablet_wire.h"

#define MAX_CELLS_PER_REQUEST 1000000u
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
  pthread_mutex_t gc_mu;    /* one pass at a time; guards gc */
  pc_tablet_gc_t gc;
  uint32_t lock_ttl_ms;     /* pc_tablet_set_limits; 0: no cap */
  size_t raw_reply_max, scan_reply_max, locks_reply_max;
};

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

static pc_status_t malformed(const char *op, pc_error_t *err) {
  return pc_error_set(err, PC_INVALID, "malformed %s request body", op);
}

/* A deletion's observers (store.h's pc_notify_clear_t): names each
 * followed by a NUL byte, so the last byte of a list is one. */
static int observers_ok(const char *list, size_t n) { return n == 0 || list[n - 1] == '\0'; }

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

static int read_count(pc_rd_t *r, size_t *n) {
  uint32_t v = pc_rd_u32(r);
  *n = v;
  /* every cell takes at least 12 bytes, so a count the body cannot hold is a lie */
  return r->ok && v <= MAX_CELLS_PER_REQUEST && (size_t)v * 12 <= r->len - r->pos ? 0 : -1;
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
                      "%llu (the transaction ran longer than store.gc_lifetime_ms)",
                      t->name, (unsigned long long)read_ts, (unsigned long long)safe);
}

/* GET_MANY: each cell's answer in turn; a cell's lock is an answer, an
 * error of the store fails the whole request. */
static pc_status_t op_get_many(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                               pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  uint64_t ts = pc_rd_u64(r);
  size_t n;
  if (!r->ok || read_count(r, &n)) return malformed("get_many", e);
  pc_cell_t *cells = calloc(n ? n : 1, sizeof *cells);
  if (!cells) return pc_error_set(e, PC_NOMEM, "out of memory");
  pc_status_t st = PC_OK;
  for (size_t k = 0; k < n && st == PC_OK; k++)
    if (pc_wire_get_cell(r, a, &cells[k])) st = malformed("get_many", e);
  if (st == PC_OK && r->pos != r->len) st = malformed("get_many", e);
  if (st == PC_OK) st = check_snapshot(t, ts, e);
  for (size_t k = 0; k < n && st == PC_OK; k++) st = check_row(t, &cells[k], e);
  for (size_t k = 0; k < n && st == PC_OK; k++) {
    char *v = NULL;
    size_t vlen = 0;
    pc_lock_info_t lock = {0};
    pc_error_t ce;
    pc_status_t cs = s->ops->get(s, &cells[k], ts, &v, &vlen, &lock, &ce);
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
  if (st == PC_OK) st = check_snapshot(t, ts, e);
  free(cells);
  return st;
}

/* The handlers of the ops, one each (GET and GET_FRESH, PREWRITE and
 * ONE_PHASE, COMMIT and ROLLBACK share one, told apart by op): each decodes
 * its request from r, fills payload and e, and returns the store status. */
typedef pc_status_t (*op_fn)(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                             pc_buf_t *payload, pc_error_t *e);

static pc_status_t op_get(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                          pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  pc_cell_t c;
  if (pc_wire_get_cell(r, a, &c)) return malformed("get", e);
  uint64_t ts = op == PC_TABLET_OP_GET ? pc_rd_u64(r) : 0;
  if (!r->ok || r->pos != r->len) return malformed("get", e);
  if ((st = check_row(t, &c, e)) != PC_OK) return st;
  if (op == PC_TABLET_OP_GET && (st = check_snapshot(t, ts, e)) != PC_OK) return st;
  char *v = NULL;
  size_t vlen = 0;
  pc_lock_info_t lock = {0};
  if (op == PC_TABLET_OP_GET) {
    st = s->ops->get(s, &c, ts, &v, &vlen, &lock, e);
  } else {
    st = s->ops->get_fresh(s, &c, t->ts_source, t->ts_ctx, &ts, &v, &vlen, &lock, e);
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

static pc_status_t op_write(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                            pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  size_t n;
  const char *name = op == PC_TABLET_OP_PREWRITE ? "prewrite" : "one-phase commit";
  pc_lock_spec_t spec = {0};
  uint64_t start = 0;
  if (op == PC_TABLET_OP_PREWRITE) {
    if (pc_wire_get_cell(r, a, &spec.primary)) return malformed(name, e);
    spec.start_ts = pc_rd_u64(r);
    spec.ttl_ms = pc_rd_u32(r);
    spec.session = pc_rd_u64(r);
    start = spec.start_ts;
  } else {
    start = pc_rd_u64(r);
  }
  if (read_count(r, &n) || n == 0) return malformed(name, e);
  pc_mutation_t *muts = calloc(n, sizeof *muts);
  if (!muts) return pc_error_set(e, PC_NOMEM, "out of memory");
  st = PC_OK;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    if (pc_wire_get_mutation(r, a, &muts[i])) st = malformed(name, e);
    else st = check_row(t, &muts[i].cell, e);
  }
  /* one-phase: optionally, a cell whose notifications below a timestamp
   * go in the same batch (pc_notify_clear_t; the store refuses a cell
   * of a row the commit does not write) */
  pc_notify_clear_t clear = {0}, *cl = NULL;
  if (st == PC_OK && op == PC_TABLET_OP_ONE_PHASE && r->pos < r->len) {
    if (pc_wire_get_cell(r, a, &clear.cell)) st = malformed(name, e);
    clear.below = pc_rd_u64(r);
    clear.observers = pc_rd_str(r, &clear.olen);
    if (st == PC_OK && (!r->ok || !observers_ok(clear.observers, clear.olen)))
      st = malformed(name, e);
    cl = &clear;
  }
  if (st == PC_OK && r->pos != r->len) st = malformed(name, e);
  if (st == PC_OK && start == 0) st = pc_error_set(e, PC_INVALID, "%s: start_ts is 0", name);
  if (st == PC_OK) st = check_writes(t, muts, n, e);
  if (st == PC_OK && op == PC_TABLET_OP_PREWRITE)
    st = bound_lease(t, spec.start_ts, &spec.ttl_ms, e);
  pc_lock_info_t lock = {0};
  uint64_t commit_ts = 0;
  if (st == PC_OK) {
    if (op == PC_TABLET_OP_PREWRITE)
      st = s->ops->prewrite(s, muts, n, &spec, &lock, e);
    else
      st = s->ops->commit_one_phase(s, muts, n, start, t->ts_source, t->ts_ctx, cl,
                                    &commit_ts, &lock, e);
  }
  if (st == PC_OK && op != PC_TABLET_OP_PREWRITE &&
      (pc_buf_u64(payload, commit_ts) ||
       (cl && (pc_buf_u8(payload, (uint8_t)cl->done) ||
               pc_buf_str(payload, cl->missing, strlen(cl->missing))))))
    st = pc_error_set(e, PC_NOMEM, "oom");
  if (st == PC_LOCKED && pc_wire_put_lock(payload, &lock)) st = pc_error_set(e, PC_NOMEM, "oom");
  pc_lock_info_free(&lock);
  free(muts);
  return st;
}

static pc_status_t op_commit(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                             pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  size_t n;
  const char *name = op == PC_TABLET_OP_COMMIT ? "commit" : "rollback";
  uint64_t start = pc_rd_u64(r);
  uint64_t commit = op == PC_TABLET_OP_COMMIT ? pc_rd_u64(r) : 0;
  if (read_count(r, &n) || n == 0) return malformed(name, e);
  pc_cell_t *cells = calloc(n, sizeof *cells);
  if (!cells) return pc_error_set(e, PC_NOMEM, "out of memory");
  st = PC_OK;
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    if (pc_wire_get_cell(r, a, &cells[i])) st = malformed(name, e);
    else st = check_row(t, &cells[i], e);
  }
  if (st == PC_OK && r->pos != r->len) st = malformed(name, e);
  if (st == PC_OK)
    st = op == PC_TABLET_OP_COMMIT ? s->ops->commit(s, cells, n, start, commit, e)
                                   : s->ops->rollback(s, cells, n, start, e);
  free(cells);
  return st;
}

static pc_status_t op_check_txn(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                                pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  pc_cell_t c;
  if (pc_wire_get_cell(r, a, &c)) return malformed("check_txn", e);
  uint64_t start = pc_rd_u64(r), now = pc_rd_u64(r);
  int dead = pc_rd_u8(r) != 0;
  if (!r->ok || r->pos != r->len) return malformed("check_txn", e);
  if ((st = check_row(t, &c, e)) != PC_OK) return st;
  pc_txn_state_t state = PC_TXN_ALIVE;
  uint64_t commit_ts = 0;
  st = s->ops->check_txn(s, &c, start, now, dead, &state, &commit_ts, e);
  if (st == PC_OK && (pc_buf_u8(payload, (uint8_t)state) || pc_buf_u64(payload, commit_ts)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  return st;
}

static pc_status_t op_scan(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                           pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  const char *table, *start, *col, *end;
  size_t tl, sl, cl, el;
  if (pc_wire_get_opt(r, a, &table, &tl) || !table || pc_wire_get_opt(r, a, &start, &sl) ||
      !start || pc_wire_get_opt(r, a, &col, &cl) || pc_wire_get_opt(r, a, &end, &el))
    return malformed("scan", e);
  uint64_t ts = pc_rd_u64(r);
  uint32_t limit = pc_rd_u32(r);
  if (!r->ok || r->pos != r->len || limit == 0 || limit > PC_STORE_SCAN_LIMIT_MAX ||
      tl == 0 || tl > PC_MAX_TABLE || memchr(table, '\0', tl))
    return malformed("scan", e);
  /* the range must lie inside the tablet */
  if (pc_bytes_cmp(start, sl, t->start, t->start_len) < 0 ||
      (t->end_len && (!end || pc_bytes_cmp(end, el, t->end, t->end_len) > 0)))
    return pc_error_set(e, PC_INVALID, "tablet %s: scan range outside its rows (misrouted)",
                        t->name);
  if ((st = check_snapshot(t, ts, e)) != PC_OK) return st;
  pc_buf_t cells = {0};
  scan_out_t o = {&cells, 0, 0, 0, t->scan_reply_max};
  pc_lock_info_t lock = {0};
  st = s->ops->scan(s, table, start, sl, col, cl, end, el, ts, limit, scan_cell, &o, &lock, e);
  if (o.oom) st = pc_error_set(e, PC_NOMEM, "out of memory");
  if (o.over)
    st = pc_error_set(e, PC_INVALID, "scan of tablet %s: a reply of %u cells exceeds %zu "
                      "bytes: ask for fewer", t->name, limit, t->scan_reply_max);
  if (st != PC_NOMEM) {
    pc_status_t again = check_snapshot(t, ts, e);
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

static pc_status_t op_raw_scan(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                               pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  const char *table, *start, *end;
  size_t tl, sl, el;
  if (pc_wire_get_opt(r, a, &table, &tl) || pc_wire_get_opt(r, a, &start, &sl) ||
      pc_wire_get_opt(r, a, &end, &el) || r->pos != r->len ||
      (table && (tl == 0 || tl > PC_MAX_TABLE || memchr(table, '\0', tl))))
    return malformed("raw scan", e);
  pc_buf_t cells = {0};
  scan_out_t o = {&cells, 0, 0, 0, t->raw_reply_max};
  st = s->ops->raw_scan(s, table, start, sl, end, el, raw_cell, &o, e);
  if (o.oom)
    st = pc_error_set(e, PC_INVALID, "raw scan of tablet %s exceeds %zu bytes: narrow the "
                      "range", t->name, t->raw_reply_max);
  if (st == PC_OK && (pc_buf_u32(payload, o.n) || pc_buf_append(payload, cells.p, cells.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  pc_buf_free(&cells);
  return st;
}

static pc_status_t op_heartbeat(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                                pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  pc_cell_t c;
  if (pc_wire_get_cell(r, a, &c)) return malformed("heartbeat", e);
  uint64_t start = pc_rd_u64(r);
  uint32_t ttl = pc_rd_u32(r);
  if (!r->ok || r->pos != r->len) return malformed("heartbeat", e);
  if ((st = check_row(t, &c, e)) != PC_OK) return st;
  if ((st = bound_lease(t, start, &ttl, e)) != PC_OK) return st;
  return s->ops->heartbeat(s, &c, start, ttl, e);
}

static pc_status_t op_scan_locks(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                                 pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  uint64_t below = pc_rd_u64(r);
  if (!r->ok || r->pos != r->len) return malformed("scan locks", e);
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

static pc_status_t op_gc(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                         pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  uint64_t safe = pc_rd_u64(r);
  uint32_t rate = pc_rd_u32(r);
  if (!r->ok || r->pos != r->len) return malformed("gc", e);
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
  st = s->ops->gc(s, safe, rate, &g, e);
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

static pc_status_t op_scan_notify(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                                  pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  uint32_t lo = pc_rd_u32(r), hi = pc_rd_u32(r);
  uint8_t has_after = pc_rd_u8(r);
  pc_notification_t after;
  if (!r->ok || has_after > 1 || (has_after && pc_wire_get_notification(r, a, &after)))
    return malformed("scan notify", e);
  uint32_t limit = pc_rd_u32(r);
  if (!r->ok || r->pos != r->len || lo >= hi || hi > PC_NOTIFY_BUCKETS || limit == 0 ||
      limit > PC_STORE_SCAN_LIMIT_MAX)
    return malformed("scan notify", e);
  pc_buf_t notes = {0};
  notes_out_t o = {&notes, 0, 0, 0};
  st = s->ops->scan_notify(s, lo, hi, has_after ? &after : NULL, limit, note_out, &o, e);
  if (o.oom) st = pc_error_set(e, PC_NOMEM, "out of memory");
  if (st == PC_OK && (pc_buf_u8(payload, (uint8_t)o.more) || pc_buf_u32(payload, o.n) ||
                      pc_buf_append(payload, notes.p, notes.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  pc_buf_free(&notes);
  return st;
}

static pc_status_t op_clear_notify(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                                   pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  pc_notify_clear_t clear = {0};
  if (pc_wire_get_cell(r, a, &clear.cell)) return malformed("clear notify", e);
  clear.below = pc_rd_u64(r);
  clear.observers = pc_rd_str(r, &clear.olen);
  if (!r->ok || r->pos != r->len || !observers_ok(clear.observers, clear.olen))
    return malformed("clear notify", e);
  if ((st = check_row(t, &clear.cell, e)) != PC_OK) return st;
  st = s->ops->clear_notify(s, &clear, e);
  if (st == PC_OK && (pc_buf_u8(payload, (uint8_t)clear.done) ||
                      pc_buf_str(payload, clear.missing, strlen(clear.missing))))
    st = pc_error_set(e, PC_NOMEM, "oom");
  return st;
}

static pc_status_t op_observer(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                               pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  uint8_t add = pc_rd_u8(r);
  size_t nl, rl = 0;
  const char *name = pc_rd_str(r, &nl), *rec = add ? pc_rd_str(r, &rl) : NULL;
  pc_obs_record_t d;
  char nm[65];
  if (!r->ok || r->pos != r->len || add > 1 || !pc_obs_name_ok(name, nl) ||
      (add && pc_obs_record_decode(rec, rl, &d) != 0))
    return malformed("observer", e);
  /* the set decides which commits write notifications: adding to it
   * floods a column with notifications no worker clears, removing from
   * it makes a registered observer miss changes */
  if ((st = need_system(t, add ? "adding an observer to the tablet's set"
                               : "removing an observer from the tablet's set",
                        e)) != PC_OK)
    return st;
  memcpy(nm, name, nl);
  nm[nl] = '\0';
  pc_store_observer_t o = {nm, add ? d.table : NULL, add ? d.col : NULL, add ? d.clen : 0,
                           add ? d.kind : 0};
  return s->ops->observer_update(s, &o, add, e);
}

static pc_status_t op_observers(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                                pc_buf_t *payload, pc_error_t *e) {
  pc_store_t *s = t->store;
  pc_status_t st;
  if (r->pos != r->len) return malformed("observers", e);
  pc_buf_t list = {0};
  obs_out_t o = {&list, 0, 0};
  st = s->ops->observer_list(s, observer_out, &o, e);
  if (o.oom) st = pc_error_set(e, PC_NOMEM, "out of memory");
  if (st == PC_OK && (pc_buf_u32(payload, o.n) || pc_buf_append(payload, list.p, list.len)))
    st = pc_error_set(e, PC_NOMEM, "oom");
  pc_buf_free(&list);
  return st;
}

static pc_status_t op_info(pc_tablet_t *t, uint8_t op, pc_rd_t *r, pc_arena_t *a,
                           pc_buf_t *payload, pc_error_t *e) {
  if (r->pos != r->len) return malformed("info", e);
  if (pc_buf_str(payload, t->name, strlen(t->name)) || pc_buf_u32(payload, 1) ||
      pc_buf_str(payload, t->start, t->start_len) || pc_buf_str(payload, t->end, t->end_len) ||
      pc_buf_u64(payload, pc_tablet_ops(t)))
    return pc_error_set(e, PC_NOMEM, "oom");
  {
    pc_tablet_gc_t g;
    pc_tablet_gc_stats(t, &g);
    if (pc_buf_u64(payload, g.safe_point) || pc_buf_u64(payload, g.passes) ||
        pc_buf_u64(payload, g.deleted.versions) || pc_buf_u64(payload, g.deleted.rollbacks) ||
        pc_buf_u64(payload, g.deleted.data))
      return pc_error_set(e, PC_NOMEM, "oom");
  }
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
    [PC_TABLET_OP_OBSERVER] = op_observer,
    [PC_TABLET_OP_OBSERVERS] = op_observers,
    [PC_TABLET_OP_INFO] = op_info,
};

pc_status_t pc_tablet_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                  pc_buf_t *reply, pc_error_t *err) {
  pc_tablet_t *t = ctx;
  if (!ops[op]) return pc_error_set(err, PC_INVALID, "unknown opcode 0x%02x", op);
  atomic_fetch_add(&t->ops, 1);
  pc_rd_t r = {body, len, 0, 1};
  pc_arena_t a = {0};
  pc_buf_t payload = {0};
  pc_error_t e;
  pc_error_clear(&e);
  pc_status_t st = ops[op](t, op, &r, &a, &payload, &e);
  if (st != PC_OK && st != PC_LOCKED && !(st == PC_NOT_FOUND && op == PC_TABLET_OP_GET_FRESH))
    payload.len = 0;
  if (st == PC_LOCKED && e.text[0] == '\0') pc_error_set(&e, PC_LOCKED, "locked");
  pc_status_t out = finish(reply, st, &payload, &e);
  pc_arena_free(&a);
  pc_buf_free(&payload);
  if (out != PC_OK) return pc_error_set(err, PC_NOMEM, "tablet %s: out of memory", t->name);
  return PC_OK;
}
