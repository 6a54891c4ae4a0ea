/* The shared HTTP client (runtime/client/httpc.h) against a scripted
 * server thread on 127.0.0.1: a response with a body, keep-alive over one
 * connection, a body read until close, a response cut short, a server
 * that never answers (the timeout), bad addresses, a refused connection;
 * and its parser alone: one byte at a time, two responses in one buffer,
 * a body over the limit, skipped bodies. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../runtime/client/httpc.h"
#include "check.h"

/* What the server does with each request of a connection. */
enum script { S_HELLO, S_KEEPALIVE, S_UNTIL_CLOSE, S_CUT, S_SILENT };

struct server {
    int lfd, port;
    enum script script;
    int accepts, requests;
    char last_req[2048];
    pthread_t tid;
};

static int write_str(int fd, const char *s)
{
    return send(fd, s, strlen(s), MSG_NOSIGNAL) == (ssize_t)strlen(s) ? 0
                                                                      : -1;
}

/* Reads one request head (and its body, by Content-Length) into buf;
 * returns its length, 0 when the client closed, -1 on error. */
static int read_request(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
        if (k <= 0)
            return k == 0 && n == 0 ? 0 : -1;
        n += (size_t)k;
        buf[n] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            const char *cl = strstr(buf, "Content-Length: ");
            size_t want = (size_t)(end + 4 - buf) +
                          (cl ? strtoul(cl + 16, NULL, 10) : 0);
            if (n >= want)
                return (int)n;
        }
        if (n + 1 >= cap)
            return -1;
    }
}

static void *serve(void *arg)
{
    struct server *s = arg;
    char buf[2048];
    for (;;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        s->accepts++;
        int n;
        while ((n = read_request(fd, buf, sizeof buf)) > 0) {
            s->requests++;
            memcpy(s->last_req, buf, (size_t)n + 1);
            if (s->script == S_HELLO)
                write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                              "Connection: close\r\n\r\nhello");
            else if (s->script == S_KEEPALIVE)
                write_str(fd, s->requests == 1
                                  ? "HTTP/1.1 200 OK\r\nContent-Length: 3"
                                    "\r\n\r\none"
                                  : "HTTP/1.1 404 Not Found\r\n"
                                    "Content-Length: 3\r\n\r\ntwo");
            else if (s->script == S_UNTIL_CLOSE)
                write_str(fd, "HTTP/1.1 202 Accepted\r\n\r\nuntil close");
            else if (s->script == S_CUT)
                write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n"
                              "\r\nabc");
            if (s->script != S_KEEPALIVE && s->script != S_SILENT)
                break;
        }
        if (s->script == S_SILENT)
            usleep(1000 * 1000); /* past the client's timeout */
        close(fd);
    }
}

static void server_start(struct server *s, enum script script)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    memset(s, 0, sizeof *s);
    s->script = script;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(s->lfd, 8) < 0 ||
        getsockname(s->lfd, (struct sockaddr *)&a, &alen) < 0) {
        perror("test_httpc: server");
        exit(1);
    }
    s->port = ntohs(a.sin_port);
    pthread_create(&s->tid, NULL, serve, s);
}

static void server_stop(struct server *s)
{
    shutdown(s->lfd, SHUT_RDWR);
    close(s->lfd);
    pthread_join(s->tid, NULL);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void node_of(const struct server *s, char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1:%d", s->port);
}

static void test_hello(void)
{
    struct server s;
    struct ms_httpc_resp r;
    char node[32], err[256];
    server_start(&s, S_HELLO);
    node_of(&s, node, sizeof node);
    int rc = ms_httpc_fetch(node, "POST", "/v1/x", "X-A: b\r\n", "{}", 2, 2,
                            2, &r, err, sizeof err);
    CHECK(rc == 0);
    CHECK(r.status == 200);
    CHECK(r.len == 5 && r.body && strcmp(r.body, "hello") == 0);
    CHECK(strncmp(s.last_req, "POST /v1/x HTTP/1.1\r\n", 21) == 0);
    CHECK(strstr(s.last_req, "\r\nHost: 127.0.0.1:") != NULL);
    CHECK(strstr(s.last_req, "\r\nX-A: b\r\n") != NULL);
    CHECK(strstr(s.last_req, "\r\nContent-Length: 2\r\n") != NULL);
    CHECK(strstr(s.last_req, "\r\nConnection: close\r\n") != NULL);
    CHECK(strstr(s.last_req, "\r\n\r\n{}") != NULL);
    free(r.body);
    /* no body: no Content-Length, an empty body back is "" */
    rc = ms_httpc_fetch(node, "GET", "/v1/y", NULL, NULL, 0, 2, 2, &r, err,
                        sizeof err);
    CHECK(rc == 0 && r.status == 200);
    CHECK(strstr(s.last_req, "Content-Length") == NULL);
    free(r.body);
    server_stop(&s);
}

static void test_keepalive(void)
{
    struct server s;
    struct ms_httpc c;
    struct ms_httpc_resp r;
    char node[32], err[256];
    server_start(&s, S_KEEPALIVE);
    node_of(&s, node, sizeof node);
    CHECK(ms_httpc_open(&c, node, 2, err, sizeof err) == 0);
    int rc = ms_httpc_request(&c, "GET", "/a", NULL, NULL, 0, 1, 2, &r, err,
                              sizeof err);
    CHECK(rc == 0 && r.status == 200 && strcmp(r.body, "one") == 0);
    CHECK(strstr(s.last_req, "Connection:") == NULL);
    CHECK(ms_httpc_usable(&c));
    free(r.body);
    rc = ms_httpc_request(&c, "GET", "/b", NULL, NULL, 0, 0, 2, &r, err,
                          sizeof err);
    CHECK(rc == 0 && r.status == 404 && strcmp(r.body, "two") == 0);
    CHECK(!ms_httpc_usable(&c)); /* this one said Connection: close */
    free(r.body);
    CHECK(s.accepts == 1 && s.requests == 2);
    rc = ms_httpc_request(&c, "GET", "/c", NULL, NULL, 0, 0, 2, &r, err,
                          sizeof err);
    CHECK(rc == MS_HTTPC_ECONNECT);
    ms_httpc_close(&c);
    server_stop(&s);
}

static void test_until_close_and_cut(void)
{
    struct server s;
    struct ms_httpc_resp r;
    char node[32], err[256];
    server_start(&s, S_UNTIL_CLOSE);
    node_of(&s, node, sizeof node);
    int rc = ms_httpc_fetch(node, "GET", "/", NULL, NULL, 0, 2, 2, &r, err,
                            sizeof err);
    CHECK(rc == 0 && r.status == 202 && strcmp(r.body, "until close") == 0);
    free(r.body);
    server_stop(&s);

    server_start(&s, S_CUT);
    node_of(&s, node, sizeof node);
    rc = ms_httpc_fetch(node, "GET", "/", NULL, NULL, 0, 2, 2, &r, err,
                        sizeof err);
    CHECK(rc == MS_HTTPC_EPROTO);
    CHECK(strstr(err, "closed the connection before the response ended"));
    CHECK(r.body == NULL);
    server_stop(&s);
}

static void test_timeout(void)
{
    struct server s;
    struct ms_httpc_resp r;
    char node[32], err[256];
    server_start(&s, S_SILENT);
    node_of(&s, node, sizeof node);
    double t0 = mono();
    int rc = ms_httpc_fetch(node, "GET", "/", NULL, NULL, 0, 2, 0.2, &r,
                            err, sizeof err);
    double took = mono() - t0;
    CHECK(rc == MS_HTTPC_ETIMEOUT);
    CHECK(strstr(err, "no response from") != NULL);
    CHECK(took >= 0.19); /* waited the timeout, not less */
    server_stop(&s);
}

static void test_addresses(void)
{
    struct ms_httpc_resp r;
    char err[256];
    const char *bad[] = {"nohost", "127.0.0.1:", ":80", "[::1]80",
                         "h:8x", NULL};
    for (int i = 0; bad[i]; i++)
        CHECK(ms_httpc_fetch(bad[i], "GET", "/", NULL, NULL, 0, 1, 1, &r,
                             err, sizeof err) == MS_HTTPC_EADDR);
    /* a port nobody listens on: bind one, close it, connect there */
    struct server s;
    server_start(&s, S_HELLO);
    char node[32];
    node_of(&s, node, sizeof node);
    server_stop(&s);
    CHECK(ms_httpc_fetch(node, "GET", "/", NULL, NULL, 0, 1, 1, &r, err,
                         sizeof err) == MS_HTTPC_ECONNECT);
    CHECK(strstr(err, "cannot connect to") != NULL);
}

static void test_parser(void)
{
    static const char two[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
                              "ab"
                              "HTTP/1.1 503 No\r\nContent-Length: 1\r\n\r\n"
                              "c";
    struct ms_httpc_parser ps;
    size_t used, off = 0;
    int rc = 0;

    /* one byte at a time */
    ms_httpc_parser_init(&ps, 100);
    while (off < sizeof two - 1 && rc == 0) {
        rc = ms_httpc_parser_feed(&ps, two + off, 1, &used);
        off += used;
    }
    CHECK(rc == 1 && ps.status == 200 && ps.len == 2);
    CHECK(strcmp(ps.body, "ab") == 0 && ps.keep_alive);
    /* the rest in one piece: the next response */
    ms_httpc_parser_next(&ps);
    rc = ms_httpc_parser_feed(&ps, two + off, sizeof two - 1 - off, &used);
    CHECK(rc == 1 && ps.status == 503 && strcmp(ps.body, "c") == 0);
    CHECK(used == sizeof two - 1 - off);
    ms_httpc_parser_free(&ps);

    /* both in one buffer: it stops after the first */
    ms_httpc_parser_init(&ps, 100);
    rc = ms_httpc_parser_feed(&ps, two, sizeof two - 1, &used);
    CHECK(rc == 1 && ps.status == 200 && used == 40);
    ms_httpc_parser_free(&ps);

    /* over the limit */
    ms_httpc_parser_init(&ps, 1);
    rc = ms_httpc_parser_feed(&ps, two, 40, &used);
    CHECK(rc == MS_HTTPC_ETOOBIG);
    ms_httpc_parser_free(&ps);

    /* bodies skipped (body_max 0): status only, nothing held */
    ms_httpc_parser_init(&ps, 0);
    rc = ms_httpc_parser_feed(&ps, two, sizeof two - 1, &used);
    CHECK(rc == 1 && ps.status == 200 && ps.body == NULL && ps.len == 0);
    ms_httpc_parser_free(&ps);

    /* not HTTP */
    ms_httpc_parser_init(&ps, 100);
    rc = ms_httpc_parser_feed(&ps, "SSH-2.0-x\r\n", 11, &used);
    CHECK(rc == MS_HTTPC_EPROTO);
    ms_httpc_parser_free(&ps);
}

int main(void)
{
    test_hello();
    test_keepalive();
    test_until_close_and_cut();
    test_timeout();
    test_addresses();
    test_parser();
    CHECK_DONE();
}
