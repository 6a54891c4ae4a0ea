/*
 * The membership state machine: single-node unit checks, then a
 * deterministic simulation of several nodes in one process -- a virtual
 * clock, an in-test network that routes the SEND_GOSSIP/SEND_HEARTBEAT
 * actions, answers heartbeats, and can delay, reorder, duplicate, drop,
 * partition and replay stale gossip -- and the gossip parser's rejections.
 */
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

static uint64_t rnd(struct sim *s)
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return s->rng * 0x2545f4914f6cdd1dULL;
}

static int by_uid(struct sim *s, uint64_t uid)
{
    for (int i = 0; i < s->nn; i++)
        if (s->n[i].uid == uid)
            return i;
    return -1;
}

static void sim_init(struct sim *s, uint64_t seed)
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

static void net_send(struct sim *s, int kind, int from, int to, char *json,
                 size_t len)
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

static void keep_stale(struct sim *s, int from, const char *json, size_t len)
{
    int slot = s->npool < POOL ? s->npool++ : (int)(rnd(s) % POOL);
    free(s->pool[slot]);
    s->pool[slot] = malloc(len + 1);
    memcpy(s->pool[slot], json, len + 1);
    s->pool_len[slot] = len;
    s->pool_from[slot] = from;
}

/* Performs node i's actions and records its events. */
static void drain(struct sim *s, int i)
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
static int status_in(struct sim *s, int i, int j)
{
    const struct ms_mb_member *mb = ms_mb_find_by_uid(s->n[i].m, s->n[j].uid);
    if (mb)
        return mb->status;
    return ms_mb_is_tombstoned(s->n[i].m, s->n[j].uid) ? MS_MB_REMOVED : 0;
}

static void observe(struct sim *s)
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

static void deliver(struct sim *s, struct msg *m)
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

static int msg_cmp(const void *pa, const void *pb)
{
    const struct msg *a = pa, *b = pb;
    if (a->at != b->at)
        return a->at < b->at ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static void step(struct sim *s)
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

static void run(struct sim *s, uint64_t ms)
{
    for (uint64_t t = 0; t < ms; t += STEP_MS)
        step(s);
}

typedef int (*pred_fn)(struct sim *s);

/* Runs until pred holds; returns 1, or 0 after limit_ms. */
static int run_until(struct sim *s, pred_fn pred, uint64_t limit_ms)
{
    for (uint64_t t = 0; t <= limit_ms; t += STEP_MS) {
        if (pred(s))
            return 1;
        step(s);
    }
    return pred(s);
}

static void sim_free(struct sim *s)
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
static int active(struct sim *s, int i)
{
    return s->n[i].alive && !s->n[i].self_removed && !s->n[i].self_down;
}

/* Every active node sees every active node Up; all agree and converged. */
static int all_up_agreed(struct sim *s)
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
static int agreed(struct sim *s)
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

static uint64_t leader_of(struct sim *s, int i)
{
    const struct ms_mb_member *l = ms_mb_leader(s->n[i].m);
    return l ? l->uid : 0;
}

static void boot3(struct sim *s, uint64_t seed)
{
    sim_init(s, seed);
    add_node(s, "n1", "127.0.0.1:7101");
    add_node(s, "n2", "127.0.0.1:7102");
    add_node(s, "n3", "127.0.0.1:7103");
    CHECK(run_until(s, all_up_agreed, 15000));
}

/* --- single node --- */

static struct ms_membership *solo(const char *name, const char *addr,
                                  const char *const *seeds, int nseeds,
                                  uint64_t uid)
{
    struct ms_membership *m = NULL;
    struct ms_mb_self self = {.name = name, .address = addr, .uid = uid,
                              .roles = "backend,api"};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = nseeds};
    CHECK(ms_mb_new(&m, &self, &cfg) == 0);
    return m;
}

static int count_kind(struct ms_membership *m, int kind)
{
    struct ms_mb_action a;
    int n = 0;
    while (ms_mb_next_action(m, &a))
        n += a.kind == kind;
    return n;
}

static void test_new_rejects(void)
{
    struct ms_membership *m = (void *)1;
    struct ms_mb_self ok = {.name = "n1", .address = "h:1", .uid = 7};
    struct ms_mb_self bad = ok;
    CHECK(ms_mb_new(&m, &ok, NULL) == 0);
    ms_mb_free(m);
    bad.uid = 0;
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL && m == NULL);
    bad = ok;
    bad.name = "";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.name = "a b";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.name = "x\"y";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    char longname[80];
    memset(longname, 'a', 65);
    longname[65] = 0;
    bad.name = longname;
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    longname[64] = 0;
    CHECK(ms_mb_new(&m, &bad, NULL) == 0);
    ms_mb_free(m);
    bad = ok;
    bad.address = NULL;
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad = ok;
    bad.roles = "a,,b";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.roles = "a,b,c,d,e,f,g,h,i";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.roles = "a,b,c,d,e,f,g,h";
    CHECK(ms_mb_new(&m, &bad, NULL) == 0);
    ms_mb_free(m);
    const char *seeds[MS_MB_MAX_SEEDS + 1] = {0};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = MS_MB_MAX_SEEDS + 1};
    for (int i = 0; i <= MS_MB_MAX_SEEDS; i++)
        seeds[i] = "h:1";
    CHECK(ms_mb_new(&m, &ok, &cfg) == MS_EINVAL);
}

/* A node without seeds founds a cluster alone, then leaves it. */
static void test_single_node(void)
{
    struct ms_membership *m = solo("n1", "127.0.0.1:7101", NULL, 0, 42);
    CHECK(ms_mb_self_status(m) == MS_MB_JOINING);
    CHECK(ms_mb_leader(m) == NULL);
    ms_mb_tick(m, 100);
    CHECK(ms_mb_self_status(m) == MS_MB_UP);
    CHECK(ms_mb_leader(m) && ms_mb_leader(m)->uid == 42);
    CHECK(ms_mb_leader(m)->up_number == 1);
    CHECK(ms_mb_converged(m));
    CHECK(ms_mb_has_role(ms_mb_leader(m), "api"));
    CHECK(ms_mb_has_role(ms_mb_leader(m), "backend"));
    CHECK(!ms_mb_has_role(ms_mb_leader(m), "back"));
    CHECK(count_kind(m, MS_MB_COORDINATOR_CHANGED) == 1);
    CHECK(ms_mb_next_deadline(m, 100) == 1000);
    CHECK(ms_mb_find_by_name(m, "n1") == ms_mb_find_by_uid(m, 42));
    CHECK(ms_mb_find_by_address(m, "127.0.0.1:7101") ==
          ms_mb_find_by_uid(m, 42));
    CHECK(ms_mb_find_by_address(m, "127.0.0.1:1") == NULL);
    CHECK(ms_mb_is_reachable(m, 42) && !ms_mb_is_reachable(m, 43));
    char buf[1024];
    size_t need = ms_mb_status_json(m, buf, sizeof buf);
    CHECK(need == strlen(buf));
    CHECK(strstr(buf, "\"self\":\"000000000000002a\",\"leader\":"
                      "\"000000000000002a\",\"converged\":true") != NULL);
    CHECK(strstr(buf, "\"coordinator\":\"000000000000002a\"") != NULL);
    CHECK(strstr(buf, "\"status\":\"up\",\"up_number\":1,\"roles\":"
                      "[\"backend\",\"api\"]") != NULL);
    char small[8];
    CHECK(ms_mb_status_json(m, small, sizeof small) == need);
    CHECK(strlen(small) == 7);
    CHECK(ms_mb_down(m, "nowhere:1", 200) == MS_EINVAL);
    CHECK(ms_mb_set_owns_shards(m, 99, 0, 200) == MS_EINVAL);
    /* leave: waits while it owns shards, then Exiting, then Removed */
    CHECK(ms_mb_leave(m, 200) == 0);
    CHECK(ms_mb_leave(m, 200) == 0);
    CHECK(ms_mb_self_status(m) == MS_MB_LEAVING);
    CHECK(ms_mb_leader(m) == NULL);
    ms_mb_tick(m, 5000);
    CHECK(ms_mb_self_status(m) == MS_MB_LEAVING);
    CHECK(ms_mb_set_owns_shards(m, 42, 0, 5100) == 0);
    CHECK(ms_mb_self_status(m) == MS_MB_EXITING);
    ms_mb_tick(m, 5200);
    CHECK(ms_mb_self_status(m) == MS_MB_REMOVED);
    CHECK(ms_mb_member_count(m) == 0);
    CHECK(ms_mb_is_tombstoned(m, 42));
    CHECK(ms_mb_next_deadline(m, 5200) == UINT64_MAX);
    CHECK(ms_mb_leave(m, 5300) == MS_EINVAL);
    CHECK(ms_mb_on_heartbeat(m, 7, 5300) == 0);
    ms_mb_free(m);
}

/* The first seed waits seed_timeout_ms for the other seeds, then founds
 * the cluster; another seed never does. */
static void test_seed_bootstrap(void)
{
    const char *seeds[] = {"h:1", "h:2"};
    struct ms_membership *a = solo("a", "h:1", seeds, 2, 1);
    struct ms_membership *b = solo("b", "h:2", seeds, 2, 2);
    int knocks = 0;
    for (uint64_t t = 0; t < 4900; t += 100) {
        ms_mb_tick(a, t);
        ms_mb_tick(b, t);
        struct ms_mb_action x;
        while (ms_mb_next_action(b, &x))
            knocks += x.kind == MS_MB_SEND_GOSSIP && x.uid == 0 &&
                      !strcmp(x.address, "h:1");
        count_kind(a, 0);
    }
    CHECK(knocks == 5); /* b knocks on seed h:1 every gossip round */
    CHECK(ms_mb_self_status(a) == MS_MB_JOINING);
    ms_mb_tick(a, 5000);
    CHECK(ms_mb_self_status(a) == MS_MB_UP);
    for (uint64_t t = 5000; t < 60000; t += 1000)
        ms_mb_tick(b, t);
    CHECK(ms_mb_self_status(b) == MS_MB_JOINING);
    ms_mb_free(a);
    ms_mb_free(b);
}

static char *gossip_of(int nmembers, const char *member_fmt, uint64_t first);
#define MEMBER                                                              \
    "{\"u\":\"%016llx\",\"n\":\"x%d\",\"a\":\"10.0.0.1:%d\",\"r\":\"\","    \
    "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}"

/* Gossip goes to `fanout` peers per round, round-robin in uid order;
 * heartbeats and unreachability follow the configured intervals. */
static void test_rounds(void)
{
    struct ms_membership *m = NULL;
    struct ms_mb_self self = {.name = "a", .address = "h:1", .uid = 1};
    struct ms_mb_config cfg = {.heartbeat_interval_ms = 250,
                               .unreachable_after_ms = 1000,
                               .gossip_interval_ms = 500};
    CHECK(ms_mb_new(&m, &self, &cfg) == 0);
    ms_mb_tick(m, 0);
    count_kind(m, 0);
    char *g = gossip_of(4, MEMBER, 2); /* uids 2..5 */
    CHECK(ms_mb_gossip_merge(m, g, strlen(g), 2, 10) == 0);
    free(g);
    struct ms_mb_action a;
    int answers = 0;
    while (ms_mb_next_action(m, &a))
        answers += a.kind == MS_MB_SEND_GOSSIP && a.uid == 2;
    CHECK(answers == 1); /* the sender was behind */
    uint64_t targets[16];
    int nt = 0, hbs = 0, unreachable = 0;
    for (uint64_t t = 250; t <= 2000; t += 250) {
        ms_mb_tick(m, t);
        while (ms_mb_next_action(m, &a)) {
            if (a.kind == MS_MB_SEND_GOSSIP && nt < 16)
                targets[nt++] = a.uid;
            hbs += a.kind == MS_MB_SEND_HEARTBEAT;
            if (a.kind == MS_MB_MEMBER_UNREACHABLE) {
                CHECK(t == 1250); /* 1000 ms after it was learned at 10 */
                unreachable++;
            }
        }
        CHECK(ms_mb_next_deadline(m, t) <= 250);
    }
    static const uint64_t want[12] = {2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4, 5};
    CHECK(nt == 12);
    for (int i = 0; i < nt && i < 12; i++)
        CHECK(targets[i] == want[i]);
    CHECK(hbs == 8 * 4);
    CHECK(unreachable == 4);
    ms_mb_on_heartbeat_ack(m, 3, 2010);
    CHECK(ms_mb_is_reachable(m, 3) && !ms_mb_is_reachable(m, 4));
    CHECK(ms_mb_next_action(m, &a) && a.kind == MS_MB_MEMBER_REACHABLE &&
          a.uid == 3);
    ms_mb_free(m);
}

/* --- the simulation --- */

static void test_converge_join_leave(void)
{
    struct sim s;
    boot3(&s, 0x1234);
    for (int i = 0; i < 3; i++) {
        CHECK(leader_of(&s, i) == s.n[0].uid);
        CHECK(s.n[i].coord == s.n[0].uid);
        CHECK(ms_mb_member_count(s.n[i].m) == 3);
    }
    CHECK(ms_mb_find_by_uid(s.n[1].m, s.n[0].uid)->up_number == 1);
    /* a node that joins later becomes Up, with the next up_number */
    int n4 = add_node(&s, "n4", "127.0.0.1:7104");
    CHECK(run_until(&s, all_up_agreed, 15000));
    CHECK(ms_mb_find_by_uid(s.n[0].m, s.n[n4].uid)->up_number == 4);
    CHECK(leader_of(&s, n4) == s.n[0].uid);
    /* leave: Leaving until it owns no shards, then Exiting, Removed */
    CHECK(ms_mb_leave(s.n[2].m, s.now) == 0);
    drain(&s, 2);
    run(&s, 10000);
    for (int i = 0; i < 4; i++)
        CHECK(status_in(&s, i, 2) == MS_MB_LEAVING);
    CHECK(ms_mb_set_owns_shards(s.n[1].m, s.n[2].uid, 0, s.now) == 0);
    drain(&s, 1);
    run(&s, 3000); /* n2 is not the leader: nothing moves */
    CHECK(status_in(&s, 0, 2) == MS_MB_LEAVING);
    CHECK(ms_mb_set_owns_shards(s.n[0].m, s.n[2].uid, 0, s.now) == 0);
    drain(&s, 0);
    run(&s, 15000);
    for (int i = 0; i < 4; i++) {
        CHECK(status_in(&s, i, 2) == MS_MB_REMOVED);
        CHECK(s.n[i].seen_ev[2][MS_MB_EXITING]);
        CHECK(s.n[i].seen_ev[2][MS_MB_REMOVED]);
    }
    CHECK(s.n[2].self_removed);
    CHECK(ms_mb_self_status(s.n[2].m) == MS_MB_REMOVED);
    s.n[2].alive = 0;
    CHECK(all_up_agreed(&s));
    CHECK(ms_mb_member_count(s.n[0].m) == 3);
    char buf[4096];
    ms_mb_status_json(s.n[3].m, buf, sizeof buf);
    CHECK(strstr(buf, "\"tombstones\":1") != NULL);
    CHECK(strstr(buf, "\"name\":\"n1\"") < strstr(buf, "\"name\":\"n2\""));
    CHECK(s.backwards == 0);
    sim_free(&s);
}


/* Node n4 (index 3) was made Up by the leader but does not know it yet. */
static int leader_up_self_joining(struct sim *s)
{
    return status_in(s, 0, 3) == MS_MB_UP &&
           ms_mb_self_status(s->n[3].m) == MS_MB_JOINING;
}

/* A node stopped while it still sees itself Joining (issue 9): the leader
 * may already have made it Up and the coordinator given it shards, so its
 * leave is an ordinary leave -- it stays Leaving until it owns no shards,
 * then goes Exiting, Removed -- and never a silent exit. */
static void test_leave_while_joining(void)
{
    struct sim s;
    boot3(&s, 0x5150);
    int n4 = add_node(&s, "n4", "127.0.0.1:7104");
    CHECK(run_until(&s, leader_up_self_joining, 15000));
    CHECK(ms_mb_leave(s.n[n4].m, s.now) == 0);
    drain(&s, n4);
    CHECK(ms_mb_self_status(s.n[n4].m) == MS_MB_LEAVING);
    run(&s, 10000);
    /* the leader's up_number survives the merge, and the coordinator's
     * word (owns shards) holds the member */
    for (int i = 0; i < 4; i++)
        CHECK(status_in(&s, i, n4) == MS_MB_LEAVING);
    CHECK(ms_mb_find_by_uid(s.n[n4].m, s.n[n4].uid)->up_number == 4);
    CHECK(!s.n[n4].self_removed);
    CHECK(ms_mb_set_owns_shards(s.n[0].m, s.n[n4].uid, 0, s.now) == 0);
    drain(&s, 0);
    run(&s, 15000);
    CHECK(s.n[n4].self_removed);
    for (int i = 0; i < 3; i++)
        CHECK(status_in(&s, i, n4) == MS_MB_REMOVED);
    s.n[n4].alive = 0;
    CHECK(all_up_agreed(&s));
    CHECK(s.backwards == 0);
    sim_free(&s);

    /* known to the leader only as Joining: Leaving goes straight on to
     * Exiting and Removed (it never owned anything) */
    boot3(&s, 0x5151);
    n4 = add_node(&s, "n4", "127.0.0.1:7104");
    for (int k = 0; k < 200 && status_in(&s, 0, n4) == 0; k++)
        step(&s);
    CHECK(status_in(&s, 0, n4) == MS_MB_JOINING);
    CHECK(ms_mb_leave(s.n[n4].m, s.now) == 0);
    drain(&s, n4);
    run(&s, 15000);
    CHECK(s.n[n4].self_removed);
    for (int i = 0; i < 3; i++)
        CHECK(status_in(&s, i, n4) == MS_MB_REMOVED);
    CHECK(!s.n[0].seen_ev[n4][MS_MB_UP]);
    sim_free(&s);
}

/* A node that never heard from anyone leaves alone: it tells the seeds and
 * removes itself after lone_leave_ms (2 s), even with no seed answering;
 * a seed that had merged its HELLO but whose answer was lost learns the
 * leave and removes it, so no member is left behind. */
static void test_leave_alone(void)
{
    struct sim s;
    boot3(&s, 0x6160);
    int n4 = add_node(&s, "n4", "127.0.0.1:7104");
    for (int i = 0; i < 3; i++)
        s.cut[i][n4] = 1; /* nothing reaches n4 */
    for (int k = 0; k < 300 && status_in(&s, 0, n4) == 0; k++)
        step(&s);
    CHECK(status_in(&s, 0, n4) == MS_MB_JOINING);
    CHECK(ms_mb_member_count(s.n[n4].m) == 1);
    uint64_t t0 = s.now;
    CHECK(ms_mb_leave(s.n[n4].m, s.now) == 0);
    drain(&s, n4);
    while (!s.n[n4].self_removed && s.now - t0 < 5000)
        step(&s);
    CHECK(s.n[n4].self_removed);
    CHECK(s.now - t0 >= 2000 && s.now - t0 < 2500);
    CHECK(ms_mb_self_status(s.n[n4].m) == MS_MB_REMOVED);
    s.n[n4].alive = 0;
    run(&s, 15000);
    for (int i = 0; i < 3; i++)
        CHECK(status_in(&s, i, n4) == MS_MB_REMOVED);
    CHECK(all_up_agreed(&s));
    sim_free(&s);

    /* no cluster at all: still gone after the grace */
    struct ms_membership *m = NULL;
    const char *seeds[] = {"127.0.0.1:7101", "127.0.0.1:7199"};
    struct ms_mb_self self = {.name = "lone", .address = "127.0.0.1:7199",
                              .uid = 42};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = 2};
    CHECK(ms_mb_new(&m, &self, &cfg) == 0);
    ms_mb_tick(m, 1000);
    CHECK(ms_mb_leave(m, 1100) == 0);
    CHECK(ms_mb_self_status(m) == MS_MB_LEAVING);
    CHECK(ms_mb_next_deadline(m, 1100) <= 1000);
    ms_mb_tick(m, 3000);
    CHECK(ms_mb_self_status(m) == MS_MB_LEAVING);
    ms_mb_tick(m, 3100);
    CHECK(ms_mb_self_status(m) == MS_MB_REMOVED);
    int removed = 0;
    struct ms_mb_action a;
    while (ms_mb_next_action(m, &a))
        removed |= a.kind == MS_MB_MEMBER_REMOVED && a.is_self;
    CHECK(removed);
    ms_mb_free(m);
}

/* A fresh cluster stopped at once (issue 9: Ctrl-C right after `moonshard
 * run`): every node has met the others, none was ever Up, and each
 * leaves. Nobody can have shards and nobody will ever lead, so each
 * removes itself after lone_leave_ms, as a node that met no one does,
 * rather than wait for a leader until its stop deadline. */
static void test_fresh_cluster_leaves(void)
{
    struct sim s;
    sim_init(&s, 0x7a7a);
    for (int i = 0; i < 3; i++) {
        char name[8], addr[32];
        snprintf(name, sizeof name, "n%d", i + 1);
        snprintf(addr, sizeof addr, "127.0.0.1:710%d", i + 1);
        add_node(&s, name, addr);
    }
    int met = 0;
    for (int k = 0; k < 2000 && !met; k++) {
        step(&s);
        met = 1;
        for (int i = 0; i < 3; i++)
            met &= ms_mb_member_count(s.n[i].m) == 3;
    }
    CHECK(met);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            CHECK(status_in(&s, i, j) == MS_MB_JOINING);
    uint64_t t0 = s.now;
    for (int i = 0; i < 3; i++) {
        CHECK(ms_mb_leave(s.n[i].m, s.now) == 0);
        drain(&s, i);
    }
    int gone = 0;
    while (gone < 3 && s.now - t0 < 10000) {
        step(&s);
        gone = 0;
        for (int i = 0; i < 3; i++)
            gone += s.n[i].self_removed;
    }
    CHECK(gone == 3);
    CHECK(s.now - t0 < 2500);
    for (int i = 0; i < 3; i++)
        CHECK(!s.n[0].seen_ev[i][MS_MB_UP]);
    sim_free(&s);
}

/* A partition makes members unreachable on both sides, never changes a
 * status, and heals. */
static void test_partition_heals(void)
{
    struct sim s;
    boot3(&s, 0x77);
    s.cut[1][2] = s.cut[2][1] = 1;
    run(&s, 8000);
    CHECK(s.n[1].unreach_at[2] && s.n[2].unreach_at[1]);
    CHECK(!s.n[0].unreach_at[1] && !s.n[0].unreach_at[2]);
    CHECK(!ms_mb_is_reachable(s.n[1].m, s.n[2].uid));
    CHECK(ms_mb_is_reachable(s.n[0].m, s.n[2].uid));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            CHECK(status_in(&s, i, j) == MS_MB_UP);
    s.cut[1][2] = s.cut[2][1] = 0;
    run(&s, 3000);
    CHECK(ms_mb_is_reachable(s.n[1].m, s.n[2].uid));
    CHECK(s.n[1].reach_events[2] == 1 && s.n[2].reach_events[1] == 1);
    CHECK(all_up_agreed(&s));
    sim_free(&s);
}

/* A killed node is unreachable 5 s after its last answer, stays Up until an
 * operator downs it, then goes Down -> Removed everywhere. */
static void test_kill_then_down(void)
{
    struct sim s;
    boot3(&s, 0x99);
    uint64_t killed = s.now;
    s.n[2].alive = 0;
    run(&s, 3000);
    CHECK(ms_mb_is_reachable(s.n[0].m, s.n[2].uid));
    run(&s, 3000);
    for (int i = 0; i < 2; i++) {
        uint64_t at = s.n[i].unreach_at[2], last = s.n[i].last_ack[2];
        CHECK(at && last <= killed + STEP_MS); /* answers in flight */
        CHECK(at - last >= 5000 && at - last <= 5000 + STEP_MS);
    }
    run(&s, 60000);
    for (int i = 0; i < 2; i++) {
        CHECK(status_in(&s, i, 2) == MS_MB_UP);
        CHECK(!ms_mb_is_reachable(s.n[i].m, s.n[2].uid));
        CHECK(ms_mb_converged(s.n[i].m)); /* unreachable: not waited for */
        CHECK(leader_of(&s, i) == s.n[0].uid);
    }
    CHECK(ms_mb_down(s.n[1].m, "127.0.0.1:7103", s.now) == 0);
    drain(&s, 1);
    CHECK(status_in(&s, 1, 2) == MS_MB_DOWN);
    run(&s, 10000);
    for (int i = 0; i < 2; i++) {
        CHECK(status_in(&s, i, 2) == MS_MB_REMOVED);
        CHECK(s.n[i].seen_ev[2][MS_MB_DOWN]);
    }
    CHECK(all_up_agreed(&s));
    CHECK(s.backwards == 0);
    sim_free(&s);
}

/* A restarted process (same name and address, new uid) joins as a new
 * member; the old incarnation is removed and never comes back. */
static void restart(int victim)
{
    struct sim s;
    boot3(&s, 0x5eed + (uint64_t)victim);
    size_t oldlen;
    char *old = ms_mb_gossip_encode(s.n[victim].m, &oldlen);
    uint64_t olduid = s.n[victim].uid;
    s.n[victim].alive = 0;
    run(&s, 500);
    int nv = add_node(&s, s.n[victim].name, s.n[victim].addr);
    CHECK(run_until(&s, all_up_agreed, 30000));
    int others[2], k = 0;
    for (int i = 0; i < 3; i++)
        if (i != victim)
            others[k++] = i;
    for (int i = 0; i < 2; i++) {
        struct ms_membership *m = s.n[others[i]].m;
        CHECK(ms_mb_is_tombstoned(m, olduid));
        CHECK(ms_mb_find_by_address(m, s.n[nv].addr)->uid == s.n[nv].uid);
        CHECK(ms_mb_member_count(m) == 3);
    }
    CHECK(ms_mb_is_tombstoned(s.n[nv].m, olduid));
    /* the first seed restarted: the next oldest became the leader */
    uint64_t want = victim == 0 ? s.n[1].uid : s.n[0].uid;
    for (int i = 0; i < 2; i++)
        CHECK(leader_of(&s, others[i]) == want);
    CHECK(leader_of(&s, nv) == want);
    /* the old incarnation's gossip arrives late, directly or relayed */
    struct ms_membership *m = s.n[others[0]].m;
    uint64_t d = ms_mb_digest(m);
    CHECK(ms_mb_gossip_merge(m, old, oldlen, olduid, s.now) == 0);
    struct ms_mb_action a;
    int told = 0;
    while (ms_mb_next_action(m, &a))
        told += a.kind == MS_MB_SEND_GOSSIP && a.uid == olduid;
    CHECK(told == 1); /* answered, so that it learns it was removed */
    CHECK(ms_mb_gossip_merge(m, old, oldlen, s.n[others[1]].uid,
                             s.now) == 0);
    drain(&s, others[0]);
    CHECK(ms_mb_find_by_uid(m, olduid) == NULL);
    CHECK(ms_mb_digest(m) == d);
    CHECK(ms_mb_on_heartbeat(m, olduid, s.now) == 0);
    /* and the old process itself, resumed, learns that it was removed */
    CHECK(ms_mb_gossip_merge(s.n[victim].m, old, oldlen, olduid, s.now) == 0);
    char *cur = ms_mb_gossip_encode(m, &oldlen);
    CHECK(ms_mb_gossip_merge(s.n[victim].m, cur, oldlen, s.n[others[0]].uid,
                             s.now) == 0);
    free(cur);
    s.n[victim].alive = 1;
    drain(&s, victim);
    CHECK(s.n[victim].self_removed);
    run(&s, 10000);
    CHECK(all_up_agreed(&s));
    CHECK(ms_mb_find_by_uid(m, olduid) == NULL);
    CHECK(s.backwards == 0);
    free(old);
    sim_free(&s);
}

static void test_restart(void)
{
    restart(2); /* an ordinary member */
    restart(0); /* the leader and first seed */
}

/* The leader dies; after it is downed the next oldest member leads. */
static void test_leader_death(void)
{
    struct sim s;
    boot3(&s, 0xdead);
    s.n[0].alive = 0;
    run(&s, 7000);
    CHECK(leader_of(&s, 1) == s.n[0].uid); /* unreachable is not gone */
    CHECK(leader_of(&s, 2) == s.n[0].uid);
    int events = s.n[2].coord_events;
    CHECK(ms_mb_down(s.n[2].m, "127.0.0.1:7101", s.now) == 0);
    drain(&s, 2);
    run(&s, 10000);
    for (int i = 1; i < 3; i++) {
        CHECK(status_in(&s, i, 0) == MS_MB_REMOVED);
        CHECK(leader_of(&s, i) == s.n[1].uid);
        CHECK(s.n[i].coord == s.n[1].uid);
    }
    CHECK(s.n[2].coord_events == events + 1);
    /* the new leader still leads: a newcomer becomes Up */
    add_node(&s, "n5", "127.0.0.1:7105");
    CHECK(run_until(&s, all_up_agreed, 15000));
    CHECK(s.backwards == 0);
    sim_free(&s);
}

/* Random delays, drops, duplicates, partitions, stale replays (also from
 * dead incarnations), leaves, downs and restarts: no status ever moves
 * backwards, and once the network heals the nodes that are still members
 * agree on a converged state in which nobody is stuck half-way out. */
static void test_chaos(uint64_t seed)
{
    struct sim s;
    sim_init(&s, seed);
    s.assume_no_shards = 1;
    for (int i = 0; i < 5; i++) {
        char name[16], addr[32];
        snprintf(name, sizeof name, "n%d", i + 1);
        snprintf(addr, sizeof addr, "127.0.0.1:%d", 7101 + i);
        add_node(&s, name, addr);
    }
    s.max_delay = 1500;
    s.drop_pct = 20;
    s.dup_pct = 5;
    s.replay_pct = 20;
    int ops = 0;
    for (int t = 0; t < 300000; t += STEP_MS) {
        step(&s);
        uint64_t r = rnd(&s) % 10000;
        if (r < 5) { /* toggle a link */
            int a = (int)(rnd(&s) % 5), b = (int)(rnd(&s) % 5);
            s.cut[a][b] = !s.cut[a][b];
        } else if (t > 30000 && r < 8 && ops < 6) {
            int v = (int)(rnd(&s) % (uint64_t)s.nn);
            int by = (int)(rnd(&s) % (uint64_t)s.nn);
            if (!active(&s, v) || !active(&s, by))
                continue;
            uint64_t kind = rnd(&s) % 3;
            if (kind == 0) {
                ms_mb_leave(s.n[v].m, s.now);
            } else if (kind == 1) {
                ms_mb_down(s.n[by].m, s.n[v].addr, s.now);
            } else if (s.nn < MAXN) { /* kill and restart */
                s.n[v].alive = 0;
                add_node(&s, s.n[v].name, s.n[v].addr);
            }
            drain(&s, v);
            drain(&s, by);
            ops++;
        }
    }
    memset(s.cut, 0, sizeof s.cut);
    s.max_delay = 20;
    s.drop_pct = s.dup_pct = s.replay_pct = 0;
    CHECK(run_until(&s, agreed, 120000));
    run(&s, 10000); /* removed members hear of it in their next round */
    CHECK(agreed(&s));
    int members = 0;
    for (int i = 0; i < s.nn; i++) {
        if (!active(&s, i))
            continue;
        members++;
        if (!ms_mb_leader(s.n[i].m))
            continue; /* its cluster lost every Up member (to downs, or it
                         restarted after they all left): only an operator
                         can help, and no status may move */
        for (int j = 0; j < s.nn; j++) {
            int st = status_in(&s, i, j);
            /* nobody is left half-way out: Leaving, Exiting and Down all
             * end in Removed, dead incarnations too (unknown when split
             * off by downs on both sides of a partition) */
            CHECK(st != MS_MB_LEAVING && st != MS_MB_EXITING &&
                  st != MS_MB_DOWN);
            if (!s.n[j].alive)
                CHECK(st != MS_MB_UP && st != MS_MB_JOINING);
        }
    }
    CHECK(ops > 0);
    CHECK(s.backwards == 0);
    if (s.backwards)
        fprintf(stderr, "chaos seed %llx: %d backward moves\n",
                (unsigned long long)seed, s.backwards);
    printf("chaos %llx: %d ops, %d nodes, %d members left\n",
           (unsigned long long)seed, ops, s.nn, members);
    sim_free(&s);
}

/* --- the gossip parser --- */

static char *gossip_of(int nmembers, const char *member_fmt, uint64_t first)
{
    size_t cap = 256 + (size_t)nmembers * 256;
    char *b = malloc(cap);
    size_t n = (size_t)snprintf(b, cap, "{\"v\":1,\"max_up\":%d,\"max_tomb\""
                                        ":0,\"members\":[",
                                nmembers);
    for (int i = 0; i < nmembers; i++) {
        if (i)
            b[n++] = ',';
        n += (size_t)snprintf(b + n, cap - n, member_fmt,
                              (unsigned long long)(first + (uint64_t)i), i,
                              i);
    }
    snprintf(b + n, cap - n, "],\"tombstones\":[],\"seen\":[]}");
    return b;
}

struct bad {
    const char *text;
    int err;
};

static void test_malformed(void)
{
    struct sim s;
    boot3(&s, 0xbad);
    struct ms_membership *m = s.n[0].m;
    size_t len, cnt = 3;
    char *valid = ms_mb_gossip_encode(s.n[1].m, &len);
    uint64_t d = ms_mb_digest(m);
    struct ms_mb_action a;
#define UNCHANGED()                                                         \
    do {                                                                    \
        CHECK(ms_mb_digest(m) == d);                                        \
        CHECK(ms_mb_member_count(m) == cnt);                                \
        CHECK(!ms_mb_next_action(m, &a));                                   \
    } while (0)
    /* every truncation */
    for (size_t k = 0; k < len; k++) {
        CHECK(ms_mb_gossip_merge(m, valid, k, s.n[1].uid, s.now) < 0);
        UNCHANGED();
    }
    /* every byte changed (on n3's view): rejected without effect, or
     * accepted (a changed uid or number can still be well-formed) */
    const char subst[] = {' ', 'x', '"', '0', '9', '}', ',', '\\', 0,
                          (char)0x80};
    m = s.n[2].m;
    d = ms_mb_digest(m);
    int accepted = 0;
    for (size_t k = 0; k < len; k++)
        for (size_t c = 0; c < sizeof subst; c++) {
            char *t = malloc(len);
            memcpy(t, valid, len);
            t[k] = subst[c];
            int rc = ms_mb_gossip_merge(m, t, len, s.n[1].uid, s.now);
            if (rc < 0) {
                UNCHANGED();
            } else {
                CHECK(rc == 0);
                accepted++;
                count_kind(m, 0);
                d = ms_mb_digest(m);
                cnt = ms_mb_member_count(m);
            }
            free(t);
        }
    printf("mutations: %d of %zu accepted\n", accepted, len * sizeof subst);
    CHECK(accepted > 0 && accepted < (int)(len * sizeof subst) / 2);
    m = s.n[0].m;
    d = ms_mb_digest(m);
    cnt = 3;
    /* hand-made texts */
    static const struct bad bads[] = {
        {"", MS_EBADJSON},
        {"{}", MS_EBADJSON},
        {"{\"v\":2,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{ \"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]} ", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":01,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":4294967296,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[],\"x\":1}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"seen\":[],\"tombstones\":[]}", MS_EBADJSON},
        /* seen uid that is not a member */
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[\"0000000000000001\"]}", MS_EBADJSON},
        /* tombstone sequence above max_tomb, or 0 */
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":1,\"members\":[],"
         "\"tombstones\":[{\"u\":\"0000000000000001\",\"q\":2}],"
         "\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":1,\"members\":[],"
         "\"tombstones\":[{\"u\":\"0000000000000001\",\"q\":0}],"
         "\"seen\":[]}", MS_EBADJSON},
        /* unsorted tombstones */
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":2,\"members\":[],"
         "\"tombstones\":[{\"u\":\"0000000000000002\",\"q\":1},"
         "{\"u\":\"0000000000000001\",\"q\":2}],\"seen\":[]}", MS_EBADJSON},
    };
    for (size_t k = 0; k < sizeof bads / sizeof bads[0]; k++) {
        int rc = ms_mb_gossip_merge(m, bads[k].text, strlen(bads[k].text),
                                    s.n[1].uid, s.now);
        if (rc != bads[k].err)
            fprintf(stderr, "bad text %zu: %d\n", k, rc);
        CHECK(rc == bads[k].err);
        UNCHANGED();
    }
    /* member fields: each variant of one member */
    static const struct {
        const char *member;
        int err;
    } mbad[] = {
        {"{\"u\":\"00000000000000AB\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"0000000000000000\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"removed\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":0}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"joining\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":2}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"a b\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"a\\\"\",\"a\":\"h:1\","
         "\"r\":\"\",\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\","
         "\"r\":\"a,,b\",\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\","
         "\"r\":\"1,2,3,4,5,6,7,8,9\",\"ver\":\"\",\"w\":1,\"i\":0,"
         "\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":4294967296,\"i\":0,\"s\":\"up\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":18446744073709551616,\"s\":\"up\","
         "\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1,\"z\":0}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":-1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"123456789012345678901234567890123\",\"w\":1,\"i\":0,"
         "\"s\":\"up\",\"o\":1}", MS_E2BIG},
    };
    for (size_t k = 0; k < sizeof mbad / sizeof mbad[0]; k++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "{\"v\":1,\"max_up\":1,\"max_tomb\":0,\"members\":[%s],"
                 "\"tombstones\":[],\"seen\":[]}",
                 mbad[k].member);
        int rc = ms_mb_gossip_merge(m, text, strlen(text), s.n[1].uid,
                                    s.now);
        if (rc != mbad[k].err)
            fprintf(stderr, "bad member %zu: %d\n", k, rc);
        CHECK(rc == mbad[k].err);
        UNCHANGED();
    }
    /* lengths: 64-byte names pass, 65 do not; 128/129-byte addresses */
    char name[70], addr[140], text[1024];
    memset(name, 'n', 65);
    name[65] = 0;
    memset(addr, 'a', 129);
    addr[129] = 0;
    const char *tpl = "{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":["
                      "{\"u\":\"00000000000000ab\",\"n\":\"%s\",\"a\":\"%s\","
                      "\"r\":\"\",\"ver\":\"\",\"w\":1,\"i\":0,"
                      "\"s\":\"joining\",\"o\":0}],\"tombstones\":[],"
                      "\"seen\":[]}";
    snprintf(text, sizeof text, tpl, name, "h:1");
    CHECK(ms_mb_gossip_merge(m, text, strlen(text), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    snprintf(text, sizeof text, tpl, "x", addr);
    CHECK(ms_mb_gossip_merge(m, text, strlen(text), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    /* duplicate and unsorted uids */
    char *dup = gossip_of(2, MEMBER, 5);
    char *p = strstr(dup, "0000000000000006");
    memcpy(p, "0000000000000005", 16);
    CHECK(ms_mb_gossip_merge(m, dup, strlen(dup), 0, s.now) == MS_EBADJSON);
    memcpy(p, "0000000000000004", 16);
    CHECK(ms_mb_gossip_merge(m, dup, strlen(dup), 0, s.now) == MS_EBADJSON);
    UNCHANGED();
    free(dup);
    /* too many members: in the text, or in the union with this view */
    char *big = gossip_of(MS_MB_MAX_MEMBERS + 1, MEMBER, 0x100);
    CHECK(ms_mb_gossip_merge(m, big, strlen(big), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    free(big);
    big = gossip_of(MS_MB_MAX_MEMBERS - 2, MEMBER, 0x100);
    CHECK(ms_mb_gossip_merge(m, big, strlen(big), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    free(big);
    char *huge = calloc(1, MS_MB_MAX_GOSSIP + 1);
    CHECK(ms_mb_gossip_merge(m, huge, MS_MB_MAX_GOSSIP + 1, 0, s.now) ==
          MS_E2BIG);
    UNCHANGED();
    free(huge);
    CHECK(ms_mb_gossip_merge(m, NULL, 5, 0, s.now) == MS_EINVAL);
    /* and texts of the right shape are taken: 64/128-byte fields, and a
     * view filled to the limit */
    name[64] = 0;
    addr[128] = 0;
    snprintf(text, sizeof text, tpl, name, addr);
    CHECK(ms_mb_gossip_merge(m, text, strlen(text), 0, s.now) == 0);
    CHECK(ms_mb_member_count(m) == 4);
    count_kind(m, 0);
    big = gossip_of(MS_MB_MAX_MEMBERS - 4, MEMBER, 0x100);
    CHECK(ms_mb_gossip_merge(m, big, strlen(big), 0, s.now) == 0);
    CHECK(ms_mb_member_count(m) == MS_MB_MAX_MEMBERS);
    count_kind(m, 0);
    free(big);
    /* a full view encodes and parses back */
    char *full = ms_mb_gossip_encode(m, &len);
    CHECK(full && len < MS_MB_MAX_GOSSIP);
    struct ms_membership *other =
        solo("zz", "10.9.9.9:1", NULL, 0, 0xfffffffffffffff0ULL);
    CHECK(ms_mb_gossip_merge(other, full, len, 0, 0) == MS_E2BIG);
    CHECK(ms_mb_member_count(other) == 1);
    ms_mb_free(other);
    free(full);
    free(valid);
    sim_free(&s);
}

int main(void)
{
    test_new_rejects();
    test_single_node();
    test_seed_bootstrap();
    test_rounds();
    test_converge_join_leave();
    test_leave_while_joining();
    test_leave_alone();
    test_fresh_cluster_leaves();
    test_partition_heals();
    test_kill_then_down();
    test_restart();
    test_leader_death();
    test_malformed();
    for (uint64_t seed = 1; seed <= 4; seed++)
        test_chaos(seed * 0x9e3779b97f4a7c15ULL);
    CHECK_DONE();
}
