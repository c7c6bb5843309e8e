/* repl_wire.c — codecs of the replication protocol (repl_wire.h): Raft's
 * messages with the lease stamps the project adds, and the state of a
 * replica for status. Every decoder reads untrusted bytes: bounds are
 * checked and a malformed body is refused, never half-built. */
#include "replica/repl_wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int put_str0(pc_buf_t *b, const char *s) { return pc_buf_str(b, s, strlen(s)); }

/* A str of at most cap-1 bytes without NUL into out; -1 when not. */
static int rd_str0(pc_rd_t *r, char *out, size_t cap) {
  size_t n = 0;
  const char *p = pc_rd_str(r, &n);
  if (!r->ok || n >= cap || memchr(p, '\0', n)) {
    r->ok = 0;
    return -1;
  }
  memcpy(out, p, n);
  out[n] = '\0';
  return 0;
}

int pc_repl_msg_encode(pc_buf_t *b, const pc_repl_msg_t *msg) {
  const struct raft_message *m = &msg->m;
  int rc = put_str0(b, msg->group) || pc_buf_u64(b, msg->to) || pc_buf_u64(b, m->server_id) ||
           put_str0(b, msg->from_address) || pc_buf_u8(b, (uint8_t)m->type) ||
           pc_buf_u64(b, msg->stamp_term) || pc_buf_u64(b, msg->stamp) ||
           pc_buf_u64(b, msg->echo_term) || pc_buf_u64(b, msg->echo);
  if (rc) return -1;
  switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES: {
      const struct raft_append_entries *a = &m->append_entries;
      rc = pc_buf_u64(b, a->term) || pc_buf_u64(b, a->prev_log_index) ||
           pc_buf_u64(b, a->prev_log_term) || pc_buf_u64(b, a->leader_commit) ||
           pc_buf_u32(b, a->n_entries);
      for (unsigned i = 0; !rc && i < a->n_entries; i++)
        rc = pc_buf_u64(b, a->entries[i].term) || pc_buf_u8(b, (uint8_t)a->entries[i].type) ||
             pc_buf_str(b, a->entries[i].buf.base, a->entries[i].buf.len);
      break;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
      const struct raft_append_entries_result *a = &m->append_entries_result;
      rc = pc_buf_u64(b, a->term) || pc_buf_u64(b, a->rejected) || pc_buf_u64(b, a->last_log_index);
      break;
    }
    case RAFT_IO_REQUEST_VOTE: {
      const struct raft_request_vote *a = &m->request_vote;
      rc = pc_buf_u64(b, a->term) || pc_buf_u64(b, a->candidate_id) ||
           pc_buf_u64(b, a->last_log_index) || pc_buf_u64(b, a->last_log_term) ||
           pc_buf_u8(b, a->disrupt_leader) || pc_buf_u8(b, a->pre_vote);
      break;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
      const struct raft_request_vote_result *a = &m->request_vote_result;
      rc = pc_buf_u64(b, a->term) || pc_buf_u8(b, a->vote_granted) ||
           pc_buf_u8(b, (uint8_t)a->pre_vote);
      break;
    }
    case RAFT_IO_INSTALL_SNAPSHOT: {
      const struct raft_install_snapshot *a = &m->install_snapshot;
      pc_buf_t conf = {0};
      rc = pc_raft_conf_encode(&a->conf, &conf) || pc_buf_u64(b, a->term) ||
           pc_buf_u64(b, a->last_index) || pc_buf_u64(b, a->last_term) ||
           pc_buf_u64(b, a->conf_index) || pc_buf_str(b, conf.p, conf.len) ||
           pc_buf_str(b, a->data.base, a->data.len);
      pc_buf_free(&conf);
      break;
    }
    case RAFT_IO_TIMEOUT_NOW: {
      const struct raft_timeout_now *a = &m->timeout_now;
      rc = pc_buf_u64(b, a->term) || pc_buf_u64(b, a->last_log_index) ||
           pc_buf_u64(b, a->last_log_term);
      break;
    }
    default:
      rc = -1;
  }
  return rc ? -1 : 0;
}

static int decode_entries(pc_rd_t *r, struct raft_append_entries *a) {
  uint32_t n = pc_rd_u32(r);
  a->entries = NULL;
  a->n_entries = 0;
  if (!r->ok || n > PC_REPL_MAX_ENTRIES) return -1;
  if (n == 0) return 0;
  /* first pass: the bounds, and the size of the batch holding every entry's data */
  size_t start = r->pos, total = 0;
  for (uint32_t i = 0; i < n; i++) {
    (void)pc_rd_u64(r);
    uint8_t type = pc_rd_u8(r);
    size_t dl = 0;
    (void)pc_rd_str(r, &dl);
    if (!r->ok || type < RAFT_COMMAND || type > RAFT_CHANGE) return -1;
    total += dl;
  }
  struct raft_entry *v = raft_calloc(n, sizeof *v);
  char *batch = raft_malloc(total ? total : 1);
  if (!v || !batch) {
    raft_free(v);
    raft_free(batch);
    return -1;
  }
  r->pos = start;
  size_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    v[i].term = pc_rd_u64(r);
    v[i].type = pc_rd_u8(r);
    size_t dl = 0;
    const char *d = pc_rd_str(r, &dl);
    memcpy(batch + off, d, dl);
    v[i].buf.base = batch + off;
    v[i].buf.len = dl;
    v[i].batch = batch;
    off += dl;
  }
  a->entries = v;
  a->n_entries = n;
  return 0;
}

int pc_repl_msg_decode(pc_rd_t *r, pc_repl_msg_t *msg) {
  memset(msg, 0, sizeof *msg);
  struct raft_message *m = &msg->m;
  if (rd_str0(r, msg->group, sizeof msg->group)) return -1;
  msg->to = pc_rd_u64(r);
  m->server_id = pc_rd_u64(r);
  if (rd_str0(r, msg->from_address, sizeof msg->from_address)) return -1;
  m->server_address = msg->from_address;
  m->type = pc_rd_u8(r);
  msg->stamp_term = pc_rd_u64(r);
  msg->stamp = pc_rd_u64(r);
  msg->echo_term = pc_rd_u64(r);
  msg->echo = pc_rd_u64(r);
  if (!r->ok || msg->group[0] == '\0' || m->server_id == 0) return -1;
  switch (m->type) {
    case RAFT_IO_APPEND_ENTRIES: {
      struct raft_append_entries *a = &m->append_entries;
      a->term = pc_rd_u64(r);
      a->prev_log_index = pc_rd_u64(r);
      a->prev_log_term = pc_rd_u64(r);
      a->leader_commit = pc_rd_u64(r);
      if (!r->ok || decode_entries(r, a)) return -1;
      return 0;
    }
    case RAFT_IO_APPEND_ENTRIES_RESULT: {
      struct raft_append_entries_result *a = &m->append_entries_result;
      a->term = pc_rd_u64(r);
      a->rejected = pc_rd_u64(r);
      a->last_log_index = pc_rd_u64(r);
      return r->ok ? 0 : -1;
    }
    case RAFT_IO_REQUEST_VOTE: {
      struct raft_request_vote *a = &m->request_vote;
      a->term = pc_rd_u64(r);
      a->candidate_id = pc_rd_u64(r);
      a->last_log_index = pc_rd_u64(r);
      a->last_log_term = pc_rd_u64(r);
      a->disrupt_leader = pc_rd_u8(r) != 0;
      a->pre_vote = pc_rd_u8(r) != 0;
      return r->ok ? 0 : -1;
    }
    case RAFT_IO_REQUEST_VOTE_RESULT: {
      struct raft_request_vote_result *a = &m->request_vote_result;
      a->term = pc_rd_u64(r);
      a->vote_granted = pc_rd_u8(r) != 0;
      uint8_t pv = pc_rd_u8(r);
      if (!r->ok || pv > raft_tribool_false) return -1;
      a->pre_vote = (raft_tribool)pv;
      return 0;
    }
    case RAFT_IO_INSTALL_SNAPSHOT: {
      struct raft_install_snapshot *a = &m->install_snapshot;
      a->term = pc_rd_u64(r);
      a->last_index = pc_rd_u64(r);
      a->last_term = pc_rd_u64(r);
      a->conf_index = pc_rd_u64(r);
      size_t cl = 0, dl = 0;
      const char *c = pc_rd_str(r, &cl), *d = pc_rd_str(r, &dl);
      if (!r->ok) return -1;
      raft_configuration_init(&a->conf);
      if (pc_raft_conf_decode(c, cl, &a->conf) != 0) {
        raft_configuration_close(&a->conf);
        return -1;
      }
      a->data.base = raft_malloc(dl ? dl : 1);
      if (!a->data.base) {
        raft_configuration_close(&a->conf);
        return -1;
      }
      memcpy(a->data.base, d, dl);
      a->data.len = dl;
      return 0;
    }
    case RAFT_IO_TIMEOUT_NOW: {
      struct raft_timeout_now *a = &m->timeout_now;
      a->term = pc_rd_u64(r);
      a->last_log_index = pc_rd_u64(r);
      a->last_log_term = pc_rd_u64(r);
      return r->ok ? 0 : -1;
    }
    default:
      return -1;
  }
}

void pc_repl_msg_release(pc_repl_msg_t *msg) {
  struct raft_message *m = &msg->m;
  if (m->type == RAFT_IO_APPEND_ENTRIES && m->append_entries.n_entries) {
    raft_free(m->append_entries.entries[0].batch);
    raft_free(m->append_entries.entries);
  } else if (m->type == RAFT_IO_INSTALL_SNAPSHOT) {
    raft_configuration_close(&m->install_snapshot.conf);
    raft_free(m->install_snapshot.data.base);
  }
  memset(m, 0, sizeof *m);
}

/* ---- replica info ---------------------------------------------------------- */

int pc_replica_info_encode(pc_buf_t *b, const pc_replica_info_t *i) {
  int rc = put_str0(b, i->group) || put_str0(b, i->address) || pc_buf_u64(b, i->id) ||
           pc_buf_u8(b, i->state) || pc_buf_u8(b, i->ready) || pc_buf_u64(b, i->term) ||
           pc_buf_u64(b, i->commit) || pc_buf_u64(b, i->applied) ||
           pc_buf_u64(b, i->last_index) || pc_buf_u64(b, i->snapshot_index) ||
           pc_buf_u64(b, i->leader_id) || put_str0(b, i->leader) || pc_buf_u64(b, i->lease_ms) ||
           pc_buf_u64(b, i->elections) || pc_buf_u64(b, i->snapshots_sent) ||
           pc_buf_u64(b, i->snapshots_received) || pc_buf_u64(b, i->snapshot_bytes_sent) ||
           pc_buf_u64(b, i->snapshot_bytes_received) || pc_buf_u32(b, i->n);
  for (uint32_t k = 0; !rc && k < i->n; k++) {
    const struct pc_replica_member *m = &i->members[k];
    rc = pc_buf_u64(b, m->id) || put_str0(b, m->address) || pc_buf_u8(b, m->role) ||
         pc_buf_u64(b, m->match) || pc_buf_u64(b, m->silent_ms);
  }
  return rc ? -1 : 0;
}

int pc_replica_info_decode(pc_rd_t *r, pc_replica_info_t *i) {
  memset(i, 0, sizeof *i);
  if (rd_str0(r, i->group, sizeof i->group) || rd_str0(r, i->address, sizeof i->address))
    return -1;
  i->id = pc_rd_u64(r);
  i->state = pc_rd_u8(r);
  i->ready = pc_rd_u8(r);
  i->term = pc_rd_u64(r);
  i->commit = pc_rd_u64(r);
  i->applied = pc_rd_u64(r);
  i->last_index = pc_rd_u64(r);
  i->snapshot_index = pc_rd_u64(r);
  i->leader_id = pc_rd_u64(r);
  if (rd_str0(r, i->leader, sizeof i->leader)) return -1;
  i->lease_ms = pc_rd_u64(r);
  i->elections = pc_rd_u64(r);
  i->snapshots_sent = pc_rd_u64(r);
  i->snapshots_received = pc_rd_u64(r);
  i->snapshot_bytes_sent = pc_rd_u64(r);
  i->snapshot_bytes_received = pc_rd_u64(r);
  i->n = pc_rd_u32(r);
  if (!r->ok || i->n > sizeof i->members / sizeof i->members[0]) return -1;
  for (uint32_t k = 0; k < i->n; k++) {
    struct pc_replica_member *m = &i->members[k];
    m->id = pc_rd_u64(r);
    if (rd_str0(r, m->address, sizeof m->address)) return -1;
    m->role = pc_rd_u8(r);
    m->match = pc_rd_u64(r);
    m->silent_ms = pc_rd_u64(r);
  }
  return r->ok ? 0 : -1;
}

/* ---- names ----------------------------------------------------------------- */

void pc_repl_address(char *out, size_t cap, const char *server, uint64_t incarnation) {
  snprintf(out, cap, "%s#%016" PRIx64, server, incarnation);
}

int pc_repl_address_server(const char *address, char *out, size_t cap) {
  const char *hash = strchr(address, '#');
  size_t n = hash ? (size_t)(hash - address) : 0;
  if (!hash || n == 0 || n >= cap) return -1;
  memcpy(out, address, n);
  out[n] = '\0';
  return 0;
}

uint64_t pc_repl_id(const char *server, uint64_t incarnation) {
  uint64_t id = raft_digest(server, incarnation);
  return id ? id : 1;
}
