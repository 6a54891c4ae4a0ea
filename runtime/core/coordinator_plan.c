/*
 * coordinator_plan.c -- the coordinator's plan (sans-IO): membership
 * facts, the regions' views and the types they register, publishing the
 * plan once the views are in, and allocation of unassigned shards. See
 * coordinator.h for the model (Types, Terms, Allocation, Removal) and
 * coordinator_int.h for the state.
 */
#include "coordinator_int.h"
#include "simswitch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- actions ------------------------------------------------------------- */

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
    return ms__coord_emit(c, uid, &m);
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
    int rc = ms__coord_emit_entries(c, uid, ti, e, n);
    free(e);
    return rc;
}

/* --- membership facts ---------------------------------------------------- */

static int add_member(struct ms_coord *c, uint64_t uid, int leaving,
                      uint64_t now_ms)
{
    (void)now_ms;
    if (!uid)
        return MS_EINVAL;
    struct member *mb = ms__coord_find_member(c, uid);
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
        return ms__coord_emit_term(c, uid, MS_PLAN_MSG_VIEW_REQUEST);
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

int ms_coord_member_connected(struct ms_coord *c, uint64_t uid)
{
    struct member *mb = ms__coord_find_member(c, uid);
    if (c->state == INERT || !mb || mb->view_done || uid == c->self_uid)
        return 0;
    return ms__coord_emit_term(c, uid, MS_PLAN_MSG_VIEW_REQUEST);
}

void ms_coord_member_reachable(struct ms_coord *c, uint64_t uid,
                               int reachable)
{
    struct member *mb = ms__coord_find_member(c, uid);
    if (mb)
        mb->reachable = reachable != 0;
}

/* Collecting: publish once every known member has answered. */
static int check_collected(struct ms_coord *c, uint64_t now_ms)
{
    if (c->state != COLLECTING)
        return 0;
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].view_done)
            return 0;
    return ms__coord_publish(c, now_ms);
}

static int sweep(struct ms_coord *c, int ti, uint64_t only)
{
    return ms__coord_sweep_owner(c, ti, only, 0);
}

/*
 * Unassigns, at one new generation, every shard of type ti whose owner
 * may no longer keep it (when `only` is non-zero: only that owner's), and
 * broadcasts the change. With `all`, every shard of `only` goes, whether
 * it may keep it or not (a leaving member nobody can take over from).
 */
int ms__coord_sweep_owner(struct ms_coord *c, int ti, uint64_t only, int all)
{
    struct ctype *t = &c->types[ti];
    if (!t->known)
        return 0;
    struct ms_plan_entry *e = NULL;
    size_t n = 0;
    uint64_t g = 0;
    for (uint32_t s = 0; s < t->shard_count; s++) {
        uint64_t o = t->owner[s];
        if (!o || (only && o != only) ||
            (!all && ms__coord_may_keep(c, ti, o)))
            continue;
        if (!e) {
            if (c->generation >= gen_limit(c))
                return 0; /* no generation left: keep; the caller re-terms */
            g = ++c->generation;
            e = malloc(t->shard_count * sizeof *e);
            if (!e)
                return MS_ENOMEM;
        }
        ms__coord_set_owner(c, ti, s, 0, g);
        /* the new generation ends it everywhere */
        ms__coord_forget_move(c, ti, s);
        e[n++] = (struct ms_plan_entry){s, 0, g};
    }
    int rc = n ? ms__coord_emit_entries(c, 0, ti, e, n) : 0;
    free(e);
    return rc;
}

int ms_coord_member_removed(struct ms_coord *c, uint64_t uid,
                            uint64_t now_ms)
{
    c->now_ms = now_ms;
    struct member *mb = ms__coord_find_member(c, uid);
    if (!mb)
        return 0;
    /* a gone region fences nothing: stop waiting for it */
    int rc = ms__coord_on_fenced_by(c, uid);
    if (rc)
        return rc;
    mb = ms__coord_find_member(c, uid);
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

/* --- publishing ---------------------------------------------------------- */

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
            if (t->owner[s] && (mb = ms__coord_find_member(c, t->owner[s])))
                mb->owned[ti]++;
        }
    }
}

/*
 * Stamps every shard of every known type with one new generation and
 * broadcasts the whole plan; from then on allocations are served.
 */
int ms__coord_publish(struct ms_coord *c, uint64_t now_ms)
{
    uint64_t g = c->generation > (c->term << 32) ? c->generation
                                                 : c->term << 32;
    if (g >= gen_limit(c))
        /* impossible unless views lie */
        return ms__coord_depose(c, c->term + 1);
    c->generation = ++g;
    for (int ti = 0; ti < c->ntypes; ti++) {
        struct ctype *t = &c->types[ti];
        if (!t->known)
            continue;
        for (uint32_t s = 0; s < t->shard_count; s++) {
            if (t->owner[s] && !ms__coord_may_keep(c, ti, t->owner[s]))
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
    return ms__coord_push(c, &a);
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
    int ti = ms__coord_find_type(c, m->type);
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
            int rc = ms__coord_type_alloc(t, m->shard_count);
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
    int rc = ms__coord_emit(c, mb->uid, &r);
    return rc ? rc : -1;
}

int ms__coord_on_view(struct ms_coord *c, struct member *mb,
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
            return ms__coord_depose(c, MS_PLAN_GEN_TERM(g));
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
        uint64_t o = ms__coord_may_keep(c, ti, e->owner) ? e->owner : 0;
        ms__coord_set_owner(c, ti, e->shard, o, g);
        changed[n++] = (struct ms_plan_entry){e->shard, o, g};
    }
    int rc = n ? ms__coord_emit_entries(c, 0, ti, changed, n) : 0;
    free(changed);
    return rc;
}

int ms__coord_on_view_done(struct ms_coord *c, struct member *mb,
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
        int rc = ms__coord_tell_moves(c, uid, ti, -1);
        if (!rc)
            rc = emit_full(c, uid, ti);
        if (rc)
            return rc;
    }
    return 0;
}

/* --- allocation ---------------------------------------------------------- */

/* Fills c->hosts with the members that can host type ti; their number. */
size_t ms__coord_hosts_of(struct ms_coord *c, int ti)
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

/* The members a shard of type ti may go to, in c->hosts; their number.
 * `away` (0: none) is the member the shard moves away from, left out
 * while another member can host it. */
static size_t place_hosts(struct ms_coord *c, int ti, uint64_t away)
{
    size_t nh = ms__coord_hosts_of(c, ti);
    /* a leaving member takes no new shard while another can, nor does
     * the old owner of a move (a move by hand or a rebalance that lands
     * where it began moves nothing) */
    size_t staying = 0;
    for (size_t i = 0; i < nh; i++)
        if (!c->hosts[i].leaving)
            c->hosts[staying++] = c->hosts[i];
    if (staying)
        nh = staying;
    size_t others = 0;
    for (size_t i = 0; i < nh; i++)
        if (c->hosts[i].uid != away)
            c->hosts[others++] = c->hosts[i];
    if (others) /* else nothing moved: the list is as it was */
        nh = others;
    return nh;
}

static int is_host(const struct ms_coord *c, size_t nh, uint64_t uid)
{
    for (size_t i = 0; i < nh; i++)
        if (c->hosts[i].uid == uid)
            return 1;
    return 0;
}

/* Chooses the owner of unassigned shard s of type ti with the allocate
 * callback, away from `away` (place_hosts). Returns it, or 0 with *code
 * ("no_host", "strategy") and a reason in err. */
uint64_t ms__coord_place(struct ms_coord *c, int ti, uint32_t s,
                         uint64_t away, const char **code, char *err,
                         size_t errlen)
{
    struct ctype *t = &c->types[ti];
    size_t nh = place_hosts(c, ti, away);
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
    if (is_host(c, nh, uid))
        return uid;
    snprintf(err, errlen, "the allocation strategy of '%s' chose %016llx, "
             "which cannot host it", t->name, (unsigned long long)uid);
    return 0;
}

int ms__coord_place_many(struct ms_coord *c, int ti, const uint32_t *s,
                         size_t n, uint64_t away, uint64_t *out,
                         const char **code, char *err, size_t errlen)
{
    struct ctype *t = &c->types[ti];
    if (n < 2 || !c->allocate_many)
        return -1;
    size_t nh = place_hosts(c, ti, away);
    if (nh == 0) {
        *code = "no_host";
        for (size_t i = 0; i < n; i++)
            snprintf(err + i * errlen, errlen, "no member can host entity "
                     "type '%s'", t->name);
        memset(out, 0, n * sizeof *out);
        return 0;
    }
    /* the old owner, leaving, is the only host: the caller leaves each
     * shard placed there unassigned, which the shards after it must see
     * (ms__coord_on_stopped), and no batch can know */
    if (nh == 1 && c->hosts[0].uid == away && c->hosts[0].leaving)
        return -1;
    struct ms_coord_view v = {ti, t->name, t->shard_count, t->owner,
                              c->hosts, nh, t->moving};
    /* each shard's reason, as ms__coord_place gives it */
    enum { WHY = 200 };
    char *why = calloc(n, WHY);
    if (!why || c->allocate_many(c->data, ti, s, n, &v, out, why, WHY) < 0) {
        free(why);
        return -1;
    }
    *code = "strategy";
    for (size_t i = 0; i < n; i++) {
        if (out[i] && is_host(c, nh, out[i]))
            continue;
        const char *w = why + i * WHY;
        if (out[i])
            snprintf(err + i * errlen, errlen, "the allocation strategy of "
                     "'%s' chose %016llx, which cannot host it", t->name,
                     (unsigned long long)out[i]);
        else
            snprintf(err + i * errlen, errlen, "the allocation strategy of "
                     "'%s' failed: %s", t->name,
                     w[0] ? w : "no owner chosen");
        out[i] = 0;
    }
    free(why);
    return 0;
}

int ms__coord_on_alloc(struct ms_coord *c, uint64_t from,
                       const struct ms_plan_msg *m)
{
    const char *tn = m->type;
    uint32_t s = m->shard;
    if (m->term > c->max_term && c->state == INERT)
        c->max_term = m->term;
    if (m->term > c->term && c->state != INERT) {
        int rc = ms__coord_depose(c, m->term);
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
    int ti = ms__coord_find_type(c, tn);
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
        int rc = t->moving[s] ? ms__coord_tell_moves(c, from, ti, s) : 0;
        struct ms_plan_entry e = {s, t->owner[s], t->gen[s]};
        return rc ? rc : ms__coord_emit_entries(c, from, ti, &e, 1);
    }
    if (c->generation >= gen_limit(c))
        return refuse_alloc(c, from, tn, s, "exhausted",
                            "term %llu has issued all its generations",
                            (unsigned long long)c->term);
    char err[256] = "";
    const char *code = "strategy";
    uint64_t uid = ms__coord_place(c, ti, s, 0, &code, err, sizeof err);
    if (!uid)
        return refuse_alloc(c, from, tn, s, code, "%s", err);
    uint64_t g = ++c->generation;
    ms__coord_set_owner(c, ti, s, uid, g);
    struct ms_plan_entry e = {s, uid, g};
#ifdef MS_SIM_SWITCHES
    /* another owner at the same generation, to this node's own region
     * first (its broadcast copy then arrives stale) */
    for (size_t i = 0; ms_sim_break_two_owners && i < c->nmembers; i++)
        if (c->members[i].uid != uid) {
            struct ms_plan_entry x = {s, c->members[i].uid, g};
            ms__coord_emit_entries(c, c->self_uid, ti, &x, 1);
            break;
        }
#endif
    return ms__coord_emit_entries(c, 0, ti, &e, 1);
}
