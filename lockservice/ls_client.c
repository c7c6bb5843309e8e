/* ls_client.c — the network client of the lock service. It keeps
 * one session open at lockd from a background thread: a keep-alive every
 * ttl/3, and when lockd answers that the session is gone (it expired, or
 * lockd restarted and lost it) a new session is opened and a WARN logged.
 * Every keep-alive carries the process's report for garbage collection (the
 * oldest start_ts it holds open, from the reporter the owner set), and a new
 * session, or a new reporter, sends one at once rather than a period later.
 * The thread sleeps on a condition variable (monotonic clock), so destroy is
 * prompt, and it never holds the client's mutex across a network call, so
 * callers never wait for it. When lockd is unreachable the client keeps
 * working: its session is 0 (or stale), liveness answers PC_LS_UNKNOWN and
 * lock calls fail with the rpc status (PC_UNAVAILABLE / PC_TIMEOUT), and
 * callers fall back to TTLs and random buckets. */
#include "lockservice/lockservice.h"
#include "lockservice/ls_internal.h"

#include "core/error.h"
#include "core/log.h"
#include "net/rpc.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CREATE_TIMEOUT_MS 1000u /* the first open, inside pc_ls_client_create */
#define RETRY_MAX_MS 1000u      /* retry period while lockd does not answer */
#define CLOSE_TIMEOUT_MS 1000u  /* closing the session in destroy */
#define CALL_MIN_TIMEOUT_MS 10u
#define CALL_MAX_TIMEOUT_MS 2000u /* keep-alive calls: bounds how long destroy may wait */

struct pc_ls_client {
  pc_rpc_client_t *rpc;
  uint32_t ttl_ms;
  char endpoint[300]; /* host:port, for messages */

  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  uint64_t session;  /* mu; written only by create and then the thread */
  uint64_t valid_until_ms; /* mu; the session is surely alive at lockd before this */
  int stop;          /* mu */
  int renew;         /* mu: a caller found the session gone; renew now */
  int report_now;    /* mu: a new session or reporter; keep alive (and report) now */
  int have_thread;
  pthread_t thread;

  /* Held while the reporter is read or called, so that replacing it waits for
   * a call in progress; never held with mu. */
  pthread_mutex_t report_mu;
  uint64_t (*reporter)(void *ctx); /* report_mu; NULL: report UINT64_MAX */
  void *reporter_ctx;              /* report_mu */

  /* thread only */
  int unreachable; /* the last call failed (logged once per outage) */
};

static uint32_t call_timeout(const pc_ls_client_t *c) {
  uint32_t t = c->ttl_ms / 3;
  if (t > CALL_MAX_TIMEOUT_MS) t = CALL_MAX_TIMEOUT_MS;
  return t < CALL_MIN_TIMEOUT_MS ? CALL_MIN_TIMEOUT_MS : t;
}

static uint32_t keepalive_period(const pc_ls_client_t *c) {
  uint32_t t = c->ttl_ms / 3;
  return t < 1 ? 1 : t;
}

static uint32_t retry_period(const pc_ls_client_t *c) {
  uint32_t t = keepalive_period(c);
  return t > RETRY_MAX_MS ? RETRY_MAX_MS : t;
}

/* Opens a session at lockd; *id receives it. */
static pc_status_t rpc_open(pc_ls_client_t *c, uint32_t timeout_ms, uint64_t *id,
                            pc_error_t *err) {
  pc_buf_t req = {0}, rep = {0};
  pc_status_t st;
  if (pc_buf_u32(&req, c->ttl_ms) != 0) {
    st = pc_error_set(err, PC_NOMEM, "lockservice client: out of memory");
    goto out;
  }
  st = pc_rpc_call(c->rpc, PC_LS_OP_SESSION_OPEN, req.p, req.len, timeout_ms, &rep, err);
  if (st != PC_OK) goto out;
  pc_rd_t r = {rep.p, rep.len, 0, 1};
  *id = pc_rd_u64(&r);
  if (!r.ok || r.pos != r.len || *id == 0)
    st = pc_error_set(err, PC_CORRUPTION, "lockservice client: malformed session_open reply "
                                          "from %s (%zu bytes)",
                      c->endpoint, rep.len);
out:
  pc_buf_free(&req);
  pc_buf_free(&rep);
  return st;
}

/* A request whose body is one session id and whose reply is empty. */
static pc_status_t rpc_session_op(pc_ls_client_t *c, uint8_t op, uint64_t id,
                                  uint32_t timeout_ms, pc_error_t *err) {
  pc_buf_t req = {0}, rep = {0};
  pc_status_t st;
  if (pc_buf_u64(&req, id) != 0)
    st = pc_error_set(err, PC_NOMEM, "lockservice client: out of memory");
  else
    st = pc_rpc_call(c->rpc, op, req.p, req.len, timeout_ms, &rep, err);
  pc_buf_free(&req);
  pc_buf_free(&rep);
  return st;
}

/* The value the next keep-alive reports. */
static uint64_t report_value(pc_ls_client_t *c) {
  pthread_mutex_lock(&c->report_mu);
  uint64_t v = c->reporter ? c->reporter(c->reporter_ctx) : UINT64_MAX;
  pthread_mutex_unlock(&c->report_mu);
  return v;
}

/* A keep-alive of session id carrying the report oldest. */
static pc_status_t rpc_keepalive(pc_ls_client_t *c, uint64_t id, uint64_t oldest,
                                 uint32_t timeout_ms, pc_error_t *err) {
  pc_buf_t req = {0}, rep = {0};
  pc_status_t st;
  if (pc_buf_u64(&req, id) != 0 || pc_buf_u64(&req, oldest) != 0)
    st = pc_error_set(err, PC_NOMEM, "lockservice client: out of memory");
  else
    st = pc_rpc_call(c->rpc, PC_LS_OP_KEEPALIVE, req.p, req.len, timeout_ms, &rep, err);
  pc_buf_free(&req);
  pc_buf_free(&rep);
  return st;
}

static void set_session(pc_ls_client_t *c, uint64_t id, uint64_t valid_until) {
  pthread_mutex_lock(&c->mu);
  c->session = id;
  c->valid_until_ms = valid_until;
  pthread_mutex_unlock(&c->mu);
}

static void note_failure(pc_ls_client_t *c, const char *what, const pc_error_t *e) {
  if (!c->unreachable)
    pc_log(PC_LOG_WARN, "lockservice client: %s at %s failed: %s: %s (retrying; locks fall "
                        "back to TTLs meanwhile)",
           what, c->endpoint, pc_status_name(e->code), e->text);
  c->unreachable = 1;
}

static void note_success(pc_ls_client_t *c) {
  if (c->unreachable) pc_log(PC_LOG_INFO, "lockservice client: %s answers again", c->endpoint);
  c->unreachable = 0;
}

/* Keeps session id alive, with a fresh report. Returns 1 when it is alive,
 * 0 when lockd did not answer, -1 when lockd says it is gone (the client's
 * session is then 0). */
static int keep_alive(pc_ls_client_t *c, uint64_t id) {
  pc_error_t e;
  uint64_t oldest = report_value(c);
  uint64_t sent = pc_now_mono_ms();
  pc_status_t st = rpc_keepalive(c, id, oldest, call_timeout(c), &e);
  if (st == PC_OK) {
    note_success(c);
    set_session(c, id, sent + c->ttl_ms);
    return 1;
  }
  if (st != PC_NOT_FOUND) {
    note_failure(c, "keep-alive", &e);
    return 0;
  }
  note_success(c);
  set_session(c, 0, 0); /* gone at lockd: stop handing it out */
  return -1;
}

/* One round of the keep-alive thread: keeps old alive or replaces it.
 * Returns 1 when lockd answered as hoped. */
static int keepalive_round(pc_ls_client_t *c, uint64_t old) {
  if (old != 0) {
    int r = keep_alive(c, old);
    if (r >= 0) return r;
  }
  pc_error_t e;
  uint64_t id = 0, sent = pc_now_mono_ms();
  if (rpc_open(c, call_timeout(c), &id, &e) != PC_OK) {
    note_failure(c, "opening a session", &e);
    return 0;
  }
  note_success(c);
  set_session(c, id, sent + c->ttl_ms);
  if (old != 0 && (old >> 32) != (id >> 32))
    pc_log(PC_LOG_WARN, "lockservice client: lockd at %s restarted (epoch %08" PRIx32
                        " -> %08" PRIx32 ") and lost session %016" PRIx64 "; opened session %016"
                        PRIx64 ", the old one's locks are lost",
           c->endpoint, (uint32_t)(old >> 32), (uint32_t)(id >> 32), old, id);
  else if (old != 0)
    pc_log(PC_LOG_WARN, "lockservice client: session %016" PRIx64 " expired at %s; opened "
                        "session %016" PRIx64 ", the old one's locks are lost",
           old, c->endpoint, id);
  else
    pc_log(PC_LOG_DEBUG, "lockservice client: opened session %016" PRIx64 " at %s", id,
           c->endpoint);
  /* Report at once: until then lockd counts the session as unreported. */
  return keep_alive(c, id) == 1;
}

static void *keepalive_main(void *arg) {
  pc_ls_client_t *c = arg;
  int ok = 1;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    uint32_t wait = (c->session != 0 && ok) ? keepalive_period(c) : retry_period(c);
    struct timespec until = pc_mono_after_ms(wait);
    while (!c->stop && !c->renew && !c->report_now) {
      if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT) break;
    }
    if (c->stop) break;
    c->renew = 0;
    c->report_now = 0;
    uint64_t old = c->session;
    pthread_mutex_unlock(&c->mu);
    ok = keepalive_round(c, old);
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

pc_ls_client_t *pc_ls_client_create(const char *host, uint16_t port, const pc_rpc_auth_t *auth,
                                    uint32_t ttl_ms, pc_error_t *err) {
  if (!host || !*host || port == 0) {
    pc_error_set(err, PC_INVALID, "lockservice client: lockd address needs a host and a port");
    return NULL;
  }
  if (ttl_ms < PC_LS_TTL_MIN || ttl_ms > PC_LS_TTL_MAX) {
    pc_error_set(err, PC_INVALID,
                 "lockservice client: session ttl_ms %" PRIu32 " out of range %u..%u", ttl_ms,
                 PC_LS_TTL_MIN, PC_LS_TTL_MAX);
    return NULL;
  }
  pc_ls_client_t *c = calloc(1, sizeof *c);
  if (!c) {
    pc_error_set(err, PC_NOMEM, "lockservice client: out of memory");
    return NULL;
  }
  c->ttl_ms = ttl_ms;
  snprintf(c->endpoint, sizeof c->endpoint, "%s:%u", host, (unsigned)port);
  int cv_ok = pc_cond_init_mono(&c->cv) == 0;
  int mu_ok = pthread_mutex_init(&c->mu, NULL) == 0;
  int rmu_ok = pthread_mutex_init(&c->report_mu, NULL) == 0;
  if (!cv_ok || !mu_ok || !rmu_ok) {
    if (cv_ok) pthread_cond_destroy(&c->cv);
    if (mu_ok) pthread_mutex_destroy(&c->mu);
    if (rmu_ok) pthread_mutex_destroy(&c->report_mu);
    free(c);
    pc_error_set(err, PC_NOMEM, "lockservice client: cannot initialise its mutex");
    return NULL;
  }
  c->rpc = pc_rpc_client_create(host, port, auth, err);
  if (!c->rpc) {
    pc_error_prefix(err, "lockservice client");
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->report_mu);
    free(c);
    return NULL;
  }
  /* A first session now, so the caller has one at once when lockd is up. */
  pc_error_t e;
  uint64_t id = 0, sent = pc_now_mono_ms();
  uint32_t t = ttl_ms < CREATE_TIMEOUT_MS ? ttl_ms : CREATE_TIMEOUT_MS;
  if (rpc_open(c, t < CALL_MIN_TIMEOUT_MS ? CALL_MIN_TIMEOUT_MS : t, &id, &e) == PC_OK) {
    c->session = id;
    c->valid_until_ms = sent + ttl_ms;
    c->report_now = 1; /* the thread's first round reports */
  } else {
    note_failure(c, "opening a session", &e);
  }
  if (pthread_create(&c->thread, NULL, keepalive_main, c) != 0) {
    pc_error_set(err, PC_NOMEM, "lockservice client: cannot start the keep-alive thread");
    if (c->session) rpc_session_op(c, PC_LS_OP_SESSION_CLOSE, c->session, CLOSE_TIMEOUT_MS, NULL);
    pc_rpc_client_destroy(c->rpc);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->report_mu);
    free(c);
    return NULL;
  }
  c->have_thread = 1;
  pc_error_clear(err);
  return c;
}

void pc_ls_client_destroy(pc_ls_client_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  /* After the join the reporter is never called again. */
  if (c->have_thread) pthread_join(c->thread, NULL);
  if (c->session) rpc_session_op(c, PC_LS_OP_SESSION_CLOSE, c->session, CLOSE_TIMEOUT_MS, NULL);
  pc_rpc_client_destroy(c->rpc);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->report_mu);
  free(c);
}

uint64_t pc_ls_client_session(pc_ls_client_t *c) {
  if (!c) return 0;
  pthread_mutex_lock(&c->mu);
  /* Past valid_until the session may have expired at lockd without our
   * knowing (lockd unreachable): do not let new locks record it. */
  uint64_t id = pc_now_mono_ms() < c->valid_until_ms ? c->session : 0;
  pthread_mutex_unlock(&c->mu);
  return id;
}

void pc_ls_client_set_reporter(pc_ls_client_t *c, uint64_t (*oldest)(void *ctx), void *ctx) {
  if (!c) return;
  /* Waits for a call of the previous reporter in progress to return. */
  pthread_mutex_lock(&c->report_mu);
  c->reporter = oldest;
  c->reporter_ctx = oldest ? ctx : NULL;
  pthread_mutex_unlock(&c->report_mu);
  pthread_mutex_lock(&c->mu);
  c->report_now = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* The session to send with a lock request (0: none open). */
static uint64_t current_session(pc_ls_client_t *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t id = c->session;
  pthread_mutex_unlock(&c->mu);
  return id;
}

/* Asks the keep-alive thread to check the session now, because lockd said it
 * is gone. */
static void request_renew(pc_ls_client_t *c, uint64_t id) {
  pthread_mutex_lock(&c->mu);
  if (c->session == id) {
    c->renew = 1;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
}

static pc_status_t no_session(pc_ls_client_t *c, pc_error_t *err) {
  return pc_error_set(err, PC_UNAVAILABLE,
                      "lockservice client: no session open at %s (lockd unreachable?)",
                      c->endpoint);
}

pc_ls_liveness_t pc_ls_client_liveness(pc_ls_client_t *c, uint64_t session, uint32_t timeout_ms) {
  if (!c || session == 0) return PC_LS_UNKNOWN;
  pc_buf_t req = {0}, rep = {0};
  pc_ls_liveness_t live = PC_LS_UNKNOWN;
  if (pc_buf_u64(&req, session) == 0 &&
      pc_rpc_call(c->rpc, PC_LS_OP_LIVENESS, req.p, req.len, timeout_ms, &rep, NULL) == PC_OK) {
    pc_rd_t r = {rep.p, rep.len, 0, 1};
    uint8_t v = pc_rd_u8(&r);
    if (r.ok && r.pos == r.len && v <= PC_LS_UNKNOWN) live = (pc_ls_liveness_t)v;
  }
  pc_buf_free(&req);
  pc_buf_free(&rep);
  return live;
}

static int name_ok(const char *name, size_t nlen) {
  return name != NULL && nlen >= 1 && nlen <= PC_LS_MAX_NAME;
}

static pc_status_t bad_name(pc_error_t *err, size_t nlen) {
  return pc_error_set(err, PC_INVALID,
                      "lockservice client: lock name of %zu bytes (must be 1..%d, not NULL)",
                      nlen, PC_LS_MAX_NAME);
}

pc_status_t pc_ls_client_lock_try(pc_ls_client_t *c, const char *name, size_t nlen,
                                  uint32_t timeout_ms, int *acquired, uint64_t *holder,
                                  pc_error_t *err) {
  if (!c || !acquired) return pc_error_set(err, PC_INVALID, "lockservice client: NULL argument");
  *acquired = 0;
  if (holder) *holder = 0;
  if (!name_ok(name, nlen)) return bad_name(err, nlen);
  uint64_t id = current_session(c);
  if (id == 0) return no_session(c, err);
  pc_buf_t req = {0}, rep = {0};
  pc_status_t st;
  if (pc_buf_u64(&req, id) != 0 || pc_buf_str(&req, name, nlen) != 0) {
    st = pc_error_set(err, PC_NOMEM, "lockservice client: out of memory");
    goto out;
  }
  st = pc_rpc_call(c->rpc, PC_LS_OP_LOCK_TRY, req.p, req.len, timeout_ms, &rep, err);
  if (st == PC_NOT_FOUND) {
    /* Our session is gone at lockd; the keep-alive thread opens a new one
     * and the caller may retry. */
    request_renew(c, id);
    pc_error_prefix(err, "lockservice client: session being renewed, retry");
    goto out;
  }
  if (st != PC_OK) goto out;
  pc_rd_t r = {rep.p, rep.len, 0, 1};
  uint8_t a = pc_rd_u8(&r);
  uint64_t h = pc_rd_u64(&r);
  if (!r.ok || r.pos != r.len || a > 1) {
    st = pc_error_set(err, PC_CORRUPTION,
                      "lockservice client: malformed lock_try reply from %s (%zu bytes)",
                      c->endpoint, rep.len);
    goto out;
  }
  *acquired = a;
  if (holder) *holder = h;
out:
  pc_buf_free(&req);
  pc_buf_free(&rep);
  return st;
}

pc_status_t pc_ls_client_lock_release(pc_ls_client_t *c, const char *name, size_t nlen,
                                      uint32_t timeout_ms, pc_error_t *err) {
  if (!c) return pc_error_set(err, PC_INVALID, "lockservice client: NULL argument");
  if (!name_ok(name, nlen)) return bad_name(err, nlen);
  uint64_t id = current_session(c);
  if (id == 0) return no_session(c, err);
  pc_buf_t req = {0}, rep = {0};
  pc_status_t st;
  if (pc_buf_u64(&req, id) != 0 || pc_buf_str(&req, name, nlen) != 0)
    st = pc_error_set(err, PC_NOMEM, "lockservice client: out of memory");
  else
    st = pc_rpc_call(c->rpc, PC_LS_OP_LOCK_RELEASE, req.p, req.len, timeout_ms, &rep, err);
  pc_buf_free(&req);
  pc_buf_free(&rep);
  return st;
}

pc_status_t pc_ls_remote_info(pc_rpc_client_t *rpc, uint32_t timeout_ms, uint32_t *epoch,
                              uint64_t *sessions, pc_error_t *err) {
  if (!rpc) return pc_error_set(err, PC_INVALID, "lockservice: NULL client");
  pc_buf_t rep = {0};
  pc_status_t st = pc_rpc_call(rpc, PC_LS_OP_INFO, NULL, 0, timeout_ms, &rep, err);
  if (st == PC_OK) {
    pc_rd_t r = {rep.p, rep.len, 0, 1};
    uint32_t e = pc_rd_u32(&r);
    uint64_t n = pc_rd_u64(&r);
    if (!r.ok || r.pos != r.len) {
      st = pc_error_set(err, PC_CORRUPTION, "lockservice: malformed info reply (%zu bytes)",
                        rep.len);
    } else {
      if (epoch) *epoch = e;
      if (sessions) *sessions = n;
    }
  }
  pc_buf_free(&rep);
  return st;
}

pc_status_t pc_ls_client_info(pc_ls_client_t *c, uint32_t timeout_ms, uint32_t *epoch,
                              uint64_t *sessions, pc_error_t *err) {
  if (!c) return pc_error_set(err, PC_INVALID, "lockservice client: NULL argument");
  pc_status_t st = pc_ls_remote_info(c->rpc, timeout_ms, epoch, sessions, err);
  if (st != PC_OK) pc_error_prefix(err, "%s", c->endpoint);
  return st;
}

pc_status_t pc_ls_client_oldest(pc_ls_client_t *c, uint32_t timeout_ms, uint64_t *oldest,
                                size_t *unreported, pc_error_t *err) {
  if (!c) return pc_error_set(err, PC_INVALID, "lockservice client: NULL argument");
  pc_buf_t rep = {0};
  pc_status_t st = pc_rpc_call(c->rpc, PC_LS_OP_OLDEST, NULL, 0, timeout_ms, &rep, err);
  if (st == PC_OK) {
    pc_rd_t r = {rep.p, rep.len, 0, 1};
    uint64_t o = pc_rd_u64(&r), n = pc_rd_u64(&r);
    if (!r.ok || r.pos != r.len || (uint64_t)(size_t)n != n) {
      st = pc_error_set(err, PC_CORRUPTION,
                        "lockservice client: malformed oldest reply from %s (%zu bytes)",
                        c->endpoint, rep.len);
    } else {
      if (oldest) *oldest = o;
      if (unreported) *unreported = (size_t)n;
    }
  } else {
    pc_error_prefix(err, "%s", c->endpoint);
  }
  pc_buf_free(&rep);
  return st;
}
