/* group.c — one replica of a tablet: a libraft instance with the raft_io
 * and raft_fsm this project gives it, the proposals of the tablet's row
 * operations, and what the rest of the server reads of its leadership.
 *
 * raft_io. The log, term and vote go to the host's log store (raft_log.h),
 * appends through its writer thread, terms and votes synced on the spot;
 * messages go to the host's sender of their server, stamped (below); time
 * is the monotonic clock. A snapshot of the log is a small descriptor (its
 * index): the state it stands for is the store itself, made durable before
 * the log drops entries (core/store_repl.h). Installing a snapshot from the
 * leader (snapshot_put with no trailing entries) streams the leader's store
 * into a new directory in chunks (repl_server.c serves them), opens it and
 * makes it the replica's store before libraft hears it is done.
 *
 * raft_fsm. apply is pc_local_store_apply of the entry's index: libraft
 * applies entry last_applied + 1 and only then advances last_applied.
 *
 * Leadership. A replica serves writes once it leads and has applied its
 * term's first entry (a barrier: everything committed before its term is
 * then applied), and reads only under its lease: until a majority's last
 * acknowledgement of its AppendEntries, stamped with the leader's clock when
 * sent, plus less than the minimum election timeout. A follower that
 * accepted an AppendEntries from its leader neither votes nor stands for
 * election until a minimum election timeout after it received it (libraft
 * refuses votes while it knows a leader; pre-vote keeps terms from rising
 * meanwhile), and a server that has just started does not vote during one
 * (its vote requests are dropped here), so no other leader can be elected
 * before the lease ends. docs/ARCHITECTURE.md ("Replicated tablets") gives
 * the whole argument. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/deadline.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "base/log.h"
#include "replica/replica_int.h"

#define DESC_FORMAT 1
/* How long a leader waits for the answer to an InstallSnapshot before it
 * sends it again, in election timeouts. A follower ignores one that comes
 * while it takes a snapshot of its own or installs another (libraft answers
 * it with nothing at all), and the leader, still answered by that follower's
 * heartbeats, keeps leading: a majority that needs that follower commits
 * nothing until the InstallSnapshot goes again. One sent again while the
 * follower still streams the first is ignored the same way, and costs the
 * leader a read of its snapshot's descriptor. */
#define INSTALL_RETRY_TIMEOUTS 4u
/* The entries' bytes an AppendEntries carries at most (but always one
 * entry): far below what a peer's queue (host.c) and a frame hold. */
#define APPEND_MAX_BYTES (8u << 20)

/* The term in which the calling thread's row operation checked that its
 * replica may write (replica_store.c sets it around each operation): its
 * proposal goes to the log only in that term, as a leader elected later may
 * have applied other leaders' entries since the checks. */
_Thread_local uint64_t pc_replica_checked_term;

/* ---- helpers ---------------------------------------------------------------- */

static void replica_dir(const pc_replica_t *r, char *out, size_t cap) {
  snprintf(out, cap, "%s/replicas/%s", r->h->dir, r->group);
}

/* Removes the files of dir and dir itself (a LevelDB directory is flat). */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[4400];
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) != 0 && errno == EISDIR) remove_dir(path);
  }
  closedir(d);
  rmdir(dir);
}

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* The number of the replica's store directory, from its CURRENT file. */
static int read_current(const pc_replica_t *r, unsigned *seq) {
  char dir[4200], path[4300];
  replica_dir(r, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/CURRENT", dir);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fscanf(f, "store.%u", seq) == 1;
  fclose(f);
  return ok ? 0 : -1;
}

/* Makes store.<seq> the replica's store across restarts: a new CURRENT,
 * synced, renamed over the old, the directory synced. */
static pc_status_t write_current(const pc_replica_t *r, unsigned seq, pc_error_t *err) {
  char dir[4200], tmp[4300], path[4300];
  replica_dir(r, dir, sizeof dir);
  snprintf(tmp, sizeof tmp, "%s/CURRENT.tmp", dir);
  snprintf(path, sizeof path, "%s/CURRENT", dir);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  char text[32];
  int n = snprintf(text, sizeof text, "store.%u\n", seq);
  int ok = fd >= 0 && write(fd, text, (size_t)n) == n && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  ok = ok && rename(tmp, path) == 0 && fsync_path(dir) == 0;
  if (!ok)
    return pc_error_set(err, PC_IO_ERROR, "replica %s: cannot write %s: %s", r->group, path,
                        strerror(errno));
  return PC_OK;
}

static void store_path(const pc_replica_t *r, unsigned seq, char *out, size_t cap) {
  char dir[4200];
  replica_dir(r, dir, sizeof dir);
  snprintf(out, cap, "%s/store.%u", dir, seq);
}

/* ---- store generations ------------------------------------------------------ */

static void gen_close(gen_t *g, int remove) {
  g->store->ops->close(g->store);
  if (remove) remove_dir(g->dir);
  free(g->dir);
  free(g);
}

gen_t *gen_acquire(pc_replica_t *r) {
  pthread_mutex_lock(&r->gen_mu);
  gen_t *g = r->gen;
  if (g) g->refs++;
  pthread_mutex_unlock(&r->gen_mu);
  return g;
}

void gen_release(pc_replica_t *r, gen_t *g) {
  if (!g) return;
  pthread_mutex_lock(&r->gen_mu);
  int last = --g->refs == 0;
  pthread_mutex_unlock(&r->gen_mu);
  if (last) gen_close(g, g->retired);
}

/* A store of path with the replica's options, which proposes its writes. */
static pc_status_t gen_open(pc_replica_t *r, const char *path, int create, gen_t **out,
                            pc_error_t *err) {
  pc_local_options_t lo = r->h->o.store;
  lo.create_if_missing = create;
  lo.sync = 0; /* the log is the durable record */
  gen_t *g = calloc(1, sizeof *g);
  if (!g || !(g->dir = strdup(path))) {
    free(g);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  pc_status_t st = PC_OK;
  if (create && mkdir(path, 0700) != 0 && errno != EEXIST)
    st = pc_error_set(err, PC_IO_ERROR, "cannot create %s: %s", path, strerror(errno));
  if (st == PC_OK && !(g->store = pc_local_store_open(path, &lo, err))) st = err ? err->code : PC_IO_ERROR;
  if (st != PC_OK) {
    free(g->dir);
    free(g);
    return st;
  }
  pc_local_store_set_replicator(g->store, group_propose, r);
  g->refs = 1; /* the replica's own */
  *out = g;
  return PC_OK;
}

/* Makes g the replica's store (on the Raft thread); the old one closes once
 * its last user is done, and its directory goes with it. */
static void gen_swap(pc_replica_t *r, gen_t *g, unsigned seq) {
  pthread_mutex_lock(&r->gen_mu);
  gen_t *old = r->gen;
  r->gen = g;
  r->gen_seq = seq;
  if (old) old->retired = 1;
  pthread_mutex_unlock(&r->gen_mu);
  gen_release(r, old);
}

/* ---- leadership ---------------------------------------------------------------- */

typedef struct leader_note {
  pc_replica_t *r;
  uint64_t term;
} leader_note_t;

static void note_job(pc_repl_host_t *h, void *arg) {
  leader_note_t *n = arg;
  if (h->o.on_leader) h->o.on_leader(h->o.on_leader_ctx, n->r->group, n->term);
  free(n);
}

static void note_leader(pc_replica_t *r, uint64_t term) {
  if (r->published_term == term) return;
  r->published_term = term;
  leader_note_t *n = malloc(sizeof *n);
  if (!n) return;
  n->r = r;
  n->term = term;
  host_job(r->h, note_job, n);
}

static void wake_waiters(pc_replica_t *r) {
  pthread_mutex_lock(&r->wait_mu);
  pthread_cond_broadcast(&r->wait_cv);
  pthread_mutex_unlock(&r->wait_mu);
}

static uint64_t ack_of(const pc_replica_t *r, uint64_t id) {
  for (size_t i = 0; i < r->nacks; i++)
    if (r->acks[i].id == id) return r->acks[i].stamp;
  return 0;
}

static void ack_set(pc_replica_t *r, uint64_t id, uint64_t stamp) {
  for (size_t i = 0; i < r->nacks; i++)
    if (r->acks[i].id == id) {
      if (stamp > r->acks[i].stamp) r->acks[i].stamp = stamp;
      return;
    }
  if (r->nacks < PC_REPLICA_MAX_MEMBERS) {
    r->acks[r->nacks].id = id;
    r->acks[r->nacks].stamp = stamp;
    r->nacks++;
  }
}

static int cmp_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The lease runs lease_ms from the latest send time that a majority of the
 * voters has acknowledged (the leader itself acknowledges now). */
static void update_lease(pc_replica_t *r) {
  uint64_t vals[PC_REPLICA_MAX_MEMBERS], now = pc_now_mono_ms();
  size_t n = 0;
  const struct raft_configuration *c = &r->raft.configuration;
  for (unsigned i = 0; i < c->n && n < PC_REPLICA_MAX_MEMBERS; i++) {
    if (c->servers[i].role != RAFT_VOTER) continue;
    uint64_t v = c->servers[i].id == r->id ? now : ack_of(r, c->servers[i].id);
    vals[n++] = v >= r->lease_floor ? v : 0;
  }
  uint64_t until = 0;
  if (n && atomic_load(&r->ready_term)) {
    qsort(vals, n, sizeof *vals, cmp_desc);
    uint64_t q = vals[n / 2];
    if (q) until = q + r->h->lease_ms;
  }
  atomic_store(&r->lease_until, until);
}

static void barrier_cb(struct raft_barrier *req, int status) {
  pc_replica_t *r = req->data;
  r->barrier_pending = 0;
  if (status == 0 && raft_state(&r->raft) == RAFT_LEADER && r->raft.current_term == r->lead_term) {
    atomic_store(&r->ready_term, r->lead_term);
    update_lease(r);
    pc_log(PC_LOG_INFO, "tablet %s: %s leads in term %" PRIu64, r->group, r->address,
           r->lead_term);
    note_leader(r, r->lead_term);
    wake_waiters(r);
  } else {
    r->lead_term = 0; /* issued again at the next look, if it still leads */
  }
}

/* Brings what other threads read (ready_term, lease, the leader's address)
 * in line with libraft's state; on the Raft thread after each event. */
static void sync_state(pc_replica_t *r) {
  if (!r->started || r->closed) return;
  uint64_t term = r->raft.current_term;
  if (raft_state(&r->raft) == RAFT_LEADER) {
    if (r->lead_term != term && !r->barrier_pending) {
      r->lead_term = term;
      r->nacks = 0;
      atomic_store(&r->ready_term, 0);
      atomic_store(&r->lease_until, 0);
      atomic_fetch_add(&r->elections, 1);
      r->barrier.data = r;
      r->barrier_pending = 1;
      if (raft_barrier(&r->raft, &r->barrier, barrier_cb) != 0) {
        r->barrier_pending = 0;
        r->lead_term = 0;
      }
    }
    update_lease(r);
  } else if (r->lead_term || atomic_load(&r->ready_term)) {
    if (atomic_load(&r->ready_term))
      pc_log(PC_LOG_INFO, "tablet %s: %s no longer leads (term %" PRIu64 ")", r->group,
             r->address, term);
    r->lead_term = 0;
    atomic_store(&r->ready_term, 0);
    atomic_store(&r->lease_until, 0);
    note_leader(r, 0);
  }
  raft_id id = 0;
  const char *addr = NULL;
  raft_leader(&r->raft, &id, &addr);
  if (id != r->leader_id) {
    if (id) atomic_fetch_add(&r->leader_changes, 1);
    pthread_mutex_lock(&r->hint_mu);
    r->leader_id = id;
    snprintf(r->leader_address, sizeof r->leader_address, "%s", id && addr ? addr : "");
    pthread_mutex_unlock(&r->hint_mu);
    wake_waiters(r);
  }
}

pc_status_t group_not_leader(pc_replica_t *r, const char *why, pc_error_t *err) {
  char leader[256], server[PC_RAFT_GROUP_MAX + 1], ep[PC_REPL_ENDPOINT_MAX] = "";
  pthread_mutex_lock(&r->hint_mu);
  snprintf(leader, sizeof leader, "%s", r->leader_address);
  pthread_mutex_unlock(&r->hint_mu);
  if (leader[0] && pc_repl_address_server(leader, server, sizeof server) == 0 &&
      strcmp(server, r->h->server) != 0) {
    pc_error_t e2;
    if (r->h->o.resolve(r->h->o.resolve_ctx, server, ep, sizeof ep, &e2) != PC_OK) ep[0] = '\0';
    return pc_error_set(err, PC_UNAVAILABLE, "tablet %s: server %s %s (leader: %s at %s)",
                        r->group, r->h->server, why, server, ep[0] ? ep : "unknown");
  }
  return pc_error_set(err, PC_UNAVAILABLE, "tablet %s: server %s %s (leader: unknown: an "
                      "election is under way)", r->group, r->h->server, why);
}

pc_status_t group_may_write(pc_replica_t *r, pc_error_t *err) {
  uint64_t t = atomic_load(&r->ready_term);
  if (!t) return group_not_leader(r, "does not lead it", err);
  pc_replica_checked_term = t;
  return PC_OK;
}

pc_status_t group_may_read(pc_replica_t *r, pc_error_t *err) {
  uint64_t t = atomic_load(&r->ready_term);
  if (!t) return group_not_leader(r, "does not lead it", err);
  if (pc_now_mono_ms() >= atomic_load(&r->lease_until))
    return group_not_leader(r, "leads it but its lease has lapsed (a majority has not answered "
                               "lately)", err);
  pc_replica_checked_term = t;
  return PC_OK;
}

pc_status_t group_read_held(pc_replica_t *r, uint64_t term) {
  return atomic_load(&r->ready_term) == term && pc_now_mono_ms() < atomic_load(&r->lease_until)
             ? PC_OK
             : PC_UNAVAILABLE;
}

int pc_replica_wait_leader(pc_replica_t *r, uint32_t timeout_ms) {
  uint64_t until = pc_now_mono_ms() + timeout_ms;
  pthread_mutex_lock(&r->wait_mu);
  for (;;) {
    if (atomic_load(&r->ready_term) && pc_now_mono_ms() < atomic_load(&r->lease_until)) break;
    uint64_t now = pc_now_mono_ms();
    if (now >= until) break;
    struct timespec at = pc_mono_after_ms((uint32_t)(until - now > 50 ? 50 : until - now));
    pthread_cond_timedwait(&r->wait_cv, &r->wait_mu, &at);
  }
  pthread_mutex_unlock(&r->wait_mu);
  return atomic_load(&r->ready_term) != 0;
}

/* ---- proposals ------------------------------------------------------------------- */

static uint64_t now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

typedef struct prop {
  pc_replica_t *r;
  uint64_t term;
  struct raft_apply req;
  struct raft_buffer buf;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  int raft_rc;     /* libraft's refusal of raft_apply */
  int proposed;    /* it reached the log */
} prop_t;

static void prop_finish(prop_t *p, int raft_rc) {
  pthread_mutex_lock(&p->mu);
  p->raft_rc = raft_rc;
  p->done = 1;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static void apply_cb(struct raft_apply *req, int status, void *result) {
  (void)result;
  prop_finish(req->data, status);
}

static void propose_task(pc_repl_host_t *h, void *arg) {
  (void)h;
  prop_t *p = arg;
  pc_replica_t *r = p->r;
  int rc = RAFT_NOTLEADER;
  if (r->started && !r->closed && raft_state(&r->raft) == RAFT_LEADER &&
      atomic_load(&r->ready_term) == p->term && r->raft.current_term == p->term) {
    p->req.data = p;
    rc = raft_apply(&r->raft, &p->req, &p->buf, 1, apply_cb);
  }
  if (rc != 0) {
    raft_free(p->buf.base);
    prop_finish(p, rc);
    return;
  }
  p->proposed = 1;
}

pc_status_t group_propose(void *ctx, const char *cmd, size_t len, pc_error_t *err) {
  pc_replica_t *r = ctx;
  prop_t p;
  memset(&p, 0, sizeof p);
  p.r = r;
  p.term = pc_replica_checked_term;
  if (!p.term) return group_not_leader(r, "does not lead it", err);
  p.buf.base = raft_malloc(len ? len : 1);
  if (!p.buf.base) return pc_error_set(err, PC_NOMEM, "out of memory");
  memcpy(p.buf.base, cmd, len);
  p.buf.len = len;
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  uint64_t t0 = now_us();
  pc_status_t st = PC_FAILPOINT("replica.before_propose", err);
  if (st != PC_OK) {
    raft_free(p.buf.base);
    st = group_not_leader(r, "refused the operation at replica.before_propose", err);
  } else {
    host_post(r->h, propose_task, &p);
    /* No deadline: the caller holds its rows' latches, which must stay held
     * until the entry is applied or can no longer be (another operation on
     * those rows would check against a state without it). libraft settles
     * every proposal: applied, or failed when the leader steps down, which
     * it does within an election timeout of losing its majority. */
    pthread_mutex_lock(&p.mu);
    while (!p.done) pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);
    if (p.raft_rc == 0) {
      uint64_t us = now_us() - t0;
      size_t b = 0;
      while (b < PC_RPC_LATENCY_BUCKETS && (double)us / 1e6 > pc_rpc_latency_bounds[b]) b++;
      atomic_fetch_add(&r->proposal_in[b], 1);
      atomic_fetch_add(&r->proposals, 1);
      atomic_fetch_add(&r->proposal_us, us);
      st = PC_FAILPOINT("replica.before_reply", err);
    }
    else if (!p.proposed) st = group_not_leader(r, "does not lead it", err);
    else
      st = pc_error_set(err, PC_TIMEOUT, "tablet %s: server %s lost the leadership while the "
                        "operation was being replicated (%s): it may or may not have been "
                        "applied", r->group, r->h->server, raft_strerror(p.raft_rc));
  }
  pthread_mutex_destroy(&p.mu);
  pthread_cond_destroy(&p.cv);
  return st;
}

/* ---- raft_io ------------------------------------------------------------------- */

static pc_replica_t *io_rep(struct raft_io *io) { return io->impl; }

static void maybe_close_io(pc_replica_t *r) {
  if (r->io_closing && r->pending_io == 0 && r->io_close_cb) {
    raft_io_close_cb cb = r->io_close_cb;
    r->io_close_cb = NULL;
    cb(&r->io);
  }
}

static int io_init(struct raft_io *io, raft_id id, const char *address) {
  (void)io;
  (void)id;
  (void)address;
  return 0;
}

static void io_close(struct raft_io *io, raft_io_close_cb cb) {
  pc_replica_t *r = io_rep(io);
  r->io_closing = 1;
  r->io_close_cb = cb;
  r->tick_cb = NULL;
  r->recv_cb = NULL;
  maybe_close_io(r);
}

static int snapshot_from(const pc_raft_stored_t *s, struct raft_snapshot **out) {
  struct raft_snapshot *snap = raft_calloc(1, sizeof *snap);
  if (!snap) return RAFT_NOMEM;
  snap->index = s->snap_index;
  snap->term = s->snap_term;
  snap->configuration_index = s->conf_index;
  raft_configuration_init(&snap->configuration);
  snap->bufs = raft_malloc(sizeof *snap->bufs);
  if (!snap->bufs || pc_raft_conf_decode(s->conf.p, s->conf.len, &snap->configuration) != 0) {
    raft_configuration_close(&snap->configuration);
    raft_free(snap->bufs);
    raft_free(snap);
    return RAFT_CORRUPT;
  }
  snap->bufs[0].base = raft_malloc(s->data.len ? s->data.len : 1);
  if (!snap->bufs[0].base) {
    raft_configuration_close(&snap->configuration);
    raft_free(snap->bufs);
    raft_free(snap);
    return RAFT_NOMEM;
  }
  memcpy(snap->bufs[0].base, s->data.p, s->data.len);
  snap->bufs[0].len = s->data.len;
  snap->n_bufs = 1;
  *out = snap;
  return 0;
}

static int io_load(struct raft_io *io, raft_term *term, raft_id *voted_for,
                   struct raft_snapshot **snapshot, raft_index *start_index,
                   struct raft_entry *entries[], size_t *n_entries) {
  pc_replica_t *r = io_rep(io);
  pc_raft_stored_t s;
  int found = 0;
  pc_error_t err;
  *snapshot = NULL;
  *entries = NULL;
  *n_entries = 0;
  if (pc_raft_log_state(r->h->log, r->group, &s, &found, &err) != PC_OK) {
    snprintf(io->errmsg, sizeof io->errmsg, "%s", err.text);
    return RAFT_IOERR;
  }
  *term = s.term;
  *voted_for = s.vote;
  r->hard_term = s.term;
  int rv = 0;
  if (s.has_snapshot) rv = snapshot_from(&s, snapshot);
  if (rv == 0 && s.first <= s.last &&
      pc_raft_log_entries(r->h->log, r->group, s.first, s.last, entries, n_entries, &err) != PC_OK) {
    snprintf(io->errmsg, sizeof io->errmsg, "%s", err.text);
    rv = RAFT_CORRUPT;
  }
  if (rv == 0 && *n_entries && s.has_snapshot && s.first > s.snap_index + 1) {
    snprintf(io->errmsg, sizeof io->errmsg, "tablet %s: the log starts at %" PRIu64
             ", after its snapshot at %" PRIu64, r->group, s.first, s.snap_index);
    rv = RAFT_CORRUPT;
  }
  if (rv != 0) {
    if (*snapshot) {
      raft_configuration_close(&(*snapshot)->configuration);
      raft_free((*snapshot)->bufs[0].base);
      raft_free((*snapshot)->bufs);
      raft_free(*snapshot);
      *snapshot = NULL;
    }
    for (size_t i = 0; i < *n_entries; i++) raft_free((*entries)[i].buf.base);
    raft_free(*entries);
    *entries = NULL;
    *n_entries = 0;
    pc_raft_stored_free(&s);
    return rv;
  }
  *start_index = *n_entries ? s.first : s.has_snapshot ? s.snap_index + 1 : 1;
  r->first_index = *start_index;
  r->next_index = *start_index + *n_entries;
  pc_raft_stored_free(&s);
  return 0;
}

static int io_start(struct raft_io *io, unsigned msecs, raft_io_tick_cb tick,
                    raft_io_recv_cb recv) {
  (void)msecs; /* the host ticks every replica more often than libraft asks */
  pc_replica_t *r = io_rep(io);
  r->tick_cb = tick;
  r->recv_cb = recv;
  return 0;
}

static int desc_encode(struct raft_buffer *out, uint64_t index) {
  char b[32];
  pc_buf_t d = PC_BUF_ON(b);
  int rc = pc_buf_u8(&d, DESC_FORMAT) || pc_buf_u64(&d, index) ? RAFT_NOMEM : 0;
  out->base = rc ? NULL : raft_malloc(d.len);
  if (!rc && out->base) {
    memcpy(out->base, d.p, d.len);
    out->len = d.len;
  } else {
    rc = RAFT_NOMEM;
  }
  pc_buf_free(&d);
  return rc;
}

static int desc_decode(const struct raft_buffer *buf, uint64_t *index) {
  pc_rd_t r = {buf->base, buf->len, 0, 1};
  uint8_t f = pc_rd_u8(&r);
  *index = pc_rd_u64(&r);
  return r.ok && f == DESC_FORMAT && r.pos == r.len ? 0 : -1;
}

/* The group's first state: term 1 and a snapshot at index 1 holding the
 * configuration (libraft's own bootstrap writes it as entry 1). A snapshot,
 * so that a replica joining later always starts from a copy of a store,
 * never from a log that does not hold everything the store does. */
static int io_bootstrap(struct raft_io *io, const struct raft_configuration *conf) {
  pc_replica_t *r = io_rep(io);
  pc_raft_stored_t s;
  int found = 0;
  pc_error_t err;
  if (pc_raft_log_state(r->h->log, r->group, &s, &found, &err) != PC_OK) return RAFT_IOERR;
  pc_raft_stored_free(&s);
  if (found) return RAFT_CANTBOOTSTRAP;
  pc_buf_t c = {0};
  struct raft_buffer d = {0};
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  int rv = 0;
  if (pc_raft_conf_encode(conf, &c) || desc_encode(&d, 1) ||
      pc_raft_log_put_hard(b, r->group, 1, 0) ||
      pc_raft_log_put_snapshot(b, r->group, 1, 1, 1, &c, d.base, d.len))
    rv = RAFT_NOMEM;
  if (!rv && pc_local_store_set_applied(r->gen->store, 1, &err) != PC_OK) rv = RAFT_IOERR;
  if (!rv && pc_raft_log_write(r->h->log, b, &err) != PC_OK) rv = RAFT_IOERR;
  if (rv == RAFT_IOERR) snprintf(io->errmsg, sizeof io->errmsg, "%s", err.text);
  leveldb_writebatch_destroy(b);
  pc_buf_free(&c);
  raft_free(d.base);
  return rv;
}

static int io_recover(struct raft_io *io, const struct raft_configuration *conf) {
  (void)conf;
  snprintf(io->errmsg, sizeof io->errmsg, "recovery by a forced configuration is not offered");
  return RAFT_INVALID;
}

/* A term or vote that could not be stored stops the server, as a failed
 * log write does (raft_log.h): libraft 0.15 answers a failed set_term or
 * set_vote by turning the group unavailable for good, a replica that stays
 * up, counted by its peers, and never takes part again until an operator
 * restarts the process; stopping says so at once, and the server comes
 * back from the term and vote it did store. */
static void hard_state_lost(const pc_replica_t *r, const char *what, const pc_error_t *err) {
  pc_log(PC_LOG_ERROR, "tablet %s: its %s was not stored: %s; the server stops", r->group, what,
         err->text);
  abort();
}

static int io_set_term(struct raft_io *io, raft_term term) {
  pc_replica_t *r = io_rep(io);
  pc_error_t err;
  if (pc_raft_log_set_hard(r->h->log, r->group, term, 0, &err) != PC_OK)
    hard_state_lost(r, "term", &err);
  r->hard_term = term;
  return 0;
}

static int io_set_vote(struct raft_io *io, raft_id server_id) {
  pc_replica_t *r = io_rep(io);
  pc_error_t err;
  if (pc_raft_log_set_hard(r->h->log, r->group, r->hard_term, server_id, &err) != PC_OK)
    hard_state_lost(r, "vote", &err);
  return 0;
}

/* A callback of libraft's, called on the Raft thread by a task. */
typedef struct done {
  pc_replica_t *r;
  void *req;
  int status;
  void (*call)(struct done *d);
  union {
    raft_io_send_cb send;
    raft_io_append_cb append;
    raft_io_snapshot_put_cb put;
    raft_io_snapshot_get_cb get;
    raft_io_async_work_cb work;
  } cb;
  struct raft_snapshot *snapshot;
} done_t;

static void done_task(pc_repl_host_t *h, void *arg) {
  (void)h;
  done_t *d = arg;
  d->r->pending_io--;
  d->call(d);
  sync_state(d->r);
  maybe_close_io(d->r);
  free(d);
}

static done_t *done_new(pc_replica_t *r, void *req, void (*call)(done_t *)) {
  done_t *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->r = r;
  d->req = req;
  d->call = call;
  r->pending_io++;
  return d;
}

static void call_send(done_t *d) {
  if (d->cb.send) d->cb.send(d->req, d->status);
}

static int io_send(struct raft_io *io, struct raft_io_send *req, const struct raft_message *m,
                   raft_io_send_cb cb) {
  pc_replica_t *r = io_rep(io);
  char server[PC_RAFT_GROUP_MAX + 1];
  if (pc_repl_address_server(m->server_address, server, sizeof server) != 0)
    return RAFT_NOCONNECTION;
  pc_repl_msg_t w;
  memset(&w, 0, sizeof w);
  snprintf(w.group, sizeof w.group, "%s", r->group);
  w.to = m->server_id;
  w.m = *m;
  w.m.server_id = r->id;
  snprintf(w.from_address, sizeof w.from_address, "%s", r->address);
  if (m->type == RAFT_IO_APPEND_ENTRIES) {
    w.stamp_term = r->raft.current_term;
    w.stamp = pc_now_mono_ms();
    /* libraft sends a follower every entry from its next index in one
     * message: one far behind (a replica rebuilt from empty is sent the
     * whole log after its snapshot) would get a message larger than its
     * peer's queue or a frame holds, dropped each time it is sent again, and
     * never catch up. A prefix of the entries is an AppendEntries like any
     * other (Raft, section 5.3): the follower appends it and answers with
     * its last index, and the leader goes on from there. */
    unsigned n = 0;
    size_t bytes = 0;
    while (n < w.m.append_entries.n_entries && n < PC_REPL_MAX_ENTRIES) {
      bytes += w.m.append_entries.entries[n].buf.len;
      if (n > 0 && bytes > APPEND_MAX_BYTES) break;
      n++;
    }
    w.m.append_entries.n_entries = n;
  } else if (m->type == RAFT_IO_APPEND_ENTRIES_RESULT && r->stamp_from == m->server_id) {
    w.echo_term = r->stamp_term;
    w.echo = r->stamp;
  }
  pc_buf_t b = {0};
  if (pc_repl_msg_encode(&b, &w) != 0) {
    pc_buf_free(&b);
    return RAFT_NOMEM;
  }
  if (m->type == RAFT_IO_INSTALL_SNAPSHOT) atomic_fetch_add(&r->snapshots_sent, 1);
  host_send(r->h, server, &b);
  done_t *d = done_new(r, req, call_send);
  if (!d) return RAFT_NOMEM;
  d->cb.send = cb;
  host_post(r->h, done_task, d);
  return 0;
}

/* Only a stored append gets here: one that failed stopped the server
 * (written, below). */
static void call_append(done_t *d) {
  if (d->cb.append) d->cb.append(d->req, 0);
}

/* The log's writer stops the server on a write that fails (raft_log.h), so
 * libraft never hears of a failed append: its paths after one are not
 * exercised enough to trust (libraft 0.15 frees a leader's barrier twice
 * on one), and a replica must not go on from a log it cannot write. */
static void written(void *ctx, pc_status_t st) {
  done_t *d = ctx;
  pc_error_t err;
  pc_error_clear(&err);
  if (st == PC_OK && d->call == call_append) st = PC_FAILPOINT("replica.after_append", &err);
  if (st != PC_OK) {
    pc_log(PC_LOG_ERROR, "tablet %s: its log entries were not stored: %s; the server stops",
           d->r->group, err.text[0] ? err.text : pc_status_name(st));
    abort();
  }
  d->status = st;
  host_post(d->r->h, done_task, d);
}

static int io_append(struct raft_io *io, struct raft_io_append *req,
                     const struct raft_entry entries[], unsigned n, raft_io_append_cb cb) {
  pc_replica_t *r = io_rep(io);
  pc_error_t err;
  if (PC_FAILPOINT("replica.before_append", &err) != PC_OK) return RAFT_IOERR;
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  for (unsigned i = 0; i < n; i++)
    if (pc_raft_log_put_entry(b, r->group, r->next_index + i, &entries[i]) != 0) {
      leveldb_writebatch_destroy(b);
      return RAFT_NOMEM;
    }
  done_t *d = done_new(r, req, call_append);
  if (!d) {
    leveldb_writebatch_destroy(b);
    return RAFT_NOMEM;
  }
  d->cb.append = cb;
  r->next_index += n;
  pc_raft_log_submit(r->h->log, b, written, d);
  return 0;
}

static int io_truncate(struct raft_io *io, raft_index index) {
  pc_replica_t *r = io_rep(io);
  if (index >= r->next_index) return 0;
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  pc_raft_log_del_entries(b, r->group, index < r->first_index ? r->first_index : index,
                          r->next_index - 1);
  r->next_index = index;
  if (r->first_index > index) r->first_index = index;
  pc_raft_log_submit(r->h->log, b, NULL, NULL);
  return 0;
}

static void call_put(done_t *d) {
  if (d->cb.put) d->cb.put(d->req, d->status == PC_OK ? 0 : RAFT_IOERR);
}

/* The snapshot's descriptor and configuration, and the log from then on:
 * keeping trailing entries before its index, or none at all (trailing 0:
 * the log is replaced). */
static int put_snapshot_meta(pc_replica_t *r, unsigned trailing, const struct raft_snapshot *s,
                             done_t *d) {
  pc_buf_t conf = {0}, data = {0};
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  int bad = pc_raft_conf_encode(&s->configuration, &conf);
  for (unsigned i = 0; !bad && i < s->n_bufs; i++)
    bad = pc_buf_append(&data, s->bufs[i].base, s->bufs[i].len);
  if (!bad)
    bad = pc_raft_log_put_snapshot(b, r->group, s->index, s->term, s->configuration_index, &conf,
                                   data.p, data.len);
  pc_buf_free(&conf);
  pc_buf_free(&data);
  if (bad) {
    leveldb_writebatch_destroy(b);
    return RAFT_NOMEM;
  }
  if (trailing == 0) {
    if (r->first_index < r->next_index)
      pc_raft_log_del_entries(b, r->group, r->first_index, r->next_index - 1);
    r->first_index = r->next_index = s->index + 1;
  } else if (s->index > trailing) {
    uint64_t upto = s->index - trailing;
    if (upto >= r->next_index) upto = r->next_index - 1;
    if (r->first_index <= upto) {
      pc_raft_log_del_entries(b, r->group, r->first_index, upto);
      r->first_index = upto + 1;
    }
  }
  pc_raft_log_submit(r->h->log, b, written, d);
  return 0;
}

/* ---- installing a snapshot from the leader ------------------------------------ */

typedef struct fetch {
  pc_replica_t *r;
  done_t *d;
  struct raft_snapshot snap; /* its configuration and descriptor: copies */
  uint64_t index;
  char from[PC_RAFT_GROUP_MAX + 1];
  unsigned seq;
  gen_t *gen;
  pc_error_t err;
  pc_status_t st;
} fetch_t;

static void fetch_free(fetch_t *f) {
  raft_configuration_close(&f->snap.configuration);
  for (unsigned i = 0; i < f->snap.n_bufs; i++) raft_free(f->snap.bufs[i].base);
  raft_free(f->snap.bufs);
  free(f);
}

static void install_done(pc_repl_host_t *h, void *arg) {
  fetch_t *f = arg;
  pc_replica_t *r = f->r;
  pc_status_t st = f->st;
  if (st == PC_OK && (r->closed || r->io_closing))
    st = pc_error_set(&f->err, PC_STATE, "the replica is stopping");
  if (st == PC_OK) st = write_current(r, f->seq, &f->err);
  if (st == PC_OK) {
    gen_swap(r, f->gen, f->seq);
    f->gen = NULL;
    pc_log(PC_LOG_INFO, "tablet %s: installed a snapshot at index %" PRIu64 " from %s", r->group,
           f->index, f->from);
    atomic_fetch_add(&r->snapshots_received, 1);
    if (put_snapshot_meta(r, 0, &f->snap, f->d) != 0) {
      f->d->status = PC_NOMEM;
      host_post(h, done_task, f->d);
    }
  } else {
    pc_log(PC_LOG_WARN, "tablet %s: a snapshot from %s was not installed: %s", r->group, f->from,
           f->err.text);
    if (f->gen) gen_close(f->gen, 1);
    f->d->status = st;
    host_post(h, done_task, f->d);
  }
  fetch_free(f);
}

static pc_status_t fetch_stream(fetch_t *f, pc_rpc_client_t *c) {
  pc_replica_t *r = f->r;
  pc_error_t *err = &f->err;
  pc_buf_t req = {0}, rep = {0};
  pc_status_t st = PC_OK;
  uint64_t stream = 0, applied = 0;
  char path[4400];
  store_path(r, f->seq, path, sizeof path);
  remove_dir(path);
  pc_local_loader_t *l = NULL;
  if (pc_buf_str(&req, r->group, strlen(r->group))) st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK)
    st = pc_rpc_call(c, PC_REPL_OP_SNAP_OPEN, req.p, req.len, 10000, &rep, err);
  if (st == PC_OK) {
    pc_rd_t rd = {rep.p, rep.len, 0, 1};
    stream = pc_rd_u64(&rd);
    applied = pc_rd_u64(&rd);
    if (!rd.ok) st = pc_error_set(err, PC_INVALID, "a malformed SNAP_OPEN reply");
    else if (applied < f->index)
      st = pc_error_set(err, PC_STATE, "its store is at %" PRIu64 ", before the snapshot's %" PRIu64,
                        applied, f->index);
  }
  if (st == PC_OK && !(l = pc_local_loader_create(path, err))) st = err->code;
  for (int done = 0; st == PC_OK && !done;) {
    if (r->h->stopping) {
      st = pc_error_set(err, PC_STATE, "the server is stopping");
      break;
    }
    req.len = 0;
    rep.len = 0;
    pc_buf_u64(&req, stream);
    st = pc_rpc_call(c, PC_REPL_OP_SNAP_NEXT, req.p, req.len, 60000, &rep, err);
    if (st != PC_OK) break;
    pc_rd_t rd = {rep.p, rep.len, 0, 1};
    done = pc_rd_u8(&rd);
    size_t cl = 0;
    const char *chunk = pc_rd_str(&rd, &cl);
    if (!rd.ok) {
      st = pc_error_set(err, PC_INVALID, "a malformed SNAP_NEXT reply");
      break;
    }
    st = pc_local_loader_put(l, chunk, cl, err);
    atomic_fetch_add(&r->snap_bytes_received, cl);
  }
  if (stream) {
    req.len = 0;
    pc_buf_u64(&req, stream);
    pc_error_t e2;
    (void)pc_rpc_call(c, PC_REPL_OP_SNAP_CLOSE, req.p, req.len, 5000, &rep, &e2);
  }
  if (l) {
    if (st == PC_OK) st = pc_local_loader_finish(l, err);
    else pc_local_loader_abort(l);
  }
  if (st == PC_OK) st = gen_open(r, path, 0, &f->gen, err);
  if (st == PC_OK && pc_local_store_applied(f->gen->store) != applied)
    st = pc_error_set(err, PC_CORRUPTION, "the streamed store is at %" PRIu64 ", not %" PRIu64,
                      pc_local_store_applied(f->gen->store), applied);
  if (st != PC_OK) {
    if (f->gen) gen_close(f->gen, 0);
    f->gen = NULL;
    remove_dir(path);
  }
  pc_buf_free(&req);
  pc_buf_free(&rep);
  return st;
}

static void *fetch_main(void *arg) {
  fetch_t *f = arg;
  pc_repl_host_t *h = f->r->h;
  pc_rpc_client_t *c = host_client(h, f->from, &f->err);
  f->st = c ? fetch_stream(f, c) : f->err.code;
  if (c) pc_rpc_client_destroy(c);
  if (f->st != PC_OK) pc_error_prefix(&f->err, "from server %s", f->from);
  host_post(h, install_done, f);
  pthread_mutex_lock(&h->fetch_mu);
  h->fetches--;
  pthread_cond_broadcast(&h->fetch_cv);
  pthread_mutex_unlock(&h->fetch_mu);
  return NULL;
}

static int start_fetch(pc_replica_t *r, const struct raft_snapshot *s, done_t *d) {
  fetch_t *f = calloc(1, sizeof *f);
  if (!f) return RAFT_NOMEM;
  f->r = r;
  f->d = d;
  f->snap.index = s->index;
  f->snap.term = s->term;
  f->snap.configuration_index = s->configuration_index;
  raft_configuration_init(&f->snap.configuration);
  f->snap.bufs = raft_calloc(1, sizeof *f->snap.bufs);
  int bad = !f->snap.bufs;
  for (unsigned i = 0; !bad && i < s->configuration.n; i++)
    bad = raft_configuration_add(&f->snap.configuration, s->configuration.servers[i].id,
                                 s->configuration.servers[i].address,
                                 s->configuration.servers[i].role) != 0;
  if (!bad && s->n_bufs == 1) {
    f->snap.bufs[0].base = raft_malloc(s->bufs[0].len ? s->bufs[0].len : 1);
    bad = !f->snap.bufs[0].base;
    if (!bad) {
      memcpy(f->snap.bufs[0].base, s->bufs[0].base, s->bufs[0].len);
      f->snap.bufs[0].len = s->bufs[0].len;
      f->snap.n_bufs = 1;
    }
  }
  if (bad || s->n_bufs != 1 || desc_decode(&s->bufs[0], &f->index) != 0 || !r->install_from[0]) {
    fetch_free(f);
    return bad ? RAFT_NOMEM : RAFT_MALFORMED;
  }
  snprintf(f->from, sizeof f->from, "%s", r->install_from);
  f->seq = r->gen_seq + 1;
  pthread_mutex_lock(&r->h->fetch_mu);
  r->h->fetches++;
  pthread_mutex_unlock(&r->h->fetch_mu);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &at, fetch_main, f);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    pthread_mutex_lock(&r->h->fetch_mu);
    r->h->fetches--;
    pthread_mutex_unlock(&r->h->fetch_mu);
    fetch_free(f);
    return RAFT_NOMEM;
  }
  pc_log(PC_LOG_INFO, "tablet %s: fetching a snapshot at index %" PRIu64 " from %s", r->group,
         f->index, f->from);
  return 0;
}

static int io_snapshot_put(struct raft_io *io, unsigned trailing,
                           struct raft_io_snapshot_put *req, const struct raft_snapshot *s,
                           raft_io_snapshot_put_cb cb) {
  pc_replica_t *r = io_rep(io);
  done_t *d = done_new(r, req, call_put);
  if (!d) return RAFT_NOMEM;
  d->cb.put = cb;
  /* trailing 0: a snapshot of the leader's, to install; else one of our own */
  int rv = trailing == 0 ? start_fetch(r, s, d) : put_snapshot_meta(r, trailing, s, d);
  if (rv != 0) {
    r->pending_io--;
    free(d);
  }
  return rv;
}

static void call_get(done_t *d) {
  if (d->cb.get) d->cb.get(d->req, d->snapshot, d->status);
}

static int io_snapshot_get(struct raft_io *io, struct raft_io_snapshot_get *req,
                           raft_io_snapshot_get_cb cb) {
  pc_replica_t *r = io_rep(io);
  pc_raft_stored_t s;
  int found = 0;
  pc_error_t err;
  if (pc_raft_log_state(r->h->log, r->group, &s, &found, &err) != PC_OK) return RAFT_IOERR;
  struct raft_snapshot *snap = NULL;
  int rv = s.has_snapshot ? snapshot_from(&s, &snap) : RAFT_NOTFOUND;
  pc_raft_stored_free(&s);
  if (rv != 0) return rv;
  done_t *d = done_new(r, req, call_get);
  if (!d) {
    raft_configuration_close(&snap->configuration);
    raft_free(snap->bufs[0].base);
    raft_free(snap->bufs);
    raft_free(snap);
    return RAFT_NOMEM;
  }
  d->cb.get = cb;
  d->snapshot = snap;
  host_post(r->h, done_task, d);
  return 0;
}

static raft_time io_time(struct raft_io *io) {
  (void)io;
  return pc_now_mono_ms();
}

static int io_random(struct raft_io *io, int min, int max) {
  pc_replica_t *r = io_rep(io);
  static _Thread_local unsigned seed;
  if (!seed) seed = (unsigned)(pc_now_mono_ms() ^ (uint64_t)r->id ^ (uint64_t)(uintptr_t)&seed);
  if (max <= min) return min;
  return min + (int)((unsigned)rand_r(&seed) % (unsigned)(max - min + 1));
}

static void call_work(done_t *d) {
  if (d->cb.work) d->cb.work(d->req, d->status);
}

static void work_job(pc_repl_host_t *h, void *arg) {
  done_t *d = arg;
  struct raft_io_async_work *w = d->req;
  d->status = w->work(w);
  host_post(h, done_task, d);
}

static int io_async_work(struct raft_io *io, struct raft_io_async_work *req,
                         raft_io_async_work_cb cb) {
  pc_replica_t *r = io_rep(io);
  done_t *d = done_new(r, req, call_work);
  if (!d) return RAFT_NOMEM;
  d->cb.work = cb;
  host_job(r->h, work_job, d);
  return 0;
}

/* ---- raft_fsm ------------------------------------------------------------------- */

static int fsm_apply(struct raft_fsm *fsm, const struct raft_buffer *buf, void **result) {
  pc_replica_t *r = fsm->data;
  uint64_t index = r->raft.last_applied + 1;
  pc_error_t err;
  *result = NULL;
  pc_status_t st = PC_FAILPOINT("replica.before_apply", &err);
  if (st == PC_OK) st = pc_local_store_apply(r->gen->store, index, buf->base, buf->len, &err);
  if (st != PC_OK) {
    /* its store would no longer be the others': it must stop, and be rebuilt
     * from them if the fault is in its data */
    pc_log(PC_LOG_ERROR, "tablet %s: cannot apply log entry %" PRIu64 ": %s; the server stops",
           r->group, index, err.text);
    abort();
  }
  return 0;
}

/* The descriptor names the last command the store applied, not libraft's
 * last applied entry: libraft hands the state machine commands only, and a
 * snapshot taken just after a barrier or a configuration change (which
 * change no store) is at an index the store never recorded. Every command up
 * to the snapshot's index is applied, so the store at the command's index is
 * the state at the snapshot's; a replica starting from it, or taking a
 * stream for it, needs a store that holds that command. */
static int fsm_snapshot(struct raft_fsm *fsm, struct raft_buffer *bufs[], unsigned *n_bufs) {
  pc_replica_t *r = fsm->data;
  struct raft_buffer *b = raft_malloc(sizeof *b);
  if (!b) return RAFT_NOMEM;
  if (desc_encode(b, pc_local_store_applied(r->gen->store)) != 0) {
    raft_free(b);
    return RAFT_NOMEM;
  }
  *bufs = b;
  *n_bufs = 1;
  return 0;
}

/* On the jobs thread: what the log will no longer hold must be in LevelDB's files. */
static int fsm_snapshot_async(struct raft_fsm *fsm, struct raft_buffer *bufs[],
                              unsigned *n_bufs) {
  (void)bufs;
  (void)n_bufs;
  pc_replica_t *r = fsm->data;
  gen_t *g = gen_acquire(r);
  pc_error_t err;
  pc_status_t st = g ? pc_local_store_flush(g->store, &err) : PC_STATE;
  gen_release(r, g);
  if (st != PC_OK) {
    pc_log(PC_LOG_WARN, "tablet %s: no snapshot: %s", r->group, g ? err.text : "no store");
    return RAFT_IOERR;
  }
  return 0;
}

static int fsm_snapshot_finalize(struct raft_fsm *fsm, struct raft_buffer *bufs[],
                                 unsigned *n_bufs) {
  (void)fsm;
  for (unsigned i = 0; *bufs && i < *n_bufs; i++) raft_free((*bufs)[i].base);
  raft_free(*bufs);
  *bufs = NULL;
  *n_bufs = 0;
  return 0;
}

/* The store already is the snapshot: one of ours (it holds at least its
 * index: it was flushed before the log was cut) or one just installed. */
static int fsm_restore(struct raft_fsm *fsm, struct raft_buffer *buf) {
  pc_replica_t *r = fsm->data;
  uint64_t index = 0;
  if (desc_decode(buf, &index) != 0) {
    pc_log(PC_LOG_ERROR, "tablet %s: a malformed snapshot descriptor", r->group);
    return RAFT_MALFORMED;
  }
  uint64_t applied = pc_local_store_applied(r->gen->store);
  if (applied < index) {
    pc_log(PC_LOG_ERROR, "tablet %s: its store holds the log up to %" PRIu64 ", before its "
           "snapshot at %" PRIu64 ": its data directory was damaged; remove it so that the "
           "replica is rebuilt from the others", r->group, applied, index);
    return RAFT_CORRUPT;
  }
  raft_free(buf->base);
  return 0;
}

/* ---- the replica ----------------------------------------------------------------- */

pc_replica_t *group_create(pc_repl_host_t *h, const char *group) {
  pc_replica_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->h = h;
  snprintf(r->group, sizeof r->group, "%s", group);
  pthread_mutex_init(&r->gen_mu, NULL);
  pthread_mutex_init(&r->hint_mu, NULL);
  pthread_mutex_init(&r->member_mu, NULL);
  pthread_mutex_init(&r->wait_mu, NULL);
  pc_cond_init_mono(&r->wait_cv);
  r->io.version = 2;
  r->io.impl = r;
  r->io.init = io_init;
  r->io.close = io_close;
  r->io.load = io_load;
  r->io.start = io_start;
  r->io.bootstrap = io_bootstrap;
  r->io.recover = io_recover;
  r->io.set_term = io_set_term;
  r->io.set_vote = io_set_vote;
  r->io.send = io_send;
  r->io.append = io_append;
  r->io.truncate = io_truncate;
  r->io.snapshot_put = io_snapshot_put;
  r->io.snapshot_get = io_snapshot_get;
  r->io.time = io_time;
  r->io.random = io_random;
  r->io.async_work = io_async_work;
  r->fsm.version = 3;
  r->fsm.data = r;
  r->fsm.apply = fsm_apply;
  r->fsm.snapshot = fsm_snapshot;
  r->fsm.restore = fsm_restore;
  r->fsm.snapshot_finalize = fsm_snapshot_finalize;
  r->fsm.snapshot_async = fsm_snapshot_async;
  return r;
}

static void close_cb(struct raft *raft) {
  pc_replica_t *r = raft->data;
  r->closed = 1;
}

pc_status_t group_start(pc_replica_t *r, pc_replica_start_t start, const char *const *voters,
                        size_t nvoters, pc_error_t *err) {
  pc_repl_host_t *h = r->h;
  r->id = pc_repl_id(h->server, h->incarnation);
  pc_repl_address(r->address, sizeof r->address, h->server, h->incarnation);
  pc_raft_stored_t s;
  int found = 0;
  pc_status_t st = pc_raft_log_state(h->log, r->group, &s, &found, err);
  if (st != PC_OK) return st;
  pc_raft_stored_free(&s);
  char dir[4200], path[4400];
  replica_dir(r, dir, sizeof dir);
  unsigned seq = 1;
  if (found) {
    if (read_current(r, &seq) != 0)
      return pc_error_set(err, PC_CORRUPTION, "the Raft state of tablet %s is in %s/raft but its "
                          "store is not in %s (no CURRENT): remove %s to rebuild this server",
                          r->group, h->dir, dir, h->dir);
    store_path(r, seq, path, sizeof path);
    if ((st = gen_open(r, path, 0, &r->gen, err)) != PC_OK) return st;
  } else {
    if (start == PC_REPLICA_EXISTING)
      return pc_error_set(err, PC_STATE, "server %s holds no state of it", h->server);
    remove_dir(dir); /* what an interrupted start left */
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
      return pc_error_set(err, PC_IO_ERROR, "cannot create %s: %s", dir, strerror(errno));
    store_path(r, seq, path, sizeof path);
    if ((st = gen_open(r, path, 1, &r->gen, err)) != PC_OK) return st;
    if ((st = write_current(r, seq, err)) != PC_OK) return st;
  }
  r->gen_seq = seq;
  if (!(r->proxy = replica_store_create(r))) return pc_error_set(err, PC_NOMEM, "out of memory");
  int rv = raft_init(&r->raft, &r->io, &r->fsm, r->id, r->address);
  if (rv != 0)
    return pc_error_set(err, PC_INTERNAL, "raft_init: %s", raft_strerror(rv));
  r->raft.data = r;
  r->raft_inited = 1;
  raft_set_election_timeout(&r->raft, h->election_base_ms);
  raft_set_heartbeat_timeout(&r->raft, h->o.heartbeat_ms);
  raft_set_install_snapshot_timeout(&r->raft, INSTALL_RETRY_TIMEOUTS * h->election_base_ms);
  raft_set_snapshot_threshold(&r->raft, h->o.snapshot_entries);
  raft_set_snapshot_trailing(&r->raft, h->o.snapshot_trailing);
  raft_set_pre_vote(&r->raft, true);
  if (!found && start == PC_REPLICA_BOOTSTRAP) {
    struct raft_configuration conf;
    raft_configuration_init(&conf);
    for (size_t i = 0; i < nvoters && rv == 0; i++) {
      char addr[256];
      pc_repl_address(addr, sizeof addr, voters[i], 0);
      rv = raft_configuration_add(&conf, pc_repl_id(voters[i], 0), addr, RAFT_VOTER);
    }
    if (rv == 0) rv = raft_bootstrap(&r->raft, &conf);
    raft_configuration_close(&conf);
    if (rv != 0)
      return pc_error_set(err, PC_IO_ERROR, "bootstrap: %s (%s)", raft_strerror(rv),
                          r->io.errmsg);
    pc_log(PC_LOG_INFO, "tablet %s: bootstrapped with %zu voters", r->group, nvoters);
  }
  rv = raft_start(&r->raft);
  if (rv != 0)
    return pc_error_set(err, rv == RAFT_CORRUPT ? PC_CORRUPTION : PC_IO_ERROR,
                        "raft_start: %s (%s)", raft_strerror(rv), raft_errmsg(&r->raft));
  r->started = 1;
  sync_state(r);
  return PC_OK;
}

/* A leader whose entries stop committing while it keeps its leadership
 * (libraft steps down only when a majority stops answering, so followers
 * that answer without storing what it sends keep it leading) holds its
 * proposals, and the rows' latches behind them, until they commit: it says
 * so, with what it knows of each follower, after STILL_REPORT_TIMEOUTS
 * election timeouts and then every STILL_REPEAT_MS. */
#define STILL_REPORT_TIMEOUTS 5u
#define STILL_REPEAT_MS 10000u

static const char *progress_name(unsigned short state) {
  /* libraft's progress states, in raft.h's order of struct raft_progress */
  return state == 0 ? "probing" : state == 1 ? "pipelining" : state == 2 ? "sending a snapshot"
                                                                         : "in an unknown state";
}

static void watch_commits(pc_replica_t *r) {
  uint64_t commit = r->raft.commit_index, last = raft_last_index(&r->raft);
  if (raft_state(&r->raft) != RAFT_LEADER || commit >= last) {
    r->still_since_ms = 0;
    return;
  }
  uint64_t now = pc_now_mono_ms(), gap = now - r->still_tick_ms;
  r->still_tick_ms = now;
  /* a gap in the ticks of two election timeouts: this process did not run
   * (paused, or starved), the others may have elected another leader
   * meanwhile, and the wait counts from now */
  if (!r->still_since_ms || commit != r->still_commit || gap > 2u * r->h->election_base_ms) {
    r->still_commit = commit;
    r->still_since_ms = now;
    r->still_told_ms = 0;
    return;
  }
  if (now - r->still_since_ms < (uint64_t)STILL_REPORT_TIMEOUTS * r->h->election_base_ms ||
      (r->still_told_ms && now - r->still_told_ms < STILL_REPEAT_MS))
    return;
  r->still_told_ms = now;
  char peers[1024];
  size_t len = 0;
  peers[0] = '\0';
  const struct raft_configuration *c = &r->raft.configuration;
  for (unsigned k = 0; k < c->n && len < sizeof peers; k++) {
    if (c->servers[k].id == r->id) continue;
    const struct raft_progress *p = &r->raft.leader_state.progress[k];
    uint64_t ack = ack_of(r, c->servers[k].id);
    int n = snprintf(peers + len, sizeof peers - len,
                     "%s%s (%s): %s, next %" PRIu64 ", match %" PRIu64 ", acknowledged %s",
                     len ? "; " : "", c->servers[k].address,
                     c->servers[k].role == RAFT_VOTER ? "voter" : "not voting",
                     progress_name(p->state), (uint64_t)p->next_index, (uint64_t)p->match_index,
                     ack ? "" : "nothing in this term");
    if (n < 0) break;
    len += (size_t)n;
    if (ack && len < sizeof peers) {
      n = snprintf(peers + len, sizeof peers - len, "%" PRIu64 " ms ago", now > ack ? now - ack : 0);
      if (n > 0) len += (size_t)n;
    }
  }
  pc_log(PC_LOG_WARN,
         "tablet %s: %s leads in term %" PRIu64 " but its log has not committed for %" PRIu64
         " ms (committed %" PRIu64 ", last %" PRIu64 ", stored here %" PRIu64
         "): its proposals wait; %s",
         r->group, r->address, (uint64_t)r->raft.current_term, now - r->still_since_ms, commit,
         last, (uint64_t)r->raft.last_stored, peers[0] ? peers : "no other replica");
}

void group_tick(pc_replica_t *r) {
  if (!r->started || r->closed || !r->tick_cb) return;
  r->tick_cb(&r->io);
  sync_state(r);
  watch_commits(r);
}

void group_deliver(pc_replica_t *r, pc_repl_msg_t *msg) {
  if (!r->started || r->closed || !r->recv_cb || msg->to != r->id) {
    pc_repl_msg_release(msg); /* for another incarnation, or too early or late */
    free(msg);
    return;
  }
  struct raft_message *m = &msg->m;
  switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES:
      if (m->append_entries.term >= r->raft.current_term) {
        r->stamp_from = m->server_id;
        r->stamp_term = msg->stamp_term;
        r->stamp = msg->stamp;
      }
      break;
    case RAFT_IO_APPEND_ENTRIES_RESULT:
      if (raft_state(&r->raft) == RAFT_LEADER && msg->echo_term == r->raft.current_term &&
          m->append_entries_result.term == r->raft.current_term && msg->echo)
        ack_set(r, m->server_id, msg->echo);
      break;
    case RAFT_IO_REQUEST_VOTE:
      /* a server just started may have acknowledged a leader whose lease
       * still runs: it gives no vote for the minimum election timeout */
      if (!m->request_vote.disrupt_leader &&
          pc_now_mono_ms() < r->h->started_ms + r->h->election_base_ms) {
        pc_repl_msg_release(msg);
        free(msg);
        return;
      }
      break;
    case RAFT_IO_INSTALL_SNAPSHOT: {
      pc_error_t err;
      if (PC_FAILPOINT("replica.recv_install_snapshot", &err) != PC_OK) {
        pc_repl_msg_release(msg); /* lost in flight */
        free(msg);
        return;
      }
      if (pc_repl_address_server(msg->from_address, r->install_from, sizeof r->install_from))
        r->install_from[0] = '\0';
      break;
    }
    default:
      break;
  }
  r->recv_cb(&r->io, m); /* takes the message's buffers */
  free(msg);
  sync_state(r);
}

void group_stop(pc_replica_t *r) {
  if (r->raft_inited && r->started && !r->closed && !r->io_closing) {
    atomic_store(&r->ready_term, 0);
    atomic_store(&r->lease_until, 0);
    raft_close(&r->raft, close_cb);
  } else if (!r->started) {
    r->closed = 1;
  }
}

void group_free(pc_replica_t *r) {
  if (r->gen) {
    gen_t *g = r->gen;
    r->gen = NULL;
    gen_release(r, g);
  }
  if (r->proxy) replica_store_free(r->proxy);
  pthread_mutex_destroy(&r->gen_mu);
  pthread_mutex_destroy(&r->hint_mu);
  pthread_mutex_destroy(&r->member_mu);
  pthread_mutex_destroy(&r->wait_mu);
  pthread_cond_destroy(&r->wait_cv);
  free(r);
}

pc_store_t *pc_replica_store(pc_replica_t *r) { return r->proxy; }

void pc_replica_stats(pc_replica_t *r, pc_replica_stats_t *out) {
  memset(out, 0, sizeof *out);
  out->leader_changes = atomic_load(&r->leader_changes);
  out->proposals = atomic_load(&r->proposals);
  out->proposal_seconds = (double)atomic_load(&r->proposal_us) / 1e6;
  uint64_t acc = 0;
  for (size_t b = 0; b < PC_RPC_LATENCY_BUCKETS; b++) {
    acc += atomic_load(&r->proposal_in[b]);
    out->proposal_le[b] = acc;
  }
}

uint64_t pc_replica_id(const pc_replica_t *r) { return r->id; }

typedef struct info_args {
  pc_replica_t *r;
  pc_replica_info_t *out;
} info_args_t;

static void info_task(pc_repl_host_t *h, void *arg) {
  info_args_t *a = arg;
  pc_replica_t *r = a->r;
  pc_replica_info_t *i = a->out;
  memset(i, 0, sizeof *i);
  snprintf(i->group, sizeof i->group, "%s", r->group);
  snprintf(i->address, sizeof i->address, "%s", r->address);
  i->id = r->id;
  if (r->started && !r->closed) {
    i->state = (uint8_t)raft_state(&r->raft);
    i->term = r->raft.current_term;
    i->commit = r->raft.commit_index;
    i->applied = r->raft.last_applied;
    i->last_index = raft_last_index(&r->raft);
    i->snapshot_index = r->raft.log.snapshot.last_index;
  }
  i->ready = atomic_load(&r->ready_term) != 0;
  pthread_mutex_lock(&r->hint_mu);
  i->leader_id = r->leader_id;
  snprintf(i->leader, sizeof i->leader, "%s", r->leader_address);
  pthread_mutex_unlock(&r->hint_mu);
  uint64_t now = pc_now_mono_ms(), lease = atomic_load(&r->lease_until);
  i->lease_ms = lease > now ? lease - now : 0;
  i->elections = atomic_load(&r->elections);
  i->snapshots_sent = atomic_load(&r->snapshots_sent);
  i->snapshots_received = atomic_load(&r->snapshots_received);
  i->snapshot_bytes_sent = atomic_load(&r->snap_bytes_sent);
  i->snapshot_bytes_received = atomic_load(&r->snap_bytes_received);
  const struct raft_configuration *c = &r->raft.configuration;
  int leading = r->started && !r->closed && raft_state(&r->raft) == RAFT_LEADER;
  for (unsigned k = 0; r->started && k < c->n && i->n < sizeof i->members / sizeof i->members[0];
       k++) {
    struct pc_replica_member *m = &i->members[i->n++];
    m->id = c->servers[k].id;
    snprintf(m->address, sizeof m->address, "%s", c->servers[k].address);
    m->role = (uint8_t)c->servers[k].role;
    m->silent_ms = UINT64_MAX;
    if (m->id == r->id) {
      m->match = raft_last_index(&r->raft);
      m->silent_ms = 0;
    } else if (leading) {
      m->match = r->raft.leader_state.progress[k].match_index;
      uint64_t ack = ack_of(r, m->id);
      if (ack) m->silent_ms = now > ack ? now - ack : 0;
    }
  }
  (void)h;
}

void pc_replica_info(pc_replica_t *r, pc_replica_info_t *out) {
  info_args_t a = {r, out};
  host_call(r->h, info_task, &a);
}
