/*
 * Membership events (runtime/core/mbevent.h) made from two real
 * membership state machines wired by hand: a founds the cluster, b joins
 * and leaves, then a leaves alone. Checks the kinds in order, the
 * numbering, the JSON (strict, with the fields README documents), roles
 * kept for a removed member, and the leader/coordinator pairs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/core/jsoncheck.h"
#include "../../runtime/core/mbevent.h"
#include "check.h"

#define MAXEV 64

struct got {
    uint64_t seq[MAXEV];
    char kind[MAXEV][32];
    char json[MAXEV][MS_MBEV_MAX_JSON];
    int n;
};

static void collect(void *data, uint64_t seq, const char *kind,
                    const char *json, size_t len)
{
    struct got *g = data;
    CHECK(strlen(json) == len);
    CHECK(ms_json_check(json, len, 8, NULL, NULL) == MS_JSON_OBJECT);
    if (g->n >= MAXEV)
        return;
    g->seq[g->n] = seq;
    snprintf(g->kind[g->n], sizeof g->kind[0], "%s", kind);
    snprintf(g->json[g->n], sizeof g->json[0], "%s", json);
    g->n++;
}

struct side {
    struct ms_membership *m;
    struct ms_mbev *ev;
    struct got got;
};

/* Drains x's actions: events into x->got, gossip merged into y,
 * heartbeats answered at once. */
static void drain(struct side *x, struct side *y, uint64_t now)
{
    struct ms_mb_action a;
    while (ms_mb_next_action(x->m, &a)) {
        ms_mbev_on_action(x->ev, x->m, &a, 1000 + now, collect, &x->got);
        if (!y)
            continue;
        uint64_t yu = ms_mb_self_uid(y->m);
        if (a.kind == MS_MB_SEND_GOSSIP && (a.uid == yu || a.uid == 0)) {
            size_t len;
            char *g = ms_mb_gossip_encode(x->m, &len);
            ms_mb_gossip_merge(y->m, g, len, ms_mb_self_uid(x->m), now);
            free(g);
        } else if (a.kind == MS_MB_SEND_HEARTBEAT && a.uid == yu) {
            ms_mb_on_heartbeat_ack(x->m, yu, now);
        }
    }
    ms_mbev_settle(x->ev, x->m, 1000 + now, collect, &x->got);
}

static void run(struct side *a, struct side *b, uint64_t from, uint64_t to)
{
    for (uint64_t t = from; t < to; t += 50) {
        ms_mb_tick(a->m, t);
        if (b)
            ms_mb_tick(b->m, t);
        for (int i = 0; i < 3; i++) {
            drain(a, b, t);
            if (b)
                drain(b, a, t);
        }
    }
}

static int find(const struct got *g, const char *kind, const char *name,
                int from)
{
    char want[80];
    snprintf(want, sizeof want, "\"member\":{\"name\":\"%s\"", name);
    for (int i = from; i < g->n; i++)
        if (!strcmp(g->kind[i], kind) && strstr(g->json[i], want))
            return i;
    return -1;
}

int main(void)
{
    const char *seeds[] = {"h:1"};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = 1,
                               .assume_no_shards = 1};
    struct ms_mb_self sa = {.name = "a", .address = "h:1", .uid = 0xa1,
                            .roles = "backend"};
    struct ms_mb_self sb = {.name = "b", .address = "h:2", .uid = 0xb2,
                            .roles = "x,y"};
    struct side a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    CHECK(ms_mbev_new(&a.ev, "a") == 0);
    CHECK(ms_mbev_new(&b.ev, "b") == 0);
    char longname[80];
    memset(longname, 'n', 65);
    longname[65] = 0;
    struct ms_mbev *bad = NULL;
    CHECK(ms_mbev_new(&bad, longname) == MS_EINVAL && bad == NULL);
    CHECK(ms_mb_new(&a.m, &sa, &cfg) == 0);
    CHECK(ms_mbev_seq(a.ev) == 0);

    /* a founds the cluster alone */
    run(&a, NULL, 0, 500);
    CHECK(a.got.n == 3);
    CHECK(!strcmp(a.got.kind[0], "member_up"));
    CHECK(!strcmp(a.got.kind[1], "coordinator_changed"));
    CHECK(!strcmp(a.got.kind[2], "leader_changed"));
    CHECK(strstr(a.got.json[0], "{\"seq\":1,\"kind\":\"member_up\","
                                "\"time_ms\":1") == a.got.json[0]);
    CHECK(strstr(a.got.json[0], "\"node\":\"a\",\"member\":{\"name\":\"a\","
                                "\"address\":\"h:1\",\"uid\":"
                                "\"00000000000000a1\",\"roles\":"
                                "[\"backend\"],\"status\":\"up\","
                                "\"self\":true},\"previous_status\":"
                                "\"joining\"}") != NULL);
    CHECK(strstr(a.got.json[1], "\"previous\":null") != NULL);
    CHECK(strstr(a.got.json[2], "\"member\":{\"name\":\"a\"") != NULL);

    /* b joins through the seed, then leaves */
    CHECK(ms_mb_new(&b.m, &sb, &cfg) == 0);
    run(&a, &b, 500, 3000);
    CHECK(ms_mb_self_status(b.m) == MS_MB_UP);
    int up = find(&a.got, "member_up", "b", 0);
    CHECK(up > 0);
    CHECK(up >= 0 && strstr(a.got.json[up], "\"roles\":[\"x\",\"y\"],"
                                            "\"status\":\"up\","
                                            "\"self\":false") != NULL);
    /* b saw a first Up: only member_up, then its own */
    CHECK(find(&b.got, "member_up", "a", 0) >= 0);
    CHECK(find(&b.got, "member_up", "b", 0) >= 0);
    CHECK(ms_mb_leave(b.m, 3000) == 0);
    run(&a, &b, 3000, 6000);
    int lv = find(&a.got, "member_leaving", "b", up);
    int ex = find(&a.got, "member_exiting", "b", up);
    int rm = find(&a.got, "member_removed", "b", up);
    CHECK(lv > up && ex > lv && rm > ex);
    /* gone from the view, but its roles were kept */
    CHECK(rm > 0 && strstr(a.got.json[rm], "\"roles\":[\"x\",\"y\"],"
                                           "\"status\":\"removed\"") != NULL);
    CHECK(rm > 0 && strstr(a.got.json[rm], "\"previous_status\":"
                                           "\"exiting\"") != NULL);
    /* b learnt its own removal */
    CHECK(find(&b.got, "member_removed", "b", 0) >= 0);

    /* a leaves alone: no coordinator any more, the leader stays a (the
     * oldest Leaving member) until it is removed */
    int before = a.got.n;
    CHECK(ms_mb_leave(a.m, 6000) == 0);
    run(&a, NULL, 6000, 9000);
    int alv = find(&a.got, "member_leaving", "a", before);
    CHECK(alv >= before);
    int cc = -1;
    for (int i = before; i < a.got.n; i++)
        if (!strcmp(a.got.kind[i], "coordinator_changed"))
            cc = i;
    CHECK(cc > alv);
    CHECK(cc > 0 && strstr(a.got.json[cc], "\"member\":null,\"previous\":"
                                           "{\"name\":\"a\"") != NULL);
    for (int i = before; i < a.got.n; i++)
        CHECK(strcmp(a.got.kind[i], "leader_changed") != 0);
    CHECK(find(&a.got, "member_removed", "a", before) > cc);

    /* one number per event, from 1, without a gap */
    for (int i = 0; i < a.got.n; i++)
        CHECK(a.got.seq[i] == (uint64_t)i + 1);
    CHECK(ms_mbev_seq(a.ev) == (uint64_t)a.got.n);
    for (int i = 0; i < b.got.n; i++)
        CHECK(b.got.seq[i] == (uint64_t)i + 1);

    ms_mbev_free(a.ev);
    ms_mbev_free(b.ev);
    ms_mbev_free(NULL);
    ms_mb_free(a.m);
    ms_mb_free(b.m);
    CHECK_DONE();
}
