/*
 * dispatch_admin.c -- the dispatcher's life cycle, entity timers, shard
 * stops (handoff), shutdown and figures (dispatch.h); the message path is
 * in dispatch.c.
 */
#include "dispatch_impl.h"

#include <stdio.h>
#include <string.h>

/* ---- errors ---------------------------------------------------------- */

size_t ms_error_json(char *buf, size_t buflen, int err, const char *message)
{
    size_t o = 0;
    int n = snprintf(buf, buflen, "{\"code\":\"%s\",\"message\":\"",
                     ms_errname(err));
    if (n < 0 || (size_t)n >= buflen)
        return 0;
    o = (size_t)n;
    for (const unsigned char *p = (const unsigned char *)message; *p; p++) {
        char esc[8];
        const char *s = esc;
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            esc[2] = 0;
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
        } else {
            esc[0] = (char)*p;
            esc[1] = 0;
        }
        size_t l = strlen(s);
        if (o + l + 3 >= buflen)
            break;
        memcpy(buf + o, s, l);
        o += l;
    }
    buf[o++] = '"';
    buf[o++] = '}';
    buf[o] = 0;
    return o;
}

/* ---- lifecycle ----------------------------------------------------- */

struct ms_dispatch *ms_dispatch_new(const struct ms_dispatch_type *types,
                                    int ntypes, size_t max_message)
{
    /* an entity's record keeps its type and shard in 16 bits */
    if (ntypes < 0 || ntypes > MS_DISPATCH_MAX_TYPES)
        return NULL;
    for (int i = 0; i < ntypes; i++)
        if (types[i].shard_count < 1 || types[i].shard_count > 65536)
            return NULL;
    struct ms_dispatch *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->types = calloc((size_t)ntypes, sizeof *d->types);
    d->ntypes = ntypes;
    d->max_message = max_message;
    d->emask = 1023;
    d->ebuckets = calloc(d->emask + 1, sizeof *d->ebuckets);
    if (!d->types || !d->ebuckets)
        goto fail;
    for (int i = 0; i < ntypes; i++) {
        d->types[i].cfg = types[i];
        d->types[i].shards = calloc(types[i].shard_count, sizeof(struct shard));
        if (!d->types[i].shards)
            goto fail;
    }
    ms_timerq_init(&d->tq);
    d->max_active = UINT64_MAX;
    return d;
fail:
    ms_dispatch_free(d);
    return NULL;
}





void ms_dispatch_free(struct ms_dispatch *d)
{
    if (!d)
        return;
    ms_dispatch_shutdown(d);
    for (uint32_t h = 1; h < d->nslots; h++) {
        struct entity *e = d->slots[h];
        if (!e)
            continue;
        ms__dispatch_free_msgs(d, mb_take(e)); /* with ecur() */
        free(e);
    }
    for (size_t i = 0; d->etlists.b && i <= d->etlists.mask; i++) {
        struct etlist *l = d->etlists.b[i];
        while (l) {
            struct etlist *nl = l->hnext;
            while (l->first) {
                struct etimer *t = l->first;
                l->first = t->enext;
                free(t);
            }
            free(l);
            l = nl;
        }
    }
    for (int i = 0; d->types && i < d->ntypes; i++) {
        for (uint32_t s = 0; d->types[i].shards &&
                             s < d->types[i].cfg.shard_count; s++)
            ms__dispatch_free_msgs(d, d->types[i].shards[s].head);
        free(d->types[i].shards);
    }
    while (d->res_head) {
        struct resume *r = d->res_head;
        d->res_head = r->next;
        free(r);
    }
    free(d->res_cur);
    while (d->free_msgs) {
        struct msg *m = d->free_msgs;
        d->free_msgs = m->next;
        free(m);
    }
    free(d->types);
    free(d->stopped);
    free(d->ebuckets);
    free(d->slots);
    free(d->gens);
    free(d->freeh);
    free(d->parked);
    free(d->asks.b);
    free(d->etimers.b);
    free(d->etlists.b);
    free(d->ready);
    ms_timerq_free(&d->tq);
    free(d);
}

int ms_dispatch_type_index(struct ms_dispatch *d, const char *name,
                           size_t len)
{
    for (int i = 0; i < d->ntypes; i++) {
        const char *n = d->types[i].cfg.name;
        if (strlen(n) == len && memcmp(n, name, len) == 0)
            return i;
    }
    return MS_ENOTYPE;
}

const char *ms_dispatch_type_name(struct ms_dispatch *d, int type)
{
    return type >= 0 && type < d->ntypes ? d->types[type].cfg.name : "?";
}

int ms_dispatch_unavailable(struct ms_dispatch *d, int type)
{
    return type >= 0 && type < d->ntypes && d->types[type].unavailable;
}

void ms_dispatch_set_unavailable(struct ms_dispatch *d, int type, int yes)
{
    if (type >= 0 && type < d->ntypes)
        d->types[type].unavailable = yes;
}

/* ---- timers -------------------------------------------------------- */

/* An entity's timer list goes when its last timer does. */
static void etlist_drop_empty(struct ms_dispatch *d, struct etlist *l)
{
    if (!l->first) {
        elmap_del(&d->etlists, l);
        free(l);
    }
}

int64_t ms_dispatch_after(struct ms_dispatch *d, uint32_t h,
                          uint64_t delay_ms, const char *json, size_t len,
                          uint64_t now_ms)
{
    struct entity *e = eget(d, h);
    /* only an active entity: passivation cancels its timers, and a timer
     * on an inactive record would outlive it (review3) */
    if (!e || !e->active)
        return MS_EINVAL;
    if (len > d->max_message)
        return MS_E2BIG;
    if (e->ntimers >= MS_MAX_TIMERS)
        return MS_EOVERFLOW;
    struct etlist *l = e->ntimers ? elmap_find(&d->etlists, h) : NULL;
    if (!l) {
        l = calloc(1, sizeof *l);
        if (!l)
            return MS_ENOMEM;
        l->h = h;
        if (elmap_put(&d->etlists, l) < 0) {
            free(l);
            return MS_ENOMEM;
        }
    }
    struct etimer *t = malloc(sizeof *t + len + 1);
    if (!t) {
        etlist_drop_empty(d, l);
        return MS_ENOMEM;
    }
    memset(t, 0, sizeof *t);
    t->id = ++d->next_timer;
    t->h = h;
    t->len = (uint32_t)len;
    memcpy(t->payload, json, len);
    t->payload[len] = 0;
    t->tm.kind = T_ENTITY;
    if (tmap_put(&d->etimers, t) < 0 ||
        ms_timerq_push(&d->tq, &t->tm, deadline(now_ms, delay_ms)) < 0) {
        tmap_del(&d->etimers, t);
        free(t);
        etlist_drop_empty(d, l);
        return MS_ENOMEM;
    }
    t->enext = l->first;
    if (l->first)
        l->first->eprev = t;
    l->first = t;
    e->ntimers++;
    return (int64_t)t->id;
}

static void unlink_timer(struct ms_dispatch *d, struct etimer *t)
{
    struct entity *e = eget(d, t->h);
    if (e)
        e->ntimers--;
    if (t->eprev) {
        t->eprev->enext = t->enext;
    } else {
        struct etlist *l = elmap_find(&d->etlists, t->h);
        if (l && l->first == t) {
            l->first = t->enext;
            etlist_drop_empty(d, l);
        }
    }
    if (t->enext)
        t->enext->eprev = t->eprev;
    ms_timerq_remove(&d->tq, &t->tm);
    tmap_del(&d->etimers, t);
}

int ms_dispatch_cancel(struct ms_dispatch *d, uint32_t h, int64_t timer)
{
    struct etimer *t = tmap_find(&d->etimers, (uint64_t)timer);
    if (!t || t->h != h)
        return 0;
    unlink_timer(d, t);
    free(t);
    return 1;
}

/* ---- the active-entity limit ----------------------------------------- */

/* Entities a pass relists because they cannot stop now (busy, messages
 * waiting, a timer pending), before it gives up until the next done():
 * bounds its cost when most entities are busy. Relisting an entity for
 * its second chance is not counted: it clears the mark a message set, so
 * a pass does that at most once per listed entity. */
#define LIMIT_SCAN_BUSY 64

void ms_dispatch_set_max_active(struct ms_dispatch *d, uint64_t max)
{
    d->max_active = max ? max : UINT64_MAX;
    d->limit_short = 0;
    if (max && d->st.active_entities > max)
        ms__dispatch_limit(d);
}

uint64_t ms_dispatch_max_active(struct ms_dispatch *d)
{
    return d->max_active == UINT64_MAX ? 0 : d->max_active;
}

/* Queues the STOP of least recently used idle entities until the active
 * ones, less those already stopping for the limit, are back at the
 * limit; sets limit_short when it could not get there. The victim is the
 * oldest head among the types' active lists (few types), as for the idle
 * sweep; the STOP is that of an idle passivation, with its own reason. */
void ms__dispatch_limit(struct ms_dispatch *d)
{
    int busy_left = LIMIT_SCAN_BUSY;
    d->limit_short = 0;
    while (d->st.active_entities - d->limit_stops > d->max_active) {
        struct type *best = NULL;
        for (int i = 0; i < d->ntypes; i++) {
            struct type *t = &d->types[i];
            if (t->list_head &&
                (!best || listed_for(t->list_head, d->now_ms) >
                              listed_for(best->list_head, d->now_ms)))
                best = t;
        }
        if (!best)
            break; /* every active entity is stopping already */
        struct entity *e = best->list_head;
        list_del(d, e);
        if (e->used) {
            list_add(d, e, d->now_ms); /* used lately: a second chance */
            continue;
        }
        /* as in the idle sweep: pending ctx:after timers keep it */
        if (e->busy || e->mb || e->in_ready || e->ntimers) {
            list_add(d, e, d->now_ms);
            if (--busy_left == 0)
                break;
            continue;
        }
        struct msg *s = ms__dispatch_msg_new(d, MS_KIND_STOP, e->type,
                                             ehash(e), e->shard, e->id,
                                             e->idlen, "", 0);
        if (!s) {
            list_add(d, e, d->now_ms);
            break;
        }
        s->reason = MS_STOP_LIMIT;
        mb_push(e, s);
        ready_entity(d, e);
        d->limit_stops++;
    }
    d->limit_short = d->st.active_entities - d->limit_stops > d->max_active;
}

void ms_dispatch_expire(struct ms_dispatch *d, uint64_t now_ms)
{
    /* Idle passivation, lazily: a message only stamps last_ms; the sweep
     * visits an entity once per idle_timeout after it was listed, stops
     * it if it has been idle that long, else lists it again. An entity is
     * thus passivated between idle_timeout and 2 x idle_timeout after its
     * last message, and a message costs no list update. */
    d->now_ms = now_ms;
    for (int i = 0; i < d->ntypes; i++) {
        struct type *t = &d->types[i];
        uint64_t idle = t->cfg.idle_timeout_ms;
        struct entity *e;
        /* listed_for is right below 2^32 ms: a longer idle_timeout is
         * checked in steps (an entity visited early is listed again) */
        uint64_t visit = idle < LIST_VISIT_MAX_MS ? idle : LIST_VISIT_MAX_MS;
        while (idle && (e = t->list_head) && listed_for(e, now_ms) >= visit) {
            list_del(d, e);
            /* pending ctx:after timers keep an entity: passivating it
             * would cancel them */
            if (e->busy || e->mb || e->in_ready || e->ntimers ||
                now_ms - e->last_ms < idle) {
                list_add(d, e, now_ms);
                continue;
            }
            struct msg *s = ms__dispatch_msg_new(d, MS_KIND_STOP, e->type,
                                                 ehash(e),
                                                 e->shard, e->id, e->idlen,
                                                 "", 0);
            if (!s) {
                list_add(d, e, now_ms);
                break;
            }
            s->reason = MS_STOP_IDLE;
            mb_push(e, s);
            ready_entity(d, e);
        }
    }

    if (d->limit_short)
        ms__dispatch_limit(d);

    /* timers after the sweep: an entity whose timer fires now was not
     * idle */
    struct ms_timer *tm;
    while ((tm = ms_timerq_pop_due(&d->tq, now_ms))) {
        if (tm->kind == T_ASK) {
            struct ask *a = ms_container_of(tm, struct ask, tm);
            d->st.asks_timed_out++;
            char buf[128];
            size_t n = ms_error_json(buf, sizeof buf, MS_ETIMEDOUT,
                                     "ask timed out");
            ms__dispatch_complete_ask(d, a, MS_ETIMEDOUT, buf, n);
        } else {
            struct etimer *t = ms_container_of(tm, struct etimer, tm);
            struct entity *e = eget(d, t->h);
            unlink_timer(d, t);
            if (e) {
                struct msg *m = ms__dispatch_msg_new(d, MS_KIND_TELL, e->type,
                                                     ehash(e),
                                                     e->shard, e->id,
                                                     e->idlen, t->payload,
                                                     t->len);
                if (m && ms__dispatch_enqueue(d, m, 1) == 0)
                    d->st.timers_fired++;
            }
            free(t);
        }
    }
}

int64_t ms_dispatch_next_deadline(struct ms_dispatch *d, uint64_t now_ms)
{
    int64_t best = -1;
    struct ms_timer *tm = ms_timerq_peek(&d->tq);
    if (tm)
        best = tm->due_ms > now_ms ? (int64_t)(tm->due_ms - now_ms) : 0;
    for (int i = 0; i < d->ntypes; i++) {
        struct type *t = &d->types[i];
        if (!t->cfg.idle_timeout_ms || !t->list_head)
            continue;
        uint64_t visit = t->cfg.idle_timeout_ms < LIST_VISIT_MAX_MS
                             ? t->cfg.idle_timeout_ms : LIST_VISIT_MAX_MS;
        uint64_t since = listed_for(t->list_head, now_ms);
        int64_t in = since < visit ? (int64_t)(visit - since) : 0;
        if (best < 0 || in < best)
            best = in;
    }
    return best;
}

/* ---- shard stop (handoff) -------------------------------------------- */

void ms__dispatch_shard_check_stopped(struct ms_dispatch *d, uint32_t type,
                                      uint32_t shard)
{
    struct shard *sh = &d->types[type].shards[shard];
    if (sh->stopping != 2 || sh->nent || sh->head)
        return;
    sh->stopping = 0;
    if (d->nstopped == d->capstopped && d->hstopped) {
        /* the popped front is reused before the queue grows */
        d->nstopped -= d->hstopped;
        memmove(d->stopped, d->stopped + d->hstopped,
                d->nstopped * sizeof *d->stopped);
        d->hstopped = 0;
    }
    if (d->nstopped == d->capstopped) {
        size_t cap = d->capstopped ? d->capstopped * 2 : 16;
        struct stopped *n = realloc(d->stopped, cap * sizeof *n);
        if (!n) {
            sh->stopping = 2; /* retried at the next entity's end */
            return;
        }
        d->stopped = n;
        d->capstopped = cap;
    }
    d->stopped[d->nstopped++] = (struct stopped){(int)type, shard};
    d->st.shards_stopped++;
}

/* An active entity of a stopping shard with nothing left to handle gets
 * its STOP (passivation, `stopped` called). */
void ms__dispatch_entity_stopping(struct ms_dispatch *d, struct entity *e)
{
    struct shard *sh = &d->types[e->type].shards[e->shard];
    if (sh->stopping != 2 || !e->active || e->busy || e->mb)
        return;
    struct msg *s = ms__dispatch_msg_new(d, MS_KIND_STOP, e->type, ehash(e),
                                         e->shard, e->id, e->idlen, "", 0);
    if (!s)
        return;
    s->reason = MS_STOP_HANDOFF;
    mb_push(e, s);
    ready_entity(d, e);
}

/* A message popped from a stopping shard's FIFO: the stop marker, or
 * something that came after it (a ctx:after timer firing, or a request
 * that should have gone elsewhere), which is failed and counted. */
void ms__dispatch_shard_stop_msg(struct ms_dispatch *d, struct shard *sh,
                                 struct msg *m)
{
    uint32_t type = m->type;
    uint32_t shard = (uint32_t)(sh - d->types[type].shards);
    if (m->kind == KIND_SHARD_STOP) {
        int mine = sh->stopping == 1 && m->corr == sh->stop_epoch;
        ms__dispatch_msg_free(d, m);
        if (!mine)
            return; /* a stop that was called off */
        sh->stopping = 2;
        const struct type *t = &d->types[type];
        int quiet = t->quiet_stop && !t->observed;
        struct entity *next;
        for (struct entity *e = sh->ents; e; e = next) {
            next = elink(d, e->snext);
            if (next)
                __builtin_prefetch(next);
            /* an idle entity needs no delivery to stop when its
             * behavior has nothing to run at a stop */
            if (!quiet || !e->active || e->busy || e->mb || e->in_ready ||
                ms__dispatch_quiet_stop(d, e) < 0)
                ms__dispatch_entity_stopping(d, e);
        }
        ms__dispatch_shard_check_stopped(d, type, shard);
        return;
    }
    d->st.handoff_drops++;
    if (m->kind == MS_KIND_ASK || m->kind == MS_KIND_ACTIVATE)
        ms__dispatch_fail_ask(d, m->corr, MS_ENOOWNER,
                              "the entity's shard is moving to "
                              "another node");
    ms__dispatch_msg_free(d, m);
    ms__dispatch_shard_check_stopped(d, type, shard);
}

int ms_dispatch_shard_stop(struct ms_dispatch *d, int type, uint32_t shard)
{
    if (type < 0 || type >= d->ntypes ||
        shard >= d->types[type].cfg.shard_count)
        return MS_EINVAL;
    struct shard *sh = &d->types[type].shards[shard];
    if (sh->stopping)
        return 0;
    struct msg *m = ms__dispatch_msg_new(d, KIND_SHARD_STOP, (uint32_t)type, 0,
                                         shard, "", 0, "", 0);
    if (!m)
        return MS_ENOMEM;
    m->corr = ++sh->stop_epoch;
    sh->stopping = 1;
    return ms__dispatch_enqueue(d, m, 1);
}

void ms_dispatch_shard_resume(struct ms_dispatch *d, int type, uint32_t shard)
{
    if (type < 0 || type >= d->ntypes ||
        shard >= d->types[type].cfg.shard_count)
        return;
    struct shard *sh = &d->types[type].shards[shard];
    sh->stopping = 0;
    sh->stop_epoch++;
}

int ms_dispatch_shard_stopping(struct ms_dispatch *d, int type,
                               uint32_t shard)
{
    if (type < 0 || type >= d->ntypes ||
        shard >= d->types[type].cfg.shard_count)
        return 0;
    return d->types[type].shards[shard].stopping != 0;
}

int ms_dispatch_next_stopped(struct ms_dispatch *d, int *type,
                             uint32_t *shard)
{
    if (d->hstopped == d->nstopped)
        return 0;
    *type = d->stopped[d->hstopped].type;
    *shard = d->stopped[d->hstopped].shard;
    if (++d->hstopped == d->nstopped) /* a pop is O(1), not a shift */
        d->hstopped = d->nstopped = 0;
    return 1;
}

int ms_dispatch_has_work(struct ms_dispatch *d)
{
    return d->rcount || d->rs_head || d->res_head || d->nparked;
}

uint64_t ms_dispatch_shutdown(struct ms_dispatch *d)
{
    d->closing = 1;
    /* end asks first: suspended entities resume with MS_ECANCELED */
    for (size_t i = 0; d->asks.b && i <= d->asks.mask; i++) {
        while (d->asks.b[i]) {
            struct ask *a = d->asks.b[i];
            char buf[128];
            size_t n = ms_error_json(buf, sizeof buf, MS_ECANCELED,
                                     "the node is stopping");
            ms__dispatch_complete_ask(d, a, MS_ECANCELED, buf, n);
        }
    }
    for (int i = 0; i < d->ntypes; i++) {
        struct type *t = &d->types[i];
        struct entity *e;
        while ((e = t->list_head)) {
            list_del(d, e);
            struct msg *s = ms__dispatch_msg_new(d, MS_KIND_STOP, e->type,
                                                 ehash(e),
                                                 e->shard, e->id, e->idlen,
                                                 "", 0);
            if (!s)
                break;
            s->reason = MS_STOP_NODE;
            /* after the messages it already accepted; a busy entity is
             * made ready when its current message is done */
            mb_push(e, s);
            if (!e->busy)
                ready_entity(d, e);
        }
    }
    return d->st.active_entities;
}

int ms_dispatch_live(struct ms_dispatch *d, uint32_t h, uint32_t gen)
{
    struct entity *e = eget(d, h);
    return e && e->active && d->gens[h] == gen;
}

int ms_dispatch_entity(struct ms_dispatch *d, uint32_t h, int *type,
                       const char **id, size_t *idlen, uint32_t *shard)
{
    struct entity *e = eget(d, h);
    if (!e)
        return 0;
    *type = (int)e->type;
    *id = e->id;
    *idlen = e->idlen;
    *shard = e->shard;
    return 1;
}

void ms_dispatch_stats(struct ms_dispatch *d, struct ms_stats *out)
{
    *out = d->st;
}

struct ms_stats *ms_dispatch_counters(struct ms_dispatch *d)
{
    return &d->st;
}

uint64_t ms_dispatch_pending(struct ms_dispatch *d)
{
    return d->pending;
}
