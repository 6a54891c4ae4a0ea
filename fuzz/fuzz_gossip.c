/*
 * fuzz_gossip.c -- libFuzzer target of the membership gossip decoder
 * (core/membership_gossip.c ms_mb_gossip_merge), which reads the GOSSIP
 * frames of other nodes.
 *
 * Input: gossip texts separated by newlines (a gossip text holds none),
 * merged one after the other into one node's view, from alternating
 * senders, with the clock moving and the actions drained, as the node
 * does. Whatever the view became, its own gossip must be accepted by a
 * fresh node: a text the encoder writes and the decoder refuses would cut
 * a cluster in two.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/core/membership.h"

static struct ms_membership *node(uint64_t uid, const char *name,
                                  const char *addr)
{
    static const char *const seeds[] = {"127.0.0.1:7101"};
    struct ms_mb_self self = {.name = name, .address = addr, .uid = uid,
                              .incarnation = 1000};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = 1};
    struct ms_membership *m;
    if (ms_mb_new(&m, &self, &cfg) != 0)
        abort();
    return m;
}

static void drain(struct ms_membership *m)
{
    struct ms_mb_action a;
    while (ms_mb_next_action(m, &a) == 1)
        ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ms_membership *m = node(0x1111111111111111ull, "n1",
                                   "127.0.0.1:7101");
    uint64_t now = 10000;
    const char *p = (const char *)data, *end = p + size;
    unsigned k = 0;
    ms_mb_tick(m, now);
    drain(m);
    while (p <= end && k < 16) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        uint64_t from = (k & 1) ? 0x2222222222222222ull : 0;
        (void)ms_mb_gossip_merge(m, p, (size_t)(e - p), from, now);
        drain(m);
        now += 700;
        ms_mb_tick(m, now);
        drain(m);
        k++;
        if (!nl)
            break;
        p = nl + 1;
    }
    size_t len = 0;
    char *g = ms_mb_gossip_encode(m, &len);
    if (g) {
        struct ms_membership *m2 = node(0x3333333333333333ull, "n3",
                                        "127.0.0.1:7103");
        int rc = ms_mb_gossip_merge(m2, g, len, 0x1111111111111111ull,
                                    now);
        if (rc != 0) {
            fprintf(stderr, "own gossip refused (%d): %.*s\n", rc,
                    (int)len, g);
            abort();
        }
        drain(m2);
        ms_mb_free(m2);
        free(g);
    }
    ms_mb_free(m);
    return 0;
}
