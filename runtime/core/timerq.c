/*
 * timerq.c -- min-heap ordered by (due_ms, seq).
 */
#include "timerq.h"

#include <stdlib.h>

#include "base.h"

static int less(const struct ms_timer *a, const struct ms_timer *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

static void place(struct ms_timerq *q, uint32_t i, struct ms_timer *t)
{
    q->heap[i] = t;
    t->idx = i + 1;
}

static void sift_up(struct ms_timerq *q, uint32_t i)
{
    struct ms_timer *t = q->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!less(t, q->heap[p]))
            break;
        place(q, i, q->heap[p]);
        i = p;
    }
    place(q, i, t);
}

static void sift_down(struct ms_timerq *q, uint32_t i)
{
    struct ms_timer *t = q->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && less(q->heap[c + 1], q->heap[c]))
            c++;
        if (!less(q->heap[c], t))
            break;
        place(q, i, q->heap[c]);
        i = c;
    }
    place(q, i, t);
}

void ms_timerq_init(struct ms_timerq *q)
{
    q->heap = NULL;
    q->n = q->cap = 0;
    q->seq = 0;
}

void ms_timerq_free(struct ms_timerq *q)
{
    free(q->heap);
    ms_timerq_init(q);
}

int ms_timerq_push(struct ms_timerq *q, struct ms_timer *t, uint64_t due_ms)
{
    if (t->idx)
        ms_timerq_remove(q, t);
    if (q->n == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 64;
        struct ms_timer **h = realloc(q->heap, cap * sizeof *h);
        if (!h)
            return MS_ENOMEM;
        q->heap = h;
        q->cap = cap;
    }
    t->due_ms = due_ms;
    t->seq = ++q->seq;
    q->heap[q->n] = t;
    sift_up(q, q->n++);
    return 0;
}

void ms_timerq_remove(struct ms_timerq *q, struct ms_timer *t)
{
    if (!t->idx)
        return;
    uint32_t i = t->idx - 1;
    t->idx = 0;
    struct ms_timer *last = q->heap[--q->n];
    if (i == q->n)
        return;
    place(q, i, last);
    if (i > 0 && less(last, q->heap[(i - 1) / 2]))
        sift_up(q, i);
    else
        sift_down(q, i);
}

struct ms_timer *ms_timerq_peek(const struct ms_timerq *q)
{
    return q->n ? q->heap[0] : NULL;
}

struct ms_timer *ms_timerq_pop_due(struct ms_timerq *q, uint64_t now_ms)
{
    struct ms_timer *t = ms_timerq_peek(q);
    if (!t || t->due_ms > now_ms)
        return NULL;
    ms_timerq_remove(q, t);
    return t;
}
