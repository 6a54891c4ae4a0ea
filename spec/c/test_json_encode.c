/*
 * The node's JSON encoder (runtime/lua/json_encode.c), driven through a
 * LuaJIT state: exact numbers (a property test over random doubles,
 * decoded again by lua-cjson and by strtod), strings with every byte,
 * lua-cjson's table rules, the array marker, the depth limit and the
 * errors. Whatever it writes must pass the node's strict check.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../../runtime/core/jsoncheck.h"
#include "../../runtime/lua/json_encode.h"
#include "check.h"

static lua_State *L;

/* encode(x) as a C string (static buffer), or NULL when it raised (the
 * message then in `err`). */
static char out[4096], err[256];

static const char *encode_number(double x)
{
    /* stack: encode, x -> text */
    lua_getglobal(L, "encode");
    lua_pushnumber(L, x);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        snprintf(err, sizeof err, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return NULL;
    }
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    snprintf(out, sizeof out, "%.*s", (int)n, s);
    lua_pop(L, 1);
    return out;
}

/* lua-cjson's decode of `text`, a number. */
static double cjson_decode(const char *text)
{
    lua_getglobal(L, "cjson_decode");
    lua_pushstring(L, text);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        fprintf(stderr, "decode %s: %s\n", text, lua_tostring(L, -1));
        lua_pop(L, 1);
        return NAN;
    }
    double v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int same_bits(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* The significant digits of a number's text: without sign, point,
 * exponent, leading and trailing zeros. */
static int significant_digits(const char *s)
{
    char d[40];
    int n = 0;
    for (; *s && *s != 'e' && *s != 'E'; s++)
        if (*s >= '0' && *s <= '9' && (n > 0 || *s != '0'))
            d[n++] = *s;
    while (n > 0 && d[n - 1] == '0')
        n--;
    return n;
}

/* x is written so that strtod and lua-cjson read back the same bits, as
 * an integer when it is one within 2^53, and the strict check accepts
 * it. */
static int exact(double x)
{
    const char *s = encode_number(x);
    if (!s)
        return 0;
    int ok = same_bits(strtod(s, NULL), x) && same_bits(cjson_decode(s), x)
             && ms_json_check(s, strlen(s), 1, NULL, NULL) == MS_JSON_VALUE;
    /* never more significant digits than the shortest %.Ng that reads
     * back (N from 1: a subnormal such as 5e-324 may need only one) */
    int prec = 1;
    char ref[40];
    for (; prec < 17; prec++) {
        snprintf(ref, sizeof ref, "%.*g", prec, x);
        if (same_bits(strtod(ref, NULL), x))
            break;
    }
    ok = ok && significant_digits(s) <= prec;
    if (x == floor(x) && fabs(x) <= 9007199254740992.0)
        ok = ok && strpbrk(s, ".eE") == NULL;
    if (!ok)
        fprintf(stderr, "not exact: %.17g written %s\n", x, s);
    return ok;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_rand(void)
{
    /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dULL;
}

static int lua_ok(const char *chunk)
{
    if (luaL_dostring(L, chunk) != 0) {
        fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
        return 0;
    }
    return 1;
}

/* check_value(text) -> whether the strict check accepts it */
static int l_check_value(lua_State *S)
{
    size_t n;
    const char *s = luaL_checklstring(S, 1, &n);
    lua_pushboolean(S, ms_json_check(s, n, 64, NULL, NULL) != MS_JSON_BAD);
    return 1;
}

int main(void)
{
    L = luaL_newstate();
    luaL_openlibs(L);
    lua_pushcfunction(L, ms_json_encode_open);
    lua_call(L, 0, 1);
    lua_getfield(L, -1, "encode");
    lua_setglobal(L, "encode");
    lua_getfield(L, -1, "set_max_depth");
    lua_setglobal(L, "set_max_depth");
    lua_pop(L, 1);
    lua_pushcfunction(L, l_check_value);
    lua_setglobal(L, "check_value");
    CHECK(lua_ok("local c = require('cjson').new()\n"
                 "c.decode_max_depth(1000)\n"
                 "cjson_decode = c.decode"));

    /* edges, then 200,000 random finite bit patterns */
    static const double edges[] = {
        0.0, 1.0, -1.0, 0.1, 0.2, 0.30000000000000004, 1.0 / 3,
        3.141592653589793, 1234567890123456.0, 1764614400123456.0,
        9007199254740992.0, 9007199254740993.0, 9007199254740994.0,
        -9007199254740992.0, -9007199254740994.0, 1e15, 1e16, 1e17, 1e21,
        1e22, 1e23, 1e-7, 1e-5, 1e308, 1.7976931348623157e308,
        -1.7976931348623157e308, 5e-324, -5e-324, 2.2250738585072014e-308,
        2.225073858507201e-308, 123456789012345678.0, 4.35, 0.000001,
        -123.456, 18446744073709551616.0, 9223372036854775807.0,
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        CHECK(exact(edges[i]));
    CHECK(encode_number(-0.0) && strcmp(out, "-0") == 0);
    CHECK(same_bits(cjson_decode("-0"), -0.0));

    int bad = 0, tried = 0;
    while (tried < 200000) {
        uint64_t bits = next_rand();
        double x;
        memcpy(&x, &bits, sizeof x);
        if (!isfinite(x))
            continue;
        tried++;
        if (!exact(x) && ++bad > 10)
            break;
    }
    CHECK(bad == 0);
    /* integers: random ones within 2^53, and doubles with few digits */
    for (int i = 0; i < 100000 && !bad; i++) {
        int64_t k = (int64_t)(next_rand() % (1ULL << 54)) - (1LL << 53);
        double d = (double)(int64_t)(next_rand() % 100000000) /
                   (double)(1 + next_rand() % 1000);
        if (!exact((double)k) || !exact(d))
            bad++;
    }
    CHECK(bad == 0);

    CHECK(encode_number(NAN) == NULL && strstr(err, "NaN or Inf"));
    /* tables, strings, errors: in Lua (json_encode_checks.lua) */
    CHECK(lua_ok("dofile('" MS_SPEC_C_DIR "/json_encode_checks.lua')"));
    lua_close(L);
    CHECK_DONE();
}
