/*
 * fuzz_frame.c -- libFuzzer target of the frame decoder (core/frame.c).
 *
 * The input is a byte stream from a peer. It is decoded twice: in one
 * feed, and in chunks whose sizes come from the stream's first byte. Both
 * must give the same frames and the same final state (the decoder's
 * contract: chunks of any size), and every frame must respect the limits
 * the decoder was given. A difference aborts, so the fuzzer reports it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/core/errors.h"
#include "../runtime/core/frame.h"

#define MAX_PAYLOAD 1024
#define MAX_FRAME 2048
#define MAX_FRAMES 64

struct seen {
    int n;                  /* frames decoded */
    int rc;                 /* the last feed's result */
    uint64_t sum[MAX_FRAMES];
};

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t frame_sum(const struct ms_frame *f)
{
    if (f->type_len > MS_FRAME_MAX_TYPE || f->id_len > MS_MAX_ID ||
        f->payload_len > MAX_PAYLOAD ||
        MS_FRAME_HEADER + f->type_len + f->id_len + f->payload_len >
            MAX_FRAME || !ms_frame_kind_valid(f->kind)) {
        fprintf(stderr, "frame beyond the decoder's limits\n");
        abort();
    }
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(h, &f->kind, 1);
    h = mix(h, &f->flags, sizeof f->flags);
    h = mix(h, &f->corr, sizeof f->corr);
    h = mix(h, &f->shard, sizeof f->shard);
    h = mix(h, &f->generation, sizeof f->generation);
    h = mix(h, f->type, f->type_len);
    h = mix(h, "|", 1);
    h = mix(h, f->id, f->id_len);
    h = mix(h, "|", 1);
    return mix(h, f->payload, f->payload_len);
}

/* Feeds data[0..len) in chunks of 1..step bytes (step 0: all at once). */
static void run(const uint8_t *data, size_t len, unsigned step,
                struct seen *s)
{
    struct ms_frame_decoder d;
    ms_frame_decoder_init(&d, MAX_PAYLOAD, MAX_FRAME);
    memset(s, 0, sizeof *s);
    size_t pos = 0;
    unsigned k = 0;
    while (pos < len) {
        size_t n = len - pos;
        if (step && n > (size_t)(k % step) + 1)
            n = (k % step) + 1;
        k = k * 7 + 3;
        const uint8_t *p = data + pos;
        size_t left = n;
        pos += n;
        for (;;) {
            size_t used = 0;
            struct ms_frame f;
            int rc = ms_frame_feed(&d, p, left, &used, &f);
            if (used > left)
                abort();
            s->rc = rc;
            if (rc < 0)
                goto out;
            p += used;
            left -= used;
            if (rc == 1 && s->n < MAX_FRAMES)
                s->sum[s->n++] = frame_sum(&f);
            if (rc == 0 || left == 0)
                break;
        }
        if (s->n == MAX_FRAMES)
            break;
    }
out:
    if (s->rc < 0 && ms_frame_decoder_error(&d)[0] == 0)
        abort(); /* an error always has its reason */
    ms_frame_decoder_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned step = data[0] % 61; /* 0: one feed */
    struct seen a, b;
    run(data + 1, size - 1, 0, &a);
    run(data + 1, size - 1, step, &b);
    /* the one-feed run may stop at MAX_FRAMES sooner: compare a prefix */
    int n = a.n < b.n ? a.n : b.n;
    for (int i = 0; i < n; i++)
        if (a.sum[i] != b.sum[i]) {
            fprintf(stderr, "frame %d differs between chunkings\n", i);
            abort();
        }
    if (a.n < MAX_FRAMES && b.n < MAX_FRAMES &&
        (a.n != b.n || (a.rc < 0) != (b.rc < 0) ||
         (a.rc < 0 && a.rc != b.rc))) {
        fprintf(stderr, "chunked decoding differs: %d frames rc %d vs "
                "%d frames rc %d\n", a.n, a.rc, b.n, b.rc);
        abort();
    }
    return 0;
}
