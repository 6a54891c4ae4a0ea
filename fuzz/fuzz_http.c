/*
 * fuzz_http.c -- libFuzzer target of the HTTP gateway (io/http_conn.c and
 * io/http.c over http-parser): the request path from a client's bytes to
 * a routed message, over a fake node.
 *
 * The gateway has no sans-IO entry (its parser callbacks live on a libuv
 * connection), so each input is sent on one real connection to a gateway
 * listening on 127.0.0.1 (port chosen by the system), in this process's
 * one loop. The input's first byte picks when the client closes its side:
 * even, right after the bytes (the node sees the request and the EOF
 * together: a pending ask then ends on a closed connection); odd, once
 * the first response bytes arrive or 5 ms passed (so asks are answered on
 * a live connection). The fake node answers every endpoint, asks a loop
 * turn later with the request's body as the reply (or as an error payload
 * when the body starts with 'E'), and counts nothing: the sanitizers and
 * the gateway's own checks are the judges. Each input ends when both ends
 * of the connection are closed and no ask is pending.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/core/errors.h"
#include "../runtime/core/log.h"
#include "../runtime/io/http.h"

#define MAX_PENDING 16

/* ---- the fake node ---- */

struct pending {
    ms_ask_cb cb;
    void *data;
    char *body;
    size_t len;
    uv_timer_t timer;
    int used;
};

static uv_loop_t *loop;
static struct pending pend[MAX_PENDING];
static int npending;

static void on_answer(uv_timer_t *t)
{
    struct pending *p = t->data;
    /* the slot is free before the callback: the gateway may answer the
     * next pipelined request from it, which can take this very slot */
    char *body = p->body;
    size_t len = p->len;
    ms_ask_cb cb = p->cb;
    void *data = p->data;
    p->body = NULL;
    p->used = 0;
    npending--;
    if (len > 0 && body[0] == 'E')
        cb(data, MS_EHANDLER, body + 1, len - 1);
    else
        cb(data, 0, len ? body : "{}", len ? len : 2);
    free(body);
}

static int queue_answer(const char *json, size_t len, ms_ask_cb cb,
                        void *data)
{
    for (int i = 0; i < MAX_PENDING; i++) {
        struct pending *p = &pend[i];
        if (p->used)
            continue;
        p->body = malloc(len ? len : 1);
        if (!p->body)
            return MS_ENOMEM;
        if (len)
            memcpy(p->body, json, len);
        p->len = len;
        p->cb = cb;
        p->data = data;
        p->used = 1;
        npending++;
        uv_timer_start(&p->timer, on_answer, 0, 0);
        return 0;
    }
    return MS_EBUSY;
}

static int f_type(void *d, const char *name, size_t len)
{
    (void)d;
    return len == 7 && memcmp(name, "Counter", 7) == 0 ? 3 : MS_ENOTYPE;
}

static int f_check(void *d, const char *json, size_t len, char *err,
                   size_t errlen)
{
    (void)d;
    if (len > 0 && json[0] == '{')
        return 0;
    snprintf(err, errlen, "not an object");
    return MS_ENOTTABLE;
}

static int f_tell(void *d, int type, const char *id, size_t idlen,
                  const char *json, size_t len)
{
    (void)d, (void)type, (void)id, (void)idlen, (void)json;
    return len % 7 == 3 ? MS_EBUSY : 0;
}

static int f_ask(void *d, int type, const char *id, size_t idlen,
                 const char *json, size_t len, uint64_t timeout_ms,
                 ms_ask_cb cb, void *data)
{
    (void)d, (void)type, (void)id, (void)idlen, (void)timeout_ms;
    return queue_answer(json, len, cb, data);
}

static int f_activate(void *d, int type, const char *id, size_t idlen,
                      uint64_t timeout_ms, ms_ask_cb cb, void *data)
{
    (void)d, (void)type, (void)timeout_ms;
    if (idlen % 2)
        return MS_EUNAVAIL; /* refused: the callback is not called */
    return queue_answer(id, idlen, cb, data);
}

/* GET /v1/leases/{type}: refused for some names (no callback), else
 * answered later, as the node's database read is */
static int f_leases(void *d, const char *type, size_t len, ms_ask_cb cb,
                    void *data)
{
    (void)d;
    if (len % 3 == 0)
        return MS_ENOTYPE;
    if (len % 3 == 1)
        return MS_EINVAL;
    return queue_answer(type, len, cb, data);
}

static int f_stop(void *d, int type, const char *id, size_t idlen)
{
    (void)d, (void)type, (void)id;
    return idlen == 1 ? MS_EUNAVAIL : 0;
}

static int f_shard_of(void *d, int type, const char *id, size_t idlen,
                      uint32_t *shard)
{
    (void)d, (void)type, (void)id;
    *shard = (uint32_t)idlen % 16;
    return 0;
}

static size_t put(char *buf, size_t len, const char *text)
{
    size_t n = strlen(text);
    if (buf && len)
        snprintf(buf, len, "%s", text);
    return n;
}

static size_t f_stats(void *d, char *buf, size_t len)
{
    (void)d;
    return put(buf, len, "{\"routed\":5}");
}

static size_t f_members(void *d, char *buf, size_t len)
{
    (void)d;
    return put(buf, len, "{\"members\":[]}");
}

static size_t f_owner(void *d, int type, const char *id, size_t idlen,
                      char *buf, size_t len)
{
    (void)d, (void)type, (void)id, (void)idlen;
    return put(buf, len, "{\"shard\":7,\"owner\":null}");
}

static size_t f_allocations(void *d, int type, char *buf, size_t len)
{
    (void)d, (void)type;
    return put(buf, len, "{\"shards\":[]}");
}

static int f_call_lua(void *d, const char *module, const char *fn,
                      const char *arg, char **out, char *err, size_t errlen)
{
    (void)d, (void)module, (void)fn;
    if (arg && arg[0] == 'x') {
        snprintf(err, errlen, "/some/path/metrics.lua:3: no %s", arg);
        return MS_EHANDLER;
    }
    *out = strdup("# metrics\n");
    return *out ? 0 : MS_ENOMEM;
}

static int f_check_admin(void *d, const char *token, size_t len,
                         int loopback)
{
    (void)d, (void)token;
    return loopback && len != 3 ? 0 : MS_EINVAL;
}

static int f_leave(void *d)
{
    (void)d;
    return 0;
}

static int f_down(void *d, const char *address, int force)
{
    (void)d, (void)force;
    return address && address[0] == '1' ? 0 : MS_EINVAL;
}

static int f_move(void *d, const char *type, size_t len, uint32_t shard)
{
    (void)d, (void)type, (void)len;
    return shard > 15 ? MS_EINVAL : 0;
}

static int f_remember_clear(void *d, const char *type, size_t len,
                            uint32_t shard)
{
    (void)d, (void)type, (void)len;
    return shard > 15 ? MS_EINVAL : shard == 5 ? 1 : 0;
}

/* ---- the client ---- */

struct client {
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_write_t write;
    uv_shutdown_t shutdown;
    uv_timer_t timer;
    int wait;            /* close our side after the first answer bytes */
    int shut, closed, timer_closed;
    char rbuf[4096];
};

static struct ms_http *gateway;
static struct sockaddr_in addr;

static void on_closed(uv_handle_t *h)
{
    struct client *c = h->data;
    c->closed = 1;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct client *c = h->data;
    c->timer_closed = 1;
}

static void on_shutdown(uv_shutdown_t *r, int status)
{
    (void)r, (void)status;
}

static void shut(struct client *c)
{
    if (c->shut)
        return;
    c->shut = 1;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0
        && !uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *b)
{
    struct client *c = h->data;
    (void)want;
    b->base = c->rbuf;
    b->len = sizeof c->rbuf;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct client *c = s->data;
    (void)b;
    if (n < 0) {
        if (!uv_is_closing((uv_handle_t *)s))
            uv_close((uv_handle_t *)s, on_closed);
        return;
    }
    if (n > 0)
        shut(c);
}

static void on_written(uv_write_t *w, int status)
{
    struct client *c = w->data;
    if (status < 0) {
        if (!uv_is_closing((uv_handle_t *)&c->tcp))
            uv_close((uv_handle_t *)&c->tcp, on_closed);
        return;
    }
    if (!c->wait)
        shut(c);
}

static void on_wait_over(uv_timer_t *t)
{
    shut(t->data);
}

static void on_connect(uv_connect_t *r, int status)
{
    struct client *c = r->data;
    if (status < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_closed);
        return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void setup(void)
{
    ms_log_setup("fuzz", MS_LOG_ERROR + 1);
    loop = uv_default_loop();
    for (int i = 0; i < MAX_PENDING; i++) {
        uv_timer_init(loop, &pend[i].timer);
        pend[i].timer.data = &pend[i];
    }
    static struct ms_gateway gw = {
        .data = NULL, .name = "fuzz", .max_message = 4096,
        .timeout_ms = 1000, .connections = 4, .type = f_type,
        .check_message = f_check, .tell = f_tell, .ask = f_ask,
        .activate = f_activate, .stop = f_stop, .shard_of = f_shard_of,
        .stats_json = f_stats, .members_json = f_members,
        .owner_json = f_owner, .allocations_json = f_allocations,
        .call_lua = f_call_lua, .check_admin = f_check_admin,
        .leave = f_leave, .down = f_down, .move = f_move,
        .remember_clear = f_remember_clear, .leases = f_leases,
        .home = MS_FUZZ_HOME};
    char err[256];
    if (ms_http_start(&gateway, loop, &gw, "127.0.0.1", 0, err,
                      sizeof err) != 0) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        abort();
    }
    int port = atoi(strrchr(ms_http_address(gateway), ':') + 1);
    uv_ip4_addr("127.0.0.1", port, &addr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!loop)
        setup();
    if (size < 1)
        return 0;
    struct client c;
    memset(&c, 0, sizeof c);
    c.wait = data[0] & 1;
    uv_tcp_init(loop, &c.tcp);
    uv_timer_init(loop, &c.timer);
    c.tcp.data = c.timer.data = c.connect.data = c.write.data = &c;
    if (uv_tcp_connect(&c.connect, &c.tcp, (const struct sockaddr *)&addr,
                       on_connect) != 0)
        abort();
    uv_buf_t b = uv_buf_init((char *)data + 1, (unsigned)(size - 1));
    /* queued behind the connect, written once it is up */
    if (uv_write(&c.write, (uv_stream_t *)&c.tcp, &b, 1, on_written) != 0)
        abort();
    if (c.wait)
        uv_timer_start(&c.timer, on_wait_over, 5, 0);
    uint64_t conns = 1, timeouts, refused;
    while (!c.closed || conns > 0 || npending > 0) {
        uv_run(loop, UV_RUN_ONCE);
        ms_http_stats(gateway, &conns, &timeouts, &refused);
    }
    uv_close((uv_handle_t *)&c.timer, on_timer_closed);
    while (!c.timer_closed)
        uv_run(loop, UV_RUN_ONCE);
    return 0;
}
