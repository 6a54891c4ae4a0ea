/*
 * flatjson.c -- a pull reader of flat JSON objects (sans-IO). See
 * flatjson.h for the shape it reads.
 */
#include "flatjson.h"

#include <string.h>

enum {
    FRESH,   /* nothing read yet */
    FIRST,   /* after '{': a key or '}' */
    AFTER,   /* after a member: ',' or '}' */
    DONE,    /* the object closed, or the string read */
    FAILED
};

static int fail(struct ms_fj *r, int rc)
{
    r->state = FAILED;
    return rc;
}

void ms_fj_init(struct ms_fj *r, const char *text, size_t len,
                size_t max_string, unsigned flags)
{
    r->p = text;
    r->end = len ? text + len : text; /* text may be NULL when len is 0 */
    r->max_string = max_string;
    r->flags = flags;
    r->state = FRESH;
}

int ms_fj_peek(struct ms_fj *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' ||
                             *r->p == '\n' || *r->p == '\r'))
        r->p++;
    return r->p < r->end ? (unsigned char)*r->p : -1;
}

/* A plain string at r->p (after whitespace). */
static int read_string(struct ms_fj *r, const char **s, size_t *n)
{
    if (ms_fj_peek(r) != '"')
        return MS_FJ_ESYNTAX;
    const char *start = ++r->p;
    while (r->p < r->end && *r->p != '"') {
        unsigned char ch = (unsigned char)*r->p;
        if (ch == '\\' || ch < 0x20 ||
            ((r->flags & MS_FJ_ASCII) && ch > 0x7e))
            return MS_FJ_ESTRING;
        if ((size_t)(r->p - start) >= r->max_string)
            return MS_FJ_ETOOLONG;
        r->p++;
    }
    if (r->p == r->end)
        return MS_FJ_ESTRING;
    *s = start;
    *n = (size_t)(r->p - start);
    r->p++; /* the closing quote */
    return 0;
}

/* The word w at r->p; 1 when it is there (and then consumed). */
static int word(struct ms_fj *r, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

int ms_fj_string(struct ms_fj *r, const char **s, size_t *n)
{
    if (r->state != FRESH)
        return fail(r, MS_FJ_ESYNTAX);
    int rc = read_string(r, s, n);
    if (rc)
        return fail(r, rc);
    r->state = DONE;
    return 0;
}

int ms_fj_object(struct ms_fj *r)
{
    if (r->state != FRESH || ms_fj_peek(r) != '{')
        return fail(r, MS_FJ_ESYNTAX);
    r->p++;
    r->state = FIRST;
    return 0;
}

/* The value of member m at r->p (after whitespace). */
static int read_value(struct ms_fj *r, struct ms_fj_member *m)
{
    int c = ms_fj_peek(r);
    if (c == '"') {
        m->kind = MS_FJ_STRING;
        return read_string(r, &m->str, &m->slen);
    }
    if (c >= '0' && c <= '9') {
        int digits = 0;
        m->kind = MS_FJ_INT;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
            if (++digits > MS_FJ_MAX_DIGITS)
                return MS_FJ_ESYNTAX;
            m->num = m->num * 10 + (uint32_t)(*r->p++ - '0');
        }
        return 0;
    }
    if (word(r, "true")) {
        m->kind = MS_FJ_TRUE;
        return 0;
    }
    if (word(r, "false")) {
        m->kind = MS_FJ_FALSE;
        return 0;
    }
    return MS_FJ_ESYNTAX;
}

int ms_fj_next(struct ms_fj *r, struct ms_fj_member *m)
{
    memset(m, 0, sizeof *m);
    switch (r->state) {
    case DONE:
        return 0;
    case FIRST:
        if (ms_fj_peek(r) == '}') {
            r->p++;
            r->state = DONE;
            return 0;
        }
        break;
    case AFTER: {
        int c = ms_fj_peek(r);
        if (c == '}') {
            r->p++;
            r->state = DONE;
            return 0;
        }
        if (c != ',')
            return fail(r, MS_FJ_ESYNTAX);
        r->p++;
        break;
    }
    default: /* no object opened, or failed */
        return fail(r, MS_FJ_ESYNTAX);
    }
    int rc = read_string(r, &m->key, &m->klen);
    if (rc)
        return fail(r, rc);
    if (ms_fj_peek(r) != ':')
        return fail(r, MS_FJ_ESYNTAX);
    r->p++;
    m->in_value = 1;
    rc = read_value(r, m);
    if (rc)
        return fail(r, rc);
    m->in_value = 0;
    r->state = AFTER;
    return 1;
}

int ms_fj_end(struct ms_fj *r)
{
    if (r->state != DONE || ms_fj_peek(r) != -1)
        return MS_FJ_ESYNTAX;
    return 0;
}
