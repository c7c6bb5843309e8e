/* tso_wire.h — the timestamp oracle's protocol over rpc.h: its ops and the
 * codecs of their request and reply bodies, shared by the server
 * (tso_server.h, and tso_election.h's oracle with standbys) and the clients
 * (tso_client.h, and tso_locator.h's follower of the leader); and the nodes
 * under a cluster's ZooKeeper root through which an oracle with standbys
 * is elected and its clients find the leader.
 *   0x10 TIMESTAMPS  u32 count (1..65536)    -> u64 first   (count consecutive timestamps)
 * The bound keeps one request from moving the oracle far past its clock: 65536
 * is a quarter of a millisecond's logical counter.
 *   0x11 INFO        (empty)                  -> u64 last issued
 * The oracle of a served data directory (no ZooKeeper) also keeps what its
 * clients' snapshots hold back (tso/snapshots.h):
 *   0x12 REPORT      u64 client, u64 floor    -> u64 last issued
 *                    floor: no transaction of the client reads below it,
 *                    now or later; 0: the client leaves. The reply is what
 *                    INFO answers, the client's next floor at most
 *   0x13 OLDEST      (empty)                  -> u64 oldest floor (UINT64_MAX:
 *                    none), u8 complete, u32 clients
 * An oracle with standbys refuses both (unknown op): a cluster's clients
 * report in ZooKeeper.
 */
#ifndef PC_TSO_TSO_WIRE_H
#define PC_TSO_TSO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"

enum {
  PC_TSO_OP_TIMESTAMPS = 0x10,
  PC_TSO_OP_INFO = 0x11,
  PC_TSO_OP_REPORT = 0x12,
  PC_TSO_OP_OLDEST = 0x13
};

/* The op's name for metrics, or NULL for none. */
static inline const char *pc_tso_op_name(uint8_t op) {
  return op == PC_TSO_OP_TIMESTAMPS ? "timestamps"
         : op == PC_TSO_OP_INFO     ? "info"
         : op == PC_TSO_OP_REPORT   ? "report"
         : op == PC_TSO_OP_OLDEST   ? "oldest"
                                    : NULL;
}
#define PC_TSO_MAX_BATCH 65536u

/* The oracle's nodes, relative to the cluster's root (docs/ARCHITECTURE.md,
 * "Coordination"):
 *   tso/election/n-<seq>  ephemeral sequential, one per oracle process; data
 *                         "host:port" where it serves. The lowest leads; every
 *                         other one watches only its predecessor. Clients
 *                         read the leader's address from here.
 *   tso/bound             the persisted upper bound (decimal text): every
 *                         timestamp ever served is below it. Written only as
 *                         {check(own election node), set(bound, expected
 *                         version)}, so a deposed leader's write fails.
 * An advertised address fits in PC_TSO_ADDR_CAP bytes with its NUL. */
#define PC_TSO_ZK_ELECTION "tso/election"
#define PC_TSO_ZK_CANDIDATE PC_TSO_ZK_ELECTION "/n-"
#define PC_TSO_ZK_BOUND "tso/bound"
#define PC_TSO_ADDR_CAP 300

/* TIMESTAMPS' request body; nonzero on allocation failure. */
int pc_tso_put_timestamps(pc_buf_t *b, uint32_t count);
/* Decodes TIMESTAMPS' request: PC_INVALID unless it is exactly a count of
 * 1..PC_TSO_MAX_BATCH. */
pc_status_t pc_tso_get_timestamps(const char *body, size_t len, uint32_t *count,
                                  pc_error_t *err);
/* INFO's request: PC_INVALID unless the body is empty. */
pc_status_t pc_tso_get_info(const char *body, size_t len, pc_error_t *err);

/* Both replies are one u64 (TIMESTAMPS' first, INFO's last issued); nonzero
 * on allocation failure. */
int pc_tso_put_reply(pc_buf_t *b, uint64_t v);
/* PC_CORRUPTION unless the reply body is exactly one u64. */
pc_status_t pc_tso_get_reply(const char *body, size_t len, uint64_t *v, pc_error_t *err);

/* REPORT's request; nonzero on allocation failure. */
int pc_tso_put_report(pc_buf_t *b, uint64_t client, uint64_t floor);
/* Decodes REPORT's request: PC_INVALID unless it is exactly two u64, the
 * client not 0. */
pc_status_t pc_tso_get_report(const char *body, size_t len, uint64_t *client, uint64_t *floor,
                              pc_error_t *err);
/* OLDEST's request: PC_INVALID unless the body is empty. */
pc_status_t pc_tso_get_oldest(const char *body, size_t len, pc_error_t *err);

/* OLDEST's reply: the oldest floor of the live clients (UINT64_MAX: none),
 * whether the oracle has heard from every client it may have (0 for a
 * while after it starts), and how many report. */
typedef struct pc_tso_oldest {
  uint64_t oldest;
  int complete;
  uint32_t clients;
} pc_tso_oldest_t;
int pc_tso_put_oldest_reply(pc_buf_t *b, const pc_tso_oldest_t *o);
/* PC_CORRUPTION unless the body is exactly OLDEST's reply. */
pc_status_t pc_tso_get_oldest_reply(const char *body, size_t len, pc_tso_oldest_t *o,
                                    pc_error_t *err);

#endif
