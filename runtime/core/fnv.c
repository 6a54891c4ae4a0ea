/*
 * fnv.c -- the default partitioner: 64-bit FNV-1a, identical to
 * lua/moonshard/partition.lua.
 */
#include "base.h"

uint64_t ms_fnv1a64(const void *p, size_t len)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint32_t ms_shard_of(const void *id, size_t len, uint32_t shard_count)
{
    return (uint32_t)(ms_fnv1a64(id, len) % shard_count);
}
