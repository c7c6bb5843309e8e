/* zkserver.c — private ZooKeeper servers (zkserver.h). Each server is
 * `java ... QuorumPeerMain zoo.cfg` from Debian's zookeeper package, with a
 * small heap and the serial collector so that three fit on a loaded
 * two-core machine; whether it serves is asked with the `srvr` four-letter
 * word on its client port. */
#include "playground/zkserver.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"

struct pc_zkserver {
  int n;
  char dir[4096];
  int client_port[PC_ZKSERVER_MAX], quorum_port[PC_ZKSERVER_MAX], election_port[PC_ZKSERVER_MAX];
  pid_t pid[PC_ZKSERVER_MAX];
  char connect[256];
};

/* Free ports of 127.0.0.1: bound to port 0 together, so that they differ,
 * then released. */
static int pick_ports(int *ports, int n) {
  int fds[3 * PC_ZKSERVER_MAX], ok = 1;
  for (int k = 0; k < n; k++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    fds[k] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[k] < 0 || bind(fds[k], (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fds[k], (struct sockaddr *)&a, &len) != 0)
      ok = 0;
    ports[k] = ntohs(a.sin_port);
  }
  for (int k = 0; k < n; k++)
    if (fds[k] >= 0) close(fds[k]);
  return ok ? 0 : -1;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  int ok = f && fputs(text, f) >= 0;
  if (f && fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}

static int write_config(const pc_zkserver_t *zk, int i) {
  char path[4200], text[5200], servers[512] = "";
  snprintf(path, sizeof path, "%s/zk%d", zk->dir, i);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/zk%d/data", zk->dir, i);
  mkdir(path, 0700);
  if (zk->n > 1) {
    for (int k = 0; k < zk->n; k++) {
      size_t used = strlen(servers);
      snprintf(servers + used, sizeof servers - used, "server.%d=127.0.0.1:%d:%d\n", k + 1,
               zk->quorum_port[k], zk->election_port[k]);
    }
    char myid[16];
    snprintf(myid, sizeof myid, "%d\n", i + 1);
    snprintf(path, sizeof path, "%s/zk%d/data/myid", zk->dir, i);
    if (write_text(path, myid) != 0) return -1;
  }
  /* tickTime 500: sessions of 1..30 s (the bounds below); the limits bound
   * how long a restarted follower may take to catch up */
  snprintf(text, sizeof text,
           "tickTime=500\ninitLimit=40\nsyncLimit=10\ndataDir=%s/zk%d/data\n"
           "clientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
           "4lw.commands.whitelist=srvr,ruok\nmaxClientCnxns=0\n"
           "minSessionTimeout=1000\nmaxSessionTimeout=30000\n%s",
           zk->dir, i, zk->client_port[i], servers);
  snprintf(path, sizeof path, "%s/zk%d/zoo.cfg", zk->dir, i);
  if (write_text(path, text) != 0) return -1;
  snprintf(path, sizeof path, "%s/zk%d/log4j.properties", zk->dir, i);
  return write_text(path,
                    "log4j.rootLogger=WARN, C\nlog4j.appender.C=org.apache.log4j.ConsoleAppender\n"
                    "log4j.appender.C.layout=org.apache.log4j.PatternLayout\n"
                    "log4j.appender.C.layout.ConversionPattern=%d %-5p %m%n\n");
}

/* Whether server i's log says that one of its ports was in use. */
static int port_was_taken(const pc_zkserver_t *zk, int i) {
  char path[4200], buf[8192];
  snprintf(path, sizeof path, "%s/zk%d/server.log", zk->dir, i);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int found = 0;
  while (!found && fgets(buf, sizeof buf, f))
    found = strstr(buf, "Address already in use") != NULL || strstr(buf, "BindException") != NULL;
  fclose(f);
  return found;
}

/* Empties server i's snapshots and transaction logs (a start on new ports
 * is a new ensemble); its myid stays. */
static int clear_data(const pc_zkserver_t *zk, int i) {
  char path[4200], file[4500];
  snprintf(path, sizeof path, "%s/zk%d/data/version-2", zk->dir, i);
  DIR *d = opendir(path);
  if (!d) return errno == ENOENT ? 0 : -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    unlink(file);
  }
  closedir(d);
  return 0;
}

int pc_zkserver_restart(pc_zkserver_t *zk, int i) {
  char cfg[4200], cp[4300], log[4200];
  snprintf(cfg, sizeof cfg, "%s/zk%d/zoo.cfg", zk->dir, i);
  snprintf(cp, sizeof cp, "%s/zk%d:" PC_ZKSERVER_JAR, zk->dir, i);
  snprintf(log, sizeof log, "%s/zk%d/server.log", zk->dir, i);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the process that started it */
    if (getppid() != parent) _exit(1);
    setpgid(0, 0); /* a terminal's Ctrl-C goes to the playground, which stops it last */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the caller's blocked signals are its own */
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(1);
    execlp("java", "java", "-Xmx96m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-XX:-UsePerfData", "-Djava.net.preferIPv4Stack=true", "-cp", cp,
           "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg, (char *)NULL);
    _exit(127);
  }
  zk->pid[i] = pid;
  return 0;
}

/* The `srvr` answer of server i (into buf), or "" when it does not answer. */
static void srvr(const pc_zkserver_t *zk, int i, char *buf, size_t cap) {
  buf[0] = '\0';
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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

int pc_zkserver_exited(pc_zkserver_t *zk, int i) {
  if (zk->pid[i] <= 0) return 1;
  if (waitpid(zk->pid[i], NULL, WNOHANG) != zk->pid[i]) return 0;
  zk->pid[i] = 0;
  return 1;
}

int pc_zkserver_wait_serving(pc_zkserver_t *zk, int i, int timeout_ms) {
  uint64_t until = pc_now_mono_ms() + (uint64_t)timeout_ms;
  char buf[2048];
  do {
    srvr(zk, i, buf, sizeof buf);
    if (strstr(buf, "Mode: ")) return 1;
    if (pc_zkserver_exited(zk, i)) return -1;
    pc_sleep_ms(100);
  } while (pc_now_mono_ms() < until);
  return 0;
}

int pc_zkserver_leader(pc_zkserver_t *zk) {
  char buf[2048];
  for (int i = 0; i < zk->n; i++) {
    if (zk->pid[i] <= 0) continue;
    srvr(zk, i, buf, sizeof buf);
    if (strstr(buf, "Mode: leader") || strstr(buf, "Mode: standalone")) return i;
  }
  return -1;
}

int pc_zkserver_connections(pc_zkserver_t *zk, int i) {
  char buf[2048];
  srvr(zk, i, buf, sizeof buf);
  const char *p = strstr(buf, "Connections: ");
  return p ? atoi(p + strlen("Connections: ")) : -1;
}

pc_zkserver_t *pc_zkserver_start(const char *dir, int n, int wait_ms, pc_error_t *err) {
  if (n < 1 || n > PC_ZKSERVER_MAX) {
    pc_error_set(err, PC_INVALID, "zookeeper: %d servers: 1 to %d", n, PC_ZKSERVER_MAX);
    return NULL;
  }
  if (access(PC_ZKSERVER_JAR, R_OK) != 0) {
    pc_error_set(err, PC_UNAVAILABLE,
                 "zookeeper: %s is missing: install Debian's zookeeper package "
                 "(bash .ci/setup deps)", PC_ZKSERVER_JAR);
    return NULL;
  }
  pc_zkserver_t *zk = calloc(1, sizeof *zk);
  if (!zk) {
    pc_error_set(err, PC_NOMEM, "out of memory");
    return NULL;
  }
  zk->n = n;
  snprintf(zk->dir, sizeof zk->dir, "%s", dir);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    pc_error_set(err, PC_IO_ERROR, "zookeeper: cannot create %s: %s", dir, strerror(errno));
    free(zk);
    return NULL;
  }
  /* The ports are free when picked, but another process may bind one (or
   * take it as the local port of a connection) before the JVM does: a server
   * that exits on a port in use is started again, with all of them, on new
   * ports. */
  for (int attempt = 1;; attempt++) {
    int ports[3 * PC_ZKSERVER_MAX];
    if (pick_ports(ports, 3 * n) != 0) {
      pc_error_set(err, PC_IO_ERROR, "zookeeper: cannot pick free ports on 127.0.0.1");
      pc_zkserver_stop(zk);
      return NULL;
    }
    zk->connect[0] = '\0';
    for (int i = 0; i < n; i++) {
      zk->client_port[i] = ports[3 * i];
      zk->quorum_port[i] = ports[3 * i + 1];
      zk->election_port[i] = ports[3 * i + 2];
      size_t used = strlen(zk->connect);
      snprintf(zk->connect + used, sizeof zk->connect - used, "%s127.0.0.1:%d", i ? "," : "",
               zk->client_port[i]);
    }
    for (int i = 0; i < n; i++)
      if (clear_data(zk, i) != 0 || write_config(zk, i) != 0) {
        pc_error_set(err, PC_IO_ERROR, "zookeeper: cannot write %s/zk%d/zoo.cfg: %s", dir, i,
                     strerror(errno));
        pc_zkserver_stop(zk);
        return NULL;
      }
    for (int i = 0; i < n; i++)
      if (pc_zkserver_restart(zk, i) != 0) {
        pc_error_set(err, PC_IO_ERROR, "zookeeper: cannot start server %d: fork: %s", i,
                     strerror(errno));
        pc_zkserver_stop(zk);
        return NULL;
      }
    /* a JVM takes seconds to start on a loaded machine */
    int failed = -1, r = 1;
    for (int i = 0; i < n && failed < 0; i++) {
      r = pc_zkserver_wait_serving(zk, i, wait_ms);
      if (r != 1) failed = i;
    }
    if (failed < 0) return zk;
    int again = r < 0 && attempt < 4 && port_was_taken(zk, failed);
    if (!again) {
      pc_error_set(err, PC_UNAVAILABLE, "zookeeper: server %d %s (see %s/zk%d/server.log)", failed,
                   r < 0 ? "exited while starting" : "did not serve in time", dir, failed);
      pc_zkserver_stop(zk);
      return NULL;
    }
    for (int i = 0; i < n; i++) {
      char log[4200];
      pc_zkserver_kill(zk, i);
      snprintf(log, sizeof log, "%s/zk%d/server.log", dir, i);
      unlink(log); /* the next attempt's log says why it failed, if it does */
    }
  }
  return zk;
}

void pc_zkserver_kill(pc_zkserver_t *zk, int i) {
  if (zk->pid[i] <= 0) return;
  kill(zk->pid[i], SIGKILL);
  waitpid(zk->pid[i], NULL, 0);
  zk->pid[i] = 0;
}

void pc_zkserver_stop(pc_zkserver_t *zk) {
  if (!zk) return;
  for (int i = 0; i < zk->n; i++) pc_zkserver_kill(zk, i);
  free(zk);
}

const char *pc_zkserver_connect(const pc_zkserver_t *zk) { return zk->connect; }
int pc_zkserver_count(const pc_zkserver_t *zk) { return zk->n; }
const char *pc_zkserver_dir(const pc_zkserver_t *zk) { return zk->dir; }
int pc_zkserver_port(const pc_zkserver_t *zk, int i) { return zk->client_port[i]; }
pid_t pc_zkserver_pid(const pc_zkserver_t *zk, int i) { return zk->pid[i]; }
