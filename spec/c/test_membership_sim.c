/*
 * The membership state machine in a deterministic simulation of several
 * nodes (mb_sim.h): joins, leaves, partitions, kills, restarts, a
 * leader's death and random chaos.
 */
#include "mb_sim.h"

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

int main(void)
{
    test_converge_join_leave();
    test_leave_while_joining();
    test_leave_alone();
    test_fresh_cluster_leaves();
    test_partition_heals();
    test_kill_then_down();
    test_restart();
    test_leader_death();
    for (uint64_t seed = 1; seed <= 4; seed++)
        test_chaos(seed * 0x9e3779b97f4a7c15ULL);
    CHECK_DONE();
}
