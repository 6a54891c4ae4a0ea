/* test_journal.c -- the SQL of persistent entities (runtime/io/journal.h)
 * against a throwaway server that spec/helpers/pg_server.sh starts on
 * 127.0.0.1 and this test stops. The lease rows are inserted by hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "free_port.h"
#include "../../runtime/core/errors.h"
#include "../../runtime/core/log.h"
#include "../../runtime/io/journal.h"
#include "../../runtime/io/pg.h"
#include "../../runtime/io/pg_schema.h"

#include "pg_harness.h"

/* -- plain SQL for the setup and the checks ----------------------------- */

static void on_migrated(int err, int version, int applied,
                        const char *message, void *data)
{
    (void)applied;
    (void)message;
    CHECK(err == 0);
    CHECK(version >= 1);
    *(int *)data = 1;
}

/* -- journal outcomes --------------------------------------------------- */

struct wrote {
    int done;
    int err;
    int order;
    char msg[MS_JOURNAL_MESSAGE_MAX];
};

static void on_wrote(int err, const char *message, void *data)
{
    struct wrote *w = data;
    w->done++;
    w->order = ++pg_ended;
    w->err = err;
    snprintf(w->msg, sizeof w->msg, "%s", message);
}

#define MAXEV 8
struct loaded {
    int done;
    int err;
    char msg[MS_JOURNAL_MESSAGE_MAX];
    int has_snapshot;
    long long snapshot_seq, last_seq, revision;
    char snapshot[256], state[256];
    int nevents;
    long long seq[MAXEV];
    char ev[MAXEV][256];
};

static void on_loaded(int err, const char *message,
                      const struct ms_journal_loaded *l, void *data)
{
    struct loaded *o = data;
    memset(o, 0, sizeof *o);
    o->done = 1;
    o->err = err;
    snprintf(o->msg, sizeof o->msg, "%s", message);
    if (err)
        return;
    o->has_snapshot = l->has_snapshot;
    o->snapshot_seq = l->snapshot_seq;
    o->last_seq = l->last_seq;
    o->revision = l->revision;
    if (l->snapshot)
        snprintf(o->snapshot, sizeof o->snapshot, "%.*s",
                 (int)l->snapshot_len, l->snapshot);
    if (l->state)
        snprintf(o->state, sizeof o->state, "%.*s", (int)l->state_len,
                 l->state);
    o->nevents = l->nevents;
    for (int i = 0; i < l->nevents && i < MAXEV; i++) {
        o->seq[i] = l->seq[i];
        snprintf(o->ev[i], sizeof o->ev[i], "%.*s", (int)l->lens[i],
                 l->events[i]);
    }
}

static struct ms_journal *jn;

static int append(const char *id, uint64_t epoch, int64_t first, int n,
                  const char *const *ev, const char *snap, int del)
{
    struct ms_journal_entity e = {"acct", id, strlen(id), 3, epoch, NULL, NULL, 0};
    size_t lens[MAXEV];
    for (int i = 0; i < n; i++)
        lens[i] = strlen(ev[i]);
    struct wrote w = {0};
    int rc = ms_journal_append(jn, &e, first, n, ev, lens, snap,
                               snap ? strlen(snap) : 0, del, on_wrote, &w);
    CHECK(rc == 0);
    if (rc)
        return rc;
    CHECK(wait_for(&w.done, 10000));
    CHECK(w.done == 1);
    if (w.err)
        fprintf(stderr, "append %s: %s: %s\n", id, ms_errname(w.err), w.msg);
    return w.err;
}

static void load(const char *id, int state, struct loaded *o)
{
    struct ms_journal_entity e = {state ? "doc" : "acct", id, strlen(id),
                                  3, 0, NULL, NULL, 0};
    memset(o, 0, sizeof *o);
    CHECK((state ? ms_journal_load_state(jn, &e, on_loaded, o)
                 : ms_journal_load_events(jn, &e, on_loaded, o)) == 0);
    CHECK(wait_for(&o->done, 10000));
}

static int save(const char *id, uint64_t epoch, int64_t expected,
                const char *state)
{
    struct ms_journal_entity e = {"doc", id, strlen(id), 3, epoch, NULL, NULL, 0};
    struct wrote w = {0};
    int rc = state ? ms_journal_save_state(jn, &e, expected, state,
                                           strlen(state), on_wrote, &w)
                   : ms_journal_delete_state(jn, &e, expected, on_wrote,
                                             &w);
    CHECK(rc == 0);
    if (rc)
        return rc;
    CHECK(wait_for(&w.done, 10000));
    return w.err;
}

/* -- the cases ---------------------------------------------------------- */

static struct ms_pg *pg;

static void test_events(void)
{
    const char *e12[] = {"{\"n\":1}", "{\"s\":\"q\\\"uo\\\\te {}\",\"d\":0.1}"};
    CHECK(append("a1", 5, 1, 2, e12, NULL, 0) == 0);
    struct loaded o;
    load("a1", 0, &o);
    CHECK(o.err == 0);
    CHECK(!o.has_snapshot);
    CHECK(o.nevents == 2 && o.last_seq == 2);
    CHECK(o.seq[0] == 1 && o.seq[1] == 2);
    CHECK(strcmp(o.ev[0], e12[0]) == 0);
    CHECK(strcmp(o.ev[1], e12[1]) == 0); /* quotes and backslashes exact */
    CHECK(strcmp(pg_sql(pg, "SELECT string_agg(epoch::text, ',' ORDER BY "
                         "sequence) FROM moonshard_events WHERE id='a1'"),
                 "5,5") == 0);

    /* an older epoch is refused, nothing written */
    const char *e3[] = {"{\"n\":3}"};
    CHECK(append("a1", 4, 3, 1, e3, NULL, 0) == MS_ESTALE);
    /* epoch 0 never holds a lease */
    CHECK(append("a1", 0, 3, 1, e3, NULL, 0) == MS_ESTALE);
    CHECK(strcmp(pg_sql(pg, "SELECT count(*) FROM moonshard_events "
                         "WHERE id='a1'"), "2") == 0);

    /* a sequence that exists: revision_conflict, nothing written */
    const char *e2b[] = {"{\"n\":22}", "{\"n\":33}"};
    CHECK(append("a1", 5, 2, 2, e2b, NULL, 0) == MS_ECONFLICT);
    CHECK(strcmp(pg_sql(pg, "SELECT count(*) FROM moonshard_events "
                         "WHERE id='a1'"), "2") == 0);

    /* a snapshot after event 3, with the events it covers deleted */
    CHECK(append("a1", 5, 3, 1, e3, "{\"total\":3}", 1) == 0);
    const char *e4[] = {"{\"n\":4}"};
    CHECK(append("a1", 5, 4, 1, e4, NULL, 0) == 0);
    load("a1", 0, &o);
    CHECK(o.err == 0);
    CHECK(o.has_snapshot && o.snapshot_seq == 3);
    CHECK(strcmp(o.snapshot, "{\"total\":3}") == 0);
    CHECK(o.nevents == 1 && o.seq[0] == 4 && o.last_seq == 4);
    CHECK(strcmp(o.ev[0], e4[0]) == 0);
    CHECK(strcmp(pg_sql(pg, "SELECT string_agg(sequence::text, ',') FROM "
                         "moonshard_events WHERE id='a1'"), "4") == 0);

    /* a snapshot that keeps the events */
    const char *e5[] = {"{\"n\":5}"};
    CHECK(append("a1", 5, 5, 1, e5, "{\"total\":5}", 0) == 0);
    CHECK(strcmp(pg_sql(pg, "SELECT count(*) FROM moonshard_events "
                         "WHERE id='a1'"), "2") == 0);
    load("a1", 0, &o);
    CHECK(o.has_snapshot && o.snapshot_seq == 5 && o.nevents == 0);
    CHECK(o.last_seq == 5);

    /* an entity never written */
    load("nobody", 0, &o);
    CHECK(o.err == 0 && !o.has_snapshot && o.nevents == 0 &&
          o.last_seq == 0);

    /* an expired lease refuses writes */
    pg_sql(pg, "UPDATE moonshard_leases SET expires_at = now() - interval "
            "'1 second' WHERE shard = 3");
    const char *e6[] = {"{\"n\":6}"};
    CHECK(append("a1", 5, 6, 1, e6, NULL, 0) == MS_ESTALE);
    pg_sql(pg, "UPDATE moonshard_leases SET expires_at = now() + interval "
            "'1 hour' WHERE shard = 3");
    /* another owner at the same epoch is not us */
    pg_sql(pg, "UPDATE moonshard_leases SET owner = 'n2' WHERE shard = 3");
    CHECK(append("a1", 5, 6, 1, e6, NULL, 0) == MS_ESTALE);
    pg_sql(pg, "UPDATE moonshard_leases SET owner = 'n1' WHERE shard = 3");
    CHECK(append("a1", 5, 6, 1, e6, NULL, 0) == 0);

    /* bad input */
    struct ms_journal_entity e = {"acct", "a\0b", 3, 3, 5, NULL, NULL, 0};
    size_t l1 = 1;
    const char *one[] = {"x"};
    CHECK(ms_journal_append(jn, &e, 1, 1, one, &l1, NULL, 0, 0, on_wrote,
                            NULL) == MS_EINVAL);
    e.idlen = 1;
    CHECK(ms_journal_append(jn, &e, 0, 1, one, &l1, NULL, 0, 0, on_wrote,
                            NULL) == MS_EINVAL);
    CHECK(ms_journal_append(jn, &e, 1, MS_JOURNAL_MAX_EVENTS + 1, one, &l1,
                            NULL, 0, 0, on_wrote, NULL) == MS_E2BIG);
}

static void test_recovery_bounds(void)
{
    char q[512];
    snprintf(q, sizeof q,
             "INSERT INTO moonshard_events (cluster, type, id, sequence, "
             "epoch, payload) SELECT 'c1', 'acct', 'big', g, 5, '{}' FROM "
             "generate_series(1, %d) g", MS_JOURNAL_MAX_RECOVERY + 1);
    pg_sql(pg, q);
    struct loaded o;
    load("big", 0, &o);
    CHECK(o.err == MS_E2BIG);
    CHECK(strstr(o.msg, "snapshot_every") != NULL);
    /* exactly the maximum is fine */
    pg_sql(pg, "DELETE FROM moonshard_events WHERE id = 'big' AND sequence = "
            "(SELECT max(sequence) FROM moonshard_events WHERE id = 'big')");
    load("big", 0, &o);
    CHECK(o.err == 0);
    CHECK(o.last_seq == MS_JOURNAL_MAX_RECOVERY);
    /* a gap in the history is refused */
    pg_sql(pg, "INSERT INTO moonshard_events (cluster, type, id, sequence, "
            "epoch, payload) VALUES ('c1','acct','gap',1,5,'{}'), "
            "('c1','acct','gap',3,5,'{}')");
    load("gap", 0, &o);
    CHECK(o.err == MS_ECONFLICT);
}

static void test_state(void)
{
    struct loaded o;
    load("d1", 1, &o);
    CHECK(o.err == 0 && o.revision == 0);
    CHECK(save("d1", 5, 0, "{\"v\":1}") == 0);
    CHECK(save("d1", 5, 0, "{\"v\":1}") == MS_ECONFLICT); /* exists */
    CHECK(save("d1", 5, 1, "{\"v\":2}") == 0);
    CHECK(save("d1", 5, 1, "{\"v\":3}") == MS_ECONFLICT); /* at 2 now */
    CHECK(save("d1", 4, 2, "{\"v\":3}") == MS_ESTALE);
    load("d1", 1, &o);
    CHECK(o.err == 0 && o.revision == 2);
    CHECK(strcmp(o.state, "{\"v\":2}") == 0);
    CHECK(save("d1", 5, 1, NULL) == MS_ECONFLICT); /* delete at 1 */
    CHECK(save("d1", 4, 2, NULL) == MS_ESTALE);
    CHECK(save("d1", 5, 2, NULL) == 0);
    load("d1", 1, &o);
    CHECK(o.err == 0 && o.revision == 0);
}

/* An acquire that bumps the epoch waits while a writer holds the lease
 * row FOR SHARE: the writer's transaction (lease lock, a pause, then an
 * append) commits first, then the bump; the writer's events carry the
 * old epoch, and a write after the bump is stale. */
static void test_bump_waits(void)
{
    struct ms_pg *other = pg_pool(conninfo, 0, 0, 1, 0);
    const char *tx[3] = {
        "SELECT 1 / count(*) FROM (SELECT 1 FROM moonshard_leases WHERE "
        "cluster = 'c1' AND type = 'acct' AND shard = 3 AND owner = 'n1' "
        "AND epoch = 5 AND expires_at > now() FOR SHARE) AS lease",
        "SELECT pg_sleep(1)",
        "INSERT INTO moonshard_events (cluster, type, id, sequence, epoch, "
        "payload) VALUES ('c1', 'acct', 'w1', 1, 5, '{}')",
    };
    const int np[3] = {0, 0, 0};
    struct pg_got writer = {0}, bump = {0};
    CHECK(ms_pg_transaction(pg, 3, tx, np, NULL, pg_on_done, &writer) == 0);
    /* the writer holds the row once its pause runs */
    int sleeping = 0;
    for (int i = 0; i < 200 && !sleeping; i++) {
        struct pg_got g = {0};
        CHECK(ms_pg_query(other, "SELECT count(*) FROM pg_stat_activity "
                          "WHERE state = 'active' AND query = "
                          "'SELECT pg_sleep(1)'", 0, NULL, pg_on_done,
                          &g) == 0);
        CHECK(wait_for(&g.done, 10000));
        sleeping = strcmp(g.v0, "1") == 0;
        if (!sleeping)
            idle_for(10);
    }
    CHECK(sleeping);
    CHECK(!writer.done);
    pg_ended = 0;
    CHECK(ms_pg_query(other, "UPDATE moonshard_leases SET epoch = epoch + 1,"
                      " owner = 'n2' WHERE cluster = 'c1' AND type = 'acct' "
                      "AND shard = 3 RETURNING epoch", 0, NULL, pg_on_done,
                      &bump) == 0);
    CHECK(wait_for(&bump.done, 10000));
    CHECK(writer.done && writer.err == 0);
    CHECK(bump.err == 0 && strcmp(bump.v0, "6") == 0);
    CHECK(writer.order == 1 && bump.order == 2);
    const char *ev[] = {"{}"};
    CHECK(append("w1", 5, 2, 1, ev, NULL, 0) == MS_ESTALE);
    pg_close_pool(other);
    pg_sql(pg, "UPDATE moonshard_leases SET epoch = 5, owner = 'n1' "
            "WHERE shard = 3");
}

/* ms_pg_group: a unit that fails is rolled back alone (its first
 * statement's row too), the other units commit. */
#define GMAX 8
struct grouped {
    int done, err, n;
    int uerr[GMAX], uindex[GMAX];
    char ustate[GMAX][6];
    char v0[64]; /* the first value of the last statement's result */
};

static void on_grouped(const struct ms_pg_result *r, void *data)
{
    struct grouped *g = data;
    g->done = 1;
    g->err = ms_pg_result_error(r);
    for (int u = 0; u < g->n; u++) {
        g->uerr[u] = ms_pg_result_unit_error(r, u);
        g->uindex[u] = ms_pg_result_unit_index(r, u);
        snprintf(g->ustate[u], sizeof g->ustate[u], "%s",
                 ms_pg_result_unit_sqlstate(r, u));
    }
    const char *v = ms_pg_result_value(r, 0, 0);
    snprintf(g->v0, sizeof g->v0, "%s", v ? v : "(null)");
}

static void test_pg_group(void)
{
    pg_sql(pg, "CREATE TABLE g (k integer PRIMARY KEY)");
    const char *st[5] = {
        "INSERT INTO g VALUES (1)", "INSERT INTO g VALUES (1)", /* unit 0 */
        "INSERT INTO g VALUES (2)",                             /* unit 1 */
        "INSERT INTO g VALUES (3)", "SELECT 1 / 0",             /* unit 2 */
    };
    const int unit_n[3] = {2, 1, 2};
    const int np[5] = {0, 0, 0, 0, 0};
    struct grouped g = {0};
    g.n = 3;
    CHECK(ms_pg_group(pg, 3, unit_n, st, np, NULL, on_grouped, &g) == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == 0);
    CHECK(g.uerr[0] == MS_PG_EQUERY && g.uindex[0] == 1);
    CHECK(strcmp(g.ustate[0], "23505") == 0);
    CHECK(g.uerr[1] == 0 && g.uindex[1] == -1);
    CHECK(g.uerr[2] == MS_PG_EQUERY && g.uindex[2] == 1);
    CHECK(strcmp(g.ustate[2], "22012") == 0);
    CHECK(strcmp(pg_sql(pg, "SELECT string_agg(k::text, ',') FROM g"), "2")
          == 0);
    /* bad shapes are refused */
    const int zero[1] = {0};
    CHECK(ms_pg_group(pg, 1, zero, st, np, NULL, on_grouped, &g)
          == MS_EINVAL);
    CHECK(ms_pg_group(pg, 0, unit_n, st, np, NULL, on_grouped, &g)
          == MS_EINVAL);
}

/* A group runs as one pipeline: a unit that fails in the middle makes
 * the server skip the rest up to the Sync (the later units' statements,
 * their first Parse, COMMIT); the next round rolls back to that unit's
 * savepoint and sends what follows. Several failures, at a unit's first
 * statement, its second, and right after a unit whose Parse was skipped:
 * each fails alone, the others commit. */
static void test_pipeline_failures(void)
{
    pg_sql(pg, "CREATE TABLE pf (k integer PRIMARY KEY)");
    const char *st[9] = {
        "INSERT INTO pf VALUES (10)",                          /* u0 */
        "SELECT 1 / 0",                                        /* u1 */
        "INSERT INTO pf VALUES (12)",                          /* u2 */
        "INSERT INTO pf VALUES (13)", "INSERT INTO pf VALUES (10)", /* u3 */
        "INSERT INTO pf VALUES (14)",                          /* u4 */
        "SELECT nope FROM pf",                                 /* u5 */
        "INSERT INTO pf VALUES (16)",                          /* u6 */
        "SELECT string_agg(k::text, ',' ORDER BY k) FROM pf",  /* u7 */
    };
    const int unit_n[GMAX] = {1, 1, 1, 2, 1, 1, 1, 1};
    struct grouped g = {0};
    g.n = GMAX;
    CHECK(ms_pg_group(pg, GMAX, unit_n, st, NULL, NULL, on_grouped, &g)
          == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == 0);
    CHECK(g.uerr[0] == 0 && g.uerr[2] == 0 && g.uerr[4] == 0);
    CHECK(g.uerr[6] == 0 && g.uerr[7] == 0);
    CHECK(g.uerr[1] == MS_PG_EQUERY && g.uindex[1] == 0);
    CHECK(strcmp(g.ustate[1], "22012") == 0);
    CHECK(g.uerr[3] == MS_PG_EQUERY && g.uindex[3] == 1);
    CHECK(strcmp(g.ustate[3], "23505") == 0);
    CHECK(g.uerr[5] == MS_PG_EQUERY && g.uindex[5] == 0);
    CHECK(strcmp(g.ustate[5], "42703") == 0);
    /* what the transaction saw before its COMMIT: u3's first row undone */
    CHECK(strcmp(g.v0, "10,12,14,16") == 0);
    CHECK(strcmp(pg_sql(pg, "SELECT string_agg(k::text, ',' ORDER BY k) "
                         "FROM pf"), "10,12,14,16") == 0);
    /* the same texts again (now prepared, or re-prepared where a Parse
     * was skipped): the same outcomes on an empty table */
    pg_sql(pg, "TRUNCATE pf");
    memset(&g, 0, sizeof g);
    g.n = GMAX;
    CHECK(ms_pg_group(pg, GMAX, unit_n, st, NULL, NULL, on_grouped, &g)
          == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == 0 && g.uerr[2] == 0 && g.uerr[6] == 0);
    CHECK(g.uerr[1] == MS_PG_EQUERY && g.uerr[3] == MS_PG_EQUERY);
    CHECK(strcmp(g.v0, "10,12,14,16") == 0);
}

/* Every unit fails (each in its own round), or only the last: the group
 * itself succeeds, the failing units report their errors, and what the
 * others wrote (run again under savepoints after the first failure) is
 * there once. */
static void test_pipeline_edges(void)
{
    pg_sql(pg, "CREATE TABLE pe (k integer PRIMARY KEY)");
    const char *bad[3] = {"SELECT 1 / 0", "SELECT 1 / 0", "SELECT 1 / 0"};
    const int unit_n[3] = {1, 1, 1};
    struct grouped g = {0};
    g.n = 3;
    CHECK(ms_pg_group(pg, 3, unit_n, bad, NULL, NULL, on_grouped, &g) == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == 0);
    for (int u = 0; u < 3; u++)
        CHECK(g.uerr[u] == MS_PG_EQUERY &&
              strcmp(g.ustate[u], "22012") == 0);
    const char *last[3] = {"INSERT INTO pe VALUES (1)",
                           "INSERT INTO pe VALUES (2)",
                           "INSERT INTO pe VALUES (1)"};
    memset(&g, 0, sizeof g);
    g.n = 3;
    CHECK(ms_pg_group(pg, 3, unit_n, last, NULL, NULL, on_grouped, &g)
          == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == 0 && g.uerr[0] == 0 && g.uerr[1] == 0);
    CHECK(g.uerr[2] == MS_PG_EQUERY && strcmp(g.ustate[2], "23505") == 0);
    CHECK(strcmp(pg_sql(pg, "SELECT string_agg(k::text, ',' ORDER BY k) "
                         "FROM pe"), "1,2") == 0);
}

/* A group whose COMMIT fails (a deferred key) fails as a whole: every
 * unit reports it, nothing is kept, and the connection serves the next
 * job (the pipeline is left, the transaction rolled back). */
static void test_pipeline_commit_fails(void)
{
    pg_sql(pg, "CREATE TABLE pd (k integer, CONSTRAINT pd_k UNIQUE (k) "
            "DEFERRABLE INITIALLY DEFERRED)");
    const char *st[2] = {"INSERT INTO pd VALUES (1)",
                         "INSERT INTO pd VALUES (1)"};
    const int unit_n[2] = {1, 1};
    struct grouped g = {0};
    g.n = 2;
    CHECK(ms_pg_group(pg, 2, unit_n, st, NULL, NULL, on_grouped, &g) == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == MS_PG_EQUERY);
    CHECK(g.uerr[0] == MS_PG_EQUERY && g.uerr[1] == MS_PG_EQUERY);
    CHECK(strcmp(g.ustate[0], "23505") == 0);
    for (int i = 0; i < 4; i++) /* both connections, twice */
        CHECK(strcmp(pg_sql(pg, "SELECT count(*) FROM pd"), "0") == 0);
}

/* The statements of a group are prepared on its connection (once per
 * text); a connection that is lost forgets them, and the next group on
 * its successor prepares them again. */
static void test_prepared_reconnect(void)
{
    struct ms_pg *one = pg_pool(conninfo, 0, 0, 1, 0);
    const char *st[2] = {
        "SELECT 1",
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE "
        "'ms_p%' AND from_sql = false",
    };
    const int unit_n[2] = {1, 1};
    struct grouped g = {0};
    g.n = 2;
    for (int round = 0; round < 2; round++) {
        memset(&g, 0, sizeof g);
        g.n = 2;
        CHECK(ms_pg_group(one, 2, unit_n, st, NULL, NULL, on_grouped, &g)
              == 0);
        CHECK(wait_for(&g.done, 10000));
        CHECK(g.err == 0 && g.uerr[0] == 0 && g.uerr[1] == 0);
        /* the two statements (not BEGIN, SAVEPOINT...), once */
        CHECK(strcmp(g.v0, "2") == 0);
        if (strcmp(g.v0, "2") != 0)
            fprintf(stderr, "prepared statements: %s\n", g.v0);
    }
    /* the server ends the pool's session */
    struct pg_got pid = {0};
    CHECK(ms_pg_query(one, "SELECT pg_backend_pid()", 0, NULL, pg_on_done,
                      &pid) == 0);
    CHECK(wait_for(&pid.done, 10000) && pid.err == 0);
    char kill[128];
    snprintf(kill, sizeof kill, "SELECT pg_terminate_backend(%.20s)",
             pid.v0);
    CHECK(strcmp(pg_sql(pg, kill), "t") == 0);
    int ok = 0;
    for (int tries = 0; tries < 20 && !ok; tries++) {
        memset(&g, 0, sizeof g);
        g.n = 2;
        CHECK(ms_pg_group(one, 2, unit_n, st, NULL, NULL, on_grouped, &g)
              == 0);
        CHECK(wait_for(&g.done, 10000));
        if (g.err == MS_PG_ECONN) {
            idle_for(100); /* the lost session was found: reconnecting */
            continue;
        }
        ok = 1;
        CHECK(g.err == 0 && g.uerr[0] == 0 && g.uerr[1] == 0);
        CHECK(strcmp(g.v0, "2") == 0);
    }
    CHECK(ok);
    CHECK(ms_pg_attempts(one) >= 2); /* it did reconnect */
    /* the session loses its prepared statements (DEALLOCATE by hand):
     * the group that finds out fails, the next prepares them again */
    struct pg_got gone = {0};
    CHECK(ms_pg_query(one, "DEALLOCATE ALL", 0, NULL, pg_on_done, &gone) == 0);
    CHECK(wait_for(&gone.done, 10000) && gone.err == 0);
    memset(&g, 0, sizeof g);
    g.n = 2;
    CHECK(ms_pg_group(one, 2, unit_n, st, NULL, NULL, on_grouped, &g) == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == 0 && g.uerr[0] == MS_PG_EQUERY);
    CHECK(strcmp(g.ustate[0], "26000") == 0);
    for (int round = 0; round < 2; round++) {
        memset(&g, 0, sizeof g);
        g.n = 2;
        CHECK(ms_pg_group(one, 2, unit_n, st, NULL, NULL, on_grouped, &g)
              == 0);
        CHECK(wait_for(&g.done, 10000));
        CHECK(g.err == 0 && g.uerr[0] == 0 && g.uerr[1] == 0);
        CHECK(strcmp(g.v0, "2") == 0);
    }
    pg_close_pool(one);
}

/* A journal sends at most MS_JOURNAL_MAX_GROUP writes in one group: more
 * queued at once make more groups, every write committed. */
static void test_group_bound(void)
{
    struct ms_journal *all = jn;
    jn = ms_journal_new(loop, pg, "c1", "n1", 1);
    CHECK(jn != NULL);
    struct ms_journal_stats before, after;
    ms_journal_stats(jn, &before);
    enum { N = MS_JOURNAL_MAX_GROUP + 10 };
    static struct wrote w[N];
    static char ids[N][12];
    memset(w, 0, sizeof w);
    const char *ev[] = {"{}"};
    size_t len = 2;
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "b%d", i);
        struct ms_journal_entity e = {"acct", ids[i], strlen(ids[i]), 3, 5,
                                      NULL, NULL, 0};
        CHECK(ms_journal_append(jn, &e, 1, 1, ev, &len, NULL, 0, 0,
                                on_wrote, &w[i]) == 0);
    }
    for (int i = 0; i < N; i++) {
        CHECK(wait_for(&w[i].done, 10000));
        CHECK(w[i].err == 0);
    }
    ms_journal_stats(jn, &after);
    CHECK(after.commits == before.commits + 2);
    CHECK(after.writes == before.writes + N);
    int closed = 0;
    ms_journal_close(jn, pg_on_closed, &closed);
    CHECK(wait_for(&closed, 5000));
    jn = all;
    /* a group above the pool's bound is refused */
    static int big_n[MS_PG_MAX_GROUP_STATEMENTS];
    static const char *big_sql[MS_PG_MAX_GROUP_STATEMENTS];
    for (int i = 0; i < MS_PG_MAX_GROUP_STATEMENTS; i++) {
        big_n[i] = 1;
        big_sql[i] = "SELECT 1";
    }
    struct grouped g = {0};
    /* each unit counts its SAVEPOINT: half the bound fits, one more not */
    CHECK(ms_pg_group(pg, MS_PG_MAX_GROUP_STATEMENTS / 2 + 1, big_n,
                      big_sql, NULL, NULL, on_grouped, &g) == MS_EINVAL);
    CHECK(ms_pg_group(pg, MS_PG_MAX_GROUP_STATEMENTS / 2, big_n, big_sql,
                      NULL, NULL, on_grouped, &g) == 0);
    CHECK(wait_for(&g.done, 10000));
    CHECK(g.err == 0);
}

/* Writes queued in one loop turn commit in one transaction; a stale
 * writer and a conflicting one in that group fail alone. */
static void test_group_commit(void)
{
    /* one group at a time: the five writes below make one group */
    struct ms_journal *all = jn;
    jn = ms_journal_new(loop, pg, "c1", "n1", 1);
    CHECK(jn != NULL);
    struct ms_journal_stats before, after;
    ms_journal_stats(jn, &before);
    const char *ev[] = {"{\"g\":1}"};
    size_t len = strlen(ev[0]);
    struct ms_journal_entity ok1 = {"acct", "g1", 2, 3, 5, NULL, NULL, 0};
    struct ms_journal_entity stale = {"acct", "g2", 2, 3, 4, NULL, NULL, 0};
    struct ms_journal_entity ok2 = {"acct", "g3", 2, 3, 5, NULL, NULL, 0};
    struct ms_journal_entity conflict = {"acct", "a1", 2, 3, 5, NULL, NULL, 0};
    struct wrote w[5];
    memset(w, 0, sizeof w);
    CHECK(ms_journal_append(jn, &ok1, 1, 1, ev, &len, NULL, 0, 0, on_wrote,
                            &w[0]) == 0);
    CHECK(ms_journal_append(jn, &stale, 1, 1, ev, &len, NULL, 0, 0,
                            on_wrote, &w[1]) == 0);
    CHECK(ms_journal_append(jn, &ok2, 1, 1, ev, &len, NULL, 0, 0, on_wrote,
                            &w[2]) == 0);
    CHECK(ms_journal_append(jn, &conflict, 1, 1, ev, &len, NULL, 0, 0,
                            on_wrote, &w[3]) == 0);
    /* the same entity's next write, queued in the same turn, after */
    CHECK(ms_journal_append(jn, &ok1, 2, 1, ev, &len, NULL, 0, 0, on_wrote,
                            &w[4]) == 0);
    CHECK(wait_for(&w[4].done, 10000));
    for (int i = 0; i < 5; i++)
        CHECK(w[i].done == 1);
    CHECK(w[0].err == 0 && w[2].err == 0 && w[4].err == 0);
    CHECK(w[1].err == MS_ESTALE);
    CHECK(w[3].err == MS_ECONFLICT);
    ms_journal_stats(jn, &after);
    CHECK(after.commits == before.commits + 1); /* one transaction */
    CHECK(after.writes == before.writes + 3);
    CHECK(after.stale_refused == before.stale_refused + 1);
    CHECK(after.conflicts == before.conflicts + 1);
    CHECK(strcmp(pg_sql(pg, "SELECT string_agg(id || ':' || sequence, ',' "
                         "ORDER BY id, sequence) FROM moonshard_events "
                         "WHERE id IN ('g1', 'g2', 'g3')"),
                 "g1:1,g1:2,g3:1") == 0);
    int closed = 0;
    ms_journal_close(jn, pg_on_closed, &closed);
    CHECK(wait_for(&closed, 5000));
    jn = all;
}

/* With two groups in flight, what is queued at once is shared out among
 * them: two transactions, every write committed. */
static void test_parallel_groups(void)
{
    struct ms_journal_stats before, after;
    ms_journal_stats(jn, &before);
    const char *ev[] = {"{}"};
    size_t len = 2;
    char ids[6][8];
    struct wrote w[6];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 6; i++) {
        snprintf(ids[i], sizeof ids[i], "p%d", i);
        struct ms_journal_entity e = {"acct", ids[i], strlen(ids[i]), 3, 5, NULL, NULL, 0};
        CHECK(ms_journal_append(jn, &e, 1, 1, ev, &len, NULL, 0, 0,
                                on_wrote, &w[i]) == 0);
    }
    for (int i = 0; i < 6; i++) {
        CHECK(wait_for(&w[i].done, 10000));
        CHECK(w[i].err == 0);
    }
    ms_journal_stats(jn, &after);
    CHECK(after.commits == before.commits + 2);
    CHECK(after.writes == before.writes + 6);
}

int main(void)
{
    ms_log_setup("test", MS_LOG_INFO);
    ms_log_set_sink(sink, NULL);
    if (server_start() != 0) {
        fprintf(stderr, "test_journal: cannot start a throwaway PostgreSQL "
                        "(spec/helpers/pg_server.sh)\n");
        return 1;
    }
    atexit(server_cleanup);
    loop = uv_default_loop();
    pg = pg_pool(conninfo, 0, 0, 2, 0);
    int migrated = 0;
    CHECK(ms_pg_migrate(pg, on_migrated, &migrated) == 0);
    CHECK(wait_for(&migrated, 20000));
    pg_sql(pg, "INSERT INTO moonshard_leases (cluster, type, shard, owner, "
            "epoch, expires_at) VALUES ('c1', 'acct', 3, 'n1', 5, now() + "
            "interval '1 hour'), ('c1', 'doc', 3, 'n1', 5, now() + "
            "interval '1 hour')");
    jn = ms_journal_new(loop, pg, "c1", "n1", 2);
    CHECK(jn != NULL);
    test_events();
    test_recovery_bounds();
    test_state();
    test_bump_waits();
    test_pg_group();
    test_group_commit();
    test_parallel_groups();
    test_pipeline_failures();
    test_pipeline_edges();
    test_pipeline_commit_fails();
    test_prepared_reconnect();
    test_group_bound();
    struct ms_journal_stats st;
    ms_journal_stats(jn, &st);
    CHECK(st.commits > 0 && st.events > 0 && st.snapshots == 2);
    CHECK(st.stale_refused > 0 && st.conflicts > 0);
    CHECK(st.latency_count == st.writes);
    pg_close_pool(pg);
    int closed = 0;
    ms_journal_close(jn, pg_on_closed, &closed);
    CHECK(wait_for(&closed, 5000));
    CHECK(uv_loop_close(loop) == 0);
    server_cleanup();
    CHECK_DONE();
}
