/*
 * bench.h -- `moonshard-bench`: throughput and memory figures of
 * moonshard with a baseline measured in the same run. Built from bench/
 * into its own executable, never installed; the shipped `moonshard`
 * binary holds none of it.
 */
#ifndef MS_BENCH_H
#define MS_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* a / b, or 0 when b is not positive (a baseline that was not measured):
 * every ratio the benches print */
static inline double ms__bench_ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

/* The median of n values, 1 <= n <= 16 (sorts a copy; local.c). */
double ms__bench_median(const double *v, int n);

/* Runs `moonshard-bench local [--ids N] [--messages N]`; argv[0] is
 * "local". Prints the figures; returns the exit code. */
int ms_bench_local_main(int argc, char **argv);

/* Runs `moonshard-bench cluster [--seconds S] [--ids N]`; argv[0] is
 * "cluster". Prints the figures; returns the exit code. */
int ms_bench_cluster_main(int argc, char **argv);

/* Runs `moonshard-bench handoff [--entities N] [--shards S]
 * [--callers C]`; argv[0] is "handoff". Prints the figures; returns the
 * exit code. */
int ms_bench_handoff_main(int argc, char **argv);

/* Runs `moonshard-bench persist [--seconds S] [--ids N]`; argv[0] is
 * "persist": pgbench and committed asks of an event-sourced counter on
 * one throwaway PostgreSQL (.ci/pg). Prints the figures; returns the exit
 * code. */
int ms_bench_persist_main(int argc, char **argv);

/* Runs `moonshard-bench remember [--entities N] [--shards S]
 * [--callers C]`; argv[0] is "remember": the eager start of remembered
 * entities whose shards move to another node, under another type's
 * traffic (remember.c). Prints the figures; returns the exit code. */
int ms_bench_remember_main(int argc, char **argv);

/* `moonshard-bench relay --to PORT [--listen PORT]` (relay.c): a TCP relay
 * on 127.0.0.1 that copies bytes between each accepted connection and a
 * connection of its own to PORT; prints the port it listens on, then runs
 * until killed. The baseline of a remote ask's two hops (redis.c). */
int ms_bench_relay_main(int argc, char **argv);

/* ---- the figures of the benches, for `moonshard-bench all` (all.c) ---- */

/* What `bench local` measured (local.c). */
struct ms_bench_local_figures {
    double floor_rate;          /* bench/floor.lua, msg/s (median) */
    double tell_rate;           /* tells through the runtime (median) */
    double tell_ratio;          /* median of the paired tells / floor */
    double ask_rate, ask_ratio; /* asks/s, and over floor_rate */
    /* the floor from bytes (bench/floor.lua's bytes): ids and payload
     * taken from C memory each message; with a tell's payload (median of
     * the rounds, and the median of the paired tells / it) and with an
     * ask's, whose reply it encodes (asks over it) */
    double bytes_rate, tell_bytes_ratio;
    double ask_bytes_rate, ask_bytes_ratio;
    /* the queue floor (bench/floor.lua's queue, bench/queue.c): the bare
     * floor behind a C lookup and a FIFO; with tells (median of the
     * rounds, the median of the paired tells / it) and with asks (asks
     * over it) */
    double queue_rate, tell_queue_ratio;
    /* the same with its states made by first messages (floor.lua's
     * "activated"), as a runtime makes them; the asks row uses them */
    double act_queue_rate, tell_act_queue_ratio;
    double ask_queue_rate, ask_queue_ratio;
    /* the queue floor and the tells with the ids in a fixed random order
     * (medians of the paired rounds, and of tells / the queue floor) */
    double shuffled_queue_rate, shuffled_tell_rate, tell_shuffled_ratio;
    /* the floor (median) with the node's collector pace, gc_headroom_mb
     * (0: LuaJIT's, then the floor itself), and tells / it (median of
     * the paired rounds) and asks / it */
    int gc_headroom_mb;
    double paced_floor_rate, tell_paced_ratio, ask_paced_ratio;
    double act_rate;            /* first messages (activations) per s */
    double bytes_per_entity;    /* RSS delta over the activation / ids */
    unsigned long long activated; /* entities active after activation */
    unsigned long long handler_errors;
    long asks_failed;
};

/*
 * The measurements of `bench local` with `ids` ids: activation (one tell
 * to each id) and the memory it took, then `rounds` (0..5) rounds of the
 * floor and `messages` tells, then `asks` asks (0: none). Prints the
 * figures when `print`; fills *f either way. Returns 0, or 1 when a step
 * failed (said) or an ask or handler failed.
 */
int ms__bench_local_run(long ids, long messages, long asks, int rounds,
                        int print, struct ms_bench_local_figures *f);

/* bench/queue.c, the C half of the queue floor, called by
 * bench/floor.lua through the FFI */
struct ms_qf;
struct ms_qf_msg;
void ms__qf_order(long *at, long n);
struct ms_qf *ms__qf_new(long nids, int shuffled);
void ms__qf_free(struct ms_qf *q);
int ms__qf_send(struct ms_qf *q, int k, const char *payload, uint32_t len,
                int ask);
uint32_t ms__qf_next(struct ms_qf *q, struct ms_qf_msg *out);
int ms__qf_reply(struct ms_qf *q, uint32_t corr, const char *json,
                 uint32_t len);
uint64_t ms__qf_replies(const struct ms_qf *q);
size_t ms__qf_msg_size(void);

/* What `bench handoff` measured under load (handoff.c). */
struct ms_bench_handoff_figures {
    long long shards;           /* allocated shards of Counter */
    long long moved;            /* shards moved by the join under load */
    double steady_rate;         /* asks/s on 2 nodes before the move */
    double move_rate;           /* asks/s from n3 Up to balanced */
    double worst_rate;          /* the worst 100 ms of the move, or -1 */
    double after_rate;          /* asks/s on 3 nodes after the move */
    long bad;                   /* non-200 answers, steady and move */
};

/*
 * `bench handoff` with `entities` entities over `shards` shards and
 * `callers` callers: starts its nodes, measures, stops them. Prints the
 * figures when `print`; fills *f either way. Returns 0, or 1 when a step
 * failed (said).
 */
int ms__bench_handoff_run(long entities, int shards, int callers, int print,
                          struct ms_bench_handoff_figures *f);

/* What `bench persist` measured (persist.c). */
struct ms_bench_persist_figures {
    double pgbench_tps;         /* single-row INSERTs, 50 clients */
    double rate;                /* committed asks/s, 50 callers */
    double p50, p99;            /* ms */
    long answered, failed;      /* asks answered 200, and not */
    long events;                /* in the journal (warm-up included) */
    int checked;                /* no failure, one event per answer */
};

/*
 * `bench persist` for `seconds` (whole) over `ids` ids: its own
 * PostgreSQL, pgbench, then the node. Prints the figures when `print`;
 * fills *f either way. Returns 0, or 1 when a step or its check failed
 * (said).
 */
int ms__bench_persist_run(int seconds, int ids, int print,
                          struct ms_bench_persist_figures *f);

/* Runs `moonshard-bench all [--seconds S] [--only ROW,...]`; argv[0] is
 * "all": the table of issue 16, one row per target, each figure with its
 * baseline measured in the same run. Returns the exit code. */
int ms_bench_all_main(int argc, char **argv);

#endif
