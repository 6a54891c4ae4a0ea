/* The remember-entities machine (runtime/core/remember.h): the set, the
 * write-behind queue (group commit, coalescing, cancelling, the bound and
 * its resync), failed writes (retry, fail_open, fail_closed, clear, move
 * away), eager start (budget, fairness, order, a move away mid-start) and
 * which stops remove an id. */
#include <stdio.h>
#include <string.h>

#include "../../runtime/core/errors.h"
#include "../../runtime/core/remember.h"
#include "check.h"

#define MAXA 4096

static struct ms_remember_action acts[MAXA];
static char ids[MAXA][64]; /* ACTIVATE ids, copied while valid */
static int nacts;

static int drain(struct ms_remember *r)
{
    nacts = 0;
    struct ms_remember_action a;
    while (ms_remember_next_action(r, &a))
        if (nacts < MAXA) {
            ids[nacts][0] = '\0';
            if (a.kind == MS_REMEMBER_ACTIVATE_ID) {
                snprintf(ids[nacts], sizeof ids[nacts], "%s", a.id);
                a.id = NULL;
            }
            acts[nacts++] = a;
        }
    return nacts;
}

static int count(int kind)
{
    int n = 0;
    for (int i = 0; i < nacts; i++)
        n += acts[i].kind == kind;
    return n;
}

/* type 0: 8 shards fail_open; type 1: 8 shards fail_closed, keep_on_idle;
 * type 2: not remembered */
static struct ms_remember *mk(uint32_t queue, uint32_t batch,
                              uint32_t per_tick)
{
    static const struct ms_remember_type types[3] = {
        {8, 0, 0}, {8, 1, 1}, {0, 0, 0}};
    struct ms_remember_config c = {3, types, queue, batch, per_tick};
    struct ms_remember *r = NULL;
    CHECK(ms_remember_new(&r, &c) == 0);
    return r;
}

static int start(struct ms_remember *r, int type, uint32_t shard,
                 const char *id)
{
    return ms_remember_started(r, type, shard, id, strlen(id), 0);
}

static int stop(struct ms_remember *r, int type, uint32_t shard,
                const char *id, int reason)
{
    return ms_remember_stopped(r, type, shard, id, strlen(id), reason, 0);
}

static void empty_start(struct ms_remember *r, int type, uint32_t shard)
{
    CHECK(ms_remember_shard_started(r, type, shard, NULL, NULL, 0, 0) == 0);
}

/* a record (id, op) is in write action i */
static int has(int i, const char *id, int op)
{
    for (uint32_t k = 0; k < acts[i].nrecords; k++)
        if (strcmp(acts[i].records[k].id, id) == 0 &&
            acts[i].records[k].op == op)
            return 1;
    return 0;
}

static void test_arguments(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    char big[MS_REMEMBER_ID_MAX + 2];
    memset(big, 'x', sizeof big);
    CHECK(start(r, 0, 0, "a") == MS_ENOOWNER); /* not started here */
    CHECK(start(r, 2, 0, "a") == MS_EINVAL);   /* not remembered */
    CHECK(start(r, 3, 0, "a") == MS_EINVAL);
    CHECK(start(r, 0, 8, "a") == MS_EINVAL);
    empty_start(r, 0, 0);
    CHECK(ms_remember_started(r, 0, 0, big, sizeof big, 0) == MS_E2BIG);
    CHECK(ms_remember_started(r, 0, 0, "", 0, 0) == MS_EINVAL);
    CHECK(stop(r, 0, 0, "a", 99) == MS_EINVAL);
    const char *l[1] = {big};
    size_t ll[1] = {sizeof big};
    CHECK(ms_remember_shard_started(r, 0, 1, l, ll, 1, 0) == MS_E2BIG);
    CHECK(ms_remember_shard_stopped(r, 0, 1, 0) == MS_ENOOWNER);
    CHECK(ms_remember_on_written(r, 0, 0, 77, 0, 0) == 0);
    CHECK(ms_remember_stats(r)->stale_answers == 1);
    struct ms_remember_type t = {1, 0, 0};
    struct ms_remember_config c = {1, &t, MS_REMEMBER_QUEUE_MAX + 1, 0, 0};
    struct ms_remember *bad = NULL;
    CHECK(ms_remember_new(&bad, &c) == MS_EINVAL);
    ms_remember_free(r);
}

/* the first record goes out alone; the next ones wait as one batch */
static void test_group_commit(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    empty_start(r, 0, 2);
    CHECK(start(r, 0, 2, "a") == 1);
    CHECK(drain(r) == 1 && acts[0].kind == MS_REMEMBER_WRITE);
    CHECK(acts[0].nrecords == 1 && has(0, "a", MS_REMEMBER_START));
    CHECK(!acts[0].replace && acts[0].type == 0 && acts[0].shard == 2);
    uint64_t req = acts[0].req;
    CHECK(start(r, 0, 2, "b") == 1);
    CHECK(start(r, 0, 2, "c") == 1);
    CHECK(start(r, 0, 2, "a") == 0); /* already remembered */
    CHECK(drain(r) == 0);           /* one WRITE out per shard */
    CHECK(ms_remember_pending(r, 0, 2) == 3);
    CHECK(ms_remember_on_written(r, 0, 2, req, 0, 10) == 0);
    CHECK(drain(r) == 1 && acts[0].nrecords == 2);
    CHECK(strcmp(acts[0].records[0].id, "b") == 0);
    CHECK(strcmp(acts[0].records[1].id, "c") == 0);
    CHECK(ms_remember_on_written(r, 0, 2, acts[0].req, 0, 10) == 0);
    CHECK(drain(r) == 0 && ms_remember_pending(r, 0, 2) == 0);
    CHECK(ms_remember_shard_count(r, 0, 2) == 3);
    CHECK(ms_remember_type_count(r, 0) == 3);
    CHECK(ms_remember_stats(r)->writes == 2);
    CHECK(ms_remember_stats(r)->written == 3);
    ms_remember_free(r);
}

/* a queued record is replaced by the last one of its id, or cancelled
 * when it brings the id back to what the store had */
static void test_coalesce(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    empty_start(r, 0, 0);
    start(r, 0, 0, "a"); /* in flight */
    drain(r);
    uint64_t req = acts[0].req;
    /* b is new: start then stop cancel out */
    CHECK(start(r, 0, 0, "b") == 1);
    CHECK(stop(r, 0, 0, "b", MS_REMEMBER_EXPLICIT) == 1);
    CHECK(ms_remember_stats(r)->cancelled == 1);
    /* a's start is in flight: its stop queues, a start again cancels it */
    CHECK(stop(r, 0, 0, "a", MS_REMEMBER_EXPLICIT) == 1);
    CHECK(start(r, 0, 0, "a") == 1);
    CHECK(ms_remember_stats(r)->cancelled == 2);
    CHECK(ms_remember_stats(r)->queued == 0);
    /* c: start, stop, start: one start queued */
    start(r, 0, 0, "c");
    stop(r, 0, 0, "c", MS_REMEMBER_EXPLICIT);
    start(r, 0, 0, "c");
    CHECK(ms_remember_stats(r)->queued == 1);
    /* d is remembered (listed): stop then start cancel out; a stop
     * followed by nothing is written */
    ms_remember_on_written(r, 0, 0, req, 0, 1);
    drain(r);
    CHECK(nacts == 1 && acts[0].nrecords == 1 &&
          has(0, "c", MS_REMEMBER_START));
    ms_remember_on_written(r, 0, 0, acts[0].req, 0, 1);
    CHECK(stop(r, 0, 0, "c", MS_REMEMBER_EXPLICIT) == 1);
    drain(r);
    CHECK(nacts == 1 && has(0, "c", MS_REMEMBER_STOP));
    CHECK(ms_remember_contains(r, 0, 0, "a", 1));
    CHECK(!ms_remember_contains(r, 0, 0, "b", 1));
    CHECK(!ms_remember_contains(r, 0, 0, "c", 1));
    ms_remember_free(r);
}

/* a full queue drops the record, never refuses: the shard resyncs its
 * whole set once its WRITE out is answered */
static void test_full_queue(void)
{
    struct ms_remember *r = mk(4, 0, 0);
    const char *l[2] = {"old1", "old2"};
    size_t ll[2] = {4, 4};
    CHECK(ms_remember_shard_started(r, 0, 0, l, ll, 2, 0) == 0);
    empty_start(r, 0, 1);
    start(r, 0, 0, "a"); /* in flight */
    drain(r);
    uint64_t req = acts[0].req;
    start(r, 0, 0, "b");
    start(r, 0, 1, "x"); /* another shard shares the bound */
    drain(r);
    uint64_t req1 = acts[0].req;
    start(r, 0, 0, "c");
    CHECK(ms_remember_stats(r)->queued + ms_remember_stats(r)->inflight
          == 4);
    CHECK(start(r, 0, 0, "d") == 1); /* dropped */
    CHECK(ms_remember_stats(r)->drops == 1);
    CHECK(ms_remember_stats(r)->queued == 0); /* b, c subsumed */
    CHECK(stop(r, 0, 0, "old1", MS_REMEMBER_EXPLICIT) == 1);
    CHECK(ms_remember_stats(r)->drops == 1); /* covered by the resync */
    CHECK(drain(r) == 0);
    CHECK(ms_remember_pending(r, 0, 0) == 2); /* a in flight, resync */
    ms_remember_on_written(r, 0, 0, req, 0, 1);
    drain(r);
    /* the set: old2, a, b, c, d (old1 stopped) */
    CHECK(nacts == 1 && acts[0].replace && acts[0].nrecords == 5);
    CHECK(has(0, "a", MS_REMEMBER_START) && has(0, "b", MS_REMEMBER_START));
    CHECK(has(0, "c", MS_REMEMBER_START) && has(0, "d", MS_REMEMBER_START));
    CHECK(!has(0, "old1", MS_REMEMBER_START));
    CHECK(has(0, "old2", MS_REMEMBER_START));
    CHECK(ms_remember_stats(r)->resyncs == 1);
    /* a failed resync is sent again whole */
    ms_remember_on_written(r, 0, 0, acts[0].req, MS_EDBCONN, 2);
    ms_remember_tick(r, 2 + MS_REMEMBER_BACKOFF_MIN_MS);
    drain(r); /* the WRITE, then the eager start of old2 (old1 stopped) */
    CHECK(count(MS_REMEMBER_WRITE) == 1);
    CHECK(count(MS_REMEMBER_ACTIVATE_ID) == 1);
    CHECK(ms_remember_stats(r)->eager_skipped == 1);
    CHECK(acts[0].replace && acts[0].nrecords == 5);
    ms_remember_on_written(r, 0, 0, acts[0].req, 0, 200);
    ms_remember_on_written(r, 0, 1, req1, 0, 200);
    CHECK(drain(r) == 0);
    CHECK(ms_remember_pending(r, 0, 0) == 0);
    /* back to normal records */
    CHECK(start(r, 0, 0, "e") == 1);
    drain(r);
    CHECK(nacts == 1 && !acts[0].replace && acts[0].nrecords == 1);
    ms_remember_free(r);
}

/* failed writes: retried after a doubling backoff; a newer record of the
 * same id supersedes the failed one; fail_open never marks the shard */
static void test_retry_fail_open(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    empty_start(r, 0, 0);
    start(r, 0, 0, "a");
    start(r, 0, 0, "b");
    drain(r);
    ms_remember_on_written(r, 0, 0, acts[0].req, MS_EDBCONN, 1000);
    CHECK(ms_remember_stats(r)->errors == 1);
    ms_remember_on_written(r, 0, 0, acts[0].req, 0, 1000); /* stale */
    CHECK(ms_remember_stats(r)->stale_answers == 1);
    CHECK(!ms_remember_shard_failed(r, 0, 0));
    CHECK(drain(r) == 0);
    stop(r, 0, 0, "a", MS_REMEMBER_EXPLICIT); /* supersedes a's start */
    CHECK(drain(r) == 0);                     /* waits for the backoff */
    ms_remember_tick(r, 1000 + MS_REMEMBER_BACKOFF_MIN_MS - 1);
    CHECK(drain(r) == 0);
    ms_remember_tick(r, 1000 + MS_REMEMBER_BACKOFF_MIN_MS);
    CHECK(drain(r) == 1 && acts[0].nrecords == 2);
    /* the batch again, a's start replaced in place by its stop */
    CHECK(strcmp(acts[0].records[0].id, "a") == 0);
    CHECK(acts[0].records[0].op == MS_REMEMBER_STOP);
    CHECK(strcmp(acts[0].records[1].id, "b") == 0);
    CHECK(ms_remember_stats(r)->retries == 1);
    /* the second failure waits twice as long */
    ms_remember_on_written(r, 0, 0, acts[0].req, MS_EDBCONN, 2000);
    ms_remember_tick(r, 2000 + 2 * MS_REMEMBER_BACKOFF_MIN_MS - 1);
    CHECK(drain(r) == 0);
    ms_remember_tick(r, 2000 + 2 * MS_REMEMBER_BACKOFF_MIN_MS);
    CHECK(drain(r) == 1 && acts[0].nrecords == 2);
    ms_remember_on_written(r, 0, 0, acts[0].req, 0, 3000);
    CHECK(ms_remember_pending(r, 0, 0) == 0);
    CHECK(ms_remember_shard_count(r, 0, 0) == 1);
    CHECK(!ms_remember_shard_failed(r, 0, 0));
    CHECK(ms_remember_stats(r)->errors == 2);
    ms_remember_free(r);
}

/* a record queued behind a write that then failed must not cancel out
 * against what that write would have made of the store */
static void test_fail_then_cancel(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    empty_start(r, 0, 0);
    start(r, 0, 0, "x"); /* start x in flight */
    drain(r);
    uint64_t req = acts[0].req;
    stop(r, 0, 0, "x", MS_REMEMBER_EXPLICIT); /* queued: stop x */
    ms_remember_on_written(r, 0, 0, req, MS_EDBCONN, 0);
    start(r, 0, 0, "x"); /* the store has no x: a start must be written */
    CHECK(ms_remember_stats(r)->queued == 1);
    ms_remember_tick(r, MS_REMEMBER_BACKOFF_MIN_MS);
    drain(r);
    CHECK(nacts == 1 && acts[0].nrecords == 1 &&
          has(0, "x", MS_REMEMBER_START));
    ms_remember_free(r);
}

/* records queued while a resync was out, then changed after it failed:
 * the store ends with the set */
static void test_resync_fail_then_change(void)
{
    struct ms_remember *r = mk(2, 0, 0);
    empty_start(r, 0, 0);
    start(r, 0, 0, "a"); /* in flight */
    drain(r);
    uint64_t req = acts[0].req;
    start(r, 0, 0, "b");
    start(r, 0, 0, "c"); /* dropped: resync due */
    ms_remember_on_written(r, 0, 0, req, 0, 0);
    drain(r);
    CHECK(nacts == 1 && acts[0].replace && acts[0].nrecords == 3);
    req = acts[0].req;
    start(r, 0, 0, "x"); /* queued behind the resync */
    ms_remember_on_written(r, 0, 0, req, MS_EDBCONN, 0);
    stop(r, 0, 0, "x", MS_REMEMBER_EXPLICIT);
    ms_remember_tick(r, MS_REMEMBER_BACKOFF_MIN_MS);
    drain(r);
    CHECK(nacts == 1 && acts[0].replace && acts[0].nrecords == 3);
    CHECK(!has(0, "x", MS_REMEMBER_START));
    ms_remember_on_written(r, 0, 0, acts[0].req, 0, 200);
    CHECK(drain(r) == 0); /* no start of x after it */
    CHECK(ms_remember_pending(r, 0, 0) == 0);
    ms_remember_free(r);
}

/* fail_closed: failed until cleared (not by a later success), or until
 * the shard moves away */
static void test_fail_closed(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    empty_start(r, 1, 3);
    start(r, 1, 3, "a");
    drain(r);
    ms_remember_on_written(r, 1, 3, acts[0].req, MS_EDBQUERY, 0);
    CHECK(ms_remember_shard_failed(r, 1, 3));
    CHECK(!ms_remember_shard_failed(r, 1, 2));
    CHECK(ms_remember_stats(r)->failed_shards == 1);
    ms_remember_tick(r, MS_REMEMBER_BACKOFF_MIN_MS);
    drain(r);
    CHECK(nacts == 1);
    ms_remember_on_written(r, 1, 3, acts[0].req, 0, 200);
    CHECK(ms_remember_shard_failed(r, 1, 3)); /* until the operator */
    CHECK(ms_remember_clear(r, 1, 3) == 1);
    CHECK(ms_remember_clear(r, 1, 3) == 0);
    CHECK(!ms_remember_shard_failed(r, 1, 3));
    CHECK(ms_remember_stats(r)->failed_shards == 0);
    /* fails again, then moves away */
    start(r, 1, 3, "b");
    drain(r);
    ms_remember_on_written(r, 1, 3, acts[0].req, MS_EDBQUERY, 300);
    CHECK(ms_remember_shard_failed(r, 1, 3));
    CHECK(ms_remember_shard_stopped(r, 1, 3, 300) == 0);
    CHECK(!ms_remember_shard_failed(r, 1, 3));
    CHECK(ms_remember_stats(r)->failed_shards == 0);
    /* its queued record is still written after the move */
    CHECK(ms_remember_pending(r, 1, 3) == 1);
    ms_remember_tick(r, 300 + MS_REMEMBER_BACKOFF_MIN_MS);
    drain(r);
    CHECK(nacts == 1 && has(0, "b", MS_REMEMBER_START));
    ms_remember_on_written(r, 1, 3, acts[0].req, MS_EDBQUERY, 400);
    CHECK(!ms_remember_shard_failed(r, 1, 3)); /* not ours any more */
    ms_remember_free(r);
}

/* explicit stop removes; idle removes unless keep_on_idle; failure, node
 * stop and handoff keep */
static void test_stop_reasons(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    const char *l[5] = {"e", "i", "f", "n", "h"};
    size_t ll[5] = {1, 1, 1, 1, 1};
    for (int t = 0; t < 2; t++)
        CHECK(ms_remember_shard_started(r, t, 0, l, ll, 5, 0) == 0);
    for (int t = 0; t < 2; t++) {
        CHECK(stop(r, t, 0, "f", MS_REMEMBER_FAILURE) == 0);
        CHECK(stop(r, t, 0, "n", MS_REMEMBER_NODE_STOP) == 0);
        CHECK(stop(r, t, 0, "h", MS_REMEMBER_HANDOFF) == 0);
        CHECK(stop(r, t, 0, "e", MS_REMEMBER_EXPLICIT) == 1);
        CHECK(stop(r, t, 0, "zz", MS_REMEMBER_EXPLICIT) == 0);
    }
    CHECK(stop(r, 0, 0, "i", MS_REMEMBER_IDLE) == 1);
    CHECK(stop(r, 1, 0, "i", MS_REMEMBER_IDLE) == 0); /* keep_on_idle */
    CHECK(ms_remember_shard_count(r, 0, 0) == 3);
    CHECK(ms_remember_shard_count(r, 1, 0) == 4);
    CHECK(!ms_remember_contains(r, 0, 0, "i", 1));
    CHECK(ms_remember_contains(r, 1, 0, "i", 1));
    CHECK(ms_remember_contains(r, 0, 0, "f", 1));
    drain(r);
    CHECK(count(MS_REMEMBER_WRITE) == 2);
    ms_remember_free(r);
}

/* eager start: the budget per tick, one shard after the other, each
 * shard's ids in order; a move away drops the rest */
static void test_eager(void)
{
    struct ms_remember *r = mk(0, 0, 3);
    const char *la[5] = {"a0", "a1", "a2", "a3", "a4"};
    const char *lb[2] = {"b0", "b1"};
    size_t ll[5] = {2, 2, 2, 2, 2};
    CHECK(ms_remember_shard_started(r, 0, 0, la, ll, 5, 0) == 0);
    CHECK(ms_remember_shard_started(r, 0, 1, lb, ll, 2, 0) == 0);
    CHECK(drain(r) == 0); /* nothing before a tick */
    CHECK(ms_remember_stats(r)->eager_pending == 7);
    ms_remember_tick(r, 1);
    CHECK(drain(r) == 3);
    CHECK(strcmp(ids[0], "a0") == 0 && strcmp(ids[1], "b0") == 0);
    CHECK(strcmp(ids[2], "a1") == 0);
    CHECK(acts[1].shard == 1 && acts[1].type == 0);
    ms_remember_tick(r, 2);
    CHECK(drain(r) == 3);
    CHECK(strcmp(ids[0], "b1") == 0 && strcmp(ids[1], "a2") == 0);
    CHECK(strcmp(ids[2], "a3") == 0);
    /* a message activated a4 meanwhile: nothing recorded (listed) */
    CHECK(start(r, 0, 0, "a4") == 0);
    ms_remember_tick(r, 3);
    CHECK(drain(r) == 1 && strcmp(ids[0], "a4") == 0);
    ms_remember_tick(r, 4);
    CHECK(drain(r) == 0);
    CHECK(ms_remember_stats(r)->eager_starts == 7);
    CHECK(ms_remember_stats(r)->eager_pending == 0);
    CHECK(ms_remember_stats(r)->writes == 0);

    /* a move away mid-start */
    CHECK(ms_remember_shard_started(r, 0, 2, la, ll, 5, 10) == 0);
    CHECK(ms_remember_shard_started(r, 0, 3, lb, ll, 2, 10) == 0);
    ms_remember_tick(r, 11);
    drain(r);
    CHECK(nacts == 3);
    CHECK(ms_remember_shard_stopped(r, 0, 2, 12) == 0);
    ms_remember_tick(r, 13);
    drain(r);
    CHECK(nacts == 1 && strcmp(ids[0], "b1") == 0);
    CHECK(ms_remember_stats(r)->eager_dropped == 3);
    CHECK(ms_remember_stats(r)->eager_pending == 0);
    CHECK(ms_remember_shard_count(r, 0, 2) == 0);
    CHECK(ms_remember_type_count(r, 0) == 9); /* shards 0, 1, 3 */
    /* it comes back: started again from its list */
    CHECK(ms_remember_shard_started(r, 0, 2, la, ll, 2, 20) == 0);
    ms_remember_tick(r, 21);
    drain(r);
    CHECK(nacts == 2 && strcmp(ids[0], "a0") == 0);
    ms_remember_free(r);
}

/* an id stopped after its shard was listed, before its eager start, is
 * not started; one stopped without leaving the set (a failure) is */
static void test_eager_skips_stopped(void)
{
    struct ms_remember *r = mk(0, 0, 10);
    const char *la[3] = {"s0", "s1", "s2"};
    size_t ll[3] = {2, 2, 2};
    CHECK(ms_remember_shard_started(r, 0, 4, la, ll, 3, 0) == 0);
    CHECK(stop(r, 0, 4, "s1", MS_REMEMBER_EXPLICIT) == 1);
    CHECK(stop(r, 0, 4, "s2", MS_REMEMBER_FAILURE) == 0);
    ms_remember_tick(r, 1);
    drain(r);
    CHECK(count(MS_REMEMBER_ACTIVATE_ID) == 2);
    for (int i = 0; i < nacts; i++)
        CHECK(acts[i].kind != MS_REMEMBER_ACTIVATE_ID ||
              strcmp(ids[i], "s1") != 0);
    CHECK(ms_remember_stats(r)->eager_starts == 2);
    CHECK(ms_remember_stats(r)->eager_skipped == 1);
    CHECK(ms_remember_stats(r)->eager_pending == 0);
    ms_remember_free(r);
}

/* a stop still queued from an earlier stay wins over the list read from
 * a store that has not seen it yet; a duplicate in the list counts once */
static void test_restart_with_queue(void)
{
    struct ms_remember *r = mk(0, 0, 10);
    const char *l[3] = {"a", "b", "a"};
    size_t ll[3] = {1, 1, 1};
    CHECK(ms_remember_shard_started(r, 0, 0, l, ll, 3, 0) == 0);
    CHECK(ms_remember_shard_count(r, 0, 0) == 2);
    ms_remember_tick(r, 0);
    drain(r);
    CHECK(nacts == 2);
    start(r, 0, 0, "c"); /* in flight */
    drain(r);
    uint64_t req = acts[0].req;
    stop(r, 0, 0, "a", MS_REMEMBER_EXPLICIT); /* queued */
    CHECK(ms_remember_shard_stopped(r, 0, 0, 1) == 0);
    CHECK(ms_remember_pending(r, 0, 0) == 2);
    CHECK(ms_remember_shard_started(r, 0, 0, l, ll, 3, 2) == 0);
    CHECK(!ms_remember_contains(r, 0, 0, "a", 1));
    CHECK(ms_remember_shard_count(r, 0, 0) == 1);
    ms_remember_tick(r, 3);
    drain(r);
    CHECK(nacts == 1 && strcmp(ids[0], "b") == 0);
    ms_remember_on_written(r, 0, 0, req, 0, 4);
    drain(r);
    CHECK(nacts == 1 && has(0, "a", MS_REMEMBER_STOP));
    ms_remember_free(r);
}

/* a start still queued from an earlier stay, of an id the store did
 * not list yet, is in the set again and activated; ids are bytes (a NUL
 * inside one is kept) */
static void test_restart_queued_start(void)
{
    struct ms_remember *r = mk(0, 0, 10);
    empty_start(r, 0, 0);
    start(r, 0, 0, "x"); /* in flight */
    drain(r);
    uint64_t req = acts[0].req;
    start(r, 0, 0, "y"); /* queued */
    CHECK(ms_remember_shard_stopped(r, 0, 0, 1) == 0);
    const char *l[1] = {"a\0b"};
    size_t ll[1] = {3};
    CHECK(ms_remember_shard_started(r, 0, 0, l, ll, 1, 2) == 0);
    CHECK(ms_remember_contains(r, 0, 0, "y", 1));
    CHECK(ms_remember_contains(r, 0, 0, "a\0b", 3));
    CHECK(!ms_remember_contains(r, 0, 0, "a", 1));
    ms_remember_tick(r, 3);
    struct ms_remember_action a;
    int n = 0, seen_nul = 0, seen_y = 0;
    while (ms_remember_next_action(r, &a)) {
        n++;
        seen_nul += a.id_len == 3 && memcmp(a.id, "a\0b", 3) == 0;
        seen_y += a.id_len == 1 && a.id[0] == 'y';
    }
    CHECK(n == 2 && seen_nul == 1 && seen_y == 1);
    ms_remember_on_written(r, 0, 0, req, 0, 4);
    drain(r);
    CHECK(nacts == 1 && has(0, "y", MS_REMEMBER_START));
    ms_remember_free(r);
}

/* a shard released for good drops what it still had to write */
static void test_released(void)
{
    struct ms_remember *r = mk(0, 0, 0);
    empty_start(r, 0, 5);
    start(r, 0, 5, "a");
    drain(r);
    uint64_t req = acts[0].req;
    start(r, 0, 5, "b");
    start(r, 0, 5, "c");
    CHECK(ms_remember_shard_released(r, 0, 5, 0) == MS_EBUSY);
    CHECK(ms_remember_shard_stopped(r, 0, 5, 0) == 0);
    ms_remember_on_written(r, 0, 5, req, MS_EDBCONN, 0); /* retried */
    CHECK(ms_remember_pending(r, 0, 5) == 3);
    CHECK(ms_remember_shard_released(r, 0, 5, 1) == 3);
    CHECK(ms_remember_pending(r, 0, 5) == 0);
    CHECK(ms_remember_stats(r)->abandoned == 3);
    CHECK(ms_remember_stats(r)->queued == 0);
    CHECK(ms_remember_stats(r)->inflight == 0);
    ms_remember_tick(r, 10000);
    CHECK(drain(r) == 0);
    /* with a WRITE out: its answer is stale */
    empty_start(r, 0, 5);
    start(r, 0, 5, "d");
    drain(r);
    req = acts[0].req;
    ms_remember_shard_stopped(r, 0, 5, 2);
    CHECK(ms_remember_shard_released(r, 0, 5, 2) == 1);
    ms_remember_on_written(r, 0, 5, req, 0, 3);
    CHECK(ms_remember_stats(r)->stale_answers == 1);
    CHECK(ms_remember_stats(r)->writes == 0);
    CHECK(ms_remember_type_count(r, 0) == 0);
    ms_remember_free(r);
}

/* Random starts, stops, failed and late answers, full queues, restarts
 * (when nothing is pending, as the caller must) against a model store
 * that applies each WRITE answered ok: once every write succeeded, the
 * store holds exactly the machine's set, shard by shard. */
static void test_model(unsigned seed)
{
    const unsigned seed0 = seed;
    enum { NS = 2, NI = 8, STEPS = 5000 };
    struct ms_remember_type t = {NS, 0, 0};
    struct ms_remember_config c = {1, &t, 3, 2, 0};
    struct ms_remember *r = NULL;
    CHECK(ms_remember_new(&r, &c) == 0);
    unsigned store[NS] = {0};
    const char *names[NI] = {"0", "1", "2", "3", "4", "5", "6", "7"};
    size_t lens[NI] = {1, 1, 1, 1, 1, 1, 1, 1};
    struct ms_remember_action out[64];
    int nout = 0, bad = 0;
    uint64_t now = 0;
    for (int s = 0; s < NS; s++)
        empty_start(r, 0, (uint32_t)s);
    for (int step = 0; step < STEPS + 400; step++) {
        seed = seed * 1103515245u + 12345u;
        unsigned x = seed >> 8;
        uint32_t sh = x % NS;
        int quiet = step >= STEPS; /* the end: every write succeeds */
        int kind = quiet ? 3 : (int)((x >> 4) % 8);
        if (kind <= 1) {
            start(r, 0, sh, names[(x >> 8) % NI]);
        } else if (kind == 2) {
            stop(r, 0, sh, names[(x >> 8) % NI], MS_REMEMBER_EXPLICIT);
        } else if (kind <= 5 && nout > 0) {
            /* answer a WRITE out (any shard's), ok or (not at the end)
             * failed */
            int k = (int)((x >> 12) % (unsigned)nout);
            struct ms_remember_action *a = &out[k];
            int fail = !quiet && kind == 5;
            if (!fail) {
                unsigned *st = &store[a->shard];
                if (a->replace)
                    *st = 0;
                for (uint32_t k = 0; k < a->nrecords; k++) {
                    unsigned bit = 1u << atoi(a->records[k].id);
                    if (a->records[k].op == MS_REMEMBER_START)
                        *st |= bit;
                    else
                        *st &= ~bit;
                }
            }
            ms_remember_on_written(r, 0, a->shard, a->req,
                                   fail ? MS_EDBCONN : 0, now);
            /* the same answer again is stale */
            ms_remember_on_written(r, 0, a->shard, a->req, 0, now);
            memmove(out + k, out + k + 1,
                    (size_t)(--nout - k) * sizeof *out);
        } else if (kind == 6 && ms_remember_pending(r, 0, sh) == 0) {
            /* the shard moves away and back: the list is the store */
            const char *l[NI];
            size_t ll[NI];
            uint32_t n = 0;
            for (int i = 0; i < NI; i++)
                if (store[sh] & (1u << i)) {
                    l[n] = names[i];
                    ll[n++] = 1;
                }
            ms_remember_shard_stopped(r, 0, sh, now);
            ms_remember_shard_started(r, 0, sh, l, ll, n, now);
        } else {
            now += MS_REMEMBER_BACKOFF_MAX_MS;
            ms_remember_tick(r, now);
        }
        struct ms_remember_action a;
        while (ms_remember_next_action(r, &a))
            if (a.kind == MS_REMEMBER_WRITE) {
                if (nout < 64)
                    out[nout++] = a;
                else
                    bad++;
            }
        /* nothing pending: the store must hold the set */
        for (uint32_t s = 0; s < NS; s++) {
            if (ms_remember_pending(r, 0, s) != 0)
                continue;
            unsigned set = 0;
            for (int i = 0; i < NI; i++)
                if (ms_remember_contains(r, 0, s, names[i], lens[i]))
                    set |= 1u << i;
            bad += set != store[s];
        }
    }
    CHECK(bad == 0 && nout == 0);
    for (uint32_t s = 0; s < NS; s++) {
        CHECK(ms_remember_pending(r, 0, s) == 0);
        unsigned set = 0;
        for (int i = 0; i < NI; i++)
            if (ms_remember_contains(r, 0, s, names[i], lens[i]))
                set |= 1u << i;
        CHECK(set == store[s]);
    }
    const struct ms_remember_stats *st = ms_remember_stats(r);
    CHECK(st->drops > 0 && st->resyncs > 0 && st->errors > 0);
    CHECK(st->cancelled > 0 && st->coalesced > 0);
    if (check_failures)
        fprintf(stderr, "test_model: seed %u\n", seed0);
    ms_remember_free(r);
}

/* 256 shards of 400 ids each: every id is activated once, in its shard's
 * order, at most the budget per tick, shards taking turns */
static void test_many(void)
{
    enum { SH = 256, PER = 400 };
    struct ms_remember_type t = {SH, 0, 0};
    struct ms_remember_config c = {1, &t, 0, 0, 500};
    struct ms_remember *r = NULL;
    CHECK(ms_remember_new(&r, &c) == 0);
    static char store[PER][16];
    const char *l[PER];
    size_t ll[PER];
    for (int i = 0; i < PER; i++) {
        ll[i] = (size_t)snprintf(store[i], sizeof store[i], "%d", i);
        l[i] = store[i];
    }
    for (uint32_t s = 0; s < SH; s++)
        CHECK(ms_remember_shard_started(r, 0, s, l, ll, PER, 0) == 0);
    CHECK(ms_remember_type_count(r, 0) == (uint64_t)SH * PER);
    static int next[SH];
    int ticks = 0, bad = 0;
    uint64_t total = 0;
    while (ms_remember_stats(r)->eager_pending > 0 && ticks < 1000) {
        ms_remember_tick(r, (uint64_t)ticks++);
        struct ms_remember_action a;
        int n = 0;
        while (ms_remember_next_action(r, &a)) {
            n++;
            if (atoi(a.id) != next[a.shard]++)
                bad++;
        }
        if (n > 500)
            bad++;
        total += (uint64_t)n;
        /* fairness: no shard more than one turn ahead of another */
        int lo = PER, hi = 0;
        for (int s = 0; s < SH; s++) {
            lo = next[s] < lo ? next[s] : lo;
            hi = next[s] > hi ? next[s] : hi;
        }
        if (hi - lo > 1)
            bad++;
    }
    CHECK(bad == 0);
    CHECK(total == (uint64_t)SH * PER);
    CHECK(ticks == SH * PER / 500 + (SH * PER % 500 != 0));
    ms_remember_free(r);
}

int main(void)
{
    test_eager_skips_stopped();
    test_arguments();
    test_group_commit();
    test_coalesce();
    test_full_queue();
    test_retry_fail_open();
    test_fail_closed();
    test_fail_then_cancel();
    test_resync_fail_then_change();
    test_stop_reasons();
    test_eager();
    test_restart_with_queue();
    test_restart_queued_start();
    test_released();
    for (unsigned seed = 1; seed <= 40 && !check_failures; seed++)
        test_model(seed);
    test_many();
    CHECK(strcmp(ms_errname(MS_EREMEMBER), "remember_store_failed") == 0);
    CHECK_DONE();
}
