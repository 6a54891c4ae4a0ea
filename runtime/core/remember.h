/*
 * remember.h -- remember entities (DESIGN.md "Remember entities", issue
 * 12 points 2, 3, 5, 6) as a sans-IO state machine: the write-behind
 * queue of start/stop records, store failures (fail_open/fail_closed)
 * and the eager start of a shard's remembered ids.
 *
 * The node drives it (runtime/node/node_remember.c: the dispatcher's
 * observer, the region's serving shards and hold, the stores); tested by
 * spec/c/test_remember.c.
 *
 * Like lease.h, every entry point takes `now_ms` (the caller's monotonic
 * clock); nothing reads a clock, a file or a socket. Effects come out as
 * struct ms_remember_action, drained with ms_remember_next_action() after
 * EACH call, in order.
 *
 * The set. For each shard that started here (ms_remember_shard_started,
 * given the ids the caller read from the store), the machine keeps the
 * set of remembered ids as it will be once every queued record is
 * written. A start of an id already in the set and a stop of an id not in
 * it record nothing; the counts per shard and type are the sizes of these
 * sets. Records are accepted only for shards started here (else
 * MS_ENOOWNER).
 *
 * The write-behind queue. One per node, at most queue_max records
 * (queued plus in flight). Each shard writes one batch at a time (its
 * records in order, at most batch_max): the first record of an idle shard
 * goes out at once as a WRITE action; the records that come while it is
 * in flight form the next batch (group commit, no timer). Coalescing: a
 * record of an id that is still queued (not in flight) replaces it (the
 * last one wins), and cancels out when it brings the id back to what the
 * store had before the queued one (start then stop of a new id: nothing
 * is written). Full queue: the record is DROPPED (counted in `drops`),
 * delivery is never refused or blocked, and the shard is marked for a
 * RESYNC: its queued records are discarded (they are subsumed) and, once
 * no write of it is in flight, one WRITE with `replace` set carries the
 * shard's whole set (the store replaces the shard's ids with it). A
 * resync batch is bounded by the set, not by queue_max.
 *
 * Failures. The caller answers every WRITE (ms_remember_on_written).
 * A failed batch goes back at the head of its shard's queue (a newer
 * queued record of the same id supersedes the failed one) and is retried
 * after a backoff (MS_REMEMBER_BACKOFF_MIN_MS doubling to _MAX_MS), for
 * ever: `errors` and `retries` count it. A type with fail_open only
 * counts (the node logs and keeps routing); with fail_closed the shard is
 * also marked FAILED (ms_remember_shard_failed: the node answers
 * MS_EREMEMBER to its messages) until ms_remember_clear (the operator)
 * or the shard moves away or starts again; a later successful write does
 * not clear it by itself.
 *
 * Eager start. ms_remember_shard_started queues one ACTIVATE per listed
 * id. ms_remember_tick emits at most `activate_per_tick` ACTIVATE actions
 * per call, one shard at a time in turn (round robin: a large shard does
 * not starve a small one), each shard's ids in the order given, and
 * skips an id that left the set meanwhile (a stop recorded after the
 * listing: counted in `eager_skipped`); the
 * caller's tick cadence times the budget sets the rate. A shard that
 * moves away (ms_remember_shard_stopped) drops the activations it still
 * had (counted in `eager_dropped`). An ACTIVATE of an id that a message
 * activated meanwhile is a no-op for the caller; the caller reports
 * activations (by a message or by ACTIVATE) with ms_remember_started,
 * which records only ids not yet in the set.
 *
 * Stops. ms_remember_stopped says why an entity stopped: an explicit
 * stop (ctx:stop, a stop request, ref:stop) removes the id; an idle
 * passivation removes it unless the type has keep_on_idle; a handler
 * failure, a node stop (a restart is a stop then a start) and a handoff
 * keep it.
 *
 * Moving away. Records already queued for a shard that moves away are
 * still written, and retried on failure (ms_remember_pending says how
 * many: the caller should let them drain before it releases the shard,
 * since the new owner reads the store), until ms_remember_shard_released
 * drops what is left. The set is forgotten, unless a resync is due: then
 * it is kept (and still counted in ms_remember_type_count) until the
 * resync is written or the shard is released.
 *
 * Threading: none; one owner calls everything.
 */
#ifndef MS_CORE_REMEMBER_H
#define MS_CORE_REMEMBER_H

#include <stddef.h>
#include <stdint.h>

/* defaults (a 0 in the config) and bounds */
#define MS_REMEMBER_QUEUE 10000           /* queue_max */
#define MS_REMEMBER_QUEUE_MAX 1000000
#define MS_REMEMBER_BATCH 256             /* batch_max */
#define MS_REMEMBER_BATCH_MAX 10000
#define MS_REMEMBER_ACTIVATE 64           /* activate_per_tick */
#define MS_REMEMBER_ACTIVATE_MAX 100000
#define MS_REMEMBER_BACKOFF_MIN_MS 100
#define MS_REMEMBER_BACKOFF_MAX_MS 5000
#define MS_REMEMBER_ID_MAX 512            /* = MS_MAX_ID */

enum ms_remember_op {
    MS_REMEMBER_START = 1,
    MS_REMEMBER_STOP = 2
};

/* Why an entity stopped (ms_remember_stopped). */
enum ms_remember_reason {
    MS_REMEMBER_EXPLICIT = 1, /* ctx:stop, a stop request, ref:stop */
    MS_REMEMBER_IDLE,         /* idle passivation */
    MS_REMEMBER_FAILURE,      /* its handler failed */
    MS_REMEMBER_NODE_STOP,    /* the node stops (or restarts) */
    MS_REMEMBER_HANDOFF       /* its shard moves away */
};

/* Per type. nshards 0: the type is not remembered (calls refused). */
struct ms_remember_type {
    uint32_t nshards;
    int fail_closed;          /* 0: fail_open */
    int keep_on_idle;
};

/* Settings of the machine; borrowed only during ms_remember_new. */
struct ms_remember_config {
    int ntypes;                            /* types 0..ntypes-1 */
    const struct ms_remember_type *types;  /* per type (copied) */
    uint32_t queue_max;                    /* 0: MS_REMEMBER_QUEUE */
    uint32_t batch_max;                    /* 0: MS_REMEMBER_BATCH */
    uint32_t activate_per_tick;            /* 0: MS_REMEMBER_ACTIVATE */
};

/* One record of a WRITE. */
struct ms_remember_record {
    const char *id;           /* NUL-terminated */
    size_t id_len;
    int op;                   /* enum ms_remember_op */
};

enum ms_remember_action_kind {
    /* Write `records` (nrecords, in order) to the store of (type, shard);
     * with `replace`, they are the shard's whole set (all starts): the
     * store drops every other id of the shard. Answer with
     * ms_remember_on_written(type, shard, req, ...). */
    MS_REMEMBER_WRITE = 1,
    /* Activate entity `id` of (type, shard) now (eager start). */
    MS_REMEMBER_ACTIVATE_ID
};

/* One action. WRITE: `records` (and their ids) belong to the machine,
 * valid until the write is answered, the shard is released
 * (ms_remember_shard_released) or ms_remember_free. ACTIVATE: `id` is
 * valid until the next ms_remember_next_action or ms_remember_free. */
struct ms_remember_action {
    int kind;                 /* enum ms_remember_action_kind */
    int type;
    uint32_t shard;
    uint64_t req;             /* WRITE */
    int replace;              /* WRITE: a resync */
    const struct ms_remember_record *records;
    uint32_t nrecords;
    const char *id;           /* ACTIVATE */
    size_t id_len;
};

struct ms_remember_stats {
    uint64_t queued;          /* records waiting now (not in flight) */
    uint64_t inflight;        /* records in WRITEs not answered */
    uint64_t recorded;        /* records accepted into the queue */
    uint64_t coalesced;       /* records that replaced a queued one */
    uint64_t cancelled;       /* records that cancelled a queued one */
    uint64_t drops;           /* records dropped: the queue was full */
    uint64_t abandoned;       /* records dropped by shard_released */
    uint64_t resyncs;         /* replace WRITEs sent */
    uint64_t writes;          /* WRITEs answered ok */
    uint64_t written;         /* records in them */
    uint64_t errors;          /* WRITEs answered failed */
    uint64_t retries;         /* WRITEs sent again after a failure */
    uint64_t stale_answers;   /* answers to no WRITE out */
    uint64_t failed_shards;   /* shards marked failed now */
    uint64_t eager_starts;    /* ACTIVATE actions emitted */
    uint64_t eager_pending;   /* activations still to emit */
    uint64_t eager_dropped;   /* dropped: their shard moved away */
    uint64_t eager_skipped;   /* not emitted: the id was stopped (left
                                 the set) after its shard was listed */
};

struct ms_remember;

/* Creates the machine. Returns 0 and stores it in *out; MS_EINVAL
 * (ntypes < 0, no types array, a limit above its maximum) or MS_ENOMEM. */
int ms_remember_new(struct ms_remember **out,
                    const struct ms_remember_config *c);

/* Frees the machine, its queue, sets and actions not taken. NULL: no-op. */
void ms_remember_free(struct ms_remember *r);

/* --- events: 0 or a negative code: MS_EINVAL (bad type, shard, id or
 * enum), MS_E2BIG (id above MS_REMEMBER_ID_MAX), MS_ENOOWNER (the shard
 * did not start here), MS_ENOMEM --- */

/* The shard starts here; `ids` (n, lengths in `lens`; borrowed during
 * the call) are its remembered ids as read from the store. They become
 * the shard's set and are queued for ACTIVATE. A shard already started
 * here starts again (its old set and pending activations are replaced). A
 * duplicate id in the list is taken once. */
int ms_remember_shard_started(struct ms_remember *r, int type,
                              uint32_t shard, const char *const *ids,
                              const size_t *lens, uint32_t n,
                              uint64_t now_ms);

/* The shard moved away: its pending activations are dropped, its set
 * forgotten, its failed mark cleared; queued records are still written.
 * MS_ENOOWNER if it had not started here. */
int ms_remember_shard_stopped(struct ms_remember *r, int type,
                              uint32_t shard, uint64_t now_ms);

/* The shard is not ours here any more for good (its lease released, the
 * node gave up on it): what it still had to write is dropped and counted
 * in `abandoned` (queued records, the records of a WRITE out, whose
 * answer becomes stale, and a resync due), and a retry waiting is
 * cancelled. Call it after ms_remember_shard_stopped, once
 * ms_remember_pending is 0 or the caller stops waiting. Returns the
 * records dropped, MS_EINVAL, or MS_EBUSY (the shard is started here). */
int ms_remember_shard_released(struct ms_remember *r, int type,
                               uint32_t shard, uint64_t now_ms);

/* Entity `id` of (type, shard) was activated (by a message or an
 * ACTIVATE). Records a start if the id is not in the set. Returns 1 when
 * something was queued, coalesced or dropped into a resync, 0 when
 * nothing was needed, or a negative code. */
int ms_remember_started(struct ms_remember *r, int type, uint32_t shard,
                        const char *id, size_t id_len, uint64_t now_ms);

/* Entity `id` stopped for `reason` (enum ms_remember_reason). Records a
 * stop when the reason removes the id and it is in the set: returns 1;
 * 0 when the id is kept or was not remembered; or a negative code. */
int ms_remember_stopped(struct ms_remember *r, int type, uint32_t shard,
                        const char *id, size_t id_len, int reason,
                        uint64_t now_ms);

/* The store answered WRITE `req` of (type, shard): `err` 0 (written) or
 * a negative code (failed: retried after a backoff; a fail_closed shard
 * is marked failed). An answer to no WRITE out is ignored and counted.
 * Returns 0 or MS_EINVAL. */
int ms_remember_on_written(struct ms_remember *r, int type, uint32_t shard,
                           uint64_t req, int err, uint64_t now_ms);

/* The operator clears the failed mark of (type, shard). Returns 1 if it
 * was failed, 0 if not, MS_EINVAL. */
int ms_remember_clear(struct ms_remember *r, int type, uint32_t shard);

/* Emits the ACTIVATE budget of this tick and WRITEs whose backoff ran
 * out. Call it regularly (every few ms while eager_pending > 0, at least
 * every MS_REMEMBER_BACKOFF_MIN_MS otherwise). */
void ms_remember_tick(struct ms_remember *r, uint64_t now_ms);

/* Takes the oldest action into *out: 1, or 0 when there is none. */
int ms_remember_next_action(struct ms_remember *r,
                            struct ms_remember_action *out);

/* --- queries --- */

/* 1: the shard is marked failed (answer MS_EREMEMBER); 0: not. */
int ms_remember_shard_failed(const struct ms_remember *r, int type,
                             uint32_t shard);
/* Ids remembered in the shard's set (0 if not started here). */
uint64_t ms_remember_shard_count(const struct ms_remember *r, int type,
                                 uint32_t shard);
/* Ids remembered in the sets of the type's shards started here (and of
 * shards moved away with a resync due). */
uint64_t ms_remember_type_count(const struct ms_remember *r, int type);
/* Records of the shard queued or in a WRITE out, plus 1 for a resync
 * due or out: 0 means the store has the shard's set. */
uint64_t ms_remember_pending(const struct ms_remember *r, int type,
                             uint32_t shard);
/* 1 if `id` is in the shard's set. */
int ms_remember_contains(const struct ms_remember *r, int type,
                         uint32_t shard, const char *id, size_t id_len);
const struct ms_remember_stats *ms_remember_stats(const struct ms_remember *r);

#endif
