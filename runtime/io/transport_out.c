/*
 * transport_out.c -- a peer connection's output (transport_int.h).
 *
 * Two buffers per connection. While a write is in flight new frames go to
 * `pending`; when it completes, `pending` is written as one batch. On a
 * TLS link `pending` is sealed into records first and the ciphertext is
 * written. Each tell queued is remembered by where it ends in the byte
 * stream until the peer's kernel has acknowledged it (tcpinfo.h): what a
 * connection that ends still held is counted as link_drops. A peer that
 * stops reading fills the output queue; the connection is then drained
 * (half-closed, read until EOF, at most MS_TRANSPORT_DRAIN_MS) and closed.
 */
#include "transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "../core/log.h"
#include "tcpinfo.h"

static int obuf_reserve(struct obuf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 16384;
    while (cap < b->len + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return MS_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static void on_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    c->writing = 0;
    c->inflight.len = 0;
    if (status < 0) {
        if (!c->closing) {
            c->dead = 1;
            ms__tr_close(c, uv_strerror(status));
        }
        return;
    }
    if (c->close_after_write && !c->pending.len &&
        !(c->tls && ms_tls_pending(c->tls))) {
        ms__tr_close(c, NULL);
        return;
    }
    ms__tr_flush(c);
}

/* Writes c's `inflight` buffer (one write in flight at a time). */
static void write_inflight(struct conn *c)
{
    uv_buf_t buf = uv_buf_init(c->inflight.p, (unsigned)c->inflight.len);
    c->wreq.data = c;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
    if (rc < 0) {
        ms__tr_close(c, uv_strerror(rc));
        return;
    }
    c->writing = 1;
}

/*
 * TLS: seals what is pending into records, then writes all the
 * ciphertext waiting (records, and the handshake's or an alert's bytes),
 * unless a write is in flight. Nothing is sealed before the TLS handshake
 * is done. Each record holds at most MS_TLS_RECORD bytes of `pending`;
 * a tell whose last byte is in it now ends where the record ends in the
 * ciphertext (wire_out terms): the peer can read no part of a record
 * before all of it arrived, so the tell counts as delivered once the
 * peer's kernel acknowledged the record's last byte.
 */
static void flush_tls(struct conn *c)
{
    if (c->writing || c->closing)
        return;
    struct tellring *r = &c->tells;
    if (c->tls_up && c->pending.len) {
        uint64_t plain = c->out_bytes - c->pending.len;
        size_t off = 0;
        while (off < c->pending.len) {
            size_t n = c->pending.len - off;
            if (n > MS_TLS_RECORD)
                n = MS_TLS_RECORD;
            if (ms_tls_write(c->tls, c->pending.p + off, n) < 0) {
                ms__tr_close(c, ms_tls_reason(c->tls));
                return;
            }
            off += n;
            uint64_t wire_end = c->wire_out + ms_tls_pending(c->tls);
            while (r->sealed < r->len &&
                   r->end[(r->head + r->sealed) % r->cap] <= plain + off)
                r->end[(r->head + r->sealed++) % r->cap] = wire_end;
        }
        c->pending.len = 0;
    }
    size_t n = ms_tls_pending(c->tls);
    if (!n)
        return;
    c->inflight.len = 0;
    if (obuf_reserve(&c->inflight, n) < 0) {
        ms__tr_close(c, "out of memory");
        return;
    }
    c->inflight.len = ms_tls_take(c->tls, c->inflight.p, n);
    c->wire_out += c->inflight.len;
    write_inflight(c);
}

/* Writes what is pending, unless a write is in flight. */
void ms__tr_flush(struct conn *c)
{
    if (c->tls) {
        flush_tls(c);
        return;
    }
    if (c->writing || !c->pending.len || c->closing)
        return;
    struct obuf tmp = c->inflight;
    c->inflight = c->pending;
    c->pending = tmp;
    c->pending.len = 0;
    write_inflight(c);
}

/* The bytes of `c`'s stream its peer's kernel has acknowledged, or -1
 * where the kernel does not say. */
static int64_t acked_bytes(struct conn *c)
{
    uv_os_fd_t fd;
    uint64_t n;
    if (!c->acked_known || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 ||
        ms_tcp_bytes_acked(fd, &n) != 0 || n < c->acked_base)
        return -1;
    return (int64_t)(n - c->acked_base);
}

/* Forgets the tells whose bytes ended at or before `upto` (stream
 * bytes; with TLS, ciphertext bytes: only sealed tells are compared). */
static void tells_forget(struct conn *c, uint64_t upto)
{
    struct tellring *r = &c->tells;
    while (r->len && (!c->tls || r->sealed) && r->end[r->head] <= upto) {
        r->head = (r->head + 1) % r->cap;
        r->len--;
        if (c->tls)
            r->sealed--;
    }
}

/* The bytes of the stream handed to the kernel so far (with TLS, the
 * ciphertext's): queued, less what is still pending or in libuv's write
 * queue. */
static uint64_t handed_bytes(struct conn *c)
{
    uint64_t queued = c->writing ? uv_stream_get_write_queue_size(
                                       (uv_stream_t *)&c->tcp)
                                 : 0;
    if (c->tls)
        return c->wire_out - queued;
    return c->out_bytes - c->pending.len - queued;
}

/* Makes room for one more tell: forgets the acknowledged ones, else
 * grows the ring (it holds at most what max_out_bytes and the kernel's
 * send buffer hold). */
static int tells_reserve(struct conn *c)
{
    struct tellring *r = &c->tells;
    if (r->len < r->cap)
        return 0;
    int64_t acked = acked_bytes(c);
    if (acked < 0) {
        /* the kernel does not say: what it was handed is all that is
         * counted when the connection ends (count_lost_tells), so the
         * ring need hold no more */
        acked = (int64_t)handed_bytes(c);
    }
    tells_forget(c, (uint64_t)acked);
    /* grow unless a quarter is free: a ring that stays nearly full must
     * not cost a getsockopt per tell */
    if (r->cap && r->len <= r->cap - r->cap / 4)
        return 0;
    size_t cap = r->cap ? r->cap * 2 : 256;
    uint64_t *p = malloc(cap * sizeof *p);
    if (!p)
        return MS_ENOMEM;
    for (size_t i = 0; i < r->len; i++)
        p[i] = r->end[(r->head + i) % r->cap];
    free(r->end);
    r->end = p;
    r->head = 0;
    r->cap = cap;
    return 0;
}

/*
 * Counts the tells a closing connection loses: those its peer's kernel
 * had not acknowledged when the kernel or the peer ended the connection
 * (the kernel drops its send queue then), or, when this node closes a
 * live connection, those not yet handed to the kernel (which still sends
 * what it has).
 */
void ms__tr_count_lost_tells(struct conn *c)
{
    struct tellring *r = &c->tells;
    if (!r->len)
        return;
    uint64_t upto = handed_bytes(c);
    if (c->dead) {
        int64_t acked = acked_bytes(c);
        if (acked >= 0 && (uint64_t)acked < upto)
            upto = (uint64_t)acked;
    }
    tells_forget(c, upto);
    c->t->st.link_drops += r->len;
    r->len = 0;
}

static void on_drain_timeout(uv_timer_t *timer)
{
    ms__tr_close(timer->data, "dropped peer did not finish reading");
}

static void on_drained(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status; /* an error also ends the connection: on_read says */
}

/*
 * Drops the peer of `c`, which is not reading, without losing count of
 * what its kernel holds: the tells still pending here are lost now; what
 * the kernel was handed is sent, then the connection is half-closed. It
 * ends when the peer has read it all and closed (EOF) or when the kernel
 * gives up (the user timeout, while the window stays closed); then
 * count_lost_tells counts what the peer's kernel had not acknowledged.
 * Closing the socket now instead would orphan it: the kernel aborts it
 * after the user timeout, losing what it held, uncounted.
 */
static void conn_drain(struct conn *c, const char *reason)
{
    struct ms_transport *t = c->t;
    struct tellring *r = &c->tells;
    uint64_t handed = c->out_bytes - c->pending.len;
    if (c->tls) {
        /* what is not sealed is still pending, and is dropped */
        t->st.link_drops += r->len - r->sealed;
        r->len = r->sealed;
    }
    while (!c->tls && r->len &&
           r->end[(r->head + r->len - 1) % r->cap] > handed) {
        r->len--;
        t->st.link_drops++;
    }
    c->out_bytes = handed;
    c->pending.len = 0;
    char f[200];
    ms_log_field_s(f, sizeof f, 0, "peer", c->peer_name);
    ms_log(MS_LOG_WARN, f, "connection dropped: %s", reason);
    c->draining = 1;
    if (c->registered && !t->closing && t->cb.on_peer)
        t->cb.on_peer(t->cb.data, c->peer_uid, c->peer_name, c->address, 0);
    c->registered = 0;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_drained) < 0) {
        ms__tr_close(c, NULL);
        return;
    }
    uv_timer_start(&c->timer, on_drain_timeout,
                   2 * MS_TRANSPORT_USER_TIMEOUT_MS, 0);
}

/* Appends a frame to the connection's pending output. */
int ms__tr_put_frame(struct conn *c, const struct ms_frame *f)
{
    int rc = ms_frame_check(f);
    if (rc < 0)
        return rc;
    size_t size = ms_frame_size(f);
    if (size > c->t->cfg.max_payload + MS_FRAME_HEADER + MS_FRAME_MAX_TYPE +
                   MS_MAX_ID)
        return MS_E2BIG;
    if (c->pending.len + c->inflight.len + size > c->t->cfg.max_out_bytes) {
        c->t->st.slow_peer_drops++;
        conn_drain(c, "peer is not reading: its output queue is full");
        return MS_EOVERFLOW;
    }
    if (obuf_reserve(&c->pending, size) < 0)
        return MS_ENOMEM;
    if (f->kind == MS_FRAME_TELL && tells_reserve(c) < 0)
        return MS_ENOMEM;
    size_t len;
    rc = ms_frame_encode(f, (uint8_t *)c->pending.p + c->pending.len,
                             c->pending.cap - c->pending.len, &len);
    if (rc < 0)
        return rc;
    c->pending.len += len;
    c->out_bytes += len;
    if (f->kind == MS_FRAME_TELL) {
        struct tellring *r = &c->tells;
        r->end[(r->head + r->len++) % r->cap] = c->out_bytes;
    }
    c->t->st.frames_out++;
    return 0;
}
