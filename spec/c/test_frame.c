/* The frame codec: round trips, chunked decoding, limits, malformed input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/core/frame.h"
#include "check.h"

#define MAX_PAYLOAD 4096
#define MAX_FRAME (MS_FRAME_HEADER + MS_FRAME_MAX_TYPE + MS_MAX_ID + 4096)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

static struct ms_frame sample(int kind, const char *type, const char *id,
                              const char *payload)
{
    struct ms_frame f = {0};
    f.kind = (uint8_t)kind;
    f.flags = 0xA55A;
    f.corr = 0x0102030405060708ull;
    f.shard = 0xDEADBEEF;
    f.generation = 0xFFFFFFFF00000001ull;
    f.type = type;
    f.type_len = strlen(type);
    f.id = id;
    f.id_len = strlen(id);
    f.payload = payload;
    f.payload_len = strlen(payload);
    return f;
}

static int same(const struct ms_frame *a, const struct ms_frame *b)
{
    return a->kind == b->kind && a->flags == b->flags &&
           a->corr == b->corr && a->shard == b->shard &&
           a->generation == b->generation && b->version == MS_PROTO_VERSION &&
           a->type_len == b->type_len && a->id_len == b->id_len &&
           a->payload_len == b->payload_len &&
           memcmp(a->type, b->type, a->type_len) == 0 &&
           memcmp(a->id, b->id, a->id_len) == 0 &&
           memcmp(a->payload, b->payload, a->payload_len) == 0;
}

/* Decodes `n` bytes fed in chunks of 1..maxchunk (0: all at once) and
 * checks that they hold exactly the `nf` frames of `want`. */
static void decode_chunks(const uint8_t *bytes, size_t n,
                          const struct ms_frame *want, int nf,
                          size_t maxchunk)
{
    struct ms_frame_decoder d;
    ms_frame_decoder_init(&d, MAX_PAYLOAD, MAX_FRAME);
    size_t off = 0;
    int got = 0;
    while (off < n) {
        size_t chunk = maxchunk ? 1 + rnd() % maxchunk : n;
        if (chunk > n - off)
            chunk = n - off;
        /* a private copy per chunk: frame pointers must not outlive it */
        uint8_t *copy = malloc(chunk);
        memcpy(copy, bytes + off, chunk);
        size_t at = 0;
        for (;;) {
            struct ms_frame f;
            size_t used;
            int rc = ms_frame_feed(&d, copy + at, chunk - at, &used, &f);
            CHECK(rc >= 0);
            CHECK(used <= chunk - at);
            at += used;
            if (rc != 1)
                break;
            CHECK(got < nf);
            if (got < nf)
                CHECK(same(&want[got], &f));
            got++;
        }
        CHECK(at == chunk);
        free(copy);
        off += chunk;
    }
    CHECK(got == nf);
    CHECK(d.hlen == 0 || d.delivered);
    ms_frame_decoder_free(&d);
}

static void test_round_trips(void)
{
    static char big[MAX_PAYLOAD + 1];
    memset(big, 'x', MAX_PAYLOAD);
    big[0] = '"';
    big[MAX_PAYLOAD - 1] = '"';
    struct ms_frame fs[5];
    fs[0] = sample(MS_FRAME_TELL, "counter", "user-42", "{\"n\":1}");
    fs[1] = sample(MS_FRAME_HEARTBEAT, "", "", "");
    fs[2] = sample(MS_FRAME_ASK, "t", "", big);
    fs[3] = sample(MS_FRAME_REPLY, "", "id", "[]");
    fs[4] = sample(MS_FRAME_CONTROL, "", "", "{\"plan\":{}}");

    size_t total = 0;
    for (int i = 0; i < 5; i++)
        total += ms_frame_size(&fs[i]);
    uint8_t *bytes = malloc(total), *p = bytes;
    for (int i = 0; i < 5; i++) {
        size_t len;
        CHECK(ms_frame_encode(&fs[i], p, (size_t)(bytes + total - p),
                              &len) == 0);
        CHECK(len == ms_frame_size(&fs[i]));
        /* the header alone is the encoder's first 40 bytes */
        uint8_t h[MS_FRAME_HEADER];
        CHECK(ms_frame_encode_header(h, &fs[i]) == MS_FRAME_HEADER);
        CHECK(memcmp(h, p, MS_FRAME_HEADER) == 0);
        p += len;
    }
    /* the wire layout of the first header, byte for byte */
    CHECK(bytes[0] == 0x53 && bytes[1] == 0x4D);
    CHECK(bytes[2] == MS_PROTO_VERSION && bytes[3] == MS_FRAME_TELL);
    CHECK(bytes[4] == 0x5A && bytes[5] == 0xA5);
    CHECK(bytes[6] == 7 && bytes[7] == 0);   /* "counter" */
    CHECK(bytes[8] == 7 && bytes[9] == 0);   /* "user-42" */
    CHECK(bytes[12] == 7 && bytes[15] == 0); /* {"n":1} */
    CHECK(bytes[16] == 0x08 && bytes[23] == 0x01);
    CHECK(bytes[24] == 0xEF && bytes[27] == 0xDE);
    CHECK(bytes[32] == 0x01 && bytes[39] == 0xFF);
    CHECK(memcmp(bytes + 40, "counteruser-42{\"n\":1}", 21) == 0);

    decode_chunks(bytes, total, fs, 5, 0);    /* all at once */
    decode_chunks(bytes, total, fs, 5, 1);    /* byte by byte */
    for (int round = 0; round < 200; round++) /* random chunk sizes */
        decode_chunks(bytes, total, fs, 5, 1 + rnd() % 97);
    decode_chunks(bytes, total, fs, 5, 5000);
    free(bytes);
}

static void test_encoder_refuses(void)
{
    uint8_t buf[256], h[MS_FRAME_HEADER];
    size_t len = 0;
    struct ms_frame f = sample(MS_FRAME_TELL, "t", "i", "{}");
    CHECK(ms_frame_encode(&f, buf, 10, &len) == MS_E2BIG);
    CHECK(len == ms_frame_size(&f));
    f.kind = 99;
    CHECK(ms_frame_check(&f) == MS_EINVAL);
    CHECK(ms_frame_encode_header(h, &f) == 0);
    f = sample(MS_FRAME_TELL, "t", "i", "{}");
    f.type_len = MS_FRAME_MAX_TYPE + 1;
    CHECK(ms_frame_check(&f) == MS_E2BIG);
    f.type_len = 1;
    f.id_len = MS_MAX_ID + 1;
    CHECK(ms_frame_encode(&f, buf, sizeof buf, &len) == MS_E2BIG);
    f.id_len = 1;
    f.payload = NULL;
    CHECK(ms_frame_check(&f) == MS_EINVAL);
    CHECK(ms_frame_kind_valid(MS_FRAME_GOSSIP));
    CHECK(!ms_frame_kind_valid(0) && !ms_frame_kind_valid(255));
    CHECK(strcmp(ms_frame_kind_name(MS_FRAME_NOT_OWNER), "NOT_OWNER") == 0);
}

/* Feeds `n` bytes one at a time and returns the first non-zero result. */
static int feed_bytewise(struct ms_frame_decoder *d, const uint8_t *b,
                         size_t n, struct ms_frame *f)
{
    for (size_t i = 0; i < n; i++) {
        size_t used;
        int rc = ms_frame_feed(d, b + i, 1, &used, f);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Decodes a header whose bytes were patched; expects error `err` whose
 * reason contains `needle`, both fed at once and byte by byte. */
static void expect_error(const uint8_t *bytes, size_t n, size_t max_payload,
                         size_t max_frame, int err, const char *needle)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        struct ms_frame_decoder d;
        struct ms_frame f;
        size_t used;
        ms_frame_decoder_init(&d, max_payload, max_frame);
        CHECK(strcmp(ms_frame_decoder_error(&d), "") == 0);
        int rc = bytewise ? feed_bytewise(&d, bytes, n, &f)
                          : ms_frame_feed(&d, bytes, n, &used, &f);
        CHECK(rc == err);
        CHECK(strstr(ms_frame_decoder_error(&d), needle) != NULL);
        if (!strstr(ms_frame_decoder_error(&d), needle))
            fprintf(stderr, "  reason: %s\n", ms_frame_decoder_error(&d));
        /* no allocation happened for a refused frame */
        CHECK(d.buf == NULL);
        /* sticky: a well-formed frame afterwards is still refused */
        uint8_t ok[64];
        size_t len;
        struct ms_frame hb = sample(MS_FRAME_HEARTBEAT, "", "", "");
        CHECK(ms_frame_encode(&hb, ok, sizeof ok, &len) == 0);
        CHECK(ms_frame_feed(&d, ok, len, &used, &f) == err);
        CHECK(used == 0);
        ms_frame_decoder_free(&d);
    }
}

static void test_malformed(void)
{
    uint8_t b[MS_FRAME_HEADER];
    struct ms_frame f = sample(MS_FRAME_TELL, "", "", "");
    CHECK(ms_frame_encode_header(b, &f) == MS_FRAME_HEADER);

    uint8_t x[MS_FRAME_HEADER];
    memcpy(x, b, sizeof x);
    memcpy(x, "GET / HTTP/1.1\r\n", 16);
    expect_error(x, sizeof x, MAX_PAYLOAD, MAX_FRAME, MS_EINVAL,
                 "bad magic");

    memcpy(x, b, sizeof x);
    x[2] = 2;
    expect_error(x, sizeof x, MAX_PAYLOAD, MAX_FRAME, MS_EINVAL,
                 "unsupported frame version 2");

    memcpy(x, b, sizeof x);
    x[3] = 9;
    expect_error(x, sizeof x, MAX_PAYLOAD, MAX_FRAME, MS_EINVAL,
                 "unknown frame kind 9");

    memcpy(x, b, sizeof x);
    x[6] = MS_FRAME_MAX_TYPE + 1;
    expect_error(x, sizeof x, MAX_PAYLOAD, MAX_FRAME, MS_E2BIG,
                 "type of 65 bytes");

    memcpy(x, b, sizeof x);
    x[8] = (MS_MAX_ID + 1) & 0xFF;
    x[9] = (MS_MAX_ID + 1) >> 8;
    expect_error(x, sizeof x, MAX_PAYLOAD, MAX_FRAME, MS_E2BIG,
                 "id of 513 bytes");

    memcpy(x, b, sizeof x);
    x[12] = 0xFF, x[13] = 0xFF, x[14] = 0xFF, x[15] = 0xFF;
    expect_error(x, sizeof x, MAX_PAYLOAD, MAX_FRAME, MS_E2BIG,
                 "payload of 4294967295 bytes");

    /* a frame within each field limit but above the total limit */
    memcpy(x, b, sizeof x);
    x[6] = 10;
    x[12] = 100;
    expect_error(x, sizeof x, 200, MS_FRAME_HEADER + 109, MS_E2BIG,
                 "TELL frame of 150 bytes (limit 149)");
}

/* Encodes a TELL with the given lengths and decodes it with the limits;
 * returns the decoder's result (1 on success). */
static int try_limits(size_t type_len, size_t id_len, size_t payload_len,
                      size_t max_payload, size_t max_frame)
{
    static char fill[70000];
    memset(fill, 'a', sizeof fill);
    uint8_t h[MS_FRAME_HEADER];
    struct ms_frame f = {0};
    f.kind = MS_FRAME_TELL;
    f.type = fill, f.type_len = type_len;
    f.id = fill, f.id_len = id_len;
    f.payload = fill, f.payload_len = payload_len;
    if (ms_frame_encode_header(h, &f) == 0) {
        /* above the encoder's own limits: patch the header by hand */
        f.type_len = f.id_len = 0;
        CHECK(ms_frame_encode_header(h, &f) == MS_FRAME_HEADER);
        h[6] = (uint8_t)type_len, h[7] = (uint8_t)(type_len >> 8);
        h[8] = (uint8_t)id_len, h[9] = (uint8_t)(id_len >> 8);
    }
    struct ms_frame_decoder d;
    struct ms_frame out;
    size_t used;
    ms_frame_decoder_init(&d, max_payload, max_frame);
    int rc = ms_frame_feed(&d, h, sizeof h, &used, &out);
    size_t body = type_len + id_len + payload_len;
    /* the body arrives in pieces, through the decoder's own buffer */
    for (size_t off = 0; rc == 0 && off < body; off += 1000) {
        size_t n = body - off < 1000 ? body - off : 1000;
        rc = ms_frame_feed(&d, (const uint8_t *)fill, n, &used, &out);
        CHECK(used == n);
    }
    if (rc == 1) {
        CHECK(out.type_len == type_len && out.id_len == id_len);
        CHECK(out.payload_len == payload_len);
        CHECK(d.cap <= max_frame - MS_FRAME_HEADER);
    }
    ms_frame_decoder_free(&d);
    return rc;
}

static void test_limits(void)
{
    size_t big = MS_FRAME_HEADER + MS_FRAME_MAX_TYPE + MS_MAX_ID + 65536;
    CHECK(try_limits(MS_FRAME_MAX_TYPE, 0, 0, 10, big) == 1);
    CHECK(try_limits(MS_FRAME_MAX_TYPE + 1, 0, 0, 10, big) == MS_E2BIG);
    CHECK(try_limits(0, MS_MAX_ID, 0, 10, big) == 1);
    CHECK(try_limits(0, MS_MAX_ID + 1, 0, 10, big) == MS_E2BIG);
    CHECK(try_limits(0, 0, 65536, 65536, big) == 1);
    CHECK(try_limits(0, 0, 65537, 65536, big) == MS_E2BIG);
    /* total: exactly max_frame, then one past it */
    CHECK(try_limits(3, 5, 92, 1000, MS_FRAME_HEADER + 100) == 1);
    CHECK(try_limits(3, 5, 93, 1000, MS_FRAME_HEADER + 100) == MS_E2BIG);
    CHECK(try_limits(MS_FRAME_MAX_TYPE, MS_MAX_ID, 65536, 65536, big) == 1);
    CHECK(try_limits(MS_FRAME_MAX_TYPE, MS_MAX_ID, 65536, 65536, big - 1) ==
          MS_E2BIG);
}

/* A peer announcing a large frame and sending little of it does not make
 * the decoder allocate the whole frame. */
static void test_bounded_buffer(void)
{
    struct ms_frame_decoder d;
    struct ms_frame f = {0}, out;
    uint8_t h[MS_FRAME_HEADER], chunk[100] = {0};
    size_t used;
    f.kind = MS_FRAME_TELL;
    f.payload = (const char *)chunk;
    f.payload_len = 1 << 20;
    CHECK(ms_frame_encode_header(h, &f) == MS_FRAME_HEADER);
    ms_frame_decoder_init(&d, 1 << 20, (1 << 20) + MS_FRAME_HEADER);
    CHECK(ms_frame_feed(&d, h, sizeof h, &used, &out) == 0);
    CHECK(d.buf == NULL); /* nothing allocated for the header alone */
    CHECK(ms_frame_feed(&d, chunk, sizeof chunk, &used, &out) == 0);
    CHECK(d.cap <= 256);
    ms_frame_decoder_free(&d);
}

/* Frames handed out from the decoder's buffer stay valid until the next
 * feed, and a large buffer is released after its frame. */
static void test_buffer_reuse(void)
{
    static char payload[100000];
    memset(payload, 'p', sizeof payload);
    struct ms_frame_decoder d;
    struct ms_frame f = {0}, out;
    size_t len, used;
    f.kind = MS_FRAME_GOSSIP;
    f.payload = payload;
    f.payload_len = sizeof payload;
    uint8_t *bytes = malloc(ms_frame_size(&f));
    CHECK(ms_frame_encode(&f, bytes, ms_frame_size(&f), &len) == 0);
    ms_frame_decoder_init(&d, sizeof payload, len);
    CHECK(ms_frame_feed(&d, bytes, 10, &used, &out) == 0);
    CHECK(ms_frame_feed(&d, bytes + 10, len - 10, &used, &out) == 1);
    CHECK(used == len - 10);
    CHECK(out.payload_len == sizeof payload);
    CHECK(out.payload == (const char *)d.buf);
    CHECK(memcmp(out.payload, payload, sizeof payload) == 0);
    /* the next feed drops the 100 kB buffer */
    CHECK(ms_frame_feed(&d, bytes, 1, &used, &out) == 0);
    CHECK(d.buf == NULL);
    ms_frame_decoder_free(&d);
    free(bytes);
}

int main(void)
{
    test_round_trips();
    test_encoder_refuses();
    test_malformed();
    test_limits();
    test_bounded_buffer();
    test_buffer_reuse();
    CHECK_DONE();
}
