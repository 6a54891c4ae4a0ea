/*
 * bench_cluster.c -- the benches that run node processes on 127.0.0.1:
 *
 * `moonshard bench cluster [--seconds S] [--ids N]`: asks and tells across
 * two node processes, and in the same run the same counts for
 * redis-benchmark INCR against a redis-server started on a free loopback
 * port.
 *
 * `moonshard bench handoff` is in bench_handoff.c; the helpers both use
 * are declared in bench_cluster.h and defined here.
 *
 * The nodes (`moonshard node CONFIG --name nK`) run as child processes of
 * this one. The client talks HTTP/1.1 keep-alive to n1's gateway (libuv
 * TCP, responses parsed with http-parser), one connection per caller and
 * one request in flight per connection. In `bench cluster` every entity
 * it talks to is owned by n2, so every measured request is a remote route
 * n1 -> n2. Children are stopped (SIGTERM, then SIGKILL) and temporary
 * files removed on every way out, Ctrl-C included.
 */
#include "bench.h"
#include "bench_cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#define MAX_CALLERS 50
#define OWNER_WAIT_S 30    /* finding ids owned by n2 */
#define PHASE_GRACE_S 15   /* a phase may overrun its length by this much */
#define HTTP_TIMEOUT_S 10  /* setup requests */
#define STOP_WAIT_MS 3000  /* SIGTERM -> SIGKILL */
#define SYNC_BODY_MAX (1024 * 1024)

static const char TELL_BODY[] = "{\"type\":\"incr\"}";

/* ---- children and temporary files, cleaned up on every way out ------- */

enum { F_CONFIG, F_LOG1, F_LOG2, F_LOG3, F_REDIS_LOG, F_COUNT };

static volatile pid_t g_pid[CH_COUNT];
static char g_dir[64];
static char g_file[F_COUNT][128];

static void remove_files(void)
{
    for (int i = 0; i < F_COUNT; i++)
        if (g_file[i][0])
            unlink(g_file[i]);
    if (g_dir[0])
        rmdir(g_dir);
}

/* Ctrl-C or kill: only async-signal-safe calls here. */
static void on_fatal_signal(int sig)
{
    for (int i = 0; i < CH_COUNT; i++)
        if (g_pid[i] > 0)
            kill(g_pid[i], SIGKILL);
    remove_files();
    _exit(128 + sig);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Stops the given children: SIGTERM to all, then SIGKILL to whichever is
 * still there after STOP_WAIT_MS; reaps them all. */
static void stop_children(const int *which, int n)
{
    for (int i = 0; i < n; i++)
        if (g_pid[which[i]] > 0)
            kill(g_pid[which[i]], SIGTERM);
    for (int waited = 0;; waited += 20) {
        int alive = 0;
        for (int i = 0; i < n; i++) {
            pid_t p = g_pid[which[i]];
            if (p <= 0)
                continue;
            pid_t r = waitpid(p, NULL, WNOHANG);
            if (r == p || (r < 0 && errno == ECHILD))
                g_pid[which[i]] = 0;
            else
                alive++;
        }
        if (!alive)
            return;
        if (waited >= STOP_WAIT_MS)
            break;
        usleep(20000);
    }
    for (int i = 0; i < n; i++) {
        pid_t p = g_pid[which[i]];
        if (p <= 0)
            continue;
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
        g_pid[which[i]] = 0;
    }
}

void ms__bench_cleanup_all(void)
{
    int all[CH_COUNT];
    for (int i = 0; i < CH_COUNT; i++)
        all[i] = i;
    stop_children(all, CH_COUNT);
    remove_files();
}

/* Whether a child has exited (and reaps it). */
int ms__bench_child_gone(int slot)
{
    pid_t p = g_pid[slot];
    if (p <= 0)
        return 1;
    if (waitpid(p, NULL, WNOHANG) == p) {
        g_pid[slot] = 0;
        return 1;
    }
    return 0;
}

/* Prints the last lines of a log file to stderr. */
static void show_log_tail(const char *what, const char *path)
{
    char buf[2048];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1
                                              : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    char *start = buf;
    if (from > 0 && strchr(buf, '\n'))
        start = strchr(buf, '\n') + 1;
    fprintf(stderr, "---- last lines of %s's log ----\n%s", what, start);
    if (buf[n - 1] != '\n')
        fputc('\n', stderr);
}

/*
 * Starts argv[0] (looked up in PATH when `search`) with stdin from
 * /dev/null, stdout to `out_fd` (or the file `log`) and stderr to the
 * file `log` (or /dev/null). Returns the pid, or -1 with errno set.
 */
static pid_t spawn(char *const argv[], int search, int out_fd,
                   const char *log)
{
    posix_spawn_file_actions_t fa;
    extern char **environ;
    pid_t pid;
    const char *err = log ? log : "/dev/null";

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out_fd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
        posix_spawn_file_actions_addclose(&fa, out_fd);
    } else {
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    }
    int rc = search ? posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ)
                    : posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

/* Whether an executable `name` is on PATH. */
static int on_path(const char *name)
{
    const char *path = getenv("PATH");
    char buf[PATH_MAX];
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len > 0 && len < sizeof buf - strlen(name) - 2) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, name);
            if (access(buf, X_OK) == 0)
                return 1;
        }
        path += len;
        if (*path == ':')
            path++;
    }
    return 0;
}

/* ---- sockets ----------------------------------------------------------- */

double ms__bench_now_s(void)
{
    return (double)uv_hrtime() / 1e9;
}

/* Picks n distinct free TCP ports on 127.0.0.1 (all bound at once, then
 * released). Returns 0 or -1. */
static int free_ports(int *ports, int n)
{
    int fds[8], rc = 0;
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a;
        socklen_t alen = sizeof a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof a) < 0 ||
            getsockname(fds[i], (struct sockaddr *)&a, &alen) < 0) {
            rc = -1;
            ports[i] = 0;
        } else {
            ports[i] = ntohs(a.sin_port);
        }
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

/* A blocking TCP connection to 127.0.0.1:port with send and receive
 * timeouts, or -1. */
static int connect_local(int port, int timeout_s)
{
    struct sockaddr_in a;
    struct timeval tv = {timeout_s, 0};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* ---- setup requests: blocking, one per connection --------------------- */

struct sync_resp {
    char *body;
    size_t len, cap;
    int done;
};

static int sync_on_body(http_parser *p, const char *at, size_t len)
{
    struct sync_resp *r = p->data;
    if (r->len + len + 1 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        while (cap < r->len + len + 1)
            cap *= 2;
        if (cap > SYNC_BODY_MAX)
            return -1;
        char *b = realloc(r->body, cap);
        if (!b)
            return -1;
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, at, len);
    r->len += len;
    r->body[r->len] = 0;
    return 0;
}

static int sync_on_complete(http_parser *p)
{
    ((struct sync_resp *)p->data)->done = 1;
    return 0;
}

/*
 * Sends one request to the gateway on 127.0.0.1:port, with the admin
 * token `token` in X-Moonshard-Token unless it is NULL, and waits for the
 * response. Returns the HTTP status (the body, NUL-terminated, in *out,
 * to free) or -1.
 */
int ms__bench_http_call_as(int port, const char *token, const char *method,
                           const char *path, const char *body, char **out)
{
    char req[1024], buf[4096];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Connection: close\r\nContent-Type: application/json\r\n"
                     "%s%s%sContent-Length: %zu\r\n\r\n%s",
                     method, path, port, token ? "X-Moonshard-Token: " : "",
                     token ? token : "", token ? "\r\n" : "", blen,
                     body ? body : "");
    *out = NULL;
    if (n < 0 || (size_t)n >= sizeof req)
        return -1;
    int fd = connect_local(port, HTTP_TIMEOUT_S);
    if (fd < 0)
        return -1;
    if (send_all(fd, req, (size_t)n) < 0) {
        close(fd);
        return -1;
    }
    http_parser p;
    http_parser_settings s;
    struct sync_resp r = {NULL, 0, 0, 0};
    http_parser_init(&p, HTTP_RESPONSE);
    http_parser_settings_init(&s);
    s.on_body = sync_on_body;
    s.on_message_complete = sync_on_complete;
    p.data = &r;
    while (!r.done) {
        ssize_t got = recv(fd, buf, sizeof buf, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            break;
        size_t used = http_parser_execute(&p, &s, buf, (size_t)got);
        if (HTTP_PARSER_ERRNO(&p) != HPE_OK || used != (size_t)got ||
            got == 0)
            break;
    }
    close(fd);
    if (!r.done) {
        free(r.body);
        return -1;
    }
    *out = r.body ? r.body : strdup("");
    return (int)p.status_code;
}

/* ms__bench_http_call_as() without a token. */
int ms__bench_http_call(int port, const char *method, const char *path,
                        const char *body, char **out)
{
    return ms__bench_http_call_as(port, NULL, method, path, body, out);
}

/* Counts occurrences of `needle` in `s`. */
int ms__bench_count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* The unsigned number after `"key":` in a JSON text, or -1. */
long long ms__bench_json_num(const char *s, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = s ? strstr(s, pat) : NULL;
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* ---- the measured client: libuv, one request in flight per caller ---- */

struct caller {
    uv_tcp_t tcp;
    uv_connect_t conn;
    uv_write_t wreq;
    http_parser parser;
    struct phase *ph;
    uint64_t sent;
    int complete, running;
    char rbuf[4096];
};

http_parser_settings ms__bench_async_settings;

static void phase_fail(struct phase *ph, const char *fmt, const char *why)
{
    if (!ph->error) {
        ph->error = 1;
        snprintf(ph->errmsg, sizeof ph->errmsg, fmt, why);
    }
}

static void caller_stop(struct caller *c)
{
    if (c->running) {
        c->running = 0;
        c->ph->nrunning--;
        if (c->ph->nrunning == 0)
            c->ph->t_end = uv_hrtime();
    }
}

static void on_write(uv_write_t *w, int status)
{
    struct caller *c = w->data;
    if (status < 0) {
        phase_fail(c->ph, "write to n1 failed: %s", uv_strerror(status));
        caller_stop(c);
    }
}

static void caller_send(struct caller *c)
{
    struct phase *ph = c->ph;
    if (ph->opt.limit && ph->next >= ph->opt.limit) {
        caller_stop(c);
        return;
    }
    int k = (int)(ph->next++ % ph->reqs->n);
    uv_buf_t b = uv_buf_init(ph->reqs->buf[k], (unsigned)ph->reqs->len[k]);
    c->sent = uv_hrtime();
    int rc = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (rc == (int)b.len)
        return;
    if (rc == UV_EAGAIN)
        rc = 0;
    if (rc >= 0) {
        b.base += rc;
        b.len -= (unsigned)rc;
        c->wreq.data = c;
        rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    }
    if (rc < 0) {
        phase_fail(ph, "write to n1 failed: %s", uv_strerror(rc));
        caller_stop(c);
    }
}

int ms__bench_async_on_complete(http_parser *p)
{
    struct caller *c = p->data;
    c->complete = (int)p->status_code;
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct caller *c = h->data;
    (void)hint;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void push_latency(struct phase *ph, uint64_t ns)
{
    if (ph->nlat == ph->caplat) {
        size_t cap = ph->caplat ? ph->caplat * 2 : 65536;
        uint64_t *l = realloc(ph->lat, cap * sizeof *l);
        if (!l)
            return;
        ph->lat = l;
        ph->caplat = cap;
    }
    ph->lat[ph->nlat++] = ns;
}

static void push_sample(struct phase *ph, uint64_t at_ns, uint64_t lat_ns,
                        int status)
{
    if (ph->nsmp == ph->capsmp) {
        size_t cap = ph->capsmp ? ph->capsmp * 2 : 65536;
        struct sample *v = realloc(ph->smp, cap * sizeof *v);
        if (!v)
            return;
        ph->smp = v;
        ph->capsmp = cap;
    }
    uint64_t us = lat_ns / 1000;
    ph->smp[ph->nsmp++] = (struct sample){
        at_ns, us > UINT32_MAX ? UINT32_MAX : (uint32_t)us, status};
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct caller *c = s->data;
    struct phase *ph = c->ph;
    if (nread < 0) {
        if (c->running)
            phase_fail(ph, "n1 closed a connection: %s",
                       uv_strerror((int)nread));
        caller_stop(c);
        uv_read_stop(s);
        return;
    }
    size_t used = http_parser_execute(&c->parser, &ms__bench_async_settings,
                                      buf->base, (size_t)nread);
    if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK || used != (size_t)nread) {
        phase_fail(ph, "bad HTTP response from n1: %s",
                   http_errno_description(HTTP_PARSER_ERRNO(&c->parser)));
        caller_stop(c);
        uv_read_stop(s);
        return;
    }
    if (!c->complete || !c->running)
        return;
    uint64_t now = uv_hrtime();
    push_latency(ph, now - c->sent);
    if (ph->opt.record)
        push_sample(ph, now, now - c->sent, c->complete);
    ph->done++;
    if (c->complete != ph->expect) {
        ph->failed++;
        if (!ph->bad_status)
            ph->bad_status = c->complete;
    }
    c->complete = 0;
    if (now < ph->deadline && !ph->error &&
        !(ph->opt.stop && atomic_load(ph->opt.stop)))
        caller_send(c);
    else
        caller_stop(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    struct caller *c = req->data;
    if (status < 0) {
        phase_fail(c->ph, "cannot connect to n1: %s", uv_strerror(status));
        return;
    }
    c->ph->nconnected++;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_guard(uv_timer_t *t)
{
    struct phase *ph = t->data;
    phase_fail(ph, "%s", "n1 stopped answering (phase overran by 15 s)");
    for (int i = 0; i < ph->ncallers; i++)
        caller_stop(&ph->callers[i]);
}

/*
 * One measured phase: `ncallers` keep-alive connections to the gateway,
 * each sending the next request as soon as the previous one is answered,
 * for `seconds` (or less, as `opt` says; opt is borrowed and may be NULL).
 * Fills ph (done, failed, latencies, samples, t0/t_end; the caller frees
 * ph->lat and ph->smp); returns 0, or -1 with ph->errmsg.
 */
int ms__bench_run_phase(struct phase *ph, uv_loop_t *loop, int http_port,
                        const struct reqs *reqs, int expect, int ncallers,
                        double seconds, const struct phase_opts *opt)
{
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", http_port, &addr);
    memset(ph, 0, sizeof *ph);
    if (opt)
        ph->opt = *opt;
    ph->loop = loop;
    ph->reqs = reqs;
    ph->expect = expect;
    ph->ncallers = ncallers;
    ph->callers = calloc((size_t)ncallers, sizeof *ph->callers);
    if (!ph->callers) {
        phase_fail(ph, "%s", "out of memory");
        return -1;
    }
    uv_timer_init(loop, &ph->guard);
    ph->guard.data = ph;
    uv_timer_start(&ph->guard, on_guard,
                   (uint64_t)((seconds + PHASE_GRACE_S) * 1000), 0);
    for (int i = 0; i < ncallers; i++) {
        struct caller *c = &ph->callers[i];
        c->ph = ph;
        uv_tcp_init(loop, &c->tcp);
        c->tcp.data = c;
        c->conn.data = c;
        uv_tcp_nodelay(&c->tcp, 1);
        http_parser_init(&c->parser, HTTP_RESPONSE);
        c->parser.data = c;
        int rc = uv_tcp_connect(&c->conn, &c->tcp,
                                (const struct sockaddr *)&addr, on_connect);
        if (rc < 0)
            phase_fail(ph, "cannot connect to n1: %s", uv_strerror(rc));
    }
    while (!ph->error && ph->nconnected < ncallers)
        uv_run(loop, UV_RUN_ONCE);
    if (!ph->error) {
        ph->t0 = uv_hrtime();
        ph->deadline = ph->t0 + (uint64_t)(seconds * 1e9);
        for (int i = 0; i < ncallers; i++) {
            ph->callers[i].running = 1;
            ph->nrunning++;
        }
        for (int i = 0; i < ncallers && !ph->error; i++)
            caller_send(&ph->callers[i]);
        while (ph->nrunning > 0)
            uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&ph->guard, NULL);
    for (int i = 0; i < ncallers; i++)
        uv_close((uv_handle_t *)&ph->callers[i].tcp, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    free(ph->callers);
    ph->callers = NULL;
    return ph->error ? -1 : 0;
}

int ms__bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile q (0..1) of n sorted values, in ms. */
double ms__bench_pct_ms(const uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)(q * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return (double)v[k - 1] / 1e6;
}

struct figures {
    double rate;                /* per second */
    double p50, p99;            /* ms */
    long done, failed;
};

static void phase_figures(struct phase *ph, struct figures *f)
{
    double s = (double)(ph->t_end - ph->t0) / 1e9;
    f->rate = s > 0 ? (double)ph->done / s : 0;
    f->done = ph->done;
    f->failed = ph->failed;
    qsort(ph->lat, ph->nlat, sizeof *ph->lat, ms__bench_cmp_u64);
    f->p50 = ms__bench_pct_ms(ph->lat, ph->nlat, 0.50);
    f->p99 = ms__bench_pct_ms(ph->lat, ph->nlat, 0.99);
    free(ph->lat);
    ph->lat = NULL;
}

/* ---- Redis baseline --------------------------------------------------- */

/* Sends a RESP command and reads one reply line into line[]; 0 or -1. */
static int resp_roundtrip(int fd, const char *cmd, size_t len, char *line,
                          size_t cap)
{
    if (send_all(fd, cmd, len) < 0)
        return -1;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t got = recv(fd, line + n, cap - 1 - n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        n += (size_t)got;
        if (n >= 2 && line[n - 2] == '\r' && line[n - 1] == '\n') {
            line[n] = 0;
            return 0;
        }
    }
    return -1;
}

/* Waits until redis-server on `port` answers PING; 0 or -1. */
static int wait_redis(int port)
{
    double until = ms__bench_now_s() + 10;
    char line[64];
    while (ms__bench_now_s() < until) {
        if (ms__bench_child_gone(CH_REDIS))
            return -1;
        int fd = connect_local(port, 2);
        if (fd >= 0) {
            int ok = resp_roundtrip(fd, "PING\r\n", 6, line, sizeof line) == 0
                     && strncmp(line, "+PONG", 5) == 0;
            close(fd);
            if (ok)
                return 0;
        }
        usleep(50000);
    }
    return -1;
}

/* Single-client INCR latency measured here, for a redis-benchmark whose
 * --csv has no latency columns. */
static int redis_own_latency(int port, double seconds, struct figures *f)
{
    static const char cmd[] = "*2\r\n$4\r\nINCR\r\n$7\r\nms:own:\r\n";
    char line[64];
    struct phase ph;
    memset(&ph, 0, sizeof ph);
    int fd = connect_local(port, 5);
    if (fd < 0)
        return -1;
    ph.t0 = uv_hrtime();
    uint64_t deadline = ph.t0 + (uint64_t)(seconds * 1e9), t;
    do {
        uint64_t t1 = uv_hrtime();
        if (resp_roundtrip(fd, cmd, sizeof cmd - 1, line, sizeof line) < 0 ||
            line[0] != ':') {
            close(fd);
            free(ph.lat);
            return -1;
        }
        t = uv_hrtime();
        push_latency(&ph, t - t1);
        ph.done++;
    } while (t < deadline);
    ph.t_end = t;
    close(fd);
    struct figures own;
    phase_figures(&ph, &own);
    f->p50 = own.p50;
    f->p99 = own.p99;
    return 0;
}

/* Splits a CSV line of "quoted" fields in place; returns the count. */
static int csv_split(char *line, char **field, int max)
{
    int n = 0;
    char *p = line;
    while (*p && n < max) {
        if (*p == '"')
            p++;
        field[n++] = p;
        p += strcspn(p, "\",\r\n");
        if (*p == '"')
            *p++ = 0;
        if (*p == ',' || *p == '\r' || *p == '\n')
            *p++ = 0;
        else if (*p)
            p++;
    }
    return n;
}

/*
 * Runs redis-benchmark INCR with `clients` connections and `count`
 * requests; fills f->rate and, when its --csv has them, f->p50/f->p99
 * (else -1). Returns 0 or -1.
 */
static int redis_benchmark(int port, int clients, long count,
                           struct figures *f)
{
    char sport[16], sclients[16], scount[24];
    snprintf(sport, sizeof sport, "%d", port);
    snprintf(sclients, sizeof sclients, "%d", clients);
    snprintf(scount, sizeof scount, "%ld", count);
    char *argv[] = {"redis-benchmark", "-h", "127.0.0.1", "-p", sport,
                    "-t", "incr", "-n", scount, "-c", sclients, "--csv",
                    NULL};
    int pfd[2];
    if (pipe(pfd) < 0)
        return -1;
    pid_t pid = spawn(argv, 1, pfd[1], NULL);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        return -1;
    }
    g_pid[CH_RBENCH] = pid;
    char out[8192];
    size_t n = 0;
    for (;;) {
        ssize_t got = read(pfd[0], out + n, sizeof out - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
        if (n == sizeof out - 1)
            break;
    }
    out[n] = 0;
    close(pfd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    g_pid[CH_RBENCH] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;

    int i_rps = -1, i_p50 = -1, i_p99 = -1, found = 0;
    f->p50 = f->p99 = -1;
    for (char *line = out; *line;) {
        char *end = line + strcspn(line, "\n");
        int last = *end == 0;
        *end = 0;
        char *fld[16];
        int nf = csv_split(line, fld, 16);
        if (nf > 1 && strcmp(fld[0], "test") == 0) {
            for (int i = 1; i < nf; i++) {
                if (strcmp(fld[i], "rps") == 0)
                    i_rps = i;
                else if (strcmp(fld[i], "p50_latency_ms") == 0)
                    i_p50 = i;
                else if (strcmp(fld[i], "p99_latency_ms") == 0)
                    i_p99 = i;
            }
        } else if (nf > 1 && strcmp(fld[0], "INCR") == 0) {
            /* redis-benchmark before 7 prints "INCR","rps" and no header */
            f->rate = atof(fld[i_rps > 0 && i_rps < nf ? i_rps : 1]);
            if (i_p50 > 0 && i_p50 < nf && i_p99 > 0 && i_p99 < nf) {
                f->p50 = atof(fld[i_p50]);
                f->p99 = atof(fld[i_p99]);
            }
            found = 1;
        }
        if (last)
            break;
        line = end + 1;
    }
    f->done = count;
    return found && f->rate > 0 ? 0 : -1;
}

/* Runs redis-benchmark sized to take about `seconds` (a short run first
 * measures the rate). */
static int redis_measure(int port, int clients, double seconds,
                         struct figures *f)
{
    long probe = clients > 1 ? 20000 : 5000;
    if (redis_benchmark(port, clients, probe, f) < 0)
        return -1;
    double want = f->rate * seconds;
    long count = want < 10000 ? 10000 : want > 1e8 ? 100000000L : (long)want;
    return redis_benchmark(port, clients, count, f);
}

/* ---- the cluster ------------------------------------------------------ */

/* 32 random hex digits into out; 0 or -1. */
static int random_hex(char out[33])
{
    unsigned char rnd[16];
    if (uv_random(NULL, NULL, rnd, sizeof rnd, 0, NULL) < 0)
        return -1;
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
    return 0;
}

/*
 * Writes the config of nodes n1..nK (K = cl->nnodes) with a fresh secret
 * and admin token (kept in cl->token). `entities` is the body of the
 * entities table and `extra` more top-level fields, each line ending in
 * ",\n" (or ""). Returns 0 or -1 with errno set.
 */
int ms__bench_write_config(struct cluster *cl, const char *entities,
                           const char *extra)
{
    char secret[33];
    if (random_hex(secret) < 0 || random_hex(cl->token) < 0) {
        errno = EIO;
        return -1;
    }
    FILE *f = fopen(g_file[F_CONFIG], "w");
    if (!f)
        return -1;
    fprintf(f,
            "-- written by `moonshard bench`, removed when it ends\n"
            "return {\n"
            "    cluster = \"bench\",\n"
            "    secret = \"%s\",\n"
            "    admin_token = \"%s\",\n"
            "%s"
            "    nodes = {\n",
            secret, cl->token, extra);
    for (int i = 0; i < cl->nnodes; i++)
        fprintf(f,
                "        { name = \"n%d\", listen = \"127.0.0.1:%d\","
                " http = \"127.0.0.1:%d\" },\n",
                i + 1, cl->listen[i], cl->http[i]);
    fprintf(f, "    },\n    entities = {\n%s    },\n}\n", entities);
    return fclose(f) == 0 ? 0 : -1;
}

/* Starts node n<i+1> (a fresh log each time); 0 or -1 (said). */
int ms__bench_start_node(struct cluster *cl, int i)
{
    char name[16];
    snprintf(name, sizeof name, "n%d", i + 1);
    char *argv[] = {cl->exe, "node", g_file[F_CONFIG], "--name", name, NULL};
    pid_t pid = spawn(argv, 0, -1, g_file[F_LOG1 + i]);
    if (pid < 0) {
        fprintf(stderr, "moonshard bench: cannot start node %s: %s\n", name,
                strerror(errno));
        return -1;
    }
    g_pid[CH_N1 + i] = pid;
    return 0;
}

void ms__bench_show_node_logs(const struct cluster *cl)
{
    for (int i = 0; i < cl->nnodes; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i + 1);
        show_log_tail(name, g_file[F_LOG1 + i]);
    }
}

/* Waits until nodes n1..n<n> all list n Up members and say they
 * converged. */
int ms__bench_wait_up(struct cluster *cl, int n)
{
    double until = ms__bench_now_s() + NODE_WAIT_S;
    while (ms__bench_now_s() < until) {
        int ok = 0;
        for (int i = 0; i < n; i++) {
            if (ms__bench_child_gone(CH_N1 + i)) {
                fprintf(stderr, "moonshard bench: node n%d exited while "
                        "starting\n", i + 1);
                return -1;
            }
            char *body;
            int st = ms__bench_http_call(cl->http[i], "GET", "/v1/members",
                                         NULL, &body);
            if (st == 200 && strstr(body, "\"converged\":true") &&
                ms__bench_count_of(body, "\"status\":\"up\"") == n)
                ok++;
            free(body);
        }
        if (ok == n)
            return 0;
        usleep(100000);
    }
    fprintf(stderr, "moonshard bench: the nodes did not converge with %d "
            "Up members within %d s\n", n, NODE_WAIT_S);
    return -1;
}

/* Owner name of Counter `id` as n1 sees it: 1 = n2, 0 = n1, -1 = none
 * yet, -2 = error. */
static int owner_is_n2(struct cluster *cl, const char *id)
{
    char path[128], *body;
    snprintf(path, sizeof path, "/v1/entities/Counter/%s/owner", id);
    int st = ms__bench_http_call(cl->http[0], "GET", path, NULL, &body);
    int r = st != 200              ? -2
            : strstr(body, "\"owner\":\"n2\"") ? 1
            : strstr(body, "\"owner\":null")   ? -1
                                               : 0;
    free(body);
    return r;
}

/* Finds `n` ids whose owner is n2 (activating them through n1). */
static int pick_ids(struct cluster *cl, char ids[][24], int n)
{
    double until = ms__bench_now_s() + OWNER_WAIT_S;
    int have = 0;
    for (long k = 1; have < n && ms__bench_now_s() < until; k++) {
        char *id = ids[have], path[128], *body;
        snprintf(id, 24, "bc-%ld", k);
        int o = owner_is_n2(cl, id);
        if (o == -2)
            return -1;
        if (o == 0)
            continue;
        snprintf(path, sizeof path, "/v1/entities/Counter/%s/activate", id);
        int st = ms__bench_http_call(cl->http[0], "POST", path, "", &body);
        free(body);
        if (st != 200)
            return -1;
        if (o == -1 && owner_is_n2(cl, id) != 1)
            continue;
        have++;
    }
    return have == n ? 0 : -1;
}

int ms__bench_build_reqs(struct reqs *r, int http_port, char ids[][24],
                         int n, const char *action, const char *body)
{
    r->n = n;
    r->buf = calloc((size_t)n, sizeof *r->buf);
    r->len = calloc((size_t)n, sizeof *r->len);
    if (!r->buf || !r->len)
        return -1;
    for (int i = 0; i < n; i++) {
        char req[512];
        int len = snprintf(req, sizeof req,
                           "POST /v1/entities/Counter/%s/%s HTTP/1.1\r\n"
                           "Host: 127.0.0.1:%d\r\n"
                           "Content-Type: application/json\r\n"
                           "Content-Length: %zu\r\n\r\n%s",
                           ids[i], action, http_port, strlen(body), body);
        r->buf[i] = strdup(req);
        r->len[i] = (size_t)len;
        if (!r->buf[i])
            return -1;
    }
    return 0;
}

void ms__bench_free_reqs(struct reqs *r)
{
    for (int i = 0; r->buf && i < r->n; i++)
        free(r->buf[i]);
    free(r->buf);
    free(r->len);
}

/* Stats counters of n1 that tell whether routes were remote. */
static int n1_routes(struct cluster *cl, long long *remote, long long *local)
{
    char *body;
    int st = ms__bench_http_call(cl->http[0], "GET", "/v1/stats", NULL, &body);
    *remote = st == 200 ? ms__bench_json_num(body, "remote_routes") : -1;
    *local = st == 200 ? ms__bench_json_num(body, "local_routes") : -1;
    free(body);
    return *remote >= 0 ? 0 : -1;
}

/* Sum of the counters of all ids (asked through n1), or -1. */
static long long counter_sum(struct cluster *cl, char ids[][24], int n)
{
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        char path[128], *body;
        snprintf(path, sizeof path, "/v1/entities/Counter/%s/ask", ids[i]);
        int st = ms__bench_http_call(cl->http[0], "POST", path, ASK_BODY,
                                     &body);
        long long v = st == 200 ? ms__bench_json_num(body, "value") : -1;
        free(body);
        if (v < 0)
            return -1;
        sum += v;
    }
    return sum;
}

/*
 * Fills cl for `nnodes` nodes on free ports (one more free port in
 * *spare), installs the signal handlers and makes the temporary folder
 * with the names of its files. Returns 0 or -1 (said).
 */
int ms__bench_cluster_init(struct cluster *cl, int nnodes, int *spare)
{
    int ports[2 * MAX_NODES + 1];
    memset(cl, 0, sizeof *cl);
    cl->nnodes = nnodes;
    size_t elen = sizeof cl->exe;
    if (uv_exepath(cl->exe, &elen) < 0) {
        fprintf(stderr, "moonshard bench: cannot find its own executable\n");
        return -1;
    }
    if (free_ports(ports, 2 * nnodes + 1) < 0) {
        fprintf(stderr, "moonshard bench: cannot find free ports\n");
        return -1;
    }
    for (int i = 0; i < nnodes; i++) {
        cl->listen[i] = ports[i];
        cl->http[i] = ports[nnodes + i];
    }
    *spare = ports[2 * nnodes];
    install_signals();
    snprintf(g_dir, sizeof g_dir, "/tmp/moonshard-bench-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("moonshard bench: cannot make a temporary folder");
        g_dir[0] = 0;
        return -1;
    }
    static const char *fnames[F_COUNT] = {"cluster.lua", "n1.log", "n2.log",
                                          "n3.log", "redis.log"};
    for (int i = 0; i < F_COUNT; i++)
        snprintf(g_file[i], sizeof g_file[i], "%s/%s", g_dir, fnames[i]);
    return 0;
}

/* ---- the command ------------------------------------------------------ */

static void print_ratio(const char *what, double v, const char *op,
                        double target, int ok)
{
    printf("  %-44s %5.2f  (target %s %.1f: %s)\n", what, v, op, target,
           ok ? "met" : "MISSED");
}

static void row_rate(const char *what, const struct figures *a,
                     const struct figures *b)
{
    printf("  %-32s %15.0f %15.0f\n", what, a->rate, b->rate);
}

static void row_lat(const char *what, const struct figures *a,
                    const struct figures *b)
{
    char x[32], y[32] = "";
    snprintf(x, sizeof x, "%.3f / %.3f", a->p50, a->p99);
    if (b)
        snprintf(y, sizeof y, "%.3f / %.3f", b->p50, b->p99);
    printf("  %-32s %15s %15s\n", what, x, y);
}

static int usage(void)
{
    fprintf(stderr, "usage: moonshard bench cluster [--seconds S] "
            "[--ids N]\n");
    return 2;
}

struct results {
    struct figures ask1, ask50, tell1, tell50;
};

/* Starts the nodes, picks the ids, runs the four phases and prints their
 * table. Returns 0, 1 when a check failed, -1 on an error (said). */
static int bench_nodes(struct cluster *cl, char ids[][24], int nids,
                       struct reqs *asks, struct reqs *tells, double seconds,
                       struct results *res)
{
    uv_loop_t *loop = uv_default_loop();
    long long rem0, loc0, rem1, loc1;

    if (ms__bench_write_config(cl, "        Counter = { module = \"counter\","
                                   " shard_count = 64,\n"
                                   "                    idle_timeout = false"
                                   " },\n",
                               "") < 0) {
        perror("moonshard bench: cannot write the cluster config");
        return -1;
    }
    fprintf(stderr, "moonshard bench cluster: starting n1 and n2 ...\n");
    if (ms__bench_start_node(cl, 0) < 0 || ms__bench_start_node(cl, 1) < 0 ||
        ms__bench_wait_up(cl, 2) < 0) {
        ms__bench_show_node_logs(cl);
        return -1;
    }
    fprintf(stderr, "moonshard bench cluster: Up; picking %d ids owned by "
            "n2 ...\n", nids);
    if (pick_ids(cl, ids, nids) < 0) {
        fprintf(stderr, "moonshard bench: could not find %d ids owned by n2 "
                "within %d s\n", nids, OWNER_WAIT_S);
        ms__bench_show_node_logs(cl);
        return -1;
    }
    if (ms__bench_build_reqs(asks, cl->http[0], ids, nids, "ask",
                             ASK_BODY) < 0 ||
        ms__bench_build_reqs(tells, cl->http[0], ids, nids, "tell",
                             TELL_BODY) < 0) {
        fprintf(stderr, "moonshard bench: out of memory\n");
        return -1;
    }
    if (n1_routes(cl, &rem0, &loc0) < 0) {
        fprintf(stderr, "moonshard bench: cannot read n1's stats\n");
        return -1;
    }

    struct {
        const char *name;
        struct reqs *r;
        int expect, callers;
        struct figures *f;
    } plan[] = {
        {"asks, 1 caller", asks, 200, 1, &res->ask1},
        {"asks, 50 callers", asks, 200, MAX_CALLERS, &res->ask50},
        {"tells, 1 caller", tells, 202, 1, &res->tell1},
        {"tells, 50 callers", tells, 202, MAX_CALLERS, &res->tell50},
    };
    long measured = 0, failed = 0, tells_ok = 0;
    ms__bench_async_settings.on_message_complete = ms__bench_async_on_complete;
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        struct phase ph;
        struct figures *f = plan[i].f;
        fprintf(stderr, "moonshard bench cluster: %s (%.1f s) ...\n",
                plan[i].name, seconds);
        if (ms__bench_run_phase(&ph, loop, cl->http[0], plan[i].r,
                                plan[i].expect, plan[i].callers, seconds,
                                NULL) < 0) {
            fprintf(stderr, "moonshard bench: %s: %s\n", plan[i].name,
                    ph.errmsg);
            free(ph.lat);
            ms__bench_show_node_logs(cl);
            return -1;
        }
        phase_figures(&ph, f);
        if (f->failed)
            fprintf(stderr, "moonshard bench: %s: %ld of %ld requests "
                    "failed (first status %d)\n", plan[i].name, f->failed,
                    f->done, ph.bad_status);
        measured += f->done;
        failed += f->failed;
        if (plan[i].expect == 202)
            tells_ok += f->done - f->failed;
    }
    if (n1_routes(cl, &rem1, &loc1) < 0) {
        fprintf(stderr, "moonshard bench: cannot read n1's stats\n");
        return -1;
    }
    long long sum = counter_sum(cl, ids, nids);

    printf("moonshard bench cluster: 2 nodes on 127.0.0.1; client -> n1's "
           "gateway -> n2\n"
           "  Counter, 64 shards, %d ids owned by n2, HTTP/1.1 "
           "keep-alive, %.1f s a phase\n\n", nids, seconds);
    printf("  %-32s %15s %15s\n", "", "1 caller", "50 callers");
    row_rate("moonshard remote ask/s", &res->ask1, &res->ask50);
    row_rate("moonshard remote tell/s", &res->tell1, &res->tell50);
    row_lat("moonshard ask p50 / p99 (ms)", &res->ask1, &res->ask50);
    printf("  checks: n1 routed %lld of %ld requests remotely, %lld "
           "locally;\n"
           "          the counters sum to %lld of %ld accepted tells; "
           "%ld failed\n\n",
           rem1 - rem0, measured, loc1 - loc0, sum, tells_ok, failed);
    fflush(stdout);
    return failed || sum != tells_ok || rem1 - rem0 != measured ? 1 : 0;
}

/* Runs the Redis baseline on `port` and prints it with the ratios to the
 * cluster's figures. Returns 0 (also when Redis is not installed) or -1
 * on an error (said). */
static int bench_redis(int port, double seconds, const struct results *res)
{
    struct figures r1, r50;

    if (!on_path("redis-server") || !on_path("redis-benchmark")) {
        printf("  Redis baseline: skipped: Redis not installed\n"
               "  (redis-server and redis-benchmark are not both on PATH);"
               " no ratios\n");
        return 0;
    }
    fprintf(stderr, "moonshard bench cluster: Redis baseline ...\n");
    char sport[16];
    snprintf(sport, sizeof sport, "%d", port);
    char *argv[] = {"redis-server", "--port", sport, "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", NULL};
    pid_t pid = spawn(argv, 1, -1, g_file[F_REDIS_LOG]);
    if (pid < 0) {
        fprintf(stderr, "moonshard bench: cannot start redis-server: %s\n",
                strerror(errno));
        return -1;
    }
    g_pid[CH_REDIS] = pid;
    if (wait_redis(port) < 0) {
        fprintf(stderr, "moonshard bench: redis-server did not answer PING "
                "on port %d\n", port);
        show_log_tail("redis-server", g_file[F_REDIS_LOG]);
        return -1;
    }
    if (redis_measure(port, 1, seconds, &r1) < 0 ||
        redis_measure(port, MAX_CALLERS, seconds, &r50) < 0) {
        fprintf(stderr, "moonshard bench: redis-benchmark failed\n");
        return -1;
    }
    const char *lat_src = "redis-benchmark --csv";
    if (r1.p99 < 0) {
        lat_src = "own RESP client";
        if (redis_own_latency(port, seconds, &r1) < 0) {
            fprintf(stderr, "moonshard bench: INCR latency probe failed\n");
            return -1;
        }
    }
    int redis_only[1] = {CH_REDIS};
    stop_children(redis_only, 1);

    row_rate("Redis INCR/s (redis-benchmark)", &r1, &r50);
    row_lat("Redis INCR p50 / p99 (ms)", &r1, r50.p99 >= 0 ? &r50 : NULL);
    printf("  (Redis latency from %s)\n\n", lat_src);
    double thr = res->ask50.rate / r50.rate;
    double lat = r1.p99 > 0 ? res->ask1.p99 / r1.p99 : 0;
    print_ratio("remote ask/s, 50 callers / Redis INCR/s, 50", thr, ">=",
                0.5, thr >= 0.5);
    print_ratio("p99 ask, 1 caller / Redis p99, 1 client", lat, "<=", 3.0,
                r1.p99 > 0 && lat <= 3.0);
    return 0;
}

/*
 * `moonshard bench cluster [--seconds S] [--ids N]`; argv[0] is "cluster".
 * Starts two nodes, measures remote asks and tells through n1's gateway,
 * then redis-benchmark INCR as the baseline, and prints both with their
 * ratios. Returns the exit code: 0, also when Redis is not installed or
 * a target is missed; 1 when a request failed or a check or step failed.
 */
int ms_bench_cluster_main(int argc, char **argv)
{
    double seconds = 3;
    int nids = 100;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds >= 0.1 && seconds <= 3600))
                return usage();
        } else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 10000)
                return usage();
            nids = (int)v;
        } else {
            fprintf(stderr, "moonshard bench cluster: unknown option '%s'\n",
                    argv[i]);
            return usage();
        }
    }

    struct cluster cl;
    int redis_port;
    if (ms__bench_cluster_init(&cl, 2, &redis_port) < 0)
        return 1;

    char (*ids)[24] = calloc((size_t)nids, sizeof *ids);
    struct reqs asks = {NULL, NULL, 0}, tells = {NULL, NULL, 0};
    struct results res;
    int rc = -1;
    memset(&res, 0, sizeof res);
    if (ids)
        rc = bench_nodes(&cl, ids, nids, &asks, &tells, seconds, &res);
    else
        fprintf(stderr, "moonshard bench: out of memory\n");
    /* the nodes are idle now but Redis gets the machine to itself */
    int nodes[2] = {CH_N1, CH_N2};
    stop_children(nodes, 2);
    if (rc >= 0 && bench_redis(redis_port, seconds, &res) < 0)
        rc = -1;
    fflush(stdout);
    ms__bench_cleanup_all();
    ms__bench_free_reqs(&asks);
    ms__bench_free_reqs(&tells);
    free(ids);
    return rc != 0 ? 1 : 0;
}
