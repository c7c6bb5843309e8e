/* deadline.h — the deadline of the transaction call a thread is making.
 *
 * store.h's operations carry no timeout argument: only a store on the
 * network can block, and it needs to know how long the transaction that
 * called it may still wait. txn.c sets this thread's deadline around every
 * store call it makes on behalf of a transaction (pc_deadline_scope), and the
 * remote store bounds each request by min(its own timeout, time left). */
#ifndef PC_CORE_DEADLINE_H
#define PC_CORE_DEADLINE_H

#include <stdint.h>

/* Monotonic milliseconds (pc_now_mono_ms) by which this thread's current
 * call must end; 0 = none. Returns the previous value. */
uint64_t pc_deadline_set(uint64_t deadline_ms);
uint64_t pc_deadline_get(void);

/* Milliseconds a call made now may take: default_ms, cut to the time left
 * before this thread's deadline (at least 1). */
uint32_t pc_deadline_bound(uint32_t default_ms);

#endif
