/*
 * membership_int.h -- what the files of the membership view share, and
 * nothing else includes: the state (struct ms_membership, its tables) and
 * the functions one file calls in another (ms__mb_*). See membership.h for
 * the model and the public entry points.
 *
 * The membership view is four files, one job each:
 *   membership.c         the tables (members, tombstones), the digest, the
 *                        action queue, lifecycle and the queries (the
 *                        status JSON of /v1/members too);
 *   membership_leader.c  convergence, the leader and its round (joins,
 *                        exits, removals), restarts, and the changes made
 *                        here: leave, down, owns_shards;
 *   membership_detect.c  the timers: failure detection (heartbeats and
 *                        unreachability), gossip rounds, knocking at seeds
 *                        and a lone leave's end;
 *   membership_gossip.c  the gossip text: its writer, its strict parser
 *                        and the merge of a received state.
 *
 * Memory: the members live in one array sorted by uid (binary search;
 * insertion and removal shift it, which is cheap at <= 1,024 members), the
 * tombstones in another sorted array of fixed capacity, the actions in a
 * ring that grows. A merge parses the whole text into a separate state
 * first and reserves room for its result, so a rejected or failed merge
 * leaves the view as it was.
 */
#ifndef MS_CORE_MEMBERSHIP_INT_H
#define MS_CORE_MEMBERSHIP_INT_H

#include "membership.h"

struct mrec {
    struct ms_mb_member pub;
    uint64_t last_ack_ms;   /* last heartbeat answer, or when learned */
    int seen;               /* has seen the state of the current digest */
};

struct tomb {
    uint64_t uid;
    uint64_t seq;           /* removal order, handed out by the leader */
};

/* A state: the local one, or one parsed from gossip. */
struct state {
    struct mrec *recs;      /* ascending uid */
    uint32_t n, cap;
    struct tomb *tombs;     /* ascending uid */
    uint32_t ntombs;
    uint32_t max_up;        /* highest up_number handed out */
    uint64_t max_tomb;      /* highest removal sequence handed out */
    uint64_t *seen;         /* parsed gossip only: ascending uids */
    uint32_t nseen;
};

struct ms_membership {
    struct state st;
    uint64_t self_uid;
    uint64_t digest;
    int converged, converged_told;
    uint64_t coordinator;   /* last one told, 0 for none */
    int removed;            /* this node was removed: inert */
    int started;
    uint64_t started_ms, next_hb_ms, next_gossip_ms;
    uint64_t gossip_cursor; /* uid of the last gossip target */
    int dup_check;          /* a member was added: look for restarts */
    uint64_t hb_ms, unreachable_ms, gossip_ms, seed_timeout_ms;
    uint64_t lone_leave_ms;
    uint64_t lone_leave_at_ms; /* a leave begun alone ends here; 0: none */
    uint32_t fanout;
    int assume_no_shards;
    int nseeds;
    char seeds[MS_MB_MAX_SEEDS][MS_MB_MAX_ADDRESS + 1];
    int seed_heard[MS_MB_MAX_SEEDS];
    struct ms_mb_action *q; /* ring */
    uint32_t qhead, qlen, qcap;
};

/* A uid in JSON, and its printf argument. */
#define UID "\"%016llx\""
#define ULL(x) ((unsigned long long)(x))

/* --- strings and ordering (membership.c) --------------------------------- */

/* Printable ASCII without space, '"', '\\' and ','. */
static inline int plain(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != ',';
}

/* 1 when s[0..len) is a valid roles field ("a,b", at most the maxima). */
int ms__mb_valid_roles(const char *s, size_t len);

/* 1 when a is a newer incarnation than b (same name or address). */
static inline int newer(const struct ms_mb_member *a,
                        const struct ms_mb_member *b)
{
    if (a->incarnation != b->incarnation)
        return a->incarnation > b->incarnation;
    if (a->status != b->status)
        return a->status < b->status;
    return a->uid > b->uid;
}

static inline int live(int status)
{
    return status >= MS_MB_JOINING && status < MS_MB_DOWN;
}

/* A member that this node watches: not itself, and live. */
static inline int monitored(const struct ms_membership *m,
                            const struct mrec *r)
{
    return r->pub.uid != m->self_uid && live(r->pub.status);
}

/* --- the tables (membership.c) ------------------------------------------- */

/* Index of the first of n elements of `size` bytes with uid >= `uid` (the
 * elements start with their uid and are sorted by it). */
uint32_t ms__mb_lower_bound(const void *base, size_t size, uint32_t n,
                            uint64_t uid);

/* The member `uid` of state s, or NULL. */
struct mrec *ms__mb_find(const struct state *s, uint64_t uid);

/* Makes room for n members in s; 0 or MS_ENOMEM. */
int ms__mb_reserve(struct state *s, uint32_t n);

/* Inserts a copy of `pub`; room must have been reserved. */
struct mrec *ms__mb_insert(struct state *s, const struct ms_mb_member *pub);

/* The tombstone of `uid` in s, or NULL. */
struct tomb *ms__mb_tomb_find(const struct state *s, uint64_t uid);

/* Adds a tombstone, keeping the MS_MB_MAX_TOMBSTONES greatest (seq, uid). */
void ms__mb_tomb_add(struct state *s, uint64_t uid, uint64_t seq);

/* A hash of the content of s, independent of order. */
uint64_t ms__mb_digest_of(const struct state *s);

/* --- actions (membership.c) ---------------------------------------------- */

/* Queues an action about `r` (may be NULL); returns it for the caller to
 * complete, or NULL when out of memory (the action is lost). */
struct ms_mb_action *ms__mb_push(struct ms_membership *m, int kind,
                                 const struct mrec *r);

/* Queues the status event of `r`, which had status `prev`. */
void ms__mb_push_status(struct ms_membership *m, const struct mrec *r,
                        int prev);

/* Sets a member's status (forward only) and tells the caller. */
void ms__mb_set_status(struct ms_membership *m, struct mrec *r, int status);

/* Removes a member, remembering its uid with removal sequence `seq`. */
void ms__mb_remove_rec(struct ms_membership *m, struct mrec *r,
                       uint64_t seq);

/* --- leadership (membership_leader.c) ------------------------------------ */

/* The oldest member with a status in [lo, hi] (with an up_number when
 * need_up_number), or NULL. */
const struct mrec *ms__mb_oldest(const struct ms_membership *m, int lo,
                                 int hi, int need_up_number);

/* 1 when a member of the view has been Up (has an up_number). */
int ms__mb_ever_up(const struct ms_membership *m);

/* Starts the clocks at the first call that gives a time. */
void ms__mb_begin(struct ms_membership *m, uint64_t now_ms);

/* After every change: restarts, the leader's round, then the bookkeeping
 * (digest, seen, convergence, coordinator). */
void ms__mb_settle(struct ms_membership *m, uint64_t now_ms);

/* --- timers (membership_detect.c) ---------------------------------------- */

/* Sends this node's state to the seeds that are not known members, while
 * it was never Up and knows no Up member. */
void ms__mb_knock_seeds(struct ms_membership *m);

#endif
