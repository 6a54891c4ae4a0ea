/* The dispatcher's compact entity record (runtime/core/dispatch_impl.h):
 * the mailbox ring, handle links that outlive the entities they name,
 * the 32-bit listed time across the 2^32 ms wrap, the recomputed hash
 * with a custom partitioner, the 16-bit type and shard fields, the
 * timers kept beside the record (by handle), the ring of ready
 * entities and the message being handled kept in the mailbox. */
#include <string.h>

#include "../../runtime/core/dispatch.h"
#include "check.h"

static int tell(struct ms_dispatch *d, int type, const char *id,
                const char *json)
{
    struct ms_dest dst;
    int rc = ms_dispatch_resolve(d, type, id, strlen(id), &dst);
    return rc < 0 ? rc : ms_dispatch_tell(d, &dst, json, strlen(json));
}

static struct ms_dispatch *make(uint32_t shards, uint64_t idle_ms)
{
    struct ms_dispatch_type t = {"T", shards, idle_ms, 0, 1000000, 0};
    return ms_dispatch_new(&t, 1, 1024);
}

/* ctx:stop() while messages wait in the mailbox: the stop goes first,
 * then the waiting messages, in order, to a new activation. */
static void a_stop_goes_before_the_waiting_messages(void)
{
    for (int waiting = 0; waiting <= 3; waiting++) {
        struct ms_dispatch *d = make(1, 0);
        struct ms_delivery dl;
        CHECK(tell(d, 0, "a", "{\"n\":0}") == 0);
        CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init == 1);
        uint32_t ha = dl.h, g1 = dl.gen;
        CHECK(ms_dispatch_live(d, ha, g1) == 1);
        CHECK(ms_dispatch_live(d, ha, g1 + 1) == 0);
        char js[16];
        for (int i = 1; i <= waiting; i++) {
            snprintf(js, sizeof js, "{\"n\":%d}", i);
            CHECK(tell(d, 0, "a", js) == 0);
        }
        /* a is busy: they move from the shard FIFO to its mailbox */
        CHECK(ms_dispatch_next(d, &dl) == 0);
        ms_dispatch_stop_self(d, ha);
        ms_dispatch_done(d, ha, 0);
        CHECK(ms_dispatch_next(d, &dl) == 1);
        CHECK(dl.h == ha && dl.kind == MS_KIND_STOP && dl.gen == g1);
        CHECK(ms_dispatch_live(d, ha, g1) == 1); /* stopped() runs */
        ms_dispatch_done(d, ha, 0);
        CHECK(ms_dispatch_live(d, ha, g1) == 0); /* passivated */
        /* no timer on a passivated record (mail may keep the record):
         * it would outlive the activation */
        CHECK(ms_dispatch_after(d, ha, 100, "{}", 2, 0) == MS_EINVAL);
        for (int i = 1; i <= waiting; i++) {
            CHECK(ms_dispatch_next(d, &dl) == 1);
            snprintf(js, sizeof js, "{\"n\":%d}", i);
            CHECK(dl.kind == MS_KIND_TELL && strcmp(dl.payload, js) == 0);
            CHECK(dl.init == (i == 1)); /* the stop passivated it */
            /* the same record (mail waited), a new activation: a ctx of
             * the old one (h, g1) must not act for it */
            CHECK(dl.h == ha && dl.gen != g1);
            CHECK(ms_dispatch_live(d, ha, dl.gen) == 1);
            CHECK(ms_dispatch_live(d, ha, g1) == 0);
            ms_dispatch_done(d, dl.h, 0);
        }
        CHECK(ms_dispatch_next(d, &dl) == 0);
        struct ms_stats st;
        ms_dispatch_stats(d, &st);
        CHECK(st.passivations == 1);
        CHECK(st.active_entities == (waiting ? 1u : 0u));
        CHECK(ms_dispatch_pending(d) == 0);
        ms_dispatch_free(d);
    }
}

/* Runs every delivery; returns how many STOPs were among them. */
static int run_all(struct ms_dispatch *d, uint64_t now_ms)
{
    struct ms_delivery dl;
    int stops = 0;
    while (ms_dispatch_next(d, &dl) == 1) {
        stops += dl.kind == MS_KIND_STOP;
        ms_dispatch_done(d, dl.h, now_ms);
    }
    return stops;
}

/* The node's clock is uv_now(): milliseconds since boot, past 2^32 after
 * 49.7 days up. An idle entity is passivated between idle_timeout and
 * twice that after its last message, wrap or not. */
static void idle_passivation_across_the_32_bit_wrap(void)
{
    const uint64_t wrap = 1ULL << 32;
    uint64_t starts[] = {wrap - 500, wrap - 1, wrap, 3 * wrap - 999};
    for (size_t k = 0; k < sizeof starts / sizeof *starts; k++) {
        uint64_t t0 = starts[k];
        struct ms_dispatch *d = make(4, 1000);
        ms_dispatch_expire(d, t0);
        CHECK(tell(d, 0, "a", "{}") == 0);
        CHECK(run_all(d, t0) == 0);
        int64_t in = ms_dispatch_next_deadline(d, t0);
        CHECK(in > 0 && in <= 1000);
        for (uint64_t now = t0; now < t0 + 1000; now += 100) {
            ms_dispatch_expire(d, now);
            CHECK(run_all(d, now) == 0);
            in = ms_dispatch_next_deadline(d, now);
            CHECK(in >= 0 && in <= 1000); /* never a wrapped wait */
        }
        int stopped = 0;
        uint64_t now;
        for (now = t0 + 1000; now <= t0 + 2000 && !stopped; now += 50) {
            ms_dispatch_expire(d, now);
            stopped = run_all(d, now);
        }
        CHECK(stopped == 1);
        struct ms_stats st;
        ms_dispatch_stats(d, &st);
        CHECK(st.active_entities == 0 && st.passivations == 1);
        ms_dispatch_free(d);
    }
}

/* An idle_timeout longer than 2^31 ms (24.8 days; the config takes up to
 * 1e9 s): the entity is visited early and listed again, never passivated
 * before its timeout, and passivated within the bound after it. */
static void long_idle_timeouts_are_kept(void)
{
    const uint64_t day = 86400000ULL;
    const uint64_t idle = 30 * day;
    const uint64_t t0 = (1ULL << 32) - 3 * day; /* crosses the wrap too */
    struct ms_dispatch *d = make(2, idle);
    ms_dispatch_expire(d, t0);
    CHECK(tell(d, 0, "a", "{}") == 0);
    CHECK(tell(d, 0, "b", "{}") == 0);
    CHECK(run_all(d, t0) == 0);
    uint64_t now = t0;
    int stops = 0, sweeps = 0;
    /* the node's timer: sleep until the next deadline, then sweep */
    while (now < t0 + idle + (1ULL << 31) + day && stops < 2 &&
           ++sweeps < 100) {
        int64_t in = ms_dispatch_next_deadline(d, now);
        CHECK(in >= 0 && (uint64_t)in < (1ULL << 31));
        if (in < 0)
            break;
        now += (uint64_t)in > 0 ? (uint64_t)in : 1;
        ms_dispatch_expire(d, now);
        int s = run_all(d, now);
        CHECK(s == 0 || now >= t0 + idle);
        stops += s;
    }
    CHECK(stops == 2 && sweeps < 10); /* a few visits, no busy loop */
    CHECK(now >= t0 + idle && now <= t0 + idle + (1ULL << 31));
    ms_dispatch_free(d);
}

/* A shard's entity links are handles: entities of one shard come and go
 * (their handles reused by entities of another shard), and a shard stop
 * still walks exactly the entities that are in it. */
static void shard_links_survive_reused_handles(void)
{
    struct ms_dispatch *d = make(4, 0);
    char id[16];
    for (int i = 0; i < 200; i++) {
        snprintf(id, sizeof id, "e%d", i);
        CHECK(tell(d, 0, id, "{}") == 0);
    }
    CHECK(run_all(d, 0) == 0);
    /* stop every third entity, then make new ones in their handles */
    for (int i = 0; i < 200; i += 3) {
        snprintf(id, sizeof id, "e%d", i);
        struct ms_dest dst;
        CHECK(ms_dispatch_resolve(d, 0, id, strlen(id), &dst) == 0);
        CHECK(ms_dispatch_stop(d, &dst) == 0);
    }
    CHECK(run_all(d, 0) == 67);
    for (int i = 0; i < 67; i++) {
        snprintf(id, sizeof id, "n%d", i);
        CHECK(tell(d, 0, id, "{}") == 0);
    }
    CHECK(run_all(d, 0) == 0);
    /* count, per shard, the active entities by id */
    int per[4] = {0};
    for (int i = 0; i < 200; i++) {
        if (i % 3 == 0)
            continue;
        snprintf(id, sizeof id, "e%d", i);
        per[ms_shard_of(id, strlen(id), 4)]++;
    }
    for (int i = 0; i < 67; i++) {
        snprintf(id, sizeof id, "n%d", i);
        per[ms_shard_of(id, strlen(id), 4)]++;
    }
    uint64_t passivated = 67;
    for (uint32_t s = 0; s < 4; s++) {
        CHECK(ms_dispatch_shard_stop(d, 0, s) == 0);
        int stops = run_all(d, 0);
        CHECK(stops == per[s]);
        int type;
        uint32_t shard;
        CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1);
        CHECK(type == 0 && shard == s);
        passivated += (uint64_t)stops;
        struct ms_stats st;
        ms_dispatch_stats(d, &st);
        CHECK(st.passivations == passivated);
    }
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.active_entities == 0);
    ms_dispatch_free(d);
}

/* The record keeps no hash: the table is grown and entities destroyed
 * with ms_fnv1a64(id) computed again. With a custom partitioner the shard
 * is not the hash's, and every entity is still found once. */
static int last_digit(void *data, int type, const char *id, size_t idlen,
                      uint32_t shard_count, uint32_t *shard)
{
    (void)data;
    (void)type;
    *shard = (uint32_t)(id[idlen - 1] - '0') % shard_count;
    return 0;
}

static void a_custom_partitioner_keeps_one_activation_per_id(void)
{
    struct ms_dispatch_type t = {"P", 10, 0, 0, 1000000, 1};
    struct ms_dispatch *d = ms_dispatch_new(&t, 1, 1024);
    ms_dispatch_set_partitioner(d, last_digit, NULL);
    char id[16];
    enum { N = 5000 }; /* the entity table grows several times */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            snprintf(id, sizeof id, "p%d", i);
            CHECK(tell(d, 0, id, "{}") == 0);
        }
        CHECK(run_all(d, 0) == 0);
    }
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.activations == N && st.active_entities == N);
    for (int i = 0; i < N; i += 2) {
        snprintf(id, sizeof id, "p%d", i);
        struct ms_dest dst;
        CHECK(ms_dispatch_resolve(d, 0, id, strlen(id), &dst) == 0);
        CHECK(dst.shard == (uint32_t)(i % 10));
        CHECK(ms_dispatch_stop(d, &dst) == 0);
    }
    CHECK(run_all(d, 0) == N / 2);
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof id, "p%d", i);
        CHECK(tell(d, 0, id, "{}") == 0);
    }
    struct ms_delivery dl;
    int inits = 0;
    while (ms_dispatch_next(d, &dl) == 1) {
        int n = atoi(dl.id + 1);
        CHECK(dl.shard == (uint32_t)(n % 10));
        CHECK(dl.init == (n % 2 == 0)); /* only the stopped ones again */
        inits += dl.init;
        ms_dispatch_done(d, dl.h, 0);
    }
    CHECK(inits == N / 2);
    ms_dispatch_stats(d, &st);
    CHECK(st.active_entities == N);
    ms_dispatch_free(d);
}

/* Types and shards are 16 bits in the record: the dispatcher refuses
 * what would not fit and takes the largest that does. */
static void sixteen_bit_type_and_shard(void)
{
    struct ms_dispatch_type t = {"T", 65537, 0, 0, 100, 0};
    CHECK(ms_dispatch_new(&t, 1, 1024) == NULL);
    t.shard_count = 0;
    CHECK(ms_dispatch_new(&t, 1, 1024) == NULL);
    t.shard_count = 65536;
    struct ms_dispatch *d = ms_dispatch_new(&t, 1, 1024);
    CHECK(d != NULL);
    /* find ids in the last shards, and one of MS_MAX_ID bytes */
    char id[MS_MAX_ID + 1];
    int found = 0;
    for (int i = 0; found < 3 && i < 20000000; i++) {
        snprintf(id, sizeof id, "s%d", i);
        if (ms_shard_of(id, strlen(id), 65536) >= 65533) {
            CHECK(tell(d, 0, id, "{}") == 0);
            found++;
        }
    }
    CHECK(found == 3);
    memset(id, 'z', MS_MAX_ID);
    id[MS_MAX_ID] = 0;
    CHECK(tell(d, 0, id, "{}") == 0);
    struct ms_delivery dl;
    int seen = 0;
    while (ms_dispatch_next(d, &dl) == 1) {
        CHECK(dl.shard == ms_shard_of(dl.id, dl.idlen, 65536));
        int type;
        const char *eid;
        size_t idlen;
        uint32_t shard;
        CHECK(ms_dispatch_entity(d, dl.h, &type, &eid, &idlen, &shard));
        CHECK(type == 0 && shard == dl.shard && idlen == dl.idlen);
        CHECK(memcmp(eid, dl.id, idlen) == 0 && eid[idlen] == 0);
        seen += idlen == MS_MAX_ID;
        ms_dispatch_done(d, dl.h, 0);
    }
    CHECK(seen == 1);
    ms_dispatch_free(d);

    /* 65535 types fit, 65536 do not */
    enum { MAXT = 65535 };
    struct ms_dispatch_type *ts = calloc(MAXT + 1, sizeof *ts);
    for (int i = 0; i <= MAXT; i++)
        ts[i] = (struct ms_dispatch_type){"T", 1, 0, 0, 10, 0};
    CHECK(ms_dispatch_new(ts, MAXT + 1, 1024) == NULL);
    d = ms_dispatch_new(ts, MAXT, 1024);
    CHECK(d != NULL);
    struct ms_dest dst;
    CHECK(ms_dispatch_resolve(d, MAXT - 1, "x", 1, &dst) == 0);
    CHECK(ms_dispatch_tell(d, &dst, "{}", 2) == 0);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.type == MAXT - 1);
    int type;
    const char *eid;
    size_t idlen;
    uint32_t shard;
    CHECK(ms_dispatch_entity(d, dl.h, &type, &eid, &idlen, &shard));
    CHECK(type == MAXT - 1);
    ms_dispatch_done(d, dl.h, 0);
    ms_dispatch_free(d);
    free(ts);
}

/* A seeded random walk over tells, asks left busy, ctx:stop, idle
 * sweeps near the clock's wrap and shard stops, checked against a model:
 * each entity gets its tells in send order, init exactly when it was not
 * active, and nothing is left pending. Run under ASan, it also checks the
 * handle links and the mailbox ring for use after free. */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

enum { NE = 40 };
struct model {
    int sent, seen;  /* tells sent, and the last one handled (by number) */
    int active;
    uint32_t busy_h; /* handle, while its handler is left running */
};

static void random_walk_matches_the_model(void)
{
    for (int seed = 1; seed <= 40; seed++) {
        rng = 0x9e3779b97f4a7c15ULL * (uint64_t)seed;
        struct ms_dispatch *d = make(3, 50);
        struct model m[NE];
        memset(m, 0, sizeof m);
        uint64_t now = (1ULL << 32) - 3000 + rnd(6000);
        ms_dispatch_expire(d, now);
        uint32_t busy[NE];
        int nbusy = 0;
        for (int step = 0; step < 4000; step++) {
            uint32_t op = rnd(100);
            char id[8], js[32];
            int e = (int)rnd(NE);
            snprintf(id, sizeof id, "k%d", e);
            if (op < 50) {
                snprintf(js, sizeof js, "{\"n\":%d}", ++m[e].sent);
                CHECK(tell(d, 0, id, js) == 0);
            } else if (op < 80 || (op < 90 && nbusy == 0)) {
                struct ms_delivery dl;
                if (ms_dispatch_next(d, &dl) != 1)
                    continue;
                int k = atoi(dl.id + 1);
                CHECK(dl.init == (dl.kind != MS_KIND_STOP && !m[k].active));
                if (dl.kind == MS_KIND_STOP) {
                    CHECK(m[k].active);
                    m[k].active = 0;
                } else {
                    m[k].active = 1;
                    int n = atoi(dl.payload + 5);
                    CHECK(n == m[k].seen + 1);
                    m[k].seen = n;
                }
                uint32_t r = rnd(10);
                if (dl.kind != MS_KIND_STOP && r < 3) {
                    busy[nbusy++] = dl.h; /* left running for a while */
                    m[k].busy_h = dl.h;
                    continue;
                }
                if (dl.kind != MS_KIND_STOP && r < 5)
                    ms_dispatch_stop_self(d, dl.h);
                ms_dispatch_done(d, dl.h, now);
            } else if (op < 90) {
                int i = (int)rnd((uint32_t)nbusy);
                uint32_t h = busy[i];
                busy[i] = busy[--nbusy];
                if (rnd(2))
                    ms_dispatch_stop_self(d, h);
                ms_dispatch_done(d, h, now);
            } else if (op < 97) {
                now += rnd(40);
                ms_dispatch_expire(d, now);
            } else {
                struct ms_dest dst;
                CHECK(ms_dispatch_resolve(d, 0, id, strlen(id), &dst) == 0);
                CHECK(ms_dispatch_stop(d, &dst) == 0);
            }
        }
        /* finish: end the running handlers, then drain */
        while (nbusy > 0)
            ms_dispatch_done(d, busy[--nbusy], now);
        struct ms_delivery dl;
        while (ms_dispatch_next(d, &dl) == 1) {
            int k = atoi(dl.id + 1);
            CHECK(dl.init == (dl.kind != MS_KIND_STOP && !m[k].active));
            if (dl.kind == MS_KIND_STOP) {
                m[k].active = 0;
            } else {
                m[k].active = 1;
                int n = atoi(dl.payload + 5);
                CHECK(n == m[k].seen + 1);
                m[k].seen = n;
            }
            ms_dispatch_done(d, dl.h, now);
        }
        for (int k = 0; k < NE; k++)
            CHECK(m[k].seen == m[k].sent);
        CHECK(ms_dispatch_pending(d) == 0);
        /* the end: a shutdown (odd seeds) or the idle sweep passivates
         * every one of them */
        if (seed % 2) {
            ms_dispatch_shutdown(d);
            CHECK(tell(d, 0, "k0", "{}") == MS_ECANCELED);
        }
        for (int i = 0; i < 10; i++) {
            now += 30;
            ms_dispatch_expire(d, now);
            while (ms_dispatch_next(d, &dl) == 1) {
                CHECK(dl.kind == MS_KIND_STOP);
                ms_dispatch_done(d, dl.h, now);
            }
        }
        struct ms_stats st;
        ms_dispatch_stats(d, &st);
        CHECK(st.active_entities == 0);
        CHECK(st.activations == st.passivations);
        ms_dispatch_free(d);
    }
}

/* Timers live beside the record, in a map keyed by handle. Thousands of
 * entities (the slots, the entity table and that map all grow while
 * timers are pending), each with a few timers: a cancel ends exactly the
 * one it names, a passivation cancels exactly its entity's timers, the
 * idle sweep keeps the entities that have some, and the others fire to
 * the right entity with the right payload. */
enum { TN = 3000 };

static int timer_entity(const char *payload, int *j)
{
    int e = -1;
    if (sscanf(payload, "{\"e\":%d,\"j\":%d}", &e, j) != 2)
        return -1;
    return e;
}

static void timers_survive_growth_and_leave_with_their_entity(void)
{
    struct ms_dispatch *d = make(8, 100);
    uint64_t now = 1000;
    ms_dispatch_expire(d, now);
    static uint32_t hs[TN];
    static int64_t tid[TN][3];
    static int left[TN][3];
    char id[16], js[48];
    /* activate them one by one, giving each (i % 3) + 1 timers at once
     * (entities of the first half get theirs before the second half
     * exists: the table and the slots grow under them) */
    for (int i = 0; i < TN; i++) {
        snprintf(id, sizeof id, "t%d", i);
        CHECK(tell(d, 0, id, "{}") == 0);
        struct ms_delivery dl;
        CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init == 1);
        hs[i] = dl.h;
        for (int j = 0; j < 3; j++) {
            tid[i][j] = 0;
            left[i][j] = 0;
            if (j > i % 3)
                continue;
            snprintf(js, sizeof js, "{\"e\":%d,\"j\":%d}", i, j);
            tid[i][j] = ms_dispatch_after(d, dl.h, 5000, js, strlen(js), now);
            CHECK(tid[i][j] > 0);
            left[i][j] = 1;
        }
        ms_dispatch_done(d, dl.h, now);
    }
    /* cancel the middle timer of every entity with three */
    for (int i = 2; i < TN; i += 3) {
        CHECK(ms_dispatch_cancel(d, hs[i], tid[i][1]) == 1);
        CHECK(ms_dispatch_cancel(d, hs[i], tid[i][1]) == 0);
        CHECK(ms_dispatch_cancel(d, hs[(i + 1) % TN], tid[i][0]) == 0);
        left[i][1] = 0;
    }
    /* and the only timer of every tenth entity with one: it has none left */
    for (int i = 0; i < TN; i += 30) {
        CHECK(ms_dispatch_cancel(d, hs[i], tid[i][0]) == 1);
        left[i][0] = 0;
    }
    /* an explicit stop of every seventh entity cancels its timers */
    static int stopped[TN];
    for (int i = 0; i < TN; i++) {
        stopped[i] = i % 7 == 0;
        if (!stopped[i])
            continue;
        snprintf(id, sizeof id, "t%d", i);
        struct ms_dest dst;
        CHECK(ms_dispatch_resolve(d, 0, id, strlen(id), &dst) == 0);
        CHECK(ms_dispatch_stop(d, &dst) == 0);
    }
    int expect_stops = 0;
    for (int i = 0; i < TN; i++)
        expect_stops += stopped[i];
    CHECK(run_all(d, now) == expect_stops);
    /* past the idle timeout, before the timers: only the entities with
     * no pending timer (every thirtieth, not stopped) are passivated */
    int idle_stops = 0;
    for (int i = 0; i < TN; i += 30)
        idle_stops += !stopped[i];
    int stops = 0;
    for (int k = 1; k <= 20; k++) {
        now = 1000 + 100 * (uint64_t)k;
        ms_dispatch_expire(d, now);
        stops += run_all(d, now);
    }
    CHECK(stops == idle_stops);
    /* the timers: each remaining one fires once, to its entity */
    int expect_fired = 0;
    for (int i = 0; i < TN; i++)
        for (int j = 0; j < 3; j++)
            expect_fired += left[i][j] && !stopped[i];
    now = 1000 + 5000;
    ms_dispatch_expire(d, now);
    struct ms_delivery dl;
    int fired = 0, wrong = 0;
    while (ms_dispatch_next(d, &dl) == 1) {
        if (dl.kind == MS_KIND_TELL) {
            int j = -1, e = timer_entity(dl.payload, &j);
            char want[16];
            if (e >= 0 && e < TN && j >= 0 && j < 3) {
                snprintf(want, sizeof want, "t%d", e);
                if (left[e][j] && !stopped[e] &&
                    strcmp(dl.id, want) == 0 && dl.h == hs[e]) {
                    left[e][j] = 0;
                    fired++;
                } else {
                    wrong++;
                }
            } else {
                wrong++;
            }
        }
        ms_dispatch_done(d, dl.h, now);
    }
    CHECK(wrong == 0);
    CHECK(fired == expect_fired && expect_fired > 0);
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.timers_fired == (uint64_t)fired);
    /* with no timer left, the idle sweep passivates the rest */
    for (int k = 1; k <= 3; k++) {
        now += 100;
        ms_dispatch_expire(d, now);
        run_all(d, now);
    }
    ms_dispatch_stats(d, &st);
    CHECK(st.active_entities == 0);
    ms_dispatch_free(d);
}

/* An entity holds at most MS_MAX_TIMERS; a cancel makes room; the timers
 * pending at ms_dispatch_free are freed with it (ASan: no leak). */
static void timer_bound_and_free_with_pending(void)
{
    struct ms_dispatch *d = make(2, 0);
    CHECK(tell(d, 0, "a", "{}") == 0);
    CHECK(tell(d, 0, "b", "{}") == 0);
    struct ms_delivery da, db;
    CHECK(ms_dispatch_next(d, &da) == 1 && ms_dispatch_next(d, &db) == 1);
    int64_t first = 0;
    for (int i = 0; i < MS_MAX_TIMERS; i++) {
        int64_t t = ms_dispatch_after(d, da.h, 1000, "{}", 2, 0);
        CHECK(t > 0);
        if (i == 0)
            first = t;
    }
    CHECK(ms_dispatch_after(d, da.h, 1000, "{}", 2, 0) == MS_EOVERFLOW);
    CHECK(ms_dispatch_after(d, db.h, 1000, "{}", 2, 0) > 0);
    CHECK(ms_dispatch_cancel(d, db.h, first) == 0); /* not b's */
    CHECK(ms_dispatch_cancel(d, da.h, first) == 1);
    CHECK(ms_dispatch_after(d, da.h, 1000, "{}", 2, 0) > 0);
    ms_dispatch_done(d, da.h, 0);
    ms_dispatch_done(d, db.h, 0);
    ms_dispatch_free(d);
}

/* The ready list is a ring of handles: thousands of entities, each busy
 * with two messages waiting, finish in a shuffled order; their waiting
 * messages come in that order, twice round (the ring wraps). */
static void ready_ring_keeps_the_order(void)
{
    enum { RN = 3000 };
    struct ms_dispatch *d = make(4, 0);
    static uint32_t hs[RN], order[RN];
    char id[16];
    for (int i = 0; i < RN; i++) {
        snprintf(id, sizeof id, "r%d", i);
        CHECK(tell(d, 0, id, "{\"n\":0}") == 0);
        struct ms_delivery dl;
        CHECK(ms_dispatch_next(d, &dl) == 1);
        hs[i] = dl.h; /* left busy */
    }
    for (int i = 0; i < RN; i++) {
        snprintf(id, sizeof id, "r%d", i);
        CHECK(tell(d, 0, id, "{\"n\":1}") == 0);
        CHECK(tell(d, 0, id, "{\"n\":2}") == 0);
    }
    struct ms_delivery dl;
    CHECK(ms_dispatch_next(d, &dl) == 0); /* all went to mailboxes */
    for (int i = 0; i < RN; i++)
        order[i] = (uint32_t)i;
    rng = 12345;
    for (int i = RN - 1; i > 0; i--) {
        int j = (int)rnd((uint32_t)i + 1);
        uint32_t x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    for (int i = 0; i < RN; i++)
        ms_dispatch_done(d, hs[order[i]], 0);
    int bad = 0;
    for (int round = 1; round <= 2; round++) {
        for (int i = 0; i < RN; i++) {
            if (ms_dispatch_next(d, &dl) != 1) {
                bad++;
                break;
            }
            char want[16];
            snprintf(want, sizeof want, "r%u", order[i]);
            char wantp[16];
            snprintf(wantp, sizeof wantp, "{\"n\":%d}", round);
            bad += strcmp(dl.id, want) != 0 || strcmp(dl.payload, wantp) != 0;
            ms_dispatch_done(d, dl.h, 0);
        }
    }
    CHECK(bad == 0);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    CHECK(ms_dispatch_pending(d) == 0);
    ms_dispatch_free(d);
}

/* The message being handled stays first in the entity's mailbox (the
 * record has no field for it): a reply, a reply_error, a failure and a
 * done without reply each end the ask being handled, never one waiting
 * behind it. */
struct answer {
    int calls, err;
    char payload[64];
};

static void on_answer(void *data, int err, const char *payload, size_t len)
{
    struct answer *a = data;
    a->calls++;
    a->err = err;
    snprintf(a->payload, sizeof a->payload, "%.*s", (int)len,
             payload ? payload : "");
}

static void the_current_message_is_the_mailbox_head(void)
{
    struct ms_dispatch *d = make(1, 0);
    struct answer an[4];
    memset(an, 0, sizeof an);
    struct ms_dest dst;
    CHECK(ms_dispatch_resolve(d, 0, "a", 1, &dst) == 0);
    for (int i = 0; i < 4; i++) {
        struct ms_waiter w = {on_answer, &an[i], 0};
        char js[16];
        snprintf(js, sizeof js, "{\"q\":%d}", i);
        CHECK(ms_dispatch_ask(d, &dst, js, strlen(js), 100000, 0, &w) > 0);
        if (i == 0)
            CHECK(tell(d, 0, "a", "{\"t\":1}") == 0);
    }
    struct ms_delivery dl;
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_ASK);
    CHECK(strcmp(dl.payload, "{\"q\":0}") == 0);
    CHECK(ms_dispatch_next(d, &dl) == 0); /* the rest wait in the mailbox */
    uint32_t h = dl.h;
    CHECK(ms_dispatch_reply(d, h, "{\"r\":0}", 7, 0) == 0);
    CHECK(ms_dispatch_reply(d, h, "{\"r\":9}", 7, 0) == MS_EINVAL);
    CHECK(an[0].calls == 1 && an[0].err == 0 &&
          strcmp(an[0].payload, "{\"r\":0}") == 0);
    CHECK(an[1].calls + an[2].calls + an[3].calls == 0);
    ms_dispatch_done(d, h, 0);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_TELL);
    CHECK(strcmp(dl.payload, "{\"t\":1}") == 0);
    CHECK(ms_dispatch_reply(d, h, "{}", 2, 0) == 1); /* not an ask */
    ms_dispatch_done(d, h, 0);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_ASK);
    CHECK(strcmp(dl.payload, "{\"q\":1}") == 0);
    CHECK(ms_dispatch_reply_error(d, h, MS_EHANDLER, "no") == 0);
    CHECK(an[1].calls == 1 && an[1].err == MS_EHANDLER);
    CHECK(an[2].calls + an[3].calls == 0);
    ms_dispatch_done(d, h, 0);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_ASK);
    CHECK(strcmp(dl.payload, "{\"q\":2}") == 0);
    ms_dispatch_fail(d, h, "boom", 0);
    CHECK(an[2].calls == 1 && an[2].err == MS_EHANDLER);
    CHECK(an[3].calls == 0);
    ms_dispatch_done(d, h, 0);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_ASK);
    CHECK(strcmp(dl.payload, "{\"q\":3}") == 0);
    ms_dispatch_done(d, h, 0); /* no reply */
    CHECK(an[3].calls == 1 && an[3].err == MS_ENOREPLY);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(an[i].calls == 1);
    CHECK(ms_dispatch_pending(d) == 0);
    ms_dispatch_free(d);
}

/* Timers set by an init that then fails are cancelled with it: the
 * record is destroyed (no mail waits), its handle goes to the next new
 * entity, and none of the old timers fires to that one or can be
 * cancelled by it; with mail waiting, the next activation of the same
 * record gets none of them either. */
static void init_failure_takes_its_timers(void)
{
    for (int waiting = 0; waiting <= 1; waiting++) {
        struct ms_dispatch *d = make(1, 0);
        struct ms_delivery dl;
        CHECK(tell(d, 0, "a", "{\"n\":0}") == 0);
        CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init == 1);
        uint32_t ha = dl.h;
        int64_t t1 = ms_dispatch_after(d, ha, 100, "{\"old\":1}", 9, 0);
        int64_t t2 = ms_dispatch_after(d, ha, 150, "{\"old\":2}", 9, 0);
        CHECK(t1 > 0 && t2 > 0);
        if (waiting)
            CHECK(tell(d, 0, "a", "{\"n\":1}") == 0);
        CHECK(ms_dispatch_next(d, &dl) == 0);
        ms_dispatch_fail(d, ha, "init raised", 1);
        ms_dispatch_done(d, ha, 0);
        uint32_t hb;
        if (waiting) {
            /* the same record, a new activation */
            CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init == 1);
            CHECK(dl.h == ha && strcmp(dl.payload, "{\"n\":1}") == 0);
            hb = dl.h;
        } else {
            int type;
            const char *id;
            size_t idlen;
            uint32_t shard;
            CHECK(ms_dispatch_entity(d, ha, &type, &id, &idlen, &shard) == 0);
            CHECK(tell(d, 0, "b", "{}") == 0);
            CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init == 1);
            CHECK(dl.h == ha && strcmp(dl.id, "b") == 0); /* reused */
            hb = dl.h;
        }
        CHECK(ms_dispatch_cancel(d, hb, t1) == 0);
        int64_t t3 = ms_dispatch_after(d, hb, 300, "{\"new\":3}", 9, 0);
        CHECK(t3 > 0);
        ms_dispatch_done(d, hb, 0);
        for (uint64_t now = 50; now <= 250; now += 50) {
            ms_dispatch_expire(d, now);
            CHECK(ms_dispatch_next(d, &dl) == 0); /* none of the old */
        }
        ms_dispatch_expire(d, 300);
        CHECK(ms_dispatch_next(d, &dl) == 1 && dl.h == hb &&
              strcmp(dl.payload, "{\"new\":3}") == 0);
        ms_dispatch_done(d, dl.h, 300);
        CHECK(ms_dispatch_next(d, &dl) == 0);
        struct ms_stats st;
        ms_dispatch_stats(d, &st);
        CHECK(st.timers_fired == 1);
        ms_dispatch_free(d);
    }
}

int main(void)
{
    a_stop_goes_before_the_waiting_messages();
    idle_passivation_across_the_32_bit_wrap();
    long_idle_timeouts_are_kept();
    shard_links_survive_reused_handles();
    a_custom_partitioner_keeps_one_activation_per_id();
    sixteen_bit_type_and_shard();
    random_walk_matches_the_model();
    timers_survive_growth_and_leave_with_their_entity();
    timer_bound_and_free_with_pending();
    ready_ring_keeps_the_order();
    the_current_message_is_the_mailbox_head();
    init_failure_takes_its_timers();
    CHECK_DONE();
}
