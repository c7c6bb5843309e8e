/* fuzz_tablet_store.c — the tablet server's request handler (tablet/tablet.c)
 * on a real local store, against any sequence of request bodies, as a peer
 * on the network could send them: what the store does with whatever a
 * request that decodes asks (fuzz_tablet.c checks the handler alone, many
 * times faster). An input is a sequence of chunks (fuzz_util.h): the tag is
 * the op, the bytes its body. Every request gets a reply body that starts
 * with a known store status and ends with its message; the handler fails
 * only for an unknown op; a failure's message says why; nothing crashes.
 *
 * The store lives in the scratch directory (in /dev/shm under fuzz/run.sh),
 * without fsync (pc_local_options_t.sync 0) and with a 1 MiB memtable, and
 * is replaced by an empty one (the old one removed) every STORE_INPUTS
 * inputs, so that what earlier inputs
 * wrote (a garbage-collection safe point that refuses every read, say) does
 * not narrow what later ones can reach, and raw scans stay short. A GC
 * request's rate is set to 0 (no bound) before it is served: a low rate
 * makes a pass sleep by design. fuzz/run.sh runs it with -detect_leaks=0:
 * the store keeps memory between inputs, so libFuzzer would run
 * LeakSanitizer after each one. Instead the target looks for leaks itself
 * after every tenth store it has closed, and when the run ends. */
#include <sanitizer/lsan_interface.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "core/keys.h"
#include "fuzz/fuzz.h"
#include "fuzz/fuzz_util.h"
#include "tablet/tablet.h"

#define STORE_INPUTS 1000
#define LEAK_CHECK_STORES 10
#define MAX_REQUESTS 16
#define REPLY_CAP (64u << 10)

static pc_tablet_t *tablet;
static char path[4200]; /* the store's directory */
static unsigned inputs, generation;
static int running = 1;
static uint64_t clock_ts = 1000;

static pc_status_t ts_source(void *ctx, uint64_t *ts, pc_error_t *err) {
  (void)ctx;
  (void)err;
  *ts = ++clock_ts;
  return PC_OK;
}

static void open_tablet(void) {
  snprintf(path, sizeof path, "%s/store-%u", fuzz_scratch_dir(), generation++);
  pc_local_options_t lo = {1, 0, 1u << 20, 1u << 20, 1u << 20, 0};
  pc_error_t err;
  pc_store_t *s = pc_local_store_open(path, &lo, &err);
  if (!s) fprintf(stderr, "pc_local_store_open: %s\n", err.text);
  FUZZ_CHECK(s != NULL);
  /* every row but those from "\xff\xff" on: a request there is misrouted */
  pc_row_range_t range = {"", 0, "\xff\xff", 2};
  tablet = pc_tablet_create("fuzz", s, &range, ts_source, NULL);
  FUZZ_CHECK(tablet != NULL);
  /* every other store with a server's limits (a lease cap, replies of at
   * most REPLY_CAP bytes: scans past it refused, lock scans cut), the others
   * with none (the handler's own caps) */
  if (generation % 2) pc_tablet_set_limits(tablet, 60000, REPLY_CAP);
}

/* Closes the store, after which nothing of it may be left: checked after
 * every LEAK_CHECK_STORES stores (a leak stays reachable to the check until
 * then, and one check walks the whole heap, libFuzzer's corpus included,
 * which costs as much as a few hundred inputs), and when the run ends. */
static void close_tablet(void) {
  pc_tablet_destroy(tablet);
  tablet = NULL;
  fuzz_remove_tree(path); /* else ten million inputs leave ten thousand stores in memory */
  if (generation % LEAK_CHECK_STORES == 0 || !running)
    FUZZ_CHECK(__lsan_do_recoverable_leak_check() == 0);
}

static void close_at_exit(void) {
  running = 0;
  if (tablet) close_tablet();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (tablet && inputs % STORE_INPUTS == 0) close_tablet();
  if (!tablet) {
    open_tablet();
    if (generation == 1) atexit(close_at_exit);
  }
  inputs++;
  fuzz_chunks_t in = {data, size, 0};
  uint8_t op;
  const char *body;
  size_t len;
  char copy[8 + 4];
  for (int k = 0; k < MAX_REQUESTS && fuzz_next_chunk(&in, &op, &body, &len); k++) {
    if (op == PC_TABLET_OP_GC && len == sizeof copy) {
      memcpy(copy, body, 8);
      memset(copy + 8, 0, 4);
      body = copy;
    }
    pc_buf_t reply = {0};
    pc_error_t err;
    pc_error_clear(&err);
    pc_status_t st = pc_tablet_rpc_handler(tablet, op, body, len, &reply, &err);
    if (op < PC_TABLET_OP_GET || op > PC_TABLET_OP_CLEAR_NOTIFY_MANY) {
      FUZZ_CHECK(st == PC_INVALID && err.text[0]);
    } else {
      FUZZ_CHECK(st == PC_OK);
      /* u8 status, the op's payload, str message */
      FUZZ_CHECK(reply.len >= 5);
      uint8_t status = (uint8_t)reply.p[0];
      FUZZ_CHECK(status <= PC_STATUS_MAX);
      size_t mlen = 0, at = reply.len;
      /* the message is last; find a length prefix that ends the reply */
      int found = 0;
      for (size_t m = 0; m + 5 <= reply.len && !found; m++) {
        pc_rd_t r = {reply.p + reply.len - 4 - m, 4, 0, 1};
        if (pc_rd_u32(&r) == m) {
          found = 1;
          mlen = m;
          at = reply.len - 4 - m;
        }
        if (m >= 4096) break;
      }
      /* a failure says why (not found is an answer, not a failure) */
      int unexplained = status != PC_OK && status != PC_NOT_FOUND && mlen == 0;
      if (!found || at < 1 || unexplained)
        fprintf(stderr, "op 0x%02x: reply of %zu bytes, status %u, message of %zu bytes\n", op,
                reply.len, status, mlen);
      FUZZ_CHECK(found && at >= 1);
      FUZZ_CHECK(!unexplained);
    }
    pc_buf_free(&reply);
  }
  return 0;
}
