-- moonshard.flat_reply: ctx:reply's short way for the usual small reply,
-- an object of a few numbers and booleans such as { value = 3 } or
-- { ok = true, count = 2 }.
--
-- The node's encoder (runtime/lua/json_encode.c) is a classic C function:
-- a compiled handler that calls it leaves its trace there (LuaJIT stitches
-- around the call: an exit to the interpreter, the state restored from a
-- snapshot, a new trace after). Here such an object is written in Lua into
-- one string buffer, which the compiler keeps in the trace, and the bytes
-- go to C through the FFI (host.lua's Ctx:reply). Anything else gives nil
-- and goes the encoder's way, so the bytes are the encoder's in every
-- case (spec/c/test_flat_reply.c compares them on random tables):
--   - the table has no metatable (a metatable may mark an array) and one
--     to four keys, all strings (a number key may make an array or a
--     "1" key: the encoder decides);
--   - keys of at most MAX_KEY bytes, none of which the encoder escapes
--     (control characters, '"', '\\'); other bytes, UTF-8 or not, are
--     copied as they are, as the encoder copies them;
--   - values that are booleans, or integers of magnitude below 1e14 (what
--     LuaJIT's number formatting writes exactly as digits; the encoder
--     writes every integer below 2^53 so, and -0 as "-0", as LuaJIT does).
-- The code has no loop over the keys (next() four times at most): a loop
-- inside a handler's trace is one that LuaJIT will not keep in it.

local M = {}

local ok, buffer = pcall(require, "string.buffer")
if not ok then
    -- a LuaJIT without string buffers: every reply is the encoder's
    function M.encode() return nil end
    return M
end

local type, getmetatable, next, floor, byte =
    type, getmetatable, next, math.floor, string.byte

-- (four keys at most: encode's four next() calls say so)
local MAX_KEY, MAX_CACHED = 64, 1024
M.MAX_KEY = MAX_KEY

local buf = buffer.new(256)

-- [key] = '"key":', or false for a key the encoder would escape (keys
-- of up to MAX_KEY bytes); emptied when it holds MAX_CACHED keys
local quoted, nquoted = {}, 0

local function quote(k)
    local q = quoted[k]
    if q == nil then
        if #k > MAX_KEY then return false end -- not kept: it may be big
        q = '"' .. k .. '":'
        for i = 1, #k do
            local c = byte(k, i)
            if c < 32 or c == 34 or c == 92 then
                q = false
                break
            end
        end
        if nquoted >= MAX_CACHED then quoted, nquoted = {}, 0 end
        quoted[k] = q
        nquoted = nquoted + 1
    end
    return q
end

-- Bumped by each encode. A GC step in quote's allocations may run a
-- finalizer (interpreted code only), and one that replies (pcall'd, with
-- some other ctx) runs encode inside encode: the inner call resets buf
-- and writes its own reply there, and the outer one, which would append
-- to it, sees gen changed and gives nil (the encoder's way) instead.
local gen = 0

-- Writes sep, then "k":v; false when the pair is not of the kind above.
local function put(b, sep, k, v)
    if type(k) ~= "string" then return false end
    local q = quote(k)
    if not q then return false end
    local tv = type(v)
    if tv == "number" then
        if not (v > -1e14 and v < 1e14 and v == floor(v)) then
            return false
        end
        b:put(sep, q, v)
    elseif tv == "boolean" then
        b:put(sep, q, v and "true" or "false")
    else
        return false
    end
    return true
end

-- encode(msg) -> ptr, len (the bytes, valid until the next call), or nil
-- when msg is not an object of the kind above.
function M.encode(msg)
    if type(msg) ~= "table" or getmetatable(msg) ~= nil then return nil end
    local k1, v1 = next(msg)
    if k1 == nil then return nil end -- empty: the encoder's {}
    local b = buf
    local g = gen + 1
    gen = g
    b:reset()
    if not put(b, "{", k1, v1) then return nil end
    local k2, v2 = next(msg, k1)
    if k2 ~= nil then
        if not put(b, ",", k2, v2) then return nil end
        local k3, v3 = next(msg, k2)
        if k3 ~= nil then
            if not put(b, ",", k3, v3) then return nil end
            local k4, v4 = next(msg, k3)
            if k4 ~= nil then
                -- a fifth key is the encoder's
                if not put(b, ",", k4, v4) or next(msg, k4) ~= nil then
                    return nil
                end
            end
        end
    end
    b:put("}")
    if gen ~= g then return nil end -- an encode ran inside this one
    return b:ref()
end

return M
