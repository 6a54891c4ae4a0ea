/*
 * pg.c -- the PostgreSQL pool of pg.h: libpq's asynchronous API driven by
 * uv_poll on each connection's socket.
 *
 * A connection is DOWN (waiting for its retry timer), CONNECTING
 * (PQconnectPoll), IDLE or BUSY (running a job's steps). A job's steps
 * are its statements, with BEGIN before and COMMIT after for a
 * transaction; each step is one PQsendQueryParams whose results are read
 * until PQgetResult gives NULL. A group (ms_pg_group) runs in pipeline
 * mode instead: pg_pipe.c. One timer per connection serves as the
 * retry (backoff) and the connect timeout; one timer per pool sweeps the
 * jobs' deadlines while there are jobs.
 */
#include "pg.h"

#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"
#include "../core/log.h"

#include "pg_int.h"

#define TICK_MS 50 /* how often deadlines are checked while jobs exist */

static void conn_start(struct conn *c);
static void pump(struct ms_pg *pg);
static void on_kick(uv_timer_t *t);

/* -- small helpers ------------------------------------------------------ */

/* error text on one line, runs of blanks as one space: libpq's and a
 * server's messages hold newlines and tabs */
void ms_pg_one_line(char *s)
{
    char *w = s;
    for (const char *p = s; *p; p++) {
        int space = *p == '\n' || *p == '\r' || *p == '\t' || *p == ' ';
        if (!space)
            *w++ = *p;
        else if (w > s && w[-1] != ' ')
            *w++ = ' ';
    }
    *w = 0;
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ')
        s[--n] = 0;
}

char *ms_pg_dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static void copy_text(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, src, n);
    while (n && (dst[n - 1] == '\n' || dst[n - 1] == ' '))
        n--; /* libpq's messages end in a newline */
    dst[n] = '\0';
}

static void job_free(struct job *j)
{
    if (!j)
        return;
    for (int i = 0; i < j->n; i++) {
        free(j->st[i].sql);
        for (int p = 0; p < j->st[i].nparams; p++)
            free(j->st[i].params[p]);
        free(j->st[i].params);
    }
    free(j->st);
    free(j->unit_start);
    free(j->units);
    free(j);
}

/* Calls the job's callback with `r` and frees the job. */
static void job_done(struct ms_pg *pg, struct job *j,
                     const struct ms_pg_result *r)
{
    pg->jobs--;
    pg->in_cb++;
    j->cb(r, j->data);
    pg->in_cb--;
    job_free(j);
}

static void job_fail(struct ms_pg *pg, struct job *j, int err,
                     const char *sqlstate, const char *message, int index)
{
    struct ms_pg_result r = {err, index, sqlstate ? sqlstate : "",
                             message ? message : ms_pg_strerror(err), NULL,
                             0, NULL};
    job_done(pg, j, &r);
}

static void log_conn(int level, struct conn *c, const char *fmt,
                     const char *why)
{
    char f[256];
    size_t at = ms_log_field_s(f, sizeof f, 0, "pg", c->pool->masked);
    at = ms_log_field_u(f, sizeof f, at, "conn",
                        (unsigned long long)(c - c->pool->conns));
    (void)at;
    ms_log(level, f, fmt, why);
}

/* -- the socket watch --------------------------------------------------- */

static void maybe_free(struct ms_pg *pg);

static void free_poll(uv_handle_t *h)
{
    struct ms_pg *pg = h->data;
    free(h);
    pg->polls--;
    maybe_free(pg);
}

static void unwatch(struct conn *c)
{
    if (c->poll) {
        c->poll->data = c->pool; /* the pool outlives its watches */
        uv_close((uv_handle_t *)c->poll, free_poll);
        c->poll = NULL;
    }
}

static void on_poll(uv_poll_t *h, int status, int events);

/* Watches the connection's socket for `events`; re-creates the watch when
 * libpq moved to another socket (PQconnectPoll may). 0 or -1. */
static int watch(struct conn *c, int events)
{
    int fd = PQsocket(c->pg);
    if (fd < 0)
        return -1;
    if (c->poll && c->poll_fd != fd)
        unwatch(c);
    if (!c->poll) {
        c->poll = malloc(sizeof *c->poll);
        if (!c->poll)
            return -1;
        if (uv_poll_init(c->pool->loop, c->poll, fd) != 0) {
            free(c->poll);
            c->poll = NULL;
            return -1;
        }
        c->poll->data = c;
        c->pool->polls++;
        c->poll_fd = fd;
        c->poll_events = 0;
    }
    if (c->poll_events != events) {
        if (uv_poll_start(c->poll, events, on_poll) != 0)
            return -1;
        c->poll_events = events;
    }
    return 0;
}

/* -- connection life ---------------------------------------------------- */

static void on_retry(uv_timer_t *t)
{
    struct conn *c = t->data;
    conn_start(c);
}

/* Closes the libpq connection; with retry, opens it again after
 * `delay_ms`. */
static void conn_drop(struct conn *c, int retry, int delay_ms)
{
    unwatch(c); /* before PQfinish closes the socket */
    if (c->last) {
        PQclear(c->last);
        c->last = NULL;
    }
    if (c->pg) {
        PQfinish(c->pg);
        c->pg = NULL;
    }
    ms__pg_prepared_reset(c);
    c->pipe_on = 0;
    uv_timer_stop(&c->timer);
    c->state = C_DOWN;
    if (retry && !c->pool->closing)
        uv_timer_start(&c->timer, on_retry, (uint64_t)delay_ms, 0);
}

/* A connection attempt failed: try again after the backoff, doubled for
 * the next failure up to backoff_max_ms. */
static void attempt_failed(struct conn *c, const char *why)
{
    struct ms_pg *pg = c->pool;
    char msg[MS_PG_MESSAGE_MAX];
    copy_text(msg, sizeof msg, why);
    int delay = c->backoff_ms;
    snprintf(pg->last_error, sizeof pg->last_error,
             "cannot connect to PostgreSQL: %.470s", msg);
    c->failures++;
    if (ms_log_due(c->failures))
        log_conn(MS_LOG_WARN, c, "cannot connect to PostgreSQL: %.470s", msg);
    c->backoff_ms = c->backoff_ms > pg->cfg.backoff_max_ms / 2
                        ? pg->cfg.backoff_max_ms
                        : c->backoff_ms * 2;
    conn_drop(c, 1, delay);
}

static void on_connect_timeout(uv_timer_t *t)
{
    struct conn *c = t->data;
    attempt_failed(c, "the connection attempt timed out");
}

/* The job on `c` ends with the connection: fails it with MS_PG_ECONN
 * (or the error kept) and opens the connection again. */
static void conn_lost(struct conn *c, const char *why)
{
    struct ms_pg *pg = c->pool;
    struct job *j = c->job;
    char msg[MS_PG_MESSAGE_MAX];
    char state[6];
    int index = c->err ? c->err_index : -1;
    copy_text(msg, sizeof msg, c->err ? c->message : why);
    memcpy(state, c->sqlstate, sizeof state);
    log_conn(MS_LOG_WARN, c, "PostgreSQL connection lost: %s", msg);
    c->job = NULL;
    c->failures = 0;
    c->backoff_ms = pg->cfg.backoff_min_ms;
    conn_drop(c, 1, pg->cfg.backoff_min_ms);
    if (j)
        job_fail(pg, j, MS_PG_ECONN, state, msg, j->tx ? index : -1);
    pump(pg);
}

static void connect_step(struct conn *c)
{
    PostgresPollingStatusType st = PQconnectPoll(c->pg);
    /* libpq may have closed its socket and opened another under the same
     * number (next address, SSL or GSS fallback): the old watch would
     * then see nothing, so each step watches afresh */
    unwatch(c);
    if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING) {
        if (watch(c, st == PGRES_POLLING_READING ? UV_READABLE
                                                 : UV_WRITABLE) != 0)
            attempt_failed(c, "cannot watch the socket");
        return;
    }
    if (st == PGRES_POLLING_OK) {
        uv_timer_stop(&c->timer);
        if (watch(c, UV_READABLE) != 0) {
            attempt_failed(c, "cannot watch the socket");
            return;
        }
        if (c->failures)
            log_conn(MS_LOG_INFO, c, "%s", "PostgreSQL connection open");
        c->failures = 0;
        c->backoff_ms = c->pool->cfg.backoff_min_ms;
        c->state = C_IDLE;
        pump(c->pool);
        return;
    }
    attempt_failed(c, PQerrorMessage(c->pg));
}

static void conn_start(struct conn *c)
{
    struct ms_pg *pg = c->pool;
    const char *keys[] = {"dbname", "options", NULL};
    const char *vals[] = {pg->conninfo, pg->options, NULL};
    c->pg = PQconnectStartParams(keys, vals, 1);
    c->state = C_CONNECTING;
    pg->attempts++;
    if (!c->pg) {
        attempt_failed(c, "out of memory");
        return;
    }
    if (PQstatus(c->pg) == CONNECTION_BAD) {
        attempt_failed(c, PQerrorMessage(c->pg));
        return;
    }
    if (PQsetnonblocking(c->pg, 1) != 0) {
        attempt_failed(c, PQerrorMessage(c->pg));
        return;
    }
    uv_timer_start(&c->timer, on_connect_timeout,
                   (uint64_t)pg->cfg.connect_timeout_ms, 0);
    /* libpq's contract: start as if PQconnectPoll said WRITING */
    if (watch(c, UV_WRITABLE) != 0)
        attempt_failed(c, "cannot watch the socket");
}

/* -- running jobs -------------------------------------------------------- */

static int steps(const struct job *j) { return j->tx ? j->n + 2 : j->n; }

/* Sends step `c->step` (or ROLLBACK) of the connection's job. */
static void send_step(struct conn *c)
{
    struct job *j = c->job;
    const char *sql;
    int np = 0;
    const char *const *params = NULL;
    if (c->rolling_back) {
        sql = "ROLLBACK";
    } else if (j->tx && c->step == 0) {
        sql = "BEGIN";
    } else if (j->tx && c->step == j->n + 1) {
        sql = "COMMIT";
    } else {
        const struct stmt *s = &j->st[j->tx ? c->step - 1 : c->step];
        sql = s->sql;
        np = s->nparams;
        params = (const char *const *)s->params;
    }
    if (!PQsendQueryParams(c->pg, sql, np, NULL, params, NULL, NULL, 0)) {
        conn_lost(c, PQerrorMessage(c->pg));
        return;
    }
    int f = PQflush(c->pg);
    if (f < 0 || watch(c, f ? UV_READABLE | UV_WRITABLE : UV_READABLE))
        conn_lost(c, PQerrorMessage(c->pg));
}

/* The job on `c` is over: hands its outcome to its callback. The outcome
 * is copied out of `c` first: the callback may start a new job on it. */
static void finish(struct conn *c)
{
    struct ms_pg *pg = c->pool;
    struct job *j = c->job;
    char state[6], msg[MS_PG_MESSAGE_MAX];
    memcpy(state, c->sqlstate, sizeof state);
    memcpy(msg, c->message, sizeof msg);
    PGresult *res = c->err ? NULL : c->last;
    if (c->err && c->last)
        PQclear(c->last);
    c->last = NULL;
    struct ms_pg_result r = {c->err, c->err ? c->err_index : -1, state,
                             c->err ? msg : "", res, 0, NULL};
    if (!c->err && j->nunits) {
        r.nunits = j->nunits;
        r.units = j->units;
    }
    c->pipe_on = 0;
    c->job = NULL;
    c->state = C_IDLE;
    job_done(pg, j, &r);
    if (res)
        PQclear(res);
    /* the connection is free: the next queued job starts on the next
     * loop turn (not inside this callback's caller), not at the next
     * tick; a burst of jobs runs at the pace of the server */
    if (pg->head && !pg->closing && !uv_is_active((uv_handle_t *)&pg->kick))
        uv_timer_start(&pg->kick, on_kick, 0, 0);
}

/* One step's results are all read: the next step, ROLLBACK, or the end. */
static void step_done(struct conn *c)
{
    struct job *j = c->job;
    if (c->rolling_back) {
        finish(c);
        return;
    }
    if (c->err) {
        /* BEGIN or COMMIT that failed left no transaction open */
        if (j->tx && c->step > 0 && c->step <= j->n) {
            c->rolling_back = 1;
            send_step(c);
        } else {
            finish(c);
        }
        return;
    }
    if (++c->step < steps(j)) {
        send_step(c);
        return;
    }
    finish(c);
}

/* Keeps one result of the current step. */
static void take_result(struct conn *c, PGresult *res)
{
    ExecStatusType st = PQresultStatus(res);
    struct job *j = c->job;
    int user = !c->rolling_back &&
               !(j->tx && (c->step == 0 || c->step == j->n + 1));
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ||
        st == PGRES_EMPTY_QUERY) {
        if (user) {
            if (c->last)
                PQclear(c->last);
            c->last = res;
            return;
        }
    } else if (!c->err && !c->rolling_back) {
        const char *ss = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        copy_text(c->sqlstate, sizeof c->sqlstate, ss);
        copy_text(c->message, sizeof c->message, PQresultErrorMessage(res));
        /* the server's statement_timeout cancels with 57014 */
        c->err = ss && strcmp(ss, "57014") == 0 ? MS_ETIMEDOUT
                                                : MS_PG_EQUERY;
        c->err_index = j->tx ? (c->step == 0 ? -1 : c->step - 1) : -1;
        if (c->err_index >= j->n)
            c->err_index = -1; /* COMMIT */
    }
    PQclear(res);
}

static void on_readable(struct conn *c)
{
    if (!PQconsumeInput(c->pg)) {
        conn_lost(c, PQerrorMessage(c->pg));
        return;
    }
    PGnotify *n;
    while ((n = PQnotifies(c->pg)))
        PQfreemem(n);
    if (c->state == C_IDLE) {
        if (PQstatus(c->pg) == CONNECTION_BAD)
            conn_lost(c, PQerrorMessage(c->pg));
        return;
    }
    if (c->pipe_on) {
        ms__pg_pipe_read(c);
        return;
    }
    while (c->state == C_BUSY && !PQisBusy(c->pg)) {
        PGresult *res = PQgetResult(c->pg);
        if (res) {
            take_result(c, res);
            continue;
        }
        if (PQstatus(c->pg) == CONNECTION_BAD) {
            conn_lost(c, PQerrorMessage(c->pg));
            return;
        }
        struct conn *keep = c;
        step_done(keep);
        /* a new job (or step) was sent: its results come later */
        break;
    }
    if (c->state != C_DOWN && c->pg && PQstatus(c->pg) == CONNECTION_BAD)
        conn_lost(c, PQerrorMessage(c->pg));
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;
    if (status < 0) {
        /* a socket error (POLLERR): libuv has stopped the watch. Let
         * libpq read what the server sent last (its FATAL message), then
         * give the connection up if it still looks alive. */
        c->poll_events = 0;
        if (c->state == C_CONNECTING) {
            connect_step(c);
            return;
        }
        if (c->state == C_BUSY || c->state == C_IDLE)
            on_readable(c);
        if (c->state == C_BUSY || c->state == C_IDLE)
            conn_lost(c, "socket error");
        return;
    }
    if (c->state == C_CONNECTING) {
        connect_step(c);
        return;
    }
    if (c->state == C_BUSY && (events & UV_WRITABLE)) {
        int f = PQflush(c->pg);
        if (f < 0) {
            conn_lost(c, PQerrorMessage(c->pg));
            return;
        }
        if (f == 0 && watch(c, UV_READABLE) != 0) {
            conn_lost(c, "cannot watch the socket");
            return;
        }
    }
    if ((events & UV_READABLE) && (c->state == C_BUSY || c->state == C_IDLE))
        on_readable(c);
}

/* Starts queued jobs on idle connections. */
static void pump(struct ms_pg *pg)
{
    for (int i = 0; i < pg->cfg.connections && pg->head; i++) {
        struct conn *c = &pg->conns[i];
        if (c->state != C_IDLE)
            continue;
        struct job *j = pg->head;
        pg->head = j->next;
        if (!pg->head)
            pg->tail = NULL;
        pg->queued--;
        j->next = NULL;
        c->job = j;
        c->state = C_BUSY;
        c->step = 0;
        c->rolling_back = 0;
        c->pipe_on = 0;
        c->err = 0;
        c->err_index = -1;
        c->sqlstate[0] = '\0';
        c->message[0] = '\0';
        if (j->nunits)
            ms__pg_pipe_start(c);
        else
            send_step(c);
    }
}

/* -- deadlines ----------------------------------------------------------- */

static void on_tick(uv_timer_t *t)
{
    struct ms_pg *pg = t->data;
    uint64_t now = uv_now(pg->loop);
    struct job *expired = NULL, **tailp = &expired;
    /* queued jobs past their deadline leave the queue first... */
    struct job **pp = &pg->head, *j;
    pg->tail = NULL;
    while ((j = *pp)) {
        if (j->deadline_ms <= now) {
            *pp = j->next;
            j->next = NULL;
            *tailp = j;
            tailp = &j->next;
            pg->queued--;
        } else {
            pg->tail = j;
            pp = &j->next;
        }
    }
    int up = ms_pg_connected(pg);
    while ((j = expired)) {
        expired = j->next;
        /* with no connection up, say why the last attempt failed */
        if (up)
            job_fail(pg, j, MS_ETIMEDOUT, "",
                     "no PostgreSQL connection took the job before its "
                     "deadline", -1);
        else
            job_fail(pg, j, MS_PG_ECONN, "", pg->last_error, -1);
    }
    /* ...then running ones: their connection is dropped */
    for (int i = 0; i < pg->cfg.connections; i++) {
        struct conn *c = &pg->conns[i];
        if (c->state != C_BUSY || c->job->deadline_ms > now)
            continue;
        j = c->job;
        c->job = NULL;
        log_conn(MS_LOG_WARN, c, "%s",
                 "a job passed its deadline: dropping its connection");
        conn_drop(c, 1, 0);
        c->backoff_ms = pg->cfg.backoff_min_ms;
        job_fail(pg, j, MS_ETIMEDOUT, "",
                 "the statement passed its deadline: the connection was "
                 "dropped", -1);
    }
    if (pg->jobs == 0)
        uv_timer_stop(&pg->tick);
    pump(pg);
}

/* -- for pg_pipe.c ----------------------------------------------------- */

void ms__pg_conn_lost(struct conn *c, const char *why) { conn_lost(c, why); }
int ms__pg_watch(struct conn *c, int events) { return watch(c, events); }
void ms__pg_finish(struct conn *c) { finish(c); }
void ms__pg_copy_text(char *dst, size_t cap, const char *src)
{
    copy_text(dst, cap, src);
}

void ms__pg_rollback(struct conn *c)
{
    c->pipe_on = 0;
    c->rolling_back = 1;
    send_step(c);
}

/* -- public -------------------------------------------------------------- */

int ms_pg_new(uv_loop_t *loop, const struct ms_pg_config *cfg,
              struct ms_pg **out, char *err, size_t err_len)
{
    struct ms_pg_config d = *cfg;
    char dummy[8];
    if (!err) {
        err = dummy;
        err_len = sizeof dummy;
    }
    if (err_len)
        err[0] = '\0';
    if (!d.conninfo) {
        snprintf(err, err_len, "no connection string");
        return MS_EINVAL;
    }
    if (!d.connections)
        d.connections = 2;
    if (!d.queue_max)
        d.queue_max = 1024;
    if (!d.statement_timeout_ms)
        d.statement_timeout_ms = 5000;
    if (!d.idle_tx_timeout_ms)
        d.idle_tx_timeout_ms = 5000;
    if (!d.deadline_ms)
        d.deadline_ms = d.statement_timeout_ms + 2000;
    if (!d.connect_timeout_ms)
        d.connect_timeout_ms = 5000;
    if (!d.backoff_min_ms)
        d.backoff_min_ms = 100;
    if (!d.backoff_max_ms)
        d.backoff_max_ms = 5000;
    if (d.connections < 1 || d.connections > MS_PG_MAX_CONNECTIONS ||
        d.queue_max < 1 || d.queue_max > MS_PG_MAX_QUEUE ||
        d.statement_timeout_ms < 1 || d.idle_tx_timeout_ms < 1 ||
        d.deadline_ms < 1 || d.connect_timeout_ms < 1 ||
        d.backoff_min_ms < 1 || d.backoff_max_ms < d.backoff_min_ms) {
        snprintf(err, err_len, "a pool setting is out of its range");
        return MS_EINVAL;
    }
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(d.conninfo, &perr);
    if (!opts) {
        copy_text(err, err_len, perr ? perr : "out of memory");
        int rc = perr ? MS_EINVAL : MS_ENOMEM;
        PQfreemem(perr);
        return rc;
    }
    PQconninfoFree(opts);

    struct ms_pg *pg = calloc(1, sizeof *pg);
    char masked[512];
    ms_pg_mask_conninfo(d.conninfo, masked, sizeof masked);
    if (!pg || !(pg->conninfo = ms_pg_dupstr(d.conninfo)) ||
        !(pg->masked = ms_pg_dupstr(masked)) ||
        !(pg->conns = calloc((size_t)d.connections, sizeof *pg->conns))) {
        if (pg) {
            free(pg->conninfo);
            free(pg->masked);
        }
        free(pg);
        return MS_ENOMEM;
    }
    pg->loop = loop;
    pg->cfg = d;
    pg->cfg.conninfo = pg->conninfo;
    snprintf(pg->last_error, sizeof pg->last_error,
             "no connection to PostgreSQL yet");
    snprintf(pg->options, sizeof pg->options,
             "-c statement_timeout=%d "
             "-c idle_in_transaction_session_timeout=%d",
             d.statement_timeout_ms, d.idle_tx_timeout_ms);
    uv_timer_init(loop, &pg->tick);
    pg->tick.data = pg;
    uv_timer_init(loop, &pg->kick);
    pg->kick.data = pg;
    for (int i = 0; i < d.connections; i++) {
        struct conn *c = &pg->conns[i];
        c->pool = pg;
        c->backoff_ms = d.backoff_min_ms;
        uv_timer_init(loop, &c->timer);
        c->timer.data = c;
        c->state = C_DOWN;
        conn_start(c);
    }
    ms_log(MS_LOG_INFO, NULL, "PostgreSQL pool of %d connection(s) to %s",
           d.connections, masked);
    *out = pg;
    return 0;
}

static void on_kick(uv_timer_t *t) { pump(t->data); }

/* Queues a job made by the callers below (takes ownership of it). */
static int enqueue(struct ms_pg *pg, struct job *j)
{
    if (pg->closing) {
        job_free(j);
        return MS_ECANCELED;
    }
    if (pg->queued >= pg->cfg.queue_max) {
        job_free(j);
        return MS_PG_EFULL;
    }
    j->deadline_ms = uv_now(pg->loop) + (uint64_t)pg->cfg.deadline_ms;
    if (pg->tail)
        pg->tail->next = j;
    else
        pg->head = j;
    pg->tail = j;
    pg->queued++;
    if (pg->jobs++ == 0)
        uv_timer_start(&pg->tick, on_tick, TICK_MS, TICK_MS);
    /* started on the next loop turn, never here: no callback runs inside
     * ms_pg_query, and a callback that queues is not re-entered */
    if (!uv_is_active((uv_handle_t *)&pg->kick))
        uv_timer_start(&pg->kick, on_kick, 0, 0);
    return 0;
}

static int stmt_set(struct stmt *s, const char *sql, int np,
                    const char *const *params)
{
    s->nparams = np;
    if (!(s->sql = ms_pg_dupstr(sql)))
        return MS_ENOMEM;
    if (np == 0)
        return 0;
    if (!(s->params = calloc((size_t)np, sizeof *s->params)))
        return MS_ENOMEM;
    for (int i = 0; i < np; i++)
        if (params[i] && !(s->params[i] = ms_pg_dupstr(params[i])))
            return MS_ENOMEM;
    return 0;
}

/* Makes and queues a job of n statements; `unit_of` (NULL: none) gives
 * each statement's unit in a group of `nunits`. */
static int make_job(struct ms_pg *pg, int tx, int n, const char *const *sql,
                    const int *nparams, const char *const *const *params,
                    const int *unit_of, int nunits, ms_pg_done_cb cb,
                    void *data)
{
    int max = unit_of ? MS_PG_MAX_GROUP_STATEMENTS : MS_PG_MAX_STATEMENTS;
    if (!cb || n < 1 || n > max)
        return MS_EINVAL;
    for (int i = 0; i < n; i++) {
        int np = nparams ? nparams[i] : 0;
        if (!sql[i] || np < 0 || np > MS_PG_MAX_PARAMS ||
            (np && (!params || !params[i])))
            return MS_EINVAL;
        size_t bytes = strnlen(sql[i], MS_PG_STATEMENT_MAX + 1);
        for (int p = 0; p < np && bytes <= MS_PG_STATEMENT_MAX; p++)
            if (params[i][p])
                bytes += strnlen(params[i][p], MS_PG_STATEMENT_MAX + 1);
        if (bytes > MS_PG_STATEMENT_MAX)
            return MS_E2BIG;
    }
    if (pg->closing)
        return MS_ECANCELED;
    struct job *j = calloc(1, sizeof *j);
    if (!j || !(j->st = calloc((size_t)n, sizeof *j->st))) {
        free(j);
        return MS_ENOMEM;
    }
    j->tx = tx;
    j->n = n;
    j->cb = cb;
    j->data = data;
    if (unit_of) {
        j->nunits = nunits;
        j->units = calloc((size_t)nunits, sizeof *j->units);
        j->unit_start = calloc((size_t)nunits + 1, sizeof *j->unit_start);
        if (!j->units || !j->unit_start) {
            job_free(j);
            return MS_ENOMEM;
        }
        for (int u = 0; u < nunits; u++)
            j->units[u].index = -1;
        for (int i = n - 1; i >= 0; i--)
            j->unit_start[unit_of[i]] = i;
        j->unit_start[nunits] = n;
    }
    for (int i = 0; i < n; i++) {
        j->st[i].unit = unit_of ? unit_of[i] : -1;
        int np = nparams ? nparams[i] : 0;
        if (stmt_set(&j->st[i], sql[i], np, np ? params[i] : NULL) != 0) {
            job_free(j);
            return MS_ENOMEM;
        }
    }
    return enqueue(pg, j);
}

int ms_pg_query(struct ms_pg *pg, const char *sql, int nparams,
                const char *const *params, ms_pg_done_cb cb, void *data)
{
    const char *const sqls[1] = {sql};
    const int nps[1] = {nparams};
    const char *const *const ps[1] = {params};
    if (nparams < 0 || (nparams > 0 && !params))
        return MS_EINVAL;
    return make_job(pg, 0, 1, sqls, nps, ps, NULL, 0, cb, data);
}

int ms_pg_transaction(struct ms_pg *pg, int n, const char *const *sql,
                      const int *nparams, const char *const *const *params,
                      ms_pg_done_cb cb, void *data)
{
    if (!sql)
        return MS_EINVAL;
    return make_job(pg, 1, n, sql, nparams, params, NULL, 0, cb, data);
}

int ms_pg_group(struct ms_pg *pg, int nunits, const int *unit_n,
                const char *const *sql, const int *nparams,
                const char *const *const *params, ms_pg_done_cb cb,
                void *data)
{
    if (!sql || !unit_n || nunits < 1 || nunits > MS_PG_MAX_GROUP_STATEMENTS)
        return MS_EINVAL;
    int total = 0, stmts = 0;
    for (int u = 0; u < nunits; u++) {
        if (unit_n[u] < 1 || unit_n[u] > MS_PG_MAX_STATEMENTS)
            return MS_EINVAL;
        total += unit_n[u] + 1; /* its SAVEPOINT counted */
        stmts += unit_n[u];
        if (total > MS_PG_MAX_GROUP_STATEMENTS)
            return MS_EINVAL;
    }
    int *gu = malloc((size_t)stmts * sizeof *gu);
    if (!gu)
        return MS_ENOMEM;
    for (int u = 0, k = 0; u < nunits; u++)
        for (int m = 0; m < unit_n[u]; m++)
            gu[k++] = u;
    int rc = make_job(pg, 1, stmts, sql, nparams, params, gu, nunits, cb,
                      data);
    free(gu);
    return rc;
}

static void maybe_free(struct ms_pg *pg)
{
    if (!pg->closing || pg->pending_closes > 0 || pg->polls > 0)
        return;
    ms_pg_close_cb cb = pg->close_cb;
    void *data = pg->close_data;
    for (int i = 0; i < pg->cfg.connections; i++)
        free(pg->conns[i].pipe);
    free(pg->conns);
    free(pg->conninfo);
    free(pg->masked);
    free(pg);
    if (cb)
        cb(data);
}

static void closed_one(uv_handle_t *h)
{
    struct ms_pg *pg = h->data;
    pg->pending_closes--;
    maybe_free(pg);
}

int ms_pg_close(struct ms_pg *pg, ms_pg_close_cb cb, void *data)
{
    if (pg->in_cb)
        return MS_EBUSY;
    if (pg->closing)
        return MS_EBUSY;
    pg->closing = 1;
    pg->close_cb = cb;
    pg->close_data = data;
    struct job *j;
    while ((j = pg->head)) {
        pg->head = j->next;
        pg->queued--;
        job_fail(pg, j, MS_ECANCELED, "", "the pool is closing", -1);
    }
    pg->tail = NULL;
    for (int i = 0; i < pg->cfg.connections; i++) {
        struct conn *c = &pg->conns[i];
        j = c->job;
        c->job = NULL;
        conn_drop(c, 0, 0);
        if (j)
            job_fail(pg, j, MS_ECANCELED, "", "the pool is closing", -1);
    }
    pg->pending_closes = pg->cfg.connections + 2;
    uv_timer_stop(&pg->tick);
    uv_close((uv_handle_t *)&pg->kick, closed_one);
    for (int i = 0; i < pg->cfg.connections; i++) {
        pg->conns[i].timer.data = pg;
        uv_close((uv_handle_t *)&pg->conns[i].timer, closed_one);
    }
    pg->tick.data = pg;
    uv_close((uv_handle_t *)&pg->tick, closed_one);
    return 0;
}

int ms_pg_queued(const struct ms_pg *pg) { return pg->queued; }

unsigned long long ms_pg_attempts(const struct ms_pg *pg)
{
    return pg->attempts;
}

int ms_pg_connected(const struct ms_pg *pg)
{
    int n = 0;
    for (int i = 0; i < pg->cfg.connections; i++)
        n += pg->conns[i].state == C_IDLE || pg->conns[i].state == C_BUSY;
    return n;
}

int ms_pg_result_error(const struct ms_pg_result *r) { return r->err; }
const char *ms_pg_result_sqlstate(const struct ms_pg_result *r)
{
    return r->sqlstate;
}
const char *ms_pg_result_message(const struct ms_pg_result *r)
{
    return r->message;
}
int ms_pg_result_index(const struct ms_pg_result *r) { return r->index; }
int ms_pg_result_unit_error(const struct ms_pg_result *r, int unit)
{
    if (r->err || !r->units || unit < 0 || unit >= r->nunits)
        return r->err ? r->err : MS_EINVAL;
    return r->units[unit].err;
}
int ms_pg_result_unit_index(const struct ms_pg_result *r, int unit)
{
    if (r->err || !r->units || unit < 0 || unit >= r->nunits)
        return -1;
    return r->units[unit].index;
}
const char *ms_pg_result_unit_sqlstate(const struct ms_pg_result *r,
                                       int unit)
{
    if (r->err || !r->units || unit < 0 || unit >= r->nunits)
        return r->sqlstate;
    return r->units[unit].sqlstate;
}
const char *ms_pg_result_unit_message(const struct ms_pg_result *r,
                                      int unit)
{
    if (r->err || !r->units || unit < 0 || unit >= r->nunits)
        return r->message;
    return r->units[unit].message;
}
int ms_pg_result_rows(const struct ms_pg_result *r)
{
    return r->res ? PQntuples(r->res) : 0;
}
int ms_pg_result_cols(const struct ms_pg_result *r)
{
    return r->res ? PQnfields(r->res) : 0;
}
const char *ms_pg_result_colname(const struct ms_pg_result *r, int col)
{
    if (!r->res || col < 0 || col >= PQnfields(r->res))
        return NULL;
    return PQfname(r->res, col);
}
const char *ms_pg_result_value(const struct ms_pg_result *r, int row,
                               int col)
{
    if (!r->res || row < 0 || col < 0 || row >= PQntuples(r->res) ||
        col >= PQnfields(r->res) || PQgetisnull(r->res, row, col))
        return NULL;
    return PQgetvalue(r->res, row, col);
}
long ms_pg_result_affected(const struct ms_pg_result *r)
{
    const char *t = r->res ? PQcmdTuples(r->res) : "";
    return *t ? strtol(t, NULL, 10) : 0;
}

const char *ms_pg_errname(int code)
{
    return ms_errname(code);
}

const char *ms_pg_strerror(int code)
{
    return ms_strerror(code);
}

void ms_pg_mask_conninfo(const char *conninfo, char *out, size_t out_len)
{
    if (!out_len)
        return;
    out[0] = '\0';
    PQconninfoOption *opts = conninfo ? PQconninfoParse(conninfo, NULL)
                                      : NULL;
    if (!opts) {
        snprintf(out, out_len, "(unparsable connection string)");
        return;
    }
    size_t at = 0;
    for (PQconninfoOption *o = opts; o->keyword && at + 1 < out_len; o++) {
        if (!o->val)
            continue;
        int masked = strcmp(o->keyword, "password") == 0;
        const char *v = masked ? "***" : o->val;
        int n = snprintf(out + at, out_len - at, "%s%s='", at ? " " : "",
                         o->keyword);
        if (n < 0 || (size_t)n >= out_len - at) {
            at = out_len - 1;
            break;
        }
        at += (size_t)n;
        for (; *v && at + 2 < out_len; v++) {
            if (*v == '\'' || *v == '\\')
                out[at++] = '\\';
            out[at++] = *v;
        }
        if (at + 1 < out_len)
            out[at++] = '\'';
    }
    out[at < out_len ? at : out_len - 1] = '\0';
    PQconninfoFree(opts);
}
