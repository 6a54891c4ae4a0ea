/*
 * load.c -- the benches' measured client: libuv TCP, HTTP/1.1 keep-alive
 * to a gateway, one connection per caller and one request in flight per
 * connection. It must be event-driven to keep 50 to 500 callers busy from
 * one thread, so it is not the blocking client of runtime/client/httpc.h;
 * it parses responses with that client's parser (struct ms_httpc_parser,
 * bodies skipped). Also the percentiles and the figures of a phase.
 */
#include "cluster.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "client/httpc.h"

#define PHASE_GRACE_S 15   /* a phase may overrun its length by this much */

/* ---- the measured client: libuv, one request in flight per caller ---- */

struct caller {
    uv_tcp_t tcp;
    uv_connect_t conn;
    uv_write_t wreq;
    struct ms_httpc_parser parser;  /* bodies skipped */
    struct phase *ph;
    uint64_t sent;
    int running;
    char rbuf[4096];
};

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

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct caller *c = h->data;
    (void)hint;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

void ms__bench_push_latency(struct phase *ph, uint64_t ns)
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
    size_t used;
    int rc = ms_httpc_parser_feed(&c->parser, buf->base, (size_t)nread,
                                  &used);
    /* one request in flight: nothing may follow its response */
    if (rc < 0 || used != (size_t)nread) {
        phase_fail(ph, "bad HTTP response from n1: %s",
                   rc < 0 ? ms_httpc_parser_error(&c->parser)
                          : "bytes after the response");
        caller_stop(c);
        uv_read_stop(s);
        return;
    }
    if (rc == 0 || !c->running)
        return;
    int status = c->parser.status;
    ms_httpc_parser_next(&c->parser);
    uint64_t now = uv_hrtime();
    ms__bench_push_latency(ph, now - c->sent);
    if (ph->opt.record)
        push_sample(ph, now, now - c->sent, status);
    ph->done++;
    if (status != ph->expect) {
        ph->failed++;
        if (!ph->bad_status)
            ph->bad_status = status;
    }
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
        ms_httpc_parser_init(&c->parser, 0);
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

void ms__bench_phase_figures(struct phase *ph, struct figures *f)
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
