/*
 * lalloc.c -- the allocator of the bridge's LuaJIT VM (see lalloc.h).
 *
 * LuaJIT's own allocator (lj_alloc.c, a dlmalloc) puts an 8-byte header
 * before each block, and gives memory back to the kernel as soon as a
 * collection leaves enough of it free at the top of a segment: the next
 * round of messages then faults those pages in again. A node's garbage is
 * a steady stream of a few small sizes (decoded messages, a ctx, a
 * reply), and an idle entity a few small blocks (its state's table and
 * hash part). Here blocks of up to MS_LALLOC_SMALL bytes come from slabs,
 * carved in 16-byte classes without a header (LuaJIT passes every block's
 * size back when it frees or resizes it), and go to their class's free
 * list when freed; larger ones are libc's, which coalesces them and gives
 * memory back. Slabs are freed with the allocator, after lua_close, and a
 * class's free blocks serve that class only: what a node holds in slabs
 * is at most the sum of each class's peak, so the classes stop at 128
 * bytes (8 of them; with 33, up to 512, a mix of sizes that drifted held
 * 118 MB of slabs over a 0.1 MB live heap). README "The VM's allocator".
 */
#include "lalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CLASS_SHIFT 4
#define NCLASS ((MS_LALLOC_SMALL >> CLASS_SHIFT) + 1)

struct ms_lalloc {
    void *free[NCLASS];   /* per class, a list through each block's word */
    char *bump, *end;     /* what is left of the newest slab */
    void *slabs;          /* every slab, through its first word */
    size_t slab_bytes;    /* all slabs, for a test's figures */
};

static inline unsigned class_of(size_t size)
{
    return (unsigned)((size + (1u << CLASS_SHIFT) - 1) >> CLASS_SHIFT);
}

/* Puts the 16-byte-aligned bytes from p to end on the free lists,
 * largest class first. */
static void carve(struct ms_lalloc *a, char *p, char *end)
{
    while ((size_t)(end - p) >= (1u << CLASS_SHIFT)) {
        size_t left = (size_t)(end - p);
        unsigned c = left > MS_LALLOC_SMALL ? class_of(MS_LALLOC_SMALL)
                                            : (unsigned)(left >> CLASS_SHIFT);
        *(void **)p = a->free[c];
        a->free[c] = p;
        p += (size_t)c << CLASS_SHIFT;
    }
}

/* Puts the rest of the newest slab on the free lists, so that nothing
 * carved is lost when a new slab starts. */
static void retire_rest(struct ms_lalloc *a)
{
    carve(a, a->bump, a->end);
    a->bump = a->end;
}

static void *small_alloc(struct ms_lalloc *a, unsigned c)
{
    void *p = a->free[c];
    if (p) {
        void *next = *(void **)p;
        a->free[c] = next;
        /* the class's next block, written by its next allocation: a
         * free block is cold (the collector's sweep freed it long ago) */
        __builtin_prefetch(next, 1);
        return p;
    }
    size_t size = (size_t)c << CLASS_SHIFT;
    if ((size_t)(a->end - a->bump) < size) {
        retire_rest(a);
        char *s = malloc(MS_LALLOC_SLAB);
        if (!s)
            return NULL;
        *(void **)s = a->slabs;
        a->slabs = s;
        a->slab_bytes += MS_LALLOC_SLAB;
        /* the link takes the first class's place: blocks stay aligned */
        a->bump = s + (1u << CLASS_SHIFT);
        a->end = s + MS_LALLOC_SLAB;
    }
    p = a->bump;
    a->bump += size;
    return p;
}

static inline void small_free(struct ms_lalloc *a, void *p, unsigned c)
{
    *(void **)p = a->free[c];
    a->free[c] = p;
}

/* A shrink into a class whose block cannot be had (out of memory for a
 * new slab): done within the old block instead, for a shrink must not
 * fail. LuaJIT shrinks inside the collector (a thread's stack while it
 * marks the thread, its temporary buffer in the atomic phase), where a
 * memory error corrupts the thread being marked (a suspended coroutine
 * resumed its error as a function) and escapes lua_gc; libc's realloc
 * and LuaJIT's own allocator shrink in place. A class's block keeps its
 * head and gives its tail to the tail's class. A libc block becomes a
 * slab of its own: its first class holds the link (the contents move up
 * one class), the rest goes to the free lists; NULL only when it has no
 * room for that (a shrink by less than 16 bytes across MS_LALLOC_SMALL,
 * which LuaJIT, halving, does not do). */
static void *shrink_here(struct ms_lalloc *a, void *ptr, size_t osize,
                         size_t nsize)
{
    size_t keep = (size_t)class_of(nsize) << CLASS_SHIFT;
    char *p = ptr;
    if (osize <= MS_LALLOC_SMALL) {
        carve(a, p + keep, p + ((size_t)class_of(osize) << CLASS_SHIFT));
        return p;
    }
    if (osize < keep + (1u << CLASS_SHIFT))
        return NULL;
    memmove(p + (1u << CLASS_SHIFT), p, nsize);
    *(void **)p = a->slabs;
    a->slabs = p;
    a->slab_bytes += osize;
    carve(a, p + (1u << CLASS_SHIFT) + keep, p + osize);
    return p + (1u << CLASS_SHIFT);
}

void *ms_lalloc_f(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct ms_lalloc *a = ud;
    if (!ptr) {
        if (nsize == 0)
            return NULL;
        return nsize <= MS_LALLOC_SMALL ? small_alloc(a, class_of(nsize))
                                        : malloc(nsize);
    }
    if (nsize == 0) {
        if (osize <= MS_LALLOC_SMALL)
            small_free(a, ptr, class_of(osize));
        else
            free(ptr);
        return NULL;
    }
    if (osize > MS_LALLOC_SMALL && nsize > MS_LALLOC_SMALL)
        return realloc(ptr, nsize);
    if (osize <= MS_LALLOC_SMALL && nsize <= MS_LALLOC_SMALL &&
        class_of(osize) == class_of(nsize))
        return ptr;
    void *n = nsize <= MS_LALLOC_SMALL ? small_alloc(a, class_of(nsize))
                                       : malloc(nsize);
    if (!n && nsize < osize)
        return shrink_here(a, ptr, osize, nsize);
    if (!n)
        return NULL; /* the old block stays LuaJIT's, as realloc's would */
    memcpy(n, ptr, osize < nsize ? osize : nsize);
    if (osize <= MS_LALLOC_SMALL)
        small_free(a, ptr, class_of(osize));
    else
        free(ptr);
    return n;
}

struct ms_lalloc *ms_lalloc_new(void)
{
    return calloc(1, sizeof(struct ms_lalloc));
}

void ms_lalloc_free(struct ms_lalloc *a)
{
    if (!a)
        return;
    void *s = a->slabs;
    while (s) {
        void *next = *(void **)s;
        free(s);
        s = next;
    }
    free(a);
}

size_t ms_lalloc_slab_bytes(const struct ms_lalloc *a)
{
    return a ? a->slab_bytes : 0;
}
