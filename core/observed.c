/* observed.c — observers registered in the store (db.h): their records in
 * PC_SYSTEM_TABLE, the copies every store is given (store.h's
 * observer_update), listing them (a malformed record is reported and passed
 * over, never fatal), retiring one, and the backfill that presents the cells
 * written before a registration to the new observer.
 *
 * A registration goes through three states, each recorded in the
 * observer's row:
 *   REGISTERING  the record is written; the stores may not all have it;
 *   RUNNING      every store has it: each commit a store applies from then
 *                on writes the observer's notifications; the backfill goes
 *                through the column's cells in row order, a page per
 *                transaction, recording where it stopped in the same commit;
 *   DONE         every cell was presented.
 * Why this misses nothing: a page reads at a snapshot S taken after every
 * store had the copy. A commit with commit_ts <= S is in that snapshot, so
 * the page presents the cell (snapshot isolation waits for a commit in
 * flight below S), and the observer's run, at a snapshot taken later, sees
 * it. A commit with commit_ts > S took its timestamp after every store had
 * the copy, so the store that applies it — after it took its timestamp —
 * writes its notification. A name registered again after it was retired
 * (pc_db_unregister_observed) missed the changes made while it was away,
 * deletes included, whose notifications may have gone: its backfill also
 * presents each cell whose ack of the observer is there though the cell is
 * deleted (a cell it derived something from, whose delete it may not have
 * seen); the acks outlive a retirement, and the garbage collector keeps a
 * cell's newest put. Presenting a cell is the caller's (a worker that
 * runs the observer, notify/backfill.c): no notification is written for it,
 * so the column's other observers do not run again. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <percolator/observer.h>

#include "core/db.h"
#include "base/error.h"
#include "base/log.h"

_Static_assert(PC_MAX_STORED_COLUMN ==
                   PC_MAX_COLUMN + PC_ACK_PREFIX_LEN + PC_MAX_OBSERVER_NAME + 1,
               "an ack column of any user column fits in the store");

#define BACKFILL_FORMAT 1
#define ATTEMPTS 16         /* of a registration's or a page's transaction */
#define PAGE_PRESENT 64     /* cells a backfill page presents at most */
#define PAGE_CELLS 1024     /* cells of other columns it reads past at most */
static const char *kind_name(int kind) { return kind == PC_OBSERVER_WEAK ? "weak" : "strong"; }

int pc_ack_column(pc_buf_t *out, const char *observer, const char *col, size_t clen) {
  return pc_buf_append(out, PC_ACK_PREFIX, PC_ACK_PREFIX_LEN) ||
                 pc_buf_append(out, observer, strlen(observer)) || pc_buf_u8(out, 0) ||
                 pc_buf_append(out, col, clen)
             ? -1
             : 0;
}

/* ---- the backfill cell --------------------------------------------------- */

typedef struct backfill {
  int state;
  uint64_t since; /* a timestamp taken once every store had the copy (RUNNING) */
  uint64_t presented;
  int has_row;
  pc_buf_t row;
} backfill_t;

static int backfill_encode(pc_buf_t *out, const backfill_t *b) {
  return pc_buf_u8(out, BACKFILL_FORMAT) || pc_buf_u8(out, (uint8_t)b->state) ||
                 pc_buf_u64(out, b->since) || pc_buf_u64(out, b->presented) ||
                 pc_buf_u8(out, (uint8_t)(b->has_row != 0)) ||
                 (b->has_row && pc_buf_str(out, b->row.p, b->row.len))
             ? -1
             : 0;
}

/* 0, -1 malformed, -2 out of memory. */
static int backfill_decode(const char *v, size_t n, backfill_t *b) {
  pc_rd_t r = {v, n, 0, 1};
  uint8_t format = pc_rd_u8(&r), state = pc_rd_u8(&r);
  b->since = pc_rd_u64(&r);
  b->presented = pc_rd_u64(&r);
  b->has_row = pc_rd_u8(&r);
  size_t rl = 0;
  const char *row = b->has_row == 1 ? pc_rd_str(&r, &rl) : NULL;
  if (!r.ok || r.pos != n || format != BACKFILL_FORMAT || state > PC_BACKFILL_DONE ||
      b->has_row > 1 || rl > PC_MAX_ROW)
    return -1;
  b->state = state;
  b->row.len = 0;
  return row && pc_buf_append(&b->row, row, rl) != 0 ? -2 : 0;
}

/* ---- reading the records ------------------------------------------------- */

/* One observer row as the scan gathers it. */
typedef struct gathered {
  pc_buf_t row, def, backfill;
  int has_def, has_backfill;
} gathered_t;

static void gathered_reset(gathered_t *g) {
  g->row.len = g->def.len = g->backfill.len = 0;
  g->has_def = g->has_backfill = 0;
}

static void gathered_free(gathered_t *g) {
  pc_buf_free(&g->row);
  pc_buf_free(&g->def);
  pc_buf_free(&g->backfill);
}

typedef int (*info_fn)(void *ctx, const pc_observer_info_t *o);

/* Decodes a gathered row and calls fn with it. */
static int emit(const gathered_t *g, size_t plen, info_fn fn, void *ctx, int *oom) {
  pc_observer_info_t o = {0};
  o.name = g->row.p + plen;
  o.name_len = g->row.len - plen;
  pc_obs_record_t rec;
  backfill_t b = {PC_BACKFILL_DONE, 0, 0, 0, {0}};
  int bd = g->has_backfill ? backfill_decode(g->backfill.p, g->backfill.len, &b) : 0;
  if (bd == -2) {
    *oom = 1;
    pc_buf_free(&b.row);
    return 1;
  }
  if (!pc_obs_name_ok(o.name, o.name_len))
    o.problem = "its name is not 1..64 characters of [A-Za-z0-9_.-]";
  else if (!g->has_def)
    o.problem = "it has no definition (column 'def')";
  else if (pc_obs_record_decode(g->def.p, g->def.len, &rec) != 0)
    o.problem = "its definition is not a registration record of this version";
  else if (bd != 0)
    o.problem = "its backfill cell is not one of this version";
  if (!o.problem) {
    o.table = rec.table;
    o.col = rec.col;
    o.clen = rec.clen;
    o.kind = rec.kind;
    o.state = b.state;
    o.presented = b.presented;
    o.at_row = b.has_row ? b.row.p : NULL;
    o.at_len = b.has_row ? b.row.len : 0;
  }
  int stop = fn(ctx, &o);
  pc_buf_free(&b.row);
  return stop;
}

/* Calls fn for every observer row, read in one transaction whose calls are
 * bounded by timeout_ms. */
static pc_status_t scan_records(pc_db_t *db, uint32_t timeout_ms, info_fn fn, void *ctx,
                                pc_error_t *err) {
  pc_txn_t *txn = pc_txn_begin_within(db, timeout_ms, err);
  if (!txn) return err ? err->code : PC_INTERNAL;
  static const char prefix[] = PC_OBSERVER_ROW_PREFIX;
  size_t plen = sizeof prefix - 1;
  char end[sizeof prefix];
  memcpy(end, prefix, plen);
  end[plen - 1]++; /* "observer0": just after every "observer/..." */
  pc_status_t st = PC_OK;
  pc_scan_t *sc = pc_txn_scan(txn, PC_SYSTEM_TABLE, prefix, plen, end, plen, err);
  if (!sc) st = err ? err->code : PC_INTERNAL;
  gathered_t g = {0};
  int stop = 0, oom = 0, have = 0;
  while (st == PC_OK && !stop) {
    st = pc_scan_next(sc, err);
    if (st != PC_OK) break;
    size_t rlen, clen, vlen;
    const char *row = pc_scan_row(sc, &rlen), *col = pc_scan_column(sc, &clen);
    const char *v = pc_scan_value(sc, &vlen);
    if (have && (rlen != g.row.len || memcmp(row, g.row.p, rlen) != 0)) {
      stop = emit(&g, plen, fn, ctx, &oom);
      gathered_reset(&g);
      have = 0;
      if (stop) break;
    }
    if (!have) {
      oom |= pc_buf_append(&g.row, row, rlen);
      have = 1;
    }
    if (clen == strlen(PC_OBSERVER_COLUMN) && memcmp(col, PC_OBSERVER_COLUMN, clen) == 0) {
      oom |= pc_buf_append(&g.def, v, vlen);
      g.has_def = 1;
    } else if (clen == strlen(PC_BACKFILL_COLUMN) &&
               memcmp(col, PC_BACKFILL_COLUMN, clen) == 0) {
      oom |= pc_buf_append(&g.backfill, v, vlen);
      g.has_backfill = 1;
    }
    if (oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (st == PC_NOT_FOUND) {
    st = PC_OK;
    pc_error_clear(err);
    if (have && !stop) (void)emit(&g, plen, fn, ctx, &oom);
  }
  if (st == PC_OK && oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  gathered_free(&g);
  pc_scan_destroy(sc);
  pc_txn_destroy(txn);
  return st;
}

pc_status_t pc_db_observers(pc_db_t *db, int (*fn)(void *ctx, const pc_observer_info_t *o),
                            void *ctx, pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !fn) return pc_error_set(err, PC_INVALID, "observers: db or fn is NULL");
  return scan_records(db, db->opts.timeout_ms, fn, ctx, err);
}

pc_status_t pc_db_observers_within(pc_db_t *db, uint32_t timeout_ms,
                                   int (*fn)(void *ctx, const pc_observer_info_t *o), void *ctx,
                                   pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !fn) return pc_error_set(err, PC_INVALID, "observers: db or fn is NULL");
  return scan_records(db, timeout_ms ? timeout_ms : 1, fn, ctx, err);
}

/* ---- registering ----------------------------------------------------------- */

static int observer_row(pc_buf_t *row, const char *name, size_t nlen) {
  row->len = 0;
  return pc_buf_append(row, PC_OBSERVER_ROW_PREFIX, strlen(PC_OBSERVER_ROW_PREFIX)) ||
         pc_buf_append(row, name, nlen);
}

static pc_status_t set_backfill(pc_txn_t *txn, const pc_buf_t *row, const backfill_t *b,
                                pc_error_t *err) {
  pc_buf_t v = {0};
  pc_status_t st = backfill_encode(&v, b) != 0
                       ? pc_error_set(err, PC_NOMEM, "out of memory")
                       : pc_txn_set_system(txn, PC_SYSTEM_TABLE, row->p, row->len,
                                           PC_BACKFILL_COLUMN, strlen(PC_BACKFILL_COLUMN), v.p,
                                           v.len, err);
  pc_buf_free(&v);
  return st;
}

/* Reads the observer's backfill cell in txn: *found = 0 when absent. */
static pc_status_t get_backfill(pc_txn_t *txn, const pc_buf_t *row, backfill_t *b, int *found,
                                pc_error_t *err) {
  char *v = NULL;
  size_t n = 0;
  *found = 0;
  pc_status_t st = pc_txn_get_system(txn, PC_SYSTEM_TABLE, row->p, row->len, PC_BACKFILL_COLUMN,
                                     strlen(PC_BACKFILL_COLUMN), &v, &n, err);
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    return PC_OK;
  }
  if (st != PC_OK) return st;
  int rc = backfill_decode(v, n, b);
  pc_free(v);
  if (rc == -2) return pc_error_set(err, PC_NOMEM, "out of memory");
  if (rc != 0)
    return pc_error_set(err, PC_CORRUPTION, "%s: malformed backfill cell in row '%.*s'",
                        PC_SYSTEM_TABLE, (int)(row->len > 80 ? 80 : row->len), row->p);
  *found = 1;
  return PC_OK;
}

/* Writes the record of (name, def) unless it is there; PC_INVALID when it is
 * there with another definition. */
static pc_status_t record(pc_db_t *db, const char *name, const pc_buf_t *row,
                          const pc_buf_t *value, const pc_obs_record_t *want, int *complete,
                          pc_error_t *err) {
  const char *rcol = PC_OBSERVER_COLUMN;
  pc_status_t st = PC_CONFLICT;
  *complete = 0;
  for (int attempt = 0; attempt < ATTEMPTS && st == PC_CONFLICT; attempt++) {
    pc_txn_t *txn = pc_txn_begin(db, err);
    if (!txn) return err ? err->code : PC_INTERNAL;
    char *v = NULL;
    size_t vlen = 0;
    st = pc_txn_get_system(txn, PC_SYSTEM_TABLE, row->p, row->len, rcol, strlen(rcol), &v, &vlen,
                           err);
    if (st == PC_OK) { /* registered before: the same, or a clash */
      pc_obs_record_t rec;
      if (pc_obs_record_decode(v, vlen, &rec) != 0) {
        st = pc_error_set(err, PC_CORRUPTION,
                          "%s: the record of observer '%s' is malformed (remove it with "
                          "'percolator observers remove %s')",
                          PC_SYSTEM_TABLE, name, name);
      } else if (rec.kind == want->kind && strcmp(rec.table, want->table) == 0 &&
                 pc_bytes_cmp(rec.col, rec.clen, want->col, want->clen) == 0) {
        backfill_t b = {0};
        int found;
        st = get_backfill(txn, row, &b, &found, err);
        *complete = st == PC_OK && (!found || b.state != PC_BACKFILL_REGISTERING);
        pc_buf_free(&b.row);
      } else {
        st = pc_error_set(err, PC_INVALID,
                          "observer '%s' is already registered for %s/%.*s (%s); not also for "
                          "%s/%.*s (%s)",
                          name, rec.table, (int)(rec.clen > 64 ? 64 : rec.clen), rec.col,
                          kind_name(rec.kind), want->table,
                          (int)(want->clen > 64 ? 64 : want->clen), want->col,
                          kind_name(want->kind));
      }
    } else if (st == PC_NOT_FOUND) {
      backfill_t b = {PC_BACKFILL_REGISTERING, 0, 0, 0, {0}};
      st = pc_txn_set_system(txn, PC_SYSTEM_TABLE, row->p, row->len, rcol, strlen(rcol),
                             value->p, value->len, err);
      if (st == PC_OK) st = set_backfill(txn, row, &b, err);
      if (st == PC_OK) st = pc_txn_commit(txn, err); /* PC_CONFLICT: another registered it: look again */
    }
    pc_free(v);
    pc_txn_destroy(txn);
  }
  return st;
}

/* Moves the registration of row from REGISTERING to RUNNING (its stores
 * have it), recording since, the start_ts of that transaction: a run of the
 * observer that began after it saw everything a backfill would present;
 * a record without a backfill cell, or in another state, stays. */
static pc_status_t registered(pc_db_t *db, const pc_buf_t *row, pc_error_t *err) {
  pc_status_t st = PC_CONFLICT;
  for (int attempt = 0; attempt < ATTEMPTS && st == PC_CONFLICT; attempt++) {
    pc_txn_t *txn = pc_txn_begin(db, err);
    if (!txn) return err ? err->code : PC_INTERNAL;
    backfill_t b = {0};
    int found;
    st = get_backfill(txn, row, &b, &found, err);
    if (st == PC_OK && found && b.state == PC_BACKFILL_REGISTERING) {
      b.state = PC_BACKFILL_RUNNING;
      b.since = pc_txn_start_ts(txn);
      st = set_backfill(txn, row, &b, err);
      if (st == PC_OK) st = pc_txn_commit(txn, err);
    }
    pc_buf_free(&b.row);
    pc_txn_destroy(txn);
  }
  return st;
}

/* Gives every store the copy of observer name. */
static pc_status_t give_stores(pc_db_t *db, const char *name, const pc_obs_record_t *rec,
                               pc_error_t *err) {
  pc_store_observer_t o = {name, rec->table, rec->col, rec->clen, rec->kind};
  pc_status_t st = db->store->ops->observer_update(db->store, &o, 1, err);
  if (st != PC_OK) pc_error_prefix(err, "giving the stores observer '%s'", name);
  return st;
}

pc_status_t pc_db_register_observed(pc_db_t *db, const char *name, const char *table,
                                    const char *col, size_t clen, int kind, pc_error_t *err) {
  pc_error_clear(err);
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  if (!name || !pc_obs_name_ok(name, strlen(name)))
    return pc_error_set(err, PC_INVALID,
                        "observer name '%.80s' is not 1..%d characters of [A-Za-z0-9_.-]",
                        name ? name : "(null)", PC_MAX_OBSERVER_NAME);
  pc_status_t st = pc_check_table(table, err);
  if (st != PC_OK) {
    pc_error_prefix(err, "observer '%s'", name);
    return st;
  }
  if (strcmp(table, PC_SYSTEM_TABLE) == 0)
    return pc_error_set(err, PC_INVALID,
                        "observer '%s': table '%s' holds the system's records and is not observed",
                        name, table);
  if (!col || clen == 0 || clen > PC_MAX_COLUMN)
    return pc_error_set(err, PC_INVALID, "observer '%s': column of %zu bytes is not 1..%d bytes",
                        name, col ? clen : 0, PC_MAX_COLUMN);
  if ((unsigned char)col[0] == PC_SYSTEM_COLUMN_BYTE)
    return pc_error_set(err, PC_INVALID,
                        "observer '%s': its column begins with byte 0xFF (a system column)", name);
  if (kind != PC_OBSERVER_STRONG && kind != PC_OBSERVER_WEAK)
    return pc_error_set(err, PC_INVALID, "observer '%s': kind %d is neither strong (0) nor weak (1)",
                        name, kind);
  pc_buf_t row = {0}, value = {0};
  pc_obs_record_t want;
  if (observer_row(&row, name, strlen(name)) ||
      pc_obs_record_encode(&value, kind, table, col, clen) ||
      pc_obs_record_decode(value.p, value.len, &want) != 0) {
    pc_buf_free(&row);
    pc_buf_free(&value);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  int complete;
  st = record(db, name, &row, &value, &want, &complete, err);
  if (st == PC_OK) st = give_stores(db, name, &want, err);
  if (st != PC_OK && complete) {
    /* made before, when every store took its copy: giving it again only
     * repairs a store that lost it, and one that does not answer now is no
     * reason to stop */
    pc_log(PC_LOG_WARN, "observer '%s': %s", name, err ? err->text : pc_status_name(st));
    st = PC_OK;
  }
  if (st == PC_OK && !complete) st = registered(db, &row, err);
  pc_buf_free(&row);
  pc_buf_free(&value);
  if (st == PC_OK) pc_error_clear(err);
  return st;
}

/* ---- sync -------------------------------------------------------------------- */

typedef struct synced {
  pc_db_t *db;
  pc_status_t st;
  pc_error_t *err;
} synced_t;

static int sync_one(void *ctx, const pc_observer_info_t *o) {
  synced_t *s = ctx;
  if (o->problem) {
    pc_log(PC_LOG_WARN, "observers: the record of '%.*s' in %s is malformed (%s); passed over "
                        "('percolator observers remove' removes it)",
           (int)(o->name_len > 80 ? 80 : o->name_len), o->name, PC_SYSTEM_TABLE, o->problem);
    return 0;
  }
  char name[PC_MAX_OBSERVER_NAME + 1];
  memcpy(name, o->name, o->name_len);
  name[o->name_len] = '\0';
  pc_obs_record_t rec = {o->kind, "", o->col, o->clen};
  snprintf(rec.table, sizeof rec.table, "%s", o->table);
  s->st = give_stores(s->db, name, &rec, s->err);
  if (s->st != PC_OK && o->state != PC_BACKFILL_REGISTERING) {
    /* a repair only (see pc_db_register_observed) */
    pc_log(PC_LOG_WARN, "observers: %s", s->err ? s->err->text : pc_status_name(s->st));
    s->st = PC_OK;
    return 0;
  }
  if (s->st == PC_OK && o->state == PC_BACKFILL_REGISTERING) {
    pc_buf_t row = {0};
    s->st = observer_row(&row, name, strlen(name)) ? pc_error_set(s->err, PC_NOMEM, "out of memory")
                                                   : registered(s->db, &row, s->err);
    pc_buf_free(&row);
  }
  return s->st != PC_OK;
}

pc_status_t pc_db_observers_sync(pc_db_t *db, pc_error_t *err) {
  pc_error_clear(err);
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  synced_t s = {db, PC_OK, err};
  pc_status_t st = scan_records(db, db->opts.timeout_ms, sync_one, &s, err);
  return st != PC_OK ? st : s.st;
}

/* ---- retiring ---------------------------------------------------------------- */

pc_status_t pc_db_unregister_observed(pc_db_t *db, const char *name, size_t nlen, int *found,
                                      pc_error_t *err) {
  pc_error_clear(err);
  if (found) *found = 0;
  if (!db || !name) return pc_error_set(err, PC_INVALID, "unregister: db or name is NULL");
  if (nlen == 0 || nlen > PC_MAX_ROW - strlen(PC_OBSERVER_ROW_PREFIX))
    return pc_error_set(err, PC_INVALID, "observer name of %zu bytes", nlen);
  pc_buf_t row = {0};
  if (observer_row(&row, name, nlen)) return pc_error_set(err, PC_NOMEM, "out of memory");
  static const char *const cols[] = {PC_OBSERVER_COLUMN, PC_BACKFILL_COLUMN};
  pc_status_t st = PC_CONFLICT;
  int had = 0;
  for (int attempt = 0; attempt < ATTEMPTS && st == PC_CONFLICT; attempt++) {
    pc_txn_t *txn = pc_txn_begin(db, err);
    if (!txn) {
      st = err ? err->code : PC_INTERNAL;
      break;
    }
    st = PC_OK;
    had = 0;
    for (size_t i = 0; i < 2 && st == PC_OK; i++) {
      char *v = NULL;
      size_t vl;
      st = pc_txn_get_system(txn, PC_SYSTEM_TABLE, row.p, row.len, cols[i], strlen(cols[i]), &v,
                             &vl, err);
      pc_free(v);
      if (st == PC_NOT_FOUND) {
        pc_error_clear(err);
        st = PC_OK;
        continue;
      }
      had = 1;
      if (st == PC_OK)
        st = pc_txn_delete_system(txn, PC_SYSTEM_TABLE, row.p, row.len, cols[i],
                                  strlen(cols[i]), err);
    }
    if (st == PC_OK && had) st = pc_txn_commit(txn, err);
    pc_txn_destroy(txn);
  }
  pc_buf_free(&row);
  if (st != PC_OK) return st;
  if (found) *found = had;
  if (!pc_obs_name_ok(name, nlen)) return PC_OK; /* no store holds a copy of such a name */
  char nm[PC_MAX_OBSERVER_NAME + 1];
  memcpy(nm, name, nlen);
  nm[nlen] = '\0';
  pc_store_observer_t o = {nm, NULL, NULL, 0, 0};
  st = db->store->ops->observer_update(db->store, &o, 0, err);
  if (st != PC_OK)
    pc_error_prefix(err, "observer '%s': its record is gone, but removing it from the stores",
                    nm);
  return st;
}

/* ---- the backfill -------------------------------------------------------------- */

typedef struct page {
  pc_buf_t *rows; /* the rows whose cell of the column is presented */
  size_t n;
  pc_buf_t last;  /* the last row gone past */
  int has_last, exhausted;
} page_t;

static void page_free(page_t *p) {
  for (size_t i = 0; i < p->n; i++) pc_buf_free(&p->rows[i]);
  free(p->rows);
  pc_buf_free(&p->last);
  memset(p, 0, sizeof *p);
}

/* Reads the next page of table's rows after `after` (NULL: from the first),
 * collecting those with a cell of col, or with observer name's ack of col:
 * a cell deleted since the observer ran on it under that name (it was
 * removed and is registered again) is presented too, so that it learns of
 * the delete. It stops at a row boundary once it holds PAGE_PRESENT cells
 * or read PAGE_CELLS. */
static pc_status_t read_page(pc_txn_t *txn, const char *name, const char *table, const char *col,
                             size_t clen, const pc_buf_t *after, page_t *p, pc_error_t *err) {
  pc_buf_t start = {0}, ack = {0};
  if ((after && (pc_buf_append(&start, after->p, after->len) || pc_buf_u8(&start, 0))) ||
      pc_ack_column(&ack, name, col, clen) != 0) {
    pc_buf_free(&start);
    pc_buf_free(&ack);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  pc_scan_t *sc = pc_txn_scan_system(txn, table, start.p ? start.p : "", start.len, NULL, 0, err);
  pc_buf_free(&start);
  if (!sc) {
    pc_buf_free(&ack);
    return err ? err->code : PC_INTERNAL;
  }
  if (!(p->rows = calloc(PAGE_PRESENT, sizeof *p->rows))) {
    pc_scan_destroy(sc);
    pc_buf_free(&ack);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  pc_buf_t cur = {0};
  int have_cur = 0, taken = 0, oom = 0;
  size_t cells = 0;
  pc_status_t st;
  while ((st = pc_scan_next(sc, err)) == PC_OK) {
    size_t rl, cl;
    const char *row = pc_scan_row(sc, &rl), *c = pc_scan_column(sc, &cl);
    if (!have_cur || rl != cur.len || memcmp(row, cur.p, rl) != 0) {
      if (have_cur) { /* the row before is gone past */
        p->last.len = 0;
        oom |= pc_buf_append(&p->last, cur.p, cur.len);
        p->has_last = 1;
        if (p->n == PAGE_PRESENT || cells >= PAGE_CELLS) break;
      }
      cur.len = 0;
      oom |= pc_buf_append(&cur, row, rl);
      have_cur = 1;
      taken = 0;
    }
    cells++;
    /* the cell, or its ack (which sorts after every user column of the row) */
    if (!taken && ((cl == clen && memcmp(c, col, clen) == 0) ||
                   (cl == ack.len && memcmp(c, ack.p, ack.len) == 0))) {
      oom |= pc_buf_append(&p->rows[p->n++], row, rl);
      taken = 1;
    }
    if (oom) break;
  }
  if (st == PC_NOT_FOUND) {
    pc_error_clear(err);
    st = PC_OK;
    p->exhausted = 1;
    if (have_cur) {
      p->last.len = 0;
      oom |= pc_buf_append(&p->last, cur.p, cur.len);
      p->has_last = 1;
    }
  }
  if (st == PC_OK && oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  pc_buf_free(&cur);
  pc_buf_free(&ack);
  pc_scan_destroy(sc);
  return st;
}

/* One attempt at a page: PC_OK (committed, or nothing to do), or the
 * transaction's error. The page's transaction reads the rows and, once fn
 * presented them, records the progress: the observer's runs are
 * transactions of their own, so a crash between them and the progress only
 * makes the next page present those cells again, and their acks make the
 * observer skip them. */
static pc_status_t backfill_once(pc_db_t *db, const char *name, const pc_buf_t *row,
                                 pc_backfill_fn fn, void *ctx, int *done, int *stuck,
                                 pc_error_t *err) {
  pc_txn_t *txn = pc_txn_begin(db, err);
  if (!txn) return err ? err->code : PC_INTERNAL;
  backfill_t b = {0};
  page_t p = {0};
  int found;
  char *def = NULL;
  size_t dl = 0;
  pc_obs_record_t rec;
  pc_status_t st = get_backfill(txn, row, &b, &found, err);
  if (st == PC_OK && (!found || b.state != PC_BACKFILL_RUNNING)) {
    *done = 1; /* done, not registered yet, or made before backfills */
    goto out;
  }
  if (st == PC_OK)
    st = pc_txn_get_system(txn, PC_SYSTEM_TABLE, row->p, row->len, PC_OBSERVER_COLUMN,
                           strlen(PC_OBSERVER_COLUMN), &def, &dl, err);
  if (st == PC_NOT_FOUND) { /* retired meanwhile */
    pc_error_clear(err);
    st = PC_OK;
    *done = 1;
    goto out;
  }
  if (st != PC_OK) goto out;
  if (pc_obs_record_decode(def, dl, &rec) != 0) {
    st = pc_error_set(err, PC_CORRUPTION, "%s: the record of observer '%s' is malformed",
                      PC_SYSTEM_TABLE, name);
    goto out;
  }
  st = read_page(txn, name, rec.table, rec.col, rec.clen, b.has_row ? &b.row : NULL, &p, err);
  if (st != PC_OK) goto out;
  pc_observer_info_t o = {name, strlen(name), NULL, rec.table, rec.col, rec.clen, rec.kind,
                          b.state, b.presented, NULL, 0};
  size_t k = 0;
  while (k < p.n && fn(ctx, &o, p.rows[k].p, p.rows[k].len, b.since) == 0) k++;
  if (k == 0 && p.n > 0) { /* the first cell must be presented again later */
    *stuck = 1;
    goto out;
  }
  b.presented += k;
  const pc_buf_t *last = k < p.n ? &p.rows[k - 1] : p.has_last ? &p.last : NULL;
  if (last) {
    b.row.len = 0;
    if (pc_buf_append(&b.row, last->p, last->len) != 0) {
      st = pc_error_set(err, PC_NOMEM, "out of memory");
      goto out;
    }
    b.has_row = 1;
  }
  int finished = k == p.n && p.exhausted;
  if (finished) b.state = PC_BACKFILL_DONE;
  *stuck = k < p.n;
  st = set_backfill(txn, row, &b, err);
  if (st == PC_OK) st = pc_txn_commit(txn, err);
  if (st == PC_OK) *done = finished;
  if (st == PC_OK && finished)
    pc_log(PC_LOG_INFO, "observer '%s': backfill done, %" PRIu64 " cells presented", name,
           b.presented);
out:
  pc_free(def);
  page_free(&p);
  pc_buf_free(&b.row);
  pc_txn_destroy(txn);
  return st;
}

pc_status_t pc_db_backfill_step(pc_db_t *db, const char *name, pc_backfill_fn fn, void *ctx,
                                int *done, pc_error_t *err) {
  pc_error_clear(err);
  *done = 0;
  if (!db || !fn || !name || !pc_obs_name_ok(name, strlen(name)))
    return pc_error_set(err, PC_INVALID, "backfill: no database, callback or valid observer name");
  pc_buf_t row = {0};
  if (observer_row(&row, name, strlen(name))) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_status_t st = PC_CONFLICT;
  int stuck = 0;
  uint32_t pause = 1;
  for (int attempt = 0; attempt < ATTEMPTS && (st == PC_CONFLICT || st == PC_LOCKED); attempt++) {
    if (attempt) {
      pc_sleep_ms(pause); /* another backfiller, or a lock on the page's rows */
      pause = pause * 2 > 100 ? 100 : pause * 2;
    }
    st = backfill_once(db, name, &row, fn, ctx, done, &stuck, err);
  }
  pc_buf_free(&row);
  if (st == PC_LOCKED) st = err ? (err->code = PC_CONFLICT) : PC_CONFLICT;
  if (st != PC_OK) pc_error_prefix(err, "backfill of observer '%s'", name);
  else if (stuck)
    st = pc_error_set(err, PC_BUSY, "backfill of observer '%s': a cell is to be presented again "
                                    "later",
                      name);
  return st;
}
