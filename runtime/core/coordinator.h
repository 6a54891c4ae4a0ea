/*
 * coordinator.h -- the coordinator's state machine: the authoritative plan
 * of every entity type, type registration, allocation (sans-IO).
 *
 * Every node keeps one struct ms_coord and feeds it membership facts all
 * the time (member up, leaving, reachable, removed). It is inert until the
 * caller makes it the coordinator of a term (ms_coord_become), and again
 * after ms_coord_resign() or once it learns of a higher term (DEPOSED).
 * It never calls sockets, libuv or the clock: every entry point takes
 * `now_ms`, and every effect comes out as a struct ms_coord_action that
 * the caller drains with ms_coord_next_action() after each call and
 * performs. Payloads are CONTROL messages in the format of plan.h.
 *
 * Model (DESIGN.md §2, "Coordinator and plan"):
 *
 * - Types. The node's own entity types (ms_coord_config.types) have fixed
 *   settings fingerprints. Every node registers its types with the
 *   coordinator through the "view" messages of its answer to a
 *   VIEW_REQUEST. A node whose fingerprint or shard count differs from the
 *   type's (the coordinator's own, or else the first registrant's in this
 *   term) is refused for that type: a REGISTER_REFUSED goes to it with a
 *   reason naming both fingerprints. A type is hosted only by members that
 *   registered it with the type's fingerprint, are Up or Leaving, and pass
 *   the caller's eligibility callback (roles). At most MS_PLAN_MAX_TYPES
 *   types; their indexes are stable for the object's life (own types
 *   first, in config order).
 * - Terms. ms_coord_become(term) must get a term above every term this
 *   object has seen (ms_coord_max_term) and above the node's own fence
 *   (plan.h); e.g. max of both + 1. The coordinator then broadcasts a
 *   VIEW_REQUEST and collects the views: per shard it keeps the entry with
 *   the highest generation. Once every member it knows as Up or Leaving
 *   has sent its "view_done", or after view_timeout_ms, it publishes: every
 *   shard of every type is stamped with one new generation G, higher than
 *   any seen and than (term << 32), and broadcast as "plan" messages. A
 *   shard whose best entry names an owner that is gone (not a member), or
 *   that answered without registering the type, or that the eligibility
 *   callback rejects, is published unassigned. Until it has published,
 *   the coordinator refuses allocations with "not_ready" (fail closed,
 *   G4). Members that had not answered by then get a new VIEW_REQUEST
 *   every view_timeout_ms; when their view comes, they get the full plan.
 * - Generations are issued in ((term << 32), (term + 1) << 32), so a newer
 *   term's generations are above any older term's (plan.h). Evidence that
 *   another coordinator issued generations in this term or a later one (a
 *   view entry, a STALE_TERM, an alloc with a higher term) deposes this
 *   one: it emits DEPOSED and goes inert. It never assigns a shard twice
 *   at one generation.
 * - Allocation. An "alloc" for an unassigned shard calls the caller's
 *   allocate callback (the Lua strategy in the node) with the type's view,
 *   checks that the chosen uid can host the type, assigns the shard at
 *   generation ++generation and broadcasts that one entry. An alloc for an
 *   assigned shard is answered with its entry (to the requester only).
 *   Failures are answered with "alloc_refused" and a code (plan.h).
 * - Moves (handoff, DESIGN.md §2). ms_coord_move(), the rebalance rounds
 *   (the rebalance callback every rebalance_interval_ms, or at the next
 *   tick after ms_coord_reconcile()) and leaving members (all their
 *   shards, whatever the policy, once every member is reachable) start
 *   moves: a HANDOFF broadcast at a new handoff generation H; each region
 *   buffers the shard and fences its connection to the old owner, which
 *   relays the fence as FENCED; once every member has fenced, a STOP goes
 *   to the old owner, which drains and passivates the shard and answers
 *   STOPPED; then the allocate callback places the shard and the new
 *   owner is published at a generation above H, which ends every region's
 *   buffering. HANDOFF and STOP are repeated every MS_COORD_RESEND_MS until answered.
 *   A move not done within handoff_timeout_ms is rolled back: the old
 *   owner is published again at a new generation (its stop, if begun, is
 *   called off). A new coordinator knows no moves: its publish, above
 *   every H, rolls them all back. A removed old owner ends its moves (the
 *   shards are unassigned); a removed region is not waited for.
 * - Removal. ms_coord_member_removed() (the member is Down or Removed --
 *   never mere unreachability, which relocates nothing) unassigns its
 *   shards at a new generation and broadcasts that; the next alloc for
 *   them reallocates them.
 *
 * Broadcast means: to every live member of the caller's membership view,
 * this node included (its region applies plans like any other).
 *
 * Threading: none; one owner calls everything.
 */
#ifndef MS_CORE_COORDINATOR_H
#define MS_CORE_COORDINATOR_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

#define MS_COORD_MAX_MEMBERS 1024
#define MS_COORD_VIEW_TIMEOUT_MS 3000 /* default of view_timeout_ms */
#define MS_COORD_HANDOFF_TIMEOUT_MS 10000 /* default of handoff_timeout_ms */
#define MS_COORD_REBALANCE_MS 10000 /* default of rebalance_interval_ms */
/* A move's HANDOFF (or STOP) goes out again after this long unanswered:
 * a fence lost on a connection that was not up yet costs at most this. */
#define MS_COORD_RESEND_MS 250

/* A member that can host the type, as the allocation strategy sees it. */
struct ms_coord_host {
    uint64_t uid;
    int leaving;        /* 1: Leaving (strategies place it last) */
    int reachable;      /* local observation of the coordinator's node */
    uint32_t shards;    /* shards of this type it owns now */
};

/* What an allocation strategy gets; borrowed for the callback's call. */
struct ms_coord_view {
    int type;                          /* type index */
    const char *type_name;
    uint32_t shard_count;
    const uint64_t *owners;            /* [shard_count], 0: unassigned */
    const struct ms_coord_host *hosts; /* ascending uid, never empty */
    size_t nhosts;
    const uint8_t *moving;             /* [shard_count], 1: move under way */
};

/*
 * Chooses the owner of unassigned `shard` of `type`: returns the uid of
 * one of view->hosts, or 0 and a reason in `err` (`errlen` bytes,
 * NUL-terminated). It must not call any ms_coord_* function.
 */
typedef uint64_t (*ms_coord_allocate_cb)(void *data, int type,
                                         uint32_t shard,
                                         const struct ms_coord_view *view,
                                         char *err, size_t errlen);

/*
 * Optional: places shards[0..n) of `type` (ascending, n >= 2, all stopped
 * at the same old owner) in order, as n calls of the allocate callback
 * would: shard i is chosen over `view` as it is, except that shards[0..i)
 * are owned by out[0..i) (unassigned where 0) and no longer moving, and
 * shards[i] is unassigned. Stores each choice, one of view->hosts, in
 * out[i], or 0 with that shard's reason in err + i * errlen (`err` holds
 * n strings of errlen bytes, each "" on entry). Returns
 * 0, or -1 when it cannot run at all: then the coordinator places each
 * shard with allocate. One view for a batch is what makes a move of many
 * shards cheap (the Lua strategy decodes it once). It must not call any
 * ms_coord_* function.
 */
typedef int (*ms_coord_allocate_many_cb)(void *data, int type,
                                         const uint32_t *shards, size_t n,
                                         const struct ms_coord_view *view,
                                         uint64_t *out, char *err,
                                         size_t errlen);

/*
 * A rebalance round of `type`: stores at most `max` shards to move now in
 * out[] and returns their number (0: none), or -1 with a reason in err.
 * The coordinator moves only shards that have an owner and no move under
 * way, and then places each with the allocate callback.
 */
typedef int (*ms_coord_rebalance_cb)(void *data, int type,
                                     const struct ms_coord_view *view,
                                     uint32_t *out, size_t max, char *err,
                                     size_t errlen);

/* 1 when member `uid` may host `type` (has the type's roles), else 0. It
 * must not call any ms_coord_* function. */
typedef int (*ms_coord_eligible_cb)(void *data, int type, uint64_t uid);

/* One of this node's own entity types. Strings are copied. */
struct ms_coord_type {
    const char *name;         /* plan.h's rules for a type name */
    uint32_t shard_count;     /* 1..MS_PLAN_MAX_SHARDS */
    const char *fingerprint;  /* <= MS_PLAN_MAX_FINGERPRINT bytes */
};

/* Settings; copied by ms_coord_new. */
struct ms_coord_config {
    uint64_t self_uid;                 /* this node, non-zero */
    const struct ms_coord_type *types; /* this node's types */
    int ntypes;                        /* <= MS_PLAN_MAX_TYPES */
    uint64_t view_timeout_ms;          /* 0: MS_COORD_VIEW_TIMEOUT_MS */
    ms_coord_allocate_cb allocate;     /* required */
    ms_coord_allocate_many_cb allocate_many; /* NULL: allocate, one by one */
    ms_coord_eligible_cb eligible;     /* NULL: every registrant */
    ms_coord_rebalance_cb rebalance;   /* NULL: no voluntary moves */
    void *data;                        /* passed to the callbacks */
    uint64_t handoff_timeout_ms;       /* 0: MS_COORD_HANDOFF_TIMEOUT_MS */
    uint64_t rebalance_interval_ms;    /* 0: MS_COORD_REBALANCE_MS */
};

/* Counters of shard moves (handoffs) this object coordinated. */
struct ms_coord_move_stats {
    uint64_t started;     /* moves begun */
    uint64_t finished;    /* the shard was published at its new owner */
    uint64_t aborted;     /* rolled back: deadline, or the owner went */
    uint64_t rounds;      /* rebalance rounds run */
    uint64_t strategy_errors; /* rounds whose strategy failed */
    size_t in_progress;   /* moves under way now */
    size_t peak;          /* the most moves ever under way at once */
};

/* One move under way, for inspection. */
struct ms_coord_move_info {
    int type;
    uint32_t shard;
    uint64_t from;        /* the old owner */
    uint64_t hgen;        /* the move's handoff generation */
    int stopping;         /* 0: waiting for fences; 1: for the old owner */
    int voluntary;        /* 1: a rebalance; 0: the owner is leaving */
    uint64_t age_ms;      /* since it began */
    size_t fences_left;   /* regions not fenced yet */
};

enum ms_coord_action_kind {
    /* Send `payload` to member `uid`. */
    MS_COORD_SEND = 1,
    /* Send `payload` to every live member, this node included. */
    MS_COORD_BROADCAST = 2,
    /* The plan of `term` is published; allocations are served. */
    MS_COORD_READY = 3,
    /* A higher or rival term (`term`) exists: this object went inert. The
     * caller may become again with a higher term if membership still
     * makes this node the coordinator. */
    MS_COORD_DEPOSED = 4,
    /* Something an operator should read: `payload` is a log line. */
    MS_COORD_NOTE = 5
};

/* One action. `payload` (SEND, BROADCAST: a CONTROL message, `len`
 * bytes, NUL-terminated) is owned by the caller once taken: free() it. */
struct ms_coord_action {
    int kind;           /* enum ms_coord_action_kind */
    uint64_t uid;       /* SEND: the target */
    uint64_t term;      /* READY, DEPOSED */
    char *payload;
    size_t len;
};

struct ms_coord;

/*
 * Creates an inert coordinator. Copies `cfg` and its strings. Returns 0
 * and stores the object in *out (caller frees with ms_coord_free), or
 * MS_EINVAL (self_uid 0, no allocate callback, a bad or duplicate type,
 * too many types) or MS_ENOMEM.
 */
int ms_coord_new(struct ms_coord **out, const struct ms_coord_config *cfg);

/* Frees the object and the payloads of actions not taken. NULL: no-op. */
void ms_coord_free(struct ms_coord *c);

/* --- membership facts (call them whether or not this is the coordinator;
 * report every Up member, this node included, before ms_coord_become) --- */

/*
 * Member `uid` is Up. A member new to an active coordinator gets a
 * VIEW_REQUEST (it registers its types by answering). Returns 0, MS_EINVAL
 * for uid 0, MS_E2BIG past MS_COORD_MAX_MEMBERS, or MS_ENOMEM.
 */
int ms_coord_member_up(struct ms_coord *c, uint64_t uid, uint64_t now_ms);

/* Member `uid` is Leaving: it keeps its shards (handoff moves them) but is
 * offered last to strategies. Unknown uids are added as for member_up.
 * Returns as ms_coord_member_up. */
int ms_coord_member_leaving(struct ms_coord *c, uint64_t uid,
                            uint64_t now_ms);

/* The coordinator's node sees `uid` as reachable (1) or not (0); only
 * shown to strategies. Unknown uids are ignored. */
void ms_coord_member_reachable(struct ms_coord *c, uint64_t uid,
                               int reachable);

/*
 * The transport authenticated a connection to member `uid` (its first, a
 * dial after one ended, or one that replaced a duplicate): a VIEW_REQUEST or an answer that went out on a
 * connection that ended may be lost. An active coordinator that has no
 * view_done from `uid` in this term sends it a VIEW_REQUEST now, not one
 * view_timeout_ms later (a member's registration arrived 6-7 s after the
 * view in a test run when its connection was reset as the coordinator
 * began). Unknown uids, this node and inert coordinators: nothing.
 * Returns 0 or MS_ENOMEM.
 */
int ms_coord_member_connected(struct ms_coord *c, uint64_t uid);

/*
 * Member `uid` is Down or Removed: it is forgotten, and an active
 * coordinator unassigns its shards at a new generation and broadcasts
 * that. Never call it for a member that is merely unreachable. Unknown
 * uids are ignored. Returns 0 or MS_ENOMEM.
 */
int ms_coord_member_removed(struct ms_coord *c, uint64_t uid,
                            uint64_t now_ms);

/* --- role -------------------------------------------------------------- */

/*
 * Makes this node the coordinator of `term`: forgets the previous term's
 * plan and registrations, broadcasts a VIEW_REQUEST and starts collecting
 * views until every known Up/Leaving member answered or view_timeout_ms
 * passed. Returns 0, MS_EINVAL when `term` is 0, above MS_PLAN_MAX_TERM or
 * not above ms_coord_max_term(), or MS_ENOMEM.
 */
int ms_coord_become(struct ms_coord *c, uint64_t term, uint64_t now_ms);

/* This node is no longer the coordinator (membership moved the role):
 * goes inert; allocations are refused with "not_coordinator". */
void ms_coord_resign(struct ms_coord *c);

/* The node learned of coordinator term `term` (e.g. its fence accepted a
 * VIEW_REQUEST from another node). A term above an active coordinator's
 * deposes it (DEPOSED). Always remembered for ms_coord_max_term(). */
void ms_coord_observe_term(struct ms_coord *c, uint64_t term);

/* --- events ------------------------------------------------------------ */

/*
 * A CONTROL message of `len` bytes at `payload` (borrowed) arrived from
 * member `from_uid` (as authenticated by the transport). Decodes it and
 * calls ms_coord_on_msg(). Returns 0, the decoder's MS_EBADJSON / MS_E2BIG
 * / MS_ENOMEM (nothing changed, nothing queued), or ms_coord_on_msg()'s
 * code.
 */
int ms_coord_on_message(struct ms_coord *c, uint64_t from_uid,
                        const char *payload, size_t len, uint64_t now_ms);

/*
 * A decoded CONTROL message `m` (borrowed) from `from_uid`. The
 * coordinator handles "view", "view_done", "stale_term" and "alloc";
 * other kinds are region-bound and return MS_EINVAL. Views and view_done
 * from members it does not know, or of another term, are ignored; an
 * inert coordinator ignores all but "alloc", which it refuses with
 * "not_coordinator". Returns 0 or MS_ENOMEM.
 */
int ms_coord_on_msg(struct ms_coord *c, uint64_t from_uid,
                    const struct ms_plan_msg *m, uint64_t now_ms);

/* Runs what is due at `now_ms`: the publish after view_timeout_ms, and
 * VIEW_REQUEST retries to members that have not answered. Returns 0 or
 * MS_ENOMEM. */
int ms_coord_tick(struct ms_coord *c, uint64_t now_ms);

/* Milliseconds from `now_ms` until ms_coord_tick() has work (0: now): the
 * publish, view requests sent again, a move's resend or deadline, the next
 * rebalance round, a leaving member's shards to move; -1 when it has
 * none. */
int64_t ms_coord_next_deadline(const struct ms_coord *c, uint64_t now_ms);

/* Takes the oldest queued action. Returns 1 and fills *out (its payload is
 * then the caller's), or 0 when the queue is empty. */
int ms_coord_next_action(struct ms_coord *c, struct ms_coord_action *out);

/* --- moves ------------------------------------------------------------- */

/*
 * Begins moving `shard` of `type` away from its owner (DESIGN.md §2,
 * handoff): HANDOFF to every region, STOP to the old owner once every
 * region fenced, then the allocate callback places the shard and the new
 * owner is published. Returns 0, MS_EINVAL (not ready, unknown type or
 * shard, unassigned shard), MS_EBUSY (already moving) or MS_ENOMEM.
 */
int ms_coord_move(struct ms_coord *c, int type, uint32_t shard,
                  uint64_t now_ms);

/* Runs a rebalance round of every type at the next tick (hot reload). */
void ms_coord_reconcile(struct ms_coord *c);

void ms_coord_move_stats(const struct ms_coord *c,
                         struct ms_coord_move_stats *out);

/* Move i (0 .. in_progress-1) into *out; 0 when there is none. */
int ms_coord_move_at(const struct ms_coord *c, size_t i, uint64_t now_ms,
                     struct ms_coord_move_info *out);

/* 1 when member `uid` is Leaving, owns no shard and none is moving away
 * from it: it may exit. Only meaningful while ready. */
int ms_coord_leave_done(const struct ms_coord *c, uint64_t uid);

/* --- queries ----------------------------------------------------------- */

/* 1 while this node is the coordinator (collecting or ready), else 0. */
int ms_coord_active(const struct ms_coord *c);

/* 1 once the current term's plan is published, else 0. */
int ms_coord_ready(const struct ms_coord *c);

/* The current (or last) term of this coordinator, 0 before any. */
uint64_t ms_coord_term(const struct ms_coord *c);

/* The highest term this object has seen: its own, deposing evidence and
 * ms_coord_observe_term(). */
uint64_t ms_coord_max_term(const struct ms_coord *c);

/* The highest generation issued or seen. */
uint64_t ms_coord_generation(const struct ms_coord *c);

/* Number of type slots, the index of type `name` (borrowed) or
 * MS_ENOTYPE, and the name of index `type` (borrowed from the object;
 * NULL when out of range). */
int ms_coord_type_count(const struct ms_coord *c);
int ms_coord_type_index(const struct ms_coord *c, const char *name);
const char *ms_coord_type_name(const struct ms_coord *c, int type);

/* The shard count of `type`, 0 when the type is not known in this term
 * (a learned type no member registered yet) or out of range. */
uint32_t ms_coord_shard_count(const struct ms_coord *c, int type);

/*
 * The coordinator's owner of `shard` of `type`, 0 when unassigned or out
 * of range; the shard's generation in *gen (may be NULL). While
 * collecting, this is the best entry seen so far.
 */
uint64_t ms_coord_owner(const struct ms_coord *c, int type, uint32_t shard,
                        uint64_t *gen);

/* 1 when member `uid` can host `type` now (Up or Leaving, registered with
 * the type's fingerprint this term, eligible), else 0. */
int ms_coord_hosts(const struct ms_coord *c, int type, uint64_t uid);

/* The number of shards, all types together, that member `uid` owns in a
 * ready coordinator's plan (for membership's Leaving -> Exiting). */
uint32_t ms_coord_owned_count(const struct ms_coord *c, uint64_t uid);

#endif
