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
