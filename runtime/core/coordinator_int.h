/*
 * coordinator_int.h -- what the files of the coordinator share, and nothing
 * else includes: the state (struct ms_coord and its parts) and the
 * functions one file calls in another (ms__coord_*). See coordinator.h for
 * the model and the public entry points.
 *
 * The coordinator is three files, one job each:
 *   coordinator.c        the state's helpers, the action queue, lifecycle,
 *                        terms (become, resign, depose), the events and
 *                        the queries;
 *   coordinator_plan.c   membership facts, the regions' views, publishing
 *                        the plan and allocation;
 *   coordinator_moves.c  handoff moves (fence, stop, place, deadline,
 *                        resend), leaving members and rebalance rounds.
 *
 * Memory: the members live in one array sorted by uid (binary search;
 * insertion and removal shift it, cheap at <= 1,024 members), each with a
 * bit per registered type and a count of owned shards per type (kept up to
 * date once the plan is published, so a strategy's view costs
 * O(members)). Each known type holds two arrays, owner and generation per
 * shard. Actions wait in a queue that grows as needed.
 */
#ifndef MS_CORE_COORDINATOR_INT_H
#define MS_CORE_COORDINATOR_INT_H

#include "coordinator.h"

enum state { INERT, COLLECTING, READY };

enum phase { FENCING, STOPPING, PLACING };

/* A shard moving away from its owner. */
struct move {
    int ti;
    uint32_t shard;
    uint64_t from;        /* the old owner */
    uint64_t hgen;        /* the move's handoff generation */
    uint64_t started_ms, deadline_ms;
    uint64_t sent_ms;     /* its HANDOFF or STOP last went out */
    int phase;
    int voluntary;
    uint64_t *need;       /* regions whose fence has not come yet */
    size_t nneed, needcap;
};

struct member {
    uint64_t uid;
    int leaving;
    int reachable;
    int view_done;      /* sent view_done for the current term */
    uint64_t types;     /* bit i: registered type i this term */
    uint32_t owned[MS_PLAN_MAX_TYPES]; /* READY: shards owned per type */
};

struct ctype {
    char name[MS_PLAN_MAX_TYPE_NAME + 1];
    char fp[MS_PLAN_MAX_FINGERPRINT + 1];
    int own;            /* one of this node's types: settings fixed */
    int known;          /* fp and shard_count set, arrays allocated */
    uint32_t shard_count;
    uint64_t *owner;    /* [shard_count] */
    uint64_t *gen;      /* [shard_count] */
    uint8_t *moving;    /* [shard_count] 1: a move is under way */
};

struct ms_coord {
    uint64_t self_uid;
    uint64_t view_timeout_ms;
    ms_coord_allocate_cb allocate;
    ms_coord_allocate_many_cb allocate_many;
    ms_coord_eligible_cb eligible;
    ms_coord_rebalance_cb rebalance;
    void *data;
    uint64_t handoff_timeout_ms;
    uint64_t rebalance_interval_ms;

    int state;
    uint64_t term;
    uint64_t max_term;
    uint64_t generation;   /* highest issued or seen */
    uint64_t due_ms;       /* COLLECTING: publish; READY: view retries */

    struct ctype types[MS_PLAN_MAX_TYPES];
    int ntypes;

    struct member *members; /* ascending uid */
    size_t nmembers, mcap;
    struct ms_coord_host *hosts; /* scratch, MS_COORD_MAX_MEMBERS */

    struct ms_coord_action *q;
    size_t qhead, qlen, qcap; /* live actions are q[qhead .. qlen) */

    struct move *moves;       /* under way, in no particular order */
    size_t nmoves, movecap;
    uint64_t next_round_ms;   /* READY: the next rebalance round */
    uint64_t now_ms;          /* the latest time a caller gave */
    int reconcile;            /* run a round at the next tick */
    struct ms_coord_move_stats mst;
};

/* --- small helpers (coordinator.c) --------------------------------------- */

static inline uint64_t bit(int ti)
{
    return (uint64_t)1 << ti;
}

static inline int eligible(const struct ms_coord *c, int ti, uint64_t uid)
{
    return !c->eligible || c->eligible(c->data, ti, uid);
}

static inline int can_host(const struct ms_coord *c, int ti,
                           const struct member *mb)
{
    return mb && (mb->types & bit(ti)) && eligible(c, ti, mb->uid);
}

/* The last generation this term may issue. */
static inline uint64_t gen_limit(const struct ms_coord *c)
{
    return ((c->term + 1) << 32) - 1;
}

/* The member with `uid`, or NULL. */
struct member *ms__coord_find_member(const struct ms_coord *c, uint64_t uid);

/* The index of type `name`, or -1. */
int ms__coord_find_type(const struct ms_coord *c, const char *name);

/* Allocates the per-shard arrays of `t`; 0 or MS_ENOMEM. */
int ms__coord_type_alloc(struct ctype *t, uint32_t shard_count);

/* May `owner` keep a shard of type ti? (coordinator.c says when.) */
int ms__coord_may_keep(const struct ms_coord *c, int ti, uint64_t owner);

/* Sets the owner and generation of shard s of type ti, keeping the
 * members' counts of owned shards and c->generation up to date. */
void ms__coord_set_owner(struct ms_coord *c, int ti, uint32_t s,
                         uint64_t owner, uint64_t gen);

/* --- actions (coordinator.c) --------------------------------------------- */

/* Queues a copy of `a` (which owns its payload on success). */
int ms__coord_push(struct ms_coord *c, const struct ms_coord_action *a);

/* Encodes `m` and queues it for `uid` (0: broadcast). */
int ms__coord_emit(struct ms_coord *c, uint64_t uid,
                   const struct ms_plan_msg *m);

/* Queues a message of `kind` that carries only the term. */
int ms__coord_emit_term(struct ms_coord *c, uint64_t uid, int kind);

/* Queues messages of `kind` for type ti carrying e[0..n), in chunks. */
int ms__coord_emit_kind(struct ms_coord *c, uint64_t uid, int ti, int kind,
                        struct ms_plan_entry *e, size_t n);

/* Queues "plan" messages for type ti carrying e[0..n). */
int ms__coord_emit_entries(struct ms_coord *c, uint64_t uid, int ti,
                           struct ms_plan_entry *e, size_t n);

/* Queues a log line for the operator. */
void __attribute__((format(printf, 2, 3)))
ms__coord_note(struct ms_coord *c, const char *fmt, ...);

/* Learns of `term`; when coordinating, goes inert and queues DEPOSED. */
int ms__coord_depose(struct ms_coord *c, uint64_t term);

/* --- the plan (coordinator_plan.c) --------------------------------------- */

/* Stamps every shard with one new generation, broadcasts the plan, READY. */
int ms__coord_publish(struct ms_coord *c, uint64_t now_ms);

/* Unassigns the shards of type ti that their owner may not keep (only
 * `only`'s when non-zero; with `all`, every one of `only`'s). */
int ms__coord_sweep_owner(struct ms_coord *c, int ti, uint64_t only,
                          int all);

/* Fills c->hosts with the members that can host type ti; their number. */
size_t ms__coord_hosts_of(struct ms_coord *c, int ti);

/* Chooses the owner of unassigned shard s of type ti, away from member
 * `away` (0: none) while another can host it; 0 with *code and a reason
 * in err when there is none. */
uint64_t ms__coord_place(struct ms_coord *c, int ti, uint32_t s,
                         uint64_t away, const char **code, char *err,
                         size_t errlen);

/* Places s[0..n) of type ti, stopped at `away`, with one allocate_many
 * call (coordinator.h), over the view as it is now (their old owners,
 * moving): out[i] is shard i's owner, 0 with *code and its reason in
 * err + i * errlen when it has none (`err`: n strings of errlen bytes,
 * "" on entry). Returns 0, or -1 when there is no
 * allocate_many, n < 2, `away` is leaving and the only host, or it cannot
 * run: the caller places one by one. */
int ms__coord_place_many(struct ms_coord *c, int ti, const uint32_t *s,
                         size_t n, uint64_t away, uint64_t *out,
                         const char **code, char *err, size_t errlen);

/* The events of coordinator_plan.c: a view, a view_done, an alloc. */
int ms__coord_on_view(struct ms_coord *c, struct member *mb,
                      const struct ms_plan_msg *m);
int ms__coord_on_view_done(struct ms_coord *c, struct member *mb,
                           uint64_t now_ms);
int ms__coord_on_alloc(struct ms_coord *c, uint64_t from,
                       const struct ms_plan_msg *m);

/* --- moves (coordinator_moves.c) ----------------------------------------- */

/* Forgets every move (counted as aborted). */
void ms__coord_clear_moves(struct ms_coord *c);

/* Forgets the move of shard `shard` of type ti, if any (aborted). */
void ms__coord_forget_move(struct ms_coord *c, int ti, uint32_t shard);

/* Sends `uid` the HANDOFF of the moves of type ti under way (only shard
 * `only`'s when >= 0) and makes the fencing ones wait for its fence. */
int ms__coord_tell_moves(struct ms_coord *c, uint64_t uid, int ti,
                         int64_t only);

/* Region `region` is gone: it no longer holds up any move. */
int ms__coord_on_fenced_by(struct ms_coord *c, uint64_t region);

/* The events of coordinator_moves.c: FENCED and STOPPED of type ti. */
int ms__coord_on_fenced(struct ms_coord *c, uint64_t from, int ti,
                        const struct ms_plan_msg *m);
int ms__coord_on_stopped(struct ms_coord *c, uint64_t from, int ti,
                         const struct ms_plan_msg *m);

/* The tick's steps while READY, in this order. */
int ms__coord_expire_moves(struct ms_coord *c, uint64_t now_ms);
int ms__coord_resend_moves(struct ms_coord *c, uint64_t now_ms);
int ms__coord_move_leavers(struct ms_coord *c, uint64_t now_ms);
int ms__coord_run_rounds(struct ms_coord *c, uint64_t now_ms);

#endif
