/*
 * dispatch.h -- the per-shard FIFO dispatcher (sans-IO).
 *
 * It owns the shards' FIFO queues, the entity table, each entity's mailbox,
 * pending asks and entity timers. It never calls Lua, libuv or the clock:
 * the caller passes `now_ms` and drives it. The bridge pulls deliveries with
 * ms_dispatch_next(), runs the handler, and reports back with
 * ms_dispatch_done() (and reply/fail/suspend on the way).
 *
 * Order: messages of one shard are taken in the order they were accepted;
 * an entity handles one message at a time; a message for an entity that is
 * busy (its handler suspended in an ask) waits in that entity's mailbox, so
 * one entity's wait never blocks the rest of its shard, and one sender's
 * messages to one entity are handled in send order.
 */
#ifndef MS_CORE_DISPATCH_H
#define MS_CORE_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"

/* ACTIVATE: an ask that only activates the entity (runs init if it is not
 * active) and is answered {"created":true|false} by the dispatcher. */
enum { MS_KIND_TELL = 1, MS_KIND_ASK = 2, MS_KIND_STOP = 3,
       MS_KIND_ACTIVATE = 4 };

struct ms_dispatch_type {
    const char *name;         /* borrowed for the dispatcher's life */
    uint32_t shard_count;
    uint64_t idle_timeout_ms; /* 0: never */
    int on_error_stop;        /* 1: passivate the entity after an error */
    uint32_t max_pending;     /* accepted, unhandled messages per shard,
                                 in its FIFO and its entities' mailboxes */
    int custom_partition;     /* 1: shards come from the partitioner set
                                 with ms_dispatch_set_partitioner */
};

/* A type's own partitioner: sets *shard (< shard_count) for the id, or
 * returns a negative code (the message is refused with it). */
typedef int (*ms_partition_fn)(void *data, int type, const char *id,
                               size_t idlen, uint32_t shard_count,
                               uint32_t *shard);

struct ms_dispatch;

/* Where the end of an ask goes: a C callback, or a suspended entity. */
struct ms_waiter {
    ms_ask_cb cb;    /* non-NULL: call it */
    void *data;
    uint32_t h;      /* cb == NULL: resume entity handle h */
};

/* One message handed to the bridge; fields are valid until done(). */
struct ms_delivery {
    uint32_t h;          /* entity handle, >= 1, reused after free */
    uint32_t type;
    uint32_t shard;
    uint32_t gen;        /* the activation's generation: h and gen name
                            one activation (ms_dispatch_live) */
    int kind;            /* MS_KIND_* */
    int init;            /* 1: activate (call init) before this message */
    const char *id;
    size_t idlen;
    const char *payload; /* NUL-terminated JSON; NULL for STOP */
    size_t len;
};

/* A finished ask whose waiter is an entity: resume it with this. */
struct ms_resume {
    uint64_t corr;       /* the ask that ended */
    uint32_t h;
    int err;             /* 0: payload is the reply */
    const char *payload; /* reply JSON, or error JSON object */
    size_t len;
};

/* Why an entity was passivated (DESIGN.md "Remember entities"). */
enum ms_stop_reason {
    MS_STOP_EXPLICIT = 1, /* ctx:stop(), a stop request, ref:stop() */
    MS_STOP_IDLE,         /* idle passivation */
    MS_STOP_FAILURE,      /* its handler failed (on_error = "stop") */
    MS_STOP_NODE,         /* the node stops */
    MS_STOP_HANDOFF,      /* its shard stops here (a move, a lease lost) */
    MS_STOP_LIMIT         /* the node's active-entity limit: an idle
                             passivation that comes earlier */
};

/* Told, for the types set with ms_dispatch_set_observer, that entity
 * `id` of (type, shard) activated (`started` 1: its init, and for a
 * persistent type its recovery, succeeded; reported when that message
 * is done) or passivated (`started` 0, `reason` enum ms_stop_reason).
 * It runs inside ms_dispatch_done: it must not call the dispatcher. */
typedef void (*ms_dispatch_observer)(void *data, int type, uint32_t shard,
                                     const char *id, size_t idlen,
                                     int started, int reason);

/* Creates a dispatcher for `ntypes` types (copied; names borrowed).
 * Returns NULL when out of memory, and for more than
 * MS_DISPATCH_MAX_TYPES types or a shard_count outside 1..65536 (an
 * entity's record keeps its type and shard in 16 bits). */
struct ms_dispatch *ms_dispatch_new(const struct ms_dispatch_type *types,
                                    int ntypes, size_t max_message);
/* Frees everything. Pending asks are ended with MS_ECANCELED first. */
void ms_dispatch_free(struct ms_dispatch *d);

int ms_dispatch_type_index(struct ms_dispatch *d, const char *name,
                           size_t len);
const char *ms_dispatch_type_name(struct ms_dispatch *d, int type);
/* Marks a type unavailable (its module failed to load): sends to it fail
 * with MS_EUNAVAIL. */
void ms_dispatch_set_unavailable(struct ms_dispatch *d, int type, int yes);

/* 1 when the type was marked unavailable. */
int ms_dispatch_unavailable(struct ms_dispatch *d, int type);

/*
 * A message's destination, resolved once at the edge of the node with
 * ms_dispatch_resolve() and passed down (router, region, dispatcher): the
 * checked type, the id (borrowed from the caller for the call), its
 * FNV-1a hash and its shard. The send entry points below trust it and do
 * not check or compute it again.
 */
struct ms_dest {
    int type;
    uint32_t shard;
    uint64_t hash;
    const char *id;
    size_t idlen;
};

/*
 * Resolves `id` of `type`: checks the type index (MS_ENOTYPE) and the id's
 * length (1..MS_MAX_ID, else MS_E2BIG), computes the hash and the shard
 * (FNV-1a, or the type's partitioner: MS_EPARTITION when it fails or is
 * not set). Returns 0 and fills *out (its id points at `id`), or the code.
 */
int ms_dispatch_resolve(struct ms_dispatch *d, int type, const char *id,
                        size_t idlen, struct ms_dest *out);

/* The one check of a send at a node's edge (HTTP, C, Lua): MS_EUNAVAIL
 * for a type whose module failed to load (before its partitioner runs),
 * then ms_dispatch_resolve, then MS_E2BIG for a payload of `len` bytes
 * above the dispatcher's max_message. */
int ms_dispatch_resolve_send(struct ms_dispatch *d, int type, const char *id,
                             size_t idlen, size_t len, struct ms_dest *out);

/* Accepts a tell for a resolved destination. The payload is copied.
 * Returns 0 or MS_E2BIG (payload above max_message), MS_EOVERFLOW,
 * MS_EUNAVAIL, MS_ECANCELED, MS_ENOMEM. */
int ms_dispatch_tell(struct ms_dispatch *d, const struct ms_dest *dst,
                     const char *json, size_t len);

/* Accepts an activation request: an ask (MS_KIND_ACTIVATE) answered
 * {"created":true} when it activated the entity, {"created":false} when the
 * entity was already active. */
int64_t ms_dispatch_activate(struct ms_dispatch *d, const struct ms_dest *dst,
                             uint64_t timeout_ms, uint64_t now_ms,
                             const struct ms_waiter *w);

/* Accepts an ask; the waiter is told exactly once, never from inside this
 * call. Returns the ask's id (> 0) or a negative code (waiter not told). An
 * entity asking itself gets MS_ESELF. */
int64_t ms_dispatch_ask(struct ms_dispatch *d, const struct ms_dest *dst,
                        const char *json, size_t len, uint64_t timeout_ms,
                        uint64_t now_ms, const struct ms_waiter *w);

/* Opens an ask whose request travels elsewhere (to another node): the
 * waiter is told exactly once, by ms_dispatch_ask_complete() or by the
 * deadline (MS_ETIMEDOUT) or shutdown (MS_ECANCELED). Returns its id (> 0)
 * or a negative code. */
int64_t ms_dispatch_ask_open(struct ms_dispatch *d, uint64_t timeout_ms,
                             uint64_t now_ms, const struct ms_waiter *w);

/* Delivers the request of an ask opened with ms_dispatch_ask_open() to a
 * local entity after all (its shard turned out to be ours). Returns 1
 * when accepted, 0 when the ask already ended, or a negative code (the
 * ask then ends with that error). */
int ms_dispatch_ask_enqueue(struct ms_dispatch *d, int64_t corr, int kind,
                            const struct ms_dest *dst, const char *json,
                            size_t len);

/* 1 while ask `corr` has not ended. */
int ms_dispatch_ask_pending(struct ms_dispatch *d, int64_t corr);

/* Records the node a pending ask was sent to (0: none, it waits here):
 * only that node's answer may end it (see ms_dispatch_ask_sent_to). */
void ms_dispatch_ask_set_peer(struct ms_dispatch *d, int64_t corr,
                              uint64_t peer);

/* ms_dispatch_ask_complete for an answer from node `peer`: ends the ask
 * only when it is pending and was last sent there; returns 1, else 0 (one
 * lookup for the check and the end). */
int ms_dispatch_ask_answer(struct ms_dispatch *d, int64_t corr,
                           uint64_t peer, int err, const char *payload,
                           size_t len);

/* 1 when ask `corr` is pending and was last sent to node `peer` (!= 0). */
int ms_dispatch_ask_sent_to(struct ms_dispatch *d, int64_t corr,
                            uint64_t peer);

/* Ends ask `corr` with `err` (0: payload is the reply JSON; else the
 * error object JSON). Returns 1, or 0 when it already ended. */
int ms_dispatch_ask_complete(struct ms_dispatch *d, int64_t corr, int err,
                             const char *payload, size_t len);

/* Accepts an ordered stop request (passivate after earlier messages);
 * counted and bounded like a tell. */
int ms_dispatch_stop(struct ms_dispatch *d, const struct ms_dest *dst);

/* Takes the next message to handle. Returns 1 and fills `out`, or 0 when
 * nothing is ready. */
int ms_dispatch_next(struct ms_dispatch *d, struct ms_delivery *out);

/* The handler of entity h finished its current message (returned, raised
 * or stopped). An ask it did not answer ends with MS_ENOREPLY. */
void ms_dispatch_done(struct ms_dispatch *d, uint32_t h, uint64_t now_ms);

/* Reply to the ask being handled by h. A reply at or past the ask's
 * deadline ends it with MS_ETIMEDOUT instead. Returns 0, 1 when the
 * current message is not an ask (the reply is dropped), MS_EINVAL when h
 * already replied, or MS_E2BIG for a reply above the message limit. */
int ms_dispatch_reply(struct ms_dispatch *d, uint32_t h, const char *json,
                      size_t len, uint64_t now_ms);

/* Ends the ask being handled by h with error `err` and `message` (a
 * persistent entity's failed commit: the asker gets {code, message}).
 * Returns 0, 1 when the current message is not an ask, or MS_EINVAL when
 * h already replied. */
int ms_dispatch_reply_error(struct ms_dispatch *d, uint32_t h, int err,
                            const char *message);

/* The handler of h raised `message`. Counts it, ends a pending ask with
 * MS_EHANDLER, and applies the type's failure policy. `init_failed`: the
 * entity did not activate. */
void ms_dispatch_fail(struct ms_dispatch *d, uint32_t h, const char *message,
                      int init_failed);

/* ctx:stop(): passivate h after its current message. */
void ms_dispatch_stop_self(struct ms_dispatch *d, uint32_t h);

#define MS_MAX_TIMERS 1024 /* pending ctx:after timers per entity */
#define MS_DISPATCH_MAX_TYPES 65535 /* entity types of one dispatcher */

/* ctx:after(): a tell to self after delay_ms. Returns a timer id > 0 or a
 * negative code (MS_EOVERFLOW past MS_MAX_TIMERS). An entity with pending
 * timers is not passivated for idleness; an explicit stop cancels them.
 * MS_EINVAL unless h names an active entity. */
int64_t ms_dispatch_after(struct ms_dispatch *d, uint32_t h,
                          uint64_t delay_ms, const char *json, size_t len,
                          uint64_t now_ms);
/* ctx:cancel(): returns 1 if the timer was pending, 0 otherwise. */
int ms_dispatch_cancel(struct ms_dispatch *d, uint32_t h, int64_t timer);

/*
 * The node's active-entity limit, across all types (0: none, the
 * default). An activation that makes the node hold more than `max`
 * entities passivates the least recently used idle ones until it is back
 * at `max`: idle as for idle passivation (not handling a message, empty
 * mailbox, not suspended, no pending ctx:after timer, no stop under way),
 * least recently used as the active lists tell (the oldest head among the
 * types' lists; an entity that handled a message since it was listed goes
 * back to the tail once instead: a second chance). Their STOP has reason
 * MS_STOP_LIMIT and is counted in limit_passivations when handled. When
 * every entity is busy the node stays above the limit for the moment and
 * comes back to it as entities finish (ms_dispatch_done, _expire); no
 * message is refused or lost for it.
 */
void ms_dispatch_set_max_active(struct ms_dispatch *d, uint64_t max);

/* The limit set with ms_dispatch_set_max_active (0: none). */
uint64_t ms_dispatch_max_active(struct ms_dispatch *d);

/* Fires due timers, ends asks past their deadline and queues idle
 * entities for passivation. */
void ms_dispatch_expire(struct ms_dispatch *d, uint64_t now_ms);

/* Milliseconds until the next deadline (timer, ask or idle timeout) from
 * now_ms, or -1 when there is none. */
int64_t ms_dispatch_next_deadline(struct ms_dispatch *d, uint64_t now_ms);

/* Takes the next finished ask of an entity waiter. Returns 1 and fills
 * `out` (valid until the next call), or 0. */
int ms_dispatch_next_resume(struct ms_dispatch *d, struct ms_resume *out);

/* 1 when deliveries or resumes are ready to run now (or handles are
 * parked: ms_dispatch_set_quiet_stop). */
int ms_dispatch_has_work(struct ms_dispatch *d);

/* Begins shutdown: refuses new sends (MS_ECANCELED), ends every pending
 * ask with MS_ECANCELED, queues a stop after the accepted messages of
 * every active entity (after the current message of a busy one), and from
 * then on drops, counting them, messages that would activate an entity.
 * Returns the number of entities still active. */
uint64_t ms_dispatch_shutdown(struct ms_dispatch *d);

/*
 * Handoff: stops shard `shard` of `type`. A marker goes to the end of the
 * shard's FIFO; once it passes, every entity of the shard handles what it
 * had accepted and is then passivated (its `stopped` runs). When the shard
 * has no entity left, it is reported by ms_dispatch_next_stopped(). The
 * caller must not enqueue for the shard meanwhile: what reaches its FIFO
 * after the marker (a ctx:after timer firing) is failed and counted
 * (handoff_drops; an ask ends with MS_ENOOWNER). Returns 0 (also when a stop is under way), MS_EINVAL
 * or MS_ENOMEM.
 */
int ms_dispatch_shard_stop(struct ms_dispatch *d, int type, uint32_t shard);

/*
 * Lets a handoff's stop of `type` (ms_dispatch_shard_stop) passivate the
 * idle entities of the shard at once, without a delivery each: set by the
 * host while the type's behavior runs nothing at a stop (no `stopped`, no
 * pending `migrate`, not persistent). Their records go at once (counted
 * as passivations, timers cancelled); their handles are parked until the
 * host has forgotten their states: ms_dispatch_parked lists them, and
 * ms_dispatch_release_parked frees them for new entities.
 * ms_dispatch_has_work is 1 while any is parked. Not for observed types.
 */
void ms_dispatch_set_quiet_stop(struct ms_dispatch *d, int type, int on);
uint32_t ms_dispatch_parked(const struct ms_dispatch *d, const uint32_t **h);
void ms_dispatch_release_parked(struct ms_dispatch *d);

/* Calls a stop off (the move was rolled back): the shard works as before;
 * entities already passivated come back on their next message. */
void ms_dispatch_shard_resume(struct ms_dispatch *d, int type,
                              uint32_t shard);

/* 1 while a stop of the shard is under way. */
int ms_dispatch_shard_stopping(struct ms_dispatch *d, int type,
                               uint32_t shard);

/* Takes the next shard whose stop finished: 1 and fills *type, *shard, or
 * 0 when there is none. */
int ms_dispatch_next_stopped(struct ms_dispatch *d, int *type,
                             uint32_t *shard);

/* Reports the activations and passivations of `type` to `fn` (one
 * observer for all the types set; fn NULL: none of them). */
void ms_dispatch_set_observer(struct ms_dispatch *d, int type,
                              ms_dispatch_observer fn, void *data);

/* Refuses new messages for (type, shard) with `err` (a negative code;
 * 0 accepts again): tells, asks and activations, from here or another
 * node, fail with it as if the shard's queue were full; what was
 * accepted before is handled. Stop requests and ctx:after timers still
 * go in. */
void ms_dispatch_shard_refuse(struct ms_dispatch *d, int type,
                              uint32_t shard, int err);

/* Sets the partitioner of the types with custom_partition (the others
 * use FNV-1a of the id % shard_count). Until it is set, their messages
 * are refused (MS_EPARTITION). */
void ms_dispatch_set_partitioner(struct ms_dispatch *d, ms_partition_fn fn,
                                 void *data);

/* The shard of an id of `type`, as the dispatcher places it (see
 * ms_dispatch_resolve). Returns 0 and sets *shard, or a negative code. */
int ms_dispatch_shard_of(struct ms_dispatch *d, int type, const char *id,
                         size_t idlen, uint32_t *shard);

/* 1 when handle h names the activation of generation gen (from its
 * delivery) and it is still active, else 0: a ctx kept past its
 * entity's passivation names an activation that is gone. */
int ms_dispatch_live(struct ms_dispatch *d, uint32_t h, uint32_t gen);

/* Identity of handle h, for logs; returns 0 when h is not live. */
int ms_dispatch_entity(struct ms_dispatch *d, uint32_t h, int *type,
                       const char **id, size_t *idlen, uint32_t *shard);

void ms_dispatch_stats(struct ms_dispatch *d, struct ms_stats *out);
struct ms_stats *ms_dispatch_counters(struct ms_dispatch *d);
uint64_t ms_dispatch_pending(struct ms_dispatch *d);

/* Writes {"code":"...","message":"..."} (JSON-escaped) into buf; returns
 * the length (truncated to buflen - 1). */
size_t ms_error_json(char *buf, size_t buflen, int err, const char *message);

#endif
