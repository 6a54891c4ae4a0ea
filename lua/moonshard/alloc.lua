-- moonshard.alloc: runs the allocation strategies on the coordinator.
-- The host calls configure() once with the loaded config and allocate()
-- for each unowned shard; a strategy that raises, returns nothing or
-- returns a member that is not in the view is refused with a one-line
-- reason, and the coordinator never applies such a decision.

local cjson = require "cjson.safe"

local type, pcall, ipairs, tostring = type, pcall, ipairs, tostring

local M = {}

local strategies = {} -- [entity type name] = allocation strategy

function M.configure(cfg)
    for _, e in ipairs(cfg.entity_list) do
        strategies[e.name] = e.allocation
    end
end

-- The id of a type's strategy (part of its settings fingerprint).
function M.strategy_id(type_name)
    local s = strategies[type_name]
    return s and s.id or "least_loaded"
end

-- view_json: {"entity_type":..,"shard_count":N,"members":[{name, address,
-- uid, roles:[..], weight, version, up_number, status, reachable}, ..],
-- "plan":[[shard, name], ..]} with members oldest first. Returns the chosen
-- member's name, or nil and a reason.
function M.allocate(type_name, shard, view_json)
    local s = strategies[type_name]
    if not s then
        return nil, "no allocation strategy for type " .. tostring(type_name)
    end
    local v, err = cjson.decode(view_json)
    if type(v) ~= "table" then
        return nil, "bad view: " .. tostring(err)
    end
    local plan, names = {}, {}
    for _, e in ipairs(v.plan) do
        plan[e[1]] = e[2]
    end
    for _, m in ipairs(v.members) do
        local set = {}
        for _, r in ipairs(m.roles) do set[r] = true end
        m.roles = set
        names[m.name] = true
    end
    local view = { entity_type = v.entity_type, shard_count = v.shard_count,
                   members = v.members, plan = plan, in_progress = {} }
    local ok, name, why = pcall(s.allocate, s, shard, view)
    if not ok then
        return nil, "strategy " .. tostring(s.id) .. " raised: "
            .. tostring(name)
    end
    if type(name) ~= "string" then
        return nil, "strategy " .. tostring(s.id) .. " gave no member: "
            .. tostring(why or name)
    end
    if not names[name] then
        return nil, "strategy " .. tostring(s.id)
            .. " returned unknown member '" .. name .. "'"
    end
    return name
end

return M
