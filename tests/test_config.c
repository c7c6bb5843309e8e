/* test_config.c — unit tests of the configuration module (config/config.h):
 * a complete file parses to the expected struct, the defaults, every class
 * of error with its exact "file:line:column: key path: what" message, the
 * tablet range rules, row bounds holding NUL bytes, loading from disk, that
 * fsync (store.sync) is on by default in the configuration, the options and
 * the databases opened from either, and
 * robustness: every truncation and thousands of random byte flips of a valid
 * file fail cleanly (run under AddressSanitizer by the sanitizer build). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/db.h"
#include "base/log.h"
#include "tablet/tablet.h"
#include "tests/testutil.h"

#define SRC "cluster.json"

/* Every key of the schema; the tablets are listed out of order and one
 * bound holds a NUL byte. No trailing newline, so that every proper prefix
 * is invalid. */
static const char full_text[] =
    "{\n"
    "  \"data_dir\": \"/var/lib/percolator\",\n"
    "  \"secret\": \"s3cr3t\",\n"
    "  \"log\": {\"level\": \"debug\"},\n"
    "  \"store\": {\"sync\": true, \"cache_mb\": 64, \"lock_ttl_ms\": 5000,\n"
    "            \"timeout_ms\": 20000, \"one_phase_commit\": false, \"gc_rate\": 8,\n"
    "            \"write_buffer_mb\": 16, \"compression\": \"snappy\"},\n"
    "  \"tso\": {\"listen\": \"127.0.0.1:7000\", \"http\": \"127.0.0.1:7001\",\n"
    "          \"data_dir\": \"/var/lib/tso\", \"window_ms\": 1000},\n"
    "  \"zookeeper\": {\"connect\": \"[::1]:2181,zk2:2181\", \"root\": \"/percolator/a\",\n"
    "                \"session_timeout_ms\": 5000},\n"
    "  \"tablets\": [\n"
    "    {\"name\": \"t3\", \"listen\": \"10.0.0.3:7100\", \"start\": \"q\"},\n"
    "    {\"name\": \"t2\", \"listen\": \"10.0.0.2:7100\", \"start\": \"m\\u0000x\", \"end\": "
    "\"q\"},\n"
    "    {\"name\": \"t1\", \"listen\": \"10.0.0.1:7100\", \"http\": \"10.0.0.1:7101\",\n"
    "     \"data_dir\": \"/data/t1\", \"start\": \"\", \"end\": \"m\\u0000x\"}\n"
    "  ],\n"
    "  \"workers\": {\"threads\": 8, \"scan\": {\"buckets_per_claim\": 32, \"idle_ms\": 250,\n"
    "                                     \"stable_ms\": 1500},\n"
    "              \"max_failures\": 3, \"backoff_ms\": 500,\n"
    "              \"plugins\": [{\"path\": \"/opt/p/a.so\"},\n"
    "                          {\"config\": {\"table\": \"docs\", \"n\": [1, 2.5, null],\n"
    "                                      \"s\": \"\\u00e9\\\"\"}, \"path\": \"b.so\"}]}\n"
    "}";

static pc_config_t *parse(const char *text, pc_error_t *err) {
  return pc_config_parse(text, strlen(text), SRC, err);
}

/* Parsing text fails with code and exactly the message want. */
static void expect_error(const char *text, pc_status_t code, const char *want) {
  pc_error_t err;
  pc_config_t *cfg = parse(text, &err);
  if (cfg || err.code != code || strcmp(err.text, want) != 0) {
    fprintf(stderr, "input:\n%s\nwant (%s): %s\ngot  (%s): %s\n", text, pc_status_name(code), want,
            pc_status_name(err.code), cfg ? "(parsed)" : err.text);
    pc_config_free(cfg);
    fail();
  }
}

static void test_zookeeper(void **state) {
  (void)state;
  pc_error_t err;
  pc_config_t *cfg = parse("{\"zookeeper\": {\"connect\": \"h1:2181,10.0.0.2:2182,[::1]:2183\",\n"
                           "  \"root\": \"/percolator/prod-1\", \"session_timeout_ms\": 4000}}",
                           &err);
  if (!cfg) fail_msg("%s", err.text);
  assert_int_equal(cfg->zookeeper.set, 1);
  assert_string_equal(cfg->zookeeper.connect, "h1:2181,10.0.0.2:2182,[::1]:2183");
  assert_string_equal(cfg->zookeeper.root, "/percolator/prod-1");
  assert_int_equal(cfg->zookeeper.session_timeout_ms, 4000);
  pc_config_free(cfg);
  cfg = parse("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/p\"}}", &err);
  assert_non_null(cfg);
  assert_int_equal(cfg->zookeeper.session_timeout_ms, 10000);
  assert_null(cfg->zookeeper.secret);
  pc_config_free(cfg);
  cfg = parse("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/p\", \"secret\": \"k:1\"}}",
              &err);
  if (!cfg) fail_msg("%s", err.text);
  assert_string_equal(cfg->zookeeper.secret, "k:1");
  pc_config_free(cfg);
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/p\", \"secret\": \"\"}}",
               PC_INVALID, SRC ":1:58: zookeeper.secret: must not be empty");
  cfg = parse("{}", &err);
  assert_int_equal(cfg->zookeeper.set, 0);
  pc_config_free(cfg);
  expect_error("{\"zookeeper\": {\"root\": \"/p\"}}", PC_INVALID,
               SRC ":1:15: zookeeper: missing required key 'connect'");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\"}}", PC_INVALID,
               SRC ":1:15: zookeeper: missing required key 'root'");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1,h2\", \"root\": \"/p\"}}", PC_INVALID,
               SRC ":1:27: zookeeper.connect: expected \"host:port[,host:port]...\", got "
               "\"h:1,h2\" (server 2: missing \":port\")");
  expect_error("{\"zookeeper\": {\"connect\": \"h:0\", \"root\": \"/p\"}}", PC_INVALID,
               SRC ":1:27: zookeeper.connect: expected \"host:port[,host:port]...\", got "
               "\"h:0\" (server 1: port 0)");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"p\"}}", PC_INVALID,
               SRC ":1:42: zookeeper.root: expected a ZooKeeper path like \"/percolator/NAME\", "
               "got \"p\" (must start with '/')");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/a//b\"}}", PC_INVALID,
               SRC ":1:42: zookeeper.root: expected a ZooKeeper path like \"/percolator/NAME\", "
               "got \"/a//b\" (empty path component)");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/a/\"}}", PC_INVALID,
               SRC ":1:42: zookeeper.root: expected a ZooKeeper path like \"/percolator/NAME\", "
               "got \"/a/\" (empty path component)");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/a/..\"}}", PC_INVALID,
               SRC ":1:42: zookeeper.root: expected a ZooKeeper path like \"/percolator/NAME\", "
               "got \"/a/..\" ('.' and '..' are not node names)");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/\"}}", PC_INVALID,
               SRC ":1:42: zookeeper.root: expected a ZooKeeper path like \"/percolator/NAME\", "
               "got \"/\" (must name a node below '/')");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/a b\"}}", PC_INVALID,
               SRC ":1:42: zookeeper.root: expected a ZooKeeper path like \"/percolator/NAME\", "
               "got \"/a b\" (letters, digits, '.', '_', '-' and '/' only)");
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/a\", "
               "\"session_timeout_ms\": 999}}",
               PC_INVALID,
               SRC ":1:70: zookeeper.session_timeout_ms: expected an integer in 1000..60000, got 999");
  expect_error("{\"zookeeper\": {\"conect\": \"h:1\"}}", PC_INVALID,
               SRC ":1:16: zookeeper.conect: unknown key 'conect' (did you mean 'connect'?)");
  /* the retired lock service, and a cluster without ZooKeeper, say what to write */
  expect_error("{\"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/a\"},\n"
               " \"lockservice\": {\"listen\": \"127.0.0.1:1\"}}",
               PC_INVALID,
               SRC ":2:17: lockservice: the lock service daemon (\"lockd\") is retired: a cluster "
               "coordinates through ZooKeeper; remove this section and write \"zookeeper\": "
               "{\"connect\": \"host:port,...\", \"root\": \"/percolator/NAME\"} (docs/CONFIG.md)");
  expect_error("{\"tso\": {\"listen\": \"127.0.0.1:1\"},\n"
               " \"tablets\": [{\"name\": \"t\", \"listen\": \"127.0.0.1:2\"}]}",
               PC_INVALID,
               SRC ":2:13: tablets: a cluster needs a \"zookeeper\" section ({\"connect\": "
               "\"host:port,...\", \"root\": \"/percolator/NAME\"}): its oracles, clients and "
               "workers coordinate through ZooKeeper (docs/CONFIG.md)");
  /* a served directory's configuration (written by its worker) needs none */
  cfg = parse("{\"served\": \"/d\", \"tso\": {\"listen\": \"127.0.0.1:1\"},\n"
              " \"tablets\": [{\"name\": \"t\", \"listen\": \"127.0.0.1:2\"}]}",
              &err);
  if (!cfg) fail_msg("%s", err.text);
  assert_string_equal(cfg->served, "/d");
  assert_int_equal(cfg->zookeeper.set, 0);
  pc_config_free(cfg);
  expect_error("{\"zookeeper\": \"h:1\"}", PC_INVALID,
               SRC ":1:15: zookeeper: expected an object, got a string");
}

static void test_full(void **state) {
  (void)state;
  pc_error_t err;
  pc_config_t *cfg = parse(full_text, &err);
  if (!cfg) fprintf(stderr, "%s\n", err.text);
  assert_non_null(cfg);
  assert_int_equal(err.code, PC_OK);
  assert_string_equal(cfg->source, SRC);
  assert_string_equal(cfg->data_dir, "/var/lib/percolator");
  assert_string_equal(cfg->secret, "s3cr3t");
  assert_int_equal(cfg->log_level, PC_LOG_DEBUG);
  assert_int_equal(cfg->store.sync, 1);
  assert_int_equal(cfg->store.cache_mb, 64);
  assert_int_equal(cfg->store.write_buffer_mb, 16);
  assert_int_equal(cfg->store.compress, 1);
  assert_int_equal(cfg->store.lock_ttl_ms, 5000);
  assert_int_equal(cfg->store.timeout_ms, 20000);
  assert_int_equal(cfg->store.one_phase_commit, 0);
  assert_int_equal(cfg->store.gc_rate, 8);
  assert_int_equal(cfg->tso.set, 1);
  assert_int_equal(cfg->tso.listen.set, 1);
  assert_string_equal(cfg->tso.listen.host, "127.0.0.1");
  assert_int_equal(cfg->tso.listen.port, 7000);
  assert_int_equal(cfg->tso.http.set, 1);
  assert_int_equal(cfg->tso.http.port, 7001);
  assert_string_equal(cfg->tso.data_dir, "/var/lib/tso");
  assert_int_equal(cfg->tso.window_ms, 1000);
  assert_int_equal(cfg->zookeeper.set, 1);
  assert_string_equal(cfg->zookeeper.connect, "[::1]:2181,zk2:2181");
  assert_string_equal(cfg->zookeeper.root, "/percolator/a");
  assert_int_equal(cfg->zookeeper.session_timeout_ms, 5000);
  assert_null(cfg->served);

  assert_int_equal(cfg->ntablets, 3);
  const pc_config_tablet_t *t = cfg->tablets;
  /* sorted by start: t1 ["", "m\0x"), t2 ["m\0x", "q"), t3 ["q", "") */
  assert_string_equal(t[0].name, "t1");
  assert_string_equal(t[0].listen.host, "10.0.0.1");
  assert_int_equal(t[0].listen.port, 7100);
  assert_int_equal(t[0].http.set, 1);
  assert_int_equal(t[0].http.port, 7101);
  assert_string_equal(t[0].data_dir, "/data/t1");
  assert_int_equal(t[0].start_len, 0);
  assert_string_equal(t[0].start, "");
  assert_int_equal(t[0].end_len, 3);
  assert_memory_equal(t[0].end, "m\0x", 4);
  assert_string_equal(t[1].name, "t2");
  assert_int_equal(t[1].http.set, 0);
  assert_null(t[1].data_dir);
  assert_int_equal(t[1].start_len, 3);
  assert_memory_equal(t[1].start, "m\0x", 4);
  assert_int_equal(t[1].end_len, 1);
  assert_string_equal(t[1].end, "q");
  assert_string_equal(t[2].name, "t3");
  assert_string_equal(t[2].listen.host, "10.0.0.3");
  assert_string_equal(t[2].start, "q");
  assert_int_equal(t[2].end_len, 0);
  assert_string_equal(t[2].end, "");

  assert_int_equal(cfg->workers.set, 1);
  assert_int_equal(cfg->workers.threads, 8);
  assert_int_equal(cfg->workers.scan.buckets_per_claim, 32);
  assert_int_equal(cfg->workers.scan.idle_ms, 250);
  assert_int_equal(cfg->workers.scan.stable_ms, 1500);
  assert_int_equal(cfg->workers.max_failures, 3);
  assert_int_equal(cfg->workers.backoff_ms, 500);
  assert_int_equal(cfg->workers.nplugins, 2);
  assert_string_equal(cfg->workers.plugins[0].path, "/opt/p/a.so");
  assert_string_equal(cfg->workers.plugins[0].config, "{}");
  assert_string_equal(cfg->workers.plugins[1].path, "b.so");
  /* the plugin's settings, as compact JSON in the file's order */
  assert_string_equal(cfg->workers.plugins[1].config,
                      "{\"table\":\"docs\",\"n\":[1,2.5,null],\"s\":\"\xc3\xa9\\\"\"}");
  pc_config_free(cfg);
}

static void check_defaults(const pc_config_t *cfg) {
  assert_string_equal(cfg->data_dir, "./percolator-data");
  assert_null(cfg->secret);
  assert_int_equal(cfg->log_level, PC_LOG_INFO);
  assert_int_equal(cfg->store.sync, 1); /* durable unless a file says otherwise */
  assert_int_equal(cfg->store.cache_mb, 32);
  assert_int_equal(cfg->store.write_buffer_mb, 64);
  assert_int_equal(cfg->store.compress, 0);
  assert_int_equal(cfg->store.lock_ttl_ms, 3000);
  assert_int_equal(cfg->store.timeout_ms, 10000);
  assert_int_equal(cfg->store.one_phase_commit, 1);
  assert_int_equal(cfg->store.gc_rate, 100000);
  assert_int_equal(cfg->store.gc_interval_ms, 60000);
  assert_int_equal(cfg->store.gc_lifetime_ms, 60000);
  assert_int_equal(cfg->store.snapshot_max_age_ms, 86400000);
  assert_int_equal(cfg->tso.set, 0);
  assert_int_equal(cfg->tso.listen.set, 0);
  assert_null(cfg->tso.data_dir);
  assert_int_equal(cfg->tso.window_ms, 3000);
  assert_int_equal(cfg->zookeeper.set, 0);
  assert_null(cfg->served);
  assert_null(cfg->tablets);
  assert_int_equal(cfg->ntablets, 0);
  assert_int_equal(cfg->workers.set, 0);
  assert_int_equal(cfg->workers.threads, 0); /* a core each: the worker chooses */
  assert_int_equal(cfg->workers.scan.buckets_per_claim, 0); /* the worker chooses */
  assert_int_equal(cfg->workers.scan.idle_ms, 100);
  assert_int_equal(cfg->workers.scan.stable_ms, 3000);
  assert_int_equal(cfg->workers.max_failures, 5);
  assert_int_equal(cfg->workers.backoff_ms, 100);
  assert_null(cfg->workers.plugins);
  assert_int_equal(cfg->workers.nplugins, 0);
}

static void test_defaults(void **state) {
  (void)state;
  pc_config_t *cfg = pc_config_default();
  assert_non_null(cfg);
  check_defaults(cfg);
  pc_config_free(cfg);

  pc_error_t err;
  cfg = parse(" {\n}\n", &err);
  assert_non_null(cfg);
  check_defaults(cfg);
  pc_config_free(cfg);

  /* sections present but empty: set, with the defaults inside */
  cfg = parse("{\"tso\": {}, \"store\": {}, \"log\": {}}", &err);
  assert_non_null(cfg);
  assert_int_equal(cfg->tso.set, 1);
  assert_int_equal(cfg->tso.listen.set, 0);
  assert_int_equal(cfg->tso.window_ms, 3000);
  assert_int_equal(cfg->store.cache_mb, 32);
  pc_config_free(cfg);
  pc_config_free(NULL);

  /* workers present, scan and plugins empty: the defaults, no plugin */
  cfg = parse("{\"workers\": {\"scan\": {}, \"plugins\": []}}", &err);
  assert_non_null(cfg);
  assert_int_equal(cfg->workers.set, 1);
  assert_int_equal(cfg->workers.threads, 0);
  assert_int_equal(cfg->workers.scan.idle_ms, 100);
  assert_int_equal(cfg->workers.nplugins, 0);
  pc_config_free(cfg);
}

static void test_workers(void **state) {
  (void)state;
  /* unknown keys, with suggestions */
  expect_error("{\"workers\": {\"thread\": 4}}", PC_INVALID,
               SRC ":1:14: workers.thread: unknown key 'thread' (did you mean 'threads'?)");
  expect_error("{\"worker\": {}}", PC_INVALID,
               SRC ":1:2: worker: unknown key 'worker' (did you mean 'workers'?)");
  expect_error("{\"workers\": {\"scan\": {\"idle\": 5}}}", PC_INVALID,
               SRC ":1:23: workers.scan.idle: unknown key 'idle' (did you mean 'idle_ms'?)");
  expect_error("{\"workers\": {\"plugins\": [{\"path\": \"a.so\", \"conf\": {}}]}}", PC_INVALID,
               SRC
               ":1:43: workers.plugins[0].conf: unknown key 'conf' (did you mean 'config'?)");
  /* wrong types */
  expect_error("{\"workers\": {\"threads\": \"4\"}}", PC_INVALID,
               SRC ":1:25: workers.threads: expected an integer in 0..256, got a string");
  expect_error("{\"workers\": 5}", PC_INVALID, SRC ":1:13: workers: expected an object, got an integer");
  expect_error("{\"workers\": {\"scan\": []}}", PC_INVALID,
               SRC ":1:22: workers.scan: expected an object, got an array");
  expect_error("{\"workers\": {\"plugins\": {}}}", PC_INVALID,
               SRC ":1:25: workers.plugins: expected an array of plugins, got an object");
  expect_error("{\"workers\": {\"plugins\": [\"a.so\"]}}", PC_INVALID,
               SRC ":1:26: workers.plugins[0]: expected an object, got a string");
  expect_error("{\"workers\": {\"plugins\": [{\"path\": 5}]}}", PC_INVALID,
               SRC ":1:35: workers.plugins[0].path: expected a string, got an integer");
  expect_error("{\"workers\": {\"plugins\": [{\"path\": \"\"}]}}", PC_INVALID,
               SRC ":1:35: workers.plugins[0].path: must not be empty");
  expect_error("{\"workers\": {\"plugins\": [{\"path\": \"a.so\", \"config\": [1]}]}}",
               PC_INVALID,
               SRC ":1:53: workers.plugins[0].config: expected an object, got an array");
  expect_error("{\"workers\": {\"plugins\": [{\"path\": \"a.so\", \"config\": \"{}\"}]}}",
               PC_INVALID,
               SRC ":1:53: workers.plugins[0].config: expected an object, got a string");
  /* a required key, on the right line */
  expect_error(
      "{\n"
      "  \"workers\": {\n"
      "    \"plugins\": [\n"
      "      {\"path\": \"a.so\"},\n"
      "      {\"config\": {}}\n"
      "    ]\n"
      "  }\n"
      "}",
      PC_INVALID, SRC ":5:7: workers.plugins[1]: missing required key 'path'");
  /* ranges */
  expect_error("{\"workers\": {\"threads\": -1}}", PC_INVALID,
               SRC ":1:25: workers.threads: expected an integer in 0..256, got -1");
  expect_error("{\"workers\": {\"threads\": 257}}", PC_INVALID,
               SRC ":1:25: workers.threads: expected an integer in 0..256, got 257");
  expect_error("{\"workers\": {\"scan\": {\"buckets_per_claim\": 1025}}}", PC_INVALID,
               SRC
               ":1:44: workers.scan.buckets_per_claim: expected an integer in 1..1024, got 1025");
  expect_error("{\"workers\": {\"scan\": {\"idle_ms\": 60001}}}", PC_INVALID,
               SRC ":1:34: workers.scan.idle_ms: expected an integer in 1..60000, got 60001");
  expect_error("{\"workers\": {\"max_failures\": 1001}}", PC_INVALID,
               SRC ":1:30: workers.max_failures: expected an integer in 1..1000, got 1001");
  expect_error("{\"workers\": {\"backoff_ms\": 0}}", PC_INVALID,
               SRC ":1:28: workers.backoff_ms: expected an integer in 1..600000, got 0");
  /* at most 256 plugins */
  size_t cap = 64 + 257 * 16;
  char *text = malloc(cap);
  assert_non_null(text);
  size_t o = (size_t)snprintf(text, cap, "{\"workers\": {\"plugins\": [");
  for (int k = 0; k < 257; k++)
    o += (size_t)snprintf(text + o, cap - o, "%s{\"path\": \"p\"}", k ? "," : "");
  snprintf(text + o, cap - o, "]}}");
  expect_error(text, PC_INVALID, SRC ":1:25: workers.plugins: at most 256 plugins, got 257");
  /* 256 are fine */
  o = (size_t)snprintf(text, cap, "{\"workers\": {\"plugins\": [");
  for (int k = 0; k < 256; k++)
    o += (size_t)snprintf(text + o, cap - o, "%s{\"path\": \"p\"}", k ? "," : "");
  snprintf(text + o, cap - o, "]}}");
  pc_error_t err;
  pc_config_t *cfg = parse(text, &err);
  assert_non_null(cfg);
  assert_int_equal(cfg->workers.nplugins, 256);
  assert_string_equal(cfg->workers.plugins[255].config, "{}");
  pc_config_free(cfg);
  free(text);
  /* the bounds themselves */
  cfg = parse("{\"workers\": {\"threads\": 256, \"scan\": {\"buckets_per_claim\": 1, "
              "\"idle_ms\": 60000}, \"max_failures\": 1000, \"backoff_ms\": 600000}}",
              &err);
  assert_non_null(cfg);
  assert_int_equal(cfg->workers.threads, 256);
  assert_int_equal(cfg->workers.scan.buckets_per_claim, 1);
  assert_int_equal(cfg->workers.scan.idle_ms, 60000);
  assert_int_equal(cfg->workers.max_failures, 1000);
  assert_int_equal(cfg->workers.backoff_ms, 600000);
  pc_config_free(cfg);
}

static void test_wrong_types(void **state) {
  (void)state;
  expect_error(
      "{\n"
      "  \"data_dir\": \"d\",\n"
      "  \"store\": {\"sync\": \"yes\"}\n"
      "}",
      PC_INVALID, SRC ":3:21: store.sync: expected a boolean, got a string");
  expect_error("{\"store\": []}", PC_INVALID, SRC ":1:11: store: expected an object, got an array");
  expect_error("{\"data_dir\": 7}", PC_INVALID,
               SRC ":1:14: data_dir: expected a string, got an integer");
  expect_error("{\"secret\": null}", PC_INVALID, SRC ":1:12: secret: expected a string, got null");
  expect_error("{\"store\": {\"timeout_ms\": 1.5}}", PC_INVALID,
               SRC ":1:26: store.timeout_ms: expected an integer in 1..3600000, got a number");
  expect_error("{\"store\": {\"one_phase_commit\": 1}}", PC_INVALID,
               SRC ":1:32: store.one_phase_commit: expected a boolean, got an integer");
  expect_error(
      "{\"log\": {\"level\": \"verbose\"}}", PC_INVALID,
      SRC ":1:19: log.level: expected \"debug\", \"info\", \"warn\" or \"error\", got \"verbose\"");
  expect_error("{\"log\": {\"level\": \"info\\u0000\"}}", PC_INVALID,
               SRC
               ":1:19: log.level: expected \"debug\", \"info\", \"warn\" or \"error\", got "
               "\"info\\x00\"");
  expect_error("{\"tablets\": {}}", PC_INVALID,
               SRC ":1:13: tablets: expected an array of tablets, got an object");
  expect_error("{\"tablets\": []}", PC_INVALID,
               SRC ":1:13: tablets: must list at least one tablet");
  expect_error("{\"tablets\": [1]}", PC_INVALID,
               SRC ":1:14: tablets[0]: expected an object, got an integer");
  expect_error("{\"data_dir\": \"\"}", PC_INVALID, SRC ":1:14: data_dir: must not be empty");
  /* columns count bytes: the "é" before is two bytes */
  expect_error("{\"secret\": \"\xc3\xa9\", \"store\": {\"sync\": 1}}", PC_INVALID,
               SRC ":1:36: store.sync: expected a boolean, got an integer");
  /* escaped keys are located by their decoded names */
  expect_error("{\"st\\u006fre\": {\"s\\u0079nc\": 1}}", PC_INVALID,
               SRC ":1:30: store.sync: expected a boolean, got an integer");
  /* \r\n line ends: the \r is a byte of the line */
  expect_error("{\r\n  \"store\": 5\r\n}", PC_INVALID,
               SRC ":2:12: store: expected an object, got an integer");
}

/* The security keys: TLS files that must be readable, allow-lists, the two
 * secrets, the limits; and a certificate that does not load, reported at
 * its key's line:column when the credentials are made. */
static void test_security_keys(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("config-tls");
  char text[8192], junk[512];
  snprintf(junk, sizeof junk, "%.400s/junk.pem", dir);
  FILE *f = fopen(junk, "w");
  assert_non_null(f);
  fputs("not a certificate\n", f);
  fclose(f);
  snprintf(text, sizeof text,
           "{\"tls\": {\"ca_file\": \"%s\", \"cert_file\": \"%s\",\n"
           "         \"key_file\": \"%s\", \"allowed_cn\": [\"app\", \"app2\"],\n"
           "         \"system_cn\": [\"ops\"]},\n"
           " \"secret\": \"d\", \"system_secret\": \"s\",\n"
           " \"limits\": {\"max_connections\": 10, \"max_unauthenticated\": 3,\n"
           "            \"max_frame_mb\": 2, \"request_memory_mb\": 5, \"reply_memory_mb\": 6,\n"
           "            \"http_max_connections\": 7, \"auth_timeout_ms\": 100}}",
           junk, junk, junk);
  pc_error_t err;
  pc_config_t *cfg = parse(text, &err);
  if (!cfg) fail_msg("%s", err.text);
  assert_int_equal(cfg->tls.set, 1);
  assert_string_equal(cfg->tls.cert_file, junk);
  assert_int_equal(cfg->tls.nallowed_cn, 2);
  assert_string_equal(cfg->tls.allowed_cn[1], "app2");
  assert_int_equal(cfg->tls.nsystem_cn, 1);
  assert_string_equal(cfg->tls.system_cn[0], "ops");
  assert_string_equal(cfg->system_secret, "s");
  assert_int_equal(cfg->limits.max_connections, 10);
  assert_int_equal(cfg->limits.max_unauthenticated, 3);
  assert_int_equal(cfg->limits.max_frame_mb, 2);
  assert_int_equal(cfg->limits.request_memory_mb, 5);
  assert_int_equal(cfg->limits.reply_memory_mb, 6);
  assert_int_equal(cfg->limits.http_max_connections, 7);
  assert_int_equal(cfg->limits.auth_timeout_ms, 100);
  assert_int_equal(cfg->limits.max_connections_per_peer, 512); /* the default */
  /* the files load only when the credentials are made: a junk CA is named where it is */
  pc_rpc_auth_t auth;
  assert_int_equal(pc_config_auth(cfg, &auth, &err), PC_INVALID);
  char want[1024];
  snprintf(want, sizeof want, SRC ":1:21: tls.ca_file: cannot load CA certificates from '%s'", junk);
  if (strncmp(err.text, want, strlen(want)) != 0) fail_msg("got: %s", err.text);
  pc_config_free(cfg);

  /* errors, each at its place */
  expect_error("{\"tls\": {\"ca_file\": \"/nonexistent/ca.pem\"}}", PC_INVALID,
               SRC ":1:21: tls.ca_file: cannot read \"/nonexistent/ca.pem\": No such file or "
               "directory");
  snprintf(text, sizeof text, "{\"tls\": {\"ca_file\": \"%s\", \"cert_file\": \"%s\"}}", junk, junk);
  char msg[4400];
  snprintf(msg, sizeof msg, SRC ":1:9: tls: missing required key 'key_file'");
  expect_error(text, PC_INVALID, msg);
  expect_error("{\"tls\": {\"allowed_cn\": []}}", PC_INVALID,
               SRC ":1:24: tls.allowed_cn: must list at least one name");
  expect_error("{\"tls\": {\"system_cn\": [\"ops\", 7]}}", PC_INVALID,
               SRC ":1:31: tls.system_cn[1]: expected a string, got an integer");
  expect_error("{\"tls\": {\"allowed_cm\": [\"a\"]}}", PC_INVALID,
               SRC ":1:10: tls.allowed_cm: unknown key 'allowed_cm' (did you mean 'allowed_cn'?)");
  expect_error("{\"secret\": \"same\", \"system_secret\": \"same\"}", PC_INVALID,
               SRC ":1:37: system_secret: must differ from secret (it names another identity)");
  expect_error("{\"limits\": {\"max_frame_mb\": 0}}", PC_INVALID,
               SRC ":1:29: limits.max_frame_mb: expected an integer in 1..1024, got 0");
  expect_error("{\"limits\": {\"max_conections\": 5}}", PC_INVALID,
               SRC ":1:13: limits.max_conections: unknown key 'max_conections' (did you mean "
               "'max_connections'?)");
  tu_rmtree(dir);
}

static void test_ranges_of_integers(void **state) {
  (void)state;
  expect_error("{\"store\": {\"cache_mb\": 70000}}", PC_INVALID,
               SRC ":1:24: store.cache_mb: expected an integer in 0..65536, got 70000");
  expect_error("{\"store\": {\"gc_lifetime_ms\": 5}}", PC_INVALID,
               SRC ":1:30: store.gc_lifetime_ms: expected an integer in 1000..86400000, got 5");
  expect_error("{\"workers\": {\"serve_ports\": {\"tso\": 7400, \"tablet\": 7400}}}", PC_INVALID,
               SRC ":1:29: workers.serve_ports: the oracle and the tablet cannot share port 7400");
  expect_error("{\"workers\": {\"serve_ports\": {\"tso\": 0}}}", PC_INVALID,
               SRC ":1:37: workers.serve_ports.tso: expected an integer in 1..65535, got 0");
  pc_error_t perr;
  const char *pinned = "{\"workers\": {\"serve_ports\": {\"tso\": 7400, \"tablet\": 7401}}}";
  pc_config_t *pc = pc_config_parse(pinned, strlen(pinned), SRC, &perr);
  assert_non_null(pc);
  assert_int_equal(pc->workers.serve_tso_port, 7400);
  assert_int_equal(pc->workers.serve_tablet_port, 7401);
  pc_config_free(pc);
  expect_error("{\"store\": {\"snapshot_max_age_ms\": 2592000001}}", PC_INVALID,
               SRC ":1:35: store.snapshot_max_age_ms: expected an integer in 1000..2592000000, got "
                   "2592000001");
  expect_error("{\"store\": {\"cache_mb\": -1}}", PC_INVALID,
               SRC ":1:24: store.cache_mb: expected an integer in 0..65536, got -1");
  expect_error("{\"store\": {\"write_buffer_mb\": 0}}", PC_INVALID,
               SRC ":1:31: store.write_buffer_mb: expected an integer in 1..4096, got 0");
  expect_error("{\"store\": {\"compression\": \"zstd\"}}", PC_INVALID,
               SRC ":1:27: store.compression: expected \"snappy\" or \"none\", got \"zstd\"");
  expect_error("{\"store\": {\"lock_ttl_ms\": 0}}", PC_INVALID,
               SRC ":1:27: store.lock_ttl_ms: expected an integer in 1..3600000, got 0");
  expect_error("{\"tso\": {\"window_ms\": 99}}", PC_INVALID,
               SRC ":1:23: tso.window_ms: expected an integer in 100..600000, got 99");
  expect_error("{\"workers\": {\"scan\": {\"stable_ms\": 600001}}}", PC_INVALID,
               SRC ":1:36: workers.scan.stable_ms: expected an integer in 0..600000, got 600001");
  expect_error("{\"store\": {\"cache_mb\": 9223372036854775807}}", PC_INVALID,
               SRC
               ":1:24: store.cache_mb: expected an integer in 0..65536, got 9223372036854775807");
  pc_error_t err;
  pc_config_t *cfg = parse("{\"store\": {\"cache_mb\": 0, \"lock_ttl_ms\": 3600000}}", &err);
  assert_non_null(cfg);
  assert_int_equal(cfg->store.cache_mb, 0);
  assert_int_equal(cfg->store.lock_ttl_ms, 3600000);
  pc_config_free(cfg);
}

static void test_unknown_keys(void **state) {
  (void)state;
  expect_error(
      "{\n"
      "  \"store\": {\n"
      "    \"snyc\": true\n"
      "  }\n"
      "}",
      PC_INVALID, SRC ":3:5: store.snyc: unknown key 'snyc' (did you mean 'sync'?)");
  expect_error("{\"zzz\": 1}", PC_INVALID, SRC ":1:2: zzz: unknown key 'zzz'");
  expect_error("{\"tablet\": []}", PC_INVALID,
               SRC ":1:2: tablet: unknown key 'tablet' (did you mean 'tablets'?)");
  expect_error("{\"store\": {\"cache\": 1}}", PC_INVALID,
               SRC ":1:12: store.cache: unknown key 'cache' (did you mean 'cache_mb'?)");
  expect_error("{\"Data_Dir\": \"x\"}", PC_INVALID,
               SRC ":1:2: Data_Dir: unknown key 'Data_Dir' (did you mean 'data_dir'?)");
  expect_error(
      "{\"tablets\": [{\"name\": \"a\", \"listen\": \"h:1\"},\n"
      "             {\"name\": \"b\", \"lsten\": \"h:2\"}]}",
      PC_INVALID, SRC ":2:28: tablets[1].lsten: unknown key 'lsten' (did you mean 'listen'?)");
  /* control bytes of a key are escaped in the message */
  expect_error("{\"a\\nb\": 1}", PC_INVALID, SRC ":1:2: a\\x0ab: unknown key 'a\\x0ab'");
}

static void test_endpoints(void **state) {
  (void)state;
  static const struct {
    const char *value, *why;
  } bad[] = {
      {"\"localhost\"", "missing \":port\""},
      {"\":7000\"", "empty host"},
      {"\"h:65536\"", "port must be in 0..65535"},
      {"\"h:99999999\"", "port must be in 0..65535"},
      {"\"h:\"", "empty port"},
      {"\"h:12a\"", "port is not a number"},
      {"\"h:-1\"", "port is not a number"},
      {"\"::1:7000\"", "an IPv6 address needs brackets, as in \"[::1]:7100\""},
      {"\"[::1]7000\"", "missing \":port\" after ']'"},
      {"\"[::1:7000\"", "missing ']'"},
      {"\"[]:7000\"", "empty host"},
      {"\"a b:1\"", "invalid character in host"},
      {"\"\"", "missing \":port\""},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    char text[128], want[256], shown[64];
    snprintf(text, sizeof text, "{\"tso\": {\"listen\": %s}}", bad[k].value);
    /* the message shows the value with its quotes escaped */
    size_t o = 0;
    for (const char *p = bad[k].value; *p; p++) {
      if (*p == '"' && p != bad[k].value && p[1]) shown[o++] = '\\';
      shown[o++] = *p;
    }
    shown[o] = '\0';
    snprintf(want, sizeof want, SRC ":1:20: tso.listen: expected \"host:port\", got %s (%s)", shown,
             bad[k].why);
    expect_error(text, PC_INVALID, want);
  }
  expect_error(
      "{\n"
      "  \"tablets\": [\n"
      "    {\"name\": \"a\", \"listen\": \"h:1\", \"end\": \"m\"},\n"
      "    {\"name\": \"b\", \"listen\": 42, \"start\": \"m\"}\n"
      "  ]\n"
      "}",
      PC_INVALID, SRC ":4:29: tablets[1].listen: expected \"host:port\", got 42");
  expect_error("{\"tso\": {\"http\": [\"h\", 1]}}", PC_INVALID,
               SRC ":1:18: tso.http: expected \"host:port\", got an array");

  pc_error_t err;
  pc_config_t *cfg = parse(
      "{\"tso\": {\"listen\": \"[fe80::1%eth0]:65535\", \"http\": \"my-host.example.com:1\"}}",
      &err);
  assert_non_null(cfg);
  assert_string_equal(cfg->tso.listen.host, "fe80::1%eth0");
  assert_int_equal(cfg->tso.listen.port, 65535);
  assert_string_equal(cfg->tso.http.host, "my-host.example.com");
  assert_int_equal(cfg->tso.http.port, 1);
  pc_config_free(cfg);
  /* port 0: the daemon picks a free port (tests and scripts) */
  const char *zero = "{\"tso\": {\"listen\": \"127.0.0.1:0\"}}";
  cfg = pc_config_parse(zero, strlen(zero), "cluster.json", NULL);
  assert_non_null(cfg);
  assert_true(cfg->tso.listen.set);
  assert_int_equal(cfg->tso.listen.port, 0);
  pc_config_free(cfg);

  /* 255-byte host fits, 256 does not */
  char text[700], host[300];
  memset(host, 'h', 255);
  host[255] = '\0';
  snprintf(text, sizeof text, "{\"tso\": {\"listen\": \"%s:1\"}}", host);
  cfg = parse(text, &err);
  assert_non_null(cfg);
  assert_int_equal(strlen(cfg->tso.listen.host), 255);
  pc_config_free(cfg);
  strcat(host, "h");
  snprintf(text, sizeof text, "{\"tso\": {\"listen\": \"%s:1\"}}", host);
  assert_null(parse(text, &err));
  assert_int_equal(err.code, PC_INVALID);
  assert_non_null(strstr(err.text, "(host longer than 255 bytes)"));
}

static void test_required_and_names(void **state) {
  (void)state;
  expect_error(
      "{\n"
      "  \"tablets\": [\n"
      "    {\"name\": \"a\", \"listen\": \"h:1\", \"end\": \"m\"},\n"
      "    {\"name\": \"b\", \"start\": \"m\"}\n"
      "  ]\n"
      "}",
      PC_INVALID, SRC ":4:5: tablets[1]: missing required key 'listen'");
  expect_error("{\"tablets\": [ {\"listen\": \"h:1\"}]}", PC_INVALID,
               SRC ":1:15: tablets[0]: missing required key 'name'");
  expect_error("{\"tablets\": [{\"name\": \"a/b\", \"listen\": \"h:1\"}]}", PC_INVALID,
               SRC
               ":1:23: tablets[0].name: invalid tablet name \"a/b\" (1..64 letters, digits, '.', "
               "'_' or '-')");
  expect_error("{\"tablets\": [{\"name\": \"\", \"listen\": \"h:1\"}]}", PC_INVALID,
               SRC
               ":1:23: tablets[0].name: invalid tablet name \"\" (1..64 letters, digits, '.', "
               "'_' or '-')");
  expect_error("{\"tablets\": [{\"name\": \"..\", \"listen\": \"h:1\"}]}", PC_INVALID,
               SRC
               ":1:23: tablets[0].name: invalid tablet name \"..\" (1..64 letters, digits, '.', "
               "'_' or '-')");
}

static void test_nul_bytes(void **state) {
  (void)state;
  expect_error("{\"data_dir\": \"a\\u0000b\"}", PC_INVALID,
               SRC ":1:14: data_dir: must not contain a NUL byte (\\u0000)");
  expect_error("{\"secret\": \"\\u0000\"}", PC_INVALID,
               SRC ":1:12: secret: must not contain a NUL byte (\\u0000)");
  expect_error("{\"tso\": {\"data_dir\": \"x\\u0000\"}}", PC_INVALID,
               SRC ":1:22: tso.data_dir: must not contain a NUL byte (\\u0000)");
  expect_error("{\"tablets\": [{\"name\": \"a\\u0000\", \"listen\": \"h:1\"}]}", PC_INVALID,
               SRC ":1:23: tablets[0].name: must not contain a NUL byte (\\u0000)");
  /* NUL inside keys: jansson refuses them as a syntax error */
  pc_error_t err;
  assert_null(parse("{\"a\\u0000\": 1}", &err));
  assert_int_equal(err.code, PC_INVALID);

  /* row bounds keep every byte, NUL included */
  pc_config_t *cfg = parse(
      "{\"tablets\": [{\"name\": \"a\", \"listen\": \"h:1\", \"end\": \"\\u0000\"},\n"
      "  {\"name\": \"b\", \"listen\": \"h:2\", \"start\": \"\\u0000\", \"end\": "
      "\"\\u0000\\u0000\\u00ff\"},\n"
      "  {\"name\": \"c\", \"listen\": \"h:3\", \"start\": \"\\u0000\\u0000\\u00ff\"}],\n"
      " \"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/p\"}}",
      &err);
  if (!cfg) fprintf(stderr, "%s\n", err.text);
  assert_non_null(cfg);
  assert_int_equal(cfg->ntablets, 3);
  assert_int_equal(cfg->tablets[0].end_len, 1);
  assert_int_equal(cfg->tablets[0].end[0], '\0');
  assert_int_equal(cfg->tablets[1].start_len, 1);
  assert_int_equal(cfg->tablets[1].end_len, 4); /* U+00FF is two bytes of UTF-8 */
  assert_memory_equal(cfg->tablets[1].end, "\0\0\xc3\xbf", 4);
  assert_int_equal(cfg->tablets[2].start_len, 4);
  pc_config_free(cfg);
}

/* One tablet per line: {"name": N, "listen": "h:1", "start": S, "end": E},
 * the start value at column 42 and the end value at column 53 + strlen(S). */
static void tablets_text(char *out, size_t cap, const char *const (*t)[3], size_t n) {
  size_t o = (size_t)snprintf(out, cap, "{\"tablets\": [\n");
  for (size_t k = 0; k < n; k++)
    o += (size_t)snprintf(
        out + o, cap - o,
        " {\"name\": \"%s\", \"listen\": \"h:1\", \"start\": \"%s\", \"end\": \"%s\"}%s\n", t[k][0],
        t[k][1], t[k][2], k + 1 < n ? "," : "");
  snprintf(out + o, cap - o, "], \"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/p\"}}");
}

static void expect_tablets_error(const char *const (*t)[3], size_t n, const char *want) {
  char text[2048];
  tablets_text(text, sizeof text, t, n);
  expect_error(text, PC_INVALID, want);
}

static void test_tablet_ranges(void **state) {
  (void)state;
  {
    const char *const t[][3] = {{"a", "", "m"}, {"b", "n", ""}};
    expect_tablets_error(t, 2,
                         SRC
                         ":3:42: tablets[1].start: gap between tablet 'a' (tablets[0], ends "
                         "at \"m\") and tablet 'b' (starts at \"n\")");
  }
  {
    const char *const t[][3] = {{"a", "", "n"}, {"b", "m", ""}};
    expect_tablets_error(t, 2,
                         SRC
                         ":3:42: tablets[1].start: tablet 'b' (starts at \"m\") overlaps "
                         "tablet 'a' (tablets[0], ends at \"n\")");
  }
  {
    const char *const t[][3] = {{"a", "", ""}, {"b", "m", ""}};
    expect_tablets_error(t, 2,
                         SRC
                         ":3:42: tablets[1].start: tablet 'b' (starts at \"m\") overlaps "
                         "tablet 'a' (tablets[0], no end)");
  }
  {
    const char *const t[][3] = {{"b", "m", ""}, {"a", "", "m"}, {"c", "", "x"}};
    expect_tablets_error(t, 3,
                         SRC
                         ":4:42: tablets[2].start: tablet 'c' (starts at \"\") overlaps "
                         "tablet 'a' (tablets[1], ends at \"m\")");
  }
  {
    const char *const t[][3] = {{"a", "b", "m"}, {"b", "m", ""}};
    expect_tablets_error(t, 2,
                         SRC
                         ":2:42: tablets[0].start: no tablet starts at \"\": the lowest "
                         "start is \"b\" (tablet 'a'), rows before it are not served");
  }
  {
    const char *const t[][3] = {{"a", "", "m"}, {"b", "m", "z"}};
    expect_tablets_error(t, 2,
                         SRC
                         ":3:54: tablets[1].end: no tablet ends at \"\": the last tablet "
                         "'b' ends at \"z\", rows from there on are not served");
  }
  {
    const char *const t[][3] = {{"a", "", "m"}, {"b", "z", "m"}};
    expect_tablets_error(t, 2,
                         SRC
                         ":3:54: tablets[1].end: tablet 'b' has an empty range: end \"m\" "
                         "is not after start \"z\"");
  }
  {
    const char *const t[][3] = {{"a", "", "m"}, {"a", "m", ""}};
    expect_tablets_error(t, 2,
                         SRC
                         ":3:11: tablets[1].name: duplicate tablet name 'a' (also "
                         "tablets[0].name at 2:11)");
  }
  {
    /* a bound with a NUL byte is shown escaped */
    const char *const t[][3] = {{"a", "", "m"}, {"b", "m\\u0000", ""}};
    expect_tablets_error(t, 2,
                         SRC
                         ":3:42: tablets[1].start: gap between tablet 'a' (tablets[0], ends "
                         "at \"m\") and tablet 'b' (starts at \"m\\x00\")");
  }
  {
    /* out of order but tiling: accepted and sorted */
    const char *const t[][3] = {{"c", "q", ""}, {"a", "", "f"}, {"b", "f", "q"}};
    char text[2048];
    tablets_text(text, sizeof text, t, 3);
    pc_error_t err;
    pc_config_t *cfg = parse(text, &err);
    assert_non_null(cfg);
    assert_int_equal(cfg->ntablets, 3);
    assert_string_equal(cfg->tablets[0].name, "a");
    assert_string_equal(cfg->tablets[1].name, "b");
    assert_string_equal(cfg->tablets[2].name, "c");
    pc_config_free(cfg);
  }
  {
    /* one tablet serving everything; an absent start/end is "" */
    pc_error_t err;
    pc_config_t *cfg = parse("{\"tablets\": [{\"name\": \"all\", \"listen\": \"h:1\"}],"
                             " \"zookeeper\": {\"connect\": \"h:1\", \"root\": \"/p\"}}",
                             &err);
    assert_non_null(cfg);
    assert_int_equal(cfg->ntablets, 1);
    assert_string_equal(cfg->tablets[0].start, "");
    assert_string_equal(cfg->tablets[0].end, "");
    pc_config_free(cfg);
  }
}

static void test_duplicate_keys(void **state) {
  (void)state;
  expect_error(
      "{\n"
      "  \"store\": {\"sync\": true,\n"
      "            \"sync\": false}\n"
      "}",
      PC_INVALID, SRC ":3:13: store.sync: duplicate key 'sync' (first at 2:13)");
  expect_error("{\"store\": {\"sync\": true, \"s\\u0079nc\": false}}", PC_INVALID,
               SRC ":1:26: store.sync: duplicate key 'sync' (first at 1:12)");
  expect_error("{\"tablets\": [{\"name\": \"a\", \"name\": \"b\"}]}", PC_INVALID,
               SRC ":1:28: tablets[0].name: duplicate key 'name' (first at 1:15)");
  expect_error("{\"x\": [0, {\"a\": 1, \"a\": 2}]}", PC_INVALID,
               SRC ":1:20: x[1].a: duplicate key 'a' (first at 1:12)");
  expect_error("{\"log\": {}, \"log\": {}}", PC_INVALID,
               SRC ":1:13: log: duplicate key 'log' (first at 1:2)");
}

/* Keys that are all empty: the locator then stores no key byte at all, and
 * looking a key up, comparing two of them or naming a duplicate must not do
 * arithmetic on its empty (NULL) arena — UndefinedBehaviorSanitizer stops
 * there (gcc's on the memcmp, clang's on NULL + 0 as well). */
static void test_empty_keys(void **state) {
  (void)state;
  expect_error("{\"\": 1}", PC_INVALID, SRC ":1:2: unknown key ''");
  expect_error("{\"\": {\"\": \"\"}}", PC_INVALID, SRC ":1:2: unknown key ''");
  expect_error("{\"\": 1, \"\": 2}", PC_INVALID, SRC ":1:9: duplicate key '' (first at 1:2)");
  expect_error("{\"tablets\": [{\"\": 1}]}", PC_INVALID,
               SRC ":1:15: tablets[0].: unknown key ''");
}

static void test_syntax_and_top_level(void **state) {
  (void)state;
  expect_error("{\n  \"store\": {\"sync\": tru}\n}", PC_INVALID,
               SRC ":2:23: syntax error: invalid token near 'tru'");
  expect_error("{\"a\": 1,}", PC_INVALID,
               SRC ":1:9: syntax error: string or '}' expected near '}'");
  expect_error("{\n  \"store\": {}\n", PC_INVALID,
               SRC ":3:1: syntax error: '}' expected near end of file");
  expect_error("{} x", PC_INVALID, SRC ":1:4: syntax error: end of file expected near 'x'");
  /* bytes of the input that jansson quotes are escaped (here a UTF-8 byte order mark) */
  expect_error("\xef\xbb\xbf{}", PC_INVALID,
               SRC ":1:3: syntax error: invalid token near '\\xef\\xbb\\xbf'");
  expect_error("", PC_INVALID, SRC ":1:1: the configuration is empty (expected a JSON object)");
  expect_error(" \n\t\r\n", PC_INVALID,
               SRC ":1:1: the configuration is empty (expected a JSON object)");
  expect_error("[1]", PC_INVALID, SRC ":1:1: expected an object at the top level, got an array");
  expect_error("\n  42", PC_INVALID,
               SRC ":2:3: expected an object at the top level, got an integer");
  expect_error("\"x\"", PC_INVALID, SRC ":1:1: expected an object at the top level, got a string");

  pc_error_t err;
  assert_null(pc_config_parse(NULL, 3, NULL, &err));
  assert_int_equal(err.code, PC_INVALID);
  pc_config_t *cfg = pc_config_parse("{}", 2, NULL, NULL); /* no name, no err */
  assert_non_null(cfg);
  assert_string_equal(cfg->source, "(config)");
  pc_config_free(cfg);
}

static char *write_file(const char *dir, const char *name, const char *text) {
  char *path;
  if (asprintf(&path, "%s/%s", dir, name) < 0) abort();
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite(text, 1, strlen(text), f);
  fclose(f);
  return path;
}

static void test_load(void **state) {
  (void)state;
  char *dir = tu_mkdtemp("config");
  pc_error_t err;
  char want[512];

  char *missing;
  if (asprintf(&missing, "%s/missing.json", dir) < 0) abort();
  assert_null(pc_config_load(missing, &err));
  assert_int_equal(err.code, PC_INVALID);
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory", missing);
  assert_string_equal(err.text, want);
  free(missing);

  assert_null(pc_config_load(dir, &err)); /* a directory cannot be read */
  assert_int_equal(err.code, PC_IO_ERROR);
  snprintf(want, sizeof want, "%s: cannot read: Is a directory", dir);
  assert_string_equal(err.text, want);

  char *empty = write_file(dir, "empty.json", "");
  assert_null(pc_config_load(empty, &err));
  assert_int_equal(err.code, PC_INVALID);
  snprintf(want, sizeof want, "%s:1:1: the configuration is empty (expected a JSON object)", empty);
  assert_string_equal(err.text, want);
  free(empty);

  char *bad = write_file(dir, "bad.json", "{\n  \"store\": {\n    \"sync\": \"yes\"\n  }\n}\n");
  assert_null(pc_config_load(bad, &err));
  assert_int_equal(err.code, PC_INVALID);
  snprintf(want, sizeof want, "%s:3:13: store.sync: expected a boolean, got a string", bad);
  assert_string_equal(err.text, want);
  free(bad);

  char *good = write_file(dir, "good.json", full_text);
  pc_config_t *cfg = pc_config_load(good, &err);
  assert_non_null(cfg);
  assert_int_equal(err.code, PC_OK);
  assert_string_equal(err.text, "");
  assert_string_equal(cfg->source, good);
  assert_int_equal(cfg->ntablets, 3);
  pc_config_free(cfg);
  free(good);

  assert_null(pc_config_load(NULL, &err));
  assert_int_equal(err.code, PC_INVALID);
  tu_rmtree(dir);
}

/* fsync is on unless asked off: in the configuration's defaults (what the
 * tablet servers and `percolator run` use), in pc_options_create, and in the
 * databases pc_db_open (NULL options) and pc_db_open_config open. */
static void test_sync_on_by_default(void **state) {
  (void)state;
  pc_options_t *o = pc_options_create();
  assert_non_null(o);
  assert_int_equal(o->sync, 1);
  char *dir = tu_mkdtemp("config-sync");
  char data[4200];
  snprintf(data, sizeof data, "%s/data", dir);
  pc_options_set_create_if_missing(o, 1);
  pc_error_t err;
  pc_db_t *db = pc_db_open(o, data, &err); /* creates it */
  pc_options_destroy(o);
  if (!db) fail_msg("pc_db_open: %s", err.text);
  pc_db_close(db);

  db = pc_db_open(NULL, data, &err);
  if (!db) fail_msg("pc_db_open(NULL options): %s", err.text);
  assert_int_equal(db->opts.sync, 1);
  pc_db_close(db);

  char text[4400];
  snprintf(text, sizeof text, "{\"data_dir\": \"%s\"}", data);
  char *path = write_file(dir, "default.json", text);
  db = pc_db_open_config(path, &err);
  if (!db) fail_msg("pc_db_open_config: %s", err.text);
  assert_int_equal(db->opts.sync, 1);
  pc_db_close(db);
  free(path);

  snprintf(text, sizeof text, "{\"data_dir\": \"%s\", \"store\": {\"sync\": false}}", data);
  path = write_file(dir, "nosync.json", text);
  db = pc_db_open_config(path, &err);
  if (!db) fail_msg("pc_db_open_config: %s", err.text);
  assert_int_equal(db->opts.sync, 0);
  pc_db_close(db);
  free(path);
  tu_rmtree(dir);
}

/* An error message is "cluster.json:<line>:<column>: ..." with a 1-based
 * position inside text (or just past its end). */
static void check_message(const char *text, size_t len, const pc_error_t *err) {
  assert_int_equal(err->code, PC_INVALID);
  size_t n = strlen(SRC);
  if (strncmp(err->text, SRC ":", n + 1) != 0) {
    fprintf(stderr, "bad message: %s\n", err->text);
    fail();
  }
  char *end;
  unsigned long line = strtoul(err->text + n + 1, &end, 10);
  assert_true(*end == ':');
  unsigned long col = strtoul(end + 1, &end, 10);
  assert_true(end[0] == ':' && end[1] == ' ');
  size_t lines = 1;
  for (size_t k = 0; k < len; k++) lines += text[k] == '\n';
  assert_true(line >= 1 && line <= lines);
  assert_true(col >= 1 && col <= len + 1);
}

static void test_truncations(void **state) {
  (void)state;
  size_t len = strlen(full_text);
  for (size_t n = 0; n < len; n++) {
    char *buf = malloc(n ? n : 1); /* exactly n bytes: ASan sees any overread */
    memcpy(buf, full_text, n);
    pc_error_t err;
    pc_config_t *cfg = pc_config_parse(buf, n, SRC, &err);
    if (cfg) fprintf(stderr, "prefix of %zu bytes parsed\n", n);
    assert_null(cfg);
    check_message(buf, n, &err);
    free(buf);
  }
  pc_error_t err;
  pc_config_t *cfg = pc_config_parse(full_text, len, SRC, &err);
  assert_non_null(cfg);
  pc_config_free(cfg);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void test_byte_flips(void **state) {
  (void)state;
  static const char interesting[] =
      "\"\\{}[],:0123456789-.eEu \n\x00\x01\x7f\x80\xc3\xff"
      "tfn";
  size_t len = strlen(full_text);
  size_t parsed = 0, failed = 0;
  for (int iter = 0; iter < 5000; iter++) {
    char *buf = malloc(len);
    memcpy(buf, full_text, len);
    int flips = 1 + (int)(rng() % 4);
    for (int f = 0; f < flips; f++) {
      size_t at = rng() % len;
      uint64_t r = rng();
      if (r % 3 == 0)
        buf[at] = (char)(r >> 8);
      else if (r % 3 == 1)
        buf[at] = interesting[(r >> 8) % (sizeof interesting - 1)];
      else
        buf[at] ^= (char)(1u << ((r >> 8) % 8));
    }
    pc_error_t err;
    pc_config_t *cfg = pc_config_parse(buf, len, SRC, &err);
    if (cfg) {
      parsed++;
      assert_int_equal(err.code, PC_OK);
      assert_true(cfg->ntablets >= 1);
      pc_config_free(cfg);
    } else {
      failed++;
      check_message(buf, len, &err);
    }
    free(buf);
  }
  /* both outcomes occur: flips inside string values often keep the file valid */
  assert_true(parsed > 0);
  assert_true(failed > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_wrong_types),
      cmocka_unit_test(test_security_keys),
      cmocka_unit_test(test_ranges_of_integers),
      cmocka_unit_test(test_unknown_keys),
      cmocka_unit_test(test_endpoints),
      cmocka_unit_test(test_required_and_names),
      cmocka_unit_test(test_nul_bytes),
      cmocka_unit_test(test_tablet_ranges),
      cmocka_unit_test(test_workers),
      cmocka_unit_test(test_zookeeper),
      cmocka_unit_test(test_duplicate_keys),
      cmocka_unit_test(test_empty_keys),
      cmocka_unit_test(test_syntax_and_top_level),
      cmocka_unit_test(test_load),
      cmocka_unit_test(test_sync_on_by_default),
      cmocka_unit_test(test_truncations),
      cmocka_unit_test(test_byte_flips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
