/*
 * http.h -- the node's HTTP gateway (io layer), parsed with the
 * http-parser library. Endpoints are documented in README.md.
 */
#ifndef MS_IO_HTTP_H
#define MS_IO_HTTP_H

#include <stddef.h>
#include <uv.h>

#include "gateway.h"

struct ms_http;

/*
 * Operation ids (issue 11): an `Idempotency-Key` header on a tell or an
 * ask gives the message an operation id, 1 to MS_HTTP_OPID_MAX bytes of
 * visible ASCII other than '"' and '\\'. It travels inside the message
 * as its field MS_OPID_FIELD ("$op"), added by the gateway (the header
 * wins over a "$op" of the body); a persistent entity applies a command
 * once per operation id (README "Operation ids").
 */
#define MS_HTTP_OPID_MAX 128
#define MS_OPID_FIELD "$op"

/*
 * Binds a listener on host:port (IPv4 or IPv6 literal) on `loop` and
 * serves the endpoints through `gw` (copied; its data and name must
 * outlive the gateway). Returns 0 and sets *out, or a negative code with
 * a one-line reason in `err`.
 */
int ms_http_start(struct ms_http **out, uv_loop_t *loop,
                  const struct ms_gateway *gw, const char *host, int port,
                  char *err, size_t errlen);

/* The address the gateway listens on, as a URL writes it: "host:port",
 * "[v6]:port" for IPv6, with the port bound (borrowed, h's life). */
const char *ms_http_address(struct ms_http *h);

/* Closes the listener and every connection; asks still pending are
 * answered by the node (their callbacks see a closed connection and drop
 * the reply). Frees the gateway from the close callbacks. */
void ms_http_close(struct ms_http *h);

/* Open connections, those closed by a deadline (limits.http_timeout: a
 * request not sent whole that long after its first byte, idle that long,
 * a response not taken that long; 5 s to close after the last), and those
 * refused (503, closed) because limits.http_connections were open and
 * every other one was sending or being answered a request. h may be NULL
 * (zeros). */
void ms_http_stats(struct ms_http *h, uint64_t *conns, uint64_t *timeouts,
                   uint64_t *refused);
/* gateway_tls handshakes that failed (plain HTTP, a client that does not
 * trust the certificate, a client without one the client CA signed). */
uint64_t ms_http_tls_failures(struct ms_http *h);

/*
 * Membership events as server-sent events (GET /v1/events, README
 * "Membership events"). A stream client gets a `snapshot` event first,
 * then every event published from then on. At most MS_HTTP_EVENT_STREAMS
 * streams at once, and fewer than limits.http_connections (503 past it); a client that lets more than
 * MS_HTTP_EVENT_BUFFER bytes wait in its send queue is cut off after a
 * last `cut_off` event; a comment line keeps an idle stream alive every
 * MS_HTTP_EVENT_KEEPALIVE_MS. Streams count among limits.http_connections
 * but are never evicted for a new connection nor closed by
 * limits.http_timeout.
 */
#define MS_HTTP_EVENT_STREAMS 16
#define MS_HTTP_EVENT_BUFFER (256 * 1024)
#define MS_HTTP_EVENT_KEEPALIVE_MS 15000

/* Publishes event number `seq` of kind `kind` with its JSON (borrowed for
 * the call; one line, no newline) to every stream. h may be NULL. */
void ms_http_event(struct ms_http *h, uint64_t seq, const char *kind,
                   const char *json, size_t len);

/* Open streams, streams cut off (slow client), stream requests refused
 * (too many). h may be NULL (zeros). */
void ms_http_event_stats(struct ms_http *h, uint64_t *streams,
                         uint64_t *cut_off, uint64_t *refused);

#endif
