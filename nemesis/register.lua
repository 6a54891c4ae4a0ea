-- nemesis/register.lua: the compare-and-set register of the nemesis
-- workload (type Register, persistence = "events"). The runtime takes a
-- message's op id out before the handler sees it, so the client sends it
-- a second time as the field `op`, and each event carries it as `op_id`
-- (nemesis/README.md, "Journal dump").
--
-- Commands:
--   cas {expect, value, op}  swaps when the value is `expect` (null: never
--                            written): one event {type = "set", value,
--                            op_id}, reply {ok = true}; else no event and
--                            reply {ok = false, current}
--   write {value, op}        one event {type = "set", value, op_id}; reply
--                            {ok = true}
--   read                     no event; reply {value} (null: never written)
--   get                      the same as read (the recovery probe)

local cjson = require "cjson"

local M = {}

function M.init()
    return { count = 0 }
end

-- the register's value as a reply field: JSON null when never written
local function value_of(state)
    if state.value == nil then return cjson.null end
    return state.value
end

function M.command(state, cmd, ctx)
    local t = cmd.type
    if t == "cas" then
        local expect = cmd.expect
        if expect == cjson.null then expect = nil end
        if state.value ~= expect then
            ctx:reply({ ok = false, current = value_of(state) })
            return nil
        end
        ctx:reply({ ok = true })
        return { { type = "set", value = cmd.value, op_id = cmd.op } }
    elseif t == "write" then
        ctx:reply({ ok = true })
        return { { type = "set", value = cmd.value, op_id = cmd.op } }
    end
    ctx:reply({ value = value_of(state) })
    return nil
end

function M.apply(state, ev)
    state.count = state.count + 1
    state.value = ev.value
    return state
end

return M
