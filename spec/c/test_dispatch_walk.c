/* A random walk over the dispatcher driven as the bridge drives it, with
 * what the record-shrink change touched all in play at once: handlers
 * suspended in asks (the message being handled stays first in the
 * mailbox while mail arrives behind it), replies, reply_errors and
 * failures (init failures too) of the current message, ctx:stop(),
 * ctx:after timers and cancels (of its own and of other entities'
 * timers), the idle sweep, the active-entity limit, shard stops and
 * resumes, and a shutdown at the end with handlers still suspended.
 * Every third seed stops shards quietly (ms_dispatch_set_quiet_stop, no
 * observer then), releasing the parked handles now and then.
 * Checked at each step: a busy entity never gets a second delivery, a
 * message reaches the entity it names, an entity's tells come in the
 * order they were sent, an ask is answered once and only by the handler
 * of that ask; at the end every ask was answered and nothing is pending.
 * Run under ASan for the memory side. */
#include <stdint.h>
#include <string.h>

#include "../../runtime/core/dispatch.h"
#include "check.h"

static uint32_t rng;
static uint32_t rnd(uint32_t n)
{
    rng = rng * 1103515245u + 12345u;
    return (rng >> 8) % n;
}

/* entities: 24, or for every fourth seed 1500 (the slots and the ready
 * ring grow while it is non-empty and wrapped) */
enum { NEMAX = 1500, NA = 20000, NH = 4096, NT = 8 };
static int NE;

struct ask_rec {
    int calls, err, target;
    int answered_ok; /* 1: the reply named this ask */
};
static struct ask_rec asks[NA];
static int nasks;
static int bad_answers;

static void on_answer(void *data, int err, const char *payload, size_t len)
{
    struct ask_rec *a = data;
    int n = (int)(a - asks);
    a->calls++;
    a->err = err;
    if (err == 0) {
        int r = -1;
        /* a reply to an activate is {"created":...}; to an ask, ours */
        if (strncmp(payload, "{\"created\"", 10) != 0 &&
            (sscanf(payload, "{\"r\":%d}", &r) != 1 || r != n))
            bad_answers++;
        (void)len;
    }
}

/* the bridge's view of a handle */
struct run {
    int state;      /* 0 idle, 1 running, 2 suspended in an ask */
    uint32_t gen;   /* the activation (ms_delivery.gen) */
    int kind, init, ask, ent;
    int64_t corr;   /* state 2: the ask it waits for */
    int64_t timers[NT];
    int ntimers;
};
static struct run runs[NH];
static uint32_t running[NH];
enum { NC = 1 << 16 };
static struct {
    uint32_t h, gen;
    int yes;
} abandoned[NC]; /* by corr */
static int nrunning;
static int last_seq[NEMAX], sent_seq[NEMAX];
static int bad;

static int payload_int(const char *p, const char *key)
{
    const char *s = strstr(p, key);
    return s ? atoi(s + strlen(key)) : -1;
}

/* the observer: each activation reported started once, after its init,
 * then passivated once, with a reason */
static int observed[NEMAX], bad_observed;
static uint64_t nobserved;

static void on_observe(void *data, int type, uint32_t shard, const char *id,
                       size_t idlen, int started, int reason)
{
    (void)data;
    (void)shard;
    nobserved++;
    int k = atoi(id + 1);
    if (type != 0 || idlen < 2 || k < 0 || k >= NE ||
        observed[k] != !started ||
        (!started && (reason < MS_STOP_EXPLICIT || reason > MS_STOP_LIMIT)))
        bad_observed++;
    observed[k] = started;
}

static void deliver(struct ms_dispatch *d, const struct ms_delivery *dl)
{
    if (dl->h >= NH) {
        bad++;
        return;
    }
    struct run *r = &runs[dl->h];
    if (r->state != 0)
        bad++; /* a second delivery to a busy entity */
    int ent = atoi(dl->id + 1);
    memset(r, 0, sizeof *r);
    r->state = 1;
    r->kind = dl->kind;
    r->init = dl->init;
    r->ent = ent;
    r->gen = dl->gen;
    r->ask = -1;
    (void)d;
    if (dl->kind != MS_KIND_STOP) {
        if (payload_int(dl->payload, "\"e\":") != ent &&
            dl->kind != MS_KIND_ACTIVATE)
            bad++; /* not the entity it names */
        int s = payload_int(dl->payload, "\"s\":");
        if (s >= 0) {
            if (s <= last_seq[ent])
                bad++; /* out of order, or twice */
            last_seq[ent] = s;
        }
        if (dl->kind == MS_KIND_ASK)
            r->ask = payload_int(dl->payload, "\"a\":");
    }
    running[nrunning++] = dl->h;
}

static void unrun(uint32_t h)
{
    for (int i = 0; i < nrunning; i++)
        if (running[i] == h) {
            running[i] = running[--nrunning];
            return;
        }
    bad++;
}

static int new_ask(int target)
{
    if (nasks >= NA)
        return -1;
    memset(&asks[nasks], 0, sizeof asks[nasks]);
    asks[nasks].target = target;
    return nasks++;
}

static void finish(struct ms_dispatch *d, uint32_t h, uint64_t now)
{
    runs[h].state = 0;
    unrun(h);
    ms_dispatch_done(d, h, now);
}

/* One step of a running handler h: reply, fail, stop, timers, suspend
 * in an ask, or finish. */
static void act(struct ms_dispatch *d, uint32_t h, uint64_t now)
{
    struct run *r = &runs[h];
    uint32_t op = rnd(100);
    char js[64];
    if (op < 15 && r->kind == MS_KIND_ASK && r->ask >= 0) {
        snprintf(js, sizeof js, "{\"r\":%d}", r->ask);
        int rc = ms_dispatch_reply(d, h, js, strlen(js), now);
        if (rc != 0 && rc != MS_EINVAL)
            bad++;
    } else if (op < 20) {
        int rc = ms_dispatch_reply_error(d, h, MS_EHANDLER, "no");
        if (rc != 0 && rc != MS_EINVAL && rc != 1)
            bad++;
    } else if (op < 25) {
        ms_dispatch_fail(d, h, "boom", r->init && r->kind != MS_KIND_STOP &&
                                           rnd(2));
        finish(d, h, now);
    } else if (op < 30) {
        ms_dispatch_stop_self(d, h);
    } else if (op < 40 && r->kind != MS_KIND_STOP) {
        snprintf(js, sizeof js, "{\"e\":%d,\"t\":1}", r->ent);
        int64_t t = ms_dispatch_after(d, h, 1 + rnd(80), js, strlen(js), now);
        if (t > 0 && r->ntimers < NT)
            r->timers[r->ntimers++] = t;
    } else if (op < 45 && r->ntimers) {
        int i = (int)rnd((uint32_t)r->ntimers);
        ms_dispatch_cancel(d, h, r->timers[i]);
        r->timers[i] = r->timers[--r->ntimers];
    } else if (op < 48 && nrunning > 1) {
        /* another running entity's timer ids are not ours to cancel */
        uint32_t o = running[rnd((uint32_t)nrunning)];
        if (o != h && runs[o].ntimers &&
            ms_dispatch_cancel(d, h, runs[o].timers[0]) != 0)
            bad++;
    } else if (op < 62) {
        int target = (int)rnd((uint32_t)NE);
        if (target == r->ent)
            target = (target + 1) % NE;
        int n = new_ask(target);
        if (n < 0)
            return;
        snprintf(js, sizeof js, "{\"e\":%d,\"a\":%d}", target, n);
        char id[16];
        snprintf(id, sizeof id, "w%d", target);
        struct ms_dest dst;
        struct ms_waiter w = {NULL, NULL, h};
        int64_t c = -1;
        if (ms_dispatch_resolve(d, 0, id, strlen(id), &dst) == 0)
            c = rnd(4) ? ms_dispatch_ask(d, &dst, js, strlen(js),
                                         5 + rnd(200), now, &w)
                       : ms_dispatch_ask_open(d, 5 + rnd(200), now, &w);
        asks[n].calls = 1; /* an entity's ask: answered by a resume */
        if (c > 0 && c < NC && rnd(8) == 0) {
            /* the bridge abandons it (keep_waiting failed): the handler
             * ends; a resume for it may come only to this activation,
             * busy with something else (the bridge ignores it by corr) */
            abandoned[c].h = h;
            abandoned[c].gen = r->gen;
            abandoned[c].yes = 1;
            finish(d, h, now);
        } else if (c > 0) {
            r->state = 2;
            r->corr = c;
        }
    } else if (op < 75) {
        finish(d, h, now);
    }
}

static void resumes(struct ms_dispatch *d, uint64_t now)
{
    struct ms_resume rs;
    while (ms_dispatch_next_resume(d, &rs)) {
        if (rs.corr < NC && abandoned[rs.corr].yes) {
            if (abandoned[rs.corr].h != rs.h || rs.h >= NH ||
                runs[rs.h].state == 0 ||
                runs[rs.h].gen != abandoned[rs.corr].gen)
                bad++; /* to a handler that is gone, or another one */
            abandoned[rs.corr].yes = 0;
            continue;
        }
        if (rs.h >= NH || runs[rs.h].state != 2 ||
            runs[rs.h].corr != (int64_t)rs.corr) {
            bad++;
            continue;
        }
        runs[rs.h].state = 1;
    }
    (void)now;
}

static void send_some(struct ms_dispatch *d, uint64_t now)
{
    int k = (int)rnd((uint32_t)NE);
    char id[16], js[64];
    snprintf(id, sizeof id, "w%d", k);
    struct ms_dest dst;
    if (ms_dispatch_resolve(d, 0, id, strlen(id), &dst) != 0) {
        bad++;
        return;
    }
    uint32_t op = rnd(10);
    if (op < 6) {
        snprintf(js, sizeof js, "{\"e\":%d,\"s\":%d}", k, sent_seq[k] + 1);
        if (ms_dispatch_tell(d, &dst, js, strlen(js)) == 0)
            sent_seq[k]++;
    } else if (op < 8) {
        int n = new_ask(k);
        if (n < 0)
            return;
        struct ms_waiter w = {on_answer, &asks[n], 0};
        snprintf(js, sizeof js, "{\"e\":%d,\"a\":%d}", k, n);
        if (ms_dispatch_ask(d, &dst, js, strlen(js), 10 + rnd(300), now,
                            &w) < 0)
            asks[n].calls = 1; /* refused: no answer to come */
    } else if (op < 9) {
        int n = new_ask(k);
        if (n < 0)
            return;
        struct ms_waiter w = {on_answer, &asks[n], 0};
        if (ms_dispatch_activate(d, &dst, 10 + rnd(300), now, &w) < 0)
            asks[n].calls = 1;
    } else {
        ms_dispatch_stop(d, &dst);
    }
}

static struct ms_stats total;
static uint64_t quiet_parked; /* handles parked by quiet stops, released */

static void release_parked(struct ms_dispatch *d)
{
    const uint32_t *h;
    quiet_parked += ms_dispatch_parked(d, &h);
    ms_dispatch_release_parked(d);
}

static void walk(uint32_t seed)
{
    rng = seed;
    NE = seed % 4 ? 24 : NEMAX;
    memset(runs, 0, sizeof runs);
    memset(last_seq, 0, sizeof last_seq);
    memset(sent_seq, 0, sizeof sent_seq);
    nrunning = 0;
    nasks = 0;
    memset(abandoned, 0, sizeof abandoned);
    memset(observed, 0, sizeof observed);
    bad_observed = 0;
    bad = 0;
    bad_answers = 0;
    struct ms_dispatch_type t = {"W", 4, 1 + seed % 60, (int)(seed % 2),
                                 1000000, 0};
    struct ms_dispatch *d = ms_dispatch_new(&t, 1, 1024);
    uint64_t now = 1000;
    ms_dispatch_expire(d, now);
    int quiet = seed % 3 == 1;
    if (quiet)
        ms_dispatch_set_quiet_stop(d, 0, 1);
    else
        ms_dispatch_set_observer(d, 0, on_observe, NULL);
    int stopping[4] = {0};
    for (int step = 0; step < 6000; step++) {
        uint32_t op = rnd(100);
        if (op < 30) {
            send_some(d, now);
        } else if (op < 55) {
            struct ms_delivery dl;
            if (ms_dispatch_next(d, &dl) == 1) {
                deliver(d, &dl);
                act(d, dl.h, now);
            }
        } else if (op < 80 && nrunning) {
            uint32_t h = running[rnd((uint32_t)nrunning)];
            if (runs[h].state == 1)
                act(d, h, now);
        } else if (op < 88) {
            now += rnd(30);
            ms_dispatch_expire(d, now);
            resumes(d, now);
        } else if (op < 91) {
            ms_dispatch_set_max_active(d, rnd(3) ? 0 : 1 + rnd(8));
        } else if (op < 92 || (quiet && op < 95)) {
            /* quiet seeds stop shards more often */
            uint32_t s = rnd(4);
            if (!stopping[s]) {
                if (ms_dispatch_shard_stop(d, 0, s) == 0)
                    stopping[s] = 1;
            } else {
                ms_dispatch_shard_resume(d, 0, s);
                stopping[s] = 0;
            }
        } else if (op < 97) {
            int ty;
            uint32_t s;
            while (ms_dispatch_next_stopped(d, &ty, &s)) {
                ms_dispatch_shard_resume(d, 0, s);
                stopping[s] = 0;
            }
        } else {
            resumes(d, now);
            if (rnd(2))
                release_parked(d);
        }
    }
    if (seed % 5 == 0) {
        /* freed as it is: handlers running and suspended, mail in the
         * mailboxes and the ready ring, timers, asks and resumes pending
         * (ASan: nothing leaks, nothing is freed twice) */
        CHECK(bad == 0 && bad_answers == 0 && bad_observed == 0);
        ms_dispatch_free(d);
        return;
    }
    /* the end: the node stops with handlers running and suspended */
    for (int s = 0; s < 4; s++)
        ms_dispatch_shard_resume(d, 0, s);
    ms_dispatch_shutdown(d);
    for (int round = 0; round < 100000 && (nrunning ||
                                           ms_dispatch_has_work(d));
         round++) {
        resumes(d, now);
        release_parked(d);
        struct ms_delivery dl;
        if (ms_dispatch_next(d, &dl) == 1) {
            deliver(d, &dl);
            finish(d, dl.h, now);
        }
        for (int i = nrunning - 1; i >= 0; i--)
            if (runs[running[i]].state == 1)
                finish(d, running[i], now);
        now += 5;
        ms_dispatch_expire(d, now);
    }
    CHECK(nrunning == 0);
    CHECK(!ms_dispatch_has_work(d));
    int unanswered = 0, twice = 0;
    for (int i = 0; i < nasks; i++) {
        unanswered += asks[i].calls == 0;
        twice += asks[i].calls > 1;
    }
    if (bad || bad_answers || unanswered || twice)
        fprintf(stderr, "seed %u: bad %d, bad answers %d, unanswered %d, "
                        "answered twice %d\n",
                seed, bad, bad_answers, unanswered, twice);
    CHECK(bad == 0);
    CHECK(bad_answers == 0);
    CHECK(bad_observed == 0);
    int still = 0;
    for (int k = 0; k < NE; k++)
        still += observed[k];
    CHECK(still == 0); /* every start was followed by a passivation */
    CHECK(unanswered == 0 && twice == 0);
    CHECK(ms_dispatch_pending(d) == 0);
    struct ms_stats st;
    ms_dispatch_stats(d, &st);
    CHECK(st.active_entities == 0);
    CHECK(st.activations == st.passivations);
    total.delivered += st.delivered;
    total.timers_fired += st.timers_fired;
    total.asks_timed_out += st.asks_timed_out;
    total.handler_errors += st.handler_errors;
    total.limit_passivations += st.limit_passivations;
    total.shards_stopped += st.shards_stopped;
    total.handoff_drops += st.handoff_drops;
    total.shutdown_drops += st.shutdown_drops;
    total.passivations += st.passivations;
    ms_dispatch_free(d);
}

int main(void)
{
    for (uint32_t seed = 1; seed <= 60; seed++)
        walk(seed);
    /* the walk reached what it is for */
    printf("delivered %llu, passivations %llu (limit %llu), timers fired "
           "%llu, asks timed out %llu, handler errors %llu, shards stopped "
           "%llu, handoff drops %llu, shutdown drops %llu\n",
           (unsigned long long)total.delivered,
           (unsigned long long)total.passivations,
           (unsigned long long)total.limit_passivations,
           (unsigned long long)total.timers_fired,
           (unsigned long long)total.asks_timed_out,
           (unsigned long long)total.handler_errors,
           (unsigned long long)total.shards_stopped,
           (unsigned long long)total.handoff_drops,
           (unsigned long long)total.shutdown_drops);
    CHECK(total.timers_fired > 0 && total.asks_timed_out > 0);
    CHECK(total.handler_errors > 0 && total.limit_passivations > 0);
    CHECK(total.shards_stopped > 0 && total.handoff_drops > 0);
    CHECK(total.shutdown_drops > 0);
    CHECK(nobserved > 0);
    CHECK(quiet_parked > 0);
    CHECK_DONE();
}
