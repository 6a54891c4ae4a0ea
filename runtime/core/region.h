/*
 * region.h -- the region side of the plan protocol (DESIGN.md §2), as a
 * sans-IO state machine: where a message goes, and what waits for what.
 *
 * Every node keeps one struct ms_region. It holds this node's copy of the
 * plan of every type, the fence (plan.h), the coordinator object
 * (coordinator.h, which it feeds and drains) and, per shard:
 *
 * - a wait buffer: this node's own sends for a shard with no usable owner
 *   (no plan yet, unassigned, owner unreachable) or a moving one, at most
 *   MS_REGION_BUFFER, each with its deadline; past it an ask fails with
 *   MS_ETIMEDOUT and a tell is dropped and counted (G4: never guessed);
 * - held requests: requests other nodes sent with a plan newer than ours
 *   (this node was given the shard and does not know yet), at most
 *   MS_REGION_HOLD, delivered in order once our plan catches up, or sent
 *   back (NOT_OWNER) to be routed again;
 * - a move (handoff): HANDOFF from the coordinator makes everything for
 *   the shard wait here and sends a FENCE down the connection to the old
 *   owner; a plan entry above the move's generation ends it, and what
 *   waited is flushed in FIFO order before any later send;
 * - a stop: STOP makes this (old) owner stop the shard in the dispatcher
 *   and answer STOPPED once ms_region_after_dispatch() sees it stopped;
 *   requests for it meanwhile are sent back with NOT_OWNER.
 *
 * A request sent back with NOT_OWNER is buffered until the plan changes
 * and sent again, at most MS_REGION_MAX_RETRIES times; then it fails.
 *
 * Events in: sends of this node (a resolved struct ms_dest), frames from
 * peers, the coordinator and member changes, ticks, and the dispatcher's
 * stopped shards. Every entry point takes `now_ms`; nothing reads a
 * clock, a socket or a loop. Effects on this node's dispatcher (delivery,
 * asks completed or failed) are made directly through dispatch.h, which
 * is core too; effects outside come out as struct ms_region_action, which
 * the caller drains with ms_region_next_action() after each call (and
 * when the `wake` callback says so: a remote ask's reply is queued when
 * the dispatcher answers it, outside of any region call) and performs,
 * like the coordinator's actions.
 *
 * CONTROL messages this node sends to itself come out as SEND actions to
 * its own uid: the caller feeds them back with ms_region_on_frame() later,
 * not from inside the drain (a send can start inside a Lua handler, and
 * handling one may call the Lua strategy).
 *
 * Threading: none; one owner calls everything.
 */
#ifndef MS_CORE_REGION_H
#define MS_CORE_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "coordinator.h"
#include "dispatch.h"
#include "frame.h"
#include "lease.h"

#define MS_REGION_BUFFER 1024        /* own messages waiting per shard */
/* requests of other nodes held per shard until this node's plan catches
 * up (their buffers, flushed to it as the new owner) */
#define MS_REGION_HOLD 16384
#define MS_REGION_TELL_DEADLINE_MS 10000 /* how long a tell may wait */
/* NOT_OWNER answers a request may get; the next one fails it */
#define MS_REGION_MAX_RETRIES 5
/* an unowned shard with waiting messages asks for an allocation at most
 * this often */
#define MS_REGION_ALLOC_RETRY_MS 500
/* the caller ticks the region at least this often */
#define MS_REGION_TICK_MS 100
/* a shard handed off waits at most this long (and at most half of
 * handoff_timeout) for its lease's release before its stop is reported
 * anyway (the lease then runs out) */
#define MS_REGION_RELEASE_WAIT_MS 3000
/* epochs of held leases listed by ms_region_lease_each at most */
#define MS_REGION_LEASES_LISTED 256

/* Frame flags of the region's requests (part of the wire protocol). */
#define MS_REGION_FLAG_ACTIVATE 0x4000 /* an ASK that is an activation */
#define MS_REGION_FLAG_STOP 0x2000     /* a TELL that is a stop request */
#define MS_REGION_RETRY_SHIFT 8        /* NOT_OWNER count of a request */
#define MS_REGION_RETRY_MASK 0x0f00
#define MS_REGION_FLAG_WAS_ASK 0x0001  /* a NOT_OWNER of an ask */

struct ms_region_stats {
    uint64_t local_routes;     /* delivered to this node's FIFOs */
    uint64_t remote_routes;    /* sent to the owner */
    uint64_t forwards;         /* received from other nodes and delivered */
    uint64_t not_owner_sent;   /* NOT_OWNER answers to stale senders */
    uint64_t not_owner_retries;/* our messages re-routed after NOT_OWNER */
    uint64_t buffered;         /* messages that had to wait for an owner */
    uint64_t buffer_overflows; /* refused: the shard's buffer was full */
    uint64_t expired;          /* waited past their deadline (failed) */
    uint64_t handoffs_seen;    /* shard moves announced to this region */
    uint64_t handoff_buffered; /* messages that waited for a moving shard */
    uint64_t handoff_overflows;/* refused: a moving shard's buffer was full */
    uint64_t shards_handed_off;/* shards this node stopped and gave away */
    uint64_t fences_direct;    /* fences reported without a connection */
    uint64_t forward_drops;    /* tells from other nodes refused here */
    uint64_t stray_answers;    /* replies and NOT_OWNERs for asks not sent
                                  to their sender (late, or wrong) */
    uint64_t bad_payloads;     /* frames whose JSON the strict check
                                  refused (runtime/core/jsoncheck.h) */
};

/*
 * 1 when member `uid` is Up (or Leaving) and reachable from this node, so
 * a frame to it can be sent; this node itself is usable when a member.
 * A query of the caller's membership; it must not call the region.
 */
typedef int (*ms_region_usable_cb)(void *data, uint64_t uid);

/* Settings; everything is borrowed for the region's life. */
struct ms_region_config {
    uint64_t self_uid;              /* this node, non-zero */
    const struct ms_config *cfg;    /* types, limits, handoff_timeout_ms */
    struct ms_dispatch *d;          /* this node's dispatcher */
    ms_region_usable_cb usable;     /* required */
    /* the coordinator's callbacks (coordinator.h; allocate required) */
    ms_coord_allocate_cb allocate;
    ms_coord_allocate_many_cb allocate_many; /* optional */
    ms_coord_rebalance_cb rebalance;
    ms_coord_eligible_cb eligible;
    void *data;                     /* passed to every callback above */
    /* Optional: the region queued actions outside of any call into it (a
     * remote ask answered by this node's dispatcher, at ctx:reply, or its
     * deadline); the caller drains them now, as after a call, so that a
     * reply leaves when the handler makes it, not when the dispatch round
     * ends. Called with wake_data; it may drain the region (it is never
     * called from inside a region call). */
    void (*wake)(void *wake_data);
    void *wake_data;
};

enum ms_region_action_kind {
    /* Send `frame` to member `uid` (this node's own uid: a CONTROL frame
     * to feed back later with ms_region_on_frame). If the send fails,
     * call ms_region_send_failed() with the action before freeing it. */
    MS_REGION_SEND = 1,
    /* Send the CONTROL `frame` to every live member (Up, Leaving,
     * Exiting), this node included. */
    MS_REGION_BROADCAST = 2,
    /* The dispatcher was given work outside of a send: run it. */
    MS_REGION_KICK = 3,
    /* Run the lease statement `lease` (ACQUIRE, RENEW or RELEASE, see
     * lease.h) on the database and give its answer to
     * ms_region_lease_answer. Only with a persistent type. */
    MS_REGION_LEASE = 4
};

/* One action; the frame's bytes live in `buf`: free with
 * ms_region_action_free(). The fields after `frame` are the region's. */
struct ms_region_action {
    int kind;               /* enum ms_region_action_kind */
    uint64_t uid;           /* SEND: the target */
    struct ms_frame frame;  /* SEND, BROADCAST */
    char *buf;
    int on_fail;            /* what ms_region_send_failed does */
    uint64_t fail_uid;
    struct ms_lease_action lease; /* LEASE (its owner is the region's) */
};

struct ms_region;

/* Creates the region (and its coordinator object). Returns 0 and stores it
 * in *out, MS_EINVAL (self_uid 0, no usable or allocate callback) or
 * MS_ENOMEM. */
int ms_region_new(struct ms_region **out, const struct ms_region_config *rc);

/* Fails every waiting message (asks: MS_ECANCELED, requests of other
 * nodes: a REPLY_ERROR queued; tells: dropped and counted), so a caller
 * that still drains gets those answers out. Returns how many tells were
 * dropped. The region stays usable only for draining and ms_region_free. */
uint64_t ms_region_cancel_all(struct ms_region *r);

/* Frees the region, its coordinator and actions not taken. NULL: no-op.
 * It reads neither the config nor the dispatcher it was given, so their
 * owner may free them first (a node's close callbacks run in any order). */
void ms_region_free(struct ms_region *r);

/* --- sends of this node (the destination resolved by the caller with
 * ms_dispatch_resolve; payload size checked there) ---------------------- */

/* Routes a tell: 0 (delivered, sent or waiting) or a negative code. */
int ms_region_tell(struct ms_region *r, const struct ms_dest *dst,
                   const char *json, size_t len, uint64_t now_ms);

/* Routes an ask (activate: an activation, json ignored) for waiter w.
 * Returns the ask's id (the waiter is told exactly once, never from
 * inside this call) or a negative code (waiter not told). */
int64_t ms_region_ask(struct ms_region *r, const struct ms_dest *dst,
                      int activate, const char *json, size_t len,
                      uint64_t timeout_ms, const struct ms_waiter *w,
                      uint64_t now_ms);

/* Routes an ordered stop request (a no-op for an unowned shard with
 * nothing waiting: nothing is active). */
int ms_region_stop(struct ms_region *r, const struct ms_dest *dst,
                   uint64_t now_ms);

/* --- events -------------------------------------------------------------- */

/* A frame from member `uid` (as authenticated by the transport; this
 * node's own uid for a CONTROL it sent itself): TELL, ASK, REPLY,
 * REPLY_ERROR, NOT_OWNER, CONTROL. Others are ignored. */
void ms_region_on_frame(struct ms_region *r, uint64_t uid,
                        const struct ms_frame *f, uint64_t now_ms);

/* The coordinator is now `uid` (0: none). When it is this node, the
 * coordinator object becomes active at a new term; the caller then
 * reports the members already Leaving or Exiting with ms_region_member. */
void ms_region_on_coordinator(struct ms_region *r, uint64_t uid,
                              uint64_t now_ms);

/* The transport authenticated a connection to `uid` (a dial after one
 * ended included): fed to the coordinator object, which asks a member
 * that has not answered its VIEW_REQUEST again (ms_coord_member_connected). */
void ms_region_peer_connected(struct ms_region *r, uint64_t uid,
                              uint64_t now_ms);

/* Member `uid` reached `status` (enum ms_mb_status): fed to the
 * coordinator object; what waits for a shard it owns is sent. */
void ms_region_member(struct ms_region *r, uint64_t uid, int status,
                      uint64_t now_ms);

/* Runs what is due: the coordinator's tick, waiting messages past their
 * deadline, allocations asked again, moves whose end was lost (resync). */
void ms_region_tick(struct ms_region *r, uint64_t now_ms);

/* Reports the shards the dispatcher finished stopping (STOPPED to the
 * coordinator); call after each dispatch round. */
void ms_region_after_dispatch(struct ms_region *r, uint64_t now_ms);

/* --- leases (DESIGN.md "Leases and persistence") --------------------------
 *
 * With a persistent type (ms_type_config.persistence) the region owns
 * one lease machine (lease.h; owner: the node's name). Every shard of
 * such a type that this node owns in its plan holds a lease row: a plan
 * that makes this node the owner acquires it, one that moves the shard
 * away releases it. Messages for an owned persistent shard whose lease
 * is not held (being acquired, lost, expired, fenced) wait in the
 * region's buffer of the shard, in order, under the region's bounds
 * (MS_REGION_BUFFER own, MS_REGION_HOLD of other nodes) and deadlines;
 * the machine's own barrier is not used. Held: they are delivered in
 * FIFO order before any new one. The lease window ran out: what waits is
 * rejected with MS_ELEASE (asks fail, asks of other nodes get a
 * REPLY_ERROR, tells are counted in rejected and logged) and new
 * messages get MS_ELEASE until the lease is held again; a rejected
 * message is never replayed. A lost, expired or fenced lease stops the
 * shard's entities (ms_dispatch_shard_stop, resumed once stopped). At a
 * handoff the old owner releases the lease after the dispatcher stopped
 * the shard and only then reports STOPPED (at most
 * MS_REGION_RELEASE_WAIT_MS, or half of handoff_timeout, later: then the
 * lease runs out). A
 * non-persistent type pays one branch on the message path. */

/* The database answered a MS_REGION_LEASE action (a->req, type and shard
 * as in the action). 0 or MS_EINVAL (no persistent type, bad answer). */
int ms_region_lease_answer(struct ms_region *r,
                           const struct ms_lease_answer *a, uint64_t now_ms);

/* Whether every live member (Up or Leaving) is reachable from here: one
 * that is not makes the leases fenced (entities stopped, nothing renewed,
 * acquired or released: they run out in the database); all reachable
 * again (back, or downed and removed) acquires them again. Called on
 * every tick by the caller; only changes act. */
void ms_region_members_reachable(struct ms_region *r, int all_reachable,
                                 uint64_t now_ms);

/* The lease machine (borrowed; NULL without a persistent type), for its
 * figures. */
const struct ms_lease *ms_region_lease(const struct ms_region *r);

/* Messages waiting for a lease (owned persistent shards not open). */
uint32_t ms_region_lease_waiting(const struct ms_region *r);

/* Messages rejected with MS_ELEASE by the region (waiting or new). */
uint64_t ms_region_lease_rejected(const struct ms_region *r);

/* Calls fn for each shard whose lease is usable now, at most
 * MS_REGION_LEASES_LISTED times (or until fn returns non-zero); returns
 * how many shards hold a usable lease in all. */
uint32_t ms_region_lease_each(const struct ms_region *r, uint64_t now_ms,
                              int (*fn)(void *data, int type, uint32_t shard,
                                        uint64_t epoch),
                              void *data);

/* --- actions ------------------------------------------------------------- */

/* Takes the oldest action. Returns 1 and fills *out (then the caller's:
 * ms_region_action_free), or 0 when there is none. */
int ms_region_next_action(struct ms_region *r, struct ms_region_action *out);

/* The SEND `a` (taken, not freed yet) could not be sent (no_connection:
 * there is no connection to its target): an own request waits again (in
 * order, ahead of what came after it); a fence that found no connection
 * is reported to the coordinator as passed (nothing this node sent is on
 * its way to the old owner). Others are dropped. */
void ms_region_send_failed(struct ms_region *r,
                           const struct ms_region_action *a,
                           int no_connection, uint64_t now_ms);

void ms_region_action_free(struct ms_region_action *a);

/* 1 when the region has queued actions (a send of this node queues them
 * only when it goes to another node): the caller may skip the drain. The
 * coordinator's own queue is drained by ms_region_next_action too, so
 * after a call to the coordinator object, drain without asking. */
int ms_region_pending(const struct ms_region *r);

/* --- queries ------------------------------------------------------------- */

/* The coordinator object (borrowed), for membership facts that make no
 * actions (reachability, leave_done). Drain the region after any call
 * that may queue coordinator actions. */
struct ms_coord *ms_region_coord(struct ms_region *r);

/* The owner of `type`'s shard in this node's plan (0: unassigned) and its
 * generation in *gen (may be NULL). */
uint64_t ms_region_owner(const struct ms_region *r, int type,
                         uint32_t shard, uint64_t *gen);

/* The plan of `type` (borrowed). */
const struct ms_plan *ms_region_plan(const struct ms_region *r, int type);

/* Shards of all types this node owns. */
uint32_t ms_region_owned(const struct ms_region *r);

/* The epoch of the lease this node holds now for `type`'s shard, usable
 * for a write (held or being renewed, or a handoff's entities finishing
 * what they accepted before the release; not expired on the local
 * clock); 0 when it holds none (the type is not persistent, the lease is
 * being acquired, was lost, expired or fenced, or the shard is not ours
 * in this node's plan). A write carries this epoch; the database refuses
 * it if it is not the current one (stale_owner). */
uint64_t ms_region_lease_epoch(const struct ms_region *r, int type,
                               uint32_t shard);
/* The same at now_ms (ms_region_lease_epoch uses the time of the last
 * call into the region, at most a tick old). */
uint64_t ms_region_lease_epoch_at(const struct ms_region *r, int type,
                                  uint32_t shard, uint64_t now_ms);

/* --- remember-entities (runtime/node/node_remember.c) --- */

/* 1 when (type, shard) is this node's and serves messages now: the plan
 * makes this node its owner, it is not being stopped (a handoff, a lease
 * stop), and for a leased type its lease is held. The node starts the
 * shard's remembered entities when it turns 1 and stops them when it
 * turns 0. */
int ms_region_shard_serving(const struct ms_region *r, int type,
                            uint32_t shard);

/* 1 while this node stops (type, shard) for a handoff (the coordinator's
 * STOP came, STOPPED not sent yet). */
int ms_region_shard_stopping(const struct ms_region *r, int type,
                             uint32_t shard);

/* Asks the coordinator to allocate shards of `type` that have no owner
 * in this node's plan (each at most every MS_REGION_ALLOC_RETRY_MS): a
 * remembered type's shards start, and their entities with them, without
 * waiting for a message. One call asks for at most
 * MS_REGION_ALLOC_UNOWNED_WORK / (owned shards + 1) of them, within
 * [MS_REGION_ALLOC_UNOWNED_MIN, MS_REGION_ALLOC_UNOWNED_MAX]: the
 * coordinator's strategy costs a view of the type's allocations per
 * shard, so a type of 65,536 shards asked at once would hold its loop
 * for minutes. */
#define MS_REGION_ALLOC_UNOWNED_WORK 16384
#define MS_REGION_ALLOC_UNOWNED_MIN 1
#define MS_REGION_ALLOC_UNOWNED_MAX 256
void ms_region_allocate_unowned(struct ms_region *r, int type,
                                uint64_t now_ms);

/* Optional: `hold` answers 1 while the stop of (type, shard) at a handoff
 * must not go on yet (records of the shard still being written to the
 * remember store, which the new owner reads): the region then waits
 * before it releases the shard's lease and reports STOPPED, asking again
 * every tick, at most MS_REGION_RELEASE_WAIT_MS (and half of
 * handoff_timeout). It is a query: it must not call the region. */
typedef int (*ms_region_hold_cb)(void *data, int type, uint32_t shard);
void ms_region_set_stop_hold(struct ms_region *r, ms_region_hold_cb hold,
                             void *data);

/* Messages waiting for `type`'s shard (own and held). */
uint32_t ms_region_waiting(const struct ms_region *r, int type,
                           uint32_t shard);

/* Messages waiting in the region, all shards (own and held). */
uint32_t ms_region_buffered(const struct ms_region *r);

/* 1 while `type` was refused by the cluster (REGISTER_REFUSED). */
int ms_region_refused(const struct ms_region *r, int type);

const struct ms_region_stats *ms_region_stats(const struct ms_region *r);

/* Shards moving here (buffering) and shards this node is stopping. */
uint32_t ms_region_moving(const struct ms_region *r);
uint32_t ms_region_stopping(const struct ms_region *r);

/* One shard that is moving or stopping, for inspection. */
struct ms_region_move_info {
    int type;
    uint32_t shard;
    int stopping;       /* 1: this node stops it; 0: buffering */
    uint64_t from;      /* the old owner */
    uint32_t buffered;
    uint64_t for_ms;
};

/* Calls fn for each moving or stopping shard until it returns non-zero. */
void ms_region_each_move(const struct ms_region *r, uint64_t now_ms,
                         int (*fn)(void *data,
                                   const struct ms_region_move_info *m),
                         void *data);

#endif
