/* zkharness.h — private ZooKeeper servers for the tests: a standalone server
 * or an ensemble of three, Debian's `zookeeper` package run on 127.0.0.1 with
 * ephemeral ports in a temporary folder, never a service assumed to be
 * running. The servers are children of the test process that die with it
 * (PR_SET_PDEATHSIG), so a failing or aborted test leaves none behind; the
 * harness stops them by process id. Every helper aborts the test program on
 * a setup failure, naming the server's log. */
#ifndef PC_TESTS_ZKHARNESS_H
#define PC_TESTS_ZKHARNESS_H

#include <sys/types.h>

typedef struct tu_zk tu_zk_t;

/* Starts n (1 or 3) servers and waits until the ensemble serves. */
tu_zk_t *tu_zk_start(int n);
/* Kills every server and removes the folder. */
void tu_zk_stop(tu_zk_t *zk);
/* "127.0.0.1:P1,127.0.0.1:P2,..." */
const char *tu_zk_connect(const tu_zk_t *zk);
int tu_zk_count(const tu_zk_t *zk);
/* SIGKILLs server i (0-based) and reaps it. */
void tu_zk_kill(tu_zk_t *zk, int i);
/* Starts server i again on its port and data, without waiting. */
void tu_zk_restart(tu_zk_t *zk, int i);
/* Waits (up to timeout_ms) until server i answers as part of a serving
 * ensemble; 1 when it does. */
int tu_zk_wait_serving(tu_zk_t *zk, int i, int timeout_ms);
/* The index of the server that leads (or the standalone one), or -1. */
int tu_zk_leader(tu_zk_t *zk);
/* The client connections server i has now (its `srvr` answer), or -1. */
int tu_zk_connections(tu_zk_t *zk, int i);
/* The pid of server i (0 when stopped). */
pid_t tu_zk_pid(const tu_zk_t *zk, int i);

#endif
