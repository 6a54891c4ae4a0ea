/*
 * dispatch.c -- shard FIFOs, entity table, mailboxes, asks and timers.
 *
 * Memory: one allocation per accepted message (header, id and payload
 * together), one per entity (struct and id together), one per pending ask
 * or entity timer. Entities are referred to from asks and timers by handle
 * and generation, never by pointer, so a passivated entity cannot be
 * reached through a stale reference.
 */
#include "dispatch.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timerq.h"

#define MSG_SMALL 256      /* bytes of a recycled message block */
#define KIND_SHARD_STOP 9  /* internal: a shard's stop marker */
#define MSG_FREE_MAX 4096  /* recycled blocks kept (1 MiB) */

struct msg {
    struct msg *next;
    uint64_t corr;      /* ask id, 0 for a tell */
    uint64_t hash;      /* ms_fnv1a64 of the id */
    uint32_t type;
    uint32_t idlen;
    uint32_t len;
    uint32_t size;      /* bytes allocated */
    uint32_t shard;     /* of its type */
    uint8_t kind;
    uint8_t counted;    /* accepted by enqueue: counts in its shard's pending */
    uint8_t created;    /* ACTIVATE: its delivery activated the entity */
    char data[];        /* id, NUL, payload, NUL */
};

/* Delivery fields first, then the fields a lookup reads, right before the
 * id they lead to: a lookup of a short id touches one or two cache lines,
 * which prefetch_next() loads ahead of time. */
struct entity {
    struct msg *mb_head, *mb_tail;  /* mailbox */
    struct msg *cur;                /* being handled */
    struct entity *lprev, *lnext;   /* active list of its type */
    struct entity *sprev, *snext;   /* entities of its shard */
    struct entity *rnext;           /* ready list */
    struct etimer *timers;          /* pending ctx:after timers */
    uint64_t last_ms;               /* end of its last message */
    uint64_t listed_ms;             /* when it joined the active list */
    uint32_t ntimers;
    unsigned active : 1, busy : 1, stop_req : 1, in_ready : 1,
        in_list : 1, replied : 1;
    /* lookup */
    struct entity *hnext;           /* hash chain */
    uint64_t hash;
    uint32_t type;
    uint32_t idlen;
    uint32_t h;
    uint32_t shard;
    char id[];
};

struct shard {
    struct msg *head, *tail;
    struct entity *ents;  /* its entities (a shard stop walks them) */
    struct shard *rnext;
    uint32_t pending;   /* accepted, not yet delivered: in this FIFO or in
                           the mailbox of one of its entities */
    uint32_t nent;      /* entities of this shard (active or waiting) */
    uint32_t stop_epoch;/* names the latest stop request */
    uint8_t in_ready;
    uint8_t stopping;   /* 1: stop marker queued; 2: it passed */
};

/* A shard whose stop finished. */
struct stopped {
    int type;
    uint32_t shard;
};

struct type {
    struct ms_dispatch_type cfg;
    struct shard *shards;
    /* active entities in the order they were (re)listed: the idle sweep
     * looks at the head only (see ms_dispatch_expire) */
    struct entity *list_head, *list_tail;
    int unavailable;
};

enum { T_ASK = 1, T_ENTITY = 2 };

struct ask {
    struct ask *hnext;
    struct ms_timer tm;
    uint64_t corr;
    struct ms_waiter w;
    uint32_t wgen;      /* generation of w.h */
    uint64_t peer;      /* the node it was last sent to, 0: none */
};

struct etimer {
    struct etimer *hnext;          /* id map chain */
    struct etimer *eprev, *enext;  /* entity's list */
    struct ms_timer tm;
    uint64_t id;
    uint32_t h;
    uint32_t len;
    char payload[];
};

struct resume {
    struct resume *next;
    uint64_t corr;
    uint32_t h, gen;
    int err;
    uint32_t len;
    char payload[];
};

/* A chained map from uint64 keys; the chain link is the first field. */
struct idmap {
    void **b;
    size_t mask, n;
};

struct ms_dispatch {
    struct type *types;
    int ntypes;
    ms_partition_fn partition; /* types with custom_partition */
    void *partition_data;
    size_t max_message;

    struct entity **ebuckets;
    size_t emask, nentities;

    struct entity **slots;   /* handle -> entity; [0] unused */
    uint32_t *gens;
    uint32_t nslots, capslots;
    uint32_t *freeh;
    uint32_t nfree;

    struct shard *rs_head, *rs_tail;   /* shards with queued messages */
    struct entity *re_head, *re_tail;  /* entities with runnable mailbox */
    struct resume *res_head, *res_tail, *res_cur;

    struct idmap asks;       /* corr -> ask */
    struct idmap etimers;    /* id -> etimer */
    uint64_t next_corr, next_timer;
    struct ms_timerq tq;

    uint64_t pending;
    uint64_t now_ms;         /* latest time the caller told us */
    int closing;             /* shutdown began: accept nothing new */
    struct stopped *stopped; /* shards whose stop finished, not taken */
    size_t nstopped, capstopped;
    struct msg *free_msgs;   /* recycled small messages */
    uint32_t nfree_msgs;
    struct ms_stats st;
};

/* ---- small maps ---------------------------------------------------- */

static uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

/* Keys differ in position per struct, so the maps are typed thinly. */
#define MAP_FUNCS(NAME, T, KEY)                                              \
    static int NAME##_rehash(struct idmap *m)                                \
    {                                                                        \
        size_t cap = m->b ? (m->mask + 1) * 2 : 64;                          \
        T **nb = calloc(cap, sizeof *nb);                                    \
        if (!nb)                                                             \
            return MS_ENOMEM;                                                \
        for (size_t i = 0; m->b && i <= m->mask; i++) {                      \
            T *x = m->b[i];                                                  \
            while (x) {                                                      \
                T *nx = x->hnext;                                            \
                size_t j = mix(x->KEY) & (cap - 1);                          \
                x->hnext = nb[j];                                            \
                nb[j] = x;                                                   \
                x = nx;                                                      \
            }                                                                \
        }                                                                    \
        free(m->b);                                                          \
        m->b = (void **)nb;                                                  \
        m->mask = cap - 1;                                                   \
        return 0;                                                            \
    }                                                                        \
    static int NAME##_put(struct idmap *m, T *x)                             \
    {                                                                        \
        if ((!m->b || m->n >= m->mask) && NAME##_rehash(m) < 0)              \
            return MS_ENOMEM;                                                \
        size_t j = mix(x->KEY) & m->mask;                                    \
        x->hnext = m->b[j];                                                  \
        m->b[j] = x;                                                         \
        m->n++;                                                              \
        return 0;                                                            \
    }                                                                        \
    static T *NAME##_find(struct idmap *m, uint64_t key)                     \
    {                                                                        \
        if (!m->b)                                                           \
            return NULL;                                                     \
        for (T *x = m->b[mix(key) & m->mask]; x; x = x->hnext)               \
            if (x->KEY == key)                                               \
                return x;                                                    \
        return NULL;                                                         \
    }                                                                        \
    static void NAME##_del(struct idmap *m, T *x)                            \
    {                                                                        \
        T **pp = (T **)&m->b[mix(x->KEY) & m->mask];                         \
        while (*pp && *pp != x)                                              \
            pp = &(*pp)->hnext;                                              \
        if (*pp) {                                                           \
            *pp = x->hnext;                                                  \
            m->n--;                                                          \
        }                                                                    \
    }

MAP_FUNCS(askmap, struct ask, corr)
MAP_FUNCS(tmap, struct etimer, id)

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
    return d;
fail:
    ms_dispatch_free(d);
    return NULL;
}

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
static void msg_free(struct ms_dispatch *d, struct msg *m)
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

static void free_msgs(struct ms_dispatch *d, struct msg *m)
{
    while (m) {
        struct msg *n = m->next;
        msg_free(d, m);
        m = n;
    }
}

static void complete_ask(struct ms_dispatch *d, struct ask *a, int err,
                         const char *payload, size_t len);
static void shard_stop_msg(struct ms_dispatch *d, struct shard *sh,
                           struct msg *m);

void ms_dispatch_free(struct ms_dispatch *d)
{
    if (!d)
        return;
    ms_dispatch_shutdown(d);
    for (uint32_t h = 1; h < d->nslots; h++) {
        struct entity *e = d->slots[h];
        if (!e)
            continue;
        free_msgs(d, e->mb_head);
        msg_free(d, e->cur);
        while (e->timers) {
            struct etimer *t = e->timers;
            e->timers = t->enext;
            free(t);
        }
        free(e);
    }
    for (int i = 0; d->types && i < d->ntypes; i++) {
        for (uint32_t s = 0; d->types[i].shards &&
                             s < d->types[i].cfg.shard_count; s++)
            free_msgs(d, d->types[i].shards[s].head);
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
    free(d->asks.b);
    free(d->etimers.b);
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
        if (e->hash == hash && e->type == type && e->idlen == idlen &&
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
            size_t j = mix(ekey(e->type, e->hash)) & (cap - 1);
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
            for (uint32_t i = d->capslots; i < cap; i++)
                d->gens[i] = 0;
            d->capslots = cap;
        }
        h = d->nslots++;
    }
    struct entity *e = malloc(sizeof *e + idlen + 1);
    if (!e) {
        d->freeh[d->nfree++] = h;
        return NULL;
    }
    memset(e, 0, sizeof *e);
    e->h = h;
    e->type = type;
    e->hash = hash;
    e->shard = shard;
    e->idlen = (uint32_t)idlen;
    memcpy(e->id, id, idlen);
    d->slots[h] = e;
    d->gens[h]++;
    struct shard *sh = &d->types[type].shards[e->shard];
    sh->nent++;
    e->snext = sh->ents;
    if (sh->ents)
        sh->ents->sprev = e;
    sh->ents = e;
    size_t j = mix(ekey(type, hash)) & d->emask;
    e->hnext = d->ebuckets[j];
    d->ebuckets[j] = e;
    if (++d->nentities > d->emask)
        egrow(d);
    return e;
}

static void list_del(struct ms_dispatch *d, struct entity *e);

static void shard_check_stopped(struct ms_dispatch *d, uint32_t type,
                                uint32_t shard);

static void edestroy(struct ms_dispatch *d, struct entity *e)
{
    list_del(d, e);
    struct shard *sh = &d->types[e->type].shards[e->shard];
    sh->nent--;
    if (e->sprev)
        e->sprev->snext = e->snext;
    else
        sh->ents = e->snext;
    if (e->snext)
        e->snext->sprev = e->sprev;
    shard_check_stopped(d, e->type, e->shard);
    struct entity **pp = &d->ebuckets[mix(ekey(e->type, e->hash)) & d->emask];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    d->nentities--;
    d->slots[e->h] = NULL;
    d->freeh[d->nfree++] = e->h;
    free(e);
}

static struct entity *eget(struct ms_dispatch *d, uint32_t h)
{
    return h > 0 && h < d->nslots ? d->slots[h] : NULL;
}

static void list_del(struct ms_dispatch *d, struct entity *e)
{
    if (!e->in_list)
        return;
    struct type *t = &d->types[e->type];
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        t->list_head = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    else
        t->list_tail = e->lprev;
    e->lprev = e->lnext = NULL;
    e->in_list = 0;
}

static void list_add(struct ms_dispatch *d, struct entity *e,
                     uint64_t now_ms)
{
    struct type *t = &d->types[e->type];
    e->listed_ms = now_ms;
    e->lprev = t->list_tail;
    e->lnext = NULL;
    if (t->list_tail)
        t->list_tail->lnext = e;
    else
        t->list_head = e;
    t->list_tail = e;
    e->in_list = 1;
}

static void ready_entity(struct ms_dispatch *d, struct entity *e)
{
    if (e->in_ready)
        return;
    e->in_ready = 1;
    e->rnext = NULL;
    if (d->re_tail)
        d->re_tail->rnext = e;
    else
        d->re_head = e;
    d->re_tail = e;
}

static void mb_push(struct entity *e, struct msg *m)
{
    m->next = NULL;
    if (e->mb_tail)
        e->mb_tail->next = m;
    else
        e->mb_head = m;
    e->mb_tail = m;
}

static void mb_push_front(struct entity *e, struct msg *m)
{
    m->next = e->mb_head;
    e->mb_head = m;
    if (!e->mb_tail)
        e->mb_tail = m;
}

/* ---- accepting ----------------------------------------------------- */

static uint64_t deadline(uint64_t now_ms, uint64_t in_ms)
{
    return in_ms > UINT64_MAX - now_ms ? UINT64_MAX : now_ms + in_ms;
}

/* A message of entity `id` of `type`; `hash` (ms_fnv1a64 of the id) and
 * `shard` as ms_dispatch_shard_of gives them, or the entity's own. */
static struct msg *msg_new(struct ms_dispatch *d, int kind, uint32_t type,
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
static int enqueue(struct ms_dispatch *d, struct msg *m, int force)
{
    struct type *t = &d->types[m->type];
    struct shard *sh = &t->shards[m->shard];
    if (!force && sh->pending >= t->cfg.max_pending) {
        d->st.overflows++;
        msg_free(d, m);
        return MS_EOVERFLOW;
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
    struct msg *m = msg_new(d, MS_KIND_TELL, (uint32_t)dst->type, dst->hash,
                            dst->shard, dst->id, dst->idlen, json, len);
    if (!m)
        return MS_ENOMEM;
    return enqueue(d, m, 0);
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
    struct msg *m = msg_new(d, kind, (uint32_t)dst->type, dst->hash,
                            dst->shard, dst->id, dst->idlen, json, len);
    if (!m)
        return MS_ENOMEM;
    struct ask *a = open_ask(d, w, timeout_ms, now_ms);
    if (!a) {
        msg_free(d, m);
        return MS_ENOMEM;
    }
    m->corr = a->corr;
    rc = enqueue(d, m, 0);
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
        struct msg *m = msg_new(d, kind, (uint32_t)dst->type, dst->hash,
                                dst->shard, dst->id, dst->idlen, json, len);
        if (!m)
            rc = MS_ENOMEM;
        else {
            m->corr = a->corr;
            rc = enqueue(d, m, 0);
        }
    }
    if (rc < 0) {
        char buf[256];
        size_t n = ms_error_json(buf, sizeof buf, rc, ms_strerror(rc));
        complete_ask(d, a, rc, buf, n);
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
    complete_ask(d, a, err, payload, len);
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
    complete_ask(d, a, err, payload, len);
    return 1;
}

int ms_dispatch_stop(struct ms_dispatch *d, const struct ms_dest *dst)
{
    int rc = check(d, dst, 0);
    if (rc < 0)
        return rc;
    struct msg *m = msg_new(d, MS_KIND_STOP, (uint32_t)dst->type, dst->hash,
                            dst->shard, dst->id, dst->idlen, "", 0);
    if (!m)
        return MS_ENOMEM;
    return enqueue(d, m, 0);
}

/* ---- asks -------------------------------------------------------- */

static void complete_ask(struct ms_dispatch *d, struct ask *a, int err,
                         const char *payload, size_t len)
{
    askmap_del(&d->asks, a);
    ms_timerq_remove(&d->tq, &a->tm);
    if (a->w.cb) {
        a->w.cb(a->w.data, err, payload, len);
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

static void fail_ask(struct ms_dispatch *d, uint64_t corr, int err,
                     const char *message)
{
    struct ask *a = askmap_find(&d->asks, corr);
    if (!a)
        return;
    char buf[1024];
    size_t n = ms_error_json(buf, sizeof buf, err, message);
    complete_ask(d, a, err, buf, n);
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
    e->cur = m;
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
            out->init = 1;
            m->created = 1;
            d->st.activations++;
            d->st.active_entities++;
        }
        d->st.delivered++;
    }
}

/* A stop for an entity that is not active has nothing to do. */
static int skip_stop(struct ms_dispatch *d, struct entity *e, struct msg *m)
{
    if (m->kind != MS_KIND_STOP || e->active)
        return 0;
    msg_free(d, m);
    if (!e->busy && !e->mb_head && !e->active && !e->in_ready)
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
    msg_free(d, m);
    if (!e->busy && !e->mb_head && !e->in_ready)
        edestroy(d, e);
    return 1;
}

/* Entity lookups miss the cache. Hide that behind the handlers with a
 * two-stage software pipeline over the dispatch order: while this message
 * is handled, the entity of the next one and the bucket of the one after
 * are loaded. */
static void prefetch_next(struct ms_dispatch *d)
{
    struct shard *s1 = d->rs_head;
    if (!s1)
        return;
    struct msg *n1 = s1->head;
    struct entity *e1 = d->ebuckets[mix(ekey(n1->type, n1->hash)) & d->emask];
    if (e1) {
        __builtin_prefetch(&e1->hnext);
        __builtin_prefetch((char *)&e1->hnext + 64);
        __builtin_prefetch(e1);
    }
    struct shard *s2 = s1->rnext ? s1->rnext : NULL;
    if (s2) {
        struct msg *n2 = s2->head;
        __builtin_prefetch(&d->ebuckets[mix(ekey(n2->type, n2->hash)) &
                                        d->emask]);
    }
}

int ms_dispatch_next(struct ms_dispatch *d, struct ms_delivery *out)
{
    for (;;) {
        struct entity *e = d->re_head;
        if (e) {
            d->re_head = e->rnext;
            if (!d->re_head)
                d->re_tail = NULL;
            e->in_ready = 0;
            struct msg *m = e->mb_head;
            if (!m || e->busy)
                continue;
            e->mb_head = m->next;
            if (!e->mb_head)
                e->mb_tail = NULL;
            if (e->mb_head)
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
            shard_stop_msg(d, sh, m);
            continue;
        }
        prefetch_next(d);
        e = efind(d, m->type, m->hash, m->data, m->idlen);
        if (m->kind == MS_KIND_STOP && !e) {
            msg_free(d, m);
            continue;
        }
        if (skip_stop(d, e, m))
            continue;
        if (!e) {
            e = ecreate(d, m->type, m->hash, m->shard, m->data, m->idlen);
            if (!e) {
                if (m->kind == MS_KIND_ASK || m->kind == MS_KIND_ACTIVATE)
                    fail_ask(d, m->corr, MS_ENOMEM, "out of memory");
                msg_free(d, m);
                continue;
            }
        }
        if (e->busy || e->mb_head) {
            mb_push(e, m);
            continue;
        }
        if (drop_closing(d, e, m))
            continue;
        fill(d, e, m, out);
        return 1;
    }
}

static void entity_stopping(struct ms_dispatch *d, struct entity *e);

static void cancel_timers(struct ms_dispatch *d, struct entity *e)
{
    while (e->timers) {
        struct etimer *t = e->timers;
        e->timers = t->enext;
        ms_timerq_remove(&d->tq, &t->tm);
        tmap_del(&d->etimers, t);
        free(t);
    }
    e->ntimers = 0;
}

void ms_dispatch_done(struct ms_dispatch *d, uint32_t h, uint64_t now_ms)
{
    struct entity *e = eget(d, h);
    if (!e || !e->busy)
        return;
    struct msg *m = e->cur;
    e->cur = NULL;
    e->busy = 0;
    if (m && m->kind == MS_KIND_ACTIVATE && !e->replied) {
        struct ask *a = askmap_find(&d->asks, m->corr);
        if (a) {
            const char *js = m->created ? "{\"created\":true}"
                                        : "{\"created\":false}";
            complete_ask(d, a, 0, js, strlen(js));
        }
    } else if (m && m->kind == MS_KIND_ASK && !e->replied) {
        fail_ask(d, m->corr, MS_ENOREPLY,
                 "the handler finished without replying");
    }
    d->now_ms = now_ms;
    e->last_ms = now_ms;
    if (m && m->kind == MS_KIND_STOP && e->active) {
        list_del(d, e);
        e->active = 0;
        d->st.passivations++;
        d->st.active_entities--;
        cancel_timers(d, e);
    }
    msg_free(d, m);
    entity_stopping(d, e);
    if (e->stop_req) {
        e->stop_req = 0;
        if (e->active) {
            struct msg *s = msg_new(d, MS_KIND_STOP, e->type, e->hash, e->shard, e->id,
                                    e->idlen,
                                    "", 0);
            if (s)
                mb_push_front(e, s);
        }
    }
    if (e->mb_head)
        ready_entity(d, e);
    else if (!e->active && !e->in_ready)
        edestroy(d, e);
}

int ms_dispatch_reply(struct ms_dispatch *d, uint32_t h, const char *json,
                      size_t len, uint64_t now_ms)
{
    struct entity *e = eget(d, h);
    if (!e || !e->cur || e->cur->kind != MS_KIND_ASK)
        return 1;
    if (e->replied)
        return MS_EINVAL;
    if (len > d->max_message)
        return MS_E2BIG;
    e->replied = 1;
    struct ask *a = askmap_find(&d->asks, e->cur->corr);
    if (!a)
        return 0;
    if (now_ms >= a->tm.due_ms) {
        /* the deadline passed while the handler ran (its timer could not
         * fire meanwhile): the asker has stopped waiting */
        d->st.asks_timed_out++;
        char buf[128];
        size_t n = ms_error_json(buf, sizeof buf, MS_ETIMEDOUT,
                                 "ask timed out");
        complete_ask(d, a, MS_ETIMEDOUT, buf, n);
        return 0;
    }
    complete_ask(d, a, 0, json, len);
    return 0;
}

void ms_dispatch_fail(struct ms_dispatch *d, uint32_t h, const char *message,
                      int init_failed)
{
    struct entity *e = eget(d, h);
    d->st.handler_errors++;
    if (!e)
        return;
    if (e->cur && (e->cur->kind == MS_KIND_ASK ||
                   e->cur->kind == MS_KIND_ACTIVATE) && !e->replied) {
        e->replied = 1;
        fail_ask(d, e->cur->corr, MS_EHANDLER, message);
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
    if (e)
        e->stop_req = 1;
}

/* ---- timers -------------------------------------------------------- */

int64_t ms_dispatch_after(struct ms_dispatch *d, uint32_t h,
                          uint64_t delay_ms, const char *json, size_t len,
                          uint64_t now_ms)
{
    struct entity *e = eget(d, h);
    if (!e)
        return MS_EINVAL;
    if (len > d->max_message)
        return MS_E2BIG;
    if (e->ntimers >= MS_MAX_TIMERS)
        return MS_EOVERFLOW;
    struct etimer *t = malloc(sizeof *t + len + 1);
    if (!t)
        return MS_ENOMEM;
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
        return MS_ENOMEM;
    }
    t->enext = e->timers;
    if (e->timers)
        e->timers->eprev = t;
    e->timers = t;
    e->ntimers++;
    return (int64_t)t->id;
}

static void unlink_timer(struct ms_dispatch *d, struct etimer *t)
{
    struct entity *e = eget(d, t->h);
    if (e)
        e->ntimers--;
    if (t->eprev)
        t->eprev->enext = t->enext;
    else if (e)
        e->timers = t->enext;
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
        while (idle && (e = t->list_head) && e->listed_ms + idle <= now_ms) {
            list_del(d, e);
            /* pending ctx:after timers keep an entity: passivating it
             * would cancel them */
            if (e->busy || e->mb_head || e->in_ready || e->timers ||
                now_ms - e->last_ms < idle) {
                list_add(d, e, now_ms);
                continue;
            }
            struct msg *s = msg_new(d, MS_KIND_STOP, e->type, e->hash, e->shard, e->id,
                                    e->idlen,
                                    "", 0);
            if (!s) {
                list_add(d, e, now_ms);
                break;
            }
            mb_push(e, s);
            ready_entity(d, e);
        }
    }

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
            complete_ask(d, a, MS_ETIMEDOUT, buf, n);
        } else {
            struct etimer *t = ms_container_of(tm, struct etimer, tm);
            struct entity *e = eget(d, t->h);
            unlink_timer(d, t);
            if (e) {
                struct msg *m = msg_new(d, MS_KIND_TELL, e->type, e->hash, e->shard, e->id,
                                        e->idlen, t->payload, t->len);
                if (m && enqueue(d, m, 1) == 0)
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
        uint64_t due = t->list_head->listed_ms + t->cfg.idle_timeout_ms;
        int64_t in = due > now_ms ? (int64_t)(due - now_ms) : 0;
        if (best < 0 || in < best)
            best = in;
    }
    return best;
}

/* ---- shard stop (handoff) -------------------------------------------- */

static void shard_check_stopped(struct ms_dispatch *d, uint32_t type,
                                uint32_t shard)
{
    struct shard *sh = &d->types[type].shards[shard];
    if (sh->stopping != 2 || sh->nent || sh->head)
        return;
    sh->stopping = 0;
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
static void entity_stopping(struct ms_dispatch *d, struct entity *e)
{
    struct shard *sh = &d->types[e->type].shards[e->shard];
    if (sh->stopping != 2 || !e->active || e->busy || e->mb_head)
        return;
    struct msg *s = msg_new(d, MS_KIND_STOP, e->type, e->hash, e->shard, e->id,
                                    e->idlen, "", 0);
    if (!s)
        return;
    mb_push(e, s);
    ready_entity(d, e);
}

/* A message popped from a stopping shard's FIFO: the stop marker, or
 * something that came after it (a ctx:after timer firing, or a request
 * that should have gone elsewhere), which is failed and counted. */
static void shard_stop_msg(struct ms_dispatch *d, struct shard *sh,
                           struct msg *m)
{
    uint32_t type = m->type;
    uint32_t shard = (uint32_t)(sh - d->types[type].shards);
    if (m->kind == KIND_SHARD_STOP) {
        int mine = sh->stopping == 1 && m->corr == sh->stop_epoch;
        msg_free(d, m);
        if (!mine)
            return; /* a stop that was called off */
        sh->stopping = 2;
        for (struct entity *e = sh->ents; e; e = e->snext)
            entity_stopping(d, e);
        shard_check_stopped(d, type, shard);
        return;
    }
    d->st.handoff_drops++;
    if (m->kind == MS_KIND_ASK || m->kind == MS_KIND_ACTIVATE)
        fail_ask(d, m->corr, MS_ENOOWNER, "the entity's shard is moving to "
                 "another node");
    msg_free(d, m);
    shard_check_stopped(d, type, shard);
}

int ms_dispatch_shard_stop(struct ms_dispatch *d, int type, uint32_t shard)
{
    if (type < 0 || type >= d->ntypes ||
        shard >= d->types[type].cfg.shard_count)
        return MS_EINVAL;
    struct shard *sh = &d->types[type].shards[shard];
    if (sh->stopping)
        return 0;
    struct msg *m = msg_new(d, KIND_SHARD_STOP, (uint32_t)type, 0, shard, "", 0,
                            "", 0);
    if (!m)
        return MS_ENOMEM;
    m->corr = ++sh->stop_epoch;
    sh->stopping = 1;
    return enqueue(d, m, 1);
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
    if (!d->nstopped)
        return 0;
    *type = d->stopped[0].type;
    *shard = d->stopped[0].shard;
    memmove(d->stopped, d->stopped + 1, --d->nstopped * sizeof *d->stopped);
    return 1;
}

int ms_dispatch_has_work(struct ms_dispatch *d)
{
    return d->re_head || d->rs_head || d->res_head;
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
            complete_ask(d, a, MS_ECANCELED, buf, n);
        }
    }
    for (int i = 0; i < d->ntypes; i++) {
        struct type *t = &d->types[i];
        struct entity *e;
        while ((e = t->list_head)) {
            list_del(d, e);
            struct msg *s = msg_new(d, MS_KIND_STOP, e->type, e->hash, e->shard, e->id,
                                    e->idlen,
                                    "", 0);
            if (!s)
                break;
            /* after the messages it already accepted; a busy entity is
             * made ready when its current message is done */
            mb_push(e, s);
            if (!e->busy)
                ready_entity(d, e);
        }
    }
    return d->st.active_entities;
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
