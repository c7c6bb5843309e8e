/* registry.c — the observers a process knows, kept as an array of separately
 * allocated entries sorted by (table, column, name) under a read-write lock:
 * lookups by (table, column), which the workers make for every notification
 * they find, are a binary search under the read lock, and an entry never
 * moves, so a pointer to it stays valid while other observers come and go.
 * Observer names are unique across the registry: a name is what the store's
 * ack cells record, and what logs and the failures listing show. */
#include "observers/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

struct pc_observer_registry {
  pthread_rwlock_t lock;
  pc_observer_t **obs; /* sorted by (table, column, name) */
  size_t n, cap;
};

/* ---- validation ------------------------------------------------------------ */

/* 1..max bytes of [A-Za-z0-9_.-]: observer names and table names. Returns
 * NULL, or why s is not one. */
static const char *check_ident(const char *s, size_t max) {
  if (!s) return "is NULL";
  size_t n = 0;
  for (; s[n]; n++) {
    char ch = s[n];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '.' || ch == '-';
    if (!ok) return "has a character outside [A-Za-z0-9_.-]";
    if (n >= max) return "is too long";
  }
  return n ? NULL : "is empty";
}

/* s[0..n) for a message: printable ASCII as is, other bytes as \xHH, at most
 * 40 bytes shown. */
static void show(char out[200], const char *s, size_t n) {
  size_t o = 0, lim = n < 40 ? n : 40;
  for (size_t k = 0; k < lim; k++) {
    unsigned char ch = (unsigned char)s[k];
    if (ch >= 0x20 && ch < 0x7F && ch != '\\')
      out[o++] = (char)ch;
    else
      o += (size_t)snprintf(out + o, 200 - o, "\\x%02x", ch);
  }
  if (lim < n) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
}

static pc_status_t check_def(const pc_observer_def_t *def, pc_error_t *err) {
  if (!def) return pc_error_set(err, PC_INVALID, "observer definition is NULL");
  const char *why = check_ident(def->name, PC_MAX_OBSERVER_NAME);
  if (why) {
    if (!def->name) return pc_error_set(err, PC_INVALID, "observer name is NULL");
    char shown[200];
    show(shown, def->name, strlen(def->name));
    return pc_error_set(err, PC_INVALID, "observer name '%s' %s (1..%d bytes of [A-Za-z0-9_.-])",
                        shown, why, PC_MAX_OBSERVER_NAME);
  }
  if ((why = check_ident(def->table, PC_MAX_TABLE)) != NULL) {
    if (!def->table)
      return pc_error_set(err, PC_INVALID, "observer '%s': table is NULL", def->name);
    char shown[200];
    show(shown, def->table, strlen(def->table));
    return pc_error_set(err, PC_INVALID, "observer '%s': table name '%s' %s (1..%d bytes of "
                        "[A-Za-z0-9_.-])", def->name, shown, why, PC_MAX_TABLE);
  }
  if (!def->column || def->column_len == 0)
    return pc_error_set(err, PC_INVALID, "observer '%s': column is empty", def->name);
  if (def->column_len > PC_MAX_COLUMN)
    return pc_error_set(err, PC_INVALID,
                        "observer '%s': column of %zu bytes exceeds the limit of %d", def->name,
                        def->column_len, PC_MAX_COLUMN);
  if (def->kind != PC_OBSERVER_STRONG && def->kind != PC_OBSERVER_WEAK)
    return pc_error_set(err, PC_INVALID,
                        "observer '%s': kind %d is neither PC_OBSERVER_STRONG nor PC_OBSERVER_WEAK",
                        def->name, (int)def->kind);
  if (!def->observe)
    return pc_error_set(err, PC_INVALID, "observer '%s': observe callback is NULL", def->name);
  if (def->observe_batch && def->kind != PC_OBSERVER_STRONG)
    return pc_error_set(err, PC_INVALID,
                        "observer '%s': observe_batch is for strong observers only", def->name);
  if (def->observe_batch && def->batch_max > PC_MAX_OBSERVER_BATCH)
    return pc_error_set(err, PC_INVALID,
                        "observer '%s': batch_max %zu exceeds PC_MAX_OBSERVER_BATCH (%d)",
                        def->name, def->batch_max, PC_MAX_OBSERVER_BATCH);
  return PC_OK;
}

/* ---- order ----------------------------------------------------------------- */

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn) {
  size_t m = an < bn ? an : bn;
  int r = m ? memcmp(a, b, m) : 0;
  if (r) return r;
  return an < bn ? -1 : an > bn;
}

/* Compares obs with (table, column) only. */
static int cell_cmp(const pc_observer_t *obs, const char *table, const char *column,
                    size_t column_len) {
  int r = strcmp(obs->table, table);
  return r ? r : bytes_cmp(obs->column, obs->column_len, column, column_len);
}

/* The index of the first observer not ordered before (table, column[, name]). */
static size_t lower_bound(const pc_observer_registry_t *reg, const char *table,
                          const char *column, size_t column_len, const char *name) {
  size_t lo = 0, hi = reg->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const pc_observer_t *o = reg->obs[mid];
    int r = cell_cmp(o, table, column, column_len);
    if (r == 0 && name) r = strcmp(o->name, name);
    if (r < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static const pc_observer_t *find_locked(const pc_observer_registry_t *reg, const char *name) {
  for (size_t k = 0; k < reg->n; k++)
    if (strcmp(reg->obs[k]->name, name) == 0) return reg->obs[k];
  return NULL;
}

/* ---- entries --------------------------------------------------------------- */

static void obs_free(pc_observer_t *o) {
  if (!o) return;
  free(o->name);
  free(o->table);
  free(o->column);
  free(o->origin);
  free(o);
}

static pc_observer_t *obs_copy(const pc_observer_def_t *def, const void *owner,
                               const char *origin) {
  pc_observer_t *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->name = strdup(def->name);
  o->table = strdup(def->table);
  o->column = malloc(def->column_len + 1);
  o->origin = origin ? strdup(origin) : NULL;
  if (!o->name || !o->table || !o->column || (origin && !o->origin)) {
    obs_free(o);
    return NULL;
  }
  memcpy(o->column, def->column, def->column_len);
  o->column[def->column_len] = '\0';
  o->column_len = def->column_len;
  o->kind = def->kind;
  o->observe = def->observe;
  o->observe_batch = def->observe_batch;
  o->batch_max = !def->observe_batch ? 1 : def->batch_max ? def->batch_max : PC_OBSERVER_BATCH_DEFAULT;
  o->state = def->state;
  o->state_free = def->state_free;
  o->owner = owner;
  return o;
}

/* ---- entry points ---------------------------------------------------------- */

pc_observer_registry_t *pc_registry_create(void) {
  pc_observer_registry_t *reg = calloc(1, sizeof *reg);
  if (!reg) return NULL;
  if (pthread_rwlock_init(&reg->lock, NULL) != 0) {
    free(reg);
    return NULL;
  }
  return reg;
}

void pc_registry_free(pc_observer_registry_t *reg) {
  if (!reg) return;
  for (size_t k = 0; k < reg->n; k++) {
    pc_observer_t *o = reg->obs[k];
    if (o->state_free) o->state_free(o->state);
    obs_free(o);
  }
  free(reg->obs);
  pthread_rwlock_destroy(&reg->lock);
  free(reg);
}

pc_status_t pc_registry_add(pc_observer_registry_t *reg, const pc_observer_def_t *def,
                            const void *owner, const char *origin, pc_error_t *err) {
  pc_error_clear(err);
  if (!reg) return pc_error_set(err, PC_INVALID, "observer registry is NULL");
  pc_status_t st = check_def(def, err);
  if (st != PC_OK) return st;
  pc_observer_t *o = obs_copy(def, owner, origin);
  if (!o) return pc_error_set(err, PC_NOMEM, "observer '%s': out of memory", def->name);

  pthread_rwlock_wrlock(&reg->lock);
  const pc_observer_t *dup = find_locked(reg, def->name);
  if (dup) {
    char col[200];
    show(col, dup->column, dup->column_len);
    st = pc_error_set(err, PC_INVALID,
                      "observer '%s' is already registered (on table '%s' column '%s'%s%s%s)",
                      def->name, dup->table, col, dup->origin ? ", by plugin '" : "",
                      dup->origin ? dup->origin : "", dup->origin ? "'" : "");
    goto out;
  }
  if (reg->n == reg->cap) {
    size_t cap = reg->cap ? reg->cap * 2 : 16;
    pc_observer_t **p = realloc(reg->obs, cap * sizeof *p);
    if (!p) {
      st = pc_error_set(err, PC_NOMEM, "observer '%s': out of memory", def->name);
      goto out;
    }
    reg->obs = p;
    reg->cap = cap;
  }
  size_t at = lower_bound(reg, o->table, o->column, o->column_len, o->name);
  memmove(reg->obs + at + 1, reg->obs + at, (reg->n - at) * sizeof *reg->obs);
  reg->obs[at] = o;
  reg->n++;
  o = NULL;
out:
  pthread_rwlock_unlock(&reg->lock);
  obs_free(o);
  return st;
}

size_t pc_registry_remove_owner(pc_observer_registry_t *reg, const void *owner) {
  if (!reg) return 0;
  size_t keep = 0, gone = 0;
  /* state_free is plugin code, called under the write lock: it cannot reach
   * this registry (the host's table offers nothing that would) */
  pthread_rwlock_wrlock(&reg->lock);
  for (size_t k = 0; k < reg->n; k++) {
    pc_observer_t *o = reg->obs[k];
    if (o->owner != owner) {
      reg->obs[keep++] = o;
      continue;
    }
    if (o->state_free) o->state_free(o->state);
    obs_free(o);
    gone++;
  }
  reg->n = keep;
  pthread_rwlock_unlock(&reg->lock);
  return gone;
}

size_t pc_registry_count(const pc_observer_registry_t *reg) {
  if (!reg) return 0;
  pthread_rwlock_t *lock = (pthread_rwlock_t *)&reg->lock;
  pthread_rwlock_rdlock(lock);
  size_t n = reg->n;
  pthread_rwlock_unlock(lock);
  return n;
}

const pc_observer_t *pc_registry_find(const pc_observer_registry_t *reg, const char *name) {
  if (!reg || !name) return NULL;
  pthread_rwlock_t *lock = (pthread_rwlock_t *)&reg->lock;
  pthread_rwlock_rdlock(lock);
  const pc_observer_t *o = find_locked(reg, name);
  pthread_rwlock_unlock(lock);
  return o;
}

size_t pc_registry_lookup(const pc_observer_registry_t *reg, const char *table, const char *column,
                          size_t column_len, const pc_observer_t **out, size_t cap) {
  if (!reg || !table || (!column && column_len)) return 0;
  pthread_rwlock_t *lock = (pthread_rwlock_t *)&reg->lock;
  pthread_rwlock_rdlock(lock);
  size_t n = 0;
  for (size_t k = lower_bound(reg, table, column, column_len, NULL);
       k < reg->n && cell_cmp(reg->obs[k], table, column, column_len) == 0; k++, n++)
    if (n < cap) out[n] = reg->obs[k];
  pthread_rwlock_unlock(lock);
  return n;
}

int pc_registry_foreach(const pc_observer_registry_t *reg,
                        int (*fn)(void *ctx, const pc_observer_t *obs), void *ctx) {
  if (!reg || !fn) return 0;
  pthread_rwlock_t *lock = (pthread_rwlock_t *)&reg->lock;
  pthread_rwlock_rdlock(lock);
  int r = 0;
  for (size_t k = 0; k < reg->n && r == 0; k++) r = fn(ctx, reg->obs[k]);
  pthread_rwlock_unlock(lock);
  return r;
}

/* The callback's outcome, as pc_observer_run reports it. */
static pc_status_t run_outcome(const pc_observer_t *obs, pc_status_t st, pc_error_t *mine,
                               pc_error_t *err) {
  mine->text[PC_ERROR_TEXT - 1] = '\0'; /* the plugin may have filled all of it */
  if (st == PC_OK) return PC_OK;
  if ((int)st < (int)PC_OK || (int)st > (int)PC_INTERNAL)
    return pc_error_set(err, PC_INTERNAL, "observer '%s' returned an unknown status %d%s%s",
                        obs->name, (int)st, mine->text[0] ? ": " : "", mine->text);
  if (!mine->text[0])
    return pc_error_set(err, st, "observer '%s' failed: %s", obs->name, pc_status_name(st));
  return pc_error_set(err, st, "observer '%s': %s", obs->name, mine->text);
}

pc_status_t pc_observer_run(const pc_observer_t *obs, pc_txn_t *txn,
                            const pc_notified_cell_t *cell, pc_error_t *err) {
  pc_error_clear(err);
  if (!obs || !txn || !cell)
    return pc_error_set(err, PC_INVALID, "pc_observer_run: %s is NULL",
                        !obs ? "observer" : !txn ? "transaction" : "cell");
  /* the callback always gets somewhere to write, whatever the caller passed */
  pc_error_t mine;
  pc_error_clear(&mine);
  return run_outcome(obs, obs->observe(obs->state, txn, cell, &mine), &mine, err);
}

pc_status_t pc_observer_run_batch(const pc_observer_t *obs, pc_txn_t *txn,
                                  const pc_notified_cell_t *cells, size_t n, pc_error_t *err) {
  pc_error_clear(err);
  if (!obs || !obs->observe_batch || !txn || !cells || n == 0)
    return pc_error_set(err, PC_INVALID, "pc_observer_run_batch: %s",
                        !obs || !obs->observe_batch ? "no batch callback"
                        : !txn                      ? "transaction is NULL"
                                                    : "no cells");
  pc_error_t mine;
  pc_error_clear(&mine);
  return run_outcome(obs, obs->observe_batch(obs->state, txn, cells, n, &mine), &mine, err);
}
