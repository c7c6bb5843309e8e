/* store_observers.c — the observers a store knows (store.h's
 * observer_update): copies of the registrations of observers, which
 * core/observed.c gives every store, persisted under 'o' NAME and held in
 * memory. Commits read them (store_txn.c): a put or delete of a column that
 * a strong observer in the set observes writes its strong notification in
 * the batch of its commit record. Because the store decides when it applies
 * the commit, a commit the store applies after an update returned writes
 * the notification, whichever client commits and whenever it opened.
 *
 * Deletions of notifications read them too: a cell's notifications go only
 * for a caller that accounts for every observer of its column in the set
 * (local_observers_cover), so the registered observers decide what goes,
 * whichever worker asks.
 *
 * The set in memory is immutable, replaced whole by an update and read by
 * commits without a lock. A replaced set is kept until the store closes
 * (registrations are rare), so that a commit never reads a freed one.
 * Updates are serialised by obs_mu. A deletion holds the read side of
 * obs_rw from its check to the write of its batch, and an update installs
 * its set under the write side: an update returns only once no deletion
 * that checked the set before it is still writing, so from then on every
 * deletion accounts for the new observer. Commits need no such wait: one
 * that read the set before an update took its commit_ts before the update
 * returned, and the backfill's snapshots, taken after, see it
 * (core/observed.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <percolator/observer.h>

#include "base/error.h"
#include "base/log.h"
#include "core/store_local.h"

typedef struct obs_entry {
  char name[PC_MAX_OBSERVER_NAME + 1];
  char table[PC_MAX_TABLE + 1];
  char *col;
  size_t clen;
  int kind;
} obs_entry_t;

/* Sorted by (table, column, name); each name once. */
struct local_observers {
  obs_entry_t *v;
  size_t n;
  int strong; /* some entry is strong */
  struct local_observers *retired; /* the sets replaced before this one */
};

static void set_free(local_observers_t *o) {
  while (o) {
    local_observers_t *next = o->retired;
    for (size_t i = 0; i < o->n; i++) free(o->v[i].col);
    free(o->v);
    free(o);
    o = next;
  }
}

static int entry_cmp(const char *table, const char *col, size_t clen, const obs_entry_t *e) {
  int c = strcmp(table, e->table);
  return c ? c : pc_bytes_cmp(col, clen, e->col, e->clen);
}

static int entry_qcmp(const void *a, const void *b) {
  const obs_entry_t *x = a, *y = b;
  int c = entry_cmp(x->table, x->col, x->clen, y);
  return c ? c : strcmp(x->name, y->name);
}

/* The first entry of (table, col) in o, or o->n. */
static size_t first_of(const local_observers_t *o, const char *table, const char *col,
                       size_t clen) {
  size_t lo = 0, hi = o->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (entry_cmp(table, col, clen, &o->v[mid]) > 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

int local_strongly_observed(local_t *s, const pc_cell_t *c) {
  const local_observers_t *o = atomic_load_explicit(&s->obs, memory_order_acquire);
  if (!o || !o->strong) return 0;
  for (size_t i = first_of(o, c->table, c->col, c->clen);
       i < o->n && entry_cmp(c->table, c->col, c->clen, &o->v[i]) == 0; i++)
    if (o->v[i].kind == PC_OBSERVER_STRONG) return 1;
  return 0;
}

/* Fills e from a record; -1 out of memory. */
static int entry_set(obs_entry_t *e, const char *name, size_t nlen, int kind, const char *table,
                     const char *col, size_t clen) {
  memcpy(e->name, name, nlen);
  e->name[nlen] = '\0';
  snprintf(e->table, sizeof e->table, "%s", table);
  e->kind = kind;
  e->clen = clen;
  e->col = malloc(clen);
  if (!e->col) return -1;
  memcpy(e->col, col, clen);
  return 0;
}

/* A new set: cur without the entry named name, plus add (NULL: none).
 * NULL when memory runs out. */
static local_observers_t *set_with(const local_observers_t *cur, const char *name,
                                   const pc_store_observer_t *add) {
  local_observers_t *o = calloc(1, sizeof *o);
  size_t cap = (cur ? cur->n : 0) + 1;
  if (!o || !(o->v = calloc(cap, sizeof *o->v))) {
    free(o);
    return NULL;
  }
  int bad = 0;
  for (size_t i = 0; cur && i < cur->n && !bad; i++) {
    const obs_entry_t *e = &cur->v[i];
    if (strcmp(e->name, name) == 0) continue;
    bad = entry_set(&o->v[o->n], e->name, strlen(e->name), e->kind, e->table, e->col, e->clen);
    if (!bad) o->n++;
  }
  if (!bad && add) {
    bad = entry_set(&o->v[o->n], add->name, strlen(add->name), add->kind, add->table, add->col,
                    add->clen);
    if (!bad) o->n++;
  }
  if (bad) {
    set_free(o);
    return NULL;
  }
  if (o->n > 1) qsort(o->v, o->n, sizeof *o->v, entry_qcmp);
  for (size_t i = 0; i < o->n; i++) o->strong |= o->v[i].kind == PC_OBSERVER_STRONG;
  return o;
}

/* The entry named name in o, or NULL. */
static const obs_entry_t *find_name(const local_observers_t *o, const char *name) {
  for (size_t i = 0; o && i < o->n; i++)
    if (strcmp(o->v[i].name, name) == 0) return &o->v[i];
  return NULL;
}

/* Makes o the set; the one it replaces is kept until close. obs_swap
 * orders the two writers of s->obs: an update (install) and, on a
 * replicated tablet, the application of a logged update
 * (local_observers_reload). */
static void swap_in(local_t *s, local_observers_t *o) {
  pthread_mutex_lock(&s->obs_swap);
  o->retired = atomic_load_explicit(&s->obs, memory_order_relaxed);
  atomic_store_explicit(&s->obs, o, memory_order_release);
  pthread_mutex_unlock(&s->obs_swap);
}

/* Installs o as the set (obs_mu held) once no deletion that checked the set
 * before is still writing (the write side of obs_rw). */
static void install(local_t *s, local_observers_t *o) {
  pthread_rwlock_wrlock(&s->obs_rw);
  swap_in(s, o);
  pthread_rwlock_unlock(&s->obs_rw);
}

/* Whether name is one of the NUL-terminated names of list[0..len). */
static int listed(const char *list, size_t len, const char *name) {
  size_t nl = strlen(name), i = 0;
  while (i < len) {
    const char *end = memchr(list + i, '\0', len - i);
    size_t l = end ? (size_t)(end - (list + i)) : len - i;
    if (l == nl && memcmp(list + i, name, nl) == 0) return 1;
    i += l + 1;
  }
  return 0;
}

void local_observers_hold(local_t *s) { pthread_rwlock_rdlock(&s->obs_rw); }
void local_observers_release(local_t *s) { pthread_rwlock_unlock(&s->obs_rw); }

int local_observers_cover(local_t *s, pc_notify_clear_t *clear) {
  const local_observers_t *o = atomic_load_explicit(&s->obs, memory_order_acquire);
  const pc_cell_t *c = &clear->cell;
  for (size_t i = o ? first_of(o, c->table, c->col, c->clen) : 0;
       o && i < o->n && entry_cmp(c->table, c->col, c->clen, &o->v[i]) == 0; i++)
    if (!listed(clear->observers, clear->observers ? clear->olen : 0, o->v[i].name)) {
      snprintf(clear->missing, sizeof clear->missing, "%s", o->v[i].name);
      return 0;
    }
  return 1;
}

static pc_status_t check_observer(const pc_store_observer_t *o, int add, pc_error_t *err) {
  if (!o || !o->name || !pc_obs_name_ok(o->name, strlen(o->name)))
    return pc_error_set(err, PC_INVALID, "observer update: the name is not 1..%d characters of "
                                         "[A-Za-z0-9_.-]",
                        PC_MAX_OBSERVER_NAME);
  if (!add) return PC_OK;
  pc_buf_t rec = {0};
  pc_obs_record_t r;
  int bad = !o->table || !o->col || strlen(o->table) > PC_MAX_TABLE ||
            pc_obs_record_encode(&rec, o->kind, o->table, o->col, o->clen) != 0 ||
            pc_obs_record_decode(rec.p, rec.len, &r) != 0;
  pc_buf_free(&rec);
  if (bad)
    return pc_error_set(err, PC_INVALID,
                        "observer update: observer '%s' names no valid table, column and kind",
                        o->name);
  return PC_OK;
}

pc_status_t local_observer_update(pc_store_t *base, const pc_store_observer_t *o, int add,
                                  pc_error_t *err) {
  local_t *s = (local_t *)base;
  pc_status_t st = check_observer(o, add, err);
  if (st != PC_OK) return st;
  pc_buf_t key = {0}, val = {0};
  if (pc_buf_u8(&key, PC_KS_OBSERVER) || pc_buf_append(&key, o->name, strlen(o->name)) ||
      (add && pc_obs_record_encode(&val, o->kind, o->table, o->col, o->clen))) {
    pc_buf_free(&key);
    pc_buf_free(&val);
    return local_nomem(err);
  }
  pthread_mutex_lock(&s->obs_mu);
  const local_observers_t *cur = atomic_load_explicit(&s->obs, memory_order_relaxed);
  const obs_entry_t *had = find_name(cur, o->name);
  int same = add ? had && had->kind == o->kind && strcmp(had->table, o->table) == 0 &&
                       pc_bytes_cmp(had->col, had->clen, o->col, o->clen) == 0
                 : !had;
  if (!same) {
    local_observers_t *next = set_with(cur, o->name, add ? o : NULL);
    if (!next) {
      st = local_nomem(err);
    } else {
      /* durable before any commit relies on it */
      leveldb_writebatch_t *b = leveldb_writebatch_create();
      if (add) leveldb_writebatch_put(b, key.p, key.len, val.p, val.len);
      else leveldb_writebatch_delete(b, key.p, key.len);
      st = local_apply(s, b, NULL, s->wopts, err);
      leveldb_writebatch_destroy(b);
      if (st == PC_OK) install(s, next);
      else set_free(next);
    }
  }
  pthread_mutex_unlock(&s->obs_mu);
  pc_buf_free(&key);
  pc_buf_free(&val);
  return st;
}

pc_status_t local_observer_list(pc_store_t *base, pc_store_observer_fn fn, void *ctx,
                                pc_error_t *err) {
  (void)err;
  local_t *s = (local_t *)base;
  const local_observers_t *o = atomic_load_explicit(&s->obs, memory_order_acquire);
  for (size_t i = 0; o && i < o->n; i++) {
    const obs_entry_t *e = &o->v[i];
    pc_store_observer_t so = {e->name, e->table, e->col, e->clen, e->kind};
    if (fn(ctx, &so)) break;
  }
  return PC_OK;
}

/* The set the 'o' keys hold now, into *out. */
static pc_status_t read_set(local_t *s, local_observers_t **out, pc_error_t *err) {
  local_observers_t *o = calloc(1, sizeof *o);
  if (!o) return local_nomem(err);
  size_t cap = 0;
  pc_status_t st = PC_OK;
  leveldb_iterator_t *it = leveldb_create_iterator(s->db, s->ropts);
  const char space = PC_KS_OBSERVER;
  for (leveldb_iter_seek(it, &space, 1); leveldb_iter_valid(it); leveldb_iter_next(it)) {
    size_t kl, vl;
    const char *k = leveldb_iter_key(it, &kl), *v = leveldb_iter_value(it, &vl);
    if (kl < 1 || k[0] != PC_KS_OBSERVER) break;
    pc_obs_record_t r;
    if (!pc_obs_name_ok(k + 1, kl - 1) || pc_obs_record_decode(v, vl, &r) != 0) {
      /* written only by observer_update, which checks it: a damaged key */
      pc_log(PC_LOG_WARN, "store %s: malformed observer record '%.*s' ignored", s->path,
             (int)(kl - 1 > 80 ? 80 : kl - 1), k + 1);
      continue;
    }
    if (o->n == cap) {
      size_t c2 = cap ? cap * 2 : 8;
      obs_entry_t *nv = realloc(o->v, c2 * sizeof *nv);
      if (!nv) {
        st = local_nomem(err);
        break;
      }
      o->v = nv;
      cap = c2;
    }
    if (entry_set(&o->v[o->n], k + 1, kl - 1, r.kind, r.table, r.col, r.clen) != 0) {
      st = local_nomem(err);
      break;
    }
    o->strong |= r.kind == PC_OBSERVER_STRONG;
    o->n++;
  }
  char *e = NULL;
  leveldb_iter_get_error(it, &e);
  if (e && st == PC_OK) st = local_ldb_error(s, e, "read the observers", err);
  else if (e) leveldb_free(e);
  leveldb_iter_destroy(it);
  if (st != PC_OK) {
    set_free(o);
    return st;
  }
  if (o->n > 1) qsort(o->v, o->n, sizeof *o->v, entry_qcmp); /* v is NULL when empty */
  *out = o;
  return PC_OK;
}

pc_status_t local_observers_load(local_t *s, pc_error_t *err) {
  local_observers_t *o = NULL;
  pc_status_t st = read_set(s, &o, err);
  if (st == PC_OK) atomic_store_explicit(&s->obs, o, memory_order_release);
  return st;
}

pc_status_t local_observers_reload(local_t *s, pc_error_t *err) {
  local_observers_t *o = NULL;
  pc_status_t st = read_set(s, &o, err);
  if (st == PC_OK) swap_in(s, o);
  return st;
}

void local_observers_free(local_t *s) {
  set_free(atomic_load_explicit(&s->obs, memory_order_relaxed));
  atomic_store_explicit(&s->obs, NULL, memory_order_relaxed);
}
