/*
 * pg_schema.h -- the runtime's SQL schema in PostgreSQL and its
 * migrations (issue 11). Every statement lives in pg_schema.c.
 *
 * The schema has a version: the table moonshard_schema holds one row
 * (version, applied_at) per migration applied. ms_pg_migrate applies the
 * missing ones in ONE transaction that first takes the transaction-level
 * advisory lock MS_PG_SCHEMA_LOCK_KEY: two nodes (or two `moonshard db
 * migrate`) starting at once run one after the other, and the second
 * finds every version there and applies nothing. A failure rolls the
 * whole migration back.
 */
#ifndef MS_IO_PG_SCHEMA_H
#define MS_IO_PG_SCHEMA_H

#include "io/pg.h"

/* The schema version this build creates and expects: 1 (issue 11:
 * leases, events, snapshots, states, operations), 2 (issue 12: the
 * remembered ids of remember-entities, moonshard_remembered). */
#define MS_PG_SCHEMA_VERSION 2

/* The key of pg_advisory_xact_lock taken by every migration: a fixed
 * number ("moonshrd" in ASCII) that other software on the same database
 * is unlikely to use. */
#define MS_PG_SCHEMA_LOCK_KEY 7885643992722338404 /* 0x6d6f6f6e73687264 */

/* The database's schema is newer than this build knows (nothing was
 * changed: an older binary must not run against it). */
#define MS_PG_ESCHEMA MS_EDBSCHEMA /* a row of runtime/core/errors.h */

/* The outcome of a migration, called once on the loop. err is 0, or a
 * code of pg.h (MS_PG_EQUERY: `message` is the server's text; the
 * transaction was rolled back), or MS_PG_ESCHEMA. version is the schema
 * version the database is at afterwards (on MS_PG_ESCHEMA: the newer
 * version found; else 0 on error); applied counts the migrations this
 * call applied (0 when the schema was already current). `message` is
 * borrowed for the call. */
typedef void (*ms_pg_migrate_cb)(int err, int version, int applied,
                                 const char *message, void *data);

/* Queues the migration on `pg` as one transaction. 0: `cb` will be
 * called once (never inside this call); else the codes of
 * ms_pg_transaction and no callback. */
int ms_pg_migrate(struct ms_pg *pg, ms_pg_migrate_cb cb, void *data);

/* The tables the schema version MS_PG_SCHEMA_VERSION has, NULL-ended
 * (for checks and tests). */
extern const char *const ms_pg_schema_tables[];

#endif
