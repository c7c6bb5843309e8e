/* notifyindex.h — the embedded store's notifications in memory
 * (core/store_local.c keeps it; core/store_notify.c reads it).
 *
 * Why: a notification is a LevelDB key that lives from the commit that
 * writes it to the worker's delete, and a deleted key stays in LevelDB as a
 * tombstone until compaction reaches it, so a scan of the notification key
 * space walks over every notification deleted since, and the workers scan
 * all the time. This index holds the keys that are live, ordered as in
 * LevelDB, so that finding them costs what is pending.
 *
 * Coherence: it is kept a superset of the live notification keys. The store
 * adds a batch's notifications before it writes the batch and removes its
 * deletes after the write succeeded (a failed write removes nothing), and it
 * fills the index from LevelDB when it opens. A key here that LevelDB lacks
 * makes a worker look at a cell for nothing, at worst; a key missing here
 * would be a notification nobody finds, which cannot happen. Every change
 * to a cell's notifications is made under its row latch, so per cell the
 * index follows LevelDB's order; the mutex inside only protects the
 * structure. Memory: one entry per pending notification (the key, about
 * 40 bytes plus the table, row and column). */
#ifndef PC_CORE_NOTIFYINDEX_H
#define PC_CORE_NOTIFYINDEX_H

#include <stddef.h>

#include "core/keys.h"

typedef struct pc_nindex pc_nindex_t;

/* An empty index; NULL when out of memory. Release with pc_nindex_destroy. */
pc_nindex_t *pc_nindex_create(void);
/* The same for keys of another key space, in one sorted array instead of a
 * bucket per notification bucket: the store keeps the lock index's live
 * keys this way (a few, the locks in flight), for the same reason. */
pc_nindex_t *pc_nindex_create_flat(void);
void pc_nindex_destroy(pc_nindex_t *x);

/* Records notification key ('n' B ..., keys.h) with its kind byte (value),
 * replacing an entry of the same key. 0, or -1 when out of memory (the
 * index is then unchanged). */
int pc_nindex_put(pc_nindex_t *x, const char *key, size_t klen, char kind);

/* Forgets key (nothing when absent). */
void pc_nindex_del(pc_nindex_t *x, const char *key, size_t klen);

/* Appends to out the entries with from <= key (from NULL: from the first),
 * in key order, while key < end (end NULL: no bound) and, when plen > 0,
 * the key's first plen bytes equal from's; at most max. Each entry is
 * u32 klen, the key, the kind byte (pc_nindex_next reads them). Returns the
 * number appended, or -1 when out could not grow. */
long pc_nindex_copy(pc_nindex_t *x, const char *from, size_t flen, size_t plen, const char *end,
                    size_t elen, size_t max, pc_buf_t *out);

/* Reads the entry at *pos of a pc_nindex_copy buffer and advances *pos;
 * 0 at the end. */
int pc_nindex_next(const pc_buf_t *buf, size_t *pos, const char **key, size_t *klen, char *kind);

/* How many entries it holds. */
size_t pc_nindex_count(pc_nindex_t *x);

#endif
