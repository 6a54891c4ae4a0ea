/*
 * frame.h -- the binary frame codec of the node-to-node transport (sans-IO).
 *
 * A frame is a fixed 40-byte little-endian header, then `type_len` bytes of
 * entity type, `id_len` bytes of entity id and `payload_len` bytes of
 * payload (JSON, opaque to the codec). Routing reads only the header; the
 * payload is never copied or re-encoded by the writer, which sends the
 * header from ms_frame_encode_header() and the three byte ranges as
 * writev-style iovecs.
 *
 *   off size field
 *     0    2 magic        0x4D53 (on the wire: 0x53 0x4D)
 *     2    1 version      MS_PROTO_VERSION
 *     3    1 kind         enum ms_frame_kind
 *     4    2 flags        kind-specific, 0 unless a kind defines them
 *     6    2 type_len     <= MS_FRAME_MAX_TYPE
 *     8    2 id_len       <= MS_MAX_ID
 *    10    2 reserved     written as 0, ignored on receipt
 *    12    4 payload_len  <= the decoder's max_payload
 *    16    8 corr         correlation id of an ask and its reply, else 0
 *    24    4 shard
 *    28    4 reserved     written as 0, ignored on receipt
 *    32    8 generation   plan generation the sender routed with
 *
 * The decoder is incremental: feed it whatever the socket delivered, in
 * chunks of any size. Every length is checked against its limit as soon as
 * the header is complete, before any allocation, and the decoder's buffer
 * never grows past the largest frame it accepts. A malformed frame puts
 * the decoder into a sticky error state: the connection must be closed.
 */
#ifndef MS_CORE_FRAME_H
#define MS_CORE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"

#define MS_FRAME_MAGIC 0x4D53
#define MS_PROTO_VERSION 1
#define MS_FRAME_HEADER 40    /* bytes of the fixed header */
#define MS_FRAME_MAX_TYPE 64  /* bytes of an entity type name */

enum ms_frame_kind {
    /* handshake (auth.h) */
    MS_FRAME_HELLO = 1,
    MS_FRAME_CHALLENGE = 2,
    MS_FRAME_AUTH = 3,
    MS_FRAME_AUTH_OK = 4,
    MS_FRAME_AUTH_FAIL = 5,   /* a refusal, payload {"reason": "..."} */
    /* entity traffic */
    MS_FRAME_TELL = 10,
    MS_FRAME_ASK = 11,
    MS_FRAME_REPLY = 12,
    MS_FRAME_REPLY_ERROR = 13,
    MS_FRAME_NOT_OWNER = 14,
    MS_FRAME_STOP = 15,
    /* membership */
    MS_FRAME_HEARTBEAT = 20,
    MS_FRAME_HEARTBEAT_ACK = 21,
    MS_FRAME_GOSSIP = 22,
    /* coordinator and plan messages, payload JSON */
    MS_FRAME_CONTROL = 30
};

/*
 * One frame. For encoding, the caller fills it and keeps the three byte
 * ranges alive until they are written. A decoded frame's pointers are
 * borrowed from the decoder (see ms_frame_feed); a zero length comes with
 * a valid pointer to an empty range. The ranges are not NUL-terminated.
 */
struct ms_frame {
    uint8_t version;      /* decoded; the encoder writes MS_PROTO_VERSION */
    uint8_t kind;         /* enum ms_frame_kind */
    uint16_t flags;
    uint64_t corr;
    uint32_t shard;
    uint64_t generation;
    const char *type;
    size_t type_len;
    const char *id;
    size_t id_len;
    const char *payload;
    size_t payload_len;
};

/* 1 when `kind` is one of enum ms_frame_kind, else 0. */
int ms_frame_kind_valid(unsigned kind);

/* A static name for a kind ("TELL", ...), "UNKNOWN" for others; for logs. */
const char *ms_frame_kind_name(unsigned kind);

/*
 * Checks that `f` can be encoded: a known kind, type_len <=
 * MS_FRAME_MAX_TYPE, id_len <= MS_MAX_ID, payload_len <= UINT32_MAX, and a
 * non-NULL pointer for every non-zero length. Returns 0, MS_EINVAL (unknown
 * kind, NULL range) or MS_E2BIG (a length above its limit). The decoder of
 * the receiving side applies its own, usually smaller, payload limit.
 */
int ms_frame_check(const struct ms_frame *f);

/* Total encoded size of `f`: MS_FRAME_HEADER + type, id and payload. */
size_t ms_frame_size(const struct ms_frame *f);

/*
 * Writes the 40-byte header of `f` (borrowed) into `out`. The writer then
 * sends f->type, f->id and f->payload after it, in that order. Returns
 * MS_FRAME_HEADER, or 0 when ms_frame_check(f) fails (then `out` is left
 * untouched and nothing must be sent).
 */
size_t ms_frame_encode_header(uint8_t out[MS_FRAME_HEADER],
                              const struct ms_frame *f);

/*
 * Encodes the whole frame `f` (borrowed) into `buf` (caller-owned, `cap`
 * bytes) and stores its size in `*len`. Returns 0, the error of
 * ms_frame_check(), or MS_E2BIG when `cap` is too small (then `*len` is
 * the size needed and `buf` is untouched).
 */
int ms_frame_encode(const struct ms_frame *f, uint8_t *buf, size_t cap,
                    size_t *len);

/*
 * The incremental decoder of one connection. Embed it in the connection,
 * set it up with ms_frame_decoder_init() and release it with
 * ms_frame_decoder_free(). Its fields are private.
 */
struct ms_frame_decoder {
    size_t max_payload;
    size_t max_frame;
    uint8_t hdr[MS_FRAME_HEADER];
    size_t hlen;          /* header bytes buffered */
    struct ms_frame cur;  /* the current frame's parsed header */
    size_t body_need;     /* type + id + payload bytes of the frame */
    uint8_t *buf;         /* body bytes, owned; at most body_need */
    size_t blen, cap;
    int delivered;        /* the last feed handed out a frame */
    int err;              /* 0, or the sticky error code */
    char reason[160];
};

/*
 * Sets up `d` (caller-owned memory) to accept frames whose payload is at
 * most `max_payload` bytes and whose total size, header included, is at
 * most `max_frame` bytes. Allocates nothing.
 */
void ms_frame_decoder_init(struct ms_frame_decoder *d, size_t max_payload,
                           size_t max_frame);

/*
 * Changes the limits of `d` for the frames that follow: the next header
 * is checked against them. Call it between frames (before the first feed,
 * or right after a feed returned 1), never while a frame is half read.
 * The transport uses it to raise the small limit of a connection still in
 * its handshake to the normal one once the peer is authenticated.
 */
void ms_frame_decoder_set_limits(struct ms_frame_decoder *d,
                                 size_t max_payload, size_t max_frame);

/* Frees the decoder's buffer; `d` itself stays the caller's. A frame
 * obtained from it is invalid afterwards. */
void ms_frame_decoder_free(struct ms_frame_decoder *d);

/*
 * Feeds `len` bytes at `data` (borrowed for this call) and stores in
 * `*consumed` how many of them were used. Returns:
 *
 *   1  a whole frame is in `*out`; call again with the rest of `data`
 *      (data + *consumed, len - *consumed), which may hold more frames;
 *   0  all of `data` was consumed and the frame is not complete yet;
 *   <0 the stream is malformed: MS_EINVAL (bad magic, unsupported version,
 *      unknown kind), MS_E2BIG (type, id, payload or total size above its
 *      limit) or MS_ENOMEM. ms_frame_decoder_error() tells why. Every later
 *      call returns the same code: close the connection.
 *
 * The pointers of `*out` point into the decoder's buffer or, when a whole
 * frame was inside `data`, directly into `data` (no copy). Either way they
 * are valid until the next call to ms_frame_feed() or
 * ms_frame_decoder_free(), and no longer than `data` itself: handle (or
 * copy) a frame before feeding again or releasing the read buffer.
 */
int ms_frame_feed(struct ms_frame_decoder *d, const uint8_t *data,
                  size_t len, size_t *consumed, struct ms_frame *out);

/* The reason of the decoder's error ("bad magic 0x4745 ..."), or "" when
 * it has none; borrowed from `d`. */
const char *ms_frame_decoder_error(const struct ms_frame_decoder *d);

#endif
