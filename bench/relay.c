/*
 * relay.c -- `moonshard-bench relay --to PORT [--listen PORT]`: a TCP
 * relay on 127.0.0.1 that does nothing but copy bytes. Each connection it
 * accepts gets a connection of its own to 127.0.0.1:PORT; what one side
 * sends, the relay writes to the other, unchanged. When one side ends
 * its sending, the relay ends its sending to the other once all it read
 * is written (a half close), and closes both when both have ended, or at
 * once on an error.
 *
 * It is the shape of a remote ask without the work: a client's request
 * goes to one process, which sends it to another and carries the answer
 * back, as a request to n1 for an entity on n2 does. `bench all` runs
 * Redis through it (redis.c), so that the `remote` and `p99` rows can be
 * read against what two loopback hops and a third process cost on the
 * same machine with no parsing, routing or entity at either end.
 *
 * It prints the port it listens on (one line) once it listens, then runs
 * until it is killed (SIGPIPE ignored: a peer's reset ends its pair only).
 * --listen 0 (the default) takes a free port.
 */
#include "bench.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define RELAY_READ_MAX 65536

/* One accepted connection and its own connection upstream. */
struct pair {
    uv_tcp_t side[2];      /* 0: the client's, 1: upstream */
    uv_connect_t connect;
    uv_shutdown_t shut[2]; /* shut[i]: the end of what side i sent */
    int ended[2];          /* side i ended its sending */
    int open;              /* handles not yet closed */
    int closing;
};

/* A write the socket did not take at once: the bytes are copied, and the
 * side they came from stops reading until they are written. */
struct pending {
    uv_write_t req;
    struct pair *p;
    int from;
    char bytes[];
};

static struct sockaddr_in upstream;
static char read_buf[RELAY_READ_MAX];

static void on_closed(uv_handle_t *h)
{
    struct pair *p = h->data;
    if (--p->open == 0)
        free(p);
}

static void close_pair(struct pair *p)
{
    if (p->closing)
        return;
    p->closing = 1;
    for (int i = 0; i < 2; i++)
        uv_close((uv_handle_t *)&p->side[i], on_closed);
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *buf)
{
    (void)h;
    (void)want;
    /* one loop, and each read is written (or copied) before the next */
    *buf = uv_buf_init(read_buf, sizeof read_buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void on_written(uv_write_t *req, int status)
{
    struct pending *w =
        (struct pending *)((char *)req - offsetof(struct pending, req));
    struct pair *p = w->p;
    int from = w->from;
    free(w);
    if (p->closing)
        return;
    if (status < 0 ||
        uv_read_start((uv_stream_t *)&p->side[from], on_alloc, on_read) < 0)
        close_pair(p);
}

static void on_shut(uv_shutdown_t *req, int status)
{
    struct pair *p = req->data;
    if (status < 0 || (p->ended[0] && p->ended[1]))
        close_pair(p);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct pair *p = s->data;
    if (n == 0 || p->closing)
        return;
    int from = s == (uv_stream_t *)&p->side[1];
    uv_stream_t *to = (uv_stream_t *)&p->side[!from];
    if (n == UV_EOF) { /* after the writes queued, the other side's end */
        p->ended[from] = 1;
        p->shut[from].data = p;
        uv_read_stop(s);
        if (uv_shutdown(&p->shut[from], to, on_shut) < 0)
            close_pair(p);
        return;
    }
    if (n < 0) { /* an error: both sides go */
        close_pair(p);
        return;
    }
    uv_buf_t b = uv_buf_init(buf->base, (unsigned)n);
    int w = uv_try_write(to, &b, 1);
    if (w == n)
        return;
    if (w < 0 && w != UV_EAGAIN) {
        close_pair(p);
        return;
    }
    size_t done = w > 0 ? (size_t)w : 0, left = (size_t)n - done;
    struct pending *pw = malloc(sizeof *pw + left);
    if (!pw) {
        close_pair(p);
        return;
    }
    pw->p = p;
    pw->from = from;
    memcpy(pw->bytes, buf->base + done, left);
    b = uv_buf_init(pw->bytes, (unsigned)left);
    uv_read_stop(s);
    if (uv_write(&pw->req, to, &b, 1, on_written) < 0) {
        free(pw);
        close_pair(p);
    }
}

static void on_upstream(uv_connect_t *req, int status)
{
    struct pair *p = req->data;
    if (p->closing)
        return;
    if (status < 0) {
        fprintf(stderr, "moonshard-bench relay: upstream: %s\n",
                uv_strerror(status));
        close_pair(p);
        return;
    }
    uv_tcp_nodelay(&p->side[1], 1);
    for (int i = 0; i < 2; i++)
        if (uv_read_start((uv_stream_t *)&p->side[i], on_alloc, on_read) < 0) {
            close_pair(p);
            return;
        }
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0)
        return;
    struct pair *p = calloc(1, sizeof *p);
    if (!p)
        return;
    for (int i = 0; i < 2; i++) {
        uv_tcp_init(server->loop, &p->side[i]);
        p->side[i].data = p;
        p->open++;
    }
    p->connect.data = p;
    if (uv_accept(server, (uv_stream_t *)&p->side[0]) < 0) {
        close_pair(p);
        return;
    }
    uv_tcp_nodelay(&p->side[0], 1);
    /* the client's bytes are read once upstream is connected */
    if (uv_tcp_connect(&p->connect, &p->side[1],
                       (const struct sockaddr *)&upstream, on_upstream) < 0)
        close_pair(p);
}

static int port_arg(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < 0 || v > 65535)
        return -1;
    *out = (int)v;
    return 0;
}

int ms_bench_relay_main(int argc, char **argv)
{
    int listen_port = 0, to_port = -1;
    for (int i = 1; i < argc; i++) {
        int *dst = strcmp(argv[i], "--listen") == 0 ? &listen_port
                   : strcmp(argv[i], "--to") == 0   ? &to_port
                                                    : NULL;
        if (!dst || i + 1 >= argc || port_arg(argv[++i], dst) < 0) {
            fprintf(stderr, "moonshard-bench relay: usage: relay --to PORT "
                    "[--listen PORT] (ports 0-65535; --to not 0)\n");
            return 2;
        }
    }
    if (to_port <= 0) {
        fprintf(stderr, "moonshard-bench relay: --to PORT is required "
                "(1-65535)\n");
        return 2;
    }
    /* a write to a connection its peer has reset is an error of that
     * pair (UV_EPIPE, both sides closed), not the end of the relay: with
     * SIGPIPE's default action (a relay started from a shell) it would be */
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    uv_tcp_t server;
    struct sockaddr_in at;
    uv_ip4_addr("127.0.0.1", to_port, &upstream);
    uv_ip4_addr("127.0.0.1", listen_port, &at);
    uv_tcp_init(loop, &server);
    int rc = uv_tcp_bind(&server, (const struct sockaddr *)&at, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&server, 511, on_connection);
    if (rc < 0) {
        fprintf(stderr, "moonshard-bench relay: cannot listen on "
                "127.0.0.1:%d: %s\n", listen_port, uv_strerror(rc));
        return 1;
    }
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &len);
    printf("%d\n", ntohs(((struct sockaddr_in *)&bound)->sin_port));
    fflush(stdout);
    return uv_run(loop, UV_RUN_DEFAULT) == 0 ? 0 : 1;
}
