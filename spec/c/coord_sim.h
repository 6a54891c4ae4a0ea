/*
 * coord_sim.h -- the simulated regions the coordinator tests drive
 * (test_coordinator.c, test_coordinator_moves.c): each region is a node's
 * fence and plans, answering CONTROL messages the way the I/O layer will.
 * Delivery is in-process and synchronous, with knobs to drop, hold back
 * or silence a region. Each test program has its own copy of the state.
 */
#ifndef MS_SPEC_COORD_SIM_H
#define MS_SPEC_COORD_SIM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/core/coordinator.h"
#include "check.h"

#define MAXN 8
#define MAXT 3
#define MAXHELD 64
#define LOGCAP (1u << 19) /* slots of the entry log, a power of two */

struct region {
    uint64_t uid;
    int alive;          /* 0: receives nothing (dead or unreachable) */
    int silent;         /* 1: receives, but never answers view requests */
    int drop;           /* 1: broadcasts are lost on the way here */
    int hold;           /* 1: messages to it are held back */
    int hide;           /* 1: its views list no types (it lost them) */
    struct ms_plan_fence fence;
    int ntypes;
    const char *tname[MAXT];
    const char *fp[MAXT];
    struct ms_plan *plan[MAXT];
    int refused;        /* register_refused received */
    char reason[MS_PLAN_MAX_REASON + 1];
    char alloc_code[MS_PLAN_MAX_CODE + 1]; /* last alloc_refused */
    int stale_sent;     /* stale_term answers sent */
    int fence_drops;    /* plans refused by the fence */
    char *held[MAXHELD];
    size_t heldlen[MAXHELD];
    uint64_t heldfrom[MAXHELD];
    int nheld;
    /* handoff */
    int nofence;        /* 1: takes HANDOFF but never fences */
    int nostop;         /* 1: takes STOP but never answers it */
    int direct;         /* 1: fences as a node without a connection to
                           the old owner: FENCED from itself */
    int handoffs;       /* HANDOFF entries received */
    int stops;          /* STOP entries received */
    struct ms_plan_entry last_stop; /* the latest STOP entry */
    uint64_t last_stop_term;
};

/* every (type, shard, gen) -> owner any region ever received */
struct seen {
    char type[MS_PLAN_MAX_TYPE_NAME + 1]; /* "": a free slot */
    uint32_t shard;
    uint64_t gen, owner;
};

struct sim {
    struct region r[MAXN];
    int n;
    int alloc_calls;
    int strategy;          /* 0 least loaded, 1 fail, 2 bad uid */
    uint64_t ineligible;   /* a uid the eligibility callback rejects */
    int leaving_seen;      /* a host marked leaving was offered */
    struct seen *log;
    size_t nlog;
    int conflicts;         /* same (type, shard, gen), two owners */
};

static struct sim S;

static inline struct region *find_region(uint64_t uid)
{
    for (int i = 0; i < S.n; i++)
        if (S.r[i].uid == uid)
            return &S.r[i];
    return NULL;
}

/* A region the test set up: never NULL. */
static inline struct region *region(uint64_t uid)
{
    struct region *r = find_region(uid);
    if (!r) {
        fprintf(stderr, "no region %llx\n", (unsigned long long)uid);
        abort();
    }
    return r;
}

static inline int tindex(struct region *r, const char *type)
{
    for (int i = 0; i < r->ntypes; i++)
        if (strcmp(r->tname[i], type) == 0)
            return i;
    return -1;
}

static inline void add_region(uint64_t uid)
{
    struct region *r = &S.r[S.n++];
    memset(r, 0, sizeof *r);
    r->uid = uid;
    r->alive = 1;
}

static inline void add_type(uint64_t uid, const char *name, uint32_t shards,
                            const char *fp)
{
    struct region *r = region(uid);
    r->tname[r->ntypes] = name;
    r->fp[r->ntypes] = fp;
    r->plan[r->ntypes] = ms_plan_new(shards);
    r->ntypes++;
}

static inline void sim_reset(void)
{
    for (int i = 0; i < S.n; i++) {
        for (int t = 0; t < S.r[i].ntypes; t++)
            ms_plan_free(S.r[i].plan[t]);
        for (int h = 0; h < S.r[i].nheld; h++)
            free(S.r[i].held[h]);
    }
    free(S.log);
    memset(&S, 0, sizeof S);
    S.log = calloc(LOGCAP, sizeof *S.log);
}

/* Records an entry a region received; counts a conflict when the same
 * (type, shard, generation) was seen with another owner (G1). */
static inline void log_entry(const char *type, const struct ms_plan_entry *e)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = type; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ e->shard) * 1099511628211ull;
    h = (h ^ e->gen) * 1099511628211ull;
    size_t i = (size_t)(h ^ h >> 29) & (LOGCAP - 1);
    struct seen *x;
    for (;; i = (i + 1) & (LOGCAP - 1)) {
        x = &S.log[i];
        if (x->type[0] == '\0')
            break;
        if (x->shard == e->shard && x->gen == e->gen &&
            strcmp(x->type, type) == 0) {
            if (x->owner != e->owner)
                S.conflicts++;
            return;
        }
    }
    CHECK(S.nlog < LOGCAP / 2);
    S.nlog++;
    snprintf(x->type, sizeof x->type, "%s", type);
    x->shard = e->shard;
    x->gen = e->gen;
    x->owner = e->owner;
}

static uint64_t sim_now; /* the clock of messages sent to the coordinator */

static inline void send_from(struct ms_coord *c, uint64_t uid,
                             const struct ms_plan_msg *m)
{
    char *text;
    size_t len;
    CHECK(ms_plan_msg_encode(m, &text, &len) == 0);
    CHECK(ms_coord_on_message(c, uid, text, len, sim_now) == 0);
    free(text);
}

static inline void send_to_coord(struct ms_coord *c, struct region *r,
                                 const struct ms_plan_msg *m)
{
    send_from(c, r->uid, m);
}

/* Member `uid` sends the coordinator a message of `kind` (FENCED,
 * STOPPED) with the one entry e, at term `term`. */
static inline void send_entry(struct ms_coord *c, uint64_t uid, int kind,
                              const char *type, uint32_t shards,
                              const struct ms_plan_entry *e, uint64_t term)
{
    struct ms_plan_msg *a = calloc(1, sizeof *a);
    a->kind = kind;
    a->term = term;
    snprintf(a->type, sizeof a->type, "%s", type);
    a->shard_count = shards;
    struct ms_plan_entry x = *e;
    a->entries = &x;
    a->nentries = 1;
    send_from(c, uid, a);
    free(a);
}

/* The old owner `owner` answers the STOP of entry e (term `term`). */
static inline void answer_stop(struct ms_coord *c, uint64_t owner,
                               const char *type, uint32_t shards,
                               const struct ms_plan_entry *e, uint64_t term)
{
    send_entry(c, owner, MS_PLAN_MSG_STOPPED, type, shards, e, term);
}

/* The region side of the I/O layer. */
static inline void region_receive(struct ms_coord *c, struct region *r,
                                  uint64_t from, const char *text, size_t len)
{
    struct ms_plan_msg *m = malloc(sizeof *m);
    CHECK(ms_plan_msg_decode(text, len, m) == 0);
    switch (m->kind) {
    case MS_PLAN_MSG_VIEW_REQUEST: {
        if (r->silent)
            break;
        struct ms_plan_msg *a = calloc(1, sizeof *a);
        if (!ms_plan_fence_check(&r->fence, m->term, from)) {
            a->kind = MS_PLAN_MSG_STALE_TERM;
            a->term = r->fence.term;
            r->stale_sent++;
            send_to_coord(c, r, a);
            free(a);
            break;
        }
        for (int t = 0; t < r->ntypes && !r->hide; t++) {
            uint32_t cursor = 0;
            do {
                char *v;
                size_t vlen;
                CHECK(ms_plan_view_encode(r->plan[t], r->tname[t], r->fp[t],
                                          m->term, &cursor, &v,
                                          &vlen) == 0);
                CHECK(ms_coord_on_message(c, r->uid, v, vlen, 0) == 0);
                free(v);
            } while (cursor < ms_plan_shard_count(r->plan[t]));
        }
        a->kind = MS_PLAN_MSG_VIEW_DONE;
        a->term = m->term;
        send_to_coord(c, r, a);
        free(a);
        break;
    }
    case MS_PLAN_MSG_PLAN: {
        if (!ms_plan_fence_check(&r->fence, m->term, from)) {
            r->fence_drops++;
            break;
        }
        for (size_t i = 0; i < m->nentries; i++)
            log_entry(m->type, &m->entries[i]);
        int t = tindex(r, m->type);
        /* a region refused for the type may hold another shard count */
        if (t >= 0)
            CHECK(ms_plan_apply_msg(r->plan[t], m) >= 0 || r->refused);
        break;
    }
    case MS_PLAN_MSG_HANDOFF: {
        CHECK(ms_plan_fence_check(&r->fence, m->term, from));
        r->handoffs += (int)m->nentries;
        if (r->nofence)
            break;
        /* the fence goes to each old owner, which relays it as FENCED
         * with this region's uid */
        for (size_t i = 0; i < m->nentries; i++) {
            struct ms_plan_entry e = m->entries[i];
            e.owner = r->uid;
            struct region *old = find_region(m->entries[i].owner);
            uint64_t via = r->direct ? r->uid
                           : old && old->alive ? old->uid : 0;
            if (via)
                send_entry(c, via, MS_PLAN_MSG_FENCED, m->type,
                           m->shard_count, &e, m->term);
        }
        break;
    }
    case MS_PLAN_MSG_STOP:
        CHECK(ms_plan_fence_check(&r->fence, m->term, from));
        for (size_t i = 0; i < m->nentries; i++) {
            CHECK(m->entries[i].owner == r->uid);
            r->stops++;
            r->last_stop = m->entries[i];
            r->last_stop_term = m->term;
            if (!r->nostop)
                answer_stop(c, r->uid, m->type, m->shard_count,
                            &m->entries[i], m->term);
        }
        break;
    case MS_PLAN_MSG_ALLOC_REFUSED:
        snprintf(r->alloc_code, sizeof r->alloc_code, "%s", m->code);
        break;
    case MS_PLAN_MSG_REGISTER_REFUSED:
        r->refused++;
        snprintf(r->reason, sizeof r->reason, "%s", m->reason);
        break;
    default:
        CHECK(!"a region got a coordinator-bound message");
    }
    ms_plan_msg_free(m);
    free(m);
}

static inline void deliver(struct ms_coord *c, struct region *r, uint64_t from,
                           char *text, size_t len, int broadcast)
{
    if (!r->alive || (broadcast && r->drop))
        return;
    if (r->hold && r->nheld < MAXHELD) {
        r->held[r->nheld] = malloc(len);
        memcpy(r->held[r->nheld], text, len);
        r->heldlen[r->nheld] = len;
        r->heldfrom[r->nheld++] = from;
        return;
    }
    region_receive(c, r, from, text, len);
}

/* Drains coordinator c (on node `self`); returns the number of actions,
 * counting READY and DEPOSED in *ready / *deposed when given. */
static inline int pump(struct ms_coord *c, uint64_t self, int *ready,
                       int *deposed)
{
    struct ms_coord_action a;
    int n = 0;
    while (ms_coord_next_action(c, &a)) {
        n++;
        if (a.kind == MS_COORD_SEND) {
            struct region *r = find_region(a.uid);
            if (r)
                deliver(c, r, self, a.payload, a.len, 0);
        } else if (a.kind == MS_COORD_BROADCAST) {
            for (int i = 0; i < S.n; i++)
                deliver(c, &S.r[i], self, a.payload, a.len, 1);
        } else if (a.kind == MS_COORD_READY && ready) {
            (*ready)++;
        } else if (a.kind == MS_COORD_DEPOSED && deposed) {
            (*deposed)++;
        }
        free(a.payload);
    }
    return n;
}

static inline void release_held(struct ms_coord *c, struct region *r)
{
    r->hold = 0;
    for (int h = 0; h < r->nheld; h++) {
        region_receive(c, r, r->heldfrom[h], r->held[h], r->heldlen[h]);
        free(r->held[h]);
    }
    r->nheld = 0;
}

/* Region r asks coordinator c for an owner of `shard`. */
static inline void alloc(struct ms_coord *c, uint64_t self, uint64_t from,
                         const char *type, uint32_t shard)
{
    struct region *r = region(from);
    struct ms_plan_msg *m = calloc(1, sizeof *m);
    m->kind = MS_PLAN_MSG_ALLOC;
    m->term = r->fence.term;
    snprintf(m->type, sizeof m->type, "%s", type);
    m->shard = shard;
    r->alloc_code[0] = '\0';
    send_to_coord(c, r, m);
    free(m);
    pump(c, self, NULL, NULL);
}

/* least_loaded for the tests: not leaving first, then fewest shards, then
 * the lowest uid. Also checks the view it gets. */
static inline uint64_t allocate(void *data, int type, uint32_t shard,
                                const struct ms_coord_view *v, char *err,
                                size_t errlen)
{
    struct sim *s = data;
    s->alloc_calls++;
    CHECK(v->type == type && v->nhosts > 0 && shard < v->shard_count);
    CHECK(v->owners[shard] == 0);
    if (s->strategy == 1) {
        snprintf(err, errlen, "boom");
        return 0;
    }
    if (s->strategy == 2)
        return 0xdead;
    const struct ms_coord_host *best = NULL;
    for (size_t i = 0; i < v->nhosts; i++) {
        const struct ms_coord_host *h = &v->hosts[i];
        uint32_t owned = 0;
        for (uint32_t k = 0; k < v->shard_count; k++)
            owned += v->owners[k] == h->uid;
        CHECK(owned == h->shards);
        CHECK(i == 0 || v->hosts[i - 1].uid < h->uid);
        s->leaving_seen |= h->leaving;
        if (!best || h->leaving < best->leaving ||
            (h->leaving == best->leaving && h->shards < best->shards))
            best = h;
    }
    return best->uid;
}

static inline int eligible(void *data, int type, uint64_t uid)
{
    struct sim *s = data;
    (void)type;
    return uid != s->ineligible;
}

static inline struct ms_coord *new_coord(uint64_t self,
                                         const struct ms_coord_type *types,
                                         int ntypes)
{
    struct ms_coord_config cfg = {0};
    cfg.self_uid = self;
    cfg.types = types;
    cfg.ntypes = ntypes;
    cfg.view_timeout_ms = 3000;
    cfg.allocate = allocate;
    cfg.eligible = eligible;
    cfg.data = &S;
    struct ms_coord *c = NULL;
    CHECK(ms_coord_new(&c, &cfg) == 0);
    return c;
}

/* Every alive region's plan of `type` equals the coordinator's. */
static inline int regions_agree(struct ms_coord *c, const char *type)
{
    int ti = ms_coord_type_index(c, type);
    uint32_t n = ms_coord_shard_count(c, ti);
    for (int i = 0; i < S.n; i++) {
        struct region *r = &S.r[i];
        int t = tindex(r, type);
        if (!r->alive || t < 0 || r->refused)
            continue;
        for (uint32_t s = 0; s < n; s++) {
            uint64_t g1, g2;
            if (ms_coord_owner(c, ti, s, &g1) !=
                    ms_plan_owner(r->plan[t], s, &g2) ||
                g1 != g2)
                return 0;
        }
    }
    return 1;
}

#define N1 0x1111
#define N2 0x2222
#define N3 0x3333
#define N4 0x4444

static const struct ms_coord_type COUNTER = {"Counter", 16,
                                             "Counter|16|least_loaded|120"};

#endif
