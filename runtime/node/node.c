/*
 * node.c -- one node, the composition root: wires the loop, the core
 * (dispatcher), the Lua bridge, the cluster (transport, membership,
 * router) and the HTTP gateway together. Nothing else includes all of
 * them.
 *
 * The loop runs dispatch work from an idle handle that is active only
 * while work is ready (so the loop still blocks in poll when there is
 * none), fires deadlines from one timer armed at the dispatcher's next
 * deadline, and steps the Lua GC from a timer once the node is idle.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/config.h"
#include "../core/dispatch.h"
#include "../core/jsoncheck.h"
#include "../core/log.h"
#include "../io/cluster.h"
#include "../io/http.h"
#include "../io/lease_sql.h"
#include "../io/router.h"
#include "../io/uverr.h"
#include "../io/watchdog.h"
#include "../lua/bridge.h"
#include "../moonshard.h"
#include "node_db.h"
#include "node_events.h"
#include "node_persist.h"
#include "node_remember.h"

#define ROUND_BUDGET 4096

struct ms_node {
    uv_loop_t *loop;
    struct ms_config cfg;
    struct ms_dispatch *d;
    struct ms_bridge *b;
    struct ms_http *http;
    struct ms_cluster *cluster;
    struct ms_router *router;
    struct ms_watchdog *wd;
    struct ms_node_db *db;  /* with `database` in the config, else NULL */
    struct ms_node_persist *persist; /* persistent entities' side */
    struct ms_node_remember *remember; /* remembered types' side, or NULL */
    struct ms_node_events *events; /* with on_member_event, else NULL */
    uint64_t events_made;          /* membership events made */
    int closing_remember;
    uv_idle_t work;
    uv_timer_t tick;
    uint64_t tick_at;  /* when tick fires (loop time), while it is active */
    uv_timer_t gc;     /* steps the Lua GC while the node is idle */
    int working;
    int gc_dirty;      /* messages were handled since the last GC cycle */
    uint64_t seen_rounds, rounds;
    int closing;
    int lease_reads;   /* GET /v1/leases reads on the pool, at most
                          MS_NODE_LEASE_READS_MAX */
    int open_handles;
    char http_address[160];
    char home[PATH_MAX];
    void (*on_stopped)(void *);   /* the node decided to stop itself */
    void *on_stopped_data;
};

static void arm(struct ms_node *n);

static void on_work(uv_idle_t *h)
{
    struct ms_node *n = h->data;
    ms_dispatch_expire(n->d, uv_now(n->loop));
    ms_bridge_run(n->b, ROUND_BUDGET);
    if (n->router) /* NULL once the node closed */
        ms_router_after_dispatch(n->router);
    n->rounds++;
    n->gc_dirty = 1;
    arm(n);
}

static void on_tick(uv_timer_t *t)
{
    struct ms_node *n = t->data;
    ms_dispatch_expire(n->d, uv_now(n->loop));
    arm(n);
}

/* Every GC_IDLE_MS: when no round ran since the last tick, the node is
 * idle, so collect the garbage of the last burst now, in steps, instead of
 * during the next burst. While busy, LuaJIT's own pacing applies. */
#define GC_IDLE_MS 50

static void on_gc_tick(uv_timer_t *t)
{
    struct ms_node *n = t->data;
    ms_node_persist_tick(n->persist, uv_now(n->loop));
    if (n->rounds != n->seen_rounds) {
        n->seen_rounds = n->rounds;
        return;
    }
    if (n->gc_dirty && ms_bridge_gc_step(n->b, n->cfg.gc_step_kb))
        n->gc_dirty = 0; /* a cycle finished */
}

/* Starts or stops the idle handle and re-arms the deadline timer. */
static void arm(struct ms_node *n)
{
    if (n->closing)
        return;
    int has = ms_dispatch_has_work(n->d);
    if (has && !n->working) {
        uv_idle_start(&n->work, on_work);
        n->working = 1;
    } else if (!has && n->working) {
        uv_idle_stop(&n->work);
        n->working = 0;
    }
    /* re-armed only when the deadline moved: a burst of sends in one loop
     * turn would otherwise restart the timer per message */
    uint64_t now = uv_now(n->loop);
    int64_t in = ms_dispatch_next_deadline(n->d, now);
    int armed = uv_is_active((uv_handle_t *)&n->tick);
    if (in >= 0 && (!armed || n->tick_at != now + (uint64_t)in)) {
        uv_timer_start(&n->tick, on_tick, (uint64_t)in, 0);
        n->tick_at = now + (uint64_t)in;
    } else if (in < 0 && armed) {
        uv_timer_stop(&n->tick);
    }
}

static void on_self_removed(void *data);

/* ---- cluster hooks ------------------------------------------------------ */

/* The cluster's hooks can come after the router is gone: the node closes
 * from inside one of them (on_self_removed, from the membership's drain,
 * which goes on with the actions after it, e.g. a new coordinator). */
static void on_cluster_frame(void *data, uint64_t uid, const struct ms_frame *f)
{
    struct ms_node *n = data;
    if (!n->router)
        return;
    ms_router_on_frame(n->router, uid, f);
    arm(n);
}

static void on_coordinator(void *data, uint64_t uid)
{
    struct ms_node *n = data;
    if (!n->router)
        return;
    ms_router_on_coordinator(n->router, uid);
    arm(n);
}

static void on_connected(void *data, uint64_t uid)
{
    struct ms_node *n = data;
    if (!n->router)
        return;
    ms_router_on_connected(n->router, uid);
    arm(n);
}

static void on_member(void *data, uint64_t uid, int status, int is_self)
{
    struct ms_node *n = data;
    (void)is_self;
    if (!n->router)
        return;
    ms_router_on_member(n->router, uid, status);
    arm(n);
}

/* A membership event: to the HTTP streams now, to the hook from its
 * queue (node_events.h). */
static void on_member_event(void *data, uint64_t seq, const char *kind,
                            const char *json, size_t len)
{
    struct ms_node *n = data;
    n->events_made++;
    ms_http_event(n->http, seq, kind, json, len);
    ms_node_events_push(n->events, seq, json, len);
}

static int allocate_lua(void *data, const char *type_name, uint32_t shard,
                        const char *view_json, char *name, size_t namelen,
                        char *err, size_t errlen)
{
    struct ms_node *n = data;
    return ms_bridge_allocate(n->b, type_name, shard, view_json, name,
                              namelen, err, errlen);
}

static int allocate_many_lua(void *data, const char *type_name,
                             const uint32_t *shards, size_t n,
                             const char *view_json, char *names,
                             size_t namelen, char *err, size_t errlen)
{
    struct ms_node *node = data;
    return ms_bridge_allocate_many(node->b, type_name, shards, n, view_json,
                                   names, namelen, err, errlen);
}

static int eligible_lua(void *data, const char *type_name,
                        const char *member_json)
{
    struct ms_node *n = data;
    return ms_bridge_eligible(n->b, type_name, member_json);
}

static int rebalance_lua(void *data, const char *type_name,
                         const char *view_json, uint32_t *out, size_t max,
                         char *err, size_t errlen)
{
    struct ms_node *n = data;
    return ms_bridge_rebalance(n->b, type_name, view_json, out, max, err,
                               errlen);
}

/* The one check of a send, at the node's edge: the type, the id and its
 * shard (ms_dispatch_resolve), and the payload's size. The layers below
 * take the resolved destination and do not check or compute it again. */
static int resolve(struct ms_node *n, int type, const char *id,
                   size_t idlen, size_t len, struct ms_dest *dst)
{
    return ms_dispatch_resolve_send(n->d, type, id, idlen, len, dst);
}

static size_t report_owner(void *data, int type, const char *id,
                           size_t idlen, char *buf, size_t len)
{
    return ms_node_owner_json(data, type, id, idlen, buf, len);
}

static size_t report_stats(void *data, char *buf, size_t len)
{
    return ms_node_stats_json(data, buf, len);
}

static void kick_node(void *data)
{
    arm(data);
}

/* ---- the gateway's view of the node (runtime/io/gateway.h) ------------- */

static int gw_type(void *n, const char *name, size_t len)
{
    return ms_node_type(n, name, len);
}

static int gw_check_message(void *n, const char *json, size_t len,
                            char *err, size_t errlen)
{
    return ms_node_check_message(n, json, len, err, errlen);
}

static int gw_tell(void *n, int type, const char *id, size_t idlen,
                   const char *json, size_t len)
{
    return ms_node_tell(n, type, id, idlen, json, len);
}

static int gw_ask(void *n, int type, const char *id, size_t idlen,
                  const char *json, size_t len, uint64_t timeout_ms,
                  ms_ask_cb cb, void *data)
{
    return ms_node_ask(n, type, id, idlen, json, len, timeout_ms, cb, data);
}

static int gw_activate(void *n, int type, const char *id, size_t idlen,
                       uint64_t timeout_ms, ms_ask_cb cb, void *data)
{
    return ms_node_activate(n, type, id, idlen, timeout_ms, cb, data);
}

static int gw_stop(void *n, int type, const char *id, size_t idlen)
{
    return ms_node_stop_entity(n, type, id, idlen);
}

static int gw_shard_of(void *n, int type, const char *id, size_t idlen,
                       uint32_t *shard)
{
    return ms_node_shard_of(n, type, id, idlen, shard);
}

static size_t gw_stats_json(void *n, char *buf, size_t len)
{
    return ms_node_stats_json(n, buf, len);
}

static size_t gw_members_json(void *n, char *buf, size_t len)
{
    return ms_node_members_json(n, buf, len);
}

static size_t gw_owner_json(void *n, int type, const char *id, size_t idlen,
                            char *buf, size_t len)
{
    return ms_node_owner_json(n, type, id, idlen, buf, len);
}

static size_t gw_allocations_json(void *n, int type, char *buf, size_t len)
{
    return ms_node_allocations_json(n, type, buf, len);
}

static int gw_call_lua(void *n, const char *module, const char *fn,
                       const char *arg, char **out, char *err, size_t errlen)
{
    return ms_node_call_lua(n, module, fn, arg, out, err, errlen);
}

static int gw_check_admin(void *n, const char *token, size_t len,
                          int loopback)
{
    return ms_node_check_admin(n, token, len, loopback);
}

static int gw_leave(void *n)
{
    return ms_node_leave(n);
}

static int gw_down(void *n, const char *address, int force)
{
    return ms_node_down(n, address, force);
}

static int gw_move(void *n, const char *type, size_t len, uint32_t shard)
{
    return ms_node_move(n, type, len, shard);
}

int ms_node_remember_clear(struct ms_node *n, const char *type, size_t len,
                           uint32_t shard)
{
    return ms_node_remember_clear_shard(n->remember, type, len, shard);
}

static int gw_remember_clear(void *n, const char *type, size_t len,
                             uint32_t shard)
{
    return ms_node_remember_clear(n, type, len, shard);
}

/* One GET /v1/leases read on the node's pool: counted while it runs, so
 * readers of an open endpoint cannot queue more than
 * MS_NODE_LEASE_READS_MAX SELECTs (of up to 65536 rows) ahead of the
 * lease renewals that share the pool. n outlives it: the node is freed
 * only after its pool, whose close answers every job. */
struct lease_read {
    struct ms_node *n;
    ms_ask_cb cb;
    void *cb_data;
};

static void on_lease_read(void *data, int err, const char *payload,
                          size_t len)
{
    struct lease_read *r = data;
    r->n->lease_reads--;
    r->cb(r->cb_data, err, payload, len);
    free(r);
}

int ms_node_leases(struct ms_node *n, const char *type, size_t len,
                   ms_ask_cb cb, void *cb_data)
{
    int t = ms_node_type(n, type, len);
    if (t < 0)
        return MS_ENOTYPE;
    const struct ms_type_config *tc = &n->cfg.types[t];
    if (!ms_type_leased(tc))
        return MS_EINVAL;
    if (n->closing)
        return MS_ECANCELED;
    struct ms_pg *pg = ms_node_db_pool(n->db);
    if (!pg)
        return MS_EDBCONN;
    if (n->lease_reads >= MS_NODE_LEASE_READS_MAX)
        return MS_EBUSY;
    struct lease_read *r = malloc(sizeof *r);
    if (!r)
        return MS_ENOMEM;
    r->n = n;
    r->cb = cb;
    r->cb_data = cb_data;
    int rc = ms_lease_sql_list(pg, n->cfg.cluster, tc->name,
                               tc->shard_count, on_lease_read, r);
    if (rc < 0) {
        free(r);
        return rc;
    }
    n->lease_reads++;
    return 0;
}

static int gw_leases(void *n, const char *type, size_t len, ms_ask_cb cb,
                     void *cb_data)
{
    return ms_node_leases(n, type, len, cb, cb_data);
}

/* The gateway of node n: every endpoint goes through these. */
static void gateway_of(struct ms_node *n, struct ms_gateway *gw)
{
    memset(gw, 0, sizeof *gw);
    gw->data = n;
    gw->name = n->cfg.node_name;
    gw->max_message = n->cfg.max_message;
    gw->home = n->home;
    gw->api_token = n->cfg.api_token;
    gw->tls_cert = n->cfg.gw_cert;
    gw->tls_key = n->cfg.gw_key;
    gw->tls_ca = n->cfg.gw_ca;
    ms_node_http_limits(n, &gw->timeout_ms, &gw->connections);
    gw->type = gw_type;
    gw->check_message = gw_check_message;
    gw->tell = gw_tell;
    gw->ask = gw_ask;
    gw->activate = gw_activate;
    gw->stop = gw_stop;
    gw->shard_of = gw_shard_of;
    gw->stats_json = gw_stats_json;
    gw->members_json = gw_members_json;
    gw->owner_json = gw_owner_json;
    gw->allocations_json = gw_allocations_json;
    gw->call_lua = gw_call_lua;
    gw->check_admin = gw_check_admin;
    gw->leave = gw_leave;
    gw->down = gw_down;
    gw->move = gw_move;
    gw->remember_clear = gw_remember_clear;
    gw->leases = gw_leases;
}

/* Binds persistent entities to the node's journal (with a database). */
static void start_persist(struct ms_node *n)
{
    struct ms_journal *j = ms_node_db_journal(n->db, n->cfg.cluster,
                                              n->cfg.node_name);
    if (!j)
        return;
    n->persist = ms_node_persist_new(n->d, n->router, j, &n->cfg,
                                     kick_node, n);
    if (!n->persist)
        return;
    struct ms_bridge_persist hooks;
    ms_node_persist_hooks(n->persist, &hooks);
    ms_bridge_set_persist(n->b, &hooks);
}

int ms_node_new(struct ms_node **out, uv_loop_t *loop,
                const struct ms_node_options *opts, char *err, size_t errlen)
{
    struct ms_node *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return MS_ENOMEM;
    }
    n->loop = loop;
    ms_home(n->home, sizeof n->home);
    int rc = ms_bridge_new(&n->b, loop, n->home);
    if (rc < 0) {
        snprintf(err, errlen, "cannot start the Lua VM: %s", ms_strerror(rc));
        free(n);
        return rc;
    }
    rc = ms_bridge_load_config(n->b, opts->config_path, opts->node_name,
                               &n->cfg, err, errlen);
    if (rc < 0)
        goto fail;
    ms_log_setup(n->cfg.node_name, MS_LOG_INFO);
    ms_log_set_json(n->cfg.log_json); /* log_format */
    struct ms_dispatch_type *types = calloc((size_t)n->cfg.ntypes + 1,
                                            sizeof *types);
    if (!types) {
        rc = MS_ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n->cfg.ntypes; i++) {
        struct ms_type_config *t = &n->cfg.types[i];
        types[i].name = t->name;
        types[i].shard_count = t->shard_count;
        types[i].idle_timeout_ms = t->idle_timeout_ms;
        types[i].on_error_stop = t->on_error_stop;
        types[i].max_pending = t->max_pending;
        types[i].custom_partition = t->custom_partition;
    }
    n->d = ms_dispatch_new(types, n->cfg.ntypes, n->cfg.max_message);
    free(types);
    if (!n->d) {
        rc = MS_ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    ms_dispatch_set_max_active(n->d, n->cfg.max_active_entities);
    ms_dispatch_set_partitioner(n->d, ms_bridge_partition, n->b);
    rc = ms_bridge_start(n->b, n->d, &n->cfg, err, errlen);
    if (rc < 0)
        goto fail;
    struct ms_watchdog_options wo = {n->cfg.stuck_handler_ms,
                                     n->cfg.stuck_handler_exit_ms,
                                     ms_bridge_running(n->b), &n->cfg};
    rc = ms_watchdog_start(&n->wd, loop, &wo);
    if (rc < 0) {
        snprintf(err, errlen, "cannot start the watchdog thread: %s",
                 ms_io_strerror(rc));
        goto fail;
    }
    uv_idle_init(loop, &n->work);
    uv_timer_init(loop, &n->tick);
    uv_timer_init(loop, &n->gc);
    n->work.data = n->tick.data = n->gc.data = n;
    uv_timer_start(&n->gc, on_gc_tick, GC_IDLE_MS, GC_IDLE_MS);
    uv_unref((uv_handle_t *)&n->gc);
    /* a single node is a cluster of one: transport, membership,
     * coordinator and router always run, and every send goes through the
     * router */
    struct ms_cluster_hooks hooks;
    memset(&hooks, 0, sizeof hooks);
    hooks.data = n;
    hooks.on_self_removed = on_self_removed;
    hooks.on_frame = on_cluster_frame;
    hooks.on_coordinator = on_coordinator;
    hooks.on_member = on_member;
    hooks.on_connected = on_connected;
    hooks.on_event = on_member_event;
    rc = ms_bridge_has_member_hook(n->b)
             ? ms_node_events_new(&n->events, loop, n->b)
             : 0;
    if (rc == 0)
        rc = ms_cluster_start(&n->cluster, loop, &n->cfg, &hooks, err, errlen);
    if (rc == 0) {
        rc = ms_router_new(&n->router, loop, n->d, n->cluster, &n->cfg);
        if (rc < 0)
            snprintf(err, errlen, "cannot start the router: %s",
                     ms_strerror(rc));
    }
    if (rc < 0) {
        n->open_handles = 3;
        n->closing = 1;
        /* handles are initialised: close them properly */
        ms_node_close(n);
        return rc;
    }
    ms_router_set_kick(n->router, kick_node, n);
    ms_router_set_allocator(n->router, allocate_lua, rebalance_lua,
                            eligible_lua, n);
    ms_router_set_allocate_many(n->router, allocate_many_lua);
    struct ms_bridge_reports reports = {n, report_owner, report_stats};
    ms_bridge_set_router(n->b, n->router, &reports);
    struct ms_gateway gw;
    gateway_of(n, &gw);
    rc = ms_http_start(&n->http, loop, &gw, n->cfg.http_host,
                       n->cfg.http_port, err, errlen);
    if (rc < 0) {
        n->open_handles = 3;
        n->closing = 1;
        ms_node_close(n);
        return rc;
    }
    snprintf(n->http_address, sizeof n->http_address, "%s",
             ms_http_address(n->http)); /* "[::1]:7201" for IPv6 */
    /* the schema is migrated on the loop, in the background: the node
     * serves its in-memory types meanwhile, whatever the database does */
    if (n->cfg.database[0]) {
        n->db = ms_node_db_start(loop, n->cfg.database,
                                 n->cfg.database_connections);
        /* the leases of persistent types run on its pool */
        ms_router_set_pool(n->router, ms_node_db_pool(n->db));
    }
    start_persist(n);
    rc = ms_node_remember_new(&n->remember, loop, n->d, n->router, &n->cfg,
                              n->db ? ms_node_db_pool(n->db) : NULL,
                              kick_node, n, err, errlen);
    if (rc < 0) {
        n->open_handles = 3;
        n->closing = 1;
        ms_node_close(n);
        return rc;
    }
    *out = n;
    return 0;
fail:
    ms_dispatch_free(n->d);
    ms_bridge_free(n->b);
    ms_config_free(&n->cfg);
    free(n);
    return rc;
}

static void closed_one(struct ms_node *n)
{
    if (--n->open_handles > 0)
        return;
    /* the watchdog reads what the bridge publishes: it goes first */
    ms_watchdog_stop(n->wd);
    n->wd = NULL;
    ms_dispatch_free(n->d);
    ms_bridge_free(n->b);
    ms_node_persist_free(n->persist);
    /* after the dispatcher: its eager starts' waiters are told first */
    ms_node_remember_free(n->remember);
    ms_config_free(&n->cfg);
    free(n);
}

static void on_closed(uv_handle_t *h)
{
    closed_one(h->data);
}

static void on_db_closed(void *data)
{
    closed_one(data);
}

static void on_remember_closed(void *data)
{
    closed_one(data);
}

static void on_events_closed(void *data)
{
    closed_one(data);
}

void ms_node_close(struct ms_node *n)
{
    if (n->closing && !n->d)
        return;
    n->closing = 1;
    ms_bridge_set_persist(n->b, NULL);
    ms_node_persist_detach(n->persist); /* the router goes */
    /* queued records for local stores are written now, before the router
     * goes; its handles close with the node's */
    struct ms_node_remember *rem = n->closing_remember ? NULL : n->remember;
    n->closing_remember = 1;
    if (rem)
        ms_node_remember_close(rem, on_remember_closed, n);
    if (n->router) {
        ms_bridge_set_router(n->b, NULL, NULL);
        ms_router_close(n->router);
        n->router = NULL;
    }
    if (n->cluster) {
        ms_cluster_close(n->cluster);
        n->cluster = NULL;
    }
    /* passivate everything: cancelled asks resume their waiters, idle
     * entities get a stop; run rounds until nothing is left to do. The
     * gateway closes after: an HTTP ask still waiting (a persistent
     * write in flight, say) is answered "the node is stopping" rather
     * than left with its connection closed */
    ms_dispatch_shutdown(n->d);
    while (ms_dispatch_has_work(n->d))
        ms_bridge_run(n->b, ROUND_BUDGET);
    if (n->http) {
        ms_http_close(n->http);
        n->http = NULL;
    }
    struct ms_stats st;
    ms_dispatch_stats(n->d, &st);
    if (st.shutdown_drops || st.active_entities)
        ms_log(MS_LOG_WARN, NULL, "stopped with %llu messages dropped and "
               "%llu entities still active (waiting in an ask)",
               (unsigned long long)st.shutdown_drops,
               (unsigned long long)st.active_entities);
    n->open_handles = 3;
    if (rem)
        n->open_handles++;
    if (n->db) {
        /* the pool copied what it uses of n->cfg; n is freed only after
         * it is released */
        n->open_handles++;
        ms_node_db_close(n->db, on_db_closed, n);
        n->db = NULL;
    }
    if (n->events) {
        /* the hook gets what is queued (this node's removal, say) */
        n->open_handles++;
        ms_node_events_close(n->events, on_events_closed, n);
        n->events = NULL;
    }
    uv_close((uv_handle_t *)&n->work, on_closed);
    uv_close((uv_handle_t *)&n->tick, on_closed);
    uv_close((uv_handle_t *)&n->gc, on_closed);
}

/* This node was removed from the cluster (after a leave, or downed). */
static void on_self_removed(void *data)
{
    struct ms_node *n = data;
    ms_log(MS_LOG_WARN, NULL, "this node was removed from the cluster; "
           "stopping");
    if (n->on_stopped)
        n->on_stopped(n->on_stopped_data);
    else
        ms_node_close(n);
}

/* ---- the public API over the dispatcher --------------------------------- */

static int kick(struct ms_node *n, int rc)
{
    if (rc >= 0)
        arm(n);
    return rc;
}

int ms_node_type(struct ms_node *n, const char *name, size_t len)
{
    return ms_dispatch_type_index(n->d, name, len);
}

const char *ms_node_name(struct ms_node *n)
{
    return n->cfg.node_name;
}

const char *ms_node_http_address(struct ms_node *n)
{
    return n->http_address;
}

int ms_node_gateway_tls(struct ms_node *n)
{
    return n->cfg.gw_cert[0] != 0;
}

int ms_node_index(struct ms_node *n)
{
    return n->cfg.node_index;
}

const char *ms_node_home(struct ms_node *n)
{
    return n->home;
}

void ms_node_http_limits(struct ms_node *n, uint64_t *timeout_ms,
                         int *connections)
{
    *timeout_ms = n->cfg.http_timeout_ms ? n->cfg.http_timeout_ms : 30000;
    *connections = n->cfg.http_connections > 0 ? n->cfg.http_connections
                                               : 1024;
}

size_t ms_node_max_message(struct ms_node *n)
{
    return n->cfg.max_message;
}

int ms_node_check_message(struct ms_node *n, const char *json, size_t len,
                          char *err, size_t errlen)
{
    /* the strict scanner is the only judge; the Lua decoder only explains
     * a refusal (its message, when it refuses too: lua-cjson is more
     * lenient, and what it would take is refused all the same) */
    const char *why;
    size_t at;
    int v = ms_json_check(json, len, n->cfg.json_max_depth, &why, &at);
    if (v == MS_JSON_OBJECT)
        return 0;
    int rc = v == MS_JSON_VALUE ? MS_ENOTTABLE : MS_EBADJSON;
    if (ms_bridge_check(n->b, json, len, err, errlen) == rc && err[0])
        return rc;
    if (rc == MS_ENOTTABLE)
        snprintf(err, errlen, "the message must be a JSON object");
    else
        snprintf(err, errlen, "%s at byte %zu (strict JSON, RFC 8259)", why,
                 at);
    return rc;
}

int ms_node_tell(struct ms_node *n, int type, const char *id, size_t idlen,
                 const char *json, size_t len)
{
    if (n->closing)
        return MS_ECANCELED;
    struct ms_dest dst;
    int rc = resolve(n, type, id, idlen, len, &dst);
    if (rc < 0)
        return rc;
    return kick(n, ms_router_tell(n->router, &dst, json, len));
}

int ms_node_ask(struct ms_node *n, int type, const char *id, size_t idlen,
                const char *json, size_t len, uint64_t timeout_ms,
                ms_ask_cb cb, void *data)
{
    if (n->closing)
        return MS_ECANCELED;
    if (timeout_ms == 0 || !cb)
        return MS_EINVAL;
    struct ms_waiter w = {cb, data, 0};
    struct ms_dest dst;
    int64_t rc = resolve(n, type, id, idlen, len, &dst);
    if (rc < 0)
        return (int)rc;
    rc = ms_router_ask(n->router, &dst, json, len, timeout_ms, &w);
    return kick(n, rc < 0 ? (int)rc : 0);
}

int ms_node_stop_entity(struct ms_node *n, int type, const char *id,
                        size_t idlen)
{
    if (n->closing)
        return MS_ECANCELED;
    struct ms_dest dst;
    int rc = resolve(n, type, id, idlen, 0, &dst);
    if (rc < 0)
        return rc;
    return kick(n, ms_router_stop(n->router, &dst));
}

void ms_node_stats(struct ms_node *n, struct ms_stats *out)
{
    ms_dispatch_stats(n->d, out);
}

int ms_node_shard_of(struct ms_node *n, int type, const char *id,
                     size_t idlen, uint32_t *shard)
{
    return ms_dispatch_shard_of(n->d, type, id, idlen, shard);
}

size_t ms_node_owner_json(struct ms_node *n, int type, const char *id,
                          size_t idlen, char *buf, size_t buflen)
{
    uint32_t shard;
    int rc = ms_dispatch_shard_of(n->d, type, id, idlen, &shard);
    if (rc < 0) /* {"code":..,"message":..} */
        return ms_error_json(buf, buflen, rc, ms_strerror(rc));
    uint64_t owner = n->router ? ms_router_owner(n->router, type, shard) : 0;
    const char *name = owner ? ms_cluster_member_name(n->cluster, owner)
                             : NULL;
    char esc[6 * MS_MAX_ID + 1]; /* each byte escapes to 6 at most */
    size_t o = 0;
    ms_json_put_escaped(esc, sizeof esc - 1, &o, id,
                        idlen > MS_MAX_ID ? MS_MAX_ID : idlen);
    esc[o] = 0;
    int w;
    if (owner && name)
        w = snprintf(buf, buflen, "{\"type\":\"%s\",\"id\":\"%s\",\"shard\":%u,"
                     "\"owner\":\"%s\",\"uid\":\"%016llx\"}",
                     n->cfg.types[type].name, esc, shard, name,
                     (unsigned long long)owner);
    else
        w = snprintf(buf, buflen, "{\"type\":\"%s\",\"id\":\"%s\",\"shard\":%u,"
                     "\"owner\":null}", n->cfg.types[type].name, esc, shard);
    return w < 0 ? 0 : (size_t)w;
}

size_t ms_node_allocations_json(struct ms_node *n, int type, char *buf,
                                size_t buflen)
{
    if (!n->router) /* closed */
        return (size_t)snprintf(buf, buflen, "{}");
    return ms_router_allocations_json(n->router, type, buf, buflen);
}

int ms_node_activate(struct ms_node *n, int type, const char *id,
                     size_t idlen, uint64_t timeout_ms, ms_ask_cb cb,
                     void *data)
{
    if (n->closing)
        return MS_ECANCELED;
    struct ms_waiter w = {cb, data, 0};
    struct ms_dest dst;
    int64_t rc = resolve(n, type, id, idlen, 0, &dst);
    if (rc < 0)
        return (int)rc;
    rc = ms_router_activate(n->router, &dst, timeout_ms, &w);
    return kick(n, rc < 0 ? (int)rc : 0);
}

int ms_node_check_admin(struct ms_node *n, const char *token, size_t len,
                        int loopback)
{
    size_t want = strlen(n->cfg.admin_token);
    if (!want)
        return MS_EINVAL;
    if (!loopback && !n->cfg.admin_remote)
        return UV_EPERM;
    unsigned diff = (unsigned)(want ^ len);
    for (size_t i = 0; i < want; i++)
        diff |= (unsigned)(n->cfg.admin_token[i] ^ (i < len ? token[i] : 0));
    return diff ? UV_EACCES : 0;
}

int ms_node_move(struct ms_node *n, const char *name, size_t len,
                 uint32_t shard)
{
    if (!n->router) /* closed */
        return MS_EINVAL;
    int type = ms_dispatch_type_index(n->d, name, len);
    if (type < 0)
        return MS_ENOTYPE;
    int rc = ms_router_move(n->router, type, shard);
    arm(n);
    return rc;
}

uint64_t ms_node_leave_deadline_ms(struct ms_node *n)
{
    return 2 * n->cfg.handoff_timeout_ms + 5000;
}

int ms_node_leave(struct ms_node *n)
{
    if (!n->cluster)
        return MS_EINVAL;
    return ms_cluster_leave(n->cluster);
}

int ms_node_down(struct ms_node *n, const char *address, int force)
{
    if (!n->cluster)
        return MS_EINVAL;
    return ms_cluster_down(n->cluster, address, force);
}

size_t ms_node_members_json(struct ms_node *n, char *buf, size_t buflen)
{
    if (!n->cluster)
        return (size_t)snprintf(buf, buflen, "{}");
    return ms_cluster_members_json(n->cluster, buf, buflen);
}

void ms_node_on_stopped(struct ms_node *n, void (*cb)(void *), void *data)
{
    n->on_stopped = cb;
    n->on_stopped_data = data;
}

int ms_node_catch_signals(struct ms_node *n,
                          void (*cb)(void *data, int signum), void *data)
{
    return ms_watchdog_catch_signals(n->wd, cb, data);
}

size_t ms_node_stats_json(struct ms_node *n, char *buf, size_t buflen)
{
    struct ms_stats s;
    uint64_t hconns, htimeouts, hrefused, estreams, ecut, erefused;
    ms_dispatch_stats(n->d, &s);
    ms_http_stats(n->http, &hconns, &htimeouts, &hrefused);
    ms_http_event_stats(n->http, &estreams, &ecut, &erefused);
    struct ms_bridge_gc gc;
    ms_bridge_gc_stats(n->b, &gc);
    int len = snprintf(
        buf, buflen,
        "{\"node\":\"%s\",\"cluster\":\"%s\",\"version\":\"%s\","
        "\"routed\":%llu,\"delivered\":%llu,\"activations\":%llu,"
        "\"passivations\":%llu,\"limit_passivations\":%llu,"
        "\"quiet_passivations\":%llu,\"active_entities\":%llu,"
        "\"max_active_entities\":%llu,"
        "\"handler_errors\":%llu,\"asks_started\":%llu,"
        "\"asks_timed_out\":%llu,\"overflows\":%llu,"
        "\"slow_handlers\":%llu,\"timers_fired\":%llu,"
        "\"shutdown_drops\":%llu,\"handoff_drops\":%llu,"
        "\"shards_stopped\":%llu,\"pending\":%llu,"
        "\"http_connections\":%llu,\"http_timeouts\":%llu,"
        "\"http_refused\":%llu,\"event_streams\":%llu,"
        "\"event_streams_cut_off\":%llu,\"event_streams_refused\":%llu,"
        "\"http_tls_failures\":%llu,\"lua\":{\"heap\":%llu,"
        "\"gc_cycles\":%llu,\"gc_pause\":%d,\"gc_headroom\":%llu}",
        n->cfg.node_name, n->cfg.cluster, MS_VERSION,
        (unsigned long long)s.routed, (unsigned long long)s.delivered,
        (unsigned long long)s.activations, (unsigned long long)s.passivations,
        (unsigned long long)s.limit_passivations,
        (unsigned long long)s.quiet_passivations,
        (unsigned long long)s.active_entities,
        (unsigned long long)ms_dispatch_max_active(n->d),
        (unsigned long long)s.handler_errors,
        (unsigned long long)s.asks_started,
        (unsigned long long)s.asks_timed_out,
        (unsigned long long)s.overflows, (unsigned long long)s.slow_handlers,
        (unsigned long long)s.timers_fired,
        (unsigned long long)s.shutdown_drops,
        (unsigned long long)s.handoff_drops,
        (unsigned long long)s.shards_stopped,
        (unsigned long long)ms_dispatch_pending(n->d),
        (unsigned long long)hconns, (unsigned long long)htimeouts,
        (unsigned long long)hrefused, (unsigned long long)estreams,
        (unsigned long long)ecut, (unsigned long long)erefused,
        (unsigned long long)ms_http_tls_failures(n->http),
        (unsigned long long)gc.heap, (unsigned long long)gc.cycles, gc.pause,
        (unsigned long long)gc.headroom);
    if (len < 0)
        return 0;
    size_t o = (size_t)len;
    if (o < buflen)
        buf[o] = ',';
    o++;
    o += ms_node_events_stats_json(n->events, n->b, n->events_made,
                                   o < buflen ? buf + o : NULL,
                                   o < buflen ? buflen - o : 0);
    if (n->router) {
        /* the writers return the length they need, whatever fits */
        if (o < buflen)
            buf[o] = ',';
        o++;
        o += ms_router_stats_json(n->router, o < buflen ? buf + o : NULL,
                                  o < buflen ? buflen - o : 0);
        if (o < buflen)
            buf[o] = ',';
        o++;
        o += ms_cluster_stats_json(n->cluster, o < buflen ? buf + o : NULL,
                                   o < buflen ? buflen - o : 0);
    }
    static const char dbkey[] = ",\"database\":";
    if (o + sizeof dbkey - 1 < buflen)
        memcpy(buf + o, dbkey, sizeof dbkey - 1);
    o += sizeof dbkey - 1;
    o += ms_node_db_stats_json(n->db, o < buflen ? buf + o : NULL,
                               o < buflen ? buflen - o : 0);
    static const char pkey[] = ",\"persistence\":";
    if (o + sizeof pkey - 1 < buflen)
        memcpy(buf + o, pkey, sizeof pkey - 1);
    o += sizeof pkey - 1;
    o += ms_node_persist_stats_json(n->persist, o < buflen ? buf + o : NULL,
                                    o < buflen ? buflen - o : 0);
    static const char rkey[] = ",\"remember\":";
    if (o + sizeof rkey - 1 < buflen)
        memcpy(buf + o, rkey, sizeof rkey - 1);
    o += sizeof rkey - 1;
    o += ms_node_remember_stats_json(n->remember,
                                     o < buflen ? buf + o : NULL,
                                     o < buflen ? buflen - o : 0);
    if (o + 1 < buflen) {
        buf[o] = '}';
        buf[o + 1] = 0;
    }
    return o + 1;
}

uint64_t ms_node_pending(struct ms_node *n)
{
    /* a message waiting in the router for its shard's owner is accepted
     * and not handled yet, like one in a shard's FIFO */
    return ms_dispatch_pending(n->d) +
           (n->router ? ms_router_waiting(n->router) : 0);
}

int ms_node_call_lua(struct ms_node *n, const char *module, const char *fn,
                     const char *arg, char **out, char *err, size_t errlen)
{
    int rc = ms_bridge_call(n->b, module, fn, arg, out, err, errlen);
    arm(n);
    return rc;
}

size_t ms_node_lua_gc(struct ms_node *n)
{
    return ms_bridge_gc_full(n->b);
}

int ms_node_gc_headroom_mb(const struct ms_node *n)
{
    return n->cfg.gc_headroom_mb;
}
