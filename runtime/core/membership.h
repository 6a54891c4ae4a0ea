/*
 * membership.h -- the membership view of one node (sans-IO).
 *
 * It keeps the members of the cluster, their status, the tombstones of
 * removed incarnations, the local reachability observations, and decides
 * what to send: heartbeats, gossip rounds, answers to stale gossip. It
 * never calls libuv, sockets or the clock: every entry point takes `now_ms`
 * (a monotonic clock of the caller's choice), and every effect comes out
 * as a struct ms_mb_action that the caller drains with ms_mb_next_action()
 * after each call and performs (or, for events, reacts to).
 *
 * Model (DESIGN.md §2, "Membership"):
 *
 * - A member is one incarnation of a node: a stable `name`, an `address`
 *   ("host:port"), a random non-zero 64-bit `uid` chosen at process start,
 *   `roles`, and a `status` that only moves forward:
 *   Joining < Up < Leaving < Exiting < Down < Removed. `up_number` is the
 *   order in which members became Up (1, 2, ...; 0 before). A restarted
 *   process is a new member with a new uid.
 * - Removed incarnations are kept as tombstones (uid + a removal sequence):
 *   gossip that still mentions them can never bring them back. At most
 *   MS_MB_MAX_TOMBSTONES are kept: the ones with the highest sequence, a
 *   rule every node applies alike so views still converge.
 * - The coordinator (ms_mb_leader) is the oldest Up member: the smallest
 *   up_number, ties broken by the lowest address, then the lowest uid
 *   (ms_mb_age_cmp). A Leaving member is no longer Up, so a leaving
 *   coordinator hands over to the next oldest member at once.
 * - Reachability is a local observation: a member that has not answered a
 *   heartbeat for `unreachable_after_ms` is unreachable here. It is never
 *   gossiped and never changes a status: an unreachable member stays Up
 *   until an operator downs it (ms_mb_down).
 * - Only the leader authors status changes of other members. The leader is
 *   the coordinator; when no member is Up, the oldest Leaving/Exiting member
 *   that was once Up (the cluster winding down); when no member was ever Up,
 *   the first seed, which bootstraps the cluster (see below). The leader acts
 *   only when the view is converged, and then:
 *     Joining -> Up   for joining members that are reachable here: since the
 *                     view is converged, each of them, like every reachable
 *                     member, has seen the state that lists it (the "seen by
 *                     all reachable members" rule). up_numbers are handed
 *                     out leader first (bootstrap), then by address and uid;
 *     Leaving -> Exiting once the member owns no shards
 *                     (ms_mb_set_owns_shards; a member never Up owns none);
 *     Exiting -> Removed, Down -> Removed. The leader removes itself only
 *                     when it is the last live member. A removed member gets
 *                     one last gossip so that it learns it was removed.
 * - Exceptions to "only the leader": a node marks itself Leaving
 *   (ms_mb_leave); an operator's down (ms_mb_down) is applied where it is
 *   called; and an older incarnation that shares its name or address with a
 *   newer one is marked Down by any node that sees both. Newer means higher
 *   `incarnation` (the I/O layer passes the process start time in wall-clock
 *   ms), then the lower status (a Joining newcomer beats an Up
 *   predecessor), then the higher uid. Every node computes the same answer
 *   from the gossiped fields, and a restart is the proof that the old
 *   process is gone, so this needs no leader -- which matters when the
 *   restarted process was the leader. Each of these changes only moves a
 *   status forward, so applying it anywhere is safe; gossip spreads it.
 *
 * Gossip: the full state -- members, tombstones, the highest up_number and
 * removal sequence handed out, and the `seen` set -- is one compact JSON
 * text (ms_mb_gossip_encode). Every gossip_interval_ms the node sends it to
 * up to gossip_fanout peers (live members, round-robin in uid order: no
 * randomness). The state is a join-semilattice: merging takes, per uid, the
 * higher status (and the lower non-zero up_number), adds unknown members,
 * applies and keeps tombstones, and never re-adds a tombstoned uid. So no
 * vector clock is needed: the digest of a state is a hash of its content
 * (ms_mb_digest), and two nodes with the same digest hold the same state.
 * `seen` lists the members that have seen the state with this digest. The
 * view is converged (ms_mb_converged) when every live (not Down, not
 * Removed) member that is reachable here is in `seen`. A merge that finds
 * the sender behind (other digest, or this node missing from its seen set)
 * answers it at once with a SEND_GOSSIP (push-pull).
 *
 * Joining: a new node starts alone, Joining, in its own view. While it
 * knows no Up member, every gossip round also sends its state to each seed
 * address (a SEND_GOSSIP with uid 0) that is not already a known member.
 * The seed merges it, finds the sender behind and answers; from then on
 * ordinary gossip carries the join to the leader. The first seed
 * (cfg.seeds[0] == self address, or no seeds at all) bootstraps a new
 * cluster -- it becomes the leader of an all-Joining view -- once it has
 * heard from every other seed and none of them knows an Up member, or
 * after seed_timeout_ms without that. The other seeds never bootstrap, so
 * a cluster is not founded twice.
 *
 * A node that sees itself Down should stop its process (MEMBER_DOWN with
 * is_self): it can no longer act, and when it is the last member nobody is
 * left to remove it. A cluster whose Up members were all downed or removed
 * admits no one any more (only a first seed with no Up member ever known
 * bootstraps): that takes an operator, as in Akka.
 *
 * Wire framing is the caller's: a gossip or heartbeat frame should carry the
 * target uid, and a node should drop frames meant for another uid (a new
 * incarnation at the same address). Reply to a heartbeat on the connection
 * it came on when ms_mb_on_heartbeat() says so.
 *
 * Strings (name, address, roles, version) are printable ASCII without
 * space, '"', '\\' and ',' (roles: a comma-separated list), so they need no
 * escaping in JSON.
 *
 * Threading: none; one owner calls everything.
 */
#ifndef MS_CORE_MEMBERSHIP_H
#define MS_CORE_MEMBERSHIP_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"

#define MS_MB_MAX_MEMBERS 1024    /* members in one view (self included) */
#define MS_MB_MAX_TOMBSTONES 1024 /* removed uids remembered */
#define MS_MB_MAX_NAME 64         /* bytes of a name */
#define MS_MB_MAX_ADDRESS 128     /* bytes of an address */
#define MS_MB_MAX_ROLES 255       /* bytes of the comma-separated roles */
#define MS_MB_MAX_ROLE 32         /* bytes of one role */
#define MS_MB_MAX_NROLES 8        /* roles of one member */
#define MS_MB_MAX_VERSION 32      /* bytes of the application version */
#define MS_MB_MAX_SEEDS 16
#define MS_MB_MAX_GOSSIP (1u << 20) /* bytes of a gossip text */

/* Status of a member; the numeric order is the order of its life. */
enum ms_mb_status {
    MS_MB_JOINING = 1,
    MS_MB_UP = 2,
    MS_MB_LEAVING = 3,
    MS_MB_EXITING = 4,
    MS_MB_DOWN = 5,
    MS_MB_REMOVED = 6
};

/* What the caller must do, or what happened. */
enum ms_mb_action_kind {
    /* Send ms_mb_gossip_encode() to member `uid` at `address`. uid 0: a
     * seed whose uid is not known yet; send to `address`. */
    MS_MB_SEND_GOSSIP = 1,
    /* Send a heartbeat to member `uid` at `address`; when the answer comes,
     * call ms_mb_on_heartbeat_ack(). */
    MS_MB_SEND_HEARTBEAT = 2,
    /* Member `uid` reached `status` in this view (was `prev_status`, 0 when
     * it was unknown). Statuses can be skipped: a member first seen Up gives
     * only MEMBER_UP, one removed while Up gives only MEMBER_REMOVED. With
     * is_self set on MEMBER_DOWN or MEMBER_REMOVED this node has been downed
     * or removed: the I/O layer should stop the node. After a self
     * MEMBER_REMOVED the state machine is inert. */
    MS_MB_MEMBER_JOINING = 3,
    MS_MB_MEMBER_UP = 4,
    MS_MB_MEMBER_LEAVING = 5,
    MS_MB_MEMBER_EXITING = 6,
    MS_MB_MEMBER_DOWN = 7,
    MS_MB_MEMBER_REMOVED = 8,
    /* Local reachability of `uid` changed. */
    MS_MB_MEMBER_UNREACHABLE = 9,
    MS_MB_MEMBER_REACHABLE = 10,
    /* The coordinator (oldest Up member) is now `uid`, 0 for none. */
    MS_MB_COORDINATOR_CHANGED = 11,
    /* The view converged on state `digest` (once per digest). */
    MS_MB_CONVERGED = 12
};

/* One action. Copies, valid after the member is gone. */
struct ms_mb_action {
    int kind;                 /* enum ms_mb_action_kind */
    int is_self;              /* uid is this node */
    int status;               /* MEMBER_*: the new status */
    int prev_status;          /* MEMBER_*: the old one, 0 if unknown */
    uint64_t uid;             /* target or subject; see the kinds */
    uint64_t digest;          /* CONVERGED */
    char name[MS_MB_MAX_NAME + 1];
    char address[MS_MB_MAX_ADDRESS + 1];
};

/* A member as this node sees it. */
struct ms_mb_member {
    uint64_t uid;             /* random, non-zero, per incarnation */
    uint64_t incarnation;     /* process start time (wall ms) or 0 */
    uint32_t up_number;       /* 0 until Up; 1 = first Up member */
    uint32_t weight;          /* for weighted strategies */
    int status;               /* enum ms_mb_status (never REMOVED here) */
    int reachable;            /* local observation; 1 for self */
    int owns_shards;          /* local, as set by ms_mb_set_owns_shards */
    char name[MS_MB_MAX_NAME + 1];
    char address[MS_MB_MAX_ADDRESS + 1];
    char roles[MS_MB_MAX_ROLES + 1];     /* "backend,api" or "" */
    char version[MS_MB_MAX_VERSION + 1]; /* application version or "" */
};

/* Identity of this node; strings are copied by ms_mb_new. */
struct ms_mb_self {
    const char *name;         /* required, 1..64 bytes */
    const char *address;      /* required, "host:port", 1..128 bytes */
    uint64_t uid;             /* required, non-zero, random per process */
    const char *roles;        /* NULL or "a,b": <= 8 roles of <= 32 bytes */
    const char *version;      /* NULL or <= 32 bytes */
    uint32_t weight;          /* 0: 1 */
    uint64_t incarnation;     /* process start, wall-clock ms; 0: unknown */
};

/* Settings; zero fields take the defaults. Strings are copied. */
struct ms_mb_config {
    uint64_t heartbeat_interval_ms;  /* 0: 1000 */
    uint64_t unreachable_after_ms;   /* 0: 5000 */
    uint64_t gossip_interval_ms;     /* 0: 1000 */
    uint32_t gossip_fanout;          /* 0: 3 */
    uint64_t seed_timeout_ms;        /* 0: 5000; see "Joining" above */
    uint64_t lone_leave_ms;          /* 0: 2000; see ms_mb_leave */
    const char *const *seeds;        /* seed addresses, in config order */
    int nseeds;                      /* <= MS_MB_MAX_SEEDS */
    /* 0 (default, safe): a member owns shards until the caller says it
     * does not, so a leave waits for ms_mb_set_owns_shards(uid, 0).
     * 1: members own no shards until told (no sharding configured). */
    int assume_no_shards;
};

struct ms_membership;

/*
 * Creates the view of one node: itself alone, Joining. Copies `self` and
 * `cfg` (neither is kept). On success returns 0 and stores the new object
 * in *out (caller frees with ms_mb_free). Returns MS_EINVAL for a missing
 * or malformed field (uid 0, empty or oversized name or address, a string
 * with a forbidden byte, too many seeds or roles), or MS_ENOMEM.
 */
int ms_mb_new(struct ms_membership **out, const struct ms_mb_self *self,
              const struct ms_mb_config *cfg);

/* Frees the view and its queued actions. NULL is a no-op. */
void ms_mb_free(struct ms_membership *m);

/*
 * Runs the timers due at `now_ms`: marks members unreachable, queues
 * heartbeats and a gossip round when their interval has passed (the first
 * call sends both at once), and runs the leader's actions. Call it at
 * least when ms_mb_next_deadline() says.
 */
void ms_mb_tick(struct ms_membership *m, uint64_t now_ms);

/* Milliseconds from `now_ms` until ms_mb_tick() has work, 0 if now (and
 * before the first call of any entry point). Never more than the heartbeat
 * or gossip interval while this node is a member; UINT64_MAX once it has
 * been removed (nothing left to do). */
uint64_t ms_mb_next_deadline(const struct ms_membership *m, uint64_t now_ms);

/*
 * A heartbeat from member `from_uid` arrived. Returns 1 when the caller
 * should answer it, 0 when not: the sender is a removed incarnation, or this
 * node has been removed. Changes nothing else (only answers count for
 * reachability).
 */
int ms_mb_on_heartbeat(struct ms_membership *m, uint64_t from_uid,
                       uint64_t now_ms);

/* Member `uid` answered a heartbeat: it is reachable as of `now_ms`.
 * Unknown or removed uids are ignored. */
void ms_mb_on_heartbeat_ack(struct ms_membership *m, uint64_t uid,
                            uint64_t now_ms);

/*
 * Encodes the current state as gossip. Returns a NUL-terminated, malloc'd
 * string (caller frees) and stores its length in *len (may be NULL), or
 * NULL when out of memory. The format (no whitespace, keys in this order):
 *   {"v":1,"max_up":N,"max_tomb":N,
 *    "members":[{"u":"<uid hex16>","n":"<name>","a":"<address>",
 *                "r":"<roles>","ver":"<version>","w":N,"i":N,
 *                "s":"joining|up|leaving|exiting|down","o":<up_number>},..],
 *    "tombstones":[{"u":"<uid hex16>","q":<seq>},..],
 *    "seen":["<uid hex16>",..]}
 * with every list in ascending uid order.
 */
char *ms_mb_gossip_encode(const struct ms_membership *m, size_t *len);

/*
 * Merges gossip received from member `from_uid` (as authenticated by the
 * transport; 0 if unknown). `json` is borrowed for the call and need not be
 * NUL-terminated. The text must be exactly in the format of
 * ms_mb_gossip_encode: anything else (other spacing, keys, order, escapes,
 * unsorted or duplicate uids, an impossible status) is rejected with
 * MS_EBADJSON, a size above the limits (text, members, tombstones, string
 * lengths) with MS_E2BIG, and the view is then left unchanged and no action
 * queued. Gossip from a removed incarnation is not merged; the sender is
 * answered so that it learns it was removed. Returns 0 (also when ignored,
 * or when this node is removed), MS_EBADJSON, MS_E2BIG, MS_EINVAL (NULL
 * json with len > 0) or MS_ENOMEM (view unchanged).
 */
int ms_mb_gossip_merge(struct ms_membership *m, const char *json,
                       size_t len, uint64_t from_uid, uint64_t now_ms);

/*
 * Marks this node Leaving (from Joining or Up). The leader then moves it to
 * Exiting once it owns no shards, and to Removed; this node learns that as
 * a MEMBER_REMOVED event with is_self. Returns 0, also when already Leaving
 * or Exiting, or MS_EINVAL when this node is Down or Removed.
 *
 * A node still Joining in its own view leaves the same way: the leader
 * may already have made it Up and the coordinator given it shards, which
 * it learns only through gossip, so it must hand them off like any member
 * (a Leaving member the leader never made Up goes straight to Exiting).
 * Only a node that knows no member that was ever Up -- no seed has
 * answered it, or it met only nodes that are still joining, as when a
 * fresh cluster is stopped at once, so nobody can have made it Up and
 * nobody may ever lead -- tells the seeds that it is leaving and, when it
 * still knows no such member after lone_leave_ms, removes itself (a self
 * MEMBER_REMOVED). If gossip brings it the cluster's state first, the
 * leave goes on as above.
 */
int ms_mb_leave(struct ms_membership *m, uint64_t now_ms);

/*
 * An operator downs the member at `address` (every live incarnation there).
 * Applied to this node's view and spread by gossip (statuses only move
 * forward, so every node ends with it; DESIGN §2 forwards the request to
 * the leader instead, which reaches no one that gossip would not). The
 * leader then moves the member Down -> Removed. `address` is borrowed. Returns 0, also when
 * the member is already Down, or MS_EINVAL when no member has this
 * address.
 */
int ms_mb_down(struct ms_membership *m, const char *address,
               uint64_t now_ms);

/*
 * Tells the view whether member `uid` still owns shards (the coordinator
 * knows; only the leader's view uses it, to move Leaving -> Exiting). Local,
 * never gossiped: a new leader's caller must tell it again. Returns 0 or
 * MS_EINVAL for an unknown uid.
 */
int ms_mb_set_owns_shards(struct ms_membership *m, uint64_t uid, int owns,
                          uint64_t now_ms);

/*
 * Takes the oldest queued action. Returns 1 and fills *out, or 0 when the
 * queue is empty. Drain it after every call that can queue (all of the
 * above); the queue grows as needed and holds O(members) per call.
 */
int ms_mb_next_action(struct ms_membership *m, struct ms_mb_action *out);

/* --- queries; returned pointers are borrowed and valid until the next call
 * that is not a query --- */

/* This node's status; MS_MB_REMOVED once it was removed. */
int ms_mb_self_status(const struct ms_membership *m);

/* This node's uid. */
uint64_t ms_mb_self_uid(const struct ms_membership *m);

/* The coordinator: the oldest Up member, or NULL when none is Up. */
const struct ms_mb_member *ms_mb_leader(const struct ms_membership *m);

/* Number of members in the view (every status but Removed, self
 * included), and the i-th of them in ascending uid order (NULL past the
 * end). Sort a copy with ms_mb_age_cmp for "oldest first". */
size_t ms_mb_member_count(const struct ms_membership *m);
const struct ms_mb_member *ms_mb_member_at(const struct ms_membership *m,
                                           size_t i);

/* The member with this uid, or NULL (unknown or removed). */
const struct ms_mb_member *ms_mb_find_by_uid(const struct ms_membership *m,
                                             uint64_t uid);

/* The newest incarnation (see above) at this address / with this name, or
 * NULL. `address` and `name` are borrowed for the call. */
const struct ms_mb_member *
ms_mb_find_by_address(const struct ms_membership *m, const char *address);
const struct ms_mb_member *ms_mb_find_by_name(const struct ms_membership *m,
                                              const char *name);

/* 1 when `uid` is a member that is reachable here (self: 1), else 0. */
int ms_mb_is_reachable(const struct ms_membership *m, uint64_t uid);

/* 1 when `uid` is a removed incarnation that this node remembers. */
int ms_mb_is_tombstoned(const struct ms_membership *m, uint64_t uid);

/* 1 when the current state is converged (see above), else 0. */
int ms_mb_converged(const struct ms_membership *m);

/* The digest of the current state: equal digests, equal states. */
uint64_t ms_mb_digest(const struct ms_membership *m);

/*
 * Writes the view as one JSON object into `buf` (NUL-terminated, truncated
 * to `buflen`; buf may be NULL when buflen is 0) for the HTTP members
 * endpoint:
 *   {"self":"<uid>","leader":"<uid>"|null,"converged":bool,
 *    "digest":"<hex16>","tombstones":N,
 *    "members":[{"uid":"<hex16>","name":..,"address":..,"status":"up",
 *                "up_number":N,"roles":["backend"],"version":..,
 *                "weight":N,"reachable":bool},..]}
 * with members oldest first (ms_mb_age_cmp). Returns the length it needed,
 * without the NUL.
 */
size_t ms_mb_status_json(const struct ms_membership *m, char *buf,
                         size_t buflen);

/* "joining", "up", ..., "removed"; "unknown" for anything else. */
const char *ms_mb_status_name(int status);

/* 1 when `role` is one of the member's roles. */
int ms_mb_has_role(const struct ms_mb_member *mb, const char *role);

/* Orders members oldest first: members with an up_number before those
 * without, by up_number, then by address, then by uid. A qsort comparator
 * over `const struct ms_mb_member *` elements (not pointers to them). */
int ms_mb_age_cmp(const void *a, const void *b);

#endif
