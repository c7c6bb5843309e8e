/* verb_wait.c — `percolator wait`: until every notification has been
 * processed (pc_notify_wait), saying meanwhile what it waits for. It checks
 * in rounds; between two it reads the observers' view (view.c): on a
 * terminal a progress line (pending notifications by column, live workers),
 * and, whatever the output, a warning when pending work waits for an
 * observer that no live worker runs. When that lasts STALL_MS it gives up
 * with its own exit status (6), as at the end of --timeout-s (5), instead of
 * waiting for ever. Each round opens the store and closes it again, so that
 * an embedded directory is not held between rounds: a worker can start
 * meanwhile, and the next round reaches the store through it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/db.h"
#include "base/error.h"
#include "notify/worker.h"

/* How long pending work may wait for an observer no live worker runs. */
#define STALL_MS 10000
/* The shortest round: one idle check, then the view. */
#define ROUND_MS 1000

enum { OPT_TIMEOUT_S = 0x300, OPT_JSON };

typedef struct waiter {
  const cli_ctx_t *ctx;
  int json, tty;
  uint64_t t0;
  cli_view_t view; /* of the last round that read one */
  int have_view;
  int progress_shown;
} waiter_t;

static double seconds_since(uint64_t t0) { return (double)(pc_now_mono_ms() - t0) / 1000.0; }

static void clear_progress(waiter_t *w) {
  if (w->progress_shown) fputs("\r\033[K", stderr);
  w->progress_shown = 0;
}

/* "12 pending (docs doc:contents 10, idx n 2); 2 live workers" */
static void describe(FILE *out, const cli_view_t *v) {
  fprintf(out, "%llu pending", (unsigned long long)v->pending);
  const char *sep = " (";
  for (size_t k = 0; k < v->ncols && k < 4; k++) {
    fprintf(out, "%s%s ", sep, v->cols[k].table);
    fmt_escape(out, v->cols[k].col, v->cols[k].clen, 0);
    fprintf(out, " %llu", (unsigned long long)v->cols[k].count);
    sep = ", ";
  }
  if (v->ncols > 4) fputs(", ...", out);
  if (v->ncols) fputc(')', out);
  fprintf(out, "; %zu live worker%s", v->nworkers, v->nworkers == 1 ? "" : "s");
}

static void show_progress(waiter_t *w) {
  if (!w->tty || !w->have_view) return;
  fputs("\r\033[Kwaiting: ", stderr);
  describe(stderr, &w->view);
  fprintf(stderr, "; %.0f s", seconds_since(w->t0));
  w->progress_shown = 1;
}

/* One line per stalled column: which observers no live worker runs. */
static void warn_stalled(waiter_t *w) {
  clear_progress(w);
  const cli_view_t *v = &w->view;
  for (size_t k = 0; k < v->ncols; k++) {
    const cli_column_t *c = &v->cols[k];
    if (!cli_view_column_stalled(v, c)) continue;
    fprintf(stderr, "percolator: wait: %llu notification%s of %s ", (unsigned long long)c->count,
            c->count == 1 ? "" : "s", c->table);
    fmt_escape(stderr, c->col, c->clen, 0);
    const char *sep = " wait for ";
    int named = 0;
    for (size_t i = 0; i < v->nobs; i++) {
      const cli_observer_t *o = &v->obs[i];
      if (strcmp(o->table, c->table) || o->clen != c->clen || memcmp(o->col, c->col, c->clen) ||
          o->nworkers)
        continue;
      fprintf(stderr, "%sobserver %s", sep, o->name);
      sep = ", ";
      named = 1;
    }
    if (named) {
      fputs(", which no live worker runs: start a worker whose plugins register it, or, if no "
            "plugin registers it any more, retire it: ", stderr);
      sep = "";
      for (size_t i = 0; i < v->nobs; i++) {
        const cli_observer_t *o = &v->obs[i];
        if (strcmp(o->table, c->table) || o->clen != c->clen ||
            memcmp(o->col, c->col, c->clen) || o->nworkers)
          continue;
        fprintf(stderr, "%s'percolator observers remove %s'", sep, o->name);
        sep = ", ";
      }
      fputc('\n', stderr);
    } else {
      fputs(" and no observer is registered for them\n", stderr);
    }
  }
}

/* The end: the JSON object with --json, the exit status. */
static int finish(waiter_t *w, const char *status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int finish(waiter_t *w, const char *status, int code, const char *fmt, ...) {
  clear_progress(w);
  if (fmt) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cli_error(w->ctx, "%s", msg);
  }
  if (w->json) {
    json_t *o = w->have_view ? cli_view_json(&w->view) : json_object();
    if (o) {
      json_object_set_new(o, "status", json_string(status));
      json_object_set_new(o, "seconds", json_real(seconds_since(w->t0)));
    }
    if (fmt_json_line(stdout, o) != 0 && code == CLI_EXIT_OK)
      code = cli_error(w->ctx, "cannot write the answer");
  }
  if (w->have_view) cli_view_free(&w->view);
  if (code == CLI_EXIT_OK) code = cli_finish_output(w->ctx);
  return code;
}

static int run_wait(cli_ctx_t *ctx, int argc, char **argv) {
  static const struct option opts[] = {{"timeout-s", required_argument, NULL, OPT_TIMEOUT_S},
                                       {"json", no_argument, NULL, OPT_JSON},
                                       {0, 0, 0, 0}};
  uint64_t wait_ms = 0; /* 0: no bound */
  int json = 0, c, code;
  while ((c = cli_getopt(ctx, argc, argv, "", opts, &code)) != -1) {
    if (c == CLI_GETOPT_EXIT) return code;
    if (c == OPT_JSON) json = 1;
    if (c == OPT_TIMEOUT_S && cli_parse_duration(optarg, "s", 86400000u, &wait_ms) != 0)
      return cli_usage_error(ctx, "--timeout-s: expected seconds up to 86400 (or a duration "
                             "such as 90s, 2m), got '%s'", optarg);
  }
  if (optind < argc) return cli_usage_error(ctx, "unexpected argument '%s'", argv[optind]);
  waiter_t w = {ctx, json, !json && isatty(STDERR_FILENO), pc_now_mono_ms(), {0}, 0, 0};
  uint64_t deadline = wait_ms ? w.t0 + wait_ms : UINT64_MAX;
  uint64_t stall_since = 0, round_ms = ROUND_MS;
  uint32_t given_ms = ctx->timeout_ms; /* --timeout, or 0: the store's own */
  for (;;) {
    /* every call of a round ends by the deadline, or soon after it: a store
     * that stopped answering (its worker died) holds the wait no longer */
    if (deadline != UINT64_MAX) {
      uint64_t now0 = pc_now_mono_ms(), rest = deadline > now0 ? deadline - now0 : 0;
      uint64_t cap = given_ms ? given_ms : 10000;
      ctx->timeout_ms = (uint32_t)(rest < 1000 ? 1000 : rest < cap ? rest : cap);
    }
    pc_db_t *db = cli_open_db(ctx, 0);
    if (!db) return finish(&w, "error", CLI_EXIT_ERROR, NULL);
    int held = db->dir != NULL; /* the embedded store itself: no worker runs meanwhile */
    uint64_t now = pc_now_mono_ms();
    uint64_t left = deadline > now ? deadline - now : 1;
    pc_error_t err;
    pc_status_t st = pc_notify_wait(db, (uint32_t)(left < round_ms ? left : round_ms), &err);
    if (st == PC_OK) {
      pc_db_close(db);
      if (w.have_view) {
        cli_view_free(&w.view);
        w.have_view = 0;
      }
      return finish(&w, "ok", CLI_EXIT_OK, NULL);
    }
    if (st != PC_TIMEOUT && st != PC_UNAVAILABLE && st != PC_BUSY) {
      pc_db_close(db);
      cli_pc_error(ctx, &err);
      return finish(&w, "error", CLI_EXIT_ERROR, NULL);
    }
    pc_error_t verr;
    cli_view_t v;
    uint64_t v0 = pc_now_mono_ms();
    if (cli_view_load(db, held, &v, &verr) == PC_OK) {
      if (w.have_view) cli_view_free(&w.view);
      w.view = v;
      w.have_view = 1;
      /* a round holds at least three views' worth of checking */
      uint64_t cost = pc_now_mono_ms() - v0;
      round_ms = cost * 3 > ROUND_MS ? cost * 3 : ROUND_MS;
    }
    pc_db_close(db);
    now = pc_now_mono_ms();
    if (w.have_view && cli_view_stalled(&w.view) > 0) {
      if (!stall_since) {
        stall_since = now;
        warn_stalled(&w);
      }
      if (now - stall_since >= STALL_MS)
        return finish(&w, "stalled", CLI_EXIT_STALLED,
                      "nothing can make progress: %llu notification%s wait for observers that "
                      "no live worker has run for %d s",
                      (unsigned long long)cli_view_stalled(&w.view),
                      cli_view_stalled(&w.view) == 1 ? "" : "s", STALL_MS / 1000);
    } else {
      stall_since = 0;
    }
    if (now >= deadline) {
      char what[256] = "";
      if (w.have_view) {
        FILE *m = fmemopen(what, sizeof what - 1, "w");
        if (m) {
          describe(m, &w.view);
          fclose(m);
        }
      }
      const char *detail = what[0] ? what : err.text;
      if (strncmp(detail, "wait: ", 6) == 0) detail += 6;
      return finish(&w, "timed_out", CLI_EXIT_TIMEOUT, "still busy after %.0f s%s%s",
                    seconds_since(w.t0), detail[0] ? ": " : "", detail);
    }
    show_progress(&w);
    if (held) pc_sleep_ms(ROUND_MS); /* let a worker take the directory */
  }
}

const cli_verb_t cli_verb_wait = {
    .name = "wait",
    .summary = "wait until every notification has been processed",
    .run = run_wait,
    .args = "[--timeout-s S] [--json]",
    .flags = CLI_USES_STORE | CLI_USES_TIMEOUT,
    .exits = CLI_EXITS_BASIC | CLI_EXIT_BIT(CLI_EXIT_TIMEOUT) | CLI_EXIT_BIT(CLI_EXIT_STALLED),
    .about =
        "Returns once no notification is pending and no transaction that could\n"
        "create one is in flight: a full scan of the notifications finds none, no\n"
        "lock is held, and the oracle handed no timestamp to anyone else during the\n"
        "scan (a check on the notifications alone would return while an observer\n"
        "is still committing the change that notifies the next one). Parked\n"
        "notifications ('percolator failures') do not count, but a retry of one\n"
        "asked for ('failures --retry') does until it has run.\n"
        "\n"
        "Meanwhile, on a terminal, a line shows the pending notifications by column\n"
        "and the live workers. When pending notifications wait for an observer that\n"
        "no live worker runs (or that nobody registered), it says which on stderr;\n"
        "when that lasts 10 s, nothing can make progress and it exits 6. It does\n"
        "not hold an embedded data directory between its checks, so a worker can\n"
        "start meanwhile. Exits 0 once idle, 5 when --timeout-s ran out first.\n",
    .options = "  --timeout-s S       give up after S seconds, exit 5 (default: no bound)\n"
               "  --json              at the end, one object: {\"status\": \"ok\" | \"timed_out\"\n"
               "                      | \"stalled\" | \"error\", \"seconds\", \"pending\", \"stalled\",\n"
               "                      \"columns\": [{\"table\", \"column\", \"pending\", \"stalled\",\n"
               "                      \"observers\": [{\"name\", \"live_workers\"}]}],\n"
               "                      \"live_workers\": [...]}\n",
    .example = "percolator --config cluster.json wait --timeout-s 60\n",
};
