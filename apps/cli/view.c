/* view.c — what `wait` and `doctor` tell a person about incremental
 * processing (cli.h, "the observers' view"): the observers registered in the
 * store, the notifications pending in each column, the live workers and
 * which observers each runs, and from these the columns whose pending work
 * no live worker can do. A column's notifications are kept until every
 * observer registered for it has covered them, so one observer that no live
 * worker runs holds its column back.
 *
 * Where it comes from: the registered observers from the store's metadata
 * (pc_db_observed_foreach), the counts from a scan of the notifications
 * (pc_notify_pending), and the workers from their records in the system
 * table (row "worker/HOST:PID", column "state": {"seen_ms", "observers":
 * {NAME: counters}}, written every second by daemon/workers.c; live while
 * younger than CLI_WORKER_LIVE_MS). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/db.h"
#include "base/error.h"
#include "notify/worker.h"

#define CLI_WORKER_LIVE_MS 3000

static char *dup_bytes(const char *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, p, n);
    d[n] = '\0';
  }
  return d;
}

/* A malformed record is passed over here: `observers` names it. */
static int add_observer(void *ctx, const pc_observer_info_t *info) {
  cli_view_t *v = ctx;
  if (info->problem) return 0;
  cli_observer_t *o = realloc(v->obs, (v->nobs + 1) * sizeof *o);
  if (!o) return -1;
  v->obs = o;
  o = &v->obs[v->nobs];
  memset(o, 0, sizeof *o);
  o->name = dup_bytes(info->name, info->name_len);
  o->table = strdup(info->table);
  o->col = dup_bytes(info->col, info->clen);
  o->clen = info->clen;
  o->kind = info->kind;
  if (!o->name || !o->table || !o->col) {
    free(o->name);
    free(o->table);
    free(o->col);
    return -1;
  }
  v->nobs++;
  return 0;
}

static int add_column(void *ctx, const char *table, const char *col, size_t clen,
                      uint64_t count) {
  cli_view_t *v = ctx;
  cli_column_t *c = realloc(v->cols, (v->ncols + 1) * sizeof *c);
  if (!c) return -1;
  v->cols = c;
  c = &v->cols[v->ncols];
  c->table = strdup(table);
  c->col = dup_bytes(col, clen);
  c->clen = clen;
  c->count = count;
  if (!c->table || !c->col) {
    free(c->table);
    free(c->col);
    return -1;
  }
  v->ncols++;
  return 0;
}

static int same_column(const char *t1, const char *c1, size_t l1, const char *t2, const char *c2,
                       size_t l2) {
  return strcmp(t1, t2) == 0 && l1 == l2 && memcmp(c1, c2, l1) == 0;
}

/* The live workers' records: each worker's name, and a run count per
 * observer name it runs. */
static pc_status_t load_workers(pc_db_t *db, cli_view_t *v, pc_error_t *err) {
  pc_txn_t *t = pc_txn_begin(db, err);
  pc_scan_t *sc = t ? pc_txn_scan(t, PC_SYSTEM_TABLE, "worker/", 7, "worker0", 7, err) : NULL;
  if (!sc) {
    pc_txn_destroy(t);
    return err->code;
  }
  uint64_t now = pc_now_wall_ms();
  pc_status_t st;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, vl;
    const char *row = pc_scan_row(sc, &rl), *val = pc_scan_value(sc, &vl);
    json_t *state = json_loadb(val, vl, 0, NULL);
    json_int_t seen = json_integer_value(json_object_get(state, "seen_ms"));
    if (state && seen > 0 && now - (uint64_t)seen < CLI_WORKER_LIVE_MS) {
      char **w = realloc(v->workers, (v->nworkers + 1) * sizeof *w);
      if (w && (w[v->nworkers] = dup_bytes(row + 7, rl - 7))) {
        v->workers = w;
        v->nworkers++;
      } else if (w) {
        v->workers = w;
      }
      const char *name;
      json_t *c;
      json_object_foreach(json_object_get(state, "observers"), name, c) {
        for (size_t i = 0; i < v->nobs; i++)
          if (strcmp(v->obs[i].name, name) == 0) v->obs[i].nworkers++;
      }
    }
    json_decref(state);
  }
  pc_scan_destroy(sc);
  pc_txn_destroy(t);
  return st == PC_NOT_FOUND ? PC_OK : st;
}

pc_status_t cli_view_load(pc_db_t *db, int no_live_worker, cli_view_t *v, pc_error_t *err) {
  memset(v, 0, sizeof *v);
  pc_status_t st = pc_db_observers(db, add_observer, v, err);
  if (st == PC_OK) st = pc_notify_pending(db, &v->pending, add_column, v, err);
  if (st == PC_OK && !no_live_worker) st = load_workers(db, v, err);
  for (size_t i = 0; st == PC_OK && i < v->nobs; i++) {
    cli_observer_t *o = &v->obs[i];
    for (size_t k = 0; k < v->ncols; k++)
      if (same_column(o->table, o->col, o->clen, v->cols[k].table, v->cols[k].col,
                      v->cols[k].clen))
        o->pending = v->cols[k].count;
  }
  if (st != PC_OK) cli_view_free(v);
  return st;
}

int cli_view_column_stalled(const cli_view_t *v, const cli_column_t *c) {
  if (c->count == 0) return 0;
  int observed = 0;
  for (size_t i = 0; i < v->nobs; i++) {
    const cli_observer_t *o = &v->obs[i];
    if (!same_column(o->table, o->col, o->clen, c->table, c->col, c->clen)) continue;
    observed = 1;
    if (o->nworkers == 0) return 1;
  }
  return !observed;
}

uint64_t cli_view_stalled(const cli_view_t *v) {
  uint64_t n = 0;
  for (size_t k = 0; k < v->ncols; k++)
    if (cli_view_column_stalled(v, &v->cols[k])) n += v->cols[k].count;
  return n;
}

void cli_view_free(cli_view_t *v) {
  for (size_t i = 0; i < v->nobs; i++) {
    free(v->obs[i].name);
    free(v->obs[i].table);
    free(v->obs[i].col);
  }
  for (size_t i = 0; i < v->ncols; i++) {
    free(v->cols[i].table);
    free(v->cols[i].col);
  }
  for (size_t i = 0; i < v->nworkers; i++) free(v->workers[i]);
  free(v->obs);
  free(v->cols);
  free(v->workers);
  memset(v, 0, sizeof *v);
}

json_t *cli_view_json(const cli_view_t *v) {
  json_t *o = json_object(), *cols = json_array(), *ws = json_array();
  if (!o || !cols || !ws) {
    json_decref(o);
    json_decref(cols);
    json_decref(ws);
    return NULL;
  }
  fmt_json_u64(o, "pending", v->pending);
  fmt_json_u64(o, "stalled", cli_view_stalled(v));
  for (size_t k = 0; k < v->ncols; k++) {
    const cli_column_t *c = &v->cols[k];
    json_t *j = json_object(), *obs = json_array();
    json_object_set_new(j, "table", json_string(c->table));
    fmt_json_bytes(j, "column", c->col, c->clen);
    fmt_json_u64(j, "pending", c->count);
    json_object_set_new(j, "stalled", json_boolean(cli_view_column_stalled(v, c)));
    for (size_t i = 0; i < v->nobs; i++) {
      const cli_observer_t *x = &v->obs[i];
      if (!same_column(x->table, x->col, x->clen, c->table, c->col, c->clen)) continue;
      json_t *e = json_object();
      json_object_set_new(e, "name", json_string(x->name));
      fmt_json_u64(e, "live_workers", x->nworkers);
      json_array_append_new(obs, e);
    }
    json_object_set_new(j, "observers", obs);
    json_array_append_new(cols, j);
  }
  json_object_set_new(o, "columns", cols);
  for (size_t i = 0; i < v->nworkers; i++) json_array_append_new(ws, json_string(v->workers[i]));
  json_object_set_new(o, "live_workers", ws);
  return o;
}
