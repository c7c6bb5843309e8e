/* view.c — the observers registered in the store, as this worker knows
 * them: the records (pc_db_observers), read when the worker starts, again
 * every VIEW_REFRESH_MS, and soon after a store refused a deletion for an
 * observer the view lacked (until then the view is stale, and pass.c leaves
 * the refused cells alone for a while, as it does cells waiting for other
 * workers, rather than passing over them again and again). For each column
 * with registered observers the view holds their names, kinds and states,
 * which of them this worker runs, and the list of names a deletion of the
 * column's notifications accounts for (pass.c). The store checks that list
 * against its own set (store.h's pc_notify_clear_t), so a view that is
 * behind a registration costs a refused deletion and a refresh, never a
 * lost notification.
 *
 * A view is immutable and counted: a pass takes a reference, a refresh
 * installs a new one, and the last reference frees the old.
 */
#include "notify/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"

#define VIEW_REFRESH_MS 2000u
#define STALE_REFRESH_MS 200u /* after a refused deletion, at most this soon */

static void view_free(pc_view_t *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    free(v->cols[i].col);
    free(v->cols[i].obs);
    free(v->cols[i].names);
  }
  free(v->cols);
  free(v);
}

pc_view_t *pc_view_get(pc_worker_t *w) {
  pthread_mutex_lock(&w->view_mu);
  pc_view_t *v = w->view;
  if (v) v->refs++;
  pthread_mutex_unlock(&w->view_mu);
  return v;
}

void pc_view_put(pc_worker_t *w, pc_view_t *v) {
  if (!v) return;
  pthread_mutex_lock(&w->view_mu);
  int last = --v->refs == 0;
  pthread_mutex_unlock(&w->view_mu);
  if (last) view_free(v);
}

static int col_cmp(const char *table, const char *col, size_t clen, const view_col_t *c) {
  int r = strcmp(table, c->table);
  return r ? r : pc_bytes_cmp(col, clen, c->col, c->clen);
}

const view_col_t *pc_view_column(const pc_view_t *v, const char *table, const char *col,
                                 size_t clen) {
  size_t lo = 0, hi = v ? v->n : 0;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int r = col_cmp(table, col, clen, &v->cols[mid]);
    if (r == 0) return &v->cols[mid];
    if (r < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

/* ---- building a view ------------------------------------------------------- */

typedef struct build {
  pc_worker_t *w;
  pc_view_t *v;
  size_t cap;
  int oom;
} build_t;

/* The column's entry in b's view, made when missing (the view is sorted at
 * the end). */
static view_col_t *col_of(build_t *b, const char *table, const char *col, size_t clen) {
  pc_view_t *v = b->v;
  for (size_t i = 0; i < v->n; i++)
    if (col_cmp(table, col, clen, &v->cols[i]) == 0) return &v->cols[i];
  if (v->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 8;
    view_col_t *nc = realloc(v->cols, cap * sizeof *nc);
    if (!nc) return NULL;
    v->cols = nc;
    b->cap = cap;
  }
  view_col_t *c = &v->cols[v->n];
  memset(c, 0, sizeof *c);
  snprintf(c->table, sizeof c->table, "%s", table);
  if (!(c->col = malloc(clen))) return NULL;
  memcpy(c->col, col, clen);
  c->clen = clen;
  v->n++;
  return c;
}

/* Whether this worker runs an observer named name of (table, col). */
static int runs_here(pc_worker_t *w, const char *name, const char *table, const char *col,
                     size_t clen) {
  for (size_t i = 0; i < w->nslots; i++) {
    const pc_observer_t *o = w->slots[i].obs;
    if (strcmp(o->name, name) == 0 && strcmp(o->table, table) == 0 && o->column_len == clen &&
        memcmp(o->column, col, clen) == 0)
      return 1;
  }
  return 0;
}

/* Adds an observer to column c; -1 out of memory. */
static int add_observer(view_col_t *c, const char *name, int kind, int state, int mine) {
  for (size_t i = 0; i < c->nobs; i++)
    if (strcmp(c->obs[i].name, name) == 0) return 0;
  view_obs_t *o = realloc(c->obs, (c->nobs + 1) * sizeof *o);
  if (!o) return -1;
  c->obs = o;
  view_obs_t *e = &o[c->nobs++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->kind = kind;
  e->state = state;
  e->mine = mine;
  c->nmine += mine != 0;
  return 0;
}

static int add_record(void *ctx, const pc_observer_info_t *o) {
  build_t *b = ctx;
  if (o->problem) return 0; /* reported by pc_db_observers_sync at start */
  char name[PC_MAX_OBSERVER_NAME + 1];
  snprintf(name, sizeof name, "%.*s", (int)o->name_len, o->name);
  view_col_t *c = col_of(b, o->table, o->col, o->clen);
  b->oom = !c || add_observer(c, name, o->kind, o->state,
                              runs_here(b->w, name, o->table, o->col, o->clen)) != 0;
  return b->oom;
}

static int view_col_qcmp(const void *x, const void *y) {
  const view_col_t *a = x, *b = y;
  return col_cmp(a->table, a->col, a->clen, b);
}

/* The names a deletion of c's notifications accounts for: every observer of
 * the view's column (registered) and this worker's own of it. -1 out of
 * memory. */
static int make_names(pc_worker_t *w, view_col_t *c) {
  for (size_t i = 0; i < w->nslots; i++) { /* own ones the store may not list (retired) */
    const pc_observer_t *o = w->slots[i].obs;
    if (strcmp(o->table, c->table) == 0 && o->column_len == c->clen &&
        memcmp(o->column, c->col, c->clen) == 0 &&
        add_observer(c, o->name, (int)o->kind, PC_BACKFILL_DONE, 1) != 0)
      return -1;
  }
  size_t len = 0;
  for (size_t i = 0; i < c->nobs; i++) len += strlen(c->obs[i].name) + 1;
  if (!(c->names = malloc(len ? len : 1))) return -1;
  for (size_t i = 0; i < c->nobs; i++) {
    size_t l = strlen(c->obs[i].name) + 1;
    memcpy(c->names + c->nlen, c->obs[i].name, l);
    c->nlen += l;
  }
  return 0;
}

/* Logs, once per (column, observer), the registered observers of a column
 * that this worker does not run: their notifications wait for them. */
static void say_lacking(pc_worker_t *w, const pc_view_t *old, const pc_view_t *v) {
  for (size_t i = 0; i < v->n; i++) {
    const view_col_t *c = &v->cols[i];
    const view_col_t *was = pc_view_column(old, c->table, c->col, c->clen);
    char list[512] = "";
    size_t at = 0, nlack = 0, fresh = 0;
    for (size_t k = 0; k < c->nobs; k++) {
      if (c->obs[k].mine) continue;
      nlack++;
      int known = 0;
      for (size_t j = 0; was && j < was->nobs; j++)
        known |= strcmp(was->obs[j].name, c->obs[k].name) == 0 && !was->obs[j].mine;
      fresh += !known;
      int n = snprintf(list + at, sizeof list - at, "%s'%s'", at ? ", " : "", c->obs[k].name);
      if (n > 0 && (size_t)n < sizeof list - at) at += (size_t)n;
    }
    if (!nlack || !fresh) continue;
    char cell[200], col[65];
    size_t j;
    for (j = 0; j < c->clen && j < 64; j++)
      col[j] = c->col[j] >= 0x20 && c->col[j] < 0x7f ? c->col[j] : '?';
    col[j] = '\0';
    snprintf(cell, sizeof cell, "%s/%s%s", c->table, col, c->clen > 64 ? "..." : "");
    if (c->nmine)
      pc_log(PC_LOG_WARN,
             "worker: column %s has registered observer%s %s that this worker does not run: "
             "its notifications are deleted only once %s covered them too, by another worker",
             cell, nlack == 1 ? "" : "s", list, nlack == 1 ? "that one has" : "those have");
    else
      pc_log(PC_LOG_INFO,
             "worker: leaves the notifications of column %s to the workers of %s (registered, "
             "not run here)",
             cell, list);
  }
}

pc_status_t pc_view_refresh(pc_worker_t *w, pc_error_t *err) {
  build_t b = {w, calloc(1, sizeof(pc_view_t)), 0, 0};
  if (!b.v) return pc_error_set(err, PC_NOMEM, "out of memory");
  b.v->refs = 1;
  pc_status_t st = pc_db_observers(w->db, add_record, &b, err);
  for (size_t i = 0; st == PC_OK && !b.oom && i < w->nslots; i++) { /* every own column too */
    const pc_observer_t *o = w->slots[i].obs;
    b.oom = !col_of(&b, o->table, o->column, o->column_len);
  }
  if (st == PC_OK && b.oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; st == PC_OK && i < b.v->n; i++)
    if (make_names(w, &b.v->cols[i]) != 0) st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st != PC_OK) {
    view_free(b.v);
    return st;
  }
  if (b.v->n > 1) qsort(b.v->cols, b.v->n, sizeof *b.v->cols, view_col_qcmp);
  pc_view_t *old = pc_view_get(w);
  say_lacking(w, old, b.v);
  pc_view_put(w, old);
  pthread_mutex_lock(&w->view_mu);
  old = w->view;
  w->view = b.v;
  w->view_next_ms = pc_now_mono_ms() + VIEW_REFRESH_MS;
  atomic_store(&w->view_stale, 0);
  pthread_mutex_unlock(&w->view_mu);
  pc_view_put(w, old);
  return PC_OK;
}

void pc_view_stale(pc_worker_t *w) {
  pthread_mutex_lock(&w->view_mu);
  uint64_t soon = pc_now_mono_ms() + STALE_REFRESH_MS;
  int sooner = w->view_next_ms > soon;
  if (sooner) w->view_next_ms = soon;
  atomic_store(&w->view_stale, 1);
  pthread_mutex_unlock(&w->view_mu);
  if (sooner) pc_worker_wake(w); /* the backfill thread may be napping past it */
}

int pc_view_is_stale(pc_worker_t *w) { return atomic_load(&w->view_stale); }

uint32_t pc_view_due_in(pc_worker_t *w, uint32_t cap) {
  uint64_t now = pc_now_mono_ms();
  pthread_mutex_lock(&w->view_mu);
  uint64_t in = w->view_next_ms > now ? w->view_next_ms - now : 0;
  pthread_mutex_unlock(&w->view_mu);
  return in < cap ? (uint32_t)in : cap;
}

int pc_view_due(pc_worker_t *w) { return pc_view_due_in(w, 1) == 0; }

void pc_view_release(pc_worker_t *w) {
  pthread_mutex_lock(&w->view_mu);
  pc_view_t *v = w->view;
  w->view = NULL;
  pthread_mutex_unlock(&w->view_mu);
  pc_view_put(w, v);
}
