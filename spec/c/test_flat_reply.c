/*
 * ctx:reply's short way (lua/moonshard/flat_reply.lua) against the node's
 * encoder (runtime/lua/json_encode.c): for every table it takes, its bytes
 * must be the encoder's, byte for byte; what it does not take it must
 * refuse (nil), never write differently. Edges by hand, then 300,000
 * random tables (one to six keys; keys plain, escaped, long, numbers;
 * values integers near the edges, fractions, -0, NaN, huge, booleans,
 * strings, tables, the null sentinel; metatables). Run under LuaJIT with
 * the compiler on, so that the compiled code is what is compared, and
 * once more with it off.
 */
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../../runtime/lua/json_encode.h"
#include "check.h"

static const char script[] =
    "local ffi = require 'ffi'\n"
    "local flat = require 'moonshard.flat_reply'\n"
    "local encode = encoder.encode\n"
    "local taken, refused, bad = 0, 0, 0\n"
    "local function cmp(t, want_taken)\n"
    "  local p, len = flat.encode(t)\n"
    "  if p == nil then\n"
    "    refused = refused + 1\n"
    "    if want_taken == true then\n"
    "      bad = bad + 1\n"
    "      io.stderr:write('refused: ', (pcall(encode, t)) and encode(t) or '?', '\\n')\n"
    "    end\n"
    "    return\n"
    "  end\n"
    "  taken = taken + 1\n"
    "  local got = ffi.string(p, len)\n"
    "  local ok, want = pcall(encode, t)\n"
    "  if not ok or got ~= want or want_taken == false then\n"
    "    bad = bad + 1\n"
    "    io.stderr:write('differs: ', got, ' against ', tostring(want), '\\n')\n"
    "  end\n"
    "end\n"
    /* by hand: taken */
    "cmp({ value = 3 }, true)\n"
    "cmp({ ok = true }, true)\n"
    "cmp({ ok = false, n = -7 }, true)\n"
    "cmp({ a = 0, b = -0, c = 99999999999999, d = -99999999999999 }, true)\n"
    "cmp({ ['k\\200\\255'] = 1 }, true)\n"
    "cmp({ [string.rep('k', flat.MAX_KEY)] = 1 }, true)\n"
    /* by hand: refused */
    "cmp({}, false)\n"
    "cmp({ 1, 2 }, false)\n"
    "cmp({ [1] = 1 }, false)\n"
    "cmp({ value = 1.5 }, false)\n"
    "cmp({ value = 1e14 }, false)\n"
    "cmp({ value = 0/0 }, false)\n"
    "cmp({ value = 1/0 }, false)\n"
    "cmp({ value = 'text' }, false)\n"
    "cmp({ value = {} }, false)\n"
    "cmp({ ['a\"b'] = 1 }, false)\n"
    "cmp({ ['a\\\\b'] = 1 }, false)\n"
    "cmp({ ['a\\nb'] = 1 }, false)\n"
    "cmp({ [string.rep('k', flat.MAX_KEY + 1)] = 1 }, false)\n"
    "cmp({ a = 1, b = 2, c = 3, d = 4, e = 5 }, false)\n"
    "cmp(setmetatable({ a = 1 }, {}), false)\n"
    "cmp('text', false)\n"
    "cmp(7, false)\n"
    "cmp(nil, false)\n"
    "assert(bad == 0, bad .. ' wrong by hand')\n"
    /* an encode inside an encode: a finalizer that replies, run by a GC
     * step in quote's allocation of a new key; the outer one must not
     * hand over the inner one's bytes with its own after them */
    "collectgarbage('setpause', 0)\n"
    "collectgarbage('setstepmul', 100000)\n"
    "local inner = 0\n"
    "for i = 1, 2000 do\n"
    "  local u = newproxy(true)\n"
    "  getmetatable(u).__gc = function()\n"
    "    inner = inner + 1\n"
    "    flat.encode({ x = 1 })\n"
    "  end\n"
    "  u = nil\n"
    "  local t = { a = 1 }\n"
    "  t['fin' .. i] = 2\n"
    "  cmp(t)\n"
    "end\n"
    "collectgarbage('setpause', 200)\n"
    "collectgarbage('setstepmul', 200)\n"
    "assert(inner > 0, 'no finalizer ran')\n"
    "assert(bad == 0, bad .. ' wrong with an encode inside an encode')\n"
    /* random */
    "math.randomseed(7)\n"
    "local R = math.random\n"
    "local keys = { 'value', 'ok', 'n', 'count', 'a', 'b', 'x\\127', "
    "  'y\\200', 'q\"', 'b\\\\', 't\\t', '', string.rep('z', 64), "
    "  string.rep('w', 65), 1, 2, 3.5 }\n"
    "local function value()\n"
    "  local r = R(1, 14)\n"
    "  if r == 1 then return R(-1000, 1000)\n"
    "  elseif r == 2 then return (R() < 0.5 and -1 or 1) * (1e14 - R(0, 3))\n"
    "  elseif r == 3 then return (R() < 0.5 and -1 or 1) * (1e14 + R(0, 3))\n"
    "  elseif r == 4 then return R() * 1000\n"
    "  elseif r == 5 then return -0.0\n"
    "  elseif r == 6 then return 2 ^ R(40, 60)\n"
    "  elseif r == 7 then return R() < 0.5\n"
    "  elseif r == 8 then return 'v' .. R(100)\n"
    "  elseif r == 9 then return { R(9) }\n"
    "  elseif r == 10 then return require('cjson').null\n"
    "  elseif r == 11 then return 0/0\n"
    "  else return R(-2^31, 2^31) end\n"
    "end\n"
    "for i = 1, 300000 do\n"
    "  local t = {}\n"
    "  for _ = 1, R(1, 6) do t[keys[R(#keys)]] = value() end\n"
    "  if R(50) == 1 then setmetatable(t, {}) end\n"
    "  cmp(t)\n"
    "end\n"
    "assert(bad == 0, bad .. ' of ' .. taken .. ' differ')\n"
    /* the random tables must exercise both ways */
    "assert(taken > 20000 and refused > 20000, taken .. ' taken, ' .. "
    "  refused .. ' refused')\n"
    "return taken\n";

static int run(int jit_on)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_pushcfunction(L, ms_json_encode_open);
    lua_call(L, 0, 1);
    lua_setglobal(L, "encoder");
    char code[512];
    snprintf(code, sizeof code,
             "package.path = '%s/lua/?.lua;' .. package.path\n"
             "jit.%s()\n",
             MS_SOURCE_DIR, jit_on ? "on" : "off");
    int ok = luaL_dostring(L, code) == 0;
    CHECK(ok);
    int rc = luaL_dostring(L, script);
    if (rc != 0)
        fprintf(stderr, "jit %s: %s\n", jit_on ? "on" : "off",
                lua_tostring(L, -1));
    CHECK(rc == 0);
    lua_close(L);
    return rc == 0;
}

int main(void)
{
    run(1);
    run(0);
    CHECK_DONE();
}
