/*
 * region_control.c -- the region's CONTROL messages (views, plans, moves,
 * stops), its life cycle and its queries (region.h).
 */
#include "region_impl.h"
#include "simswitch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "log.h"
#include "membership.h"

/* Answers a VIEW_REQUEST: this node's plan of every type it hosts, then
 * view_done. */
static void answer_views(struct ms_region *r, uint64_t uid, uint64_t term)
{
    for (int type = 0; type < r->ntypes; type++) {
        uint32_t cursor = 0;
        if (ms_dispatch_unavailable(r->d, type))
            continue; /* not hosted here */
        do {
            char *txt;
            size_t len;
            if (ms_plan_view_encode(r->types[type].plan, ms__region_tname(r,
                                                                          type),
                                    r->types[type].fingerprint, term, &cursor,
                                    &txt, &len) < 0)
                break;
            struct ms_frame f;
            memset(&f, 0, sizeof f);
            f.kind = MS_FRAME_CONTROL;
            f.payload = txt;
            f.payload_len = len;
            ms__region_emit(r, MS_REGION_SEND, uid, &f, RG_FAIL_NONE, 0);
            free(txt);
        } while (cursor < ms_plan_shard_count(r->types[type].plan));
    }
    struct ms_plan_msg done;
    memset(&done, 0, sizeof done);
    done.kind = MS_PLAN_MSG_VIEW_DONE;
    done.term = term;
    ms__region_send_control(r, uid, &done, RG_FAIL_NONE, 0);
}

/* The coordinator moves shards: stop sending them, buffer them, and fence
 * each old owner's connection. */
static void on_handoff(struct ms_region *r, uint64_t coord, int type,
                       const struct ms_plan_msg *m)
{
    struct ms_plan_entry *e = malloc((m->nentries + 1) * sizeof *e);
    if (!e)
        return;
    size_t n = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        uint64_t gen;
        ms_plan_owner(r->types[type].plan, m->entries[i].shard, &gen);
        struct rshard *s = ms__region_shard(r, type, m->entries[i].shard);
        if (!s || gen > m->entries[i].gen)
            continue; /* already over here */
#ifdef MS_SIM_SWITCHES
        if (ms_sim_break_skip_fence) {
            e[n++] = m->entries[i]; /* fence, but go on sending there */
            continue;
        }
#endif
        if (!s->hgen) {
            r->nblocked++;
            s->blocked_ms = r->now;
        }
        s->hgen = m->entries[i].gen;
        s->hfrom = m->entries[i].owner;
        e[n++] = m->entries[i];
    }
    /* one fence per old owner, with its entries (still ascending); one
     * that finds no connection is reported as passed (ms_region_send_failed
     * and ms__region_fence_direct) */
    struct ms_plan_msg f = *m;
    f.kind = MS_PLAN_MSG_FENCE;
    f.entries = malloc((n + 1) * sizeof *f.entries);
    for (size_t i = 0; f.entries && i < n; i++) {
        if (!e[i].owner)
            continue;
        uint64_t to = e[i].owner;
        f.nentries = 0;
        for (size_t j = i; j < n; j++)
            if (e[j].owner == to) {
                f.entries[f.nentries++] = e[j];
                e[j].owner = 0;
            }
        ms__region_send_control(r, to, &f, RG_FAIL_FENCE, coord);
    }
    free(f.entries);
    free(e);
    r->st.handoffs_seen += n;
}

void ms__region_fence_direct(struct ms_region *r,
                             const struct ms_region_action *a)
{
    struct ms_plan_msg m;
    if (ms_plan_msg_decode(a->frame.payload, a->frame.payload_len, &m) < 0)
        return;
    /* no connection to the old owner: nothing this node sent is on its
     * way there, so the fence holds already; say so to the coordinator
     * as the old owner would */
    for (size_t j = 0; j < m.nentries; j++)
        m.entries[j].owner = r->self;
    m.kind = MS_PLAN_MSG_FENCED;
    if (ms__region_send_control(r, a->fail_uid, &m, RG_FAIL_NONE, 0) == 0)
        r->st.fences_direct++;
    ms_plan_msg_free(&m);
}

/* A plan entry ends the shard's move here once it is newer than the move:
 * the new owner (or, rolled back, the old one) takes what waits. */
static void end_handoff(struct ms_region *r, int type,
                        const struct ms_plan_entry *e)
{
    struct rshard *s = r->types[type].shards
                           ? &r->types[type].shards[e->shard] : NULL;
    if (!s)
        return;
    if (s->hgen && e->gen > s->hgen) {
        s->hgen = 0;
        s->warned = 0;
        r->nblocked--;
    }
    if (s->stopping && e->gen > s->stop_hgen) {
        s->stopping = 0;
        r->nstopping--;
        if (s->release_wait) {
            s->release_wait = 0;
            r->nrelease_wait--;
        }
        if (e->owner == r->self)
            ms_dispatch_shard_resume(r->d, type, e->shard);
    }
}

/* The type of a plan, handoff or stop message `m` from `uid`, or -1: not
 * one of ours, another shard count (a type the cluster refused here), or
 * not from the coordinator our fence accepts. */
static int from_coordinator(struct ms_region *r, uint64_t uid,
                            const struct ms_plan_msg *m)
{
    int type = ms__region_type_by_name(r, m->type, strlen(m->type));
    if (type < 0 || m->shard_count != r->cfg->types[type].shard_count ||
        !ms_plan_fence_check(&r->fence, m->term, uid))
        return -1;
    return type;
}

void ms__region_on_control(struct ms_region *r, uint64_t uid,
                           const struct ms_frame *f)
{
    struct ms_plan_msg m;
    int rc = ms_plan_msg_decode(f->payload, f->payload_len, &m);
    if (rc < 0) {
        ms_log(MS_LOG_WARN, NULL, "malformed control message from "
               "%016llx: %s", (unsigned long long)uid, ms_strerror(rc));
        return;
    }
    switch (m.kind) {
    case MS_PLAN_MSG_VIEW_REQUEST:
        if (ms_plan_fence_check(&r->fence, m.term, uid)) {
            if (uid != r->self) {
                ms_coord_observe_term(r->coord, m.term);
                ms__region_coord_drain(r);
            }
            answer_views(r, uid, m.term);
        } else {
            struct ms_plan_msg st;
            memset(&st, 0, sizeof st);
            st.kind = MS_PLAN_MSG_STALE_TERM;
            st.term = r->fence.term;
            ms__region_send_control(r, uid, &st, RG_FAIL_NONE, 0);
        }
        break;
    case MS_PLAN_MSG_PLAN: {
        int type = from_coordinator(r, uid, &m);
        if (type < 0)
            break;
        if (ms_plan_apply_msg(r->types[type].plan, &m) < 0)
            break;
        for (size_t i = 0; i < m.nentries; i++) {
            end_handoff(r, type, &m.entries[i]);
            if (r->types[type].persistent)
                ms__region_lease_plan(r, type, m.entries[i].shard);
            ms__region_flush_shard(r, type, m.entries[i].shard);
        }
        ms__region_lease_pump(r);
        break;
    }
    case MS_PLAN_MSG_HANDOFF: {
        int type = from_coordinator(r, uid, &m);
        if (type < 0)
            break;
        on_handoff(r, uid, type, &m);
        break;
    }
    case MS_PLAN_MSG_FENCE: {
        /* a region's fence passed: everything it sent here before is in
         * our queues; tell the coordinator */
        uint64_t coord = r->fence.term == m.term ? r->fence.coordinator
                                                 : r->coordinator;
        for (size_t i = 0; i < m.nentries; i++)
            m.entries[i].owner = uid;
        m.kind = MS_PLAN_MSG_FENCED;
        if (coord)
            ms__region_send_control(r, coord, &m, RG_FAIL_NONE, 0);
        break;
    }
    case MS_PLAN_MSG_STOP: {
        int type = from_coordinator(r, uid, &m);
        if (type < 0)
            break;
        for (size_t i = 0; i < m.nentries; i++) {
            struct rshard *s = ms__region_shard(r, type, m.entries[i].shard);
            if (!s)
                continue;
            /* requests of other nodes that came before their fence wait
             * here for the shard's lease: they are ours to deliver (or,
             * once the lease window runs out, to reject) before the stop
             * (G2). Bounced once the new owner is published, they would
             * race the plan to their sender and arrive after what it sent
             * next. The coordinator sends STOP again until STOPPED (or
             * rolls the move back at its deadline). */
            if (!s->stopping && r->types[type].persistent && s->nheld &&
                !s->lease_stop &&
                ms_lease_gate(r->lease, type, m.entries[i].shard) == 0)
                continue; /* being acquired (or lost, expired, fenced) */
            if (!s->stopping)
                r->nstopping++;
            ms__region_flush_shard(r, type,
                                   m.entries[i].shard); /* held first */
            s->stopping = 1;
            s->stop_hgen = m.entries[i].gen;
            s->stop_term = m.term;
            s->stop_coord = uid;
            ms_dispatch_shard_stop(r->d, type, m.entries[i].shard);
            /* the lease is released once the entities stopped */
            if (r->types[type].persistent)
                ms__region_lease_handoff(r, type, m.entries[i].shard);
        }
        ms__region_kick(r);
        break;
    }
    case MS_PLAN_MSG_ALLOC_REFUSED: {
        int type = ms__region_type_by_name(r, m.type, strlen(m.type));
        if (type >= 0 && strcmp(m.code, "not_ready") != 0)
            ms_log(MS_LOG_WARN, NULL, "allocation of %s shard %u refused: "
                   "%s (%s)", m.type, m.shard, m.code, m.reason);
        break; /* waiting messages fail at their deadline; ticks retry */
    }
    case MS_PLAN_MSG_REGISTER_REFUSED: {
        int type = ms__region_type_by_name(r, m.type, strlen(m.type));
        if (type >= 0 && !r->types[type].refused) {
            r->types[type].refused = 1;
            ms_log(MS_LOG_ERROR, NULL, "the cluster refused entity type %s "
                   "on this node: %s", m.type, m.reason);
        }
        break;
    }
    default:
        /* view, view_done, stale_term, alloc: the coordinator's */
        ms_coord_on_msg(r->coord, uid, &m, r->now);
        ms__region_coord_drain(r);
    }
    ms_plan_msg_free(&m);
}

/* ---- membership ---------------------------------------------------------- */

void ms_region_on_coordinator(struct ms_region *r, uint64_t uid,
                              uint64_t now_ms)
{
    r->now = now_ms;
    r->coordinator = uid;
    if (uid == r->self) {
        uint64_t t = ms_coord_max_term(r->coord);
        if (r->fence.term > t)
            t = r->fence.term;
        if (ms_coord_become(r->coord, t + 1, now_ms) < 0)
            ms_log(MS_LOG_ERROR, NULL, "cannot become coordinator at term "
                   "%llu", (unsigned long long)(t + 1));
    } else if (ms_coord_active(r->coord)) {
        ms_coord_resign(r->coord);
    }
    ms__region_coord_drain(r);
    /* waiting messages ask the new coordinator on the next tick */
    for (int t = 0; t < r->ntypes; t++)
        if (r->types[t].shards)
            for (uint32_t s = 0; s < r->cfg->types[t].shard_count; s++)
                r->types[t].shards[s].alloc_sent_ms = 0;
}

void ms_region_peer_connected(struct ms_region *r, uint64_t uid,
                              uint64_t now_ms)
{
    r->now = now_ms;
    ms_coord_member_connected(r->coord, uid);
    ms__region_coord_drain(r);
}

void ms_region_member(struct ms_region *r, uint64_t uid, int status,
                      uint64_t now_ms)
{
    r->now = now_ms;
    if (status == MS_MB_UP)
        ms_coord_member_up(r->coord, uid, now_ms);
    else if (status == MS_MB_LEAVING)
        /* the coordinator moves its shards away through handoff */
        ms_coord_member_leaving(r->coord, uid, now_ms);
    else if (status >= MS_MB_EXITING)
        ms_coord_member_removed(r->coord, uid, now_ms);
    ms__region_coord_drain(r);
    /* a member that came (back) may own shards with waiting messages */
    for (int t = 0; t < r->ntypes; t++)
        if (r->types[t].shards)
            for (uint32_t s = 0; s < r->cfg->types[t].shard_count; s++)
                if (r->types[t].shards[s].head)
                    ms__region_flush_shard(r, t, s);
}

/* The dispatcher stopped (type, shard) and nothing holds it: release
 * its lease (0), or it is to be reported (1). */
static int stopped_go_on(struct ms_region *r, int type, uint32_t shard,
                         struct rshard *s)
{
    if (s && r->types[type].persistent &&
        ms__region_lease_stopped(r, type, shard, s))
        return 0; /* a lease's stop, or the release is out */
    return s && s->stopping; /* else called off meanwhile */
}

/* One STOPPED to `coord` at `term` with e[0..n) of `type`. */
static void send_stopped(struct ms_region *r, int type, uint64_t coord,
                         uint64_t term, struct ms_plan_entry *e, size_t n)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_STOPPED;
    m.term = term;
    snprintf(m.type, sizeof m.type, "%s", ms__region_tname(r, type));
    m.shard_count = r->cfg->types[type].shard_count;
    m.entries = e;
    m.nentries = n;
    ms__region_send_control(r, coord, &m, RG_FAIL_NONE, 0);
    r->st.shards_handed_off += n;
}

/* A stopped shard to report. */
struct stop_report {
    uint64_t coord, term, hgen;
    int type;
    uint32_t shard;
};

static int report_cmp(const void *a, const void *b)
{
    const struct stop_report *x = a, *y = b;
    if (x->coord != y->coord)
        return x->coord < y->coord ? -1 : 1;
    if (x->term != y->term)
        return x->term < y->term ? -1 : 1;
    if (x->type != y->type)
        return x->type < y->type ? -1 : 1;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return x->hgen > y->hgen ? -1 : x->hgen < y->hgen; /* newest first */
}

/* Reports q[0..n): one STOPPED per coordinator, term and type (with at
 * most MS_PLAN_MSG_MAX_ENTRIES entries), so that the coordinator places
 * the shards of one dispatch round together. */
static void report_many(struct ms_region *r, struct stop_report *q,
                        size_t n)
{
    struct ms_plan_entry *e = malloc((n + 1) * sizeof *e);
    qsort(q, n, sizeof *q, report_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i, ne = 0;
        while (j < n && ne < MS_PLAN_MSG_MAX_ENTRIES &&
               q[j].coord == q[i].coord && q[j].term == q[i].term &&
               q[j].type == q[i].type) {
            /* entries are strictly ascending (plan.h): a shard stopped
             * twice in one round is reported once, at its newest move */
            if (e && (!ne || e[ne - 1].shard != q[j].shard))
                e[ne++] = (struct ms_plan_entry){q[j].shard, r->self,
                                                 q[j].hgen};
            j++;
        }
        if (!e) { /* one by one */
            struct rshard *s = ms__region_shard(r, q[i].type, q[i].shard);
            if (s)
                ms__region_report_stopped(r, q[i].type, q[i].shard, s);
            i++;
            continue;
        }
        send_stopped(r, q[i].type, q[i].coord, q[i].term, e, ne);
        i = j;
    }
    free(e);
}

void ms_region_after_dispatch(struct ms_region *r, uint64_t now_ms)
{
    r->now = now_ms;
    int type;
    uint32_t shard;
    struct stop_report *q = NULL;
    size_t nq = 0, capq = 0;
    while (ms_dispatch_next_stopped(r->d, &type, &shard)) {
        struct rshard *s = ms__region_shard(r, type, shard);
        if (s && s->hold_wait)
            continue; /* its wait goes on (ms__region_hold_tick) */
        if (s && s->stopping && r->hold &&
            r->hold(r->hold_data, type, shard)) {
            s->hold_wait = 1;
            s->hold_since_ms = now_ms;
            r->nhold_wait++;
            continue;
        }
        if (!stopped_go_on(r, type, shard, s))
            continue;
        if (nq == capq) {
            size_t cap = capq ? capq * 2 : 16;
            struct stop_report *nqp = realloc(q, cap * sizeof *q);
            if (!nqp) { /* report it alone */
                ms__region_report_stopped(r, type, shard, s);
                continue;
            }
            q = nqp;
            capq = cap;
        }
        q[nq++] = (struct stop_report){s->stop_coord, s->stop_term,
                                       s->stop_hgen, type, shard};
    }
    if (nq)
        report_many(r, q, nq);
    free(q);
}

void ms__region_hold_tick(struct ms_region *r)
{
    uint64_t half = r->cfg->handoff_timeout_ms / 2;
    uint64_t most = half < MS_REGION_RELEASE_WAIT_MS
                        ? half : MS_REGION_RELEASE_WAIT_MS;
    for (int t = 0; t < r->ntypes && r->nhold_wait; t++) {
        struct rtype *rt = &r->types[t];
        for (uint32_t i = 0; rt->shards && r->nhold_wait &&
                             i < r->cfg->types[t].shard_count; i++) {
            struct rshard *s = &rt->shards[i];
            if (!s->hold_wait)
                continue;
            int late = r->now - s->hold_since_ms >= most;
            if (s->stopping && !late && r->hold(r->hold_data, t, i))
                continue;
            if (s->stopping && late)
                ms_log(MS_LOG_WARN, NULL, "the remembered ids of %s shard "
                       "%u were not all written within %d ms; its stop "
                       "goes on (the new owner may miss the latest)",
                       ms__region_tname(r, t), i, (int)most);
            s->hold_wait = 0;
            r->nhold_wait--;
            if (stopped_go_on(r, t, i, s))
                ms__region_report_stopped(r, t, i, s);
        }
    }
}

void ms_region_allocate_unowned(struct ms_region *r, int type,
                                uint64_t now_ms)
{
    if (type < 0 || type >= r->ntypes || !r->coordinator)
        return;
    r->now = now_ms;
    struct rtype *rt = &r->types[type];
    uint32_t n = r->cfg->types[type].shard_count, owned = 0;
    for (uint32_t i = 0; i < n; i++)
        owned += ms_plan_owner(rt->plan, i, NULL) != 0;
    if (owned == n)
        return;
    /* the coordinator's strategy sees every allocation of the type for
     * each shard it places: the batch shrinks as the type fills, so that
     * one batch stays a bounded amount of its work (and of its loop) */
    uint32_t most = MS_REGION_ALLOC_UNOWNED_WORK / (owned + 1);
    most = most < MS_REGION_ALLOC_UNOWNED_MIN ? MS_REGION_ALLOC_UNOWNED_MIN
           : most > MS_REGION_ALLOC_UNOWNED_MAX ? MS_REGION_ALLOC_UNOWNED_MAX
                                                : most;
    /* from a cursor that moves on, so that a shard the coordinator never
     * places does not hold back the ones behind it */
    uint32_t asked = 0, first = n;
    for (uint32_t j = 0; j < n && asked < most; j++) {
        uint32_t i = (rt->alloc_next + j) % n;
        if (ms_plan_owner(rt->plan, i, NULL))
            continue;
        if (first == n)
            first = i;
        ms__region_request_alloc(r, type, i); /* not again within
                                                 MS_REGION_ALLOC_RETRY_MS */
        asked++;
    }
    rt->alloc_next = first < n ? (first + 1) % n : 0;
}

void ms_region_set_stop_hold(struct ms_region *r, ms_region_hold_cb hold,
                             void *data)
{
    r->hold = hold;
    r->hold_data = data;
}

int ms_region_shard_stopping(const struct ms_region *r, int type,
                             uint32_t shard)
{
    if (type < 0 || type >= r->ntypes || !r->types[type].shards ||
        shard >= r->cfg->types[type].shard_count)
        return 0;
    return r->types[type].shards[shard].stopping != 0;
}

int ms_region_shard_serving(const struct ms_region *r, int type,
                            uint32_t shard)
{
    if (type < 0 || type >= r->ntypes ||
        shard >= r->cfg->types[type].shard_count ||
        ms_plan_owner(r->types[type].plan, shard, NULL) != r->self)
        return 0;
    const struct rshard *s = r->types[type].shards
                                 ? &r->types[type].shards[shard] : NULL;
    if (s && (s->stopping || s->lease_stop || s->hold_wait))
        return 0;
    return ms__region_gated(r, type, shard) == 0;
}

void ms__region_report_stopped(struct ms_region *r, int type, uint32_t shard,
                               struct rshard *s)
{
    struct ms_plan_entry e = {shard, r->self, s->stop_hgen};
    send_stopped(r, type, s->stop_coord, s->stop_term, &e, 1);
}

/* ---- life cycle ---------------------------------------------------------- */

/* The settings a node must share with the cluster to host a type. */
static void fingerprint(const struct ms_type_config *t, char *buf, size_t len)
{
    int w = snprintf(buf, len, "%s|module=%s|shards=%u|idle_ms=%llu|"
                     "on_error=%s|allocation=%s|partition=%s",
                     t->name, t->module, t->shard_count,
                     (unsigned long long)t->idle_timeout_ms,
                     t->on_error_stop ? "stop" : "resume", t->allocation_id,
                     t->partition_id);
    /* a persistent type's shards hold leases: a node that would host
     * them without (or with other timings) must not join the type */
    if (ms_type_leased(t) && w > 0 && (size_t)w < len)
        w += snprintf(buf + w, len - (size_t)w,
                      "|persistence=%s|lease_ms=%llu",
                      t->persistence == MS_PERSIST_EVENTS  ? "events"
                      : t->persistence == MS_PERSIST_STATE ? "state"
                                                           : "none",
                      (unsigned long long)t->lease_duration_ms);
    /* remembered ids are read by the next owner: every node of the type
     * must keep them in the same store */
    if (t->remember && w > 0 && (size_t)w < len)
        snprintf(buf + w, len - (size_t)w, "|remember=%d", t->remember);
}

int ms_region_new(struct ms_region **out, const struct ms_region_config *rc)
{
    const struct ms_config *cfg = rc->cfg;
    if (!rc->self_uid || !rc->usable || !rc->allocate || !cfg || !rc->d)
        return MS_EINVAL;
    struct ms_region *r = calloc(1, sizeof *r);
    if (!r)
        return MS_ENOMEM;
    r->d = rc->d;
    r->cfg = cfg;
    r->usable = rc->usable;
    r->data = rc->data;
    r->wake = rc->wake;
    r->wake_data = rc->wake_data;
    r->self = rc->self_uid;
    r->ntypes = cfg->ntypes;
    r->types = calloc((size_t)cfg->ntypes + 1, sizeof *r->types);
    struct ms_coord_type *ct = calloc((size_t)cfg->ntypes + 1, sizeof *ct);
    int err = r->types && ct ? 0 : MS_ENOMEM;
    for (int i = 0; !err && i < cfg->ntypes; i++) {
        r->types[i].plan = ms_plan_new(cfg->types[i].shard_count);
        if (!r->types[i].plan)
            err = MS_ENOMEM;
        fingerprint(&cfg->types[i], r->types[i].fingerprint,
                    sizeof r->types[i].fingerprint);
        ct[i].name = cfg->types[i].name;
        ct[i].shard_count = cfg->types[i].shard_count;
        ct[i].fingerprint = r->types[i].fingerprint;
    }
    if (!err)
        err = ms__region_lease_init(r);
    if (!err) {
        struct ms_coord_config cc;
        memset(&cc, 0, sizeof cc);
        cc.self_uid = r->self;
        cc.types = ct;
        cc.ntypes = cfg->ntypes;
        cc.allocate = rc->allocate;
        cc.allocate_many = rc->allocate_many;
        cc.rebalance = rc->rebalance;
        cc.eligible = rc->eligible;
        cc.data = rc->data;
        cc.handoff_timeout_ms = cfg->handoff_timeout_ms;
        cc.rebalance_interval_ms = cfg->rebalance_interval_ms;
        err = ms_coord_new(&r->coord, &cc);
    }
    free(ct);
    if (err) {
        ms_region_free(r);
        return err;
    }
    *out = r;
    return 0;
}

void ms_region_free(struct ms_region *r)
{
    if (!r)
        return;
    /* the config may be gone already (the node frees it in a close
     * callback that can run before the router's): the plan has the
     * shard count */
    for (int t = 0; r->types && t < r->ntypes; t++) {
        struct rtype *rt = &r->types[t];
        uint32_t n = rt->plan ? ms_plan_shard_count(rt->plan) : 0;
        for (uint32_t s = 0; rt->shards && s < n; s++)
            while (rt->shards[s].head) {
                struct pend *p = rt->shards[s].head;
                rt->shards[s].head = p->next;
                free(p);
            }
        ms_plan_free(rt->plan);
        free(rt->shards);
    }
    while (r->qhead) {
        struct qaction *q = r->qhead;
        r->qhead = q->next;
        free(q);
    }
    free(r->types);
    ms_coord_free(r->coord);
    ms_lease_free(r->lease);
    free(r);
}

/* ---- queries ------------------------------------------------------------- */

struct ms_coord *ms_region_coord(struct ms_region *r)
{
    return r->coord;
}

uint64_t ms_region_owner(const struct ms_region *r, int type,
                         uint32_t shard, uint64_t *gen)
{
    return ms_plan_owner(r->types[type].plan, shard, gen);
}

const struct ms_plan *ms_region_plan(const struct ms_region *r, int type)
{
    return r->types[type].plan;
}

uint32_t ms_region_owned(const struct ms_region *r)
{
    uint32_t n = 0;
    for (int i = 0; i < r->ntypes; i++)
        n += ms_plan_count_owned(r->types[i].plan, r->self);
    return n;
}

uint32_t ms_region_buffered(const struct ms_region *r)
{
    return r->nbuffered;
}

uint32_t ms_region_waiting(const struct ms_region *r, int type,
                           uint32_t shard)
{
    return r->types[type].shards ? r->types[type].shards[shard].n : 0;
}

int ms_region_refused(const struct ms_region *r, int type)
{
    return r->types[type].refused;
}

const struct ms_region_stats *ms_region_stats(const struct ms_region *r)
{
    return &r->st;
}

uint32_t ms_region_moving(const struct ms_region *r)
{
    return r->nblocked;
}

uint32_t ms_region_stopping(const struct ms_region *r)
{
    return r->nstopping;
}

void ms_region_each_move(const struct ms_region *r, uint64_t now_ms,
                         int (*fn)(void *data,
                                   const struct ms_region_move_info *m),
                         void *data)
{
    for (int t = 0; t < r->ntypes; t++) {
        const struct rtype *rt = &r->types[t];
        for (uint32_t sh = 0; rt->shards &&
                              sh < r->cfg->types[t].shard_count; sh++) {
            const struct rshard *s = &rt->shards[sh];
            if (!s->hgen && !s->stopping)
                continue;
            struct ms_region_move_info m = {
                t, sh, s->stopping, s->hgen ? s->hfrom : r->self, s->n,
                now_ms - s->blocked_ms};
            if (fn(data, &m))
                return;
        }
    }
}
