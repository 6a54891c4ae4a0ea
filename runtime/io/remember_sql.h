/*
 * remember_sql.h -- the PostgreSQL store of remember-entities (issue 12
 * point 4 "postgres"): the ids of (type, shard) that were running, kept
 * in moonshard_remembered (schema version 2, runtime/io/pg_schema.c) and
 * read and written on a node's pool (runtime/io/pg.h). Nothing here
 * blocks: every call queues a job and its callback runs on the loop
 * later (never inside the call).
 *
 * Fencing: a write is ONE statement whose first CTE locks the shard's
 * lease row like the journal's writes (runtime/io/journal.h):
 *   moonshard_leases WHERE cluster, type, shard, owner = this node,
 *     epoch = the writer's, expires_at > now() FOR SHARE
 * so an acquire that bumps the epoch waits for writers in flight; no
 * such row fails the write with MS_ESTALE ("stale_owner") and nothing
 * is written. A load is a plain read (not fenced).
 *
 * Group commit: writes queued while the previous group runs go to the
 * server as ONE group transaction (ms_pg_group: one round trip, at most
 * MS_REMEMBER_SQL_GROUP writes and MS_REMEMBER_SQL_GROUP_BYTES of
 * parameters); one write that fails (stale) is undone alone and the
 * others commit. At most one group is in the pool at once, so writes
 * are applied in the order they were queued (across shards too) and the
 * pool's other connections stay free for loads and the journal. Each
 * callback runs after the COMMIT of its transaction.
 *
 * Other failures are the pool's codes (MS_PG_ECONN, MS_PG_EQUERY,
 * MS_ETIMEDOUT, MS_PG_EFULL...): the write may or may not have committed
 * (a lost connection); writing the same records again is harmless (a
 * START of a remembered id and a STOP of a forgotten one change
 * nothing).
 *
 * Single-threaded: call everything on the loop's thread.
 */
#ifndef MS_IO_REMEMBER_SQL_H
#define MS_IO_REMEMBER_SQL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "../core/remember.h"
#include "pg.h"

/* Limits (each refused with MS_E2BIG / MS_EINVAL by the calls below;
 * ids up to MS_REMEMBER_ID_MAX bytes and batches up to
 * MS_REMEMBER_BATCH_MAX records come from core/remember.h). */
#ifndef MS_REMEMBER_SQL_LOAD_MAX
#define MS_REMEMBER_SQL_LOAD_MAX 1000000 /* ids one load returns; a shard
                                            with more: MS_E2BIG */
#endif
#define MS_REMEMBER_SQL_GROUP 256        /* writes in one group */
#define MS_REMEMBER_SQL_GROUP_BYTES (4u << 20) /* their parameters'
                                            bytes (one write may be
                                            larger: it goes alone) */
#define MS_REMEMBER_SQL_MESSAGE_MAX 256  /* bytes of an error message */
#define MS_REMEMBER_SQL_REPLACE_MAX 1000000 /* records of a replace (the
                                            whole set of a shard) */
#ifndef MS_REMEMBER_SQL_CHUNK_BYTES
#define MS_REMEMBER_SQL_CHUNK_BYTES (512u << 10) /* a replace with more
                                            bytes of ids is cut into
                                            statements of about this
                                            size, MS_PG_MAX_STATEMENTS
                                            at most (about 32 MiB) */
#endif

struct ms_remember_sql;

/* Creates a store on pool `pg` (borrowed: it must outlive the store)
 * for cluster `cluster` and lease owner `owner` (the node's name; both
 * copied). NULL when out of memory. */
struct ms_remember_sql *ms_remember_sql_new(uv_loop_t *loop, struct ms_pg *pg,
                                            const char *cluster,
                                            const char *owner);

/* Fails the writes not yet sent with MS_ECANCELED (their callbacks run
 * here) and frees s once its timer is closed; `cb` (may be NULL) runs
 * then, on the loop. Writes and loads already in the pool hold s: close
 * the pool first (ms_pg_close fails its jobs, their callbacks run then),
 * the store after that. */
void ms_remember_sql_close(struct ms_remember_sql *s, void (*cb)(void *),
                           void *data);

/* A load's outcome: err 0 and the n ids (ids[i] of lens[i] bytes,
 * NUL-terminated, sorted bytewise; borrowed until the callback returns),
 * or a negative code and a one-line message (at most
 * MS_REMEMBER_SQL_MESSAGE_MAX bytes). */
typedef void (*ms_remember_sql_load_cb)(int err, const char *message,
                                        const char *const *ids,
                                        const size_t *lens, uint32_t n,
                                        void *data);

/* Lists the remembered ids of (type, shard): a read, not fenced. More
 * than MS_REMEMBER_SQL_LOAD_MAX ids: MS_E2BIG (none given). 0 and `cb`
 * later (never inside the call), or MS_EINVAL, MS_ENOMEM or a pool's
 * code and no callback. */
int ms_remember_sql_load(struct ms_remember_sql *s, const char *type,
                         uint32_t shard, ms_remember_sql_load_cb cb,
                         void *data);

/* A write's outcome, after its transaction ended: 0 (committed),
 * MS_ESTALE (nothing written) or another negative code, with a one-line
 * message ("" on success). */
/* 1 when `id` can be stored: 1..MS_REMEMBER_ID_MAX bytes of UTF-8 as
 * PostgreSQL's text takes it (no NUL, no overlong form, no surrogate).
 * A write with another id is refused whole (MS_EINVAL). */
int ms_remember_sql_id_ok(const char *id, size_t len);

typedef void (*ms_remember_sql_write_cb)(int err, const char *message,
                                         void *data);

/* Writes one batch of `n` records of (type, shard) in ONE transaction
 * fenced by the shard's lease at `epoch` (0 is never current), applied
 * in order: a START inserts the id (there already: nothing), a STOP
 * deletes it (absent: nothing); for an id given twice the last record
 * wins. With `replace`, the records are the shard's whole set: every id
 * of the shard that the batch does not leave started is deleted in the
 * same transaction (n may then be 0: the shard's set becomes empty).
 * Everything is copied. 0 and `cb` later, or no callback and
 * MS_EINVAL (no callback, n = 0 without replace, an empty id, an id
 * holding NUL or bytes that are not UTF-8, an unknown op), MS_E2BIG (n
 * above MS_REMEMBER_BATCH_MAX, an id above MS_REMEMBER_ID_MAX bytes,
 * the batch above the pool's MS_PG_STATEMENT_MAX bytes) or MS_ENOMEM. */
int ms_remember_sql_write(struct ms_remember_sql *s, const char *type,
                          uint32_t shard, uint64_t epoch, int replace,
                          const struct ms_remember_record *records,
                          uint32_t n, ms_remember_sql_write_cb cb,
                          void *data);

/* Counters since the store was made. */
struct ms_remember_sql_stats {
    uint64_t groups;        /* group transactions committed */
    uint64_t writes;        /* writes committed */
    uint64_t records;       /* their records */
    uint64_t stale_refused; /* writes refused: MS_ESTALE */
    uint64_t db_errors;     /* writes and loads failed otherwise */
    uint64_t loads;         /* loads that succeeded */
    uint64_t loaded_ids;    /* ids they returned */
};

void ms_remember_sql_stats(const struct ms_remember_sql *s,
                           struct ms_remember_sql_stats *out);

#endif
