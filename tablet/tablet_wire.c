/* tablet_wire.c — byte layout of cells, mutations, locks and raw cells in
 * the tablet protocol's bodies (see tablet.h), the arena that owns what is
 * decoded from a body, and the codecs of each op's whole request. Every
 * decoder checks bounds through pc_rd_t: a truncated or oversized field is
 * an error (-1 for the pieces; for a request, PC_INVALID naming the op and
 * the field), never a read past the body. */
#include "tablet/tablet_wire.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tablet/tablet.h"

#define MAX_CELLS_PER_REQUEST 1000000u

/* A block: its header, then its space, aligned for any type. */
struct pc_arena_block {
  pc_arena_block_t *next;
  max_align_t space[];
};

#define ARENA_FIRST 960u       /* a first block within malloc's small bins */
#define ARENA_MAX (64u << 10)  /* blocks stop doubling here */

/* size bytes at the given alignment (a power of two, at most max_align_t's). */
static void *arena_alloc(pc_arena_t *a, size_t size, size_t align) {
  size_t at = (a->used + align - 1) & ~(align - 1);
  if (a->head && at <= a->size && size <= a->size - at) {
    a->used = at + size;
    return (char *)a->head->space + at;
  }
  size_t grow = a->size ? (a->size < ARENA_MAX ? a->size * 2 : ARENA_MAX) : ARENA_FIRST;
  if (size > grow / 4) { /* a big piece gets a block of its own, behind head */
    if (size > SIZE_MAX - sizeof(pc_arena_block_t)) return NULL;
    pc_arena_block_t *b = malloc(sizeof *b + size);
    if (!b) return NULL;
    if (a->head) {
      b->next = a->head->next;
      a->head->next = b;
    } else { /* no block to carve yet: this one is full from the start */
      b->next = NULL;
      a->head = b;
      a->size = a->used = size;
    }
    return b->space;
  }
  pc_arena_block_t *b = malloc(sizeof *b + grow);
  if (!b) return NULL;
  b->next = a->head;
  a->head = b;
  a->size = grow;
  a->used = size;
  return b->space;
}

char *pc_arena_dup(pc_arena_t *a, const char *p, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *d = arena_alloc(a, n + 1, 1);
  if (!d) return NULL;
  if (n) memcpy(d, p, n);
  d[n] = '\0';
  return d;
}

void *pc_arena_calloc(pc_arena_t *a, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  size_t bytes = n && size ? n * size : 1;
  void *d = arena_alloc(a, bytes, _Alignof(max_align_t));
  if (d) memset(d, 0, bytes);
  return d;
}

void pc_arena_free(pc_arena_t *a) {
  while (a->head) {
    pc_arena_block_t *next = a->head->next;
    free(a->head);
    a->head = next;
  }
  a->used = a->size = 0;
}

int pc_wire_put_cell(pc_buf_t *b, const pc_cell_t *c) {
  return pc_buf_str(b, c->table, strlen(c->table)) || pc_buf_str(b, c->row, c->rlen) ||
                 pc_buf_str(b, c->col, c->clen)
             ? -1
             : 0;
}

/* A string copied into the arena, at most max bytes, no NUL inside when nul_free. */
static const char *get_str(pc_rd_t *r, pc_arena_t *a, size_t *n, size_t max, int nul_free) {
  const char *p = pc_rd_str(r, n);
  if (!r->ok || *n > max || (nul_free && memchr(p, '\0', *n))) {
    r->ok = 0;
    return NULL;
  }
  const char *d = pc_arena_dup(a, p, *n);
  if (!d) r->ok = 0;
  return d;
}

int pc_wire_get_cell(pc_rd_t *r, pc_arena_t *a, pc_cell_t *c) {
  size_t tl;
  c->table = get_str(r, a, &tl, PC_MAX_TABLE, 1);
  c->row = get_str(r, a, &c->rlen, PC_MAX_ROW, 0);
  c->col = get_str(r, a, &c->clen, PC_MAX_STORED_COLUMN, 0);
  if (!r->ok || tl == 0 || c->rlen == 0 || c->clen == 0) return -1;
  return 0;
}

/* The flags byte of mutations and locks. */
#define WF_OBSERVED 1u
#define WF_WEAK 2u

static uint8_t flags_of(int observed, int weak) {
  return (uint8_t)((observed ? WF_OBSERVED : 0u) | (weak ? WF_WEAK : 0u));
}

/* A kind a mutation or a lock may have: put, delete or notify. */
static int lock_kind_ok(uint8_t kind) {
  return kind == PC_WRITE_PUT || kind == PC_WRITE_DELETE || kind == PC_WRITE_NOTIFY;
}

int pc_wire_put_mutation(pc_buf_t *b, const pc_mutation_t *m) {
  if (pc_wire_put_cell(b, &m->cell) || pc_buf_u8(b, (uint8_t)m->kind) ||
      pc_buf_u8(b, flags_of(0, m->weak)))
    return -1;
  return pc_buf_str(b, m->value ? m->value : "", m->value ? m->vlen : 0);
}

int pc_wire_get_mutation(pc_rd_t *r, pc_arena_t *a, pc_mutation_t *m) {
  if (pc_wire_get_cell(r, a, &m->cell)) return -1;
  uint8_t kind = pc_rd_u8(r);
  uint8_t flags = pc_rd_u8(r);
  size_t vlen;
  const char *v = pc_rd_str(r, &vlen); /* stays in the body: no copy */
  if (!r->ok || !lock_kind_ok(kind) || (flags & ~(WF_OBSERVED | WF_WEAK)) ||
      vlen > PC_MAX_VALUE || (kind == PC_WRITE_NOTIFY && vlen != 0))
    return -1;
  m->kind = (pc_write_kind_t)kind;
  /* WF_OBSERVED, which clients once sent, is not theirs to say: the
   * tablet's own observers decide (store_observers.c) */
  m->weak = (flags & WF_WEAK) != 0;
  m->value = kind == PC_WRITE_PUT ? v : NULL;
  m->vlen = kind == PC_WRITE_PUT ? vlen : 0;
  return 0;
}

int pc_wire_put_lock(pc_buf_t *b, const pc_lock_info_t *l) {
  return pc_buf_u64(b, l->start_ts) || pc_buf_u8(b, (uint8_t)l->kind) ||
                 pc_buf_u32(b, l->ttl_ms) || pc_buf_u64(b, l->session) ||
                 pc_buf_u8(b, flags_of(l->observed, l->weak)) ||
                 pc_buf_u8(b, (uint8_t)(l->has_inline != 0)) ||
                 pc_buf_str(b, l->value.p, l->value.len) ||
                 pc_buf_str(b, l->ptable.p, l->ptable.len) ||
                 pc_buf_str(b, l->prow.p, l->prow.len) || pc_buf_str(b, l->pcol.p, l->pcol.len) ||
                 pc_buf_str(b, l->ctable.p, l->ctable.len) ||
                 pc_buf_str(b, l->crow.p, l->crow.len) || pc_buf_str(b, l->ccol.p, l->ccol.len)
             ? -1
             : 0;
}

static int get_buf(pc_rd_t *r, pc_buf_t *out) {
  size_t n;
  const char *p = pc_rd_str(r, &n);
  if (!r->ok) return -1;
  out->len = 0;
  return pc_buf_append(out, p, n);
}

static int get_lock(pc_rd_t *r, pc_lock_info_t *l) {
  l->start_ts = pc_rd_u64(r);
  uint8_t kind = pc_rd_u8(r);
  l->ttl_ms = pc_rd_u32(r);
  l->session = pc_rd_u64(r);
  uint8_t flags = pc_rd_u8(r);
  l->observed = (flags & WF_OBSERVED) != 0;
  l->weak = (flags & WF_WEAK) != 0;
  l->has_inline = pc_rd_u8(r) != 0;
  if (!lock_kind_ok(kind) || (flags & ~(WF_OBSERVED | WF_WEAK))) return -1;
  l->kind = (pc_write_kind_t)kind;
  if (get_buf(r, &l->value) || get_buf(r, &l->ptable) || get_buf(r, &l->prow) ||
      get_buf(r, &l->pcol) || get_buf(r, &l->ctable) || get_buf(r, &l->crow) ||
      get_buf(r, &l->ccol))
    return -1;
  /* ptable and ctable are used as C strings */
  if (memchr(l->ptable.p, '\0', l->ptable.len) || memchr(l->ctable.p, '\0', l->ctable.len))
    return -1;
  return r->ok ? 0 : -1;
}

int pc_wire_get_lock(pc_rd_t *r, pc_lock_info_t *l) {
  memset(l, 0, sizeof *l);
  if (get_lock(r, l) == 0) return 0;
  pc_lock_info_free(l); /* what was decoded before the fault */
  return -1;
}

int pc_wire_put_notification(pc_buf_t *b, const pc_notification_t *n) {
  return pc_wire_put_cell(b, &n->cell) || pc_buf_u64(b, n->ts) || pc_buf_u8(b, n->weak != 0)
             ? -1
             : 0;
}

int pc_wire_get_notification(pc_rd_t *r, pc_arena_t *a, pc_notification_t *n) {
  if (pc_wire_get_cell(r, a, &n->cell)) return -1;
  n->ts = pc_rd_u64(r);
  uint8_t weak = pc_rd_u8(r);
  if (!r->ok || weak > 1) return -1;
  n->weak = weak;
  n->bucket = pc_notify_bucket(n->cell.table, n->cell.row, n->cell.rlen);
  return 0;
}

int pc_wire_put_opt(pc_buf_t *b, const char *p, size_t n) {
  if (pc_buf_u8(b, p != NULL)) return -1;
  return pc_buf_str(b, p ? p : "", p ? n : 0);
}

int pc_wire_get_opt(pc_rd_t *r, pc_arena_t *a, const char **p, size_t *n) {
  uint8_t has = pc_rd_u8(r);
  size_t len;
  const char *s = pc_rd_str(r, &len);
  if (!r->ok) return -1;
  *p = NULL;
  *n = 0;
  if (!has) return 0;
  *p = pc_arena_dup(a, s, len);
  *n = len;
  return *p ? 0 : -1;
}

int pc_wire_put_raw(pc_buf_t *b, const pc_raw_cell_t *c) {
  return pc_buf_u8(b, (uint8_t)c->kind) || pc_buf_str(b, c->table, strlen(c->table)) ||
                 pc_buf_str(b, c->row, c->row_len) || pc_buf_str(b, c->column, c->column_len) ||
                 pc_buf_u64(b, c->ts) || pc_wire_put_opt(b, c->value, c->value_len) ||
                 pc_buf_u8(b, (uint8_t)c->write_kind) || pc_buf_u64(b, c->start_ts) ||
                 pc_wire_put_opt(b, c->primary_table,
                                 c->primary_table ? strlen(c->primary_table) : 0) ||
                 pc_buf_str(b, c->primary_row, c->primary_row_len) ||
                 pc_buf_str(b, c->primary_column, c->primary_column_len) ||
                 pc_buf_u32(b, c->ttl_ms) || pc_buf_u64(b, c->session) ||
                 pc_buf_u8(b, (uint8_t)(c->observed != 0)) ||
                 pc_wire_put_opt(b, c->observer, c->observer ? strlen(c->observer) : 0) ||
                 pc_buf_u8(b, (uint8_t)(c->weak != 0))
             ? -1
             : 0;
}

int pc_wire_get_raw(pc_rd_t *r, pc_arena_t *a, pc_raw_cell_t *c) {
  memset(c, 0, sizeof *c);
  uint8_t kind = pc_rd_u8(r);
  size_t tl, n;
  c->table = get_str(r, a, &tl, PC_MAX_TABLE, 1);
  c->row = pc_rd_str(r, &c->row_len);
  c->column = pc_rd_str(r, &c->column_len);
  c->ts = pc_rd_u64(r);
  if (pc_wire_get_opt(r, a, &c->value, &c->value_len)) return -1;
  uint8_t wk = pc_rd_u8(r);
  c->start_ts = pc_rd_u64(r);
  if (pc_wire_get_opt(r, a, &c->primary_table, &n)) return -1;
  c->primary_row = pc_rd_str(r, &c->primary_row_len);
  c->primary_column = pc_rd_str(r, &c->primary_column_len);
  c->ttl_ms = pc_rd_u32(r);
  c->session = pc_rd_u64(r);
  c->observed = pc_rd_u8(r);
  if (pc_wire_get_opt(r, a, &c->observer, &n)) return -1;
  c->weak = pc_rd_u8(r) != 0;
  if (!r->ok || kind > PC_CELL_ACK || wk > PC_WRITE_NOTIFY) return -1;
  c->kind = (pc_cell_kind_t)kind;
  c->write_kind = (pc_write_kind_t)wk;
  return 0;
}

/* ---- whole requests ------------------------------------------------------ */

static pc_status_t bad(pc_error_t *err, const char *op, const char *field) {
  return pc_error_set(err, PC_INVALID, "malformed %s request body: %s", op, field);
}

static pc_status_t bad_at(pc_error_t *err, const char *op, const char *field, size_t k) {
  return pc_error_set(err, PC_INVALID, "malformed %s request body: %s %zu", op, field, k);
}

static pc_status_t trailing(pc_error_t *err, const char *op) {
  return bad(err, op, "bytes after the last field");
}

/* A count of cells or mutations; -1 when absent, too large, or more than the
 * rest of the body can hold (every cell takes at least 12 bytes). */
static int read_count(pc_rd_t *r, size_t *n) {
  uint32_t v = pc_rd_u32(r);
  *n = v;
  return r->ok && v <= MAX_CELLS_PER_REQUEST && (size_t)v * 12 <= r->len - r->pos ? 0 : -1;
}

/* A deletion's observers (store.h's pc_notify_clear_t): names each
 * followed by a NUL byte, so the last byte of a list is one. */
static int observers_ok(const char *list, size_t n) { return n == 0 || list[n - 1] == '\0'; }

/* cell u64 below str observers: a CLEAR_NOTIFY request, and ONE_PHASE's clear. */
static int put_clear(pc_buf_t *b, const pc_notify_clear_t *c) {
  return pc_wire_put_cell(b, &c->cell) || pc_buf_u64(b, c->below) ||
                 pc_buf_str(b, c->observers ? c->observers : "", c->observers ? c->olen : 0)
             ? -1
             : 0;
}

/* Reads a clear into c (done and missing emptied); the field at fault, or NULL. */
static const char *get_clear(pc_rd_t *r, pc_arena_t *a, pc_notify_clear_t *c) {
  memset(c, 0, sizeof *c);
  if (pc_wire_get_cell(r, a, &c->cell)) return "cell";
  c->below = pc_rd_u64(r);
  if (!r->ok) return "below";
  c->observers = pc_rd_str(r, &c->olen);
  if (!r->ok || !observers_ok(c->observers, c->olen)) return "observers";
  return NULL;
}

int pc_tablet_encode_get(pc_buf_t *b, uint8_t op, const pc_tablet_get_req_t *q) {
  return pc_wire_put_cell(b, &q->cell) || (op == PC_TABLET_OP_GET && pc_buf_u64(b, q->read_ts))
             ? -1
             : 0;
}

pc_status_t pc_tablet_decode_get(const char *body, size_t len, uint8_t op, pc_arena_t *a,
                                 pc_tablet_get_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  if (pc_wire_get_cell(&r, a, &q->cell)) return bad(err, "get", "cell");
  q->read_ts = op == PC_TABLET_OP_GET ? pc_rd_u64(&r) : 0;
  if (!r.ok) return bad(err, "get", "read_ts");
  if (r.pos != r.len) return trailing(err, "get");
  return PC_OK;
}

int pc_tablet_encode_get_many(pc_buf_t *b, const pc_tablet_get_many_req_t *q) {
  if (pc_buf_u64(b, q->read_ts) || pc_buf_u32(b, (uint32_t)q->n)) return -1;
  for (size_t k = 0; k < q->n; k++)
    if (pc_wire_put_cell(b, &q->cells[k])) return -1;
  return 0;
}

pc_status_t pc_tablet_decode_get_many(const char *body, size_t len, pc_arena_t *a,
                                      pc_tablet_get_many_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  q->read_ts = pc_rd_u64(&r);
  if (!r.ok) return bad(err, "get_many", "read_ts");
  if (read_count(&r, &q->n)) return bad(err, "get_many", "cell count");
  pc_cell_t *cells = pc_arena_calloc(a, q->n, sizeof *cells);
  if (!cells) return pc_error_set(err, PC_NOMEM, "out of memory");
  q->cells = cells;
  for (size_t k = 0; k < q->n; k++)
    if (pc_wire_get_cell(&r, a, &cells[k])) return bad_at(err, "get_many", "cell", k);
  if (r.pos != r.len) return trailing(err, "get_many");
  return PC_OK;
}

int pc_tablet_encode_write(pc_buf_t *b, uint8_t op, const pc_tablet_write_req_t *q) {
  int fail;
  if (op == PC_TABLET_OP_PREWRITE)
    fail = pc_wire_put_cell(b, &q->spec.primary) || pc_buf_u64(b, q->spec.start_ts) ||
           pc_buf_u32(b, q->spec.ttl_ms) || pc_buf_u64(b, q->spec.session);
  else
    fail = pc_buf_u64(b, q->start_ts);
  if (fail || pc_buf_u32(b, (uint32_t)q->n)) return -1;
  for (size_t k = 0; k < q->n; k++)
    if (pc_wire_put_mutation(b, &q->muts[k])) return -1;
  if (op == PC_TABLET_OP_ONE_PHASE && q->has_clear) return put_clear(b, &q->clear);
  return 0;
}

pc_status_t pc_tablet_decode_write(const char *body, size_t len, uint8_t op, pc_arena_t *a,
                                   pc_tablet_write_req_t *q, pc_error_t *err) {
  const char *name = op == PC_TABLET_OP_PREWRITE ? "prewrite" : "one-phase commit";
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  if (op == PC_TABLET_OP_PREWRITE) {
    if (pc_wire_get_cell(&r, a, &q->spec.primary)) return bad(err, name, "primary");
    q->spec.start_ts = pc_rd_u64(&r);
    q->spec.ttl_ms = pc_rd_u32(&r);
    q->spec.session = pc_rd_u64(&r);
    if (!r.ok) return bad(err, name, "lock spec (start_ts, ttl_ms, session)");
    q->start_ts = q->spec.start_ts;
  } else {
    q->start_ts = pc_rd_u64(&r);
    if (!r.ok) return bad(err, name, "start_ts");
  }
  if (read_count(&r, &q->n) || q->n == 0) return bad(err, name, "mutation count");
  pc_mutation_t *muts = pc_arena_calloc(a, q->n, sizeof *muts);
  if (!muts) return pc_error_set(err, PC_NOMEM, "out of memory");
  q->muts = muts;
  for (size_t k = 0; k < q->n; k++)
    if (pc_wire_get_mutation(&r, a, &muts[k])) return bad_at(err, name, "mutation", k);
  /* one-phase: optionally, a cell whose notifications below a timestamp go
   * in the same batch */
  if (op == PC_TABLET_OP_ONE_PHASE && r.pos < r.len) {
    const char *at = get_clear(&r, a, &q->clear);
    if (at) {
      pc_error_set(err, PC_INVALID, "malformed %s request body: clear %s", name, at);
      return PC_INVALID;
    }
    q->has_clear = 1;
  }
  if (r.pos != r.len) return trailing(err, name);
  return PC_OK;
}

int pc_tablet_encode_cells(pc_buf_t *b, uint8_t op, const pc_tablet_cells_req_t *q) {
  if (pc_buf_u64(b, q->start_ts) || (op == PC_TABLET_OP_COMMIT && pc_buf_u64(b, q->commit_ts)) ||
      pc_buf_u32(b, (uint32_t)q->n))
    return -1;
  for (size_t k = 0; k < q->n; k++)
    if (pc_wire_put_cell(b, &q->cells[k])) return -1;
  return 0;
}

pc_status_t pc_tablet_decode_cells(const char *body, size_t len, uint8_t op, pc_arena_t *a,
                                   pc_tablet_cells_req_t *q, pc_error_t *err) {
  const char *name = op == PC_TABLET_OP_COMMIT ? "commit" : "rollback";
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  q->start_ts = pc_rd_u64(&r);
  if (!r.ok) return bad(err, name, "start_ts");
  q->commit_ts = op == PC_TABLET_OP_COMMIT ? pc_rd_u64(&r) : 0;
  if (!r.ok) return bad(err, name, "commit_ts");
  if (read_count(&r, &q->n) || q->n == 0) return bad(err, name, "cell count");
  pc_cell_t *cells = pc_arena_calloc(a, q->n, sizeof *cells);
  if (!cells) return pc_error_set(err, PC_NOMEM, "out of memory");
  q->cells = cells;
  for (size_t k = 0; k < q->n; k++)
    if (pc_wire_get_cell(&r, a, &cells[k])) return bad_at(err, name, "cell", k);
  if (r.pos != r.len) return trailing(err, name);
  return PC_OK;
}

int pc_tablet_encode_check_txn(pc_buf_t *b, const pc_tablet_check_txn_req_t *q) {
  return pc_wire_put_cell(b, &q->primary) || pc_buf_u64(b, q->start_ts) ||
                 pc_buf_u64(b, q->now_ts) || pc_buf_u8(b, (uint8_t)(q->owner_dead != 0))
             ? -1
             : 0;
}

pc_status_t pc_tablet_decode_check_txn(const char *body, size_t len, pc_arena_t *a,
                                       pc_tablet_check_txn_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  if (pc_wire_get_cell(&r, a, &q->primary)) return bad(err, "check_txn", "primary");
  q->start_ts = pc_rd_u64(&r);
  q->now_ts = pc_rd_u64(&r);
  q->owner_dead = pc_rd_u8(&r) != 0;
  if (!r.ok) return bad(err, "check_txn", "start_ts, now_ts or owner_dead");
  if (r.pos != r.len) return trailing(err, "check_txn");
  return PC_OK;
}

/* A table name as scans take it: 1..PC_MAX_TABLE bytes without a NUL. */
static int table_ok(const char *t, size_t n) {
  return n >= 1 && n <= PC_MAX_TABLE && !memchr(t, '\0', n);
}

int pc_tablet_encode_scan(pc_buf_t *b, const pc_tablet_scan_req_t *q) {
  return pc_wire_put_opt(b, q->table, strlen(q->table)) ||
                 pc_wire_put_opt(b, q->start, q->start_len) ||
                 pc_wire_put_opt(b, q->start_col, q->start_col_len) ||
                 pc_wire_put_opt(b, q->end, q->end_len) || pc_buf_u64(b, q->read_ts) ||
                 pc_buf_u32(b, q->limit)
             ? -1
             : 0;
}

pc_status_t pc_tablet_decode_scan(const char *body, size_t len, pc_arena_t *a,
                                  pc_tablet_scan_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  size_t tl;
  if (pc_wire_get_opt(&r, a, &q->table, &tl) || !q->table) return bad(err, "scan", "table");
  if (pc_wire_get_opt(&r, a, &q->start, &q->start_len) || !q->start)
    return bad(err, "scan", "start");
  if (pc_wire_get_opt(&r, a, &q->start_col, &q->start_col_len))
    return bad(err, "scan", "start column");
  if (pc_wire_get_opt(&r, a, &q->end, &q->end_len)) return bad(err, "scan", "end");
  q->read_ts = pc_rd_u64(&r);
  if (!r.ok) return bad(err, "scan", "read_ts");
  q->limit = pc_rd_u32(&r);
  if (!r.ok) return bad(err, "scan", "limit");
  if (r.pos != r.len) return trailing(err, "scan");
  if (q->limit == 0 || q->limit > PC_STORE_SCAN_LIMIT_MAX) return bad(err, "scan", "limit");
  if (!table_ok(q->table, tl)) return bad(err, "scan", "table");
  return PC_OK;
}

int pc_tablet_encode_raw_scan(pc_buf_t *b, const pc_tablet_raw_scan_req_t *q) {
  return pc_wire_put_opt(b, q->table, q->table ? strlen(q->table) : 0) ||
                 pc_wire_put_opt(b, q->start, q->start_len) ||
                 pc_wire_put_opt(b, q->end, q->end_len)
             ? -1
             : 0;
}

pc_status_t pc_tablet_decode_raw_scan(const char *body, size_t len, pc_arena_t *a,
                                      pc_tablet_raw_scan_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  size_t tl;
  if (pc_wire_get_opt(&r, a, &q->table, &tl)) return bad(err, "raw scan", "table");
  if (pc_wire_get_opt(&r, a, &q->start, &q->start_len)) return bad(err, "raw scan", "start");
  if (pc_wire_get_opt(&r, a, &q->end, &q->end_len)) return bad(err, "raw scan", "end");
  if (r.pos != r.len) return trailing(err, "raw scan");
  if (q->table && !table_ok(q->table, tl)) return bad(err, "raw scan", "table");
  return PC_OK;
}

int pc_tablet_encode_heartbeat(pc_buf_t *b, const pc_tablet_heartbeat_req_t *q) {
  return pc_wire_put_cell(b, &q->primary) || pc_buf_u64(b, q->start_ts) ||
                 pc_buf_u32(b, q->ttl_ms)
             ? -1
             : 0;
}

pc_status_t pc_tablet_decode_heartbeat(const char *body, size_t len, pc_arena_t *a,
                                       pc_tablet_heartbeat_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  if (pc_wire_get_cell(&r, a, &q->primary)) return bad(err, "heartbeat", "primary");
  q->start_ts = pc_rd_u64(&r);
  if (!r.ok) return bad(err, "heartbeat", "start_ts");
  q->ttl_ms = pc_rd_u32(&r);
  if (!r.ok) return bad(err, "heartbeat", "ttl_ms");
  if (r.pos != r.len) return trailing(err, "heartbeat");
  return PC_OK;
}

int pc_tablet_encode_scan_locks(pc_buf_t *b, uint64_t below) { return pc_buf_u64(b, below); }

pc_status_t pc_tablet_decode_scan_locks(const char *body, size_t len, uint64_t *below,
                                        pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  *below = pc_rd_u64(&r);
  if (!r.ok) return bad(err, "scan locks", "below");
  if (r.pos != r.len) return trailing(err, "scan locks");
  return PC_OK;
}

int pc_tablet_encode_gc(pc_buf_t *b, const pc_tablet_gc_req_t *q) {
  return pc_buf_u64(b, q->safe_point) || pc_buf_u32(b, q->rate) ? -1 : 0;
}

pc_status_t pc_tablet_decode_gc(const char *body, size_t len, pc_tablet_gc_req_t *q,
                                pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  q->safe_point = pc_rd_u64(&r);
  if (!r.ok) return bad(err, "gc", "safe_point");
  q->rate = pc_rd_u32(&r);
  if (!r.ok) return bad(err, "gc", "rate");
  if (r.pos != r.len) return trailing(err, "gc");
  return PC_OK;
}

int pc_tablet_encode_scan_notify(pc_buf_t *b, const pc_tablet_scan_notify_req_t *q) {
  return pc_buf_u32(b, q->lo) || pc_buf_u32(b, q->hi) || pc_buf_u8(b, q->has_after != 0) ||
                 (q->has_after && pc_wire_put_notification(b, &q->after)) ||
                 pc_buf_u32(b, q->limit)
             ? -1
             : 0;
}

pc_status_t pc_tablet_decode_scan_notify(const char *body, size_t len, pc_arena_t *a,
                                         pc_tablet_scan_notify_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  q->lo = pc_rd_u32(&r);
  q->hi = pc_rd_u32(&r);
  if (!r.ok) return bad(err, "scan notify", "bucket range");
  uint8_t has_after = pc_rd_u8(&r);
  if (!r.ok || has_after > 1) return bad(err, "scan notify", "has_after");
  q->has_after = has_after;
  if (has_after && pc_wire_get_notification(&r, a, &q->after))
    return bad(err, "scan notify", "after");
  q->limit = pc_rd_u32(&r);
  if (!r.ok) return bad(err, "scan notify", "limit");
  if (r.pos != r.len) return trailing(err, "scan notify");
  if (q->lo >= q->hi || q->hi > PC_NOTIFY_BUCKETS) return bad(err, "scan notify", "bucket range");
  if (q->limit == 0 || q->limit > PC_STORE_SCAN_LIMIT_MAX) return bad(err, "scan notify", "limit");
  return PC_OK;
}

int pc_tablet_encode_clear_notify(pc_buf_t *b, const pc_notify_clear_t *q) {
  return put_clear(b, q);
}

pc_status_t pc_tablet_decode_clear_notify(const char *body, size_t len, pc_arena_t *a,
                                          pc_notify_clear_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  const char *at = get_clear(&r, a, q);
  if (at) return bad(err, "clear notify", at);
  if (r.pos != r.len) return trailing(err, "clear notify");
  return PC_OK;
}

int pc_tablet_encode_clear_notify_many(pc_buf_t *b, const pc_notify_clear_t *q, size_t n) {
  if (pc_buf_u32(b, (uint32_t)n)) return -1;
  for (size_t k = 0; k < n; k++)
    if (put_clear(b, &q[k])) return -1;
  return 0;
}

pc_status_t pc_tablet_decode_clear_notify_many(const char *body, size_t len, pc_arena_t *a,
                                               pc_notify_clear_t **q, size_t *n,
                                               pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  *q = NULL;
  if (read_count(&r, n) || *n == 0) return bad(err, "clear notify", "count");
  pc_notify_clear_t *v = pc_arena_calloc(a, *n, sizeof *v);
  if (!v) return pc_error_set(err, PC_NOMEM, "out of memory");
  for (size_t k = 0; k < *n; k++) {
    const char *at = get_clear(&r, a, &v[k]);
    if (at) return bad(err, "clear notify", at);
  }
  if (r.pos != r.len) return trailing(err, "clear notify");
  *q = v;
  return PC_OK;
}

int pc_tablet_encode_observer(pc_buf_t *b, const pc_tablet_observer_req_t *q) {
  const pc_store_observer_t *o = &q->observer;
  if (pc_buf_u8(b, (uint8_t)(q->add != 0)) || pc_buf_str(b, o->name, strlen(o->name)))
    return -1;
  if (!q->add) return 0;
  pc_buf_t rec = {0};
  int fail = pc_obs_record_encode(&rec, o->kind, o->table, o->col, o->clen) ||
             pc_buf_str(b, rec.p, rec.len);
  pc_buf_free(&rec);
  return fail ? -1 : 0;
}

pc_status_t pc_tablet_decode_observer(const char *body, size_t len, pc_arena_t *a,
                                      pc_tablet_observer_req_t *q, pc_error_t *err) {
  pc_rd_t r = {body, len, 0, 1};
  memset(q, 0, sizeof *q);
  uint8_t add = pc_rd_u8(&r);
  if (!r.ok || add > 1) return bad(err, "observer", "add");
  size_t nl, rl = 0;
  const char *name = pc_rd_str(&r, &nl);
  if (!r.ok || !pc_obs_name_ok(name, nl)) return bad(err, "observer", "name");
  const char *rec = add ? pc_rd_str(&r, &rl) : NULL;
  pc_obs_record_t d;
  if (!r.ok || (add && pc_obs_record_decode(rec, rl, &d) != 0))
    return bad(err, "observer", "record");
  if (r.pos != r.len) return trailing(err, "observer");
  q->add = add;
  if (!(q->observer.name = pc_arena_dup(a, name, nl)) ||
      (add && !(q->observer.table = pc_arena_dup(a, d.table, strlen(d.table)))))
    return pc_error_set(err, PC_NOMEM, "out of memory");
  if (add) {
    q->observer.col = d.col;
    q->observer.clen = d.clen;
    q->observer.kind = d.kind;
  }
  return PC_OK;
}

pc_status_t pc_tablet_decode_empty(const char *body, size_t len, const char *what,
                                   pc_error_t *err) {
  (void)body;
  return len == 0 ? PC_OK : trailing(err, what);
}

uint8_t pc_tablet_wrap(pc_buf_t *out, const char *tablet, uint8_t op, const char *body,
                       size_t len) {
  if (pc_buf_str(out, tablet, strlen(tablet)) || pc_buf_u8(out, op) ||
      (len && pc_buf_append(out, body, len)))
    return 0;
  return pc_tablet_rpc_runs_inline(op) ? PC_TABLET_OP_ROUTED_READ : PC_TABLET_OP_ROUTED;
}
