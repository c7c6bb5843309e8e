/* observed.c — the observed columns, recorded in the store (db.h): an
 * observer's registration (a record in PC_SYSTEM_TABLE, written in a
 * transaction), their listing, and each client's copy of the set of
 * strongly observed columns, which every commit reads to mark its puts to
 * them (their locks then carry the flag, and whoever commits such a cell
 * writes its strong notification).
 *
 * The copy is an immutable sorted array of (table, column), replaced whole
 * under the write lock of db->observed_mu; a commit looks its cells up under
 * the read lock, and skips even that while no strong observer is known
 * (db->observed_strong), which is the common case of a store without
 * observers. Records are only ever added, so the set only grows: each
 * update installs the union of what it found and the set before it. */
#include <stdlib.h>
#include <string.h>

#include <percolator/observer.h>

#include "core/db.h"
#include "core/error.h"

_Static_assert(PC_MAX_STORED_COLUMN ==
                   PC_MAX_COLUMN + PC_ACK_PREFIX_LEN + PC_MAX_OBSERVER_NAME + 1,
               "an ack column of any user column fits in the store");

#define RECORD_FORMAT 1
#define REGISTER_ATTEMPTS 16

typedef struct obs_entry {
  char *table; /* NUL-terminated */
  char *col;
  size_t clen;
} obs_entry_t;

/* The strongly observed columns, sorted by (table, column), each once. */
struct pc_observed_set {
  obs_entry_t *e;
  size_t n, cap;
};

static void set_free(struct pc_observed_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) {
    free(s->e[i].table);
    free(s->e[i].col);
  }
  free(s->e);
  free(s);
}

static int entry_cmp(const char *table, const char *col, size_t clen, const obs_entry_t *e) {
  int c = strcmp(table, e->table);
  return c ? c : pc_bytes_cmp(col, clen, e->col, e->clen);
}

static int entry_qcmp(const void *a, const void *b) {
  const obs_entry_t *x = a, *y = b;
  return entry_cmp(x->table, x->col, x->clen, y);
}

/* Appends a copy of (table, col) to s (not yet sorted); -1 out of memory. */
static int set_add(struct pc_observed_set *s, const char *table, const char *col, size_t clen) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    obs_entry_t *e = realloc(s->e, cap * sizeof *e);
    if (!e) return -1;
    s->e = e;
    s->cap = cap;
  }
  obs_entry_t *e = &s->e[s->n];
  e->table = strdup(table);
  e->col = malloc(clen + 1);
  if (!e->table || !e->col) {
    free(e->table);
    free(e->col);
    return -1;
  }
  memcpy(e->col, col, clen);
  e->col[clen] = '\0';
  e->clen = clen;
  s->n++;
  return 0;
}

/* Sorts s and drops duplicates (one column may have several observers). */
static void set_seal(struct pc_observed_set *s) {
  if (s->n > 1) qsort(s->e, s->n, sizeof *s->e, entry_qcmp);
  size_t out = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (out && entry_qcmp(&s->e[out - 1], &s->e[i]) == 0) {
      free(s->e[i].table);
      free(s->e[i].col);
      continue;
    }
    s->e[out++] = s->e[i];
  }
  s->n = out;
}

/* Adds db's set to s and puts the union in its place. Records are never
 * removed nor changed, so a set only grows: a refresh that read the store
 * before a registration of this client added to the set cannot take that
 * registration away again. Updates are serialised by observed_update_mu;
 * the write lock is held only to swap the pointer. 0, or -1 out of memory
 * (s released, the set unchanged). */
static int set_merge_install(pc_db_t *db, struct pc_observed_set *s) {
  pthread_mutex_lock(&db->observed_update_mu);
  const struct pc_observed_set *cur = db->observed; /* only updaters change it */
  int bad = 0;
  for (size_t i = 0; !bad && cur && i < cur->n; i++)
    bad = set_add(s, cur->e[i].table, cur->e[i].col, cur->e[i].clen) != 0;
  if (bad) {
    pthread_mutex_unlock(&db->observed_update_mu);
    set_free(s);
    return -1;
  }
  set_seal(s);
  pthread_rwlock_wrlock(&db->observed_mu);
  struct pc_observed_set *old = db->observed;
  db->observed = s;
  atomic_store_explicit(&db->observed_strong, s->n > 0, memory_order_release);
  pthread_rwlock_unlock(&db->observed_mu);
  pthread_mutex_unlock(&db->observed_update_mu);
  set_free(old);
  return 0;
}

int pc_db_strongly_observed(pc_db_t *db, const char *table, const char *col, size_t clen) {
  if (!atomic_load_explicit(&db->observed_strong, memory_order_acquire)) return 0;
  int found = 0;
  pthread_rwlock_rdlock(&db->observed_mu);
  const struct pc_observed_set *s = db->observed;
  size_t lo = 0, hi = s ? s->n : 0;
  while (lo < hi && !found) {
    size_t mid = lo + (hi - lo) / 2;
    int c = entry_cmp(table, col, clen, &s->e[mid]);
    if (c == 0) found = 1;
    else if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  pthread_rwlock_unlock(&db->observed_mu);
  return found;
}

void pc_db_observed_free(pc_db_t *db) {
  set_free(db->observed);
  db->observed = NULL;
}

/* ---- the records -------------------------------------------------------- */

/* An observer's name: 1..PC_MAX_OBSERVER_NAME bytes of [A-Za-z0-9_.-]. */
static int name_ok(const char *name, size_t n) {
  if (n == 0 || n > PC_MAX_OBSERVER_NAME) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)name[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '_' || ch == '.' || ch == '-'))
      return 0;
  }
  return 1;
}

static int encode_record(pc_buf_t *b, int kind, const char *table, const char *col, size_t clen) {
  return pc_buf_u8(b, RECORD_FORMAT) || pc_buf_u8(b, (uint8_t)kind) ||
                 pc_buf_str(b, table, strlen(table)) || pc_buf_str(b, col, clen)
             ? -1
             : 0;
}

typedef struct record {
  int kind;
  char table[PC_MAX_TABLE + 1];
  const char *col; /* into the value */
  size_t clen;
} record_t;

static int decode_record(const char *v, size_t n, record_t *rec) {
  pc_rd_t r = {v, n, 0, 1};
  uint8_t format = pc_rd_u8(&r), kind = pc_rd_u8(&r);
  size_t tl;
  const char *t = pc_rd_str(&r, &tl);
  rec->col = pc_rd_str(&r, &rec->clen);
  if (!r.ok || r.pos != n || format != RECORD_FORMAT || kind > PC_OBSERVER_WEAK || tl == 0 ||
      tl > PC_MAX_TABLE || memchr(t, '\0', tl) || rec->clen == 0 || rec->clen > PC_MAX_COLUMN)
    return -1;
  rec->kind = kind;
  memcpy(rec->table, t, tl);
  rec->table[tl] = '\0';
  return 0;
}

static const char *kind_name(int kind) { return kind == PC_OBSERVER_WEAK ? "weak" : "strong"; }

typedef int (*record_fn)(void *ctx, const char *name, const char *table, const char *col,
                         size_t clen, int kind);

/* Calls fn for each record, read in one transaction whose calls are
 * bounded by timeout_ms. */
static pc_status_t scan_records(pc_db_t *db, uint32_t timeout_ms, record_fn fn, void *ctx,
                                pc_error_t *err) {
  pc_txn_t *txn = pc_txn_begin(db, err);
  if (!txn) return err ? err->code : PC_INTERNAL;
  pc_txn_set_timeout_ms(txn, timeout_ms);
  static const char prefix[] = PC_OBSERVER_ROW_PREFIX;
  size_t plen = sizeof prefix - 1;
  char end[sizeof prefix];
  memcpy(end, prefix, plen);
  end[plen - 1]++; /* "observer0": just after every "observer/..." */
  pc_status_t st = PC_OK;
  pc_scan_t *sc = pc_txn_scan(txn, PC_SYSTEM_TABLE, prefix, plen, end, plen, err);
  if (!sc) st = err ? err->code : PC_INTERNAL;
  int stop = 0;
  while (st == PC_OK && !stop) {
    st = pc_scan_next(sc, err);
    if (st != PC_OK) break;
    size_t rlen, clen, vlen;
    const char *row = pc_scan_row(sc, &rlen), *col = pc_scan_column(sc, &clen);
    const char *v = pc_scan_value(sc, &vlen);
    if (clen != strlen(PC_OBSERVER_COLUMN) || memcmp(col, PC_OBSERVER_COLUMN, clen) != 0)
      continue;
    record_t rec;
    if (!name_ok(row + plen, rlen - plen) || decode_record(v, vlen, &rec) != 0) {
      st = pc_error_set(err, PC_CORRUPTION, "%s: malformed observer record in row '%.*s'",
                        PC_SYSTEM_TABLE, (int)(rlen > 80 ? 80 : rlen), row);
      break;
    }
    char name[PC_MAX_OBSERVER_NAME + 1];
    memcpy(name, row + plen, rlen - plen);
    name[rlen - plen] = '\0';
    stop = fn(ctx, name, rec.table, rec.col, rec.clen, rec.kind);
  }
  if (st == PC_NOT_FOUND) {
    st = PC_OK;
    pc_error_clear(err);
  }
  pc_scan_destroy(sc);
  pc_txn_destroy(txn);
  return st;
}

pc_status_t pc_db_observed_foreach(pc_db_t *db,
                                   int (*fn)(void *ctx, const char *name, const char *table,
                                             const char *col, size_t clen, int kind),
                                   void *ctx, pc_error_t *err) {
  pc_error_clear(err);
  if (!db || !fn) return pc_error_set(err, PC_INVALID, "observed_foreach: db or fn is NULL");
  return scan_records(db, db->opts.timeout_ms, fn, ctx, err);
}

typedef struct collect {
  struct pc_observed_set *s;
  int oom;
} collect_t;

static int add_strong(void *ctx, const char *name, const char *table, const char *col,
                      size_t clen, int kind) {
  (void)name;
  collect_t *c = ctx;
  if (kind != PC_OBSERVER_STRONG) return 0;
  c->oom = set_add(c->s, table, col, clen) != 0;
  return c->oom;
}

pc_status_t pc_db_observed_refresh(pc_db_t *db, uint32_t timeout_ms, pc_error_t *err) {
  struct pc_observed_set *s = calloc(1, sizeof *s);
  if (!s) return pc_error_set(err, PC_NOMEM, "out of memory");
  collect_t c = {s, 0};
  pc_status_t st = scan_records(db, timeout_ms, add_strong, &c, err);
  if (st == PC_OK && c.oom) st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st != PC_OK) {
    set_free(s);
    return st;
  }
  if (set_merge_install(db, s) != 0) return pc_error_set(err, PC_NOMEM, "out of memory");
  atomic_store(&db->observed_loaded, 1);
  return PC_OK;
}

pc_status_t pc_db_observed_ready(pc_db_t *db, pc_error_t *err) {
  if (atomic_load_explicit(&db->observed_loaded, memory_order_acquire)) return PC_OK;
  return pc_db_observed_refresh(db, db->opts.timeout_ms, err);
}

/* Adds (table, col) to db's set now. */
static pc_status_t add_now(pc_db_t *db, const char *table, const char *col, size_t clen,
                           pc_error_t *err) {
  if (pc_db_strongly_observed(db, table, col, clen)) return PC_OK;
  struct pc_observed_set *s = calloc(1, sizeof *s);
  if (!s || set_add(s, table, col, clen) != 0) {
    set_free(s);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  if (set_merge_install(db, s) != 0) return pc_error_set(err, PC_NOMEM, "out of memory");
  return PC_OK;
}

pc_status_t pc_db_register_observed(pc_db_t *db, const char *name, const char *table,
                                    const char *col, size_t clen, int kind, pc_error_t *err) {
  pc_error_clear(err);
  if (!db) return pc_error_set(err, PC_INVALID, "database is NULL");
  if (!name || !name_ok(name, strlen(name)))
    return pc_error_set(err, PC_INVALID,
                        "observer name '%.80s' is not 1..%d characters of [A-Za-z0-9_.-]",
                        name ? name : "(null)", PC_MAX_OBSERVER_NAME);
  pc_status_t st = pc_check_table(table, err);
  if (st != PC_OK) {
    pc_error_prefix(err, "observer '%s'", name);
    return st;
  }
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
  if (pc_buf_append(&row, PC_OBSERVER_ROW_PREFIX, strlen(PC_OBSERVER_ROW_PREFIX)) ||
      pc_buf_append(&row, name, strlen(name)) || encode_record(&value, kind, table, col, clen)) {
    pc_buf_free(&row);
    pc_buf_free(&value);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  const char *rcol = PC_OBSERVER_COLUMN;
  st = PC_CONFLICT;
  for (int attempt = 0; attempt < REGISTER_ATTEMPTS && st == PC_CONFLICT; attempt++) {
    pc_txn_t *txn = pc_txn_begin(db, err);
    if (!txn) {
      st = err ? err->code : PC_INTERNAL;
      break;
    }
    char *v = NULL;
    size_t vlen = 0;
    st = pc_txn_get_system(txn, PC_SYSTEM_TABLE, row.p, row.len, rcol, strlen(rcol), &v, &vlen,
                           err);
    if (st == PC_OK) { /* registered before: the same, or a clash */
      record_t rec;
      if (decode_record(v, vlen, &rec) != 0) {
        st = pc_error_set(err, PC_CORRUPTION, "%s: malformed record of observer '%s'",
                          PC_SYSTEM_TABLE, name);
      } else if (rec.kind != kind || strcmp(rec.table, table) != 0 ||
                 pc_bytes_cmp(rec.col, rec.clen, col, clen) != 0) {
        st = pc_error_set(err, PC_INVALID,
                          "observer '%s' is already registered for %s/%.*s (%s); not also for "
                          "%s/%.*s (%s)",
                          name, rec.table, (int)(rec.clen > 64 ? 64 : rec.clen), rec.col,
                          kind_name(rec.kind), table, (int)(clen > 64 ? 64 : clen), col,
                          kind_name(kind));
      }
    } else if (st == PC_NOT_FOUND) {
      st = pc_txn_set_system(txn, PC_SYSTEM_TABLE, row.p, row.len, rcol, strlen(rcol), value.p,
                             value.len, err);
      if (st == PC_OK) st = pc_txn_commit(txn, err); /* PC_CONFLICT: another registered it: look again */
    }
    pc_free(v);
    pc_txn_destroy(txn);
  }
  pc_buf_free(&row);
  pc_buf_free(&value);
  if (st != PC_OK) return st;
  pc_error_clear(err);
  return kind == PC_OBSERVER_STRONG ? add_now(db, table, col, clen, err) : PC_OK;
}

int pc_ack_column(pc_buf_t *out, const char *observer, const char *col, size_t clen) {
  return pc_buf_append(out, PC_ACK_PREFIX, PC_ACK_PREFIX_LEN) ||
                 pc_buf_append(out, observer, strlen(observer)) || pc_buf_u8(out, 0) ||
                 pc_buf_append(out, col, clen)
             ? -1
             : 0;
}
