/* normalize_count.c — an example observer plugin with a chain of two
 * observers, the shape of most incremental pipelines:
 *
 *   raw:text  --normalize-->  norm:text  --count-->  row "stats", count:normalized
 *
 * "normalize" observes column raw:text of a table (setting "table" of its
 * config, default "docs") and writes the text lower-cased (ASCII letters)
 * and without leading or trailing whitespace to norm:text of the same row.
 * norm:text is itself observed: "count" runs on every change to it and adds
 * one to the counter cell count:normalized of row "stats" in the same table.
 *
 * Configuration (workers.plugins[].config):  { "table": "docs" }
 *
 * Both observers are idempotent per notification, as the host requires:
 * normalize derives norm:text from raw:text alone and writes it only when it
 * differs (so a rerun changes nothing, and an unchanged result does not
 * trigger count again); count's read-increment-write commits in the same
 * transaction as the run's acknowledgement of the notification, so a run
 * that is retried after a failure never adds twice. Every count run writes
 * the same cell, so concurrent runs conflict and are retried: fine for an
 * example, a hot spot at scale (shard the counter, or sum it in a weak
 * observer).
 *
 * Build: cc -shared -fPIC -o normalize_count.so normalize_count.c \
 *          $(pkg-config --cflags percolator)
 */
#include <percolator/observer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PC_PLUGIN_DECLARE("normalize_count", "1.0.0");

#define RAW_COL "raw:text"
#define NORM_COL "norm:text"
#define STATS_ROW "stats"
#define COUNT_COL "count:normalized"

static const pc_host_api_t *host;

/* Each observer's state: the table it works on. */
typedef struct nc_state {
  char table[PC_MAX_TABLE + 1];
} nc_state_t;

/* ---- configuration ------------------------------------------------------------ */

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

/* Reads the JSON string at p (its opening quote) into out[0..cap) when it has
 * no escapes; returns the byte after its closing quote, or NULL. */
static const char *plain_string(const char *p, char *out, size_t cap) {
  if (*p != '"') return NULL;
  const char *end = strchr(p + 1, '"');
  if (!end || memchr(p + 1, '\\', (size_t)(end - p - 1)) || (size_t)(end - p - 1) >= cap)
    return NULL;
  memcpy(out, p + 1, (size_t)(end - p - 1));
  out[end - p - 1] = '\0';
  return end + 1;
}

/* Parses the plugin's config object (compact JSON from the host): only the
 * key "table", a string, is known. */
static pc_status_t parse_config(const char *json, char table[PC_MAX_TABLE + 1], pc_error_t *err) {
  snprintf(table, PC_MAX_TABLE + 1, "docs");
  const char *p = skip_ws(json);
  if (*p++ != '{') goto bad;
  p = skip_ws(p);
  if (*p == '}') return PC_OK;
  for (;;) {
    char key[32];
    if (!(p = plain_string(p, key, sizeof key))) {
      snprintf(err->text, sizeof err->text, "config: unknown key (the only key is \"table\")");
      return err->code = PC_INVALID;
    }
    if (strcmp(key, "table") != 0) {
      snprintf(err->text, sizeof err->text,
               "config: unknown key \"%s\" (the only key is \"table\")", key);
      return err->code = PC_INVALID;
    }
    p = skip_ws(p);
    if (*p++ != ':') goto bad;
    p = skip_ws(p);
    if (!(p = plain_string(p, table, PC_MAX_TABLE + 1)) || !*table) {
      snprintf(err->text, sizeof err->text,
               "config.table: expected a table name (1..%d bytes of [A-Za-z0-9_.-])",
               PC_MAX_TABLE);
      return err->code = PC_INVALID;
    }
    p = skip_ws(p);
    if (*p == '}') return PC_OK;
    if (*p++ != ',') goto bad;
    p = skip_ws(p);
  }
bad:
  snprintf(err->text, sizeof err->text, "config: expected a JSON object");
  return err->code = PC_INVALID;
}

/* ---- normalize ---------------------------------------------------------------- */

static int is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static pc_status_t normalize(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                             pc_error_t *err) {
  const nc_state_t *s = state;
  char *raw = NULL, *norm = NULL;
  size_t raw_len = 0, norm_len = 0;
  pc_status_t st = host->txn_get(txn, s->table, cell->row, cell->row_len, RAW_COL,
                                 strlen(RAW_COL), &raw, &raw_len, err);
  if (st != PC_OK && st != PC_NOT_FOUND) return st;
  pc_status_t old = host->txn_get(txn, s->table, cell->row, cell->row_len, NORM_COL,
                                  strlen(NORM_COL), &norm, &norm_len, err);
  if (old != PC_OK && old != PC_NOT_FOUND) {
    host->free(raw);
    return old;
  }

  /* the derived text: trimmed, ASCII letters lower-cased, in place in raw */
  size_t b = 0, e = raw_len;
  while (b < e && is_space(raw[b])) b++;
  while (e > b && is_space(raw[e - 1])) e--;
  for (size_t k = b; k < e; k++)
    if (raw[k] >= 'A' && raw[k] <= 'Z') raw[k] = (char)(raw[k] - 'A' + 'a');

  if (e == b) {
    /* no text (deleted, or only whitespace): no derived cell either */
    if (old == PC_OK)
      st = host->txn_delete(txn, s->table, cell->row, cell->row_len, NORM_COL, strlen(NORM_COL),
                            err);
    else
      st = PC_OK;
  } else if (old == PC_OK && norm_len == e - b && memcmp(norm, raw + b, e - b) == 0) {
    st = PC_OK; /* already up to date: writing again would only trigger count */
  } else {
    st = host->txn_set(txn, s->table, cell->row, cell->row_len, NORM_COL, strlen(NORM_COL),
                       raw + b, e - b, err);
  }
  host->free(raw);
  host->free(norm);
  return st;
}

/* ---- count -------------------------------------------------------------------- */

static pc_status_t count(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                         pc_error_t *err) {
  const nc_state_t *s = state;
  (void)cell;
  char *v = NULL;
  size_t len = 0;
  unsigned long long n = 0;
  pc_status_t st = host->txn_get(txn, s->table, STATS_ROW, strlen(STATS_ROW), COUNT_COL,
                                 strlen(COUNT_COL), &v, &len, err);
  if (st == PC_OK) {
    char buf[24];
    char *end = NULL;
    int ok = len > 0 && len < sizeof buf;
    if (ok) {
      memcpy(buf, v, len);
      buf[len] = '\0';
      n = strtoull(buf, &end, 10);
      ok = *end == '\0' && buf[0] >= '0' && buf[0] <= '9';
    }
    host->free(v);
    if (!ok) {
      snprintf(err->text, sizeof err->text, "%s/%s/%s does not hold a decimal count", s->table,
               STATS_ROW, COUNT_COL);
      return err->code = PC_CORRUPTION;
    }
  } else if (st != PC_NOT_FOUND) {
    return st;
  }
  char out[24];
  int m = snprintf(out, sizeof out, "%llu", n + 1);
  return host->txn_set(txn, s->table, STATS_ROW, strlen(STATS_ROW), COUNT_COL, strlen(COUNT_COL),
                       out, (size_t)m, err);
}

/* ---- registration ------------------------------------------------------------- */

static pc_status_t add(pc_plugin_reg_t *reg, const char *name, const char *table,
                       const char *column, pc_observe_fn fn, pc_error_t *err) {
  nc_state_t *s = malloc(sizeof *s);
  if (!s) {
    snprintf(err->text, sizeof err->text, "out of memory");
    return err->code = PC_NOMEM;
  }
  snprintf(s->table, sizeof s->table, "%s", table);
  pc_observer_def_t def = {
      .name = name,
      .table = table,
      .column = column,
      .column_len = strlen(column),
      .kind = PC_OBSERVER_STRONG,
      .observe = fn,
      .state = s,
      .state_free = free, /* the host frees it when the observer goes away */
  };
  pc_status_t st = host->register_observer(reg, &def, err);
  if (st != PC_OK) free(s); /* not registered: still ours */
  return st;
}

pc_status_t pc_plugin_init(const pc_host_api_t *api, pc_plugin_reg_t *reg,
                           const char *config_json, pc_error_t *err) {
  host = api;
  char table[PC_MAX_TABLE + 1];
  pc_status_t st = parse_config(config_json, table, err);
  if (st != PC_OK) return st;
  /* if count fails to register, the host removes normalize again */
  if ((st = add(reg, "normalize", table, RAW_COL, normalize, err)) != PC_OK) return st;
  if ((st = add(reg, "count", table, NORM_COL, count, err)) != PC_OK) return st;
  api->log(api->host_ctx, PC_PLUGIN_LOG_INFO, "normalizing %s/%s into %s, counting in %s/%s",
           table, RAW_COL, NORM_COL, STATS_ROW, COUNT_COL);
  return PC_OK;
}
