/*
 * plan.h -- a region's copy of the plan of one entity type, and the codec
 * of the CONTROL messages that carry plans (sans-IO).
 *
 * Every node holds one struct ms_plan per entity type: shard -> owner uid
 * (0: unassigned), each shard with the generation of the update that set
 * it. The plan's generation is the highest of them. An update is applied
 * only when its generation is higher than the one the shard holds, so a
 * delayed older update never overwrites a newer one (DESIGN.md §2).
 *
 * Generations and terms. The coordinator of term T issues generations in
 * the range ((T << 32), (T + 1) << 32): a generation's high bits are the
 * term that issued it (MS_PLAN_GEN_TERM). So every generation of a newer
 * coordinator is higher than every generation an older one ever issued,
 * even one that reached only a region that a new coordinator did not hear
 * from. Terms are at most MS_PLAN_MAX_TERM, so generations stay below
 * 2^53 and are exact as JSON and Lua numbers.
 *
 * The fence. A node keeps one struct ms_plan_fence: the highest term it
 * has accepted and the coordinator (uid) of that term. It checks every
 * VIEW_REQUEST and PLAN against it (ms_plan_fence_check): a message from an
 * older term, or from another coordinator claiming the same term, is
 * refused, and a refused VIEW_REQUEST is answered with STALE_TERM. Since a
 * region answers a new coordinator's VIEW_REQUEST only after raising its
 * fence, no update of the deposed coordinator is applied after the region
 * reported its view (the "promise" of Paxos' first phase).
 *
 * CONTROL messages (frame kind MS_FRAME_CONTROL) are compact JSON objects,
 * written by ms_plan_msg_encode() and read back by ms_plan_msg_decode(),
 * which accepts exactly that text: no whitespace, keys in this order, no
 * other keys. Every message is at most MS_PLAN_MSG_MAX bytes.
 *
 *   {"t":"view_request","term":T}                       coordinator -> all
 *   {"t":"view","term":T,"type":"Name","shards":N,"fp":"...","e":[E,..]}
 *                                                       region -> coord.
 *   {"t":"view_done","term":T}                          region -> coord.
 *   {"t":"stale_term","term":T}                         region -> coord.
 *   {"t":"plan","term":T,"type":"Name","shards":N,"e":[E,..]}
 *                                                       coordinator -> all
 *   {"t":"alloc","term":T,"type":"Name","shard":S}      region -> coord.
 *   {"t":"alloc_refused","term":T,"type":"Name","shard":S,"code":"c",
 *    "reason":"..."}                                    coord. -> region
 *   {"t":"register_refused","term":T,"type":"Name","reason":"..."}
 *                                                       coord. -> region
 *
 *   {"t":"handoff","term":T,"type":"Name","shards":N,"e":[E,..]}
 *                                                       coordinator -> all
 *   {"t":"fence","term":T,"type":"Name","shards":N,"e":[E,..]}
 *                                                       region -> old owner
 *   {"t":"fenced","term":T,"type":"Name","shards":N,"e":[E,..]}
 *                                                       old owner -> coord.
 *   {"t":"stop","term":T,"type":"Name","shards":N,"e":[E,..]}
 *                                                       coord. -> old owner
 *   {"t":"stopped","term":T,"type":"Name","shards":N,"e":[E,..]}
 *                                                       old owner -> coord.
 *
 *   E = [shard,"<owner uid, 16 lowercase hex digits>",generation]
 *
 * - Numbers are unsigned decimal integers without leading zeros. `term`
 *   is <= MS_PLAN_MAX_TERM (0 only in "alloc", "stale_term" and
 *   "alloc_refused": a node that never heard from a coordinator),
 *   `shards` is 1..MS_PLAN_MAX_SHARDS, `shard` < MS_PLAN_MAX_SHARDS,
 *   generations 1..MS_PLAN_MAX_GEN.
 * - Entries are in strictly ascending shard order, each shard < `shards`,
 *   at most MS_PLAN_MSG_MAX_ENTRIES per message; "e" may be empty. A plan
 *   or view larger than that is sent as several messages of the same
 *   kind, each applied on its own.
 * - "type" is 1..MS_PLAN_MAX_TYPE_NAME bytes of printable ASCII
 *   (0x21-0x7e) without '"' and '\\', so it is never escaped. "fp"
 *   (<= MS_PLAN_MAX_FINGERPRINT bytes) and "reason" (<=
 *   MS_PLAN_MAX_REASON bytes) may hold any byte but NUL:
 *   '"' and '\\' are written \" and \\, bytes below 0x20 and 0x7f as
 *   \u00xx (lowercase hex); nothing else is escaped. "code" is
 *   1..MS_PLAN_MAX_CODE bytes of [a-z_].
 *
 * Meaning:
 *
 * - view_request: a new coordinator of term T asks for this node's view.
 *   If the fence accepts it, the node answers, for every entity type it
 *   has, one or more "view" messages (ms_plan_view_encode: its settings
 *   fingerprint, shard count and the entries it holds, gen > 0), then one
 *   "view_done". A view registers the node for the type at the
 *   coordinator. A node may also send a view and view_done on its own, at
 *   the coordinator's current term, to register again. If the fence
 *   refuses it, the node answers "stale_term" with the fence's term.
 * - plan: updates to apply (ms_plan_apply_msg), full plans and single
 *   allocations alike.
 * - alloc: this region routes to an unassigned shard and asks the
 *   coordinator to allocate it. The answer is a "plan" (broadcast to all,
 *   or sent to the requester when the shard was already assigned) or an
 *   "alloc_refused". `term` is the sender's fence term.
 * - alloc_refused: codes "not_ready" (the coordinator is still collecting
 *   views: retry later), "not_coordinator", "unknown_type", "bad_shard",
 *   "no_host" (no member can host the type), "strategy" (the allocation
 *   strategy failed), "exhausted" (the term ran out of generations).
 * - register_refused: this node's settings of the type differ from the
 *   cluster's; the node does not host the type. `reason` says how.
 *
 * Handoff (DESIGN.md §2), one move per entry; a move is named by its
 * shard and its handoff generation H (issued by the coordinator like any
 * generation, so a later plan entry for the shard is above it):
 *
 * - handoff: E = [shard, old owner, H]. Every region stops sending the
 *   shard and buffers it, then sends "fence" with the same entry down its
 *   connection to the old owner: everything it sent there before arrives
 *   first. A plan entry for the shard with a generation above H ends the
 *   buffering (completed or rolled back alike) and flushes in order.
 * - fence: the old owner relays it to its coordinator as "fenced", with
 *   the region's uid in place of the owner: E = [shard, region, H].
 * - stop: E = [shard, old owner, H], once every region fenced. The old
 *   owner stops accepting the shard, handles what it accepted, passivates
 *   its entities and answers "stopped" with the same entry.
 */
#ifndef MS_CORE_PLAN_H
#define MS_CORE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"

#define MS_PLAN_MAX_SHARDS 65536     /* shards of one entity type */
#define MS_PLAN_MAX_TYPES 64         /* entity types of a cluster */
#define MS_PLAN_MAX_TYPE_NAME 64     /* bytes of a type name */
#define MS_PLAN_MAX_FINGERPRINT 1024 /* bytes of a settings fingerprint */
#define MS_PLAN_MAX_REASON 2048      /* bytes of a refusal's reason */
#define MS_PLAN_MAX_CODE 31          /* bytes of a refusal's code */
#define MS_PLAN_MAX_TERM ((1u << 20) - 1)
#define MS_PLAN_MAX_GEN (((uint64_t)MS_PLAN_MAX_TERM + 1) << 32)
#define MS_PLAN_MSG_MAX_ENTRIES 4096 /* entries of one message */
#define MS_PLAN_MSG_MAX (256 * 1024) /* bytes of one message */

/* The term that issued generation g. */
#define MS_PLAN_GEN_TERM(g) ((uint64_t)(g) >> 32)

/* --- the region's copy ---------------------------------------------------- */

struct ms_plan;
struct ms_plan_msg;

/*
 * Creates the plan of a type with `shard_count` shards (1 ..
 * MS_PLAN_MAX_SHARDS), every shard unassigned at generation 0. Returns the
 * plan (caller frees with ms_plan_free), or NULL for a bad shard count or
 * when out of memory.
 */
struct ms_plan *ms_plan_new(uint32_t shard_count);

/* Frees the plan. NULL is a no-op. */
void ms_plan_free(struct ms_plan *p);

/* The shard count the plan was created with. */
uint32_t ms_plan_shard_count(const struct ms_plan *p);

/* The highest generation of any shard (0 for a fresh plan). */
uint64_t ms_plan_generation(const struct ms_plan *p);

/*
 * The owner uid of `shard`, 0 when unassigned or when `shard` is out of
 * range. Stores the shard's generation in *gen when gen is not NULL (0 for
 * a shard never assigned or out of range).
 */
uint64_t ms_plan_owner(const struct ms_plan *p, uint32_t shard,
                       uint64_t *gen);

/*
 * Applies the update "shard -> owner at generation gen" (owner 0:
 * unassigned). Returns 1 when applied, 0 when stale (the shard holds a
 * generation >= gen: nothing changes), or MS_EINVAL for a shard out of
 * range or a generation of 0 or above MS_PLAN_MAX_GEN.
 */
int ms_plan_apply(struct ms_plan *p, uint32_t shard, uint64_t owner,
                  uint64_t gen);

/*
 * Applies the entries of a decoded "plan" message `m` (borrowed) whose
 * "type" the caller matched to this plan, each with ms_plan_apply().
 * Returns the number of entries applied (stale ones are skipped), or
 * MS_EINVAL when `m` is not a plan or its shard count differs from this
 * plan's (then nothing is applied).
 */
int ms_plan_apply_msg(struct ms_plan *p, const struct ms_plan_msg *m);

/*
 * The owner's check of an incoming message (DESIGN.md §2, path of a
 * message): returns 1 when `self_uid` owns `shard` at a generation >=
 * `sender_gen`, the generation the sender routed with; else 0, and the
 * caller answers NOT_OWNER with ms_plan_owner()'s generation so that the
 * sender refreshes (or, when the sender is ahead, retries once this node
 * has caught up).
 */
int ms_plan_owns(const struct ms_plan *p, uint32_t shard, uint64_t self_uid,
                 uint64_t sender_gen);

/* The number of shards `uid` owns in this plan. */
uint32_t ms_plan_count_owned(const struct ms_plan *p, uint64_t uid);

/* --- the fence ------------------------------------------------------------ */

/* One per node, zero-initialised by the caller; fields readable. */
struct ms_plan_fence {
    uint64_t term;        /* highest term accepted; 0: none yet */
    uint64_t coordinator; /* uid of that term's coordinator */
};

/*
 * Checks a VIEW_REQUEST or PLAN of `term` sent by `from_uid` (as
 * authenticated by the transport). Returns 1 and raises the fence when
 * `term` is higher than the fence's, 1 when it is the fence's term and
 * `from_uid` its coordinator; else 0: the message comes from a deposed or
 * rival coordinator and must be ignored (a VIEW_REQUEST answered with
 * STALE_TERM carrying f->term). A node about to become coordinator picks a
 * term above f->term.
 */
int ms_plan_fence_check(struct ms_plan_fence *f, uint64_t term,
                        uint64_t from_uid);

/* --- CONTROL messages ----------------------------------------------------- */

enum ms_plan_msg_kind {
    MS_PLAN_MSG_VIEW_REQUEST = 1,
    MS_PLAN_MSG_VIEW = 2,
    MS_PLAN_MSG_VIEW_DONE = 3,
    MS_PLAN_MSG_STALE_TERM = 4,
    MS_PLAN_MSG_PLAN = 5,
    MS_PLAN_MSG_ALLOC = 6,
    MS_PLAN_MSG_ALLOC_REFUSED = 7,
    MS_PLAN_MSG_REGISTER_REFUSED = 8,
    MS_PLAN_MSG_HANDOFF = 9,
    MS_PLAN_MSG_FENCE = 10,
    MS_PLAN_MSG_FENCED = 11,
    MS_PLAN_MSG_STOP = 12,
    MS_PLAN_MSG_STOPPED = 13
};

/* One plan entry: shard -> owner at generation gen. */
struct ms_plan_entry {
    uint32_t shard;
    uint64_t owner;
    uint64_t gen;
};

/*
 * A CONTROL message. Fields a kind does not carry are ignored by the
 * encoder and zero/empty after decoding. Strings are NUL-terminated.
 */
struct ms_plan_msg {
    int kind;                  /* enum ms_plan_msg_kind */
    uint64_t term;
    char type[MS_PLAN_MAX_TYPE_NAME + 1];
    uint32_t shard_count;      /* "shards" */
    uint32_t shard;            /* "shard" */
    char fingerprint[MS_PLAN_MAX_FINGERPRINT + 1]; /* "fp" */
    char code[MS_PLAN_MAX_CODE + 1];
    char reason[MS_PLAN_MAX_REASON + 1];
    /* "e": to encode, borrowed from the caller; after decoding, owned by
     * the message and released by ms_plan_msg_free() */
    struct ms_plan_entry *entries;
    size_t nentries;
};

/* A static name of a kind ("view_request", ...), "unknown" for others. */
const char *ms_plan_msg_kind_name(int kind);

/*
 * Encodes `m` (borrowed). On success returns 0 and stores a malloc'd,
 * NUL-terminated text in *out (caller frees) and its length in *len.
 * Returns MS_EINVAL when a field breaks the format's rules above (unknown
 * kind, bad type name or code, out-of-range number, unsorted entries),
 * MS_E2BIG when the text would exceed MS_PLAN_MSG_MAX bytes or the entries
 * MS_PLAN_MSG_MAX_ENTRIES, MS_ENOMEM; then *out is NULL.
 */
int ms_plan_msg_encode(const struct ms_plan_msg *m, char **out, size_t *len);

/*
 * Decodes `len` bytes at `buf` (borrowed, need not be NUL-terminated) into
 * *out (caller-owned; release with ms_plan_msg_free() after success). The
 * text must be exactly as ms_plan_msg_encode() writes it. Returns 0,
 * MS_EBADJSON for anything else (other spacing, keys or order, unknown
 * kind, bad escapes, numbers out of range, unsorted or out-of-range
 * entries), MS_E2BIG for a text above MS_PLAN_MSG_MAX, a string above its
 * limit or too many entries, or MS_ENOMEM. On failure *out holds nothing
 * to free.
 */
int ms_plan_msg_decode(const char *buf, size_t len, struct ms_plan_msg *out);

/* Frees the entries a decoded message owns. Safe on a zeroed message. */
void ms_plan_msg_free(struct ms_plan_msg *m);

/*
 * Encodes the next "view" message of plan `p` (borrowed) for the answer
 * to a VIEW_REQUEST of `term`: the type's name and settings fingerprint
 * (borrowed), and the entries with a generation > 0 from shard *cursor on,
 * at most MS_PLAN_MSG_MAX_ENTRIES of them. Advances *cursor past the
 * shards it covered (to the shard count once the type is complete). Start
 * with *cursor = 0 and call until *cursor reaches ms_plan_shard_count(p);
 * the first call always yields a message, even with no entries, since the
 * view also registers the type. After the last type, send one
 * "view_done". Returns 0 with *out and *len as for ms_plan_msg_encode(),
 * or its errors (MS_EINVAL for a bad name or fingerprint).
 */
int ms_plan_view_encode(const struct ms_plan *p, const char *type,
                        const char *fingerprint, uint64_t term,
                        uint32_t *cursor, char **out, size_t *len);

#endif
