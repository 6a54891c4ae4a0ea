/*
 * running.h -- what the loop thread runs now, published for the watchdog
 * thread (runtime/io/watchdog.c) without a lock.
 *
 * LuaJIT cannot preempt compiled code, so a handler stuck in a loop holds
 * the loop thread for good. The bridge publishes here, per delivery, which
 * handler (or which other Lua code) it enters; the watchdog reads it from
 * its own thread and sees when it stops changing.
 *
 * A sequence lock: the one writer (the loop thread) makes `seq` odd,
 * writes, and makes it even again; a reader retries until it read the same
 * even `seq` before and after the fields. Every field is a relaxed atomic,
 * so a torn read is detected, never undefined; on x86 the writer's
 * stores and fences compile to plain moves. `seq` also is the progress
 * counter: it moves on at every publication.
 */
#ifndef MS_CORE_RUNNING_H
#define MS_CORE_RUNNING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
    MS_RUN_IDLE,        /* no Lua runs: the loop is free */
    MS_RUN_HANDLER,     /* a handler of entity (type, shard, text = id) */
    MS_RUN_PARTITIONER, /* the partitioner of `type` for text = id */
    MS_RUN_LUA          /* other Lua code, text names it */
};

#define MS_RUNNING_TEXT_MAX 128 /* bytes of an id or label kept */

struct ms_running {
    _Atomic uint32_t seq;    /* odd while written; moves on every time */
    _Atomic int kind;        /* MS_RUN_* */
    _Atomic int type;        /* entity type index, or -1 */
    _Atomic uint32_t shard;
    _Atomic uint32_t len;    /* the whole text's length (may exceed MAX) */
    _Atomic uint64_t since_ns; /* when it began, CLOCK_MONOTONIC_COARSE */
    _Atomic uint64_t text[MS_RUNNING_TEXT_MAX / 8];
};

/* A consistent copy, for the reader. */
struct ms_running_view {
    uint32_t seq;
    int kind, type;
    uint32_t shard;
    uint32_t len;            /* the whole text's length */
    uint64_t since_ns;
    char text[MS_RUNNING_TEXT_MAX]; /* min(len, MAX) bytes of it */
};

/* The k bytes at p (1 <= k <= 8), zero-padded, as the word whose memory
 * holds them in order; reads no byte outside p[0..k). Fixed-size loads
 * instead of a memcpy of k bytes: this runs once per message. */
static inline uint64_t ms__running_word(const char *p, size_t k)
{
    uint64_t w = 0;
    if (k == 8) {
        memcpy(&w, p, 8);
        return w;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const unsigned char *u = (const unsigned char *)p;
    if (k >= 4) { /* two loads that overlap in the middle */
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + k - 4, 4);
        return a | (uint64_t)b << ((k - 4) * 8);
    }
    return u[0] | (uint64_t)u[k / 2] << (k / 2 * 8) |
           (uint64_t)u[k - 1] << ((k - 1) * 8);
#else
    memcpy(&w, p, k);
    return w;
#endif
}

/* Publishes that `kind` runs from `since_ns` on (loop thread only).
 * `text` (an id or a label, `len` bytes) is copied up to
 * MS_RUNNING_TEXT_MAX bytes. */
static inline void ms_running_set(struct ms_running *r, int kind, int type,
                                  uint32_t shard, const char *text,
                                  size_t len, uint64_t since_ns)
{
    uint32_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&r->kind, kind, memory_order_relaxed);
    atomic_store_explicit(&r->type, type, memory_order_relaxed);
    atomic_store_explicit(&r->shard, shard, memory_order_relaxed);
    atomic_store_explicit(&r->len, (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&r->since_ns, since_ns, memory_order_relaxed);
    size_t n = len < MS_RUNNING_TEXT_MAX ? len : MS_RUNNING_TEXT_MAX;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        atomic_store_explicit(&r->text[i / 8], ms__running_word(text + i, 8),
                              memory_order_relaxed);
    if (i < n)
        atomic_store_explicit(&r->text[i / 8],
                              ms__running_word(text + i, n - i),
                              memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 2, memory_order_release);
}

/* Publishes that no Lua runs (loop thread only). */
static inline void ms_running_idle(struct ms_running *r)
{
    uint32_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&r->kind, MS_RUN_IDLE, memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 2, memory_order_release);
}

/* Whether the loop thread publishes anything now (loop thread only). */
static inline int ms_running_is_idle(const struct ms_running *r)
{
    return atomic_load_explicit(&r->kind, memory_order_relaxed) ==
           MS_RUN_IDLE;
}

/* Reads a consistent view (any thread). Returns 1, or 0 when the writer
 * kept changing it (try again later). */
static inline int ms_running_read(const struct ms_running *r,
                                  struct ms_running_view *v)
{
    for (int tries = 0; tries < 100; tries++) {
        uint32_t s = atomic_load_explicit(&r->seq, memory_order_acquire);
        if (s & 1)
            continue;
        v->kind = atomic_load_explicit(&r->kind, memory_order_relaxed);
        v->type = atomic_load_explicit(&r->type, memory_order_relaxed);
        v->shard = atomic_load_explicit(&r->shard, memory_order_relaxed);
        v->len = atomic_load_explicit(&r->len, memory_order_relaxed);
        v->since_ns =
            atomic_load_explicit(&r->since_ns, memory_order_relaxed);
        size_t n = v->len < MS_RUNNING_TEXT_MAX ? v->len
                                                : MS_RUNNING_TEXT_MAX;
        for (size_t i = 0; i < n; i += 8) {
            uint64_t w =
                atomic_load_explicit(&r->text[i / 8], memory_order_relaxed);
            memcpy(v->text + i, &w, n - i < 8 ? n - i : 8);
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&r->seq, memory_order_relaxed) == s) {
            v->seq = s;
            return 1;
        }
    }
    return 0;
}

#endif
