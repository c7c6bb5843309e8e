/* fuzz_replies.c — the client's decoders of replies: the remote store
 * (tablet/store_remote.c) for every store operation (GET_MANY across one
 * tablet or both, and the observer set's OBSERVERS and OBSERVER among them),
 * the oracle's client (tso/tso_client.c) and `status`'s tablet INFO
 * (pc_tablet_remote_info), against any replies a tablet or an oracle could
 * send. The replies come
 * from fuzz_util.h's fake server, which this process's clients call without
 * a socket; the remote store has two tablets, rows [, "m") and ["m", ).
 *
 * Input: u8 which call, u8 flags, then the script of replies. Every call
 * returns a status of pc_status_t, never a crash; PC_LOCKED comes with the
 * lock filled in (store.h's contract), and so does a GET_MANY cell answered
 * PC_LOCKED; scans and listings deliver at most their limit. */
#include <string.h>

#include "base/error.h"
#include "core/keys.h"
#include "core/store.h"
#include "fuzz/fuzz.h"
#include "fuzz/fuzz_util.h"
#include "net/rpc.h"
#include "tablet/tablet.h"
#include "tso/tso_client.h"

#define LIMIT 5

static pc_store_t *store;
static pc_rpc_client_t *rpc;

static void close_all(void) {
  store->ops->close(store);
  pc_rpc_client_destroy(rpc);
}

static void open_all(void) {
  uint16_t port = fuzz_fake_server_port();
  pc_tablet_addr_t t[2] = {
      {"left", "127.0.0.1", port, {"", 0, "m", 1}, 0},
      {"right", "127.0.0.1", port, {"m", 1, "", 0}, 0},
  };
  pc_error_t err;
  store = pc_remote_store_open(t, 2, NULL, 1000, &err);
  FUZZ_CHECK(store != NULL);
  rpc = pc_rpc_client_create("127.0.0.1", port, NULL, &err);
  FUZZ_CHECK(rpc != NULL);
  atexit(close_all);
}

typedef struct seen {
  size_t n, stop_at;
} seen_t;

static int on_cell(void *ctx, const pc_cell_t *c, const char *v, size_t vlen) {
  seen_t *s = ctx;
  FUZZ_CHECK(c->table && (c->rlen == 0 || c->row) && (c->clen == 0 || c->col));
  FUZZ_CHECK(vlen == 0 || v);
  return ++s->n == s->stop_at;
}

static int on_raw(void *ctx, const pc_raw_cell_t *c) {
  seen_t *s = ctx;
  (void)c;
  return ++s->n == s->stop_at;
}

static int on_lock(void *ctx, const pc_lock_info_t *l) {
  seen_t *s = ctx;
  FUZZ_CHECK(l->ptable.len == 0 || l->ptable.p);
  return ++s->n == s->stop_at;
}

static int on_note(void *ctx, const pc_notification_t *n) {
  seen_t *s = ctx;
  FUZZ_CHECK(n->cell.table && (n->cell.rlen == 0 || n->cell.row));
  return ++s->n == s->stop_at;
}

static int on_observer(void *ctx, const pc_store_observer_t *o) {
  seen_t *s = ctx;
  FUZZ_CHECK(o->name && strlen(o->name) <= 64 && o->table && (o->clen == 0 || o->col));
  return ++s->n == s->stop_at;
}

static pc_status_t ts_unused(void *ctx, uint64_t *ts, pc_error_t *err) {
  (void)ctx;
  *ts = 0;
  return pc_error_set(err, PC_INTERNAL, "a remote store takes no timestamp source");
}

/* A lock the store has not written: every byte 0xA5. */
static void poison(pc_lock_info_t *lock) { memset(lock, 0xA5, sizeof *lock); }

/* PC_LOCKED comes with the lock written (its copy is ours to release). */
static void check_lock(pc_status_t st, pc_lock_info_t *lock) {
  if (st != PC_LOCKED) return;
  pc_lock_info_t untouched;
  poison(&untouched);
  FUZZ_CHECK(lock->ptable.p != untouched.ptable.p && lock->ptable.p != NULL);
  FUZZ_CHECK(lock->ptable.p[lock->ptable.len] == '\0');
  pc_lock_info_free(lock);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  if (!store) open_all();
  uint8_t which = data[0] % 20;
  seen_t seen = {0, (data[1] & 7) ? (size_t)(data[1] & 7) : (size_t)-1};
  fuzz_fake_script(data + 2, size - 2);
  const pc_store_ops_t *ops = store->ops;
  pc_cell_t a = {"t", "a", 1, "c", 1}, z = {"t", "z", 1, "c", 1};
  pc_mutation_t muts[2] = {{a, PC_WRITE_PUT, "v", 1, 0},
                           {{"t", "b", 1, "c", 1}, PC_WRITE_DELETE, NULL, 0, 0}};
  pc_lock_spec_t spec = {a, 100, 3000, 7};
  pc_lock_info_t lock;
  poison(&lock);
  pc_error_t err;
  pc_error_clear(&err);
  pc_status_t st = PC_OK;
  switch (which) {
    case 0:
    case 1: {
      char *v = NULL;
      size_t vlen = 0;
      uint64_t fresh = 0;
      st = which == 0 ? ops->get(store, &z, 100, &v, &vlen, &lock, &err)
                      : ops->get_fresh(store, &z, ts_unused, NULL, &fresh, &v, &vlen, &lock, &err);
      if (st == PC_OK) FUZZ_CHECK(v != NULL);
      else FUZZ_CHECK(v == NULL && vlen == 0);
      if (which == 1 && (st == PC_OK || st == PC_NOT_FOUND || st == PC_LOCKED))
        FUZZ_CHECK(fresh != 0);
      check_lock(st, &lock);
      pc_free(v);
      break;
    }
    case 2:
      st = ops->prewrite(store, muts, 2, &spec, &lock, &err);
      check_lock(st, &lock);
      break;
    case 3: {
      pc_notify_clear_t clear = {a, 50, "obs", 4, 0, ""};
      uint64_t commit_ts = 0;
      st = ops->commit_one_phase(store, muts, 2, 100, ts_unused, NULL,
                                 (data[1] & 8) ? &clear : NULL, &commit_ts, &lock, &err);
      check_lock(st, &lock);
      break;
    }
    case 4: st = ops->commit(store, &a, 1, 100, 200, &err); break;
    case 5: st = ops->rollback(store, &a, 1, 100, &err); break;
    case 6: {
      pc_txn_state_t state = PC_TXN_ALIVE;
      uint64_t commit_ts = 0;
      st = ops->check_txn(store, &a, 100, 200, 0, &state, &commit_ts, &err);
      if (st == PC_OK) FUZZ_CHECK(state <= PC_TXN_ROLLED_BACK);
      break;
    }
    case 7: st = ops->heartbeat(store, &a, 100, 5000, &err); break;
    case 8:
      st = ops->scan(store, "t", "", 0, NULL, 0, NULL, 0, 100, LIMIT, on_cell, &seen, &lock, &err);
      FUZZ_CHECK(seen.n <= LIMIT);
      check_lock(st, &lock);
      break;
    case 9: st = ops->raw_scan(store, NULL, NULL, 0, NULL, 0, on_raw, &seen, &err); break;
    case 10: st = ops->scan_locks(store, 1000, on_lock, &seen, &err); break;
    case 11: {
      pc_store_gc_stats_t g;
      st = ops->gc(store, 100, 0, &g, &err);
      break;
    }
    case 12:
      st = ops->scan_notify(store, 0, PC_NOTIFY_BUCKETS, NULL, LIMIT, on_note, &seen, &err);
      FUZZ_CHECK(seen.n <= LIMIT);
      break;
    case 13: { /* one cell, or three of both tablets (flag 8): CLEAR_NOTIFY_MANY */
      pc_notify_clear_t clears[3] = {{a, 100, "obs", 4, 1, "x"},
                                     {z, 100, "obs", 4, 1, "x"},
                                     {{"t", "b", 1, "d", 1}, 100, "obs", 4, 1, "x"}};
      size_t n = (data[1] & 8) ? 3 : 1;
      st = ops->clear_notify(store, clears, n, &err);
      for (size_t k = 0; k < n; k++) {
        FUZZ_CHECK(strlen(clears[k].missing) <= PC_NOTIFY_MISSING_MAX);
        if (st != PC_OK && n == 1) FUZZ_CHECK(!clears[k].done);
      }
      break;
    }
    case 14: {
      uint64_t first = 0;
      st = pc_tso_remote_fetch(rpc, 10, 1000, &first, &err);
      break;
    }
    case 15: {
      uint64_t last = 0;
      st = pc_tso_remote_info(rpc, 1000, &last, &err);
      break;
    }
    case 17: { /* cells of both tablets (flag 8), or of the left one */
      pc_cell_t cells[3] = {a, z, {"t", "b", 1, "d", 1}};
      size_t n = (data[1] & 8) ? 3 : 1;
      pc_got_t got[3];
      memset(got, 0xA5, sizeof got);
      st = ops->get_many(store, cells, n, 100, got, &lock, &err);
      int locked = 0;
      for (size_t k = 0; k < n; k++) {
        if (st != PC_OK) {
          FUZZ_CHECK(got[k].value == NULL);
          continue;
        }
        FUZZ_CHECK(got[k].status == PC_OK || got[k].status == PC_NOT_FOUND ||
                   got[k].status == PC_LOCKED);
        FUZZ_CHECK((got[k].status == PC_OK) == (got[k].value != NULL));
        locked |= got[k].status == PC_LOCKED;
        pc_free(got[k].value);
      }
      if (locked) check_lock(PC_LOCKED, &lock);
      break;
    }
    case 18:
      st = ops->observer_list(store, on_observer, &seen, &err);
      FUZZ_CHECK(seen.stop_at == (size_t)-1 || seen.n <= seen.stop_at);
      break;
    case 19: {
      pc_store_observer_t o = {"obs", "t", "c", 1, 0};
      st = ops->observer_update(store, &o, (data[1] & 8) != 0, &err);
      break;
    }
    default: { /* 16 */
      pc_buf_t name = {0};
      uint64_t nops = 0;
      pc_tablet_gc_t g;
      st = pc_tablet_remote_info(rpc, 1000, &name, &nops, &g, &err);
      pc_buf_free(&name);
      break;
    }
  }
  FUZZ_CHECK((unsigned)st <= PC_STATUS_MAX);
  if (st != PC_OK) FUZZ_CHECK(err.code == st);
  return 0;
}
