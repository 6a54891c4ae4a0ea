/*
 * membership.c -- the membership view of one node (sans-IO): the tables
 * (members, tombstones), the digest, the action queue, lifecycle and the
 * queries. See membership.h for the model and membership_int.h for the
 * state and the other files' jobs.
 */
#include "membership_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

static const char *const status_names[] = {
    "unknown", "joining", "up", "leaving", "exiting", "down", "removed"};

const char *ms_mb_status_name(int status)
{
    if (status < MS_MB_JOINING || status > MS_MB_REMOVED)
        return status_names[0];
    return status_names[status];
}

/* --- strings --- */

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

int ms__mb_valid_roles(const char *s, size_t len)
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

/* --- the tables --- */

/* Both tables are sorted by uid, and both element types start with it. */
_Static_assert(offsetof(struct mrec, pub.uid) == 0, "uid first");
_Static_assert(offsetof(struct tomb, uid) == 0, "uid first");

/* Index of the first of n elements of `size` bytes with uid >= `uid`. */
uint32_t ms__mb_lower_bound(const void *base, size_t size, uint32_t n,
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

struct mrec *ms__mb_find(const struct state *s, uint64_t uid)
{
    uint32_t i = ms__mb_lower_bound(s->recs, sizeof *s->recs, s->n, uid);
    return i < s->n && s->recs[i].pub.uid == uid ? &s->recs[i] : NULL;
}

int ms__mb_reserve(struct state *s, uint32_t n)
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
struct mrec *ms__mb_insert(struct state *s, const struct ms_mb_member *pub)
{
    uint32_t i = ms__mb_lower_bound(s->recs, sizeof *s->recs, s->n, pub->uid);
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

struct tomb *ms__mb_tomb_find(const struct state *s, uint64_t uid)
{
    uint32_t i =
        ms__mb_lower_bound(s->tombs, sizeof *s->tombs, s->ntombs, uid);
    return i < s->ntombs && s->tombs[i].uid == uid ? &s->tombs[i] : NULL;
}

static int tomb_less(const struct tomb *a, const struct tomb *b)
{
    return a->seq != b->seq ? a->seq < b->seq : a->uid < b->uid;
}

/* Adds a tombstone, keeping the MS_MB_MAX_TOMBSTONES greatest (seq, uid):
 * the same rule on every node keeps the sets, and the digests, equal. The
 * array has that capacity from the start. */
void ms__mb_tomb_add(struct state *s, uint64_t uid, uint64_t seq)
{
    struct tomb t = {uid, seq};
    if (s->max_tomb < seq)
        s->max_tomb = seq;
    struct tomb *old = ms__mb_tomb_find(s, uid);
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
    uint32_t i = ms__mb_lower_bound(s->tombs, sizeof t, s->ntombs, uid);
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
uint64_t ms__mb_digest_of(const struct state *s)
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
struct ms_mb_action *ms__mb_push(struct ms_membership *m, int kind,
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

void ms__mb_push_status(struct ms_membership *m, const struct mrec *r,
                        int prev)
{
    struct ms_mb_action *a =
        ms__mb_push(m, MS_MB_MEMBER_JOINING + r->pub.status - MS_MB_JOINING,
                    r);
    if (a)
        a->prev_status = prev;
}

/* Sets a member's status (forward only) and tells the caller. */
void ms__mb_set_status(struct ms_membership *m, struct mrec *r, int status)
{
    if (status <= r->pub.status)
        return;
    int prev = r->pub.status;
    r->pub.status = status;
    ms__mb_push_status(m, r, prev);
}

/* Removes a member, remembering its uid. */
void ms__mb_remove_rec(struct ms_membership *m, struct mrec *r, uint64_t seq)
{
    struct mrec copy = *r;
    int prev = copy.pub.status;
    ms__mb_tomb_add(&m->st, copy.pub.uid, seq);
    erase(&m->st, r);
    copy.pub.status = MS_MB_REMOVED;
    ms__mb_push_status(m, &copy, prev);
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
        if (!ms__mb_valid_roles(self->roles, rl))
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
    if (!m->st.tombs || ms__mb_reserve(&m->st, 8)) {
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
    struct mrec *r = ms__mb_insert(&m->st, &me);
    r->seen = 1;
    m->digest = ms__mb_digest_of(&m->st);
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

/* --- queries --- */

int ms_mb_self_status(const struct ms_membership *m)
{
    const struct mrec *r = ms__mb_find(&m->st, m->self_uid);
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
    const struct mrec *r = ms__mb_find(&m->st, uid);
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
    const struct mrec *r = ms__mb_find(&m->st, uid);
    return r ? r->pub.reachable : 0;
}

int ms_mb_is_tombstoned(const struct ms_membership *m, uint64_t uid)
{
    return ms__mb_tomb_find(&m->st, uid) != NULL;
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

