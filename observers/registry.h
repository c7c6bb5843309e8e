/* registry.h — the in-process registry of observers: what plugins registered
 * (observers/plugin.h fills it), looked up by the observed (table, column)
 * when a notification is found, and iterated to list every observer.
 *
 * Thread safety: every function may be called from many threads at once. A
 * pointer to an observer (pc_registry_find, pc_registry_lookup,
 * pc_registry_foreach) stays valid until that observer is removed — by
 * pc_registry_remove_owner (its plugin is unloaded or its load fails) or
 * pc_registry_free — so whoever removes observers must first make sure no
 * thread still runs or holds them (the worker stops before it unloads). */
#ifndef PC_OBSERVERS_REGISTRY_H
#define PC_OBSERVERS_REGISTRY_H

#include <stddef.h>

#include <percolator/observer.h>
#include <percolator/percolator.h>

/* One registered observer: a copy of its pc_observer_def_t whose strings the
 * registry owns. Read-only for everyone but the registry. */
typedef struct pc_observer {
  char *name;
  char *table;
  char *column; /* column_len bytes, NUL-terminated after them */
  size_t column_len;
  pc_observer_kind_t kind;
  pc_observe_fn observe;
  pc_observe_batch_fn observe_batch; /* NULL: none */
  size_t batch_max;                  /* 1 without observe_batch */
  void *state;
  void (*state_free)(void *state);
  char *origin;      /* who registered it, for messages: the plugin's name */
  const void *owner; /* the key pc_registry_remove_owner removes by (the plugin handle) */
} pc_observer_t;

/* batch_max when a definition leaves it 0. */
#define PC_OBSERVER_BATCH_DEFAULT 64

typedef struct pc_observer_registry pc_observer_registry_t;

/* Returns an empty registry, or NULL when memory ran out. Release with pc_registry_free. */
pc_observer_registry_t *pc_registry_create(void);

/* Removes every observer (calling its state_free) and releases the registry. NULL is a no-op. */
void pc_registry_free(pc_observer_registry_t *reg);

/* Adds a copy of def, registered by owner (origin names it in messages; may
 * be NULL). PC_INVALID naming the field when def is malformed (a name outside
 * 1..PC_MAX_OBSERVER_NAME bytes of [A-Za-z0-9_.-], a bad table name, an empty
 * or too long column, an unknown kind, no callback) or when its name is
 * already registered; PC_NOMEM. On PC_OK the registry owns def->state and
 * calls def->state_free on it when the observer is removed; on failure it
 * does not. */
pc_status_t pc_registry_add(pc_observer_registry_t *reg, const pc_observer_def_t *def,
                            const void *owner, const char *origin, pc_error_t *err);

/* Removes the observers registered by owner, calling each state_free; returns
 * how many were removed. */
size_t pc_registry_remove_owner(pc_observer_registry_t *reg, const void *owner);

/* The number of observers. */
size_t pc_registry_count(const pc_observer_registry_t *reg);

/* The observer named name, or NULL. */
const pc_observer_t *pc_registry_find(const pc_observer_registry_t *reg, const char *name);

/* The observers of (table, column), in name order: stores the first cap of
 * them in out (out may be NULL when cap is 0) and returns how many there are,
 * which may be more than cap. */
size_t pc_registry_lookup(const pc_observer_registry_t *reg, const char *table, const char *column,
                          size_t column_len, const pc_observer_t **out, size_t cap);

/* Calls fn for every observer in (table, column, name) order until it returns
 * nonzero; returns that value, or 0. fn must not add or remove observers. */
int pc_registry_foreach(const pc_observer_registry_t *reg,
                        int (*fn)(void *ctx, const pc_observer_t *obs), void *ctx);

/* Runs obs's batch callback on cells[0..n) inside txn, with
 * pc_observer_run's conventions. obs->observe_batch must be set. */
pc_status_t pc_observer_run_batch(const pc_observer_t *obs, pc_txn_t *txn,
                                  const pc_notified_cell_t *cells, size_t n, pc_error_t *err);

/* Runs obs's callback on cell inside txn, which the caller began and will
 * commit (on PC_OK) or abort. Returns the callback's status with err filled
 * so that the caller can rely on it: a failure always carries a message (the
 * status name when the callback gave none), prefixed with "observer 'NAME'",
 * and a status outside pc_status_t is reported as PC_INTERNAL. */
pc_status_t pc_observer_run(const pc_observer_t *obs, pc_txn_t *txn,
                            const pc_notified_cell_t *cell, pc_error_t *err);

#endif
