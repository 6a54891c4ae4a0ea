/*
 * transport.h -- node-to-node connections over libuv TCP.
 *
 * One long-lived, authenticated connection per peer pair, carrying frames
 * (runtime/core/frame.h). A connection is usable once the challenge-response
 * handshake (runtime/core/auth.h) succeeded; peers are then known by their
 * uid. Writes go out at once when the connection is idle and are batched
 * while a write is in flight (TCP_NODELAY, no linger). Every length is
 * checked before allocation; a malformed frame closes its connection with a
 * logged reason. A peer that stops reading is dropped once its queued bytes
 * pass max_out_bytes: the tells still queued here count in link_drops, and
 * the connection is half-closed and kept until the peer has read what the
 * kernel holds or the kernel gives up (then the tells the peer's kernel
 * never acknowledged count too), at most 2 x MS_TRANSPORT_USER_TIMEOUT_MS.
 *
 * Until a connection is authenticated it costs the node little and cannot
 * hold a slot for long (the handshake slots, G8):
 *
 *   - its decoder accepts only handshake-sized frames (MS_AUTH_MAX_PAYLOAD),
 *     and a refused handshake stops reading at once;
 *   - its first frame must arrive within MS_TRANSPORT_FIRST_FRAME_MS, the
 *     whole handshake must end within handshake_timeout_ms (default
 *     MS_TRANSPORT_HANDSHAKE_MS); after that it is closed (a dial's TCP
 *     connect must complete within MS_TRANSPORT_CONNECT_MS);
 *   - at most MS_TRANSPORT_MAX_HANDSHAKES_PER_SOURCE incoming connections
 *     of one source address (IPv4 address, or IPv6 /64) may be in the
 *     handshake: a new one from that source closes one of them;
 *   - at most MS_TRANSPORT_MAX_HANDSHAKES incoming connections may be in
 *     the handshake together: a new one closes one of the source that
 *     holds the most of them;
 *   - the one closed is the oldest of those that have sent no frame for
 *     MS_TRANSPORT_SILENT_MS, else the oldest. A new connection is never
 *     refused, and never evicts itself, so a real node (it sends its
 *     HELLO at once, and its handshake takes milliseconds) still gets its
 *     turn while strangers keep opening connections.
 *
 * With a TLS context (cfg.tls) every connection runs TLS 1.3 first (tls.h,
 * memory BIOs driven by the libuv reads and writes; both sides verify
 * the other's certificate against the cluster's CA) and the handshake
 * above inside it, unchanged; its deadlines and caps count from accept
 * as before, the TLS handshake included. A failed TLS handshake (a
 * plaintext peer, a certificate of another CA) is counted and logged as
 * a refused handshake. The output batching stays: `pending` holds
 * plaintext, sealed into records (MS_TLS_RECORD bytes at most) when it
 * is written; a tell then ends where its record ends in the ciphertext,
 * and link_drops compares that with the bytes the peer's kernel
 * acknowledged, as without TLS.
 * Every incoming connection that ends without authenticating (refused,
 * timed out, evicted, closed by the peer, malformed) is counted in
 * handshake_failures; a warning is logged only when that count reaches a
 * power of two (1, 2, 4, 8, ...), with the counts so far. Failures of
 * this node's own dials are logged the same way, on a counter of their
 * own. So a flood of strangers writes a few dozen lines at most.
 */
#ifndef MS_IO_TRANSPORT_H
#define MS_IO_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../core/frame.h"

/* Incoming connections accepted but not yet authenticated, at most. Each
 * holds a socket, a handshake state and a frame buffer of up to about
 * 5 KiB until its handshake ends or times out; real peers need one each
 * for a moment, so 64 is plenty for a cluster and bounds what anyone who
 * can reach the port can make the node hold. */
#define MS_TRANSPORT_MAX_HANDSHAKES 64

/* Of those, at most this many from one source address (IPv4 address, or
 * the /64 of an IPv6 one): one host cannot take every slot, and the
 * connections of other hosts are not evicted by its flood. */
#define MS_TRANSPORT_MAX_HANDSHAKES_PER_SOURCE 8

/* An incoming connection sends its first frame (HELLO) within this many
 * milliseconds; a real node sends it as soon as it is connected. */
#define MS_TRANSPORT_FIRST_FRAME_MS 2000

/* An incoming connection that has sent no frame this many milliseconds
 * after it was accepted is evicted before the others. Younger ones count
 * as talking: a real node's HELLO may still be on its way. */
#define MS_TRANSPORT_SILENT_MS 250

/* Default of handshake_timeout_ms: the whole handshake, from accept (or
 * from dialing) to authenticated. */
#define MS_TRANSPORT_HANDSHAKE_MS 5000

/* A dial whose TCP connect has not completed within this many
 * milliseconds (or handshake_timeout_ms, if smaller) is closed; the
 * cluster layer dials again at its next heartbeat (every second). While a
 * partition drops its SYNs, the kernel would retransmit them only 1, 3
 * and 7 s after the dial, so after the heal a new SYN goes out within
 * about 2 s instead of up to 5 s. A peer more than this round trip away
 * cannot be reached. */
#define MS_TRANSPORT_CONNECT_MS 1000

/* TCP_USER_TIMEOUT of every connection (Linux): data sent that stays
 * unacknowledged this long ends the connection (read error "connection
 * timed out"), and the next heartbeat dials afresh. Without it a
 * connection whose packets were dropped for a while retransmits with an
 * exponential backoff (0.2, 0.4, ... 6.4 s) and may stay silent for
 * seconds after the network heals. Heartbeats go every second, so a peer
 * cut off is dropped 5 to 6 s after the cut, about when the failure
 * detector (5 s without a heartbeat answer) marks it unreachable; a cut
 * of up to about 3 s (healed before the retransmission 3 s after the
 * first lost packet) loses nothing. A paused peer (SIGSTOP) keeps its
 * connections while its kernel still takes data; once its receive buffer
 * is full, 5 s of a closed window end them too (as max_out_bytes would,
 * later). What was queued on the connection is lost with it: asks time
 * out, and the tells its peer's kernel had not acknowledged are counted
 * in link_drops (TCP_INFO's acknowledged bytes against where each tell
 * ends in the stream), so every tell a sender accepted and its owner
 * never got is counted somewhere. */
#define MS_TRANSPORT_USER_TIMEOUT_MS 5000

struct ms_transport;
struct ms_tls_ctx;

struct ms_transport_config {
    const char *cluster;       /* all strings are copied */
    const char *name;          /* this node */
    const char *address;       /* "host:port" others dial to reach us */
    uint64_t uid;              /* this incarnation */
    const uint8_t *secret;     /* cluster secret, copied */
    size_t secret_len;
    const char *listen_host;   /* IPv4/IPv6 literal */
    int listen_port;
    size_t max_payload;        /* largest frame payload accepted */
    size_t max_out_bytes;      /* queued bytes per peer before it is dropped */
    uint64_t handshake_timeout_ms; /* 0: MS_TRANSPORT_HANDSHAKE_MS; the
                                      first frame is due within the
                                      smaller of this and
                                      MS_TRANSPORT_FIRST_FRAME_MS */
    struct ms_tls_ctx *tls;    /* NULL: plaintext; else every link runs
                                  TLS (tls.h, MS_TLS_MUTUAL) and the
                                  handshake above inside it. Owned by the
                                  transport from ms_transport_start on,
                                  also when it fails */
};

struct ms_transport_callbacks {
    void *data;
    /* A peer became usable (up = 1) or its connection ended (up = 0). */
    void (*on_peer)(void *data, uint64_t uid, const char *name,
                    const char *address, int up);
    /* A frame from an authenticated peer; `f` and its bytes are borrowed
     * until the callback returns. */
    void (*on_frame)(void *data, uint64_t uid, const struct ms_frame *f);
    /* A second authenticated connection to peer `uid` replaced the first
     * (both nodes dialed at once): the peer stays up, but what the first
     * still held unsent is gone. NULL: not told. */
    void (*on_replaced)(void *data, uint64_t uid);
};

struct ms_transport_stats {
    uint64_t frames_in, frames_out;
    uint64_t rejected_frames;   /* malformed frames (connection closed) */
    uint64_t auth_failures;     /* refused or timed out handshakes, both
                                   directions */
    uint64_t slow_peer_drops;   /* peers dropped for not reading */
    uint64_t link_drops;        /* tells lost with a connection that ended
                                   before its peer's kernel acknowledged
                                   them (or, closed by this node, before
                                   they were written to the kernel) */
    uint64_t connections;       /* authenticated connections made */
    uint64_t handshake_overflows; /* incoming connections that found
                                     MS_TRANSPORT_MAX_HANDSHAKES others
                                     in the handshake (each evicted one) */
    uint64_t handshake_evictions; /* unauthenticated connections closed to
                                     make room for a newer one (global or
                                     per-source cap) */
    uint64_t handshake_timeouts;  /* connections closed because a
                                     handshake deadline passed (both
                                     directions) */
    uint64_t handshake_failures;  /* incoming connections that ended
                                     without authenticating, for any
                                     reason */
};

/* Binds the listener. Returns 0 and *out, or a negative code with a
 * one-line reason in `err`. */
int ms_transport_start(struct ms_transport **out, uv_loop_t *loop,
                       const struct ms_transport_config *cfg,
                       const struct ms_transport_callbacks *cb, char *err,
                       size_t errlen);

/* Dials `address` unless a connection to it exists or is being made.
 * Returns 0 or a negative code (bad address). The peer's callbacks follow
 * once it is authenticated. */
int ms_transport_connect(struct ms_transport *t, const char *address);

/* Queues a frame to peer `uid` (copied). Returns 0, UV_ENOTCONN when no
 * authenticated connection exists, MS_E2BIG for a frame over the limits,
 * or MS_EOVERFLOW when the peer's queue is full (the peer is dropped). */
int ms_transport_send(struct ms_transport *t, uint64_t uid,
                      const struct ms_frame *f);

/* 1 when an authenticated connection to `uid` exists. */
int ms_transport_connected(struct ms_transport *t, uint64_t uid);

/* Closes the connection to `uid`, if any, logging `reason`. */
void ms_transport_drop(struct ms_transport *t, uint64_t uid,
                       const char *reason);

void ms_transport_stats(struct ms_transport *t,
                        struct ms_transport_stats *out);

/* Closes the listener and every connection; frees the transport from the
 * last close callback. No callbacks are made after this call. */
void ms_transport_close(struct ms_transport *t);

#endif
