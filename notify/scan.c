/* scan.c — the scan of one claim (Fluo's finder): scan_notify page by page
 * over the claim's buckets, the notifications of one cell grouped into one
 * pass (pass.c), whatever their kinds and timestamps. A cell's group is
 * complete once the scan moves past the cell (its notifications sort
 * together) or the range is exhausted. Also the copies of notifications
 * that outlive a page, and the look for any notification before a round.
 */
#include "notify/engine.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

int pc_note_copy(note_t *dst, const pc_notification_t *n) {
  size_t tl = strlen(n->cell.table);
  char *m = malloc(tl + 1 + n->cell.rlen + n->cell.clen + 1);
  if (!m) return -1;
  memcpy(m, n->cell.table, tl + 1);
  memcpy(m + tl + 1, n->cell.row, n->cell.rlen);
  memcpy(m + tl + 1 + n->cell.rlen, n->cell.col, n->cell.clen);
  dst->mem = m;
  dst->n = *n;
  dst->n.cell.table = m;
  dst->n.cell.row = m + tl + 1;
  dst->n.cell.col = m + tl + 1 + n->cell.rlen;
  return 0;
}

void pc_note_free(note_t *t) {
  free(t->mem);
  t->mem = NULL;
}

static int same_cell(const pc_cell_t *a, const pc_cell_t *b) {
  return a->rlen == b->rlen && a->clen == b->clen && strcmp(a->table, b->table) == 0 &&
         memcmp(a->row, b->row, a->rlen) == 0 && memcmp(a->col, b->col, a->clen) == 0;
}

typedef struct page {
  note_t *v;
  size_t n, cap;
  int oom;
} page_t;

static int page_add(void *ctx, const pc_notification_t *n) {
  page_t *p = ctx;
  if (p->n == p->cap) {
    size_t c = p->cap ? p->cap * 2 : 64;
    note_t *v = realloc(p->v, c * sizeof *v);
    if (!v) {
      p->oom = 1;
      return 1;
    }
    p->v = v;
    p->cap = c;
  }
  if (pc_note_copy(&p->v[p->n], n) != 0) {
    p->oom = 1;
    return 1;
  }
  p->n++;
  return 0;
}

static void page_clear(page_t *p) {
  for (size_t i = 0; i < p->n; i++) pc_note_free(&p->v[i]);
  p->n = 0;
  p->oom = 0;
}

/* One page of notifications of buckets [lo, hi) after `after` (NULL: from
 * the start) into p. *more: the range may hold more. */
static pc_status_t scan_page(pc_db_t *db, uint32_t lo, uint32_t hi, const note_t *after,
                             page_t *p, int *more, pc_error_t *err) {
  page_clear(p);
  pc_status_t st = db->store->ops->scan_notify(db->store, lo, hi, after ? &after->n : NULL,
                                               PC_NOTIFY_PAGE, page_add, p, err);
  if (st == PC_OK && p->oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  *more = st == PC_OK && p->n >= PC_NOTIFY_PAGE;
  return st;
}

static void group_add(group_t *g, const pc_notification_t *n) {
  if (n->weak) g->weak_ts = pc_max_u64(g->weak_ts, n->ts);
  else g->strong_ts = pc_max_u64(g->strong_ts, n->ts);
}

int pc_scan_claim(pc_worker_t *w, uint32_t k) {
  uint32_t lo, hi;
  if (!pc_claim_buckets(w, k, &lo, &hi)) return 0; /* the share moved away */
  page_t p = {0};
  note_t after = {0};
  group_t g = {0};
  batches_t b = {0};
  int have_g = 0, have_after = 0, did = 0, more = 1, broken = 0;
  wthread_t *self = pc_worker_self();
  while (more && !pc_worker_stopping(w) && !(self && self->given_up)) {
    pc_error_t err;
    if (scan_page(w->db, lo, hi, have_after ? &after : NULL, &p, &more, &err) != PC_OK) {
      pc_log(PC_LOG_DEBUG, "worker: scanning buckets %u..%u: %s", lo, hi - 1, err.text);
      broken = 1; /* the next round sees the rest again */
      break;
    }
    atomic_fetch_add(&w->seen, p.n);
    for (size_t i = 0; i < p.n && !pc_worker_stopping(w) && !(self && self->given_up); i++) {
      const pc_notification_t *n = &p.v[i].n;
      if (have_g && same_cell(&g.cell.n.cell, &n->cell)) {
        group_add(&g, n);
        continue;
      }
      if (have_g) {
        did |= pc_batch_take(w, &b, &g); /* (passes it, or keeps it for a batched run) */
        have_g = 0;
      }
      memset(&g, 0, sizeof g);
      g.cell = p.v[i]; /* moved out of the page */
      p.v[i].mem = NULL;
      group_add(&g, n);
      have_g = 1;
    }
    if (more && p.n && !pc_worker_stopping(w)) {
      /* the next page starts after the last notification of this one, whose
       * strings live in the page or, when it began the group, in the group */
      pc_note_free(&after);
      have_after = pc_note_copy(&after, &p.v[p.n - 1].n) == 0;
      if (!have_after) {
        broken = 1; /* out of memory: the next round sees the rest again */
        break;
      }
    }
  }
  /* the last group is complete once the range is exhausted */
  if (have_g && !more && !broken && !pc_worker_stopping(w) && !(self && self->given_up)) {
    did |= pc_batch_take(w, &b, &g);
    have_g = 0;
  }
  if (have_g) pc_note_free(&g.cell);
  did |= pc_batch_end(w, &b);
  page_clear(&p);
  free(p.v);
  pc_note_free(&after);
  return did;
}

static int probe_one(void *ctx, const pc_notification_t *n) {
  (void)n;
  *(int *)ctx = 1;
  return 1;
}

/* One scan of the worker's share for the first notification (a request per
 * tablet), so that a worker with nothing to do takes no claim. */
int pc_scan_anything(pc_worker_t *w) {
  int found = 0;
  uint32_t lo, hi;
  pc_worker_share(w, &lo, &hi, NULL, NULL);
  if (lo == hi) return 0;
  pc_error_t err;
  pc_status_t st =
      w->db->store->ops->scan_notify(w->db->store, lo, hi, NULL, 1, probe_one, &found, &err);
  return st != PC_OK || found;
}
