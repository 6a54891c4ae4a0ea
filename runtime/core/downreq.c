/*
 * downreq.c -- see downreq.h. A scanner for exactly the two shapes a down
 * request may have; anything else is refused with a reason.
 */
#include "downreq.h"

#include <string.h>

#include "base.h"

struct scan {
    const char *p, *end;
};

static void ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' ||
                             *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int eat(struct scan *s, char ch)
{
    ws(s);
    if (s->p < s->end && *s->p == ch) {
        s->p++;
        return 1;
    }
    return 0;
}

static int word(struct scan *s, const char *w)
{
    size_t n = strlen(w);
    ws(s);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0)
        return 0;
    s->p += n;
    return 1;
}

/* A JSON string of plain bytes (no escapes) into out[0..cap). Returns its
 * length, -1 when it is not a plain string, -2 when it is too long. */
static int plain_string(struct scan *s, char *out, size_t cap)
{
    if (!eat(s, '"'))
        return -1;
    size_t n = 0;
    while (s->p < s->end && *s->p != '"') {
        unsigned char ch = (unsigned char)*s->p;
        if (ch == '\\' || ch < 0x20)
            return -1;
        if (n + 1 >= cap)
            return -2;
        out[n++] = (char)ch;
        s->p++;
    }
    if (s->p == s->end)
        return -1;
    s->p++; /* the closing quote */
    out[n] = 0;
    return (int)n;
}

/* 1 when a[0..n) could be a member address. */
static int address_ok(const char *a, size_t n)
{
    if (n == 0 || n > MS_DOWNREQ_MAX_ADDRESS)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)a[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\' ||
            ch == ',')
            return 0;
    }
    return 1;
}

static int query_force(const char *q, size_t qlen, int *force,
                       const char **why)
{
    size_t i = 0;
    while (i < qlen) {
        size_t j = i;
        while (j < qlen && q[j] != '&')
            j++;
        if (j - i >= 5 && memcmp(q + i, "force", 5) == 0 &&
            (j - i == 5 || q[i + 5] == '=')) {
            /* "force" alone or "force=": no value, refused below */
            const char *v = q + i + 5;
            size_t vn = j - i - 5;
            if (vn > 0) {
                v++; /* the '=' */
                vn--;
            }
            if ((vn == 1 && v[0] == '1') ||
                (vn == 4 && memcmp(v, "true", 4) == 0))
                *force = 1;
            else if (!((vn == 1 && v[0] == '0') ||
                       (vn == 5 && memcmp(v, "false", 5) == 0))) {
                *why = "the query's force must be 1, true, 0 or false";
                return MS_EINVAL;
            }
        }
        i = j + 1;
    }
    return 0;
}

int ms_downreq_parse(const char *body, size_t blen, const char *query,
                     size_t qlen, char *address, size_t cap, int *force,
                     const char **why)
{
    static const char shape[] =
        "the body must be \"host:port\" or {\"address\":\"host:port\"} "
        "with an optional \"force\":true";
    struct scan s = {body ? body : "", (body ? body : "") + blen};
    char buf[MS_DOWNREQ_MAX_ADDRESS + 2];
    int have_address = 0, have_force = 0, body_force = 0, n;

    *force = 0;
    *why = shape;
    if (cap < MS_DOWNREQ_MAX_ADDRESS + 1)
        return MS_EINVAL;
    ws(&s);
    if (s.p < s.end && *s.p == '"') {
        n = plain_string(&s, buf, sizeof buf);
        if (n < 0)
            goto bad_string;
        have_address = 1;
    } else if (eat(&s, '{')) {
        if (!eat(&s, '}')) {
            do {
                char key[16];
                int kn = plain_string(&s, key, sizeof key);
                if (kn < 0 || !eat(&s, ':'))
                    return MS_EINVAL;
                if (strcmp(key, "address") == 0 && !have_address) {
                    n = plain_string(&s, buf, sizeof buf);
                    if (n < 0)
                        goto bad_string;
                    have_address = 1;
                } else if (strcmp(key, "force") == 0 && !have_force) {
                    if (word(&s, "true"))
                        body_force = 1;
                    else if (!word(&s, "false"))
                        return MS_EINVAL;
                    have_force = 1;
                } else {
                    return MS_EINVAL; /* unknown or repeated key */
                }
            } while (eat(&s, ','));
            if (!eat(&s, '}'))
                return MS_EINVAL;
        }
    } else {
        return MS_EINVAL;
    }
    ws(&s);
    if (s.p != s.end || !have_address)
        return MS_EINVAL;
    if (!address_ok(buf, strlen(buf))) {
        *why = "the address must be host:port, at most 128 printable "
               "bytes without spaces, quotes, backslashes or commas";
        return MS_EINVAL;
    }
    int qforce = 0;
    if (query_force(query, qlen, &qforce, why) < 0)
        return MS_EINVAL;
    *force = body_force || qforce;
    memcpy(address, buf, strlen(buf) + 1);
    return 0;

bad_string:
    if (n == -2)
        *why = "the address must be at most 128 bytes";
    else
        *why = "the address must be a plain JSON string (no escapes)";
    return MS_EINVAL;
}
