/*
 * json_encode.c -- see json_encode.h.
 *
 * The text is built in a buffer on the C stack and moves to the heap when
 * it outgrows it. Failures do not longjmp out of the writers (that would
 * leak the heap buffer): each writer returns -1 with the reason in the
 * encoder, and the entry point frees the buffer, then raises.
 */
#include "json_encode.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#define STACK_BUF 1024
#define DEFAULT_MAX_DEPTH 64
#define SPARSE_SAFE 10 /* lua-cjson's encode_sparse_safe */
#define SPARSE_RATIO 2 /* lua-cjson's encode_sparse_ratio */
#define MAX_EXACT 9007199254740992.0 /* 2^53 */

/* The state of one encoder (a userdata, upvalue 1 of its functions). */
struct config {
    int max_depth;
};

struct enc {
    lua_State *L;
    char *buf;
    size_t len, cap;
    int heap;         /* buf was malloc'd */
    int max_depth;
    int jsontype;     /* stack index of the string "__jsontype" */
    char err[160];    /* the reason, once a writer returned -1 */
};

/* Makes room for `n` more bytes. */
static int reserve(struct enc *e, size_t n)
{
    if (n <= e->cap - e->len)
        return 0;
    size_t cap = e->cap * 2;
    while (cap - e->len < n)
        cap *= 2;
    char *nb = e->heap ? realloc(e->buf, cap) : malloc(cap);
    if (!nb) {
        snprintf(e->err, sizeof e->err, "not enough memory");
        return -1;
    }
    if (!e->heap)
        memcpy(nb, e->buf, e->len);
    e->buf = nb;
    e->cap = cap;
    e->heap = 1;
    return 0;
}

static int put(struct enc *e, const char *s, size_t n)
{
    if (reserve(e, n) < 0)
        return -1;
    memcpy(e->buf + e->len, s, n);
    e->len += n;
    return 0;
}

static int fail(struct enc *e, const char *fmt, const char *what)
{
    snprintf(e->err, sizeof e->err, fmt, what);
    return -1;
}

/* Writes an integer; |i| <= 2^53. */
static void put_int(struct enc *e, int64_t i)
{
    char tmp[24];
    char *p = tmp + sizeof tmp;
    uint64_t u = i < 0 ? (uint64_t)-i : (uint64_t)i;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (i < 0)
        *--p = '-';
    memcpy(e->buf + e->len, p, (size_t)(tmp + sizeof tmp - p));
    e->len += (size_t)(tmp + sizeof tmp - p);
}

/*
 * The first `nd` of the 17 significant digits `d17` (decimal exponent
 * `ex`: the value is d.ddd x 10^ex), rounded half up, into dig[]; returns
 * the exponent, one higher when the rounding carried out of the first
 * digit (9.99 -> 10.0).
 */
static int round_digits(const char *d17, int ex, int nd, char *dig)
{
    memcpy(dig, d17, (size_t)nd);
    if (d17[nd] < '5')
        return ex;
    int i = nd - 1;
    while (i >= 0 && dig[i] == '9')
        dig[i--] = '0';
    if (i >= 0) {
        dig[i]++;
        return ex;
    }
    dig[0] = '1'; /* all nines: 1000... one decade up */
    return ex + 1;
}

/* Whether the digits dig[0..nd) at decimal exponent ex read back as x. */
static int reads_back(const char *dig, int nd, int ex, double x)
{
    char t[40];
    int n = 0;
    if (x < 0)
        t[n++] = '-';
    memcpy(t + n, dig, (size_t)nd);
    n += nd;
    snprintf(t + n, sizeof t - (size_t)n, "e%d", ex - (nd - 1));
    return strtod(t, NULL) == x;
}

/*
 * The fast path for numbers with a short decimal form (0.1, 19.99,
 * 2.5e-8): the least k <= 22 such that n = round(|x| * 10^k) < 2^53 and
 * n / 10^k == |x|. Both n and 10^k are exact doubles and IEEE division
 * rounds correctly, so n / 10^k is the double nearest to the decimal n
 * e-k, which is what strtod reads: the form is exact. Writes n's digits
 * into dig and returns their count (and the decimal exponent in *ex), or
 * 0 when there is no such k.
 */
static int short_decimal(double ax, char *dig, int *ex)
{
    static const double p10[] = {
        1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    };
    for (int k = 1; k <= 22; k++) {
        double y = ax * p10[k];
        if (y >= MAX_EXACT)
            return 0;
        double n = floor(y + 0.5);
        if (n / p10[k] != ax)
            continue;
        char tmp[24];
        int nd = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)n);
        memcpy(dig, tmp, (size_t)nd);
        *ex = nd - 1 - k;
        return nd;
    }
    return 0;
}

/* The general path: the 17 significant digits of |x| from one snprintf,
 * rounded to 15 and to 16 and each checked with strtod, else all 17
 * (which always read back). Any decimal of at most 15 digits that reads
 * back as a normal double is its 15-digit rounding, so 15 is enough to
 * start from; a subnormal has fewer significant bits and may need only
 * one digit (5e-324), so its search starts from 1. */
static int checked_digits(double x, char *dig, int *ex)
{
    char m[40];
    snprintf(m, sizeof m, "%.16e", fabs(x));
    /* m: d.dddddddddddddddde(+|-)XX */
    char d17[18];
    d17[0] = m[0];
    memcpy(d17 + 1, m + 2, 16);
    d17[17] = 0;
    int ex17 = atoi(m + 19); /* after the e */
    for (int nd = fabs(x) < DBL_MIN ? 1 : 15; nd < 17; nd++) {
        *ex = round_digits(d17, ex17, nd, dig);
        if (reads_back(dig, nd, *ex, x))
            return nd;
        /* the 17 digits are themselves rounded: when the rest looks like
         * a half (5, 50), |x| may lie below it and the digits cut off
         * without rounding may be the ones that read back */
        if (d17[nd] == '5') {
            memcpy(dig, d17, (size_t)nd);
            *ex = ex17;
            if (reads_back(dig, nd, ex17, x))
                return nd;
        }
    }
    memcpy(dig, d17, 17);
    *ex = ex17;
    return 17;
}

/*
 * Writes a finite x that is not a small integer: the fewest significant
 * digits that strtod reads back as x (short_decimal, else
 * checked_digits), laid out as JavaScript does: plainly when the decimal
 * exponent is in -7 < exp < 21 (50568605022309650, 0.000001), else as
 * d.ddde+X (1e+21, 1e-7). The node never calls setlocale, so printf's
 * decimal point is '.'.
 */
static void put_shortest(struct enc *e, double x)
{
    char *o = e->buf + e->len;
    char dig[24];
    int ex;
    int nd = short_decimal(fabs(x), dig, &ex);
    if (nd == 0)
        nd = checked_digits(x, dig, &ex);
    if (x < 0)
        *o++ = '-';
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    if (ex >= 21 || ex <= -7) {
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, dig + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += sprintf(o, "e%+d", ex);
    } else if (ex >= nd - 1) {
        memcpy(o, dig, (size_t)nd);
        o += nd;
        for (int i = nd - 1; i < ex; i++)
            *o++ = '0';
    } else if (ex >= 0) {
        memcpy(o, dig, (size_t)ex + 1);
        o += ex + 1;
        *o++ = '.';
        memcpy(o, dig + ex + 1, (size_t)(nd - ex - 1));
        o += nd - ex - 1;
    } else {
        *o++ = '0';
        *o++ = '.';
        for (int i = -1; i > ex; i--)
            *o++ = '0';
        memcpy(o, dig, (size_t)nd);
        o += nd;
    }
    e->len = (size_t)(o - e->buf);
}

/* Writes x in the shortest form that strtod reads back as x. */
static int put_number(struct enc *e, double x)
{
    if (!isfinite(x))
        return fail(e, "Cannot serialise number: %s",
                    "must not be NaN or Inf");
    if (reserve(e, 32) < 0)
        return -1;
    if (x >= -MAX_EXACT && x <= MAX_EXACT) {
        int64_t i = (int64_t)x;
        if ((double)i == x) {
            if (i == 0 && signbit(x)) {
                memcpy(e->buf + e->len, "-0", 2);
                e->len += 2;
            } else {
                put_int(e, i);
            }
            return 0;
        }
    }
    put_shortest(e, x);
    return 0;
}

/* For each byte: 0 to copy it, else the letter of its short escape, or
 * 'u' for \u00XX. */
static const char esc[256] = {
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r',
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    'u', 'u', 'u', 'u', 0,   0,   '"', ['\\'] = '\\',
};

static int put_string(struct enc *e, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (reserve(e, len + 2) < 0)
        return -1;
    e->buf[e->len++] = '"';
    size_t i = 0;
    while (i < len) {
        size_t run = i;
        while (run < len && !esc[(unsigned char)s[run]])
            run++;
        /* room for the run was reserved: len + 2 minus what was written */
        memcpy(e->buf + e->len, s + i, run - i);
        e->len += run - i;
        if (run == len)
            break;
        unsigned char c = (unsigned char)s[run];
        /* 6 bytes for the escape, and the rest of the string reserved */
        if (reserve(e, 6 + (len - run) + 1) < 0)
            return -1;
        char *o = e->buf + e->len;
        o[0] = '\\';
        if (esc[c] != 'u') {
            o[1] = esc[c];
            e->len += 2;
        } else {
            memcpy(o + 1, "u00", 3);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            e->len += 6;
        }
        i = run + 1;
    }
    e->buf[e->len++] = '"';
    return 0;
}

static int put_value(struct enc *e, int idx, int depth);
static int put_object(struct enc *e, int idx, int depth);

/* Whether the table at idx has a metatable with __jsontype = "array".
 * `key` is the stack index of the string "__jsontype". */
static int marked_array(lua_State *L, int idx, int key)
{
    if (!lua_getmetatable(L, idx))
        return 0;
    /* stack: mt */
    lua_pushvalue(L, key);
    lua_rawget(L, -2);
    size_t n;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n)
                                                   : NULL;
    int yes = s && n == 5 && memcmp(s, "array", 5) == 0;
    lua_pop(L, 2);
    return yes;
}

/* An object key: a string, or an integer-valued number written as a
 * string. The key is at the stack top (lua_next's), never converted in
 * place. */
static int put_key(struct enc *e, lua_State *L)
{
    size_t n;
    const char *s;
    double k;
    switch (lua_type(L, -2)) {
    case LUA_TSTRING:
        s = lua_tolstring(L, -2, &n);
        return put_string(e, s, n);
    case LUA_TNUMBER:
        k = lua_tonumber(L, -2);
        if (!isfinite(k) || k != floor(k))
            return fail(e, "Cannot serialise table: %s", "a number key "
                        "must be an integer (or send it as a string)");
        if (put(e, "\"", 1) < 0 || put_number(e, k) < 0)
            return -1;
        return put(e, "\"", 1);
    default:
        return fail(e, "Cannot serialise %s: table key must be a string or "
                    "an integer", lua_typename(L, lua_type(L, -2)));
    }
}

static int put_table(struct enc *e, int idx, int depth)
{
    lua_State *L = e->L;
    if (depth > e->max_depth || !lua_checkstack(L, 4)) {
        snprintf(e->err, sizeof e->err,
                 "Cannot serialise, excessive nesting (%d)", depth);
        return -1;
    }
    int forced = marked_array(L, idx, e->jsontype);
    int is_array = 1;
    double max = 0, items = 0;
    /* stack: key, value */
    lua_pushnil(L);
    if (!forced) {
        /* a first key that is no array index makes an object at once,
         * written from that key on (one pass over the usual reply) */
        double k;
        if (!lua_next(L, idx))
            return put(e, "{}", 2); /* empty, not marked: an object */
        if (!(lua_type(L, -2) == LUA_TNUMBER &&
              (k = lua_tonumber(L, -2)) >= 1 && k == floor(k)))
            return put_object(e, idx, depth);
        /* an array key first: the scan below starts again */
        lua_pop(L, 2);
        lua_pushnil(L);
    }
    while (lua_next(L, idx)) {
        double k;
        if (lua_type(L, -2) == LUA_TNUMBER &&
            (k = lua_tonumber(L, -2)) >= 1 && k == floor(k)) {
            if (k > max)
                max = k;
            items++;
            lua_pop(L, 1);
            continue;
        }
        lua_pop(L, 2);
        if (forced)
            return fail(e, "Cannot serialise table: %s", "a table marked "
                        "as an array has a key that is not a positive "
                        "integer");
        is_array = 0;
        break;
    }
    if (is_array && (items > 0 || forced)) {
        if (max > SPARSE_SAFE && max > items * SPARSE_RATIO)
            return fail(e, "Cannot serialise table: %s",
                        "excessively sparse array");
        if (put(e, "[", 1) < 0)
            return -1;
        for (int64_t i = 1; i <= (int64_t)max; i++) {
            if (i > 1 && put(e, ",", 1) < 0)
                return -1;
            lua_rawgeti(L, idx, (int)i);
            if (put_value(e, lua_gettop(L), depth) < 0)
                return -1;
            lua_pop(L, 1);
        }
        return put(e, "]", 1);
    }
    lua_pushnil(L);
    if (!lua_next(L, idx))
        return put(e, "{}", 2);
    return put_object(e, idx, depth);
}

/* Writes the table at idx as an object, its first key and value on the
 * stack (from lua_next, which goes on from there). */
static int put_object(struct enc *e, int idx, int depth)
{
    lua_State *L = e->L;
    if (put(e, "{", 1) < 0)
        return -1;
    int first = 1;
    do {
        if (!first && put(e, ",", 1) < 0)
            return -1;
        first = 0;
        if (put_key(e, L) < 0 || put(e, ":", 1) < 0 ||
            put_value(e, lua_gettop(L), depth) < 0)
            return -1;
        lua_pop(L, 1);
    } while (lua_next(L, idx));
    return put(e, "}", 1);
}

static int put_value(struct enc *e, int idx, int depth)
{
    lua_State *L = e->L;
    size_t n;
    const char *s;
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        s = lua_tolstring(L, idx, &n);
        return put_string(e, s, n);
    case LUA_TNUMBER:
        return put_number(e, lua_tonumber(L, idx));
    case LUA_TBOOLEAN:
        return lua_toboolean(L, idx) ? put(e, "true", 4)
                                     : put(e, "false", 5);
    case LUA_TNIL:
        return put(e, "null", 4);
    case LUA_TTABLE:
        return put_table(e, idx, depth + 1);
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) /* cjson.null */
            return put(e, "null", 4);
        /* fall through */
    default:
        return fail(e, "Cannot serialise %s: type not supported",
                    lua_typename(L, lua_type(L, idx)));
    }
}

/* encode(value) -> string; upvalues: the config, "__jsontype". */
static int l_encode(lua_State *L)
{
    char stack[STACK_BUF];
    const struct config *cfg = lua_touserdata(L, lua_upvalueindex(1));
    struct enc e;
    e.L = L;
    e.buf = stack;
    e.len = 0;
    e.cap = sizeof stack;
    e.heap = 0;
    e.max_depth = cfg->max_depth;
    e.jsontype = lua_upvalueindex(2);
    e.err[0] = 0;
    lua_settop(L, 1);
    int rc = put_value(&e, 1, 0);
    if (rc == 0)
        lua_pushlstring(L, e.buf, e.len);
    if (e.heap)
        free(e.buf);
    if (rc < 0) {
        lua_settop(L, 1);
        return luaL_error(L, "%s", e.err);
    }
    return 1;
}

int ms_json_encode_to(lua_State *L, int idx, int jsontype, int max_depth,
                      int (*sink)(void *data, const char *json, size_t len),
                      void *data)
{
    char stack[STACK_BUF];
    struct enc e;
    idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
    e.L = L;
    e.buf = stack;
    e.len = 0;
    e.cap = sizeof stack;
    e.heap = 0;
    e.max_depth = max_depth;
    e.err[0] = 0;
    e.jsontype = jsontype;
    int rc = put_value(&e, idx, 0);
    int out = rc == 0 ? sink(data, e.buf, e.len) : 0;
    if (e.heap)
        free(e.buf);
    if (rc < 0)
        return luaL_error(L, "%s", e.err);
    return out;
}

/* set_max_depth(n) */
static int l_set_max_depth(lua_State *L)
{
    struct config *cfg = lua_touserdata(L, lua_upvalueindex(1));
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 1 && n <= 10000, 1, "must be in 1..10000");
    cfg->max_depth = (int)n;
    return 0;
}

int ms_json_encode_open(lua_State *L)
{
    /* stack: module table, config */
    lua_createtable(L, 0, 2);
    struct config *cfg = lua_newuserdata(L, sizeof *cfg);
    cfg->max_depth = DEFAULT_MAX_DEPTH;
    lua_pushvalue(L, -1);
    lua_pushliteral(L, "__jsontype");
    lua_pushcclosure(L, l_encode, 2);
    lua_setfield(L, -3, "encode");
    lua_pushcclosure(L, l_set_max_depth, 1);
    lua_setfield(L, -2, "set_max_depth");
    return 1;
}
