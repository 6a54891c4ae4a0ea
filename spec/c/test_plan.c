/* The region's plan, the fence and the CONTROL message codec. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/core/plan.h"
#include "check.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

static int decode_str(const char *text, struct ms_plan_msg *m)
{
    return ms_plan_msg_decode(text, strlen(text), m);
}

/* Encodes m and checks that the text is `want` (when given) and decodes
 * back to the same message. */
static void round_trip(const struct ms_plan_msg *m, const char *want)
{
    char *text = NULL;
    size_t len = 0;
    int rc = ms_plan_msg_encode(m, &text, &len);
    CHECK(rc == 0);
    if (rc)
        return;
    CHECK(strlen(text) == len);
    if (want && strcmp(text, want) != 0) {
        fprintf(stderr, "got  %s\nwant %s\n", text, want);
        CHECK(!"encoded text");
    }
    struct ms_plan_msg *d = malloc(sizeof *d);
    CHECK(ms_plan_msg_decode(text, len, d) == 0);
    CHECK(d->kind == m->kind);
    CHECK(d->term == m->term);
    char *again = NULL;
    size_t alen = 0;
    CHECK(ms_plan_msg_encode(d, &again, &alen) == 0);
    CHECK(again && alen == len && memcmp(again, text, len) == 0);
    free(again);
    ms_plan_msg_free(d);
    free(d);
    free(text);
}

static void test_region_plan(void)
{
    CHECK(ms_plan_new(0) == NULL);
    CHECK(ms_plan_new(MS_PLAN_MAX_SHARDS + 1) == NULL);
    struct ms_plan *p = ms_plan_new(16);
    CHECK(p != NULL);
    CHECK(ms_plan_shard_count(p) == 16);
    CHECK(ms_plan_generation(p) == 0);
    uint64_t gen = 99;
    CHECK(ms_plan_owner(p, 3, &gen) == 0 && gen == 0);
    CHECK(ms_plan_owner(p, 16, &gen) == 0 && gen == 0);

    /* applied in order */
    CHECK(ms_plan_apply(p, 3, 0xA, 5) == 1);
    CHECK(ms_plan_owner(p, 3, &gen) == 0xA && gen == 5);
    CHECK(ms_plan_generation(p) == 5);
    /* the same generation again, or an older one: stale, nothing changes */
    CHECK(ms_plan_apply(p, 3, 0xB, 5) == 0);
    CHECK(ms_plan_apply(p, 3, 0xB, 4) == 0);
    CHECK(ms_plan_owner(p, 3, &gen) == 0xA && gen == 5);
    /* newer wins, also to unassign */
    CHECK(ms_plan_apply(p, 3, 0, 9) == 1);
    CHECK(ms_plan_owner(p, 3, &gen) == 0 && gen == 9);
    CHECK(ms_plan_apply(p, 3, 0xA, 8) == 0); /* delayed older update */
    CHECK(ms_plan_owner(p, 3, NULL) == 0);
    CHECK(ms_plan_generation(p) == 9);
    /* bad arguments */
    CHECK(ms_plan_apply(p, 16, 0xA, 10) == MS_EINVAL);
    CHECK(ms_plan_apply(p, 1, 0xA, 0) == MS_EINVAL);
    CHECK(ms_plan_apply(p, 1, 0xA, MS_PLAN_MAX_GEN + 1) == MS_EINVAL);
    CHECK(ms_plan_apply(p, 1, 0xA, MS_PLAN_MAX_GEN) == 1);
    CHECK(ms_plan_generation(p) == MS_PLAN_MAX_GEN);

    /* the owner's check */
    CHECK(ms_plan_apply(p, 7, 0xC, 20) == 1);
    CHECK(ms_plan_owns(p, 7, 0xC, 20) == 1);
    CHECK(ms_plan_owns(p, 7, 0xC, 3) == 1);  /* sender behind: still ours */
    CHECK(ms_plan_owns(p, 7, 0xC, 21) == 0); /* sender ahead: NOT_OWNER */
    CHECK(ms_plan_owns(p, 7, 0xD, 20) == 0); /* someone else's */
    CHECK(ms_plan_owns(p, 3, 0, 0) == 0);    /* unassigned */
    CHECK(ms_plan_owns(p, 99, 0xC, 0) == 0);
    CHECK(ms_plan_count_owned(p, 0xC) == 1);
    CHECK(ms_plan_apply(p, 8, 0xC, 21) == 1);
    CHECK(ms_plan_count_owned(p, 0xC) == 2);
    ms_plan_free(p);
    ms_plan_free(NULL);
}

static void test_fence(void)
{
    struct ms_plan_fence f = {0};
    CHECK(ms_plan_fence_check(&f, 0, 0xA) == 0); /* no term 0 coordinator */
    CHECK(ms_plan_fence_check(&f, 1, 0xA) == 1);
    CHECK(f.term == 1 && f.coordinator == 0xA);
    CHECK(ms_plan_fence_check(&f, 1, 0xA) == 1); /* its own term again */
    CHECK(ms_plan_fence_check(&f, 1, 0xB) == 0); /* a rival, same term */
    CHECK(ms_plan_fence_check(&f, 2, 0xB) == 1); /* a newer coordinator */
    CHECK(ms_plan_fence_check(&f, 1, 0xA) == 0); /* the deposed one */
    CHECK(f.term == 2 && f.coordinator == 0xB);
}

static void test_round_trips(void)
{
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_VIEW_REQUEST;
    m.term = 7;
    round_trip(&m, "{\"t\":\"view_request\",\"term\":7}");
    m.kind = MS_PLAN_MSG_VIEW_DONE;
    round_trip(&m, "{\"t\":\"view_done\",\"term\":7}");
    m.kind = MS_PLAN_MSG_STALE_TERM;
    m.term = 0;
    round_trip(&m, "{\"t\":\"stale_term\",\"term\":0}");

    struct ms_plan_entry e[3] = {
        {0, 0x00000000000000a1ull, 4294967297ull},
        {5, 0, 4294967298ull},
        {63, 0xffffffffffffffffull, MS_PLAN_MAX_GEN},
    };
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_PLAN;
    m.term = 1;
    strcpy(m.type, "Counter");
    m.shard_count = 64;
    m.entries = e;
    m.nentries = 3;
    round_trip(&m, "{\"t\":\"plan\",\"term\":1,\"type\":\"Counter\","
                   "\"shards\":64,\"e\":[[0,\"00000000000000a1\",4294967297],"
                   "[5,\"0000000000000000\",4294967298],"
                   "[63,\"ffffffffffffffff\",4503599627370496]]}");
    m.nentries = 0;
    round_trip(&m, "{\"t\":\"plan\",\"term\":1,\"type\":\"Counter\","
                   "\"shards\":64,\"e\":[]}");

    m.kind = MS_PLAN_MSG_VIEW;
    m.entries = e;
    m.nentries = 2;
    strcpy(m.fingerprint, "Counter|64|least_loaded{}|120");
    round_trip(&m, "{\"t\":\"view\",\"term\":1,\"type\":\"Counter\","
                   "\"shards\":64,\"fp\":\"Counter|64|least_loaded{}|120\","
                   "\"e\":[[0,\"00000000000000a1\",4294967297],"
                   "[5,\"0000000000000000\",4294967298]]}");
    /* escapes: exactly \" \\ and \u00xx; other bytes raw */
    strcpy(m.fingerprint, "a\"b\\c\n\x01\x7f\xc3\xa9/");
    round_trip(&m, "{\"t\":\"view\",\"term\":1,\"type\":\"Counter\","
                   "\"shards\":64,\"fp\":\"a\\\"b\\\\c\\u000a\\u0001"
                   "\\u007f\xc3\xa9/\",\"e\":[[0,\"00000000000000a1\","
                   "4294967297],[5,\"0000000000000000\",4294967298]]}");
    struct ms_plan_msg d;
    char *text;
    size_t len;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == 0);
    CHECK(ms_plan_msg_decode(text, len, &d) == 0);
    CHECK(strcmp(d.fingerprint, m.fingerprint) == 0);
    CHECK(d.nentries == 2 && d.entries[1].shard == 5 &&
          d.entries[0].owner == 0xa1 && d.entries[1].gen == 4294967298ull);
    ms_plan_msg_free(&d);
    free(text);

    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_ALLOC;
    strcpy(m.type, "Order");
    m.shard = 65535;
    round_trip(&m, "{\"t\":\"alloc\",\"term\":0,\"type\":\"Order\","
                   "\"shard\":65535}");
    m.kind = MS_PLAN_MSG_ALLOC_REFUSED;
    m.term = 3;
    strcpy(m.code, "not_ready");
    strcpy(m.reason, "still collecting");
    round_trip(&m, "{\"t\":\"alloc_refused\",\"term\":3,\"type\":\"Order\","
                   "\"shard\":65535,\"code\":\"not_ready\","
                   "\"reason\":\"still collecting\"}");
    m.kind = MS_PLAN_MSG_REGISTER_REFUSED;
    strcpy(m.reason, "");
    round_trip(&m, "{\"t\":\"register_refused\",\"term\":3,"
                   "\"type\":\"Order\",\"reason\":\"\"}");
    CHECK(strcmp(ms_plan_msg_kind_name(MS_PLAN_MSG_ALLOC), "alloc") == 0);
    CHECK(strcmp(ms_plan_msg_kind_name(99), "unknown") == 0);
}

static void test_encode_refuses(void)
{
    struct ms_plan_entry e[2] = {{5, 1, 10}, {5, 2, 11}};
    struct ms_plan_msg m;
    char *text = (char *)1;
    size_t len;
    memset(&m, 0, sizeof m);
    m.kind = 42;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL && !text);
    m.kind = MS_PLAN_MSG_PLAN;
    m.term = 1;
    strcpy(m.type, "Counter");
    m.shard_count = 8;
    m.entries = e;
    m.nentries = 2; /* duplicate shard */
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    e[1].shard = 8; /* out of range */
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    e[1].shard = 6;
    e[1].gen = 0;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    e[1].gen = 11;
    m.term = 0; /* plans come from a coordinator of term >= 1 */
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    m.term = MS_PLAN_MAX_TERM + 1;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    m.term = 1;
    strcpy(m.type, "Bad Name");
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    strcpy(m.type, "");
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    strcpy(m.type, "Counter");
    m.shard_count = 0;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
    m.shard_count = 8;
    m.nentries = MS_PLAN_MSG_MAX_ENTRIES + 1;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_E2BIG);
    m.nentries = 2;
    CHECK(ms_plan_msg_encode(&m, &text, &len) == 0);
    free(text);
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_ALLOC_REFUSED;
    m.term = 1;
    strcpy(m.type, "Counter");
    strcpy(m.code, "Not-Ready");
    CHECK(ms_plan_msg_encode(&m, &text, &len) == MS_EINVAL);
}

/* Texts that are not exactly the format: all refused, nothing allocated. */
static void test_malformed(void)
{
    static const char *bad[] = {
        "",
        "{}",
        "null",
        "[1,2]",
        "{\"t\":\"view_request\"}",
        "{\"t\":\"view_request\",\"term\":7} ",
        " {\"t\":\"view_request\",\"term\":7}",
        "{\"t\": \"view_request\",\"term\":7}",
        "{\"term\":7,\"t\":\"view_request\"}",
        "{\"t\":\"view_request\",\"term\":7,\"x\":1}",
        "{\"t\":\"view_request\",\"term\":07}",
        "{\"t\":\"view_request\",\"term\":-7}",
        "{\"t\":\"view_request\",\"term\":7.0}",
        "{\"t\":\"view_request\",\"term\":1e3}",
        "{\"t\":\"view_request\",\"term\":\"7\"}",
        "{\"t\":\"view_request\",\"term\":0}",
        "{\"t\":\"view_request\",\"term\":1048576}",
        "{\"t\":\"view_request\",\"term\":99999999999999999999}",
        "{\"t\":\"View_request\",\"term\":7}",
        "{\"t\":\"gossip\",\"term\":7}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":0,\"e\":[]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":65537,\"e\":[]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"\",\"shards\":8,\"e\":[]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C D\",\"shards\":8,\"e\":[]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\\\\\",\"shards\":8,\"e\":[]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":[],}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":[[]]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,\"0000000000000001\",1],]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,\"0000000000000001\",0]]}", /* generation 0 */
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,\"0000000000000001\",4503599627370497]]}", /* above max */
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[8,\"0000000000000001\",1]]}", /* shard out of range */
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[2,\"0000000000000001\",1],[1,\"0000000000000001\",1]]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,\"0000000000000001\",1],[1,\"0000000000000002\",2]]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,\"000000000000000A\",1]]}", /* uppercase hex */
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,\"00000000000001\",1]]}", /* short uid */
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,1,1]]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8,\"e\":"
        "[[1,\"0000000000000001\",1,4]]}",
        "{\"t\":\"plan\",\"term\":1,\"type\":\"C\",\"shards\":8}",
        "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
        "\"fp\":\"a\\nb\",\"e\":[]}", /* \n is written \u000a */
        "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
        "\"fp\":\"\\u0041\",\"e\":[]}", /* needless escape */
        "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
        "\"fp\":\"\\u0000\",\"e\":[]}",
        "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
        "\"fp\":\"\\u00zz\",\"e\":[]}",
        "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
        "\"fp\":\"a\tb\",\"e\":[]}", /* raw control byte */
        "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
        "\"fp\":\"abc,\"e\":[]}",
        "{\"t\":\"alloc_refused\",\"term\":1,\"type\":\"C\",\"shard\":1,"
        "\"code\":\"Not_ready\",\"reason\":\"\"}",
        "{\"t\":\"alloc_refused\",\"term\":1,\"type\":\"C\",\"shard\":1,"
        "\"code\":\"\",\"reason\":\"\"}",
        "{\"t\":\"alloc\",\"term\":1,\"type\":\"C\",\"shard\":65536}",
        "{\"t\":\"register_refused\",\"term\":0,\"type\":\"C\","
        "\"reason\":\"x\"}",
        "\x00\x01\x02garbage",
    };
    struct ms_plan_msg m;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = strlen(bad[i]);
        if (i == sizeof bad / sizeof bad[0] - 1)
            len = 10; /* the binary one, NUL included */
        int rc = ms_plan_msg_decode(bad[i], len, &m);
        if (rc != MS_EBADJSON)
            fprintf(stderr, "accepted or wrong code %d: %s\n", rc, bad[i]);
        CHECK(rc == MS_EBADJSON);
        CHECK(m.entries == NULL && m.kind == 0);
    }
    /* the NUL byte inside an otherwise valid text */
    const char nul[] = "{\"t\":\"view_request\",\"term\":7}";
    char buf[64];
    memcpy(buf, nul, sizeof nul);
    buf[5] = '\0';
    CHECK(ms_plan_msg_decode(buf, sizeof nul - 1, &m) == MS_EBADJSON);
    CHECK(ms_plan_msg_decode(NULL, 0, &m) == MS_EBADJSON);

    /* every proper prefix of a valid text is refused */
    const char *good = "{\"t\":\"view\",\"term\":12,\"type\":\"C\","
                       "\"shards\":8,\"fp\":\"x\\\"y\","
                       "\"e\":[[1,\"00000000000000ab\",3],"
                       "[7,\"0000000000000000\",9]]}";
    CHECK(decode_str(good, &m) == 0);
    ms_plan_msg_free(&m);
    for (size_t n = 0; n < strlen(good); n++) {
        CHECK(ms_plan_msg_decode(good, n, &m) != 0);
        CHECK(m.entries == NULL);
    }
}

static void test_limits(void)
{
    struct ms_plan_msg m;
    /* a type name of 65 bytes, a fingerprint of 1025 */
    char text[4096];
    snprintf(text, sizeof text,
             "{\"t\":\"alloc\",\"term\":1,\"type\":\"%065d\",\"shard\":1}", 0);
    CHECK(decode_str(text, &m) == MS_E2BIG);
    snprintf(text, sizeof text,
             "{\"t\":\"alloc\",\"term\":1,\"type\":\"%064d\",\"shard\":1}", 0);
    CHECK(decode_str(text, &m) == 0);
    char fp[1100];
    memset(fp, 'f', 1025);
    fp[1025] = '\0';
    snprintf(text, sizeof text,
             "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
             "\"fp\":\"%s\",\"e\":[]}",
             fp);
    CHECK(decode_str(text, &m) == MS_E2BIG);
    fp[1024] = '\0';
    snprintf(text, sizeof text,
             "{\"t\":\"view\",\"term\":1,\"type\":\"C\",\"shards\":8,"
             "\"fp\":\"%s\",\"e\":[]}",
             fp);
    CHECK(decode_str(text, &m) == 0);
    CHECK(strlen(m.fingerprint) == 1024);

    /* the largest plan message fits; one entry more is refused */
    struct ms_plan_entry *e =
        malloc((MS_PLAN_MSG_MAX_ENTRIES + 1) * sizeof *e);
    for (uint32_t i = 0; i <= MS_PLAN_MSG_MAX_ENTRIES; i++)
        e[i] = (struct ms_plan_entry){60000 + i, ~0ull, MS_PLAN_MAX_GEN};
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_PLAN;
    m.term = MS_PLAN_MAX_TERM;
    memset(m.type, 'T', MS_PLAN_MAX_TYPE_NAME);
    m.shard_count = MS_PLAN_MAX_SHARDS;
    m.entries = e;
    m.nentries = MS_PLAN_MSG_MAX_ENTRIES;
    char *big;
    size_t len;
    CHECK(ms_plan_msg_encode(&m, &big, &len) == 0);
    CHECK(len <= MS_PLAN_MSG_MAX);
    struct ms_plan_msg d;
    CHECK(ms_plan_msg_decode(big, len, &d) == 0);
    CHECK(d.nentries == MS_PLAN_MSG_MAX_ENTRIES);
    CHECK(d.entries[MS_PLAN_MSG_MAX_ENTRIES - 1].shard ==
          60000 + MS_PLAN_MSG_MAX_ENTRIES - 1);
    ms_plan_msg_free(&d);
    /* hand-made text with one entry more */
    char *more = malloc(len + 64);
    memcpy(more, big, len - 2);
    size_t n = len - 2;
    n += (size_t)sprintf(more + n, ",[%u,\"ffffffffffffffff\",1]]}",
                         60000 + MS_PLAN_MSG_MAX_ENTRIES);
    CHECK(ms_plan_msg_decode(more, n, &d) == MS_E2BIG);
    CHECK(d.entries == NULL);
    CHECK(ms_plan_msg_decode(big, MS_PLAN_MSG_MAX + 1, &d) == MS_E2BIG);
    free(more);
    free(big);
    free(e);
}

/* Random byte changes to valid texts: never a crash, and whatever is
 * accepted is canonical (encodes back to the very same bytes). */
static void test_mutations(void)
{
    struct ms_plan_entry e[3] = {{1, 0xab, 3}, {4, 0, 9}, {7, 0x1234, 12}};
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_VIEW;
    m.term = 12;
    strcpy(m.type, "Order");
    m.shard_count = 8;
    strcpy(m.fingerprint, "o\"p\\q\x01");
    m.entries = e;
    m.nentries = 3;
    char *good;
    size_t len;
    CHECK(ms_plan_msg_encode(&m, &good, &len) == 0);
    static const char alphabet[] = "{}[]\",:0123456789abcdefu\\tx ";
    int accepted = 0;
    for (int round = 0; round < 20000; round++) {
        char buf[512];
        memcpy(buf, good, len);
        size_t n = len;
        int edits = 1 + (int)(rnd() % 3);
        for (int k = 0; k < edits; k++) {
            size_t at = rnd() % n;
            switch (rnd() % 3) {
            case 0:
                buf[at] = alphabet[rnd() % (sizeof alphabet - 1)];
                break;
            case 1: /* delete */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
                break;
            default: /* insert */
                if (n + 1 < sizeof buf) {
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = alphabet[rnd() % (sizeof alphabet - 1)];
                    n++;
                }
            }
        }
        struct ms_plan_msg d;
        if (ms_plan_msg_decode(buf, n, &d) != 0) {
            CHECK(d.entries == NULL);
            continue;
        }
        accepted++;
        char *again;
        size_t alen;
        CHECK(ms_plan_msg_encode(&d, &again, &alen) == 0);
        CHECK(alen == n && memcmp(again, buf, n) == 0);
        free(again);
        ms_plan_msg_free(&d);
    }
    CHECK(accepted > 0); /* some digit changes stay valid */
    free(good);
}

/* A region's view, chunked, rebuilds the same plan elsewhere. */
static void test_view_chunks(void)
{
    struct ms_plan *p = ms_plan_new(MS_PLAN_MAX_SHARDS);
    struct ms_plan *q = ms_plan_new(MS_PLAN_MAX_SHARDS);
    for (uint32_t s = 0; s < MS_PLAN_MAX_SHARDS; s++)
        if (s % 7 != 3)
            CHECK(ms_plan_apply(p, s, 0x100 + s % 5, 1 + s) == 1);
    uint32_t cursor = 0;
    int chunks = 0;
    while (cursor < MS_PLAN_MAX_SHARDS) {
        char *text;
        size_t len;
        uint32_t before = cursor;
        CHECK(ms_plan_view_encode(p, "Order", "fp", 4, &cursor, &text,
                                  &len) == 0);
        CHECK(cursor > before);
        CHECK(len <= MS_PLAN_MSG_MAX);
        struct ms_plan_msg m;
        CHECK(ms_plan_msg_decode(text, len, &m) == 0);
        CHECK(m.kind == MS_PLAN_MSG_VIEW && m.term == 4 &&
              strcmp(m.type, "Order") == 0 &&
              strcmp(m.fingerprint, "fp") == 0 &&
              m.shard_count == MS_PLAN_MAX_SHARDS);
        CHECK(m.nentries <= MS_PLAN_MSG_MAX_ENTRIES);
        /* a view's entries are a plan's entries */
        m.kind = MS_PLAN_MSG_PLAN;
        CHECK(ms_plan_apply_msg(q, &m) == (int)m.nentries);
        CHECK(ms_plan_apply_msg(q, &m) == 0); /* again: all stale */
        ms_plan_msg_free(&m);
        free(text);
        chunks++;
    }
    CHECK(chunks > 1);
    for (uint32_t s = 0; s < MS_PLAN_MAX_SHARDS; s++) {
        uint64_t g1, g2;
        CHECK(ms_plan_owner(p, s, &g1) == ms_plan_owner(q, s, &g2));
        CHECK(g1 == g2);
    }
    CHECK(ms_plan_generation(q) == ms_plan_generation(p));

    /* an empty plan still yields one message: it registers the type */
    struct ms_plan *empty = ms_plan_new(8);
    char *text;
    size_t len;
    cursor = 0;
    CHECK(ms_plan_view_encode(empty, "Counter", "fp", 1, &cursor, &text,
                              &len) == 0);
    CHECK(cursor == 8);
    CHECK(strcmp(text, "{\"t\":\"view\",\"term\":1,\"type\":\"Counter\","
                       "\"shards\":8,\"fp\":\"fp\",\"e\":[]}") == 0);
    free(text);
    cursor = 0;
    CHECK(ms_plan_view_encode(empty, "Bad Name", "fp", 1, &cursor, &text,
                              &len) == MS_EINVAL);
    CHECK(cursor == 0 && text == NULL);

    /* apply_msg refuses another shard count or kind */
    struct ms_plan_msg m;
    memset(&m, 0, sizeof m);
    m.kind = MS_PLAN_MSG_PLAN;
    m.shard_count = 16;
    CHECK(ms_plan_apply_msg(empty, &m) == MS_EINVAL);
    m.shard_count = 8;
    m.kind = MS_PLAN_MSG_VIEW_DONE;
    CHECK(ms_plan_apply_msg(empty, &m) == MS_EINVAL);
    ms_plan_free(empty);
    ms_plan_free(p);
    ms_plan_free(q);
}

int main(void)
{
    test_region_plan();
    test_fence();
    test_round_trips();
    test_encode_refuses();
    test_malformed();
    test_limits();
    test_mutations();
    test_view_chunks();
    CHECK_DONE();
}
