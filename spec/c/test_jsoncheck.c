/* The node's strict JSON check: RFC 8259, never more lenient than
 * lua-cjson, and the only judge (what it refuses is refused, although
 * lua-cjson would take some of it). */
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

    /* ms_json_check: the verdict, why and where */
    {
        const char *why = NULL;
        size_t at = 99;
#define KIND(s) ms_json_check(s, sizeof(s) - 1, 8, &why, &at)
        CHECK(KIND("{\"a\":1}") == MS_JSON_OBJECT);
        CHECK(KIND(" [1, {\"b\":null}] ") == MS_JSON_VALUE);
        CHECK(KIND("3") == MS_JSON_VALUE);
        CHECK(KIND("\"s\"") == MS_JSON_VALUE);
        CHECK(KIND("null") == MS_JSON_VALUE);
        CHECK(KIND("-0") == MS_JSON_VALUE);
        CHECK(KIND("4.94065645841247e-324") == MS_JSON_VALUE);
        /* what lua-cjson takes and the check refuses (issue 9) */
        CHECK(KIND("{\"a\":1.}") == MS_JSON_BAD && at == 7 &&
              strstr(why, "decimal point"));
        CHECK(KIND("{\"a\":-.5}") == MS_JSON_BAD && at == 6);
        CHECK(KIND("{\"a\":1.e2}") == MS_JSON_BAD && at == 7);
        CHECK(KIND("{\"a\":\"x\ny\"}") == MS_JSON_BAD && at == 7 &&
              strstr(why, "control character"));
        CHECK(KIND("{\"a\":\"x\x01\"}") == MS_JSON_BAD && at == 7);
        CHECK(KIND("{\"a\":\"x\x1f\"}") == MS_JSON_BAD);
        CHECK(KIND("{\"a\":1}\0garbage") == MS_JSON_BAD && at == 7 &&
              strstr(why, "after the JSON value"));
        CHECK(KIND("{\"a\":\"x\0y\"}") == MS_JSON_BAD && at == 7);
        CHECK(KIND("[1.]") == MS_JSON_BAD);
        CHECK(KIND("-.5") == MS_JSON_BAD);
        CHECK(KIND("1.e2") == MS_JSON_BAD);
        CHECK(KIND("{\"a\":1e999}") == MS_JSON_BAD &&
              strstr(why, "too large"));
        {
            /* a long number that a double holds (about 1e-451): refused
             * for its length, and said so, not "too large" */
            char t[480] = "{\"a\":0.";
            size_t n = strlen(t);
            memset(t + n, '0', 450);
            memcpy(t + n + 450, "1}", 3);
            CHECK(ms_json_check(t, strlen(t), 8, &why, &at) ==
                      MS_JSON_BAD && strstr(why, "longer than 399"));
            /* 399 characters (0., 396 zeros, 1) are fine */
            memcpy(t + n + 396, "1}", 3);
            CHECK(ms_json_check(t, strlen(t), 8, &why, &at) ==
                  MS_JSON_OBJECT);
        }
        CHECK(KIND("[[[[[[[[[]]]]]]]]]") == MS_JSON_BAD &&
              strstr(why, "nested deeper"));
        CHECK(KIND("") == MS_JSON_BAD && at == 0);
        CHECK(KIND("{\"a\" 1}") == MS_JSON_BAD && strstr(why, "':'"));
        CHECK(KIND("{\"a\":1 \"b\":2}") == MS_JSON_BAD &&
              strstr(why, "'}'"));
        CHECK(KIND("{\"a\":\"\\q\"}") == MS_JSON_BAD &&
              strstr(why, "escape"));
        CHECK(KIND("{\"a\":\"abc") == MS_JSON_BAD &&
              strstr(why, "ends inside a string"));
        /* bytes >= 0x20 are not checked for UTF-8, as lua-cjson does not:
         * the node's encoder passes them through and this accepts them */
        CHECK(KIND("{\"a\":\"\xff\xfe\x7f/\"}") == MS_JSON_OBJECT);
#undef KIND
    }
    CHECK_DONE();
}
