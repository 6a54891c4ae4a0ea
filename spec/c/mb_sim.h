/*
 * mb_sim.h -- a deterministic simulation of several membership nodes in
 * one process, for test_membership.c and test_membership_sim.c: a
 * virtual clock, an in-test network that routes the
 * SEND_GOSSIP/SEND_HEARTBEAT actions, answers heartbeats, and can delay,
 * reorder, duplicate, drop, partition and replay stale gossip.
 */
#ifndef MS_SPEC_MB_SIM_H
#define MS_SPEC_MB_SIM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/core/membership.h"
#include "check.h"

#define MAXN 16
#define STEP_MS 10
#define POOL 256

enum { M_GOSSIP = 1, M_HB, M_ACK };

struct msg {
    uint64_t at, seq;
    int kind, from, to;
    char *json;
    size_t len;
};

struct node {
    struct ms_membership *m;
    uint64_t uid;
    char name[16], addr[32];
    int alive;          /* ticks and receives */
    int self_removed, self_down;
    int ev[MAXN];       /* last status event about node j */
    int seen_ev[MAXN][8]; /* which MEMBER_* statuses were told, per j */
    uint64_t unreach_at[MAXN], last_ack[MAXN];
    int reach_events[MAXN];
    uint64_t coord;     /* last COORDINATOR_CHANGED */
    int coord_events;
};

struct sim {
    struct node n[MAXN];
    int nn;
    struct msg *q;
    size_t nq, qcap;
    uint64_t now, seq, rng;
    int cut[MAXN][MAXN];
    int drop_pct, dup_pct, replay_pct;
    uint64_t max_delay;
    const char *seeds[2];
    int assume_no_shards;
    int obs[MAXN][MAXN]; /* highest status node i has shown for node j */
    int backwards;       /* violations seen */
    char *pool[POOL];
    size_t pool_len[POOL];
    int pool_from[POOL];
    int npool;
};

static inline uint64_t rnd(struct sim *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 0x2545f4914f6cdd1dULL;
}

static inline int by_uid(struct sim *s, uint64_t uid)
{
    for (int i = 0; i < s->nn; i++)
        if (s->n[i].uid == uid)
            return i;
    return -1;
}

static inline void sim_init(struct sim *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->rng = seed;
    s->now = 1000000; /* arbitrary origin */
    s->max_delay = 5;
    s->seeds[0] = "127.0.0.1:7101";
    s->seeds[1] = "127.0.0.1:7102";
}

static int add_node(struct sim *s, const char *name, const char *addr)
{
    struct node *n = &s->n[s->nn];
    snprintf(n->name, sizeof n->name, "%s", name);
    snprintf(n->addr, sizeof n->addr, "%s", addr);
    do
        n->uid = rnd(s);
    while (!n->uid || by_uid(s, n->uid) >= 0);
    struct ms_mb_self self = {.name = n->name, .address = n->addr,
                              .uid = n->uid, .roles = "backend",
                              .version = "1.0.0",
                              .incarnation = s->now};
    struct ms_mb_config cfg = {.seeds = s->seeds, .nseeds = 2,
                               .assume_no_shards = s->assume_no_shards};
    CHECK(ms_mb_new(&n->m, &self, &cfg) == 0);
    n->alive = 1;
    n->ev[s->nn] = MS_MB_JOINING; /* its own start is not an event */
    return s->nn++;
}

static inline void net_send(struct sim *s, int kind, int from, int to,
                            char *json, size_t len)
{
    if (s->cut[from][to] || (s->drop_pct && (int)(rnd(s) % 100) <
                                                s->drop_pct)) {
        free(json);
        return;
    }
    int copies = s->dup_pct && (int)(rnd(s) % 100) < s->dup_pct ? 2 : 1;
    for (int c = 0; c < copies; c++) {
        if (s->nq == s->qcap) {
            s->qcap = s->qcap ? s->qcap * 2 : 256;
            s->q = realloc(s->q, s->qcap * sizeof *s->q);
        }
        struct msg *m = &s->q[s->nq++];
        m->at = s->now + 1 + rnd(s) % s->max_delay;
        m->seq = s->seq++;
        m->kind = kind;
        m->from = from;
        m->to = to;
        m->len = len;
        m->json = NULL;
        if (json) {
            m->json = malloc(len + 1);
            memcpy(m->json, json, len + 1);
        }
    }
    free(json);
}

static inline void keep_stale(struct sim *s, int from, const char *json,
                              size_t len)
{
    int slot = s->npool < POOL ? s->npool++ : (int)(rnd(s) % POOL);
    free(s->pool[slot]);
    s->pool[slot] = malloc(len + 1);
    memcpy(s->pool[slot], json, len + 1);
    s->pool_len[slot] = len;
    s->pool_from[slot] = from;
}

/* Performs node i's actions and records its events. */
static inline void drain(struct sim *s, int i)
{
    struct node *n = &s->n[i];
    struct ms_mb_action a;
    while (ms_mb_next_action(n->m, &a)) {
        int j = by_uid(s, a.uid);
        switch (a.kind) {
        case MS_MB_SEND_GOSSIP: {
            if (!a.uid) /* a seed: whoever is alive at that address */
                for (int k = 0; k < s->nn; k++)
                    if (s->n[k].alive && !s->n[k].self_removed &&
                        !strcmp(s->n[k].addr, a.address))
                        j = k;
            CHECK(a.uid || j != i);
            if (j < 0 || j == i)
                break;
            size_t len;
            char *json = ms_mb_gossip_encode(n->m, &len);
            CHECK(json != NULL);
            if (s->replay_pct)
                keep_stale(s, i, json, len);
            net_send(s, M_GOSSIP, i, j, json, len);
            break;
        }
        case MS_MB_SEND_HEARTBEAT:
            CHECK(j >= 0 && j != i);
            if (j >= 0)
                net_send(s, M_HB, i, j, NULL, 0);
            break;
        case MS_MB_MEMBER_JOINING:
        case MS_MB_MEMBER_UP:
        case MS_MB_MEMBER_LEAVING:
        case MS_MB_MEMBER_EXITING:
        case MS_MB_MEMBER_DOWN:
        case MS_MB_MEMBER_REMOVED:
            CHECK(j >= 0);
            CHECK(a.status == a.kind - MS_MB_MEMBER_JOINING + MS_MB_JOINING);
            CHECK(a.prev_status < a.status);
            if (j < 0)
                break;
            if (a.status <= n->ev[j] || a.prev_status != n->ev[j]) {
                if (s->backwards++ < 5)
                    fprintf(stderr, "node %d told %d: %d -> %d, had %d\n",
                            i, j, a.prev_status, a.status, n->ev[j]);
            }
            n->ev[j] = a.status;
            n->seen_ev[j][a.status] = 1;
            CHECK(a.is_self == (j == i));
            if (a.is_self && a.status == MS_MB_REMOVED)
                n->self_removed = 1;
            if (a.is_self && a.status == MS_MB_DOWN)
                n->self_down = 1;
            break;
        case MS_MB_MEMBER_UNREACHABLE:
            CHECK(j >= 0 && j != i);
            if (j >= 0 && !n->unreach_at[j])
                n->unreach_at[j] = s->now;
            break;
        case MS_MB_MEMBER_REACHABLE:
            if (j >= 0)
                n->reach_events[j]++;
            break;
        case MS_MB_COORDINATOR_CHANGED:
            n->coord = a.uid;
            n->coord_events++;
            break;
        case MS_MB_CONVERGED:
            CHECK(a.digest != 0);
            break;
        default:
            CHECK(0);
        }
    }
}

/* The status node i shows for node j: 0 unknown, REMOVED if tombstoned. */
static inline int status_in(struct sim *s, int i, int j)
{
    const struct ms_mb_member *mb = ms_mb_find_by_uid(s->n[i].m, s->n[j].uid);
    if (mb)
        return mb->status;
    return ms_mb_is_tombstoned(s->n[i].m, s->n[j].uid) ? MS_MB_REMOVED : 0;
}

static inline void observe(struct sim *s)
{
    for (int i = 0; i < s->nn; i++)
        for (int j = 0; j < s->nn; j++) {
            if (i == j && s->n[i].self_removed)
                continue;
            int st = status_in(s, i, j);
            if (st < s->obs[i][j]) {
                if (s->backwards++ < 5)
                    fprintf(stderr, "node %d sees %d go from %d to %d\n",
                            i, j, s->obs[i][j], st);
            }
            if (st > s->obs[i][j])
                s->obs[i][j] = st;
        }
}

static inline void deliver(struct sim *s, struct msg *m)
{
    struct node *to = &s->n[m->to], *from = &s->n[m->from];
    if (!to->alive || s->cut[m->from][m->to])
        return;
    if (m->kind == M_GOSSIP) {
        CHECK(ms_mb_gossip_merge(to->m, m->json, m->len, from->uid,
                                 s->now) == 0);
    } else if (m->kind == M_HB) {
        if (ms_mb_on_heartbeat(to->m, from->uid, s->now))
            net_send(s, M_ACK, m->to, m->from, NULL, 0);
    } else {
        to->last_ack[m->from] = s->now;
        ms_mb_on_heartbeat_ack(to->m, from->uid, s->now);
    }
    drain(s, m->to);
}

static inline int msg_cmp(const void *pa, const void *pb)
{
    const struct msg *a = pa, *b = pb;
    if (a->at != b->at)
        return a->at < b->at ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static inline void step(struct sim *s)
{
    s->now += STEP_MS;
    /* take the due messages out first: delivering sends more */
    size_t ndue = 0;
    for (size_t k = 0; k < s->nq; k++)
        if (s->q[k].at <= s->now)
            ndue++;
    struct msg *due = malloc((ndue + 1) * sizeof *due);
    size_t w = 0, d = 0;
    for (size_t k = 0; k < s->nq; k++) {
        if (s->q[k].at <= s->now)
            due[d++] = s->q[k];
        else
            s->q[w++] = s->q[k];
    }
    s->nq = w;
    qsort(due, ndue, sizeof *due, msg_cmp);
    for (size_t k = 0; k < ndue; k++) {
        deliver(s, &due[k]);
        free(due[k].json);
    }
    free(due);
    if (s->replay_pct && s->npool && (int)(rnd(s) % 100) < s->replay_pct) {
        int p = (int)(rnd(s) % (uint64_t)s->npool);
        int to = (int)(rnd(s) % (uint64_t)s->nn);
        if (s->n[to].alive && to != s->pool_from[p]) {
            CHECK(ms_mb_gossip_merge(s->n[to].m, s->pool[p],
                                     s->pool_len[p],
                                     s->n[s->pool_from[p]].uid,
                                     s->now) == 0);
            drain(s, to);
        }
    }
    for (int i = 0; i < s->nn; i++) {
        if (!s->n[i].alive)
            continue;
        CHECK(ms_mb_next_deadline(s->n[i].m, s->now) <= 1000 ||
              s->n[i].self_removed);
        ms_mb_tick(s->n[i].m, s->now);
        drain(s, i);
    }
    observe(s);
}

static inline void run(struct sim *s, uint64_t ms)
{
    for (uint64_t t = 0; t < ms; t += STEP_MS)
        step(s);
}

typedef int (*pred_fn)(struct sim *s);

/* Runs until pred holds; returns 1, or 0 after limit_ms. */
static inline int run_until(struct sim *s, pred_fn pred, uint64_t limit_ms)
{
    for (uint64_t t = 0; t <= limit_ms; t += STEP_MS) {
        if (pred(s))
            return 1;
        step(s);
    }
    return pred(s);
}

static inline void sim_free(struct sim *s)
{
    for (int i = 0; i < s->nn; i++)
        ms_mb_free(s->n[i].m);
    for (size_t k = 0; k < s->nq; k++)
        free(s->q[k].json);
    free(s->q);
    for (int p = 0; p < s->npool; p++)
        free(s->pool[p]);
}

/* A node that saw itself Down or Removed would stop its process. */
static inline int active(struct sim *s, int i)
{
    return s->n[i].alive && !s->n[i].self_removed && !s->n[i].self_down;
}

/* Every active node sees every active node Up; all agree and converged. */
static inline int all_up_agreed(struct sim *s)
{
    uint64_t d = 0;
    for (int i = 0; i < s->nn; i++) {
        if (!active(s, i))
            continue;
        for (int j = 0; j < s->nn; j++)
            if (active(s, j) && status_in(s, i, j) != MS_MB_UP)
                return 0;
        if (!ms_mb_converged(s->n[i].m))
            return 0;
        if (d && ms_mb_digest(s->n[i].m) != d)
            return 0;
        d = ms_mb_digest(s->n[i].m);
    }
    return 1;
}

/* Every active node is converged, and any two that still count each other
 * as members hold the same state. (Operator downs on both sides of a
 * partition may legitimately split a cluster in two.) */
static inline int agreed(struct sim *s)
{
    for (int i = 0; i < s->nn; i++) {
        if (!active(s, i))
            continue;
        if (!ms_mb_converged(s->n[i].m))
            return 0;
        for (int j = 0; j < s->nn; j++) {
            if (!active(s, j) || status_in(s, i, j) == MS_MB_REMOVED ||
                status_in(s, j, i) == MS_MB_REMOVED)
                continue;
            if (ms_mb_digest(s->n[i].m) != ms_mb_digest(s->n[j].m))
                return 0;
        }
    }
    return 1;
}

static inline uint64_t leader_of(struct sim *s, int i)
{
    const struct ms_mb_member *l = ms_mb_leader(s->n[i].m);
    return l ? l->uid : 0;
}

static inline void boot3(struct sim *s, uint64_t seed)
{
    sim_init(s, seed);
    add_node(s, "n1", "127.0.0.1:7101");
    add_node(s, "n2", "127.0.0.1:7102");
    add_node(s, "n3", "127.0.0.1:7103");
    CHECK(run_until(s, all_up_agreed, 15000));
}

#endif
