/* raft_log.c — the Raft log store of a tablet server (raft_log.h): one
 * LevelDB for the logs, hard states and snapshot descriptors of all the
 * replicas it hosts, and a writer thread that syncs what many groups queued
 * in one write. */
#include "replica/raft_log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "core/failpoint.h"

typedef struct job {
  leveldb_writebatch_t *b;
  void (*done)(void *ctx, pc_status_t st);
  void *ctx;
  struct job *next;
} job_t;

struct pc_raft_log {
  char *dir;
  leveldb_t *db;
  leveldb_options_t *opts;
  leveldb_readoptions_t *ro;
  leveldb_writeoptions_t *wo; /* synced */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job_t *head, *tail;
  int stopping;
  pthread_t writer;
};

static pc_status_t ldb_error(pc_raft_log_t *l, char *msg, const char *what, pc_error_t *err) {
  pc_status_t code = strncmp(msg, "Corruption", 10) == 0 ? PC_CORRUPTION : PC_IO_ERROR;
  if (strstr(msg, "IO error: lock ")) code = PC_BUSY;
  pc_error_set(err, code, "raft log %s: %s: %s", l->dir, what, msg);
  leveldb_free(msg);
  return code;
}

/* ---- keys ---------------------------------------------------------------- */

static int key_group(pc_buf_t *k, char space, const char *group) {
  return pc_buf_u8(k, (uint8_t)space) || pc_buf_str(k, group, strlen(group));
}

static int key_entry(pc_buf_t *k, const char *group, uint64_t index) {
  return key_group(k, 'E', group) || pc_buf_u64(k, index);
}

/* ---- the writer ------------------------------------------------------------ */

static void *writer_main(void *arg) {
  pc_raft_log_t *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->head && !l->stopping) pthread_cond_wait(&l->cv, &l->mu);
    job_t *jobs = l->head;
    l->head = l->tail = NULL;
    if (!jobs && l->stopping) break;
    pthread_mutex_unlock(&l->mu);
    /* everything queued, in one synced write */
    leveldb_writebatch_t *all = leveldb_writebatch_create();
    for (job_t *j = jobs; j; j = j->next) leveldb_writebatch_append(all, j->b);
    char *e = NULL;
    pc_error_t fe;
    if (PC_FAILPOINT("replica.log_write", &fe) != PC_OK) e = strdup(fe.text);
    else leveldb_write(l->db, l->wo, all, &e);
    leveldb_writebatch_destroy(all);
    if (e) {
      /* Entries a follower may already count as stored, a truncation or a
       * snapshot's record may be lost, and libraft's own paths after a
       * failed append are not ones to trust with the data: as with a store
       * that cannot apply a committed entry, the server stops, and comes back
       * (or is rebuilt from the others) from what its log did store. */
      pc_log(PC_LOG_ERROR, "raft log %s: write: %s; the server stops", l->dir, e);
      abort();
    }
    while (jobs) {
      job_t *next = jobs->next;
      leveldb_writebatch_destroy(jobs->b);
      if (jobs->done) jobs->done(jobs->ctx, PC_OK);
      free(jobs);
      jobs = next;
    }
    pthread_mutex_lock(&l->mu);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

void pc_raft_log_submit(pc_raft_log_t *l, leveldb_writebatch_t *b,
                        void (*done)(void *ctx, pc_status_t st), void *ctx) {
  job_t *j = calloc(1, sizeof *j);
  if (!j) {
    pc_log(PC_LOG_ERROR, "raft log %s: out of memory queueing a write; the server stops", l->dir);
    abort();
  }
  j->b = b;
  j->done = done;
  j->ctx = ctx;
  pthread_mutex_lock(&l->mu);
  if (l->tail) l->tail->next = j;
  else l->head = j;
  l->tail = j;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* ---- open and close ----------------------------------------------------- */

pc_raft_log_t *pc_raft_log_open(const char *dir, pc_error_t *err) {
  pc_raft_log_t *l = calloc(1, sizeof *l);
  if (!l || !(l->dir = strdup(dir))) {
    free(l);
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->opts = leveldb_options_create();
  leveldb_options_set_create_if_missing(l->opts, 1);
  leveldb_options_set_write_buffer_size(l->opts, 16u << 20);
  l->ro = leveldb_readoptions_create();
  l->wo = leveldb_writeoptions_create();
  leveldb_writeoptions_set_sync(l->wo, 1);
  char *e = NULL;
  l->db = leveldb_open(l->opts, dir, &e);
  if (e) {
    ldb_error(l, e, "open", err);
    l->db = NULL;
    pc_raft_log_close(l);
    return NULL;
  }
  if (pthread_create(&l->writer, NULL, writer_main, l) != 0) {
    pc_error_set(err, PC_NOMEM, "raft log %s: cannot start its writer thread", dir);
    leveldb_close(l->db);
    l->db = NULL;
    pc_raft_log_close(l);
    return NULL;
  }
  return l;
}

void pc_raft_log_close(pc_raft_log_t *l) {
  if (!l) return;
  if (l->db) {
    pthread_mutex_lock(&l->mu);
    l->stopping = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->writer, NULL);
    leveldb_close(l->db);
  }
  if (l->opts) leveldb_options_destroy(l->opts);
  if (l->ro) leveldb_readoptions_destroy(l->ro);
  if (l->wo) leveldb_writeoptions_destroy(l->wo);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l->dir);
  free(l);
}

/* ---- identity -------------------------------------------------------------- */

pc_status_t pc_raft_log_identity(pc_raft_log_t *l, char *name, size_t cap,
                                 uint64_t *incarnation, int *found, pc_error_t *err) {
  char *e = NULL;
  size_t n = 0;
  char *v = leveldb_get(l->db, l->ro, "I", 1, &n, &e);
  *found = 0;
  if (e) return ldb_error(l, e, "read the server's identity", err);
  if (!v) return PC_OK;
  pc_rd_t r = {v, n, 0, 1};
  size_t nl = 0;
  const char *np = pc_rd_str(&r, &nl);
  *incarnation = pc_rd_u64(&r);
  int ok = r.ok && nl < cap;
  if (ok) {
    memcpy(name, np, nl);
    name[nl] = '\0';
  }
  leveldb_free(v);
  if (!ok) return pc_error_set(err, PC_CORRUPTION, "raft log %s: malformed identity", l->dir);
  *found = 1;
  return PC_OK;
}

pc_status_t pc_raft_log_set_identity(pc_raft_log_t *l, const char *name, uint64_t incarnation,
                                     pc_error_t *err) {
  pc_buf_t v = {0};
  if (pc_buf_str(&v, name, strlen(name)) || pc_buf_u64(&v, incarnation)) {
    pc_buf_free(&v);
    return pc_error_set(err, PC_NOMEM, "out of memory");
  }
  char *e = NULL;
  leveldb_put(l->db, l->wo, "I", 1, v.p, v.len, &e);
  pc_buf_free(&v);
  if (e) return ldb_error(l, e, "write the server's identity", err);
  return PC_OK;
}

/* ---- reading a group ----------------------------------------------------- */

void pc_raft_stored_free(pc_raft_stored_t *s) {
  pc_buf_free(&s->conf);
  pc_buf_free(&s->data);
}

/* The first or last entry index of group (last: the highest). 0: none. */
static pc_status_t entry_bound(pc_raft_log_t *l, const char *group, int last, uint64_t *out,
                               pc_error_t *err) {
  pc_buf_t lo = {0};
  *out = 0;
  if (key_group(&lo, 'E', group)) return pc_error_set(err, PC_NOMEM, "out of memory");
  size_t plen = lo.len;
  leveldb_iterator_t *it = leveldb_create_iterator(l->db, l->ro);
  if (last) {
    pc_buf_t hi = {0};
    if (key_entry(&hi, group, UINT64_MAX)) {
      pc_buf_free(&lo);
      leveldb_iter_destroy(it);
      return pc_error_set(err, PC_NOMEM, "out of memory");
    }
    leveldb_iter_seek(it, hi.p, hi.len);
    if (leveldb_iter_valid(it)) {
      size_t kl;
      const char *k = leveldb_iter_key(it, &kl);
      if (!(kl == hi.len && memcmp(k, hi.p, kl) == 0)) leveldb_iter_prev(it);
    } else {
      leveldb_iter_seek_to_last(it);
    }
    pc_buf_free(&hi);
  } else {
    leveldb_iter_seek(it, lo.p, lo.len);
  }
  if (leveldb_iter_valid(it)) {
    size_t kl;
    const char *k = leveldb_iter_key(it, &kl);
    if (kl == plen + 8 && memcmp(k, lo.p, plen) == 0) {
      pc_rd_t r = {k + plen, 8, 0, 1};
      *out = pc_rd_u64(&r);
    }
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  leveldb_iter_destroy(it);
  pc_buf_free(&lo);
  if (e) return ldb_error(l, e, "read the log's bounds", err);
  return PC_OK;
}

pc_status_t pc_raft_log_state(pc_raft_log_t *l, const char *group, pc_raft_stored_t *out,
                              int *found, pc_error_t *err) {
  memset(out, 0, sizeof *out);
  *found = 0;
  pc_buf_t k = {0};
  char *e = NULL;
  size_t n = 0;
  if (key_group(&k, 'H', group)) return pc_error_set(err, PC_NOMEM, "out of memory");
  char *v = leveldb_get(l->db, l->ro, k.p, k.len, &n, &e);
  pc_status_t st = PC_OK;
  if (e) st = ldb_error(l, e, "read the hard state", err);
  if (st == PC_OK && v) {
    pc_rd_t r = {v, n, 0, 1};
    out->term = pc_rd_u64(&r);
    out->vote = pc_rd_u64(&r);
    if (!r.ok) st = pc_error_set(err, PC_CORRUPTION, "raft log %s: %s: malformed hard state", l->dir, group);
    *found = 1;
  }
  leveldb_free(v);
  v = NULL;
  k.len = 0;
  if (st == PC_OK && key_group(&k, 'S', group)) st = pc_error_set(err, PC_NOMEM, "out of memory");
  if (st == PC_OK) {
    v = leveldb_get(l->db, l->ro, k.p, k.len, &n, &e);
    if (e) st = ldb_error(l, e, "read the snapshot", err);
  }
  if (st == PC_OK && v) {
    pc_rd_t r = {v, n, 0, 1};
    out->snap_index = pc_rd_u64(&r);
    out->snap_term = pc_rd_u64(&r);
    out->conf_index = pc_rd_u64(&r);
    size_t cl = 0, dl = 0;
    const char *c = pc_rd_str(&r, &cl), *d = pc_rd_str(&r, &dl);
    if (!r.ok) st = pc_error_set(err, PC_CORRUPTION, "raft log %s: %s: malformed snapshot", l->dir, group);
    else if (pc_buf_append(&out->conf, c, cl) || pc_buf_append(&out->data, d, dl))
      st = pc_error_set(err, PC_NOMEM, "out of memory");
    out->has_snapshot = 1;
    *found = 1;
  }
  leveldb_free(v);
  pc_buf_free(&k);
  uint64_t first = 0, last = 0;
  if (st == PC_OK) st = entry_bound(l, group, 0, &first, err);
  if (st == PC_OK) st = entry_bound(l, group, 1, &last, err);
  if (st == PC_OK) {
    if (first) *found = 1;
    out->first = first ? first : 1;
    out->last = first ? last : 0;
  }
  if (st != PC_OK) pc_raft_stored_free(out);
  return st;
}

pc_status_t pc_raft_log_entries(pc_raft_log_t *l, const char *group, uint64_t from, uint64_t to,
                                struct raft_entry **out, size_t *n, pc_error_t *err) {
  *out = NULL;
  *n = 0;
  if (from > to) return PC_OK;
  size_t want = (size_t)(to - from + 1);
  struct raft_entry *v = raft_calloc(want, sizeof *v);
  if (!v) return pc_error_set(err, PC_NOMEM, "out of memory");
  pc_buf_t k = {0};
  pc_status_t st = PC_OK;
  leveldb_iterator_t *it = leveldb_create_iterator(l->db, l->ro);
  if (key_entry(&k, group, from)) st = pc_error_set(err, PC_NOMEM, "out of memory");
  size_t plen = k.len - 8, got = 0;
  if (st == PC_OK) leveldb_iter_seek(it, k.p, k.len);
  for (; st == PC_OK && got < want && leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *kk = leveldb_iter_key(it, &kl), *vv = leveldb_iter_value(it, &vl);
    if (kl != plen + 8 || memcmp(kk, k.p, plen) != 0) break;
    pc_rd_t ki = {kk + plen, 8, 0, 1};
    uint64_t idx = pc_rd_u64(&ki);
    pc_rd_t r = {vv, vl, 0, 1};
    uint64_t term = pc_rd_u64(&r);
    uint8_t type = pc_rd_u8(&r);
    size_t dl = 0;
    const char *d = pc_rd_str(&r, &dl);
    if (idx != from + got || !r.ok) {
      st = pc_error_set(err, PC_CORRUPTION, "raft log %s: %s: entry %llu is %s", l->dir, group,
                        (unsigned long long)(from + got), r.ok ? "missing" : "malformed");
      break;
    }
    v[got].term = term;
    v[got].type = type;
    v[got].buf.len = dl;
    v[got].buf.base = raft_malloc(dl ? dl : 1);
    if (!v[got].buf.base) {
      st = pc_error_set(err, PC_NOMEM, "out of memory");
      break;
    }
    memcpy(v[got].buf.base, d, dl);
    got++;
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  leveldb_iter_destroy(it);
  pc_buf_free(&k);
  if (e && st == PC_OK) st = ldb_error(l, e, "read entries", err);
  else if (e) leveldb_free(e);
  if (st == PC_OK && got != want)
    st = pc_error_set(err, PC_CORRUPTION, "raft log %s: %s: entries %llu..%llu are missing",
                      l->dir, group, (unsigned long long)(from + got), (unsigned long long)to);
  if (st != PC_OK) {
    for (size_t i = 0; i < got; i++) raft_free(v[i].buf.base);
    raft_free(v);
    return st;
  }
  *out = v;
  *n = got;
  return PC_OK;
}

pc_status_t pc_raft_log_groups(pc_raft_log_t *l, void (*fn)(void *ctx, const char *group),
                               void *ctx, pc_error_t *err) {
  leveldb_iterator_t *it = leveldb_create_iterator(l->db, l->ro);
  char prev[PC_RAFT_GROUP_MAX + 1] = "";
  static const char spaces[] = {'E', 'H', 'S'};
  for (size_t s = 0; s < sizeof spaces; s++) {
    for (leveldb_iter_seek(it, &spaces[s], 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
      size_t kl;
      const char *k = leveldb_iter_key(it, &kl);
      if (kl < 5 || k[0] != spaces[s]) break;
      pc_rd_t r = {k + 1, kl - 1, 0, 1};
      size_t gl = 0;
      const char *g = pc_rd_str(&r, &gl);
      if (!r.ok || gl == 0 || gl > PC_RAFT_GROUP_MAX) continue;
      char name[PC_RAFT_GROUP_MAX + 1];
      memcpy(name, g, gl);
      name[gl] = '\0';
      if (strcmp(name, prev) == 0) continue;
      snprintf(prev, sizeof prev, "%s", name);
      fn(ctx, name);
    }
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  leveldb_iter_destroy(it);
  if (e) return ldb_error(l, e, "list the groups", err);
  return PC_OK;
}

/* ---- writing ------------------------------------------------------------ */

int pc_raft_log_put_hard(leveldb_writebatch_t *b, const char *group, uint64_t term,
                         uint64_t vote) {
  char kbuf[96], vbuf[16];
  pc_buf_t k = PC_BUF_ON(kbuf), v = PC_BUF_ON(vbuf);
  int rc = key_group(&k, 'H', group) || pc_buf_u64(&v, term) || pc_buf_u64(&v, vote);
  if (!rc) leveldb_writebatch_put(b, k.p, k.len, v.p, v.len);
  pc_buf_free(&k);
  pc_buf_free(&v);
  return rc ? -1 : 0;
}

pc_status_t pc_raft_log_set_hard(pc_raft_log_t *l, const char *group, uint64_t term,
                                 uint64_t vote, pc_error_t *err) {
  pc_status_t st = PC_FAILPOINT("replica.hard_state_write", err);
  if (st != PC_OK) return st;
  leveldb_writebatch_t *b = leveldb_writebatch_create();
  if (pc_raft_log_put_hard(b, group, term, vote)) st = pc_error_set(err, PC_NOMEM, "out of memory");
  char *e = NULL;
  if (st == PC_OK) leveldb_write(l->db, l->wo, b, &e);
  leveldb_writebatch_destroy(b);
  if (e) return ldb_error(l, e, "write the hard state", err);
  return st;
}

int pc_raft_log_put_entry(leveldb_writebatch_t *b, const char *group, uint64_t index,
                          const struct raft_entry *ent) {
  char kbuf[96];
  pc_buf_t k = PC_BUF_ON(kbuf), v = {0};
  int rc = key_entry(&k, group, index) || pc_buf_u64(&v, ent->term) ||
           pc_buf_u8(&v, (uint8_t)ent->type) || pc_buf_str(&v, ent->buf.base, ent->buf.len);
  if (!rc) leveldb_writebatch_put(b, k.p, k.len, v.p, v.len);
  pc_buf_free(&k);
  pc_buf_free(&v);
  return rc ? -1 : 0;
}

void pc_raft_log_del_entries(leveldb_writebatch_t *b, const char *group, uint64_t from,
                             uint64_t to) {
  char kbuf[96];
  for (uint64_t i = from; i <= to && i != 0; i++) {
    pc_buf_t k = PC_BUF_ON(kbuf);
    if (key_entry(&k, group, i) == 0) leveldb_writebatch_delete(b, k.p, k.len);
    pc_buf_free(&k);
    if (i == UINT64_MAX) break;
  }
}

int pc_raft_log_put_snapshot(leveldb_writebatch_t *b, const char *group, uint64_t index,
                             uint64_t term, uint64_t conf_index, const pc_buf_t *conf,
                             const void *data, size_t dlen) {
  char kbuf[96];
  pc_buf_t k = PC_BUF_ON(kbuf), v = {0};
  int rc = key_group(&k, 'S', group) || pc_buf_u64(&v, index) || pc_buf_u64(&v, term) ||
           pc_buf_u64(&v, conf_index) || pc_buf_str(&v, conf->p, conf->len) ||
           pc_buf_str(&v, data, dlen);
  if (!rc) leveldb_writebatch_put(b, k.p, k.len, v.p, v.len);
  pc_buf_free(&k);
  pc_buf_free(&v);
  return rc ? -1 : 0;
}

pc_status_t pc_raft_log_write(pc_raft_log_t *l, leveldb_writebatch_t *b, pc_error_t *err) {
  char *e = NULL;
  leveldb_write(l->db, l->wo, b, &e);
  if (e) return ldb_error(l, e, "write", err);
  return PC_OK;
}

/* ---- configurations --------------------------------------------------------- */

int pc_raft_conf_encode(const struct raft_configuration *c, pc_buf_t *out) {
  if (pc_buf_u32(out, c->n)) return -1;
  for (unsigned i = 0; i < c->n; i++) {
    const struct raft_server *s = &c->servers[i];
    if (pc_buf_u64(out, s->id) || pc_buf_str(out, s->address, strlen(s->address)) ||
        pc_buf_u8(out, (uint8_t)s->role))
      return -1;
  }
  return 0;
}

int pc_raft_conf_decode(const char *p, size_t len, struct raft_configuration *c) {
  pc_rd_t r = {p, len, 0, 1};
  uint32_t n = pc_rd_u32(&r);
  if (!r.ok || n > 1024) return -1;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t id = pc_rd_u64(&r);
    size_t al = 0;
    const char *a = pc_rd_str(&r, &al);
    uint8_t role = pc_rd_u8(&r);
    if (!r.ok || al == 0 || al > 255 || memchr(a, '\0', al) || role > RAFT_SPARE) return -1;
    char addr[256];
    memcpy(addr, a, al);
    addr[al] = '\0';
    if (raft_configuration_add(c, id, addr, role) != 0) return -1;
  }
  return r.pos == len ? 0 : -1;
}
