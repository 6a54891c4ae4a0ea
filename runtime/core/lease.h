/*
 * lease.h -- the per-shard lease of persistent entity types and its FIFO
 * barrier, as a sans-IO state machine (DESIGN.md "Leases and
 * persistence", issue 11 points 3-5).
 *
 * One struct ms_lease per node covers every persistent type. It runs no
 * SQL: it says WHAT to ask the database (ACQUIRE, RENEW, RELEASE actions
 * with type, shard, epoch, owner and a request id) and reacts to the
 * answers the caller feeds back (ms_lease_on_answer). Like the region
 * (region.h), every entry point takes `now_ms` (the caller's monotonic
 * clock); nothing reads a clock, a socket or a loop; effects come out as
 * struct ms_lease_action, drained with ms_lease_next_action() after EACH
 * call, in order (the order of DELIVER and OPEN actions is the order of
 * the shard's messages).
 *
 * States of one (type, shard), enum ms_lease_state:
 *
 *   NONE --assigned--> ACQUIRING --acquired--> HELD <--renewed-- RENEWING
 *                         ^  |refused/error/timeout    |tick: renew due
 *                         |  v                         v
 *                       (backoff, same state)    HELD --tick--> RENEWING
 *   HELD/RENEWING --renewal refused/failed--> LOST  (STOP_ENTITIES at once)
 *   HELD/RENEWING --local expiry passed-----> EXPIRED (STOP_ENTITIES)
 *   LOST/EXPIRED --backoff--> ACQUIRING (unless a member is unreachable)
 *   any held --member_unreachable--> FENCED (STOP_ENTITIES; no renew, no
 *       release: the lease runs out in the database) --expiry--> EXPIRED
 *       (a renewal that was out counts as granted for this expiry)
 *   --handoff (barrier empty)--> STOPPING (STOP_ENTITIES; renewed as
 *       when held, so entities finishing a long queue keep a usable
 *       lease) --entities stopped--> RELEASING (RELEASE) --answer--> NONE
 *
 * Time. Expiry is measured against the database clock: an answer carries
 * the database's expires_at and now; the lease has (expires_at - db_now)
 * left, counted from when the REQUEST WAS SENT on the local monotonic
 * clock (conservative: the database's now was read at or after that).
 * No absolute local time is compared with a database time.
 *
 * Requests. Each statement carries a request id; a shard waits for one
 * answer at a time and ignores (counts) any answer with another id: a
 * late answer of an abandoned request never changes a shard. An acquire
 * with no answer after MS_LEASE_REQUEST_TIMEOUT_MS counts as failed (the
 * caller's database client should time it out earlier); a renewal with
 * no answer for a renew interval is sent again, until the expiry. The
 * epoch never goes down: an acquired answer with an epoch below one the
 * shard saw is refused (counted) and retried.
 *
 * The barrier. While the shard's lease cannot be used (ACQUIRING, LOST,
 * EXPIRED, FENCED), ms_lease_admit() queues the caller's messages in one
 * FIFO per shard, at most MS_LEASE_BARRIER (the region's 1,024): the next
 * one gets MS_EOVERFLOW, the region's overflow answer. The barrier keeps
 * OPAQUE HANDLES the caller owns (void *): the messages already live in
 * the caller's structures (a region buffer entry, an ask with its waiter)
 * and the machine needs nothing from their bytes, so copying them would
 * only double the memory. Once the lease is held, the handles come back
 * as DELIVER actions in FIFO order, followed by OPEN (from now on
 * ms_lease_admit answers MS_LEASE_OPEN: deliver directly). The lease
 * window: a shard unusable for `window_ms` (default 2 x lease_duration:
 * one duration for an old owner's lease to run out, one more to get it)
 * since it became unusable gets every waiting handle back as REJECT with
 * MS_ELEASE, and answers MS_ELEASE to new messages until it holds its
 * lease again: a rejected message is never replayed. A handoff of a shard
 * whose barrier holds messages waits until the barrier drained (delivered
 * or rejected); meanwhile ms_lease_admit answers MS_ENOOWNER (the message
 * belongs to the next owner: the region routes it).
 *
 * Threading: none; one owner calls everything.
 */
#ifndef MS_CORE_LEASE_H
#define MS_CORE_LEASE_H

#include <stddef.h>
#include <stdint.h>

/* defaults and bounds of the per-type settings */
#define MS_LEASE_DURATION_MS 10000        /* lease_duration */
#define MS_LEASE_RENEW_INTERVAL_MS 3000   /* lease_renew_interval */
#define MS_LEASE_DURATION_MIN_MS 1000
#define MS_LEASE_DURATION_MAX_MS 3600000  /* one hour */
#define MS_LEASE_RENEW_MIN_MS 100
/* renew_interval_ms <= duration_ms / MS_LEASE_RENEW_RATIO */
#define MS_LEASE_RENEW_RATIO 3
/* the window defaults to this many lease durations */
#define MS_LEASE_WINDOW_DURATIONS 2
#define MS_LEASE_BARRIER 1024             /* = MS_REGION_BUFFER */
/* acquire retries: MIN, doubling per failure, at most MAX */
#define MS_LEASE_BACKOFF_MIN_MS 100
#define MS_LEASE_BACKOFF_MAX_MS 2000
/* an acquire or renewal without an answer this long has failed */
#define MS_LEASE_REQUEST_TIMEOUT_MS 5000
#define MS_LEASE_OWNER_MAX 255            /* bytes of the owner name */

/* ms_lease_admit: the lease is held, deliver the message now */
#define MS_LEASE_OPEN 1

enum ms_lease_state {
    MS_LEASE_NONE = 0,   /* not ours */
    MS_LEASE_ACQUIRING,  /* an acquire is out, or waits for its backoff */
    MS_LEASE_HELD,
    MS_LEASE_RENEWING,   /* held, a renewal is out */
    MS_LEASE_LOST,       /* a renewal was refused or failed */
    MS_LEASE_EXPIRED,    /* held past its expiry without a renewal */
    MS_LEASE_FENCED,     /* a member is unreachable: let it expire */
    MS_LEASE_STOPPING,   /* handoff: waiting for the entities to stop */
    MS_LEASE_RELEASING   /* handoff: the release is out */
};

/* Per-type settings. 0 in a field means its default. */
struct ms_lease_settings {
    uint64_t duration_ms;       /* lease_duration */
    uint64_t renew_interval_ms; /* lease_renew_interval */
    uint64_t window_ms;         /* how long messages may wait */
};

/*
 * Checks s (zeros taken as defaults): duration within
 * [MS_LEASE_DURATION_MIN_MS, MS_LEASE_DURATION_MAX_MS], renew interval at
 * least MS_LEASE_RENEW_MIN_MS and at most duration / 3, window at least
 * one duration. Returns 0, or MS_ECONFIG with a sentence in err (any
 * size; truncated).
 */
int ms_lease_settings_check(const struct ms_lease_settings *s, char *err,
                            size_t errlen);

/* Settings of the machine; borrowed only during ms_lease_new. */
struct ms_lease_config {
    const char *owner;      /* this node's name in lease rows (copied) */
    int ntypes;             /* types 0..ntypes-1 */
    const uint32_t *nshards;/* per type: its shard count (0: not
                               persistent, every call for it is refused) */
    const struct ms_lease_settings *settings; /* per type (copied) */
};

enum ms_lease_action_kind {
    /* Run the acquire statement for (type, shard) as `owner`, for
     * duration_ms; answer with request id `req`. */
    MS_LEASE_ACQUIRE = 1,
    /* Renew the lease of `epoch` held by `owner` for duration_ms. */
    MS_LEASE_RENEW,
    /* Release the lease of `epoch` held by `owner` (answer optional; the
     * epoch is the last one this shard held here, 0 if none: the
     * statement frees only a row `owner` still holds). */
    MS_LEASE_RELEASE,
    /* Stop the shard's local entities now (no more writes). */
    MS_LEASE_STOP_ENTITIES,
    /* Deliver waiting message `msg` (FIFO order) */
    MS_LEASE_DELIVER,
    /* The shard admits messages directly from now on. */
    MS_LEASE_OPEN_SHARD,
    /* Answer waiting message `msg` with error `err` (MS_ELEASE, or
     * MS_ECANCELED from ms_lease_cancel_all); it leaves the barrier. */
    MS_LEASE_REJECT
};

/* One action, a plain value: `owner` is borrowed from the machine (valid
 * until ms_lease_free), `msg` is the caller's own handle. */
struct ms_lease_action {
    int kind;               /* enum ms_lease_action_kind */
    int type;
    uint32_t shard;
    uint64_t req;           /* ACQUIRE, RENEW, RELEASE */
    uint64_t epoch;         /* RENEW, RELEASE: the epoch held */
    uint64_t duration_ms;   /* ACQUIRE, RENEW */
    const char *owner;      /* ACQUIRE, RENEW, RELEASE */
    void *msg;              /* DELIVER, REJECT */
    int err;                /* REJECT */
};

enum ms_lease_answer_kind {
    MS_LEASE_ANS_ACQUIRED = 1, /* epoch, expires_at_ms, db_now_ms */
    MS_LEASE_ANS_RENEWED,      /* expires_at_ms, db_now_ms (epoch: 0 or
                                  the epoch renewed) */
    MS_LEASE_ANS_REFUSED,      /* held_by another owner until
                                  expires_at_ms; db_now_ms */
    MS_LEASE_ANS_RELEASED,
    MS_LEASE_ANS_DB_ERROR      /* the statement failed or timed out */
};

/* The database's answer to request `req` of (type, shard); times in ms on
 * the database's clock. Borrowed during the call. */
struct ms_lease_answer {
    int kind;               /* enum ms_lease_answer_kind */
    int type;
    uint32_t shard;
    uint64_t req;
    uint64_t epoch;
    int64_t expires_at_ms;
    int64_t db_now_ms;
};

struct ms_lease_stats {
    uint64_t acquired, renewed, released;
    uint64_t lost;             /* renewals refused or failed */
    uint64_t expired;          /* held past expiry */
    uint64_t fenced;           /* shards stopped for an unreachable member */
    uint64_t retries;          /* acquires sent again after a failure */
    uint64_t refused;          /* acquires refused: another owner */
    uint64_t db_errors;
    uint64_t stale_answers;    /* answers to abandoned requests */
    uint64_t epoch_regressions;/* answers with an epoch below one seen */
    uint64_t barrier_waited;   /* messages that entered a barrier */
    uint64_t barrier_overflows;
    uint64_t rejected;         /* REJECT with MS_ELEASE (queued or new) */
};

struct ms_lease;

/* Creates the machine. Returns 0 and stores it in *out; MS_EINVAL (no
 * owner, an empty or too long one, ntypes < 0, no arrays), MS_ECONFIG (a
 * type's settings fail ms_lease_settings_check) or MS_ENOMEM. */
int ms_lease_new(struct ms_lease **out, const struct ms_lease_config *c);

/* Frees the machine and actions not taken. Handles still in barriers are
 * NOT given back: call ms_lease_cancel_all and drain first. NULL: no-op. */
void ms_lease_free(struct ms_lease *l);

/* Queues a REJECT (MS_ECANCELED) for every waiting message: the node is
 * stopping. Returns how many. */
uint64_t ms_lease_cancel_all(struct ms_lease *l);

/* --- events (0 or a negative code: MS_EINVAL for a bad type or shard,
 * MS_EBUSY when the event does not fit the shard's state; MS_ENOMEM) --- */

/* This node is the shard's new owner: acquire its lease (before it takes
 * the shard's messages). From NONE, or RELEASING (acquired again once
 * the release is answered), or STOPPING (a move rolled back while the
 * entities stopped: HELD and open again, or EXPIRED if it ran out, or
 * FENCED while a member is unreachable). */
int ms_lease_shard_assigned(struct ms_lease *l, int type, uint32_t shard,
                            uint64_t now_ms);

/* The shard moves away: once its barrier is empty, STOP_ENTITIES (if it
 * was held), then RELEASE after ms_lease_entities_stopped. A shard whose
 * lease is not held goes to NONE without STOP_ENTITIES (a RELEASE is
 * still sent unless a member is unreachable, in case the database granted
 * an acquire whose answer was lost). */
int ms_lease_handoff(struct ms_lease *l, int type, uint32_t shard,
                     uint64_t now_ms);

/* The caller stopped the shard's entities (after STOP_ENTITIES of a
 * handoff): the lease is released. */
int ms_lease_entities_stopped(struct ms_lease *l, int type, uint32_t shard,
                              uint64_t now_ms);

/* Some member is unreachable: every shard in use is stopped and FENCED,
 * nothing is renewed, acquired or released until
 * ms_lease_members_reachable. */
void ms_lease_member_unreachable(struct ms_lease *l, uint64_t now_ms);

/* No member is unreachable any more (it came back, or was downed): the
 * shards still assigned here acquire their leases again. */
void ms_lease_members_reachable(struct ms_lease *l, uint64_t now_ms);

/* The database answered. Answers to requests the shard no longer waits
 * for are ignored (stale_answers). One read at or after the lease's end
 * on the local clock (its send time plus what the database granted) is
 * too late: a renewal then stops the entities (EXPIRED), an acquire is
 * retried. Returns 0, MS_EINVAL (bad kind, type or shard) or MS_ENOMEM. */
int ms_lease_on_answer(struct ms_lease *l, const struct ms_lease_answer *a,
                       uint64_t now_ms);

/* Runs what is due: renewals, expiries, retries, windows that ran out.
 * Call at least every MS_LEASE_BACKOFF_MIN_MS. */
void ms_lease_tick(struct ms_lease *l, uint64_t now_ms);

/* --- the barrier ------------------------------------------------------- */

/*
 * A message `msg` (the caller's handle, never NULL; kept until it comes
 * back in a DELIVER or REJECT action, so it must stay valid until then:
 * an ask that timed out meanwhile is the caller's to skip at DELIVER,
 * as the region does with its buffer) for the shard. Returns:
 * MS_LEASE_OPEN (held and nothing waits: deliver it now; not kept),
 * 0 (it waits in the barrier), MS_EOVERFLOW (the barrier is full),
 * MS_ELEASE (the window ran out: answer lease_unavailable), MS_ENOOWNER
 * (the shard is not, or no longer, ours here: route it again), MS_EINVAL,
 * MS_ENOMEM. Not kept on any negative return.
 */
int ms_lease_admit(struct ms_lease *l, int type, uint32_t shard, void *msg,
                   uint64_t now_ms);

/*
 * The admission answer for the shard without keeping anything: for a
 * caller that keeps waiting messages in its own buffer (the region does:
 * one storage, its order and bounds) and uses the barrier of this machine
 * for nothing. MS_LEASE_OPEN (held or renewing: deliver), 0 (the lease is
 * being acquired, or was lost, expired or fenced: wait), MS_ELEASE (the
 * window ran out: reject; also tells the caller to reject what waits in
 * its buffer), MS_ENOOWNER (not ours here, or being handed off),
 * MS_EINVAL (a bad type or shard). OPEN_SHARD still comes out when the
 * lease is held: the caller flushes its buffer then.
 */
int ms_lease_gate(const struct ms_lease *l, int type, uint32_t shard);

/* --- actions ----------------------------------------------------------- */

/* Takes the oldest action into *out: 1, or 0 when there is none. */
int ms_lease_next_action(struct ms_lease *l, struct ms_lease_action *out);

/* --- queries ----------------------------------------------------------- */

int ms_lease_state(const struct ms_lease *l, int type, uint32_t shard);
/* The highest epoch the shard saw (0: none). */
uint64_t ms_lease_epoch(const struct ms_lease *l, int type, uint32_t shard);
/* The epoch held, if the lease is usable for a write at now_ms (HELD,
 * RENEWING, or STOPPING: a handoff's entities finish the messages they
 * accepted before it is released; and now_ms before its local expiry);
 * else 0. */
uint64_t ms_lease_usable_epoch(const struct ms_lease *l, int type,
                               uint32_t shard, uint64_t now_ms);
/* Messages waiting in the shard's barrier. */
uint32_t ms_lease_waiting(const struct ms_lease *l, int type, uint32_t shard);
/* Shards held (HELD or RENEWING), all types. */
uint32_t ms_lease_held(const struct ms_lease *l);
const struct ms_lease_stats *ms_lease_stats(const struct ms_lease *l);
/* The state's name ("held", ...). */
const char *ms_lease_state_name(int state);

#endif
