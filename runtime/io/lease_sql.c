/*
 * lease_sql.c -- the lease statements on the pool; see lease_sql.h.
 */
#include "lease_sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"
#include "../core/jsoncheck.h"

#define NAME_MAX_BYTES 63

/* $1 cluster, $2 type, $3 shard, $4 owner, $5 duration in ms. One
 * statement: the INSERT takes a free or expired row (or ours), and the
 * SELECT reports the holder when it did not (its snapshot is the one
 * before the INSERT, so it sees the row that refused us). */
const char ms_lease_sql_acquire[] =
    "WITH got AS ("
    " INSERT INTO moonshard_leases AS l"
    " (cluster, type, shard, owner, epoch, expires_at)"
    " VALUES ($1, $2, $3::integer, $4, 1,"
    " now() + $5::bigint * interval '1 millisecond')"
    " ON CONFLICT (cluster, type, shard) DO UPDATE"
    " SET owner = EXCLUDED.owner,"
    " epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > now()"
    " THEN l.epoch ELSE l.epoch + 1 END,"
    " expires_at = EXCLUDED.expires_at"
    " WHERE l.owner = EXCLUDED.owner OR l.expires_at <= now()"
    " RETURNING epoch, expires_at)"
    " SELECT 'acquired', epoch,"
    " (extract(epoch FROM expires_at) * 1000)::bigint,"
    " (extract(epoch FROM now()) * 1000)::bigint FROM got"
    " UNION ALL"
    " SELECT 'held', epoch,"
    " (extract(epoch FROM expires_at) * 1000)::bigint,"
    " (extract(epoch FROM now()) * 1000)::bigint FROM moonshard_leases"
    " WHERE cluster = $1 AND type = $2 AND shard = $3::integer"
    " AND NOT EXISTS (SELECT 1 FROM got)";

/* $1..$4 as above, $5 duration, $6 epoch */
const char ms_lease_sql_renew[] =
    "UPDATE moonshard_leases"
    " SET expires_at = now() + $5::bigint * interval '1 millisecond'"
    " WHERE cluster = $1 AND type = $2 AND shard = $3::integer"
    " AND owner = $4 AND epoch = $6::bigint AND expires_at > now()"
    " RETURNING epoch, (extract(epoch FROM expires_at) * 1000)::bigint,"
    " (extract(epoch FROM now()) * 1000)::bigint";

/* $1..$4, $5 epoch (0: whatever epoch this owner holds) */
const char ms_lease_sql_release[] =
    "UPDATE moonshard_leases SET expires_at = now()"
    " WHERE cluster = $1 AND type = $2 AND shard = $3::integer"
    " AND owner = $4 AND ($5::bigint = 0 OR epoch = $5::bigint)"
    " AND expires_at > now()";

struct ms_lease_sql {
    struct ms_pg *pg;
    ms_lease_sql_cb cb;
    void *data;
    int closed;
    unsigned long inflight;
    char cluster[NAME_MAX_BYTES + 1];
};

struct job {
    struct ms_lease_sql *ls;
    int kind;       /* enum ms_lease_action_kind */
    int type;
    uint32_t shard;
    uint64_t req;
};

int ms_lease_sql_new(struct ms_lease_sql **out, struct ms_pg *pg,
                     const char *cluster, ms_lease_sql_cb cb, void *data)
{
    *out = NULL;
    if (!pg || !cb || !cluster || !cluster[0] ||
        strlen(cluster) > NAME_MAX_BYTES)
        return MS_EINVAL;
    struct ms_lease_sql *ls = calloc(1, sizeof *ls);
    if (!ls)
        return MS_ENOMEM;
    ls->pg = pg;
    ls->cb = cb;
    ls->data = data;
    memcpy(ls->cluster, cluster, strlen(cluster) + 1);
    *out = ls;
    return 0;
}

/* A bigint column of row 0, parsed whole: 0 or -1. */
static int col_i64(const struct ms_pg_result *res, int col, int64_t *out)
{
    const char *v = ms_pg_result_value(res, 0, col);
    if (!v || !*v)
        return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end)
        return -1;
    *out = x;
    return 0;
}

static void done(const struct ms_pg_result *res, void *data)
{
    struct job *j = data;
    struct ms_lease_sql *ls = j->ls;
    struct ms_lease_answer a;
    memset(&a, 0, sizeof a);
    a.kind = MS_LEASE_ANS_DB_ERROR;
    a.type = j->type;
    a.shard = j->shard;
    a.req = j->req;
    int64_t epoch = 0;
    if (ms_pg_result_error(res) == 0) {
        int rows = ms_pg_result_rows(res);
        if (j->kind == MS_LEASE_RELEASE) {
            a.kind = MS_LEASE_ANS_RELEASED;
        } else if (j->kind == MS_LEASE_RENEW && rows == 0) {
            a.kind = MS_LEASE_ANS_REFUSED; /* not ours, or expired */
        } else if (j->kind == MS_LEASE_RENEW && rows == 1 &&
                   ms_pg_result_cols(res) == 3 &&
                   col_i64(res, 0, &epoch) == 0 &&
                   col_i64(res, 1, &a.expires_at_ms) == 0 &&
                   col_i64(res, 2, &a.db_now_ms) == 0) {
            a.kind = MS_LEASE_ANS_RENEWED;
            a.epoch = (uint64_t)epoch;
        } else if (j->kind == MS_LEASE_ACQUIRE && rows == 1 &&
                   ms_pg_result_cols(res) == 4 &&
                   col_i64(res, 1, &epoch) == 0 && epoch > 0 &&
                   col_i64(res, 2, &a.expires_at_ms) == 0 &&
                   col_i64(res, 3, &a.db_now_ms) == 0) {
            const char *what = ms_pg_result_value(res, 0, 0);
            a.kind = what && strcmp(what, "acquired") == 0
                         ? MS_LEASE_ANS_ACQUIRED : MS_LEASE_ANS_REFUSED;
            a.epoch = (uint64_t)epoch;
        }
        /* anything else (the row vanished between the two halves of
         * the acquire): a failure, tried again after the backoff */
    }
    free(j);
    ls->inflight--;
    if (!ls->closed)
        ls->cb(ls->data, &a);
    else if (!ls->inflight)
        free(ls);
}

int ms_lease_sql_run(struct ms_lease_sql *ls, const struct ms_lease_action *a,
                     const char *type_name)
{
    if (!ls || ls->closed || !a || !a->owner || !type_name ||
        !type_name[0] || strlen(type_name) > NAME_MAX_BYTES ||
        (a->kind != MS_LEASE_ACQUIRE && a->kind != MS_LEASE_RENEW &&
         a->kind != MS_LEASE_RELEASE))
        return MS_EINVAL;
    char shard[16], duration[24], epoch[24];
    snprintf(shard, sizeof shard, "%u", a->shard);
    snprintf(duration, sizeof duration, "%llu",
             (unsigned long long)a->duration_ms);
    snprintf(epoch, sizeof epoch, "%llu", (unsigned long long)a->epoch);
    const char *params[6] = {ls->cluster, type_name, shard, a->owner,
                             duration, epoch};
    const char *sql = ms_lease_sql_acquire;
    int n = 5;
    if (a->kind == MS_LEASE_RENEW) {
        sql = ms_lease_sql_renew;
        n = 6;
    } else if (a->kind == MS_LEASE_RELEASE) {
        sql = ms_lease_sql_release;
        params[4] = epoch;
    }
    struct job *j = malloc(sizeof *j);
    if (!j)
        return MS_ENOMEM;
    j->ls = ls;
    j->kind = a->kind;
    j->type = a->type;
    j->shard = a->shard;
    j->req = a->req;
    int rc = ms_pg_query(ls->pg, sql, n, params, done, j);
    if (rc < 0) {
        free(j);
        return rc;
    }
    ls->inflight++;
    return 0;
}

void ms_lease_sql_close(struct ms_lease_sql *ls)
{
    if (!ls)
        return;
    ls->closed = 1;
    if (!ls->inflight)
        free(ls);
}

/* ---- the lease rows of one type (GET /v1/leases/{type}) ---------------- */

/* $1 cluster, $2 type, $3 limit. The database's clock says what has
 * expired and how long is left, as for the nodes and `moonshard db
 * leases` (runtime/db_show.c). */
const char ms_lease_sql_list_rows[] =
    "SELECT shard, owner, epoch, expires_at > now(),"
    " (extract(epoch FROM expires_at - now()) * 1000)::bigint"
    " FROM moonshard_leases WHERE cluster = $1 AND type = $2"
    " ORDER BY shard LIMIT $3::integer";

struct list_job {
    void (*cb)(void *data, int err, const char *payload, size_t len);
    void *data;
    char cluster[NAME_MAX_BYTES + 1];
    char type[NAME_MAX_BYTES + 1];
};

/* 1 when v is an optional '-' and 1..19 digits (a bigint or integer
 * column's text, safe to copy into JSON as a number). */
static int is_int(const char *v)
{
    size_t i = v[0] == '-', d = 0;
    for (; v[i]; i++, d++)
        if (v[i] < '0' || v[i] > '9')
            return 0;
    return d >= 1 && d <= 19;
}

static void list_fail(struct list_job *j, int err, const char *why)
{
    j->cb(j->data, err, why, strlen(why));
}

static void list_done(const struct ms_pg_result *res, void *data)
{
    struct list_job *j = data;
    int err = ms_pg_result_error(res);
    if (err) {
        char why[MS_PG_MESSAGE_MAX + 64];
        const char *m = ms_pg_result_message(res);
        snprintf(why, sizeof why, "%s%s%s", ms_strerror(err),
                 m && *m ? ": " : "", m ? m : "");
        ms_pg_one_line(why);
        list_fail(j, err, why);
        free(j);
        return;
    }
    int rows = ms_pg_result_rows(res);
    if (ms_pg_result_cols(res) != 5) {
        list_fail(j, MS_EDBQUERY, "the lease rows came back in an "
                  "unexpected shape");
        free(j);
        return;
    }
    /* each row: its fixed text, 3 numbers of at most 20 bytes and the
     * holder's name escaped (at most 6 bytes per byte) */
    size_t cap = 64 + 6 * (sizeof j->cluster + sizeof j->type);
    for (int r = 0; r < rows; r++) {
        const char *owner = ms_pg_result_value(res, r, 1);
        cap += 160 + 6 * (owner ? strlen(owner) : 0);
    }
    char *out = malloc(cap);
    if (!out) {
        list_fail(j, MS_ENOMEM, ms_strerror(MS_ENOMEM));
        free(j);
        return;
    }
    size_t n = 0;
    n += (size_t)snprintf(out + n, cap - n, "{\"type\":\"");
    ms_json_put_escaped(out, cap, &n, j->type, strlen(j->type));
    n += (size_t)snprintf(out + n, cap - n, "\",\"cluster\":\"");
    ms_json_put_escaped(out, cap, &n, j->cluster, strlen(j->cluster));
    n += (size_t)snprintf(out + n, cap - n, "\",\"leases\":[");
    for (int r = 0; r < rows; r++) {
        const char *shard = ms_pg_result_value(res, r, 0);
        const char *owner = ms_pg_result_value(res, r, 1);
        const char *epoch = ms_pg_result_value(res, r, 2);
        const char *held = ms_pg_result_value(res, r, 3);
        const char *left = ms_pg_result_value(res, r, 4);
        if (!shard || !owner || !epoch || !held || !left || !is_int(shard)
            || !is_int(epoch) || !is_int(left)) {
            free(out);
            list_fail(j, MS_EDBQUERY, "a lease row holds a value that is "
                      "not what the schema says");
            free(j);
            return;
        }
        n += (size_t)snprintf(out + n, cap - n,
                              "%s{\"shard\":%s,\"holder\":\"",
                              r ? "," : "", shard);
        ms_json_put_escaped(out, cap, &n, owner, strlen(owner));
        n += (size_t)snprintf(out + n, cap - n,
                              "\",\"epoch\":%s,\"held\":%s,"
                              "\"expires_in_ms\":%s}", epoch,
                              strcmp(held, "t") == 0 ? "true" : "false",
                              left);
    }
    n += (size_t)snprintf(out + n, cap - n, "]}");
    j->cb(j->data, 0, out, n);
    free(out);
    free(j);
}

int ms_lease_sql_list(struct ms_pg *pg, const char *cluster,
                      const char *type_name, uint32_t limit,
                      void (*cb)(void *data, int err, const char *payload,
                                 size_t len),
                      void *data)
{
    if (!pg || !cb || !cluster || !cluster[0] ||
        strlen(cluster) > NAME_MAX_BYTES || !type_name || !type_name[0] ||
        strlen(type_name) > NAME_MAX_BYTES || limit == 0 ||
        limit > MS_LEASE_SQL_LIST_MAX)
        return MS_EINVAL;
    struct list_job *j = calloc(1, sizeof *j);
    if (!j)
        return MS_ENOMEM;
    j->cb = cb;
    j->data = data;
    memcpy(j->cluster, cluster, strlen(cluster) + 1);
    memcpy(j->type, type_name, strlen(type_name) + 1);
    char lim[16];
    snprintf(lim, sizeof lim, "%u", limit);
    const char *params[3] = {cluster, type_name, lim};
    int rc = ms_pg_query(pg, ms_lease_sql_list_rows, 3, params, list_done,
                         j);
    if (rc < 0)
        free(j);
    return rc;
}
