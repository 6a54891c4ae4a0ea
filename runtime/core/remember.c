/*
 * remember.c -- remember entities: the write-behind queue, store
 * failures and eager start (remember.h).
 *
 * Every (type, shard, id) the machine knows is one `ent`, in a hash table
 * and in its shard's list: it is in the shard's set (in_set), or queued
 * (a record waiting in the shard's queue), or both; an ent that is
 * neither is freed. Records in flight are copies in the shard's batch, so
 * a newer record of the same id can queue while the older one is out.
 */
#include "remember.h"

#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "errors.h"

#define PRIOR_UNKNOWN 2

struct ent {
    struct ent *hnext;           /* hash chain */
    struct ent *snext, *sprev;   /* the shard's ents */
    struct ent *qnext, *qprev;   /* the shard's queue (when queued) */
    uint64_t h;
    int type;
    uint32_t shard;
    int in_set;
    int queued;
    int op;                      /* queued: enum ms_remember_op */
    int prior;                   /* queued: in_set before it, or unknown */
    size_t len;
    char id[];
};

struct aid {
    size_t len;
    char id[];
};

struct rshard {
    int type;
    uint32_t idx;
    int started;
    int failed;
    int resync;                  /* a replace WRITE is due */
    int forget_after;            /* moved away: forget once resynced */
    uint64_t count;              /* ids in the set */
    struct ent *all;
    struct ent *qhead, *qtail;
    uint32_t nq;
    /* the WRITE out */
    uint64_t req;                /* 0: none */
    struct ms_remember_record *batch;  /* one block with the ids */
    uint32_t nbatch;
    int batch_replace;
    /* failures */
    int waiting_retry;
    int retrying;                /* the next WRITE is a retry */
    uint64_t retry_at_ms;
    uint64_t backoff_ms;
    int in_ready;
    struct rshard *rnext;
    /* eager start */
    struct aid **act;            /* ids to activate, in order */
    uint32_t nact, acur;
    int in_ring;
    struct rshard *anext;
};

struct rtype {
    struct ms_remember_type t;
    struct rshard *shards;
    uint64_t count;
};

struct qact {
    struct qact *next;
    struct ms_remember_action a;
    char id[];
};

struct ms_remember {
    struct rtype *types;
    int ntypes;
    uint32_t queue_max, batch_max, activate_per_tick;
    struct ent **hb;
    size_t nb, nent;
    uint64_t next_req;
    uint64_t nwait;              /* shards waiting for a retry */
    struct rshard *rhead, *rtail;   /* ready to write */
    struct rshard *ahead, *atail;   /* activations to emit */
    struct qact *qhead, *qtail, *taken;
    struct ms_remember_stats st;
};

/* ---- helpers ------------------------------------------------------------ */

static uint64_t key_hash(int type, uint32_t shard, const char *id,
                         size_t len)
{
    uint64_t h = ms_fnv1a64(id, len);
    h ^= ((uint64_t)(uint32_t)type << 32 | shard) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

static struct rshard *get_shard(const struct ms_remember *r, int type,
                                uint32_t shard)
{
    if (r == NULL || type < 0 || type >= r->ntypes)
        return NULL;
    const struct rtype *t = &r->types[type];
    if (t->t.nshards == 0 || shard >= t->t.nshards)
        return NULL;
    return &t->shards[shard];
}

static int check_id(const char *id, size_t len)
{
    if (id == NULL || len == 0)
        return MS_EINVAL;
    return len > MS_REMEMBER_ID_MAX ? MS_E2BIG : 0;
}

static struct ent *find(const struct ms_remember *r, int type,
                        uint32_t shard, const char *id, size_t len)
{
    uint64_t h = key_hash(type, shard, id, len);
    for (struct ent *e = r->hb[h & (r->nb - 1)]; e != NULL; e = e->hnext)
        if (e->h == h && e->type == type && e->shard == shard &&
            e->len == len && memcmp(e->id, id, len) == 0)
            return e;
    return NULL;
}

static void grow(struct ms_remember *r)
{
    size_t nb = r->nb * 2;
    struct ent **hb = calloc(nb, sizeof *hb);
    if (hb == NULL)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < r->nb; i++) {
        struct ent *e = r->hb[i];
        while (e != NULL) {
            struct ent *next = e->hnext;
            e->hnext = hb[e->h & (nb - 1)];
            hb[e->h & (nb - 1)] = e;
            e = next;
        }
    }
    free(r->hb);
    r->hb = hb;
    r->nb = nb;
}

static struct ent *create(struct ms_remember *r, struct rshard *s,
                          const char *id, size_t len)
{
    struct ent *e = calloc(1, sizeof *e + len + 1);
    if (e == NULL)
        return NULL;
    e->h = key_hash(s->type, s->idx, id, len);
    e->type = s->type;
    e->shard = s->idx;
    e->len = len;
    memcpy(e->id, id, len);
    if (r->nent >= r->nb)
        grow(r);
    e->hnext = r->hb[e->h & (r->nb - 1)];
    r->hb[e->h & (r->nb - 1)] = e;
    r->nent++;
    e->snext = s->all;
    if (s->all != NULL)
        s->all->sprev = e;
    s->all = e;
    return e;
}

/* Frees e if it is neither in the set nor queued. */
static void release(struct ms_remember *r, struct rshard *s, struct ent *e)
{
    if (e->in_set || e->queued)
        return;
    struct ent **pp = &r->hb[e->h & (r->nb - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    r->nent--;
    if (e->sprev != NULL)
        e->sprev->snext = e->snext;
    else
        s->all = e->snext;
    if (e->snext != NULL)
        e->snext->sprev = e->sprev;
    free(e);
}

static void set_member(struct ms_remember *r, struct rshard *s,
                       struct ent *e, int in)
{
    if (e->in_set == in)
        return;
    e->in_set = in;
    if (in) {
        s->count++;
        r->types[s->type].count++;
    } else {
        s->count--;
        r->types[s->type].count--;
    }
}

static void enqueue(struct ms_remember *r, struct rshard *s, struct ent *e,
                    int op, int prior, int at_head)
{
    e->queued = 1;
    e->op = op;
    e->prior = prior;
    e->qprev = e->qnext = NULL;
    if (at_head) {
        e->qnext = s->qhead;
        if (s->qhead != NULL)
            s->qhead->qprev = e;
        else
            s->qtail = e;
        s->qhead = e;
    } else {
        e->qprev = s->qtail;
        if (s->qtail != NULL)
            s->qtail->qnext = e;
        else
            s->qhead = e;
        s->qtail = e;
    }
    s->nq++;
    r->st.queued++;
}

static void dequeue(struct ms_remember *r, struct rshard *s, struct ent *e)
{
    if (e->qprev != NULL)
        e->qprev->qnext = e->qnext;
    else
        s->qhead = e->qnext;
    if (e->qnext != NULL)
        e->qnext->qprev = e->qprev;
    else
        s->qtail = e->qprev;
    e->qnext = e->qprev = NULL;
    e->queued = 0;
    s->nq--;
    r->st.queued--;
}

static void push_ready(struct ms_remember *r, struct rshard *s)
{
    if (s->in_ready)
        return;
    s->in_ready = 1;
    s->rnext = NULL;
    if (r->rtail != NULL)
        r->rtail->rnext = s;
    else
        r->rhead = s;
    r->rtail = s;
}

static void push_ring(struct ms_remember *r, struct rshard *s)
{
    if (s->in_ring)
        return;
    s->in_ring = 1;
    s->anext = NULL;
    if (r->atail != NULL)
        r->atail->anext = s;
    else
        r->ahead = s;
    r->atail = s;
}

static int emit(struct ms_remember *r, const struct ms_remember_action *a,
                const char *id, size_t len)
{
    struct qact *q = malloc(sizeof *q + len + 1);
    if (q == NULL)
        return MS_ENOMEM;
    q->next = NULL;
    q->a = *a;
    if (id != NULL) {
        memcpy(q->id, id, len);
        q->id[len] = '\0';
        q->a.id = q->id;
        q->a.id_len = len;
    }
    if (r->qtail != NULL)
        r->qtail->next = q;
    else
        r->qhead = q;
    r->qtail = q;
    return 0;
}

/* Drops the shard's activations not emitted yet. */
static void drop_activations(struct ms_remember *r, struct rshard *s)
{
    uint32_t left = s->nact - s->acur;
    r->st.eager_dropped += left;
    r->st.eager_pending -= left;
    for (uint32_t i = 0; i < s->nact; i++)
        free(s->act[i]);
    free(s->act);
    s->act = NULL;
    s->nact = s->acur = 0;
}

/* Forgets the shard's set (its queued records stay). */
static void forget(struct ms_remember *r, struct rshard *s)
{
    struct ent *e = s->all;
    while (e != NULL) {
        struct ent *next = e->snext;
        set_member(r, s, e, 0);
        release(r, s, e);
        e = next;
    }
    s->forget_after = 0;
}

/* The queued records of a shard marked for a resync are subsumed. */
static void purge_queue(struct ms_remember *r, struct rshard *s)
{
    while (s->qhead != NULL) {
        struct ent *e = s->qhead;
        dequeue(r, s, e);
        release(r, s, e);
    }
}

/* ---- writes ------------------------------------------------------------- */

/* Sends the shard's next WRITE: its resync, or its queued records. */
static int send_write(struct ms_remember *r, struct rshard *s)
{
    uint32_t n = 0;
    size_t bytes = 0;
    int replace = s->resync;

    if (replace) {
        for (struct ent *e = s->all; e != NULL; e = e->snext)
            if (e->in_set) {
                n++;
                bytes += e->len + 1;
            }
    } else {
        for (struct ent *e = s->qhead; e != NULL && n < r->batch_max;
             e = e->qnext) {
            n++;
            bytes += e->len + 1;
        }
    }
    char *blk = malloc(n * sizeof(struct ms_remember_record) + bytes + 1);
    if (blk == NULL)
        return MS_ENOMEM;
    struct ms_remember_record *recs = (struct ms_remember_record *)blk;
    char *p = blk + n * sizeof *recs;
    uint32_t i = 0;
    if (replace) {
        for (struct ent *e = s->all; e != NULL; e = e->snext)
            if (e->in_set) {
                memcpy(p, e->id, e->len);
                p[e->len] = '\0';
                recs[i].id = p;
                recs[i].id_len = e->len;
                recs[i++].op = MS_REMEMBER_START;
                p += e->len + 1;
            }
        s->resync = 0;
        r->st.resyncs++;
    } else {
        while (i < n) {
            struct ent *e = s->qhead;
            memcpy(p, e->id, e->len);
            p[e->len] = '\0';
            recs[i].id = p;
            recs[i].id_len = e->len;
            recs[i++].op = e->op;
            p += e->len + 1;
            dequeue(r, s, e);
            release(r, s, e);
        }
        r->st.inflight += n;
    }
    s->batch = recs;
    s->nbatch = n;
    s->batch_replace = replace;
    s->req = ++r->next_req;
    if (s->retrying) {
        s->retrying = 0;
        r->st.retries++;
    }
    struct ms_remember_action a = {0};
    a.kind = MS_REMEMBER_WRITE;
    a.type = s->type;
    a.shard = s->idx;
    a.req = s->req;
    a.replace = replace;
    a.records = recs;
    a.nrecords = n;
    return emit(r, &a, NULL, 0);
}

/* Sends a WRITE for every ready shard that can write now. */
static void pump(struct ms_remember *r)
{
    while (r->rhead != NULL) {
        struct rshard *s = r->rhead;
        r->rhead = s->rnext;
        if (r->rhead == NULL)
            r->rtail = NULL;
        s->in_ready = 0;
        if (s->req != 0 || s->waiting_retry || (s->nq == 0 && !s->resync))
            continue;
        if (send_write(r, s) != 0) {
            /* out of memory: try again at the next tick */
            s->waiting_retry = 1;
            s->retry_at_ms = 0;
            r->nwait++;
        }
    }
}

/* The set says `id` is (in=1) or is not (in=0) remembered: update it and
 * queue, coalesce, cancel or drop the record. */
static int record(struct ms_remember *r, struct rshard *s, const char *id,
                  size_t len, int in)
{
    struct ent *e = find(r, s->type, s->idx, id, len);
    int cur = e != NULL && e->in_set;
    if (cur == in)
        return 0;
    if (e == NULL && (e = create(r, s, id, len)) == NULL)
        return MS_ENOMEM;
    set_member(r, s, e, in);
    int op = in ? MS_REMEMBER_START : MS_REMEMBER_STOP;
    if (s->resync) {
        r->st.coalesced++;
    } else if (e->queued) {
        if (e->prior == in) {
            dequeue(r, s, e);
            r->st.cancelled++;
        } else {
            e->op = op;
            r->st.coalesced++;
        }
    } else if (r->st.queued + r->st.inflight >= r->queue_max) {
        r->st.drops++;
        s->resync = 1;
        purge_queue(r, s);
        push_ready(r, s);
    } else {
        enqueue(r, s, e, op, cur, 0);
        r->st.recorded++;
        push_ready(r, s);
    }
    release(r, s, e);
    pump(r);
    return 1;
}

/* ---- lifecycle ---------------------------------------------------------- */

int ms_remember_new(struct ms_remember **out,
                    const struct ms_remember_config *c)
{
    if (out == NULL || c == NULL || c->ntypes < 0 ||
        (c->ntypes > 0 && c->types == NULL) ||
        c->queue_max > MS_REMEMBER_QUEUE_MAX ||
        c->batch_max > MS_REMEMBER_BATCH_MAX ||
        c->activate_per_tick > MS_REMEMBER_ACTIVATE_MAX)
        return MS_EINVAL;
    struct ms_remember *r = calloc(1, sizeof *r);
    if (r == NULL)
        return MS_ENOMEM;
    r->queue_max = c->queue_max ? c->queue_max : MS_REMEMBER_QUEUE;
    r->batch_max = c->batch_max ? c->batch_max : MS_REMEMBER_BATCH;
    r->activate_per_tick =
        c->activate_per_tick ? c->activate_per_tick : MS_REMEMBER_ACTIVATE;
    r->nb = 1024;
    r->hb = calloc(r->nb, sizeof *r->hb);
    r->ntypes = c->ntypes;
    r->types = calloc(c->ntypes > 0 ? (size_t)c->ntypes : 1,
                      sizeof *r->types);
    if (r->hb == NULL || r->types == NULL) {
        ms_remember_free(r);
        return MS_ENOMEM;
    }
    for (int t = 0; t < c->ntypes; t++) {
        r->types[t].t = c->types[t];
        uint32_t n = c->types[t].nshards;
        if (n == 0)
            continue;
        r->types[t].shards = calloc(n, sizeof(struct rshard));
        if (r->types[t].shards == NULL) {
            ms_remember_free(r);
            return MS_ENOMEM;
        }
        for (uint32_t i = 0; i < n; i++) {
            r->types[t].shards[i].type = t;
            r->types[t].shards[i].idx = i;
        }
    }
    *out = r;
    return 0;
}

void ms_remember_free(struct ms_remember *r)
{
    if (r == NULL)
        return;
    for (int t = 0; t < r->ntypes; t++) {
        struct rtype *rt = &r->types[t];
        for (uint32_t i = 0; rt->shards != NULL && i < rt->t.nshards; i++) {
            struct rshard *s = &rt->shards[i];
            for (uint32_t k = 0; k < s->nact; k++)
                free(s->act[k]);
            free(s->act);
            free(s->batch);
        }
        free(rt->shards);
    }
    for (size_t i = 0; r->hb != NULL && i < r->nb; i++) {
        struct ent *e = r->hb[i];
        while (e != NULL) {
            struct ent *next = e->hnext;
            free(e);
            e = next;
        }
    }
    struct qact *q = r->qhead;
    while (q != NULL) {
        struct qact *next = q->next;
        free(q);
        q = next;
    }
    free(r->taken);
    free(r->hb);
    free(r->types);
    free(r);
}

/* ---- events ------------------------------------------------------------- */

/* Appends `id` to the activations being built in act[*na]. */
static int add_act(struct aid **act, uint32_t *na, const char *id,
                   size_t len)
{
    struct aid *a = malloc(sizeof *a + len + 1);
    if (a == NULL)
        return MS_ENOMEM;
    a->len = len;
    memcpy(a->id, id, len);
    a->id[len] = '\0';
    act[(*na)++] = a;
    return 0;
}

int ms_remember_shard_started(struct ms_remember *r, int type,
                              uint32_t shard, const char *const *ids,
                              const size_t *lens, uint32_t n,
                              uint64_t now_ms)
{
    (void)now_ms;
    struct rshard *s = get_shard(r, type, shard);
    if (s == NULL || (n > 0 && (ids == NULL || lens == NULL)))
        return MS_EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        int rc = check_id(ids[i], lens[i]);
        if (rc != 0)
            return rc;
    }
    drop_activations(r, s);
    forget(r, s);
    if (s->failed) {
        s->failed = 0;
        r->st.failed_shards--;
    }
    /* records still queued from an earlier stay will be written after
     * the list was read: they win over it */
    uint32_t nq = 0;
    for (struct ent *e = s->all; e != NULL; e = e->snext)
        nq += e->queued && e->op == MS_REMEMBER_START;
    struct aid **act = NULL;
    if (n + nq > 0 && (act = calloc(n + nq, sizeof *act)) == NULL)
        return MS_ENOMEM;
    s->started = 1;
    uint32_t na = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct ent *e = find(r, type, shard, ids[i], lens[i]);
        if (e == NULL && (e = create(r, s, ids[i], lens[i])) == NULL)
            goto nomem;
        if (e->in_set || (e->queued && e->op == MS_REMEMBER_STOP))
            continue; /* listed twice, or its stop is queued */
        set_member(r, s, e, 1);
        if (add_act(act, &na, ids[i], lens[i]) != 0)
            goto nomem;
    }
    for (struct ent *e = s->all; e != NULL; e = e->snext)
        if (e->queued && e->op == MS_REMEMBER_START && !e->in_set) {
            set_member(r, s, e, 1);
            if (add_act(act, &na, e->id, e->len) != 0)
                goto nomem;
        }
    s->act = act;
    s->nact = na;
    s->acur = 0;
    r->st.eager_pending += na;
    if (na > 0)
        push_ring(r, s);
    return 0;
nomem:
    for (uint32_t i = 0; i < na; i++)
        free(act[i]);
    free(act);
    forget(r, s);
    s->started = 0;
    return MS_ENOMEM;
}

int ms_remember_shard_stopped(struct ms_remember *r, int type,
                              uint32_t shard, uint64_t now_ms)
{
    (void)now_ms;
    struct rshard *s = get_shard(r, type, shard);
    if (s == NULL)
        return MS_EINVAL;
    if (!s->started)
        return MS_ENOOWNER;
    s->started = 0;
    drop_activations(r, s);
    if (s->failed) {
        s->failed = 0;
        r->st.failed_shards--;
    }
    if (s->resync)
        s->forget_after = 1; /* the resync needs the set */
    else
        forget(r, s);
    return 0;
}

int ms_remember_shard_released(struct ms_remember *r, int type,
                               uint32_t shard, uint64_t now_ms)
{
    (void)now_ms;
    struct rshard *s = get_shard(r, type, shard);
    if (s == NULL)
        return MS_EINVAL;
    if (s->started)
        return MS_EBUSY;
    uint64_t n = s->nq;
    purge_queue(r, s);
    if (s->req != 0) {
        if (!s->batch_replace) {
            n += s->nbatch;
            r->st.inflight -= s->nbatch;
        }
        free(s->batch);
        s->batch = NULL;
        s->nbatch = 0;
        s->batch_replace = 0;
        s->req = 0;
    }
    s->resync = 0;
    if (s->waiting_retry) {
        s->waiting_retry = 0;
        r->nwait--;
    }
    s->retrying = 0;
    s->backoff_ms = 0;
    forget(r, s);
    r->st.abandoned += n;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

int ms_remember_started(struct ms_remember *r, int type, uint32_t shard,
                        const char *id, size_t id_len, uint64_t now_ms)
{
    (void)now_ms;
    struct rshard *s = get_shard(r, type, shard);
    if (s == NULL)
        return MS_EINVAL;
    int rc = check_id(id, id_len);
    if (rc != 0)
        return rc;
    if (!s->started)
        return MS_ENOOWNER;
    return record(r, s, id, id_len, 1);
}

int ms_remember_stopped(struct ms_remember *r, int type, uint32_t shard,
                        const char *id, size_t id_len, int reason,
                        uint64_t now_ms)
{
    (void)now_ms;
    struct rshard *s = get_shard(r, type, shard);
    if (s == NULL || reason < MS_REMEMBER_EXPLICIT ||
        reason > MS_REMEMBER_HANDOFF)
        return MS_EINVAL;
    int rc = check_id(id, id_len);
    if (rc != 0)
        return rc;
    if (!s->started)
        return MS_ENOOWNER;
    if (reason == MS_REMEMBER_IDLE && r->types[type].t.keep_on_idle)
        return 0;
    if (reason != MS_REMEMBER_EXPLICIT && reason != MS_REMEMBER_IDLE)
        return 0;
    return record(r, s, id, id_len, 0);
}

/* Puts a failed batch back at the head of the queue, in order; a record
 * queued since supersedes the failed one of the same id. */
static int requeue(struct ms_remember *r, struct rshard *s)
{
    if (s->batch_replace) {
        /* records queued since assumed the resync would land; the next
         * resync carries the set as it is then: they are subsumed (a
         * resync due always has an empty queue) */
        s->resync = 1;
        purge_queue(r, s);
        return 0;
    }
    r->st.inflight -= s->nbatch;
    if (s->resync)
        return 0; /* subsumed */
    for (uint32_t i = s->nbatch; i-- > 0;) {
        const struct ms_remember_record *rec = &s->batch[i];
        struct ent *e = find(r, s->type, s->idx, rec->id, rec->id_len);
        if (e != NULL && e->queued) {
            /* the newer record assumed this one would land: what the
             * store has is unknown now, so it must not cancel out */
            e->prior = PRIOR_UNKNOWN;
            continue;
        }
        if (e == NULL && (e = create(r, s, rec->id, rec->id_len)) == NULL) {
            /* cannot keep the record: resync the shard instead */
            r->st.drops++;
            s->resync = 1;
            purge_queue(r, s);
            return MS_ENOMEM;
        }
        enqueue(r, s, e, rec->op, PRIOR_UNKNOWN, 1);
    }
    return 0;
}

int ms_remember_on_written(struct ms_remember *r, int type, uint32_t shard,
                           uint64_t req, int err, uint64_t now_ms)
{
    struct rshard *s = get_shard(r, type, shard);
    if (s == NULL)
        return MS_EINVAL;
    if (req == 0 || s->req != req) {
        r->st.stale_answers++;
        return 0;
    }
    s->req = 0;
    if (err == 0) {
        r->st.writes++;
        r->st.written += s->nbatch;
        if (!s->batch_replace)
            r->st.inflight -= s->nbatch;
        s->backoff_ms = 0;
        if (s->forget_after && !s->resync && !s->started)
            forget(r, s);
    } else {
        r->st.errors++;
        if (r->types[type].t.fail_closed && s->started && !s->failed) {
            s->failed = 1;
            r->st.failed_shards++;
        }
        requeue(r, s);
        s->backoff_ms = s->backoff_ms == 0 ? MS_REMEMBER_BACKOFF_MIN_MS
                        : s->backoff_ms * 2 > MS_REMEMBER_BACKOFF_MAX_MS
                            ? MS_REMEMBER_BACKOFF_MAX_MS
                            : s->backoff_ms * 2;
        s->retry_at_ms = now_ms + s->backoff_ms;
        s->waiting_retry = 1;
        s->retrying = 1;
        r->nwait++;
    }
    free(s->batch);
    s->batch = NULL;
    s->nbatch = 0;
    s->batch_replace = 0;
    if (!s->waiting_retry && (s->nq > 0 || s->resync))
        push_ready(r, s);
    pump(r);
    return 0;
}

int ms_remember_clear(struct ms_remember *r, int type, uint32_t shard)
{
    struct rshard *s = get_shard(r, type, shard);
    if (s == NULL)
        return MS_EINVAL;
    if (!s->failed)
        return 0;
    s->failed = 0;
    r->st.failed_shards--;
    return 1;
}

void ms_remember_tick(struct ms_remember *r, uint64_t now_ms)
{
    if (r == NULL)
        return;
    for (int t = 0; r->nwait > 0 && t < r->ntypes; t++) {
        struct rtype *rt = &r->types[t];
        for (uint32_t i = 0; rt->shards != NULL && i < rt->t.nshards; i++) {
            struct rshard *s = &rt->shards[i];
            if (s->waiting_retry && now_ms >= s->retry_at_ms) {
                s->waiting_retry = 0;
                r->nwait--;
                push_ready(r, s);
            }
        }
    }
    pump(r);
    uint32_t budget = r->activate_per_tick;
    while (budget > 0 && r->ahead != NULL) {
        struct rshard *s = r->ahead;
        r->ahead = s->anext;
        if (r->ahead == NULL)
            r->atail = NULL;
        s->in_ring = 0;
        if (s->acur >= s->nact)
            continue; /* dropped meanwhile */
        struct ms_remember_action a = {0};
        a.kind = MS_REMEMBER_ACTIVATE_ID;
        a.type = s->type;
        a.shard = s->idx;
        const struct aid *id = s->act[s->acur];
        /* an id stopped (explicitly, or idle) since the shard was
         * listed is not started again */
        const struct ent *e = find(r, s->type, s->idx, id->id, id->len);
        int gone = e == NULL || !e->in_set;
        if (!gone && emit(r, &a, id->id, id->len) != 0) {
            push_ring(r, s); /* out of memory: next tick */
            break;
        }
        free(s->act[s->acur]);
        s->act[s->acur++] = NULL;
        r->st.eager_pending--;
        if (gone) {
            r->st.eager_skipped++;
        } else {
            r->st.eager_starts++;
            budget--;
        }
        if (s->acur < s->nact) {
            push_ring(r, s);
        } else {
            free(s->act);
            s->act = NULL;
            s->nact = s->acur = 0;
        }
    }
}

int ms_remember_next_action(struct ms_remember *r,
                            struct ms_remember_action *out)
{
    if (r == NULL || out == NULL)
        return 0;
    free(r->taken);
    r->taken = NULL;
    struct qact *q = r->qhead;
    if (q == NULL)
        return 0;
    r->qhead = q->next;
    if (r->qhead == NULL)
        r->qtail = NULL;
    *out = q->a;
    r->taken = q;
    return 1;
}

/* ---- queries ------------------------------------------------------------ */

int ms_remember_shard_failed(const struct ms_remember *r, int type,
                             uint32_t shard)
{
    const struct rshard *s = get_shard(r, type, shard);
    return s != NULL && s->failed;
}

uint64_t ms_remember_shard_count(const struct ms_remember *r, int type,
                                 uint32_t shard)
{
    const struct rshard *s = get_shard(r, type, shard);
    return s != NULL && s->started ? s->count : 0;
}

uint64_t ms_remember_type_count(const struct ms_remember *r, int type)
{
    if (r == NULL || type < 0 || type >= r->ntypes)
        return 0;
    return r->types[type].count;
}

uint64_t ms_remember_pending(const struct ms_remember *r, int type,
                             uint32_t shard)
{
    const struct rshard *s = get_shard(r, type, shard);
    if (s == NULL)
        return 0;
    /* a resync out counts one even when the set is empty */
    uint64_t out = s->req == 0 ? 0
                   : s->batch_replace ? 1 : (uint64_t)s->nbatch;
    return (uint64_t)s->nq + out + (s->resync ? 1 : 0);
}

int ms_remember_contains(const struct ms_remember *r, int type,
                         uint32_t shard, const char *id, size_t id_len)
{
    const struct rshard *s = get_shard(r, type, shard);
    if (s == NULL || !s->started || check_id(id, id_len) != 0)
        return 0;
    const struct ent *e = find(r, type, shard, id, id_len);
    return e != NULL && e->in_set;
}

const struct ms_remember_stats *ms_remember_stats(const struct ms_remember *r)
{
    return &r->st;
}
