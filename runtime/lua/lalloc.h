/*
 * lalloc.h -- the allocator of the bridge's LuaJIT VM: headerless 16-byte
 * size classes for blocks up to MS_LALLOC_SMALL bytes, carved from slabs
 * it keeps until it is freed; libc's malloc above that. One VM (one
 * thread) an allocator. See lalloc.c for why.
 */
#ifndef MS_LUA_LALLOC_H
#define MS_LUA_LALLOC_H

#include <stddef.h>

#define MS_LALLOC_SMALL 128        /* the largest block a class holds */
#define MS_LALLOC_SLAB (256 << 10) /* the bytes of a slab */

struct ms_lalloc;

/* NULL when out of memory. */
struct ms_lalloc *ms_lalloc_new(void);
/* Frees every slab: after lua_close of the VM that used it. */
void ms_lalloc_free(struct ms_lalloc *a);
/* A lua_Alloc: lua_newstate(ms_lalloc_f, a). */
void *ms_lalloc_f(void *ud, void *ptr, size_t osize, size_t nsize);
/* The bytes of all slabs taken so far. */
size_t ms_lalloc_slab_bytes(const struct ms_lalloc *a);

#endif
