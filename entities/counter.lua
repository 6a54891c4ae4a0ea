-- entities/counter.lua: the counter from DESIGN.md §3, plus reset and stop.
--
-- Messages:
--   incr {by = n?}  add `by` (a number, default 1); no reply (benchmarked)
--   get             reply {value = n}
--   reset           set to 0; reply {value = 0}
--   stop            passivate after this message; reply {ok = true}

local type = type
local error = error
local tostring = tostring

local M = {}

function M.init()
    return { value = 0 }
end

function M.receive(state, msg, ctx)
    local t = msg.type
    if t == "incr" then
        local by = msg.by
        if by == nil then
            state.value = state.value + 1
        elseif type(by) == "number" then
            state.value = state.value + by
        else
            error("incr: 'by' must be a number, got " .. type(by))
        end
    elseif t == "get" then
        ctx:reply({ value = state.value })
    elseif t == "reset" then
        state.value = 0
        ctx:reply({ value = 0 })
    elseif t == "stop" then
        ctx:stop()
        ctx:reply({ ok = true })
    else
        error("unknown message type: " .. tostring(t))
    end
end

return M
