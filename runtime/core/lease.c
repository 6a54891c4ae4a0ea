/*
 * lease.c -- the per-shard lease and its FIFO barrier (lease.h).
 *
 * Shard states are kept in one array per persistent type, allocated on
 * the first event for that type; ms_lease_tick walks the shards of those
 * types (a few thousand at most per node: cheap at the tick's pace).
 */
#include "lease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

struct bnode {
    struct bnode *next;
    void *msg;
};

struct lshard {
    int state;               /* enum ms_lease_state */
    uint64_t req;            /* the request waited for (0: none) */
    uint64_t req_sent_ms;
    uint64_t epoch;          /* the epoch held (or last held) */
    uint64_t max_epoch;      /* the highest epoch seen: never goes down */
    uint64_t expiry_ms;      /* local monotonic, from the database's answer */
    uint64_t renew_at_ms;
    uint64_t retry_at_ms;    /* next acquire when none is out */
    uint64_t backoff_ms;     /* the wait after the next failure */
    int window_on;           /* unusable since window_end_ms - window */
    int window_spent;        /* ran out: new messages are rejected */
    uint64_t window_end_ms;
    int handoff;             /* a handoff waits for the barrier to drain */
    int reassign;            /* RELEASING: acquire again once answered */
    struct bnode *head, *tail;
    uint32_t n;
};

struct ltype {
    uint32_t nshards;
    struct ms_lease_settings s;
    struct lshard *shards;   /* allocated on first use */
};

struct qact {
    struct qact *next;
    struct ms_lease_action a;
};

struct ms_lease {
    char owner[MS_LEASE_OWNER_MAX + 1];
    struct ltype *types;
    int ntypes;
    int partitioned;         /* a member is unreachable */
    uint64_t next_req;
    uint32_t nheld;
    struct qact *qhead, *qtail;
    struct ms_lease_stats st;
};

/* ---- settings ------------------------------------------------------------ */

static void fill_defaults(struct ms_lease_settings *s)
{
    if (!s->duration_ms)
        s->duration_ms = MS_LEASE_DURATION_MS;
    if (!s->renew_interval_ms)
        s->renew_interval_ms = MS_LEASE_RENEW_INTERVAL_MS;
    if (!s->window_ms)
        s->window_ms = MS_LEASE_WINDOW_DURATIONS * s->duration_ms;
}

int ms_lease_settings_check(const struct ms_lease_settings *in, char *err,
                            size_t errlen)
{
    struct ms_lease_settings s = *in;
    fill_defaults(&s);
    const char *what = NULL;
    char buf[200];
    if (s.duration_ms < MS_LEASE_DURATION_MIN_MS ||
        s.duration_ms > MS_LEASE_DURATION_MAX_MS) {
        snprintf(buf, sizeof buf,
                 "lease_duration must be between %d and %d ms (got %llu)",
                 MS_LEASE_DURATION_MIN_MS, MS_LEASE_DURATION_MAX_MS,
                 (unsigned long long)s.duration_ms);
        what = buf;
    } else if (s.renew_interval_ms < MS_LEASE_RENEW_MIN_MS ||
               s.renew_interval_ms >
                   s.duration_ms / MS_LEASE_RENEW_RATIO) {
        snprintf(buf, sizeof buf,
                 "lease_renew_interval must be between %d ms and a third "
                 "of lease_duration (%llu ms), got %llu ms",
                 MS_LEASE_RENEW_MIN_MS,
                 (unsigned long long)(s.duration_ms / MS_LEASE_RENEW_RATIO),
                 (unsigned long long)s.renew_interval_ms);
        what = buf;
    } else if (s.window_ms < s.duration_ms) {
        snprintf(buf, sizeof buf,
                 "the lease window must be at least lease_duration "
                 "(%llu ms), got %llu ms",
                 (unsigned long long)s.duration_ms,
                 (unsigned long long)s.window_ms);
        what = buf;
    }
    if (!what)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s", what);
    return MS_ECONFIG;
}

/* ---- actions ------------------------------------------------------------- */

static int emit(struct ms_lease *l, int kind, int type, uint32_t shard,
                const struct lshard *s, void *msg, int err)
{
    struct qact *q = calloc(1, sizeof *q);
    if (!q)
        return MS_ENOMEM;
    q->a.kind = kind;
    q->a.type = type;
    q->a.shard = shard;
    q->a.msg = msg;
    q->a.err = err;
    if (kind == MS_LEASE_ACQUIRE || kind == MS_LEASE_RENEW ||
        kind == MS_LEASE_RELEASE) {
        q->a.req = s->req;
        q->a.epoch = s->epoch;
        q->a.owner = l->owner;
        if (kind != MS_LEASE_RELEASE)
            q->a.duration_ms = l->types[type].s.duration_ms;
    }
    if (l->qtail)
        l->qtail->next = q;
    else
        l->qhead = q;
    l->qtail = q;
    return 0;
}

int ms_lease_next_action(struct ms_lease *l, struct ms_lease_action *out)
{
    struct qact *q = l->qhead;
    if (!q)
        return 0;
    l->qhead = q->next;
    if (!l->qhead)
        l->qtail = NULL;
    *out = q->a;
    free(q);
    return 1;
}

/* ---- life cycle ---------------------------------------------------------- */

int ms_lease_new(struct ms_lease **out, const struct ms_lease_config *c)
{
    *out = NULL;
    if (!c->owner || !c->owner[0] || strlen(c->owner) > MS_LEASE_OWNER_MAX ||
        c->ntypes < 0 || (c->ntypes && (!c->nshards || !c->settings)))
        return MS_EINVAL;
    for (int i = 0; i < c->ntypes; i++)
        if (c->nshards[i] &&
            ms_lease_settings_check(&c->settings[i], NULL, 0) < 0)
            return MS_ECONFIG;
    struct ms_lease *l = calloc(1, sizeof *l);
    if (!l)
        return MS_ENOMEM;
    if (c->ntypes) {
        l->types = calloc((size_t)c->ntypes, sizeof *l->types);
        if (!l->types) {
            free(l);
            return MS_ENOMEM;
        }
    }
    l->ntypes = c->ntypes;
    for (int i = 0; i < c->ntypes; i++) {
        l->types[i].nshards = c->nshards[i];
        l->types[i].s = c->settings[i];
        fill_defaults(&l->types[i].s);
    }
    memcpy(l->owner, c->owner, strlen(c->owner) + 1);
    *out = l;
    return 0;
}

void ms_lease_free(struct ms_lease *l)
{
    if (!l)
        return;
    for (int t = 0; t < l->ntypes; t++) {
        struct ltype *lt = &l->types[t];
        for (uint32_t i = 0; lt->shards && i < lt->nshards; i++) {
            struct bnode *b = lt->shards[i].head;
            while (b) {
                struct bnode *next = b->next;
                free(b);
                b = next;
            }
        }
        free(lt->shards);
    }
    struct qact *q = l->qhead;
    while (q) {
        struct qact *next = q->next;
        free(q);
        q = next;
    }
    free(l->types);
    free(l);
}

/* The shard's state; allocated on first use when `alloc`. NULL: a bad
 * type or shard (or no memory, with *nomem set). */
static struct lshard *shard_of(struct ms_lease *l, int type, uint32_t shard,
                               int alloc, int *nomem)
{
    if (type < 0 || type >= l->ntypes)
        return NULL;
    struct ltype *lt = &l->types[type];
    if (shard >= lt->nshards)
        return NULL;
    if (!lt->shards) {
        if (!alloc)
            return NULL;
        lt->shards = calloc(lt->nshards, sizeof *lt->shards);
        if (!lt->shards) {
            if (nomem)
                *nomem = 1;
            return NULL;
        }
    }
    return &lt->shards[shard];
}

static const struct lshard *cshard(const struct ms_lease *l, int type,
                                   uint32_t shard)
{
    if (type < 0 || type >= l->ntypes || !l->types[type].shards ||
        shard >= l->types[type].nshards)
        return NULL;
    return &l->types[type].shards[shard];
}

static int usable(const struct lshard *s)
{
    return s->state == MS_LEASE_HELD || s->state == MS_LEASE_RENEWING;
}

/* ---- the barrier --------------------------------------------------------- */

/* Gives every waiting handle back in order, as `kind` (DELIVER, or REJECT
 * with err). */
static void drain_barrier(struct ms_lease *l, int type, uint32_t shard,
                          struct lshard *s, int kind, int err)
{
    while (s->head) {
        struct bnode *b = s->head;
        if (emit(l, kind, type, shard, s, b->msg, err) < 0)
            return; /* no memory: kept, tried again at the next tick */
        s->head = b->next;
        if (!s->head)
            s->tail = NULL;
        s->n--;
        if (kind == MS_LEASE_REJECT && err == MS_ELEASE)
            l->st.rejected++;
        free(b);
    }
}

static void start_window(struct ms_lease *l, int type, struct lshard *s,
                         uint64_t now)
{
    if (s->window_on)
        return;
    s->window_on = 1;
    s->window_spent = 0;
    s->window_end_ms = now + l->types[type].s.window_ms;
}

int ms_lease_admit(struct ms_lease *l, int type, uint32_t shard, void *msg,
                   uint64_t now_ms)
{
    (void)now_ms;
    if (!msg)
        return MS_EINVAL;
    struct lshard *s = shard_of(l, type, shard, 0, NULL);
    if (!s) {
        if (type < 0 || type >= l->ntypes ||
            shard >= l->types[type].nshards)
            return MS_EINVAL;
        return MS_ENOOWNER; /* no shard of the type was assigned yet */
    }
    if (s->state == MS_LEASE_NONE || s->state == MS_LEASE_STOPPING ||
        (s->state == MS_LEASE_RELEASING && !s->reassign) || s->handoff)
        return MS_ENOOWNER;
    if (usable(s) && !s->n)
        return MS_LEASE_OPEN;
    if (s->window_spent) {
        l->st.rejected++;
        return MS_ELEASE;
    }
    if (s->n >= MS_LEASE_BARRIER) {
        l->st.barrier_overflows++;
        return MS_EOVERFLOW;
    }
    struct bnode *b = malloc(sizeof *b);
    if (!b)
        return MS_ENOMEM;
    b->next = NULL;
    b->msg = msg;
    if (s->tail)
        s->tail->next = b;
    else
        s->head = b;
    s->tail = b;
    s->n++;
    l->st.barrier_waited++;
    return 0;
}

int ms_lease_gate(const struct ms_lease *l, int type, uint32_t shard)
{
    if (type < 0 || type >= l->ntypes || shard >= l->types[type].nshards)
        return MS_EINVAL;
    const struct lshard *s = cshard(l, type, shard);
    if (!s || s->state == MS_LEASE_NONE || s->state == MS_LEASE_STOPPING ||
        (s->state == MS_LEASE_RELEASING && !s->reassign) || s->handoff)
        return MS_ENOOWNER;
    if (usable(s) && !s->n)
        return MS_LEASE_OPEN;
    if (s->window_spent)
        return MS_ELEASE;
    return 0;
}

uint64_t ms_lease_cancel_all(struct ms_lease *l)
{
    uint64_t n = 0;
    for (int t = 0; t < l->ntypes; t++) {
        struct ltype *lt = &l->types[t];
        for (uint32_t i = 0; lt->shards && i < lt->nshards; i++) {
            struct lshard *s = &lt->shards[i];
            uint32_t before = s->n;
            drain_barrier(l, t, i, s, MS_LEASE_REJECT, MS_ECANCELED);
            n += before - s->n;
        }
    }
    return n;
}

/* ---- transitions --------------------------------------------------------- */

static void send_acquire(struct ms_lease *l, int type, uint32_t shard,
                         struct lshard *s, uint64_t now)
{
    s->state = MS_LEASE_ACQUIRING;
    s->req = ++l->next_req;
    s->req_sent_ms = now;
    if (emit(l, MS_LEASE_ACQUIRE, type, shard, s, NULL, 0) < 0) {
        s->req = 0; /* no memory: tried again at the next tick */
        s->retry_at_ms = now;
    }
}

/* An acquire failed: wait the backoff (or `wait`, the time the other
 * owner's lease has left, if longer; at most one duration), then again. */
static void acquire_failed(struct ms_lease *l, int type, struct lshard *s,
                           uint64_t now, uint64_t wait)
{
    uint64_t d = l->types[type].s.duration_ms;
    s->state = MS_LEASE_ACQUIRING;
    s->req = 0;
    if (wait > d)
        wait = d;
    if (wait < s->backoff_ms)
        wait = s->backoff_ms;
    s->retry_at_ms = now + wait;
    s->backoff_ms *= 2;
    if (s->backoff_ms > MS_LEASE_BACKOFF_MAX_MS)
        s->backoff_ms = MS_LEASE_BACKOFF_MAX_MS;
}

/* The lease in use is gone (state LOST or EXPIRED): the entities stop at
 * once, new messages wait, the lease is acquired again after a backoff. */
static void lose(struct ms_lease *l, int type, uint32_t shard,
                 struct lshard *s, int state, uint64_t now)
{
    if (usable(s))
        l->nheld--;
    if (state == MS_LEASE_LOST)
        l->st.lost++;
    else
        l->st.expired++;
    s->state = state;
    s->req = 0;
    s->backoff_ms = MS_LEASE_BACKOFF_MIN_MS;
    s->retry_at_ms = now + MS_LEASE_BACKOFF_MIN_MS;
    start_window(l, type, s, now);
    emit(l, MS_LEASE_STOP_ENTITIES, type, shard, s, NULL, 0);
}

/* Back to NONE; the epoch seen and the barrier (messages that came for a
 * shard assigned here again while it was released) stay. */
static void to_none(struct lshard *s)
{
    struct lshard keep = *s;
    memset(s, 0, sizeof *s);
    s->max_epoch = keep.max_epoch;
    s->head = keep.head;
    s->tail = keep.tail;
    s->n = keep.n;
}

/* The handoff proper (the barrier is empty). */
static void do_handoff(struct ms_lease *l, int type, uint32_t shard,
                       struct lshard *s, uint64_t now)
{
    s->handoff = 0;
    s->window_on = 0;
    s->window_spent = 0;
    if (usable(s)) {
        l->nheld--;
        /* a renewal out stays out (its answer still extends the lease:
         * it is renewed until released, see tick_shard) */
        if (s->state != MS_LEASE_RENEWING)
            s->req = 0;
        s->state = MS_LEASE_STOPPING;
        emit(l, MS_LEASE_STOP_ENTITIES, type, shard, s, NULL, 0);
    } else if (l->partitioned || s->state == MS_LEASE_FENCED) {
        to_none(s); /* not released: it runs out */
    } else {
        s->state = MS_LEASE_RELEASING;
        s->req = ++l->next_req;
        s->req_sent_ms = now;
        emit(l, MS_LEASE_RELEASE, type, shard, s, NULL, 0);
    }
}

static void released(struct ms_lease *l, int type, uint32_t shard,
                     struct lshard *s, uint64_t now)
{
    int again = s->reassign;
    to_none(s);
    if (again) {
        s->backoff_ms = MS_LEASE_BACKOFF_MIN_MS;
        start_window(l, type, s, now);
        send_acquire(l, type, shard, s, now);
    }
}

/* The lease is held: what waited is delivered in order, then the shard
 * opens (or its handoff goes on). */
static void flush_open(struct ms_lease *l, int type, uint32_t shard,
                       struct lshard *s, uint64_t now)
{
    drain_barrier(l, type, shard, s, MS_LEASE_DELIVER, 0);
    if (s->n)
        return; /* no memory: ms_lease_tick goes on */
    if (s->handoff)
        do_handoff(l, type, shard, s, now);
    else
        emit(l, MS_LEASE_OPEN_SHARD, type, shard, s, NULL, 0);
}

static void now_held(struct ms_lease *l, int type, uint32_t shard,
                     struct lshard *s, uint64_t now)
{
    s->state = MS_LEASE_HELD;
    l->nheld++;
    s->window_on = 0;
    s->window_spent = 0;
    flush_open(l, type, shard, s, now);
}

/* ---- events -------------------------------------------------------------- */

int ms_lease_shard_assigned(struct ms_lease *l, int type, uint32_t shard,
                            uint64_t now_ms)
{
    int nomem = 0;
    struct lshard *s = shard_of(l, type, shard, 1, &nomem);
    if (!s)
        return nomem ? MS_ENOMEM : MS_EINVAL;
    if (s->state == MS_LEASE_RELEASING) {
        s->reassign = 1; /* its messages wait meanwhile */
        start_window(l, type, s, now_ms);
        return 0;
    }
    if (s->state == MS_LEASE_STOPPING) {
        /* the move was rolled back while the entities stopped (their
         * stop is called off): the lease is in use here again, not left
         * STOPPING (never released, never open again) */
        if (l->partitioned) {
            l->st.fenced++;
            s->state = MS_LEASE_FENCED;
            s->req = 0;
            start_window(l, type, s, now_ms);
            emit(l, MS_LEASE_STOP_ENTITIES, type, shard, s, NULL, 0);
        } else if (now_ms >= s->expiry_ms) {
            lose(l, type, shard, s, MS_LEASE_EXPIRED, now_ms);
        } else {
            s->state = s->req ? MS_LEASE_RENEWING : MS_LEASE_HELD;
            l->nheld++;
            flush_open(l, type, shard, s, now_ms);
        }
        return 0;
    }
    if (s->state != MS_LEASE_NONE) {
        if (s->handoff && s->state != MS_LEASE_STOPPING) {
            s->handoff = 0; /* it stays here after all */
            return 0;
        }
        return MS_EBUSY;
    }
    s->backoff_ms = MS_LEASE_BACKOFF_MIN_MS;
    start_window(l, type, s, now_ms);
    if (l->partitioned) {
        s->state = MS_LEASE_ACQUIRING; /* sent once all are reachable */
        s->retry_at_ms = now_ms;
        return 0;
    }
    send_acquire(l, type, shard, s, now_ms);
    return 0;
}

int ms_lease_handoff(struct ms_lease *l, int type, uint32_t shard,
                     uint64_t now_ms)
{
    struct lshard *s = shard_of(l, type, shard, 0, NULL);
    if (!s)
        return (type < 0 || type >= l->ntypes ||
                shard >= l->types[type].nshards) ? MS_EINVAL : MS_EBUSY;
    if (s->state == MS_LEASE_NONE || s->state == MS_LEASE_STOPPING ||
        s->state == MS_LEASE_RELEASING)
        return MS_EBUSY;
    s->handoff = 1;
    if (!s->n)
        do_handoff(l, type, shard, s, now_ms);
    return 0;
}

int ms_lease_entities_stopped(struct ms_lease *l, int type, uint32_t shard,
                              uint64_t now_ms)
{
    struct lshard *s = shard_of(l, type, shard, 0, NULL);
    if (!s)
        return (type < 0 || type >= l->ntypes ||
                shard >= l->types[type].nshards) ? MS_EINVAL : MS_EBUSY;
    if (s->state != MS_LEASE_STOPPING)
        return MS_EBUSY;
    if (l->partitioned) {
        to_none(s); /* not released to a side that may be alive */
        return 0;
    }
    s->state = MS_LEASE_RELEASING;
    s->req = ++l->next_req;
    s->req_sent_ms = now_ms;
    return emit(l, MS_LEASE_RELEASE, type, shard, s, NULL, 0);
}

void ms_lease_member_unreachable(struct ms_lease *l, uint64_t now_ms)
{
    l->partitioned = 1;
    for (int t = 0; t < l->ntypes; t++) {
        struct ltype *lt = &l->types[t];
        for (uint32_t i = 0; lt->shards && i < lt->nshards; i++) {
            struct lshard *s = &lt->shards[i];
            if (usable(s)) {
                l->nheld--;
                l->st.fenced++;
                /* a renewal out may have been granted: the lease may
                 * live until a duration after it was sent */
                uint64_t d = lt->s.duration_ms;
                if (s->state == MS_LEASE_RENEWING &&
                    s->req_sent_ms + d > s->expiry_ms)
                    s->expiry_ms = s->req_sent_ms + d;
                s->state = MS_LEASE_FENCED;
                s->req = 0; /* a renewal's answer is stale now */
                start_window(l, t, s, now_ms);
                emit(l, MS_LEASE_STOP_ENTITIES, t, i, s, NULL, 0);
            } else if (s->state == MS_LEASE_ACQUIRING) {
                s->req = 0; /* not taken now, even if granted */
            }
        }
    }
}

void ms_lease_members_reachable(struct ms_lease *l, uint64_t now_ms)
{
    if (!l->partitioned)
        return;
    l->partitioned = 0;
    for (int t = 0; t < l->ntypes; t++) {
        struct ltype *lt = &l->types[t];
        for (uint32_t i = 0; lt->shards && i < lt->nshards; i++) {
            struct lshard *s = &lt->shards[i];
            if (s->state == MS_LEASE_FENCED || s->state == MS_LEASE_LOST ||
                s->state == MS_LEASE_EXPIRED ||
                (s->state == MS_LEASE_ACQUIRING && !s->req)) {
                s->backoff_ms = MS_LEASE_BACKOFF_MIN_MS;
                send_acquire(l, t, i, s, now_ms);
            }
        }
    }
}

int ms_lease_on_answer(struct ms_lease *l, const struct ms_lease_answer *a,
                       uint64_t now_ms)
{
    if (a->kind < MS_LEASE_ANS_ACQUIRED || a->kind > MS_LEASE_ANS_DB_ERROR)
        return MS_EINVAL;
    struct lshard *s = shard_of(l, a->type, a->shard, 0, NULL);
    if (!s) {
        if (a->type < 0 || a->type >= l->ntypes ||
            a->shard >= l->types[a->type].nshards)
            return MS_EINVAL;
        l->st.stale_answers++;
        return 0;
    }
    if (!a->req || a->req != s->req) {
        l->st.stale_answers++;
        return 0;
    }
    int type = a->type;
    uint32_t shard = a->shard;
    /* what the lease has left, on the database's clock; never more than
     * the duration asked for (a clock or a row gone wrong) */
    int64_t left = a->expires_at_ms - a->db_now_ms;
    if (left > (int64_t)l->types[type].s.duration_ms)
        left = (int64_t)l->types[type].s.duration_ms;
    if (a->kind == MS_LEASE_ANS_DB_ERROR)
        l->st.db_errors++;
    switch (s->state) {
    case MS_LEASE_ACQUIRING:
        if (a->kind == MS_LEASE_ANS_ACQUIRED) {
            if (a->epoch == 0 || a->epoch < s->max_epoch) {
                l->st.epoch_regressions++;
                acquire_failed(l, type, s, now_ms, 0);
            } else if (left <= 0 ||
                       now_ms >= s->req_sent_ms + (uint64_t)left) {
                /* granted, but run out by the time the answer is read:
                 * not held (what waits is not delivered on it) */
                acquire_failed(l, type, s, now_ms, 0);
            } else {
                l->st.acquired++;
                s->epoch = s->max_epoch = a->epoch;
                s->expiry_ms = s->req_sent_ms + (uint64_t)left;
                s->renew_at_ms = s->req_sent_ms +
                                 l->types[type].s.renew_interval_ms;
                s->req = 0;
                s->backoff_ms = MS_LEASE_BACKOFF_MIN_MS;
                now_held(l, type, shard, s, now_ms);
            }
        } else if (a->kind == MS_LEASE_ANS_REFUSED) {
            l->st.refused++;
            acquire_failed(l, type, s, now_ms, left > 0 ? (uint64_t)left : 0);
        } else {
            acquire_failed(l, type, s, now_ms, 0);
        }
        break;
    case MS_LEASE_RENEWING:
        if (now_ms >= s->expiry_ms) {
            /* read after the lease ran out here (no tick in between):
             * too late, whatever it says; the entities stop at once */
            lose(l, type, shard, s, MS_LEASE_EXPIRED, now_ms);
        } else if (a->kind == MS_LEASE_ANS_RENEWED && left > 0 &&
            (!a->epoch || a->epoch == s->epoch)) {
            l->st.renewed++;
            s->expiry_ms = s->req_sent_ms + (uint64_t)left;
            s->renew_at_ms = s->req_sent_ms +
                             l->types[type].s.renew_interval_ms;
            s->req = 0;
            s->state = MS_LEASE_HELD;
        } else {
            if (a->kind == MS_LEASE_ANS_RENEWED && a->epoch &&
                a->epoch != s->epoch)
                l->st.epoch_regressions++;
            lose(l, type, shard, s, MS_LEASE_LOST, now_ms);
        }
        break;
    case MS_LEASE_STOPPING:
        /* a renewal while the entities finish: it extends the lease; a
         * refused or failed one lets it run out (their writes are then
         * refused) */
        if (a->kind == MS_LEASE_ANS_RENEWED && left > 0 &&
            now_ms < s->expiry_ms && (!a->epoch || a->epoch == s->epoch)) {
            l->st.renewed++;
            s->expiry_ms = s->req_sent_ms + (uint64_t)left;
            s->renew_at_ms = s->req_sent_ms +
                             l->types[type].s.renew_interval_ms;
        } else if (a->kind == MS_LEASE_ANS_DB_ERROR) {
            s->renew_at_ms = now_ms + l->types[type].s.renew_interval_ms;
        } else {
            s->renew_at_ms = s->expiry_ms; /* not ours: never again */
        }
        s->req = 0;
        break;
    case MS_LEASE_RELEASING:
        if (a->kind == MS_LEASE_ANS_RELEASED)
            l->st.released++;
        released(l, type, shard, s, now_ms);
        break;
    default:
        l->st.stale_answers++;
        break;
    }
    return 0;
}

static void tick_shard(struct ms_lease *l, int type, uint32_t shard,
                       struct lshard *s, uint64_t now)
{
    switch (s->state) {
    case MS_LEASE_ACQUIRING:
        if (s->req && now - s->req_sent_ms >= MS_LEASE_REQUEST_TIMEOUT_MS) {
            acquire_failed(l, type, s, now, 0);
        } else if (!s->req && !l->partitioned && now >= s->retry_at_ms) {
            l->st.retries++;
            send_acquire(l, type, shard, s, now);
        }
        break;
    case MS_LEASE_HELD:
    case MS_LEASE_RENEWING:
        if (now >= s->expiry_ms) {
            lose(l, type, shard, s, MS_LEASE_EXPIRED, now);
        } else if (s->state == MS_LEASE_RENEWING) {
            /* no answer for a whole interval: ask again (the first
             * answer is stale from now on); the expiry stops it */
            if (now - s->req_sent_ms >=
                l->types[type].s.renew_interval_ms) {
                l->st.retries++;
                s->req = ++l->next_req;
                s->req_sent_ms = now;
                emit(l, MS_LEASE_RENEW, type, shard, s, NULL, 0);
            }
        } else if (now >= s->renew_at_ms) {
            s->state = MS_LEASE_RENEWING;
            s->req = ++l->next_req;
            s->req_sent_ms = now;
            emit(l, MS_LEASE_RENEW, type, shard, s, NULL, 0);
        }
        break;
    case MS_LEASE_STOPPING:
        /* a handoff's entities finish what they accepted: the lease is
         * theirs until released, renewed as when held (a long drain must
         * not run it out); nothing is renewed while a member is
         * unreachable, nor once it ran out */
        if (l->partitioned || now >= s->expiry_ms)
            break;
        if (s->req ? now - s->req_sent_ms >=
                         l->types[type].s.renew_interval_ms
                   : now >= s->renew_at_ms) {
            if (s->req)
                l->st.retries++;
            s->req = ++l->next_req;
            s->req_sent_ms = now;
            emit(l, MS_LEASE_RENEW, type, shard, s, NULL, 0);
        }
        break;
    case MS_LEASE_LOST:
    case MS_LEASE_EXPIRED:
        if (!l->partitioned && now >= s->retry_at_ms) {
            l->st.retries++;
            send_acquire(l, type, shard, s, now);
        }
        break;
    case MS_LEASE_FENCED:
        if (now >= s->expiry_ms) {
            l->st.expired++;
            s->state = MS_LEASE_EXPIRED; /* the entities stopped already */
        }
        break;
    case MS_LEASE_RELEASING:
        if (now - s->req_sent_ms >= MS_LEASE_REQUEST_TIMEOUT_MS)
            released(l, type, shard, s, now); /* it runs out anyway */
        break;
    default:
        break;
    }
    if (s->window_on && !s->window_spent && !usable(s) &&
        now >= s->window_end_ms) {
        s->window_spent = 1;
        drain_barrier(l, type, shard, s, MS_LEASE_REJECT, MS_ELEASE);
    }
    if (usable(s) && s->n) /* a DELIVER lacked memory */
        flush_open(l, type, shard, s, now);
    if (s->handoff && !s->n)
        do_handoff(l, type, shard, s, now);
}

void ms_lease_tick(struct ms_lease *l, uint64_t now_ms)
{
    for (int t = 0; t < l->ntypes; t++) {
        struct ltype *lt = &l->types[t];
        for (uint32_t i = 0; lt->shards && i < lt->nshards; i++)
            if (lt->shards[i].state != MS_LEASE_NONE)
                tick_shard(l, t, i, &lt->shards[i], now_ms);
    }
}

/* ---- queries ------------------------------------------------------------- */

int ms_lease_state(const struct ms_lease *l, int type, uint32_t shard)
{
    const struct lshard *s = cshard(l, type, shard);
    return s ? s->state : MS_LEASE_NONE;
}

uint64_t ms_lease_epoch(const struct ms_lease *l, int type, uint32_t shard)
{
    const struct lshard *s = cshard(l, type, shard);
    return s ? s->max_epoch : 0;
}

uint64_t ms_lease_usable_epoch(const struct ms_lease *l, int type,
                               uint32_t shard, uint64_t now_ms)
{
    const struct lshard *s = cshard(l, type, shard);
    /* STOPPING: a handoff's entities finish what they accepted, and the
     * lease is still theirs until it is released */
    if (!s || (!usable(s) && s->state != MS_LEASE_STOPPING) ||
        now_ms >= s->expiry_ms)
        return 0;
    return s->epoch;
}

uint32_t ms_lease_waiting(const struct ms_lease *l, int type, uint32_t shard)
{
    const struct lshard *s = cshard(l, type, shard);
    return s ? s->n : 0;
}

uint32_t ms_lease_held(const struct ms_lease *l)
{
    return l->nheld;
}

const struct ms_lease_stats *ms_lease_stats(const struct ms_lease *l)
{
    return &l->st;
}

const char *ms_lease_state_name(int state)
{
    static const char *const names[] = {
        "none", "acquiring", "held", "renewing", "lost",
        "expired", "fenced", "stopping", "releasing"};
    if (state < 0 || state > MS_LEASE_RELEASING)
        return "unknown";
    return names[state];
}
