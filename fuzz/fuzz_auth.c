/*
 * fuzz_auth.c -- libFuzzer target of the handshake (core/auth.c): what a
 * peer's HELLO, CHALLENGE, AUTH, AUTH_OK and AUTH_FAIL frames can do to
 * either side before it has proved anything.
 *
 * Input: one byte that picks the role (even: server, odd: client), then
 * records [kind u8][len u16 LE][len bytes of payload], each handed to
 * ms_auth_on_frame as one frame from the peer. Randomness is fixed, so a
 * crash replays. A frame the state machine answers must be well-formed
 * (ms_frame_check), and after DONE or an error nothing may change.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/core/errors.h"
#include "auth_opts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* a fresh replay memory: each input is a node's first connection */
    struct ms_auth_replay *replay = ms_auth_replay_new();
    if (!replay)
        abort();
    unsigned k = 0;
    struct ms_auth_options o = fuzz_auth_options(
        (data[0] & 1) ? MS_AUTH_CLIENT : MS_AUTH_SERVER, FUZZ_SELF, &k,
        replay);
    struct ms_auth *a;
    char err[128];
    if (ms_auth_new(&a, &o, err, sizeof err) != 0)
        abort();
    uint8_t buf[MS_AUTH_BUF_SIZE];
    struct ms_frame out;
    if (o.role == MS_AUTH_CLIENT &&
        ms_auth_start(a, &out, buf, sizeof buf) != MS_AUTH_CONTINUE)
        abort();
    size_t pos = 1;
    int over = 0;
    while (size - pos >= 3) {
        size_t n = data[pos + 1] | (size_t)data[pos + 2] << 8;
        if (n > size - pos - 3)
            n = size - pos - 3;
        struct ms_frame in = {
            .version = MS_PROTO_VERSION,
            .kind = data[pos],
            .type = "", .id = "",
            .payload = (const char *)data + pos + 3,
            .payload_len = n,
        };
        pos += 3 + n;
        memset(&out, 0, sizeof out);
        int rc = ms_auth_on_frame(a, &in, &out, buf, sizeof buf);
        if (over && (rc != MS_EINVAL || out.kind != 0)) {
            fprintf(stderr, "a finished handshake took a frame\n");
            abort();
        }
        if (out.kind != 0 && ms_frame_check(&out) != 0) {
            fprintf(stderr, "the handshake built a bad frame\n");
            abort();
        }
        /* a refusal always has its reason (a frame after DONE is
         * refused without one: the handshake did not fail) */
        if (rc < 0 && !over && ms_auth_reason(a)[0] == 0)
            abort();
        if (rc == MS_AUTH_DONE || rc < 0)
            over = 1;
    }
    ms_auth_free(a);
    ms_auth_replay_free(replay);
    return 0;
}
