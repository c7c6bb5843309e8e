/* repl_wire.h — the replication protocol between tablet servers: its ops on
 * net/rpc.h (the range 0x40..0x4f of a tablet server's port, served to the
 * system identity only) and the codecs of their bodies. Every integer is
 * big-endian, str is u32 length + bytes (base/buf.h).
 *
 *   0x40 RAFT       u32 n n*message                   -> (empty)
 *                   Raft's messages for the replicas of the receiving
 *                   server, delivered in order; answered once queued.
 *   0x41 SNAP_OPEN  str group                         -> u64 stream u64 applied
 *                   a stream of the group's store as this server holds it
 *                   now (core/store_repl.h), at log index `applied`
 *   0x42 SNAP_NEXT  u64 stream                        -> u8 done str chunk
 *                   the next chunk (about PC_REPL_CHUNK bytes); done = 1: the last
 *   0x43 SNAP_CLOSE u64 stream                        -> (empty)
 *   0x44 MEMBER     u8 action str group str server    -> str text
 *                   on the group's leader: add (1) a replica on server,
 *                   remove (2) server's replica, move (3) the leadership to
 *                   server; rejoin (4) server, whose replica lost its state
 *                   and starts again as id at address (u64 id str address
 *                   follow)
 *   0x45 REPLICAS   (empty)                           -> u32 n n*replica info
 *   0x46 CREATE     str group str start str end       -> u64 id str address
 *                   an empty replica of group on this server, which waits
 *                   for its leader to add it and send it a snapshot
 * A replica removed from its group is not told: it hears from no leader,
 * so it never leads or answers (a client is sent on to the leader), and its
 * files stay on its server until the server is rebuilt (`tablet
 * replace-server`).
 *
 * A message (Raft's struct raft_message and what this project adds):
 *   str group u64 to u64 from str from_address u8 type
 *   u64 stamp_term u64 stamp u64 echo_term u64 echo  body
 * stamp is the sender's clock when it sent an AppendEntries (its term
 * stamp_term); echo the last such stamp the sender received from the
 * message's receiver, returned with AppendEntries results: a leader learns
 * from them when a majority last heard from it, which bounds its lease
 * (replica/group.c). Bodies by type:
 *   1 AppendEntries       u64 term u64 prev_index u64 prev_term u64 commit
 *                         u32 n n*(u64 term u8 type str data)
 *   2 AppendEntriesResult u64 term u64 rejected u64 last_index
 *   3 RequestVote         u64 term u64 candidate u64 last_index u64 last_term
 *                         u8 disrupt u8 pre_vote
 *   4 RequestVoteResult   u64 term u8 granted u8 pre_vote
 *   5 InstallSnapshot     u64 term u64 last_index u64 last_term u64 conf_index
 *                         str conf str data
 *   6 TimeoutNow          u64 term u64 last_index u64 last_term
 */
#ifndef PC_REPLICA_REPL_WIRE_H
#define PC_REPLICA_REPL_WIRE_H

#include <raft.h>
#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"
#include "replica/raft_log.h"

enum {
  PC_REPL_OP_RAFT = 0x40,
  PC_REPL_OP_SNAP_OPEN = 0x41,
  PC_REPL_OP_SNAP_NEXT = 0x42,
  PC_REPL_OP_SNAP_CLOSE = 0x43,
  PC_REPL_OP_MEMBER = 0x44,
  PC_REPL_OP_REPLICAS = 0x45,
  PC_REPL_OP_CREATE = 0x46,
  PC_REPL_OP_LAST = 0x4f,
};

enum { PC_MEMBER_ADD = 1, PC_MEMBER_REMOVE = 2, PC_MEMBER_MOVE = 3, PC_MEMBER_REJOIN = 4 };

#define PC_REPL_CHUNK (1u << 20)
#define PC_REPL_MAX_ENTRIES 65536u

/* A message as it travels, with what the project adds to Raft's. */
typedef struct pc_repl_msg {
  char group[PC_RAFT_GROUP_MAX + 1];
  uint64_t to;
  uint64_t stamp_term, stamp, echo_term, echo;
  char from_address[256];
  struct raft_message m; /* m.server_id: the sender; m.server_address: from_address */
} pc_repl_msg_t;

/* Appends msg; -1 out of memory. */
int pc_repl_msg_encode(pc_buf_t *out, const pc_repl_msg_t *msg);

/* Decodes one message from r into *msg, whose buffers (entries and their
 * batch, a snapshot's configuration and data) are raft_malloc'd, as libraft
 * takes them; -1 when malformed (nothing to free then). A message decoded
 * and not handed to libraft is released with pc_repl_msg_release. */
int pc_repl_msg_decode(pc_rd_t *r, pc_repl_msg_t *msg);
void pc_repl_msg_release(pc_repl_msg_t *msg);

/* One replica's state, for REPLICAS (status, doctor, metrics). */
typedef struct pc_replica_info {
  char group[PC_RAFT_GROUP_MAX + 1];
  char address[256]; /* this replica: server#incarnation */
  uint64_t id;
  uint8_t state;     /* RAFT_FOLLOWER, RAFT_CANDIDATE, RAFT_LEADER, 0 unavailable */
  uint8_t ready;     /* leads and serves (its first entry of the term applied) */
  uint64_t term, commit, applied, last_index, snapshot_index;
  uint64_t leader_id;
  char leader[256];  /* the leader's address as this replica knows it, "" none */
  uint64_t lease_ms; /* leader: how long its lease has left, 0 none */
  uint64_t elections, snapshots_sent, snapshots_received, snapshot_bytes_sent,
      snapshot_bytes_received;
  /* the configuration and, on the leader, each member's match index and
   * milliseconds since it last answered */
  uint32_t n;
  struct pc_replica_member {
    uint64_t id;
    char address[256];
    uint8_t role; /* RAFT_VOTER, RAFT_STANDBY, RAFT_SPARE */
    uint64_t match;
    uint64_t silent_ms; /* UINT64_MAX: never heard from (or not the leader) */
  } members[16];
} pc_replica_info_t;

int pc_replica_info_encode(pc_buf_t *out, const pc_replica_info_t *i);
int pc_replica_info_decode(pc_rd_t *r, pc_replica_info_t *i);

/* "name#incarnation" (16 hex digits): a replica's Raft address. */
void pc_repl_address(char *out, size_t cap, const char *server, uint64_t incarnation);
/* The server name of an address (up to '#') into out; -1 malformed. */
int pc_repl_address_server(const char *address, char *out, size_t cap);
/* The Raft id of a replica of server in its incarnation. */
uint64_t pc_repl_id(const char *server, uint64_t incarnation);

#endif
