/*
 * membership.c -- members, tombstones, reachability, gossip and the leader's
 * status changes of one node's view (sans-IO). See membership.h for the
 * model.
 *
 * Memory: the members live in one array sorted by uid (binary search;
 * insertion and removal shift it, which is cheap at <= 1,024 members), the
 * tombstones in another sorted array of fixed capacity, the actions in a
 * ring that grows. A merge parses the whole text into a separate state
 * first and reserves room for its result, so a rejected or failed merge
 * leaves the view as it was.
 */
#include "membership.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

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

static const char *const status_names[] = {
    "unknown", "joining", "up", "leaving", "exiting", "down", "removed"};

const char *ms_mb_status_name(int status)
{
    if (status < MS_MB_JOINING || status > MS_MB_REMOVED)
        return status_names[0];
    return status_names[status];
}

/* --- strings --- */

/* Printable ASCII without space, '"', '\\' and ','. */
static int plain(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != ',';
}

/* 1 when s[0..len) is a valid value of a field of at most `max` bytes. */
static int valid_word(const char *s, size_t len, size_t min, size_t max)
{
    if (len < min || len > max)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!plain((unsigned char)s[i]))
            return 0;
    return 1;
}

static int valid_roles(const char *s, size_t len)
{
    if (len > MS_MB_MAX_ROLES)
        return 0;
    if (len == 0)
        return 1;
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != ',')
            continue;
        if (!valid_word(s + start, i - start, 1, MS_MB_MAX_ROLE))
            return 0;
        if (++n > MS_MB_MAX_NROLES)
            return 0;
        start = i + 1;
    }
    return 1;
}

int ms_mb_has_role(const struct ms_mb_member *mb, const char *role)
{
    size_t rl = strlen(role);
    for (const char *p = mb->roles; *p; p += strcspn(p, ",") + 1) {
        if (strcspn(p, ",") == rl && memcmp(p, role, rl) == 0)
            return 1;
        if (!p[strcspn(p, ",")])
            break;
    }
    return 0;
}

/* --- ordering --- */

int ms_mb_age_cmp(const void *pa, const void *pb)
{
    const struct ms_mb_member *a = pa, *b = pb;
    if (a->up_number != b->up_number) {
        if (a->up_number == 0)
            return 1;
        if (b->up_number == 0)
            return -1;
        return a->up_number < b->up_number ? -1 : 1;
    }
    int c = strcmp(a->address, b->address);
    if (c)
        return c < 0 ? -1 : 1;
    return a->uid < b->uid ? -1 : a->uid > b->uid;
}

/* 1 when a is a newer incarnation than b (same name or address). */
static int newer(const struct ms_mb_member *a, const struct ms_mb_member *b)
{
    if (a->incarnation != b->incarnation)
        return a->incarnation > b->incarnation;
    if (a->status != b->status)
        return a->status < b->status;
    return a->uid > b->uid;
}

static int live(int status)
{
    return status >= MS_MB_JOINING && status < MS_MB_DOWN;
}

/* --- the tables --- */

/* Both tables are sorted by uid, and both element types start with it. */
_Static_assert(offsetof(struct mrec, pub.uid) == 0, "uid first");
_Static_assert(offsetof(struct tomb, uid) == 0, "uid first");

/* Index of the first of n elements of `size` bytes with uid >= `uid`. */
static uint32_t lower_bound(const void *base, size_t size, uint32_t n,
                            uint64_t uid)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint64_t u;
        memcpy(&u, (const char *)base + mid * size, sizeof u);
        if (u < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct mrec *find(const struct state *s, uint64_t uid)
{
    uint32_t i = lower_bound(s->recs, sizeof *s->recs, s->n, uid);
    return i < s->n && s->recs[i].pub.uid == uid ? &s->recs[i] : NULL;
}

static int reserve(struct state *s, uint32_t n)
{
    if (n <= s->cap)
        return 0;
    uint32_t cap = s->cap ? s->cap : 8;
    while (cap < n)
        cap *= 2;
    struct mrec *r = realloc(s->recs, cap * sizeof *r);
    if (!r)
        return MS_ENOMEM;
    s->recs = r;
    s->cap = cap;
    return 0;
}

/* Inserts a copy of `pub`; room must have been reserved. */
static struct mrec *insert(struct state *s, const struct ms_mb_member *pub)
{
    uint32_t i = lower_bound(s->recs, sizeof *s->recs, s->n, pub->uid);
    memmove(&s->recs[i + 1], &s->recs[i], (s->n - i) * sizeof s->recs[0]);
    s->n++;
    memset(&s->recs[i], 0, sizeof s->recs[i]);
    s->recs[i].pub = *pub;
    return &s->recs[i];
}

static void erase(struct state *s, struct mrec *r)
{
    uint32_t i = (uint32_t)(r - s->recs);
    memmove(&s->recs[i], &s->recs[i + 1], (s->n - i - 1) * sizeof *r);
    s->n--;
}

static struct tomb *tomb_find(const struct state *s, uint64_t uid)
{
    uint32_t i = lower_bound(s->tombs, sizeof *s->tombs, s->ntombs, uid);
    return i < s->ntombs && s->tombs[i].uid == uid ? &s->tombs[i] : NULL;
}

static int tomb_less(const struct tomb *a, const struct tomb *b)
{
    return a->seq != b->seq ? a->seq < b->seq : a->uid < b->uid;
}

/* Adds a tombstone, keeping the MS_MB_MAX_TOMBSTONES greatest (seq, uid):
 * the same rule on every node keeps the sets, and the digests, equal. The
 * array has that capacity from the start. */
static void tomb_add(struct state *s, uint64_t uid, uint64_t seq)
{
    struct tomb t = {uid, seq};
    if (s->max_tomb < seq)
        s->max_tomb = seq;
    struct tomb *old = tomb_find(s, uid);
    if (old) {
        /* Two leaders (a downed but live one) may number one removal
         * differently; the lower number wins everywhere. */
        if (seq < old->seq)
            old->seq = seq;
        return;
    }
    if (s->ntombs == MS_MB_MAX_TOMBSTONES) {
        uint32_t lo = 0;
        for (uint32_t i = 1; i < s->ntombs; i++)
            if (tomb_less(&s->tombs[i], &s->tombs[lo]))
                lo = i;
        if (tomb_less(&t, &s->tombs[lo]))
            return;
        memmove(&s->tombs[lo], &s->tombs[lo + 1],
                (s->ntombs - lo - 1) * sizeof t);
        s->ntombs--;
    }
    uint32_t i = lower_bound(s->tombs, sizeof t, s->ntombs, uid);
    memmove(&s->tombs[i + 1], &s->tombs[i], (s->ntombs - i) * sizeof t);
    s->tombs[i] = t;
    s->ntombs++;
}

/* --- digest --- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* A hash of the content, independent of order; seen is not content. */
static uint64_t digest_of(const struct state *s)
{
    uint64_t sum = mix(0x6d656d62ULL ^ s->max_up) + mix(s->max_tomb + 7);
    for (uint32_t i = 0; i < s->n; i++) {
        const struct ms_mb_member *p = &s->recs[i].pub;
        sum += mix(mix(p->uid) ^ ((uint64_t)p->status << 40) ^ p->up_number);
    }
    for (uint32_t i = 0; i < s->ntombs; i++)
        sum += mix(mix(s->tombs[i].uid ^ 0x746f6d62ULL) + s->tombs[i].seq);
    return mix(sum);
}

/* --- actions --- */

/* Queues an action about `r` (may be NULL). Returns it for the caller to
 * complete, or NULL when out of memory: the action is then lost, which costs
 * a round of heartbeat or gossip, or an event (STYLE: only OOM may be
 * fatal, and this is not). */
static struct ms_mb_action *push(struct ms_membership *m, int kind,
                                 const struct mrec *r)
{
    if (m->qlen == m->qcap) {
        uint32_t cap = m->qcap ? m->qcap * 2 : 64;
        struct ms_mb_action *q = malloc(cap * sizeof *q);
        if (!q)
            return NULL;
        for (uint32_t i = 0; i < m->qlen; i++)
            q[i] = m->q[(m->qhead + i) % m->qcap];
        free(m->q);
        m->q = q;
        m->qcap = cap;
        m->qhead = 0;
    }
    struct ms_mb_action *a = &m->q[(m->qhead + m->qlen++) % m->qcap];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    if (r) {
        a->uid = r->pub.uid;
        a->is_self = r->pub.uid == m->self_uid;
        a->status = r->pub.status;
        memcpy(a->name, r->pub.name, sizeof a->name);
        memcpy(a->address, r->pub.address, sizeof a->address);
    }
    return a;
}

static void push_status(struct ms_membership *m, const struct mrec *r,
                        int prev)
{
    struct ms_mb_action *a =
        push(m, MS_MB_MEMBER_JOINING + r->pub.status - MS_MB_JOINING, r);
    if (a)
        a->prev_status = prev;
}

/* Sets a member's status (forward only) and tells the caller. */
static void set_status(struct ms_membership *m, struct mrec *r, int status)
{
    if (status <= r->pub.status)
        return;
    int prev = r->pub.status;
    r->pub.status = status;
    push_status(m, r, prev);
}

/* Removes a member, remembering its uid. */
static void remove_rec(struct ms_membership *m, struct mrec *r, uint64_t seq)
{
    struct mrec copy = *r;
    int prev = copy.pub.status;
    tomb_add(&m->st, copy.pub.uid, seq);
    erase(&m->st, r);
    copy.pub.status = MS_MB_REMOVED;
    push_status(m, &copy, prev);
    if (copy.pub.uid == m->self_uid)
        m->removed = 1;
}

int ms_mb_next_action(struct ms_membership *m, struct ms_mb_action *out)
{
    if (!m->qlen)
        return 0;
    *out = m->q[m->qhead];
    m->qhead = (m->qhead + 1) % m->qcap;
    m->qlen--;
    return 1;
}

/* --- convergence and leadership --- */

static int monitored(const struct ms_membership *m, const struct mrec *r)
{
    return r->pub.uid != m->self_uid && live(r->pub.status);
}

static int compute_converged(const struct ms_membership *m)
{
    for (uint32_t i = 0; i < m->st.n; i++) {
        const struct mrec *r = &m->st.recs[i];
        if (live(r->pub.status) && r->pub.reachable && !r->seen)
            return 0;
    }
    return 1;
}

static const struct mrec *oldest(const struct ms_membership *m, int lo,
                                 int hi, int need_up_number)
{
    const struct mrec *best = NULL;
    for (uint32_t i = 0; i < m->st.n; i++) {
        const struct mrec *r = &m->st.recs[i];
        if (r->pub.status < lo || r->pub.status > hi)
            continue;
        if (need_up_number && !r->pub.up_number)
            continue;
        if (!best || ms_mb_age_cmp(&r->pub, &best->pub) < 0)
            best = r;
    }
    return best;
}

const struct ms_mb_member *ms_mb_leader(const struct ms_membership *m)
{
    const struct mrec *r = oldest(m, MS_MB_UP, MS_MB_UP, 1);
    return r ? &r->pub : NULL;
}

static int may_bootstrap(const struct ms_membership *m, uint64_t now_ms,
                         const struct mrec *self)
{
    if (m->nseeds > 0 && strcmp(m->seeds[0], self->pub.address) != 0)
        return 0;
    if (m->nseeds <= 1)
        return 1;
    if (now_ms - m->started_ms >= m->seed_timeout_ms)
        return 1;
    for (int i = 1; i < m->nseeds; i++)
        if (!m->seed_heard[i] && strcmp(m->seeds[i], self->pub.address))
            return 0;
    return 1;
}

/* 1 when a member of the view has been Up (has an up_number): the cluster
 * exists, and its leader, or a later one, can author a leave. */
static int ever_up(const struct ms_membership *m)
{
    for (uint32_t i = 0; i < m->st.n; i++)
        if (m->st.recs[i].pub.up_number)
            return 1;
    return 0;
}

/* The member that authors status changes of others (membership.h). */
static const struct mrec *author(const struct ms_membership *m,
                                 uint64_t now_ms)
{
    const struct mrec *r = oldest(m, MS_MB_UP, MS_MB_UP, 1);
    if (!r)
        r = oldest(m, MS_MB_LEAVING, MS_MB_EXITING, 1);
    if (r)
        return r;
    if (ever_up(m))
        return NULL; /* it had Up members; they are all gone */
    const struct mrec *self = find(&m->st, m->self_uid);
    if (self && self->pub.status == MS_MB_JOINING &&
        may_bootstrap(m, now_ms, self))
        return self;
    return NULL;
}

/* Marks Down each older incarnation of a name or address (membership.h).
 * Returns 1 when it changed the view. */
static int mark_restarts(struct ms_membership *m)
{
    int changed = 0;
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *a = &m->st.recs[i];
        for (uint32_t j = i + 1; j < m->st.n && live(a->pub.status); j++) {
            struct mrec *b = &m->st.recs[j];
            if (!live(b->pub.status))
                continue;
            if (strcmp(a->pub.name, b->pub.name) &&
                strcmp(a->pub.address, b->pub.address))
                continue;
            set_status(m, newer(&a->pub, &b->pub) ? b : a, MS_MB_DOWN);
            changed = 1;
        }
    }
    return changed;
}

/* 1 when another member shares r's name or address. */
static int has_twin(const struct ms_membership *m, const struct mrec *r)
{
    for (uint32_t i = 0; i < m->st.n; i++) {
        const struct mrec *o = &m->st.recs[i];
        if (o != r && (!strcmp(o->pub.name, r->pub.name) ||
                       !strcmp(o->pub.address, r->pub.address)))
            return 1;
    }
    return 0;
}

static int cmp_join(const void *pa, const void *pb)
{
    const struct mrec *a = *(const struct mrec *const *)pa;
    const struct mrec *b = *(const struct mrec *const *)pb;
    int c = strcmp(a->pub.address, b->pub.address);
    if (c)
        return c;
    return a->pub.uid < b->pub.uid ? -1 : a->pub.uid > b->pub.uid;
}

static void promote(struct ms_membership *m, struct mrec *r)
{
    r->pub.up_number = ++m->st.max_up;
    set_status(m, r, MS_MB_UP);
}

/* The leader's round, on a converged view. */
static void lead(struct ms_membership *m)
{
    /* Removals first: Down and Exiting members; this node only as the last
     * live member. Walk down, since removal shifts the array. */
    uint32_t nlive = 0;
    for (uint32_t i = 0; i < m->st.n; i++)
        nlive += live(m->st.recs[i].pub.status);
    for (uint32_t i = m->st.n; i-- > 0;) {
        struct mrec *r = &m->st.recs[i];
        int self = r->pub.uid == m->self_uid;
        if (r->pub.status == MS_MB_DOWN ||
            (r->pub.status == MS_MB_EXITING && (!self || nlive == 1))) {
            struct mrec copy = *r;
            remove_rec(m, r, ++m->st.max_tomb);
            if (!self)
                push(m, MS_MB_SEND_GOSSIP, &copy); /* so that it learns */
            else
                return;
        }
    }
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *r = &m->st.recs[i];
        if (r->pub.status == MS_MB_LEAVING &&
            (!r->pub.up_number || !r->pub.owns_shards))
            set_status(m, r, MS_MB_EXITING);
    }
    struct mrec *self = find(&m->st, m->self_uid);
    if (self && self->pub.status == MS_MB_JOINING && !has_twin(m, self))
        promote(m, self); /* the bootstrap: the leader is the first Up */
    uint32_t nj = 0;
    for (uint32_t i = 0; i < m->st.n; i++)
        nj += m->st.recs[i].pub.status == MS_MB_JOINING;
    if (!nj)
        return;
    struct mrec **js = malloc(nj * sizeof *js);
    if (!js)
        return; /* out of memory: try again next round */
    nj = 0;
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *r = &m->st.recs[i];
        if (r->pub.status == MS_MB_JOINING && r->pub.reachable &&
            !has_twin(m, r))
            js[nj++] = r;
    }
    qsort(js, nj, sizeof *js, cmp_join);
    for (uint32_t i = 0; i < nj; i++)
        promote(m, js[i]);
    free(js);
}

/* Recomputes digest, seen, convergence and coordinator; tells changes. */
static void refresh(struct ms_membership *m)
{
    uint64_t d = digest_of(&m->st);
    if (d != m->digest) {
        m->digest = d;
        for (uint32_t i = 0; i < m->st.n; i++)
            m->st.recs[i].seen = m->st.recs[i].pub.uid == m->self_uid;
        m->converged_told = 0;
    }
    m->converged = compute_converged(m);
    if (m->converged && !m->converged_told) {
        m->converged_told = 1;
        struct ms_mb_action *a = push(m, MS_MB_CONVERGED, NULL);
        if (a)
            a->digest = d;
    }
    const struct mrec *c = oldest(m, MS_MB_UP, MS_MB_UP, 1);
    uint64_t cu = c ? c->pub.uid : 0;
    if (cu != m->coordinator) {
        m->coordinator = cu;
        push(m, MS_MB_COORDINATOR_CHANGED, c);
    }
}

/* After every change: restarts, the leader's round, then the bookkeeping. */
static void settle(struct ms_membership *m, uint64_t now_ms)
{
    if (m->removed)
        return;
    int changed = 0;
    if (m->dup_check) {
        m->dup_check = 0;
        changed = mark_restarts(m);
    }
    refresh(m);
    const struct mrec *a = author(m, now_ms);
    if (!changed && a && a->pub.uid == m->self_uid && m->converged) {
        lead(m);
        if (m->removed)
            return;
        refresh(m);
    }
}

static void begin(struct ms_membership *m, uint64_t now_ms)
{
    if (m->started)
        return;
    m->started = 1;
    m->started_ms = now_ms;
    m->next_hb_ms = now_ms;
    m->next_gossip_ms = now_ms;
}

/* --- lifecycle --- */

static int copy_field(char *dst, size_t cap, const char *src, size_t min)
{
    if (!src) {
        if (min)
            return MS_EINVAL;
        dst[0] = 0;
        return 0;
    }
    size_t len = strlen(src);
    if (!valid_word(src, len, min, cap - 1))
        return MS_EINVAL;
    memcpy(dst, src, len + 1);
    return 0;
}

int ms_mb_new(struct ms_membership **out, const struct ms_mb_self *self,
              const struct ms_mb_config *cfg)
{
    static const struct ms_mb_config zero;
    *out = NULL;
    if (!self || !self->uid)
        return MS_EINVAL;
    if (!cfg)
        cfg = &zero;
    if (cfg->nseeds < 0 || cfg->nseeds > MS_MB_MAX_SEEDS ||
        (cfg->nseeds && !cfg->seeds))
        return MS_EINVAL;
    struct ms_mb_member me;
    memset(&me, 0, sizeof me);
    if (copy_field(me.name, sizeof me.name, self->name, 1) ||
        copy_field(me.address, sizeof me.address, self->address, 1) ||
        copy_field(me.version, sizeof me.version, self->version, 0))
        return MS_EINVAL;
    if (self->roles) {
        size_t rl = strlen(self->roles);
        if (!valid_roles(self->roles, rl))
            return MS_EINVAL;
        memcpy(me.roles, self->roles, rl + 1);
    }
    me.uid = self->uid;
    me.incarnation = self->incarnation;
    me.weight = self->weight ? self->weight : 1;
    me.status = MS_MB_JOINING;
    me.reachable = 1;
    me.owns_shards = !cfg->assume_no_shards;

    struct ms_membership *m = calloc(1, sizeof *m);
    if (!m)
        return MS_ENOMEM;
    for (int i = 0; i < cfg->nseeds; i++)
        if (copy_field(m->seeds[i], sizeof m->seeds[i], cfg->seeds[i], 1)) {
            free(m);
            return MS_EINVAL;
        }
    m->nseeds = cfg->nseeds;
    m->st.tombs = malloc(MS_MB_MAX_TOMBSTONES * sizeof *m->st.tombs);
    if (!m->st.tombs || reserve(&m->st, 8)) {
        ms_mb_free(m);
        return MS_ENOMEM;
    }
#define OR(x, dflt) ((x) ? (x) : (dflt))
    m->self_uid = me.uid;
    m->hb_ms = OR(cfg->heartbeat_interval_ms, 1000);
    m->unreachable_ms = OR(cfg->unreachable_after_ms, 5000);
    m->gossip_ms = OR(cfg->gossip_interval_ms, 1000);
    m->fanout = OR(cfg->gossip_fanout, 3);
    m->seed_timeout_ms = OR(cfg->seed_timeout_ms, 5000);
    m->lone_leave_ms = OR(cfg->lone_leave_ms, 2000);
    m->assume_no_shards = cfg->assume_no_shards != 0;
    struct mrec *r = insert(&m->st, &me);
    r->seen = 1;
    m->digest = digest_of(&m->st);
    m->converged = 1;
    *out = m;
    return 0;
}

void ms_mb_free(struct ms_membership *m)
{
    if (!m)
        return;
    free(m->st.recs);
    free(m->st.tombs);
    free(m->q);
    free(m);
}

/* --- timers --- */

static void knock_seeds(struct ms_membership *m);

static void gossip_round(struct ms_membership *m)
{
    uint32_t eligible = 0;
    for (uint32_t i = 0; i < m->st.n; i++)
        eligible += monitored(m, &m->st.recs[i]);
    uint32_t want = eligible < m->fanout ? eligible : m->fanout;
    uint32_t i = m->gossip_cursor == UINT64_MAX
                     ? 0
                     : lower_bound(m->st.recs, sizeof *m->st.recs, m->st.n,
                                   m->gossip_cursor + 1);
    for (uint32_t k = 0; want && k < 2 * m->st.n; k++, i++) {
        if (i >= m->st.n)
            i = 0;
        struct mrec *r = &m->st.recs[i];
        if (!monitored(m, r))
            continue;
        push(m, MS_MB_SEND_GOSSIP, r);
        m->gossip_cursor = r->pub.uid;
        want--;
    }
    knock_seeds(m);
}

/*
 * A node that was never Up and knows no Up member (joining, or leaving
 * before its join went through) also sends its state to each seed that is
 * not a known member: that is how a join starts, and how a seed that may
 * have heard of this node learns that it is leaving.
 */
static void knock_seeds(struct ms_membership *m)
{
    const struct mrec *self = find(&m->st, m->self_uid);
    if (!self || oldest(m, MS_MB_UP, MS_MB_UP, 1))
        return;
    if (self->pub.status != MS_MB_JOINING &&
        !(self->pub.status == MS_MB_LEAVING && !self->pub.up_number))
        return;
    for (int s = 0; s < m->nseeds; s++) {
        if (!strcmp(m->seeds[s], self->pub.address))
            continue;
        int known = 0;
        for (uint32_t j = 0; j < m->st.n && !known; j++)
            known = live(m->st.recs[j].pub.status) &&
                    !strcmp(m->st.recs[j].pub.address, m->seeds[s]);
        if (known)
            continue;
        struct ms_mb_action *a = push(m, MS_MB_SEND_GOSSIP, NULL);
        if (a)
            memcpy(a->address, m->seeds[s], sizeof a->address);
    }
}

void ms_mb_tick(struct ms_membership *m, uint64_t now_ms)
{
    begin(m, now_ms);
    if (m->removed)
        return;
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *r = &m->st.recs[i];
        if (monitored(m, r) && r->pub.reachable &&
            now_ms >= r->last_ack_ms &&
            now_ms - r->last_ack_ms >= m->unreachable_ms) {
            r->pub.reachable = 0;
            push(m, MS_MB_MEMBER_UNREACHABLE, r);
        }
    }
    if (now_ms >= m->next_hb_ms) {
        m->next_hb_ms = now_ms + m->hb_ms;
        for (uint32_t i = 0; i < m->st.n; i++)
            if (monitored(m, &m->st.recs[i]))
                push(m, MS_MB_SEND_HEARTBEAT, &m->st.recs[i]);
    }
    if (now_ms >= m->next_gossip_ms) {
        m->next_gossip_ms = now_ms + m->gossip_ms;
        gossip_round(m);
    }
    if (m->lone_leave_at_ms) {
        struct mrec *self = find(&m->st, m->self_uid);
        if (ever_up(m)) {
            m->lone_leave_at_ms = 0; /* it met the cluster: leave as usual */
        } else if (self && now_ms >= m->lone_leave_at_ms) {
            /* nobody answered: nobody made this node Up or gave it
             * shards, so it removes itself (membership.h, ms_mb_leave) */
            remove_rec(m, self, ++m->st.max_tomb);
            return;
        }
    }
    settle(m, now_ms);
}

uint64_t ms_mb_next_deadline(const struct ms_membership *m, uint64_t now_ms)
{
    if (!m->started)
        return 0;
    if (m->removed)
        return UINT64_MAX;
    uint64_t due = m->next_hb_ms < m->next_gossip_ms ? m->next_hb_ms
                                                     : m->next_gossip_ms;
    for (uint32_t i = 0; i < m->st.n; i++) {
        const struct mrec *r = &m->st.recs[i];
        if (monitored(m, r) && r->pub.reachable &&
            r->last_ack_ms + m->unreachable_ms < due)
            due = r->last_ack_ms + m->unreachable_ms;
    }
    const struct mrec *self = find(&m->st, m->self_uid);
    uint64_t boot = m->started_ms + m->seed_timeout_ms;
    if (self && self->pub.status == MS_MB_JOINING && boot > now_ms &&
        boot < due)
        due = boot;
    if (m->lone_leave_at_ms && m->lone_leave_at_ms < due)
        due = m->lone_leave_at_ms;
    return due > now_ms ? due - now_ms : 0;
}

int ms_mb_on_heartbeat(struct ms_membership *m, uint64_t from_uid,
                       uint64_t now_ms)
{
    (void)now_ms;
    return !m->removed && !tomb_find(&m->st, from_uid);
}

void ms_mb_on_heartbeat_ack(struct ms_membership *m, uint64_t uid,
                            uint64_t now_ms)
{
    begin(m, now_ms);
    struct mrec *r = find(&m->st, uid);
    if (m->removed || !r || uid == m->self_uid)
        return;
    if (now_ms > r->last_ack_ms)
        r->last_ack_ms = now_ms;
    if (!r->pub.reachable) {
        r->pub.reachable = 1;
        push(m, MS_MB_MEMBER_REACHABLE, r);
        settle(m, now_ms);
    }
}

/* --- operator and self changes --- */

int ms_mb_leave(struct ms_membership *m, uint64_t now_ms)
{
    begin(m, now_ms);
    struct mrec *self = find(&m->st, m->self_uid);
    if (m->removed || !self || self->pub.status >= MS_MB_DOWN)
        return MS_EINVAL;
    int was = self->pub.status;
    set_status(m, self, MS_MB_LEAVING);
    if (was == MS_MB_JOINING && !ever_up(m) && !m->lone_leave_at_ms) {
        m->lone_leave_at_ms = now_ms + m->lone_leave_ms;
        knock_seeds(m);
    }
    settle(m, now_ms);
    return 0;
}

int ms_mb_down(struct ms_membership *m, const char *address,
               uint64_t now_ms)
{
    begin(m, now_ms);
    if (m->removed || !address)
        return MS_EINVAL;
    int found = 0;
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *r = &m->st.recs[i];
        if (strcmp(r->pub.address, address))
            continue;
        found = 1;
        set_status(m, r, MS_MB_DOWN);
    }
    if (!found)
        return MS_EINVAL;
    settle(m, now_ms);
    return 0;
}

int ms_mb_set_owns_shards(struct ms_membership *m, uint64_t uid, int owns,
                          uint64_t now_ms)
{
    begin(m, now_ms);
    struct mrec *r = find(&m->st, uid);
    if (!r)
        return MS_EINVAL;
    r->pub.owns_shards = owns != 0;
    settle(m, now_ms);
    return 0;
}

/* --- the JSON writer --- */

#define UID "\"%016llx\""
#define ULL(x) ((unsigned long long)(x))

char *ms_mb_gossip_encode(const struct ms_membership *m, size_t *len)
{
    const struct state *s = &m->st;
    struct ms_sbuf b = {0};
    ms_sbuf_printf(&b,
                   "{\"v\":1,\"max_up\":%u,\"max_tomb\":%llu,\"members\":[",
                   s->max_up, ULL(s->max_tomb));
    for (uint32_t i = 0; i < s->n; i++) {
        const struct ms_mb_member *p = &s->recs[i].pub;
        ms_sbuf_printf(&b,
               "%s{\"u\":" UID ",\"n\":\"%s\",\"a\":\"%s\",\"r\":\"%s\","
               "\"ver\":\"%s\",\"w\":%u,\"i\":%llu,\"s\":\"%s\",\"o\":%u}",
               i ? "," : "", ULL(p->uid), p->name, p->address, p->roles,
               p->version, p->weight, ULL(p->incarnation),
               ms_mb_status_name(p->status), p->up_number);
    }
    ms_sbuf_printf(&b, "],\"tombstones\":[");
    for (uint32_t i = 0; i < s->ntombs; i++)
        ms_sbuf_printf(&b, "%s{\"u\":" UID ",\"q\":%llu}", i ? "," : "",
               ULL(s->tombs[i].uid), ULL(s->tombs[i].seq));
    ms_sbuf_printf(&b, "],\"seen\":[");
    const char *sep = "";
    for (uint32_t i = 0; i < s->n; i++)
        if (s->recs[i].seen) {
            ms_sbuf_printf(&b, "%s" UID, sep, ULL(s->recs[i].pub.uid));
            sep = ",";
        }
    ms_sbuf_printf(&b, "]}");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}

/* --- the parser: exactly the format above, nothing else --- */

struct rd {
    const char *p, *e;
};

static int lit(struct rd *r, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(r->e - r->p) < n || memcmp(r->p, s, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

static int peek(const struct rd *r, char c)
{
    return r->p < r->e && *r->p == c;
}

/* A decimal integer <= max, without sign or leading zeros. */
static int num(struct rd *r, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    const char *start = r->p;
    while (r->p < r->e && *r->p >= '0' && *r->p <= '9') {
        unsigned d = (unsigned)(*r->p - '0');
        if (v > (max - d) / 10)
            return MS_EBADJSON;
        v = v * 10 + d;
        r->p++;
    }
    if (r->p == start || (*start == '0' && r->p - start > 1))
        return MS_EBADJSON;
    *out = v;
    return 0;
}

/* "<16 lowercase hex digits>", not zero. */
static int hex16(struct rd *r, uint64_t *out)
{
    if (r->e - r->p < 18 || r->p[0] != '"' || r->p[17] != '"')
        return MS_EBADJSON;
    uint64_t v = 0;
    for (int i = 1; i <= 16; i++) {
        char c = r->p[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            return MS_EBADJSON;
        v = v << 4 | d;
    }
    if (!v)
        return MS_EBADJSON;
    r->p += 18;
    *out = v;
    return 0;
}

/* "<plain bytes, commas too when `commas`>" into out[cap]. */
static int str(struct rd *r, char *out, size_t cap, int commas)
{
    if (!peek(r, '"'))
        return MS_EBADJSON;
    r->p++;
    size_t n = 0;
    while (r->p < r->e && *r->p != '"') {
        unsigned char c = (unsigned char)*r->p;
        if (!plain(c) && !(commas && c == ','))
            return MS_EBADJSON;
        if (n + 1 >= cap)
            return MS_E2BIG;
        out[n++] = (char)c;
        r->p++;
    }
    if (!peek(r, '"'))
        return MS_EBADJSON;
    r->p++;
    out[n] = 0;
    return 0;
}

static int parse_status(struct rd *r, int *out)
{
    for (int s = MS_MB_JOINING; s <= MS_MB_DOWN; s++) {
        char q[16];
        snprintf(q, sizeof q, "\"%s\"", status_names[s]);
        if (lit(r, q)) {
            *out = s;
            return 0;
        }
    }
    return MS_EBADJSON;
}

#define TRY(x)                                                              \
    do {                                                                    \
        int rc_ = (x);                                                      \
        if (rc_)                                                            \
            return rc_;                                                     \
    } while (0)
#define EXPECT(r, s)                                                        \
    do {                                                                    \
        if (!lit((r), (s)))                                                 \
            return MS_EBADJSON;                                             \
    } while (0)

static int parse_member(struct rd *r, struct ms_mb_member *p)
{
    uint64_t v;
    memset(p, 0, sizeof *p);
    EXPECT(r, "{\"u\":");
    TRY(hex16(r, &p->uid));
    EXPECT(r, ",\"n\":");
    TRY(str(r, p->name, sizeof p->name, 0));
    EXPECT(r, ",\"a\":");
    TRY(str(r, p->address, sizeof p->address, 0));
    EXPECT(r, ",\"r\":");
    TRY(str(r, p->roles, sizeof p->roles, 1));
    EXPECT(r, ",\"ver\":");
    TRY(str(r, p->version, sizeof p->version, 0));
    EXPECT(r, ",\"w\":");
    TRY(num(r, UINT32_MAX, &v));
    p->weight = (uint32_t)v;
    EXPECT(r, ",\"i\":");
    TRY(num(r, UINT64_MAX, &p->incarnation));
    EXPECT(r, ",\"s\":");
    TRY(parse_status(r, &p->status));
    EXPECT(r, ",\"o\":");
    TRY(num(r, UINT32_MAX, &v));
    p->up_number = (uint32_t)v;
    EXPECT(r, "}");
    if (!p->name[0] || !p->address[0] ||
        !valid_roles(p->roles, strlen(p->roles)))
        return MS_EBADJSON;
    /* Joining has no up_number, Up must have one. */
    if (p->status == MS_MB_JOINING && p->up_number != 0)
        return MS_EBADJSON;
    if (p->status == MS_MB_UP && p->up_number == 0)
        return MS_EBADJSON;
    return 0;
}

static void state_free(struct state *s)
{
    free(s->recs);
    free(s->tombs);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

static int parse(const char *json, size_t len, struct state *s)
{
    struct rd rr = {json, json + len}, *r = &rr;
    uint64_t v;
    memset(s, 0, sizeof *s);
    EXPECT(r, "{\"v\":1,\"max_up\":");
    TRY(num(r, UINT32_MAX, &v));
    s->max_up = (uint32_t)v;
    EXPECT(r, ",\"max_tomb\":");
    TRY(num(r, UINT64_MAX, &s->max_tomb));
    EXPECT(r, ",\"members\":[");
    while (!peek(r, ']')) {
        if (s->n && !lit(r, ","))
            return MS_EBADJSON;
        if (s->n == MS_MB_MAX_MEMBERS)
            return MS_E2BIG;
        TRY(reserve(s, s->n + 1));
        struct ms_mb_member *p = &s->recs[s->n].pub;
        TRY(parse_member(r, p));
        if ((s->n && p->uid <= s->recs[s->n - 1].pub.uid) ||
            p->up_number > s->max_up)
            return MS_EBADJSON;
        s->recs[s->n].seen = 0;
        s->n++;
    }
    EXPECT(r, "],\"tombstones\":[");
    while (!peek(r, ']')) {
        if (s->ntombs && !lit(r, ","))
            return MS_EBADJSON;
        if (s->ntombs == MS_MB_MAX_TOMBSTONES)
            return MS_E2BIG;
        if (!s->tombs) {
            s->tombs = malloc(MS_MB_MAX_TOMBSTONES * sizeof *s->tombs);
            if (!s->tombs)
                return MS_ENOMEM;
        }
        struct tomb *t = &s->tombs[s->ntombs];
        EXPECT(r, "{\"u\":");
        TRY(hex16(r, &t->uid));
        EXPECT(r, ",\"q\":");
        TRY(num(r, UINT64_MAX, &t->seq));
        EXPECT(r, "}");
        if ((s->ntombs && t->uid <= s->tombs[s->ntombs - 1].uid) ||
            !t->seq || t->seq > s->max_tomb || find(s, t->uid))
            return MS_EBADJSON;
        s->ntombs++;
    }
    EXPECT(r, "],\"seen\":[");
    while (!peek(r, ']')) {
        if (s->nseen && !lit(r, ","))
            return MS_EBADJSON;
        if (s->nseen == s->n)
            return MS_EBADJSON; /* more than members, or a duplicate */
        if (!s->seen) {
            s->seen = malloc(s->n * sizeof *s->seen);
            if (!s->seen)
                return MS_ENOMEM;
        }
        TRY(hex16(r, &v));
        if ((s->nseen && v <= s->seen[s->nseen - 1]) || !find(s, v))
            return MS_EBADJSON;
        s->seen[s->nseen++] = v;
    }
    EXPECT(r, "]}");
    if (r->p != r->e)
        return MS_EBADJSON;
    return 0;
}

static int in_seen(const struct state *s, uint64_t uid)
{
    uint32_t i = lower_bound(s->seen, sizeof *s->seen, s->nseen, uid);
    return i < s->nseen && s->seen[i] == uid;
}

/* Answers the sender: SEND_GOSSIP to `uid`, address from `rs`. */
static void answer(struct ms_membership *m, const struct state *rs,
                   uint64_t uid)
{
    const struct mrec *r = find(rs, uid);
    if (!r || uid == m->self_uid)
        return;
    push(m, MS_MB_SEND_GOSSIP, r);
}

int ms_mb_gossip_merge(struct ms_membership *m, const char *json,
                       size_t len, uint64_t from_uid, uint64_t now_ms)
{
    if (!json && len)
        return MS_EINVAL;
    begin(m, now_ms);
    if (m->removed)
        return 0;
    if (len > MS_MB_MAX_GOSSIP)
        return MS_E2BIG;
    struct state rs;
    int rc = parse(json ? json : "", len, &rs);
    if (rc) {
        state_free(&rs);
        return rc;
    }
    if (from_uid && tomb_find(&m->st, from_uid)) {
        answer(m, &rs, from_uid); /* it learns that it was removed */
        state_free(&rs);
        return 0;
    }
    /* Room for the result first, so that nothing below can fail. */
    uint32_t count = m->st.n;
    for (uint32_t i = 0; i < m->st.n; i++)
        if (tomb_find(&rs, m->st.recs[i].pub.uid))
            count--;
    for (uint32_t i = 0; i < rs.n; i++) {
        uint64_t uid = rs.recs[i].pub.uid;
        if (!find(&m->st, uid) && !tomb_find(&m->st, uid))
            count++;
    }
    if (count > MS_MB_MAX_MEMBERS)
        rc = MS_E2BIG;
    else
        rc = reserve(&m->st, count);
    if (rc) {
        state_free(&rs);
        return rc;
    }
    uint64_t old = m->digest;
    uint64_t remote = digest_of(&rs);
    for (uint32_t i = 0; i < rs.ntombs; i++) {
        struct mrec *r = find(&m->st, rs.tombs[i].uid);
        if (r)
            remove_rec(m, r, rs.tombs[i].seq);
        else
            tomb_add(&m->st, rs.tombs[i].uid, rs.tombs[i].seq);
    }
    if (m->st.max_tomb < rs.max_tomb)
        m->st.max_tomb = rs.max_tomb;
    if (m->st.max_up < rs.max_up)
        m->st.max_up = rs.max_up;
    for (uint32_t i = 0; i < rs.n && !m->removed; i++) {
        const struct ms_mb_member *p = &rs.recs[i].pub;
        if (tomb_find(&m->st, p->uid))
            continue;
        struct mrec *r = find(&m->st, p->uid);
        if (!r) {
            struct ms_mb_member nm = *p;
            nm.reachable = 1;
            nm.owns_shards = !m->assume_no_shards;
            r = insert(&m->st, &nm);
            r->last_ack_ms = now_ms; /* a grace period to answer */
            m->dup_check = 1;
            push_status(m, r, 0);
            continue;
        }
        uint32_t a = r->pub.up_number, b = p->up_number;
        r->pub.up_number = !a ? b : !b ? a : a < b ? a : b;
        set_status(m, r, p->status);
    }
    if (m->removed) {
        state_free(&rs);
        return 0;
    }
    /* seen: the sender's set counts only for the state it describes. */
    uint64_t now = digest_of(&m->st);
    if (now != old) {
        m->digest = now;
        m->converged_told = 0;
        for (uint32_t i = 0; i < m->st.n; i++) {
            struct mrec *r = &m->st.recs[i];
            r->seen = r->pub.uid == m->self_uid ||
                      (now == remote && in_seen(&rs, r->pub.uid));
        }
    } else if (remote == old) {
        for (uint32_t i = 0; i < m->st.n; i++)
            if (in_seen(&rs, m->st.recs[i].pub.uid))
                m->st.recs[i].seen = 1;
    }
    /* Which seed was this? */
    const struct mrec *from = from_uid ? find(&m->st, from_uid) : NULL;
    for (int s = 0; from && s < m->nseeds; s++)
        if (!strcmp(m->seeds[s], from->pub.address))
            m->seed_heard[s] = 1;
    if (from_uid && (now != remote || !in_seen(&rs, m->self_uid)))
        answer(m, &rs, from_uid);
    state_free(&rs);
    settle(m, now_ms);
    return 0;
}

/* --- queries --- */

int ms_mb_self_status(const struct ms_membership *m)
{
    const struct mrec *r = find(&m->st, m->self_uid);
    return m->removed || !r ? MS_MB_REMOVED : r->pub.status;
}

uint64_t ms_mb_self_uid(const struct ms_membership *m)
{
    return m->self_uid;
}

size_t ms_mb_member_count(const struct ms_membership *m)
{
    return m->st.n;
}

const struct ms_mb_member *ms_mb_member_at(const struct ms_membership *m,
                                           size_t i)
{
    return i < m->st.n ? &m->st.recs[i].pub : NULL;
}

const struct ms_mb_member *ms_mb_find_by_uid(const struct ms_membership *m,
                                             uint64_t uid)
{
    const struct mrec *r = find(&m->st, uid);
    return r ? &r->pub : NULL;
}

static const struct ms_mb_member *
find_newest(const struct ms_membership *m, const char *s, int by_address)
{
    const struct ms_mb_member *best = NULL;
    if (!s)
        return NULL;
    for (uint32_t i = 0; i < m->st.n; i++) {
        const struct ms_mb_member *p = &m->st.recs[i].pub;
        if (strcmp(by_address ? p->address : p->name, s))
            continue;
        if (!best || newer(p, best))
            best = p;
    }
    return best;
}

const struct ms_mb_member *
ms_mb_find_by_address(const struct ms_membership *m, const char *address)
{
    return find_newest(m, address, 1);
}

const struct ms_mb_member *ms_mb_find_by_name(const struct ms_membership *m,
                                              const char *name)
{
    return find_newest(m, name, 0);
}

int ms_mb_is_reachable(const struct ms_membership *m, uint64_t uid)
{
    const struct mrec *r = find(&m->st, uid);
    return r ? r->pub.reachable : 0;
}

int ms_mb_is_tombstoned(const struct ms_membership *m, uint64_t uid)
{
    return tomb_find(&m->st, uid) != NULL;
}

int ms_mb_converged(const struct ms_membership *m)
{
    return !m->removed && m->converged;
}

uint64_t ms_mb_digest(const struct ms_membership *m)
{
    return m->digest;
}

size_t ms_mb_status_json(const struct ms_membership *m, char *buf,
                         size_t buflen)
{
    struct ms_sbuf b = {0};
    const struct ms_mb_member *lead = ms_mb_leader(m);
    char leader[24] = "null", coord[24] = "null";
    if (lead)
        snprintf(leader, sizeof leader, UID, ULL(lead->uid));
    if (m->coordinator)
        snprintf(coord, sizeof coord, UID, ULL(m->coordinator));
    ms_sbuf_printf(&b,
           "{\"self\":" UID ",\"leader\":%s,\"converged\":%s,"
           "\"digest\":" UID ",\"tombstones\":%u,\"coordinator\":%s,"
           "\"members\":[",
           ULL(m->self_uid), leader, ms_mb_converged(m) ? "true" : "false",
           ULL(m->digest), m->st.ntombs, coord);
    struct ms_mb_member *sorted = malloc((m->st.n + 1) * sizeof *sorted);
    if (!sorted)
        b.oom = 1;
    for (uint32_t i = 0; sorted && i < m->st.n; i++)
        sorted[i] = m->st.recs[i].pub;
    if (sorted)
        qsort(sorted, m->st.n, sizeof *sorted, ms_mb_age_cmp);
    for (uint32_t i = 0; sorted && i < m->st.n; i++) {
        const struct ms_mb_member *p = &sorted[i];
        ms_sbuf_printf(&b,
               "%s{\"uid\":" UID ",\"name\":\"%s\",\"address\":\"%s\","
               "\"status\":\"%s\",\"up_number\":%u,\"roles\":[",
               i ? "," : "", ULL(p->uid), p->name, p->address,
               ms_mb_status_name(p->status), p->up_number);
        for (const char *r = p->roles; *r;) {
            size_t l = strcspn(r, ",");
            ms_sbuf_printf(&b, "%s\"%.*s\"", r == p->roles ? "" : ",",
                           (int)l, r);
            r += l + (r[l] == ',');
        }
        ms_sbuf_printf(&b,
                       "],\"version\":\"%s\",\"weight\":%u,\"reachable\":%s}",
                       p->version, p->weight,
                       p->reachable ? "true" : "false");
    }
    free(sorted);
    ms_sbuf_printf(&b, "]}");
    size_t need = b.oom ? 0 : b.len;
    if (buflen) {
        size_t n = need < buflen - 1 ? need : buflen - 1;
        if (n)
            memcpy(buf, b.p, n);
        buf[n] = 0;
    }
    free(b.p);
    return need;
}
