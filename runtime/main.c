/*
 * main.c -- the moonshard command: run, node, tell/ask/stop/status, shard,
 * db, secret. The benchmarks are another executable, moonshard-bench (bench/).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "db.h"
#include "core/log.h"
#include "io/logsink.h"
#include "lua/bridge.h"
#include "lua/watch.h"
#include "moonshard.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: moonshard COMMAND ...\n"
        "  run [--watch] CONFIG.lua       start every node the config lists\n"
        "                                 (one process each)\n"
        "  node [--watch] CONFIG.lua [--name N]\n"
        "                                 start one node (default: the first)\n"
        "                                 --watch: reload changed behavior and\n"
        "                                 strategy modules (development)\n"
        "  tell [--node H:P] TYPE ID JSON send a message\n"
        "  ask [--node H:P] [--timeout S] TYPE ID JSON\n"
        "                                 send a request, print the reply\n"
        "  stop [--node H:P] TYPE ID      passivate an entity\n"
        "  status [--node H:P] [--json]   the node, its members, counters\n"
        "  members [--node H:P] [--json]  the membership as a node sees it\n"
        "                                 (a table; --json: the raw answer)\n"
        "  leave [--node H:P] [--token T] make a node leave the cluster\n"
        "  down [--node H:P] [--token T] [--force] ADDRESS\n"
        "                                 down an unreachable member\n"
        "                                 (--force: even one that answers)\n"
        "  remember clear [--node H:P] [--token T] TYPE SHARD\n"
        "                                 clear a shard failed by its\n"
        "                                 remember store (on its owner)\n"
        "  secret                         print a fresh random cluster secret\n"
        "  shard --count N ID...          print each id's shard (FNV-1a)\n"
        "  shard --config F --type T ID...  with the type's own partitioner\n"
        "  db migrate CONFIG.lua          create or upgrade the schema in the\n"
        "                                 config's PostgreSQL `database`\n"
        "  db events [CONFIG.lua] TYPE ID [--limit N]\n"
        "                                 print an entity's journal (latest N)\n"
        "  db leases [CONFIG.lua] [TYPE]  list the cluster's leases (also:\n"
        "                                 moonshard leases [CONFIG.lua] [TYPE];\n"
        "                                 no CONFIG.lua: $MOONSHARD_CONFIG)\n"
        "  version\n");
}

/* ---- node ------------------------------------------------------------ */

struct runner {
    uv_loop_t *loop;
    struct ms_node *node;
    struct ms_watch *watch; /* --watch, else NULL */
    uv_timer_t leave_deadline;
    int stopped;
};


static void stop_runner(void *data)
{
    struct runner *r = data;
    if (r->stopped)
        return;
    r->stopped = 1;
    uv_close((uv_handle_t *)&r->leave_deadline, NULL);
    ms_watch_close(r->watch);
    r->watch = NULL;
    ms_node_close(r->node);
}

static void on_leave_deadline(uv_timer_t *t)
{
    struct runner *r = t->data;
    ms_log(MS_LOG_WARN, NULL, "did not finish leaving within %llu s; "
           "stopping",
           (unsigned long long)ms_node_leave_deadline_ms(r->node) / 1000);
    stop_runner(r);
}

/* The first SIGINT or SIGTERM, from the node's watchdog thread. Ctrl-C
 * under `moonshard run` reaches a node twice (from the terminal and from
 * the launcher): the graceful stop is bounded, so the watchdog ignores
 * later signals instead of killing the node half-way, unless a handler
 * is stuck (then it exits with MS_EXIT_STUCK; SIGKILL still works). */
static void on_signal(void *data, int signum)
{
    struct runner *r = data;
    if (r->stopped)
        return;
    ms_log(MS_LOG_INFO, NULL, "%s, stopping",
           signum == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)");
    /* leave the cluster gracefully: the node stops once it is removed
     * (stop_runner, through ms_node_on_stopped), or at the deadline */
    if (ms_node_leave(r->node) == 0) {
        ms_log(MS_LOG_INFO, NULL, "leaving the cluster");
        uv_timer_start(&r->leave_deadline, on_leave_deadline,
                       ms_node_leave_deadline_ms(r->node), 0);
        return;
    }
    stop_runner(r);
}

static void print_hints(struct ms_node *n)
{
    const char *addr = ms_node_http_address(n);
    char exe[PATH_MAX], cwd[PATH_MAX];
    size_t len = sizeof exe;
    const char *cmd = "moonshard";
    if (uv_exepath(exe, &len) == 0 && getcwd(cwd, sizeof cwd)) {
        size_t cl = strlen(cwd);
        if (strncmp(exe, cwd, cl) == 0 && exe[cl] == '/') {
            static char rel[PATH_MAX];
            snprintf(rel, sizeof rel, "./%s", exe + cl + 1);
            cmd = rel;
        } else {
            cmd = exe;
        }
    }
    /* a gateway_tls node speaks HTTPS only: its URL, and the CLI's
     * --node, say https:// (the CLI's default node is plain HTTP) */
    int tls = ms_node_gateway_tls(n);
    const char *scheme = tls ? "https" : "http";
    static char url[300];
    snprintf(url, sizeof url, "https://%s", addr);
    const char *node_opt =
        tls || strcmp(addr, "127.0.0.1:7201") ? " --node " : "";
    const char *node_arg = !*node_opt ? "" : tls ? url : addr;
    printf("moonshard: node %s is up, HTTP gateway on %s://%s\n",
           ms_node_name(n), scheme, addr);
    if (ms_node_index(n) != 0) {
        fflush(stdout); /* a log file must see the line now */
        return; /* the first node of the config prints the hints */
    }
    if (ms_node_type(n, "Counter", 7) >= 0) {
        printf("  try, in another terminal:\n"
               "    %s tell%s%s Counter c1 '{\"type\":\"incr\",\"by\":2}'\n"
               "    %s ask%s%s Counter c1 '{\"type\":\"get\"}'\n"
               "    curl -s%s -XPOST %s://%s/v1/entities/Counter/c1/ask "
               "-d '{\"type\":\"get\"}'\n"
               "    %s status%s%s\n",
               cmd, node_opt, node_arg, cmd, node_opt, node_arg,
               tls ? " --cacert \"$MOONSHARD_CA\"" : "", scheme, addr, cmd,
               node_opt, node_arg);
    }
    printf("    %s members%s%s\n", cmd, node_opt, node_arg);
    if (tls)
        printf("  (MOONSHARD_CA: the file of the CA that signed the "
               "gateway's certificate)\n");
    printf("  Ctrl-C stops the node(s): each leaves the cluster first.\n");
    fflush(stdout);
}

/*
 * A node holds a descriptor per HTTP connection (limits.http_connections,
 * 1,024 by default) and per peer, which the usual soft limit of 1,024
 * does not cover: the soft limit is raised to the hard one at start (the
 * kernel's ceiling when the hard limit is "unlimited"). Returns the soft
 * limit in force.
 */
static rlim_t raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur != rl.rlim_max) {
        struct rlimit want = rl;
        want.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &want) != 0 &&
            rl.rlim_max == RLIM_INFINITY) {
            want.rlim_cur = 1 << 20; /* fs.nr_open's default */
            if (setrlimit(RLIMIT_NOFILE, &want) != 0)
                return rl.rlim_cur;
        }
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

/* Descriptors a node needs beside its HTTP connections: peers, listeners,
 * files (a rough margin). */
#define FD_MARGIN 128

/* --watch reloads through the node's VM (ms_watch_call_fn). */
static int watch_call(void *node, const char *module, const char *fn,
                      const char *arg, char **out, char *err, size_t errlen)
{
    return ms_node_call_lua(node, module, fn, arg, out, err, errlen);
}

static int run_node(const char *config, const char *name, int watch)
{
    rlim_t fds = raise_fd_limit();
    struct runner r;
    memset(&r, 0, sizeof r);
    r.loop = uv_default_loop();
    signal(SIGPIPE, SIG_IGN);
    struct ms_node_options opts = {config, name};
    char err[1024];
    int rc = ms_node_new(&r.node, r.loop, &opts, err, sizeof err);
    if (rc < 0) {
        /* log_format = "json" once the config was read: no text line */
        if (ms_log_is_json())
            ms_log(MS_LOG_ERROR, NULL, "%s", err);
        else
            fprintf(stderr, "moonshard: %s\n", err);
        uv_run(r.loop, UV_RUN_DEFAULT);
        return 1;
    }
    uint64_t http_timeout_ms;
    int http_conns;
    ms_node_http_limits(r.node, &http_timeout_ms, &http_conns);
    if (fds != RLIM_INFINITY && fds < (rlim_t)http_conns + FD_MARGIN) {
        char warn[320];
        snprintf(warn, sizeof warn, "the open-file limit is %llu, below "
                 "limits.http_connections (%d) + %d: new connections will "
                 "be dropped before the gateway sees them; raise it "
                 "(ulimit -n) or lower limits.http_connections",
                 (unsigned long long)fds, http_conns, FD_MARGIN);
        if (ms_log_is_json()) /* log_format = "json": no text line */
            ms_log(MS_LOG_WARN, NULL, "%s", warn);
        else
            fprintf(stderr, "moonshard: warning: %s\n", warn);
    }
    uv_timer_init(r.loop, &r.leave_deadline);
    r.leave_deadline.data = &r;
    rc = ms_node_catch_signals(r.node, on_signal, &r);
    if (rc < 0)
        ms_log(MS_LOG_ERROR, NULL, "cannot catch SIGINT and SIGTERM: %s",
               strerror(-rc));
    ms_node_on_stopped(r.node, stop_runner, &r);
    if (watch && ms_watch_start(&r.watch, r.loop, watch_call, r.node, config,
                                MS_WATCH_INTERVAL_MS, err, sizeof err) < 0)
        ms_log(MS_LOG_WARN, NULL, "--watch: %s; not watching", err);
    print_hints(r.node);
    uv_run(r.loop, UV_RUN_DEFAULT);
    uv_loop_close(r.loop);
    return 0;
}

/* ---- run: every node of the config, one process each ------------------ */

#define MAX_CHILDREN 64

struct launcher {
    uv_loop_t *loop;
    uv_process_t procs[MAX_CHILDREN];
    char names[MAX_CHILDREN][64];
    int n, alive, failed;
    uv_signal_t sigint, sigterm;
};

static void on_child_exit(uv_process_t *p, int64_t status, int signum)
{
    struct launcher *l = p->data;
    int i = (int)(p - l->procs);
    if (status != 0 || (signum && signum != SIGINT && signum != SIGTERM))
        l->failed = 1;
    fprintf(stderr, "moonshard: node %s exited (status %lld%s%s)\n",
            l->names[i], (long long)status, signum ? ", signal " : "",
            signum ? strsignal(signum) : "");
    uv_close((uv_handle_t *)p, NULL);
    if (--l->alive == 0) {
        uv_close((uv_handle_t *)&l->sigint, NULL);
        uv_close((uv_handle_t *)&l->sigterm, NULL);
    }
}

static void on_launcher_signal(uv_signal_t *s, int signum)
{
    struct launcher *l = s->data;
    fprintf(stderr, "moonshard: stopping %d node(s)\n", l->alive);
    for (int i = 0; i < l->n; i++)
        if (uv_is_active((uv_handle_t *)&l->procs[i]))
            uv_process_kill(&l->procs[i], signum);
}

static int run_all(const char *config, char names[][64], int n, int watch)
{
    struct launcher l;
    memset(&l, 0, sizeof l);
    l.loop = uv_default_loop();
    char exe[PATH_MAX];
    size_t len = sizeof exe;
    if (uv_exepath(exe, &len) < 0) {
        fprintf(stderr, "moonshard: cannot find its own executable\n");
        return 1;
    }
    uv_signal_init(l.loop, &l.sigint);
    uv_signal_init(l.loop, &l.sigterm);
    l.sigint.data = l.sigterm.data = &l;
    uv_signal_start(&l.sigint, on_launcher_signal, SIGINT);
    uv_signal_start(&l.sigterm, on_launcher_signal, SIGTERM);
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = 1;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = 2;
    for (int i = 0; i < n && i < MAX_CHILDREN; i++) {
        char *args[] = {exe,      "node", (char *)config, "--name",
                        names[i], watch ? "--watch" : NULL, NULL};
        uv_process_options_t o;
        memset(&o, 0, sizeof o);
        o.file = exe;
        o.args = args;
        o.exit_cb = on_child_exit;
        o.stdio = stdio;
        o.stdio_count = 3;
        snprintf(l.names[i], sizeof l.names[i], "%.63s", names[i]);
        l.procs[i].data = &l;
        int rc = uv_spawn(l.loop, &l.procs[i], &o);
        if (rc < 0) {
            fprintf(stderr, "moonshard: cannot start node %s: %s\n",
                    names[i], uv_strerror(rc));
            l.failed = 1;
            continue;
        }
        l.n = i + 1;
        l.alive++;
    }
    if (l.alive == 0) {
        uv_close((uv_handle_t *)&l.sigint, NULL);
        uv_close((uv_handle_t *)&l.sigterm, NULL);
    }
    uv_run(l.loop, UV_RUN_DEFAULT);
    return l.failed ? 1 : 0;
}

/* `moonshard run CONFIG`: one node runs in this process; several run as
 * child processes (`moonshard node CONFIG --name N` each). */
static int cmd_run(const char *config, int watch)
{
    struct ms_bridge *b;
    char names[MAX_CHILDREN][64], err[1024], home[PATH_MAX];
    ms_home(home, sizeof home);
    if (ms_bridge_new(&b, uv_default_loop(), home) < 0) {
        fprintf(stderr, "moonshard: cannot start Lua\n");
        return 1;
    }
    int n = ms_bridge_node_names(b, config, names, MAX_CHILDREN, err,
                                 sizeof err);
    ms_bridge_free(b);
    if (n < 0) {
        fprintf(stderr, "moonshard: %s\n", err);
        return 1;
    }
    if (n <= 1)
        return run_node(config, NULL, watch);
    return run_all(config, names, n, watch);
}

/* ---- secret ---------------------------------------------------------- */

#define SECRET_BYTES 32

/* `moonshard secret`: SECRET_BYTES bytes from the system's CSPRNG as
 * lowercase hex, one line, for a config's `secret`. */
static int cmd_secret(int argc, char **argv)
{
    (void)argv;
    if (argc != 0) {
        fprintf(stderr, "usage: moonshard secret\n");
        return 2;
    }
    unsigned char b[SECRET_BYTES];
    int rc = uv_random(NULL, NULL, b, sizeof b, 0, NULL);
    if (rc < 0) {
        fprintf(stderr, "moonshard secret: no random bytes: %s\n",
                uv_strerror(rc));
        return 1;
    }
    char hex[2 * SECRET_BYTES + 1];
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    memset(b, 0, sizeof b);
    printf("%s\n", hex);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- shard ----------------------------------------------------------- */

/* `moonshard shard --config FILE --type T ID...`: the shards the type
 * places its ids in, with its own partitioner when it has one. */
static int shard_by_config(const char *config, const char *tname,
                           char **ids, int n)
{
    struct ms_bridge *b;
    struct ms_config cfg;
    char err[1024], home[PATH_MAX];
    int rc = 1, t;
    ms_home(home, sizeof home);
    if (ms_bridge_new(&b, uv_default_loop(), home) < 0) {
        fprintf(stderr, "moonshard shard: cannot start Lua\n");
        return 1;
    }
    if (ms_bridge_load_config(b, config, NULL, &cfg, err, sizeof err) < 0) {
        fprintf(stderr, "moonshard shard: %s\n", err);
        ms_bridge_free(b);
        return 1;
    }
    for (t = 0; t < cfg.ntypes && strcmp(cfg.types[t].name, tname); t++)
        ;
    if (t == cfg.ntypes) {
        fprintf(stderr, "moonshard shard: %s has no entity type '%s'\n",
                config, tname);
        goto out;
    }
    rc = 0;
    for (int i = 0; i < n; i++) {
        uint32_t shard, count = cfg.types[t].shard_count;
        size_t len = strlen(ids[i]);
        if (!cfg.types[t].custom_partition) {
            printf("%u\n", ms_shard_of(ids[i], len, count));
        } else if (ms_bridge_partition(b, t, ids[i], len, count, &shard) ==
                   0) {
            printf("%u\n", shard);
        } else {
            printf("error\n"); /* the reason is on stderr */
            rc = 1;
        }
    }
out:
    ms_config_free(&cfg);
    ms_bridge_free(b);
    return rc;
}

static int cmd_shard(int argc, char **argv)
{
    long count = -1;
    const char *config = NULL, *tname = NULL;
    int i = 0;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config = argv[++i];
        } else if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
            tname = argv[++i];
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            count = strtol(argv[++i], &end, 10);
            if (errno || *end || count < 1 || count > 2147483647L) {
                fprintf(stderr, "moonshard shard: --count must be an "
                        "integer in 1..2147483647\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else {
            break;
        }
    }
    /* exactly one form: --count N, or --config F --type T */
    if (i >= argc || (count >= 0 ? config || tname : !config || !tname)) {
        fprintf(stderr, "usage: moonshard shard --count N ID...\n"
                        "       moonshard shard --config FILE --type T "
                        "ID...\n");
        return 2;
    }
    if (config)
        return shard_by_config(config, tname, argv + i, argc - i);
    for (; i < argc; i++)
        printf("%u\n", ms_shard_of(argv[i], strlen(argv[i]),
                                   (uint32_t)count));
    return 0;
}

int main(int argc, char **argv)
{
    ms_io_log_install();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "node") == 0) {
        const char *config = NULL, *name = NULL;
        int watch = 0;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
                name = argv[++i];
            else if (strcmp(argv[i], "--watch") == 0)
                watch = 1;
            else if (!config && argv[i][0] != '-')
                config = argv[i];
            else {
                fprintf(stderr, "moonshard %s: unexpected argument '%s'\n",
                        cmd, argv[i]);
                return 2;
            }
        }
        if (!config) {
            fprintf(stderr, "usage: moonshard %s [--watch] CONFIG.lua%s\n",
                    cmd, strcmp(cmd, "node") == 0 ? " [--name N]" : "");
            return 2;
        }
        if (strcmp(cmd, "run") == 0 && !name)
            return cmd_run(config, watch);
        return run_node(config, name, watch);
    }
    if (strcmp(cmd, "tell") == 0 || strcmp(cmd, "ask") == 0 ||
        strcmp(cmd, "stop") == 0 || strcmp(cmd, "status") == 0 ||
        strcmp(cmd, "members") == 0 || strcmp(cmd, "leave") == 0 ||
        strcmp(cmd, "down") == 0 || strcmp(cmd, "remember") == 0)
        return ms_cli_main(argc - 1, argv + 1);
    if (strcmp(cmd, "shard") == 0)
        return cmd_shard(argc - 2, argv + 2);
    if (strcmp(cmd, "db") == 0)
        return ms_db_main(argc - 2, argv + 2);
    if (strcmp(cmd, "leases") == 0)
        return ms_db_leases(argc - 2, argv + 2);
    if (strcmp(cmd, "secret") == 0)
        return cmd_secret(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) {
        /* the benches left the product: say where they went */
        fprintf(stderr, "moonshard: the benchmarks are a separate program "
                "now: moonshard-bench %s (built beside moonshard, not "
                "installed)\n", argc > 2 ? argv[2] : "local|cluster|handoff");
        return 2;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("moonshard %s\n", MS_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "moonshard: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
