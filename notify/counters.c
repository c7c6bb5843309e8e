/* counters.c — each observer's counters (runs, skipped, conflicts,
 * failures, parked) where every process can read them, and where they
 * outlive the worker that counted them.
 *
 * The counters live in the worker's journal (journal.c), so they outlive
 * the process with its file: the next worker to take the file counts on
 * from them. The keeper (worker.c) writes them to the system table every
 * FLUSH_MS (200 ms), when they changed: row "counters/<observer>",
 * column = the journal's id (host, directory and file; "host:pidN" for a
 * journal in memory), value {"runs":N,...}, the file's totals. A write sets
 * totals, it adds nothing, so writing twice counts nothing twice; the
 * totals of an observer are the sum of its row's columns
 * (pc_worker_totals). One transaction a flush, whatever the rate of runs.
 * What a worker without a journal file counted since its last flush dies
 * with it.
 */
#include "notify/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

#define COUNTERS_PREFIX "counters/"

static const char *const counter_names[PC_NCOUNTERS] = {"runs", "skipped", "conflicts", "failures",
                                                        "parked"};

static pc_status_t put_counts(pc_txn_t *t, const char *observer, const char *id,
                              const uint64_t *v, pc_error_t *err) {
  char row[sizeof COUNTERS_PREFIX + PC_MAX_OBSERVER_NAME + 1], val[256];
  int rl = snprintf(row, sizeof row, COUNTERS_PREFIX "%s", observer);
  int vl = snprintf(val, sizeof val,
                    "{\"runs\":%" PRIu64 ",\"skipped\":%" PRIu64 ",\"conflicts\":%" PRIu64
                    ",\"failures\":%" PRIu64 ",\"parked\":%" PRIu64 "}",
                    v[0], v[1], v[2], v[3], v[4]);
  return pc_txn_set_system(t, PC_SYSTEM_TABLE, row, (size_t)rl, id, strlen(id), val, (size_t)vl,
                           err);
}

/* Writes, in one transaction, the counters of the observers whose values
 * differ from what was last written (then remembers them). */
void pc_counters_flush(pc_worker_t *w) {
  uint64_t (*now)[PC_NCOUNTERS] = calloc(w->nslots ? w->nslots : 1, sizeof *now);
  if (!now) return;
  int changed = 0;
  for (size_t i = 0; i < w->nslots; i++)
    for (int k = 0; k < PC_NCOUNTERS; k++) {
      now[i][k] = atomic_load(&w->slots[i].n[k]);
      changed |= now[i][k] != w->flushed[i][k];
    }
  if (!changed) {
    free(now);
    return;
  }
  pc_error_t err;
  pc_status_t st = PC_OK;
  for (int attempt = 0; attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(w->db, &err);
    if (!t) {
      st = err.code;
      break;
    }
    st = PC_OK;
    for (size_t i = 0; i < w->nslots && st == PC_OK; i++)
      if (memcmp(now[i], w->flushed[i], sizeof now[i]) != 0)
        st = put_counts(t, w->slots[i].obs->name, pc_journal_id(w->journal), now[i], &err);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    pc_txn_destroy(t);
    if (st != PC_CONFLICT && st != PC_LOCKED) break;
  }
  if (st == PC_OK) memcpy(w->flushed, now, w->nslots * sizeof *now);
  else pc_log(PC_LOG_DEBUG, "worker: writing the counters: %s", err.text);
  free(now);
}

void pc_counters_write_left(pc_worker_t *w, const char *observer, const uint64_t *values) {
  pc_error_t err;
  pc_status_t st = PC_OK;
  for (int attempt = 0; attempt < PC_NOTIFY_RETRY_ATTEMPTS; attempt++) {
    pc_txn_t *t = pc_txn_begin(w->db, &err);
    if (!t) {
      st = err.code;
      break;
    }
    st = put_counts(t, observer, pc_journal_id(w->journal), values, &err);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    pc_txn_destroy(t);
    if (st != PC_CONFLICT && st != PC_LOCKED) break;
  }
  if (st != PC_OK)
    pc_log(PC_LOG_WARN, "worker: writing the counters of observer '%s' left in the journal: %s",
           observer, err.text);
}

/* ---- for any client ----------------------------------------------------------- */

pc_status_t pc_worker_totals(pc_db_t *db,
                             int (*fn)(void *ctx, const pc_observer_stats_t *totals), void *ctx,
                             pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !fn) return pc_error_set(err, PC_INVALID, "totals: NULL argument");
  pc_txn_t *t = pc_txn_begin(db, err);
  if (!t) return err ? err->code : PC_INTERNAL;
  static const char lo[] = COUNTERS_PREFIX, hi[] = "counters0"; /* '/' + 1 */
  pc_scan_t *sc = pc_txn_scan(t, PC_SYSTEM_TABLE, lo, sizeof lo - 1, hi, sizeof hi - 1, err);
  if (!sc) {
    pc_txn_destroy(t);
    return err ? err->code : PC_INTERNAL;
  }
  pc_observer_stats_t cur;
  memset(&cur, 0, sizeof cur);
  int have = 0, stop = 0;
  pc_status_t st = PC_OK;
  while (!stop && (st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, vl;
    const char *row = pc_scan_row(sc, &rl), *val = pc_scan_value(sc, &vl);
    const char *name = row + (sizeof lo - 1);
    size_t nl = rl - (sizeof lo - 1);
    if (nl > PC_MAX_OBSERVER_NAME) continue;
    if (have && (strlen(cur.name) != nl || memcmp(cur.name, name, nl) != 0)) {
      stop = fn(ctx, &cur);
      have = 0;
    }
    if (!have) {
      memset(&cur, 0, sizeof cur);
      memcpy(cur.name, name, nl);
      have = 1;
    }
    /* {"runs":N,...}: written above, so read by name without a parser */
    uint64_t *dst[PC_NCOUNTERS] = {&cur.runs, &cur.skipped, &cur.conflicts, &cur.failures,
                                   &cur.parked};
    for (int k = 0; k < PC_NCOUNTERS; k++) {
      char pat[24];
      int pl = snprintf(pat, sizeof pat, "\"%s\":", counter_names[k]);
      for (size_t i = 0; i + (size_t)pl <= vl; i++) {
        if (memcmp(val + i, pat, (size_t)pl) != 0) continue;
        uint64_t v = 0;
        for (size_t j = i + (size_t)pl; j < vl && val[j] >= '0' && val[j] <= '9'; j++)
          v = v * 10 + (uint64_t)(val[j] - '0');
        *dst[k] += v;
        break;
      }
    }
  }
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    st = PC_OK;
    if (have && !stop) fn(ctx, &cur);
  } else if (stop) {
    st = PC_OK;
  }
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  return st;
}
