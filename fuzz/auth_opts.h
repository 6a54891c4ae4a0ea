/*
 * auth_opts.h -- the handshake identities of fuzz_auth.c, shared with the
 * seed program (seeds.c) so that its recorded handshakes carry MACs the
 * target accepts and the fuzzer starts from complete handshakes.
 */
#ifndef MS_FUZZ_AUTH_OPTS_H
#define MS_FUZZ_AUTH_OPTS_H

#include <stdint.h>

#include "../runtime/core/auth.h"

static const uint8_t fuzz_secret[] = "fuzz-secret-3b9e71c04d26";

/* Deterministic "randomness": *data counts from its start value. */
static int fuzz_random(void *data, uint8_t *out, size_t len)
{
    unsigned *k = data;
    for (size_t i = 0; i < len; i++)
        out[i] = (uint8_t)(++*k * 131u);
    return 0;
}

/* Options of node `name` (the target is "n1", the seeds' peer "n2"). */
static inline struct ms_auth_options fuzz_auth_options(
    enum ms_auth_role role, const char *name, const char *address,
    uint64_t uid, unsigned *k, struct ms_auth_replay *replay)
{
    struct ms_auth_options o = {
        .role = role, .cluster = "fuzz", .name = name, .uid = uid,
        .address = address, .secret = fuzz_secret,
        .secret_len = sizeof fuzz_secret - 1, .random = fuzz_random,
        .random_data = k, .replay = replay,
    };
    return o;
}

#define FUZZ_SELF "n1", "127.0.0.1:7101", 0x1122334455667788ull
#define FUZZ_PEER "n2", "127.0.0.1:7102", 0x99aabbccddeeff00ull

#endif
