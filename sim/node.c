/*
 * node.c -- the simulator's binding of one node's core objects: the
 * region's actions and sweep (mirroring runtime/io/router.c), the
 * dispatcher's rounds and the handlers (runtime/node/node.c and the Lua
 * bridge's loop, with C handlers), membership over the simulated
 * transport (runtime/io/cluster.c), the lease statements' way to the
 * simulated table, and a node's start, crash and stop. See sim.c for the
 * world around it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

/* --- nodes: the region's glue (runtime/io/router.c) ------------------------ */

/* router.c usable(): ms_cluster_member_usable */
static int usable_cb(void *data, uint64_t uid)
{
    struct node *n = data;
    const struct ms_mb_member *m = ms_mb_find_by_uid(n->mb, uid);
    return m && (m->status == MS_MB_UP || m->status == MS_MB_LEAVING) &&
           (uid == n->uid || ms_mb_is_reachable(n->mb, uid));
}

/* The stand-in of the Lua allocation strategy: the least loaded host,
 * Leaving members last, then the lowest uid (the view is in uid order). */
static uint64_t allocate_cb(void *data, int type, uint32_t shard,
                            const struct ms_coord_view *v, char *err,
                            size_t errlen)
{
    (void)data, (void)type, (void)shard;
    const struct ms_coord_host *best = NULL;
    for (size_t i = 0; i < v->nhosts; i++) {
        const struct ms_coord_host *h = &v->hosts[i];
        if (!best || h->leaving < best->leaving ||
            (h->leaving == best->leaving && h->shards < best->shards))
            best = h;
    }
    if (!best)
        snprintf(err, errlen, "no host for %s", v->type_name);
    return best ? best->uid : 0;
}

/* The stand-in of the Lua allocate_many (runtime/io/strategy_view.c): each
 * shard placed by allocate_cb over the view one allocate per shard would
 * give (coordinator.h): the hosts' counts as the owners say, with the
 * shard and the ones after it unassigned at the old owner only once
 * their turn came, the ones before it on their choice. A run is the same
 * as with allocate alone. It declines the batches of some first shards,
 * so that the coordinator's one-by-one path (its fallback) runs too. */
static int allocate_many_cb(void *data, int type, const uint32_t *shards,
                            size_t n, const struct ms_coord_view *v,
                            uint64_t *out, char *err, size_t errlen)
{
    if (shards[0] % 3 == 0)
        return -1;
    struct ms_coord_host *h = malloc(v->nhosts * sizeof *h);
    if (!h)
        return -1;
    memcpy(h, v->hosts, v->nhosts * sizeof *h);
    struct ms_coord_view vi = *v;
    vi.hosts = h;
    uint64_t from = v->owners[shards[0]];
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < v->nhosts; j++)
            if (h[j].uid == from && h[j].shards)
                h[j].shards--; /* shards[i] unassigned */
        out[i] = allocate_cb(data, type, shards[i], &vi, err + i * errlen,
                             errlen);
        for (size_t j = 0; j < v->nhosts; j++)
            if (h[j].uid == out[i])
                h[j].shards++;
    }
    free(h);
    return 0;
}

/* The stand-in of a rebalance strategy: one shard of the most loaded
 * non-leaving host when it has two more than the least loaded. */
static int rebalance_cb(void *data, int type, const struct ms_coord_view *v,
                        uint32_t *out, size_t max, char *err, size_t errlen)
{
    (void)data, (void)type, (void)err, (void)errlen;
    const struct ms_coord_host *hi = NULL, *lo = NULL;
    for (size_t i = 0; i < v->nhosts; i++) {
        const struct ms_coord_host *h = &v->hosts[i];
        if (h->leaving)
            continue;
        if (!hi || h->shards > hi->shards)
            hi = h;
        if (!lo || h->shards < lo->shards)
            lo = h;
    }
    if (!hi || !lo || max < 1 || hi->shards < lo->shards + 2)
        return 0;
    for (uint32_t s = 0; s < v->shard_count; s++)
        if (v->owners[s] == hi->uid && !v->moving[s]) {
            out[0] = s;
            return 1;
        }
    return 0;
}

static void lease_submit(struct node *n, const struct ms_lease_action *la);

/* router.c send_to(): CONTROL to itself is queued, fed back later. */
static int send_to(struct node *n, uint64_t uid, const struct ms_frame *f)
{
    int s = slot_index(n);
    if (uid == n->uid) {
        if (f->kind != MS_FRAME_CONTROL)
            return SIM_ENOTCONN;
        struct ev *e = ev_new(EV_SELF_CTRL, W.now, s);
        e->buf = malloc(f->payload_len + 1);
        if (!e->buf)
            exit(2);
        memcpy(e->buf, f->payload, f->payload_len);
        e->buf[f->payload_len] = 0;
        e->f.payload_len = f->payload_len;
        push(e);
        return 0;
    }
    return net_send(s, uid, f);
}

/* router.c drain() */
void rg_drain(struct node *n)
{
    struct ms_region_action a;
    if (n->draining || !n->rg)
        return;
    n->draining = 1;
    while (ms_region_next_action(n->rg, &a)) {
        if (a.kind == MS_REGION_SEND) {
            if (a.frame.kind != MS_FRAME_CONTROL)
                trace(slot_index(n), "send %s to %016llx %.*s shard %u gen "
                      "%llu", ms_frame_kind_name(a.frame.kind),
                      (unsigned long long)a.uid, (int)a.frame.id_len,
                      a.frame.id, a.frame.shard,
                      (unsigned long long)a.frame.generation);
            int rc = send_to(n, a.uid, &a.frame);
            if (rc < 0)
                ms_region_send_failed(n->rg, &a, rc == SIM_ENOTCONN,
                                      node_now(n));
        } else if (a.kind == MS_REGION_BROADCAST) {
            size_t cnt = ms_mb_member_count(n->mb);
            uint64_t uids[MS_MB_MAX_MEMBERS];
            size_t k = 0;
            for (size_t i = 0; i < cnt && k < MS_MB_MAX_MEMBERS; i++) {
                const struct ms_mb_member *m = ms_mb_member_at(n->mb, i);
                if (m && m->status <= MS_MB_EXITING)
                    uids[k++] = m->uid;
            }
            for (size_t i = 0; i < k; i++)
                send_to(n, uids[i], &a.frame);
        } else if (a.kind == MS_REGION_KICK) {
            node_arm(n);
        } else if (a.kind == MS_REGION_LEASE) {
            lease_submit(n, &a.lease);
        }
        ms_region_action_free(&a);
    }
    n->draining = 0;
}

/* router.c on_wake() */
static void wake_cb(void *data)
{
    struct node *n = data;
    if (n->alive && !n->stopping)
        rg_drain(n);
}

/* router.c release_leavers() */
static void release_leavers(struct node *n)
{
    struct ms_coord *coord = ms_region_coord(n->rg);
    size_t cnt = ms_mb_member_count(n->mb);
    int any_up = 0, all_reachable = 1;
    uint64_t now = node_now(n);
    for (size_t i = 0; i < cnt; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(n->mb, i);
        any_up |= m && m->status == MS_MB_UP;
        if (m) {
            int reach = ms_mb_is_reachable(n->mb, m->uid);
            ms_coord_member_reachable(coord, m->uid, reach);
            if (!reach && m->uid != n->uid &&
                (m->status == MS_MB_UP || m->status == MS_MB_LEAVING))
                all_reachable = 0;
        }
    }
    ms_region_members_reachable(n->rg, all_reachable, now);
    for (size_t i = 0; i < cnt; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(n->mb, i);
        if (m && m->status == MS_MB_LEAVING && m->owns_shards &&
            (!any_up || ms_coord_leave_done(coord, m->uid))) {
            /* ms_cluster_set_owns_shards */
            ms_mb_set_owns_shards(n->mb, m->uid, 0, now);
            mb_drain(n);
        }
    }
}

/* router.c on_sweep(), every MS_REGION_TICK_MS */
void on_sweep(struct node *n)
{
    ms_region_tick(n->rg, node_now(n));
    rg_drain(n);
    release_leavers(n);
    rg_drain(n);
    later(EV_SWEEP, MS_REGION_TICK_MS, slot_index(n));
}

/* router.c ms_router_on_coordinator() */
static void on_coordinator(struct node *n, uint64_t uid)
{
    uint64_t now = node_now(n);
    ms_region_on_coordinator(n->rg, uid, now);
    if (uid == n->uid) {
        struct ms_coord *coord = ms_region_coord(n->rg);
        for (size_t i = 0; i < ms_mb_member_count(n->mb); i++) {
            const struct ms_mb_member *m = ms_mb_member_at(n->mb, i);
            if (m && m->status == MS_MB_LEAVING)
                ms_coord_member_leaving(coord, m->uid, now);
            else if (m && m->status == MS_MB_EXITING)
                ms_coord_member_removed(coord, m->uid, now);
        }
    }
    rg_drain(n);
}

/* --- nodes: the dispatcher's rounds (node.c on_work, and the bridge) ------- */

static int ent_of(int type, const char *id, size_t idlen)
{
    for (int i = 0; i < W.nents; i++)
        if (W.ents[i].type == type && strlen(W.ents[i].id) == idlen &&
            memcmp(W.ents[i].id, id, idlen) == 0)
            return i;
    return -1;
}

/* ms_dispatch_observer: what is active where (check.c reads it). */
static void observer_cb(void *data, int type, uint32_t shard, const char *id,
                        size_t idlen, int started, int reason)
{
    struct node *n = data;
    (void)shard, (void)reason;
    int e = ent_of(type, id, idlen);
    if (e < 0)
        return;
    if (started && !n->active[e]) {
        n->active[e] = 1;
        if (++W.act_count[e] > 1)
            W.check_dup = 1;
    } else if (!started && n->active[e]) {
        n->active[e] = 0;
        W.act_count[e]--;
    }
}

/* A persistent entity's write: the commit goes to the table with the
 * epoch the region says is usable now (node_persist.c refuses locally
 * without one), and is checked there after a seeded latency. */
static void commit(struct node *n, int ent)
{
    const struct entity *en = &W.ents[ent];
    uint64_t epoch = ms_region_lease_epoch_at(n->rg, en->type, en->shard,
                                              node_now(n));
    if (!epoch)
        return;
    uint64_t r = rnd(1000), lat;
    if (r < 900)
        lat = 1 + rnd(10);
    else if (r < 990)
        lat = 10 + rnd(300);
    else
        lat = 500 + rnd(2500);
    if (W.now < W.db_slow_until)
        lat += 1500 + rnd(2500);
    struct ev *e = ev_new(EV_COMMIT, W.now + lat, slot_index(n));
    e->ent = ent;
    e->epoch = epoch;
    e->from = n->inc;
    snprintf(e->owner, sizeof e->owner, "%s", n->name);
    push(e);
}

/* The handlers: a counter per entity and, per sender, the last sequence
 * number seen (check_delivery checks FIFO across the whole cluster). */
static void run_handlers(struct node *n)
{
    struct ms_delivery dl;
    uint64_t now = node_now(n);
    for (int k = 0; k < ROUND_BUDGET && ms_dispatch_next(n->d, &dl); k++) {
        int ent = ent_of((int)dl.type, dl.id, dl.idlen);
        if ((dl.kind == MS_KIND_TELL || dl.kind == MS_KIND_ASK) &&
            ent >= 0 && dl.payload) {
            unsigned long long m = 0, s = 0, q = 0;
            if (sscanf(dl.payload, "{\"m\":%llu,\"s\":%llu,\"q\":%llu}", &m,
                       &s, &q) == 3 && m < W.nmsgs) {
                trace(slot_index(n), "deliver %s #%llu from i%llu q%llu",
                      W.ents[ent].id, m, s, q);
                check_delivery(slot_index(n), ent, (int)s, q, (size_t)m);
                if (W.ents[ent].type == 1)
                    commit(n, ent);
            }
        }
        if (dl.kind == MS_KIND_ASK || dl.kind == MS_KIND_ACTIVATE)
            ms_dispatch_reply(n->d, dl.h, "{\"ok\":true}", 11, now);
        ms_dispatch_done(n->d, dl.h, now);
    }
    struct ms_resume r;
    while (ms_dispatch_next_resume(n->d, &r))
        ; /* no handler of the sim asks: nothing to resume */
}

/* node.c arm(): the idle handle while the dispatcher has work, and the
 * timer of its next deadline. */
void node_arm(struct node *n)
{
    if (!n->alive || n->stopping)
        return;
    int s = slot_index(n);
    if (ms_dispatch_has_work(n->d) && !n->work_armed) {
        n->work_armed = 1;
        later(EV_WORK, 0, s);
    }
    int64_t in = ms_dispatch_next_deadline(n->d, node_now(n));
    if (in >= 0) {
        uint64_t due = W.now + (uint64_t)in;
        if (due != n->dt_due) {
            n->dt_due = due;
            struct ev *e = ev_new(EV_DTICK, due, s);
            e->gen = ++n->dt_token;
            push(e);
        }
    }
}

/* node.c on_work() */
void on_work(struct node *n)
{
    n->work_armed = 0;
    ms_dispatch_expire(n->d, node_now(n));
    run_handlers(n);
    ms_region_after_dispatch(n->rg, node_now(n));
    if (ms_region_pending(n->rg))
        rg_drain(n);
    node_arm(n);
}

/* --- nodes: membership's glue (runtime/io/cluster.c) ---------------------- */

static struct ms_frame mb_frame(int kind, uint64_t target, const char *p,
                                size_t len)
{
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    f.kind = (uint8_t)kind;
    f.corr = target;
    f.payload = p;
    f.payload_len = len;
    return f;
}

/* cluster.c send_gossip() */
static void send_gossip(struct node *n, uint64_t uid)
{
    size_t len;
    char *g = ms_mb_gossip_encode(n->mb, &len);
    if (!g)
        return;
    struct ms_frame f = mb_frame(MS_FRAME_GOSSIP, uid, g, len);
    net_send(slot_index(n), uid, &f);
    free(g);
}

/* cluster.c owe_seed() */
static void owe_seed(struct node *n, const char *address)
{
    for (int i = 0; i < n->nowed; i++)
        if (strcmp(n->owed[i], address) == 0)
            return;
    if (n->nowed < SIM_MAX_SLOTS)
        snprintf(n->owed[n->nowed++], sizeof n->owed[0], "%.31s", address);
}

static void mb_arm(struct node *n)
{
    if (!n->alive || n->stopping)
        return;
    uint64_t in = ms_mb_next_deadline(n->mb, node_now(n));
    if (in == UINT64_MAX)
        return;
    uint64_t due = W.now + (in ? in : 1);
    if (due == n->mb_due)
        return;
    n->mb_due = due;
    struct ev *e = ev_new(EV_MB_TICK, due, slot_index(n));
    e->gen = ++n->mb_token;
    push(e);
}

/* cluster.c drain(), with node.c's hooks (on_coordinator, on_member,
 * on_self_removed) */
void mb_drain(struct node *n)
{
    struct ms_mb_action a;
    int s = slot_index(n);
    while (ms_mb_next_action(n->mb, &a)) {
        switch (a.kind) {
        case MS_MB_SEND_GOSSIP:
            if (a.uid && connected(s, a.uid)) {
                send_gossip(n, a.uid);
            } else {
                if (!a.uid)
                    owe_seed(n, a.address);
                dial(s, a.address);
            }
            break;
        case MS_MB_SEND_HEARTBEAT:
            if (connected(s, a.uid)) {
                struct ms_frame f =
                    mb_frame(MS_FRAME_HEARTBEAT, a.uid, NULL, 0);
                net_send(s, a.uid, &f);
            } else {
                dial(s, a.address);
            }
            break;
        case MS_MB_COORDINATOR_CHANGED:
            n->coordinator = a.uid;
            trace(s, "coordinator is now %s", a.uid ? a.name : "(none)");
            if (!n->stopping)
                on_coordinator(n, a.uid);
            break;
        case MS_MB_CONVERGED:
            break;
        case MS_MB_MEMBER_UNREACHABLE:
        case MS_MB_MEMBER_REACHABLE:
            trace(s, "member %s is %s", a.name,
                  a.kind == MS_MB_MEMBER_REACHABLE ? "reachable"
                                                   : "unreachable");
            break;
        default:
            trace(s, "member %s (%016llx) is %s%s", a.name,
                  (unsigned long long)a.uid, ms_mb_status_name(a.status),
                  a.is_self ? " (self)" : "");
            if (!n->stopping) {
                ms_region_member(n->rg, a.uid, a.status, node_now(n));
                if (a.status == MS_MB_LEAVING)
                    release_leavers(n);
                rg_drain(n);
                node_arm(n);
            }
            /* node.c on_self_removed: the node stops (at the end of this
             * event, as node_close runs after the drain returns) */
            if (a.is_self &&
                (a.status == MS_MB_REMOVED || a.status == MS_MB_DOWN))
                n->stopping = 1;
        }
    }
    mb_arm(n);
}

/* transport.c on a connection authenticated, and cluster.c on_peer(up) */
void on_peer_up(int a, int b)
{
    struct node *n = &W.n[a];
    if (!n->alive || n->stopping)
        return;
    uint64_t uid = W.n[b].uid;
    const struct ms_mb_member *m = ms_mb_find_by_uid(n->mb, uid);
    if (m && m->status < MS_MB_DOWN) {
        struct ms_frame hb = mb_frame(MS_FRAME_HEARTBEAT, uid, NULL, 0);
        net_send(a, uid, &hb);
    }
    /* node.c on_connected, router.c ms_router_on_connected: a member that
     * has not answered the coordinator's view request is asked again */
    ms_region_peer_connected(n->rg, uid, node_now(n));
    rg_drain(n);
    for (int i = 0; i < n->nowed; i++) {
        if (strcmp(n->owed[i], W.n[b].addr) == 0) {
            send_gossip(n, uid);
            memmove(n->owed[i], n->owed[i + 1],
                    (size_t)(n->nowed - i - 1) * sizeof n->owed[0]);
            n->nowed--;
            break;
        }
    }
    mb_drain(n);
}

/* cluster.c on_frame() (and node.c on_cluster_frame, router.c
 * ms_router_on_frame for the rest) */
void on_frame(struct node *n, uint64_t from, const struct ms_frame *f)
{
    int s = slot_index(n);
    uint64_t now = node_now(n);
    switch (f->kind) {
    case MS_FRAME_HEARTBEAT:
        if (f->corr == n->uid && ms_mb_on_heartbeat(n->mb, from, now)) {
            struct ms_frame ack =
                mb_frame(MS_FRAME_HEARTBEAT_ACK, from, NULL, 0);
            net_send(s, from, &ack);
        }
        break;
    case MS_FRAME_HEARTBEAT_ACK:
        if (f->corr == n->uid)
            ms_mb_on_heartbeat_ack(n->mb, from, now);
        break;
    case MS_FRAME_GOSSIP:
        if (f->corr == n->uid || f->corr == 0)
            ms_mb_gossip_merge(n->mb, f->payload, f->payload_len, from, now);
        break;
    default:
        if (f->kind == MS_FRAME_CONTROL)
            trace(s, "control from %016llx %.*s", (unsigned long long)from,
                  (int)(f->payload_len > 120 ? 120 : f->payload_len),
                  f->payload);
        else
            trace(s, "%s from %016llx %.*s shard %u gen %llu",
                  ms_frame_kind_name(f->kind), (unsigned long long)from,
                  (int)f->id_len, f->id, f->shard,
                  (unsigned long long)f->generation);
        ms_region_on_frame(n->rg, from, f, now);
        if (ms_region_pending(n->rg))
            rg_drain(n);
        node_arm(n);
        return;
    }
    mb_drain(n);
}

/* --- the lease table's latency -------------------------------------------- */

static void lease_submit(struct node *n, const struct ms_lease_action *la)
{
    uint64_t l1 = 1 + rnd(5), r = rnd(1000);
    if (r > 990)
        l1 += 200 + rnd(1500);
    if (W.now < W.db_slow_until)
        l1 += 1500 + rnd(4000);
    struct ev *e = ev_new(EV_LEASE_EXEC, W.now + l1, slot_index(n));
    e->la = *la;
    snprintf(e->owner, sizeof e->owner, "%s", la->owner ? la->owner : "");
    e->la.owner = NULL;
    uint64_t f = rnd(1000);
    e->fail = f < 10 ? 1 : f < 20 ? 2 : 0;
    push(e);
}

void on_lease_exec(struct ev *e)
{
    e->la.owner = e->owner;
    struct ms_lease_answer a;
    if (e->fail == 1) {
        memset(&a, 0, sizeof a);
        a.kind = MS_LEASE_ANS_DB_ERROR;
        a.type = e->la.type;
        a.shard = e->la.shard;
        a.req = e->la.req;
    } else {
        leasedb_exec(&W.db, &e->la, (int64_t)W.now + W.db_off, &a);
        if (e->fail == 2) {
            a.kind = MS_LEASE_ANS_DB_ERROR; /* the answer was lost */
            a.epoch = 0;
        }
    }
    trace(-1, "db %s %s/%u by %s epoch %llu -> %d epoch %llu", 
          e->la.kind == MS_LEASE_ACQUIRE ? "acquire"
          : e->la.kind == MS_LEASE_RENEW ? "renew" : "release",
          W.n[0].tc[e->la.type].name, e->la.shard, e->owner,
          (unsigned long long)e->la.epoch, a.kind,
          (unsigned long long)a.epoch);
    struct ev *b = ev_new(EV_LEASE_ANS, W.now + 1 + rnd(5), e->slot);
    b->uid = e->uid;
    b->ans = a;
    push(b);
}

/* --- node life ------------------------------------------------------------ */

void node_start(int s)
{
    struct node *n = &W.n[s];
    if (W.ninc >= SIM_MAX_INCS)
        return;
    uint8_t *active = n->active;
    struct ev **def = n->deferred;
    size_t capdef = n->capdeferred;
    memset(n, 0, sizeof *n);
    n->active = active;
    memset(n->active, 0, (size_t)W.nents);
    n->deferred = def;
    n->capdeferred = capdef;
    n->started = 1;
    snprintf(n->name, sizeof n->name, "n%d", s + 1);
    snprintf(n->addr, sizeof n->addr, "10.0.0.%d:7000", s + 1);
    do
        n->uid = sim_rng_next(&W.rng);
    while (n->uid == 0 || slot_of_uid(n->uid) >= 0);
    n->alive = 1;
    n->inc = W.ninc++;
    W.inc_uid[n->inc] = n->uid;
    W.inc_alive[n->inc] = 1;
    n->clock_off = (int64_t)(1000 + rnd(1000000));
    for (int t = 0; t < SIM_NTYPES; t++) {
        struct ms_type_config *tc = &n->tc[t];
        snprintf(tc->name, sizeof tc->name, t ? "Account" : "Counter");
        tc->shard_count = t ? SIM_ACCOUNT_SHARDS : SIM_COUNTER_SHARDS;
        tc->max_pending = 100000;
        snprintf(tc->partition_id, sizeof tc->partition_id, "fnv1a");
        if (t == 1) {
            tc->persistence = MS_PERSIST_STATE;
            tc->lease_duration_ms = SIM_LEASE_MS;
            tc->lease_renew_interval_ms = SIM_RENEW_MS;
            tc->lease_window_ms = SIM_WINDOW_MS;
        }
    }
    n->cfg.ntypes = SIM_NTYPES;
    n->cfg.types = n->tc;
    n->cfg.max_message = 4096;
    n->cfg.json_max_depth = 32;
    n->cfg.handoff_timeout_ms = SIM_HANDOFF_MS;
    n->cfg.rebalance_interval_ms = 10000;
    memcpy(n->cfg.node_name, n->name, sizeof n->name);
    memcpy(n->cfg.listen, n->addr, sizeof n->addr);
    struct ms_dispatch_type dt[SIM_NTYPES] = {
        {"Counter", SIM_COUNTER_SHARDS, 0, 0, 100000, 0},
        {"Account", SIM_ACCOUNT_SHARDS, 0, 0, 100000, 0}};
    n->d = ms_dispatch_new(dt, SIM_NTYPES, 4096);
    for (int t = 0; t < SIM_NTYPES; t++)
        ms_dispatch_set_observer(n->d, t, observer_cb, n);
    const char *seeds[3];
    for (int i = 0; i < 3; i++)
        seeds[i] = W.n[i].addr[0] ? W.n[i].addr : "10.0.0.1:7000";
    char seedbuf[3][32];
    for (int i = 0; i < 3; i++) {
        snprintf(seedbuf[i], sizeof seedbuf[i], "10.0.0.%d:7000", i + 1);
        seeds[i] = seedbuf[i];
    }
    struct ms_mb_self self = {n->name, n->addr, n->uid, NULL, NULL, 1,
                              1000000000000ULL + W.now};
    struct ms_mb_config mcfg;
    memset(&mcfg, 0, sizeof mcfg);
    mcfg.seeds = seeds;
    mcfg.nseeds = 3;
    struct ms_region_config rc;
    memset(&rc, 0, sizeof rc);
    rc.self_uid = n->uid;
    rc.cfg = &n->cfg;
    rc.d = n->d;
    rc.usable = usable_cb;
    rc.allocate = allocate_cb;
    rc.allocate_many = allocate_many_cb;
    rc.rebalance = rebalance_cb;
    rc.data = n;
    rc.wake = wake_cb;
    rc.wake_data = n;
    if (!n->d || ms_mb_new(&n->mb, &self, &mcfg) < 0 ||
        ms_region_new(&n->rg, &rc) < 0) {
        fprintf(stderr, "moonshard-sim: cannot create node %s\n", n->name);
        exit(2);
    }
    trace(s, "start, uid %016llx (incarnation i%d)",
          (unsigned long long)n->uid, n->inc);
    /* cluster.c: the first tick runs at once; router.c: the sweep */
    n->mb_due = W.now;
    struct ev *e = ev_new(EV_MB_TICK, W.now, s);
    e->gen = ++n->mb_token;
    push(e);
    later(EV_SWEEP, MS_REGION_TICK_MS, s);
}

/* The process ends: its memory is gone, its connections close. */
void node_free(int s)
{
    struct node *n = &W.n[s];
    for (int e = 0; e < W.nents; e++)
        if (n->active[e]) {
            n->active[e] = 0;
            W.act_count[e]--;
        }
    for (int t = 0; t < SIM_NTYPES; t++)
        ms_dispatch_set_observer(n->d, t, NULL, NULL);
    n->alive = 0;
    W.inc_alive[n->inc] = 0;
    W.inc_stop_t[n->inc] = W.now;
    /* the dispatcher first: its free ends the asks still open, and the
     * region's own waiters (requests of other nodes) need the region
     * alive then (router.c, on_closed) */
    ms_dispatch_free(n->d);
    ms_region_free(n->rg);
    ms_mb_free(n->mb);
    n->rg = NULL;
    n->d = NULL;
    n->mb = NULL;
    for (int b = 0; b < W.nslots; b++)
        if (b != s)
            conn_close(s, b, "peer gone");
    for (size_t i = 0; i < n->ndeferred; i++)
        ev_free(n->deferred[i]);
    n->ndeferred = 0;
    if (n->paused) {
        n->paused = 0;
        W.paused_count--;
    }
}

void node_crash(int s, const char *why)
{
    if (!W.n[s].alive)
        return;
    trace(s, "crash (%s)", why);
    node_free(s);
}

/* node.c ms_node_close() after on_self_removed: the router cancels what
 * waits (router.c ms_router_close) and the process exits. */
void node_close(int s)
{
    struct node *n = &W.n[s];
    trace(s, "stops: removed or downed");
    ms_region_cancel_all(n->rg);
    n->stopping = 0;
    n->draining = 0;
    rg_drain(n);
    n->left = 1;
    node_free(s);
}

