/*
 * sim.h -- the deterministic cluster simulator's shared model (issue 14).
 *
 * One process, one thread, one virtual clock. N nodes, each with the
 * real core objects of a moonshard node (membership, region with its
 * coordinator, dispatcher, lease machine), are driven by one event queue:
 * a binary heap of (time, sequence) events, so that two events at the same
 * virtual millisecond run in the order they were queued and a run is a
 * pure function of its seed. The simulator replaces libuv, the sockets,
 * PostgreSQL and the clock -- never the core logic:
 *
 *   sim.c      the world: clock, events, network, clients, faults;
 *   node.c     the nodes' glue: the sim's binding of the core objects,
 *              mirroring runtime/io/cluster.c, runtime/io/router.c and
 *              runtime/node/node.c;
 *   check.c    the invariants, checked after every event;
 *   leasedb.c  the lease table with the semantics of runtime/io/lease_sql.c
 *              and the journal's commit check (runtime/io/journal.c);
 *   main.c     the command line: seeds, schedules, replay, shrink.
 *
 * Nothing in the simulation reads a wall clock or calls rand(): the PRNG
 * (xoshiro256**, seeded through splitmix64) is ours.
 */
#ifndef MS_SIM_H
#define MS_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "../runtime/core/config.h"
#include "../runtime/core/dispatch.h"
#include "../runtime/core/membership.h"
#include "../runtime/core/region.h"

#define SIM_MAX_SLOTS 8        /* node slots (names n1..n8) */
#define SIM_MAX_INCS 64        /* incarnations in one run */
#define SIM_NTYPES 2
#define SIM_COUNTER_SHARDS 16  /* type 0 "Counter": ordinary */
#define SIM_ACCOUNT_SHARDS 8   /* type 1 "Account": persistent, leased */
#define SIM_ENTITIES 48        /* ids c0..c31 (Counter), a0..a15 */
#define SIM_NCOUNTER 32
#define SIM_MAX_STEPS 64       /* scheduled faults of one run */
#define SIM_TRACE_RING 48      /* trace lines kept for a violation */
#define SIM_HANDOFF_MS 5000    /* handoff_timeout of the nodes */
#define SIM_ASK_TIMEOUT_MS 3000
#define SIM_LEASE_MS 2000      /* lease_duration of "Account" */
#define SIM_RENEW_MS 600
#define SIM_WINDOW_MS 4000
#define SIM_MAX_BREAKS 8

/* --- the PRNG ------------------------------------------------------------ */

struct sim_rng {
    uint64_t s[4];
};

void sim_rng_seed(struct sim_rng *r, uint64_t seed);
uint64_t sim_rng_next(struct sim_rng *r);
/* uniform in [0, n); n > 0 */
uint64_t sim_rng_below(struct sim_rng *r, uint64_t n);

/* --- the schedule -------------------------------------------------------- */

enum sim_step_kind {
    STEP_PARTITION_ONE = 1, /* isolate node a */
    STEP_PARTITION_SPLIT,   /* majority/minority: a's group vs the rest */
    STEP_ONEWAY,            /* frames a -> b lost */
    STEP_BRIDGE,            /* two halves, node a sees both */
    STEP_CUT,               /* the connection a <-> b drops */
    STEP_PAUSE,             /* node a stops running */
    STEP_CRASH,             /* node a loses its memory */
    STEP_RESTART,           /* a dead slot a starts a new incarnation */
    STEP_LEAVE,             /* node a leaves gracefully */
    STEP_DOWN,              /* an operator downs node a (if unreachable) */
    STEP_MOVE,              /* the coordinator moves a shard by hand */
    STEP_REBALANCE,         /* a rebalance round now */
    STEP_JOIN,              /* the spare slot joins */
    STEP_DB_SLOW            /* the lease table answers slowly a while */
};

struct sim_step {
    uint64_t at_ms;
    int kind;
    int a, b;            /* node slots (or a shard for MOVE) */
    uint64_t dur_ms;     /* how long the fault lasts (0: instant) */
    uint64_t arg;        /* a split mask, a type, ... */
};

struct sim_schedule {
    int nsteps;
    struct sim_step steps[SIM_MAX_STEPS];
    uint64_t faults_end_ms;  /* every fault healed, dead slots restarted */
    uint64_t end_ms;         /* the run stops here */
};

/* Settings of one run. */
struct sim_opts {
    uint64_t seed;
    int nodes;                    /* 3..SIM_MAX_SLOTS-1 (one spare) */
    uint64_t duration_ms;         /* the faulty part of the schedule */
    int nfaults;                  /* steps to draw */
    int trace;                    /* print the trace */
    int quiet;
    const char *breaks[SIM_MAX_BREAKS];
    int nbreaks;
    uint64_t dropped;             /* bit i: step i is left out (shrink) */
    /* 1: the first seed (n1) may restart while faults go on. It may then
     * found a second cluster when it cannot reach the other seeds within
     * seed_timeout (membership.h, "Joining"): a known hazard, off by
     * default so that the runs test everything else */
    int island;
};

/* The result of one run. */
struct sim_result {
    int failed;                   /* an invariant failed */
    char invariant[64];           /* its name */
    char message[512];
    uint64_t checksum;            /* FNV-1a of the whole trace */
    uint64_t events;
    uint64_t node_ms;             /* simulated node-milliseconds */
    uint64_t end_ms;
    uint64_t tells, asks, delivered, commits, moves;
};

/* Draws the schedule of opts->seed. */
void sim_schedule_make(const struct sim_opts *o, struct sim_schedule *s);

/* Runs one schedule. Returns 0, or 1 when an invariant failed (res says
 * which, and the last trace lines were printed unless quiet). */
int sim_run(const struct sim_opts *o, const struct sim_schedule *s,
            struct sim_result *res);

/* Prints a step as one line (the schedule listing of --shrink). */
void sim_step_describe(const struct sim_step *st, char *buf, size_t len);

/* The switch names the simulator knows (test-only breakage, MS_SIM_SWITCHES
 * in the core; "db-*" in the simulated lease table). */
extern const char *const sim_break_names[];
int sim_break_known(const char *name);

#endif
