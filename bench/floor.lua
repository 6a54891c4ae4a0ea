-- floor: the bare floor `moonshard-bench local` compares against: a
-- LuaJIT loop that decodes the same JSON payload and calls the same
-- behavior's receive on a state found by id, with no runtime around it.
-- The host runs it in a fresh Lua VM of its own.

local cjson = require "cjson"
local now = require("moonshard.clock").now

local M = {}

-- arg: "MODULE IDS MESSAGES PAYLOAD" -> "messages_per_second"
function M.floor(arg)
    local module, ids, messages, payload = arg:match("^(%S+) (%d+) (%d+) (.*)$")
    ids, messages = tonumber(ids), tonumber(messages)
    local behavior = require(module)
    local decode = cjson.new().decode
    local ctx = { reply = function() end }
    local names, states = {}, {}
    for i = 1, ids do
        names[i] = "c-" .. i
        states[names[i]] = behavior.init(ctx)
    end
    local receive = behavior.receive
    local t0 = now()
    for i = 1, messages do
        local st = states[names[(i - 1) % ids + 1]]
        receive(st, decode(payload), ctx)
    end
    local t = now() - t0
    return tostring(messages / t)
end

-- Same argument: the floor from bytes. A message reaches a runtime as
-- bytes, its entity's id as bytes too: this loop takes both from C memory
-- each message (ffi.string, which interns them as Lua strings) before it
-- finds the state and decodes; the bare floor above uses ids and a
-- payload interned before its clock starts. (The runtime finds the state
-- another way, by a hash of the id's bytes in C: this is a decomposition
-- of the floor's advantage, not a bound on the runtime.)
-- With the payload of an ask, ctx:reply encodes its reply with the
-- runtime's own encoder (moonshard.encoder), as an ask must.
function M.bytes(arg)
    local module, ids, messages, payload = arg:match("^(%S+) (%d+) (%d+) (.*)$")
    ids, messages = tonumber(ids), tonumber(messages)
    local ffi = require "ffi"
    local ffi_string = ffi.string
    local encode = require("moonshard.encoder").encode
    local behavior = require(module)
    local decode = cjson.new().decode
    local ctx = { reply = function(_, msg) encode(msg) end }
    local STRIDE = 32
    local idbuf = ffi.new("char[?]", ids * STRIDE)
    local idlen = ffi.new("uint8_t[?]", ids)
    local states = {}
    for i = 1, ids do
        local name = "c-" .. i
        ffi.copy(idbuf + (i - 1) * STRIDE, name, #name)
        idlen[i - 1] = #name
        states[name] = behavior.init(ctx)
    end
    -- a string initializer copies the string and its terminating zero,
    -- whatever the size of a char[?]: room for both
    local plen = #payload
    local pbuf = ffi.new("char[?]", plen + 1, payload)
    local receive = behavior.receive
    local t0 = now()
    for i = 1, messages do
        local k = (i - 1) % ids
        local st = states[ffi_string(idbuf + k * STRIDE, idlen[k])]
        receive(st, decode(ffi_string(pbuf, plen)), ctx)
    end
    local t = now() - t0
    return tostring(messages / t)
end

-- Same argument: the rate of the floor's cjson.decode of the payload alone
-- (what the floor's loop is made of, printed beside it).
function M.decode(arg)
    local messages, payload = arg:match("^%S+ %d+ (%d+) (.*)$")
    messages = tonumber(messages)
    local decode = cjson.new().decode
    local t0 = now()
    for _ = 1, messages do
        decode(payload)
    end
    return tostring(messages / (now() - t0))
end

return M
