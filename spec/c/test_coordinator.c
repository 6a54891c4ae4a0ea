/*
 * The coordinator, driven step by step against simulated regions: each
 * region is a node's fence and plans, answering CONTROL messages the way
 * the I/O layer will. Delivery is in-process and synchronous, with knobs
 * to drop, hold back or silence a region.
 */
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

static struct region *find_region(uint64_t uid)
{
    for (int i = 0; i < S.n; i++)
        if (S.r[i].uid == uid)
            return &S.r[i];
    return NULL;
}

/* A region the test set up: never NULL. */
static struct region *region(uint64_t uid)
{
    struct region *r = find_region(uid);
    if (!r) {
        fprintf(stderr, "no region %llx\n", (unsigned long long)uid);
        abort();
    }
    return r;
}

static int tindex(struct region *r, const char *type)
{
    for (int i = 0; i < r->ntypes; i++)
        if (strcmp(r->tname[i], type) == 0)
            return i;
    return -1;
}

static void add_region(uint64_t uid)
{
    struct region *r = &S.r[S.n++];
    memset(r, 0, sizeof *r);
    r->uid = uid;
    r->alive = 1;
}

static void add_type(uint64_t uid, const char *name, uint32_t shards,
                     const char *fp)
{
    struct region *r = region(uid);
    r->tname[r->ntypes] = name;
    r->fp[r->ntypes] = fp;
    r->plan[r->ntypes] = ms_plan_new(shards);
    r->ntypes++;
}

static void sim_reset(void)
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
static void log_entry(const char *type, const struct ms_plan_entry *e)
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

static void send_from(struct ms_coord *c, uint64_t uid,
                      const struct ms_plan_msg *m)
{
    char *text;
    size_t len;
    CHECK(ms_plan_msg_encode(m, &text, &len) == 0);
    CHECK(ms_coord_on_message(c, uid, text, len, sim_now) == 0);
    free(text);
}

static void send_to_coord(struct ms_coord *c, struct region *r,
                          const struct ms_plan_msg *m)
{
    send_from(c, r->uid, m);
}

/* Member `uid` sends the coordinator a message of `kind` (FENCED,
 * STOPPED) with the one entry e, at term `term`. */
static void send_entry(struct ms_coord *c, uint64_t uid, int kind,
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
static void answer_stop(struct ms_coord *c, uint64_t owner, const char *type,
                        uint32_t shards, const struct ms_plan_entry *e,
                        uint64_t term)
{
    send_entry(c, owner, MS_PLAN_MSG_STOPPED, type, shards, e, term);
}

/* The region side of the I/O layer. */
static void region_receive(struct ms_coord *c, struct region *r,
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

static void deliver(struct ms_coord *c, struct region *r, uint64_t from,
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
static int pump(struct ms_coord *c, uint64_t self, int *ready, int *deposed)
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

static void release_held(struct ms_coord *c, struct region *r)
{
    r->hold = 0;
    for (int h = 0; h < r->nheld; h++) {
        region_receive(c, r, r->heldfrom[h], r->held[h], r->heldlen[h]);
        free(r->held[h]);
    }
    r->nheld = 0;
}

/* Region r asks coordinator c for an owner of `shard`. */
static void alloc(struct ms_coord *c, uint64_t self, uint64_t from,
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
static uint64_t allocate(void *data, int type, uint32_t shard,
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

static int eligible(void *data, int type, uint64_t uid)
{
    struct sim *s = data;
    (void)type;
    return uid != s->ineligible;
}

static struct ms_coord *new_coord(uint64_t self,
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
static int regions_agree(struct ms_coord *c, const char *type)
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

/* Registration: same fingerprint hosts, another one is refused. */
static void test_registration(void)
{
    sim_reset();
    /* broadcasts reach regions in this order: N2 answers first */
    add_region(N2);
    add_region(N3);
    add_region(N1);
    add_type(N1, "Counter", 16, COUNTER.fingerprint);
    add_type(N2, "Counter", 16, COUNTER.fingerprint);
    add_type(N3, "Counter", 16, "Counter|16|rendezvous|120");
    add_type(N3, "Lonely", 4, "Lonely|4");
    /* a type the coordinator does not have: the first registrant's
     * settings rule (N2 answers before N3 and N1) */
    add_type(N2, "Order", 8, "Order|8|least_loaded|60");
    add_type(N3, "Order", 8, "Order|8|least_loaded|60");
    add_type(N1, "Order", 4, "Order|8|least_loaded|60"); /* shard count */
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    CHECK(ms_coord_member_up(c, N1, 0) == 0);
    CHECK(ms_coord_member_up(c, N2, 0) == 0);
    CHECK(ms_coord_member_up(c, N3, 0) == 0);
    CHECK(ms_coord_member_up(c, 0, 0) == MS_EINVAL);
    CHECK(!ms_coord_active(c));
    CHECK(ms_coord_become(c, 1, 0) == 0);
    int ready = 0;
    pump(c, N1, &ready, NULL);
    CHECK(ready == 1 && ms_coord_ready(c));

    int counter = ms_coord_type_index(c, "Counter");
    int order = ms_coord_type_index(c, "Order");
    CHECK(counter == 0 && order == 1);
    CHECK(ms_coord_type_index(c, "Nope") == MS_ENOTYPE);
    CHECK(strcmp(ms_coord_type_name(c, order), "Order") == 0);
    CHECK(ms_coord_shard_count(c, order) == 8);
    CHECK(ms_coord_hosts(c, counter, N1) && ms_coord_hosts(c, counter, N2));
    CHECK(!ms_coord_hosts(c, counter, N3));
    CHECK(ms_coord_hosts(c, order, N2) && ms_coord_hosts(c, order, N3));
    CHECK(!ms_coord_hosts(c, order, N1));
    /* N3 was refused Counter with a reason naming both fingerprints; N1
     * was refused Order for its shard count */
    CHECK(region(N3)->refused == 1);
    CHECK(strstr(region(N3)->reason, "Counter") &&
          strstr(region(N3)->reason, "Counter|16|rendezvous|120") &&
          strstr(region(N3)->reason, "Counter|16|least_loaded|120"));
    CHECK(region(N1)->refused == 1);
    CHECK(strstr(region(N1)->reason, "4 shards here, 8 in the cluster"));
    CHECK(region(N2)->refused == 0);

    /* allocations never go to a refused node */
    for (uint32_t s = 0; s < 16; s++)
        alloc(c, N1, N3, "Counter", s);
    for (uint32_t s = 0; s < 16; s++) {
        uint64_t o = ms_coord_owner(c, counter, s, NULL);
        CHECK(o == N1 || o == N2);
    }
    for (uint32_t s = 0; s < 8; s++)
        alloc(c, N1, N1, "Order", s);
    for (uint32_t s = 0; s < 8; s++) {
        uint64_t o = ms_coord_owner(c, order, s, NULL);
        CHECK(o == N2 || o == N3);
    }
    CHECK(ms_coord_owned_count(c, N2) == 8 + 4);
    CHECK(regions_agree(c, "Counter") && regions_agree(c, "Order"));

    /* an unknown type, a bad shard */
    alloc(c, N1, N2, "Ghost", 0);
    CHECK(strcmp(region(N2)->alloc_code, "unknown_type") == 0);
    alloc(c, N1, N2, "Counter", 16);
    CHECK(strcmp(region(N2)->alloc_code, "bad_shard") == 0);

    /* the eligibility callback (roles) can leave a type without a host */
    S.ineligible = N3;
    CHECK(!ms_coord_hosts(c, 2, N3));
    alloc(c, N1, N2, "Lonely", 0);
    CHECK(strcmp(region(N2)->alloc_code, "no_host") == 0);
    alloc(c, N1, N2, "Counter", 0); /* assigned: answered, not refused */
    CHECK(region(N2)->alloc_code[0] == '\0');
    S.ineligible = 0;
    alloc(c, N1, N2, "Lonely", 0);
    CHECK(ms_coord_owner(c, 2, 0, NULL) == N3);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* Before the views are in, allocation answers "not ready"; an inert
 * coordinator answers "not_coordinator". */
static void test_not_ready(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_type(N1, "Counter", 16, COUNTER.fingerprint);
    add_type(N2, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);

    alloc(c, N1, N2, "Counter", 3);
    CHECK(strcmp(region(N2)->alloc_code, "not_coordinator") == 0);

    region(N2)->silent = 1; /* N2 does not answer views yet */
    CHECK(ms_coord_become(c, 1, 1000) == 0);
    int ready = 0;
    pump(c, N1, &ready, NULL);
    CHECK(ready == 0 && ms_coord_active(c) && !ms_coord_ready(c));
    CHECK(ms_coord_next_deadline(c, 1000) == 3000);
    CHECK(ms_coord_next_deadline(c, 2500) == 1500);

    alloc(c, N1, N2, "Counter", 3);
    CHECK(strcmp(region(N2)->alloc_code, "not_ready") == 0);
    alloc(c, N1, N1, "Counter", 3);
    CHECK(strcmp(region(N1)->alloc_code, "not_ready") == 0);
    CHECK(S.alloc_calls == 0);

    /* before the deadline nothing happens; at it, the plan is published */
    CHECK(ms_coord_tick(c, 3999) == 0);
    CHECK(pump(c, N1, &ready, NULL) == 0);
    CHECK(ms_coord_tick(c, 4000) == 0);
    pump(c, N1, &ready, NULL);
    CHECK(ready == 1 && ms_coord_ready(c));
    alloc(c, N1, N2, "Counter", 3);
    CHECK(region(N2)->alloc_code[0] == '\0');
    CHECK(ms_coord_owner(c, 0, 3, NULL) == N1); /* N2 not registered yet */
    CHECK(!ms_coord_hosts(c, 0, N2));

    /* N2 is asked again one timeout later and, answering, registers and
     * gets the plan */
    CHECK(ms_coord_next_deadline(c, 4000) == 3000);
    region(N2)->silent = 0;
    CHECK(ms_coord_tick(c, 5000) == 0);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    CHECK(ms_coord_tick(c, 7000) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_hosts(c, 0, N2));
    CHECK(ms_coord_next_deadline(c, 7000) == -1);
    CHECK(regions_agree(c, "Counter"));
    ms_coord_free(c);
}

/* Allocation through the callback; generations strictly increase. */
static void test_allocation(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);
    ms_coord_member_leaving(c, N3, 0); /* takes no new shard */
    CHECK(ms_coord_become(c, 1, 0) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t published = ms_coord_generation(c);
    CHECK(published == (1ull << 32) + 1);

    uint64_t last = published;
    for (uint32_t s = 0; s < 16; s++) {
        alloc(c, N1, S.r[s % 3].uid, "Counter", s);
        uint64_t gen;
        uint64_t o = ms_coord_owner(c, 0, s, &gen);
        CHECK(o == N1 || o == N2);
        CHECK(gen > last);
        last = gen;
        CHECK(ms_coord_generation(c) == gen);
        CHECK(ms_plan_owner(region(N3)->plan[0], s, NULL) == o);
    }
    CHECK(S.alloc_calls == 16 && !S.leaving_seen); /* others can host */
    CHECK(ms_coord_owned_count(c, N1) == 8 && ms_coord_owned_count(c, N2) == 8);
    CHECK(regions_agree(c, "Counter"));

    /* an assigned shard is answered with its entry, to the asker only */
    uint64_t gen5;
    uint64_t o5 = ms_coord_owner(c, 0, 5, &gen5);
    struct region *r2 = region(N2);
    CHECK(ms_plan_apply(r2->plan[0], 5, 0, 1) == 0); /* it holds gen5 */
    alloc(c, N1, N2, "Counter", 5);
    CHECK(S.alloc_calls == 16 && ms_coord_generation(c) == last);
    CHECK(ms_coord_owner(c, 0, 5, NULL) == o5);

    /* strategy failures are refusals, never guesses */
    region(N2)->alive = 0;
    CHECK(ms_coord_member_removed(c, N2, 0) == 0);
    pump(c, N1, NULL, NULL);
    uint32_t free_shard = 16;
    for (uint32_t s = 0; s < 16 && free_shard == 16; s++)
        if (ms_coord_owner(c, 0, s, NULL) == 0)
            free_shard = s;
    CHECK(free_shard < 16);
    S.strategy = 1;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(strcmp(region(N3)->alloc_code, "strategy") == 0);
    S.strategy = 2;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(strcmp(region(N3)->alloc_code, "strategy") == 0);
    CHECK(ms_coord_owner(c, 0, free_shard, NULL) == 0);
    S.strategy = 0;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(ms_coord_owner(c, 0, free_shard, NULL) == N1);
    CHECK(regions_agree(c, "Counter"));
    /* with only leaving members left, they are offered */
    region(N1)->alive = 0;
    CHECK(ms_coord_member_removed(c, N1, 0) == 0);
    pump(c, N1, NULL, NULL);
    S.leaving_seen = 0;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(S.leaving_seen && ms_coord_owner(c, 0, free_shard, NULL) == N3);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* A removed member's shards are unassigned at a new generation and
 * reallocated on the next request. */
static void test_removed_member(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    for (int i = 0; i < 3; i++)
        ms_coord_member_up(c, S.r[i].uid, 0);
    ms_coord_become(c, 1, 0);
    pump(c, N1, NULL, NULL);
    for (uint32_t s = 0; s < 16; s++)
        alloc(c, N1, N1, "Counter", s);
    uint32_t had = ms_coord_owned_count(c, N3);
    CHECK(had == 5);
    uint64_t before = ms_coord_generation(c);

    /* unreachable: nothing moves */
    ms_coord_member_reachable(c, N3, 0);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    CHECK(ms_coord_owned_count(c, N3) == had);

    /* downed: its shards become unassigned at one new generation */
    region(N3)->alive = 0;
    CHECK(ms_coord_member_removed(c, N3, 0) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_generation(c) == before + 1);
    uint32_t unassigned = 0;
    for (uint32_t s = 0; s < 16; s++) {
        uint64_t g;
        uint64_t o = ms_coord_owner(c, 0, s, &g);
        CHECK(o != N3);
        if (o == 0) {
            unassigned++;
            CHECK(g == before + 1);
        }
    }
    CHECK(unassigned == had);
    CHECK(regions_agree(c, "Counter"));
    CHECK(ms_coord_owned_count(c, N3) == 0);
    CHECK(!ms_coord_hosts(c, 0, N3));

    /* the next requests reallocate them to the others */
    for (uint32_t s = 0; s < 16; s++)
        if (ms_plan_owner(region(N2)->plan[0], s, NULL) == 0)
            alloc(c, N1, N2, "Counter", s);
    for (uint32_t s = 0; s < 16; s++) {
        uint64_t o = ms_coord_owner(c, 0, s, NULL);
        CHECK(o == N1 || o == N2);
    }
    CHECK(ms_coord_owned_count(c, N1) + ms_coord_owned_count(c, N2) == 16);
    CHECK(regions_agree(c, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/*
 * Coordinator A (on N1, which hosts nothing) allocated shards at 10
 * generations, some updates missed by some regions; A dies; B (N2) takes
 * over with a higher term. B keeps the highest generation per shard and
 * publishes higher ones; nothing goes backwards; no shard ever has two
 * owners at one generation; a late plan of A is fenced out.
 */
static void test_takeover(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    add_region(N4);
    for (int i = 0; i < 4; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    S.ineligible = N1;
    struct ms_coord *a = new_coord(N1, &COUNTER, 1);
    struct ms_coord *b = new_coord(N2, &COUNTER, 1);
    for (int i = 0; i < 4; i++) {
        ms_coord_member_up(a, S.r[i].uid, 0);
        ms_coord_member_up(b, S.r[i].uid, 0);
    }
    CHECK(ms_coord_become(a, 1, 0) == 0);
    pump(a, N1, NULL, NULL);
    uint64_t g0 = ms_coord_generation(a);

    /* gens g0+1 .. g0+10: shards 0..9. N3 misses the last three updates,
     * N2 misses updates 5 and 6 */
    uint64_t gen_of[16] = {0}, owner_of[16] = {0};
    for (uint32_t s = 0; s < 10; s++) {
        region(N3)->drop = s >= 7;
        region(N2)->drop = s == 5 || s == 6;
        alloc(a, N1, N4, "Counter", s);
        owner_of[s] = ms_coord_owner(a, 0, s, &gen_of[s]);
        CHECK(gen_of[s] == g0 + 1 + s);
        CHECK(owner_of[s] == N2 || owner_of[s] == N3 || owner_of[s] == N4);
    }
    region(N2)->drop = region(N3)->drop = 0;
    CHECK(ms_plan_owner(region(N3)->plan[0], 8, NULL) == 0);
    CHECK(ms_plan_owner(region(N2)->plan[0], 5, NULL) == 0);
    uint64_t a_max = ms_coord_generation(a);

    /* A's later plan message is in flight to N3 when A dies (held), lost
     * on the way to N2, and reaches N4 only */
    region(N3)->hold = 1;
    region(N2)->drop = 1;
    alloc(a, N1, N4, "Counter", 10);
    region(N2)->drop = 0;
    uint64_t gen10;
    uint64_t owner10 = ms_coord_owner(a, 0, 10, &gen10);
    CHECK(region(N3)->nheld == 1);
    region(N3)->hold = 0;
    /* ...and N4 saw it, but N4 will be silent for B's view request */
    CHECK(ms_plan_owner(region(N4)->plan[0], 10, NULL) == owner10);

    /* A vanishes (downed); B becomes coordinator above every fence */
    region(N1)->alive = 0;
    ms_coord_member_removed(b, N1, 0);
    uint64_t term = 0;
    for (int i = 0; i < S.n; i++)
        if (S.r[i].fence.term > term)
            term = S.r[i].fence.term;
    term++;
    CHECK(term == 2);
    region(N4)->silent = 1;
    CHECK(ms_coord_become(b, term, 0) == 0);
    int ready = 0;
    pump(b, N2, &ready, NULL);
    CHECK(ready == 0);            /* N4 has not answered */
    CHECK(ms_coord_tick(b, 3000) == 0); /* the deadline */
    pump(b, N2, &ready, NULL);
    CHECK(ready == 1);

    /* B kept the highest generation per shard: every shard A assigned
     * keeps its owner, even where one region missed the update */
    uint64_t published = ms_coord_generation(b);
    CHECK(published > a_max && published > gen10);
    CHECK(published == (term << 32) + 1);
    for (uint32_t s = 0; s < 10; s++) {
        uint64_t g;
        CHECK(ms_coord_owner(b, 0, s, &g) == owner_of[s]);
        CHECK(g == published);
    }
    /* shard 10 reached only silent N4: B does not know it and publishes it
     * unassigned, at a generation above A's */
    uint64_t g10b;
    CHECK(ms_coord_owner(b, 0, 10, &g10b) == 0 && g10b > gen10);

    /* A's delayed plan reaches N3 now: fenced out (older term) */
    struct region *r3 = region(N3);
    int drops = r3->fence_drops;
    release_held(b, r3);
    CHECK(r3->fence_drops == drops + 1);
    CHECK(ms_plan_owner(r3->plan[0], 10, NULL) == 0);

    /* N4 answers the retry and converges on B's plan: its newer-looking
     * entry for shard 10 (A's) is overridden by B's higher generation */
    region(N4)->silent = 0;
    ms_coord_tick(b, 6000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_plan_owner(region(N4)->plan[0], 10, NULL) == 0);
    CHECK(regions_agree(b, "Counter"));

    /* new allocations by B continue upwards */
    uint64_t last = published;
    for (uint32_t s = 10; s < 16; s++) {
        alloc(b, N2, N3, "Counter", s);
        uint64_t g;
        CHECK(ms_coord_owner(b, 0, s, &g) != 0);
        CHECK(g > last);
        last = g;
    }
    CHECK(regions_agree(b, "Counter"));
    /* a's ghost can still be driven (it does not know it is dead): any
     * plan it broadcasts is refused by every region's fence */
    region(N1)->alive = 1;
    ms_coord_member_removed(a, N2, 0); /* would unassign N2's shards */
    int fenced = 0;
    for (int i = 0; i < S.n; i++)
        fenced -= S.r[i].fence_drops;
    pump(a, N1, NULL, NULL);
    for (int i = 0; i < S.n; i++)
        fenced += S.r[i].fence_drops;
    CHECK(fenced == 3); /* N2, N3, N4 */
    region(N1)->alive = 0;
    CHECK(regions_agree(b, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(a);
    ms_coord_free(b);
}

/*
 * At a takeover, shards stay with owners that did not answer (perhaps
 * merely unreachable), and leave owners that answered without the type or
 * that are no longer eligible.
 */
static void test_ineligible_owner(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *a = new_coord(N1, &COUNTER, 1);
    struct ms_coord *b = new_coord(N2, &COUNTER, 1);
    for (int i = 0; i < 3; i++) {
        ms_coord_member_up(a, S.r[i].uid, 0);
        ms_coord_member_up(b, S.r[i].uid, 0);
    }
    ms_coord_become(a, 1, 0);
    pump(a, N1, NULL, NULL);
    for (uint32_t s = 0; s < 16; s++)
        alloc(a, N1, N2, "Counter", s);
    uint64_t owner[16];
    for (uint32_t s = 0; s < 16; s++)
        owner[s] = ms_coord_owner(a, 0, s, NULL);
    CHECK(ms_coord_owned_count(a, N3) == 5);
    ms_coord_resign(a);

    /* N3 lost the type and does not answer in time: it keeps its shards */
    region(N3)->hide = 1;
    region(N3)->silent = 1;
    ms_coord_become(b, 2, 0);
    pump(b, N2, NULL, NULL);
    ms_coord_tick(b, 3000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    for (uint32_t s = 0; s < 16; s++)
        CHECK(ms_coord_owner(b, 0, s, NULL) == owner[s]);
    CHECK(ms_coord_owned_count(b, N3) == 5);
    /* its late answer, without the type, frees its shards */
    region(N3)->silent = 0;
    uint64_t before = ms_coord_generation(b);
    ms_coord_tick(b, 6000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_owned_count(b, N3) == 0);
    CHECK(ms_coord_generation(b) == before + 1);
    for (uint32_t s = 0; s < 16; s++)
        CHECK(ms_coord_owner(b, 0, s, NULL) ==
              (owner[s] == N3 ? 0 : owner[s]));
    CHECK(regions_agree(b, "Counter"));

    /* a new term where N1 is no longer eligible: published unassigned */
    ms_coord_resign(b);
    S.ineligible = N1;
    ms_coord_become(b, 3, 10000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    CHECK(ms_coord_owned_count(b, N1) == 0);
    CHECK(ms_coord_owned_count(b, N2) == 5);
    CHECK(regions_agree(b, "Counter"));
    S.ineligible = 0;
    CHECK(S.conflicts == 0);
    ms_coord_free(a);
    ms_coord_free(b);
}

/* Two nodes claim the same term: the second is refused by the fences and
 * deposed; so is a coordinator that hears of a higher term. */
static void test_rivals(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *b = new_coord(N2, &COUNTER, 1);
    struct ms_coord *c = new_coord(N3, &COUNTER, 1);
    for (int i = 0; i < 3; i++) {
        ms_coord_member_up(b, S.r[i].uid, 0);
        ms_coord_member_up(c, S.r[i].uid, 0);
    }
    CHECK(ms_coord_become(b, 5, 0) == 0);
    pump(b, N2, NULL, NULL);
    for (uint32_t s = 0; s < 4; s++)
        alloc(b, N2, N1, "Counter", s);
    CHECK(ms_coord_become(c, 5, 0) == 0);
    int deposed = 0;
    pump(c, N3, NULL, &deposed);
    CHECK(deposed == 1 && !ms_coord_active(c));
    CHECK(ms_coord_max_term(c) == 5);
    CHECK(ms_coord_become(c, 5, 0) == MS_EINVAL);
    alloc(c, N3, N1, "Counter", 9);
    CHECK(strcmp(region(N1)->alloc_code, "not_coordinator") == 0);

    /* a higher term heard by b's node deposes b */
    ms_coord_observe_term(b, 6);
    deposed = 0;
    pump(b, N2, NULL, &deposed);
    CHECK(deposed == 1 && !ms_coord_active(b));
    CHECK(ms_coord_become(b, 6, 0) == MS_EINVAL);
    CHECK(ms_coord_become(b, 7, 0) == 0);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    /* and b's new term published above its old allocations */
    for (uint32_t s = 0; s < 4; s++) {
        uint64_t g;
        CHECK(ms_coord_owner(b, 0, s, &g) != 0 && g > (7ull << 32));
    }
    CHECK(regions_agree(b, "Counter"));

    /* an alloc carrying a higher term deposes too */
    region(N1)->fence.term = 9;
    alloc(b, N2, N1, "Counter", 12);
    CHECK(!ms_coord_active(b));
    CHECK(strcmp(region(N1)->alloc_code, "not_coordinator") == 0);
    ms_coord_resign(b);
    CHECK(S.conflicts == 0);
    ms_coord_free(b);
    ms_coord_free(c);
}

/* Malformed CONTROL payloads are refused; nothing changes or is sent. */
static void test_malformed(void)
{
    sim_reset();
    add_region(N1);
    add_type(N1, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_become(c, 1, 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_ready(c));
    uint64_t gen = ms_coord_generation(c);
    static const char *bad[] = {
        "",
        "garbage",
        "{\"t\":\"alloc\",\"term\":1,\"type\":\"Counter\"}",
        "{\"t\":\"alloc\",\"term\":1,\"type\":\"Counter\",\"shard\":-1}",
        "{\"t\":\"alloc\", \"term\":1,\"type\":\"Counter\",\"shard\":1}",
        "{\"t\":\"alloc\",\"term\":1,\"type\":\"Counter\",\"shard\":1}x",
        "{\"t\":\"view\",\"term\":1,\"type\":\"Counter\",\"shards\":16,"
        "\"fp\":\"x\",\"e\":[[3,\"0000000000001111\",1],"
        "[3,\"0000000000002222\",2]]}",
        "{\"t\":\"view_done\",\"term\":1,\"extra\":1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(ms_coord_on_message(c, N1, bad[i], strlen(bad[i]), 0) ==
              MS_EBADJSON);
    /* well-formed but region-bound */
    const char *plan = "{\"t\":\"plan\",\"term\":1,\"type\":\"Counter\","
                       "\"shards\":16,\"e\":[[3,\"0000000000001111\",9]]}";
    CHECK(ms_coord_on_message(c, N1, plan, strlen(plan), 0) == MS_EINVAL);
    /* a decoded message with a bad shard index from a caller */
    struct ms_plan_entry e = {99, N1, 9};
    struct ms_plan_msg *m = calloc(1, sizeof *m);
    m->kind = MS_PLAN_MSG_VIEW;
    m->term = 1;
    strcpy(m->type, "Counter");
    m->shard_count = 16;
    m->entries = &e;
    m->nentries = 1;
    CHECK(ms_coord_on_msg(c, N1, m, 0) == MS_EINVAL);
    free(m);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    CHECK(ms_coord_generation(c) == gen && ms_coord_ready(c));
    for (uint32_t s = 0; s < 16; s++)
        CHECK(ms_coord_owner(c, 0, s, NULL) == 0);

    /* bad configurations */
    struct ms_coord_config cfg = {0};
    struct ms_coord *x;
    cfg.allocate = allocate;
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL); /* no self uid */
    cfg.self_uid = N1;
    struct ms_coord_type two[2] = {COUNTER, COUNTER};
    cfg.types = two;
    cfg.ntypes = 2;
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL); /* duplicate */
    two[1].name = "Bad Name";
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL);
    two[1].name = "Other";
    two[1].shard_count = 0;
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL);
    two[1].shard_count = 4;
    CHECK(ms_coord_new(&x, &cfg) == 0);
    CHECK(ms_coord_become(x, 0, 0) == MS_EINVAL);
    CHECK(ms_coord_become(x, MS_PLAN_MAX_TERM + 1, 0) == MS_EINVAL);
    ms_coord_free(x);
    ms_coord_free(c);
}

/* The largest types go out in several messages and rebuild everywhere. */
static void test_big_plan(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    static const struct ms_coord_type big = {"Big", MS_PLAN_MAX_SHARDS,
                                             "Big|65536"};
    add_type(N1, "Big", MS_PLAN_MAX_SHARDS, big.fingerprint);
    add_type(N2, "Big", MS_PLAN_MAX_SHARDS, big.fingerprint);
    /* N2 remembers an old assignment from term 3 */
    CHECK(ms_plan_apply(region(N2)->plan[0], 40000, N2, (3ull << 32) + 8));
    struct ms_coord *c = new_coord(N1, &big, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);
    region(N1)->fence.term = 3;
    CHECK(ms_coord_become(c, 4, 0) == 0);
    int ready = 0;
    pump(c, N1, &ready, NULL);
    CHECK(ready == 1);
    CHECK(ms_coord_owner(c, 0, 40000, NULL) == N2);
    CHECK(regions_agree(c, "Big"));
    uint64_t g;
    CHECK(ms_plan_owner(region(N1)->plan[0], 65535, &g) == 0 &&
          g == (4ull << 32) + 1);
    ms_coord_free(c);
}

/* A ready coordinator on N1 over N1, N2 (all 16 shards allocated) and
 * N3 (up, nothing yet). */
static struct ms_coord *moving_cluster(ms_coord_rebalance_cb rb)
{
    sim_reset();
    sim_now = 0;
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord_config cfg = {0};
    cfg.self_uid = N1;
    cfg.types = &COUNTER;
    cfg.ntypes = 1;
    cfg.view_timeout_ms = 3000;
    cfg.allocate = allocate;
    cfg.eligible = eligible;
    cfg.rebalance = rb;
    cfg.data = &S;
    cfg.handoff_timeout_ms = 2500;
    cfg.rebalance_interval_ms = 1000;
    struct ms_coord *c = NULL;
    CHECK(ms_coord_new(&c, &cfg) == 0);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);
    CHECK(ms_coord_become(c, 1, 0) == 0);
    pump(c, N1, NULL, NULL);
    for (uint32_t s = 0; s < 16; s++)
        alloc(c, N1, N1, "Counter", s);
    ms_coord_member_up(c, N3, 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owned_count(c, N3) == 0);
    CHECK(regions_agree(c, "Counter"));
    return c;
}

/* A move: every region fences, the old owner stops, the strategy places
 * the shard (on N3, the least loaded) at a new generation. */
static void test_move(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    uint64_t g0;
    uint64_t from = ms_coord_owner(c, 0, 3, &g0);
    region(N3)->direct = 1; /* no connection to the old owner yet */
    CHECK(ms_coord_move(c, 0, 3, 10) == 0);
    CHECK(ms_coord_move(c, 0, 3, 10) == MS_EBUSY);
    pump(c, N1, NULL, NULL);
    CHECK(region(N1)->handoffs == 1 && region(N2)->handoffs == 1 &&
          region(N3)->handoffs == 1);
    CHECK(region(from)->stops == 1);
    uint64_t g1;
    CHECK(ms_coord_owner(c, 0, 3, &g1) == N3);
    CHECK(g1 > g0);
    CHECK(regions_agree(c, "Counter"));
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(st.started == 1 && st.finished == 1 && st.aborted == 0 &&
          st.in_progress == 0 && st.peak == 1);
    struct ms_plan_entry st3 = region(from)->last_stop;
    /* a region speaks only for itself: its FENCED naming another region
     * counts for nothing */
    region(N3)->direct = 0;
    region(N2)->nofence = 1;
    CHECK(ms_coord_move(c, 0, 5, 20) == 0);
    pump(c, N1, NULL, NULL);
    struct ms_coord_move_info mi;
    CHECK(ms_coord_move_at(c, 0, 20, &mi) == 1 && mi.fences_left == 1);
    struct ms_plan_entry fe = {5, N2, mi.hgen};
    /* N3 claiming N2's fence */
    send_entry(c, N3, MS_PLAN_MSG_FENCED, "Counter", 16, &fe, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_move_at(c, 0, 20, &mi) == 1 && mi.fences_left == 1);
    send_entry(c, N2, MS_PLAN_MSG_FENCED, "Counter", 16, &fe, 1); /* own */
    pump(c, N1, NULL, NULL);
    ms_coord_move_stats(c, &st);
    CHECK(st.finished == 2 && st.in_progress == 0);
    region(N2)->nofence = 0;
    /* only the old owner's STOPPED ends a move (G8): another member's
     * claim, at the right generation, changes nothing */
    region(N1)->nostop = region(N2)->nostop = 1;
    CHECK(ms_coord_move(c, 0, 9, 15) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t from9 = ms_coord_owner(c, 0, 9, NULL);
    struct ms_plan_entry st9 = region(from9)->last_stop;
    CHECK(st9.shard == 9);
    answer_stop(c, N3, "Counter", 16, &st9, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 9, NULL) == from9);
    answer_stop(c, from9, "Counter", 16, &st9, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 9, NULL) == N3);
    region(N1)->nostop = region(N2)->nostop = 0;
    /* a late duplicate STOPPED changes nothing */
    answer_stop(c, from, "Counter", 16, &st3, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 3, NULL) == N3);
    /* bad requests */
    CHECK(ms_coord_move(c, 0, 16, 10) == MS_EINVAL);
    CHECK(ms_coord_move(c, 5, 0, 10) == MS_EINVAL);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* No STOPPED before the deadline: rolled back, the old owner keeps the
 * shard at a new generation (which ends the regions' buffering), and a
 * STOPPED after that is ignored. A region that never fences does the
 * same; removing it lets the move go on. */
static void test_move_deadline(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    uint64_t from = ms_coord_owner(c, 0, 7, NULL);
    region(from)->nostop = 1;
    sim_now = 100; /* the fences come at once */
    CHECK(ms_coord_move(c, 0, 7, 100) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(from)->stops == 1);
    /* the tick's next work: the STOP goes out again */
    CHECK(ms_coord_next_deadline(c, 200) == 100 + MS_COORD_RESEND_MS - 200);
    struct ms_coord_move_info mi;
    CHECK(ms_coord_move_at(c, 0, 600, &mi) == 1);
    CHECK(mi.shard == 7 && mi.from == from && mi.stopping == 1 &&
          mi.age_ms == 500 && mi.fences_left == 0);
    /* a member that comes during the move hears of it before the plan */
    add_region(N4);
    add_type(N4, "Counter", 16, COUNTER.fingerprint);
    CHECK(ms_coord_member_up(c, N4, 200) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(N4)->handoffs == 1);
    CHECK(ms_plan_owner(region(N4)->plan[0], 7, NULL) == from);
    uint64_t g0;
    ms_coord_owner(c, 0, 7, &g0);
    CHECK(ms_coord_tick(c, 2599) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_move_at(c, 0, 2599, &mi) == 1);
    CHECK(ms_coord_tick(c, 2600) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t g1;
    CHECK(ms_coord_owner(c, 0, 7, &g1) == from && g1 > g0);
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(st.aborted == 1 && st.finished == 0 && st.in_progress == 0);
    answer_stop(c, from, "Counter", 16, &region(from)->last_stop, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 7, NULL) == from);
    CHECK(regions_agree(c, "Counter"));

    /* a fence lost on the way (region N3's) is sent again: the HANDOFF
     * goes out once more after MS_COORD_RESEND_MS, and then the move goes on */
    region(from)->nostop = 1;
    region(N3)->nofence = 1;
    CHECK(ms_coord_move(c, 0, 7, 2700) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_move_at(c, 0, 2700, &mi) == 1 && mi.fences_left == 1);
    int h3 = region(N3)->handoffs;
    region(N3)->nofence = 0;
    CHECK(ms_coord_tick(c, 2700 + MS_COORD_RESEND_MS - 1) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(N3)->handoffs == h3);
    CHECK(ms_coord_tick(c, 2700 + MS_COORD_RESEND_MS) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(N3)->handoffs == h3 + 1);
    CHECK(ms_coord_move_at(c, 0, 2700 + MS_COORD_RESEND_MS, &mi) == 1 &&
          mi.stopping == 1);
    /* the STOP is sent again too, and the old owner's answer ends it */
    int stops = region(from)->stops;
    region(from)->nostop = 0;
    CHECK(ms_coord_tick(c, 2700 + 2 * MS_COORD_RESEND_MS) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(from)->stops == stops + 1);
    CHECK(ms_coord_owner(c, 0, 7, NULL) == N3);
    ms_coord_move_stats(c, &st);
    CHECK(st.finished == 1 && st.in_progress == 0);
    /* back to the old owner for what follows */
    CHECK(ms_coord_move(c, 0, 7, 4800) == 0);
    pump(c, N1, NULL, NULL);
    from = ms_coord_owner(c, 0, 7, NULL);
    CHECK(from != 0);

    /* a region that does not fence holds the move at FENCING */
    region(from)->nostop = 0;
    region(N2)->nofence = 1;
    int stops_before = region(from)->stops;
    CHECK(ms_coord_move(c, 0, 7, 5000) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(from)->stops == stops_before);
    CHECK(ms_coord_move_at(c, 0, 5000, &mi) == 1 && mi.stopping == 0 &&
          mi.fences_left == 1);
    /* ... until it is removed: then the old owner is told to stop */
    if (from == N2) {
        /* the old owner itself went: the shard is unassigned */
        region(N2)->alive = 0;
        CHECK(ms_coord_member_removed(c, N2, 5100) == 0);
        pump(c, N1, NULL, NULL);
        CHECK(ms_coord_owner(c, 0, 7, NULL) == 0);
    } else {
        region(N2)->alive = 0;
        CHECK(ms_coord_member_removed(c, N2, 5100) == 0);
        pump(c, N1, NULL, NULL);
        CHECK(region(from)->stops == stops_before + 1);
        uint64_t g7;
        CHECK(ms_coord_owner(c, 0, 7, &g7) != 0 && g7 > 0);
    }
    ms_coord_move_stats(c, &st);
    CHECK(st.in_progress == 0);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* A leaving member's shards all move away, whatever the policy; then it
 * may exit. */
static void test_leaving_moves(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    CHECK(ms_coord_owned_count(c, N1) + ms_coord_owned_count(c, N2) == 16);
    CHECK(ms_coord_leave_done(c, N2) == 0);
    ms_coord_member_leaving(c, N2, 50);
    CHECK(ms_coord_tick(c, 100) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owned_count(c, N2) == 0);
    CHECK(ms_coord_leave_done(c, N2) == 1);
    CHECK(ms_coord_leave_done(c, N1) == 0); /* not leaving */
    CHECK(ms_coord_owned_count(c, N1) + ms_coord_owned_count(c, N3) == 16);
    CHECK(regions_agree(c, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(c);

    /* nobody that stays can host the type (N3 lacks its roles): the
     * leavers give their shards up, and may go */
    c = moving_cluster(NULL);
    S.ineligible = N3;
    ms_coord_member_leaving(c, N1, 50);
    ms_coord_member_leaving(c, N2, 50);
    CHECK(ms_coord_tick(c, 100) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_leave_done(c, N1) == 1 && ms_coord_leave_done(c, N2) == 1);
    for (uint32_t sh = 0; sh < 16; sh++)
        CHECK(ms_coord_owner(c, 0, sh, NULL) == 0);
    CHECK(regions_agree(c, "Counter"));
    ms_coord_free(c);
}

static int rb_calls;
static int rb_saw_moving;

/* Proposes shards 0 and 1 every round; checks the view's moving[]. */
static int rebalance_two(void *data, int type,
                         const struct ms_coord_view *v, uint32_t *out,
                         size_t max, char *err, size_t errlen)
{
    (void)data;
    (void)type;
    (void)err;
    (void)errlen;
    rb_calls++;
    CHECK(v->moving != NULL && max >= 2);
    rb_saw_moving |= v->moving[0] && v->moving[1];
    out[0] = 1;
    out[1] = 0;
    return 2;
}

static int rebalance_fails(void *data, int type,
                           const struct ms_coord_view *v, uint32_t *out,
                           size_t max, char *err, size_t errlen)
{
    (void)data;
    (void)type;
    (void)v;
    (void)out;
    (void)max;
    snprintf(err, errlen, "broken");
    return -1;
}

/* Rounds run at their interval (or at once after reconcile), start moves
 * for what the callback proposes, never twice for a moving shard. */
static void test_rebalance_rounds(void)
{
    struct ms_coord *c = moving_cluster(rebalance_two);
    rb_calls = rb_saw_moving = 0;
    uint64_t o0 = ms_coord_owner(c, 0, 0, NULL);
    uint64_t o1 = ms_coord_owner(c, 0, 1, NULL);
    region(o0)->nostop = 1;
    region(o1)->nostop = 1;
    CHECK(ms_coord_tick(c, 500) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(rb_calls == 0); /* not due yet */
    CHECK(ms_coord_tick(c, 1000) == 0);
    pump(c, N1, NULL, NULL);
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(rb_calls == 1 && st.started == 2 && st.in_progress == 2 &&
          st.rounds == 1);
    ms_coord_reconcile(c);
    CHECK(ms_coord_tick(c, 1100) == 0);
    pump(c, N1, NULL, NULL);
    ms_coord_move_stats(c, &st);
    CHECK(rb_calls == 2 && rb_saw_moving && st.started == 2);
    /* the old owners stop: both land on N3 */
    region(o0)->nostop = region(o1)->nostop = 0;
    answer_stop(c, o0, "Counter", 16, &region(o0)->last_stop, 1);
    pump(c, N1, NULL, NULL);
    struct ms_plan_entry e1 = {1, o1, region(o1)->last_stop.gen};
    answer_stop(c, o1, "Counter", 16, &e1, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 0, NULL) == N3);
    CHECK(ms_coord_owner(c, 0, 1, NULL) == N3);
    ms_coord_move_stats(c, &st);
    CHECK(st.finished == 2 && st.in_progress == 0 && st.peak == 2);
    CHECK(regions_agree(c, "Counter"));
    /* no round while a member leaves */
    int calls = rb_calls;
    ms_coord_member_leaving(c, N3, 1200);
    ms_coord_reconcile(c);
    CHECK(ms_coord_tick(c, 1300) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(rb_calls == calls);
    ms_coord_free(c);

    /* a failing callback is counted and noted, nothing moves */
    c = moving_cluster(rebalance_fails);
    CHECK(ms_coord_tick(c, 1000) == 0);
    struct ms_coord_action a;
    int notes = 0;
    while (ms_coord_next_action(c, &a)) {
        notes += a.kind == MS_COORD_NOTE && strstr(a.payload, "broken");
        free(a.payload);
    }
    ms_coord_move_stats(c, &st);
    CHECK(notes == 1 && st.strategy_errors == 1 && st.started == 0);
    ms_coord_free(c);
}

/* A coordinator that is deposed forgets its moves; the next one rolls
 * every moving shard back by publishing the regions' views higher. */
static void test_move_takeover(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    uint64_t from = ms_coord_owner(c, 0, 4, NULL);
    region(from)->nostop = 1;
    CHECK(ms_coord_move(c, 0, 4, 10) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t g0;
    ms_coord_owner(c, 0, 4, &g0);
    /* N2 takes over at term 2 (N1 vanished from its point of view) */
    struct ms_coord_config cfg = {0};
    cfg.self_uid = N2;
    cfg.types = &COUNTER;
    cfg.ntypes = 1;
    cfg.allocate = allocate;
    cfg.data = &S;
    struct ms_coord *b = NULL;
    CHECK(ms_coord_new(&b, &cfg) == 0);
    ms_coord_member_up(b, N2, 0);
    ms_coord_member_up(b, N3, 0);
    ms_coord_member_up(b, N1, 0);
    CHECK(ms_coord_become(b, 2, 0) == 0);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    uint64_t g1;
    CHECK(ms_coord_owner(b, 0, 4, &g1) == from && g1 > g0);
    CHECK(MS_PLAN_GEN_TERM(g1) == 2);
    /* the deposed one learns and forgets */
    ms_coord_observe_term(c, 2);
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(st.in_progress == 0 && !ms_coord_active(c));
    CHECK(regions_agree(b, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
    ms_coord_free(b);
}

int main(void)
{
    test_registration();
    test_not_ready();
    test_allocation();
    test_removed_member();
    test_takeover();
    test_ineligible_owner();
    test_rivals();
    test_malformed();
    test_big_plan();
    test_move();
    test_move_deadline();
    test_leaving_moves();
    test_rebalance_rounds();
    test_move_takeover();
    sim_reset();
    free(S.log);
    CHECK_DONE();
}
