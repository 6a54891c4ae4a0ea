/*
 * fuzz_plan.c -- libFuzzer target of the plan decoder
 * (core/plan.c ms_plan_msg_decode), which reads the CONTROL frames of
 * other nodes.
 *
 * The decoder accepts exactly what ms_plan_msg_encode writes, so a text
 * it accepts must encode back to the same bytes; a decoded "plan"
 * message is also applied to a small plan, as a node would.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/core/errors.h"
#include "../runtime/core/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ms_plan_msg m;
    memset(&m, 0x5a, sizeof m); /* the decoder must set every field */
    int rc = ms_plan_msg_decode((const char *)data, size, &m);
    if (rc != 0)
        return 0;
    char *text = NULL;
    size_t len = 0;
    int erc = ms_plan_msg_encode(&m, &text, &len);
    if (erc != 0 || len != size || memcmp(text, data, size) != 0) {
        fprintf(stderr, "decoded message encodes differently (rc %d): "
                "%.*s\n", erc, (int)len, text ? text : "");
        abort();
    }
    free(text);
    struct ms_plan *p = ms_plan_new(64);
    if (!p)
        abort();
    (void)ms_plan_apply_msg(p, &m);
    ms_plan_free(p);
    ms_plan_msg_free(&m);
    return 0;
}
