/*
 * cluster.c -- membership over the transport.
 *
 * Heartbeat and gossip frames carry the target's uid in `corr`: a frame
 * meant for another incarnation at the same address is dropped. Gossip for
 * a seed whose uid is not known yet (uid 0) is held per address and sent
 * once the connection to that address is authenticated.
 */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "../core/log.h"
#include "../core/mbevent.h"
#include "../core/membership.h"
#include "../moonshard.h"
#include "tls.h"
#include "transport.h"

#define MAX_PENDING_SEEDS 16

struct ms_cluster {
    uv_loop_t *loop;
    const struct ms_config *cfg;
    struct ms_cluster_hooks hooks;
    struct ms_transport *t;
    struct ms_membership *mb;
    struct ms_mbev *events;   /* with hooks.on_event, else NULL */
    uv_timer_t tick;
    uint64_t uid;
    uint64_t coordinator;
    char seed_wait[MAX_PENDING_SEEDS][128]; /* addresses owed a gossip */
    int nseed_wait;
    int closing;
    int self_up_printed;
    uint64_t self_down_at_ms; /* a forced down of this node, due then */
};

/* A forced down of this node's own address is applied this long after
 * the request, so that the HTTP answer leaves before the node stops. */
#define SELF_DOWN_DELAY_MS 200

static uint64_t random_uid(void)
{
    uint64_t u = 0;
    while (u == 0) {
        unsigned char b[8];
        if (uv_random(NULL, NULL, b, sizeof b, 0, NULL) < 0) {
            u = uv_hrtime() ^ (uint64_t)(uintptr_t)&u;
            break;
        }
        memcpy(&u, b, sizeof u);
    }
    return u;
}

static uint64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

static struct ms_frame control_frame(int kind, uint64_t target,
                                     const char *payload, size_t len)
{
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    f.kind = (uint8_t)kind;
    f.corr = target;
    f.payload = payload;
    f.payload_len = len;
    return f;
}

static void send_gossip(struct ms_cluster *c, uint64_t uid)
{
    size_t len;
    char *g = ms_mb_gossip_encode(c->mb, &len);
    if (!g)
        return;
    struct ms_frame f = control_frame(MS_FRAME_GOSSIP, uid, g, len);
    ms_transport_send(c->t, uid, &f);
    free(g);
}

static void owe_seed(struct ms_cluster *c, const char *address)
{
    for (int i = 0; i < c->nseed_wait; i++)
        if (strcmp(c->seed_wait[i], address) == 0)
            return;
    if (c->nseed_wait < MAX_PENDING_SEEDS)
        snprintf(c->seed_wait[c->nseed_wait++], sizeof c->seed_wait[0],
                 "%.127s", address);
}

static void arm(struct ms_cluster *c);

static void on_event(void *data, uint64_t seq, const char *kind,
                     const char *json, size_t len)
{
    struct ms_cluster *c = data;
    c->hooks.on_event(c->hooks.data, seq, kind, json, len);
}

/* Performs the membership's queued actions. Events are made from each
 * action before it is performed, so that a hook sees, say, this node's
 * removal before the node stops. */
static void drain(struct ms_cluster *c)
{
    struct ms_mb_action a;
    while (ms_mb_next_action(c->mb, &a)) {
        if (c->events)
            ms_mbev_on_action(c->events, c->mb, &a, wall_ms(), on_event, c);
        switch (a.kind) {
        case MS_MB_SEND_GOSSIP:
            if (a.uid && ms_transport_connected(c->t, a.uid)) {
                send_gossip(c, a.uid);
            } else {
                if (!a.uid)
                    owe_seed(c, a.address);
                ms_transport_connect(c->t, a.address);
            }
            break;
        case MS_MB_SEND_HEARTBEAT:
            if (ms_transport_connected(c->t, a.uid)) {
                struct ms_frame f =
                    control_frame(MS_FRAME_HEARTBEAT, a.uid, NULL, 0);
                ms_transport_send(c->t, a.uid, &f);
            } else {
                ms_transport_connect(c->t, a.address);
            }
            break;
        case MS_MB_COORDINATOR_CHANGED:
            c->coordinator = a.uid;
            ms_log(MS_LOG_INFO, NULL, "coordinator is now %s",
                   a.uid ? a.name : "(none)");
            if (c->hooks.on_coordinator)
                c->hooks.on_coordinator(c->hooks.data, a.uid);
            break;
        case MS_MB_CONVERGED:
            break;
        case MS_MB_MEMBER_UNREACHABLE:
        case MS_MB_MEMBER_REACHABLE: {
            char f[800];
            ms_log_field_s(f, sizeof f,
                           ms_log_field_s(f, sizeof f, 0, "member", a.name),
                           "address", a.address);
            ms_log(MS_LOG_WARN, f, "member is %s",
                   a.kind == MS_MB_MEMBER_REACHABLE ? "reachable again"
                                                    : "unreachable");
            break;
        }
        default: {
            /* MEMBER_JOINING .. MEMBER_REMOVED */
            char f[800];
            ms_log_field_s(f, sizeof f,
                           ms_log_field_s(f, sizeof f, 0, "member", a.name),
                           "address", a.address);
            ms_log(MS_LOG_INFO, f, "member is %s%s",
                   ms_mb_status_name(a.status), a.is_self ? " (self)" : "");
            if (a.is_self && a.status == MS_MB_UP && !c->self_up_printed) {
                c->self_up_printed = 1;
                printf("moonshard: node %s is Up in cluster %s\n",
                       c->cfg->node_name, c->cfg->cluster);
                fflush(stdout);
            }
            if (c->hooks.on_member)
                c->hooks.on_member(c->hooks.data, a.uid, a.status,
                                   a.is_self);
            if (a.is_self && (a.status == MS_MB_REMOVED ||
                              a.status == MS_MB_DOWN) &&
                c->hooks.on_self_removed)
                c->hooks.on_self_removed(c->hooks.data);
        }
        }
    }
    if (c->events)
        ms_mbev_settle(c->events, c->mb, wall_ms(), on_event, c);
    arm(c);
}

/* Applies a forced down of this node (ms_cluster_down) and tells every
 * connected member at once, since the node stops as soon as the actions
 * are drained. */
static void down_self(struct ms_cluster *c, uint64_t now)
{
    c->self_down_at_ms = 0;
    if (ms_mb_down(c->mb, c->cfg->listen, now) < 0)
        return;
    size_t n = ms_mb_member_count(c->mb);
    for (size_t i = 0; i < n; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(c->mb, i);
        if (m->uid != c->uid && ms_transport_connected(c->t, m->uid))
            send_gossip(c, m->uid);
    }
}

static void on_tick(uv_timer_t *t)
{
    struct ms_cluster *c = t->data;
    uint64_t now = uv_now(c->loop);
    if (c->self_down_at_ms && now >= c->self_down_at_ms)
        down_self(c, now);
    ms_mb_tick(c->mb, now);
    drain(c);
}

static void arm(struct ms_cluster *c)
{
    if (c->closing)
        return;
    uint64_t now = uv_now(c->loop);
    uint64_t in = ms_mb_next_deadline(c->mb, now);
    if (c->self_down_at_ms) {
        uint64_t due = c->self_down_at_ms > now ? c->self_down_at_ms - now
                                                : 0;
        if (due < in)
            in = due;
    }
    uv_timer_start(&c->tick, on_tick, in ? in : 1, 0);
}

/* ---- transport callbacks ----------------------------------------------- */

static void on_peer(void *data, uint64_t uid, const char *name,
                    const char *address, int up)
{
    struct ms_cluster *c = data;
    char f[800];
    ms_log_field_s(f, sizeof f, ms_log_field_s(f, sizeof f, 0, "peer", name),
                   "address", address);
    ms_log(MS_LOG_INFO, f, "connection %s", up ? "authenticated" : "lost");
    if (!up)
        return;
    /* a member's new connection (a dial after a partition healed, or
     * after the transport ended a dead one) gets its heartbeat now, not
     * at the next round: its answer makes the member reachable again a
     * round sooner */
    const struct ms_mb_member *m = ms_mb_find_by_uid(c->mb, uid);
    if (m && uid != c->uid && m->status < MS_MB_DOWN) {
        struct ms_frame hb = control_frame(MS_FRAME_HEARTBEAT, uid, NULL, 0);
        ms_transport_send(c->t, uid, &hb);
    }
    if (c->hooks.on_connected)
        c->hooks.on_connected(c->hooks.data, uid);
    for (int i = 0; i < c->nseed_wait; i++) {
        if (strcmp(c->seed_wait[i], address) == 0) {
            send_gossip(c, uid);
            c->seed_wait[i][0] = 0;
            memmove(c->seed_wait[i], c->seed_wait[i + 1],
                    (size_t)(c->nseed_wait - i - 1) * sizeof c->seed_wait[0]);
            c->nseed_wait--;
            break;
        }
    }
}

/* Both nodes dialed at once and the second connection replaced the
 * first: what the first held unsent (a view request, say) is gone. */
static void on_replaced(void *data, uint64_t uid)
{
    struct ms_cluster *c = data;
    if (c->hooks.on_connected)
        c->hooks.on_connected(c->hooks.data, uid);
}

static void on_frame(void *data, uint64_t uid, const struct ms_frame *f)
{
    struct ms_cluster *c = data;
    uint64_t now = uv_now(c->loop);
    switch (f->kind) {
    case MS_FRAME_HEARTBEAT:
        if (f->corr == c->uid && ms_mb_on_heartbeat(c->mb, uid, now)) {
            struct ms_frame ack =
                control_frame(MS_FRAME_HEARTBEAT_ACK, uid, NULL, 0);
            ms_transport_send(c->t, uid, &ack);
        }
        break;
    case MS_FRAME_HEARTBEAT_ACK:
        if (f->corr == c->uid)
            ms_mb_on_heartbeat_ack(c->mb, uid, now);
        break;
    case MS_FRAME_GOSSIP:
        if (f->corr == c->uid || f->corr == 0) {
            int rc = ms_mb_gossip_merge(c->mb, f->payload, f->payload_len,
                                        uid, now);
            if (rc < 0)
                ms_log(MS_LOG_WARN, NULL, "gossip from %016llx refused: %s",
                       (unsigned long long)uid, ms_strerror(rc));
        }
        break;
    default:
        if (c->hooks.on_frame)
            c->hooks.on_frame(c->hooks.data, uid, f);
        return;
    }
    drain(c);
}

/* ---- public ---------------------------------------------------------- */

static int split_host(const char *address, char *host, size_t hlen, int *port)
{
    const char *colon = strrchr(address, ':');
    if (!colon || (size_t)(colon - address) >= hlen)
        return MS_EINVAL;
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = 0;
    if (host[0] == '[') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    if (strcmp(host, "localhost") == 0)
        snprintf(host, hlen, "127.0.0.1");
    *port = atoi(colon + 1);
    return 0;
}

/*
 * The secret this node authenticates with (issue 9: fail closed). The
 * config check (lua/moonshard/config.lua) already refused a config that
 * lets the node talk to others without a secret, or with a weak one; this
 * checks again so that no path into the host can fall back to a secret
 * anyone could derive. A node alone (one node listed, no seed but its own
 * address) without a secret gets SECRET_RANDOM_BYTES fresh random bytes
 * from the system's CSPRNG, new at every start: nobody can join it.
 * Returns 0, or -1 with the reason in `err`.
 */
#define SECRET_MIN_BYTES 16
#define SECRET_RANDOM_BYTES 32

static int cluster_secret(const struct ms_config *cfg, uint8_t *out,
                          size_t *len, char *err, size_t errlen)
{
    size_t n = strnlen(cfg->secret, sizeof cfg->secret);
    if (n > 0) {
        if (n < SECRET_MIN_BYTES) {
            snprintf(err, errlen, "the cluster secret must be at least %d "
                     "bytes", SECRET_MIN_BYTES);
            return -1;
        }
        memcpy(out, cfg->secret, n);
        *len = n;
        return 0;
    }
    int alone = cfg->nnodes <= 1;
    for (int i = 0; alone && i < cfg->nseeds; i++)
        alone = strcmp(cfg->seeds[i], cfg->listen) == 0;
    if (!alone) {
        snprintf(err, errlen, "no cluster secret: a node that may talk to "
                 "other nodes needs one (`moonshard secret` makes one)");
        return -1;
    }
    int rc = uv_random(NULL, NULL, out, SECRET_RANDOM_BYTES, 0, NULL);
    if (rc < 0) {
        snprintf(err, errlen, "no random bytes for this node's own "
                 "secret: %s", uv_strerror(rc));
        return -1;
    }
    *len = SECRET_RANDOM_BYTES;
    ms_log(MS_LOG_INFO, NULL, "no secret configured: this node runs alone "
           "with a random secret of its own, so no other node can join it");
    return 0;
}

int ms_cluster_start(struct ms_cluster **out, uv_loop_t *loop,
                     const struct ms_config *cfg,
                     const struct ms_cluster_hooks *hooks, char *err,
                     size_t errlen)
{
    struct ms_cluster *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return MS_ENOMEM;
    }
    c->loop = loop;
    c->cfg = cfg;
    c->hooks = *hooks;
    c->uid = random_uid();
    uint8_t secret[sizeof cfg->secret];
    size_t secret_len;
    if (cluster_secret(cfg, secret, &secret_len, err, errlen) < 0) {
        free(c);
        return MS_EINVAL;
    }
    const char *seeds[16];
    for (int i = 0; i < cfg->nseeds; i++)
        seeds[i] = cfg->seeds[i];
    struct ms_mb_self self = {cfg->node_name, cfg->listen, c->uid,
                              cfg->roles[0] ? cfg->roles : NULL,
                              cfg->version[0] ? cfg->version : MS_VERSION,
                              cfg->weight, wall_ms()};
    struct ms_mb_config mcfg;
    memset(&mcfg, 0, sizeof mcfg);
    /* 0 (a config not read by moonshard.config) takes the defaults */
    mcfg.heartbeat_interval_ms = cfg->heartbeat_interval_ms;
    mcfg.unreachable_after_ms = cfg->unreachable_after_ms;
    mcfg.gossip_interval_ms = cfg->gossip_interval_ms;
    mcfg.gossip_fanout = cfg->gossip_fanout;
    mcfg.seed_timeout_ms = cfg->seed_timeout_ms;
    mcfg.lone_leave_ms = cfg->lone_leave_timeout_ms;
    mcfg.seeds = seeds;
    mcfg.nseeds = cfg->nseeds;
    int rc = ms_mb_new(&c->mb, &self, &mcfg);
    if (rc == 0 && hooks->on_event)
        rc = ms_mbev_new(&c->events, cfg->node_name);
    if (rc < 0) {
        snprintf(err, errlen, "membership: %s", ms_strerror(rc));
        ms_mb_free(c->mb);
        free(c);
        return rc;
    }
    char host[128];
    int port;
    if (split_host(cfg->listen, host, sizeof host, &port) < 0) {
        snprintf(err, errlen, "bad listen address %s", cfg->listen);
        ms_mbev_free(c->events);
        ms_mb_free(c->mb);
        free(c);
        return MS_EINVAL;
    }
    struct ms_transport_config tcfg = {
        cfg->cluster, cfg->node_name, cfg->listen, c->uid,
        secret, secret_len, host, port,
        cfg->max_message + 4096, 64u << 20, 5000, NULL};
    if (cfg->tls_ca[0]) {
        /* checked here, before the node listens: a bad file, a key that
         * does not match, a certificate another CA signed */
        struct ms_tls_files files = {cfg->tls_ca, cfg->tls_cert,
                                     cfg->tls_key};
        char why[400];
        rc = ms_tls_ctx_new(&tcfg.tls, MS_TLS_MUTUAL, &files, why,
                            sizeof why);
        if (rc < 0) {
            snprintf(err, errlen, "tls: %s", why);
            memset(secret, 0, sizeof secret);
            ms_mbev_free(c->events);
            ms_mb_free(c->mb);
            free(c);
            return rc;
        }
    }
    struct ms_transport_callbacks tcb = {c, on_peer, on_frame, on_replaced};
    rc = ms_transport_start(&c->t, loop, &tcfg, &tcb, err, errlen);
    /* the transport keeps its own copy */
    memset(secret, 0, sizeof secret);
    if (rc < 0) {
        ms_mbev_free(c->events);
        ms_mb_free(c->mb);
        free(c);
        return rc;
    }
    uv_timer_init(loop, &c->tick);
    c->tick.data = c;
    /* the first tick runs from the loop, once the caller has set up what
     * the hooks reach */
    uv_timer_start(&c->tick, on_tick, 0, 0);
    *out = c;
    return 0;
}

int ms_cluster_leave(struct ms_cluster *c)
{
    /* also from Joining: the leader may have made this node Up and given
     * it shards before it heard so (ms_mb_leave) */
    int rc = ms_mb_leave(c->mb, uv_now(c->loop));
    drain(c);
    return rc;
}

int ms_cluster_down(struct ms_cluster *c, const char *address, int force)
{
    /* Reachability is this node's own observation (heartbeats answered
     * within the last unreachable_after); a member that answers may still own shards,
     * and downing it would let a second node run them (G1). */
    size_t n = ms_mb_member_count(c->mb);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(c->mb, i);
        if (strcmp(m->address, address) != 0)
            continue;
        found = 1;
        if (!force && m->status < MS_MB_DOWN &&
            (m->uid == c->uid || ms_mb_is_reachable(c->mb, m->uid)))
            return MS_EBUSY;
    }
    if (!found)
        return MS_EINVAL;
    if (strcmp(address, c->cfg->listen) == 0) {
        /* this node: answer first, then go (see down_self) */
        if (!c->self_down_at_ms)
            c->self_down_at_ms = uv_now(c->loop) + SELF_DOWN_DELAY_MS;
        arm(c);
        return 0;
    }
    int rc = ms_mb_down(c->mb, address, uv_now(c->loop));
    drain(c);
    return rc;
}

void ms_cluster_set_owns_shards(struct ms_cluster *c, uint64_t uid, int owns)
{
    ms_mb_set_owns_shards(c->mb, uid, owns, uv_now(c->loop));
    drain(c);
}

int ms_cluster_send(struct ms_cluster *c, uint64_t uid,
                    const struct ms_frame *f)
{
    return ms_transport_send(c->t, uid, f);
}

uint64_t ms_cluster_self_uid(struct ms_cluster *c)
{
    return c->uid;
}

uint64_t ms_cluster_coordinator(struct ms_cluster *c)
{
    return c->coordinator;
}

int ms_cluster_member_usable(struct ms_cluster *c, uint64_t uid)
{
    const struct ms_mb_member *m = ms_mb_find_by_uid(c->mb, uid);
    return m && (m->status == MS_MB_UP || m->status == MS_MB_LEAVING) &&
           (uid == c->uid || ms_mb_is_reachable(c->mb, uid));
}

const char *ms_cluster_member_name(struct ms_cluster *c, uint64_t uid)
{
    const struct ms_mb_member *m = ms_mb_find_by_uid(c->mb, uid);
    return m ? m->name : NULL;
}

size_t ms_cluster_members_json(struct ms_cluster *c, char *buf, size_t len)
{
    return ms_mb_status_json(c->mb, buf, len);
}

size_t ms_cluster_stats_json(struct ms_cluster *c, char *buf, size_t len)
{
    struct ms_transport_stats s;
    ms_transport_stats(c->t, &s);
    int n = snprintf(buf, len,
                     "\"frames_in\":%llu,\"frames_out\":%llu,"
                     "\"rejected_frames\":%llu,\"auth_failures\":%llu,"
                     "\"slow_peer_drops\":%llu,\"link_drops\":%llu,"
                     "\"handshake_overflows\":%llu,"
                     "\"handshake_evictions\":%llu,"
                     "\"handshake_timeouts\":%llu,"
                     "\"handshake_failures\":%llu",
                     (unsigned long long)s.frames_in,
                     (unsigned long long)s.frames_out,
                     (unsigned long long)s.rejected_frames,
                     (unsigned long long)s.auth_failures,
                     (unsigned long long)s.slow_peer_drops,
                     (unsigned long long)s.link_drops,
                     (unsigned long long)s.handshake_overflows,
                     (unsigned long long)s.handshake_evictions,
                     (unsigned long long)s.handshake_timeouts,
                     (unsigned long long)s.handshake_failures);
    return n < 0 ? 0 : (size_t)n;
}

struct ms_membership *ms_cluster_membership(struct ms_cluster *c)
{
    return c->mb;
}

static void on_tick_closed(uv_handle_t *h)
{
    struct ms_cluster *c = h->data;
    ms_mbev_free(c->events);
    ms_mb_free(c->mb);
    free(c);
}

void ms_cluster_close(struct ms_cluster *c)
{
    c->closing = 1;
    ms_transport_close(c->t);
    uv_close((uv_handle_t *)&c->tick, on_tick_closed);
}
