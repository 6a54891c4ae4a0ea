/* The sans-IO dispatcher driven step by step, without Lua or sockets. */
#include <string.h>

#include "../../runtime/core/dispatch.h"
#include "check.h"

static int cb_calls, cb_err;
static char cb_payload[256];

static void on_ask(void *data, int err, const char *payload, size_t len)
{
    (void)data;
    cb_calls++;
    cb_err = err;
    snprintf(cb_payload, sizeof cb_payload, "%.*s", (int)len, payload);
}

/* The sends as the node's edge makes them: resolve, then send. */
static int tell(struct ms_dispatch *d, int type, const char *id,
                size_t idlen, const char *json, size_t len)
{
    struct ms_dest dst;
    int rc = ms_dispatch_resolve(d, type, id, idlen, &dst);
    return rc < 0 ? rc : ms_dispatch_tell(d, &dst, json, len);
}

static int64_t ask(struct ms_dispatch *d, int type, const char *id,
                   size_t idlen, const char *json, size_t len,
                   uint64_t timeout_ms, uint64_t now_ms,
                   const struct ms_waiter *w)
{
    struct ms_dest dst;
    int rc = ms_dispatch_resolve(d, type, id, idlen, &dst);
    return rc < 0 ? rc
                  : ms_dispatch_ask(d, &dst, json, len, timeout_ms, now_ms,
                                    w);
}

static int stop(struct ms_dispatch *d, int type, const char *id,
                size_t idlen)
{
    struct ms_dest dst;
    int rc = ms_dispatch_resolve(d, type, id, idlen, &dst);
    return rc < 0 ? rc : ms_dispatch_stop(d, &dst);
}

#define TELL(d, id, js) tell(d, 0, id, strlen(id), js, strlen(js))

static struct ms_dispatch *make(uint32_t shards, uint32_t max_pending,
                                uint64_t idle_ms)
{
    struct ms_dispatch_type t = {"T", shards, idle_ms, 0, max_pending, 0};
    return ms_dispatch_new(&t, 1, 1024);
}

static void fifo_per_shard(void)
{
    struct ms_dispatch *d = make(1, 100, 0);
    char id[8], js[16];
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof id, "e%d", i % 5);
        snprintf(js, sizeof js, "{\"n\":%d}", i);
        CHECK(TELL(d, id, js) == 0);
    }
    struct ms_delivery dl;
    for (int i = 0; i < 20; i++) {
        CHECK(ms_dispatch_next(d, &dl) == 1);
        snprintf(js, sizeof js, "{\"n\":%d}", i);
        CHECK(strcmp(dl.payload, js) == 0);
        CHECK(dl.init == (i < 5));
        ms_dispatch_done(d, dl.h, 0);
    }
    CHECK(ms_dispatch_next(d, &dl) == 0);
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.activations == 5 && st.delivered == 20 && st.routed == 20);
    ms_dispatch_free(d);
}

static void busy_entity_does_not_block_shard(void)
{
    struct ms_dispatch *d = make(1, 100, 0);
    struct ms_delivery dl;
    TELL(d, "a", "{\"n\":1}");
    CHECK(ms_dispatch_next(d, &dl) == 1);
    uint32_t ha = dl.h;
    TELL(d, "a", "{\"n\":2}");
    TELL(d, "b", "{\"n\":3}");
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(strcmp(dl.payload, "{\"n\":3}") == 0); /* a is busy, b goes on */
    ms_dispatch_done(d, dl.h, 0);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    ms_dispatch_done(d, ha, 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.h == ha && strcmp(dl.payload, "{\"n\":2}") == 0);
    CHECK(dl.init == 0);
    ms_dispatch_done(d, dl.h, 0);
    ms_dispatch_free(d);
}

static void asks_end_exactly_once(void)
{
    struct ms_dispatch *d = make(4, 100, 0);
    struct ms_waiter w = {on_ask, NULL, 0};
    struct ms_delivery dl;
    cb_calls = 0;
    CHECK(ask(d, 0, "x", 1, "{}", 2, 1000, 0, &w) > 0);
    CHECK(cb_calls == 0);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_ASK);
    CHECK(ms_dispatch_reply(d, dl.h, "{\"v\":1}", 7, 0) == 0);
    CHECK(cb_calls == 1 && cb_err == 0 && strcmp(cb_payload, "{\"v\":1}") == 0);
    CHECK(ms_dispatch_reply(d, dl.h, "{}", 2, 0) == MS_EINVAL);
    ms_dispatch_done(d, dl.h, 0);
    CHECK(cb_calls == 1);

    /* no reply */
    CHECK(ask(d, 0, "x", 1, "{}", 2, 1000, 0, &w) > 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    ms_dispatch_done(d, dl.h, 0);
    CHECK(cb_calls == 2 && cb_err == MS_ENOREPLY);

    /* handler error */
    CHECK(ask(d, 0, "x", 1, "{}", 2, 1000, 0, &w) > 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    ms_dispatch_fail(d, dl.h, "boom", 0);
    ms_dispatch_done(d, dl.h, 0);
    CHECK(cb_calls == 3 && cb_err == MS_EHANDLER);
    CHECK(strstr(cb_payload, "\"handler_error\"") && strstr(cb_payload, "boom"));

    /* timeout, then a late reply is dropped */
    CHECK(ask(d, 0, "x", 1, "{}", 2, 50, 0, &w) > 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(ms_dispatch_next_deadline(d, 0) == 50);
    ms_dispatch_expire(d, 49);
    CHECK(cb_calls == 3);
    ms_dispatch_expire(d, 50);
    CHECK(cb_calls == 4 && cb_err == MS_ETIMEDOUT);
    CHECK(ms_dispatch_reply(d, dl.h, "{}", 2, 0) == 0);
    ms_dispatch_done(d, dl.h, 60);
    CHECK(cb_calls == 4);

    /* a reply made after the deadline, before its timer could fire, is a
     * timeout for the asker */
    CHECK(ask(d, 0, "x", 1, "{}", 2, 50, 100, &w) > 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(ms_dispatch_reply(d, dl.h, "{}", 2, 150) == 0);
    CHECK(cb_calls == 5 && cb_err == MS_ETIMEDOUT);
    ms_dispatch_done(d, dl.h, 150);
    ms_dispatch_expire(d, 200);
    CHECK(cb_calls == 5);

    CHECK(ask(d, 0, "x", 1, "{}", 2, 0, 0, &w) == MS_EINVAL);
    CHECK(ask(d, 1, "x", 1, "{}", 2, 10, 0, &w) == MS_ENOTYPE);
    ms_dispatch_free(d);
}

static void entity_waiters_resume(void)
{
    struct ms_dispatch *d = make(4, 100, 0);
    struct ms_delivery dl, dl2;
    struct ms_resume r;
    TELL(d, "a", "{}");
    CHECK(ms_dispatch_next(d, &dl) == 1);
    struct ms_waiter w = {NULL, NULL, dl.h};
    CHECK(ask(d, 0, "a", 1, "{}", 2, 10, 0, &w) == MS_ESELF);
    CHECK(ask(d, 0, "b", 1, "{}", 2, 1000, 0, &w) > 0);
    CHECK(ms_dispatch_next(d, &dl2) == 1 && dl2.kind == MS_KIND_ASK);
    CHECK(ms_dispatch_next_resume(d, &r) == 0);
    ms_dispatch_reply(d, dl2.h, "{\"ok\":true}", 11, 0);
    ms_dispatch_done(d, dl2.h, 0);
    CHECK(ms_dispatch_next_resume(d, &r) == 1);
    CHECK(r.h == dl.h && r.err == 0 && strcmp(r.payload, "{\"ok\":true}") == 0);
    CHECK(ms_dispatch_next_resume(d, &r) == 0);
    ms_dispatch_done(d, dl.h, 0);
    ms_dispatch_free(d);
}

static void bounds_and_passivation(void)
{
    struct ms_dispatch *d = make(1, 3, 100);
    struct ms_delivery dl;
    CHECK(TELL(d, "a", "{}") == 0);
    CHECK(TELL(d, "a", "{}") == 0);
    CHECK(TELL(d, "a", "{}") == 0);
    CHECK(TELL(d, "a", "{}") == MS_EOVERFLOW);
    char big[600];
    memset(big, 'x', sizeof big);
    CHECK(tell(d, 0, big, sizeof big, "{}", 2) == MS_E2BIG);
    CHECK(tell(d, 0, "", 0, "{}", 2) == MS_E2BIG);
    for (int i = 0; i < 3; i++) {
        CHECK(ms_dispatch_next(d, &dl) == 1);
        ms_dispatch_done(d, dl.h, 10);
    }
    /* idle 100 ms: passivated between 100 and 200 ms after the last
     * message (handled at 10), never before */
    int64_t due = ms_dispatch_next_deadline(d, 10);
    CHECK(due >= 0 && due <= 100);
    for (uint64_t now = 10; now < 110; now += 7) {
        ms_dispatch_expire(d, now);
        CHECK(ms_dispatch_next(d, &dl) == 0);
    }
    int stopped = 0;
    for (uint64_t now = 110; now <= 210 && !stopped; now += 7) {
        ms_dispatch_expire(d, now);
        if (ms_dispatch_next(d, &dl) == 1) {
            CHECK(dl.kind == MS_KIND_STOP);
            stopped = 1;
            ms_dispatch_done(d, dl.h, now);
        }
    }
    CHECK(stopped);
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.passivations == 1 && st.active_entities == 0 && st.overflows == 1);
    /* the next message activates it again */
    TELL(d, "a", "{}");
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init == 1);
    /* ctx:stop() passivates after the current message */
    ms_dispatch_stop_self(d, dl.h);
    ms_dispatch_done(d, dl.h, 120);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_STOP);
    ms_dispatch_done(d, dl.h, 120);
    /* an explicit stop of an inactive entity is a no-op */
    CHECK(stop(d, 0, "a", 1) == 0);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    ms_dispatch_free(d);
}

static void timers_fire_and_cancel(void)
{
    struct ms_dispatch *d = make(2, 100, 0);
    struct ms_delivery dl;
    TELL(d, "a", "{}");
    CHECK(ms_dispatch_next(d, &dl) == 1);
    int64_t t1 = ms_dispatch_after(d, dl.h, 10, "{\"t\":1}", 7, 0);
    int64_t t2 = ms_dispatch_after(d, dl.h, 20, "{\"t\":2}", 7, 0);
    CHECK(t1 > 0 && t2 > 0);
    CHECK(ms_dispatch_cancel(d, dl.h, t2) == 1);
    CHECK(ms_dispatch_cancel(d, dl.h, t2) == 0);
    ms_dispatch_done(d, dl.h, 0);
    ms_dispatch_expire(d, 30);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(strcmp(dl.payload, "{\"t\":1}") == 0);
    ms_dispatch_done(d, dl.h, 30);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    ms_dispatch_free(d);
}

static void mailboxes_count_against_the_shard_bound(void)
{
    struct ms_dispatch *d = make(1, 5, 0);
    struct ms_delivery dl;
    TELL(d, "a", "{}");
    CHECK(ms_dispatch_next(d, &dl) == 1); /* a is busy from now on */
    int accepted = 0;
    for (int i = 0; i < 100; i++)
        if (TELL(d, "a", "{}") == 0)
            accepted++;
    CHECK(accepted == 5);
    CHECK(ms_dispatch_next(d, &dl) == 0); /* all five wait in a's mailbox */
    CHECK(ms_dispatch_pending(d) == 5);
    CHECK(stop(d, 0, "a", 1) == MS_EOVERFLOW); /* stops too */
    ms_dispatch_done(d, dl.h, 0);
    for (int i = 0; i < 5; i++) {
        CHECK(ms_dispatch_next(d, &dl) == 1);
        ms_dispatch_done(d, dl.h, 0);
    }
    CHECK(ms_dispatch_pending(d) == 0);
    CHECK(TELL(d, "a", "{}") == 0);
    ms_dispatch_free(d);
}

static void shutdown_stops_after_accepted_messages(void)
{
    struct ms_dispatch *d = make(1, 100, 0);
    struct ms_delivery dl;
    TELL(d, "a", "{\"n\":1}");
    CHECK(ms_dispatch_next(d, &dl) == 1);
    uint32_t ha = dl.h;
    TELL(d, "a", "{\"n\":2}");
    TELL(d, "b", "{\"n\":3}");
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.h != ha); /* b activates */
    ms_dispatch_done(d, dl.h, 0);
    TELL(d, "c", "{\"n\":4}"); /* would activate c: dropped */
    ms_dispatch_shutdown(d);
    CHECK(TELL(d, "a", "{}") == MS_ECANCELED);
    ms_dispatch_done(d, ha, 0); /* a finishes n1; n2 is next, then stop */
    int seen_n2 = 0, stops = 0, a_stopped = 0, others = 0;
    while (ms_dispatch_next(d, &dl) == 1) {
        if (dl.h == ha && dl.kind == MS_KIND_TELL) {
            CHECK(!a_stopped); /* n2 before a's stop */
            seen_n2 = 1;
        } else if (dl.kind == MS_KIND_STOP) {
            stops++;
            a_stopped |= dl.h == ha;
        } else {
            others++;
        }
        ms_dispatch_done(d, dl.h, 0);
    }
    CHECK(seen_n2 && stops == 2 && others == 0);
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.shutdown_drops == 1 && st.active_entities == 0);
    ms_dispatch_free(d);
}

static void timers_keep_an_entity_from_idling_out(void)
{
    struct ms_dispatch *d = make(1, 100, 100);
    struct ms_delivery dl;
    TELL(d, "a", "{}");
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(ms_dispatch_after(d, dl.h, 1000, "{\"t\":1}", 7, 0) > 0);
    ms_dispatch_done(d, dl.h, 0);
    for (uint64_t now = 0; now < 1000; now += 50) {
        ms_dispatch_expire(d, now);
        CHECK(ms_dispatch_next(d, &dl) == 0);
    }
    ms_dispatch_expire(d, 1000);
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.kind == MS_KIND_TELL);
    CHECK(dl.init == 0); /* the same activation */
    for (int i = 0; i < MS_MAX_TIMERS; i++)
        CHECK(ms_dispatch_after(d, dl.h, 10, "{}", 2, 0) > 0);
    CHECK(ms_dispatch_after(d, dl.h, 10, "{}", 2, 0) == MS_EOVERFLOW);
    ms_dispatch_done(d, dl.h, 1000);
    ms_dispatch_free(d);
}

static void replies_are_bounded_and_resumes_name_their_ask(void)
{
    struct ms_dispatch *d = make(2, 100, 0);
    struct ms_delivery dl, dl2;
    struct ms_resume r;
    TELL(d, "a", "{}");
    CHECK(ms_dispatch_next(d, &dl) == 1);
    struct ms_waiter w = {NULL, NULL, dl.h};
    int64_t corr = ask(d, 0, "b", 1, "{}", 2, 1000, 0, &w);
    CHECK(corr > 0);
    CHECK(ms_dispatch_next(d, &dl2) == 1);
    char big[2000];
    memset(big, ' ', sizeof big);
    CHECK(ms_dispatch_reply(d, dl2.h, big, sizeof big, 0) == MS_E2BIG);
    CHECK(ms_dispatch_reply(d, dl2.h, "{}", 2, 0) == 0);
    ms_dispatch_done(d, dl2.h, 0);
    CHECK(ms_dispatch_next_resume(d, &r) == 1 && r.corr == (uint64_t)corr);
    ms_dispatch_done(d, dl.h, 0);
    ms_dispatch_free(d);
}

/* Handoff: a shard stop lets every entity handle what it had accepted,
 * then passivates them (STOP deliveries) and reports the shard once; a
 * busy entity holds it; what reaches the shard after its marker is failed
 * and counted; a resume calls it off. Other shards run on. */
static void shard_stop_drains_then_passivates(void)
{
    struct ms_dispatch *d = make(1, 100, 0);
    struct ms_delivery dl;
    int type;
    uint32_t shard;
    TELL(d, "a", "{\"n\":1}");
    TELL(d, "b", "{\"n\":2}");
    CHECK(ms_dispatch_next(d, &dl) == 1); /* a busy */
    uint32_t ha = dl.h;
    TELL(d, "a", "{\"n\":3}");
    CHECK(ms_dispatch_shard_stop(d, 0, 0) == 0);
    CHECK(ms_dispatch_shard_stop(d, 0, 0) == 0); /* under way: no-op */
    CHECK(ms_dispatch_shard_stopping(d, 0, 0) == 1);
    CHECK(ms_dispatch_shard_stop(d, 0, 1) == MS_EINVAL);
    /* b's message, then b's STOP (b is idle once the marker passes) */
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(strcmp(dl.payload, "{\"n\":2}") == 0);
    uint32_t hb = dl.h;
    ms_dispatch_done(d, hb, 0);
    /* a timer firing after the marker: failed and counted */
    CHECK(ms_dispatch_after(d, ha, 0, "{\"t\":1}", 7, 0) > 0);
    ms_dispatch_expire(d, 1);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.kind == MS_KIND_STOP && dl.h == hb);
    ms_dispatch_done(d, hb, 0);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 0); /* a is busy */
    ms_dispatch_done(d, ha, 0);
    /* a: its accepted message, then its STOP */
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.h == ha && strcmp(dl.payload, "{\"n\":3}") == 0);
    ms_dispatch_done(d, ha, 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.kind == MS_KIND_STOP && dl.h == ha);
    ms_dispatch_done(d, ha, 0);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1);
    CHECK(type == 0 && shard == 0);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 0);
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.passivations == 2 && st.active_entities == 0 &&
          st.shards_stopped == 1 && st.handoff_drops == 1);
    CHECK(ms_dispatch_pending(d) == 0);
    CHECK(ms_dispatch_shard_stopping(d, 0, 0) == 0);

    /* an empty shard stops at once; a resumed one works as before */
    CHECK(ms_dispatch_shard_stop(d, 0, 0) == 0);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1);
    TELL(d, "c", "{\"n\":4}");
    CHECK(ms_dispatch_shard_stop(d, 0, 0) == 0);
    ms_dispatch_shard_resume(d, 0, 0);
    TELL(d, "c", "{\"n\":5}");
    for (int i = 4; i <= 5; i++) {
        CHECK(ms_dispatch_next(d, &dl) == 1);
        CHECK(dl.kind == MS_KIND_TELL && dl.payload[5] == '0' + i);
        ms_dispatch_done(d, dl.h, 0);
    }
    CHECK(ms_dispatch_next(d, &dl) == 0);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 0);
    ms_dispatch_stats(d, &st);
    CHECK(st.active_entities == 1 && st.handoff_drops == 1);
    ms_dispatch_free(d);
}

/* A type's own partitioner: "N:rest" goes to shard N. */
static int part_calls;
static int by_prefix(void *data, int type, const char *id, size_t idlen,
                     uint32_t shard_count, uint32_t *shard)
{
    (void)data;
    (void)type;
    (void)shard_count;
    part_calls++;
    if (idlen == 0 || id[0] < '0' || id[0] > '9')
        return MS_EPARTITION;
    *shard = (uint32_t)(id[0] - '0'); /* unchecked: 8 and 9 are too big */
    return 0;
}

static void custom_partitioner_places_messages(void)
{
    int calls;
    struct ms_dispatch_type t[2] = {{"P", 8, 0, 0, 100, 1},
                                    {"D", 8, 0, 0, 100, 0}};
    struct ms_dispatch *d = ms_dispatch_new(t, 2, 1024);
    struct ms_waiter w = {on_ask, NULL, 0};
    /* refused until the partitioner is set, and nothing was accepted */
    CHECK(tell(d, 0, "3:a", 3, "{}", 2) == MS_EPARTITION);
    CHECK(ms_dispatch_pending(d) == 0);
    ms_dispatch_set_partitioner(d, by_prefix, NULL);
    uint32_t shard = 99;
    CHECK(ms_dispatch_shard_of(d, 0, "5:x", 3, &shard) == 0 && shard == 5);
    CHECK(tell(d, 0, "3:a", 3, "{}", 2) == 0);
    CHECK(tell(d, 0, "3:b", 3, "{}", 2) == 0);
    CHECK(ask(d, 0, "6:c", 3, "{}", 2, 1000, 0, &w) > 0);
    CHECK(stop(d, 0, "3:a", 3) == 0);
    /* its errors, and shards out of range, refuse the message */
    CHECK(tell(d, 0, "x", 1, "{}", 2) == MS_EPARTITION);
    CHECK(tell(d, 0, "9:z", 3, "{}", 2) == MS_EPARTITION);
    CHECK(ask(d, 0, "x", 1, "{}", 2, 1000, 0, &w) ==
          MS_EPARTITION);
    CHECK(stop(d, 0, "x", 1) == MS_EPARTITION);
    CHECK(ms_dispatch_shard_of(d, 5, "3:a", 3, &shard) == MS_ENOTYPE);
    /* it sees only ids a send accepts */
    char big[MS_MAX_ID + 2];
    memset(big, '4', sizeof big);
    CHECK(ms_dispatch_shard_of(d, 0, big, MS_MAX_ID + 1, &shard) ==
          MS_E2BIG);
    CHECK(ms_dispatch_shard_of(d, 0, big, 0, &shard) == MS_E2BIG);
    calls = part_calls;
    /* the default type does not call it */
    CHECK(tell(d, 1, "3:a", 3, "{}", 2) == 0);
    CHECK(part_calls == calls);
    struct ms_delivery dl;
    int seen[8] = {0};
    while (ms_dispatch_next(d, &dl) == 1) {
        if (dl.type == 0) {
            CHECK(dl.shard == (uint32_t)(dl.id[0] - '0'));
            seen[dl.shard]++;
        } else {
            CHECK(dl.shard == ms_shard_of("3:a", 3, 8));
        }
        ms_dispatch_done(d, dl.h, 0);
    }
    CHECK(seen[3] == 3 && seen[6] == 1); /* two tells and the stop; ask */
    CHECK(ms_dispatch_pending(d) == 0);
    /* a shard stop finds the entities the partitioner placed there */
    CHECK(tell(d, 0, "3:b", 3, "{}", 2) == 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    ms_dispatch_done(d, dl.h, 0);
    CHECK(ms_dispatch_shard_stop(d, 0, 3) == 0);
    while (ms_dispatch_next(d, &dl) == 1)
        ms_dispatch_done(d, dl.h, 0);
    int type;
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1);
    CHECK(type == 0 && shard == 3);
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.active_entities == 2); /* 6:c, and D's 3:a */
    ms_dispatch_free(d);
}

/* Only the node an ask was sent to may answer it. */
static void asks_remember_where_they_went(void)
{
    struct ms_dispatch *d = make(4, 100, 0);
    struct ms_waiter w = {on_ask, NULL, 0};
    int64_t corr = ms_dispatch_ask_open(d, 1000, 0, &w);
    CHECK(corr > 0);
    CHECK(!ms_dispatch_ask_sent_to(d, corr, 7)); /* not sent anywhere yet */
    CHECK(!ms_dispatch_ask_sent_to(d, corr, 0));
    ms_dispatch_ask_set_peer(d, corr, 7);
    CHECK(ms_dispatch_ask_sent_to(d, corr, 7));
    CHECK(!ms_dispatch_ask_sent_to(d, corr, 8));
    ms_dispatch_ask_set_peer(d, corr, 0); /* re-routed: waits here */
    CHECK(!ms_dispatch_ask_sent_to(d, corr, 7));
    ms_dispatch_ask_set_peer(d, corr, 8);
    CHECK(ms_dispatch_ask_sent_to(d, corr, 8));
    /* an answer from another node does not end it; one from 8 does */
    cb_calls = 0;
    CHECK(ms_dispatch_ask_answer(d, corr, 7, 0, "{}", 2) == 0);
    CHECK(cb_calls == 0 && ms_dispatch_ask_pending(d, corr));
    CHECK(ms_dispatch_ask_answer(d, corr, 8, 0, "{\"v\":1}", 7) == 1);
    CHECK(cb_calls == 1 && strcmp(cb_payload, "{\"v\":1}") == 0);
    CHECK(ms_dispatch_ask_answer(d, corr, 8, 0, "{}", 2) == 0); /* once */
    CHECK(!ms_dispatch_ask_sent_to(d, corr, 8)); /* ended */
    ms_dispatch_ask_set_peer(d, corr, 9);        /* no-op once ended */
    CHECK(!ms_dispatch_ask_sent_to(d, corr, 9));
    ms_dispatch_free(d);
}

/* The two ways a send finds nobody to serve it get two codes: a type
 * whose module failed to load is `unavailable`; an ask that reaches a
 * shard after its stop (the shard moves away) is `no_owner`. */
static void unavailable_and_no_owner_differ(void)
{
    struct ms_dispatch *d = make(1, 100, 0);
    struct ms_waiter w = {on_ask, NULL, 0};
    struct ms_delivery dl;
    ms_dispatch_set_unavailable(d, 0, 1);
    CHECK(TELL(d, "a", "{}") == MS_EUNAVAIL);
    CHECK(ask(d, 0, "a", 1, "{}", 2, 1000, 0, &w) ==
          MS_EUNAVAIL);
    ms_dispatch_set_unavailable(d, 0, 0);
    TELL(d, "a", "{}");
    CHECK(ms_dispatch_next(d, &dl) == 1); /* a busy: the stop waits */
    CHECK(ms_dispatch_shard_stop(d, 0, 0) == 0);
    cb_calls = 0;
    CHECK(ask(d, 0, "b", 1, "{}", 2, 1000, 0, &w) > 0);
    ms_dispatch_done(d, dl.h, 0);
    while (ms_dispatch_next(d, &dl) == 1)
        ms_dispatch_done(d, dl.h, 0);
    CHECK(cb_calls == 1 && cb_err == MS_ENOOWNER);
    CHECK(strstr(cb_payload, "\"code\":\"no_owner\"") != NULL);
    CHECK(strcmp(ms_errname(MS_EUNAVAIL), "unavailable") == 0);
    ms_dispatch_free(d);
}

/* A destination is resolved once: ms_dispatch_resolve runs the
 * partitioner and fills the hash and shard; the sends that take it do not
 * run it again, and a message lands where the resolution said. */
static void a_destination_is_resolved_once(void)
{
    struct ms_dispatch_type t = {"P", 8, 0, 0, 100, 1};
    struct ms_dispatch *d = ms_dispatch_new(&t, 1, 1024);
    ms_dispatch_set_partitioner(d, by_prefix, NULL);
    struct ms_waiter w = {on_ask, NULL, 0};
    struct ms_dest dst;
    int calls = part_calls;
    CHECK(ms_dispatch_resolve(d, 0, "6:a", 3, &dst) == 0);
    CHECK(part_calls == calls + 1);
    CHECK(dst.type == 0 && dst.shard == 6 && dst.idlen == 3 &&
          dst.hash == ms_fnv1a64("6:a", 3));
    CHECK(ms_dispatch_tell(d, &dst, "{}", 2) == 0);
    CHECK(ms_dispatch_ask(d, &dst, "{}", 2, 1000, 0, &w) > 0);
    CHECK(ms_dispatch_activate(d, &dst, 1000, 0, &w) > 0);
    CHECK(ms_dispatch_stop(d, &dst) == 0);
    int64_t corr = ms_dispatch_ask_open(d, 1000, 0, &w);
    CHECK(ms_dispatch_ask_enqueue(d, corr, MS_KIND_ASK, &dst, "{}", 2) == 1);
    CHECK(part_calls == calls + 1);
    struct ms_delivery dl;
    int n = 0;
    while (ms_dispatch_next(d, &dl)) {
        CHECK(dl.shard == 6);
        ms_dispatch_done(d, dl.h, 0);
        n++;
    }
    CHECK(n >= 2); /* the tell, then the entity waits for each answer */
    /* the bad ones are refused where they are resolved */
    CHECK(ms_dispatch_resolve(d, 1, "6:a", 3, &dst) == MS_ENOTYPE);
    CHECK(ms_dispatch_resolve(d, 0, "", 0, &dst) == MS_E2BIG);
    CHECK(ms_dispatch_resolve(d, 0, "x", 1, &dst) == MS_EPARTITION);
    ms_dispatch_free(d);
}

/* ---- the observer (remember-entities) --------------------------------- */

static char seen[32][24];
static int nseen;

static void observe(void *data, int type, uint32_t shard, const char *id,
                    size_t idlen, int started, int reason)
{
    (void)data;
    (void)type;
    (void)shard;
    if (nseen < 32)
        snprintf(seen[nseen++], sizeof seen[0], "%s %.*s %d",
                 started ? "start" : "stop", (int)idlen, id, reason);
}

/* Runs everything ready; `fail_id` raises in its handler. */
static void run_all(struct ms_dispatch *d, const char *fail_id,
                    const char *self_stop_id, uint64_t now)
{
    struct ms_delivery dl;
    while (ms_dispatch_next(d, &dl) == 1) {
        if (dl.kind != MS_KIND_STOP && fail_id &&
            strncmp(dl.id, fail_id, dl.idlen) == 0 && !dl.init)
            ms_dispatch_fail(d, dl.h, "boom", 0);
        if (dl.kind != MS_KIND_STOP && self_stop_id &&
            strncmp(dl.id, self_stop_id, dl.idlen) == 0)
            ms_dispatch_stop_self(d, dl.h);
        ms_dispatch_done(d, dl.h, now);
    }
}

static int saw(const char *what)
{
    for (int i = 0; i < nseen; i++)
        if (strcmp(seen[i], what) == 0)
            return 1;
    return 0;
}

static void observer_reports_starts_and_stop_reasons(void)
{
    struct ms_dispatch_type t = {"T", 4, 1000, 1, 100, 0};
    struct ms_dispatch *d = ms_dispatch_new(&t, 1, 1024);
    ms_dispatch_set_observer(d, 0, observe, NULL);
    nseen = 0;
    const char *ids[] = {"a", "b", "c", "f", "i"};
    for (int i = 0; i < 5; i++)
        CHECK(TELL(d, ids[i], "{}") == 0);
    run_all(d, NULL, NULL, 0);
    CHECK(nseen == 5 && saw("start a 0") && saw("start i 0"));
    /* an activation whose init fails is no start */
    CHECK(TELL(d, "x", "{}") == 0);
    struct ms_delivery dl;
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init);
    ms_dispatch_fail(d, dl.h, "init failed", 1);
    ms_dispatch_done(d, dl.h, 0);
    CHECK(nseen == 5);
    /* a stop request, ctx:stop(), a failure (on_error stop), idle */
    CHECK(stop(d, 0, "a", 1) == 0);
    CHECK(TELL(d, "b", "{}") == 0);
    CHECK(TELL(d, "f", "{}") == 0);
    run_all(d, "f", "b", 10);
    CHECK(saw("stop a 1"));  /* MS_STOP_EXPLICIT */
    CHECK(saw("stop b 1"));
    CHECK(saw("stop f 3"));  /* MS_STOP_FAILURE */
    ms_dispatch_expire(d, 5000);
    run_all(d, NULL, NULL, 5000);
    CHECK(saw("stop c 2"));  /* MS_STOP_IDLE */
    /* a shard stop (handoff) and a shutdown */
    CHECK(TELL(d, "c", "{}") == 0);
    CHECK(TELL(d, "i", "{}") == 0);
    run_all(d, NULL, NULL, 6000);
    uint32_t sc, si;
    CHECK(ms_dispatch_shard_of(d, 0, "c", 1, &sc) == 0);
    CHECK(ms_dispatch_shard_of(d, 0, "i", 1, &si) == 0);
    CHECK(ms_dispatch_shard_stop(d, 0, sc) == 0);
    run_all(d, NULL, NULL, 6000);
    CHECK(saw("stop c 5"));  /* MS_STOP_HANDOFF */
    if (si != sc) {
        ms_dispatch_shutdown(d);
        run_all(d, NULL, NULL, 6000);
        CHECK(saw("stop i 4"));  /* MS_STOP_NODE */
    }
    ms_dispatch_free(d);
}

/* A quiet stop (ms_dispatch_set_quiet_stop): when the marker passes, the
 * idle entities go at once (counted, their timers cancelled), without a
 * STOP delivery, and their handles wait, parked, until the host released
 * them; a busy entity and one with mail get their STOP after their work,
 * as before. An observed type is never stopped quietly. */
static void quiet_stop_parks_idle_entities(void)
{
    struct ms_dispatch *d = make(1, 100, 0);
    ms_dispatch_set_quiet_stop(d, 0, 1);
    struct ms_delivery dl;
    const uint32_t *parked;
    int type;
    uint32_t shard;
    const char *ids[] = {"a", "b", "c", "d"};
    uint32_t h[4];
    for (int i = 0; i < 4; i++) {
        CHECK(TELL(d, ids[i], "{}") == 0);
        CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init);
        h[i] = dl.h;
        if (i < 3)
            ms_dispatch_done(d, dl.h, 0);
    }
    /* b has a timer, c has mail waiting, d is busy */
    CHECK(ms_dispatch_after(d, h[1], 0, "{\"t\":1}", 7, 60000) > 0);
    CHECK(ms_dispatch_next_deadline(d, 0) >= 0);
    CHECK(TELL(d, "c", "{\"m\":1}") == 0);
    CHECK(ms_dispatch_shard_stop(d, 0, 0) == 0);
    /* c's message, before the marker */
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.h == h[2]);
    CHECK(ms_dispatch_parked(d, &parked) == 0);
    /* c is busy as the marker passes: a and b go quietly */
    CHECK(ms_dispatch_next(d, &dl) == 0);
    CHECK(ms_dispatch_parked(d, &parked) == 2);
    CHECK((parked[0] == h[0] && parked[1] == h[1]) ||
          (parked[0] == h[1] && parked[1] == h[0]));
    CHECK(ms_dispatch_has_work(d) == 1);
    uint32_t sh;
    const char *id;
    size_t idlen;
    CHECK(!ms_dispatch_entity(d, h[0], &type, &id, &idlen, &sh));
    CHECK(!ms_dispatch_entity(d, h[1], &type, &id, &idlen, &sh));
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.passivations == 2 && st.active_entities == 2);
    CHECK(ms_dispatch_next_deadline(d, 0) == -1); /* b's timer is gone */
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 0);
    /* c and d: their STOP after their work */
    ms_dispatch_done(d, h[2], 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.kind == MS_KIND_STOP && dl.h == h[2]);
    ms_dispatch_done(d, h[2], 0);
    ms_dispatch_done(d, h[3], 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.kind == MS_KIND_STOP && dl.h == h[3]);
    ms_dispatch_done(d, h[3], 0);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1 && shard == 0);
    ms_dispatch_stats(d, &st);
    CHECK(st.passivations == 4 && st.active_entities == 0);
    /* the parked handles are not given to new entities until released */
    ms_dispatch_shard_resume(d, 0, 0);
    CHECK(TELL(d, "e", "{}") == 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.h != h[0] && dl.h != h[1]);
    ms_dispatch_done(d, dl.h, 0);
    ms_dispatch_release_parked(d);
    CHECK(ms_dispatch_parked(d, &parked) == 0);
    CHECK(ms_dispatch_has_work(d) == 0);
    CHECK(TELL(d, "f", "{}") == 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(dl.h == h[0] || dl.h == h[1]);
    ms_dispatch_done(d, dl.h, 0);
    /* without the switch, and for an observed type: STOP deliveries */
    for (int mode = 0; mode < 2; mode++) {
        ms_dispatch_set_quiet_stop(d, 0, mode);
        ms_dispatch_set_observer(d, 0, mode ? observe : NULL, NULL);
        CHECK(TELL(d, "g", "{}") == 0);
        while (ms_dispatch_next(d, &dl) == 1)
            ms_dispatch_done(d, dl.h, 0);
        ms_dispatch_stats(d, &st);
        uint64_t active = st.active_entities;
        CHECK(active == (mode ? 1 : 3)); /* e, f, g; then g */
        CHECK(ms_dispatch_shard_stop(d, 0, 0) == 0);
        uint64_t stops = 0;
        while (ms_dispatch_next(d, &dl) == 1) {
            stops += dl.kind == MS_KIND_STOP;
            ms_dispatch_done(d, dl.h, 0);
        }
        CHECK(stops == active && ms_dispatch_parked(d, &parked) == 0);
        CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1);
        ms_dispatch_shard_resume(d, 0, 0);
    }
    ms_dispatch_set_observer(d, 0, NULL, NULL);
    ms_dispatch_free(d);
}

static void a_refused_shard_fails_new_messages(void)
{
    struct ms_dispatch *d = make(2, 100, 0);
    uint32_t sh;
    CHECK(ms_dispatch_shard_of(d, 0, "r", 1, &sh) == 0);
    CHECK(TELL(d, "r", "{}") == 0); /* accepted before: handled */
    ms_dispatch_shard_refuse(d, 0, sh, MS_EREMEMBER);
    CHECK(TELL(d, "r", "{}") == MS_EREMEMBER);
    cb_calls = 0;
    struct ms_waiter w = {on_ask, NULL, 0};
    CHECK(ask(d, 0, "r", 1, "{}", 2, 1000, 0, &w) == MS_EREMEMBER);
    CHECK(stop(d, 0, "r", 1) == 0); /* a stop request still goes in */
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.overflows == 0);
    struct ms_delivery dl;
    CHECK(ms_dispatch_next(d, &dl) == 1 && dl.init);
    ms_dispatch_done(d, dl.h, 0);
    ms_dispatch_shard_refuse(d, 0, sh, 0);
    CHECK(TELL(d, "r", "{}") == 0);
    ms_dispatch_free(d);
}

/* Stopped shards come out in the order they stopped, each once, while
 * pops and new stops interleave (the queue reuses its popped front). */
static void stopped_shards_keep_their_order(void)
{
    struct ms_dispatch *d = make(64, 100, 0);
    struct ms_delivery dl;
    int type, want[128], nwant = 0, got = 0;
    uint32_t shard;
    for (int s = 0; s < 40; s++)
        CHECK(ms_dispatch_shard_stop(d, 0, (uint32_t)s) == 0);
    CHECK(ms_dispatch_next(d, &dl) == 0); /* the markers pass */
    for (int s = 0; s < 15; s++) {
        CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1);
        CHECK(type == 0 && shard == (uint32_t)s);
        ms_dispatch_shard_resume(d, 0, shard);
    }
    for (int s = 15; s < 40; s++)
        want[nwant++] = s;
    for (int s = 40; s < 64; s++) {
        CHECK(ms_dispatch_shard_stop(d, 0, (uint32_t)s) == 0);
        want[nwant++] = s;
    }
    for (int s = 0; s < 15; s++) { /* past the capacity: compacts */
        CHECK(ms_dispatch_shard_stop(d, 0, (uint32_t)s) == 0);
        want[nwant++] = s;
    }
    CHECK(ms_dispatch_next(d, &dl) == 0);
    while (ms_dispatch_next_stopped(d, &type, &shard) == 1) {
        CHECK(got < nwant && shard == (uint32_t)want[got]);
        got++;
    }
    CHECK(got == nwant && nwant == 64);
    ms_dispatch_shard_resume(d, 0, 7);
    CHECK(ms_dispatch_shard_stop(d, 0, 7) == 0);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 1 && shard == 7);
    CHECK(ms_dispatch_next_stopped(d, &type, &shard) == 0);
    ms_dispatch_free(d);
}

int main(void)
{
    stopped_shards_keep_their_order();
    quiet_stop_parks_idle_entities();
    observer_reports_starts_and_stop_reasons();
    a_refused_shard_fails_new_messages();
    a_destination_is_resolved_once();
    mailboxes_count_against_the_shard_bound();
    shutdown_stops_after_accepted_messages();
    timers_keep_an_entity_from_idling_out();
    replies_are_bounded_and_resumes_name_their_ask();
    shard_stop_drains_then_passivates();
    fifo_per_shard();
    busy_entity_does_not_block_shard();
    asks_end_exactly_once();
    entity_waiters_resume();
    bounds_and_passivation();
    timers_fire_and_cancel();
    custom_partitioner_places_messages();
    asks_remember_where_they_went();
    unavailable_and_no_owner_differ();
    CHECK_DONE();
}
