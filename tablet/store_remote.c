/* store_remote.c — the store.h operations carried to tablet servers: each
 * operation is routed by row to the tablet whose range holds it (binary
 * search over the sorted ranges) and sent over rpc.h; scans walk the tablets
 * of their range in order, and notification scans every tablet. A request naming cells of several tablets is
 * refused, because each request must stay atomic: the transaction client
 * sends one row (so one tablet) per request. */
#include <stdlib.h>
#include <string.h>

#include "core/deadline.h"
#include "core/error.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"

typedef struct rtablet {
  char *name;
  char *host;
  uint16_t port;
  char *start, *end;
  size_t start_len, end_len;
  pc_rpc_client_t *rpc;
} rtablet_t;

typedef struct remote {
  pc_store_t base;
  rtablet_t *t;
  size_t n;
  uint32_t timeout_ms;
} remote_t;

/* The tablet whose range holds row: the last one starting at or before it. */
static size_t route(const remote_t *s, const char *row, size_t rlen) {
  size_t lo = 0, hi = s->n;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (pc_bytes_cmp(s->t[mid].start, s->t[mid].start_len, row, rlen) <= 0) lo = mid;
    else hi = mid;
  }
  return lo;
}

static pc_status_t nomem(pc_error_t *err) { return pc_error_set(err, PC_NOMEM, "out of memory"); }

/* A failed call's status, as the remote store reports it. The rpc layer
 * fails a call with its own statuses (unreachable, timed out, a request
 * refused, out of memory, an internal error), while a tablet puts the
 * store's verdicts (not found, locked, aborted, ...) inside its reply body.
 * A verdict that comes as the call's status is from a peer that is not a
 * tablet, or a broken one; believed, it would be a PC_LOCKED without its
 * lock or a PC_NOT_FOUND without a snapshot. It is a protocol error, and as
 * with the rpc layer's own protocol errors the call's outcome is unknown:
 * PC_UNAVAILABLE. */
static pc_status_t rpc_failure(const remote_t *s, size_t i, pc_status_t st, pc_error_t *err) {
  switch (st) {
    case PC_TIMEOUT:
    case PC_INVALID:
    case PC_BUSY:
    case PC_UNAVAILABLE:
    case PC_NOMEM:
    case PC_INTERNAL:
      pc_error_prefix(err, "tablet %s", s->t[i].name);
      return st;
    default:
      return pc_error_set(err, PC_UNAVAILABLE,
                          "tablet %s: protocol error: a call failed with status %s, which a "
                          "tablet sends only inside a reply",
                          s->t[i].name, pc_status_name(st));
  }
}

/* The store status that starts a reply. A byte that is not a pc_status_t
 * makes the reply malformed (r->ok = 0): passed on, callers would meet a
 * status outside the one set percolator.h documents. */
static pc_status_t reply_status(const remote_t *s, size_t i, pc_rd_t *r, pc_error_t *err) {
  uint8_t status = pc_rd_u8(r);
  if (!r->ok) return pc_error_set(err, PC_CORRUPTION, "tablet %s: empty reply", s->t[i].name);
  if (status > PC_UNKNOWN) {
    r->ok = 0;
    return pc_error_set(err, PC_CORRUPTION, "tablet %s: reply with unknown status %u",
                        s->t[i].name, status);
  }
  return (pc_status_t)status;
}

/* Sends body to tablet i. On transport success, *r reads the reply after its
 * status byte, *status is the store status and err holds its message. */
static pc_status_t call(remote_t *s, size_t i, uint8_t op, const pc_buf_t *body, pc_buf_t *reply,
                        pc_rd_t *r, pc_error_t *err) {
  reply->len = 0;
  pc_status_t st =
      pc_rpc_call(s->t[i].rpc, op, body->p, body->len, pc_deadline_bound(s->timeout_ms), reply, err);
  if (st != PC_OK) {
    reply->len = 0;
    return rpc_failure(s, i, st, err);
  }
  *r = (pc_rd_t){reply->p, reply->len, 0, 1};
  return reply_status(s, i, r, err);
}

/* Reads the trailing message of a reply into err (for non-OK statuses). */
static pc_status_t take_message(remote_t *s, size_t i, pc_rd_t *r, pc_status_t status,
                                pc_error_t *err) {
  size_t n;
  const char *msg = pc_rd_str(r, &n);
  if (!r->ok || r->pos != r->len)
    return pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed reply", s->t[i].name);
  if (status != PC_OK)
    pc_error_set(err, status, "%.*s", (int)(n > 200 ? 200 : n), msg);
  return status;
}

static pc_status_t one_tablet(remote_t *s, const pc_cell_t *cells, size_t stride, size_t n,
                              size_t *which, pc_error_t *err) {
  *which = route(s, cells->row, cells->rlen);
  for (size_t i = 1; i < n; i++) {
    const pc_cell_t *c = (const pc_cell_t *)((const char *)cells + i * stride);
    if (route(s, c->row, c->rlen) != *which)
      return pc_error_set(err, PC_INVALID, "one request names rows of tablets %s and %s",
                          s->t[*which].name, s->t[route(s, c->row, c->rlen)].name);
  }
  return PC_OK;
}

/* GET (fresh == NULL: at read_ts) or GET_FRESH (*fresh receives the
 * tablet's read_ts). */
static pc_status_t get_op(remote_t *s, const pc_cell_t *c, uint64_t read_ts, uint64_t *fresh,
                          char **value, size_t *vlen, pc_lock_info_t *lock, pc_error_t *err) {
  *value = NULL;
  *vlen = 0;
  if (fresh) *fresh = 0;
  size_t i = route(s, c->row, c->rlen);
  pc_buf_t body = {0}, reply = {0};
  pc_rd_t r = {NULL, 0, 0, 1};
  pc_status_t st = PC_OK;
  int oom = 0; /* here, not the tablet's PC_NOMEM, whose message the reply carries */
  int got_lock = 0;
  if (pc_wire_put_cell(&body, c) || (!fresh && pc_buf_u64(&body, read_ts))) st = nomem(err);
  if (st == PC_OK)
    st = call(s, i, fresh ? PC_TABLET_OP_GET_FRESH : PC_TABLET_OP_GET, &body, &reply, &r, err);
  if (fresh && (st == PC_OK || st == PC_NOT_FOUND || st == PC_LOCKED) && reply.len) {
    *fresh = pc_rd_u64(&r);
    if (*fresh == 0) r.ok = 0;
  }
  if (r.ok && st == PC_OK) { /* (a malformed reply is reported below) */
    size_t n;
    const char *v = pc_rd_str(&r, &n);
    if (r.ok && !(*value = malloc(n ? n : 1))) {
      st = nomem(err);
      oom = 1;
    } else if (r.ok) {
      memcpy(*value, v, n);
      *vlen = n;
    }
  } else if (r.ok && st == PC_LOCKED) {
    if (pc_wire_get_lock(&r, lock)) r.ok = 0;
    else got_lock = 1;
  }
  if (reply.len && r.ok && !oom) st = take_message(s, i, &r, st, err);
  else if (reply.len && !r.ok) st = pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed get reply", s->t[i].name);
  if (got_lock && st != PC_LOCKED) pc_lock_info_free(lock); /* the message after it was bad */
  if (st != PC_OK) {
    free(*value);
    *value = NULL;
    *vlen = 0;
  }
  if (fresh && st != PC_OK && st != PC_NOT_FOUND && st != PC_LOCKED) *fresh = 0;
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_get(pc_store_t *base, const pc_cell_t *c, uint64_t read_ts, char **value,
                         size_t *vlen, pc_lock_info_t *lock, pc_error_t *err) {
  return get_op((remote_t *)base, c, read_ts, NULL, value, vlen, lock, err);
}

/* ts_source is not used: the tablet takes the timestamp from its oracle. */
static pc_status_t r_get_fresh(pc_store_t *base, const pc_cell_t *c, pc_ts_source_fn ts_source,
                               void *ts_ctx, uint64_t *read_ts, char **value, size_t *vlen,
                               pc_lock_info_t *lock, pc_error_t *err) {
  (void)ts_source;
  (void)ts_ctx;
  return get_op((remote_t *)base, c, 0, read_ts, value, vlen, lock, err);
}

static pc_status_t r_mutations(remote_t *s, uint8_t op, const pc_mutation_t *muts, size_t n,
                               const pc_lock_spec_t *spec, uint64_t start_ts,
                               pc_notify_clear_t *clear, uint64_t *commit_ts,
                               pc_lock_info_t *lock, pc_error_t *err) {
  if (n == 0) return PC_OK;
  size_t i;
  pc_status_t st = one_tablet(s, &muts[0].cell, sizeof *muts, n, &i, err);
  if (st != PC_OK) return st;
  pc_buf_t body = {0}, reply = {0};
  int bad = 0;
  if (op == PC_TABLET_OP_PREWRITE)
    bad = pc_wire_put_cell(&body, &spec->primary) || pc_buf_u64(&body, spec->start_ts) ||
          pc_buf_u32(&body, spec->ttl_ms) || pc_buf_u64(&body, spec->session);
  else
    bad = pc_buf_u64(&body, start_ts);
  bad = bad || pc_buf_u32(&body, (uint32_t)n);
  for (size_t k = 0; k < n && !bad; k++) bad = pc_wire_put_mutation(&body, &muts[k]);
  if (clear && !bad) bad = pc_wire_put_cell(&body, &clear->cell) || pc_buf_u64(&body, clear->below);
  pc_rd_t r = {0};
  st = bad ? nomem(err) : call(s, i, op, &body, &reply, &r, err);
  if (reply.len) {
    if (st == PC_OK && op != PC_TABLET_OP_PREWRITE) *commit_ts = pc_rd_u64(&r);
    int got_lock = 0;
    if (st == PC_LOCKED) {
      if (pc_wire_get_lock(&r, lock)) r.ok = 0;
      else got_lock = 1;
    }
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed reply", s->t[i].name);
    if (got_lock && st != PC_LOCKED) pc_lock_info_free(lock); /* the message after it was bad */
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_prewrite(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                              const pc_lock_spec_t *spec, pc_lock_info_t *lock, pc_error_t *err) {
  return r_mutations((remote_t *)base, PC_TABLET_OP_PREWRITE, muts, n, spec, 0, NULL, NULL, lock,
                     err);
}

static pc_status_t r_one_phase(pc_store_t *base, const pc_mutation_t *muts, size_t n,
                               uint64_t start_ts, pc_ts_source_fn ts_source, void *ts_ctx,
                               pc_notify_clear_t *clear, uint64_t *commit_ts,
                               pc_lock_info_t *lock, pc_error_t *err) {
  (void)ts_source; /* the tablet asks the oracle itself, while it holds the row latch */
  (void)ts_ctx;
  return r_mutations((remote_t *)base, PC_TABLET_OP_ONE_PHASE, muts, n, NULL, start_ts, clear,
                     commit_ts, lock, err);
}

static pc_status_t r_cells(remote_t *s, uint8_t op, const pc_cell_t *cells, size_t n,
                           uint64_t start_ts, uint64_t commit_ts, pc_error_t *err) {
  if (n == 0) return PC_OK;
  size_t i;
  pc_status_t st = one_tablet(s, cells, sizeof *cells, n, &i, err);
  if (st != PC_OK) return st;
  pc_buf_t body = {0}, reply = {0};
  int bad = pc_buf_u64(&body, start_ts) ||
            (op == PC_TABLET_OP_COMMIT && pc_buf_u64(&body, commit_ts)) ||
            pc_buf_u32(&body, (uint32_t)n);
  for (size_t k = 0; k < n && !bad; k++) bad = pc_wire_put_cell(&body, &cells[k]);
  pc_rd_t r = {0};
  st = bad ? nomem(err) : call(s, i, op, &body, &reply, &r, err);
  if (reply.len) st = take_message(s, i, &r, st, err);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_commit(pc_store_t *base, const pc_cell_t *cells, size_t n, uint64_t start_ts,
                            uint64_t commit_ts, pc_error_t *err) {
  return r_cells((remote_t *)base, PC_TABLET_OP_COMMIT, cells, n, start_ts, commit_ts, err);
}

static pc_status_t r_rollback(pc_store_t *base, const pc_cell_t *cells, size_t n,
                              uint64_t start_ts, pc_error_t *err) {
  return r_cells((remote_t *)base, PC_TABLET_OP_ROLLBACK, cells, n, start_ts, 0, err);
}

static pc_status_t r_check_txn(pc_store_t *base, const pc_cell_t *primary, uint64_t start_ts,
                               uint64_t now_ts, int owner_dead, pc_txn_state_t *state,
                               uint64_t *commit_ts, pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  size_t i = route(s, primary->row, primary->rlen);
  pc_buf_t body = {0}, reply = {0};
  pc_rd_t r = {0};
  pc_status_t st = PC_OK;
  if (pc_wire_put_cell(&body, primary) || pc_buf_u64(&body, start_ts) ||
      pc_buf_u64(&body, now_ts) || pc_buf_u8(&body, (uint8_t)(owner_dead != 0)))
    st = nomem(err);
  if (st == PC_OK) st = call(s, i, PC_TABLET_OP_CHECK_TXN, &body, &reply, &r, err);
  if (reply.len) {
    if (st == PC_OK) {
      uint8_t stt = pc_rd_u8(&r);
      *commit_ts = pc_rd_u64(&r);
      if (stt > PC_TXN_ROLLED_BACK) r.ok = 0;
      *state = (pc_txn_state_t)stt;
    }
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed reply", s->t[i].name);
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_heartbeat(pc_store_t *base, const pc_cell_t *primary, uint64_t start_ts,
                               uint32_t ttl_ms, pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  size_t i = route(s, primary->row, primary->rlen);
  pc_buf_t body = {0}, reply = {0};
  pc_rd_t r = {0};
  pc_status_t st = PC_OK;
  if (pc_wire_put_cell(&body, primary) || pc_buf_u64(&body, start_ts) ||
      pc_buf_u32(&body, ttl_ms))
    st = nomem(err);
  if (st == PC_OK) st = call(s, i, PC_TABLET_OP_HEARTBEAT, &body, &reply, &r, err);
  if (reply.len) st = take_message(s, i, &r, st, err);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

/* Every tablet's old locks; a tablet with more than one reply holds makes
 * this PC_BUSY after the locks it sent (settling them lets the next call
 * see the rest). */
static pc_status_t r_scan_locks(pc_store_t *base, uint64_t below, pc_store_lock_fn fn, void *ctx,
                                pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = PC_OK;
  int stop = 0, truncated = 0;
  for (size_t i = 0; i < s->n && st == PC_OK && !stop; i++) {
    body.len = 0;
    if (pc_buf_u64(&body, below)) {
      st = nomem(err);
      break;
    }
    pc_rd_t r = {0};
    st = call(s, i, PC_TABLET_OP_SCAN_LOCKS, &body, &reply, &r, err);
    if (!reply.len) break;
    if (st == PC_OK) {
      truncated |= pc_rd_u8(&r) != 0;
      uint32_t n = pc_rd_u32(&r);
      for (uint32_t k = 0; k < n && r.ok && !stop; k++) {
        pc_lock_info_t lock;
        if (pc_wire_get_lock(&r, &lock)) {
          r.ok = 0;
          break;
        }
        stop = fn(ctx, &lock);
        pc_lock_info_free(&lock);
      }
      if (stop) break;
    }
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed lock scan reply",
                             s->t[i].name);
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  if (st == PC_OK && truncated)
    st = pc_error_set(err, PC_BUSY, "a tablet holds more old locks than one reply carries");
  return st;
}

#define GC_CALL_MS (30u * 60u * 1000u)

/* A pass on every tablet, one after the other. */
static pc_status_t r_gc(pc_store_t *base, uint64_t safe_point, uint32_t rate,
                        pc_store_gc_stats_t *stats, pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = PC_OK;
  memset(stats, 0, sizeof *stats);
  if (pc_buf_u64(&body, safe_point) || pc_buf_u32(&body, rate)) st = nomem(err);
  for (size_t i = 0; i < s->n && st == PC_OK; i++) {
    pc_rd_t r = {0};
    /* a rate-bounded pass over a large tablet takes long */
    reply.len = 0;
    st = pc_rpc_call(s->t[i].rpc, PC_TABLET_OP_GC, body.p, body.len, pc_deadline_bound(GC_CALL_MS),
                     &reply, err);
    if (st != PC_OK) {
      st = rpc_failure(s, i, st, err);
      break;
    }
    r = (pc_rd_t){reply.p, reply.len, 0, 1};
    st = reply_status(s, i, &r, err);
    if (st == PC_CORRUPTION && !r.ok) break;
    if (st == PC_OK) {
      stats->cells += pc_rd_u64(&r);
      stats->versions += pc_rd_u64(&r);
      stats->rollbacks += pc_rd_u64(&r);
      stats->data += pc_rd_u64(&r);
    }
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed gc reply", s->t[i].name);
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_scan(pc_store_t *base, const char *table, const char *start, size_t slen,
                          const char *start_col, size_t sclen, const char *end, size_t elen,
                          uint64_t read_ts, size_t limit, pc_store_cell_fn fn, void *ctx,
                          pc_lock_info_t *lock, pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = PC_OK;
  size_t delivered = 0;
  int stop = 0;
  if (limit > PC_STORE_SCAN_LIMIT_MAX)
    return pc_error_set(err, PC_INVALID, "scan limit %zu exceeds %u", limit,
                        PC_STORE_SCAN_LIMIT_MAX);
  for (size_t i = route(s, start, slen); i < s->n && st == PC_OK && !stop && delivered < limit;
       i++) {
    rtablet_t *t = &s->t[i];
    if (end && pc_bytes_cmp(t->start, t->start_len, end, elen) >= 0) break;
    /* clip [start, end) to this tablet */
    int first = pc_bytes_cmp(start, slen, t->start, t->start_len) >= 0;
    const char *lo = first ? start : t->start;
    size_t lol = first ? slen : t->start_len;
    const char *hi = end;
    size_t hil = elen;
    if (t->end_len && (!end || pc_bytes_cmp(t->end, t->end_len, end, elen) < 0)) {
      hi = t->end;
      hil = t->end_len;
    }
    size_t want = limit - delivered;
    body.len = 0;
    if (pc_wire_put_opt(&body, table, strlen(table)) || pc_wire_put_opt(&body, lo, lol) ||
        pc_wire_put_opt(&body, first ? start_col : NULL, first ? sclen : 0) ||
        pc_wire_put_opt(&body, hi, hil) || pc_buf_u64(&body, read_ts) ||
        pc_buf_u32(&body, (uint32_t)want)) {
      st = nomem(err);
      break;
    }
    pc_rd_t r = {0};
    int got_lock = 0;
    st = call(s, i, PC_TABLET_OP_SCAN, &body, &reply, &r, err);
    if (!reply.len) break;
    if (st == PC_OK || st == PC_LOCKED) {
      uint32_t n = pc_rd_u32(&r);
      if (n > want) r.ok = 0; /* more than asked for: the caller's limit holds */
      pc_cell_t c = {table, NULL, 0, NULL, 0};
      for (uint32_t k = 0; k < n && r.ok && !stop; k++) {
        size_t vl;
        c.row = pc_rd_str(&r, &c.rlen);
        c.col = pc_rd_str(&r, &c.clen);
        const char *v = pc_rd_str(&r, &vl);
        if (r.ok) {
          delivered++;
          stop = fn(ctx, &c, v, vl);
        }
      }
      if (stop) { /* the caller stopped: the rest of the reply is not read, nor a lock that */
        st = PC_OK; /* follows the cells (PC_LOCKED would promise it in *lock) */
        break;
      }
      if (st == PC_LOCKED) {
        if (pc_wire_get_lock(&r, lock)) r.ok = 0;
        else got_lock = 1;
      }
    }
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed scan reply", t->name);
    if (got_lock && st != PC_LOCKED) pc_lock_info_free(lock); /* the message after it was bad */
    /* a tablet that filled the page may hold more: the loop ends (delivered == limit)
     * and the caller resumes after the last cell; otherwise go on to the next tablet */
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_raw_scan(pc_store_t *base, const char *table, const char *start, size_t slen,
                              const char *end, size_t elen, pc_raw_cell_fn fn, void *ctx,
                              pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = PC_OK;
  int stop = 0;
  for (size_t i = start ? route(s, start, slen) : 0; i < s->n && st == PC_OK && !stop; i++) {
    rtablet_t *t = &s->t[i];
    if (end && pc_bytes_cmp(t->start, t->start_len, end, elen) >= 0) break;
    body.len = 0;
    if (pc_wire_put_opt(&body, table, table ? strlen(table) : 0) ||
        pc_wire_put_opt(&body, start, slen) || pc_wire_put_opt(&body, end, elen)) {
      st = nomem(err);
      break;
    }
    pc_rd_t r = {0};
    st = call(s, i, PC_TABLET_OP_RAW_SCAN, &body, &reply, &r, err);
    if (!reply.len) break;
    if (st == PC_OK) {
      uint32_t n = pc_rd_u32(&r);
      pc_arena_t a = {0};
      for (uint32_t k = 0; k < n && r.ok && !stop; k++) {
        pc_raw_cell_t c;
        if (pc_wire_get_raw(&r, &a, &c)) r.ok = 0;
        else stop = fn(ctx, &c);
      }
      pc_arena_free(&a);
      if (stop) break;
    }
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed raw reply", t->name);
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

/* Asks every tablet in turn, from the one holding after's row (each holds
 * the notifications of its own rows), going on within a tablet while its
 * replies say there is more. */
static pc_status_t r_scan_notify(pc_store_t *base, uint32_t lo, uint32_t hi,
                                 const pc_notification_t *after, size_t limit,
                                 pc_store_notify_fn fn, void *ctx, pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  if (lo >= hi || hi > PC_NOTIFY_BUCKETS)
    return pc_error_set(err, PC_INVALID, "scan_notify: bucket range [%u, %u) is not within [0, %u)",
                        lo, hi, PC_NOTIFY_BUCKETS);
  if (limit == 0 || limit > PC_STORE_SCAN_LIMIT_MAX)
    return pc_error_set(err, PC_INVALID, "scan_notify: limit %zu is not within 1..%u", limit,
                        PC_STORE_SCAN_LIMIT_MAX);
  pc_buf_t body = {0}, reply = {0};
  pc_arena_t a = {0}; /* the strings of the last reply's notifications */
  pc_notification_t last;
  pc_status_t st = PC_OK;
  size_t delivered = 0;
  int stop = 0;
  size_t first = after ? route(s, after->cell.row, after->cell.rlen) : 0;
  for (size_t i = first; i < s->n && st == PC_OK && !stop && delivered < limit; i++) {
    const pc_notification_t *from = i == first ? after : NULL;
    for (;;) {
      body.len = 0;
      if (pc_buf_u32(&body, lo) || pc_buf_u32(&body, hi) || pc_buf_u8(&body, from != NULL) ||
          (from && pc_wire_put_notification(&body, from)) ||
          pc_buf_u32(&body, (uint32_t)(limit - delivered))) {
        st = nomem(err);
        break;
      }
      pc_arena_free(&a); /* from (encoded above) may point into it */
      pc_rd_t r = {0};
      st = call(s, i, PC_TABLET_OP_SCAN_NOTIFY, &body, &reply, &r, err);
      if (!reply.len) break;
      int more = 0;
      uint32_t n = 0;
      if (st == PC_OK) {
        more = pc_rd_u8(&r) != 0;
        n = pc_rd_u32(&r);
        if (n > limit - delivered || (more && n == 0)) r.ok = 0;
        for (uint32_t k = 0; k < n && r.ok && !stop; k++) {
          if (pc_wire_get_notification(&r, &a, &last)) {
            r.ok = 0;
            break;
          }
          delivered++;
          stop = fn(ctx, &last);
        }
        if (stop) break; /* the caller stopped: the rest of the reply is not read */
      }
      st = r.ok ? take_message(s, i, &r, st, err)
                : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed notification scan reply",
                               s->t[i].name);
      if (st != PC_OK || !more || delivered >= limit) break;
      from = &last; /* this tablet has more: go on after the last one */
    }
  }
  pc_arena_free(&a);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_clear_notify(pc_store_t *base, const pc_cell_t *cell, uint64_t below,
                                  pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  size_t i = route(s, cell->row, cell->rlen);
  pc_buf_t body = {0}, reply = {0};
  pc_rd_t r = {0};
  pc_status_t st = PC_OK;
  if (pc_wire_put_cell(&body, cell) || pc_buf_u64(&body, below)) st = nomem(err);
  if (st == PC_OK) st = call(s, i, PC_TABLET_OP_CLEAR_NOTIFY, &body, &reply, &r, err);
  if (reply.len) st = take_message(s, i, &r, st, err);
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static size_t r_shard_of(pc_store_t *base, const pc_cell_t *cell) {
  return route((remote_t *)base, cell->row, cell->rlen);
}

static void r_close(pc_store_t *base) {
  remote_t *s = (remote_t *)base;
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) {
    if (s->t[i].rpc) pc_rpc_client_destroy(s->t[i].rpc);
    free(s->t[i].name);
    free(s->t[i].host);
    free(s->t[i].start);
    free(s->t[i].end);
  }
  free(s->t);
  free(s);
}

static const pc_store_ops_t remote_ops = {
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
    .shard_of = r_shard_of,
    .close = r_close,
};

static char *dup_n(const char *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    if (n) memcpy(d, p, n);
    d[n] = '\0';
  }
  return d;
}

pc_store_t *pc_remote_store_open(const pc_tablet_addr_t *tablets, size_t n, const char *secret,
                                 uint32_t timeout_ms, pc_error_t *err) {
  if (n == 0) {
    pc_error_set(err, PC_INVALID, "no tablets configured");
    return NULL;
  }
  if (tablets[0].range.start_len != 0 || tablets[n - 1].range.end_len != 0) {
    pc_error_set(err, PC_INVALID, "tablet ranges must start at the first row and end after the last");
    return NULL;
  }
  for (size_t i = 1; i < n; i++)
    if (pc_bytes_cmp(tablets[i - 1].range.end, tablets[i - 1].range.end_len, tablets[i].range.start,
                  tablets[i].range.start_len) != 0) {
      pc_error_set(err, PC_INVALID, "tablets %s and %s: ranges leave a gap or overlap",
                   tablets[i - 1].name, tablets[i].name);
      return NULL;
    }
  remote_t *s = calloc(1, sizeof *s);
  if (!s || !(s->t = calloc(n, sizeof *s->t))) {
    free(s);
    nomem(err);
    return NULL;
  }
  s->base.ops = &remote_ops;
  s->n = n;
  s->timeout_ms = timeout_ms ? timeout_ms : 10000;
  for (size_t i = 0; i < n; i++) {
    rtablet_t *t = &s->t[i];
    const pc_tablet_addr_t *a = &tablets[i];
    t->name = strdup(a->name);
    t->host = strdup(a->host);
    t->port = a->port;
    t->start = dup_n(a->range.start, a->range.start_len);
    t->start_len = a->range.start_len;
    t->end = dup_n(a->range.end, a->range.end_len);
    t->end_len = a->range.end_len;
    if (!t->name || !t->host || !t->start || !t->end) {
      nomem(err);
      r_close(&s->base);
      return NULL;
    }
    t->rpc = pc_rpc_client_create(a->host, a->port, secret, err);
    if (!t->rpc) {
      r_close(&s->base);
      return NULL;
    }
  }
  return &s->base;
}

pc_status_t pc_tablet_remote_info(struct pc_rpc_client *rpc, uint32_t timeout_ms, pc_buf_t *name,
                                  uint64_t *ops, pc_tablet_gc_t *gc, pc_error_t *err) {
  pc_buf_t reply = {0};
  pc_status_t st = pc_rpc_call(rpc, PC_TABLET_OP_INFO, NULL, 0, timeout_ms, &reply, err);
  if (st != PC_OK) {
    pc_buf_free(&reply);
    return st;
  }
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  uint8_t status = pc_rd_u8(&r);
  if (status > PC_UNKNOWN) r.ok = 0; /* not a pc_status_t: malformed */
  st = (pc_status_t)status;
  size_t n = 0, mlen;
  const char *p = NULL;
  if (st == PC_OK) {
    p = pc_rd_str(&r, &n);
    uint32_t ranges = pc_rd_u32(&r);
    for (uint32_t k = 0; k < ranges && r.ok; k++) {
      (void)pc_rd_str(&r, &mlen);
      (void)pc_rd_str(&r, &mlen);
    }
    *ops = pc_rd_u64(&r);
    memset(gc, 0, sizeof *gc);
    gc->safe_point = pc_rd_u64(&r);
    gc->passes = pc_rd_u64(&r);
    gc->deleted.versions = pc_rd_u64(&r);
    gc->deleted.rollbacks = pc_rd_u64(&r);
    gc->deleted.data = pc_rd_u64(&r);
  }
  const char *msg = pc_rd_str(&r, &mlen);
  if (!r.ok || r.pos != r.len) st = pc_error_set(err, PC_CORRUPTION, "tablet: malformed info reply");
  else if (st != PC_OK) pc_error_set(err, st, "%.*s", (int)(mlen > 200 ? 200 : mlen), msg);
  else if ((name->len = 0, pc_buf_append(name, p, n))) st = nomem(err);
  pc_buf_free(&reply);
  return st;
}
