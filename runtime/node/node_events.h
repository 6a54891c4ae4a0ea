/*
 * node_events.h -- the node's side of membership events: each event the
 * cluster makes (runtime/core/mbevent.h) goes to the HTTP streams at once
 * and, through a bounded queue, to the config's on_member_event hook.
 *
 * The hook is not called where the event is made (inside the membership's
 * drain, which can run under a Lua call: a handler's send reaches the
 * router, the router the membership), but from a timer of its own, on the
 * loop, between messages, in event order. The queue holds at most
 * MS_NODE_EVENTS_QUEUE events; past it the oldest is dropped, logged and
 * counted (a hook far slower than membership changes).
 */
#ifndef MS_NODE_EVENTS_H
#define MS_NODE_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../lua/bridge.h"

#define MS_NODE_EVENTS_QUEUE 1024 /* events waiting for the hook */
#define MS_NODE_EVENTS_ROUND 64   /* hook calls per loop turn */

struct ms_node_events;

/* Starts the hook's side for bridge `b` (borrowed, outlives it). 0 and
 * *out, or MS_ENOMEM. */
int ms_node_events_new(struct ms_node_events **out, uv_loop_t *loop,
                       struct ms_bridge *b);

/* Queues event `seq` (json borrowed, copied) for the hook. ev may be NULL
 * (no hook): counted only. */
void ms_node_events_push(struct ms_node_events *ev, uint64_t seq,
                         const char *json, size_t len);

/* Calls the hook with every event still queued, then closes; `cb(data)`
 * runs once the timer is closed and ev freed. ev NULL: no-op, no cb. */
void ms_node_events_close(struct ms_node_events *ev, void (*cb)(void *),
                          void *data);

/* The counters as JSON fields (no braces), whatever fits into buf; returns
 * the length of the whole text. ev and b may be NULL (zeros). */
size_t ms_node_events_stats_json(struct ms_node_events *ev,
                                 struct ms_bridge *b, uint64_t made,
                                 char *buf, size_t len);

#endif
