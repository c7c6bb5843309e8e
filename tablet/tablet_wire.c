/* tablet_wire.c — byte layout of cells, mutations, locks and raw cells in
 * the tablet protocol's bodies (see tablet.h), and the arena that owns the
 * strings decoded from a body. Every decoder checks bounds through pc_rd_t:
 * a truncated or oversized field yields -1, never a read past the body. */
#include "tablet/tablet_wire.h"

#include <stdlib.h>
#include <string.h>

char *pc_arena_dup(pc_arena_t *a, const char *p, size_t n) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    char **ptrs = realloc(a->ptrs, cap * sizeof *ptrs);
    if (!ptrs) return NULL;
    a->ptrs = ptrs;
    a->cap = cap;
  }
  char *d = malloc(n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, p, n);
  d[n] = '\0';
  a->ptrs[a->n++] = d;
  return d;
}

void pc_arena_free(pc_arena_t *a) {
  for (size_t i = 0; i < a->n; i++) free(a->ptrs[i]);
  free(a->ptrs);
  a->ptrs = NULL;
  a->n = a->cap = 0;
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
