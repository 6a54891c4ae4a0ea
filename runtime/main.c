/*
 * main.c -- the moonshard command: run, node, tell/ask/stop/status, shard,
 * bench.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "moonshard.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: moonshard COMMAND ...\n"
        "  run CONFIG.lua                 start every node the config lists\n"
        "  node CONFIG.lua [--name N]     start one node (default: the first)\n"
        "  tell [--node H:P] TYPE ID JSON send a message\n"
        "  ask [--node H:P] [--timeout S] TYPE ID JSON\n"
        "                                 send a request, print the reply\n"
        "  stop [--node H:P] TYPE ID      passivate an entity\n"
        "  status [--node H:P]            print a node's stats\n"
        "  shard --count N ID...          print each id's shard\n"
        "  bench local [--ids N] [--messages N]\n"
        "                                 measure one node\n"
        "  version\n");
}

/* ---- node ------------------------------------------------------------ */

struct runner {
    uv_loop_t *loop;
    struct ms_node *node;
    uv_signal_t sigint, sigterm;
};

static void on_signal(uv_signal_t *s, int signum)
{
    struct runner *r = s->data;
    fprintf(stderr, "moonshard: %s, stopping node %s\n",
            signum == SIGINT ? "interrupted" : "terminated",
            ms_node_name(r->node));
    uv_close((uv_handle_t *)&r->sigint, NULL);
    uv_close((uv_handle_t *)&r->sigterm, NULL);
    ms_node_close(r->node);
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
    const char *node_opt = strcmp(addr, "127.0.0.1:7201") ? " --node " : "";
    const char *node_arg = *node_opt ? addr : "";
    printf("moonshard: node %s is up, HTTP gateway on http://%s\n",
           ms_node_name(n), addr);
    if (ms_node_type(n, "Counter", 7) >= 0) {
        printf("  try, in another terminal:\n"
               "    %s tell%s%s Counter c1 '{\"type\":\"incr\",\"by\":2}'\n"
               "    %s ask%s%s Counter c1 '{\"type\":\"get\"}'\n"
               "    curl -s -XPOST http://%s/v1/entities/Counter/c1/ask "
               "-d '{\"type\":\"get\"}'\n"
               "    %s status%s%s\n",
               cmd, node_opt, node_arg, cmd, node_opt, node_arg, addr, cmd,
               node_opt, node_arg);
    }
    printf("  Ctrl-C stops the node.\n");
    fflush(stdout);
}

static int run_node(const char *config, const char *name)
{
    struct runner r;
    memset(&r, 0, sizeof r);
    r.loop = uv_default_loop();
    signal(SIGPIPE, SIG_IGN);
    struct ms_node_options opts = {config, name, 0};
    char err[1024];
    int rc = ms_node_new(&r.node, r.loop, &opts, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "moonshard: %s\n", err);
        uv_run(r.loop, UV_RUN_DEFAULT);
        return 1;
    }
    uv_signal_init(r.loop, &r.sigint);
    uv_signal_init(r.loop, &r.sigterm);
    r.sigint.data = r.sigterm.data = &r;
    uv_signal_start(&r.sigint, on_signal, SIGINT);
    uv_signal_start(&r.sigterm, on_signal, SIGTERM);
    print_hints(r.node);
    uv_run(r.loop, UV_RUN_DEFAULT);
    uv_loop_close(r.loop);
    return 0;
}

/* ---- shard ----------------------------------------------------------- */

static int cmd_shard(int argc, char **argv)
{
    long count = -1;
    int i = 0;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
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
    if (count < 0 || i >= argc) {
        fprintf(stderr, "usage: moonshard shard --count N ID...\n");
        return 2;
    }
    for (; i < argc; i++)
        printf("%u\n", ms_shard_of(argv[i], strlen(argv[i]),
                                   (uint32_t)count));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "node") == 0) {
        const char *config = NULL, *name = NULL;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
                name = argv[++i];
            else if (!config && argv[i][0] != '-')
                config = argv[i];
            else {
                fprintf(stderr, "moonshard %s: unexpected argument '%s'\n",
                        cmd, argv[i]);
                return 2;
            }
        }
        if (!config) {
            fprintf(stderr, "usage: moonshard %s CONFIG.lua%s\n", cmd,
                    strcmp(cmd, "node") == 0 ? " [--name N]" : "");
            return 2;
        }
        return run_node(config, name);
    }
    if (strcmp(cmd, "tell") == 0 || strcmp(cmd, "ask") == 0 ||
        strcmp(cmd, "stop") == 0 || strcmp(cmd, "status") == 0)
        return ms_cli_main(argc - 1, argv + 1);
    if (strcmp(cmd, "shard") == 0)
        return cmd_shard(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0)
        return ms_bench_main(argc - 2, argv + 2);
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
