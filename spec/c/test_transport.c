/* The transport on 127.0.0.1: handshake, frames both ways, refusals, a
 * malformed frame, a peer that stops reading, what an unauthenticated
 * client can make a node hold. Real sockets, one loop. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/core/auth.h"
#include "../../runtime/core/log.h"
#include "../../runtime/io/transport.h"
#include "free_port.h"
#include "../../runtime/moonshard.h"
#include "check.h"

struct side {
    struct ms_transport *t;
    int ups, downs, frames;
    uint64_t peer;
    char last[64];
};

static void on_peer(void *data, uint64_t uid, const char *name,
                    const char *address, int up)
{
    struct side *s = data;
    (void)name;
    (void)address;
    if (up) {
        s->ups++;
        s->peer = uid;
    } else {
        s->downs++;
    }
}

static void on_frame(void *data, uint64_t uid, const struct ms_frame *f)
{
    struct side *s = data;
    (void)uid;
    s->frames++;
    snprintf(s->last, sizeof s->last, "%.*s", (int)f->payload_len,
             f->payload);
}

static int start(struct side *s, uv_loop_t *loop, const char *name,
                 uint64_t uid, int port, const char *secret)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    struct ms_transport_config cfg = {
        "test", name, addr, uid, (const uint8_t *)secret, strlen(secret),
        "127.0.0.1", port, 1 << 16, 4 << 20, 2000};
    struct ms_transport_callbacks cb = {s, on_peer, on_frame};
    char err[200];
    memset(s, 0, sizeof *s);
    int rc = ms_transport_start(&s->t, loop, &cfg, &cb, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "start: %s\n", err);
    return rc;
}

static void spin(uv_loop_t *loop, int ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000u;
    while (uv_hrtime() < end) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

static struct ms_frame tell(const char *payload)
{
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    f.kind = MS_FRAME_TELL;
    f.type = "Counter";
    f.type_len = 7;
    f.id = "c1";
    f.id_len = 2;
    f.payload = payload;
    f.payload_len = strlen(payload);
    return f;
}

static void handshake_and_frames(uv_loop_t *loop)
{
    struct side a, b;
    int pa = free_port(), pb = free_port();
    CHECK(start(&a, loop, "a", 1, pa, "s3cret") == 0);
    CHECK(start(&b, loop, "b", 2, pb, "s3cret") == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", pb);
    CHECK(ms_transport_connect(a.t, addr) == 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", pa);
    CHECK(ms_transport_connect(b.t, addr) == 0); /* both dial at once */
    spin(loop, 300);
    CHECK(a.ups == 1 && b.ups == 1 && a.peer == 2 && b.peer == 1);
    CHECK(ms_transport_connected(a.t, 2) && ms_transport_connected(b.t, 1));
    struct ms_frame f = tell("{\"n\":1}");
    CHECK(ms_transport_send(a.t, 2, &f) == 0);
    f = tell("{\"n\":2}");
    CHECK(ms_transport_send(a.t, 2, &f) == 0);
    f = tell("{\"back\":1}");
    CHECK(ms_transport_send(b.t, 1, &f) == 0);
    spin(loop, 100);
    CHECK(b.frames == 2 && strcmp(b.last, "{\"n\":2}") == 0);
    CHECK(a.frames == 1 && strcmp(a.last, "{\"back\":1}") == 0);
    CHECK(a.downs == 0 && b.downs == 0); /* the duplicate went silently */
    CHECK(ms_transport_send(a.t, 99, &f) == UV_ENOTCONN);
    ms_transport_close(a.t);
    spin(loop, 100);
    CHECK(b.downs == 1);
    ms_transport_close(b.t);
    spin(loop, 50);
}

static void wrong_secret_is_refused(uv_loop_t *loop)
{
    struct side a, b;
    int pa = free_port(), pb = free_port();
    CHECK(start(&a, loop, "a", 1, pa, "right") == 0);
    CHECK(start(&b, loop, "b", 2, pb, "wrong") == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", pb);
    CHECK(ms_transport_connect(a.t, addr) == 0);
    spin(loop, 300);
    CHECK(a.ups == 0 && b.ups == 0);
    struct ms_transport_stats sa, sb;
    ms_transport_stats(a.t, &sa);
    ms_transport_stats(b.t, &sb);
    CHECK(sa.auth_failures >= 1 && sb.auth_failures >= 1);
    ms_transport_close(a.t);
    ms_transport_close(b.t);
    spin(loop, 50);
}

/* A raw client writing `bytes` to the transport's port. */
static void raw_send(uv_loop_t *loop, int port, const char *bytes, size_t n)
{
    (void)loop;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", port, &a);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        ssize_t w = write(fd, bytes, n);
        (void)w;
    }
    spin(loop, 100);
    close(fd);
}

static void garbage_and_oversize_frames_close_the_connection(uv_loop_t *loop)
{
    struct side a;
    int pa = free_port();
    CHECK(start(&a, loop, "a", 1, pa, "s") == 0);
    const char *http = "GET / HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n";
    raw_send(loop, pa, http, strlen(http));
    uint8_t hdr[MS_FRAME_HEADER];
    struct ms_frame f = tell("{}");
    ms_frame_encode_header(hdr, &f);
    hdr[13] = 0xff; /* payload_len (offset 12) far beyond the limit */
    hdr[14] = 0xff;
    hdr[15] = 0x7f;
    raw_send(loop, pa, (const char *)hdr, sizeof hdr);
    struct ms_transport_stats st;
    ms_transport_stats(a.t, &st);
    CHECK(st.rejected_frames == 2);
    CHECK(a.ups == 0);
    ms_transport_close(a.t);
    spin(loop, 50);
}

/* B authenticates, then its loop stops running: it reads nothing more.
 * A's queue to B grows until max_out_bytes; then A drops B and counts
 * it, and serves on. */
static void a_peer_that_stops_reading_is_dropped(uv_loop_t *loop)
{
    uv_loop_t other;
    uv_loop_init(&other);
    struct side a, b;
    int pa = free_port(), pb = free_port();
    CHECK(start(&a, loop, "a", 1, pa, "s") == 0);
    CHECK(start(&b, &other, "b", 2, pb, "s") == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", pb);
    CHECK(ms_transport_connect(a.t, addr) == 0);
    for (int i = 0; i < 300 && !(a.ups && b.ups); i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        uv_run(&other, UV_RUN_NOWAIT);
        usleep(1000);
    }
    CHECK(a.ups == 1 && b.ups == 1);
    /* from now on only A's loop runs */
    static char big[60000];
    memset(big, 'x', sizeof big - 1);
    struct ms_frame f = tell(big);
    int rc = 0, sent = 0;
    for (int i = 0; i < 200 && rc == 0; i++) {
        rc = ms_transport_send(a.t, 2, &f);
        if (rc == 0)
            sent++;
        uv_run(loop, UV_RUN_NOWAIT);
    }
    CHECK(rc == MS_EOVERFLOW);
    CHECK(sent > 0);
    struct ms_transport_stats st;
    ms_transport_stats(a.t, &st);
    CHECK(st.slow_peer_drops == 1);
    CHECK(!ms_transport_connected(a.t, 2));
    spin(loop, 50);
    CHECK(a.downs == 1);
    ms_transport_close(a.t);
    ms_transport_close(b.t);
    spin(loop, 50);
    uv_run(&other, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&other) == 0);
}

/* A raw TCP client of 127.0.0.1:port, non-blocking, or -1. */
static int raw_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", port, &a);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Writes all `n` bytes, running the loop while the socket is full. Stops
 * early when the node closed the connection. */
static void raw_write_all(uv_loop_t *loop, int fd, const void *p, size_t n)
{
    const char *b = p;
    for (int spins = 0; n && spins < 2000; spins++) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            return;
        }
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(200);
    }
}

/* 1 when the node closed the connection (EOF or reset), else 0. */
static int raw_closed(int fd)
{
    char b[256];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (r == 0)
            return 1;
        if (r < 0)
            return errno != EAGAIN && errno != EWOULDBLOCK;
    }
}

/* A header announcing a payload above the handshake's limit, though under
 * max_payload, is refused at once: the node does not wait for (and
 * buffer) the payload of someone who has not authenticated. */
static void large_frame_before_authentication_is_refused(uv_loop_t *loop)
{
    struct side a;
    int pa = free_port();
    CHECK(start(&a, loop, "a", 1, pa, "s") == 0);
    int fd = raw_open(pa);
    CHECK(fd >= 0);
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    f.kind = MS_FRAME_HELLO;
    f.payload = "";
    f.payload_len = MS_AUTH_MAX_PAYLOAD + 1;
    CHECK(f.payload_len < (1 << 16)); /* the node's max_payload */
    uint8_t hdr[MS_FRAME_HEADER];
    CHECK(ms_frame_encode_header(hdr, &f) == MS_FRAME_HEADER);
    raw_write_all(loop, fd, hdr, sizeof hdr); /* and no payload */
    spin(loop, 100);
    struct ms_transport_stats st;
    ms_transport_stats(a.t, &st);
    CHECK(st.rejected_frames == 1);
    CHECK(raw_closed(fd));
    close(fd);
    ms_transport_close(a.t);
    spin(loop, 50);
}

/* A refused HELLO followed by many more frames in the same write is one
 * refusal: the node reads nothing after it. */
static void frames_after_a_refused_hello_are_ignored(uv_loop_t *loop)
{
    struct side a;
    int pa = free_port();
    CHECK(start(&a, loop, "a", 1, pa, "s") == 0);
    enum { FOLLOWING = 2000 };
    static uint8_t bytes[(FOLLOWING + 1) * MS_FRAME_HEADER + 2];
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    f.kind = MS_FRAME_HELLO;
    f.payload = "{}"; /* no fields: refused */
    f.payload_len = 2;
    size_t len = 0, n;
    CHECK(ms_frame_encode(&f, bytes, sizeof bytes, &n) == 0);
    len += n;
    f.payload_len = 0;
    for (int i = 0; i < FOLLOWING; i++) {
        CHECK(ms_frame_encode(&f, bytes + len, sizeof bytes - len, &n) == 0);
        len += n;
    }
    int fd = raw_open(pa);
    CHECK(fd >= 0);
    raw_write_all(loop, fd, bytes, len);
    spin(loop, 200);
    struct ms_transport_stats st;
    ms_transport_stats(a.t, &st);
    CHECK(st.auth_failures == 1);
    CHECK(st.rejected_frames == 0);
    CHECK(raw_closed(fd));
    close(fd);
    ms_transport_close(a.t);
    spin(loop, 50);
}

/* Past MS_TRANSPORT_MAX_HANDSHAKES idle clients, a new connection is
 * closed at once and counted, a real peer's too; once the idle ones are
 * gone, a peer connects again. */
static void handshakes_in_progress_are_capped(uv_loop_t *loop)
{
    enum { EXTRA = 8, ALL = MS_TRANSPORT_MAX_HANDSHAKES + EXTRA };
    struct side a, b;
    int pa = free_port(), pb = free_port();
    CHECK(start(&a, loop, "a", 1, pa, "s") == 0);
    CHECK(start(&b, loop, "b", 2, pb, "s") == 0);
    int fds[ALL];
    for (int i = 0; i < ALL; i++) {
        fds[i] = raw_open(pa);
        CHECK(fds[i] >= 0);
        uv_run(loop, UV_RUN_NOWAIT);
    }
    spin(loop, 200); /* far below the 2 s handshake timeout */
    int closed = 0;
    for (int i = 0; i < ALL; i++)
        closed += fds[i] >= 0 && raw_closed(fds[i]);
    CHECK(closed == EXTRA);
    struct ms_transport_stats st;
    ms_transport_stats(a.t, &st);
    CHECK(st.handshake_overflows == EXTRA);
    CHECK(st.auth_failures == 0);

    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", pa);
    CHECK(ms_transport_connect(b.t, addr) == 0);
    spin(loop, 200);
    CHECK(a.ups == 0 && b.ups == 0);
    ms_transport_stats(a.t, &st);
    CHECK(st.handshake_overflows == EXTRA + 1);

    for (int i = 0; i < ALL; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    spin(loop, 200);
    CHECK(ms_transport_connect(b.t, addr) == 0);
    spin(loop, 300);
    CHECK(a.ups == 1 && b.ups == 1);
    ms_transport_close(a.t);
    ms_transport_close(b.t);
    spin(loop, 50);
}

/* A node whose handshake state cannot be made (here: a name the handshake
 * refuses) makes no connection, rather than one without that state. */
static void no_connection_without_handshake_state(uv_loop_t *loop)
{
    struct side a, b;
    int pa = free_port(), pb = free_port();
    CHECK(start(&a, loop, "bad\"name", 1, pa, "s") == 0);
    CHECK(start(&b, loop, "b", 2, pb, "s") == 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", pb);
    CHECK(ms_transport_connect(a.t, addr) == MS_EINVAL);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", pa);
    CHECK(ms_transport_connect(b.t, addr) == 0);
    spin(loop, 300); /* a refuses b at once; b's HELLO reaches nothing */
    CHECK(a.ups == 0 && b.ups == 0);
    CHECK(!ms_transport_connected(b.t, 1));
    ms_transport_close(a.t);
    ms_transport_close(b.t);
    spin(loop, 50);
}

int main(void)
{
    ms_log_setup("test", getenv("VERBOSE") ? 0 : MS_LOG_ERROR + 1);
    uv_loop_t *loop = uv_default_loop();
    handshake_and_frames(loop);
    wrong_secret_is_refused(loop);
    garbage_and_oversize_frames_close_the_connection(loop);
    a_peer_that_stops_reading_is_dropped(loop);
    large_frame_before_authentication_is_refused(loop);
    frames_after_a_refused_hello_are_ignored(loop);
    handshakes_in_progress_are_capped(loop);
    no_connection_without_handshake_state(loop);
    uv_run(loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(loop) == 0);
    CHECK_DONE();
}
