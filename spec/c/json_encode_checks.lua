-- The Lua half of test_json_encode.c: the node's encoder (the globals
-- encode and set_max_depth), lua-cjson's decoder (cjson_decode) and the
-- strict check (check_value), set up by the C test.
-- luacheck: globals encode set_max_depth cjson_decode check_value

local enc, decode = encode, cjson_decode
local null = require("cjson").null

local function eq(want, v)
    local got = enc(v)
    if got ~= want then
        error(want .. " expected, got " .. got, 2)
    end
end

local function refused(pattern, v)
    local ok, e = pcall(enc, v)
    if ok then error("encoded, should raise: " .. e, 2) end
    if not e:find(pattern, 1, true) then error("wrong error: " .. e, 2) end
end

-- numbers: the examples of issue 9 and the edges
eq("1234567890123456", 1234567890123456)
eq("3.141592653589793", 3.141592653589793)
eq("0.30000000000000004", 0.1 + 0.2)
eq("1764614400123456", 1764614400123456)
eq("9007199254740992", 2 ^ 53)
eq("-9007199254740992", -2 ^ 53)
eq("9007199254740994", 2 ^ 53 + 2)
eq("1000000000000000", 1e15)
eq("0.1", 0.1)
eq("1e+21", 1e21)
eq("1e-7", 1e-7)
eq("0.000001", 1e-6)
eq("100000000000000000000", 1e20)
eq("50568605022309650", 50568605022309650)
eq("5e-324", 5e-324)
eq("2.5e-323", 2.5e-323)
eq("1.7976931348623157e+308", 1.7976931348623157e308)
eq("-1.5e-300", -1.5e-300)
eq("123456789", 123456.789e3)
eq("1e+308", 1e308)
eq("0", 0)
eq("-0", -0.0)
eq("-42", -42)
eq("-1.5", -1.5)
assert(1 / decode(enc(-0.0)) == -math.huge, "-0 decodes to -0")
refused("must not be NaN or Inf", 0 / 0)
refused("must not be NaN or Inf", math.huge)
refused("must not be NaN or Inf", { a = { -math.huge } })

-- scalars
eq("true", true)
eq("false", false)
eq("null", nil)
eq("null", null)
eq('""', "")

-- strings: every byte below 0x20 escaped, '/' and 0x7f not
eq('"a/b\127"', "a/b\127")
eq([["\"\\\b\f\n\r\t\u0000\u001f\u000b"]], '"\\\b\f\n\r\t\0\31\11')
do
    local t = {}
    for b = 0, 255 do t[#t + 1] = string.char(b) end
    local s = table.concat(t)
    local e = enc(s)
    assert(not e:sub(2, -2):find("[%z\1-\31]"), "a raw control byte")
    assert(decode(e) == s, "all 256 bytes round-trip")
    assert(check_value(e), "the strict check accepts all 256 bytes")
    assert(decode(enc(s:rep(300))) == s:rep(300), "a long string")
    assert(check_value(enc({ [s] = s })), "and as a key")
end
eq('"\255\254"', "\255\254") -- not UTF-8: the bytes are kept

-- tables: lua-cjson's rules
eq("{}", {})
eq("[1,2,3]", { 1, 2, 3 })
eq("[null,null,3]", { nil, nil, 3 })
eq("[null,null,null,null,null,null,true]", { [7] = true })
eq('{"a":1}', { a = 1 })
eq('{"0":true}', { [0] = true })
eq('{"-3":true}', { [-3] = true })
eq('{"-1e+300":true}', { [-1e300] = true })
do
    local e = enc({ [1] = "x", k = "y" })
    assert(e == '{"1":"x","k":"y"}' or e == '{"k":"y","1":"x"}', e)
end
eq("[2,3,4,5,6,null,null,null,null,null,1]", { [11] = 1, 2, 3, 4, 5, 6 })
refused("excessively sparse array", { [11] = 1 })
refused("excessively sparse array", { [1e300] = 1, [1] = 1 })
refused("a number key must be an integer", { [1.5] = 1 })
refused("a number key must be an integer", { [-0.5] = 1 })
refused("table key must be a string or an integer", { [true] = 1 })
refused("Cannot serialise function: type not supported", { f = print })
refused("Cannot serialise thread", coroutine.create(print))
refused("Cannot serialise userdata", io.stdout)
do
    local ffi = require "ffi"
    refused("Cannot serialise", ffi.new("int[1]"))
end
-- metamethods are not consulted: raw access only
eq("{}", setmetatable({}, { __index = { a = 1 } }))

-- the array marker (moonshard.json)
local array_mt = { __jsontype = "array" }
eq("[]", setmetatable({}, array_mt))
eq("[1,2]", setmetatable({ 1, 2 }, array_mt))
eq('[[[{"a":[]}]]]', { { { { a = setmetatable({}, array_mt) } } } })
refused("not a positive integer", setmetatable({ a = 1 }, array_mt))
eq("{}", setmetatable({}, { __jsontype = "object" }))

-- nesting: the limit counts the top table as 1; a cycle hits it
set_max_depth(3)
eq('{"a":{"b":[1]}}', { a = { b = { 1 } } })
refused("excessive nesting (4)", { a = { b = { {} } } })
do
    local t = {}
    t.self = t
    refused("excessive nesting", t)
end
set_max_depth(64)
do
    local t = {}
    local c = t
    for _ = 1, 63 do
        c[1] = {}
        c = c[1]
    end
    assert(enc(t) == ("["):rep(63) .. "{}" .. ("]"):rep(63), enc(t))
    c[1] = {}
    refused("excessive nesting (65)", t)
end
do
    local t = {}
    t[1] = t
    refused("excessive nesting", t)
end

-- a large message outgrows the stack buffer
do
    local t = {}
    for i = 1, 20000 do t[i] = { i, "x" .. i, i + 0.5 } end
    local e = enc(t)
    local d = decode(e)
    assert(#d == 20000 and d[20000][3] == 20000.5 and d[777][2] == "x777")
    assert(check_value(e), "the strict check accepts it")
end

-- after errors the encoder still works
eq('{"ok":true}', { ok = true })
