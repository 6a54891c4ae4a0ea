/*
 * downreq.h -- the request of `POST /v1/down` (sans-IO): which member to
 * down, and whether the operator insists (force).
 *
 * Downing a member lets the coordinator give its shards to others at once.
 * When that member is in fact alive, two nodes then run the same shards'
 * entities (G1 breaks), so the node refuses to down a member it sees
 * reachable unless the request says `force` (runtime/io/cluster.c). This
 * file only reads the request; it decides nothing.
 */
#ifndef MS_CORE_DOWNREQ_H
#define MS_CORE_DOWNREQ_H

#include <stddef.h>

/* Longest address accepted (MS_MB_MAX_ADDRESS). */
#define MS_DOWNREQ_MAX_ADDRESS 128

/*
 * Reads the body and the query string of a down request. The body is
 * strict JSON, one of
 *     "host:port"
 *     {"address":"host:port"}
 *     {"address":"host:port","force":true}
 * (keys in any order, each at most once, no other keys; "force" is true
 * or false). The address is 1..MS_DOWNREQ_MAX_ADDRESS printable ASCII
 * bytes without space, '"', '\\' or ',' (what a member address can be),
 * written without escapes. The query may say `force=1` or `force=true`
 * (`0` and `false` say no); other query parameters are ignored. *force
 * is 1 when the body or the query asks for it.
 *
 * `body` and `query` are borrowed for the call and need not be
 * NUL-terminated (NULL with length 0 is fine). On success writes the
 * NUL-terminated address into `address` (cap >= MS_DOWNREQ_MAX_ADDRESS +
 * 1) and returns 0. Otherwise returns MS_EINVAL and points *why at a
 * static one-line reason for the client.
 */
int ms_downreq_parse(const char *body, size_t blen, const char *query,
                     size_t qlen, char *address, size_t cap, int *force,
                     const char **why);

#endif
