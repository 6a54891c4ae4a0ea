/*
 * wrk.c -- the independent load generator of the benches: Debian's `wrk`
 * (an HTTP/1.1 benchmark of its own, epoll and keep-alive, one request in
 * flight per connection), run as a child process against a gateway. It
 * is an optional dependency of the benches alone: without it on PATH the
 * caller says "skipped".
 *
 * wrk sends what a Lua script returns: the script this writes builds one
 * request per id with wrk.format() in init(), rotates over them in
 * request(), and prints wrk's summary and two percentiles in one line in
 * done(), which is what this parses (wrk's own report rounds its figures
 * for people).
 */
#include "cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WRK_TIMEOUT "10s"   /* an answer slower than this is an error */
#define WRK_GRACE_S 30      /* wrk may overrun -d by this much */

/* Writes the script that rotates over the ids; 0 or -1 with errno. */
static int write_script(const char *path, char ids[][24], int n,
                        const char *action, const char *body)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "-- written by moonshard-bench, removed when it ends\n"
               "local paths = {\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "    \"/v1/entities/Counter/%s/%s\",\n", ids[i], action);
    /* the body as a long string: the benches' bodies hold no "]]" */
    fprintf(f,
            "}\n"
            "local reqs, k = {}, 0\n"
            "function init()\n"
            "    local h = { [\"Content-Type\"] = \"application/json\" }\n"
            "    for i, p in ipairs(paths) do\n"
            "        reqs[i] = wrk.format(\"POST\", p, h, [[%s]])\n"
            "    end\n"
            "end\n"
            "function request()\n"
            "    k = k %% #reqs + 1\n"
            "    return reqs[k]\n"
            "end\n"
            "function done(summary, latency)\n"
            "    local e = summary.errors\n"
            "    io.write(string.format(\"moonshard-wrk %%d %%d %%d %%d "
            "%%d %%d %%d %%.0f %%.0f\\n\",\n"
            "        summary.requests, summary.duration, e.status,"
            " e.connect,\n"
            "        e.read, e.write, e.timeout, latency:percentile(50),\n"
            "        latency:percentile(99)))\n"
            "end\n",
            body);
    return fclose(f) == 0 ? 0 : -1;
}

int ms__bench_wrk(int port, char ids[][24], int n, const char *action,
                  const char *body, int connections, int threads,
                  int seconds, struct wrk_figures *w)
{
    memset(w, 0, sizeof *w);
    w->connections = connections;
    w->threads = threads;
    w->seconds = seconds;
    w->remote = w->local = -1;
    if (!ms__bench_on_path("wrk"))
        return 1;
    if (write_script(ms__bench_file(F_WRK), ids, n, action, body) < 0) {
        perror("moonshard bench: cannot write the wrk script");
        return -1;
    }
    char sc[16], st[16], sd[16], url[64];
    snprintf(sc, sizeof sc, "%d", connections);
    snprintf(st, sizeof st, "%d", threads);
    snprintf(sd, sizeof sd, "%ds", seconds);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    char *argv[] = {"wrk", "-t", st, "-c", sc, "-d", sd, "--timeout",
                    WRK_TIMEOUT, "--latency", "-s",
                    (char *)ms__bench_file(F_WRK), url, NULL};
    int pfd[2];
    if (ms__bench_out_pipe(pfd) < 0) {
        perror("moonshard bench: pipe");
        return -1;
    }
    pid_t pid = ms__bench_spawn(argv, 1, pfd[1], ms__bench_file(F_WRK_LOG));
    close(pfd[1]);
    if (pid < 0) {
        fprintf(stderr, "moonshard bench: cannot start wrk: %s\n",
                strerror(errno));
        close(pfd[0]);
        return -1;
    }
    ms__bench_track(CH_WRK, pid);
    /* wrk ends by itself after -d; its output is small, so reading it to
     * the end does not block wrk, and the status comes after */
    char out[16384];
    double until = ms__bench_now_s() + seconds + WRK_GRACE_S;
    out[ms__bench_read_full(pfd[0], out, sizeof out - 1)] = 0;
    close(pfd[0]);
    int status = -1;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (ms__bench_now_s() > until) {
            int me[1] = {CH_WRK};
            ms__bench_stop_children(me, 1);
            fprintf(stderr, "moonshard bench: wrk did not end\n");
            return -1;
        }
        usleep(10000);
    }
    ms__bench_track(CH_WRK, 0);
    const char *line = strstr(out, "moonshard-wrk ");
    /* requests, duration (us), status > 399, connect, read, write and
     * timeout errors */
    long long v[7];
    double p50_us = 0, p99_us = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !line ||
        sscanf(line, "moonshard-wrk %lld %lld %lld %lld %lld %lld %lld %lf "
               "%lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &p50_us, &p99_us) != 9) {
        fprintf(stderr, "moonshard bench: wrk failed (status %d); its "
                "output:\n%s\n", status, out);
        ms__bench_show_log_tail("wrk", ms__bench_file(F_WRK_LOG));
        return -1;
    }
    long long dur_us = v[1];
    w->requests = (long)v[0];
    w->status_errors = (long)v[2];
    w->socket_errors = (long)(v[3] + v[4] + v[5] + v[6]);
    w->rate = dur_us > 0 ? (double)w->requests * 1e6 / (double)dur_us : 0;
    w->p50 = p50_us / 1000;
    w->p99 = p99_us / 1000;
    return 0;
}

int ms__bench_wrk_checked(const struct wrk_figures *w)
{
    return w->requests > 0 && w->status_errors == 0 &&
           w->socket_errors == 0 && w->local == 0 &&
           w->remote >= w->requests &&
           w->remote <= w->requests + w->connections;
}
