/* deadline.h — the deadline of the call a thread is making, and whether
 * that call was abandoned.
 *
 * store.h's operations carry no timeout argument: only a store on the
 * network can block, and it needs to know how long the transaction that
 * called it may still wait. txn.c sets this thread's deadline around every
 * store call it makes on behalf of a transaction (pc_deadline_scope), and the
 * remote store bounds each request by min(its own timeout, time left).
 *
 * A server sets the same deadline, from the one its client sent, around the
 * handler of each request (net/rpc_server.c), and a cancellation check with
 * it: the client closed its connection, or the server is stopping. Long
 * loops (the store's scans and its GC pass) ask pc_call_check between steps
 * and stop once nobody waits for what they would return. */
#ifndef PC_BASE_DEADLINE_H
#define PC_BASE_DEADLINE_H

#include <stdint.h>

#include <percolator/percolator.h>

/* Monotonic milliseconds (pc_now_mono_ms) by which this thread's current
 * call must end; 0 = none. Returns the previous value. */
uint64_t pc_deadline_set(uint64_t deadline_ms);
uint64_t pc_deadline_get(void);

/* Milliseconds a call made now may take: default_ms, cut to the time left
 * before this thread's deadline (at least 1). */
uint32_t pc_deadline_bound(uint32_t default_ms);

/* This thread's current call is abandoned once fn(ctx) returns nonzero:
 * PC_CANCEL_GONE when nobody waits for it (its client went away),
 * PC_CANCEL_STOPPING when the process stops. fn is called from this thread,
 * so it must only read what another thread may change at any time (an
 * atomic flag). fn NULL: never. */
#define PC_CANCEL_GONE 1
#define PC_CANCEL_STOPPING 2
typedef struct pc_cancel {
  int (*fn)(void *ctx);
  void *ctx;
} pc_cancel_t;

/* Installs this thread's cancellation check; returns the previous one. */
pc_cancel_t pc_cancel_set(pc_cancel_t c);

/* PC_OK while this thread's call may go on. PC_TIMEOUT once its deadline
 * has passed or it was abandoned, with a message naming what (e.g. "raw
 * scan") and which of the two. For long loops, between steps. */
pc_status_t pc_call_check(const char *what, pc_error_t *err);

/* Whether this thread may wait for another thread's work. A server's I/O
 * thread serves some reads itself (net/rpc.h's runs_inline) and must not
 * wait on a lock another thread holds across a sync or a network call: it
 * runs them between pc_nowait_begin and pc_nowait_end. Code that would wait
 * there calls pc_nowait_refuse, which returns 1 inside such a scope (the
 * caller then goes on without waiting, since its result is thrown away)
 * and 0 outside it (the caller waits as usual). pc_nowait_end returns
 * whether anything was refused: the server then runs the request again on
 * a thread that may wait. Only requests without side effects (reads) run
 * this way, so running one twice is harmless. */
void pc_nowait_begin(void);
int pc_nowait_refuse(void);
int pc_nowait_end(void);

#endif
