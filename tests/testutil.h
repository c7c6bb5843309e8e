/* testutil.h — helpers shared by the test programs: temporary directories
 * that are removed afterwards, and opening a fresh database in one. */
#ifndef PC_TESTS_TESTUTIL_H
#define PC_TESTS_TESTUTIL_H

#include <percolator/percolator.h>

/* Creates a fresh directory under $TMPDIR (or /tmp); returns a malloc'd path.
 * Aborts the test program on failure. */
char *tu_mkdtemp(const char *tag);

/* Removes path recursively and frees it. */
void tu_rmtree(char *path);

/* Opens (creating) a database in dir with the given lock TTL (0 = default). Aborts on failure. */
pc_db_t *tu_open(const char *dir, uint32_t lock_ttl_ms);

/* Convenience wrappers over one transaction that abort the program on
 * unexpected errors; tu_get returns a malloc'd NUL-terminated copy or NULL when not found. */
char *tu_get(pc_txn_t *txn, const char *table, const char *row, const char *col);
void tu_set(pc_txn_t *txn, const char *table, const char *row, const char *col, const char *val);

/* ---- helpers added for the protocol, crash and isolation tests ---------- */

/* Opens (creating) a database in dir with the given lock TTL (0 = default),
 * one-phase commit on or off and the default timeout. Aborts on failure. */
pc_db_t *tu_open_ex(const char *dir, uint32_t lock_ttl_ms, int one_phase_commit);

/* Counts the internal cells of kind in table (NULL: every table) through
 * pc_db_raw_scan. Aborts on failure. */
size_t tu_raw_count(pc_db_t *db, const char *table, pc_cell_kind_t kind);

/* Writes val into each (table, row, col) of rows[0..n) in one transaction and
 * commits it. Aborts on failure. */
void tu_put_rows(pc_db_t *db, const char *table, const char *const *rows, size_t n,
                 const char *col, const char *val);

#endif
