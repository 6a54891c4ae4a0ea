/*
 * router.c -- the libuv binding of the region (runtime/core/region.h):
 * feeds it frames, membership changes and ticks, and carries out its
 * actions (frames to peers, broadcasts, CONTROL messages to itself,
 * dispatcher kicks). The protocol itself is in the core.
 */
#include "router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/log.h"
#include "../core/membership.h"
#include "../core/plan.h"
#include "../core/region.h"
#include "../moonshard.h"
#include "lease_sql.h"
#include "strategy_view.h"

/* A CONTROL message this node sent to itself. */
struct selfmsg {
    struct selfmsg *next;
    size_t len;
    char txt[];
};

struct ms_router {
    uv_loop_t *loop;
    struct ms_dispatch *d;
    struct ms_cluster *c;
    const struct ms_config *cfg;
    struct ms_region *rg;
    struct ms_strategy strat;
    uint64_t self;
    uv_timer_t sweep;
    struct selfmsg *self_head, *self_tail; /* CONTROL sent to itself */
    uv_check_t self_check;
    uv_idle_t self_idle;
    int open_handles;
    int draining;
    int closed;              /* ms_router_close was called */
    void (*kick)(void *);    /* the dispatcher may have work now */
    void *kick_data;
    struct ms_lease_sql *lsql; /* lease statements (with a pool) */
    uint64_t lease_sql_errors; /* statements the pool did not take */
};

static uint64_t now(struct ms_router *r)
{
    return uv_now(r->loop);
}

static void drain(struct ms_router *r);

/* The database answered a lease statement. */
static void on_lease_answer(void *data, const struct ms_lease_answer *a)
{
    struct ms_router *r = data;
    if (r->closed)
        return;
    ms_region_lease_answer(r->rg, a, now(r));
    drain(r);
}

/* Runs a lease statement; an acquire or release that cannot be queued
 * (no pool, the pool's queue is full) is answered as a database error
 * now: the lease machine tries again after its backoff. A renewal is
 * not: the machine sends it again after a renew interval of silence,
 * until the lease's expiry (a queue full for a moment must not lose a
 * lease that is still good). */
static void run_lease(struct ms_router *r, const struct ms_lease_action *la)
{
    int rc = r->lsql ? ms_lease_sql_run(r->lsql, la,
                                        r->cfg->types[la->type].name)
                     : MS_EDBCONN;
    if (rc == 0)
        return;
    r->lease_sql_errors++;
    if (la->kind == MS_LEASE_RENEW)
        return;
    struct ms_lease_answer a;
    memset(&a, 0, sizeof a);
    a.kind = MS_LEASE_ANS_DB_ERROR;
    a.type = la->type;
    a.shard = la->shard;
    a.req = la->req;
    ms_region_lease_answer(r->rg, &a, now(r));
}

/* Handles the CONTROL messages this node sent itself, in order. They are
 * queued, not handled inside the drain, because a send can start inside
 * a Lua leaf function (a handler's tell) and handling one may call the
 * Lua allocation strategy. */
static void on_self_control(uv_check_t *h)
{
    struct ms_router *r = h->data;
    while (r->self_head) {
        struct selfmsg *m = r->self_head;
        r->self_head = m->next;
        if (!r->self_head)
            r->self_tail = NULL;
        struct ms_frame f;
        memset(&f, 0, sizeof f);
        f.kind = MS_FRAME_CONTROL;
        f.payload = m->txt;
        f.payload_len = m->len;
        ms_region_on_frame(r->rg, r->self, &f, now(r));
        free(m);
        drain(r);
    }
    uv_check_stop(&r->self_check);
    uv_idle_stop(&r->self_idle);
    if (r->kick)
        r->kick(r->kick_data);
}

static void on_self_idle(uv_idle_t *h)
{
    (void)h; /* keeps the loop from blocking while self_check has work */
}

static int send_self(struct ms_router *r, const struct ms_frame *f)
{
    struct selfmsg *m = malloc(sizeof *m + f->payload_len);
    if (!m)
        return MS_ENOMEM;
    m->next = NULL;
    m->len = f->payload_len;
    memcpy(m->txt, f->payload, f->payload_len);
    if (r->self_tail)
        r->self_tail->next = m;
    else
        r->self_head = m;
    r->self_tail = m;
    uv_check_start(&r->self_check, on_self_control);
    uv_idle_start(&r->self_idle, on_self_idle);
    return 0;
}

/* Sends a frame to `uid`: to this node itself only CONTROL, queued. */
static int send_to(struct ms_router *r, uint64_t uid,
                   const struct ms_frame *f)
{
    if (uid == r->self)
        return f->kind == MS_FRAME_CONTROL ? send_self(r, f) : UV_ENOTCONN;
    return ms_cluster_send(r->c, uid, f);
}

/* Performs the region's queued actions. Broadcasts go to every live
 * member, this node included. */
static void drain(struct ms_router *r)
{
    struct ms_region_action a;
    if (r->draining)
        return; /* the outer drain takes what this call queued */
    r->draining = 1;
    while (ms_region_next_action(r->rg, &a)) {
        if (a.kind == MS_REGION_SEND) {
            int rc = send_to(r, a.uid, &a.frame);
            if (rc < 0)
                ms_region_send_failed(r->rg, &a, rc == UV_ENOTCONN, now(r));
        } else if (a.kind == MS_REGION_BROADCAST) {
            struct ms_membership *mb = ms_cluster_membership(r->c);
            size_t n = ms_mb_member_count(mb);
            uint64_t *uids = malloc((n + 1) * sizeof *uids);
            size_t k = 0;
            for (size_t i = 0; uids && i < n; i++) {
                const struct ms_mb_member *m = ms_mb_member_at(mb, i);
                if (m && m->status <= MS_MB_EXITING)
                    uids[k++] = m->uid;
            }
            for (size_t i = 0; i < k; i++)
                send_to(r, uids[i], &a.frame);
            free(uids);
        } else if (a.kind == MS_REGION_KICK && r->kick) {
            r->kick(r->kick_data);
        } else if (a.kind == MS_REGION_LEASE && !r->closed) {
            run_lease(r, &a.lease);
        }
        ms_region_action_free(&a);
    }
    r->draining = 0;
}

/* The region queued a remote ask's reply outside of a call into it (the
 * dispatcher answered it inside a handler, or at its deadline): send it
 * now, as a send from a handler is, not when the dispatch round ends. */
static void on_wake(void *data)
{
    struct ms_router *r = data;
    if (!r->closed)
        drain(r);
}

/* 1 when `uid` is a member that is Up (or Leaving) and reachable here. */
static int usable(void *data, uint64_t uid)
{
    struct ms_strategy *s = data;
    return ms_cluster_member_usable(s->c, uid);
}

/* Leaving members that own nothing may exit: the coordinator's node (the
 * membership leader) says so once their shards moved away. With no Up
 * member left there is nobody to move them to, and every node says so. */
static void release_leavers(struct ms_router *r)
{
    struct ms_membership *mb = ms_cluster_membership(r->c);
    struct ms_coord *coord = ms_region_coord(r->rg);
    size_t n = ms_mb_member_count(mb);
    int any_up = 0, all_reachable = 1;
    for (size_t i = 0; i < n; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(mb, i);
        any_up |= m && m->status == MS_MB_UP;
        if (m) {
            int reach = ms_mb_is_reachable(mb, m->uid);
            ms_coord_member_reachable(coord, m->uid, reach);
            /* a live member we cannot reach may hold what we would take:
             * the leases are fenced until it is back or downed */
            if (!reach && m->uid != r->self &&
                (m->status == MS_MB_UP || m->status == MS_MB_LEAVING))
                all_reachable = 0;
        }
    }
    ms_region_members_reachable(r->rg, all_reachable, now(r));
    for (size_t i = 0; i < n; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(mb, i);
        if (m && m->status == MS_MB_LEAVING && m->owns_shards &&
            (!any_up || ms_coord_leave_done(coord, m->uid)))
            ms_cluster_set_owns_shards(r->c, m->uid, 0);
    }
}

static void on_sweep(uv_timer_t *t)
{
    struct ms_router *r = t->data;
    ms_region_tick(r->rg, now(r));
    drain(r);
    release_leavers(r);
    drain(r); /* what the leases did with reachability */
}

/* ---- sends --------------------------------------------------------------- */

int ms_router_tell(struct ms_router *r, const struct ms_dest *dst,
                   const char *json, size_t len)
{
    int rc = ms_region_tell(r->rg, dst, json, len, now(r));
    if (ms_region_pending(r->rg)) /* sent elsewhere, or asks for alloc */
        drain(r);
    return rc;
}

int64_t ms_router_ask(struct ms_router *r, const struct ms_dest *dst,
                      const char *json, size_t len, uint64_t timeout_ms,
                      const struct ms_waiter *w)
{
    int64_t rc = ms_region_ask(r->rg, dst, 0, json, len, timeout_ms, w,
                               now(r));
    if (ms_region_pending(r->rg)) /* sent elsewhere, or asks for alloc */
        drain(r);
    return rc;
}

int64_t ms_router_activate(struct ms_router *r, const struct ms_dest *dst,
                           uint64_t timeout_ms, const struct ms_waiter *w)
{
    int64_t rc = ms_region_ask(r->rg, dst, 1, NULL, 0, timeout_ms, w,
                               now(r));
    if (ms_region_pending(r->rg)) /* sent elsewhere, or asks for alloc */
        drain(r);
    return rc;
}

int ms_router_stop(struct ms_router *r, const struct ms_dest *dst)
{
    int rc = ms_region_stop(r->rg, dst, now(r));
    if (ms_region_pending(r->rg)) /* sent elsewhere, or asks for alloc */
        drain(r);
    return rc;
}

/* ---- events -------------------------------------------------------------- */

void ms_router_on_frame(struct ms_router *r, uint64_t uid,
                        const struct ms_frame *f)
{
    ms_region_on_frame(r->rg, uid, f, now(r));
    if (ms_region_pending(r->rg)) /* the coordinator's are in it too */
        drain(r);
}

void ms_router_on_coordinator(struct ms_router *r, uint64_t uid)
{
    ms_region_on_coordinator(r->rg, uid, now(r));
    if (uid == r->self) {
        /* members that began leaving before this node coordinated: their
         * shards move away once the plan is published */
        struct ms_membership *mb = ms_cluster_membership(r->c);
        struct ms_coord *coord = ms_region_coord(r->rg);
        for (size_t i = 0; i < ms_mb_member_count(mb); i++) {
            const struct ms_mb_member *m = ms_mb_member_at(mb, i);
            if (m && m->status == MS_MB_LEAVING)
                ms_coord_member_leaving(coord, m->uid, now(r));
            else if (m && m->status == MS_MB_EXITING)
                ms_coord_member_removed(coord, m->uid, now(r));
        }
    }
    drain(r);
}

void ms_router_on_connected(struct ms_router *r, uint64_t uid)
{
    ms_region_peer_connected(r->rg, uid, now(r));
    drain(r);
}

void ms_router_on_member(struct ms_router *r, uint64_t uid, int status)
{
    ms_region_member(r->rg, uid, status, now(r));
    if (status == MS_MB_LEAVING)
        release_leavers(r);
    drain(r);
}

void ms_router_after_dispatch(struct ms_router *r)
{
    ms_region_after_dispatch(r->rg, now(r));
    if (ms_region_pending(r->rg)) /* replies to other nodes' asks, ... */
        drain(r);
}

/* ---- coordinator --------------------------------------------------------- */

void ms_router_set_allocator(struct ms_router *r, ms_router_allocate_fn fn,
                             ms_router_rebalance_fn rfn,
                             ms_router_eligible_fn efn, void *data)
{
    r->strat.allocator = fn;
    r->strat.rebalancer = rfn;
    r->strat.eligibler = efn;
    r->strat.data = data;
}

void ms_router_set_allocate_many(struct ms_router *r,
                                 ms_router_allocate_many_fn mfn)
{
    r->strat.allocator_many = mfn;
}

void ms_router_reconcile(struct ms_router *r)
{
    ms_coord_reconcile(ms_region_coord(r->rg));
}

int ms_router_move(struct ms_router *r, int type, uint32_t shard)
{
    int rc = ms_coord_move(ms_region_coord(r->rg), type, shard, now(r));
    drain(r);
    return rc;
}

void ms_router_allocate_unowned(struct ms_router *r, int type)
{
    ms_region_allocate_unowned(r->rg, type, now(r));
    drain(r);
}

/* ---- life cycle ---------------------------------------------------------- */

int ms_router_new(struct ms_router **out, uv_loop_t *loop,
                  struct ms_dispatch *d, struct ms_cluster *c,
                  const struct ms_config *cfg)
{
    struct ms_router *r = calloc(1, sizeof *r);
    if (!r)
        return MS_ENOMEM;
    r->loop = loop;
    r->d = d;
    r->c = c;
    r->cfg = cfg;
    r->self = ms_cluster_self_uid(c);
    r->strat.c = c;
    r->strat.cfg = cfg;
    struct ms_region_config rc;
    memset(&rc, 0, sizeof rc);
    rc.self_uid = r->self;
    rc.cfg = cfg;
    rc.d = d;
    rc.usable = usable;
    rc.allocate = ms_strategy_allocate;
    rc.allocate_many = ms_strategy_allocate_many;
    rc.rebalance = ms_strategy_rebalance;
    rc.eligible = ms_strategy_eligible;
    rc.data = &r->strat;
    rc.wake = on_wake;
    rc.wake_data = r;
    int err = ms_region_new(&r->rg, &rc);
    if (err < 0) {
        free(r);
        return err;
    }
    uv_timer_init(loop, &r->sweep);
    uv_check_init(loop, &r->self_check);
    uv_idle_init(loop, &r->self_idle);
    r->sweep.data = r->self_check.data = r->self_idle.data = r;
    uv_timer_start(&r->sweep, on_sweep, MS_REGION_TICK_MS,
                   MS_REGION_TICK_MS);
    uv_unref((uv_handle_t *)&r->sweep);
    *out = r;
    /* a coordinator the cluster chose before the router existed */
    if (ms_cluster_coordinator(c))
        ms_router_on_coordinator(r, ms_cluster_coordinator(c));
    return 0;
}

void ms_router_set_kick(struct ms_router *r, void (*kick)(void *),
                        void *data)
{
    r->kick = kick;
    r->kick_data = data;
}

/* The last handle closed: frees the region. The node closes the router
 * before its own handles, and libuv runs close callbacks newest first, so
 * the node's callback has freed the dispatcher by now; its shutdown ended
 * the remote asks through the region, which must still be alive then. */
static void on_closed(uv_handle_t *h)
{
    struct ms_router *r = h->data;
    if (--r->open_handles > 0)
        return;
    while (r->self_head) {
        struct selfmsg *m = r->self_head;
        r->self_head = m->next;
        free(m);
    }
    ms_region_free(r->rg);
    free(r);
}

int ms_router_set_pool(struct ms_router *r, struct ms_pg *pg)
{
    ms_lease_sql_close(r->lsql);
    r->lsql = NULL;
    if (!pg)
        return 0;
    return ms_lease_sql_new(&r->lsql, pg, r->cfg->cluster, on_lease_answer,
                            r);
}

void ms_router_close(struct ms_router *r)
{
    ms_lease_sql_close(r->lsql); /* no answers from now on */
    r->lsql = NULL;
    uint64_t dropped = ms_region_cancel_all(r->rg);
    drain(r);
    r->closed = 1; /* what the dispatcher answers from now on stays */
    if (dropped)
        ms_log(MS_LOG_WARN, NULL, "%llu tells waiting for their shard's "
               "owner were dropped: the node is stopping",
               (unsigned long long)dropped);
    r->open_handles = 3;
    uv_close((uv_handle_t *)&r->sweep, on_closed);
    uv_close((uv_handle_t *)&r->self_check, on_closed);
    uv_close((uv_handle_t *)&r->self_idle, on_closed);
}

/* ---- queries ------------------------------------------------------------- */

uint64_t ms_router_owner(struct ms_router *r, int type, uint32_t shard)
{
    return ms_region_owner(r->rg, type, shard, NULL);
}

uint32_t ms_router_owned(struct ms_router *r)
{
    return ms_region_owned(r->rg);
}

struct ms_region *ms_router_region(struct ms_router *r)
{
    return r->rg;
}

uint64_t ms_router_waiting(struct ms_router *r)
{
    return ms_region_buffered(r->rg);
}

size_t ms_router_allocations_json(struct ms_router *r, int type, char *buf,
                                  size_t len)
{
    const struct ms_plan *p = ms_region_plan(r->rg, type);
    uint32_t n = ms_plan_shard_count(p);
    size_t o = 0;
    int w = snprintf(buf, len, "{\"type\":\"%s\",\"generation\":%llu,"
                     "\"shard_count\":%u,\"shards\":[",
                     r->cfg->types[type].name,
                     (unsigned long long)ms_plan_generation(p), n);
    o = w > 0 ? (size_t)w : 0;
    for (uint32_t s = 0; s < n; s++) {
        uint64_t gen;
        uint64_t owner = ms_plan_owner(p, s, &gen);
        const char *name = owner ? ms_cluster_member_name(r->c, owner) : NULL;
        char item[200];
        if (owner)
            w = snprintf(item, sizeof item,
                         "%s{\"shard\":%u,\"owner\":\"%s\",\"uid\":"
                         "\"%016llx\",\"generation\":%llu}",
                         s ? "," : "", s, name ? name : "?",
                         (unsigned long long)owner, (unsigned long long)gen);
        else
            w = snprintf(item, sizeof item, "%s{\"shard\":%u,\"owner\":null}",
                         s ? "," : "", s);
        if (o + (size_t)w < len)
            memcpy(buf + o, item, (size_t)w + 1);
        o += (size_t)w;
    }
    if (o + 2 < len)
        memcpy(buf + o, "]}", 3);
    return o + 2;
}

/* Appends one moving shard to the stats text. */
struct moves_out {
    struct ms_router *r;
    char *buf;
    size_t len, o;
    int listed;
};

static int list_move(void *data, const struct ms_region_move_info *m)
{
    struct moves_out *mo = data;
    char item[256];
    int w = snprintf(item, sizeof item,
                     "%s{\"type\":\"%s\",\"shard\":%u,\"state\":\"%s\","
                     "\"from\":\"%016llx\",\"buffered\":%u,"
                     "\"for_ms\":%llu}",
                     mo->listed ? "," : "", mo->r->cfg->types[m->type].name,
                     m->shard, m->stopping ? "stopping" : "buffering",
                     (unsigned long long)m->from, m->buffered,
                     (unsigned long long)m->for_ms);
    if (w > 0 && mo->o + (size_t)w < mo->len)
        memcpy(mo->buf + mo->o, item, (size_t)w + 1);
    mo->o += w > 0 ? (size_t)w : 0;
    return ++mo->listed >= 64;
}

/* Appends text to the stats (what fits; the length counts it all). */
static void put(struct moves_out *mo, const char *txt, int w)
{
    if (w > 0 && mo->o + (size_t)w < mo->len)
        memcpy(mo->buf + mo->o, txt, (size_t)w + 1);
    mo->o += w > 0 ? (size_t)w : 0;
}

static int list_epoch(void *data, int type, uint32_t shard, uint64_t epoch)
{
    struct moves_out *mo = data;
    char item[160];
    int w = snprintf(item, sizeof item,
                     "%s{\"type\":\"%s\",\"shard\":%u,\"epoch\":%llu}",
                     mo->listed ? "," : "", mo->r->cfg->types[type].name,
                     shard, (unsigned long long)epoch);
    put(mo, item, w);
    mo->listed++;
    return 0;
}

/* ,"leases":{figures,"epochs":[..],"epochs_count":N} (zeros without a
 * persistent type); returns the whole length. */
static size_t leases_json(struct ms_router *r, struct moves_out *mo)
{
    const struct ms_lease *l = ms_region_lease(r->rg);
    struct ms_lease_stats z;
    memset(&z, 0, sizeof z);
    const struct ms_lease_stats *ls = l ? ms_lease_stats(l) : &z;
    char head[640];
    int w = snprintf(head, sizeof head,
                     ",\"leases\":{\"held\":%u,\"acquired\":%llu,"
                     "\"renewed\":%llu,\"released\":%llu,\"lost\":%llu,"
                     "\"expired\":%llu,\"fenced\":%llu,\"retries\":%llu,"
                     "\"refused\":%llu,\"rejected\":%llu,"
                     "\"db_errors\":%llu,\"waiting\":%u,\"epochs\":[",
                     l ? ms_lease_held(l) : 0,
                     (unsigned long long)ls->acquired,
                     (unsigned long long)ls->renewed,
                     (unsigned long long)ls->released,
                     (unsigned long long)ls->lost,
                     (unsigned long long)ls->expired,
                     (unsigned long long)ls->fenced,
                     (unsigned long long)ls->retries,
                     (unsigned long long)ls->refused,
                     (unsigned long long)(ls->rejected +
                                          ms_region_lease_rejected(r->rg)),
                     (unsigned long long)(ls->db_errors +
                                          r->lease_sql_errors),
                     ms_region_lease_waiting(r->rg));
    put(mo, head, w);
    mo->listed = 0;
    uint32_t n = ms_region_lease_each(r->rg, now(r), list_epoch, mo);
    w = snprintf(head, sizeof head, "],\"epochs_count\":%u}", n);
    put(mo, head, w);
    return mo->o;
}

/* ,"entity_types":[{"name":..,"shard_count":N,"leased":bool},..]: the
 * configured types, for the status page (ui/), which draws a shard map of
 * each; "leased" says its shards hold leases (their epochs are under
 * "leases"). Returns the whole length. */
static size_t types_json(struct ms_router *r, struct moves_out *mo)
{
    char item[200];
    static const char head[] = ",\"entity_types\":[";
    put(mo, head, (int)sizeof head - 1);
    for (int t = 0; t < r->cfg->ntypes; t++) {
        const struct ms_type_config *tc = &r->cfg->types[t];
        int w = snprintf(item, sizeof item,
                         "%s{\"name\":\"%s\",\"shard_count\":%u,"
                         "\"leased\":%s}", t ? "," : "", tc->name,
                         tc->shard_count,
                         ms_type_leased(tc) ? "true" : "false");
        put(mo, item, w);
    }
    put(mo, "]", 1);
    return mo->o;
}

size_t ms_router_stats_json(struct ms_router *r, char *buf, size_t len)
{
    struct ms_coord_move_stats ms;
    ms_coord_move_stats(ms_region_coord(r->rg), &ms);
    const struct ms_region_stats *st = ms_region_stats(r->rg);
    int w = snprintf(buf, len,
                     "\"local_routes\":%llu,\"remote_routes\":%llu,"
                     "\"forwards\":%llu,\"not_owner_sent\":%llu,"
                     "\"not_owner_retries\":%llu,\"route_buffered\":%llu,"
                     "\"route_overflows\":%llu,\"route_expired\":%llu,"
                     "\"forward_drops\":%llu,\"stray_answers\":%llu,"
                     "\"bad_payloads\":%llu,"
                     "\"owned_shards\":%u,"
                     "\"handoffs_in_progress\":%u,\"shards_stopping\":%u,"
                     "\"handoffs_seen\":%llu,\"handoff_buffered\":%llu,"
                     "\"handoff_overflows\":%llu,\"shards_handed_off\":%llu,"
                     "\"moves\":{\"in_progress\":%zu,\"peak\":%zu,"
                     "\"started\":%llu,"
                     "\"finished\":%llu,\"aborted\":%llu,\"rounds\":%llu,"
                     "\"strategy_errors\":%llu},\"handoffs\":[",
                     (unsigned long long)st->local_routes,
                     (unsigned long long)st->remote_routes,
                     (unsigned long long)st->forwards,
                     (unsigned long long)st->not_owner_sent,
                     (unsigned long long)st->not_owner_retries,
                     (unsigned long long)st->buffered,
                     (unsigned long long)st->buffer_overflows,
                     (unsigned long long)st->expired,
                     (unsigned long long)st->forward_drops,
                     (unsigned long long)st->stray_answers,
                     (unsigned long long)st->bad_payloads,
                     ms_region_owned(r->rg),
                     ms_region_moving(r->rg), ms_region_stopping(r->rg),
                     (unsigned long long)st->handoffs_seen,
                     (unsigned long long)st->handoff_buffered,
                     (unsigned long long)st->handoff_overflows,
                     (unsigned long long)st->shards_handed_off,
                     ms.in_progress, ms.peak, (unsigned long long)ms.started,
                     (unsigned long long)ms.finished,
                     (unsigned long long)ms.aborted,
                     (unsigned long long)ms.rounds,
                     (unsigned long long)ms.strategy_errors);
    struct moves_out mo = {r, buf, len, w > 0 ? (size_t)w : 0, 0};
    ms_region_each_move(r->rg, now(r), list_move, &mo);
    if (mo.o + 2 < len)
        memcpy(buf + mo.o, "]", 2);
    mo.o++;
    leases_json(r, &mo);
    return types_json(r, &mo);
}
