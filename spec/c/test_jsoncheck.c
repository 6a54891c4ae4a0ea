/* The gateway's JSON object scanner: strict RFC 8259, never more lenient
 * than lua-cjson (what it refuses goes to the Lua decoder). */
#include <string.h>

#include "../../runtime/core/jsoncheck.h"
#include "check.h"

static int ok(const char *s, int depth)
{
    return ms_json_is_object(s, strlen(s), depth);
}

int main(void)
{
    /* accepted */
    CHECK(ok("{}", 1));
    CHECK(ok(" \t\r\n{ } \n", 1));
    CHECK(ok("{\"type\":\"incr\",\"by\":2}", 1));
    CHECK(ok("{\"a\":[1,-2.5e+3,0,0.25,1E9,true,false,null,\"x\"]}", 2));
    CHECK(ok("{\"a\":{\"b\":{\"c\":[]}}}", 4));
    CHECK(ok("{\"s\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9\"}", 1));
    CHECK(ok("{\"pair\":\"\\ud83d\\ude00\"}", 1));
    CHECK(ok("{\"utf8\":\"\xc3\xa9\xf0\x9f\x98\x80\"}", 1));
    CHECK(ok("{\"big\":1.7e308,\"tiny\":1e-999,\"neg\":-1e300}", 1));
    /* numbers a double cannot hold: they would decode to infinity */
    CHECK(!ok("{\"a\":1e999}", 1));
    CHECK(!ok("{\"a\":-1E+400}", 1));
    {
        char big[420] = "{\"a\":";
        size_t n = strlen(big);
        memset(big + n, '9', 340); /* 340 digits, no exponent */
        memcpy(big + n + 340, "}", 2);
        CHECK(!ok(big, 1));
    }
    /* not an object, or not one value */
    CHECK(!ok("", 8));
    CHECK(!ok("[]", 8));
    CHECK(!ok("\"x\"", 8));
    CHECK(!ok("{} {}", 8));
    CHECK(!ok("{}x", 8));
    /* broken syntax */
    CHECK(!ok("{", 8));
    CHECK(!ok("{\"a\"}", 8));
    CHECK(!ok("{\"a\":}", 8));
    CHECK(!ok("{\"a\":1,}", 8));
    CHECK(!ok("{,}", 8));
    CHECK(!ok("{a:1}", 8));
    CHECK(!ok("{'a':1}", 8));
    CHECK(!ok("{\"a\":[1,]}", 8));
    CHECK(!ok("{\"a\":[1 2]}", 8));
    CHECK(!ok("{\"a\":tru}", 8));
    CHECK(!ok("{\"a\":nul}", 8));
    CHECK(!ok("{\"a\":\"x}", 8));
    /* numbers cjson takes leniently, refused here (cjson decides) */
    CHECK(!ok("{\"a\":01}", 8));
    CHECK(!ok("{\"a\":1.}", 8));
    CHECK(!ok("{\"a\":.5}", 8));
    CHECK(!ok("{\"a\":+1}", 8));
    CHECK(!ok("{\"a\":1e}", 8));
    CHECK(!ok("{\"a\":0x10}", 8));
    CHECK(!ok("{\"a\":nan}", 8));
    CHECK(!ok("{\"a\":-}", 8));
    /* strings */
    CHECK(!ok("{\"a\":\"tab\there\"}", 8));  /* raw control character */
    CHECK(!ok("{\"a\":\"\\x\"}", 8));          /* unknown escape */
    CHECK(!ok("{\"a\":\"\\u00g0\"}", 8));      /* bad hex */
    CHECK(!ok("{\"a\":\"\\ud83d\"}", 8));      /* lone high surrogate */
    CHECK(!ok("{\"a\":\"\\ud83dx\"}", 8));
    CHECK(!ok("{\"a\":\"\\ud83d\\u0041\"}", 8)); /* not a low one */
    CHECK(!ok("{\"a\":\"\\ude00\"}", 8));      /* low surrogate first */
    CHECK(!ok("{\"a\":\"\\", 8));
    /* depth: the top object counts 1 */
    CHECK(ok("{\"a\":[{}]}", 3));
    CHECK(!ok("{\"a\":[{}]}", 2));
    CHECK(!ok("{\"a\":[[[[[[[[[[[[]]]]]]]]]]]]}", 8));
    /* a NUL inside the length is not JSON */
    CHECK(!ms_json_is_object("{}\0", 3, 8));
    CHECK(ms_json_is_object("{}\0", 2, 8));
    CHECK_DONE();
}
