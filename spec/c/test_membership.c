/*
 * The membership state machine: single-node unit checks and the gossip
 * parser's rejections. The multi-node simulation (mb_sim.h) is driven
 * by test_membership_sim.c.
 */
#include "mb_sim.h"

/* --- single node --- */

static struct ms_membership *solo(const char *name, const char *addr,
                                  const char *const *seeds, int nseeds,
                                  uint64_t uid)
{
    struct ms_membership *m = NULL;
    struct ms_mb_self self = {.name = name, .address = addr, .uid = uid,
                              .roles = "backend,api"};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = nseeds};
    CHECK(ms_mb_new(&m, &self, &cfg) == 0);
    return m;
}

static int count_kind(struct ms_membership *m, int kind)
{
    struct ms_mb_action a;
    int n = 0;
    while (ms_mb_next_action(m, &a))
        n += a.kind == kind;
    return n;
}

static void test_new_rejects(void)
{
    struct ms_membership *m = (void *)1;
    struct ms_mb_self ok = {.name = "n1", .address = "h:1", .uid = 7};
    struct ms_mb_self bad = ok;
    CHECK(ms_mb_new(&m, &ok, NULL) == 0);
    ms_mb_free(m);
    bad.uid = 0;
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL && m == NULL);
    bad = ok;
    bad.name = "";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.name = "a b";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.name = "x\"y";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    char longname[80];
    memset(longname, 'a', 65);
    longname[65] = 0;
    bad.name = longname;
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    longname[64] = 0;
    CHECK(ms_mb_new(&m, &bad, NULL) == 0);
    ms_mb_free(m);
    bad = ok;
    bad.address = NULL;
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad = ok;
    bad.roles = "a,,b";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.roles = "a,b,c,d,e,f,g,h,i";
    CHECK(ms_mb_new(&m, &bad, NULL) == MS_EINVAL);
    bad.roles = "a,b,c,d,e,f,g,h";
    CHECK(ms_mb_new(&m, &bad, NULL) == 0);
    ms_mb_free(m);
    const char *seeds[MS_MB_MAX_SEEDS + 1] = {0};
    struct ms_mb_config cfg = {.seeds = seeds, .nseeds = MS_MB_MAX_SEEDS + 1};
    for (int i = 0; i <= MS_MB_MAX_SEEDS; i++)
        seeds[i] = "h:1";
    CHECK(ms_mb_new(&m, &ok, &cfg) == MS_EINVAL);
}

/* A node without seeds founds a cluster alone, then leaves it. */
static void test_single_node(void)
{
    struct ms_membership *m = solo("n1", "127.0.0.1:7101", NULL, 0, 42);
    CHECK(ms_mb_self_status(m) == MS_MB_JOINING);
    CHECK(ms_mb_leader(m) == NULL);
    ms_mb_tick(m, 100);
    CHECK(ms_mb_self_status(m) == MS_MB_UP);
    CHECK(ms_mb_leader(m) && ms_mb_leader(m)->uid == 42);
    CHECK(ms_mb_leader(m)->up_number == 1);
    CHECK(ms_mb_converged(m));
    CHECK(ms_mb_has_role(ms_mb_leader(m), "api"));
    CHECK(ms_mb_has_role(ms_mb_leader(m), "backend"));
    CHECK(!ms_mb_has_role(ms_mb_leader(m), "back"));
    CHECK(count_kind(m, MS_MB_COORDINATOR_CHANGED) == 1);
    CHECK(ms_mb_next_deadline(m, 100) == 1000);
    CHECK(ms_mb_find_by_name(m, "n1") == ms_mb_find_by_uid(m, 42));
    CHECK(ms_mb_find_by_address(m, "127.0.0.1:7101") ==
          ms_mb_find_by_uid(m, 42));
    CHECK(ms_mb_find_by_address(m, "127.0.0.1:1") == NULL);
    CHECK(ms_mb_is_reachable(m, 42) && !ms_mb_is_reachable(m, 43));
    char buf[1024];
    size_t need = ms_mb_status_json(m, buf, sizeof buf);
    CHECK(need == strlen(buf));
    CHECK(strstr(buf, "\"self\":\"000000000000002a\",\"leader\":"
                      "\"000000000000002a\",\"converged\":true") != NULL);
    CHECK(strstr(buf, "\"coordinator\":\"000000000000002a\"") != NULL);
    CHECK(strstr(buf, "\"status\":\"up\",\"up_number\":1,\"roles\":"
                      "[\"backend\",\"api\"]") != NULL);
    char small[8];
    CHECK(ms_mb_status_json(m, small, sizeof small) == need);
    CHECK(strlen(small) == 7);
    CHECK(ms_mb_down(m, "nowhere:1", 200) == MS_EINVAL);
    CHECK(ms_mb_set_owns_shards(m, 99, 0, 200) == MS_EINVAL);
    /* leave: waits while it owns shards, then Exiting, then Removed */
    CHECK(ms_mb_leave(m, 200) == 0);
    CHECK(ms_mb_leave(m, 200) == 0);
    CHECK(ms_mb_self_status(m) == MS_MB_LEAVING);
    CHECK(ms_mb_leader(m) == NULL);
    ms_mb_tick(m, 5000);
    CHECK(ms_mb_self_status(m) == MS_MB_LEAVING);
    CHECK(ms_mb_set_owns_shards(m, 42, 0, 5100) == 0);
    CHECK(ms_mb_self_status(m) == MS_MB_EXITING);
    ms_mb_tick(m, 5200);
    CHECK(ms_mb_self_status(m) == MS_MB_REMOVED);
    CHECK(ms_mb_member_count(m) == 0);
    CHECK(ms_mb_is_tombstoned(m, 42));
    CHECK(ms_mb_next_deadline(m, 5200) == UINT64_MAX);
    CHECK(ms_mb_leave(m, 5300) == MS_EINVAL);
    CHECK(ms_mb_on_heartbeat(m, 7, 5300) == 0);
    ms_mb_free(m);
}

/* The first seed waits seed_timeout_ms for the other seeds, then founds
 * the cluster; another seed never does. */
static void test_seed_bootstrap(void)
{
    const char *seeds[] = {"h:1", "h:2"};
    struct ms_membership *a = solo("a", "h:1", seeds, 2, 1);
    struct ms_membership *b = solo("b", "h:2", seeds, 2, 2);
    int knocks = 0;
    for (uint64_t t = 0; t < 4900; t += 100) {
        ms_mb_tick(a, t);
        ms_mb_tick(b, t);
        struct ms_mb_action x;
        while (ms_mb_next_action(b, &x))
            knocks += x.kind == MS_MB_SEND_GOSSIP && x.uid == 0 &&
                      !strcmp(x.address, "h:1");
        count_kind(a, 0);
    }
    CHECK(knocks == 5); /* b knocks on seed h:1 every gossip round */
    CHECK(ms_mb_self_status(a) == MS_MB_JOINING);
    ms_mb_tick(a, 5000);
    CHECK(ms_mb_self_status(a) == MS_MB_UP);
    for (uint64_t t = 5000; t < 60000; t += 1000)
        ms_mb_tick(b, t);
    CHECK(ms_mb_self_status(b) == MS_MB_JOINING);
    ms_mb_free(a);
    ms_mb_free(b);
}

static char *gossip_of(int nmembers, const char *member_fmt, uint64_t first);
#define MEMBER                                                              \
    "{\"u\":\"%016llx\",\"n\":\"x%d\",\"a\":\"10.0.0.1:%d\",\"r\":\"\","    \
    "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}"

/* Gossip goes to `fanout` peers per round, round-robin in uid order;
 * heartbeats and unreachability follow the configured intervals. */
static void test_rounds(void)
{
    struct ms_membership *m = NULL;
    struct ms_mb_self self = {.name = "a", .address = "h:1", .uid = 1};
    struct ms_mb_config cfg = {.heartbeat_interval_ms = 250,
                               .unreachable_after_ms = 1000,
                               .gossip_interval_ms = 500};
    CHECK(ms_mb_new(&m, &self, &cfg) == 0);
    ms_mb_tick(m, 0);
    count_kind(m, 0);
    char *g = gossip_of(4, MEMBER, 2); /* uids 2..5 */
    CHECK(ms_mb_gossip_merge(m, g, strlen(g), 2, 10) == 0);
    free(g);
    struct ms_mb_action a;
    int answers = 0;
    while (ms_mb_next_action(m, &a))
        answers += a.kind == MS_MB_SEND_GOSSIP && a.uid == 2;
    CHECK(answers == 1); /* the sender was behind */
    uint64_t targets[16];
    int nt = 0, hbs = 0, unreachable = 0;
    for (uint64_t t = 250; t <= 2000; t += 250) {
        ms_mb_tick(m, t);
        while (ms_mb_next_action(m, &a)) {
            if (a.kind == MS_MB_SEND_GOSSIP && nt < 16)
                targets[nt++] = a.uid;
            hbs += a.kind == MS_MB_SEND_HEARTBEAT;
            if (a.kind == MS_MB_MEMBER_UNREACHABLE) {
                CHECK(t == 1250); /* 1000 ms after it was learned at 10 */
                unreachable++;
            }
        }
        CHECK(ms_mb_next_deadline(m, t) <= 250);
    }
    static const uint64_t want[12] = {2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4, 5};
    CHECK(nt == 12);
    for (int i = 0; i < nt && i < 12; i++)
        CHECK(targets[i] == want[i]);
    CHECK(hbs == 8 * 4);
    CHECK(unreachable == 4);
    ms_mb_on_heartbeat_ack(m, 3, 2010);
    CHECK(ms_mb_is_reachable(m, 3) && !ms_mb_is_reachable(m, 4));
    CHECK(ms_mb_next_action(m, &a) && a.kind == MS_MB_MEMBER_REACHABLE &&
          a.uid == 3);
    ms_mb_free(m);
}

/* --- the gossip parser --- */

static char *gossip_of(int nmembers, const char *member_fmt, uint64_t first)
{
    size_t cap = 256 + (size_t)nmembers * 256;
    char *b = malloc(cap);
    size_t n = (size_t)snprintf(b, cap, "{\"v\":1,\"max_up\":%d,\"max_tomb\""
                                        ":0,\"members\":[",
                                nmembers);
    for (int i = 0; i < nmembers; i++) {
        if (i)
            b[n++] = ',';
        n += (size_t)snprintf(b + n, cap - n, member_fmt,
                              (unsigned long long)(first + (uint64_t)i), i,
                              i);
    }
    snprintf(b + n, cap - n, "],\"tombstones\":[],\"seen\":[]}");
    return b;
}

struct bad {
    const char *text;
    int err;
};

static void test_malformed(void)
{
    struct sim s;
    boot3(&s, 0xbad);
    struct ms_membership *m = s.n[0].m;
    size_t len, cnt = 3;
    char *valid = ms_mb_gossip_encode(s.n[1].m, &len);
    uint64_t d = ms_mb_digest(m);
    struct ms_mb_action a;
#define UNCHANGED()                                                         \
    do {                                                                    \
        CHECK(ms_mb_digest(m) == d);                                        \
        CHECK(ms_mb_member_count(m) == cnt);                                \
        CHECK(!ms_mb_next_action(m, &a));                                   \
    } while (0)
    /* every truncation */
    for (size_t k = 0; k < len; k++) {
        CHECK(ms_mb_gossip_merge(m, valid, k, s.n[1].uid, s.now) < 0);
        UNCHANGED();
    }
    /* every byte changed (on n3's view): rejected without effect, or
     * accepted (a changed uid or number can still be well-formed) */
    const char subst[] = {' ', 'x', '"', '0', '9', '}', ',', '\\', 0,
                          (char)0x80};
    m = s.n[2].m;
    d = ms_mb_digest(m);
    int accepted = 0;
    for (size_t k = 0; k < len; k++)
        for (size_t c = 0; c < sizeof subst; c++) {
            char *t = malloc(len);
            memcpy(t, valid, len);
            t[k] = subst[c];
            int rc = ms_mb_gossip_merge(m, t, len, s.n[1].uid, s.now);
            if (rc < 0) {
                UNCHANGED();
            } else {
                CHECK(rc == 0);
                accepted++;
                count_kind(m, 0);
                d = ms_mb_digest(m);
                cnt = ms_mb_member_count(m);
            }
            free(t);
        }
    printf("mutations: %d of %zu accepted\n", accepted, len * sizeof subst);
    CHECK(accepted > 0 && accepted < (int)(len * sizeof subst) / 2);
    m = s.n[0].m;
    d = ms_mb_digest(m);
    cnt = 3;
    /* hand-made texts */
    static const struct bad bads[] = {
        {"", MS_EBADJSON},
        {"{}", MS_EBADJSON},
        {"{\"v\":2,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{ \"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]} ", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":01,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":4294967296,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[],\"x\":1}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"seen\":[],\"tombstones\":[]}", MS_EBADJSON},
        /* seen uid that is not a member */
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":[],"
         "\"tombstones\":[],\"seen\":[\"0000000000000001\"]}", MS_EBADJSON},
        /* tombstone sequence above max_tomb, or 0 */
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":1,\"members\":[],"
         "\"tombstones\":[{\"u\":\"0000000000000001\",\"q\":2}],"
         "\"seen\":[]}", MS_EBADJSON},
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":1,\"members\":[],"
         "\"tombstones\":[{\"u\":\"0000000000000001\",\"q\":0}],"
         "\"seen\":[]}", MS_EBADJSON},
        /* unsorted tombstones */
        {"{\"v\":1,\"max_up\":0,\"max_tomb\":2,\"members\":[],"
         "\"tombstones\":[{\"u\":\"0000000000000002\",\"q\":1},"
         "{\"u\":\"0000000000000001\",\"q\":2}],\"seen\":[]}", MS_EBADJSON},
    };
    for (size_t k = 0; k < sizeof bads / sizeof bads[0]; k++) {
        int rc = ms_mb_gossip_merge(m, bads[k].text, strlen(bads[k].text),
                                    s.n[1].uid, s.now);
        if (rc != bads[k].err)
            fprintf(stderr, "bad text %zu: %d\n", k, rc);
        CHECK(rc == bads[k].err);
        UNCHANGED();
    }
    /* member fields: each variant of one member */
    static const struct {
        const char *member;
        int err;
    } mbad[] = {
        {"{\"u\":\"00000000000000AB\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"0000000000000000\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"removed\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":0}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"joining\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":2}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"a b\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"a\\\"\",\"a\":\"h:1\","
         "\"r\":\"\",\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\","
         "\"r\":\"a,,b\",\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\","
         "\"r\":\"1,2,3,4,5,6,7,8,9\",\"ver\":\"\",\"w\":1,\"i\":0,"
         "\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":4294967296,\"i\":0,\"s\":\"up\",\"o\":1}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":18446744073709551616,\"s\":\"up\","
         "\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":1,\"i\":0,\"s\":\"up\",\"o\":1,\"z\":0}",
         MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"\",\"w\":-1,\"i\":0,\"s\":\"up\",\"o\":1}", MS_EBADJSON},
        {"{\"u\":\"00000000000000ab\",\"n\":\"x\",\"a\":\"h:1\",\"r\":\"\","
         "\"ver\":\"123456789012345678901234567890123\",\"w\":1,\"i\":0,"
         "\"s\":\"up\",\"o\":1}", MS_E2BIG},
    };
    for (size_t k = 0; k < sizeof mbad / sizeof mbad[0]; k++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "{\"v\":1,\"max_up\":1,\"max_tomb\":0,\"members\":[%s],"
                 "\"tombstones\":[],\"seen\":[]}",
                 mbad[k].member);
        int rc = ms_mb_gossip_merge(m, text, strlen(text), s.n[1].uid,
                                    s.now);
        if (rc != mbad[k].err)
            fprintf(stderr, "bad member %zu: %d\n", k, rc);
        CHECK(rc == mbad[k].err);
        UNCHANGED();
    }
    /* lengths: 64-byte names pass, 65 do not; 128/129-byte addresses */
    char name[70], addr[140], text[1024];
    memset(name, 'n', 65);
    name[65] = 0;
    memset(addr, 'a', 129);
    addr[129] = 0;
    const char *tpl = "{\"v\":1,\"max_up\":0,\"max_tomb\":0,\"members\":["
                      "{\"u\":\"00000000000000ab\",\"n\":\"%s\",\"a\":\"%s\","
                      "\"r\":\"\",\"ver\":\"\",\"w\":1,\"i\":0,"
                      "\"s\":\"joining\",\"o\":0}],\"tombstones\":[],"
                      "\"seen\":[]}";
    snprintf(text, sizeof text, tpl, name, "h:1");
    CHECK(ms_mb_gossip_merge(m, text, strlen(text), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    snprintf(text, sizeof text, tpl, "x", addr);
    CHECK(ms_mb_gossip_merge(m, text, strlen(text), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    /* duplicate and unsorted uids */
    char *dup = gossip_of(2, MEMBER, 5);
    char *p = strstr(dup, "0000000000000006");
    memcpy(p, "0000000000000005", 16);
    CHECK(ms_mb_gossip_merge(m, dup, strlen(dup), 0, s.now) == MS_EBADJSON);
    memcpy(p, "0000000000000004", 16);
    CHECK(ms_mb_gossip_merge(m, dup, strlen(dup), 0, s.now) == MS_EBADJSON);
    UNCHANGED();
    free(dup);
    /* too many members: in the text, or in the union with this view */
    char *big = gossip_of(MS_MB_MAX_MEMBERS + 1, MEMBER, 0x100);
    CHECK(ms_mb_gossip_merge(m, big, strlen(big), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    free(big);
    big = gossip_of(MS_MB_MAX_MEMBERS - 2, MEMBER, 0x100);
    CHECK(ms_mb_gossip_merge(m, big, strlen(big), 0, s.now) == MS_E2BIG);
    UNCHANGED();
    free(big);
    char *huge = calloc(1, MS_MB_MAX_GOSSIP + 1);
    CHECK(ms_mb_gossip_merge(m, huge, MS_MB_MAX_GOSSIP + 1, 0, s.now) ==
          MS_E2BIG);
    UNCHANGED();
    free(huge);
    CHECK(ms_mb_gossip_merge(m, NULL, 5, 0, s.now) == MS_EINVAL);
    /* and texts of the right shape are taken: 64/128-byte fields, and a
     * view filled to the limit */
    name[64] = 0;
    addr[128] = 0;
    snprintf(text, sizeof text, tpl, name, addr);
    CHECK(ms_mb_gossip_merge(m, text, strlen(text), 0, s.now) == 0);
    CHECK(ms_mb_member_count(m) == 4);
    count_kind(m, 0);
    big = gossip_of(MS_MB_MAX_MEMBERS - 4, MEMBER, 0x100);
    CHECK(ms_mb_gossip_merge(m, big, strlen(big), 0, s.now) == 0);
    CHECK(ms_mb_member_count(m) == MS_MB_MAX_MEMBERS);
    count_kind(m, 0);
    free(big);
    /* a full view encodes and parses back */
    char *full = ms_mb_gossip_encode(m, &len);
    CHECK(full && len < MS_MB_MAX_GOSSIP);
    struct ms_membership *other =
        solo("zz", "10.9.9.9:1", NULL, 0, 0xfffffffffffffff0ULL);
    CHECK(ms_mb_gossip_merge(other, full, len, 0, 0) == MS_E2BIG);
    CHECK(ms_mb_member_count(other) == 1);
    ms_mb_free(other);
    free(full);
    free(valid);
    sim_free(&s);
}

int main(void)
{
    test_new_rejects();
    test_single_node();
    test_seed_bootstrap();
    test_rounds();
    test_malformed();
    CHECK_DONE();
}
