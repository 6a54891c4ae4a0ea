/*
 * pg_schema.c -- the SQL schema of the runtime and its migrations; see
 * pg_schema.h. The tables are described in the README ("Schema").
 *
 * Every table is keyed by the cluster's name first, so clusters can
 * share one database. Payloads, snapshots, states and replies are JSON
 * kept as `text`, byte for byte as the runtime wrote them (jsonb would
 * reorder keys and rewrite numbers).
 *
 * A migration is a DO block that does its work only when its version
 * row is absent, and inserts that row: a rerun changes nothing. They run
 * in order in one transaction, so a database at version 1 gets version 2
 * alone (its tables and rows are kept), and an empty one gets both. The
 * statements use no IF NOT EXISTS (it would print a NOTICE through
 * libpq on every rerun); the advisory lock, taken first, orders
 * concurrent runs instead.
 */
#include "io/pg_schema.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/errors.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* 1: the lock; every later statement of the transaction runs under it
 * (released at COMMIT or ROLLBACK). */
static const char SQL_LOCK[] =
    "SELECT pg_advisory_xact_lock(" STR(MS_PG_SCHEMA_LOCK_KEY) ")";

/* 2: the version table. */
static const char SQL_VERSION_TABLE[] =
    "DO $ms$ BEGIN\n"
    "IF to_regclass('moonshard_schema') IS NULL THEN\n"
    "  CREATE TABLE moonshard_schema (\n"
    "    version integer PRIMARY KEY,\n"
    "    applied_at timestamptz NOT NULL DEFAULT now());\n"
    "END IF;\n"
    "END $ms$";

/* 3: version 1. */
static const char SQL_V1[] =
    "DO $ms$ BEGIN\n"
    "IF NOT EXISTS (SELECT 1 FROM moonshard_schema WHERE version = 1) THEN\n"
    /* one lease per shard of a persistent type; epoch grows when the
     * owner changes; expires_at is on the database's clock */
    "  CREATE TABLE moonshard_leases (\n"
    "    cluster text NOT NULL,\n"
    "    type text NOT NULL,\n"
    "    shard integer NOT NULL CHECK (shard >= 0),\n"
    "    owner text NOT NULL,\n"
    "    epoch bigint NOT NULL CHECK (epoch > 0),\n"
    "    expires_at timestamptz NOT NULL,\n"
    "    PRIMARY KEY (cluster, type, shard));\n"
    /* the journal of event-sourced entities: one unbroken sequence per
     * entity; the key refuses a second writer of the same sequence */
    "  CREATE TABLE moonshard_events (\n"
    "    cluster text NOT NULL,\n"
    "    type text NOT NULL,\n"
    "    id text NOT NULL,\n"
    "    sequence bigint NOT NULL CHECK (sequence > 0),\n"
    "    epoch bigint NOT NULL,\n"
    "    payload text NOT NULL,\n"
    "    created_at timestamptz NOT NULL DEFAULT now(),\n"
    "    PRIMARY KEY (cluster, type, id, sequence));\n"
    /* the latest snapshot of an entity: its state after `sequence` */
    "  CREATE TABLE moonshard_snapshots (\n"
    "    cluster text NOT NULL,\n"
    "    type text NOT NULL,\n"
    "    id text NOT NULL,\n"
    "    sequence bigint NOT NULL CHECK (sequence >= 0),\n"
    "    epoch bigint NOT NULL,\n"
    "    state text NOT NULL,\n"
    "    created_at timestamptz NOT NULL DEFAULT now(),\n"
    "    PRIMARY KEY (cluster, type, id));\n"
    /* the state of a durable-state entity, `revision` counting saves */
    "  CREATE TABLE moonshard_states (\n"
    "    cluster text NOT NULL,\n"
    "    type text NOT NULL,\n"
    "    id text NOT NULL,\n"
    "    revision bigint NOT NULL CHECK (revision > 0),\n"
    "    epoch bigint NOT NULL,\n"
    "    state text NOT NULL,\n"
    "    updated_at timestamptz NOT NULL DEFAULT now(),\n"
    "    PRIMARY KEY (cluster, type, id));\n"
    /* commands committed under an operation id, and their replies */
    "  CREATE TABLE moonshard_operations (\n"
    "    cluster text NOT NULL,\n"
    "    type text NOT NULL,\n"
    "    id text NOT NULL,\n"
    "    op_id text NOT NULL,\n"
    "    reply text,\n"
    "    created_at timestamptz NOT NULL DEFAULT now(),\n"
    "    PRIMARY KEY (cluster, type, id, op_id));\n"
    /* retention deletes the oldest first */
    "  CREATE INDEX moonshard_operations_created\n"
    "    ON moonshard_operations (cluster, created_at);\n"
    "  INSERT INTO moonshard_schema (version) VALUES (1);\n"
    "END IF;\n"
    "END $ms$";

/* 4: version 2 (issue 12): the ids of remember-entities. A row is an
 * entity of (type, shard) that was running and is started again when its
 * shard starts on a node; the key serves the load (every id of one
 * shard, a range of the key) and the writes (one shard each). */
static const char SQL_V2[] =
    "DO $ms$ BEGIN\n"
    "IF NOT EXISTS (SELECT 1 FROM moonshard_schema WHERE version = 2) THEN\n"
    "  CREATE TABLE moonshard_remembered (\n"
    "    cluster text NOT NULL,\n"
    "    type text NOT NULL,\n"
    "    shard integer NOT NULL CHECK (shard >= 0),\n"
    "    id text NOT NULL,\n"
    "    since timestamptz NOT NULL DEFAULT now(),\n"
    "    PRIMARY KEY (cluster, type, shard, id));\n"
    "  INSERT INTO moonshard_schema (version) VALUES (2);\n"
    "END IF;\n"
    "END $ms$";

/* last: where the schema is, and how many rows this transaction wrote
 * (their xmin is its transaction id) */
static const char SQL_STATUS[] =
    "SELECT coalesce(max(version), 0),\n"
    "  count(*) FILTER (WHERE xmin::text::bigint =\n"
    "                   txid_current() % 4294967296)\n"
    "FROM moonshard_schema";

static const char *const migration[] = {
    SQL_LOCK, SQL_VERSION_TABLE, SQL_V1, SQL_V2, SQL_STATUS,
};
#define NSTEPS ((int)(sizeof migration / sizeof migration[0]))

const char *const ms_pg_schema_tables[] = {
    "moonshard_schema", "moonshard_leases", "moonshard_events",
    "moonshard_snapshots", "moonshard_states", "moonshard_operations",
    "moonshard_remembered", NULL,
};

struct migrate {
    ms_pg_migrate_cb cb;
    void *data;
};

static void migrated(const struct ms_pg_result *res, void *data)
{
    struct migrate m = *(struct migrate *)data;
    free(data);
    int err = ms_pg_result_error(res);
    if (err) {
        m.cb(err, 0, 0, ms_pg_result_message(res), m.data);
        return;
    }
    const char *v = ms_pg_result_value(res, 0, 0);
    const char *n = ms_pg_result_value(res, 0, 1);
    int version = v ? atoi(v) : 0, applied = n ? atoi(n) : 0;
    if (version > MS_PG_SCHEMA_VERSION) {
        char msg[160];
        snprintf(msg, sizeof msg, "the database's schema is at version %d,"
                 " newer than this moonshard's (%d)", version,
                 MS_PG_SCHEMA_VERSION);
        m.cb(MS_PG_ESCHEMA, version, 0, msg, m.data);
        return;
    }
    m.cb(0, version, applied, "", m.data);
}

int ms_pg_migrate(struct ms_pg *pg, ms_pg_migrate_cb cb, void *data)
{
    if (!pg || !cb)
        return MS_EINVAL;
    struct migrate *m = malloc(sizeof *m);
    if (!m)
        return MS_ENOMEM;
    m->cb = cb;
    m->data = data;
    int nparams[NSTEPS] = { 0 };
    int rc = ms_pg_transaction(pg, NSTEPS, migration, nparams, NULL,
                               migrated, m);
    if (rc < 0)
        free(m);
    return rc;
}
