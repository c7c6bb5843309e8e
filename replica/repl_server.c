/* repl_server.c — the replication ops a tablet server serves
 * (repl_wire.h), to the system identity only: Raft's messages, handed to
 * the Raft thread in the order they came; streams of a replica's store for
 * a replica being rebuilt, at most a few at a time, each a LevelDB snapshot
 * read a chunk per request and closed when idle; the state of every
 * replica; and membership requests for the groups this server leads. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "replica/replica_int.h"

#define STREAM_IDLE_MS 60000u
#define RAFT_FRAME_MAX_MESSAGES 100000u

typedef struct delivery {
  pc_replica_t *r;
  pc_repl_msg_t *msg;
} delivery_t;

static void deliver_task(pc_repl_host_t *h, void *arg) {
  (void)h;
  delivery_t *d = arg;
  group_deliver(d->r, d->msg);
  free(d);
}

static pc_status_t serve_raft(pc_repl_host_t *h, const char *body, size_t len, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  uint32_t n = pc_rd_u32(&r);
  if (!r.ok || n > RAFT_FRAME_MAX_MESSAGES)
    return pc_error_set(err, PC_INVALID, "RAFT: a malformed message count");
  for (uint32_t i = 0; i < n; i++) {
    pc_repl_msg_t *m = malloc(sizeof *m);
    if (!m) return pc_error_set(err, PC_NOMEM, "out of memory");
    if (pc_repl_msg_decode(&r, m) != 0) {
      free(m);
      return pc_error_set(err, PC_INVALID, "RAFT: message %u of %u is malformed", i + 1, n);
    }
    pc_replica_t *rep = host_find(h, m->group);
    delivery_t *d = rep ? malloc(sizeof *d) : NULL;
    if (!d) { /* a group this server does not hold (any more): dropped */
      pc_repl_msg_release(m);
      free(m);
      continue;
    }
    d->r = rep;
    d->msg = m;
    host_post(h, deliver_task, d);
  }
  if (r.pos != r.len) return pc_error_set(err, PC_INVALID, "RAFT: trailing bytes");
  return PC_OK;
}

/* ---- streams ----------------------------------------------------------------- */

static void stream_close(pc_repl_host_t *h, size_t i) {
  struct stream *s = &h->streams[i];
  pc_local_stream_close(s->st);
  gen_release(s->rep, s->gen);
  memset(s, 0, sizeof *s);
}

/* Closes the streams nobody has asked for lately (streams_mu held). */
static void streams_reap(pc_repl_host_t *h) {
  uint64_t now = pc_now_mono_ms();
  for (size_t i = 0; i < sizeof h->streams / sizeof h->streams[0]; i++)
    if (h->streams[i].id && now - h->streams[i].last_ms > STREAM_IDLE_MS) stream_close(h, i);
}

static pc_status_t serve_snap_open(pc_repl_host_t *h, const char *body, size_t len,
                                   pc_buf_t *reply, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  size_t gl = 0;
  const char *g = pc_rd_str(&r, &gl);
  char group[PC_RAFT_GROUP_MAX + 1];
  if (!r.ok || r.pos != len || gl == 0 || gl > PC_RAFT_GROUP_MAX)
    return pc_error_set(err, PC_INVALID, "SNAP_OPEN: a malformed body");
  memcpy(group, g, gl);
  group[gl] = '\0';
  pc_replica_t *rep = host_find(h, group);
  if (!rep) return pc_error_set(err, PC_INVALID, "server %s holds no replica of tablet %s", h->server, group);
  pthread_mutex_lock(&h->streams_mu);
  streams_reap(h);
  size_t slot = sizeof h->streams / sizeof h->streams[0];
  for (size_t i = 0; i < sizeof h->streams / sizeof h->streams[0]; i++)
    if (!h->streams[i].id) {
      slot = i;
      break;
    }
  pc_status_t st = PC_OK;
  if (slot == sizeof h->streams / sizeof h->streams[0])
    st = pc_error_set(err, PC_BUSY, "server %s is streaming as many snapshots as it may", h->server);
  gen_t *gen = st == PC_OK ? gen_acquire(rep) : NULL;
  if (st == PC_OK && !gen) st = pc_error_set(err, PC_STATE, "tablet %s has no store here", group);
  uint64_t applied = 0;
  pc_local_stream_t *stream = NULL;
  if (st == PC_OK && !(stream = pc_local_stream_open(gen->store, &applied, err))) st = err->code;
  if (st == PC_OK) {
    struct stream *s = &h->streams[slot];
    s->id = ++h->next_stream;
    s->rep = rep;
    s->gen = gen;
    s->st = stream;
    s->last_ms = pc_now_mono_ms();
    if (pc_buf_u64(reply, s->id) || pc_buf_u64(reply, applied))
      st = pc_error_set(err, PC_NOMEM, "out of memory");
    pc_log(PC_LOG_INFO, "tablet %s: streaming its store at index %" PRIu64 " to a replica",
           group, applied);
  } else {
    gen_release(rep, gen);
  }
  pthread_mutex_unlock(&h->streams_mu);
  return st;
}

static struct stream *stream_find(pc_repl_host_t *h, const char *body, size_t len,
                                  size_t *slot) {
  pc_rd_t r = {body, len, 0, 1};
  uint64_t id = pc_rd_u64(&r);
  if (!r.ok || r.pos != len || !id) return NULL;
  for (size_t i = 0; i < sizeof h->streams / sizeof h->streams[0]; i++)
    if (h->streams[i].id == id) {
      *slot = i;
      return &h->streams[i];
    }
  return NULL;
}

static pc_status_t serve_snap_next(pc_repl_host_t *h, const char *body, size_t len,
                                   pc_buf_t *reply, pc_error_t *err) {
  pthread_mutex_lock(&h->streams_mu);
  size_t slot = 0;
  struct stream *s = stream_find(h, body, len, &slot);
  pc_status_t st = PC_OK;
  if (!s) {
    st = pc_error_set(err, PC_INVALID, "SNAP_NEXT: no such stream (it may have been idle too long)");
  } else {
    /* the chunk goes straight into the reply: u8 done, then a str whose
     * length is written once the chunk is read */
    size_t at = reply->len;
    int done = 0;
    if (pc_buf_u8(reply, 0) || pc_buf_u32(reply, 0)) st = pc_error_set(err, PC_NOMEM, "out of memory");
    size_t body_at = reply->len;
    if (st == PC_OK) st = pc_local_stream_next(s->st, PC_REPL_CHUNK, reply, &done, err);
    if (st == PC_OK) {
      size_t n = reply->len - body_at;
      reply->p[at] = (char)done;
      reply->p[at + 1] = (char)(n >> 24);
      reply->p[at + 2] = (char)(n >> 16);
      reply->p[at + 3] = (char)(n >> 8);
      reply->p[at + 4] = (char)n;
      s->bytes += n;
      s->last_ms = pc_now_mono_ms();
      atomic_fetch_add(&s->rep->snap_bytes_sent, n);
    }
  }
  pthread_mutex_unlock(&h->streams_mu);
  return st;
}

static pc_status_t serve_snap_close(pc_repl_host_t *h, const char *body, size_t len,
                                    pc_error_t *err) {
  (void)err;
  pthread_mutex_lock(&h->streams_mu);
  size_t slot = 0;
  struct stream *s = stream_find(h, body, len, &slot);
  if (s) {
    pc_log(PC_LOG_INFO, "tablet %s: streamed %" PRIu64 " bytes of its store", s->rep->group,
           s->bytes);
    stream_close(h, slot);
  }
  pthread_mutex_unlock(&h->streams_mu);
  return PC_OK;
}

static pc_status_t serve_replicas(pc_repl_host_t *h, pc_buf_t *reply, pc_error_t *err) {
  pthread_mutex_lock(&h->reps_mu);
  pc_replica_t *list = h->reps;
  pthread_mutex_unlock(&h->reps_mu);
  uint32_t n = 0;
  for (pc_replica_t *r = list; r; r = r->next) n += r->started && !r->closed;
  if (pc_buf_u32(reply, n)) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_replica_info_t *info = malloc(sizeof *info);
  if (!info) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = PC_OK;
  uint32_t done = 0;
  for (pc_replica_t *r = list; r && st == PC_OK && done < n; r = r->next) {
    if (!r->started || r->closed) continue;
    pc_replica_info(r, info);
    if (pc_replica_info_encode(reply, info)) st = pc_error_set(err, PC_NOMEM, "out of memory");
    done++;
  }
  free(info);
  return st;
}

static pc_status_t serve_member(pc_repl_host_t *h, const char *body, size_t len, pc_buf_t *reply,
                                pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  uint8_t action = pc_rd_u8(&r);
  size_t gl = 0, sl = 0, al = 0;
  const char *g = pc_rd_str(&r, &gl), *sv = pc_rd_str(&r, &sl), *a = NULL;
  uint64_t id = 0;
  if (action == PC_MEMBER_REJOIN) {
    id = pc_rd_u64(&r);
    a = pc_rd_str(&r, &al);
  }
  char group[PC_RAFT_GROUP_MAX + 1], server[PC_RAFT_GROUP_MAX + 1], addr[256] = "";
  if (!r.ok || r.pos != len || action < PC_MEMBER_ADD || action > PC_MEMBER_REJOIN || !gl ||
      gl > PC_RAFT_GROUP_MAX || !sl || sl > PC_RAFT_GROUP_MAX || al >= sizeof addr)
    return pc_error_set(err, PC_INVALID, "MEMBER: a malformed body");
  memcpy(group, g, gl);
  group[gl] = '\0';
  memcpy(server, sv, sl);
  server[sl] = '\0';
  if (a) {
    memcpy(addr, a, al);
    addr[al] = '\0';
  }
  pc_buf_t text = {0};
  pc_status_t st = pc_replica_member(h, group, action, server, id, addr, 0, &text, err);
  if (st == PC_OK && pc_buf_str(reply, text.p, text.len))
    st = pc_error_set(err, PC_NOMEM, "out of memory");
  pc_buf_free(&text);
  return st;
}

static pc_status_t serve_create(pc_repl_host_t *h, const char *body, size_t len, pc_buf_t *reply,
                                pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  size_t gl = 0;
  const char *g = pc_rd_str(&r, &gl);
  char group[PC_RAFT_GROUP_MAX + 1];
  if (!r.ok || r.pos != len || !gl || gl > PC_RAFT_GROUP_MAX)
    return pc_error_set(err, PC_INVALID, "CREATE: a malformed body");
  memcpy(group, g, gl);
  group[gl] = '\0';
  pc_replica_t *rep = host_find(h, group);
  pc_status_t st = PC_OK;
  if (!rep) {
    if (!h->o.on_create)
      return pc_error_set(err, PC_STATE, "server %s cannot take new replicas", h->server);
    st = h->o.on_create(h->o.on_create_ctx, group, &rep, err);
  }
  if (st != PC_OK) return st;
  if (pc_buf_u64(reply, rep->id) || pc_buf_str(reply, rep->address, strlen(rep->address)))
    return pc_error_set(err, PC_NOMEM, "out of memory");
  return PC_OK;
}

pc_status_t pc_repl_rpc_handler(void *ctx, uint8_t op, const char *body, size_t len,
                                pc_buf_t *reply, pc_error_t *err) {
  pc_repl_host_t *h = ctx;
  if (pc_rpc_current_role() != PC_RPC_ROLE_SYSTEM)
    return pc_error_set(err, PC_DENIED, "server %s: replication needs the system identity",
                        h->server);
  switch (op) {
    case PC_REPL_OP_RAFT:
      return serve_raft(h, body, len, err);
    case PC_REPL_OP_SNAP_OPEN:
      return serve_snap_open(h, body, len, reply, err);
    case PC_REPL_OP_SNAP_NEXT:
      return serve_snap_next(h, body, len, reply, err);
    case PC_REPL_OP_SNAP_CLOSE:
      return serve_snap_close(h, body, len, err);
    case PC_REPL_OP_REPLICAS:
      if (len) return pc_error_set(err, PC_INVALID, "REPLICAS: the body must be empty");
      return serve_replicas(h, reply, err);
    case PC_REPL_OP_MEMBER:
      return serve_member(h, body, len, reply, err);
    case PC_REPL_OP_CREATE:
      return serve_create(h, body, len, reply, err);
    default:
      return pc_error_set(err, PC_INVALID, "unknown opcode 0x%02x", op);
  }
}
