/*
 * leasedb.h -- the simulated lease table (moonshard_leases) with the
 * semantics of the PostgreSQL statements of runtime/io/lease_sql.c and of
 * the lease check every write starts with (LEASE_CTE, runtime/io/journal.c).
 *
 * One row per (type, shard): owner (a node name), epoch, expires_at on
 * the database's clock. The statements are evaluated at the moment the
 * database runs them (the simulator delays the request and the answer):
 *
 *   acquire(owner, d): a free or expired row, or one `owner` holds, is
 *     taken: the epoch stays when `owner` held it unexpired, else goes up
 *     by one (a new row starts at 1); expires_at = now + d. Otherwise the
 *     holder is reported (REFUSED with its epoch and expiry).
 *   renew(owner, epoch, d): only the unexpired row `owner` holds at
 *     `epoch`; expires_at = now + d. Else REFUSED.
 *   release(owner, epoch): an unexpired row `owner` holds (at `epoch`, or
 *     any epoch when 0) expires now. Always RELEASED.
 *   commit(owner, epoch): a write succeeds only while `owner` holds the
 *     row at `epoch` and it has not expired (stale_owner otherwise).
 *
 * The table also checks its own invariants: epochs of a row only go up,
 * and a commit that succeeds must hold the current lease (with the
 * "db-stale-commit" switch the commit check is skipped, and the
 * simulator's invariant has to catch what then commits).
 */
#ifndef MS_SIM_LEASEDB_H
#define MS_SIM_LEASEDB_H

#include <stdint.h>

#include "../runtime/core/lease.h"

#define LEASEDB_ROWS 64

struct leasedb_row {
    int exists;
    char owner[64];
    uint64_t epoch;
    int64_t expires_at_ms;
};

struct leasedb {
    struct leasedb_row rows[LEASEDB_ROWS]; /* index type * 32 + shard */
    int break_stale_commit;                /* test-only switch */
    uint64_t commits_ok, commits_refused;
};

void leasedb_init(struct leasedb *db);

/* Runs the statement of `a` (ACQUIRE, RENEW or RELEASE) at database time
 * `db_now_ms` and fills the answer. */
void leasedb_exec(struct leasedb *db, const struct ms_lease_action *a,
                  int64_t db_now_ms, struct ms_lease_answer *out);

/* The commit check of a write by `owner` with `epoch`: 1 accepted, 0
 * refused (stale_owner). */
int leasedb_commit(struct leasedb *db, int type, uint32_t shard,
                   const char *owner, uint64_t epoch, int64_t db_now_ms);

/* 1 when `owner` holds (type, shard) at `epoch`, unexpired, at db_now:
 * the truth, whatever the switches. */
int leasedb_holds(const struct leasedb *db, int type, uint32_t shard,
                  const char *owner, uint64_t epoch, int64_t db_now_ms);

const struct leasedb_row *leasedb_row(const struct leasedb *db, int type,
                                      uint32_t shard);

#endif
