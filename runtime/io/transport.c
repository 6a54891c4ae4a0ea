/*
 * transport.c -- authenticated peer connections over libuv TCP.
 *
 * A connection goes: TCP connected -> handshake (auth.c; the dialer is
 * the client) -> authenticated (registered by peer uid) -> closed. Both
 * nodes may dial each other at once; when a second authenticated
 * connection to the same peer appears, both sides keep the one dialed by
 * the node with the smaller uid, so exactly one survives.
 *
 * Output (write batching, TLS sealing, the tells a connection that ends
 * still held) is in transport_out.c; the state both share in
 * transport_int.h.
 *
 * Unauthenticated incoming connections are held to the deadlines and caps
 * described in transport.h: a timer per connection (first frame, then the
 * rest of the handshake), and at accept time a scan of the connections in
 * the handshake (at most MS_TRANSPORT_MAX_HANDSHAKES + 1 of them) to find
 * the one to evict. Their failures are counted and logged at powers of
 * two (note_failure).
 */

#include "transport_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/auth.h"
#include "../core/log.h"
#include "../moonshard.h"
#include "tcpinfo.h"
#include "tls.h"
#include "uverr.h"


/* ---- addresses ------------------------------------------------------- */

/* Parses "host:port" (IPv4 literal, localhost, or [IPv6]). */
static int parse_addr(const char *address, struct sockaddr_storage *ss)
{
    char host[128];
    const char *colon = strrchr(address, ':');
    if (!colon || colon == address || strlen(address) >= sizeof host)
        return MS_EINVAL;
    size_t hl = (size_t)(colon - address);
    memcpy(host, address, hl);
    host[hl] = 0;
    int port = atoi(colon + 1);
    if (port < 1 || port > 65535)
        return MS_EINVAL;
    if (strcmp(host, "localhost") == 0)
        return ms_uv_error(
            uv_ip4_addr("127.0.0.1", port, (struct sockaddr_in *)ss));
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = 0;
        return ms_uv_error(
            uv_ip6_addr(host + 1, port, (struct sockaddr_in6 *)ss));
    }
    return ms_uv_error(uv_ip4_addr(host, port, (struct sockaddr_in *)ss));
}

/* ---- lifecycle of a connection --------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->open_handles > 0)
        return;
    struct ms_transport *t = c->t;
    ms_auth_free(c->auth);
    ms_frame_decoder_free(&c->dec);
    free(c->pending.p);
    free(c->inflight.p);
    free(c->tells.end);
    ms_tls_free(c->tls);
    free(c);
    if (--t->open == 0 && t->closing) {
        ms_auth_replay_free(t->replay);
        ms_tls_ctx_free(t->tls);
        free(t);
    }
}

/*
 * Counts a connection whose handshake failed (once per connection) and
 * logs why when the count reaches a power of two: a stranger can make
 * the node count, not write a line per connection. Incoming connections
 * count in handshake_failures, this node's dials in dial_failures.
 */
static void note_failure(struct conn *c, const char *why)
{
    struct ms_transport *t = c->t;
    if (c->noted || c->authed)
        return;
    c->noted = 1;
    char f[200];
    if (c->outbound) {
        uint64_t n = ++t->dial_failures;
        if (!ms_log_due(n))
            return;
        ms_log_field_s(f, sizeof f, 0, "peer", c->address);
        ms_log(MS_LOG_WARN, f, "handshake with a dialed node failed: %s "
               "(%llu so far; logged at powers of two)", why,
               (unsigned long long)n);
        return;
    }
    uint64_t n = ++t->st.handshake_failures;
    if (!ms_log_due(n))
        return;
    ms_log_field_s(f, sizeof f, 0, "source", c->source);
    ms_log(MS_LOG_WARN, f, "unauthenticated connection closed: %s (%llu "
           "so far, %llu evicted, %llu timed out; logged at powers of two)",
           why, (unsigned long long)n,
           (unsigned long long)t->st.handshake_evictions,
           (unsigned long long)t->st.handshake_timeouts);
}

static void unlink_conn(struct conn *c)
{
    struct ms_transport *t = c->t;
    if (c->prev)
        c->prev->next = c->next;
    else if (t->conns == c)
        t->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* The connection no longer counts against MS_TRANSPORT_MAX_HANDSHAKES. */
static void leave_handshake(struct conn *c)
{
    if (!c->in_handshake)
        return;
    c->in_handshake = 0;
    c->t->handshaking--;
}

void ms__tr_close(struct conn *c, const char *reason)
{
    if (c->closing)
        return;
    c->closing = 1;
    struct ms_transport *t = c->t;
    if (reason && !c->authed) {
        note_failure(c, reason);
    } else if (reason) {
        char f[200];
        ms_log_field_s(f, sizeof f, 0, "peer", c->peer_name);
        ms_log(MS_LOG_WARN, f, "connection closed: %s", reason);
    }
    ms__tr_count_lost_tells(c);
    unlink_conn(c);
    leave_handshake(c);
    if (c->registered && !t->closing && t->cb.on_peer)
        t->cb.on_peer(t->cb.data, c->peer_uid, c->peer_name, c->address, 0);
    c->registered = 0;
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static struct conn *find_peer(struct ms_transport *t, uint64_t uid)
{
    for (struct conn *c = t->conns; c; c = c->next)
        if (c->registered && c->peer_uid == uid)
            return c;
    return NULL;
}

static uint64_t handshake_ms(const struct ms_transport *t)
{
    return t->cfg.handshake_timeout_ms ? t->cfg.handshake_timeout_ms
                                       : MS_TRANSPORT_HANDSHAKE_MS;
}

/* 1 when the socket of `c` is connected to its peer. */
static int tcp_connected(struct conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    return uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0;
}

static void on_handshake_timeout(uv_timer_t *timer)
{
    struct conn *c = timer->data;
    if (c->refused) {
        /* counted and logged when it was refused; its AUTH_FAIL is still
         * not written: stop waiting for a peer that does not read */
        ms__tr_close(c, NULL);
        return;
    }
    if (c->outbound && !c->tcp_up && tcp_connected(c)) {
        /* the connect completed but the loop has not run its callback
         * yet (a turn that ran long): that is no dead dial */
        uint64_t used = uv_now(c->t->loop) - c->started_ms;
        uint64_t total = handshake_ms(c->t);
        if (used < total) {
            uv_timer_start(&c->timer, on_handshake_timeout, total - used, 0);
            return;
        }
    }
    c->t->st.auth_failures++;
    c->t->st.handshake_timeouts++;
    char why[100];
    if (c->outbound && !c->tcp_up)
        snprintf(why, sizeof why, "no TCP connection within %llu ms",
                 (unsigned long long)c->first_ms);
    else if (c->outbound || c->got_frame)
        snprintf(why, sizeof why, "handshake not finished within %llu ms",
                 (unsigned long long)handshake_ms(c->t));
    else
        snprintf(why, sizeof why, "no handshake frame within %llu ms",
                 (unsigned long long)c->first_ms);
    note_failure(c, why);
    ms__tr_close(c, NULL);
}

/* The first frame arrived: the rest of the handshake is due by the
 * overall deadline, counted from accept. */
static void first_frame(struct conn *c)
{
    c->got_frame = 1;
    if (c->outbound)
        return;
    uint64_t used = uv_now(c->t->loop) - c->started_ms;
    uint64_t total = handshake_ms(c->t);
    uv_timer_start(&c->timer, on_handshake_timeout,
                   used < total ? total - used : 1, 0);
}

/* Sets the decoder's limits: until the peer is authenticated it may only
 * send handshake messages, so a larger frame is refused from its header
 * and never buffered. */
static void set_frame_limits(struct conn *c)
{
    size_t max_payload = c->t->cfg.max_payload;
    if (!c->authed && max_payload > MS_AUTH_MAX_PAYLOAD)
        max_payload = MS_AUTH_MAX_PAYLOAD;
    ms_frame_decoder_set_limits(&c->dec, max_payload,
                                max_payload + MS_FRAME_HEADER +
                                    MS_FRAME_MAX_TYPE + MS_MAX_ID);
}

/* Creates a connection with its handshake state. Returns 0 and *out, or a
 * negative code (nothing was created; the reason is logged). */
static int conn_new(struct ms_transport *t, int outbound, struct conn **out)
{
    struct conn *c = calloc(1, sizeof *c);
    if (!c)
        return MS_ENOMEM;
    struct ms_auth_options o;
    memset(&o, 0, sizeof o);
    o.role = outbound ? MS_AUTH_CLIENT : MS_AUTH_SERVER;
    o.cluster = t->cluster;
    o.name = t->name;
    o.uid = t->cfg.uid;
    o.address = t->address;
    o.secret = t->secret;
    o.secret_len = t->cfg.secret_len;
    o.replay = t->replay;
    char err[200];
    int rc = ms_auth_new(&c->auth, &o, err, sizeof err);
    if (rc < 0) {
        /* without its handshake state a connection could never be
         * authenticated, and its first frame would reach a NULL state */
        ms_log(MS_LOG_ERROR, NULL, "handshake setup failed: %s", err);
        free(c);
        return rc;
    }
    if (t->tls) {
        c->tls = ms_tls_new(t->tls, !outbound, NULL);
        if (!c->tls) {
            ms_log(MS_LOG_ERROR, NULL, "TLS setup failed: out of memory");
            ms_auth_free(c->auth);
            free(c);
            return MS_ENOMEM;
        }
    }
    c->t = t;
    c->outbound = outbound;
    uv_tcp_init(t->loop, &c->tcp);
    uv_timer_init(t->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    t->open++;
    ms_frame_decoder_init(&c->dec, 0, 0);
    set_frame_limits(c);
    if (!outbound) {
        c->in_handshake = 1;
        t->handshaking++;
    }
    c->next = t->conns;
    if (t->conns)
        t->conns->prev = c;
    t->conns = c;
    c->seq = ++t->next_seq;
    c->started_ms = uv_now(t->loop);
    snprintf(c->source, sizeof c->source, "?");
    uint64_t deadline = handshake_ms(t);
    if (!outbound && deadline > MS_TRANSPORT_FIRST_FRAME_MS)
        deadline = MS_TRANSPORT_FIRST_FRAME_MS;
    if (outbound && deadline > MS_TRANSPORT_CONNECT_MS)
        deadline = MS_TRANSPORT_CONNECT_MS; /* until the TCP connect */
    c->first_ms = deadline;
    uv_timer_start(&c->timer, on_handshake_timeout, deadline, 0);
    *out = c;
    return 0;
}

/* The handshake finished: register the peer, resolving duplicates. */
static void authenticated(struct conn *c)
{
    struct ms_transport *t = c->t;
    c->authed = 1;
    leave_handshake(c);
    set_frame_limits(c); /* the frames after this one may be large */
    uv_timer_stop(&c->timer);
    c->peer_uid = ms_auth_peer_uid(c->auth);
    snprintf(c->peer_name, sizeof c->peer_name, "%s",
             ms_auth_peer_name(c->auth));
    snprintf(c->address, sizeof c->address, "%s",
             ms_auth_peer_address(c->auth));
    if (c->peer_uid == t->cfg.uid) {
        ms__tr_close(c, "connected to itself");
        return;
    }
    struct conn *old = find_peer(t, c->peer_uid);
    if (old) {
        /* keep the connection dialed by the smaller uid */
        uint64_t dialer_new = c->outbound ? t->cfg.uid : c->peer_uid;
        uint64_t keep = t->cfg.uid < c->peer_uid ? t->cfg.uid : c->peer_uid;
        if (dialer_new != keep) {
            ms__tr_close(c, NULL);
            return;
        }
        old->registered = 0; /* replaced: the peer stays up */
        ms__tr_close(old, NULL);
        c->registered = 1;
        t->st.connections++;
        if (t->cb.on_replaced)
            t->cb.on_replaced(t->cb.data, c->peer_uid);
        return;
    }
    c->registered = 1;
    t->st.connections++;
    if (t->cb.on_peer)
        t->cb.on_peer(t->cb.data, c->peer_uid, c->peer_name, c->address, 1);
}

/* Runs one handshake step; sends its output. */
static void handshake(struct conn *c, const struct ms_frame *in)
{
    struct ms_frame out;
    uint8_t buf[MS_AUTH_BUF_SIZE];
    memset(&out, 0, sizeof out);
    int rc = in ? ms_auth_on_frame(c->auth, in, &out, buf, sizeof buf)
                : ms_auth_start(c->auth, &out, buf, sizeof buf);
    if (out.kind)
        ms__tr_put_frame(c, &out);
    if (rc < 0) {
        /* read nothing more: frames the peer sent after the refused one
         * (already buffered, or still coming) must not each be refused,
         * counted and logged again */
        c->refused = 1;
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->t->st.auth_failures++;
        char why[300];
        snprintf(why, sizeof why, "%s%s",
                 c->outbound ? "" : "handshake refused: ",
                 ms_auth_reason(c->auth));
        note_failure(c, why);
        c->close_after_write = 1;
        if (!c->pending.len && !c->writing)
            ms__tr_close(c, NULL);
        else
            ms__tr_flush(c);
        return;
    }
    ms__tr_flush(c);
    if (rc == MS_AUTH_DONE)
        authenticated(c);
}

/* ---- input ------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)suggested;
    buf->base = c->t->rbuf;
    buf->len = sizeof c->t->rbuf;
}

/* Decodes and handles the frames in `n` bytes of the (plaintext)
 * stream. */
static void on_bytes(struct conn *c, const char *p, size_t n)
{
    size_t off = 0;
    while (off < n && !c->closing && !c->refused) {
        size_t used = 0;
        struct ms_frame f;
        int rc = ms_frame_feed(&c->dec, (const uint8_t *)p + off, n - off,
                               &used, &f);
        off += used;
        if (rc < 0) {
            c->t->st.rejected_frames++;
            char why[240];
            snprintf(why, sizeof why, "malformed frame: %s",
                     ms_frame_decoder_error(&c->dec));
            ms__tr_close(c, why);
            return;
        }
        if (rc == 0)
            break;
        if (!c->authed) {
            if (!c->got_frame)
                first_frame(c);
            handshake(c, &f);
            continue;
        }
        if (f.kind < MS_FRAME_TELL) {
            c->t->st.rejected_frames++;
            ms__tr_close(c, "handshake frame after authentication");
            return;
        }
        c->t->st.frames_in++;
        if ((c->registered ||
             (c->draining && f.kind == MS_FRAME_TELL)) &&
            c->t->cb.on_frame)
            c->t->cb.on_frame(c->t->cb.data, c->peer_uid, &f);
    }
}

/* The TLS handshake failed: counted and logged as a refused handshake
 * (a plaintext node dialing a TLS node ends here, and so does a peer
 * whose certificate the CA did not sign); the alert is sent, then the
 * connection closes. */
static void tls_refused(struct conn *c)
{
    c->refused = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->t->st.auth_failures++;
    char why[300];
    snprintf(why, sizeof why, "%s", ms_tls_reason(c->tls));
    note_failure(c, why);
    c->pending.len = 0; /* the HMAC handshake's frames: never sealed */
    c->close_after_write = 1;
    ms__tr_flush(c);
    if (!c->writing && !c->closing)
        ms__tr_close(c, NULL);
}

/* TLS: ciphertext arrived; runs the handshake until it is done, then
 * hands the plaintext to on_bytes and sends what the TLS layer has to
 * say (handshake messages, the pending frames once it is up). */
static void on_cipher(struct conn *c, const char *p, size_t n)
{
    if (ms_tls_feed(c->tls, p, n) < 0) {
        ms__tr_close(c, ms_tls_reason(c->tls));
        return;
    }
    if (!c->tls_up) {
        int rc = ms_tls_handshake(c->tls);
        if (rc < 0) {
            tls_refused(c);
            return;
        }
        if (rc == 0) {
            ms__tr_flush(c);
            return;
        }
        c->tls_up = 1;
    }
    char *plain = c->t->pbuf;
    while (!c->closing && !c->refused) {
        ssize_t got = ms_tls_read(c->tls, plain, sizeof c->t->pbuf);
        if (got == 0)
            break;
        if (got < 0) {
            c->dead = 1;
            ms__tr_close(c, ms_tls_reason(c->tls));
            return;
        }
        on_bytes(c, plain, (size_t)got);
    }
    ms__tr_flush(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    if (nread < 0) {
        c->dead = 1;
        ms__tr_close(c, nread == UV_EOF ? "peer closed the connection"
                                      : uv_strerror((int)nread));
        return;
    }
    if (c->tls)
        on_cipher(c, buf->base, (size_t)nread);
    else
        on_bytes(c, buf->base, (size_t)nread);
}

/* Bounds how long data sent on `c` may stay unacknowledged before the
 * kernel ends the connection (transport.h, MS_TRANSPORT_USER_TIMEOUT_MS).
 * Where the option does not exist the connection lives on as before. */
static void set_user_timeout(struct conn *c)
{
#ifdef TCP_USER_TIMEOUT
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return;
    unsigned int ms = MS_TRANSPORT_USER_TIMEOUT_MS;
    if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) != 0)
        ms_log(MS_LOG_WARN, NULL, "TCP_USER_TIMEOUT refused: a connection "
               "whose packets are lost lives until the kernel gives up");
#else
    (void)c;
#endif
}

static void start_reading(struct conn *c)
{
    uv_tcp_nodelay(&c->tcp, 1);
    set_user_timeout(c);
    /* before the first byte is written: what the kernel counts as
     * acknowledged already (a dialer's SYN) is no part of the stream */
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 &&
        ms_tcp_bytes_acked(fd, &c->acked_base) == 0)
        c->acked_known = 1;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_rejected_closed(uv_handle_t *h)
{
    free(h);
}

/* Accepts the pending connection only to close it: libuv stops listening
 * while an accepted socket waits, so one that cannot be served must still
 * be taken off the queue. */
static void reject(uv_stream_t *server)
{
    struct ms_transport *t = server->data;
    uv_tcp_t *tcp = malloc(sizeof *tcp);
    if (!tcp) {
        ms_log(MS_LOG_ERROR, NULL, "out of memory refusing a connection");
        return;
    }
    uv_tcp_init(t->loop, tcp);
    uv_accept(server, (uv_stream_t *)tcp);
    uv_close((uv_handle_t *)tcp, on_rejected_closed);
}

/* Reads the source of an accepted connection into c->src and
 * c->source. */
static void take_source(struct conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    memset(&c->src, 0, sizeof c->src);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
        return;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
        c->src.family = 4;
        memcpy(c->src.bytes, &in->sin_addr, 4);
        uv_ip4_name(in, ip, sizeof ip);
        snprintf(c->source, sizeof c->source, "%s:%u", ip,
                 (unsigned)ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
        const uint8_t *b = in6->sin6_addr.s6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            c->src.family = 4;
            memcpy(c->src.bytes, b + 12, 4);
        } else {
            c->src.family = 6;
            memcpy(c->src.bytes, b, 8);
        }
        uv_ip6_name(in6, ip, sizeof ip);
        snprintf(c->source, sizeof c->source, "[%s]:%u", ip,
                 (unsigned)ntohs(in6->sin6_port));
    }
}

static int same_source(const struct conn *a, const struct conn *b)
{
    return memcmp(&a->src, &b->src, sizeof a->src) == 0;
}

/* 1 when `c` has sent no frame for MS_TRANSPORT_SILENT_MS since it was
 * accepted. A younger one may not have had the chance: connections
 * accepted in one loop turn are all still silent. */
static int silent(const struct conn *c, uint64_t now)
{
    return !c->got_frame && now - c->started_ms >= MS_TRANSPORT_SILENT_MS;
}

/* 1 when `a` should be evicted before `b`: a silent one (a real node
 * sends its HELLO as soon as it is connected) before one that is not,
 * then the older. */
static int evict_before(const struct conn *a, const struct conn *b,
                        uint64_t now)
{
    if (!b)
        return 1;
    if (silent(a, now) != silent(b, now))
        return silent(a, now);
    return a->seq < b->seq;
}

/* Closes `victim`, an unauthenticated connection, to make room. */
static void evict(struct conn *victim, const char *why)
{
    victim->t->st.handshake_evictions++;
    note_failure(victim, why);
    ms__tr_close(victim, NULL);
}

/*
 * Makes room for the new incoming connection `c` (already counted in
 * t->handshaking): when its source has MS_TRANSPORT_MAX_HANDSHAKES_PER_
 * SOURCE others in the handshake, one of them goes; else, when
 * MS_TRANSPORT_MAX_HANDSHAKES others are, one of the source that holds
 * the most. Of those, the first by evict_before(). `c` itself is never
 * the victim.
 */
static void make_room(struct ms_transport *t, struct conn *c)
{
    struct conn *oldest = NULL, *victim = NULL;
    int same = 0, best = 0;
    uint64_t now = uv_now(t->loop);
    for (struct conn *a = t->conns; a; a = a->next) {
        if (a == c || !a->in_handshake || !same_source(a, c))
            continue;
        same++;
        if (evict_before(a, oldest, now))
            oldest = a;
    }
    if (same >= MS_TRANSPORT_MAX_HANDSHAKES_PER_SOURCE) {
        char why[120];
        snprintf(why, sizeof why, "evicted: its source has %d other "
                 "connections in the handshake",
                 MS_TRANSPORT_MAX_HANDSHAKES_PER_SOURCE);
        evict(oldest, why);
        return;
    }
    if (t->handshaking - 1 < MS_TRANSPORT_MAX_HANDSHAKES)
        return;
    t->st.handshake_overflows++;
    /* at most 64 + 1 connections in the handshake: 64^2 comparisons */
    for (struct conn *a = t->conns; a; a = a->next) {
        if (a == c || !a->in_handshake)
            continue;
        int n = 0;
        for (struct conn *b = t->conns; b; b = b->next)
            n += b != c && b->in_handshake && same_source(a, b);
        if (n > best || (n == best && evict_before(a, victim, now))) {
            best = n;
            victim = a;
        }
    }
    if (victim) {
        char why[120];
        snprintf(why, sizeof why, "evicted: %d connections are in the "
                 "handshake", MS_TRANSPORT_MAX_HANDSHAKES);
        evict(victim, why);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    struct ms_transport *t = server->data;
    if (status < 0 || t->closing)
        return;
    struct conn *c;
    if (conn_new(t, 0, &c) < 0) {
        reject(server);
        return;
    }
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        ms__tr_close(c, "accept failed");
        return;
    }
    take_source(c);
    make_room(t, c);
    start_reading(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    struct conn *c = req->data;
    if (c->closing)
        return;
    if (status < 0) {
        ms__tr_close(c, NULL); /* the cluster layer retries */
        return;
    }
    /* connected: the rest of the handshake is due by the overall
     * deadline, counted from the dial */
    c->tcp_up = 1;
    uint64_t used = uv_now(c->t->loop) - c->started_ms;
    uint64_t total = handshake_ms(c->t);
    uv_timer_start(&c->timer, on_handshake_timeout,
                   used < total ? total - used : 1, 0);
    start_reading(c);
    if (c->tls && ms_tls_handshake(c->tls) < 0) {
        tls_refused(c);
        return;
    }
    /* with TLS its HELLO waits in `pending` until the TLS handshake is
     * done; flush sends the ClientHello meanwhile */
    handshake(c, NULL);
}

/* ---- public ------------------------------------------------------------ */

int ms_transport_start(struct ms_transport **out, uv_loop_t *loop,
                       const struct ms_transport_config *cfg,
                       const struct ms_transport_callbacks *cb, char *err,
                       size_t errlen)
{
    struct ms_transport *t = calloc(1, sizeof *t);
    if (!t) {
        ms_tls_ctx_free(cfg->tls);
        snprintf(err, errlen, "out of memory");
        return MS_ENOMEM;
    }
    t->loop = loop;
    t->cfg = *cfg;
    t->tls = cfg->tls;
    t->cfg.tls = NULL;
    t->cb = *cb;
    snprintf(t->cluster, sizeof t->cluster, "%s", cfg->cluster);
    snprintf(t->name, sizeof t->name, "%s", cfg->name);
    snprintf(t->address, sizeof t->address, "%s", cfg->address);
    snprintf(t->host, sizeof t->host, "%s", cfg->listen_host);
    if (cfg->secret_len > sizeof t->secret) {
        snprintf(err, errlen, "the cluster secret is longer than %zu bytes",
                 sizeof t->secret);
        ms_tls_ctx_free(t->tls);
        free(t);
        return MS_EINVAL;
    }
    memcpy(t->secret, cfg->secret, cfg->secret_len);
    t->cfg.cluster = t->cluster;
    t->cfg.name = t->name;
    t->cfg.address = t->address;
    t->cfg.secret = t->secret;
    t->cfg.listen_host = t->host;
    t->replay = ms_auth_replay_new();
    if (!t->replay) {
        snprintf(err, errlen, "out of memory");
        ms_tls_ctx_free(t->tls);
        free(t);
        return MS_ENOMEM;
    }
    struct sockaddr_storage ss;
    char addr[200];
    snprintf(addr, sizeof addr, "%s:%d", cfg->listen_host, cfg->listen_port);
    int rc = parse_addr(addr, &ss);
    if (rc == 0) {
        uv_tcp_init(loop, &t->listener);
        t->listener.data = t;
        t->open = 1;
        rc = uv_tcp_bind(&t->listener, (struct sockaddr *)&ss, 0);
        if (rc == 0)
            rc = uv_listen((uv_stream_t *)&t->listener, 128, on_connection);
        if (rc < 0) {
            snprintf(err, errlen, "cannot listen on %s: %s", addr,
                     uv_strerror(rc));
            ms_transport_close(t);
            return rc;
        }
    } else {
        snprintf(err, errlen, "bad listen address %s", addr);
        ms_auth_replay_free(t->replay);
        ms_tls_ctx_free(t->tls);
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int ms_transport_connect(struct ms_transport *t, const char *address)
{
    if (t->closing)
        return MS_ECANCELED;
    if (strcmp(address, t->address) == 0)
        return 0;
    for (struct conn *c = t->conns; c; c = c->next)
        if (!c->draining && strcmp(c->address, address) == 0)
            return 0;
    struct sockaddr_storage ss;
    int rc = parse_addr(address, &ss);
    if (rc < 0)
        return rc;
    struct conn *c;
    rc = conn_new(t, 1, &c);
    if (rc < 0)
        return rc;
    snprintf(c->address, sizeof c->address, "%s", address);
    c->connect.data = c;
    rc = uv_tcp_connect(&c->connect, &c->tcp, (struct sockaddr *)&ss,
                        on_connect);
    if (rc < 0) {
        ms__tr_close(c, uv_strerror(rc));
        return rc;
    }
    return 0;
}

int ms_transport_send(struct ms_transport *t, uint64_t uid,
                      const struct ms_frame *f)
{
    struct conn *c = find_peer(t, uid);
    if (!c || c->closing)
        return UV_ENOTCONN;
    int rc = ms__tr_put_frame(c, f);
    if (rc == 0)
        ms__tr_flush(c);
    return rc;
}

int ms_transport_connected(struct ms_transport *t, uint64_t uid)
{
    return find_peer(t, uid) != NULL;
}

void ms_transport_drop(struct ms_transport *t, uint64_t uid,
                       const char *reason)
{
    struct conn *c = find_peer(t, uid);
    if (c)
        ms__tr_close(c, reason);
}

void ms_transport_stats(struct ms_transport *t,
                        struct ms_transport_stats *out)
{
    *out = t->st;
}

static void on_listener_closed(uv_handle_t *h)
{
    struct ms_transport *t = h->data;
    if (--t->open == 0) {
        ms_auth_replay_free(t->replay);
        ms_tls_ctx_free(t->tls);
        free(t);
    }
}

void ms_transport_close(struct ms_transport *t)
{
    t->closing = 1;
    while (t->conns)
        ms__tr_close(t->conns, NULL);
    uv_close((uv_handle_t *)&t->listener, on_listener_closed);
}
