/*
 * journal.c -- the SQL of persistent entities; see journal.h.
 *
 * Every write is one unit of a group transaction (ms_pg_group: undone
 * alone when it fails) and, but for a snapshot, one statement: its first CTE locks
 * the shard's lease row and divides by the number of rows it found, so a
 * missing or stale lease raises division_by_zero (22012) and the unit is
 * rolled back: MS_ESTALE. A state update or delete at the wrong revision,
 * or events at or below the snapshot's sequence, change no row and the
 * statement then raises cardinality_violation (21000); an event sequence
 * that exists violates the primary key (23505): both MS_ECONFLICT.
 *
 * Group commit: writes are queued in the journal; a zero timer started
 * by the first one flushes the queue on the loop's next turn as one
 * group (at most MS_JOURNAL_MAX_GROUP writes; the rest go in the next).
 * At most `max_groups` groups are in the pool at once (one per
 * connection): what is queued is shared out among the free connections;
 * while the groups run, writes gather in the queue, and a group that
 * ends sends the next ones -- the slower the commits, the larger the
 * groups.
 */
#include "journal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"

/* Every write's first statement starts with this CTE: $1 cluster, $2
 * type, $3 shard, $4 owner, $5 epoch. It locks the lease row or raises
 * division_by_zero (22012) when there is no such row. */
#define LEASE_CTE                                                         \
    "WITH lease AS (SELECT 1 / count(*) AS ok FROM (SELECT 1"             \
    " FROM moonshard_leases WHERE cluster = $1 AND type = $2"             \
    " AND shard = $3::integer AND owner = $4 AND epoch = $5::bigint"      \
    " AND expires_at > now() FOR SHARE) AS l)"

/* The last SELECT of a write over the rows it changed (`x`): the lease
 * first (its CTE raises if it must), then cardinality_violation (21000)
 * when no row changed: the expected sequence or revision was not there.
 * (A subquery that returns two rows is how plain SQL raises.) */
#define CHECK_CHANGED(x)                                                  \
    " SELECT (SELECT ok FROM lease) + CASE WHEN count(*) = 0 THEN"        \
    " (SELECT v.x FROM (VALUES (1), (2)) AS v(x)) ELSE 0 END FROM " x

/* $6 id, $7 first sequence, $8 text[] of the events: nothing is
 * inserted at or below the snapshot's sequence (its events may be
 * deleted: the key alone would not see that conflict) */
static const char SQL_APPEND[] =
    LEASE_CTE ", ins AS (INSERT INTO moonshard_events"
    " (cluster, type, id, sequence, epoch, payload)"
    " SELECT $1, $2, $6, $7::bigint + e.n - 1, $5::bigint, e.p"
    " FROM lease, unnest($8::text[]) WITH ORDINALITY AS e(p, n)"
    " WHERE NOT EXISTS (SELECT 1 FROM moonshard_snapshots s"
    " WHERE s.cluster = $1 AND s.type = $2 AND s.id = $6"
    " AND s.sequence >= $7::bigint) RETURNING 1)"
    CHECK_CHANGED("ins");

/* $1 cluster, $2 type, $3 id, $4 sequence, $5 epoch, $6 state */
static const char SQL_SNAPSHOT[] =
    "INSERT INTO moonshard_snapshots"
    " (cluster, type, id, sequence, epoch, state)"
    " VALUES ($1, $2, $3, $4::bigint, $5::bigint, $6)"
    " ON CONFLICT (cluster, type, id) DO UPDATE SET"
    " sequence = EXCLUDED.sequence, epoch = EXCLUDED.epoch,"
    " state = EXCLUDED.state, created_at = now()";

/* $1 cluster, $2 type, $3 id, $4 sequence */
static const char SQL_DELETE_COVERED[] =
    "DELETE FROM moonshard_events WHERE cluster = $1 AND type = $2"
    " AND id = $3 AND sequence <= $4::bigint";

/* $1 cluster, $2 type, $3 id, $4 limit: the snapshot (k = 0) and the
 * events after it (k = 1), one statement so one snapshot of the data */
static const char SQL_LOAD_EVENTS[] =
    "WITH s AS (SELECT sequence, state FROM moonshard_snapshots"
    " WHERE cluster = $1 AND type = $2 AND id = $3)"
    " SELECT 0 AS k, sequence, state FROM s"
    " UNION ALL"
    " SELECT 1, sequence, payload FROM (SELECT sequence, payload"
    " FROM moonshard_events WHERE cluster = $1 AND type = $2 AND id = $3"
    " AND sequence > coalesce((SELECT sequence FROM s), 0)"
    " ORDER BY sequence LIMIT $4::bigint) AS e"
    " ORDER BY 1, 2";

/* $1 cluster, $2 type, $3 id */
static const char SQL_LOAD_STATE[] =
    "SELECT revision, state FROM moonshard_states"
    " WHERE cluster = $1 AND type = $2 AND id = $3";

/* $6 id, $7 state: revision 1 (the key refuses a second insert) */
static const char SQL_STATE_INSERT[] =
    LEASE_CTE " INSERT INTO moonshard_states"
    " (cluster, type, id, revision, epoch, state)"
    " SELECT $1, $2, $6, 1, $5::bigint, $7 FROM lease";

/* $6 id, $7 state, $8 expected revision */
static const char SQL_STATE_UPDATE[] =
    LEASE_CTE ", u AS (UPDATE moonshard_states SET revision = revision + 1,"
    " epoch = $5::bigint, state = $7, updated_at = now() FROM lease"
    " WHERE cluster = $1 AND type = $2 AND id = $6"
    " AND revision = $8::bigint RETURNING 1)"
    CHECK_CHANGED("u");

/* $6 id, $7 expected revision */
static const char SQL_STATE_DELETE[] =
    LEASE_CTE ", d AS (DELETE FROM moonshard_states USING lease"
    " WHERE cluster = $1 AND type = $2 AND id = $6"
    " AND revision = $7::bigint RETURNING 1)"
    CHECK_CHANGED("d");

/* $1 cluster, $2 type, $3 id, $4 op id, $5 reply: with another write,
 * in its transaction (the key refuses an id recorded already) */
static const char SQL_OP_INSERT[] =
    "INSERT INTO moonshard_operations (cluster, type, id, op_id, reply)"
    " VALUES ($1, $2, $3, $4, $5)";

/* $6 id, $7 op id, $8 reply: alone, under the lease check */
static const char SQL_OP_ONLY[] =
    LEASE_CTE " INSERT INTO moonshard_operations"
    " (cluster, type, id, op_id, reply)"
    " SELECT $1, $2, $6, $7, $8 FROM lease";

/* $1 cluster, $2 type, $3 id, $4 op id */
static const char SQL_OP_FIND[] =
    "SELECT reply FROM moonshard_operations WHERE cluster = $1"
    " AND type = $2 AND id = $3 AND op_id = $4";

/* $1 cluster, $2 retention in ms */
static const char SQL_OP_EXPIRE[] =
    "DELETE FROM moonshard_operations WHERE ctid IN (SELECT ctid"
    " FROM moonshard_operations WHERE cluster = $1 AND created_at <"
    " now() - $2::bigint * interval '1 millisecond' LIMIT 10000)";

struct op;

struct ms_journal {
    uv_loop_t *loop;
    struct ms_pg *pg;
    char *cluster;
    char *owner;
    uv_timer_t flush;        /* flushes the queue on the next turn */
    struct op *head, *tail;  /* writes not yet sent */
    int queued;
    int inflight;            /* groups in the pool */
    int max_groups;
    void (*closed_cb)(void *);
    void *closed_data;
    struct ms_journal_stats st;
    uint64_t lat[MS_JOURNAL_LAT_WINDOW]; /* last commit latencies, us */
    unsigned nlat;
};

enum { W_APPEND, W_STATE_SAVE, W_STATE_DELETE, W_OP };

#define MAX_ST 4     /* statements of one write (3 and an operation) */
#define MAX_PARAMS 8 /* parameters of one of them */

/* One write or load under way (the pool's callback data). A write owns
 * its statements' parameters until it is sent. */
struct op {
    struct ms_journal *j;
    struct op *next;     /* in the journal's queue */
    int what;            /* W_*, or -1 for a load */
    int state;           /* a load: of a durable state */
    int nevents;         /* an append: its events */
    int snapshot;        /* an append: with a snapshot */
    int has_op;          /* records an operation id */
    uint64_t start_ns;
    ms_journal_write_cb wcb;
    ms_journal_load_cb lcb;
    void *data;
    int nst;
    const char *sql[MAX_ST];
    int np[MAX_ST];
    char *params[MAX_ST][MAX_PARAMS];
};

/* The writes of one group transaction (the pool's callback data). */
struct group {
    struct ms_journal *j;
    int n;
    struct op *ops[MS_JOURNAL_MAX_GROUP];
};

struct ms_journal *ms_journal_new(uv_loop_t *loop, struct ms_pg *pg,
                                  const char *cluster, const char *owner,
                                  int max_groups)
{
    struct ms_journal *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->loop = loop;
    j->pg = pg;
    j->max_groups = max_groups > 0 ? max_groups : 2;
    j->cluster = ms_pg_dupstr(cluster ? cluster : "");
    j->owner = ms_pg_dupstr(owner ? owner : "");
    if (!j->cluster || !j->owner) {
        free(j->cluster);
        free(j->owner);
        free(j);
        return NULL;
    }
    uv_timer_init(loop, &j->flush);
    j->flush.data = j;
    return j;
}

static void op_free(struct op *o)
{
    for (int i = 0; i < o->nst; i++)
        for (int k = 0; k < o->np[i]; k++)
            free(o->params[i][k]);
    free(o);
}

static void on_flush_closed(uv_handle_t *h)
{
    struct ms_journal *j = h->data;
    void (*cb)(void *) = j->closed_cb;
    void *data = j->closed_data;
    free(j->cluster);
    free(j->owner);
    free(j);
    if (cb)
        cb(data);
}

void ms_journal_close(struct ms_journal *j, void (*cb)(void *data),
                      void *data)
{
    j->closed_cb = cb;
    j->closed_data = data;
    struct op *o = j->head;
    j->head = j->tail = NULL;
    j->queued = 0;
    while (o) {
        struct op *next = o->next;
        o->wcb(MS_ECANCELED, "the node is stopping: nothing was written",
               o->data);
        op_free(o);
        o = next;
    }
    uv_close((uv_handle_t *)&j->flush, on_flush_closed);
}

/* The entity's id as a C string (ids holding NUL cannot be stored). */
static int id_text(const struct ms_journal_entity *e, char **out)
{
    if (!e || !e->type || !e->id || e->idlen == 0 ||
        memchr(e->id, 0, e->idlen))
        return MS_EINVAL;
    char *s = malloc(e->idlen + 1);
    if (!s)
        return MS_ENOMEM;
    memcpy(s, e->id, e->idlen);
    s[e->idlen] = 0;
    *out = s;
    return 0;
}

/* ---- outcomes -------------------------------------------------------- */

/* The journal's code for a failed write: see the file comment. */
static int write_error(int err, const char *sqlstate, int index)
{
    if (err != MS_PG_EQUERY)
        return err;
    (void)index;
    if (strcmp(sqlstate, "22012") == 0)
        return MS_ESTALE;
    if (strcmp(sqlstate, "23505") == 0 || strcmp(sqlstate, "21000") == 0)
        return MS_ECONFLICT;
    return err;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void latency(struct ms_journal *j, uint64_t us)
{
    j->st.latency_count++;
    j->st.latency_sum_us += us;
    j->lat[j->nlat++ % MS_JOURNAL_LAT_WINDOW] = us;
}

void ms_journal_stats(const struct ms_journal *j,
                      struct ms_journal_stats *out)
{
    *out = j->st;
    unsigned n = j->nlat < MS_JOURNAL_LAT_WINDOW ? j->nlat
                                                 : MS_JOURNAL_LAT_WINDOW;
    if (n == 0)
        return;
    uint64_t *v = malloc(n * sizeof *v);
    if (!v)
        return;
    memcpy(v, j->lat, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_u64);
    out->latency_p50_us = v[(n - 1) / 2];
    out->latency_p99_us = v[(n - 1) * 99 / 100];
    free(v);
}

/* Write o ended with `err` (a pool's code, mapped here) and the pool's
 * message: counts it, calls its callback and frees it. */
static void op_done(struct op *o, int err, const char *pgmsg)
{
    struct ms_journal *j = o->j;
    char msg[MS_JOURNAL_MESSAGE_MAX];
    if (err == MS_ESTALE)
        snprintf(msg, sizeof msg, "the lease of this shard is not held at "
                 "the writer's epoch (another owner took it, or it "
                 "expired): nothing was written");
    else if (err == MS_ECONFLICT)
        snprintf(msg, sizeof msg, "%s: another writer changed this "
                 "entity's history (%s)",
                 o->has_op && pgmsg && strstr(pgmsg, "moonshard_operations")
                     ? "the operation id is recorded already"
                 : o->what == W_APPEND ? "the event sequence exists already"
                                       : "the state is not at the expected "
                                         "revision",
                 pgmsg);
    else if (err)
        snprintf(msg, sizeof msg, "%s", pgmsg && pgmsg[0]
                                            ? pgmsg : ms_strerror(err));
    else
        msg[0] = 0;
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    if (err == 0) {
        j->st.writes++;
        if (o->what == W_APPEND) {
            j->st.events += (uint64_t)o->nevents;
            j->st.snapshots += o->snapshot ? 1u : 0u;
        } else if (o->what != W_OP) {
            j->st.states++;
        }
        j->st.ops_recorded += o->has_op ? 1u : 0u;
        latency(j, (uv_hrtime() - o->start_ns) / 1000);
    } else if (err == MS_ESTALE) {
        j->st.stale_refused++;
    } else if (err == MS_ECONFLICT) {
        j->st.conflicts++;
    } else {
        j->st.db_errors++;
    }
    o->wcb(err, msg, o->data);
    op_free(o);
}

static void on_flush(uv_timer_t *t);

static void on_group(const struct ms_pg_result *r, void *data)
{
    struct group *g = data;
    struct ms_journal *j = g->j;
    j->inflight--;
    /* what gathered meanwhile goes next (on the next turn: the pool is
     * inside its callback now) */
    if (j->head && !uv_is_active((uv_handle_t *)&j->flush))
        uv_timer_start(&j->flush, on_flush, 0, 0);
    int committed = 0;
    for (int u = 0; u < g->n; u++) {
        int err = ms_pg_result_unit_error(r, u);
        if (err)
            err = write_error(err, ms_pg_result_unit_sqlstate(r, u),
                              ms_pg_result_unit_index(r, u));
        committed += err == 0;
        op_done(g->ops[u], err, ms_pg_result_unit_message(r, u));
    }
    if (committed)
        j->st.commits++;
    free(g);
}

/* Sends up to `limit` (<= MS_JOURNAL_MAX_GROUP) queued writes as one
 * group. */
static void flush(struct ms_journal *j, int limit)
{
    struct group *g = malloc(sizeof *g);
    if (!g)
        return; /* tried again by the next write's timer */
    g->j = j;
    g->n = 0;
    int nst = 0;
    while (j->head && g->n < limit) {
        struct op *o = j->head;
        j->head = o->next;
        j->queued--;
        g->ops[g->n++] = o;
        nst += o->nst;
    }
    if (!j->head)
        j->tail = NULL;
    const char **sql = malloc((size_t)nst * sizeof *sql);
    int *np = malloc((size_t)nst * sizeof *np);
    const char *const **params = malloc((size_t)nst * sizeof *params);
    int unit_n[MS_JOURNAL_MAX_GROUP];
    int rc = MS_ENOMEM;
    if (sql && np && params) {
        int k = 0;
        for (int u = 0; u < g->n; u++) {
            struct op *o = g->ops[u];
            unit_n[u] = o->nst;
            for (int i = 0; i < o->nst; i++, k++) {
                sql[k] = o->sql[i];
                np[k] = o->np[i];
                params[k] = (const char *const *)o->params[i];
            }
        }
        rc = ms_pg_group(j->pg, g->n, unit_n, sql, np, params, on_group, g);
        if (rc == 0)
            j->inflight++;
    }
    free(sql);
    free(np);
    free(params);
    if (rc < 0) {
        for (int u = 0; u < g->n; u++)
            op_done(g->ops[u], rc, ms_strerror(rc));
        free(g);
    }
}

/* What is queued is shared out among the connections that are free:
 * groups run in parallel, each as large as it must be. */
static void on_flush(uv_timer_t *t)
{
    struct ms_journal *j = t->data;
    while (j->head && j->inflight < j->max_groups) {
        int free_groups = j->max_groups - j->inflight;
        int limit = (j->queued + free_groups - 1) / free_groups;
        flush(j, limit < MS_JOURNAL_MAX_GROUP ? limit
                                              : MS_JOURNAL_MAX_GROUP);
    }
}

static struct op *op_new(struct ms_journal *j, int what)
{
    struct op *o = calloc(1, sizeof *o);
    if (o) {
        o->j = j;
        o->what = what;
        o->start_ns = uv_hrtime();
    }
    return o;
}

/* ---- writes ---------------------------------------------------------- */

static char *text_of(const char *s, size_t len)
{
    if (!s || memchr(s, 0, len))
        return NULL;
    char *t = malloc(len + 1);
    if (t) {
        memcpy(t, s, len);
        t[len] = 0;
    }
    return t;
}

/* Queues write o: `n` statements (parameters copied into o); the first
 * starts with LEASE_CTE, whose 5 parameters come before its own np[0].
 * Takes o (freed on failure). */
static int write_tx(struct ms_journal *j, const struct ms_journal_entity *e,
                    int n, const char *const *sql, const int *np,
                    const char *const *const *params, struct op *o)
{
    char shard[16], epoch[24];
    snprintf(shard, sizeof shard, "%" PRIu32, e->shard);
    snprintf(epoch, sizeof epoch, "%" PRIu64, e->epoch);
    const char *lease[5] = {j->cluster, e->type, shard, j->owner, epoch};
    o->nst = n;
    for (int i = 0; i < n; i++) {
        int first = i == 0 ? 5 : 0;
        o->sql[i] = sql[i];
        o->np[i] = first + np[i];
        for (int k = 0; k < o->np[i]; k++) {
            const char *v = k < first ? lease[k] : params[i][k - first];
            if (v && !(o->params[i][k] = ms_pg_dupstr(v))) {
                op_free(o);
                return MS_ENOMEM;
            }
        }
    }
    if (e->op_id && o->what != W_OP) {
        /* the operation, recorded in the same transaction */
        char *id = NULL, *reply = NULL;
        int rc = id_text(e, &id);
        if (rc == 0 && e->op_reply &&
            !(reply = text_of(e->op_reply, e->op_reply_len)))
            rc = MS_EINVAL;
        char *opid = rc == 0 ? ms_pg_dupstr(e->op_id) : NULL;
        char *cl = rc == 0 ? ms_pg_dupstr(j->cluster) : NULL;
        char *ty = rc == 0 ? ms_pg_dupstr(e->type) : NULL;
        if (rc == 0 && (!opid || !cl || !ty))
            rc = MS_ENOMEM;
        if (rc < 0) {
            free(id);
            free(reply);
            free(opid);
            free(cl);
            free(ty);
            op_free(o);
            return rc;
        }
        o->sql[n] = SQL_OP_INSERT;
        o->np[n] = 5;
        o->params[n][0] = cl;
        o->params[n][1] = ty;
        o->params[n][2] = id;
        o->params[n][3] = opid;
        o->params[n][4] = reply;
        o->nst = n + 1;
    }
    o->has_op = e->op_id != NULL;
    if (j->tail)
        j->tail->next = o;
    else
        j->head = o;
    j->tail = o;
    if (j->queued++ == 0 && j->inflight < j->max_groups)
        uv_timer_start(&j->flush, on_flush, 0, 0);
    return 0;
}

/* A PostgreSQL text[] literal of the n strings: each quoted, with \ and "
 * escaped. Caller frees. */
static char *array_literal(int n, const char *const *s, const size_t *lens)
{
    size_t cap = 3;
    for (int i = 0; i < n; i++) {
        if (memchr(s[i], 0, lens[i]))
            return NULL;
        cap += 3 + 2 * lens[i];
    }
    char *out = malloc(cap), *w = out;
    if (!out)
        return NULL;
    *w++ = '{';
    for (int i = 0; i < n; i++) {
        if (i)
            *w++ = ',';
        *w++ = '"';
        for (size_t k = 0; k < lens[i]; k++) {
            if (s[i][k] == '"' || s[i][k] == '\\')
                *w++ = '\\';
            *w++ = s[i][k];
        }
        *w++ = '"';
    }
    *w++ = '}';
    *w = 0;
    return out;
}


int ms_journal_append(struct ms_journal *j, const struct ms_journal_entity *e,
                      int64_t first_seq, int n, const char *const *events,
                      const size_t *lens, const char *snapshot,
                      size_t snapshot_len, int delete_covered,
                      ms_journal_write_cb cb, void *data)
{
    if (!cb || n < 1 || first_seq < 1 || !events || !lens)
        return MS_EINVAL;
    if (n > MS_JOURNAL_MAX_EVENTS)
        return MS_E2BIG;
    char *id = NULL, *arr = NULL, *snap = NULL;
    int rc = id_text(e, &id);
    if (rc < 0)
        return rc;
    rc = MS_EINVAL;
    if (!(arr = array_literal(n, events, lens)))
        goto out;
    if (snapshot && !(snap = text_of(snapshot, snapshot_len)))
        goto out;
    char first[24], last[24], epoch[24];
    snprintf(first, sizeof first, "%" PRId64, first_seq);
    snprintf(last, sizeof last, "%" PRId64, first_seq + n - 1);
    snprintf(epoch, sizeof epoch, "%" PRIu64, e->epoch);
    const char *pa[3] = {id, first, arr};
    const char *ps[6] = {j->cluster, e->type, id, last, epoch, snap};
    const char *pd[4] = {j->cluster, e->type, id, last};
    const char *sql[3] = {SQL_APPEND, SQL_SNAPSHOT, SQL_DELETE_COVERED};
    const int np[3] = {3, 6, 4};
    const char *const *params[3] = {pa, ps, pd};
    int nst = snap ? (delete_covered ? 3 : 2) : 1;
    struct op *o = op_new(j, W_APPEND);
    rc = MS_ENOMEM;
    if (!o)
        goto out;
    o->nevents = n;
    o->snapshot = snap != NULL;
    o->wcb = cb;
    o->data = data;
    rc = write_tx(j, e, nst, sql, np, params, o);
out:
    free(id);
    free(arr);
    free(snap);
    return rc;
}

int ms_journal_save_state(struct ms_journal *j,
                          const struct ms_journal_entity *e,
                          int64_t expected, const char *state, size_t len,
                          ms_journal_write_cb cb, void *data)
{
    if (!cb || expected < 0)
        return MS_EINVAL;
    char *id = NULL, *st = NULL;
    int rc = id_text(e, &id);
    if (rc < 0)
        return rc;
    rc = MS_EINVAL;
    if (!(st = text_of(state, len)))
        goto out;
    char exp[24];
    snprintf(exp, sizeof exp, "%" PRId64, expected);
    const char *p[3] = {id, st, exp};
    const char *sql[1] = {expected ? SQL_STATE_UPDATE : SQL_STATE_INSERT};
    const int np[1] = {expected ? 3 : 2};
    const char *const *params[1] = {p};
    struct op *o = op_new(j, W_STATE_SAVE);
    rc = MS_ENOMEM;
    if (!o)
        goto out;
    o->wcb = cb;
    o->data = data;
    rc = write_tx(j, e, 1, sql, np, params, o);
out:
    free(id);
    free(st);
    return rc;
}

int ms_journal_delete_state(struct ms_journal *j,
                            const struct ms_journal_entity *e,
                            int64_t expected, ms_journal_write_cb cb,
                            void *data)
{
    if (!cb || expected < 1)
        return MS_EINVAL;
    char *id = NULL;
    int rc = id_text(e, &id);
    if (rc < 0)
        return rc;
    char exp[24];
    snprintf(exp, sizeof exp, "%" PRId64, expected);
    const char *p[2] = {id, exp};
    const char *sql[1] = {SQL_STATE_DELETE};
    const int np[1] = {2};
    const char *const *params[1] = {p};
    struct op *o = op_new(j, W_STATE_DELETE);
    rc = MS_ENOMEM;
    if (o) {
        o->wcb = cb;
        o->data = data;
        rc = write_tx(j, e, 1, sql, np, params, o);
    }
    free(id);
    return rc;
}

/* ---- loads ----------------------------------------------------------- */

static int64_t to_i64(const char *s)
{
    return s ? strtoll(s, NULL, 10) : 0;
}

static void load_fail(struct op *o, int err, const char *message)
{
    o->j->st.db_errors++;
    o->lcb(err, message, NULL, o->data);
}

static void on_loaded_state(const struct ms_pg_result *r, struct op *o)
{
    struct ms_journal_loaded l;
    memset(&l, 0, sizeof l);
    if (ms_pg_result_rows(r) > 0) {
        l.revision = to_i64(ms_pg_result_value(r, 0, 0));
        l.state = ms_pg_result_value(r, 0, 1);
        l.state_len = l.state ? strlen(l.state) : 0;
        if (l.revision < 1 || !l.state) {
            load_fail(o, MS_EINVAL, "the saved state row is malformed");
            return;
        }
    }
    o->j->st.loads++;
    o->lcb(0, "", &l, o->data);
}

static void on_loaded_events(const struct ms_pg_result *r, struct op *o)
{
    struct ms_journal_loaded l;
    memset(&l, 0, sizeof l);
    int rows = ms_pg_result_rows(r), first = 0;
    if (rows > 0 && to_i64(ms_pg_result_value(r, 0, 0)) == 0) {
        l.has_snapshot = 1;
        l.snapshot_seq = to_i64(ms_pg_result_value(r, 0, 1));
        l.snapshot = ms_pg_result_value(r, 0, 2);
        l.snapshot_len = l.snapshot ? strlen(l.snapshot) : 0;
        first = 1;
    }
    int n = rows - first;
    if (n > MS_JOURNAL_MAX_RECOVERY) {
        char m[MS_JOURNAL_MESSAGE_MAX];
        snprintf(m, sizeof m, "more than %d events after the latest "
                 "snapshot: recovery refused (set snapshot_every for the "
                 "type)", MS_JOURNAL_MAX_RECOVERY);
        load_fail(o, MS_E2BIG, m);
        return;
    }
    int64_t *seq = calloc((size_t)(n ? n : 1), sizeof *seq);
    const char **ev = calloc((size_t)(n ? n : 1), sizeof *ev);
    size_t *lens = calloc((size_t)(n ? n : 1), sizeof *lens);
    if (!seq || !ev || !lens) {
        load_fail(o, MS_ENOMEM, "out of memory");
        goto out;
    }
    int64_t prev = l.has_snapshot ? l.snapshot_seq : 0;
    for (int i = 0; i < n; i++) {
        seq[i] = to_i64(ms_pg_result_value(r, first + i, 1));
        ev[i] = ms_pg_result_value(r, first + i, 2);
        lens[i] = ev[i] ? strlen(ev[i]) : 0;
        if (seq[i] != prev + 1 || !ev[i]) {
            char m[MS_JOURNAL_MESSAGE_MAX];
            snprintf(m, sizeof m, "the journal has a gap: sequence %"
                     PRId64 " follows %" PRId64, seq[i], prev);
            o->j->st.conflicts++;
            o->lcb(MS_ECONFLICT, m, NULL, o->data);
            goto out;
        }
        prev = seq[i];
    }
    l.nevents = n;
    l.seq = seq;
    l.events = ev;
    l.lens = lens;
    l.last_seq = prev;
    o->j->st.loads++;
    o->lcb(0, "", &l, o->data);
out:
    free(seq);
    free(ev);
    free(lens);
}

static void on_loaded(const struct ms_pg_result *r, void *data)
{
    struct op *o = data;
    if (ms_pg_result_error(r)) {
        char m[MS_JOURNAL_MESSAGE_MAX];
        snprintf(m, sizeof m, "%s", ms_pg_result_message(r));
        for (char *p = m; *p; p++)
            if (*p == '\n' || *p == '\r' || *p == '\t')
                *p = ' ';
        load_fail(o, ms_pg_result_error(r), m);
    } else if (o->state) {
        on_loaded_state(r, o);
    } else {
        on_loaded_events(r, o);
    }
    free(o);
}

static int load(struct ms_journal *j, const struct ms_journal_entity *e,
                int state, ms_journal_load_cb cb, void *data)
{
    if (!cb)
        return MS_EINVAL;
    char *id = NULL;
    int rc = id_text(e, &id);
    if (rc < 0)
        return rc;
    char limit[24];
    snprintf(limit, sizeof limit, "%d", MS_JOURNAL_MAX_RECOVERY + 1);
    const char *p[4] = {j->cluster, e->type, id, limit};
    struct op *o = op_new(j, -1);
    rc = MS_ENOMEM;
    if (o) {
        o->state = state;
        o->lcb = cb;
        o->data = data;
        rc = ms_pg_query(j->pg, state ? SQL_LOAD_STATE : SQL_LOAD_EVENTS,
                         state ? 3 : 4, p, on_loaded, o);
        if (rc < 0)
            free(o);
    }
    free(id);
    return rc;
}

int ms_journal_load_events(struct ms_journal *j,
                           const struct ms_journal_entity *e,
                           ms_journal_load_cb cb, void *data)
{
    return load(j, e, 0, cb, data);
}

int ms_journal_load_state(struct ms_journal *j,
                          const struct ms_journal_entity *e,
                          ms_journal_load_cb cb, void *data)
{
    return load(j, e, 1, cb, data);
}

/* ---- operation ids ----------------------------------------------------- */

int ms_journal_record_op(struct ms_journal *j,
                         const struct ms_journal_entity *e,
                         ms_journal_write_cb cb, void *data)
{
    if (!cb || !e || !e->op_id)
        return MS_EINVAL;
    char *id = NULL, *reply = NULL;
    int rc = id_text(e, &id);
    if (rc < 0)
        return rc;
    if (e->op_reply && !(reply = text_of(e->op_reply, e->op_reply_len))) {
        free(id);
        return MS_EINVAL;
    }
    const char *p[3] = {id, e->op_id, reply};
    const char *sql[1] = {SQL_OP_ONLY};
    const int np[1] = {3};
    const char *const *params[1] = {p};
    struct op *o = op_new(j, W_OP);
    rc = MS_ENOMEM;
    if (o) {
        o->wcb = cb;
        o->data = data;
        rc = write_tx(j, e, 1, sql, np, params, o);
        if (rc == 0)
            o->has_op = 1;
    }
    free(id);
    free(reply);
    return rc;
}

struct find {
    struct ms_journal *j;
    ms_journal_op_cb cb;
    void *data;
};

static void on_found(const struct ms_pg_result *r, void *data)
{
    struct find f = *(struct find *)data;
    free(data);
    int err = ms_pg_result_error(r);
    if (err) {
        f.j->st.db_errors++;
        f.cb(err, ms_pg_result_message(r), 0, NULL, 0, f.data);
        return;
    }
    if (ms_pg_result_rows(r) < 1) {
        f.cb(0, "", 0, NULL, 0, f.data);
        return;
    }
    f.j->st.ops_found++;
    const char *reply = ms_pg_result_value(r, 0, 0);
    f.cb(0, "", 1, reply, reply ? strlen(reply) : 0, f.data);
}

int ms_journal_find_op(struct ms_journal *j, const struct ms_journal_entity *e,
                       const char *op_id, ms_journal_op_cb cb, void *data)
{
    if (!cb || !op_id || !op_id[0] || strlen(op_id) > MS_JOURNAL_OP_MAX)
        return MS_EINVAL;
    char *id = NULL;
    int rc = id_text(e, &id);
    if (rc < 0)
        return rc;
    struct find *f = malloc(sizeof *f);
    if (!f) {
        free(id);
        return MS_ENOMEM;
    }
    f->j = j;
    f->cb = cb;
    f->data = data;
    const char *p[4] = {j->cluster, e->type, id, op_id};
    rc = ms_pg_query(j->pg, SQL_OP_FIND, 4, p, on_found, f);
    if (rc < 0)
        free(f);
    free(id);
    return rc;
}

static void on_expired(const struct ms_pg_result *r, void *data)
{
    struct ms_journal *j = data;
    if (ms_pg_result_error(r))
        j->st.db_errors++;
}

int ms_journal_expire_ops(struct ms_journal *j, uint64_t retention_ms)
{
    char ms[24];
    snprintf(ms, sizeof ms, "%" PRIu64, retention_ms);
    const char *p[2] = {j->cluster, ms};
    return ms_pg_query(j->pg, SQL_OP_EXPIRE, 2, p, on_expired, j);
}
