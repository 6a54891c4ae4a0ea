/*
 * remember.c -- `moonshard-bench remember [--entities N] [--shards S]
 * [--callers C]`: how fast a node starts again the remembered entities of
 * shards that move to it (remember-entities, issue 12: eager start), and
 * what that costs another type's traffic on the same node. It runs its
 * nodes and client with the helpers of supervisor.c and load.c
 * (cluster.h).
 *
 * Two entity types on the `counter` behavior:
 *   Counter  S shards, remembered in the file store (fsync "always",
 *            the default) or the postgres store (--store postgres: a
 *            throwaway server of its own, `.ci/pg start PID` as for
 *            `moonshard-bench persist`, stopped at the end), idle_timeout
 *            false;
 *   Ping     64 shards, not remembered: the other traffic.
 * Both are placed by a strategy the bench writes beside the config
 * (bench_pcounter.lua, the file of the temporary folder meant for a
 * module): every shard on n2 once n2 is up, else on the first up member;
 * no voluntary moves.
 *
 * n1 starts alone and owns every Counter shard; N entities are activated
 * through it and recorded (its remember queue drains, n1 counts N
 * remembered). n2 joins and owns every Ping shard. C callers ask Ping
 * `get` on n2: WARMUP_S, then STEADY_S steady; then every Counter shard is
 * moved by hand (POST /v1/move/Counter/{shard} on the coordinator, n1),
 * and the eager start is timed from the first move request until n2's
 * remember stats say eager_starts >= N and eager_pending == 0. The traffic
 * of that window is compared with the steady one. Stats are polled every
 * POLL_MS during both windows, so that they pay the same polling.
 *
 * Nodes of one machine share a file store directory (the store locks a
 * log, not the folder), so n2 lists the logs n1 wrote. The folder is made
 * by mkdtemp and removed at the end (not when the bench is killed).
 */
#include "bench.h"
#include "cluster.h"

#include <errno.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define REM_MAX_CALLERS 500
#define PING_SHARDS 64
#define PING_IDS 1000
#define POLL_MS 20
#define WARMUP_S 0.5
#define STEADY_S 3.0
#define RECORD_WAIT_S 120   /* n1 recorded the N activations */
#define EAGER_WAIT_S 300    /* n2 started them all again */
#define MIGRATE_WAIT_S 60   /* n1 migrated the schema (postgres) */
#define PG_SCRIPT MS_BENCH_DIR "/../.ci/pg"

/* The strategy module: pure, deterministic, its id names its option. */
static const char STRATEGY[] =
    "-- written by `moonshard-bench remember`, removed when it ends:\n"
    "-- every shard on member `name` once it is up, else on the first up\n"
    "-- member (in the util.view order); no voluntary moves.\n"
    "local util = require \"moonshard.strategy.util\"\n"
    "local M = {}\n"
    "local methods = {}\n"
    "local mt = { __index = methods }\n"
    "function M.on(name)\n"
    "    return setmetatable({ name = name,\n"
    "        id = util.id(\"bench_on\", { name = name }) }, mt)\n"
    "end\n"
    "function methods:allocate(shard, view)\n"
    "    local v = util.view(view, 2)\n"
    "    util.check_shard(shard, v, 2)\n"
    "    local m = v.by_name[self.name]\n"
    "    if m and m.status == \"up\" then return self.name end\n"
    "    for _, x in ipairs(v.members) do\n"
    "        if x.status == \"up\" then return x.name end\n"
    "    end\n"
    "    return nil, \"no member is up\"\n"
    "end\n"
    "function methods:rebalance()\n"
    "    return {}\n"
    "end\n"
    "return M\n";

struct rem_args {
    long entities;
    int shards, callers;
    int pg;                     /* the postgres store, else file */
};

/* ---- a throwaway PostgreSQL (--store postgres) ------------------------ */

struct pgsrv {
    char dir[512];
    char conninfo[512];
};

/* The first `len`-1 bytes of the stdout of `cmd` (sh) into out; its exit
 * status, or -1. */
static int capture(const char *cmd, char *out, size_t len)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, len - 1, p);
    out[n] = 0;
    while (fgetc(p) != EOF)
        ;
    int st = pclose(p);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `.ci/pg start PID`: its folder and connection string into s; 0 or -1
 * (said). The script's guard stops the server if this process dies. */
static int pg_up(struct pgsrv *s)
{
    char cmd[1024], out[2048], port[32], pid[32];
    snprintf(cmd, sizeof cmd, "%s start %d", PG_SCRIPT, (int)getpid());
    fprintf(stderr, "moonshard bench remember: starting a throwaway "
            "PostgreSQL (%s) ...\n", PG_SCRIPT);
    if (capture(cmd, out, sizeof out) != 0 ||
        sscanf(out, "%511[^\n]\n%31[^\n]\n%31[^\n]\n%511[^\n]", s->dir,
               port, pid, s->conninfo) != 4) {
        fprintf(stderr, "moonshard bench remember: %s start failed\n",
                PG_SCRIPT);
        s->dir[0] = 0;
        return -1;
    }
    return 0;
}

/* `.ci/pg stop DIR` (DIR is mkdtemp's: no quote in it). */
static void pg_down(struct pgsrv *s)
{
    char cmd[1024], out[256];
    if (!s->dir[0] || strchr(s->dir, '\''))
        return;
    snprintf(cmd, sizeof cmd, "%s stop '%s'", PG_SCRIPT, s->dir);
    capture(cmd, out, sizeof out);
    s->dir[0] = 0;
}

/* What n<i>'s /v1/stats "remember" object says. */
struct rstats {
    long long remembered, queued, inflight, eager_starts, eager_pending;
    long long errors, owned;
};

static int read_rstats(const struct cluster *cl, int i, struct rstats *r)
{
    char *body;
    int rc = ms__bench_http_call(cl->http[i], "GET", "/v1/stats", NULL,
                                 &body);
    const char *m = rc == 200 ? strstr(body, "\"remember\":{") : NULL;
    const char *t = m ? strstr(m, "\"Counter\":{") : NULL;
    if (m) {
        r->owned = ms__bench_json_num(body, "owned_shards");
        r->queued = ms__bench_json_num(m, "queued");
        r->inflight = ms__bench_json_num(m, "inflight");
        r->eager_starts = ms__bench_json_num(m, "eager_starts");
        r->eager_pending = ms__bench_json_num(m, "eager_pending");
        r->errors = ms__bench_json_num(m, "errors");
        r->remembered = t ? ms__bench_json_num(t, "remembered") : -1;
    }
    free(body);
    return m && r->queued >= 0 && r->eager_starts >= 0 &&
                   r->eager_pending >= 0 && r->remembered >= 0
               ? 0
               : -1;
}

/* One POST /v1/entities/Ping/p<i>/ask {"type":"get"} per id to port. */
static int ping_reqs(struct reqs *r, int port)
{
    r->n = PING_IDS;
    r->buf = calloc(PING_IDS, sizeof *r->buf);
    r->len = calloc(PING_IDS, sizeof *r->len);
    if (!r->buf || !r->len)
        return -1;
    for (int i = 0; i < PING_IDS; i++) {
        char req[256];
        int len = snprintf(req, sizeof req,
                           "POST /v1/entities/Ping/p%d/ask HTTP/1.1\r\n"
                           "Host: 127.0.0.1:%d\r\n"
                           "Content-Type: application/json\r\n"
                           "Content-Length: %zu\r\n\r\n%s",
                           i + 1, port, strlen(ASK_BODY), ASK_BODY);
        r->buf[i] = strdup(req);
        r->len[i] = (size_t)len;
        if (!r->buf[i])
            return -1;
    }
    return 0;
}

/* The thread that, while the main thread drives the Ping load, waits out
 * the warm-up and the steady window (polling n2), moves every Counter
 * shard, and waits until n2 started the N entities again. */
struct mover {
    struct cluster *cl;
    long entities;
    int shards;
    atomic_int stop;            /* set here: the load ends */
    atomic_int abort;           /* set by the main thread: give up */
    uint64_t t_start, t_sent, t_owned, t_done;
    long long refused;          /* move requests answered otherwise */
    int first_bad;
    struct rstats end;
    char err[200];
    int rc;
};

static int aborted(struct mover *mv)
{
    return atomic_load(&mv->abort);
}

static int mover_fail(struct mover *mv, const char *why)
{
    snprintf(mv->err, sizeof mv->err, "%s", why);
    return -1;
}

static int move_all(struct mover *mv)
{
    struct rstats r;
    double at = ms__bench_now_s() + WARMUP_S + STEADY_S;
    while (ms__bench_now_s() < at && !aborted(mv)) {
        read_rstats(mv->cl, 1, &r);
        usleep(POLL_MS * 1000);
    }
    if (aborted(mv))
        return mover_fail(mv, "stopped");
    mv->t_start = uv_hrtime();
    for (int s = 0; s < mv->shards; s++) {
        char path[64], *body;
        snprintf(path, sizeof path, "/v1/move/Counter/%d", s);
        int st = ms__bench_http_call_as(mv->cl->http[0], mv->cl->token,
                                        "POST", path, NULL, &body);
        free(body);
        if (st < 200 || st > 299) {
            if (!mv->refused)
                mv->first_bad = st;
            mv->refused++;
        }
    }
    mv->t_sent = uv_hrtime();
    double until = ms__bench_now_s() + EAGER_WAIT_S;
    for (;;) {
        if (read_rstats(mv->cl, 1, &r) == 0) {
            if (!mv->t_owned && r.owned >= mv->shards + PING_SHARDS)
                mv->t_owned = uv_hrtime();
            if (r.eager_starts >= mv->entities && r.eager_pending == 0)
                break;
        }
        if (ms__bench_child_gone(CH_N2) || ms__bench_child_gone(CH_N1))
            return mover_fail(mv, "a node exited during the move");
        if (ms__bench_now_s() > until) {
            snprintf(mv->err, sizeof mv->err, "n2 started %lld of %ld "
                     "entities within %d s (%lld move requests refused, "
                     "first status %d)", r.eager_starts, mv->entities,
                     EAGER_WAIT_S, mv->refused, mv->first_bad);
            return -1;
        }
        if (aborted(mv))
            return mover_fail(mv, "stopped");
        usleep(POLL_MS * 1000);
    }
    mv->t_done = uv_hrtime();
    mv->end = r;
    return 0;
}

static void mover_thread(void *arg)
{
    struct mover *mv = arg;
    mv->rc = move_all(mv);
    atomic_store(&mv->stop, 1);
}

/* Answers of a recorded phase completed within [from, to): rate and
 * non-200 count. */
static double window_rate(const struct phase *ph, uint64_t from, uint64_t to,
                          long *bad)
{
    long n = 0;
    *bad = 0;
    for (size_t i = 0; i < ph->nsmp; i++) {
        if (ph->smp[i].at_ns < from || ph->smp[i].at_ns >= to)
            continue;
        n++;
        if (ph->smp[i].status != 200)
            (*bad)++;
    }
    return to > from ? (double)n / ((double)(to - from) / 1e9) : 0;
}

/* Activates the N entities through n1 and waits until n1 recorded them.
 * Returns the seconds the activation took, or -1 (said). */
static double activate(struct cluster *cl, const struct reqs *act, long n,
                       int callers, double *record_s)
{
    struct phase ph;
    struct phase_opts opt = {n, NULL, 0};
    /* fsync "always" on a busy machine records a few hundred a second:
     * the deadline allows 100/s */
    if (ms__bench_run_phase(&ph, uv_default_loop(), cl->http[0], act, 200,
                            callers, (double)n / 100 + 60, &opt) < 0 ||
        ph.failed || ph.done < n) {
        fprintf(stderr, "moonshard bench: activation: %s (%ld of %ld "
                "failed, first status %d)\n", ph.errmsg, ph.failed, ph.done,
                ph.bad_status);
        free(ph.lat);
        return -1;
    }
    free(ph.lat);
    double t = (double)(ph.t_end - ph.t0) / 1e9, t0 = ms__bench_now_s();
    struct rstats r = {0};
    while (ms__bench_now_s() < t0 + RECORD_WAIT_S) {
        if (read_rstats(cl, 0, &r) == 0 && r.remembered == n &&
            r.queued == 0 && r.inflight == 0)
            break;
        usleep(50000);
    }
    if (r.remembered != n || r.queued != 0 || r.inflight != 0) {
        fprintf(stderr, "moonshard bench: n1 recorded %lld of %ld "
                "entities (queued %lld, errors %lld)\n", r.remembered, n,
                r.queued, r.errors);
        return -1;
    }
    *record_s = ms__bench_now_s() - t0;
    return t;
}

/* Waits until n1 says its schema is migrated (postgres); 0 or -1. */
static int wait_migrated(struct cluster *cl)
{
    double until = ms__bench_now_s() + MIGRATE_WAIT_S;
    while (ms__bench_now_s() < until) {
        char *body;
        int st = ms__bench_http_call(cl->http[0], "GET", "/v1/stats", NULL,
                                     &body);
        long long v = st == 200 ? ms__bench_json_num(body, "schema_version")
                                : -1;
        free(body);
        if (v >= 1)
            return 0;
        usleep(100000);
    }
    fprintf(stderr, "moonshard bench remember: n1 did not migrate the "
            "schema within %d s\n", MIGRATE_WAIT_S);
    return -1;
}

static int bench_remember(struct cluster *cl, const struct rem_args *a,
                          const char *dir, const struct pgsrv *pg,
                          char ids[][24], struct reqs *act,
                          struct reqs *pings)
{
    FILE *m = fopen(ms__bench_file(F_MODULE), "w");
    if (!m || fputs(STRATEGY, m) < 0 || fclose(m) != 0) {
        perror("moonshard bench remember: cannot write the strategy");
        return -1;
    }
    char entities[1024], store[256], extra[700];
    if (a->pg)
        snprintf(store, sizeof store, "store = \"postgres\"");
    else
        snprintf(store, sizeof store, "store = \"file\", dir = \"%s\", "
                 "fsync = \"always\"", dir);
    /* the connection string as a Lua long string: .ci/pg's holds no
     * "]]" */
    snprintf(extra, sizeof extra, "    handoff_timeout = 10,\n%s%s%s",
             a->pg ? "    database = [[" : "", a->pg ? pg->conninfo : "",
             a->pg ? "]],\n" : "");
    snprintf(entities, sizeof entities,
             "        Counter = { module = \"counter\", shard_count = %d,\n"
             "                    idle_timeout = false,\n"
             "                    remember = { %s },\n"
             "                    allocation = require(\"bench_pcounter\")"
             ".on(\"n2\") },\n"
             "        Ping = { module = \"counter\", shard_count = %d,\n"
             "                 idle_timeout = false,\n"
             "                 allocation = require(\"bench_pcounter\")"
             ".on(\"n2\") },\n", a->shards, store, PING_SHARDS);
    if (ms__bench_write_config(cl, entities, extra) < 0) {
        perror("moonshard bench: cannot write the cluster config");
        return -1;
    }
    fprintf(stderr, "moonshard bench remember: starting n1 ...\n");
    if (ms__bench_start_node(cl, 0) < 0 || ms__bench_wait_up(cl, 1) < 0 ||
        (a->pg && wait_migrated(cl) < 0))
        return -1;
    if (ms__bench_build_reqs(act, cl->http[0], ids, (int)a->entities,
                             "activate", "") < 0 ||
        ping_reqs(pings, cl->http[1]) < 0) {
        fprintf(stderr, "moonshard bench: out of memory\n");
        return -1;
    }
    fprintf(stderr, "moonshard bench remember: activating %ld entities on "
            "n1 ...\n", a->entities);
    double record_s;
    double act_s = activate(cl, act, a->entities, a->callers, &record_s);
    if (act_s < 0)
        return -1;
    fprintf(stderr, "moonshard bench remember: starting n2 ...\n");
    if (ms__bench_start_node(cl, 1) < 0 || ms__bench_wait_up(cl, 2) < 0)
        return -1;

    fprintf(stderr, "moonshard bench remember: Ping asks from %d callers to "
            "n2, %.1f s steady, then every Counter shard moves to n2 ...\n",
            a->callers, STEADY_S);
    struct mover mv;
    memset(&mv, 0, sizeof mv);
    mv.cl = cl;
    mv.entities = a->entities;
    mv.shards = a->shards;
    uv_thread_t tid;
    if (uv_thread_create(&tid, mover_thread, &mv) != 0) {
        fprintf(stderr, "moonshard bench: cannot start a thread\n");
        return -1;
    }
    struct phase ph;
    struct phase_opts opt = {0, &mv.stop, 1};
    int prc = ms__bench_run_phase(&ph, uv_default_loop(), cl->http[1], pings,
                                  200, a->callers,
                                  WARMUP_S + STEADY_S + EAGER_WAIT_S + 60,
                                  &opt);
    atomic_store(&mv.abort, 1);
    uv_thread_join(&tid);
    free(ph.lat);
    if (prc < 0 || mv.rc < 0) {
        fprintf(stderr, "moonshard bench: the move: %s\n",
                prc < 0 ? ph.errmsg : mv.err);
        free(ph.smp);
        return -1;
    }
    long bad_steady, bad_eager;
    uint64_t s0 = ph.t0 + (uint64_t)(WARMUP_S * 1e9);
    double steady = window_rate(&ph, s0, mv.t_start, &bad_steady);
    double eager = window_rate(&ph, mv.t_start, mv.t_done, &bad_eager);
    free(ph.smp);
    double secs = (double)(mv.t_done - mv.t_start) / 1e9;

    printf("moonshard bench remember: eager start of remembered entities "
           "after a move\n"
           "  Counter: %d shards, %ld entities, remember store %s, "
           "127.0.0.1\n"
           "  activation through n1, %d callers: %.2f s (%.0f/s); recorded "
           "%.2f s later\n"
           "  move requests: %d (%lld refused); n2 owned every shard after "
           "%.2f s\n\n",
           a->shards, a->entities,
           a->pg ? "\"postgres\" (.ci/pg)" : "\"file\" (fsync \"always\")",
           a->callers, act_s,
           (double)a->entities / act_s, record_s, a->shards, mv.refused,
           mv.t_owned ? (double)(mv.t_owned - mv.t_start) / 1e9 : -1.0);
    printf("  eager start on n2: %lld entities in %.2f s = %.0f entities/s "
           "(eager_starts %lld, remembered %lld)\n",
           mv.end.eager_starts, secs, (double)mv.end.eager_starts / secs,
           mv.end.eager_starts, mv.end.remembered);
    printf("  Ping asks to n2, %d callers: steady %.0f/s (%ld non-200), "
           "during the eager start %.0f/s (%ld non-200)\n",
           a->callers, steady, bad_steady, eager, bad_eager);
    printf("  throughput during the eager start / steady: %.2f\n",
           ms__bench_ratio(eager, steady));
    fflush(stdout);
    return mv.refused ? -1 : 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 ? -1 : 0;
}

static int remember_usage(void)
{
    fprintf(stderr, "usage: moonshard-bench remember [--entities N] "
            "[--shards S] [--callers C] [--store file|postgres]\n"
            "  N: 1..1000000 (100000), S: 1..4096 (256), C: 1..%d (50)\n",
            REM_MAX_CALLERS);
    return 2;
}

/*
 * `moonshard-bench remember [--entities N] [--shards S] [--callers C]
 * [--store file|postgres]`; argv[0] is "remember". Defaults 100000, 256,
 * 50, file. Prints the figures;
 * returns the exit code: 0, or 1 when a step or check failed.
 */
int ms_bench_remember_main(int argc, char **argv)
{
    struct rem_args a = {100000, 256, 50, 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--store") == 0 && i + 1 < argc &&
            (strcmp(argv[i + 1], "file") == 0 ||
             strcmp(argv[i + 1], "postgres") == 0)) {
            a.pg = strcmp(argv[i + 1], "postgres") == 0;
            i++;
            continue;
        }
        char *end;
        long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
        int ok = i + 1 < argc && *end == 0;
        if (strcmp(argv[i], "--entities") == 0 && ok && v >= 1 &&
            v <= 1000000)
            a.entities = v;
        else if (strcmp(argv[i], "--shards") == 0 && ok && v >= 1 &&
                 v <= 4096)
            a.shards = (int)v;
        else if (strcmp(argv[i], "--callers") == 0 && ok && v >= 1 &&
                 v <= REM_MAX_CALLERS)
            a.callers = (int)v;
        else
            return remember_usage();
        i++;
    }
    struct cluster cl;
    int spare;
    if (ms__bench_cluster_init(&cl, 2, &spare) < 0)
        return 1;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/moonshard-bench-rlog-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("moonshard bench remember: cannot make the store folder");
        ms__bench_cleanup_all();
        return 1;
    }
    char (*ids)[24] = calloc((size_t)a.entities, sizeof *ids);
    struct reqs act = {NULL, NULL, 0}, pings = {NULL, NULL, 0};
    struct pgsrv pg;
    memset(&pg, 0, sizeof pg);
    int rc = -1;
    if (a.pg && pg_up(&pg) < 0) {
        free(ids);
        ids = NULL; /* said */
    } else if (ids) {
        for (long i = 0; i < a.entities; i++)
            snprintf(ids[i], sizeof ids[i], "r%ld", i + 1);
        rc = bench_remember(&cl, &a, dir, &pg, ids, &act, &pings);
        if (rc < 0)
            ms__bench_show_node_logs(&cl);
    } else if (!a.pg || pg.dir[0]) {
        fprintf(stderr, "moonshard bench: out of memory\n");
    }
    fflush(stdout);
    ms__bench_cleanup_all();
    pg_down(&pg);
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0)
        fprintf(stderr, "moonshard bench remember: cannot remove %s: %s\n",
                dir, strerror(errno));
    ms__bench_free_reqs(&act);
    ms__bench_free_reqs(&pings);
    free(ids);
    return rc != 0 ? 1 : 0;
}
