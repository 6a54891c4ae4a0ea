/*
 * The coordinator's shard moves, against simulated regions
 * (coord_sim.h): handoff, its deadline, leaving members, rebalance
 * rounds and a move across a takeover.
 */
#include "coord_sim.h"

/* The batch allocator moving_cluster gives the coordinator (NULL: none). */
static ms_coord_allocate_many_cb many_cb;

/* A ready coordinator on N1 over N1, N2 (all 16 shards allocated) and
 * N3 (up, nothing yet). */
static struct ms_coord *moving_cluster(ms_coord_rebalance_cb rb)
{
    sim_reset();
    sim_now = 0;
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord_config cfg = {0};
    cfg.self_uid = N1;
    cfg.types = &COUNTER;
    cfg.ntypes = 1;
    cfg.view_timeout_ms = 3000;
    cfg.allocate = allocate;
    cfg.allocate_many = many_cb;
    cfg.eligible = eligible;
    cfg.rebalance = rb;
    cfg.data = &S;
    cfg.handoff_timeout_ms = 2500;
    cfg.rebalance_interval_ms = 1000;
    struct ms_coord *c = NULL;
    CHECK(ms_coord_new(&c, &cfg) == 0);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);
    CHECK(ms_coord_become(c, 1, 0) == 0);
    pump(c, N1, NULL, NULL);
    for (uint32_t s = 0; s < 16; s++)
        alloc(c, N1, N1, "Counter", s);
    ms_coord_member_up(c, N3, 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owned_count(c, N3) == 0);
    CHECK(regions_agree(c, "Counter"));
    return c;
}

/* A move: every region fences, the old owner stops, the strategy places
 * the shard (on N3, the least loaded) at a new generation. */
static void test_move(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    uint64_t g0;
    uint64_t from = ms_coord_owner(c, 0, 3, &g0);
    region(N3)->direct = 1; /* no connection to the old owner yet */
    CHECK(ms_coord_move(c, 0, 3, 10) == 0);
    CHECK(ms_coord_move(c, 0, 3, 10) == MS_EBUSY);
    pump(c, N1, NULL, NULL);
    CHECK(region(N1)->handoffs == 1 && region(N2)->handoffs == 1 &&
          region(N3)->handoffs == 1);
    CHECK(region(from)->stops == 1);
    uint64_t g1;
    CHECK(ms_coord_owner(c, 0, 3, &g1) == N3);
    CHECK(g1 > g0);
    CHECK(regions_agree(c, "Counter"));
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(st.started == 1 && st.finished == 1 && st.aborted == 0 &&
          st.in_progress == 0 && st.peak == 1);
    struct ms_plan_entry st3 = region(from)->last_stop;
    /* a region speaks only for itself: its FENCED naming another region
     * counts for nothing */
    region(N3)->direct = 0;
    region(N2)->nofence = 1;
    CHECK(ms_coord_move(c, 0, 5, 20) == 0);
    pump(c, N1, NULL, NULL);
    struct ms_coord_move_info mi;
    CHECK(ms_coord_move_at(c, 0, 20, &mi) == 1 && mi.fences_left == 1);
    struct ms_plan_entry fe = {5, N2, mi.hgen};
    /* N3 claiming N2's fence */
    send_entry(c, N3, MS_PLAN_MSG_FENCED, "Counter", 16, &fe, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_move_at(c, 0, 20, &mi) == 1 && mi.fences_left == 1);
    send_entry(c, N2, MS_PLAN_MSG_FENCED, "Counter", 16, &fe, 1); /* own */
    pump(c, N1, NULL, NULL);
    ms_coord_move_stats(c, &st);
    CHECK(st.finished == 2 && st.in_progress == 0);
    region(N2)->nofence = 0;
    /* only the old owner's STOPPED ends a move (G8): another member's
     * claim, at the right generation, changes nothing */
    region(N1)->nostop = region(N2)->nostop = 1;
    CHECK(ms_coord_move(c, 0, 9, 15) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t from9 = ms_coord_owner(c, 0, 9, NULL);
    struct ms_plan_entry st9 = region(from9)->last_stop;
    CHECK(st9.shard == 9);
    answer_stop(c, N3, "Counter", 16, &st9, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 9, NULL) == from9);
    answer_stop(c, from9, "Counter", 16, &st9, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 9, NULL) == N3);
    region(N1)->nostop = region(N2)->nostop = 0;
    /* a late duplicate STOPPED changes nothing */
    answer_stop(c, from, "Counter", 16, &st3, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 3, NULL) == N3);
    /* bad requests */
    CHECK(ms_coord_move(c, 0, 16, 10) == MS_EINVAL);
    CHECK(ms_coord_move(c, 5, 0, 10) == MS_EINVAL);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* The region's answer to this term's VIEW_REQUEST, asked again (a
 * connection authenticated again while the first answer was on its way,
 * ms_coord_member_connected): `to` answers a second VIEW_REQUEST. */
static void ask_view_again(struct ms_coord *c, uint64_t to, uint64_t term)
{
    struct ms_plan_msg *m = calloc(1, sizeof *m);
    m->kind = MS_PLAN_MSG_VIEW_REQUEST;
    m->term = term;
    char *text;
    size_t len;
    CHECK(ms_plan_msg_encode(m, &text, &len) == 0);
    region_receive(c, region(to), N1, text, len);
    free(text);
    free(m);
}

/* A member asked twice (N4 joins; its connection is authenticated again
 * before its first answer came) answers twice: the second view and
 * view_done, arriving while a move is under way, change nothing (no
 * action, the move goes on and ends, no owner count changes); nor does
 * the old owner's duplicate answer in the middle of the move. */
static void test_duplicate_view_during_move(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    add_region(N4);
    add_type(N4, "Counter", 16, COUNTER.fingerprint);
    region(N4)->hold = 1;
    ms_coord_member_up(c, N4, 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_member_connected(c, N4) == 0); /* asked again */
    pump(c, N1, NULL, NULL);
    struct region *r4 = region(N4);
    CHECK(r4->nheld == 2);
    /* the first request is answered; the second waits */
    char *second = r4->held[1];
    size_t second_len = r4->heldlen[1];
    r4->hold = 0;
    r4->nheld = 0;
    region_receive(c, r4, N1, r4->held[0], r4->heldlen[0]);
    free(r4->held[0]);
    pump(c, N1, NULL, NULL);
    CHECK(regions_agree(c, "Counter"));
    CHECK(ms_coord_member_connected(c, N4) == 0); /* answered: nothing */
    CHECK(pump(c, N1, NULL, NULL) == 0);

    /* a move: every region fences; the old owner does not stop yet */
    uint64_t g0;
    uint64_t from = ms_coord_owner(c, 0, 3, &g0);
    region(from)->nostop = 1;
    CHECK(ms_coord_move(c, 0, 3, 10) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(from)->stops == 1);
    struct ms_coord_move_info mi;
    CHECK(ms_coord_move_at(c, 0, 10, &mi) == 1);
    uint32_t owned[4];
    const uint64_t uids[4] = {N1, N2, N3, N4};
    for (int i = 0; i < 4; i++)
        owned[i] = ms_coord_owned_count(c, uids[i]);
    uint64_t gen_before;
    CHECK(ms_coord_owner(c, 0, 7, &gen_before) != 0);

    /* the duplicate answers arrive now: N4's, then the old owner's */
    region_receive(c, r4, N1, second, second_len);
    free(second);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    ask_view_again(c, from, 1);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    CHECK(ms_coord_active(c) && ms_coord_ready(c));
    CHECK(ms_coord_move_at(c, 0, 10, &mi) == 1);
    CHECK(ms_coord_owner(c, 0, 3, NULL) == from);
    for (int i = 0; i < 4; i++)
        CHECK(ms_coord_owned_count(c, uids[i]) == owned[i]);
    uint64_t gen_after;
    ms_coord_owner(c, 0, 7, &gen_after);
    CHECK(gen_after == gen_before);
    CHECK(ms_coord_hosts(c, 0, N4));

    /* the old owner stops: the move ends on a member with no shard */
    struct ms_plan_entry st = region(from)->last_stop;
    answer_stop(c, from, "Counter", 16, &st, 1);
    pump(c, N1, NULL, NULL);
    uint64_t to = ms_coord_owner(c, 0, 3, NULL);
    CHECK(to == N3 || to == N4);
    struct ms_coord_move_stats ms;
    ms_coord_move_stats(c, &ms);
    CHECK(ms.finished == 1 && ms.aborted == 0 && ms.in_progress == 0);
    CHECK(regions_agree(c, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* A move goes away from its owner: moved again, a shard on N3 (which,
 * without it, is the least loaded) lands on another member. Before, the
 * strategy saw N3 as the best place and the move by hand moved nothing. */
static void test_move_away(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    CHECK(ms_coord_move(c, 0, 3, 10) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 3, NULL) == N3);
    CHECK(ms_coord_move(c, 0, 3, 20) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t to = ms_coord_owner(c, 0, 3, NULL);
    CHECK(to == N1 || to == N2);
    CHECK(regions_agree(c, "Counter"));
    ms_coord_free(c);
}

/* No STOPPED before the deadline: rolled back, the old owner keeps the
 * shard at a new generation (which ends the regions' buffering), and a
 * STOPPED after that is ignored. A region that never fences does the
 * same; removing it lets the move go on. */
static void test_move_deadline(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    uint64_t from = ms_coord_owner(c, 0, 7, NULL);
    region(from)->nostop = 1;
    sim_now = 100; /* the fences come at once */
    CHECK(ms_coord_move(c, 0, 7, 100) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(from)->stops == 1);
    /* the tick's next work: the STOP goes out again */
    CHECK(ms_coord_next_deadline(c, 200) == 100 + MS_COORD_RESEND_MS - 200);
    struct ms_coord_move_info mi;
    CHECK(ms_coord_move_at(c, 0, 600, &mi) == 1);
    CHECK(mi.shard == 7 && mi.from == from && mi.stopping == 1 &&
          mi.age_ms == 500 && mi.fences_left == 0);
    /* a member that comes during the move hears of it before the plan */
    add_region(N4);
    add_type(N4, "Counter", 16, COUNTER.fingerprint);
    CHECK(ms_coord_member_up(c, N4, 200) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(N4)->handoffs == 1);
    CHECK(ms_plan_owner(region(N4)->plan[0], 7, NULL) == from);
    uint64_t g0;
    ms_coord_owner(c, 0, 7, &g0);
    CHECK(ms_coord_tick(c, 2599) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_move_at(c, 0, 2599, &mi) == 1);
    CHECK(ms_coord_tick(c, 2600) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t g1;
    CHECK(ms_coord_owner(c, 0, 7, &g1) == from && g1 > g0);
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(st.aborted == 1 && st.finished == 0 && st.in_progress == 0);
    answer_stop(c, from, "Counter", 16, &region(from)->last_stop, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 7, NULL) == from);
    CHECK(regions_agree(c, "Counter"));

    /* a fence lost on the way (region N3's) is sent again: the HANDOFF
     * goes out once more after MS_COORD_RESEND_MS, and then the move goes on */
    region(from)->nostop = 1;
    region(N3)->nofence = 1;
    CHECK(ms_coord_move(c, 0, 7, 2700) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_move_at(c, 0, 2700, &mi) == 1 && mi.fences_left == 1);
    int h3 = region(N3)->handoffs;
    region(N3)->nofence = 0;
    CHECK(ms_coord_tick(c, 2700 + MS_COORD_RESEND_MS - 1) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(N3)->handoffs == h3);
    CHECK(ms_coord_tick(c, 2700 + MS_COORD_RESEND_MS) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(N3)->handoffs == h3 + 1);
    CHECK(ms_coord_move_at(c, 0, 2700 + MS_COORD_RESEND_MS, &mi) == 1 &&
          mi.stopping == 1);
    /* the STOP is sent again too, and the old owner's answer ends it */
    int stops = region(from)->stops;
    region(from)->nostop = 0;
    CHECK(ms_coord_tick(c, 2700 + 2 * MS_COORD_RESEND_MS) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(from)->stops == stops + 1);
    CHECK(ms_coord_owner(c, 0, 7, NULL) == N3);
    ms_coord_move_stats(c, &st);
    CHECK(st.finished == 1 && st.in_progress == 0);
    /* back to the old owner for what follows */
    CHECK(ms_coord_move(c, 0, 7, 4800) == 0);
    pump(c, N1, NULL, NULL);
    from = ms_coord_owner(c, 0, 7, NULL);
    CHECK(from != 0);

    /* a region that does not fence holds the move at FENCING */
    region(from)->nostop = 0;
    region(N2)->nofence = 1;
    int stops_before = region(from)->stops;
    CHECK(ms_coord_move(c, 0, 7, 5000) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(region(from)->stops == stops_before);
    CHECK(ms_coord_move_at(c, 0, 5000, &mi) == 1 && mi.stopping == 0 &&
          mi.fences_left == 1);
    /* ... until it is removed: then the old owner is told to stop */
    if (from == N2) {
        /* the old owner itself went: the shard is unassigned */
        region(N2)->alive = 0;
        CHECK(ms_coord_member_removed(c, N2, 5100) == 0);
        pump(c, N1, NULL, NULL);
        CHECK(ms_coord_owner(c, 0, 7, NULL) == 0);
    } else {
        region(N2)->alive = 0;
        CHECK(ms_coord_member_removed(c, N2, 5100) == 0);
        pump(c, N1, NULL, NULL);
        CHECK(region(from)->stops == stops_before + 1);
        uint64_t g7;
        CHECK(ms_coord_owner(c, 0, 7, &g7) != 0 && g7 > 0);
    }
    ms_coord_move_stats(c, &st);
    CHECK(st.in_progress == 0);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* A leaving member's shards all move away, whatever the policy; then it
 * may exit. */
static void test_leaving_moves(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    CHECK(ms_coord_owned_count(c, N1) + ms_coord_owned_count(c, N2) == 16);
    CHECK(ms_coord_leave_done(c, N2) == 0);
    ms_coord_member_leaving(c, N2, 50);
    CHECK(ms_coord_tick(c, 100) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owned_count(c, N2) == 0);
    CHECK(ms_coord_leave_done(c, N2) == 1);
    CHECK(ms_coord_leave_done(c, N1) == 0); /* not leaving */
    CHECK(ms_coord_owned_count(c, N1) + ms_coord_owned_count(c, N3) == 16);
    CHECK(regions_agree(c, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(c);

    /* nobody that stays can host the type (N3 lacks its roles): the
     * leavers give their shards up, and may go */
    c = moving_cluster(NULL);
    S.ineligible = N3;
    ms_coord_member_leaving(c, N1, 50);
    ms_coord_member_leaving(c, N2, 50);
    CHECK(ms_coord_tick(c, 100) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_leave_done(c, N1) == 1 && ms_coord_leave_done(c, N2) == 1);
    for (uint32_t sh = 0; sh < 16; sh++)
        CHECK(ms_coord_owner(c, 0, sh, NULL) == 0);
    CHECK(regions_agree(c, "Counter"));
    ms_coord_free(c);
}

static int rb_calls;
static int rb_saw_moving;

/* Proposes shards 0 and 1 every round; checks the view's moving[]. */
static int rebalance_two(void *data, int type,
                         const struct ms_coord_view *v, uint32_t *out,
                         size_t max, char *err, size_t errlen)
{
    (void)data;
    (void)type;
    (void)err;
    (void)errlen;
    rb_calls++;
    CHECK(v->moving != NULL && max >= 2);
    rb_saw_moving |= v->moving[0] && v->moving[1];
    out[0] = 1;
    out[1] = 0;
    return 2;
}

static int rebalance_fails(void *data, int type,
                           const struct ms_coord_view *v, uint32_t *out,
                           size_t max, char *err, size_t errlen)
{
    (void)data;
    (void)type;
    (void)v;
    (void)out;
    (void)max;
    snprintf(err, errlen, "broken");
    return -1;
}

/* Rounds run at their interval (or at once after reconcile), start moves
 * for what the callback proposes, never twice for a moving shard. */
static void test_rebalance_rounds(void)
{
    struct ms_coord *c = moving_cluster(rebalance_two);
    rb_calls = rb_saw_moving = 0;
    uint64_t o0 = ms_coord_owner(c, 0, 0, NULL);
    uint64_t o1 = ms_coord_owner(c, 0, 1, NULL);
    region(o0)->nostop = 1;
    region(o1)->nostop = 1;
    CHECK(ms_coord_tick(c, 500) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(rb_calls == 0); /* not due yet */
    CHECK(ms_coord_tick(c, 1000) == 0);
    pump(c, N1, NULL, NULL);
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(rb_calls == 1 && st.started == 2 && st.in_progress == 2 &&
          st.rounds == 1);
    ms_coord_reconcile(c);
    CHECK(ms_coord_tick(c, 1100) == 0);
    pump(c, N1, NULL, NULL);
    ms_coord_move_stats(c, &st);
    CHECK(rb_calls == 2 && rb_saw_moving && st.started == 2);
    /* the old owners stop: both land on N3 */
    region(o0)->nostop = region(o1)->nostop = 0;
    answer_stop(c, o0, "Counter", 16, &region(o0)->last_stop, 1);
    pump(c, N1, NULL, NULL);
    struct ms_plan_entry e1 = {1, o1, region(o1)->last_stop.gen};
    answer_stop(c, o1, "Counter", 16, &e1, 1);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_owner(c, 0, 0, NULL) == N3);
    CHECK(ms_coord_owner(c, 0, 1, NULL) == N3);
    ms_coord_move_stats(c, &st);
    CHECK(st.finished == 2 && st.in_progress == 0 && st.peak == 2);
    CHECK(regions_agree(c, "Counter"));
    /* no round while a member leaves */
    int calls = rb_calls;
    ms_coord_member_leaving(c, N3, 1200);
    ms_coord_reconcile(c);
    CHECK(ms_coord_tick(c, 1300) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(rb_calls == calls);
    ms_coord_free(c);

    /* a failing callback is counted and noted, nothing moves */
    c = moving_cluster(rebalance_fails);
    CHECK(ms_coord_tick(c, 1000) == 0);
    struct ms_coord_action a;
    int notes = 0;
    while (ms_coord_next_action(c, &a)) {
        notes += a.kind == MS_COORD_NOTE && strstr(a.payload, "broken");
        free(a.payload);
    }
    ms_coord_move_stats(c, &st);
    CHECK(notes == 1 && st.strategy_errors == 1 && st.started == 0);
    ms_coord_free(c);
}

/* A coordinator that is deposed forgets its moves; the next one rolls
 * every moving shard back by publishing the regions' views higher. */
static void test_move_takeover(void)
{
    struct ms_coord *c = moving_cluster(NULL);
    uint64_t from = ms_coord_owner(c, 0, 4, NULL);
    region(from)->nostop = 1;
    CHECK(ms_coord_move(c, 0, 4, 10) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t g0;
    ms_coord_owner(c, 0, 4, &g0);
    /* N2 takes over at term 2 (N1 vanished from its point of view) */
    struct ms_coord_config cfg = {0};
    cfg.self_uid = N2;
    cfg.types = &COUNTER;
    cfg.ntypes = 1;
    cfg.allocate = allocate;
    cfg.data = &S;
    struct ms_coord *b = NULL;
    CHECK(ms_coord_new(&b, &cfg) == 0);
    ms_coord_member_up(b, N2, 0);
    ms_coord_member_up(b, N3, 0);
    ms_coord_member_up(b, N1, 0);
    CHECK(ms_coord_become(b, 2, 0) == 0);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    uint64_t g1;
    CHECK(ms_coord_owner(b, 0, 4, &g1) == from && g1 > g0);
    CHECK(MS_PLAN_GEN_TERM(g1) == 2);
    /* the deposed one learns and forgets */
    ms_coord_observe_term(c, 2);
    struct ms_coord_move_stats st;
    ms_coord_move_stats(c, &st);
    CHECK(st.in_progress == 0 && !ms_coord_active(c));
    CHECK(regions_agree(b, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
    ms_coord_free(b);
}

/* What the batch allocator saw and does. */
static int many_calls, many_fail;
static size_t many_n;
static uint32_t many_shards[16];
static uint64_t many_from;

/* Checks the view (each shard still owned by the old owner and moving,
 * ascending, N3 a host) and places them all on N3, except the second,
 * which goes to a member that is no host. */
static int allocate_many(void *data, int type, const uint32_t *shards,
                         size_t n, const struct ms_coord_view *v,
                         uint64_t *out, char *err, size_t errlen)
{
    (void)data;
    (void)err;
    (void)errlen;
    many_calls++;
    if (many_fail)
        return -1;
    CHECK(v->type == type && n >= 2 && n <= 16);
    many_n = n;
    int n3 = 0;
    for (size_t i = 0; i < v->nhosts; i++) {
        n3 |= v->hosts[i].uid == N3;
        CHECK(v->hosts[i].uid != many_from); /* away from the old owner */
    }
    CHECK(n3);
    for (size_t i = 0; i < n; i++) {
        CHECK(i == 0 || shards[i - 1] < shards[i]);
        CHECK(v->owners[shards[i]] == many_from && v->moving[shards[i]]);
        many_shards[i] = shards[i];
        out[i] = i == 1 ? 0xdead : N3;
    }
    return 0;
}

/* Drains c like pump(), counting the PLAN broadcasts and their entries. */
static void pump_plans(struct ms_coord *c, int *plans, size_t *entries)
{
    struct ms_coord_action a;
    while (ms_coord_next_action(c, &a)) {
        if (a.kind == MS_COORD_BROADCAST) {
            struct ms_plan_msg m;
            CHECK(ms_plan_msg_decode(a.payload, a.len, &m) == 0);
            if (m.kind == MS_PLAN_MSG_PLAN) {
                (*plans)++;
                *entries += m.nentries;
            }
            ms_plan_msg_free(&m);
            for (int i = 0; i < S.n; i++)
                deliver(c, &S.r[i], N1, a.payload, a.len, 1);
        } else if (a.kind == MS_COORD_SEND) {
            struct region *r = find_region(a.uid);
            if (r)
                deliver(c, r, N1, a.payload, a.len, 0);
        }
        free(a.payload);
    }
}

/* Starts moves of the first n shards `from` owns, which holds its STOPPED
 * back; fills mine[] with them and e[] with their STOPPED entries. */
static void move_held(struct ms_coord *c, uint64_t from, size_t n,
                      uint32_t *mine, struct ms_plan_entry *e)
{
    size_t k = 0;
    for (uint32_t s = 0; s < 16 && k < n; s++)
        if (ms_coord_owner(c, 0, s, NULL) == from)
            mine[k++] = s;
    CHECK(k == n);
    region(from)->nostop = 1;
    for (size_t i = 0; i < n; i++)
        CHECK(ms_coord_move(c, 0, mine[i], 10) == 0);
    pump(c, N1, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        struct ms_coord_move_info mi;
        uint64_t hgen = 0;
        for (size_t j = 0; ms_coord_move_at(c, j, 10, &mi) == 1; j++)
            if (mi.shard == mine[i])
                hgen = mi.hgen;
        CHECK(hgen != 0);
        e[i] = (struct ms_plan_entry){mine[i], from, hgen};
    }
}

/* `from` answers with one STOPPED of e[0..n). */
static void stopped_once(struct ms_coord *c, uint64_t from,
                         struct ms_plan_entry *e, size_t n)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_STOPPED;
    m.term = 1;
    snprintf(m.type, sizeof m.type, "Counter");
    m.shard_count = 16;
    m.entries = e;
    m.nentries = n;
    send_from(c, from, &m);
}

/* Three shards of one old owner stop and are answered in one STOPPED
 * (the codec keeps its entries ascending and unique): one allocate_many
 * places them, a choice that
 * is no host leaves its shard unassigned, one PLAN publishes all three.
 * When allocate_many cannot run, allocate places them one by one, each
 * seeing the ones before it placed. */
static void test_stopped_batch(void)
{
    for (int fail = 0; fail <= 1; fail++) {
        many_cb = allocate_many;
        many_calls = 0;
        many_fail = fail;
        struct ms_coord *c = moving_cluster(NULL);
        many_cb = NULL;
        uint64_t from = ms_coord_owner(c, 0, 0, NULL);
        many_from = from;
        uint32_t mine[3];
        struct ms_plan_entry e[3];
        move_held(c, from, 3, mine, e);
        struct ms_coord_move_stats st;
        ms_coord_move_stats(c, &st);
        CHECK(st.in_progress == 3);
        int calls = S.alloc_calls;
        stopped_once(c, from, e, 3);
        int plans = 0;
        size_t entries = 0;
        pump_plans(c, &plans, &entries);
        CHECK(many_calls == 1);
        CHECK(plans == 1 && entries == 3);
        ms_coord_move_stats(c, &st);
        CHECK(st.in_progress == 0);
        if (!fail) {
            CHECK(many_n == 3 && S.alloc_calls == calls);
            for (size_t i = 0; i < 3; i++)
                CHECK(many_shards[i] == mine[i]);
            CHECK(ms_coord_owner(c, 0, mine[0], NULL) == N3);
            CHECK(ms_coord_owner(c, 0, mine[1], NULL) == 0);
            CHECK(ms_coord_owner(c, 0, mine[2], NULL) == N3);
            CHECK(st.finished == 2 && st.aborted == 1);
        } else {
            /* the sim's allocate checks that each sees its shard
             * unassigned and the hosts' counts as the owners say */
            CHECK(S.alloc_calls == calls + 3);
            for (size_t i = 0; i < 3; i++)
                CHECK(ms_coord_owner(c, 0, mine[i], NULL) == N3);
            CHECK(st.finished == 3 && st.aborted == 0);
        }
        CHECK(regions_agree(c, "Counter"));
        CHECK(S.conflicts == 0);
        ms_coord_free(c);
    }
}

/* Places four shards: the first fails with a reason, the second goes
 * to N3, the third to a member that is no host, the fourth fails without
 * a reason (err holds one reason per shard, coordinator.h). */
static int allocate_many_mixed(void *data, int type, const uint32_t *shards,
                               size_t n, const struct ms_coord_view *v,
                               uint64_t *out, char *err, size_t errlen)
{
    (void)data, (void)type, (void)shards, (void)v;
    CHECK(n == 4);
    snprintf(err, errlen, "the first cannot go");
    out[0] = 0;
    out[1] = N3;
    out[2] = 0xdead;
    out[3] = 0;
    return 0;
}

/* Each shard of one STOPPED left unassigned is noted with its own reason,
 * as one-by-one placing notes it, not with the first shard's. */
static void test_stopped_batch_reasons(void)
{
    many_cb = allocate_many_mixed;
    struct ms_coord *c = moving_cluster(NULL);
    many_cb = NULL;
    uint64_t from = ms_coord_owner(c, 0, 0, NULL);
    uint32_t mine[4];
    struct ms_plan_entry e[4];
    move_held(c, from, 4, mine, e);
    stopped_once(c, from, e, 4);
    /* the notes, in shard order */
    char notes[4][512];
    int nn = 0;
    struct ms_coord_action a;
    while (ms_coord_next_action(c, &a)) {
        if (a.kind == MS_COORD_NOTE && nn < 4)
            snprintf(notes[nn++], sizeof notes[0], "%.*s", (int)a.len,
                     (const char *)a.payload);
        else if (a.kind == MS_COORD_BROADCAST)
            for (int i = 0; i < S.n; i++)
                deliver(c, &S.r[i], N1, a.payload, a.len, 1);
        free(a.payload);
    }
    CHECK(nn == 3);
    char want[64];
    snprintf(want, sizeof want, "shard %u of", mine[0]);
    CHECK(strstr(notes[0], want) && strstr(notes[0], "the first cannot go"));
    snprintf(want, sizeof want, "shard %u of", mine[2]);
    CHECK(strstr(notes[1], want) &&
          strstr(notes[1], "chose 000000000000dead, which cannot host it") &&
          !strstr(notes[1], "the first cannot go"));
    snprintf(want, sizeof want, "shard %u of", mine[3]);
    CHECK(strstr(notes[2], want) && strstr(notes[2], "no owner chosen") &&
          !strstr(notes[2], "the first cannot go"));
    CHECK(ms_coord_owner(c, 0, mine[1], NULL) == N3);
    for (size_t i = 0; i < 4; i++)
        if (i != 1)
            CHECK(ms_coord_owner(c, 0, mine[i], NULL) == 0);
    CHECK(regions_agree(c, "Counter"));
    ms_coord_free(c);
}

/* The old owner is leaving and the only host left when its STOPPED
 * comes: each shard that lands there again ends unassigned, so the next
 * one's strategy call must see it unassigned, as one-by-one placing shows
 * it. No batch can know that: the shards are placed one by one. */
static void test_stopped_batch_leaving_alone(void)
{
    many_cb = allocate_many;
    many_calls = 0;
    many_fail = 0;
    struct ms_coord *c = moving_cluster(NULL);
    many_cb = NULL;
    many_from = N2;
    uint32_t mine[3];
    struct ms_plan_entry e[3];
    move_held(c, N2, 3, mine, e);
    /* N2 leaves; then N1 may no longer host the type and N3 is gone */
    ms_coord_member_leaving(c, N2, 20);
    pump(c, N1, NULL, NULL);
    S.ineligible = N1;
    ms_coord_member_removed(c, N3, 20);
    pump(c, N1, NULL, NULL);
    int calls = S.alloc_calls;
    stopped_once(c, N2, e, 3);
    pump(c, N1, NULL, NULL);
    /* allocate, once per shard, saw the ones before it unassigned (it
     * checks that the hosts' counts are what the owners say) */
    CHECK(many_calls == 0);
    CHECK(S.alloc_calls == calls + 3);
    for (size_t i = 0; i < 3; i++)
        CHECK(ms_coord_owner(c, 0, mine[i], NULL) == 0);
    S.ineligible = 0;
    ms_coord_free(c);
}

int main(void)
{
    test_stopped_batch_leaving_alone();
    test_stopped_batch();
    test_stopped_batch_reasons();
    test_move();
    test_move_away();
    test_duplicate_view_during_move();
    test_move_deadline();
    test_leaving_moves();
    test_rebalance_rounds();
    test_move_takeover();
    sim_reset();
    free(S.log);
    CHECK_DONE();
}
