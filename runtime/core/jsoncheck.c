/*
 * jsoncheck.c -- see jsoncheck.h. A recursive-descent scanner over the
 * RFC 8259 grammar; recursion is bounded by max_depth.
 */
#include "jsoncheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct scan {
    const unsigned char *p, *end;
    int depth, max_depth;
    const char *why; /* the first refusal's reason, or NULL */
};

/* Records why the scan stopped (the first reason only); returns 0. */
static int bad(struct scan *s, const char *why)
{
    if (!s->why)
        s->why = why;
    return 0;
}

static void ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' ||
                             *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int lit(struct scan *s, const char *word)
{
    for (; *word; word++, s->p++)
        if (s->p == s->end || *s->p != (unsigned char)*word)
            return 0;
    return 1;
}

static int digits(struct scan *s)
{
    const unsigned char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    return s->p > start;
}

/* A number that a double cannot hold (1e999) decodes to infinity, which
 * no reply could carry again: refused. Only numbers with an exponent or
 * many digits can overflow, so only those are converted. */
static int fits_double(const unsigned char *start, const unsigned char *end,
                       int has_exp)
{
    char buf[MS_JSON_MAX_NUMBER + 1];
    size_t n = (size_t)(end - start); /* at most MS_JSON_MAX_NUMBER */
    if (!has_exp && n < 300)
        return 1;
    memcpy(buf, start, n);
    buf[n] = 0;
    return isfinite(strtod(buf, NULL));
}

static int number(struct scan *s)
{
    const unsigned char *start = s->p;
    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (s->p < s->end && *s->p == '0')
        s->p++;
    else if (!digits(s))
        return bad(s, "a value or a digit was expected");
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!digits(s))
            return bad(s, "a digit must follow the decimal point");
    }
    int has_exp = s->p < s->end && (*s->p == 'e' || *s->p == 'E');
    if (has_exp) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (!digits(s))
            return bad(s, "an exponent needs digits");
    }
    if (s->p - start > MS_JSON_MAX_NUMBER)
        return bad(s, "a number is longer than 399 characters");
    if (!fits_double(start, s->p, has_exp))
        return bad(s, "a number is too large for a double");
    return 1;
}

/* The 4 hex digits after "\u": their value, or -1. */
static long hex4(struct scan *s)
{
    long v = 0;
    for (int i = 0; i < 4; i++, s->p++) {
        if (s->p == s->end)
            return -1;
        unsigned c = *s->p;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            v |= (c | 0x20) - 'a' + 10;
        else
            return -1;
    }
    return v;
}

static int string(struct scan *s)
{
    s->p++; /* the opening quote */
    while (s->p < s->end) {
        unsigned c = *s->p++;
        if (c == '"')
            return 1;
        if (c < 0x20) {
            s->p--;
            return bad(s, "a control character must be escaped in a "
                          "string");
        }
        if (c != '\\')
            continue;
        if (s->p == s->end)
            break;
        c = *s->p++;
        if (c == 'u') {
            long cp = hex4(s);
            if (cp < 0 || (cp >= 0xdc00 && cp <= 0xdfff))
                return bad(s, "bad \\u escape"); /* or a low surrogate */
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (s->end - s->p < 2 || s->p[0] != '\\' || s->p[1] != 'u')
                    return bad(s, "an unpaired UTF-16 surrogate");
                s->p += 2;
                long lo = hex4(s);
                if (lo < 0xdc00 || lo > 0xdfff)
                    return bad(s, "an unpaired UTF-16 surrogate");
            }
        } else if (c != '"' && c != '\\' && c != '/' && c != 'b' &&
                   c != 'f' && c != 'n' && c != 'r' && c != 't') {
            s->p--;
            return bad(s, "bad escape in a string");
        }
    }
    return bad(s, "the text ends inside a string");
}

static int value(struct scan *s);

/* An object or array, at s->p on its opening bracket. */
static int container(struct scan *s, unsigned char close)
{
    if (++s->depth > s->max_depth)
        return bad(s, "nested deeper than json_max_depth");
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 1;
    }
    for (;;) {
        if (close == '}') {
            if (s->p == s->end || *s->p != '"')
                return bad(s, "an object key (a string) was expected");
            if (!string(s))
                return 0;
            ws(s);
            if (s->p == s->end || *s->p != ':')
                return bad(s, "':' was expected after an object key");
            s->p++;
            ws(s);
        }
        if (!value(s))
            return 0;
        ws(s);
        if (s->p == s->end)
            return bad(s, "the text ends inside an object or array");
        unsigned char c = *s->p;
        if (c == close) {
            s->p++;
            s->depth--;
            return 1;
        }
        if (c != ',')
            return bad(s, close == '}' ? "',' or '}' was expected"
                                       : "',' or ']' was expected");
        s->p++;
        ws(s);
    }
}

static int value(struct scan *s)
{
    if (s->p == s->end)
        return bad(s, "the text ends where a value was expected");
    switch (*s->p) {
    case '{':
        return container(s, '}');
    case '[':
        return container(s, ']');
    case '"':
        return string(s);
    case 't':
        return lit(s, "true") || bad(s, "a value was expected");
    case 'f':
        return lit(s, "false") || bad(s, "a value was expected");
    case 'n':
        return lit(s, "null") || bad(s, "a value was expected");
    default:
        return number(s);
    }
}

int ms_json_check(const char *json, size_t len, int max_depth,
                  const char **why, size_t *at)
{
    struct scan s = {(const unsigned char *)json,
                     (const unsigned char *)json + len, 0, max_depth, NULL};
    ws(&s);
    int object = s.p < s.end && *s.p == '{';
    if (value(&s)) {
        ws(&s);
        if (s.p == s.end)
            return object ? MS_JSON_OBJECT : MS_JSON_VALUE;
        bad(&s, "bytes after the JSON value");
    }
    if (why)
        *why = s.why ? s.why : "not JSON";
    if (at)
        *at = (size_t)(s.p - (const unsigned char *)json);
    return MS_JSON_BAD;
}

int ms_json_is_object(const char *json, size_t len, int max_depth)
{
    struct scan s = {(const unsigned char *)json,
                     (const unsigned char *)json + len, 0, max_depth, NULL};
    ws(&s);
    if (s.p == s.end || *s.p != '{' || !container(&s, '}'))
        return 0;
    ws(&s);
    return s.p == s.end;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if there is none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k, i;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF)
        k = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF)
        k = 3;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4)
        k = 4;
    else
        return 0;
    if (n < k)
        return 0;
    for (i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    /* overlong forms, surrogates, code points above U+10FFFF */
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return k;
}

/*
 * Appends s[0..len) to out[*n..cap) as the inside of a JSON string. Bytes
 * that are not valid UTF-8 become U+FFFD, so the result is always valid
 * JSON. Stops early, at a character boundary, rather than overflow.
 */
void ms_json_put_escaped(char *out, size_t cap, size_t *n, const char *s,
                         size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;

    while (i < len) {
        char tmp[8];
        const char *src = tmp;
        size_t k, adv = 1;

        if (u[i] == '"' || u[i] == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)u[i];
            k = 2;
        } else if (u[i] == '\n' || u[i] == '\r' || u[i] == '\t') {
            tmp[0] = '\\';
            tmp[1] = u[i] == '\n' ? 'n' : u[i] == '\r' ? 'r' : 't';
            k = 2;
        } else if (u[i] < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", u[i]);
            k = 6;
        } else if ((adv = utf8_len(u + i, len - i)) == 0) {
            src = "\\ufffd";
            k = 6;
            adv = 1;
        } else {
            src = s + i;
            k = adv;
        }
        if (k > cap - *n)
            break;
        memcpy(out + *n, src, k);
        *n += k;
        i += adv;
    }
}
