/*
 * seeds.c -- writes the seed corpus of the fuzz targets from the
 * encoders, so that each target starts from valid inputs:
 *
 *     fuzz_seeds DIR     (fuzz/run calls it with fuzz/corpus)
 *
 * It writes DIR/<target>/seed-<name> for frame, auth, plan and gossip;
 * the other corpora (jsoncheck, flatjson, http, config) are written by
 * hand and kept in the repository. Existing files are overwritten with
 * the same bytes: the encoders are deterministic here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../runtime/core/membership.h"
#include "../runtime/core/plan.h"
#include "auth_opts.h"

static const char *root;

static void put(const char *target, const char *name, const void *p,
                size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/seed-%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
        exit(1);
    }
}

/* ---- frames: a chunking byte, then encoded frames ---- */

static size_t frame(uint8_t *out, size_t cap, int kind, const char *type,
                    const char *id, const char *payload)
{
    struct ms_frame f = {
        .kind = (uint8_t)kind, .corr = 7, .shard = 3, .generation = 9,
        .type = type, .type_len = strlen(type), .id = id,
        .id_len = strlen(id), .payload = payload,
        .payload_len = strlen(payload)};
    size_t len;
    if (ms_frame_encode(&f, out, cap, &len) != 0)
        abort();
    return len;
}

static void frames(void)
{
    uint8_t b[4096];
    size_t n = 0;
    b[n++] = 0; /* one feed */
    n += frame(b + n, sizeof b - n, MS_FRAME_TELL, "Counter", "c1",
               "{\"op\":\"add\",\"n\":1}");
    put("frame", "tell", b, n);
    b[0] = 5; /* chunks of 1..5 bytes */
    n += frame(b + n, sizeof b - n, MS_FRAME_ASK, "Register", "r-9",
               "{\"op\":\"get\"}");
    n += frame(b + n, sizeof b - n, MS_FRAME_HEARTBEAT, "", "", "");
    put("frame", "three", b, n);
    n = 1;
    b[0] = 17;
    n += frame(b + n, sizeof b - n, MS_FRAME_CONTROL, "", "",
               "{\"t\":\"view_request\",\"term\":3}");
    put("frame", "control", b, n);
}

/* ---- auth: the role byte, then the peer's frames as records ---- */

static size_t record(uint8_t *out, const struct ms_frame *f)
{
    out[0] = f->kind;
    out[1] = (uint8_t)(f->payload_len & 0xff);
    out[2] = (uint8_t)(f->payload_len >> 8);
    memcpy(out + 3, f->payload, f->payload_len);
    return 3 + f->payload_len;
}

static void handshakes(void)
{
    struct ms_auth_replay *rp = ms_auth_replay_new();
    unsigned kself = 0, kpeer = 5000;
    char err[128];
    uint8_t b1[MS_AUTH_BUF_SIZE], b2[MS_AUTH_BUF_SIZE];
    uint8_t srv[4096], cli[4096];
    size_t ns = 0, nc = 0;
    struct ms_frame hello, chal, auth, ok;

    /* the target as server: the peer n2 is the client */
    struct ms_auth_options oc =
        fuzz_auth_options(MS_AUTH_CLIENT, FUZZ_PEER, &kpeer, NULL);
    struct ms_auth_options os =
        fuzz_auth_options(MS_AUTH_SERVER, FUZZ_SELF, &kself, rp);
    struct ms_auth *c, *s;
    if (!rp || ms_auth_new(&c, &oc, err, sizeof err) != 0 ||
        ms_auth_new(&s, &os, err, sizeof err) != 0)
        abort();
    srv[ns++] = 0;
    if (ms_auth_start(c, &hello, b1, sizeof b1) != MS_AUTH_CONTINUE)
        abort();
    ns += record(srv + ns, &hello);
    if (ms_auth_on_frame(s, &hello, &chal, b2, sizeof b2) !=
        MS_AUTH_CONTINUE)
        abort();
    if (ms_auth_on_frame(c, &chal, &auth, b1, sizeof b1) != MS_AUTH_CONTINUE)
        abort();
    ns += record(srv + ns, &auth);
    if (ms_auth_on_frame(s, &auth, &ok, b2, sizeof b2) != MS_AUTH_DONE)
        abort();
    put("auth", "server-complete", srv, ns);
    put("auth", "server-hello", srv, 1 + 3 + hello.payload_len);
    ms_auth_free(c);
    ms_auth_free(s);

    /* the target as client: the peer n2 is the server */
    kself = 0;
    kpeer = 5000;
    oc = fuzz_auth_options(MS_AUTH_CLIENT, FUZZ_SELF, &kself, NULL);
    os = fuzz_auth_options(MS_AUTH_SERVER, FUZZ_PEER, &kpeer, rp);
    if (ms_auth_new(&c, &oc, err, sizeof err) != 0 ||
        ms_auth_new(&s, &os, err, sizeof err) != 0)
        abort();
    cli[nc++] = 1;
    if (ms_auth_start(c, &hello, b1, sizeof b1) != MS_AUTH_CONTINUE ||
        ms_auth_on_frame(s, &hello, &chal, b2, sizeof b2) !=
            MS_AUTH_CONTINUE)
        abort();
    nc += record(cli + nc, &chal);
    if (ms_auth_on_frame(c, &chal, &auth, b1, sizeof b1) != MS_AUTH_CONTINUE
        || ms_auth_on_frame(s, &auth, &ok, b2, sizeof b2) != MS_AUTH_DONE)
        abort();
    nc += record(cli + nc, &ok);
    put("auth", "client-complete", cli, nc);
    static const char fail[] = "{\"reason\":\"authentication failed\"}";
    struct ms_frame f = {.kind = MS_FRAME_AUTH_FAIL, .payload = fail,
                         .payload_len = sizeof fail - 1};
    nc = 1 + record(cli + 1, &f);
    put("auth", "client-refused", cli, nc);
    ms_auth_free(c);
    ms_auth_free(s);
    ms_auth_replay_free(rp);
}

/* ---- plan messages ---- */

static void plan_one(const char *name, const struct ms_plan_msg *m)
{
    char *text;
    size_t len;
    if (ms_plan_msg_encode(m, &text, &len) != 0)
        abort();
    put("plan", name, text, len);
    free(text);
}

static void plans(void)
{
    struct ms_plan_entry e[3] = {{0, 0x1122334455667788ull, (3ull << 32) + 1},
                                 {5, 0x99aabbccddeeff00ull, (3ull << 32) + 2},
                                 {63, 0x1122334455667788ull,
                                  (3ull << 32) + 3}};
    struct ms_plan_msg m = {.kind = MS_PLAN_MSG_PLAN, .term = 3,
                            .type = "Counter", .shard_count = 64,
                            .entries = e, .nentries = 3};
    plan_one("plan", &m);
    m.kind = MS_PLAN_MSG_VIEW;
    snprintf(m.fingerprint, sizeof m.fingerprint, "shards=64;\"q\"\\\x01");
    plan_one("view", &m);
    m.kind = MS_PLAN_MSG_HANDOFF;
    m.nentries = 1;
    plan_one("handoff", &m);
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_VIEW_REQUEST;
    m.term = 3;
    plan_one("view_request", &m);
    m.kind = MS_PLAN_MSG_ALLOC_REFUSED;
    snprintf(m.type, sizeof m.type, "Counter");
    m.shard = 12;
    snprintf(m.code, sizeof m.code, "no_host");
    snprintf(m.reason, sizeof m.reason, "no member hosts \"Counter\"\n");
    plan_one("alloc_refused", &m);
}

/* ---- gossip: views of a small cluster ---- */

static struct ms_membership *mb(const char *name, const char *addr,
                                uint64_t uid)
{
    static const char *const seeds[] = {"127.0.0.1:7101"};
    struct ms_mb_self self = {.name = name, .address = addr, .uid = uid,
                              .roles = "backend,api", .version = "1.2",
                              .incarnation = 1000};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = 1};
    struct ms_membership *m;
    if (ms_mb_new(&m, &self, &cfg) != 0)
        abort();
    return m;
}

static void settle(struct ms_membership **m, int n, uint64_t now)
{
    for (int round = 0; round < 20; round++) {
        now += 1000;
        for (int i = 0; i < n; i++)
            ms_mb_tick(m[i], now);
        for (int i = 0; i < n; i++) {
            size_t len;
            char *g = ms_mb_gossip_encode(m[i], &len);
            for (int j = 0; j < n; j++)
                if (j != i)
                    (void)ms_mb_gossip_merge(m[j], g, len, 0, now);
            free(g);
        }
        for (int i = 0; i < n; i++) {
            struct ms_mb_action a;
            while (ms_mb_next_action(m[i], &a) == 1)
                ;
        }
    }
}

static void gossips(void)
{
    struct ms_membership *m[3] = {
        mb("n1", "127.0.0.1:7101", 0x1111111111111111ull),
        mb("n2", "127.0.0.1:7102", 0x2222222222222222ull),
        mb("n4", "127.0.0.1:7104", 0x4444444444444444ull)};
    size_t len;
    char *g = ms_mb_gossip_encode(m[1], &len);
    put("gossip", "lone", g, len);
    free(g);
    settle(m, 3, 10000);
    g = ms_mb_gossip_encode(m[2], &len);
    put("gossip", "three", g, len);
    free(g);
    (void)ms_mb_leave(m[2], 31000);
    settle(m, 3, 40000);
    g = ms_mb_gossip_encode(m[0], &len);
    put("gossip", "after-leave", g, len);
    free(g);
    for (int i = 0; i < 3; i++)
        ms_mb_free(m[i]);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    root = argv[1];
    mkdir(root, 0755);
    frames();
    handshakes();
    plans();
    gossips();
    return 0;
}
