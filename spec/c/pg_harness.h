/* pg_harness.h -- what the C tests that need PostgreSQL share: a
 * throwaway server that spec/helpers/pg_server.sh starts on 127.0.0.1
 * (a guard stops it should the test die first) and that the test stops
 * by its folder, a log sink that keeps every line (to check that no
 * password reaches the log), and running the loop until a flag is set.
 * Include once, in the test's .c file, after uv.h. */
#ifndef MS_SPEC_PG_HARNESS_H
#define MS_SPEC_PG_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static uv_loop_t *loop;
static char server_dir[512];
static char conninfo[512];
static char password[128];
static char port[16];

/* every log line, to check that no password reaches the log */
static char logbuf[1 << 16];
static size_t loglen;

static inline void sink(void *data, const char *line, size_t len)
{
    (void)data;
    fwrite(line, 1, len, stderr);
    if (loglen + len < sizeof logbuf) {
        memcpy(logbuf + loglen, line, len);
        loglen += len;
        logbuf[loglen] = '\0';
    }
}

/* -- the server ------------------------------------------------------- */

static inline void chomp(char *s) { s[strcspn(s, "\n")] = '\0'; }

static inline int server_start(void)
{
    char cmd[1024], pid[32];
    /* the guard stops the server should this test die before it does */
    snprintf(cmd, sizeof cmd, "%s start %d", MS_PG_SERVER_SH, (int)getpid());
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int ok = fgets(server_dir, sizeof server_dir, p) &&
             fgets(port, sizeof port, p) && fgets(pid, sizeof pid, p) &&
             fgets(conninfo, sizeof conninfo, p);
    if (pclose(p) != 0 || !ok)
        return -1;
    chomp(server_dir);
    chomp(port);
    chomp(conninfo);
    const char *pw = strstr(conninfo, "password=");
    if (!pw)
        return -1;
    snprintf(password, sizeof password, "%s", pw + 9);
    password[strcspn(password, " ")] = '\0';
    return 0;
}

static inline int server_do(const char *verb)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s '%s' >/dev/null", MS_PG_SERVER_SH, verb,
             server_dir);
    return system(cmd);
}

static inline void server_cleanup(void)
{
    if (server_dir[0]) {
        server_do("stop");
        server_dir[0] = '\0';
    }
}

/* -- running the loop -------------------------------------------------- */

/* uv_stop: a guard that fires in the timer phase of an iteration would
 * otherwise leave UV_RUN_ONCE polling with no timeout, for ever when the
 * pool's sockets stay quiet */
static inline void on_guard(uv_timer_t *t)
{
    *(int *)t->data = 1;
    uv_stop(t->loop);
}

/* Runs the loop until *flag is set or timeout_ms passed; returns *flag. */
static inline int wait_for(const int *flag, int timeout_ms)
{
    uv_timer_t t;
    int expired = 0;
    uv_timer_init(loop, &t);
    t.data = &expired;
    uv_timer_start(&t, on_guard, (uint64_t)timeout_ms, 0);
    while (!*flag && !expired)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return *flag;
}

static inline void idle_for(int ms)
{
    int never = 0;
    wait_for(&never, ms);
}

/* -- pools and plain SQL, for the setup and the checks ------------------ */

#include "check.h"
#include "../../runtime/io/pg.h"

static inline void pg_on_closed(void *data) { *(int *)data = 1; }

/* A pool on `ci` (0: the pool's default for the other settings). */
static inline struct ms_pg *pg_pool(const char *ci, int stmt_ms,
                                    int deadline_ms, int connections,
                                    int queue_max)
{
    struct ms_pg_config cfg = {0};
    struct ms_pg *p = NULL;
    char err[256];
    cfg.conninfo = ci;
    cfg.statement_timeout_ms = stmt_ms;
    cfg.deadline_ms = deadline_ms;
    cfg.connections = connections;
    cfg.queue_max = queue_max;
    cfg.backoff_min_ms = 50;
    cfg.backoff_max_ms = 400;
    int rc = ms_pg_new(loop, &cfg, &p, err, sizeof err);
    CHECK(rc == 0);
    if (rc != 0)
        fprintf(stderr, "ms_pg_new: %s\n", err);
    return p;
}

static inline void pg_close_pool(struct ms_pg *p)
{
    int closed = 0;
    CHECK(ms_pg_close(p, pg_on_closed, &closed) == 0);
    CHECK(wait_for(&closed, 5000));
}

/* What pg_on_done keeps of a result. */
struct pg_got {
    int done;     /* callbacks so far */
    int order;    /* when it ended, among the callbacks of a case */
    int err;
    int index;
    char sqlstate[6];
    char msg[MS_PG_MESSAGE_MAX];
    int rows, cols;
    char v0[4096], v1[64], name0[64];
    int null2;
    long affected;
};

static int pg_ended; /* callbacks ended so far (for `order`) */

static inline void pg_on_done(const struct ms_pg_result *r, void *data)
{
    struct pg_got *g = data;
    g->done++;
    g->order = ++pg_ended;
    g->err = ms_pg_result_error(r);
    g->index = ms_pg_result_index(r);
    snprintf(g->sqlstate, sizeof g->sqlstate, "%s", ms_pg_result_sqlstate(r));
    snprintf(g->msg, sizeof g->msg, "%s", ms_pg_result_message(r));
    g->rows = ms_pg_result_rows(r);
    g->cols = ms_pg_result_cols(r);
    const char *v = ms_pg_result_value(r, 0, 0);
    snprintf(g->v0, sizeof g->v0, "%s", v ? v : "(null)");
    v = ms_pg_result_value(r, 0, 1);
    snprintf(g->v1, sizeof g->v1, "%s", v ? v : "(null)");
    v = ms_pg_result_colname(r, 0);
    snprintf(g->name0, sizeof g->name0, "%s", v ? v : "");
    g->null2 = ms_pg_result_cols(r) > 2 && !ms_pg_result_value(r, 0, 2);
    g->affected = ms_pg_result_affected(r);
}

/* The query `sql` on pg, waited for (one callback). */
static inline void pg_run(struct ms_pg *pg, const char *sql, int np,
                          const char *const *params, struct pg_got *g,
                          int timeout_ms)
{
    memset(g, 0, sizeof *g);
    CHECK(ms_pg_query(pg, sql, np, params, pg_on_done, g) == 0);
    CHECK(wait_for(&g->done, timeout_ms));
    CHECK(g->done == 1);
}

/* `text` on pg, waited for and expected to succeed; returns its first
 * value ("(null)" if none), valid until the next call. */
static inline const char *pg_sql(struct ms_pg *pg, const char *text)
{
    static struct pg_got g;
    pg_run(pg, text, 0, NULL, &g, 20000);
    if (g.err)
        fprintf(stderr, "sql: %s\n", g.msg);
    CHECK(g.err == 0);
    return g.v0;
}

#endif
