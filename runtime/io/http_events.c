/*
 * http_events.c -- GET /v1/events: membership events as server-sent
 * events (text/event-stream), see http.h and README "Membership events".
 *
 * A stream is an HTTP connection whose request is answered forever: the
 * head goes out without a length (Connection: close: the body ends with
 * the connection), then a `snapshot` event -- the node's view of the
 * members as GET /v1/members writes it, numbered with the last event
 * published, so that the events after it are exactly those with a higher
 * id -- then each event as it is published:
 *
 *   id: <seq>\nevent: <kind>\ndata: <json>\n\n
 *
 * The connection stays in the gateway's ACTIVE class with no deadline
 * (http_conn.c, ms__http_conn_stream): it is neither evicted to make room
 * nor closed by limits.http_timeout, and reading goes on (input is
 * discarded) so that a client that goes away is seen at once. What keeps
 * it from holding the gateway: at most MS_HTTP_EVENT_STREAMS of them
 * and fewer than limits.http_connections (503 past it, counted), and a
 * send queue bound: a client that lets more than MS_HTTP_EVENT_BUFFER
 * bytes wait in libuv's write queue (the kernel's socket buffer is full)
 * is sent a last `cut_off` event and closed, counted. Writes never block the loop: they are queued.
 *
 * Each stream holds a reference on its connection, dropped when the
 * connection is found closing (on every publish and every keep-alive
 * tick) or when the gateway closes.
 */
#include "http_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define TICK_MS 1000 /* reaps closed streams; keep-alive when due */

static const char head[] =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/event-stream\r\n"
    "Cache-Control: no-cache\r\n"
    "X-Accel-Buffering: no\r\n"
    "Connection: close\r\n"
    "\r\n";

static uint64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

/* Drops stream i (its reference); the last one takes its place. */
static void drop(struct ms_http_events *ev, int i)
{
    struct conn *c = ev->streams[i];
    ev->streams[i] = ev->streams[--ev->nstreams];
    ev->streams[ev->nstreams] = NULL;
    conn_unref(c);
}

/* Drops the streams whose connection closed. */
static void reap(struct ms_http_events *ev)
{
    for (int i = ev->nstreams; i-- > 0;)
        if (ev->streams[i]->closing || ev->streams[i]->h == NULL)
            drop(ev, i);
}

/* Writes `text` to stream i; a client too far behind is cut off (and
 * dropped). Returns 0, or -1 when stream i was dropped. */
static int send_to(struct ms_http *h, int i, const char *text, size_t len)
{
    struct ms_http_events *ev = &h->ev;
    struct conn *c = ev->streams[i];
    if (c->closing) {
        drop(ev, i);
        return -1;
    }
    if (c->tcp.write_queue_size + len > MS_HTTP_EVENT_BUFFER) {
        char last[160];
        int n = snprintf(last, sizeof last,
                         ": too far behind; cut off\nevent: cut_off\n"
                         "data: {\"kind\":\"cut_off\",\"seq\":%llu}\n\n",
                         (unsigned long long)ev->last_seq);
        ev->cut_off++;
        ms__http_conn_write(c, last, (size_t)n);
        ms__http_conn_end(c);
        drop(ev, i);
        return -1;
    }
    if (ms__http_conn_write(c, text, len) < 0) {
        drop(ev, i);
        return -1;
    }
    c->stream_sent_ms = uv_now(h->loop);
    return 0;
}

void ms_http_event(struct ms_http *h, uint64_t seq, const char *kind,
                   const char *json, size_t len)
{
    if (h == NULL || h->closing)
        return;
    struct ms_http_events *ev = &h->ev;
    ev->last_seq = seq;
    ev->published++;
    if (ev->nstreams == 0)
        return;
    size_t cap = len + strlen(kind) + 64;
    char *text = malloc(cap);
    int n = text ? snprintf(text, cap, "id: %llu\nevent: %s\ndata: %.*s\n\n",
                            (unsigned long long)seq, kind, (int)len, json)
                 : -1;
    if (n < 0 || (size_t)n >= cap) {
        /* out of memory: no stream may miss an event silently, so each
         * is ended (counted as cut off); its client reconnects and gets
         * a new snapshot */
        free(text);
        while (ev->nstreams > 0) {
            ev->cut_off++;
            ms__http_conn_end(ev->streams[ev->nstreams - 1]);
            drop(ev, ev->nstreams - 1);
        }
        return;
    }
    for (int i = ev->nstreams; i-- > 0;)
        send_to(h, i, text, (size_t)n);
    free(text);
}

/* The snapshot event a new stream starts with. */
static char *snapshot(struct ms_http *h, size_t *len)
{
    const struct ms_gateway *gw = &h->gw;
    size_t need = gw->members_json(gw->data, NULL, 0);
    size_t cap = need + 256 + strlen(gw->name);
    char *text = malloc(cap);
    if (text == NULL)
        return NULL;
    int n = snprintf(text, cap,
                     "id: %llu\nevent: snapshot\ndata: {\"seq\":%llu,"
                     "\"kind\":\"snapshot\",\"time_ms\":%llu,\"node\":\"%s\","
                     "\"members\":",
                     (unsigned long long)h->ev.last_seq,
                     (unsigned long long)h->ev.last_seq,
                     (unsigned long long)wall_ms(), gw->name);
    if (n < 0 || (size_t)n + need + 4 > cap) {
        free(text);
        return NULL;
    }
    size_t o = (size_t)n;
    o += gw->members_json(gw->data, text + o, need + 1);
    memcpy(text + o, "}\n\n", 3);
    *len = o + 3;
    return text;
}

void ms__http_get_events(struct conn *c)
{
    struct ms_http *h = c->h;
    struct ms_http_events *ev = &h->ev;
    if (c->parser.method == HTTP_HEAD) {
        /* the head a GET gets, which has no length (a Content-Length: 0
         * would say the stream is empty), then the end */
        ms__http_conn_stream(c);
        if (ms__http_conn_write(c, head, sizeof head - 1) == 0)
            ms__http_conn_end(c);
        return;
    }
    reap(ev);
    /* streams are never evicted: they may not take every place of
     * limits.http_connections, one stays for other requests (which evict
     * an idle connection for it if need be) */
    int max = h->max_conns - 1 < MS_HTTP_EVENT_STREAMS ? h->max_conns - 1
                                                       : MS_HTTP_EVENT_STREAMS;
    if (ev->nstreams >= max) {
        ev->refused++;
        c->keep_alive = 0;
        respond_error(c, 503, "too_many_streams", "this node serves %d "
                      "event streams at most; try again later", max);
        return;
    }
    size_t slen;
    char *snap = snapshot(h, &slen);
    if (snap == NULL) {
        respond_error(c, 500, "internal", "out of memory");
        return;
    }
    ms__http_conn_stream(c);
    if (ms__http_conn_write(c, head, sizeof head - 1) < 0 ||
        ms__http_conn_write(c, snap, slen) < 0) {
        free(snap);
        return; /* closed */
    }
    free(snap);
    c->refs++;
    c->stream_sent_ms = uv_now(h->loop);
    ev->streams[ev->nstreams++] = c;
}

static void on_tick(uv_timer_t *t)
{
    struct ms_http *h = t->data;
    struct ms_http_events *ev = &h->ev;
    uint64_t now = uv_now(h->loop);
    static const char comment[] = ": keep-alive\n\n";
    for (int i = ev->nstreams; i-- > 0;) {
        struct conn *c = ev->streams[i];
        if (c->closing)
            drop(ev, i);
        else if (now - c->stream_sent_ms >= ev->keepalive_ms)
            send_to(h, i, comment, sizeof comment - 1);
    }
}

static void on_tick_closed(uv_handle_t *hd)
{
    ms__http_handle_closed(hd->data);
}

void ms__http_events_init(struct ms_http *h)
{
    h->ev.keepalive_ms = MS_HTTP_EVENT_KEEPALIVE_MS;
    uv_timer_init(h->loop, &h->ev.keepalive);
    h->ev.keepalive.data = h;
    h->handles++;
    uv_timer_start(&h->ev.keepalive, on_tick, TICK_MS, TICK_MS);
    uv_unref((uv_handle_t *)&h->ev.keepalive);
}

void ms__http_events_close(struct ms_http *h)
{
    /* the connections are closing (ms_http_close closed them all) */
    while (h->ev.nstreams > 0)
        drop(&h->ev, h->ev.nstreams - 1);
    uv_close((uv_handle_t *)&h->ev.keepalive, on_tick_closed);
}

void ms_http_event_stats(struct ms_http *h, uint64_t *streams,
                         uint64_t *cut_off, uint64_t *refused)
{
    *streams = h ? (uint64_t)h->ev.nstreams : 0;
    *cut_off = h ? h->ev.cut_off : 0;
    *refused = h ? h->ev.refused : 0;
}
