/*
 * node_remember.c -- remember-entities on a node (node_remember.h).
 */
#include "node_remember.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/errors.h"
#include "../core/idset.h"
#include "../core/log.h"
#include "../core/region.h"
#include "../core/remember.h"
#include "../io/remember_file.h"
#include "../io/remember_sql.h"

/* a stopped shard's records are waited for at most this long (the
 * region's hold gives up before), then dropped and counted */
#define DRAIN_MAX_MS (MS_REGION_RELEASE_WAIT_MS + 2000)
/* eager activations out at once; past it the machine's tick waits */
#define ACTIVATE_OUT_MAX 4096
/* unowned shards of remembered types are asked for this often (small
 * batches often rather than large ones rarely: a batch holds the
 * coordinator's loop, see MS_REGION_ALLOC_UNOWNED_WORK) */
#define ALLOC_EVERY_MS 25
/* open logs of one file store */
#define FILE_MAX_OPEN 256
/* shards of a type the tick looks at (a slice; the next tick goes on):
 * a type of 65,536 shards is gone through every 16 ticks (160 ms) */
#define SCAN_PER_TICK 4096

/* ---- state ---------------------------------------------------------------- */

enum { SH_DOWN = 0, SH_LOADING, SH_STARTED };

struct nshard {
    uint8_t state;        /* SH_* */
    uint8_t draining;     /* stopped here, its records still being written */
    uint8_t load_failed;  /* its listing failed: retried at retry_at */
    uint8_t refused;      /* the dispatcher refuses its messages */
    uint32_t load_gen;    /* names the listing out */
    uint64_t retry_at;
    uint64_t drain_since;
};

struct ntype {
    int store;                    /* MS_REMEMBER_*; NONE: not remembered */
    const struct ms_type_config *tc;
    struct ms_remember_file *file;
    struct ms_idset *mem;         /* [shard_count]: the memory store */
    struct nshard *sh;            /* [shard_count] */
    uint32_t scan_next;           /* where the tick's slice starts */
};

/* A record of a shard whose listing is not in yet. */
struct early {
    struct early *next;
    int type;
    uint32_t shard;
    int started;
    int reason;
    uint32_t len;
    char id[];
};

struct ms_node_remember {
    uv_loop_t *loop;
    struct ms_dispatch *d;
    struct ms_router *router;
    struct ms_region *rg;
    const struct ms_config *cfg;
    struct ms_remember_sql *sql;
    void (*kick)(void *);
    void *kick_data;
    struct ms_remember *m;
    struct ntype *types;
    int ntypes;
    uv_timer_t tick;
    uv_idle_t drainer;
    int drain_on;
    int detached;
    int closing;          /* the node stops: no eager start any more */
    int open_handles;
    void (*closed)(void *);
    void *closed_data;
    struct early *early_head, *early_tail;
    uint32_t nearly;
    uint64_t activating;  /* eager activations out */
    uint64_t alloc_asked_ms;
    /* counters beyond the machine's */
    uint64_t loads, load_errors, early_drops, eager_failed, unstorable;
};

/* The text of a code: ours, or a negative errno of a file store call. */
static const char *errtext(int rc)
{
    return rc < 0 && rc > -4096 ? strerror(-rc) : ms_strerror(rc);
}

static uint64_t now_of(const struct ms_node_remember *nr)
{
    return uv_now(nr->loop);
}

static void schedule_drain(struct ms_node_remember *nr);
static void drain(struct ms_node_remember *nr);

/* ---- refusing a failed shard (fail_closed) -------------------------------- */

static void sync_refuse(struct ms_node_remember *nr, int type, uint32_t shard)
{
    struct ntype *t = &nr->types[type];
    struct nshard *s = &t->sh[shard];
    int want = !nr->detached && t->tc->remember_fail_closed &&
               (s->load_failed || ms_remember_shard_failed(nr->m, type, shard));
    if (want == s->refused)
        return;
    s->refused = (uint8_t)want;
    ms_dispatch_shard_refuse(nr->d, type, shard, want ? MS_EREMEMBER : 0);
    if (want)
        ms_log(MS_LOG_ERROR, NULL, "remember store of %s shard %u failed: "
               "its messages are refused (remember_store_failed) until an "
               "operator clears it (moonshard remember clear %s %u) or the "
               "shard moves", t->tc->name, shard, t->tc->name, shard);
}

/* ---- early records ---------------------------------------------------------- */

static void early_push(struct ms_node_remember *nr, int type, uint32_t shard,
                       const char *id, size_t idlen, int started, int reason)
{
    struct early *e = nr->nearly < MS_NODE_REMEMBER_EARLY_MAX
                          ? malloc(sizeof *e + idlen)
                          : NULL;
    if (!e) {
        uint64_t n = ++nr->early_drops;
        if (ms_log_due(n))
            ms_log(MS_LOG_WARN, NULL, "remember: a record of %s shard %u "
                   "was dropped while its ids are being listed (%llu so "
                   "far, counted in early_drops)",
                   nr->types[type].tc->name, shard, (unsigned long long)n);
        return;
    }
    e->next = NULL;
    e->type = type;
    e->shard = shard;
    e->started = started;
    e->reason = reason;
    e->len = (uint32_t)idlen;
    memcpy(e->id, id, idlen);
    if (nr->early_tail)
        nr->early_tail->next = e;
    else
        nr->early_head = e;
    nr->early_tail = e;
    nr->nearly++;
}

/* Replays the early records of a shard that started, or drops them
 * (`drop`: it went down). */
static void early_take(struct ms_node_remember *nr, int type, uint32_t shard,
                       int drop)
{
    struct early **pp = &nr->early_head, *last = NULL;
    while (*pp) {
        struct early *e = *pp;
        if (e->type != type || e->shard != shard) {
            last = e;
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        nr->nearly--;
        if (drop)
            nr->early_drops++;
        else if (e->started)
            ms_remember_started(nr->m, type, shard, e->id, e->len,
                                now_of(nr));
        else
            ms_remember_stopped(nr->m, type, shard, e->id, e->len, e->reason,
                                now_of(nr));
        free(e);
    }
    nr->early_tail = last;
}

/* ---- the dispatcher's observer ---------------------------------------------- */

static int reason_of(int dispatch_reason)
{
    switch (dispatch_reason) {
    case MS_STOP_EXPLICIT: return MS_REMEMBER_EXPLICIT;
    case MS_STOP_IDLE: /* the limit's is an idle passivation, earlier */
    case MS_STOP_LIMIT: return MS_REMEMBER_IDLE;
    case MS_STOP_FAILURE: return MS_REMEMBER_FAILURE;
    case MS_STOP_NODE: return MS_REMEMBER_NODE_STOP;
    default: return MS_REMEMBER_HANDOFF;
    }
}

static void on_entity(void *data, int type, uint32_t shard, const char *id,
                      size_t idlen, int started, int dreason)
{
    struct ms_node_remember *nr = data;
    if (nr->detached || type < 0 || type >= nr->ntypes ||
        !nr->types[type].store)
        return;
    int reason = reason_of(dreason);
    if (nr->types[type].store == MS_REMEMBER_POSTGRES &&
        !ms_remember_sql_id_ok(id, idlen)) {
        /* PostgreSQL's text cannot hold it: a write with it would be
         * refused, and retried, for ever */
        uint64_t n = ++nr->unstorable;
        if (ms_log_due(n))
            ms_log(MS_LOG_WARN, NULL, "remember: an id of %s that is not "
                   "UTF-8 cannot be kept in PostgreSQL; it is not "
                   "remembered (%llu so far, counted in unstorable)",
                   nr->types[type].tc->name, (unsigned long long)n);
        return;
    }
    int rc = started ? ms_remember_started(nr->m, type, shard, id, idlen,
                                           now_of(nr))
                     : ms_remember_stopped(nr->m, type, shard, id, idlen,
                                           reason, now_of(nr));
    if (rc == MS_ENOOWNER && nr->types[type].sh[shard].state != SH_STARTED &&
        (started || reason == MS_REMEMBER_EXPLICIT ||
         (reason == MS_REMEMBER_IDLE &&
          !nr->types[type].tc->remember_keep_on_idle)))
        early_push(nr, type, shard, id, idlen, started, reason);
    if (rc > 0)
        schedule_drain(nr);
}

/* ---- listing a shard that starts -------------------------------------------- */

/* The listing of (type, shard) `gen` is in: start it in the machine, or
 * mark it failed (retried). ids borrowed. */
static void loaded(struct ms_node_remember *nr, int type, uint32_t shard,
                   uint32_t gen, int err, const char *message,
                   const char *const *ids, const size_t *lens, uint32_t n)
{
    struct ntype *t = &nr->types[type];
    struct nshard *s = &t->sh[shard];
    if (nr->detached || s->state != SH_LOADING || s->load_gen != gen)
        return; /* it went down meanwhile */
    uint64_t now = now_of(nr);
    if (!err)
        err = ms_remember_shard_started(nr->m, type, shard, ids, lens, n, now);
    if (err < 0) {
        nr->load_errors++;
        if (!s->load_failed)
            ms_log(MS_LOG_ERROR, NULL, "remember: cannot list the ids of %s "
                   "shard %u: %s%s%s; retried every %d ms (%s)", t->tc->name,
                   shard, errtext(err), message && *message ? ": " : "",
                   message ? message : "", MS_NODE_REMEMBER_LOAD_RETRY_MS,
                   t->tc->remember_fail_closed
                       ? "fail_closed: its messages are refused"
                       : "fail_open: its messages are delivered");
        s->load_failed = 1;
        s->retry_at = now + MS_NODE_REMEMBER_LOAD_RETRY_MS;
        sync_refuse(nr, type, shard);
        return;
    }
    if (s->load_failed)
        ms_log(MS_LOG_INFO, NULL, "remember: %s shard %u listed again",
               t->tc->name, shard);
    s->load_failed = 0;
    s->state = SH_STARTED;
    early_take(nr, type, shard, 0);
    sync_refuse(nr, type, shard);
    schedule_drain(nr);
}

/* Collects the ids a store lists into one buffer. */
struct idlist {
    char *bytes;
    size_t used, cap;
    size_t *offs, *lens;
    uint32_t n, capn;
    int err;
};

static int idlist_add(void *data, const char *id, size_t len)
{
    struct idlist *l = data;
    if (l->n == l->capn) {
        uint32_t c = l->capn ? l->capn * 2 : 64;
        size_t *o = realloc(l->offs, c * sizeof *o);
        if (o)
            l->offs = o;
        size_t *q = o ? realloc(l->lens, c * sizeof *q) : NULL;
        if (q)
            l->lens = q;
        if (!o || !q) {
            l->err = MS_ENOMEM;
            return 1;
        }
        l->capn = c;
    }
    if (l->used + len + 1 > l->cap) {
        size_t c = l->cap ? l->cap * 2 : 4096;
        while (c < l->used + len + 1)
            c *= 2;
        char *b = realloc(l->bytes, c);
        if (!b) {
            l->err = MS_ENOMEM;
            return 1;
        }
        l->bytes = b;
        l->cap = c;
    }
    memcpy(l->bytes + l->used, id, len);
    l->bytes[l->used + len] = 0;
    l->offs[l->n] = l->used;
    l->lens[l->n] = len;
    l->used += len + 1;
    l->n++;
    return 0;
}

static void idlist_done(struct ms_node_remember *nr, int type, uint32_t shard,
                        uint32_t gen, int err, struct idlist *l)
{
    const char **ids = l->n ? malloc(l->n * sizeof *ids) : NULL;
    if (l->n && !ids)
        err = MS_ENOMEM;
    for (uint32_t i = 0; ids && i < l->n; i++)
        ids[i] = l->bytes + l->offs[i];
    loaded(nr, type, shard, gen, err ? err : l->err, NULL, ids, l->lens,
           l->n);
    free(ids);
    free(l->bytes);
    free(l->offs);
    free(l->lens);
}

struct sql_load {
    struct ms_node_remember *nr;
    int type;
    uint32_t shard, gen;
};

static void on_sql_loaded(int err, const char *message,
                          const char *const *ids, const size_t *lens,
                          uint32_t n, void *data)
{
    struct sql_load *q = data;
    struct ms_node_remember *nr = q->nr;
    loaded(nr, q->type, q->shard, q->gen, err, message, ids, lens, n);
    free(q);
    if (!nr->detached)
        drain(nr);
}

static void start_load(struct ms_node_remember *nr, int type, uint32_t shard)
{
    struct ntype *t = &nr->types[type];
    struct nshard *s = &t->sh[shard];
    s->state = SH_LOADING;
    uint32_t gen = ++s->load_gen;
    nr->loads++;
    struct idlist l;
    memset(&l, 0, sizeof l);
    int rc = 0;
    switch (t->store) {
    case MS_REMEMBER_MEMORY: {
        const struct ms_idset *m = &t->mem[shard];
        const char *id;
        size_t len;
        for (size_t i = 0; i < m->cap && !l.err; i++)
            if (ms_idset_at(m, i, &id, &len))
                idlist_add(&l, id, len);
        idlist_done(nr, type, shard, gen, 0, &l);
        return;
    }
    case MS_REMEMBER_FILE:
        /* another node of this machine may have written it since */
        ms_remember_file_close_log(t->file, t->tc->name, shard);
        rc = ms_remember_file_list(t->file, t->tc->name, shard, idlist_add,
                                   &l);
        idlist_done(nr, type, shard, gen, rc, &l);
        return;
    default: {
        struct sql_load *q = malloc(sizeof *q);
        rc = q ? 0 : MS_ENOMEM;
        if (q) {
            *q = (struct sql_load){nr, type, shard, gen};
            rc = nr->sql ? ms_remember_sql_load(nr->sql, t->tc->name, shard,
                                                on_sql_loaded, q)
                         : MS_PG_ECONN;
            if (rc < 0)
                free(q);
        }
        if (rc < 0)
            loaded(nr, type, shard, gen, rc, "the database is not ready",
                   NULL, NULL, 0);
        return;
    }
    }
}

/* The shard stops serving here. */
static void shard_down(struct ms_node_remember *nr, int type, uint32_t shard)
{
    struct nshard *s = &nr->types[type].sh[shard];
    if (s->state == SH_STARTED) {
        ms_remember_shard_stopped(nr->m, type, shard, now_of(nr));
        s->draining = 1;
        s->drain_since = now_of(nr);
    }
    if (s->state != SH_DOWN)
        early_take(nr, type, shard, 1);
    s->state = SH_DOWN;
    s->load_gen++;
    s->load_failed = 0;
    sync_refuse(nr, type, shard);
    schedule_drain(nr);
}

/* A stopped shard's records are written (or given up): the machine
 * forgets it, and its file log is unlocked for the next owner. */
static void finish_drain(struct ms_node_remember *nr, int type,
                         uint32_t shard)
{
    struct ntype *t = &nr->types[type];
    int dropped = ms_remember_shard_released(nr->m, type, shard, now_of(nr));
    if (dropped > 0)
        ms_log(MS_LOG_WARN, NULL, "remember: %d records of %s shard %u were "
               "not written before it moved away (counted in abandoned)",
               dropped, t->tc->name, shard);
    t->sh[shard].draining = 0;
    if (t->file)
        ms_remember_file_close_log(t->file, t->tc->name, shard);
}

/* The region asks whether a shard its dispatcher stopped for a handoff
 * must wait (region.h): every entity of it has passivated now, so what
 * they recorded is queued; the shard stops here, and waits until that is
 * written. */
static int hold_stop(void *data, int type, uint32_t shard)
{
    struct ms_node_remember *nr = data;
    if (nr->detached || type < 0 || type >= nr->ntypes ||
        !nr->types[type].store)
        return 0;
    struct nshard *s = &nr->types[type].sh[shard];
    if (s->state != SH_DOWN)
        shard_down(nr, type, shard);
    if (s->draining && ms_remember_pending(nr->m, type, shard) == 0)
        finish_drain(nr, type, shard);
    return s->draining;
}

/* ---- carrying out the machine's actions ------------------------------------- */

struct sql_write {
    struct ms_node_remember *nr;
    int type;
    uint32_t shard;
    uint64_t req;
};

static void written(struct ms_node_remember *nr, int type, uint32_t shard,
                    uint64_t req, int err, const char *message)
{
    if (nr->detached)
        return;
    if (err < 0) {
        uint64_t n = ms_remember_stats(nr->m)->errors + 1;
        if (ms_log_due(n))
            ms_log(MS_LOG_WARN, NULL, "remember: a write to the store of %s "
                   "shard %u failed: %s%s%s (%llu so far; retried, %s)",
                   nr->types[type].tc->name, shard, errtext(err),
                   message && *message ? ": " : "", message ? message : "",
                   (unsigned long long)n,
                   nr->types[type].tc->remember_fail_closed ? "fail_closed"
                                                            : "fail_open");
    }
    ms_remember_on_written(nr->m, type, shard, req, err, now_of(nr));
    sync_refuse(nr, type, shard);
}

static void on_sql_written(int err, const char *message, void *data)
{
    struct sql_write *w = data;
    written(w->nr, w->type, w->shard, w->req, err, message);
    if (!w->nr->detached)
        drain(w->nr);
    free(w);
}

static void do_write(struct ms_node_remember *nr,
                     const struct ms_remember_action *a)
{
    struct ntype *t = &nr->types[a->type];
    int rc = 0;
    if (t->store == MS_REMEMBER_MEMORY) {
        struct ms_idset *m = &t->mem[a->shard];
        if (a->replace)
            ms_idset_free(m);
        for (uint32_t i = 0; i < a->nrecords; i++) {
            const struct ms_remember_record *x = &a->records[i];
            rc = x->op == MS_REMEMBER_START
                     ? ms_idset_add(m, x->id, x->id_len)
                     : ms_idset_del(m, x->id, x->id_len);
            if (rc < 0)
                break;
            rc = 0;
        }
        written(nr, a->type, a->shard, a->req, rc, NULL);
        return;
    }
    if (t->store == MS_REMEMBER_FILE) {
        /* the records in order; for a resync (the shard's whole set),
         * the starts first and then stops of what the log holds beyond
         * the set, so a crash in between leaves extra ids, never loses
         * one of the set */
        struct ms_remember_rec recs[64];
        for (uint32_t i = 0; !rc && i < a->nrecords; i += 64) {
            uint32_t k = a->nrecords - i < 64 ? a->nrecords - i : 64;
            for (uint32_t j = 0; j < k; j++)
                recs[j] = (struct ms_remember_rec){
                    a->records[i + j].op, a->records[i + j].id,
                    a->records[i + j].id_len};
            rc = ms_remember_file_append_batch(t->file, t->tc->name, a->shard,
                                               recs, k);
        }
        if (!rc && a->replace) {
            struct ms_idset keep;
            memset(&keep, 0, sizeof keep);
            for (uint32_t i = 0; !rc && i < a->nrecords; i++)
                rc = ms_idset_add(&keep, a->records[i].id,
                                  a->records[i].id_len) < 0 ? MS_ENOMEM : 0;
            struct idlist l;
            memset(&l, 0, sizeof l);
            if (!rc)
                rc = ms_remember_file_list(t->file, t->tc->name, a->shard,
                                           idlist_add, &l);
            rc = rc ? rc : l.err;
            uint32_t k = 0;
            for (uint32_t i = 0; !rc && i < l.n; i++) {
                const char *id = l.bytes + l.offs[i];
                if (ms_idset_has(&keep, id, l.lens[i]))
                    continue;
                recs[k++] = (struct ms_remember_rec){MS_REMEMBER_STOP, id,
                                                     l.lens[i]};
                if (k == 64 || i + 1 == l.n) {
                    rc = ms_remember_file_append_batch(t->file, t->tc->name,
                                                       a->shard, recs, k);
                    k = 0;
                }
            }
            if (!rc && k)
                rc = ms_remember_file_append_batch(t->file, t->tc->name,
                                                   a->shard, recs, k);
            ms_idset_free(&keep);
            free(l.bytes);
            free(l.offs);
            free(l.lens);
        }
        written(nr, a->type, a->shard, a->req, rc, NULL);
        return;
    }
    struct sql_write *w = malloc(sizeof *w);
    rc = w ? 0 : MS_ENOMEM;
    if (w) {
        *w = (struct sql_write){nr, a->type, a->shard, a->req};
        uint64_t epoch = ms_region_lease_epoch(nr->rg, a->type, a->shard);
        rc = nr->sql ? ms_remember_sql_write(nr->sql, t->tc->name, a->shard,
                                             epoch, a->replace, a->records,
                                             a->nrecords, on_sql_written, w)
                     : MS_PG_ECONN;
        if (rc < 0)
            free(w);
    }
    if (rc < 0)
        written(nr, a->type, a->shard, a->req, rc, NULL);
}

static void on_activated(void *data, int err, const char *payload, size_t len)
{
    (void)payload;
    (void)len;
    struct ms_node_remember *nr = data;
    nr->activating--;
    if (err && !nr->detached) {
        uint64_t n = ++nr->eager_failed;
        if (ms_log_due(n))
            ms_log(MS_LOG_WARN, NULL, "remember: an eager start failed: %s "
                   "(%llu so far, counted in eager_failed)", ms_strerror(err),
                   (unsigned long long)n);
    }
}

static void do_activate(struct ms_node_remember *nr,
                        const struct ms_remember_action *a)
{
    struct ms_dest dst;
    int rc = ms_dispatch_resolve(nr->d, a->type, a->id, a->id_len, &dst);
    if (rc == 0 && dst.shard != a->shard)
        rc = MS_EINVAL; /* the partitioner changed its mind: leave it */
    if (rc == 0) {
        struct ms_waiter w = {on_activated, nr, 0};
        int64_t c = ms_router_activate(nr->router, &dst,
                                       MS_NODE_REMEMBER_ACTIVATE_TIMEOUT_MS,
                                       &w);
        if (c >= 0)
            nr->activating++;
        else
            rc = (int)c;
    }
    if (rc < 0) {
        uint64_t n = ++nr->eager_failed;
        if (ms_log_due(n))
            ms_log(MS_LOG_WARN, NULL, "remember: cannot start %s '%.*s' "
                   "again: %s (%llu so far, counted in eager_failed)",
                   nr->types[a->type].tc->name, (int)(a->id_len > 64 ? 64
                                                      : a->id_len),
                   a->id, ms_strerror(rc), (unsigned long long)n);
    }
}

static void drain(struct ms_node_remember *nr)
{
    struct ms_remember_action a;
    int kicked = 0;
    while (!nr->detached && ms_remember_next_action(nr->m, &a)) {
        if (a.kind == MS_REMEMBER_WRITE) {
            do_write(nr, &a);
        } else if (!nr->closing) {
            do_activate(nr, &a);
            kicked = 1;
        }
    }
    if (kicked && nr->kick)
        nr->kick(nr->kick_data);
}

static void on_drain(uv_idle_t *h)
{
    struct ms_node_remember *nr = h->data;
    uv_idle_stop(h);
    nr->drain_on = 0;
    drain(nr);
}

static void schedule_drain(struct ms_node_remember *nr)
{
    if (nr->drain_on || nr->detached)
        return;
    nr->drain_on = 1;
    uv_idle_start(&nr->drainer, on_drain);
}

/* ---- the tick -------------------------------------------------------------- */

static void on_tick(uv_timer_t *timer)
{
    struct ms_node_remember *nr = timer->data;
    if (nr->detached)
        return;
    uint64_t now = now_of(nr);
    /* every shard of a remembered type gets an owner, so that its
     * entities start without a message (after a restart of the cluster) */
    int ask_alloc = now - nr->alloc_asked_ms >= ALLOC_EVERY_MS;
    if (ask_alloc)
        nr->alloc_asked_ms = now;
    for (int type = 0; type < nr->ntypes; type++) {
        struct ntype *t = &nr->types[type];
        if (ask_alloc && t->store)
            ms_router_allocate_unowned(nr->router, type);
        uint32_t n = t->tc->shard_count;
        uint32_t k = n < SCAN_PER_TICK ? n : SCAN_PER_TICK;
        uint32_t i = t->scan_next;
        if (t->store)
            t->scan_next = (uint32_t)(((uint64_t)i + k) % n);
        for (uint32_t j = 0; t->store && j < k;
             j++, i = i + 1 < n ? i + 1 : 0) {
            struct nshard *s = &t->sh[i];
            int serving = ms_region_shard_serving(nr->rg, type, i);
            if (serving && !s->draining &&
                (s->state == SH_DOWN ||
                 (s->state == SH_LOADING && s->load_failed &&
                  now >= s->retry_at)))
                start_load(nr, type, i);
            else if (!serving && s->state != SH_DOWN &&
                     !ms_region_shard_stopping(nr->rg, type, i))
                /* not a handoff (its stop ends in hold_stop, once the
                 * entities that messages before the stop activated are
                 * recorded): a lease lost, a plan that moved it */
                shard_down(nr, type, i);
            if (s->draining &&
                (ms_remember_pending(nr->m, type, i) == 0 ||
                 now - s->drain_since > DRAIN_MAX_MS))
                finish_drain(nr, type, i);
            if (s->refused || s->load_failed)
                sync_refuse(nr, type, i);
        }
    }
    /* records of shards that never started here */
    struct early **pp = &nr->early_head;
    nr->early_tail = NULL;
    while (*pp) {
        struct early *e = *pp;
        if (nr->types[e->type].sh[e->shard].state == SH_DOWN &&
            !ms_region_shard_serving(nr->rg, e->type, e->shard)) {
            *pp = e->next;
            nr->nearly--;
            nr->early_drops++;
            free(e);
        } else {
            nr->early_tail = e;
            pp = &e->next;
        }
    }
    if (nr->activating < ACTIVATE_OUT_MAX)
        ms_remember_tick(nr->m, now);
    drain(nr);
}

/* ---- life ------------------------------------------------------------------ */

int ms_node_remember_new(struct ms_node_remember **out, uv_loop_t *loop,
                         struct ms_dispatch *d, struct ms_router *router,
                         const struct ms_config *cfg, struct ms_pg *pg,
                         void (*kick)(void *), void *kick_data, char *err,
                         size_t errlen)
{
    *out = NULL;
    int any = 0;
    for (int i = 0; i < cfg->ntypes; i++)
        any |= cfg->types[i].remember != MS_REMEMBER_NONE;
    if (!any)
        return 0;
    struct ms_node_remember *nr = calloc(1, sizeof *nr);
    struct ms_remember_type *rt = calloc((size_t)cfg->ntypes, sizeof *rt);
    if (!nr || !rt) {
        free(nr);
        free(rt);
        snprintf(err, errlen, "out of memory");
        return MS_ENOMEM;
    }
    nr->loop = loop;
    nr->d = d;
    nr->router = router;
    nr->rg = ms_router_region(router);
    nr->cfg = cfg;
    nr->kick = kick;
    nr->kick_data = kick_data;
    nr->ntypes = cfg->ntypes;
    nr->types = calloc((size_t)cfg->ntypes, sizeof *nr->types);
    int rc = nr->types ? 0 : MS_ENOMEM;
    for (int i = 0; !rc && i < cfg->ntypes; i++) {
        const struct ms_type_config *tc = &cfg->types[i];
        struct ntype *t = &nr->types[i];
        t->tc = tc;
        if (tc->remember == MS_REMEMBER_NONE)
            continue;
        t->store = tc->remember;
        rt[i].nshards = tc->shard_count;
        rt[i].fail_closed = tc->remember_fail_closed;
        rt[i].keep_on_idle = tc->remember_keep_on_idle;
        t->sh = calloc(tc->shard_count, sizeof *t->sh);
        if (!t->sh) {
            rc = MS_ENOMEM;
            break;
        }
        if (t->store == MS_REMEMBER_MEMORY) {
            t->mem = calloc(tc->shard_count, sizeof *t->mem);
            rc = t->mem ? 0 : MS_ENOMEM;
        } else if (t->store == MS_REMEMBER_FILE) {
            enum ms_remember_fsync f =
                tc->remember_fsync == MS_FSYNC_NEVER ? MS_REMEMBER_FSYNC_NEVER
                : tc->remember_fsync == MS_FSYNC_ON_COMPACTION
                    ? MS_REMEMBER_FSYNC_ON_COMPACTION
                    : MS_REMEMBER_FSYNC_ALWAYS;
            rc = ms_remember_file_new(tc->remember_dir, f, FILE_MAX_OPEN,
                                      &t->file);
            if (rc < 0) {
                snprintf(err, errlen, "entities.%s.remember.dir: cannot "
                         "open the file store '%s': %s", tc->name,
                         tc->remember_dir,
                         errtext(rc));
                goto fail;
            }
        }
    }
    if (!rc && pg) {
        nr->sql = ms_remember_sql_new(loop, pg, cfg->cluster, cfg->node_name);
        if (!nr->sql)
            rc = MS_ENOMEM;
    }
    if (!rc) {
        struct ms_remember_config mc = {cfg->ntypes, rt, 0, 0,
                                        MS_NODE_REMEMBER_START_PER_TICK};
        rc = ms_remember_new(&nr->m, &mc);
    }
    if (rc < 0) {
        snprintf(err, errlen, "remember-entities: %s", ms_strerror(rc));
        goto fail;
    }
    free(rt);
    uv_timer_init(loop, &nr->tick);
    uv_idle_init(loop, &nr->drainer);
    nr->tick.data = nr->drainer.data = nr;
    uv_timer_start(&nr->tick, on_tick, MS_NODE_REMEMBER_TICK_MS,
                   MS_NODE_REMEMBER_TICK_MS);
    uv_unref((uv_handle_t *)&nr->tick);
    nr->open_handles = 2;
    for (int i = 0; i < cfg->ntypes; i++)
        if (nr->types[i].store)
            ms_dispatch_set_observer(d, i, on_entity, nr);
    ms_region_set_stop_hold(nr->rg, hold_stop, nr);
    *out = nr;
    return 0;
fail:
    free(rt);
    nr->detached = 1;
    ms_node_remember_free(nr);
    return rc;
}

static void on_closed(uv_handle_t *h)
{
    struct ms_node_remember *nr = h->data;
    if (--nr->open_handles == 0 && nr->closed)
        nr->closed(nr->closed_data);
}

void ms_node_remember_close(struct ms_node_remember *nr,
                            void (*closed)(void *), void *data)
{
    if (!nr)
        return;
    /* what is queued for a local store is written now; a node stop is
     * not a passivation: the ids stay */
    nr->closing = 1;
    drain(nr);
    for (int i = 0; i < nr->ntypes; i++)
        if (nr->types[i].store)
            ms_dispatch_set_observer(nr->d, i, NULL, NULL);
    ms_region_set_stop_hold(nr->rg, NULL, NULL);
    nr->detached = 1;
    nr->closed = closed;
    nr->closed_data = data;
    uv_close((uv_handle_t *)&nr->tick, on_closed);
    uv_close((uv_handle_t *)&nr->drainer, on_closed);
}

void ms_node_remember_free(struct ms_node_remember *nr)
{
    if (!nr)
        return;
    for (int i = 0; nr->types && i < nr->ntypes; i++) {
        struct ntype *t = &nr->types[i];
        ms_remember_file_free(t->file);
        for (uint32_t s = 0; t->mem && s < t->tc->shard_count; s++)
            ms_idset_free(&t->mem[s]);
        free(t->mem);
        free(t->sh);
    }
    while (nr->early_head) {
        struct early *e = nr->early_head;
        nr->early_head = e->next;
        free(e);
    }
    if (nr->sql)
        ms_remember_sql_close(nr->sql, NULL, NULL);
    ms_remember_free(nr->m);
    free(nr->types);
    free(nr);
}

int ms_node_remember_clear_shard(struct ms_node_remember *nr, const char *type,
                           size_t len, uint32_t shard)
{
    int ti = -1;
    for (int i = 0; nr && i < nr->ntypes; i++)
        if (strlen(nr->types[i].tc->name) == len &&
            memcmp(nr->types[i].tc->name, type, len) == 0)
            ti = i;
    if (ti < 0 || !nr->types[ti].store)
        return MS_ENOTYPE;
    struct ntype *t = &nr->types[ti];
    if (shard >= t->tc->shard_count)
        return MS_EINVAL;
    struct nshard *s = &t->sh[shard];
    int was = ms_remember_clear(nr->m, ti, shard) > 0 || s->load_failed;
    if (s->load_failed) {
        s->load_failed = 0; /* the listing again, now */
        s->state = SH_DOWN;
        s->load_gen++;
    }
    sync_refuse(nr, ti, shard);
    if (was)
        ms_log(MS_LOG_INFO, NULL, "remember: %s shard %u cleared by an "
               "operator", t->tc->name, shard);
    return was;
}

/* ---- /v1/stats --------------------------------------------------------------- */

struct out {
    char *buf;
    size_t len, o;
};

static void put(struct out *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(struct out *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->o < w->len ? w->buf + w->o : NULL,
                      w->o < w->len ? w->len - w->o : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        w->o += (size_t)n;
}

size_t ms_node_remember_stats_json(const struct ms_node_remember *nr,
                                   char *buf, size_t len)
{
    struct out w = {buf, len, 0};
    if (buf && len)
        buf[0] = 0;
    struct ms_remember_stats z;
    memset(&z, 0, sizeof z);
    const struct ms_remember_stats *st = nr ? ms_remember_stats(nr->m) : &z;
    uint64_t failed = 0;
    for (int i = 0; nr && i < nr->ntypes; i++)
        for (uint32_t s = 0; nr->types[i].store &&
                             s < nr->types[i].tc->shard_count; s++)
            failed += nr->types[i].sh[s].refused;
    put(&w, "{\"queue_max\":%u,\"queued\":%llu,\"inflight\":%llu,"
        "\"recorded\":%llu,\"coalesced\":%llu,\"cancelled\":%llu,"
        "\"drops\":%llu,\"abandoned\":%llu,\"resyncs\":%llu,"
        "\"writes\":%llu,\"written\":%llu,\"errors\":%llu,\"retries\":%llu,"
        "\"stale_answers\":%llu,\"failed_shards\":%llu,"
        "\"eager_starts\":%llu,\"eager_pending\":%llu,"
        "\"eager_dropped\":%llu,\"eager_skipped\":%llu,"
        "\"eager_failed\":%llu,\"loads\":%llu,"
        "\"load_errors\":%llu,\"early_drops\":%llu,\"unstorable\":%llu,"
        "\"types\":{",
        MS_REMEMBER_QUEUE, (unsigned long long)st->queued,
        (unsigned long long)st->inflight, (unsigned long long)st->recorded,
        (unsigned long long)st->coalesced, (unsigned long long)st->cancelled,
        (unsigned long long)st->drops, (unsigned long long)st->abandoned,
        (unsigned long long)st->resyncs, (unsigned long long)st->writes,
        (unsigned long long)st->written, (unsigned long long)st->errors,
        (unsigned long long)st->retries,
        (unsigned long long)st->stale_answers, (unsigned long long)failed,
        (unsigned long long)st->eager_starts,
        (unsigned long long)st->eager_pending,
        (unsigned long long)st->eager_dropped,
        (unsigned long long)st->eager_skipped,
        (unsigned long long)(nr ? nr->eager_failed : 0),
        (unsigned long long)(nr ? nr->loads : 0),
        (unsigned long long)(nr ? nr->load_errors : 0),
        (unsigned long long)(nr ? nr->early_drops : 0),
        (unsigned long long)(nr ? nr->unstorable : 0));
    int first = 1;
    for (int i = 0; nr && i < nr->ntypes; i++) {
        const struct ntype *t = &nr->types[i];
        if (!t->store)
            continue;
        /* type names are [A-Za-z0-9_] (config.lua): no escaping */
        put(&w, "%s\"%s\":{\"store\":\"%s\",\"remembered\":%llu,"
            "\"failed\":[", first ? "" : ",", t->tc->name,
            t->store == MS_REMEMBER_MEMORY ? "memory"
            : t->store == MS_REMEMBER_FILE ? "file" : "postgres",
            (unsigned long long)ms_remember_type_count(nr->m, i));
        first = 0;
        int f1 = 1;
        for (uint32_t s = 0; s < t->tc->shard_count; s++)
            if (t->sh[s].refused) {
                put(&w, "%s%u", f1 ? "" : ",", s);
                f1 = 0;
            }
        put(&w, "],\"shards\":{");
        f1 = 1;
        for (uint32_t s = 0; s < t->tc->shard_count; s++) {
            uint64_t c = ms_remember_shard_count(nr->m, i, s);
            if (!c)
                continue;
            put(&w, "%s\"%u\":%llu", f1 ? "" : ",", s, (unsigned long long)c);
            f1 = 0;
        }
        put(&w, "}}");
    }
    put(&w, "}}");
    return w.o;
}
