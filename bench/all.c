/*
 * all.c -- `moonshard-bench all [--seconds S] [--only ROW,...]`: the
 * table of issue 16, one row per target, each figure next to its
 * baseline measured in the same run, their ratio, the target and whether
 * it is met, so that a change can be judged in one command.
 *
 *   remote   asks/s through n1 to entities on n2, wrk at 50 keep-alive
 *            connections / redis-benchmark INCR at 50 clients
 *   p99      p99 of the same asks from one caller (the bench's own client)
 *            / Redis p99 at 1 client
 *   tells    local tells/s / the LuaJIT floor (bench local)
 *   asks     local asks/s / the same floor
 *   memory   bytes per idle Counter entity, RSS over 1,000,000 on a node
 *   handoff  asks/s while 85 of 256 shards move / asks/s before (handoff)
 *   persist  committed asks/s / pgbench single-row INSERTs (persist)
 *
 * Each row calls the bench that measures it (local.c, cluster.c with
 * wrk.c and redis.c, handoff.c, persist.c) and takes its figures from the
 * struct that bench fills. The rows run one after the other, never at
 * the same time; the memory row runs first, each of its activations in a
 * child process of its own that has allocated and freed nothing big. wrk
 * and Redis are optional: a row whose tool is missing says "skipped" and
 * the others run.
 */
#include "bench.h"
#include "cluster.h"

#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_SECONDS 3.0
#define REMOTE_IDS 100          /* ids owned by n2, as bench cluster */
#define WRK_THREADS 1           /* like redis-benchmark: one thread */
#define MEMORY_IDS 1000000L
#define MEMORY_RUNS 5           /* activations, the row's figure their median */
#define LOCAL_ROUNDS 5
#define LOCAL_MAX_IDS 100000L
#define HANDOFF_ENTITIES 100000L
#define HANDOFF_SHARDS 256
#define HANDOFF_CALLERS 50
#define PERSIST_IDS 1000

enum { R_REMOTE, R_P99, R_TELLS, R_ASKS, R_MEMORY, R_HANDOFF, R_PERSIST,
       R_COUNT };

enum { ST_NONE, ST_DONE, ST_SKIPPED, ST_FAILED };

struct row {
    const char *name;           /* for --only */
    const char *measure;        /* figure / baseline */
    const char *op;             /* ">=" or "<=": ratio (memory: figure) */
    double target;
    const char *fmt;            /* of the figure and the baseline */
    int size;                   /* a size: no baseline, the figure is
                                   held against the target */
    int selected, state;
    double figure, baseline, ratio;
    char why[96];               /* skipped or failed: why */
};

static struct row g_rows[R_COUNT] = {
    {"remote", "remote ask/s, wrk 50 conns / Redis INCR/s, 50", ">=", 1.5,
     "%.0f", 0, 0, 0, 0, 0, 0, ""},
    {"p99", "p99 ms, 1 caller / Redis p99 ms, 1 client", "<=", 1.5,
     "%.3f", 0, 0, 0, 0, 0, 0, ""},
    {"tells", "local tell/s / LuaJIT floor msg/s", ">=", 0.75, "%.0f", 0, 0,
     0, 0, 0, 0, ""},
    {"asks", "local ask/s / the same floor", ">=", 0.40, "%.0f", 0, 0, 0, 0,
     0, 0, ""},
    {"memory", "bytes per idle Counter, 1,000,000 on a node", "<=", 300,
     "%.0f", 1, 0, 0, 0, 0, 0, ""},
    {"handoff", "ask/s while shards move / steady ask/s", ">=", 0.85,
     "%.0f", 0, 0, 0, 0, 0, 0, ""},
    {"persist", "committed ask/s / pgbench INSERT tps", ">=", 1.0, "%.0f",
     0, 0, 0, 0, 0, 0, ""},
};

/* What the rows found, printed under the table. */
static char g_notes[8192];

__attribute__((format(printf, 1, 2))) static void note(const char *fmt,
                                                        ...)
{
    size_t n = strlen(g_notes);
    va_list ap;
    va_start(ap, fmt);
    if (n + 1 < sizeof g_notes)
        vsnprintf(g_notes + n, sizeof g_notes - n, fmt, ap);
    va_end(ap);
}

static void skip(int r, const char *why)
{
    if (!g_rows[r].selected)
        return;
    g_rows[r].state = ST_SKIPPED;
    snprintf(g_rows[r].why, sizeof g_rows[r].why, "skipped: %s", why);
}

static void fail(int r, const char *why)
{
    if (!g_rows[r].selected)
        return;
    g_rows[r].state = ST_FAILED;
    snprintf(g_rows[r].why, sizeof g_rows[r].why, "failed: %s", why);
}

static void done(int r, double figure, double baseline, double ratio)
{
    g_rows[r].state = ST_DONE;
    g_rows[r].figure = figure;
    g_rows[r].baseline = baseline;
    g_rows[r].ratio = ratio;
}

static int met(const struct row *w)
{
    double v = w->size ? w->figure : w->ratio;
    return w->op[0] == '>' ? v >= w->target : v <= w->target;
}

static void progress(const char *rows)
{
    fprintf(stderr, "moonshard bench all: %s ...\n", rows);
}

/* ---- the rows ---------------------------------------------------------- */

/* One activation of MEMORY_IDS in a child process, a heap that has
 * allocated and freed nothing big. 0 and *f, or -1 (said: by bench local
 * in the child, or here when the child died of a signal or gave no
 * figures). */
static int memory_once(struct ms_bench_local_figures *f)
{
    int fd[2];
    if (pipe(fd) < 0) {
        fprintf(stderr, "moonshard bench all: pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "moonshard bench all: fork: %s\n", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        struct ms_bench_local_figures cf;
        int rc = ms__bench_local_run(MEMORY_IDS, MEMORY_IDS, 0, 0, 0, &cf);
        if (rc == 0 && write(fd[1], &cf, sizeof cf) != (ssize_t)sizeof cf) {
            fprintf(stderr, "moonshard bench all: the memory row's child "
                    "could not send its figures\n");
            rc = 1;
        }
        fflush(NULL);
        _exit(rc == 0 ? 0 : 1);
    }
    close(fd[1]);
    size_t got = ms__bench_read_full(fd[0], f, sizeof *f);
    close(fd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (got == sizeof *f && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    /* a child that exited 1 said why; a signal (the OOM killer, a crash)
     * or an exit without figures would otherwise go unsaid */
    if (WIFSIGNALED(st))
        fprintf(stderr, "moonshard bench all: the memory row's child was "
                "killed by signal %d (%s)\n", WTERMSIG(st),
                strsignal(WTERMSIG(st)));
    else if (!WIFEXITED(st) || WEXITSTATUS(st) == 0)
        fprintf(stderr, "moonshard bench all: the memory row's child "
                "exited without its figures\n");
    return -1;
}

/* The RSS an idle entity takes varies from run to run with where the
 * collector's cycles fell during the activation: the VM's allocator keeps
 * the peak of the garbage (README "The memory row's spread"). So the row
 * activates MEMORY_RUNS times, each in a fresh process, and reports the
 * median, with every figure in its note. */
static void row_memory(void)
{
    struct ms_bench_local_figures f;
    double bytes[MEMORY_RUNS], act = 0;
    char what[80];
    snprintf(what, sizeof what, "memory (bench local, 1,000,000 ids, %d "
             "activations)", MEMORY_RUNS);
    progress(what);
    for (int i = 0; i < MEMORY_RUNS; i++) {
        if (memory_once(&f) != 0) {
            fail(R_MEMORY, "an activation failed (said above)");
            return;
        }
        if (f.activated != (unsigned long long)MEMORY_IDS) {
            fail(R_MEMORY, "not every id was active after its first message");
            return;
        }
        bytes[i] = f.bytes_per_entity;
        act += f.act_rate / MEMORY_RUNS;
    }
    done(R_MEMORY, ms__bench_median(bytes, MEMORY_RUNS), 0, 0);
    note("  memory: RSS delta over the first message to %ld ids (all "
         "active after it,\n         %.0f activations/s, the mean); the "
         "median of %d activations, each in a\n         fresh process:",
         MEMORY_IDS, act, MEMORY_RUNS);
    for (int i = 0; i < MEMORY_RUNS; i++)
        note(" %.0f", bytes[i]);
    note(" bytes an entity\n");
}

static void row_local(double seconds)
{
    struct ms_bench_local_figures f;
    /* the bench local defaults at S = 3: 1,000,000 tells a round over
     * 100,000 ids, 500,000 asks */
    long messages = lround(seconds / 3 * 1e6);
    if (messages < 2000)
        messages = 2000;
    long ids = messages < LOCAL_MAX_IDS ? messages : LOCAL_MAX_IDS;
    long asks = g_rows[R_ASKS].selected ? messages / 2 : 0;
    /* the floor is the median of its rounds, for asks as for tells */
    progress("tells, asks (bench local)");
    int rc = ms__bench_local_run(ids, messages, asks, LOCAL_ROUNDS, 0, &f);
    if (rc != 0 || f.floor_rate <= 0) {
        fail(R_TELLS, "bench local failed (said above)");
        fail(R_ASKS, "bench local failed (said above)");
        return;
    }
    if (g_rows[R_TELLS].selected) {
        done(R_TELLS, f.tell_rate, f.floor_rate, f.tell_ratio);
        note("  tells: %ld tells a round over %ld ids; figure and floor "
             "are medians of %d rounds,\n         the ratio the median of "
             "the paired rounds\n", messages, ids, LOCAL_ROUNDS);
        note("         the floor from bytes (ids and payload taken from C "
             "memory each message):\n         %.0f msg/s, tells / it %.2f\n",
             f.bytes_rate, f.tell_bytes_ratio);
        if (f.gc_headroom_mb > 0)
            note("         the floor with the node's collector pace "
                 "(gc_headroom_mb %d):\n         %.0f msg/s, tells / it "
                 "%.2f\n", f.gc_headroom_mb, f.paced_floor_rate,
                 f.tell_paced_ratio);
        note("         the queue floor (the floor behind a C lookup and a "
             "FIFO), its states made\n         back to back: %.0f msg/s "
             "(%.2f of the floor), tells / it %.2f; made by\n         first "
             "messages, as a runtime's: %.0f msg/s (%.2f), tells / it %.2f"
             "\n", f.queue_rate,
             ms__bench_ratio(f.queue_rate, f.floor_rate),
             f.tell_queue_ratio, f.act_queue_rate,
             ms__bench_ratio(f.act_queue_rate, f.floor_rate),
             f.tell_act_queue_ratio);
        note("         the ids in a fixed random order: the queue floor, its "
             "states made by\n         first messages, %.0f msg/s (%.2f), "
             "tells %.0f msg/s (%.2f), tells / it %.2f\n",
             f.shuffled_queue_rate,
             ms__bench_ratio(f.shuffled_queue_rate, f.floor_rate),
             f.shuffled_tell_rate,
             ms__bench_ratio(f.shuffled_tell_rate, f.floor_rate),
             f.tell_shuffled_ratio);
    }
    if (g_rows[R_ASKS].selected) {
        done(R_ASKS, f.ask_rate, f.floor_rate, f.ask_ratio);
        note("  asks: %ld asks, 1,000 in flight, %ld failed; the floor "
             "from bytes with an ask's\n         payload, its reply encoded: "
             "%.0f msg/s, asks / it %.2f\n", asks, f.asks_failed,
             f.ask_bytes_rate, f.ask_bytes_ratio);
        note("         the queue floor with asks, its states made by first "
             "messages: %.0f msg/s\n         (%.2f of the floor), asks / it "
             "%.2f\n", f.ask_queue_rate,
             ms__bench_ratio(f.ask_queue_rate, f.floor_rate),
             f.ask_queue_ratio);
        if (f.gc_headroom_mb > 0)
            note("         asks / the floor with the node's collector pace: "
                 "%.2f\n", f.ask_paced_ratio);
    }
}

/* The same Redis through the relay (relay.c): what the remote ask's
 * shape (client -> n1 -> n2 and back: two loopback hops each way, a
 * third process) costs with no work at either end, and the rows' figures
 * against it (0: the row did not run). */
static void note_relay(const struct redis_figures *rf, double rate,
                       double p99)
{
    const struct figures *d1 = &rf->r1, *dn = &rf->rn;
    const struct figures *v1 = &rf->via1, *vn = &rf->vian;
    note("  Redis through a relay (moonshard-bench relay: a process that "
         "copies the bytes of\n         each client connection to one of "
         "its own to redis-server, the two hops\n         of a remote ask "
         "with no work at either end): %.0f INCR/s at 50 clients\n"
         "         (%.2f of direct), p50 %.3f ms and p99 %.3f ms at 1 client "
         "(p99 %.2f of direct)\n", vn->rate, ms__bench_ratio(vn->rate,
         dn->rate), v1->p50, v1->p99, ms__bench_ratio(v1->p99, d1->p99));
    if (rate > 0)
        note("         remote / Redis through the relay: %.2f\n",
             ms__bench_ratio(rate, vn->rate));
    if (p99 > 0)
        note("         p99 / Redis p99 through the relay: %.2f\n",
             ms__bench_ratio(p99, v1->p99));
}

/* The p99 row's client: one caller of load.c (the bench's own, as in
 * bench cluster) asking the ids through node `at` (0: n1; 1: n2, their
 * owner) for `seconds`, with n1's routes meanwhile. Returns 0 or -1
 * (said). */
static int own_p99(struct cluster *cl, int at, char ids[][24],
                   double seconds, struct figures *f, long long *remote,
                   long long *local)
{
    struct reqs asks = {NULL, NULL, 0};
    struct phase ph;
    long long rem0, loc0, rem1, loc1;
    if (ms__bench_build_reqs(&asks, cl->http[at], ids, REMOTE_IDS, "ask",
                             ASK_BODY) < 0) {
        fprintf(stderr, "moonshard bench: out of memory\n");
        ms__bench_free_reqs(&asks);
        return -1;
    }
    if (ms__bench_cluster_routes(cl, &rem0, &loc0) < 0) {
        ms__bench_free_reqs(&asks);
        return -1;
    }
    fprintf(stderr, "moonshard bench all: the bench's own client, 1 caller, "
            "%.1f s, to n%d ...\n", seconds, at + 1);
    int rc = ms__bench_run_phase(&ph, uv_default_loop(), cl->http[at], &asks,
                                 200, 1, seconds, NULL);
    ms__bench_free_reqs(&asks);
    if (rc < 0) {
        fprintf(stderr, "moonshard bench: own client: %s\n", ph.errmsg);
        free(ph.lat);
        return -1;
    }
    ms__bench_phase_figures(&ph, f);
    if (ms__bench_cluster_routes(cl, &rem1, &loc1) < 0)
        return -1;
    *remote = rem1 - rem0;
    *local = loc1 - loc0;
    return 0;
}

static void note_wrk(const char *row, const struct wrk_figures *w)
{
    note("  %s: wrk -t%d -c%d -d%ds: p50 %.3f ms, p99 %.3f ms; %ld "
         "answers, status > 399: %ld,\n         socket errors: %ld; "
         "n1 routed %lld asks remotely, %lld locally\n", row, w->threads,
         w->connections, w->seconds, w->p50, w->p99, w->requests,
         w->status_errors, w->socket_errors, w->remote, w->local);
}

/*
 * remote: asks through n1 to n2 by wrk at 50 connections. p99: the same
 * asks from one caller of the bench's own client, whose latencies are
 * each answer's, as redis-benchmark's are; wrk's percentiles are not:
 * before it reports, wrk adds samples for the answers a stall kept it
 * from sending (its correction for coordinated omission), so one stall
 * of the shared machine swells its p99 (wrk at 1 connection still runs,
 * for the notes). Then Redis, alone on the machine.
 */
static void row_remote(double seconds)
{
    int want50 = g_rows[R_REMOTE].selected, want1 = g_rows[R_P99].selected;
    int have_wrk = ms__bench_on_path("wrk");
    if (want50 && !have_wrk) {
        skip(R_REMOTE, "wrk not installed");
        want50 = 0;
    }
    if (!ms__bench_on_path("redis-server") ||
        !ms__bench_on_path("redis-benchmark")) {
        if (want50)
            skip(R_REMOTE, "Redis not installed (redis-server, -benchmark)");
        if (want1)
            skip(R_P99, "Redis not installed (redis-server, -benchmark)");
        return;
    }
    if (!want50 && !want1)
        return;
    progress("remote, p99 (n1 and n2, wrk and one caller, then Redis)");
    struct cluster cl;
    int redis_port, wsec = seconds < 1 ? 1 : (int)lround(seconds);
    char ids[REMOTE_IDS][24];
    struct wrk_figures w50, w1;
    struct figures own, at_owner;
    struct redis_figures rf;
    long long own_remote = -1, own_local = -1, ow_remote = -1, ow_local = -1;
    memset(&w50, 0, sizeof w50);
    memset(&w1, 0, sizeof w1);
    memset(&own, 0, sizeof own);
    memset(&at_owner, 0, sizeof at_owner);
    if (ms__bench_cluster_init(&cl, 2, &redis_port) < 0 ||
        ms__bench_cluster_up(&cl, ids, REMOTE_IDS) < 0 ||
        (want50 && ms__bench_cluster_wrk(&cl, ids, REMOTE_IDS, 50,
                                         WRK_THREADS, wsec, &w50) != 0) ||
        (want1 && own_p99(&cl, 0, ids, seconds, &own, &own_remote,
                          &own_local) < 0) ||
        /* the same asks sent to their owner, n2: n1 sees none of them */
        (want1 && own_p99(&cl, 1, ids, seconds, &at_owner, &ow_remote,
                          &ow_local) < 0) ||
        (want1 && have_wrk &&
         ms__bench_cluster_wrk(&cl, ids, REMOTE_IDS, 1, 1, wsec, &w1) != 0)) {
        ms__bench_cleanup_all();
        fail(R_REMOTE, "the cluster, wrk or the client failed (said above)");
        fail(R_P99, "the cluster, wrk or the client failed (said above)");
        return;
    }
    /* the nodes are idle now but Redis gets the machine to itself */
    int nodes[2] = {CH_N1, CH_N2};
    ms__bench_stop_children(nodes, 2);
    int rc = ms__bench_redis(redis_port, 50, seconds, 1, &rf);
    const struct figures r1 = rf.r1, r50 = rf.rn;
    ms__bench_cleanup_all();
    if (rc != 0) {
        fail(R_REMOTE, "Redis failed (said above)");
        fail(R_P99, "Redis failed (said above)");
        return;
    }
    if (want50) {
        note_wrk("remote", &w50);
        if (!ms__bench_wrk_checked(&w50))
            fail(R_REMOTE, "wrk's answers or n1's routes are not all sound "
                 "(see the notes)");
        else
            done(R_REMOTE, w50.rate, r50.rate, w50.rate / r50.rate);
    }
    if (want1) {
        note("  p99: the bench's own client (load.c), 1 caller, %.1f s: "
             "p50 %.3f ms, p99 %.3f ms;\n         %ld answers, %ld not 200;"
             " n1 routed %lld asks remotely, %lld locally\n", seconds,
             own.p50, own.p99, own.done, own.failed, own_remote,
             own_local);
        note("  p99 at the owner: the same caller, the same asks sent to "
             "n2, which owns the ids\n         (as a client that asks GET "
             "/v1/entities/{type}/{id}/owner first would):\n         p50 "
             "%.3f ms, p99 %.3f ms (%.2f of Redis p99); %ld answers, %ld "
             "not 200;\n         n1 routed %lld of them\n", at_owner.p50,
             at_owner.p99, ms__bench_ratio(at_owner.p99, r1.p99),
             at_owner.done, at_owner.failed, ow_remote + ow_local);
        if (have_wrk) {
            note_wrk("p99", &w1);
            note("         (wrk's percentiles include the samples of its "
                 "coordinated-omission\n         correction: not comparable"
                 " with Redis's)\n");
        }
        if (own.done == 0 || own.failed || own_local != 0 ||
            own_remote != own.done || at_owner.done == 0 ||
            at_owner.failed || ow_remote != 0 || ow_local != 0 ||
            (have_wrk && !ms__bench_wrk_checked(&w1)))
            fail(R_P99, "answers or n1's routes are not all sound (see the "
                 "notes)");
        else
            done(R_P99, own.p99, r1.p99, ms__bench_ratio(own.p99, r1.p99));
    }
    note("  Redis: redis-server on 127.0.0.1, redis-benchmark -t incr -c 50 "
         "and -c 1 (p50 %.3f ms,\n         p99 %.3f ms); Redis p99 from %s"
         "\n", r1.p50, r1.p99, rf.lat_src);
    note_relay(&rf, want50 ? w50.rate : 0, want1 ? own.p99 : 0);
}

static void row_handoff(void)
{
    struct ms_bench_handoff_figures f;
    progress("handoff (bench handoff)");
    if (ms__bench_handoff_run(HANDOFF_ENTITIES, HANDOFF_SHARDS,
                              HANDOFF_CALLERS, 0, &f) != 0) {
        fail(R_HANDOFF, "bench handoff failed (said above)");
        return;
    }
    done(R_HANDOFF, f.move_rate, f.steady_rate,
         ms__bench_ratio(f.move_rate, f.steady_rate));
    note("  handoff: n3 joins n1 + n2 under %d callers' asks over %ld "
         "entities: %lld of %lld shards\n         moved; worst 100 ms of the "
         "move / steady %.2f, non-200 answers %ld;\n         after the move "
         "(3 nodes, nothing moving) / steady %.2f, during / after %.2f\n",
         HANDOFF_CALLERS, HANDOFF_ENTITIES, f.moved, f.shards,
         f.steady_rate > 0 && f.worst_rate >= 0
             ? f.worst_rate / f.steady_rate
             : 0,
         f.bad, ms__bench_ratio(f.after_rate, f.steady_rate),
         ms__bench_ratio(f.move_rate, f.after_rate));
}

/* Whether a PostgreSQL server is installed where .ci/pg looks. */
static int have_postgres(void)
{
    glob_t g;
    int found = glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) == 0;
    if (found)
        globfree(&g);
    return found && ms__bench_on_path("psql");
}

static void row_persist(double seconds)
{
    struct ms_bench_persist_figures f;
    if (!have_postgres()) {
        skip(R_PERSIST, "PostgreSQL not installed");
        return;
    }
    progress("persist (bench persist)");
    int sec = seconds < 1 ? 1 : (int)lround(seconds);
    if (ms__bench_persist_run(sec, PERSIST_IDS, 0, &f) != 0) {
        fail(R_PERSIST, f.pgbench_tps > 0 && f.rate > 0
                            ? "the journal check failed (said above)"
                            : "bench persist failed (said above)");
        return;
    }
    done(R_PERSIST, f.rate, f.pgbench_tps, f.rate / f.pgbench_tps);
    note("  persist: 50 callers, %d ids, %d s each; the journal holds one "
         "event per answered ask (%ld)\n", PERSIST_IDS, sec, f.answered);
}

/* ---- the table --------------------------------------------------------- */

static void print_table(double seconds)
{
    printf("moonshard bench all: every baseline measured in this run, on "
           "this machine (%ld CPUs), %.1f s a phase\n\n",
           sysconf(_SC_NPROCESSORS_ONLN), seconds);
    printf("  %-8s %-46s %10s %10s %6s  %-8s %s\n", "row",
           "measure: figure / baseline", "figure", "baseline", "ratio",
           "target", "result");
    for (int r = 0; r < R_COUNT; r++) {
        const struct row *w = &g_rows[r];
        if (!w->selected)
            continue;
        printf("  %-8s %-46s ", w->name, w->measure);
        if (w->state != ST_DONE) {
            printf("%s\n", w->state == ST_NONE ? "failed: not run" : w->why);
            continue;
        }
        char fig[32], base[32] = "-", ratio[32] = "-", target[32];
        snprintf(fig, sizeof fig, w->fmt, w->figure);
        if (!w->size) {
            snprintf(base, sizeof base, w->fmt, w->baseline);
            snprintf(ratio, sizeof ratio, "%.2f", w->ratio);
            snprintf(target, sizeof target, "%s %.2f", w->op, w->target);
        } else {
            snprintf(target, sizeof target, "%s %.0f", w->op, w->target);
        }
        printf("%10s %10s %6s  %-8s %s\n", fig, base, ratio, target,
               met(w) ? "met" : "not met");
    }
    if (g_notes[0])
        printf("\n%s", g_notes);
    fflush(stdout);
}

static int usage(void)
{
    fprintf(stderr, "usage: moonshard-bench all [--seconds S] "
            "[--only ROW,...]\n  S: seconds a phase, 0.1..3600, default 3"
            "\n  ROW: remote p99 tells asks memory handoff persist\n");
    return 2;
}

/* Selects the rows named in `list` (comma-separated); 0 or -1. */
static int select_rows(char *list)
{
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        int r;
        for (r = 0; r < R_COUNT && strcmp(g_rows[r].name, name) != 0; r++)
            ;
        if (r == R_COUNT) {
            fprintf(stderr, "moonshard bench all: no row '%s'\n", name);
            return -1;
        }
        g_rows[r].selected = 1;
    }
    return 0;
}

/*
 * `moonshard-bench all [--seconds S] [--only ROW,...]`; argv[0] is "all".
 * Returns the exit code: 0 when every selected row ran or was skipped
 * (met or not), 1 when a row failed, 2 for bad options.
 */
int ms_bench_all_main(int argc, char **argv)
{
    double seconds = DEFAULT_SECONDS;
    int only = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds >= 0.1 && seconds <= 3600))
                return usage();
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            if (select_rows(argv[++i]) < 0)
                return usage();
            only = 1;
        } else {
            fprintf(stderr, "moonshard bench all: unknown option '%s'\n",
                    argv[i]);
            return usage();
        }
    }
    for (int r = 0; r < R_COUNT; r++)
        if (!only)
            g_rows[r].selected = 1;

    if (g_rows[R_MEMORY].selected)
        row_memory();
    if (g_rows[R_TELLS].selected || g_rows[R_ASKS].selected)
        row_local(seconds);
    if (g_rows[R_REMOTE].selected || g_rows[R_P99].selected)
        row_remote(seconds);
    if (g_rows[R_HANDOFF].selected)
        row_handoff();
    if (g_rows[R_PERSIST].selected)
        row_persist(seconds);
    print_table(seconds);
    int failed = 0;
    for (int r = 0; r < R_COUNT; r++)
        failed |= g_rows[r].selected && g_rows[r].state != ST_DONE &&
                  g_rows[r].state != ST_SKIPPED;
    return failed ? 1 : 0;
}
