/*
 * timerq.h -- a binary min-heap of deadlines (sans-IO). Owners embed a
 * struct ms_timer and find themselves again with container_of.
 */
#ifndef MS_CORE_TIMERQ_H
#define MS_CORE_TIMERQ_H

#include <stddef.h>
#include <stdint.h>

struct ms_timer {
    uint64_t due_ms;
    uint64_t seq;    /* insertion order: equal deadlines fire FIFO */
    uint32_t idx;    /* position in the heap + 1; 0 = not queued */
    int kind;        /* owner's tag */
};

struct ms_timerq {
    struct ms_timer **heap;
    uint32_t n, cap;
    uint64_t seq;
};

#define ms_container_of(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

void ms_timerq_init(struct ms_timerq *q);
/* Frees the heap array; the timers themselves belong to their owners. */
void ms_timerq_free(struct ms_timerq *q);
/* Queues `t` (borrowed until removed or popped). Returns 0 or MS_ENOMEM. */
int ms_timerq_push(struct ms_timerq *q, struct ms_timer *t, uint64_t due_ms);
/* Removes a queued timer; a no-op for one not queued. */
void ms_timerq_remove(struct ms_timerq *q, struct ms_timer *t);
/* The earliest timer, or NULL. */
struct ms_timer *ms_timerq_peek(const struct ms_timerq *q);
/* Removes and returns the earliest timer due at `now_ms`, or NULL. */
struct ms_timer *ms_timerq_pop_due(struct ms_timerq *q, uint64_t now_ms);

#endif
