/*
 * http.c -- the node's HTTP gateway: libuv TCP, parsed by http-parser.
 *
 * One connection answers one request at a time. When a request is complete
 * the parser is paused and reading stops; the bytes that followed it
 * (pipelined requests) are kept in `rest` and parsed once the response has
 * been written. Responses therefore leave in request order without a queue,
 * and a slow ask holds back only its own connection.
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
#include "http.h"

#include <http_parser.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/auth.h"
#include "../core/client_error.h"
#include "../core/jsoncheck.h"
#include "../core/log.h"

/*
 * URL plus header names and values of one request, in bytes. A larger head
 * gets 431 and the connection is closed. The URL is the only part of the
 * head we keep, so this also bounds the URL buffer; http-parser's own limit
 * (80 KiB) stays in force behind ours.
 */
#define HEAD_MAX (16 * 1024)
#define ID_MAX MS_MAX_ID             /* bytes of a decoded entity id */
#define READ_BUF (64 * 1024)        /* one read, shared by all connections */
#define LINGER_MAX (1024 * 1024)    /* input discarded before a hard close */
#define BACKLOG 511
#define TIMEOUT_DEFAULT_MS 5000
#define TIMEOUT_MAX_S 300.0
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

#define JSON "application/json"
#define OK_BODY "{\"ok\":true}"

/* A connection's class: which list of the gateway it is on. Room for a
 * new connection is taken from FRESH, then IDLE, then LINGER. */
enum {
    FRESH,      /* accepted, no byte received yet */
    IDLE,       /* between requests */
    LINGER,     /* last response out, waiting for the peer's EOF */
    ACTIVE,     /* a request being received or answered */
    NCLASS
};

struct conn {
    uv_tcp_t tcp;
    uv_shutdown_t shutdown;
    http_parser parser;
    struct ms_http *h;          /* NULL once the handle is closed */
    struct conn *prev, *next;   /* h->head[cls], while not closing */
    int refs;                   /* the handle + a pending ask */
    unsigned cls : 2;           /* FRESH ... ACTIVE */
    unsigned busy : 1;          /* a request is being answered */
    unsigned reading : 1;
    unsigned keep_alive : 1;    /* of the current request */
    unsigned loopback : 1;      /* the client is on this host */
    unsigned in_token : 1;      /* the header being read is the token */
    unsigned token_seen : 1;    /* this request has a token header */
    unsigned head_done : 1;     /* headers over: trailers from here */
    unsigned in_expect : 1;     /* the header being read is Expect */
    char expect[16];            /* its value, lower case, cut */
    size_t expect_len;
    char field[24];             /* start of the current header name */
    size_t field_len;
    char token[128];            /* X-Moonshard-Token value */
    size_t token_len;
    unsigned lingering : 1;     /* response out, waiting for the peer's EOF */
    unsigned in_request : 1;    /* a request's first bytes were parsed */
    uint64_t deadline_ms;       /* closed then (loop time); 0: none */
    unsigned closing : 1;       /* uv_close called */
    size_t head_bytes;          /* URL + header bytes of this request */
    char *url;                  /* request target, not NUL-terminated */
    size_t url_len, url_cap;
    char *body;                 /* request body, freed once answered */
    size_t body_len, body_cap;
    size_t body_expect;         /* Content-Length, or 0 when absent */
    char *rest;                 /* unparsed input held while busy */
    size_t rest_len;
    size_t discarded;           /* bytes read while lingering */
};

struct ms_http {
    uv_tcp_t listener;
    uv_timer_t sweep;           /* closes connections past their deadline */
    uv_loop_t *loop;
    struct ms_node *node;
    struct conn *head[NCLASS], *tail[NCLASS];
    int handles;                /* open handles: listener, sweep timer,
                                   connections */
    int nconns;                 /* connections, not closing */
    uint64_t timeout_ms;        /* limits.http_timeout */
    int max_conns;              /* limits.http_connections */
    uint64_t timeouts;          /* connections closed by their deadline */
    uint64_t refused;           /* connections answered 503 (too many) */
    uint64_t evicted;           /* closed to make room for a new one */
    uint64_t id_seed, errors;   /* error ids: ms_client_error_id */
    struct ms_log_budget log4xx, log5xx;
    int closing;
    char address[64];           /* "host:port" bound, for the help page */
    char rbuf[READ_BUF];
};

/* Write request and response bytes in one allocation. */
struct wreq {
    uv_write_t req;
    char data[];
};

/* One piece of a response body. */
struct part {
    const char *p;
    size_t n;
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

static int streq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..*n) in place. Returns 0, or -1 on a bad escape. */
static int pct_decode(char *s, size_t *n)
{
    size_t i, o = 0;

    for (i = 0; i < *n; i++) {
        if (s[i] == '%') {
            int hi, lo;

            if (*n - i < 3 || (hi = hexval(s[i + 1])) < 0 ||
                (lo = hexval(s[i + 2])) < 0)
                return -1;
            s[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    *n = o;
    return 0;
}

/*
 * Reads `timeout=SECONDS` from the query string into *ms (default 5 s).
 * Returns 0, or -1 unless the value is a plain decimal number of seconds
 * with 0 < SECONDS <= 300 (no "inf", "nan", hex or blanks).
 */
static int parse_timeout(const char *q, size_t qlen, uint64_t *ms)
{
    size_t i = 0;

    *ms = TIMEOUT_DEFAULT_MS;
    while (i < qlen) {
        size_t j = i, vn;
        const char *v;
        char tmp[32], *end;
        double s;

        while (j < qlen && q[j] != '&')
            j++;
        if (streq(q + i, j - i, "timeout"))
            return -1;
        if (j - i < 8 || memcmp(q + i, "timeout=", 8) != 0) {
            i = j + 1;
            continue;
        }
        v = q + i + 8;
        vn = j - i - 8;
        if (vn == 0 || vn >= sizeof tmp)
            return -1;
        memcpy(tmp, v, vn);
        tmp[vn] = '\0';
        if (strspn(tmp, "0123456789.eE+-") != vn ||
            !((tmp[0] >= '0' && tmp[0] <= '9') || tmp[0] == '.'))
            return -1;
        s = strtod(tmp, &end);
        if (*end != '\0' || !(s > 0 && s <= TIMEOUT_MAX_S))
            return -1;
        *ms = (uint64_t)(s * 1000.0 + 0.5);
        if (*ms == 0)
            *ms = 1;
        i = j + 1;
    }
    return 0;
}

/* The HTTP status of a node error code. */
static int err_status(int err)
{
    switch (err) {
    case MS_EBADJSON:
    case MS_ENOTTABLE:
    case MS_EINVAL:
        return 400;
    case MS_ENOTYPE:
        return 404;
    case MS_E2BIG:
        return 413;
    case MS_ENOREPLY:
        return 502;
    case MS_EOVERFLOW:
    case MS_EUNAVAIL:
    case MS_ECANCELED:
        return 503;
    case MS_ETIMEDOUT:
        return 504;
    default: /* MS_EHANDLER, MS_ENOMEM, ... */
        return 500;
    }
}

/* ---- connection lifetime ------------------------------------------------ */

static void handle_closed(struct ms_http *h)
{
    if (--h->handles == 0)
        free(h);
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

static void conn_unref(struct conn *c)
{
    if (--c->refs > 0)
        return;
    free(c->url);
    free(c->body);
    free(c->rest);
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
    if (!c->busy)
        read_start(c);
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
    if (!c->keep_alive) {
        linger(c);
        return;
    }
    c->busy = 0;
    set_deadline(c, c->h->timeout_ms);
    resume(c);
    settle(c);
}

/*
 * Queues the response to the current request: a status line, headers and
 * the body made of `parts`. `extra` is NULL or more header lines, each
 * ending in CRLF. Frees the request body, which nothing needs any more.
 */
static void respond_v(struct conn *c, int status, const char *ctype,
                      const char *extra, const struct part *parts, int n)
{
    char head[256];
    size_t len = 0, off;
    struct wreq *w;
    uv_buf_t b;
    int hn, i;

    c->busy = 1;
    drop_body(c);
    if (c->closing)
        return;
    set_deadline(c, c->h->timeout_ms);
    for (i = 0; i < n; i++)
        len += parts[i].n;
    hn = snprintf(head, sizeof head,
                  "HTTP/1.1 %d %s\r\n"
                  "Content-Type: %s\r\n"
                  "Content-Length: %zu\r\n"
                  "%s"
                  "Connection: %s\r\n"
                  "\r\n",
                  status, http_status_str((enum http_status)status), ctype,
                  len, extra ? extra : "",
                  c->keep_alive ? "keep-alive" : "close");
    if (hn < 0 || (size_t)hn >= sizeof head) {
        conn_close(c);
        return;
    }
    w = malloc(sizeof *w + (size_t)hn + len);
    if (w == NULL) {
        conn_close(c);
        return;
    }
    memcpy(w->data, head, (size_t)hn);
    off = (size_t)hn;
    if (c->parser.method == HTTP_HEAD)
        n = 0; /* the head says how long the body of a GET would be */
    for (i = 0; i < n; i++) {
        memcpy(w->data + off, parts[i].p, parts[i].n);
        off += parts[i].n;
    }
    w->req.data = c;
    b = uv_buf_init(w->data, (unsigned int)off);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write) != 0) {
        free(w);
        conn_close(c);
    }
}

static void respond(struct conn *c, int status, const char *ctype,
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

/* Error texts: the gateway's own words are shown as they are (cut to
 * MS_CLIENT_MSG_MAX bytes); any other detail (a handler's error, a Lua
 * module's) only as ms_client_error_text makes it. */
enum { OWN, FOREIGN };

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

/* Answers an error; `extra` is NULL or more header lines (see
 * error_body for the rest). */
static void respond_error_x(struct conn *c, int status, const char *extra,
                            const char *code, const char *detail, int kind,
                            const char *generic)
{
    char body[2048];
    struct part p = {body, 0};
    p.n = error_body(c->h, status, code, detail, kind, generic, body,
                     sizeof body);
    respond_v(c, status, JSON, extra, &p, 1);
}

/* Answers an error of the gateway's own words (printf-like). */
static void __attribute__((format(printf, 4, 5)))
respond_error(struct conn *c, int status, const char *code, const char *fmt,
              ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    respond_error_x(c, status, NULL, code, msg, OWN, "the request failed");
}

static void respond_node_error(struct conn *c, int err)
{
    respond_error(c, err_status(err), ms_errname(err), "%s",
                  ms_strerror(err));
}

static void not_allowed(struct conn *c, const char *method)
{
    char extra[32], msg[64];

    snprintf(extra, sizeof extra, "Allow: %s\r\n", method);
    snprintf(msg, sizeof msg, "this endpoint takes %s", method);
    respond_error_x(c, 405, extra, "method_not_allowed", msg, OWN, msg);
}

/* ---- endpoints ---------------------------------------------------------- */

static void on_ask(void *data, int err, const char *payload, size_t len)
{
    struct conn *c = data;

    if (!c->closing) {
        char code[64], detail[1024];
        if (err == 0) {
            respond(c, 200, JSON, payload, len);
        } else if (payload != NULL && len > 0) {
            /* payload is {"code": ..., "message": ...}, from this node or
             * the owner's; its message is the detail */
            int ok = ms_client_error_parse(payload, len, code, sizeof code,
                                           detail, sizeof detail) == 0;
            respond_error_x(c, err_status(err), NULL,
                            ok ? code : ms_errname(err), ok ? detail : NULL,
                            FOREIGN, ms_strerror(err));
        } else {
            respond_node_error(c, err);
        }
    }
    conn_unref(c);
}

static void get_index(struct conn *c)
{
    const char *a = c->h->address;
    char text[2048];
    int n;

    n = snprintf(text, sizeof text,
        "moonshard node %s -- HTTP gateway\n"
        "\n"
        "Send a message to an entity (202, no reply):\n"
        "  curl -X POST -d '{\"type\":\"incr\"}' "
        "http://%s/v1/entities/Counter/c1/tell\n"
        "Ask an entity and wait for its reply (timeout in seconds, "
        "default 5, at most 300):\n"
        "  curl -X POST -d '{\"type\":\"get\"}' "
        "'http://%s/v1/entities/Counter/c1/ask?timeout=5'\n"
        "Passivate an entity:\n"
        "  curl -X POST http://%s/v1/entities/Counter/c1/stop\n"
        "Node counters and health (and Prometheus metrics):\n"
        "  curl http://%s/v1/stats\n"
        "  curl http://%s/v1/health\n"
        "  curl http://%s/metrics\n"
        "The cluster: members, and a type's shard owners:\n"
        "  curl http://%s/v1/members\n"
        "  curl http://%s/v1/allocations/Counter\n"
        "\n"
        "Bodies are JSON objects. Errors come back as\n"
        "{\"error\":{\"code\":...,\"message\":...}} with a 4xx or 5xx "
        "status.\n"
        "The same from a shell: moonshard tell|ask|stop|status "
        "[--node %s] ...\n",
        ms_node_name(c->h->node), a, a, a, a, a, a, a, a, a);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof text)
        n = (int)sizeof text - 1;
    respond(c, 200, "text/plain; charset=utf-8", text, (size_t)n);
}

/* The JSON a node writer produces, NUL-terminated: in `small` when it
 * fits, else in a buffer the caller frees (grown once); NULL when out of
 * memory. */
static char *node_json(struct ms_node *n,
                       size_t (*write)(struct ms_node *, char *, size_t),
                       char *small, size_t cap, size_t *len)
{
    size_t need = write(n, small, cap);
    if (need < cap) {
        *len = need;
        return small;
    }
    char *big = malloc(need + 1);
    if (big == NULL)
        return NULL;
    if (write(n, big, need + 1) < need)
        need = strlen(big);
    *len = need;
    return big;
}

/* Answers 200 with the JSON a node writer produces. */
static void get_json(struct conn *c,
                     size_t (*write)(struct ms_node *, char *, size_t))
{
    char small[4096];
    size_t len;
    char *json = node_json(c->h->node, write, small, sizeof small, &len);
    if (json == NULL) {
        respond_node_error(c, MS_ENOMEM);
        return;
    }
    respond(c, 200, JSON, json, len);
    if (json != small)
        free(json);
}

static void get_stats(struct conn *c)
{
    get_json(c, ms_node_stats_json);
}

static void get_members(struct conn *c)
{
    get_json(c, ms_node_members_json);
}

/* GET /metrics: the stats in the Prometheus text format, rendered by
 * lua/moonshard/metrics.lua. */
static void get_metrics(struct conn *c)
{
    char small[4096], err[256], *text = NULL;
    size_t len;
    char *json = node_json(c->h->node, ms_node_stats_json, small,
                           sizeof small, &len);
    if (json == NULL) {
        respond_node_error(c, MS_ENOMEM);
        return;
    }
    snprintf(err, sizeof err, "the metrics module returned nothing");
    int rc = ms_node_call_lua(c->h->node, "moonshard.metrics", "render",
                              json, &text, err, sizeof err);
    if (json != small)
        free(json);
    if (rc < 0 || text == NULL || text[0] == 0) {
        respond_error_x(c, 500, NULL, "internal", err, FOREIGN,
                        "the metrics could not be rendered");
    } else {
        respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                strlen(text));
    }
    free(text);
}

static void get_allocations(struct conn *c, char *type, size_t tlen)
{
    if (pct_decode(type, &tlen) != 0) {
        respond_error(c, 400, "bad_request", "bad percent-escape in path");
        return;
    }
    int t = ms_node_type(c->h->node, type, tlen);
    if (t < 0) {
        respond_error(c, 404, ms_errname(MS_ENOTYPE),
                      "unknown entity type '%.*s'",
                      (int)(tlen > 100 ? 100 : tlen), type);
        return;
    }
    size_t need = ms_node_allocations_json(c->h->node, t, NULL, 0);
    char *buf = malloc(need + 1);
    if (!buf) {
        respond_node_error(c, MS_ENOMEM);
        return;
    }
    ms_node_allocations_json(c->h->node, t, buf, need + 1);
    respond(c, 200, JSON, buf, need);
    free(buf);
}

/* 1 when the request carries the admin token; else answers 403, 0. */
static int admin_ok(struct conn *c)
{
    int rc = ms_node_check_admin(c->h->node, c->token, c->token_len,
                                 c->loopback);
    if (rc < 0)
        respond_error(c, 403, "forbidden", "%s",
                      rc == MS_EINVAL ? "this node has no admin_token "
                                        "configured"
                      : rc == UV_EPERM
                          ? "admin endpoints answer only clients on this "
                            "host (set admin_remote = true in the config "
                            "to allow others, with the token)"
                          : "missing or wrong X-Moonshard-Token");
    return rc == 0;
}

/* POST /v1/leave (no body: the node that receives it leaves) and
 * POST /v1/down (body: the member's address as a JSON string or
 * {"address": ...}); both need the admin token in the X-Moonshard-Token
 * header. */
static void post_admin(struct conn *c, int leave)
{
    if (!admin_ok(c))
        return;
    int rc;
    if (leave) {
        rc = ms_node_leave(c->h->node);
    } else {
        char address[200];
        size_t n = c->body_len < sizeof address - 1 ? c->body_len
                                                    : sizeof address - 1;
        memcpy(address, c->body ? c->body : "", n);
        address[n] = 0;
        rc = ms_node_down(c->h->node, address);
    }
    if (rc < 0)
        respond_error(c, rc == MS_EINVAL ? 404 : 409,
                      rc == MS_EINVAL ? "not_found" : "conflict", "%s",
                      leave ? "this node cannot leave now"
                            : "no member has this address");
    else
        respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
}

/* POST /v1/move/{type}/{shard} (admin token): the coordinator starts
 * moving that shard away from its owner through handoff; the strategy
 * places it. 202 when the move began; 409 on a node that does not
 * coordinate, or when the shard is moving already. */
static void post_move(struct conn *c, const char *rest, size_t len)
{
    if (!admin_ok(c))
        return;
    int rc;
    const char *slash = memchr(rest, '/', len);
    char *end = NULL;
    char num[16];
    size_t nl = slash ? len - (size_t)(slash + 1 - rest) : 0;
    if (!slash || nl == 0 || nl >= sizeof num) {
        respond_error(c, 404, "not_found", "use /v1/move/{type}/{shard}");
        return;
    }
    memcpy(num, slash + 1, nl);
    num[nl] = 0;
    unsigned long shard = strtoul(num, &end, 10);
    if (*end || num[0] == '-' || shard > UINT32_MAX) {
        respond_error(c, 400, "bad_request", "the shard must be a number");
        return;
    }
    rc = ms_node_move(c->h->node, rest, (size_t)(slash - rest),
                      (uint32_t)shard);
    if (rc == MS_ENOTYPE)
        respond_error(c, 404, "unknown_type", "unknown entity type");
    else if (rc == MS_EBUSY)
        respond_error(c, 409, "busy", "the shard is moving already");
    else if (rc < 0)
        respond_error(c, 409, "conflict", "this node is not the ready "
                      "coordinator, or the shard has no owner");
    else
        respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
}

static void get_health(struct conn *c)
{
    const char *name = ms_node_name(c->h->node);
    char body[1024];
    size_t n = 0, cap = sizeof body - 2;

    n = strlen("{\"ok\":true,\"node\":\"");
    memcpy(body, "{\"ok\":true,\"node\":\"", n);
    ms_json_put_escaped(body, cap, &n, name, strlen(name));
    memcpy(body + n, "\"}", 2);
    respond(c, 200, JSON, body, n + 2);
}

/*
 * POST /v1/entities/{type}/{id}/{action}: `seg` is "{type}/{id}/{action}",
 * still percent-encoded, inside c->url (decoded in place).
 */
static void post_entity(struct conn *c, char *seg, size_t len,
                        const char *query, size_t qlen)
{
    struct ms_node *node = c->h->node;
    char *type, *id, *action, *slash, reason[256];
    size_t tlen, idlen, alen;
    uint64_t timeout_ms = 0;
    int t, rc;

    type = seg;
    slash = memchr(type, '/', len);
    if (slash == NULL)
        goto not_found;
    tlen = (size_t)(slash - type);
    id = slash + 1;
    slash = memchr(id, '/', len - tlen - 1);
    if (slash == NULL)
        goto not_found;
    idlen = (size_t)(slash - id);
    action = slash + 1;
    alen = len - tlen - idlen - 2;
    if (memchr(action, '/', alen) != NULL ||
        !(streq(action, alen, "tell") || streq(action, alen, "ask") ||
          streq(action, alen, "stop") || streq(action, alen, "activate") ||
          streq(action, alen, "owner")))
        goto not_found;
    int owner_q = streq(action, alen, "owner");
    int m = c->parser.method;
    if (owner_q ? m != HTTP_GET && m != HTTP_HEAD : m != HTTP_POST) {
        not_allowed(c, owner_q ? "GET" : "POST");
        return;
    }

    if (pct_decode(type, &tlen) != 0 || pct_decode(id, &idlen) != 0) {
        respond_error(c, 400, "bad_request", "bad percent-escape in path");
        return;
    }
    if (idlen == 0 || idlen > ID_MAX) {
        respond_error(c, 400, "bad_request",
                      "entity id must be 1 to %d bytes long", ID_MAX);
        return;
    }
    t = ms_node_type(node, type, tlen);
    if (t < 0) {
        respond_error(c, 404, ms_errname(MS_ENOTYPE),
                      "unknown entity type '%.*s'",
                      (int)(tlen > 100 ? 100 : tlen), type);
        return;
    }

    if (owner_q) {
        char buf[512], *big = NULL;
        uint32_t shard;
        rc = ms_node_shard_of(node, t, id, idlen, &shard);
        if (rc < 0) {
            respond_node_error(c, rc);
            return;
        }
        size_t n = ms_node_owner_json(node, t, id, idlen, buf, sizeof buf);
        if (n >= sizeof buf && (big = malloc(n + 1)) != NULL)
            n = ms_node_owner_json(node, t, id, idlen, big, n + 1);
        else if (n >= sizeof buf)
            n = 0;
        if (n == 0)
            respond_node_error(c, MS_ENOMEM);
        else
            respond(c, 200, JSON, big ? big : buf, n);
        free(big);
        return;
    }
    if (action[0] == 'a' && action[1] == 'c') {
        c->refs++;
        rc = ms_node_activate(node, t, id, idlen, TIMEOUT_DEFAULT_MS, on_ask,
                              c);
        if (rc < 0) {
            c->refs--;
            respond_node_error(c, rc);
        }
        return;
    }

    if (action[0] == 's') {
        rc = ms_node_stop_entity(node, t, id, idlen);
        if (rc < 0)
            respond_node_error(c, rc);
        else
            respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
        return;
    }

    if (action[0] == 'a' && parse_timeout(query, qlen, &timeout_ms) != 0) {
        respond_error(c, 400, "bad_timeout",
                      "timeout must be a number of seconds, > 0 and <= %g",
                      TIMEOUT_MAX_S);
        return;
    }
    reason[0] = '\0';
    rc = ms_node_check_message(node, c->body, c->body_len, reason,
                               sizeof reason);
    if (rc == MS_EBADJSON) {
        respond_error(c, 400, ms_errname(rc), "body is not valid JSON: %s",
                      reason);
        return;
    }
    if (rc < 0) {
        respond_error(c, err_status(rc), ms_errname(rc), "%s",
                      reason[0] ? reason : "body must be a JSON object");
        return;
    }

    if (action[0] == 't') {
        rc = ms_node_tell(node, t, id, idlen, c->body, c->body_len);
        if (rc < 0)
            respond_node_error(c, rc);
        else
            respond(c, 202, JSON, OK_BODY, strlen(OK_BODY));
        return;
    }

    /* The ask's reference keeps `c` alive until on_ask, even if the
     * connection closes first; the body stays until the reply too. */
    c->refs++;
    rc = ms_node_ask(node, t, id, idlen, c->body, c->body_len, timeout_ms,
                     on_ask, c);
    if (rc < 0) {
        c->refs--;
        respond_node_error(c, rc);
    }
    return;

not_found:
    respond_error(c, 404, "not_found",
                  "no such endpoint; GET / lists them");
}

static void route(struct conn *c)
{
    struct http_parser_url u;
    char *path;
    const char *query = "";
    size_t plen, qlen = 0;
    /* HEAD: as GET, and respond_v leaves the body out */
    int get = c->parser.method == HTTP_GET || c->parser.method == HTTP_HEAD;

    http_parser_url_init(&u);
    if (c->url_len == 0 ||
        http_parser_parse_url(c->url, c->url_len,
                              c->parser.method == HTTP_CONNECT, &u) != 0 ||
        !(u.field_set & (1 << UF_PATH))) {
        respond_error(c, 400, "bad_request", "malformed request target");
        return;
    }
    path = c->url + u.field_data[UF_PATH].off;
    plen = u.field_data[UF_PATH].len;
    if (u.field_set & (1 << UF_QUERY)) {
        query = c->url + u.field_data[UF_QUERY].off;
        qlen = u.field_data[UF_QUERY].len;
    }

    /* the endpoints a bare GET (or HEAD) answers */
    static const struct {
        const char *path;
        void (*answer)(struct conn *);
    } gets[] = {
        {"/", get_index},           {"/v1/stats", get_stats},
        {"/metrics", get_metrics},  {"/v1/members", get_members},
        {"/v1/health", get_health},
    };
    for (size_t i = 0; i < sizeof gets / sizeof gets[0]; i++) {
        if (streq(path, plen, gets[i].path)) {
            if (get)
                gets[i].answer(c);
            else
                not_allowed(c, "GET");
            return;
        }
    }

    if (plen > 16 && memcmp(path, "/v1/allocations/", 16) == 0) {
        if (get)
            get_allocations(c, path + 16, plen - 16);
        else
            not_allowed(c, "GET");
    } else if (streq(path, plen, "/v1/leave") ||
               streq(path, plen, "/v1/down")) {
        if (c->parser.method == HTTP_POST)
            post_admin(c, path[4] == 'l');
        else
            not_allowed(c, "POST");
    } else if (plen > 9 && memcmp(path, "/v1/move/", 9) == 0) {
        if (c->parser.method == HTTP_POST)
            post_move(c, path + 9, plen - 9);
        else
            not_allowed(c, "POST");
    } else if (plen > 13 && memcmp(path, "/v1/entities/", 13) == 0) {
        post_entity(c, path + 13, plen - 13, query, qlen);
    } else {
        respond_error(c, 404, "not_found",
                      "no such endpoint; GET / lists them");
    }
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
    if (c->in_token || c->in_expect || c->field_len == SIZE_MAX) {
        c->field_len = 0;
        c->in_token = 0;
        c->in_expect = 0;
    }
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
        c->in_expect = c->field_len == 6 &&
                       memcmp(c->field, "expect", 6) == 0;
        if (c->in_expect)
            c->expect_len = 0;
        c->field_len = SIZE_MAX; /* the next name starts afresh */
    }
    if (c->in_token)
        for (size_t i = 0; i < len && c->token_len < sizeof c->token; i++)
            c->token[c->token_len++] = at[i];
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
    if (uv_write(req, (uv_stream_t *)&c->tcp, &b, 1, on_continue_written)) {
        free(req);
        conn_close(c);
    }
}

static int on_headers_complete(http_parser *p)
{
    struct conn *c = p->data;
    size_t max = ms_node_max_message(c->h->node);

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
    size_t max = ms_node_max_message(c->h->node);

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
    route(c);
    return 0;
}

/* ---- I/O ---------------------------------------------------------------- */

/* Runs the parser over new input; see the comment at the top. */
static void feed(struct conn *c, const char *data, size_t len)
{
    size_t n = http_parser_execute(&c->parser, &settings, data, len);

    if (c->closing)
        return;
    if (c->busy) {
        /* A request is being answered (parser paused), or a callback
         * answered an error and failed the parser (keep_alive is 0). */
        read_stop(c);
        if (c->keep_alive && n < len) {
            c->rest = malloc(len - n);
            if (c->rest == NULL) {
                conn_close(c);
                return;
            }
            memcpy(c->rest, data + n, len - n);
            c->rest_len = len - n;
        }
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

    if (nread < 0) { /* EOF or error */
        conn_close(c);
        return;
    }
    if (c->lingering) {
        c->discarded += (size_t)nread;
        if (c->discarded > LINGER_MAX)
            conn_close(c);
        return;
    }
    if (nread > 0) {
        feed(c, buf->base, (size_t)nread);
        settle(c);
    }
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
    for (c = h->head[FRESH]; c; c = next) {
        next = c->next;
        if (c == fresh)
            continue;
        /* accepted in this loop turn, its request may wait unread */
        if (!has_input(c))
            return c;
        set_class(c, ACTIVE); /* read soon, then settled */
    }
    if (h->head[IDLE])
        return h->head[IDLE];
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
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
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
int ms_http_start(struct ms_http **out, uv_loop_t *loop, struct ms_node *node,
                  const char *host, int port, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    struct ms_http *h;
    int rc, sslen = (int)sizeof ss;
    char ip[48];

    *out = NULL;
    if (host == NULL || port < 0 || port > 65535) {
        set_err(err, errlen, "bad HTTP address %s:%d", host ? host : "",
                port);
        return UV_EINVAL;
    }
    memset(&ss, 0, sizeof ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        set_err(err, errlen,
                "HTTP host '%s' is not an IPv4 or IPv6 address", host);
        return UV_EINVAL;
    }
    /* libuv writes without MSG_NOSIGNAL: a client that goes away while
     * its response is written must not kill the node with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    h = calloc(1, sizeof *h);
    if (h == NULL) {
        set_err(err, errlen, "out of memory");
        return UV_ENOMEM;
    }
    h->loop = loop;
    h->node = node;
    ms_node_http_limits(node, &h->timeout_ms, &h->max_conns);
    if (uv_random(NULL, NULL, &h->id_seed, sizeof h->id_seed, 0, NULL) != 0)
        h->id_seed = uv_hrtime() ^ ((uint64_t)getpid() << 32);
    h->log4xx.burst = h->log5xx.burst = LOG_BURST;
    h->log4xx.per_s = h->log5xx.per_s = LOG_PER_S;
    rc = uv_tcp_init(loop, &h->listener);
    if (rc != 0) {
        set_err(err, errlen, "HTTP listener: %s", uv_strerror(rc));
        free(h);
        return rc;
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
        return rc;
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
    uv_close((uv_handle_t *)&h->sweep, on_sweep_closed);
    uv_close((uv_handle_t *)&h->listener, on_listener_closed);
}
