/* verb_tablet.c — `percolator tablet SUBCOMMAND ...`: the operations on a
 * replicated cluster's tablets (a Raft group each): add a replica on a
 * server, remove one, move a tablet's leadership, and replace a server by
 * another in every group it belongs to. (`percolator tablet --name NAME`,
 * which runs a server, is verb_daemons.c's; run_tablet there hands the
 * subcommands here.)
 *
 * Each change is asked of the tablet's leader (MEMBER, replica/repl_client.h),
 * found through its owner node in ZooKeeper or a follower's refusal naming
 * it, and tried again on a leader that changed, within --timeout. The
 * leader makes one change of its configuration at a time and waits for each
 * to commit (replica/membership.c), so the operations are safe while
 * clients write; each is idempotent (a replica already there, or already
 * gone, is nothing to do), so running one again after a timeout finishes it.
 * Before asking, the verb checks what it can against every server's view
 * (replview.h): the server holds the replica it should, and a removal
 * leaves a majority of the remaining voters up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/cli/replview.h"
#include "cli.h"
#include "config/config.h"
#include "base/error.h"
#include "core/suggest.h"
#include "lockservice/coord.h"
#include "net/rpc.h"
#include "replica/repl_client.h"
#include "tablet/tablet.h"

/* The default bound of an operation: a new replica first catches up from
 * a snapshot of the tablet, streamed from a peer. */
#define TABLET_OP_DEFAULT_MS (5u * 60u * 1000u)
#define VIEW_MS 5000u

typedef struct op {
  const cli_ctx_t *ctx;
  const pc_config_t *cfg;
  pc_coord_t *coord;
  uint64_t deadline; /* monotonic ms */
  int maybe;         /* the last failed step may have reached a leader: it may still complete */
} op_t;

static uint32_t remaining(const op_t *o) {
  uint64_t now = pc_now_mono_ms();
  return now >= o->deadline ? 0 : (uint32_t)(o->deadline - now);
}

/* Whether a failed MEMBER is worth asking again, elsewhere or later: the
 * server asked does not lead the tablet (its refusal names the leader when
 * it knows it), or could not be reached, or is starting. Such a request
 * made no change, or one that asking again completes. */
static int retryable(const pc_error_t *err) {
  if (err->code != PC_UNAVAILABLE) return 0;
  return strstr(err->text, PC_TABLET_NOT_LEADER) || strncmp(err->text, "connection to ", 14) == 0 ||
         strncmp(err->text, "cannot reach ", 13) == 0 || strstr(err->text, " is starting");
}

/* The leader's "host:port" that a refusal names ("(leader: S at H:P)"). */
static void leader_hint(const char *text, char *out, size_t cap) {
  out[0] = '\0';
  const char *p = strstr(text, PC_TABLET_NOT_LEADER);
  const char *at = p ? strstr(p, " at ") : NULL;
  if (!at) return;
  at += 4;
  size_t n = strcspn(at, ")");
  if (n && n < cap && strncmp(at, "unknown", 7) != 0) snprintf(out, cap, "%.*s", (int)n, at);
}

/* Asks tablet's leader for a membership change about server, following the
 * leader until it answers or the time runs out. text receives what was done. */
static pc_status_t member(op_t *o, int action, const char *tablet, const char *server,
                          pc_buf_t *text, pc_error_t *err) {
  char hint[300] = "";
  pc_error_set(err, PC_UNAVAILABLE, "tablet %s: no replica leads it", tablet);
  for (;;) {
    uint32_t left = remaining(o);
    if (!left) break;
    char addr[300] = "";
    pc_error_t e;
    if (hint[0]) {
      snprintf(addr, sizeof addr, "%s", hint);
      hint[0] = '\0';
    } else if (cli_owner_read(o->coord, tablet, left < VIEW_MS ? left : VIEW_MS, addr, sizeof addr,
                              NULL, 0, NULL, &e) != PC_OK) {
      *err = e;
    } else if (!addr[0]) {
      pc_error_set(err, PC_UNAVAILABLE, "tablet %s: no replica leads it (an election is under "
                   "way, or fewer than a majority of its voting replicas are up)", tablet);
    }
    if (addr[0]) {
      char host[300];
      uint16_t port;
      pc_rpc_auth_t auth;
      pc_rpc_client_t *c = NULL;
      pc_status_t st = pc_parse_endpoint(addr, 0, host, sizeof host, &port, err);
      if (st == PC_OK && (st = pc_config_auth(o->cfg, &auth, err)) == PC_OK) {
        pc_rpc_client_options_t opts = {.fail_on_refusal = 1};
        c = pc_rpc_client_create_opts(host, port, &auth, &opts, err);
        pc_config_auth_release(&auth);
        if (!c) st = err->code;
      }
      if (st == PC_OK) {
        text->len = 0;
        st = pc_repl_remote_member(c, action, tablet, server, remaining(o), text, err);
      }
      pc_rpc_client_destroy(c);
      if (st == PC_OK) return PC_OK;
      /* a refusal, a server starting, or a connection never made changed nothing */
      int unsent = strncmp(err->text, "cannot reach ", 13) == 0 ||
                   (strncmp(err->text, "connection to ", 14) == 0 && !strstr(err->text, " lost: "));
      o->maybe = !unsent && !strstr(err->text, PC_TABLET_NOT_LEADER) &&
                 !strstr(err->text, " is starting");
      if (!retryable(err)) return st;
      leader_hint(err->text, hint, sizeof hint);
      if (hint[0]) continue;
    }
    uint32_t nap = remaining(o) < 200 ? remaining(o) : 200;
    if (nap) pc_sleep_ms(nap);
  }
  char why[sizeof err->text];
  snprintf(why, sizeof why, "%s", err->text);
  return pc_error_set(err, PC_TIMEOUT, "%s; the time given ran out (--timeout)", why);
}

/* Prints a failed step and returns the exit code; a step cut short by the
 * time given after it reached a leader may still complete. */
static int step_failed(const op_t *o, const pc_error_t *err) {
  if (err->code == PC_TIMEOUT && o->maybe)
    return cli_error(o->ctx, "%s. The change may still complete: 'percolator status' shows the "
                     "group; running the command again finishes it", err->text);
  return cli_pc_error(o->ctx, err);
}

/* ---- checks against the view ------------------------------------------------------- */

static const pc_config_tablet_t *config_tablet(const pc_config_t *cfg, const char *name,
                                               size_t *index) {
  for (size_t i = 0; i < cfg->ntablets; i++)
    if (strcmp(cfg->tablets[i].name, name) == 0) {
      if (index) *index = cfg->tablets[i].file_index;
      return &cfg->tablets[i];
    }
  return NULL;
}

static int config_lists(const pc_config_tablet_t *t, const char *server) {
  for (size_t k = 0; k < t->nreplicas; k++)
    if (strcmp(t->replicas[k], server) == 0) return 1;
  return 0;
}

static int is_voter(const cli_rreplica_t *r) {
  return r && (r->role == CLI_ROLE_LEADER || r->role == CLI_ROLE_FOLLOWER);
}

/* A server the configuration or ZooKeeper knows (servers/<name>, made at
 * its first start): 1, else 0 with a usage error printed. */
static int known_server(op_t *o, const char *name) {
  for (size_t i = 0; i < o->cfg->nservers; i++)
    if (strcmp(o->cfg->servers[i].name, name) == 0) return 1;
  int seen = 0;
  pc_error_t err;
  if (strlen(name) <= CLI_SERVER_NAME_MAX &&
      pc_coord_server_seen(o->coord, name, VIEW_MS, &seen, &err) == PC_OK && seen)
    return 1;
  char list[512] = "";
  for (size_t i = 0, used = 0; i < o->cfg->nservers && used < sizeof list; i++) {
    int k = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", o->cfg->servers[i].name);
    if (k > 0) used += (size_t)k;
  }
  cli_usage_error(o->ctx, "unknown server '%s': %s lists %s, and no server of that name ever "
                  "ran under %s", name, o->cfg->source, list, o->cfg->zookeeper.root);
  return 0;
}

/* Whether taking server's replica out of t leaves a majority of the
 * remaining voters up; else prints why not and returns 0. */
static int removal_safe(const op_t *o, const cli_rtablet_t *t, const cli_rreplica_t *r) {
  if (!is_voter(r)) return 1;
  size_t voters = t->voters - 1, up = t->voters_up - (r->counted ? 1 : 0);
  if (voters == 0) {
    cli_error(o->ctx, "tablet %s: the replica on %s is its only voting replica: add another "
              "first ('percolator tablet add-replica %s SERVER')", t->cfg->name, r->server,
              t->cfg->name);
    return 0;
  }
  if (up < cli_majority(voters)) {
    cli_error(o->ctx, "tablet %s: removing the replica on %s would leave %zu of %zu voting "
              "replicas up, fewer than a majority (%zu): the tablet would stop. Start the servers "
              "that are down, or add a replica first ('percolator doctor' says which)",
              t->cfg->name, r->server, up, voters, cli_majority(voters));
    return 0;
  }
  return 1;
}

/* What the configuration file should say after a change, printed as a note
 * (the file is the operator's: the verbs never write it). */
static void note_added(const op_t *o, const char *tablet, const char *server) {
  size_t idx = 0;
  const pc_config_tablet_t *t = config_tablet(o->cfg, tablet, &idx);
  if (!t || config_lists(t, server)) return;
  printf("note: %s does not list %s among tablet %s's replicas; server %s keeps its replica "
         "across restarts, but add \"%s\" to tablets[%zu].replicas so that %s started on an "
         "empty directory rebuilds it and status counts it\n",
         o->cfg->source, server, tablet, server, server, idx, server);
}

static void note_removed(const op_t *o, const char *tablet, const char *server) {
  size_t idx = 0;
  const pc_config_tablet_t *t = config_tablet(o->cfg, tablet, &idx);
  if (!t || !config_lists(t, server)) return;
  printf("note: %s still lists %s among tablet %s's replicas: take \"%s\" out of "
         "tablets[%zu].replicas, or %s started on an empty directory would join the group again\n",
         o->cfg->source, server, tablet, server, idx, server);
}

/* ---- the operations ----------------------------------------------------------------- */

static int do_add(op_t *o, const cli_rview_t *v, const char *tablet, const char *server) {
  const cli_rtablet_t *t = cli_rview_tablet(v, tablet);
  const cli_rreplica_t *r = t ? cli_rtablet_replica(t, server) : NULL;
  if (is_voter(r)) {
    printf("tablet %s: server %s holds a voting replica already (%s): nothing to do\n", tablet,
           server, r->address);
    note_added(o, tablet, server);
    return CLI_EXIT_OK;
  }
  const cli_rserver_t *s = cli_rview_server(v, server);
  if (s && !s->up)
    return cli_error(o->ctx, "server %s does not answer (%s): start it first", server, s->error);
  pc_buf_t text = {0};
  pc_error_t err;
  pc_status_t st = member(o, PC_MEMBER_ADD, tablet, server, &text, &err);
  if (st == PC_OK) {
    printf("%.*s\n", (int)text.len, text.p);
    note_added(o, tablet, server);
  }
  pc_buf_free(&text);
  return st == PC_OK ? CLI_EXIT_OK : step_failed(o, &err);
}

static int do_remove(op_t *o, const cli_rview_t *v, const char *tablet, const char *server) {
  const cli_rtablet_t *t = cli_rview_tablet(v, tablet);
  const cli_rreplica_t *r = t ? cli_rtablet_replica(t, server) : NULL;
  if (t && t->view && !r) {
    char voters[512];
    cli_rtablet_voters(t, voters, sizeof voters);
    return cli_error(o->ctx, "server %s holds no replica of tablet %s (its voting replicas: %s)",
                     server, tablet, voters[0] ? voters : "none known");
  }
  if (t && r && !removal_safe(o, t, r)) return CLI_EXIT_ERROR;
  pc_buf_t text = {0};
  pc_error_t err;
  pc_status_t st = member(o, PC_MEMBER_REMOVE, tablet, server, &text, &err);
  if (st == PC_OK) {
    printf("%.*s\n", (int)text.len, text.p);
    note_removed(o, tablet, server);
  }
  pc_buf_free(&text);
  return st == PC_OK ? CLI_EXIT_OK : step_failed(o, &err);
}

static int do_move(op_t *o, const cli_rview_t *v, const char *tablet, const char *server) {
  const cli_rtablet_t *t = cli_rview_tablet(v, tablet);
  const cli_rreplica_t *r = t ? cli_rtablet_replica(t, server) : NULL;
  if (t && t->view && !is_voter(r)) {
    char voters[512];
    cli_rtablet_voters(t, voters, sizeof voters);
    return cli_error(o->ctx, "server %s holds no voting replica of tablet %s (its voting "
                     "replicas: %s)", server, tablet, voters[0] ? voters : "none known");
  }
  if (r && !r->up)
    return cli_error(o->ctx, "tablet %s: the replica on %s is down: it cannot lead", tablet,
                     server);
  if (r && r->role == CLI_ROLE_LEADER) {
    printf("tablet %s: server %s leads it already\n", tablet, server);
    return CLI_EXIT_OK;
  }
  pc_buf_t text = {0};
  pc_error_t err;
  pc_status_t st = member(o, PC_MEMBER_MOVE, tablet, server, &text, &err);
  if (st == PC_OK) printf("%.*s\n", (int)text.len, text.p);
  pc_buf_free(&text);
  return st == PC_OK ? CLI_EXIT_OK : step_failed(o, &err);
}

/* Replaces old by new in each of the n tablets of todo, in order. */
static int replace_each(op_t *o, const cli_rtablet_t *const *todo, size_t n, const char *old,
                        const char *new) {
  size_t done = 0;
  for (size_t i = 0; i < n; i++) {
    const char *tablet = todo[i]->cfg->name;
    pc_buf_t text = {0};
    pc_error_t err;
    pc_status_t st = member(o, PC_MEMBER_ADD, tablet, new, &text, &err);
    if (st == PC_OK) printf("%.*s\n", (int)text.len, text.p);
    if (st == PC_OK) st = member(o, PC_MEMBER_REMOVE, tablet, old, &text, &err);
    if (st == PC_OK) printf("%.*s\n", (int)text.len, text.p);
    pc_buf_free(&text);
    if (st != PC_OK) {
      if (done) printf("server %s replaced by %s in %zu of %zu tablets before this failed\n", old,
                       new, done, n);
      return step_failed(o, &err);
    }
    note_added(o, tablet, new);
    note_removed(o, tablet, old);
    done++;
  }
  printf("server %s replaced by %s in %zu tablet%s\n", old, new, n, n == 1 ? "" : "s");
  return CLI_EXIT_OK;
}

/* For every tablet old holds a replica of: a voting replica on new, then
 * old's removed. Checked for every tablet before anything is done. */
static int do_replace(op_t *o, const cli_rview_t *v, const char *old, const char *new) {
  const cli_rtablet_t **todo = calloc(v->ntablets ? v->ntablets : 1, sizeof *todo);
  if (!todo) return cli_error(o->ctx, "out of memory");
  size_t n = 0;
  char clash[512] = "";
  for (size_t i = 0; i < v->ntablets; i++) {
    const cli_rtablet_t *t = &v->tablets[i];
    if (!cli_rtablet_replica(t, old)) continue;
    todo[n++] = t;
    if (is_voter(cli_rtablet_replica(t, new))) {
      size_t used = strlen(clash);
      snprintf(clash + used, sizeof clash - used, "%s%s", used ? ", " : "", t->cfg->name);
    }
  }
  const cli_rserver_t *s = cli_rview_server(v, new);
  int rc = CLI_EXIT_OK;
  if (!n)
    rc = cli_error(o->ctx, "server %s holds no replica of any tablet (as their groups' "
                   "configurations say): nothing to replace", old);
  else if (clash[0])
    rc = cli_error(o->ctx, "server %s holds voting replicas of tablets %s already: replacing "
                   "%s by it there would leave them a replica short. Remove %s's replicas of "
                   "those with 'percolator tablet remove-replica TABLET %s' if that is meant",
                   new, clash, old, old, old);
  else if (s && !s->up)
    rc = cli_error(o->ctx, "server %s does not answer (%s): start it first", new, s->error);
  if (rc == CLI_EXIT_OK) rc = replace_each(o, todo, n, old, new);
  free(todo);
  return rc;
}

/* ---- the subcommands ---------------------------------------------------------------- */

static const char *const subcommands[] = {"add-replica", "remove-replica", "move-leader",
                                          "replace-server"};

int cli_tablet_ops(cli_ctx_t *ctx, int argc, char **argv) {
  const char *sub = argv[0];
  size_t which = 0;
  while (which < 4 && strcmp(subcommands[which], sub) != 0) which++;
  if (which == 4) {
    const char *s = pc_suggest(sub, strlen(sub), subcommands, 4);
    char hint[96] = "";
    if (s) snprintf(hint, sizeof hint, "; did you mean '%s'?", s);
    return cli_usage_error(ctx, "unknown subcommand '%s'%s (the subcommands: add-replica, "
                           "remove-replica, move-leader, replace-server; 'percolator tablet "
                           "--name NAME' runs a server)", sub, hint);
  }
  if (argc != 3)
    return cli_usage_error(ctx, "%s takes two arguments: %s", sub,
                           which == 3 ? "OLD NEW (servers)" : "TABLET SERVER");
  if (!ctx->config) return cli_usage_error(ctx, "--config FILE is required");
  pc_error_t err;
  pc_config_t *cfg = pc_config_load(ctx->config, &err);
  if (!cfg) return cli_pc_error(ctx, &err);
  int rc = CLI_EXIT_OK;
  pc_coord_t *coord = NULL;
  cli_rview_t v = {0};
  op_t o = {ctx, cfg, NULL, 0, 0};
  if (!cfg->nservers || !cfg->zookeeper.set) {
    rc = cli_usage_error(ctx, "%s: %s has no \"servers\": its tablets are not replicated "
                         "(docs/CONFIG.md)", sub, ctx->config);
    goto out;
  }
  if (which == 3 && strcmp(argv[1], argv[2]) == 0) {
    rc = cli_usage_error(ctx, "replace-server: OLD and NEW are both '%s'", argv[1]);
    goto out;
  }
  if (which != 3 && !config_tablet(cfg, argv[1], NULL)) {
    char list[512] = "";
    for (size_t i = 0, used = 0; i < cfg->ntablets && used < sizeof list; i++) {
      int k = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", cfg->tablets[i].name);
      if (k > 0) used += (size_t)k;
    }
    rc = cli_usage_error(ctx, "unknown tablet '%s': %s lists %s", argv[1], ctx->config, list);
    goto out;
  }
  o.deadline = pc_now_mono_ms() + (ctx->timeout_ms ? ctx->timeout_ms : TABLET_OP_DEFAULT_MS);
  pc_zk_options_t zo = pc_config_zk(cfg);
  if (!(coord = pc_coord_open(&zo, 0, remaining(&o) < VIEW_MS ? remaining(&o) : VIEW_MS, &err))) {
    rc = cli_pc_error(ctx, &err);
    goto out;
  }
  o.coord = coord;
  if ((which == 3 && !known_server(&o, argv[1])) || !known_server(&o, argv[2])) {
    rc = CLI_EXIT_USAGE;
    goto out;
  }
  if (cli_rview_load(cfg, coord, remaining(&o) < VIEW_MS ? remaining(&o) : VIEW_MS, &v, &err) !=
      PC_OK) {
    rc = cli_pc_error(ctx, &err);
    goto out;
  }
  switch (which) {
    case 0: rc = do_add(&o, &v, argv[1], argv[2]); break;
    case 1: rc = do_remove(&o, &v, argv[1], argv[2]); break;
    case 2: rc = do_move(&o, &v, argv[1], argv[2]); break;
    default: rc = do_replace(&o, &v, argv[1], argv[2]); break;
  }
  if (rc == CLI_EXIT_OK) rc = cli_finish_output(ctx);
out:
  cli_rview_free(&v);
  pc_coord_close(coord);
  pc_config_free(cfg);
  return rc;
}
