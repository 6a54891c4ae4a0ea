/*
 * router.h -- the path of a message across the cluster (DESIGN.md §2):
 * the libuv binding of the region (runtime/core/region.h), which holds
 * the protocol.
 *
 * shard = fnv1a64(id) % shard_count; the owner comes from this node's copy
 * of the plan; a local owner gets the message in its shard FIFO, a remote
 * one a frame {kind, type, id, shard, generation, corr} + the JSON bytes.
 * Without a usable owner (no plan yet, shard unassigned, owner
 * unreachable) a message waits in a bounded per-shard buffer (1,024) for
 * its deadline, then fails explicitly: the router never guesses (G4).
 * The owner checks the generation and answers NOT_OWNER to a stale
 * sender, which refreshes and retries within the ask's deadline.
 */
#ifndef MS_IO_ROUTER_H
#define MS_IO_ROUTER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../core/config.h"
#include "../core/dispatch.h"
#include "../core/frame.h"
#include "cluster.h"

/* The limits (1,024 waiting messages per shard, 16,384 held requests,
 * 10 s for a tell, 5 NOT_OWNER retries) are the region's: MS_REGION_* in
 * runtime/core/region.h. */

struct ms_router;

/* Creates the router of a node. All arguments are borrowed for its life. */
int ms_router_new(struct ms_router **out, uv_loop_t *loop,
                  struct ms_dispatch *d, struct ms_cluster *c,
                  const struct ms_config *cfg);

/* See ms_node_tell: routes a tell to a destination resolved by the
 * caller (ms_dispatch_resolve; payload size checked there). */
int ms_router_tell(struct ms_router *r, const struct ms_dest *dst,
                   const char *json, size_t len);

/* See ms_node_ask: routes an ask for waiter w; returns its id or a
 * negative code (waiter not told). */
int64_t ms_router_ask(struct ms_router *r, const struct ms_dest *dst,
                      const char *json, size_t len, uint64_t timeout_ms,
                      const struct ms_waiter *w);

/* Routes an activation request (eager creation): the waiter gets
 * {"created":true|false}. */
int64_t ms_router_activate(struct ms_router *r, const struct ms_dest *dst,
                           uint64_t timeout_ms, const struct ms_waiter *w);

/* Routes an ordered stop request to the entity's owner (a no-op when its
 * shard has no owner: nothing is active). */
int ms_router_stop(struct ms_router *r, const struct ms_dest *dst);

/* Frames for the router: TELL, ASK, REPLY, REPLY_ERROR, NOT_OWNER,
 * CONTROL. */
void ms_router_on_frame(struct ms_router *r, uint64_t uid,
                        const struct ms_frame *f);

/* The coordinator changed (0: none). */
void ms_router_on_coordinator(struct ms_router *r, uint64_t uid);

/* A member reached `status` (enum ms_mb_status). */
void ms_router_on_member(struct ms_router *r, uint64_t uid, int status);
/* A connection to `uid` was authenticated (ms_region_peer_connected). */
void ms_router_on_connected(struct ms_router *r, uint64_t uid);

/* Chooses the owner of an unowned shard: the type's allocation strategy
 * over `view_json`; 0 with the member's name, or a negative code with a
 * reason. */
typedef int (*ms_router_allocate_fn)(void *data, const char *type_name,
                                     uint32_t shard, const char *view_json,
                                     char *name, size_t namelen, char *err,
                                     size_t errlen);

/* Chooses the owners of shards[0..n) of `type_name`, stopped at one old
 * owner, in order over one `view_json` (ms_coord_allocate_many_cb):
 * names[i * namelen] is shard i's member, "" with its reason in
 * err[i * errlen] when it has none (`err`: n strings of errlen bytes, ""
 * on entry). Returns 0, or a negative code with the reason in err[0]
 * (then each shard is placed with the allocate function). */
typedef int (*ms_router_allocate_many_fn)(void *data, const char *type_name,
                                          const uint32_t *shards, size_t n,
                                          const char *view_json, char *names,
                                          size_t namelen, char *err,
                                          size_t errlen);

/* Proposes the shards of `type_name` to move now: at most `max` in out[];
 * returns their number or a negative code with a reason in err. */
typedef int (*ms_router_rebalance_fn)(void *data, const char *type_name,
                                      const char *view_json, uint32_t *out,
                                      size_t max, char *err, size_t errlen);

/* 1 when the member described by `member_json` (DESIGN §3) may own shards
 * of `type_name` at all (the strategy's `eligible`), else 0. */
typedef int (*ms_router_eligible_fn)(void *data, const char *type_name,
                                     const char *member_json);

/* Sets the allocator and rebalancer the coordinator uses on this node
 * (rfn NULL: no voluntary moves). */
void ms_router_set_allocator(struct ms_router *r, ms_router_allocate_fn fn,
                             ms_router_rebalance_fn rfn,
                             ms_router_eligible_fn efn, void *data);

/* Sets the batch allocator (optional; its `data` is the allocator's). */
void ms_router_set_allocate_many(struct ms_router *r,
                                 ms_router_allocate_many_fn mfn);

/* Runs a rebalance round soon, if this node coordinates (hot reload). */
void ms_router_reconcile(struct ms_router *r);

/* Starts moving one shard, if this node coordinates: 0, MS_EINVAL (not
 * the ready coordinator, or no such owned shard), MS_EBUSY. */
int ms_router_move(struct ms_router *r, int type, uint32_t shard);

/* See ms_region_allocate_unowned. */
void ms_router_allocate_unowned(struct ms_router *r, int type);

/* Sets what the router calls after it may have given the dispatcher
 * work outside of a caller's call (plan applied, deadlines). */
void ms_router_set_kick(struct ms_router *r, void (*kick)(void *),
                        void *data);

/* The owner of `type`'s shard, 0 when unassigned. */
uint64_t ms_router_owner(struct ms_router *r, int type, uint32_t shard);

/* The plan of `type` as JSON {"type":..,"generation":..,"shards":[..]} with
 * owner names (defensive copy for the caller). */
size_t ms_router_allocations_json(struct ms_router *r, int type, char *buf,
                                  size_t len);

/* Reports the shards the dispatcher finished stopping (handoff) to the
 * coordinator; call after each dispatch round. */
void ms_router_after_dispatch(struct ms_router *r);

/* The router's figures as JSON members (no braces): routing counters,
 * "owned_shards", "handoffs_in_progress", handoff counters, "moves" (the
 * coordinator's) and "handoffs":[..] per moving shard (at most 64 listed),
 * "leases" and "entity_types":[..] (each configured type's name,
 * shard_count and whether its shards hold leases).
 * Writes what fits in len bytes (buf may be NULL with len 0) and returns
 * the length of the whole text. */
size_t ms_router_stats_json(struct ms_router *r, char *buf, size_t len);

/* Shards of all types this node owns. */
uint32_t ms_router_owned(struct ms_router *r);

/* Messages waiting in the router (for an owner, or a moving shard). */
uint64_t ms_router_waiting(struct ms_router *r);

/* The region the router binds (borrowed; lives as long as the router). */
struct ms_region;
struct ms_region *ms_router_region(struct ms_router *r);


/* Runs the lease statements of persistent types on `pg` (borrowed: the
 * node closes the router before the pool; NULL: none, every statement
 * fails and the leases are tried again). 0, MS_EINVAL or MS_ENOMEM. */
struct ms_pg;
int ms_router_set_pool(struct ms_router *r, struct ms_pg *pg);

/* Fails every waiting message (MS_ECANCELED) and frees the router from its
 * timer's close callback. */
void ms_router_close(struct ms_router *r);

#endif
