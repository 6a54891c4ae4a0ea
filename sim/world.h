/*
 * world.h -- the state of one simulated run, shared by sim.c (the world
 * and the nodes' glue) and check.c (the invariants). One run at a time:
 * the state is one static struct, reset by sim_run.
 */
#ifndef MS_SIM_WORLD_H
#define MS_SIM_WORLD_H

#include "leasedb.h"
#include "sim.h"

/* One event of the queue. */
struct ev {
    uint64_t t, seq;
    int kind;
    int slot;              /* the node it runs on, -1: the world */
    uint64_t uid;          /* that node's incarnation (0: any) */
    int from;              /* frames: the sending slot */
    uint64_t from_uid;
    uint64_t gen;          /* connection generation, or a timer token */
    struct ms_frame f;     /* frames: pointers into buf */
    char *buf;
    struct ms_lease_action la;
    struct ms_lease_answer ans;
    char owner[64];
    int step;              /* STEP / HEAL: the step's index */
    int fail;              /* lease: 1 fail before, 2 lose the answer */
    uint64_t epoch;        /* commit */
    int ent;
};

struct node {
    int started;           /* the slot ever ran */
    int alive, paused, stopping, left;
    int inc;               /* incarnation index */
    uint64_t uid;
    int64_t clock_off;     /* local monotonic clock = now + clock_off */
    char name[16], addr[32];
    struct ms_membership *mb;
    struct ms_region *rg;
    struct ms_dispatch *d;
    struct ms_config cfg;
    struct ms_type_config tc[SIM_NTYPES];
    uint64_t coordinator;
    char owed[SIM_MAX_SLOTS][32]; /* seed addresses owed a gossip */
    int nowed;
    uint64_t mb_token, mb_due;
    uint64_t dt_token, dt_due;
    int work_armed;
    int draining;
    struct ev **deferred;  /* events that came while paused */
    size_t ndeferred, capdeferred;
    /* what the checks remember of this incarnation */
    uint64_t gen_seen[SIM_NTYPES][32];
    uint64_t epoch_seen[32];
    uint64_t max_term_seen, coord_gen_seen;
    uint8_t *active;       /* [nents]: entity active here */
};

struct conn {
    int state;             /* 0 down, 1 dialing, 2 up */
    uint64_t gen;
    uint64_t uid[2];       /* the incarnations at each end (lo, hi slot) */
    uint64_t last_t[2];    /* FIFO: last delivery time per direction */
    /* the frames of each direction in flight, in order: [0] lo -> hi */
    struct ev **q[2];
    size_t qh[2], qn[2], qcap[2];
    uint64_t token[2];     /* the delivery event that may act */
};

struct msg {
    int inc, ent, kind;    /* kind: 1 tell, 2 ask */
    uint64_t seq, t;
    int delivered, ended, err;
    int final;             /* a tell of the final touch */
};

struct entity {
    int type;
    char id[16];
    uint32_t shard;
};

struct interval {
    uint64_t start, end;   /* end UINT64_MAX while active */
};

struct world {
    const struct sim_opts *o;
    const struct sim_schedule *sch;
    struct sim_result *res;
    struct sim_rng rng;
    uint64_t now;
    uint64_t seq;
    struct ev **heap;
    size_t nheap, capheap;
    int nslots;            /* opts->nodes + 1 spare */
    struct node n[SIM_MAX_SLOTS];
    struct conn c[SIM_MAX_SLOTS][SIM_MAX_SLOTS]; /* [lo][hi] */
    int block[SIM_MAX_SLOTS][SIM_MAX_SLOTS];     /* frames a -> b held */
    int paused_count, blocked_count;
    int ninc;
    uint64_t inc_uid[SIM_MAX_INCS];
    int inc_alive[SIM_MAX_INCS];
    /* downed by an operator while its process still ran (paused or cut
     * off): until it learns so, it may act as an owner that the others
     * replaced -- the hazard the operator accepts (cluster.c
     * ms_cluster_down); the per-sender order is not checked there */
    int inc_zombie[SIM_MAX_INCS];
    uint64_t inc_stop_t[SIM_MAX_INCS];
    uint64_t seq_next[SIM_MAX_INCS][128];
    uint64_t last_deliv[SIM_MAX_INCS][128];
    struct entity ents[128];
    int nents;
    int act_count[128];
    struct msg *msgs;
    size_t nmsgs, capmsgs;
    struct leasedb db;
    int64_t db_off;
    uint64_t db_slow_until;
    /* commits per persistent shard */
    uint64_t commit_epoch[32];
    int commit_inc[32];
    /* (type, shard, generation) -> owner, open addressing */
    uint64_t *own_key, *own_val;
    size_t own_cap, own_n;
    struct interval faults[2 * SIM_MAX_STEPS + 8];
    int nfaults;
    int step_fault[SIM_MAX_STEPS]; /* the step's interval, -1: none */
    int check_dup;         /* an entity became active twice: check */
    int failed;
    int final_done;
    uint64_t converged_at; /* when check_converged first held */
    /* the trace */
    char ring[SIM_TRACE_RING][200];
    int ring_at, ring_n;
    uint64_t checksum;
    /* switches */
    struct sim_rng grng;   /* the graceful moves after the faults */
    int brk_two_owners, brk_skip_fence, brk_no_rollback, brk_ask_twice;
};

extern struct world W;

void trace(int slot, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void violation(const char *inv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define SIM_USER_TIMEOUT_MS 5000  /* the transport's TCP_USER_TIMEOUT */
#define SIM_ENOTCONN (-107)       /* UV_ENOTCONN of the transport */
#define ROUND_BUDGET 64           /* messages per dispatcher round */

/* the kinds of events */
enum {
    EV_MB_TICK = 1, EV_SWEEP, EV_WORK, EV_DTICK, EV_FRAME, EV_SELF_CTRL,
    EV_CONNECTED, EV_UTIMEOUT, EV_LEASE_EXEC, EV_LEASE_ANS, EV_COMMIT,
    EV_CLIENT, EV_STEP, EV_HEAL, EV_FAULTS_END, EV_FINAL_TOUCH, EV_END,
    EV_NET, EV_CONV, EV_GMOVE
};

/* sim.c: the queue, the network */
struct ev *ev_new(int kind, uint64_t t, int slot);
void ev_free(struct ev *e);
void push(struct ev *e);
void later(int kind, uint64_t in_ms, int slot);
uint64_t rnd(uint64_t n);
int run_event(struct ev *e);
int slot_of_uid(uint64_t uid);
int slot_index(const struct node *n);
int connected(int a, uint64_t uid);
int net_send(int a, uint64_t uid, const struct ms_frame *f);
void dial(int a, const char *address);
void conn_close(int a, int b, const char *why);

/* node.c: a node's glue */
void node_start(int s);
void node_free(int s);
void node_crash(int s, const char *why);
void node_close(int s);
void node_arm(struct node *n);
void rg_drain(struct node *n);
void mb_drain(struct node *n);
void on_sweep(struct node *n);
void on_work(struct node *n);
void on_frame(struct node *n, uint64_t from, const struct ms_frame *f);
void on_peer_up(int a, int b);
void on_connected(struct ev *e);
void on_lease_exec(struct ev *e);

uint64_t node_now(const struct node *n);
int world_healthy(void);

/* check.c */
void check_after_event(int slot, int ticked);
void check_commit(int type, uint32_t shard, int inc, const char *owner,
                  uint64_t epoch, int64_t db_now);
void check_final(void);
int check_converged(int loud);
void check_delivery(int slot, int ent, int inc, uint64_t seq, size_t m);

#endif
