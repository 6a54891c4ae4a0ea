/* The request of POST /v1/down: which address, and whether it says
 * force (runtime/core/downreq.h). */
#include <string.h>

#include "../../runtime/core/downreq.h"
#include "../../runtime/moonshard.h"
#include "check.h"

static char addr[MS_DOWNREQ_MAX_ADDRESS + 1];
static int force;
static const char *why;

static int parse_q(const char *body, const char *query)
{
    memset(addr, 'x', sizeof addr);
    force = -1;
    why = NULL;
    return ms_downreq_parse(body, strlen(body), query,
                            query ? strlen(query) : 0, addr, sizeof addr,
                            &force, &why);
}

static int parse(const char *body)
{
    return parse_q(body, NULL);
}

int main(void)
{
    /* the shapes accepted */
    CHECK(parse("\"127.0.0.1:7102\"") == 0);
    CHECK(strcmp(addr, "127.0.0.1:7102") == 0 && force == 0);
    CHECK(parse(" \n\"[::1]:7102\"\r\n\t") == 0);
    CHECK(strcmp(addr, "[::1]:7102") == 0 && force == 0);
    CHECK(parse("{\"address\":\"127.0.0.1:7102\"}") == 0);
    CHECK(strcmp(addr, "127.0.0.1:7102") == 0 && force == 0);
    CHECK(parse("{\"address\":\"h:1\",\"force\":true}") == 0);
    CHECK(strcmp(addr, "h:1") == 0 && force == 1);
    CHECK(parse(" { \"force\" : true , \"address\" : \"h:1\" } ") == 0);
    CHECK(strcmp(addr, "h:1") == 0 && force == 1);
    CHECK(parse("{\"address\":\"h:1\",\"force\":false}") == 0);
    CHECK(force == 0);

    /* force from the query */
    CHECK(parse_q("\"h:1\"", "force=1") == 0 && force == 1);
    CHECK(parse_q("\"h:1\"", "a=b&force=true&c") == 0 && force == 1);
    CHECK(parse_q("\"h:1\"", "force=0") == 0 && force == 0);
    CHECK(parse_q("\"h:1\"", "force=false") == 0 && force == 0);
    CHECK(parse_q("\"h:1\"", "forced=1") == 0 && force == 0);
    CHECK(parse_q("{\"address\":\"h:1\",\"force\":true}", "force=0") == 0 &&
          force == 1);
    CHECK(parse_q("\"h:1\"", "force=yes") == MS_EINVAL && why);
    CHECK(parse_q("\"h:1\"", "force") == MS_EINVAL);
    CHECK(parse_q("\"h:1\"", "force=") == MS_EINVAL);
    CHECK(parse_q("\"h:1\"", "force=10") == MS_EINVAL);

    /* not one of the shapes: refused, with a reason, nothing written */
    const char *bad[] = {
        "",
        "   ",
        "127.0.0.1:7102",                   /* not JSON */
        "\"h:1\" x",                        /* bytes after it */
        "\"h:1\"\"h:2\"",
        "\"h:1",                            /* unterminated */
        "{}",                               /* no address */
        "{\"force\":true}",
        "{\"address\":\"h:1\"",             /* unterminated object */
        "{\"address\":\"h:1\",}",           /* trailing comma */
        "{\"address\":\"h:1\",\"address\":\"h:2\"}", /* repeated key */
        "{\"address\":\"h:1\",\"force\":true,\"force\":false}",
        "{\"address\":\"h:1\",\"extra\":1}", /* unknown key */
        "{\"address\":7}",
        "{\"address\":\"h:1\",\"force\":1}", /* force not a boolean */
        "{\"address\":\"h:1\",\"force\":\"true\"}",
        "{\"address\":\"h:1\",\"force\":tru}",
        "{\"address\":\"h:1\",\"force\":truex}",
        "[\"h:1\"]",
        "\"h\\u003a1\"",                    /* escapes: never in addresses */
        "\"h:1\\n\"",
        "\"\"",                             /* empty */
        "\"h 1:2\"",                        /* bytes no address has */
        "\"h,1:2\"",
        "\"h\x01:2\"",
        "\"h\xc3\xa9:2\"",
        "{\"address\":\"\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i]);
        if (rc != MS_EINVAL)
            fprintf(stderr, "accepted: %s\n", bad[i]);
        CHECK(rc == MS_EINVAL);
        CHECK(why != NULL && why[0] != 0);
    }
    /* a NUL inside the body is not the end of it */
    CHECK(ms_downreq_parse("\"h:1\"\0x", 7, NULL, 0, addr, sizeof addr,
                           &force, &why) == MS_EINVAL);

    /* the length limit: 128 bytes pass, 129 do not */
    {
        char body[300];
        body[0] = '"';
        memset(body + 1, 'a', 128);
        memcpy(body + 129, "\"", 2);
        CHECK(parse(body) == 0 && strlen(addr) == 128);
        memset(body + 1, 'a', 129);
        memcpy(body + 130, "\"", 2);
        CHECK(parse(body) == MS_EINVAL);
        memset(body + 1, 'a', 200);
        memcpy(body + 201, "\"", 2);
        CHECK(parse(body) == MS_EINVAL);
    }
    /* a buffer too small for the longest address is refused */
    {
        char small[8];
        CHECK(ms_downreq_parse("\"h:1\"", 5, NULL, 0, small, sizeof small,
                               &force, &why) == MS_EINVAL);
    }
    /* NULL body with length 0 */
    CHECK(ms_downreq_parse(NULL, 0, NULL, 0, addr, sizeof addr, &force,
                           &why) == MS_EINVAL);
    CHECK_DONE();
}
