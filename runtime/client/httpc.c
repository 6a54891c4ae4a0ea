/*
 * httpc.c -- the small blocking HTTP/1.1 client (see httpc.h): blocking
 * sockets, SO_SNDTIMEO for connect and send, poll() against one deadline
 * for the whole response, http-parser for the response.
 */
#include "httpc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* ---- the response parser ----------------------------------------------- */

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct ms_httpc_parser *ps = p->data;
    if (ps->body_max == 0)
        return 0;
    if (len > ps->body_max - ps->len) {
        ps->too_big = 1;
        return -1;
    }
    if (ps->len + len + 1 > ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 4096;
        while (cap < ps->len + len + 1)
            cap *= 2;
        if (cap > ps->body_max + 1)
            cap = ps->body_max + 1;
        char *b = realloc(ps->body, cap);
        if (!b)
            return -1; /* said as out of memory: too_big is not set */
        ps->body = b;
        ps->cap = cap;
    }
    memcpy(ps->body + ps->len, at, len);
    ps->len += len;
    ps->body[ps->len] = '\0';
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct ms_httpc_parser *ps = p->data;
    ps->complete = 1;
    ps->status = (int)p->status_code;
    ps->keep_alive = http_should_keep_alive(p);
    /* stop right after this response: what follows is the next one's */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void ms_httpc_parser_init(struct ms_httpc_parser *ps, size_t body_max)
{
    memset(ps, 0, sizeof *ps);
    ps->body_max = body_max;
    http_parser_init(&ps->p, HTTP_RESPONSE);
    ps->p.data = ps;
}

int ms_httpc_parser_feed(struct ms_httpc_parser *ps, const char *buf,
                         size_t len, size_t *used)
{
    *used = http_parser_execute(&ps->p, &settings, buf, len);
    if (ps->complete) {
        http_parser_pause(&ps->p, 0);
        return 1;
    }
    if (ps->too_big)
        return MS_HTTPC_ETOOBIG;
    if (HTTP_PARSER_ERRNO(&ps->p) == HPE_CB_body)
        return MS_HTTPC_ENOMEM;
    if (HTTP_PARSER_ERRNO(&ps->p) != HPE_OK)
        return MS_HTTPC_EPROTO;
    return 0;
}

void ms_httpc_parser_next(struct ms_httpc_parser *ps)
{
    http_parser_init(&ps->p, HTTP_RESPONSE);
    ps->p.data = ps;
    ps->len = 0;
    if (ps->body)
        ps->body[0] = '\0';
    ps->status = ps->complete = ps->too_big = ps->keep_alive = 0;
}

const char *ms_httpc_parser_error(const struct ms_httpc_parser *ps)
{
    return http_errno_description(HTTP_PARSER_ERRNO(&ps->p));
}

void ms_httpc_parser_free(struct ms_httpc_parser *ps)
{
    free(ps->body);
    ps->body = NULL;
    ps->len = ps->cap = 0;
}

/* ---- the blocking client ----------------------------------------------- */

/* Splits "host:port" or "[v6]:port" into its parts. Returns 0 or -1. */
static int split_node(const char *node, char *host, size_t hostlen,
                      char *port, size_t portlen)
{
    const char *h = node, *p, *end;

    if (node[0] == '[') {
        h = node + 1;
        end = strchr(h, ']');
        if (end == NULL || end[1] != ':')
            return -1;
        p = end + 2;
    } else {
        end = strrchr(node, ':');
        if (end == NULL)
            return -1;
        p = end + 1;
    }
    if (end == h || (size_t)(end - h) >= hostlen || *p == '\0' ||
        strlen(p) >= portlen || strspn(p, "0123456789") != strlen(p))
        return -1;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = '\0';
    strcpy(port, p);
    return 0;
}

static struct timeval to_timeval(double s)
{
    struct timeval tv;
    if (s < 0.001)
        s = 0.001; /* 0 would mean "no timeout" */
    tv.tv_sec = (time_t)s;
    tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
    return tv;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The TLS handshake with the node on c->fd (https://), verifying its
 * certificate against $MOONSHARD_CA (else the system's CAs) and `host`.
 * Returns 0, or MS_HTTPC_ECONNECT with a reason in err (c closed). */
static int tls_open(struct ms_httpc *c, const char *host, double timeout_s,
                    char *err, size_t errlen)
{
    const char *ca = getenv("MOONSHARD_CA");
    struct timeval tv = to_timeval(timeout_s);
    char why[256] = "";
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;
    int ok = ctx != NULL;

    ERR_clear_error();
    if (ok) {
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        ok = (ca && ca[0] ? SSL_CTX_load_verify_locations(ctx, ca, NULL)
                          : SSL_CTX_set_default_verify_paths(ctx)) == 1;
        if (!ok)
            snprintf(why, sizeof why, "cannot read the CA file %s",
                     ca && ca[0] ? ca : "(system)");
    }
    /* a gateway with a client CA (gateway_tls.ca) answers only clients
     * with a certificate it signed: $MOONSHARD_CERT (PEM, a chain
     * allowed) and its key $MOONSHARD_KEY (else in the same file) */
    const char *cert = getenv("MOONSHARD_CERT");
    const char *key = getenv("MOONSHARD_KEY");
    if (ok && cert && cert[0]) {
        if (!key || !key[0])
            key = cert;
        ok = SSL_CTX_use_certificate_chain_file(ctx, cert) == 1 &&
             SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1 &&
             SSL_CTX_check_private_key(ctx) == 1;
        if (!ok)
            snprintf(why, sizeof why, "cannot use the client certificate "
                     "%s with the key %s ($MOONSHARD_CERT, $MOONSHARD_KEY)",
                     cert, key);
    }
    if (ok && (ssl = SSL_new(ctx)) != NULL) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        SSL_set_tlsext_host_name(ssl, host);
        if (X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1) {
            ERR_clear_error();
            SSL_set1_host(ssl, host);
        }
        SSL_set_fd(ssl, c->fd);
        /* the handshake's reads are bounded like the connect */
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ok = SSL_connect(ssl) == 1;
        if (!ok) {
            long v = SSL_get_verify_result(ssl);
            unsigned long e = ERR_peek_error();
            snprintf(why, sizeof why, "%s",
                     v != X509_V_OK ? X509_verify_cert_error_string(v)
                     : e ? ERR_reason_error_string(e)
                         : "the node closed the connection (no TLS?)");
        }
    } else if (ok) {
        ok = 0;
        snprintf(why, sizeof why, "out of memory");
    }
    ERR_clear_error();
    c->ssl = ssl;
    c->ctx = ctx;
    if (!ok) {
        snprintf(err, errlen, "TLS with %s failed: %s", c->node,
                 why[0] ? why : "out of memory");
        ms_httpc_close(c);
        return MS_HTTPC_ECONNECT;
    }
    return 0;
}

int ms_httpc_open(struct ms_httpc *c, const char *node,
                  double connect_timeout_s, char *err, size_t errlen)
{
    struct addrinfo hints, *res, *ai;
    struct timeval tv = to_timeval(connect_timeout_s);
    char host[256], port[16];
    int fd = -1, rc, e = ECONNREFUSED, one = 1, tls = 0;

    c->fd = -1;
    c->ssl = c->ctx = NULL;
    if (strncmp(node, "https://", 8) == 0) {
        node += 8;
        tls = 1;
    } else if (strncmp(node, "http://", 7) == 0) {
        node += 7;
    }
    c->send_timeout_s = connect_timeout_s;
    snprintf(c->node, sizeof c->node, "%s", node);
    if (strlen(node) >= sizeof c->node ||
        split_node(node, host, sizeof host, port, sizeof port) != 0) {
        snprintf(err, errlen, "bad node address '%s' (want HOST:PORT)",
                 node);
        return MS_HTTPC_EADDR;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", node,
                 gai_strerror(rc));
        return MS_HTTPC_ECONNECT;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        /* On Linux SO_SNDTIMEO also bounds connect(). */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        e = errno == EINPROGRESS ? ETIMEDOUT : errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", node, strerror(e));
        return MS_HTTPC_ECONNECT;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    return tls ? tls_open(c, host, connect_timeout_s, err, errlen) : 0;
}

int ms_httpc_usable(const struct ms_httpc *c)
{
    return c->fd >= 0;
}

void ms_httpc_close(struct ms_httpc *c)
{
    SSL_free(c->ssl);
    SSL_CTX_free(c->ctx);
    c->ssl = c->ctx = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static int send_all(struct ms_httpc *c, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k;
        if (c->ssl) {
            errno = 0;
            int w = SSL_write(c->ssl, p, n > (1u << 30) ? (1 << 30)
                                                        : (int)n);
            ERR_clear_error();
            if (w <= 0) {
                errno = errno ? errno : EPIPE;
                return -1;
            }
            k = w;
        } else {
            k = send(c->fd, p, n, MSG_NOSIGNAL);
        }
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads the response into ps until it is complete, the deadline passes or
 * the stream ends. send_errno: why the request could not be sent all. */
static int read_response(struct ms_httpc *c, struct ms_httpc_parser *ps,
                         double timeout_s, int send_errno, char *err,
                         size_t errlen)
{
    char buf[16384];
    double deadline = mono_s() + timeout_s;
    for (;;) {
        double left = deadline - mono_s();
        struct pollfd pfd = {c->fd, POLLIN, 0};
        /* TLS may hold decrypted bytes the socket no longer shows */
        int pr = c->ssl && SSL_pending(c->ssl) > 0 ? 1
                 : left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0) {
            snprintf(err, errlen, "no response from %s within %g s",
                     c->node, timeout_s);
            return MS_HTTPC_ETIMEOUT;
        }
        ssize_t n;
        if (pr < 0) {
            n = -1;
        } else if (c->ssl) {
            /* a record may come in pieces: bounded by what is left */
            struct timeval tv = to_timeval(left);
            setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            errno = 0;
            int r = SSL_read(c->ssl, buf, (int)sizeof buf);
            int e = r > 0 ? 0 : SSL_get_error(c->ssl, r);
            ERR_clear_error();
            n = r > 0 ? r : e == SSL_ERROR_ZERO_RETURN ? 0
                : e == SSL_ERROR_SYSCALL && errno == 0 ? 0 : -1;
            if (n < 0 && !errno)
                errno = EPROTO;
        } else {
            n = recv(c->fd, buf, sizeof buf, 0);
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "reading from %s: %s", c->node,
                     strerror(send_errno ? send_errno : errno));
            return MS_HTTPC_EPROTO;
        }
        size_t used;
        int rc = ms_httpc_parser_feed(ps, buf, (size_t)n, &used);
        if (rc == 1)
            return 0; /* bytes after the response: none expected */
        if (rc == MS_HTTPC_ETOOBIG) {
            snprintf(err, errlen, "response from %s is larger than %zu "
                     "bytes", c->node, ps->body_max);
            return rc;
        }
        if (rc == MS_HTTPC_ENOMEM) {
            snprintf(err, errlen, "out of memory");
            return rc;
        }
        if (rc < 0 && n > 0) {
            snprintf(err, errlen, "bad response from %s: %s", c->node,
                     ms_httpc_parser_error(ps));
            return rc;
        }
        if (n == 0) { /* the stream ended before the response did */
            if (send_errno) {
                snprintf(err, errlen, "sending to %s: %s", c->node,
                         strerror(send_errno));
                return MS_HTTPC_ESEND;
            }
            snprintf(err, errlen, "%s closed the connection before the "
                     "response ended", c->node);
            return MS_HTTPC_EPROTO;
        }
    }
}

int ms_httpc_request(struct ms_httpc *c, const char *method,
                     const char *path, const char *headers, const char *body,
                     size_t body_len, int keep_alive, double recv_timeout_s,
                     struct ms_httpc_resp *resp, char *err, size_t errlen)
{
    struct ms_httpc_parser ps;
    char *req = NULL, clen[96] = "";
    int send_errno = 0, rc;

    memset(resp, 0, sizeof *resp);
    if (c->fd < 0) {
        snprintf(err, errlen, "the connection to %s is closed", c->node);
        return MS_HTTPC_ECONNECT;
    }
    if (body)
        snprintf(clen, sizeof clen, "Content-Type: application/json\r\n"
                 "Content-Length: %zu\r\n", body_len);
    int n = snprintf(NULL, 0, "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n",
                     method, path, c->node, headers ? headers : "", clen,
                     keep_alive ? "" : "Connection: close\r\n");
    /* head and body in one buffer: one send for a small request */
    if (n < 0 || !(req = malloc((size_t)n + 1 + body_len))) {
        snprintf(err, errlen, "out of memory");
        ms_httpc_close(c);
        return MS_HTTPC_ENOMEM;
    }
    snprintf(req, (size_t)n + 1, "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n",
             method, path, c->node, headers ? headers : "", clen,
             keep_alive ? "" : "Connection: close\r\n");
    if (body_len > 0)
        memcpy(req + n, body, body_len);
    struct timeval tv = to_timeval(c->send_timeout_s);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    /* A node that refuses the request (413) may close before reading it
     * all; its answer can still be waiting, so read even after a failed
     * send. */
    if (send_all(c, req, (size_t)n + body_len) != 0)
        send_errno = errno;
    free(req);

    ms_httpc_parser_init(&ps, MS_HTTPC_BODY_MAX);
    rc = read_response(c, &ps, recv_timeout_s, send_errno, err, errlen);
    if (rc < 0) {
        ms_httpc_parser_free(&ps);
        ms_httpc_close(c);
        return rc;
    }
    resp->status = ps.status;
    resp->body = ps.body ? ps.body : calloc(1, 1);
    resp->len = ps.len;
    if (!resp->body) {
        snprintf(err, errlen, "out of memory");
        ms_httpc_close(c);
        return MS_HTTPC_ENOMEM;
    }
    if (!keep_alive || !ps.keep_alive || send_errno)
        ms_httpc_close(c);
    return 0;
}

int ms_httpc_fetch(const char *node, const char *method, const char *path,
                   const char *headers, const char *body, size_t body_len,
                   double connect_timeout_s, double recv_timeout_s,
                   struct ms_httpc_resp *resp, char *err, size_t errlen)
{
    struct ms_httpc c;
    memset(resp, 0, sizeof *resp);
    int rc = ms_httpc_open(&c, node, connect_timeout_s, err, errlen);
    if (rc < 0)
        return rc;
    rc = ms_httpc_request(&c, method, path, headers, body, body_len, 0,
                          recv_timeout_s, resp, err, errlen);
    ms_httpc_close(&c);
    return rc;
}
