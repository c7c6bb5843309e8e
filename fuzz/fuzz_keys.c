/* fuzz_keys.c — the store's byte layout (core/keys.c) against arbitrary
 * bytes, as a damaged or hostile data directory would hand them over. The
 * first byte picks what the rest is:
 *   0  a meta record: decoding must not crash; what decodes re-encodes to a
 *      record that decodes the same, and the read path's pc_meta_peek agrees
 *      with the write path's pc_meta_decode
 *   1  a commit record: what decodes re-encodes to the same bytes
 *   2  a key: what decodes re-encodes to the same bytes
 *   3  two byte strings: their escapes sort like the strings (I1), and
 *      escaping a pair keeps the tuple order
 *   4  a column: pc_ack_column_split's parts lie inside it and rebuild it */
#include <string.h>

#include "core/keys.h"
#include "fuzz/fuzz.h"

static int sign(int x) { return (x > 0) - (x < 0); }

static void same_write(const pc_write_rec_t *a, const pc_write_rec_t *b) {
  FUZZ_CHECK(a->kind == b->kind && a->start_ts == b->start_ts && a->commit_ts == b->commit_ts);
  FUZZ_CHECK(a->has_inline == b->has_inline && a->vlen == b->vlen && a->first == b->first);
  FUZZ_CHECK(a->vlen == 0 || memcmp(a->value, b->value, a->vlen) == 0);
}

static void same_buf(const pc_buf_t *a, const pc_buf_t *b) {
  FUZZ_CHECK(a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0));
}

static void same_meta(const pc_meta_t *a, const pc_meta_t *b) {
  FUZZ_CHECK(a->has_lock == b->has_lock && a->has_head == b->has_head);
  FUZZ_CHECK(a->latest_any == b->latest_any);
  if (a->has_head) same_write(&a->head, &b->head);
  if (a->has_lock) {
    const pc_lock_info_t *x = &a->lock, *y = &b->lock;
    FUZZ_CHECK(x->start_ts == y->start_ts && x->kind == y->kind && x->ttl_ms == y->ttl_ms);
    FUZZ_CHECK(x->session == y->session && x->observed == y->observed && x->weak == y->weak);
    FUZZ_CHECK((x->has_inline != 0) == (y->has_inline != 0));
    same_buf(&x->ptable, &y->ptable);
    same_buf(&x->prow, &y->prow);
    same_buf(&x->pcol, &y->pcol);
    if (x->has_inline) same_buf(&x->value, &y->value);
  }
}

static void meta_record(const char *p, size_t n) {
  pc_meta_t m = {0};
  if (pc_meta_decode(p, n, &m) == 0) {
    int has_lock, has_head;
    uint64_t lock_start;
    pc_write_rec_t head;
    FUZZ_CHECK(pc_meta_peek(p, n, &has_lock, &lock_start, &has_head, &head) == 0);
    FUZZ_CHECK(has_lock == m.has_lock && has_head == m.has_head);
    if (has_lock) FUZZ_CHECK(lock_start == m.lock.start_ts);
    if (has_head) same_write(&head, &m.head);

    pc_buf_t enc = {0}, enc2 = {0};
    pc_meta_t again = {0}, third = {0};
    FUZZ_CHECK(pc_meta_encode(&m, &enc) == 0);
    FUZZ_CHECK(pc_meta_decode(enc.p, enc.len, &again) == 0);
    same_meta(&m, &again);
    /* the encoder's form is canonical: encoding what it wrote changes nothing */
    FUZZ_CHECK(pc_meta_encode(&again, &enc2) == 0);
    same_buf(&enc, &enc2);
    FUZZ_CHECK(pc_meta_decode(enc2.p, enc2.len, &third) == 0);
    pc_meta_free(&again);
    pc_meta_free(&third);
    pc_buf_free(&enc);
    pc_buf_free(&enc2);
  } else {
    /* whatever peek says of a record decode refuses, it must not read past it */
    int has_lock, has_head;
    uint64_t lock_start;
    pc_write_rec_t head;
    if (pc_meta_peek(p, n, &has_lock, &lock_start, &has_head, &head) == 0 && has_head &&
        head.vlen)
      FUZZ_CHECK(head.value >= p && head.value + head.vlen <= p + n);
  }
  pc_meta_free(&m);
}

static void write_record(const char *p, size_t n) {
  pc_write_rec_t w;
  if (pc_write_decode(p, n, &w) != 0) return;
  if (w.vlen) FUZZ_CHECK(w.value >= p && w.value + w.vlen <= p + n);
  pc_buf_t enc = {0};
  FUZZ_CHECK(pc_write_encode(&w, &enc) == 0);
  FUZZ_CHECK(enc.len == n && memcmp(enc.p, p, n) == 0);
  pc_buf_free(&enc);
}

static void key(const char *p, size_t n) {
  pc_key_decoded_t d = {0};
  if (pc_key_decode(p, n, &d) == 0) {
    pc_buf_t enc = {0};
    FUZZ_CHECK(pc_buf_u8(&enc, (uint8_t)d.space) == 0);
    if (d.space == PC_KS_NOTIFY) {
      FUZZ_CHECK(d.bucket < 65536);
      FUZZ_CHECK(pc_buf_u8(&enc, (uint8_t)(d.bucket >> 8)) == 0);
      FUZZ_CHECK(pc_buf_u8(&enc, (uint8_t)d.bucket) == 0);
    }
    FUZZ_CHECK(pc_key_escape(&enc, d.table.p, d.table.len) == 0);
    FUZZ_CHECK(pc_key_escape(&enc, d.row.p, d.row.len) == 0);
    FUZZ_CHECK(pc_key_escape(&enc, d.col.p, d.col.len) == 0);
    if (d.space != PC_KS_META) FUZZ_CHECK(pc_buf_u64(&enc, ~d.ts) == 0);
    FUZZ_CHECK(enc.len == n && memcmp(enc.p, p, n) == 0);
    pc_buf_free(&enc);
  }
  pc_key_decoded_free(&d);
}

/* Splits p[0..n) at its first byte's value (mod n) into two strings. */
static void escape_order(const char *p, size_t n) {
  if (n == 0) return;
  size_t cut = (unsigned char)p[0] % n;
  const char *a = p + 1, *b = p + 1 + (cut ? cut - 1 : 0);
  size_t al = cut ? cut - 1 : 0, bl = n - 1 - al;
  pc_buf_t ea = {0}, eb = {0};
  FUZZ_CHECK(pc_key_escape(&ea, a, al) == 0 && pc_key_escape(&eb, b, bl) == 0);
  FUZZ_CHECK(sign(pc_bytes_cmp(a, al, b, bl)) == sign(pc_bytes_cmp(ea.p, ea.len, eb.p, eb.len)));
  /* (a, b) against (b, a): the tuple order is a's order against b, then b's against a */
  pc_buf_t ab = {0}, ba = {0};
  FUZZ_CHECK(pc_key_escape(&ab, a, al) == 0 && pc_key_escape(&ab, b, bl) == 0);
  FUZZ_CHECK(pc_key_escape(&ba, b, bl) == 0 && pc_key_escape(&ba, a, al) == 0);
  int want = sign(pc_bytes_cmp(a, al, b, bl));
  if (want == 0) want = sign(pc_bytes_cmp(b, bl, a, al));
  FUZZ_CHECK(sign(pc_bytes_cmp(ab.p, ab.len, ba.p, ba.len)) == want);
  /* and it decodes back, inside a meta key */
  pc_buf_t k = {0};
  pc_key_decoded_t d = {0};
  pc_cell_t c = {"t", a, al, b, bl};
  FUZZ_CHECK(pc_key_cell(&k, PC_KS_META, &c) == 0);
  FUZZ_CHECK(pc_key_decode(k.p, k.len, &d) == 0);
  FUZZ_CHECK(d.row.len == al && (al == 0 || memcmp(d.row.p, a, al) == 0));
  FUZZ_CHECK(d.col.len == bl && (bl == 0 || memcmp(d.col.p, b, bl) == 0));
  pc_key_decoded_free(&d);
  pc_buf_free(&k);
  pc_buf_free(&ea);
  pc_buf_free(&eb);
  pc_buf_free(&ab);
  pc_buf_free(&ba);
}

static void ack_column(const char *p, size_t n) {
  const char *obs, *ucol;
  size_t olen, uclen;
  if (pc_ack_column_split(p, n, &obs, &olen, &ucol, &uclen) != 0) return;
  FUZZ_CHECK(olen > 0 && uclen > 0 && !memchr(obs, '\0', olen));
  FUZZ_CHECK(obs == p + PC_ACK_PREFIX_LEN && ucol == obs + olen + 1 && ucol + uclen == p + n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const char *p = (const char *)data + 1;
  size_t n = size - 1;
  switch (data[0] % 5) {
    case 0: meta_record(p, n); break;
    case 1: write_record(p, n); break;
    case 2: key(p, n); break;
    case 3: escape_order(p, n); break;
    default: ack_column(p, n); break;
  }
  return 0;
}
