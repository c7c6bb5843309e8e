/* tablet_wire.h — encoding of store.h's arguments and results in the bodies
 * of the tablet protocol (see tablet.h), shared by the tablet server and the
 * remote store. Decoders read from a pc_rd_t and copy what must outlive the
 * request body into an arena. */
#ifndef PC_TABLET_TABLET_WIRE_H
#define PC_TABLET_TABLET_WIRE_H

#include "core/store.h"

/* Owns NUL-terminated copies of strings decoded from a body. */
typedef struct pc_arena {
  char **ptrs;
  size_t n, cap;
} pc_arena_t;

/* A copy of p[0..n) plus a NUL, owned by the arena; NULL on allocation failure. */
char *pc_arena_dup(pc_arena_t *a, const char *p, size_t n);
void pc_arena_free(pc_arena_t *a);

int pc_wire_put_cell(pc_buf_t *b, const pc_cell_t *c);
/* Decodes a cell whose strings are copied into a; -1 on malformed input. */
int pc_wire_get_cell(pc_rd_t *r, pc_arena_t *a, pc_cell_t *c);

int pc_wire_put_mutation(pc_buf_t *b, const pc_mutation_t *m);
int pc_wire_get_mutation(pc_rd_t *r, pc_arena_t *a, pc_mutation_t *m);

int pc_wire_put_lock(pc_buf_t *b, const pc_lock_info_t *l);
/* Decodes into l, which it initialises (its buffers are its own; release
 * with pc_lock_info_free). On -1, l holds nothing to release. */
int pc_wire_get_lock(pc_rd_t *r, pc_lock_info_t *l);

int pc_wire_put_raw(pc_buf_t *b, const pc_raw_cell_t *c);
/* Decodes a raw cell whose strings point into the body or into a. */
int pc_wire_get_raw(pc_rd_t *r, pc_arena_t *a, pc_raw_cell_t *c);

/* A notification: cell u64 ts u8 weak (the bucket is the cell's row's). */
int pc_wire_put_notification(pc_buf_t *b, const pc_notification_t *n);
/* Decodes a notification whose strings are copied into a; -1 on malformed input. */
int pc_wire_get_notification(pc_rd_t *r, pc_arena_t *a, pc_notification_t *n);

/* An optional string: u8 present, str. */
int pc_wire_put_opt(pc_buf_t *b, const char *p, size_t n);
/* *p = NULL when absent; strings copied into a (NUL-terminated). */
int pc_wire_get_opt(pc_rd_t *r, pc_arena_t *a, const char **p, size_t *n);

#endif
