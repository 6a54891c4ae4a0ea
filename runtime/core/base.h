/*
 * base.h -- what every part of the core shares: the error codes, the id
 * limit, the shard hash, the node's counters and the ask callback (the
 * last two are part of the public API, runtime/moonshard.h). No I/O library: the core builds with libc and
 * libcrypto only (the ctest checks core-headers and core-symbols).
 */
#ifndef MS_CORE_BASE_H
#define MS_CORE_BASE_H

#include <stddef.h>
#include <stdint.h>

#include "errors.h"

#define MS_MAX_ID 512 /* bytes of an entity id */

/* The 64-bit FNV-1a hash of `len` bytes at `p`. */
uint64_t ms_fnv1a64(const void *p, size_t len);

/* The shard of an entity id: ms_fnv1a64(id) % shard_count. */
uint32_t ms_shard_of(const void *id, size_t len, uint32_t shard_count);

/* Counters of one node; all monotonic except active_entities. */
struct ms_stats {
    uint64_t routed;          /* tells and asks accepted */
    uint64_t delivered;       /* messages handed to a handler */
    uint64_t activations;
    uint64_t passivations;
    uint64_t active_entities; /* gauge */
    uint64_t handler_errors;
    uint64_t asks_started;
    uint64_t asks_timed_out;
    uint64_t overflows;       /* sends refused because a mailbox was full */
    uint64_t slow_handlers;
    uint64_t timers_fired;
    uint64_t shutdown_drops;  /* messages dropped because the node stopped */
    uint64_t handoff_drops;   /* reached a shard after its stop (failed) */
    uint64_t shards_stopped;  /* shard stops (handoff) finished */
    uint64_t limit_passivations; /* passivations for the active-entity
                                    limit (also in passivations) */
    uint64_t quiet_passivations; /* idle entities a handoff passivated
                                    without a delivery (also in
                                    passivations) */
};

/*
 * Called exactly once when an ask ends. `err` is 0 and `payload` the reply
 * JSON, or `err` is negative and `payload` a JSON object
 * {"code": ..., "message": ...} describing the failure. `payload` is borrowed
 * until the callback returns. The callback may call ms_node_tell/ask/stop
 * (they only enqueue) but must not free the node.
 */
typedef void (*ms_ask_cb)(void *data, int err, const char *payload,
                          size_t len);

#endif
