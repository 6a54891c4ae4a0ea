/*
 * pg_pipe.c -- a group job (ms_pg_group) in libpq's pipeline mode: the
 * whole transaction goes to the server in one write and its answers come
 * back in one read, where the step-by-step path of pg.c waits one round
 * trip per statement.
 *
 * The first round is optimistic: BEGIN, every unit's statements, COMMIT,
 * Sync -- no savepoints, since each one costs the server a subtransaction
 * (and past 64 of them in one transaction, every snapshot in the server
 * gets slower). When every statement succeeds, that is the whole group:
 * one round trip.
 *
 * A statement that fails makes the server skip everything up to the Sync
 * (PGRES_PIPELINE_ABORTED), COMMIT included, so the transaction is still
 * open, failed, and nothing of it can be kept. That unit's failure is
 * final; the next round is ROLLBACK, BEGIN and the other units again,
 * each now under its own savepoint:
 *   SAVEPOINT ms_unit, its statements, RELEASE SAVEPOINT ms_unit,
 * then COMMIT, Sync. A unit that fails in such a round leaves the
 * transaction failed with its savepoint set; the round after sends
 *   ROLLBACK TO SAVEPOINT ms_unit, RELEASE SAVEPOINT ms_unit,
 * the units after it, COMMIT, Sync.
 * So a group costs one round trip, plus one per unit that fails, and a
 * unit that fails is the only one whose writes are undone; the units
 * before the first failure run twice (the first time rolled back). An
 * error outside a unit (BEGIN, COMMIT, a rollback) fails the whole group:
 * ROLLBACK (unless COMMIT failed), and every unit reports it.
 *
 * Prepared statements: the first use of a statement text on a connection
 * sends a Parse under a new name "ms_p<n>" in the pipeline, before its
 * execution; later uses execute the named statement (no parse, and the
 * server's plan cache). At most MS_PG_MAX_PREPARED texts per connection;
 * past that a statement is sent unnamed. A Parse that was skipped or
 * failed is forgotten again, and so is a statement whose execution says
 * the server lost it (26000: DEALLOCATE by hand) or cannot use it any
 * more (0A000: its result type changed under it); a connection that is
 * dropped forgets all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"
#include "pg_int.h"

static uint32_t hash_text(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

void ms__pg_prepared_reset(struct conn *c)
{
    for (int i = 0; i < MS_PG_MAX_PREPARED; i++) {
        free(c->prep[i].sql);
        c->prep[i].sql = NULL;
    }
    c->prep_names = 0;
}

static void prepared_forget(struct conn *c, int slot)
{
    free(c->prep[slot].sql);
    c->prep[slot].sql = NULL;
}

/* The slot holding `sql` (prepared or being prepared), else -1. */
static int prepared_find(const struct conn *c, const char *sql, uint32_t h)
{
    for (int i = 0; i < MS_PG_MAX_PREPARED; i++)
        if (c->prep[i].sql && c->prep[i].hash == h &&
            strcmp(c->prep[i].sql, sql) == 0)
            return i;
    return -1;
}

/* A free slot taken for `sql`, else -1 (all taken, or no memory). */
static int prepared_add(struct conn *c, const char *sql, uint32_t h)
{
    for (int i = 0; i < MS_PG_MAX_PREPARED; i++) {
        if (c->prep[i].sql)
            continue;
        size_t n = strlen(sql) + 1;
        if (!(c->prep[i].sql = malloc(n)))
            return -1;
        memcpy(c->prep[i].sql, sql, n);
        c->prep[i].hash = h;
        c->prep[i].name = c->prep_names++;
        return i;
    }
    return -1;
}

static void push(struct conn *c, int kind, int unit, int st, int slot)
{
    struct pstep *p = &c->pipe[c->pipe_n++];
    p->kind = kind;
    p->unit = unit;
    p->st = st;
    p->slot = slot;
}

/* Sends one statement of the pipeline; 0, or -1 (libpq refused). */
static int send_sql(struct conn *c, int kind, int unit, const char *sql)
{
    if (!PQsendQueryParams(c->pg, sql, 0, NULL, NULL, NULL, NULL, 0))
        return -1;
    push(c, kind, unit, -1, -1);
    return 0;
}

/* Sends the job's statement i, prepared when it can be. */
static int send_stmt(struct conn *c, int i)
{
    const struct stmt *s = &c->job->st[i];
    const char *const *params = (const char *const *)s->params;
    uint32_t h = hash_text(s->sql);
    int slot = prepared_find(c, s->sql, h);
    char name[16];
    if (slot < 0 && (slot = prepared_add(c, s->sql, h)) >= 0) {
        snprintf(name, sizeof name, "ms_p%u", c->prep[slot].name);
        if (!PQsendPrepare(c->pg, name, s->sql, s->nparams, NULL))
            return -1;
        push(c, P_PREPARE, s->unit, i, slot);
    }
    if (slot < 0) {
        if (!PQsendQueryParams(c->pg, s->sql, s->nparams, NULL, params,
                               NULL, NULL, 0))
            return -1;
    } else {
        snprintf(name, sizeof name, "ms_p%u", c->prep[slot].name);
        if (!PQsendQueryPrepared(c->pg, name, s->nparams, params, NULL,
                                 NULL, 0))
            return -1;
    }
    push(c, P_STMT, s->unit, i, slot);
    return 0;
}

enum { R_FIRST, R_RESTART, R_RESUME };

/* Sends a round: the units from `from` on that have not failed, with
 * savepoints once c->pipe_sp is set, after BEGIN (R_FIRST), ROLLBACK and
 * BEGIN (R_RESTART) or the rollback to the failed unit's savepoint
 * (R_RESUME). */
static void send_round(struct conn *c, int from, int how)
{
    struct job *j = c->job;
    c->pipe_n = 0;
    c->pipe_at = 0;
    c->failed_unit = -1;
    int bad;
    if (how == R_RESUME)
        bad = send_sql(c, P_ROLLBACK_TO, -1,
                       "ROLLBACK TO SAVEPOINT ms_unit") ||
              send_sql(c, P_RELEASE_AFTER, -1, "RELEASE SAVEPOINT ms_unit");
    else
        bad = (how == R_RESTART && send_sql(c, P_ROLLBACK, -1, "ROLLBACK"))
              || send_sql(c, P_BEGIN, -1, "BEGIN");
    for (int u = from; u < j->nunits && !bad; u++) {
        if (j->units[u].err)
            continue; /* failed in an earlier round */
        if (c->pipe_sp)
            bad = send_sql(c, P_SAVEPOINT, u, "SAVEPOINT ms_unit");
        for (int i = j->unit_start[u]; i < j->unit_start[u + 1] && !bad;
             i++)
            bad = send_stmt(c, i);
        if (c->pipe_sp)
            bad = bad ||
                  send_sql(c, P_RELEASE, u, "RELEASE SAVEPOINT ms_unit");
    }
    bad = bad || send_sql(c, P_COMMIT, -1, "COMMIT");
    if (!bad) {
        if (!PQpipelineSync(c->pg))
            bad = 1;
        else
            push(c, P_SYNC, -1, -1, -1);
    }
    int f = bad ? -1 : PQflush(c->pg);
    if (f < 0 ||
        ms__pg_watch(c, f ? UV_READABLE | UV_WRITABLE : UV_READABLE) != 0)
        ms__pg_conn_lost(c, PQerrorMessage(c->pg));
}

void ms__pg_pipe_start(struct conn *c)
{
    struct job *j = c->job;
    /* the most a round sends: BEGIN (with the ROLLBACK before it, or the
     * two of a rollback to a savepoint), per unit SAVEPOINT and RELEASE,
     * per statement a Parse and its execution, COMMIT, Sync */
    int need = 2 + 2 * j->nunits + 2 * j->n + 2;
    if (need > c->pipe_cap) {
        struct pstep *p = realloc(c->pipe, (size_t)need * sizeof *p);
        if (!p) {
            ms__pg_conn_lost(c, "out of memory");
            return;
        }
        c->pipe = p;
        c->pipe_cap = need;
    }
    if (!PQenterPipelineMode(c->pg)) {
        ms__pg_conn_lost(c, PQerrorMessage(c->pg));
        return;
    }
    c->pipe_on = 1;
    c->pipe_sp = 0;
    c->commit_failed = 0;
    send_round(c, 0, R_FIRST);
}

static int error_code(const char *sqlstate)
{
    /* the server's statement_timeout cancels with 57014 */
    return sqlstate && strcmp(sqlstate, "57014") == 0 ? MS_ETIMEDOUT
                                                      : MS_PG_EQUERY;
}

/* Keeps what one answer of the round says. */
static void take(struct conn *c, const struct pstep *p, PGresult *res)
{
    struct job *j = c->job;
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ||
        st == PGRES_EMPTY_QUERY) {
        if (p->kind == P_STMT) {
            if (c->last)
                PQclear(c->last);
            c->last = res;
            return;
        }
        PQclear(res);
        return;
    }
    if (p->kind == P_PREPARE && c->prep[p->slot].sql) {
        /* skipped or refused: not prepared on the server */
        prepared_forget(c, p->slot);
    }
    if (st == PGRES_PIPELINE_ABORTED || c->err || c->failed_unit >= 0) {
        PQclear(res); /* skipped, or after the first error */
        return;
    }
    const char *ss = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (p->kind == P_STMT && p->slot >= 0 && c->prep[p->slot].sql && ss &&
        (strcmp(ss, "26000") == 0 || strcmp(ss, "0A000") == 0))
        prepared_forget(c, p->slot); /* lost or unusable: a new name */
    if (p->unit >= 0) {
        /* a unit failed: it alone is rolled back (next round) */
        struct unit_out *u = &j->units[p->unit];
        ms__pg_copy_text(u->sqlstate, sizeof u->sqlstate, ss);
        ms__pg_copy_text(u->message, sizeof u->message,
                         PQresultErrorMessage(res));
        u->err = error_code(ss);
        u->index = p->kind == P_STMT || p->kind == P_PREPARE
                       ? p->st - j->unit_start[p->unit]
                       : -1;
        c->failed_unit = p->unit;
    } else {
        ms__pg_copy_text(c->sqlstate, sizeof c->sqlstate, ss);
        ms__pg_copy_text(c->message, sizeof c->message,
                         PQresultErrorMessage(res));
        c->err = error_code(ss);
        c->err_index = -1;
        c->commit_failed = p->kind == P_COMMIT;
    }
    PQclear(res);
}

/* The Sync of a round came back: the next round, or the job's end. */
static void round_done(struct conn *c)
{
    if (c->err) {
        if (!PQexitPipelineMode(c->pg)) {
            ms__pg_conn_lost(c, PQerrorMessage(c->pg));
            return;
        }
        c->pipe_on = 0;
        /* a COMMIT that failed ended the transaction; after BEGIN or a
         * rollback to the savepoint that failed it is open: ROLLBACK
         * (step by step) */
        if (c->commit_failed)
            ms__pg_finish(c);
        else
            ms__pg_rollback(c);
        return;
    }
    if (c->failed_unit >= 0 && !c->pipe_sp) {
        /* the first failure of an optimistic round: the transaction is
         * lost; again from the start, without that unit, each unit under
         * its savepoint now */
        c->pipe_sp = 1;
        send_round(c, 0, R_RESTART);
        return;
    }
    if (c->failed_unit >= 0) {
        send_round(c, c->failed_unit + 1, R_RESUME);
        return;
    }
    if (!PQexitPipelineMode(c->pg)) {
        ms__pg_conn_lost(c, PQerrorMessage(c->pg));
        return;
    }
    c->pipe_on = 0;
    ms__pg_finish(c);
}

void ms__pg_pipe_read(struct conn *c)
{
    struct job *j = c->job;
    int nulls = 0;
    while (c->state == C_BUSY && c->job == j && c->pipe_on &&
           !PQisBusy(c->pg)) {
        PGresult *res = PQgetResult(c->pg);
        if (!res) {
            /* the end of one statement's answer; two in a row: nothing
             * more has come yet */
            if (PQstatus(c->pg) == CONNECTION_BAD) {
                ms__pg_conn_lost(c, PQerrorMessage(c->pg));
                return;
            }
            if (++nulls > 1)
                break;
            continue;
        }
        nulls = 0;
        if (c->pipe_at >= c->pipe_n) {
            PQclear(res);
            ms__pg_conn_lost(c, "an answer no statement of the pipeline "
                                "asked for");
            return;
        }
        const struct pstep *p = &c->pipe[c->pipe_at++];
        int sync = PQresultStatus(res) == PGRES_PIPELINE_SYNC;
        if (sync != (p->kind == P_SYNC)) {
            PQclear(res);
            ms__pg_conn_lost(c, "the pipeline's answers are out of step");
            return;
        }
        if (sync) {
            PQclear(res);
            round_done(c);
            return;
        }
        take(c, p, res);
    }
    if (c->state != C_DOWN && c->pg && PQstatus(c->pg) == CONNECTION_BAD)
        ms__pg_conn_lost(c, PQerrorMessage(c->pg));
}
