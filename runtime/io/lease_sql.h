/*
 * lease_sql.h -- the lease statements (runtime/core/lease.h ACQUIRE,
 * RENEW, RELEASE) on the node's PostgreSQL pool (runtime/io/pg.h), over
 * the table moonshard_leases (runtime/io/pg_schema.c).
 *
 * Every time is the DATABASE's clock: a lease runs until expires_at, set
 * from now() in the statement, and every answer carries expires_at and
 * now() in ms since the epoch, which the lease machine turns into time
 * left (never comparing them with a local clock).
 *
 * - ACQUIRE is one INSERT ... ON CONFLICT DO UPDATE: a new row gets epoch
 *   1; a row this owner holds, or whose lease expired, is taken for
 *   `duration`, its epoch + 1 when the owner changes or the lease had
 *   run out (released, or expired: a new incarnation of the same node
 *   name, or the same node after a loss, never shares an epoch with
 *   writes made before); this owner's live lease keeps it. Another owner's
 *   lease that has not expired refuses it (the answer then says until
 *   when). The update takes the row lock, so it waits for the write
 *   transactions that hold the row FOR SHARE (their epoch check).
 * - RENEW extends the lease only when owner and epoch match and it has
 *   not expired; else refused (the machine counts it lost).
 * - RELEASE ends the lease now (expires_at = now()) when owner and epoch
 *   match (epoch 0: any lease of this owner on the row). The row stays:
 *   its epoch must never go down.
 *
 * A statement that fails (the pool's error, or a result not shaped as
 * expected) is answered MS_LEASE_ANS_DB_ERROR. Single-threaded: the
 * loop's thread.
 */
#ifndef MS_IO_LEASE_SQL_H
#define MS_IO_LEASE_SQL_H

#include "../core/lease.h"
#include "pg.h"

struct ms_lease_sql;

/* Receives the answer of a statement (borrowed during the call). */
typedef void (*ms_lease_sql_cb)(void *data, const struct ms_lease_answer *a);

/* Creates the runner on `pg` (borrowed: it must outlive the statements
 * queued, which the pool answers even when it closes) for the cluster
 * named `cluster` (copied, 1..63 bytes). 0, MS_EINVAL or MS_ENOMEM. */
int ms_lease_sql_new(struct ms_lease_sql **out, struct ms_pg *pg,
                     const char *cluster, ms_lease_sql_cb cb, void *data);

/* Queues the statement of action `a` (ACQUIRE, RENEW or RELEASE) for the
 * type named `type_name` (1..63 bytes). 0: `cb` gets its answer later,
 * never inside this call; else a negative code (the pool's queue is
 * full, the pool is closing, MS_EINVAL, MS_ENOMEM) and no answer. */
int ms_lease_sql_run(struct ms_lease_sql *ls, const struct ms_lease_action *a,
                     const char *type_name);

/* No more answers from now on; the runner is freed once the pool has
 * answered its last statement (at once when none is out). NULL: no-op. */
void ms_lease_sql_close(struct ms_lease_sql *ls);

/*
 * GET /v1/leases/{type} (README "HTTP endpoints"): the lease rows of type
 * `type_name` (1..63 bytes) in cluster `cluster` (1..63 bytes), at most
 * `limit` of them (the type's shard_count, 1..MS_LEASE_SQL_LIST_MAX),
 * ordered by shard, read by one SELECT queued on `pg` (never blocks).
 * `cb` later gets, once, err 0 and the JSON
 *   {"type":T,"cluster":C,"leases":[{"shard":N,"holder":"n2",
 *    "epoch":E,"held":bool,"expires_in_ms":MS},...]}
 * (epoch as a decimal number; expires_in_ms on the database's clock,
 * negative once expired; held: expires_at > now()), or a negative code
 * (the pool's: MS_EDBCONN, MS_ETIMEDOUT, MS_EDBQUERY, MS_ECANCELED, ...,
 * or MS_ENOMEM) and a one-line text saying why. Strings are copied;
 * `payload` is borrowed during the call. Returns 0 (`cb` will run, never
 * inside this call), or a negative code and no callback (MS_EINVAL, the
 * pool's queue full, the pool closing, MS_ENOMEM).
 */
#define MS_LEASE_SQL_LIST_MAX 65536 /* MS_PLAN_MAX_SHARDS */
int ms_lease_sql_list(struct ms_pg *pg, const char *cluster,
                      const char *type_name, uint32_t limit,
                      void (*cb)(void *data, int err, const char *payload,
                                 size_t len),
                      void *data);

/* The SQL of each statement, for tests and reading. */
extern const char ms_lease_sql_list_rows[];
extern const char ms_lease_sql_acquire[];
extern const char ms_lease_sql_renew[];
extern const char ms_lease_sql_release[];

#endif
