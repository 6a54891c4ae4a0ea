/*
 * dispatch_impl.h -- the dispatcher's state, shared by dispatch.c
 * (accepting, asks, delivering) and dispatch_admin.c (life cycle, timers,
 * shard stops, shutdown, figures). Not a public header.
 */
#ifndef MS_CORE_DISPATCH_IMPL_H
#define MS_CORE_DISPATCH_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dispatch.h"
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
    uint8_t reason;     /* STOP: why (enum ms_stop_reason) */
    char data[];        /* id, NUL, payload, NUL */
};

/* An entity's record, kept small because an idle entity is mostly this:
 * 56 bytes before its id, so that with an id of up to 15 bytes it takes
 * one 80-byte malloc chunk (it took 176 with pointers for links and a
 * stored hash, then 96 with 76 bytes before the id). Links to other
 * entities are handles (0: none; d->slots maps them), the mailbox is a
 * ring reached through its last message that also holds the message
 * being handled, the id's hash is computed again where it is needed
 * (ehash: a grow of the table, a destroy, a stop message), and the lookup
 * compares ids. What few entities have at a time is kept beside the
 * record: pending ctx:after timers in d->etlists (keyed by handle;
 * ntimers says whether there are any), the ready list in the ring
 * d->ready. The hash chain stays a pointer: a handle there would cost
 * the lookup a load from d->slots at each step. */
struct entity {
    struct entity *hnext;           /* hash chain */
    struct msg *mb;                 /* mailbox: its last message, whose
                                       next is the first; NULL: empty.
                                       While busy, the first is the one
                                       being handled (ecur) */
    uint64_t last_ms;               /* end of its last message */
    uint32_t listed;                /* low 32 bits of the time (ms) it
                                       joined the active list */
    uint32_t lprev, lnext;          /* active list of its type */
    uint32_t sprev, snext;          /* entities of its shard */
    uint32_t h;
    uint16_t type;                  /* < MS_DISPATCH_MAX_TYPES */
    uint16_t shard;                 /* shard counts are <= 65536 */
    uint32_t idlen : 10,            /* <= MS_MAX_ID (512) */
        ntimers : 11,               /* <= MS_MAX_TIMERS (1024) */
        active : 1, busy : 1, stop_req : 1, in_ready : 1, in_list : 1,
        replied : 1, stop_explicit : 1,
        used : 1;                   /* handled a message since it was
                                       (re)listed: the active-entity
                                       limit gives it a second chance */
    char id[];
};

/* An entity's record is at most this many bytes before its id. */
#define ENTITY_HEAD offsetof(struct entity, id)

/* A glibc malloc chunk is the request plus 8 bytes, rounded up to 16 (at
 * least 32): a record for an id like "c-123456" (8 bytes and its NUL)
 * must take at most 72 bytes to get an 80-byte chunk, 60 + 9 at most;
 * 76 + 9 took 96 (16 MB more at a million entities). */
_Static_assert(ENTITY_HEAD <= 60,
               "an entity with an 8-byte id must fit an 80-byte malloc chunk");

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
    int16_t refuse;     /* != 0: new messages are refused with this code
                           (ms_dispatch_shard_refuse) */
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
    int observed;       /* activations and passivations are reported */
    int quiet_stop;     /* a handoff may passivate its idle entities
                           without a delivery (ms_dispatch_set_quiet_stop) */
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

/* The pending timers of one entity (an entry of d->etlists while it has
 * any): a list through etimer's eprev/enext. */
struct etlist {
    struct etlist *hnext;          /* handle map chain */
    uint64_t h;                    /* the entity's handle */
    struct etimer *first;
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
    ms_dispatch_observer observer; /* types with `observed` */
    void *observer_data;
    size_t max_message;

    struct entity **ebuckets;
    size_t emask, nentities;

    struct entity **slots;   /* handle -> entity; [0] unused */
    uint32_t *gens;
    uint32_t nslots, capslots;
    uint32_t *freeh;
    uint32_t nfree;
    /* handles of entities a handoff passivated quietly: free once the
     * host forgot their states (ms_dispatch_release_parked) */
    uint32_t *parked;
    uint32_t nparked, capparked;

    struct shard *rs_head, *rs_tail;   /* shards with queued messages */
    /* entities with a runnable mailbox: a ring of handles, rcap (a power
     * of two, >= capslots: an entity is in it at most once) long */
    uint32_t *ready;
    uint32_t rhead, rcount, rcap;
    struct resume *res_head, *res_tail, *res_cur;

    struct idmap asks;       /* corr -> ask */
    struct idmap etimers;    /* id -> etimer */
    struct idmap etlists;    /* handle -> etlist (entities with timers) */
    uint64_t next_corr, next_timer;
    struct ms_timerq tq;

    uint64_t pending;
    uint64_t now_ms;         /* latest time the caller told us */
    int closing;             /* shutdown began: accept nothing new */
    struct stopped *stopped; /* shards whose stop finished, not taken */
    size_t hstopped, nstopped, capstopped; /* queue: [hstopped, nstopped) */
    struct msg *free_msgs;   /* recycled small messages */
    uint32_t nfree_msgs;
    /* the active-entity limit (ms_dispatch_set_max_active): UINT64_MAX
     * when there is none, so an activation pays one compare */
    uint64_t max_active;
    uint64_t limit_stops;    /* limit STOPs queued, not yet handled */
    int limit_short;         /* the last pass left the node above it */
    struct ms_stats st;
};

/* Passivates idle entity e of a stopping shard and destroys its record
 * without a delivery, parking its handle (quiet_stop); 0, or -1 when it
 * cannot (no room to park): then it gets a STOP as usual. */
int ms__dispatch_quiet_stop(struct ms_dispatch *d, struct entity *e);

/* ---- small maps ---------------------------------------------------- */

static inline uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

/* Keys differ in position per struct, so the maps are typed thinly. */
#define MAP_FUNCS(NAME, T, KEY)                                              \
    static inline int NAME##_rehash(struct idmap *m)                         \
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
    static inline int NAME##_put(struct idmap *m, T *x)                      \
    {                                                                        \
        if ((!m->b || m->n >= m->mask) && NAME##_rehash(m) < 0)              \
            return MS_ENOMEM;                                                \
        size_t j = mix(x->KEY) & m->mask;                                    \
        x->hnext = m->b[j];                                                  \
        m->b[j] = x;                                                         \
        m->n++;                                                              \
        return 0;                                                            \
    }                                                                        \
    static inline T *NAME##_find(struct idmap *m, uint64_t key)              \
    {                                                                        \
        if (!m->b)                                                           \
            return NULL;                                                     \
        for (T *x = m->b[mix(key) & m->mask]; x; x = x->hnext)               \
            if (x->KEY == key)                                               \
                return x;                                                    \
        return NULL;                                                         \
    }                                                                        \
    static inline void NAME##_del(struct idmap *m, T *x)                     \
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
MAP_FUNCS(elmap, struct etlist, h)

/* ---- small helpers (inline: they are on the message path) ------------ */

static inline uint64_t deadline(uint64_t now_ms, uint64_t in_ms)
{
    return in_ms > UINT64_MAX - now_ms ? UINT64_MAX : now_ms + in_ms;
}

static inline struct entity *eget(struct ms_dispatch *d, uint32_t h)
{
    return h > 0 && h < d->nslots ? d->slots[h] : NULL;
}

/* The entity a link names (a handle of a live entity, or 0). */
static inline struct entity *elink(struct ms_dispatch *d, uint32_t h)
{
    return h ? d->slots[h] : NULL;
}

/* ms_fnv1a64 of the entity's id (the record does not keep it). */
static inline uint64_t ehash(const struct entity *e)
{
    return ms_fnv1a64(e->id, e->idlen);
}

/* Milliseconds since the entity joined the active list: listed keeps 32
 * bits, right while this is below 2^32 ms (49 days); the sweep visits
 * every listed entity at least every LIST_VISIT_MAX_MS. */
#define LIST_VISIT_MAX_MS 0x7fffffffULL
static inline uint64_t listed_for(const struct entity *e, uint64_t now_ms)
{
    return (uint32_t)((uint32_t)now_ms - e->listed);
}

static inline void list_del(struct ms_dispatch *d, struct entity *e)
{
    if (!e->in_list)
        return;
    struct type *t = &d->types[e->type];
    struct entity *p = elink(d, e->lprev), *n = elink(d, e->lnext);
    if (p)
        p->lnext = e->lnext;
    else
        t->list_head = n;
    if (n)
        n->lprev = e->lprev;
    else
        t->list_tail = p;
    e->lprev = e->lnext = 0;
    e->in_list = 0;
}

static inline void list_add(struct ms_dispatch *d, struct entity *e,
                     uint64_t now_ms)
{
    struct type *t = &d->types[e->type];
    e->listed = (uint32_t)now_ms;
    e->lprev = t->list_tail ? t->list_tail->h : 0;
    e->lnext = 0;
    e->used = 0;
    if (t->list_tail)
        t->list_tail->lnext = e->h;
    else
        t->list_head = e;
    t->list_tail = e;
    e->in_list = 1;
}

static inline void ready_entity(struct ms_dispatch *d, struct entity *e)
{
    if (e->in_ready)
        return;
    e->in_ready = 1;
    d->ready[(d->rhead + d->rcount++) & (d->rcap - 1)] = e->h;
}

/* The mailbox is a ring: e->mb is its last message, e->mb->next the
 * first. */
static inline void mb_push(struct entity *e, struct msg *m)
{
    if (e->mb) {
        m->next = e->mb->next;
        e->mb->next = m;
    } else {
        m->next = m;
    }
    e->mb = m;
}

static inline void mb_push_front(struct entity *e, struct msg *m)
{
    if (e->mb) {
        m->next = e->mb->next;
        e->mb->next = m;
    } else {
        m->next = m;
        e->mb = m;
    }
}

/* Takes the first message of a mailbox that is not empty. */
static inline struct msg *mb_pop(struct entity *e)
{
    struct msg *m = e->mb->next;
    if (m == e->mb)
        e->mb = NULL;
    else
        e->mb->next = m->next;
    m->next = NULL;
    return m;
}

/* The message entity e is handling, or NULL: while e is busy it is the
 * first of the mailbox (fill puts it there, done takes it). */
static inline struct msg *ecur(const struct entity *e)
{
    return e->busy ? e->mb->next : NULL;
}

/* Takes the whole mailbox as a NULL-terminated list. */
static inline struct msg *mb_take(struct entity *e)
{
    if (!e->mb)
        return NULL;
    struct msg *first = e->mb->next;
    e->mb->next = NULL;
    e->mb = NULL;
    return first;
}

/* ---- shared by the two files ------------------------------------------- */

void ms__dispatch_complete_ask(struct ms_dispatch *d, struct ask *a, int err,
                               const char *payload, size_t len);
int ms__dispatch_enqueue(struct ms_dispatch *d, struct msg *m, int force);
void ms__dispatch_entity_stopping(struct ms_dispatch *d, struct entity *e);
void ms__dispatch_fail_ask(struct ms_dispatch *d, uint64_t corr, int err,
                           const char *message);
void ms__dispatch_free_msgs(struct ms_dispatch *d, struct msg *m);
void ms__dispatch_limit(struct ms_dispatch *d);
void ms__dispatch_msg_free(struct ms_dispatch *d, struct msg *m);
struct msg *ms__dispatch_msg_new(struct ms_dispatch *d, int kind, uint32_t type,
                                 uint64_t hash, uint32_t shard, const char *id,
                                 size_t idlen, const char *json, size_t len);
void ms__dispatch_shard_check_stopped(struct ms_dispatch *d, uint32_t type,
                                      uint32_t shard);
void ms__dispatch_shard_stop_msg(struct ms_dispatch *d, struct shard *sh,
                                 struct msg *m);

#endif
