/*
 * main.c -- `moonshard-bench`: the benchmarks of moonshard, an executable
 * of their own (built by CMakeLists.txt beside `moonshard`, never
 * installed).
 *
 *   local    one node in this process (the node library), no HTTP
 *   cluster  2 node processes vs redis-benchmark INCR
 *   handoff  shards moving from 2 node processes to 3
 *   persist  committed asks of an event-sourced counter vs pgbench
 *   remember eager start of remembered entities after a move
 *   relay    a TCP relay that copies bytes (the baseline of two hops)
 *   all      the table of issue 16: the figures of the above (and wrk's)
 *            with their baselines, ratios and targets
 *
 * cluster, handoff and persist run `moonshard node` from the `moonshard` binary
 * beside this one, or $MOONSHARD_BIN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "io/logsink.h"

/* Where bench/floor.lua is (the source tree: this executable is not
 * installed). */
#ifndef MS_BENCH_DIR
#define MS_BENCH_DIR "bench"
#endif

static int usage(FILE *f)
{
    fprintf(f,
        "usage: moonshard-bench COMMAND ...\n"
        "  local [--ids N] [--messages N] [--asks N] [--max-active N]\n"
        "        [--gc-headroom MB]\n"
        "                                 measure one node\n"
        "  cluster [--seconds S] [--ids N]\n"
        "                                 2 nodes vs redis-benchmark INCR\n"
        "  handoff [--entities N] [--shards S] [--callers C]\n"
        "                                 shards moving from 2 nodes to 3\n"
        "  persist [--seconds S] [--ids N]\n"
        "                                 committed asks vs pgbench INSERTs\n"
        "                                 on a throwaway PostgreSQL (.ci/pg)\n"
        "  remember [--entities N] [--shards S] [--callers C]\n"
        "                                 eager start after a move, under\n"
        "                                 another type's traffic\n"
        "  relay --to PORT [--listen PORT]\n"
        "                                 copy bytes between 127.0.0.1:PORT\n"
        "                                 and each connection accepted (the\n"
        "                                 Redis baseline through two hops)\n"
        "  all [--seconds S] [--only ROW,...]\n"
        "                                 every target of issue 16 with its\n"
        "                                 baseline (wrk and Redis optional)\n"
        "cluster, handoff, persist, remember and all start nodes from the\n"
        "moonshard binary beside this one, or $MOONSHARD_BIN.\n");
    return f == stdout ? 0 : 2;
}

/* Puts bench/ first on LUA_PATH, for the floor's Lua VM (local.c): the
 * VM keeps LUA_PATH after the node's own paths. Returns 0 or -1. */
static int add_floor_path(void)
{
    const char *old = getenv("LUA_PATH");
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "%s/?.lua;%s", MS_BENCH_DIR,
                     old && *old ? old : ";");
    if (n < 0 || (size_t)n >= sizeof buf)
        return -1;
    return setenv("LUA_PATH", buf, 1);
}

int main(int argc, char **argv)
{
    ms_io_log_install();
    if (argc < 2)
        return usage(stderr);
    const char *cmd = argv[1];
    if (strcmp(cmd, "local") == 0 || strcmp(cmd, "all") == 0) {
        if (add_floor_path() < 0) {
            fprintf(stderr, "moonshard-bench: LUA_PATH is too long\n");
            return 1;
        }
        return cmd[0] == 'l' ? ms_bench_local_main(argc - 1, argv + 1)
                             : ms_bench_all_main(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "cluster") == 0)
        return ms_bench_cluster_main(argc - 1, argv + 1);
    if (strcmp(cmd, "handoff") == 0)
        return ms_bench_handoff_main(argc - 1, argv + 1);
    if (strcmp(cmd, "persist") == 0)
        return ms_bench_persist_main(argc - 1, argv + 1);
    if (strcmp(cmd, "remember") == 0)
        return ms_bench_remember_main(argc - 1, argv + 1);
    if (strcmp(cmd, "relay") == 0)
        return ms_bench_relay_main(argc - 1, argv + 1);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0)
        return usage(stdout);
    fprintf(stderr, "moonshard-bench: unknown command '%s'\n", cmd);
    return usage(stderr);
}
