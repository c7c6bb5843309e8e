/* zkserver.h — private ZooKeeper servers: a standalone server or an ensemble
 * of three, Debian's `zookeeper` package (its jar, run with `java`) on
 * 127.0.0.1 with free ports picked at start, in a directory of their own,
 * never a service assumed to be running. The playground, the tests and the
 * benchmarks start their ZooKeeper through this. Each server is a child of
 * the calling thread that dies with it (PR_SET_PDEATHSIG) and is stopped by
 * its process id. */
#ifndef PC_PLAYGROUND_ZKSERVER_H
#define PC_PLAYGROUND_ZKSERVER_H

#include <sys/types.h>

#include <percolator/percolator.h>

#define PC_ZKSERVER_JAR "/usr/share/java/zookeeper.jar"
#define PC_ZKSERVER_MAX 3

typedef struct pc_zkserver pc_zkserver_t;

/* Starts n (1 or 3) servers with their files under dir (created; zkI/ for
 * server I: zoo.cfg, data/, server.log) and waits up to wait_ms until each
 * serves. tickTime is 500 ms, so sessions may last 1 to 30 s. Returns NULL
 * with err naming the server and its log on failure, after stopping what it
 * started. Stop with pc_zkserver_stop. */
pc_zkserver_t *pc_zkserver_start(const char *dir, int n, int wait_ms, pc_error_t *err);

/* Kills every server (SIGKILL: ZooKeeper's log makes that safe) and
 * releases zk; the directory stays. NULL is a no-op. */
void pc_zkserver_stop(pc_zkserver_t *zk);

/* "127.0.0.1:P1,127.0.0.1:P2,..." */
const char *pc_zkserver_connect(const pc_zkserver_t *zk);
int pc_zkserver_count(const pc_zkserver_t *zk);
const char *pc_zkserver_dir(const pc_zkserver_t *zk);
/* The client port of server i. */
int pc_zkserver_port(const pc_zkserver_t *zk, int i);
/* The pid of server i (0 when stopped). */
pid_t pc_zkserver_pid(const pc_zkserver_t *zk, int i);

/* SIGKILLs server i and reaps it. */
void pc_zkserver_kill(pc_zkserver_t *zk, int i);
/* Starts server i again on its ports and data, without waiting; -1 when it
 * cannot be started. */
int pc_zkserver_restart(pc_zkserver_t *zk, int i);
/* Waits up to timeout_ms until server i answers as part of a serving
 * ensemble: 1 when it does, 0 when it does not, -1 when it exited. */
int pc_zkserver_wait_serving(pc_zkserver_t *zk, int i, int timeout_ms);
/* Whether server i has exited (reaped: its pid is 0 from then on). */
int pc_zkserver_exited(pc_zkserver_t *zk, int i);
/* The index of the server that leads (or the standalone one), or -1. */
int pc_zkserver_leader(pc_zkserver_t *zk);
/* The client connections server i has now (its `srvr` answer), or -1. */
int pc_zkserver_connections(pc_zkserver_t *zk, int i);

#endif
