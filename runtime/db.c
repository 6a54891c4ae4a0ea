/*
 * db.c -- `moonshard db migrate CONFIG`: creates or upgrades the
 * runtime's schema (runtime/io/pg_schema.h) in the config's `database`.
 *
 * A command run by hand, so it may block: it first opens one connection
 * with libpq's blocking PQconnectdbParams to report a server that cannot
 * be reached, a refused password or a missing database at once with
 * libpq's own words (they never contain the password), then runs the
 * migration through the node's pool (runtime/io/pg.h) on a loop, as a
 * node would.
 */
#include "db.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>
#include <uv.h>

#include "core/config.h"
#include "core/errors.h"
#include "core/log.h"
#include "io/pg.h"
#include "io/pg_schema.h"
#include "lua/bridge.h"
#include "moonshard.h"

#define DB_CONNECT_TIMEOUT "10" /* seconds of the first connection */

struct run {
    int done, err, version, applied;
    char message[MS_PG_MESSAGE_MAX];
};

static void migrated(int err, int version, int applied, const char *message,
                     void *data)
{
    struct run *r = data;
    r->done = 1;
    r->err = err;
    r->version = version;
    r->applied = applied;
    snprintf(r->message, sizeof r->message, "%s", message ? message : "");
}

static void closed(void *data)
{
    (void)data;
}

/* 0 when the database answers; else prints why and returns 1 */
static int probe(const char *conninfo, const char *masked)
{
    const char *keys[] = { "connect_timeout", "dbname", NULL };
    const char *vals[] = { DB_CONNECT_TIMEOUT, conninfo, NULL };
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (c && PQstatus(c) == CONNECTION_OK) {
        PQfinish(c);
        return 0;
    }
    char why[MS_PG_MESSAGE_MAX];
    snprintf(why, sizeof why, "%s", c ? PQerrorMessage(c) : "out of memory");
    ms_pg_one_line(why);
    fprintf(stderr, "moonshard db migrate: cannot connect to %s: %s\n",
            masked, why);
    PQfinish(c);
    return 1;
}

static int migrate(const char *config)
{
    struct ms_bridge *b;
    struct ms_config cfg;
    char err[1024], home[PATH_MAX], masked[1024];
    int rc = 1;
    uv_loop_t *loop = uv_default_loop();
    ms_home(home, sizeof home);
    if (ms_bridge_new(&b, loop, home) < 0) {
        fprintf(stderr, "moonshard db migrate: cannot start Lua\n");
        return 1;
    }
    memset(&cfg, 0, sizeof cfg);
    ms_log_setup("-", MS_LOG_WARN); /* not the pool's progress lines */
    if (ms_bridge_load_config(b, config, NULL, &cfg, err, sizeof err) < 0) {
        fprintf(stderr, "moonshard db migrate: %s\n", err);
        ms_bridge_free(b);
        return 1;
    }
    ms_bridge_free(b);
    if (!cfg.database[0]) {
        fprintf(stderr, "moonshard db migrate: %s has no `database` (a "
                "libpq connection string or postgresql:// URI)\n", config);
        goto out;
    }
    ms_pg_mask_conninfo(cfg.database, masked, sizeof masked);
    /* the pool refuses what libpq cannot parse (as a node will); it
     * connects only once the loop runs */
    struct ms_pg_config pc = { .conninfo = cfg.database, .connections = 1,
                               .statement_timeout_ms = 30000 };
    struct ms_pg *pg;
    int q = ms_pg_new(loop, &pc, &pg, err, sizeof err);
    if (q == MS_EINVAL) {
        /* not libpq's words: they may quote a piece of the string, and
         * so of a password holding a space */
        fprintf(stderr, "moonshard db migrate: %s: database: libpq cannot "
                "parse it as key=value pairs or a postgresql:// URI\n",
                config);
        goto out;
    } else if (q < 0) {
        fprintf(stderr, "moonshard db migrate: %s\n", ms_pg_strerror(q));
        goto out;
    }
    struct run r = { 0 };
    if (probe(cfg.database, masked))
        ; /* said why */
    else if ((q = ms_pg_migrate(pg, migrated, &r)) < 0) {
        fprintf(stderr, "moonshard db migrate: %s\n", ms_pg_strerror(q));
    } else {
        while (!r.done && uv_run(loop, UV_RUN_ONCE))
            ;
        if (!r.done) {
            fprintf(stderr, "moonshard db migrate: the loop stopped\n");
        } else if (r.err) {
            ms_pg_one_line(r.message);
            fprintf(stderr, "moonshard db migrate: %s: %s%s%s\n", masked,
                    ms_pg_errname(r.err),
                    r.message[0] ? ": " : "",
                    r.message[0] ? r.message : ms_pg_strerror(r.err));
        } else {
            printf("schema at version %d (applied %d)\n", r.version,
                   r.applied);
            rc = 0;
        }
    }
    ms_pg_close(pg, closed, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
out:
    ms_config_free(&cfg);
    return rc;
}

int ms_db_main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[0], "migrate") == 0)
        return migrate(argv[1]);
    if (argc >= 1 && strcmp(argv[0], "events") == 0)
        return ms_db_events(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "leases") == 0)
        return ms_db_leases(argc - 1, argv + 1);
    fprintf(stderr, "usage: moonshard db migrate CONFIG.lua\n"
            "       moonshard db events CONFIG.lua TYPE ID [--limit N]\n"
            "       moonshard db leases CONFIG.lua [TYPE]\n");
    return 1;
}
