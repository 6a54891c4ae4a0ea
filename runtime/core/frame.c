/*
 * frame.c -- encoder and incremental decoder of transport frames.
 */
#include "frame.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A buffer above this size is released once its frame was handled, so a
 * connection that carried one large frame does not keep it forever. */
#define KEEP_BUF (64 * 1024)
#define MIN_BUF 256

static const char empty[1] = "";

/* --- little-endian helpers --------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* --- kinds --------------------------------------------------------------- */

const char *ms_frame_kind_name(unsigned kind)
{
    switch (kind) {
    case MS_FRAME_HELLO: return "HELLO";
    case MS_FRAME_CHALLENGE: return "CHALLENGE";
    case MS_FRAME_AUTH: return "AUTH";
    case MS_FRAME_AUTH_OK: return "AUTH_OK";
    case MS_FRAME_AUTH_FAIL: return "AUTH_FAIL";
    case MS_FRAME_TELL: return "TELL";
    case MS_FRAME_ASK: return "ASK";
    case MS_FRAME_REPLY: return "REPLY";
    case MS_FRAME_REPLY_ERROR: return "REPLY_ERROR";
    case MS_FRAME_NOT_OWNER: return "NOT_OWNER";
    case MS_FRAME_STOP: return "STOP";
    case MS_FRAME_HEARTBEAT: return "HEARTBEAT";
    case MS_FRAME_HEARTBEAT_ACK: return "HEARTBEAT_ACK";
    case MS_FRAME_GOSSIP: return "GOSSIP";
    case MS_FRAME_CONTROL: return "CONTROL";
    default: return "UNKNOWN";
    }
}

int ms_frame_kind_valid(unsigned kind)
{
    return strcmp(ms_frame_kind_name(kind), "UNKNOWN") != 0;
}

/* --- encoder ------------------------------------------------------------- */

int ms_frame_check(const struct ms_frame *f)
{
    if (!ms_frame_kind_valid(f->kind))
        return MS_EINVAL;
    if ((f->type_len && !f->type) || (f->id_len && !f->id) ||
        (f->payload_len && !f->payload))
        return MS_EINVAL;
    if (f->type_len > MS_FRAME_MAX_TYPE || f->id_len > MS_MAX_ID ||
        (uint64_t)f->payload_len > UINT32_MAX)
        return MS_E2BIG;
    return 0;
}

size_t ms_frame_size(const struct ms_frame *f)
{
    return MS_FRAME_HEADER + f->type_len + f->id_len + f->payload_len;
}

size_t ms_frame_encode_header(uint8_t out[MS_FRAME_HEADER],
                              const struct ms_frame *f)
{
    if (ms_frame_check(f) != 0)
        return 0;
    put16(out + 0, MS_FRAME_MAGIC);
    out[2] = MS_PROTO_VERSION;
    out[3] = f->kind;
    put16(out + 4, f->flags);
    put16(out + 6, (uint16_t)f->type_len);
    put16(out + 8, (uint16_t)f->id_len);
    put16(out + 10, 0);
    put32(out + 12, (uint32_t)f->payload_len);
    put64(out + 16, f->corr);
    put32(out + 24, f->shard);
    put32(out + 28, 0);
    put64(out + 32, f->generation);
    return MS_FRAME_HEADER;
}

int ms_frame_encode(const struct ms_frame *f, uint8_t *buf, size_t cap,
                    size_t *len)
{
    int rc = ms_frame_check(f);
    if (rc != 0)
        return rc;
    *len = ms_frame_size(f);
    if (*len > cap)
        return MS_E2BIG;
    uint8_t *p = buf + ms_frame_encode_header(buf, f);
    /* memcpy with a zero length still needs valid pointers: skip it */
    if (f->type_len)
        memcpy(p, f->type, f->type_len);
    p += f->type_len;
    if (f->id_len)
        memcpy(p, f->id, f->id_len);
    p += f->id_len;
    if (f->payload_len)
        memcpy(p, f->payload, f->payload_len);
    return 0;
}

/* --- decoder ------------------------------------------------------------- */

void ms_frame_decoder_init(struct ms_frame_decoder *d, size_t max_payload,
                           size_t max_frame)
{
    memset(d, 0, sizeof *d);
    d->max_payload = max_payload;
    d->max_frame = max_frame;
}

void ms_frame_decoder_set_limits(struct ms_frame_decoder *d,
                                 size_t max_payload, size_t max_frame)
{
    d->max_payload = max_payload;
    d->max_frame = max_frame;
}

void ms_frame_decoder_free(struct ms_frame_decoder *d)
{
    free(d->buf);
    d->buf = NULL;
    d->cap = d->blen = 0;
}

const char *ms_frame_decoder_error(const struct ms_frame_decoder *d)
{
    return d->reason;
}

/* Enters the sticky error state. */
static int __attribute__((format(printf, 3, 4)))
fail(struct ms_frame_decoder *d, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->reason, sizeof d->reason, fmt, ap);
    va_end(ap);
    d->err = err;
    return err;
}

/*
 * Parses and checks the 40 header bytes at `h` into d->cur and
 * d->body_need. All limits are checked here, before any allocation, in
 * 64-bit arithmetic so no sum can wrap.
 */
static int parse_header(struct ms_frame_decoder *d, const uint8_t *h)
{
    struct ms_frame *f = &d->cur;
    uint16_t magic = get16(h);
    if (magic != MS_FRAME_MAGIC)
        return fail(d, MS_EINVAL,
                    "bad magic 0x%04x (expected 0x%04x): not a moonshard "
                    "peer", magic, MS_FRAME_MAGIC);
    if (h[2] != MS_PROTO_VERSION)
        return fail(d, MS_EINVAL,
                    "unsupported frame version %u (this node speaks %u)",
                    h[2], MS_PROTO_VERSION);
    if (!ms_frame_kind_valid(h[3]))
        return fail(d, MS_EINVAL, "unknown frame kind %u", h[3]);
    memset(f, 0, sizeof *f);
    f->version = h[2];
    f->kind = h[3];
    f->flags = get16(h + 4);
    f->type_len = get16(h + 6);
    f->id_len = get16(h + 8);
    f->payload_len = get32(h + 12);
    f->corr = get64(h + 16);
    f->shard = get32(h + 24);
    f->generation = get64(h + 32);
    if (f->type_len > MS_FRAME_MAX_TYPE)
        return fail(d, MS_E2BIG, "%s frame: type of %zu bytes (limit %d)",
                    ms_frame_kind_name(f->kind), f->type_len,
                    MS_FRAME_MAX_TYPE);
    if (f->id_len > MS_MAX_ID)
        return fail(d, MS_E2BIG, "%s frame: id of %zu bytes (limit %d)",
                    ms_frame_kind_name(f->kind), f->id_len, MS_MAX_ID);
    if (f->payload_len > d->max_payload)
        return fail(d, MS_E2BIG,
                    "%s frame: payload of %zu bytes (limit %zu)",
                    ms_frame_kind_name(f->kind), f->payload_len,
                    d->max_payload);
    uint64_t total = (uint64_t)MS_FRAME_HEADER + f->type_len + f->id_len +
                     (uint64_t)f->payload_len;
    if (total > d->max_frame)
        return fail(d, MS_E2BIG,
                    "%s frame of %llu bytes (limit %zu)",
                    ms_frame_kind_name(f->kind), (unsigned long long)total,
                    d->max_frame);
    d->body_need = (size_t)(total - MS_FRAME_HEADER);
    return 0;
}

/* Points the ranges of `out` (header already in d->cur) into `body`. */
static void fill(struct ms_frame_decoder *d, const uint8_t *body,
                 struct ms_frame *out)
{
    *out = d->cur;
    const char *p = body ? (const char *)body : empty;
    out->type = out->type_len ? p : empty;
    p += out->type_len;
    out->id = out->id_len ? p : empty;
    p += out->id_len;
    out->payload = out->payload_len ? p : empty;
}

/*
 * Makes room for `more` body bytes. The buffer grows geometrically with
 * the bytes actually received, so a peer announcing a large frame and then
 * stalling does not make us allocate it all; it never exceeds body_need,
 * which parse_header() bounded by max_frame.
 */
static int reserve(struct ms_frame_decoder *d, size_t more)
{
    size_t want = d->blen + more;
    if (want <= d->cap)
        return 0;
    size_t ncap = d->cap * 2;
    if (ncap < MIN_BUF)
        ncap = MIN_BUF;
    if (ncap < want)
        ncap = want;
    if (ncap > d->body_need)
        ncap = d->body_need;
    uint8_t *nb = realloc(d->buf, ncap);
    if (!nb)
        return fail(d, MS_ENOMEM,
                    "out of memory buffering a frame of %zu bytes",
                    d->body_need + MS_FRAME_HEADER);
    d->buf = nb;
    d->cap = ncap;
    return 0;
}

int ms_frame_feed(struct ms_frame_decoder *d, const uint8_t *data,
                  size_t len, size_t *consumed, struct ms_frame *out)
{
    size_t pos = 0;
    int rc;

    *consumed = 0;
    if (d->err)
        return d->err;
    if (d->delivered) {
        /* the previous frame's pointers die here */
        d->delivered = 0;
        d->hlen = d->blen = d->body_need = 0;
        if (d->cap > KEEP_BUF)
            ms_frame_decoder_free(d);
    }

    /* Fast path: nothing buffered and the whole frame inside `data`. */
    if (d->hlen == 0 && len >= MS_FRAME_HEADER) {
        if ((rc = parse_header(d, data)) != 0)
            return rc;
        if (len - MS_FRAME_HEADER >= d->body_need) {
            fill(d, data + MS_FRAME_HEADER, out);
            *consumed = MS_FRAME_HEADER + d->body_need;
            d->body_need = 0;
            return 1;
        }
        memcpy(d->hdr, data, MS_FRAME_HEADER);
        d->hlen = pos = MS_FRAME_HEADER;
    }

    if (d->hlen < MS_FRAME_HEADER) {
        size_t n = MS_FRAME_HEADER - d->hlen;
        if (n > len - pos)
            n = len - pos;
        if (n)
            memcpy(d->hdr + d->hlen, data + pos, n);
        d->hlen += n;
        pos += n;
        *consumed = pos;
        if (d->hlen < MS_FRAME_HEADER)
            return 0;
        if ((rc = parse_header(d, d->hdr)) != 0)
            return rc;
    }

    size_t n = d->body_need - d->blen;
    if (n > len - pos)
        n = len - pos;
    if (n) {
        if ((rc = reserve(d, n)) != 0)
            return rc;
        memcpy(d->buf + d->blen, data + pos, n);
        d->blen += n;
        pos += n;
    }
    *consumed = pos;
    if (d->blen < d->body_need)
        return 0;
    fill(d, d->buf, out);
    d->delivered = 1;
    return 1;
}
