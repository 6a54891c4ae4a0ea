/*
 * coordinator.c -- the coordinator's state machine (sans-IO). See
 * coordinator.h for the model and plan.h for the messages.
 *
 * Memory: the members live in one array sorted by uid (binary search;
 * insertion and removal shift it, cheap at <= 1,024 members), each with a
 * bit per registered type and a count of owned shards per type (kept up to
 * date once the plan is published, so a strategy's view costs
 * O(members)). Each known type holds two arrays, owner and generation per
 * shard. Actions wait in a queue that grows as needed.
 */
#include "coordinator.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum state { INERT, COLLECTING, READY };

enum phase { FENCING, STOPPING };

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

/* --- small helpers ------------------------------------------------------- */

static uint64_t bit(int ti)
{
    return (uint64_t)1 << ti;
}

static struct member *find_member(const struct ms_coord *c, uint64_t uid)
{
    size_t lo = 0, hi = c->nmembers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->members[mid].uid == uid)
            return &c->members[mid];
        if (c->members[mid].uid < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int find_type(const struct ms_coord *c, const char *name)
{
    for (int i = 0; i < c->ntypes; i++)
        if (strcmp(c->types[i].name, name) == 0)
            return i;
    return -1;
}

static int type_alloc(struct ctype *t, uint32_t shard_count)
{
    t->owner = calloc(shard_count, sizeof *t->owner);
    t->gen = calloc(shard_count, sizeof *t->gen);
    t->moving = calloc(shard_count, sizeof *t->moving);
    if (!t->owner || !t->gen || !t->moving) {
        free(t->owner);
        free(t->gen);
        free(t->moving);
        t->owner = t->gen = NULL;
        t->moving = NULL;
        return MS_ENOMEM;
    }
    t->shard_count = shard_count;
    t->known = 1;
    return 0;
}

static void type_forget(struct ctype *t)
{
    free(t->owner);
    free(t->gen);
    free(t->moving);
    t->owner = t->gen = NULL;
    t->moving = NULL;
    t->known = 0;
    t->shard_count = 0;
    t->fp[0] = '\0';
}

static int eligible(const struct ms_coord *c, int ti, uint64_t uid)
{
    return !c->eligible || c->eligible(c->data, ti, uid);
}

static int can_host(const struct ms_coord *c, int ti,
                    const struct member *mb)
{
    return mb && (mb->types & bit(ti)) && eligible(c, ti, mb->uid);
}

/* May `owner` keep a shard of type ti? Gone members may not; neither may
 * members that answered this term without registering the type, nor
 * ineligible ones. A member that has not answered keeps its shards: it may
 * merely be unreachable, which relocates nothing. */
static int may_keep(const struct ms_coord *c, int ti, uint64_t owner)
{
    const struct member *mb = find_member(c, owner);
    if (!mb || !eligible(c, ti, owner))
        return 0;
    return !mb->view_done || (mb->types & bit(ti));
}

static void set_owner(struct ms_coord *c, int ti, uint32_t s, uint64_t owner,
                      uint64_t gen)
{
    struct ctype *t = &c->types[ti];
    struct member *mb;
    if (t->owner[s] && (mb = find_member(c, t->owner[s])) && mb->owned[ti])
        mb->owned[ti]--;
    if (owner && (mb = find_member(c, owner)))
        mb->owned[ti]++;
    t->owner[s] = owner;
    t->gen[s] = gen;
    if (gen > c->generation)
        c->generation = gen;
}

static void recount(struct ms_coord *c)
{
    for (size_t i = 0; i < c->nmembers; i++)
        memset(c->members[i].owned, 0, sizeof c->members[i].owned);
    for (int ti = 0; ti < c->ntypes; ti++) {
        struct ctype *t = &c->types[ti];
        if (!t->known)
            continue;
        for (uint32_t s = 0; s < t->shard_count; s++) {
            struct member *mb;
            if (t->owner[s] && (mb = find_member(c, t->owner[s])))
                mb->owned[ti]++;
        }
    }
}

/* The last generation this term may issue. */
static uint64_t gen_limit(const struct ms_coord *c)
{
    return ((c->term + 1) << 32) - 1;
}

/* --- actions ------------------------------------------------------------- */

static int push(struct ms_coord *c, const struct ms_coord_action *a)
{
    if (c->qhead > 0 && c->qhead == c->qlen)
        c->qhead = c->qlen = 0;
    if (c->qlen == c->qcap) {
        if (c->qhead > 0) {
            memmove(c->q, c->q + c->qhead,
                    (c->qlen - c->qhead) * sizeof *c->q);
            c->qlen -= c->qhead;
            c->qhead = 0;
        } else {
            size_t cap = c->qcap ? c->qcap * 2 : 16;
            struct ms_coord_action *nq = realloc(c->q, cap * sizeof *nq);
            if (!nq)
                return MS_ENOMEM;
            c->q = nq;
            c->qcap = cap;
        }
    }
    c->q[c->qlen++] = *a;
    return 0;
}

/* Encodes `m` and queues it for `uid` (0: broadcast). */
static int emit(struct ms_coord *c, uint64_t uid, const struct ms_plan_msg *m)
{
    struct ms_coord_action a = {0};
    int rc = ms_plan_msg_encode(m, &a.payload, &a.len);
    if (rc)
        return rc;
    a.kind = uid ? MS_COORD_SEND : MS_COORD_BROADCAST;
    a.uid = uid;
    a.term = c->term;
    rc = push(c, &a);
    if (rc)
        free(a.payload);
    return rc;
}

static int emit_term(struct ms_coord *c, uint64_t uid, int kind)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.term = c->term;
    return emit(c, uid, &m);
}

static int __attribute__((format(printf, 6, 7)))
refuse_alloc(struct ms_coord *c, uint64_t uid, const char *type,
             uint32_t shard, const char *code, const char *fmt, ...)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_ALLOC_REFUSED;
    m.term = c->term;
    snprintf(m.type, sizeof m.type, "%s", type);
    m.shard = shard;
    snprintf(m.code, sizeof m.code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.reason, sizeof m.reason, fmt, ap);
    va_end(ap);
    return emit(c, uid, &m);
}

/* Queues messages of `kind` ("plan", "handoff", "stop") for type ti
 * carrying entries e[0..n) (ascending shards), in chunks of
 * MS_PLAN_MSG_MAX_ENTRIES, to `uid` (0: broadcast). */
static int emit_kind(struct ms_coord *c, uint64_t uid, int ti, int kind,
                     struct ms_plan_entry *e, size_t n)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.term = c->term;
    memcpy(m.type, c->types[ti].name, sizeof m.type);
    m.shard_count = c->types[ti].shard_count;
    for (size_t off = 0; off < n; off += MS_PLAN_MSG_MAX_ENTRIES) {
        m.entries = e + off;
        m.nentries = n - off < MS_PLAN_MSG_MAX_ENTRIES
                         ? n - off
                         : MS_PLAN_MSG_MAX_ENTRIES;
        int rc = emit(c, uid, &m);
        if (rc)
            return rc;
    }
    return 0;
}

static int emit_entries(struct ms_coord *c, uint64_t uid, int ti,
                        struct ms_plan_entry *e, size_t n)
{
    return emit_kind(c, uid, ti, MS_PLAN_MSG_PLAN, e, n);
}

/* Queues a log line for the operator. */
static void __attribute__((format(printf, 2, 3)))
note(struct ms_coord *c, const char *fmt, ...)
{
    struct ms_coord_action a = {0};
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    a.kind = MS_COORD_NOTE;
    a.term = c->term;
    a.len = strlen(line);
    a.payload = malloc(a.len + 1);
    if (!a.payload)
        return;
    memcpy(a.payload, line, a.len + 1);
    if (push(c, &a) < 0)
        free(a.payload);
}

/* Forgets every move (this object stops coordinating); a next
 * coordinator finishes nothing and rolls everything back by publishing
 * the regions' views at a higher generation. */
static void clear_moves(struct ms_coord *c)
{
    c->mst.aborted += c->nmoves;
    for (size_t i = 0; i < c->nmoves; i++) {
        struct ctype *t = &c->types[c->moves[i].ti];
        if (t->moving)
            t->moving[c->moves[i].shard] = 0;
        free(c->moves[i].need);
    }
    c->nmoves = 0;
}

/* Queues the full plan of type ti (every shard with a generation). */
static int emit_full(struct ms_coord *c, uint64_t uid, int ti)
{
    struct ctype *t = &c->types[ti];
    if (!t->known)
        return 0;
    struct ms_plan_entry *e = malloc(t->shard_count * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t n = 0;
    for (uint32_t s = 0; s < t->shard_count; s++)
        if (t->gen[s])
            e[n++] = (struct ms_plan_entry){s, t->owner[s], t->gen[s]};
    int rc = emit_entries(c, uid, ti, e, n);
    free(e);
    return rc;
}

static int depose(struct ms_coord *c, uint64_t term)
{
    if (term > c->max_term)
        c->max_term = term;
    if (c->state == INERT)
        return 0;
    c->state = INERT;
    clear_moves(c);
    struct ms_coord_action a = {0};
    a.kind = MS_COORD_DEPOSED;
    a.term = term;
    return push(c, &a);
}

/* --- lifecycle ----------------------------------------------------------- */

int ms_coord_new(struct ms_coord **out, const struct ms_coord_config *cfg)
{
    *out = NULL;
    if (!cfg->self_uid || !cfg->allocate || cfg->ntypes < 0 ||
        cfg->ntypes > MS_PLAN_MAX_TYPES || (cfg->ntypes && !cfg->types))
        return MS_EINVAL;
    struct ms_coord *c = calloc(1, sizeof *c);
    if (!c)
        return MS_ENOMEM;
    c->self_uid = cfg->self_uid;
    c->view_timeout_ms =
        cfg->view_timeout_ms ? cfg->view_timeout_ms : MS_COORD_VIEW_TIMEOUT_MS;
    c->allocate = cfg->allocate;
    c->eligible = cfg->eligible;
    c->rebalance = cfg->rebalance;
    c->data = cfg->data;
    c->handoff_timeout_ms = cfg->handoff_timeout_ms
                                ? cfg->handoff_timeout_ms
                                : MS_COORD_HANDOFF_TIMEOUT_MS;
    c->rebalance_interval_ms = cfg->rebalance_interval_ms
                                   ? cfg->rebalance_interval_ms
                                   : MS_COORD_REBALANCE_MS;
    c->hosts = malloc(MS_COORD_MAX_MEMBERS * sizeof *c->hosts);
    if (!c->hosts) {
        ms_coord_free(c);
        return MS_ENOMEM;
    }
    for (int i = 0; i < cfg->ntypes; i++) {
        const struct ms_coord_type *ty = &cfg->types[i];
        /* validate the name with the codec's own rules */
        struct ms_plan_msg probe;
        memset(&probe, 0, sizeof probe);
        probe.kind = MS_PLAN_MSG_ALLOC;
        probe.term = 1;
        char *text = NULL;
        int bad = !ty->name || !ty->fingerprint ||
                  strlen(ty->name) > MS_PLAN_MAX_TYPE_NAME ||
                  strlen(ty->fingerprint) > MS_PLAN_MAX_FINGERPRINT ||
                  ty->shard_count == 0 ||
                  ty->shard_count > MS_PLAN_MAX_SHARDS;
        if (!bad) {
            memcpy(probe.type, ty->name, strlen(ty->name) + 1);
            bad = ms_plan_msg_encode(&probe, &text, NULL) != 0 ||
                  find_type(c, ty->name) >= 0;
            free(text);
        }
        if (bad) {
            ms_coord_free(c);
            return MS_EINVAL;
        }
        struct ctype *t = &c->types[c->ntypes];
        memcpy(t->name, ty->name, strlen(ty->name) + 1);
        memcpy(t->fp, ty->fingerprint, strlen(ty->fingerprint) + 1);
        t->own = 1;
        c->ntypes++;
        if (type_alloc(t, ty->shard_count) != 0) {
            ms_coord_free(c);
            return MS_ENOMEM;
        }
    }
    *out = c;
    return 0;
}

void ms_coord_free(struct ms_coord *c)
{
    if (!c)
        return;
    clear_moves(c);
    free(c->moves);
    for (int i = 0; i < c->ntypes; i++)
        type_forget(&c->types[i]);
    for (size_t i = c->qhead; i < c->qlen; i++)
        free(c->q[i].payload);
    free(c->q);
    free(c->members);
    free(c->hosts);
    free(c);
}

/* --- membership facts ---------------------------------------------------- */

static int add_member(struct ms_coord *c, uint64_t uid, int leaving,
                      uint64_t now_ms)
{
    (void)now_ms;
    if (!uid)
        return MS_EINVAL;
    struct member *mb = find_member(c, uid);
    if (mb) {
        if (leaving)
            mb->leaving = 1;
        return 0;
    }
    if (c->nmembers == MS_COORD_MAX_MEMBERS)
        return MS_E2BIG;
    if (c->nmembers == c->mcap) {
        size_t cap = c->mcap ? c->mcap * 2 : 8;
        struct member *nm = realloc(c->members, cap * sizeof *nm);
        if (!nm)
            return MS_ENOMEM;
        c->members = nm;
        c->mcap = cap;
    }
    size_t i = 0;
    while (i < c->nmembers && c->members[i].uid < uid)
        i++;
    memmove(c->members + i + 1, c->members + i,
            (c->nmembers - i) * sizeof *c->members);
    c->nmembers++;
    mb = &c->members[i];
    memset(mb, 0, sizeof *mb);
    mb->uid = uid;
    mb->leaving = leaving;
    mb->reachable = 1;
    if (c->state != INERT)
        return emit_term(c, uid, MS_PLAN_MSG_VIEW_REQUEST);
    return 0;
}

int ms_coord_member_up(struct ms_coord *c, uint64_t uid, uint64_t now_ms)
{
    return add_member(c, uid, 0, now_ms);
}

int ms_coord_member_leaving(struct ms_coord *c, uint64_t uid,
                            uint64_t now_ms)
{
    return add_member(c, uid, 1, now_ms);
}

void ms_coord_member_reachable(struct ms_coord *c, uint64_t uid,
                               int reachable)
{
    struct member *mb = find_member(c, uid);
    if (mb)
        mb->reachable = reachable != 0;
}

static int publish(struct ms_coord *c, uint64_t now_ms);
static int entry_cmp(const void *a, const void *b);

/* Sends member `uid` the HANDOFF of the moves of type ti under way (only
 * shard `only`'s when >= 0), and makes the moves still waiting for fences
 * wait for its fence too: a member that did not hear of a move when it
 * began (it came later) must not route to the old owner meanwhile. */
static int tell_moves(struct ms_coord *c, uint64_t uid, int ti, int64_t only)
{
    if (!c->nmoves)
        return 0;
    struct ms_plan_entry *e = malloc(c->nmoves * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < c->nmoves; i++) {
        struct move *mv = &c->moves[i];
        if (mv->ti != ti || (only >= 0 && mv->shard != (uint32_t)only))
            continue;
        if (mv->phase == FENCING) {
            size_t j = 0;
            while (j < mv->nneed && mv->need[j] != uid)
                j++;
            if (j == mv->nneed) {
                if (mv->nneed == mv->needcap) {
                    size_t cap = mv->needcap * 2 + 1;
                    uint64_t *nn = realloc(mv->need, cap * sizeof *nn);
                    if (!nn) {
                        free(e);
                        return MS_ENOMEM;
                    }
                    mv->need = nn;
                    mv->needcap = cap;
                }
                mv->need[mv->nneed++] = uid;
            }
        }
        e[k++] = (struct ms_plan_entry){mv->shard, mv->from, mv->hgen};
    }
    int rc = 0;
    if (k) {
        qsort(e, k, sizeof *e, entry_cmp);
        rc = emit_kind(c, uid, ti, MS_PLAN_MSG_HANDOFF, e, k);
    }
    free(e);
    return rc;
}

static void forget_move(struct ms_coord *c, int ti, uint32_t shard);
static int on_fenced_by(struct ms_coord *c, uint64_t region);
struct move;
static int fenced(struct ms_coord *c, struct move *mv, uint64_t region);

/* Collecting: publish once every known member has answered. */
static int check_collected(struct ms_coord *c, uint64_t now_ms)
{
    if (c->state != COLLECTING)
        return 0;
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].view_done)
            return 0;
    return publish(c, now_ms);
}

/*
 * Unassigns, at one new generation, every shard of type ti whose owner
 * may no longer keep it (when `only` is non-zero: only that owner's), and
 * broadcasts the change.
 */
static int sweep_owner(struct ms_coord *c, int ti, uint64_t only, int all);

static int sweep(struct ms_coord *c, int ti, uint64_t only)
{
    return sweep_owner(c, ti, only, 0);
}

/* With `all`, every shard of `only` goes, whether it may keep it or not
 * (a leaving member nobody can take over from). */
static int sweep_owner(struct ms_coord *c, int ti, uint64_t only, int all)
{
    struct ctype *t = &c->types[ti];
    if (!t->known)
        return 0;
    struct ms_plan_entry *e = NULL;
    size_t n = 0;
    uint64_t g = 0;
    for (uint32_t s = 0; s < t->shard_count; s++) {
        uint64_t o = t->owner[s];
        if (!o || (only && o != only) || (!all && may_keep(c, ti, o)))
            continue;
        if (!e) {
            if (c->generation >= gen_limit(c))
                return 0; /* no generation left: keep; the caller re-terms */
            g = ++c->generation;
            e = malloc(t->shard_count * sizeof *e);
            if (!e)
                return MS_ENOMEM;
        }
        set_owner(c, ti, s, 0, g);
        forget_move(c, ti, s); /* the new generation ends it everywhere */
        e[n++] = (struct ms_plan_entry){s, 0, g};
    }
    int rc = n ? emit_entries(c, 0, ti, e, n) : 0;
    free(e);
    return rc;
}

int ms_coord_member_removed(struct ms_coord *c, uint64_t uid,
                            uint64_t now_ms)
{
    c->now_ms = now_ms;
    struct member *mb = find_member(c, uid);
    if (!mb)
        return 0;
    /* a gone region fences nothing: stop waiting for it */
    int rc = on_fenced_by(c, uid);
    if (rc)
        return rc;
    mb = find_member(c, uid);
    size_t i = (size_t)(mb - c->members);
    memmove(c->members + i, c->members + i + 1,
            (c->nmembers - i - 1) * sizeof *c->members);
    c->nmembers--;
    if (c->state == COLLECTING)
        return check_collected(c, now_ms);
    if (c->state == READY)
        for (int ti = 0; ti < c->ntypes; ti++) {
            int rc = sweep(c, ti, uid);
            if (rc)
                return rc;
        }
    return 0;
}

/* --- role ---------------------------------------------------------------- */

int ms_coord_become(struct ms_coord *c, uint64_t term, uint64_t now_ms)
{
    if (term == 0 || term > MS_PLAN_MAX_TERM || term <= c->max_term ||
        term <= c->term)
        return MS_EINVAL;
    clear_moves(c);
    for (int i = 0; i < c->ntypes; i++) {
        struct ctype *t = &c->types[i];
        if (t->own) {
            memset(t->owner, 0, t->shard_count * sizeof *t->owner);
            memset(t->gen, 0, t->shard_count * sizeof *t->gen);
            memset(t->moving, 0, t->shard_count * sizeof *t->moving);
        } else {
            type_forget(t);
        }
    }
    for (size_t i = 0; i < c->nmembers; i++) {
        c->members[i].view_done = 0;
        c->members[i].types = 0;
        memset(c->members[i].owned, 0, sizeof c->members[i].owned);
    }
    c->term = c->max_term = term;
    c->state = COLLECTING;
    c->due_ms = now_ms + c->view_timeout_ms;
    return emit_term(c, 0, MS_PLAN_MSG_VIEW_REQUEST);
}

void ms_coord_resign(struct ms_coord *c)
{
    c->state = INERT;
    clear_moves(c);
}

void ms_coord_observe_term(struct ms_coord *c, uint64_t term)
{
    if (term > c->term && c->state != INERT)
        depose(c, term);
    else if (term > c->max_term)
        c->max_term = term;
}

/*
 * Stamps every shard of every known type with one new generation and
 * broadcasts the whole plan; from then on allocations are served.
 */
static int publish(struct ms_coord *c, uint64_t now_ms)
{
    uint64_t g = c->generation > (c->term << 32) ? c->generation
                                                 : c->term << 32;
    if (g >= gen_limit(c))
        return depose(c, c->term + 1); /* impossible unless views lie */
    c->generation = ++g;
    for (int ti = 0; ti < c->ntypes; ti++) {
        struct ctype *t = &c->types[ti];
        if (!t->known)
            continue;
        for (uint32_t s = 0; s < t->shard_count; s++) {
            if (t->owner[s] && !may_keep(c, ti, t->owner[s]))
                t->owner[s] = 0;
            t->gen[s] = g;
        }
    }
    recount(c);
    c->state = READY;
    c->due_ms = now_ms + c->view_timeout_ms;
    c->next_round_ms = now_ms + c->rebalance_interval_ms;
    for (int ti = 0; ti < c->ntypes; ti++) {
        int rc = emit_full(c, 0, ti);
        if (rc)
            return rc;
    }
    struct ms_coord_action a = {0};
    a.kind = MS_COORD_READY;
    a.term = c->term;
    return push(c, &a);
}

/* --- registration and views ---------------------------------------------- */

/*
 * Registers member `mb` for the type of view `m`. Returns the type index,
 * -1 when refused (REGISTER_REFUSED queued), or a negative MS_E* code
 * below -1.
 */
static int register_type(struct ms_coord *c, struct member *mb,
                         const struct ms_plan_msg *m)
{
    struct ms_plan_msg r;
    memset(&r, 0, sizeof r);
    r.kind = MS_PLAN_MSG_REGISTER_REFUSED;
    r.term = c->term;
    memcpy(r.type, m->type, sizeof r.type);
    int ti = find_type(c, m->type);
    if (ti < 0 && c->ntypes == MS_PLAN_MAX_TYPES) {
        snprintf(r.reason, sizeof r.reason,
                 "entity type '%s' refused: the cluster already has the "
                 "maximum of %d entity types",
                 m->type, MS_PLAN_MAX_TYPES);
    } else {
        if (ti < 0) {
            ti = c->ntypes++;
            memset(&c->types[ti], 0, sizeof c->types[ti]);
            memcpy(c->types[ti].name, m->type, sizeof c->types[ti].name);
        }
        struct ctype *t = &c->types[ti];
        if (!t->known) {
            int rc = type_alloc(t, m->shard_count);
            if (rc)
                return rc;
            memcpy(t->fp, m->fingerprint, sizeof t->fp);
        }
        if (strcmp(t->fp, m->fingerprint) != 0) {
            snprintf(r.reason, sizeof r.reason,
                     "entity type '%s' refused: its settings differ from "
                     "the cluster's (fingerprint \"%.900s\" here, "
                     "\"%.900s\" in the cluster)",
                     m->type, m->fingerprint, t->fp);
        } else if (t->shard_count != m->shard_count) {
            snprintf(r.reason, sizeof r.reason,
                     "entity type '%s' refused: %lu shards here, %lu in "
                     "the cluster",
                     m->type, (unsigned long)m->shard_count,
                     (unsigned long)t->shard_count);
        } else {
            mb->types |= bit(ti);
            return ti;
        }
        mb->types &= ~bit(ti);
    }
    int rc = emit(c, mb->uid, &r);
    return rc ? rc : -1;
}

static int on_view(struct ms_coord *c, struct member *mb,
                   const struct ms_plan_msg *m)
{
    int ti = register_type(c, mb, m);
    if (ti < -1)
        return ti;
    if (ti < 0)
        return 0; /* refused: its entries describe another plan */
    struct ctype *t = &c->types[ti];
    /* evidence of a rival first: then nothing is merged */
    for (size_t i = 0; i < m->nentries; i++) {
        uint64_t g = m->entries[i].gen;
        if (g > c->generation && MS_PLAN_GEN_TERM(g) >= c->term)
            return depose(c, MS_PLAN_GEN_TERM(g));
    }
    struct ms_plan_entry *changed = NULL;
    size_t n = 0;
    uint64_t g = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct ms_plan_entry *e = &m->entries[i];
        if (e->gen <= t->gen[e->shard])
            continue;
        if (c->state == COLLECTING) {
            t->owner[e->shard] = e->owner;
            t->gen[e->shard] = e->gen;
            if (e->gen > c->generation)
                c->generation = e->gen;
            continue;
        }
        /* READY: a shard this term never stamped (a type first registered
         * after the publish): adopt the entry under a new generation */
        if (!changed) {
            if (c->generation >= gen_limit(c))
                return 0;
            g = ++c->generation;
            changed = malloc(m->nentries * sizeof *changed);
            if (!changed)
                return MS_ENOMEM;
        }
        uint64_t o = may_keep(c, ti, e->owner) ? e->owner : 0;
        set_owner(c, ti, e->shard, o, g);
        changed[n++] = (struct ms_plan_entry){e->shard, o, g};
    }
    int rc = n ? emit_entries(c, 0, ti, changed, n) : 0;
    free(changed);
    return rc;
}

static int tell_moves(struct ms_coord *c, uint64_t uid, int ti,
                      int64_t only);

static int on_view_done(struct ms_coord *c, struct member *mb,
                        uint64_t now_ms)
{
    int was_done = mb->view_done;
    mb->view_done = 1;
    if (c->state == COLLECTING)
        return check_collected(c, now_ms);
    /* READY: a late answer. Shards it holds but no longer may lose their
     * owner, then it gets the whole plan it may have missed. */
    uint64_t uid = mb->uid;
    for (int ti = 0; ti < c->ntypes; ti++) {
        int rc = sweep(c, ti, uid);
        if (rc)
            return rc;
    }
    if (was_done)
        return 0;
    for (int ti = 0; ti < c->ntypes; ti++) {
        /* the moves under way first: it must not route to their shards
         * until they end (a member that came after they began) */
        int rc = tell_moves(c, uid, ti, -1);
        if (!rc)
            rc = emit_full(c, uid, ti);
        if (rc)
            return rc;
    }
    return 0;
}

/* --- allocation ---------------------------------------------------------- */

/* Fills c->hosts with the members that can host type ti; their number. */
static size_t hosts_of(struct ms_coord *c, int ti)
{
    size_t nh = 0;
    for (size_t i = 0; i < c->nmembers; i++) {
        const struct member *mb = &c->members[i];
        if (!can_host(c, ti, mb))
            continue;
        c->hosts[nh++] = (struct ms_coord_host){mb->uid, mb->leaving,
                                                mb->reachable, mb->owned[ti]};
    }
    return nh;
}

/* Chooses the owner of unassigned shard s of type ti with the allocate
 * callback. Returns it, or 0 with *code ("no_host", "strategy") and a
 * reason in err. */
static uint64_t place(struct ms_coord *c, int ti, uint32_t s,
                      const char **code, char *err, size_t errlen)
{
    struct ctype *t = &c->types[ti];
    size_t nh = hosts_of(c, ti);
    /* a leaving member takes no new shard while another can */
    size_t staying = 0;
    for (size_t i = 0; i < nh; i++)
        if (!c->hosts[i].leaving)
            c->hosts[staying++] = c->hosts[i];
    if (staying)
        nh = staying;
    if (nh == 0) {
        *code = "no_host";
        snprintf(err, errlen, "no member can host entity type '%s'",
                 t->name);
        return 0;
    }
    struct ms_coord_view v = {ti, t->name, t->shard_count, t->owner,
                              c->hosts, nh, t->moving};
    char why[200] = "";
    uint64_t uid = c->allocate(c->data, ti, s, &v, why, sizeof why);
    *code = "strategy";
    if (!uid) {
        snprintf(err, errlen, "the allocation strategy of '%s' failed: %s",
                 t->name, why[0] ? why : "no owner chosen");
        return 0;
    }
    for (size_t i = 0; i < nh; i++)
        if (c->hosts[i].uid == uid)
            return uid;
    snprintf(err, errlen, "the allocation strategy of '%s' chose %016llx, "
             "which cannot host it", t->name, (unsigned long long)uid);
    return 0;
}

static int on_alloc(struct ms_coord *c, uint64_t from,
                    const struct ms_plan_msg *m)
{
    const char *tn = m->type;
    uint32_t s = m->shard;
    if (m->term > c->max_term && c->state == INERT)
        c->max_term = m->term;
    if (m->term > c->term && c->state != INERT) {
        int rc = depose(c, m->term);
        if (rc)
            return rc;
    }
    if (c->state == INERT)
        return refuse_alloc(c, from, tn, s, "not_coordinator",
                            "this node is not the coordinator");
    if (c->state == COLLECTING)
        return refuse_alloc(c, from, tn, s, "not_ready",
                            "the coordinator of term %llu is still "
                            "collecting the regions' views",
                            (unsigned long long)c->term);
    int ti = find_type(c, tn);
    if (ti < 0 || !c->types[ti].known)
        return refuse_alloc(c, from, tn, s, "unknown_type",
                            "no member registered entity type '%s'", tn);
    struct ctype *t = &c->types[ti];
    if (s >= t->shard_count)
        return refuse_alloc(c, from, tn, s, "bad_shard",
                            "entity type '%s' has %lu shards", tn,
                            (unsigned long)t->shard_count);
    if (t->owner[s]) {
        /* a moving shard: the asker learns of the move first */
        int rc = t->moving[s] ? tell_moves(c, from, ti, s) : 0;
        struct ms_plan_entry e = {s, t->owner[s], t->gen[s]};
        return rc ? rc : emit_entries(c, from, ti, &e, 1);
    }
    if (c->generation >= gen_limit(c))
        return refuse_alloc(c, from, tn, s, "exhausted",
                            "term %llu has issued all its generations",
                            (unsigned long long)c->term);
    char err[256] = "";
    const char *code = "strategy";
    uint64_t uid = place(c, ti, s, &code, err, sizeof err);
    if (!uid)
        return refuse_alloc(c, from, tn, s, code, "%s", err);
    uint64_t g = ++c->generation;
    set_owner(c, ti, s, uid, g);
    struct ms_plan_entry e = {s, uid, g};
    return emit_entries(c, 0, ti, &e, 1);
}

/* --- moves ---------------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b)
{
    const struct ms_plan_entry *x = a, *y = b;
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static struct move *find_move(struct ms_coord *c, int ti, uint32_t shard)
{
    if (!c->types[ti].moving || !c->types[ti].moving[shard])
        return NULL;
    for (size_t i = 0; i < c->nmoves; i++)
        if (c->moves[i].ti == ti && c->moves[i].shard == shard)
            return &c->moves[i];
    return NULL;
}

static void drop_move(struct ms_coord *c, struct move *mv)
{
    c->types[mv->ti].moving[mv->shard] = 0;
    free(mv->need);
    *mv = c->moves[--c->nmoves];
}

static void forget_move(struct ms_coord *c, int ti, uint32_t shard)
{
    struct move *mv = find_move(c, ti, shard);
    if (mv) {
        c->mst.aborted++;
        drop_move(c, mv);
    }
}

/* Region `region` is gone: it no longer holds up any move. Moves that
 * then have every fence go on to STOP. */
static int on_fenced_by(struct ms_coord *c, uint64_t region)
{
    for (int ti = 0; ti < c->ntypes; ti++) {
        struct ms_plan_entry *e = NULL;
        size_t k = 0;
        uint64_t from = 0;
        /* one STOP per old owner: take them one owner at a time */
        for (;;) {
            from = 0;
            k = 0;
            for (size_t i = 0; i < c->nmoves; i++) {
                struct move *mv = &c->moves[i];
                if (mv->ti != ti || mv->phase != FENCING ||
                    (from && mv->from != from) || !fenced(c, mv, region))
                    continue;
                if (!e && !(e = malloc(c->nmoves * sizeof *e)))
                    return MS_ENOMEM;
                from = mv->from;
                e[k++] = (struct ms_plan_entry){mv->shard, from, mv->hgen};
            }
            if (!k)
                break;
            qsort(e, k, sizeof *e, entry_cmp);
            int rc = emit_kind(c, from, ti, MS_PLAN_MSG_STOP, e, k);
            if (rc) {
                free(e);
                return rc;
            }
        }
        free(e);
    }
    return 0;
}

/*
 * Starts moving shards[0..n) (ascending) of type ti: those with an owner
 * and no move under way. All share one handoff generation; one HANDOFF
 * broadcast announces them.
 */
static int start_moves(struct ms_coord *c, int ti, const uint32_t *shards,
                       size_t n, int voluntary, uint64_t now_ms)
{
    struct ctype *t = &c->types[ti];
    if (c->state != READY || !t->known || n == 0)
        return 0;
    struct ms_plan_entry *e = malloc(n * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t k = 0;
    uint64_t hgen = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t s = shards[i];
        if (s >= t->shard_count || !t->owner[s] || t->moving[s])
            continue;
        if (!hgen) {
            if (c->generation >= gen_limit(c))
                break;
            hgen = ++c->generation;
        }
        if (c->nmoves == c->movecap) {
            size_t cap = c->movecap ? c->movecap * 2 : 16;
            struct move *nm = realloc(c->moves, cap * sizeof *nm);
            if (!nm) {
                rc = MS_ENOMEM;
                break;
            }
            c->moves = nm;
            c->movecap = cap;
        }
        struct move *mv = &c->moves[c->nmoves];
        memset(mv, 0, sizeof *mv);
        mv->need = malloc((c->nmembers + 1) * sizeof *mv->need);
        if (!mv->need) {
            rc = MS_ENOMEM;
            break;
        }
        mv->needcap = c->nmembers + 1;
        for (size_t j = 0; j < c->nmembers; j++)
            mv->need[mv->nneed++] = c->members[j].uid;
        mv->ti = ti;
        mv->shard = s;
        mv->from = t->owner[s];
        mv->hgen = hgen;
        mv->started_ms = mv->sent_ms = now_ms;
        mv->deadline_ms = now_ms + c->handoff_timeout_ms;
        mv->phase = FENCING;
        mv->voluntary = voluntary;
        c->nmoves++;
        if (c->nmoves > c->mst.peak)
            c->mst.peak = c->nmoves;
        t->moving[s] = 1;
        c->mst.started++;
        e[k++] = (struct ms_plan_entry){s, mv->from, hgen};
    }
    if (k) {
        int erc = emit_kind(c, 0, ti, MS_PLAN_MSG_HANDOFF, e, k);
        if (erc)
            rc = erc;
    }
    free(e);
    return rc;
}

int ms_coord_move(struct ms_coord *c, int type, uint32_t shard,
                  uint64_t now_ms)
{
    if (c->state != READY || type < 0 || type >= c->ntypes ||
        !c->types[type].known || shard >= c->types[type].shard_count ||
        !c->types[type].owner[shard])
        return MS_EINVAL;
    if (c->types[type].moving[shard])
        return MS_EBUSY;
    return start_moves(c, type, &shard, 1, 1, now_ms);
}

/* The move an answer of old owner `from` names (entry e), if it is in
 * `phase`. */
static struct move *answered(struct ms_coord *c, int ti, uint64_t from,
                             const struct ms_plan_entry *e, int phase)
{
    struct move *mv = find_move(c, ti, e->shard);
    if (!mv || mv->hgen != e->gen || mv->from != from || mv->phase != phase)
        return NULL;
    return mv;
}

/* Region `region` fenced move mv (or is gone). Returns 1 when that was
 * the last fence: the move goes on to STOPPING. */
static int fenced(struct ms_coord *c, struct move *mv, uint64_t region)
{
    for (size_t j = 0; j < mv->nneed; j++)
        if (mv->need[j] == region) {
            mv->need[j] = mv->need[--mv->nneed];
            break;
        }
    if (mv->nneed || mv->phase != FENCING)
        return 0;
    mv->phase = STOPPING;
    mv->sent_ms = c->now_ms;
    return 1;
}

/* A region's fence passed the old owner, which relays it (`from` is the
 * old owner), or a region without a connection to the old owner reports
 * that nothing of its own is on the way there (`from` is the region, as
 * in the entry). Moves whose every region fenced go on to STOP, one
 * message per old owner. */
static int on_fenced(struct ms_coord *c, uint64_t from, int ti,
                     const struct ms_plan_msg *m)
{
    /* twice the entries: the second half sorts out the other owners */
    struct ms_plan_entry *e = malloc((2 * m->nentries + 1) * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct ms_plan_entry *x = &m->entries[i];
        struct move *mv = find_move(c, ti, x->shard);
        if (!mv || mv->hgen != x->gen || mv->phase != FENCING ||
            (mv->from != from && x->owner != from))
            continue;
        if (fenced(c, mv, x->owner))
            e[k++] = (struct ms_plan_entry){mv->shard, mv->from, mv->hgen};
    }
    int rc = 0;
    while (k && !rc) {
        /* the entries of the first old owner left, in shard order */
        uint64_t to = e[0].owner;
        size_t n = 0, rest = 0;
        for (size_t i = 0; i < k; i++) {
            if (e[i].owner == to)
                e[n++] = e[i];
            else
                e[k + rest++] = e[i]; /* k + rest < 2 * nentries */
        }
        rc = emit_kind(c, to, ti, MS_PLAN_MSG_STOP, e, n);
        memmove(e, e + k, rest * sizeof *e);
        k = rest;
    }
    free(e);
    return rc;
}

/* Ends move mv: the shard goes to `owner` (0: unassigned) at a new
 * generation, stored in *out for the caller's broadcast. */
static void end_move(struct ms_coord *c, struct move *mv, uint64_t owner,
                     struct ms_plan_entry *out)
{
    uint64_t g = ++c->generation;
    set_owner(c, mv->ti, mv->shard, owner, g);
    *out = (struct ms_plan_entry){mv->shard, owner, g};
    drop_move(c, mv);
}

/* The old owner stopped the shards of `m`: place each and publish. */
static int on_stopped(struct ms_coord *c, uint64_t from, int ti,
                      const struct ms_plan_msg *m)
{
    struct ms_plan_entry *e = malloc((m->nentries + 1) * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        uint32_t s = m->entries[i].shard;
        struct move *mv = answered(c, ti, from, &m->entries[i], STOPPING);
        if (!mv || c->generation + 1 >= gen_limit(c))
            continue;
        /* the strategy sees the shard unassigned */
        set_owner(c, ti, s, 0, c->types[ti].gen[s]);
        char err[256] = "";
        const char *code = "strategy";
        uint64_t to = place(c, ti, s, &code, err, sizeof err);
        const struct member *fm = find_member(c, from);
        if (to == from && fm && fm->leaving)
            to = 0;
        if (!to)
            note(c, "shard %u of %s was stopped at %016llx and is left "
                 "unassigned: %s", s, c->types[ti].name,
                 (unsigned long long)from, err[0] ? err : "no new owner");
        if (to)
            c->mst.finished++;
        else
            c->mst.aborted++; /* stopped, but placed nowhere */
        end_move(c, mv, to, &e[k++]);
    }
    int rc = k ? emit_entries(c, 0, ti, e, k) : 0;
    free(e);
    return rc;
}

/* Rolls back the moves past their deadline: the old owner keeps the shard
 * (published at a new generation, which ends every region's buffering);
 * a shard whose old owner is gone is published unassigned. */
static int expire_moves(struct ms_coord *c, uint64_t now_ms)
{
    for (int ti = 0; ti < c->ntypes; ti++) {
        struct ms_plan_entry *e = NULL;
        size_t k = 0;
        for (size_t i = 0; i < c->nmoves;) {
            struct move *mv = &c->moves[i];
            if (mv->ti != ti || mv->deadline_ms > now_ms ||
                c->generation + 1 >= gen_limit(c)) {
                i++;
                continue;
            }
            if (!e && !(e = malloc(c->nmoves * sizeof *e)))
                return MS_ENOMEM;
            note(c, "handoff of %s shard %u from %016llx aborted after "
                 "%llu ms: %s", c->types[ti].name, mv->shard,
                 (unsigned long long)mv->from,
                 (unsigned long long)(now_ms - mv->started_ms),
                 mv->phase == FENCING ? "regions did not fence in time"
                                      : "the old owner did not stop in time");
            c->mst.aborted++;
            uint64_t keep = may_keep(c, ti, mv->from) ? mv->from : 0;
            end_move(c, mv, keep, &e[k++]); /* moves the last into i */
        }
        if (k) {
            qsort(e, k, sizeof *e, entry_cmp);
            int rc = emit_entries(c, 0, ti, e, k);
            free(e);
            if (rc)
                return rc;
        } else {
            free(e);
        }
    }
    return 0;
}

/* Sends again what a move waits for, every MS_COORD_RESEND_MS: the
 * HANDOFF to the regions (one whose fence got lost, say on a connection
 * that was not up yet, fences again; the others' repeats are ignored) or
 * the STOP to the old owner. Repeats are harmless: a region re-fences,
 * an old owner that stopped answers again, and the coordinator counts each
 * fence once. */
static int resend_moves(struct ms_coord *c, uint64_t now_ms)
{
    if (!c->nmoves)
        return 0;
    struct ms_plan_entry *e = malloc(c->nmoves * sizeof *e);
    if (!e)
        return MS_ENOMEM;
    int rc = 0;
    for (int ti = 0; ti < c->ntypes && !rc; ti++) {
        for (int phase = FENCING; phase <= STOPPING && !rc; phase++) {
            for (;;) {
                size_t k = 0;
                uint64_t to = 0;
                for (size_t i = 0; i < c->nmoves; i++) {
                    struct move *mv = &c->moves[i];
                    if (mv->ti != ti || mv->phase != phase ||
                        now_ms - mv->sent_ms < MS_COORD_RESEND_MS ||
                        (phase == STOPPING && to && mv->from != to))
                        continue;
                    to = mv->from;
                    mv->sent_ms = now_ms;
                    e[k++] = (struct ms_plan_entry){mv->shard, mv->from,
                                                    mv->hgen};
                }
                if (!k)
                    break;
                qsort(e, k, sizeof *e, entry_cmp);
                rc = phase == FENCING
                         ? emit_kind(c, 0, ti, MS_PLAN_MSG_HANDOFF, e, k)
                         : emit_kind(c, to, ti, MS_PLAN_MSG_STOP, e, k);
                if (rc || phase == FENCING)
                    break;
            }
        }
    }
    free(e);
    return rc;
}

/* 1 when some member that is not leaving can host type ti. */
static int has_staying_host(const struct ms_coord *c, int ti)
{
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].leaving && can_host(c, ti, &c->members[i]))
            return 1;
    return 0;
}

/* Moves the shards of leaving members away (not voluntary: no policy
 * suppresses them). With no member left to take them, they are given up
 * (unassigned) at once, as nobody could take them over. */
static int move_leavers(struct ms_coord *c, uint64_t now_ms)
{
    /* a region that cannot fence would hold every move to its deadline:
     * wait until every member is reachable again (or downed) */
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].reachable)
            return 0;
    for (size_t i = 0; i < c->nmembers; i++) {
        if (!c->members[i].leaving)
            continue;
        uint64_t uid = c->members[i].uid;
        for (int ti = 0; ti < c->ntypes; ti++) {
            struct ctype *t = &c->types[ti];
            if (!t->known || !c->members[i].owned[ti])
                continue;
            if (!has_staying_host(c, ti)) {
                int rc = sweep_owner(c, ti, uid, 1);
                if (rc)
                    return rc;
                continue;
            }
            uint32_t *sh = malloc(t->shard_count * sizeof *sh);
            if (!sh)
                return MS_ENOMEM;
            size_t n = 0;
            for (uint32_t s = 0; s < t->shard_count; s++)
                if (t->owner[s] == uid && !t->moving[s])
                    sh[n++] = s;
            int rc = start_moves(c, ti, sh, n, 0, now_ms);
            free(sh);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* One rebalance round of type ti through the caller's callback. */
static int round_type(struct ms_coord *c, int ti, uint64_t now_ms)
{
    struct ctype *t = &c->types[ti];
    size_t nh = hosts_of(c, ti);
    if (!t->known || nh == 0)
        return 0;
    uint32_t *out = malloc(t->shard_count * sizeof *out);
    if (!out)
        return MS_ENOMEM;
    /* shards on a live member that may not own them (the strategy's
     * `eligible`: roles, say) move through handoff whatever the policy
     * says: these moves are not voluntary */
    size_t k = 0;
    for (uint32_t s = 0; s < t->shard_count; s++) {
        uint64_t o = t->owner[s];
        if (o && !t->moving[s] && find_member(c, o) && !eligible(c, ti, o))
            out[k++] = s;
    }
    int rc0 = k ? start_moves(c, ti, out, k, 0, now_ms) : 0;
    if (rc0) {
        free(out);
        return rc0;
    }
    struct ms_coord_view v = {ti, t->name, t->shard_count, t->owner,
                              c->hosts, nh, t->moving};
    char err[256] = "";
    int n = c->rebalance(c->data, ti, &v, out, t->shard_count, err,
                         sizeof err);
    int rc = 0;
    if (n < 0) {
        c->mst.strategy_errors++;
        note(c, "rebalance of %s failed: %s", t->name,
             err[0] ? err : "no reason given");
    } else if (n > 0) {
        if ((size_t)n > t->shard_count)
            n = (int)t->shard_count;
        qsort(out, (size_t)n, sizeof *out, u32_cmp);
        rc = start_moves(c, ti, out, (size_t)n, 1, now_ms);
    }
    free(out);
    return rc;
}

static int run_rounds(struct ms_coord *c, uint64_t now_ms)
{
    c->next_round_ms = now_ms + c->rebalance_interval_ms;
    c->reconcile = 0;
    if (!c->rebalance)
        return 0;
    /* no voluntary moves while a member leaves: its shards move first,
     * and a round would count it among the places to balance over */
    for (size_t i = 0; i < c->nmembers; i++)
        if (c->members[i].leaving)
            return 0;
    c->mst.rounds++;
    for (int ti = 0; ti < c->ntypes; ti++) {
        int rc = round_type(c, ti, now_ms);
        if (rc)
            return rc;
    }
    return 0;
}

void ms_coord_reconcile(struct ms_coord *c)
{
    c->reconcile = 1;
}

void ms_coord_move_stats(const struct ms_coord *c,
                         struct ms_coord_move_stats *out)
{
    *out = c->mst;
    out->in_progress = c->nmoves;
}

int ms_coord_move_at(const struct ms_coord *c, size_t i, uint64_t now_ms,
                     struct ms_coord_move_info *out)
{
    if (i >= c->nmoves)
        return 0;
    const struct move *mv = &c->moves[i];
    out->type = mv->ti;
    out->shard = mv->shard;
    out->from = mv->from;
    out->hgen = mv->hgen;
    out->stopping = mv->phase == STOPPING;
    out->voluntary = mv->voluntary;
    out->age_ms = now_ms > mv->started_ms ? now_ms - mv->started_ms : 0;
    out->fences_left = mv->nneed;
    return 1;
}

int ms_coord_leave_done(const struct ms_coord *c, uint64_t uid)
{
    const struct member *mb = find_member(c, uid);
    if (c->state != READY || !mb || !mb->leaving)
        return 0;
    for (int ti = 0; ti < c->ntypes; ti++)
        if (mb->owned[ti])
            return 0;
    for (size_t i = 0; i < c->nmoves; i++)
        if (c->moves[i].from == uid)
            return 0;
    return 1;
}

/* --- events -------------------------------------------------------------- */

/* ms_coord_on_msg() takes decoded messages from anywhere: check what the
 * decoder would have checked before indexing arrays with them. */
static int well_formed(const struct ms_plan_msg *m)
{
    size_t n = strnlen(m->type, sizeof m->type);
    if (n == 0 || n > MS_PLAN_MAX_TYPE_NAME || m->term > MS_PLAN_MAX_TERM)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)m->type[i];
        if (ch < 0x21 || ch > 0x7e || ch == '"' || ch == '\\')
            return 0;
    }
    if (m->kind == MS_PLAN_MSG_ALLOC)
        return m->shard < MS_PLAN_MAX_SHARDS;
    if (m->shard_count == 0 || m->shard_count > MS_PLAN_MAX_SHARDS ||
        m->nentries > MS_PLAN_MSG_MAX_ENTRIES ||
        (m->nentries && !m->entries) ||
        strnlen(m->fingerprint, sizeof m->fingerprint) >
            MS_PLAN_MAX_FINGERPRINT)
        return 0;
    for (size_t i = 0; i < m->nentries; i++)
        if (m->entries[i].shard >= m->shard_count ||
            m->entries[i].gen == 0 || m->entries[i].gen > MS_PLAN_MAX_GEN)
            return 0;
    return 1;
}

int ms_coord_on_msg(struct ms_coord *c, uint64_t from_uid,
                    const struct ms_plan_msg *m, uint64_t now_ms)
{
    c->now_ms = now_ms;
    if ((m->kind == MS_PLAN_MSG_ALLOC || m->kind == MS_PLAN_MSG_VIEW ||
         m->kind == MS_PLAN_MSG_FENCED || m->kind == MS_PLAN_MSG_STOPPED) &&
        !well_formed(m))
        return MS_EINVAL;
    switch (m->kind) {
    case MS_PLAN_MSG_FENCED:
    case MS_PLAN_MSG_STOPPED: {
        if (c->state != READY || m->term != c->term)
            return 0; /* a move of another term: that term is over */
        int ti = find_type(c, m->type);
        if (ti < 0 || !c->types[ti].known ||
            m->shard_count != c->types[ti].shard_count)
            return 0;
        return m->kind == MS_PLAN_MSG_FENCED ? on_fenced(c, from_uid, ti, m)
                                             : on_stopped(c, from_uid, ti, m);
    }
    case MS_PLAN_MSG_ALLOC:
        return on_alloc(c, from_uid, m);
    case MS_PLAN_MSG_STALE_TERM:
        if (c->state != INERT && m->term >= c->term)
            return depose(c, m->term);
        if (m->term > c->max_term)
            c->max_term = m->term;
        return 0;
    case MS_PLAN_MSG_VIEW:
    case MS_PLAN_MSG_VIEW_DONE: {
        if (c->state == INERT)
            return 0;
        if (m->term > c->term)
            return depose(c, m->term);
        struct member *mb = find_member(c, from_uid);
        if (m->term != c->term || !mb)
            return 0;
        if (m->kind == MS_PLAN_MSG_VIEW)
            return on_view(c, mb, m);
        return on_view_done(c, mb, now_ms);
    }
    default:
        return MS_EINVAL;
    }
}

int ms_coord_on_message(struct ms_coord *c, uint64_t from_uid,
                        const char *payload, size_t len, uint64_t now_ms)
{
    struct ms_plan_msg *m = malloc(sizeof *m);
    if (!m)
        return MS_ENOMEM;
    int rc = ms_plan_msg_decode(payload, len, m);
    if (rc == 0) {
        rc = ms_coord_on_msg(c, from_uid, m, now_ms);
        ms_plan_msg_free(m);
    }
    free(m);
    return rc;
}

int ms_coord_tick(struct ms_coord *c, uint64_t now_ms)
{
    c->now_ms = now_ms;
    if (c->state == READY) {
        int rc = expire_moves(c, now_ms);
        if (!rc)
            rc = resend_moves(c, now_ms);
        if (!rc)
            rc = move_leavers(c, now_ms);
        if (!rc && (c->reconcile || now_ms >= c->next_round_ms))
            rc = run_rounds(c, now_ms);
        if (rc)
            return rc;
    }
    if (c->state == INERT || now_ms < c->due_ms)
        return 0;
    if (c->state == COLLECTING)
        return publish(c, now_ms);
    c->due_ms = now_ms + c->view_timeout_ms;
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].view_done) {
            int rc = emit_term(c, c->members[i].uid,
                               MS_PLAN_MSG_VIEW_REQUEST);
            if (rc)
                return rc;
        }
    return 0;
}

static void sooner(uint64_t *best, uint64_t due)
{
    if (due < *best)
        *best = due;
}

int64_t ms_coord_next_deadline(const struct ms_coord *c, uint64_t now_ms)
{
    if (c->state == INERT)
        return -1;
    uint64_t best = UINT64_MAX;
    if (c->state == COLLECTING)
        best = c->due_ms;
    for (size_t i = 0; c->state == READY && i < c->nmembers; i++) {
        if (!c->members[i].view_done)
            sooner(&best, c->due_ms); /* a view request goes out again */
        if (c->members[i].leaving)
            sooner(&best, now_ms);    /* its shards are to move */
    }
    for (size_t i = 0; i < c->nmoves; i++) {
        sooner(&best, c->moves[i].deadline_ms);
        sooner(&best, c->moves[i].sent_ms + MS_COORD_RESEND_MS);
    }
    if (c->state == READY && c->rebalance)
        sooner(&best, c->reconcile ? now_ms : c->next_round_ms);
    if (best == UINT64_MAX)
        return -1;
    return best > now_ms ? (int64_t)(best - now_ms) : 0;
}

int ms_coord_next_action(struct ms_coord *c, struct ms_coord_action *out)
{
    if (c->qhead == c->qlen)
        return 0;
    *out = c->q[c->qhead++];
    return 1;
}

/* --- queries ------------------------------------------------------------- */

int ms_coord_active(const struct ms_coord *c)
{
    return c->state != INERT;
}

int ms_coord_ready(const struct ms_coord *c)
{
    return c->state == READY;
}

uint64_t ms_coord_term(const struct ms_coord *c)
{
    return c->term;
}

uint64_t ms_coord_max_term(const struct ms_coord *c)
{
    return c->max_term;
}

uint64_t ms_coord_generation(const struct ms_coord *c)
{
    return c->generation;
}

int ms_coord_type_count(const struct ms_coord *c)
{
    return c->ntypes;
}

int ms_coord_type_index(const struct ms_coord *c, const char *name)
{
    int ti = find_type(c, name);
    return ti < 0 ? MS_ENOTYPE : ti;
}

const char *ms_coord_type_name(const struct ms_coord *c, int type)
{
    return type >= 0 && type < c->ntypes ? c->types[type].name : NULL;
}

uint32_t ms_coord_shard_count(const struct ms_coord *c, int type)
{
    if (type < 0 || type >= c->ntypes || !c->types[type].known)
        return 0;
    return c->types[type].shard_count;
}

uint64_t ms_coord_owner(const struct ms_coord *c, int type, uint32_t shard,
                        uint64_t *gen)
{
    if (gen)
        *gen = 0;
    if (shard >= ms_coord_shard_count(c, type))
        return 0;
    if (gen)
        *gen = c->types[type].gen[shard];
    return c->types[type].owner[shard];
}

int ms_coord_hosts(const struct ms_coord *c, int type, uint64_t uid)
{
    if (type < 0 || type >= c->ntypes || !c->types[type].known)
        return 0;
    return can_host(c, type, find_member(c, uid));
}

uint32_t ms_coord_owned_count(const struct ms_coord *c, uint64_t uid)
{
    const struct member *mb = find_member(c, uid);
    uint32_t n = 0;
    if (!mb || c->state != READY)
        return 0;
    for (int ti = 0; ti < c->ntypes; ti++)
        n += mb->owned[ti];
    return n;
}
