/*
 * http_conn.h -- what the two halves of the HTTP gateway share (not a
 * public API): http_conn.c accepts, parses, bounds and answers
 * connections; http.c routes each complete request to its endpoint.
 */
#ifndef MS_IO_HTTP_CONN_H
#define MS_IO_HTTP_CONN_H

#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../core/client_error.h"
#include "http.h"

struct ms_tls;
struct ms_tls_ctx;
struct ms_gateway;

#define READ_BUF (64 * 1024)        /* one read, shared by all connections */
#define JSON "application/json"

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
    unsigned peer_eof : 1;      /* EOF read while busy: close once answered */
    unsigned in_feed : 1;       /* feed() is running the parser */
    unsigned answered : 1;      /* ... and a response went out meanwhile */
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
    unsigned in_api : 1;        /* the header being read carries the API
                                   token (X-Moonshard-Api-Token or
                                   Authorization) */
    unsigned api_x_seen : 1;    /* an X-Moonshard-Api-Token was read */
    unsigned authz_seen : 1;    /* an Authorization header was read (a
                                   token was sent when either is set) */
    char api[160];              /* its value ("Bearer " kept), cut */
    size_t api_len;
    unsigned in_opid : 1;       /* the header being read is Idempotency-Key */
    unsigned opid_seen : 1;     /* this request has one */
    char opid[MS_HTTP_OPID_MAX + 1]; /* its value; one byte more marks a
                                        value too long */
    size_t opid_len;
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
    unsigned streaming : 1;     /* GET /v1/events: an event stream */
    uint64_t stream_sent_ms;    /* a stream's last write (loop time) */
    struct ms_tls *tls;         /* gateway_tls: its state (http_tls.c) */
    int tls_up;                 /* its handshake is done */
};

/* The event streams of the gateway (http_events.c): GET /v1/events. */
struct ms_http_events {
    uv_timer_t keepalive;       /* reaps closed streams, sends comments */
    uint64_t keepalive_ms;      /* MS_HTTP_EVENT_KEEPALIVE_MS (a test
                                 * shortens it) */
    struct conn *streams[MS_HTTP_EVENT_STREAMS]; /* each holds a ref */
    int nstreams;
    uint64_t last_seq;          /* of the last event published */
    uint64_t cut_off;           /* streams ended: client too slow */
    uint64_t refused;           /* stream requests answered 503 */
    uint64_t published;         /* events published */
};

struct ms_http {
    uv_tcp_t listener;
    uv_timer_t sweep;           /* closes connections past their deadline */
    uv_loop_t *loop;
    struct ms_gateway gw;       /* the node, as the endpoints see it */
    struct conn *head[NCLASS], *tail[NCLASS];
    int handles;                /* open handles: listener, sweep timer,
                                   connections */
    int nconns;                 /* connections, not closing */
    uint64_t timeout_ms;        /* limits.http_timeout */
    int max_conns;              /* limits.http_connections */
    uint64_t timeouts;          /* connections closed by their deadline */
    uint64_t refused;           /* connections answered 503 (too many) */
    uint64_t evicted;           /* closed to make room for a new one */
    uint64_t tls_failures;      /* gateway_tls handshakes that failed */
    uint64_t id_seed, errors;   /* error ids: ms_client_error_id */
    struct ms_log_budget log4xx, log5xx;
    int closing;
    char address[64];           /* "host:port" bound, for the help page */
    struct ms_http_events ev;   /* event streams (http_events.c) */
    struct ms_tls_ctx *tls;     /* gateway_tls; NULL: plain HTTP */
    char *tls_plain;            /* gateway_tls: the plaintext of one read,
                                   kept for the next (http_tls.c) */
    size_t tls_plain_cap;
    char rbuf[READ_BUF];
};

/* One piece of a response body. */
struct part {
    const char *p;
    size_t n;
};

/* Error texts: the gateway's own words are shown as they are (cut to
 * MS_CLIENT_MSG_MAX bytes); any other detail (a handler's error, a Lua
 * module's) only as ms_client_error_text makes it. */
enum { MS_HTTP_OWN, MS_HTTP_FOREIGN };

/*
 * Queues the response to c's current request: a status line, headers and
 * the body made of `parts` (copied). `extra` is NULL or more header lines,
 * each ending in CRLF. Frees the request body, which nothing needs any
 * more. After the write the connection reads its next request, or
 * closes when the request asked so (or failed).
 */
void ms__http_respond_v(struct conn *c, int status, const char *ctype,
                        const char *extra, const struct part *parts, int n);

/* ms__http_respond_v with one piece of body. */
void ms__http_respond(struct conn *c, int status, const char *ctype,
                      const char *body, size_t len);

/*
 * Answers {"error":{"code":..,"message":..,"id":..}}: the message is
 * `detail` made safe as `kind` (MS_HTTP_OWN or MS_HTTP_FOREIGN) says, or
 * `generic` when nothing of it may be shown (or detail is NULL); the
 * whole detail is logged under the id. `extra` as for respond_v.
 */
void ms__http_respond_error_x(struct conn *c, int status, const char *extra,
                              const char *code, const char *detail,
                              int kind, const char *generic);

/* Answers an error in the gateway's own words (printf-like). */
void ms__http_respond_error(struct conn *c, int status, const char *code,
                            const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* http_tls.c: writes b (as uv_write does; with TLS, sealed first, and cb
 * gets `req` once the ciphertext is written). 0 or a negative code. */
int ms__http_write(struct conn *c, uv_write_t *req, const uv_buf_t *b,
                   uv_write_cb cb);
/* http_tls.c: n bytes read from a TLS connection: the handshake, then
 * the plaintext to `feed`. 0, or a negative code (close it). */
int ms__http_tls_in(struct conn *c, const char *p, size_t n,
                    void (*feed)(struct conn *, const char *, size_t));
/* http_tls.c: a new connection's TLS state, when the gateway has TLS. */
int ms__http_tls_accept(struct conn *c);
/* http_tls.c: the gateway's TLS context from gw (none without
 * tls_cert); the files are checked. 0, or negative with err set. */
int ms__http_tls_setup(struct ms_http *h, const struct ms_gateway *gw,
                       char *err, size_t errlen);

/* Drops a reference to c (a pending ask's); frees it after the last. */
void ms__http_conn_unref(struct conn *c);

/* Answers the complete request of c (defined in http.c): every path ends
 * in exactly one response, now or from an ask callback. */
void ms__http_route(struct conn *c);

/* ---- for the event streams (http_events.c) ---- */

/* Turns c, whose request is being answered, into a stream: no deadline,
 * never evicted (it stays ACTIVE), input read and discarded so that the
 * peer's close is seen, closed when the client goes or the gateway
 * closes. The caller writes with ms__http_conn_write. */
void ms__http_conn_stream(struct conn *c);

/* Queues `len` bytes (copied) on c. A failed write closes c. Returns 0,
 * or -1 when c is closing or the write could not be queued. */
int ms__http_conn_write(struct conn *c, const char *data, size_t len);

/* Ends c after what was queued: half-close, then close (as after a
 * response with Connection: close). */
void ms__http_conn_end(struct conn *c);

/* GET /v1/events (http_events.c). */
void ms__http_get_events(struct conn *c);

/* Sets up and closes the event streams' part of the gateway
 * (http_events.c); init adds its timer to h->handles. */
void ms__http_events_init(struct ms_http *h);
void ms__http_events_close(struct ms_http *h);

/* Called by the close callback of each handle of the gateway; frees the
 * gateway after the last. */
void ms__http_handle_closed(struct ms_http *h);

/* The short names both halves use. */
#define respond ms__http_respond
#define respond_v ms__http_respond_v
#define respond_error ms__http_respond_error
#define respond_error_x ms__http_respond_error_x
#define conn_unref ms__http_conn_unref
#define OWN MS_HTTP_OWN
#define FOREIGN MS_HTTP_FOREIGN

#endif
