/*
 * The coordinator, driven step by step against simulated regions
 * (coord_sim.h): registration, allocation, takeover by a new
 * coordinator, rivals, malformed input and the largest plans. Shard
 * moves are in test_coordinator_moves.c.
 */
#include "coord_sim.h"

/* Registration: same fingerprint hosts, another one is refused. */
static void test_registration(void)
{
    sim_reset();
    /* broadcasts reach regions in this order: N2 answers first */
    add_region(N2);
    add_region(N3);
    add_region(N1);
    add_type(N1, "Counter", 16, COUNTER.fingerprint);
    add_type(N2, "Counter", 16, COUNTER.fingerprint);
    add_type(N3, "Counter", 16, "Counter|16|rendezvous|120");
    add_type(N3, "Lonely", 4, "Lonely|4");
    /* a type the coordinator does not have: the first registrant's
     * settings rule (N2 answers before N3 and N1) */
    add_type(N2, "Order", 8, "Order|8|least_loaded|60");
    add_type(N3, "Order", 8, "Order|8|least_loaded|60");
    add_type(N1, "Order", 4, "Order|8|least_loaded|60"); /* shard count */
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    CHECK(ms_coord_member_up(c, N1, 0) == 0);
    CHECK(ms_coord_member_up(c, N2, 0) == 0);
    CHECK(ms_coord_member_up(c, N3, 0) == 0);
    CHECK(ms_coord_member_up(c, 0, 0) == MS_EINVAL);
    CHECK(!ms_coord_active(c));
    CHECK(ms_coord_become(c, 1, 0) == 0);
    int ready = 0;
    pump(c, N1, &ready, NULL);
    CHECK(ready == 1 && ms_coord_ready(c));

    int counter = ms_coord_type_index(c, "Counter");
    int order = ms_coord_type_index(c, "Order");
    CHECK(counter == 0 && order == 1);
    CHECK(ms_coord_type_index(c, "Nope") == MS_ENOTYPE);
    CHECK(strcmp(ms_coord_type_name(c, order), "Order") == 0);
    CHECK(ms_coord_shard_count(c, order) == 8);
    CHECK(ms_coord_hosts(c, counter, N1) && ms_coord_hosts(c, counter, N2));
    CHECK(!ms_coord_hosts(c, counter, N3));
    CHECK(ms_coord_hosts(c, order, N2) && ms_coord_hosts(c, order, N3));
    CHECK(!ms_coord_hosts(c, order, N1));
    /* N3 was refused Counter with a reason naming both fingerprints; N1
     * was refused Order for its shard count */
    CHECK(region(N3)->refused == 1);
    CHECK(strstr(region(N3)->reason, "Counter") &&
          strstr(region(N3)->reason, "Counter|16|rendezvous|120") &&
          strstr(region(N3)->reason, "Counter|16|least_loaded|120"));
    CHECK(region(N1)->refused == 1);
    CHECK(strstr(region(N1)->reason, "4 shards here, 8 in the cluster"));
    CHECK(region(N2)->refused == 0);

    /* allocations never go to a refused node */
    for (uint32_t s = 0; s < 16; s++)
        alloc(c, N1, N3, "Counter", s);
    for (uint32_t s = 0; s < 16; s++) {
        uint64_t o = ms_coord_owner(c, counter, s, NULL);
        CHECK(o == N1 || o == N2);
    }
    for (uint32_t s = 0; s < 8; s++)
        alloc(c, N1, N1, "Order", s);
    for (uint32_t s = 0; s < 8; s++) {
        uint64_t o = ms_coord_owner(c, order, s, NULL);
        CHECK(o == N2 || o == N3);
    }
    CHECK(ms_coord_owned_count(c, N2) == 8 + 4);
    CHECK(regions_agree(c, "Counter") && regions_agree(c, "Order"));

    /* an unknown type, a bad shard */
    alloc(c, N1, N2, "Ghost", 0);
    CHECK(strcmp(region(N2)->alloc_code, "unknown_type") == 0);
    alloc(c, N1, N2, "Counter", 16);
    CHECK(strcmp(region(N2)->alloc_code, "bad_shard") == 0);

    /* the eligibility callback (roles) can leave a type without a host */
    S.ineligible = N3;
    CHECK(!ms_coord_hosts(c, 2, N3));
    alloc(c, N1, N2, "Lonely", 0);
    CHECK(strcmp(region(N2)->alloc_code, "no_host") == 0);
    alloc(c, N1, N2, "Counter", 0); /* assigned: answered, not refused */
    CHECK(region(N2)->alloc_code[0] == '\0');
    S.ineligible = 0;
    alloc(c, N1, N2, "Lonely", 0);
    CHECK(ms_coord_owner(c, 2, 0, NULL) == N3);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* N1 and N2 with Counter, both Up, on an inert coordinator of N1. */
static struct ms_coord *two_nodes(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_type(N1, "Counter", 16, COUNTER.fingerprint);
    add_type(N2, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);
    return c;
}

/* Before the views are in, allocation answers "not ready"; an inert
 * coordinator answers "not_coordinator". */
static void test_not_ready(void)
{
    struct ms_coord *c = two_nodes();

    alloc(c, N1, N2, "Counter", 3);
    CHECK(strcmp(region(N2)->alloc_code, "not_coordinator") == 0);

    region(N2)->silent = 1; /* N2 does not answer views yet */
    CHECK(ms_coord_become(c, 1, 1000) == 0);
    int ready = 0;
    pump(c, N1, &ready, NULL);
    CHECK(ready == 0 && ms_coord_active(c) && !ms_coord_ready(c));
    CHECK(ms_coord_next_deadline(c, 1000) == 3000);
    CHECK(ms_coord_next_deadline(c, 2500) == 1500);

    alloc(c, N1, N2, "Counter", 3);
    CHECK(strcmp(region(N2)->alloc_code, "not_ready") == 0);
    alloc(c, N1, N1, "Counter", 3);
    CHECK(strcmp(region(N1)->alloc_code, "not_ready") == 0);
    CHECK(S.alloc_calls == 0);

    /* before the deadline nothing happens; at it, the plan is published */
    CHECK(ms_coord_tick(c, 3999) == 0);
    CHECK(pump(c, N1, &ready, NULL) == 0);
    CHECK(ms_coord_tick(c, 4000) == 0);
    pump(c, N1, &ready, NULL);
    CHECK(ready == 1 && ms_coord_ready(c));
    alloc(c, N1, N2, "Counter", 3);
    CHECK(region(N2)->alloc_code[0] == '\0');
    CHECK(ms_coord_owner(c, 0, 3, NULL) == N1); /* N2 not registered yet */
    CHECK(!ms_coord_hosts(c, 0, N2));

    /* N2 is asked again one timeout later and, answering, registers and
     * gets the plan */
    CHECK(ms_coord_next_deadline(c, 4000) == 3000);
    region(N2)->silent = 0;
    CHECK(ms_coord_tick(c, 5000) == 0);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    CHECK(ms_coord_tick(c, 7000) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_hosts(c, 0, N2));
    CHECK(ms_coord_next_deadline(c, 7000) == -1);
    CHECK(regions_agree(c, "Counter"));
    ms_coord_free(c);
}

/* A member whose connection was authenticated again (its VIEW_REQUEST,
 * or its answer, may have gone out on the connection that ended) is asked
 * again at once, not one view_timeout later; a member that answered, an
 * unknown one and an inert coordinator send nothing. */
static void test_connected_asks_again(void)
{
    struct ms_coord *c = two_nodes();
    /* inert: nothing to ask */
    CHECK(ms_coord_member_connected(c, N2) == 0);
    CHECK(pump(c, N1, NULL, NULL) == 0);

    region(N2)->silent = 1; /* its VIEW_REQUEST is lost */
    CHECK(ms_coord_become(c, 1, 1000) == 0);
    int ready = 0;
    pump(c, N1, &ready, NULL);
    CHECK(ready == 0 && !ms_coord_ready(c));
    CHECK(ms_coord_next_deadline(c, 1000) == 3000);

    /* the connection to N2 comes back 200 ms later: N2 is asked now and,
     * answering, registers; the plan is published without the wait */
    region(N2)->silent = 0;
    CHECK(ms_coord_member_connected(c, N2) == 0);
    CHECK(pump(c, N1, &ready, NULL) > 0);
    CHECK(ready == 1 && ms_coord_ready(c));
    CHECK(ms_coord_hosts(c, 0, N2));
    CHECK(regions_agree(c, "Counter"));

    /* answered: a new connection asks nothing; nor does an unknown uid or
     * this node */
    CHECK(ms_coord_member_connected(c, N2) == 0);
    CHECK(ms_coord_member_connected(c, 0xdead) == 0);
    CHECK(ms_coord_member_connected(c, N1) == 0);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    ms_coord_free(c);
}

/* Allocation through the callback; generations strictly increase. */
static void test_allocation(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);
    ms_coord_member_leaving(c, N3, 0); /* takes no new shard */
    CHECK(ms_coord_become(c, 1, 0) == 0);
    pump(c, N1, NULL, NULL);
    uint64_t published = ms_coord_generation(c);
    CHECK(published == (1ull << 32) + 1);

    uint64_t last = published;
    for (uint32_t s = 0; s < 16; s++) {
        alloc(c, N1, S.r[s % 3].uid, "Counter", s);
        uint64_t gen;
        uint64_t o = ms_coord_owner(c, 0, s, &gen);
        CHECK(o == N1 || o == N2);
        CHECK(gen > last);
        last = gen;
        CHECK(ms_coord_generation(c) == gen);
        CHECK(ms_plan_owner(region(N3)->plan[0], s, NULL) == o);
    }
    CHECK(S.alloc_calls == 16 && !S.leaving_seen); /* others can host */
    CHECK(ms_coord_owned_count(c, N1) == 8 && ms_coord_owned_count(c, N2) == 8);
    CHECK(regions_agree(c, "Counter"));

    /* an assigned shard is answered with its entry, to the asker only */
    uint64_t gen5;
    uint64_t o5 = ms_coord_owner(c, 0, 5, &gen5);
    struct region *r2 = region(N2);
    CHECK(ms_plan_apply(r2->plan[0], 5, 0, 1) == 0); /* it holds gen5 */
    alloc(c, N1, N2, "Counter", 5);
    CHECK(S.alloc_calls == 16 && ms_coord_generation(c) == last);
    CHECK(ms_coord_owner(c, 0, 5, NULL) == o5);

    /* strategy failures are refusals, never guesses */
    region(N2)->alive = 0;
    CHECK(ms_coord_member_removed(c, N2, 0) == 0);
    pump(c, N1, NULL, NULL);
    uint32_t free_shard = 16;
    for (uint32_t s = 0; s < 16 && free_shard == 16; s++)
        if (ms_coord_owner(c, 0, s, NULL) == 0)
            free_shard = s;
    CHECK(free_shard < 16);
    S.strategy = 1;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(strcmp(region(N3)->alloc_code, "strategy") == 0);
    S.strategy = 2;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(strcmp(region(N3)->alloc_code, "strategy") == 0);
    CHECK(ms_coord_owner(c, 0, free_shard, NULL) == 0);
    S.strategy = 0;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(ms_coord_owner(c, 0, free_shard, NULL) == N1);
    CHECK(regions_agree(c, "Counter"));
    /* with only leaving members left, they are offered */
    region(N1)->alive = 0;
    CHECK(ms_coord_member_removed(c, N1, 0) == 0);
    pump(c, N1, NULL, NULL);
    S.leaving_seen = 0;
    alloc(c, N1, N3, "Counter", free_shard);
    CHECK(S.leaving_seen && ms_coord_owner(c, 0, free_shard, NULL) == N3);
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/* A removed member's shards are unassigned at a new generation and
 * reallocated on the next request. */
static void test_removed_member(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    for (int i = 0; i < 3; i++)
        ms_coord_member_up(c, S.r[i].uid, 0);
    ms_coord_become(c, 1, 0);
    pump(c, N1, NULL, NULL);
    for (uint32_t s = 0; s < 16; s++)
        alloc(c, N1, N1, "Counter", s);
    uint32_t had = ms_coord_owned_count(c, N3);
    CHECK(had == 5);
    uint64_t before = ms_coord_generation(c);

    /* unreachable: nothing moves */
    ms_coord_member_reachable(c, N3, 0);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    CHECK(ms_coord_owned_count(c, N3) == had);

    /* downed: its shards become unassigned at one new generation */
    region(N3)->alive = 0;
    CHECK(ms_coord_member_removed(c, N3, 0) == 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_generation(c) == before + 1);
    uint32_t unassigned = 0;
    for (uint32_t s = 0; s < 16; s++) {
        uint64_t g;
        uint64_t o = ms_coord_owner(c, 0, s, &g);
        CHECK(o != N3);
        if (o == 0) {
            unassigned++;
            CHECK(g == before + 1);
        }
    }
    CHECK(unassigned == had);
    CHECK(regions_agree(c, "Counter"));
    CHECK(ms_coord_owned_count(c, N3) == 0);
    CHECK(!ms_coord_hosts(c, 0, N3));

    /* the next requests reallocate them to the others */
    for (uint32_t s = 0; s < 16; s++)
        if (ms_plan_owner(region(N2)->plan[0], s, NULL) == 0)
            alloc(c, N1, N2, "Counter", s);
    for (uint32_t s = 0; s < 16; s++) {
        uint64_t o = ms_coord_owner(c, 0, s, NULL);
        CHECK(o == N1 || o == N2);
    }
    CHECK(ms_coord_owned_count(c, N1) + ms_coord_owned_count(c, N2) == 16);
    CHECK(regions_agree(c, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(c);
}

/*
 * Coordinator A (on N1, which hosts nothing) allocated shards at 10
 * generations, some updates missed by some regions; A dies; B (N2) takes
 * over with a higher term. B keeps the highest generation per shard and
 * publishes higher ones; nothing goes backwards; no shard ever has two
 * owners at one generation; a late plan of A is fenced out.
 */
static void test_takeover(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    add_region(N4);
    for (int i = 0; i < 4; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    S.ineligible = N1;
    struct ms_coord *a = new_coord(N1, &COUNTER, 1);
    struct ms_coord *b = new_coord(N2, &COUNTER, 1);
    for (int i = 0; i < 4; i++) {
        ms_coord_member_up(a, S.r[i].uid, 0);
        ms_coord_member_up(b, S.r[i].uid, 0);
    }
    CHECK(ms_coord_become(a, 1, 0) == 0);
    pump(a, N1, NULL, NULL);
    uint64_t g0 = ms_coord_generation(a);

    /* gens g0+1 .. g0+10: shards 0..9. N3 misses the last three updates,
     * N2 misses updates 5 and 6 */
    uint64_t gen_of[16] = {0}, owner_of[16] = {0};
    for (uint32_t s = 0; s < 10; s++) {
        region(N3)->drop = s >= 7;
        region(N2)->drop = s == 5 || s == 6;
        alloc(a, N1, N4, "Counter", s);
        owner_of[s] = ms_coord_owner(a, 0, s, &gen_of[s]);
        CHECK(gen_of[s] == g0 + 1 + s);
        CHECK(owner_of[s] == N2 || owner_of[s] == N3 || owner_of[s] == N4);
    }
    region(N2)->drop = region(N3)->drop = 0;
    CHECK(ms_plan_owner(region(N3)->plan[0], 8, NULL) == 0);
    CHECK(ms_plan_owner(region(N2)->plan[0], 5, NULL) == 0);
    uint64_t a_max = ms_coord_generation(a);

    /* A's later plan message is in flight to N3 when A dies (held), lost
     * on the way to N2, and reaches N4 only */
    region(N3)->hold = 1;
    region(N2)->drop = 1;
    alloc(a, N1, N4, "Counter", 10);
    region(N2)->drop = 0;
    uint64_t gen10;
    uint64_t owner10 = ms_coord_owner(a, 0, 10, &gen10);
    CHECK(region(N3)->nheld == 1);
    region(N3)->hold = 0;
    /* ...and N4 saw it, but N4 will be silent for B's view request */
    CHECK(ms_plan_owner(region(N4)->plan[0], 10, NULL) == owner10);

    /* A vanishes (downed); B becomes coordinator above every fence */
    region(N1)->alive = 0;
    ms_coord_member_removed(b, N1, 0);
    uint64_t term = 0;
    for (int i = 0; i < S.n; i++)
        if (S.r[i].fence.term > term)
            term = S.r[i].fence.term;
    term++;
    CHECK(term == 2);
    region(N4)->silent = 1;
    CHECK(ms_coord_become(b, term, 0) == 0);
    int ready = 0;
    pump(b, N2, &ready, NULL);
    CHECK(ready == 0);            /* N4 has not answered */
    CHECK(ms_coord_tick(b, 3000) == 0); /* the deadline */
    pump(b, N2, &ready, NULL);
    CHECK(ready == 1);

    /* B kept the highest generation per shard: every shard A assigned
     * keeps its owner, even where one region missed the update */
    uint64_t published = ms_coord_generation(b);
    CHECK(published > a_max && published > gen10);
    CHECK(published == (term << 32) + 1);
    for (uint32_t s = 0; s < 10; s++) {
        uint64_t g;
        CHECK(ms_coord_owner(b, 0, s, &g) == owner_of[s]);
        CHECK(g == published);
    }
    /* shard 10 reached only silent N4: B does not know it and publishes it
     * unassigned, at a generation above A's */
    uint64_t g10b;
    CHECK(ms_coord_owner(b, 0, 10, &g10b) == 0 && g10b > gen10);

    /* A's delayed plan reaches N3 now: fenced out (older term) */
    struct region *r3 = region(N3);
    int drops = r3->fence_drops;
    release_held(b, r3);
    CHECK(r3->fence_drops == drops + 1);
    CHECK(ms_plan_owner(r3->plan[0], 10, NULL) == 0);

    /* N4 answers the retry and converges on B's plan: its newer-looking
     * entry for shard 10 (A's) is overridden by B's higher generation */
    region(N4)->silent = 0;
    ms_coord_tick(b, 6000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_plan_owner(region(N4)->plan[0], 10, NULL) == 0);
    CHECK(regions_agree(b, "Counter"));

    /* new allocations by B continue upwards */
    uint64_t last = published;
    for (uint32_t s = 10; s < 16; s++) {
        alloc(b, N2, N3, "Counter", s);
        uint64_t g;
        CHECK(ms_coord_owner(b, 0, s, &g) != 0);
        CHECK(g > last);
        last = g;
    }
    CHECK(regions_agree(b, "Counter"));
    /* a's ghost can still be driven (it does not know it is dead): any
     * plan it broadcasts is refused by every region's fence */
    region(N1)->alive = 1;
    ms_coord_member_removed(a, N2, 0); /* would unassign N2's shards */
    int fenced = 0;
    for (int i = 0; i < S.n; i++)
        fenced -= S.r[i].fence_drops;
    pump(a, N1, NULL, NULL);
    for (int i = 0; i < S.n; i++)
        fenced += S.r[i].fence_drops;
    CHECK(fenced == 3); /* N2, N3, N4 */
    region(N1)->alive = 0;
    CHECK(regions_agree(b, "Counter"));
    CHECK(S.conflicts == 0);
    ms_coord_free(a);
    ms_coord_free(b);
}

/*
 * At a takeover, shards stay with owners that did not answer (perhaps
 * merely unreachable), and leave owners that answered without the type or
 * that are no longer eligible.
 */
static void test_ineligible_owner(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *a = new_coord(N1, &COUNTER, 1);
    struct ms_coord *b = new_coord(N2, &COUNTER, 1);
    for (int i = 0; i < 3; i++) {
        ms_coord_member_up(a, S.r[i].uid, 0);
        ms_coord_member_up(b, S.r[i].uid, 0);
    }
    ms_coord_become(a, 1, 0);
    pump(a, N1, NULL, NULL);
    for (uint32_t s = 0; s < 16; s++)
        alloc(a, N1, N2, "Counter", s);
    uint64_t owner[16];
    for (uint32_t s = 0; s < 16; s++)
        owner[s] = ms_coord_owner(a, 0, s, NULL);
    CHECK(ms_coord_owned_count(a, N3) == 5);
    ms_coord_resign(a);

    /* N3 lost the type and does not answer in time: it keeps its shards */
    region(N3)->hide = 1;
    region(N3)->silent = 1;
    ms_coord_become(b, 2, 0);
    pump(b, N2, NULL, NULL);
    ms_coord_tick(b, 3000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    for (uint32_t s = 0; s < 16; s++)
        CHECK(ms_coord_owner(b, 0, s, NULL) == owner[s]);
    CHECK(ms_coord_owned_count(b, N3) == 5);
    /* its late answer, without the type, frees its shards */
    region(N3)->silent = 0;
    uint64_t before = ms_coord_generation(b);
    ms_coord_tick(b, 6000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_owned_count(b, N3) == 0);
    CHECK(ms_coord_generation(b) == before + 1);
    for (uint32_t s = 0; s < 16; s++)
        CHECK(ms_coord_owner(b, 0, s, NULL) ==
              (owner[s] == N3 ? 0 : owner[s]));
    CHECK(regions_agree(b, "Counter"));

    /* a new term where N1 is no longer eligible: published unassigned */
    ms_coord_resign(b);
    S.ineligible = N1;
    ms_coord_become(b, 3, 10000);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    CHECK(ms_coord_owned_count(b, N1) == 0);
    CHECK(ms_coord_owned_count(b, N2) == 5);
    CHECK(regions_agree(b, "Counter"));
    S.ineligible = 0;
    CHECK(S.conflicts == 0);
    ms_coord_free(a);
    ms_coord_free(b);
}

/* Two nodes claim the same term: the second is refused by the fences and
 * deposed; so is a coordinator that hears of a higher term. */
static void test_rivals(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    add_region(N3);
    for (int i = 0; i < 3; i++)
        add_type(S.r[i].uid, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *b = new_coord(N2, &COUNTER, 1);
    struct ms_coord *c = new_coord(N3, &COUNTER, 1);
    for (int i = 0; i < 3; i++) {
        ms_coord_member_up(b, S.r[i].uid, 0);
        ms_coord_member_up(c, S.r[i].uid, 0);
    }
    CHECK(ms_coord_become(b, 5, 0) == 0);
    pump(b, N2, NULL, NULL);
    for (uint32_t s = 0; s < 4; s++)
        alloc(b, N2, N1, "Counter", s);
    CHECK(ms_coord_become(c, 5, 0) == 0);
    int deposed = 0;
    pump(c, N3, NULL, &deposed);
    CHECK(deposed == 1 && !ms_coord_active(c));
    CHECK(ms_coord_max_term(c) == 5);
    CHECK(ms_coord_become(c, 5, 0) == MS_EINVAL);
    alloc(c, N3, N1, "Counter", 9);
    CHECK(strcmp(region(N1)->alloc_code, "not_coordinator") == 0);

    /* a higher term heard by b's node deposes b */
    ms_coord_observe_term(b, 6);
    deposed = 0;
    pump(b, N2, NULL, &deposed);
    CHECK(deposed == 1 && !ms_coord_active(b));
    CHECK(ms_coord_become(b, 6, 0) == MS_EINVAL);
    CHECK(ms_coord_become(b, 7, 0) == 0);
    pump(b, N2, NULL, NULL);
    CHECK(ms_coord_ready(b));
    /* and b's new term published above its old allocations */
    for (uint32_t s = 0; s < 4; s++) {
        uint64_t g;
        CHECK(ms_coord_owner(b, 0, s, &g) != 0 && g > (7ull << 32));
    }
    CHECK(regions_agree(b, "Counter"));

    /* an alloc carrying a higher term deposes too */
    region(N1)->fence.term = 9;
    alloc(b, N2, N1, "Counter", 12);
    CHECK(!ms_coord_active(b));
    CHECK(strcmp(region(N1)->alloc_code, "not_coordinator") == 0);
    ms_coord_resign(b);
    CHECK(S.conflicts == 0);
    ms_coord_free(b);
    ms_coord_free(c);
}

/* Malformed CONTROL payloads are refused; nothing changes or is sent. */
static void test_malformed(void)
{
    sim_reset();
    add_region(N1);
    add_type(N1, "Counter", 16, COUNTER.fingerprint);
    struct ms_coord *c = new_coord(N1, &COUNTER, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_become(c, 1, 0);
    pump(c, N1, NULL, NULL);
    CHECK(ms_coord_ready(c));
    uint64_t gen = ms_coord_generation(c);
    static const char *bad[] = {
        "",
        "garbage",
        "{\"t\":\"alloc\",\"term\":1,\"type\":\"Counter\"}",
        "{\"t\":\"alloc\",\"term\":1,\"type\":\"Counter\",\"shard\":-1}",
        "{\"t\":\"alloc\", \"term\":1,\"type\":\"Counter\",\"shard\":1}",
        "{\"t\":\"alloc\",\"term\":1,\"type\":\"Counter\",\"shard\":1}x",
        "{\"t\":\"view\",\"term\":1,\"type\":\"Counter\",\"shards\":16,"
        "\"fp\":\"x\",\"e\":[[3,\"0000000000001111\",1],"
        "[3,\"0000000000002222\",2]]}",
        "{\"t\":\"view_done\",\"term\":1,\"extra\":1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(ms_coord_on_message(c, N1, bad[i], strlen(bad[i]), 0) ==
              MS_EBADJSON);
    /* well-formed but region-bound */
    const char *plan = "{\"t\":\"plan\",\"term\":1,\"type\":\"Counter\","
                       "\"shards\":16,\"e\":[[3,\"0000000000001111\",9]]}";
    CHECK(ms_coord_on_message(c, N1, plan, strlen(plan), 0) == MS_EINVAL);
    /* a decoded message with a bad shard index from a caller */
    struct ms_plan_entry e = {99, N1, 9};
    struct ms_plan_msg *m = calloc(1, sizeof *m);
    m->kind = MS_PLAN_MSG_VIEW;
    m->term = 1;
    strcpy(m->type, "Counter");
    m->shard_count = 16;
    m->entries = &e;
    m->nentries = 1;
    CHECK(ms_coord_on_msg(c, N1, m, 0) == MS_EINVAL);
    free(m);
    CHECK(pump(c, N1, NULL, NULL) == 0);
    CHECK(ms_coord_generation(c) == gen && ms_coord_ready(c));
    for (uint32_t s = 0; s < 16; s++)
        CHECK(ms_coord_owner(c, 0, s, NULL) == 0);

    /* bad configurations */
    struct ms_coord_config cfg = {0};
    struct ms_coord *x;
    cfg.allocate = allocate;
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL); /* no self uid */
    cfg.self_uid = N1;
    struct ms_coord_type two[2] = {COUNTER, COUNTER};
    cfg.types = two;
    cfg.ntypes = 2;
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL); /* duplicate */
    two[1].name = "Bad Name";
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL);
    two[1].name = "Other";
    two[1].shard_count = 0;
    CHECK(ms_coord_new(&x, &cfg) == MS_EINVAL);
    two[1].shard_count = 4;
    CHECK(ms_coord_new(&x, &cfg) == 0);
    CHECK(ms_coord_become(x, 0, 0) == MS_EINVAL);
    CHECK(ms_coord_become(x, MS_PLAN_MAX_TERM + 1, 0) == MS_EINVAL);
    ms_coord_free(x);
    ms_coord_free(c);
}

/* The largest types go out in several messages and rebuild everywhere. */
static void test_big_plan(void)
{
    sim_reset();
    add_region(N1);
    add_region(N2);
    static const struct ms_coord_type big = {"Big", MS_PLAN_MAX_SHARDS,
                                             "Big|65536"};
    add_type(N1, "Big", MS_PLAN_MAX_SHARDS, big.fingerprint);
    add_type(N2, "Big", MS_PLAN_MAX_SHARDS, big.fingerprint);
    /* N2 remembers an old assignment from term 3 */
    CHECK(ms_plan_apply(region(N2)->plan[0], 40000, N2, (3ull << 32) + 8));
    struct ms_coord *c = new_coord(N1, &big, 1);
    ms_coord_member_up(c, N1, 0);
    ms_coord_member_up(c, N2, 0);
    region(N1)->fence.term = 3;
    CHECK(ms_coord_become(c, 4, 0) == 0);
    int ready = 0;
    pump(c, N1, &ready, NULL);
    CHECK(ready == 1);
    CHECK(ms_coord_owner(c, 0, 40000, NULL) == N2);
    CHECK(regions_agree(c, "Big"));
    uint64_t g;
    CHECK(ms_plan_owner(region(N1)->plan[0], 65535, &g) == 0 &&
          g == (4ull << 32) + 1);
    ms_coord_free(c);
}

int main(void)
{
    test_registration();
    test_not_ready();
    test_connected_asks_again();
    test_allocation();
    test_removed_member();
    test_takeover();
    test_ineligible_owner();
    test_rivals();
    test_malformed();
    test_big_plan();
    sim_reset();
    free(S.log);
    CHECK_DONE();
}
