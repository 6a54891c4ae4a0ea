/*
 * redis.c -- the Redis baseline of `moonshard-bench cluster`:
 * redis-server on a free loopback port, redis-benchmark INCR sized to
 * take about as long as a phase, and, for a redis-benchmark whose --csv
 * has no latency columns, a single-client INCR latency measured here over
 * RESP; for `bench all`, the same again through `moonshard-bench relay`
 * (relay.c).
 */
#include "cluster.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

/* A blocking TCP connection to 127.0.0.1:port with send and receive
 * timeouts, or -1 (RESP only: HTTP goes through runtime/client/httpc.h). */
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
        ms__bench_push_latency(&ph, t - t1);
        ph.done++;
    } while (t < deadline);
    ph.t_end = t;
    close(fd);
    struct figures own;
    ms__bench_phase_figures(&ph, &own);
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
    if (ms__bench_out_pipe(pfd) < 0)
        return -1;
    pid_t pid = ms__bench_spawn(argv, 1, pfd[1], NULL);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        return -1;
    }
    ms__bench_track(CH_RBENCH, pid);
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
    ms__bench_track(CH_RBENCH, 0);
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

/* INCR at 1 and `clients` connections to `port` (redis-server or the
 * relay in front of it): rates in *r1 and *rn, 1-client latencies from
 * redis-benchmark's --csv, else from the own RESP client (*lat_src). */
static int measure_at(int port, int clients, double seconds,
                      struct figures *r1, struct figures *rn,
                      const char **lat_src)
{
    if (redis_measure(port, 1, seconds, r1) < 0 ||
        redis_measure(port, clients, seconds, rn) < 0) {
        fprintf(stderr, "moonshard bench: redis-benchmark failed\n");
        return -1;
    }
    *lat_src = "redis-benchmark --csv";
    if (r1->p99 < 0) {
        *lat_src = "own RESP client";
        if (redis_own_latency(port, seconds, r1) < 0) {
            fprintf(stderr, "moonshard bench: INCR latency probe failed\n");
            return -1;
        }
    }
    return 0;
}

/* Starts `moonshard-bench relay --to port` (this executable) and reads the
 * port it listens on; returns it, or -1 (said). */
static int start_relay(int port)
{
    char exe[PATH_MAX], sport[16];
    if (ms__bench_self(exe, sizeof exe) < 0)
        return -1;
    snprintf(sport, sizeof sport, "%d", port);
    char *argv[] = {exe, "relay", "--to", sport, NULL};
    int pfd[2];
    if (ms__bench_out_pipe(pfd) < 0)
        return -1;
    pid_t pid = ms__bench_spawn(argv, 0, pfd[1], ms__bench_file(F_RELAY_LOG));
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        fprintf(stderr, "moonshard bench: cannot start the relay: %s\n",
                strerror(errno));
        return -1;
    }
    ms__bench_track(CH_RELAY, pid);
    /* the port line, or EOF if the relay exits (its pipe closes) */
    char line[32];
    size_t got = 0;
    while (got < sizeof line - 1 && !memchr(line, '\n', got)) {
        ssize_t r = read(pfd[0], line + got, sizeof line - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(pfd[0]);
    line[got] = 0;
    int at = atoi(line);
    if (!memchr(line, '\n', got) || at <= 0 || at > 65535) {
        fprintf(stderr, "moonshard bench: the relay did not start\n");
        ms__bench_show_log_tail("relay", ms__bench_file(F_RELAY_LOG));
        return -1;
    }
    return at;
}

int ms__bench_redis(int port, int clients, double seconds, int relay,
                    struct redis_figures *f)
{
    /* zeroed on every return: the callers copy the figures out before
     * they look at the result (cluster.c also when Redis is missing) */
    memset(f, 0, sizeof *f);
    f->lat_src = "";
    if (!ms__bench_on_path("redis-server") ||
        !ms__bench_on_path("redis-benchmark"))
        return 1;
    fprintf(stderr, "moonshard bench cluster: Redis baseline ...\n");
    char sport[16];
    snprintf(sport, sizeof sport, "%d", port);
    char *argv[] = {"redis-server", "--port", sport, "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", NULL};
    pid_t pid = ms__bench_spawn(argv, 1, -1, ms__bench_file(F_REDIS_LOG));
    if (pid < 0) {
        fprintf(stderr, "moonshard bench: cannot start redis-server: %s\n",
                strerror(errno));
        return -1;
    }
    ms__bench_track(CH_REDIS, pid);
    if (wait_redis(port) < 0) {
        fprintf(stderr, "moonshard bench: redis-server did not answer PING "
                "on port %d\n", port);
        ms__bench_show_log_tail("redis-server", ms__bench_file(F_REDIS_LOG));
        return -1;
    }
    if (measure_at(port, clients, seconds, &f->r1, &f->rn, &f->lat_src) < 0)
        return -1;
    if (relay) {
        const char *via_src;
        fprintf(stderr, "moonshard bench cluster: Redis through a relay "
                "...\n");
        int at = start_relay(port);
        if (at < 0 ||
            measure_at(at, clients, seconds, &f->via1, &f->vian, &via_src) < 0)
            return -1;
        int relay_only[1] = {CH_RELAY};
        ms__bench_stop_children(relay_only, 1);
    }
    int redis_only[1] = {CH_REDIS};
    ms__bench_stop_children(redis_only, 1);
    return 0;
}
