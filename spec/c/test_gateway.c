/* The HTTP gateway over a fake node (runtime/io/gateway.h): what each
 * endpoint asks of the node, with which arguments, and what it answers.
 * Real sockets on 127.0.0.1, one loop; no node, no Lua. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../runtime/core/log.h"
#include "../../runtime/io/http.h"
#include "../../runtime/io/http_conn.h" /* the keep-alive interval */
#include "check.h"

/* ---- the fake node -------------------------------------------------------- */

struct fake {
    uv_loop_t *loop;
    int tells, asks, activates, stops, leaves, downs, moves, admin_checks;
    int clears;               /* remember_clear calls */
    int clear_rc;             /* what remember_clear answers, if not 0 */
    int tell_rc;              /* what tell answers */
    int type;                 /* of the last call */
    char id[64];              /* the last id, decoded */
    char body[256];           /* the last payload */
    uint64_t timeout_ms;      /* of the last ask */
    char lua[128];            /* "module.fn" of the last call_lua */
    int admin_rc;             /* what check_admin answers */
    int leases;               /* leases calls */
    int leases_rc;            /* what leases answers at once, if not 0 */
    int leases_err;           /* the error its callback gets, if not 0 */
    ms_ask_cb cb;             /* the ask to answer */
    void *cb_data;
    uv_timer_t answer;
};

static void keep(char *dst, size_t cap, const char *s, size_t len)
{
    snprintf(dst, cap, "%.*s", (int)len, s);
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
    struct fake *f = d;
    f->tells++;
    f->type = type;
    keep(f->id, sizeof f->id, id, idlen);
    keep(f->body, sizeof f->body, json, len);
    return f->tell_rc;
}

static void on_answer(uv_timer_t *t)
{
    struct fake *f = t->data;
    static const char reply[] = "{\"n\":42}";
    f->cb(f->cb_data, 0, reply, sizeof reply - 1);
}

static int f_ask(void *d, int type, const char *id, size_t idlen,
                 const char *json, size_t len, uint64_t timeout_ms,
                 ms_ask_cb cb, void *data)
{
    struct fake *f = d;
    f->asks++;
    f->type = type;
    f->timeout_ms = timeout_ms;
    keep(f->id, sizeof f->id, id, idlen);
    keep(f->body, sizeof f->body, json, len);
    f->cb = cb; /* answered from the loop, never before this returns */
    f->cb_data = data;
    uv_timer_start(&f->answer, on_answer, 1, 0);
    return 0;
}

static int f_activate(void *d, int type, const char *id, size_t idlen,
                      uint64_t timeout_ms, ms_ask_cb cb, void *data)
{
    struct fake *f = d;
    f->activates++;
    (void)type, (void)id, (void)idlen, (void)timeout_ms, (void)cb;
    (void)data;
    return MS_EUNAVAIL; /* refused: the callback is not called */
}

static int f_stop(void *d, int type, const char *id, size_t idlen)
{
    struct fake *f = d;
    f->stops++;
    f->type = type;
    keep(f->id, sizeof f->id, id, idlen);
    return 0;
}

static int f_shard_of(void *d, int type, const char *id, size_t idlen,
                      uint32_t *shard)
{
    (void)d, (void)type, (void)id, (void)idlen;
    *shard = 7;
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

/* longer than the endpoint's first buffer: it must ask again */
static size_t f_allocations(void *d, int type, char *buf, size_t len)
{
    (void)d, (void)type;
    static char big[9000];
    if (!big[0]) {
        memset(big, ' ', sizeof big - 1);
        memcpy(big, "{\"shards\":[]}", 13);
    }
    return put(buf, len, big);
}

static int f_call_lua(void *d, const char *module, const char *fn,
                      const char *arg, char **out, char *err, size_t errlen)
{
    struct fake *f = d;
    (void)err, (void)errlen;
    snprintf(f->lua, sizeof f->lua, "%s.%s", module, fn);
    char text[128];
    snprintf(text, sizeof text, "metrics of %s\n", arg);
    *out = strdup(text);
    return 0;
}

static int f_check_admin(void *d, const char *token, size_t len,
                         int loopback)
{
    struct fake *f = d;
    f->admin_checks++;
    (void)token, (void)len, (void)loopback;
    return f->admin_rc;
}

static int f_leave(void *d)
{
    ((struct fake *)d)->leaves++;
    return 0;
}

static int f_down(void *d, const char *address, int force)
{
    struct fake *f = d;
    f->downs++;
    snprintf(f->body, sizeof f->body, "%s force=%d", address, force);
    return 0;
}

static int f_move(void *d, const char *type, size_t len, uint32_t shard)
{
    struct fake *f = d;
    f->moves++;
    snprintf(f->body, sizeof f->body, "%.*s/%u", (int)len, type, shard);
    return 0;
}

/* remember_clear: shard 5 of Counter is failed (1), shards past 15 are
 * out of range, any other is not failed (0); clear_rc overrides. */
static int f_remember_clear(void *d, const char *type, size_t len,
                            uint32_t shard)
{
    struct fake *f = d;
    f->clears++;
    snprintf(f->body, sizeof f->body, "%.*s/%u", (int)len, type, shard);
    if (f->clear_rc != 0)
        return f->clear_rc;
    return shard > 15 ? MS_EINVAL : shard == 5 ? 1 : 0;
}

static void on_leases_answer(uv_timer_t *t)
{
    struct fake *f = t->data;
    static const char rows[] = "{\"type\":\"Counter\",\"leases\":[]}";
    static const char why[] = "no connection to PostgreSQL: refused";
    if (f->leases_err)
        f->cb(f->cb_data, f->leases_err, why, sizeof why - 1);
    else
        f->cb(f->cb_data, 0, rows, sizeof rows - 1);
}

/* Known type "Counter" holds leases, "Plain" does not; answered from the
 * loop later, as the database would. */
static int f_leases(void *d, const char *type, size_t len, ms_ask_cb cb,
                    void *data)
{
    struct fake *f = d;
    f->leases++;
    keep(f->body, sizeof f->body, type, len);
    if (f->leases_rc != 0)
        return f->leases_rc;
    if (len == 5 && memcmp(type, "Plain", 5) == 0)
        return MS_EINVAL;
    if (f_type(d, type, len) < 0)
        return MS_ENOTYPE;
    f->cb = cb;
    f->cb_data = data;
    uv_timer_start(&f->answer, on_leases_answer, 1, 0);
    return 0;
}

/* ---- a client: one request, the whole response (Connection: close) -------- */

struct client {
    uv_tcp_t tcp;
    uv_connect_t conn;
    uv_write_t wr;
    const char *request;
    char resp[16384];
    size_t len;
    int done;
};

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *b)
{
    struct client *c = h->data;
    (void)want;
    *b = uv_buf_init(c->resp + c->len, (unsigned)(sizeof c->resp - 1 -
                                                  c->len));
}

static void on_closed(uv_handle_t *h)
{
    ((struct client *)h->data)->done = 1;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct client *c = s->data;
    (void)b;
    if (n > 0) {
        c->len += (size_t)n;
        c->resp[c->len] = 0;
    } else if (n < 0) {
        uv_close((uv_handle_t *)s, on_closed);
    }
}

static void on_written(uv_write_t *w, int status)
{
    (void)w, (void)status;
}

static void on_connect(uv_connect_t *r, int status)
{
    struct client *c = r->data;
    if (status < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_closed);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)c->request,
                             (unsigned)strlen(c->request));
    uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* Sends `request` to the gateway at `port` and returns its status; the
 * response is in c->resp. */
static int request(uv_loop_t *loop, int port, struct client *c,
                   const char *req)
{
    struct sockaddr_in a;
    memset(c, 0, sizeof *c);
    c->request = req;
    c->tcp.data = c->conn.data = c;
    uv_ip4_addr("127.0.0.1", port, &a);
    uv_tcp_init(loop, &c->tcp);
    uv_tcp_connect(&c->conn, &c->tcp, (struct sockaddr *)&a, on_connect);
    while (!c->done)
        uv_run(loop, UV_RUN_ONCE);
    int status = 0;
    if (sscanf(c->resp, "HTTP/1.1 %d", &status) != 1)
        status = -1;
    return status;
}

/* Runs the loop until c->resp holds `text` (or 5 s pass). 1 when found. */
static int until_seen(uv_loop_t *loop, struct client *c, const char *text)
{
    uint64_t end = uv_now(loop) + 5000;
    while (!strstr(c->resp, text) && !c->done && uv_now(loop) < end)
        uv_run(loop, UV_RUN_NOWAIT), uv_sleep(1), uv_update_time(loop);
    return strstr(c->resp, text) != NULL;
}

/* GET /v1/events: the snapshot, an event as the SSE format writes it, and
 * a client that never reads cut off once MS_HTTP_EVENT_BUFFER bytes wait
 * for it. */
static void test_events(uv_loop_t *loop, struct ms_http *h, int port)
{
    static struct client c;
    struct sockaddr_in a;
    memset(&c, 0, sizeof c);
    c.request = "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n";
    c.tcp.data = c.conn.data = &c;
    uv_ip4_addr("127.0.0.1", port, &a);
    uv_tcp_init(loop, &c.tcp);
    uv_tcp_connect(&c.conn, &c.tcp, (struct sockaddr *)&a, on_connect);
    CHECK(until_seen(loop, &c, "\"members\":{\"members\":[]}}\n\n"));
    CHECK(strstr(c.resp, "HTTP/1.1 200 OK\r\n"
                         "Content-Type: text/event-stream\r\n") == c.resp);
    CHECK(strstr(c.resp, "Content-Length") == NULL);
    CHECK(strstr(c.resp, "\r\n\r\nid: 0\nevent: snapshot\ndata: "
                         "{\"seq\":0,\"kind\":\"snapshot\",") != NULL);
    uint64_t streams, cut, refused;
    ms_http_event_stats(h, &streams, &cut, &refused);
    CHECK(streams == 1 && cut == 0 && refused == 0);
    ms_http_event(h, 1, "member_up", "{\"seq\":1}", 10);
    CHECK(until_seen(loop, &c, "id: 1\nevent: member_up\n"
                               "data: {\"seq\":1}\n\n"));
    /* no event for the keep-alive interval (shortened here from 15 s):
     * a comment, once the next tick of the stream timer (1 s) comes */
    CHECK(strstr(c.resp, ": keep-alive\n\n") == NULL);
    h->ev.keepalive_ms = 200;
    CHECK(until_seen(loop, &c, "data: {\"seq\":1}\n\n: keep-alive\n\n"));
    h->ev.keepalive_ms = MS_HTTP_EVENT_KEEPALIVE_MS;
    /* the client goes: its stream is dropped at the next event */
    uv_close((uv_handle_t *)&c.tcp, on_closed);
    while (!c.done)
        uv_run(loop, UV_RUN_ONCE);
    for (int i = 0; i < 200 && streams; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        uv_sleep(1);
        ms_http_event(h, 2, "member_up", "{\"seq\":2}", 10);
        ms_http_event_stats(h, &streams, &cut, &refused);
    }
    CHECK(streams == 0 && cut == 0);

    /* a client that never reads, with a small receive buffer */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    static const char req[] = "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
    for (int i = 0; i < 2000 && !streams; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        uv_sleep(1);
        ms_http_event_stats(h, &streams, &cut, &refused);
    }
    CHECK(streams == 1);
    static char big[64 * 1024];
    memset(big, 'x', sizeof big);
    big[0] = '{', big[1] = '"', big[2] = 'x', big[3] = '"', big[4] = ':';
    big[5] = '"', big[sizeof big - 2] = '"', big[sizeof big - 1] = '}';
    int sent = 0;
    /* the kernel's buffers take some MiB first; 64 MiB at most */
    for (; sent < 1024 && !cut; sent++) {
        ms_http_event(h, (uint64_t)sent + 3, "member_up", big, sizeof big);
        uv_run(loop, UV_RUN_NOWAIT);
        ms_http_event_stats(h, &streams, &cut, &refused);
    }
    CHECK(cut == 1 && streams == 0);
    CHECK(sent > MS_HTTP_EVENT_BUFFER / (int)sizeof big);
    close(fd);

    /* HEAD: the head a GET gets (no length: not an empty body), and no
     * stream */
    CHECK(request(loop, port, &c, "HEAD /v1/events HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\n\r\n") == 200);
    CHECK(strstr(c.resp, "Content-Type: text/event-stream\r\n") != NULL);
    CHECK(strstr(c.resp, "Cache-Control: no-cache\r\n") != NULL);
    CHECK(strstr(c.resp, "Content-Length") == NULL);
    CHECK(strstr(c.resp, "\r\n\r\n")[4] == 0);
    ms_http_event_stats(h, &streams, &cut, &refused);
    CHECK(streams == 0);
}

static const char *body_of(const struct client *c)
{
    const char *p = strstr(c->resp, "\r\n\r\n");
    return p ? p + 4 : "";
}

/* ---- a home folder with a ui/ for the status page ------------------------- */

static char home[64];

static void put_file(const char *rel, const char *text, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", home, rel);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    CHECK(fwrite(text, 1, len, fp) == len);
    fclose(fp);
}

static void make_home(void)
{
    char path[256];
    snprintf(home, sizeof home, "/tmp/ms-test-gateway-XXXXXX");
    CHECK(mkdtemp(home) != NULL);
    snprintf(path, sizeof path, "%s/ui", home);
    CHECK(mkdir(path, 0700) == 0);
    snprintf(path, sizeof path, "%s/ui/dir.js", home);
    CHECK(mkdir(path, 0700) == 0);
    /* a FIFO no one writes: opening it for reading must not wait */
    snprintf(path, sizeof path, "%s/ui/pipe.js", home);
    CHECK(mkfifo(path, 0600) == 0);
    put_file("ui/index.html", "<p>page</p>", 11);
    put_file("ui/app.js", "let a = 1;", 10);
    put_file("secret.html", "<p>secret</p>", 13);
    size_t big = 512 * 1024 + 1;
    char *b = calloc(1, big);
    CHECK(b != NULL);
    put_file("ui/big.js", b, big);
    free(b);
}

static void remove_home(void)
{
    static const char *const rel[] = {"ui/index.html", "ui/app.js",
                                      "ui/big.js", "secret.html",
                                      "ui/dir.js", "ui/pipe.js", "ui",
                                      ""};
    char path[256];
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", home, rel[i]);
        CHECK(remove(path) == 0);
    }
}

int main(void)
{
    ms_log_setup("test", getenv("VERBOSE") ? 0 : MS_LOG_ERROR + 1);
    uv_loop_t *loop = uv_default_loop();
    struct fake f;
    memset(&f, 0, sizeof f);
    f.loop = loop;
    f.admin_rc = MS_EINVAL;
    uv_timer_init(loop, &f.answer);
    f.answer.data = &f;
    make_home();
    struct ms_gateway gw = {
        .data = &f, .name = "fake", .home = home, .max_message = 64,
        .timeout_ms = 5000,
        .connections = 16, .type = f_type, .check_message = f_check,
        .tell = f_tell, .ask = f_ask, .activate = f_activate,
        .stop = f_stop, .shard_of = f_shard_of, .stats_json = f_stats,
        .members_json = f_members, .owner_json = f_owner,
        .allocations_json = f_allocations, .call_lua = f_call_lua,
        .check_admin = f_check_admin, .leave = f_leave, .down = f_down,
        .move = f_move, .remember_clear = f_remember_clear,
        .leases = f_leases};
    struct ms_http *h;
    char err[256];
    CHECK(ms_http_start(&h, loop, &gw, "127.0.0.1", 0, err, sizeof err) == 0);
    int port = atoi(strrchr(ms_http_address(h), ':') + 1);
    CHECK(port > 0);
    struct client c;

    /* tell: the id is percent-decoded, the type resolved, 202 */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c%201/tell HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nContent-Length: 7\r\n"
                  "\r\n{\"a\":1}") == 202);
    CHECK(f.tells == 1 && f.type == 3 && strcmp(f.id, "c 1") == 0 &&
          strcmp(f.body, "{\"a\":1}") == 0);

    /* Idempotency-Key: added to the body as its last field "$op" */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nIdempotency-Key: k-1\r\n"
                  "Content-Length: 9\r\n\r\n{\"a\":1}\r\n") == 202);
    CHECK(f.tells == 2 && strcmp(f.body, "{\"a\":1,\"$op\":\"k-1\"}") == 0);
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nidempotency-key: z\r\n"
                  "Content-Length: 4\r\n\r\n{ } ") == 202);
    CHECK(f.tells == 3 && strcmp(f.body, "{ \"$op\":\"z\"}") == 0);
    /* refused, not sent: twice, a quote, empty, past the message limit */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nIdempotency-Key: a\r\n"
                  "Idempotency-Key: b\r\nContent-Length: 2\r\n\r\n{}")
          == 400);
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nIdempotency-Key: a\"b\r\n"
                  "Content-Length: 2\r\n\r\n{}") == 400);
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nIdempotency-Key:\r\n"
                  "Content-Length: 2\r\n\r\n{}") == 400);
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nIdempotency-Key: "
                  "0123456789012345678901234567890123456789012345678901\r\n"
                  "Content-Length: 9\r\n\r\n{\"a\":1}  ") == 413);
    CHECK(f.tells == 3);
    f.tells = 1;

    /* an unknown type: 404, the node is not asked to send */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Nope/c1/tell HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\nContent-Length: 2\r\n\r\n{}") == 404);
    CHECK(f.tells == 1);

    /* a body the node's check refuses: 400, not sent */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\nContent-Length: 2\r\n\r\n[]") == 400);
    CHECK(f.tells == 1);

    /* a body above max_message: 413 before the node sees it */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/c1/tell HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\nContent-Length: 65\r\n\r\n") == 413);
    CHECK(f.tells == 1);

    /* ask: the timeout in ms, the reply from the callback as the body */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/k/ask?timeout=2.5 HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nContent-Length: 2\r\n"
                  "\r\n{}") == 200);
    CHECK(f.asks == 1 && f.timeout_ms == 2500 && strcmp(f.id, "k") == 0);
    CHECK(strcmp(body_of(&c), "{\"n\":42}") == 0);

    /* activate refused by the node: its code's status (503) */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/k/activate HTTP/1.1\r\n"
                  "Host: x\r\nConnection: close\r\nContent-Length: 0\r\n"
                  "\r\n") == 503);
    CHECK(f.activates == 1);

    /* a shard whose lease cannot be had: 503 lease_unavailable */
    f.tell_rc = MS_ELEASE;
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/k/tell HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\nContent-Length: 2\r\n\r\n{}") == 503);
    CHECK(strstr(body_of(&c), "\"code\":\"lease_unavailable\"") != NULL);
    f.tell_rc = 0;

    /* stop */
    CHECK(request(loop, port, &c,
                  "POST /v1/entities/Counter/k2/stop HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\nContent-Length: 0\r\n\r\n") == 202);
    CHECK(f.stops == 1 && strcmp(f.id, "k2") == 0);

    /* the JSON writers */
    CHECK(request(loop, port, &c,
                  "GET /v1/stats HTTP/1.1\r\nHost: x\r\nConnection: close"
                  "\r\n\r\n") == 200);
    CHECK(strcmp(body_of(&c), "{\"routed\":5}") == 0);
    CHECK(request(loop, port, &c,
                  "GET /v1/members HTTP/1.1\r\nHost: x\r\nConnection: close"
                  "\r\n\r\n") == 200);
    CHECK(strcmp(body_of(&c), "{\"members\":[]}") == 0);
    CHECK(request(loop, port, &c,
                  "GET /v1/entities/Counter/k/owner HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\n\r\n") == 200);
    CHECK(strcmp(body_of(&c), "{\"shard\":7,\"owner\":null}") == 0);
    CHECK(request(loop, port, &c,
                  "GET /v1/allocations/Counter HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\n\r\n") == 200);
    CHECK(strlen(body_of(&c)) == 8999 &&
          strncmp(body_of(&c), "{\"shards\":[]}", 13) == 0);

    /* /metrics renders the stats through the node's Lua */
    CHECK(request(loop, port, &c,
                  "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close"
                  "\r\n\r\n") == 200);
    CHECK(strcmp(f.lua, "moonshard.metrics.render") == 0);
    CHECK(strcmp(body_of(&c), "metrics of {\"routed\":5}\n") == 0);

    /* health and the help page name the node */
    CHECK(request(loop, port, &c,
                  "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close"
                  "\r\n\r\n") == 200);
    CHECK(strcmp(body_of(&c), "{\"ok\":true,\"node\":\"fake\"}") == 0);

    /* admin endpoints: refused while the node's check refuses ... */
    CHECK(request(loop, port, &c,
                  "POST /v1/leave HTTP/1.1\r\nHost: x\r\nConnection: close"
                  "\r\nContent-Length: 0\r\n\r\n") == 403);
    CHECK(f.admin_checks == 1 && f.leaves == 0);
    /* ... and carried out once it accepts */
    f.admin_rc = 0;
    CHECK(request(loop, port, &c,
                  "POST /v1/leave HTTP/1.1\r\nHost: x\r\nConnection: close"
                  "\r\nContent-Length: 0\r\n\r\n") == 202);
    CHECK(f.leaves == 1);
    CHECK(request(loop, port, &c,
                  "POST /v1/down HTTP/1.1\r\nHost: x\r\nConnection: close"
                  "\r\nContent-Length: 16\r\n\r\n\"127.0.0.1:7946\"") == 202);
    CHECK(f.downs == 1 && strcmp(f.body, "127.0.0.1:7946 force=0") == 0);
    CHECK(request(loop, port, &c,
                  "POST /v1/move/Counter/12 HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\nContent-Length: 0\r\n\r\n") == 202);
    CHECK(f.moves == 1 && strcmp(f.body, "Counter/12") == 0);
    /* the shard of a move is read like a clear's: digits only */
#define MOVE(path) "POST /v1/move/" path " HTTP/1.1\r\nHost: x" \
                   "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    static const char *const bad_moves[] = {
        MOVE("Counter/x"), MOVE("Counter/+1"), MOVE("Counter/%201"),
        MOVE("Counter/4294967296"), MOVE("Counter/1x"),
    };
    for (size_t i = 0; i < sizeof bad_moves / sizeof bad_moves[0]; i++)
        CHECK(request(loop, port, &c, bad_moves[i]) == 400);
    CHECK(request(loop, port, &c, MOVE("Counter/")) == 404);
    CHECK(f.moves == 1);

    /* remember clear: the node's answer as 200 {"cleared":...} */
#define CLEAR(path) "POST /v1/remember/clear/" path " HTTP/1.1\r\nHost: x" \
                    "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    CHECK(request(loop, port, &c, CLEAR("Counter/5")) == 200);
    CHECK(f.clears == 1 && strcmp(f.body, "Counter/5") == 0);
    CHECK(strcmp(body_of(&c), "{\"cleared\":true}") == 0);
    CHECK(request(loop, port, &c, CLEAR("Count%65r/6")) == 200);
    CHECK(f.clears == 2 && strcmp(f.body, "Counter/6") == 0);
    CHECK(strncmp(body_of(&c), "{\"cleared\":false,", 17) == 0);
    CHECK(strstr(body_of(&c), "not failed on this node") != NULL);
    /* out of the type's range (the node says), or not a shard number */
    CHECK(request(loop, port, &c, CLEAR("Counter/16")) == 400);
    CHECK(f.clears == 3 && strstr(body_of(&c), "out of the range"));
    static const char *const bad[] = {
        CLEAR("Counter/x"), CLEAR("Counter/-1"), CLEAR("Counter/+1"),
        CLEAR("Counter/%201"), CLEAR("Counter/4294967296"),
        CLEAR("Counter/12345678901"), CLEAR("Counter/"),
        CLEAR("Counter/1/2"), CLEAR("Counter/1x"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(request(loop, port, &c, bad[i]) == 400);
        CHECK(strstr(body_of(&c), "\"bad_request\"") != NULL);
    }
    CHECK(f.clears == 3);
    CHECK(request(loop, port, &c, CLEAR("Counter/4294967295")) == 400);
    CHECK(f.clears == 4 && strcmp(f.body, "Counter/4294967295") == 0);
    /* an unknown type is refused before the node is asked */
    CHECK(request(loop, port, &c, CLEAR("Nope/1")) == 404);
    CHECK(strstr(body_of(&c), "\"unknown_type\"") != NULL);
    CHECK(f.clears == 4);
    /* a known type the node says is not remembered */
    f.clear_rc = MS_ENOTYPE;
    CHECK(request(loop, port, &c, CLEAR("Counter/1")) == 404);
    CHECK(strstr(body_of(&c), "\"not_remembered\"") != NULL);
    f.clear_rc = 0;
    CHECK(request(loop, port, &c, CLEAR("Counter")) == 404);
    CHECK(request(loop, port, &c, CLEAR("/1")) == 404);
    CHECK(f.clears == 5);
    CHECK(request(loop, port, &c,
                  "GET /v1/remember/clear/Counter/5 HTTP/1.1\r\nHost: x"
                  "\r\nConnection: close\r\n\r\n") == 405);
    /* without the admin token: refused, the node not asked */
    f.admin_rc = MS_EINVAL;
    CHECK(request(loop, port, &c, CLEAR("Counter/5")) == 403);
    CHECK(f.clears == 5);
#undef CLEAR

    /* GET /v1/leases/{type}: answered when the node's read ends */
#define LEASES(path) "GET /v1/leases/" path " HTTP/1.1\r\nHost: x\r\n" \
                     "Connection: close\r\n\r\n"
    CHECK(request(loop, port, &c, LEASES("Counter")) == 200);
    CHECK(strcmp(body_of(&c), "{\"type\":\"Counter\",\"leases\":[]}") == 0);
    CHECK(f.leases == 1 && strcmp(f.body, "Counter") == 0);
    CHECK(request(loop, port, &c, LEASES("Cou%6eter")) == 200);
    CHECK(f.leases == 2 && strcmp(f.body, "Counter") == 0);
    CHECK(request(loop, port, &c, LEASES("Nope")) == 404);
    CHECK(strstr(body_of(&c), "\"unknown_type\"") != NULL);
    CHECK(request(loop, port, &c, LEASES("Plain")) == 404);
    CHECK(strstr(body_of(&c), "\"not_leased\"") != NULL);
    CHECK(request(loop, port, &c, LEASES("bad%zz")) == 400);
    CHECK(f.leases == 4);
    /* the database fails later, or the node has none: 503 */
    f.leases_err = MS_EDBCONN;
    CHECK(request(loop, port, &c, LEASES("Counter")) == 503);
    CHECK(strstr(body_of(&c), "{\"error\":{\"code\":\"db_connection\"")
          == body_of(&c));
    f.leases_err = MS_ETIMEDOUT;
    CHECK(request(loop, port, &c, LEASES("Counter")) == 503);
    CHECK(strstr(body_of(&c), "\"code\":\"timeout\"") != NULL);
    f.leases_err = 0;
    f.leases_rc = MS_EDBCONN;
    CHECK(request(loop, port, &c, LEASES("Counter")) == 503);
    CHECK(strstr(body_of(&c), "no usable database") != NULL);
    /* the node runs its maximum of lease reads already */
    f.leases_rc = MS_EBUSY;
    CHECK(request(loop, port, &c, LEASES("Counter")) == 503);
    CHECK(strstr(body_of(&c), "{\"error\":{\"code\":\"busy\"")
          == body_of(&c));
    CHECK(strstr(body_of(&c), "reading lease rows") != NULL);
    f.leases_rc = 0;
    CHECK(f.leases == 8);
    CHECK(request(loop, port, &c,
                  "POST /v1/leases/Counter HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\nContent-Length: 0\r\n\r\n")
          == 405);
    CHECK(f.leases == 8);
#undef LEASES

    /* the status page: files of <home>/ui by plain name, with their type */
#define GET(path) "GET " path " HTTP/1.1\r\nHost: x\r\nConnection: close" \
                  "\r\n\r\n"
    CHECK(request(loop, port, &c, GET("/ui")) == 200);
    CHECK(strstr(c.resp, "\r\nContent-Type: text/html; charset=utf-8\r\n"));
    CHECK(strstr(c.resp, "\r\nContent-Security-Policy: default-src "
                         "'self'\r\n"));
    CHECK(strcmp(body_of(&c), "<p>page</p>") == 0);
    CHECK(request(loop, port, &c, GET("/ui/")) == 200);
    CHECK(strcmp(body_of(&c), "<p>page</p>") == 0);
    CHECK(request(loop, port, &c, GET("/ui/app.js")) == 200);
    CHECK(strstr(c.resp, "\r\nContent-Type: text/javascript"));
    CHECK(strcmp(body_of(&c), "let a = 1;") == 0);
    CHECK(request(loop, port, &c,
                  "HEAD /ui/app.js HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\n\r\n") == 200);
    CHECK(strstr(c.resp, "\r\nContent-Length: 10\r\n") &&
          strcmp(body_of(&c), "") == 0);
    /* no way out of ui/, plain or encoded */
    CHECK(request(loop, port, &c, GET("/ui/../secret.html")) == 400);
    CHECK(request(loop, port, &c, GET("/ui/..%2fsecret.html")) == 400);
    CHECK(request(loop, port, &c, GET("/ui/%2e%2e/secret.html")) == 400);
    CHECK(request(loop, port, &c, GET("/ui/..\\secret.html")) == 400);
    CHECK(request(loop, port, &c, GET("/ui/x/../../secret.html")) == 400);
    CHECK(request(loop, port, &c, GET("/ui/app%2ejs")) == 400);
    CHECK(strstr(c.resp, "secret") == NULL);
    /* unknown, hidden, not a regular file, no known type: 404 */
    CHECK(request(loop, port, &c, GET("/ui/nope.js")) == 404);
    CHECK(request(loop, port, &c, GET("/ui/.app.js")) == 404);
    CHECK(request(loop, port, &c, GET("/ui/dir.js")) == 404);
    /* a FIFO: 404 at once (the open waited for a writer, forever, on the
     * loop thread; the alarm ends a test that hangs there) */
    alarm(30);
    CHECK(request(loop, port, &c, GET("/ui/pipe.js")) == 404);
    alarm(0);
    CHECK(request(loop, port, &c, GET("/ui/index.htm")) == 404);
    CHECK(request(loop, port, &c, GET("/uifoo")) == 404);
    /* past the size bound: not sent */
    CHECK(request(loop, port, &c, GET("/ui/big.js")) == 500);
    CHECK(request(loop, port, &c,
                  "POST /ui HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  "Content-Length: 0\r\n\r\n") == 405);
#undef GET
    remove_home();

    test_events(loop, h, port);

    ms_http_close(h);
    uv_close((uv_handle_t *)&f.answer, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(loop) == 0);
    CHECK_DONE();
}
