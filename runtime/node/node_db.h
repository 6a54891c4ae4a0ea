/*
 * node_db.h -- the node's PostgreSQL side (issue 11): when the config
 * has `database`, a pool (runtime/io/pg.h) on the node's loop and the
 * schema migration (runtime/io/pg_schema.h) run at start.
 *
 * Nothing here blocks the loop or delays the node: the migration is
 * queued and its outcome logged once (INFO "schema at version N (applied
 * M)"). A failure is logged as a WARN with the reason and the masked
 * connection string, and the migration is tried again after a capped
 * backoff (MS_NODE_DB_RETRY_MIN_MS doubling to MS_NODE_DB_RETRY_MAX_MS)
 * until it succeeds; a schema newer than this build is an ERROR and is
 * not tried again. The node never stops over its database.
 * Single-threaded: call everything on the loop's thread.
 */
#ifndef MS_NODE_DB_H
#define MS_NODE_DB_H

#include <stddef.h>
#include <uv.h>

#define MS_NODE_DB_RETRY_MIN_MS 1000  /* first retry of a failed migration */
#define MS_NODE_DB_RETRY_MAX_MS 30000 /* cap of the doubling retry delay */

struct ms_node_db;

/* Creates the pool of `connections` (database_connections; 0: the
 * pool's default) for `conninfo` (copied) on `loop` and queues the
 * migration. Never fails the node: a string libpq cannot parse, or no
 * memory, is logged as an ERROR and reported by ms_node_db_stats_json
 * (then there is no pool). NULL only when out of memory. */
struct ms_node_db *ms_node_db_start(uv_loop_t *loop, const char *conninfo,
                                    int connections);

/* Writes {"configured":true,"connected":bool,"schema_version":N|null,
 * "migrate_error":"..."|null} (no password), or {"configured":false}
 * when db is NULL, into buf (NUL-terminated when it fits). Returns the
 * length it needs, whatever fits, like snprintf. */
size_t ms_node_db_stats_json(const struct ms_node_db *db, char *buf,
                             size_t len);

/* The pool (borrowed until ms_node_db_close), or NULL: db is NULL or
 * the pool could not be made. The lease statements run on it. */
struct ms_pg;
struct ms_pg *ms_node_db_pool(const struct ms_node_db *db);

struct ms_journal;

/* The journal of persistent entities (runtime/io/journal.h) on db's pool,
 * made on the first call for cluster `cluster` and lease owner `owner`
 * (copied; later calls return the same one). Owned by db: freed by
 * ms_node_db_close. NULL without a pool or when out of memory. */
struct ms_journal *ms_node_db_journal(struct ms_node_db *db,
                                      const char *cluster, const char *owner);

/* Stops retrying, closes the pool (a migration still running is
 * cancelled: the server rolls it back) and frees db; `cb` runs on the
 * loop once everything is released (never inside this call). */
void ms_node_db_close(struct ms_node_db *db, void (*cb)(void *data),
                      void *data);

#endif
