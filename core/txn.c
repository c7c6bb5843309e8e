/* txn.c — the Percolator transaction client: snapshot reads at
 * start_ts with lazy lock resolution, a write buffer, and commit by prewrite
 * with a primary lock, the commit point on the primary, then the secondaries.
 * Single-row transactions commit in one row operation. It talks to the store
 * only through store.h, so the same code runs embedded or against tablets. */
#include <search.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/db.h"
#include "base/deadline.h"
#include "base/error.h"
#include "core/failpoint.h"
#include "core/recent.h"

/* A buffered write, keyed by its encoded meta key (= (table, row, column) order). */
typedef struct bufcell {
  pc_buf_t key;
  char *table;
  char *row;
  size_t rlen;
  char *col;
  size_t clen;
  pc_write_kind_t kind; /* PUT, DELETE, or NOTIFY: a weak notification alone */
  int weak;             /* the commit writes a weak notification of the cell */
  char *value;
  size_t vlen;
  int value_apart; /* value was allocated on its own (a later write of the cell) */
} bufcell_t;

enum txn_state { TXN_OPEN, TXN_COMMITTED, TXN_ABORTED };

struct pc_txn {
  pc_db_t *db;
  uint64_t start_ts, commit_ts;
  pc_open_txn_t open; /* in the db's list of open transactions once start_ts is taken */
  uint32_t timeout_ms;
  enum txn_state state;
  void *tree; /* tsearch tree of bufcell_t* */
  size_t count, bytes;
  struct trigger *trigger; /* the notified cell of pc_txn_begin_for, else NULL */
  int reader;              /* pc_txn_begin_alongside: reads only */
};

/* The trigger of a transaction begun for a notified cell: the cell (its
 * strings in mem), the bound below which its commit deletes the cell's
 * notifications (0: none), and whether a commit did. */
typedef struct trigger {
  pc_notify_clear_t clear;
  char *mem;
  int cleared;
} trigger_t;

#define RESOLVE_ATTEMPTS 16
#define BACKOFF_MAX_MS 100u

/* ---- validation -------------------------------------------------------- */

/* [A-Za-z0-9_.-]: the characters of a table name */
static const unsigned char table_char[256] = {
    ['-'] = 1, ['.'] = 1, ['_'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

static pc_status_t check_table(const char *table, pc_error_t *err) {
  if (!table || !*table) return pc_error_set(err, PC_INVALID, "table name is empty");
  /* one pass, no strlen: table_char['\0'] is 0, so the loop stops at the end */
  size_t n = 0;
  while (n <= PC_MAX_TABLE && table_char[(unsigned char)table[n]]) n++;
  if (n > PC_MAX_TABLE)
    return pc_error_set(err, PC_INVALID, "table name of %zu bytes exceeds the limit of %d",
                        strlen(table), PC_MAX_TABLE);
  if (table[n] != '\0')
    return pc_error_set(err, PC_INVALID,
                        "table name '%.64s' has a character outside [A-Za-z0-9_.-]", table);
  return PC_OK;
}

/* Who touches a cell: a user (pc_txn_get, set, delete, notify_weak), who
 * may not name a system column nor write the system table, or the system
 * itself (pc_txn_get_system, set_system: the notification engine's acks and
 * the records of observers). */
enum access { USER_READ, USER_WRITE, SYSTEM };

static int is_system_column(const char *col, size_t clen) {
  return clen > 0 && (unsigned char)col[0] == PC_SYSTEM_COLUMN_BYTE;
}

pc_status_t pc_check_table(const char *table, pc_error_t *err) { return check_table(table, err); }

static pc_status_t check_cell(const char *table, const char *row, size_t rlen, const char *col,
                              size_t clen, enum access who, pc_error_t *err) {
  pc_status_t st = check_table(table, err);
  if (st != PC_OK) return st;
  if (!row || rlen == 0) return pc_error_set(err, PC_INVALID, "row key is empty");
  if (rlen > PC_MAX_ROW)
    return pc_error_set(err, PC_INVALID, "row key of %zu bytes exceeds the limit of %d", rlen,
                        PC_MAX_ROW);
  if (!col || clen == 0) return pc_error_set(err, PC_INVALID, "column name is empty");
  size_t max = who == SYSTEM ? PC_MAX_STORED_COLUMN : PC_MAX_COLUMN;
  if (clen > max)
    return pc_error_set(err, PC_INVALID, "column name of %zu bytes exceeds the limit of %zu", clen,
                        max);
  if (who != SYSTEM && is_system_column(col, clen))
    return pc_error_set(err, PC_INVALID,
                        "column of %zu bytes begins with byte 0xFF, which marks the system's "
                        "columns (observers' acks)",
                        clen);
  if (who == USER_WRITE && strcmp(table, PC_SYSTEM_TABLE) == 0)
    return pc_error_set(err, PC_INVALID,
                        "table '%s' holds the system's records (the observers): it is read-only",
                        table);
  return PC_OK;
}

static pc_status_t check_open(const pc_txn_t *txn, pc_error_t *err) {
  if (!txn) return pc_error_set(err, PC_INVALID, "transaction is NULL");
  if (txn->state != TXN_OPEN)
    return pc_error_set(err, PC_STATE, "transaction %llu is already %s",
                        (unsigned long long)txn->start_ts,
                        txn->state == TXN_COMMITTED ? "committed" : "aborted");
  return PC_OK;
}

/* ---- begin / buffer ---------------------------------------------------- */

pc_txn_t *pc_txn_begin(pc_db_t *db, pc_error_t *err) {
  return pc_txn_begin_within(db, db ? db->opts.timeout_ms : 0, err);
}

pc_txn_t *pc_txn_begin_within(pc_db_t *db, uint32_t timeout_ms, pc_error_t *err) {
  pc_error_clear(err);
  if (!db) {
    pc_error_set(err, PC_INVALID, "database is NULL");
    return NULL;
  }
  pc_txn_t *txn = malloc(sizeof *txn);
  if (!txn) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  *txn = (pc_txn_t){.db = db, .timeout_ms = timeout_ms ? timeout_ms : 1, .state = TXN_OPEN};
  if (db->opts.lazy_start) return txn; /* start_ts at the first use: take_start_ts */
  if (pc_db_open_txn(db, &txn->open, txn->timeout_ms, &txn->start_ts, err) != PC_OK) {
    free(txn);
    return NULL;
  }
  return txn;
}

pc_txn_t *pc_txn_begin_for(pc_db_t *db, const pc_cell_t *cell, pc_error_t *err) {
  pc_error_clear(err);
  if (!cell) {
    pc_error_set(err, PC_INVALID, "notified cell is NULL");
    return NULL;
  }
  size_t tl = strlen(cell->table);
  trigger_t *tr = calloc(1, sizeof *tr);
  char *m = malloc(tl + 1 + cell->rlen + cell->clen + 1);
  if (!tr || !m) {
    free(tr);
    free(m);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  memcpy(m, cell->table, tl + 1);
  memcpy(m + tl + 1, cell->row, cell->rlen);
  memcpy(m + tl + 1 + cell->rlen, cell->col, cell->clen);
  tr->mem = m;
  tr->clear.cell = (pc_cell_t){m, m + tl + 1, cell->rlen, m + tl + 1 + cell->rlen, cell->clen};
  pc_txn_t *txn = pc_txn_begin(db, err);
  if (!txn) {
    free(m);
    free(tr);
    return NULL;
  }
  txn->trigger = tr;
  return txn;
}

void pc_txn_trigger_bound(pc_txn_t *txn, uint64_t below, const char *observers, size_t olen) {
  if (!txn || !txn->trigger) return;
  txn->trigger->clear.below = below;
  txn->trigger->clear.observers = observers;
  txn->trigger->clear.olen = olen;
}

int pc_txn_trigger_cleared(const pc_txn_t *txn) {
  return txn && txn->trigger && txn->trigger->cleared;
}

/* With lazy_start: takes start_ts now, if no read has taken it yet. */
static pc_status_t take_start_ts(pc_txn_t *txn, pc_error_t *err) {
  if (txn->start_ts) return PC_OK;
  return pc_db_open_txn(txn->db, &txn->open, txn->timeout_ms, &txn->start_ts, err);
}

pc_txn_t *pc_txn_begin_alongside(pc_txn_t *of, pc_error_t *err) {
  pc_error_clear(err);
  if (check_open(of, err) != PC_OK || take_start_ts(of, err) != PC_OK) return NULL;
  pc_txn_t *txn = malloc(sizeof *txn);
  if (!txn) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  *txn = (pc_txn_t){.db = of->db,
                    .start_ts = of->start_ts,
                    .timeout_ms = of->timeout_ms,
                    .state = TXN_OPEN,
                    .reader = 1};
  /* of holds the safe point at or below start_ts while it is open, and it
   * outlives this one: linked at start_ts, this one holds it too */
  pc_db_link_txn_at(of->db, &txn->open, of->start_ts);
  return txn;
}

uint64_t pc_txn_start_ts(const pc_txn_t *txn) { return txn->start_ts; }
uint64_t pc_txn_commit_ts(const pc_txn_t *txn) { return txn->commit_ts; }
void pc_txn_set_timeout_ms(pc_txn_t *txn, uint32_t ms) { txn->timeout_ms = ms ? ms : 1; }

static int bufcell_cmp(const void *a, const void *b) {
  const bufcell_t *x = a, *y = b;
  return pc_bytes_cmp(x->key.p, x->key.len, y->key.p, y->key.len);
}

/* A buffered cell is one allocation: the struct, then its key, table, row,
 * column and first value (a transaction of an index run buffers thousands). */
static void bufcell_free(void *p) {
  bufcell_t *b = p;
  if (!b) return;
  if (b->value_apart) free(b->value);
  free(b);
}

static void clear_buffer(pc_txn_t *txn) {
  tdestroy(txn->tree, bufcell_free);
  txn->tree = NULL;
  txn->count = txn->bytes = 0;
}

static char *dup_bytes(const char *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    if (n) memcpy(d, p, n);
    d[n] = '\0';
  }
  return d;
}

/* The buffered write of the cell whose key is key, or NULL. */
static bufcell_t *buffer_find_key(pc_txn_t *txn, const pc_buf_t *key) {
  if (!txn->tree) return NULL;
  bufcell_t probe = {0};
  probe.key = *key;
  void *found = tfind(&probe, &txn->tree, bufcell_cmp);
  return found ? *(bufcell_t **)found : NULL;
}

/* The buffered write of a cell, or NULL. */
static bufcell_t *buffer_find(pc_txn_t *txn, const pc_cell_t *c, pc_error_t *err, int *oom) {
  *oom = 0;
  if (!txn->tree) return NULL;
  char kb[256];
  pc_buf_t key = PC_BUF_ON(kb); /* on the heap only when longer */
  if (pc_key_cell(&key, PC_KS_META, c) != 0) {
    *oom = 1;
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  bufcell_t *found = buffer_find_key(txn, &key);
  pc_buf_free(&key);
  return found;
}

/* Buffers a write (PUT or DELETE) of the cell, or with kind NOTIFY a weak
 * notification of it: a cell both written and notified keeps its write and
 * is notified too, in whichever order the calls came. */
static pc_status_t buffer_put(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                              const char *col, size_t clen, pc_write_kind_t kind,
                              const char *value, size_t vlen, enum access who, pc_error_t *err) {
  pc_status_t st = check_open(txn, err);
  if (st == PC_OK && txn->reader)
    st = pc_error_set(err, PC_INVALID,
                      "transaction %llu reads alongside another one and cannot write",
                      (unsigned long long)txn->start_ts);
  if (st == PC_OK) st = check_cell(table, row, rlen, col, clen, who, err);
  if (st != PC_OK) return st;
  if (kind == PC_WRITE_PUT) {
    if (!value || vlen == 0)
      return pc_error_set(err, PC_INVALID, "value is empty (delete removes a cell)");
    if (vlen > PC_MAX_VALUE)
      return pc_error_set(err, PC_INVALID, "value of %zu bytes exceeds the limit of %u", vlen,
                          PC_MAX_VALUE);
  }
  pc_cell_t probe = {table, row, rlen, col, clen};
  char kb[256];
  pc_buf_t key = PC_BUF_ON(kb); /* on the heap only when longer */
  if (pc_key_cell(&key, PC_KS_META, &probe) != 0)
    return pc_error_set(err, PC_NOMEM, "out of memory");
  bufcell_t *old = buffer_find_key(txn, &key);
  if (old && kind == PC_WRITE_NOTIFY) { /* the cell's write, if any, stays */
    old->weak = 1;
    pc_buf_free(&key);
    return PC_OK;
  }
  size_t add = rlen + clen + (kind == PC_WRITE_PUT ? vlen : 0);
  size_t old_bytes = old ? old->rlen + old->clen + old->vlen : 0;
  if (txn->bytes - old_bytes + add > PC_MAX_TXN_BYTES) {
    pc_buf_free(&key);
    return pc_error_set(err, PC_INVALID,
                        "transaction would buffer more than %u bytes of writes",
                        PC_MAX_TXN_BYTES);
  }
  if (!old && txn->count >= PC_MAX_TXN_MUTATIONS) {
    pc_buf_free(&key);
    return pc_error_set(err, PC_INVALID, "transaction would buffer more than %u cells",
                        PC_MAX_TXN_MUTATIONS);
  }
  if (old) { /* a later write of the same cell replaces the earlier one (and keeps its
               * weak notification) */
    pc_buf_free(&key);
    char *v = kind == PC_WRITE_PUT ? dup_bytes(value, vlen) : NULL;
    if (kind == PC_WRITE_PUT && !v) return pc_error_set(err, PC_NOMEM, "out of memory");
    if (old->value_apart) free(old->value);
    old->value = v;
    old->value_apart = v != NULL;
    old->vlen = v ? vlen : 0;
    old->kind = kind;
    txn->bytes = txn->bytes - old_bytes + add;
    return PC_OK;
  }
  size_t tl = strlen(table), vl = kind == PC_WRITE_PUT ? vlen : 0;
  bufcell_t *b = malloc(sizeof *b + key.len + tl + rlen + clen + vl + 5);
  if (!b) {
    pc_buf_free(&key);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  memset(b, 0, sizeof *b);
  char *p = (char *)(b + 1);
  b->key = (pc_buf_t){p, key.len, key.len, 0}; /* (not the heap's: never freed alone) */
  memcpy(p, key.p, key.len);
  p[key.len] = '\0';
  p += key.len + 1;
  pc_buf_free(&key);
  b->table = p;
  memcpy(p, table, tl + 1);
  p += tl + 1;
  b->row = p;
  memcpy(p, row, rlen);
  p[rlen] = '\0';
  p += rlen + 1;
  b->col = p;
  memcpy(p, col, clen);
  p[clen] = '\0';
  p += clen + 1;
  if (kind == PC_WRITE_PUT) {
    b->value = p;
    memcpy(p, value, vlen);
    p[vlen] = '\0';
    b->vlen = vlen;
  }
  b->rlen = rlen;
  b->clen = clen;
  b->kind = kind;
  b->weak = kind == PC_WRITE_NOTIFY;
  if (!tsearch(b, &txn->tree, bufcell_cmp)) {
    bufcell_free(b);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  txn->count++;
  txn->bytes += add;
  return PC_OK;
}

pc_status_t pc_txn_set(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                       const char *col, size_t clen, const char *value, size_t vlen,
                       pc_error_t *err) {
  pc_error_clear(err);
  return buffer_put(txn, table, row, rlen, col, clen, PC_WRITE_PUT, value, vlen, USER_WRITE, err);
}

pc_status_t pc_txn_set_system(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                              const char *col, size_t clen, const char *value, size_t vlen,
                              pc_error_t *err) {
  pc_error_clear(err);
  return buffer_put(txn, table, row, rlen, col, clen, PC_WRITE_PUT, value, vlen, SYSTEM, err);
}

pc_status_t pc_txn_delete(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                          const char *col, size_t clen, pc_error_t *err) {
  pc_error_clear(err);
  return buffer_put(txn, table, row, rlen, col, clen, PC_WRITE_DELETE, NULL, 0, USER_WRITE, err);
}

pc_status_t pc_txn_delete_system(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                                 const char *col, size_t clen, pc_error_t *err) {
  pc_error_clear(err);
  return buffer_put(txn, table, row, rlen, col, clen, PC_WRITE_DELETE, NULL, 0, SYSTEM, err);
}

pc_status_t pc_txn_notify_weak(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                               const char *col, size_t clen, pc_error_t *err) {
  pc_error_clear(err);
  return buffer_put(txn, table, row, rlen, col, clen, PC_WRITE_NOTIFY, NULL, 0, USER_WRITE, err);
}

/* ---- lock resolution ---------------------------------------------------- */

static uint32_t remaining_ms(uint64_t deadline) {
  uint64_t now = pc_now_mono_ms();
  return now >= deadline ? 0 : (uint32_t)(deadline - now);
}

typedef struct ts_ctx {
  pc_db_t *db;
  uint32_t timeout_ms;
} ts_ctx_t;

static pc_status_t ts_source(void *ctx, uint64_t *ts, pc_error_t *err) {
  ts_ctx_t *t = ctx;
  return pc_db_ts(t->db, t->timeout_ms, ts, err);
}

/* A lock of the system table (cell: the one the refused request named)
 * that this client may not settle (a data client: tablet.c refuses it)
 * stays for the system to settle: to a reader it is a lock held, which it
 * waits for, as for a live owner's. */
static pc_status_t system_lock(pc_status_t st, const pc_cell_t *cell, uint64_t start_ts,
                               pc_error_t *err) {
  if (st != PC_DENIED || strcmp(cell->table, PC_SYSTEM_TABLE) != 0) return st;
  pc_error_t why = err ? *err : (pc_error_t){st, ""};
  char name[160];
  return pc_error_set(err, PC_LOCKED,
                      "%s is locked by transaction %llu, which only the system may settle (%s)",
                      pc_cell_str(cell, name, sizeof name), (unsigned long long)start_ts, why.text);
}

/* Settles the transaction behind lock (found on lock->c*): rolls that cell
 * forward if its primary committed, back if the primary was rolled back or
 * its owner is dead or its TTL passed. PC_OK when the cell is free of it,
 * PC_LOCKED when its owner is alive. */
pc_status_t pc_txn_resolve_lock(pc_db_t *db, const pc_lock_info_t *lock, uint64_t deadline,
                                pc_error_t *err) {
  pc_store_t *s = db->store;
  pc_cell_t primary = {lock->ptable.p, lock->prow.p, lock->prow.len, lock->pcol.p,
                       lock->pcol.len};
  pc_cell_t cell = {lock->ctable.p, lock->crow.p, lock->crow.len, lock->ccol.p, lock->ccol.len};
  int owner_dead = !db->liveness.is_alive(db->liveness.ctx, lock->session);
  uint64_t now_ts;
  pc_status_t st = pc_db_ts(db, remaining_ms(deadline) ? remaining_ms(deadline) : 1, &now_ts, err);
  if (st != PC_OK) return st;
  pc_txn_state_t state;
  uint64_t commit_ts;
  st = s->ops->check_txn(s, &primary, lock->start_ts, now_ts, owner_dead, &state, &commit_ts, err);
  if (st != PC_OK) return system_lock(st, &primary, lock->start_ts, err);
  if ((st = PC_FAILPOINT("resolve.after_check", err)) != PC_OK) return st;
  int is_primary = strcmp(primary.table, cell.table) == 0 && primary.rlen == cell.rlen &&
                   primary.clen == cell.clen && memcmp(primary.row, cell.row, cell.rlen) == 0 &&
                   memcmp(primary.col, cell.col, cell.clen) == 0;
  switch (state) {
    case PC_TXN_COMMITTED:
      if (is_primary) return PC_OK;
      st = system_lock(s->ops->commit(s, &cell, 1, lock->start_ts, commit_ts, err), &cell,
                       lock->start_ts, err);
      /* a weak notification's lock leaves no record when it commits: gone
       * without one, another resolver (or its owner) committed it first */
      if (st == PC_ABORTED && lock->kind == PC_WRITE_NOTIFY) {
        pc_error_clear(err);
        st = PC_OK;
      }
      return st;
    case PC_TXN_ROLLED_BACK:
      if (is_primary) return PC_OK;
      return system_lock(s->ops->rollback(s, &cell, 1, lock->start_ts, err), &cell,
                         lock->start_ts, err);
    case PC_TXN_ALIVE:
    default:
    {
      char name[160], pname[160];
      return pc_error_set(err, PC_LOCKED, "%s is locked by live transaction %llu (primary %s)",
                          pc_cell_str(&cell, name, sizeof name), (unsigned long long)lock->start_ts,
                          pc_cell_str(&primary, pname, sizeof pname));
    }
  }
}

/* For readers: resolves a lock met at read time, backing off while its owner
 * is alive, until the deadline. PC_OK means "read again". */
static pc_status_t wait_out_lock(pc_db_t *db, pc_lock_info_t *lock, uint64_t deadline,
                                 uint32_t *backoff, pc_error_t *err) {
  pc_status_t st = pc_txn_resolve_lock(db, lock, deadline, err);
  if (st == PC_TIMEOUT && remaining_ms(deadline) == 0) {
    /* the caller's time ran out while settling the lock: to the caller the
     * cell stayed locked for longer than its timeout */
    pc_error_t why = err ? *err : (pc_error_t){PC_TIMEOUT, ""};
    pc_error_set(err, PC_LOCKED, "%.*s/%.*s/%.*s is locked by transaction %llu (gave up: %s)",
                 (int)lock->ctable.len, lock->ctable.p,
                 (int)(lock->crow.len > 64 ? 64 : lock->crow.len), lock->crow.p,
                 (int)(lock->ccol.len > 64 ? 64 : lock->ccol.len), lock->ccol.p,
                 (unsigned long long)lock->start_ts, why.text);
    st = PC_LOCKED;
  }
  pc_lock_info_free(lock);
  if (st != PC_LOCKED) return st;
  uint32_t left = remaining_ms(deadline);
  if (left == 0) {
    pc_error_prefix(err, "timed out waiting");
    return PC_LOCKED;
  }
  pc_sleep_ms(*backoff < left ? *backoff : left);
  *backoff = *backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : *backoff * 2;
  return PC_OK;
}

/* For readers: a read that met a lock, waited, and then ran out of time on
 * the next read (its network call shares the caller's deadline) reports the
 * lock it was waiting on, not the timeout of the last call. */
static pc_status_t gave_up_on_lock(pc_status_t st, uint64_t deadline, uint64_t lock_ts,
                                   const char *table, const char *row, size_t rlen,
                                   pc_error_t *err) {
  if (st != PC_TIMEOUT || !lock_ts || remaining_ms(deadline) != 0) return st;
  pc_error_t why = err ? *err : (pc_error_t){PC_TIMEOUT, ""};
  return pc_error_set(err, PC_LOCKED,
                      "%s/%.*s is locked by transaction %llu (gave up reading again: %s)", table,
                      (int)(rlen > 64 ? 64 : rlen), row, (unsigned long long)lock_ts, why.text);
}

/* ---- reads ------------------------------------------------------------- */

static pc_status_t txn_get(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                           const char *col, size_t clen, char **value, size_t *vlen,
                           enum access who, pc_error_t *err);

pc_status_t pc_txn_get(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                       const char *col, size_t clen, char **value, size_t *vlen,
                       pc_error_t *err) {
  return txn_get(txn, table, row, rlen, col, clen, value, vlen, USER_READ, err);
}

pc_status_t pc_txn_get_system(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                              const char *col, size_t clen, char **value, size_t *vlen,
                              pc_error_t *err) {
  return txn_get(txn, table, row, rlen, col, clen, value, vlen, SYSTEM, err);
}

static pc_status_t txn_get(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                           const char *col, size_t clen, char **value, size_t *vlen,
                           enum access who, pc_error_t *err) {
  pc_error_clear(err);
  if (value) *value = NULL;
  if (vlen) *vlen = 0;
  if (!value || !vlen) return pc_error_set(err, PC_INVALID, "get: value or vlen is NULL");
  pc_status_t st = check_open(txn, err);
  if (st == PC_OK) st = check_cell(table, row, rlen, col, clen, who, err);
  if (st != PC_OK) return st;
  pc_cell_t c = {table, row, rlen, col, clen};
  int oom;
  bufcell_t *own = buffer_find(txn, &c, err, &oom);
  if (oom) return PC_NOMEM;
  if (own && own->kind != PC_WRITE_NOTIFY) { /* read your own writes */
    if (own->kind == PC_WRITE_DELETE) return PC_NOT_FOUND;
    *value = dup_bytes(own->value, own->vlen);
    if (!*value) return pc_error_set(err, PC_NOMEM, "out of memory");
    *vlen = own->vlen;
    return PC_OK;
  }
  pc_store_t *s = txn->db->store;
  /* the deadline is taken only when something can block: a store on the
   * network, or a lock met on the way (the common embedded read needs no clock) */
  int remote = s->ops->shard_of != NULL;
  uint64_t deadline = remote ? pc_now_mono_ms() + txn->timeout_ms : 0;
  uint64_t outer = remote ? pc_deadline_set(deadline) : 0; /* bounds network calls */
  uint32_t backoff = 1;
  uint64_t lock_ts = 0; /* start_ts of the last lock met */
  for (;;) {
    pc_lock_info_t lock; /* filled by the store with PC_LOCKED only (store.h) */
    if (txn->start_ts) {
      st = s->ops->get(s, &c, txn->start_ts, value, vlen, &lock, err);
    } else { /* lazy_start: the store takes the snapshot's timestamp as it reads */
      ts_ctx_t tc = {txn->db, txn->timeout_ms};
      pc_db_link_txn(txn->db, &txn->open);
      st = s->ops->get_fresh(s, &c, ts_source, &tc, &txn->start_ts, value, vlen, &lock, err);
      if (txn->start_ts) pc_db_txn_started(&txn->open, txn->start_ts);
      else pc_db_close_txn(txn->db, &txn->open);
    }
    if (st != PC_LOCKED) break;
    if (!deadline) deadline = pc_now_mono_ms() + txn->timeout_ms;
    lock_ts = lock.start_ts;
    st = wait_out_lock(txn->db, &lock, deadline, &backoff, err);
    if (st != PC_OK) break;
  }
  st = gave_up_on_lock(st, deadline, lock_ts, table, row, rlen, err);
  if (remote) pc_deadline_set(outer);
  return st;
}

/* ---- many cells ------------------------------------------------------- */

static void values_clear(pc_value_t *values, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(values[i].value);
    values[i] = (pc_value_t){NULL, 0};
  }
}

/* The cells not answered from the buffer, read through the store's get_many
 * (one request per shard), resolving the locks met and reading those cells
 * again, until the deadline. */
static pc_status_t store_get_many(pc_txn_t *txn, const pc_cell_ref_t *cells, const size_t *idx,
                                  size_t m, pc_value_t *values, pc_error_t *err) {
  pc_store_t *s = txn->db->store;
  pc_cell_t *cs = malloc(m * sizeof *cs);
  pc_got_t *got = malloc(m * sizeof *got);
  size_t *left = malloc(m * sizeof *left);
  pc_status_t st = PC_OK;
  if (!cs || !got || !left) st = pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t k = 0; k < m && st == PC_OK; k++) left[k] = idx[k];
  uint64_t deadline = pc_now_mono_ms() + txn->timeout_ms;
  uint64_t outer = pc_deadline_set(deadline);
  uint32_t backoff = 1;
  size_t nleft = m;
  while (st == PC_OK && nleft > 0) {
    for (size_t k = 0; k < nleft; k++) {
      const pc_cell_ref_t *c = &cells[left[k]];
      cs[k] = (pc_cell_t){c->table, c->row, c->row_len, c->column, c->column_len};
    }
    pc_lock_info_t lock;
    st = s->ops->get_many(s, cs, nleft, txn->start_ts, got, &lock, err);
    if (st != PC_OK) break;
    size_t still = 0;
    for (size_t k = 0; k < nleft; k++) {
      if (got[k].status == PC_LOCKED) {
        left[still++] = left[k];
        continue;
      }
      values[left[k]] = (pc_value_t){got[k].value, got[k].status == PC_OK ? got[k].vlen : 0};
    }
    if (still == 0) break;
    nleft = still;
    st = wait_out_lock(txn->db, &lock, deadline, &backoff, err); /* frees lock */
  }
  pc_deadline_set(outer);
  free(cs);
  free(got);
  free(left);
  return st;
}

static pc_status_t txn_get_many(pc_txn_t *txn, const pc_cell_ref_t *cells, size_t n,
                                pc_value_t *values, enum access who, pc_error_t *err) {
  pc_error_clear(err);
  if (n && (!cells || !values))
    return pc_error_set(err, PC_INVALID, "get_many: %s is NULL", !cells ? "cells" : "values");
  for (size_t i = 0; i < n; i++) values[i] = (pc_value_t){NULL, 0};
  pc_status_t st = check_open(txn, err);
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    const pc_cell_ref_t *c = &cells[i];
    st = check_cell(c->table, c->row, c->row_len, c->column, c->column_len, who, err);
    if (st != PC_OK) pc_error_prefix(err, "get_many: cells[%zu]", i);
  }
  if (st != PC_OK || n == 0) return st;
  pc_store_t *s = txn->db->store;
  if (!s->ops->get_many || n == 1) { /* embedded: each read is a lookup in this process */
    for (size_t i = 0; i < n && st == PC_OK; i++) {
      const pc_cell_ref_t *c = &cells[i];
      st = txn_get(txn, c->table, c->row, c->row_len, c->column, c->column_len,
                   &values[i].value, &values[i].vlen, who, err);
      if (st == PC_NOT_FOUND) st = PC_OK;
    }
    if (st != PC_OK) values_clear(values, n);
    return st;
  }
  /* own writes first; the store answers the rest in one round */
  size_t *idx = malloc(n * sizeof *idx), m = 0;
  if (!idx) return pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t i = 0; i < n && st == PC_OK; i++) {
    const pc_cell_ref_t *c = &cells[i];
    pc_cell_t cell = {c->table, c->row, c->row_len, c->column, c->column_len};
    int oom;
    bufcell_t *own = buffer_find(txn, &cell, err, &oom);
    if (oom) st = PC_NOMEM;
    else if (!own || own->kind == PC_WRITE_NOTIFY) idx[m++] = i;
    else if (own->kind == PC_WRITE_PUT) {
      if (!(values[i].value = dup_bytes(own->value, own->vlen)))
        st = pc_error_set(err, PC_NOMEM, "out of memory");
      values[i].vlen = own->vlen;
    }
  }
  if (st == PC_OK && m && !txn->start_ts) st = take_start_ts(txn, err);
  if (st == PC_OK && m) st = store_get_many(txn, cells, idx, m, values, err);
  free(idx);
  if (st != PC_OK) values_clear(values, n);
  return st;
}

pc_status_t pc_txn_get_many(pc_txn_t *txn, const pc_cell_ref_t *cells, size_t n,
                            pc_value_t *values, pc_error_t *err) {
  return txn_get_many(txn, cells, n, values, USER_READ, err);
}

pc_status_t pc_txn_get_many_system(pc_txn_t *txn, const pc_cell_ref_t *cells, size_t n,
                                   pc_value_t *values, pc_error_t *err) {
  return txn_get_many(txn, cells, n, values, SYSTEM, err);
}

pc_status_t pc_txn_set_many(pc_txn_t *txn, const pc_cell_ref_t *cells, const pc_value_t *values,
                            size_t n, pc_error_t *err) {
  pc_error_clear(err);
  if (n && (!cells || !values))
    return pc_error_set(err, PC_INVALID, "set_many: %s is NULL", !cells ? "cells" : "values");
  for (size_t i = 0; i < n; i++) {
    const pc_cell_ref_t *c = &cells[i];
    pc_status_t st =
        values[i].value
            ? buffer_put(txn, c->table, c->row, c->row_len, c->column, c->column_len,
                         PC_WRITE_PUT, values[i].value, values[i].vlen, USER_WRITE, err)
            : buffer_put(txn, c->table, c->row, c->row_len, c->column, c->column_len,
                         PC_WRITE_DELETE, NULL, 0, USER_WRITE, err);
    if (st != PC_OK) {
      pc_error_prefix(err, "set_many: cells[%zu]", i);
      return st;
    }
  }
  return PC_OK;
}

/* ---- commit ------------------------------------------------------------ */

typedef struct collect {
  bufcell_t **cells;
  size_t n;
} collect_t;

static void collect_walk(const void *node, VISIT which, void *ctx) {
  if (which != postorder && which != leaf) return;
  collect_t *c = ctx;
  c->cells[c->n++] = *(bufcell_t *const *)node;
}

/* The buffered writes in key order; caller frees the array (not the cells). */
static bufcell_t **sorted_cells(pc_txn_t *txn) {
  collect_t c = {malloc((txn->count ? txn->count : 1) * sizeof(bufcell_t *)), 0};
  if (c.cells) twalk_r(txn->tree, collect_walk, &c);
  return c.cells;
}

static int same_row(const pc_cell_t *a, const pc_cell_t *b) {
  return a->rlen == b->rlen && strcmp(a->table, b->table) == 0 &&
         memcmp(a->row, b->row, a->rlen) == 0;
}

/* Prewrites one group of mutations, resolving dead owners' locks on the way.
 * A live transaction's lock is a conflict: the first prewriter wins. */
static pc_status_t prewrite_group(pc_txn_t *txn, const pc_mutation_t *muts, size_t n,
                                  const pc_lock_spec_t *spec, uint64_t deadline,
                                  pc_error_t *err) {
  pc_store_t *s = txn->db->store;
  for (int attempt = 0; attempt < RESOLVE_ATTEMPTS; attempt++) {
    pc_lock_info_t lock = {0};
    pc_status_t st = s->ops->prewrite(s, muts, n, spec, &lock, err);
    if (st != PC_LOCKED) return st;
    st = pc_txn_resolve_lock(txn->db, &lock, deadline, err);
    pc_lock_info_free(&lock);
    if (st == PC_LOCKED) return err ? (err->code = PC_CONFLICT) : PC_CONFLICT;
    if (st != PC_OK) return st;
  }
  return pc_error_set(err, PC_CONFLICT, "prewrite: locks kept reappearing");
}

/* The one place that decides whether a commit deletes its trigger's
 * notifications (pc_txn_begin_for): when a bound is set and the commit is
 * one store operation (one-phase, the caller's case) that writes in the
 * trigger's row. That operation holds the row's latch, so no commit that
 * notifies the cell comes between the run and the deletion, and on a tablet
 * the row is the tablet's own; the run and the end of its notifications are
 * then one durable write. A strong observer always writes there (its ack).
 * Otherwise (NULL) the caller deletes them with a write of its own. */
static pc_notify_clear_t *trigger_clear(pc_txn_t *txn, const pc_mutation_t *muts, size_t n) {
  trigger_t *tr = txn->trigger;
  if (!tr || tr->clear.below <= 1) return NULL;
  for (size_t i = 0; i < n; i++)
    if (same_row(&muts[i].cell, &tr->clear.cell)) return &tr->clear;
  return NULL;
}

/* Commits a transaction of one shard in one store operation, resolving dead
 * owners' locks on the way. */
static pc_status_t commit_in_one_phase(pc_txn_t *txn, const pc_mutation_t *muts, size_t n,
                                       uint64_t deadline, pc_error_t *err) {
  pc_store_t *s = txn->db->store;
  ts_ctx_t tc = {txn->db, txn->timeout_ms};
  pc_notify_clear_t *clear = trigger_clear(txn, muts, n);
  pc_status_t st;
  for (int attempt = 0; attempt < RESOLVE_ATTEMPTS; attempt++) {
    pc_lock_info_t lock = {0};
    st = s->ops->commit_one_phase(s, muts, n, txn->start_ts, ts_source, &tc, clear,
                                  &txn->commit_ts, &lock, err);
    if (st == PC_OK && clear) txn->trigger->cleared = clear->done;
    if (st != PC_LOCKED) return st;
    st = pc_txn_resolve_lock(txn->db, &lock, deadline, err);
    pc_lock_info_free(&lock);
    if (st == PC_LOCKED) return err ? (err->code = PC_CONFLICT) : PC_CONFLICT;
    if (st != PC_OK) return st;
  }
  return pc_error_set(err, PC_CONFLICT, "commit: locks kept reappearing");
}

/* Cells of muts[from, to) into cells[]. */
static void cells_of(const pc_mutation_t *muts, size_t from, size_t to, pc_cell_t *cells) {
  for (size_t i = from; i < to; i++) cells[i - from] = muts[i].cell;
}

/* Rolls back what the first `groups` row groups prewrote, primary first. */
static void rollback_groups(pc_txn_t *txn, const pc_mutation_t *muts, const size_t *bounds,
                            size_t groups, pc_cell_t *cells) {
  pc_store_t *s = txn->db->store;
  for (size_t g = 0; g < groups; g++) {
    cells_of(muts, bounds[g], bounds[g + 1], cells);
    pc_error_t ignored;
    (void)s->ops->rollback(s, cells, bounds[g + 1] - bounds[g], txn->start_ts, &ignored);
  }
}

/* After the request that decides a commit (the primary's commit, or a
 * one-phase commit) failed without a verdict — its reply lost, the store
 * erring after the write — find out what happened, atomically on the primary:
 * check_txn with owner_dead set either finds the commit record (the commit
 * stands: *committed = 1, txn->commit_ts set) or rolls the transaction back,
 * leaving a rollback record so that a delayed copy of the request fails.
 * Returns PC_OK when the outcome is known. */
static pc_status_t settle_own_commit(pc_txn_t *txn, const pc_cell_t *primary, int *committed) {
  pc_store_t *s = txn->db->store;
  pc_error_t e;
  uint64_t now;
  pc_txn_state_t state;
  uint64_t cts = 0;
  *committed = 0;
  /* the failure may have used up the caller's time: settling gets one more timeout */
  uint64_t outer = pc_deadline_set(pc_now_mono_ms() + txn->timeout_ms);
  pc_status_t st = pc_db_ts(txn->db, txn->timeout_ms, &now, &e);
  if (st == PC_OK) st = PC_FAILPOINT("txn.settle.before_check", &e);
  if (st == PC_OK) st = s->ops->check_txn(s, primary, txn->start_ts, now, 1, &state, &cts, &e);
  pc_deadline_set(outer);
  if (st != PC_OK) return st;
  if (state == PC_TXN_COMMITTED) {
    *committed = 1;
    txn->commit_ts = cts;
  }
  return PC_OK;
}

/* A failpoint hit inside commit: "return" makes the client vanish right there,
 * leaving what it wrote for resolvers, as a crash would (without exiting). */
#define VANISH_AT(name)                                \
  do {                                                 \
    if (PC_FAILPOINT(name, err) != PC_OK) goto vanish; \
  } while (0)

/* Runs the requests of groups [1, groups) — the secondaries, one group per
 * shard — of a commit stage: prewrites with spec, else commits at
 * txn->commit_ts. A store with shards sends them all at once from this
 * thread (prewrite_many, commit_many: one round trip for the stage); a
 * prewrite that meets a lock is then resolved and sent again on its own.
 * Returns the first failure, copied into err. */
static pc_status_t run_secondaries(pc_txn_t *txn, const pc_mutation_t *muts, const size_t *bounds,
                                   size_t groups, const pc_lock_spec_t *spec, uint64_t deadline,
                                   pc_cell_t *cells, pc_error_t *err) {
  size_t n = groups - 1;
  if (n == 0) return PC_OK;
  pc_store_t *s = txn->db->store;
  pc_store_req_t *reqs = calloc(n, sizeof *reqs);
  if (!reqs) return pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t k = 0; k < n; k++) {
    size_t g = k + 1;
    reqs[k].muts = muts + bounds[g];
    reqs[k].cells = cells + bounds[g];
    reqs[k].n = bounds[g + 1] - bounds[g];
    if (!spec) cells_of(muts, bounds[g], bounds[g + 1], cells + bounds[g]);
  }
  int many = spec ? s->ops->prewrite_many != NULL : s->ops->commit_many != NULL;
  if (many && spec) s->ops->prewrite_many(s, reqs, n, spec);
  else if (many) s->ops->commit_many(s, reqs, n, txn->start_ts, txn->commit_ts);
  for (size_t k = 0; k < n; k++) {
    pc_store_req_t *q = &reqs[k];
    if (!many) {
      pc_error_clear(&q->err);
      q->st = spec ? prewrite_group(txn, q->muts, q->n, spec, deadline, &q->err)
                   : s->ops->commit(s, q->cells, q->n, txn->start_ts, txn->commit_ts, &q->err);
    } else if (spec && q->st == PC_LOCKED) { /* as prewrite_group: resolve, send again */
      pc_error_t why;
      pc_status_t r = pc_txn_resolve_lock(txn->db, &q->lock, deadline, &why);
      pc_lock_info_free(&q->lock);
      if (r == PC_OK) {
        pc_error_clear(&q->err);
        q->st = prewrite_group(txn, q->muts, q->n, spec, deadline, &q->err);
      } else if (r == PC_LOCKED) { /* a live owner: the first prewriter wins */
        q->st = pc_error_set(&q->err, PC_CONFLICT, "%s", why.text);
      } else {
        q->st = r;
        q->err = why;
      }
    }
  }
  pc_status_t st = PC_OK;
  for (size_t k = 0; k < n && st == PC_OK; k++)
    if (reqs[k].st != PC_OK) {
      st = reqs[k].st;
      if (err) *err = reqs[k].err;
    }
  free(reqs);
  return st;
}

static pc_status_t two_phase_commit(pc_txn_t *txn, const pc_mutation_t *muts,
                                    const size_t *bounds, size_t groups, uint64_t deadline,
                                    pc_cell_t *cells, pc_error_t *err) {
  pc_store_t *s = txn->db->store;
  pc_lock_spec_t spec = {muts[0].cell, txn->start_ts, pc_db_lock_ttl(txn->db, &txn->open),
                         pc_db_session(txn->db)};
  int parallel = s->ops->shard_of != NULL;
  size_t done = 0; /* groups prewritten (or tried, in parallel mode) */
  pc_status_t st;
  for (size_t g = 0; g < groups; g++) {
    if (parallel && g == 1) { /* every secondary request at once */
      st = run_secondaries(txn, muts, bounds, groups, &spec, deadline, cells, err);
      done = groups;
      if (st != PC_OK) {
        rollback_groups(txn, muts, bounds, done, cells);
        return st;
      }
      for (size_t k = 1; k < groups; k++) VANISH_AT("txn.prewrite.after_secondary");
      break;
    }
    st = prewrite_group(txn, muts + bounds[g], bounds[g + 1] - bounds[g], &spec, deadline, err);
    if (st != PC_OK) {
      rollback_groups(txn, muts, bounds, done, cells);
      return st;
    }
    done++;
    VANISH_AT(g == 0 ? "txn.prewrite.after_primary" : "txn.prewrite.after_secondary");
  }
  st = pc_db_ts(txn->db, remaining_ms(deadline) ? remaining_ms(deadline) : 1, &txn->commit_ts, err);
  if (st != PC_OK) {
    rollback_groups(txn, muts, bounds, done, cells);
    txn->commit_ts = 0;
    return st;
  }
  VANISH_AT("txn.commit.before_primary");
  /* the commit point: the primary's row, its primary cell included, in one row operation */
  cells_of(muts, bounds[0], bounds[1], cells);
  st = s->ops->commit(s, cells, bounds[1] - bounds[0], txn->start_ts, txn->commit_ts, err);
  if (st == PC_ABORTED || st == PC_UNAVAILABLE) { /* a verdict: nothing was applied */
    rollback_groups(txn, muts, bounds, done, cells);
    txn->commit_ts = 0;
    return st;
  }
  if (st != PC_OK) {
    /* no verdict: settle it on the primary before saying anything */
    int committed;
    if (settle_own_commit(txn, &muts[0].cell, &committed) != PC_OK) {
      txn->commit_ts = 0;
      pc_error_prefix(err, "commit outcome unknown (readers will settle it)");
      return err ? (err->code = PC_UNKNOWN) : PC_UNKNOWN;
    }
    if (!committed) {
      rollback_groups(txn, muts, bounds, done, cells);
      txn->commit_ts = 0;
      pc_error_prefix(err, "commit of the primary failed; rolled back");
      return st;
    }
    pc_error_clear(err); /* the commit stands */
  }
  VANISH_AT("txn.commit.after_primary");
  if (parallel) {
    /* committed already: a failure here leaves the cells to roll forward */
    pc_error_t ignored;
    (void)run_secondaries(txn, muts, bounds, groups, NULL, deadline, cells, &ignored);
    for (size_t k = 1; k < groups; k++) VANISH_AT("txn.commit.after_secondary");
    return PC_OK;
  }
  for (size_t g = 1; g < groups; g++) {
    cells_of(muts, bounds[g], bounds[g + 1], cells);
    pc_error_t ignored; /* committed already: a failure here leaves the cell to roll forward */
    (void)s->ops->commit(s, cells, bounds[g + 1] - bounds[g], txn->start_ts, txn->commit_ts,
                         &ignored);
    VANISH_AT("txn.commit.after_secondary");
  }
  return PC_OK;
vanish:
  return err ? err->code : PC_IO_ERROR;
}

/* Makes the first mutation that writes (a put or a delete) the primary:
 * muts[0], its row group 0; the first that writes the system table when
 * there is one, since only the system may settle a lock of that table
 * (tablet.c), and the primary's record is the transaction's fate: so a
 * data client cannot decide the fate of a transaction of the system. A weak
 * notification alone leaves no commit record on its cell. Only a
 * transaction of weak notifications alone keeps one as its primary, whose
 * commit then leaves a record of kind NOTIFY (store.h). The order of the
 * other rows, and of the cells within a row, does not matter. */
static int primary_first(pc_mutation_t *muts, size_t *bounds, size_t groups) {
  size_t n = bounds[groups], p = 0;
  while (p < n && (muts[p].kind == PC_WRITE_NOTIFY ||
                   strcmp(muts[p].cell.table, PC_SYSTEM_TABLE) != 0))
    p++;
  if (p == n)
    for (p = 0; p < n && muts[p].kind == PC_WRITE_NOTIFY;) p++;
  if (p == 0 || p == n) return 0;
  size_t g = 0;
  while (bounds[g + 1] <= p) g++;
  pc_mutation_t *tmp = malloc(n * sizeof *tmp);
  size_t *nb = malloc((groups + 1) * sizeof *nb);
  if (!tmp || !nb) {
    free(tmp);
    free(nb);
    return -1;
  }
  size_t k = 0, ng = 0;
  nb[ng++] = 0;
  tmp[k++] = muts[p];
  for (size_t i = bounds[g]; i < bounds[g + 1]; i++)
    if (i != p) tmp[k++] = muts[i];
  for (size_t h = 0; h < groups; h++) {
    if (h == g) continue;
    nb[ng++] = k;
    for (size_t i = bounds[h]; i < bounds[h + 1]; i++) tmp[k++] = muts[i];
  }
  nb[ng] = n;
  memcpy(muts, tmp, n * sizeof *tmp);
  memcpy(bounds, nb, (groups + 1) * sizeof *nb);
  free(tmp);
  free(nb);
  return 0;
}

/* With a sharded store, regroups the secondary rows (groups 1..) so that
 * each group is one shard's rows: one request per tablet (the paper's
 * batching). The primary's row stays group 0. Stable within a shard. */
static int group_by_shard(pc_store_t *s, pc_mutation_t *muts, size_t *bounds, size_t *groups) {
  size_t first = bounds[1], n = bounds[*groups];
  size_t m = n - first;
  pc_mutation_t *sorted = malloc(m * sizeof *sorted);
  size_t *shard = malloc(m * sizeof *shard);
  if (!sorted || !shard) {
    free(sorted);
    free(shard);
    return -1;
  }
  size_t max = 0;
  for (size_t i = 0; i < m; i++) {
    shard[i] = s->ops->shard_of(s, &muts[first + i].cell);
    if (shard[i] > max) max = shard[i];
  }
  size_t out = 0, g = 1;
  for (size_t sh = 0; sh <= max; sh++) { /* few shards: a pass per shard is fine */
    size_t before = out;
    for (size_t i = 0; i < m; i++)
      if (shard[i] == sh) sorted[out++] = muts[first + i];
    if (out > before) bounds[g++] = first + before;
  }
  memcpy(muts + first, sorted, m * sizeof *sorted);
  bounds[g] = n;
  *groups = g;
  free(sorted);
  free(shard);
  return 0;
}

/* Whether every row group is in one shard (always, for a store without
 * shards): the store can then commit them all in one atomic operation. */
static int one_shard(pc_store_t *s, const pc_mutation_t *muts, const size_t *bounds,
                     size_t groups) {
  if (groups == 1 || !s->ops->shard_of) return 1;
  size_t first = s->ops->shard_of(s, &muts[0].cell);
  for (size_t g = 1; g < groups; g++)
    if (s->ops->shard_of(s, &muts[bounds[g]].cell) != first) return 0;
  return 1;
}

pc_status_t pc_txn_commit(pc_txn_t *txn, pc_error_t *err) {
  pc_error_clear(err);
  pc_status_t st = check_open(txn, err);
  if (st != PC_OK) return st;
  if (txn->count == 0) {
    txn->state = TXN_COMMITTED;
    return PC_OK;
  }
  txn->state = TXN_ABORTED; /* until proven committed */
  pc_recent_commit_t *rc = NULL;
  bufcell_t **sorted = sorted_cells(txn);
  pc_mutation_t *muts = calloc(txn->count, sizeof *muts);
  size_t *bounds = calloc(txn->count + 1, sizeof *bounds);
  pc_cell_t *cells = calloc(txn->count, sizeof *cells);
  if (!sorted || !muts || !bounds || !cells) {
    st = pc_error_set(err, PC_NOMEM, "out of memory");
    goto out;
  }
  size_t n = txn->count, groups = 0;
  for (size_t i = 0; i < n; i++) {
    bufcell_t *b = sorted[i];
    muts[i].cell = (pc_cell_t){b->table, b->row, b->rlen, b->col, b->clen};
    muts[i].kind = b->kind;
    muts[i].value = b->value;
    muts[i].vlen = b->vlen;
    muts[i].weak = b->weak; /* strong notifications are the store's to write */
    if (i == 0 || !same_row(&muts[i].cell, &muts[i - 1].cell)) bounds[groups++] = i;
  }
  bounds[groups] = n;
  if (primary_first(muts, bounds, groups) != 0 ||
      (groups > 2 && txn->db->store->ops->shard_of &&
       group_by_shard(txn->db->store, muts, bounds, &groups) != 0)) {
    st = pc_error_set(err, PC_NOMEM, "out of memory");
    goto out;
  }
  int one_phase =
      txn->db->opts.one_phase_commit && one_shard(txn->db->store, muts, bounds, groups);
  /* a cluster's commit waits for this process's commits in flight of the
   * same cells (at most half its timeout), then is refused here if it is
   * sure to lose to one of them (core/recent.h); its requests then get a
   * whole timeout of their own, so that a wait cannot starve them into
   * PC_UNAVAILABLE: at most 1.5 timeouts in all */
  rc = pc_recent_begin(txn->db->recent, muts, n, txn->timeout_ms / 2);
  if ((st = take_start_ts(txn, err)) != PC_OK) {
    pc_error_prefix(err, "commit: start timestamp");
    goto out;
  }
  uint64_t at = 0;
  size_t lost = pc_recent_conflict(rc, txn->start_ts, &at);
  if (lost < n) { /* the store would refuse it: no prewrite to undo */
    char name[160];
    st = pc_error_set(err, PC_CONFLICT,
                      "write conflict on %s: written at %llu by this process, after start %llu",
                      pc_cell_str(&muts[lost].cell, name, sizeof name), (unsigned long long)at,
                      (unsigned long long)txn->start_ts);
    goto out;
  }
  uint64_t deadline = pc_now_mono_ms() + txn->timeout_ms;
  uint64_t outer = pc_deadline_set(deadline); /* bounds the store's network calls */
  if (one_phase) {
    st = commit_in_one_phase(txn, muts, n, deadline, err);
    if (st == PC_IO_ERROR || st == PC_TIMEOUT || st == PC_INTERNAL) {
      /* the write may have been applied before the error: settle it (not
       * after PC_UNAVAILABLE: the request never reached the store) */
      int committed;
      if (settle_own_commit(txn, &muts[0].cell, &committed) != PC_OK) {
        pc_error_prefix(err, "commit outcome unknown (readers will settle it)");
        st = err ? (err->code = PC_UNKNOWN) : PC_UNKNOWN;
      } else if (committed)
        st = PC_OK, pc_error_clear(err);
    }
  } else {
    /* from its first prewrite to its end, the heartbeat keeps its primary alive */
    pc_db_txn_locking(txn->db, &txn->open, &muts[0].cell);
    st = two_phase_commit(txn, muts, bounds, groups, deadline, cells, err);
    pc_db_txn_locking(txn->db, &txn->open, NULL);
  }
  pc_deadline_set(outer);
  if (st == PC_OK) txn->state = TXN_COMMITTED;
  else txn->commit_ts = 0; /* the contract: a commit_ts only after a successful commit */
out:
  pc_recent_end(rc, st == PC_OK ? txn->commit_ts : 0);
  free(sorted);
  free(muts);
  free(bounds);
  free(cells);
  clear_buffer(txn);
  return st;
}

void pc_txn_abort(pc_txn_t *txn) {
  if (!txn || txn->state != TXN_OPEN) return;
  txn->state = TXN_ABORTED;
  clear_buffer(txn); /* nothing reached the store before commit */
}

void pc_txn_destroy(pc_txn_t *txn) {
  if (!txn) return;
  pc_txn_abort(txn);
  clear_buffer(txn);
  pc_db_close_txn(txn->db, &txn->open);
  if (txn->trigger) free(txn->trigger->mem);
  free(txn->trigger);
  free(txn);
}

/* ---- scans ------------------------------------------------------------- */

#define SCAN_PAGE 256

typedef struct scell {
  pc_buf_t key, row, col, val;
} scell_t;

struct pc_scan {
  pc_txn_t *txn;
  char *table;
  pc_buf_t end;
  int has_end;
  pc_buf_t next_row, next_col; /* where the next page starts */
  int has_next_col, store_done;
  scell_t page[SCAN_PAGE];
  size_t npage, ipage;
  bufcell_t **own; /* this transaction's writes in the range, in order */
  size_t nown, iown;
  /* the current cell when it is one of our own writes: a copy, since a later
   * pc_txn_set of the same cell frees the buffered value */
  scell_t own_cur;
  const char *row, *col, *val;
  size_t rlen, clen, vlen;
  pc_buf_t colp;  /* only columns that begin with it (len 0: every column) */
  int one_row;    /* pc_txn_scan_row: past the prefix's columns, the scan is over */
  int system;     /* pc_txn_scan_system: the system's columns (acks) are returned too */
};

typedef struct page_fill {
  pc_scan_t *scan;
  int oom;
} page_fill_t;

static int page_add(void *ctx, const pc_cell_t *c, const char *v, size_t vlen) {
  page_fill_t *f = ctx;
  scell_t *sc = &f->scan->page[f->scan->npage];
  sc->key.len = sc->row.len = sc->col.len = sc->val.len = 0;
  if (pc_key_cell(&sc->key, PC_KS_META, c) || pc_buf_append(&sc->row, c->row, c->rlen) ||
      pc_buf_append(&sc->col, c->col, c->clen) || pc_buf_append(&sc->val, v, vlen)) {
    f->oom = 1;
    return 1;
  }
  f->scan->npage++;
  return 0;
}

static pc_status_t fetch_page_until(pc_scan_t *sc, uint64_t deadline, pc_error_t *err);

/* Fetches the next page of committed cells, resolving locks on the way. */
static pc_status_t fetch_page(pc_scan_t *sc, pc_error_t *err) {
  uint64_t deadline = pc_now_mono_ms() + sc->txn->timeout_ms;
  uint64_t outer = pc_deadline_set(deadline); /* bounds the store's network calls */
  pc_status_t st = fetch_page_until(sc, deadline, err);
  pc_deadline_set(outer);
  return st;
}

static pc_status_t fetch_page_until(pc_scan_t *sc, uint64_t deadline, pc_error_t *err) {
  pc_store_t *s = sc->txn->db->store;
  uint32_t backoff = 1;
  uint64_t lock_ts = 0; /* start_ts of the last lock met */
  sc->npage = sc->ipage = 0;
  for (;;) {
    page_fill_t f = {sc, 0};
    pc_lock_info_t lock = {0};
    pc_status_t st = s->ops->scan(
        s, sc->table, sc->next_row.p ? sc->next_row.p : "", sc->next_row.len,
        sc->has_next_col ? sc->next_col.p : NULL, sc->next_col.len,
        sc->has_end ? sc->end.p : NULL, sc->end.len, sc->txn->start_ts, SCAN_PAGE - sc->npage,
        page_add, &f, &lock, err);
    if (f.oom) {
      pc_lock_info_free(&lock);
      return pc_error_set(err, PC_NOMEM, "out of memory");
    }
    if (sc->npage > 0) { /* resume after the last delivered cell */
      scell_t *last = &sc->page[sc->npage - 1];
      sc->next_row.len = 0;
      sc->next_col.len = 0;
      if (pc_buf_append(&sc->next_row, last->row.p, last->row.len) ||
          pc_buf_append(&sc->next_col, last->col.p, last->col.len) ||
          pc_buf_append(&sc->next_col, "", 1)) /* col + "\0": the next column */
        return pc_error_set(err, PC_NOMEM, "out of memory");
      sc->has_next_col = 1;
    }
    if (st == PC_OK) {
      if (sc->npage < SCAN_PAGE) sc->store_done = 1;
      return PC_OK;
    }
    if (st != PC_LOCKED) {
      pc_lock_info_free(&lock);
      return gave_up_on_lock(st, deadline, lock_ts, sc->table,
                             sc->next_row.p ? sc->next_row.p : "", sc->next_row.len, err);
    }
    lock_ts = lock.start_ts;
    if (sc->npage > 0) { /* hand out what we have; meet the lock on the next page */
      pc_lock_info_free(&lock);
      return PC_OK;
    }
    st = wait_out_lock(sc->txn->db, &lock, deadline, &backoff, err);
    if (st != PC_OK) return st;
  }
}

static int key_cmp(const pc_buf_t *a, const pc_buf_t *b) {
  return pc_bytes_cmp(a->p, a->len, b->p, b->len);
}

static int row_in_range(const bufcell_t *b, const char *table, const char *start, size_t slen,
                        const char *end, size_t elen, int has_end) {
  if (strcmp(b->table, table) != 0) return 0;
  pc_buf_t row = {b->row, b->rlen, 0, 0}, lo = {(char *)start, slen, 0, 0},
           hi = {(char *)end, elen, 0, 0}; /* views: never grown or freed */
  if (key_cmp(&row, &lo) < 0) return 0;
  return !has_end || key_cmp(&row, &hi) < 0;
}

static pc_scan_t *scan_open(pc_txn_t *txn, const char *table, const char *start, size_t slen,
                            const char *end, size_t elen, const char *colp, size_t cplen,
                            int one_row, pc_error_t *err);

pc_scan_t *pc_txn_scan_system(pc_txn_t *txn, const char *table, const char *start, size_t slen,
                              const char *end, size_t elen, pc_error_t *err) {
  pc_scan_t *sc = scan_open(txn, table, start, slen, end, elen, NULL, 0, 0, err);
  if (sc) sc->system = 1;
  return sc;
}

pc_scan_t *pc_txn_scan(pc_txn_t *txn, const char *table, const char *start, size_t slen,
                       const char *end, size_t elen, pc_error_t *err) {
  return scan_open(txn, table, start, slen, end, elen, NULL, 0, 0, err);
}

pc_scan_t *pc_txn_scan_prefix(pc_txn_t *txn, const char *table, const char *prefix,
                              size_t plen, const char *col_prefix, size_t cplen,
                              pc_error_t *err) {
  pc_error_clear(err);
  if ((plen && !prefix) || (cplen && !col_prefix)) {
    pc_error_set(err, PC_INVALID, "scan_prefix: %s is NULL", plen && !prefix ? "prefix" : "col_prefix");
    return NULL;
  }
  if (plen > PC_MAX_ROW || cplen > PC_MAX_COLUMN) {
    pc_error_set(err, PC_INVALID, "scan_prefix: a %s prefix of %zu bytes exceeds the limit of %d",
                 plen > PC_MAX_ROW ? "row" : "column", plen > PC_MAX_ROW ? plen : cplen,
                 plen > PC_MAX_ROW ? PC_MAX_ROW : PC_MAX_COLUMN);
    return NULL;
  }
  /* the rows that begin with prefix end before prefix with its last byte
   * below 0xFF raised by one (trailing 0xFF bytes dropped); none: no end */
  char *end = plen ? malloc(plen) : NULL;
  if (plen && !end) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  size_t elen = plen;
  if (plen) memcpy(end, prefix, plen);
  while (elen > 0 && (unsigned char)end[elen - 1] == 0xFF) elen--;
  if (elen > 0) end[elen - 1] = (char)((unsigned char)end[elen - 1] + 1);
  pc_scan_t *sc = scan_open(txn, table, plen ? prefix : "", plen, elen ? end : NULL, elen,
                            col_prefix, cplen, 0, err);
  free(end);
  return sc;
}

pc_scan_t *pc_txn_scan_row(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                           const char *col_prefix, size_t cplen, pc_error_t *err) {
  pc_error_clear(err);
  if (!row || rlen == 0) {
    pc_error_set(err, PC_INVALID, "scan_row: row key is empty");
    return NULL;
  }
  if (rlen > PC_MAX_ROW) {
    pc_error_set(err, PC_INVALID, "scan_row: row key of %zu bytes exceeds the limit of %d", rlen,
                 PC_MAX_ROW);
    return NULL;
  }
  if ((cplen && !col_prefix) || cplen > PC_MAX_COLUMN) {
    pc_error_set(err, PC_INVALID, "scan_row: col_prefix is NULL or longer than %d bytes",
                 PC_MAX_COLUMN);
    return NULL;
  }
  char *end = malloc(rlen + 1); /* the row, then one byte 0x00: the next row key */
  if (!end) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  memcpy(end, row, rlen);
  end[rlen] = '\0';
  pc_scan_t *sc = scan_open(txn, table, row, rlen, end, rlen + 1, col_prefix, cplen, 1, err);
  free(end);
  return sc;
}

static pc_scan_t *scan_open(pc_txn_t *txn, const char *table, const char *start, size_t slen,
                            const char *end, size_t elen, const char *colp, size_t cplen,
                            int one_row, pc_error_t *err) {
  pc_error_clear(err);
  if (check_open(txn, err) != PC_OK || check_table(table, err) != PC_OK) return NULL;
  if (take_start_ts(txn, err) != PC_OK) return NULL;
  if (!start) slen = 0;
  pc_scan_t *sc = calloc(1, sizeof *sc);
  if (!sc || !(sc->table = strdup(table))) {
    free(sc);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  sc->txn = txn;
  sc->has_end = end != NULL;
  sc->one_row = one_row;
  int bad = pc_buf_append(&sc->next_row, start ? start : "", slen);
  if (end) bad |= pc_buf_append(&sc->end, end, elen);
  if (cplen) {
    bad |= pc_buf_append(&sc->colp, colp, cplen);
    if (one_row) { /* start at the first column of the prefix */
      bad |= pc_buf_append(&sc->next_col, colp, cplen);
      sc->has_next_col = 1;
    }
  }
  bufcell_t **all = sorted_cells(txn);
  sc->own = malloc((txn->count ? txn->count : 1) * sizeof *sc->own);
  if (bad || !all || !sc->own) {
    free(all);
    pc_scan_destroy(sc);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  /* its own writes; not its weak notifications alone, nor system cells */
  for (size_t i = 0; i < txn->count; i++)
    if (all[i]->kind != PC_WRITE_NOTIFY && !is_system_column(all[i]->col, all[i]->clen) &&
        row_in_range(all[i], table, start ? start : "", slen, end, elen, end != NULL))
      sc->own[sc->nown++] = all[i];
  free(all);
  return sc;
}

pc_status_t pc_scan_next(pc_scan_t *sc, pc_error_t *err) {
  pc_error_clear(err);
  if (!sc) return pc_error_set(err, PC_INVALID, "scan is NULL");
  /* its own writes, merged into what it returns, are gone with the commit */
  pc_status_t open = check_open(sc->txn, err);
  if (open != PC_OK) return open;
  for (;;) {
    if (sc->ipage == sc->npage && !sc->store_done) {
      pc_status_t st = fetch_page(sc, err);
      if (st != PC_OK) return st;
    }
    int have_store = sc->ipage < sc->npage, have_own = sc->iown < sc->nown;
    if (!have_store && !have_own) return PC_NOT_FOUND;
    int c = !have_store ? 1 : !have_own ? -1 : key_cmp(&sc->page[sc->ipage].key, &sc->own[sc->iown]->key);
    const char *col = c < 0 ? sc->page[sc->ipage].col.p : sc->own[sc->iown]->col;
    size_t clen = c < 0 ? sc->page[sc->ipage].col.len : sc->own[sc->iown]->clen;
    if (sc->colp.len && (clen < sc->colp.len || memcmp(col, sc->colp.p, sc->colp.len) != 0)) {
      /* outside the column filter; in one row, past its columns is the end */
      if (sc->one_row && pc_bytes_cmp(col, clen, sc->colp.p, sc->colp.len) > 0)
        return PC_NOT_FOUND;
      if (c <= 0) sc->ipage++;
      if (c >= 0) sc->iown++;
      continue;
    }
    if (c < 0) {
      scell_t *s = &sc->page[sc->ipage++];
      if (!sc->system && is_system_column(s->col.p, s->col.len)) continue; /* the system's */
      sc->row = s->row.p, sc->rlen = s->row.len;
      sc->col = s->col.p, sc->clen = s->col.len;
      sc->val = s->val.p, sc->vlen = s->val.len;
      return PC_OK;
    }
    if (c == 0) sc->ipage++; /* our own write shadows the committed cell */
    bufcell_t *b = sc->own[sc->iown++];
    if (b->kind == PC_WRITE_DELETE) continue;
    scell_t *o = &sc->own_cur;
    o->row.len = o->col.len = o->val.len = 0;
    if (pc_buf_append(&o->row, b->row, b->rlen) || pc_buf_append(&o->col, b->col, b->clen) ||
        pc_buf_append(&o->val, b->value, b->vlen))
      return pc_error_set(err, PC_NOMEM, "out of memory");
    sc->row = o->row.p, sc->rlen = o->row.len;
    sc->col = o->col.p, sc->clen = o->col.len;
    sc->val = o->val.p, sc->vlen = o->val.len;
    return PC_OK;
  }
}

const char *pc_scan_row(const pc_scan_t *sc, size_t *len) {
  if (len) *len = sc->rlen;
  return sc->row;
}

const char *pc_scan_column(const pc_scan_t *sc, size_t *len) {
  if (len) *len = sc->clen;
  return sc->col;
}

const char *pc_scan_value(const pc_scan_t *sc, size_t *len) {
  if (len) *len = sc->vlen;
  return sc->val;
}

void pc_scan_destroy(pc_scan_t *sc) {
  if (!sc) return;
  for (size_t i = 0; i < SCAN_PAGE; i++) {
    pc_buf_free(&sc->page[i].key);
    pc_buf_free(&sc->page[i].row);
    pc_buf_free(&sc->page[i].col);
    pc_buf_free(&sc->page[i].val);
  }
  pc_buf_free(&sc->own_cur.row);
  pc_buf_free(&sc->own_cur.col);
  pc_buf_free(&sc->own_cur.val);
  pc_buf_free(&sc->next_row);
  pc_buf_free(&sc->next_col);
  pc_buf_free(&sc->end);
  pc_buf_free(&sc->colp);
  free(sc->own);
  free(sc->table);
  free(sc);
}
