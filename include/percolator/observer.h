/*
 * observer.h — the observer plugin ABI: with percolator.h, the one header a
 * plugin author needs (guide: docs/OBSERVERS.md).
 *
 * An observer plugin is a shared object built WITHOUT linking libpercolator:
 *
 *   cc -shared -fPIC -o myplugin.so myplugin.c $(pkg-config --cflags percolator)
 *
 * It calls the host only through the table of functions (pc_host_api_t) the
 * host hands to its init function, the way a SQLite extension receives
 * sqlite3_api_routines. percolator.h is included for its types and constants
 * (pc_txn_t, pc_status_t, pc_error_t, PC_MAX_*); a plugin never calls the
 * pc_* functions of that header directly.
 *
 * A plugin exports (the host looks them up by name with dlsym):
 *   pc_plugin_magic     what ABI it was built for; write PC_PLUGIN_DECLARE
 *                       (name, version) once in the plugin to define it.
 *   pc_plugin_init      registers the plugin's observers (required).
 *   pc_plugin_teardown  releases what init set up (optional).
 *
 * What the host checks when it loads a plugin, in this order, each failure
 * refusing the plugin with a message naming the file and the field:
 *   the file loads (dlopen with RTLD_NOW: every symbol resolves);
 *   pc_plugin_magic exists and returns non-NULL;
 *   magic == PC_PLUGIN_MAGIC;
 *   struct_size >= the size of pc_plugin_magic_t in ABI 1.0;
 *   abi_major == PC_OBSERVER_ABI_MAJOR of the host;
 *   name is a non-empty string, version a string;
 *   pc_plugin_init exists, and returns PC_OK.
 * When init fails, every observer it registered is removed again (each
 * state_free called) and the library is closed; pc_plugin_teardown is not
 * called, so init cleans up after itself before returning an error.
 *
 * Versions. PC_OBSERVER_ABI_MAJOR changes when anything in this header
 * changes incompatibly; the host refuses a plugin built for another major.
 * PC_OBSERVER_ABI_MINOR grows when something is added, and additions are
 * append-only: new members go at the end of pc_plugin_magic_t,
 * pc_host_api_t, pc_observer_def_t and pc_notified_cell_t, nothing is
 * removed, reordered or retyped, and enum values are only added. So:
 *   - a plugin built against an older minor loads into a newer host: the host
 *     reads the structures the plugin passes it with the layout of the minor
 *     named in the plugin's magic, members appended later counting as absent;
 *   - a plugin built against a newer minor loads into an older host, and must
 *     check that a host function added after 1.0 is there before calling it:
 *     PC_HOST_HAS(api, member) (or api->abi_minor).
 *
 * Ownership, as in percolator.h: memory a host function returns to the
 * plugin is said in its comment and is released with api->free; pointers the
 * host passes to a callback are valid only during that call.
 */
#ifndef PERCOLATOR_OBSERVER_H
#define PERCOLATOR_OBSERVER_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/percolator.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PC_OBSERVER_ABI_MAJOR 1
#define PC_OBSERVER_ABI_MINOR 1

/* pc_plugin_magic_t.magic: the bytes "PCPB" (PerColator Plugin Binary). */
#define PC_PLUGIN_MAGIC 0x50435042u

/* Observer names: 1..PC_MAX_OBSERVER_NAME bytes of [A-Za-z0-9_.-]. A name is
 * recorded in the store (the ack cell of each observed cell), so renaming an
 * observer makes it run again on every cell it has already seen. */
#define PC_MAX_OBSERVER_NAME 64
/* Plugin names (pc_plugin_magic_t.name): 1..PC_MAX_PLUGIN_NAME bytes. */
#define PC_MAX_PLUGIN_NAME 64

#if defined(__GNUC__) || defined(__clang__)
#define PC_PLUGIN_EXPORT __attribute__((visibility("default")))
#define PC_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define PC_PLUGIN_EXPORT
#define PC_PRINTF_LIKE(fmt, args)
#endif

/* ---- the plugin's description ------------------------------------------- */

/* What pc_plugin_magic returns. Define it with PC_PLUGIN_DECLARE, which fills
 * every field from this header; do not build one by hand. */
typedef struct pc_plugin_magic {
  uint32_t magic;       /* PC_PLUGIN_MAGIC */
  uint32_t struct_size; /* sizeof(pc_plugin_magic_t) as the plugin was compiled */
  int abi_major;        /* PC_OBSERVER_ABI_MAJOR the plugin was compiled against */
  int abi_minor;        /* PC_OBSERVER_ABI_MINOR the plugin was compiled against */
  const char *name;     /* the plugin's name, for logs and messages (static storage) */
  const char *version;  /* the plugin's own version, e.g. "1.2.0" (static storage) */
} pc_plugin_magic_t;

/* Defines pc_plugin_magic() returning a description of this plugin. Write it
 * once, at file scope, in one source file of the plugin; name and version
 * are string literals:
 *   PC_PLUGIN_DECLARE("normalize_count", "1.0.0");                          */
#define PC_PLUGIN_DECLARE(plugin_name, plugin_version)                       \
  const pc_plugin_magic_t *pc_plugin_magic(void) {                           \
    static const pc_plugin_magic_t pc_plugin_magic_value_ = {                \
        .magic = PC_PLUGIN_MAGIC,                                            \
        .struct_size = (uint32_t)sizeof(pc_plugin_magic_t),                  \
        .abi_major = PC_OBSERVER_ABI_MAJOR,                                  \
        .abi_minor = PC_OBSERVER_ABI_MINOR,                                  \
        .name = (plugin_name),                                               \
        .version = (plugin_version),                                         \
    };                                                                       \
    return &pc_plugin_magic_value_;                                          \
  }                                                                          \
  typedef int pc_plugin_declare_ends_with_a_semicolon_

/* ---- observers ------------------------------------------------------------ */

/* Strong: every committed put or delete of the observed column leaves a
 * notification the observer runs on (a deleted cell reads PC_NOT_FOUND), at
 * most once per change (the run writes an ack in its own transaction, so two
 * concurrent runs for one change cannot both commit). Weak: a notification
 * is set explicitly (api->notify_weak) without writing the cell, and the
 * observer runs at least once for it. docs/OBSERVERS.md ("Guarantees") says
 * what a plugin relies on. */
typedef enum pc_observer_kind {
  PC_OBSERVER_STRONG = 0,
  PC_OBSERVER_WEAK = 1
} pc_observer_kind_t;

/* The cell whose notification an observer runs on. Every pointer is valid
 * only during the callback. */
typedef struct pc_notified_cell {
  const char *table;    /* NUL-terminated */
  const char *row;      size_t row_len;
  const char *column;   size_t column_len;
  uint64_t notify_ts;   /* the notification's timestamp (the commit_ts of the change, for
                         * strong observers); older than the run's start_ts */
} pc_notified_cell_t;

/* The observer callback. The contract (docs/OBSERVERS.md says more):
 *   - It is called from many threads at once, for different cells and for
 *     the same cell: any state it shares is its own to synchronise.
 *   - The host begins txn (a fresh start_ts, after the notification), and
 *     commits or aborts and destroys it after the callback returns. The
 *     callback reads and writes only through txn (api->txn_get, txn_set,
 *     txn_delete, txn_scan, notify_weak, and the calls of ABI 1.1) and
 *     never commits, aborts or destroys it, nor keeps it after returning.
 *   - PC_OK asks the host to commit txn. Any other status aborts it (nothing
 *     it wrote is applied) and counts as a failure of this observer on this
 *     notification, with err's text as the reason: the run is retried later
 *     with backoff, and after the configured number of failures the
 *     notification is parked (listed by `percolator failures`) instead. A
 *     commit conflict is handled the same way.
 *   - A run may be retried — after a failure, a conflict, or a crash of the
 *     worker before its commit — so the callback must be idempotent per
 *     notification: compute what to write from what it reads, so that running
 *     twice leaves the same result as running once.
 *   - It may write other observed columns; their observers then run in turn
 *     (chains). It should not write the column it observes unless it stops
 *     doing so once the value is settled, or the chain never ends.
 *   - err is never NULL. On failure, write a message in err->text (the
 *     transaction functions fill it for their own errors); a failure without
 *     one is reported by its status name alone. */
typedef pc_status_t (*pc_observe_fn)(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                                     pc_error_t *err);

/* The batch callback (ABI 1.1, optional, strong observers only): one run
 * over n >= 1 notified cells of the observer's column, each a change this
 * observer has not yet acknowledged, in one transaction. It does what
 * observe would do for each cell in turn inside that one transaction (its
 * own writes are visible to its later reads), and its result is theirs:
 * PC_OK commits the run of every cell (the host writes each cell's ack),
 * any other status aborts all of them. The host hands the observer a batch
 * when it finds several of its cells notified at once, at most batch_max.
 * A batch whose commit lost to another transaction (PC_CONFLICT, PC_LOCKED
 * or PC_ABORTED) runs again as two halves, each a batch of its own; a cell
 * alone that loses, and the cells of a batch that failed otherwise (the
 * callback's status included), run one by one through observe, so that a cell
 * that fails is retried and parked on its own. A batch pays one
 * commit for many cells, and lets the observer combine their writes (many
 * documents' postings of one term in one cell, say); it also makes a
 * conflict on any one cell abort them all, so it suits observers whose
 * cells seldom meet. The cells are distinct; every pointer is valid only
 * during the call. */
typedef pc_status_t (*pc_observe_batch_fn)(void *state, pc_txn_t *txn,
                                           const pc_notified_cell_t *cells, size_t n,
                                           pc_error_t *err);

/* The most cells a batch may hold (pc_observer_def_t.batch_max). */
#define PC_MAX_OBSERVER_BATCH 4096

/* What a plugin registers. The host copies the strings; the definition itself
 * may live on the stack. */
typedef struct pc_observer_def {
  const char *name;   /* unique among every observer of the host; see PC_MAX_OBSERVER_NAME */
  const char *table;  /* the observed table: the rules of percolator.h's table names */
  const char *column; /* the observed column: 1..PC_MAX_COLUMN bytes, any bytes */
  size_t column_len;
  pc_observer_kind_t kind;
  pc_observe_fn observe; /* required */
  void *state;           /* passed to observe (and state_free) as is; may be NULL */
  /* Optional. Once the observer is registered, the host owns state and calls
   * state_free(state) exactly once, when the observer is removed: the plugin
   * is unloaded, or the load fails after this registration (rollback). When
   * register_observer fails, state stays the plugin's. */
  void (*state_free)(void *state);

  /* ---- ABI 1.1 ---- */

  /* Optional: see pc_observe_batch_fn (NULL: every cell runs alone). Only
   * for a strong observer (PC_INVALID otherwise); observe stays required. */
  pc_observe_batch_fn observe_batch;
  /* The most cells of one batch, 1..PC_MAX_OBSERVER_BATCH (0: 64). */
  size_t batch_max;
} pc_observer_def_t;

/* ---- the host's functions -------------------------------------------------- */

/* The registration context of one plugin load, valid only during pc_plugin_init. */
typedef struct pc_plugin_reg pc_plugin_reg_t;

/* Levels of api->log. */
typedef enum pc_plugin_log_level {
  PC_PLUGIN_LOG_DEBUG = 0,
  PC_PLUGIN_LOG_INFO = 1,
  PC_PLUGIN_LOG_WARN = 2,
  PC_PLUGIN_LOG_ERROR = 3
} pc_plugin_log_level_t;

/* The table the host passes to pc_plugin_init. It stays valid, unchanged,
 * until after pc_plugin_teardown returns, so a plugin keeps the pointer (in a
 * static variable) for its callbacks. Every function is safe to call from
 * many threads at once, each with its own transaction. The transaction
 * functions behave exactly as their namesakes in percolator.h (pc_txn_get,
 * ...), whose comments are their full contracts. */
typedef struct pc_host_api {
  size_t size;    /* sizeof(pc_host_api_t) in the host: which members exist */
  int abi_major;  /* the host's PC_OBSERVER_ABI_MAJOR */
  int abi_minor;  /* the host's PC_OBSERVER_ABI_MINOR */
  void *host_ctx; /* the first argument of log */

  /* ---- ABI 1.0 ---- */

  /* pc_txn_get: on PC_OK *value is a malloc'd copy the plugin releases with
   * api->free; on any other status *value is NULL. */
  pc_status_t (*txn_get)(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                         const char *col, size_t clen, char **value, size_t *vlen,
                         pc_error_t *err);
  /* pc_txn_set: buffers the write (the value is copied). */
  pc_status_t (*txn_set)(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                         const char *col, size_t clen, const char *value, size_t vlen,
                         pc_error_t *err);
  /* pc_txn_delete: buffers a delete. */
  pc_status_t (*txn_delete)(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                            const char *col, size_t clen, pc_error_t *err);
  /* pc_txn_scan: returns a scan the plugin releases with scan_destroy before
   * returning from the callback, or NULL on error. */
  pc_scan_t *(*txn_scan)(pc_txn_t *txn, const char *table, const char *start, size_t slen,
                         const char *end, size_t elen, pc_error_t *err);
  /* pc_scan_next: PC_OK at a cell, PC_NOT_FOUND at the end, else an error. */
  pc_status_t (*scan_next)(pc_scan_t *scan, pc_error_t *err);
  /* The current cell; the pointers belong to the scan, valid until the next
   * scan_next or scan_destroy. */
  const char *(*scan_row)(const pc_scan_t *scan, size_t *len);
  const char *(*scan_column)(const pc_scan_t *scan, size_t *len);
  const char *(*scan_value)(const pc_scan_t *scan, size_t *len);
  void (*scan_destroy)(pc_scan_t *scan);
  /* The transaction's snapshot timestamp. */
  uint64_t (*txn_start_ts)(const pc_txn_t *txn);
  /* Releases memory a host function returned (pc_free). NULL is a no-op. */
  void (*free)(void *ptr);
  /* The stable name of a status ("ok", "conflict", ...). Static storage. */
  const char *(*status_name)(pc_status_t status);
  /* pc_txn_notify_weak: sets a weak notification on the cell within txn:
   * when txn commits, the weak observers of the column run (at least once)
   * without the cell being written. */
  pc_status_t (*notify_weak)(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                             const char *col, size_t clen, pc_error_t *err);
  /* Writes one line to the host's log (stderr for the daemons), prefixed with
   * the level and the plugin's name; level is a pc_plugin_log_level_t. Lines
   * below the host's configured level are dropped. */
  void (*log)(void *host_ctx, int level, const char *fmt, ...) PC_PRINTF_LIKE(3, 4);
  /* Registers an observer; only during pc_plugin_init (else PC_STATE). The
   * host copies def's strings. PC_INVALID naming the field for a malformed
   * def or a name already registered (by this plugin or another). On PC_OK
   * the host owns def->state (see pc_observer_def_t.state_free). */
  pc_status_t (*register_observer)(pc_plugin_reg_t *reg, const pc_observer_def_t *def,
                                   pc_error_t *err);

  /* ---- ABI 1.1: what observers need to read and write much at once ---- */

  /* pc_txn_get_many: reads n cells (any rows, columns and tables) in one
   * call — on a cluster one request per tablet, every tablet at once.
   * values[i].value is a malloc'd copy (release each with api->free) or NULL
   * when cells[i] has no value. */
  pc_status_t (*txn_get_many)(pc_txn_t *txn, const pc_cell_ref_t *cells, size_t n,
                              pc_value_t *values, pc_error_t *err);
  /* pc_txn_set_many: buffers n writes (a NULL value: a delete). Writes
   * never cost a round trip each: the commit sends one request per tablet
   * and stage. */
  pc_status_t (*txn_set_many)(pc_txn_t *txn, const pc_cell_ref_t *cells,
                              const pc_value_t *values, size_t n, pc_error_t *err);
  /* pc_txn_scan_row: the cells of one row whose column begins with
   * col_prefix, read from the first such column to the last. Release with
   * scan_destroy, as txn_scan's. */
  pc_scan_t *(*txn_scan_row)(pc_txn_t *txn, const char *table, const char *row, size_t rlen,
                             const char *col_prefix, size_t cplen, pc_error_t *err);
  /* pc_txn_scan_prefix: the cells of the rows that begin with prefix whose
   * column begins with col_prefix. Release with scan_destroy. */
  pc_scan_t *(*txn_scan_prefix)(pc_txn_t *txn, const char *table, const char *prefix,
                                size_t plen, const char *col_prefix, size_t cplen,
                                pc_error_t *err);

  /* ---- later minors append their members here, never above ---- */
} pc_host_api_t;

/* Nonzero when the host's table has member (added in some minor version):
 *   if (PC_HOST_HAS(api, some_later_call)) api->some_later_call(...); */
#define PC_HOST_HAS(api, member)                                             \
  ((api)->size >= offsetof(pc_host_api_t, member) + sizeof((api)->member) && \
   (api)->member != NULL)

/* ---- what a plugin exports ------------------------------------------------- */

/* The plugin's description; defined by PC_PLUGIN_DECLARE. */
PC_PLUGIN_EXPORT const pc_plugin_magic_t *pc_plugin_magic(void);

/* Called once after the host accepted the magic. Registers the plugin's
 * observers with api->register_observer(reg, &def, err) — the only time it
 * may. config_json is the plugin's "config" object from the worker
 * configuration (workers.plugins[].config) as compact JSON text, "{}" when
 * absent; valid only during the call (copy what is kept). Returns PC_OK, or
 * another status with a message in err->text (err is never NULL; the host
 * prefixes the message with the file name and "init failed: "); on failure,
 * the observers it registered are removed again and the library closed, and
 * init must release whatever else it set up itself. Called from one thread,
 * never concurrently with the plugin's callbacks. */
PC_PLUGIN_EXPORT pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg,
                                            const char *config_json, pc_error_t *err);

/* Optional. Called once when the host unloads a plugin whose init succeeded,
 * after its observers were removed (their state_free called) and no callback
 * of it runs any more; then the library is closed. */
PC_PLUGIN_EXPORT void pc_plugin_teardown(void);

/* The exported functions' types, for hosts that look them up. */
typedef const pc_plugin_magic_t *(*pc_plugin_magic_fn)(void);
typedef pc_status_t (*pc_plugin_init_fn)(const pc_host_api_t *api, pc_plugin_reg_t *reg,
                                         const char *config_json, pc_error_t *err);
typedef void (*pc_plugin_teardown_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* PERCOLATOR_OBSERVER_H */
