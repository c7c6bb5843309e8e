/* test_store.c — unit tests of the store layer: the order-preserving key
 * encoding, the meta and write records, and the embedded store's row
 * operations seen directly (large values in data cells, history reads at old
 * timestamps, strong notifications written at commit, the raw view). */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <leveldb/c.h>

#include "core/db.h"
#include "core/keys.h"
#include "tests/testutil.h"

static int bufcmp(const pc_buf_t *a, const pc_buf_t *b) {
  size_t n = a->len < b->len ? a->len : b->len;
  int c = memcmp(a->p, b->p, n);
  if (c) return c < 0 ? -1 : 1;
  return a->len < b->len ? -1 : a->len > b->len;
}

static int tuple_cmp(const char *r1, size_t l1, const char *r2, size_t l2) {
  size_t n = l1 < l2 ? l1 : l2;
  int c = memcmp(r1, r2, n);
  if (c) return c < 0 ? -1 : 1;
  return l1 < l2 ? -1 : l1 > l2;
}

/* Encoded (row, column) keys sort exactly like the (row, column) tuples,
 * including rows that contain NUL bytes or are prefixes of each other. */
static void test_key_order(void **state) {
  (void)state;
  static const struct {
    const char *s;
    size_t n;
  } rows[] = {{"a", 1}, {"a\0", 2}, {"a\0\0", 3}, {"a\0b", 3}, {"ab", 2}, {"b", 1},
              {"\0", 1}, {"\xff", 1}, {"a\xff", 2}, {"aa", 2}};
  size_t nr = sizeof rows / sizeof rows[0];
  for (size_t i = 0; i < nr; i++)
    for (size_t j = 0; j < nr; j++)
      for (int ci = 0; ci < 2; ci++)
        for (int cj = 0; cj < 2; cj++) {
          const char *cols[] = {"c", "c\0"};
          size_t cl[] = {1, 2};
          pc_cell_t a = {"t", rows[i].s, rows[i].n, cols[ci], cl[ci]};
          pc_cell_t b = {"t", rows[j].s, rows[j].n, cols[cj], cl[cj]};
          pc_buf_t ka = {0}, kb = {0};
          assert_int_equal(pc_key_cell(&ka, PC_KS_META, &a), 0);
          assert_int_equal(pc_key_cell(&kb, PC_KS_META, &b), 0);
          int want = tuple_cmp(rows[i].s, rows[i].n, rows[j].s, rows[j].n);
          if (want == 0) want = tuple_cmp(cols[ci], cl[ci], cols[cj], cl[cj]);
          assert_int_equal(bufcmp(&ka, &kb), want);
          pc_buf_free(&ka);
          pc_buf_free(&kb);
        }
}

/* Versions of one cell sort newest first, and decode back to their parts. */
static void test_key_timestamps_and_decode(void **state) {
  (void)state;
  pc_cell_t c = {"tbl", "r\0w", 3, "f:q", 3};
  pc_buf_t k1 = {0}, k2 = {0};
  assert_int_equal(pc_key_cell_ts(&k1, PC_KS_WRITE, &c, 100), 0);
  assert_int_equal(pc_key_cell_ts(&k2, PC_KS_WRITE, &c, 200), 0);
  assert_true(bufcmp(&k2, &k1) < 0);
  pc_key_decoded_t d = {0};
  assert_int_equal(pc_key_decode(k1.p, k1.len, &d), 0);
  assert_int_equal(d.space, PC_KS_WRITE);
  assert_string_equal(d.table.p, "tbl");
  assert_int_equal(d.row.len, 3);
  assert_memory_equal(d.row.p, "r\0w", 3);
  assert_memory_equal(d.col.p, "f:q", 3);
  assert_int_equal(d.ts, 100);
  /* truncated or garbled keys are rejected, not misread */
  assert_int_equal(pc_key_decode(k1.p, k1.len - 1, &d), -1);
  assert_int_equal(pc_key_decode("m\0\x02", 3, &d), -1);
  pc_buf_t kn = {0};
  assert_int_equal(pc_key_notify(&kn, &c, 7), 0);
  assert_int_equal(pc_key_decode(kn.p, kn.len, &d), 0);
  assert_int_equal(d.bucket, pc_notify_bucket("tbl", "r\0w", 3));
  assert_int_equal(d.ts, 7);
  pc_key_decoded_free(&d);
  pc_buf_free(&k1);
  pc_buf_free(&k2);
  pc_buf_free(&kn);
}

/* The reference escaping, a byte at a time. */
static void ref_escape(pc_buf_t *b, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    pc_buf_append(b, &s[i], 1);
    if (s[i] == '\0') pc_buf_append(b, "\xff", 1);
  }
  pc_buf_append(b, "\0\1", 2);
}

/* pc_key_cell's word-at-a-time escaping agrees with the byte-at-a-time
 * reference for every length up to 40 and 0x00 at any place, or none. */
static void test_key_escape_every_shape(void **state) {
  (void)state;
  char row[40], col[40];
  uint64_t rng = 12345;
  for (size_t rl = 1; rl <= sizeof row; rl++) {
    for (int zero = -1; zero < (int)rl; zero++) {
      for (size_t i = 0; i < rl; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        row[i] = (char)(1 + (rng >> 33) % 255); /* never 0x00 */
      }
      if (zero >= 0) row[zero] = '\0';
      size_t cl = 1 + (size_t)(rng >> 40) % sizeof col;
      for (size_t i = 0; i < cl; i++) col[i] = (char)((rng >> (i % 50)) & 0x0F); /* zeros too */
      pc_cell_t c = {"table_name.x", row, rl, col, cl};
      pc_buf_t got = {0}, want = {0};
      assert_int_equal(pc_key_cell(&got, PC_KS_META, &c), 0);
      pc_buf_append(&want, "m", 1);
      ref_escape(&want, c.table, strlen(c.table));
      ref_escape(&want, row, rl);
      ref_escape(&want, col, cl);
      assert_int_equal(got.len, want.len);
      assert_memory_equal(got.p, want.p, want.len);
      pc_buf_free(&got);
      pc_buf_free(&want);
    }
  }
}

static void test_meta_roundtrip(void **state) {
  (void)state;
  pc_meta_t m = {0};
  m.has_lock = 1;
  m.lock.start_ts = 11;
  m.lock.kind = PC_WRITE_PUT;
  m.lock.ttl_ms = 3000;
  m.lock.session = 99;
  m.lock.observed = 1;
  m.lock.has_inline = 1;
  pc_buf_append(&m.lock.value, "v\0v", 3);
  pc_buf_append(&m.lock.ptable, "t", 1);
  pc_buf_append(&m.lock.prow, "p", 1);
  pc_buf_append(&m.lock.pcol, "c:", 2);
  m.has_head = 1;
  m.head = (pc_write_rec_t){PC_WRITE_DELETE, 5, 8, 0, NULL, 0, 0};
  m.latest_any = 9;
  pc_buf_t enc = {0};
  assert_int_equal(pc_meta_encode(&m, &enc), 0);
  pc_meta_t d = {0};
  assert_int_equal(pc_meta_decode(enc.p, enc.len, &d), 0);
  assert_int_equal(d.lock.start_ts, 11);
  assert_int_equal(d.lock.session, 99);
  assert_true(d.lock.observed);
  assert_int_equal(d.lock.value.len, 3);
  assert_memory_equal(d.lock.value.p, "v\0v", 3);
  assert_string_equal(d.lock.ptable.p, "t");
  assert_int_equal(d.head.kind, PC_WRITE_DELETE);
  assert_int_equal(d.head.commit_ts, 8);
  assert_int_equal(d.latest_any, 9);
  /* every truncation of the record is detected */
  for (size_t n = 0; n < enc.len; n++) {
    pc_meta_t t = {0};
    assert_int_equal(pc_meta_decode(enc.p, n, &t), -1);
    pc_meta_free(&t);
  }
  pc_meta_free(&m);
  pc_meta_free(&d);
  pc_buf_free(&enc);
}

/* A lock's flags byte (observed, weak) and its kinds (put, delete, notify):
 * what each encodes to, that they decode back, and that a record of before
 * weak notifications (the byte was 'observed', 0 or 1) decodes the same;
 * other flags and kinds are refused. A commit record of kind notify too. */
static void test_lock_flags_and_notify_kind(void **state) {
  (void)state;
  static const struct {
    pc_write_kind_t kind;
    int observed, weak;
    uint8_t byte;
  } forms[] = {{PC_WRITE_PUT, 0, 0, 0},  {PC_WRITE_PUT, 1, 0, 1},    {PC_WRITE_PUT, 1, 1, 3},
               {PC_WRITE_DELETE, 0, 1, 2}, {PC_WRITE_NOTIFY, 0, 1, 2}};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    pc_meta_t m = {0};
    m.has_lock = 1;
    m.lock.start_ts = 11;
    m.lock.kind = forms[i].kind;
    m.lock.ttl_ms = 3000;
    m.lock.session = 99;
    m.lock.observed = forms[i].observed;
    m.lock.weak = forms[i].weak;
    pc_buf_append(&m.lock.ptable, "t", 1);
    pc_buf_append(&m.lock.prow, "p", 1);
    pc_buf_append(&m.lock.pcol, "c:", 2);
    pc_buf_t enc = {0};
    assert_int_equal(pc_meta_encode(&m, &enc), 0);
    /* tag, u64 start_ts, u8 kind, u32 ttl, u64 session, then the flags */
    const size_t kind_at = 1 + 8, flags_at = kind_at + 1 + 4 + 8;
    assert_int_equal((uint8_t)enc.p[kind_at], (uint8_t)forms[i].kind);
    assert_int_equal((uint8_t)enc.p[flags_at], forms[i].byte);
    pc_meta_t d = {0};
    assert_int_equal(pc_meta_decode(enc.p, enc.len, &d), 0);
    assert_int_equal(d.lock.kind, forms[i].kind);
    assert_int_equal(d.lock.observed, forms[i].observed);
    assert_int_equal(d.lock.weak, forms[i].weak);
    pc_meta_free(&d);
    int has_lock, has_head;
    uint64_t lock_start;
    pc_write_rec_t h;
    assert_int_equal(pc_meta_peek(enc.p, enc.len, &has_lock, &lock_start, &has_head, &h), 0);
    assert_int_equal(lock_start, 11);
    /* unknown flags, and kinds that no lock has, are refused */
    static const uint8_t bad_flags[] = {4, 8, 0x80, 0xff};
    for (size_t k = 0; k < sizeof bad_flags; k++) {
      pc_buf_t b = {0};
      pc_buf_append(&b, enc.p, enc.len);
      b.p[flags_at] = (char)bad_flags[k];
      memset(&d, 0, sizeof d);
      assert_int_equal(pc_meta_decode(b.p, b.len, &d), -1);
      pc_meta_free(&d);
      assert_int_equal(pc_meta_peek(b.p, b.len, &has_lock, &lock_start, &has_head, &h), -1);
      pc_buf_free(&b);
    }
    static const uint8_t bad_kinds[] = {PC_WRITE_ROLLBACK, 4, 0xff};
    for (size_t k = 0; k < sizeof bad_kinds; k++) {
      pc_buf_t b = {0};
      pc_buf_append(&b, enc.p, enc.len);
      b.p[kind_at] = (char)bad_kinds[k];
      memset(&d, 0, sizeof d);
      assert_int_equal(pc_meta_decode(b.p, b.len, &d), -1);
      pc_meta_free(&d);
      pc_buf_free(&b);
    }
    pc_meta_free(&m);
    pc_buf_free(&enc);
  }
  /* the record a notify-only primary leaves: no value; kind 4 is refused */
  pc_write_rec_t w = {PC_WRITE_NOTIFY, 5, 8, PC_VALUE_IN_DATA, NULL, 0, 0}, d;
  pc_buf_t enc = {0};
  assert_int_equal(pc_write_encode(&w, &enc), 0);
  assert_int_equal(pc_write_decode(enc.p, enc.len, &d), 0);
  assert_int_equal(d.kind, PC_WRITE_NOTIFY);
  assert_int_equal(d.start_ts, 5);
  assert_int_equal(d.commit_ts, 8);
  enc.p[1] = 4;
  assert_int_equal(pc_write_decode(enc.p, enc.len, &d), -1);
  pc_buf_free(&enc);
}

/* Checks that m encodes, decodes back to itself, that pc_meta_peek agrees
 * with the decode, and that every truncation is refused. */
static void check_meta_form(const pc_meta_t *m, size_t *encoded_len) {
  pc_buf_t enc = {0};
  assert_int_equal(pc_meta_encode(m, &enc), 0);
  *encoded_len = enc.len;
  pc_meta_t d = {0};
  assert_int_equal(pc_meta_decode(enc.p, enc.len, &d), 0);
  assert_int_equal(d.has_lock, m->has_lock);
  assert_int_equal(d.has_head, m->has_head);
  assert_int_equal(d.latest_any, m->latest_any);
  int has_lock, has_head;
  uint64_t lock_start;
  pc_write_rec_t h = {0};
  assert_int_equal(pc_meta_peek(enc.p, enc.len, &has_lock, &lock_start, &has_head, &h), 0);
  assert_int_equal(has_lock, m->has_lock);
  assert_int_equal(has_head, m->has_head);
  if (m->has_lock) assert_int_equal(lock_start, m->lock.start_ts);
  if (m->has_head) {
    const pc_write_rec_t *heads[2] = {&d.head, &h};
    for (int i = 0; i < 2; i++) {
      assert_int_equal(heads[i]->kind, m->head.kind);
      assert_int_equal(heads[i]->start_ts, m->head.start_ts);
      assert_int_equal(heads[i]->commit_ts, m->head.commit_ts);
      assert_int_equal(heads[i]->has_inline, m->head.has_inline);
      assert_int_equal(heads[i]->vlen, m->head.vlen);
      if (m->head.vlen) assert_memory_equal(heads[i]->value, m->head.value, m->head.vlen);
    }
  }
  for (size_t n = 0; n < enc.len; n++) {
    pc_meta_t t = {0};
    assert_int_equal(pc_meta_decode(enc.p, n, &t), -1);
    pc_meta_free(&t);
    assert_int_equal(pc_meta_peek(enc.p, n, &has_lock, &lock_start, &has_head, &h), -1);
  }
  pc_meta_free(&d);
  pc_buf_free(&enc);
}

static void test_meta_forms(void **state) {
  (void)state;
  char big[300];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 7);
  const uint64_t c = (uint64_t)1763800000000 << 18; /* a hybrid timestamp of 2025 */
  size_t len;
  /* a cell at rest: an inline put that is also the latest write */
  pc_meta_t m = {0};
  m.has_head = 1;
  m.head = (pc_write_rec_t){PC_WRITE_PUT, c - (5u << 18), c, PC_VALUE_INLINE, big, 100, 0};
  m.latest_any = c;
  check_meta_form(&m, &len);
  assert_true(len <= 100 + 14); /* the lean form: a header of at most 14 bytes */
  /* values whose length takes two varint bytes; a start_ts one apart; an empty value */
  m.head.vlen = sizeof big;
  m.head.start_ts = c - 1;
  check_meta_form(&m, &len);
  m.head.vlen = 0;
  check_meta_form(&m, &len);
  /* a rollback newer than the head; a delete; a value in a data cell */
  m.latest_any = c + 9;
  m.head.kind = PC_WRITE_DELETE;
  m.head.has_inline = PC_VALUE_IN_DATA;
  m.head.value = NULL;
  check_meta_form(&m, &len);
  /* a start_ts above the commit_ts is carried whole, not as a delta */
  m.head = (pc_write_rec_t){PC_WRITE_PUT, c + 3, c, PC_VALUE_INLINE, big, 10, 0};
  m.latest_any = c;
  check_meta_form(&m, &len);
  /* no head: only rollbacks, or nothing at all */
  pc_meta_t none = {0};
  none.latest_any = 77;
  check_meta_form(&none, &len);
  none.latest_any = 0;
  check_meta_form(&none, &len);
  /* a lock beside a head */
  m.head.start_ts = c - 2;
  m.has_lock = 1;
  m.lock.start_ts = c + 1;
  m.lock.kind = PC_WRITE_PUT;
  pc_buf_append(&m.lock.ptable, "t", 1);
  pc_buf_append(&m.lock.prow, "r", 1);
  pc_buf_append(&m.lock.pcol, "f:q", 3);
  check_meta_form(&m, &len);
  pc_meta_free(&m);
}

/* A record whose first byte is not the meta tag, or that sets flag 4 (the
 * head is the cell's first) without a head, is malformed, not read some
 * other way. With a head, flag 4 comes back from both decoders. */
static void test_meta_unknown_form_refused(void **state) {
  (void)state;
  pc_meta_t m = {0};
  m.has_head = 1;
  m.head = (pc_write_rec_t){PC_WRITE_PUT, 10, 11, PC_VALUE_INLINE, "abc", 3, 1};
  m.latest_any = 11;
  pc_buf_t enc = {0};
  assert_int_equal(pc_meta_encode(&m, &enc), 0);
  pc_meta_t d = {0};
  assert_int_equal(pc_meta_decode(enc.p, enc.len, &d), 0);
  assert_true(d.head.first);
  pc_meta_free(&d);
  int has_lock, has_head;
  uint64_t lock_start;
  pc_write_rec_t h;
  assert_int_equal(pc_meta_peek(enc.p, enc.len, &has_lock, &lock_start, &has_head, &h), 0);
  assert_true(has_head && h.first && h.vlen == 3);
  enc.p[0] = 1; /* a version-1 tag */
  assert_int_equal(pc_meta_decode(enc.p, enc.len, &d), -1);
  pc_meta_free(&d);
  assert_int_equal(pc_meta_peek(enc.p, enc.len, &has_lock, &lock_start, &has_head, &h), -1);
  pc_meta_t headless = {0}; /* a rolled-back cell: latest_any alone */
  headless.latest_any = 7;
  enc.len = 0;
  assert_int_equal(pc_meta_encode(&headless, &enc), 0);
  enc.p[0] = (char)(enc.p[0] | 4); /* first, of no head */
  assert_int_equal(pc_meta_decode(enc.p, enc.len, &d), -1);
  pc_meta_free(&d);
  assert_int_equal(pc_meta_peek(enc.p, enc.len, &has_lock, &lock_start, &has_head, &h), -1);
  pc_buf_free(&enc);
}

typedef struct fixture {
  char *dir;
  pc_db_t *db;
  pc_store_t *s;
} fixture_t;

/* The store's tables (.ldb files) under dir/store, in bytes. */
static uint64_t table_bytes(const char *dir) {
  char path[4300];
  snprintf(path, sizeof path, "%s/store", dir);
  DIR *d = opendir(path);
  if (!d) fail_msg("cannot open %s", path);
  uint64_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    struct stat st;
    snprintf(path, sizeof path, "%s/store/%s", dir, e->d_name);
    if (l > 4 && strcmp(e->d_name + l - 4, ".ldb") == 0 && stat(path, &st) == 0)
      n += (uint64_t)st.st_size;
  }
  closedir(d);
  return n;
}

/* pc_options_set_compression reaches LevelDB: 4 MiB of one repeated line
 * take about that on disk without compression, a small part of it with
 * snappy (the tables after a reopen, which writes the log into a table). */
static void test_compression_option(void **state) {
  (void)state;
  uint64_t bytes[2];
  static char v[4096];
  for (size_t i = 0; i < sizeof v; i++) v[i] = "compressible text "[i % 18];
  for (int on = 0; on < 2; on++) {
    char *dir = tu_mkdtemp("compress");
    pc_options_t *o = pc_options_create();
    pc_options_set_create_if_missing(o, 1);
    pc_options_set_compression(o, on);
    pc_error_t err;
    for (int round = 0; round < 2; round++) {
      pc_db_t *db = pc_db_open(o, dir, &err);
      if (!db) fail_msg("pc_db_open: %s", err.text);
      for (int i = 0; round == 0 && i < 1024; i++) {
        pc_txn_t *t = pc_txn_begin(db, &err);
        char row[16];
        int rl = snprintf(row, sizeof row, "r%04d", i);
        assert_non_null(t);
        assert_int_equal(pc_txn_set(t, "t", row, (size_t)rl, "c", 1, v, sizeof v - 1, &err), PC_OK);
        assert_int_equal(pc_txn_commit(t, &err), PC_OK);
        pc_txn_destroy(t);
      }
      pc_db_close(db);
    }
    bytes[on] = table_bytes(dir);
    pc_options_destroy(o);
    tu_rmtree(dir);
  }
  assert_true(bytes[0] > 4000000);
  assert_true(bytes[1] < bytes[0] / 4);
}

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  f->dir = tu_mkdtemp("store");
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  pc_db_close(f->db);
  tu_rmtree(f->dir);
  free(f);
  return 0;
}

static uint64_t ts(fixture_t *f) {
  uint64_t t;
  assert_int_equal(pc_db_timestamp(f->db, 1000, &t, NULL), PC_OK);
  return t;
}

/* Commits one write of cell c (a put of v, or a delete) through prewrite +
 * commit; returns commit_ts. */
static uint64_t write2pc(fixture_t *f, const pc_cell_t *c, pc_write_kind_t kind, const char *v,
                         size_t vlen) {
  uint64_t start = ts(f);
  pc_mutation_t m = {*c, kind, v, vlen, 0};
  pc_lock_spec_t spec = {*c, start, 3000, f->db->session};
  pc_lock_info_t lock = {0};
  pc_error_t err;
  assert_int_equal(f->s->ops->prewrite(f->s, &m, 1, &spec, &lock, &err), PC_OK);
  uint64_t commit = ts(f);
  assert_int_equal(f->s->ops->commit(f->s, c, 1, start, commit, &err), PC_OK);
  return commit;
}

static uint64_t put2pc(fixture_t *f, const pc_cell_t *c, const char *v, size_t vlen) {
  return write2pc(f, c, PC_WRITE_PUT, v, vlen);
}

static pc_status_t get_at(fixture_t *f, const pc_cell_t *c, uint64_t at, char **v, size_t *n) {
  pc_lock_info_t lock = {0};
  pc_error_t err;
  pc_status_t st = f->s->ops->get(f->s, c, at, v, n, &lock, &err);
  pc_lock_info_free(&lock);
  return st;
}

/* Old snapshots read old versions through the write history, large values
 * come back from data cells, deletes hide a cell. */
static void test_history_and_large_values(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"t", "row", 3, "col", 3};
  size_t big_n = PC_INLINE_MAX * 3;
  char *big = malloc(big_n);
  for (size_t i = 0; i < big_n; i++) big[i] = (char)('a' + i % 26);
  uint64_t c1 = put2pc(f, &c, "small", 5);
  uint64_t c2 = put2pc(f, &c, big, big_n);
  uint64_t c3 = put2pc(f, &c, "last", 4);
  char *v;
  size_t n;
  assert_int_equal(get_at(f, &c, c1 - 1, &v, &n), PC_NOT_FOUND);
  assert_int_equal(get_at(f, &c, c1, &v, &n), PC_OK);
  assert_memory_equal(v, "small", 5);
  pc_free(v);
  assert_int_equal(get_at(f, &c, c2, &v, &n), PC_OK);
  assert_int_equal(n, big_n);
  assert_memory_equal(v, big, big_n);
  pc_free(v);
  assert_int_equal(get_at(f, &c, c3 - 1, &v, &n), PC_OK);
  assert_int_equal(n, big_n);
  pc_free(v);
  assert_int_equal(get_at(f, &c, c3, &v, &n), PC_OK);
  assert_memory_equal(v, "last", 4);
  pc_free(v);
  free(big);
}

static pc_status_t ts_from_db(void *ctx, uint64_t *out, pc_error_t *err) {
  return pc_db_timestamp(ctx, 1000, out, err);
}

/* One-phase commit of a delete hides the cell from later snapshots only. */
static void test_one_phase_delete(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"t", "r1", 2, "c", 1};
  uint64_t c1 = put2pc(f, &c, "x", 1);
  uint64_t start = ts(f);
  pc_mutation_t del = {c, PC_WRITE_DELETE, NULL, 0, 0};
  pc_error_t err;
  pc_lock_info_t lock = {0};
  uint64_t c2 = 0;
  assert_int_equal(
      f->s->ops->commit_one_phase(f->s, &del, 1, start, ts_from_db, f->db, NULL, &c2, &lock, &err),
      PC_OK);
  assert_true(c2 > start);
  char *v;
  size_t n;
  assert_int_equal(get_at(f, &c, c1, &v, &n), PC_OK);
  pc_free(v);
  assert_int_equal(get_at(f, &c, c2, &v, &n), PC_NOT_FOUND);
  /* a one-phase commit that started before c2 conflicts */
  pc_mutation_t put = {c, PC_WRITE_PUT, "y", 1, 0};
  uint64_t c3;
  assert_int_equal(
      f->s->ops->commit_one_phase(f->s, &put, 1, start, ts_from_db, f->db, NULL, &c3, &lock, &err),
      PC_CONFLICT);
  assert_non_null(strstr(err.text, "conflict"));
}

typedef struct raw_seen {
  int data, lock, write, notify, ack, valued_writes;
  uint64_t notify_ts;
} raw_seen_t;

static int count_raw_values(void *ctx, const pc_raw_cell_t *c) {
  raw_seen_t *s = ctx;
  if (c->kind == PC_CELL_WRITE) {
    s->write++;
    if (c->value && c->value_len == 2 && c->value[0] == 'v') s->valued_writes++;
  }
  return 0;
}

static int count_raw(void *ctx, const pc_raw_cell_t *c) {
  raw_seen_t *s = ctx;
  switch (c->kind) {
    case PC_CELL_DATA: s->data++; break;
    case PC_CELL_LOCK: s->lock++; break;
    case PC_CELL_WRITE: s->write++; break;
    case PC_CELL_NOTIFY:
      s->notify++;
      s->notify_ts = c->ts;
      break;
    case PC_CELL_ACK: s->ack++; break;
  }
  return 0;
}

/* The newest small value is kept once, in the cell's meta record; when a
 * newer commit replaces it, it moves into its own commit record. Every
 * version stays readable at its snapshot, and the raw view shows each
 * commit record with its value. */
static void test_versions_after_value_moves(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"t", "moving", 6, "col", 3};
  char vals[6][8];
  uint64_t cts[6];
  for (int i = 0; i < 6; i++) {
    snprintf(vals[i], sizeof vals[i], "v%d", i);
    cts[i] = put2pc(f, &c, vals[i], strlen(vals[i]));
  }
  for (int i = 0; i < 6; i++) {
    char *v;
    size_t n;
    assert_int_equal(get_at(f, &c, cts[i], &v, &n), PC_OK);
    assert_int_equal(n, strlen(vals[i]));
    assert_memory_equal(v, vals[i], n);
    pc_free(v);
    if (i + 1 < 6) { /* just before the next commit: still this version */
      assert_int_equal(get_at(f, &c, cts[i + 1] - 1, &v, &n), PC_OK);
      assert_memory_equal(v, vals[i], n);
      pc_free(v);
    }
  }
  raw_seen_t seen = {0};
  assert_int_equal(pc_db_raw_scan(f->db, "t", "moving", 6, "moving\1", 7, count_raw_values, &seen,
                                  NULL),
                   PC_OK);
  assert_int_equal(seen.write, 6);
  assert_int_equal(seen.valued_writes, 6); /* none shows an empty value */
}

/* The LevelDB of the closed store in f->dir, opened as it is. */
typedef struct raw_ldb {
  leveldb_options_t *o;
  leveldb_readoptions_t *ro;
  leveldb_t *db;
} raw_ldb_t;

static void raw_open(fixture_t *f, raw_ldb_t *r) {
  char path[4200];
  snprintf(path, sizeof path, "%s/store", f->dir);
  r->o = leveldb_options_create();
  r->ro = leveldb_readoptions_create();
  char *e = NULL;
  r->db = leveldb_open(r->o, path, &e);
  if (e) fail_msg("leveldb_open %s: %s", path, e);
}

static void raw_close(raw_ldb_t *r) {
  leveldb_close(r->db);
  leveldb_readoptions_destroy(r->ro);
  leveldb_options_destroy(r->o);
}

/* The keys of key space `space` that r holds. */
static int raw_count(raw_ldb_t *r, char space) {
  leveldb_iterator_t *it = leveldb_create_iterator(r->db, r->ro);
  int n = 0;
  for (leveldb_iter_seek(it, &space, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl;
    if (leveldb_iter_key(it, &kl)[0] != space) break;
    n++;
  }
  leveldb_iter_destroy(it);
  return n;
}

/* The commit records ('w' keys) of the closed store in f->dir, as LevelDB
 * holds them; bare_head, when set, adds a value-less record of cell c's
 * head (the meta record's) as a store of format 3 holds one. */
static int write_records(fixture_t *f, const pc_cell_t *bare_head) {
  raw_ldb_t r;
  raw_open(f, &r);
  int n = raw_count(&r, PC_KS_WRITE);
  char *e = NULL;
  if (bare_head) {
    pc_buf_t k = {0}, v = {0};
    assert_int_equal(pc_key_cell(&k, PC_KS_META, bare_head), 0);
    size_t ml;
    char *mv = leveldb_get(r.db, r.ro, k.p, k.len, &ml, &e);
    assert_null(e);
    assert_non_null(mv);
    pc_meta_t m = {0};
    assert_int_equal(pc_meta_decode(mv, ml, &m), 0);
    leveldb_free(mv);
    assert_true(m.has_head && m.head.has_inline == PC_VALUE_INLINE);
    pc_write_rec_t bare = m.head;
    bare.has_inline = PC_VALUE_IN_HEAD;
    bare.value = NULL;
    bare.vlen = 0;
    k.len = 0;
    assert_int_equal(pc_key_cell_ts(&k, PC_KS_WRITE, bare_head, m.head.commit_ts), 0);
    assert_int_equal(pc_write_encode(&bare, &v), 0);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_put(r.db, wo, k.p, k.len, v.p, v.len, &e);
    assert_null(e);
    leveldb_writeoptions_destroy(wo);
    pc_meta_free(&m);
    pc_buf_free(&k);
    pc_buf_free(&v);
  }
  raw_close(&r);
  return n;
}

/* What a read at `at` returns: "-" for none, else the first 8 bytes. */
static const char *read_at(fixture_t *f, const pc_cell_t *c, uint64_t at, char out[9]) {
  char *v;
  size_t n;
  pc_status_t st = get_at(f, c, at, &v, &n);
  if (st == PC_NOT_FOUND) return "-";
  assert_int_equal(st, PC_OK);
  snprintf(out, 9, "%.*s", (int)(n < 8 ? n : 8), v);
  pc_free(v);
  return out;
}

/* The head's commit record lives in its meta record only (format 4): a
 * cell's commits leave one record per replaced head, with its value (an
 * inline put, a delete, a large put); every version reads back at its
 * snapshot, by a get and by a scan; the raw view shows every commit once;
 * GC at a safe point past the head deletes every record the head
 * replaced, and at one between two commits keeps the version read there. */
static void test_head_record_in_meta_only(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"t", "h", 1, "c", 1}, one = {"t", "one", 3, "c", 1};
  size_t big_n = PC_INLINE_MAX + 10;
  char *big = malloc(big_n);
  memset(big, 'b', big_n);
  uint64_t before = ts(f);
  uint64_t c0 = put2pc(f, &c, "v0", 2);
  uint64_t c1 = write2pc(f, &c, PC_WRITE_DELETE, NULL, 0);
  uint64_t c2 = put2pc(f, &c, big, big_n);
  uint64_t c3 = put2pc(f, &c, "v3", 2);
  put2pc(f, &one, "only", 4);
  free(big);
  char b[9];
  for (int pass = 0; pass < 2; pass++) { /* as written, then read back after a reopen */
    assert_string_equal(read_at(f, &c, before, b), "-");
    assert_string_equal(read_at(f, &c, c0, b), "v0");
    assert_string_equal(read_at(f, &c, c1 - 1, b), "v0");
    assert_string_equal(read_at(f, &c, c1, b), "-");
    assert_string_equal(read_at(f, &c, c2, b), "bbbbbbbb");
    assert_string_equal(read_at(f, &c, c3 - 1, b), "bbbbbbbb");
    assert_string_equal(read_at(f, &c, c3, b), "v3");
    assert_string_equal(read_at(f, &one, before, b), "-"); /* a first head: no seek */
    raw_seen_t seen = {0};
    assert_int_equal(pc_db_raw_scan(f->db, "t", NULL, 0, NULL, 0, count_raw, &seen, NULL), PC_OK);
    assert_int_equal(seen.write, 5); /* four commits of h, one of "one" */
    assert_int_equal(seen.data, 1);
    pc_db_close(f->db);
    assert_int_equal(write_records(f, NULL), 3); /* those of c0, c1 and c2 */
    f->db = tu_open(f->dir, 0);
    f->s = f->db->store;
  }
  pc_error_t err;
  pc_store_gc_stats_t gs;
  assert_int_equal(f->s->ops->gc(f->s, c2 + 1, 0, &gs, &err), PC_OK);
  assert_int_equal(gs.versions, 2); /* c0 and c1; c2 is what snapshots at the safe point read */
  assert_string_equal(read_at(f, &c, c2 + 1, b), "bbbbbbbb");
  assert_string_equal(read_at(f, &c, c3, b), "v3");
  assert_int_equal(f->s->ops->gc(f->s, c3, 0, &gs, &err), PC_OK);
  assert_int_equal(gs.versions, 1); /* c2, with its data cell: the head is the version now */
  assert_int_equal(gs.data, 1);
  assert_string_equal(read_at(f, &c, c3, b), "v3");
  pc_db_close(f->db);
  assert_int_equal(write_records(f, NULL), 0);
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
  assert_string_equal(read_at(f, &c, ts(f), b), "v3");
}

/* A store of format 3 has a value-less commit record of each head beside
 * the meta record. This version reads it as it is, marks the directory
 * format 4, shows the head once in the raw view, rewrites the record with
 * its value when a newer commit replaces the head, and GC keeps a head's
 * record and collects it once replaced. */
static void test_format3_store_reads_the_same(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"t", "old", 3, "c", 1};
  uint64_t c0 = put2pc(f, &c, "v0", 2);
  uint64_t c1 = put2pc(f, &c, "v1", 2);
  pc_db_close(f->db);
  assert_int_equal(write_records(f, &c), 1); /* c0's; the bare record of c1 goes in */
  char path[4200];
  snprintf(path, sizeof path, "%s/FORMAT", f->dir);
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs("percolator-data 3\n", fp);
  fclose(fp);
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
  char line[64] = "";
  fp = fopen(path, "r");
  assert_non_null(fp);
  assert_non_null(fgets(line, sizeof line, fp));
  fclose(fp);
  assert_string_equal(line, "percolator-data 4\n");
  char b[9];
  assert_string_equal(read_at(f, &c, c0, b), "v0");
  assert_string_equal(read_at(f, &c, c1, b), "v1");
  raw_seen_t seen = {0};
  assert_int_equal(pc_db_raw_scan(f->db, "t", NULL, 0, NULL, 0, count_raw_values, &seen, NULL),
                   PC_OK);
  assert_int_equal(seen.write, 2);
  assert_int_equal(seen.valued_writes, 2);
  pc_error_t err;
  pc_store_gc_stats_t gs;
  assert_int_equal(f->s->ops->gc(f->s, c1, 0, &gs, &err), PC_OK);
  assert_int_equal(gs.versions, 1); /* c0's; the head's bare record stays */
  uint64_t c2 = put2pc(f, &c, "v2", 2);
  assert_string_equal(read_at(f, &c, c2 - 1, b), "v1"); /* from the rewritten record */
  assert_string_equal(read_at(f, &c, c2, b), "v2");
  memset(&seen, 0, sizeof seen);
  assert_int_equal(pc_db_raw_scan(f->db, "t", NULL, 0, NULL, 0, count_raw_values, &seen, NULL),
                   PC_OK);
  assert_int_equal(seen.write, 2);
  assert_int_equal(seen.valued_writes, 2);
  assert_int_equal(f->s->ops->gc(f->s, c2, 0, &gs, &err), PC_OK);
  assert_int_equal(gs.versions, 1); /* c1's record, now that c2 is the head */
  pc_db_close(f->db);
  assert_int_equal(write_records(f, NULL), 0);
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
}

/* Committing a put to a column that the store knows a strong observer of
 * writes notify(c, commit_ts) in the same row operation, whoever commits
 * it; the raw view shows every kind. The store's set of observers persists
 * across a reopen and lists what it holds. */
static int count_observers(void *ctx, const pc_store_observer_t *o) {
  (void)o;
  (*(int *)ctx)++;
  return 0;
}

static void test_observed_commit_writes_notify(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"docs", "d1", 2, "content:", 8};
  pc_store_observer_t o = {"content.obs", "docs", "content:", 8, 0}, bad = o;
  pc_error_t err;
  assert_int_equal(f->s->ops->observer_update(f->s, &o, 1, &err), PC_OK);
  assert_int_equal(f->s->ops->observer_update(f->s, &o, 1, &err), PC_OK); /* idempotent */
  bad.name = "no spaces";
  assert_int_equal(f->s->ops->observer_update(f->s, &bad, 1, &err), PC_INVALID);
  int n = 0;
  assert_int_equal(f->s->ops->observer_list(f->s, count_observers, &n, &err), PC_OK);
  assert_int_equal(n, 1);
  size_t big_n = PC_INLINE_MAX + 1;
  char *big = calloc(1, big_n);
  memset(big, 'z', big_n);
  uint64_t commit = put2pc(f, &c, big, big_n);
  raw_seen_t seen = {0};
  assert_int_equal(pc_db_raw_scan(f->db, "docs", NULL, 0, NULL, 0, count_raw, &seen, NULL), PC_OK);
  assert_int_equal(seen.write, 1);
  assert_int_equal(seen.data, 1); /* large value: a data cell */
  assert_int_equal(seen.notify, 1);
  assert_int_equal(seen.notify_ts, commit);
  assert_int_equal(seen.lock, 0);
  /* an uncommitted prewrite shows as a lock */
  uint64_t start = ts(f);
  pc_mutation_t m = {c, PC_WRITE_PUT, "v", 1, 0};
  pc_lock_spec_t spec = {c, start, 3000, f->db->session};
  pc_lock_info_t lock = {0};
  assert_int_equal(f->s->ops->prewrite(f->s, &m, 1, &spec, &lock, NULL), PC_OK);
  memset(&seen, 0, sizeof seen);
  assert_int_equal(pc_db_raw_scan(f->db, "docs", NULL, 0, NULL, 0, count_raw, &seen, NULL), PC_OK);
  assert_int_equal(seen.lock, 1);
  /* another table's range sees none of it */
  memset(&seen, 0, sizeof seen);
  assert_int_equal(pc_db_raw_scan(f->db, "other", NULL, 0, NULL, 0, count_raw, &seen, NULL), PC_OK);
  assert_int_equal(seen.lock + seen.write + seen.data + seen.notify, 0);
  free(big);

  /* reopened, the store still knows its observer: a delete notifies; once
   * the observer is removed, nothing does */
  assert_int_equal(f->s->ops->rollback(f->s, &c, 1, start, &err), PC_OK);
  pc_db_close(f->db);
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
  n = 0;
  assert_int_equal(f->s->ops->observer_list(f->s, count_observers, &n, &err), PC_OK);
  assert_int_equal(n, 1);
  start = ts(f);
  pc_mutation_t del = {c, PC_WRITE_DELETE, NULL, 0, 0};
  spec.start_ts = start;
  assert_int_equal(f->s->ops->prewrite(f->s, &del, 1, &spec, &lock, &err), PC_OK);
  uint64_t dc = ts(f);
  assert_int_equal(f->s->ops->commit(f->s, &c, 1, start, dc, &err), PC_OK);
  memset(&seen, 0, sizeof seen);
  assert_int_equal(pc_db_raw_scan(f->db, "docs", NULL, 0, NULL, 0, count_raw, &seen, NULL), PC_OK);
  assert_int_equal(seen.notify, 2);
  assert_int_equal(seen.notify_ts, commit); /* newest first: the delete's came before it */
  assert_int_equal(f->s->ops->observer_update(f->s, &o, 0, &err), PC_OK);
  assert_int_equal(f->s->ops->observer_update(f->s, &o, 0, &err), PC_OK);
  put2pc(f, &c, "w", 1);
  memset(&seen, 0, sizeof seen);
  assert_int_equal(pc_db_raw_scan(f->db, "docs", NULL, 0, NULL, 0, count_raw, &seen, NULL), PC_OK);
  assert_int_equal(seen.notify, 2);
}

static int count_lock(void *ctx, const pc_lock_info_t *lock) {
  (void)lock;
  (*(int *)ctx)++;
  return 0;
}

static int locks_now(fixture_t *f) {
  int n = 0;
  pc_error_t err;
  assert_int_equal(f->s->ops->scan_locks(f->s, UINT64_MAX, count_lock, &n, &err), PC_OK);
  return n;
}

/* The 'l' keys of a closed store and whether it has the 'L' mark;
 * bogus, when set, adds an 'l' key of a cell that holds no lock and
 * removes the mark, as a crash of an older version could leave them. */
static int saved_locks(fixture_t *f, int *marked, const char *bogus) {
  raw_ldb_t r;
  raw_open(f, &r);
  int n = raw_count(&r, PC_KS_LOCK);
  char *e = NULL;
  size_t vl;
  char *v = leveldb_get(r.db, r.ro, PC_KEY_LOCK_INDEX_SAVED, 1, &vl, &e);
  assert_null(e);
  *marked = v != NULL;
  leveldb_free(v);
  if (bogus) {
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    pc_buf_t k = {0};
    pc_cell_t c = {"t", bogus, strlen(bogus), "a", 1};
    assert_int_equal(pc_key_cell(&k, PC_KS_LOCK, &c), 0);
    leveldb_writebatch_put(b, k.p, k.len, "", 0);
    leveldb_writebatch_delete(b, PC_KEY_LOCK_INDEX_SAVED, 1);
    leveldb_write(r.db, wo, b, &e);
    assert_null(e);
    pc_buf_free(&k);
    leveldb_writebatch_destroy(b);
    leveldb_writeoptions_destroy(wo);
  }
  raw_close(&r);
  return n;
}

/* scan_locks reads the lock index, which lives in memory: a clean close
 * saves it with its mark and the next open reads it back and removes it;
 * a store without the mark (its process died) gets it rebuilt from the
 * meta records, and 'l' keys found without the mark are not trusted. */
static void test_lock_index(void **state) {
  fixture_t *f = *state;
  pc_cell_t c[3] = {{"t", "r1", 2, "a", 1}, {"t", "r1", 2, "b", 1}, {"t", "r2", 2, "a", 1}};
  uint64_t start = ts(f);
  pc_lock_spec_t spec = {c[0], start, 600000, f->db->session};
  pc_lock_info_t lock = {0};
  pc_error_t err;
  for (int i = 0; i < 3; i++) {
    pc_mutation_t m = {c[i], PC_WRITE_PUT, "v", 1, 0};
    assert_int_equal(f->s->ops->prewrite(f->s, &m, 1, &spec, &lock, &err), PC_OK);
  }
  assert_int_equal(locks_now(f), 3);
  assert_int_equal(f->s->ops->commit(f->s, &c[0], 1, start, ts(f), &err), PC_OK);
  assert_int_equal(f->s->ops->rollback(f->s, &c[1], 1, start, &err), PC_OK);
  assert_int_equal(locks_now(f), 1);

  /* a clean close saves the one lock, and the open takes it back */
  pc_db_close(f->db);
  int marked;
  assert_int_equal(saved_locks(f, &marked, NULL), 1);
  assert_true(marked);
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
  assert_int_equal(locks_now(f), 1);

  /* a process that dies with a lock held saves nothing; the next open
   * walks the meta records (and drops the untrusted 'l' key) */
  pc_db_close(f->db);
  assert_int_equal(saved_locks(f, &marked, "bogus"), 1);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    pc_db_t *db = tu_open(f->dir, 0);
    pc_store_t *s = db->store;
    uint64_t t;
    if (pc_db_timestamp(db, 1000, &t, NULL) != PC_OK) _exit(2);
    pc_lock_spec_t sp = {c[1], t, 600000, db->session};
    pc_mutation_t m = {c[1], PC_WRITE_PUT, "w", 1, 0};
    if (s->ops->prewrite(s, &m, 1, &sp, &lock, &err) != PC_OK) _exit(3);
    _exit(0); /* no close */
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(saved_locks(f, &marked, NULL), 0); /* the open removed them */
  assert_false(marked);
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
  assert_int_equal(locks_now(f), 2); /* r2/a of start, r1/b of the dead process */
  assert_int_equal(f->s->ops->commit(f->s, &c[2], 1, start, ts(f), &err), PC_OK);
  assert_int_equal(locks_now(f), 1);
  pc_db_close(f->db);
  assert_int_equal(saved_locks(f, &marked, NULL), 1);
  assert_true(marked);
  f->db = tu_open(f->dir, 0);
  f->s = f->db->store;
  assert_int_equal(locks_now(f), 1);
}

/* Duplicate cells in one request are refused rather than half-applied. */
static void test_duplicate_cells_refused(void **state) {
  fixture_t *f = *state;
  pc_cell_t c = {"t", "r", 1, "c", 1};
  pc_mutation_t m[2] = {{c, PC_WRITE_PUT, "a", 1, 0}, {c, PC_WRITE_PUT, "b", 1, 0}};
  pc_lock_spec_t spec = {c, ts(f), 3000, f->db->session};
  pc_lock_info_t lock = {0};
  pc_error_t err;
  assert_int_equal(f->s->ops->prewrite(f->s, m, 2, &spec, &lock, &err), PC_INVALID);
  char *v;
  size_t n;
  assert_int_equal(get_at(f, &c, ts(f), &v, &n), PC_NOT_FOUND);
  /* also in a large request (a tablet takes them from the network), where the
   * repeat is far from the original */
  enum { BIG = 200 };
  static char rows[BIG][8];
  pc_mutation_t big[BIG];
  for (int i = 0; i < BIG; i++) {
    snprintf(rows[i], sizeof rows[i], "r%03d", i);
    big[i] = (pc_mutation_t){{"t", rows[i], 4, "c", 1}, PC_WRITE_PUT, "a", 1, 0};
  }
  big[BIG - 1].cell = big[7].cell;
  spec.start_ts = ts(f);
  assert_int_equal(f->s->ops->prewrite(f->s, big, BIG, &spec, &lock, &err), PC_INVALID);
  assert_non_null(strstr(err.text, "twice"));
  big[BIG - 1].cell.row = "r999"; /* distinct again: accepted */
  assert_int_equal(f->s->ops->prewrite(f->s, big, BIG, &spec, &lock, &err), PC_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key_order),
      cmocka_unit_test(test_key_timestamps_and_decode),
      cmocka_unit_test(test_key_escape_every_shape),
      cmocka_unit_test(test_meta_roundtrip),
      cmocka_unit_test(test_lock_flags_and_notify_kind),
      cmocka_unit_test(test_meta_forms),
      cmocka_unit_test(test_meta_unknown_form_refused),
      cmocka_unit_test_setup_teardown(test_history_and_large_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_phase_delete, setup, teardown),
      cmocka_unit_test_setup_teardown(test_observed_commit_writes_notify, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lock_index, setup, teardown),
      cmocka_unit_test_setup_teardown(test_duplicate_cells_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_versions_after_value_moves, setup, teardown),
      cmocka_unit_test_setup_teardown(test_head_record_in_meta_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_format3_store_reads_the_same, setup, teardown),
      cmocka_unit_test(test_compression_option),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
