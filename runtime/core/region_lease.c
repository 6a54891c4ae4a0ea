/*
 * region_lease.c -- the per-shard leases of persistent types, wired into
 * the region (region.h "leases", lease.h).
 *
 * The region's buffer of a shard is the one storage of the messages that
 * wait for its lease: ms_lease_gate() says whether a message may pass,
 * wait or must be rejected, and the lease machine's own barrier stays
 * empty (its DELIVER and REJECT actions never come). OPEN_SHARD flushes
 * the region's buffer; a window that ran out is seen by the flush (gate
 * MS_ELEASE), which the tick runs for every shard with waiting messages.
 */
#include "region_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "log.h"

int ms__region_lease_init(struct ms_region *r)
{
    int any = 0;
    for (int i = 0; i < r->ntypes; i++)
        any |= ms_type_leased(&r->cfg->types[i]);
    if (!any)
        return 0;
    uint32_t *nshards = calloc((size_t)r->ntypes, sizeof *nshards);
    struct ms_lease_settings *set = calloc((size_t)r->ntypes, sizeof *set);
    int rc = nshards && set ? 0 : MS_ENOMEM;
    for (int i = 0; !rc && i < r->ntypes; i++) {
        const struct ms_type_config *t = &r->cfg->types[i];
        if (!ms_type_leased(t))
            continue;
        r->types[i].persistent = 1;
        nshards[i] = t->shard_count;
        set[i].duration_ms = t->lease_duration_ms;
        set[i].renew_interval_ms = t->lease_renew_interval_ms;
        set[i].window_ms = t->lease_window_ms;
    }
    if (!rc) {
        struct ms_lease_config lc = {r->cfg->node_name, r->ntypes, nshards,
                                     set};
        rc = ms_lease_new(&r->lease, &lc);
    }
    free(nshards);
    free(set);
    return rc;
}

int ms__region_lease_gate(const struct ms_region *r, int type,
                          uint32_t shard)
{
    const struct rshard *s = r->types[type].shards
                                 ? &r->types[type].shards[shard] : NULL;
    if (s && s->lease_stop)
        return 1; /* the dispatcher is stopping the shard: nothing in */
    int g = ms_lease_gate(r->lease, type, shard);
    if (g == MS_LEASE_OPEN)
        return 0;
    if (g == MS_ELEASE)
        return MS_ELEASE;
    /* acquiring, lost, expired, fenced; or not (or no longer) ours in
     * the machine: the plan moves it, and what waits follows the plan */
    return 1;
}

uint64_t ms__region_lease_window_ms(const struct ms_region *r, int type)
{
    const struct ms_type_config *t = &r->cfg->types[type];
    if (t->lease_window_ms)
        return t->lease_window_ms;
    return MS_LEASE_WINDOW_DURATIONS * (t->lease_duration_ms
                                            ? t->lease_duration_ms
                                            : MS_LEASE_DURATION_MS);
}

/* Queues a LEASE action for the caller (the statement to run). */
static void emit_statement(struct ms_region *r,
                           const struct ms_lease_action *la)
{
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    if (ms__region_emit(r, MS_REGION_LEASE, 0, &f, RG_FAIL_NONE, 0) == 0)
        r->qtail->a.lease = *la;
    /* no memory: the machine times the request out and tries again */
}

/* How long a handoff's stop waits for the release: at most
 * MS_REGION_RELEASE_WAIT_MS, and half the move's deadline (the move must
 * not fail for it). */
static uint64_t release_wait_ms(const struct ms_region *r)
{
    uint64_t half = r->cfg->handoff_timeout_ms / 2;
    return half < MS_REGION_RELEASE_WAIT_MS ? half
                                            : MS_REGION_RELEASE_WAIT_MS;
}

/* Reports the stops whose release was answered, or took too long. */
static void release_waits(struct ms_region *r)
{
    for (int t = 0; t < r->ntypes && r->nrelease_wait; t++) {
        struct rtype *rt = &r->types[t];
        for (uint32_t i = 0; rt->persistent && rt->shards &&
                             i < r->cfg->types[t].shard_count; i++) {
            struct rshard *s = &rt->shards[i];
            if (!s->release_wait)
                continue;
            int releasing = ms_lease_state(r->lease, t, i) ==
                            MS_LEASE_RELEASING;
            int late = r->now - s->release_since_ms >= release_wait_ms(r);
            if (releasing && !late)
                continue;
            if (releasing)
                ms_log(MS_LOG_WARN, NULL, "the lease of %s shard %u was "
                       "not released within %d ms; its stop is reported "
                       "and the lease runs out", ms__region_tname(r, t), i,
                       (int)release_wait_ms(r));
            s->release_wait = 0;
            r->nrelease_wait--;
            if (s->stopping)
                ms__region_report_stopped(r, t, i, s);
        }
    }
}

void ms__region_lease_pump(struct ms_region *r)
{
    if (!r->lease)
        return;
    struct ms_lease_action a;
    int kick = 0;
    while (ms_lease_next_action(r->lease, &a)) {
        struct rshard *s;
        switch (a.kind) {
        case MS_LEASE_ACQUIRE:
        case MS_LEASE_RENEW:
        case MS_LEASE_RELEASE:
            emit_statement(r, &a);
            break;
        case MS_LEASE_STOP_ENTITIES:
            s = ms__region_shard(r, a.type, a.shard);
            if (!s || s->stopping || s->lease_stop)
                break; /* a handoff's stop is under way already */
            s->lease_stop = 1;
            ms_dispatch_shard_stop(r->d, a.type, a.shard);
            kick = 1;
            break;
        case MS_LEASE_OPEN_SHARD:
            ms__region_flush_shard(r, a.type, a.shard);
            kick = 1;
            break;
        default:
            break; /* DELIVER, REJECT: the barrier is not used */
        }
    }
    if (kick)
        ms__region_kick(r);
    if (r->nrelease_wait)
        release_waits(r);
}

/* The shard is ours and waits for its lease: the tells (and other
 * nodes' requests) that already wait, for an owner until now, may wait
 * the lease window (as ms__region_buffer gives new ones). */
static void extend_deadlines(struct ms_region *r, int type, uint32_t shard)
{
    struct rshard *s = r->types[type].shards
                           ? &r->types[type].shards[shard] : NULL;
    if (!s || !s->head || s->hgen)
        return;
    uint64_t until = r->now + ms__region_lease_window_ms(r, type) +
                     MS_REGION_TICK_MS;
    for (struct pend *p = s->head; p; p = p->next)
        if ((p->origin || p->kind == MS_FRAME_TELL) && p->deadline_ms < until)
            p->deadline_ms = until;
}

void ms__region_lease_plan(struct ms_region *r, int type, uint32_t shard)
{
    if (ms_plan_owner(r->types[type].plan, shard, NULL) == r->self) {
        const struct rshard *s = r->types[type].shards
                                     ? &r->types[type].shards[shard] : NULL;
        if (s && s->stopping)
            return; /* an entry not newer than the move (a full plan sent
                     * again): its stop and release go on, nothing is
                     * acquired again (a rollback ended the stop first,
                     * in end_handoff) */
        if (ms_lease_shard_assigned(r->lease, type, shard, r->now) == 0)
            extend_deadlines(r, type, shard);
    } else
        ms_lease_handoff(r->lease, type, shard, r->now);
    /* MS_EBUSY: already so (acquiring, held, released): nothing to do */
}

void ms__region_lease_handoff(struct ms_region *r, int type, uint32_t shard)
{
    ms_lease_handoff(r->lease, type, shard, r->now);
    ms__region_lease_pump(r);
}

int ms__region_lease_stopped(struct ms_region *r, int type, uint32_t shard,
                             struct rshard *s)
{
    int lease_stop = s->lease_stop;
    s->lease_stop = 0;
    if (ms_lease_state(r->lease, type, shard) == MS_LEASE_STOPPING)
        ms_lease_entities_stopped(r->lease, type, shard, r->now);
    ms__region_lease_pump(r);
    if (s->stopping) {
        if (ms_lease_state(r->lease, type, shard) != MS_LEASE_RELEASING)
            return 0; /* released (or never held): report now */
        if (!s->release_wait) {
            s->release_wait = 1;
            s->release_since_ms = r->now;
            r->nrelease_wait++;
        }
        return 1;
    }
    if (lease_stop) {
        /* entities stopped for a lease lost, expired or fenced: the shard
         * takes messages again once its lease is held (the gate) */
        ms_dispatch_shard_resume(r->d, type, shard);
        ms__region_flush_shard(r, type, shard);
        ms__region_kick(r);
    }
    return 1;
}

void ms__region_lease_tick(struct ms_region *r)
{
    if (!r->lease)
        return;
    ms_lease_tick(r->lease, r->now);
    ms__region_lease_pump(r);
}

/* ---- public -------------------------------------------------------------- */

int ms_region_lease_answer(struct ms_region *r,
                           const struct ms_lease_answer *a, uint64_t now_ms)
{
    r->now = now_ms;
    if (!r->lease)
        return MS_EINVAL;
    int rc = ms_lease_on_answer(r->lease, a, now_ms);
    ms__region_lease_pump(r);
    return rc;
}

void ms_region_members_reachable(struct ms_region *r, int all_reachable,
                                 uint64_t now_ms)
{
    r->now = now_ms;
    if (!r->lease || all_reachable == !r->lease_fenced)
        return;
    r->lease_fenced = !all_reachable;
    if (all_reachable) {
        ms_log(MS_LOG_INFO, NULL, "every member is reachable again: the "
               "leases are acquired again");
        ms_lease_members_reachable(r->lease, now_ms);
    } else {
        ms_log(MS_LOG_WARN, NULL, "a member is unreachable: persistent "
               "entities stop here and their leases are left to run out");
        ms_lease_member_unreachable(r->lease, now_ms);
    }
    ms__region_lease_pump(r);
}

const struct ms_lease *ms_region_lease(const struct ms_region *r)
{
    return r->lease;
}

uint32_t ms_region_lease_waiting(const struct ms_region *r)
{
    uint32_t n = 0;
    for (int t = 0; r->lease && t < r->ntypes; t++) {
        const struct rtype *rt = &r->types[t];
        for (uint32_t i = 0; rt->persistent && rt->shards &&
                             i < r->cfg->types[t].shard_count; i++)
            if (rt->shards[i].n && !rt->shards[i].hgen &&
                ms_plan_owner(rt->plan, i, NULL) == r->self &&
                ms__region_lease_gate(r, t, i) != 0)
                n += rt->shards[i].n;
    }
    return n;
}

uint64_t ms_region_lease_rejected(const struct ms_region *r)
{
    return r->lease_rejected;
}

uint32_t ms_region_lease_each(const struct ms_region *r, uint64_t now_ms,
                              int (*fn)(void *data, int type, uint32_t shard,
                                        uint64_t epoch),
                              void *data)
{
    uint32_t n = 0;
    int stop = 0;
    for (int t = 0; r->lease && t < r->ntypes; t++) {
        if (!r->types[t].persistent)
            continue;
        for (uint32_t i = 0; i < r->cfg->types[t].shard_count; i++) {
            uint64_t e = ms_lease_usable_epoch(r->lease, t, i, now_ms);
            if (!e)
                continue;
            if (!stop && n < MS_REGION_LEASES_LISTED)
                stop = fn(data, t, i, e);
            n++;
        }
    }
    return n;
}

uint64_t ms_region_lease_epoch_at(const struct ms_region *r, int type,
                                  uint32_t shard, uint64_t now_ms)
{
    if (!r->lease || type < 0 || type >= r->ntypes ||
        !r->types[type].persistent ||
        shard >= r->cfg->types[type].shard_count ||
        ms_plan_owner(r->types[type].plan, shard, NULL) != r->self)
        return 0;
    const struct rshard *s = r->types[type].shards
                                 ? &r->types[type].shards[shard] : NULL;
    if (s && s->lease_stop)
        return 0; /* lost, expired or fenced: its entities stop */
    return ms_lease_usable_epoch(r->lease, type, shard, now_ms);
}

uint64_t ms_region_lease_epoch(const struct ms_region *r, int type,
                               uint32_t shard)
{
    return ms_region_lease_epoch_at(r, type, shard, r->now);
}
