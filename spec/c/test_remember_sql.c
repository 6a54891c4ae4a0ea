/* test_remember_sql.c -- the PostgreSQL store of remember-entities
 * (runtime/io/remember_sql.h) and schema version 2, against a throwaway
 * server that spec/helpers/pg_server.sh starts on 127.0.0.1 and this test
 * stops. The lease rows are inserted by hand.
 *
 * MS_BENCH=1 in the environment also times 1,000 writes of 256 records
 * (printed, never checked). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "../../runtime/core/errors.h"
#include "../../runtime/core/log.h"
#include "../../runtime/io/pg.h"
#include "../../runtime/io/pg_schema.h"
#include "../../runtime/io/remember_sql.h"

#include "pg_harness.h"

/* -- plain SQL for the setup and the checks ----------------------------- */

static struct ms_pg *pg;

static const char *sql(const char *text) { return pg_sql(pg, text); }

/* the ids of (cluster, type, shard) in the table, sorted bytewise and
 * joined by '|' */
static const char *ids_in(const char *cluster, const char *type, int shard)
{
    char q[512];
    snprintf(q, sizeof q, "SELECT coalesce(string_agg(id, '|' ORDER BY id "
             "COLLATE \"C\"), '') FROM moonshard_remembered WHERE "
             "cluster = '%s' AND type = '%s' AND shard = %d", cluster, type,
             shard);
    return sql(q);
}

struct migrated {
    int done, err, version, applied;
};

static void on_migrated(int err, int version, int applied,
                        const char *message, void *data)
{
    struct migrated *m = data;
    if (err)
        fprintf(stderr, "migrate: %s\n", message);
    m->err = err;
    m->version = version;
    m->applied = applied;
    m->done = 1;
}

static struct migrated migrate(struct ms_pg *p)
{
    struct migrated m = {0};
    CHECK(ms_pg_migrate(p, on_migrated, &m) == 0);
    CHECK(wait_for(&m.done, 20000));
    return m;
}

/* -- the store's outcomes ----------------------------------------------- */

static struct ms_remember_sql *rs;

struct wrote {
    int done;
    int err;
    int order;
    char msg[MS_REMEMBER_SQL_MESSAGE_MAX];
};

static int ended;

static void on_wrote(int err, const char *message, void *data)
{
    struct wrote *w = data;
    w->done++;
    w->order = ++ended;
    w->err = err;
    snprintf(w->msg, sizeof w->msg, "%s", message);
}

#define MAXREC 300

/* Writes records "+id" (start) / "-id" (stop) of rec[0..n) on store st
 * and waits; returns the outcome. */
static int write_on(struct ms_remember_sql *st, const char *type, int shard,
                    uint64_t epoch, int replace, const char *const *rec,
                    int n)
{
    struct ms_remember_record r[MAXREC];
    for (int i = 0; i < n; i++) {
        r[i].op = rec[i][0] == '+' ? MS_REMEMBER_START : MS_REMEMBER_STOP;
        r[i].id = rec[i] + 1;
        r[i].id_len = strlen(rec[i] + 1);
    }
    struct wrote w = {0};
    int rc = ms_remember_sql_write(st, type, (uint32_t)shard, epoch,
                                   replace, r, (uint32_t)n, on_wrote, &w);
    if (rc)
        return rc;
    CHECK(wait_for(&w.done, 20000));
    CHECK(w.done == 1);
    if (w.err)
        CHECK(w.msg[0] != 0 && !strchr(w.msg, '\n'));
    else
        CHECK(w.msg[0] == 0);
    return w.err;
}

static int write_(const char *type, int shard, uint64_t epoch, int replace,
                  const char *const *rec, int n)
{
    return write_on(rs, type, shard, epoch, replace, rec, n);
}

struct loaded {
    int done;
    int err;
    char msg[MS_REMEMBER_SQL_MESSAGE_MAX];
    uint32_t n;
    char joined[8192]; /* ids joined by '|' */
    int lens_ok;
};

static void on_loaded(int err, const char *message, const char *const *ids,
                      const size_t *lens, uint32_t n, void *data)
{
    struct loaded *l = data;
    l->done++;
    l->err = err;
    snprintf(l->msg, sizeof l->msg, "%s", message);
    l->n = n;
    l->lens_ok = 1;
    size_t at = 0;
    l->joined[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (strlen(ids[i]) != lens[i])
            l->lens_ok = 0;
        at += (size_t)snprintf(l->joined + at, sizeof l->joined - at,
                               "%s%s", i ? "|" : "", ids[i]);
        if (at >= sizeof l->joined)
            at = sizeof l->joined - 1;
    }
}

static struct loaded load_on(struct ms_remember_sql *st, const char *type,
                             int shard)
{
    struct loaded l;
    memset(&l, 0, sizeof l);
    CHECK(ms_remember_sql_load(st, type, (uint32_t)shard, on_loaded, &l)
          == 0);
    CHECK(l.done == 0); /* never inside the call */
    CHECK(wait_for(&l.done, 20000));
    CHECK(l.done == 1 && l.lens_ok);
    return l;
}

static struct loaded load(const char *type, int shard)
{
    return load_on(rs, type, shard);
}

/* -- the cases ---------------------------------------------------------- */

static void test_start_stop(void)
{
    struct loaded l = load("T", 0);
    CHECK(l.err == 0 && l.n == 0 && l.joined[0] == 0);

    const char *a[] = {"+b", "+a", "+c"};
    CHECK(write_("T", 0, 5, 0, a, 3) == 0);
    l = load("T", 0);
    CHECK(l.err == 0 && l.n == 3);
    CHECK(strcmp(l.joined, "a|b|c") == 0);

    /* a start of an id there already and a stop of one never there
     * change nothing and do not fail */
    const char *b[] = {"+a", "-zz", "-b"};
    CHECK(write_("T", 0, 5, 0, b, 3) == 0);
    CHECK(strcmp(ids_in("c1", "T", 0), "a|c") == 0);
    l = load("T", 0);
    CHECK(l.n == 2 && strcmp(l.joined, "a|c") == 0);

    /* in order: the last record of an id wins */
    const char *c[] = {"+x", "-x", "-c", "+c", "+y", "-y", "+y"};
    CHECK(write_("T", 0, 5, 0, c, 7) == 0);
    CHECK(strcmp(ids_in("c1", "T", 0), "a|c|y") == 0);

    /* a shard of its own: the others saw nothing */
    CHECK(strcmp(ids_in("c1", "T", 1), "") == 0);
    CHECK(load("T", 1).n == 0);
}

static void test_replace(void)
{
    /* shard 2 of T, and neighbours that a replace must not touch: shard
     * 1 of T, shard 2 of U, shard 2 of T in cluster c2 */
    const char *a[] = {"+p", "+q", "+r", "+s"};
    CHECK(write_("T", 2, 5, 0, a, 4) == 0);
    const char *n1[] = {"+p", "+n1"};
    CHECK(write_("T", 1, 5, 0, n1, 2) == 0);
    const char *u[] = {"+p", "+u"};
    CHECK(write_("U", 2, 5, 0, u, 2) == 0);
    struct ms_remember_sql *other = ms_remember_sql_new(loop, pg, "c2", "n1");
    CHECK(other != NULL);
    const char *o[] = {"+p", "+o"};
    CHECK(write_on(other, "T", 2, 5, 0, o, 2) == 0);

    /* the set becomes {q, new}: p, r, s go */
    const char *set[] = {"+new", "+q"};
    CHECK(write_("T", 2, 5, 1, set, 2) == 0);
    CHECK(strcmp(ids_in("c1", "T", 2), "new|q") == 0);
    CHECK(strcmp(load("T", 2).joined, "new|q") == 0);
    CHECK(strcmp(ids_in("c1", "T", 1), "n1|p") == 0);
    CHECK(strcmp(ids_in("c1", "U", 2), "p|u") == 0);
    CHECK(strcmp(ids_in("c2", "T", 2), "o|p") == 0);
    struct loaded l = load_on(other, "T", 2);
    CHECK(strcmp(l.joined, "o|p") == 0);

    /* a replace keeps a remembered id's row (its `since`) */
    sql("UPDATE moonshard_remembered SET since = '2001-01-01' WHERE "
        "cluster = 'c1' AND type = 'T' AND shard = 2 AND id = 'q'");
    const char *set2[] = {"+q", "+z"};
    CHECK(write_("T", 2, 5, 1, set2, 2) == 0);
    CHECK(strcmp(ids_in("c1", "T", 2), "q|z") == 0);
    CHECK(strcmp(sql("SELECT extract(year FROM since)::int FROM "
                     "moonshard_remembered WHERE cluster = 'c1' AND "
                     "type = 'T' AND shard = 2 AND id = 'q'"), "2001") == 0);

    /* an empty replace empties the shard alone; an empty plain write is
     * refused */
    CHECK(write_("T", 2, 5, 1, NULL, 0) == 0);
    CHECK(strcmp(ids_in("c1", "T", 2), "") == 0);
    CHECK(load("T", 2).n == 0);
    CHECK(strcmp(ids_in("c1", "T", 1), "n1|p") == 0);
    CHECK(write_("T", 2, 5, 0, NULL, 0) == MS_EINVAL);

    int closed = 0;
    ms_remember_sql_close(other, pg_on_closed, &closed);
    CHECK(wait_for(&closed, 5000));
}

static void test_fenced(void)
{
    /* shard 0 of T holds a|c|y at epoch 5 */
    const char *w[] = {"+stale", "-a"};
    CHECK(write_("T", 0, 4, 0, w, 2) == MS_ESTALE);  /* older epoch */
    CHECK(write_("T", 0, 6, 0, w, 2) == MS_ESTALE);  /* newer epoch */
    CHECK(write_("T", 0, 0, 0, w, 2) == MS_ESTALE);  /* never current */
    /* a write that would change nothing is refused all the same: the
     * writer learns it lost the lease */
    const char *none[] = {"-absent"};
    CHECK(write_("T", 0, 4, 0, none, 1) == MS_ESTALE);
    /* a replace at an old epoch would delete a, c and y */
    CHECK(write_("T", 0, 4, 1, w, 1) == MS_ESTALE);
    CHECK(write_("T", 0, 4, 1, NULL, 0) == MS_ESTALE);
    CHECK(strcmp(ids_in("c1", "T", 0), "a|c|y") == 0);

    /* a shard whose lease another node holds */
    const char *x[] = {"+x"};
    CHECK(write_("T", 7, 5, 0, x, 1) == MS_ESTALE);
    CHECK(strcmp(ids_in("c1", "T", 7), "") == 0);
    /* a shard with no lease row at all */
    CHECK(write_("T", 9, 5, 0, x, 1) == MS_ESTALE);
    /* the same node name in another cluster holds no lease of c1 */
    struct ms_remember_sql *c3 = ms_remember_sql_new(loop, pg, "c3", "n1");
    CHECK(write_on(c3, "T", 0, 5, 0, x, 1) == MS_ESTALE);
    int closed = 0;
    ms_remember_sql_close(c3, pg_on_closed, &closed);
    CHECK(wait_for(&closed, 5000));

    /* an expired lease: neither a write nor a replace goes through */
    sql("INSERT INTO moonshard_remembered (cluster, type, shard, id) "
        "VALUES ('c1', 'T', 8, 'kept')");
    CHECK(write_("T", 8, 5, 0, x, 1) == MS_ESTALE);
    CHECK(write_("T", 8, 5, 1, x, 1) == MS_ESTALE);
    CHECK(write_("T", 8, 5, 1, NULL, 0) == MS_ESTALE);
    CHECK(strcmp(ids_in("c1", "T", 8), "kept") == 0);
    /* the load is a read: not fenced */
    CHECK(strcmp(load("T", 8).joined, "kept") == 0);

    struct ms_remember_sql_stats st;
    ms_remember_sql_stats(rs, &st);
    CHECK(st.stale_refused >= 8);
}

static void test_bytes(void)
{
    /* what a text[] literal or SQL could misread, byte for byte */
    const char *odd[] = {
        "+q\"uo\"te", "+back\\slash", "+\\\"", "+{br,ace}", "+NULL",
        "+ lead and trail ", "+comma,semi;", "+'single'",
        "+\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80", "+\"", "+\\",
        "+$1", "+a\tb",
    };
    int n = (int)(sizeof odd / sizeof odd[0]);
    CHECK(write_("U", 5, 5, 0, odd, n) == 0);
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'U' AND shard = 5"),
                 "13") == 0);
    struct loaded l = load("U", 5);
    CHECK(l.err == 0 && (int)l.n == n);
    for (int i = 0; i < n; i++) {
        char want[128];
        snprintf(want, sizeof want, "|%s|", odd[i] + 1);
        char all[8200];
        snprintf(all, sizeof all, "|%s|", l.joined);
        CHECK(strstr(all, want) != NULL);
        if (!strstr(all, want))
            fprintf(stderr, "missing [%s] in [%s]\n", odd[i] + 1, l.joined);
    }
    /* bytewise order: the ASCII ones first, the accented last */
    CHECK(strncmp(l.joined, " lead", 5) == 0);
    /* each stops again by the same bytes */
    const char *stop[sizeof odd / sizeof odd[0]];
    char buf[sizeof odd / sizeof odd[0]][64];
    for (int i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], "-%s", odd[i] + 1);
        stop[i] = buf[i];
    }
    CHECK(write_("U", 5, 5, 0, stop, n) == 0);
    CHECK(strcmp(ids_in("c1", "U", 5), "") == 0);
}

static void test_limits(void)
{
    struct ms_remember_record r[2];
    char big[MS_REMEMBER_ID_MAX + 2];
    memset(big, 'k', sizeof big);
    big[MS_REMEMBER_ID_MAX + 1] = 0;
    struct wrote w = {0};
    r[0] = (struct ms_remember_record){big, MS_REMEMBER_ID_MAX + 1,
                                       MS_REMEMBER_START};
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r, 1, on_wrote, &w) ==
          MS_E2BIG);
    /* exactly at the bound: written */
    big[MS_REMEMBER_ID_MAX] = 0;
    r[0].id_len = MS_REMEMBER_ID_MAX;
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r, 1, on_wrote, &w) == 0);
    CHECK(w.done == 0);
    CHECK(wait_for(&w.done, 20000));
    CHECK(w.err == 0);
    CHECK(strcmp(sql("SELECT length(id) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 3"),
                 "512") == 0);

    r[0] = (struct ms_remember_record){"ok", 2, MS_REMEMBER_START};
    r[1] = (struct ms_remember_record){"", 0, MS_REMEMBER_START};
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r, 2, on_wrote, &w) ==
          MS_EINVAL);
    r[1] = (struct ms_remember_record){"a\0b", 3, MS_REMEMBER_START};
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r, 2, on_wrote, &w) ==
          MS_EINVAL);
    const char *bad[] = {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82",
                         "\xf4\x90\x80\x80"};
    for (int i = 0; i < 5; i++) {
        r[1] = (struct ms_remember_record){bad[i], strlen(bad[i]),
                                           MS_REMEMBER_START};
        CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r, 2, on_wrote, &w)
              == MS_EINVAL);
    }
    r[1] = (struct ms_remember_record){"op", 2, 3};
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r, 2, on_wrote, &w) ==
          MS_EINVAL);
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r, 1, NULL, &w) ==
          MS_EINVAL);
    CHECK(ms_remember_sql_write(rs, "", 3, 5, 0, r, 1, on_wrote, &w) ==
          MS_EINVAL);
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, r,
                                MS_REMEMBER_BATCH_MAX + 1, on_wrote, &w) ==
          MS_E2BIG);
    CHECK(ms_remember_sql_load(rs, "T", 3, NULL, NULL) == MS_EINVAL);
    CHECK(ms_remember_sql_load(rs, NULL, 3, on_loaded, NULL) == MS_EINVAL);
    /* a batch above the statement bound (10,000 ids of 512 bytes):
     * MS_E2BIG at the call; a replace is cut in statements, but not in
     * more than MS_PG_MAX_STATEMENTS */
    struct ms_remember_record *many =
        malloc(MS_REMEMBER_BATCH_MAX * sizeof *many);
    char (*distinct)[MS_REMEMBER_ID_MAX + 1] =
        malloc(MS_REMEMBER_BATCH_MAX * sizeof *distinct);
    for (int i = 0; i < MS_REMEMBER_BATCH_MAX; i++) {
        memset(distinct[i], 'k', MS_REMEMBER_ID_MAX);
        snprintf(distinct[i], 8, "%07d", i);
        distinct[i][7] = 'k';
        distinct[i][MS_REMEMBER_ID_MAX] = 0;
        many[i] = (struct ms_remember_record){distinct[i],
                                              MS_REMEMBER_ID_MAX,
                                              MS_REMEMBER_START};
    }
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 0, many,
                                MS_REMEMBER_BATCH_MAX, on_wrote, &w) ==
          MS_E2BIG);
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 1, many,
                                MS_REMEMBER_BATCH_MAX, on_wrote, &w) ==
          MS_E2BIG);
    /* a record that is not valid fails a large replace too */
    many[7].id_len = 0;
    CHECK(ms_remember_sql_write(rs, "T", 3, 5, 1, many, 100, on_wrote, &w)
          == MS_EINVAL);
    free(many);
    free(distinct);
    idle_for(50);
    CHECK(w.done == 1); /* no callback for a refused call */
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 3"),
                 "1") == 0);
}

static void test_batch_256(void)
{
    static char ids[256][24];
    const char *rec[256];
    for (int i = 0; i < 256; i++) {
        snprintf(ids[i], sizeof ids[i], "+e-%03d", i);
        rec[i] = ids[i];
    }
    struct ms_remember_sql_stats before, after;
    ms_remember_sql_stats(rs, &before);
    CHECK(write_("T", 4, 5, 0, rec, 256) == 0);
    ms_remember_sql_stats(rs, &after);
    CHECK(after.groups == before.groups + 1);
    CHECK(after.writes == before.writes + 1);
    CHECK(after.records == before.records + 256);
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 4"),
                 "256") == 0);
    struct loaded l = load("T", 4);
    CHECK(l.n == 256 && strncmp(l.joined, "e-000|e-001|", 12) == 0);
    /* stop them all in one batch */
    for (int i = 0; i < 256; i++)
        ids[i][0] = '-';
    CHECK(write_("T", 4, 5, 0, rec, 256) == 0);
    CHECK(load("T", 4).n == 0);
}

/* A replace larger than MS_REMEMBER_SQL_CHUNK_BYTES (4 KiB in this
 * test) is several statements, one per range of ids, in one
 * transaction: together they leave exactly the set. */
static void test_big_replace(void)
{
    enum { N = 2000 };
    static char idv[N + 8][16];
    static struct ms_remember_record r[N + 8];
    /* before: the even ones, and ids below, between and above them */
    uint32_t n = 0;
    for (int i = 0; i < N; i += 2) {
        snprintf(idv[n], sizeof idv[n], "k%04d", i);
        r[n] = (struct ms_remember_record){idv[n], 5, MS_REMEMBER_START};
        n++;
    }
    const char *extra[] = {"a-below", "k0500x", "zz-above", "k"};
    for (int i = 0; i < 4; i++)
        r[n++] = (struct ms_remember_record){extra[i], strlen(extra[i]),
                                             MS_REMEMBER_START};
    struct wrote w = {0};
    CHECK(ms_remember_sql_write(rs, "T", 5, 5, 0, r, n, on_wrote, &w) == 0);
    CHECK(wait_for(&w.done, 20000) && w.err == 0);
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 5"),
                 "1004") == 0);
    /* above MS_REMEMBER_SQL_LOAD_MAX (1,000 in this test): refused */
    struct loaded big = load("T", 5);
    CHECK(big.err == MS_E2BIG && big.n == 0);
    CHECK(strstr(big.msg, "more than 1000 ids") != NULL);
    CHECK(MS_REMEMBER_SQL_LOAD_MAX == 1000);
    /* a kept id keeps its row (its `since`), in every range: the 334
     * multiples of 6 */
    sql("UPDATE moonshard_remembered SET since = '2001-01-01' WHERE "
        "cluster = 'c1' AND type = 'T' AND shard = 5");

    /* the set: the multiples of 3, given backwards, with k0003 started
     * and then stopped, and new-1 stopped and started again */
    n = 0;
    r[n++] = (struct ms_remember_record){"new-1", 5, MS_REMEMBER_STOP};
    for (int i = N - 1 - (N - 1) % 3; i >= 0; i -= 3) {
        snprintf(idv[n], sizeof idv[n], "k%04d", i);
        r[n] = (struct ms_remember_record){idv[n], 5, MS_REMEMBER_START};
        n++;
    }
    r[n++] = (struct ms_remember_record){"k0003", 5, MS_REMEMBER_STOP};
    r[n++] = (struct ms_remember_record){"new-1", 5, MS_REMEMBER_START};
    /* a stale one first: nothing of it is written */
    memset(&w, 0, sizeof w);
    CHECK(ms_remember_sql_write(rs, "T", 5, 4, 1, r, n, on_wrote, &w) == 0);
    CHECK(wait_for(&w.done, 20000) && w.err == MS_ESTALE);
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 5"),
                 "1004") == 0);
    memset(&w, 0, sizeof w);
    CHECK(ms_remember_sql_write(rs, "T", 5, 5, 1, r, n, on_wrote, &w) == 0);
    CHECK(wait_for(&w.done, 20000) && w.err == 0);
    /* 667 multiples of 3 in 0..1999, k0003 out, new-1 in */
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 5"),
                 "667") == 0);
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 5 AND NOT "
                     "((id ~ '^k[0-9]{4}$' AND substr(id, 2)::int % 3 = 0 "
                     "AND id <> 'k0003') OR id = 'new-1')"), "0") == 0);
    CHECK(strcmp(sql("SELECT count(*) FROM moonshard_remembered WHERE "
                     "cluster = 'c1' AND type = 'T' AND shard = 5 AND "
                     "since = '2001-01-01'"), "334") == 0);
    struct loaded l = load("T", 5);
    CHECK(l.n == 667 && strncmp(l.joined, "k0000|k0006|k0009|", 18) == 0);
    /* the other shards of T kept theirs */
    CHECK(strcmp(ids_in("c1", "T", 1), "n1|p") == 0);
}

/* Writes queued in one turn go as one group, in order; a stale one fails
 * alone; what is queued while a group runs goes in the next one. */
static void test_group(void)
{
    struct ms_remember_record r1 = {"g", 1, MS_REMEMBER_START};
    struct ms_remember_record r2 = {"g", 1, MS_REMEMBER_STOP};
    struct ms_remember_record r3 = {"h", 1, MS_REMEMBER_START};
    struct wrote w[5];
    memset(w, 0, sizeof w);
    struct ms_remember_sql_stats before, after;
    ms_remember_sql_stats(rs, &before);
    ended = 0;
    CHECK(ms_remember_sql_write(rs, "T", 6, 5, 0, &r1, 1, on_wrote, &w[0])
          == 0);
    CHECK(ms_remember_sql_write(rs, "T", 6, 5, 0, &r2, 1, on_wrote, &w[1])
          == 0);
    CHECK(ms_remember_sql_write(rs, "T", 6, 4, 0, &r3, 1, on_wrote, &w[2])
          == 0); /* stale */
    CHECK(ms_remember_sql_write(rs, "T", 6, 5, 0, &r3, 1, on_wrote, &w[3])
          == 0);
    CHECK(ms_remember_sql_write(rs, "T", 6, 5, 0, &r1, 1, on_wrote, &w[4])
          == 0);
    CHECK(w[0].done == 0);
    int *last = &w[4].done;
    CHECK(wait_for(last, 20000));
    for (int i = 0; i < 5; i++) {
        CHECK(w[i].done == 1);
        CHECK(w[i].order == i + 1);
        CHECK(w[i].err == (i == 2 ? MS_ESTALE : 0));
    }
    ms_remember_sql_stats(rs, &after);
    CHECK(after.groups == before.groups + 1);
    /* start g, stop g, start h, start g: in that order */
    CHECK(strcmp(ids_in("c1", "T", 6), "g|h") == 0);

    /* one write goes at once; two queued while it runs go together (one
     * group each would be 3) */
    memset(w, 0, sizeof w);
    ms_remember_sql_stats(rs, &before);
    CHECK(ms_remember_sql_write(rs, "T", 6, 5, 0, &r2, 1, on_wrote, &w[0])
          == 0);
    uv_run(loop, UV_RUN_NOWAIT); /* its group goes to the pool */
    CHECK(ms_remember_sql_write(rs, "T", 6, 5, 0, &r1, 1, on_wrote, &w[1])
          == 0);
    CHECK(ms_remember_sql_write(rs, "T", 6, 5, 0, &r2, 1, on_wrote, &w[2])
          == 0);
    CHECK(wait_for(&w[2].done, 20000));
    CHECK(w[0].err == 0 && w[1].err == 0 && w[2].err == 0);
    ms_remember_sql_stats(rs, &after);
    CHECK(after.groups == before.groups + 2);
    CHECK(strcmp(ids_in("c1", "T", 6), "h") == 0);
}

/* A database at version 1 (made by taking version 2 off a migrated one)
 * is migrated to version 2 and keeps the rows of its tables. */
static void test_migrate_v1(void)
{
    sql("CREATE DATABASE from_v1");
    char ci[600];
    snprintf(ci, sizeof ci, "%s", conninfo);
    char *db = strstr(ci, "dbname=");
    CHECK(db != NULL);
    if (!db)
        return;
    char rest[600];
    const char *after = strchr(db, ' ');
    snprintf(rest, sizeof rest, "%s", after ? after : "");
    snprintf(db, sizeof ci - (size_t)(db - ci), "dbname=from_v1%s", rest);
    struct ms_pg *p = pg_pool(ci, 0, 0, 2, 0);
    struct migrated m = migrate(p);
    CHECK(m.err == 0 && m.version == 2 && m.applied == 2);
    pg_sql(p, "DROP TABLE moonshard_remembered");
    pg_sql(p, "DELETE FROM moonshard_schema WHERE version = 2");
    pg_sql(p, "INSERT INTO moonshard_leases VALUES ('c1', 'T', 0, 'n1', 5, "
              "now() + interval '1 hour')");
    pg_sql(p, "INSERT INTO moonshard_events (cluster, type, id, sequence, "
              "epoch, payload) VALUES ('c1', 'T', 'x', 1, 5, '{}')");
    pg_sql(p, "INSERT INTO moonshard_states (cluster, type, id, revision, "
              "epoch, state) VALUES ('c1', 'T', 'x', 3, 5, '{\"v\":1}')");
    CHECK(strcmp(pg_sql(p, "SELECT string_agg(version::text, ',') FROM "
                           "moonshard_schema"), "1") == 0);

    m = migrate(p);
    CHECK(m.err == 0 && m.version == 2 && m.applied == 1);
    CHECK(strcmp(pg_sql(p, "SELECT string_agg(version::text, ',' ORDER BY "
                           "version) FROM moonshard_schema"), "1,2") == 0);
    CHECK(strcmp(pg_sql(p, "SELECT count(*) FROM moonshard_events"), "1")
          == 0);
    CHECK(strcmp(pg_sql(p, "SELECT state FROM moonshard_states"),
                 "{\"v\":1}") == 0);
    CHECK(strcmp(pg_sql(p, "SELECT owner || epoch FROM moonshard_leases"),
                 "n15") == 0);
    /* and the new table works there */
    struct ms_remember_sql *s = ms_remember_sql_new(loop, p, "c1", "n1");
    const char *a[] = {"+m"};
    CHECK(write_on(s, "T", 0, 5, 0, a, 1) == 0);
    CHECK(strcmp(load_on(s, "T", 0).joined, "m") == 0);
    /* again: nothing to apply */
    m = migrate(p);
    CHECK(m.err == 0 && m.version == 2 && m.applied == 0);
    pg_close_pool(p);
    int closed = 0;
    ms_remember_sql_close(s, pg_on_closed, &closed);
    CHECK(wait_for(&closed, 5000));
}

/* Closing fails what is not sent yet, with its callback, and writes
 * nothing of it. */
static void test_close(void)
{
    struct ms_remember_sql *s = ms_remember_sql_new(loop, pg, "c1", "n1");
    struct ms_remember_record r = {"closing", 7, MS_REMEMBER_START};
    struct wrote w = {0};
    CHECK(ms_remember_sql_write(s, "T", 0, 5, 0, &r, 1, on_wrote, &w) == 0);
    int closed = 0;
    ms_remember_sql_close(s, pg_on_closed, &closed);
    CHECK(w.done == 1 && w.err == MS_ECANCELED);
    CHECK(wait_for(&closed, 5000));
    idle_for(100);
    CHECK(w.done == 1);
    CHECK(strcmp(ids_in("c1", "T", 0), "a|c|y") == 0);
}

/* MS_BENCH: 1,000 writes of 256 records, one at a time and then all
 * queued at once. */
static void bench(void)
{
    enum { WRITES = 1000, RECS = 256 };
    static char idbuf[RECS][32];
    static struct ms_remember_record r[RECS];
    static struct wrote w[WRITES];
    for (int pass = 0; pass < 2; pass++) {
        /* a type per pass: the rows the first pass deleted would slow
         * the second down until a vacuum */
        const char *type = pass ? "C" : "B";
        memset(w, 0, sizeof w);
        uint64_t t0 = uv_hrtime();
        for (int i = 0; i < WRITES; i++) {
            for (int k = 0; k < RECS; k++) {
                snprintf(idbuf[k], sizeof idbuf[k], "order-%04d-%03d", i, k);
                r[k] = (struct ms_remember_record){idbuf[k],
                                                   strlen(idbuf[k]),
                                                   MS_REMEMBER_START};
            }
            CHECK(ms_remember_sql_write(rs, type, (uint32_t)(i % 4), 5, 0, r,
                                        RECS, on_wrote, &w[i]) == 0);
            if (pass == 0)
                CHECK(wait_for(&w[i].done, 20000));
        }
        CHECK(wait_for(&w[WRITES - 1].done, 120000));
        double s = (double)(uv_hrtime() - t0) / 1e9;
        int failed = 0;
        for (int i = 0; i < WRITES; i++)
            failed += w[i].err != 0;
        printf("bench %s: %d writes of %d records in %.2f s: %.0f writes/s,"
               " %.0f records/s, %d failed; rows now %s\n",
               pass ? "all queued at once" : "one at a time", WRITES, RECS,
               s, WRITES / s, WRITES * RECS / s, failed,
               pass ? sql("SELECT count(*) FROM moonshard_remembered "
                          "WHERE type = 'C'")
                    : sql("SELECT count(*) FROM moonshard_remembered "
                          "WHERE type = 'B'"));
    }
}

int main(void)
{
    ms_log_setup("test", MS_LOG_INFO);
    ms_log_set_sink(sink, NULL);
    if (server_start() != 0) {
        fprintf(stderr, "test_remember_sql: cannot start a throwaway "
                        "PostgreSQL (spec/helpers/pg_server.sh)\n");
        return 1;
    }
    atexit(server_cleanup);
    loop = uv_default_loop();
    pg = pg_pool(conninfo, 0, 0, 2, 0);
    struct migrated m = migrate(pg);
    CHECK(m.err == 0 && m.version == MS_PG_SCHEMA_VERSION);
    CHECK(MS_PG_SCHEMA_VERSION == 2);
    CHECK(strcmp(sql("SELECT count(*) FROM pg_tables WHERE tablename = "
                     "'moonshard_remembered'"), "1") == 0);
    int ntables = 0;
    for (const char *const *t = ms_pg_schema_tables; *t; t++)
        ntables += strcmp(*t, "moonshard_remembered") == 0;
    CHECK(ntables == 1);
    sql("INSERT INTO moonshard_leases (cluster, type, shard, owner, epoch, "
        "expires_at) SELECT 'c1', 'T', s, 'n1', 5, now() + interval "
        "'1 hour' FROM generate_series(0, 6) AS s");
    sql("INSERT INTO moonshard_leases VALUES "
        "('c1', 'T', 7, 'n2', 5, now() + interval '1 hour'), "
        "('c1', 'T', 8, 'n1', 5, now() - interval '1 second'), "
        "('c1', 'U', 2, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'U', 5, 'n1', 5, now() + interval '1 hour'), "
        "('c2', 'T', 2, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'B', 0, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'B', 1, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'B', 2, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'B', 3, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'C', 0, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'C', 1, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'C', 2, 'n1', 5, now() + interval '1 hour'), "
        "('c1', 'C', 3, 'n1', 5, now() + interval '1 hour')");
    rs = ms_remember_sql_new(loop, pg, "c1", "n1");
    CHECK(rs != NULL);
    test_start_stop();
    test_replace();
    test_fenced();
    test_bytes();
    test_limits();
    test_batch_256();
    test_big_replace();
    test_group();
    test_migrate_v1();
    test_close();
    const char *b = getenv("MS_BENCH");
    if (b && strcmp(b, "1") == 0)
        bench();
    pg_close_pool(pg);
    int closed = 0;
    ms_remember_sql_close(rs, pg_on_closed, &closed);
    CHECK(wait_for(&closed, 5000));
    CHECK(uv_loop_close(loop) == 0);
    server_cleanup();
    CHECK_DONE();
}
