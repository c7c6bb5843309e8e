/* wait.c — for any client: the count of pending notifications per
 * (table, column), and pc_notify_wait, which returns once no notification is
 * pending and nothing that could create one is in flight (its comment below
 * says exactly what it guarantees).
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/failpoint.h"
#include "core/keys.h"
#include "tso/tso_client.h"

typedef struct pend {
  char *table, *col; /* col: clen bytes */
  size_t clen;
  uint64_t count;
} pend_t;

typedef struct pending {
  pend_t *v;
  size_t n, cap;
  uint64_t total;
  int oom;
  note_t last; /* where the next page starts */
  size_t in_page;
} pending_t;

static int pend_cmp(const char *t1, const char *c1, size_t l1, const pend_t *b) {
  int r = strcmp(t1, b->table);
  return r ? r : pc_bytes_cmp(c1, l1, b->col, b->clen);
}

static int pending_add(void *ctx, const pc_notification_t *n) {
  pending_t *p = ctx;
  p->total++;
  p->in_page++;
  pc_note_free(&p->last);
  if (pc_note_copy(&p->last, n) != 0) {
    p->oom = 1;
    return 1;
  }
  const pc_cell_t *c = &n->cell;
  size_t lo = 0, hi = p->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int r = pend_cmp(c->table, c->col, c->clen, &p->v[mid]);
    if (r == 0) {
      p->v[mid].count++;
      return 0;
    }
    if (r < 0) hi = mid;
    else lo = mid + 1;
  }
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 16;
    pend_t *v = realloc(p->v, cap * sizeof *v);
    if (!v) {
      p->oom = 1;
      return 1;
    }
    p->v = v;
    p->cap = cap;
  }
  pend_t e = {strdup(c->table), malloc(c->clen ? c->clen : 1), c->clen, 1};
  if (!e.table || !e.col) {
    free(e.table);
    free(e.col);
    p->oom = 1;
    return 1;
  }
  memcpy(e.col, c->col, c->clen);
  memmove(&p->v[lo + 1], &p->v[lo], (p->n - lo) * sizeof *p->v);
  p->v[lo] = e;
  p->n++;
  return 0;
}

pc_status_t pc_notify_pending(pc_db_t *db, uint64_t *total,
                              int (*fn)(void *ctx, const char *table, const char *col, size_t clen,
                                        uint64_t count),
                              void *ctx, pc_error_t *err) {
  pc_error_clear(err);
  if (total) *total = 0;
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  if (!db->store->ops->scan_notify)
    return pc_error_set(err, PC_INVALID, "this store keeps no notifications");
  pending_t p = {0};
  pc_status_t st = PC_OK;
  int first = 1;
  for (;;) {
    p.in_page = 0;
    note_t after = p.last;
    p.last.mem = NULL; /* pending_add replaces it; after keeps the old copy */
    st = db->store->ops->scan_notify(db->store, 0, PC_NOTIFY_BUCKETS, first ? NULL : &after.n,
                                     PC_NOTIFY_PAGE, pending_add, &p, err);
    if (p.last.mem == NULL) p.last = after; /* nothing new: keep where we were */
    else pc_note_free(&after);
    first = 0;
    if (st == PC_OK && p.oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
    if (st != PC_OK || p.in_page < PC_NOTIFY_PAGE) break;
  }
  if (st == PC_OK && total) *total = p.total;
  for (size_t i = 0; i < p.n; i++) {
    if (st == PC_OK && fn && fn(ctx, p.v[i].table, p.v[i].col, p.v[i].clen, p.v[i].count))
      fn = NULL;
    free(p.v[i].table);
    free(p.v[i].col);
  }
  free(p.v);
  pc_note_free(&p.last);
  return st;
}

/* The first lock or notification met, for the message (the copy may fail:
 * found says it was there). */
typedef struct first_lock {
  int found;
  uint64_t start_ts;
  char name[200];
} first_lock_t;

static int any_lock(void *ctx, const pc_lock_info_t *lock) {
  first_lock_t *f = ctx;
  f->found = 1;
  f->start_ts = lock->start_ts;
  pc_cell_name(lock->ctable.len ? lock->ctable.p : "?", lock->crow.p, lock->crow.len, lock->ccol.p,
            lock->ccol.len, f->name, sizeof f->name);
  return 1;
}

typedef struct first_note {
  int found, weak;
  uint64_t ts;
  char name[200];
} first_note_t;

static int any_note(void *ctx, const pc_notification_t *n) {
  first_note_t *f = ctx;
  const pc_cell_t *c = &n->cell;
  f->found = 1;
  f->weak = n->weak;
  f->ts = n->ts;
  pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, f->name, sizeof f->name);
  return 1;
}

/* The last timestamp the oracle issued, to anyone. */
static pc_status_t oracle_last(pc_db_t *db, uint32_t timeout_ms, uint64_t *last,
                               pc_error_t *err) {
  if (db->oracle) {
    *last = pc_oracle_last(db->oracle);
    return PC_OK;
  }
  if (db->tso) return pc_tso_remote_info(db->tso, timeout_ms, last, err);
  if (db->oracle_info) return db->oracle_info(db, timeout_ms, last, err);
  return pc_error_set(err, PC_INVALID, "wait: the database has no timestamp oracle to ask");
}

/* A failure record whose retry was asked for (parked.c), met by a scan. */
typedef struct retry_seen {
  int found;
  pc_buf_t row, col; /* the last cell delivered, where the next page starts */
  size_t n;
  char name[200];
  int oom;
} retry_seen_t;

static int any_retry(void *ctx, const pc_cell_t *c, const char *v, size_t vlen) {
  retry_seen_t *r = ctx;
  r->n++;
  r->row.len = r->col.len = 0;
  if (pc_buf_append(&r->row, c->row, c->rlen) || pc_buf_append(&r->col, c->col, c->clen)) {
    r->oom = 1;
    return 1;
  }
  if (c->clen == 5 && memcmp(c->col, "retry", 5) == 0 && vlen == 1 && v[0] == '1') {
    r->found = 1;
    pc_cell_name(c->table, c->row, c->rlen, c->col, c->clen, r->name, sizeof r->name);
    return 1;
  }
  return 0;
}

/* Whether a retry of a parked notification was asked for and has not run,
 * read at read_ts (no timestamp is taken). */
static pc_status_t retry_pending(pc_db_t *db, uint64_t read_ts, retry_seen_t *r,
                                 pc_error_t *err) {
  static const char lo[] = "failure/", hi[] = "failure0";
  const size_t page = 1024;
  pc_status_t st;
  do {
    size_t before = r->n;
    int resume = r->row.len > 0;
    pc_lock_info_t lock = {0};
    st = db->store->ops->scan(db->store, PC_SYSTEM_TABLE, resume ? r->row.p : lo,
                              resume ? r->row.len : sizeof lo - 1, resume ? r->col.p : NULL,
                              r->col.len, hi, sizeof hi - 1, read_ts, page, any_retry, r, &lock,
                              err);
    pc_lock_info_free(&lock);
    if (st == PC_LOCKED) { /* a record being written: not idle */
      pc_error_clear(err);
      r->found = 1;
      snprintf(r->name, sizeof r->name, "a failure record being written");
      return PC_OK;
    }
    if (st == PC_OK && r->oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
    if (st != PC_OK || r->found || r->n - before < page) break;
    r->n--; /* the next page starts at the last cell, delivered again */
  } while (1);
  return st;
}

/* The first registration whose backfill is not finished. */
typedef struct unfinished {
  int found, state;
  uint64_t presented;
  char name[PC_MAX_OBSERVER_NAME + 1];
} unfinished_t;

static int any_unfinished(void *ctx, const pc_observer_info_t *o) {
  unfinished_t *u = ctx;
  if (o->problem || o->state == PC_BACKFILL_DONE) return 0;
  u->found = 1;
  u->state = o->state;
  u->presented = o->presented;
  snprintf(u->name, sizeof u->name, "%.*s", (int)o->name_len, o->name);
  return 1;
}

/* One look (see pc_notify_wait). PC_OK when idle, PC_BUSY with why's text
 * saying what is still going on, or an error. */
static pc_status_t idle_once(pc_db_t *db, uint32_t timeout_ms, pc_error_t *why, pc_error_t *err) {
  uint64_t before, last;
  /* a registration still presenting the cells written before it: read
   * before the check, whose timestamps its own reading would spoil */
  unfinished_t u = {0};
  pc_status_t st = pc_db_observers_within(db, timeout_ms, any_unfinished, &u, err);
  if (st != PC_OK) return st;
  if (u.found && u.state == PC_BACKFILL_REGISTERING)
    return pc_error_set(why, PC_BUSY, "observer '%s' is not yet registered with every store",
                        u.name);
  if (u.found)
    return pc_error_set(why, PC_BUSY,
                        "the backfill of observer '%s' is not finished (%" PRIu64
                        " cells presented)",
                        u.name, u.presented);
  st = pc_db_ts(db, timeout_ms, &before, err);
  if (st != PC_OK) return st;
  first_lock_t lock = {0};
  st = db->store->ops->scan_locks(db->store, UINT64_MAX, any_lock, &lock, err);
  if (st == PC_BUSY) { /* more locks than one reply carries */
    pc_error_clear(err);
    return pc_error_set(why, PC_BUSY, "locks are held");
  }
  if (st != PC_OK) return st;
  if (lock.found)
    return pc_error_set(why, PC_BUSY, "%s is locked by transaction %" PRIu64, lock.name,
                        lock.start_ts);
  first_note_t note = {0};
  st = db->store->ops->scan_notify(db->store, 0, PC_NOTIFY_BUCKETS, NULL, 1, any_note, &note, err);
  if (st != PC_OK) return st;
  if (note.found)
    return pc_error_set(why, PC_BUSY, "%s has a notification (%s, %" PRIu64 ")", note.name,
                        note.weak ? "weak" : "strong", note.ts);
  retry_seen_t retry = {0};
  st = retry_pending(db, before, &retry, err);
  pc_buf_free(&retry.row);
  pc_buf_free(&retry.col);
  if (st != PC_OK) return st;
  if (retry.found)
    return pc_error_set(why, PC_BUSY, "a retry of a parked notification was asked for (%s)",
                        retry.name);
  if ((st = PC_FAILPOINT("worker.wait_scanned", err)) != PC_OK) return st;
  if ((st = oracle_last(db, timeout_ms, &last, err)) != PC_OK) return st;
  if (last != before)
    return pc_error_set(why, PC_BUSY, "timestamps were issued during the check (%" PRIu64
                        " after %" PRIu64 ")", last, before);
  return PC_OK;
}

/* What a successful wait guarantees (the order of the steps matters):
 *   0. every registration's backfill is finished (read first: its reading
 *      takes a timestamp, which step 4 would see);
 *   1. before = a fresh timestamp;
 *   2. no lock anywhere (scan_locks);
 *   3. no notification anywhere (a full scan_notify), and no retry of a
 *      parked notification asked for and not yet run (the failure records
 *      read at `before`, which takes no timestamp);
 *   4. the oracle's last issued timestamp is still `before`: nobody, this
 *      client included, took a timestamp during steps 2 and 3. This asks the
 *      oracle what it issued (pc_oracle_last, or the daemon's INFO) rather
 *      than taking a second timestamp and comparing, because a hybrid oracle
 *      jumps to the clock when the millisecond changes: "the next timestamp
 *      is before + 1" would fail whenever the check spans a millisecond. A
 *      batcher's fetch that handed `before` to this thread and others their
 *      timestamps fails it too (conservative).
 * Then every transaction whose locks were all written before step 2 has had
 * its notifications processed: a lock present at step 2 fails the check; a
 * transaction committed before it left its notifications, which step 3
 * finds unless an observer transaction has consumed them; such an observer
 * commits before deleting the notification (found at 3 if it had not yet),
 * and its commit takes a commit_ts, which step 4 sees unless it came before
 * step 1, in which case its own notifications and locks were there for steps
 * 2 and 3 to find, and so on down the chain. Not covered: a transaction that
 * took its start_ts before step 1 and writes its first lock after step 2 —
 * it is still running, and commits after the wait returns — nor a
 * registration made after step 0, which is as concurrent with the wait. */
pc_status_t pc_notify_wait(pc_db_t *db, uint32_t timeout_ms, pc_error_t *err) {
  pc_error_clear(err);
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  if (!db->store->ops->scan_notify)
    return pc_error_set(err, PC_INVALID, "this store keeps no notifications");
  uint64_t deadline = pc_now_mono_ms() + timeout_ms;
  uint32_t pause = 2;
  pc_error_t why, failed; /* the last "still busy", the last check that could not finish */
  pc_error_clear(&why);
  pc_error_clear(&failed);
  for (;;) {
    uint64_t now = pc_now_mono_ms();
    uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
    pc_error_t e;
    pc_status_t st = idle_once(db, (uint32_t)pc_min_u64(left, db->opts.timeout_ms), &why, &e);
    if (st == PC_OK) return PC_OK;
    if (st != PC_BUSY && st != PC_TIMEOUT && st != PC_UNAVAILABLE) {
      if (err) *err = e;
      return st;
    }
    if (st == PC_BUSY) pc_error_clear(&failed);
    else failed = e; /* a daemon did not answer: try again while time is left */
    now = pc_now_mono_ms();
    if (now >= deadline)
      return pc_error_set(err, PC_TIMEOUT, "wait: not idle after %u ms: %s%s%s", timeout_ms,
                          why.text[0] ? why.text : failed.text,
                          why.text[0] && failed.text[0] ? "; the last check failed: " : "",
                          why.text[0] ? failed.text : "");
    pc_sleep_ms((uint32_t)pc_min_u64(pause, deadline - now));
    pause = pause * 2 > 100 ? 100 : pause * 2;
  }
}

