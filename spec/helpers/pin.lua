-- The source of a strategy module that pins every shard to one member,
-- for specs that edit strategies under --watch:
--
--     helpers.write_file(dir .. "/pin.lua", pin.source("n1"))
--     pin.source("n2", true)   -- its rebalance proposes every shard that
--                              -- lives elsewhere
--
-- allocate answers the target, or nil and a reason when it is not a
-- member. The strategy's id is "pin" whatever the target, so an edit keeps
-- the type's settings fingerprint.

local format = string.format

local M = {}

local REBALANCE_NONE = [[
function methods.rebalance(_, _) return {} end
]]

local REBALANCE_OTHERS = [[
function methods:rebalance(view)
    local out = {}
    for s = 0, view.shard_count - 1 do
        if view.plan[s] and view.plan[s] ~= TARGET
            and not view.in_progress[s] then
            out[#out + 1] = s
        end
    end
    return out
end
]]

function M.source(target, moves_others)
    return format([[
local M = {}
local methods = {}
local mt = { __index = methods }
local TARGET = %q
function M.new() return setmetatable({ id = "pin" }, mt) end
function methods:allocate(_, view)
    for _, m in ipairs(view.members) do
        if m.name == TARGET then return TARGET end
    end
    return nil, TARGET .. " is not a member"
end
%sreturn M
]], target, moves_others and REBALANCE_OTHERS or REBALANCE_NONE)
end

return M
