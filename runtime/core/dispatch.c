/*
 * dispatch.c -- shard FIFOs, entity table, mailboxes and asks: accepting
 * and delivering messages (the life cycle, timers, shard stops and
 * shutdown are in dispatch_admin.c).
 *
 * Memory: one allocation per accepted message (header, id and payload
 * together), one per entity (struct and id together), one per pending ask
 * or entity timer. Entities are referred to from asks and timers by handle
 * and generation, never by pointer, so a passivated entity cannot be
 * reached through a stale reference.
 */
#include "dispatch_impl.h"
#include "simswitch.h"

#include <stdio.h>
#include <string.h>

/* A message accepted by enqueue leaves its shard's count when it is
 * delivered or dropped. */
static void uncount(struct ms_dispatch *d, struct msg *m)
{
    if (!m->counted)
        return;
    m->counted = 0;
    m->created = 0;
    struct type *t = &d->types[m->type];
    t->shards[m->shard].pending--;
    d->pending--;
}

/* Small messages (the common case) are recycled through a free list of
 * MSG_SMALL-byte blocks, bounded by MSG_FREE_MAX blocks. */
void ms__dispatch_msg_free(struct ms_dispatch *d, struct msg *m)
{
    if (m)
        uncount(d, m);
    if (m && m->size <= MSG_SMALL && d->nfree_msgs < MSG_FREE_MAX) {
        m->next = d->free_msgs;
        d->free_msgs = m;
        d->nfree_msgs++;
    } else {
        free(m);
    }
}

void ms__dispatch_free_msgs(struct ms_dispatch *d, struct msg *m)
{
    while (m) {
        struct msg *n = m->next;
        ms__dispatch_msg_free(d, m);
        m = n;
    }
}

/* ---- entity table -------------------------------------------------- */

static uint64_t ekey(uint32_t type, uint64_t hash)
{
    return hash ^ ((uint64_t)type * 0x9e3779b97f4a7c15ULL);
}

static struct entity *efind(struct ms_dispatch *d, uint32_t type,
                            uint64_t hash, const char *id, size_t idlen)
{
    struct entity *e = d->ebuckets[mix(ekey(type, hash)) & d->emask];
    for (; e; e = e->hnext)
        if (e->idlen == idlen && e->type == type &&
            memcmp(e->id, id, idlen) == 0)
            return e;
    return NULL;
}

static void egrow(struct ms_dispatch *d)
{
    size_t cap = (d->emask + 1) * 2;
    struct entity **nb = calloc(cap, sizeof *nb);
    if (!nb)
        return; /* keep the old table: longer chains, still correct */
    for (size_t i = 0; i <= d->emask; i++) {
        struct entity *e = d->ebuckets[i];
        while (e) {
            struct entity *n = e->hnext;
            size_t j = mix(ekey(e->type, ehash(e))) & (cap - 1);
            e->hnext = nb[j];
            nb[j] = e;
            e = n;
        }
    }
    free(d->ebuckets);
    d->ebuckets = nb;
    d->emask = cap - 1;
}

static struct entity *ecreate(struct ms_dispatch *d, uint32_t type,
                              uint64_t hash, uint32_t shard, const char *id,
                              size_t idlen)
{
    uint32_t h;
    if (d->nfree) {
        h = d->freeh[--d->nfree];
    } else {
        if (d->nslots == 0)
            d->nslots = 1;
        if (d->nslots >= d->capslots) {
            uint32_t cap = d->capslots ? d->capslots * 2 : 1024;
            struct entity **s = realloc(d->slots, cap * sizeof *s);
            if (!s)
                return NULL;
            d->slots = s;
            uint32_t *g = realloc(d->gens, cap * sizeof *g);
            if (!g)
                return NULL;
            d->gens = g;
            uint32_t *f = realloc(d->freeh, cap * sizeof *f);
            if (!f)
                return NULL;
            d->freeh = f;
            /* the ready ring: as long as the slots, unwrapped */
            uint32_t *r = malloc(cap * sizeof *r);
            if (!r)
                return NULL;
            for (uint32_t i = 0; i < d->rcount; i++)
                r[i] = d->ready[(d->rhead + i) & (d->rcap - 1)];
            free(d->ready);
            d->ready = r;
            d->rhead = 0;
            d->rcap = cap;
            for (uint32_t i = d->capslots; i < cap; i++)
                d->gens[i] = 0;
            d->capslots = cap;
        }
        h = d->nslots++;
    }
    struct entity *e = malloc(ENTITY_HEAD + idlen + 1);
    if (!e) {
        d->freeh[d->nfree++] = h;
        return NULL;
    }
    memset(e, 0, ENTITY_HEAD);
    e->h = h;
    e->type = (uint16_t)type;
    e->shard = (uint16_t)shard;
    e->idlen = (uint32_t)idlen & 0x3ff;
    memcpy(e->id, id, idlen);
    e->id[idlen] = 0;
    d->slots[h] = e;
    d->gens[h]++;
    struct shard *sh = &d->types[type].shards[e->shard];
    sh->nent++;
    e->snext = sh->ents ? sh->ents->h : 0;
    if (sh->ents)
        sh->ents->sprev = h;
    sh->ents = e;
    size_t j = mix(ekey(type, hash)) & d->emask;
    e->hnext = d->ebuckets[j];
    d->ebuckets[j] = e;
    if (++d->nentities > d->emask)
        egrow(d);
    return e;
}


static void edestroy_to(struct ms_dispatch *d, struct entity *e, int park);

static void edestroy(struct ms_dispatch *d, struct entity *e)
{
    edestroy_to(d, e, 0);
}

/* Destroys e; its handle is free again at once, or parked (`park`). */
static void edestroy_to(struct ms_dispatch *d, struct entity *e, int park)
{
    list_del(d, e);
    struct shard *sh = &d->types[e->type].shards[e->shard];
    sh->nent--;
    struct entity *p = elink(d, e->sprev), *n = elink(d, e->snext);
    if (p)
        p->snext = e->snext;
    else
        sh->ents = n;
    if (n)
        n->sprev = e->sprev;
    ms__dispatch_shard_check_stopped(d, e->type, e->shard);
    struct entity **pp = &d->ebuckets[mix(ekey(e->type, ehash(e))) & d->emask];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    d->nentities--;
    d->slots[e->h] = NULL;
    if (park)
        d->parked[d->nparked++] = e->h;
    else
        d->freeh[d->nfree++] = e->h;
    free(e);
}







/* ---- accepting ----------------------------------------------------- */


/* A message of entity `id` of `type`; `hash` (ms_fnv1a64 of the id) and
 * `shard` as ms_dispatch_shard_of gives them, or the entity's own. */
struct msg *ms__dispatch_msg_new(struct ms_dispatch *d, int kind, uint32_t type,
                                 uint64_t hash, uint32_t shard, const char *id,
                                 size_t idlen, const char *json, size_t len)
{
    size_t size = sizeof(struct msg) + idlen + len + 2;
    struct msg *m;
    if (size <= MSG_SMALL && d->nfree_msgs) {
        m = d->free_msgs;
        d->free_msgs = m->next;
        d->nfree_msgs--;
    } else {
        m = malloc(size <= MSG_SMALL ? MSG_SMALL : size);
    }
    if (!m)
        return NULL;
    m->size = (uint32_t)(size <= MSG_SMALL ? MSG_SMALL : size);
    m->next = NULL;
    m->corr = 0;
    m->type = type;
    m->idlen = (uint32_t)idlen;
    m->len = (uint32_t)len;
    m->kind = (uint8_t)kind;
    m->counted = 0;
    m->created = 0;
    m->reason = MS_STOP_EXPLICIT;
    m->hash = hash;
    m->shard = shard;
    memcpy(m->data, id, idlen);
    m->data[idlen] = 0;
    if (len)
        memcpy(m->data + idlen + 1, json, len);
    m->data[idlen + 1 + len] = 0;
    return m;
}

/* The state checks of a send to a resolved destination (the edge checked
 * the type and id; the payload's bound is one compare, kept here because
 * frames from other nodes come in through the region too). */
static int check(struct ms_dispatch *d, const struct ms_dest *dst,
                 size_t len)
{
    if (d->closing)
        return MS_ECANCELED;
    if (d->types[dst->type].unavailable)
        return MS_EUNAVAIL;
    if (len > d->max_message)
        return MS_E2BIG;
    return 0;
}

void ms_dispatch_set_partitioner(struct ms_dispatch *d, ms_partition_fn fn,
                                 void *data)
{
    d->partition = fn;
    d->partition_data = data;
}

/* The hash and shard of an id of a checked type. */
static int shard_for(struct ms_dispatch *d, int type, const char *id,
                     size_t idlen, uint64_t *hash, uint32_t *shard)
{
    const struct ms_dispatch_type *c = &d->types[type].cfg;
    *hash = ms_fnv1a64(id, idlen);
    if (!c->custom_partition) {
        *shard = (uint32_t)(*hash % c->shard_count);
        return 0;
    }
    if (!d->partition)
        return MS_EPARTITION;
    int rc = d->partition(d->partition_data, type, id, idlen, c->shard_count,
                          shard);
    if (rc == 0 && *shard >= c->shard_count)
        rc = MS_EPARTITION; /* the callback checks; this guards the FIFOs */
    return rc;
}

int ms_dispatch_resolve(struct ms_dispatch *d, int type, const char *id,
                        size_t idlen, struct ms_dest *out)
{
    if (type < 0 || type >= d->ntypes)
        return MS_ENOTYPE;
    if (idlen == 0 || idlen > MS_MAX_ID)
        return MS_E2BIG; /* the partitioner sees only ids a send accepts */
    out->type = type;
    out->id = id;
    out->idlen = idlen;
    return shard_for(d, type, id, idlen, &out->hash, &out->shard);
}

int ms_dispatch_resolve_send(struct ms_dispatch *d, int type, const char *id,
                             size_t idlen, size_t len, struct ms_dest *out)
{
    if (ms_dispatch_unavailable(d, type))
        return MS_EUNAVAIL;
    int rc = ms_dispatch_resolve(d, type, id, idlen, out);
    if (rc == 0 && len > d->max_message)
        rc = MS_E2BIG;
    return rc;
}

int ms_dispatch_shard_of(struct ms_dispatch *d, int type, const char *id,
                         size_t idlen, uint32_t *shard)
{
    struct ms_dest dst;
    int rc = ms_dispatch_resolve(d, type, id, idlen, &dst);
    if (rc == 0)
        *shard = dst.shard;
    return rc;
}

/* Appends m to its shard's FIFO, enforcing the shard's bound unless
 * `force` (stop requests and self-timers are never refused). */
int ms__dispatch_enqueue(struct ms_dispatch *d, struct msg *m, int force)
{
    struct type *t = &d->types[m->type];
    struct shard *sh = &t->shards[m->shard];
    if (!force && (sh->pending >= t->cfg.max_pending ||
                   (sh->refuse && m->kind != MS_KIND_STOP))) {
        int rc = sh->pending >= t->cfg.max_pending ? MS_EOVERFLOW
                                                   : sh->refuse;
        if (rc == MS_EOVERFLOW)
            d->st.overflows++;
        ms__dispatch_msg_free(d, m);
        return rc;
    }
    sh->pending++;
    d->pending++;
    m->counted = 1;
    if (sh->tail)
        sh->tail->next = m;
    else
        sh->head = m;
    sh->tail = m;
    if (!sh->in_ready) {
        sh->in_ready = 1;
        sh->rnext = NULL;
        if (d->rs_tail)
            d->rs_tail->rnext = sh;
        else
            d->rs_head = sh;
        d->rs_tail = sh;
    }
    if (m->kind != MS_KIND_STOP && m->kind != KIND_SHARD_STOP)
        d->st.routed++;
    return 0;
}

int ms_dispatch_tell(struct ms_dispatch *d, const struct ms_dest *dst,
                     const char *json, size_t len)
{
    int rc = check(d, dst, len);
    if (rc < 0)
        return rc;
    struct msg *m = ms__dispatch_msg_new(d, MS_KIND_TELL, (uint32_t)dst->type,
                                         dst->hash,
                                         dst->shard, dst->id, dst->idlen, json,
                                         len);
    if (!m)
        return MS_ENOMEM;
    return ms__dispatch_enqueue(d, m, 0);
}

/* Registers a pending ask for waiter w with its deadline. */
static struct ask *open_ask(struct ms_dispatch *d, const struct ms_waiter *w,
                            uint64_t timeout_ms, uint64_t now_ms)
{
    struct ask *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->corr = ++d->next_corr;
    a->w = *w;
    a->wgen = w->cb ? 0 : d->gens[w->h];
    a->tm.kind = T_ASK;
    if (askmap_put(&d->asks, a) < 0 ||
        ms_timerq_push(&d->tq, &a->tm, deadline(now_ms, timeout_ms)) < 0) {
        askmap_del(&d->asks, a);
        free(a);
        return NULL;
    }
    return a;
}

static void drop_ask(struct ms_dispatch *d, struct ask *a)
{
    askmap_del(&d->asks, a);
    ms_timerq_remove(&d->tq, &a->tm);
    free(a);
}

static int check_waiter(struct ms_dispatch *d, const struct ms_waiter *w,
                        int type, const char *id, size_t idlen)
{
    if (w->cb)
        return 0;
    struct entity *self = eget(d, w->h);
    if (!self)
        return MS_EINVAL;
    if (id && self->type == (uint32_t)type && self->idlen == idlen &&
        memcmp(self->id, id, idlen) == 0)
        return MS_ESELF;
    return 0;
}

static int64_t ask_kind(struct ms_dispatch *d, int kind,
                        const struct ms_dest *dst, const char *json,
                        size_t len, uint64_t timeout_ms, uint64_t now_ms,
                        const struct ms_waiter *w);

int64_t ms_dispatch_ask(struct ms_dispatch *d, const struct ms_dest *dst,
                        const char *json, size_t len, uint64_t timeout_ms,
                        uint64_t now_ms, const struct ms_waiter *w)
{
    return ask_kind(d, MS_KIND_ASK, dst, json, len, timeout_ms, now_ms, w);
}

int64_t ms_dispatch_activate(struct ms_dispatch *d, const struct ms_dest *dst,
                             uint64_t timeout_ms, uint64_t now_ms,
                             const struct ms_waiter *w)
{
    return ask_kind(d, MS_KIND_ACTIVATE, dst, "{}", 2, timeout_ms, now_ms, w);
}

static int64_t ask_kind(struct ms_dispatch *d, int kind,
                        const struct ms_dest *dst, const char *json,
                        size_t len, uint64_t timeout_ms, uint64_t now_ms,
                        const struct ms_waiter *w)
{
    int rc = check(d, dst, len);
    if (rc < 0)
        return rc;
    if (timeout_ms == 0)
        return MS_EINVAL;
    if ((rc = check_waiter(d, w, dst->type, dst->id, dst->idlen)) < 0)
        return rc;
    struct msg *m = ms__dispatch_msg_new(d, kind, (uint32_t)dst->type,
                                         dst->hash,
                                         dst->shard, dst->id, dst->idlen, json,
                                         len);
    if (!m)
        return MS_ENOMEM;
    struct ask *a = open_ask(d, w, timeout_ms, now_ms);
    if (!a) {
        ms__dispatch_msg_free(d, m);
        return MS_ENOMEM;
    }
    m->corr = a->corr;
    rc = ms__dispatch_enqueue(d, m, 0);
    if (rc < 0) {
        drop_ask(d, a);
        return rc;
    }
    d->st.asks_started++;
    return (int64_t)a->corr;
}

int64_t ms_dispatch_ask_open(struct ms_dispatch *d, uint64_t timeout_ms,
                             uint64_t now_ms, const struct ms_waiter *w)
{
    if (d->closing)
        return MS_ECANCELED;
    if (timeout_ms == 0)
        return MS_EINVAL;
    int rc = check_waiter(d, w, 0, NULL, 0);
    if (rc < 0)
        return rc;
    struct ask *a = open_ask(d, w, timeout_ms, now_ms);
    if (!a)
        return MS_ENOMEM;
    d->st.asks_started++;
    return (int64_t)a->corr;
}

int ms_dispatch_ask_enqueue(struct ms_dispatch *d, int64_t corr, int kind,
                            const struct ms_dest *dst, const char *json,
                            size_t len)
{
    struct ask *a = askmap_find(&d->asks, (uint64_t)corr);
    if (!a)
        return 0; /* it ended meanwhile (timeout): nothing to deliver */
    int rc = check(d, dst, len);
    if (rc == 0 &&
        (rc = check_waiter(d, &a->w, dst->type, dst->id, dst->idlen)) == 0) {
        struct msg *m = ms__dispatch_msg_new(d, kind, (uint32_t)dst->type,
                                             dst->hash,
                                             dst->shard, dst->id, dst->idlen,
                                             json, len);
        if (!m)
            rc = MS_ENOMEM;
        else {
            m->corr = a->corr;
            rc = ms__dispatch_enqueue(d, m, 0);
        }
    }
    if (rc < 0) {
        char buf[256];
        size_t n = ms_error_json(buf, sizeof buf, rc, ms_strerror(rc));
        ms__dispatch_complete_ask(d, a, rc, buf, n);
        return rc;
    }
    return 1;
}

int ms_dispatch_ask_pending(struct ms_dispatch *d, int64_t corr)
{
    return askmap_find(&d->asks, (uint64_t)corr) != NULL;
}

void ms_dispatch_ask_set_peer(struct ms_dispatch *d, int64_t corr,
                              uint64_t peer)
{
    struct ask *a = askmap_find(&d->asks, (uint64_t)corr);
    if (a)
        a->peer = peer;
}

int ms_dispatch_ask_sent_to(struct ms_dispatch *d, int64_t corr,
                            uint64_t peer)
{
    struct ask *a = askmap_find(&d->asks, (uint64_t)corr);
    return a && peer && a->peer == peer;
}

int ms_dispatch_ask_answer(struct ms_dispatch *d, int64_t corr,
                           uint64_t peer, int err, const char *payload,
                           size_t len)
{
    struct ask *a = askmap_find(&d->asks, (uint64_t)corr);
    if (!a || !peer || a->peer != peer)
        return 0;
    if (err == MS_ETIMEDOUT)
        d->st.asks_timed_out++;
    ms__dispatch_complete_ask(d, a, err, payload, len);
    return 1;
}

int ms_dispatch_ask_complete(struct ms_dispatch *d, int64_t corr, int err,
                             const char *payload, size_t len)
{
    struct ask *a = askmap_find(&d->asks, (uint64_t)corr);
    if (!a)
        return 0;
    if (err == MS_ETIMEDOUT)
        d->st.asks_timed_out++;
    ms__dispatch_complete_ask(d, a, err, payload, len);
    return 1;
}

int ms_dispatch_stop(struct ms_dispatch *d, const struct ms_dest *dst)
{
    int rc = check(d, dst, 0);
    if (rc < 0)
        return rc;
    struct msg *m = ms__dispatch_msg_new(d, MS_KIND_STOP, (uint32_t)dst->type,
                                         dst->hash,
                                         dst->shard, dst->id, dst->idlen, "",
                                         0);
    if (!m)
        return MS_ENOMEM;
    return ms__dispatch_enqueue(d, m, 0);
}

/* ---- asks -------------------------------------------------------- */

void ms__dispatch_complete_ask(struct ms_dispatch *d, struct ask *a, int err,
                               const char *payload, size_t len)
{
    askmap_del(&d->asks, a);
    ms_timerq_remove(&d->tq, &a->tm);
    if (a->w.cb) {
        a->w.cb(a->w.data, err, payload, len);
#ifdef MS_SIM_SWITCHES
        if (ms_sim_break_reply_twice && a->w.cb == ms_sim_break_reply_twice)
            a->w.cb(a->w.data, err, payload, len);
#endif
    } else {
        struct resume *r = malloc(sizeof *r + len + 1);
        if (r) {
            r->next = NULL;
            r->corr = a->corr;
            r->h = a->w.h;
            r->gen = a->wgen;
            r->err = err;
            r->len = (uint32_t)len;
            memcpy(r->payload, payload, len);
            r->payload[len] = 0;
            if (d->res_tail)
                d->res_tail->next = r;
            else
                d->res_head = r;
            d->res_tail = r;
        }
        /* out of memory: the entity stays suspended until shutdown */
    }
    free(a);
}

void ms__dispatch_fail_ask(struct ms_dispatch *d, uint64_t corr, int err,
                           const char *message)
{
    struct ask *a = askmap_find(&d->asks, corr);
    if (!a)
        return;
    char buf[1024];
    size_t n = ms_error_json(buf, sizeof buf, err, message);
    ms__dispatch_complete_ask(d, a, err, buf, n);
}

int ms_dispatch_next_resume(struct ms_dispatch *d, struct ms_resume *out)
{
    free(d->res_cur);
    d->res_cur = NULL;
    while (d->res_head) {
        struct resume *r = d->res_head;
        d->res_head = r->next;
        if (!d->res_head)
            d->res_tail = NULL;
        struct entity *e = eget(d, r->h);
        if (!e || d->gens[r->h] != r->gen || !e->busy) {
            free(r); /* the waiter is gone (shutdown) */
            continue;
        }
        d->res_cur = r;
        out->corr = r->corr;
        out->h = r->h;
        out->err = r->err;
        out->payload = r->payload;
        out->len = r->len;
        return 1;
    }
    return 0;
}

/* ---- delivering ---------------------------------------------------- */

static void fill(struct ms_dispatch *d, struct entity *e, struct msg *m,
                 struct ms_delivery *out)
{
    uncount(d, m);
    e->busy = 1;
    e->replied = 0;
    mb_push_front(e, m); /* ecur() */
    out->h = e->h;
    out->type = e->type;
    out->shard = e->shard;
    out->kind = m->kind;
    out->init = 0;
    out->id = e->id;
    out->idlen = e->idlen;
    out->payload = m->kind == MS_KIND_STOP ? NULL : m->data + m->idlen + 1;
    out->len = m->len;
    if (m->kind != MS_KIND_STOP) {
        if (!e->active) {
            e->active = 1;
            e->last_ms = d->now_ms;
            list_add(d, e, d->now_ms);
            /* a new activation, a new generation: the record may be the
             * one a passivated activation had (mail came during its stop) */
            d->gens[e->h]++;
            out->init = 1;
            m->created = 1;
            d->st.activations++;
            /* e is busy now: the limit's pass cannot pick it */
            if (++d->st.active_entities > d->max_active)
                ms__dispatch_limit(d);
        } else {
            e->used = 1;
        }
        d->st.delivered++;
    }
    out->gen = d->gens[e->h];
}

/* A stop for an entity that is not active has nothing to do. */
static int skip_stop(struct ms_dispatch *d, struct entity *e, struct msg *m)
{
    if (m->kind != MS_KIND_STOP || e->active)
        return 0;
    if (m->reason == MS_STOP_LIMIT)
        d->limit_stops--;
    ms__dispatch_msg_free(d, m);
    if (!e->busy && !e->mb && !e->active && !e->in_ready)
        edestroy(d, e);
    return 1;
}

/* While shutting down, a message that would activate an entity is
 * dropped and counted (its ask, if any, was already cancelled). */
static int drop_closing(struct ms_dispatch *d, struct entity *e,
                        struct msg *m)
{
    if (!d->closing || e->active)
        return 0;
    d->st.shutdown_drops++;
    ms__dispatch_msg_free(d, m);
    if (!e->busy && !e->mb && !e->in_ready)
        edestroy(d, e);
    return 1;
}

/* Entity lookups miss the cache. Hide that behind the handlers with a
 * three-stage software pipeline over the dispatch order: while this
 * message is handled, the entity of the next one, the bucket of the one
 * after, and the message after that (whose type and hash name the bucket)
 * are loaded. Inlined by force: as a function of its own GCC finds it
 * free of side effects (prefetches do not count) and drops the call, which
 * it did until issue 16 found no prefetch in the binary. */
static inline __attribute__((always_inline)) void
prefetch_next(struct ms_dispatch *d)
{
    struct shard *s1 = d->rs_head;
    if (!s1)
        return;
    struct msg *n1 = s1->head;
    struct entity *e1 = d->ebuckets[mix(ekey(n1->type, n1->hash)) & d->emask];
    if (e1) {
        __builtin_prefetch(e1);
        __builtin_prefetch((char *)e1 + 64);
    }
    struct shard *s2 = s1->rnext;
    if (s2) {
        struct msg *n2 = s2->head;
        __builtin_prefetch(&d->ebuckets[mix(ekey(n2->type, n2->hash)) &
                                        d->emask]);
        struct shard *s3 = s2->rnext;
        if (s3)
            __builtin_prefetch(s3->head);
    }
}

int ms_dispatch_next(struct ms_dispatch *d, struct ms_delivery *out)
{
    for (;;) {
        if (d->rcount) {
            struct entity *e = d->slots[d->ready[d->rhead]];
            d->rhead = --d->rcount ? (d->rhead + 1) & (d->rcap - 1) : 0;
            e->in_ready = 0;
            if (!e->mb || e->busy)
                continue;
            struct msg *m = mb_pop(e);
            if (e->mb)
                ready_entity(d, e);
            if (skip_stop(d, e, m) || drop_closing(d, e, m))
                continue;
            fill(d, e, m, out);
            return 1;
        }
        struct shard *sh = d->rs_head;
        if (!sh)
            return 0;
        struct msg *m = sh->head;
        sh->head = m->next;
        if (!sh->head)
            sh->tail = NULL;
        /* round-robin: a shard with more work goes to the back */
        d->rs_head = sh->rnext;
        if (!d->rs_head)
            d->rs_tail = NULL;
        sh->in_ready = 0;
        if (sh->head) {
            sh->in_ready = 1;
            sh->rnext = NULL;
            if (d->rs_tail)
                d->rs_tail->rnext = sh;
            else
                d->rs_head = sh;
            d->rs_tail = sh;
        }
        m->next = NULL;
        if (sh->stopping == 2 || m->kind == KIND_SHARD_STOP) {
            ms__dispatch_shard_stop_msg(d, sh, m);
            continue;
        }
        prefetch_next(d);
        struct entity *e = efind(d, m->type, m->hash, m->data, m->idlen);
        if (m->kind == MS_KIND_STOP && !e) {
            ms__dispatch_msg_free(d, m);
            continue;
        }
        if (skip_stop(d, e, m))
            continue;
        if (!e) {
            e = ecreate(d, m->type, m->hash, m->shard, m->data, m->idlen);
            if (!e) {
                if (m->kind == MS_KIND_ASK || m->kind == MS_KIND_ACTIVATE)
                    ms__dispatch_fail_ask(d, m->corr, MS_ENOMEM,
                                          "out of memory");
                ms__dispatch_msg_free(d, m);
                continue;
            }
        }
        if (e->busy || e->mb) {
            mb_push(e, m);
            continue;
        }
        if (drop_closing(d, e, m))
            continue;
        fill(d, e, m, out);
        return 1;
    }
}


static void cancel_timers(struct ms_dispatch *d, struct entity *e)
{
    if (!e->ntimers)
        return;
    struct etlist *l = elmap_find(&d->etlists, e->h);
    while (l && l->first) {
        struct etimer *t = l->first;
        l->first = t->enext;
        ms_timerq_remove(&d->tq, &t->tm);
        tmap_del(&d->etimers, t);
        free(t);
    }
    if (l) {
        elmap_del(&d->etlists, l);
        free(l);
    }
    e->ntimers = 0;
}

int ms__dispatch_quiet_stop(struct ms_dispatch *d, struct entity *e)
{
    if (d->capparked < d->capslots) {
        uint32_t *p = realloc(d->parked, d->capslots * sizeof *p);
        if (!p)
            return -1;
        d->parked = p;
        d->capparked = d->capslots;
    }
    /* what ms_dispatch_done does after a handoff's STOP */
    list_del(d, e);
    e->active = 0;
    d->st.passivations++;
    d->st.quiet_passivations++;
    d->st.active_entities--;
    cancel_timers(d, e);
    edestroy_to(d, e, 1);
    return 0;
}

void ms_dispatch_set_quiet_stop(struct ms_dispatch *d, int type, int on)
{
    if (type >= 0 && type < d->ntypes)
        d->types[type].quiet_stop = on != 0;
}

uint32_t ms_dispatch_parked(const struct ms_dispatch *d, const uint32_t **h)
{
    *h = d->parked;
    return d->nparked;
}

void ms_dispatch_release_parked(struct ms_dispatch *d)
{
    /* freeh holds every free handle at most once: room for all */
    for (uint32_t i = 0; i < d->nparked; i++)
        d->freeh[d->nfree++] = d->parked[i];
    d->nparked = 0;
}

void ms_dispatch_done(struct ms_dispatch *d, uint32_t h, uint64_t now_ms)
{
    struct entity *e = eget(d, h);
    if (!e || !e->busy)
        return;
    struct msg *m = mb_pop(e); /* ecur() */
    e->busy = 0;
    if (m && m->kind == MS_KIND_ACTIVATE && !e->replied) {
        struct ask *a = askmap_find(&d->asks, m->corr);
        if (a) {
            const char *js = m->created ? "{\"created\":true}"
                                        : "{\"created\":false}";
            ms__dispatch_complete_ask(d, a, 0, js, strlen(js));
        }
    } else if (m && m->kind == MS_KIND_ASK && !e->replied) {
        ms__dispatch_fail_ask(d, m->corr, MS_ENOREPLY,
                              "the handler finished without replying");
    }
    d->now_ms = now_ms;
    e->last_ms = now_ms;
    if (m && m->kind == MS_KIND_STOP && e->active) {
        list_del(d, e);
        e->active = 0;
        d->st.passivations++;
        d->st.active_entities--;
        if (m->reason == MS_STOP_LIMIT) {
            d->limit_stops--;
            d->st.limit_passivations++;
        }
        cancel_timers(d, e);
        if (d->types[e->type].observed)
            d->observer(d->observer_data, (int)e->type, e->shard, e->id,
                        e->idlen, 0, m->reason);
    } else if (m && m->created && e->active &&
               d->types[e->type].observed) {
        d->observer(d->observer_data, (int)e->type, e->shard, e->id,
                    e->idlen, 1, 0);
    }
    ms__dispatch_msg_free(d, m);
    ms__dispatch_entity_stopping(d, e);
    if (e->stop_req) {
        e->stop_req = 0;
        if (e->active) {
            struct msg *s = ms__dispatch_msg_new(d, MS_KIND_STOP, e->type,
                                                 ehash(e),
                                                 e->shard, e->id, e->idlen,
                                                 "", 0);
            if (s) {
                s->reason = e->stop_explicit ? MS_STOP_EXPLICIT
                                             : MS_STOP_FAILURE;
                mb_push_front(e, s);
            }
        }
        e->stop_explicit = 0;
    }
    if (e->mb)
        ready_entity(d, e);
    else if (!e->active && !e->in_ready)
        edestroy(d, e);
    if (d->limit_short)
        ms__dispatch_limit(d); /* above the limit: e may be idle now */
}

int ms_dispatch_reply(struct ms_dispatch *d, uint32_t h, const char *json,
                      size_t len, uint64_t now_ms)
{
    struct entity *e = eget(d, h);
    if (!e || !ecur(e) || ecur(e)->kind != MS_KIND_ASK)
        return 1;
    if (e->replied)
        return MS_EINVAL;
    if (len > d->max_message)
        return MS_E2BIG;
    e->replied = 1;
    struct ask *a = askmap_find(&d->asks, ecur(e)->corr);
    if (!a)
        return 0;
    if (now_ms >= a->tm.due_ms) {
        /* the deadline passed while the handler ran (its timer could not
         * fire meanwhile): the asker has stopped waiting */
        d->st.asks_timed_out++;
        char buf[128];
        size_t n = ms_error_json(buf, sizeof buf, MS_ETIMEDOUT,
                                 "ask timed out");
        ms__dispatch_complete_ask(d, a, MS_ETIMEDOUT, buf, n);
        return 0;
    }
    ms__dispatch_complete_ask(d, a, 0, json, len);
    return 0;
}

int ms_dispatch_reply_error(struct ms_dispatch *d, uint32_t h, int err,
                            const char *message)
{
    struct entity *e = eget(d, h);
    if (!e || !ecur(e) || (ecur(e)->kind != MS_KIND_ASK &&
                          ecur(e)->kind != MS_KIND_ACTIVATE))
        return 1;
    if (e->replied)
        return MS_EINVAL;
    e->replied = 1;
    ms__dispatch_fail_ask(d, ecur(e)->corr, err, message);
    return 0;
}

void ms_dispatch_fail(struct ms_dispatch *d, uint32_t h, const char *message,
                      int init_failed)
{
    struct entity *e = eget(d, h);
    d->st.handler_errors++;
    if (!e)
        return;
    if (ecur(e) && (ecur(e)->kind == MS_KIND_ASK ||
                   ecur(e)->kind == MS_KIND_ACTIVATE) && !e->replied) {
        e->replied = 1;
        ms__dispatch_fail_ask(d, ecur(e)->corr, MS_EHANDLER, message);
    }
    if (init_failed && e->active) {
        list_del(d, e);
        e->active = 0;
        d->st.active_entities--;
        d->st.activations--;
        cancel_timers(d, e);
    } else if (d->types[e->type].cfg.on_error_stop) {
        e->stop_req = 1;
    }
}

void ms_dispatch_stop_self(struct ms_dispatch *d, uint32_t h)
{
    struct entity *e = eget(d, h);
    if (e) {
        e->stop_req = 1;
        e->stop_explicit = 1; /* a failure after it does not make it one */
    }
}

void ms_dispatch_set_observer(struct ms_dispatch *d, int type,
                              ms_dispatch_observer fn, void *data)
{
    if (type < 0 || type >= d->ntypes)
        return;
    d->observer = fn;
    d->observer_data = data;
    d->types[type].observed = fn != NULL;
}

void ms_dispatch_shard_refuse(struct ms_dispatch *d, int type,
                              uint32_t shard, int err)
{
    if (type < 0 || type >= d->ntypes ||
        shard >= d->types[type].cfg.shard_count)
        return;
    d->types[type].shards[shard].refuse = (int16_t)err;
}
