/* The dispatcher's active-entity limit (ms_dispatch_set_max_active),
 * driven step by step: which entity goes, busy ones skipped, going over
 * and coming back, order kept, counts. */
#include <stdlib.h>
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

static struct ms_dispatch *make(int ntypes, uint64_t max)
{
    struct ms_dispatch_type t[2] = {{"T", 4, 0, 0, 1000, 0},
                                    {"U", 4, 0, 0, 1000, 0}};
    struct ms_dispatch *d = ms_dispatch_new(t, ntypes, 1024);
    ms_dispatch_set_max_active(d, max);
    return d;
}

/* Takes one delivery and finishes it at now_ms; returns the delivery,
 * its id copied (a stop's done frees the entity's record, where dl.id
 * pointed) and its payload cleared (the message is freed too). */
static struct ms_delivery run1(struct ms_dispatch *d, uint64_t now_ms)
{
    static char idcopy[MS_MAX_ID + 1];
    struct ms_delivery dl;
    memset(&dl, 0, sizeof dl);
    if (ms_dispatch_next(d, &dl) == 1) {
        memcpy(idcopy, dl.id, dl.idlen);
        idcopy[dl.idlen] = 0;
        dl.id = idcopy;
        dl.payload = NULL;
        ms_dispatch_done(d, dl.h, now_ms);
    } else {
        dl.kind = 0;
    }
    return dl;
}

static int is(const struct ms_delivery *dl, int kind, const char *id)
{
    return dl->kind == kind && dl->idlen == strlen(id) &&
           memcmp(dl->id, id, dl->idlen) == 0;
}

/* Handles a tell to `id` of type 0 and whatever it causes (the STOPs
 * of the entities it evicts, handled right after it); writes the ids
 * stopped, space-separated, into `stopped`. */
static void tell_run(struct ms_dispatch *d, int type, const char *id,
                     uint64_t now_ms, char *stopped, size_t len)
{
    CHECK(tell(d, type, id, "{}") == 0);
    stopped[0] = 0;
    struct ms_delivery dl;
    while ((dl = run1(d, now_ms)).kind) {
        if (dl.kind == MS_KIND_STOP) {
            size_t o = strlen(stopped);
            snprintf(stopped + o, len - o, "%s%.*s", o ? " " : "",
                     (int)dl.idlen, dl.id);
        }
    }
}

static void least_recently_used_goes_first(void)
{
    struct ms_dispatch *d = make(1, 3);
    CHECK(ms_dispatch_max_active(d) == 3);
    char st[256];
    tell_run(d, 0, "a", 1, st, sizeof st);
    tell_run(d, 0, "b", 2, st, sizeof st);
    tell_run(d, 0, "c", 3, st, sizeof st);
    CHECK(strcmp(st, "") == 0);
    tell_run(d, 0, "a", 4, st, sizeof st); /* a is used again */
    CHECK(strcmp(st, "") == 0);
    tell_run(d, 0, "d", 5, st, sizeof st);
    CHECK(strcmp(st, "b") == 0); /* a had a second chance */
    tell_run(d, 0, "e", 6, st, sizeof st);
    CHECK(strcmp(st, "c") == 0);
    tell_run(d, 0, "f", 7, st, sizeof st);
    CHECK(strcmp(st, "d") == 0);
    tell_run(d, 0, "g", 8, st, sizeof st);
    CHECK(strcmp(st, "a") == 0); /* its chance was used up */
    struct ms_stats s;
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 3 && s.activations == 7);
    CHECK(s.passivations == 4 && s.limit_passivations == 4);
    ms_dispatch_free(d);
}

static void the_oldest_across_types_goes(void)
{
    struct ms_dispatch *d = make(2, 2);
    char st[256];
    tell_run(d, 1, "u1", 10, st, sizeof st); /* listed at 0 */
    tell_run(d, 0, "t1", 20, st, sizeof st); /* listed at 10 */
    tell_run(d, 1, "u2", 30, st, sizeof st); /* listed at 20 */
    CHECK(strcmp(st, "u1") == 0);
    tell_run(d, 1, "u3", 40, st, sizeof st);
    CHECK(strcmp(st, "t1") == 0); /* older than u2, in the other type */
    ms_dispatch_free(d);
}

static void busy_ones_are_skipped_and_the_node_goes_over(void)
{
    struct ms_dispatch *d = make(1, 2);
    struct ms_delivery a, b, c, dl;
    struct ms_stats s;
    CHECK(tell(d, 0, "a", "{}") == 0);
    CHECK(ms_dispatch_next(d, &a) == 1 && a.init); /* a stays busy */
    CHECK(tell(d, 0, "b", "{}") == 0);
    CHECK(ms_dispatch_next(d, &b) == 1 && b.init);
    ms_dispatch_done(d, b.h, 1);
    CHECK(tell(d, 0, "c", "{}") == 0);
    CHECK(ms_dispatch_next(d, &c) == 1 && c.init); /* c busy too */
    /* a is busy: b goes */
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_STOP, "b"));
    ms_dispatch_done(d, dl.h, 2);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    CHECK(tell(d, 0, "e", "{}") == 0);
    struct ms_delivery e;
    CHECK(ms_dispatch_next(d, &e) == 1 && e.init);
    /* a, c, e all busy: over the limit, nothing refused or stopped */
    CHECK(ms_dispatch_next(d, &dl) == 0);
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 3 && s.limit_passivations == 1);
    /* a message for a busy entity waits in its mailbox: it is not idle
     * when it finishes, so the next idle one goes */
    CHECK(tell(d, 0, "a", "{\"n\":2}") == 0);
    CHECK(ms_dispatch_next(d, &dl) == 0); /* into a's mailbox */
    ms_dispatch_done(d, a.h, 3);
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_TELL, "a") &&
          !dl.init && strcmp(dl.payload, "{\"n\":2}") == 0);
    /* a is the one idle entity now: used lately, it is passed over
     * once, then goes, and the node is back at the limit */
    ms_dispatch_done(d, dl.h, 4);
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_STOP, "a"));
    ms_dispatch_done(d, dl.h, 5);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    ms_dispatch_done(d, c.h, 6);
    ms_dispatch_done(d, e.h, 7);
    CHECK(ms_dispatch_next(d, &dl) == 0); /* at the limit: nothing goes */
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 2 && s.limit_passivations == 2);
    CHECK(s.delivered == 5 && s.routed == 5);
    ms_dispatch_free(d);
}

static void timers_keep_an_entity(void)
{
    struct ms_dispatch *d = make(1, 1);
    struct ms_delivery dl;
    char st[256];
    CHECK(tell(d, 0, "t", "{}") == 0);
    CHECK(ms_dispatch_next(d, &dl) == 1);
    CHECK(ms_dispatch_after(d, dl.h, 1000, "{}", 2, 0) > 0);
    ms_dispatch_done(d, dl.h, 1);
    /* t has a timer: it stays, and x goes as soon as it is idle */
    tell_run(d, 0, "x", 2, st, sizeof st);
    CHECK(strcmp(st, "x") == 0);
    tell_run(d, 0, "y", 3, st, sizeof st);
    CHECK(strcmp(st, "y") == 0);
    struct ms_stats s;
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 1 && s.limit_passivations == 2);
    /* once the timer fired, t is idle like the others */
    ms_dispatch_expire(d, 2000);
    tell_run(d, 0, "z", 2001, st, sizeof st);
    CHECK(strcmp(st, "t") == 0);
    ms_dispatch_free(d);
}

static void an_evicted_entity_comes_back_in_order(void)
{
    struct ms_dispatch *d = make(1, 1);
    struct ms_delivery dl;
    char st[256];
    tell_run(d, 0, "a", 1, st, sizeof st);
    /* b activates and evicts a; a's next messages wait behind the STOP */
    CHECK(tell(d, 0, "b", "{}") == 0);
    CHECK(tell(d, 0, "a", "{\"n\":1}") == 0);
    CHECK(tell(d, 0, "a", "{\"n\":2}") == 0);
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_TELL, "b"));
    ms_dispatch_done(d, dl.h, 2);
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_STOP, "a"));
    ms_dispatch_done(d, dl.h, 3);
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_TELL, "a") &&
          dl.init && strcmp(dl.payload, "{\"n\":1}") == 0);
    ms_dispatch_done(d, dl.h, 4);
    /* a's activation evicted b */
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_STOP, "b"));
    ms_dispatch_done(d, dl.h, 5);
    CHECK(ms_dispatch_next(d, &dl) == 1 && is(&dl, MS_KIND_TELL, "a") &&
          !dl.init && strcmp(dl.payload, "{\"n\":2}") == 0);
    ms_dispatch_done(d, dl.h, 6);
    CHECK(ms_dispatch_next(d, &dl) == 0);
    struct ms_stats s;
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 1 && s.limit_passivations == 2 &&
          s.delivered == 4);
    ms_dispatch_free(d);
}

static char seen[256];

static void on_entity(void *data, int type, uint32_t shard, const char *id,
                      size_t idlen, int started, int reason)
{
    (void)data;
    (void)type;
    (void)shard;
    if (!started) {
        size_t o = strlen(seen);
        snprintf(seen + o, sizeof seen - o, "%.*s:%d ", (int)idlen, id,
                 reason);
    }
}

static void the_observer_hears_the_reason(void)
{
    struct ms_dispatch *d = make(1, 1);
    ms_dispatch_set_observer(d, 0, on_entity, NULL);
    char st[256];
    tell_run(d, 0, "a", 1, st, sizeof st);
    tell_run(d, 0, "b", 2, st, sizeof st);
    char want[32];
    snprintf(want, sizeof want, "a:%d ", MS_STOP_LIMIT);
    CHECK(strcmp(seen, want) == 0);
    ms_dispatch_free(d);
}

static void no_limit_passivates_nothing(void)
{
    struct ms_dispatch *d = make(1, 0);
    CHECK(ms_dispatch_max_active(d) == 0);
    char id[16], st[256];
    for (int i = 0; i < 2000; i++) {
        snprintf(id, sizeof id, "n%d", i);
        tell_run(d, 0, id, (uint64_t)i, st, sizeof st);
        CHECK(st[0] == 0);
    }
    struct ms_stats s;
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 2000 && s.passivations == 0);
    /* a limit set later applies at once to the idle ones */
    ms_dispatch_set_max_active(d, 500);
    struct ms_delivery dl;
    int stops = 0, oldest = 1;
    while ((dl = run1(d, 3000)).kind) {
        stops += dl.kind == MS_KIND_STOP;
        oldest &= dl.kind == MS_KIND_STOP && atoi(dl.id + 1) < 1500;
    }
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 500 && s.limit_passivations == 1500);
    CHECK(stops == 1500 && oldest);
    ms_dispatch_free(d);
}

static void many_entities_hold_the_limit(void)
{
    struct ms_dispatch *d = make(2, 1000);
    char id[16], st[4096];
    uint64_t now = 0;
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof id, "m%d", i);
        tell_run(d, i & 1, id, ++now, st, sizeof st);
        CHECK(strstr(st, "hot") == NULL);
        /* a hot set of ten, touched all along, never goes */
        snprintf(id, sizeof id, "hot%d", i % 10);
        tell_run(d, 0, id, ++now, st, sizeof st);
        CHECK(strstr(st, "hot") == NULL);
        struct ms_stats s;
        ms_dispatch_stats(d, &s);
        CHECK(s.active_entities <= 1000);
    }
    struct ms_stats s;
    ms_dispatch_stats(d, &s);
    CHECK(s.active_entities == 1000 && s.activations == 5010);
    CHECK(s.limit_passivations == 4010 && s.passivations == 4010);
    ms_dispatch_free(d);
}

int main(void)
{
    least_recently_used_goes_first();
    the_oldest_across_types_goes();
    busy_ones_are_skipped_and_the_node_goes_over();
    timers_keep_an_entity();
    an_evicted_entity_comes_back_in_order();
    the_observer_hears_the_reason();
    no_limit_passivates_nothing();
    many_entities_hold_the_limit();
    CHECK_DONE();
}
