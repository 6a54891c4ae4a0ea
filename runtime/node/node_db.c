/*
 * node_db.c -- the node's pool and its schema migration at start; see
 * node_db.h.
 */
#include "node_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"
#include "../core/jsoncheck.h"
#include "../core/log.h"
#include "../io/journal.h"
#include "../io/pg.h"
#include "../io/pg_schema.h"

struct ms_node_db {
    struct ms_pg *pg;         /* NULL: the pool could not be made */
    uv_loop_t *pg_loop;
    int connections;          /* the pool's size */
    struct ms_journal *journal; /* persistent entities' SQL, or NULL */
    uv_timer_t retry;         /* the next migration attempt */
    int version;              /* the schema's version; 0: not known */
    int closing;
    int open;                 /* releases ms_node_db_close waits for */
    uint64_t backoff_ms;      /* the delay of the next retry */
    char error[MS_PG_MESSAGE_MAX + 64]; /* the last failure; "": none */
    char masked[512];         /* the connection string, password masked */
    void (*closed_cb)(void *);
    void *closed_data;
};

static void migrate(struct ms_node_db *db);

static void log_db(int level, struct ms_node_db *db, const char *msg)
{
    char f[640];
    ms_log_field_s(f, sizeof f, 0, "pg", db->masked);
    ms_log(level, f, "%s", msg);
}


static void on_retry(uv_timer_t *t)
{
    struct ms_node_db *db = t->data;
    if (!db->closing)
        migrate(db);
}

/* A failed attempt: says why and tries again later. */
static void failed(struct ms_node_db *db, int err, const char *message)
{
    snprintf(db->error, sizeof db->error, "%s: %s", ms_pg_errname(err),
             message && message[0] ? message : ms_pg_strerror(err));
    ms_pg_one_line(db->error);
    char msg[sizeof db->error + 64];
    snprintf(msg, sizeof msg, "schema migration failed (%s); retrying in "
             "%llu ms", db->error, (unsigned long long)db->backoff_ms);
    log_db(MS_LOG_WARN, db, msg);
    uv_timer_start(&db->retry, on_retry, db->backoff_ms, 0);
    db->backoff_ms *= 2;
    if (db->backoff_ms > MS_NODE_DB_RETRY_MAX_MS)
        db->backoff_ms = MS_NODE_DB_RETRY_MAX_MS;
}

static void migrated(int err, int version, int applied, const char *message,
                     void *data)
{
    struct ms_node_db *db = data;
    if (db->closing) /* cancelled by ms_node_db_close */
        return;
    if (err == MS_PG_ESCHEMA) {
        db->version = version;
        snprintf(db->error, sizeof db->error, "%s: %s", ms_pg_errname(err),
                 message);
        char msg[sizeof db->error + 32];
        snprintf(msg, sizeof msg, "%s; not retried", message);
        log_db(MS_LOG_ERROR, db, msg);
        return;
    }
    if (err) {
        failed(db, err, message);
        return;
    }
    db->version = version;
    db->error[0] = 0;
    ms_log(MS_LOG_INFO, NULL, "schema at version %d (applied %d)", version,
           applied);
}

static void migrate(struct ms_node_db *db)
{
    int rc = ms_pg_migrate(db->pg, migrated, db);
    if (rc < 0)
        failed(db, rc, NULL);
}

struct ms_node_db *ms_node_db_start(uv_loop_t *loop, const char *conninfo,
                                    int connections)
{
    struct ms_node_db *db = calloc(1, sizeof *db);
    if (!db) {
        ms_log(MS_LOG_ERROR, NULL, "database: out of memory");
        return NULL;
    }
    uv_timer_init(loop, &db->retry);
    db->pg_loop = loop;
    db->retry.data = db;
    db->backoff_ms = MS_NODE_DB_RETRY_MIN_MS;
    ms_pg_mask_conninfo(conninfo, db->masked, sizeof db->masked);
    struct ms_pg_config pc = { .conninfo = conninfo,
                               .connections = connections };
    db->connections = connections > 0 ? connections : 2;
    char err[256];
    int rc = ms_pg_new(loop, &pc, &db->pg, err, sizeof err);
    if (rc < 0) {
        /* not libpq's words: they may quote a piece of a password */
        db->pg = NULL;
        snprintf(db->error, sizeof db->error, "%s",
                 rc == MS_EINVAL ? "libpq cannot parse the connection "
                 "string" : ms_strerror(rc));
        char msg[sizeof db->error + 32];
        snprintf(msg, sizeof msg, "database: %s; not used", db->error);
        log_db(MS_LOG_ERROR, db, msg);
        return db;
    }
    migrate(db);
    return db;
}

struct ms_pg *ms_node_db_pool(const struct ms_node_db *db)
{
    return db ? db->pg : NULL;
}

size_t ms_node_db_stats_json(const struct ms_node_db *db, char *buf,
                             size_t len)
{
    if (!db)
        return (size_t)snprintf(buf, len, "{\"configured\":false}");
    char version[16] = "null";
    if (db->version)
        snprintf(version, sizeof version, "%d", db->version);
    char esc[6 * sizeof db->error + 3] = "null";
    if (db->error[0]) {
        size_t o = 0;
        esc[o++] = '"';
        ms_json_put_escaped(esc, sizeof esc - 2, &o, db->error,
                            strlen(db->error));
        esc[o++] = '"';
        esc[o] = 0;
    }
    int w = snprintf(buf, len, "{\"configured\":true,\"connected\":%s,"
                     "\"schema_version\":%s,\"migrate_error\":%s}",
                     db->pg && ms_pg_connected(db->pg) > 0 ? "true"
                                                           : "false",
                     version, esc);
    return w < 0 ? 0 : (size_t)w;
}

static void release(struct ms_node_db *db)
{
    if (--db->open > 0)
        return;
    void (*cb)(void *) = db->closed_cb;
    void *data = db->closed_data;
    free(db);
    if (cb)
        cb(data);
}

static void on_timer_closed(uv_handle_t *h)
{
    release(h->data);
}

static void on_pool_closed(void *data)
{
    release(data);
}

void ms_node_db_close(struct ms_node_db *db, void (*cb)(void *data),
                      void *data)
{
    db->closing = 1;
    db->closed_cb = cb;
    db->closed_data = data;
    db->open = 1;
    if (db->pg) {
        db->open++;
        /* fails the migration with MS_ECANCELED (migrated ignores it) */
        if (ms_pg_close(db->pg, on_pool_closed, db) < 0)
            db->open--; /* not from a pool's callback: cannot happen */
        db->pg = NULL;
    }
    /* after the pool: its close ran the journal's callbacks */
    if (db->journal) {
        db->open++;
        ms_journal_close(db->journal, on_pool_closed, db);
        db->journal = NULL;
    }
    uv_close((uv_handle_t *)&db->retry, on_timer_closed);
}

struct ms_journal *ms_node_db_journal(struct ms_node_db *db,
                                      const char *cluster, const char *owner)
{
    if (!db || !db->pg || db->closing)
        return NULL;
    if (!db->journal)
        db->journal = ms_journal_new(db->pg_loop, db->pg, cluster, owner,
                                     db->connections);
    return db->journal;
}
