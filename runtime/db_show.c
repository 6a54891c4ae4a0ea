/*
 * db_show.c -- `moonshard db events CONFIG TYPE ID [--limit N]` (an
 * entity's journal) and `moonshard db leases CONFIG [TYPE]` (the leases
 * the database holds for the config's cluster; `moonshard leases` is the
 * same command). Commands run by hand: they use libpq's blocking API on
 * one connection (connect_timeout DB_SHOW_CONNECT_TIMEOUT, every
 * statement bounded by DB_SHOW_STATEMENT_TIMEOUT), read only, and print
 * on stdout. Errors are one line on stderr, exit status 1; usage errors
 * exit 2. The password of the connection string is never printed: the
 * target is shown masked (ms_pg_mask_conninfo) and libpq's messages
 * never quote it.
 *
 * What the database holds is printed as it is, except control bytes
 * (below 0x20 and 0x7f), which are written as \xHH so that a row cannot
 * move the terminal's cursor or break the one-line-per-row layout.
 */
#include "db.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <uv.h>

#include "core/config.h"
#include "core/log.h"
#include "io/pg.h"
#include "lua/bridge.h"
#include "moonshard.h"

#define DB_SHOW_CONNECT_TIMEOUT "10"          /* seconds */
#define DB_SHOW_STATEMENT_TIMEOUT "30s"
#define DB_EVENTS_LIMIT_DEFAULT 100
#define DB_EVENTS_LIMIT_MAX 100000

struct target {
    char cluster[64];
    char database[1024];
    char masked[1024];
    PGconn *conn;
};

/* writes s to f with control bytes as \xHH */
static void put_safe(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
}

/*
 * Loads `config` (its cluster and database) and connects. Returns 0 with
 * t->conn open (the caller PQfinish-es it), or 1 after one line on stderr
 * prefixed with `cmd`.
 */
static int open_target(const char *cmd, const char *config,
                       struct target *t)
{
    struct ms_bridge *b;
    struct ms_config cfg;
    char err[1024], home[PATH_MAX];
    memset(t, 0, sizeof *t);
    ms_home(home, sizeof home);
    ms_log_setup("-", MS_LOG_WARN);
    if (ms_bridge_new(&b, uv_default_loop(), home) < 0) {
        fprintf(stderr, "moonshard %s: cannot start Lua\n", cmd);
        return 1;
    }
    memset(&cfg, 0, sizeof cfg);
    int rc = ms_bridge_load_config(b, config, NULL, &cfg, err, sizeof err);
    ms_bridge_free(b);
    if (rc < 0) {
        fprintf(stderr, "moonshard %s: %s\n", cmd, err);
        return 1;
    }
    snprintf(t->cluster, sizeof t->cluster, "%s", cfg.cluster);
    snprintf(t->database, sizeof t->database, "%s", cfg.database);
    ms_config_free(&cfg);
    if (!t->database[0]) {
        fprintf(stderr, "moonshard %s: %s has no `database` (a libpq "
                "connection string or postgresql:// URI)\n", cmd, config);
        return 1;
    }
    /* not libpq's words for a string it cannot parse: they may quote a
     * piece of it, and so of a password holding a space */
    PQconninfoOption *opts = PQconninfoParse(t->database, NULL);
    if (!opts) {
        fprintf(stderr, "moonshard %s: %s: database: libpq cannot parse it "
                "as key=value pairs or a postgresql:// URI\n", cmd, config);
        return 1;
    }
    PQconninfoFree(opts);
    ms_pg_mask_conninfo(t->database, t->masked, sizeof t->masked);
    const char *keys[] = { "connect_timeout", "dbname", NULL };
    const char *vals[] = { DB_SHOW_CONNECT_TIMEOUT, t->database, NULL };
    t->conn = PQconnectdbParams(keys, vals, 1);
    if (!t->conn || PQstatus(t->conn) != CONNECTION_OK) {
        char why[MS_PG_MESSAGE_MAX];
        snprintf(why, sizeof why, "%s",
                 t->conn ? PQerrorMessage(t->conn) : "out of memory");
        ms_pg_one_line(why);
        fprintf(stderr, "moonshard %s: cannot connect to %s: %s\n", cmd,
                t->masked, why);
        PQfinish(t->conn);
        t->conn = NULL;
        return 1;
    }
    return 0;
}

/* runs sql with text params; returns the result (PQclear it) or NULL
 * after one line on stderr */
static PGresult *query(const char *cmd, struct target *t, const char *sql,
                       int n, const char *const *params)
{
    PGresult *r = PQexecParams(t->conn, sql, n, NULL, params, NULL, NULL, 0);
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
        return r;
    char why[MS_PG_MESSAGE_MAX];
    snprintf(why, sizeof why, "%s",
             r ? PQresultErrorMessage(r) : PQerrorMessage(t->conn));
    ms_pg_one_line(why);
    fprintf(stderr, "moonshard %s: %s: %s\n", cmd, t->masked, why);
    PQclear(r);
    return NULL;
}

/* 0 when the schema is there (read only, bounded); else 1, said why */
static int prepare(const char *cmd, struct target *t, const char *table)
{
    PGresult *r = query(cmd, t, "SELECT to_regclass($1) IS NOT NULL, "
                        "set_config('statement_timeout', '"
                        DB_SHOW_STATEMENT_TIMEOUT "', false), "
                        "set_config('default_transaction_read_only', 'on',"
                        " false)", 1, &table);
    if (!r)
        return 1;
    int ok = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (!ok)
        fprintf(stderr, "moonshard %s: %s has no moonshard schema (no "
                "table %s): run `moonshard db migrate CONFIG`, or start a "
                "node\n", cmd, t->masked, table);
    return ok ? 0 : 1;
}

/* spaces after s to fill a column of `width` bytes */
static int pad(const char *s, int width)
{
    size_t n = strlen(s);
    return n < (size_t)width ? width - (int)n : 0;
}

#define TIME_SQL(col) \
    "to_char(" col " AT TIME ZONE 'UTC', " \
    "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

static int events_usage(void)
{
    fprintf(stderr, "usage: moonshard db events [CONFIG.lua] TYPE ID "
            "[--limit N] [--]   (N: 1..%d, default %d: the latest N "
            "events; without CONFIG.lua, $MOONSHARD_CONFIG)\n",
            DB_EVENTS_LIMIT_MAX, DB_EVENTS_LIMIT_DEFAULT);
    return 2;
}

/* The config a command given none uses: $MOONSHARD_CONFIG, or NULL after
 * a line on stderr (the caller adds its usage). */
static const char *env_config(const char *cmd)
{
    const char *c = getenv("MOONSHARD_CONFIG");
    if (c && c[0])
        return c;
    fprintf(stderr, "moonshard %s: no CONFIG.lua given (it names the "
            "cluster and its database) and MOONSHARD_CONFIG is not set\n",
            cmd);
    return NULL;
}

/* 1 when `a` names a config script: it ends in ".lua" */
static int is_config(const char *a)
{
    size_t n = strlen(a);
    return n > 4 && strcmp(a + n - 4, ".lua") == 0;
}

int ms_db_events(int argc, char **argv)
{
    const char *pos[3];
    int npos = 0;
    long limit = DB_EVENTS_LIMIT_DEFAULT;
    int opts_done = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (opts_done || a[0] != '-' || a[1] != '-') {
            if (npos == 3)
                return events_usage();
            pos[npos++] = a;
        } else if (a[2] == '\0') {
            opts_done = 1; /* `--`: an ID may start with -- after it */
        } else if (strcmp(a, "--limit") == 0 || strncmp(a, "--limit=", 8) == 0) {
            const char *v = a[7] == '=' ? a + 8 : (i + 1 < argc ? argv[++i]
                                                              : NULL);
            char *end;
            errno = 0;
            limit = v ? strtol(v, &end, 10) : 0;
            if (!v || errno || end == v || *end || limit < 1 ||
                limit > DB_EVENTS_LIMIT_MAX) {
                fprintf(stderr, "moonshard db events: --limit must be an "
                        "integer in 1..%d\n", DB_EVENTS_LIMIT_MAX);
                return events_usage();
            }
        } else {
            fprintf(stderr, "moonshard db events: bad option %s\n", a);
            return events_usage();
        }
    }
    if (npos != 2 && npos != 3)
        return events_usage();
    const char *cmd = "db events";
    const char *config = npos == 3 ? pos[0] : env_config(cmd);
    if (!config)
        return events_usage();
    const char *type = pos[npos - 2], *id = pos[npos - 1];
    struct target t;
    if (open_target(cmd, config, &t))
        return 1;
    int rc = 1;
    char lim[24];
    snprintf(lim, sizeof lim, "%ld", limit);
    const char *p[4] = { t.cluster, type, id, lim };
    PGresult *snap = NULL, *count = NULL, *ev = NULL;
    if (prepare(cmd, &t, "moonshard_events"))
        goto out;
    snap = query(cmd, &t, "SELECT sequence, epoch, " TIME_SQL("created_at")
                 ", state FROM moonshard_snapshots WHERE cluster = $1 AND "
                 "type = $2 AND id = $3", 3, p);
    if (!snap)
        goto out;
    count = query(cmd, &t, "SELECT count(*), min(sequence), max(sequence) "
                  "FROM moonshard_events WHERE cluster = $1 AND type = $2 "
                  "AND id = $3", 3, p);
    if (!count)
        goto out;
    /* the latest N, printed oldest first */
    ev = query(cmd, &t, "SELECT sequence, epoch, time, payload FROM ("
               "SELECT sequence, epoch, " TIME_SQL("created_at") " AS time,"
               " payload FROM moonshard_events WHERE cluster = $1 AND "
               "type = $2 AND id = $3 ORDER BY sequence DESC LIMIT $4) e "
               "ORDER BY sequence", 4, p);
    if (!ev)
        goto out;
    long total = atol(PQgetvalue(count, 0, 0));
    printf("entity ");
    put_safe(stdout, type);
    printf(" ");
    put_safe(stdout, id);
    printf(" in cluster %s: ", t.cluster);
    if (total == 0)
        printf("no events");
    else
        printf("%ld event(s), sequences %s..%s", total,
               PQgetvalue(count, 0, 1), PQgetvalue(count, 0, 2));
    if (PQntuples(snap) == 0)
        printf(", no snapshot\n");
    else
        printf("\n");
    if (PQntuples(snap) > 0) {
        printf("snapshot  sequence %s  epoch %s  %s  ", PQgetvalue(snap, 0, 0),
               PQgetvalue(snap, 0, 1), PQgetvalue(snap, 0, 2));
        put_safe(stdout, PQgetvalue(snap, 0, 3));
        printf("\n");
    }
    if (total > PQntuples(ev))
        printf("(%ld earlier event(s) not shown: --limit %ld)\n",
               total - PQntuples(ev), limit);
    if (PQntuples(ev) > 0)
        printf("%-10s %-7s %-24s %s\n", "sequence", "epoch", "time",
               "payload");
    for (int i = 0; i < PQntuples(ev); i++) {
        printf("%-10s %-7s %-24s ", PQgetvalue(ev, i, 0),
               PQgetvalue(ev, i, 1), PQgetvalue(ev, i, 2));
        put_safe(stdout, PQgetvalue(ev, i, 3));
        printf("\n");
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    PQclear(snap);
    PQclear(count);
    PQclear(ev);
    PQfinish(t.conn);
    return rc;
}

static int leases_usage(void)
{
    fprintf(stderr, "usage: moonshard db leases [CONFIG.lua] [TYPE]   "
            "(also: moonshard leases [CONFIG.lua] [TYPE]; without "
            "CONFIG.lua, $MOONSHARD_CONFIG)\n");
    return 2;
}

int ms_db_leases(int argc, char **argv)
{
    if (argc > 2 || (argc >= 1 && argv[0][0] == '-') ||
        (argc == 2 && argv[1][0] == '-'))
        return leases_usage();
    const char *cmd = "leases";
    /* CONFIG.lua first when given (it ends in .lua), then TYPE */
    int has_config = argc >= 1 && is_config(argv[0]);
    if (argc == 2 && !has_config) {
        fprintf(stderr, "moonshard leases: %s is not a CONFIG.lua\n",
                argv[0]);
        return leases_usage();
    }
    const char *config = has_config ? argv[0] : env_config(cmd);
    if (!config)
        return leases_usage();
    const char *type = argc > has_config ? argv[has_config] : NULL;
    struct target t;
    if (open_target(cmd, config, &t))
        return 1;
    int rc = 1;
    const char *p[2] = { t.cluster, type };
    PGresult *r = NULL;
    if (prepare(cmd, &t, "moonshard_leases"))
        goto out;
    /* the database's clock decides what has expired, as for the nodes */
    r = query(cmd, &t, "SELECT type, shard, owner, epoch, "
              TIME_SQL("expires_at") ", expires_at > now(), "
              "round(abs(extract(epoch FROM expires_at - now()))::numeric,"
              " 1) FROM moonshard_leases WHERE cluster = $1 AND "
              "($2::text IS NULL OR type = $2) ORDER BY type, shard", 2, p);
    if (!r)
        goto out;
    int n = PQntuples(r);
    if (n == 0) {
        printf("no leases in cluster %s%s", t.cluster,
               type ? " for type " : "");
        if (type)
            put_safe(stdout, type);
        printf("\n");
    } else {
        printf("%-16s %-6s %-16s %-7s %-24s %s\n", "type", "shard", "owner",
               "epoch", "expires_at", "state");
    }
    int held = 0;
    for (int i = 0; i < n; i++) {
        const char *type = PQgetvalue(r, i, 0), *owner = PQgetvalue(r, i, 2);
        int live = strcmp(PQgetvalue(r, i, 5), "t") == 0;
        held += live;
        put_safe(stdout, type);
        printf("%*s %-6s ", pad(type, 16), "", PQgetvalue(r, i, 1));
        put_safe(stdout, owner);
        printf("%*s %-7s %-24s %s %s s%s\n", pad(owner, 16), "",
               PQgetvalue(r, i, 3), PQgetvalue(r, i, 4),
               live ? "held, expires in" : "expired", PQgetvalue(r, i, 6),
               live ? "" : " ago");
    }
    if (n > 0)
        printf("%d lease(s) in cluster %s: %d held, %d expired\n", n,
               t.cluster, held, n - held);
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    PQclear(r);
    PQfinish(t.conn);
    return rc;
}
