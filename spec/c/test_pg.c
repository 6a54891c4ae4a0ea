/* test_pg.c -- the PostgreSQL pool (runtime/io/pg.h) against a throwaway
 * server that spec/helpers/pg_server.sh starts on 127.0.0.1 and that this
 * test stops (by its folder; the script stops the postmaster by PID) and
 * removes. A server that cannot start fails the test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "free_port.h"
#include "../../runtime/core/errors.h"
#include "../../runtime/core/log.h"
#include "../../runtime/io/pg.h"

#include "pg_harness.h"

static struct ms_pg *close_from_cb_pool;
static int close_from_cb_rc;

static void on_done_close(const struct ms_pg_result *r, void *data)
{
    pg_on_done(r, data);
    close_from_cb_rc = ms_pg_close(close_from_cb_pool, NULL, NULL);
}

/* -- the cases ---------------------------------------------------------- */

static void test_config(void)
{
    struct ms_pg_config cfg = {0};
    struct ms_pg *pg = NULL;
    char err[256] = "";
    cfg.conninfo = "host='unterminated";
    CHECK(ms_pg_new(loop, &cfg, &pg, err, sizeof err) == MS_EINVAL);
    CHECK(err[0] != '\0');
    cfg.conninfo = conninfo;
    cfg.connections = MS_PG_MAX_CONNECTIONS + 1;
    CHECK(ms_pg_new(loop, &cfg, &pg, err, sizeof err) == MS_EINVAL);
    cfg.connections = 1;
    cfg.queue_max = -1;
    CHECK(ms_pg_new(loop, &cfg, &pg, err, sizeof err) == MS_EINVAL);
    cfg.conninfo = NULL;
    cfg.queue_max = 0;
    CHECK(ms_pg_new(loop, &cfg, &pg, err, sizeof err) == MS_EINVAL);

    char masked[512];
    ms_pg_mask_conninfo(conninfo, masked, sizeof masked);
    CHECK(strstr(masked, password) == NULL);
    CHECK(strstr(masked, "password='***'") != NULL);
    CHECK(strstr(masked, port) != NULL);
    ms_pg_mask_conninfo("postgresql://ms:s3cr3t-pw@127.0.0.1:1/db", masked,
                        sizeof masked);
    CHECK(strstr(masked, "s3cr3t-pw") == NULL);
    CHECK(strstr(masked, "user='ms'") != NULL);
    ms_pg_mask_conninfo("host='x", masked, sizeof masked);
    CHECK(strstr(masked, "unparsable") != NULL);
    char tiny[8];
    ms_pg_mask_conninfo(conninfo, tiny, sizeof tiny);
    CHECK(strlen(tiny) < sizeof tiny);
}

static void test_queries(void)
{
    struct ms_pg *pg = pg_pool(conninfo, 0, 0, 2, 0);
    struct pg_got g;
    if (!pg)
        return;
    const char *p[] = {"41", "h\xc3\xa9 'x'"};
    pg_run(pg, "SELECT $1::int + 1 AS n, $2::text AS t, NULL AS z", 2, p, &g,
        10000);
    CHECK(g.err == 0);
    CHECK(g.rows == 1 && g.cols == 3);
    CHECK(strcmp(g.v0, "42") == 0);
    CHECK(strcmp(g.v1, "h\xc3\xa9 'x'") == 0);
    CHECK(strcmp(g.name0, "n") == 0);
    CHECK(g.null2);
    CHECK(ms_pg_connected(pg) >= 1);

    /* an error with its SQLSTATE; the connection stays usable */
    pg_run(pg, "SELECT * FROM no_such_table", 0, NULL, &g, 5000);
    CHECK(g.err == MS_PG_EQUERY);
    CHECK(strcmp(g.sqlstate, "42P01") == 0);
    CHECK(strstr(g.msg, "no_such_table") != NULL);
    CHECK(strcmp(ms_pg_errname(g.err), "db_query") == 0);
    pg_run(pg, "SELECT 7", 0, NULL, &g, 5000);
    CHECK(g.err == 0 && strcmp(g.v0, "7") == 0);

    /* a transaction commits as a whole... */
    const char *sql[] = {"CREATE TABLE kv (k int PRIMARY KEY, v text)",
                         "INSERT INTO kv VALUES ($1, $2)",
                         "INSERT INTO kv VALUES ($1, $2)"};
    const int np[] = {0, 2, 2};
    const char *a[] = {"1", "one"}, *b[] = {"2", "two"}, *c[] = {"3", "x"};
    const char *const *ps[] = {NULL, a, b};
    memset(&g, 0, sizeof g);
    CHECK(ms_pg_transaction(pg, 3, sql, np, ps, pg_on_done, &g) == 0);
    CHECK(wait_for(&g.done, 5000));
    CHECK(g.err == 0 && g.affected == 1 && g.index == -1);
    /* ...or not at all: the second insert fails, the first is undone */
    const char *const *ps2[] = {NULL, c, a};
    memset(&g, 0, sizeof g);
    CHECK(ms_pg_transaction(pg, 2, sql + 1, np + 1, ps2 + 1, pg_on_done, &g)
          == 0);
    CHECK(wait_for(&g.done, 5000));
    CHECK(g.err == MS_PG_EQUERY);
    CHECK(strcmp(g.sqlstate, "23505") == 0);
    CHECK(g.index == 1);
    pg_run(pg, "SELECT count(*), max(k) FROM kv", 0, NULL, &g, 5000);
    CHECK(g.err == 0 && strcmp(g.v0, "2") == 0 && strcmp(g.v1, "2") == 0);
    /* no connection was left inside a transaction (ROLLBACK was sent) */
    pg_run(pg, "SELECT count(*) FROM pg_stat_activity WHERE "
            "state LIKE 'idle in transaction%'", 0, NULL, &g, 5000);
    CHECK(g.err == 0 && strcmp(g.v0, "0") == 0);
    /* a callback never runs inside the submit, and may not close */
    memset(&g, 0, sizeof g);
    close_from_cb_rc = 0;
    close_from_cb_pool = pg;
    CHECK(ms_pg_query(pg, "SELECT 1", 0, NULL, on_done_close, &g) == 0);
    CHECK(g.done == 0);
    CHECK(wait_for(&g.done, 5000));
    CHECK(close_from_cb_rc == MS_EBUSY);
    pg_run(pg, "SELECT 8", 0, NULL, &g, 5000);
    CHECK(g.err == 0 && strcmp(g.v0, "8") == 0);
    /* a statement above its size limit is refused at once */
    char *big = malloc(MS_PG_STATEMENT_MAX);
    if (big) {
        memset(big, 'x', MS_PG_STATEMENT_MAX - 1);
        big[MS_PG_STATEMENT_MAX - 1] = '\0';
        const char *bp[] = {big, "y"};
        CHECK(ms_pg_query(pg, "SELECT $1, $2", 2, bp, pg_on_done, &g)
              == MS_E2BIG);
        free(big);
    }
    /* misuse is refused at once, without a callback */
    CHECK(ms_pg_query(pg, NULL, 0, NULL, pg_on_done, &g) == MS_EINVAL);
    CHECK(ms_pg_query(pg, "SELECT 1", MS_PG_MAX_PARAMS + 1, p, pg_on_done, &g)
          == MS_EINVAL);
    CHECK(ms_pg_transaction(pg, 0, sql, np, ps, pg_on_done, &g) == MS_EINVAL);
    pg_close_pool(pg);
}

/* a connection string with two addresses, the first refused: libpq
 * moves on to the second (on 127.0.0.1 the refusal is usually seen inside
 * one PQconnectPoll, so this does not prove that the pool re-watches a
 * socket libpq replaced between two steps; pg.c does so anyway) */
static void test_second_address(void)
{
    char ci[700];
    struct pg_got g;
    snprintf(ci, sizeof ci, "host=127.0.0.1,127.0.0.1 port=%d,%s user=ms "
             "password=%s dbname=moonshard_test", free_port(), port,
             password);
    struct ms_pg *pg = pg_pool(ci, 0, 3000, 1, 0);
    if (!pg)
        return;
    pg_run(pg, "SELECT 'second'", 0, NULL, &g, 8000);
    CHECK(g.err == 0 && strcmp(g.v0, "second") == 0);
    pg_close_pool(pg);
}

static void test_timeouts(void)
{
    /* the server's statement_timeout cancels a long statement */
    struct ms_pg *pg = pg_pool(conninfo, 300, 5000, 1, 0);
    struct pg_got g;
    if (!pg)
        return;
    pg_run(pg, "SELECT pg_sleep(10)", 0, NULL, &g, 8000);
    CHECK(g.err == MS_ETIMEDOUT);
    CHECK(strcmp(g.sqlstate, "57014") == 0);
    /* the idle-in-transaction timeout is set on the connection */
    pg_run(pg, "SHOW idle_in_transaction_session_timeout", 0, NULL, &g, 5000);
    CHECK(g.err == 0 && strcmp(g.v0, "5s") == 0);
    pg_close_pool(pg);

    /* a statement the server does not cancel hits the local deadline: the
     * connection is dropped and opened again */
    pg = pg_pool(conninfo, 300, 1000, 1, 0);
    if (!pg)
        return;
    const char *sql[] = {"SET LOCAL statement_timeout = 0",
                         "SELECT pg_sleep(30)"};
    memset(&g, 0, sizeof g);
    CHECK(ms_pg_transaction(pg, 2, sql, NULL, NULL, pg_on_done, &g) == 0);
    CHECK(wait_for(&g.done, 8000));
    CHECK(g.err == MS_ETIMEDOUT);
    CHECK(strcmp(g.sqlstate, "") == 0);
    CHECK(strstr(g.msg, "deadline") != NULL);
    pg_run(pg, "SELECT 'again'", 0, NULL, &g, 5000);
    CHECK(g.err == 0 && strcmp(g.v0, "again") == 0);
    pg_close_pool(pg);
}

static void test_queue_bound(void)
{
    /* the connection is not open before the loop runs: jobs queue up */
    struct ms_pg *pg = pg_pool(conninfo, 0, 0, 1, 3);
    struct pg_got g[4];
    memset(g, 0, sizeof g);
    if (!pg)
        return;
    for (int i = 0; i < 3; i++)
        CHECK(ms_pg_query(pg, "SELECT 1", 0, NULL, pg_on_done, &g[i]) == 0);
    CHECK(ms_pg_queued(pg) == 3);
    CHECK(ms_pg_query(pg, "SELECT 1", 0, NULL, pg_on_done, &g[3])
          == MS_PG_EFULL);
    CHECK(strcmp(ms_pg_errname(MS_PG_EFULL), "db_queue_full") == 0);
    CHECK(wait_for(&g[2].done, 10000));
    for (int i = 0; i < 3; i++)
        CHECK(g[i].done == 1 && g[i].err == 0);
    CHECK(g[3].done == 0);
    CHECK(ms_pg_queued(pg) == 0);

    /* closing fails what is still queued, once */
    memset(g, 0, sizeof g);
    CHECK(ms_pg_query(pg, "SELECT pg_sleep(1)", 0, NULL, pg_on_done, &g[0])
          == 0);
    CHECK(ms_pg_query(pg, "SELECT 1", 0, NULL, pg_on_done, &g[1]) == 0);
    pg_close_pool(pg);
    CHECK(g[0].done == 1 && g[0].err == MS_ECANCELED);
    CHECK(g[1].done == 1 && g[1].err == MS_ECANCELED);
}

static void test_restart(void)
{
    struct ms_pg *pg = pg_pool(conninfo, 0, 10000, 1, 0);
    struct pg_got g, g2;
    if (!pg)
        return;
    pg_run(pg, "SELECT 1", 0, NULL, &g, 10000);
    CHECK(g.err == 0);
    CHECK(server_do("pause") == 0);
    /* the open connection is gone: the job fails, clearly */
    pg_run(pg, "SELECT 2", 0, NULL, &g, 15000);
    CHECK(g.err == MS_PG_ECONN);
    if (g.err != MS_PG_ECONN)
        fprintf(stderr, "got %d %s\n", g.err, g.msg);
    CHECK(g.msg[0] != '\0');
    /* attempts fail, further and further apart: with retries every
     * 50 ms there would be about 30 in 1.5 s; the backoff (50, 100, 200,
     * then 400 ms, the cap) allows 6 */
    unsigned long long a0 = ms_pg_attempts(pg);
    idle_for(1500);
    unsigned long long tried = ms_pg_attempts(pg) - a0;
    CHECK(tried >= 2 && tried <= 10);
    if (tried < 2 || tried > 10)
        fprintf(stderr, "attempts in 1.5 s: %llu\n", tried);
    CHECK(ms_pg_connected(pg) == 0);
    memset(&g2, 0, sizeof g2);
    CHECK(ms_pg_query(pg, "SELECT 'back'", 0, NULL, pg_on_done, &g2) == 0);
    CHECK(server_do("resume") == 0);
    /* the queued job runs once a retry connects */
    CHECK(wait_for(&g2.done, 9000));
    CHECK(g2.err == 0 && strcmp(g2.v0, "back") == 0);
    CHECK(ms_pg_connected(pg) == 1);
    pg_close_pool(pg);
}

static void test_bad_login(void)
{
    char ci[600];
    struct pg_got g;
    snprintf(ci, sizeof ci, "host=127.0.0.1 port=%s user=ms "
             "password=wrong-pw-4d1c dbname=moonshard_test", port);
    struct ms_pg *pg = pg_pool(ci, 0, 1500, 1, 0);
    if (pg) {
        pg_run(pg, "SELECT 1", 0, NULL, &g, 8000);
        CHECK(g.err == MS_PG_ECONN);
        CHECK(strstr(g.msg, "password authentication failed") != NULL);
        CHECK(ms_pg_connected(pg) == 0);
        pg_close_pool(pg);
    }
    snprintf(ci, sizeof ci, "host=127.0.0.1 port=%s user=ms password=%s "
             "dbname=no_such_db", port, password);
    pg = pg_pool(ci, 0, 1500, 1, 0);
    if (pg) {
        pg_run(pg, "SELECT 1", 0, NULL, &g, 8000);
        CHECK(g.err == MS_PG_ECONN);
        CHECK(strstr(g.msg, "no_such_db") != NULL);
        CHECK(strstr(g.msg, "does not exist") != NULL);
        pg_close_pool(pg);
    }
}

int main(void)
{
    ms_log_setup("test", MS_LOG_DEBUG);
    ms_log_set_sink(sink, NULL);
    if (server_start() != 0) {
        fprintf(stderr, "test_pg: cannot start a throwaway PostgreSQL "
                        "(spec/helpers/pg_server.sh)\n");
        return 1;
    }
    atexit(server_cleanup);
    loop = uv_default_loop();
    test_config();
    test_queries();
    test_second_address();
    test_timeouts();
    test_queue_bound();
    test_restart();
    test_bad_login();
    CHECK(strstr(logbuf, password) == NULL);
    CHECK(strstr(logbuf, "wrong-pw-4d1c") == NULL);
    CHECK(strstr(logbuf, "password='***'") != NULL);
    CHECK(uv_loop_close(loop) == 0);
    server_cleanup();
    CHECK_DONE();
}
