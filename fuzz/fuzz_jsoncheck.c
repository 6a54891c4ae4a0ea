/*
 * fuzz_jsoncheck.c -- libFuzzer target of the JSON checker
 * (core/jsoncheck.c), the judge of every JSON body and payload that comes
 * from outside, and of ms_json_put_escaped, which copies client bytes into
 * error texts.
 *
 * Input: one byte for the depth limit (1..32), then the text. Checks the
 * contract: the result is one of the three classes, a refusal says why
 * and where (within the text), ms_json_is_object agrees with
 * ms_json_check, and an escaped copy of any bytes is itself accepted
 * inside quotes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/core/jsoncheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int depth = 1 + data[0] % 32;
    const char *json = (const char *)data + 1;
    size_t len = size - 1;
    const char *why = NULL;
    size_t at = (size_t)-1;
    int rc = ms_json_check(json, len, depth, &why, &at);
    if (rc != MS_JSON_OBJECT && rc != MS_JSON_VALUE && rc != MS_JSON_BAD)
        abort();
    if (rc == MS_JSON_BAD && (!why || !why[0] || at > len)) {
        fprintf(stderr, "a refusal without its reason or place\n");
        abort();
    }
    if (ms_json_is_object(json, len, depth) != (rc == MS_JSON_OBJECT))
        abort();
    /* any bytes, escaped into a string, make a valid JSON string; the
     * copy stops within its room (a heap block of exactly that size, so
     * that ASan sees a byte written past it) */
    size_t take = len < 256 ? len : 256;
    size_t cap = 2 + (size_t)data[0] * 7 % (6 * 256 + 1);
    char *out = malloc(cap + 1);
    if (!out)
        abort();
    size_t n = 0;
    out[n++] = '"';
    ms_json_put_escaped(out, cap, &n, json, take);
    if (n > cap)
        abort();
    out[n++] = '"';
    const char *w2 = NULL;
    if (ms_json_check(out, n, 1, &w2, NULL) != MS_JSON_VALUE) {
        fprintf(stderr, "escaped text refused: %s\n", w2 ? w2 : "?");
        abort();
    }
    free(out);
    return 0;
}
