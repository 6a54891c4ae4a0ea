/*
 * membership_leader.c -- the membership view's status changes (sans-IO):
 * convergence, the leader (the coordinator, or who stands in for it) and
 * its round on a converged view (Joining members made Up, Leaving ones
 * Exiting, Exiting and Down ones removed), restarts marked Down, and the
 * changes made on this node: leave, down and owns_shards. See
 * membership.h for the model and membership_int.h for the state.
 */
#include "membership_int.h"

#include <stdlib.h>
#include <string.h>

/* --- convergence and leadership --- */

static int compute_converged(const struct ms_membership *m)
{
    for (uint32_t i = 0; i < m->st.n; i++) {
        const struct mrec *r = &m->st.recs[i];
        if (live(r->pub.status) && r->pub.reachable && !r->seen)
            return 0;
    }
    return 1;
}

const struct mrec *ms__mb_oldest(const struct ms_membership *m, int lo,
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
    const struct mrec *r = ms__mb_oldest(m, MS_MB_UP, MS_MB_UP, 1);
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
int ms__mb_ever_up(const struct ms_membership *m)
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
    const struct mrec *r = ms__mb_oldest(m, MS_MB_UP, MS_MB_UP, 1);
    if (!r)
        r = ms__mb_oldest(m, MS_MB_LEAVING, MS_MB_EXITING, 1);
    if (r)
        return r;
    if (ms__mb_ever_up(m))
        return NULL; /* it had Up members; they are all gone */
    const struct mrec *self = ms__mb_find(&m->st, m->self_uid);
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
            ms__mb_set_status(m, newer(&a->pub, &b->pub) ? b : a, MS_MB_DOWN);
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
    ms__mb_set_status(m, r, MS_MB_UP);
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
            ms__mb_remove_rec(m, r, ++m->st.max_tomb);
            if (!self)
                /* so that it learns */
                ms__mb_push(m, MS_MB_SEND_GOSSIP, &copy);
            else
                return;
        }
    }
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *r = &m->st.recs[i];
        if (r->pub.status == MS_MB_LEAVING &&
            (!r->pub.up_number || !r->pub.owns_shards))
            ms__mb_set_status(m, r, MS_MB_EXITING);
    }
    struct mrec *self = ms__mb_find(&m->st, m->self_uid);
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
    uint64_t d = ms__mb_digest_of(&m->st);
    if (d != m->digest) {
        m->digest = d;
        for (uint32_t i = 0; i < m->st.n; i++)
            m->st.recs[i].seen = m->st.recs[i].pub.uid == m->self_uid;
        m->converged_told = 0;
    }
    m->converged = compute_converged(m);
    if (m->converged && !m->converged_told) {
        m->converged_told = 1;
        struct ms_mb_action *a = ms__mb_push(m, MS_MB_CONVERGED, NULL);
        if (a)
            a->digest = d;
    }
    const struct mrec *c = ms__mb_oldest(m, MS_MB_UP, MS_MB_UP, 1);
    uint64_t cu = c ? c->pub.uid : 0;
    if (cu != m->coordinator) {
        m->coordinator = cu;
        ms__mb_push(m, MS_MB_COORDINATOR_CHANGED, c);
    }
}

/* After every change: restarts, the leader's round, then the bookkeeping. */
void ms__mb_settle(struct ms_membership *m, uint64_t now_ms)
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

void ms__mb_begin(struct ms_membership *m, uint64_t now_ms)
{
    if (m->started)
        return;
    m->started = 1;
    m->started_ms = now_ms;
    m->next_hb_ms = now_ms;
    m->next_gossip_ms = now_ms;
}

/* --- changes made here: leave, down, owns_shards --- */

int ms_mb_leave(struct ms_membership *m, uint64_t now_ms)
{
    ms__mb_begin(m, now_ms);
    struct mrec *self = ms__mb_find(&m->st, m->self_uid);
    if (m->removed || !self || self->pub.status >= MS_MB_DOWN)
        return MS_EINVAL;
    int was = self->pub.status;
    ms__mb_set_status(m, self, MS_MB_LEAVING);
    if (was == MS_MB_JOINING && !ms__mb_ever_up(m) && !m->lone_leave_at_ms) {
        m->lone_leave_at_ms = now_ms + m->lone_leave_ms;
        ms__mb_knock_seeds(m);
    }
    ms__mb_settle(m, now_ms);
    return 0;
}

int ms_mb_down(struct ms_membership *m, const char *address,
               uint64_t now_ms)
{
    ms__mb_begin(m, now_ms);
    if (m->removed || !address)
        return MS_EINVAL;
    int found = 0;
    for (uint32_t i = 0; i < m->st.n; i++) {
        struct mrec *r = &m->st.recs[i];
        if (strcmp(r->pub.address, address))
            continue;
        found = 1;
        ms__mb_set_status(m, r, MS_MB_DOWN);
    }
    if (!found)
        return MS_EINVAL;
    ms__mb_settle(m, now_ms);
    return 0;
}

int ms_mb_set_owns_shards(struct ms_membership *m, uint64_t uid, int owns,
                          uint64_t now_ms)
{
    ms__mb_begin(m, now_ms);
    struct mrec *r = ms__mb_find(&m->st, uid);
    if (!r)
        return MS_EINVAL;
    r->pub.owns_shards = owns != 0;
    ms__mb_settle(m, now_ms);
    return 0;
}
