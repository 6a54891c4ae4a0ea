/*
 * http_tls.c -- the gateway's optional TLS (gateway_tls in the config),
 * between the libuv stream and http_conn.c's byte handling.
 *
 * The model: a connection of a gateway with TLS has a struct ms_tls
 * (tls.h: memory BIOs). What libuv reads goes through ms__http_tls_in,
 * which runs the TLS handshake and hands the plaintext to the parser
 * (the `feed` given, once per read); every write of http_conn.c goes through
 * ms__http_write, which seals the bytes into records and writes the
 * ciphertext, then calls the caller's callback with the caller's request
 * as if it had written the plaintext. A plaintext request to a TLS
 * gateway fails the handshake and is closed (no answer: the client
 * speaks no TLS to read one). Limits: one write's plaintext is sealed in
 * records of MS_TLS_RECORD bytes; what a read brings is decrypted at once.
 */
#include "http_conn.h"

#include <stdlib.h>
#include <string.h>

#include "../core/log.h"
#include "tls.h"

/* A write of ciphertext on behalf of the caller's request `orig`. */
struct tls_wreq {
    uv_write_t req;
    uv_write_t *orig;          /* NULL: TLS's own bytes (handshake) */
    uv_write_cb cb;
    char data[];
};

static void on_tls_written(uv_write_t *req, int status)
{
    struct tls_wreq *w = (struct tls_wreq *)req;
    uv_write_t *orig = w->orig;
    uv_write_cb cb = w->cb;
    free(w);
    if (orig && cb)
        cb(orig, status);
}

/* Writes the ciphertext waiting in c's TLS state; `orig` and `cb` are
 * called once it is written (or with an error). Returns 0 or a negative
 * libuv code (then cb is not called). */
static int write_pending(struct conn *c, uv_write_t *orig, uv_write_cb cb)
{
    size_t n = ms_tls_pending(c->tls);
    if (!n && !orig)
        return 0;
    struct tls_wreq *w = malloc(sizeof *w + n);
    if (!w)
        return UV_ENOMEM;
    w->orig = orig;
    w->cb = cb;
    n = ms_tls_take(c->tls, w->data, n);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1,
                      on_tls_written);
    if (rc != 0)
        free(w);
    return rc;
}

int ms__http_write(struct conn *c, uv_write_t *req, const uv_buf_t *b,
                   uv_write_cb cb)
{
    if (!c->tls)
        return uv_write(req, (uv_stream_t *)&c->tcp, b, 1, cb);
    for (size_t off = 0; off < b->len;) {
        size_t n = b->len - off;
        if (n > MS_TLS_RECORD)
            n = MS_TLS_RECORD;
        if (ms_tls_write(c->tls, b->base + off, n) < 0)
            return UV_EPROTO;
        off += n;
    }
    return write_pending(c, req, cb);
}

int ms__http_tls_in(struct conn *c, const char *p, size_t n,
                    void (*feed)(struct conn *, const char *, size_t))
{
    if (ms_tls_feed(c->tls, p, n) < 0)
        return MS_ENOMEM;
    if (!c->tls_up) {
        int rc = ms_tls_handshake(c->tls);
        if (rc < 0) {
            write_pending(c, NULL, NULL); /* the alert */
            /* counted; logged at powers of two (a port scan or a
             * plaintext client must not flood the log) */
            uint64_t k = ++c->h->tls_failures;
            if ((k & (k - 1)) == 0)
                ms_log(MS_LOG_WARN, NULL, "HTTPS handshake failed (%llu so "
                       "far; logged at powers of two): plain HTTP or a "
                       "client that does not trust this gateway",
                       (unsigned long long)k);
            return rc;
        }
        if (write_pending(c, NULL, NULL) < 0)
            return UV_EPROTO;
        if (rc == 0)
            return 0;
        c->tls_up = 1;
    }
    /* all the plaintext of this read in one piece: feed() keeps what
     * follows a request being answered in c->rest, once per read (as
     * without TLS) */
    /* (the TLS state may hold part of a record besides what the BIO
     * shows: the buffer grows when less than a record is left; it is
     * one buffer per gateway, kept from read to read: feed() copies
     * what it keeps, and no read comes while it runs) */
    struct ms_http *h = c->h;
    size_t want = ms_tls_buffered(c->tls) + MS_TLS_RECORD, len = 0;
    for (;;) {
        if (h->tls_plain_cap - len < MS_TLS_RECORD ||
            h->tls_plain_cap < want) {
            size_t cap = h->tls_plain_cap ? h->tls_plain_cap : want;
            while (cap < want || cap - len < MS_TLS_RECORD)
                cap *= 2;
            char *more = realloc(h->tls_plain, cap);
            if (!more)
                return MS_ENOMEM;
            h->tls_plain = more;
            h->tls_plain_cap = cap;
        }
        ssize_t got = ms_tls_read(c->tls, h->tls_plain + len,
                                  h->tls_plain_cap - len);
        if (got == 0)
            break;
        if (got < 0)
            return (int)got;
        len += (size_t)got;
    }
    if (len)
        feed(c, h->tls_plain, len);
    return 0;
}

int ms__http_tls_accept(struct conn *c)
{
    if (!c->h->tls)
        return 0;
    c->tls = ms_tls_new(c->h->tls, 1, NULL);
    return c->tls ? 0 : MS_ENOMEM;
}

int ms__http_tls_setup(struct ms_http *h, const struct ms_gateway *gw,
                       char *err, size_t errlen)
{
    if (!gw->tls_cert || !gw->tls_cert[0])
        return 0;
    struct ms_tls_files files = {gw->tls_ca, gw->tls_cert, gw->tls_key};
    char why[400];
    int rc = ms_tls_ctx_new(&h->tls, MS_TLS_SERVER, &files, why, sizeof why);
    if (rc < 0 && err && errlen)
        snprintf(err, errlen, "gateway_tls: %s", why);
    return rc;
}
