/*
 * main.c -- moonshard-sim's command line: draws a schedule per seed, runs
 * it (sim.c), replays, shrinks, and reports speed.
 *
 *   moonshard-sim --seed S [--trace] [--drop 1,4]    one run, replayable
 *   moonshard-sim --seeds A-B                        many runs
 *   moonshard-sim --regressions sim/regressions.txt  the kept seeds
 *   moonshard-sim --seed S --shrink                  the shortest schedule
 *   moonshard-sim --break NAME --seeds A-B           a test-only breakage
 *
 * The wall clock is read here only, around runs, for the speed figure;
 * nothing inside a run reads it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

const char *const sim_break_names[] = {
    "two-owners", "skip-fence", "no-rollback", "reply-twice",
    "db-stale-commit", NULL};

int sim_break_known(const char *name)
{
    for (int i = 0; sim_break_names[i]; i++)
        if (strcmp(sim_break_names[i], name) == 0)
            return 1;
    return 0;
}

static const char *const step_names[] = {
    "?", "isolate", "split", "one-way", "bridge", "cut", "pause", "crash",
    "restart", "leave", "down", "move", "rebalance", "join", "db-slow"};

void sim_step_describe(const struct sim_step *st, char *buf, size_t len)
{
    const char *k = st->kind > 0 && st->kind <= STEP_DB_SLOW
                        ? step_names[st->kind] : "?";
    switch (st->kind) {
    case STEP_PARTITION_SPLIT:
    case STEP_BRIDGE:
        snprintf(buf, len, "at %llu ms %s n%d mask 0x%llx for %llu ms",
                 (unsigned long long)st->at_ms, k, st->a + 1,
                 (unsigned long long)st->arg,
                 (unsigned long long)st->dur_ms);
        break;
    case STEP_ONEWAY:
    case STEP_CUT:
        snprintf(buf, len, "at %llu ms %s n%d -> n%d for %llu ms",
                 (unsigned long long)st->at_ms, k, st->a + 1, st->b + 1,
                 (unsigned long long)st->dur_ms);
        break;
    case STEP_MOVE:
        snprintf(buf, len, "at %llu ms move %s shard %d",
                 (unsigned long long)st->at_ms,
                 st->arg % 2 ? "Account" : "Counter", st->b);
        break;
    default:
        snprintf(buf, len, "at %llu ms %s n%d for %llu ms",
                 (unsigned long long)st->at_ms, k, st->a + 1,
                 (unsigned long long)st->dur_ms);
    }
}

void sim_schedule_make(const struct sim_opts *o, struct sim_schedule *s)
{
    struct sim_rng r;
    sim_rng_seed(&r, o->seed * 0x9e3779b97f4a7c15ULL + 1);
    memset(s, 0, sizeof *s);
    int n = o->nodes, joined = 0;
    uint64_t start = 12000, last = start;
    int want = o->nfaults < SIM_MAX_STEPS - 8 ? o->nfaults : SIM_MAX_STEPS - 8;
    for (int i = 0; i < want && s->nsteps < SIM_MAX_STEPS - 1; i++) {
        struct sim_step *st = &s->steps[s->nsteps++];
        st->at_ms = start + sim_rng_below(&r, o->duration_ms);
        st->a = (int)sim_rng_below(&r, (uint64_t)n);
        st->b = (st->a + 1 + (int)sim_rng_below(&r, (uint64_t)n - 1)) % n;
        uint64_t w = sim_rng_below(&r, 100);
        st->dur_ms = 1000 + sim_rng_below(&r, 9000);
        if (w < 12) {
            st->kind = STEP_PARTITION_ONE;
        } else if (w < 22) {
            st->kind = STEP_PARTITION_SPLIT;
            uint64_t mask = 0;
            int k = 1 + (int)sim_rng_below(&r, (uint64_t)(n / 2));
            while (k > 0) {
                int x = (int)sim_rng_below(&r, (uint64_t)n);
                if (!(mask & (1ULL << x))) {
                    mask |= 1ULL << x;
                    k--;
                }
            }
            st->arg = mask;
        } else if (w < 28) {
            st->kind = STEP_ONEWAY;
        } else if (w < 33) {
            st->kind = STEP_BRIDGE;
            uint64_t mask = 0;
            for (int x = 0; x < n; x++)
                if (x != st->a && sim_rng_below(&r, 2))
                    mask |= 1ULL << x;
            st->arg = mask;
        } else if (w < 40) {
            st->kind = STEP_CUT;
            st->dur_ms = 0;
        } else if (w < 48) {
            st->kind = STEP_PAUSE;
            st->dur_ms = 500 + sim_rng_below(&r, 8000);
        } else if (w < 58) {
            st->kind = STEP_CRASH;
            if (sim_rng_below(&r, 2)) {
                /* no restart until the end: an operator downs it */
                st->dur_ms = 0;
                if (s->nsteps < SIM_MAX_STEPS - 1) {
                    struct sim_step *d = &s->steps[s->nsteps++];
                    if (!o->island && st->a == 0)
                        st->a = 1 + (int)sim_rng_below(&r, (uint64_t)n - 1);
                    *d = *st;
                    d->kind = STEP_DOWN;
                    d->at_ms = st->at_ms + 6000 + sim_rng_below(&r, 4000);
                    if (d->at_ms > last)
                        last = d->at_ms;
                }
            }
        } else if (w < 66) {
            st->kind = STEP_LEAVE;
            st->dur_ms = 0;
        } else if (w < 70) {
            st->kind = STEP_DOWN;
            st->dur_ms = 0;
        } else if (w < 84) {
            st->kind = STEP_MOVE;
            st->dur_ms = 0;
            st->arg = sim_rng_below(&r, 2);
            st->b = (int)sim_rng_below(&r, 16);
        } else if (w < 90) {
            st->kind = STEP_REBALANCE;
            st->dur_ms = 0;
        } else if (w < 95 && !joined) {
            st->kind = STEP_JOIN;
            st->a = n; /* the spare slot */
            st->dur_ms = 0;
            joined = 1;
        } else {
            st->kind = STEP_DB_SLOW;
            st->dur_ms = 1000 + sim_rng_below(&r, 5000);
        }
        /* the first seed keeps its process unless --island: a restarted
         * first seed that finds no seed knowing an Up member founds a
         * second cluster (sim.h, "island") */
        if (!o->island && st->a == 0 &&
            (st->kind == STEP_CRASH || st->kind == STEP_LEAVE ||
             st->kind == STEP_DOWN))
            st->a = 1 + (int)sim_rng_below(&r, (uint64_t)n - 1);
        /* statements sent while the table is slow answer up to 5.5 s
         * after it recovers: the fault lasts until then */
        uint64_t end = st->at_ms + st->dur_ms +
                       (st->kind == STEP_DB_SLOW ? 6000 : 0);
        if (end > last)
            last = end;
    }
    s->faults_end_ms = last + 500;
    s->end_ms = s->faults_end_ms + 30000;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: moonshard-sim [--seed S | --seeds A-B | --regressions "
            "FILE]\n"
            "         [--nodes N] [--duration MS] [--faults K] [--trace]\n"
            "         [--break NAME] [--drop i,j,..] [--shrink] [--quiet]\n"
            "         [--island] [--stop-on-fail]\n"
            "breaks:");
    for (int i = 0; sim_break_names[i]; i++)
        fprintf(stderr, " %s", sim_break_names[i]);
    fprintf(stderr, "\n");
}

static int run_one(struct sim_opts *o, struct sim_result *res, int print)
{
    struct sim_schedule s;
    sim_schedule_make(o, &s);
    int rc = sim_run(o, &s, res);
    if (print)
        printf("seed %llu: %s%s%s checksum %016llx events %llu simulated "
               "%llu ms tells %llu asks %llu delivered %llu commits %llu\n",
               (unsigned long long)o->seed, rc ? "FAILED " : "ok",
               rc ? res->invariant : "", rc ? "," : "",
               (unsigned long long)res->checksum,
               (unsigned long long)res->events,
               (unsigned long long)res->end_ms,
               (unsigned long long)res->tells,
               (unsigned long long)res->asks,
               (unsigned long long)res->delivered,
               (unsigned long long)res->commits);
    return rc;
}

/* Removes steps while the run still fails with the same invariant. */
static void shrink(struct sim_opts *o)
{
    struct sim_schedule s;
    struct sim_result res;
    sim_schedule_make(o, &s);
    o->quiet = 1;
    if (!sim_run(o, &s, &res)) {
        printf("seed %llu does not fail: nothing to shrink\n",
               (unsigned long long)o->seed);
        return;
    }
    char inv[64];
    snprintf(inv, sizeof inv, "%s", res.invariant);
    int changed = 1;
    while (changed) {
        changed = 0;
        for (int i = 0; i < s.nsteps; i++) {
            if (o->dropped & (1ULL << i))
                continue;
            o->dropped |= 1ULL << i;
            if (sim_run(o, &s, &res) && strcmp(res.invariant, inv) == 0) {
                changed = 1;
            } else {
                o->dropped &= ~(1ULL << i);
            }
        }
    }
    printf("shortest schedule of seed %llu that still fails with %s:\n",
           (unsigned long long)o->seed, inv);
    char drop[512] = "";
    size_t at = 0;
    for (int i = 0; i < s.nsteps; i++) {
        if (o->dropped & (1ULL << i)) {
            at += (size_t)snprintf(drop + at, sizeof drop - at, "%s%d",
                                   at ? "," : "", i);
            continue;
        }
        char d[160];
        sim_step_describe(&s.steps[i], d, sizeof d);
        printf("  step %d: %s\n", i, d);
    }
    /* every option that shapes the run, or the replay does not fail */
    printf("replay: moonshard-sim --seed %llu", (unsigned long long)o->seed);
    if (o->nodes != 5)
        printf(" --nodes %d", o->nodes);
    if (o->duration_ms != 20000)
        printf(" --duration %llu", (unsigned long long)o->duration_ms);
    if (o->nfaults != 6)
        printf(" --faults %d", o->nfaults);
    if (o->island)
        printf(" --island");
    for (int i = 0; i < o->nbreaks; i++)
        printf(" --break %s", o->breaks[i]);
    printf("%s%s\n", at ? " --drop " : "", drop);
    o->quiet = 0;
    sim_run(o, &s, &res);
}

int main(int argc, char **argv)
{
    struct sim_opts o;
    memset(&o, 0, sizeof o);
    o.nodes = 5;
    o.duration_ms = 20000;
    o.nfaults = 6;
    uint64_t a = 1, b = 1;
    int have_seed = 0, do_shrink = 0, stop_on_fail = 0;
    const char *regressions = NULL;
    for (int i = 1; i < argc; i++) {
        const char *x = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(x, "--seed") == 0 && v) {
            a = b = strtoull(v, NULL, 10);
            have_seed = 1;
            i++;
        } else if (strcmp(x, "--seeds") == 0 && v) {
            if (sscanf(v, "%llu-%llu", (unsigned long long *)&a,
                       (unsigned long long *)&b) != 2 || b < a) {
                usage();
                return 2;
            }
            have_seed = 1;
            i++;
        } else if (strcmp(x, "--regressions") == 0 && v) {
            regressions = v;
            i++;
        } else if (strcmp(x, "--nodes") == 0 && v) {
            o.nodes = atoi(v);
            i++;
        } else if (strcmp(x, "--duration") == 0 && v) {
            o.duration_ms = strtoull(v, NULL, 10);
            i++;
        } else if (strcmp(x, "--faults") == 0 && v) {
            o.nfaults = atoi(v);
            i++;
        } else if (strcmp(x, "--break") == 0 && v) {
            if (!sim_break_known(v) || o.nbreaks >= SIM_MAX_BREAKS) {
                usage();
                return 2;
            }
            o.breaks[o.nbreaks++] = v;
            i++;
        } else if (strcmp(x, "--drop") == 0 && v) {
            for (const char *p = v; *p;) {
                int k = atoi(p);
                if (k >= 0 && k < 64)
                    o.dropped |= 1ULL << k;
                while (*p && *p != ',')
                    p++;
                if (*p)
                    p++;
            }
            i++;
        } else if (strcmp(x, "--trace") == 0) {
            o.trace = 1;
        } else if (strcmp(x, "--shrink") == 0) {
            do_shrink = 1;
        } else if (strcmp(x, "--quiet") == 0) {
            o.quiet = 1;
        } else if (strcmp(x, "--island") == 0) {
            o.island = 1;
        } else if (strcmp(x, "--stop-on-fail") == 0) {
            stop_on_fail = 1;
        } else {
            usage();
            return 2;
        }
    }
    if (o.nodes < 3 || o.nodes > SIM_MAX_SLOTS - 1 || o.nfaults < 0 ||
        o.duration_ms < 1000 || (!have_seed && !regressions)) {
        usage();
        return 2;
    }
    if (do_shrink) {
        o.seed = a;
        shrink(&o);
        return 1;
    }
    uint64_t seeds[4096], drops[4096];
    size_t nseeds = 0;
    if (regressions) {
        FILE *f = fopen(regressions, "r");
        if (!f) {
            perror(regressions);
            return 2;
        }
        char line[512];
        while (fgets(line, sizeof line, f) && nseeds < 4096) {
            char *p = line;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p < '0' || *p > '9')
                continue;
            char *end;
            seeds[nseeds] = strtoull(p, &end, 10);
            /* "S --drop i,j # why": the shrunk schedule of seed S */
            uint64_t drop = 0;
            char *d = strstr(end, "--drop ");
            char *hash = strchr(end, '#');
            if (d && (!hash || d < hash))
                for (d += 7; *d >= '0' && *d <= '9';) {
                    long k = strtol(d, &d, 10);
                    if (k >= 0 && k < 64)
                        drop |= 1ULL << k;
                    if (*d == ',')
                        d++;
                }
            drops[nseeds++] = drop;
        }
        fclose(f);
    }
    double t0 = wall_s();
    uint64_t dropped = 0;
    uint64_t node_ms = 0, runs = 0, failures = 0, events = 0;
    int many = (b - a) > 0 || nseeds > 0;
    for (uint64_t i = 0;; i++) {
        uint64_t seed;
        if (i == 0)
            dropped = o.dropped;
        if (i < nseeds)
            seed = seeds[i];
        else if (have_seed && a + (i - nseeds) <= b)
            seed = a + (i - nseeds);
        else
            break;
        o.seed = seed;
        o.dropped = i < nseeds ? drops[i] : dropped;
        struct sim_result res;
        /* a line per run (seed, result, checksum); with --quiet and
         * many runs, a line per failure and one per 1,000 runs */
        int rc = run_one(&o, &res, !many || !o.quiet);
        runs++;
        node_ms += res.node_ms;
        events += res.events;
        if (rc) {
            failures++;
            if (many && o.quiet)
                printf("seed %llu: FAILED %s: %s\n",
                       (unsigned long long)seed, res.invariant, res.message);
            if (stop_on_fail)
                break;
        } else if (many && runs % 1000 == 0) {
            printf("%llu runs, %llu failed so far\n",
                   (unsigned long long)runs, (unsigned long long)failures);
            fflush(stdout);
        }
    }
    double dt = wall_s() - t0;
    printf("%llu runs, %llu failed; %llu events; %.1f simulated node-seconds "
           "in %.2f s wall: %.0f node-seconds per second\n",
           (unsigned long long)runs, (unsigned long long)failures,
           (unsigned long long)events, (double)node_ms / 1000.0, dt,
           dt > 0 ? (double)node_ms / 1000.0 / dt : 0.0);
    return failures ? 1 : 0;
}
