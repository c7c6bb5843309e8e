/* rawview.c — `percolator scan --raw`: every internal cell of the store
 * (pc_db_raw_scan), either as one JSON object per cell, streamed, or laid out
 * like the Percolator paper's Bob-and-Joe figures: for each (row, column) a
 * block of lines, newest timestamp first, with the columns
 *     row  column  ts  data  lock  write  [notify  ack]
 * The text view collects the cells first (notifications arrive after all the
 * data, in their own key space, and the columns are aligned over the table),
 * so it is meant for inspecting, not for dumping a large store. An
 * observer's acks of a cell (kept in a system column) are shown in the
 * cell's block, in the ack column, named by their observer. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/keys.h"

enum slot { SLOT_DATA, SLOT_LOCK, SLOT_WRITE, SLOT_NOTIFY, SLOT_ACK, NSLOTS };

static const char *const slot_names[NSLOTS] = {"data", "lock", "write", "notify", "ack"};

/* Values longer than this (escaped) are cut in the text view. */
#define VALUE_SHOWN 40

/* One entry of the text view: a slot of the line of (table, row, column, ts). */
typedef struct rec {
  char *table, *row, *col;
  size_t rlen, clen;
  uint64_t ts;
  enum slot slot;
  char *text;
} rec_t;

typedef struct collector {
  int json;
  uint64_t since; /* only cells whose ts is above it (0: every cell) */
  rec_t *recs;
  size_t n, cap;
  int failed; /* out of memory or a write error: stop */
} collector_t;

/* One printed line: the escaped row and column on a block's first line only. */
typedef struct line {
  const char *row, *col;
  char ts[24];
  const char *slot[NSLOTS];
} line_t;

static char *dup_bytes(const char *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    if (n) memcpy(d, p, n);
    d[n] = '\0';
  }
  return d;
}

static int is_own_primary(const pc_raw_cell_t *c) {
  return c->primary_table && strcmp(c->primary_table, c->table) == 0 &&
         c->primary_row_len == c->row_len && c->primary_column_len == c->column_len &&
         memcmp(c->primary_row, c->row, c->row_len) == 0 &&
         memcmp(c->primary_column, c->column, c->column_len) == 0;
}

static const char *kind_name(pc_cell_kind_t k) {
  switch (k) {
    case PC_CELL_DATA: return "data";
    case PC_CELL_LOCK: return "lock";
    case PC_CELL_WRITE: return "write";
    case PC_CELL_NOTIFY: return "notify";
    case PC_CELL_ACK: return "ack";
  }
  return "unknown";
}

/* ---- JSON: one object per cell ---------------------------------------------- */

static int json_cell(collector_t *col, const pc_raw_cell_t *c) {
  json_t *o = json_object();
  int bad = !o || fmt_json_bytes(o, "table", c->table, strlen(c->table)) ||
            fmt_json_bytes(o, "row", c->row, c->row_len) ||
            fmt_json_bytes(o, "column", c->column, c->column_len) ||
            json_object_set_new(o, "kind", json_string(kind_name(c->kind))) ||
            fmt_json_u64(o, "ts", c->ts);
  switch (c->kind) {
    case PC_CELL_DATA: bad = bad || fmt_json_bytes(o, "value", c->value, c->value_len); break;
    case PC_CELL_LOCK: {
      char session[20];
      snprintf(session, sizeof session, "%016llx", (unsigned long long)c->session);
      bad = bad ||
            json_object_set_new(o, "write_kind", json_string(fmt_write_kind(c->write_kind))) ||
            json_object_set_new(o, "primary", json_boolean(is_own_primary(c))) ||
            fmt_json_bytes(o, "primary_table", c->primary_table,
                           c->primary_table ? strlen(c->primary_table) : 0) ||
            fmt_json_bytes(o, "primary_row", c->primary_row, c->primary_row_len) ||
            fmt_json_bytes(o, "primary_column", c->primary_column, c->primary_column_len) ||
            fmt_json_u64(o, "ttl_ms", c->ttl_ms) ||
            json_object_set_new(o, "session", json_string(session)) ||
            json_object_set_new(o, "observed", json_boolean(c->observed)) ||
            json_object_set_new(o, "weak", json_boolean(c->weak)) ||
            (c->value && fmt_json_bytes(o, "value", c->value, c->value_len));
      break;
    }
    case PC_CELL_WRITE:
    case PC_CELL_ACK:
      bad = bad ||
            json_object_set_new(o, "write_kind", json_string(fmt_write_kind(c->write_kind))) ||
            fmt_json_u64(o, "start_ts", c->start_ts) ||
            (c->value && fmt_json_bytes(o, "value", c->value, c->value_len));
      break;
    case PC_CELL_NOTIFY:
      bad = bad || json_object_set_new(o, "weak", json_boolean(c->weak));
      break;
  }
  /* the cells of an ack column name their observer */
  if (c->observer)
    bad = bad || fmt_json_bytes(o, "observer", c->observer, strlen(c->observer));
  if (bad) {
    json_decref(o);
    return -1;
  }
  return fmt_json_line(stdout, o);
}

/* ---- text: collect ---------------------------------------------------------- */

/* A value for the data column: escaped, cut after VALUE_SHOWN characters on an
 * escape boundary, with the suffix (may be ""). */
static char *value_text(const char *p, size_t n, const char *suffix) {
  size_t shown = 0, k = 0;
  for (; k < n; k++) {
    char *e = fmt_escape_str(p + k, 1, 0);
    if (!e) return NULL;
    size_t el = strlen(e);
    free(e);
    if (shown + el > VALUE_SHOWN) break;
    shown += el;
  }
  char *esc = fmt_escape_str(p, k, 0);
  if (!esc) return NULL;
  char more[48] = "";
  if (k < n) snprintf(more, sizeof more, "... (%zu bytes)", n);
  size_t len = strlen(esc) + strlen(more) + strlen(suffix) + 1;
  char *s = malloc(len);
  if (s) snprintf(s, len, "%s%s%s", esc, more, suffix);
  free(esc);
  return s;
}

static char *lock_text(const pc_raw_cell_t *c) {
  /* what its commit writes besides a put: a delete, a weak notification
   * alone, or a put notified weakly too */
  const char *del = c->write_kind == PC_WRITE_DELETE   ? " delete"
                    : c->write_kind == PC_WRITE_NOTIFY ? " notify"
                    : c->weak                          ? " +notify"
                                                       : "";
  char *s = NULL;
  if (c->observer) { /* the lock of an ack: its own primary is in a system column */
    size_t len = strlen(c->observer) + strlen(del) + 16;
    if ((s = malloc(len))) snprintf(s, len, "ack %s%s", c->observer, del);
    return s;
  }
  if (is_own_primary(c)) {
    size_t len = strlen("primary") + strlen(del) + 1;
    s = malloc(len);
    if (s) snprintf(s, len, "primary%s", del);
    return s;
  }
  char *r = fmt_escape_str(c->primary_row, c->primary_row_len, 0);
  char *k = fmt_escape_str(c->primary_column, c->primary_column_len, 0);
  const char *pt = c->primary_table ? c->primary_table : "";
  int other_table = strcmp(pt, c->table) != 0;
  if (r && k) {
    size_t len = strlen(r) + strlen(k) + strlen(pt) + strlen(del) + 16;
    if ((s = malloc(len)))
      snprintf(s, len, "primary @ %s%s%s/%s%s", other_table ? pt : "", other_table ? "/" : "", r, k,
               del);
  }
  free(r);
  free(k);
  return s;
}

static char *write_text(const pc_raw_cell_t *c) {
  const char *what = c->write_kind == PC_WRITE_PUT      ? "data"
                     : c->write_kind == PC_WRITE_DELETE ? "delete"
                     : c->write_kind == PC_WRITE_NOTIFY ? "notify"
                                                        : "rollback";
  char *s = malloc(48);
  if (s) snprintf(s, 48, "%s @ %llu", what, (unsigned long long)c->start_ts);
  return s;
}

/* An ack's commit record: the observer, and the run it records (its start_ts). */
static char *ack_text(const pc_raw_cell_t *c) {
  char *name = fmt_escape_str(c->observer ? c->observer : "", c->observer ? strlen(c->observer) : 0, 0);
  if (!name) return NULL;
  const char *what = c->write_kind == PC_WRITE_PUT      ? ""
                     : c->write_kind == PC_WRITE_DELETE ? " delete"
                                                        : " rollback";
  size_t len = strlen(name) + 48;
  char *s = malloc(len);
  if (s) snprintf(s, len, "%s%s @ %llu", name, what, (unsigned long long)c->start_ts);
  free(name);
  return s;
}

/* Adds one entry (takes text, which may be NULL only on out-of-memory). */
static int add_rec(collector_t *col, const pc_raw_cell_t *c, uint64_t ts, enum slot slot,
                   char *text) {
  if (!text) return -1;
  if (col->n == col->cap) {
    size_t cap = col->cap ? col->cap * 2 : 64;
    rec_t *v = realloc(col->recs, cap * sizeof *v);
    if (!v) {
      free(text);
      return -1;
    }
    col->recs = v;
    col->cap = cap;
  }
  rec_t *r = &col->recs[col->n];
  r->table = strdup(c->table);
  r->row = dup_bytes(c->row, c->row_len);
  r->col = dup_bytes(c->column, c->column_len);
  r->rlen = c->row_len;
  r->clen = c->column_len;
  r->ts = ts;
  r->slot = slot;
  r->text = text;
  if (!r->table || !r->row || !r->col) {
    free(r->table);
    free(r->row);
    free(r->col);
    free(text);
    return -1;
  }
  col->n++;
  return 0;
}

static int text_cell(collector_t *col, const pc_raw_cell_t *c) {
  switch (c->kind) {
    case PC_CELL_DATA:
      return add_rec(col, c, c->ts, SLOT_DATA, value_text(c->value, c->value_len, ""));
    case PC_CELL_LOCK:
      if (c->value &&
          add_rec(col, c, c->ts, SLOT_DATA, value_text(c->value, c->value_len, " (inline)")))
        return -1;
      return add_rec(col, c, c->ts, SLOT_LOCK, lock_text(c));
    case PC_CELL_WRITE:
      if (c->value && c->write_kind == PC_WRITE_PUT &&
          add_rec(col, c, c->start_ts, SLOT_DATA, value_text(c->value, c->value_len, " (inline)")))
        return -1;
      return add_rec(col, c, c->ts, SLOT_WRITE, write_text(c));
    case PC_CELL_NOTIFY:
      return add_rec(col, c, c->ts, SLOT_NOTIFY, strdup(c->weak ? "weak" : "strong"));
    case PC_CELL_ACK: return add_rec(col, c, c->ts, SLOT_ACK, ack_text(c));
  }
  return 0;
}

static int on_cell(void *ctx, const pc_raw_cell_t *c) {
  collector_t *col = ctx;
  if (c->ts <= col->since) return 0;
  if ((col->json ? json_cell(col, c) : text_cell(col, c)) != 0) col->failed = 1;
  return col->failed;
}

/* ---- text: sort and print ------------------------------------------------------ */

/* Same block: same table, row and column. */
static int block_cmp(const rec_t *x, const rec_t *y) {
  int c = strcmp(x->table, y->table);
  if (!c) c = pc_bytes_cmp(x->row, x->rlen, y->row, y->rlen);
  if (!c) c = pc_bytes_cmp(x->col, x->clen, y->col, y->clen);
  return c;
}

static int rec_cmp(const void *a, const void *b) {
  const rec_t *x = a, *y = b;
  int c = block_cmp(x, y);
  if (c) return c;
  if (x->ts != y->ts) return x->ts > y->ts ? -1 : 1; /* newest first */
  return (int)x->slot - (int)y->slot;
}

static void print_field(const char *s, size_t width, int last) {
  fputs(s, stdout);
  if (!last)
    for (size_t i = strlen(s); i < width + 2; i++) putchar(' ');
}

/* Prints the lines of one table, aligned; the header first. */
static void print_lines(const line_t *lines, size_t n) {
  int shown[NSLOTS] = {1, 1, 1, 0, 0};
  size_t wrow = strlen("row"), wcol = strlen("column"), wts = strlen("ts");
  size_t w[NSLOTS];
  for (int s = 0; s < NSLOTS; s++) w[s] = strlen(slot_names[s]);
  for (size_t i = 0; i < n; i++) {
    if (lines[i].row && strlen(lines[i].row) > wrow) wrow = strlen(lines[i].row);
    if (lines[i].col && strlen(lines[i].col) > wcol) wcol = strlen(lines[i].col);
    if (strlen(lines[i].ts) > wts) wts = strlen(lines[i].ts);
    for (int s = 0; s < NSLOTS; s++) {
      if (!lines[i].slot[s]) continue;
      shown[s] = 1;
      if (strlen(lines[i].slot[s]) > w[s]) w[s] = strlen(lines[i].slot[s]);
    }
  }
  int lastcol = 0;
  for (int s = 0; s < NSLOTS; s++)
    if (shown[s]) lastcol = s;
  /* the header, then each line up to its last non-empty field */
  for (size_t i = 0; i <= n; i++) {
    const line_t *l = i ? &lines[i - 1] : NULL;
    int last = -3; /* -3 row, -2 column, -1 ts, 0.. slots */
    if (!l) {
      last = lastcol;
    } else {
      last = -1;
      for (int s = 0; s < NSLOTS; s++)
        if (l->slot[s]) last = s;
    }
    print_field(l ? (l->row ? l->row : "") : "row", wrow, 0);
    print_field(l ? (l->col ? l->col : "") : "column", wcol, 0);
    print_field(l ? l->ts : "ts", wts, last == -1);
    for (int s = 0; s <= last; s++) {
      if (!shown[s]) continue;
      print_field(l ? (l->slot[s] ? l->slot[s] : "") : slot_names[s], w[s], s == last);
    }
    putchar('\n');
  }
}

/* Builds the lines of recs[0..n) (one table, sorted) and prints them. */
static int print_table(const rec_t *recs, size_t n) {
  line_t *lines = calloc(n ? n : 1, sizeof *lines);
  char **names = calloc(2 * (n ? n : 1), sizeof *names); /* escaped rows and columns */
  size_t nl = 0, nn = 0;
  int rc = 0;
  if (!lines || !names) rc = -1;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const rec_t *r = &recs[i];
    int new_block = i == 0 || block_cmp(&recs[i - 1], r) != 0;
    line_t *cur = nl ? &lines[nl - 1] : NULL;
    /* the same line while the ts is the same and the slot is free */
    if (new_block || r->ts != recs[i - 1].ts || cur->slot[r->slot]) {
      cur = &lines[nl++];
      snprintf(cur->ts, sizeof cur->ts, "%llu", (unsigned long long)r->ts);
      if (new_block) {
        if (!(names[nn++] = fmt_escape_str(r->row, r->rlen, 0)) ||
            !(names[nn++] = fmt_escape_str(r->col, r->clen, 0))) {
          rc = -1;
          break;
        }
        cur->row = names[nn - 2];
        cur->col = names[nn - 1];
      }
    }
    cur->slot[r->slot] = r->text;
  }
  if (rc == 0) print_lines(lines, nl);
  for (size_t i = 0; names && i < nn; i++) free(names[i]);
  free(names);
  free(lines);
  return rc;
}

static int print_text(collector_t *col, const char *only_table) {
  if (col->n) qsort(col->recs, col->n, sizeof *col->recs, rec_cmp);
  if (only_table) return print_table(col->recs, col->n);
  for (size_t i = 0; i < col->n;) {
    size_t j = i + 1;
    while (j < col->n && strcmp(col->recs[j].table, col->recs[i].table) == 0) j++;
    printf("%stable %s\n", i ? "\n" : "", col->recs[i].table);
    if (print_table(col->recs + i, j - i) != 0) return -1;
    i = j;
  }
  return 0;
}

int cli_raw_scan(const cli_ctx_t *ctx, pc_db_t *db, const char *table, const char *start,
                 const char *end, uint64_t since, int json) {
  collector_t col = {json, since, NULL, 0, 0, 0};
  pc_error_t err;
  pc_status_t st = pc_db_raw_scan(db, table, start, start ? strlen(start) : 0, end,
                                  end ? strlen(end) : 0, on_cell, &col, &err);
  int code = CLI_EXIT_OK;
  if (col.failed)
    code = cli_error(ctx, "out of memory or write error");
  else if (st != PC_OK)
    code = cli_pc_error(ctx, &err);
  else if (!json && print_text(&col, table) != 0)
    code = cli_error(ctx, "out of memory");
  for (size_t i = 0; i < col.n; i++) {
    free(col.recs[i].table);
    free(col.recs[i].row);
    free(col.recs[i].col);
    free(col.recs[i].text);
  }
  free(col.recs);
  if (code == CLI_EXIT_OK) code = cli_finish_output(ctx);
  return code;
}
