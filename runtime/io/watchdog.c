/*
 * watchdog.c -- the stuck-loop watchdog thread (see watchdog.h).
 *
 * The thread sleeps in poll() on a pipe for at most MS_WATCHDOG_TICK_MS,
 * then compares what the loop publishes with what it saw last: the same
 * publication (same sequence number), not idle, for stuck_ms means stuck.
 * The pipe carries the signals (one byte each, written by the signal
 * handler) and the wake-up of a stop (a 0 byte). It is made once per
 * process and never closed, so a signal handler never writes to a closed
 * or reused descriptor. A stop is the watchdog's own flag, `quit`: with
 * two nodes in one process (bench local --max-active) the other node's
 * thread may be the one that reads the 0 byte, and this one then sees
 * its flag at its next tick.
 */
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/log.h"
#include "../moonshard.h"
#include "uverr.h"

struct ms_watchdog {
    uv_loop_t *loop;
    uv_async_t async;         /* passes the first signal to the loop */
    pthread_t thread;
    int started;
    uint64_t stuck_ms, exit_ms;
    const struct ms_running *running;
    const struct ms_config *cfg;
    void (*on_signal)(void *data, int signum);
    void *on_signal_data;
    _Atomic int catching;     /* SIGINT and SIGTERM are ours */
    struct sigaction old_int, old_term;
    _Atomic int stop_signal;  /* the first SIGINT/SIGTERM, or 0 */
    _Atomic int quit;         /* ms_watchdog_stop: the thread returns */

    /* the watchdog thread's own */
    struct ms_running_view seen; /* the publication being watched */
    int reported;                /* `seen` was logged as stuck */
    uint64_t next_report_ms;     /* log again when it has run this long */
    uint64_t last_check_ns;      /* when check() last ran */
    uint64_t paused_ns;          /* the process stood still while `seen` ran */
};

static int pipe_fd[2] = {-1, -1}; /* read, write; see the top comment */

static uint64_t clock_ns(void)
{
    /* the clock running.h's since_ns comes from (lua/vm.c) */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_signal(int signum)
{
    int saved = errno;
    unsigned char b = (unsigned char)signum;
    ssize_t n = write(pipe_fd[1], &b, 1); /* a full pipe drops it: fine */
    (void)n;
    errno = saved;
}

static int make_pipe(void)
{
    if (pipe_fd[0] >= 0)
        return 0;
    if (pipe(pipe_fd) < 0)
        return -errno;
    for (int i = 0; i < 2; i++) {
        fcntl(pipe_fd[i], F_SETFD, FD_CLOEXEC);
        fcntl(pipe_fd[i], F_SETFL, O_NONBLOCK);
    }
    return 0;
}

static void drain_pipe(void)
{
    unsigned char buf[64];
    while (read(pipe_fd[0], buf, sizeof buf) > 0)
        ;
}

/* ---- the log lines -------------------------------------------------- */

static const char *type_name(struct ms_watchdog *w, int type)
{
    if (w->cfg && type >= 0 && type < w->cfg->ntypes)
        return w->cfg->types[type].name;
    return "?";
}

/* The fields naming what runs, and a few words saying what it is. */
static const char *describe(struct ms_watchdog *w,
                            const struct ms_running_view *v, char *f,
                            size_t cap)
{
    size_t n = v->len < MS_RUNNING_TEXT_MAX ? v->len : MS_RUNNING_TEXT_MAX;
    size_t o = 0;
    f[0] = 0;
    switch (v->kind) {
    case MS_RUN_HANDLER:
        o = ms_log_field_s(f, cap, o, "type", type_name(w, v->type));
        o = ms_log_field_u(f, cap, o, "shard", v->shard);
        o = ms_log_field(f, cap, o, "id", v->text, n);
        break;
    case MS_RUN_PARTITIONER:
        o = ms_log_field_s(f, cap, o, "type", type_name(w, v->type));
        o = ms_log_field(f, cap, o, "id", v->text, n);
        break;
    default:
        o = ms_log_field(f, cap, o, "lua", v->text, n);
        break;
    }
    if (v->len > MS_RUNNING_TEXT_MAX) /* the id was cut: say how long */
        ms_log_field_u(f, cap, o, "id_bytes", v->len);
    return v->kind == MS_RUN_HANDLER       ? "a handler"
           : v->kind == MS_RUN_PARTITIONER ? "a partitioner"
                                           : "Lua code";
}

/* Logs the end of the process and ends it. */
static void die(struct ms_watchdog *w, const struct ms_running_view *v,
                uint64_t ran_ms, int signum)
{
    char f[64 + 4 * MS_LOG_VALUE_MAX + 64];
    const char *what = describe(w, v, f, sizeof f);
    char why[128];
    if (signum)
        snprintf(why, sizeof why, "the node was asked to stop (%s)",
                 signum == SIGINT ? "SIGINT" : "SIGTERM");
    else
        snprintf(why, sizeof why, "stuck_handler_exit_ms is %llu",
                 (unsigned long long)w->exit_ms);
    ms_log(MS_LOG_ERROR, f,
           "%s has run for %llu ms and %s: exiting with status %d, without "
           "a graceful stop, so that a supervisor restarts the node", what,
           (unsigned long long)ran_ms, why, MS_EXIT_STUCK);
    _exit(MS_EXIT_STUCK);
}

/* ---- the thread ------------------------------------------------------- */

/* How long `v` has run, in ms, leaving out when the process stood still. */
static uint64_t ran_ms(struct ms_watchdog *w,
                       const struct ms_running_view *v, uint64_t now)
{
    uint64_t ran = now > v->since_ns ? now - v->since_ns : 0;
    ran -= w->paused_ns < ran ? w->paused_ns : ran;
    return ran / 1000000;
}

static void check(struct ms_watchdog *w)
{
    uint64_t now = clock_ns();
    uint64_t prev = w->last_check_ns;
    w->last_check_ns = now;
    struct ms_running_view v;
    if (!ms_running_read(w->running, &v))
        return; /* the loop kept writing: it is not stuck */
    if (v.seq != w->seen.seq || v.kind == MS_RUN_IDLE) {
        if (w->reported) {
            char f[64 + 4 * MS_LOG_VALUE_MAX + 64];
            const char *what = describe(w, &w->seen, f, sizeof f);
            ms_log(MS_LOG_INFO, f, "%s that was stuck returned after about "
                   "%llu ms", what,
                   (unsigned long long)ran_ms(w, &w->seen, now));
        }
        w->seen = v;
        w->reported = 0;
        w->next_report_ms = w->stuck_ms;
        w->paused_ns = 0;
        if (v.kind == MS_RUN_IDLE)
            return;
    }
    /* A check long overdue means that the whole process stood still
     * (SIGSTOP, a debugger, a starved machine), not that Lua ran: that
     * time does not count, so a paused node is not ended on resuming. */
    const uint64_t tick_ns = MS_WATCHDOG_TICK_MS * 1000000ull;
    if (prev && now - prev > 4 * tick_ns && v.since_ns < prev)
        w->paused_ns += now - prev - tick_ns;
    uint64_t ran = ran_ms(w, &v, now);
    int signum = atomic_load(&w->stop_signal);
    if (ran >= w->next_report_ms) {
        char f[64 + 4 * MS_LOG_VALUE_MAX + 64];
        const char *what = describe(w, &v, f, sizeof f);
        ms_log(MS_LOG_WARN, f,
               "%s has run for %llu ms (stuck_handler_ms is %llu): the node "
               "serves nothing else until it returns, and LuaJIT cannot "
               "preempt it", what, (unsigned long long)ran,
               (unsigned long long)w->stuck_ms);
        w->reported = 1;
        while (w->next_report_ms <= ran)
            w->next_report_ms *= 2;
    }
    if (signum && ran >= w->stuck_ms)
        die(w, &v, ran, signum);
    if (w->exit_ms && ran >= w->exit_ms)
        die(w, &v, ran, 0);
}

/* A SIGINT or SIGTERM arrived (on the watchdog thread, from the pipe). */
static void got_signal(struct ms_watchdog *w, int signum)
{
    int none = 0;
    if (w->catching &&
        atomic_compare_exchange_strong(&w->stop_signal, &none, signum))
        uv_async_send(&w->async); /* the loop stops the node, if it can */
    check(w); /* stuck already: exit now */
}

static void *run(void *arg)
{
    struct ms_watchdog *w = arg;
    for (;;) {
        struct pollfd p = {pipe_fd[0], POLLIN, 0};
        int rc = poll(&p, 1, MS_WATCHDOG_TICK_MS);
        if (rc > 0) {
            unsigned char buf[64];
            ssize_t n = read(pipe_fd[0], buf, sizeof buf);
            for (ssize_t i = 0; i < n; i++)
                if (buf[i] != 0) /* 0: a stop's wake-up */
                    got_signal(w, buf[i]);
        }
        if (atomic_load(&w->quit))
            return NULL; /* ms_watchdog_stop */
        check(w);
    }
}

static void on_async(uv_async_t *a)
{
    struct ms_watchdog *w = a->data;
    int signum = atomic_load(&w->stop_signal);
    if (signum && w->on_signal)
        w->on_signal(w->on_signal_data, signum);
}

static void on_closed(uv_handle_t *h)
{
    free(h->data);
}

int ms_watchdog_start(struct ms_watchdog **out, uv_loop_t *loop,
                      const struct ms_watchdog_options *o)
{
    int rc = make_pipe();
    if (rc < 0)
        return ms_uv_error(rc);
    drain_pipe(); /* a signal or stop left over from an earlier node */
    struct ms_watchdog *w = calloc(1, sizeof *w);
    if (!w)
        return MS_ENOMEM;
    w->loop = loop;
    w->stuck_ms = o->stuck_ms ? o->stuck_ms : 1;
    w->exit_ms = o->exit_ms;
    w->running = o->running;
    w->cfg = o->cfg;
    w->next_report_ms = w->stuck_ms;
    w->seen.kind = MS_RUN_IDLE;
    w->seen.seq = UINT32_MAX; /* odd: never a published one */
    w->async.data = w;
    rc = uv_async_init(loop, &w->async, on_async);
    if (rc < 0) {
        free(w);
        return ms_uv_error(rc);
    }
    w->async.data = w;
    uv_unref((uv_handle_t *)&w->async); /* it does not keep a loop alive */
    /* the thread takes no signals: their handler runs on another thread */
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&w->thread, &attr, run, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        uv_close((uv_handle_t *)&w->async, on_closed);
        return ms_uv_error(-rc); /* an errno: libuv's code on Unix */
    }
    w->started = 1;
    *out = w;
    return 0;
}

int ms_watchdog_catch_signals(struct ms_watchdog *w,
                              void (*cb)(void *data, int signum), void *data)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    w->on_signal = cb;
    w->on_signal_data = data;
    w->catching = 1; /* before a signal can come */
    if (sigaction(SIGINT, &sa, &w->old_int) < 0) {
        w->catching = 0;
        return -errno;
    }
    if (sigaction(SIGTERM, &sa, &w->old_term) < 0) {
        int e = errno;
        sigaction(SIGINT, &w->old_int, NULL);
        w->catching = 0;
        return -e;
    }
    return 0;
}

void ms_watchdog_stop(struct ms_watchdog *w)
{
    if (!w)
        return;
    if (w->catching) {
        if (atomic_load(&w->stop_signal)) {
            /* a stop is in progress: later signals do not cut it short */
            signal(SIGINT, SIG_IGN);
            signal(SIGTERM, SIG_IGN);
        } else {
            sigaction(SIGINT, &w->old_int, NULL);
            sigaction(SIGTERM, &w->old_term, NULL);
        }
        w->catching = 0;
    }
    if (w->started) {
        unsigned char quit = 0;
        atomic_store(&w->quit, 1);
        /* the thread drains the pipe, so a full one empties soon */
        while (write(pipe_fd[1], &quit, 1) < 0 &&
               (errno == EINTR || errno == EAGAIN))
            usleep(1000);
        pthread_join(w->thread, NULL);
    }
    uv_close((uv_handle_t *)&w->async, on_closed);
}
