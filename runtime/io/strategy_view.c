/*
 * strategy_view.c -- the DESIGN §3 views the Lua strategies get, and the
 * coordinator's callbacks over them (strategy_view.h).
 */
#include "strategy_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/log.h"
#include "../core/membership.h"
#include "../core/sbuf.h"
#include "../moonshard.h"
#include "cluster.h"

static int age_cmp_ptr(const void *a, const void *b)
{
    return ms_mb_age_cmp(*(const struct ms_mb_member *const *)a,
                         *(const struct ms_mb_member *const *)b);
}

/* One member as the strategies see it (DESIGN §3), appended to *b. */
static void member_json(struct ms_membership *mb,
                        const struct ms_mb_member *m, struct ms_sbuf *b)
{
    ms_sbuf_printf(b, "{\"name\":\"%s\",\"address\":\"%s\",\"uid\":"
           "\"%016llx\",\"weight\":%u,\"version\":\"%s\","
           "\"up_number\":%u,\"status\":\"%s\",\"reachable\":%s,"
           "\"roles\":[",
           m->name, m->address, (unsigned long long)m->uid,
           m->weight ? m->weight : 1, m->version, m->up_number,
           ms_mb_status_name(m->status),
           ms_mb_is_reachable(mb, m->uid) ? "true" : "false");
    const char *ro = m->roles;
    int first = 1;
    while (*ro) {
        size_t k = strcspn(ro, ",");
        if (k)
            ms_sbuf_printf(b, "%s\"%.*s\"", first ? "" : ",", (int)k, ro);
        first = 0;
        ro += k + (ro[k] == ',');
    }
    ms_sbuf_printf(b, "]}");
}

/* The DESIGN §3 view of a type for the Lua strategies, as JSON in *b
 * (members oldest first). Returns 0 or MS_ENOMEM. */
static int view_json(struct ms_strategy *r, const struct ms_coord_view *view,
                     struct ms_sbuf *b)
{
    struct ms_membership *mb = ms_cluster_membership(r->c);
    const struct ms_mb_member **ms = calloc(view->nhosts + 1, sizeof *ms);
    if (!ms)
        return MS_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < view->nhosts; i++) {
        const struct ms_mb_member *m =
            ms_mb_find_by_uid(mb, view->hosts[i].uid);
        if (m)
            ms[n++] = m;
    }
    qsort(ms, n, sizeof *ms, age_cmp_ptr);
    ms_sbuf_printf(b,
                   "{\"entity_type\":\"%s\",\"shard_count\":%u,"
                   "\"members\":[",
                   view->type_name, view->shard_count);
    for (size_t i = 0; i < n; i++) {
        if (i)
            ms_sbuf_printf(b, ",");
        member_json(mb, ms[i], b);
    }
    ms_sbuf_printf(b, "],\"plan\":[");
    int first = 1;
    for (uint32_t sh = 0; sh < view->shard_count; sh++) {
        if (!view->owners[sh])
            continue;
        const struct ms_mb_member *m = ms_mb_find_by_uid(mb, view->owners[sh]);
        if (!m)
            continue;
        ms_sbuf_printf(b, "%s[%u,\"%s\"]", first ? "" : ",", sh, m->name);
        first = 0;
    }
    ms_sbuf_printf(b, "],\"in_progress\":[");
    first = 1;
    for (uint32_t sh = 0; view->moving && sh < view->shard_count; sh++)
        if (view->moving[sh]) {
            ms_sbuf_printf(b, "%s%u", first ? "" : ",", sh);
            first = 0;
        }
    ms_sbuf_printf(b, "]}");
    free(ms);
    return b->oom ? MS_ENOMEM : 0;
}

/*
 * The coordinator's allocation callback: runs the type's Lua strategy
 * (moonshard.alloc) over the DESIGN §3 view of the hosts. Without an
 * allocator (tests, bench) it takes the host with the fewest shards,
 * non-leaving first, then the lowest uid.
 */
uint64_t ms_strategy_allocate(void *data, int type, uint32_t shard,
                              const struct ms_coord_view *view, char *err,
                              size_t errlen)
{
    struct ms_strategy *r = data;
    (void)type;
    if (!r->allocator) {
        const struct ms_coord_host *best = NULL;
        for (size_t i = 0; i < view->nhosts; i++) {
            const struct ms_coord_host *h = &view->hosts[i];
            if (!best || h->leaving < best->leaving ||
                (h->leaving == best->leaving && h->shards < best->shards))
                best = h;
        }
        if (!best)
            snprintf(err, errlen, "no member can host %s", view->type_name);
        return best ? best->uid : 0;
    }
    struct ms_sbuf b = {0};
    if (view_json(r, view, &b) < 0) {
        snprintf(err, errlen, "out of memory");
        free(b.p);
        return 0;
    }
    struct ms_membership *mb = ms_cluster_membership(r->c);
    uint64_t uid = 0;
    char name[MS_MB_MAX_NAME + 1];
    if (r->allocator(r->data, view->type_name, shard, b.p,
                            name, sizeof name, err, errlen) == 0) {
        const struct ms_mb_member *m = ms_mb_find_by_name(mb, name);
        uid = m ? m->uid : 0;
        if (!uid)
            snprintf(err, errlen, "strategy chose '%s', not a member", name);
    }
    free(b.p);
    if (!uid)
        ms_log(MS_LOG_WARN, NULL, "allocation of %s shard %u failed: %s",
               view->type_name, shard, err);
    return uid;
}

int ms_strategy_allocate_many(void *data, int type, const uint32_t *shards,
                              size_t n, const struct ms_coord_view *view,
                              uint64_t *out, char *err, size_t errlen)
{
    struct ms_strategy *r = data;
    (void)type;
    if (!r->allocator || !r->allocator_many)
        return -1;
    size_t namelen = MS_MB_MAX_NAME + 1;
    char *names = calloc(n, namelen);
    struct ms_sbuf b = {0};
    int rc = names ? view_json(r, view, &b) : MS_ENOMEM;
    if (rc == 0)
        rc = r->allocator_many(r->data, view->type_name, shards, n, b.p,
                               names, namelen, err, errlen);
    free(b.p);
    if (rc < 0) {
        free(names);
        return -1;
    }
    struct ms_membership *mb = ms_cluster_membership(r->c);
    for (size_t i = 0; i < n; i++) {
        const char *name = names + i * namelen;
        char *why = err + i * errlen;
        const struct ms_mb_member *m =
            name[0] ? ms_mb_find_by_name(mb, name) : NULL;
        out[i] = m ? m->uid : 0;
        if (name[0] && !m)
            snprintf(why, errlen, "strategy chose '%s', not a member", name);
        if (!out[i])
            ms_log(MS_LOG_WARN, NULL, "allocation of %s shard %u failed: %s",
                   view->type_name, shards[i], why[0] ? why : "no member");
    }
    free(names);
    return 0;
}

/* The coordinator's rebalance callback: the type's Lua rebalance. */
int ms_strategy_rebalance(void *data, int type,
                          const struct ms_coord_view *view, uint32_t *out,
                          size_t max, char *err, size_t errlen)
{
    struct ms_strategy *r = data;
    (void)type;
    if (!r->rebalancer)
        return 0;
    struct ms_sbuf b = {0};
    int rc = view_json(r, view, &b);
    if (rc == 0)
        rc = r->rebalancer(r->data, view->type_name, b.p, out, max,
                           err, errlen);
    else
        snprintf(err, errlen, "out of memory");
    free(b.p);
    return rc < 0 ? -1 : rc;
}

/* The coordinator's eligibility callback: may member `uid` own shards of
 * `type` at all (the strategy's `eligible`, e.g. role_aware's roles)? A
 * shard on an ineligible owner is moved whatever the rebalance policy. */
int ms_strategy_eligible(void *data, int type, uint64_t uid)
{
    struct ms_strategy *r = data;
    if (!r->eligibler)
        return 1;
    struct ms_membership *mb = ms_cluster_membership(r->c);
    const struct ms_mb_member *m = ms_mb_find_by_uid(mb, uid);
    if (!m)
        return 1; /* gone members are the coordinator's own business */
    struct ms_sbuf b = {0};
    member_json(mb, m, &b);
    int yes = b.oom || r->eligibler(r->data, r->cfg->types[type].name,
                                    b.p);
    free(b.p);
    return yes;
}

