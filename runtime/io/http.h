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

#endif
