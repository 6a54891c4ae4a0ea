/*
 * local.c -- `moonshard-bench local`: one node in this process (the node
 * library, through the public ms_node API), counter entities, no HTTP.
 * Every figure is printed next to a baseline measured in the same run:
 * the floor, bench/floor.lua in a Lua VM of its own.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lua/bridge.h"
#include "moonshard.h"

#define ROUNDS 5

/* bench/floor.lua, found through LUA_PATH (main.c puts bench/ first) */
#define FLOOR_MODULE "floor"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ms__bench_median(const double *v, int n)
{
    double c[16];
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    return n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
}

static const char PAYLOAD[] = "{\"type\":\"incr\"}";
static const char GET[] = "{\"type\":\"get\"}";

struct bench {
    uv_loop_t *loop;
    struct ms_node *node;
    int type;
    char **ids;
    size_t *idlen;
    long nids;
    long asks_left, asks_done, asks_failed, next_id;
};

static double now_s(void)
{
    return (double)uv_hrtime() / 1e9;
}

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * sysconf(_SC_PAGESIZE);
}

/* Runs the loop until every accepted message was handled. */
static void drain(struct bench *b)
{
    struct ms_stats s;
    do {
        uv_run(b->loop, UV_RUN_NOWAIT);
        ms_node_stats(b->node, &s);
    } while (ms_node_pending(b->node) > 0 || s.delivered < s.routed);
}

/* `messages` tells, round robin over ids[0..n), draining every `chunk`
 * (>= 1). Within a chunk the node delivers in its own order (shard by
 * shard), not in the order sent. */
static int tell_ids_by(struct bench *b, char **ids, const size_t *idlen,
                       long n, long messages, long chunk)
{
    for (long i = 0; i < messages;) {
        long end = i + chunk < messages ? i + chunk : messages;
        for (; i < end; i++) {
            long k = i % n;
            int rc = ms_node_tell(b->node, b->type, ids[k], idlen[k],
                                  PAYLOAD, sizeof PAYLOAD - 1);
            if (rc < 0) {
                fprintf(stderr, "bench: tell failed: %s\n", ms_strerror(rc));
                return rc;
            }
        }
        drain(b);
    }
    return 0;
}

/* The same, draining every 1000. */
static int tell_ids(struct bench *b, char **ids, const size_t *idlen, long n,
                    long messages)
{
    return tell_ids_by(b, ids, idlen, n, messages, 1000);
}

static int tell_all(struct bench *b, long messages)
{
    return tell_ids(b, b->ids, b->idlen, b->nids, messages);
}

/* Frees n ids (strdup'ed; NULL ones skipped) and their arrays. */
static void free_ids(char **ids, size_t *len, long n)
{
    for (long i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(len);
}

/* b->ids in the fixed random order of bench/queue.c's shuffled queue
 * floor (ms__qf_order), each id copied anew in that order, so that the
 * senders read their ids from memory in sequence, as the queue floor's
 * do; b->ids is left as it is. 0 and *ids, *len (for free_ids), or -1
 * (said). */
static int shuffled_ids(const struct bench *b, char ***ids, size_t **len)
{
    long n = b->nids;
    char **v = calloc((size_t)n, sizeof *v);
    size_t *l = calloc((size_t)n, sizeof *l);
    long *at = calloc((size_t)n, sizeof *at);
    int rc = v && l && at ? 0 : -1;
    if (rc == 0)
        ms__qf_order(at, n);
    for (long i = 0; rc == 0 && i < n; i++) {
        l[i] = b->idlen[at[i]];
        if (!(v[i] = strdup(b->ids[at[i]])))
            rc = -1;
    }
    free(at);
    if (rc < 0) {
        fprintf(stderr, "moonshard bench: not enough memory for the ids\n");
        free_ids(v, l, n);
        return -1;
    }
    *ids = v;
    *len = l;
    return 0;
}

/* A node allocates a shard when the shard's first message arrives (the
 * coordinator's strategy places it): one tell to one entity of each
 * shard, stopped again, so that the figures below measure messages, not
 * the plan's first allocation. */
static int warm_up(struct bench *b, uint32_t shards)
{
    char id[32];
    for (uint32_t s = 0, k = 0; s < shards; s++) {
        int n;
        do
            n = snprintf(id, sizeof id, "warm-up-%u", k++);
        while (ms_shard_of(id, (size_t)n, shards) != s);
        int rc = ms_node_tell(b->node, b->type, id, (size_t)n, PAYLOAD,
                              sizeof PAYLOAD - 1);
        if (rc == 0)
            rc = ms_node_stop_entity(b->node, b->type, id, (size_t)n);
        if (rc < 0) {
            fprintf(stderr, "bench: warm-up failed: %s\n", ms_strerror(rc));
            return rc;
        }
    }
    drain(b);
    return 0;
}

static void ask_one(struct bench *b);

/* The rate bench/floor.lua's function `fn` prints for `arg`, in a Lua VM
 * of its own, or -1 (said). gc_headroom_mb > 0: that VM's collector has
 * the node's pace (runtime/lua/vm.c); 0: LuaJIT's, as a bare loop has. */
static double floor_rate_of(struct bench *b, const char *fn, const char *arg,
                            int gc_headroom_mb)
{
    char err[1024], *out = NULL;
    if (ms_lua_run_isolated(ms_node_home(b->node), FLOOR_MODULE, fn, arg,
                            gc_headroom_mb, &out, err, sizeof err) < 0) {
        fprintf(stderr, "moonshard bench: floor %s failed: %s\n", fn, err);
        return -1;
    }
    double rate = atof(out);
    if (!(rate > 0))
        fprintf(stderr, "moonshard bench: floor %s gave '%s', not a rate\n",
                fn, out);
    free(out);
    return rate > 0 ? rate : -1;
}

static void on_reply(void *data, int err, const char *payload, size_t len)
{
    struct bench *b = data;
    (void)payload;
    (void)len;
    b->asks_done++;
    if (err)
        b->asks_failed++;
    if (b->asks_left > 0)
        ask_one(b);
}

static void ask_one(struct bench *b)
{
    long k = b->next_id++ % b->nids;
    b->asks_left--;
    int rc = ms_node_ask(b->node, b->type, b->ids[k], b->idlen[k], GET,
                         sizeof GET - 1, 10000, on_reply, b);
    if (rc < 0) {
        b->asks_done++;
        b->asks_failed++;
    }
}

/* A port of 127.0.0.1 free now (the kernel's choice), or -1. */
static int free_port(void)
{
    uv_loop_t loop;
    uv_tcp_t tcp;
    struct sockaddr_in a;
    int alen = sizeof a, port = -1;
    if (uv_loop_init(&loop) != 0)
        return -1;
    uv_tcp_init(&loop, &tcp);
    uv_ip4_addr("127.0.0.1", 0, &a);
    if (uv_tcp_bind(&tcp, (const struct sockaddr *)&a, 0) == 0 &&
        uv_tcp_getsockname(&tcp, (struct sockaddr *)&a, &alen) == 0)
        port = ntohs(a.sin_port);
    uv_close((uv_handle_t *)&tcp, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return port;
}

/* --gc-headroom of `bench local` (-1: the node's default) */
static int local_gc_headroom = -1;

/* The bench's node is a cluster of one, like any node: it binds its
 * transport and gateway on free ports of 127.0.0.1. */
static int write_config(char *dir, char *path, size_t len, long ids,
                        long max_active)
{
    int listen = free_port(), http = free_port();
    for (int i = 0; i < 8 && http == listen; i++)
        http = free_port();
    if (listen < 0 || http == listen || http < 0 || !mkdtemp(dir))
        return -1;
    snprintf(path, len, "%s/bench.lua", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "return {\n"
            "    cluster = \"bench\",\n"
            "    nodes = { { name = \"bench\", listen = \"127.0.0.1:%d\","
            " http = \"127.0.0.1:%d\" } },\n"
            "    entities = {\n"
            "        Counter = { module = \"counter\", shard_count = 64,\n"
            "                    idle_timeout = 120, max_pending = %ld },\n"
            "    },\n",
            listen, http, ids + 20000 < 1000000 ? ids + 20000 : 1000000);
    if (max_active > 0)
        fprintf(f, "    max_active_entities = %ld,\n", max_active);
    if (local_gc_headroom >= 0)
        fprintf(f, "    gc_headroom_mb = %d,\n", local_gc_headroom);
    fprintf(f, "}\n");
    fclose(f);
    return 0;
}

/* Starts the bench's node (max_active_entities = max_active when > 0)
 * into b->node and b->type; 0, or -1 with a message printed. */
static int start_node(struct bench *b, long nids, long max_active)
{
    char dir[] = "/tmp/moonshard-bench-XXXXXX", path[256];
    if (write_config(dir, path, sizeof path, nids, max_active) < 0) {
        perror("moonshard bench: cannot write its config");
        return -1;
    }
    struct ms_node_options opts = {path, NULL};
    char err[1024];
    int rc = ms_node_new(&b->node, b->loop, &opts, err, sizeof err);
    unlink(path);
    rmdir(dir);
    if (rc < 0) {
        fprintf(stderr, "moonshard bench: %s\n", err);
        return -1;
    }
    b->type = ms_node_type(b->node, "Counter", 7);
    return 0;
}

#define LIMIT_ROUNDS 5

/* The rate of `messages` tells round robin over ids[0..n), or -1. */
static double tell_rate(struct bench *b, char **ids, const size_t *idlen,
                        long n, long messages)
{
    ms_node_lua_gc(b->node);
    double t0 = now_s();
    if (tell_ids(b, ids, idlen, n, messages) < 0)
        return -1;
    return (double)messages / (now_s() - t0);
}

/* The first message to each of ids[0..n): activations per second, or
 * -1. */
static double activation_rate(struct bench *b, char **ids,
                              const size_t *idlen, long n)
{
    return tell_rate(b, ids, idlen, n, n);
}

/* --max-active N: a node that holds its active-entity limit, beside the
 * node above (no limit, every id active), in the same loop. The second
 * node has max_active_entities = N and got the first message to every id
 * (so it is full and holds the last N). The two alternate, LIMIT_ROUNDS
 * times, on: tells to a hot set of the last N / 2 ids (within the limit:
 * nothing is passivated), and first messages to new ids (a fresh share
 * of `nids` new ids per round; on the limited node each evicts one).
 * Prints the medians and the median of the paired ratios; returns 0, or
 * 1 on a failure. Sets *limited to the second node (NULL when it did not
 * start), for the caller to close. */
static int limit_rows(struct bench *b, long nids, long messages,
                      long max_active, struct ms_node **limited)
{
    long hot = max_active / 2, share = nids / LIMIT_ROUNDS;
    char **hot_ids = b->ids + (nids - hot);
    size_t *hot_len = b->idlen + (nids - hot);
    char **fresh = calloc((size_t)nids, sizeof *fresh);
    size_t *fresh_len = calloc((size_t)nids, sizeof *fresh_len);
    if (!fresh || !fresh_len)
        return 1;
    for (long i = 0; i < nids; i++) {
        char buf[32];
        int n = snprintf(buf, sizeof buf, "x-%ld", i + 1);
        fresh[i] = strdup(buf);
        fresh_len[i] = (size_t)n;
    }
    int failed = 1;
    struct bench l = *b;
    l.node = NULL;
    struct ms_stats st;
    /* filled in chunks of at most `hot` ids: the last `hot` ids are then
     * among the last max_active activated, whatever the order within a
     * chunk (with one chunk of 1,000, --ids 1000 --max-active 500 found
     * 2 of them evicted by the fill, and the hot tells activated them
     * again) */
    long fill_chunk = hot < 1000 ? hot : 1000;
    if (start_node(&l, nids, max_active) < 0 || warm_up(&l, 64) < 0)
        goto out;
    /* below 64, the warm-up's own entities evicted each other: counted
     * from here on */
    ms_node_stats(l.node, &st);
    uint64_t warm_evicted = st.limit_passivations;
    if (tell_ids_by(&l, b->ids, b->idlen, nids, nids, fill_chunk) < 0)
        goto out;
    ms_node_stats(l.node, &st);
    uint64_t evicted0 = st.limit_passivations;
    double hb[LIMIT_ROUNDS], hl[LIMIT_ROUNDS], hr[LIMIT_ROUNDS];
    for (int r = 0; r < LIMIT_ROUNDS; r++) {
        hb[r] = tell_rate(b, hot_ids, hot_len, hot, messages);
        hl[r] = tell_rate(&l, hot_ids, hot_len, hot, messages);
        if (hb[r] < 0 || hl[r] < 0)
            goto out;
        hr[r] = hl[r] / hb[r];
    }
    ms_node_stats(l.node, &st);
    uint64_t evicted_hot = st.limit_passivations - evicted0;
    double ab[LIMIT_ROUNDS], al[LIMIT_ROUNDS], ar[LIMIT_ROUNDS];
    for (int r = 0; r < LIMIT_ROUNDS; r++) {
        ab[r] = activation_rate(b, fresh + r * share, fresh_len + r * share,
                                share);
        al[r] = activation_rate(&l, fresh + r * share,
                                fresh_len + r * share, share);
        if (ab[r] < 0 || al[r] < 0)
            goto out;
        ar[r] = al[r] / ab[r];
    }
    ms_node_stats(l.node, &st);
    printf("  beside it, a node with max_active_entities = %ld, full (the "
           "first message to the %ld ids),\n  the two alternating, "
           "medians of %d rounds:\n", max_active, nids, LIMIT_ROUNDS);
    printf("    tells to %ld hot ids, within the limit:      %12.0f msg/s"
           "  without a limit %.0f msg/s, ratio %.2f (rounds:", hot,
           ms__bench_median(hl, LIMIT_ROUNDS),
           ms__bench_median(hb, LIMIT_ROUNDS),
           ms__bench_median(hr, LIMIT_ROUNDS));
    for (int r = 0; r < LIMIT_ROUNDS; r++)
        printf(" %.2f", hr[r]);
    printf(")\n");
    printf("    first messages to %ld new ids, each evicting:%9.0f /s"
           "     plain activations %.0f /s, ratio %.2f (rounds:", share,
           ms__bench_median(al, LIMIT_ROUNDS),
           ms__bench_median(ab, LIMIT_ROUNDS),
           ms__bench_median(ar, LIMIT_ROUNDS));
    for (int r = 0; r < LIMIT_ROUNDS; r++)
        printf(" %.2f", ar[r]);
    printf(")\n");
    printf("    limited node: active %llu, passivated for the limit %llu "
           "(%llu during the hot tells), handler errors %llu\n",
           (unsigned long long)st.active_entities,
           (unsigned long long)(st.limit_passivations - warm_evicted),
           (unsigned long long)evicted_hot,
           (unsigned long long)st.handler_errors);
    failed = st.handler_errors != 0 || evicted_hot != 0 ||
             st.active_entities != (uint64_t)max_active ||
             st.limit_passivations - warm_evicted !=
                 (uint64_t)(nids - max_active + LIMIT_ROUNDS * share);
out:
    *limited = l.node; /* closed with the first: they share the loop */
    for (long i = 0; i < nids; i++)
        free(fresh[i]);
    free(fresh);
    free(fresh_len);
    return failed;
}

/* --max-active of `bench local` (0: none), for ms__bench_local_run */
static long local_max_active;

int ms_bench_local_main(int argc, char **argv)
{
    long nids = 100000, messages = 1000000, nasks = 500000;
    long max_active = 0, gc_headroom = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
            nids = atol(argv[++i]);
        else if (strcmp(argv[i], "--messages") == 0 && i + 1 < argc)
            messages = atol(argv[++i]);
        else if (strcmp(argv[i], "--asks") == 0 && i + 1 < argc)
            nasks = atol(argv[++i]);
        else if (strcmp(argv[i], "--max-active") == 0 && i + 1 < argc)
            max_active = atol(argv[++i]);
        else if (strcmp(argv[i], "--gc-headroom") == 0 && i + 1 < argc)
            gc_headroom = atol(argv[++i]);
        else {
            fprintf(stderr, "moonshard bench: unknown option '%s'\n",
                    argv[i]);
            return 2;
        }
    }
    if (nids < 1000 || messages < nids || nasks < 0) {
        fprintf(stderr, "moonshard bench: need --ids >= 1000, "
                "--messages >= --ids and --asks >= 0\n");
        return 2;
    }
    if (max_active && (max_active < 2 || max_active >= nids)) {
        fprintf(stderr, "moonshard bench: need 2 <= --max-active < "
                "--ids\n");
        return 2;
    }
    if (gc_headroom < -1 || gc_headroom > 1024) {
        fprintf(stderr, "moonshard bench: need 0 <= --gc-headroom <= "
                "1024 (MB)\n");
        return 2;
    }
    local_max_active = max_active;
    local_gc_headroom = (int)gc_headroom;
    struct ms_bench_local_figures fig;
    return ms__bench_local_run(nids, messages, nasks, ROUNDS, 1, &fig);
}

int ms__bench_local_run(long nids, long messages, long nasks, int rounds,
                        int print, struct ms_bench_local_figures *fig)
{
    long max_active = local_max_active;
    memset(fig, 0, sizeof *fig);
    if (rounds > ROUNDS)
        rounds = ROUNDS;
    struct bench b;
    memset(&b, 0, sizeof b);
    b.loop = uv_default_loop();
    char err[1024];
    if (start_node(&b, nids, 0) < 0)
        return 1;
    /* from here on a failure goes to done, which closes the node: left
     * open, it would keep bench all's loop (the default loop, the next
     * rows' too) running for good */
    int failed = 1, limit_failed = 0;
    char **sids = NULL; /* the ids in a fixed random order */
    size_t *slen = NULL;
    struct ms_stats st;
    memset(&st, 0, sizeof st);
    b.nids = nids;
    b.ids = calloc((size_t)nids, sizeof *b.ids);
    b.idlen = calloc((size_t)nids, sizeof *b.idlen);
    if (!b.ids || !b.idlen) {
        fprintf(stderr, "moonshard bench: not enough memory for the ids\n");
        goto done;
    }
    for (long i = 0; i < nids; i++) {
        char buf[32];
        int n = snprintf(buf, sizeof buf, "c-%ld", i + 1);
        if (!(b.ids[i] = strdup(buf))) {
            fprintf(stderr, "moonshard bench: not enough memory for the "
                    "ids\n");
            goto done;
        }
        b.idlen[i] = (size_t)n;
    }

    /* floor: same VM, same behavior, same payload, no runtime */
    char arg[256], *out = NULL;
    snprintf(arg, sizeof arg, "counter %ld %ld %s", nids, messages, PAYLOAD);

    if (warm_up(&b, 64) < 0)
        goto done;
    ms_node_lua_gc(b.node);
    long rss0 = rss_bytes();
    double t0 = now_s();
    if (tell_all(&b, nids) < 0)
        goto done;
    double act_s = now_s() - t0;
    ms_node_lua_gc(b.node);
    long rss1 = rss_bytes();
    ms_node_stats(b.node, &st);
    fig->activated = st.active_entities;

    /* floor and runtime alternate, ROUNDS times each, so that both see
     * the same machine; the medians and the median of the paired ratios
     * are reported */
    double floors[ROUNDS], tells[ROUNDS], ratios[ROUNDS];
    double bfloors[ROUNDS], bratios[ROUNDS];
    double qfloors[ROUNDS], qratios[ROUNDS], afloors[ROUNDS], aratios[ROUNDS];
    /* the floor with the node's collector pace (runtime/lua/vm.c): what
     * of the ratios is the pace, which a bare loop could set too */
    double pfloors[ROUNDS], pratios[ROUNDS];
    int pace = ms_node_gc_headroom_mb(b.node);
    /* the queue floor's flags follow the floors' argument (floor.lua) */
    char actarg[sizeof arg + 32];
    snprintf(actarg, sizeof actarg, "%s activated", arg);
    for (int r = 0; r < rounds; r++) {
        if ((floors[r] = floor_rate_of(&b, "floor", arg, 0)) <= 0 ||
            (bfloors[r] = floor_rate_of(&b, "bytes", arg, 0)) <= 0 ||
            (qfloors[r] = floor_rate_of(&b, "queue", arg, 0)) <= 0 ||
            (afloors[r] = floor_rate_of(&b, "queue", actarg, 0)) <= 0)
            goto done;
        pfloors[r] = floors[r];
        if (pace > 0 &&
            (pfloors[r] = floor_rate_of(&b, "floor", arg, pace)) <= 0)
            goto done;
        ms_node_lua_gc(b.node);
        t0 = now_s();
        if (tell_all(&b, messages) < 0)
            goto done;
        tells[r] = (double)messages / (now_s() - t0);
        ratios[r] = tells[r] / floors[r];
        bratios[r] = tells[r] / bfloors[r];
        qratios[r] = tells[r] / qfloors[r];
        aratios[r] = tells[r] / afloors[r];
        pratios[r] = tells[r] / pfloors[r];
        ms_node_lua_gc(b.node);
    }
    double floor_rate = rounds ? ms__bench_median(floors, rounds) : 0;
    double tell_rate = rounds ? ms__bench_median(tells, rounds) : 0;
    double tell_ratio = rounds ? ms__bench_median(ratios, rounds) : 0;
    fig->bytes_rate = rounds ? ms__bench_median(bfloors, rounds) : 0;
    fig->tell_bytes_ratio = rounds ? ms__bench_median(bratios, rounds) : 0;
    fig->queue_rate = rounds ? ms__bench_median(qfloors, rounds) : 0;
    fig->tell_queue_ratio = rounds ? ms__bench_median(qratios, rounds) : 0;
    fig->act_queue_rate = rounds ? ms__bench_median(afloors, rounds) : 0;
    fig->tell_act_queue_ratio = rounds ? ms__bench_median(aratios, rounds) : 0;
    fig->gc_headroom_mb = pace;
    fig->paced_floor_rate = rounds ? ms__bench_median(pfloors, rounds) : 0;
    fig->tell_paced_ratio = rounds ? ms__bench_median(pratios, rounds) : 0;
    /* the floor from bytes with an ask's payload: it encodes the reply */
    if (rounds && nasks) {
        char aarg[256], qarg[sizeof aarg + 32];
        snprintf(aarg, sizeof aarg, "counter %ld %ld %s", nids,
                 nasks > nids ? nasks : nids, GET);
        snprintf(qarg, sizeof qarg, "%s ask activated", aarg);
        if ((fig->ask_bytes_rate = floor_rate_of(&b, "bytes", aarg, 0)) <=
                0 ||
            (fig->ask_queue_rate = floor_rate_of(&b, "queue", qarg, 0)) <=
                0)
            goto done;
    }

    const long window = 1000;
    b.asks_left = nasks;
    t0 = now_s();
    for (long i = 0; i < window && b.asks_left > 0; i++)
        ask_one(&b);
    while (b.asks_done < nasks)
        uv_run(b.loop, UV_RUN_NOWAIT);
    double ask_s = now_s() - t0;

    /* the tells again with the ids in a fixed random order, paired with
     * the queue floor in the same order: the entities' states are no
     * longer visited in the order they were made in */
    double sqfloors[ROUNDS], stells[ROUNDS], sratios[ROUNDS];
    if (rounds) {
        if (shuffled_ids(&b, &sids, &slen) < 0)
            goto done;
        char sarg[sizeof actarg + 16];
        snprintf(sarg, sizeof sarg, "%s shuffled", actarg);
        for (int r = 0; r < rounds; r++) {
            if ((sqfloors[r] = floor_rate_of(&b, "queue", sarg, 0)) <= 0)
                goto done;
            ms_node_lua_gc(b.node);
            t0 = now_s();
            if (tell_ids(&b, sids, slen, nids, messages) < 0)
                goto done;
            stells[r] = (double)messages / (now_s() - t0);
            sratios[r] = stells[r] / sqfloors[r];
            ms_node_lua_gc(b.node);
        }
        fig->shuffled_queue_rate = ms__bench_median(sqfloors, rounds);
        fig->shuffled_tell_rate = ms__bench_median(stells, rounds);
        fig->tell_shuffled_ratio = ms__bench_median(sratios, rounds);
    }

    ms_node_stats(b.node, &st);
    fig->floor_rate = floor_rate;
    fig->tell_rate = tell_rate;
    fig->tell_ratio = tell_ratio;
    fig->ask_rate = nasks ? (double)nasks / ask_s : 0;
    fig->ask_ratio = ms__bench_ratio(fig->ask_rate, floor_rate);
    fig->ask_paced_ratio =
        ms__bench_ratio(fig->ask_rate, fig->paced_floor_rate);
    fig->ask_bytes_ratio = fig->ask_bytes_rate > 0
                               ? fig->ask_rate / fig->ask_bytes_rate : 0;
    fig->ask_queue_ratio = fig->ask_queue_rate > 0
                               ? fig->ask_rate / fig->ask_queue_rate : 0;
    fig->asks_failed = b.asks_failed;
    fig->act_rate = (double)nids / act_s;
    fig->bytes_per_entity = (double)(rss1 - rss0) / (double)nids;
    fig->handler_errors = st.handler_errors;
    failed = 0;
    if (!print)
        goto done;
    printf("moonshard bench local: one node, Counter entities, %ld ids, "
           "64 shards\n", nids);
    printf("  floor (LuaJIT loop: cjson.decode + counter.receive): "
           "%12.0f msg/s  (median of %d)\n", floor_rate, ROUNDS);
    /* what the floor is made of: its decode alone, once, after the rounds */
    if (ms_lua_run_isolated(ms_node_home(b.node), FLOOR_MODULE, "decode",
                            arg, 0, &out, err, sizeof err) == 0) {
        double dec = atof(out);
        free(out);
        printf("    of which cjson.decode of the payload alone:     "
               "%12.0f msg/s  (%.0f of the floor's %.0f ns a message)\n",
               dec, dec > 0 ? 1e9 / dec : 0,
               floor_rate > 0 ? 1e9 / floor_rate : 0);
    }
    printf("  tells through the runtime (%ld over %ld ids):   %12.0f msg/s"
           "  (median of %d)\n", messages, nids, tell_rate, ROUNDS);
    printf("  tells / floor, median of the paired rounds:     %12.2f"
           "        (target >= 0.75; rounds:", tell_ratio);
    for (int r = 0; r < ROUNDS; r++)
        printf(" %.2f", ratios[r]);
    printf(")\n");
    if (nasks) /* --asks 0: no asks, no row */
        printf("  asks (%ld, %ld in flight):                  %12.0f asks/s"
               "  ratio to floor %.2f  failed %ld\n",
               nasks, window, fig->ask_rate, fig->ask_ratio, b.asks_failed);
    if (pace > 0) {
        printf("  the floor with the node's collector pace "
               "(gc_headroom_mb %d):\n"
               "                                                   "
               "%12.0f msg/s  tells / it %.2f", pace,
               fig->paced_floor_rate, fig->tell_paced_ratio);
        if (nasks)
            printf(", asks / it %.2f", fig->ask_paced_ratio);
        printf("\n");
    }
    /* the same loop, its id and payload taken as bytes from C memory
     * each message, as messages come to a runtime (bench/floor.lua) */
    printf("  the floor from bytes (id and payload from C memory):\n"
           "    with a tell's payload:                         %12.0f msg/s"
           "  tells / it %.2f (median of the paired rounds)\n",
           fig->bytes_rate, fig->tell_bytes_ratio);
    if (nasks)
        printf("    with an ask's, its reply encoded:              %12.0f msg/s"
               "  asks / it %.2f\n", fig->ask_bytes_rate,
               fig->ask_bytes_ratio);
    /* the floor behind the least a runtime of this shape does: a C
     * lookup of the id and a FIFO between sender and handler
     * (bench/floor.lua's queue, bench/queue.c) */
    printf("  the queue floor (the floor behind a C lookup and a FIFO):\n"
           "    its states made back to back, tells:           %12.0f msg/s"
           "  %.2f of the floor, tells / it %.2f\n"
           "    made by first messages, as a runtime's, tells: %12.0f msg/s"
           "  %.2f of the floor, tells / it %.2f\n",
           fig->queue_rate,
           ms__bench_ratio(fig->queue_rate, floor_rate),
           fig->tell_queue_ratio, fig->act_queue_rate,
           ms__bench_ratio(fig->act_queue_rate, floor_rate),
           fig->tell_act_queue_ratio);
    if (nasks)
        printf("    made so, asks, each reply encoded, sent back:  "
               "%12.0f msg/s  %.2f of the floor, asks / it %.2f\n",
               fig->ask_queue_rate,
               ms__bench_ratio(fig->ask_queue_rate, floor_rate),
               fig->ask_queue_ratio);
    /* the floors and the tells above visit the entities in the order
     * they were made in; a runtime's messages come in any order */
    if (rounds)
        printf("  the ids in a fixed random order (median of %d paired "
               "rounds):\n"
               "    the queue floor, states made by first messages:%12.0f"
               " msg/s  %.2f of the floor\n"
               "    tells through the runtime:                     %12.0f"
               " msg/s  %.2f of the floor, / the queue floor %.2f\n",
               rounds, fig->shuffled_queue_rate,
               ms__bench_ratio(fig->shuffled_queue_rate, floor_rate),
               fig->shuffled_tell_rate,
               ms__bench_ratio(fig->shuffled_tell_rate, floor_rate),
               fig->tell_shuffled_ratio);
    printf("  activations (first message to %ld ids):      %12.0f /s\n",
           nids, (double)nids / act_s);
    printf("  memory per idle activated entity (RSS delta):  %8.0f bytes"
           "   (target <= 300 at 1,000,000 ids)\n",
           (double)(rss1 - rss0) / (double)nids);
    printf("  entities active: %llu, handler errors: %llu\n",
           (unsigned long long)st.active_entities,
           (unsigned long long)st.handler_errors);
    struct ms_node *limited = NULL;
    limit_failed = max_active ? limit_rows(&b, nids, messages, max_active,
                                           &limited)
                              : 0;
    if (limited)
        ms_node_close(limited);
done:
    free_ids(sids, slen, nids);
    ms_node_close(b.node);
    uv_run(b.loop, UV_RUN_DEFAULT);
    free_ids(b.ids, b.idlen, nids);
    return failed || st.handler_errors || b.asks_failed || limit_failed ? 1
                                                                         : 0;
}
