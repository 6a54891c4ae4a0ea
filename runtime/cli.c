/*
 * cli.c -- `moonshard tell|ask|stop|status`: a small blocking HTTP/1.1
 * client of a node's gateway. One request per connection
 * (`Connection: close`); the response is parsed with http-parser.
 */
#include "cli.h"

#include <errno.h>
#include <http_parser.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "lua/bridge.h"
#include "moonshard.h"

#define DEFAULT_NODE "127.0.0.1:7201"
#define DEFAULT_TIMEOUT_S 5.0       /* the gateway's default ask timeout */
#define MAX_TIMEOUT_S 300.0         /* the gateway's upper bound */
#define GRACE_S 5.0                 /* receive timeout = ask timeout + this */
#define SEND_TIMEOUT_S 10           /* connect and send */
#define BODY_MAX (64 * 1024 * 1024) /* a response body we are willing to hold */

static const char *const usages[] = {
    "tell [--node HOST:PORT] TYPE ID JSON",
    "ask [--node HOST:PORT] [--timeout SECONDS] TYPE ID JSON",
    "stop [--node HOST:PORT] TYPE ID",
    "status [--node HOST:PORT] [--json]",
    "members [--node HOST:PORT]",
    "leave [--node HOST:PORT] [--token TOKEN]",
    "down [--node HOST:PORT] [--token TOKEN] [--force] ADDRESS",
};

/* What the parser collected of the response. */
struct resp {
    char *body;
    size_t len, cap;
    int done;
    int too_big;
};

static int usage(FILE *f, const char *cmd, int code)
{
    size_t i, n = sizeof usages / sizeof usages[0];
    int shown = 0;

    for (i = 0; i < n; i++) {
        size_t k = strcspn(usages[i], " ");

        if (cmd != NULL && (strlen(cmd) != k || strncmp(usages[i], cmd, k)))
            continue;
        fprintf(f, "%s moonshard %s\n", shown ? "      " : "usage:",
                usages[i]);
        shown = 1;
    }
    if (!shown)
        return usage(f, NULL, code);
    if (cmd == NULL)
        fprintf(f, "The node defaults to $MOONSHARD_NODE, else %s.\n",
                DEFAULT_NODE);
    return code;
}

/* Percent-encodes every byte of `s` but the unreserved ones (RFC 3986).
 * Returns a new string (caller frees) or NULL when out of memory. */
static char *pct_encode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s), i, o = 0;
    char *out = malloc(3 * n + 1);

    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
            ch == '_' || ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
    return out;
}

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

/* Connects to host:port. Returns the socket, or -1 with a reason in
 * `why` (either an errno text or a resolver text). */
static int dial(const char *host, const char *port, char *why, size_t wlen)
{
    struct addrinfo hints, *res, *ai;
    struct timeval tv = {SEND_TIMEOUT_S, 0};
    int fd = -1, rc, e = ECONNREFUSED;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(why, wlen, "%s", gai_strerror(rc));
        return -1;
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
    if (fd < 0)
        snprintf(why, wlen, "%s", strerror(e));
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

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

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct resp *r = p->data;

    if (len > BODY_MAX - r->len) {
        r->too_big = 1;
        return -1;
    }
    if (len > r->cap - r->len) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        char *b;

        if (cap < r->len + len)
            cap = r->len + len;
        if (cap > BODY_MAX)
            cap = BODY_MAX;
        b = realloc(r->body, cap);
        if (b == NULL) {
            r->too_big = 1;
            return -1;
        }
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, at, len);
    r->len += len;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct resp *r = p->data;

    r->done = 1;
    return 0;
}

/*
 * Sends `req` to `node` and collects the response: its status in *status
 * and its body in *body (NUL-terminated, caller frees) and *blen. Returns
 * 0, or 2 (said on stderr) when the node cannot be reached or gives no
 * valid response in time.
 */
static int fetch(const char *node, const char *req, size_t reqlen,
                 double recv_timeout_s, int *status, char **body,
                 size_t *blen)
{
    http_parser_settings settings;
    http_parser parser;
    struct resp r;
    struct timeval tv;
    char host[256], port[16], why[256], buf[16384];
    int fd, code = 2, send_errno = 0;

    if (split_node(node, host, sizeof host, port, sizeof port) != 0) {
        fprintf(stderr, "error: bad node address '%s' (want HOST:PORT)\n",
                node);
        return 2;
    }
    fd = dial(host, port, why, sizeof why);
    if (fd < 0) {
        fprintf(stderr, "error: cannot connect to %s: %s\n", node, why);
        return 2;
    }
    tv.tv_sec = (time_t)recv_timeout_s;
    tv.tv_usec = (suseconds_t)((recv_timeout_s - (double)tv.tv_sec) * 1e6);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    /* A node that refuses the request (413) may close before reading it
     * all; its answer can still be waiting, so read even after a failed
     * send. */
    if (send_all(fd, req, reqlen) != 0)
        send_errno = errno;

    memset(&r, 0, sizeof r);
    http_parser_settings_init(&settings);
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;
    http_parser_init(&parser, HTTP_RESPONSE);
    parser.data = &r;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                fprintf(stderr, "error: no response from %s within %g s\n",
                        node, recv_timeout_s);
            else
                fprintf(stderr, "error: reading from %s: %s\n", node,
                        strerror(send_errno ? send_errno : errno));
            goto out;
        }
        /* n == 0 tells the parser about EOF (bodies read until close) */
        http_parser_execute(&parser, &settings, buf, (size_t)n);
        if (r.done)
            break;
        if (r.too_big) {
            fprintf(stderr, "error: response from %s is larger than %d "
                    "bytes\n", node, BODY_MAX);
            goto out;
        }
        if (HTTP_PARSER_ERRNO(&parser) != HPE_OK) {
            fprintf(stderr, "error: bad response from %s: %s\n", node,
                    http_errno_description(HTTP_PARSER_ERRNO(&parser)));
            goto out;
        }
        if (n == 0) {
            if (send_errno)
                fprintf(stderr, "error: sending to %s: %s\n", node,
                        strerror(send_errno));
            else
                fprintf(stderr, "error: %s closed the connection before "
                        "the response ended\n", node);
            goto out;
        }
    }

    if (!on_body(&parser, "", 1)) { /* room for the NUL */
        *status = (int)parser.status_code;
        *body = r.body;
        *blen = r.len - 1;
        (*body)[*blen] = '\0';
        r.body = NULL;
        code = 0;
    } else {
        fprintf(stderr, "error: out of memory\n");
    }
out:
    free(r.body);
    close(fd);
    return code;
}

/*
 * Sends `req` to `node` and prints the outcome. Returns the exit code:
 * 0 for a 2xx answer (body on stdout), 1 for another status (on stderr),
 * 2 when the node cannot be reached or gives no valid response in time.
 */
static int exchange(const char *node, const char *req, size_t reqlen,
                    double recv_timeout_s)
{
    char *body = NULL;
    size_t len = 0;
    int status = 0, code;

    code = fetch(node, req, reqlen, recv_timeout_s, &status, &body, &len);
    if (code != 0)
        return code;
    if (status >= 200 && status < 300) {
        fwrite(body, 1, len, stdout);
        fputc('\n', stdout);
        code = fflush(stdout) == 0 ? 0 : 2;
    } else {
        fprintf(stderr, "error: %d %s\n", status, body);
        code = 1;
    }
    free(body);
    return code;
}

/* GETs `path` of `node` into *body; an error status is said on stderr.
 * Returns 0, 1 (error status) or 2 as exchange() does. */
static int get(const char *node, const char *path, char **body)
{
    char *req = NULL;
    size_t len = 0;
    int status = 0;
    int n = asprintf(&req,
                     "GET %s HTTP/1.1\r\n"
                     "Host: %s\r\n"
                     "User-Agent: moonshard/" MS_VERSION "\r\n"
                     "Accept: application/json\r\n"
                     "Connection: close\r\n"
                     "\r\n",
                     path, node);
    if (n < 0) {
        fprintf(stderr, "error: out of memory\n");
        return 2;
    }
    int code = fetch(node, req, (size_t)n, DEFAULT_TIMEOUT_S + GRACE_S,
                     &status, body, &len);
    free(req);
    if (code == 0 && (status < 200 || status >= 300)) {
        fprintf(stderr, "error: %d %s\n", status, *body);
        free(*body);
        *body = NULL;
        code = 1;
    }
    return code;
}

/* `moonshard status` for people: the node's stats and its view of the
 * members, laid out by lua/moonshard/status.lua. */
static int status_text(const char *node)
{
    char *stats = NULL, *members = NULL, *arg = NULL, *out = NULL;
    char home[PATH_MAX], err[1024];
    int code = get(node, "/v1/stats", &stats);
    if (code == 0)
        code = get(node, "/v1/members", &members);
    if (code == 0 && asprintf(&arg, "%s\n%s", stats, members) < 0) {
        fprintf(stderr, "error: out of memory\n");
        arg = NULL;
        code = 2;
    }
    if (code == 0) {
        ms_home(home, sizeof home);
        if (ms_lua_run_isolated(home, "moonshard.status", "render", arg,
                                &out, err, sizeof err) < 0) {
            fprintf(stderr, "error: cannot lay out the status: %s\n", err);
            code = 2;
        } else {
            fputs(out, stdout);
            code = fflush(stdout) == 0 ? 0 : 2;
        }
    }
    free(stats);
    free(members);
    free(arg);
    free(out);
    return code;
}

/*
 * Runs `moonshard tell|ask|stop|status ...` with argv[0] the subcommand.
 * Options (--node HOST:PORT, --timeout SECONDS for ask) may come anywhere
 * before `--`. Writes the response body and a newline on stdout, errors on
 * stderr. Returns the exit code: 0 for a 2xx answer, 1 for an error status
 * (printed as `error: <status> <body>`), 2 for usage, connection, timeout
 * or protocol errors. Does not keep any pointer into argv.
 */
/* `moonshard leave` / `moonshard down [--force] ADDRESS`: POST /v1/leave
 * or /v1/down with the admin token ($MOONSHARD_ADMIN_TOKEN or --token).
 * The node refuses to down a member it sees reachable unless --force. */
static int admin(int argc, char **argv, const char *node)
{
    const char *cmd = argv[0], *token = getenv("MOONSHARD_ADMIN_TOKEN");
    const char *address = NULL;
    int down = cmd[0] == 'd', force = 0;
    if (node == NULL || node[0] == '\0')
        node = DEFAULT_NODE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--node") == 0 && i + 1 < argc)
            node = argv[++i];
        else if (strcmp(argv[i], "--token") == 0 && i + 1 < argc)
            token = argv[++i];
        else if (down && strcmp(argv[i], "--force") == 0)
            force = 1;
        else if (down && !address && argv[i][0] != '-')
            address = argv[i];
        else
            return usage(stderr, cmd, 2);
    }
    if ((down && !address) || !token || !token[0]) {
        if (!token || !token[0])
            fprintf(stderr, "error: the admin token is needed: --token or "
                    "$MOONSHARD_ADMIN_TOKEN\n");
        return usage(stderr, cmd, 2);
    }
    /* written into a JSON string as is: only bytes an address can have */
    if (down && strlen(address) > 128) {
        fprintf(stderr, "error: ADDRESS must be host:port, at most 128 "
                "bytes\n");
        return usage(stderr, cmd, 2);
    }
    for (const char *p = down ? address : ""; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\' ||
            ch == ',') {
            fprintf(stderr, "error: ADDRESS must be host:port\n");
            return usage(stderr, cmd, 2);
        }
    }
    char body[300] = "";
    if (down)
        snprintf(body, sizeof body, "{\"address\":\"%.200s\"%s}", address,
                 force ? ",\"force\":true" : "");
    char *req = NULL;
    size_t bodylen = strlen(body);
    int n = asprintf(&req,
                     "POST /v1/%s HTTP/1.1\r\n"
                     "Host: %s\r\n"
                     "User-Agent: moonshard/" MS_VERSION "\r\n"
                     "X-Moonshard-Token: %s\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n"
                     "Connection: close\r\n"
                     "\r\n"
                     "%s",
                     down ? "down" : "leave", node, token, bodylen, body);
    if (n < 0) {
        fprintf(stderr, "error: out of memory\n");
        return 2;
    }
    int code = exchange(node, req, (size_t)n, DEFAULT_TIMEOUT_S + GRACE_S);
    free(req);
    return code;
}

int ms_cli_main(int argc, char **argv)
{
    const char *cmd = argc > 0 ? argv[0] : NULL;
    const char *node = getenv("MOONSHARD_NODE");
    const char *pos[3], *action;
    double timeout_s = DEFAULT_TIMEOUT_S;
    int want, is_ask = 0, npos = 0, opts_done = 0, i, n, code;
    int is_status = cmd != NULL && strcmp(cmd, "status") == 0, json = 0;
    char *type = NULL, *id = NULL, *req = NULL, query[48] = "";
    size_t bodylen;

    if (cmd == NULL)
        return usage(stderr, NULL, 2);
    if (strcmp(cmd, "tell") == 0 || strcmp(cmd, "ask") == 0) {
        want = 3;
        is_ask = cmd[0] == 'a';
    } else if (strcmp(cmd, "stop") == 0) {
        want = 2;
    } else if (strcmp(cmd, "status") == 0 || strcmp(cmd, "members") == 0) {
        want = 0;
    } else if (strcmp(cmd, "leave") == 0 || strcmp(cmd, "down") == 0) {
        return admin(argc, argv, node);
    } else {
        return usage(stderr, NULL, 2);
    }
    if (node == NULL || node[0] == '\0')
        node = DEFAULT_NODE;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (!opts_done && a[0] == '-' && a[1] == '-') {
            if (a[2] == '\0') {
                opts_done = 1;
            } else if ((strcmp(a, "--node") == 0 ||
                        (is_ask && strcmp(a, "--timeout") == 0)) &&
                       i + 1 == argc) {
                fprintf(stderr, "error: option %s needs a value\n", a);
                return usage(stderr, cmd, 2);
            } else if (is_status && strcmp(a, "--json") == 0) {
                json = 1;
            } else if (strcmp(a, "--help") == 0) {
                return usage(stdout, cmd, 0);
            } else if (strcmp(a, "--node") == 0) {
                node = argv[++i];
            } else if (strncmp(a, "--node=", 7) == 0) {
                node = a + 7;
            } else if (is_ask && (strcmp(a, "--timeout") == 0 ||
                                  strncmp(a, "--timeout=", 10) == 0)) {
                const char *v = a[9] == '=' ? a + 10 : argv[++i];
                char *end;

                timeout_s = strtod(v, &end);
                if (end == v || *end != '\0' ||
                    !(timeout_s > 0 && timeout_s <= MAX_TIMEOUT_S)) {
                    fprintf(stderr, "error: --timeout must be a number of "
                            "seconds, > 0 and <= %g\n", MAX_TIMEOUT_S);
                    return usage(stderr, cmd, 2);
                }
            } else {
                fprintf(stderr, "error: bad option %s\n", a);
                return usage(stderr, cmd, 2);
            }
            continue;
        }
        if (npos == want)
            return usage(stderr, cmd, 2);
        pos[npos++] = a;
    }
    if (npos != want)
        return usage(stderr, cmd, 2);

    if (is_status && !json)
        return status_text(node);
    if (want == 0) {
        n = asprintf(&req,
                     "GET /v1/%s HTTP/1.1\r\n"
                     "Host: %s\r\n"
                     "User-Agent: moonshard/" MS_VERSION "\r\n"
                     "Accept: application/json\r\n"
                     "Connection: close\r\n"
                     "\r\n",
                     cmd[0] == 'm' ? "members" : "stats", node);
        if (n < 0) {
            fprintf(stderr, "error: out of memory\n");
            return 2;
        }
        code = exchange(node, req, (size_t)n, DEFAULT_TIMEOUT_S + GRACE_S);
        free(req);
        return code;
    }

    type = pct_encode(pos[0]);
    id = pct_encode(pos[1]);
    action = want == 2 ? "stop" : is_ask ? "ask" : "tell";
    if (is_ask)
        snprintf(query, sizeof query, "?timeout=%.6g", timeout_s);
    bodylen = want == 3 ? strlen(pos[2]) : 0;
    n = -1;
    if (type != NULL && id != NULL)
        n = asprintf(&req,
                     "POST /v1/entities/%s/%s/%s%s HTTP/1.1\r\n"
                     "Host: %s\r\n"
                     "User-Agent: moonshard/" MS_VERSION "\r\n"
                     "Accept: application/json\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n"
                     "Connection: close\r\n"
                     "\r\n"
                     "%s",
                     type, id, action, query, node, bodylen,
                     want == 3 ? pos[2] : "");
    free(type);
    free(id);
    if (n < 0) {
        fprintf(stderr, "error: out of memory\n");
        return 2;
    }
    code = exchange(node, req, (size_t)n,
                    (is_ask ? timeout_s : DEFAULT_TIMEOUT_S) + GRACE_S);
    free(req);
    return code;
}
