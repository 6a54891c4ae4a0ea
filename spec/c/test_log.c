/* The log line format (runtime/core/log.h): field values and messages are
 * escaped so that no value can end a line, open a field or close a quote;
 * a reader that follows the grammar gets every value back byte for byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/core/jsoncheck.h"
#include "../../runtime/core/log.h"
#include "check.h"

static char out[4096];

/* One field of a fresh buffer. */
static const char *field(const char *key, const char *v, size_t len)
{
    ms_log_field(out, sizeof out, 0, key, v, len);
    return out;
}

#define F(v) field("k", v, sizeof v - 1)

/* ---- a reader of the grammar (an independent implementation) -------- */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads one value at *p (bare or quoted) into v (its length in *vlen);
 * returns 0, or -1 when the text breaks the grammar. */
static int read_value(const char **p, char *v, size_t *vlen)
{
    const char *s = *p;
    size_t n = 0;
    if (*s != '"') {
        while (*s && *s != ' ' && *s != '\n') {
            unsigned char c = (unsigned char)*s;
            if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '=')
                return -1;
            v[n++] = *s++;
        }
        if (n == 0)
            return -1;
    } else {
        s++;
        for (;;) {
            unsigned char c = (unsigned char)*s;
            if (c == 0 || c < 0x20 || c == 0x7f)
                return -1; /* no raw control character, no end of line */
            if (c == '"') {
                s++;
                break;
            }
            if (c != '\\') {
                v[n++] = *s++;
                continue;
            }
            s++;
            switch (*s) {
            case '\\': v[n++] = '\\'; s++; break;
            case '"': v[n++] = '"'; s++; break;
            case 'n': v[n++] = '\n'; s++; break;
            case 'r': v[n++] = '\r'; s++; break;
            case 't': v[n++] = '\t'; s++; break;
            case 'x': {
                int hi = hexval(s[1]), lo = hi < 0 ? -1 : hexval(s[2]);
                if (lo < 0)
                    return -1;
                v[n++] = (char)(hi * 16 + lo);
                s += 3;
                break;
            }
            default:
                return -1;
            }
        }
        if (*s && *s != ' ' && *s != '\n')
            return -1;
    }
    *vlen = n;
    *p = s;
    return 0;
}

/* Reads `key=value` at *p; checks the key; returns 0 or -1. */
static int read_field(const char **p, char *key, char *v, size_t *vlen)
{
    const char *s = *p;
    size_t k = 0;
    while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
           (*s >= '0' && *s <= '9') || *s == '_')
        key[k++] = *s++;
    key[k] = 0;
    if (k == 0 || *s != '=')
        return -1;
    s++;
    if (read_value(&s, v, vlen) < 0)
        return -1;
    *p = s;
    return 0;
}

/* ---- the builder ------------------------------------------------------ */

static void bare_and_quoted(void)
{
    CHECK(strcmp(F("abc"), "k=abc") == 0);
    CHECK(strcmp(F("a-b_c.d:e/f@g,h"), "k=a-b_c.d:e/f@g,h") == 0);
    CHECK(strcmp(F(""), "k=\"\"") == 0);
    CHECK(strcmp(field("k", NULL, 0), "k=\"\"") == 0);
    CHECK(strcmp(F("a b"), "k=\"a b\"") == 0);
    CHECK(strcmp(F("a\"b"), "k=\"a\\\"b\"") == 0);
    CHECK(strcmp(F("a\\b"), "k=\"a\\\\b\"") == 0);
    CHECK(strcmp(F("a=b"), "k=\"a=b\"") == 0);
    CHECK(strcmp(F("a\nb"), "k=\"a\\nb\"") == 0);
    CHECK(strcmp(F("a\rb"), "k=\"a\\rb\"") == 0);
    CHECK(strcmp(F("a\tb"), "k=\"a\\tb\"") == 0);
    CHECK(strcmp(F("a\001b\177"), "k=\"a\\x01b\\x7f\"") == 0);
    CHECK(strcmp(F("a\0b"), "k=\"a\\x00b\"") == 0);
    /* valid UTF-8 is kept as is (quoted: it is not a bare character) */
    CHECK(strcmp(F("caf\xc3\xa9"), "k=\"caf\xc3\xa9\"") == 0);
    CHECK(strcmp(F("\xf0\x9f\x98\x80"), "k=\"\xf0\x9f\x98\x80\"") == 0);
    /* bytes that are not UTF-8: one escape each */
    CHECK(strcmp(F("\xff\xfe"), "k=\"\\xff\\xfe\"") == 0);
    CHECK(strcmp(F("\xc0\x80"), "k=\"\\xc0\\x80\"") == 0); /* overlong */
    CHECK(strcmp(F("\xed\xa0\x80"), "k=\"\\xed\\xa0\\x80\"") == 0);
    CHECK(strcmp(F("\xe2\x82"), "k=\"\\xe2\\x82\"") == 0); /* cut short */
    CHECK(strcmp(F("\xf4\x90\x80\x80"), "k=\"\\xf4\\x90\\x80\\x80\"") == 0);
    /* code points that break or reorder a line on a terminal */
    CHECK(strcmp(F("\xc2\x85"), "k=\"\\xc2\\x85\"") == 0);     /* NEL */
    CHECK(strcmp(F("\xe2\x80\xa8"), "k=\"\\xe2\\x80\\xa8\"") == 0);
    CHECK(strcmp(F("\xe2\x80\xae"), "k=\"\\xe2\\x80\\xae\"") == 0);
    CHECK(strcmp(F("\xe2\x81\xa6"), "k=\"\\xe2\\x81\\xa6\"") == 0);
    /* the forged id */
    CHECK(strcmp(F("x\n2026-12-01T00:00:00.000Z ERROR node=n9 "
                   "msg=\"FORGED\""),
                 "k=\"x\\n2026-12-01T00:00:00.000Z ERROR node=n9 "
                 "msg=\\\"FORGED\\\"\"") == 0);
}

static void keys_and_lists(void)
{
    char b[256];
    size_t o = ms_log_field_s(b, sizeof b, 0, "type", "Counter");
    o = ms_log_field_u(b, sizeof b, o, "shard", 3);
    o = ms_log_field_s(b, sizeof b, o, "id", "a b");
    CHECK(strcmp(b, "type=Counter shard=3 id=\"a b\"") == 0);
    CHECK(o == strlen(b));
    ms_log_field_s(b, sizeof b, 0, "bad key=\"", "v");
    CHECK(strcmp(b, "bad_key__=v") == 0);
    ms_log_field_u(b, sizeof b, 0, "n", 18446744073709551615ULL);
    CHECK(strcmp(b, "n=18446744073709551615") == 0);
}

static void cuts(void)
{
    char v[300];
    memset(v, 'a', sizeof v);
    /* longer than MS_LOG_VALUE_MAX: cut, quoted, marked */
    field("k", v, MS_LOG_VALUE_MAX + 1);
    CHECK(strlen(out) == 2 + 1 + MS_LOG_VALUE_MAX + 3 + 1);
    CHECK(strncmp(out, "k=\"aaa", 6) == 0);
    CHECK(strcmp(out + strlen(out) - 4, "...\"") == 0);
    field("k", v, MS_LOG_VALUE_MAX);
    CHECK(strlen(out) == 2 + MS_LOG_VALUE_MAX); /* exactly: bare */

    /* a small buffer: the field is cut on a character boundary */
    char b[16];
    for (size_t cap = 1; cap <= sizeof b; cap++) {
        memset(b, 0x55, sizeof b);
        b[0] = 0;
        size_t o = ms_log_field(b, cap, 0, "k", "\n\n\n\n\n\n\n\n", 8);
        CHECK(o < cap && b[o] == 0 && strlen(b) == o);
        if (o) { /* a whole value: quotes closed, no half escape */
            const char *p = b;
            char key[16], val[16];
            size_t vlen;
            CHECK(read_field(&p, key, val, &vlen) == 0 && *p == 0);
        }
        if (cap < 5) /* not even k="" and the NUL */
            CHECK(o == 0);
    }
    /* a multibyte character is never split */
    memset(b, 0, sizeof b);
    ms_log_field(b, 12, 0, "k", "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 8);
    CHECK(strcmp(b, "k=\"\xc3\xa9\xc3\xa9...\"") == 0);
    /* appending to a full buffer changes nothing */
    ms_log_field_s(b, sizeof b, 0, "key", "0123456789");
    size_t at = strlen(b);
    CHECK(ms_log_field_s(b, sizeof b, at, "x", "y") == at);
    CHECK(strlen(b) == at);
}

/* Random bytes come back byte for byte through the reader. */
static void round_trip(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 20000; i++) {
        char v[MS_LOG_VALUE_MAX], back[MS_LOG_VALUE_MAX * 2], key[8];
        size_t len = 0, blen = 0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        len = x % (MS_LOG_VALUE_MAX + 1);
        for (size_t j = 0; j < len; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* mostly ASCII, with some of everything else */
            int r = (int)(x % 8);
            v[j] = r < 5 ? (char)(0x20 + (x >> 8) % 95)
                         : (char)((x >> 16) & 0xff);
        }
        field("k", v, len);
        const char *p = out;
        int ok = read_field(&p, key, back, &blen) == 0 && *p == 0;
        CHECK(ok);
        CHECK(blen == len && memcmp(back, v, len) == 0);
        if (!ok || blen != len)
            break;
    }
}

/* ---- whole lines -------------------------------------------------------- */

/* What the sink got: the lines, one sink call each. */
struct got {
    char *buf;
    size_t cap, len;
    int calls, partial; /* partial: a call that was not one whole line */
};

static void to_buffer(void *data, const char *line, size_t len)
{
    struct got *g = data;
    g->calls++;
    if (len == 0 || line[len - 1] != '\n' ||
        memchr(line, '\n', len - 1) != NULL)
        g->partial++;
    size_t n = len < g->cap - 1 - g->len ? len : g->cap - 1 - g->len;
    memcpy(g->buf + g->len, line, n);
    g->len += n;
    g->buf[g->len] = 0;
}

static int64_t clock_ms = 1764620000123; /* 2025-12-01T20:13:20.123Z */

static int64_t fixed_clock(void *data)
{
    (void)data;
    return clock_ms;
}

/* Captures what ms_log hands its sink while fn runs; every line must come
 * whole, in one call. */
static size_t capture(void (*fn)(void), char *buf, size_t cap)
{
    struct got g = {buf, cap, 0, 0, 0};
    buf[0] = 0;
    ms_log_set_clock(fixed_clock, NULL);
    ms_log_set_sink(to_buffer, &g);
    fn();
    ms_log_set_sink(NULL, NULL);
    CHECK(g.partial == 0);
    return g.len;
}

static void emit_lines(void)
{
    char f[512];
    size_t o = ms_log_field_s(f, sizeof f, 0, "type", "Counter");
    o = ms_log_field_u(f, sizeof f, o, "shard", 3);
    ms_log_field_s(f, sizeof f, o, "id",
                   "x\n2026-12-01T00:00:00.000Z ERROR node=n9 msg=\"F\"");
    ms_log(MS_LOG_ERROR, f, "handler error: %s", "a\nb \"q\" \\ \xff");
    /* fields text made without the builder stays on its line */
    ms_log(MS_LOG_WARN, "peer=a\nb\rc", "x");
    /* text in the grammar made by hand is kept as it is */
    ms_log(MS_LOG_WARN, "peer=n2 address=\"a b\" x=\"\\x41\"", "y");
    /* not in the grammar, but without a control byte */
    ms_log(MS_LOG_WARN, "peer=(inbound, not authenticated)", "z");
    ms_log(MS_LOG_DEBUG, NULL, "below the level: not written");
    char big[MS_LOG_TEXT_MAX + 100];
    memset(big, '"', sizeof big);
    ms_log_text(MS_LOG_INFO, NULL, big, sizeof big);
    ms_log_text(MS_LOG_INFO, NULL, "nul\0inside", 11);
}

/* Checks one line against the grammar; returns the number of fields or
 * -1. Sets msg/mlen to the decoded msg= value. */
static int parse_line(const char *line, const char *end, char *msg,
                      size_t *mlen)
{
    /* 2026-11-29T16:50:50.123Z */
    const char *pat = "dddd-dd-ddTdd:dd:dd.dddZ ";
    const char *s = line;
    for (const char *q = pat; *q; q++, s++) {
        if (s >= end)
            return -1;
        if (*q == 'd' ? !(*s >= '0' && *s <= '9') : *s != *q)
            return -1;
    }
    const char *levels[] = {"DEBUG ", "INFO ", "WARN ", "ERROR "};
    int lv = -1;
    for (int i = 0; i < 4; i++)
        if (strncmp(s, levels[i], strlen(levels[i])) == 0)
            lv = i;
    if (lv < 0)
        return -1;
    s += strlen(levels[lv]);
    int n = 0;
    char key[64];
    static char v[5 * MS_LOG_TEXT_MAX];
    size_t vlen;
    for (;;) {
        if (read_field(&s, key, v, &vlen) < 0)
            return -1;
        if (n == 0 && strcmp(key, "node") != 0)
            return -1;
        n++;
        if (strcmp(key, "msg") == 0) {
            memcpy(msg, v, vlen);
            *mlen = vlen;
            return s == end ? n : -1;
        }
        if (*s != ' ')
            return -1;
        s++;
    }
}

static void lines(void)
{
    static char buf[64 * 1024];
    ms_log_setup("n1", MS_LOG_INFO);
    size_t n = capture(emit_lines, buf, sizeof buf);
    int count = 0;
    const char *p = buf;
    static char msg[5 * MS_LOG_TEXT_MAX];
    size_t mlen = 0;
    while (p < buf + n) {
        const char *nl = memchr(p, '\n', (size_t)(buf + n - p));
        CHECK(nl != NULL);
        if (!nl)
            break;
        int nf = parse_line(p, nl, msg, &mlen);
        CHECK(nf > 0);
        if (nf < 0)
            fprintf(stderr, "bad line: %.*s\n", (int)(nl - p), p);
        if (count == 0) {
            CHECK(nf == 5);
            CHECK(mlen == 26 &&
                  memcmp(msg, "handler error: a\nb \"q\" \\ \xff", 26) == 0);
        } else if (count == 1) {
            /* fields text made without the builder, quoted whole */
            CHECK(nf == 3);
            CHECK(strstr(p, " fields=\"peer=a\\nb\\rc\" msg=\"x\"") != NULL);
        } else if (count == 2) {
            CHECK(nf == 5);
            CHECK(strstr(p, " peer=n2 address=\"a b\" x=\"\\x41\" msg=") !=
                  NULL);
        } else if (count == 3) {
            CHECK(nf == 3);
            CHECK(strstr(p, " fields=\"peer=(inbound, not authenticated)\" ")
                  != NULL);
        } else if (count == 4) {
            CHECK(mlen == MS_LOG_TEXT_MAX + 3);
            CHECK(memcmp(msg + MS_LOG_TEXT_MAX, "...", 3) == 0);
        } else if (count == 5) {
            CHECK(mlen == 11 && memcmp(msg, "nul\0inside", 11) == 0);
        }
        count++;
        p = nl + 1;
    }
    CHECK(count == 6);
    /* nothing that looks like the start of a forged line */
    CHECK(strstr(buf, "\n2026-12-01T00:00:00.000Z") == NULL);
}

/* Lines whose fields hold random bytes: each parses, and each value comes
 * back (the builder's text is never quoted again as fields="..."). */
static char rnd_vals[300][MS_LOG_VALUE_MAX];
static size_t rnd_lens[300];

static void emit_random(void)
{
    for (int i = 0; i < 300; i++) {
        char f[1024];
        size_t o = ms_log_field_u(f, sizeof f, 0, "i", (unsigned)i);
        o = ms_log_field(f, sizeof f, o, "id", rnd_vals[i], rnd_lens[i]);
        ms_log_field(f, sizeof f, o, "b", rnd_vals[i], rnd_lens[i] / 2);
        ms_log(MS_LOG_INFO, f, "%d", i);
    }
}

static void random_lines(void)
{
    static char buf[1 << 20];
    uint64_t x = 0x2545f4914f6cdd1dULL;
    for (int i = 0; i < 300; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        rnd_lens[i] = x % (MS_LOG_VALUE_MAX + 1);
        for (size_t j = 0; j < rnd_lens[i]; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            rnd_vals[i][j] = (char)(x >> 24);
        }
    }
    ms_log_setup("n1", MS_LOG_INFO);
    size_t n = capture(emit_random, buf, sizeof buf);
    const char *p = buf;
    int count = 0;
    while (p < buf + n) {
        const char *nl = memchr(p, '\n', (size_t)(buf + n - p));
        if (!nl)
            break;
        static char msg[5 * MS_LOG_TEXT_MAX];
        size_t mlen;
        CHECK(parse_line(p, nl, msg, &mlen) == 5);
        /* the id is the third field: node=, i=, id= */
        const char *q = strstr(p, " id=");
        CHECK(q != NULL && q < nl);
        if (q) {
            q += 1;
            char key[16], v[MS_LOG_VALUE_MAX * 2];
            size_t vlen;
            CHECK(read_field(&q, key, v, &vlen) == 0);
            CHECK(vlen == rnd_lens[count] &&
                  memcmp(v, rnd_vals[count], vlen) == 0);
        }
        count++;
        p = nl + 1;
    }
    CHECK(count == 300);
}

static void node_names(void)
{
    static char buf[4096];
    ms_log_setup("a b", MS_LOG_INFO);
    capture(emit_lines, buf, sizeof buf);
    CHECK(strstr(buf, " node=\"a b\" ") != NULL);
    ms_log_setup(NULL, MS_LOG_INFO);
    capture(emit_lines, buf, sizeof buf);
    CHECK(strstr(buf, " node=- ") != NULL);
}

static void one_line(void)
{
    ms_log(MS_LOG_WARN, NULL, "tick");
}

/* The time on a line is the host's clock, never the system's; without a
 * sink a line goes nowhere (and nothing breaks). */
static void host_clock_and_sink(void)
{
    static char buf[4096];
    ms_log_setup("n1", MS_LOG_INFO);
    capture(one_line, buf, sizeof buf);
    CHECK(strcmp(buf, "2025-12-01T20:13:20.123Z WARN node=n1 "
                      "msg=\"tick\"\n") == 0);
    clock_ms = 0;
    capture(one_line, buf, sizeof buf);
    CHECK(strncmp(buf, "1970-01-01T00:00:00.000Z WARN ", 30) == 0);
    clock_ms = -5; /* a clock before the epoch: the epoch */
    capture(one_line, buf, sizeof buf);
    CHECK(strncmp(buf, "1970-01-01T00:00:00.000Z WARN ", 30) == 0);
    clock_ms = 1764620000123;
    /* no clock: the epoch */
    ms_log_set_clock(NULL, NULL);
    struct got g = {buf, sizeof buf, 0, 0, 0};
    ms_log_set_sink(to_buffer, &g);
    one_line();
    ms_log_set_sink(NULL, NULL);
    CHECK(strncmp(buf, "1970-01-01T00:00:00.000Z WARN ", 30) == 0);
    /* no sink: dropped */
    one_line();
    ms_log_text(MS_LOG_ERROR, NULL, "x", 1);
}

/* log_format = "json": one JSON object a line, the same values. */
static void json_one(void)
{
    char f[512];
    size_t o = ms_log_field_s(f, sizeof f, 0, "type", "Counter");
    o = ms_log_field_u(f, sizeof f, o, "shard", 3);
    o = ms_log_field_s(f, sizeof f, o, "id", "a \"b\"\\\n\x01\xff\xc3\xa9");
    ms_log_field_s(f, sizeof f, o, "msg", "clash");
    ms_log(MS_LOG_WARN, f, "handler error: %s", "x\ty\x7f");
}

static void json_lines(void)
{
    static char buf[1 << 20];
    ms_log_setup("n1", MS_LOG_INFO);
    ms_log_set_json(1);
    capture(json_one, buf, sizeof buf);
    CHECK(strcmp(buf,
        "{\"time\":\"2025-12-01T20:13:20.123Z\",\"level\":\"WARN\","
        "\"node\":\"n1\",\"type\":\"Counter\",\"shard\":\"3\","
        "\"id\":\"a \\\"b\\\"\\\\\\n\\u0001\\\\xff\xc3\xa9\","
        "\"_msg\":\"clash\","
        "\"msg\":\"handler error: x\\ty\\u007f\"}\n") == 0);
    if (strncmp(buf, "{", 1) != 0 || strstr(buf, "_msg") == NULL)
        fprintf(stderr, "got: %s", buf);
    /* fields text outside the grammar: one "fields" string */
    ms_log(MS_LOG_INFO, "peer=a\nb", "m");
    /* every line the text tests write, and random ones, is one valid
     * JSON object on one line */
    size_t n = capture(emit_lines, buf, sizeof buf);
    n += capture(emit_random, buf + n, sizeof buf - n);
    int count = 0;
    for (const char *p = buf; p < buf + n;) {
        const char *nl = memchr(p, '\n', (size_t)(buf + n - p));
        CHECK(nl != NULL);
        if (!nl)
            break;
        const char *why = NULL;
        size_t at = 0;
        int kind = ms_json_check(p, (size_t)(nl - p), 4, &why, &at);
        CHECK(kind == MS_JSON_OBJECT);
        if (kind != MS_JSON_OBJECT)
            fprintf(stderr, "bad JSON line (%s at %zu): %.*s\n", why, at,
                    (int)(nl - p), p);
        static const char head[] = "{\"time\":\"2025-12-01T20:13:20.123Z\","
                                   "\"level\":";
        CHECK(strncmp(p, head, sizeof head - 1) == 0);
        count++;
        p = nl + 1;
    }
    /* emit_lines writes 6 lines at INFO or above, emit_random 300 */
    CHECK(count == 306);
    ms_log_set_json(0);
    capture(one_line, buf, sizeof buf);
    CHECK(strcmp(buf, "2025-12-01T20:13:20.123Z WARN node=n1 "
                      "msg=\"tick\"\n") == 0);
}

int main(void)
{
    bare_and_quoted();
    keys_and_lists();
    cuts();
    round_trip();
    lines();
    random_lines();
    node_names();
    host_clock_and_sink();
    clock_ms = 1764620000123;
    json_lines();
    CHECK_DONE();
}
