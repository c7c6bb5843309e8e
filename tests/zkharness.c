/* zkharness.c — private ZooKeeper servers for the tests (zkharness.h). Each
 * server is `java ... QuorumPeerMain zoo.cfg` from Debian's zookeeper package,
 * with a small heap and the serial collector so that three fit on a loaded
 * two-core machine; whether it serves is asked with the `srvr` four-letter
 * word on its client port. */
#include "tests/zkharness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ZK_JAR "/usr/share/java/zookeeper.jar"
#define MAX_SERVERS 3

struct tu_zk {
  int n;
  char dir[256];
  int client_port[MAX_SERVERS], quorum_port[MAX_SERVERS], election_port[MAX_SERVERS];
  pid_t pid[MAX_SERVERS];
  char connect[256];
};

static void fail(const tu_zk_t *zk, int i, const char *what) {
  fprintf(stderr, "zookeeper test server: %s", what);
  if (zk && i >= 0) fprintf(stderr, " (see %s/zk%d/server.log)", zk->dir, i);
  fprintf(stderr, "\n");
  abort();
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Free ports: bound to port 0 together, so that they differ, then released. */
static void pick_ports(int *ports, int n) {
  int fds[3 * MAX_SERVERS];
  for (int k = 0; k < n; k++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    fds[k] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[k] < 0 || bind(fds[k], (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fds[k], (struct sockaddr *)&a, &len) != 0)
      fail(NULL, -1, "cannot pick a free port");
    ports[k] = ntohs(a.sin_port);
  }
  for (int k = 0; k < n; k++) close(fds[k]);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) fail(NULL, -1, path);
}

static void write_config(const tu_zk_t *zk, int i) {
  char path[512], text[2048], servers[512] = "";
  snprintf(path, sizeof path, "%s/zk%d", zk->dir, i);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/zk%d/data", zk->dir, i);
  mkdir(path, 0755);
  if (zk->n > 1) {
    for (int k = 0; k < zk->n; k++) {
      size_t used = strlen(servers);
      snprintf(servers + used, sizeof servers - used, "server.%d=127.0.0.1:%d:%d\n", k + 1,
               zk->quorum_port[k], zk->election_port[k]);
    }
    char myid[16];
    snprintf(myid, sizeof myid, "%d\n", i + 1);
    snprintf(path, sizeof path, "%s/zk%d/data/myid", zk->dir, i);
    write_text(path, myid);
  }
  /* tickTime 500: sessions of 1..10 s; the limits bound how long a restarted
   * follower may take to catch up */
  snprintf(text, sizeof text,
           "tickTime=500\ninitLimit=40\nsyncLimit=10\ndataDir=%s/zk%d/data\n"
           "clientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
           "4lw.commands.whitelist=srvr,ruok\nmaxClientCnxns=0\n"
           "minSessionTimeout=1000\nmaxSessionTimeout=30000\n%s",
           zk->dir, i, zk->client_port[i], servers);
  snprintf(path, sizeof path, "%s/zk%d/zoo.cfg", zk->dir, i);
  write_text(path, text);
  snprintf(path, sizeof path, "%s/zk%d/log4j.properties", zk->dir, i);
  write_text(path, "log4j.rootLogger=WARN, C\nlog4j.appender.C=org.apache.log4j.ConsoleAppender\n"
                   "log4j.appender.C.layout=org.apache.log4j.PatternLayout\n"
                   "log4j.appender.C.layout.ConversionPattern=%d %-5p %m%n\n");
}

void tu_zk_restart(tu_zk_t *zk, int i) {
  char cfg[512], cp[600], log[512];
  snprintf(cfg, sizeof cfg, "%s/zk%d/zoo.cfg", zk->dir, i);
  snprintf(cp, sizeof cp, "%s/zk%d:" ZK_JAR, zk->dir, i);
  snprintf(log, sizeof log, "%s/zk%d/server.log", zk->dir, i);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) fail(zk, i, "fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
    if (getppid() != parent) _exit(1);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(1);
    execlp("java", "java", "-Xmx96m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-XX:-UsePerfData", "-Djava.net.preferIPv4Stack=true", "-cp", cp,
           "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg, (char *)NULL);
    _exit(127);
  }
  zk->pid[i] = pid;
}

/* The `srvr` answer of server i (into buf), or "" when it does not answer. */
static void srvr(const tu_zk_t *zk, int i, char *buf, size_t cap) {
  buf[0] = '\0';
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)zk->client_port[i])};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  size_t len = 0;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, "srvr", 4) == 4) {
    ssize_t r;
    while (len + 1 < cap && (r = read(fd, buf + len, cap - 1 - len)) > 0) len += (size_t)r;
  }
  buf[len] = '\0';
  close(fd);
}

int tu_zk_wait_serving(tu_zk_t *zk, int i, int timeout_ms) {
  long long until = now_ms() + timeout_ms;
  char buf[2048];
  do {
    srvr(zk, i, buf, sizeof buf);
    if (strstr(buf, "Mode: ")) return 1;
    int status;
    if (zk->pid[i] > 0 && waitpid(zk->pid[i], &status, WNOHANG) == zk->pid[i]) {
      zk->pid[i] = 0;
      fail(zk, i, "server exited while starting");
    }
    sleep_ms(100);
  } while (now_ms() < until);
  return 0;
}

int tu_zk_leader(tu_zk_t *zk) {
  char buf[2048];
  for (int i = 0; i < zk->n; i++) {
    if (zk->pid[i] <= 0) continue;
    srvr(zk, i, buf, sizeof buf);
    if (strstr(buf, "Mode: leader") || strstr(buf, "Mode: standalone")) return i;
  }
  return -1;
}

int tu_zk_connections(tu_zk_t *zk, int i) {
  char buf[2048];
  srvr(zk, i, buf, sizeof buf);
  const char *p = strstr(buf, "Connections: ");
  return p ? atoi(p + strlen("Connections: ")) : -1;
}

tu_zk_t *tu_zk_start(int n) {
  if (n < 1 || n > MAX_SERVERS) fail(NULL, -1, "want 1..3 servers");
  if (access(ZK_JAR, R_OK) != 0)
    fail(NULL, -1, ZK_JAR " is missing: install Debian's zookeeper package (.ci/setup deps)");
  tu_zk_t *zk = calloc(1, sizeof *zk);
  if (!zk) abort();
  zk->n = n;
  const char *tmp = getenv("TMPDIR");
  snprintf(zk->dir, sizeof zk->dir, "%s/pc-zk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(zk->dir)) fail(NULL, -1, "cannot create a temporary folder");
  int ports[3 * MAX_SERVERS];
  pick_ports(ports, 3 * n);
  for (int i = 0; i < n; i++) {
    zk->client_port[i] = ports[3 * i];
    zk->quorum_port[i] = ports[3 * i + 1];
    zk->election_port[i] = ports[3 * i + 2];
    size_t used = strlen(zk->connect);
    snprintf(zk->connect + used, sizeof zk->connect - used, "%s127.0.0.1:%d", i ? "," : "",
             zk->client_port[i]);
  }
  for (int i = 0; i < n; i++) write_config(zk, i);
  for (int i = 0; i < n; i++) tu_zk_restart(zk, i);
  /* a JVM takes seconds to start on a loaded machine */
  for (int i = 0; i < n; i++)
    if (!tu_zk_wait_serving(zk, i, 90000)) fail(zk, i, "not serving after 90 s");
  return zk;
}

void tu_zk_kill(tu_zk_t *zk, int i) {
  if (zk->pid[i] <= 0) return;
  kill(zk->pid[i], SIGKILL);
  waitpid(zk->pid[i], NULL, 0);
  zk->pid[i] = 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

void tu_zk_stop(tu_zk_t *zk) {
  if (!zk) return;
  for (int i = 0; i < zk->n; i++) tu_zk_kill(zk, i);
  if (!getenv("PERCOLATOR_TEST_KEEP")) nftw(zk->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(zk);
}

const char *tu_zk_connect(const tu_zk_t *zk) { return zk->connect; }
int tu_zk_count(const tu_zk_t *zk) { return zk->n; }
pid_t tu_zk_pid(const tu_zk_t *zk, int i) { return zk->pid[i]; }
