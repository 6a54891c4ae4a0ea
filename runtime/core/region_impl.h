/*
 * region_impl.h -- the region's state, shared by region.c (sends, waiting,
 * requests of other nodes) and region_control.c (the CONTROL messages,
 * life cycle, queries). Not a public header.
 */
#ifndef MS_CORE_REGION_IMPL_H
#define MS_CORE_REGION_IMPL_H

#include "plan.h"
#include "region.h"

/* What a request is besides its frame kind. */
enum { RG_OP_PLAIN = 0, RG_OP_ACTIVATE = 1, RG_OP_STOP = 2 };

/* What ms_region_send_failed does with an action. */
enum { RG_FAIL_NONE = 0, RG_FAIL_REBUFFER = 1, RG_FAIL_FENCE = 2 };

struct pend {
    struct pend *next;
    int kind;             /* MS_FRAME_TELL or MS_FRAME_ASK */
    int op;               /* RG_OP_ACTIVATE (an ASK), RG_OP_STOP (a TELL) */
    uint64_t origin;      /* a request from that node (0: from here) */
    uint64_t origin_corr; /* its ask id there */
    int64_t corr;         /* the dispatcher's ask (ASK) */
    uint64_t deadline_ms;
    uint32_t idlen, len;
    int retries;
    /* a request of another node: the plan generation it was routed with
     * (it waits here while ours is older); 0 for this node's own */
    uint64_t gen;
    char data[];          /* id, payload */
};

struct rshard {
    struct pend *head, *tail;
    uint32_t n;
    uint32_t nheld;           /* of n: requests of other nodes held here */
    uint64_t alloc_sent_ms;
    /* handoff, region side: while hgen is set the shard is moving and
     * everything for it waits here, until a plan entry above hgen */
    uint64_t hgen;
    uint64_t hfrom;           /* its old owner */
    uint64_t blocked_ms;      /* since when */
    /* handoff, old owner side: a STOP came; requests are sent back */
    int stopping;
    uint64_t stop_hgen, stop_term, stop_coord;
    int warned;               /* its overflow during this move was logged */
    /* the last own request put back by ms_region_send_failed in the
     * current drain (refill_epoch == the region's drain_epoch): the next
     * one goes after it; cleared when it leaves the buffer */
    struct pend *refill;
    uint64_t refill_epoch;
    /* leases (region_lease.c) */
    int lease_stop;           /* the lease stopped the shard's entities */
    int release_wait;         /* STOPPED waits for the lease's release */
    uint64_t release_since_ms;
    /* remember-entities: STOPPED waits for the shard's records */
    int hold_wait;
    uint64_t hold_since_ms;
};

struct rtype {
    struct ms_plan *plan;
    struct rshard *shards;   /* allocated on first use */
    char fingerprint[640];
    int refused;             /* the coordinator refused our settings */
    int persistent;          /* its shards hold leases */
    uint32_t alloc_next;     /* ms_region_allocate_unowned's cursor */
};

/* A queued action and its bytes. */
struct qaction {
    struct qaction *next;
    struct ms_region_action a;
    char bytes[];
};

struct ms_region {
    struct ms_dispatch *d;
    const struct ms_config *cfg;
    ms_region_usable_cb usable;
    void *data;
    void (*wake)(void *wake_data); /* optional (region.h) */
    void *wake_data;
    struct rtype *types;
    int ntypes;
    uint64_t self;
    uint64_t coordinator;    /* as membership says (0: none) */
    uint64_t now;            /* of the call under way */
    struct ms_plan_fence fence;
    uint32_t nbuffered;      /* messages waiting, all shards */
    uint32_t nblocked;       /* shards moving (region side) */
    uint32_t nstopping;      /* shards this node is stopping */
    struct ms_coord *coord;
    struct qaction *qhead, *qtail;
    int kick_queued;
    uint64_t drain_epoch;    /* drains ended (ms_region_next_action 0) */
    struct ms_region_stats st;
    /* leases (region_lease.c): NULL without a persistent type */
    struct ms_lease *lease;
    int lease_fenced;        /* a member is unreachable */
    uint32_t nrelease_wait;  /* shards whose STOPPED waits for a release */
    uint64_t lease_rejected; /* messages rejected with MS_ELEASE here */
    /* remember-entities (ms_region_set_stop_hold) */
    ms_region_hold_cb hold;
    void *hold_data;
    uint32_t nhold_wait;     /* stopped shards waiting for `hold` */
};

/* Queues an action with a copy of frame f (SEND to uid, or BROADCAST);
 * on_fail and fail_uid tell ms_region_send_failed what to do. 0 or
 * MS_ENOMEM. */
int ms__region_emit(struct ms_region *r, int kind, uint64_t uid,
                    const struct ms_frame *f, int on_fail, uint64_t fail_uid);
/* Queues one KICK (at most one waits at a time). */
void ms__region_kick(struct ms_region *r);
/* Moves the coordinator object's actions into the region's queue. */
void ms__region_coord_drain(struct ms_region *r);
/* Encodes m and queues it as a CONTROL SEND to uid. */
int ms__region_send_control(struct ms_region *r, uint64_t uid,
                            const struct ms_plan_msg *m, int on_fail,
                            uint64_t fail_uid);
/* Queues a REPLY_ERROR for ask corr of node uid. */
void ms__region_frame_error(struct ms_region *r, uint64_t uid, uint64_t corr,
                            int err, const char *message);
/* The name of type index `type`, and the index of a name (-1). */
const char *ms__region_tname(const struct ms_region *r, int type);
int ms__region_type_by_name(const struct ms_region *r, const char *name,
                            size_t len);
/* The state of a shard, allocated on first use (NULL: no memory). */
struct rshard *ms__region_shard(struct ms_region *r, int type, uint32_t shard);
/* Sends "alloc" for the shard to the coordinator, at most every
 * MS_REGION_ALLOC_RETRY_MS. */
void ms__region_request_alloc(struct ms_region *r, int type, uint32_t shard);
/* Appends a waiting message (origin != 0: a request of that node, held)
 * within its bound: 0, MS_EOVERFLOW or MS_ENOMEM. Copies id and json. */
int ms__region_buffer(struct ms_region *r, int type, uint32_t shard, int kind,
                      int op, int64_t corr, uint64_t deadline_ms,
                      const char *id,
                      size_t idlen, const char *json, size_t len, int retries,
                      uint64_t origin, uint64_t origin_corr);
/* The frame flags of a request. */
uint16_t ms__region_op_flags(int op, int retries);
/* Sends or delivers what waits for the shard, in order, while its owner
 * is usable (a moving shard: only the held requests, if still ours). */
void ms__region_flush_shard(struct ms_region *r, int type, uint32_t shard);
/* Delivers the held requests of other nodes here, in order. */
void ms__region_deliver_held(struct ms_region *r, int type, uint32_t shard);
/* Hands a request of node uid to this node's dispatcher. */
void ms__region_deliver_request(struct ms_region *r, uint64_t uid,
                                const struct ms_dest *dst, int kind, int op,
                                uint64_t corr, const char *json, size_t len);
/* A CONTROL frame (region_control.c). */
void ms__region_on_control(struct ms_region *r, uint64_t uid,
                           const struct ms_frame *f);
/* A fence (action a) found no connection to the old owner: reported to
 * the coordinator as passed. */
void ms__region_fence_direct(struct ms_region *r,
                             const struct ms_region_action *a);

/* --- leases (region_lease.c) --- */
/* Creates the lease machine when a type is persistent: 0 or a code. */
int ms__region_lease_init(struct ms_region *r);
/* For an owned shard: 0 (deliver), 1 (wait in the region's buffer) or
 * MS_ELEASE (reject). A non-persistent type: 0. */
int ms__region_lease_gate(const struct ms_region *r, int type,
                          uint32_t shard);
static inline int ms__region_gated(const struct ms_region *r, int type,
                                   uint32_t shard)
{
    return r->types[type].persistent ? ms__region_lease_gate(r, type, shard)
                                     : 0;
}
/* The type's lease window in ms (its default filled in). */
uint64_t ms__region_lease_window_ms(const struct ms_region *r, int type);
/* A plan entry of a persistent type was applied: acquire or hand off. */
void ms__region_lease_plan(struct ms_region *r, int type, uint32_t shard);
/* A stop was asked by the coordinator (handoff): the lease follows. */
void ms__region_lease_handoff(struct ms_region *r, int type, uint32_t shard);
/* The dispatcher stopped a persistent shard: 1 when the caller must not
 * report STOPPED now (lease stop only, or waiting for the release). */
int ms__region_lease_stopped(struct ms_region *r, int type, uint32_t shard,
                             struct rshard *s);
/* Carries out what the lease machine queued. */
void ms__region_lease_pump(struct ms_region *r);
/* Ticks the machine and reports releases that ended or took too long. */
void ms__region_lease_tick(struct ms_region *r);
/* Goes on with the stops whose remember hold ended or took too long
 * (region_control.c). */
void ms__region_hold_tick(struct ms_region *r);
/* Reports STOPPED for a stopping shard (region_control.c). */
void ms__region_report_stopped(struct ms_region *r, int type, uint32_t shard,
                               struct rshard *s);
/* Rejects what waits for the shard with MS_ELEASE (held_only: only the
 * requests of other nodes; this node's own sends stay) (region.c). */
void ms__region_lease_reject(struct ms_region *r, int type, uint32_t shard,
                             int held_only);

#endif
