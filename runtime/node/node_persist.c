/*
 * node_persist.c -- the node's side of persistent entities; see
 * node_persist.h.
 */
#include "node_persist.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/region.h"

struct ms_node_persist {
    struct ms_dispatch *d;      /* NULL once detached */
    struct ms_router *router;
    struct ms_journal *j;
    const struct ms_config *cfg;
    void (*kick)(void *);
    void *kick_data;
    uint64_t no_lease;          /* writes refused locally: no lease */
    uint64_t expire_at_ms;      /* next deletion of old operation ids */
};

/* One request under way: the wait it ends. */
struct req {
    struct ms_node_persist *p;
    int64_t corr;
};

struct ms_node_persist *ms_node_persist_new(struct ms_dispatch *d,
                                            struct ms_router *router,
                                            struct ms_journal *j,
                                            const struct ms_config *cfg,
                                            void (*kick)(void *),
                                            void *kick_data)
{
    struct ms_node_persist *p = calloc(1, sizeof *p);
    if (p) {
        p->d = d;
        p->router = router;
        p->j = j;
        p->cfg = cfg;
        p->kick = kick;
        p->kick_data = kick_data;
    }
    return p;
}

void ms_node_persist_detach(struct ms_node_persist *p)
{
    if (p) {
        p->d = NULL;
        p->router = NULL;
    }
}

void ms_node_persist_free(struct ms_node_persist *p)
{
    free(p);
}

static void end_wait(struct ms_node_persist *p, int64_t corr, int err,
                     const char *payload, size_t len)
{
    if (!p->d)
        return;
    ms_dispatch_ask_complete(p->d, corr, err, payload, len);
    if (p->kick)
        p->kick(p->kick_data);
}

static void end_error(struct ms_node_persist *p, int64_t corr, int err,
                      const char *message)
{
    char buf[MS_JOURNAL_MESSAGE_MAX + 128];
    size_t n = ms_error_json(buf, sizeof buf, err,
                             message && message[0] ? message
                                                   : ms_strerror(err));
    end_wait(p, corr, err, buf, n);
}

static struct req *req_new(struct ms_node_persist *p, int64_t corr)
{
    struct req *r = malloc(sizeof *r);
    if (r) {
        r->p = p;
        r->corr = corr;
    }
    return r;
}

/* ---- loads -------------------------------------------------------------- */

/* Appends "<len>\n<bytes>" at *o (room checked by the caller). */
static void put_chunk(char *buf, size_t *o, const char *s, size_t len)
{
    *o += (size_t)sprintf(buf + *o, "%zu\n", len);
    memcpy(buf + *o, s, len);
    *o += len;
}

static void on_loaded(int err, const char *message,
                      const struct ms_journal_loaded *l, void *data)
{
    struct req *r = data;
    struct ms_node_persist *p = r->p;
    int64_t corr = r->corr;
    free(r);
    if (err) {
        end_error(p, corr, err, message);
        return;
    }
    size_t need = 96;
    if (l->has_snapshot)
        need += 24 + l->snapshot_len;
    if (l->revision > 0)
        need += 24 + l->state_len;
    for (int i = 0; i < l->nevents; i++)
        need += 24 + l->lens[i];
    char *buf = malloc(need);
    if (!buf) {
        end_error(p, corr, MS_ENOMEM, "out of memory");
        return;
    }
    size_t o = (size_t)sprintf(buf, "%" PRId64 " %" PRId64 " %d %d\n",
                               l->last_seq, l->revision, l->has_snapshot,
                               l->nevents);
    if (l->has_snapshot)
        put_chunk(buf, &o, l->snapshot, l->snapshot_len);
    if (l->revision > 0)
        put_chunk(buf, &o, l->state, l->state_len);
    for (int i = 0; i < l->nevents; i++)
        put_chunk(buf, &o, l->events[i], l->lens[i]);
    end_wait(p, corr, 0, buf, o);
    free(buf);
}

static void entity_of(struct ms_node_persist *p, int type, uint32_t shard,
                      const char *id, size_t idlen,
                      struct ms_journal_entity *e)
{
    memset(e, 0, sizeof *e);
    e->type = p->cfg->types[type].name;
    e->id = id;
    e->idlen = idlen;
    e->shard = shard;
    e->epoch = p->router ? ms_region_lease_epoch(
                               ms_router_region(p->router), type, shard)
                         : 0;
}

static int h_load(void *data, int type, uint32_t shard, const char *id,
                  size_t idlen, int64_t corr)
{
    struct ms_node_persist *p = data;
    if (type < 0 || type >= p->cfg->ntypes)
        return MS_EINVAL;
    struct ms_journal_entity e;
    entity_of(p, type, shard, id, idlen, &e);
    struct req *r = req_new(p, corr);
    if (!r)
        return MS_ENOMEM;
    int rc = p->cfg->types[type].persistence == MS_PERSIST_STATE
                 ? ms_journal_load_state(p->j, &e, on_loaded, r)
                 : ms_journal_load_events(p->j, &e, on_loaded, r);
    if (rc < 0)
        free(r);
    return rc;
}

/* ---- writes ------------------------------------------------------------- */

static void on_written(int err, const char *message, void *data)
{
    struct req *r = data;
    struct ms_node_persist *p = r->p;
    int64_t corr = r->corr;
    free(r);
    if (err)
        end_error(p, corr, err, message);
    else
        end_wait(p, corr, 0, "{}", 2);
}

/* No usable lease here: refused at once, like the database would. */
static int no_lease(struct ms_node_persist *p, struct req *r)
{
    p->no_lease++;
    on_written(MS_ESTALE, "this node holds no usable lease for the "
               "entity's shard: nothing was written", r);
    return 0;
}

/* What every write does first: the entity under the lease held now
 * (with the operation `op`, may be NULL) in *e, its request in *r.
 * Returns 1 (go on: write, then free *r if that fails), 0 (no usable
 * lease: answered stale_owner already) or a negative code. */
static int begin_write(void *data, int type, uint32_t shard, const char *id,
                       size_t idlen, const struct ms_bridge_op *op,
                       int64_t corr, struct ms_journal_entity *e,
                       struct req **r)
{
    struct ms_node_persist *p = data;
    if (type < 0 || type >= p->cfg->ntypes)
        return MS_EINVAL;
    entity_of(p, type, shard, id, idlen, e);
    if (op) {
        e->op_id = op->id;
        e->op_reply = op->reply;
        e->op_reply_len = op->reply_len;
    }
    if (!(*r = req_new(p, corr)))
        return MS_ENOMEM;
    if (e->epoch == 0)
        return no_lease(p, *r);
    return 1;
}

static int h_append(void *data, int type, uint32_t shard, const char *id,
                    size_t idlen, int64_t first_seq, int n,
                    const char *const *events, const size_t *lens,
                    const char *snapshot, size_t snapshot_len,
                    int delete_covered, const struct ms_bridge_op *op,
                    int64_t corr)
{
    struct ms_node_persist *p = data;
    struct ms_journal_entity e;
    struct req *r;
    int rc = begin_write(data, type, shard, id, idlen, op, corr, &e, &r);
    if (rc <= 0)
        return rc;
    rc = ms_journal_append(p->j, &e, first_seq, n, events, lens, snapshot,
                           snapshot_len, delete_covered, on_written, r);
    if (rc < 0)
        free(r);
    return rc;
}

static int h_save(void *data, int type, uint32_t shard, const char *id,
                  size_t idlen, int64_t expected, const char *state,
                  size_t len, const struct ms_bridge_op *op, int64_t corr)
{
    struct ms_node_persist *p = data;
    struct ms_journal_entity e;
    struct req *r;
    int rc = begin_write(data, type, shard, id, idlen, op, corr, &e, &r);
    if (rc <= 0)
        return rc;
    rc = state ? ms_journal_save_state(p->j, &e, expected, state, len,
                                       on_written, r)
               : ms_journal_delete_state(p->j, &e, expected, on_written, r);
    if (rc < 0)
        free(r);
    return rc;
}

static int h_record(void *data, int type, uint32_t shard, const char *id,
                    size_t idlen, const struct ms_bridge_op *op,
                    int64_t corr)
{
    struct ms_node_persist *p = data;
    struct ms_journal_entity e;
    struct req *r;
    int rc = begin_write(data, type, shard, id, idlen, op, corr, &e, &r);
    if (rc <= 0)
        return rc;
    rc = ms_journal_record_op(p->j, &e, on_written, r);
    if (rc < 0)
        free(r);
    return rc;
}

static void on_found(int err, const char *message, int found,
                     const char *reply, size_t len, void *data)
{
    struct req *r = data;
    struct ms_node_persist *p = r->p;
    int64_t corr = r->corr;
    free(r);
    if (err) {
        end_error(p, corr, err, message);
        return;
    }
    if (!found || !reply) {
        end_wait(p, corr, 0, found ? "1" : "0", 1);
        return;
    }
    char *buf = malloc(len + 1);
    if (!buf) {
        end_error(p, corr, MS_ENOMEM, "out of memory");
        return;
    }
    buf[0] = '2';
    memcpy(buf + 1, reply, len);
    end_wait(p, corr, 0, buf, len + 1);
    free(buf);
}

static int h_find(void *data, int type, uint32_t shard, const char *id,
                  size_t idlen, const char *op_id, int64_t corr)
{
    struct ms_node_persist *p = data;
    if (type < 0 || type >= p->cfg->ntypes)
        return MS_EINVAL;
    struct ms_journal_entity e;
    entity_of(p, type, shard, id, idlen, &e);
    struct req *r = req_new(p, corr);
    if (!r)
        return MS_ENOMEM;
    int rc = ms_journal_find_op(p->j, &e, op_id, on_found, r);
    if (rc < 0)
        free(r);
    return rc;
}

void ms_node_persist_hooks(struct ms_node_persist *p,
                           struct ms_bridge_persist *out)
{
    out->data = p;
    out->load = h_load;
    out->append = h_append;
    out->save = h_save;
    out->record = h_record;
    out->find = h_find;
}

void ms_node_persist_tick(struct ms_node_persist *p, uint64_t now_ms)
{
    if (!p || !p->d || now_ms < p->expire_at_ms)
        return;
    uint64_t keep = p->cfg->operation_retention_ms;
    uint64_t every = keep / 2;
    if (every < 500)
        every = 500;
    if (every > 60000)
        every = 60000;
    if (p->expire_at_ms)
        (void)ms_journal_expire_ops(p->j, keep); /* retried next time */
    p->expire_at_ms = now_ms + every;
}

size_t ms_node_persist_stats_json(const struct ms_node_persist *p,
                                  char *buf, size_t len)
{
    if (!p) {
        int w = snprintf(buf, len, "null");
        return w < 0 ? 0 : (size_t)w;
    }
    struct ms_journal_stats s;
    ms_journal_stats(p->j, &s);
    int w = snprintf(buf, len,
                     "{\"commits\":%" PRIu64 ",\"writes\":%" PRIu64
                     ",\"events_written\":%" PRIu64
                     ",\"snapshots\":%" PRIu64 ",\"states_written\":%" PRIu64
                     ",\"stale_refused\":%" PRIu64 ",\"conflicts\":%" PRIu64
                     ",\"db_errors\":%" PRIu64 ",\"recoveries\":%" PRIu64
                     ",\"commit_latency_count\":%" PRIu64
                     ",\"commit_latency_sum_us\":%" PRIu64
                     ",\"commit_latency_p50_us\":%" PRIu64
                     ",\"commit_latency_p99_us\":%" PRIu64
                     ",\"ops_recorded\":%" PRIu64 ",\"ops_found\":%" PRIu64
                     "}",
                     s.commits, s.writes, s.events, s.snapshots, s.states,
                     s.stale_refused + p->no_lease, s.conflicts,
                     s.db_errors, s.loads, s.latency_count,
                     s.latency_sum_us, s.latency_p50_us, s.latency_p99_us,
                     s.ops_recorded, s.ops_found);
    return w < 0 ? 0 : (size_t)w;
}
