/* dedup_internal.h — what the files of the dedup plugin share: the names of
 * its tables and cells (dedup.c lists them all) and the index observer
 * (index.c). Private to the plugin. */
#ifndef PC_DEDUP_INTERNAL_H
#define PC_DEDUP_INTERNAL_H

#include <percolator/observer.h>

#define DD_DOCS "docs"
#define DD_DUPS "dups"
#define DD_IDX "idx"
#define DD_C_CONTENTS "doc:contents"
#define DD_C_CANON "canonical"
#define DD_C_INDEXED "indexed"
#define DD_C_TERMS "terms"
/* a string literal and its length, for the (pointer, length) arguments */
#define DD_S(lit) lit, (sizeof lit - 1)

/* The host table, for index.c's calls (set by pc_plugin_init). */
void dd_index_set_host(const pc_host_api_t *api);
/* The index observer on n cells of dups canonical (observe_batch), and on one
 * (observe); see index.c. */
pc_status_t dd_index_run(void *state, pc_txn_t *txn, const pc_notified_cell_t *cells, size_t n,
                         pc_error_t *err);
pc_status_t dd_index_one(void *state, pc_txn_t *txn, const pc_notified_cell_t *cell,
                         pc_error_t *err);

#endif
