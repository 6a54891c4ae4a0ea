/*
 * node_events.c -- the queue between membership events and the config's
 * on_member_event hook; see node_events.h.
 */
#include "node_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/log.h"

struct item {
    uint64_t seq;
    size_t len;
    char *json;
};

struct ms_node_events {
    uv_timer_t run;
    struct ms_bridge *b;
    struct item q[MS_NODE_EVENTS_QUEUE]; /* ring */
    size_t head, n;
    uint64_t dropped;
    int closing;
    void (*closed_cb)(void *);
    void *closed_data;
};

int ms_node_events_new(struct ms_node_events **out, uv_loop_t *loop,
                       struct ms_bridge *b)
{
    struct ms_node_events *ev = calloc(1, sizeof *ev);
    if (!ev)
        return MS_ENOMEM;
    ev->b = b;
    uv_timer_init(loop, &ev->run);
    ev->run.data = ev;
    *out = ev;
    return 0;
}

/* Calls the hook with up to `max` queued events, oldest first. */
static void run_some(struct ms_node_events *ev, size_t max)
{
    while (ev->n && max--) {
        struct item it = ev->q[ev->head];
        ev->head = (ev->head + 1) % MS_NODE_EVENTS_QUEUE;
        ev->n--;
        ms_bridge_member_event(ev->b, it.json, it.len);
        free(it.json);
    }
}

static void on_run(uv_timer_t *t)
{
    struct ms_node_events *ev = t->data;
    run_some(ev, MS_NODE_EVENTS_ROUND);
    if (ev->n && !ev->closing)
        uv_timer_start(&ev->run, on_run, 0, 0);
}

void ms_node_events_push(struct ms_node_events *ev, uint64_t seq,
                         const char *json, size_t len)
{
    if (!ev || ev->closing)
        return;
    char *copy = malloc(len + 1);
    if (!copy) {
        ev->dropped++;
        ms_log(MS_LOG_WARN, NULL, "membership event %llu not given to "
               "on_member_event: out of memory", (unsigned long long)seq);
        return;
    }
    memcpy(copy, json, len);
    copy[len] = 0;
    if (ev->n == MS_NODE_EVENTS_QUEUE) {
        struct item *old = &ev->q[ev->head];
        ev->dropped++;
        ms_log(MS_LOG_WARN, NULL, "membership event %llu not given to "
               "on_member_event: %d events wait for it already",
               (unsigned long long)old->seq, MS_NODE_EVENTS_QUEUE);
        free(old->json);
        ev->head = (ev->head + 1) % MS_NODE_EVENTS_QUEUE;
        ev->n--;
    }
    struct item *it = &ev->q[(ev->head + ev->n) % MS_NODE_EVENTS_QUEUE];
    it->seq = seq;
    it->len = len;
    it->json = copy;
    ev->n++;
    if (!uv_is_active((uv_handle_t *)&ev->run))
        uv_timer_start(&ev->run, on_run, 0, 0);
}

static void on_closed(uv_handle_t *h)
{
    struct ms_node_events *ev = h->data;
    void (*cb)(void *) = ev->closed_cb;
    void *data = ev->closed_data;
    free(ev);
    if (cb)
        cb(data);
}

void ms_node_events_close(struct ms_node_events *ev, void (*cb)(void *),
                          void *data)
{
    if (!ev || ev->closing)
        return;
    /* the events of the node's last moments (its own removal) still
     * reach the hook, but a hook that runs out of its budget here is
     * given no more of them: a stop waits at most one budget for the
     * hook, not one per queued event */
    struct ms_bridge_hook_stats before, now;
    memset(&before, 0, sizeof before);
    if (ev->b)
        ms_bridge_member_hook_stats(ev->b, &before);
    now = before;
    while (ev->n && now.timeouts == before.timeouts) {
        run_some(ev, 1);
        if (ev->b)
            ms_bridge_member_hook_stats(ev->b, &now);
    }
    if (ev->n) {
        ms_log(MS_LOG_WARN, NULL, "%zu membership events not given to "
               "on_member_event: the node stops and the hook ran past its "
               "budget", ev->n);
        ev->dropped += ev->n;
        while (ev->n) {
            free(ev->q[ev->head].json);
            ev->head = (ev->head + 1) % MS_NODE_EVENTS_QUEUE;
            ev->n--;
        }
    }
    ev->closing = 1;
    ev->closed_cb = cb;
    ev->closed_data = data;
    uv_close((uv_handle_t *)&ev->run, on_closed);
}

size_t ms_node_events_stats_json(struct ms_node_events *ev,
                                 struct ms_bridge *b, uint64_t made,
                                 char *buf, size_t len)
{
    struct ms_bridge_hook_stats hs;
    memset(&hs, 0, sizeof hs);
    if (b)
        ms_bridge_member_hook_stats(b, &hs);
    int n = snprintf(buf, len,
                     "\"member_events\":%llu,\"member_event_hook_calls\":%llu,"
                     "\"member_event_hook_errors\":%llu,"
                     "\"member_event_hook_timeouts\":%llu,"
                     "\"member_event_hook_slow\":%llu,"
                     "\"member_event_hook_dropped\":%llu",
                     (unsigned long long)made, (unsigned long long)hs.calls,
                     (unsigned long long)hs.errors,
                     (unsigned long long)hs.timeouts,
                     (unsigned long long)hs.slow,
                     (unsigned long long)(ev ? ev->dropped : 0));
    return n < 0 ? 0 : (size_t)n;
}
