/*
 * remember_sql.c -- the PostgreSQL store of remember-entities; see
 * remember_sql.h.
 *
 * A write is one statement (SQL_WRITE): the batch travels as two arrays
 * (the ids as a text[] literal, the ops as a smallint[] one), unnested
 * WITH ORDINALITY so that the last record of an id wins; its first CTE
 * locks the lease row and divides by the number of rows it found, so a
 * missing or stale lease raises division_by_zero (22012) and the write
 * is undone: MS_ESTALE. The pool prepares the statement once per
 * connection (ms_pg_group).
 *
 * Group commit: a zero timer started by the first queued write sends
 * what is queued as one group on the loop's next turn; while that group
 * runs, writes gather, and the group's end sends the next one.
 */
#include "remember_sql.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"

/* $1 cluster, $2 type, $3 shard, $4 owner, $5 epoch, $6 text[] ids,
 * $7 smallint[] ops (1 start, 2 stop), $8 replace, $9 and $10 the range
 * of ids a replace covers, [$9, $10) bytewise (NULL: unbounded; a large
 * replace is several statements, one per range).
 *   lease: locks the lease row, or raises 22012;
 *   r:     each id's last op;
 *   del:   the stopped ids (= ANY of an array: index lookups, where a
 *          join with `r` may be planned as a scan of the whole shard);
 *   rest:  for a replace, every other id of its range that the batch
 *          does not name (a range scan; skipped by its one-time filter
 *          otherwise);
 *   ins:   the started ids.
 * The three touch disjoint ids, so one snapshot is enough. The SELECT
 * reads `lease` whatever the batch holds (a plan may skip a join with an
 * empty side) and returns the rows changed (for tools; the store does
 * not need them). */
static const char SQL_WRITE[] =
    "WITH lease AS (SELECT 1 / count(*) AS ok FROM (SELECT 1"
    " FROM moonshard_leases WHERE cluster = $1 AND type = $2"
    " AND shard = $3::integer AND owner = $4 AND epoch = $5::bigint"
    " AND expires_at > now() FOR SHARE) AS l),"
    " r AS (SELECT DISTINCT ON (u.id) u.id, u.op"
    " FROM unnest($6::text[], $7::smallint[]) WITH ORDINALITY"
    " AS u(id, op, n) ORDER BY u.id, u.n DESC),"
    " del AS (DELETE FROM moonshard_remembered m USING lease"
    " WHERE m.cluster = $1 AND m.type = $2 AND m.shard = $3::integer"
    " AND m.id = ANY (ARRAY(SELECT id FROM r WHERE op = 2)) RETURNING 1),"
    " rest AS (DELETE FROM moonshard_remembered m USING lease"
    " WHERE $8::boolean AND m.cluster = $1 AND m.type = $2"
    " AND m.shard = $3::integer"
    " AND ($9::text IS NULL OR m.id COLLATE \"C\" >= $9::text)"
    " AND ($10::text IS NULL OR m.id COLLATE \"C\" < $10::text)"
    " AND m.id NOT IN (SELECT id FROM r) RETURNING 1),"
    " ins AS (INSERT INTO moonshard_remembered (cluster, type, shard, id)"
    " SELECT $1, $2, $3::integer, r.id FROM lease, r WHERE r.op = 1"
    " ON CONFLICT DO NOTHING RETURNING 1)"
    " SELECT (SELECT ok FROM lease), (SELECT count(*) FROM ins),"
    " (SELECT count(*) FROM del) + (SELECT count(*) FROM rest)";

/* $1 cluster, $2 type, $3 shard, $4 limit */
static const char SQL_LOAD[] =
    "SELECT id FROM moonshard_remembered WHERE cluster = $1"
    " AND type = $2 AND shard = $3::integer ORDER BY id COLLATE \"C\""
    " LIMIT $4::bigint";

#define NPARAMS 10

struct wr;

struct ms_remember_sql {
    uv_loop_t *loop;
    struct ms_pg *pg;
    char *cluster;
    char *owner;
    uv_timer_t flush;        /* sends the queue on the next turn */
    struct wr *head, *tail;  /* writes not yet sent */
    int inflight;            /* groups in the pool (0 or 1) */
    void (*closed_cb)(void *);
    void *closed_data;
    struct ms_remember_sql_stats st;
};

/* One write: nst statements (several for a large replace, one
 * otherwise); owns their parameters, params[k * NPARAMS + i]. */
struct wr {
    struct ms_remember_sql *s;
    struct wr *next;
    uint32_t nrecords;
    size_t bytes;            /* of its parameters */
    ms_remember_sql_write_cb cb;
    void *data;
    int nst;
    char **params;
};

/* The writes of one group (the pool's callback data). */
struct group {
    struct ms_remember_sql *s;
    int n;
    struct wr *w[MS_REMEMBER_SQL_GROUP];
};

struct ms_remember_sql *ms_remember_sql_new(uv_loop_t *loop, struct ms_pg *pg,
                                            const char *cluster,
                                            const char *owner)
{
    struct ms_remember_sql *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->loop = loop;
    s->pg = pg;
    s->cluster = ms_pg_dupstr(cluster ? cluster : "");
    s->owner = ms_pg_dupstr(owner ? owner : "");
    if (!s->cluster || !s->owner) {
        free(s->cluster);
        free(s->owner);
        free(s);
        return NULL;
    }
    uv_timer_init(loop, &s->flush);
    s->flush.data = s;
    return s;
}

static void wr_free(struct wr *w)
{
    if (w->params)
        for (int i = 0; i < w->nst * NPARAMS; i++)
            free(w->params[i]);
    free(w->params);
    free(w);
}

static void on_flush_closed(uv_handle_t *h)
{
    struct ms_remember_sql *s = h->data;
    void (*cb)(void *) = s->closed_cb;
    void *data = s->closed_data;
    free(s->cluster);
    free(s->owner);
    free(s);
    if (cb)
        cb(data);
}

void ms_remember_sql_close(struct ms_remember_sql *s, void (*cb)(void *),
                           void *data)
{
    s->closed_cb = cb;
    s->closed_data = data;
    struct wr *w = s->head;
    s->head = s->tail = NULL;
    while (w) {
        struct wr *next = w->next;
        w->cb(MS_ECANCELED, "the node is stopping: nothing was written",
              w->data);
        wr_free(w);
        w = next;
    }
    uv_close((uv_handle_t *)&s->flush, on_flush_closed);
}

void ms_remember_sql_stats(const struct ms_remember_sql *s,
                           struct ms_remember_sql_stats *out)
{
    *out = s->st;
}

/* A server's or libpq's message, on one line and bounded. */
static void one_line(char *out, size_t cap, const char *msg)
{
    snprintf(out, cap, "%s", msg ? msg : "");
    ms_pg_one_line(out);
}

/* ---- writes ---------------------------------------------------------- */

static void on_flush(uv_timer_t *t);

/* Write w ended with `err` (a pool's code, mapped here): counts it,
 * calls its callback and frees it. */
static void wr_done(struct wr *w, int err, const char *sqlstate,
                    const char *pgmsg)
{
    struct ms_remember_sql *s = w->s;
    char msg[MS_REMEMBER_SQL_MESSAGE_MAX];
    if (err == MS_PG_EQUERY && sqlstate && strcmp(sqlstate, "22012") == 0)
        err = MS_ESTALE;
    if (err == MS_ESTALE) {
        snprintf(msg, sizeof msg, "the lease of this shard is not held at "
                 "the writer's epoch (another owner took it, or it "
                 "expired): nothing was written");
        s->st.stale_refused++;
    } else if (err) {
        one_line(msg, sizeof msg, pgmsg && pgmsg[0] ? pgmsg
                                                    : ms_strerror(err));
        s->st.db_errors++;
    } else {
        msg[0] = 0;
        s->st.writes++;
        s->st.records += w->nrecords;
    }
    w->cb(err, msg, w->data);
    wr_free(w);
}

static void on_group(const struct ms_pg_result *r, void *data)
{
    struct group *g = data;
    struct ms_remember_sql *s = g->s;
    s->inflight--;
    /* what gathered meanwhile goes next (on the next turn: the pool is
     * inside its callback now) */
    if (s->head && !uv_is_active((uv_handle_t *)&s->flush))
        uv_timer_start(&s->flush, on_flush, 0, 0);
    int committed = 0;
    for (int u = 0; u < g->n; u++) {
        int err = ms_pg_result_unit_error(r, u);
        committed += err == 0;
        wr_done(g->w[u], err, ms_pg_result_unit_sqlstate(r, u),
                ms_pg_result_unit_message(r, u));
    }
    if (committed)
        s->st.groups++;
    free(g);
}

/* Sends the head of the queue as one group. */
static void send_group(struct ms_remember_sql *s)
{
    struct group *g = malloc(sizeof *g);
    if (!g)
        return; /* tried again by the next write's timer */
    g->s = s;
    g->n = 0;
    size_t bytes = 0;
    int nst = 0;
    while (s->head && g->n < MS_REMEMBER_SQL_GROUP &&
           (g->n == 0 ||
            (bytes + s->head->bytes <= MS_REMEMBER_SQL_GROUP_BYTES &&
             nst + s->head->nst <= MS_PG_MAX_GROUP_STATEMENTS / 2))) {
        struct wr *w = s->head;
        s->head = w->next;
        bytes += w->bytes;
        nst += w->nst;
        g->w[g->n++] = w;
    }
    if (!s->head)
        s->tail = NULL;
    const char **sql = malloc((size_t)nst * sizeof *sql);
    int *np = malloc((size_t)nst * sizeof *np);
    const char *const **params = malloc((size_t)nst * sizeof *params);
    int unit_n[MS_REMEMBER_SQL_GROUP];
    int rc = MS_ENOMEM;
    if (sql && np && params) {
        int k = 0;
        for (int u = 0; u < g->n; u++) {
            unit_n[u] = g->w[u]->nst;
            for (int i = 0; i < g->w[u]->nst; i++, k++) {
                sql[k] = SQL_WRITE;
                np[k] = NPARAMS;
                params[k] = (const char *const *)g->w[u]->params +
                            i * NPARAMS;
            }
        }
        rc = ms_pg_group(s->pg, g->n, unit_n, sql, np, params, on_group, g);
    }
    free(sql);
    free(np);
    free(params);
    if (rc == 0) {
        s->inflight++;
        return;
    }
    char msg[MS_REMEMBER_SQL_MESSAGE_MAX];
    one_line(msg, sizeof msg, ms_strerror(rc));
    for (int u = 0; u < g->n; u++)
        wr_done(g->w[u], rc, NULL, msg);
    free(g);
}

static void on_flush(uv_timer_t *t)
{
    struct ms_remember_sql *s = t->data;
    if (s->head && s->inflight == 0)
        send_group(s);
}

/* 1 when b[0..n) is UTF-8 as PostgreSQL takes it: no overlong forms, no
 * surrogates, nothing above U+10FFFF, no NUL. */
static int utf8_ok(const unsigned char *b, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = b[i];
        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
            min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
            min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((b[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (b[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* The ids as a text[] literal (each quoted, \ and " escaped) and the ops
 * as a smallint[] one; checks every record (only that when ids_out is
 * NULL). 0, or MS_EINVAL, MS_E2BIG, MS_ENOMEM. */
int ms_remember_sql_id_ok(const char *id, size_t len)
{
    return id && len >= 1 && len <= MS_REMEMBER_ID_MAX &&
           utf8_ok((const unsigned char *)id, len);
}

static int arrays(const struct ms_remember_record *rec, uint32_t n,
                  char **ids_out, char **ops_out)
{
    size_t cap = 3;
    for (uint32_t i = 0; i < n; i++) {
        if (!rec[i].id || rec[i].id_len == 0 ||
            (rec[i].op != MS_REMEMBER_START && rec[i].op != MS_REMEMBER_STOP))
            return MS_EINVAL;
        if (rec[i].id_len > MS_REMEMBER_ID_MAX)
            return MS_E2BIG;
        if (!utf8_ok((const unsigned char *)rec[i].id, rec[i].id_len))
            return MS_EINVAL;
        cap += 3 + 2 * rec[i].id_len;
        if (ids_out && cap > MS_PG_STATEMENT_MAX)
            return MS_E2BIG;
    }
    if (!ids_out)
        return 0;
    char *ids = malloc(cap), *ops = malloc(2 * (size_t)n + 3);
    if (!ids || !ops) {
        free(ids);
        free(ops);
        return MS_ENOMEM;
    }
    char *w = ids, *o = ops;
    *w++ = '{';
    *o++ = '{';
    for (uint32_t i = 0; i < n; i++) {
        if (i) {
            *w++ = ',';
            *o++ = ',';
        }
        *o++ = rec[i].op == MS_REMEMBER_START ? '1' : '2';
        *w++ = '"';
        for (size_t k = 0; k < rec[i].id_len; k++) {
            char c = rec[i].id[k];
            if (c == '"' || c == '\\')
                *w++ = '\\';
            *w++ = c;
        }
        *w++ = '"';
    }
    *w++ = '}';
    *w = 0;
    *o++ = '}';
    *o = 0;
    *ids_out = ids;
    *ops_out = ops;
    return 0;
}

/* Sets statement k of w: the common parameters, the arrays of rec[0..n)
 * and the range [lo, hi) of a replace (NULL: unbounded). */
static int statement(struct ms_remember_sql *s, struct wr *w, int k,
                     const char *type, const char *const num[2],
                     int replace, const struct ms_remember_record *rec,
                     uint32_t n, const struct ms_remember_record *lo,
                     const struct ms_remember_record *hi)
{
    char **p = w->params + k * NPARAMS;
    int rc = arrays(rec, n, &p[5], &p[6]);
    if (rc < 0)
        return rc;
    p[0] = ms_pg_dupstr(s->cluster);
    p[1] = ms_pg_dupstr(type);
    p[2] = ms_pg_dupstr(num[0]);
    p[3] = ms_pg_dupstr(s->owner);
    p[4] = ms_pg_dupstr(num[1]);
    p[7] = ms_pg_dupstr(replace ? "true" : "false");
    if (lo && (p[8] = malloc(lo->id_len + 1))) {
        memcpy(p[8], lo->id, lo->id_len);
        p[8][lo->id_len] = 0;
    }
    if (hi && (p[9] = malloc(hi->id_len + 1))) {
        memcpy(p[9], hi->id, hi->id_len);
        p[9][hi->id_len] = 0;
    }
    size_t bytes = sizeof SQL_WRITE;
    for (int i = 0; i < NPARAMS; i++) {
        if (!p[i] && (i < 8 || (i == 8 && lo) || (i == 9 && hi)))
            return MS_ENOMEM;
        if (p[i])
            bytes += strlen(p[i]);
    }
    if (bytes > MS_PG_STATEMENT_MAX)
        return MS_E2BIG;
    w->bytes += bytes;
    return 0;
}

/* For sorting a replace's records: bytewise by id, then in the order
 * given (so that the last record of an id can be found). */
struct keyed {
    const struct ms_remember_record *r;
    uint32_t at;
};

static int cmp_keyed(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    size_t n = x->r->id_len < y->r->id_len ? x->r->id_len : y->r->id_len;
    int c = memcmp(x->r->id, y->r->id, n);
    if (c)
        return c;
    if (x->r->id_len != y->r->id_len)
        return x->r->id_len < y->r->id_len ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* The bytes of an id in a text[] literal, at most. */
static size_t literal_bytes(const struct ms_remember_record *r)
{
    return 3 + 2 * r->id_len;
}

/* A replace above MS_REMEMBER_SQL_CHUNK_BYTES: the ids the batch leaves
 * started, sorted bytewise and cut into ranges, one statement each (at
 * most MS_PG_MAX_STATEMENTS) of the same transaction; statement k
 * replaces the ids in [its first id, the next statement's first id),
 * the first one from the bottom and the last one to the top, so that
 * together they cover every id of the shard. */
static int chunked(struct ms_remember_sql *s, struct wr *w, const char *type,
                   const char *const num[2],
                   const struct ms_remember_record *rec, uint32_t n)
{
    struct keyed *kv = malloc((size_t)n * sizeof *kv);
    struct ms_remember_record *set = malloc((size_t)n * sizeof *set);
    uint32_t *first = malloc((MS_PG_MAX_STATEMENTS + 1) * sizeof *first);
    int rc = MS_ENOMEM;
    if (!kv || !set || !first)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        kv[i].r = &rec[i];
        kv[i].at = i;
    }
    qsort(kv, n, sizeof *kv, cmp_keyed);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i + 1 < n && cmp_keyed(&(struct keyed){kv[i].r, 0},
                                   &(struct keyed){kv[i + 1].r, 0}) == 0)
            continue; /* a later record of the same id wins */
        if (kv[i].r->op == MS_REMEMBER_START)
            set[m++] = *kv[i].r;
    }
    int nst = 0;
    size_t bytes = 0;
    for (uint32_t i = 0; i < m; i++) {
        size_t b = literal_bytes(&set[i]);
        if (i == 0 || bytes + b > MS_REMEMBER_SQL_CHUNK_BYTES) {
            if (nst == MS_PG_MAX_STATEMENTS) {
                rc = MS_E2BIG;
                goto out;
            }
            first[nst++] = i;
            bytes = 0;
        }
        bytes += b;
    }
    if (nst == 0)
        first[nst++] = 0; /* nothing left started: one range, all */
    first[nst] = m;
    if (!(w->params = calloc((size_t)nst * NPARAMS, sizeof *w->params)))
        goto out;
    w->nst = nst;
    for (int k = 0; k < nst; k++) {
        rc = statement(s, w, k, type, num, 1, set + first[k],
                       first[k + 1] - first[k],
                       k > 0 ? &set[first[k]] : NULL,
                       k + 1 < nst ? &set[first[k + 1]] : NULL);
        if (rc < 0)
            goto out;
    }
    rc = 0;
out:
    free(kv);
    free(set);
    free(first);
    return rc;
}

int ms_remember_sql_write(struct ms_remember_sql *s, const char *type,
                          uint32_t shard, uint64_t epoch, int replace,
                          const struct ms_remember_record *records,
                          uint32_t n, ms_remember_sql_write_cb cb,
                          void *data)
{
    if (!s || !type || !type[0] || !cb || (n > 0 && !records) ||
        (n == 0 && !replace) || shard > INT32_MAX)
        return MS_EINVAL;
    if (n > (replace ? MS_REMEMBER_SQL_REPLACE_MAX : MS_REMEMBER_BATCH_MAX))
        return MS_E2BIG;
    size_t bytes = 0;
    for (uint32_t i = 0; i < n; i++)
        bytes += literal_bytes(&records[i]);
    struct wr *w = calloc(1, sizeof *w);
    if (!w)
        return MS_ENOMEM;
    char num[2][24];
    snprintf(num[0], sizeof num[0], "%" PRIu32, shard);
    snprintf(num[1], sizeof num[1], "%" PRIu64, epoch);
    const char *const nums[2] = {num[0], num[1]};
    int rc;
    if (replace && bytes > MS_REMEMBER_SQL_CHUNK_BYTES) {
        /* every record checked first: arrays() sees only the starts */
        rc = arrays(records, n, NULL, NULL);
        if (rc == 0)
            rc = chunked(s, w, type, nums, records, n);
    } else if (!(w->params = calloc(NPARAMS, sizeof *w->params))) {
        rc = MS_ENOMEM;
    } else {
        w->nst = 1;
        rc = statement(s, w, 0, type, nums, replace, records, n, NULL, NULL);
    }
    if (rc < 0) {
        wr_free(w);
        return rc;
    }
    w->s = s;
    w->nrecords = n;
    w->cb = cb;
    w->data = data;
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    if (s->inflight == 0 && !uv_is_active((uv_handle_t *)&s->flush))
        uv_timer_start(&s->flush, on_flush, 0, 0);
    return 0;
}

/* ---- loads ----------------------------------------------------------- */

struct load {
    struct ms_remember_sql *s;
    ms_remember_sql_load_cb cb;
    void *data;
};

static void on_loaded(const struct ms_pg_result *r, void *data)
{
    struct load l = *(struct load *)data;
    free(data);
    char msg[MS_REMEMBER_SQL_MESSAGE_MAX];
    int err = ms_pg_result_error(r);
    if (err) {
        l.s->st.db_errors++;
        one_line(msg, sizeof msg, ms_pg_result_message(r)[0]
                                      ? ms_pg_result_message(r)
                                      : ms_strerror(err));
        l.cb(err, msg, NULL, NULL, 0, l.data);
        return;
    }
    int rows = ms_pg_result_rows(r);
    if (rows > MS_REMEMBER_SQL_LOAD_MAX) {
        l.s->st.db_errors++;
        snprintf(msg, sizeof msg, "the shard remembers more than %d ids: "
                 "not loaded", MS_REMEMBER_SQL_LOAD_MAX);
        l.cb(MS_E2BIG, msg, NULL, NULL, 0, l.data);
        return;
    }
    size_t cnt = rows > 0 ? (size_t)rows : 1;
    const char **ids = malloc(cnt * sizeof *ids);
    size_t *lens = malloc(cnt * sizeof *lens);
    if (!ids || !lens) {
        free(ids);
        free(lens);
        l.s->st.db_errors++;
        l.cb(MS_ENOMEM, "out of memory", NULL, NULL, 0, l.data);
        return;
    }
    for (int i = 0; i < rows; i++) {
        ids[i] = ms_pg_result_value(r, i, 0);
        if (!ids[i])
            ids[i] = "";
        lens[i] = strlen(ids[i]);
    }
    l.s->st.loads++;
    l.s->st.loaded_ids += (uint64_t)rows;
    l.cb(0, "", ids, lens, (uint32_t)rows, l.data);
    free(ids);
    free(lens);
}

int ms_remember_sql_load(struct ms_remember_sql *s, const char *type,
                         uint32_t shard, ms_remember_sql_load_cb cb,
                         void *data)
{
    if (!s || !type || !type[0] || !cb || shard > INT32_MAX)
        return MS_EINVAL;
    struct load *l = malloc(sizeof *l);
    if (!l)
        return MS_ENOMEM;
    l->s = s;
    l->cb = cb;
    l->data = data;
    char num[16], limit[16];
    snprintf(num, sizeof num, "%" PRIu32, shard);
    snprintf(limit, sizeof limit, "%d", MS_REMEMBER_SQL_LOAD_MAX + 1);
    const char *p[4] = {s->cluster, type, num, limit};
    int rc = ms_pg_query(s->pg, SQL_LOAD, 4, p, on_loaded, l);
    if (rc < 0)
        free(l);
    return rc;
}
