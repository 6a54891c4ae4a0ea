/*
 * strategy_view.h -- the coordinator's strategy callbacks on a node: the
 * DESIGN §3 views of a type and of a member as JSON, handed to the Lua
 * strategies (allocate, rebalance, eligible) through the router's
 * functions.
 */
#ifndef MS_IO_STRATEGY_VIEW_H
#define MS_IO_STRATEGY_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "../core/coordinator.h"
#include "router.h"

/* What the callbacks need; `data` of the coordinator's callbacks. */
struct ms_strategy {
    struct ms_cluster *c;            /* membership (borrowed) */
    const struct ms_config *cfg;     /* type names (borrowed) */
    ms_router_allocate_fn allocator; /* NULL: fewest shards first */
    ms_router_allocate_many_fn allocator_many; /* NULL: one by one */
    ms_router_rebalance_fn rebalancer; /* NULL: no voluntary moves */
    ms_router_eligible_fn eligibler; /* NULL: every member */
    void *data;                      /* passed to the three */
};

/* ms_coord_allocate_cb over the type's Lua strategy (moonshard.alloc).
 * Without an allocator it takes the host with the fewest shards,
 * non-leaving first, then the lowest uid. */
uint64_t ms_strategy_allocate(void *data, int type, uint32_t shard,
                              const struct ms_coord_view *view, char *err,
                              size_t errlen);

/* ms_coord_allocate_many_cb over the type's Lua strategy: -1 without an
 * allocator_many (or with no allocator). */
int ms_strategy_allocate_many(void *data, int type, const uint32_t *shards,
                              size_t n, const struct ms_coord_view *view,
                              uint64_t *out, char *err, size_t errlen);

/* ms_coord_rebalance_cb: the type's Lua rebalance. */
int ms_strategy_rebalance(void *data, int type,
                          const struct ms_coord_view *view, uint32_t *out,
                          size_t max, char *err, size_t errlen);

/* ms_coord_eligible_cb: may member `uid` own shards of `type` at all (the
 * strategy's `eligible`, e.g. role_aware's roles)? A shard on an
 * ineligible owner is moved whatever the rebalance policy. */
int ms_strategy_eligible(void *data, int type, uint64_t uid);

#endif
