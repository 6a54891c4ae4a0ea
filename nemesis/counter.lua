-- nemesis/counter.lua: the event-sourced counter of the nemesis workload
-- (type Counter, persistence = "events").
--
-- Commands:
--   add {n, op}   one event {type = "added", n, op_id = op}; reply {total}
--   get           no event; reply {total} (the recovery probe)
-- The op id comes a second time as `op` (see nemesis/register.lua).

local M = {}

function M.init()
    return { total = 0 }
end

function M.command(state, cmd, ctx)
    if cmd.type == "add" then
        local n = tonumber(cmd.n) or 1
        ctx:reply({ total = state.total + n })
        return { { type = "added", n = n, op_id = cmd.op } }
    end
    ctx:reply({ total = state.total })
    return nil
end

function M.apply(state, ev)
    state.total = state.total + ev.n
    return state
end

return M
