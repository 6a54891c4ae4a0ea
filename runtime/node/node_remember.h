/*
 * node_remember.h -- the node's side of remember-entities (DESIGN.md
 * "Remember entities", issue 12): the write-behind machine
 * (core/remember.h) wired to the dispatcher, the region and a store per
 * type (memory, file: io/remember_file.h, postgres: io/remember_sql.h).
 *
 * - Recording: the dispatcher's observer reports every activation (once
 *   its init, and a persistent type's recovery, succeeded) and every
 *   passivation with its reason; the machine queues a start or a stop
 *   (an explicit stop, an idle one unless keep_on_idle), never blocking
 *   delivery. Its WRITE actions are carried out after the dispatch round
 *   (an idle handle), so the records of one round go out together.
 * - Shards: every tick (MS_NODE_REMEMBER_TICK_MS) the node asks the region
 *   which shards of remembered types serve here now
 *   (ms_region_shard_serving). A shard that starts serving is listed in
 *   its store and its ids are activated (eager start) through the router,
 *   at most MS_NODE_REMEMBER_START_PER_TICK a tick, behind whatever its
 *   FIFO already holds. Records of a shard whose listing is not in yet
 *   (PostgreSQL answers later, or the listing failed and is retried)
 *   wait in a bounded list (MS_NODE_REMEMBER_EARLY_MAX, then dropped and
 *   counted). A shard that stops serving stops its eager start; its
 *   queued records are still written, and the region holds the shard's
 *   STOPPED (and its lease) until they are (ms_region_set_stop_hold).
 * - Failures: a write or a listing that fails is logged and counted, and
 *   retried; with on_failure = "fail_closed" the shard's new messages
 *   are refused with remember_store_failed (ms_dispatch_shard_refuse)
 *   until ms_node_remember_clear or the shard moves.
 *
 * Single-threaded: call everything on the loop's thread.
 */
#ifndef MS_NODE_REMEMBER_H
#define MS_NODE_REMEMBER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../core/config.h"
#include "../core/dispatch.h"
#include "../io/pg.h"
#include "../io/router.h"

#define MS_NODE_REMEMBER_TICK_MS 10
#define MS_NODE_REMEMBER_START_PER_TICK 256  /* eager starts per tick */
#define MS_NODE_REMEMBER_EARLY_MAX 10000     /* records waiting for a
                                                shard's listing */
#define MS_NODE_REMEMBER_ACTIVATE_TIMEOUT_MS 60000
#define MS_NODE_REMEMBER_LOAD_RETRY_MS 1000  /* a failed listing again */

struct ms_node_remember;

/* Creates the node's side for the remembered types of cfg, or sets *out
 * to NULL when there is none. d, router, cfg and pg (NULL without a
 * database) are borrowed and must outlive it; `kick` runs after work was
 * given to the dispatcher. Returns 0, or a negative code with a message
 * in err (a store that cannot be opened). */
int ms_node_remember_new(struct ms_node_remember **out, uv_loop_t *loop,
                         struct ms_dispatch *d, struct ms_router *router,
                         const struct ms_config *cfg, struct ms_pg *pg,
                         void (*kick)(void *), void *kick_data, char *err,
                         size_t errlen);

/* The node stops: what is queued for the memory and file stores is
 * written now; then it stops observing and using d and router, and
 * closes its handles. `closed` runs once they are closed (then free).
 * NULL: no-op (closed is not called). */
void ms_node_remember_close(struct ms_node_remember *nr,
                            void (*closed)(void *), void *data);

void ms_node_remember_free(struct ms_node_remember *nr);

/* The operator clears a fail_closed shard (and retries a failed listing
 * now): 1 when it was failed, 0 when not, MS_ENOTYPE (no such type, or
 * not remembered), MS_EINVAL (shard out of range). nr may be NULL. */
int ms_node_remember_clear_shard(struct ms_node_remember *nr, const char *type,
                           size_t len, uint32_t shard);

/* Writes the "remember" object of /v1/stats (see README "Remember
 * entities"); {"types":{}} with zeros when nr is NULL. Returns the length
 * it needs, like snprintf. */
size_t ms_node_remember_stats_json(const struct ms_node_remember *nr,
                                   char *buf, size_t len);

#endif
