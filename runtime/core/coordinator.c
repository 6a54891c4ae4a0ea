/*
 * coordinator.c -- the coordinator's state machine (sans-IO): the state's
 * helpers, the action queue, lifecycle, terms, the events and the
 * queries. See coordinator.h for the model, plan.h for the messages and
 * coordinator_int.h for the state and the other files' jobs.
 */
#include "coordinator_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- small helpers ------------------------------------------------------- */

struct member *ms__coord_find_member(const struct ms_coord *c, uint64_t uid)
{
    size_t lo = 0, hi = c->nmembers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->members[mid].uid == uid)
            return &c->members[mid];
        if (c->members[mid].uid < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int ms__coord_find_type(const struct ms_coord *c, const char *name)
{
    for (int i = 0; i < c->ntypes; i++)
        if (strcmp(c->types[i].name, name) == 0)
            return i;
    return -1;
}

int ms__coord_type_alloc(struct ctype *t, uint32_t shard_count)
{
    t->owner = calloc(shard_count, sizeof *t->owner);
    t->gen = calloc(shard_count, sizeof *t->gen);
    t->moving = calloc(shard_count, sizeof *t->moving);
    if (!t->owner || !t->gen || !t->moving) {
        free(t->owner);
        free(t->gen);
        free(t->moving);
        t->owner = t->gen = NULL;
        t->moving = NULL;
        return MS_ENOMEM;
    }
    t->shard_count = shard_count;
    t->known = 1;
    return 0;
}

static void type_forget(struct ctype *t)
{
    free(t->owner);
    free(t->gen);
    free(t->moving);
    t->owner = t->gen = NULL;
    t->moving = NULL;
    t->known = 0;
    t->shard_count = 0;
    t->fp[0] = '\0';
}

/* May `owner` keep a shard of type ti? Gone members may not; neither may
 * members that answered this term without registering the type, nor
 * ineligible ones. A member that has not answered keeps its shards: it may
 * merely be unreachable, which relocates nothing. */
int ms__coord_may_keep(const struct ms_coord *c, int ti, uint64_t owner)
{
    const struct member *mb = ms__coord_find_member(c, owner);
    if (!mb || !eligible(c, ti, owner))
        return 0;
    return !mb->view_done || (mb->types & bit(ti));
}

void ms__coord_set_owner(struct ms_coord *c, int ti, uint32_t s,
                         uint64_t owner, uint64_t gen)
{
    struct ctype *t = &c->types[ti];
    struct member *mb;
    if (t->owner[s] && (mb = ms__coord_find_member(c, t->owner[s])) &&
        mb->owned[ti])
        mb->owned[ti]--;
    if (owner && (mb = ms__coord_find_member(c, owner)))
        mb->owned[ti]++;
    t->owner[s] = owner;
    t->gen[s] = gen;
    if (gen > c->generation)
        c->generation = gen;
}

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

/* --- actions ------------------------------------------------------------- */

int ms__coord_push(struct ms_coord *c, const struct ms_coord_action *a)
{
    if (c->qhead > 0 && c->qhead == c->qlen)
        c->qhead = c->qlen = 0;
    if (c->qlen == c->qcap) {
        if (c->qhead > 0) {
            memmove(c->q, c->q + c->qhead,
                    (c->qlen - c->qhead) * sizeof *c->q);
            c->qlen -= c->qhead;
            c->qhead = 0;
        } else {
            size_t cap = c->qcap ? c->qcap * 2 : 16;
            struct ms_coord_action *nq = realloc(c->q, cap * sizeof *nq);
            if (!nq)
                return MS_ENOMEM;
            c->q = nq;
            c->qcap = cap;
        }
    }
    c->q[c->qlen++] = *a;
    return 0;
}

/* Encodes `m` and queues it for `uid` (0: broadcast). */
int ms__coord_emit(struct ms_coord *c, uint64_t uid,
                   const struct ms_plan_msg *m)
{
    struct ms_coord_action a = {0};
    int rc = ms_plan_msg_encode(m, &a.payload, &a.len);
    if (rc)
        return rc;
    a.kind = uid ? MS_COORD_SEND : MS_COORD_BROADCAST;
    a.uid = uid;
    a.term = c->term;
    rc = ms__coord_push(c, &a);
    if (rc)
        free(a.payload);
    return rc;
}

int ms__coord_emit_term(struct ms_coord *c, uint64_t uid, int kind)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.term = c->term;
    return ms__coord_emit(c, uid, &m);
}

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

/* Queues messages of `kind` ("plan", "handoff", "stop") for type ti
 * carrying entries e[0..n) (ascending shards), in chunks of
 * MS_PLAN_MSG_MAX_ENTRIES, to `uid` (0: broadcast). */
int ms__coord_emit_kind(struct ms_coord *c, uint64_t uid, int ti, int kind,
                        struct ms_plan_entry *e, size_t n)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.term = c->term;
    memcpy(m.type, c->types[ti].name, sizeof m.type);
    m.shard_count = c->types[ti].shard_count;
    for (size_t off = 0; off < n; off += MS_PLAN_MSG_MAX_ENTRIES) {
        m.entries = e + off;
        m.nentries = n - off < MS_PLAN_MSG_MAX_ENTRIES
                         ? n - off
                         : MS_PLAN_MSG_MAX_ENTRIES;
        int rc = ms__coord_emit(c, uid, &m);
        if (rc)
            return rc;
    }
    return 0;
}

int ms__coord_emit_entries(struct ms_coord *c, uint64_t uid, int ti,
                           struct ms_plan_entry *e, size_t n)
{
    return ms__coord_emit_kind(c, uid, ti, MS_PLAN_MSG_PLAN, e, n);
}

/* Queues a log line for the operator. */
void __attribute__((format(printf, 2, 3)))
ms__coord_note(struct ms_coord *c, const char *fmt, ...)
{
    struct ms_coord_action a = {0};
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    a.kind = MS_COORD_NOTE;
    a.term = c->term;
    a.len = strlen(line);
    a.payload = malloc(a.len + 1);
    if (!a.payload)
        return;
    memcpy(a.payload, line, a.len + 1);
    if (ms__coord_push(c, &a) < 0)
        free(a.payload);
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

int ms__coord_depose(struct ms_coord *c, uint64_t term)
{
    if (term > c->max_term)
        c->max_term = term;
    if (c->state == INERT)
        return 0;
    c->state = INERT;
    ms__coord_clear_moves(c);
    struct ms_coord_action a = {0};
    a.kind = MS_COORD_DEPOSED;
    a.term = term;
    return ms__coord_push(c, &a);
}

/* --- lifecycle ----------------------------------------------------------- */

int ms_coord_new(struct ms_coord **out, const struct ms_coord_config *cfg)
{
    *out = NULL;
    if (!cfg->self_uid || !cfg->allocate || cfg->ntypes < 0 ||
        cfg->ntypes > MS_PLAN_MAX_TYPES || (cfg->ntypes && !cfg->types))
        return MS_EINVAL;
    struct ms_coord *c = calloc(1, sizeof *c);
    if (!c)
        return MS_ENOMEM;
    c->self_uid = cfg->self_uid;
    c->view_timeout_ms =
        cfg->view_timeout_ms ? cfg->view_timeout_ms : MS_COORD_VIEW_TIMEOUT_MS;
    c->allocate = cfg->allocate;
    c->eligible = cfg->eligible;
    c->rebalance = cfg->rebalance;
    c->data = cfg->data;
    c->handoff_timeout_ms = cfg->handoff_timeout_ms
                                ? cfg->handoff_timeout_ms
                                : MS_COORD_HANDOFF_TIMEOUT_MS;
    c->rebalance_interval_ms = cfg->rebalance_interval_ms
                                   ? cfg->rebalance_interval_ms
                                   : MS_COORD_REBALANCE_MS;
    c->hosts = malloc(MS_COORD_MAX_MEMBERS * sizeof *c->hosts);
    if (!c->hosts) {
        ms_coord_free(c);
        return MS_ENOMEM;
    }
    for (int i = 0; i < cfg->ntypes; i++) {
        const struct ms_coord_type *ty = &cfg->types[i];
        /* validate the name with the codec's own rules */
        struct ms_plan_msg probe;
        memset(&probe, 0, sizeof probe);
        probe.kind = MS_PLAN_MSG_ALLOC;
        probe.term = 1;
        char *text = NULL;
        int bad = !ty->name || !ty->fingerprint ||
                  strlen(ty->name) > MS_PLAN_MAX_TYPE_NAME ||
                  strlen(ty->fingerprint) > MS_PLAN_MAX_FINGERPRINT ||
                  ty->shard_count == 0 ||
                  ty->shard_count > MS_PLAN_MAX_SHARDS;
        if (!bad) {
            memcpy(probe.type, ty->name, strlen(ty->name) + 1);
            bad = ms_plan_msg_encode(&probe, &text, NULL) != 0 ||
                  ms__coord_find_type(c, ty->name) >= 0;
            free(text);
        }
        if (bad) {
            ms_coord_free(c);
            return MS_EINVAL;
        }
        struct ctype *t = &c->types[c->ntypes];
        memcpy(t->name, ty->name, strlen(ty->name) + 1);
        memcpy(t->fp, ty->fingerprint, strlen(ty->fingerprint) + 1);
        t->own = 1;
        c->ntypes++;
        if (ms__coord_type_alloc(t, ty->shard_count) != 0) {
            ms_coord_free(c);
            return MS_ENOMEM;
        }
    }
    *out = c;
    return 0;
}

void ms_coord_free(struct ms_coord *c)
{
    if (!c)
        return;
    ms__coord_clear_moves(c);
    free(c->moves);
    for (int i = 0; i < c->ntypes; i++)
        type_forget(&c->types[i]);
    for (size_t i = c->qhead; i < c->qlen; i++)
        free(c->q[i].payload);
    free(c->q);
    free(c->members);
    free(c->hosts);
    free(c);
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

/* --- role ---------------------------------------------------------------- */

int ms_coord_become(struct ms_coord *c, uint64_t term, uint64_t now_ms)
{
    if (term == 0 || term > MS_PLAN_MAX_TERM || term <= c->max_term ||
        term <= c->term)
        return MS_EINVAL;
    ms__coord_clear_moves(c);
    for (int i = 0; i < c->ntypes; i++) {
        struct ctype *t = &c->types[i];
        if (t->own) {
            memset(t->owner, 0, t->shard_count * sizeof *t->owner);
            memset(t->gen, 0, t->shard_count * sizeof *t->gen);
            memset(t->moving, 0, t->shard_count * sizeof *t->moving);
        } else {
            type_forget(t);
        }
    }
    for (size_t i = 0; i < c->nmembers; i++) {
        c->members[i].view_done = 0;
        c->members[i].types = 0;
        memset(c->members[i].owned, 0, sizeof c->members[i].owned);
    }
    c->term = c->max_term = term;
    c->state = COLLECTING;
    c->due_ms = now_ms + c->view_timeout_ms;
    return ms__coord_emit_term(c, 0, MS_PLAN_MSG_VIEW_REQUEST);
}

void ms_coord_resign(struct ms_coord *c)
{
    c->state = INERT;
    ms__coord_clear_moves(c);
}

void ms_coord_observe_term(struct ms_coord *c, uint64_t term)
{
    if (term > c->term && c->state != INERT)
        ms__coord_depose(c, term);
    else if (term > c->max_term)
        c->max_term = term;
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

/* Chooses the owner of unassigned shard s of type ti with the allocate
 * callback. Returns it, or 0 with *code ("no_host", "strategy") and a
 * reason in err. */
uint64_t ms__coord_place(struct ms_coord *c, int ti, uint32_t s,
                         const char **code, char *err, size_t errlen)
{
    struct ctype *t = &c->types[ti];
    size_t nh = ms__coord_hosts_of(c, ti);
    /* a leaving member takes no new shard while another can */
    size_t staying = 0;
    for (size_t i = 0; i < nh; i++)
        if (!c->hosts[i].leaving)
            c->hosts[staying++] = c->hosts[i];
    if (staying)
        nh = staying;
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
    for (size_t i = 0; i < nh; i++)
        if (c->hosts[i].uid == uid)
            return uid;
    snprintf(err, errlen, "the allocation strategy of '%s' chose %016llx, "
             "which cannot host it", t->name, (unsigned long long)uid);
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
    uint64_t uid = ms__coord_place(c, ti, s, &code, err, sizeof err);
    if (!uid)
        return refuse_alloc(c, from, tn, s, code, "%s", err);
    uint64_t g = ++c->generation;
    ms__coord_set_owner(c, ti, s, uid, g);
    struct ms_plan_entry e = {s, uid, g};
    return ms__coord_emit_entries(c, 0, ti, &e, 1);
}

/* --- events -------------------------------------------------------------- */

/* ms_coord_on_msg() takes decoded messages from anywhere: check what the
 * decoder would have checked before indexing arrays with them. */
static int well_formed(const struct ms_plan_msg *m)
{
    size_t n = strnlen(m->type, sizeof m->type);
    if (n == 0 || n > MS_PLAN_MAX_TYPE_NAME || m->term > MS_PLAN_MAX_TERM)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)m->type[i];
        if (ch < 0x21 || ch > 0x7e || ch == '"' || ch == '\\')
            return 0;
    }
    if (m->kind == MS_PLAN_MSG_ALLOC)
        return m->shard < MS_PLAN_MAX_SHARDS;
    if (m->shard_count == 0 || m->shard_count > MS_PLAN_MAX_SHARDS ||
        m->nentries > MS_PLAN_MSG_MAX_ENTRIES ||
        (m->nentries && !m->entries) ||
        strnlen(m->fingerprint, sizeof m->fingerprint) >
            MS_PLAN_MAX_FINGERPRINT)
        return 0;
    for (size_t i = 0; i < m->nentries; i++)
        if (m->entries[i].shard >= m->shard_count ||
            m->entries[i].gen == 0 || m->entries[i].gen > MS_PLAN_MAX_GEN)
            return 0;
    return 1;
}

int ms_coord_on_msg(struct ms_coord *c, uint64_t from_uid,
                    const struct ms_plan_msg *m, uint64_t now_ms)
{
    c->now_ms = now_ms;
    if ((m->kind == MS_PLAN_MSG_ALLOC || m->kind == MS_PLAN_MSG_VIEW ||
         m->kind == MS_PLAN_MSG_FENCED || m->kind == MS_PLAN_MSG_STOPPED) &&
        !well_formed(m))
        return MS_EINVAL;
    switch (m->kind) {
    case MS_PLAN_MSG_FENCED:
    case MS_PLAN_MSG_STOPPED: {
        if (c->state != READY || m->term != c->term)
            return 0; /* a move of another term: that term is over */
        int ti = ms__coord_find_type(c, m->type);
        if (ti < 0 || !c->types[ti].known ||
            m->shard_count != c->types[ti].shard_count)
            return 0;
        return m->kind == MS_PLAN_MSG_FENCED
                   ? ms__coord_on_fenced(c, from_uid, ti, m)
                   : ms__coord_on_stopped(c, from_uid, ti, m);
    }
    case MS_PLAN_MSG_ALLOC:
        return ms__coord_on_alloc(c, from_uid, m);
    case MS_PLAN_MSG_STALE_TERM:
        if (c->state != INERT && m->term >= c->term)
            return ms__coord_depose(c, m->term);
        if (m->term > c->max_term)
            c->max_term = m->term;
        return 0;
    case MS_PLAN_MSG_VIEW:
    case MS_PLAN_MSG_VIEW_DONE: {
        if (c->state == INERT)
            return 0;
        if (m->term > c->term)
            return ms__coord_depose(c, m->term);
        struct member *mb = ms__coord_find_member(c, from_uid);
        if (m->term != c->term || !mb)
            return 0;
        if (m->kind == MS_PLAN_MSG_VIEW)
            return ms__coord_on_view(c, mb, m);
        return ms__coord_on_view_done(c, mb, now_ms);
    }
    default:
        return MS_EINVAL;
    }
}

int ms_coord_on_message(struct ms_coord *c, uint64_t from_uid,
                        const char *payload, size_t len, uint64_t now_ms)
{
    struct ms_plan_msg *m = malloc(sizeof *m);
    if (!m)
        return MS_ENOMEM;
    int rc = ms_plan_msg_decode(payload, len, m);
    if (rc == 0) {
        rc = ms_coord_on_msg(c, from_uid, m, now_ms);
        ms_plan_msg_free(m);
    }
    free(m);
    return rc;
}

int ms_coord_tick(struct ms_coord *c, uint64_t now_ms)
{
    c->now_ms = now_ms;
    if (c->state == READY) {
        int rc = ms__coord_expire_moves(c, now_ms);
        if (!rc)
            rc = ms__coord_resend_moves(c, now_ms);
        if (!rc)
            rc = ms__coord_move_leavers(c, now_ms);
        if (!rc && (c->reconcile || now_ms >= c->next_round_ms))
            rc = ms__coord_run_rounds(c, now_ms);
        if (rc)
            return rc;
    }
    if (c->state == INERT || now_ms < c->due_ms)
        return 0;
    if (c->state == COLLECTING)
        return ms__coord_publish(c, now_ms);
    c->due_ms = now_ms + c->view_timeout_ms;
    for (size_t i = 0; i < c->nmembers; i++)
        if (!c->members[i].view_done) {
            int rc = ms__coord_emit_term(c, c->members[i].uid,
                                         MS_PLAN_MSG_VIEW_REQUEST);
            if (rc)
                return rc;
        }
    return 0;
}

static void sooner(uint64_t *best, uint64_t due)
{
    if (due < *best)
        *best = due;
}

int64_t ms_coord_next_deadline(const struct ms_coord *c, uint64_t now_ms)
{
    if (c->state == INERT)
        return -1;
    uint64_t best = UINT64_MAX;
    if (c->state == COLLECTING)
        best = c->due_ms;
    for (size_t i = 0; c->state == READY && i < c->nmembers; i++) {
        if (!c->members[i].view_done)
            sooner(&best, c->due_ms); /* a view request goes out again */
        if (c->members[i].leaving)
            sooner(&best, now_ms);    /* its shards are to move */
    }
    for (size_t i = 0; i < c->nmoves; i++) {
        sooner(&best, c->moves[i].deadline_ms);
        sooner(&best, c->moves[i].sent_ms + MS_COORD_RESEND_MS);
    }
    if (c->state == READY && c->rebalance)
        sooner(&best, c->reconcile ? now_ms : c->next_round_ms);
    if (best == UINT64_MAX)
        return -1;
    return best > now_ms ? (int64_t)(best - now_ms) : 0;
}

int ms_coord_next_action(struct ms_coord *c, struct ms_coord_action *out)
{
    if (c->qhead == c->qlen)
        return 0;
    *out = c->q[c->qhead++];
    return 1;
}

/* --- queries ------------------------------------------------------------- */

int ms_coord_active(const struct ms_coord *c)
{
    return c->state != INERT;
}

int ms_coord_ready(const struct ms_coord *c)
{
    return c->state == READY;
}

uint64_t ms_coord_term(const struct ms_coord *c)
{
    return c->term;
}

uint64_t ms_coord_max_term(const struct ms_coord *c)
{
    return c->max_term;
}

uint64_t ms_coord_generation(const struct ms_coord *c)
{
    return c->generation;
}

int ms_coord_type_count(const struct ms_coord *c)
{
    return c->ntypes;
}

int ms_coord_type_index(const struct ms_coord *c, const char *name)
{
    int ti = ms__coord_find_type(c, name);
    return ti < 0 ? MS_ENOTYPE : ti;
}

const char *ms_coord_type_name(const struct ms_coord *c, int type)
{
    return type >= 0 && type < c->ntypes ? c->types[type].name : NULL;
}

uint32_t ms_coord_shard_count(const struct ms_coord *c, int type)
{
    if (type < 0 || type >= c->ntypes || !c->types[type].known)
        return 0;
    return c->types[type].shard_count;
}

uint64_t ms_coord_owner(const struct ms_coord *c, int type, uint32_t shard,
                        uint64_t *gen)
{
    if (gen)
        *gen = 0;
    if (shard >= ms_coord_shard_count(c, type))
        return 0;
    if (gen)
        *gen = c->types[type].gen[shard];
    return c->types[type].owner[shard];
}

int ms_coord_hosts(const struct ms_coord *c, int type, uint64_t uid)
{
    if (type < 0 || type >= c->ntypes || !c->types[type].known)
        return 0;
    return can_host(c, type, ms__coord_find_member(c, uid));
}

uint32_t ms_coord_owned_count(const struct ms_coord *c, uint64_t uid)
{
    const struct member *mb = ms__coord_find_member(c, uid);
    uint32_t n = 0;
    if (!mb || c->state != READY)
        return 0;
    for (int ti = 0; ti < c->ntypes; ti++)
        n += mb->owned[ti];
    return n;
}

