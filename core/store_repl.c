/* store_repl.c — the embedded store's side of a replicated tablet
 * (store_repl.h): a row operation's batch turned into a log command and
 * back, the command applied with the index of its log entry, the store made
 * durable before its log is cut, and its contents streamed to a replica
 * being rebuilt and loaded there.
 *
 * A command is
 *   u8 1 (its format)  str locks  then, to its end, pairs of
 *   u8 'P' str key str value  |  u8 'D' str key
 * where locks is the row operation's list of lock index changes
 * (store_local.h's local_put_meta) and the pairs are its batch, in order. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "core/store_local.h"

#define CMD_FORMAT 1

typedef struct encode_ctx {
  pc_buf_t *out;
  int oom;
} encode_ctx_t;

static void encode_put(void *ctx, const char *k, size_t kl, const char *v, size_t vl) {
  encode_ctx_t *e = ctx;
  if (!e->oom && (pc_buf_u8(e->out, 'P') || pc_buf_str(e->out, k, kl) || pc_buf_str(e->out, v, vl)))
    e->oom = 1;
}

static void encode_del(void *ctx, const char *k, size_t kl) {
  encode_ctx_t *e = ctx;
  if (!e->oom && (pc_buf_u8(e->out, 'D') || pc_buf_str(e->out, k, kl))) e->oom = 1;
}

pc_status_t local_replicate(local_t *s, leveldb_writebatch_t *b, const pc_buf_t *locks,
                            pc_error_t *err) {
  char stack[4096];
  pc_buf_t cmd = PC_BUF_ON(stack);
  encode_ctx_t e = {&cmd, 0};
  if (pc_buf_u8(&cmd, CMD_FORMAT) || pc_buf_str(&cmd, locks ? locks->p : "", locks ? locks->len : 0))
    e.oom = 1;
  if (!e.oom) leveldb_writebatch_iterate(b, &e, encode_put, encode_del);
  pc_status_t st;
  if (e.oom) st = local_nomem(err);
  else st = s->replicate(s->replicate_ctx, cmd.p, cmd.len, err);
  pc_buf_free(&cmd);
  return st;
}

void pc_local_store_set_replicator(pc_store_t *base, pc_local_replicate_fn fn, void *ctx) {
  local_t *s = (local_t *)base;
  s->replicate_ctx = ctx;
  atomic_store_explicit(&s->replicate, fn, memory_order_release);
}

uint64_t pc_local_store_applied(pc_store_t *base) {
  return atomic_load(&((local_t *)base)->applied);
}

pc_status_t local_applied_load(local_t *s, pc_error_t *err) {
  char *e = NULL;
  size_t n = 0;
  char *v = leveldb_get(s->db, s->ropts, PC_KEY_APPLIED, 1, &n, &e);
  if (e) return local_ldb_error(s, e, "read the applied log index", err);
  if (!v) return PC_OK;
  pc_rd_t r = {v, n, 0, 1};
  uint64_t applied = pc_rd_u64(&r);
  int ok = r.ok && r.pos == n;
  leveldb_free(v);
  if (!ok) return pc_error_set(err, PC_CORRUPTION, "store %s: malformed applied log index", s->path);
  atomic_store(&s->applied, applied);
  return PC_OK;
}

/* Adds the 'R' key of index to b. */
static int put_applied(leveldb_writebatch_t *b, uint64_t index) {
  char v[16];
  pc_buf_t vb = PC_BUF_ON(v);
  int rc = pc_buf_u64(&vb, index);
  if (!rc) leveldb_writebatch_put(b, PC_KEY_APPLIED, 1, vb.p, vb.len);
  pc_buf_free(&vb);
  return rc ? -1 : 0;
}

pc_status_t pc_local_store_apply(pc_store_t *base, uint64_t index, const char *cmd, size_t len,
                                 pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (index <= atomic_load(&s->applied)) return PC_OK; /* replayed after a restart */
  pc_rd_t r = {cmd, len, 0, 1};
  uint8_t format = pc_rd_u8(&r);
  size_t ll = 0;
  const char *lp = pc_rd_str(&r, &ll);
  if (!r.ok || format != CMD_FORMAT)
    return pc_error_set(err, PC_CORRUPTION, "store %s: log entry %llu is not a command of format %d",
                        s->path, (unsigned long long)index, CMD_FORMAT);
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  while (r.ok && r.pos < r.len) {
    uint8_t op = pc_rd_u8(&r);
    size_t kl = 0, vl = 0;
    const char *k = pc_rd_str(&r, &kl), *v = NULL;
    if (op == 'P') v = pc_rd_str(&r, &vl);
    else if (op != 'D') r.ok = 0;
    if (!r.ok) break;
    if (op == 'P') leveldb_writebatch_put(b, k, kl, v, vl);
    else leveldb_writebatch_delete(b, k, kl);
  }
  pc_status_t st = PC_OK;
  if (!r.ok)
    st = pc_error_set(err, PC_CORRUPTION, "store %s: log entry %llu: malformed command", s->path,
                      (unsigned long long)index);
  else if (put_applied(b, index))
    st = local_nomem(err);
  if (st == PC_OK) {
    /* the lock index changes, as local_put_meta recorded them on the leader */
    const pc_buf_t locks = {(char *)lp, ll, ll, 0};
    st = local_write(s, b, ll ? &locks : NULL, s->gc_wopts, 1, err);
  }
  leveldb_writebatch_destroy(b);
  if (st == PC_OK) atomic_store(&s->applied, index);
  return st;
}

pc_status_t pc_local_store_set_applied(pc_store_t *base, uint64_t index, pc_error_t *err) {
  local_t *s = (local_t *)base;
  if (index <= atomic_load(&s->applied)) return PC_OK;
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  pc_status_t st = put_applied(b, index) ? local_nomem(err)
                                          : local_write(s, b, NULL, s->sync_wopts, 1, err);
  leveldb_writebatch_destroy(b);
  if (st == PC_OK) atomic_store(&s->applied, index);
  return st;
}

pc_status_t pc_local_store_flush(pc_store_t *base, pc_error_t *err) {
  local_t *s = (local_t *)base;
  /* LevelDB's CompactRange writes the memtable to a table file (synced, with
   * its manifest) before it compacts the range, here the one key 'R': so
   * every write before the call is on disk when it returns, the ones of
   * earlier memtables having been so since they were written out. */
  leveldb_compact_range(s->db, PC_KEY_APPLIED, 1, PC_KEY_APPLIED, 1);
  /* and one synced write, for a store whose memtable was empty */
  char *e = NULL;
  uint64_t applied = atomic_load(&s->applied);
  char v[16];
  pc_buf_t vb = PC_BUF_ON(v);
  if (applied == 0) return PC_OK;
  if (pc_buf_u64(&vb, applied)) return local_nomem(err);
  leveldb_put(s->db, s->sync_wopts, PC_KEY_APPLIED, 1, vb.p, vb.len, &e);
  pc_buf_free(&vb);
  if (e) return local_ldb_error(s, e, "flush", err);
  return PC_OK;
}

/* ---- streams ------------------------------------------------------------- */

struct pc_local_stream {
  local_t *s;
  const leveldb_snapshot_t *snap;
  leveldb_readoptions_t *ro;
  leveldb_iterator_t *it;
};

/* Keys only this process uses: the lock index saved at a clean close. */
static int local_only(const char *k, size_t kl) {
  return kl >= 1 && (k[0] == PC_KS_LOCK || (kl == 1 && k[0] == PC_KEY_LOCK_INDEX_SAVED[0]));
}

pc_local_stream_t *pc_local_stream_open(pc_store_t *base, uint64_t *applied, pc_error_t *err) {
  local_t *s = (local_t *)base;
  pc_local_stream_t *st = calloc(1, sizeof *st);
  if (!st) {
    local_nomem(err);
    return NULL;
  }
  st->s = s;
  st->snap = leveldb_create_snapshot(s->db);
  st->ro = leveldb_readoptions_create();
  leveldb_readoptions_set_snapshot(st->ro, st->snap);
  leveldb_readoptions_set_fill_cache(st->ro, 0); /* a pass over everything */
  *applied = 0;
  char *e = NULL;
  size_t n = 0;
  char *v = leveldb_get(s->db, st->ro, PC_KEY_APPLIED, 1, &n, &e);
  if (!e && v) {
    pc_rd_t r = {v, n, 0, 1};
    *applied = pc_rd_u64(&r);
  }
  leveldb_free(v);
  if (e) {
    local_ldb_error(s, e, "stream", err);
    pc_local_stream_close(st);
    return NULL;
  }
  st->it = leveldb_create_iterator(s->db, st->ro);
  leveldb_iter_seek_to_first(st->it);
  return st;
}

pc_status_t pc_local_stream_next(pc_local_stream_t *st, size_t max_bytes, pc_buf_t *out,
                                 int *done, pc_error_t *err) {
  size_t start = out->len;
  *done = 0;
  for (; leveldb_iter_valid(st->it); leveldb_iter_next(st->it)) {
    if (out->len > start && out->len - start >= max_bytes) return PC_OK;
    size_t kl, vl;
    const char *k = leveldb_iter_key(st->it, &kl);
    if (local_only(k, kl)) continue;
    const char *v = leveldb_iter_value(st->it, &vl);
    if (pc_buf_str(out, k, kl) || pc_buf_str(out, v, vl)) return local_nomem(err);
  }
  char *e = NULL;
  leveldb_iter_get_error(st->it, &e);
  if (e) return local_ldb_error(st->s, e, "stream", err);
  *done = 1;
  return PC_OK;
}

void pc_local_stream_close(pc_local_stream_t *st) {
  if (!st) return;
  if (st->it) leveldb_iter_destroy(st->it);
  if (st->ro) leveldb_readoptions_destroy(st->ro);
  if (st->snap) leveldb_release_snapshot(st->s->db, st->snap);
  free(st);
}

/* ---- loading a stream ---------------------------------------------------- */

struct pc_local_loader {
  char *path;
  leveldb_options_t *opts;
  leveldb_writeoptions_t *wo;
  leveldb_t *db;
  uint64_t bytes;
};

static pc_status_t loader_error(pc_local_loader_t *l, char *msg, const char *what,
                                pc_error_t *err) {
  pc_status_t code = strncmp(msg, "Corruption", 10) == 0 ? PC_CORRUPTION : PC_IO_ERROR;
  pc_error_set(err, code, "store %s: %s: %s", l->path, what, msg);
  leveldb_free(msg);
  return code;
}

pc_local_loader_t *pc_local_loader_create(const char *path, pc_error_t *err) {
  pc_local_loader_t *l = calloc(1, sizeof *l);
  if (!l || !(l->path = strdup(path))) {
    free(l);
    local_nomem(err);
    return NULL;
  }
  l->opts = leveldb_options_create();
  leveldb_options_set_create_if_missing(l->opts, 1);
  leveldb_options_set_error_if_exists(l->opts, 1);
  leveldb_options_set_write_buffer_size(l->opts, 64u << 20);
  leveldb_options_set_max_file_size(l->opts, 8u << 20);
  l->wo = leveldb_writeoptions_create();
  char *e = NULL;
  l->db = leveldb_open(l->opts, path, &e);
  if (e) {
    loader_error(l, e, "create", err);
    pc_local_loader_abort(l);
    return NULL;
  }
  (void)chmod(path, 0700);
  return l;
}

pc_status_t pc_local_loader_put(pc_local_loader_t *l, const char *chunk, size_t len,
                                pc_error_t *err) {
  pc_rd_t r = {chunk, len, 0, 1};
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  uint64_t bytes = 0;
  while (r.ok && r.pos < r.len) {
    size_t kl = 0, vl = 0;
    const char *k = pc_rd_str(&r, &kl);
    const char *v = pc_rd_str(&r, &vl);
    if (!r.ok) break;
    if (kl == 0 || local_only(k, kl)) { /* never streamed: a damaged or forged chunk */
      r.ok = 0;
      break;
    }
    leveldb_writebatch_put(b, k, kl, v, vl);
    bytes += kl + vl;
  }
  pc_status_t st = PC_OK;
  if (!r.ok) {
    st = pc_error_set(err, PC_CORRUPTION, "store %s: a streamed chunk is malformed", l->path);
  } else {
    char *e = NULL;
    leveldb_write(l->db, l->wo, b, &e);
    if (e) st = loader_error(l, e, "write a streamed chunk", err);
    else l->bytes += bytes;
  }
  leveldb_writebatch_destroy(b);
  return st;
}

uint64_t pc_local_loader_bytes(const pc_local_loader_t *l) { return l->bytes; }

pc_status_t pc_local_loader_finish(pc_local_loader_t *l, pc_error_t *err) {
  pc_status_t st = PC_OK;
  if (l->db) {
    /* the memtable to a synced table file, as pc_local_store_flush does */
    leveldb_compact_range(l->db, PC_KEY_APPLIED, 1, PC_KEY_APPLIED, 1);
    leveldb_writeoptions_t *wo = leveldb_writeoptions_create();
    leveldb_writeoptions_set_sync(wo, 1);
    char *e = NULL;
    leveldb_delete(l->db, wo, PC_KEY_LOCK_INDEX_SAVED, 1, &e); /* a synced write */
    leveldb_writeoptions_destroy(wo);
    if (e) st = loader_error(l, e, "finish", err);
  }
  pc_local_loader_abort(l);
  return st;
}

void pc_local_loader_abort(pc_local_loader_t *l) {
  if (!l) return;
  if (l->db) leveldb_close(l->db);
  if (l->opts) leveldb_options_destroy(l->opts);
  if (l->wo) leveldb_writeoptions_destroy(l->wo);
  free(l->path);
  free(l);
}
