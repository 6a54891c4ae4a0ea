/* The per-shard lease machine and its barrier (runtime/core/lease.h):
 * acquire then open in order, renewals, failures and expiry, stale and
 * regressing answers, unreachable members, handoff, the barrier's order,
 * bound, backoff and window. Times: the database clock runs at
 * DB + local time in these tests, so offsets are visible. */
#include <string.h>

#include "../../runtime/core/errors.h"
#include "../../runtime/core/lease.h"
#include "check.h"

#define DB 1700000000000LL /* the database clock at local time 0 */
#define MAXA 2048

static struct ms_lease_action acts[MAXA];
static int nacts;

/* Drains the machine's actions into acts[]. */
static int drain(struct ms_lease *l)
{
    nacts = 0;
    struct ms_lease_action a;
    while (ms_lease_next_action(l, &a))
        if (nacts < MAXA)
            acts[nacts++] = a;
    return nacts;
}

/* The index of the first drained action of `kind` (-1). */
static int find(int kind)
{
    for (int i = 0; i < nacts; i++)
        if (acts[i].kind == kind)
            return i;
    return -1;
}

static int count(int kind)
{
    int n = 0;
    for (int i = 0; i < nacts; i++)
        n += acts[i].kind == kind;
    return n;
}

static struct ms_lease *mk(uint64_t duration, uint64_t renew, uint64_t win)
{
    static uint32_t nshards[2] = {8, 0};
    static struct ms_lease_settings set[2];
    set[0].duration_ms = duration;
    set[0].renew_interval_ms = renew;
    set[0].window_ms = win;
    struct ms_lease_config c = {"node-a", 2, nshards, set};
    struct ms_lease *l = NULL;
    CHECK(ms_lease_new(&l, &c) == 0);
    return l;
}

static void answer(struct ms_lease *l, int kind, uint64_t req,
                   uint64_t epoch, int64_t left_ms, uint64_t sent_local,
                   uint64_t now)
{
    /* the database read its clock at the local send time + 1 ms */
    int64_t db_now = DB + (int64_t)sent_local + 1;
    struct ms_lease_answer a = {kind, 0, 3, req, epoch, db_now + left_ms,
                                db_now};
    CHECK(ms_lease_on_answer(l, &a, now) == 0);
}

/* Acquires shard 3 at `now` with epoch `epoch` (10 s lease). */
static void acquire(struct ms_lease *l, uint64_t now, uint64_t epoch)
{
    CHECK(ms_lease_shard_assigned(l, 0, 3, now) == 0);
    drain(l);
    int i = find(MS_LEASE_ACQUIRE);
    CHECK(i >= 0);
    if (i < 0)
        return;
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[i].req, epoch, 10000, now, now + 5);
    drain(l);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_HELD);
}

static int tags[MAXA];

static void test_settings(void)
{
    char err[200];
    struct ms_lease_settings s = {0, 0, 0};
    CHECK(ms_lease_settings_check(&s, err, sizeof err) == 0);
    s.duration_ms = 9000;
    s.renew_interval_ms = 3001; /* above a third */
    CHECK(ms_lease_settings_check(&s, err, sizeof err) == MS_ECONFIG);
    CHECK(strstr(err, "lease_renew_interval") != NULL);
    s.renew_interval_ms = 3000;
    CHECK(ms_lease_settings_check(&s, err, sizeof err) == 0);
    s.duration_ms = 500;
    s.renew_interval_ms = 100;
    CHECK(ms_lease_settings_check(&s, err, sizeof err) == MS_ECONFIG);
    CHECK(strstr(err, "lease_duration") != NULL);
    s.duration_ms = 10000;
    s.renew_interval_ms = 0;  /* default 3000: fits */
    s.window_ms = 5000;       /* below one duration */
    CHECK(ms_lease_settings_check(&s, err, sizeof err) == MS_ECONFIG);
    /* the machine refuses them too */
    uint32_t n = 4;
    struct ms_lease_settings bad = {10000, 5000, 0};
    struct ms_lease_config c = {"node-a", 1, &n, &bad};
    struct ms_lease *l = (struct ms_lease *)&n;
    CHECK(ms_lease_new(&l, &c) == MS_ECONFIG);
    CHECK(l == NULL);
    struct ms_lease_config c2 = {"", 1, &n, &s};
    CHECK(ms_lease_new(&l, &c2) == MS_EINVAL);
}

/* Messages that arrive while the lease is acquired wait, then come out in
 * order before OPEN; the acquire carries owner, duration and no epoch. */
static void test_acquire_open_in_order(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 0) == MS_ENOOWNER);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 1000) == 0);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 1000) == MS_EBUSY);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    CHECK(acts[0].type == 0 && acts[0].shard == 3);
    CHECK(strcmp(acts[0].owner, "node-a") == 0);
    CHECK(acts[0].duration_ms == MS_LEASE_DURATION_MS);
    uint64_t req = acts[0].req;
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_ACQUIRING);
    for (int i = 0; i < 5; i++)
        CHECK(ms_lease_admit(l, 0, 3, &tags[i], 1001 + i) == 0);
    CHECK(ms_lease_waiting(l, 0, 3) == 5);
    CHECK(drain(l) == 0); /* nothing delivered before the lease */
    answer(l, MS_LEASE_ANS_ACQUIRED, req, 7, 10000, 1000, 1020);
    drain(l);
    CHECK(nacts == 6);
    for (int i = 0; i < 5 && i < nacts; i++) {
        CHECK(acts[i].kind == MS_LEASE_DELIVER);
        CHECK(acts[i].msg == &tags[i]);
    }
    CHECK(nacts == 6 && acts[5].kind == MS_LEASE_OPEN_SHARD);
    CHECK(ms_lease_waiting(l, 0, 3) == 0);
    CHECK(ms_lease_epoch(l, 0, 3) == 7);
    CHECK(ms_lease_held(l) == 1);
    CHECK(ms_lease_admit(l, 0, 3, &tags[9], 1030) == MS_LEASE_OPEN);
    CHECK(ms_lease_stats(l)->acquired == 1);
    ms_lease_free(l);
}

/* Renewals go out every renew interval (from the request's send time),
 * with the epoch held, and each answer pushes the expiry on. */
static void test_renewals_on_time(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    acquire(l, 0, 3);
    ms_lease_tick(l, 2999);
    CHECK(drain(l) == 0);
    uint64_t t = 3000;
    for (int round = 0; round < 10; round++) {
        ms_lease_tick(l, t);
        drain(l);
        CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW);
        CHECK(acts[0].epoch == 3);
        CHECK(strcmp(acts[0].owner, "node-a") == 0);
        CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_RENEWING);
        CHECK(ms_lease_admit(l, 0, 3, &tags[0], t) == MS_LEASE_OPEN);
        answer(l, MS_LEASE_ANS_RENEWED, acts[0].req, 3, 10000, t, t + 20);
        CHECK(drain(l) == 0);
        CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_HELD);
        ms_lease_tick(l, t + 2999);
        CHECK(drain(l) == 0);
        t += 3000;
    }
    /* 30 s on: far past the first lease's 10 s, still held */
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_HELD);
    CHECK(ms_lease_stats(l)->renewed == 10);
    CHECK(ms_lease_stats(l)->expired == 0);
    ms_lease_free(l);
}

/* A refused or failed renewal stops the entities at once; new messages
 * wait in the barrier; the lease is acquired again and they go out. */
static void test_renewal_fails(void)
{
    for (int kind = 0; kind < 2; kind++) {
        struct ms_lease *l = mk(0, 0, 0);
        acquire(l, 0, 4);
        ms_lease_tick(l, 3000);
        drain(l);
        uint64_t req = acts[0].req;
        answer(l, kind ? MS_LEASE_ANS_REFUSED : MS_LEASE_ANS_DB_ERROR, req,
               0, 5000, 3000, 3010);
        drain(l);
        CHECK(nacts == 1 && acts[0].kind == MS_LEASE_STOP_ENTITIES);
        CHECK(acts[0].shard == 3);
        CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_LOST);
        CHECK(ms_lease_held(l) == 0);
        CHECK(ms_lease_admit(l, 0, 3, &tags[1], 3011) == 0);
        CHECK(ms_lease_admit(l, 0, 3, &tags[2], 3012) == 0);
        ms_lease_tick(l, 3010 + MS_LEASE_BACKOFF_MIN_MS);
        drain(l);
        int i = find(MS_LEASE_ACQUIRE);
        CHECK(i >= 0);
        if (i >= 0)
            answer(l, MS_LEASE_ANS_ACQUIRED, acts[i].req, 5, 10000, 3110,
                   3120);
        drain(l);
        CHECK(nacts == 3 && acts[0].msg == &tags[1] &&
              acts[1].msg == &tags[2] &&
              acts[2].kind == MS_LEASE_OPEN_SHARD);
        CHECK(ms_lease_stats(l)->lost == 1);
        ms_lease_free(l);
    }
}

/* No answer to renewals until past the expiry: a renewal is sent again
 * every renew interval, and the entities stop at the expiry, measured
 * from the acquire's send time, not later. */
static void test_late_renewal(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    acquire(l, 0, 2); /* sent at 0: 10 s left -> expires at 10,000 */
    ms_lease_tick(l, 3000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW);
    uint64_t req = acts[0].req;
    ms_lease_tick(l, 5999);
    CHECK(drain(l) == 0);
    ms_lease_tick(l, 6000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW && acts[0].req != req);
    ms_lease_tick(l, 9999);
    drain(l);
    CHECK(find(MS_LEASE_STOP_ENTITIES) < 0);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_RENEWING);
    ms_lease_tick(l, 10000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_STOP_ENTITIES);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_EXPIRED);
    CHECK(ms_lease_held(l) == 0);
    /* the renewal's answer comes now: too late, ignored */
    answer(l, MS_LEASE_ANS_RENEWED, req, 2, 10000, 3000, 10001);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_EXPIRED);
    CHECK(ms_lease_stats(l)->stale_answers == 1);
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 10002) == 0);
    ms_lease_free(l);

    /* the database's clock is what counts: a 4 s lease answered 1 s after
     * its request was sent expires 4 s after the send */
    l = mk(0, 0, 0);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 0) == 0);
    drain(l);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[0].req, 1, 4000, 0, 1000);
    drain(l);
    ms_lease_tick(l, 3999);
    drain(l);
    CHECK(find(MS_LEASE_STOP_ENTITIES) < 0);
    ms_lease_tick(l, 4000);
    drain(l);
    CHECK(find(MS_LEASE_STOP_ENTITIES) >= 0);
    ms_lease_free(l);

    /* an answer claiming more than the duration asked for is cut to it */
    l = mk(0, 0, 0);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 0) == 0);
    drain(l);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[0].req, 1, 3600000, 0, 10);
    drain(l);
    ms_lease_tick(l, 10000);
    drain(l);
    CHECK(find(MS_LEASE_STOP_ENTITIES) >= 0);
    ms_lease_free(l);
}

/* An answer that comes after the lease ran out locally (no tick between
 * the expiry and the answer) is too late: a renewal stops the entities
 * (the issue: "late past the expiry stops the shard's entities at once")
 * and an acquire is tried again, so what waits in the barrier is not
 * delivered on a lease that is already gone. */
static void test_answer_after_expiry(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    acquire(l, 0, 2); /* sent at 0: expires at 10,000 */
    ms_lease_tick(l, 3000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW);
    /* the database answered at once, but the answer is read at 10,500 */
    answer(l, MS_LEASE_ANS_RENEWED, acts[0].req, 2, 10000, 3000, 10500);
    drain(l);
    CHECK(find(MS_LEASE_STOP_ENTITIES) >= 0);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_EXPIRED);
    CHECK(ms_lease_held(l) == 0);
    CHECK(ms_lease_stats(l)->renewed == 0);
    CHECK(ms_lease_stats(l)->expired == 1);
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 10501) == 0);
    ms_lease_free(l);

    /* an acquire granted for 4 s, its answer read 4.5 s after the send:
     * not held; the waiting message stays in the barrier, in order */
    l = mk(0, 0, 0);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 0) == 0);
    drain(l);
    uint64_t req = acts[0].req;
    CHECK(ms_lease_admit(l, 0, 3, &tags[1], 10) == 0);
    answer(l, MS_LEASE_ANS_ACQUIRED, req, 1, 4000, 0, 4500);
    drain(l);
    CHECK(find(MS_LEASE_DELIVER) < 0);
    CHECK(find(MS_LEASE_OPEN_SHARD) < 0);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_ACQUIRING);
    CHECK(ms_lease_usable_epoch(l, 0, 3, 4500) == 0);
    CHECK(ms_lease_waiting(l, 0, 3) == 1);
    ms_lease_tick(l, 4500 + MS_LEASE_BACKOFF_MIN_MS);
    drain(l);
    int i = find(MS_LEASE_ACQUIRE);
    CHECK(i >= 0);
    if (i >= 0)
        answer(l, MS_LEASE_ANS_ACQUIRED, acts[i].req, 1, 10000, 4600, 4610);
    drain(l);
    CHECK(nacts == 2 && acts[0].kind == MS_LEASE_DELIVER &&
          acts[0].msg == &tags[1] && acts[1].kind == MS_LEASE_OPEN_SHARD);
    CHECK(ms_lease_usable_epoch(l, 0, 3, 4611) == 1);
    ms_lease_free(l);
}

/* An answer to a request the shard no longer waits for changes nothing. */
static void test_stale_answer(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 0) == 0);
    drain(l);
    uint64_t old = acts[0].req;
    answer(l, MS_LEASE_ANS_DB_ERROR, old, 0, 0, 0, 10);
    ms_lease_tick(l, 10 + MS_LEASE_BACKOFF_MIN_MS);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    uint64_t cur = acts[0].req;
    CHECK(cur != old);
    /* the first request's late success: ignored */
    answer(l, MS_LEASE_ANS_ACQUIRED, old, 9, 10000, 0, 120);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_ACQUIRING);
    CHECK(ms_lease_epoch(l, 0, 3) == 0);
    CHECK(drain(l) == 0);
    answer(l, MS_LEASE_ANS_ACQUIRED, cur, 4, 10000, 110, 130);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_HELD);
    CHECK(ms_lease_epoch(l, 0, 3) == 4);
    /* an answer nobody waits for at all */
    answer(l, MS_LEASE_ANS_RENEWED, cur, 4, 10000, 110, 140);
    CHECK(ms_lease_stats(l)->stale_answers == 2);
    ms_lease_free(l);
}

/* The epoch never goes down: an acquire answered with a lower epoch than
 * one the shard saw is not taken, and a renewal of another epoch is a
 * lost lease. */
static void test_epoch_never_down(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    acquire(l, 0, 8);
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    drain(l);
    CHECK(ms_lease_entities_stopped(l, 0, 3, 200) == 0);
    drain(l);
    answer(l, MS_LEASE_ANS_RELEASED, acts[0].req, 0, 0, 200, 210);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_NONE);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 1000) == 0);
    drain(l);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[0].req, 6, 10000, 1000, 1010);
    drain(l);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_ACQUIRING);
    CHECK(ms_lease_epoch(l, 0, 3) == 8);
    CHECK(find(MS_LEASE_OPEN_SHARD) < 0);
    CHECK(ms_lease_stats(l)->epoch_regressions == 1);
    ms_lease_tick(l, 1010 + MS_LEASE_BACKOFF_MIN_MS);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[0].req, 9, 10000, 1110, 1120);
    drain(l);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_HELD);
    CHECK(ms_lease_epoch(l, 0, 3) == 9);
    /* a renewal answered for another epoch */
    ms_lease_tick(l, 1110 + 3000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW && acts[0].epoch == 9);
    answer(l, MS_LEASE_ANS_RENEWED, acts[0].req, 10, 10000, 4110, 4120);
    drain(l);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_LOST);
    CHECK(find(MS_LEASE_STOP_ENTITIES) >= 0);
    ms_lease_free(l);
}

/* An unreachable member: the entities stop, nothing is renewed or
 * released, the lease expires; once all are reachable it is acquired
 * again and the waiting messages go out. */
static void test_unreachable(void)
{
    struct ms_lease *l = mk(0, 0, 60000);
    acquire(l, 0, 2);
    ms_lease_tick(l, 3000);
    drain(l);
    uint64_t renew = acts[0].req;
    ms_lease_member_unreachable(l, 3100);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_STOP_ENTITIES);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_FENCED);
    CHECK(ms_lease_held(l) == 0);
    /* the renewal's answer is not taken */
    answer(l, MS_LEASE_ANS_RENEWED, renew, 2, 10000, 3000, 3200);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_FENCED);
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 3300) == 0);
    for (uint64_t t = 3300; t <= 30000; t += 100) {
        ms_lease_tick(l, t);
        drain(l);
        CHECK(count(MS_LEASE_RENEW) == 0 && count(MS_LEASE_RELEASE) == 0 &&
              count(MS_LEASE_ACQUIRE) == 0);
        /* the renewal sent at 3,000 may have been granted: the lease
         * counts as alive until 13,000, not the 10,000 last known */
        if (t == 12900)
            CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_FENCED);
        if (t == 13000)
            CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_EXPIRED);
    }
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_EXPIRED);
    CHECK(ms_lease_stats(l)->fenced == 1);
    ms_lease_members_reachable(l, 30000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[0].req, 3, 10000, 30000, 30010);
    drain(l);
    CHECK(nacts == 2 && acts[0].msg == &tags[0] &&
          acts[1].kind == MS_LEASE_OPEN_SHARD);
    ms_lease_free(l);

    /* a handoff while a member is unreachable releases nothing */
    l = mk(0, 0, 0);
    acquire(l, 0, 2);
    ms_lease_member_unreachable(l, 100);
    drain(l);
    CHECK(ms_lease_handoff(l, 0, 3, 200) == 0);
    drain(l);
    CHECK(nacts == 0);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_NONE);
    ms_lease_free(l);

    /* a member becomes unreachable while the entities stop for a
     * handoff: once stopped, nothing is released either */
    l = mk(0, 0, 0);
    acquire(l, 0, 2);
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    drain(l);
    ms_lease_member_unreachable(l, 150);
    CHECK(ms_lease_entities_stopped(l, 0, 3, 200) == 0);
    drain(l);
    CHECK(count(MS_LEASE_RELEASE) == 0);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_NONE);
    ms_lease_free(l);
}

/* While a handoff's entities finish what they accepted (STOPPING), the
 * lease is still theirs: it is renewed as usual, so a long drain does
 * not run it out and fail accepted messages with stale_owner. A renewal
 * out when the handoff starts still counts; a refused one lets the lease
 * run out; the release makes any renewal's answer stale; while a member
 * is unreachable nothing is renewed. */
static void test_stopping_renews(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    acquire(l, 0, 5); /* sent at 0: expires at 10,000 */
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    drain(l);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_STOPPING);
    uint64_t t = 3000;
    for (int round = 0; round < 5; round++, t += 3000) {
        ms_lease_tick(l, t);
        drain(l);
        CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW &&
              acts[0].epoch == 5);
        if (nacts != 1)
            break;
        answer(l, MS_LEASE_ANS_RENEWED, acts[0].req, 5, 10000, t, t + 10);
        CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_STOPPING);
    }
    /* 15 s on, past the first lease's 10 s: still usable, still stopping */
    CHECK(ms_lease_usable_epoch(l, 0, 3, 15500) == 5);
    CHECK(ms_lease_gate(l, 0, 3) == MS_ENOOWNER);
    CHECK(ms_lease_held(l) == 0);
    CHECK(ms_lease_stats(l)->renewed == 5);
    /* a renewal out when the entities stop: its answer is stale */
    ms_lease_tick(l, 18000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW);
    uint64_t req = acts[0].req;
    CHECK(ms_lease_entities_stopped(l, 0, 3, 18100) == 0);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RELEASE);
    answer(l, MS_LEASE_ANS_RENEWED, req, 5, 10000, 18000, 18110);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_RELEASING);
    ms_lease_free(l);

    /* a renewal out when the handoff starts still extends the lease */
    l = mk(0, 0, 0);
    acquire(l, 0, 5);
    ms_lease_tick(l, 3000);
    drain(l);
    req = acts[0].req;
    CHECK(ms_lease_handoff(l, 0, 3, 3005) == 0);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_STOP_ENTITIES);
    answer(l, MS_LEASE_ANS_RENEWED, req, 5, 10000, 3000, 3010);
    CHECK(ms_lease_usable_epoch(l, 0, 3, 12000) == 5);
    /* refused: the lease runs out at its expiry (13,000) */
    ms_lease_tick(l, 6000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW);
    answer(l, MS_LEASE_ANS_REFUSED, acts[0].req, 0, 0, 6000, 6010);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_STOPPING);
    for (uint64_t u = 6100; u <= 13000; u += 100) {
        ms_lease_tick(l, u);
        CHECK(drain(l) == 0);
    }
    CHECK(ms_lease_usable_epoch(l, 0, 3, 12999) == 5);
    CHECK(ms_lease_usable_epoch(l, 0, 3, 13000) == 0);
    ms_lease_free(l);

    /* a member unreachable: a stopping shard is not renewed */
    l = mk(0, 0, 0);
    acquire(l, 0, 5);
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    ms_lease_member_unreachable(l, 200);
    drain(l);
    for (uint64_t u = 300; u <= 12000; u += 100) {
        ms_lease_tick(l, u);
        drain(l);
        CHECK(count(MS_LEASE_RENEW) == 0);
    }
    CHECK(ms_lease_usable_epoch(l, 0, 3, 10000) == 0);
    ms_lease_free(l);
}

/* A move rolled back while its entities stop: assigned here again in
 * STOPPING, the lease is in use again (open, renewed), or, run out by
 * then, expired and acquired again; it never stays STOPPING. */
static void test_rollback_while_stopping(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    acquire(l, 0, 5); /* expires at 10,000 */
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    drain(l);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_STOPPING);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 200) == 0);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_OPEN_SHARD);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_HELD);
    CHECK(ms_lease_held(l) == 1);
    CHECK(ms_lease_gate(l, 0, 3) == MS_LEASE_OPEN);
    ms_lease_tick(l, 3000);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RENEW);
    ms_lease_free(l);

    l = mk(0, 0, 0);
    acquire(l, 0, 5);
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    drain(l);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 10000) == 0);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_STOP_ENTITIES);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_EXPIRED);
    CHECK(ms_lease_held(l) == 0);
    ms_lease_tick(l, 10000 + MS_LEASE_BACKOFF_MIN_MS);
    drain(l);
    CHECK(find(MS_LEASE_ACQUIRE) >= 0);
    ms_lease_free(l);
}

/* A handoff stops the entities, and releases only after they stopped; it
 * waits for the barrier to drain first. */
static void test_handoff(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    acquire(l, 0, 5);
    CHECK(ms_lease_entities_stopped(l, 0, 3, 50) == MS_EBUSY);
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_STOP_ENTITIES);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_STOPPING);
    CHECK(ms_lease_held(l) == 0);
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 110) == MS_ENOOWNER);
    ms_lease_tick(l, 2900); /* nothing due yet; no release */
    CHECK(drain(l) == 0);
    CHECK(ms_lease_entities_stopped(l, 0, 3, 5000) == 0);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RELEASE);
    CHECK(acts[0].epoch == 5 && strcmp(acts[0].owner, "node-a") == 0);
    answer(l, MS_LEASE_ANS_RELEASED, acts[0].req, 0, 0, 5000, 5010);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_NONE);
    CHECK(ms_lease_stats(l)->released == 1);
    ms_lease_free(l);

    /* assigned here again while the release is out: its messages wait,
     * and the lease is acquired once the release is answered */
    l = mk(0, 0, 0);
    acquire(l, 0, 5);
    CHECK(ms_lease_handoff(l, 0, 3, 100) == 0);
    CHECK(ms_lease_entities_stopped(l, 0, 3, 200) == 0);
    drain(l);
    uint64_t rel = acts[find(MS_LEASE_RELEASE)].req;
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 210) == MS_ENOOWNER);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 220) == 0);
    CHECK(ms_lease_admit(l, 0, 3, &tags[1], 230) == 0);
    CHECK(drain(l) == 0);
    answer(l, MS_LEASE_ANS_RELEASED, rel, 0, 0, 200, 240);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[0].req, 6, 10000, 240, 250);
    drain(l);
    CHECK(nacts == 2 && acts[0].msg == &tags[1] &&
          acts[1].kind == MS_LEASE_OPEN_SHARD);
    ms_lease_free(l);

    /* the barrier holds messages: the handoff waits until they are
     * delivered, then stops and releases */
    l = mk(0, 0, 0);
    acquire(l, 0, 5);
    ms_lease_tick(l, 3000);
    drain(l);
    answer(l, MS_LEASE_ANS_DB_ERROR, acts[0].req, 0, 0, 3000, 3010);
    drain(l);
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 3020) == 0);
    CHECK(ms_lease_admit(l, 0, 3, &tags[1], 3021) == 0);
    CHECK(ms_lease_handoff(l, 0, 3, 3030) == 0);
    drain(l);
    CHECK(nacts == 0); /* waits for the barrier */
    CHECK(ms_lease_admit(l, 0, 3, &tags[2], 3031) == MS_ENOOWNER);
    ms_lease_tick(l, 3010 + MS_LEASE_BACKOFF_MIN_MS);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[0].req, 5, 10000, 3110, 3120);
    drain(l);
    CHECK(nacts == 3);
    CHECK(nacts == 3 && acts[0].msg == &tags[0] && acts[1].msg == &tags[1] &&
          acts[2].kind == MS_LEASE_STOP_ENTITIES);
    CHECK(find(MS_LEASE_RELEASE) < 0 && find(MS_LEASE_OPEN_SHARD) < 0);
    CHECK(ms_lease_entities_stopped(l, 0, 3, 3200) == 0);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_RELEASE);
    ms_lease_free(l);
}

/* The barrier: FIFO, the bound with the overflow answer, the acquire
 * backoff schedule, and the window: all rejected, never replayed. */
static void test_barrier(void)
{
    struct ms_lease *l = mk(0, 0, 0); /* window: 20 s */
    CHECK(ms_lease_shard_assigned(l, 0, 3, 0) == 0);
    for (int i = 0; i < MS_LEASE_BARRIER; i++)
        CHECK(ms_lease_admit(l, 0, 3, &tags[i], 0) == 0);
    CHECK(ms_lease_admit(l, 0, 3, &tags[MS_LEASE_BARRIER], 0) ==
          MS_EOVERFLOW);
    CHECK(ms_lease_waiting(l, 0, 3) == MS_LEASE_BARRIER);
    CHECK(ms_lease_stats(l)->barrier_overflows == 1);
    /* backoff: every acquire fails at once; the retries go out at 100,
     * 200, 400, 800, 1600, 2000, 2000 ms after each failure */
    static const uint64_t want[] = {100, 200, 400, 800, 1600, 2000, 2000};
    uint64_t t, prev = 0;
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    answer(l, MS_LEASE_ANS_DB_ERROR, acts[0].req, 0, 0, 0, 0);
    int nw = 0;
    for (t = 10; t <= 12000; t += 10) {
        ms_lease_tick(l, t);
        drain(l);
        for (int i = 0; i < nacts; i++) {
            if (acts[i].kind != MS_LEASE_ACQUIRE)
                continue;
            if (nw < 7) {
                CHECK(t - prev == want[nw]);
                nw++;
            }
            answer(l, MS_LEASE_ANS_DB_ERROR, acts[i].req, 0, 0, t, t);
            prev = t;
        }
    }
    CHECK(nw == 7);
    ms_lease_tick(l, 20000 - 10);
    drain(l);
    CHECK(ms_lease_waiting(l, 0, 3) == MS_LEASE_BARRIER);
    CHECK(ms_lease_stats(l)->rejected == 0);
    /* the window (2 x 10 s from the assignment) runs out: all rejected,
     * in order, with lease_unavailable */
    ms_lease_tick(l, 20000);
    drain(l);
    CHECK(count(MS_LEASE_REJECT) == MS_LEASE_BARRIER);
    int ordered = 1;
    for (int i = 0, k = 0; i < nacts; i++)
        if (acts[i].kind == MS_LEASE_REJECT) {
            ordered &= acts[i].msg == &tags[k] && acts[i].err == MS_ELEASE;
            k++;
        }
    CHECK(ordered);
    CHECK(ms_lease_waiting(l, 0, 3) == 0);
    CHECK(ms_lease_stats(l)->rejected == MS_LEASE_BARRIER);
    /* new messages are refused until the lease is held */
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 20001) == MS_ELEASE);
    int acq = -1;
    for (t = 20000; acq < 0 && t < 30000; t += 10) {
        ms_lease_tick(l, t);
        drain(l);
        acq = find(MS_LEASE_ACQUIRE);
    }
    CHECK(acq >= 0);
    if (acq >= 0)
        answer(l, MS_LEASE_ANS_ACQUIRED, acts[acq].req, 1, 10000, t, t + 1);
    drain(l);
    /* nothing replayed: OPEN only */
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_OPEN_SHARD);
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], t + 2) == MS_LEASE_OPEN);
    ms_lease_free(l);

    /* a refusal waits for the other owner's lease (capped at one
     * duration) rather than the short backoff */
    l = mk(0, 0, 0);
    CHECK(ms_lease_shard_assigned(l, 0, 3, 0) == 0);
    drain(l);
    answer(l, MS_LEASE_ANS_REFUSED, acts[0].req, 0, 4000, 0, 10);
    ms_lease_tick(l, 3999);
    CHECK(drain(l) == 0);
    ms_lease_tick(l, 4010);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_ACQUIRE);
    CHECK(ms_lease_stats(l)->refused == 1);
    /* cancel_all gives the handles back */
    CHECK(ms_lease_admit(l, 0, 3, &tags[0], 4020) == 0);
    CHECK(ms_lease_cancel_all(l) == 1);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_REJECT &&
          acts[0].err == MS_ECANCELED);
    ms_lease_free(l);
}

/* Bad input. */
static void test_bad_input(void)
{
    struct ms_lease *l = mk(0, 0, 0);
    CHECK(ms_lease_shard_assigned(l, 0, 8, 0) == MS_EINVAL);
    CHECK(ms_lease_shard_assigned(l, 1, 0, 0) == MS_EINVAL); /* none */
    CHECK(ms_lease_shard_assigned(l, 2, 0, 0) == MS_EINVAL);
    CHECK(ms_lease_admit(l, 0, 3, NULL, 0) == MS_EINVAL);
    CHECK(ms_lease_handoff(l, 0, 3, 0) == MS_EBUSY);
    struct ms_lease_answer a = {99, 0, 3, 1, 0, 0, 0};
    CHECK(ms_lease_on_answer(l, &a, 0) == MS_EINVAL);
    a.kind = MS_LEASE_ANS_ACQUIRED;
    a.req = 0;
    CHECK(ms_lease_on_answer(l, &a, 0) == 0);
    CHECK(strcmp(ms_lease_state_name(MS_LEASE_FENCED), "fenced") == 0);
    CHECK(strcmp(ms_errname(MS_ELEASE), "lease_unavailable") == 0);
    ms_lease_free(l);
}

/* The gate a caller with its own buffer uses (the region): it keeps
 * nothing, says open / wait / lease_unavailable / not ours, and the
 * window still runs out; the usable epoch ends at the local expiry and
 * lasts through a handoff's STOPPING, not after a loss. */
static void test_gate_and_epoch(void)
{
    struct ms_lease *l = mk(2000, 500, 4000);
    CHECK(ms_lease_gate(l, 0, 3) == MS_ENOOWNER);
    CHECK(ms_lease_gate(l, 0, 8) == MS_EINVAL);
    CHECK(ms_lease_gate(l, 1, 0) == MS_EINVAL); /* not persistent */
    CHECK(ms_lease_shard_assigned(l, 0, 3, 1000) == 0);
    drain(l);
    uint64_t req = acts[0].req;
    CHECK(ms_lease_gate(l, 0, 3) == 0);
    CHECK(ms_lease_waiting(l, 0, 3) == 0); /* nothing kept */
    CHECK(ms_lease_usable_epoch(l, 0, 3, 1000) == 0);
    /* refused until the window (4 s from 1000) runs out */
    answer(l, MS_LEASE_ANS_REFUSED, req, 0, 100, 1000, 1010);
    for (uint64_t t = 1100; t < 5000; t += 100) {
        ms_lease_tick(l, t);
        drain(l);
        CHECK(ms_lease_gate(l, 0, 3) == 0);
    }
    ms_lease_tick(l, 5000);
    drain(l);
    CHECK(ms_lease_gate(l, 0, 3) == MS_ELEASE);
    /* the next acquire (after its backoff or timeout) gets it */
    uint64_t t = 5000;
    int i = find(MS_LEASE_ACQUIRE);
    while (i < 0 && t < 20000) {
        t += 100;
        ms_lease_tick(l, t);
        drain(l);
        i = find(MS_LEASE_ACQUIRE);
    }
    CHECK(i >= 0);
    if (i < 0) {
        ms_lease_free(l);
        return;
    }
    CHECK(ms_lease_gate(l, 0, 3) == MS_ELEASE);
    answer(l, MS_LEASE_ANS_ACQUIRED, acts[i].req, 4, 2000, t, t + 10);
    drain(l);
    CHECK(nacts == 1 && acts[0].kind == MS_LEASE_OPEN_SHARD);
    CHECK(ms_lease_gate(l, 0, 3) == MS_LEASE_OPEN);
    CHECK(ms_lease_usable_epoch(l, 0, 3, t + 10) == 4);
    /* 2 s counted from the send */
    CHECK(ms_lease_usable_epoch(l, 0, 3, t + 1999) == 4);
    CHECK(ms_lease_usable_epoch(l, 0, 3, t + 2000) == 0);
    /* a handoff: entities finishing may still write until released */
    CHECK(ms_lease_handoff(l, 0, 3, t + 100) == 0);
    drain(l);
    CHECK(ms_lease_state(l, 0, 3) == MS_LEASE_STOPPING);
    CHECK(ms_lease_gate(l, 0, 3) == MS_ENOOWNER);
    CHECK(ms_lease_usable_epoch(l, 0, 3, t + 200) == 4);
    CHECK(ms_lease_entities_stopped(l, 0, 3, t + 300) == 0);
    CHECK(ms_lease_usable_epoch(l, 0, 3, t + 300) == 0);
    ms_lease_free(l);
}

int main(void)
{
    test_settings();
    test_acquire_open_in_order();
    test_renewals_on_time();
    test_renewal_fails();
    test_late_renewal();
    test_answer_after_expiry();
    test_stale_answer();
    test_epoch_never_down();
    test_unreachable();
    test_handoff();
    test_stopping_renews();
    test_rollback_while_stopping();
    test_barrier();
    test_bad_input();
    test_gate_and_epoch();
    CHECK_DONE();
}
