/* membership.c — changing who holds a tablet, on its leader, one replica at
 * a time through libraft's configuration changes (each committed before the
 * next begins):
 *   add      the new server creates an empty replica (CREATE), which joins
 *            as a spare, then a standby: it replicates without voting, so it
 *            catches up (from a snapshot streamed by a peer) while the group
 *            keeps its majority; once its log matches the leader's, it is
 *            made a voter;
 *   rejoin   the same for a server that lost its state and came back under
 *            a new incarnation, then the old incarnation's replica is
 *            removed (a replica never votes again under an identity whose
 *            votes and acknowledgements it has forgotten);
 *   remove   the replica leaves the configuration (a leader that removes
 *            itself steps down once the change commits);
 *   move     the leadership goes to another voter (Raft's TimeoutNow); the
 *            leader gives up its lease first, since the target starts an
 *            election at once. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/deadline.h"
#include "base/error.h"
#include "base/log.h"
#include "replica/replica_int.h"

#define MEMBER_DEFAULT_MS (10u * 60u * 1000u)

enum { CH_ADD, CH_ASSIGN, CH_REMOVE, CH_TRANSFER };

typedef struct change {
  pc_replica_t *r;
  int kind;
  uint64_t id;
  char address[256];
  int role;
  struct raft_change req;
  struct raft_transfer treq;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started_rv; /* raft_add/assign/remove/transfer's own answer */
  int done, status, abandoned;
} change_t;

static void change_free(change_t *c) {
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static void change_finish(change_t *c, int status) {
  pthread_mutex_lock(&c->mu);
  c->status = status;
  c->done = 1;
  int abandoned = c->abandoned;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (abandoned) change_free(c);
}

static void change_cb(struct raft_change *req, int status) { change_finish(req->data, status); }

static void transfer_cb(struct raft_transfer *req) { change_finish(req->data, 0); }

static void change_task(pc_repl_host_t *h, void *arg) {
  (void)h;
  change_t *c = arg;
  pc_replica_t *r = c->r;
  int rv = RAFT_NOTLEADER;
  c->req.data = c;
  c->treq.data = c;
  if (r->started && !r->closed && raft_state(&r->raft) == RAFT_LEADER) {
    switch (c->kind) {
      case CH_ADD:
        rv = raft_add(&r->raft, &c->req, c->id, c->address, change_cb);
        break;
      case CH_ASSIGN:
        rv = raft_assign(&r->raft, &c->req, c->id, c->role, change_cb);
        break;
      case CH_REMOVE:
        rv = raft_remove(&r->raft, &c->req, c->id, change_cb);
        break;
      case CH_TRANSFER:
        /* the target stands at once, with the votes of replicas that
         * acknowledged this leader: no read is served on what they
         * acknowledged before the target's election is surely over (it
         * stands once, when told; libraft gives up the transfer after an
         * election timeout) */
        r->lease_floor = pc_now_mono_ms() + 4 * r->h->election_base_ms;
        atomic_store(&r->lease_until, 0);
        rv = raft_transfer(&r->raft, &c->treq, c->id, transfer_cb);
        break;
    }
  }
  c->started_rv = rv;
  if (rv != 0) change_finish(c, rv);
}

/* Runs one change and waits for it until deadline (monotonic ms): 0, or
 * libraft's error code; -1 when the deadline passed first (the change may
 * still complete). */
static int run_change(pc_replica_t *r, int kind, uint64_t id, const char *address, int role,
                      uint64_t deadline) {
  change_t *c = calloc(1, sizeof *c);
  if (!c) return RAFT_NOMEM;
  c->r = r;
  c->kind = kind;
  c->id = id;
  c->role = role;
  snprintf(c->address, sizeof c->address, "%s", address ? address : "");
  pthread_mutex_init(&c->mu, NULL);
  pc_cond_init_mono(&c->cv);
  host_post(r->h, change_task, c);
  pthread_mutex_lock(&c->mu);
  while (!c->done) {
    uint64_t now = pc_now_mono_ms();
    if (now >= deadline) break;
    struct timespec at = pc_mono_after_ms((uint32_t)(deadline - now > 100 ? 100 : deadline - now));
    pthread_cond_timedwait(&c->cv, &c->mu, &at);
  }
  int done = c->done, status = c->status;
  if (!done) c->abandoned = 1;
  pthread_mutex_unlock(&c->mu);
  if (done) change_free(c);
  return done ? status : -1;
}

static const char *change_error(int rv) {
  return rv == -1 ? "the time given ran out (the change may still complete)" : raft_strerror(rv);
}

/* A failed change step as an error: one this replica could not start, or
 * saw through, because it does not lead (any more) is PC_UNAVAILABLE and
 * names the leader, so that the request is asked of it; the steps go on
 * from where the configuration is, so asking again completes the change. */
static pc_status_t change_failed(pc_replica_t *r, int rv, const char *step, const char *address,
                                 pc_error_t *err) {
  if (rv == RAFT_NOTLEADER || rv == RAFT_LEADERSHIPLOST) {
    char why[512];
    snprintf(why, sizeof why, "lost the leadership %s %s", step, address);
    return group_not_leader(r, rv == RAFT_NOTLEADER ? "does not lead it" : why, err);
  }
  return pc_error_set(err, PC_STATE, "tablet %s: %s %s: %s", r->group, step, address,
                      change_error(rv));
}

/* The member of r's configuration on server (another incarnation than
 * except_id, when given), from the leader's view. */
static int find_member(pc_replica_t *r, const char *server, uint64_t except_id,
                       struct pc_replica_member *out) {
  pc_replica_info_t *i = malloc(sizeof *i);
  if (!i) return 0;
  pc_replica_info(r, i);
  int found = 0;
  for (uint32_t k = 0; k < i->n && !found; k++) {
    char s[PC_RAFT_GROUP_MAX + 1];
    if (pc_repl_address_server(i->members[k].address, s, sizeof s) != 0) continue;
    if (strcmp(s, server) == 0 && i->members[k].id != except_id) {
      *out = i->members[k];
      found = 1;
    }
  }
  free(i);
  return found;
}

/* The member id of r's configuration, from the leader's view. */
static int find_id(pc_replica_t *r, uint64_t id, struct pc_replica_member *out) {
  pc_replica_info_t *i = malloc(sizeof *i);
  if (!i) return 0;
  pc_replica_info(r, i);
  int found = 0;
  for (uint32_t k = 0; k < i->n && !found; k++)
    if (i->members[k].id == id) {
      *out = i->members[k];
      found = 1;
    }
  free(i);
  return found;
}

/* Waits until member id's log holds everything committed when it began. */
static pc_status_t wait_caught_up(pc_replica_t *r, uint64_t id, uint64_t deadline,
                                  pc_error_t *err) {
  pc_replica_info_t *i = malloc(sizeof *i);
  if (!i) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_replica_info(r, i);
  uint64_t target = i->commit;
  pc_status_t st = PC_TIMEOUT;
  for (;;) {
    pc_replica_info(r, i);
    if (i->state != RAFT_LEADER) {
      st = group_not_leader(r, "no longer leads it", err);
      break;
    }
    uint64_t match = 0;
    for (uint32_t k = 0; k < i->n; k++)
      if (i->members[k].id == id) match = i->members[k].match;
    if (match >= target) {
      st = PC_OK;
      break;
    }
    if (pc_now_mono_ms() >= deadline) {
      st = pc_error_set(err, PC_TIMEOUT, "tablet %s: the new replica holds the log up to %" PRIu64
                        " of %" PRIu64 " and has not caught up in the time given: it is left as "
                        "a standby (not voting); run the command again to finish",
                        r->group, match, target);
      break;
    }
    pc_sleep_ms(50);
  }
  free(i);
  return st;
}

/* Adds id at address as a spare, then a standby, waits for it to catch up,
 * then makes it a voter. A request asked again (one that ran out of time,
 * or a rejoin that the previous leader began) goes on from where the
 * configuration is: id is found by itself, not by its server, which a
 * rejoin's configuration also names in its old incarnation. */
static pc_status_t add_voter(pc_replica_t *r, uint64_t id, const char *address, uint64_t deadline,
                             pc_error_t *err) {
  struct pc_replica_member m;
  int present = find_id(r, id, &m);
  int rv = 0;
  if (!present) rv = run_change(r, CH_ADD, id, address, 0, deadline);
  if (rv != 0)
    return change_failed(r, rv, "adding", address, err);
  if (!present || m.role == RAFT_SPARE) {
    rv = run_change(r, CH_ASSIGN, id, NULL, RAFT_STANDBY, deadline);
    if (rv != 0 && rv != RAFT_BADROLE) return change_failed(r, rv, "making a standby of", address, err);
  }
  pc_status_t st = wait_caught_up(r, id, deadline, err);
  if (st != PC_OK) return st;
  rv = run_change(r, CH_ASSIGN, id, NULL, RAFT_VOTER, deadline);
  if (rv != 0 && rv != RAFT_BADROLE) return change_failed(r, rv, "making a voter of", address, err);
  return PC_OK;
}

/* Asks server to create an empty replica of r's tablet: its id and address. */
static pc_status_t create_on(pc_replica_t *r, const char *server, uint64_t *id, char *address,
                             size_t cap, pc_error_t *err) {
  pc_rpc_client_t *c = host_client(r->h, server, err);
  if (!c) return err->code;
  pc_buf_t req = {0}, rep = {0};
  pc_status_t st = pc_buf_str(&req, r->group, strlen(r->group))
                       ? pc_error_set(err, PC_NOMEM, "out of memory")
                       : pc_rpc_call(c, PC_REPL_OP_CREATE, req.p, req.len,
                                     pc_deadline_bound(30000), &rep, err);
  if (st == PC_OK) {
    pc_rd_t rd = {rep.p, rep.len, 0, 1};
    *id = pc_rd_u64(&rd);
    size_t al = 0;
    const char *a = pc_rd_str(&rd, &al);
    if (!rd.ok || al == 0 || al >= cap) {
      st = pc_error_set(err, PC_INVALID, "a malformed CREATE reply from %s", server);
    } else {
      memcpy(address, a, al);
      address[al] = '\0';
    }
  } else {
    pc_error_prefix(err, "creating a replica of tablet %s on server %s", r->group, server);
  }
  pc_buf_free(&req);
  pc_buf_free(&rep);
  pc_rpc_client_destroy(c);
  return st;
}

pc_status_t pc_replica_member(pc_repl_host_t *h, const char *group, int action,
                              const char *server, uint64_t id, const char *address,
                              uint32_t timeout_ms, pc_buf_t *text, pc_error_t *err) {
  pc_replica_t *r = host_find(h, group);
  if (!r || !r->started)
    return pc_error_set(err, PC_INVALID, "server %s holds no replica of tablet %s", h->server,
                        group);
  uint64_t deadline = pc_now_mono_ms() + pc_deadline_bound(timeout_ms ? timeout_ms : MEMBER_DEFAULT_MS);
  pthread_mutex_lock(&r->member_mu);
  pc_status_t st = group_may_write(r, err);
  char msg[512] = "";
  struct pc_replica_member m;
  if (st == PC_OK) switch (action) {
      case PC_MEMBER_ADD: {
        if (find_member(r, server, 0, &m) && m.role == RAFT_VOTER) {
          snprintf(msg, sizeof msg, "tablet %s: server %s already holds a voting replica (%s)",
                   group, server, m.address);
          break;
        }
        uint64_t nid = 0;
        char naddr[256];
        st = create_on(r, server, &nid, naddr, sizeof naddr, err);
        if (st == PC_OK) st = add_voter(r, nid, naddr, deadline, err);
        if (st == PC_OK)
          snprintf(msg, sizeof msg, "tablet %s: added a voting replica on server %s (%s)", group,
                   server, naddr);
        break;
      }
      case PC_MEMBER_REJOIN: {
        st = add_voter(r, id, address, deadline, err);
        while (st == PC_OK && find_member(r, server, id, &m)) {
          int rv = run_change(r, CH_REMOVE, m.id, NULL, 0, deadline);
          if (rv != 0) st = change_failed(r, rv, "removing", m.address, err);
        }
        if (st == PC_OK)
          snprintf(msg, sizeof msg, "tablet %s: server %s rejoined as %s", group, server, address);
        break;
      }
      case PC_MEMBER_REMOVE: {
        if (!find_member(r, server, 0, &m)) {
          snprintf(msg, sizeof msg, "tablet %s: server %s holds no replica of it", group, server);
          break;
        }
        int rv = run_change(r, CH_REMOVE, m.id, NULL, 0, deadline);
        if (rv != 0)
          st = change_failed(r, rv, "removing", m.address, err);
        else
          snprintf(msg, sizeof msg, "tablet %s: removed the replica on server %s (%s)", group,
                   server, m.address);
        break;
      }
      case PC_MEMBER_MOVE: {
        if (!find_member(r, server, 0, &m) || m.role != RAFT_VOTER) {
          st = pc_error_set(err, PC_INVALID, "tablet %s: server %s holds no voting replica of it",
                            group, server);
          break;
        }
        if (m.id == r->id) {
          snprintf(msg, sizeof msg, "tablet %s: server %s leads it already", group, server);
          break;
        }
        int rv = run_change(r, CH_TRANSFER, m.id, NULL, 0, deadline);
        /* the target leads once this replica hears of it (its hint) */
        int ok = 0;
        for (int polls = 0; rv == 0 && !ok && polls < 100 && pc_now_mono_ms() < deadline; polls++) {
          pthread_mutex_lock(&r->hint_mu);
          ok = r->leader_id == m.id;
          pthread_mutex_unlock(&r->hint_mu);
          if (!ok) pc_sleep_ms(20);
        }
        if (!ok)
          st = pc_error_set(err, PC_STATE, "tablet %s: the leadership did not move to %s (%s)",
                            group, m.address, rv ? change_error(rv) : "it did not win");
        else
          snprintf(msg, sizeof msg, "tablet %s: server %s leads it now", group, server);
        break;
      }
      default:
        st = pc_error_set(err, PC_INVALID, "unknown membership action %d", action);
    }
  pthread_mutex_unlock(&r->member_mu);
  if (st == PC_OK) {
    pc_log(PC_LOG_INFO, "%s", msg);
    if (pc_buf_append(text, msg, strlen(msg))) st = pc_error_set(err, PC_NOMEM, "out of memory");
  }
  return st;
}
