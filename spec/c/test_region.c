/*
 * The region (runtime/core/region.h) driven without sockets: a few nodes,
 * each a region, a coordinator object inside it and a dispatcher, joined
 * by an in-memory network that carries the regions' actions in order and
 * can drop, hold or answer frames. Time is a variable.
 */
#include <stdlib.h>
#include <string.h>

#include "../../runtime/core/membership.h"
#include "../../runtime/core/region.h"
#include "check.h"

#define MAXN 5
#define SHARDS 1          /* every id in shard 0 */
#define HANDOFF_MS 2000

struct node {
    uint64_t uid;
    int up;
    struct ms_dispatch *d;
    struct ms_region *r;
    struct ms_config cfg;
    struct ms_type_config tc;
    char got[64][24];     /* payloads delivered here, in order */
    int ngot;
    int frames_in;        /* requests (TELL, ASK) that reached it */
    int noconn;           /* usable, but sends to it fail (no connection) */
    int wakes;            /* calls of the region's wake callback */
    char name[16];
    struct ms_lease_action st[256]; /* lease statements asked, in order */
    int nst;
};

/* the shard count of the nodes added next */
static uint32_t next_shards = SHARDS;

/* the type of the nodes added next is persistent (leases) */
static int persist;
static uint64_t lease_window = 2000;

static struct node nodes[MAXN];
static int nn;
static uint64_t now = 1000;
static uint64_t want_owner;

/* the network: frames in flight, in order */
struct pkt {
    struct pkt *next;
    uint64_t from, to;
    struct ms_frame f;
    char bytes[];
};
static struct pkt *net_head, *net_tail, *held_head, *held_tail;

enum { PASS = 0, DROP = 1, HOLD = 2, BOUNCE = 3 };
static int (*filter)(uint64_t from, uint64_t to, const struct ms_frame *f);

static struct node *node_of(uint64_t uid)
{
    for (int i = 0; i < nn; i++)
        if (nodes[i].uid == uid)
            return &nodes[i];
    return NULL;
}

static void push(struct pkt **h, struct pkt **t, uint64_t from, uint64_t to,
                 const struct ms_frame *f)
{
    struct pkt *p = malloc(sizeof *p + f->type_len + f->id_len +
                           f->payload_len + 1);
    p->next = NULL;
    p->from = from;
    p->to = to;
    p->f = *f;
    char *b = p->bytes;
    memcpy(b, f->type, f->type_len);
    p->f.type = b;
    b += f->type_len;
    memcpy(b, f->id, f->id_len);
    p->f.id = b;
    b += f->id_len;
    memcpy(b, f->payload, f->payload_len);
    b[f->payload_len] = 0;
    p->f.payload = b;
    if (*t)
        (*t)->next = p;
    else
        *h = p;
    *t = p;
}

static int is_plan(const struct ms_frame *f)
{
    return f->kind == MS_FRAME_CONTROL &&
           strstr(f->payload, "\"t\":\"plan\"") != NULL;
}

/* Takes every node's actions onto the network. */
static void collect(void)
{
    for (int i = 0; i < nn; i++) {
        struct node *n = &nodes[i];
        struct ms_region_action a;
        while (n->r && ms_region_next_action(n->r, &a)) {
            if (a.kind == MS_REGION_SEND) {
                struct node *to = node_of(a.uid);
                if (!to || !to->up || (to->noconn && a.uid != n->uid))
                    ms_region_send_failed(n->r, &a, 1, now);
                else
                    push(&net_head, &net_tail, n->uid, a.uid, &a.frame);
            } else if (a.kind == MS_REGION_BROADCAST) {
                for (int j = 0; j < nn; j++)
                    if (nodes[j].up)
                        push(&net_head, &net_tail, n->uid, nodes[j].uid,
                             &a.frame);
            } else if (a.kind == MS_REGION_LEASE && n->nst < 256) {
                n->st[n->nst++] = a.lease;
            }
            ms_region_action_free(&a);
        }
    }
}

/* Delivers frames until the network is quiet (or `max` frames). */
static int pump(int max)
{
    int k = 0;
    for (collect(); net_head && k < max; collect(), k++) {
        struct pkt *p = net_head;
        net_head = p->next;
        if (!net_head)
            net_tail = NULL;
        int v = filter ? filter(p->from, p->to, &p->f) : PASS;
        struct node *to = node_of(p->to);
        if (v == HOLD) {
            p->next = NULL;
            if (held_tail)
                held_tail->next = p;
            else
                held_head = p;
            held_tail = p;
            continue;
        }
        if (v == BOUNCE) {
            /* the target answers NOT_OWNER with the request's bytes */
            struct ms_frame no = p->f;
            no.kind = MS_FRAME_NOT_OWNER;
            no.flags = (uint16_t)(p->f.flags |
                                  (p->f.kind == MS_FRAME_ASK
                                       ? MS_REGION_FLAG_WAS_ASK : 0));
            to->frames_in++;
            ms_region_on_frame(node_of(p->from)->r, p->to, &no, now);
        } else if (v == PASS && to && to->up) {
            if (p->f.kind == MS_FRAME_TELL || p->f.kind == MS_FRAME_ASK)
                to->frames_in++;
            ms_region_on_frame(to->r, p->from, &p->f, now);
        }
        free(p);
    }
    return k;
}

/* Releases the held frames onto the network, in order. */
static void release(void)
{
    while (held_head) {
        struct pkt *p = held_head;
        held_head = p->next;
        p->next = NULL;
        if (net_tail)
            net_tail->next = p;
        else
            net_head = p;
        net_tail = p;
    }
    held_tail = NULL;
}

/* Runs every dispatcher: records payloads, answers asks, reports stopped
 * shards; until nothing moves. */
static void run_all(void)
{
    for (int round = 0; round < 50; round++) {
        int any = 0;
        pump(100000);
        for (int i = 0; i < nn; i++) {
            struct node *n = &nodes[i];
            struct ms_delivery dl;
            while (n->up && ms_dispatch_next(n->d, &dl)) {
                any = 1;
                if (dl.kind == MS_KIND_TELL || dl.kind == MS_KIND_ASK) {
                    if (n->ngot < 64)
                        snprintf(n->got[n->ngot++], 24, "%s", dl.payload);
                }
                if (dl.kind == MS_KIND_ASK || dl.kind == MS_KIND_ACTIVATE)
                    ms_dispatch_reply(n->d, dl.h, "{\"ok\":1}", 8, now);
                ms_dispatch_done(n->d, dl.h, now);
            }
            if (n->up)
                ms_region_after_dispatch(n->r, now);
        }
        if (!any && !pump(100000))
            return;
    }
}

static int usable(void *data, uint64_t uid)
{
    (void)data;
    struct node *n = node_of(uid);
    return n && n->up;
}

static uint64_t allocate(void *data, int type, uint32_t shard,
                         const struct ms_coord_view *view, char *err,
                         size_t errlen)
{
    (void)data, (void)type, (void)shard;
    for (size_t i = 0; i < view->nhosts; i++)
        if (view->hosts[i].uid == want_owner)
            return want_owner;
    snprintf(err, errlen, "wanted owner not a host");
    return 0;
}

static void on_wake(void *data)
{
    struct node *n = data;
    n->wakes++;
}

static void add_node(uint64_t uid)
{
    struct node *n = &nodes[nn++];
    memset(n, 0, sizeof *n);
    n->uid = uid;
    n->up = 1;
    snprintf(n->tc.name, sizeof n->tc.name, "T");
    n->tc.shard_count = next_shards;
    n->tc.max_pending = 100000;
    snprintf(n->tc.partition_id, sizeof n->tc.partition_id, "fnv1a");
    n->cfg.ntypes = 1;
    n->cfg.types = &n->tc;
    n->cfg.max_message = 4096;
    n->cfg.json_max_depth = 32;
    n->cfg.handoff_timeout_ms = HANDOFF_MS;
    snprintf(n->name, sizeof n->name, "n%llu", (unsigned long long)uid);
    memcpy(n->cfg.node_name, n->name, sizeof n->name);
    if (persist) {
        n->tc.persistence = MS_PERSIST_STATE;
        n->tc.lease_duration_ms = 1000;
        n->tc.lease_renew_interval_ms = 300;
        n->tc.lease_window_ms = lease_window;
    }
    n->cfg.rebalance_interval_ms = 1000000000;
    struct ms_dispatch_type t = {"T", next_shards, 0, 0, 100000, 0};
    n->d = ms_dispatch_new(&t, 1, 4096);
    struct ms_region_config rc;
    memset(&rc, 0, sizeof rc);
    rc.self_uid = uid;
    rc.cfg = &n->cfg;
    rc.d = n->d;
    rc.usable = usable;
    rc.allocate = allocate;
    rc.wake = on_wake;
    rc.wake_data = n;
    CHECK(ms_region_new(&n->r, &rc) == 0);
}

static void reset(void)
{
    for (int i = 0; i < nn; i++) {
        ms_region_free(nodes[i].r);
        ms_dispatch_free(nodes[i].d);
    }
    while (net_head) {
        struct pkt *p = net_head;
        net_head = p->next;
        free(p);
    }
    while (held_head) {
        struct pkt *p = held_head;
        held_head = p->next;
        free(p);
    }
    net_tail = held_tail = NULL;
    nn = 0;
    filter = NULL;
    now = 1000;
}

static int tell_n(int node, const char *id, const char *json);

/* Nodes 1..count, all Up; node 1 coordinates, and the plan is published.
 * With `owner`, shard 0 is allocated there by a first tell from the last
 * node ({"n":0}). */
static void boot(int count, uint64_t owner)
{
    reset();
    for (int i = 1; i <= count; i++)
        add_node((uint64_t)i);
    for (int i = 0; i < nn; i++)
        for (int j = 0; j < nn; j++)
            ms_region_member(nodes[i].r, nodes[j].uid, MS_MB_UP, now);
    for (int i = 0; i < nn; i++)
        ms_region_on_coordinator(nodes[i].r, 1, now);
    pump(100000);
    CHECK(ms_coord_ready(ms_region_coord(nodes[0].r)));
    if (owner) {
        want_owner = owner;
        CHECK(tell_n(nn, "x", "{\"n\":0}") == 0);
        run_all();
        CHECK(ms_region_owner(nodes[nn - 1].r, 0, 0, NULL) == owner);
    }
}

static int tell_n(int node, const char *id, const char *json)
{
    struct node *n = &nodes[node - 1];
    struct ms_dest dst;
    int rc = ms_dispatch_resolve(n->d, 0, id, strlen(id), &dst);
    if (rc == 0)
        rc = ms_region_tell(n->r, &dst, json, strlen(json), now);
    return rc;
}

static int cb_calls, cb_err;

static void on_ask(void *data, int err, const char *payload, size_t len)
{
    (void)data, (void)payload, (void)len;
    cb_calls++;
    cb_err = err;
}

static int64_t ask_n(int node, const char *id, const char *json,
                     uint64_t timeout_ms)
{
    struct node *n = &nodes[node - 1];
    struct ms_dest dst;
    struct ms_waiter w = {on_ask, NULL, 0};
    int rc = ms_dispatch_resolve(n->d, 0, id, strlen(id), &dst);
    if (rc < 0)
        return rc;
    return ms_region_ask(n->r, &dst, 0, json, strlen(json), timeout_ms, &w,
                         now);
}

static int got(int node, int i, const char *json)
{
    struct node *n = &nodes[node - 1];
    return i < n->ngot && strcmp(n->got[i], json) == 0;
}

static void tick_all(void)
{
    for (int i = 0; i < nn; i++)
        if (nodes[i].up)
            ms_region_tick(nodes[i].r, now);
    pump(100000);
}

static void start_move(uint64_t to)
{
    want_owner = to;
    CHECK(ms_coord_move(ms_region_coord(nodes[0].r), 0, 0, now) == 0);
    pump(100000); /* HANDOFF, fences, STOP to the old owner */
}

/* ---- the cases ----------------------------------------------------------- */

/* Messages that waited for a moving shard reach the new owner in the
 * order they were sent, before any send made after the plan entry that
 * ended the move; the old owner got none of them. */
static void fence_fifo(void)
{
    boot(3, 2);
    start_move(1);
    CHECK(ms_region_moving(nodes[2].r) == 1);
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    CHECK(tell_n(3, "y", "{\"n\":2}") == 0);
    CHECK(tell_n(3, "z", "{\"n\":3}") == 0);
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 3);
    /* the old owner stops the shard; the new owner is published, and the
     * region flushes inside the plan's frame: a send right after it is
     * behind the three */
    for (int i = 0; i < 50 && ms_region_owner(nodes[2].r, 0, 0, NULL) != 1;
         i++) {
        struct ms_delivery dl;
        while (ms_dispatch_next(nodes[1].d, &dl))
            ms_dispatch_done(nodes[1].d, dl.h, now);
        ms_region_after_dispatch(nodes[1].r, now);
        pump(1);
    }
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 0);
    CHECK(tell_n(3, "w", "{\"n\":4}") == 0);
    run_all();
    CHECK(nodes[0].ngot == 4);
    CHECK(got(1, 0, "{\"n\":1}") && got(1, 1, "{\"n\":2}") &&
          got(1, 2, "{\"n\":3}") && got(1, 3, "{\"n\":4}"));
    CHECK(nodes[1].ngot == 1 && got(2, 0, "{\"n\":0}"));
    CHECK(ms_region_moving(nodes[2].r) == 0);
}

/* 1,024 own messages wait per shard; the next tell is refused with
 * MS_EOVERFLOW and the next ask ends with it. */
static void buffer_bound(void)
{
    reset();
    add_node(1);
    ms_region_member(nodes[0].r, 1, MS_MB_UP, now); /* no coordinator */
    char id[16];
    for (int i = 0; i < MS_REGION_BUFFER; i++) {
        snprintf(id, sizeof id, "e%d", i);
        CHECK(tell_n(1, id, "{}") == 0);
    }
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == MS_REGION_BUFFER);
    CHECK(tell_n(1, "over", "{}") == MS_EOVERFLOW);
    cb_calls = 0;
    CHECK(ask_n(1, "over", "{}", 1000) > 0);
    CHECK(cb_calls == 1 && cb_err == MS_EOVERFLOW);
    CHECK(ms_region_stats(nodes[0].r)->buffer_overflows == 2);
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == MS_REGION_BUFFER);
}

/* A message that waits past its deadline fails: the ask with
 * MS_ETIMEDOUT at its own deadline, the tell after
 * MS_REGION_TELL_DEADLINE_MS, counted as expired. (The region fails them
 * from the head of the buffer, in order; an ask behind a later deadline
 * is ended by the dispatcher's own timer.) */
static void deadline_expires(void)
{
    reset();
    add_node(1);
    ms_region_member(nodes[0].r, 1, MS_MB_UP, now);
    uint64_t t0 = now;
    cb_calls = 0;
    CHECK(ask_n(1, "b", "{}", 300) > 0);
    CHECK(tell_n(1, "a", "{}") == 0);
    now = t0 + 299;
    ms_region_tick(nodes[0].r, now);
    CHECK(cb_calls == 0);
    now = t0 + 300;
    ms_region_tick(nodes[0].r, now);
    CHECK(cb_calls == 1 && cb_err == MS_ETIMEDOUT);
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 1);
    now = t0 + MS_REGION_TELL_DEADLINE_MS;
    ms_region_tick(nodes[0].r, now);
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 0);
    CHECK(ms_region_stats(nodes[0].r)->expired == 2);
}

/* A move whose old owner never stops in time is rolled back at the
 * deadline: the old owner is published again, its stop is called off,
 * and what waited reaches it, in order. */
static void rollback_on_deadline(void)
{
    boot(3, 2);
    start_move(1);
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    CHECK(tell_n(3, "y", "{\"n\":2}") == 0);
    CHECK(ms_region_stopping(nodes[1].r) == 1);
    /* node 2's dispatcher does not run: no STOPPED */
    now += HANDOFF_MS + 1;
    tick_all();
    struct ms_coord_move_stats ms;
    ms_coord_move_stats(ms_region_coord(nodes[0].r), &ms);
    CHECK(ms.aborted == 1 && ms.in_progress == 0);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    CHECK(ms_region_moving(nodes[2].r) == 0);
    CHECK(ms_region_stopping(nodes[1].r) == 0);
    run_all();
    CHECK(nodes[1].ngot == 3 && got(2, 1, "{\"n\":1}") &&
          got(2, 2, "{\"n\":2}"));
    CHECK(nodes[0].ngot == 0);
}

/* A member that joins while a shard moves learns the plan and the move's
 * end; a tell it sends to the old owner before it learns of the move is
 * sent back (NOT_OWNER, held here until the HANDOFF ahead of it is
 * delivered) and reaches the new owner; every tell is delivered once. */
static int hold_handoff_to_4(uint64_t from, uint64_t to,
                             const struct ms_frame *f)
{
    (void)from;
    return to == 4 && (f->kind == MS_FRAME_NOT_OWNER ||
                       (f->kind == MS_FRAME_CONTROL &&
                        strstr(f->payload, "\"t\":\"handoff\"")))
               ? HOLD : PASS;
}

static void join_during_move(void)
{
    boot(3, 2);
    start_move(1);
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    add_node(4);
    for (int i = 0; i < nn; i++) {
        ms_region_member(nodes[i].r, 4, MS_MB_UP, now);
        ms_region_member(nodes[3].r, nodes[i].uid, MS_MB_UP, now);
    }
    ms_region_on_coordinator(nodes[3].r, 1, now);
    filter = hold_handoff_to_4;
    pump(100000);
    /* it knows the plan, not the move yet: its tell goes to the old
     * owner, which is stopping the shard and sends it back */
    CHECK(ms_region_owner(nodes[3].r, 0, 0, NULL) == 2);
    CHECK(ms_region_moving(nodes[3].r) == 0);
    CHECK(tell_n(4, "q", "{\"n\":2}") == 0);
    pump(100000);
    CHECK(ms_region_stats(nodes[1].r)->not_owner_sent == 1);
    filter = NULL;
    release();
    for (int i = 0; i < 20; i++) {
        now += 300;
        tick_all();
        run_all();
    }
    struct ms_coord_move_stats ms;
    ms_coord_move_stats(ms_region_coord(nodes[0].r), &ms);
    CHECK(ms.finished == 1 && ms.aborted == 0);
    for (int i = 0; i < nn; i++)
        CHECK(ms_region_owner(nodes[i].r, 0, 0, NULL) == 1);
    CHECK(tell_n(4, "r", "{\"n\":3}") == 0);
    run_all();
    CHECK(nodes[0].ngot == 3);
    int seen1 = 0, seen2 = 0;
    for (int i = 0; i < nodes[0].ngot; i++) {
        seen1 += strcmp(nodes[0].got[i], "{\"n\":1}") == 0;
        seen2 += strcmp(nodes[0].got[i], "{\"n\":2}") == 0;
    }
    CHECK(seen1 == 1 && seen2 == 1 && got(1, 2, "{\"n\":3}"));
}

/* The plan entry that ends a move is lost on its way to a region: that
 * region asks the coordinator again once a move may no longer be under
 * way, gets the entry, and flushes. */
static int drop_plan_to_3(uint64_t from, uint64_t to,
                          const struct ms_frame *f)
{
    (void)from;
    return to == 3 && is_plan(f) ? DROP : PASS;
}

static void lost_final_plan(void)
{
    boot(3, 2);
    start_move(1);
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    filter = drop_plan_to_3;
    run_all();
    filter = NULL;
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 1);
    CHECK(ms_region_moving(nodes[2].r) == 1);
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 1);
    now += HANDOFF_MS + 500;
    tick_all();
    CHECK(ms_region_moving(nodes[2].r) == 1); /* not yet: may be moving */
    now += 501;
    tick_all();
    run_all();
    CHECK(ms_region_moving(nodes[2].r) == 0);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    CHECK(nodes[0].ngot == 1 && got(1, 0, "{\"n\":1}"));
}

/* An owner that keeps answering NOT_OWNER: the request is sent at most
 * 1 + MS_REGION_MAX_RETRIES times, then the ask fails (MS_ETIMEDOUT) and
 * the tell is dropped and counted, instead of bouncing forever. */
static int bounce_at_2(uint64_t from, uint64_t to, const struct ms_frame *f)
{
    (void)from;
    return to == 2 && (f->kind == MS_FRAME_TELL || f->kind == MS_FRAME_ASK)
               ? BOUNCE : PASS;
}

static void not_owner_retry_limit(void)
{
    boot(3, 2);
    filter = bounce_at_2;
    nodes[1].frames_in = 0;
    cb_calls = 0;
    CHECK(ask_n(3, "x", "{}", 100000) > 0);
    pump(10000);
    CHECK(cb_calls == 1 && cb_err == MS_ETIMEDOUT);
    CHECK(nodes[1].frames_in == 1 + MS_REGION_MAX_RETRIES);
    nodes[1].frames_in = 0;
    uint64_t expired = ms_region_stats(nodes[2].r)->expired;
    CHECK(tell_n(3, "y", "{}") == 0);
    pump(10000);
    CHECK(nodes[1].frames_in == 1 + MS_REGION_MAX_RETRIES);
    CHECK(ms_region_stats(nodes[2].r)->expired == expired + 1);
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 0);
    filter = NULL;
}

/* Requests another node sent with a newer plan than the new owner's are
 * held there, in order, and delivered once its plan catches up; an ask's
 * reply goes back to its sender. */
static int hold_plan_to_1(uint64_t from, uint64_t to,
                          const struct ms_frame *f)
{
    (void)from;
    return to == 1 && is_plan(f) ? HOLD : PASS;
}

static void held_requests_flushed(void)
{
    boot(3, 2);
    filter = hold_plan_to_1;
    start_move(1);
    run_all();
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 2); /* not yet */
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    cb_calls = 0;
    CHECK(ask_n(3, "y", "{\"n\":2}", 100000) > 0);
    CHECK(tell_n(3, "z", "{\"n\":3}") == 0);
    run_all();
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 3);
    CHECK(nodes[0].ngot == 0 && cb_calls == 0);
    filter = NULL;
    release();
    run_all();
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 1);
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 0);
    CHECK(nodes[0].ngot == 3 && got(1, 0, "{\"n\":1}") &&
          got(1, 1, "{\"n\":2}") && got(1, 2, "{\"n\":3}"));
    CHECK(cb_calls == 1 && cb_err == 0);
}

/* Sends that fail at the transport (the owner is usable, its connection
 * is not up) wait again in the order they were sent, and go out in that
 * order once it is. */
static void failed_sends_wait_in_order(void)
{
    boot(3, 2);
    nodes[1].noconn = 1;
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    CHECK(tell_n(3, "y", "{\"n\":2}") == 0);
    CHECK(tell_n(3, "z", "{\"n\":3}") == 0);
    pump(100000);
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 3);
    CHECK(tell_n(3, "w", "{\"n\":4}") == 0); /* behind them */
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 4);
    nodes[1].noconn = 0;
    tick_all();
    run_all();
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 0);
    CHECK(nodes[1].ngot == 5 && got(2, 1, "{\"n\":1}") &&
          got(2, 2, "{\"n\":2}") && got(2, 3, "{\"n\":3}") &&
          got(2, 4, "{\"n\":4}"));
}

/* A peer's frame names its shard and generation: the owner resolves the
 * id itself and sends back (NOT_OWNER, with the shard it computed) a
 * request whose shard is not that one, and refuses a payload that is not
 * a strict JSON object and a type it does not have; none reaches its
 * dispatcher. */
static void lying_peer(void)
{
    boot(3, 2);
    uint64_t gen;
    ms_region_owner(nodes[1].r, 0, 0, &gen);
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    f.kind = MS_FRAME_TELL;
    f.type = "T";
    f.type_len = 1;
    f.id = "x";
    f.id_len = 1;
    f.shard = 5; /* there is one shard */
    f.generation = gen;
    f.payload = "{\"n\":9}";
    f.payload_len = strlen(f.payload);
    ms_region_on_frame(nodes[1].r, 3, &f, now);
    CHECK(ms_region_stats(nodes[1].r)->not_owner_sent == 1);
    f.shard = 0;
    f.payload = "{\"n\":";
    f.payload_len = strlen(f.payload);
    ms_region_on_frame(nodes[1].r, 3, &f, now);
    CHECK(ms_region_stats(nodes[1].r)->bad_payloads == 1);
    f.type = "U"; /* a type it does not have */
    f.payload = "{}";
    f.payload_len = 2;
    ms_region_on_frame(nodes[1].r, 3, &f, now);
    CHECK(ms_region_stats(nodes[1].r)->forwards == 1); /* {"n":0} only */
    CHECK(ms_dispatch_pending(nodes[1].d) == 0);
    /* the sender gets its message back and routes it by its own plan */
    run_all();
    CHECK(nodes[1].ngot == 2 && got(2, 1, "{\"n\":9}"));
}

/* A remote ask answered by the owner's dispatcher (ctx:reply inside a
 * handler, outside of any region call) wakes the owner's caller with the
 * REPLY queued, so it leaves then, not when the dispatch round ends. */
static void reply_wakes(void)
{
    boot(2, 1);
    cb_calls = 0;
    CHECK(ask_n(2, "x", "{\"q\":1}", 5000) > 0);
    pump(100000); /* the ASK reaches node 1's dispatcher */
    struct node *owner = &nodes[0];
    struct ms_delivery dl;
    CHECK(ms_dispatch_next(owner->d, &dl) && dl.kind == MS_KIND_ASK);
    int before = owner->wakes;
    CHECK(!ms_region_pending(owner->r));
    ms_dispatch_reply(owner->d, dl.h, "{\"ok\":2}", 8, now);
    /* the handler has not finished: the reply waits for no round */
    CHECK(owner->wakes == before + 1);
    CHECK(ms_region_pending(owner->r));
    struct ms_region_action a;
    CHECK(ms_region_next_action(owner->r, &a));
    CHECK(a.kind == MS_REGION_SEND && a.uid == 2 &&
          a.frame.kind == MS_FRAME_REPLY);
    ms_region_on_frame(nodes[1].r, 1, &a.frame, now);
    ms_region_action_free(&a);
    CHECK(cb_calls == 1 && cb_err == 0);
    ms_dispatch_done(owner->d, dl.h, now);
    /* an ask that fails on the owner (the handler ends without a reply)
     * wakes it the same way */
    CHECK(ask_n(2, "x", "{\"q\":2}", 5000) > 0);
    pump(100000);
    CHECK(ms_dispatch_next(owner->d, &dl) && dl.kind == MS_KIND_ASK);
    before = owner->wakes;
    ms_dispatch_done(owner->d, dl.h, now);
    CHECK(owner->wakes == before + 1);
    pump(100000);
    CHECK(cb_calls == 2 && cb_err == MS_ENOREPLY);
    /* the sender's own ask, answered from the network, wakes nobody */
    CHECK(nodes[1].wakes == 0);
}

/* A node frees its config and dispatcher in close callbacks that libuv
 * may run before the router's, which frees the region: ms_region_free
 * must not read them (it did: a segfault when a node that had shard
 * state, e.g. after a leave, stopped). */
static void free_after_config(void)
{
    boot(2, 0);
    CHECK(tell_n(2, "x", "{\"n\":1}") == 0); /* waits: shard state */
    CHECK(ms_region_waiting(nodes[1].r, 0, 0) == 1);
    struct ms_type_config *types = nodes[1].cfg.types;
    nodes[1].cfg.types = NULL; /* what ms_config_free leaves */
    ms_dispatch_free(nodes[1].d);
    nodes[1].d = NULL;
    ms_region_free(nodes[1].r);
    nodes[1].r = NULL;
    nodes[1].cfg.types = types;
    CHECK(1);
}

/* ---- leases (a persistent type) ----------------------------------------- */

#define DBT 5000000000000LL /* the database clock at local time 0 */

/* The index of node's last lease statement of `kind` (-1: none). */
static int last_stmt(int node, int kind)
{
    struct node *n = &nodes[node - 1];
    for (int i = n->nst - 1; i >= 0; i--)
        if (n->st[i].kind == kind)
            return i;
    return -1;
}

static int count_stmt(int node, int kind)
{
    int c = 0;
    for (int i = 0; i < nodes[node - 1].nst; i++)
        c += nodes[node - 1].st[i].kind == kind;
    return c;
}

/* The database answers statement i of node with `kind` (an epoch and the
 * time left for ACQUIRED and RENEWED). */
static void db_answer(int node, int i, int kind, uint64_t epoch,
                      int64_t left_ms)
{
    struct node *n = &nodes[node - 1];
    CHECK(i >= 0 && i < n->nst);
    struct ms_lease_answer a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.type = n->st[i].type;
    a.shard = n->st[i].shard;
    a.req = n->st[i].req;
    a.epoch = epoch;
    a.db_now_ms = DBT + (int64_t)now;
    a.expires_at_ms = a.db_now_ms + left_ms;
    CHECK(ms_region_lease_answer(n->r, &a, now) == 0);
    run_all();
}

/* Boots `count` persistent nodes with shard 0 on node `owner` and its
 * lease held at epoch 1 (the boot's first tell {"n":0} delivered). */
static void boot_held(int count, uint64_t owner)
{
    persist = 1;
    boot(count, owner);
    persist = 0;
    int o = (int)owner;
    CHECK(count_stmt(o, MS_LEASE_ACQUIRE) == 1);
    CHECK(strcmp(nodes[o - 1].st[0].owner, nodes[o - 1].name) == 0);
    db_answer(o, 0, MS_LEASE_ANS_ACQUIRED, 1, 1000);
    CHECK(got(o, 0, "{\"n\":0}"));
    CHECK(ms_region_lease_epoch_at(nodes[o - 1].r, 0, 0, now) == 1);
}

/* Ticks every node for `ms`, 100 ms at a time, running dispatchers. */
static void advance(uint64_t ms)
{
    for (uint64_t t = 0; t < ms; t += 100) {
        now += 100;
        tick_all();
        run_all();
    }
}

/* Messages for an owned persistent shard wait until its lease is
 * acquired (own and other nodes' requests, in order), then flow before
 * any new one; a non-persistent region asks no lease at all. */
static void lease_wait_then_order(void)
{
    persist = 1;
    boot(2, 1);
    persist = 0;
    CHECK(nodes[0].nst == 1 && nodes[0].st[0].kind == MS_LEASE_ACQUIRE);
    CHECK(nodes[0].st[0].duration_ms == 1000);
    CHECK(nodes[1].nst == 0); /* owns nothing */
    CHECK(tell_n(1, "a", "{\"n\":1}") == 0);
    CHECK(tell_n(2, "b", "{\"n\":2}") == 0); /* a request of node 2 */
    run_all(); /* it reaches node 1, and waits there */
    cb_calls = 0;
    CHECK(ask_n(1, "c", "{\"n\":3}", 10000) > 0);
    run_all();
    CHECK(nodes[0].ngot == 0 && cb_calls == 0);
    CHECK(ms_region_lease_waiting(nodes[0].r) == 4);
    CHECK(ms_region_lease_epoch_at(nodes[0].r, 0, 0, now) == 0);
    db_answer(1, 0, MS_LEASE_ANS_ACQUIRED, 7, 1000);
    CHECK(tell_n(1, "d", "{\"n\":4}") == 0);
    run_all();
    CHECK(nodes[0].ngot == 5);
    CHECK(got(1, 0, "{\"n\":0}") && got(1, 1, "{\"n\":1}") &&
          got(1, 2, "{\"n\":2}") && got(1, 3, "{\"n\":3}") &&
          got(1, 4, "{\"n\":4}"));
    CHECK(cb_calls == 1 && cb_err == 0);
    CHECK(ms_region_lease_epoch_at(nodes[0].r, 0, 0, now) == 7);
    CHECK(ms_region_lease_waiting(nodes[0].r) == 0);
    /* the epoch is not usable past the lease's local expiry */
    CHECK(ms_region_lease_epoch_at(nodes[0].r, 0, 0, now + 1000) == 0);
    /* renewals keep it */
    advance(300);
    int i = last_stmt(1, MS_LEASE_RENEW);
    CHECK(i >= 0 && nodes[0].st[i].epoch == 7);
    db_answer(1, i, MS_LEASE_ANS_RENEWED, 7, 1000);
    CHECK(ms_lease_held(ms_region_lease(nodes[0].r)) == 1);
    /* in-memory types: no lease machine, no statement */
    boot(2, 1);
    CHECK(ms_region_lease(nodes[0].r) == NULL && nodes[0].nst == 0);
    CHECK(got(1, 0, "{\"n\":0}"));
    CHECK(ms_region_lease_epoch(nodes[0].r, 0, 0) == 0);
}

/* While the lease is acquired, 1,024 own messages wait; the next tell
 * is refused with MS_EOVERFLOW and the next ask ends with it. */
static void lease_overflow(void)
{
    persist = 1;
    boot(1, 1);
    persist = 0;
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 1); /* the boot's tell */
    char id[16];
    for (int i = 1; i < MS_REGION_BUFFER; i++) {
        snprintf(id, sizeof id, "e%d", i);
        CHECK(tell_n(1, id, "{}") == 0);
    }
    CHECK(tell_n(1, "over", "{}") == MS_EOVERFLOW);
    cb_calls = 0;
    CHECK(ask_n(1, "over", "{}", 1000) > 0);
    CHECK(cb_calls == 1 && cb_err == MS_EOVERFLOW);
    db_answer(1, 0, MS_LEASE_ANS_ACQUIRED, 1, 1000);
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 0);
    struct ms_stats st;
    ms_dispatch_stats(nodes[0].d, &st);
    CHECK(st.delivered == MS_REGION_BUFFER);
}

/* The lease window runs out: what waited is rejected with MS_ELEASE (an
 * own ask, another node's ask, tells counted), new messages get MS_ELEASE
 * at once, and once the lease is held again only new messages are
 * delivered: a rejected one is never replayed. */
static void lease_window_rejects(void)
{
    persist = 1;
    boot(2, 1);
    persist = 0;
    /* the database keeps refusing: another owner holds the row */
    db_answer(1, 0, MS_LEASE_ANS_REFUSED, 0, 5000);
    CHECK(tell_n(1, "a", "{\"n\":1}") == 0);
    cb_calls = 0;
    CHECK(ask_n(1, "b", "{\"n\":2}", 60000) > 0);
    run_all();
    int remote_calls = cb_calls;
    CHECK(ask_n(2, "c", "{\"n\":3}", 60000) > 0);
    run_all();
    CHECK(cb_calls == remote_calls && remote_calls == 0);
    for (int t = 0; t < 2000 && cb_calls < 2; t += 100) {
        now += 100;
        tick_all();
        int i = last_stmt(1, MS_LEASE_ACQUIRE);
        if (nodes[0].st[i].req && i > 0 &&
            nodes[0].st[i].kind == MS_LEASE_ACQUIRE) {
            db_answer(1, i, MS_LEASE_ANS_REFUSED, 0, 5000);
            nodes[0].st[i].req = 0; /* answered */
        }
        run_all();
    }
    CHECK(cb_calls == 2 && cb_err == MS_ELEASE);
    CHECK(nodes[0].ngot == 0);
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 0);
    CHECK(ms_region_lease_rejected(nodes[0].r) == 4); /* n:0, 1, 2, 3 */
    CHECK(tell_n(1, "d", "{\"n\":4}") == MS_ELEASE);
    cb_calls = 0;
    CHECK(ask_n(2, "e", "{\"n\":5}", 60000) > 0);
    run_all();
    CHECK(cb_calls == 1 && cb_err == MS_ELEASE);
    /* held at last: the next acquire sent is granted (one answered
     * after its 1 s lease would have run out here is too late) */
    advance(2000);
    int before = count_stmt(1, MS_LEASE_ACQUIRE);
    for (int t = 0; t < 8000 && count_stmt(1, MS_LEASE_ACQUIRE) == before;
         t += 100)
        advance(100);
    int i = last_stmt(1, MS_LEASE_ACQUIRE);
    CHECK(count_stmt(1, MS_LEASE_ACQUIRE) > before);
    db_answer(1, i, MS_LEASE_ANS_ACQUIRED, 2, 1000);
    CHECK(tell_n(1, "f", "{\"n\":6}") == 0);
    run_all();
    CHECK(nodes[0].ngot == 1 && got(1, 0, "{\"n\":6}"));
}

/* A renewal refused: the lease is lost, the shard's entities stop at
 * once and new messages wait; the lease is acquired again after the
 * backoff and they flow. */
static void lease_lost_renewal(void)
{
    boot_held(1, 1);
    advance(300);
    int i = last_stmt(1, MS_LEASE_RENEW);
    CHECK(i >= 0);
    struct ms_stats st;
    ms_dispatch_stats(nodes[0].d, &st);
    CHECK(st.active_entities == 1 && st.shards_stopped == 0);
    db_answer(1, i, MS_LEASE_ANS_REFUSED, 0, 0);
    ms_dispatch_stats(nodes[0].d, &st);
    CHECK(st.active_entities == 0 && st.shards_stopped == 1);
    CHECK(ms_region_lease_epoch_at(nodes[0].r, 0, 0, now) == 0);
    CHECK(ms_lease_stats(ms_region_lease(nodes[0].r))->lost == 1);
    CHECK(tell_n(1, "x", "{\"n\":1}") == 0);
    run_all();
    CHECK(nodes[0].ngot == 1);
    int before = nodes[0].nst;
    advance(200); /* the backoff */
    i = last_stmt(1, MS_LEASE_ACQUIRE);
    CHECK(i >= before);
    db_answer(1, i, MS_LEASE_ANS_ACQUIRED, 1, 1000);
    CHECK(nodes[0].ngot == 2 && got(1, 1, "{\"n\":1}"));
    CHECK(ms_region_lease_epoch_at(nodes[0].r, 0, 0, now) == 1);
}

/* A handoff: the old owner sends RELEASE only after its dispatcher
 * stopped the shard, and reports STOPPED only once the release is
 * answered; the new owner then acquires before it takes messages. A
 * release that is never answered is reported after
 * MS_REGION_RELEASE_WAIT_MS, or half of handoff_timeout if less. */
static void lease_handoff_release(void)
{
    boot_held(2, 1);
    want_owner = 2;
    CHECK(ms_coord_move(ms_region_coord(nodes[0].r), 0, 0, now) == 0);
    pump(100000); /* HANDOFF, fences, STOP: the dispatcher stops */
    CHECK(count_stmt(1, MS_LEASE_RELEASE) == 0);
    CHECK(ms_region_stopping(nodes[0].r) == 1);
    /* entities still finishing may write: the lease is theirs */
    CHECK(ms_region_lease_epoch_at(nodes[0].r, 0, 0, now) == 1);
    run_all(); /* stopped: the release goes out, the report waits */
    int i = last_stmt(1, MS_LEASE_RELEASE);
    CHECK(i >= 0 && nodes[0].st[i].epoch == 1);
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 1);
    CHECK(ms_region_stats(nodes[0].r)->shards_handed_off == 0);
    CHECK(count_stmt(2, MS_LEASE_ACQUIRE) == 0);
    db_answer(1, i, MS_LEASE_ANS_RELEASED, 0, 0);
    CHECK(ms_region_stats(nodes[0].r)->shards_handed_off == 1);
    CHECK(ms_region_owner(nodes[1].r, 0, 0, NULL) == 2);
    CHECK(count_stmt(2, MS_LEASE_ACQUIRE) == 1);
    CHECK(tell_n(2, "x", "{\"n\":1}") == 0);
    run_all();
    CHECK(nodes[1].ngot == 0);
    db_answer(2, last_stmt(2, MS_LEASE_ACQUIRE), MS_LEASE_ANS_ACQUIRED, 2,
              1000);
    CHECK(nodes[1].ngot == 1 && got(2, 0, "{\"n\":1}"));
    /* back to node 1; this time the release is never answered */
    want_owner = 1;
    CHECK(ms_coord_move(ms_region_coord(nodes[0].r), 0, 0, now) == 0);
    run_all();
    i = last_stmt(2, MS_LEASE_RELEASE);
    CHECK(i >= 0 && nodes[1].st[i].epoch == 2);
    CHECK(ms_region_stats(nodes[1].r)->shards_handed_off == 0);
    advance(HANDOFF_MS / 2 - 200); /* below MS_REGION_RELEASE_WAIT_MS */
    CHECK(ms_region_stats(nodes[1].r)->shards_handed_off == 0);
    advance(300);
    CHECK(ms_region_stats(nodes[1].r)->shards_handed_off == 1);
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 1);
}

/* A move of a persistent shard rolled back at its deadline while the old
 * owner's entities still stop: the old owner's lease is its own again
 * (renewed meanwhile), so what waited reaches it, in order. */
static void lease_rollback_during_stop(void)
{
    boot_held(3, 2);
    start_move(1);
    CHECK(ms_region_stopping(nodes[1].r) == 1);
    CHECK(ms_lease_state(ms_region_lease(nodes[1].r), 0, 0) ==
          MS_LEASE_STOPPING);
    CHECK(tell_n(3, "y", "{\"n\":2}") == 0);
    /* node 2's dispatcher does not run (no STOPPED); the database answers
     * its renewals */
    uint64_t end = now + HANDOFF_MS + 1;
    int seen = nodes[1].nst;
    while (now < end) {
        now = now + 100 < end ? now + 100 : end;
        tick_all();
        for (; seen < nodes[1].nst; seen++) {
            struct ms_lease_action *st = &nodes[1].st[seen];
            if (st->kind != MS_LEASE_RENEW)
                continue;
            struct ms_lease_answer a;
            memset(&a, 0, sizeof a);
            a.kind = MS_LEASE_ANS_RENEWED;
            a.type = st->type;
            a.shard = st->shard;
            a.req = st->req;
            a.epoch = 1;
            a.db_now_ms = DBT + (int64_t)now;
            a.expires_at_ms = a.db_now_ms + 1000;
            CHECK(ms_region_lease_answer(nodes[1].r, &a, now) == 0);
        }
    }
    struct ms_coord_move_stats ms;
    ms_coord_move_stats(ms_region_coord(nodes[0].r), &ms);
    CHECK(ms.aborted == 1 && ms.in_progress == 0);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    CHECK(ms_region_stopping(nodes[1].r) == 0);
    run_all();
    CHECK(ms_lease_state(ms_region_lease(nodes[1].r), 0, 0) ==
          MS_LEASE_HELD);
    CHECK(ms_region_lease_epoch_at(nodes[1].r, 0, 0, now) == 1);
    CHECK(nodes[1].ngot == 2 && got(2, 1, "{\"n\":2}"));
    CHECK(tell_n(3, "z", "{\"n\":3}") == 0);
    run_all();
    CHECK(nodes[1].ngot == 3 && got(2, 2, "{\"n\":3}"));
    CHECK(nodes[0].ngot == 0);
    CHECK(count_stmt(2, MS_LEASE_RELEASE) == 0);
}

/* Node 2 gets shard 0's plan entry again, from the coordinator (node
 * 1), with the generation it knows: the same plan sent again. */
static void plan_again_to_2(void)
{
    uint64_t gen = 0;
    uint64_t owner = ms_region_owner(nodes[1].r, 0, 0, &gen);
    struct ms_plan_entry e = {0, owner, gen};
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_PLAN;
    m.term = ms_coord_term(ms_region_coord(nodes[0].r));
    snprintf(m.type, sizeof m.type, "T");
    m.shard_count = nodes[1].tc.shard_count;
    m.entries = &e;
    m.nentries = 1;
    char *text = NULL;
    size_t len = 0;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == 0);
    struct ms_frame f;
    memset(&f, 0, sizeof f);
    f.kind = MS_FRAME_CONTROL;
    f.payload = text;
    f.payload_len = len;
    if (text)
        ms_region_on_frame(nodes[1].r, 1, &f, now);
    free(text);
}

/* A plan entry that is not newer than a move (the same plan sent again
 * while the old owner stops the shard) changes nothing of the lease: it
 * stays STOPPING, is released once the entities stopped, and is not
 * acquired again after the release. */
static void lease_plan_again_during_stop(void)
{
    boot_held(3, 2);
    start_move(1);
    CHECK(ms_lease_state(ms_region_lease(nodes[1].r), 0, 0) ==
          MS_LEASE_STOPPING);
    plan_again_to_2();
    CHECK(ms_lease_state(ms_region_lease(nodes[1].r), 0, 0) ==
          MS_LEASE_STOPPING);
    run_all(); /* the entities stopped: the release goes out */
    CHECK(last_stmt(2, MS_LEASE_RELEASE) >= 0);

    /* sent again while the release is out */
    boot_held(3, 2);
    start_move(1);
    run_all();
    int i = last_stmt(2, MS_LEASE_RELEASE);
    CHECK(i >= 0);
    CHECK(ms_lease_state(ms_region_lease(nodes[1].r), 0, 0) ==
          MS_LEASE_RELEASING);
    plan_again_to_2();
    int acquires = count_stmt(2, MS_LEASE_ACQUIRE);
    if (i >= 0)
        db_answer(2, i, MS_LEASE_ANS_RELEASED, 0, 0);
    advance(500);
    CHECK(count_stmt(2, MS_LEASE_ACQUIRE) == acquires);
    CHECK(ms_lease_state(ms_region_lease(nodes[1].r), 0, 0) ==
          MS_LEASE_NONE);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
}

/* A member unreachable: the shard's entities stop, nothing is renewed
 * (and a handoff releases nothing): the lease runs out. All reachable
 * again: acquired again. */
static void lease_unreachable(void)
{
    boot_held(2, 1);
    ms_region_members_reachable(nodes[0].r, 0, now);
    run_all();
    struct ms_stats st;
    ms_dispatch_stats(nodes[0].d, &st);
    CHECK(st.shards_stopped == 1 && st.active_entities == 0);
    CHECK(ms_lease_stats(ms_region_lease(nodes[0].r))->fenced == 1);
    CHECK(ms_region_lease_epoch_at(nodes[0].r, 0, 0, now) == 0);
    int before = nodes[0].nst;
    CHECK(tell_n(1, "x", "{\"n\":1}") == 0);
    advance(1500);
    CHECK(nodes[0].nst == before); /* no renew, no acquire */
    CHECK(nodes[0].ngot == 1);
    /* a handoff meanwhile releases nothing */
    want_owner = 2;
    CHECK(ms_coord_move(ms_region_coord(nodes[0].r), 0, 0, now) == 0);
    run_all();
    CHECK(count_stmt(1, MS_LEASE_RELEASE) == 0);
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 2);
    CHECK(count_stmt(2, MS_LEASE_ACQUIRE) == 1);
    /* reachable again: nothing of node 1's is acquired (not its shard) */
    ms_region_members_reachable(nodes[0].r, 1, now);
    run_all();
    CHECK(nodes[0].nst == before);
    /* on node 2: unreachable then reachable acquires again */
    db_answer(2, last_stmt(2, MS_LEASE_ACQUIRE), MS_LEASE_ANS_ACQUIRED, 2,
              1000);
    CHECK(nodes[1].ngot == 1 && got(2, 0, "{\"n\":1}"));
    ms_region_members_reachable(nodes[1].r, 0, now);
    run_all();
    ms_region_members_reachable(nodes[1].r, 1, now);
    run_all();
    CHECK(count_stmt(2, MS_LEASE_ACQUIRE) == 2);
}

/* A tell waiting for a lease waits the whole lease window, even past
 * the deadline of a tell waiting for an owner
 * (MS_REGION_TELL_DEADLINE_MS). */
static void lease_window_beyond_tell_deadline(void)
{
    lease_window = MS_REGION_TELL_DEADLINE_MS + 5000;
    persist = 1;
    boot(1, 1);
    persist = 0;
    lease_window = 2000;
    db_answer(1, 0, MS_LEASE_ANS_DB_ERROR, 0, 0);
    CHECK(tell_n(1, "a", "{\"n\":1}") == 0);
    for (int t = 0; t < MS_REGION_TELL_DEADLINE_MS + 2000; t += 100) {
        now += 100;
        tick_all();
        int i = last_stmt(1, MS_LEASE_ACQUIRE);
        if (i > 0 && nodes[0].st[i].req) {
            db_answer(1, i, MS_LEASE_ANS_DB_ERROR, 0, 0);
            nodes[0].st[i].req = 0;
        }
        run_all();
    }
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 2); /* n:0 and n:1 */
    advance(2000);
    int i = last_stmt(1, MS_LEASE_ACQUIRE);
    db_answer(1, i, MS_LEASE_ANS_ACQUIRED, 1, 1000);
    CHECK(nodes[0].ngot == 2 && got(1, 0, "{\"n\":0}") &&
          got(1, 1, "{\"n\":1}"));
}

/* A node whose type is not persistent (or is, with other lease timings)
 * is refused that type by a cluster where it is: it would host shards
 * without their leases. */
static void lease_settings_must_match(void)
{
    reset();
    persist = 1;
    add_node(1);
    persist = 0;
    add_node(2);
    persist = 1;
    add_node(3);
    persist = 0;
    nodes[2].tc.lease_duration_ms = 2000; /* other timings */
    ms_region_free(nodes[2].r);
    struct ms_region_config rc;
    memset(&rc, 0, sizeof rc);
    rc.self_uid = 3;
    rc.cfg = &nodes[2].cfg;
    rc.d = nodes[2].d;
    rc.usable = usable;
    rc.allocate = allocate;
    CHECK(ms_region_new(&nodes[2].r, &rc) == 0);
    for (int i = 0; i < nn; i++)
        for (int j = 0; j < nn; j++)
            ms_region_member(nodes[i].r, nodes[j].uid, MS_MB_UP, now);
    for (int i = 0; i < nn; i++)
        ms_region_on_coordinator(nodes[i].r, 1, now);
    pump(100000);
    CHECK(ms_coord_ready(ms_region_coord(nodes[0].r)));
    CHECK(!ms_region_refused(nodes[0].r, 0));
    CHECK(ms_region_refused(nodes[1].r, 0));
    CHECK(ms_region_refused(nodes[2].r, 0));
}

/* remember-entities: which shard serves where, and a handoff's STOPPED
 * held until the shard's records are written (region.h) */
static int hold_answer, hold_calls;

static int hold_cb(void *data, int type, uint32_t shard)
{
    (void)data, (void)type, (void)shard;
    hold_calls++;
    return hold_answer;
}

static void remember_hold_and_serving(void)
{
    boot(3, 2);
    CHECK(ms_region_shard_serving(nodes[1].r, 0, 0) == 1);
    CHECK(ms_region_shard_serving(nodes[0].r, 0, 0) == 0);
    CHECK(ms_region_shard_serving(nodes[2].r, 0, 0) == 0);
    CHECK(ms_region_shard_serving(nodes[1].r, 0, 1) == 0); /* no shard 1 */
    hold_answer = 1;
    hold_calls = 0;
    ms_region_set_stop_hold(nodes[1].r, hold_cb, NULL);
    start_move(1);
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    run_all();
    /* stopped in the dispatcher, but held: no STOPPED, the move waits */
    CHECK(hold_calls >= 1);
    CHECK(ms_region_shard_serving(nodes[1].r, 0, 0) == 0);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    struct ms_coord_move_stats ms;
    ms_coord_move_stats(ms_region_coord(nodes[0].r), &ms);
    CHECK(ms.in_progress == 1);
    now += 100;
    tick_all();
    run_all();
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    /* written: the next tick lets the stop go on, the move ends */
    hold_answer = 0;
    now += 100;
    tick_all();
    run_all();
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    CHECK(ms_region_shard_serving(nodes[0].r, 0, 0) == 1);
    CHECK(ms_region_shard_serving(nodes[1].r, 0, 0) == 0);
    CHECK(got(1, 0, "{\"n\":1}")); /* the tell that waited, delivered */

    /* a hold that never ends gives up within the bound */
    hold_answer = 1;
    ms_region_set_stop_hold(nodes[0].r, hold_cb, NULL);
    start_move(3);
    run_all();
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    now += HANDOFF_MS / 2 + 1;
    tick_all();
    run_all();
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 3);
    CHECK(ms_region_shard_serving(nodes[2].r, 0, 0) == 1);
    hold_answer = 0;
}

/* Found by the simulator (sim/regressions.txt, seeds 26 and 100): the plan
 * entries that unassigned a removed owner's shard and then gave it to node
 * 3 were lost on their way to node 3 (its connection ended). */
static int drop_plans_to_3(uint64_t from, uint64_t to,
                           const struct ms_frame *f)
{
    (void)from;
    return to == 3 && is_plan(f) ? DROP : PASS;
}

/* The new owner that missed its entry holds the requests other nodes
 * routed with the newer plan (it does not send them back on its older
 * one) and asks the coordinator for the entry, then delivers them. */
static void lost_entry_new_owner_asks(void)
{
    boot(3, 2);
    filter = drop_plans_to_3;
    /* only the coordinator learns that node 2 is gone: node 3 still
     * thinks it owns the shard, and may send to it */
    ms_region_member(nodes[0].r, 2, MS_MB_REMOVED, now);
    want_owner = 3;
    CHECK(tell_n(1, "x", "{\"n\":1}") == 0);
    run_all();
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 3);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    CHECK(nodes[2].ngot == 0);
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 1); /* held, not bounced */
    CHECK(ms_region_stats(nodes[2].r)->not_owner_sent == 0);
    filter = NULL;
    now += MS_REGION_ALLOC_RETRY_MS + 100;
    tick_all();
    run_all();
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 3);
    CHECK(nodes[2].ngot == 1 && got(3, 0, "{\"n\":1}"));
}

/* A sender whose plan still names an owner that is gone (not usable)
 * asks the coordinator for the entry instead of waiting for the owner
 * until its messages expire. */
static void lost_entry_sender_asks(void)
{
    boot(3, 2);
    filter = drop_plans_to_3;
    nodes[1].up = 0; /* node 2 is gone */
    ms_region_member(nodes[0].r, 2, MS_MB_REMOVED, now);
    want_owner = 1;
    CHECK(tell_n(1, "y", "{\"n\":1}") == 0);
    run_all();
    now += MS_REGION_ALLOC_RETRY_MS + 100; /* the alloc is asked again */
    tick_all();
    run_all();
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 1);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    CHECK(tell_n(3, "x", "{\"n\":5}") == 0);
    run_all();
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 1);
    filter = NULL;
    now += MS_REGION_ALLOC_RETRY_MS + 100;
    tick_all();
    run_all();
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    CHECK(ms_region_waiting(nodes[2].r, 0, 0) == 0);
    CHECK(nodes[0].ngot == 2 && got(1, 1, "{\"n\":5}"));
}

/* Found by the simulator (sim/regressions.txt, seeds 41, 79, 198): a
 * persistent shard handed off while requests of other nodes waited at the
 * old owner for its lease. Sent back after the new owner was published,
 * they raced the plan to their sender and came after its later messages.
 * Now the old owner takes STOP only once they are delivered (the
 * coordinator sends STOP again until then). */
static void lease_stop_waits_for_held(void)
{
    persist = 1;
    boot(3, 2); /* node 3's {"n":0} waits at node 2 for the lease */
    persist = 0;
    CHECK(tell_n(3, "x", "{\"n\":1}") == 0);
    run_all();
    CHECK(nodes[1].ngot == 0 && ms_region_waiting(nodes[1].r, 0, 0) == 2);
    start_move(1);
    run_all();
    CHECK(ms_region_stopping(nodes[1].r) == 0); /* STOP not taken yet */
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    db_answer(2, last_stmt(2, MS_LEASE_ACQUIRE), MS_LEASE_ANS_ACQUIRED, 1,
              1000);
    CHECK(nodes[1].ngot == 2 && got(2, 0, "{\"n\":0}") &&
          got(2, 1, "{\"n\":1}"));
    /* STOP comes again: the shard stops, its lease is released, and the
     * new owner is published */
    for (int i = 0; i < 20 && count_stmt(2, MS_LEASE_RELEASE) == 0; i++)
        advance(100);
    CHECK(count_stmt(2, MS_LEASE_RELEASE) == 1);
    db_answer(2, last_stmt(2, MS_LEASE_RELEASE), MS_LEASE_ANS_RELEASED, 0, 0);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    CHECK(ms_region_stats(nodes[1].r)->not_owner_sent == 0);
    db_answer(1, last_stmt(1, MS_LEASE_ACQUIRE), MS_LEASE_ANS_ACQUIRED, 2,
              1000);
    CHECK(tell_n(3, "x", "{\"n\":2}") == 0);
    run_all();
    CHECK(nodes[0].ngot == 1 && got(1, 0, "{\"n\":2}"));
}

/* ---- review rv14: b383c1f and bf790b0 ----------------------------------- */

static int drop_plan_to_2(uint64_t from, uint64_t to, const struct ms_frame *f)
{
    (void)from;
    return to == 2 && is_plan(f) ? DROP : PASS;
}

/* b383c1f: the entry that gave node 2 the shard (its owner node 3 was
 * removed) is lost on the way to node 2; a request node 1 routed with
 * the newer plan is held at node 2, whose plan names the gone node 3.
 * Node 2 asks the coordinator for the entry, and delivers it. */
static void lost_entry_of_new_owner(void)
{
    boot(3, 3);
    filter = drop_plan_to_2;
    nodes[2].up = 0;
    want_owner = 2;
    for (int i = 0; i < 2; i++)
        ms_region_member(nodes[i].r, 3, MS_MB_REMOVED, now);
    run_all();
    if (ms_region_owner(nodes[0].r, 0, 0, NULL) != 2) {
        CHECK(tell_n(1, "x", "{\"n\":1}") == 0); /* unassigned: allocates */
        run_all();
    } else {
        CHECK(tell_n(1, "x", "{\"n\":1}") == 0);
        run_all();
    }
    filter = NULL;
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 2);
    CHECK(ms_region_owner(nodes[1].r, 0, 0, NULL) == 3); /* lost */
    CHECK(ms_region_waiting(nodes[1].r, 0, 0) == 1);     /* held */
    advance(MS_REGION_ALLOC_RETRY_MS + 100);
    CHECK(ms_region_owner(nodes[1].r, 0, 0, NULL) == 2);
    CHECK(nodes[1].ngot == 1 && got(2, 0, "{\"n\":1}"));
}

static int hold_not_owner(uint64_t from, uint64_t to,
                          const struct ms_frame *f)
{
    (void)from, (void)to;
    return f->kind == MS_FRAME_NOT_OWNER ? HOLD : PASS;
}

/* bf790b0: a request node 3 sent before its fence waits at the old owner
 * (node 1) for the shard's lease when the move to node 2 starts; the STOP
 * waits until the lease is held and the old owner delivered it: it is
 * not sent back behind what node 3 sends to the new owner (G2). */
static void held_before_fence_delivered_by_old_owner(void)
{
    persist = 1;
    boot(3, 1); /* node 1's lease is being acquired: {"n":0} held there */
    persist = 0;
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 1);
    filter = hold_not_owner; /* a bounce arrives late */
    start_move(2);
    db_answer(1, 0, MS_LEASE_ANS_ACQUIRED, 1, 1000);
    for (int t = 0; t < 1500 && ms_region_owner(nodes[2].r, 0, 0, NULL) != 2;
         t += 100) {
        advance(100);
        int i = last_stmt(1, MS_LEASE_RELEASE);
        if (i >= 0 && nodes[0].st[i].req) {
            db_answer(1, i, MS_LEASE_ANS_RELEASED, 0, 0);
            nodes[0].st[i].req = 0;
        }
    }
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 2);
    int i = last_stmt(2, MS_LEASE_ACQUIRE);
    CHECK(i >= 0);
    db_answer(2, i, MS_LEASE_ANS_ACQUIRED, 2, 1000);
    CHECK(tell_n(3, "y", "{\"n\":1}") == 0);
    run_all();
    release();
    filter = NULL;
    run_all();
    CHECK(nodes[0].ngot == 1 && got(1, 0, "{\"n\":0}"));
    CHECK(ms_region_stats(nodes[0].r)->not_owner_sent == 0);
    CHECK(nodes[1].ngot == 1 && got(2, 0, "{\"n\":1}"));
}

/* bf790b0: the old owner's lease window runs out while its STOP waits:
 * the other node's request held there is rejected (MS_ELEASE), but the
 * old owner's own sends made during the move wait for the new owner,
 * which takes them: they never waited for this lease. */
static void window_out_during_move_keeps_own_sends(void)
{
    persist = 1;
    lease_window = 1000;
    boot(3, 1); /* node 1 acquires (never answered); {"n":0} held */
    lease_window = 2000;
    persist = 0;
    start_move(2);
    CHECK(ms_region_stopping(nodes[0].r) == 0); /* the STOP waits */
    CHECK(ms_region_moving(nodes[0].r) == 1);
    CHECK(tell_n(1, "o", "{\"n\":9}") == 0); /* for the new owner */
    cb_calls = 0;
    CHECK(ask_n(1, "p", "{\"n\":8}", 60000) > 0);
    run_all();
    CHECK(ms_region_waiting(nodes[0].r, 0, 0) == 3);
    for (int t = 0; t < 1900 && ms_region_owner(nodes[0].r, 0, 0, NULL) != 2;
         t += 100) {
        advance(100);
        int k = last_stmt(1, MS_LEASE_RELEASE);
        if (k >= 0 && nodes[0].st[k].req) {
            db_answer(1, k, MS_LEASE_ANS_RELEASED, 0, 0);
            nodes[0].st[k].req = 0;
        }
    }
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 2); /* not rolled back */
    CHECK(cb_calls == 0); /* the own ask was not rejected */
    int i = last_stmt(2, MS_LEASE_ACQUIRE);
    CHECK(i >= 0);
    db_answer(2, i, MS_LEASE_ANS_ACQUIRED, 2, 1000);
    run_all();
    CHECK(cb_calls == 1 && cb_err == 0);
    CHECK(nodes[1].ngot == 2 && got(2, 0, "{\"n\":9}") &&
          got(2, 1, "{\"n\":8}"));
    CHECK(nodes[0].ngot == 0);
    CHECK(ms_region_lease_rejected(nodes[0].r) == 1); /* {"n":0} only */
}


/* bf790b0: the STOP that waits for the old owner's lease does not hold
 * the move past its deadline: it is rolled back (the old owner keeps the
 * shard), and what was held there is delivered once the lease is held,
 * in order before what the other node sent after the rollback. */
static void rollback_while_stop_waits(void)
{
    persist = 1;
    lease_window = 20000;
    boot(3, 1); /* node 1's lease is being acquired: {"n":0} held there */
    lease_window = 2000;
    persist = 0;
    start_move(2);
    CHECK(ms_region_stopping(nodes[0].r) == 0);
    advance(HANDOFF_MS + 200);
    struct ms_coord_move_stats ms;
    ms_coord_move_stats(ms_region_coord(nodes[0].r), &ms);
    CHECK(ms.aborted == 1 && ms.in_progress == 0);
    CHECK(ms_region_owner(nodes[2].r, 0, 0, NULL) == 1);
    CHECK(ms_region_moving(nodes[0].r) == 0 &&
          ms_region_moving(nodes[2].r) == 0);
    CHECK(tell_n(3, "y", "{\"n\":1}") == 0);
    run_all();
    CHECK(nodes[0].ngot == 0);
    /* the first acquire times out unanswered; the next one is granted
     * (an answer read after its 1 s lease ran out is too late) */
    int before = count_stmt(1, MS_LEASE_ACQUIRE);
    for (int t = 0; t < 8000 && count_stmt(1, MS_LEASE_ACQUIRE) == before;
         t += 100)
        advance(100);
    CHECK(count_stmt(1, MS_LEASE_ACQUIRE) > before);
    CHECK(nodes[0].ngot == 0);
    db_answer(1, last_stmt(1, MS_LEASE_ACQUIRE), MS_LEASE_ANS_ACQUIRED, 1,
              1000);
    CHECK(nodes[0].ngot == 2 && got(1, 0, "{\"n\":0}") &&
          got(1, 1, "{\"n\":1}"));
    CHECK(nodes[1].ngot == 0);
}

/* A request held at the new owner (node 2), sent with a newer plan than
 * node 2's, whose plan still names a usable old owner (node 3): it waits
 * for node 2's plan to catch up and is delivered before what its sender
 * sent next; sent back at once, it came back after them (G2; the
 * simulator's seed 792). */
static void held_newer_gen_not_bounced(void)
{
    boot(3, 3);
    filter = drop_plan_to_2;
    want_owner = 2;
    /* the coordinator alone hears node 3 was removed; node 2 still sees
     * it as a usable member */
    ms_region_member(nodes[0].r, 3, MS_MB_REMOVED, now);
    run_all();
    if (ms_region_owner(nodes[0].r, 0, 0, NULL) != 2) {
        CHECK(tell_n(1, "w", "{\"n\":0}") == 0); /* allocates */
        run_all();
    }
    CHECK(ms_region_owner(nodes[0].r, 0, 0, NULL) == 2);
    CHECK(ms_region_owner(nodes[1].r, 0, 0, NULL) == 3);
    filter = hold_not_owner;
    CHECK(tell_n(1, "a", "{\"n\":1}") == 0);
    pump(100000);
    filter = NULL;
    advance(MS_REGION_ALLOC_RETRY_MS + 100); /* node 2 asks for its entry */
    CHECK(ms_region_owner(nodes[1].r, 0, 0, NULL) == 2);
    CHECK(tell_n(1, "b", "{\"n\":2}") == 0);
    run_all();
    release();
    run_all();
    int a = -1, b = -1;
    for (int i = 0; i < nodes[1].ngot; i++) {
        if (!strcmp(nodes[1].got[i], "{\"n\":1}"))
            a = i;
        if (!strcmp(nodes[1].got[i], "{\"n\":2}"))
            b = i;
    }
    CHECK(a >= 0 && b >= 0 && a < b);
}

/* STOPPED frames on the network and their entries. */
static int stopped_frames, stopped_entries;

static int count_stopped(uint64_t from, uint64_t to, const struct ms_frame *f)
{
    (void)from, (void)to;
    struct ms_plan_msg m;
    if (f->kind == MS_FRAME_CONTROL &&
        ms_plan_msg_decode(f->payload, f->payload_len, &m) == 0) {
        if (m.kind == MS_PLAN_MSG_STOPPED) {
            stopped_frames++;
            stopped_entries += (int)m.nentries;
        }
        ms_plan_msg_free(&m);
    }
    return PASS;
}

/* The shards one dispatch round stopped are reported in one STOPPED
 * (per coordinator, term and type), and every one moves. */
static void stopped_reported_together(void)
{
    next_shards = 8;
    boot(3, 0);
    want_owner = 2;
    uint32_t shards[8];
    int ns = 0;
    char id[16];
    for (int i = 0; i < 400 && ns < 4; i++) {
        snprintf(id, sizeof id, "k%d", i);
        struct ms_dest dst;
        CHECK(ms_dispatch_resolve(nodes[2].d, 0, id, strlen(id), &dst) == 0);
        int seen = 0;
        for (int k = 0; k < ns; k++)
            seen |= shards[k] == dst.shard;
        if (seen)
            continue;
        shards[ns++] = dst.shard;
        CHECK(tell_n(3, id, "{\"n\":1}") == 0);
    }
    CHECK(ns == 4);
    run_all();
    CHECK(nodes[1].ngot == 4);
    want_owner = 1;
    for (int k = 0; k < ns; k++)
        CHECK(ms_coord_move(ms_region_coord(nodes[0].r), 0, shards[k],
                            now) == 0);
    pump(100000);
    CHECK(ms_region_stopping(nodes[1].r) == (uint32_t)ns);
    stopped_frames = stopped_entries = 0;
    filter = count_stopped;
    run_all();
    filter = NULL;
    CHECK(stopped_frames == 1 && stopped_entries == ns);
    for (int k = 0; k < ns; k++)
        CHECK(ms_region_owner(nodes[2].r, 0, shards[k], NULL) == 1);
    CHECK(ms_region_stopping(nodes[1].r) == 0);
    next_shards = SHARDS;
}

int main(void)
{
    stopped_reported_together();
    lease_stop_waits_for_held();
    lost_entry_new_owner_asks();
    lost_entry_sender_asks();
    remember_hold_and_serving();
    fence_fifo();
    buffer_bound();
    deadline_expires();
    rollback_on_deadline();
    join_during_move();
    lost_final_plan();
    not_owner_retry_limit();
    held_requests_flushed();
    failed_sends_wait_in_order();
    lying_peer();
    reply_wakes();
    free_after_config();
    lease_wait_then_order();
    lease_overflow();
    lease_window_rejects();
    lease_lost_renewal();
    lease_handoff_release();
    lease_rollback_during_stop();
    lease_plan_again_during_stop();
    lease_unreachable();
    lease_window_beyond_tell_deadline();
    lease_settings_must_match();
    lost_entry_of_new_owner();
    held_before_fence_delivered_by_old_owner();
    window_out_during_move_keeps_own_sends();
    rollback_while_stop_waits();
    held_newer_gen_not_bounced();
    reset();
    CHECK_DONE();
}
