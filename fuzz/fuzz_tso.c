/* fuzz_tso.c — the timestamp oracle's request handler (tso/tso_server.c),
 * as a served directory's oracle serves it (with the record of its clients'
 * snapshots), against any sequence of requests (chunks of fuzz_util.h: tag =
 * op, bytes = body), on a real oracle whose bound file is in the scratch
 * directory. A request is answered or refused with a message; the
 * timestamps it hands out strictly increase across every request of the
 * oracle, INFO never reports less than the last one handed out, and OLDEST
 * names a floor exactly when some client reports one.
 *
 * Batches of up to a million timestamps move the oracle ahead of the clock
 * (2^PC_TS_LOGICAL_BITS timestamps a millisecond); once it is further ahead
 * than its window, every request waits for the bound file. So the window is long, and the
 * oracle is replaced by a new one on a new file when it gets half a window
 * ahead, to keep the run fast. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "core/keys.h"
#include "fuzz/fuzz.h"
#include "fuzz/fuzz_util.h"
#include "tso/tso_server.h"

#define MAX_REQUESTS 16

#define WINDOW_MS 600000u

static pc_oracle_t *oracle;
static pc_snapshots_t *snapshots;
static uint64_t last_issued;
static unsigned generation;

static void close_oracle(void) {
  pc_oracle_close(oracle);
  pc_snapshots_destroy(snapshots);
  oracle = NULL;
  snapshots = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (oracle && pc_oracle_last(oracle) >> PC_TS_LOGICAL_BITS > pc_now_wall_ms() + WINDOW_MS / 2)
    close_oracle();
  if (!oracle) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tso-%u.bound", fuzz_scratch_dir(), generation++);
    pc_error_t err;
    oracle = pc_oracle_open(path, WINDOW_MS, &err);
    if (!oracle) fprintf(stderr, "pc_oracle_open: %s\n", err.text);
    FUZZ_CHECK(oracle != NULL);
    snapshots = pc_snapshots_create(PC_SNAPSHOT_GRACE_MS);
    FUZZ_CHECK(snapshots != NULL);
    last_issued = 0;
    if (generation == 1) atexit(close_oracle);
  }
  pc_tso_served_t served = {oracle, snapshots};
  fuzz_chunks_t in = {data, size, 0};
  uint8_t op;
  const char *body;
  size_t len;
  for (int k = 0; k < MAX_REQUESTS && fuzz_next_chunk(&in, &op, &body, &len); k++) {
    pc_buf_t reply = {0};
    pc_error_t err;
    pc_error_clear(&err);
    pc_status_t st = pc_tso_served_handler(&served, op, body, len, &reply, &err);
    if (st != PC_OK) {
      FUZZ_CHECK(st <= PC_STATUS_MAX && err.code == st && err.text[0]);
      FUZZ_CHECK(reply.len == 0);
    } else if (op == PC_TSO_OP_REPORT) {
      FUZZ_CHECK(reply.len == 8);
      pc_rd_t r = {reply.p, reply.len, 0, 1};
      FUZZ_CHECK(pc_rd_u64(&r) >= last_issued); /* what INFO answers */
    } else if (op == PC_TSO_OP_OLDEST) {
      pc_tso_oldest_t o;
      FUZZ_CHECK(pc_tso_get_oldest_reply(reply.p, reply.len, &o, &err) == PC_OK);
      FUZZ_CHECK(o.clients <= PC_SNAPSHOTS_PER_CONNECTION);
      FUZZ_CHECK((o.oldest == UINT64_MAX) == (o.clients == 0));
    } else {
      FUZZ_CHECK(reply.len == 8);
      pc_rd_t r = {reply.p, reply.len, 0, 1};
      uint64_t v = pc_rd_u64(&r);
      if (op == PC_TSO_OP_TIMESTAMPS) {
        pc_rd_t q = {body, len, 0, 1};
        uint32_t count = pc_rd_u32(&q);
        FUZZ_CHECK(count >= 1 && count <= PC_TSO_MAX_BATCH);
        FUZZ_CHECK(v > last_issued);
        last_issued = v + count - 1;
      } else {
        FUZZ_CHECK(op == PC_TSO_OP_INFO && v >= last_issued);
      }
    }
    pc_buf_free(&reply);
  }
  return 0;
}
