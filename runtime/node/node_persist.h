/*
 * node_persist.h -- the node's side of persistent entities (issue 11):
 * the hooks of ms_bridge_set_persist, on the node's journal
 * (runtime/io/journal.h). A write carries the epoch of the shard's lease
 * as the region holds it now (ms_region_lease_epoch; 0, no usable lease,
 * fails the write with stale_owner without a round trip). The outcome
 * ends the entity's wait (ms_dispatch_ask_complete) and kicks the node.
 * Single-threaded: call everything on the loop's thread.
 */
#ifndef MS_NODE_PERSIST_H
#define MS_NODE_PERSIST_H

#include <stddef.h>

#include "../core/config.h"
#include "../core/dispatch.h"
#include "../io/journal.h"
#include "../io/router.h"
#include "../lua/bridge.h"

struct ms_node_persist;

/* Everything borrowed: d, router and j must outlive the result (j's
 * callbacks may run until the pool closed). `kick` runs after a wait
 * ended. NULL when out of memory. */
struct ms_node_persist *ms_node_persist_new(struct ms_dispatch *d,
                                            struct ms_router *router,
                                            struct ms_journal *j,
                                            const struct ms_config *cfg,
                                            void (*kick)(void *),
                                            void *kick_data);

/* The hooks for ms_bridge_set_persist (data: p). */
void ms_node_persist_hooks(struct ms_node_persist *p,
                           struct ms_bridge_persist *out);

/* Stops using d and router (the node closes): later outcomes are
 * dropped. p stays valid until ms_node_persist_free. */
void ms_node_persist_detach(struct ms_node_persist *p);

/* Deletes the operation ids older than the config's operation_retention
 * (issue 11 point 7), every half of it (at least 0.5 s, at most 60 s
 * apart); call it often (the node's idle tick). p may be NULL. */
void ms_node_persist_tick(struct ms_node_persist *p, uint64_t now_ms);

void ms_node_persist_free(struct ms_node_persist *p);

/* Writes the "persistence" object of /v1/stats: {"commits":..,
 * "events_written":..,"snapshots":..,"states_written":..,
 * "stale_refused":..,"conflicts":..,"db_errors":..,"recoveries":..,
 * "commit_latency_count":..,"commit_latency_sum_us":..,
 * "commit_latency_p50_us":..,"commit_latency_p99_us":..} (p50 and p99
 * over the last MS_JOURNAL_LAT_WINDOW commits), or
 * null when p is NULL. Returns the length it needs, like snprintf. */
size_t ms_node_persist_stats_json(const struct ms_node_persist *p,
                                  char *buf, size_t len);

#endif
