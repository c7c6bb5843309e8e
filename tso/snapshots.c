/* snapshots.c — the served oracle's record of its clients' snapshot floors
 * (snapshots.h): an array of clients sorted by id, each with the connection
 * its last report came on and, once that closed, when. Entries whose grace
 * ran out are dropped as the record is next used. */
#include "tso/snapshots.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

typedef struct entry {
  uint64_t client, connection, floor;
  uint64_t closed_ms; /* 0: its connection is open; else when it closed (monotonic, + 1) */
} entry_t;

struct pc_snapshots {
  pthread_mutex_t mu;
  entry_t *v; /* sorted by client */
  size_t n, cap;
  uint32_t grace_ms;
  uint64_t started_ms;
};

pc_snapshots_t *pc_snapshots_create(uint32_t grace_ms) {
  pc_snapshots_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  s->grace_ms = grace_ms;
  s->started_ms = pc_now_mono_ms();
  return s;
}

void pc_snapshots_destroy(pc_snapshots_t *s) {
  if (!s) return;
  pthread_mutex_destroy(&s->mu);
  free(s->v);
  free(s);
}

/* The index of client, or where it goes (*found 0). Under mu. */
static size_t find(const pc_snapshots_t *s, uint64_t client, int *found) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->v[mid].client < client) lo = mid + 1;
    else hi = mid;
  }
  *found = lo < s->n && s->v[lo].client == client;
  return lo;
}

/* Drops the entries whose grace ran out. Under mu. */
static void prune(pc_snapshots_t *s, uint64_t now) {
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++) {
    const entry_t *e = &s->v[i];
    if (e->closed_ms && now - (e->closed_ms - 1) >= s->grace_ms) continue;
    s->v[k++] = *e;
  }
  s->n = k;
}

pc_status_t pc_snapshots_report(pc_snapshots_t *s, uint64_t connection, uint64_t client,
                                uint64_t floor, pc_error_t *err) {
  pthread_mutex_lock(&s->mu);
  prune(s, pc_now_mono_ms());
  int found;
  size_t i = find(s, client, &found);
  pc_status_t st = PC_OK;
  if (floor == 0) { /* the client leaves */
    if (found) memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof *s->v);
    s->n -= found;
    goto out;
  }
  if (!found) {
    size_t on_conn = 0;
    for (size_t k = 0; k < s->n; k++) on_conn += s->v[k].connection == connection;
    if (s->n >= PC_SNAPSHOTS_MAX || on_conn >= PC_SNAPSHOTS_PER_CONNECTION) {
      st = pc_error_set(err, PC_BUSY,
                        "report: the oracle keeps the snapshots of at most %u clients, %u per "
                        "connection",
                        PC_SNAPSHOTS_MAX, PC_SNAPSHOTS_PER_CONNECTION);
      goto out;
    }
    if (s->n == s->cap) {
      size_t cap = s->cap ? 2 * s->cap : 16;
      entry_t *v = realloc(s->v, cap * sizeof *v);
      if (!v) {
        st = pc_error_set(err, PC_NOMEM, "out of memory");
        goto out;
      }
      s->v = v;
      s->cap = cap;
    }
    memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof *s->v);
    s->n++;
    s->v[i].client = client;
  }
  s->v[i].connection = connection;
  s->v[i].floor = floor;
  s->v[i].closed_ms = 0;
out:
  pthread_mutex_unlock(&s->mu);
  return st;
}

void pc_snapshots_closed(pc_snapshots_t *s, uint64_t connection) {
  pthread_mutex_lock(&s->mu);
  uint64_t now = pc_now_mono_ms();
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i].connection == connection && !s->v[i].closed_ms) s->v[i].closed_ms = now + 1;
  pthread_mutex_unlock(&s->mu);
}

void pc_snapshots_oldest(pc_snapshots_t *s, uint64_t *oldest, int *complete, uint32_t *clients) {
  pthread_mutex_lock(&s->mu);
  uint64_t now = pc_now_mono_ms();
  prune(s, now);
  uint64_t o = UINT64_MAX;
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i].floor < o) o = s->v[i].floor;
  *oldest = o;
  *complete = now - s->started_ms >= s->grace_ms;
  *clients = (uint32_t)s->n;
  pthread_mutex_unlock(&s->mu);
}
