/* What an error tells an HTTP client: no paths, search lists or
 * addresses, a bounded message, distinct ids, a log budget. */
#include <string.h>

#include "../../runtime/core/client_error.h"
#include "check.h"

static char out[MS_CLIENT_MSG_MAX + 1];

static const char *text(const char *detail)
{
    ms_client_error_text(out, sizeof out, detail, strlen(detail));
    return out;
}

static int has(const char *s, const char *part)
{
    return strstr(s, part) != NULL;
}

/* The message leaks nothing of the server's layout. */
static int clean(const char *s)
{
    return !has(s, "/usr/") && !has(s, "/tmp/") && !has(s, "package.") &&
           !has(s, "?.lua") && !has(s, "0x") && !has(s, "\n") &&
           !has(s, "\t") && strlen(s) <= MS_CLIENT_MSG_MAX;
}

static void test_text(void)
{
    /* a handler's own words stay */
    CHECK(strcmp(text("unknown message type: bogus"),
                 "unknown message type: bogus") == 0);
    CHECK(strcmp(text("/srv/app/entities/counter.lua:14: unknown message "
                      "type: bogus"),
                 "unknown message type: bogus") == 0);
    /* positions nest; a path inside the message becomes <path> */
    CHECK(strcmp(text("/tmp/x/bad.lua:4: /usr/share/lua/5.1/secret.lua:12:"
                      " boom at 0x55d0c0ffee00"),
                 "boom at <address>") == 0);
    CHECK(strcmp(text("[string \"local x = 1\"]:3: bad thing"),
                 "bad thing") == 0);
    CHECK(strcmp(text("...ong/dir/mod.lua:3: oops"), "oops") == 0);
    CHECK(strcmp(text("failed in helper.lua:9: nope"),
                 "failed in <path> nope") == 0);
    /* a word followed by numbers is not a position */
    CHECK(strcmp(text("retry:3: later"), "retry:3: later") == 0);
    /* require of a missing module: the search list is gone */
    const char *req =
        "/tmp/x/bad.lua:6: module 'nope' not found:\n"
        "\tno field package.preload['nope']\n"
        "\tno file '/tmp/x/nope.lua'\n\tno file './nope.lua'\n"
        "\tno file '/usr/share/lua/5.1/nope.lua'";
    CHECK(strcmp(text(req), "module 'nope' not found") == 0);
    CHECK(clean(out));
    /* a search list on one line */
    CHECK(clean(text("bad path ./?.lua;/usr/share/lua/5.1/?.lua; set "
                     "package.path")));
    CHECK(strcmp(out, "bad path <path> set <path>") == 0);
    /* a Lua value that is no message: nothing left, the caller is generic */
    CHECK(ms_client_error_text(out, sizeof out, "table: 0x7fe5f92469b8",
                               21) == 0);
    CHECK(out[0] == 0);
    CHECK(ms_client_error_text(out, sizeof out, "userdata: 0x1", 13) == 0);
    CHECK(ms_client_error_text(out, sizeof out, "cdata<void *>: 0x10",
                               19) == 0);
    CHECK(ms_client_error_text(out, sizeof out, "", 0) == 0);
    CHECK(ms_client_error_text(out, sizeof out, "\n/usr/x", 7) == 0);
    /* blanks and control characters fold; a NUL is a blank */
    CHECK(strcmp(text("a \t\x01  b"), "a b") == 0);
    CHECK(ms_client_error_text(out, sizeof out, "a\0b", 3) == 3 &&
          strcmp(out, "a b") == 0);
    /* bounded, cut at a character boundary, the cut marked */
    {
        char big[1000];
        memset(big, 'x', sizeof big);
        CHECK(ms_client_error_text(out, sizeof out, big, sizeof big) ==
              MS_CLIENT_MSG_MAX);
        CHECK(strcmp(out + MS_CLIENT_MSG_MAX - 3, "...") == 0);
        /* two-byte characters: the cut falls between two of them */
        for (size_t i = 0; i + 1 < sizeof big; i += 2) {
            big[i] = (char)0xC3;
            big[i + 1] = (char)0xA9;
        }
        size_t n = ms_client_error_text(out, sizeof out, big, sizeof big);
        CHECK(n <= MS_CLIENT_MSG_MAX && n >= 4);
        CHECK(strcmp(out + n - 3, "...") == 0);
        CHECK((n - 3) % 2 == 0);
    }
    /* a small buffer */
    {
        char small[8];
        size_t n = ms_client_error_text(small, sizeof small,
                                        "abcdefghijk", 11);
        CHECK(n == 7 && strcmp(small, "abcdefg") == 0);
    }
}

static void test_parse(void)
{
    char code[32], msg[256];
    const char *j = "{\"code\":\"handler_error\",\"message\":\"a\\nb "
                    "\\\"q\\\" \\u00e9 \\ud83d\\ude00 \\u0000\"}";
    CHECK(ms_client_error_parse(j, strlen(j), code, sizeof code, msg,
                                sizeof msg) == 0);
    CHECK(strcmp(code, "handler_error") == 0);
    CHECK(strcmp(msg, "a\nb \"q\" \xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbd")
          == 0);
    j = " { \"message\" : \"m\" , \"code\" : \"timeout\" , \"x\":\"y\" } ";
    CHECK(ms_client_error_parse(j, strlen(j), code, sizeof code, msg,
                                sizeof msg) == 0);
    CHECK(strcmp(code, "timeout") == 0 && strcmp(msg, "m") == 0);
    j = "{\"code\":\"x\"}";
    CHECK(ms_client_error_parse(j, strlen(j), code, sizeof code, msg,
                                sizeof msg) == 0);
    CHECK(strcmp(msg, "") == 0);
    /* cut to fit */
    j = "{\"code\":\"abcdefghij\",\"message\":\"0123456789\"}";
    char c4[4], m4[5];
    CHECK(ms_client_error_parse(j, strlen(j), c4, sizeof c4, m4,
                                sizeof m4) == 0);
    CHECK(strcmp(c4, "abc") == 0 && strcmp(m4, "0123") == 0);
    /* refused */
    const char *bad[] = {"", "{}", "[]", "{\"message\":\"m\"}",
                         "{\"code\":1}", "{\"code\":\"x\"", "{\"code\":\"x\"}x",
                         "{\"code\":\"x\",}", "{\"code\":\"\\q\"}",
                         "{\"code\":\"a\x01\"}", "{\"code\":\"\\u12\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strcpy(code, "junk");
        CHECK(ms_client_error_parse(bad[i], strlen(bad[i]), code,
                                    sizeof code, msg, sizeof msg) == -1);
        CHECK(code[0] == 0 && msg[0] == 0);
    }
}

static void test_ids(void)
{
    char a[MS_CLIENT_ID_LEN + 1], b[MS_CLIENT_ID_LEN + 1];
    ms_client_error_id(42, 0, a);
    CHECK(strlen(a) == MS_CLIENT_ID_LEN && a[0] == 'e' && a[1] == '-');
    CHECK(strspn(a + 2, "0123456789abcdef") == 12);
    ms_client_error_id(42, 1, b);
    CHECK(strcmp(a, b) != 0);
    ms_client_error_id(43, 0, b);
    CHECK(strcmp(a, b) != 0);
    ms_client_error_id(42, 0, b);
    CHECK(strcmp(a, b) == 0);
    /* no repeats among the first ids of a seed (a bijection) */
    static char seen[4096][MS_CLIENT_ID_LEN + 1];
    int dup = 0;
    for (int i = 0; i < 4096; i++) {
        ms_client_error_id(UINT64_C(0xfffffffffff0), (uint64_t)i, seen[i]);
        for (int k = 0; k < i && !dup; k++)
            dup = strcmp(seen[i], seen[k]) == 0;
    }
    CHECK(!dup);
}

static void test_budget(void)
{
    struct ms_log_budget b;
    uint64_t skipped = 99;
    memset(&b, 0, sizeof b);
    b.burst = 3;
    b.per_s = 2;
    for (int i = 0; i < 3; i++)
        CHECK(ms_log_budget_take(&b, 1000, &skipped) == 1 && skipped == 0);
    CHECK(ms_log_budget_take(&b, 1000, &skipped) == 0);
    CHECK(ms_log_budget_take(&b, 1200, &skipped) == 0);
    /* half a second later: one line, and the two refused are counted */
    CHECK(ms_log_budget_take(&b, 1500, &skipped) == 1 && skipped == 2);
    CHECK(ms_log_budget_take(&b, 1500, &skipped) == 0);
    /* a long pause refills only up to the burst */
    for (int i = 0; i < 3; i++)
        CHECK(ms_log_budget_take(&b, 100000, &skipped) == 1);
    CHECK(ms_log_budget_take(&b, 100000, &skipped) == 0);
}

int main(void)
{
    test_text();
    test_parse();
    test_ids();
    test_budget();
    CHECK_DONE();
}
