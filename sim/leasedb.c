/*
 * leasedb.c -- the simulated lease table; see leasedb.h. Each function
 * says which SQL text of runtime/io/lease_sql.c or journal.c it mirrors.
 */
#include "leasedb.h"

#include <stdio.h>
#include <string.h>

static struct leasedb_row *row_of(struct leasedb *db, int type,
                                  uint32_t shard)
{
    unsigned i = (unsigned)type * 32u + shard;
    return i < LEASEDB_ROWS ? &db->rows[i] : NULL;
}

const struct leasedb_row *leasedb_row(const struct leasedb *db, int type,
                                      uint32_t shard)
{
    unsigned i = (unsigned)type * 32u + shard;
    return i < LEASEDB_ROWS ? &db->rows[i] : NULL;
}

void leasedb_init(struct leasedb *db)
{
    memset(db, 0, sizeof *db);
}

void leasedb_exec(struct leasedb *db, const struct ms_lease_action *a,
                  int64_t now, struct ms_lease_answer *out)
{
    memset(out, 0, sizeof *out);
    out->type = a->type;
    out->shard = a->shard;
    out->req = a->req;
    out->db_now_ms = now;
    struct leasedb_row *r = row_of(db, a->type, a->shard);
    if (!r) {
        out->kind = MS_LEASE_ANS_DB_ERROR;
        return;
    }
    int mine = r->exists && strcmp(r->owner, a->owner) == 0;
    int live = r->exists && r->expires_at_ms > now;
    switch (a->kind) {
    case MS_LEASE_ACQUIRE:
        /* ms_lease_sql_acquire: INSERT .. ON CONFLICT DO UPDATE WHERE
         * l.owner = EXCLUDED.owner OR l.expires_at <= now() */
        if (!r->exists) {
            r->exists = 1;
            snprintf(r->owner, sizeof r->owner, "%s", a->owner);
            r->epoch = 1;
            r->expires_at_ms = now + (int64_t)a->duration_ms;
            out->kind = MS_LEASE_ANS_ACQUIRED;
        } else if (mine || !live) {
            if (!(mine && live))
                r->epoch++;
            snprintf(r->owner, sizeof r->owner, "%s", a->owner);
            r->expires_at_ms = now + (int64_t)a->duration_ms;
            out->kind = MS_LEASE_ANS_ACQUIRED;
        } else {
            out->kind = MS_LEASE_ANS_REFUSED; /* 'held' */
        }
        out->epoch = r->epoch;
        out->expires_at_ms = r->expires_at_ms;
        break;
    case MS_LEASE_RENEW:
        /* ms_lease_sql_renew: owner = $4 AND epoch = $6 AND expires_at >
         * now(); no row: refused */
        if (mine && live && r->epoch == a->epoch) {
            r->expires_at_ms = now + (int64_t)a->duration_ms;
            out->kind = MS_LEASE_ANS_RENEWED;
            out->epoch = r->epoch;
            out->expires_at_ms = r->expires_at_ms;
        } else {
            out->kind = MS_LEASE_ANS_REFUSED;
        }
        break;
    case MS_LEASE_RELEASE:
        /* ms_lease_sql_release */
        if (mine && live && (a->epoch == 0 || r->epoch == a->epoch))
            r->expires_at_ms = now;
        out->kind = MS_LEASE_ANS_RELEASED;
        break;
    default:
        out->kind = MS_LEASE_ANS_DB_ERROR;
    }
}

int leasedb_holds(const struct leasedb *db, int type, uint32_t shard,
                  const char *owner, uint64_t epoch, int64_t now)
{
    const struct leasedb_row *r = leasedb_row(db, type, shard);
    return r && r->exists && strcmp(r->owner, owner) == 0 &&
           r->epoch == epoch && r->expires_at_ms > now;
}

int leasedb_commit(struct leasedb *db, int type, uint32_t shard,
                   const char *owner, uint64_t epoch, int64_t now)
{
    /* LEASE_CTE: owner = $4 AND epoch = $5 AND expires_at > now() */
    int ok = db->break_stale_commit ||
             leasedb_holds(db, type, shard, owner, epoch, now);
    if (ok)
        db->commits_ok++;
    else
        db->commits_refused++;
    return ok;
}
