/*
 * http_conn.c -- the HTTP gateway's connections: libuv TCP, parsed by
 * http-parser; the endpoints are in http.c.
 *
 * One connection answers one request at a time. When a request is complete
 * the parser is paused; the bytes that followed it and the bytes read while
 * it is answered (pipelined requests) are kept in `rest` and parsed once the
 * response has been written. Responses therefore leave in request order
 * without a queue, and a slow ask holds back only its own connection.
 * Reading goes on while a request is answered (stopping and restarting it
 * cost two epoll_ctl calls per request) until `rest` holds REST_MAX bytes
 * or the peer half-closed; an EOF then closes the connection once what
 * came before it is answered.
 *
 * Lifetime: a connection is reference counted. Its TCP handle holds one
 * reference, dropped in the close callback; a pending ask holds another,
 * dropped by the ask callback. An ask that ends after its connection closed
 * sees `closing`, drops the reply and frees the memory if it was last.
 *
 * A connection that must close after its response (error, `Connection:
 * close`, HTTP/1.0) shuts down its write side and discards input until the
 * peer closes, so the kernel does not reset the connection over unread
 * request bytes before the client has read the response.
 *
 * Room: at limits.http_connections a new connection takes the place of
 * one that never sent a byte (the oldest first), else of the longest idle
 * one, else of the oldest lingering one; never its own. Each of these is
 * a list in the order its members entered it, so the choice is O(1) and
 * connections accepted in one loop turn (same clock) still have an
 * order. Only when every connection is receiving or being answered a
 * request is the new one refused: a 503 if its socket takes it at once,
 * then closed, without reading.
 *
 * Errors answer {"error":{"code","message","id"}}: the message is made by
 * client_error.h (no paths, search lists or addresses; bounded) and the
 * node logs the id with the whole detail.
 */
#include "http_conn.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/auth.h"
#include "../core/jsoncheck.h"
#include "../core/log.h"
#include "tls.h"
#include "uverr.h"

/*
 * URL plus header names and values of one request, in bytes. A larger head
 * gets 431 and the connection is closed. The URL is the only part of the
 * head we keep, so this also bounds the URL buffer; http-parser's own limit
 * (80 KiB) stays in force behind ours.
 */
#define HEAD_MAX (16 * 1024)
#define LINGER_MAX (1024 * 1024)    /* input discarded before a hard close */
#define REST_MAX (64 * 1024)        /* pipelined input held before reading
                                       stops until the answer is out */
#define BACKLOG 511
#define KEEPALIVE_PROBE_S 60        /* TCP keepalive finds vanished peers */
/* Error lines logged at most: LOG_BURST at once, LOG_PER_S a second
 * after that, for client errors (4xx) and server errors (5xx) apart, so
 * a flood of bad requests cannot hide a failing handler. */
#define LOG_BURST 100
#define LOG_PER_S 20
/* A connection has limits.http_timeout (30 s by default), checked every
 * SWEEP_MS, to send a whole request from its first byte (not from its
 * last: a byte now and then does not keep it), to stay idle between
 * requests, and to take a response; LINGER_MS at most to close after its
 * last one. An ask waiting for its entity has its own timeout instead. */
#define LINGER_MS 5000
#define SWEEP_MS 250

/* Write request and response bytes in one allocation. */
struct wreq {
    uv_write_t req;
    char data[];
};

static int on_message_begin(http_parser *p);
static int on_url(http_parser *p, const char *at, size_t len);
static int on_header(http_parser *p, const char *at, size_t len);
static int on_header_value(http_parser *p, const char *at, size_t len);
static int on_headers_complete(http_parser *p);
static int on_body(http_parser *p, const char *at, size_t len);
static int on_message_complete(http_parser *p);

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* ---- small helpers ------------------------------------------------------ */

static void __attribute__((format(printf, 3, 4)))
set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- connection lifetime ------------------------------------------------ */

static void handle_closed(struct ms_http *h)
{
    if (--h->handles == 0) {
        ms_tls_ctx_free(h->tls);
        free(h->tls_plain);
        free(h);
    }
}

void ms__http_handle_closed(struct ms_http *h)
{
    handle_closed(h);
}

static void on_listener_closed(uv_handle_t *hd)
{
    handle_closed(hd->data);
}

static void drop_body(struct conn *c)
{
    free(c->body);
    c->body = NULL;
    c->body_len = c->body_cap = 0;
}

/* Closes the connection `ms` from now unless something moves the
 * deadline first; 0: no deadline. */
static void set_deadline(struct conn *c, uint64_t ms)
{
    c->deadline_ms = ms ? uv_now(c->h->loop) + ms : 0;
}

void ms__http_conn_unref(struct conn *c)
{
    if (--c->refs > 0)
        return;
    free(c->url);
    free(c->body);
    free(c->rest);
    ms_tls_free(c->tls);
    free(c);
}

static void on_conn_closed(uv_handle_t *hd)
{
    struct conn *c = hd->data;
    struct ms_http *h = c->h;

    c->h = NULL;
    conn_unref(c);
    handle_closed(h);
}

static void unlink_conn(struct conn *c)
{
    struct ms_http *h = c->h;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->head[c->cls] = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        h->tail[c->cls] = c->prev;
    c->prev = c->next = NULL;
}

/* Appends c to the list of class k (it is on none). */
static void link_conn(struct conn *c, int k)
{
    struct ms_http *h = c->h;
    c->cls = (unsigned)k;
    c->prev = h->tail[k];
    c->next = NULL;
    if (h->tail[k])
        h->tail[k]->next = c;
    else
        h->head[k] = c;
    h->tail[k] = c;
}

/* Moves c to the end of class k's list, unless it is there already. */
static void set_class(struct conn *c, int k)
{
    if (c->closing || c->cls == (unsigned)k)
        return;
    unlink_conn(c);
    link_conn(c, k);
}

/* Puts c in the class its state says, once it has sent something. */
static void settle(struct conn *c)
{
    set_class(c, c->lingering               ? LINGER
                 : c->busy || c->in_request ? ACTIVE
                                            : IDLE);
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    unlink_conn(c);
    c->closing = 1;
    c->h->nconns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void read_start(struct conn *c)
{
    if (c->reading || c->closing)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    c->reading = 1;
}

static void read_stop(struct conn *c)
{
    if (!c->reading)
        return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;

    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    read_start(c); /* on_read discards until EOF */
}

/* Half-closes after the last response; see the comment at the top. */
static void linger(struct conn *c)
{
    free(c->rest);
    c->rest = NULL;
    c->rest_len = 0;
    c->lingering = 1;
    set_class(c, LINGER);
    set_deadline(c, c->h->timeout_ms < LINGER_MS ? c->h->timeout_ms
                                                 : LINGER_MS);
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
        conn_close(c);
}

/* ---- responses ---------------------------------------------------------- */

static void feed(struct conn *c, const char *data, size_t len);

/* Parses what arrived while the last request was answered, then reads. */
static void resume(struct conn *c)
{
    char *rest = c->rest;
    size_t len = c->rest_len;

    c->rest = NULL;
    c->rest_len = 0;
    http_parser_pause(&c->parser, 0);
    if (rest != NULL) {
        feed(c, rest, len);
        free(rest);
    }
    if (c->busy || c->closing)
        return;
    if (c->peer_eof)
        conn_close(c); /* all it sent before its EOF is answered */
    else
        read_start(c);
}

/* The response is out. Inside feed() (a request answered at once, the
 * parser still running) feed() itself goes on parsing; see there. */
static void written(struct conn *c)
{
    if (!c->keep_alive) {
        linger(c);
        return;
    }
    c->busy = 0;
    set_deadline(c, c->h->timeout_ms);
    if (c->in_feed) {
        c->answered = 1;
        return;
    }
    resume(c);
    settle(c);
}

static void on_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;

    free(req); /* the struct wreq */
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    written(c);
}

/*
 * Writes head and parts (a plain connection) at once with one writev when
 * the socket takes them all, the common case: no copy, no allocation, and
 * no write request (uv_write's completion costs an epoll_ctl per response
 * in libuv). Returns how many bytes went out (then the rest must be
 * queued), or a negative code (UV_EAGAIN: none went out, queue them all).
 */
static ssize_t try_write(struct conn *c, const char *head, size_t hn,
                         const struct part *parts, int n)
{
    uv_buf_t b[4];

    if (c->tls || n > 3)
        return UV_EAGAIN;
    b[0] = uv_buf_init((char *)head, (unsigned int)hn);
    for (int i = 0; i < n; i++)
        b[i + 1] = uv_buf_init((char *)parts[i].p, (unsigned int)parts[i].n);
    return uv_try_write((uv_stream_t *)&c->tcp, b, (unsigned int)n + 1);
}

/* Writes the decimal digits of v to out (room for 20) and returns their
 * count. */
static size_t put_dec(char *out, size_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[sizeof tmp - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(out, tmp + sizeof tmp - n, n);
    return n;
}

/*
 * Writes the head of a response into head[0..cap): status line,
 * Content-Type, Content-Length `len`, `extra` (whole header lines, or
 * NULL) and Connection. Returns its length, or 0 when it does not fit in
 * fewer than cap bytes. (Built by hand: snprintf took about 2,500
 * instructions a response, a sixth of a gateway's user time per ask.)
 */
static size_t response_head(char *head, size_t cap, int status,
                            const char *ctype, size_t len, const char *extra,
                            int keep_alive)
{
    const char *reason = http_status_str((enum http_status)status);
    const char *conn = keep_alive ? "keep-alive" : "close";
    size_t rn = strlen(reason), cn = strlen(ctype), kn = strlen(conn);
    size_t en = extra ? strlen(extra) : 0;
    char num[20];
    size_t nn = put_dec(num, len);
    char *o = head;

    if (status < 100 || status > 999 ||
        9 + 4 + rn + 16 + cn + 18 + nn + 2 + en + 12 + kn + 4 >= cap)
        return 0;
#define PUT(p, n)              \
    do {                       \
        memcpy(o, (p), (n));   \
        o += (n);              \
    } while (0)
    PUT("HTTP/1.1 ", 9);
    o[0] = (char)('0' + status / 100);
    o[1] = (char)('0' + status / 10 % 10);
    o[2] = (char)('0' + status % 10);
    o[3] = ' ';
    o += 4;
    PUT(reason, rn);
    PUT("\r\nContent-Type: ", 16);
    PUT(ctype, cn);
    PUT("\r\nContent-Length: ", 18);
    PUT(num, nn);
    PUT("\r\n", 2);
    if (en)
        PUT(extra, en);
    PUT("Connection: ", 12);
    PUT(conn, kn);
    PUT("\r\n\r\n", 4);
#undef PUT
    return (size_t)(o - head);
}

/* See http_conn.h. */
void ms__http_respond_v(struct conn *c, int status, const char *ctype,
                        const char *extra, const struct part *parts, int n)
{
    char head[256];
    size_t len = 0, off, skip;
    struct wreq *w;
    uv_buf_t b;
    size_t hn;
    int i;

    c->busy = 1;
    drop_body(c);
    if (c->closing)
        return;
    set_deadline(c, c->h->timeout_ms);
    for (i = 0; i < n; i++)
        len += parts[i].n;
    hn = response_head(head, sizeof head, status, ctype, len, extra,
                       c->keep_alive);
    if (hn == 0) {
        conn_close(c);
        return;
    }
    if (c->parser.method == HTTP_HEAD) {
        n = 0; /* the head says how long the body of a GET would be */
        len = 0;
    }
    ssize_t sent = try_write(c, head, (size_t)hn, parts, n);
    if (sent == (ssize_t)hn + (ssize_t)len) {
        written(c);
        return;
    }
    if (sent < 0 && sent != UV_EAGAIN) {
        conn_close(c);
        return;
    }
    skip = sent > 0 ? (size_t)sent : 0; /* bytes that went out already */
    w = malloc(sizeof *w + (size_t)hn + len - skip);
    if (w == NULL) {
        conn_close(c);
        return;
    }
    off = 0;
    if (skip < (size_t)hn) {
        memcpy(w->data, head + skip, (size_t)hn - skip);
        off = (size_t)hn - skip;
        skip = 0;
    } else {
        skip -= (size_t)hn;
    }
    for (i = 0; i < n; i++) {
        size_t k = skip < parts[i].n ? skip : parts[i].n;
        memcpy(w->data + off, parts[i].p + k, parts[i].n - k);
        off += parts[i].n - k;
        skip -= k;
    }
    w->req.data = c;
    b = uv_buf_init(w->data, (unsigned int)off);
    if (ms__http_write(c, &w->req, &b, on_write) != 0) {
        free(w);
        conn_close(c);
    }
}

void ms__http_respond(struct conn *c, int status, const char *ctype,
                      const char *body, size_t len)
{
    struct part p = {body, len};

    respond_v(c, status, ctype, NULL, &p, 1);
}

/* `code` when it is a plain error code (letters, digits, '_', '.', '-';
 * at most 40 bytes), else "error": it goes into log fields as it is. */
static const char *plain_code(const char *code)
{
    size_t n = strlen(code);
    if (n == 0 || n > 40 ||
        strspn(code, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_.-") != n)
        return "error";
    return code;
}

/* Logs an error answered to a client with its id and whole detail, within
 * the log budget of its kind (4xx or 5xx). */
static void log_error(struct ms_http *h, int status, const char *code,
                      const char *id, const char *detail)
{
    struct ms_log_budget *b = status >= 500 ? &h->log5xx : &h->log4xx;
    uint64_t skipped = 0;
    char fields[160], more[48] = "";
    if (!ms_log_budget_take(b, uv_now(h->loop), &skipped))
        return;
    if (skipped)
        snprintf(more, sizeof more, " unlogged=%llu",
                 (unsigned long long)skipped);
    snprintf(fields, sizeof fields, "error_id=%s status=%d code=%s%s", id,
             status, code, more);
    ms_log(status == 500 ? MS_LOG_ERROR
           : status > 500 ? MS_LOG_WARN
                          : MS_LOG_INFO,
           fields, "answered an HTTP error: %s", detail);
}

/*
 * Writes {"error":{"code":..,"message":..,"id":..}} into out[0..cap)
 * (cap >= 2048) and returns its length. The message is `detail`, made
 * safe as `kind` says, or `generic` when nothing of the detail may be
 * shown (or detail is NULL); the whole detail goes only to the log line,
 * under the same id.
 */
static size_t error_body(struct ms_http *h, int status, const char *code,
                         const char *detail, int kind, const char *generic,
                         char *out, size_t cap)
{
    char msg[MS_CLIENT_MSG_MAX + 1], id[MS_CLIENT_ID_LEN + 1];
    size_t n;
    code = plain_code(code);
    if (detail != NULL && kind == OWN) {
        n = strlen(detail);
        if (n > MS_CLIENT_MSG_MAX) {
            n = MS_CLIENT_MSG_MAX;
            while (n > 0 && ((unsigned char)detail[n] & 0xC0) == 0x80)
                n--; /* not inside a UTF-8 character */
        }
        memcpy(msg, detail, n);
        msg[n] = 0;
    }
    if (detail == NULL ||
        (kind == FOREIGN &&
         ms_client_error_text(msg, sizeof msg, detail, strlen(detail)) == 0))
        snprintf(msg, sizeof msg, "%s", generic);
    ms_client_error_id(h->id_seed, h->errors++, id);
    log_error(h, status, code, id, detail ? detail : generic);
    n = (size_t)snprintf(out, cap, "{\"error\":{\"code\":\"%s\","
                         "\"message\":\"", code);
    ms_json_put_escaped(out, cap - 32, &n, msg, strlen(msg));
    n += (size_t)snprintf(out + n, cap - n, "\",\"id\":\"%s\"}}", id);
    return n;
}

/* See http_conn.h. */
void ms__http_respond_error_x(struct conn *c, int status, const char *extra,
                              const char *code, const char *detail,
                              int kind, const char *generic)
{
    char body[2048];
    struct part p = {body, 0};
    p.n = error_body(c->h, status, code, detail, kind, generic, body,
                     sizeof body);
    respond_v(c, status, JSON, extra, &p, 1);
}

void ms__http_respond_error(struct conn *c, int status, const char *code,
                            const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    respond_error_x(c, status, NULL, code, msg, OWN, "the request failed");
}

/* ---- parser callbacks --------------------------------------------------- */

/* Counts head bytes; past HEAD_MAX answers 431 and fails the parser. */
static int head_add(struct conn *c, size_t len)
{
    if (len > HEAD_MAX - c->head_bytes) {
        c->keep_alive = 0;
        respond_error(c, 431, "too_large",
                      "request line and headers exceed %d bytes", HEAD_MAX);
        return -1;
    }
    c->head_bytes += len;
    return 0;
}

static int on_message_begin(http_parser *p)
{
    struct conn *c = p->data;

    c->head_bytes = 0;
    c->field_len = 0;
    c->in_token = 0;
    c->token_len = 0;
    c->token_seen = 0;
    c->api_len = 0;
    c->api_x_seen = 0;
    c->authz_seen = 0;
    c->in_opid = 0;
    c->opid_seen = 0;
    c->opid_len = 0;
    c->head_done = 0;
    c->in_expect = 0;
    c->expect_len = 0;
    c->url_len = 0;
    c->body_expect = 0;
    c->keep_alive = 0;
    c->in_request = 1;
    set_deadline(c, c->h->timeout_ms);
    drop_body(c);
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;

    if (head_add(c, len) != 0)
        return -1;
    if (c->url_len + len > c->url_cap) {
        /* bounded: url_len + len <= head_bytes <= HEAD_MAX */
        size_t cap = c->url_cap ? c->url_cap * 2 : 256;
        char *u;

        if (cap < c->url_len + len)
            cap = c->url_len + len;
        if (cap > HEAD_MAX)
            cap = HEAD_MAX;
        u = realloc(c->url, cap);
        if (u == NULL) {
            conn_close(c);
            return -1;
        }
        c->url = u;
        c->url_cap = cap;
    }
    memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    return 0;
}

/* Answers 400 for a header the parser let through; fails the parser. */
static int bad_header(struct conn *c, const char *why)
{
    c->keep_alive = 0;
    respond_error(c, 400, "bad_request", "%s", why);
    return -1;
}

/* Header names arrive in pieces; only X-Moonshard-Token and Expect are
 * kept, and only from the head: trailers after a chunked body are
 * counted and checked, never read. */
static int on_header(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    /* http-parser, built lenient, takes blanks in a name ("Host : x");
     * RFC 9112 5.1 asks for a 400 (a proxy may read it otherwise) */
    if (memchr(at, ' ', len) != NULL)
        return bad_header(c, "whitespace in a header name");
    if (c->head_done)
        return head_add(c, len);
    if (c->in_token || c->in_expect || c->in_opid || c->in_api ||
        c->field_len == SIZE_MAX) {
        c->field_len = 0;
        c->in_token = 0;
        c->in_api = 0;
        c->in_expect = 0;
        c->in_opid = 0;
    }
    /* the names kept start with x, a, i or e: any other is not read */
    if (c->field_len == 0 && len &&
        !memchr("xaie", at[0] | 0x20, 4))
        c->field_len = sizeof c->field;
    for (size_t i = 0; i < len && c->field_len < sizeof c->field; i++)
        c->field[c->field_len++] = (char)(at[i] | 0x20);
    if (len && c->field_len >= sizeof c->field)
        c->field_len = sizeof c->field; /* too long: not ours */
    return head_add(c, len);
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->head_done)
        return head_add(c, len);
    if (c->field_len != SIZE_MAX) { /* a value's first piece */
        c->in_token = c->field_len == 17 &&
                      memcmp(c->field, "x-moonshard-token", 17) == 0;
        if (c->in_token && c->token_seen)
            return bad_header(c, "X-Moonshard-Token appears twice");
        if (c->in_token)
            c->token_seen = 1;
        /* X-Moonshard-Api-Token wins over Authorization, which a proxy
         * may add for itself (Basic ...): each may appear once */
        int xapi = c->field_len == 21 &&
                   memcmp(c->field, "x-moonshard-api-token", 21) == 0;
        int authz = c->field_len == 13 &&
                    memcmp(c->field, "authorization", 13) == 0;
        if ((xapi && c->api_x_seen) || (authz && c->authz_seen))
            return bad_header(c, xapi ? "X-Moonshard-Api-Token appears "
                                        "twice"
                                      : "Authorization appears twice");
        c->in_api = xapi || (authz && !c->api_x_seen);
        if (xapi)
            c->api_len = 0; /* an Authorization read before it is dropped */
        c->api_x_seen |= xapi;
        c->authz_seen |= authz;
        c->in_opid = c->field_len == 15 &&
                      memcmp(c->field, "idempotency-key", 15) == 0;
        if (c->in_opid && c->opid_seen)
            return bad_header(c, "Idempotency-Key appears twice");
        if (c->in_opid)
            c->opid_seen = 1;
        c->in_expect = c->field_len == 6 &&
                       memcmp(c->field, "expect", 6) == 0;
        if (c->in_expect)
            c->expect_len = 0;
        c->field_len = SIZE_MAX; /* the next name starts afresh */
    }
    if (c->in_token)
        for (size_t i = 0; i < len && c->token_len < sizeof c->token; i++)
            c->token[c->token_len++] = at[i];
    if (c->in_api)
        for (size_t i = 0; i < len && c->api_len < sizeof c->api; i++)
            c->api[c->api_len++] = at[i];
    if (c->in_opid)
        for (size_t i = 0; i < len && c->opid_len < sizeof c->opid; i++)
            c->opid[c->opid_len++] = at[i];
    if (c->in_expect)
        for (size_t i = 0; i < len && c->expect_len < sizeof c->expect; i++)
            c->expect[c->expect_len++] = (char)(at[i] | 0x20);
    return head_add(c, len);
}

static void on_continue_written(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    free(req);
    if (status < 0 && !c->closing)
        conn_close(c);
}

/* Answers Expect: 100-continue before the body comes, so a client that
 * waits for it (curl does, for large bodies) need not time out first. */
static void send_continue(struct conn *c)
{
    static char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    uv_write_t *req = malloc(sizeof *req);
    uv_buf_t b = uv_buf_init(line, sizeof line - 1);
    if (req == NULL) {
        conn_close(c);
        return;
    }
    req->data = c;
    if (ms__http_write(c, req, &b, on_continue_written)) {
        free(req);
        conn_close(c);
    }
}

static int on_headers_complete(http_parser *p)
{
    struct conn *c = p->data;
    size_t max = c->h->gw.max_message;

    c->head_done = 1;
    c->keep_alive = http_should_keep_alive(p) && !p->upgrade;
    if ((p->flags & F_CONTENTLENGTH) && p->content_length > max) {
        c->keep_alive = 0;
        respond_error(c, 413, "too_large",
                      "body is larger than %zu bytes", max);
        return -1;
    }
    if (p->flags & F_CONTENTLENGTH)
        c->body_expect = (size_t)p->content_length;
    if (c->expect_len) {
        if (c->expect_len != 12 || memcmp(c->expect, "100-continue", 12)) {
            c->keep_alive = 0;
            respond_error(c, 417, "expectation_failed",
                          "the only expectation served is 100-continue");
            return -1;
        }
        if ((p->flags & F_CHUNKED) ||
            ((p->flags & F_CONTENTLENGTH) && p->content_length > 0))
            send_continue(c);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    size_t max = c->h->gw.max_message;

    /* Content-Length was checked; this catches chunked bodies. */
    if (c->body_len > max || len > max - c->body_len) {
        c->keep_alive = 0;
        respond_error(c, 413, "too_large",
                      "body is larger than %zu bytes", max);
        return -1;
    }
    if (len > c->body_cap - c->body_len) {
        size_t need = c->body_len + len, cap;
        char *b;

        /* grow with what arrived, not with what Content-Length promises:
         * a client that announces 1 MiB and sends a byte holds 4 KiB */
        cap = c->body_cap > 2048 ? c->body_cap * 2 : 4096;
        if (cap < need)
            cap = need;
        if (c->body_expect >= need && cap > c->body_expect)
            cap = c->body_expect;
        if (cap > max)
            cap = max;
        b = realloc(c->body, cap);
        if (b == NULL) {
            conn_close(c);
            return -1;
        }
        c->body = b;
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_len, at, len);
    c->body_len += len;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct conn *c = p->data;

    /* One request at a time: the parser stops right after this message
     * and feed() keeps the rest for later. */
    http_parser_pause(p, 1);
    c->busy = 1;
    c->in_request = 0;
    set_deadline(c, 0); /* the answer's own timeouts govern */
    ms__http_route(c);
    return 0;
}

/* ---- I/O ---------------------------------------------------------------- */

/* Runs the parser over new input; see the comment at the top. */
static void feed(struct conn *c, const char *data, size_t len)
{
    /* busy: the parser is paused or failed; everything is kept */
    size_t n = 0;

    /* A request answered at once, its response written whole while the
     * parser ran (written(): `answered`): parsing goes on from where it
     * paused, in this loop rather than by recursion. */
    c->in_feed = 1;
    while (!c->busy) {
        n = http_parser_execute(&c->parser, &settings, data, len);
        if (!c->answered || c->closing ||
            HTTP_PARSER_ERRNO(&c->parser) != HPE_PAUSED)
            break;
        c->answered = 0;
        http_parser_pause(&c->parser, 0);
        data += n;
        len -= n;
        n = 0;
        if (len == 0)
            break;
    }
    c->in_feed = 0;
    c->answered = 0;
    if (c->closing)
        return;
    if (c->streaming)
        return; /* GET /v1/events: reads go on, to see the peer go */
    if (c->busy) {
        /* A request is being answered (parser paused), or a callback
         * answered an error and failed the parser (keep_alive is 0). */
        if (!c->keep_alive) {
            read_stop(c);
            return;
        }
        if (n < len) {
            char *r = realloc(c->rest, c->rest_len + (len - n));
            if (r == NULL) {
                conn_close(c);
                return;
            }
            memcpy(r + c->rest_len, data + n, len - n);
            c->rest = r;
            c->rest_len += len - n;
        }
        if (c->rest_len >= REST_MAX)
            read_stop(c);
        return;
    }
    if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK) {
        c->keep_alive = 0;
        read_stop(c);
        respond_error(c, 400, "bad_request", "%s",
                      http_errno_description(HTTP_PARSER_ERRNO(&c->parser)));
    }
}

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = hd->data;

    /* libuv reads, then calls on_read, before it allocates again, and
     * on_read copies what it keeps: one buffer serves every connection. */
    (void)suggested;
    buf->base = c->h->rbuf;
    buf->len = sizeof c->h->rbuf;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    if (nread == UV_EOF && c->busy && c->keep_alive && !c->lingering &&
        !c->streaming) {
        /* a half-close after a request: answer it (and what came
         * before the EOF), then close; see resume() */
        c->peer_eof = 1;
        read_stop(c);
        return;
    }
    if (nread < 0) { /* EOF or error */
        conn_close(c);
        return;
    }
    if (c->lingering || c->streaming) {
        c->discarded += (size_t)nread;
        if (c->discarded > LINGER_MAX)
            conn_close(c);
        return;
    }
    if (nread > 0 && c->tls) {
        if (ms__http_tls_in(c, buf->base, (size_t)nread, feed) < 0) {
            conn_close(c);
            return;
        }
        settle(c);
    } else if (nread > 0) {
        feed(c, buf->base, (size_t)nread);
        settle(c);
    }
}

/* ---- event streams (http_events.c) ------------------------------------ */

void ms__http_conn_stream(struct conn *c)
{
    c->streaming = 1;
    c->keep_alive = 0;
    c->busy = 1;
    set_deadline(c, 0);
    set_class(c, ACTIVE);
    free(c->rest); /* a request pipelined after it is never answered */
    c->rest = NULL;
    c->rest_len = 0;
    read_start(c);
}

static void on_stream_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    free(req);
    if (status < 0 && !c->closing)
        conn_close(c);
}

int ms__http_conn_write(struct conn *c, const char *data, size_t len)
{
    if (c->closing)
        return -1;
    struct wreq *w = malloc(sizeof *w + len);
    if (w == NULL) {
        conn_close(c);
        return -1;
    }
    memcpy(w->data, data, len);
    w->req.data = c;
    uv_buf_t b = uv_buf_init(w->data, (unsigned int)len);
    /* through ms__http_write: sealed into records on a gateway_tls
     * connection, as every response is */
    if (ms__http_write(c, &w->req, &b, on_stream_write) != 0) {
        free(w);
        conn_close(c);
        return -1;
    }
    return 0;
}

void ms__http_conn_end(struct conn *c)
{
    if (c->closing || c->lingering)
        return;
    c->streaming = 0;
    read_stop(c);
    linger(c);
}

/* 1 when c's peer has sent bytes not read yet (a peek, no read). */
static int has_input(struct conn *c)
{
    uv_os_fd_t fd;
    char b;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return 0;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* The connection to close for `fresh`: the oldest that never sent a byte,
 * else the longest idle, else the oldest lingering; never `fresh` itself.
 * NULL when every other one is receiving or being answered a request. */
static struct conn *victim(struct ms_http *h, struct conn *fresh)
{
    struct conn *c, *next;
    for (int k = FRESH; k <= IDLE; k++) {
        for (c = h->head[k]; c; c = next) {
            next = c->next;
            if (c == fresh)
                continue;
            /* a request may wait unread (this loop turn has not read
             * yet): it is not silent, and closing would reset it */
            if (!has_input(c))
                return c;
            set_class(c, ACTIVE); /* read soon, then settled */
        }
    }
    return h->head[LINGER];
}

/* Refuses c at once: a 503 if its socket takes it now (no waiting for
 * the client to read it), then closed without reading. */
static void refuse(struct conn *c)
{
    struct ms_http *h = c->h;
    char head[160], body[2048], msg[96];
    size_t n;
    int hn;
    h->refused++;
    snprintf(msg, sizeof msg, "this node serves %d connections at most; "
             "try again later", h->max_conns);
    n = error_body(h, 503, "too_many_connections", msg, OWN, msg, body,
                   sizeof body);
    hn = snprintf(head, sizeof head, "HTTP/1.1 503 Service Unavailable\r\n"
                  "Content-Type: " JSON "\r\nContent-Length: %zu\r\n"
                  "Connection: close\r\n\r\n", n);
    uv_buf_t b[2] = {uv_buf_init(head, (unsigned)hn),
                     uv_buf_init(body, (unsigned)n)};
    if (!c->tls) /* no TLS session to say it in yet */
        (void)uv_try_write((uv_stream_t *)&c->tcp, b, 2);
    conn_close(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct ms_http *h = server->data;
    struct conn *c;

    if (status < 0 || h->closing)
        return;
    /* Out of memory: the connection waits in the backlog. */
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return;
    if (uv_tcp_init(h->loop, &c->tcp) != 0) {
        free(c);
        return;
    }
    c->tcp.data = c;
    c->h = h;
    c->refs = 1;
    h->handles++;
    h->nconns++;
    link_conn(c, FRESH);
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
        ms__http_tls_accept(c) < 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_tcp_keepalive(&c->tcp, 1, KEEPALIVE_PROBE_S);
    struct sockaddr_storage peer;
    int plen = sizeof peer;
    c->loopback = uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer,
                                     &plen) == 0 &&
                  ms_auth_is_loopback((struct sockaddr *)&peer);
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    set_deadline(c, c->h->timeout_ms);
    if (h->nconns > h->max_conns) {
        struct conn *old = victim(h, c);
        if (old == NULL) {
            refuse(c);
            return;
        }
        h->evicted++;
        conn_close(old); /* it may connect again */
    }
    read_start(c);
}

static void on_sweep(uv_timer_t *t)
{
    struct ms_http *h = t->data;
    uint64_t now = uv_now(h->loop);
    struct conn *c, *next;
    for (int k = 0; k < NCLASS; k++) {
        for (c = h->head[k]; c; c = next) {
            next = c->next;
            if (c->deadline_ms && now >= c->deadline_ms) {
                h->timeouts++;
                conn_close(c);
            }
        }
    }
}

static void on_sweep_closed(uv_handle_t *hd)
{
    handle_closed(hd->data);
}

/* ---- public ------------------------------------------------------------- */

/*
 * Binds a listener on host:port and serves the gateway of `node` on `loop`.
 * `host` must be an IPv4 or IPv6 literal; `node` is borrowed and must
 * outlive the gateway. Returns 0 and sets *out (released with
 * ms_http_close), or a negative libuv code with a one-line reason in `err`;
 * on failure the half-made listener is closed and freed by the loop.
 */
int ms_http_start(struct ms_http **out, uv_loop_t *loop,
                  const struct ms_gateway *gw, const char *host, int port,
                  char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    struct ms_http *h;
    int rc, sslen = (int)sizeof ss;
    char ip[48];

    *out = NULL;
    if (host == NULL || port < 0 || port > 65535) {
        set_err(err, errlen, "bad HTTP address %s:%d", host ? host : "",
                port);
        return MS_EINVAL;
    }
    memset(&ss, 0, sizeof ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        set_err(err, errlen,
                "HTTP host '%s' is not an IPv4 or IPv6 address", host);
        return MS_EINVAL;
    }
    /* libuv writes without MSG_NOSIGNAL: a client that goes away while
     * its response is written must not kill the node with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    h = calloc(1, sizeof *h);
    if (h == NULL) {
        set_err(err, errlen, "out of memory");
        return MS_ENOMEM;
    }
    h->loop = loop;
    h->gw = *gw;
    rc = ms__http_tls_setup(h, gw, err, errlen);
    if (rc < 0) {
        free(h);
        return rc;
    }
    h->timeout_ms = gw->timeout_ms;
    h->max_conns = gw->connections;
    if (uv_random(NULL, NULL, &h->id_seed, sizeof h->id_seed, 0, NULL) != 0)
        h->id_seed = uv_hrtime() ^ ((uint64_t)getpid() << 32);
    h->log4xx.burst = h->log5xx.burst = LOG_BURST;
    h->log4xx.per_s = h->log5xx.per_s = LOG_PER_S;
    rc = uv_tcp_init(loop, &h->listener);
    if (rc != 0) {
        set_err(err, errlen, "HTTP listener: %s", uv_strerror(rc));
        free(h);
        return ms_uv_error(rc);
    }
    h->listener.data = h;
    h->handles = 1;
    rc = uv_tcp_bind(&h->listener, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&h->listener, BACKLOG, on_connection);
    if (rc == 0)
        rc = uv_tcp_getsockname(&h->listener, (struct sockaddr *)&ss, &sslen);
    if (rc != 0) {
        set_err(err, errlen, "cannot listen on HTTP %s:%d: %s", host, port,
                uv_strerror(rc));
        h->closing = 1;
        uv_close((uv_handle_t *)&h->listener, on_listener_closed);
        return ms_uv_error(rc);
    }
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
        snprintf(h->address, sizeof h->address, "[%s]:%d", ip,
                 ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    } else {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
        snprintf(h->address, sizeof h->address, "%s:%d", ip,
                 ntohs(((struct sockaddr_in *)&ss)->sin_port));
    }
    uv_timer_init(loop, &h->sweep);
    h->sweep.data = h;
    h->handles++;
    uv_timer_start(&h->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    uv_unref((uv_handle_t *)&h->sweep); /* it keeps no loop alive */
    ms__http_events_init(h);
    *out = h;
    return 0;
}

const char *ms_http_address(struct ms_http *h)
{
    return h->address;
}

void ms_http_stats(struct ms_http *h, uint64_t *conns, uint64_t *timeouts,
                   uint64_t *refused)
{
    *conns = h ? (uint64_t)h->nconns : 0;
    *timeouts = h ? h->timeouts : 0;
    *refused = h ? h->refused : 0;
}

uint64_t ms_http_tls_failures(struct ms_http *h)
{
    return h ? h->tls_failures : 0;
}

/*
 * Stops listening and closes every connection at once (a response being
 * written is cut off). Pending asks keep their connection's memory alive
 * and drop the reply when they end. The gateway is freed by the last close
 * callback; `h` must not be used after this call. NULL is a no-op.
 */
void ms_http_close(struct ms_http *h)
{
    if (h == NULL || h->closing)
        return;
    h->closing = 1;
    for (int k = 0; k < NCLASS; k++)
        while (h->head[k] != NULL)
            conn_close(h->head[k]);
    ms__http_events_close(h);
    uv_close((uv_handle_t *)&h->sweep, on_sweep_closed);
    uv_close((uv_handle_t *)&h->listener, on_listener_closed);
}
