/* journal.c — pc_bench_journal: what the worker's in-flight journal
 * (notify/journal.c) costs an observer run.
 *
 * Before each callback a worker thread writes the run (cell, observer,
 * notification ts) into its slot of a file mapped shared and marks it busy;
 * after, idle. This times that pair of calls per run, for a journal in a
 * file (what a worker with workers.journal_dir does) and in memory (what
 * the watchdog needs anyway), with cells shaped like the dedup indexer's
 * (a document URL as the row, doc:contents as the column). The baseline, in
 * the same run, is the transaction of the trivial observer of
 * pc_bench_notify (begin, get a cell, set another with the observer's ack
 * in the same row, one-phase commit) on an embedded store with sync on, as
 * a worker runs it; the ratio is the journal's cost over that run's.
 * Medians over --rounds rounds. Prints one JSON document. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <percolator/percolator.h>

#include "benchutil.h"
#include "core/db.h"
#include "notify/engine.h"

#define WHO "pc_bench_journal"

static void none(void *ctx, const pc_journal_run_t *run) {
  (void)ctx;
  (void)run;
}
static void no_counts(void *ctx, const char *o, const uint64_t *v) {
  (void)ctx;
  (void)o;
  (void)v;
}

/* Nanoseconds per begin + end over n runs of 256 URLs. */
static double journal_ns(const char *dir, int n) {
  const char *names[] = {"dedup"};
  pc_error_t err;
  journal_t *j = pc_journal_open(dir, 8, names, 1, none, no_counts, NULL, &err);
  if (!j) {
    fprintf(stderr, WHO ": journal: %s\n", err.text);
    exit(1);
  }
  char rows[256][80];
  for (int i = 0; i < 256; i++)
    snprintf(rows[i], sizeof rows[i], "https://www.example.org/articles/2024/%05d-notes.html",
             i * 7919);
  uint64_t t0 = bu_now_ns();
  for (int i = 0; i < n; i++) {
    pc_cell_t c = {"docs", rows[i & 255], strlen(rows[i & 255]), "doc:contents", 12};
    pc_journal_begin(j, (uint32_t)(i & 7), &c, "dedup", (uint64_t)i + 1);
    (void)pc_journal_end(j, (uint32_t)(i & 7));
  }
  double ns = (double)(bu_now_ns() - t0) / n;
  pc_journal_close(j);
  return ns;
}

/* Nanoseconds per observer-shaped transaction over n runs. */
static double txn_ns(const char *dir, int n) {
  pc_options_t *o = pc_options_create();
  pc_options_set_create_if_missing(o, 1);
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, dir, &err);
  pc_options_destroy(o);
  if (!db) {
    fprintf(stderr, WHO ": open: %s\n", err.text);
    exit(1);
  }
  pc_buf_t ack = {0};
  if (pc_ack_column(&ack, "dedup", "doc:contents", 12) != 0) exit(1);
  uint64_t t0 = bu_now_ns();
  for (int i = 0; i < n; i++) {
    char row[80];
    int rl = snprintf(row, sizeof row, "https://www.example.org/articles/2024/%05d-notes.html",
                      i & 255);
    pc_txn_t *t = pc_txn_begin(db, &err);
    char *v = NULL;
    size_t vl = 0;
    pc_status_t st = t ? pc_txn_get(t, "docs", row, (size_t)rl, "doc:contents", 12, &v, &vl, &err)
                       : PC_INTERNAL;
    pc_free(v);
    if (st == PC_OK || st == PC_NOT_FOUND)
      st = pc_txn_set(t, "docs", row, (size_t)rl, "doc:copy", 8, "x", 1, &err);
    uint64_t ts = pc_txn_start_ts(t);
    char b[8];
    for (int k = 0; k < 8; k++) b[k] = (char)(ts >> (56 - 8 * k));
    if (st == PC_OK)
      st = pc_txn_set_system(t, "docs", row, (size_t)rl, ack.p, ack.len, b, 8, &err);
    if (st == PC_OK) st = pc_txn_commit(t, &err);
    if (st != PC_OK) {
      fprintf(stderr, WHO ": run: %s\n", err.text);
      exit(1);
    }
    pc_txn_destroy(t);
  }
  double ns = (double)(bu_now_ns() - t0) / n;
  pc_buf_free(&ack);
  pc_db_close(db);
  return ns;
}

int main(int argc, char **argv) {
  int rounds = 5, runs = 200000, txns = 2000;
  const char *parent = "/tmp";
  static const struct option opts[] = {{"rounds", required_argument, NULL, 'r'},
                                       {"runs", required_argument, NULL, 'n'},
                                       {"txns", required_argument, NULL, 't'},
                                       {"dir", required_argument, NULL, 'd'},
                                       {NULL, 0, NULL, 0}};
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (c == 'd') {
      parent = optarg;
      continue;
    }
    if ((c != 'r' && c != 'n' && c != 't') || bu_parse_u64(optarg, 1, 100000000, &v) != 0) {
      fprintf(stderr, "usage: " WHO " [--rounds N] [--runs N] [--txns N] [--dir D]\n");
      return 2;
    }
    if (c == 'r') rounds = (int)v;
    else if (c == 'n') runs = (int)v;
    else txns = (int)v;
  }
  double file[64], mem[64], txn[64];
  if (rounds > 64) rounds = 64;
  for (int r = 0; r < rounds; r++) {
    char dir[4096], jdir[4200];
    if (bu_make_temp_dir(dir, sizeof dir, parent, "pc-bench-journal", WHO) != 0) return 1;
    snprintf(jdir, sizeof jdir, "%s/journal", dir);
    file[r] = journal_ns(jdir, runs);
    mem[r] = journal_ns(NULL, runs);
    snprintf(jdir, sizeof jdir, "%s/store", dir);
    txn[r] = txn_ns(jdir, txns);
    bu_remove_tree(dir);
  }
  double f = bu_median(file, rounds), m = bu_median(mem, rounds), t = bu_median(txn, rounds);
  json_t *doc = json_object();
  bu_json_head(doc, "journal");
  json_object_set_new(doc, "rounds", json_integer(rounds));
  json_object_set_new(doc, "journal_file_ns_per_run", json_real(f));
  json_object_set_new(doc, "journal_memory_ns_per_run", json_real(m));
  json_object_set_new(doc, "baseline_observer_txn_ns", json_real(t));
  json_object_set_new(doc, "ratio_file_to_txn", json_real(f / t));
  char *out = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  puts(out);
  free(out);
  json_decref(doc);
  return 0;
}
