/*
 * queue.c -- the C half of the queue floor (bench/floor.lua `queue`): the
 * least a runtime of moonshard's shape must add to the bare floor. A
 * sender hands a message over as bytes and goes on; the handler runs
 * later, from a queue. So the sender hashes the id (FNV-1a, as the
 * runtime does), finds the entity in a C table, and copies the payload
 * into a FIFO slot; the Lua loop pops the slot, takes the payload as a
 * Lua string, decodes and calls receive on the entity's state. For an
 * ask it also copies the encoded reply back to the asker, found by the
 * slot's correlation id.
 *
 * Nothing else: no shards, no ownership, no activation, no passivation
 * timers, no active-entity limit, no statistics, no timeouts, no error
 * paths. It is a measured bound for this machine, not a runtime. Its
 * functions are found by the Lua side through the FFI (the bench is
 * built with its symbols exported).
 */
#include "bench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base.h"

#define QF_SLOTS 1024      /* a FIFO of this many messages */
#define QF_PAYLOAD 64      /* bytes of a slot's payload */
#define QF_REPLY 256       /* bytes of the asker's reply buffer */
/* the most ids: a handle is a uint32_t, and the table has twice as many
 * buckets as ids */
#define QF_MAX_IDS INT32_MAX

/* mirrored by bench/floor.lua's cdef */
struct ms_qf_msg {
    uint32_t h;
    uint32_t len;
    uint32_t corr;
    const char *payload;
};

struct qf_slot {
    uint32_t h;
    uint32_t len;
    uint32_t corr;
    char payload[QF_PAYLOAD];
};

struct qf_entity {
    uint64_t hash;
    uint32_t h; /* 1-based; 0: an empty bucket */
    uint32_t idlen;
    char id[24];
};

struct ms_qf {
    struct qf_entity *buckets;
    uint64_t mask;
    char (*ids)[24];
    uint8_t *idlen;
    long nids, next;
    struct qf_slot slots[QF_SLOTS];
    uint32_t head, tail;
    uint32_t next_corr;
    /* the asks waiting for their reply, by corr & (QF_SLOTS - 1): at most
     * QF_SLOTS - 1 are queued, so their (consecutive) corrs differ there */
    uint32_t pending[QF_SLOTS];
    uint64_t replies;
    char reply[QF_REPLY];
};

/* The fixed random order of the shuffled queue floor (Fisher-Yates with
 * xorshift64, a fixed seed: the same order each run): at[0..n) gets a
 * permutation of 0..n-1. bench/local.c sends its shuffled tells in it. */
void ms__qf_order(long *at, long n)
{
    for (long i = 0; i < n; i++)
        at[i] = i;
    uint64_t x = 88172645463325252ULL;
    for (long i = n - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        long j = (long)(x % (uint64_t)(i + 1));
        long t = at[i];
        at[i] = at[j];
        at[j] = t;
    }
}

/* A queue floor of nids entities "c-1".."c-<nids>" (1 <= nids <=
 * QF_MAX_IDS), or NULL (out of memory, or nids out of range). The
 * senders go round robin over them: in that order, or, when `shuffled`,
 * in ms__qf_order's (the entities' states are visited in another order
 * than they were made in, as in a runtime, where messages come in any
 * order). */
struct ms_qf *ms__qf_new(long nids, int shuffled)
{
    long *at = NULL;
    struct ms_qf *q = calloc(1, sizeof *q);
    if (!q || nids < 1 || nids > QF_MAX_IDS)
        goto fail;
    uint64_t cap = 1;
    while (cap < (uint64_t)nids * 2)
        cap <<= 1;
    q->mask = cap - 1;
    q->nids = nids;
    q->buckets = calloc(cap, sizeof *q->buckets);
    q->ids = calloc((size_t)nids, sizeof *q->ids);
    q->idlen = calloc((size_t)nids, 1);
    if (shuffled && (at = malloc((size_t)nids * sizeof *at)) != NULL)
        ms__qf_order(at, nids);
    if (!q->buckets || !q->ids || !q->idlen || (shuffled && !at))
        goto fail;
    /* the senders' i-th id is entity e's */
    for (long i = 0; i < nids; i++) {
        long e = at ? at[i] : i;
        int n = snprintf(q->ids[i], sizeof q->ids[i], "c-%ld", e + 1);
        q->idlen[i] = (uint8_t)n;
        uint64_t hash = ms_fnv1a64(q->ids[i], (size_t)n);
        uint64_t b = hash & q->mask;
        while (q->buckets[b].h)
            b = (b + 1) & q->mask;
        q->buckets[b].hash = hash;
        q->buckets[b].h = (uint32_t)(e + 1);
        q->buckets[b].idlen = (uint32_t)n;
        memcpy(q->buckets[b].id, q->ids[i], (size_t)n);
    }
    free(at);
    return q;
fail:
    free(at);
    ms__qf_free(q);
    return NULL;
}

void ms__qf_free(struct ms_qf *q)
{
    if (!q)
        return;
    free(q->buckets);
    free(q->ids);
    free(q->idlen);
    free(q);
}

/* The next k messages round robin over the ids, each as a sender hands
 * it over: hash the id's bytes, find its entity, copy the payload into
 * the FIFO. `ask`: each carries a correlation id, its ask waits for the
 * reply. Returns the number queued (0 when the FIFO, of QF_SLOTS - 1, is
 * full), or -1 when the payload is above QF_PAYLOAD bytes. */
int ms__qf_send(struct ms_qf *q, int k, const char *payload, uint32_t len,
                int ask)
{
    if (len > QF_PAYLOAD)
        return -1;
    int sent = 0;
    for (; sent < k; sent++) {
        uint32_t t = (q->tail + 1) & (QF_SLOTS - 1);
        if (t == q->head)
            break;
        long i = q->next;
        q->next = i + 1 == q->nids ? 0 : i + 1;
        const char *id = q->ids[i];
        uint32_t idlen = q->idlen[i];
        uint64_t hash = ms_fnv1a64(id, idlen);
        uint64_t b = hash & q->mask;
        while (q->buckets[b].h &&
               (q->buckets[b].hash != hash || q->buckets[b].idlen != idlen ||
                memcmp(q->buckets[b].id, id, idlen) != 0))
            b = (b + 1) & q->mask;
        struct qf_slot *s = &q->slots[q->tail];
        s->h = q->buckets[b].h;
        s->len = len;
        if (ask && ++q->next_corr == 0) /* 0 means a tell */
            q->next_corr = 1;
        s->corr = ask ? q->next_corr : 0;
        if (ask)
            q->pending[q->next_corr & (QF_SLOTS - 1)] = q->next_corr;
        memcpy(s->payload, payload, len);
        q->tail = t;
    }
    return sent;
}

/* Pops the next message into out: its entity's handle, or 0 when the
 * FIFO is empty. The payload stays valid until the next call. */
uint32_t ms__qf_next(struct ms_qf *q, struct ms_qf_msg *out)
{
    if (q->head == q->tail)
        return 0;
    struct qf_slot *s = &q->slots[q->head];
    q->head = (q->head + 1) & (QF_SLOTS - 1);
    out->h = s->h;
    out->len = s->len;
    out->corr = s->corr;
    out->payload = s->payload;
    return s->h;
}

/* The reply to ask `corr`, copied to its asker (a buffer that counts),
 * found by corr among the waiting asks; 0, or -1 when no ask waits for
 * it (a tell, or a second reply) or it is above QF_REPLY bytes. */
int ms__qf_reply(struct ms_qf *q, uint32_t corr, const char *json,
                 uint32_t len)
{
    uint32_t *waiting = &q->pending[corr & (QF_SLOTS - 1)];
    if (corr == 0 || *waiting != corr || len > QF_REPLY)
        return -1;
    *waiting = 0;
    memcpy(q->reply, json, len);
    q->replies++;
    return 0;
}

/* sizeof (struct ms_qf_msg): floor.lua refuses to run with a cdef that
 * differs (as host.lua does with the delivery) */
size_t ms__qf_msg_size(void)
{
    return sizeof(struct ms_qf_msg);
}

/* Replies the asker received (the Lua side checks it got every one). */
uint64_t ms__qf_replies(const struct ms_qf *q)
{
    return q->replies;
}
