/*
 * sim.c -- the simulated world: the PRNG, the trace, the virtual clock and
 * its event queue, the network (runtime/io/transport.c: one connection per
 * peer pair, "connected" meaning authenticated), clients, faults and the
 * loop. The glue that binds each node's real core objects to it is in
 * node.c; it mirrors the node's I/O layer and adds nothing to the
 * protocol.
 *
 * The network. Each pair of nodes has at most one connection, dialed by
 * the glue as cluster.c dials (a heartbeat or gossip to a member that is
 * not connected dials its address). Each direction is FIFO: a frame is
 * delivered at max(now + a seeded delay, the last delivery of that
 * direction). A cut closes the connection: frames in flight are lost and
 * both ends see it down; the next heartbeat dials again. A partition
 * holds the frames of the directions it blocks, as TCP would (the kernel
 * retransmits): they arrive when it heals, unless the connection was
 * ended first -- after SIM_USER_TIMEOUT_MS blocked, as the transport's
 * TCP_USER_TIMEOUT does -- and then they are lost. Dials fail while a
 * direction is blocked or the peer is dead or paused. A paused node runs
 * nothing: every event meant for it waits, in order, until it resumes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

struct world W;

/* --- PRNG: splitmix64 seeds xoshiro256** ------------------------------- */

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sim_rng_seed(struct sim_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t sim_rng_next(struct sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t sim_rng_below(struct sim_rng *r, uint64_t n)
{
    return sim_rng_next(r) % n;
}

uint64_t rnd(uint64_t n)
{
    return n ? sim_rng_below(&W.rng, n) : 0;
}

/* --- the trace ------------------------------------------------------------ */

static uint64_t fnv_add(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void trace(int slot, const char *fmt, ...)
{
    char *line = W.ring[W.ring_at];
    int o = snprintf(line, sizeof W.ring[0], "%6llu.%03llu %-3s ",
                     (unsigned long long)(W.now / 1000),
                     (unsigned long long)(W.now % 1000),
                     slot >= 0 ? W.n[slot].name : "--");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + o, sizeof W.ring[0] - (size_t)o, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    W.checksum = fnv_add(W.checksum, line, len);
    W.checksum = fnv_add(W.checksum, "\n", 1);
    W.ring_at = (W.ring_at + 1) % SIM_TRACE_RING;
    if (W.ring_n < SIM_TRACE_RING)
        W.ring_n++;
    if (W.o->trace)
        printf("%s\n", line);
}

void violation(const char *inv, const char *fmt, ...)
{
    if (W.failed)
        return;
    W.failed = 1;
    W.res->failed = 1;
    snprintf(W.res->invariant, sizeof W.res->invariant, "%s", inv);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(W.res->message, sizeof W.res->message, fmt, ap);
    va_end(ap);
    if (W.o->quiet)
        return;
    printf("INVARIANT VIOLATED: %s: %s\n", inv, W.res->message);
    printf("seed %llu, at %llu ms; the last %d trace lines:\n",
           (unsigned long long)W.o->seed, (unsigned long long)W.now,
           W.ring_n);
    for (int i = 0; i < W.ring_n; i++) {
        int k = (W.ring_at - W.ring_n + i + SIM_TRACE_RING) % SIM_TRACE_RING;
        printf("  %s\n", W.ring[k]);
    }
}

/* --- the event queue: a binary heap on (t, seq) ---------------------------- */

static int ev_less(const struct ev *a, const struct ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

struct ev *ev_new(int kind, uint64_t t, int slot)
{
    struct ev *e = calloc(1, sizeof *e);
    if (!e) {
        fprintf(stderr, "moonshard-sim: out of memory\n");
        exit(2);
    }
    e->kind = kind;
    e->t = t;
    e->slot = slot;
    e->uid = slot >= 0 ? W.n[slot].uid : 0;
    return e;
}

void ev_free(struct ev *e)
{
    if (e) {
        free(e->buf);
        free(e);
    }
}

void push(struct ev *e)
{
    e->seq = ++W.seq;
    if (W.nheap == W.capheap) {
        W.capheap = W.capheap ? 2 * W.capheap : 1024;
        W.heap = realloc(W.heap, W.capheap * sizeof *W.heap);
        if (!W.heap)
            exit(2);
    }
    size_t i = W.nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(e, W.heap[p]))
            break;
        W.heap[i] = W.heap[p];
        i = p;
    }
    W.heap[i] = e;
}

static struct ev *pop(void)
{
    if (!W.nheap)
        return NULL;
    struct ev *top = W.heap[0];
    struct ev *last = W.heap[--W.nheap];
    size_t i = 0, n = W.nheap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct ev *best = last;
        if (l < n && ev_less(W.heap[l], best)) {
            m = l;
            best = W.heap[l];
        }
        if (r < n && ev_less(W.heap[r], best))
            m = r;
        if (m == i)
            break;
        W.heap[i] = W.heap[m];
        i = m;
    }
    if (n)
        W.heap[i] = last;
    return top;
}

void later(int kind, uint64_t in_ms, int slot)
{
    push(ev_new(kind, W.now + in_ms, slot));
}

/* --- nodes: helpers ------------------------------------------------------- */

uint64_t node_now(const struct node *n)
{
    return W.now + (uint64_t)n->clock_off;
}

int slot_of_uid(uint64_t uid)
{
    for (int s = 0; s < W.nslots; s++)
        if (W.n[s].alive && W.n[s].uid == uid)
            return s;
    return -1;
}

static struct conn *conn_of(int a, int b)
{
    return a < b ? &W.c[a][b] : &W.c[b][a];
}

/* 1 when a's end of the connection to `uid` is authenticated
 * (ms_transport_connected). */
int connected(int a, uint64_t uid)
{
    int b = slot_of_uid(uid);
    if (b < 0 || b == a)
        return 0;
    struct conn *c = conn_of(a, b);
    return c->state == 2 && c->uid[a < b ? 1 : 0] == uid &&
           c->uid[a < b ? 0 : 1] == W.n[a].uid;
}


int slot_index(const struct node *n)
{
    return (int)(n - W.n);
}

/* --- the network ---------------------------------------------------------- */

static uint64_t net_delay(void)
{
    uint64_t r = rnd(1000);
    if (r < 900)
        return 1 + rnd(3);
    if (r < 995)
        return 3 + rnd(20);
    return 20 + rnd(200);
}

static void q_free(struct conn *c, int d)
{
    for (size_t i = 0; i < c->qn[d]; i++)
        ev_free(c->q[d][(c->qh[d] + i) % c->qcap[d]]);
    c->qh[d] = c->qn[d] = 0;
}

void conn_close(int a, int b, const char *why)
{
    struct conn *c = conn_of(a, b);
    if (c->state == 0)
        return;
    c->state = 0;
    c->gen++;
    q_free(c, 0);
    q_free(c, 1);
    trace(a, "connection to %s closed (%s)", W.n[b].name, why);
}

/* Schedules the delivery of the head of direction a -> b, unless it is
 * blocked (the unblock schedules it). */
static void net_kick(int a, int b)
{
    struct conn *c = conn_of(a, b);
    int d = a < b ? 0 : 1;
    if (!c->qn[d] || W.block[a][b])
        return;
    struct ev *head = c->q[d][c->qh[d]];
    struct ev *e = ev_new(EV_NET, head->t > W.now ? head->t : W.now, -1);
    e->from = a;
    e->step = b;
    e->gen = ++c->token[d];
    push(e);
}

/* ms_transport_send: a frame to `uid` on the connection to it, or
 * SIM_ENOTCONN. The frame's ranges are copied. */
int net_send(int a, uint64_t uid, const struct ms_frame *f)
{
    if (!connected(a, uid))
        return SIM_ENOTCONN;
    int b = slot_of_uid(uid);
    struct conn *c = conn_of(a, b);
    struct ev *e = ev_new(EV_FRAME, 0, b);
    e->from = a;
    e->from_uid = W.n[a].uid;
    e->gen = c->gen;
    e->f = *f;
    size_t n = f->type_len + f->id_len + f->payload_len + 1;
    e->buf = malloc(n);
    if (!e->buf)
        exit(2);
    if (f->type_len)
        memcpy(e->buf, f->type, f->type_len);
    if (f->id_len)
        memcpy(e->buf + f->type_len, f->id, f->id_len);
    if (f->payload_len)
        memcpy(e->buf + f->type_len + f->id_len, f->payload,
               f->payload_len);
    e->buf[n - 1] = 0;
    int d = a < b ? 0 : 1;
    uint64_t t = W.now + net_delay();
    if (t < c->last_t[d])
        t = c->last_t[d];
    c->last_t[d] = t;
    e->t = t;
    if (c->qn[d] == c->qcap[d]) {
        size_t cap = c->qcap[d] ? 2 * c->qcap[d] : 16;
        struct ev **q = malloc(cap * sizeof *q);
        if (!q)
            exit(2);
        for (size_t i = 0; i < c->qn[d]; i++)
            q[i] = c->q[d][(c->qh[d] + i) % c->qcap[d]];
        free(c->q[d]);
        c->q[d] = q;
        c->qcap[d] = cap;
        c->qh[d] = 0;
    }
    c->q[d][(c->qh[d] + c->qn[d]) % c->qcap[d]] = e;
    if (c->qn[d]++ == 0)
        net_kick(a, b);
    return 0;
}

/* Fixes a frame event's pointers into its buffer. */
static void frame_fix(struct ev *e)
{
    e->f.type = e->buf;
    e->f.id = e->buf + e->f.type_len;
    e->f.payload = e->buf + e->f.type_len + e->f.id_len;
}

int run_event(struct ev *e);

/* The head of direction a -> b arrives: its frame event runs now. */
static void net_deliver(struct ev *k)
{
    int a = k->from, b = k->step;
    struct conn *c = conn_of(a, b);
    int d = a < b ? 0 : 1;
    if (k->gen != c->token[d] || !c->qn[d] || W.block[a][b])
        return;
    struct ev *e = c->q[d][c->qh[d]];
    c->qh[d] = (c->qh[d] + 1) % c->qcap[d];
    c->qn[d]--;
    net_kick(a, b);
    e->t = W.now;
    if (!run_event(e))
        ev_free(e);
}

static void block_dir(int a, int b, int on)
{
    if (a == b)
        return;
    if (on) {
        if (W.block[a][b]++ == 0) {
            W.blocked_count++;
            struct ev *e = ev_new(EV_UTIMEOUT, W.now + SIM_USER_TIMEOUT_MS,
                                  -1);
            e->from = a;
            e->step = b;
            e->gen = conn_of(a, b)->gen;
            push(e);
        }
    } else if (--W.block[a][b] == 0) {
        W.blocked_count--;
        net_kick(a, b);
    }
}

static int slot_of_addr(const char *addr)
{
    for (int s = 0; s < W.nslots; s++)
        if (strcmp(W.n[s].addr, addr) == 0)
            return s;
    return -1;
}

/* ms_transport_connect(): a dial, unless a connection exists. */
void dial(int a, const char *address)
{
    int b = slot_of_addr(address);
    if (b < 0 || b == a)
        return;
    struct conn *c = conn_of(a, b);
    if (c->state != 0)
        return;
    c->state = 1;
    struct ev *e = ev_new(EV_CONNECTED, W.now + 2 + rnd(8) + net_delay() * 2,
                          a);
    e->from = b;
    e->from_uid = W.n[b].alive ? W.n[b].uid : 0;
    e->gen = c->gen;
    push(e);
}

void on_connected(struct ev *e)
{
    int a = e->slot, b = e->from;
    struct conn *c = conn_of(a, b);
    if (c->gen != e->gen || c->state != 1)
        return;
    struct node *na = &W.n[a], *nb = &W.n[b];
    if (!na->alive || na->uid != e->uid || !nb->alive || nb->paused ||
        na->paused || nb->stopping || nb->uid != e->from_uid ||
        W.block[a][b] || W.block[b][a]) {
        c->state = 0; /* refused or timed out: dialed again later */
        return;
    }
    c->state = 2;
    c->gen++;
    c->uid[a < b ? 0 : 1] = na->uid;
    c->uid[a < b ? 1 : 0] = nb->uid;
    c->last_t[0] = c->last_t[1] = W.now;
    trace(a, "connected to %s", nb->name);
    on_peer_up(a, b);
    on_peer_up(b, a);
}

/* --- clients -------------------------------------------------------------- */

static void ask_cb(void *data, int err, const char *payload, size_t len)
{
    (void)payload, (void)len;
    size_t m = (size_t)(uintptr_t)data;
    struct msg *g = &W.msgs[m];
    g->ended++;
    g->err = err;
    if (g->ended > 1)
        violation("ask-ends-once", "ask #%zu of %s ended %d times", m,
                  W.ents[g->ent].id, g->ended);
}

static size_t new_msg(int inc, int ent, int kind)
{
    if (W.nmsgs == W.capmsgs) {
        W.capmsgs = W.capmsgs ? 2 * W.capmsgs : 1024;
        W.msgs = realloc(W.msgs, W.capmsgs * sizeof *W.msgs);
        if (!W.msgs)
            exit(2);
    }
    struct msg *g = &W.msgs[W.nmsgs];
    memset(g, 0, sizeof *g);
    g->inc = inc;
    g->ent = ent;
    g->kind = kind;
    g->t = W.now;
    g->seq = ++W.seq_next[inc][ent];
    return W.nmsgs++;
}

/* One client request through node s (ms_router_tell / ms_router_ask). */
static void client_send(int s, int ent, int ask)
{
    struct node *n = &W.n[s];
    const struct entity *en = &W.ents[ent];
    struct ms_dest dst;
    size_t m = new_msg(n->inc, ent, ask ? 2 : 1);
    char json[96];
    int len = snprintf(json, sizeof json, "{\"m\":%zu,\"s\":%d,\"q\":%llu}",
                       m, n->inc, (unsigned long long)W.msgs[m].seq);
    if (ms_dispatch_resolve_send(n->d, en->type, en->id, strlen(en->id),
                                 (size_t)len, &dst) < 0) {
        W.nmsgs--;
        W.seq_next[n->inc][ent]--;
        return;
    }
    uint64_t now = node_now(n);
    int64_t rc;
    if (ask) {
        struct ms_waiter w = {ask_cb, (void *)(uintptr_t)m, 0};
        rc = ms_region_ask(n->rg, &dst, 0, json, (size_t)len,
                           SIM_ASK_TIMEOUT_MS, &w, now);
        W.res->asks++;
    } else {
        rc = ms_region_tell(n->rg, &dst, json, (size_t)len, now);
        W.res->tells++;
    }
    trace(s, "client %s %s #%zu q%llu -> %lld", ask ? "ask" : "tell", en->id,
          m, (unsigned long long)W.msgs[m].seq, (long long)rc);
    if (rc < 0) {
        /* refused at once: an explicit error, the sender knows */
        W.msgs[m].ended = 1;
        W.msgs[m].err = (int)rc;
        W.msgs[m].delivered = -1;
    }
    if (ms_region_pending(n->rg))
        rg_drain(n);
    node_arm(n);
}

static int pick_client_node(void)
{
    int cand[SIM_MAX_SLOTS], k = 0;
    for (int s = 0; s < W.nslots; s++)
        if (W.n[s].alive && !W.n[s].paused && !W.n[s].stopping)
            cand[k++] = s;
    return k ? cand[rnd((uint64_t)k)] : -1;
}

static void on_client(void)
{
    uint64_t stop_at = W.sch->end_ms - SIM_ASK_TIMEOUT_MS - 7000;
    if (W.now >= stop_at)
        return;
    int s = pick_client_node();
    if (s >= 0)
        client_send(s, (int)rnd((uint64_t)W.nents), rnd(10) < 3);
    later(EV_CLIENT, 10 + rnd(60), -1);
}

/* After the faults: one tell to each shard, so that every shard must find
 * a live owner within the bound. */
static void final_touch(void)
{
    for (int s = 0; s < W.nslots; s++) {
        if (!W.n[s].alive || W.n[s].paused || W.n[s].stopping)
            continue;
        uint8_t seen[SIM_NTYPES][32];
        memset(seen, 0, sizeof seen);
        for (int e = 0; e < W.nents; e++) {
            const struct entity *en = &W.ents[e];
            if (!seen[en->type][en->shard]) {
                seen[en->type][en->shard] = 1;
                size_t m = W.nmsgs;
                client_send(s, e, 0);
                if (m < W.nmsgs)
                    W.msgs[m].final = 1;
            }
        }
    }
}

/* --- faults --------------------------------------------------------------- */

static int fault_open(void)
{
    if (W.nfaults >= (int)(sizeof W.faults / sizeof W.faults[0]))
        return -1;
    W.faults[W.nfaults].start = W.now;
    W.faults[W.nfaults].end = UINT64_MAX;
    return W.nfaults++;
}

static void fault_close(int i)
{
    if (i >= 0 && W.faults[i].end == UINT64_MAX)
        W.faults[i].end = W.now;
}

static int in_group(uint64_t mask, int s)
{
    return (int)((mask >> s) & 1);
}

/* The partition of a step, on or off: which directions are blocked. */
static void partition(const struct sim_step *st, int on)
{
    for (int a = 0; a < W.nslots; a++)
        for (int b = 0; b < W.nslots; b++) {
            if (a == b)
                continue;
            int cut = 0;
            switch (st->kind) {
            case STEP_PARTITION_ONE:
                cut = a == st->a || b == st->a;
                break;
            case STEP_PARTITION_SPLIT:
                cut = in_group(st->arg, a) != in_group(st->arg, b);
                break;
            case STEP_ONEWAY:
                cut = a == st->a && b == st->b;
                break;
            case STEP_BRIDGE:
                cut = a != st->a && b != st->a &&
                      in_group(st->arg, a) != in_group(st->arg, b);
                break;
            }
            if (cut)
                block_dir(a, b, on);
        }
}

/* ms_cluster_down() without force, run on a live node that is not the
 * target: refused (EBUSY) while the target is reachable from there. */
static void operator_down(int target)
{
    int cand[SIM_MAX_SLOTS], k = 0;
    for (int s = 0; s < W.nslots; s++)
        if (s != target && W.n[s].alive && !W.n[s].paused &&
            !W.n[s].stopping)
            cand[k++] = s;
    if (!k)
        return;
    struct node *n = &W.n[cand[rnd((uint64_t)k)]];
    const char *addr = W.n[target].addr;
    size_t cnt = ms_mb_member_count(n->mb);
    int found = 0;
    for (size_t i = 0; i < cnt; i++) {
        const struct ms_mb_member *m = ms_mb_member_at(n->mb, i);
        if (strcmp(m->address, addr) != 0)
            continue;
        found = 1;
        if (m->status < MS_MB_DOWN && ms_mb_is_reachable(n->mb, m->uid)) {
            trace(slot_index(n), "operator down %s refused: reachable",
                  W.n[target].name);
            return;
        }
    }
    if (!found)
        return;
    trace(slot_index(n), "operator downs %s%s", addr,
          W.n[target].alive ? " (its process still runs)" : "");
    if (W.n[target].alive)
        W.inc_zombie[W.n[target].inc] = 1;
    ms_mb_down(n->mb, addr, node_now(n));
    mb_drain(n);
}

static struct node *coordinator_node(void)
{
    for (int s = 0; s < W.nslots; s++)
        if (W.n[s].alive && !W.n[s].paused && !W.n[s].stopping &&
            ms_coord_ready(ms_region_coord(W.n[s].rg)))
            return &W.n[s];
    return NULL;
}

static void run_step(int i)
{
    const struct sim_step *st = &W.sch->steps[i];
    char d[160];
    sim_step_describe(st, d, sizeof d);
    trace(-1, "step %d: %s", i, d);
    int a = st->a, fi = -1;
    switch (st->kind) {
    case STEP_PARTITION_ONE:
    case STEP_PARTITION_SPLIT:
    case STEP_ONEWAY:
    case STEP_BRIDGE:
        partition(st, 1);
        fi = fault_open();
        break;
    case STEP_CUT:
        if (a != st->b)
            conn_close(a, st->b, "cut");
        fi = fault_open();
        fault_close(fi);
        break;
    case STEP_PAUSE:
        if (W.n[a].alive && !W.n[a].paused) {
            W.n[a].paused = 1;
            W.paused_count++;
            fi = fault_open();
        }
        break;
    case STEP_CRASH:
        if (W.n[a].alive) {
            node_crash(a, "fault");
            fi = fault_open();
        }
        break;
    case STEP_RESTART:
        if (W.n[a].started && !W.n[a].alive)
            node_start(a);
        break;
    case STEP_LEAVE:
        if (W.n[a].alive && !W.n[a].paused && !W.n[a].stopping) {
            ms_mb_leave(W.n[a].mb, node_now(&W.n[a])); /* ms_cluster_leave */
            mb_drain(&W.n[a]);
        }
        break;
    case STEP_DOWN:
        operator_down(a);
        fi = fault_open();
        fault_close(fi);
        break;
    case STEP_MOVE: {
        struct node *n = coordinator_node();
        int type = (int)(st->arg % SIM_NTYPES);
        uint32_t sc = type ? SIM_ACCOUNT_SHARDS : SIM_COUNTER_SHARDS;
        if (n) { /* ms_router_move */
            int rc = ms_coord_move(ms_region_coord(n->rg), type,
                                   (uint32_t)st->b % sc, node_now(n));
            trace(slot_index(n), "move %s/%u: %d", n->tc[type].name,
                  (uint32_t)st->b % sc, rc);
            rg_drain(n);
            W.res->moves++;
        }
        break;
    }
    case STEP_REBALANCE: {
        struct node *n = coordinator_node();
        if (n) /* ms_router_reconcile */
            ms_coord_reconcile(ms_region_coord(n->rg));
        break;
    }
    case STEP_JOIN:
        if (!W.n[a].alive)
            node_start(a);
        break;
    case STEP_DB_SLOW:
        W.db_slow_until = W.now + st->dur_ms;
        fi = fault_open();
        break;
    }
    W.step_fault[i] = fi;
    if (st->dur_ms) {
        struct ev *e = ev_new(EV_HEAL, W.now + st->dur_ms, -1);
        e->step = i;
        push(e);
    }
}

static void heal_step(int i)
{
    const struct sim_step *st = &W.sch->steps[i];
    trace(-1, "heal step %d", i);
    switch (st->kind) {
    case STEP_PARTITION_ONE:
    case STEP_PARTITION_SPLIT:
    case STEP_ONEWAY:
    case STEP_BRIDGE:
        partition(st, 0);
        break;
    case STEP_PAUSE: {
        struct node *n = &W.n[st->a];
        if (n->paused && W.step_fault[i] >= 0) {
            n->paused = 0;
            W.paused_count--;
            /* the process catches up: what waited runs now, in order */
            size_t nd = n->ndeferred;
            struct ev **def = n->deferred;
            n->deferred = NULL;
            n->ndeferred = n->capdeferred = 0;
            for (size_t k = 0; k < nd; k++) {
                def[k]->t = W.now;
                if (!run_event(def[k]))
                    ev_free(def[k]);
            }
            free(def);
        }
        break;
    }
    case STEP_CRASH:
        /* the first seed restarts only once the faults are over, unless
         * --island (see sim.h) */
        if (W.n[st->a].started && !W.n[st->a].alive &&
            (st->a != 0 || W.o->island))
            node_start(st->a);
        break;
    }
    fault_close(W.step_fault[i]);
}

/* Every fault is over: the dead slots start again (new incarnations). */
static void faults_end(void)
{
    trace(-1, "faults end");
    for (int s = 0; s < W.nslots; s++)
        if (W.n[s].started && !W.n[s].alive)
            node_start(s);
    int fi = fault_open();
    fault_close(fi);
}

/* --- the loop ------------------------------------------------------------- */

static void defer(struct node *n, struct ev *e)
{
    if (n->ndeferred == n->capdeferred) {
        n->capdeferred = n->capdeferred ? 2 * n->capdeferred : 64;
        n->deferred = realloc(n->deferred,
                              n->capdeferred * sizeof *n->deferred);
        if (!n->deferred)
            exit(2);
    }
    n->deferred[n->ndeferred++] = e;
}

/* Runs one event. Returns 1 when the event was kept (deferred, held). */
int run_event(struct ev *e)
{
    struct node *n = e->slot >= 0 ? &W.n[e->slot] : NULL;
    if (n && e->kind != EV_COMMIT && e->kind != EV_LEASE_EXEC) {
        if (!n->alive || n->uid != e->uid)
            return 0; /* meant for an incarnation that is gone */
        if (n->paused) {
            defer(n, e);
            return 1;
        }
    }
    switch (e->kind) {
    case EV_MB_TICK:
        if (e->gen != n->mb_token)
            return 0;
        n->mb_due = 0;
        ms_mb_tick(n->mb, node_now(n));
        mb_drain(n);
        break;
    case EV_SWEEP:
        on_sweep(n);
        break;
    case EV_WORK:
        on_work(n);
        break;
    case EV_DTICK:
        if (e->gen != n->dt_token)
            return 0;
        n->dt_due = 0;
        ms_dispatch_expire(n->d, node_now(n));
        node_arm(n);
        break;
    case EV_FRAME: {
        struct conn *c = conn_of(e->from, e->slot);
        if (c->gen != e->gen || c->state != 2)
            return 0; /* the connection ended: lost */
        frame_fix(e);
        on_frame(n, e->from_uid, &e->f);
        break;
    }
    case EV_NET:
        net_deliver(e);
        break;
    case EV_SELF_CTRL: { /* router.c on_self_control() */
        struct ms_frame f;
        memset(&f, 0, sizeof f);
        f.kind = MS_FRAME_CONTROL;
        f.payload = e->buf;
        f.payload_len = e->f.payload_len;
        trace(e->slot, "control from self %.*s",
              (int)(f.payload_len > 120 ? 120 : f.payload_len), f.payload);
        ms_region_on_frame(n->rg, n->uid, &f, node_now(n));
        rg_drain(n);
        node_arm(n);
        break;
    }
    case EV_CONNECTED:
        on_connected(e);
        break;
    case EV_UTIMEOUT: {
        int a = e->from, b = e->step;
        if ((W.block[a][b] || W.block[b][a]) && conn_of(a, b)->gen == e->gen)
            conn_close(a, b, "user timeout");
        break;
    }
    case EV_LEASE_EXEC:
        on_lease_exec(e);
        break;
    case EV_LEASE_ANS:
        ms_region_lease_answer(n->rg, &e->ans, node_now(n));
        rg_drain(n);
        node_arm(n);
        break;
    case EV_COMMIT: {
        const struct entity *en = &W.ents[e->ent];
        int64_t dbnow = (int64_t)W.now + W.db_off;
        int ok = leasedb_commit(&W.db, en->type, en->shard, e->owner,
                                e->epoch, dbnow);
        trace(-1, "db commit %s by %s epoch %llu: %s", en->id, e->owner,
              (unsigned long long)e->epoch, ok ? "ok" : "stale_owner");
        if (ok) {
            W.res->commits++;
            check_commit(en->type, en->shard, e->from, e->owner, e->epoch,
                         dbnow);
        }
        break;
    }
    case EV_CLIENT:
        on_client();
        break;
    case EV_STEP:
        run_step(e->step);
        break;
    case EV_HEAL:
        heal_step(e->step);
        break;
    case EV_FAULTS_END:
        faults_end();
        break;
    case EV_FINAL_TOUCH:
        final_touch();
        break;
    case EV_GMOVE: {
        /* a graceful move in the quiet part after the faults, so that
         * no-loss-in-graceful-move has moves to judge (its window is the
         * tells accepted 10-15 s after the faults) */
        struct node *n = coordinator_node();
        int type = (int)sim_rng_below(&W.grng, SIM_NTYPES);
        uint32_t sc = type ? SIM_ACCOUNT_SHARDS : SIM_COUNTER_SHARDS;
        uint32_t sh = (uint32_t)sim_rng_below(&W.grng, sc);
        if (n) {
            int rc = ms_coord_move(ms_region_coord(n->rg), type, sh,
                                   node_now(n));
            trace(slot_index(n), "graceful move %s/%u: %d", n->tc[type].name,
                  sh, rc);
            rg_drain(n);
            W.res->moves++;
        }
        break;
    }
    case EV_END:
        break;
    case EV_CONV:
        /* after the final touch: converged (and every shard owned) once
         * within the bound is enough; moves may follow */
        if (!W.converged_at && check_converged(0)) {
            W.converged_at = W.now;
            trace(-1, "converged %llu ms after the faults",
                  (unsigned long long)(W.now - W.sch->faults_end_ms));
        } else if (!W.converged_at) {
            later(EV_CONV, 250, -1);
        }
        break;
    }
    return 0;
}

int world_healthy(void)
{
    if (W.blocked_count || W.paused_count)
        return 0;
    uint64_t digest = 0;
    for (int s = 0; s < W.nslots; s++) {
        struct node *n = &W.n[s];
        if (!n->alive)
            continue;
        if (ms_mb_self_status(n->mb) != MS_MB_UP || !ms_mb_converged(n->mb))
            return 0;
        if (digest && ms_mb_digest(n->mb) != digest)
            return 0;
        digest = ms_mb_digest(n->mb);
        size_t cnt = ms_mb_member_count(n->mb);
        for (size_t i = 0; i < cnt; i++) {
            const struct ms_mb_member *m = ms_mb_member_at(n->mb, i);
            if (m->status < MS_MB_DOWN && !ms_mb_is_reachable(n->mb, m->uid))
                return 0;
            if (m->status < MS_MB_DOWN && slot_of_uid(m->uid) < 0)
                return 0; /* a member whose process is gone */
        }
    }
    return 1;
}

static void make_entities(void)
{
    W.nents = 0;
    for (int t = 0; t < SIM_NTYPES; t++) {
        uint32_t sc = t ? SIM_ACCOUNT_SHARDS : SIM_COUNTER_SHARDS;
        int want = t ? 16 : 32;
        uint8_t covered[32] = {0};
        int ncov = 0;
        for (int k = 0; k < 1000 && W.nents < 128; k++) {
            char id[16];
            snprintf(id, sizeof id, "%c%d", t ? 'a' : 'c', k);
            uint32_t sh = ms_shard_of(id, strlen(id), sc);
            int need = k < want || !covered[sh];
            if (!need) {
                if ((uint32_t)ncov == sc)
                    break;
                continue;
            }
            struct entity *en = &W.ents[W.nents++];
            en->type = t;
            snprintf(en->id, sizeof en->id, "%s", id);
            en->shard = sh;
            if (!covered[sh]) {
                covered[sh] = 1;
                ncov++;
            }
        }
    }
}

static void world_free(void)
{
    for (int s = 0; s < W.nslots; s++) {
        if (W.n[s].alive)
            node_free(s);
        free(W.n[s].active);
        free(W.n[s].deferred);
    }
    for (int a = 0; a < SIM_MAX_SLOTS; a++)
        for (int b = 0; b < SIM_MAX_SLOTS; b++)
            for (int d = 0; d < 2; d++) {
                q_free(&W.c[a][b], d);
                free(W.c[a][b].q[d]);
            }
    while (W.nheap)
        ev_free(pop());
    free(W.heap);
    free(W.msgs);
    free(W.own_key);
    free(W.own_val);
}

extern int ms_sim_break_two_owners, ms_sim_break_skip_fence,
    ms_sim_break_no_rollback;
extern ms_ask_cb ms_sim_break_reply_twice;

int sim_run(const struct sim_opts *o, const struct sim_schedule *sch,
            struct sim_result *res)
{
    memset(&W, 0, sizeof W);
    memset(res, 0, sizeof *res);
    W.o = o;
    W.sch = sch;
    W.res = res;
    W.checksum = 0xcbf29ce484222325ULL;
    sim_rng_seed(&W.rng, o->seed ^ 0x5eed5eed5eedULL);
    W.nslots = o->nodes + 1;
    W.db_off = (int64_t)(1700000000000LL + (int64_t)rnd(1000000));
    leasedb_init(&W.db);
    make_entities();
    ms_sim_break_two_owners = ms_sim_break_skip_fence = 0;
    ms_sim_break_no_rollback = 0;
    ms_sim_break_reply_twice = NULL;
    for (int i = 0; i < o->nbreaks; i++) {
        const char *b = o->breaks[i];
        if (strcmp(b, "two-owners") == 0)
            ms_sim_break_two_owners = 1;
        else if (strcmp(b, "skip-fence") == 0)
            ms_sim_break_skip_fence = 1;
        else if (strcmp(b, "no-rollback") == 0)
            ms_sim_break_no_rollback = 1;
        else if (strcmp(b, "reply-twice") == 0)
            ms_sim_break_reply_twice = ask_cb;
        else if (strcmp(b, "db-stale-commit") == 0)
            W.db.break_stale_commit = 1;
    }
    W.own_cap = 1u << 14;
    W.own_key = calloc(W.own_cap, sizeof *W.own_key);
    W.own_val = calloc(W.own_cap, sizeof *W.own_val);
    for (int s = 0; s < W.nslots; s++) {
        W.n[s].active = calloc((size_t)W.nents, 1);
        snprintf(W.n[s].name, sizeof W.n[s].name, "n%d", s + 1);
        snprintf(W.n[s].addr, sizeof W.n[s].addr, "10.0.0.%d:7000", s + 1);
    }
    for (int i = 0; i < SIM_MAX_STEPS; i++)
        W.step_fault[i] = -1;
    trace(-1, "seed %llu, %d nodes, %d steps", (unsigned long long)o->seed,
          o->nodes, sch->nsteps);
    for (int s = 0; s < o->nodes; s++) {
        W.now = rnd(300); /* the processes start within 300 ms */
        node_start(s);
    }
    W.now = 0;
    for (int i = 0; i < sch->nsteps; i++) {
        if (o->dropped & (1ULL << i))
            continue;
        struct ev *e = ev_new(EV_STEP, sch->steps[i].at_ms, -1);
        e->step = i;
        push(e);
    }
    later(EV_CLIENT, 3000, -1);
    push(ev_new(EV_FAULTS_END, sch->faults_end_ms, -1));
    push(ev_new(EV_FINAL_TOUCH, sch->faults_end_ms + 5000, -1));
    push(ev_new(EV_CONV, sch->faults_end_ms + 5500, -1));
    push(ev_new(EV_END, sch->end_ms, -1));
    sim_rng_seed(&W.grng, o->seed ^ 0x9e3779b97f4a7c15ULL);
    for (int k = 0; k < 8; k++)
        push(ev_new(EV_GMOVE, sch->faults_end_ms + 10000 + 600 * (uint64_t)k,
                    -1));
    struct ev *e;
    while (!W.failed && (e = pop()) != NULL) {
        if (e->t > sch->end_ms) {
            ev_free(e);
            break;
        }
        W.now = e->t;
        int slot = e->slot;
        int ticked = e->kind == EV_SWEEP && slot >= 0 && !W.n[slot].paused;
        int kept = run_event(e);
        res->events++;
        /* node.c on_self_removed -> ms_node_close, after the drain */
        for (int s = 0; s < W.nslots; s++)
            if (W.n[s].alive && W.n[s].stopping)
                node_close(s);
        if (!W.failed)
            check_after_event(slot, ticked);
        if (!kept)
            ev_free(e);
    }
    if (!W.failed)
        check_final();
    res->node_ms = (uint64_t)o->nodes * W.now;
    res->end_ms = W.now;
    res->checksum = W.checksum;
    world_free();
    return W.failed;
}
