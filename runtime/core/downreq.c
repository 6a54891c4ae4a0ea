/*
 * downreq.c -- see downreq.h. Reads exactly the two shapes a down request
 * may have, with the core's flat JSON reader (flatjson.h); anything else
 * is refused with a reason.
 */
#include "downreq.h"

#include <string.h>

#include "base.h"
#include "flatjson.h"

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

/* 1 when member m's key is k. */
static int key_is(const struct ms_fj_member *m, const char *k)
{
    return m->klen == strlen(k) && memcmp(m->key, k, m->klen) == 0;
}

/* The address was not a plain string (rc from the reader). */
static int bad_string(int rc, const char **why)
{
    if (rc == MS_FJ_ETOOLONG)
        *why = "the address must be at most 128 bytes";
    else
        *why = "the address must be a plain JSON string (no escapes)";
    return MS_EINVAL;
}

int ms_downreq_parse(const char *body, size_t blen, const char *query,
                     size_t qlen, char *address, size_t cap, int *force,
                     const char **why)
{
    static const char shape[] =
        "the body must be \"host:port\" or {\"address\":\"host:port\"} "
        "with an optional \"force\":true";
    struct ms_fj r;
    struct ms_fj_member m;
    const char *addr = NULL;
    size_t alen = 0;
    int have_address = 0, have_force = 0, body_force = 0, rc;

    *force = 0;
    *why = shape;
    if (cap < MS_DOWNREQ_MAX_ADDRESS + 1)
        return MS_EINVAL;
    /* strings of one byte more than an address may have still read:
     * address_ok() then says what is wrong with such an address */
    ms_fj_init(&r, body ? body : "", blen, MS_DOWNREQ_MAX_ADDRESS + 1, 0);
    if (ms_fj_peek(&r) == '"') {
        rc = ms_fj_string(&r, &addr, &alen);
        if (rc < 0)
            return bad_string(rc, why);
        have_address = 1;
    } else if (ms_fj_object(&r) == 0) {
        while ((rc = ms_fj_next(&r, &m)) == 1) {
            if (key_is(&m, "address") && !have_address) {
                if (m.kind != MS_FJ_STRING)
                    return bad_string(MS_FJ_ESTRING, why);
                addr = m.str;
                alen = m.slen;
                have_address = 1;
            } else if (key_is(&m, "force") && !have_force &&
                       (m.kind == MS_FJ_TRUE || m.kind == MS_FJ_FALSE)) {
                body_force = m.kind == MS_FJ_TRUE;
                have_force = 1;
            } else {
                return MS_EINVAL; /* unknown or repeated key, bad force */
            }
        }
        if (rc < 0) {
            /* the value of the address: say what is wrong with it */
            if (m.in_value && key_is(&m, "address") && !have_address)
                return bad_string(rc, why);
            return MS_EINVAL;
        }
    } else {
        return MS_EINVAL;
    }
    if (ms_fj_end(&r) != 0 || !have_address)
        return MS_EINVAL;
    if (!address_ok(addr, alen)) {
        *why = "the address must be host:port, at most 128 printable "
               "bytes without spaces, quotes, backslashes or commas";
        return MS_EINVAL;
    }
    int qforce = 0;
    if (query_force(query, qlen, &qforce, why) < 0)
        return MS_EINVAL;
    *force = body_force || qforce;
    memcpy(address, addr, alen);
    address[alen] = '\0';
    return 0;
}
