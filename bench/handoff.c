/*
 * handoff.c -- `moonshard-bench handoff [--entities N] [--shards S]
 * [--callers C]`: how fast shards move through handoff when a third node
 * joins and leaves, without load and under a steady ask load, and what a
 * move costs the load. It runs its nodes and client with the helpers of
 * supervisor.c and load.c (cluster.h).
 *
 * n1 and n2 own the shards of Counter and N active entities; n3 is in the
 * config but not started. Then n3 joins (no load), n3 leaves (no load),
 * and n3 joins again under a steady ask load from C callers to n1. A join
 * is timed from n3 Up (as n1 lists it) to a balanced plan, a leave from
 * the leave request to n3 exited and the plan balanced. Balanced: the
 * shards the nodes own add up to the allocated shards, n3 owns at least a
 * third of them (rounded down; none once it left), and no move or
 * handoff is in progress anywhere. Stats are polled every POLL_MS, also
 * during the steady load, so that every window pays the same polling.
 */
#include "bench.h"
#include "cluster.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define HANDOFF_MAX_CALLERS 500
#define MOVE_WAIT_S 60  /* to balanced; handoff_timeout is 10 s */
#define POLL_MS 10
#define WARMUP_S 0.5    /* load before the steady window */
#define STEADY_S 3.0
#define AFTER_S 1.0     /* load after the move, for the rate on 3 nodes */
#define SLICE_MS 100    /* the worst slice of the move window */
#define MAX_CODES 8
#define TIMELINE_MARGIN_MS 100 /* before n3 starts, after balanced */

/* --timeline: the slice (ms) of the move's timeline, 0: none */
static int timeline_ms;

/* What a node's /v1/stats says about shards and moves; the moves fields
 * are the coordinator's (n1's). */
struct nstats {
    long long owned, handoffs, passivations, active;
    long long in_progress, peak, finished, aborted;
};

/* n1..n<n>'s stats at one time. */
struct snap {
    struct nstats n[MAX_NODES];
};

/* One measured move. Times are uv_hrtime(). */
struct move {
    uint64_t t_start;           /* n3 spawned, or leave requested */
    uint64_t t_up;              /* join: n1 lists n3 Up */
    uint64_t t_moved;           /* leave: n1 and n2 own every shard */
    uint64_t t_exit;            /* leave: n3 exited */
    uint64_t t_done;            /* balanced (and n3 exited) */
    long long shards, aborted, passivated;
    char err[200];
};

static int read_stats(const struct cluster *cl, int i, struct nstats *st)
{
    char *body;
    int rc = ms__bench_http_call(cl->http[i], "GET", "/v1/stats", NULL, &body);
    if (rc == 200) {
        const char *m = strstr(body, "\"moves\":{");
        st->owned = ms__bench_json_num(body, "owned_shards");
        st->handoffs = ms__bench_json_num(body, "handoffs_in_progress");
        st->passivations = ms__bench_json_num(body, "passivations");
        st->active = ms__bench_json_num(body, "active_entities");
        st->in_progress = ms__bench_json_num(m, "in_progress");
        st->peak = ms__bench_json_num(m, "peak");
        st->finished = ms__bench_json_num(m, "finished");
        st->aborted = ms__bench_json_num(m, "aborted");
    }
    free(body);
    return rc == 200 && st->owned >= 0 && st->handoffs >= 0 &&
                   st->passivations >= 0 && st->active >= 0
               ? 0
               : -1;
}

/* Reads the stats of n1..n<n>; 0 or -1. */
static int take_snap(const struct cluster *cl, int n, struct snap *s)
{
    for (int i = 0; i < n; i++)
        if (read_stats(cl, i, &s->n[i]) < 0)
            return -1;
    return 0;
}

/* Whether n1 lists n3 as Up. */
static int n3_up(const struct cluster *cl)
{
    char *body;
    int up = 0;
    if (ms__bench_http_call(cl->http[0], "GET", "/v1/members", NULL,
                            &body) == 200) {
        const char *p = strstr(body, "\"name\":\"n3\"");
        const char *end = p ? strchr(p, '}') : NULL;
        const char *st = p ? strstr(p, "\"status\":\"up\"") : NULL;
        up = st && end && st < end;
    }
    free(body);
    return up;
}

/* Whether the plan of n1..n<n> is balanced over `alloc` allocated shards
 * (see above); fills s. */
static int balanced(const struct cluster *cl, int n, long long alloc,
                    struct snap *s)
{
    long long owned = 0;
    if (take_snap(cl, n, s) < 0 || s->n[0].in_progress != 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (s->n[i].handoffs != 0)
            return 0;
        owned += s->n[i].owned;
    }
    return owned == alloc && (n < 3 || s->n[2].owned >= alloc / 3);
}

/* Shards of Counter that have an owner, as n1 sees it, or -1. */
static long long allocated_shards(const struct cluster *cl)
{
    char *body;
    int st = ms__bench_http_call(cl->http[0], "GET",
                                 "/v1/allocations/Counter", NULL, &body);
    long long n = st == 200 ? ms__bench_count_of(body, "\"owner\":\"") : -1;
    free(body);
    return n;
}

static int move_fail(struct move *m, const char *why)
{
    snprintf(m->err, sizeof m->err, "%s", why);
    return -1;
}

static int should_stop(atomic_int *abort)
{
    return abort && atomic_load(abort);
}

/*
 * Starts n3, waits until n1 lists it Up, then until the plan is balanced
 * over `alloc` shards on three nodes, or until *abort is set (abort may
 * be NULL). Fills m; returns 0 or -1 with m->err.
 */
static int join_n3(struct cluster *cl, long long alloc, atomic_int *abort,
                   struct move *m)
{
    struct snap before, after;
    memset(m, 0, sizeof *m);
    if (take_snap(cl, 2, &before) < 0)
        return move_fail(m, "cannot read the stats of n1 and n2");
    m->t_start = uv_hrtime();
    if (ms__bench_start_node(cl, 2) < 0)
        return move_fail(m, "cannot start n3");
    double until = ms__bench_now_s() + NODE_WAIT_S;
    while (!n3_up(cl)) {
        if (ms__bench_child_gone(CH_N3))
            return move_fail(m, "n3 exited while joining");
        if (ms__bench_now_s() > until)
            return move_fail(m, "n1 did not list n3 as Up within 30 s");
        if (should_stop(abort))
            return move_fail(m, "stopped");
        usleep(POLL_MS * 1000);
    }
    m->t_up = uv_hrtime();
    until = ms__bench_now_s() + MOVE_WAIT_S;
    while (!balanced(cl, 3, alloc, &after)) {
        if (ms__bench_child_gone(CH_N3))
            return move_fail(m, "n3 exited while shards moved to it");
        if (ms__bench_now_s() > until)
            return move_fail(m, "the plan was not balanced within 60 s");
        if (should_stop(abort))
            return move_fail(m, "stopped");
        usleep(POLL_MS * 1000);
    }
    m->t_done = uv_hrtime();
    m->shards = after.n[0].finished - before.n[0].finished;
    m->aborted = after.n[0].aborted - before.n[0].aborted;
    m->passivated = after.n[0].passivations + after.n[1].passivations -
                    before.n[0].passivations - before.n[1].passivations;
    return 0;
}

/* Asks n3 to leave (admin token) and waits until it exited and the plan
 * is balanced over `alloc` shards on n1 and n2. Fills m (passivated: the
 * entities n3 had active, and those n1 and n2 passivated meanwhile);
 * returns 0 or -1 with m->err. */
static int leave_n3(struct cluster *cl, long long alloc, struct move *m)
{
    struct snap before, after;
    char *body;
    memset(m, 0, sizeof *m);
    if (take_snap(cl, 3, &before) < 0)
        return move_fail(m, "cannot read the stats of n1, n2 and n3");
    m->t_start = uv_hrtime();
    /* a node that still sees itself Joining refuses to leave (404 "cannot
     * leave now"): the others may list it Up a moment before it learns so
     * itself */
    int st = 0;
    for (int tries = 0; tries < 100 && st != 202; tries++) {
        if (tries)
            usleep(50 * 1000);
        st = ms__bench_http_call_as(cl->http[2], cl->token, "POST",
                                    "/v1/leave", "", &body);
        free(body);
        if (st != 404 && st != 409)
            break;
    }
    if (st != 202)
        return move_fail(m, "n3 did not accept POST /v1/leave");
    double until = ms__bench_now_s() + MOVE_WAIT_S;
    for (;;) {
        if (!m->t_exit && ms__bench_child_gone(CH_N3))
            m->t_exit = uv_hrtime();
        int ok = balanced(cl, 2, alloc, &after);
        if (ok && !m->t_moved)
            m->t_moved = uv_hrtime();
        if (ok && m->t_exit)
            break;
        if (ms__bench_now_s() > until)
            return move_fail(m, "n3 did not exit with its shards moved "
                             "within 60 s");
        usleep(POLL_MS * 1000);
    }
    m->t_done = uv_hrtime();
    m->shards = after.n[0].finished - before.n[0].finished;
    m->aborted = after.n[0].aborted - before.n[0].aborted;
    m->passivated = before.n[2].active + after.n[0].passivations +
                    after.n[1].passivations - before.n[0].passivations -
                    before.n[1].passivations;
    return 0;
}

/* The thread that, while the main thread drives the load, waits out the
 * warm-up and the steady window (polling like during the move), makes n3
 * join, waits AFTER_S more, then ends the load. */
struct load_join {
    struct cluster *cl;
    long long alloc;
    atomic_int stop;            /* set here: the load ends */
    atomic_int abort;           /* set by the main thread: give up */
    struct move m;
    int rc;
};

static void load_join_thread(void *arg)
{
    struct load_join *lj = arg;
    struct snap s;
    double at = ms__bench_now_s() + WARMUP_S + STEADY_S;
    while (ms__bench_now_s() < at && !should_stop(&lj->abort)) {
        take_snap(lj->cl, 2, &s);
        usleep(POLL_MS * 1000);
    }
    lj->rc = should_stop(&lj->abort)
                 ? move_fail(&lj->m, "stopped")
                 : join_n3(lj->cl, lj->alloc, &lj->abort, &lj->m);
    at = ms__bench_now_s() + AFTER_S;
    while (lj->rc == 0 && ms__bench_now_s() < at && !should_stop(&lj->abort)) {
        take_snap(lj->cl, 3, &s);
        usleep(POLL_MS * 1000);
    }
    atomic_store(&lj->stop, 1);
}

/* The answers of a recorded phase completed within [from, to). */
struct window {
    double seconds, rate, p50, p99, max;
    double worst;               /* rate of the worst SLICE_MS, or -1 */
    long done, bad;
    int ncodes, code[MAX_CODES];
    long count[MAX_CODES];
};

static void window_figures(const struct phase *ph, uint64_t from,
                           uint64_t to, struct window *w)
{
    memset(w, 0, sizeof *w);
    w->seconds = (double)(to - from) / 1e9;
    w->worst = -1;
    size_t a = 0, b;
    while (a < ph->nsmp && ph->smp[a].at_ns < from)
        a++;
    for (b = a; b < ph->nsmp && ph->smp[b].at_ns < to; b++) {
        int st = ph->smp[b].status, k;
        if (st == 200)
            continue;
        w->bad++;
        for (k = 0; k < w->ncodes && w->code[k] != st; k++)
            ;
        if (k == w->ncodes && k < MAX_CODES)
            w->code[w->ncodes++] = st;
        if (k < MAX_CODES)
            w->count[k]++;
    }
    w->done = (long)(b - a);
    w->rate = w->seconds > 0 ? (double)w->done / w->seconds : 0;
    uint64_t *lat = malloc((b - a + 1) * sizeof *lat);
    if (lat) {
        for (size_t i = a; i < b; i++)
            lat[i - a] = (uint64_t)ph->smp[i].lat_us * 1000;
        qsort(lat, b - a, sizeof *lat, ms__bench_cmp_u64);
        w->p50 = ms__bench_pct_ms(lat, b - a, 0.50);
        w->p99 = ms__bench_pct_ms(lat, b - a, 0.99);
        w->max = ms__bench_pct_ms(lat, b - a, 1.0);
        free(lat);
    }
    uint64_t slice = (uint64_t)SLICE_MS * 1000000;
    for (uint64_t t = from; t + slice <= to; t += slice) {
        long n = 0;
        for (size_t i = a; i < b; i++)
            n += ph->smp[i].at_ns >= t && ph->smp[i].at_ns < t + slice;
        double r = (double)n * 1000 / SLICE_MS;
        if (w->worst < 0 || r < w->worst)
            w->worst = r;
    }
}

/* Prints the answers of the join under load in slices of `slice_ms`,
 * from TIMELINE_MARGIN_MS before n3 started to as long after balanced:
 * each slice's rate over the steady one and its slowest answer. */
static void print_timeline(const struct phase *ph, const struct move *m,
                           double steady, int slice_ms)
{
    uint64_t slice = (uint64_t)slice_ms * 1000000;
    uint64_t margin = (uint64_t)TIMELINE_MARGIN_MS * 1000000;
    uint64_t from = m->t_start - margin, to = m->t_done + margin;
    printf("\n  the join under load in %d ms slices, from n3's start: answers "
           "/ the steady rate,\n  and the slowest answer that ended in the "
           "slice\n     ms   rate  max ms\n", slice_ms);
    size_t i = 0;
    while (i < ph->nsmp && ph->smp[i].at_ns < from)
        i++;
    for (uint64_t t = from; t < to; t += slice) {
        long n = 0;
        uint32_t worst = 0;
        for (; i < ph->nsmp && ph->smp[i].at_ns < t + slice; i++) {
            n++;
            if (ph->smp[i].lat_us > worst)
                worst = ph->smp[i].lat_us;
        }
        const char *what = "";
        if (m->t_start >= t && m->t_start < t + slice)
            what = "  n3 started";
        else if (m->t_up >= t && m->t_up < t + slice)
            what = "  n3 Up";
        else if (m->t_done >= t && m->t_done < t + slice)
            what = "  balanced";
        printf("  %5.0f  %5.2f  %6.1f%s\n",
               ((double)t - (double)m->t_start) / 1e6,
               steady > 0 ? (double)n * 1e9 / (double)slice / steady : 0,
               worst / 1000.0, what);
    }
}

static void print_window(const char *what, const struct window *w)
{
    char label[96], bad[160] = "none";
    size_t n = 0;
    snprintf(label, sizeof label, "%s (%.2f s)", what, w->seconds);
    for (int k = 0; k < w->ncodes && n < sizeof bad; k++)
        n += (size_t)snprintf(bad + n, sizeof bad - n, "%s%d x%ld",
                              k ? ", " : "", w->code[k], w->count[k]);
    if (w->bad > 0 && w->ncodes == 0)
        snprintf(bad, sizeof bad, "%ld", w->bad);
    printf("  %-36s %8.0f %7.2f %8.2f %8.1f  %s\n", label, w->rate, w->p50,
           w->p99, w->max, bad);
}

static void print_move(const char *what, const char *load,
                       const struct move *m)
{
    uint64_t from = m->t_up ? m->t_up : m->t_start;
    double ms = (double)(m->t_done - from) / 1e6;
    printf("  %-12s %-12s %7lld %8lld %11lld %9.0f %9.1f\n", what, load,
           m->shards, m->aborted, m->passivated, ms,
           ms > 0 ? (double)m->shards * 1000 / ms : 0);
}

/* Sends `activate` to every id through n1 with `callers` callers, then
 * checks that n1 and n2 hold `n` active entities. Returns the seconds it
 * took, or -1 (said). */
static double activate_all(struct cluster *cl, const struct reqs *act,
                           long n, int callers, struct snap *s)
{
    struct phase ph;
    struct phase_opts opt = {n, NULL, 0};
    if (ms__bench_run_phase(&ph, uv_default_loop(), cl->http[0], act, 200,
                            callers, (double)n / 1000 + 60, &opt) < 0 ||
        ph.failed) {
        fprintf(stderr, "moonshard bench: activation: %s (%ld of %ld "
                "failed, first status %d)\n", ph.errmsg, ph.failed, ph.done,
                ph.bad_status);
        free(ph.lat);
        return -1;
    }
    free(ph.lat);
    double until = ms__bench_now_s() + 5;
    while (take_snap(cl, 2, s) == 0 && s->n[0].active + s->n[1].active != n &&
           ms__bench_now_s() < until)
        usleep(50000);
    if (s->n[0].active + s->n[1].active != n) {
        fprintf(stderr, "moonshard bench: after activating %ld entities, "
                "n1 and n2 hold %lld + %lld\n", n, s->n[0].active,
                s->n[1].active);
        return -1;
    }
    return (double)(ph.t_end - ph.t0) / 1e9;
}

struct handoff_args {
    long entities;
    int shards, callers;
};

/* Everything `bench handoff` does after the set-up; fills f and, when
 * `print`, prints the figures. Returns 0, or -1 on an error (said). */
static int bench_handoff(struct cluster *cl, const struct handoff_args *a,
                         char ids[][24], struct reqs *act, struct reqs *asks,
                         int print, struct ms_bench_handoff_figures *f)
{
    char entities[512];
    snprintf(entities, sizeof entities,
             "        Counter = { module = \"counter\", shard_count = %d,\n"
             "                    idle_timeout = 3600,\n"
             "                    allocation = require(\"moonshard.strategy"
             "\").least_loaded{\n"
             "                        absolute_limit = 1000,"
             " relative_limit = 1.0 } },\n", a->shards);
    if (ms__bench_write_config(cl, entities,
                               "    rebalance_interval = 0.2,\n"
                               "    handoff_timeout = 10,\n") < 0) {
        perror("moonshard bench: cannot write the cluster config");
        return -1;
    }
    fprintf(stderr, "moonshard bench handoff: starting n1 and n2 ...\n");
    if (ms__bench_start_node(cl, 0) < 0 || ms__bench_start_node(cl, 1) < 0 ||
        ms__bench_wait_up(cl, 2) < 0)
        return -1;
    if (ms__bench_build_reqs(act, cl->http[0], ids, (int)a->entities,
                             "activate", "") < 0 ||
        ms__bench_build_reqs(asks, cl->http[0], ids, (int)a->entities, "ask",
                             ASK_BODY) < 0) {
        fprintf(stderr, "moonshard bench: out of memory\n");
        return -1;
    }
    fprintf(stderr, "moonshard bench handoff: activating %ld entities ...\n",
            a->entities);
    struct snap act_snap;
    double act_s = activate_all(cl, act, a->entities, a->callers, &act_snap);
    long long alloc = allocated_shards(cl);
    if (act_s < 0 || alloc <= 0)
        return -1;

    struct move join, leave;
    fprintf(stderr, "moonshard bench handoff: n3 joins, no load ...\n");
    if (join_n3(cl, alloc, NULL, &join) < 0) {
        fprintf(stderr, "moonshard bench: join: %s\n", join.err);
        return -1;
    }
    fprintf(stderr, "moonshard bench handoff: n3 leaves, no load ...\n");
    if (leave_n3(cl, alloc, &leave) < 0) {
        fprintf(stderr, "moonshard bench: leave: %s\n", leave.err);
        return -1;
    }
    /* entities of the shards that went to n3 passivated; activate them
     * again so that the steady load does not pay their activation */
    struct snap re;
    fprintf(stderr, "moonshard bench handoff: activating again ...\n");
    if (activate_all(cl, act, a->entities, a->callers, &re) < 0)
        return -1;

    fprintf(stderr, "moonshard bench handoff: asks from %d callers, "
            "%.1f s steady, then n3 joins ...\n", a->callers, STEADY_S);
    struct load_join lj;
    memset(&lj, 0, sizeof lj);
    lj.cl = cl;
    lj.alloc = alloc;
    uv_thread_t tid;
    if (uv_thread_create(&tid, load_join_thread, &lj) != 0) {
        fprintf(stderr, "moonshard bench: cannot start a thread\n");
        return -1;
    }
    struct phase ph;
    struct phase_opts opt = {0, &lj.stop, 1};
    int prc = ms__bench_run_phase(&ph, uv_default_loop(), cl->http[0], asks,
                                  200, a->callers,
                                  WARMUP_S + STEADY_S + NODE_WAIT_S +
                                      MOVE_WAIT_S + AFTER_S,
                                  &opt);
    atomic_store(&lj.abort, 1);
    uv_thread_join(&tid);
    free(ph.lat);
    if (prc < 0 || lj.rc < 0) {
        fprintf(stderr, "moonshard bench: join under load: %s\n",
                prc < 0 ? ph.errmsg : lj.m.err);
        free(ph.smp);
        return -1;
    }
    struct move *lm = &lj.m;
    struct window steady, joining, moving, after;
    uint64_t s0 = ph.t0 + (uint64_t)(WARMUP_S * 1e9);
    window_figures(&ph, s0, lm->t_start, &steady);
    window_figures(&ph, lm->t_start, lm->t_up, &joining);
    window_figures(&ph, lm->t_up, lm->t_done, &moving);
    window_figures(&ph, lm->t_done, lm->t_done + (uint64_t)(AFTER_S * 1e9),
                   &after);
    struct snap end;
    long long peak = take_snap(cl, 1, &end) == 0 ? end.n[0].peak : -1;
    f->shards = alloc;
    f->moved = lm->shards;
    f->steady_rate = steady.rate;
    f->move_rate = moving.rate;
    f->worst_rate = moving.worst;
    f->after_rate = after.rate;
    f->bad = steady.bad + moving.bad;
    if (!print) {
        free(ph.smp);
        return 0;
    }

    printf("moonshard bench handoff: n1 + n2, then n3 joins, leaves and "
           "joins under load\n"
           "  Counter, %d shards (%lld allocated), %ld entities; "
           "least_loaded (absolute_limit 1000,\n"
           "  relative_limit 1.0), rebalance_interval 0.2 s, "
           "handoff_timeout 10 s; 127.0.0.1\n"
           "  activation through n1, %d callers: %.2f s (%.0f/s); active: "
           "n1 %lld + n2 %lld\n\n",
           a->shards, alloc, a->entities, a->callers, act_s,
           (double)a->entities / act_s, act_snap.n[0].active,
           act_snap.n[1].active);
    char load[32];
    snprintf(load, sizeof load, "%d callers", a->callers);
    printf("  %-12s %-12s %7s %8s %11s %9s %9s\n", "move", "load", "shards",
           "aborted", "passivated", "time ms", "shards/s");
    print_move("n3 joins", "none", &join);
    print_move("n3 leaves", "none", &leave);
    print_move("n3 joins", load, lm);
    printf("  join: from n3 Up (as n1 lists it; %.0f and %.0f ms after its "
           "start) to balanced.\n"
           "  leave: from POST /v1/leave to n3 exited and balanced; n1 and "
           "n2 owned every\n"
           "  shard after %.0f ms, n3 exited after %.0f ms. passivated: "
           "entities the old\n"
           "  owners passivated (a leaving n3 passivates all it has). "
           "Peak concurrent moves: %lld\n\n",
           (double)(join.t_up - join.t_start) / 1e6,
           (double)(lm->t_up - lm->t_start) / 1e6,
           (double)(leave.t_moved - leave.t_start) / 1e6,
           (double)(leave.t_exit - leave.t_start) / 1e6, peak);
    printf("  %-36s %8s %7s %8s %8s  %s\n", "asks to n1, all ids", "asks/s",
           "p50 ms", "p99 ms", "max ms", "non-200");
    print_window("steady, 2 nodes", &steady);
    print_window("n3 starting, until Up", &joining);
    print_window("the move, Up to balanced", &moving);
    print_window("after the move, 3 nodes", &after);
    printf("\n  throughput during the move / steady: %.2f\n",
           ms__bench_ratio(moving.rate, steady.rate));
    /* on a machine with fewer cores than node processes plus callers,
     * three nodes serve less than two even with nothing moving: this
     * ratio separates the move's cost from that */
    printf("  after the move / steady:              %.2f  (3 nodes, "
           "nothing moving)\n",
           ms__bench_ratio(after.rate, steady.rate));
    printf("  during the move / after the move:     %.2f\n",
           ms__bench_ratio(moving.rate, after.rate));
    if (moving.worst >= 0)
        printf("  worst %d ms of the move / steady:    %.2f\n", SLICE_MS,
               ms__bench_ratio(moving.worst, steady.rate));
    else
        printf("  (the move was shorter than %d ms: no worst slice)\n",
               SLICE_MS);
    if (timeline_ms)
        print_timeline(&ph, lm, steady.rate, timeline_ms);
    free(ph.smp);
    fflush(stdout);
    return 0;
}

static int handoff_usage(void)
{
    fprintf(stderr, "usage: moonshard-bench handoff [--entities N] "
            "[--shards S] [--callers C] [--timeline MS]\n");
    return 2;
}

/*
 * `moonshard-bench handoff [--entities N] [--shards S] [--callers C]
 * [--timeline MS]`; argv[0] is "handoff". Measures shard moves when n3
 * joins and leaves a cluster of n1 and n2, without load and under load,
 * and prints them (with --timeline, the join under load slice by slice).
 * Returns the exit code: 0, or 1 when a step or check failed.
 */
int ms_bench_handoff_main(int argc, char **argv)
{
    struct handoff_args a = {100000, 256, 50};
    for (int i = 1; i < argc; i++) {
        char *end;
        long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
        int ok = i + 1 < argc && *end == 0;
        if (strcmp(argv[i], "--entities") == 0 && ok && v >= 1 &&
            v <= 10000000)
            a.entities = v;
        else if (strcmp(argv[i], "--shards") == 0 && ok && v >= 3 &&
                 v <= 65536)
            a.shards = (int)v;
        else if (strcmp(argv[i], "--callers") == 0 && ok && v >= 1 &&
                 v <= HANDOFF_MAX_CALLERS)
            a.callers = (int)v;
        else if (strcmp(argv[i], "--timeline") == 0 && ok && v >= 1 &&
                 v <= 1000)
            timeline_ms = (int)v;
        else
            return handoff_usage();
        i++;
    }
    struct ms_bench_handoff_figures f;
    return ms__bench_handoff_run(a.entities, a.shards, a.callers, 1, &f);
}

int ms__bench_handoff_run(long entities, int shards, int callers, int print,
                          struct ms_bench_handoff_figures *f)
{
    struct handoff_args a = {entities, shards, callers};
    struct cluster cl;
    int spare;
    memset(f, 0, sizeof *f);
    if (ms__bench_cluster_init(&cl, 3, &spare) < 0)
        return 1;
    char (*ids)[24] = calloc((size_t)a.entities, sizeof *ids);
    struct reqs act = {NULL, NULL, 0}, asks = {NULL, NULL, 0};
    int rc = -1;
    if (ids) {
        for (long i = 0; i < a.entities; i++)
            snprintf(ids[i], sizeof ids[i], "h%ld", i + 1);
        rc = bench_handoff(&cl, &a, ids, &act, &asks, print, f);
        if (rc < 0)
            ms__bench_show_node_logs(&cl);
    } else {
        fprintf(stderr, "moonshard bench: out of memory\n");
    }
    fflush(stdout);
    ms__bench_cleanup_all();
    ms__bench_free_reqs(&act);
    ms__bench_free_reqs(&asks);
    free(ids);
    return rc != 0 ? 1 : 0;
}
