/*
 * fuzz_flatjson.c -- libFuzzer target of the flat JSON reader
 * (core/flatjson.c: the handshake's payloads and POST /v1/down) and of
 * the client error texts (core/client_error.c: ms_client_error_text on a
 * handler's detail, ms_client_error_parse on an error payload from
 * another node), which the gateway builds from bytes it did not choose.
 *
 * Input: one byte of flags and limits, then the text. Every string the
 * reader hands out lies inside the text and within max_string; the
 * error texts stay within their buffers and limits and are
 * NUL-terminated.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/core/client_error.h"
#include "../runtime/core/flatjson.h"

static void inside(const char *s, size_t n, const char *text, size_t len)
{
    if (n && (s < text || s + n > text + len)) {
        fprintf(stderr, "a string outside the text\n");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0] & 1 ? MS_FJ_ASCII : 0;
    size_t max_string = (size_t)(data[0] >> 1) * 3;
    /* a copy of exactly the text, so that ASan sees a read past it */
    size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    if (!text)
        abort();
    memcpy(text, data + 1, len);

    struct ms_fj r;
    struct ms_fj_member m;
    ms_fj_init(&r, text, len, max_string, flags);
    if (data[0] & 0x80) {
        const char *s;
        size_t n;
        if (ms_fj_string(&r, &s, &n) == 0) {
            inside(s, n, text, len);
            if (n > max_string)
                abort();
        }
    } else if (ms_fj_object(&r) == 0) {
        int rc, count = 0;
        while ((rc = ms_fj_next(&r, &m)) == 1 && count++ < 10000) {
            inside(m.key, m.klen, text, len);
            if (m.kind == MS_FJ_STRING) {
                inside(m.str, m.slen, text, len);
                if (m.slen > max_string)
                    abort();
            }
        }
        if (rc == 0)
            (void)ms_fj_end(&r);
    }

    char msg[MS_CLIENT_MSG_MAX + 16];
    size_t cap = 8 + data[0] % (sizeof msg - 8 + 1);
    size_t n = ms_client_error_text(msg, cap, text, len);
    if (n >= cap || msg[n] != 0 || n > MS_CLIENT_MSG_MAX) {
        fprintf(stderr, "client message beyond its room\n");
        abort();
    }
    char code[32], message[64];
    if (ms_client_error_parse(text, len, code, sizeof code, message,
                              sizeof message) == 0 &&
        (!memchr(code, 0, sizeof code) ||
         !memchr(message, 0, sizeof message)))
        abort();
    free(text);
    return 0;
}
