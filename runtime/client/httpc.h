/*
 * httpc.h -- the small blocking HTTP/1.1 client of a node's gateway, used
 * by the CLI (runtime/cli.c) and the benches (bench/): one connection,
 * one request at a time, keep-alive optional, every timeout an argument.
 * Responses are parsed with http-parser (the gateway's parser), through
 * struct ms_httpc_parser, which the benches' event-driven load client
 * (bench/load.c) uses on its own sockets too.
 *
 * A node given as https://HOST:PORT is spoken to over TLS (libssl on the
 * blocking socket; TLS 1.2 or newer): its certificate must verify against
 * the CA file in $MOONSHARD_CA (else the system's CAs) and name HOST (a
 * DNS name or an IP address in its subjectAltName). With $MOONSHARD_CERT
 * (and $MOONSHARD_KEY, else the key is in that file) it presents that
 * client certificate, for a gateway that has a client CA.
 *
 * Limits: a response body of at most the `body_max` given (the CLI and
 * the benches pass MS_HTTPC_BODY_MAX); a node address (HOST:PORT or
 * [V6]:PORT) of at most 255 bytes of host and 15 of port.
 */
#ifndef MS_HTTPC_H
#define MS_HTTPC_H

#include <stddef.h>

#include <http_parser.h>

#define MS_HTTPC_BODY_MAX (64 * 1024 * 1024)

/* Results (0 or negative). A message for people goes into `err`. Codes
 * of its own rather than MS_E*: the client links no core (the CLI and the
 * benches only tell these cases apart, and print `err`). */
enum {
    MS_HTTPC_OK = 0,
    MS_HTTPC_EADDR = -1,    /* not HOST:PORT */
    MS_HTTPC_ECONNECT = -2, /* cannot resolve or connect */
    MS_HTTPC_ESEND = -3,    /* the request could not be sent, no answer */
    MS_HTTPC_ETIMEOUT = -4, /* no complete response in time */
    MS_HTTPC_EPROTO = -5,   /* not an HTTP response, or closed too early */
    MS_HTTPC_ETOOBIG = -6,  /* the body is larger than body_max */
    MS_HTTPC_ENOMEM = -7,
};

/* ---- the response parser ----------------------------------------------- */

/*
 * One response at a time, fed in pieces. With body_max 0 the body is
 * skipped (a load client only wants the status); else it is collected,
 * NUL-terminated, up to body_max bytes.
 */
struct ms_httpc_parser {
    http_parser p;
    size_t body_max;
    char *body;                 /* owned; taken by ms_httpc_parser_take */
    size_t len, cap;
    int status;                 /* set when a response is complete */
    int complete, too_big, keep_alive;
};

/* Prepares ps for a first response; ps owns no memory until bytes with a
 * body arrive. */
void ms_httpc_parser_init(struct ms_httpc_parser *ps, size_t body_max);

/*
 * Feeds `len` bytes (len 0: the peer closed, which ends a body read until
 * close). Stops right after a complete response: *used says how many bytes
 * were consumed. Returns 1 when a response is complete (ps->status,
 * ps->body, ps->keep_alive), 0 when more bytes are needed, or
 * MS_HTTPC_EPROTO / MS_HTTPC_ETOOBIG / MS_HTTPC_ENOMEM.
 */
int ms_httpc_parser_feed(struct ms_httpc_parser *ps, const char *buf,
                         size_t len, size_t *used);

/* Makes ps ready for the next response on the same connection; keeps the
 * body buffer for reuse. */
void ms_httpc_parser_next(struct ms_httpc_parser *ps);

/* The text of the parser's last error (http-parser's description). */
const char *ms_httpc_parser_error(const struct ms_httpc_parser *ps);

/* Frees the body buffer. */
void ms_httpc_parser_free(struct ms_httpc_parser *ps);

/* ---- the blocking client ----------------------------------------------- */

/* A connection to one node. */
struct ms_httpc {
    int fd;                     /* -1: closed */
    void *ssl, *ctx;            /* https://: SSL and SSL_CTX; else NULL */
    char node[300];             /* as given, for messages and Host: */
    double send_timeout_s;
};

/* A response: status and body (NUL-terminated, `len` bytes without the
 * NUL; owned by the caller, free(body)). */
struct ms_httpc_resp {
    int status;
    char *body;
    size_t len;
};

/*
 * Connects to `node` (HOST:PORT or [V6]:PORT; names are resolved), within
 * connect_timeout_s, which also bounds each later send. Returns 0 or a
 * negative MS_HTTPC_E* with a reason in err (which names the node).
 */
int ms_httpc_open(struct ms_httpc *c, const char *node,
                  double connect_timeout_s, char *err, size_t errlen);

/*
 * Sends one request and waits at most recv_timeout_s (in all) for its
 * response. The request is `method path`, Host: the node, the `headers`
 * lines (each ending in "\r\n"; NULL for none), and, when `body` is not
 * NULL, Content-Type: application/json with Content-Length and the body.
 * Without keep_alive it says Connection: close and the connection is done
 * afterwards; with it the connection stays usable while the node keeps it
 * open (ms_httpc_usable). The body is read up to MS_HTTPC_BODY_MAX. A node
 * that refuses a request may close before reading it all: its answer is
 * still read. Returns 0 with *resp filled, or a negative MS_HTTPC_E* with
 * a reason in err; on error the connection is closed.
 */
int ms_httpc_request(struct ms_httpc *c, const char *method,
                     const char *path, const char *headers, const char *body,
                     size_t body_len, int keep_alive, double recv_timeout_s,
                     struct ms_httpc_resp *resp, char *err, size_t errlen);

/* Whether the connection can carry another request. */
int ms_httpc_usable(const struct ms_httpc *c);

/* Closes the connection (idempotent). */
void ms_httpc_close(struct ms_httpc *c);

/*
 * One request on its own connection: ms_httpc_open, ms_httpc_request
 * without keep-alive, ms_httpc_close. connect_timeout_s bounds connect
 * and send, recv_timeout_s the wait for the response.
 */
int ms_httpc_fetch(const char *node, const char *method, const char *path,
                   const char *headers, const char *body, size_t body_len,
                   double connect_timeout_s, double recv_timeout_s,
                   struct ms_httpc_resp *resp, char *err, size_t errlen);

#endif
