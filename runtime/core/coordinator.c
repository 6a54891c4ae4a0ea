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
    c->allocate_many = cfg->allocate_many;
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


