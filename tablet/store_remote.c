/* store_remote.c — the store.h operations carried to tablet servers: each
 * operation is routed by row to the tablet whose range holds it (binary
 * search over the sorted ranges) and sent over rpc.h to the server that
 * holds the tablet now; scans walk the tablets of their range in order, and
 * notification scans every tablet. A request naming cells of several
 * tablets is refused, because each request must stay atomic: the
 * transaction client sends one row (so one tablet) per request.
 *
 * Where each tablet is served can change under the calls (a cluster's
 * tablet map in ZooKeeper, followed by db_cluster.c): each tablet holds a
 * counted link to its current server, which a call takes for its duration,
 * or none, and then the call fails at once naming the tablet and its range.
 * A call that could not reach its server, or that the server refused as
 * misrouted, asks the map's owner to look again (pc_remote_store_set_refresh).
 * A server that has died is named by the map until the map's owner learns
 * it (in ZooKeeper, when the server's session expires): its links fail a
 * call at once when the connection is refused (rpc.h's fail_on_refusal)
 * instead of retrying to the call's deadline, so a caller hears within a
 * round trip to the map that the tablet's server is gone. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/deadline.h"
#include "base/error.h"
#include "net/rpc.h"
#include "net/tls.h"
#include "tablet/tablet.h"
#include "tablet/tablet_wire.h"

/* A client of the server holding a tablet, shared by the calls that use it:
 * the last one to let go of a replaced link destroys it. */
typedef struct link {
  pc_rpc_client_t *rpc;
  atomic_int refs;
  char addr[300]; /* host:port */
} link_t;

typedef struct rtablet {
  char *name;
  char *start, *end;
  size_t start_len, end_len;
  char *range_text; /* "[start, end)" for messages */
  pthread_mutex_t mu;
  link_t *link; /* under mu; NULL: no live server holds the tablet */
  uint64_t refresh_ms; /* under mu: when a refresh was last asked */
  int replicated;      /* a Raft group (pc_tablet_addr_t) */
} rtablet_t;

typedef struct remote {
  pc_store_t base;
  rtablet_t *t;
  size_t n;
  uint32_t timeout_ms;
  char *secret, *system_secret; /* the credentials, for links made later */
  pc_tls_t *tls;
  void (*refresh)(void *ctx, size_t tablet);
  void *refresh_ctx;
  uint32_t attempt_ms; /* a replicated tablet's point operation: one attempt (0: the whole call) */
} remote_t;

static void link_put(link_t *l) {
  if (l && atomic_fetch_sub(&l->refs, 1) == 1) {
    pc_rpc_client_destroy(l->rpc);
    free(l);
  }
}

/* Asks the map's owner to look at tablet i again (at most every 100 ms per
 * tablet), after its server could not be reached or refused a request as
 * misrouted, or when it has none. */
static void ask_refresh(remote_t *s, size_t i) {
  if (!s->refresh) return;
  rtablet_t *t = &s->t[i];
  uint64_t now = pc_now_mono_ms();
  pthread_mutex_lock(&t->mu);
  int due = now - t->refresh_ms >= 100 || t->refresh_ms == 0;
  if (due) t->refresh_ms = now;
  pthread_mutex_unlock(&t->mu);
  if (due) s->refresh(s->refresh_ctx, i);
}

static link_t *link_take(rtablet_t *t) {
  pthread_mutex_lock(&t->mu);
  link_t *l = t->link;
  if (l) atomic_fetch_add(&l->refs, 1);
  pthread_mutex_unlock(&t->mu);
  return l;
}

/* Tablet i's link (a reference the caller puts back with link_put), or NULL
 * with err saying that no live server holds it. A tablet without a server
 * is looked up once more first (rate-limited by ask_refresh), since the
 * watched map may lag a server that has just started. */
static link_t *link_get(remote_t *s, size_t i, pc_error_t *err) {
  rtablet_t *t = &s->t[i];
  link_t *l = link_take(t);
  if (!l) {
    ask_refresh(s, i);
    l = link_take(t);
  }
  if (!l)
    pc_error_set(err, PC_UNAVAILABLE, "tablet %s %s has no live server", t->name, t->range_text);
  return l;
}

/* The link's address, to see whether a refresh moved the tablet. */
static int same_link(remote_t *s, size_t i, const link_t *l) {
  pthread_mutex_lock(&s->t[i].mu);
  int same = s->t[i].link == l;
  pthread_mutex_unlock(&s->t[i].mu);
  return same;
}

/* A call to tablet i through l failed with PC_UNAVAILABLE before it was
 * sent, and the map, asked again, still names l's server. When that server
 * refused the connection, err says so, naming the tablet, its rows and the
 * server (1); otherwise it keeps the rpc layer's message (0). */
static int refused(remote_t *s, size_t i, link_t *l, pc_error_t *err) {
  int e = pc_rpc_client_refused(l->rpc);
  if (!e) return 0;
  const rtablet_t *t = &s->t[i];
  /* a map followed in ZooKeeper names a dead server until its session ends */
  const char *why = s->refresh ? "it may have died; its owner node lasts until its ZooKeeper "
                                 "session expires"
                               : "it may have died";
  if (e == ECONNREFUSED)
    pc_error_set(err, PC_UNAVAILABLE, "tablet %s %s: its server %s refuses connections (%s)",
                 t->name, t->range_text, l->addr, why);
  else
    pc_error_set(err, PC_UNAVAILABLE, "tablet %s %s: its server %s cannot be reached: %s (%s)",
                 t->name, t->range_text, l->addr, strerror(e), why);
  return 1;
}

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
    case PC_DENIED:
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
  if (status > PC_STATUS_MAX) {
    r->ok = 0;
    return pc_error_set(err, PC_CORRUPTION, "tablet %s: reply with unknown status %u",
                        s->t[i].name, status);
  }
  return (pc_status_t)status;
}

/* 1 when a reply whose status is PC_INVALID (read by r) is the tablet's
 * refusal of a row it does not serve: the map moved under the caller. */
static int misrouted(const pc_rd_t *r) {
  pc_rd_t peek = *r;
  size_t n;
  const char *msg = pc_rd_str(&peek, &n);
  return peek.ok && n >= 9 && memmem(msg, n, "misrouted", 9) != NULL;
}

/* Sends op with body to tablet i through l, in a ROUTED envelope for a
 * replicated tablet (its server holds several), as pc_rpc_call_sent does. */
static pc_status_t send_op(remote_t *s, size_t i, link_t *l, uint8_t op, const pc_buf_t *body,
                           uint32_t timeout_ms, pc_buf_t *reply, int *sent, pc_error_t *err) {
  if (!s->t[i].replicated)
    return pc_rpc_call_sent(l->rpc, op, body->p, body->len, timeout_ms, reply, sent, err);
  pc_buf_t env = {0};
  uint8_t wop = pc_tablet_wrap(&env, s->t[i].name, op, body->p, body->len);
  pc_status_t st = wop ? pc_rpc_call_sent(l->rpc, wop, env.p, env.len, timeout_ms, reply, sent, err)
                       : nomem(err);
  if (!wop) *sent = 0;
  pc_buf_free(&env);
  return st;
}

static pc_rpc_pending_t *start_op(remote_t *s, size_t i, link_t *l, uint8_t op,
                                  const pc_buf_t *body, uint32_t timeout_ms, pc_error_t *err) {
  if (!s->t[i].replicated) return pc_rpc_start(l->rpc, op, body->p, body->len, timeout_ms, err);
  pc_buf_t env = {0};
  uint8_t wop = pc_tablet_wrap(&env, s->t[i].name, op, body->p, body->len);
  pc_rpc_pending_t *p = wop ? pc_rpc_start(l->rpc, wop, env.p, env.len, timeout_ms, err) : NULL;
  if (!wop) nomem(err);
  pc_buf_free(&env);
  return p;
}

/* A replicated tablet's point operation, sent with all the time left, and
 * watched: while no reply has come, the server is asked every half attempt
 * whether it still answers (PC_RPC_OP_PING, which its I/O thread answers
 * whatever its handlers are doing). A server that does not answer within
 * half an attempt (paused, cut off, its machine gone) has the call given up
 * as a timeout, for call() to send again elsewhere when it may; one that
 * answers is busy (a one-phase commit waiting out an oracle's failover for
 * its timestamp, a write waiting for its entry to commit) and is waited for
 * until the deadline. */
static pc_status_t send_watched(remote_t *s, size_t i, link_t *l, uint8_t op,
                                const pc_buf_t *body, uint32_t timeout_ms, pc_buf_t *reply,
                                int *sent, pc_error_t *err) {
  pc_error_t scratch;
  if (!err) err = &scratch;
  pc_rpc_pending_t *p = start_op(s, i, l, op, body, timeout_ms, err);
  if (!p) {
    *sent = 0;
    return err->code;
  }
  uint32_t half = s->attempt_ms / 2 ? s->attempt_ms / 2 : 1;
  int silent = 0;
  while (!pc_rpc_wait(p, half)) {
    pc_error_t pe;
    if (pc_rpc_call(l->rpc, PC_RPC_OP_PING, NULL, 0, half, NULL, &pe) != PC_OK) {
      silent = 1;
      pc_rpc_expire(p);
      break;
    }
  }
  pc_status_t st = pc_rpc_finish(p, reply, sent, err);
  if (st == PC_TIMEOUT && silent)
    pc_error_set(err, PC_TIMEOUT, "tablet %s: %s stopped answering (no reply to a ping within "
                 "%u ms)", s->t[i].name, l->addr, half);
  return st;
}

/* When a reply whose status is PC_UNAVAILABLE (read by r) is a replica's
 * refusal because it does not lead its tablet: 1, with the leader it names
 * in leader ("host:port", "" when it knows none). */
static int not_leader(const pc_rd_t *r, char *leader, size_t cap) {
  pc_rd_t peek = *r;
  size_t n;
  const char *msg = pc_rd_str(&peek, &n);
  leader[0] = '\0';
  const char *at = peek.ok ? memmem(msg, n, PC_TABLET_NOT_LEADER, strlen(PC_TABLET_NOT_LEADER)) : NULL;
  if (!at) return 0;
  const char *end = msg + n, *a = memmem(at, (size_t)(end - at), " at ", 4);
  if (a) {
    a += 4;
    const char *close = memchr(a, ')', (size_t)(end - a));
    size_t len = close ? (size_t)(close - a) : 0;
    if (len && len < cap && !memmem(a, len, "unknown", 7)) {
      memcpy(leader, a, len);
      leader[len] = '\0';
    }
  }
  return 1;
}

/* A replicated tablet's request that had no effect (refused by a replica
 * that does not lead, or never sent) is tried again until until (monotonic
 * ms): at once when the leader it was told of is new to the caller, after a
 * short pause otherwise (an election takes a few hundred milliseconds).
 * 1 when it should be tried again. */
static int retry_replicated(remote_t *s, size_t i, const char *leader, uint64_t until,
                            int attempt) {
  if (!s->t[i].replicated) return 0;
  uint64_t now = pc_now_mono_ms();
  if (now >= until) return 0;
  if (leader && leader[0]) {
    pc_error_t e2;
    link_t *cur = link_take(&s->t[i]);
    int moved = !cur || strcmp(cur->addr, leader) != 0;
    link_put(cur);
    if (moved && pc_remote_store_route(&s->base, i, leader, &e2) == PC_OK) return 1;
  } else {
    ask_refresh(s, i);
  }
  uint32_t pause = attempt < 3 ? 20u : attempt < 10 ? 50u : 100u;
  if (now + pause >= until) return 0;
  pc_sleep_ms(pause);
  return 1;
}

/* A replicated tablet's point operation may go to a leader that stopped
 * answering (paused, or cut off) while another was elected: each attempt is
 * watched (send_watched), given up once the server stops answering pings
 * for half of attempt_ms, and sent again, to wherever the tablet's leader is
 * then, when sending it twice is harmless: a read, or an operation of the
 * protocol that answers the same when repeated (a prewrite meets its own
 * lock, a commit its own record). A one-phase commit is not: its second
 * attempt would meet its own commit as a conflict, so it fails as an
 * outcome unknown. */
static int point_op(uint8_t op) {
  switch (op) {
    case PC_TABLET_OP_GET:
    case PC_TABLET_OP_GET_FRESH:
    case PC_TABLET_OP_GET_MANY:
    case PC_TABLET_OP_PREWRITE:
    case PC_TABLET_OP_COMMIT:
    case PC_TABLET_OP_ROLLBACK:
    case PC_TABLET_OP_CHECK_TXN:
    case PC_TABLET_OP_HEARTBEAT:
    case PC_TABLET_OP_CLEAR_NOTIFY:
    case PC_TABLET_OP_CLEAR_NOTIFY_MANY:
    case PC_TABLET_OP_OBSERVER:
    case PC_TABLET_OP_ONE_PHASE:
      return 1;
    default:
      return 0;
  }
}

static int repeatable(uint8_t op) { return point_op(op) && op != PC_TABLET_OP_ONE_PHASE; }

/* Sends body to tablet i's server. On transport success, *r reads the reply
 * after its status byte, *status is the store status and err holds its
 * message. A commit (store.h) answers PC_UNAVAILABLE only when its request
 * never left this process: one lost in flight may have been applied, and is
 * an I/O error that the transaction settles. A tablet with no live server
 * fails at once. A server that cannot be reached, or that refuses the row
 * as misrouted, makes the map be read again; the request goes once more to
 * where the map now says, when it had no effect (never sent, or refused).
 * When the map still names a server that refused the connection, the call
 * fails at once saying so (PC_UNAVAILABLE: nothing was sent). A replicated
 * tablet's request is tried again until the deadline when it had no effect,
 * and also, when it answers the same repeated (repeatable), after its
 * connection was lost with it in flight or its server stopped answering:
 * the leader elected next answers it, so a commit lost that way is settled
 * there rather than left to the transaction as an I/O error. */
/* A call given up as unreachable (PC_UNAVAILABLE: no effect) when a commit
 * of it did leave this process: its outcome is unknown, an I/O error that the
 * transaction settles. Any other status unchanged. */
static pc_status_t unanswered(pc_status_t st, int commit_sent, pc_error_t *err) {
  if (st != PC_UNAVAILABLE || !commit_sent) return st;
  if (err) err->code = PC_IO_ERROR;
  return PC_IO_ERROR;
}

static pc_status_t call(remote_t *s, size_t i, uint8_t op, const pc_buf_t *body, pc_buf_t *reply,
                        pc_rd_t *r, pc_error_t *err) {
  uint64_t until = pc_now_mono_ms() + pc_deadline_bound(s->timeout_ms);
  int was_sent = 0; /* an earlier attempt left this process: it may have been applied */
  int settles = op == PC_TABLET_OP_COMMIT || op == PC_TABLET_OP_ONE_PHASE;
  for (int attempt = 0;; attempt++) {
    reply->len = 0;
    link_t *l = link_get(s, i, err);
    if (!l) {
      if (retry_replicated(s, i, NULL, until, attempt)) continue;
      return unanswered(PC_UNAVAILABLE, was_sent && settles, err);
    }
    int sent;
    uint64_t now = pc_now_mono_ms();
    uint32_t left = now < until ? (uint32_t)(until - now) : 1;
    int short_attempt = s->t[i].replicated && s->attempt_ms && point_op(op) && left > s->attempt_ms;
    pc_status_t st = short_attempt ? send_watched(s, i, l, op, body, left, reply, &sent, err)
                                   : send_op(s, i, l, op, body, left, reply, &sent, err);
    if (sent) was_sent = 1;
    if (st == PC_TIMEOUT && short_attempt) {
      /* the server stopped answering: maybe a paused leader */
      ask_refresh(s, i);
      if ((!sent || repeatable(op)) && pc_now_mono_ms() < until) {
        link_put(l);
        continue;
      }
    }
    if (st != PC_OK) {
      reply->len = 0;
      if (st == PC_UNAVAILABLE) {
        ask_refresh(s, i);
        if (!sent && attempt == 0 && !same_link(s, i, l)) {
          link_put(l);
          continue;
        }
        if (!sent && retry_replicated(s, i, NULL, until, attempt)) {
          link_put(l);
          continue;
        }
        if (!sent && refused(s, i, l, err)) {
          link_put(l);
          /* this attempt never sent: no effect, unless an earlier one left */
          return unanswered(PC_UNAVAILABLE, was_sent && settles, err);
        }
        /* the connection lost with the request in flight (its server
         * killed): one that answers the same when repeated goes again, to
         * the leader elected next */
        if (sent && repeatable(op) && retry_replicated(s, i, NULL, until, attempt)) {
          link_put(l);
          continue;
        }
      }
      link_put(l);
      return unanswered(rpc_failure(s, i, st, err), was_sent && settles, err);
    }
    *r = (pc_rd_t){reply->p, reply->len, 0, 1};
    st = reply_status(s, i, r, err);
    if (st == PC_INVALID && misrouted(r)) {
      ask_refresh(s, i);
      if (attempt == 0 && !same_link(s, i, l)) {
        link_put(l);
        continue;
      }
    }
    char leader[300];
    if (st == PC_UNAVAILABLE && not_leader(r, leader, sizeof leader) &&
        retry_replicated(s, i, leader, until, attempt)) {
      link_put(l);
      continue;
    }
    link_put(l);
    return st;
  }
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
  uint8_t op = fresh ? PC_TABLET_OP_GET_FRESH : PC_TABLET_OP_GET;
  pc_tablet_get_req_t q = {*c, read_ts};
  if (pc_tablet_encode_get(&body, op, &q)) st = nomem(err);
  if (st == PC_OK) st = call(s, i, op, &body, &reply, &r, err);
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

/* Reads the answer to a deletion of notifications: u8 done str missing. */
static void take_clear_answer(pc_rd_t *r, pc_notify_clear_t *clear) {
  size_t ml;
  clear->done = pc_rd_u8(r) == 1;
  const char *m = pc_rd_str(r, &ml);
  if (r->ok && ml <= PC_NOTIFY_MISSING_MAX) {
    memcpy(clear->missing, m, ml);
    clear->missing[ml] = '\0';
  } else {
    r->ok = 0;
  }
}

/* The body of a PREWRITE (spec) or ONE_PHASE (start_ts, and clear when not
 * NULL) request; nonzero when out of memory. */
static int enc_mutations(pc_buf_t *body, uint8_t op, const pc_mutation_t *muts, size_t n,
                         const pc_lock_spec_t *spec, uint64_t start_ts,
                         const pc_notify_clear_t *clear) {
  pc_tablet_write_req_t q = {.start_ts = start_ts, .muts = muts, .n = n};
  if (spec) q.spec = *spec;
  if (clear) {
    q.has_clear = 1;
    q.clear = *clear;
  }
  return pc_tablet_encode_write(body, op, &q);
}

/* The body of a COMMIT or ROLLBACK request; nonzero when out of memory. */
static int enc_cells(pc_buf_t *body, uint8_t op, const pc_cell_t *cells, size_t n,
                     uint64_t start_ts, uint64_t commit_ts) {
  pc_tablet_cells_req_t q = {start_ts, commit_ts, cells, n};
  return pc_tablet_encode_cells(body, op, &q);
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
  if (clear) {
    clear->done = 0;
    clear->missing[0] = '\0';
  }
  int bad = enc_mutations(&body, op, muts, n, spec, start_ts, clear);
  pc_rd_t r = {0};
  st = bad ? nomem(err) : call(s, i, op, &body, &reply, &r, err);
  if (reply.len) {
    if (st == PC_OK && op != PC_TABLET_OP_PREWRITE) *commit_ts = pc_rd_u64(&r);
    if (st == PC_OK && clear) take_clear_answer(&r, clear);
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
  int bad = enc_cells(&body, op, cells, n, start_ts, commit_ts);
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
  pc_tablet_check_txn_req_t q = {*primary, start_ts, now_ts, owner_dead};
  if (pc_tablet_encode_check_txn(&body, &q)) st = nomem(err);
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
  pc_tablet_heartbeat_req_t q = {*primary, start_ts, ttl_ms};
  if (pc_tablet_encode_heartbeat(&body, &q)) st = nomem(err);
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
    if (pc_tablet_encode_scan_locks(&body, below)) {
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
  pc_tablet_gc_req_t q = {safe_point, rate};
  if (pc_tablet_encode_gc(&body, &q)) st = nomem(err);
  for (size_t i = 0; i < s->n && st == PC_OK; i++) {
    pc_rd_t r = {0};
    /* a rate-bounded pass over a large tablet takes long */
    reply.len = 0;
    link_t *l = link_get(s, i, err);
    if (!l) {
      st = PC_UNAVAILABLE;
      break;
    }
    int sent;
    st = send_op(s, i, l, PC_TABLET_OP_GC, &body, pc_deadline_bound(GC_CALL_MS), &reply, &sent,
                 err);
    link_put(l);
    if (st != PC_OK) {
      if (st == PC_UNAVAILABLE) ask_refresh(s, i);
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
    pc_tablet_scan_req_t q = {.table = table,
                              .start = lo,
                              .start_len = lol,
                              .start_col = first ? start_col : NULL,
                              .start_col_len = first ? sclen : 0,
                              .end = hi,
                              .end_len = hil,
                              .read_ts = read_ts,
                              .limit = (uint32_t)want};
    if (pc_tablet_encode_scan(&body, &q)) {
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
    pc_tablet_raw_scan_req_t q = {table, start, end, slen, elen};
    if (pc_tablet_encode_raw_scan(&body, &q)) {
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
      pc_tablet_scan_notify_req_t q = {.lo = lo, .hi = hi, .has_after = from != NULL,
                                       .limit = (uint32_t)(limit - delivered)};
      if (from) q.after = *from;
      if (pc_tablet_encode_scan_notify(&body, &q)) {
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

static pc_status_t r_clear_one(remote_t *s, pc_notify_clear_t *clear, pc_error_t *err) {
  const pc_cell_t *cell = &clear->cell;
  size_t i = route(s, cell->row, cell->rlen);
  pc_buf_t body = {0}, reply = {0};
  pc_rd_t r = {0};
  pc_status_t st = PC_OK;
  clear->done = 0;
  clear->missing[0] = '\0';
  if (pc_tablet_encode_clear_notify(&body, clear)) st = nomem(err);
  if (st == PC_OK) st = call(s, i, PC_TABLET_OP_CLEAR_NOTIFY, &body, &reply, &r, err);
  if (reply.len) {
    if (st == PC_OK) take_clear_answer(&r, clear);
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed reply", s->t[i].name);
  }
  if (st != PC_OK) clear->done = 0; /* a malformed answer is no answer */
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}


/* Every tablet in turn: each commits the rows of its range, so each must
 * know the observers before a registration counts as made. */
static pc_status_t r_observer_update(pc_store_t *base, const pc_store_observer_t *o, int add,
                                     pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = PC_OK;
  pc_tablet_observer_req_t q = {add, *o};
  if (pc_tablet_encode_observer(&body, &q)) st = nomem(err);
  for (size_t i = 0; i < s->n && st == PC_OK; i++) {
    pc_rd_t r = {0};
    st = call(s, i, PC_TABLET_OP_OBSERVER, &body, &reply, &r, err);
    if (reply.len) st = take_message(s, i, &r, st, err);
    if (st != PC_OK && reply.len) pc_error_prefix(err, "tablet %s", s->t[i].name);
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

static pc_status_t r_observer_list(pc_store_t *base, pc_store_observer_fn fn, void *ctx,
                                   pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  pc_buf_t body = {0}, reply = {0};
  pc_status_t st = PC_OK;
  int stop = 0;
  for (size_t i = 0; i < s->n && st == PC_OK && !stop; i++) {
    pc_rd_t r = {0};
    st = call(s, i, PC_TABLET_OP_OBSERVERS, &body, &reply, &r, err);
    if (!reply.len) break;
    if (st == PC_OK) {
      uint32_t n = pc_rd_u32(&r);
      for (uint32_t k = 0; k < n && r.ok && !stop; k++) {
        size_t nl, rl;
        const char *name = pc_rd_str(&r, &nl), *rec = pc_rd_str(&r, &rl);
        pc_obs_record_t d;
        char nm[65];
        if (!r.ok || !pc_obs_name_ok(name, nl) || pc_obs_record_decode(rec, rl, &d) != 0) {
          r.ok = 0;
          break;
        }
        memcpy(nm, name, nl);
        nm[nl] = '\0';
        pc_store_observer_t o = {nm, d.table, d.col, d.clen, d.kind};
        stop = fn(ctx, &o);
      }
      if (stop) break;
    }
    st = r.ok ? take_message(s, i, &r, st, err)
              : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed observers reply",
                             s->t[i].name);
  }
  pc_buf_free(&body);
  pc_buf_free(&reply);
  return st;
}

/* ---- requests to several tablets at once ---------------------------------- */

/* One request of a fan-out: its tablet, its body, and after fan_out its
 * reply, read by r after the status byte. */
typedef struct fan {
  size_t tablet;
  pc_buf_t body, reply;
  pc_rd_t r;
  pc_rpc_pending_t *p;
  link_t *link; /* while the request is in flight */
  pc_status_t st;
  pc_error_t err;
} fan_t;

/* Sends every request of f[0..n) at once (op, one per tablet or several),
 * then waits for each reply: f[k].st is the store status (the transport's
 * when the call failed, as call() reports it) with f[k].err, and f[k].r
 * reads the reply after it when a reply came. No thread is created: the
 * replies come back on the tablets' connections while this thread waits. */
static void fan_out(remote_t *s, uint8_t op, fan_t *f, size_t n) {
  uint32_t timeout = pc_deadline_bound(s->timeout_ms);
  for (size_t k = 0; k < n; k++) {
    pc_error_clear(&f[k].err);
    f[k].reply.len = 0;
    f[k].r = (pc_rd_t){NULL, 0, 0, 0};
    f[k].p = NULL;
    f[k].link = link_get(s, f[k].tablet, &f[k].err);
    if (f[k].link) f[k].p = start_op(s, f[k].tablet, f[k].link, op, &f[k].body, timeout, &f[k].err);
    f[k].st = f[k].p ? PC_OK : f[k].err.code;
  }
  for (size_t k = 0; k < n; k++) {
    size_t i = f[k].tablet;
    int sent = 0;
    if (f[k].p) f[k].st = pc_rpc_finish(f[k].p, &f[k].reply, &sent, &f[k].err);
    f[k].p = NULL;
    link_t *l = f[k].link;
    f[k].link = NULL;
    if (!l) { /* no live server: err says so; a replicated tablet's is looked for */
      if (s->t[i].replicated) f[k].st = call(s, i, op, &f[k].body, &f[k].reply, &f[k].r, &f[k].err);
      continue;
    }
    if (f[k].st != PC_OK) {
      f[k].reply.len = 0;
      if (f[k].st == PC_UNAVAILABLE && !sent && s->t[i].replicated) {
        /* never sent: once more, alone, wherever the tablet's leader is */
        link_put(l);
        ask_refresh(s, i);
        f[k].st = call(s, i, op, &f[k].body, &f[k].reply, &f[k].r, &f[k].err);
        continue;
      }
      if (f[k].st == PC_UNAVAILABLE && sent && s->t[i].replicated && repeatable(op)) {
        /* lost in flight (its server killed): once more, alone, wherever the
         * tablet's leader is; a commit that may have been applied and still
         * finds no leader is of unknown outcome */
        link_put(l);
        ask_refresh(s, i);
        f[k].st = call(s, i, op, &f[k].body, &f[k].reply, &f[k].r, &f[k].err);
        f[k].st = unanswered(f[k].st, op == PC_TABLET_OP_COMMIT, &f[k].err);
        continue;
      }
      if (f[k].st == PC_UNAVAILABLE) {
        ask_refresh(s, i);
        if (!sent && same_link(s, i, l) && refused(s, i, l, &f[k].err)) {
          link_put(l);
          continue; /* never sent: no effect, even for a commit */
        }
      }
      link_put(l);
      f[k].st = rpc_failure(s, i, f[k].st, &f[k].err);
      if (f[k].st == PC_UNAVAILABLE && sent &&
          (op == PC_TABLET_OP_COMMIT || op == PC_TABLET_OP_ONE_PHASE))
        f[k].st = f[k].err.code = PC_IO_ERROR;
      continue;
    }
    link_put(l);
    f[k].r = (pc_rd_t){f[k].reply.p, f[k].reply.len, 0, 1};
    f[k].st = reply_status(s, i, &f[k].r, &f[k].err);
    if (f[k].st == PC_INVALID && misrouted(&f[k].r)) ask_refresh(s, i);
    char leader[300];
    if (f[k].st == PC_UNAVAILABLE && s->t[i].replicated &&
        not_leader(&f[k].r, leader, sizeof leader)) {
      /* refused before it did anything: once more, alone, where the leader is */
      if (leader[0]) pc_remote_store_route(&s->base, i, leader, NULL);
      f[k].st = call(s, i, op, &f[k].body, &f[k].reply, &f[k].r, &f[k].err);
    }
  }
}

static void fan_free(fan_t *f, size_t n) {
  for (size_t k = 0; f && k < n; k++) {
    pc_buf_free(&f[k].body);
    pc_buf_free(&f[k].reply);
  }
  free(f);
}

/* Prewrites or commits of one transaction's secondary groups, every tablet
 * at once: a round trip for the stage instead of one per group. */
static void r_stage_many(remote_t *s, uint8_t op, pc_store_req_t *reqs, size_t n,
                         const pc_lock_spec_t *spec, uint64_t start_ts, uint64_t commit_ts) {
  fan_t *f = calloc(n ? n : 1, sizeof *f);
  if (!f) {
    for (size_t k = 0; k < n; k++) reqs[k].st = nomem(&reqs[k].err);
    return;
  }
  size_t m = 0, *which = calloc(n ? n : 1, sizeof *which);
  for (size_t k = 0; which && k < n; k++) {
    pc_store_req_t *q = &reqs[k];
    pc_error_clear(&q->err);
    q->st = PC_OK;
    if (q->n == 0) continue;
    const pc_cell_t *first = op == PC_TABLET_OP_PREWRITE ? &q->muts[0].cell : &q->cells[0];
    size_t i;
    if (op == PC_TABLET_OP_PREWRITE)
      q->st = one_tablet(s, first, sizeof *q->muts, q->n, &i, &q->err);
    else
      q->st = one_tablet(s, first, sizeof *q->cells, q->n, &i, &q->err);
    if (q->st != PC_OK) continue;
    int bad = op == PC_TABLET_OP_PREWRITE
                  ? enc_mutations(&f[m].body, op, q->muts, q->n, spec, 0, NULL)
                  : enc_cells(&f[m].body, op, q->cells, q->n, start_ts, commit_ts);
    if (bad) {
      q->st = nomem(&q->err);
      continue;
    }
    f[m].tablet = i;
    which[m++] = k;
  }
  if (!which) {
    for (size_t k = 0; k < n; k++) reqs[k].st = nomem(&reqs[k].err);
    fan_free(f, n);
    return;
  }
  fan_out(s, op, f, m);
  for (size_t j = 0; j < m; j++) {
    pc_store_req_t *q = &reqs[which[j]];
    q->st = f[j].st;
    q->err = f[j].err;
    if (!f[j].r.ok) continue; /* no reply: the transport's failure */
    pc_rd_t *r = &f[j].r;
    if (q->st == PC_LOCKED && op == PC_TABLET_OP_PREWRITE && pc_wire_get_lock(r, &q->lock))
      r->ok = 0;
    q->st = r->ok ? take_message(s, f[j].tablet, r, q->st, &q->err)
                  : pc_error_set(&q->err, PC_CORRUPTION, "tablet %s: malformed reply",
                                 s->t[f[j].tablet].name);
  }
  free(which);
  fan_free(f, n);
}

static void r_prewrite_many(pc_store_t *base, pc_store_req_t *reqs, size_t n,
                            const pc_lock_spec_t *spec) {
  r_stage_many((remote_t *)base, PC_TABLET_OP_PREWRITE, reqs, n, spec, 0, 0);
}

static void r_commit_many(pc_store_t *base, pc_store_req_t *reqs, size_t n, uint64_t start_ts,
                          uint64_t commit_ts) {
  r_stage_many((remote_t *)base, PC_TABLET_OP_COMMIT, reqs, n, NULL, start_ts, commit_ts);
}

/* Groups n cells (stride bytes apart) by tablet for fan_out: tab[k] is cell
 * k's tablet; f[0..*m) get a tablet each, in the order first met; order[]
 * lists the cells' indices tablet by tablet, each tablet's in the call's
 * order; and count[f[j].tablet] is where f[j]'s run in order[] ends (it
 * starts where f[j - 1]'s ends, at 0 for j = 0). count: s->n zeros. */
static void by_tablet(remote_t *s, const pc_cell_t *cells, size_t stride, size_t n, size_t *tab,
                      size_t *count, fan_t *f, size_t *m, size_t *order) {
  *m = 0;
  for (size_t k = 0; k < n; k++) {
    const pc_cell_t *c = (const pc_cell_t *)((const char *)cells + k * stride);
    tab[k] = route(s, c->row, c->rlen);
    if (count[tab[k]]++ == 0) f[(*m)++].tablet = tab[k];
  }
  size_t end = 0;
  for (size_t j = 0; j < *m; j++) {
    size_t c = count[f[j].tablet];
    count[f[j].tablet] = end;
    end += c;
  }
  for (size_t k = 0; k < n; k++) order[count[tab[k]]++] = k;
}

/* One CLEAR_NOTIFY_MANY per tablet, every tablet at once (a cell alone: a
 * CLEAR_NOTIFY); a tablet that fails leaves its cells not done and the
 * call's status its failure (store.h). */
static pc_status_t r_clear_notify(pc_store_t *base, pc_notify_clear_t *clears, size_t n,
                                  pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  for (size_t k = 0; k < n; k++) {
    clears[k].done = 0;
    clears[k].missing[0] = '\0';
  }
  if (n <= 1) return n ? r_clear_one(s, clears, err) : PC_OK;
  size_t *tab = malloc(n * sizeof *tab), *count = calloc(s->n, sizeof *count);
  size_t *order = malloc(n * sizeof *order);
  fan_t *f = calloc(s->n, sizeof *f);
  pc_notify_clear_t *grouped = malloc(n * sizeof *grouped);
  pc_status_t st = PC_OK;
  size_t m = 0;
  if (!tab || !count || !order || !f || !grouped) st = nomem(err);
  else by_tablet(s, &clears[0].cell, sizeof *clears, n, tab, count, f, &m, order);
  for (size_t k = 0; k < n && st == PC_OK; k++) grouped[k] = clears[order[k]];
  for (size_t j = 0; j < m && st == PC_OK; j++) {
    size_t from = j ? count[f[j - 1].tablet] : 0;
    if (pc_tablet_encode_clear_notify_many(&f[j].body, grouped + from,
                                           count[f[j].tablet] - from))
      st = nomem(err);
  }
  if (st == PC_OK) fan_out(s, PC_TABLET_OP_CLEAR_NOTIFY_MANY, f, m);
  else m = 0; /* nothing sent */
  for (size_t j = 0; j < m; j++) {
    pc_rd_t *r = &f[j].r;
    pc_status_t js = f[j].st;
    pc_error_t je = f[j].err;
    /* the answers come in the order of the request's cells */
    for (size_t k = 0; k < n && js == PC_OK && r->ok; k++)
      if (tab[k] == f[j].tablet) take_clear_answer(r, &clears[k]);
    if (r->ok) js = take_message(s, f[j].tablet, r, js, &je);
    else if (js == PC_OK)
      js = pc_error_set(&je, PC_CORRUPTION, "tablet %s: malformed reply", s->t[f[j].tablet].name);
    if (js != PC_OK) { /* that tablet's cells are not done; the others' answers stand */
      for (size_t k = 0; k < n; k++)
        if (tab[k] == f[j].tablet) clears[k].done = 0;
      st = js;
      if (err) *err = je;
    }
  }
  free(tab);
  free(count);
  free(order);
  free(grouped);
  fan_free(f, s->n);
  return st;
}

/* n cells at read_ts: one GET_MANY per tablet, every tablet at once. */
static pc_status_t r_get_many(pc_store_t *base, const pc_cell_t *cells, size_t n,
                              uint64_t read_ts, pc_got_t *out, pc_lock_info_t *lock,
                              pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  for (size_t k = 0; k < n; k++) out[k] = (pc_got_t){PC_NOT_FOUND, NULL, 0};
  if (n == 0) return PC_OK;
  size_t *tab = malloc(n * sizeof *tab), *count = calloc(s->n, sizeof *count);
  size_t *order = malloc(n * sizeof *order);
  fan_t *f = calloc(s->n, sizeof *f);
  pc_cell_t *grouped = malloc(n * sizeof *grouped);
  pc_status_t st = PC_OK;
  size_t m = 0;
  if (!tab || !count || !order || !f || !grouped) st = nomem(err);
  else by_tablet(s, cells, sizeof *cells, n, tab, count, f, &m, order);
  for (size_t k = 0; k < n && st == PC_OK; k++) grouped[k] = cells[order[k]];
  for (size_t j = 0; j < m && st == PC_OK; j++) {
    size_t from = j ? count[f[j - 1].tablet] : 0;
    pc_tablet_get_many_req_t q = {read_ts, grouped + from, count[f[j].tablet] - from};
    if (pc_tablet_encode_get_many(&f[j].body, &q)) st = nomem(err);
  }
  free(grouped);
  free(order);
  if (st == PC_OK) fan_out(s, PC_TABLET_OP_GET_MANY, f, m);
  int locked = 0;
  for (size_t j = 0; j < m && st == PC_OK; j++) {
    if (f[j].st != PC_OK || !f[j].r.ok) {
      st = f[j].st != PC_OK ? f[j].st : PC_CORRUPTION;
      if (err) *err = f[j].err;
      if (f[j].r.ok) st = take_message(s, f[j].tablet, &f[j].r, st, err);
      break;
    }
    pc_rd_t *r = &f[j].r;
    /* the answers come in the order of the request's cells */
    for (size_t k = 0; k < n && r->ok; k++) {
      if (tab[k] != f[j].tablet) continue;
      pc_status_t cs = (pc_status_t)pc_rd_u8(r);
      out[k].status = cs;
      if (cs == PC_OK) {
        size_t vl;
        const char *v = pc_rd_str(r, &vl);
        if (!r->ok) break;
        if (!(out[k].value = malloc(vl ? vl : 1))) {
          st = nomem(err);
          break;
        }
        memcpy(out[k].value, v, vl);
        out[k].vlen = vl;
      } else if (cs == PC_LOCKED) {
        pc_lock_info_t l;
        if (pc_wire_get_lock(r, &l)) {
          r->ok = 0;
          break;
        }
        if (!locked) *lock = l;
        else pc_lock_info_free(&l);
        locked = 1;
      } else if (cs != PC_NOT_FOUND) {
        r->ok = 0;
      }
    }
    if (st == PC_OK)
      st = r->ok ? take_message(s, f[j].tablet, r, PC_OK, err)
                 : pc_error_set(err, PC_CORRUPTION, "tablet %s: malformed get_many reply",
                                s->t[f[j].tablet].name);
  }
  if (st != PC_OK) {
    for (size_t k = 0; k < n; k++) {
      free(out[k].value);
      out[k] = (pc_got_t){PC_NOT_FOUND, NULL, 0};
    }
    if (locked) pc_lock_info_free(lock);
  }
  free(tab);
  free(count);
  fan_free(f, f ? s->n : 0);
  return st;
}

static size_t r_shard_of(pc_store_t *base, const pc_cell_t *cell) {
  return route((remote_t *)base, cell->row, cell->rlen);
}

static void r_close(pc_store_t *base) {
  remote_t *s = (remote_t *)base;
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) {
    link_put(s->t[i].link);
    pthread_mutex_destroy(&s->t[i].mu);
    free(s->t[i].name);
    free(s->t[i].start);
    free(s->t[i].end);
    free(s->t[i].range_text);
  }
  free(s->t);
  free(s->secret);
  free(s->system_secret);
  pc_tls_unref(s->tls);
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
    .observer_update = r_observer_update,
    .observer_list = r_observer_list,
    .shard_of = r_shard_of,
    .get_many = r_get_many,
    .prewrite_many = r_prewrite_many,
    .commit_many = r_commit_many,
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

/* "[start, end)" of a range, printable bytes as they are and others in hex
 * escapes; malloc'd. */
static char *range_text(const char *start, size_t slen, const char *end, size_t elen) {
  pc_buf_t b = {0};
  int bad = pc_buf_append(&b, "[", 1);
  for (int half = 0; half < 2 && !bad; half++) {
    const char *p = half ? end : start;
    size_t n = half ? elen : slen;
    if (half) bad = pc_buf_append(&b, ", ", 2);
    if (n == 0 && !bad) bad = half ? pc_buf_append(&b, "end", 3) : pc_buf_append(&b, "\"\"", 2);
    for (size_t k = 0; k < n && !bad; k++) {
      unsigned char c = (unsigned char)p[k];
      char esc[8];
      int el = c >= 0x20 && c < 0x7f && c != '\\' ? snprintf(esc, sizeof esc, "%c", c)
                                                  : snprintf(esc, sizeof esc, "\\x%02x", c);
      bad = pc_buf_append(&b, esc, (size_t)el);
    }
  }
  if (bad || pc_buf_append(&b, ")", 2)) {
    pc_buf_free(&b);
    return NULL;
  }
  return (char *)b.p; /* NUL-terminated by the last append */
}

/* A link to host:port, or NULL (err set). */
static link_t *link_new(remote_t *s, const char *host, uint16_t port, pc_error_t *err) {
  link_t *l = calloc(1, sizeof *l);
  if (!l) {
    nomem(err);
    return NULL;
  }
  pc_rpc_auth_t auth = {s->secret, s->system_secret, s->tls};
  /* a refused connection fails the call at once: the map is asked again */
  pc_rpc_client_options_t opts = {.fail_on_refusal = 1};
  l->rpc = pc_rpc_client_create_opts(host, port, &auth, &opts, err);
  if (!l->rpc) {
    free(l);
    return NULL;
  }
  atomic_init(&l->refs, 1);
  snprintf(l->addr, sizeof l->addr, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
           (unsigned)port);
  return l;
}

pc_store_t *pc_remote_store_open(const pc_tablet_addr_t *tablets, size_t n,
                                 const pc_rpc_auth_t *auth,
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
  for (size_t i = 0; i < n; i++) pthread_mutex_init(&s->t[i].mu, NULL);
  s->timeout_ms = timeout_ms ? timeout_ms : 10000;
  if ((auth && auth->secret && !(s->secret = strdup(auth->secret))) ||
      (auth && auth->system_secret && !(s->system_secret = strdup(auth->system_secret)))) {
    nomem(err);
    r_close(&s->base);
    return NULL;
  }
  if (auth && auth->tls) s->tls = pc_tls_ref(auth->tls);
  for (size_t i = 0; i < n; i++) {
    rtablet_t *t = &s->t[i];
    const pc_tablet_addr_t *a = &tablets[i];
    t->name = strdup(a->name);
    t->start = dup_n(a->range.start, a->range.start_len);
    t->start_len = a->range.start_len;
    t->end = dup_n(a->range.end, a->range.end_len);
    t->end_len = a->range.end_len;
    t->range_text = range_text(t->start, t->start_len, t->end, t->end_len);
    t->replicated = a->replicated;
    if (!t->name || !t->start || !t->end || !t->range_text) {
      nomem(err);
      r_close(&s->base);
      return NULL;
    }
    if (a->host && !(t->link = link_new(s, a->host, a->port, err))) {
      r_close(&s->base);
      return NULL;
    }
  }
  return &s->base;
}

pc_status_t pc_remote_store_route(pc_store_t *base, size_t i, const char *addr, pc_error_t *err) {
  remote_t *s = (remote_t *)base;
  if (i >= s->n) return pc_error_set(err, PC_INVALID, "no tablet %zu", i);
  rtablet_t *t = &s->t[i];
  pthread_mutex_lock(&t->mu);
  int same = addr ? t->link && strcmp(t->link->addr, addr) == 0 : !t->link;
  pthread_mutex_unlock(&t->mu);
  if (same) return PC_OK;
  link_t *l = NULL;
  if (addr) {
    char host[300];
    uint16_t port;
    pc_status_t st = pc_parse_endpoint(addr, 0, host, sizeof host, &port, err);
    if (st != PC_OK) {
      pc_error_prefix(err, "tablet %s's server", t->name);
      return st;
    }
    if (!(l = link_new(s, host, port, err))) return err ? err->code : PC_NOMEM;
  }
  pthread_mutex_lock(&t->mu);
  link_t *old = t->link;
  t->link = l;
  pthread_mutex_unlock(&t->mu);
  link_put(old); /* calls still on it keep it until they end */
  return PC_OK;
}

void pc_remote_store_set_attempt_ms(pc_store_t *base, uint32_t ms) {
  ((remote_t *)base)->attempt_ms = ms;
}

void pc_remote_store_link_addr(pc_store_t *base, size_t i, char *out, size_t cap) {
  remote_t *s = (remote_t *)base;
  out[0] = '\0';
  if (i >= s->n) return;
  link_t *l = link_take(&s->t[i]);
  if (l) snprintf(out, cap, "%s", l->addr);
  link_put(l);
}

void pc_remote_store_set_refresh(pc_store_t *base, void (*fn)(void *ctx, size_t tablet),
                                 void *ctx) {
  remote_t *s = (remote_t *)base;
  s->refresh = fn;
  s->refresh_ctx = ctx;
}

pc_status_t pc_tablet_remote_info(struct pc_rpc_client *rpc, uint32_t timeout_ms, pc_buf_t *name,
                                  uint64_t *ops, pc_tablet_gc_t *gc, pc_error_t *err) {
  return pc_tablet_remote_info_of(rpc, NULL, timeout_ms, name, ops, gc, err);
}

pc_status_t pc_tablet_remote_info_of(struct pc_rpc_client *rpc, const char *tablet,
                                     uint32_t timeout_ms, pc_buf_t *name, uint64_t *ops,
                                     pc_tablet_gc_t *gc, pc_error_t *err) {
  pc_buf_t reply = {0}, env = {0};
  pc_status_t st;
  if (!tablet) {
    st = pc_rpc_call(rpc, PC_TABLET_OP_INFO, NULL, 0, timeout_ms, &reply, err);
  } else { /* a replicated cluster's server holds several tablets: name it */
    uint8_t wop = pc_tablet_wrap(&env, tablet, PC_TABLET_OP_INFO, NULL, 0);
    st = wop ? pc_rpc_call(rpc, wop, env.p, env.len, timeout_ms, &reply, err) : nomem(err);
    pc_buf_free(&env);
  }
  if (st != PC_OK) {
    pc_buf_free(&reply);
    return st;
  }
  pc_rd_t r = {reply.p, reply.len, 0, 1};
  uint8_t status = pc_rd_u8(&r);
  if (status > PC_STATUS_MAX) r.ok = 0; /* not a pc_status_t: malformed */
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
