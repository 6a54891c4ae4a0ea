/*
 * json_encode.h -- the JSON encoder of every message a node sends: exact
 * numbers, strict strings, lua-cjson's table rules (DESIGN G9).
 *
 * lua-cjson 2.1.0 (Debian's) writes numbers with 14 significant digits, so
 * 1234567890123456 left a handler as 1.2345678901235e+15. This encoder
 * writes what the decoder (lua-cjson, which reads numbers with strtod)
 * turns back into the same double, bit for bit:
 *
 * - An integer-valued double with |x| <= 2^53 is written as an integer
 *   without exponent (1e15 -> 1000000000000000); -0 is written "-0" (valid
 *   JSON that decodes to -0 again). Any other double gets the fewest
 *   significant digits (at most 17) that strtod reads back bit-exact,
 *   laid out as JavaScript does: plainly when the decimal exponent is in
 *   -7 < e < 21 (0.1, 0.30000000000000004, 50568605022309650), else with
 *   an exponent (1e+21, 1e-7). NaN and the infinities are refused: JSON
 *   has none.
 * - Strings: '"', '\\' and the bytes below 0x20 are escaped (\b \f \n \r
 *   \t, else \u00XX); every other byte is copied as it is, '/', 0x7f and
 *   bytes that are not UTF-8 included (lua-cjson decodes them the same way,
 *   and the node's strict check, runtime/core/jsoncheck.c, accepts them).
 * - Tables: an array when every key is a positive integer, of length the
 *   largest key, holes written null; refused as "excessively sparse" when
 *   the largest key is above 10 and above twice the number of keys
 *   (lua-cjson's defaults). Any other table is an object; its keys must be
 *   strings or integer-valued numbers, the latter written as strings
 *   ({[7] = true, x = 1} -> {"7":true,"x":1}). An empty table is {}, unless
 *   its metatable has __jsontype = "array" (moonshard.json.empty_array,
 *   moonshard.json.array(t)): such a table is always an array.
 * - nil and lua-cjson's null (a NULL light userdata) are null; functions,
 *   threads, userdata and other light userdata are refused.
 * - Tables nested deeper than the limit (the node's json_max_depth, the top
 *   table counting 1) are refused, which also stops a table that contains
 *   itself.
 *
 * Errors are raised as Lua errors with lua-cjson's wording ("Cannot
 * serialise function: type not supported"). The encoder is a leaf: it never
 * calls back into Lua (no metamethods, raw access only).
 */
#ifndef MS_LUA_JSON_ENCODE_H
#define MS_LUA_JSON_ENCODE_H

#include <lua.h>

/*
 * lua_CFunction: pushes a table with the encoder of one lua_State:
 *   encode(value) -> string            raises on a value it cannot write
 *   set_max_depth(n)                    nesting limit, n >= 1 (default 64)
 * Each call makes a new encoder with its own depth limit.
 */
int ms_json_encode_open(lua_State *L);

/*
 * Encodes the value at `idx` as encode() does, with nesting limit
 * `max_depth`, and hands the text to sink(data, json, len) without making
 * a Lua string of it; returns what sink returned. `jsontype` is the index
 * (an upvalue's, say) of the string "__jsontype". Raises the encode error
 * (from a lua_CFunction only).
 */
int ms_json_encode_to(lua_State *L, int idx, int jsontype, int max_depth,
                      int (*sink)(void *data, const char *json, size_t len),
                      void *data);

#endif
