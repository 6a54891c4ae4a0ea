/*
 * cluster.c -- `moonshard-bench cluster [--seconds S] [--ids N]`: asks and
 * tells across two node processes, and in the same run the same counts
 * for redis-benchmark INCR against a redis-server started on a free
 * loopback port (redis.c).
 *
 * The nodes (`moonshard node CONFIG --name nK`) run as child processes of
 * this one (supervisor.c). The load client (load.c) talks HTTP/1.1
 * keep-alive to n1's gateway, one connection per caller and one request
 * in flight per connection; then, when it is installed, wrk (wrk.c), an
 * independent load generator, sends the same asks over 50 connections.
 * Every entity they talk to is owned by n2, so every measured request is
 * a remote route n1 -> n2. Children are stopped
 * (SIGTERM, then SIGKILL) and temporary files removed on every way out,
 * Ctrl-C included.
 */
#include "bench.h"
#include "cluster.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define MAX_CALLERS 50
#define OWNER_WAIT_S 30    /* finding ids owned by n2 */
#define WRK_THREADS 1      /* like redis-benchmark: one client thread */

static const char TELL_BODY[] = "{\"type\":\"incr\"}";

/* Owner name of Counter `id` as n1 sees it: 1 = n2, 0 = n1, -1 = none
 * yet, -2 = error. */
static int owner_is_n2(struct cluster *cl, const char *id)
{
    char path[128], *body;
    snprintf(path, sizeof path, "/v1/entities/Counter/%s/owner", id);
    int st = ms__bench_http_call(cl->http[0], "GET", path, NULL, &body);
    int r = st != 200              ? -2
            : strstr(body, "\"owner\":\"n2\"") ? 1
            : strstr(body, "\"owner\":null")   ? -1
                                               : 0;
    free(body);
    return r;
}

/* Finds `n` ids whose owner is n2 (activating them through n1). */
static int pick_ids(struct cluster *cl, char ids[][24], int n)
{
    double until = ms__bench_now_s() + OWNER_WAIT_S;
    int have = 0;
    for (long k = 1; have < n && ms__bench_now_s() < until; k++) {
        char *id = ids[have], path[128], *body;
        snprintf(id, 24, "bc-%ld", k);
        int o = owner_is_n2(cl, id);
        if (o == -2)
            return -1;
        if (o == 0)
            continue;
        snprintf(path, sizeof path, "/v1/entities/Counter/%s/activate", id);
        int st = ms__bench_http_call(cl->http[0], "POST", path, "", &body);
        free(body);
        if (st != 200)
            return -1;
        if (o == -1 && owner_is_n2(cl, id) != 1)
            continue;
        have++;
    }
    return have == n ? 0 : -1;
}

/* Stats counters of n1 that tell whether routes were remote. */
static int n1_routes(struct cluster *cl, long long *remote, long long *local)
{
    char *body;
    int st = ms__bench_http_call(cl->http[0], "GET", "/v1/stats", NULL, &body);
    *remote = st == 200 ? ms__bench_json_num(body, "remote_routes") : -1;
    *local = st == 200 ? ms__bench_json_num(body, "local_routes") : -1;
    free(body);
    return *remote >= 0 ? 0 : -1;
}

/* Sum of the counters of all ids (asked through n1), or -1. */
static long long counter_sum(struct cluster *cl, char ids[][24], int n)
{
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        char path[128], *body;
        snprintf(path, sizeof path, "/v1/entities/Counter/%s/ask", ids[i]);
        int st = ms__bench_http_call(cl->http[0], "POST", path, ASK_BODY,
                                     &body);
        long long v = st == 200 ? ms__bench_json_num(body, "value") : -1;
        free(body);
        if (v < 0)
            return -1;
        sum += v;
    }
    return sum;
}

/* ---- the command ------------------------------------------------------ */

static void print_ratio(const char *what, double v, const char *op,
                        double target, int ok)
{
    printf("  %-44s %5.2f  (target %s %.1f: %s)\n", what, v, op, target,
           ok ? "met" : "MISSED");
}

static void row_rate(const char *what, const struct figures *a,
                     const struct figures *b)
{
    printf("  %-32s %15.0f %15.0f\n", what, a->rate, b->rate);
}

static void row_lat(const char *what, const struct figures *a,
                    const struct figures *b)
{
    char x[32], y[32] = "";
    snprintf(x, sizeof x, "%.3f / %.3f", a->p50, a->p99);
    if (b)
        snprintf(y, sizeof y, "%.3f / %.3f", b->p50, b->p99);
    printf("  %-32s %15s %15s\n", what, x, y);
}

static int usage(void)
{
    fprintf(stderr, "usage: moonshard-bench cluster [--seconds S] "
            "[--ids N]\n");
    return 2;
}

struct results {
    struct figures ask1, ask50, tell1, tell50;
    struct wrk_figures wrk;     /* 50 connections */
};

int ms__bench_cluster_routes(struct cluster *cl, long long *remote,
                             long long *local)
{
    if (n1_routes(cl, remote, local) < 0) {
        fprintf(stderr, "moonshard bench: cannot read n1's stats\n");
        return -1;
    }
    return 0;
}

int ms__bench_cluster_up(struct cluster *cl, char ids[][24], int nids)
{
    if (ms__bench_write_config(cl, "        Counter = { module = \"counter\","
                                   " shard_count = 64,\n"
                                   "                    idle_timeout = false"
                                   " },\n",
                               "") < 0) {
        perror("moonshard bench: cannot write the cluster config");
        return -1;
    }
    fprintf(stderr, "moonshard bench cluster: starting n1 and n2 ...\n");
    if (ms__bench_start_node(cl, 0) < 0 || ms__bench_start_node(cl, 1) < 0 ||
        ms__bench_wait_up(cl, 2) < 0) {
        ms__bench_show_node_logs(cl);
        return -1;
    }
    fprintf(stderr, "moonshard bench cluster: Up; picking %d ids owned by "
            "n2 ...\n", nids);
    if (pick_ids(cl, ids, nids) < 0) {
        fprintf(stderr, "moonshard bench: could not find %d ids owned by n2 "
                "within %d s\n", nids, OWNER_WAIT_S);
        ms__bench_show_node_logs(cl);
        return -1;
    }
    return 0;
}

int ms__bench_cluster_wrk(struct cluster *cl, char ids[][24], int nids,
                          int connections, int threads, int seconds,
                          struct wrk_figures *w)
{
    long long rem0, loc0, rem1 = -1, loc1 = -1, last = -2;
    if (ms__bench_cluster_routes(cl, &rem0, &loc0) < 0)
        return -1;
    fprintf(stderr, "moonshard bench cluster: wrk, %d connections, %d s "
            "...\n", connections, seconds);
    int rc = ms__bench_wrk(cl->http[0], ids, nids, "ask", ASK_BODY,
                           connections, threads, seconds, w);
    if (rc != 0)
        return rc;
    /* wrk closed its connections with up to one ask each in flight: wait
     * until n1 has routed them all (its routes stop changing) */
    for (int i = 0; i < 50 && rem1 != last; i++) {
        last = rem1;
        usleep(20000);
        if (ms__bench_cluster_routes(cl, &rem1, &loc1) < 0)
            return -1;
    }
    w->remote = rem1 - rem0;
    w->local = loc1 - loc0;
    return 0;
}

/* Starts the nodes, picks the ids, runs the four phases (and wrk, when it
 * is installed) and prints their table. Returns 0, 1 when a check
 * failed, -1 on an error (said). */
static int bench_nodes(struct cluster *cl, char ids[][24], int nids,
                       struct reqs *asks, struct reqs *tells, double seconds,
                       struct results *res)
{
    uv_loop_t *loop = uv_default_loop();
    long long rem0, loc0, rem1, loc1;

    if (ms__bench_cluster_up(cl, ids, nids) < 0)
        return -1;
    if (ms__bench_build_reqs(asks, cl->http[0], ids, nids, "ask",
                             ASK_BODY) < 0 ||
        ms__bench_build_reqs(tells, cl->http[0], ids, nids, "tell",
                             TELL_BODY) < 0) {
        fprintf(stderr, "moonshard bench: out of memory\n");
        return -1;
    }
    if (n1_routes(cl, &rem0, &loc0) < 0) {
        fprintf(stderr, "moonshard bench: cannot read n1's stats\n");
        return -1;
    }

    struct {
        const char *name;
        struct reqs *r;
        int expect, callers;
        struct figures *f;
    } plan[] = {
        {"asks, 1 caller", asks, 200, 1, &res->ask1},
        {"asks, 50 callers", asks, 200, MAX_CALLERS, &res->ask50},
        {"tells, 1 caller", tells, 202, 1, &res->tell1},
        {"tells, 50 callers", tells, 202, MAX_CALLERS, &res->tell50},
    };
    long measured = 0, failed = 0, tells_ok = 0;
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        struct phase ph;
        struct figures *f = plan[i].f;
        fprintf(stderr, "moonshard bench cluster: %s (%.1f s) ...\n",
                plan[i].name, seconds);
        if (ms__bench_run_phase(&ph, loop, cl->http[0], plan[i].r,
                                plan[i].expect, plan[i].callers, seconds,
                                NULL) < 0) {
            fprintf(stderr, "moonshard bench: %s: %s\n", plan[i].name,
                    ph.errmsg);
            free(ph.lat);
            ms__bench_show_node_logs(cl);
            return -1;
        }
        ms__bench_phase_figures(&ph, f);
        if (f->failed)
            fprintf(stderr, "moonshard bench: %s: %ld of %ld requests "
                    "failed (first status %d)\n", plan[i].name, f->failed,
                    f->done, ph.bad_status);
        measured += f->done;
        failed += f->failed;
        if (plan[i].expect == 202)
            tells_ok += f->done - f->failed;
    }
    if (n1_routes(cl, &rem1, &loc1) < 0) {
        fprintf(stderr, "moonshard bench: cannot read n1's stats\n");
        return -1;
    }
    long long sum = counter_sum(cl, ids, nids);
    /* last, so that the checks above count only the client's requests */
    int wrc = ms__bench_cluster_wrk(cl, ids, nids, MAX_CALLERS, WRK_THREADS,
                                    seconds < 1 ? 1 : (int)(seconds + 0.5),
                                    &res->wrk);
    if (wrc < 0)
        return -1;

    printf("moonshard bench cluster: 2 nodes on 127.0.0.1; client -> n1's "
           "gateway -> n2\n"
           "  Counter, 64 shards, %d ids owned by n2, HTTP/1.1 "
           "keep-alive, %.1f s a phase\n\n", nids, seconds);
    printf("  %-32s %15s %15s\n", "", "1 caller", "50 callers");
    row_rate("moonshard remote ask/s", &res->ask1, &res->ask50);
    row_rate("moonshard remote tell/s", &res->tell1, &res->tell50);
    row_lat("moonshard ask p50 / p99 (ms)", &res->ask1, &res->ask50);
    if (wrc == 0) {
        char lat[32];
        snprintf(lat, sizeof lat, "%.3f / %.3f", res->wrk.p50, res->wrk.p99);
        printf("  %-32s %15s %15.0f\n", "moonshard remote ask/s (wrk)", "-",
               res->wrk.rate);
        printf("  %-32s %15s %15s\n", "moonshard ask p50 / p99 (wrk)", "-",
               lat);
    } else {
        printf("  moonshard remote ask/s (wrk): skipped: wrk not installed\n");
    }
    printf("  checks: n1 routed %lld of %ld requests remotely, %lld "
           "locally;\n"
           "          the counters sum to %lld of %ld accepted tells; "
           "%ld failed\n",
           rem1 - rem0, measured, loc1 - loc0, sum, tells_ok, failed);
    if (wrc == 0)
        printf("          wrk (%d connections, %d thread, %d s): %ld answers, "
               "%ld status > 399,\n"
               "          %ld socket errors; n1 routed %lld remotely, %lld "
               "locally\n",
               res->wrk.connections, res->wrk.threads, res->wrk.seconds,
               res->wrk.requests, res->wrk.status_errors,
               res->wrk.socket_errors, res->wrk.remote, res->wrk.local);
    printf("\n");
    fflush(stdout);
    return failed || sum != tells_ok || rem1 - rem0 != measured ||
                   (wrc == 0 && !ms__bench_wrk_checked(&res->wrk))
               ? 1
               : 0;
}

/* Runs the Redis baseline on `port` and prints it with the ratios to the
 * cluster's figures. Returns 0 (also when Redis is not installed) or -1
 * on an error (said). */
static int bench_redis(int port, double seconds, const struct results *res)
{
    struct redis_figures rf;
    int rc = ms__bench_redis(port, MAX_CALLERS, seconds, 0, &rf);
    const struct figures r1 = rf.r1, r50 = rf.rn;
    const char *lat_src = rf.lat_src;
    if (rc == 1) {
        printf("  Redis baseline: skipped: Redis not installed\n"
               "  (redis-server and redis-benchmark are not both on PATH);"
               " no ratios\n");
        return 0;
    }
    if (rc < 0)
        return -1;
    row_rate("Redis INCR/s (redis-benchmark)", &r1, &r50);
    row_lat("Redis INCR p50 / p99 (ms)", &r1, r50.p99 >= 0 ? &r50 : NULL);
    printf("  (Redis latency from %s)\n\n", lat_src);
    double thr = res->ask50.rate / r50.rate;
    double lat = ms__bench_ratio(res->ask1.p99, r1.p99);
    print_ratio("remote ask/s, 50 callers / Redis INCR/s, 50", thr, ">=",
                0.5, thr >= 0.5);
    print_ratio("p99 ask, 1 caller / Redis p99, 1 client", lat, "<=", 3.0,
                r1.p99 > 0 && lat <= 3.0);
    if (res->wrk.requests > 0) {
        double w = res->wrk.rate / r50.rate;
        print_ratio("remote ask/s (wrk), 50 / Redis INCR/s, 50", w, ">=",
                    1.5, w >= 1.5);
    }
    return 0;
}

/*
 * `moonshard-bench cluster [--seconds S] [--ids N]`; argv[0] is "cluster".
 * Starts two nodes, measures remote asks and tells through n1's gateway,
 * then redis-benchmark INCR as the baseline, and prints both with their
 * ratios. Returns the exit code: 0, also when Redis is not installed or
 * a target is missed; 1 when a request failed or a check or step failed.
 */
int ms_bench_cluster_main(int argc, char **argv)
{
    double seconds = 3;
    int nids = 100;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds >= 0.1 && seconds <= 3600))
                return usage();
        } else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 10000)
                return usage();
            nids = (int)v;
        } else {
            fprintf(stderr, "moonshard bench cluster: unknown option '%s'\n",
                    argv[i]);
            return usage();
        }
    }

    struct cluster cl;
    int redis_port;
    if (ms__bench_cluster_init(&cl, 2, &redis_port) < 0)
        return 1;

    char (*ids)[24] = calloc((size_t)nids, sizeof *ids);
    struct reqs asks = {NULL, NULL, 0}, tells = {NULL, NULL, 0};
    struct results res;
    int rc = -1;
    memset(&res, 0, sizeof res);
    if (ids)
        rc = bench_nodes(&cl, ids, nids, &asks, &tells, seconds, &res);
    else
        fprintf(stderr, "moonshard bench: out of memory\n");
    /* the nodes are idle now but Redis gets the machine to itself */
    int nodes[2] = {CH_N1, CH_N2};
    ms__bench_stop_children(nodes, 2);
    if (rc >= 0 && bench_redis(redis_port, seconds, &res) < 0)
        rc = -1;
    fflush(stdout);
    ms__bench_cleanup_all();
    ms__bench_free_reqs(&asks);
    ms__bench_free_reqs(&tells);
    free(ids);
    return rc != 0 ? 1 : 0;
}
