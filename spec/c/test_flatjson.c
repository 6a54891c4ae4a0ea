/* flatjson.h: the pull reader of flat JSON objects that the handshake
 * (auth.c) and the down request (downreq.c) read their input with. What it
 * accepts, member by member; what it refuses, with which error, and
 * whether the error is in a member's value. */
#include <string.h>

#include "../../runtime/core/flatjson.h"
#include "check.h"

static struct ms_fj r;
static struct ms_fj_member m[20];
static int nm;

/* Reads the object `text` (max_string 16 unless told) into m[0..nm).
 * Returns 0, or the first error (of ms_fj_object, ms_fj_next or
 * ms_fj_end); on an error in a member, m[nm] is that member. */
static int read_obj_n(const char *text, size_t len, size_t max,
                      unsigned flags)
{
    int rc;
    nm = 0;
    memset(m, 0, sizeof m);
    ms_fj_init(&r, text, len, max, flags);
    if ((rc = ms_fj_object(&r)) != 0)
        return rc;
    while (nm < 19 && (rc = ms_fj_next(&r, &m[nm])) == 1)
        nm++;
    if (rc < 0)
        return rc;
    return ms_fj_end(&r);
}

static int read_obj(const char *text)
{
    return read_obj_n(text, strlen(text), 16, 0);
}

static int key_is(const struct ms_fj_member *x, const char *k)
{
    return x->klen == strlen(k) && memcmp(x->key, k, x->klen) == 0;
}

static int str_is(const struct ms_fj_member *x, const char *s)
{
    return x->kind == MS_FJ_STRING && x->slen == strlen(s) &&
           memcmp(x->str, s, x->slen) == 0;
}

static void accepted(void)
{
    CHECK(read_obj("{}") == 0 && nm == 0);
    CHECK(read_obj(" \t\r\n{ \n}\r\n ") == 0 && nm == 0);
    CHECK(read_obj("{\"a\":\"x\",\"b\":12,\"c\":true,\"d\":false,"
                   "\"e\":\"\"}") == 0);
    CHECK(nm == 5);
    CHECK(key_is(&m[0], "a") && str_is(&m[0], "x"));
    CHECK(key_is(&m[1], "b") && m[1].kind == MS_FJ_INT && m[1].num == 12);
    CHECK(key_is(&m[2], "c") && m[2].kind == MS_FJ_TRUE);
    CHECK(key_is(&m[3], "d") && m[3].kind == MS_FJ_FALSE);
    CHECK(key_is(&m[4], "e") && str_is(&m[4], ""));
    for (int i = 0; i < nm; i++)
        CHECK(m[i].in_value == 0);
    /* whitespace everywhere it may be */
    CHECK(read_obj(" { \"a\" : \"x\" , \"b\" : 7 } ") == 0 && nm == 2);
    CHECK(str_is(&m[0], "x") && m[1].num == 7);
    /* the largest integer, and leading zeros (the handshake took them) */
    CHECK(read_obj("{\"n\":999999999}") == 0 && m[0].num == 999999999u);
    CHECK(read_obj("{\"n\":007}") == 0 && m[0].num == 7);
    CHECK(read_obj("{\"n\":0}") == 0 && m[0].num == 0);
    /* keys are not checked for duplicates: that is the caller's rule */
    CHECK(read_obj("{\"a\":1,\"a\":2}") == 0 && nm == 2);
    /* bytes above 0x7e pass unless MS_FJ_ASCII */
    CHECK(read_obj("{\"a\":\"\xc3\xa9\x7f\"}") == 0 &&
          str_is(&m[0], "\xc3\xa9\x7f"));
    /* the text is borrowed: pointers into it, not copies */
    const char *t = "{\"key\":\"val\"}";
    CHECK(read_obj(t) == 0 && m[0].key == t + 2 && m[0].str == t + 8);
    /* once closed, next says so again */
    CHECK(ms_fj_next(&r, &m[19]) == 0);
}

static void refused(void)
{
    static const char *syntax[] = {
        "",
        "   ",
        "[]",
        "\"a\"",                 /* a string, read as an object */
        "{",
        "{\"a\"",
        "{\"a\":",
        "{\"a\" 1}",             /* no colon */
        "{\"a\":1",              /* not closed */
        "{\"a\":1,}",            /* trailing comma */
        "{,}",
        "{\"a\":1 \"b\":2}",     /* no comma */
        "{\"a\":1;\"b\":2}",      /* not a comma */
        "{a:1}",                 /* key not a string */
        "{1:1}",
        "{\"a\":1}x",            /* bytes after it */
        "{\"a\":1}{}",
        "{\"a\":null}",
        "{\"a\":-1}",
        "{\"a\":+1}",
        "{\"a\":1.5}",
        "{\"a\":1e3}",
        "{\"a\":1234567890}",    /* 10 digits */
        "{\"a\":tru}",
        "{\"a\":truex}",
        "{\"a\":True}",
        "{\"a\":{}}",            /* no nesting */
        "{\"a\":[1]}",
    };
    for (size_t i = 0; i < sizeof syntax / sizeof syntax[0]; i++) {
        int rc = read_obj(syntax[i]);
        if (rc != MS_FJ_ESYNTAX)
            fprintf(stderr, "not ESYNTAX (%d): %s\n", rc, syntax[i]);
        CHECK(rc == MS_FJ_ESYNTAX);
    }
    static const char *string[] = {
        "{\"a\":\"x\\\"y\"}",    /* escapes, any */
        "{\"a\":\"\\u0041\"}",
        "{\"a\\n\":1}",
        "{\"a\":\"x\ty\"}",      /* control bytes */
        "{\"a\":\"x\ny\"}",
        "{\"a\":\"x\x01\"}",
        "{\"a\":\"xy}",          /* no closing quote */
        "{\"a",
    };
    for (size_t i = 0; i < sizeof string / sizeof string[0]; i++) {
        int rc = read_obj(string[i]);
        if (rc != MS_FJ_ESTRING)
            fprintf(stderr, "not ESTRING (%d): %s\n", rc, string[i]);
        CHECK(rc == MS_FJ_ESTRING);
    }
    /* a NUL is a control byte, and not the end of the text */
    CHECK(read_obj_n("{\"a\":\"x\0\"}", 10, 16, 0) == MS_FJ_ESTRING);
    CHECK(read_obj_n("{\"a\":1}\0", 8, 16, 0) == MS_FJ_ESYNTAX);
    /* MS_FJ_ASCII: printable ASCII only, in keys and values */
    CHECK(read_obj_n("{\"a\":\"x~ \"}", 11, 16, MS_FJ_ASCII) == 0);
    CHECK(read_obj_n("{\"a\":\"\x7f\"}", 9, 16, MS_FJ_ASCII) ==
          MS_FJ_ESTRING);
    CHECK(read_obj_n("{\"\xc3\xa9\":1}", 8, 16, MS_FJ_ASCII) ==
          MS_FJ_ESTRING);
}

/* max_string bytes pass, one more does not, in keys and values alike; a
 * bad byte at the limit is ESTRING (the byte is judged first). */
static void lengths(void)
{
    char t[64];
    snprintf(t, sizeof t, "{\"a\":\"%s\"}", "0123456789abcdef");
    CHECK(read_obj(t) == 0 && m[0].slen == 16);
    snprintf(t, sizeof t, "{\"a\":\"%s\"}", "0123456789abcdefg");
    CHECK(read_obj(t) == MS_FJ_ETOOLONG && m[0].in_value == 1);
    snprintf(t, sizeof t, "{\"%s\":1}", "0123456789abcdef");
    CHECK(read_obj(t) == 0 && m[0].klen == 16);
    snprintf(t, sizeof t, "{\"%s\":1}", "0123456789abcdefg");
    CHECK(read_obj(t) == MS_FJ_ETOOLONG && m[0].in_value == 0);
    snprintf(t, sizeof t, "{\"a\":\"%s\\\"}", "0123456789abcdef");
    CHECK(read_obj(t) == MS_FJ_ESTRING);
    CHECK(read_obj_n("{\"\":\"\"}", 7, 0, 0) == 0 && m[0].slen == 0);
    CHECK(read_obj_n("{\"a\":1}", 7, 0, 0) == MS_FJ_ETOOLONG);
}

/* Where an error is: in a member's value (its key known), or not. */
static void where(void)
{
    CHECK(read_obj("{\"a\":1,\"bb\":\"x\\y\"}") == MS_FJ_ESTRING);
    CHECK(nm == 1 && m[1].in_value == 1 && key_is(&m[1], "bb"));
    CHECK(read_obj("{\"a\":1,\"bb\":nul}") == MS_FJ_ESYNTAX);
    CHECK(m[1].in_value == 1 && key_is(&m[1], "bb"));
    CHECK(read_obj("{\"a\":1,\"bb\":") == MS_FJ_ESYNTAX);
    CHECK(m[1].in_value == 1 && key_is(&m[1], "bb"));
    CHECK(read_obj("{\"a\":1,\"b\\b\":1}") == MS_FJ_ESTRING);
    CHECK(m[1].in_value == 0);
    CHECK(read_obj("{\"a\":1,\"bb\" 1}") == MS_FJ_ESYNTAX);
    CHECK(m[1].in_value == 0);
    CHECK(read_obj("{\"a\":1 x") == MS_FJ_ESYNTAX);
    CHECK(nm == 1 && m[1].in_value == 0);
    /* after an error the reader stays failed */
    struct ms_fj_member x;
    CHECK(ms_fj_next(&r, &x) == MS_FJ_ESYNTAX);
    CHECK(ms_fj_end(&r) == MS_FJ_ESYNTAX);
}

/* One string instead of an object; the calls out of order. */
static void string_and_order(void)
{
    const char *s = NULL;
    size_t n = 0;
    const char *t = " \"h:1\" \n";
    ms_fj_init(&r, t, strlen(t), 16, 0);
    CHECK(ms_fj_peek(&r) == '"');
    CHECK(ms_fj_string(&r, &s, &n) == 0 && n == 3 && s == t + 2);
    CHECK(ms_fj_end(&r) == 0);
    t = "\"h:1\" x";
    ms_fj_init(&r, t, strlen(t), 16, 0);
    CHECK(ms_fj_string(&r, &s, &n) == 0 && ms_fj_end(&r) == MS_FJ_ESYNTAX);
    t = "\"h\\:1\"";
    ms_fj_init(&r, t, strlen(t), 16, 0);
    CHECK(ms_fj_string(&r, &s, &n) == MS_FJ_ESTRING);
    t = "\"0123456789abcdefg\"";
    ms_fj_init(&r, t, strlen(t), 16, 0);
    CHECK(ms_fj_string(&r, &s, &n) == MS_FJ_ETOOLONG);
    t = "h:1";
    ms_fj_init(&r, t, strlen(t), 16, 0);
    CHECK(ms_fj_string(&r, &s, &n) == MS_FJ_ESYNTAX);
    /* an empty text: peek says the end; nothing to end before a value */
    ms_fj_init(&r, "", 0, 16, 0);
    CHECK(ms_fj_peek(&r) == -1 && ms_fj_end(&r) == MS_FJ_ESYNTAX);
    ms_fj_init(&r, NULL, 0, 16, 0);
    CHECK(ms_fj_peek(&r) == -1 && ms_fj_object(&r) == MS_FJ_ESYNTAX);
    /* next before an object, a string or an object after a value */
    struct ms_fj_member x;
    ms_fj_init(&r, "{}", 2, 16, 0);
    CHECK(ms_fj_next(&r, &x) == MS_FJ_ESYNTAX);
    ms_fj_init(&r, "{}", 2, 16, 0);
    CHECK(ms_fj_object(&r) == 0 && ms_fj_next(&r, &x) == 0);
    CHECK(ms_fj_object(&r) == MS_FJ_ESYNTAX);
    ms_fj_init(&r, "\"a\"", 3, 16, 0);
    CHECK(ms_fj_string(&r, &s, &n) == 0);
    CHECK(ms_fj_string(&r, &s, &n) == MS_FJ_ESYNTAX);
}

int main(void)
{
    accepted();
    refused();
    lengths();
    where();
    string_and_order();
    CHECK_DONE();
}
